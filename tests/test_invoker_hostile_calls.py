"""Hostile calls through the Invoker's middleware chain.

Each probe runs the same calls twice on fresh Invokers: once observed (an audit sink) and once
unobserved. Both must give the same envelopes (minus ``elapsed_ms``), run the bodies the same
number of times and sleep the same retry delays: observing a call never changes it."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import weakref
from typing import Any, Callable

import pytest

from agentkit_tools import FrozenDict, FrozenList, Invoker, ToolContext, ToolError, ToolRegistry, tool
from agentkit_tools import middleware as mw
from agentkit_tools.errors import ToolTimeoutError
from agentkit_tools._runner import _POOL
from agentkit_tools.schema import ToolSchema

INTERNAL = "{} failed: {}. This is a bug in the tool, not in your arguments; do not retry."
FAULT = "The call could not be completed: {}. This is a fault in the agent's tooling, not in your arguments; do not retry."


class Sleeps:
    """An injected retry sleep that records the delays (and the exception being handled)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.handling: list[Any] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.handling.append(sys.exc_info()[0])


def strip(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    if "elapsed_ms" in out:
        assert isinstance(out.pop("elapsed_ms"), float)
    return out


def default_rest(sleep: Sleeps) -> list[mw.Middleware]:
    return [mw.approval(), mw.repeat_guard(limit=3), mw.idempotency(), mw.retry(base_s=0.0, sleep=sleep), mw.timeout()]


class Lane:
    """One run of ``calls`` on a fresh Invoker: observed (composed chain) or not (fast lane)."""

    def __init__(self, observed: bool, make_tools: Callable[[list[str]], list[Any]],
                 rest: Callable[[Sleeps], list[mw.Middleware]] = default_rest, inline: Any = ()) -> None:
        self.runs: list[str] = []
        self.sleeps = Sleeps()
        self.records: list[dict[str, Any]] = []
        chain = [mw.audit(self.records.append if observed else None), *rest(self.sleeps)]
        self.inv = Invoker(ToolRegistry(make_tools(self.runs)), middleware=chain, inline=inline)
        self.composed = 0
        entry = self.inv._entry

        async def counted(call: Any) -> dict[str, Any]:
            self.composed += 1
            return await entry(call)

        self.inv._entry = counted

    async def invoke(self, call: Any, ctx: Any = None) -> Any:
        try:
            return strip(await self.inv.invoke(call, ctx))
        except BaseException as exc:  # noqa: BLE001 - the probe compares what escapes too
            return ("raised", type(exc).__name__)


async def both(make_tools: Callable[[list[str]], list[Any]], calls: list[Any], ctx: Any = None,
               rest: Callable[[Sleeps], list[mw.Middleware]] = default_rest, inline: Any = (),
               composed_in_fast: int = 0, recorded: int | None = None, composed_observed: int | None = None,
               arm: Callable[[bool], None] = lambda armed: None) -> tuple[list[Any], list[str], list[float]]:
    """Envelopes, body runs and sleeps, asserted equal in both lanes. ``composed_in_fast``: calls
    the unobserved run sends down the composed chain; ``recorded``: audit records expected when
    observed (a fault of the tooling itself leaves none; default: one per call)."""
    results = []
    for observed in (True, False):
        lane = Lane(observed, make_tools, rest, inline)
        arm(True)
        envs = [await lane.invoke(c, ctx) for c in calls]
        arm(False)
        if observed:
            assert len(lane.records) == (len(calls) if recorded is None else recorded)
        else:
            assert lane.records == []
        results.append((envs, lane.runs, lane.sleeps.delays))
    assert results[0] == results[1]
    return results[1]


# ------------------------------------------------------------------ tools


def adders(runs: list[str]) -> list[Any]:
    @tool(read_only=True, non_blocking=True)
    def inline_add(a: int, b: int) -> int:
        """Add two integers on the event loop and return the sum."""
        runs.append("inline_add")
        return a + b

    @tool(read_only=True)
    def thread_add(a: int, b: int) -> int:
        """Add two integers in a worker thread and return the sum."""
        runs.append("thread_add")
        return a + b

    @tool(read_only=True)
    async def async_add(a: int, b: int) -> int:
        """Add two integers in a coroutine and return the sum."""
        runs.append("async_add")
        return a + b

    return [inline_add, thread_add, async_add]


ADD = {"a": 1, "b": 2}
OK3 = {"ok": True, "value": 3}
ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "additionalProperties": False}


