"""How an ``async`` tool body is awaited: stepped in the caller's own task (no real task of its
own), each step in a copy of the caller's ``contextvars`` and as the body's own task
(``asyncio.current_task()`` in the body is a stand-in of its own, so the scopes it enters bind to
it).

Pinned here: the body's contextvar changes never reach the caller; a call costs no task (a
turn of ``invoke_many`` costs one per call, as a bare ``gather`` does); at the deadline the
caller gets ``timeout`` at once and the body's clean-up goes on in a background task, its
outcome dropped without noise; a result past the deadline is never ``ok``; the caller's own
cancellation propagates, also when it coincides with the deadline; the body's own scopes
(``asyncio.timeout``, task groups, anyio cancel scopes) keep working and, still open in a clean-up
past the deadline, never reach the caller.

Bounds on time are generous hang guards (seconds), never speed assertions.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolRegistry, dispatch, middleware as mw, tool
from envelopes import call, internal, ok, strip, timeout_env
from exit_runs import interpreters, run_many

NEEDS_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout and Task.cancelling are 3.11+")

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


CHAINS = {"default": None, "timeout-only": [mw.timeout()], "bare": []}


class TaskCount:
    """Counts the tasks created on the running loop (a task factory)."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.loop = asyncio.get_running_loop()

    def __enter__(self) -> TaskCount:
        def factory(loop: Any, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            self.created.append(getattr(coro, "__name__", type(coro).__name__))
            return asyncio.Task(coro, loop=loop, **kw)

        self.loop.set_task_factory(factory)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.loop.set_task_factory(None)


# ------------------------------------------------------------------ contextvars


@pytest.mark.parametrize("suspends", [False, True])
@pytest.mark.parametrize("chain", sorted(CHAINS))
async def test_a_bodys_contextvar_changes_never_reach_the_caller(chain: str, suspends: bool) -> None:
    seen: list[str] = []

    @tool(read_only=True, timeout_s=30)
    async def tagger(tag: str) -> str:
        """Read the caller's context variable, then set it to the tag."""
        seen.append(VAR.get())
        VAR.set(tag)
        if suspends:
            await asyncio.sleep(0)
            seen.append(VAR.get())
            VAR.set(tag + "!")
            await asyncio.sleep(0.001)
        seen.append(VAR.get())
        return tag

    inv = Invoker(ToolRegistry([tagger]), middleware=CHAINS[chain])
    token = VAR.set("caller")
    try:
        assert strip(await inv.invoke(call("tagger", tag="a"))) == ok("a")
        assert VAR.get() == "caller"
        envs = await inv.invoke_many([call("tagger", "1", tag="b"), call("tagger", "2", tag="c")])
        assert [strip(e) for e in envs] == [ok("b"), ok("c")]
        assert VAR.get() == "caller"
    finally:
        VAR.reset(token)
    if suspends:
        assert seen == ["caller", "a", "a!", "caller", "caller", "b", "c", "b!", "c!"]
    else:
        assert seen == ["caller", "a", "caller", "b", "caller", "c"]


def test_every_path_runs_every_body_in_a_copy_of_the_callers_context() -> None:
    """Each kind of body (a non-blocking sync one, which the core calls itself, a sync one on a
    worker, an async one, an awaitable a sync body returns) sees the caller's context variables
    and its changes never reach the caller, on every path: ``invoke`` (built-in rules, none, or
    a user middleware: the driver), ``invoke_many``, ``dispatch``, ``FunctionTool.run``. The
    awaitable runs in a copy of its own: it sees the caller's value, not the sync part's."""
    seen: list[str] = []

    @tool(read_only=True, non_blocking=True)
    def on_loop(x: int) -> int:
        """Read the context variable on the caller's thread and set it, then answer."""
        seen.append(VAR.get())
        VAR.set("body")
        return x

    @tool(read_only=True)
    def on_worker(x: int) -> int:
        """Read the context variable on a worker thread and set it, then answer."""
        seen.append(VAR.get())
        VAR.set("body")
        return x

    @tool(read_only=True)
    async def awaited(x: int) -> int:
        """Read the context variable in an async body and set it, then answer."""
        seen.append(VAR.get())
        VAR.set("body")
        return x

    @tool(read_only=True, non_blocking=True)
    def returns_awaitable(x: int) -> Any:
        """Read and set the context variable, then answer with an awaitable that does too."""
        seen.append(VAR.get())
        VAR.set("body")

        async def later() -> int:
            seen.append(VAR.get())
            VAR.set("later")
            return x

        return later()

    tools = [on_loop, on_worker, awaited, returns_awaitable]
    registry = ToolRegistry(tools)
    chains = {"default": None, "bare": [], "user middleware": [_PassOn()]}
    outcomes = []

    def note(path: str, name: str, value: Any) -> None:
        outcomes.append((path, name, value, list(seen), VAR.get()))

    async def on_a_loop() -> None:
        for chain, middleware in chains.items():
            inv = Invoker(registry, middleware=middleware)
            for t in tools:
                VAR.set("caller")
                seen.clear()
                note(f"invoke {chain}", t.name, strip(await inv.invoke(call(t.name, x=1))))
            VAR.set("caller")
            seen.clear()
            envs = await inv.invoke_many([call(t.name, str(i), x=1) for i, t in enumerate(tools)])
            seen.sort()
            note(f"invoke_many {chain}", "all", [strip(e) for e in envs])
        for t in tools:
            VAR.set("caller")
            seen.clear()
            note("FunctionTool.run", t.name, await t.run({"x": 1}))

    def dispatched() -> None:
        for t in tools:
            VAR.set("caller")
            seen.clear()
            note("dispatch", t.name, strip(dispatch(call(t.name, x=1), registry)))

    contextvars.copy_context().run(asyncio.run, on_a_loop())
    contextvars.copy_context().run(dispatched)

    expected = []
    for path in [f"invoke {chain}" for chain in chains] + ["FunctionTool.run", "dispatch"]:
        value = 1 if path == "FunctionTool.run" else ok(1)
        expected += [(path, t.name, value, ["caller", "caller"] if t is returns_awaitable else ["caller"], "caller") for t in tools]
        if path.startswith("invoke "):
            expected.append((path.replace("invoke", "invoke_many"), "all", [ok(1)] * 4, ["caller"] * 5, "caller"))
    assert sorted(outcomes) == sorted(expected)


def test_the_prelude_of_an_async_body_runs_in_the_bodys_copy_of_the_context() -> None:
    """An ``async`` tool whose ``fn`` is a sync function that sets a context variable before it
    returns the coroutine (its prelude; as with ``inspect.markcoroutinefunction``): the prelude
    is part of the body, run in the body's copy of the caller's context, so the body's steps
    see what it set and neither the caller nor the call's later steps (the audit record) do. On
    every path: ``invoke`` (built-in rules; after a user middleware: the driver),
    ``invoke_many`` (the body in a task of its own), ``dispatch``, ``FunctionTool.run``."""
    import dataclasses

    seen: list[str] = []

    async def inner(x: int) -> str:
        await asyncio.sleep(0)
        return f"inner {x} sees {VAR.get()}"

    def prelude(args: Any, ctx: Any) -> Any:
        VAR.set(f"prelude {args['x']}")
        return inner(args["x"])

    @tool(read_only=True)
    async def prefaced(x: int) -> str:
        """Set the context variable in a sync prelude, then answer from the coroutine."""
        return ""

    prefaced = dataclasses.replace(prefaced, fn=prelude)
    registry = ToolRegistry([prefaced])

    def sink(rec: dict[str, Any]) -> None:
        seen.append(f"sink {rec['call_id']} sees {VAR.get()}")

    chains = {"default": [mw.audit(sink), *mw.default_chain()[1:]],
              "user middleware": [mw.audit(sink), _PassOn(), *mw.default_chain()[1:]]}
    outcomes: list[Any] = []

    async def on_a_loop() -> None:
        for chain, middleware in chains.items():
            inv = Invoker(registry, middleware=middleware)
            VAR.set("caller")
            env = strip(await inv.invoke(call("prefaced", "1", x=1)))
            outcomes.append((f"invoke {chain}", env, sorted(seen), VAR.get()))
            seen.clear()
            VAR.set("caller")
            envs = [strip(e) for e in await inv.invoke_many([call("prefaced", "1", x=1), call("prefaced", "2", x=2)])]
            outcomes.append((f"invoke_many {chain}", envs, sorted(seen), VAR.get()))
            seen.clear()
        VAR.set("caller")
        outcomes.append(("FunctionTool.run", await prefaced.run({"x": 1}), seen[:], VAR.get()))

    def dispatched() -> None:
        VAR.set("caller")
        outcomes.append(("dispatch", strip(dispatch(call("prefaced", "1", x=1), registry)), seen[:], VAR.get()))

    contextvars.copy_context().run(asyncio.run, on_a_loop())
    contextvars.copy_context().run(dispatched)
    one, two = ok("inner 1 sees prelude 1"), ok("inner 2 sees prelude 2")
    sinks = ["sink 1 sees caller", "sink 2 sees caller"]
    assert outcomes == [
        ("invoke default", one, sinks[:1], "caller"),
        ("invoke_many default", [one, two], sinks, "caller"),
        ("invoke user middleware", one, sinks[:1], "caller"),
        ("invoke_many user middleware", [one, two], sinks, "caller"),
        ("FunctionTool.run", "inner 1 sees prelude 1", [], "caller"),
        ("dispatch", one, [], "caller"),
    ]


async def test_the_clean_up_after_the_deadline_keeps_the_bodys_context() -> None:
    seen: list[str] = []
    done = asyncio.Event()

    @tool(read_only=True, timeout_s=0.05)
    async def late(tag: str) -> str:
        """Set the context variable, wait too long, read it back during clean-up."""
        VAR.set(tag)
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.01)  # the clean-up suspends: it goes on in the background
            seen.append(VAR.get())
            done.set()
        return tag

    token = VAR.set("caller")
    try:
        env = await Invoker(ToolRegistry([late])).invoke(call("late", tag="body"))
        assert env == timeout_env("late", "0.05")
        assert VAR.get() == "caller"
        await asyncio.wait_for(done.wait(), 5)
    finally:
        VAR.reset(token)
    assert seen == ["body"]


