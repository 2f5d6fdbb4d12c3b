"""Faults on the call path: bodies that raise what they should not, bodies that ignore their
deadline or their cancellation, stuck and queued sync bodies, a Redis-backed memory tool under
``dispatch``, and a timed-out sync tool at process exit.

Rules pinned here (the same through ``Invoker.invoke``, ``invoke_many`` and ``dispatch``):
``KeyboardInterrupt`` and ``SystemExit`` propagate, and so does the cancellation of the caller's
own task; every other exception of a body — a ``CancelledError`` it raised itself, any other
``BaseException`` — is an envelope. At its deadline the caller gets ``timeout`` at once (not after
the body's clean-up), a body that outlived its deadline is never reported as a success, a queued
sync call whose deadline passed never starts, and stuck sync bodies cannot starve later calls.

Bounds on time are generous hang guards (seconds), never speed assertions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentkit_tools import FileTool, Invoker, StoreFiles, ToolRegistry, dispatch, middleware as mw, tool

from memory_fixtures import NO_REDIS, REDIS_URL

ROOT = Path(__file__).resolve().parent.parent


class Halt(BaseException):
    """A custom BaseException subclass a tool body may raise (not a request to stop)."""


def internal_error(name: str, what: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": f"{name} failed: {what}. This is a bug in the tool, not in your arguments; do not retry.",
        },
    }


def timeout_envelope(name: str, limit: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": {
            "code": "timeout",
            "message": f"{name} did not finish within {limit}s. Do not retry immediately; tell the user the backend is slow.",
        },
    }


def ok_body(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    assert isinstance(out.pop("elapsed_ms"), float), env
    return out


@tool(read_only=True)
async def cancels_itself(x: int) -> int:
    """Raise a cancellation from inside the body, though nobody cancelled the caller."""
    await asyncio.sleep(0)
    raise asyncio.CancelledError()


@tool(read_only=True)
def cancels_itself_sync(x: int) -> int:
    """Raise a cancellation from a sync body running on a worker thread."""
    raise asyncio.CancelledError()


@tool(read_only=True)
async def halts(x: int) -> int:
    """Raise a custom BaseException subclass from an async body."""
    raise Halt("stop here")


@tool(read_only=True)
def halts_sync(x: int) -> int:
    """Raise a custom BaseException subclass from a sync body."""
    raise Halt("stop here")


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers and return their sum to the caller."""
    return a + b


@tool(read_only=True)
async def add_async(a: int, b: int) -> int:
    """Add two integers asynchronously and return their sum."""
    await asyncio.sleep(0.05)
    return a + b


FAULTY = ToolRegistry([cancels_itself, cancels_itself_sync, halts, halts_sync, add, add_async])
BASE_FAULTS = [
    ("cancels_itself", internal_error("cancels_itself", "CancelledError")),
    ("cancels_itself_sync", internal_error("cancels_itself_sync", "CancelledError")),
    ("halts", internal_error("halts", "Halt: stop here")),
    ("halts_sync", internal_error("halts_sync", "Halt: stop here")),
]


@pytest.mark.parametrize("name,expected", BASE_FAULTS, ids=[n for n, _ in BASE_FAULTS])
async def test_invoke_turns_base_exceptions_of_the_body_into_envelopes(name, expected):
    for middleware in (None, []):
        env = await asyncio.wait_for(Invoker(FAULTY, middleware=middleware).invoke({"id": "x", "name": name, "input": {"x": 1}}), 30)
        assert env == expected, middleware
    # the task that awaited the Invoker was not cancelled
    assert not asyncio.current_task().cancelled()  # type: ignore[union-attr]
    if sys.version_info >= (3, 11):
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("name,expected", BASE_FAULTS, ids=[n for n, _ in BASE_FAULTS])
def test_dispatch_turns_base_exceptions_of_the_body_into_envelopes(name, expected):
    assert dispatch({"id": "x", "name": name, "input": {"x": 1}}, FAULTY) == expected