def repeated(name: str, count: int) -> dict[str, Any]:
    return {"ok": False, "error": {
        "code": "repeated_call",
        "message": f"{name} has now been called {count} times with these same arguments in this conversation, and it "
                   "was not run again. Stop calling it; explain the problem to the user instead.",
        "tool": name, "count": count}}


def bad_args(name: str, reason: str) -> dict[str, Any]:
    return {"ok": False, "error": {
        "code": "invalid_arguments",
        "message": f"tool '{name}' call rejected: {reason}. Accepted arguments: ['a', 'b']. Re-read the input schema "
                   f"and call '{name}' again with corrected arguments.",
        "errors": [{"path": "<arguments>", "reason": reason}], "schema": ADD_SCHEMA}}


def invalid_call(message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": "invalid_call", "message": message}}


# ------------------------------------------------------------------ divergences found (and fixed)


async def test_stop_iteration_from_an_inline_body_is_reported_like_the_composed_chain() -> None:
    """The composed chain calls an inline body inside ``_run_body``'s frame, which turns a
    StopIteration into RuntimeError (PEP 479); the lane called it in ``invoke`` and reported a
    bare StopIteration (and would have retried it if StopIteration were declared transient)."""

    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True, non_blocking=True)
        def stop(x: int) -> int:
            """Raise StopIteration from an inline body, like a buggy tool."""
            runs.append("stop")
            raise StopIteration(x)

        @tool(read_only=True)
        async def astop(x: int) -> int:
            """Raise StopIteration from an async body, like a buggy tool."""
            runs.append("astop")
            raise StopIteration(x)

        return [stop, astop]

    def rest(sleep: Sleeps) -> list[mw.Middleware]:
        return [mw.retry(base_s=0.0, transient=(StopIteration,), sleep=sleep), mw.timeout()]

    envs, runs, sleeps = await both(make, [{"id": "1", "name": "stop", "input": {"x": 1}},
                                           {"id": "2", "name": "astop", "input": {"x": 1}}], rest=rest)
    assert envs == [
        {"ok": False, "error": {"code": "internal_error",
                                "message": INTERNAL.format("stop", "RuntimeError: coroutine raised StopIteration")}},
        {"ok": False, "error": {"code": "internal_error",
                                "message": INTERNAL.format("astop", "RuntimeError: coroutine raised StopIteration")}},
    ]
    assert (runs, sleeps) == (["stop", "astop"], [])


async def test_stop_iteration_from_a_worker_thread_body_fails_the_call_at_once() -> None:
    """A future refuses StopIteration: ``_resolve`` raised TypeError in its loop callback and the
    call waited for its deadline (forever without ``timeout``), then answered ``timeout``."""

    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True)
        def tstop(x: int) -> int:
            """Raise StopIteration from a worker thread body, like a buggy tool."""
            runs.append("tstop")
            raise StopIteration(x)

        return [tstop]

    envs, runs, _ = await both(make, [{"id": "1", "name": "tstop", "input": {"x": 1}}],
                               rest=lambda s: [mw.timeout(60.0)])
    assert envs == [{"ok": False, "error": {"code": "internal_error", "message": INTERNAL.format(
        "tstop", "RuntimeError: StopIteration interacts badly with generators and cannot be raised into a Future")}}]
    assert runs == ["tstop"]


class BadDeadline:
    run_id = "r"
    deadline = "soon"  # not a number: the timeout middleware fails


async def test_a_bad_ctx_deadline_fails_before_an_inline_body_in_both_lanes() -> None:
    """The lane read ``ctx.deadline`` for an inline body only when it returned an awaitable, so
    it ran the body and answered ok where the composed chain failed before the body; for other
    bodies it read it inside the body's ``try`` (a tool error, retriable when declared so)."""
    msg = FAULT.format("TypeError: unsupported operand type(s) for -: 'str' and 'float'")
    calls = [{"id": str(i), "name": n, "input": ADD} for i, n in enumerate(["inline_add", "thread_add", "async_add"])]
    envs, runs, sleeps = await both(adders, calls, ctx=BadDeadline(), rest=lambda s: [
        mw.retry(base_s=0.0, transient=(TypeError,), sleep=s), mw.timeout()], recorded=0)
    assert envs == [{"ok": False, "error": {"code": "internal_error", "message": msg}}] * 3
    assert (runs, sleeps) == ([], [])


