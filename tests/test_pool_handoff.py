"""The hand-off between callers and the worker pool that runs sync tool bodies.

Waiting workers spin briefly (one at a time) then park; callers wait for the result spinning
briefly with the interpreter lock released, then parked (the core's ``WorkerPool``). These tests hold the guarantees that must survive every race of that
hand-off: each call gets exactly one envelope, its own; a deadline is honoured; the pool's
accounting returns to rest; and a process exits cleanly whatever its workers and callers are
doing at that moment.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import random
import subprocess
import sys
import time
import weakref
from typing import Any

import pytest

from exit_runs import interpreters, run_many
from agentkit_tools import Invoker, ToolRegistry, dispatch, tool
from agentkit_tools import _runner
from agentkit_tools._runner import pool_sizes

CALLS = int(os.environ.get("AGENTKIT_HANDOFF_CALLS", "3000"))
EXIT_RUNS = int(os.environ.get("AGENTKIT_EXIT_RUNS", "200")) // 3  # per interpreter


@tool(read_only=True, timeout_s=0.0004)
def echo(n: int, spin_us: int) -> int:
    """Busy-wait spin_us microseconds, then return n."""
    end = time.perf_counter() + spin_us / 1e6
    while time.perf_counter() < end:
        pass
    return n


@pytest.fixture
def own_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool of its own for the test, so its accounting is not shared with bodies other tests
    left running."""
    monkeypatch.setattr(_runner, "_POOL", _runner._make_pool())


def _outcome(env: dict, n: int) -> str:
    if env["ok"]:
        assert env["value"] == n, env  # its own result, never another call's
        return "ok"
    assert env["error"]["code"] == "timeout", env
    return "timeout"


def _settle() -> tuple[int, int, int]:
    """Wait until every worker is back waiting for a job (bodies here take at most 1 ms)."""
    for _ in range(500):
        threads, idle, stuck = pool_sizes()
        if idle == threads and stuck == 0:
            break
        time.sleep(0.01)
    return pool_sizes()


def test_dispatch_under_tiny_deadlines_from_many_threads_gives_each_call_one_envelope(own_pool: None) -> None:
    reg = ToolRegistry([echo])
    rng = random.Random(7)
    plan = [(n, rng.choice((0, 0, 50, 200, 400, 1000))) for n in range(CALLS)]

    def caller(part: list[tuple[int, int]]) -> list[str]:
        return [
            _outcome(dispatch({"id": str(n), "name": "echo", "input": {"n": n, "spin_us": us}}, reg), n)
            for n, us in part
        ]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        seen = [o for part in pool.map(caller, [plan[i::4] for i in range(4)]) for o in part]
    assert len(seen) == CALLS
    assert {"ok", "timeout"} <= set(seen)  # both sides of the race were exercised
    threads, idle, stuck = _settle()
    assert (idle, stuck) == (threads, 0) and threads >= 1


def test_invoker_under_tiny_deadlines_gives_each_call_one_envelope(own_pool: None) -> None:
    inv = Invoker(ToolRegistry([echo]))
    rng = random.Random(11)
    plan = [(n, rng.choice((0, 0, 50, 200, 400, 1000))) for n in range(CALLS)]

    async def main() -> list[str]:
        out = []
        for i in range(0, CALLS, 50):  # one at a time (the loop is idle), then batches of 8
            batch = plan[i : i + 50]
            envs = [await inv.invoke({"id": str(n), "name": "echo", "input": {"n": n, "spin_us": us}}) for n, us in batch[:42]]
            envs += await asyncio.gather(
                *(inv.invoke({"id": str(n), "name": "echo", "input": {"n": n, "spin_us": us}}) for n, us in batch[42:])
            )
            out += [_outcome(env, n) for env, (n, _) in zip(envs, batch)]
        return out

    seen = asyncio.run(main())
    assert len(seen) == CALLS
    assert {"ok", "timeout"} <= set(seen)
    threads, idle, stuck = _settle()
    assert (idle, stuck) == (threads, 0)


def test_a_result_that_misses_the_callers_brief_wait_still_reaches_the_event_loop() -> None:
    @tool(read_only=True)
    def slowish(n: int) -> int:
        """Sleep two milliseconds, then return the number n."""
        time.sleep(0.002)
        return n

    @tool(read_only=True)
    def quick(n: int) -> int:
        """Return the number n at once, without waiting."""
        return n

    inv = Invoker(ToolRegistry([slowish, quick]))

    async def main() -> list:
        return [(await inv.invoke({"id": str(n), "name": name, "input": {"n": n}}))["value"]
                for n in range(200) for name in ("slowish", "quick")]

    assert asyncio.run(main()) == [n for n in range(200) for _ in range(2)]