async def test_invoke_many_answers_every_call_of_the_turn():
    calls = [{"id": "a", "name": "add", "input": {"a": 1, "b": 2}}]
    calls += [{"id": f"f{i}", "name": name, "input": {"x": i}} for i, (name, _) in enumerate(BASE_FAULTS)]
    calls += [{"id": "b", "name": "add_async", "input": {"a": 3, "b": 4}}]
    envs = await asyncio.wait_for(Invoker(FAULTY).invoke_many(calls), 30)
    assert len(envs) == 6
    assert ok_body(envs[0]) == {"ok": True, "value": 3}
    assert envs[1:5] == [expected for _, expected in BASE_FAULTS]
    assert ok_body(envs[5]) == {"ok": True, "value": 7}


STOP_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from agentkit_tools import Invoker, ToolRegistry, dispatch, tool

    KIND, PATH, BODY = sys.argv[1:4]
    EXC = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[KIND]

    @tool(read_only=True)
    async def stop_async(x: int) -> int:
        \"\"\"Raise a request to stop the process from an async body.\"\"\"
        raise EXC()

    @tool(read_only=True)
    def stop_sync(x: int) -> int:
        \"\"\"Raise a request to stop the process from a sync body.\"\"\"
        raise EXC()

    reg = ToolRegistry([stop_async, stop_sync])
    call = {"id": "x", "name": "stop_" + BODY, "input": {"x": 1}}
    try:
        if PATH == "dispatch":
            out = dispatch(call, reg)
        elif PATH == "invoke":
            out = asyncio.run(Invoker(reg).invoke(call))
        else:
            out = asyncio.run(Invoker(reg).invoke_many([call, {"id": "y", "name": "stop_" + BODY, "input": {"x": 2}}]))
    except BaseException as exc:
        print("propagated", type(exc).__name__, flush=True)
    else:
        print("returned", out, flush=True)
    """
)


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("path", ["dispatch", "invoke", "invoke_many"])
@pytest.mark.parametrize("body", ["async", "sync"])
def test_requests_to_stop_propagate(tmp_path, kind, path, body):
    script = tmp_path / "stop.py"
    script.write_text(STOP_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), kind, path, body], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.stdout == f"propagated {kind}\n", (proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------ the caller's cancellation


@tool(read_only=True, timeout_s=30)
async def slow_async(x: int) -> int:
    """Wait a long time, then answer (for cancellation tests)."""
    await asyncio.sleep(20)
    return x


RELEASE = threading.Event()


@tool(read_only=True, timeout_s=30)
def slow_sync(x: int) -> int:
    """Block a worker thread until the test releases it."""
    RELEASE.wait(20)
    return x


@pytest.mark.parametrize("name", ["slow_async", "slow_sync"])
async def test_the_callers_cancellation_propagates(name):
    inv = Invoker(ToolRegistry([slow_async, slow_sync]))
    try:
        for entry in ("invoke", "invoke_many"):
            call = {"id": "x", "name": name, "input": {"x": 1}}
            coro = inv.invoke(call) if entry == "invoke" else inv.invoke_many([call, dict(call, id="y", input={"x": 2})])
            task = asyncio.ensure_future(coro)
            await asyncio.sleep(0.2)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            assert task.cancelled(), entry
    finally:
        RELEASE.set()
        await asyncio.sleep(0.05)
        RELEASE.clear()


async def test_wait_for_around_invoke_still_times_out():
    """A host's own ``asyncio.wait_for`` around ``invoke`` is the caller's cancellation."""
    inv = Invoker(ToolRegistry([slow_async]))
    started = time.monotonic()
    with pytest.raises((asyncio.TimeoutError, TimeoutError)):
        await asyncio.wait_for(inv.invoke({"id": "x", "name": "slow_async", "input": {"x": 1}}), 0.3)
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------ deadlines the body ignores


def make_swallower(cleanup_s: float, then: str):
    """An async tool (timeout 0.3 s) that swallows its cancellation, then either waits
    ``cleanup_s`` and returns ("return"), or keeps waiting in a ``finally`` ("finally")."""
    log: list[str] = []
    gate = asyncio.Event()

    @tool(read_only=True, timeout_s=0.3)
    async def stubborn(x: int) -> str:
        """Wait for work that ignores its cancellation, then answer."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("cancelled")
            if then == "return":
                try:
                    await asyncio.wait_for(gate.wait(), cleanup_s)
                except BaseException:
                    pass
                log.append("returned")
                return "late value"
            raise
        finally:
            if then == "finally":
                try:
                    await asyncio.wait_for(gate.wait(), cleanup_s)
                except BaseException:
                    pass
                log.append("cleaned up")
        return "on time"

    return stubborn, log, gate