class FailingRunId:
    @property
    def run_id(self) -> str:
        raise RuntimeError("no run id")


async def test_a_failing_ctx_run_id_fails_every_call_in_both_lanes() -> None:
    """The composed chain reads the scope of every call (even without repeat_guard, even for an
    unknown tool); the lane read it only for the repeat check."""
    fault = {"ok": False, "error": {"code": "internal_error", "message": FAULT.format("RuntimeError: no run id")}}
    envs, runs, _ = await both(adders, [{"id": "1", "name": "inline_add", "input": ADD},
                                        {"id": "2", "name": "nope", "input": {}}], ctx=FailingRunId(), rest=lambda s: [],
                               recorded=0, composed_observed=0)  # _start fails before the chain
    assert (envs, runs) == ([fault, fault], [])


class MovingDeadline:
    """A context whose deadline the body moves into the past."""

    def __init__(self) -> None:
        self.run_id = "r"
        self.deadline = time.monotonic() + 600.0


async def test_the_deadline_of_an_inline_body_is_cut_before_the_body_runs() -> None:
    """The composed chain computes an attempt's deadline before the body; the lane computed it
    after an inline body, from a later clock (here: after the body moved ``ctx.deadline``)."""
    ctx = MovingDeadline()

    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True, non_blocking=True)
        def later(x: int) -> Any:
            """Move the run's deadline into the past and return a coroutine to await."""
            runs.append("later")
            ctx.deadline = time.monotonic() - 1.0

            async def value() -> int:
                await asyncio.sleep(0.01)
                ctx.deadline = time.monotonic() + 600.0  # for the other lane
                return x

            return value()

        return [later]

    envs, runs, _ = await both(make, [{"id": "1", "name": "later", "input": {"x": 4}}], ctx=ctx)
    assert (envs, runs) == ([{"ok": True, "value": 4}], ["later"])


async def test_non_blocking_is_read_at_every_attempt() -> None:
    """Inline-or-thread is decided per attempt in both lanes (a tool declared non-blocking by its
    first, failed attempt runs its retry on the loop)."""

    def make(runs: list[str]) -> list[Any]:
        main = threading.get_ident()
        state = {"failed": False}

        @tool(read_only=True)
        def flip(x: int) -> int:
            """Fail once in a worker thread after declaring itself non-blocking."""
            runs.append("loop" if threading.get_ident() == main else "worker")
            if not state["failed"]:
                state["failed"] = True
                flip.non_blocking = True
                raise ToolError("busy", retriable=True)
            return x

        return [flip]

    envs, runs, sleeps = await both(make, [{"id": "1", "name": "flip", "input": {"x": 5}}])
    assert (envs, runs, sleeps) == ([{"ok": True, "value": 5}], ["worker", "loop"], [0.0])


async def test_the_retry_sleep_runs_outside_the_failure() -> None:
    """The lane awaited the retry delay inside its ``except`` block: the sleep ran with the
    tool's exception as the one being handled (and a failing sleep chained onto it)."""
    handling = {}
    for observed in (True, False):
        def make(runs: list[str]) -> list[Any]:
            left = {"n": 1}

            @tool(read_only=True, non_blocking=True)
            def once(x: int) -> int:
                """Fail once with a retriable error, then return x."""
                runs.append("once")
                if left["n"]:
                    left["n"] -= 1
                    raise ToolError("busy", retriable=True)
                return x

            return [once]

        lane = Lane(observed, make)
        assert await lane.invoke({"id": "1", "name": "once", "input": {"x": 2}}) == {"ok": True, "value": 2}
        handling[observed] = (lane.runs, lane.sleeps.delays, lane.sleeps.handling)
    assert handling[True] == handling[False] == (["once", "once"], [0.0], [None])


