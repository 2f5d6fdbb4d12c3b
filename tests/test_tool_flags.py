"""A tool's flags as the Invoker follows them: what the core read of a ``FunctionTool``'s flags is
kept only while Python's attribute access on the tool answers the same objects (however it was
changed: assignment, ``object.__setattr__``, ``vars(t)[...]``, ``patch.dict``, a key of the dict's
own that now equals the name, a property put on the class), what its class defines is read at
every call, and a tool whose flags can change without touching its dict (a subclass's property, a
duck-typed tool's class attribute, a flag whose truth value is computed) is read at every call."""

from __future__ import annotations

import abc
import gc
import itertools
import logging
import threading
import typing
import weakref
from typing import Any
from unittest import mock

import pytest

from agentkit_tools import FunctionTool, Invoker, ToolContext, ToolRegistry, ToolSchema, _core, dispatch, tool
from agentkit_tools.middleware import Middleware, default_chain, egress

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


async def test_a_flag_changed_after_an_unrelated_change_or_by_the_body_is_followed() -> None:
    """What is kept of a tool is kept while its instance dict and its classes' dicts are unchanged:
    a change of another key (an attribute of the host's own) is a change too, and a flag changed
    right after it is followed; so is a flag the body itself sets during a call (at the next call),
    and an attribute of the host's own set on ``FunctionTool`` itself."""
    runs: list[str] = []
    echo = make_echo(runs)
    inv = Invoker(ToolRegistry([echo]))
    ok = {"ok": True, "value": 3}
    for _ in range(3):
        assert plain(await inv.invoke(CALL, fresh())) == ok
    echo.note = "the host's own"  # type: ignore[attr-defined]
    assert plain(await inv.invoke(CALL, fresh())) == ok
    echo.requires_approval = True
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    echo.requires_approval = False
    assert plain(await inv.invoke(CALL, fresh())) == ok
    body = echo.fn

    def flips(args: Any, ctx: Any) -> Any:
        out = body(args, ctx)
        echo.non_blocking = False
        echo.requires_approval = True
        return out

    echo.fn = flips
    assert plain(await inv.invoke(CALL, fresh())) == ok
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    echo.fn = body
    echo.requires_approval = False
    with mock.patch.object(FunctionTool, "host_marker", True, create=True):
        assert plain(await inv.invoke(CALL, fresh())) == ok
        echo.non_blocking = True
        assert plain(await inv.invoke(CALL, fresh())) == ok
    assert plain(await inv.invoke(CALL, fresh())) == ok
    assert runs == ["loop"] * 6 + ["worker", "loop", "loop"]


async def test_a_flag_assigned_in_a_hot_loop_is_followed_at_every_call() -> None:
    """Plain assignments repeated in a loop (the interpreter specializes the store: on Python 3.13
    it can write an instance's attribute without its dict's version changing, which is why what is
    kept of a tool is only trusted on 3.10-3.12) are followed at every call, whatever was kept."""
    runs: list[str] = []
    echo = make_echo(runs)
    inv = Invoker(ToolRegistry([echo]))
    answers = []
    for i in range(60):
        echo.requires_approval = i % 3 == 1
        echo.non_blocking = i % 2 == 0
        env = await inv.invoke(CALL, fresh())
        answers.append("approval" if env == APPROVAL else plain(env)["value"])
    assert answers == ["approval" if i % 3 == 1 else 3 for i in range(60)]
    assert runs == ["loop" if i % 2 == 0 else "worker" for i in range(60) if i % 3 != 1]


async def test_a_flag_moved_or_rekeyed_in_the_instance_dict_is_followed() -> None:
    """What is kept of a tool's flags is checked where each entry was in the instance dict: an
    entry deleted and written again (it moves to the end of the dict's order, with the same value
    or another one), an entry keyed by another string object equal to its name, and the dict
    rebuilt in another order are followed at the next call; so are the attributes read at every
    call (``fn``, ``non_blocking``) moved the same way."""
    runs: list[str] = []
    echo = make_echo(runs)
    inv = Invoker(ToolRegistry([echo]))
    ok = {"ok": True, "value": 3}
    assert plain(await inv.invoke(CALL, fresh())) == ok
    d = vars(echo)
    d["requires_approval"] = d.pop("requires_approval")  # moved, the same value
    assert plain(await inv.invoke(CALL, fresh())) == ok
    del d["requires_approval"]
    d["requires_approval"] = True  # moved, another value
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    key = "".join(["requires_", "approval"])  # equal to the name, another object
    assert key == "requires_approval" and key is not "requires_approval"  # noqa: F632
    del d["requires_approval"]
    d[key] = False
    assert plain(await inv.invoke(CALL, fresh())) == ok
    d[key] = True
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    items = list(d.items())
    d.clear()
    d.update(reversed(items))  # every value the same object, every entry elsewhere
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    d["requires_approval"] = False
    assert plain(await inv.invoke(CALL, fresh())) == ok
    d["fn"] = d.pop("fn")
    d["non_blocking"] = d.pop("non_blocking")
    assert plain(await inv.invoke(CALL, fresh())) == ok
    loop = threading.get_ident()

    def twice(args: Any, ctx: Any) -> int:
        runs.append("loop" if threading.get_ident() == loop else "worker")
        return args["x"] * 2

    del d["fn"]
    d["fn"] = twice
    del d["non_blocking"]
    d["non_blocking"] = False
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 6}
    assert runs == ["loop"] * 5 + ["worker"]


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