# ------------------------------------------------------------------ tasks per call


async def test_an_async_call_costs_no_task_and_a_turn_one_per_call_like_gather() -> None:
    @tool(read_only=True)
    async def instant(x: int) -> int:
        """Answer with the given number at once."""
        return x

    @tool(read_only=True)
    async def waits(x: int) -> int:
        """Answer with the given number after a short sleep."""
        await asyncio.sleep(0.001)
        return x

    inv = Invoker(ToolRegistry([instant, waits]))
    bare = Invoker(ToolRegistry([instant, waits]), middleware=[])
    for invoker in (inv, bare):
        for name in ("instant", "waits"):
            await invoker.invoke(call(name, x=0))  # warm up
            with TaskCount() as count:
                assert strip(await invoker.invoke(call(name, x=1))) == ok(1)
            assert count.created == [], (name, invoker)
            calls = [call(name, str(i), x=i) for i in range(5)]
            with TaskCount() as count:
                envs = await invoker.invoke_many(calls)
            assert [strip(e) for e in envs] == [ok(i) for i in range(5)]
            # one task per call, whose coroutine is the core's Relay: it steps the body, or the call's
            # driver when a tracing span opens first (the audit rule of the default chain, with a
            # tracer provider installed)
            spans = invoker is inv and mw.audit().observed_level(None) == 2
            assert count.created == ["Relay"] * 5, (count.created, spans)
    with TaskCount() as count:
        await asyncio.gather(*(waits.func(i) for i in range(5)))  # type: ignore[misc]
    assert count.created == ["waits"] * 5  # a bare gather: one task per coroutine too


async def test_a_deadline_costs_one_background_task_only_when_the_clean_up_suspends() -> None:
    @tool(read_only=True, timeout_s=0.02)
    async def quits(x: int) -> int:
        """Wait past the deadline; stop at once when cancelled."""
        await asyncio.sleep(10)
        return x

    @tool(read_only=True, timeout_s=0.02)
    async def lingers(x: int) -> int:
        """Wait too long; clean up for a moment when cancelled."""
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.001)
        return x

    inv = Invoker(ToolRegistry([quits, lingers]))
    with TaskCount() as count:
        assert await inv.invoke(call("quits", x=1)) == timeout_env("quits", "0.02")
    assert count.created == []
    with TaskCount() as count:
        assert await inv.invoke(call("lingers", x=1)) == timeout_env("lingers", "0.02")
    assert count.created == ["BodyAwait"]
    await asyncio.sleep(0.05)


# ------------------------------------------------------------------ the deadline


def block_loop(loop: asyncio.AbstractEventLoop, at: float, fn: Any) -> list[bool]:
    """From now (t): a callback at t + 0.01 s schedules ``fn`` at t + ``at`` and blocks the loop
    until t + 0.11 s, so that ``fn`` and a deadline due at t + 0.05 s run in the one loop pass
    after it, in order of time. Returns a list that gets whether that held: False when a loaded
    machine ran the callback too late (in the pass of the deadline itself); such a round shows
    nothing and is run again."""
    start = loop.time()
    on_time: list[bool] = []

    def block() -> None:
        on_time.append(loop.time() < start + 0.04)
        loop.call_at(start + at, fn)
        time.sleep(max(0.0, start + 0.11 - loop.time()))

    loop.call_at(start + 0.01, block)
    return on_time


@pytest.mark.parametrize("chain", ["default", "timeout-only"])
async def test_a_first_step_that_blocks_past_the_deadline_is_a_timeout(chain: str) -> None:
    @tool(read_only=True, timeout_s=0.05)
    async def blocks(x: int) -> int:
        """Block the loop (a sync sleep inside async def) past the deadline, then answer."""
        time.sleep(0.1)
        return x

    @tool(read_only=True, timeout_s=0.05)
    async def blocks_later(x: int) -> int:
        """Suspend once, then block past the deadline and answer."""
        await asyncio.sleep(0)
        time.sleep(0.1)
        return x

    inv = Invoker(ToolRegistry([blocks, blocks_later]), middleware=CHAINS[chain])
    assert await inv.invoke(call("blocks", x=1)) == timeout_env("blocks", "0.05")
    assert await inv.invoke(call("blocks_later", x=1)) == timeout_env("blocks_later", "0.05")
    assert dispatch(call("blocks", x=1), ToolRegistry([blocks])) == timeout_env("blocks", "0.05")


def _two_stage_tools(log: list[str]) -> list[Any]:
    """Bodies of each kind that take 0.15 s, then return an awaitable that takes 0.15 s more
    (limit 0.2 s): past the call's deadline in total, within a fresh limit each. The awaitable
    logs "rest started" when it is first stepped: a round where it is not (the machine was too
    loaded for the first 0.15 s to end within the limit) says nothing (see `_on_time`)."""

    async def rest(x: int) -> int:
        log.append("rest started")
        try:
            await asyncio.sleep(0.15)
        except asyncio.CancelledError:
            log.append("rest cancelled")
            raise
        log.append("rest finished")
        return x

    @tool(read_only=True, timeout_s=0.2)
    async def two_async(x: int) -> Any:
        """Work a while, then hand back an awaitable that works a while more."""
        await asyncio.sleep(0.15)
        return rest(x)

    @tool(read_only=True, timeout_s=0.2)
    def two_worker(x: int) -> Any:
        """Work a while on a worker thread, then hand back an awaitable that works a while more."""
        time.sleep(0.15)
        return rest(x)

    @tool(read_only=True, timeout_s=0.2, non_blocking=True)
    def two_inline(x: int) -> Any:
        """Work a while on the caller's thread, then hand back an awaitable that works more."""
        time.sleep(0.15)
        return rest(x)

    return [two_async, two_worker, two_inline]