class Unsafe:
    """A tool that is not a FunctionTool, whose ``side_effecting`` cannot be read."""

    name = "unsafe"
    schema = ToolSchema("unsafe", "A tool whose side_effecting flag fails to read.", {"type": "object"})

    description = "A tool whose side_effecting flag fails to read."
    requires_approval = False
    output_schema = None
    armed = False

    def __init__(self, runs: list[str]) -> None:
        self.runs = runs

    @property
    def side_effecting(self) -> bool:
        if Unsafe.armed:
            raise RuntimeError("flag unreadable")
        return False

    async def run(self, args: Any, ctx: Any = None) -> str:
        self.runs.append("unsafe")
        return "ran"


async def test_retry_reads_the_tool_flags_before_the_first_attempt() -> None:
    """retry reads ``retry_safe(tool)`` before the first attempt; the lane read it only after a
    failure, so a successful body answered ok where the composed chain failed."""
    envs, runs, _ = await both(lambda runs: [Unsafe(runs)], [{"id": "1", "name": "unsafe", "input": {}}],
                               rest=lambda s: [mw.retry(sleep=s)], recorded=0,
                               arm=lambda armed: setattr(Unsafe, "armed", armed))
    assert envs == [{"ok": False, "error": {"code": "internal_error", "message": FAULT.format(
        "RuntimeError: flag unreadable")}}]
    assert runs == []


def test_a_wrap_replaced_on_a_builtin_instance_is_used() -> None:
    seen: list[str] = []
    audit = mw.audit()

    def wrap(invoker: Any, nxt: Any) -> Any:
        async def handle(call: Any) -> dict[str, Any]:
            seen.append(call.name)
            return await nxt(call)

        return handle

    audit.wrap = wrap  # type: ignore[method-assign]
    inv = Invoker(ToolRegistry(adders([])), middleware=[audit, mw.retry()])
    assert strip(asyncio.run(inv.invoke({"id": "1", "name": "inline_add", "input": ADD}))) == OK3
    assert seen == ["inline_add"]


@pytest.mark.parametrize("base", [mw._Audit, mw._Approval, mw._RepeatGuard, mw._Idempotency, mw._Retry,
                                  mw._Timeout, mw._Egress])
def test_subclasses_of_the_builtin_middleware_work(base: type) -> None:
    sub = type("Sub" + base.__name__, (base,), {})
    instance = {
        mw._Audit: lambda: sub(None), mw._Approval: lambda: sub(None), mw._RepeatGuard: lambda: sub(3),
        mw._Idempotency: lambda: sub(None), mw._Retry: lambda: sub(3, 0.0, 1.0, (), None, None, 30.0),
        mw._Timeout: lambda: sub(10.0), mw._Egress: lambda: sub(()),
    }[base]()
    runs: list[str] = []
    inv = Invoker(ToolRegistry(adders(runs)), middleware=[instance])
    assert strip(asyncio.run(inv.invoke({"id": "1", "name": "async_add", "input": ADD}))) == OK3
    assert runs == ["async_add"]


def test_invoker_inline_takes_a_bare_name() -> None:
    """``inline="thread_add"`` was a set of one-letter names: the tool still hopped threads."""
    main = threading.get_ident()
    where: list[bool] = []

    @tool(read_only=True)
    def where_am_i() -> bool:
        """Say whether the body runs on the event loop's thread."""
        where.append(threading.get_ident() == main)
        return where[-1]

    for inline in ("where_am_i", ["where_am_i"]):
        inv = Invoker(ToolRegistry([where_am_i]), inline=inline)
        assert inv.inline == frozenset({"where_am_i"})
        assert strip(asyncio.run(inv.invoke({"id": "1", "name": "where_am_i", "input": {}}))) == {"ok": True,
                                                                                                 "value": True}


def test_event_loops_that_used_a_deadline_are_not_kept_alive() -> None:
    """The loop's deadline timer held its loop (and the armed timer handle, which holds it too) strongly as
    the value of a WeakKeyDictionary keyed by that loop: every loop that ever ran a call with a
    deadline stayed alive. The same Invoker is used from three ``asyncio.run`` loops."""
    runs: list[str] = []
    inv = Invoker(ToolRegistry(adders(runs)))
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def main() -> list[dict[str, Any]]:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        return [strip(e) for e in await inv.invoke_many(
            [{"id": "1", "name": "thread_add", "input": ADD}, {"id": "2", "name": "async_add", "input": ADD}],
            ToolContext(run_id=f"run-{len(loops)}"))]

    assert [asyncio.run(main()) for _ in range(3)] == [[OK3, OK3]] * 3
    assert sorted(runs) == ["async_add"] * 3 + ["thread_add"] * 3
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]


