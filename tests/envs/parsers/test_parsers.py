import json
import os
import re

import pytest

from agentfly_envs.parsers import PARSERS, ToolCall, get_parser, parse_message
from tests.envs.hostile import HOSTILE_ACTIONS

CALC = ToolCall("calculator", {"expression": "2+2"})
ANSWER = ToolCall("answer", {"answer": "4"})


@pytest.mark.parametrize("name", list(PARSERS))
@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
def test_no_parser_raises_on_hostile_output(name, action):
    result = get_parser(name).parse(action)
    assert isinstance(result.content, str)
    assert all(isinstance(error, str) and error for error in result.errors)


@pytest.mark.parametrize("name", ["hermes", "react", "tool_calls"])
def test_format_then_parse_round_trips(name):
    parser = get_parser(name)
    result = parser.parse(parser.format_calls([CALC, ANSWER], thought="Adding."))
    assert [(c.name, c.arguments) for c in result.calls] == [
        (CALC.name, CALC.arguments),
        (ANSWER.name, ANSWER.arguments),
    ]
    assert not result.errors


def test_code_format_round_trips_python_calls_only():
    parser = get_parser("code")
    call = ToolCall("python", {"code": "x = 2\nprint(x * 21)"})
    assert parser.parse(parser.format_calls([call])).calls[0].arguments == call.arguments
    with pytest.raises(ValueError, match="python"):
        parser.format_calls([CALC])


def test_hermes_several_calls_content_and_errors():
    text = (
        "I will compute both.\n"
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2",}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"3+3\\"}"}\n</tool_call>'
    )
    result = get_parser("hermes").parse(text)
    assert result.content == "I will compute both."
    assert [c.arguments["expression"] for c in result.calls] == ["1+1", "3+3"]
    assert len(result.errors) == 1 and "tool call 2 is not valid JSON" in result.errors[0]
    assert result.attempted_call


def test_hermes_accepts_unclosed_final_tag_and_parameters_alias():
    result = get_parser("hermes").parse('<tool_call>{"name": "answer", "parameters": {"answer": "7"}}')
    assert result.calls[0].arguments == {"answer": "7"}


def test_text_without_calls_is_a_final_answer():
    for name in PARSERS:
        result = get_parser(name).parse("The answer is \\boxed{4}.")
        assert not result.attempted_call
        assert result.content == "The answer is \\boxed{4}."


def test_react_json_plain_and_missing_input():
    parser = get_parser("react")
    text = (
        "Thought: compute\nAction: calculator\nAction Input: 6*7\n"
        'Observation: 42\nThought: again\nAction: calculator\nAction Input: {"expression": "1+1"}\n'
    )
    result = parser.parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == [
        ("calculator", "6*7"),
        ("calculator", {"expression": "1+1"}),
    ]
    missing = parser.parse("Thought: hmm\nAction: calculator\n")
    assert not missing.calls and "without an 'Action Input:'" in missing.errors[0]
    final = parser.parse(parser.format_final("\\boxed{4}"))
    assert not final.attempted_call and "Final Answer: \\boxed{4}" in final.content


def test_react_instructions_list_tools():
    from agentfly_envs.tools import get_tool

    text = get_parser("react").instructions([get_tool("calculator").schema])
    assert "- calculator: Evaluate an arithmetic expression" in text
    assert "Action Input:" in text
    assert get_parser("hermes").instructions([]) is None


def test_code_blocks_and_unclosed_block():
    result = get_parser("code").parse("Check:\n```python\nprint(1)\n```\nand\n```py\nprint(2)\n```")
    assert [c.arguments["code"] for c in result.calls] == ["print(1)", "print(2)"]
    assert all(c.name == "python" for c in result.calls)
    assert "not closed" in get_parser("code").parse("```python\nprint(1)").errors[0]


def test_structured_message_forms():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1"}'}},
            {"type": "function", "function": {"name": "answer", "arguments": {"answer": "1"}}},
            {"type": "function", "function": {"arguments": {}}},
        ],
    }
    result = parse_message(message)
    assert result.content == ""
    assert (result.calls[0].id, result.calls[0].name) == ("c1", "calculator")
    assert result.calls[1].arguments == {"answer": "1"}
    assert len(result.errors) == 1 and "has no 'name'" in result.errors[0]
    # every parser reads structured messages the same way
    for name in PARSERS:
        assert [c.name for c in get_parser(name).parse(message).calls] == ["calculator", "answer"]


def test_tool_calls_parser_writes_openai_messages():
    message = get_parser("tool_calls").format_calls([CALC])
    assert message["role"] == "assistant"
    assert message["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "2+2"}}
    json.dumps(message)  # serialisable


HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
"""What the hermes parser's ``str.find`` scan must find: the regular expression it replaced."""


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no call",
        "<tool_call>",
        "</tool_call>",
        "a<tool_call>b</tool_call>c<tool_call>d</tool_call>e",
        "a<tool_call>b<tool_call>c</tool_call>d</tool_call>e",
        "<tool_call></tool_call><tool_call></tool_call>",
        "x<tool_call>left open\n</tool_call",
        "<tool_call<tool_call>>tool_call></tool_call>>",
        *(action for action in HOSTILE_ACTIONS if isinstance(action, str)),
    ],
)
def test_hermes_finds_the_blocks_and_the_text_outside_them_as_its_regular_expression_did(text):
    bodies, outside = get_parser("hermes")._blocks(text)
    assert bodies == [match.group(1) for match in HERMES_BLOCK.finditer(text)]
    assert outside == HERMES_BLOCK.sub("", text)


def test_a_forked_child_draws_other_call_ids_than_its_parent():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out without running pytest's exit handlers
        os.write(write, ToolCall("calculator", {}).id.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    parent = ToolCall("calculator", {}).id  # the id the child would have drawn, had it kept the parent's state
    assert re.fullmatch(r"call_[0-9a-f]{12}", child) and child != parent