def _on_time(log: list[str], rounds: list[int], n: int = 1) -> bool:
    """Whether the round that wrote ``log`` reached the awaitable of each of its ``n`` calls (each
    body's first 0.15 s ended within the limit); else another round is due (at most 20)."""
    rounds[0] += 1
    assert rounds[0] <= 20, f"the machine is too loaded: {rounds[0] - 1} rounds ended a first stage late"
    if log.count("rest started") < n:
        return False
    log[:] = [entry for entry in log if entry != "rest started"]
    return True


async def test_an_awaitable_a_body_returns_gets_what_is_left_of_the_deadline() -> None:
    """Nothing past the call's deadline is a success: the awaitable a body returns (settled
    afterwards) is awaited within what is left of the deadline, not a fresh one; the message
    names the tool's limit. On every path: ``invoke`` (built-in rules; after a user middleware:
    the driver) and ``dispatch``."""
    log: list[str] = []
    tools = _two_stage_tools(log)
    registry = ToolRegistry(tools)
    chains = {"default": None, "timeout-only": [mw.timeout()], "user middleware": [_PassOn(), mw.timeout()]}
    for chain, middleware in chains.items():
        for t in tools:
            rounds = [0]
            while True:
                log.clear()
                inv = Invoker(registry, middleware=middleware)  # (a fresh one a round: no repeat counts)
                env = await asyncio.wait_for(inv.invoke(call(t.name, x=1)), 10)
                if _on_time(log, rounds):
                    break
            assert strip(env) == timeout_env(t.name, "0.2"), (chain, t.name)
            assert log == ["rest cancelled"], (chain, t.name)

    def dispatched() -> list[Any]:
        out = []
        for t in tools:
            rounds = [0]
            while True:
                log.clear()
                env = dispatch(call(t.name, x=1), registry)
                if _on_time(log, rounds):
                    break
            out.append((env, list(log)))
        return out

    outcomes = await asyncio.to_thread(dispatched)
    assert outcomes == [(timeout_env(t.name, "0.2"), ["rest cancelled"]) for t in tools]


async def test_a_first_step_past_the_deadline_that_suspends_is_cancelled() -> None:
    log: list[str] = []

    @tool(read_only=True, timeout_s=0.05)
    async def blocks_then_waits(x: int) -> int:
        """Block past the deadline, then wait."""
        time.sleep(0.1)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        return x

    env = await Invoker(ToolRegistry([blocks_then_waits])).invoke(call("blocks_then_waits", x=1))
    assert env == timeout_env("blocks_then_waits", "0.05")
    assert log == ["cancelled"]


@pytest.mark.parametrize("result_first", [True, False])
async def test_a_future_completing_as_the_deadline_fires_is_never_ok(result_first: bool) -> None:
    """The awaited future gets its result in the same loop pass as the deadline fires (a callback
    blocks the loop past both): the call is ``timeout`` and the body sees its cancellation."""
    outcomes = []
    rounds = 0
    while len(outcomes) < 20:
        rounds += 1
        assert rounds <= 200, "the machine is too loaded to run the rounds on time"
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        log: list[str] = []
        on_time: list[bool] = []

        def finish() -> None:
            if not fut.done():
                fut.set_result(7)

        @tool(read_only=True, timeout_s=0.05)
        async def waits_for(x: int) -> int:
            """Wait for a future that the test completes or not."""
            # The deadline is armed when this first step suspends, due 0.05 s later; the result
            # comes at 0.03 s or 0.07 s; a callback at 0.01 s blocks the loop until 0.11 s, so
            # both are handled in one pass, in order of time.
            on_time.extend([block_loop(loop, 0.03 if result_first else 0.07, finish)])
            try:
                return await fut
            except asyncio.CancelledError:
                log.append("cancelled")
                raise

        inv = Invoker(ToolRegistry([waits_for]), middleware=[mw.timeout()])
        env = await asyncio.wait_for(inv.invoke(call("waits_for", x=1)), 5)
        await asyncio.sleep(0.06)  # the callback has run
        if on_time[0] == [True]:
            outcomes.append((env, log))
    assert outcomes == [(timeout_env("waits_for", "0.05"), ["cancelled"])] * 20


async def test_a_body_awaiting_a_task_with_a_slow_clean_up_does_not_hold_the_caller() -> None:
    """The body awaits a task (a gather) whose clean-up takes seconds: at the deadline the caller
    is answered at once; the child's clean-up finishes on its own."""
    log: list[str] = []
    gate = asyncio.Event()

    async def child() -> int:
        try:
            await asyncio.sleep(10)
        finally:
            await gate.wait()
            log.append("child cleaned up")
        return 1

    @tool(read_only=True, timeout_s=0.05)
    async def fans_out(x: int) -> list[int]:
        """Gather two slow children and return their answers."""
        return list(await asyncio.gather(child(), child()))

    @tool(read_only=True, timeout_s=0.05)
    async def awaits_task(x: int) -> int:
        """Await one slow child task and return its answer."""
        return await asyncio.ensure_future(child())

    inv = Invoker(ToolRegistry([fans_out, awaits_task]))
    for name, children in (("fans_out", 2), ("awaits_task", 1)):
        log.clear()
        gate.clear()
        started = time.monotonic()
        env = await asyncio.wait_for(inv.invoke(call(name, x=1)), 10)
        assert env == timeout_env(name, "0.05")
        assert time.monotonic() - started < 2.0
        assert log == []
        gate.set()
        for _ in range(100):
            if len(log) == children:
                break
            await asyncio.sleep(0.01)
        assert log == ["child cleaned up"] * children


async def test_a_body_awaiting_a_task_sees_it_end_as_a_task_would() -> None:
    """Without a deadline involved, a task the body awaits is waited for as any task would wait
    for it (its result, its exception, its cancellation by someone else)."""
    @tool(read_only=True)
    async def via_task(mode: str) -> str:
        """Await a child task that answers, fails or is cancelled by a third party."""
        async def child() -> str:
            await asyncio.sleep(0.01)
            if mode == "fail":
                raise ValueError("child failed")
            return "child ok"

        t = asyncio.ensure_future(child())
        if mode == "cancelled":
            asyncio.get_running_loop().call_later(0.001, t.cancel)
        try:
            return await t
        except asyncio.CancelledError:
            return "child cancelled"
        except ValueError as exc:
            return str(exc)

    inv = Invoker(ToolRegistry([via_task]))
    envs = [strip(await inv.invoke(call("via_task", mode=m))) for m in ("ok", "fail", "cancelled")]
    assert envs == [ok("child ok"), ok("child failed"), ok("child cancelled")]
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


class _LoopFuture:
    """A future-like object as older libraries make them: what an asyncio task accepts
    (``_asyncio_future_blocking``, ``add_done_callback``, ``_loop``), but no ``get_loop``."""

    _asyncio_future_blocking = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._callbacks: list[Any] = []
        self._done = False
        self._result: Any = None

    def add_done_callback(self, cb: Any, *, context: Any = None) -> None:
        self._callbacks.append(cb)

    def remove_done_callback(self, cb: Any) -> int:
        return 0

    def cancel(self, msg: Any = None) -> bool:
        return False

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def result(self) -> Any:
        return self._result

    def exception(self) -> None:
        return None

    def set_result(self, value: Any) -> None:
        self._done, self._result = True, value
        for cb in self._callbacks:
            self._loop.call_soon(cb, self)

    def __await__(self) -> Any:
        if not self._done:
            self._asyncio_future_blocking = True
            yield self
        return self._result


