"""The MCP server (SPEC §9) tested with the official ``mcp`` SDK's own clients: over stdio
(``python -m agentkit_tools serve-mcp`` launched as a subprocess), over streamable HTTP on
loopback (``--http 0``) and in-process."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentkit_tools import FunctionTool, Invoker, ToolContext, ToolRegistry, __version__, middleware, tool
from agentkit_tools.mcp_server import build_server, call_tool_result
from fakes.inventory_tools import registry

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests.fakes.inventory_tools:registry"

SKU = {"type": "string", "description": "The SKU code, e.g. SKU-1."}
EXPECTED_TOOLS = [
    {
        "name": "delete_sku",
        "description": "Remove a SKU from the catalogue for good; it cannot be undone.",
        "inputSchema": {
            "type": "object",
            "properties": {"sku": {"type": "string", "description": "The SKU code to remove."}},
            "required": ["sku"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    },
    {
        "name": "get_stock",
        "description": "Look up how many units of a SKU are in a warehouse.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "sku": SKU,
                "warehouse": {
                    "type": "string",
                    "enum": ["main", "east"],
                    "description": "Which warehouse to look in.",
                    "default": "main",
                },
            },
            "required": ["sku"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "description": "The SKU code."},
                "on_hand": {"type": "integer", "description": "Units in the warehouse."},
            },
            "required": ["sku", "on_hand"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    },
    {
        "name": "set_price",
        "description": "Set the shelf price of a SKU, replacing the current one.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "sku": SKU,
                "cents": {"type": "integer", "description": "The new price in cents (a positive integer)."},
            },
            "required": ["sku", "cents"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    },
]
BAD_PRICE = (
    "tool 'set_price' call rejected: missing required argument(s) ['cents']; invalid argument(s): sku: "
    "expected string, got integer 1. Accepted arguments: ['sku', 'cents']. Re-read the input schema "
    "and call 'set_price' again with corrected arguments."
)
REPEATED_STOCK = (
    "get_stock has now been called 3 times with these same arguments in this conversation, and it was "
    "not run again. Stop calling it; explain the problem to the user instead."
)


def wire(result: Any) -> dict[str, Any]:
    """A result as it went over the wire (camelCase keys, unset fields left out)."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[no-any-return]


def text(value: str, *, error: bool = False, structured: Any = None, server: Any = None) -> dict[str, Any]:
    """The wire form of a ``CallToolResult`` with one text block; ``server=(name, version)`` adds
    the ``serverInfo`` stamp of the stateless (2026-07-28) protocol."""
    out: dict[str, Any] = {"content": [{"type": "text", "text": value}], "isError": error, "resultType": "complete"}
    if structured is not None:
        out["structuredContent"] = structured
    if server is not None:
        out["_meta"] = {"io.modelcontextprotocol/serverInfo": {"name": server[0], "version": server[1]}}
    return out


async def test_stdio_list_and_call() -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agentkit_tools", "serve-mcp", TARGET], cwd=str(ROOT)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert (init.server_info.name, init.server_info.version) == ("agentkit-tools", __version__)
        listed = await session.list_tools()
        assert [wire(t) for t in listed.tools] == EXPECTED_TOOLS

        ok = await session.call_tool("get_stock", {"sku": "SKU-2", "warehouse": "east"})
        assert wire(ok) == text('{"sku": "SKU-2", "on_hand": 7}', structured={"sku": "SKU-2", "on_hand": 7})
        no_output_schema = await session.call_tool("set_price", {"sku": "SKU-1", "cents": 1250})
        assert wire(no_output_schema) == text("price of SKU-1 set to 1250 cents")
        bad = await session.call_tool("set_price", {"sku": 1})
        assert wire(bad) == text(BAD_PRICE, error=True)
        tool_error = await session.call_tool("get_stock", {"sku": "SKU-9"})
        assert wire(tool_error) == text("unknown SKU 'SKU-9'; known SKUs: SKU-1, SKU-2", error=True)
        unknown = await session.call_tool("get_stok", {"sku": "SKU-1"})
        assert wire(unknown) == text(
            "No tool named 'get_stok'. Did you mean 'get_stock'? Available tools: delete_sku, get_stock, "
            "set_price. Call one of those instead.",
            error=True,
        )
        # one stdio server serves one client: its calls are one conversation for the repeat guard
        await session.call_tool("get_stock", {"sku": "SKU-1"})
        await session.call_tool("get_stock", {"sku": "SKU-1"})
        third = await session.call_tool("get_stock", {"sku": "SKU-1"})
        assert wire(third) == text(REPEATED_STOCK, error=True)


async def test_streamable_http_on_loopback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit_tools", "serve-mcp", TARGET, "--http", "0"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = await anyio.to_thread.run_sync(proc.stderr.readline)
        prefix = "serving MCP on http://127.0.0.1:"
        assert line.startswith(prefix) and line.endswith("/mcp\n"), line
        url = line.split(" on ")[1].strip()

        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            assert [wire(t) for t in listed.tools] == EXPECTED_TOOLS
            ok = await session.call_tool("get_stock", {"sku": "SKU-1"})
            assert wire(ok) == text('{"sku": "SKU-1", "on_hand": 12}', structured={"sku": "SKU-1", "on_hand": 12})
            bad = await session.call_tool("set_price", {"sku": 1})
            assert wire(bad) == text(BAD_PRICE, error=True)
            await session.call_tool("get_stock", {"sku": "SKU-1"})
            third = await session.call_tool("get_stock", {"sku": "SKU-1"})
            assert wire(third) == text(REPEATED_STOCK, error=True)

        # a new session is a new conversation: the same call runs again
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            again = await session.call_tool("get_stock", {"sku": "SKU-1"})
            assert wire(again) == wire(ok)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        if proc.stderr is not None:
            proc.stderr.close()