@pytest.mark.parametrize("then", ["return", "finally"])
@pytest.mark.parametrize("middleware", ["default", "timeout-only"])
async def test_timeout_answers_at_the_deadline_not_after_the_clean_up(then, middleware):
    stubborn, log, gate = make_swallower(4.0, then)
    inv = Invoker(ToolRegistry([stubborn]), middleware=None if middleware == "default" else [mw.timeout()])
    started = time.monotonic()
    env = await asyncio.wait_for(inv.invoke({"id": "x", "name": "stubborn", "input": {"x": 1}}), 10)
    took = time.monotonic() - started
    assert env == timeout_envelope("stubborn", "0.3")
    assert took < 2.5, took  # not the 4 s of clean-up
    # the clean-up goes on without the caller, and finishes
    gate.set()
    for _ in range(100):
        if len(log) == 2:
            break
        await asyncio.sleep(0.02)
    assert log == ["cancelled", "returned" if then == "return" else "cleaned up"]


@pytest.mark.parametrize("middleware", ["default", "timeout-only"])
async def test_a_swallowed_cancellation_is_never_a_success(middleware):
    """The body swallows the cancellation and returns at once: it outlived its deadline, so the
    caller is told ``timeout``, never ``ok`` with the late value."""
    stubborn, log, gate = make_swallower(0.0, "return")
    inv = Invoker(ToolRegistry([stubborn]), middleware=None if middleware == "default" else [mw.timeout()])
    for i in range(3):
        log.clear()
        env = await asyncio.wait_for(
            inv.invoke({"id": f"x{i}", "name": "stubborn", "input": {"x": i}}), 10
        )
        assert env == timeout_envelope("stubborn", "0.3"), env
        for _ in range(100):  # the body ends on its own, after the caller was answered
            if len(log) == 2:
                break
            await asyncio.sleep(0.02)
        assert log == ["cancelled", "returned"]


@pytest.mark.parametrize("body", ["sync", "async"])
@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
async def test_an_outcome_the_loop_takes_past_the_deadline_is_a_timeout(body, entry):
    """The body returns well within its deadline, but the caller's loop is blocked until after
    it: the outcome is taken past the deadline, before the deadline's timer ran. Nothing past
    the deadline is a success, on the worker pool as for an ``async`` body."""
    if body == "sync":

        @tool(read_only=True, timeout_s=0.6)
        def slowish(q: str) -> str:
            """Return q after 50 ms (a test tool that is briefly slow)."""
            time.sleep(0.05)
            return q

    else:

        @tool(read_only=True, timeout_s=0.6)
        async def slowish(q: str) -> str:
            """Return q after 50 ms (a test tool that is briefly slow)."""
            await asyncio.sleep(0.05)
            return q

    loop = asyncio.get_running_loop()

    def block_past_the_deadline() -> None:
        time.sleep(0.4)  # the body returns meanwhile; its outcome is queued on this loop
        loop.call_soon(time.sleep, 0.8)  # then the loop is blocked past the deadline

    inv = Invoker(ToolRegistry([slowish]))
    calls = [{"id": f"c{i}", "name": "slowish", "input": {"q": "v"}} for i in range(2 if entry == "invoke_many" else 1)]
    loop.call_later(0.01, block_past_the_deadline)
    if entry == "invoke":
        envs = [await inv.invoke(calls[0])]
    else:
        envs = await inv.invoke_many(calls)
    assert envs == [timeout_envelope("slowish", "0.6")] * len(calls)


NOT_FOUND = {"ok": False, "error": {"code": "not_found", "message": "no such page", "retriable": False}}