@pytest.mark.parametrize("ends", ["cancelled", "closed", "dropped"])
def test_an_await_of_a_workers_outcome_that_ends_without_it_gives_the_job_up(own_pool: None, ends: str) -> None:
    """The core's awaitable of a worker's outcome (what ``WorkerPool.start`` answers when the
    outcome is not there at once): ended by the caller's cancellation, closed, or dropped before
    it was awaited, its running job stops counting against the workers limit (``stuck`` 1 until
    the body returns); a job given up that was still queued would never start."""
    import threading

    started, release = threading.Event(), threading.Event()

    def body(a: Any, b: Any) -> int:
        started.set()
        release.wait(10)
        return 1

    async def main() -> tuple[int, int]:
        ready, awaiting = _runner._POOL.start(body, None, None, None, "body")
        assert not ready and type(awaiting).__name__ == "JobAwait"
        assert started.wait(5)
        before = pool_sizes()[2]
        if ends == "cancelled":
            task = asyncio.ensure_future(_as_coro(awaiting))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        elif ends == "closed":
            it = awaiting.__await__()
            assert isinstance(next(it), asyncio.Future)
            it.close()
            with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
                next(it)
        else:
            del awaiting
            gc.collect()
        return before, pool_sizes()[2]

    try:
        assert asyncio.run(main()) == (0, 1)
    finally:
        release.set()
    assert _settle()[2] == 0


async def _as_coro(awaitable: Any) -> Any:
    return await awaitable


def test_a_call_end_is_computed_by_the_core() -> None:
    """``deadline_end``: the end on ``time.monotonic`` of a call of that many seconds starting
    now (the core's one computation, which the Python side of the runner uses too)."""
    from agentkit_tools import _core

    assert _core.deadline_end(None) is None
    before = time.monotonic()
    end = _core.deadline_end(2.5)
    after = time.monotonic()
    assert end is not None and before + 2.5 <= end <= after + 2.5
    assert _runner._deadline_end is _core.deadline_end


def test_the_core_reads_the_clock_time_monotonic_reads() -> None:
    """A deadline of 0 s ends now on ``time.monotonic``: read between two readings of it, the
    core's clock lies between them, every time (the core reads that clock itself where it can)."""
    from agentkit_tools import _core

    for _ in range(2000):
        before = time.monotonic()
        end = _core.deadline_end(0.0)
        after = time.monotonic()
        assert before <= end <= after


@pytest.mark.parametrize("path", ["dispatch", "invoke"])
def test_a_worker_keeps_nothing_of_a_call_once_it_has_answered(path: str) -> None:
    """The body, its arguments and the context of a call a worker ran are freed when the call
    is answered, not when that worker takes its next job (here: never)."""

    class Ctx:
        run_id = "r"

    def make() -> tuple[Any, Any, dict]:
        ctx = Ctx()

        @tool(read_only=True)
        def hold(x: int) -> int:
            """Return the integer x, from a body whose closure holds a marker object."""
            return x if ctx else -x

        reg = ToolRegistry([hold])
        call = {"id": "1", "name": "hold", "input": {"x": 7}}
        env = dispatch(call, reg, ctx=ctx) if path == "dispatch" else asyncio.run(Invoker(reg).invoke(call, ctx))
        return weakref.ref(ctx), weakref.ref(hold), env

    ctx, hold, env = make()
    gc.collect()
    assert (env["ok"], env["value"], ctx(), hold()) == (True, 7, None, None)


@pytest.mark.parametrize("path", ["invoke", "invoke_many"])
def test_a_worker_keeps_nothing_of_a_callers_loop_once_it_has_answered(path: str) -> None:
    """The event loop of a call a worker ran (the loop's future for its outcome, the loop's
    ``call_soon_threadsafe``) is freed once the call is answered and the loop closed, not when
    that worker takes its next job (here: never)."""
    from agentkit_tools import _core

    @tool(read_only=True)
    def quick(x: int) -> int:
        """Return the integer x at once, from a worker thread of the pool."""
        return x

    inv = Invoker(ToolRegistry([quick]))
    refs = []
    for i in range(4):
        loop = asyncio.new_event_loop()
        calls = [{"id": f"{i}.{j}", "name": "quick", "input": {"x": i}} for j in range(2)]
        envs = loop.run_until_complete(inv.invoke(calls[0]) if path == "invoke" else inv.invoke_many(calls))
        loop.close()
        refs.append(weakref.ref(loop))
        del loop, envs
    alive = []
    for _ in range(100):  # the worker lets go right after answering: allow it a moment
        _core.idempotency_store_key("r", "quick", "{}")  # (a call into the core frees what a worker let go)
        gc.collect()
        alive = [i for i, ref in enumerate(refs) if ref() is not None]
        if not alive:
            break
        time.sleep(0.05)
    assert alive == []