class PassThrough(Middleware):
    """A user middleware that hands every call on unchanged (the call then goes through
    ``Pipeline.begin_call``)."""

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handle(tc: Any) -> Any:
            return await nxt(tc)

        return handle


def _object_setattr(t: FunctionTool, name: str, value: Any) -> None:
    object.__setattr__(t, name, value)


def _vars_item(t: FunctionTool, name: str, value: Any) -> None:
    vars(t)[name] = value


def _dict_update(t: FunctionTool, name: str, value: Any) -> None:
    t.__dict__.update({name: value})


@pytest.mark.parametrize("write", [_object_setattr, _vars_item, _dict_update])
async def test_a_flag_written_into_the_instance_dict_is_followed_on_every_path(write: Any) -> None:
    echo = make_echo([])
    alone = Invoker(ToolRegistry([echo]))
    behind = Invoker(ToolRegistry([echo]), middleware=[PassThrough(), *default_chain()])
    for inv in (alone, behind):
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    write(echo, "requires_approval", True)
    assert await alone.invoke(CALL, fresh()) == APPROVAL
    assert await behind.invoke(CALL, fresh()) == APPROVAL
    assert dispatch(CALL, alone.registry) == APPROVAL
    write(echo, "requires_approval", False)
    for inv in (alone, behind):
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}


EGRESS_DENIED = {
    "ok": False,
    "error": {
        "code": "egress_denied",
        "message": "fetch may not reach host 'evil.test': it is not on the allow-list (example.com). Do not retry "
                   "with this URL; use an allowed host or tell the user this host is not permitted.",
        "tool": "fetch",
        "host": "evil.test",
        "allowed": ["example.com"],
    },
}


async def test_patch_dict_on_a_tool_is_followed_by_the_approval_and_egress_gates() -> None:
    @tool(read_only=True, non_blocking=True)
    def fetch(url: str) -> str:
        """Return the URL it was given, unchanged."""
        return url

    call = {"id": "1", "name": "fetch", "input": {"url": "https://evil.test/x"}}
    inv = Invoker(ToolRegistry([fetch]), middleware=[egress(["example.com"])])
    assert plain(await inv.invoke(call, fresh())) == {"ok": True, "value": "https://evil.test/x"}
    with mock.patch.dict(fetch.__dict__, {"url_arg": "url"}):
        assert await inv.invoke(call, fresh()) == EGRESS_DENIED
    assert plain(await inv.invoke(call, fresh())) == {"ok": True, "value": "https://evil.test/x"}

    echo = make_echo([])
    gated = Invoker(ToolRegistry([echo]))
    assert plain(await gated.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    with mock.patch.dict(echo.__dict__, {"requires_approval": True}):
        assert await gated.invoke(CALL, fresh()) == APPROVAL
    assert plain(await gated.invoke(CALL, fresh())) == {"ok": True, "value": 3}


async def test_a_class_attribute_set_without_assignment_hooks_is_followed() -> None:
    echo = make_echo([])
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    del echo.requires_approval  # read from the class from now on
    type.__setattr__(FunctionTool, "requires_approval", True)
    try:
        assert await inv.invoke(CALL, fresh()) == APPROVAL
    finally:
        type.__setattr__(FunctionTool, "requires_approval", False)
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    original = FunctionTool.check_output
    type.__setattr__(FunctionTool, "check_output", lambda self, value, ctx: ["checked", value])
    try:
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": ["checked", 3]}
        assert plain(dispatch(CALL, ToolRegistry([make_echo([])]))) == {"ok": True, "value": ["checked", 3]}
    finally:
        type.__setattr__(FunctionTool, "check_output", original)
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}