@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
async def test_an_error_the_loop_takes_past_the_deadline_stands(entry):
    """The sync body raises well within its deadline, but the caller's loop is blocked until
    after it: what the body raised is its own answer and stands, as for an ``async`` body or a
    ``non_blocking`` one (only a value is never taken past the deadline)."""
    from agentkit_tools import ToolError

    @tool(read_only=True, timeout_s=0.6)
    def fails(q: str) -> str:
        """Raise not_found after 50 ms (a test tool that is briefly slow)."""
        time.sleep(0.05)
        raise ToolError("no such page", code="not_found")

    loop = asyncio.get_running_loop()

    def block_past_the_deadline() -> None:
        time.sleep(0.4)  # the body raises meanwhile; its outcome is queued on this loop
        loop.call_soon(time.sleep, 0.8)  # then the loop is blocked past the deadline

    inv = Invoker(ToolRegistry([fails]))
    calls = [{"id": f"c{i}", "name": "fails", "input": {"q": "v"}} for i in range(2 if entry == "invoke_many" else 1)]
    started = time.monotonic()
    loop.call_later(0.01, block_past_the_deadline)
    if entry == "invoke":
        envs = [await inv.invoke(calls[0])]
    else:
        envs = await inv.invoke_many(calls)
    assert time.monotonic() - started > 0.6  # taken past the deadline
    assert envs == [NOT_FOUND] * len(calls)


async def test_an_outcome_taken_at_once_past_the_deadline_follows_the_same_rule():
    """A sync body on the worker pool whose outcome the caller takes at once, without awaiting
    it on its loop, once the deadline has passed: a value is a timeout, what the body raised
    stands, the rule of an outcome the loop takes late (above). The body holds the interpreter
    lock past the deadline (a busy loop, the switch interval 1 s), so the caller, waiting a
    moment for a short body, finds the outcome there when it has the lock back. Rounds that did
    not go through that wait (a worker not yet awake) show nothing and are run again. On a machine
    whose other processes keep the worker thread from being scheduled within that brief wait
    (measured: none of 20 rounds with twelve busy processes on two cores), the case is not reached
    at all; the test then says so and which kind it did check, rather than fail on the load."""
    from agentkit_tools import ToolContext, ToolError, _runner

    @tool(read_only=True, timeout_s=0.05)
    def busy(fail: bool) -> str:
        """Hold the interpreter for 150 ms, then answer or raise not_found (a deadline test)."""
        end = time.monotonic() + 0.15
        while time.monotonic() < end:
            pass
        if fail:
            raise ToolError("no such page", code="not_found")
        return "v"

    inv = Invoker(ToolRegistry([busy]))
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    late = {True: 0, False: 0}
    try:
        for i in range(100):
            if late[True] and late[False]:
                break
            fail = i % 2 == 0
            at_once = _runner._POOL.starts()[0]
            env = await inv.invoke({"id": "1", "name": "busy", "input": {"fail": fail}}, ToolContext(run_id=f"r{i}"))
            if _runner._POOL.starts()[0] == at_once:
                continue
            late[fail] += 1
            assert env == (NOT_FOUND if fail else timeout_envelope("busy", "0.05")), i
    finally:
        sys.setswitchinterval(switch)
    if not (late[True] and late[False]):
        pytest.skip(
            f"in 100 rounds the worker pool answered at once {late[True]} time(s) with an error and "
            f"{late[False]} with a value (each checked exactly): other processes kept its worker "
            "from starting within the caller's brief wait, so a kind was not reached"
        )


def test_dispatch_timeout_does_not_wait_for_the_clean_up():
    stubborn, log, gate = make_swallower(4.0, "finally")
    started = time.monotonic()
    env = dispatch({"id": "x", "name": "stubborn", "input": {"x": 1}}, ToolRegistry([stubborn]))
    took = time.monotonic() - started
    assert env == timeout_envelope("stubborn", "0.3")
    assert took < 2.5, took


def test_dispatch_swallowed_cancellation_is_never_a_success():
    stubborn, log, gate = make_swallower(0.0, "return")
    env = dispatch({"id": "x", "name": "stubborn", "input": {"x": 1}}, ToolRegistry([stubborn]))
    assert env == timeout_envelope("stubborn", "0.3")