class _NoLoop:
    """Yielded as a future (``_asyncio_future_blocking``) but with no loop to find: neither
    ``get_loop`` nor ``_loop``."""

    _asyncio_future_blocking = True

    def __await__(self) -> Any:
        yield self
        return 0


async def _caller_keeps_running(seconds: float) -> str:
    """The caller's own later work: a sleep that no leftover deadline may cancel."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if sys.version_info >= (3, 11):
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        return "cancelled"
    return "slept"


async def test_a_body_awaiting_a_future_like_object_without_get_loop_is_awaited_as_a_task_would() -> None:
    """A future-like object with ``_loop`` and no ``get_loop`` (asyncio's tasks find its loop
    there) is awaited alone and in a turn alike: ``ok`` both ways (alone answered
    ``internal_error``: 'no attribute get_loop'), and nothing of the call outlives it."""
    @tool(read_only=True, timeout_s=0.1)
    async def legacy(x: int) -> int:
        """Await a future-like object completed 10 ms later."""
        f = _LoopFuture(asyncio.get_running_loop())
        asyncio.get_running_loop().call_later(0.01, f.set_result, x)
        return await f

    inv = Invoker(ToolRegistry([legacy]))
    assert strip(await inv.invoke(call("legacy", x=1))) == ok(1)
    assert [strip(e) for e in await inv.invoke_many([call("legacy", "1", x=2)])] == [ok(2)]
    assert [strip(e) for e in await inv.invoke_many([call("legacy", "1", x=3), call("legacy", "2", x=4)])] == [ok(3), ok(4)]
    assert await _caller_keeps_running(0.3) == "slept"


async def test_a_call_that_fails_inside_the_core_leaves_its_deadline() -> None:
    """The body yields what claims to be a future but has no loop: the call answers
    ``internal_error``, and its deadline is left with it (it stayed armed: 0.1 s later it
    cancelled the caller's own unrelated sleep), as is its loop's watch of it."""
    from agentkit_tools import _core, _runner

    @tool(read_only=True, timeout_s=0.1)
    async def loopless(x: int) -> int:
        """Await a future-like object that has no loop."""
        return await _NoLoop()

    inv = Invoker(ToolRegistry([loopless]))
    want = internal("loopless", "AttributeError: '_NoLoop' object has no attribute '_loop'")
    for i in range(3):
        assert await inv.invoke(call("loopless", str(i), x=i)) == want
    assert _core.pending_deadlines(asyncio.get_running_loop()) == 0
    # Nor does its loop's holder keep watching it (each such call left a dead reference there).
    assert len(_runner._held(asyncio.get_running_loop()).bodies) == 0
    assert await _caller_keeps_running(0.3) == "slept"


@pytest.mark.parametrize("cycle", [False, True])
async def test_an_await_dropped_while_suspended_leaves_its_deadline(cycle: bool) -> None:
    """A ``BodyAwait`` dropped (or collected in a reference cycle with its body) while its body
    is suspended, never closed: its deadline is left, its body closed (its ``finally`` runs). (The
    deadline stayed armed and cancelled the caller's task 0.1 s later.)"""
    from agentkit_tools import _core, _runner

    log: list[str] = []
    box: dict[str, Any] = {}

    async def body() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            log.append("finally ran")

    awaiting = _runner.BodyAwait(body(), 0.1, "n")
    if cycle:
        box["await"], box["self"] = awaiting, box
    awaiting.send(None)  # entered: the deadline is armed, the body suspended
    assert _core.pending_deadlines(asyncio.get_running_loop()) == 1
    del awaiting, box
    gc.collect()
    assert log == ["finally ran"]
    assert _core.pending_deadlines(asyncio.get_running_loop()) == 0
    assert await _caller_keeps_running(0.3) == "slept"


class _Weird:
    """A done callback whose ``==`` raises, or asks the running task something (re-entering it)."""

    def __init__(self, mode: str, ran: list[str]) -> None:
        self.mode, self.ran = mode, ran

    def __call__(self, task: Any) -> None:
        self.ran.append(f"{self.mode} callback")

    def __eq__(self, other: object) -> bool:
        if self.mode == "raise":
            raise ValueError("eq")
        asyncio.current_task().done()  # type: ignore[union-attr]
        return False

    __hash__ = object.__hash__


@pytest.mark.parametrize("mode", ["raise", "reenter"])
async def test_remove_done_callback_of_the_bodys_task_keeps_its_callbacks_when_a_comparison_fails(mode: str) -> None:
    """``remove_done_callback`` on the body's task, with a pending callback whose ``==`` raises
    or re-enters the task: as for an asyncio task, a raise leaves every callback pending, a
    re-entry works (0 removed), and both callbacks run when the body ends. (All were dropped,
    the re-entry raised 'Already mutably borrowed'.)"""
    ran: list[str] = []

    @tool(read_only=True)
    async def callbacks(x: int) -> str:
        """Add two done callbacks to its task, then remove one that is not there."""
        t = asyncio.current_task()
        t.add_done_callback(_Weird(mode, ran))  # type: ignore[union-attr]
        t.add_done_callback(lambda _: ran.append("plain callback"))  # type: ignore[union-attr]
        await asyncio.sleep(0)
        try:
            removed = str(t.remove_done_callback(print))  # type: ignore[union-attr]
        except ValueError as exc:
            removed = f"ValueError: {exc}"
        return f"{removed}; pending {len(t._callbacks)}"  # type: ignore[union-attr]

    inv = Invoker(ToolRegistry([callbacks]))
    want = "ValueError: eq; pending 2" if mode == "raise" else "0; pending 2"
    assert strip(await inv.invoke(call("callbacks", x=1))) == ok(want)
    await asyncio.sleep(0)
    assert ran == [f"{mode} callback", "plain callback"]
    ran.clear()
    assert [strip(e) for e in await inv.invoke_many([call("callbacks", "1", x=2), call("callbacks", "2", x=3)])] == [ok(want)] * 2
    await asyncio.sleep(0)
    assert ran == [f"{mode} callback", "plain callback"] * 2


async def test_the_background_clean_up_drops_its_outcome_without_noise(caplog: pytest.LogCaptureFixture) -> None:
    done = asyncio.Event()

    @tool(read_only=True, timeout_s=0.02)
    async def noisy(kind: str) -> str:
        """Wait too long; clean up, then end with the given outcome."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            done.set()
            if kind == "raise":
                raise ValueError("clean-up failed")
            if kind == "cancel":
                raise
            return "late"
        return "never"

    inv = Invoker(ToolRegistry([noisy]))
    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        for kind in ("raise", "cancel", "return"):
            done.clear()
            assert await inv.invoke(call("noisy", kind=kind)) == timeout_env("noisy", "0.02")
            await asyncio.wait_for(done.wait(), 5)
            await asyncio.sleep(0.01)
        gc.collect()
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


CLEAN_UP_OUTLIVES_ITS_LOOP = '''
import asyncio, gc, weakref
from agentkit_tools import Invoker, ToolRegistry, tool

class Alive:
    pass

ALIVE = weakref.WeakSet()
ENDED = []

@tool(read_only=True, timeout_s=0.05)
async def lingers(x: int) -> int:
    """Wait too long; when cancelled, clean up for long, letting two more cancellations pass."""
    mark = Alive()
    ALIVE.add(mark)
    try:
        try:
            await asyncio.sleep(10)
        finally:
            for _ in range(3):
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    pass
    finally:
        ENDED.append(x)
    return x

inv = Invoker(ToolRegistry([lingers]))
loops = weakref.WeakSet()
N = 10

async def call(i):
    loops.add(asyncio.get_running_loop())
    return await inv.invoke({"id": str(i), "name": "lingers", "input": {"x": i}})

async def leaves_it_running(i):
    asyncio.get_running_loop().create_task(call(i))
    await asyncio.sleep(0.01)  # asyncio.run cancels the call; its deadline comes during the shut-down

for i in range(N):
    asyncio.run(leaves_it_running(i))
gc.collect()
print(f"asyncio.run: loops alive {len(loops)}, bodies alive {len(ALIVE)}, ended {len(ENDED)}")
codes = set()
for i in range(N, 2 * N):
    loop = asyncio.new_event_loop()
    codes.add(loop.run_until_complete(call(i))["error"]["code"])
    loop.close()  # without asyncio.run's cancelling of the tasks left
    del loop
gc.collect()
print(f"closed loops: loops alive {len(loops)}, bodies alive {len(ALIVE)}, ended {len(ENDED)}, {sorted(codes)}")
'''


@pytest.mark.parametrize("python", interpreters())
def test_a_clean_up_still_running_when_its_loop_is_closed_keeps_nothing(python: str, tmp_path: Path) -> None:
    """A body abandoned at its deadline whose clean-up is still running when its loop is closed
    (a clean-up started during ``asyncio.run``'s own shut-down; ``loop.close()`` without it):
    the body is closed with the loop (its ``finally`` blocks run), nothing of the loop is kept,
    and nothing is printed."""
    [(code, out, err)] = run_many(python, CLEAN_UP_OUTLIVES_ITS_LOOP, tmp_path, runs=1, parallel=1)
    assert (code, out, err) == (0, (
        "asyncio.run: loops alive 0, bodies alive 0, ended 10\n"
        "closed loops: loops alive 0, bodies alive 0, ended 20, ['timeout']\n"), "")


CALLS_WAITING_WHEN_THEIR_LOOP_IS_CLOSED = '''
import asyncio, gc, threading, time, weakref
from agentkit_tools import Invoker, ToolRegistry, tool
from agentkit_tools.middleware import audit, default_chain

CLEANED, RECORDS, RUNS = [], [], []
GATE = threading.Event()  # the sync bodies wait for it: set once their loops are closed

@tool(read_only=True, timeout_s=5)
async def async_waits(x: int) -> int:
    """Wait a long time for the thing to happen, then answer."""
    try:
        await asyncio.sleep(10)
    finally:
        CLEANED.append(x)
    return x

@tool(read_only=True, timeout_s=5)
async def awaits_in_finally(x: int) -> int:
    """Wait a long time for the thing to happen, clean up with an await."""
    try:
        await asyncio.sleep(10)
    finally:
        CLEANED.append(x)
        await asyncio.sleep(0)
        CLEANED.append(-1)  # never: a closed coroutine cannot await
    return x

@tool(read_only=True, timeout_s=5)
def sync_waits(x: int) -> int:
    """Wait on a worker thread until let go, then answer the number."""
    GATE.wait(5)
    return x

@tool(side_effecting=True, idempotent=True, timeout_s=5)
async def slow_once(x: int) -> int:
    """Wait a long time the first time it is called, then answer at once."""
    RUNS.append(x)
    if len(RUNS) == 1:
        await asyncio.sleep(10)
    return x

chain = [audit(RECORDS.append)] + [mw for mw in default_chain() if mw.name != "audit"]
inv = Invoker(ToolRegistry([async_waits, awaits_in_finally, sync_waits]), middleware=chain)

def alive(loops):
    """How many of ``loops`` are still alive once the sync bodies have ended on their worker
    threads (they hold their loop until then: waited for up to 10 s)."""
    GATE.set()
    end = time.monotonic() + 10
    while True:
        gc.collect()
        n = sum(ref() is not None for ref in loops)
        if n == 0 or time.monotonic() > end:
            return n
        time.sleep(0.01)

def close_pending(coro):
    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    task._log_destroy_pending = False  # asyncio's report of the caller's own task: not ours
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()  # the calls are still waiting, within their deadlines
    return weakref.ref(loop)

for name in ("async_waits", "awaits_in_finally", "sync_waits"):
    CLEANED.clear()
    RECORDS.clear()
    loops = [close_pending(inv.invoke({"id": str(i), "name": name, "input": {"x": i}})) for i in range(5)]
    loops += [close_pending(inv.invoke_many([{"id": f"{i}.{j}", "name": name, "input": {"x": 10 * i + j}} for j in range(2)]))
              for i in range(1, 4)]
    if name == "sync_waits":
        n = alive(loops)
    else:
        gc.collect()
        n = sum(ref() is not None for ref in loops)
    print(f"{name}: loops alive {n}, cleaned up {sorted(CLEANED)}")
    print(" ".join(sorted(f"{r['call_id']}:{r['outcome']}" for r in RECORDS)))

# An identical call of a call dropped with its loop runs: it does not wait for the dropped one.
async def again():
    return await asyncio.wait_for(inv.invoke({"id": "b", "name": "slow_once", "input": {"x": 7}}), 2)

for how in ("invoke", "invoke_many"):
    RUNS.clear()
    inv = Invoker(ToolRegistry([slow_once]))
    call = {"id": "a", "name": "slow_once", "input": {"x": 7}}
    close_pending(inv.invoke(call) if how == "invoke" else inv.invoke_many([call, dict(call, id="c", input={"x": 8})]))
    gc.collect()
    env = asyncio.run(again())
    print(f"{how}: {env['ok']} {env['value']} {RUNS}")
'''


@pytest.mark.parametrize("python", interpreters())
def test_a_loop_closed_while_calls_wait_within_their_deadlines_is_not_kept(python: str, tmp_path: Path) -> None:
    """Calls alone and turns of calls left waiting (async and sync bodies) when their loop is
    closed: the loop is not kept; each async body is closed (its finally runs; one that awaits
    there is dropped at that await); nothing is printed (no task reported destroyed while
    pending, no call logged as a fault); each call is aborted as cancelled (its record reaches
    a sync sink); an identical call later runs the body instead of waiting for the dropped one."""
    [(code, out, err)] = run_many(python, CALLS_WAITING_WHEN_THEIR_LOOP_IS_CLOSED, tmp_path, runs=1, parallel=1)
    records = " ".join(sorted(f"{i}:cancelled" for i in ("0", "1", "2", "3", "4", "1.0", "1.1", "2.0", "2.1", "3.0", "3.1"))) + "\n"
    assert (code, out, err) == (0, (
        "async_waits: loops alive 0, cleaned up [0, 1, 2, 3, 4, 10, 11, 20, 21, 30, 31]\n" + records +
        "awaits_in_finally: loops alive 0, cleaned up [0, 1, 2, 3, 4, 10, 11, 20, 21, 30, 31]\n" + records +
        "sync_waits: loops alive 0, cleaned up []\n" + records +
        "invoke: True 7 [7, 7]\n"
        "invoke_many: True 7 [7, 8, 7]\n"), "")


# ------------------------------------------------------------------ the caller's cancellation


@pytest.mark.parametrize("cancel_first", [True, False])
async def test_the_callers_cancellation_coinciding_with_the_deadline_propagates(cancel_first: bool) -> None:
    """The caller is cancelled in the same loop pass as the call's deadline fires (a callback
    blocks the loop past both), 30 times in each order: the cancellation propagates, the task is
    left with no pending cancellation of ours, and the body is cancelled (3.11+)."""
    outcomes = []
    rounds = 0
    while len(outcomes) < 30:
        rounds += 1
        assert rounds <= 300, "the machine is too loaded to run the rounds on time"
        loop = asyncio.get_running_loop()
        log: list[str] = []
        caller: list[asyncio.Task[Any]] = []
        on_time: list[bool] = []

        @tool(read_only=True, timeout_s=0.05)
        async def waits(x: int) -> int:
            """Wait far longer than the deadline allows."""
            # As above: the deadline due 0.05 s after this first step, the caller's cancellation
            # at 0.03 s or 0.07 s, the loop blocked from 0.01 s to 0.11 s.
            on_time.extend([block_loop(loop, 0.03 if cancel_first else 0.07, caller[0].cancel)])
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                log.append("cancelled")
                raise
            return x

        inv = Invoker(ToolRegistry([waits]))
        task = asyncio.ensure_future(inv.invoke(call("waits", x=1)))
        caller.append(task)
        try:
            await asyncio.wait_for(asyncio.shield(task), 5)
            outcome = "answered"
        except asyncio.CancelledError:
            outcome = "cancelled" if task.cancelled() else "?"
        pending = task.cancelling() if sys.version_info >= (3, 11) and not task.done() else 0
        await asyncio.sleep(0.06)  # the callback has run
        if on_time[0] == [True]:
            outcomes.append((outcome, pending, log))
    # Python 3.10 keeps no count of a task's cancellation requests: there the two cannot be told
    # apart and the caller is answered ``timeout``.
    expected = "cancelled" if sys.version_info >= (3, 11) else "answered"
    assert outcomes == [(expected, 0, ["cancelled"])] * 30
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_the_callers_cancellation_reaches_the_body_which_decides() -> None:
    """The caller's cancellation reaches the body at once, in the caller's task, as it reaches any
    coroutine the caller awaits: a body that lets it through cancels the caller; one that
    swallows it and answers ends the call with its answer (it chose so)."""
    started = asyncio.Event()
    log: list[str] = []

    @tool(read_only=True, timeout_s=30)
    async def obeys(x: int) -> str:
        """Wait; clean up briefly when cancelled and let the cancellation through."""
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            log.append("obeys: cleaning up")
            await asyncio.sleep(0.01)
            log.append("obeys: cleaned up")
        return "slept"

    @tool(read_only=True, timeout_s=30)
    async def swallows(x: int) -> str:
        """Wait; swallow a cancellation and answer anyway."""
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("swallows: cancelled")
            return "swallowed"
        return "slept"

    for chain in ("default", "bare"):
        outcomes = []
        for name in ("obeys", "swallows"):
            started.clear()
            log.clear()
            inv = Invoker(ToolRegistry([obeys, swallows]), middleware=CHAINS[chain])
            task = asyncio.ensure_future(inv.invoke(call(name, x=1)))
            await started.wait()
            task.cancel()
            try:
                outcomes.append((strip(await task), list(log)))
            except asyncio.CancelledError:
                outcomes.append(("cancelled" if task.cancelled() else "?", list(log)))
        assert outcomes == [
            ("cancelled", ["obeys: cleaning up", "obeys: cleaned up"]),
            (ok("swallowed"), ["swallows: cancelled"]),
        ], chain


class _PassOn(mw.Middleware):
    """A user middleware that passes every call on: the chain's body is then run by the driver."""

    name = "pass_on"

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handle(tc: Any) -> Any:
            return await nxt(tc)

        return handle


@pytest.mark.parametrize("chain", ["default", "audit only", "user middleware"])
@pytest.mark.parametrize("when", ["first step", "last step"])
async def test_the_callers_cancellation_requested_by_a_body_is_the_callers(chain: str, when: str) -> None:
    """A body cancels the task of its caller, which runs calls one by one. In its first step
    (the core takes it, or the driver when a user middleware comes first), then it awaits: that
    cancellation reaches the body as its own task's and propagates to the caller (the call is
    recorded ``cancelled``). In its last step, then it answers: the call is answered, and the
    cancellation reaches the caller's next call the same way. As in a turn, and on every
    Python version (3.11+ counted it as the body's own cancellation: ``internal_error``)."""
    caller: list[asyncio.Task[Any]] = []
    log: list[str] = []
    records: list[dict[str, Any]] = []

    @tool(read_only=True)
    async def cancels_caller(x: int) -> int:
        """Cancel the task of the caller at the step chosen, and answer the number."""
        if when == "first step":
            caller[0].cancel()
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            log.append("cancels_caller: cancelled")
            raise
        if when == "last step":
            caller[0].cancel()
        return x

    @tool(read_only=True)
    async def waits(x: int) -> int:
        """Sleep a moment, then answer with the number doubled."""
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            log.append("waits: cancelled")
            raise
        return 2 * x

    rest = {"default": mw.default_chain()[1:], "audit only": [], "user middleware": [_PassOn(), *mw.default_chain()[1:]]}
    inv = Invoker(ToolRegistry([cancels_caller, waits]), middleware=[mw.audit(records.append), *rest[chain]])
    envs: list[dict[str, Any]] = []

    async def calls() -> None:
        caller.append(asyncio.current_task())  # type: ignore[arg-type]
        for c in (call("cancels_caller", "1", x=1), call("waits", "2", x=2)):
            envs.append(strip(await inv.invoke(c)))

    task = asyncio.ensure_future(calls())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    if when == "first step":
        assert (envs, log, [(r["call_id"], r["outcome"]) for r in records]) == (
            [], ["cancels_caller: cancelled"], [("1", "cancelled")])
    else:
        assert (envs, log, [(r["call_id"], r["outcome"]) for r in records]) == (
            [ok(1)], ["waits: cancelled"], [("1", "ok"), ("2", "cancelled")])


@pytest.mark.parametrize("suspends", [False, True])
async def test_a_body_that_raises_cancelled_error_itself_is_a_failure_of_the_body(suspends: bool) -> None:
    @tool(read_only=True)
    async def gives_up(x: int) -> int:
        """Raise CancelledError although nobody cancelled anything."""
        if suspends:
            await asyncio.sleep(0.001)
        raise asyncio.CancelledError()

    for chain in ("default", "bare"):
        env = await Invoker(ToolRegistry([gives_up]), middleware=CHAINS[chain]).invoke(call("gives_up", x=1))
        assert env == internal("gives_up", "CancelledError"), chain
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


# ------------------------------------------------------------------ the body runs as a task of its own


async def test_the_body_runs_as_a_task_of_its_own_in_the_callers_task() -> None:
    """``asyncio.current_task()`` in the body is the body's own (the same object at every step,
    in the clean-up past the deadline too), never the caller's, and no real task is made."""
    seen: list[Any] = []
    done = asyncio.Event()

    @tool(read_only=True)
    async def where(x: int) -> int:
        """Report the current task before and after suspending."""
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())
        return x

    @tool(read_only=True, timeout_s=0.02)
    async def late(x: int) -> int:
        """Report the current task, wait too long, report it again during clean-up."""
        seen.append(asyncio.current_task())
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.001)
            seen.append(asyncio.current_task())
            done.set()
        return x

    me = asyncio.current_task()
    inv = Invoker(ToolRegistry([where, late]))
    with TaskCount() as count:
        assert strip(await inv.invoke(call("where", x=1))) == ok(1)
    assert count.created == []
    assert asyncio.current_task() is me
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0] is not me
    assert (seen[0].done(), seen[0].cancelled()) == (True, False)
    seen.clear()
    assert await inv.invoke(call("late", x=1)) == timeout_env("late", "0.02")
    await asyncio.wait_for(done.wait(), 5)
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0] is not me
    assert asyncio.current_task() is me


