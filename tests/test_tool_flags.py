"""A tool's flags as the Invoker follows them: what the core read of a ``FunctionTool``'s flags is
kept until an attribute of a tool or of its class is set or deleted, and a tool whose flags can
change without an assignment (a subclass's property, a duck-typed tool's class attribute, a flag
whose truth value is computed) is read at every call."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from agentkit_tools import FunctionTool, Invoker, ToolContext, ToolRegistry, ToolSchema, _core, tool

APPROVAL = {
    "ok": False,
    "error": {
        "code": "approval_required",
        "message": "echo needs the user's approval before it runs, and it was not run. Ask the user whether "
                   'to allow echo with arguments {"x":3}; call it again only after they approve.',
        "tool": "echo",
    },
}


def plain(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    if out.get("ok"):
        assert isinstance(out.pop("elapsed_ms"), float)
    return out


def make_echo(runs: list[str]) -> FunctionTool:
    loop = threading.get_ident()

    @tool(read_only=True, non_blocking=True)
    def echo(x: int) -> int:
        """Return the integer x it was given, unchanged."""
        runs.append("loop" if threading.get_ident() == loop else "worker")
        return x

    return echo


CALL = {"id": "1", "name": "echo", "input": {"x": 3}}
_runs = itertools.count()


def fresh() -> ToolContext:
    """A conversation of its own (no repeat count, no idempotency window shared between calls)."""
    return ToolContext(run_id=f"run-{next(_runs)}")


async def test_a_flag_set_or_deleted_between_calls_is_followed() -> None:
    runs: list[str] = []
    echo = make_echo(runs)
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    echo.requires_approval = True
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    del echo.requires_approval  # the class default (False) again
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    echo.non_blocking = False
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    echo.fn = lambda args, ctx: args["x"] * 2  # another body
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 6}
    assert runs == ["loop", "loop", "worker"]


async def test_a_flag_change_reaches_every_registry_and_invoker() -> None:
    runs: list[str] = []
    echo = make_echo(runs)
    invokers = [Invoker(ToolRegistry([echo])), Invoker(ToolRegistry([echo])), Invoker([echo], middleware=[])]
    for inv in invokers:
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    echo.non_blocking = False
    for inv in invokers:
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    assert runs == ["loop"] * 3 + ["worker"] * 3


async def test_a_class_attribute_change_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[str] = []
    echo = make_echo(runs)
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    monkeypatch.setattr(FunctionTool, "check_output", lambda self, value, ctx: [value, "checked"])
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": [3, "checked"]}
    monkeypatch.undo()
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    del echo.non_blocking  # now read from the class
    monkeypatch.setattr(FunctionTool, "non_blocking", True)
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    monkeypatch.undo()
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    assert runs == ["loop", "loop", "loop", "loop", "worker"]


async def test_a_subclass_property_flag_is_read_at_every_call() -> None:
    state = {"inline": True}

    class Switch(FunctionTool):
        @property  # type: ignore[override]
        def non_blocking(self) -> bool:
            return state["inline"]

        @non_blocking.setter
        def non_blocking(self, value: bool) -> None:
            pass

    runs: list[str] = []
    loop = threading.get_ident()

    def echo(x: int) -> int:
        """Return the integer x it was given, unchanged."""
        runs.append("loop" if threading.get_ident() == loop else "worker")
        return x

    inv = Invoker(ToolRegistry([Switch.from_callable(echo, side_effecting=False)]))
    for inline in (True, False, True):
        state["inline"] = inline
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    assert runs == ["loop", "worker", "loop"]


async def test_a_flag_whose_truth_value_changes_is_read_at_every_call() -> None:
    state = {"approve": False}

    class Toggle:
        def __bool__(self) -> bool:
            return state["approve"]

    echo = make_echo([])
    echo.requires_approval = Toggle()  # type: ignore[assignment]
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    state["approve"] = True
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    state["approve"] = False
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}


async def test_a_duck_typed_tools_class_attribute_is_read_at_every_call() -> None:
    class Echo:
        name = "echo"
        description = "Return the integer x it was given, unchanged."
        side_effecting = False
        requires_approval = False
        output_schema = None
        schema = ToolSchema("echo", description, {"type": "object", "properties": {"x": {"type": "integer"}}})

        async def run(self, args: Any, ctx: Any) -> int:
            return args["x"]  # type: ignore[no-any-return]

    inv = Invoker(ToolRegistry([Echo()]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    Echo.requires_approval = True
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    Echo.requires_approval = False
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}


def test_setting_an_attribute_of_a_tool_or_its_class_bumps_the_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    bumps: list[None] = []
    monkeypatch.setattr("agentkit_tools.tools._flags_changed", lambda: bumps.append(None))
    echo = make_echo([])
    echo.idempotent = True
    del echo.idempotent
    FunctionTool.some_attribute = 1  # type: ignore[attr-defined]
    del FunctionTool.some_attribute  # type: ignore[attr-defined]
    assert len(bumps) == 4


async def test_begin_here_answers_with_the_bare_envelope() -> None:
    """``Pipeline.begin(..., here=True)`` returns the envelope itself when the core answered the
    call (no ``(state, step, payload)`` tuple to unpack), else that tuple."""
    echo = make_echo([])
    reg = ToolRegistry([echo])
    pipe = _core.Pipeline([], "scope", True, [])
    env = pipe.begin(reg._core, CALL, None, True)
    assert plain(env) == {"ok": True, "value": 3}
    refused = pipe.begin(reg._core, {"id": "1", "name": "nope", "input": {}}, None, True)
    assert refused == {
        "ok": False,
        "error": {
            "code": "unknown_tool",
            "message": "No tool named 'nope'. Available tools: echo. Call one of those instead.",
            "available": ["echo"],
        },
    }
    echo.non_blocking = False  # a worker body: the driver's step
    m, step, arg = pipe.begin(reg._core, CALL, None, True)
    assert (type(m).__name__, step, arg[0], dict(arg[1]), arg[2], arg[3]) == ("Call", _core.STEP_RUN, echo, {"x": 3}, None, _core.BODY_WORKER)
    m, step, env = pipe.begin(reg._core, {"id": "1", "name": "nope", "input": {}}, None)  # here=False: the tuple
    assert (m, step, env) == (None, _core.STEP_DONE, refused)