FOREVER_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from agentkit_tools import Invoker, ToolRegistry, dispatch, middleware as mw, tool

    @tool(read_only=True, timeout_s=0.3)
    async def deaf(x: int) -> str:
        \"\"\"Swallow every cancellation and never finish.\"\"\"
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass

    reg = ToolRegistry([deaf])
    call = {"id": "x", "name": "deaf", "input": {"x": 1}}
    started = time.monotonic()
    if sys.argv[1] == "dispatch":
        env = dispatch(call, reg)
        print(json.dumps({"env": env, "took": time.monotonic() - started}), flush=True)
        os._exit(0)

    async def main():
        env = await Invoker(reg, middleware=None if sys.argv[1] == "invoke" else [mw.timeout()]).invoke(call)
        print(json.dumps({"env": env, "took": time.monotonic() - started}), flush=True)
        os._exit(0)  # the body never ends: do not let asyncio.run wait for it at shutdown

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("path", ["invoke", "timeout-only", "dispatch"])
def test_a_body_that_never_accepts_its_cancellation_still_times_out(tmp_path, path):
    script = tmp_path / "deaf.py"
    script.write_text(FOREVER_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), path], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["env"] == timeout_envelope("deaf", "0.3")
    assert out["took"] < 3.0, out


# ------------------------------------------------------------------ stuck and queued sync bodies

STUCK_RELEASE = threading.Event()


@tool(read_only=True, timeout_s=0.2)
def stuck(i: int) -> int:
    """Block far past the deadline (released by the test at its end)."""
    STUCK_RELEASE.wait(60)
    return i


@tool(read_only=True, timeout_s=5)
def lookup(sku: str) -> str:
    """Look up a SKU in the catalogue and return its name."""
    return f"name of {sku}"


@pytest.fixture
def release_stuck():
    STUCK_RELEASE.clear()
    yield
    STUCK_RELEASE.set()
    time.sleep(0.2)  # let the released threads go back to their pool


async def test_stuck_sync_bodies_do_not_starve_the_invoker(release_stuck):
    inv = Invoker(ToolRegistry([stuck, lookup]))
    envs = await asyncio.wait_for(
        inv.invoke_many([{"id": f"s{i}", "name": "stuck", "input": {"i": i}} for i in range(40)]), 30
    )
    assert {e["error"]["code"] for e in envs} <= {"timeout", "backend_saturated"}, envs
    assert sum(e["error"]["code"] == "timeout" for e in envs) >= 32
    for i in range(3):
        env = await asyncio.wait_for(inv.invoke({"id": f"l{i}", "name": "lookup", "input": {"sku": f"SKU-{i}"}}), 10)
        assert ok_body(env) == {"ok": True, "value": f"name of SKU-{i}"}


def test_stuck_sync_bodies_do_not_starve_dispatch(release_stuck):
    reg = ToolRegistry([stuck, lookup])
    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as callers:
        envs = list(callers.map(lambda i: dispatch({"id": f"s{i}", "name": "stuck", "input": {"i": i}}, reg), range(40)))
    assert {e["error"]["code"] for e in envs} <= {"timeout", "backend_saturated"}, envs
    assert sum(e["error"]["code"] == "timeout" for e in envs) >= 32
    for i in range(3):
        env = dispatch({"id": f"l{i}", "name": "lookup", "input": {"sku": f"SKU-{i}"}}, reg)
        assert ok_body(env) == {"ok": True, "value": f"name of SKU-{i}"}


# More blockers than any worker pool of the project may have: the victim call has to queue.
BLOCKERS = 300


def queue_tools():
    gate = threading.Event()
    started: list[int] = []
    victim_runs: list[int] = []

    @tool(read_only=True, timeout_s=30)
    def blocker(i: int) -> int:
        """Hold a worker thread, within its deadline, until the test opens the gate."""
        started.append(i)
        gate.wait(20)
        return i

    @tool(side_effecting=True, timeout_s=0.3)
    def send_invoice(order_id: str) -> str:
        """Send the invoice of an order to the customer by e-mail (a side effect)."""
        victim_runs.append(1)
        return f"invoice of {order_id} sent"

    return ToolRegistry([blocker, send_invoice]), gate, started, victim_runs


async def until_steady(started: list[int]) -> None:
    """Wait until the blockers that got a worker have all started (the count stops growing)."""
    seen, steady_since = -1, time.monotonic()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if len(started) != seen:
            seen, steady_since = len(started), time.monotonic()
        elif seen > 0 and time.monotonic() - steady_since > 0.4:
            return
        await asyncio.sleep(0.02)


