"""Agent outputs that must never crash a parser or ``env.step`` (shared by the parser and env tests)."""

from __future__ import annotations

HOSTILE_ACTIONS: list[str | dict] = [
    "",
    " ",
    "\x00\x01\x02",
    "<tool_call>",
    "<tool_call>{",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1",}}</tool_call>',  # trailing comma
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}',  # unclosed tag
    '<tool_call>{"name": "calculator"}</tool_call>',  # missing arguments
    '<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>',  # wrong argument name
    '<tool_call>{"name": "calculator", "arguments": {"expression": 12}}</tool_call>',  # number for a string
    '<tool_call>{"name": "calculator", "arguments": {"expression": ["1"]}}</tool_call>',  # list for a string
    '<tool_call>{"name": "calculator", "arguments": "not json"}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>',
    '<tool_call>{"name": 5, "arguments": {}}</tool_call>',
    '<tool_call>["calculator"]</tool_call>',
    '<tool_call>{"name": "rm -rf /", "arguments": {}}</tool_call>',  # unknown tool
    '<tool_call>{"name": "calculator", "arguments": {"expression": "9**9**9**9"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\').system(\'ls\')"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "' + "(" * 500 + "1" + ")" * 500 + '"}}</tool_call>',
    "</tool_call></tool_call><tool_call></tool_call>",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>' * 40,  # too many calls
    "Action: calculator\n",  # ReAct action without input
    "Action: calculator\nAction Input: {bad json",
    "Action: \nAction Input: 1+1",
    "```python\nprint(1)",  # unclosed code block
    "```python\n```",
    "ünïcödé ✓ 😀 \u202e reversed \ud800",  # lone surrogate
    "x" * 100_000,  # 100 kB
    "\\boxed{" * 1000,
    {"role": "assistant", "content": None, "tool_calls": "calculator"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "calculator", "arguments": "{bad"}}]},
    {"role": "assistant", "content": "", "tool_calls": [None, 3, {"function": {}}]},
    {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "nope", "arguments": {}}}]},
    {"content": 12345},
]
