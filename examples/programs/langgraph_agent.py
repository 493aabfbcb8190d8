"""An agent written with LangGraph: a graph that alternates LangChain's ``ChatOpenAI`` (bound to a calculator tool)
and a ``ToolNode`` until the model stops calling tools, run asynchronously on the run's endpoint.

Train it: ``python -m agentfly_train --config quickstart agent.program=examples/programs/langgraph_agent.py:solve``
(needs the ``programs`` extra).
"""

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentfly_envs.tools import ToolError
from agentfly_envs.tools.calculator import evaluate, format_number


@tool
def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression of digits and + - * / ( ), e.g. 6*7+17."""
    try:
        return format_number(evaluate(expression))
    except ToolError as error:
        return f"Error: {error}"


def agent_graph(model: ChatOpenAI):
    """The graph: the model's turn, then the tools it called, until a turn calls none."""
    bound = model.bind_tools([calculator])

    async def think(state: MessagesState) -> dict:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("think", think)
    graph.add_node("tools", ToolNode([calculator]))
    graph.add_edge(START, "think")
    graph.add_conditional_edges("think", tools_condition)
    graph.add_edge("tools", "think")
    return graph.compile()


async def solve(endpoint, task):
    """Runs the graph on the task's question; the last message is the episode's answer."""
    model = ChatOpenAI(model=endpoint.model, base_url=endpoint.base_url, api_key=endpoint.api_key)
    state = await agent_graph(model).ainvoke({"messages": [("user", task["question"])]}, {"recursion_limit": 8})
    return state["messages"][-1].content
