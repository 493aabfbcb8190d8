"""An agent written with the ``openai`` SDK: a chat loop that calls a calculator tool and answers.

Train it: ``python -m agentfly_train --config quickstart agent.program=examples/programs/openai_sdk.py:solve``.
"""

from openai import OpenAI

from agentfly_envs.tools import ToolError
from agentfly_envs.tools.calculator import evaluate, format_number

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression such as 6*7+17.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}


def calculator(expression: str) -> str:
    """The value of an arithmetic expression of digits and + - * / ( ), or why it has none."""
    try:
        return format_number(evaluate(expression))
    except ToolError as error:
        return f"Error: {error}"


def solve(endpoint, task):
    """Answers the task's question, calling the calculator as the model asks; returns the answer text."""
    import json

    client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
    messages = [{"role": "user", "content": task["question"]}]
    for _ in range(4):
        reply = client.chat.completions.create(model=endpoint.model, messages=messages, tools=[CALCULATOR])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            result = calculator(str(arguments.get("expression", ""))) if isinstance(arguments, dict) else "Error"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""