async def test_a_caller_cancelling_during_deadline_expiry_is_not_turned_into_a_timeout() -> None:
    """A worker's outcome awaited under the call's deadline (the core's ``JobAwait``) consumed
    both cancellations (the deadline's and the caller's, in the same pass of the loop) and raised
    ToolTimeoutError: the caller's cancellation was lost (asyncio.timeout re-raises it)."""
    task = asyncio.current_task()
    assert task is not None
    release = threading.Event()

    def body(a: Any, b: Any) -> int:
        release.wait(10)
        return 1

    try:
        ready, awaiting = _POOL.start(body, None, None, 1e-9, "x")
        assert not ready
        # the caller's cancellation, due in the pass of the loop the deadline fires in
        asyncio.get_running_loop().call_later(0, task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await awaiting
        assert task.uncancel() == 0  # the deadline's cancellation was consumed, the caller's kept
        ready, awaiting = _POOL.start(body, None, None, 1e-9, "x")
        assert not ready
        with pytest.raises(ToolTimeoutError):
            await awaiting
        assert task.cancelling() == 0
    finally:
        release.set()


async def test_an_audit_sink_set_after_the_invoker_was_built_receives_the_records() -> None:
    """audit read ``sink`` live to decide a call is observed but wrote to the sink captured at
    ``wrap``: a sink set later made every call take the composed chain and record nowhere."""
    audit = mw.audit()
    inv = Invoker(ToolRegistry(adders([])), middleware=[audit, mw.retry()])
    records: list[dict[str, Any]] = []
    audit.sink = records.append
    assert strip(await inv.invoke({"id": "c1", "name": "inline_add", "input": ADD})) == OK3
    assert [(r["tool"], r["call_id"], r["outcome"], r["attempts"], r["decision"]) for r in records] == [
        ("inline_add", "c1", "ok", 1, "executed")]


# ------------------------------------------------------------------ probes that found the lanes equal


async def test_call_shapes_and_malformed_calls() -> None:
    calls: list[Any] = [
        {"id": "1", "name": "inline_add", "input": {"a": 1, "b": 2}},
        {"id": "2", "type": "function", "function": {"name": "thread_add", "arguments": '{"a": 2, "b": 2}'}},
        {"call_id": "3", "type": "function_call", "name": "async_add", "arguments": '{"a": 3, "b": 2}'},
        ["not", "a", "dict"],
        None,
        {"id": "4", "input": {}},
        {"id": "5", "name": "inline_add", "input": "{not json"},
        {"id": "6", "name": "inline_add", "input": '[1, 2]'},
        {"id": "7", "function": "inline_add", "arguments": "{}"},
        {"id": "8", "name": 5, "input": {}},
        {"id": "9", "name": "nope", "input": {}},
    ]
    # the non-dicts and the int name fail admit: the lane hands them to the composed chain
    envs, runs, sleeps = await both(adders, calls, composed_in_fast=3)
    not_dict = "a tool call must be a dict like {{'id': ..., 'name': ..., 'input': {{...}}}}, got {}. Send a tool " \
               "call with a name and its arguments."
    no_name = invalid_call("The tool call has no tool name. Send a call with a 'name' and its arguments.")
    assert envs == [
        OK3, {"ok": True, "value": 4}, {"ok": True, "value": 5},
        invalid_call(not_dict.format("list")), invalid_call(not_dict.format("NoneType")), no_name,
        bad_args("inline_add", "the arguments are not valid JSON (key must be a string at line 1 column 2)"),
        bad_args("inline_add", "the arguments must be a JSON object of named arguments, got an array"),
        no_name,
        invalid_call("the tool call's name must be a string, got int. Send a tool call with a name and its arguments."),
        {"ok": False, "error": {"code": "unknown_tool", "message": "No tool named 'nope'. Available tools: async_add, "
                                "inline_add, thread_add. Call one of those instead.",
                                "available": ["async_add", "inline_add", "thread_add"]}},
    ]
    assert (runs, sleeps) == (["inline_add", "thread_add", "async_add"], [])


async def test_bodies_get_deep_frozen_arguments_in_both_lanes() -> None:
    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True, non_blocking=True)
        def nested(items: list[dict[str, list[int]]]) -> str:
            """Report the container types of the nested arguments it receives."""
            runs.append("nested")
            kinds = [type(items).__name__, type(items[0]).__name__, type(items[0]["k"]).__name__]
            try:
                items[0]["k"].append(1)  # type: ignore[attr-defined]
            except (AttributeError, TypeError) as exc:
                kinds.append(type(exc).__name__)
            return ",".join(kinds)

        return [nested]

    envs, runs, _ = await both(make, [{"id": "1", "name": "nested", "input": {"items": [{"k": [1, 2]}]}}])
    assert envs == [{"ok": True, "value": f"{FrozenList.__name__},{FrozenDict.__name__},{FrozenList.__name__},"
                                          "TypeError"}]
    assert runs == ["nested"]


