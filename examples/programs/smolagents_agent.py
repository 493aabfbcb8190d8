"""An agent written with smolagents: a ``ToolCallingAgent`` with a calculator tool, on the run's endpoint.

Train it: ``python -m agentfly_train --config quickstart agent.program=examples/programs/smolagents_agent.py:solve``
(needs the ``programs`` extra).
"""

from smolagents import OpenAIServerModel, ToolCallingAgent, tool

from agentfly_envs.tools import ToolError
from agentfly_envs.tools.calculator import evaluate, format_number


@tool
def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression.

    Args:
        expression: Digits and + - * / ( ), e.g. 6*7+17.
    """
    try:
        return format_number(evaluate(expression))
    except ToolError as error:
        return f"Error: {error}"


def solve(endpoint, task):
    """Runs the agent on the task's question; its final answer is the episode's answer."""
    model = OpenAIServerModel(model_id=endpoint.model, api_base=endpoint.base_url, api_key=endpoint.api_key)
    agent = ToolCallingAgent(tools=[calculator], model=model, max_steps=3, verbosity_level=-1)
    return str(agent.run(task["question"]))
