"""The ``gui`` parser (agent.agent_type=gui): UI-TARS actions and Qwen2.5-VL computer_use calls as web tool calls."""

import pytest

from agentfly_envs.parsers import GuiParser, ToolCall

PARSER = GuiParser()


@pytest.mark.parametrize(
    ("action", "call"),
    [
        ("click(start_box='(235,512)')", ("click", {"x": 235, "y": 512})),
        ("click(start_box='<|box_start|>(235,512)<|box_end|>')", ("click", {"x": 235, "y": 512})),
        ("left_single(start_box='(10,20,30,40)')", ("click", {"x": 20, "y": 30})),  # a box: its centre
        ("click(point='<point>7 9</point>')", ("click", {"x": 7, "y": 9})),
        ("click(element=9)", ("click", {"element": 9})),
        ("type(content='Myron\\n')", ("type", {"text": "Myron\n"})),
        ('type(content="it\'s", element=5)', ("type", {"text": "it's", "element": 5})),
        ("hotkey(key='ctrl a')", ("press", {"key": "ctrl a"})),
        ("scroll(start_box='(80,100)', direction='down')", ("scroll", {"direction": "down", "x": 80, "y": 100})),
        ("drag(start_box='(1,2)')", ("drag", {"x": 1, "y": 2})),  # not a web tool: the env says so
    ],
)
def test_ui_tars_actions_become_web_tool_calls(action, call):
    result = PARSER.parse(f"Thought: I see it.\nAction: {action}")
    assert [(c.name, c.arguments) for c in result.calls] == [call] and not result.errors
    assert result.content == "Thought: I see it."


@pytest.mark.parametrize(
    ("arguments", "call"),
    [
        ({"action": "left_click", "coordinate": [40, 137]}, ("click", {"x": 40, "y": 137})),
        ({"action": "type", "text": "hi"}, ("type", {"text": "hi"})),
        ({"action": "key", "keys": ["ctrl", "a"]}, ("press", {"key": "ctrl+a"})),
        (
            {"action": "scroll", "coordinate": [80, 100], "pixels": -50},
            ("scroll", {"x": 80, "y": 100, "direction": "down"}),
        ),
    ],
)
def test_qwen25_vl_computer_use_calls_become_web_tool_calls(arguments, call):
    text = '<tool_call>{"name": "computer_use", "arguments": ' + __import__("json").dumps(arguments) + "}</tool_call>"
    result = PARSER.parse(text)
    assert [(c.name, c.arguments) for c in result.calls] == [call] and not result.errors


def test_finishing_is_the_final_answer_and_malformed_actions_are_errors():
    done = PARSER.parse("Thought: done.\nAction: finished(content='42')")
    assert not done.attempted_call and done.content == "42"
    stop = PARSER.parse('<tool_call>{"name": "computer_use", "arguments": {"action": "terminate"}}</tool_call>')
    assert not stop.calls and not stop.errors
    for bad, message in [
        ("Action: click(start_box='(1)')", "a point is two numbers"),
        ("Action: click(", "is not an action like click(start_box='(x,y)')"),
        ("Action: os.system('ls')", "is not an action like"),
        ("Action: click(__import__('os'))", "is not an action like"),
        ("Action: click(x=" + "(" * 500 + "1" + ")" * 500 + ")", "is not an action like"),  # never reaches ast
        ('<tool_call>{"name": "computer_use", "arguments": {"action": "double_click"}}</tool_call>', "not supported"),
    ]:
        result = PARSER.parse(bad)
        assert result.attempted_call and not result.calls and message in result.errors[0], bad


def test_format_then_parse_round_trips():
    calls = [
        ToolCall("click", {"x": 3, "y": 4}),
        ToolCall("type", {"text": "a 'quoted' \"text\"", "element": 5}),
        ToolCall("press", {"key": "Enter"}),
        ToolCall("scroll", {"direction": "up", "x": 80, "y": 105}),
        ToolCall("click", {"element": 9}),
        ToolCall("calculator", {"expression": "2+2"}),
    ]
    written = PARSER.format_calls(calls, thought="Acting.")
    assert written.startswith("Thought: Acting.\nAction: click(start_box='(3,4)')\nAction: type(content=")
    assert [(c.name, c.arguments) for c in PARSER.parse(written).calls] == [(c.name, c.arguments) for c in calls]
    assert PARSER.parse(PARSER.format_final("The answer is 4.")).content == "The answer is 4."