class Odd:
    """A context with odd attributes: an int run id and a falsy (but not None) trace."""

    run_id = 7
    trace = None
    deadline = None


async def test_odd_contexts() -> None:
    limit2 = lambda s: [mw.repeat_guard(limit=2), mw.retry(sleep=s), mw.timeout()]  # noqa: E731
    call = {"id": "1", "name": "inline_add", "input": ADD}
    for ctx in (None, object(), 42, "run", {"run_id": "x"}, Odd(), ToolContext(run_id="7")):
        envs, runs, _ = await both(adders, [call, call], ctx=ctx, rest=limit2)
        assert (envs, runs) == ([OK3, repeated("inline_add", 2)], ["inline_add"])


async def test_a_deadline_already_past() -> None:
    timeout = "{} did not finish within 0s. Do not retry immediately; tell the user the backend is slow."
    outcomes = []
    for observed in (True, False):
        entered, release = threading.Event(), threading.Event()

        def make(runs: list[str]) -> list[Any]:
            @tool(read_only=True)
            def blocked(x: int) -> int:
                """Block in a worker thread until the test releases it."""
                runs.append("blocked")
                entered.set()
                release.wait(30)
                return x

            @tool(read_only=True)
            async def quick(x: int) -> int:
                """Return x without ever awaiting anything."""
                runs.append("quick")
                return x

            @tool(read_only=True)
            async def yields(x: int) -> int:
                """Return x after one pass through the event loop."""
                runs.append("yields")
                await asyncio.sleep(0.05)
                return x

            return [blocked, quick, yields]

        lane = Lane(observed, make)
        ctx = ToolContext(run_id="r", deadline=time.monotonic() - 1.0)
        try:
            envs = [await lane.invoke({"id": str(i), "name": n, "input": {"x": 1}}, ctx)
                    for i, n in enumerate(["blocked", "quick", "yields"])]
            await asyncio.sleep(0.1)
            assert not entered.is_set()  # a call never starts after its deadline
        finally:
            release.set()
        outcomes.append((envs, sorted(lane.runs)))
    assert outcomes == [
        ([{"ok": False, "error": {"code": "timeout", "message": timeout.format(name)}}
          for name in ("blocked", "quick", "yields")], [])
    ] * 2


async def test_async_body_that_swallows_its_deadline_is_still_a_timeout() -> None:
    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True, timeout_s=0.01)
        async def stubborn(x: int) -> str:
            """Sleep far past the deadline but swallow the cancellation."""
            runs.append("stubborn")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return "late"
            return "never"

        @tool(read_only=True, timeout_s=0.01)
        async def slow(x: int) -> int:
            """Sleep far past its own timeout_s of ten milliseconds."""
            runs.append("slow")
            await asyncio.sleep(30)
            return x

        return [stubborn, slow]

    envs, runs, sleeps = await both(make, [{"id": "1", "name": "stubborn", "input": {"x": 1}},
                                           {"id": "2", "name": "slow", "input": {"x": 1}}])
    assert envs == [{"ok": False, "error": {
        "code": "timeout",
        "message": f"{name} did not finish within 0.01s. Do not retry immediately; tell the user the backend is slow."}}
        for name in ("stubborn", "slow")]
    assert (runs, sleeps) == (["stubborn", "slow"], [])
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("kind", ["inline", "async"])
def test_stop_requests_from_a_body_propagate(exc: type[BaseException], kind: str) -> None:
    outcomes = []
    for observed in (True, False):
        def make(runs: list[str]) -> list[Any]:
            if kind == "inline":
                @tool(read_only=True, non_blocking=True)
                def boom() -> None:
                    """Raise a BaseException subclass from the body."""
                    runs.append("boom")
                    raise exc()
            else:
                @tool(read_only=True)
                async def boom() -> None:
                    """Raise a BaseException subclass from the body."""
                    runs.append("boom")
                    raise exc()
            return [boom]

        lane = Lane(observed, make)
        with pytest.raises(exc):
            asyncio.run(lane.inv.invoke({"id": "1", "name": "boom", "input": {}}))
        outcomes.append((lane.runs, lane.sleeps.delays, {r["outcome"] for r in lane.records}))
    # audit records no BaseException (the loop's shutdown may cancel the waiting call)
    assert outcomes in ([(["boom"], [], set()), (["boom"], [], set())],
                        [(["boom"], [], {"cancelled"}), (["boom"], [], set())])