def _scope_body(kind: str, log: list[str]) -> Any:
    """A body whose clean-up awaits inside a scope it entered, a scope that fires (or, for the
    task group, whose child fails) 0.1 s in: after a 0.05 s deadline."""

    async def body(x: int) -> int:
        try:
            if kind == "asyncio.timeout":
                async with asyncio.timeout(0.1):  # type: ignore[attr-defined]
                    try:
                        await asyncio.sleep(10)
                    finally:
                        await asyncio.sleep(0.3)
            elif kind == "TaskGroup":
                async def fails() -> None:
                    await asyncio.sleep(0.1)
                    raise ValueError("child failed")

                async with asyncio.TaskGroup() as tg:  # type: ignore[attr-defined]
                    tg.create_task(fails())
                    try:
                        await asyncio.sleep(10)
                    finally:
                        await asyncio.sleep(0.3)
            else:
                import anyio

                scopes = {"anyio.fail_after": lambda: anyio.fail_after(0.1),
                          "anyio.move_on_after": lambda: anyio.move_on_after(0.1),
                          "anyio.CancelScope": anyio.CancelScope}
                with scopes[kind]() as scope:
                    try:
                        await asyncio.sleep(10)
                    finally:
                        if kind == "anyio.CancelScope":
                            asyncio.get_running_loop().call_later(0.05, scope.cancel)
                        try:
                            await asyncio.sleep(0.3)
                        except BaseException as exc:
                            log.append(f"clean-up: {type(exc).__name__}")
                            raise
        except BaseException as exc:
            log.append(f"body: {type(exc).__name__}")
            if isinstance(exc, RuntimeError):
                log.append(str(exc))
            raise
        return x

    body.__name__ = body.__qualname__ = "scoped"
    body.__doc__ = "Wait too long; clean up slowly inside a scope of its own."
    return body