async def test_a_queued_call_past_its_deadline_never_starts_invoker():
    reg, gate, started, victim_runs = queue_tools()
    inv = Invoker(reg)
    try:
        blockers = asyncio.ensure_future(
            inv.invoke_many([{"id": f"b{i}", "name": "blocker", "input": {"i": i}} for i in range(BLOCKERS)])
        )
        await until_steady(started)
        assert len(started) < BLOCKERS, "no pool limit at all: nothing queued"
        env = await asyncio.wait_for(inv.invoke({"id": "v", "name": "send_invoice", "input": {"order_id": "A-7"}}), 10)
        assert env["ok"] is False and env["error"]["code"] in ("timeout", "backend_saturated"), env
    finally:
        gate.set()
    envs = await asyncio.wait_for(blockers, 60)
    assert [e["ok"] for e in envs] == [True] * BLOCKERS
    await asyncio.sleep(0.5)
    assert victim_runs == []  # told "timeout": it must not run later behind the model's back


def test_a_queued_call_past_its_deadline_never_starts_dispatch():
    reg, gate, started, victim_runs = queue_tools()
    with concurrent.futures.ThreadPoolExecutor(max_workers=BLOCKERS + 1) as callers:
        try:
            blockers = [
                callers.submit(dispatch, {"id": f"b{i}", "name": "blocker", "input": {"i": i}}, reg) for i in range(BLOCKERS)
            ]
            asyncio.run(until_steady(started))
            assert len(started) < BLOCKERS, "no pool limit at all: nothing queued"
            env = dispatch({"id": "v", "name": "send_invoice", "input": {"order_id": "A-7"}}, reg)
            assert env["ok"] is False and env["error"]["code"] in ("timeout", "backend_saturated"), env
        finally:
            gate.set()
        envs = [f.result(timeout=60) for f in blockers]
    assert [e["ok"] for e in envs] == [True] * BLOCKERS
    time.sleep(0.5)
    assert victim_runs == []


# ------------------------------------------------------------------ Redis memory under dispatch


@pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS)
def test_redis_memory_through_dispatch_every_call_works():
    import redis

    from agentkit_tools import RedisStore

    namespace = f"disp-{uuid.uuid4().hex}"
    reg = ToolRegistry([FileTool(StoreFiles(RedisStore(REDIS_URL, namespace=namespace), namespace="n"))])
    path = "/memories/todo.md"
    steps = [
        {"command": "create", "path": path, "file_text": "milk\n"},
        {"command": "str_replace", "path": path, "old_str": "milk", "new_str": "oat milk"},
        {"command": "insert", "path": path, "insert_line": 1, "insert_text": "bread"},
        {"command": "view", "path": "/memories"},
        {"command": "rename", "old_path": path, "new_path": "/memories/shopping.md"},
        {"command": "view", "path": "/memories"},
        {"command": "delete", "path": "/memories/shopping.md"},
    ]
    try:
        envs = [dispatch({"id": f"d{i}", "name": "memory", "input": args}, reg) for i, args in enumerate(steps)]
        assert [e["ok"] for e in envs] == [True] * len(steps), [e.get("error") for e in envs]
        assert "todo.md" in envs[3]["value"] and "shopping.md" in envs[5]["value"]
        for i in range(5):  # five views in a row, each on a fresh call
            env = dispatch({"id": f"v{i}", "name": "memory", "input": {"command": "view", "path": "/memories"}}, reg)
            assert env["ok"] is True, env
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        keys = client.keys(f"{namespace}:*")
        if keys:
            client.delete(*keys)
        client.close()


# ------------------------------------------------------------------ exit after a timed-out sync body

SLEEPY_MODULE = textwrap.dedent(
    """
    import time
    from agentkit_tools import tool

    @tool(read_only=True, timeout_s=0.5)
    def sleepy(seconds: float) -> str:
        \"\"\"Sleep for the given number of seconds, then say so.\"\"\"
        time.sleep(seconds)
        return "woke up"
    """
)


