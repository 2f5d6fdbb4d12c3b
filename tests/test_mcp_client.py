"""MCP servers as tool sources (``agentkit_tools.mcp_client``), tested against servers written
with the official ``mcp`` SDK the way its documentation shows (``MCPServer`` with decorated
functions, the low-level ``Server`` with handlers) and against our own ``serve-mcp`` over stdio
and streamable HTTP: our tool → MCP → our client → ``Invoker``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from agentkit_tools import Invoker, Tool, ToolRegistry, dispatch
from agentkit_tools.mcp_client import MCPTool, MCPToolset
from agentkit_tools.media import ToolImage
from agentkit_tools.roundtrip import anthropic_tool_results

ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


class Forecast(BaseModel):
    city: str
    high_c: float


def weather_server() -> tuple[MCPServer, list[dict[str, Any]]]:
    """An ``MCPServer`` (the SDK's FastMCP successor) defined as its docs show; ``seen`` records
    every call that reached it."""
    server = MCPServer("weather")
    seen: list[dict[str, Any]] = []

    @server.tool(annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def forecast(city: str, days: int = 1) -> Forecast:
        """Forecast the highest temperature of a city."""
        seen.append({"forecast": {"city": city, "days": days}})
        return Forecast(city=city, high_c=21.5)

    @server.tool(annotations=types.ToolAnnotations(destructive_hint=False))
    def add_note(text: str) -> str:
        """Add a note to the weather log."""
        seen.append({"add_note": text})
        return f"noted: {text}"

    @server.tool()
    def station(code: str) -> str:
        """Describe a weather station."""
        raise ToolError(f"no station {code!r}; known stations: OSL, BER")

    @server.tool()
    def radar() -> Image:
        """The current radar picture."""
        return Image(data=PNG, format="png")

    @server.tool(name="alerts.list")
    def alerts() -> list[str]:
        """Active weather alerts."""
        return ["storm"]

    @server.tool()
    async def enable_history(ctx: Context) -> str:
        """Turn on the history tool."""

        def history(city: str) -> str:
            """Past temperatures of a city."""
            return f"{city}: 19, 20, 22"

        server.add_tool(history)
        if ctx.protocol_version == "2026-07-28":
            await ctx.notify_tools_changed()  # to subscriptions/listen streams
        else:
            await ctx.session.send_tool_list_changed()  # a notification on the session
        return "history enabled"

    return server, seen


async def test_tools_of_an_mcpserver_register_and_run_through_the_invoker() -> None:
    server, seen = weather_server()
    async with MCPToolset(server, prefix="wx_", exclude=["enable_history"]) as tools:
        assert [t.name for t in tools.tools()] == ["wx_add_note", "wx_alerts_list", "wx_forecast", "wx_radar", "wx_station"]
        registry = tools.registry()
        fc = registry.get("wx_forecast")
        assert isinstance(fc, MCPTool) and isinstance(fc, Tool) and fc.remote_name == "forecast"
        assert (fc.side_effecting, fc.idempotent, fc.destructive) == (False, True, False)
        note = registry.get("wx_add_note")
        assert (note.side_effecting, note.idempotent, note.destructive) == (True, False, False)
        station = registry.get("wx_station")
        assert (station.side_effecting, station.destructive) == (True, True)  # no annotations: MCP's defaults
        assert registry.get("wx_alerts_list").remote_name == "alerts.list"

        # the schema the model is shown is the server's
        listed = {t.name: t for t in (await tools.client.list_tools()).tools}
        assert registry.to_anthropic()[2] == {
            "name": "wx_forecast",
            "description": "Forecast the highest temperature of a city.",
            "input_schema": listed["forecast"].input_schema,
        }
        assert registry.to_mcp()[2]["outputSchema"] == listed["forecast"].output_schema

        inv = Invoker(registry)
        ok = await inv.invoke({"id": "1", "name": "wx_forecast", "input": {"city": "Oslo", "days": 2}})
        assert ok["ok"] is True and ok["value"] == {"city": "Oslo", "high_c": 21.5}

        # a bad call is refused locally, with our message: nothing travels
        bad = await inv.invoke({"id": "2", "name": "wx_forecast", "input": {"city": "Oslo", "days": "two"}})
        assert bad["ok"] is False and bad["error"]["code"] == "invalid_arguments"
        assert bad["error"]["message"] == (
            "tool 'wx_forecast' call rejected: invalid argument(s): days: expected integer, got string \"two\". "
            "Accepted arguments: ['city', 'days']. Re-read the input schema and call 'wx_forecast' again with "
            "corrected arguments."
        )
        assert seen == [{"forecast": {"city": "Oslo", "days": 2}}]

        err = await inv.invoke({"id": "3", "name": "wx_station", "input": {"code": "XXX"}})
        assert err["ok"] is False and err["error"]["code"] == "tool_error"
        assert err["error"]["message"] == "Error executing tool station: no station 'XXX'; known stations: OSL, BER"

        text = await inv.invoke({"id": "4", "name": "wx_add_note", "input": {"text": "windy"}})
        assert text["value"] == {"result": "noted: windy"}  # MCPServer wraps a str return in structured content
        listed_alerts = await inv.invoke({"id": "5", "name": "wx_alerts_list", "input": {}})
        assert listed_alerts["value"] == {"result": ["storm"]}

        picture = await inv.invoke({"id": "6", "name": "wx_radar", "input": {}})
        assert picture["value"] == ToolImage(PNG, mime="image/png")
        # and the image reaches the model natively
        message = await anthropic_tool_results(
            {"content": [{"type": "tool_use", "id": "t1", "name": "wx_radar", "input": {}}]}, inv
        )
        # the same call again in this conversation (the radar tool declares no read-only hint, so
        # it counts as side-effecting): deduplicated, and the model is told so before the image
        parts = message["content"][0]["content"]
        assert [p["type"] for p in parts] == ["text", "image"]
        assert parts[0]["text"] == (
            "This exact call already ran earlier in this conversation and was not run again; the result "
            "below is from that earlier run."
        )

        # the sync dispatcher runs it too, from a thread of its own
        env = await anyio.to_thread.run_sync(dispatch, {"name": "wx_add_note", "input": {"text": "calm"}}, registry)
        assert env["value"] == {"result": "noted: calm"}
    # after the session closed, the registered tools say so
    env = await Invoker(registry).invoke({"name": "wx_forecast", "input": {"city": "Oslo"}})
    assert env["error"] == {
        "code": "mcp_disconnected",
        "message": "The MCP server of tool 'wx_forecast' is no longer connected (its session was closed). Do not "
        "retry; tell the user this tool is unavailable.",
        "retriable": False,
    }


async def test_include_and_requires_approval() -> None:
    server, _ = weather_server()
    async with MCPToolset(server, include=["forecast", "add_note"], requires_approval=["add_note"]) as tools:
        assert [t.name for t in tools.tools()] == ["add_note", "forecast"]
        reg = tools.registry()
        assert reg.requires_approval("add_note") and not reg.requires_approval("forecast")
        refused = await Invoker(reg).invoke({"name": "add_note", "input": {"text": "x"}})
        assert refused["error"]["code"] == "approval_required"
    async with MCPToolset(server, include=lambda entry: entry.name.startswith("f")) as tools:
        assert [t.name for t in tools.tools()] == ["forecast"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # subscriptions/listen (2026-07-28), notifications before it
async def test_list_changed_refreshes_the_cache_and_registries(mode: str) -> None:
    server, _ = weather_server()
    changed = anyio.Event()
    async with MCPToolset(server, on_change=lambda tools: changed.set(), client_options={"mode": mode}) as tools:
        assert tools.client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        reg = ToolRegistry()
        tools.register(reg)
        assert "history" not in reg
        before = reg.get("forecast")
        env = await Invoker(reg).invoke({"name": "enable_history", "input": {}})
        assert env["value"] == {"result": "history enabled"}
        with anyio.fail_after(5):
            await changed.wait()
        assert "history" in reg and [t.name for t in tools.tools()].count("history") == 1
        assert reg.get("forecast") is before  # unchanged tools keep their object
        env = await Invoker(reg).invoke({"name": "history", "input": {"city": "Oslo"}})
        assert env["value"] == {"result": "Oslo: 19, 20, 22"}


def lowlevel_server(structured: Any) -> Server:
    """A low-level ``Server`` whose ``report`` tool declares an output schema and returns
    ``structured`` as its structured content."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name="report",
                    description="The sales report of a month.",
                    input_schema={"type": "object", "properties": {"month": {"type": "string"}}, "required": ["month"]},
                    output_schema={
                        "type": "object",
                        "properties": {"total": {"type": "integer"}},
                        "required": ["total"],
                    },
                )
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=str(structured))], structured_content=structured)

    return Server("sales", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_output_schema_is_checked_on_structured_content() -> None:
    async with MCPToolset(lowlevel_server({"total": 12})) as tools:
        env = await Invoker(tools.registry()).invoke({"name": "report", "input": {"month": "2026-03"}})
        assert env["ok"] is True and env["value"] == {"total": 12}
    async with MCPToolset(lowlevel_server({"total": "twelve"})) as tools:
        env = await Invoker(tools.registry()).invoke({"name": "report", "input": {"month": "2026-03"}})
        assert env["ok"] is False and env["error"]["code"] == "output_mismatch"
    async with MCPToolset(lowlevel_server(None)) as tools:
        env = await Invoker(tools.registry()).invoke({"name": "report", "input": {"month": "2026-03"}})
        assert env["ok"] is False and env["error"]["code"] == "output_mismatch"


async def test_not_connected_is_a_clear_error() -> None:
    server, _ = weather_server()
    tools = MCPToolset(server)
    with pytest.raises(RuntimeError, match=r"^MCPToolset is not connected: use it as `async with MCPToolset\(\.\.\.\) as tools:`$"):
        await tools.refresh()


# ------------------------------------------------------------------ our tool → MCP → our client → Invoker

TARGET = "tests.fakes.inventory_tools:registry"


async def check_inventory(tools: MCPToolset) -> None:
    reg = tools.registry()
    assert reg.names() == ["inv_delete_sku", "inv_get_stock", "inv_set_price"]
    stock = reg.get("inv_get_stock")
    assert (stock.side_effecting, stock.idempotent) == (False, True)
    price = reg.get("inv_set_price")
    assert (price.side_effecting, price.idempotent, price.destructive) == (True, True, True)
    inv = Invoker(reg)
    ok = await inv.invoke({"name": "inv_get_stock", "input": {"sku": "SKU-2", "warehouse": "east"}})
    assert ok["ok"] is True and ok["value"] == {"sku": "SKU-2", "on_hand": 7}
    bad = await inv.invoke({"name": "inv_set_price", "input": {"sku": 1}})
    assert bad["error"]["code"] == "invalid_arguments"
    assert bad["error"]["message"] == (
        "tool 'inv_set_price' call rejected: missing required argument(s) ['cents']; invalid argument(s): sku: "
        "expected string, got integer 1. Accepted arguments: ['sku', 'cents']. Re-read the input schema and call "
        "'inv_set_price' again with corrected arguments."
    )
    remote_error = await inv.invoke({"name": "inv_get_stock", "input": {"sku": "SKU-9"}})
    assert remote_error["error"] == {
        "code": "tool_error",
        "message": "unknown SKU 'SKU-9'; known SKUs: SKU-1, SKU-2",
        "retriable": False,
    }
    done = await inv.invoke({"name": "inv_set_price", "input": {"sku": "SKU-1", "cents": 1250}})
    assert done["value"] == "price of SKU-1 set to 1250 cents"
    # the sync dispatcher, from a thread of its own while the session's loop runs
    env = await anyio.to_thread.run_sync(dispatch, {"name": "inv_get_stock", "input": {"sku": "SKU-1"}}, reg)
    assert env["ok"] is True and env["value"] == {"sku": "SKU-1", "on_hand": 12}


async def test_round_trip_through_our_serve_mcp_over_stdio() -> None:
    async with MCPToolset.stdio(
        sys.executable, ["-m", "agentkit_tools", "serve-mcp", TARGET], cwd=str(ROOT), prefix="inv_"
    ) as tools:
        await check_inventory(tools)


async def test_round_trip_through_our_serve_mcp_over_http() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentkit_tools", "serve-mcp", TARGET, "--http", "0"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = await anyio.to_thread.run_sync(proc.stderr.readline)
        url = line.split(" on ")[1].strip()
        async with MCPToolset.http(url, prefix="inv_") as tools:
            await check_inventory(tools)
        with_headers = MCPToolset.http(url, prefix="inv_", headers={"X-Test": "1"})
        for _ in range(2):  # a toolset connects anew each time it is entered
            async with with_headers as tools:
                assert len(tools.tools()) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        if proc.stderr is not None:
            proc.stderr.close()


async def test_tools_of_a_server_served_again_over_mcp() -> None:
    """A proxy: an MCP server's tools, validated and run through our Invoker, served by our own
    MCP server and read with the SDK's client (structured content and images survive)."""
    from mcp import Client

    from agentkit_tools.mcp_server import build_server

    server, seen = weather_server()
    async with MCPToolset(server, prefix="wx_", include=["forecast", "radar"]) as tools:
        async with Client(build_server(tools.registry())) as proxy:
            listed = {t.name: t for t in (await proxy.list_tools()).tools}
            assert sorted(listed) == ["wx_forecast", "wx_radar"]
            assert listed["wx_forecast"].annotations.read_only_hint is True
            ok = await proxy.call_tool("wx_forecast", {"city": "Oslo"})
            assert (ok.is_error, ok.structured_content) == (False, {"city": "Oslo", "high_c": 21.5})
            picture = await proxy.call_tool("wx_radar", {})
            assert picture.content == [types.ImageContent(data=ToolImage(PNG).base64(), mime_type="image/png")]
            bad = await proxy.call_tool("wx_forecast", {"city": 3})
            assert bad.is_error is True
            assert bad.content[0].text.startswith("tool 'wx_forecast' call rejected: invalid argument(s): city: expected string")
    assert seen == [{"forecast": {"city": "Oslo", "days": 1}}]  # the bad call never reached the server


def test_prefixed_names_follow_the_one_tool_name_rule() -> None:
    toolset = MCPToolset(object(), prefix="srv.")
    assert toolset._local_name("get_forecast") == "srv_get_forecast"
    assert toolset._local_name("météo\n") == "srv_m_t_o_"
    assert MCPToolset(object(), prefix="wx_")._local_name("radar") == "wx_radar"
    with pytest.raises(ValueError, match="cannot get a name model providers accept"):
        toolset._local_name("x" * 61)


def named_server(names: list[str]) -> Server:
    """A low-level ``Server`` with one echo tool per name (names as given, however odd)."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=n, description=f"Echo tool number {i}.", input_schema={"type": "object", "properties": {}})
                for i, n in enumerate(names)
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=f"called {params.name}")])

    return Server("odd-names", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_a_tool_with_an_unusable_name_is_left_out_and_the_others_stay(caplog: pytest.LogCaptureFixture) -> None:
    long = "x" * 70
    names = ["search", long, "a.b", "a_b", "weird name!", "c.d", "c:d"]
    caplog.set_level("WARNING", logger="agentkit_tools.mcp_client")
    async with MCPToolset(named_server(names)) as tools:
        assert [t.name for t in tools.tools()] == ["a_b", "c_d", "search", "weird_name_"]
        assert {t.name: t.remote_name for t in tools.tools()}["a_b"] == "a_b"  # the exact name keeps it
        assert tools.skipped == {
            long: f"MCP tool {long!r} cannot get a name model providers accept (1-64 characters of a-z, A-Z, 0-9, "
            "'_', '-'): use a shorter prefix or exclude it",
            "a.b": "its name becomes 'a_b', which MCP tool 'a_b' already has: exclude one of them or list the "
            "other with include=",
            "c:d": "its name becomes 'c_d', which MCP tool 'c.d' already has: exclude one of them or list the "
            "other with include=",
        }
        assert sorted(r.getMessage() for r in caplog.records) == sorted(
            f"MCP tool {n!r} left out: {why}" for n, why in tools.skipped.items()
        )
        env = await Invoker(tools.registry()).invoke({"name": "weird_name_", "input": {}})
        assert env == {"ok": True, "value": "called weird name!", "elapsed_ms": env["elapsed_ms"]}
    async with MCPToolset(named_server(["search", long]), prefix="p_") as tools:
        assert [t.name for t in tools.tools()] == ["p_search"] and list(tools.skipped) == [long]


def test_toolset_timeout_is_checked_when_built() -> None:
    for bad in (0, -1, float("nan"), True, "5"):
        with pytest.raises(Exception) as info:
            MCPToolset(named_server([]), timeout_s=bad)
        assert str(info.value) == (
            f"MCPToolset: timeout_s={bad!r} is not a deadline; pass a number of seconds greater than 0 and at "
            "most 2592000 (30 days), or None for the dispatcher's default of 10 s"
        )
        assert type(info.value).__name__ == "ToolDefinitionError"