SCOPES = [
    pytest.param("asyncio.timeout", marks=NEEDS_311),
    pytest.param("TaskGroup", marks=NEEDS_311),
    "anyio.fail_after",
    "anyio.move_on_after",
    "anyio.CancelScope",
]


@pytest.mark.parametrize("kind", SCOPES)
async def test_a_scope_the_bodys_clean_up_is_still_inside_never_reaches_the_caller(kind: str) -> None:
    """At the deadline the caller gets ``timeout`` and the body's clean-up goes on, still inside
    a scope the body entered; when that scope fires (or its task group's child fails) it cancels
    the body, not the caller: the caller's later awaits are never cancelled and its task keeps no
    cancellation request. The body sees what it sees in a task of its own cancelled at the
    deadline (anyio: no "exit cancel scope in a different task")."""
    log: list[str] = []
    body = _scope_body(kind, log)

    async def own_task() -> list[str]:  # the same body in a task of its own, cancelled at 0.05 s
        log.clear()
        t = asyncio.ensure_future(body(1))
        await asyncio.sleep(0.05)
        t.cancel()
        await asyncio.wait([t], timeout=5)
        t.exception() if not t.cancelled() else None  # retrieved
        return list(log)

    expected = await asyncio.ensure_future(own_task())
    assert expected and "body: RuntimeError" not in expected, expected

    inv = Invoker(ToolRegistry([tool(read_only=True, timeout_s=0.05)(body)]))
    for round_ in range(3):
        log.clear()
        me = asyncio.current_task()
        assert await inv.invoke(call("scoped", x=round_)) == timeout_env("scoped", "0.05")
        cancelled = 0
        until = time.monotonic() + 0.6  # the scope fires at 0.1 s, the clean-up ends at 0.35 s
        while time.monotonic() < until:
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                cancelled += 1
                if sys.version_info >= (3, 11):
                    while me.cancelling():  # type: ignore[union-attr]
                        me.uncancel()  # type: ignore[union-attr]
        pending = me.cancelling() if sys.version_info >= (3, 11) else 0  # type: ignore[union-attr]
        assert (cancelled, pending, log) == (0, 0, expected)