@pytest.mark.parametrize("name", ["thread_wait", "async_wait"])
async def test_the_caller_cancelling_mid_body(name: str) -> None:
    for observed in (True, False):
        started, release = asyncio.Event(), threading.Event()

        def make(runs: list[str]) -> list[Any]:
            loop = asyncio.get_running_loop()

            @tool(read_only=True)
            def thread_wait() -> int:
                """Signal the test, then block in a worker thread until released."""
                runs.append("thread_wait")
                loop.call_soon_threadsafe(started.set)
                release.wait(30)
                return 1

            @tool(read_only=True)
            async def async_wait() -> int:
                """Signal the test, then sleep until the caller cancels."""
                runs.append("async_wait")
                started.set()
                await asyncio.sleep(30)
                return 1

            return [thread_wait, async_wait]

        lane = Lane(observed, make)
        task = asyncio.ensure_future(lane.inv.invoke({"id": "1", "name": name, "input": {}}))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        assert lane.runs == [name]
        assert [r["outcome"] for r in lane.records] == (["cancelled"] if observed else [])


async def test_retry_policies() -> None:
    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True, non_blocking=True)
        def lookup(x: int) -> int:
            """Fail with KeyError twice (declared transient), then return x."""
            runs.append("lookup")
            if runs.count("lookup") <= 2:
                raise KeyError(x)
            return x

        @tool(read_only=True)
        async def busy(x: int) -> int:
            """Always fail with a retriable ToolError."""
            runs.append("busy")
            raise ToolError("backend busy", retriable=True)

        @tool(side_effecting=True, non_blocking=True)
        def write(x: int) -> int:
            """A write that fails with a retriable error (never retried: not idempotent)."""
            runs.append("write")
            raise ToolError("backend busy", retriable=True)

        return [lookup, busy, write]

    calls = [{"id": "1", "name": "lookup", "input": {"x": 9}}, {"id": "2", "name": "busy", "input": {"x": 1}},
             {"id": "3", "name": "write", "input": {"x": 1}}]
    busy = {"ok": False, "error": {"code": "tool_error", "message": "backend busy", "retriable": True}}
    transient = lambda s: [mw.retry(base_s=0.0, transient=(LookupError,), sleep=s), mw.timeout()]  # noqa: E731
    envs, runs, sleeps = await both(make, calls, rest=transient)
    assert envs == [{"ok": True, "value": 9}, busy, busy]
    assert (runs, sleeps) == (["lookup"] * 3 + ["busy"] * 3 + ["write"], [0.0] * 4)
    once = lambda s: [mw.retry(max_attempts=1, transient=(LookupError,), sleep=s)]  # noqa: E731
    envs, runs, sleeps = await both(make, calls, rest=once)
    assert envs == [{"ok": False, "error": {"code": "internal_error", "message": INTERNAL.format("lookup",
                                                                                             "KeyError: 9")}},
                    busy, busy]
    assert (runs, sleeps) == (["lookup", "busy", "write"], [])