class _Interface(abc.ABC):
    @abc.abstractmethod
    def describe(self) -> str: ...


class _Proto(typing.Protocol):
    def describe(self) -> str: ...


@pytest.mark.parametrize(("base", "meta"), [(_Interface, abc.ABCMeta), (_Proto, type(_Proto)), (abc.ABC, abc.ABCMeta)])
async def test_a_subclass_may_also_derive_from_a_class_with_its_own_metaclass(base: type, meta: type) -> None:
    class Mine(FunctionTool, base):  # type: ignore[misc, valid-type]
        def describe(self) -> str:
            return self.name

    def echo(x: int) -> int:
        """Return the integer x it was given, unchanged."""
        return x

    mine = Mine.from_callable(echo, side_effecting=False, non_blocking=True)
    assert (type(Mine), type(mine).__name__, mine.describe()) == (meta, "Mine", "echo")
    assert plain(await Invoker(ToolRegistry([mine])).invoke(CALL, fresh())) == {"ok": True, "value": 3}


def _raising_flag(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> FunctionTool:
    """A function tool whose ``requires_approval`` (deleted from the instance) is read from a
    class property that raises ``exc``."""
    echo = make_echo([])
    del echo.requires_approval

    def boom(self: FunctionTool) -> bool:
        raise exc

    monkeypatch.setattr(FunctionTool, "requires_approval", property(boom), raising=False)
    return echo


async def test_a_flag_that_raises_while_read_fails_the_call_as_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    echo = make_echo([])
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}  # flags kept
    del echo.requires_approval  # read from the class from now on
    raising = _raising_flag(monkeypatch, RuntimeError("flag read failed"))
    failed = {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "The call could not be completed: RuntimeError: flag read failed. This is a fault in the "
                       "agent's tooling, not in your arguments; do not retry.",
        },
    }
    with caplog.at_level(logging.ERROR):
        assert await inv.invoke(CALL, fresh()) == failed
        assert await Invoker(ToolRegistry([raising])).invoke(CALL, fresh()) == failed
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("ERROR", "Invoker failed on a call of 'echo'")] * 2
    # A chain that never reads the flag never runs it.
    for t in (echo, raising):
        assert plain(await Invoker(ToolRegistry([t]), middleware=[]).invoke(CALL, fresh())) == {"ok": True, "value": 3}


class _NoTruth:
    """A ``url_arg`` whose truth value cannot be read."""

    def __bool__(self) -> bool:
        raise RuntimeError("url_arg has no truth value")

    def __str__(self) -> str:
        return "url"


async def test_a_url_arg_whose_truth_value_raises_fails_the_egress_check_closed(caplog: pytest.LogCaptureFixture) -> None:
    """The egress rule never skips its check for a ``url_arg`` it could not read: the call is not
    run and the model gets the ``internal_error`` envelope (a fault in the tooling, not to be
    retried), through ``invoke`` and ``invoke_many``. ``dispatch`` and a chain without the egress
    rule never read the flag: they run the tool."""
    runs: list[str] = []

    @tool(read_only=True)
    def fetch(url: str) -> str:
        """Fetch a web page by its absolute URL and return its text."""
        runs.append(url)
        return "page"

    fetch.url_arg = _NoTruth()
    call = {"id": "1", "name": "fetch", "input": {"url": "https://evil.example/x"}}
    failed = {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "The call could not be completed: RuntimeError: url_arg has no truth value. This is a "
                       "fault in the agent's tooling, not in your arguments; do not retry.",
        },
    }
    inv = Invoker(ToolRegistry([fetch]), middleware=[*default_chain(), egress(allow=["example.com"])])
    with caplog.at_level(logging.ERROR):
        assert await inv.invoke(call, fresh()) == failed
        assert await inv.invoke_many([call, {**call, "id": "2"}], fresh()) == [failed, failed]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("ERROR", "Invoker failed on a call of 'fetch'")] * 3
    assert runs == []
    assert plain(await Invoker(ToolRegistry([fetch])).invoke(call, fresh())) == {"ok": True, "value": "page"}
    assert plain(dispatch(call, ToolRegistry([fetch]))) == {"ok": True, "value": "page"}
    assert runs == ["https://evil.example/x"] * 2


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
async def test_a_flag_raising_keyboard_interrupt_or_system_exit_propagates(monkeypatch: pytest.MonkeyPatch, exc: type[BaseException]) -> None:
    echo = _raising_flag(monkeypatch, exc())
    with pytest.raises(exc):
        await Invoker(ToolRegistry([echo])).invoke(CALL, fresh())
    with pytest.raises(exc):
        dispatch(CALL, ToolRegistry([echo]))