def test_cli_call_exits_promptly_after_a_timeout(tmp_path):
    (tmp_path / "sleepy_tools.py").write_text(SLEEPY_MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "agentkit_tools", "call", "sleepy_tools:sleepy", '{"seconds": 8}'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout) == timeout_envelope("sleepy", "0.5")
    assert took < 5.0, took


EXIT_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from sleepy_tools import sleepy
    from agentkit_tools import Invoker, ToolRegistry, dispatch

    call = {"id": "x", "name": "sleepy", "input": {"seconds": 8}}
    reg = ToolRegistry([sleepy])
    env = dispatch(call, reg) if sys.argv[1] == "dispatch" else asyncio.run(Invoker(reg).invoke(call))
    print(json.dumps(env), flush=True)
    """
)


@pytest.mark.parametrize("path", ["dispatch", "invoke"])
def test_a_script_exits_promptly_after_a_timeout(tmp_path, path):
    (tmp_path / "sleepy_tools.py").write_text(SLEEPY_MODULE)
    (tmp_path / "main.py").write_text(EXIT_SCRIPT)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "main.py", path], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == timeout_envelope("sleepy", "0.5")
    assert took < 5.0, took


# ------------------------------------------------------------------ bounded Invoker state

STATE_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from agentkit_tools import Invoker, ToolContext, ToolRegistry, tool

    @tool(side_effecting=True, non_blocking=True)
    def note(text: str) -> str:
        \"\"\"Append a short note to the log (a side effect).\"\"\"
        return text

    def rss_kb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])

    async def main(n):
        inv = Invoker(ToolRegistry([note]))
        out = []
        async def batch(start, count, fresh_runs):
            for i in range(start, start + count):
                ctx = ToolContext(run_id=f"run-{i}") if fresh_runs else None
                await inv.invoke({"id": f"c{i}", "name": "note", "input": {"text": f"n{i}"}}, ctx)
        for fresh in (True, False):
            await batch(0, n // 5, fresh)
            before = rss_kb()
            await batch(n // 5, n, fresh)
            out.append(rss_kb() - before)
        print(json.dumps(out))

    asyncio.run(main(int(sys.argv[1])))
    """
)