async def test_a_tool_that_is_not_a_function_tool() -> None:
    class Echo:
        name = "echo"
        description = "Echo the text argument back to the caller."
        side_effecting = False
        requires_approval = False
        output_schema = None
        schema = ToolSchema("echo", "Echo the text argument back to the caller.", {
            "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})

        def __init__(self, runs: list[str]) -> None:
            self.runs = runs

        async def run(self, args: Any, ctx: Any = None) -> str:
            self.runs.append("echo")
            return f"{type(args).__name__}:{args['text']}"

    envs, runs, _ = await both(lambda runs: [Echo(runs)], [{"id": "1", "name": "echo", "input": {"text": "hi"}},
                                                           {"id": "2", "name": "echo", "input": {"text": 1}}])
    assert envs == [{"ok": True, "value": "FrozenDict:hi"}, {"ok": False, "error": {
        "code": "invalid_arguments",
        "message": "tool 'echo' call rejected: invalid argument(s): text: expected string, got integer 1. Accepted "
                   "arguments: ['text']. Re-read the input schema and call 'echo' again with corrected arguments.",
        "errors": [{"path": "text", "reason": "expected string, got integer 1"}],
        "schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
    assert runs == ["echo"]


async def test_invoke_many_with_mixed_tools() -> None:
    results = []
    for observed in (True, False):
        lane = Lane(observed, adders)
        call = {"id": "r", "name": "inline_add", "input": ADD}
        envs = await lane.inv.invoke_many([
            {"id": "1", "name": "thread_add", "input": ADD}, call, {"id": "2", "name": "async_add", "input": ADD},
            {"id": "3", "name": "nope", "input": {}}, call, call, call])
        results.append(([strip(e) for e in envs], sorted(lane.runs)))
    assert results[0] == results[1]
    envs, runs = results[1]
    assert envs == [OK3, OK3, OK3, {"ok": False, "error": {
        "code": "unknown_tool", "message": "No tool named 'nope'. Available tools: async_add, inline_add, thread_add. "
        "Call one of those instead.", "available": ["async_add", "inline_add", "thread_add"]}},
        OK3, repeated("inline_add", 3), repeated("inline_add", 4)]
    assert runs == ["async_add", "inline_add", "inline_add", "thread_add"]


async def test_one_middleware_chain_shared_by_two_invokers() -> None:
    chain = [mw.audit(), mw.repeat_guard(limit=2), mw.retry(), mw.timeout()]
    first, second = Invoker(ToolRegistry(adders([])), middleware=chain), Invoker(ToolRegistry(adders([])),
                                                                                 middleware=chain)
    call = {"id": "1", "name": "inline_add", "input": ADD}
    envs = [strip(await inv.invoke(call, ToolContext(run_id="r"))) for inv in (first, second, first)]
    assert envs == [OK3, OK3, repeated("inline_add", 2)]


async def test_egress_and_other_orders() -> None:
    def make(runs: list[str]) -> list[Any]:
        @tool(read_only=True, non_blocking=True, url_arg="url")
        def fetch(url: str) -> str:
            """Fetch a URL (pretend) and return it back to the caller."""
            runs.append("fetch")
            return url

        return [*adders(runs), fetch]

    calls = [{"id": "1", "name": "inline_add", "input": ADD},
             {"id": "2", "name": "fetch", "input": {"url": "https://evil.example.org/x"}},
             {"id": "3", "name": "fetch", "input": {"url": "https://api.example.com/x"}}]

    def shuffled(s: Sleeps) -> list[mw.Middleware]:
        return [mw.egress(allow=["api.example.com"]), mw.repeat_guard(), mw.approval(), mw.retry(sleep=s),
                mw.idempotency(), mw.timeout()]

    envs, runs, _ = await both(make, calls, rest=shuffled, composed_in_fast=2)  # the two url_arg calls
    assert envs == [OK3, {"ok": False, "error": {
        "code": "egress_denied",
        "message": "fetch may not reach host 'evil.example.org': it is not on the allow-list (api.example.com). Do not "
                   "retry with this URL; use an allowed host or tell the user this host is not permitted.",
        "tool": "fetch", "host": "evil.example.org", "allowed": ["api.example.com"]}},
        {"ok": True, "value": "https://api.example.com/x"}]
    assert runs == ["inline_add", "fetch"]


async def test_repeat_guard_limit_one_refuses_every_call() -> None:
    envs, runs, _ = await both(adders, [{"id": "1", "name": "inline_add", "input": ADD}],
                               rest=lambda s: [mw.repeat_guard(limit=1)])
    assert (envs, runs) == ([repeated("inline_add", 1)], [])