@pytest.mark.parametrize("kind", ["inline", "worker", "async"])
async def test_an_output_check_the_body_installs_checks_that_same_call(kind: str) -> None:
    t: Any = None

    def install() -> None:
        t.check_output = lambda value, ctx=None: ["checked", value]

    if kind == "async":

        @tool(read_only=True)
        async def echo(x: int) -> int:
            """Return the integer x it was given, unchanged."""
            install()
            return x

    else:

        @tool(read_only=True, non_blocking=kind == "inline")
        def echo(x: int) -> int:
            """Return the integer x it was given, unchanged."""
            install()
            return x

    t = echo
    inv = Invoker(ToolRegistry([t]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": ["checked", 3]}
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": ["checked", 3]}


async def test_a_replaced_fn_is_freed_without_another_call() -> None:
    class Body:
        def __call__(self, args: Any, ctx: Any) -> int:
            return args["x"]  # type: ignore[no-any-return]

    echo = make_echo([])
    old = Body()
    echo.fn = old
    invokers = [Invoker(ToolRegistry([echo])) for _ in range(3)] + [Invoker([echo], middleware=[PassThrough(), *default_chain()])]
    for inv in invokers:
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    gone = weakref.ref(old)
    del old
    echo.fn = Body()
    gc.collect()
    assert gone() is None
    for inv in invokers:
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}


def test_function_tool_has_no_assignment_hooks() -> None:
    """A tool's attributes are plain instance attributes: nothing runs when one is set (from a
    ``__del__`` at interpreter exit as well), and its class is a plain ``type``."""
    assert (type(FunctionTool), FunctionTool.__setattr__, FunctionTool.__delattr__) == (type, object.__setattr__, object.__delattr__)
    assert not hasattr(_core, "flags_changed")


class _Shadow:
    """A key hashing like the name ``s`` that equals it only once armed."""

    def __init__(self, s: str) -> None:
        self.s, self.armed = s, False

    def __hash__(self) -> int:
        return hash(self.s)

    def __eq__(self, other: object) -> bool:
        return self.armed and other == self.s


def _shadow(t: FunctionTool, name: str, old: Any, new: Any) -> _Shadow:
    """``vars(t)`` with a ``_Shadow(name)`` key holding ``new`` first in the name's probe chain and
    the ``name`` entry itself (holding ``old``) after it: ``getattr(t, name)`` is ``old`` until the
    shadow is armed, ``new`` from then on, while the ``name`` entry still holds ``old``."""
    d = vars(t)
    del d[name]
    key = _Shadow(name)
    d[key] = new
    d[name] = old
    return key


def _fetch() -> FunctionTool:
    @tool(read_only=True, non_blocking=True)
    def fetch(url: str) -> str:
        """Return the URL it was given, unchanged."""
        return url

    return fetch


FETCH = {"id": "1", "name": "fetch", "input": {"url": "https://evil.test/x"}}


async def test_a_key_that_comes_to_equal_a_flags_name_is_followed_as_getattr_follows_it() -> None:
    echo = make_echo([])
    inv = Invoker(ToolRegistry([echo]))
    key = _shadow(echo, "requires_approval", False, True)
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    assert plain(dispatch(CALL, inv.registry)) == {"ok": True, "value": 3}
    key.armed = True
    assert (echo.requires_approval, vars(echo)["requires_approval"]) == (True, True)
    assert await inv.invoke(CALL, fresh()) == APPROVAL
    assert dispatch(CALL, inv.registry) == APPROVAL

    fetch = _fetch()
    gated = Invoker(ToolRegistry([fetch]), middleware=[egress(["example.com"])])
    key = _shadow(fetch, "url_arg", None, "url")
    assert plain(await gated.invoke(FETCH, fresh())) == {"ok": True, "value": "https://evil.test/x"}
    key.armed = True
    assert fetch.url_arg == "url"
    assert await gated.invoke(FETCH, fresh()) == EGRESS_DENIED


async def test_a_key_that_comes_to_equal_fn_or_non_blocking_is_followed() -> None:
    echo = make_echo([])
    inv = Invoker(ToolRegistry([echo]))
    key = _shadow(echo, "fn", echo.fn, lambda args, ctx: "new body")
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    key.armed = True
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": "new body"}
    assert plain(dispatch(CALL, inv.registry)) == {"ok": True, "value": "new body"}

    runs: list[str] = []
    other = make_echo(runs)
    inv = Invoker(ToolRegistry([other]))
    key = _shadow(other, "non_blocking", True, False)
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    key.armed = True
    assert other.non_blocking is False
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    assert runs == ["loop", "worker"]


async def test_a_data_descriptor_on_function_tool_is_followed_from_the_first_call() -> None:
    echo = make_echo([])
    with mock.patch.object(FunctionTool, "requires_approval", new_callable=mock.PropertyMock, return_value=True):
        assert echo.requires_approval is True
        assert await Invoker(ToolRegistry([echo])).invoke(CALL, fresh()) == APPROVAL
        assert dispatch(CALL, ToolRegistry([make_echo([])])) == APPROVAL
    fetch = _fetch()
    with mock.patch.object(FunctionTool, "url_arg", property(lambda self: "url")):
        assert fetch.url_arg == "url"
        assert await Invoker(ToolRegistry([fetch]), middleware=[egress(["example.com"])]).invoke(FETCH, fresh()) == EGRESS_DENIED


async def test_a_data_descriptor_put_on_function_tool_between_calls_is_followed() -> None:
    echo = make_echo([])
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}  # flags kept
    with mock.patch.object(FunctionTool, "requires_approval", new_callable=mock.PropertyMock, return_value=True):
        assert await inv.invoke(CALL, fresh()) == APPROVAL
        assert dispatch(CALL, inv.registry) == APPROVAL
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}

    fetch = _fetch()
    gated = Invoker(ToolRegistry([fetch]), middleware=[egress(["example.com"])])
    assert plain(await gated.invoke(FETCH, fresh())) == {"ok": True, "value": "https://evil.test/x"}
    with mock.patch.object(FunctionTool, "url_arg", property(lambda self: "url")):
        assert await gated.invoke(FETCH, fresh()) == EGRESS_DENIED
    assert plain(await gated.invoke(FETCH, fresh())) == {"ok": True, "value": "https://evil.test/x"}