@pytest.mark.parametrize("kind", ["fail_after", "move_on_after"])
async def test_an_anyio_scope_inside_a_body_keeps_working(kind: str) -> None:
    """An anyio deadline inside the body (within the call's own) cancels the body's wait; the
    body decides; the caller is untouched. Also an anyio task group and a thread of anyio's."""
    import anyio

    @tool(read_only=True, timeout_s=30)
    async def with_anyio(x: int) -> str:
        """Give a slow step 10 ms of an anyio deadline, then run children and a thread."""
        out = []
        try:
            with (anyio.fail_after(0.01) if kind == "fail_after" else anyio.move_on_after(0.01)) as scope:
                await asyncio.sleep(10)
        except TimeoutError:
            out.append("timed out")
        out.append(f"cancelled_caught={scope.cancelled_caught}")

        async def child(n: int) -> None:
            await anyio.sleep(0.001)
            out.append(f"child {n}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(child, 1)
        out.append(await anyio.to_thread.run_sync(lambda: "thread"))
        return ", ".join(out)

    for chain in ("default", "bare"):
        me = asyncio.current_task()
        env = await Invoker(ToolRegistry([with_anyio]), middleware=CHAINS[chain]).invoke(call("with_anyio", x=1))
        first = "timed out, " if kind == "fail_after" else ""
        assert strip(env) == ok(f"{first}cancelled_caught=True, child 1, thread"), chain
        if sys.version_info >= (3, 11):
            assert me.cancelling() == 0  # type: ignore[union-attr]
        await asyncio.sleep(0.02)  # no late cancellation of the caller


@NEEDS_311
async def test_the_callers_cancellation_passes_the_bodys_own_timeout_scope() -> None:
    """The caller is cancelled while the body waits inside its own ``asyncio.timeout``: the body's
    scope lets that cancellation through (it is not the scope's), as in a task of its own."""
    started = asyncio.Event()
    log: list[str] = []

    @tool(read_only=True, timeout_s=30)
    async def scoped_wait(x: int) -> str:
        """Wait inside a generous timeout of its own."""
        try:
            async with asyncio.timeout(10):  # type: ignore[attr-defined]
                started.set()
                await asyncio.sleep(10)
        except BaseException as exc:
            log.append(type(exc).__name__)
            raise
        return "slept"

    task = asyncio.ensure_future(Invoker(ToolRegistry([scoped_wait])).invoke(call("scoped_wait", x=1)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (task.cancelled(), log) == (True, ["CancelledError"])


@NEEDS_311
@pytest.mark.parametrize("clean_up", ["none", "inside the scope"])
async def test_asyncio_timeout_inside_a_body_keeps_working(clean_up: str) -> None:
    """The body's own ``asyncio.timeout`` cancels the body: the body gets its TimeoutError, the
    caller is not cancelled, and a clean-up that awaits inside the scope is the body's business,
    not the caller's."""
    @tool(read_only=True, timeout_s=30)
    async def own_timeout(x: int) -> str:
        """Give a slow step 10 ms of its own, then answer."""
        try:
            async with asyncio.timeout(0.01):
                try:
                    await asyncio.sleep(10)
                finally:
                    if clean_up != "none":
                        await asyncio.sleep(0.01)
        except TimeoutError:
            await asyncio.sleep(0)
            return "own timeout"
        return "slept"

    for chain in ("default", "bare"):
        env = await Invoker(ToolRegistry([own_timeout]), middleware=CHAINS[chain]).invoke(call("own_timeout", x=1))
        assert strip(env) == ok("own timeout"), chain
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@NEEDS_311
async def test_a_task_group_inside_a_body_keeps_working() -> None:
    @tool(read_only=True)
    async def group(x: int) -> str:
        """Run two children in a task group, one of which fails."""
        async def fails() -> None:
            await asyncio.sleep(0.001)
            raise ValueError("child failed")

        try:
            async with asyncio.TaskGroup() as tg:  # type: ignore[attr-defined]
                tg.create_task(asyncio.sleep(10))
                tg.create_task(fails())
        except Exception as exc:  # an ExceptionGroup
            return f"{type(exc).__name__}: {[str(e) for e in exc.exceptions]}"  # type: ignore[attr-defined]
        return "no failure"

    async def direct() -> tuple[Any, int]:
        return await group.func(1), asyncio.current_task().cancelling()  # type: ignore[misc, union-attr]

    async def invoked() -> tuple[Any, int]:
        env = await Invoker(ToolRegistry([group])).invoke(call("group", x=1))
        return strip(env), asyncio.current_task().cancelling()  # type: ignore[union-attr]

    value, _ = await asyncio.ensure_future(direct())
    assert value == "ExceptionGroup: ['child failed']"
    # Awaited directly, Python 3.11 and early 3.12 leave the task a cancellation request (a task
    # group whose child fails while it waits in __aexit__ cancels its task and never takes that
    # back; 3.13 leaves none). Through the Invoker that request stays with the body's own task:
    # the caller's keeps none.
    assert await asyncio.ensure_future(invoked()) == (ok(value), 0)


async def test_nested_invoker_calls_inside_a_body() -> None:
    @tool(read_only=True, timeout_s=0.05)
    async def inner_slow(x: int) -> int:
        """Wait far longer than the deadline allows."""
        await asyncio.sleep(10)
        return x

    @tool(read_only=True)
    async def inner_quick(x: int) -> int:
        """Answer with the number plus one after a moment."""
        await asyncio.sleep(0.001)
        return x + 1

    inner = Invoker(ToolRegistry([inner_slow, inner_quick]))

    @tool(read_only=True, timeout_s=30)
    async def outer(x: int) -> list[Any]:
        """Call two inner tools through their own Invoker and report."""
        slow = await inner.invoke(call("inner_slow", x=x))
        quick = await inner.invoke(call("inner_quick", x=x))
        return [slow["error"]["code"] if not slow["ok"] else slow["value"], quick["value"]]

    env = await Invoker(ToolRegistry([outer])).invoke(call("outer", x=1))
    assert strip(env) == ok(["timeout", 2])
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


def test_dispatch_of_an_async_tool_that_suspends() -> None:
    @tool(read_only=True, timeout_s=5)
    async def waits(x: int) -> int:
        """Answer with the number plus one after a moment."""
        VAR.set("body")
        await asyncio.sleep(0.001)
        return x + 1

    reg = ToolRegistry([waits])
    assert [strip(dispatch(call("waits", x=i), reg)) for i in range(3)] == [ok(1), ok(2), ok(3)]
    assert VAR.get() == "unset"


COUNTING_TASK = r'''
import asyncio, threading, time
from agentkit_tools import Invoker, ToolRegistry, tool
from agentkit_tools._runner import _POOL
from agentkit_tools.errors import ToolTimeoutError


class Counting(asyncio.tasks._PyTask):
    """A task that counts its cancellation requests as every task does on Python 3.11+ (what a
    backport's runner makes on 3.10: pytest-asyncio's main task there)."""

    if not hasattr(asyncio.tasks._PyTask, "cancelling"):
        def __init__(self, *args, **kwargs):
            self._requests = 0
            super().__init__(*args, **kwargs)

        def cancel(self, msg=None):
            if not self.done():
                self._requests += 1
            return super().cancel(msg)

        def cancelling(self):
            return self._requests

        def uncancel(self):
            self._requests = max(self._requests - 1, 0)
            return self._requests


@tool(read_only=True, timeout_s=0.05)
async def hangs(x: int) -> int:
    """Wait ten seconds, far past the deadline, then return x."""
    await asyncio.sleep(10)
    return x


@tool(read_only=True, timeout_s=0.05)
def blocks(x: int) -> int:
    """Block a worker thread past the deadline, then return x."""
    time.sleep(0.2)
    return x


async def main():
    me = asyncio.current_task()
    inv = Invoker(ToolRegistry([hangs, blocks]))
    for name in ("hangs", "blocks"):
        env = await inv.invoke({"id": "1", "name": name, "input": {"x": 1}})
        print(name, env["error"]["code"], me.cancelling())
    # the deadline and the caller's own cancellation in one pass of the loop
    release = threading.Event()
    ready, awaiting = _POOL.start(lambda a, b: release.wait(10), None, None, 1e-9, "x")
    asyncio.get_running_loop().call_later(0, me.cancel)
    try:
        await awaiting
        seen = "answered"
    except asyncio.CancelledError:
        seen = "cancelled"
    except ToolTimeoutError:
        seen = "timeout"
    release.set()
    print("both", seen, me.uncancel())


loop = asyncio.new_event_loop()
loop.run_until_complete(Counting(main(), loop=loop))
loop.close()
'''


@pytest.mark.parametrize("python", interpreters())
def test_a_task_that_counts_its_cancellations_is_left_as_it_was_on_every_python(python: str, tmp_path: Path) -> None:
    """A task that counts its cancellation requests (every task on Python 3.11+; on 3.10 a task
    class that adds the count, as pytest-asyncio's runner does there): a deadline's cancellation
    is taken back when the deadline is left (none left counted on the task), and the caller's
    own cancellation arriving in the same pass of the loop as the deadline propagates (never
    turned into ``timeout``). Python 3.10 was told by its version only and held every task for
    one that does not count."""
    [(code, out, err)] = run_many(python, COUNTING_TASK, tmp_path, runs=1, parallel=1)
    assert (code, out, err) == (0, "hangs timeout 0\nblocks timeout 0\nboth cancelled 0\n", "")


# ------------------------------------------------------------------ the loop the body runs on


def _loop_reporter() -> Any:
    @tool(read_only=True)
    async def where(x: int) -> list[Any]:
        """Report the current task and the running loop."""
        return [asyncio.current_task(), asyncio.get_running_loop()]

    return where


def test_the_body_runs_on_the_loop_running_now_in_loops_run_one_after_another() -> None:
    """Each loop run in turn in one thread is the one the body's own task is on (the core keeps
    the running loop it read while the thread's running loop is unchanged)."""
    inv = Invoker([_loop_reporter()])

    async def once(run: int) -> tuple[Any, Any, list[Any]]:
        envs = [strip(await inv.invoke(call("where", x=10 * run + i))) for i in range(3)]
        return asyncio.current_task(), asyncio.get_running_loop(), envs

    for run in range(3):
        caller, running, envs = asyncio.run(once(run))
        for env in envs:
            assert env["ok"] is True, env
            body_task, body_loop = env["value"]
            assert body_task is not caller
            assert body_loop is running
            assert body_task.get_loop() is running


def test_the_body_runs_on_its_own_threads_loop_with_loops_running_in_two_threads() -> None:
    """Two threads, each running a loop, call in turn: each body's own task is on its thread's
    loop."""
    import threading

    inv = Invoker([_loop_reporter()])
    turn = threading.Semaphore(1)

    class Ctx:  # a conversation per thread: its calls are distinct
        def __init__(self, run_id: int) -> None:
            self.run_id = str(run_id)
    failures: list[str] = []

    async def calls() -> None:
        running = asyncio.get_running_loop()
        for i in range(50):
            with turn:
                env = strip(await inv.invoke(call("where", x=i), Ctx(threading.get_ident())))
            body_task, body_loop = env["value"]
            if body_loop is not running or body_task.get_loop() is not running:
                failures.append(f"call {i}: {body_loop!r} / {body_task.get_loop()!r}, not {running!r}")
            await asyncio.sleep(0)

    threads = [threading.Thread(target=asyncio.run, args=(calls(),)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not failures, failures[:3]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_asks_for_its_running_loop_itself() -> None:
    """In a child forked inside a running loop, the body's loop is what
    ``asyncio.get_running_loop()`` answers there (Python 3.10 and 3.11: none, the loop ran in the
    parent), not what the parent's calls found."""
    import json
    import os
    import warnings

    inv = Invoker([_loop_reporter()])

    async def main() -> tuple[str, dict[str, Any]]:
        assert strip(await inv.invoke(call("where", x=1)))["ok"] is True  # found in the parent
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads alive
            pid = os.fork()
        if pid == 0:  # the child: report, then leave at once
            try:
                try:
                    asyncio.get_running_loop()
                    running = "a loop"
                except RuntimeError:
                    running = "none"
                env = strip(await inv.invoke(call("where", x=2)))
                if env["ok"]:
                    env = {"ok": True, "same loop": env["value"][1] is asyncio.get_event_loop_policy()}
                os.write(w, json.dumps([running, env], default=repr).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            data = f.read()
        os.waitpid(pid, 0)
        running, env = json.loads(data)
        return running, env

    running, env = asyncio.run(main())
    if running == "none":
        assert env["ok"] is False, env
    else:
        assert env["ok"] is True, env
