"""Per-run tool visibility: ``ToolRegistry.view`` shows and admits only some tools, with
byte-stable renderings, enforced by the Invoker and ``dispatch`` at call time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentkit_tools import Invoker, ToolRegistry, dispatch
from agentkit_tools.roundtrip import anthropic_tool_results
from fakes.inventory_tools import delete_sku, get_stock, registry, set_price


def test_view_by_flag_shares_tools_and_renderings() -> None:
    ro = registry.view(read_only=True)
    assert ro.names() == ["get_stock"]
    assert ro.get("get_stock") is get_stock
    assert ro.to_anthropic() == [get_stock.to_anthropic()]
    writers = registry.view(read_only=False)
    assert writers.names() == ["delete_sku", "set_price"]
    assert writers.get("set_price") is set_price
    # the parent is untouched
    assert registry.names() == ["delete_sku", "get_stock", "set_price"]


def test_view_by_names_exclude_and_predicate() -> None:
    assert registry.view(["set_price", "get_stock"]).names() == ["get_stock", "set_price"]
    assert registry.view("get_stock").names() == ["get_stock"]
    assert registry.view(exclude=["delete_sku"]).names() == ["get_stock", "set_price"]
    assert registry.view(["set_price", "get_stock"], exclude="set_price").names() == ["get_stock"]

    def allowed(tool: object, ctx: SimpleNamespace) -> bool:
        return getattr(tool, "name") in ctx.allowed

    ctx = SimpleNamespace(run_id="r1", allowed={"delete_sku"})
    assert registry.view(where=allowed, ctx=ctx).names() == ["delete_sku"]
    # every filter given must pass
    assert registry.view(read_only=True, where=allowed, ctx=ctx).names() == []


def test_view_refuses_unknown_names() -> None:
    with pytest.raises(KeyError) as err:
        registry.view(["get_stock", "get_stok"], exclude=["nope"])
    assert err.value.args[0] == (
        "ToolRegistry.view: no tool named 'get_stok', 'nope'; registered: delete_sku, get_stock, set_price"
    )


def test_view_renderings_are_byte_stable() -> None:
    a = ToolRegistry([get_stock, set_price, delete_sku]).view(exclude=["delete_sku"])
    b = ToolRegistry([delete_sku, set_price, get_stock]).view(["get_stock", "set_price"])
    for provider in ("anthropic", "openai", "openai-responses-strict", "gemini", "mcp"):
        assert json.dumps(a.render(provider)).encode() == json.dumps(b.render(provider)).encode()
        assert a.render(provider) == [t for t in registry.render(provider) if t.get("name", t.get("function", {}).get("name")) != "delete_sku"]


def test_view_keeps_limits() -> None:
    reg = ToolRegistry([get_stock], max_result_chars=50, max_media_bytes=1000)
    v = reg.view()
    assert (v.max_result_chars, v.max_media_bytes) == (50, 1000)


HIDDEN = (
    "No tool named 'delete_sku'. Available tools: get_stock. Call one of those instead."
)


async def test_hidden_tool_answers_unknown_tool_in_the_invoker() -> None:
    view = registry.view(read_only=True)
    env = await Invoker(view).invoke({"id": "1", "name": "delete_sku", "input": {"sku": "SKU-1"}})
    assert env["ok"] is False
    assert env["error"]["code"] == "unknown_tool"
    assert env["error"]["message"] == HIDDEN
    assert env["error"]["available"] == ["get_stock"]
    ok = await Invoker(view).invoke({"id": "2", "name": "get_stock", "input": {"sku": "SKU-1"}})
    assert ok["ok"] is True and ok["value"] == {"sku": "SKU-1", "on_hand": 12}

    message = await anthropic_tool_results(
        {"content": [{"type": "tool_use", "id": "t1", "name": "delete_sku", "input": {"sku": "SKU-1"}}]}, view
    )
    assert message == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": HIDDEN, "is_error": True}],
    }


def test_hidden_tool_answers_unknown_tool_in_dispatch() -> None:
    env = dispatch({"id": "1", "name": "delete_sku", "input": {"sku": "SKU-1"}}, registry.view(["get_stock"]))
    assert env["error"]["code"] == "unknown_tool"
    assert env["error"]["message"] == HIDDEN