async def test_in_process_stateless_protocol_has_no_conversation() -> None:
    server = build_server(registry)
    async with Client(server) as client:
        results = [await client.call_tool("get_stock", {"sku": "SKU-1"}) for _ in range(3)]
    expected = text(
        '{"sku": "SKU-1", "on_hand": 12}',
        structured={"sku": "SKU-1", "on_hand": 12},
        server=("agentkit-tools", __version__),
    )
    assert [wire(r) for r in results] == [expected] * 3


async def test_approval_required_and_custom_invoker() -> None:
    @tool(side_effecting=True, requires_approval=True)
    def wipe(sku: str) -> str:
        """Erase the stock records of a SKU (needs a human's approval).

        Args:
            sku: The SKU code.
        """
        return f"{sku} wiped"

    reg = ToolRegistry([wipe])
    async with Client(build_server(reg)) as client:
        refused = await client.call_tool("wipe", {"sku": "SKU-1"})
    assert refused.is_error is True
    assert [c.type for c in refused.content] == ["text"]
    # This client cannot be asked (no elicitation): the model is told that the host must allow it.
    assert refused.content[0].text == (
        "wipe needs the user's approval and this MCP client cannot ask the user (it does not support "
        "elicitation), so it was not run. Calling it again will not help: tell the user that the host of "
        "this MCP server must allow wipe (for example by starting it with --approve wipe)."
    )

    approving = Invoker(reg, middleware=[middleware.approval(lambda tool, args, ctx: True)])
    async with Client(build_server(reg, invoker=approving, name="inventory", version="9.9")) as client:
        done = await client.call_tool("wipe", {"sku": "SKU-1"})
    assert wire(done) == text("SKU-1 wiped", server=("inventory", "9.9"))

    seen: list[str] = []

    def host_context(request_ctx: Any) -> ToolContext:
        seen.append(request_ctx.method)
        return ToolContext(run_id="host-run", approvals={"wipe"})

    async with Client(build_server(reg, context=host_context)) as client:
        approved = await client.call_tool("wipe", {"sku": "SKU-2"})
    assert wire(approved) == text("SKU-2 wiped", server=("agentkit-tools", __version__))
    assert seen == ["tools/call"]


async def test_tools_registered_later_are_listed() -> None:
    reg = ToolRegistry([])
    server = build_server(reg)

    def ping(host: str) -> str:
        """Check that a host answers, returning a short status line."""
        return f"{host} is up"

    async with Client(server) as client:
        assert (await client.list_tools()).tools == []
        reg.register(FunctionTool.from_callable(ping, side_effecting=False))
        listed = await client.list_tools()
        assert [wire(t) for t in listed.tools] == [
            {
                "name": "ping",
                "description": "Check that a host answers, returning a short status line.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"host": {"type": "string"}},
                    "required": ["host"],
                    "additionalProperties": False,
                },
                # read-only implies idempotent in the MCP rendering
                "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
            }
        ]


def test_call_tool_result() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        label: str

    ok = call_tool_result({"ok": True, "value": Point(1, "é"), "elapsed_ms": 1.0}, max_chars=2000, structured=True)
    assert isinstance(ok, types.CallToolResult)
    assert wire(ok) == text('{"x": 1, "label": "é"}', structured={"x": 1, "label": "é"})
    plain = call_tool_result({"ok": True, "value": [1, 2], "elapsed_ms": 1.0}, max_chars=2000, structured=False)
    assert wire(plain) == text("[1, 2]")
    failed = call_tool_result(
        {"ok": False, "error": {"code": "tool_error", "message": "backend down; retry later", "retriable": True}},
        max_chars=2000,
        structured=True,
    )
    assert wire(failed) == text("backend down; retry later", error=True)


def test_cli_bad_target() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit_tools", "serve-mcp", "tests.fakes.no_such_module:registry"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        "error: cannot load tests.fakes.no_such_module:registry: No module named 'tests.fakes.no_such_module'\n"
    )


@dataclasses.dataclass
class Reading:
    celsius: float


async def test_structured_content_that_breaks_the_advertised_output_schema_is_an_output_mismatch() -> None:
    # An instance of the declared class passes the tool's own output check as it is; its JSON
    # could still break the outputSchema the server advertises, and the SDK's client then raised
    # RuntimeError ("Invalid structured content returned by tool ...") instead of giving the
    # model any answer.
    @tool(read_only=True)
    def thermometer(probe: str) -> Reading:
        """Read the temperature of one probe, in degrees Celsius."""
        return {"ok": Reading(21.5), "inf": Reading(float("inf")), "str": Reading("warm")}[probe]  # type: ignore[arg-type]

    async with Client(build_server(ToolRegistry([thermometer]))) as client:
        ok = await client.call_tool("thermometer", {"probe": "ok"})
        inf = await client.call_tool("thermometer", {"probe": "inf"})
        word = await client.call_tool("thermometer", {"probe": "str"})
    server = ("agentkit-tools", __version__)
    assert wire(ok) == text('{"celsius": 21.5}', structured={"celsius": 21.5}, server=server)
    tail = (
        ". This is a fault in the tool, not in your arguments: try different arguments once, or tell the user the "
        "tool is returning malformed data."
    )
    assert wire(inf) == text(
        "thermometer returned a value that does not match its declared output schema 'Reading' (<root>: not a "
        "JSON value: inf is not a JSON number; send a finite number)" + tail,
        error=True,
        server=server,
    )
    assert wire(word) == text(
        "thermometer returned a value that does not match its declared output schema 'Reading' (celsius: "
        'expected number, got string "warm")' + tail,
        error=True,
        server=server,
    )