def test_invoker_state_stays_bounded(tmp_path):
    """Fresh run ids (no ``forget``) and many distinct calls in one conversation: the Invoker's
    repeat and idempotency state is bounded, so memory stays flat."""
    script = tmp_path / "state.py"
    script.write_text(STATE_SCRIPT)
    n = int(os.environ.get("AGENTKIT_STATE_CALLS", "50000"))
    proc = subprocess.run([sys.executable, str(script), str(n)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fresh_runs_kb, one_run_kb = json.loads(proc.stdout)
    # unbounded state costs well over 100 bytes per call: about 30 MB per 40,000 calls on an unbounded Invoker
    assert fresh_runs_kb < 6000, (fresh_runs_kb, one_run_kb)
    assert one_run_kb < 6000, (fresh_runs_kb, one_run_kb)


# ------------------------------------------------------------------ the MCP server


async def test_mcp_server_answers_base_exceptions_and_timeouts_as_tool_errors():
    """Over MCP the same faults are results with ``isError: true`` carrying the envelope's
    message, never a protocol error, and the session stays usable."""
    from mcp import Client

    from agentkit_tools.mcp_server import build_server

    stubborn, log, gate = make_swallower(4.0, "finally")
    reg = ToolRegistry([cancels_itself, halts, halts_sync, add, stubborn])
    async with Client(build_server(reg)) as client:
        for name, expected in [(n, e) for n, e in BASE_FAULTS if n != "cancels_itself_sync"]:
            result = await asyncio.wait_for(client.call_tool(name, {"x": 1}), 30)
            assert result.is_error is True, name
            assert [c.text for c in result.content] == [expected["error"]["message"]]
        started = time.monotonic()
        result = await asyncio.wait_for(client.call_tool("stubborn", {"x": 1}), 30)
        assert time.monotonic() - started < 2.5
        assert result.is_error is True
        assert [c.text for c in result.content] == [timeout_envelope("stubborn", "0.3")["error"]["message"]]
        ok = await client.call_tool("add", {"a": 2, "b": 3})
        assert ok.is_error is False and [c.text for c in ok.content] == ["5"]
    gate.set()


async def test_at_the_cap_of_stuck_threads_the_model_is_told_the_backend_is_saturated(release_stuck):
    """Batches of sync calls that never return, each after the previous one timed out: up to a
    documented cap the calls answer ``timeout``; from then on a sync call (of any tool) is not
    run and answers ``backend_saturated`` (not retriable) instead of timing out; async tools
    still work, and once the stuck bodies return, sync calls work again."""

    @tool(read_only=True)
    async def ping(i: int) -> int:
        """Answer at once, asynchronously."""
        return i

    inv = Invoker(ToolRegistry([stuck, lookup, ping]))
    codes: list[str] = []
    for batch in range(64):
        envs = await asyncio.wait_for(
            inv.invoke_many([{"id": f"s{batch}-{i}", "name": "stuck", "input": {"i": batch * 100 + i}} for i in range(32)]), 30
        )
        codes += [e["error"]["code"] for e in envs]
        if "backend_saturated" in codes:
            break
    assert "backend_saturated" in codes, f"no cap after {len(codes)} stuck calls"
    first = codes.index("backend_saturated")
    assert set(codes[:first]) == {"timeout"} and set(codes[first:]) == {"backend_saturated"}
    refused = await inv.invoke({"id": "l", "name": "lookup", "input": {"sku": "SKU-1"}})
    assert refused["ok"] is False and refused["error"]["code"] == "backend_saturated"
    assert refused["error"]["retriable"] is False
    assert "lookup" in refused["error"]["message"] and "not run" in refused["error"]["message"]
    # the count the model reads is the threads actually held (it said MAX_STUCK, 256, while
    # MAX_WORKERS + MAX_STUCK threads were held)
    from agentkit_tools._runner import MAX_STUCK, MAX_WORKERS, pool_sizes

    threads, _, held = pool_sizes()
    assert held == threads >= MAX_WORKERS + MAX_STUCK
    assert f"all {held} worker threads are held" in refused["error"]["message"]
    same = dispatch({"id": "d", "name": "lookup", "input": {"sku": "SKU-1"}}, ToolRegistry([lookup]))
    assert same["ok"] is False and same["error"]["code"] == "backend_saturated"
    assert ok_body(await inv.invoke({"id": "p", "name": "ping", "input": {"i": 7}})) == {"ok": True, "value": 7}
    STUCK_RELEASE.set()
    for n in range(100):  # distinct calls, so the repeat guard stays out of it
        env = await inv.invoke({"id": f"l{n}", "name": "lookup", "input": {"sku": f"SKU-{n}"}})
        if env["ok"]:
            break
        await asyncio.sleep(0.05)
    assert ok_body(env) == {"ok": True, "value": f"name of SKU-{n}"}


def test_dispatch_deadline_holds_when_an_async_body_blocks_its_loop():
    """An async body that blocks (``time.sleep`` in ``async def``, a common mistake) cannot be
    cancelled, but ``dispatch`` is synchronous: its caller still gets ``timeout`` at about the
    deadline, and another async tool dispatched meanwhile from another thread is answered within
    its own deadline (never ``ok`` long after it)."""

    @tool(read_only=True, timeout_s=0.5)
    async def blocks_loop(x: int) -> int:
        """Block the event loop for three seconds (a blocking call inside async def)."""
        time.sleep(3)
        return x

    @tool(read_only=True, timeout_s=1.0)
    async def quick_async(x: int) -> int:
        """Answer at once, asynchronously."""
        return x

    reg = ToolRegistry([blocks_loop, quick_async])
    out: dict[str, Any] = {}

    def blocked() -> None:
        started = time.monotonic()
        out["env"] = dispatch({"id": "b", "name": "blocks_loop", "input": {"x": 1}}, reg)
        out["took"] = time.monotonic() - started

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    other = dispatch({"id": "q", "name": "quick_async", "input": {"x": 2}}, reg)
    other_took = time.monotonic() - started
    thread.join(30)
    assert out["env"] == timeout_envelope("blocks_loop", "0.5")
    assert out["took"] < 2.0, out["took"]
    assert other_took < 2.0, (other_took, other)
    assert other == timeout_envelope("quick_async", "1") or ok_body(other) == {"ok": True, "value": 2}
