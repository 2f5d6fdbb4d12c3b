"""What the model reads of a failed call is bounded like a result: an error message that echoes
a huge argument (a tool's own ``ToolError``, an exception's text) keeps its start and its end."""

from __future__ import annotations

import anyio
from mcp import Client

from agentkit_tools import ToolError, ToolRegistry, dispatch, tool
from agentkit_tools.mcp_server import build_server
from agentkit_tools.roundtrip import tool_result_text


@tool(read_only=True, max_result_chars=100)
def find(q: str) -> str:
    """Find the records that match a query, or say that none does."""
    raise ToolError(f"nothing matches {q!r}; try another query")


@tool(read_only=True)
def crash(q: str) -> str:
    """Look a query up in a backend that crashes on long queries."""
    raise RuntimeError(f"backend choked on {q!r}")


REGISTRY = ToolRegistry([find, crash])
HUGE = "x" * 1_000_000


def test_a_tool_error_echoing_a_huge_argument_is_cut_in_the_middle() -> None:
    env = dispatch({"id": "1", "name": "find", "input": {"q": HUGE}}, REGISTRY)
    assert len(env["error"]["message"]) == 1_000_037  # the envelope keeps the whole message
    # The tool's result limit is 100, but a message gets at least the default 2000 characters.
    text = tool_result_text(env, max_chars=find.max_result_chars)
    assert text == (
        "nothing matches '" + "x" * 1289 + " ...[998079 chars of this message cut]... " + "x" * 632
        + "'; try another query"
    )
    assert len(text) == 2000
    assert tool_result_text(env, max_chars=5000).endswith("...[995079 chars of this message cut]... " + "x" * 1632 + "'; try another query")
    short = dispatch({"id": "1", "name": "find", "input": {"q": "cat"}}, REGISTRY)
    assert tool_result_text(short, max_chars=100) == "nothing matches 'cat'; try another query"


def test_an_internal_error_and_the_mcp_server_are_bounded_too() -> None:
    env = dispatch({"id": "1", "name": "crash", "input": {"q": HUGE}}, REGISTRY)
    text = tool_result_text(env)
    assert len(text) == 2000
    assert text.startswith("crash failed: RuntimeError: backend choked on 'xxx")
    assert text.endswith("'. This is a bug in the tool, not in your arguments; do not retry.")

    async def over_mcp() -> str:
        async with Client(build_server(REGISTRY)) as client:
            result = await client.call_tool("find", {"q": HUGE})
        assert result.is_error is True
        return result.content[0].text  # type: ignore[union-attr]

    assert anyio.run(over_mcp) == tool_result_text(dispatch({"id": "1", "name": "find", "input": {"q": HUGE}}, REGISTRY))
