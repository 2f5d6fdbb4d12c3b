"""``dispatch``: validation of every call and the whole failure ladder as envelopes (SPEC §4, §7)."""

from __future__ import annotations

import asyncio
import enum
import json
import threading
import time
from typing import Literal, Optional

import pytest

from agentkit_tools import (
    FunctionTool,
    ToolArgumentError,
    ToolError,
    ToolRegistry,
    ToolSchema,
    dispatch,
    tool,
)


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


SEEN: dict[str, object] = {}


@tool(read_only=True)
def convert(value: float, unit: Unit, tags: set[str] = frozenset(), pair: tuple[int, str] | None = None) -> str:
    """Convert a temperature reading into the requested unit.

    Args:
        value: The reading.
        unit: Target unit.
        tags: Labels for the reading.
        pair: An (id, label) pair.
    """
    SEEN.update(value=value, unit=unit, tags=tags, pair=pair)
    return f"{value} {unit.value}"


@tool(read_only=True, timeout_s=0.2)
def stuck(seconds: float = 1.0) -> None:
    """Sleep longer than the deadline so the call times out."""
    time.sleep(seconds)


CANCELLED = threading.Event()


@tool(read_only=True, timeout_s=0.2)
async def stuck_async() -> None:
    """Await forever so the call times out and is cancelled."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        CANCELLED.set()
        raise


@tool(side_effecting=True)
def fail(kind: Literal["business", "bug", "args"] = "business") -> None:
    """Fail on purpose, in the way the caller asks for."""
    if kind == "business":
        raise ToolError("Order 7 is locked. Ask the user to unlock it, then call again.", code="locked", retriable=True, order=7)
    if kind == "args":
        raise ToolArgumentError("fail", invalid=(("kind", "must be business today"),), accepted=("kind",))
    raise ZeroDivisionError("division by zero")


@tool(read_only=True, output_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "title": "Count"})
def count(broken: bool = False) -> dict:
    """Count things; returns a malformed value when asked to."""
    return {"n": "many"} if broken else {"n": 3}


@tool(read_only=True)
def optional_arg(limit: Optional[int] = None, note: str = "x") -> str:
    """Echo an optional limit back to the caller as text."""
    return f"{limit}:{note}"


REG = ToolRegistry.from_tools([convert, stuck, stuck_async, fail, count, optional_arg])


def error(call: dict) -> dict:
    env = dispatch(call, REG)
    assert env["ok"] is False
    return env["error"]


def test_valid_call_converts_values_for_the_body():
    env = dispatch({"id": "1", "name": "convert", "input": {"value": 21, "unit": "celsius", "tags": ["a", "b"], "pair": [1, "x"]}}, REG)
    assert env["ok"] is True and env["value"] == "21 celsius"
    assert isinstance(env["elapsed_ms"], float)
    assert SEEN == {"value": 21, "unit": Unit.CELSIUS, "tags": {"a", "b"}, "pair": (1, "x")}


def test_raw_json_text_and_openai_shapes():
    chat = {"id": "c", "type": "function", "function": {"name": "optional_arg", "arguments": '{"limit": 5}'}}
    responses = {"type": "function_call", "call_id": "r", "name": "optional_arg", "arguments": '{"note": "é"}'}
    assert dispatch(chat, REG)["value"] == "5:x"
    assert dispatch(responses, REG)["value"] == "None:é"
    assert dispatch({"name": "optional_arg", "input": ""}, REG)["value"] == "None:x"


def test_unknown_tool_names_the_closest():
    assert error({"name": "convrt", "input": {}}) == {
        "code": "unknown_tool",
        "message": "No tool named 'convrt'. Did you mean 'convert'? Available tools: convert, count, fail, "
        "optional_arg, stuck, stuck_async. Call one of those instead.",
        "available": ["convert", "count", "fail", "optional_arg", "stuck", "stuck_async"],
        "did_you_mean": "convert",
    }
    assert "did_you_mean" not in error({"name": "weather", "input": {}})


def test_invalid_arguments_reports_everything_with_the_schema():
    err = error({"name": "convert", "input": {"value": "21", "unit": "kelvin", "extra": 1}})
    assert err == {
        "code": "invalid_arguments",
        "message": 'tool \'convert\' call rejected: unexpected argument(s) [\'extra\']; invalid argument(s): '
        'value: expected number, got string "21"; unit: must be one of ["celsius","fahrenheit"], got string '
        '"kelvin". Accepted arguments: [\'value\', \'unit\', \'tags\', \'pair\']. Re-read the input schema and call '
        "'convert' again with corrected arguments.",
        "errors": [
            {"path": "extra", "reason": "unexpected argument: this tool does not take it"},
            {"path": "value", "reason": 'expected number, got string "21"'},
            {"path": "unit", "reason": 'must be one of ["celsius","fahrenheit"], got string "kelvin"'},
        ],
        "schema": convert.schema.parameters,
    }


def test_each_invalid_arguments_envelope_has_its_own_copy_of_the_schema():
    """The schema in a rejection is the tool's input schema as plain dicts and lists, a new copy
    per envelope: a host that edits one envelope's schema changes neither the next envelope nor
    the tool."""
    call = {"name": "convert", "input": {"value": "21", "unit": "celsius"}}
    first = error(call)["schema"]
    assert type(first) is dict and type(first["properties"]) is dict
    assert type(first["properties"]["unit"]["enum"]) is list
    first["properties"]["unit"]["enum"].append("kelvin")
    first["properties"].pop("value")
    first["required"].clear()
    second = error(call)["schema"]
    assert second == convert.schema.parameters
    assert second["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]
    assert second["required"] == ["value", "unit"]
    assert second is not first and second["properties"] is not first["properties"]


def test_strictness():
    # True is not an integer; null is not allowed for a non-Optional parameter; a default does not make it nullable.
    assert error({"name": "optional_arg", "input": {"limit": True}})["errors"] == [
        {"path": "limit", "reason": "expected integer or null, got boolean true"}
    ]
    assert error({"name": "optional_arg", "input": {"note": None}})["errors"] == [
        {"path": "note", "reason": 'null is not accepted here; omit the argument to use its default ("x")'}
    ]
    assert error({"name": "convert", "input": {"value": 1, "unit": "celsius", "pair": [1, "a", 2]}})["errors"] == [
        {"path": "pair", "reason": "must have at most 2 item(s), got 3"},
        {"path": "pair[2]", "reason": "not allowed here (no such field or position)"},
    ]
    for bad in ("[1, 2]", "5", '"text"'):
        assert error({"name": "optional_arg", "input": bad})["errors"][0]["path"] == "<arguments>"
    assert error({"name": "optional_arg", "input": "{not json"})["errors"][0]["reason"].startswith(
        "the arguments are not valid JSON"
    )


def test_at_most_five_problems_spelled_out():
    @tool(read_only=True)
    def many(a: int, b: int, c: int, d: int, e: int, f: int, g: int) -> int:
        """Take seven integers and add them all together."""
        return a

    reg = ToolRegistry.from_tools([many])
    env = dispatch({"name": "many", "input": {k: "x" for k in "abcdefg"}}, reg)
    assert len(env["error"]["errors"]) == 7
    assert env["error"]["message"].count("expected integer") == 5
    assert "; and 2 more." in env["error"]["message"]


def test_timeouts():
    start = time.perf_counter()
    assert error({"name": "stuck", "input": {}}) == {
        "code": "timeout",
        "message": "stuck did not finish within 0.2s. Do not retry immediately; tell the user the backend is slow.",
    }
    assert time.perf_counter() - start < 0.9  # the wait is bounded; the thread finishes on its own
    CANCELLED.clear()
    assert error({"name": "stuck_async", "input": {}})["code"] == "timeout"
    assert CANCELLED.wait(2.0)


def test_tool_errors_bugs_and_shape_mismatches():
    assert error({"name": "fail", "input": {}}) == {
        "code": "locked",
        "message": "Order 7 is locked. Ask the user to unlock it, then call again.",
        "retriable": True,
        "order": 7,
    }
    assert error({"name": "fail", "input": {"kind": "bug"}}) == {
        "code": "internal_error",
        "message": "fail failed: ZeroDivisionError: division by zero. This is a bug in the tool, not in your "
        "arguments; do not retry.",
    }
    args_err = error({"name": "fail", "input": {"kind": "args"}})
    assert (args_err["code"], args_err["errors"]) == ("invalid_arguments", [{"path": "kind", "reason": "must be business today"}])
    assert error({"name": "count", "input": {"broken": True}}) == {
        "code": "output_mismatch",
        "message": "count returned a value that does not match its declared output schema 'Count' (n: expected "
        'integer, got string "many"). This is a fault in the tool, not in your arguments: try different '
        "arguments once, or tell the user the tool is returning malformed data.",
    }
    assert dispatch({"name": "count", "input": {}}, REG)["value"] == {"n": 3}


def test_malformed_calls_are_envelopes_too():
    assert dispatch("not a call", REG)["error"]["code"] == "invalid_call"  # type: ignore[arg-type]
    assert dispatch({"input": {}}, REG)["error"]["code"] == "invalid_call"


def test_hand_built_tools_are_validated_by_the_registry():
    async def fn(args, ctx):
        return dict(args)

    t = FunctionTool(
        "echo",
        fn,
        "Echo the arguments back.",
        False,
        ToolSchema("echo", "Echo the arguments back.", {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}),
    )
    reg = ToolRegistry.from_tools([t])
    assert dispatch({"name": "echo", "input": {"x": 1}}, reg)["value"] == {"x": 1}
    assert dispatch({"name": "echo", "input": {}}, reg)["error"]["errors"] == [{"path": "x", "reason": "missing required argument"}]


def test_run_validates_and_raises_argument_error():
    with pytest.raises(ToolArgumentError) as err:
        asyncio.run(convert.run({"value": "x", "zzz": 1}, None))
    e = err.value
    assert (e.tool_name, e.unexpected, e.missing, e.accepted, e.invalid) == (
        "convert",
        ("zzz",),
        ("unit",),
        ("value", "unit", "tags", "pair"),
        (("value", 'expected number, got string "x"'),),
    )
    assert str(e) == (
        "tool 'convert' call rejected: unexpected argument(s) ['zzz']; missing required argument(s) ['unit']; "
        "invalid argument(s): value: expected number, got string \"x\". Accepted arguments: ['value', 'unit', 'tags', 'pair']"
    )
    assert isinstance(e, ValueError)
    assert json.loads(json.dumps(asyncio.run(convert.run('{"value": 1.5, "unit": "fahrenheit"}')))) == "1.5 fahrenheit"


def test_the_call_shapes_are_read_by_one_rule() -> None:
    from agentkit_tools import _core

    args = {"sku": "A"}
    assert _core.call_parts({"id": "t1", "name": "n", "input": args}) == ("t1", "n", args)
    assert _core.call_parts({"id": "c1", "function": {"name": "n", "arguments": "{}"}}) == ("c1", "n", "{}")
    assert _core.call_parts({"call_id": "r1", "name": "n", "arguments": "{}"}) == ("r1", "n", "{}")
    # `function` (a dict) holds the name and arguments even when the call has its own
    assert _core.call_parts({"name": "outer", "function": {"name": "inner"}}) == (None, "inner", None)
    assert _core.call_parts({"id": None, "call_id": "r2", "name": 5}) == ("r2", None, None)
    assert _core.call_parts(["not", "a", "call"]) == (None, None, None)
    assert _core.invalid_call_envelope() == {"ok": False, "error": {
        "code": "invalid_call",
        "message": "The tool call has no tool name. Send a call with a 'name' and its arguments.",
    }}
    assert dispatch({"name": "outer", "function": {"name": "nope"}}, REG)["error"]["message"].startswith(
        "No tool named 'nope'."
    )
def test_a_dispatch_inside_an_async_tool_under_dispatch_runs_and_blames_the_right_tool():
    """An async tool runs under ``dispatch`` on the process's long-lived loop; when its body
    dispatched an async tool itself, the inner call could not wait on that same loop and its
    envelope said ``inner failed: RuntimeError ... This is a bug in the tool`` — blaming the
    inner tool for its caller's nesting. The inner call now runs (on a loop of its own; the
    outer body waits for it as it would for a sync call) and a timeout names the tool that
    timed out with its own limit."""

    @tool(read_only=True, timeout_s=0.3)
    async def inner(x: int) -> int:
        """Sleep for x tenths of a second, then return x."""
        await asyncio.sleep(x / 10)
        return x

    inner_registry = ToolRegistry([inner])

    @tool(read_only=True, timeout_s=5.0)
    async def outer(x: int) -> dict:
        """Dispatch a call of the inner tool and return its envelope."""
        return dispatch({"id": "i", "name": "inner", "input": {"x": x}}, inner_registry)

    registry = ToolRegistry([outer])
    env = dispatch({"id": "o", "name": "outer", "input": {"x": 1}}, registry)
    assert env["ok"] is True and env["value"]["ok"] is True and env["value"]["value"] == 1
    started = time.monotonic()
    env = dispatch({"id": "o", "name": "outer", "input": {"x": 30}}, registry)
    assert time.monotonic() - started < 1.5
    assert env["value"] == {"ok": False, "error": {"code": "timeout", "message": (
        "inner did not finish within 0.3s. Do not retry immediately; tell the user the backend is slow.")}}


def test_async_bodies_under_dispatch_share_one_loop_that_runs_between_calls_from_any_thread():
    """Every async body under ``dispatch`` runs on the one long-lived loop of the process, from
    whichever thread calls: a client a body bound to that loop (here an ``asyncio.Queue`` and the
    task that serves it) keeps working in later calls from another thread, and the loop runs
    between calls (the served queue answers a caller that waits for it without dispatching)."""
    state: dict[str, object] = {}
    answered = threading.Event()

    async def serve(requests: asyncio.Queue, replies: asyncio.Queue) -> None:
        while True:
            x = await requests.get()
            await replies.put(x * 2)
            if x == 100:
                answered.set()

    @tool(read_only=True)
    async def doubled(x: int) -> int:
        """Ask a served queue on the event loop for twice x and return the answer."""
        loop = asyncio.get_running_loop()
        if "loops" not in state:
            state["loops"] = []
            state["requests"], state["replies"] = asyncio.Queue(), asyncio.Queue()
            state["server"] = loop.create_task(serve(state["requests"], state["replies"]))
        state["loops"].append(loop)  # type: ignore[attr-defined]
        await state["requests"].put(x)  # type: ignore[attr-defined]
        if x == 100:
            return -1  # the answer comes between calls
        return await state["replies"].get()  # type: ignore[attr-defined,no-any-return]

    registry = ToolRegistry([doubled])
    assert dispatch({"id": "1", "name": "doubled", "input": {"x": 1}}, registry)["value"] == 2
    other: list[object] = []
    worker = threading.Thread(target=lambda: other.append(dispatch({"id": "2", "name": "doubled", "input": {"x": 2}}, registry)))
    worker.start()
    worker.join(5)
    assert [e["value"] for e in other] == [4]  # type: ignore[index]
    assert dispatch({"id": "3", "name": "doubled", "input": {"x": 100}}, registry)["value"] == -1
    assert answered.wait(5)  # served while nobody was in dispatch
    assert dispatch({"id": "4", "name": "doubled", "input": {"x": 3}}, registry)["value"] == 200  # the reply left over
    loops = state["loops"]
    assert len(loops) == 4 and all(lp is loops[0] for lp in loops)  # type: ignore[arg-type]
    assert loops[0].is_running()  # type: ignore[attr-defined]