async def test_a_getattribute_put_on_function_tool_is_followed_for_the_output_check() -> None:
    echo = make_echo([])
    inv = Invoker(ToolRegistry([echo]))
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}

    def getattribute(self: FunctionTool, name: str) -> Any:
        if name == "check_output":
            return lambda value, ctx=None: ["checked", value]
        return object.__getattribute__(self, name)

    with mock.patch.object(FunctionTool, "__getattribute__", getattribute):
        assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": ["checked", 3]}
        assert plain(dispatch(CALL, inv.registry)) == {"ok": True, "value": ["checked", 3]}
    assert plain(await inv.invoke(CALL, fresh())) == {"ok": True, "value": 3}


async def test_a_flag_only_another_chain_reads_is_followed_by_that_chain() -> None:
    """A chain that reads only some flags checks only those: a flag it does not read, changed
    meanwhile, is followed by the chain that reads it, whichever chain called the tool last."""
    fetch = _fetch()
    bare = Invoker(ToolRegistry([fetch]), middleware=[])
    gated = Invoker(ToolRegistry([fetch]), middleware=[egress(["example.com"])])
    ok = {"ok": True, "value": "https://evil.test/x"}
    assert plain(await gated.invoke(FETCH, fresh())) == ok
    assert plain(await bare.invoke(FETCH, fresh())) == ok
    vars(fetch)["url_arg"] = "url"
    assert plain(await bare.invoke(FETCH, fresh())) == ok  # reads no url_arg
    assert await gated.invoke(FETCH, fresh()) == EGRESS_DENIED
    assert plain(await bare.invoke(FETCH, fresh())) == ok
    assert await gated.invoke(FETCH, fresh()) == EGRESS_DENIED
    vars(fetch)["url_arg"] = None
    assert plain(await bare.invoke(FETCH, fresh())) == ok
    assert plain(await gated.invoke(FETCH, fresh())) == ok

    echo = make_echo([])
    bare, gated = Invoker(ToolRegistry([echo]), middleware=[]), Invoker(ToolRegistry([echo]))
    assert plain(await gated.invoke(CALL, fresh())) == {"ok": True, "value": 3}
    vars(echo)["requires_approval"] = True
    assert plain(await bare.invoke(CALL, fresh())) == {"ok": True, "value": 3}  # no approval rule
    assert await gated.invoke(CALL, fresh()) == APPROVAL