def test_contextvars_reach_the_worker_on_both_paths() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    @tool(read_only=True)
    def read_var(n: int) -> str:
        """Return the context variable's value and n."""
        return f"{var.get()}-{n}"

    reg = ToolRegistry([read_var])
    var.set("dispatch")
    assert [dispatch({"id": "c", "name": "read_var", "input": {"n": n}}, reg)["value"] for n in range(50)] == [
        f"dispatch-{n}" for n in range(50)
    ]

    async def main() -> list:
        var.set("invoke")
        inv = Invoker(reg)
        one = [(await inv.invoke({"id": "c", "name": "read_var", "input": {"n": n}}))["value"] for n in range(50)]
        many = await asyncio.gather(*(inv.invoke({"id": "c", "name": "read_var", "input": {"n": n}}) for n in range(50, 60)))
        return one + [e["value"] for e in many]

    assert asyncio.run(main()) == [f"invoke-{n}" for n in range(60)]


EXIT_SCRIPT = r"""
import asyncio, random, sys, threading, time
from agentkit_tools import Invoker, ToolRegistry, dispatch, tool
from agentkit_tools._runner import _await_worker, run_sync_in_worker
from agentkit_tools.errors import ToolTimeoutError

@tool(read_only=True)
def work(n: int, sleep_ms: float) -> int:
    '''Sleep sleep_ms milliseconds (0: none), then return the number n.'''
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    return n

def body(n, sleep_s):
    if sleep_s:
        time.sleep(sleep_s)
    return n

def waiting(sleep_s, limit):  # a synchronous caller (what dispatch does)
    i = 0
    while True:
        try:
            assert run_sync_in_worker(body, i, sleep_s, limit, "body") == i
        except ToolTimeoutError:
            pass
        i += 1

def awaiting(sleep_s, limit):  # a caller on an event loop (what Invoker.invoke does)
    async def main():
        i = 0
        while True:
            try:
                assert await _await_worker(None, body, i, sleep_s, limit, "body") == i
            except ToolTimeoutError:
                pass
            i += 1
    asyncio.run(main())

reg = ToolRegistry([work])
call = {"id": "m", "name": "work", "input": {"n": 1, "sleep_ms": 0}}
assert dispatch(call, reg)["value"] == 1 and asyncio.run(Invoker(reg).invoke(call))["value"] == 1
# Returning at once (workers spin for the next job), sleeping 1 ms (callers spin, then park),
# overrunning the deadline (callers give up; workers finish late, then park).
for target in (waiting, awaiting):
    for sleep_s, limit in ((0, None), (0, 5.0), (0.001, 5.0), (0.2, 0.03)):
        threading.Thread(target=target, args=(sleep_s, limit), daemon=True).start()
time.sleep(random.uniform(0.0, 0.08))
for n in range(3):  # the main thread's own calls: a worker is spinning for the next one at exit
    call = {"id": "m", "name": "work", "input": {"n": n, "sleep_ms": 0}}
    assert dispatch(call, reg)["value"] == n
print("exit", flush=True)
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_process_exits_cleanly_whatever_its_workers_and_callers_are_doing(python, tmp_path) -> None:
    """Daemon threads keep handing sync bodies to the pool, as ``dispatch`` and ``Invoker`` do
    (bodies that return at once, sleep 1 ms, or overrun their deadline), while the main thread
    exits: at that moment workers are spinning, parked or mid-body and callers are spinning,
    parked or about to re-take the interpreter lock. Every run must exit with status 0 and
    nothing on stderr."""
    results = run_many(python, EXIT_SCRIPT, tmp_path, EXIT_RUNS, parallel=6)
    failures = [r for r in results if r != (0, "exit\n", "")]
    assert not failures, f"{len(failures)} of {EXIT_RUNS} runs did not exit cleanly; first: {failures[0]}"


_FORK_SCRIPT = """
import os, sys
from agentkit_tools import ToolRegistry, dispatch, tool
from agentkit_tools._runner import pool_sizes

@tool(read_only=True)
def double(n: int) -> int:
    '''Return twice n, computed on a worker thread.'''
    return 2 * n

reg = ToolRegistry([double])
assert dispatch({"id": "p", "name": "double", "input": {"n": 1}}, reg)["value"] == 2
parent_threads = pool_sizes()[0]
pid = os.fork()
if pid == 0:
    # the child inherits none of the parent's worker threads: it starts its own
    before = pool_sizes()
    env = dispatch({"id": "c", "name": "double", "input": {"n": 21}}, reg)
    print("child", before, env["value"], pool_sizes()[0], flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
env = dispatch({"id": "p2", "name": "double", "input": {"n": 2}}, reg)
print("parent", os.waitstatus_to_exitcode(status), parent_threads, env["value"], pool_sizes()[0], flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_runs_sync_bodies_on_a_pool_of_its_own() -> None:
    """The pool is replaced in a forked child at the fork (``os.register_at_fork``), not by a
    process-id check on every call: the child's first call finds an empty pool, starts a worker
    and gets its result; the parent's pool is untouched."""
    out = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.split("\n")[:2])
    assert lines == ["child (0, 0, 0) 42 1", "parent 0 1 4 1"], out
