"""Approval over MCP, tested with the official ``mcp`` SDK's clients: a tool that requires
approval runs when the server allows it (``approve=``, ``approver=``, ``serve-mcp --approve``),
when the user accepts through the client's elicitation callback (on a handshake-era session and
on the 2026-07-28 protocol), and is refused with a message saying what would allow it otherwise."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentkit_tools import Invoker, ToolRegistry, middleware, tool
from agentkit_tools.mcp_server import build_server

ROOT = Path(__file__).resolve().parent.parent
RAN: list[str] = []

NO_ELICITATION = (
    "refund needs the user's approval and this MCP client cannot ask the user (it does not support "
    "elicitation), so it was not run. Calling it again will not help: tell the user that the host of "
    "this MCP server must allow refund (for example by starting it with --approve refund)."
)
DECLINED = (
    "The user did not allow refund with these arguments, so it was not run. Do not call it again "
    "unless the user asks for it."
)
CANCELLED = "The user dismissed the request to allow refund, so it was not run. Call it again only if the user asks for it."
POLICY = (
    "refund was not allowed by the server's approval policy, so it was not run. Tell the user; calling "
    "it again with the same arguments will be refused again."
)
ASKED = 'Allow the tool refund to run with these arguments? {"cents":500,"order_id":"A-7"}'
FORM = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Allow this call",
            "description": "Run the tool with the arguments shown.",
            "default": False,
        }
    },
    "required": ["approve"],
}


@tool(side_effecting=True, requires_approval=True)
def refund(order_id: str, cents: int) -> str:
    """Refund part of an order to the customer's original payment method.

    Args:
        order_id: The order, e.g. A-7.
        cents: How much to refund, in cents.
    """
    RAN.append(f"{order_id}:{cents}")
    return f"refunded {cents} cents on {order_id}"


@tool(read_only=True)
def lookup(order_id: str) -> str:
    """Look up the status of one order by its identifier.

    Args:
        order_id: The order, e.g. A-7.
    """
    return f"{order_id} shipped"


REGISTRY = ToolRegistry([refund, lookup])
CALL = {"order_id": "A-7", "cents": 500}


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


class Elicitor:
    """An elicitation callback that answers with ``action`` (and ``approve`` when accepting)
    and remembers what it was asked."""

    def __init__(self, action: str, approve: bool = True) -> None:
        self.action = action
        self.approve = approve
        self.asked: list[tuple[str, Any]] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append((params.message, params.requested_schema))
        content = {"approve": self.approve} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


def outcome(result: Any) -> tuple[bool, str]:
    return bool(result.is_error), result.content[0].text


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # handshake-era elicitation/create; 2026-07-28 input-required
@pytest.mark.parametrize(
    ("action", "approve", "expected", "ran"),
    [
        ("accept", True, (False, "refunded 500 cents on A-7"), ["A-7:500"]),
        ("accept", False, (True, DECLINED), []),
        ("decline", True, (True, DECLINED), []),
        ("cancel", True, (True, CANCELLED), []),
    ],
)
async def test_the_user_is_asked_through_elicitation(
    mode: str, action: str, approve: bool, expected: tuple[bool, str], ran: list[str]
) -> None:
    elicitor = Elicitor(action, approve)
    async with Client(build_server(REGISTRY), mode=mode, elicitation_callback=elicitor) as client:  # type: ignore[arg-type]
        assert outcome(await client.call_tool("refund", CALL)) == expected
        assert outcome(await client.call_tool("lookup", {"order_id": "A-7"})) == (False, "A-7 shipped")
    assert elicitor.asked == [(ASKED, FORM)]
    assert RAN == ran


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_without_elicitation_the_refusal_says_how_the_host_allows_it(mode: str) -> None:
    async with Client(build_server(REGISTRY), mode=mode) as client:  # type: ignore[arg-type]
        assert outcome(await client.call_tool("refund", CALL)) == (True, NO_ELICITATION)
    assert RAN == []


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_invalid_arguments_are_answered_without_asking(mode: str) -> None:
    elicitor = Elicitor("accept")
    async with Client(build_server(REGISTRY), mode=mode, elicitation_callback=elicitor) as client:  # type: ignore[arg-type]
        failed, message = outcome(await client.call_tool("refund", {"order_id": "A-7", "cents": "500"}))
    assert (failed, message.split(":", 1)[0]) == (True, "tool 'refund' call rejected")
    assert elicitor.asked == [] and RAN == []


async def test_approve_names_allow_without_asking() -> None:
    elicitor = Elicitor("decline")
    async with Client(build_server(REGISTRY, approve=["refund"]), elicitation_callback=elicitor) as client:
        assert outcome(await client.call_tool("refund", CALL)) == (False, "refunded 500 cents on A-7")
    assert elicitor.asked == [] and RAN == ["A-7:500"]
    with pytest.raises(TypeError, match="not one string"):
        build_server(REGISTRY, approve="refund")


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_python_approver_decides(asynchronous: bool) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def decide(t: Any, args: Any, ctx: Any) -> bool:
        seen.append((t.name, dict(args)))
        return args["cents"] <= 500

    async def decide_async(t: Any, args: Any, ctx: Any) -> bool:
        return decide(t, args, ctx)

    elicitor = Elicitor("accept")
    server = build_server(REGISTRY, approver=decide_async if asynchronous else decide)
    async with Client(server, elicitation_callback=elicitor) as client:
        assert outcome(await client.call_tool("refund", CALL)) == (False, "refunded 500 cents on A-7")
        assert outcome(await client.call_tool("refund", {"order_id": "A-7", "cents": 900})) == (True, POLICY)
    assert seen == [("refund", CALL), ("refund", {"order_id": "A-7", "cents": 900})]
    assert elicitor.asked == [] and RAN == ["A-7:500"]


async def test_the_invokers_own_approval_still_applies() -> None:
    """A refusal of the server's gate leaves the call to the invoker's ``approval`` middleware."""
    approving = Invoker(REGISTRY, middleware=[middleware.approval(lambda t, args, ctx: True)])
    async with Client(build_server(REGISTRY, invoker=approving)) as client:
        assert outcome(await client.call_tool("refund", CALL)) == (False, "refunded 500 cents on A-7")
    assert RAN == ["A-7:500"]


async def _stdio_outcome(*extra: str, elicitation: Any = None) -> tuple[bool, str]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkit_tools", "serve-mcp", "tests/fakes/cli_shop.py:shop", *extra],
        cwd=str(ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(
        read, write, elicitation_callback=elicitation
    ) as session:
        await session.initialize()
        return outcome(await session.call_tool("refund", CALL))


async def test_serve_mcp_approve_flag() -> None:
    assert await _stdio_outcome("--approve", "refund") == (False, "refunded 500 cents on A-7")
    assert await _stdio_outcome() == (True, NO_ELICITATION)
    elicitor = Elicitor("accept")
    assert await _stdio_outcome(elicitation=elicitor) == (False, "refunded 500 cents on A-7")
    assert elicitor.asked == [(ASKED, FORM)]
