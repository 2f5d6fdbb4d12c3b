"""``Invoker.invoke_many`` of a chain of built-in rules runs the turn as one batch: every call
is admitted and started in call order before any body runs, an async body runs as a task of its
own that awaits just the body, the deadlines of those bodies share one timer entry, and any other
call or step goes through the Invoker's driver.

Pinned here, per call of a turn exactly as for the call alone: the envelope (mixed tools, failing
bodies among successes, rejected calls, approvals, a retry), the order of the results, the repeat
guard counting in call order, ``timeout`` at each call's own deadline (never before it, never
waiting for the body's clean-up, never a success past it, the rest of the turn untouched), the
caller's cancellation reaching every body and propagating once they ended, with one audit record
per call.

Bounds on time are generous hang guards (seconds), never speed assertions.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit_tools import FrozenDict, FrozenList, Invoker, ToolContext, ToolRegistry, middleware as mw, tool

from envelopes import call, internal, native_refusal, strip, timeout_env
from exit_runs import interpreters, run_many
from test_async_body import CLEAN_UP_OUTLIVES_ITS_LOOP


class Halt(BaseException):
    """A custom BaseException subclass a tool body may raise (not a request to stop)."""


# ------------------------------------------------------------------ tools


@tool(read_only=True)
async def naps(x: int) -> int:
    """Sleep a moment, then answer with the number doubled."""
    await asyncio.sleep(0.01)
    return 2 * x


@tool(read_only=True)
async def instant(x: int) -> int:
    """Answer with the number plus one at once."""
    return x + 1


@tool(read_only=True)
def worker(x: int) -> int:
    """Answer with the number times ten, from a worker thread."""
    time.sleep(0.005)
    return 10 * x


@tool(read_only=True, non_blocking=True)
def inline(x: int) -> int:
    """Answer with the number negated, on the event loop."""
    return -x


@tool(read_only=True)
async def breaks(x: int) -> int:
    """Fail with a ValueError after a short sleep."""
    await asyncio.sleep(0.005)
    raise ValueError(f"bad {x}")


@tool(read_only=True)
async def cancels_itself(x: int) -> int:
    """Raise a cancellation from inside the body, though nobody cancelled the caller."""
    await asyncio.sleep(0)
    raise asyncio.CancelledError()


@tool(read_only=True)
async def halts(x: int) -> int:
    """Raise a custom BaseException subclass from an async body."""
    raise Halt("stop here")


@tool(read_only=True)
async def exits(x: int) -> int:
    """Raise GeneratorExit from inside a body that suspended (not a coroutine being closed)."""
    await asyncio.sleep(0)
    raise GeneratorExit()


@tool(read_only=True, output_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
async def misshapen(x: int) -> Any:
    """Return something that is not the declared output shape."""
    return "not an object"


@tool(side_effecting=True, requires_approval=True)
async def pay(x: int) -> str:
    """Pay an amount; needs the host's approval."""
    return f"paid {x}"


TOOLS = [naps, instant, worker, inline, breaks, cancels_itself, halts, misshapen, pay, exits]


def mixed_turn() -> list[dict[str, Any]]:
    return [
        call("naps", "a", x=1),
        call("worker", "b", x=2),
        call("breaks", "c", x=3),
        call("instant", "d", x=4),
        call("nope", "e", x=5),
        call("naps", "f", x="six"),
        call("inline", "g", x=7),
        call("cancels_itself", "h", x=8),
        call("pay", "i", x=9),
        {**call("pay", "j", x=10), "approved": True},
        call("halts", "k", x=11),
        call("misshapen", "l", x=12),
        call("naps", "m", x=13),
        call("exits", "n", x=14),
    ]


@pytest.mark.parametrize("chain", ["default", "bare"])
async def test_every_call_of_a_mixed_turn_gets_the_envelope_it_gets_alone(chain: str) -> None:
    middleware = None if chain == "default" else []
    calls = mixed_turn()
    alone = [strip(await Invoker(ToolRegistry(TOOLS), middleware=middleware).invoke(c)) for c in calls]
    envs = await asyncio.wait_for(Invoker(ToolRegistry(TOOLS), middleware=middleware).invoke_many(calls), 30)
    assert [strip(e) for e in envs] == alone
    assert [e.get("value") for e in envs] == [2, 20, None, 5, None, None, -7, None, None if chain == "default" else "paid 9",
                                              "paid 10", None, None, 26, None]
    assert alone[2] == internal("breaks", "ValueError: bad 3")
    assert alone[7] == internal("cancels_itself", "CancelledError")
    assert alone[10] == internal("halts", "Halt: stop here")
    assert alone[13] == internal("exits", "GeneratorExit")
    assert [e["error"]["code"] for e in envs if not e["ok"]] == (
        ["internal_error", "unknown_tool", "invalid_arguments", "internal_error", "approval_required", "internal_error",
         "output_mismatch", "internal_error"]
        if chain == "default"
        else ["internal_error", "unknown_tool", "invalid_arguments", "internal_error", "internal_error", "output_mismatch",
              "internal_error"]
    )
    # the task awaiting the turn was not cancelled by the body that cancelled itself
    assert not asyncio.current_task().cancelled()  # type: ignore[union-attr]


async def test_each_body_of_a_turn_gets_its_arguments_frozen_as_alone() -> None:
    """A plain async function gets its list arguments as ``FrozenList``s; a replaced ``fn`` of
    ``(args, ctx)`` gets a ``FrozenDict`` it cannot change, as for the call alone; the audit
    record's hash is of the arguments as given."""
    seen: list[Any] = []
    records: list[dict[str, Any]] = []

    @tool(read_only=True)
    async def plain(items: list[int], n: int = 0) -> int:
        """Sum the items of a list, for a turn's frozen arguments."""
        seen.append(("plain", type(items)))
        await asyncio.sleep(0)
        return sum(items) + n

    @tool(read_only=True)
    async def wrapped(items: list[int]) -> str:
        """Echo the items back; the body below replaces this one."""
        return "original"

    async def replaced(args: Any, ctx: Any) -> str:
        seen.append(("wrapped", type(args), type(args["items"])))
        try:
            args["items"] = []
        except TypeError:
            seen.append("refused")
        await asyncio.sleep(0)
        return "replaced"

    wrapped.fn = replaced  # type: ignore[misc]
    inv = Invoker(ToolRegistry([plain, wrapped]), middleware=[mw.audit(records.append), mw.repeat_guard(), mw.timeout(5)])
    envs = await inv.invoke_many([call("plain", "a", items=[1, 2], n=1), call("wrapped", "b", items=[3])])
    assert [strip(e) for e in envs] == [{"ok": True, "value": 4}, {"ok": True, "value": "replaced"}]
    assert sorted(seen, key=str) == sorted([("plain", FrozenList), ("wrapped", FrozenDict, FrozenList), "refused"], key=str)
    alone = Invoker(ToolRegistry([plain]), middleware=[mw.audit(records.append)])
    await alone.invoke(call("plain", "c", items=[1, 2], n=1))
    in_turn = [r["args_hash"] for r in records[:2] if r["tool"] == "plain"]
    assert in_turn == [records[2]["args_hash"]]


async def test_the_frozen_arguments_of_a_plain_call_are_left_to_reference_counting() -> None:
    """Arguments a flat schema accepts (atoms, lists of atoms) can be in no reference cycle: the
    frozen lists a body gets are not tracked by the cycle collector (as CPython leaves a tuple of
    atoms), in a turn as for the call alone, also inside the ``FrozenDict`` a replaced ``fn`` of
    ``(args, ctx)`` gets (a dict holding a list, tracked as CPython tracks any)."""
    import gc

    seen: list[Any] = []

    @tool(read_only=True)
    async def plain(items: list[int], n: int = 0) -> int:
        """Sum the items of a list, for a turn's frozen arguments."""
        seen.append(("plain", list(items), gc.is_tracked(items)))
        return sum(items) + n

    @tool(read_only=True)
    async def wrapped(items: list[int]) -> str:
        """Echo the items back; the body below replaces this one."""
        return "original"

    async def replaced(args: Any, ctx: Any) -> str:
        seen.append(("wrapped", dict(args), gc.is_tracked(args), gc.is_tracked(args["items"])))
        return "replaced"

    wrapped.fn = replaced  # type: ignore[misc]
    inv = Invoker(ToolRegistry([plain, wrapped]))
    calls = [call("plain", "a", items=[1, 2], n=1), call("wrapped", "b", items=[3])]
    envs = await inv.invoke_many(calls)
    assert [strip(e) for e in envs] == [{"ok": True, "value": 4}, {"ok": True, "value": "replaced"}]
    assert [strip(await inv.invoke(c)) for c in calls] == [strip(e) for e in envs]
    assert seen == [("plain", [1, 2], False), ("wrapped", {"items": [3]}, True, False)] * 2


async def test_the_repeat_guard_counts_the_calls_of_a_turn_in_call_order() -> None:
    runs: list[int] = []

    @tool(read_only=True)
    async def look(day: str) -> str:
        """Look at the events of one day of the calendar."""
        runs.append(1)
        await asyncio.sleep(0.005)
        return day

    inv = Invoker(ToolRegistry([look]))
    envs = await inv.invoke_many([call("look", str(i), day="mon") for i in range(5)] + [call("look", "x", day="tue")])
    assert [strip(e) for e in envs[:2]] == [{"ok": True, "value": "mon"}] * 2
    assert [(e["error"]["code"], e["error"]["count"]) for e in envs[2:5]] == [("repeated_call", 3), ("repeated_call", 4),
                                                                                ("repeated_call", 5)]
    assert strip(envs[5]) == {"ok": True, "value": "tue"}
    assert len(runs) == 3


async def test_a_retry_after_a_turns_body_goes_on_through_the_driver() -> None:
    attempts: dict[int, int] = {}
    slept: list[float] = []
    records: list[dict[str, Any]] = []

    @tool(read_only=True)
    async def flaky(x: int) -> int:
        """Fail with a connection error on the first attempt for odd numbers."""
        attempts[x] = attempts.get(x, 0) + 1
        await asyncio.sleep(0.001)
        if x % 2 and attempts[x] == 1:
            raise ConnectionError("reset")
        return x

    async def sleep(delay: float) -> None:
        slept.append(delay)

    chain = [mw.audit(records.append), mw.retry(sleep=sleep), mw.timeout()]
    envs = await Invoker(ToolRegistry([flaky]), middleware=chain).invoke_many([call("flaky", str(i), x=i) for i in range(4)])
    assert [strip(e) for e in envs] == [{"ok": True, "value": i} for i in range(4)]
    assert attempts == {0: 1, 1: 2, 2: 1, 3: 2}
    assert len(slept) == 2
    assert sorted((r["call_id"], r["outcome"], r["attempts"]) for r in records) == [
        ("0", "ok", 1), ("1", "ok", 2), ("2", "ok", 1), ("3", "ok", 2)]


# ------------------------------------------------------------------ deadlines


async def test_each_call_of_a_turn_times_out_at_its_own_deadline_and_the_rest_finish() -> None:
    loop = asyncio.get_running_loop()
    cut: list[tuple[str, float]] = []
    start = 0.0

    def hanging(name: str, limit: float) -> Any:
        async def body(q: str) -> str:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cut.append((q, loop.time() - start))
                raise
            return "never"

        body.__name__ = name
        body.__doc__ = "Wait on a backend that never answers."
        return tool(body, read_only=True, timeout_s=limit)

    @tool(read_only=True, timeout_s=5)
    async def slow_ok(q: str) -> str:
        """Answer after 0.2 s, within its deadline."""
        await asyncio.sleep(0.2)
        return q

    tools = [hanging("hang_short", 0.05), hanging("hang_mid", 0.1), hanging("hang_long", 0.15), slow_ok, instant]
    inv = Invoker(ToolRegistry(tools))
    calls = [call("hang_long", "1", q="c"), call("slow_ok", "2", q="ok"), call("hang_short", "3", q="a"),
             call("instant", "4", x=1), call("hang_mid", "5", q="b")]
    start = loop.time()
    envs = await asyncio.wait_for(inv.invoke_many(calls), 30)
    assert [strip(e) for e in envs] == [timeout_env("hang_long", "0.15"), {"ok": True, "value": "ok"},
                                        timeout_env("hang_short", "0.05"), {"ok": True, "value": 2},
                                        timeout_env("hang_mid", "0.1")]
    assert [q for q, _ in cut] == ["a", "b", "c"]
    # never before its deadline
    assert [at >= limit for (_, at), limit in zip(cut, (0.05, 0.1, 0.15))] == [True, True, True]


async def test_a_turn_answers_at_the_deadline_without_waiting_for_the_clean_up() -> None:
    cleaned = asyncio.Event()
    swallowed: list[str] = []

    @tool(read_only=True, timeout_s=0.05)
    async def lingers(q: str) -> str:
        """Wait too long; when cancelled, clean up for a while."""
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.5)
            cleaned.set()
        return q

    @tool(read_only=True, timeout_s=0.05)
    async def swallows(q: str) -> str:
        """Wait too long; when cancelled, answer anyway."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.append(q)
        return "late " + q

    inv = Invoker(ToolRegistry([lingers, swallows, naps]))
    started = time.monotonic()
    envs = await asyncio.wait_for(inv.invoke_many([call("lingers", "1", q="a"), call("swallows", "2", q="b"),
                                                   call("naps", "3", x=2)]), 30)
    assert [strip(e) for e in envs] == [timeout_env("lingers", "0.05"), timeout_env("swallows", "0.05"),
                                        {"ok": True, "value": 4}]
    assert not cleaned.is_set()  # the turn did not wait for the clean-up (0.5 s)
    assert time.monotonic() - started < 0.45
    await asyncio.sleep(0)
    assert swallowed == ["b"]
    await asyncio.wait_for(cleaned.wait(), 5)


async def test_a_body_of_a_turn_that_blocks_past_its_deadline_is_never_a_success() -> None:
    @tool(read_only=True, timeout_s=0.05)
    async def blocks(x: int) -> int:
        """Suspend once, then block the loop past the deadline and answer."""
        await asyncio.sleep(0)
        time.sleep(0.1)
        return x

    envs = await Invoker(ToolRegistry([blocks, instant])).invoke_many([call("blocks", "1", x=1), call("instant", "2", x=1)])
    assert [strip(e) for e in envs] == [timeout_env("blocks", "0.05"), {"ok": True, "value": 2}]


async def test_a_context_deadline_cuts_every_call_of_the_turn() -> None:
    @tool(read_only=True, timeout_s=30)
    async def waits(x: int) -> int:
        """Wait ten seconds (a long time), then answer with the number."""
        await asyncio.sleep(10)
        return x

    ctx = ToolContext(run_id="conv", deadline=time.monotonic() + 0.1)
    envs = await asyncio.wait_for(Invoker(ToolRegistry([waits, instant])).invoke_many(
        [call("waits", "1", x=1), call("instant", "2", x=1), call("waits", "3", x=2)], ctx), 30)
    assert envs[1]["ok"] is True
    assert [envs[0]["error"]["code"], envs[2]["error"]["code"]] == ["timeout", "timeout"]


# ------------------------------------------------------------------ the caller's cancellation


@pytest.mark.parametrize("rounds", range(3))
async def test_cancelling_a_turn_cancels_every_body_and_records_each_call(rounds: int) -> None:
    records: list[dict[str, Any]] = []
    cancelled: list[str] = []
    started = asyncio.Event()
    release = threading.Event()

    @tool(read_only=True, timeout_s=60)
    async def slow(q: str) -> str:
        """Wait on a slow backend for half a minute, then answer."""
        try:
            started.set()
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(q)
            raise
        return q

    @tool(read_only=True, timeout_s=60)
    async def stubborn(q: str) -> str:
        """Wait; when cancelled, clean up briefly and answer anyway."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            cancelled.append(q)
        return q

    @tool(read_only=True, timeout_s=60)
    def blocking(q: str) -> str:
        """Block a worker thread until the test releases it."""
        release.wait(5)
        return q

    chain = [mw.audit(records.append), *mw.default_chain()[1:]]
    inv = Invoker(ToolRegistry([slow, stubborn, blocking, instant]), middleware=chain)
    before = set(asyncio.all_tasks())
    task = asyncio.ensure_future(inv.invoke_many([
        call("instant", "1", x=1), call("slow", "2", q="a"), call("stubborn", "3", q="b"),
        call("blocking", "4", q="c"), call("slow", "5", q="d"),
    ]))
    await started.wait()
    await asyncio.sleep(0.01)
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
    finally:
        release.set()
    assert task.cancelled()
    assert sorted(cancelled) == ["a", "b", "d"]
    assert sorted((r["call_id"], r["outcome"], r["decision"]) for r in records) == [
        ("1", "ok", "executed"),
        ("2", "cancelled", "failed"),
        ("3", "ok", "executed"),  # it swallowed the cancellation and answered
        ("4", "cancelled", "failed"),
        ("5", "cancelled", "failed"),
    ]
    await asyncio.sleep(0)
    assert set(asyncio.all_tasks()) - before == set()


async def test_a_cancelled_turn_waits_for_a_body_that_swallows_it_only_until_its_deadline() -> None:
    records: list[dict[str, Any]] = []
    seen: list[str] = []
    finished = asyncio.Event()

    @tool(read_only=True, timeout_s=0.3)
    async def stubborn(q: str) -> str:
        """Wait; when cancelled, go on for two seconds; cancelled again, clean up for 0.3 s."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("caller")
            try:
                await asyncio.sleep(2)
            except asyncio.CancelledError:
                seen.append("deadline")
                await asyncio.sleep(0.3)
            finally:
                finished.set()
        return q

    chain = [mw.audit(records.append), *mw.default_chain()[1:]]
    inv = Invoker(ToolRegistry([stubborn, instant]), middleware=chain)
    task = asyncio.ensure_future(inv.invoke_many([call("stubborn", "1", q="a"), call("instant", "2", x=1)]))
    await asyncio.sleep(0.02)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    # it propagated at the body's deadline (which cancelled the body again), not after its clean-up
    assert (seen, finished.is_set()) == (["caller", "deadline"], False)
    assert time.monotonic() - started < 1.5
    assert sorted((r["call_id"], r["outcome"]) for r in records) == [("1", "cancelled"), ("2", "ok")]
    await asyncio.wait_for(finished.wait(), 10)  # the clean-up went on by itself

# ------------------------------------------------------------------ clean-ups past the deadline

TURN_CLEAN_UP_OUTLIVES_ITS_LOOP = CLEAN_UP_OUTLIVES_ITS_LOOP.replace(
    '''    return await inv.invoke({"id": str(i), "name": "lingers", "input": {"x": i}})''',
    '''    calls = [{"id": str(i), "name": "lingers", "input": {"x": i}}, {"id": "b", "name": "lingers", "input": {"x": 100 + i}}]
    return (await inv.invoke_many(calls))[0]''',
)


@pytest.mark.parametrize("python", interpreters())
def test_a_turns_clean_up_still_running_when_its_loop_is_closed_keeps_nothing(python: str, tmp_path: Path) -> None:
    """As for a single call: two bodies of a turn abandoned at their deadline whose clean-ups
    (swallowing further cancellations) still run when the loop is closed, during ``asyncio.run``'s
    own shut-down or by ``loop.close()`` alone: neither keeps the loop from ending, each is
    closed with the loop (its ``finally`` blocks run), nothing of the loop is kept, nothing is
    printed."""
    assert TURN_CLEAN_UP_OUTLIVES_ITS_LOOP != CLEAN_UP_OUTLIVES_ITS_LOOP
    [(code, out, err)] = run_many(python, TURN_CLEAN_UP_OUTLIVES_ITS_LOOP, tmp_path, runs=1, parallel=1)
    assert (code, out, err) == (0, (
        "asyncio.run: loops alive 0, bodies alive 0, ended 20\n"
        "closed loops: loops alive 0, bodies alive 0, ended 40, ['timeout']\n"), "")


# ------------------------------------------------------------------ a turn agrees with its calls alone


async def test_a_second_cancellation_while_a_turn_winds_down_still_aborts_every_call() -> None:
    records: list[dict[str, Any]] = []
    slow = [True]

    @tool(side_effecting=True, timeout_s=30)
    async def send(to: str) -> str:
        """Send a message to the given address (slow backend)."""
        await asyncio.sleep(10 if slow[0] else 0)
        return "sent " + to

    chain = [mw.audit(records.append), *mw.default_chain()[1:]]
    inv = Invoker(ToolRegistry([send]), middleware=chain)
    task = asyncio.ensure_future(inv.invoke_many([call("send", str(i), to=f"user{i}") for i in range(4)]))
    await asyncio.sleep(0.01)
    task.cancel()
    for _ in range(5):  # cancelled again while it winds down (as an anyio scope does every pass)
        await asyncio.sleep(0)
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    await asyncio.sleep(0.05)
    assert sorted((r["call_id"], r["outcome"]) for r in records) == [(str(i), "cancelled") for i in range(4)]
    slow[0] = False  # every in-flight claim was released: an identical call runs at once
    assert strip(await asyncio.wait_for(inv.invoke(call("send", "again", to="user3")), 10)) == {"ok": True, "value": "sent user3"}


STOP_IN_A_TURN = '''
import asyncio
from agentkit_tools import Invoker, ToolRegistry, tool

interrupt = [True]

@tool(side_effecting=True, timeout_s=5)
async def send(to: str) -> str:
    """Send a message to the given address."""
    await asyncio.sleep(0.01)
    if interrupt[0]:
        interrupt[0] = False
        raise {stop}
    return "sent to " + to

@tool(read_only=True)
async def naps(x: int) -> int:
    """Sleep a moment, then answer with the number doubled."""
    await asyncio.sleep(0.05)
    return 2 * x

inv = Invoker(ToolRegistry([send, naps]))

async def main():
    calls = [{{"id": "1", "name": "send", "input": {{"to": "bob"}}}}] + [
        {{"id": str(i), "name": "naps", "input": {{"x": i}}}} for i in range(2, 6)]
    try:
        await inv.invoke_many(calls)
    except {stop}:
        print("caller saw the stop")
    env = await asyncio.wait_for(inv.invoke({{"id": "7", "name": "send", "input": {{"to": "bob"}}}}), 5)
    print("repeat:", env["ok"], env.get("value"))

asyncio.run(main())
print("end")
'''


@pytest.mark.parametrize("stop", ["KeyboardInterrupt", "SystemExit"])
def test_a_stop_in_a_turns_body_reaches_the_callers_await_and_releases_the_call(stop: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "stop.py"
    script.write_text(STOP_IN_A_TURN.format(stop=stop))
    for _ in range(3):
        out = subprocess.run([sys.executable, "-W", "default", str(script)], capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout, out.stderr) == (0, "caller saw the stop\nrepeat: True sent to bob\nend\n", "")


async def test_a_bodys_deadline_starts_when_its_body_starts() -> None:
    @tool(read_only=True, timeout_s=5)
    async def hog(x: int) -> int:
        """Hold the loop for a while (CPU work), then answer."""
        time.sleep(0.3)
        return x

    @tool(read_only=True, timeout_s=0.2)
    async def quick(x: int) -> int:
        """Answer with the number plus one at once."""
        return x + 1

    inv = Invoker(ToolRegistry([hog, quick, instant]))
    envs = await inv.invoke_many([call("hog", "1", x=1), call("quick", "2", x=1), call("quick", "3", x=2)])
    assert [strip(e) for e in envs] == [{"ok": True, "value": 1}, {"ok": True, "value": 2}, {"ok": True, "value": 3}]


async def test_nothing_of_a_finished_turn_stays_alive() -> None:
    import gc
    import weakref

    class Ctx:
        run_id = "conv"

    @tool(read_only=True, timeout_s=300)
    async def other(x: int) -> int:
        """Another conversation's long call in flight meanwhile."""
        await asyncio.sleep(1)
        return x

    inv = Invoker(ToolRegistry([naps, other]))
    background = asyncio.ensure_future(inv.invoke(call("other", "bg", x=1)))  # a deadline pending on the loop
    await asyncio.sleep(0)
    ctx = Ctx()
    ref = weakref.ref(ctx)
    envs = await inv.invoke_many([call("naps", "1", x=1), call("naps", "2", x=2)], ctx)
    assert [strip(e) for e in envs] == [{"ok": True, "value": 2}, {"ok": True, "value": 4}]
    del ctx, envs
    gc.collect()
    assert ref() is None
    assert strip(await background) == {"ok": True, "value": 1}


async def test_a_deadline_and_a_cancellation_in_the_same_pass_leave_a_record_per_call() -> None:
    records: list[dict[str, Any]] = []

    @tool(read_only=True, timeout_s=0.05)
    async def hangs(q: str) -> str:
        """Wait on a backend that never answers in time."""
        await asyncio.sleep(10)
        return q

    @tool(read_only=True, timeout_s=5)
    async def hogs(q: str) -> str:
        """Hold the loop past the other call's deadline, then wait."""
        await asyncio.sleep(0)
        time.sleep(0.1)
        await asyncio.sleep(10)
        return q

    chain = [mw.audit(records.append), *mw.default_chain()[1:]]
    inv = Invoker(ToolRegistry([hangs, hogs]), middleware=chain)
    task = asyncio.ensure_future(inv.invoke_many([call("hangs", "1", q="a"), call("hogs", "2", q="b")]))
    asyncio.get_running_loop().call_later(0.045, task.cancel)  # due in the same pass as call 1's deadline
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    await asyncio.sleep(0.05)
    assert sorted((r["call_id"], r["outcome"]) for r in records) == [("1", "cancelled"), ("2", "cancelled")]


async def test_context_variables_a_body_sets_reach_none_of_its_calls_later_steps() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller")
    seen: list[tuple[str, str]] = []

    @tool(read_only=True)
    async def flaky(x: int) -> str:
        """Fail on the first attempt with a connection error, then answer."""
        n = sum(1 for s in seen if s[0].startswith("attempt")) + 1
        seen.append((f"attempt {n}", var.get()))
        var.set(f"set by attempt {n}")
        await asyncio.sleep(0.001)
        if n == 1:
            raise ConnectionError("reset")
        return "done"

    async def no_sleep(_: float) -> None:
        pass

    def sink(rec: dict[str, Any]) -> None:
        seen.append(("sink " + rec["call_id"], var.get()))

    inv = Invoker(ToolRegistry([flaky, instant]), middleware=[mw.audit(sink), mw.retry(sleep=no_sleep), mw.timeout()])
    envs = await inv.invoke_many([call("flaky", "1", x=1), call("instant", "2", x=1)])
    assert [strip(e) for e in envs] == [{"ok": True, "value": "done"}, {"ok": True, "value": 2}]
    assert sorted(seen) == [("attempt 1", "caller"), ("attempt 2", "caller"), ("sink 1", "caller"), ("sink 2", "caller")]
    assert var.get() == "caller"


@pytest.mark.parametrize("returns", ["a value", "an awaitable", "an awaitable that suspends"])
async def test_a_body_that_cancels_its_own_task_and_returns_answers_as_it_does_alone(returns: str) -> None:
    """That cancellation was the body's own: the call is answered with what it returned (an
    awaitable it returned is settled, in a turn in a task of its own as the call's later steps
    are), alone and in a turn."""
    records: list[dict[str, Any]] = []

    async def later(x: int) -> int:
        if returns == "an awaitable that suspends":
            await asyncio.sleep(0.001)
        return x

    @tool(read_only=True)
    async def cancels_then_returns(x: int) -> Any:
        """Cancel the task it runs in, then answer anyway."""
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        return x if returns == "a value" else later(x)

    async def sink(rec: dict[str, Any]) -> None:  # a step after the body that suspends
        await asyncio.sleep(0)
        records.append(rec)

    chain = [mw.audit(sink), *mw.default_chain()[1:]]
    for turn in (False, True):
        records.clear()
        inv = Invoker(ToolRegistry([cancels_then_returns, instant]), middleware=chain)
        calls = [call("cancels_then_returns", "1", x=1), call("instant", "2", x=1)]
        envs = await inv.invoke_many(calls) if turn else [await inv.invoke(c) for c in calls]
        assert [strip(e) for e in envs] == [{"ok": True, "value": 1}, {"ok": True, "value": 2}], turn
        assert sorted((r["call_id"], r["outcome"]) for r in records) == [("1", "ok"), ("2", "ok")], turn


# ------------------------------------------------------------------ every way a call's task ends answers the call


def _marked_async(name: str, fn: Any) -> Any:
    """An ``async`` function tool named ``name`` whose ``fn(args, ctx)`` returns what ``fn``
    returns (no coroutine): through ``inspect.markcoroutinefunction`` where it exists (3.12+),
    else the same tool kind with its ``fn`` replaced."""
    import dataclasses
    import inspect

    async def template(x: int) -> int:
        """Answer with the number given, through an awaitable that is no coroutine."""
        return x

    template.__name__ = template.__qualname__ = name
    if hasattr(inspect, "markcoroutinefunction"):

        def plain(x: int) -> int:
            return fn(x)  # type: ignore[no-any-return]

        plain.__name__, plain.__doc__ = name, template.__doc__
        return tool(read_only=True)(inspect.markcoroutinefunction(plain))
    return dataclasses.replace(tool(read_only=True)(template), fn=lambda args, ctx: fn(args["x"]))


class _Awaits:
    def __init__(self, v: int) -> None:
        self.v = v

    def __await__(self) -> Any:
        yield from asyncio.sleep(0).__await__()
        return self.v


def _later(x: int) -> Any:
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, fut.set_result, x)
    return fut


def _generator(x: int) -> Any:
    yield from ()
    return x


async def test_an_awaitable_a_turns_body_returns_gets_what_is_left_of_the_deadline() -> None:
    """As alone: a body that works 0.15 s and returns an awaitable working 0.15 s more (limit
    0.2 s) is ``timeout`` (the awaitable cancelled), never a success past the deadline; each kind
    of body, the rest of the turn untouched."""
    from test_async_body import _on_time, _two_stage_tools

    log: list[str] = []
    tools = _two_stage_tools(log)
    calls = [call(t.name, str(i), x=i) for i, t in enumerate(tools)] + [call("instant", "9", x=9)]
    rounds = [0]
    while True:
        log.clear()
        inv = Invoker(ToolRegistry([*tools, instant]))  # (a fresh one a round: no repeat counts)
        envs = await asyncio.wait_for(inv.invoke_many(calls), 10)
        if _on_time(log, rounds, len(tools)):
            break
    assert [strip(e) for e in envs] == [*(timeout_env(t.name, "0.2") for t in tools), {"ok": True, "value": 10}]
    assert log == ["rest cancelled"] * 3


async def test_a_body_that_steps_its_own_running_task_gets_the_error_a_coroutine_gives() -> None:
    """A body that sends into, throws into or closes the coroutine of the task running it (its
    own, running) gets ``ValueError: coroutine already executing``, as from a coroutine (alone,
    and in ``asyncio.gather``), in a turn too (the task's coroutine is the core's ``Relay``)."""

    @tool(read_only=True)
    async def reenters(how: str) -> str:
        """Step the coroutine of the task this body runs in, while it runs."""
        await asyncio.sleep(0)
        coro: Any = asyncio.current_task().get_coro()  # type: ignore[union-attr]
        {"send": lambda: coro.send(None), "next": lambda: next(coro.__await__()),
         "throw": lambda: coro.throw(KeyError("x")), "close": coro.close}[how]()
        return how

    hows = ["send", "next", "throw", "close"]
    calls = [call("reenters", str(i), how=h) for i, h in enumerate(hows)]
    expected = [internal("reenters", "ValueError: coroutine already executing")] * len(hows)
    inv = Invoker(ToolRegistry([reenters]))
    assert [strip(await asyncio.wait_for(inv.invoke(c), 10)) for c in calls] == expected
    assert [strip(e) for e in await asyncio.wait_for(inv.invoke_many(calls), 10)] == expected


async def test_a_turns_body_task_shows_the_body_to_asyncio_introspection() -> None:
    """What asyncio's task repr, ``get_stack`` and ``print_stack`` show of a turn's task (the
    core's ``Relay`` drives it): the body, as for the task ``asyncio.gather`` makes for it. A body
    that looks at its own task during its step gets a repr (no error)."""
    import io
    import re

    seen: dict[str, Any] = {}
    own: list[str] = []

    @tool(read_only=True)
    async def look(x: int) -> int:
        """Wait a moment, then answer the number."""
        own.append(repr(asyncio.current_task()))
        await asyncio.sleep(0.05)
        return x

    async def spy(label: str) -> None:
        await asyncio.sleep(0.01)
        for t in asyncio.all_tasks():
            if getattr(t.get_coro(), "__qualname__", None) == look.func.__qualname__:
                out = io.StringIO()
                t.print_stack(file=out)
                at = re.search(r" coro=<(.*?\.py:\d+)>", repr(t)).group(1)  # type: ignore[union-attr]
                seen[label] = (at, [f.f_code.co_name for f in t.get_stack()], out.getvalue().splitlines()[1:3])
                return

    inv = Invoker(ToolRegistry([look]))
    await asyncio.gather(spy("gather"), asyncio.gather(look.func(1), look.func(2)))
    envs = (await asyncio.gather(spy("turn"), inv.invoke_many([call("look", "1", x=1), call("look", "2", x=2)])))[1]
    assert [strip(e) for e in envs] == [{"ok": True, "value": 1}, {"ok": True, "value": 2}]
    line = look.func.__code__.co_firstlineno + 4
    shown = (f"{look.func.__qualname__}() running at {__file__}:{line}", ["look"],
             [f'  File "{__file__}", line {line}, in look', "    await asyncio.sleep(0.05)"])
    assert seen == {"gather": shown, "turn": shown}
    assert len(own) == 4 and all(" running" in r for r in own)


async def test_a_turns_body_task_is_named_after_its_tool_as_the_body_of_a_call_alone() -> None:
    """The task a turn makes for a call's ``async`` body is named ``tool body <qualified name
    of the tool's function>``, as ``asyncio.current_task()`` shows the body of a call alone."""

    async def own_name(x: int) -> str:
        """Answer with the name of the task the body runs in."""
        return asyncio.current_task().get_name()  # type: ignore[union-attr]

    inv = Invoker(ToolRegistry([tool(own_name, read_only=True), tool(own_name, name="renamed", read_only=True)]))
    envs = await inv.invoke_many([call("own_name", "1", x=1), call("renamed", "2", x=2), call("own_name", "3", x=3)])
    named = {"ok": True, "value": f"tool body {own_name.__qualname__}"}
    assert [strip(e) for e in envs] == [named] * 3
    assert strip(await inv.invoke(call("own_name", "4", x=4))) == named


async def test_a_body_that_is_an_awaitable_but_no_coroutine_is_awaited_as_alone() -> None:
    """A function marked as a coroutine function that returns a future or an object with
    ``__await__`` is awaited through its ``__await__``; one that returns a plain generator (not
    awaitable) is refused as ``await`` refuses it; alone and in a turn alike."""
    tools = [_marked_async("fut", _later), _marked_async("aw", _Awaits), _marked_async("gen", _generator)]
    calls = [call("fut", "1", x=1), call("aw", "2", x=2), call("gen", "3", x=3)]
    expected = [{"ok": True, "value": 1}, {"ok": True, "value": 2},
                internal("gen", "TypeError: object generator can't be used in 'await' expression")]
    inv = Invoker(ToolRegistry(tools))
    assert [strip(await asyncio.wait_for(inv.invoke(c), 10)) for c in calls] == expected
    inv = Invoker(ToolRegistry(tools))
    assert [strip(e) for e in await asyncio.wait_for(inv.invoke_many(calls), 10)] == expected


async def test_a_call_whose_task_a_sibling_closes_is_answered(caplog: pytest.LogCaptureFixture) -> None:
    """A body closes the coroutine of a sibling call's task, before that body started or while it
    waits: the sibling's body (its ``finally`` runs) ended by ``GeneratorExit``, and is answered
    as a body raising ``GeneratorExit`` alone is; the turn answers every call, one record each."""
    records: list[dict[str, Any]] = []
    gate: list[Any] = []
    ran: list[str] = []

    @tool(read_only=True)
    async def waiter(x: int) -> int:
        """Wait for the gate, then answer with the number."""
        try:
            await gate[0]
        finally:
            ran.append(f"finally {x}")
        return x

    @tool(read_only=True)
    async def closer(x: int) -> str:
        """Close the other calls' tasks (after ``x`` passes of the loop)."""
        for _ in range(x):
            await asyncio.sleep(0)
        me = asyncio.current_task()
        for t in asyncio.all_tasks():
            if t is not me and type(t.get_coro()).__name__ == "Relay":
                t.get_coro().close()
        gate[0].set_result(None)
        return "closed"

    chain = [mw.audit(records.append), *mw.default_chain()[1:]]
    alone = Invoker(ToolRegistry([exits]), middleware=chain)
    assert strip(await alone.invoke(call("exits", "0", x=0))) == internal("exits", "GeneratorExit")
    for passes in (0, 3):  # 0: the sibling's body has not started yet; 3: it waits
        records.clear()
        ran.clear()
        gate[:] = [asyncio.get_running_loop().create_future()]
        inv = Invoker(ToolRegistry([waiter, closer]), middleware=chain)
        envs = await asyncio.wait_for(inv.invoke_many([call("closer", "1", x=passes), call("waiter", "2", x=2)]), 10)
        assert [strip(e) for e in envs] == [{"ok": True, "value": "closed"}, internal("waiter", "GeneratorExit")], passes
        assert ran == ([] if passes == 0 else ["finally 2"]), passes
        assert sorted((r["call_id"], r["outcome"]) for r in records) == [("1", "ok"), ("2", "internal_error")], passes


async def test_closing_a_calls_task_raises_what_its_bodys_close_raised_but_a_body_awaiting_while_closed() -> None:
    """A body closes the coroutine of a sibling call's task while the sibling's body waits: what
    the sibling's close raised (its ``finally`` raises) is raised to the closer and ends the call;
    a ``finally`` that awaits while closed (``RuntimeError``) is dropped, the call ended by
    ``GeneratorExit`` as a body raising it alone is."""
    gate: list[Any] = []
    closes: list[Any] = []

    @tool(read_only=True)
    async def raises(x: int) -> int:
        """Wait for the gate; when closed, raise."""
        try:
            await gate[0]
        finally:
            raise ValueError("broken on close")
        return x

    @tool(read_only=True)
    async def lingers(x: int) -> int:
        """Wait for the gate; when closed, await once more."""
        try:
            await gate[0]
        finally:
            await asyncio.sleep(0)
        return x

    @tool(read_only=True)
    async def closer(x: int) -> str:
        """Close the other calls' tasks once their bodies wait."""
        for _ in range(3):
            await asyncio.sleep(0)
        me = asyncio.current_task()
        for t in asyncio.all_tasks():
            if t is not me and type(t.get_coro()).__name__ == "Relay":
                try:
                    closes.append(t.get_coro().close())
                except BaseException as e:  # noqa: BLE001 - what the close raised is the point
                    closes.append(repr(e))
        gate[0].set_result(None)
        return "closed"

    for body, raised, answered in (
        ("raises", "ValueError('broken on close')", internal("raises", "ValueError: broken on close")),
        ("lingers", None, internal("lingers", "GeneratorExit")),
    ):
        gate[:] = [asyncio.get_running_loop().create_future()]
        closes.clear()
        inv = Invoker(ToolRegistry([raises, lingers, closer]))
        envs = await asyncio.wait_for(inv.invoke_many([call("closer", "1", x=0), call(body, "2", x=2)]), 10)
        assert [strip(e) for e in envs] == [{"ok": True, "value": "closed"}, answered], body
        assert closes == [raised], body


async def test_a_calls_task_stepped_once_done_raises_what_was_thrown_and_refuses_a_value() -> None:
    """The coroutine of a turn's call's task (the core's ``Relay``), once the call ended: thrown
    into, it raises that; sent a value, ``RuntimeError``, as a coroutine reused."""
    relays: dict[int, Any] = {}

    @tool(read_only=True)
    async def keeps(x: int) -> int:
        """Keep the coroutines of the turn's tasks that are the core's, once they all started."""
        await asyncio.sleep(0)
        relays.update((id(t), t.get_coro()) for t in asyncio.all_tasks() if type(t.get_coro()).__name__ == "Relay")
        return x

    inv = Invoker(ToolRegistry([keeps]))
    envs = await asyncio.wait_for(inv.invoke_many([call("keeps", "1", x=1), call("keeps", "2", x=2)]), 10)
    assert [strip(e) for e in envs] == [{"ok": True, "value": 1}, {"ok": True, "value": 2}]
    assert len(relays) == 2  # one task per call
    for relay in relays.values():
        with pytest.raises(ValueError, match="^thrown$"):
            relay.throw(ValueError("thrown"))
        with pytest.raises(RuntimeError, match="^cannot reuse already awaited relay$"):
            relay.send(None)


async def test_a_call_whose_task_a_sibling_cancels_before_its_body_starts_is_answered() -> None:
    """As a body that raises ``CancelledError`` itself (alone, it is answered so)."""

    @tool(read_only=True)
    async def winner(x: int) -> int:
        """Answer at once and cancel the other calls' tasks."""
        me = asyncio.current_task()
        for t in asyncio.all_tasks():
            if t is not me and type(t.get_coro()).__name__ == "Relay":
                t.cancel()
        return x

    assert strip(await Invoker(ToolRegistry([cancels_itself])).invoke(call("cancels_itself", "0", x=0))) == internal("cancels_itself", "CancelledError")
    inv = Invoker(ToolRegistry([winner, naps]))
    envs = await asyncio.wait_for(inv.invoke_many([call("winner", "1", x=1), call("naps", "2", x=2)]), 10)
    assert [strip(e) for e in envs] == [{"ok": True, "value": 1}, internal("naps", "CancelledError")]


async def test_a_body_that_reacts_to_its_deadline_by_raising_is_answered_timeout_as_alone() -> None:
    """Cancelled at its deadline, a body raises another exception (its client breaks): the call
    is past its deadline, so ``timeout``, alone and in a turn."""
    for reaction in (RuntimeError("stream closed while cancelled"), ValueError("bad state"), GeneratorExit()):

        @tool(read_only=True, timeout_s=0.02)
        async def fragile(x: int) -> int:
            """Wait on a slow backend; being cancelled breaks its connection."""
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                raise reaction from None
            return x

        calls = [call("fragile", "1", x=1), call("instant", "2", x=2)]
        expected = [timeout_env("fragile", "0.02"), {"ok": True, "value": 3}]
        inv = Invoker(ToolRegistry([fragile, instant]))
        assert [strip(await asyncio.wait_for(inv.invoke(c), 10)) for c in calls] == expected, reaction
        inv = Invoker(ToolRegistry([fragile, instant]))
        assert [strip(e) for e in await asyncio.wait_for(inv.invoke_many(calls), 10)] == expected, reaction


STOP_DURING_CANCEL = '''
import asyncio
from agentkit_tools import Invoker, ToolRegistry, tool

@tool(read_only=True)
async def stopper(x: int) -> int:
    """Wait a second; being cancelled, stop the process instead."""
    try:
        await asyncio.sleep(1)
    except asyncio.CancelledError:
        raise {stop}(7)
    return x

@tool(read_only=True)
async def slow(x: int) -> int:
    """Wait a second, then answer with the number given."""
    await asyncio.sleep(1)
    return x

async def main(many):
    inv = Invoker(ToolRegistry([stopper, slow]))
    calls = [{{"id": "1", "name": "stopper", "input": {{"x": 1}}}}, {{"id": "2", "name": "slow", "input": {{"x": 2}}}}]
    t = asyncio.ensure_future(inv.invoke_many(calls) if many else inv.invoke(calls[0]))
    await asyncio.sleep(0.01)
    t.cancel()
    await t

for many in (False, True):
    try:
        asyncio.run(main(many))
        print("asyncio.run returned")
    except BaseException as e:
        print("asyncio.run raised", type(e).__name__, e.args)
'''


@pytest.mark.parametrize("stop", ["KeyboardInterrupt", "SystemExit"])
def test_a_stop_a_body_raises_when_its_turn_is_cancelled_leaves_the_loop_as_alone(stop: str, tmp_path: Path) -> None:
    """The caller cancels; a body answers its cancellation with a request to stop the process:
    ``asyncio.run`` raises it, for a call alone and for a turn (as with ``asyncio.gather``)."""
    [(code, out, err)] = run_many(sys.executable, STOP_DURING_CANCEL.format(stop=stop), tmp_path, runs=1, parallel=1)
    assert (code, out, err) == (0, f"asyncio.run raised {stop} (7,)\n" * 2, "")


DROPPED_WITH_A_RAISING_FINALLY = '''
import asyncio, gc
from agentkit_tools import Invoker, ToolRegistry, middleware as mw, tool

records = []

@tool(read_only=True)
async def bad_finally(x: int) -> int:
    """Wait a second; its finally block raises ValueError."""
    try:
        await asyncio.sleep(1)
    finally:
        print("finally", x)
        raise ValueError("from finally")

@tool(read_only=True)
async def good(x: int) -> int:
    """Wait a second, then answer with the number given."""
    try:
        await asyncio.sleep(1)
    finally:
        print("finally", x)
    return x

for many in (False, True):
    records.clear()
    loop = asyncio.new_event_loop()
    inv = Invoker(ToolRegistry([bad_finally, good]), middleware=[mw.audit(lambda r: records.append((r["call_id"], r["outcome"]))), *mw.default_chain()[1:]])
    calls = [{"id": "0", "name": "good", "input": {"x": 0}}, {"id": "1", "name": "bad_finally", "input": {"x": 1}}, {"id": "2", "name": "good", "input": {"x": 2}}]
    t = loop.create_task(inv.invoke_many(calls) if many else inv.invoke(calls[1]))
    t._log_destroy_pending = False
    loop.run_until_complete(asyncio.sleep(0.02))
    loop.close()
    del t
    gc.collect()
    print("many" if many else "alone", sorted(records))
'''


@pytest.mark.parametrize("python", interpreters())
def test_a_turn_dropped_with_its_loop_aborts_every_call_though_a_bodys_finally_raises(python: str, tmp_path: Path) -> None:
    """A loop closed with a turn pending, one body's ``finally`` raising when it is closed: every
    body is closed, every call aborted as cancelled (as the call alone), nothing printed."""
    [(code, out, err)] = run_many(python, DROPPED_WITH_A_RAISING_FINALLY, tmp_path, runs=1, parallel=1)
    assert (code, out, err) == (0, (
        "finally 1\nalone [('1', 'cancelled')]\n"
        "finally 0\nfinally 1\nfinally 2\nmany [('0', 'cancelled'), ('1', 'cancelled'), ('2', 'cancelled')]\n"), "")


async def test_a_body_awaiting_a_task_with_a_slow_clean_up_times_out_at_its_deadline_in_a_turn() -> None:
    """A body awaits a task it made whose own clean-up takes 0.5 s once cancelled; the call's
    deadline is 0.05 s. As alone, the turn's call gets ``timeout`` at its deadline: the awaited
    task is cancelled, never waited for (before, the call's task waited for that clean-up and the
    ``timeout`` came about 0.5 s late); the turn's other call is answered as usual. While the
    body waits for that task the call's task waits on a plain future completed with it."""
    cleaned: list[str] = []

    @tool(read_only=True, timeout_s=0.05)
    async def delegate(x: int) -> int:
        """Run the work as a task of its own and await it (its clean-up is slow)."""

        async def work() -> int:
            try:
                await asyncio.sleep(10)
            finally:
                await asyncio.shield(asyncio.sleep(0.5))
                cleaned.append("work")
            return x

        return await asyncio.create_task(work())

    @tool(read_only=True)
    async def fast(x: int) -> int:
        """Answer right away with the number given to it."""
        return x

    for many in (False, True):
        inv = Invoker(ToolRegistry([delegate, fast]))
        started = time.monotonic()
        if many:
            envs = await inv.invoke_many([call("delegate", x=1, cid="1"), call("fast", x=2, cid="2")])
        else:
            envs = [await inv.invoke(call("delegate", x=1, cid="1"))]
        took = time.monotonic() - started
        assert strip(envs[0]) == timeout_env("delegate", "0.05")
        if many:
            assert strip(envs[1]) == {"ok": True, "value": 2}
        assert took < 0.4, (many, took)
        await asyncio.sleep(0.6)  # the awaited task's clean-up still ran to its end
        assert cleaned == ["work"]
        cleaned.clear()


# ------------------------------------------------------------------ a turn dropped pending


def _pending_turn(records: list[tuple[str, str]]) -> tuple[Invoker, list[dict[str, Any]]]:
    """An Invoker and a turn whose calls never end by themselves: an async body waiting (its
    task steps the body), a call waiting for its approver (its task steps the call's driver), one
    answered at once."""

    @tool(read_only=True)
    async def hangs(x: int) -> int:
        """Wait for a future nobody completes."""
        await asyncio.get_running_loop().create_future()
        return x

    @tool(side_effecting=True, requires_approval=True)
    async def gated(x: int) -> int:
        """Answer with the number given, once approved."""
        return x

    async def approver(*_: Any) -> bool:
        await asyncio.get_running_loop().create_future()
        return True

    # no timeout rule: no deadline of a call (an entry of the loop's timer) keeps the turn alive
    chain = [mw.audit(lambda r: records.append((r["call_id"], r["outcome"]))), mw.approval(approver), *mw.default_chain()[2:-1]]
    inv = Invoker(ToolRegistry([hangs, gated, instant]), middleware=chain)
    return inv, [call("hangs", "1", x=1), call("gated", "2", x=2), call("instant", "3", x=3)]


async def test_a_turn_collected_pending_aborts_every_call_and_keeps_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing refers to a pending turn any more (its caller's task dropped): collected, each of
    its calls is aborted as cancelled (one record each), its tasks end at once, nothing of it
    (its context) stays alive, nothing is logged or reported as unraisable."""
    import gc
    import weakref

    class Ctx:
        run_id = "conv"

    records: list[tuple[str, str]] = []
    inv, calls = _pending_turn(records)
    ctx = Ctx()
    ref = weakref.ref(ctx)
    before = set(asyncio.all_tasks())
    task = asyncio.ensure_future(inv.invoke_many(calls, ctx))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    await asyncio.sleep(0.02)
    assert not task.done() and len(asyncio.all_tasks() - before) == 3
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        caplog.clear()
        del task, ctx
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert sorted(records) == [("1", "cancelled"), ("2", "cancelled"), ("3", "ok")]
    assert asyncio.all_tasks() - before == set()
    assert ref() is None
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30] == []
    assert [u.exc_value for u in unraisable] == []


def test_a_turn_whose_loop_is_closed_pending_aborts_every_call_and_keeps_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """The loop is closed with the turn pending, then the caller's task dropped: each call is
    aborted as cancelled (one record each), nothing of the turn or its loop stays alive, nothing
    is logged or reported."""
    import gc
    import weakref

    class Ctx:
        run_id = "conv"

    records: list[tuple[str, str]] = []
    inv, calls = _pending_turn(records)
    ctx = Ctx()
    ref = weakref.ref(ctx)
    loop = asyncio.new_event_loop()
    loop_ref = weakref.ref(loop)
    task = loop.create_task(inv.invoke_many(calls, ctx))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.run_until_complete(asyncio.sleep(0.02))
    assert not task.done()
    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        caplog.clear()
        loop.close()
        del task, ctx, loop
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert sorted(records) == [("1", "cancelled"), ("2", "cancelled"), ("3", "ok")]
    assert (ref(), loop_ref()) == (None, None)
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30] == []
    assert [u.exc_value for u in unraisable] == []


async def test_a_turn_whose_coroutine_is_closed_with_its_loop_running_aborts_every_call() -> None:
    """Someone closes the coroutine awaiting the turn while its loop runs: every call is aborted
    as cancelled (one record each), its tasks end at their next step, none with an error."""
    records: list[tuple[str, str]] = []
    inv, calls = _pending_turn(records)
    coro = inv.invoke_many(calls)
    assert coro.send(None) is not None  # the turn starts its calls and waits
    mine = {t for t in asyncio.all_tasks() if type(t.get_coro()).__name__ == "Relay"}
    assert len(mine) == 3  # one per call (the one answering at once has ended by the close)
    await asyncio.sleep(0.02)
    coro.close()
    await asyncio.wait(mine, timeout=5)
    assert sorted(t.cancelled() for t in mine if t.done()) == [False, True, True]
    assert sorted(records) == [("1", "cancelled"), ("2", "cancelled"), ("3", "ok")]


def test_a_cancelled_turn_whose_loop_is_closed_while_it_winds_down_aborts_every_call() -> None:
    """The caller cancels; one body swallows the cancellation and goes on cleaning up, so the
    turn waits for it; then the loop is closed (and the caller's task dropped): every call is
    still aborted as cancelled, one record each (the Python turn before the core's lost both
    records: only a turn closed while waiting for its calls aborted them)."""
    import gc

    records: list[tuple[str, str]] = []

    @tool(read_only=True, timeout_s=60)
    async def stubborn(x: int) -> int:
        """Wait; when cancelled, go on cleaning up for a long while before answering."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(30)
        return x

    @tool(read_only=True, timeout_s=60)
    async def quits(x: int) -> int:
        """Wait half a minute; stop at once when cancelled."""
        await asyncio.sleep(30)
        return x

    chain = [mw.audit(lambda r: records.append((r["call_id"], r["outcome"]))), *mw.default_chain()[1:]]
    inv = Invoker(ToolRegistry([stubborn, quits]), middleware=chain)
    loop = asyncio.new_event_loop()
    task = loop.create_task(inv.invoke_many([call("stubborn", "1", x=1), call("quits", "2", x=2)]))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.run_until_complete(asyncio.sleep(0.02))
    task.cancel()
    loop.run_until_complete(asyncio.sleep(0.02))  # the turn waits for the stubborn body
    assert not task.done()
    loop.close()
    del task
    gc.collect()
    assert sorted(records) == [("1", "cancelled"), ("2", "cancelled")]

# ------------------------------------------------------------------ the turn's awaitable misused

async def test_a_turn_woken_while_it_waits_waits_on() -> None:
    """A spurious wake-up (one more ``send(None)`` while the turn waits for its calls) gets the
    same waiter back, as an asyncio future's await gives it; the turn then ends as it would."""
    inv = Invoker(ToolRegistry([naps]))
    coro = inv.invoke_many([call("naps", "1", x=1), call("naps", "2", x=2)])
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0.001)
    assert coro.send(None) is task._fut_waiter  # type: ignore[attr-defined]
    envs = await asyncio.wait_for(task, 5)
    assert [strip(e) for e in envs] == [{"ok": True, "value": 2}, {"ok": True, "value": 4}]


async def test_a_second_await_of_a_running_turn_is_refused_and_the_turn_goes_on() -> None:
    """Awaiting a started turn a second time raises ``RuntimeError`` at that ``await``, as a
    coroutine does; the caller's ``await`` still gets every envelope."""
    records: list[tuple[str, str]] = []
    inv = Invoker(ToolRegistry([naps]), middleware=[mw.audit(lambda r: records.append((r["call_id"], r["outcome"])))])
    coro = inv.invoke_many([call("naps", "1", x=1), call("naps", "2", x=2)])
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0.001)
    turn = coro.cr_await

    async def intruder() -> Any:
        return await turn

    with pytest.raises(RuntimeError, match="^coroutine is being awaited already$"):
        await intruder()
    envs = await asyncio.wait_for(task, 5)
    assert [strip(e) for e in envs] == [{"ok": True, "value": 2}, {"ok": True, "value": 4}]
    assert sorted(records) == [("1", "ok"), ("2", "ok")]
    with pytest.raises(RuntimeError, match="^cannot reuse already awaited coroutine$"):
        await intruder()



def _turn_of(inv: Invoker, calls: list[dict[str, Any]]) -> Any:
    """The turn ``invoke_many`` awaits, made as it makes it, not started."""
    from agentkit_tools import _core

    return _core.Turn(inv._only, inv.registry._core, calls, None)


async def test_a_value_sent_to_a_turn_not_started_is_refused_and_it_stays_not_started() -> None:
    """``send(5)`` before the first step raises the ``TypeError`` a coroutine raises; the turn
    has not started: awaited after that, it answers every call."""
    want = native_refusal(lambda co: co.send(5))
    turn = _turn_of(Invoker(ToolRegistry([naps])), [call("naps", "1", x=1), call("naps", "2", x=2)])
    with pytest.raises(TypeError) as got:
        turn.send(5)
    assert type(want) is TypeError
    assert str(got.value) == str(want) == "can't send non-None value to a just-started coroutine"
    envs = await turn
    assert [strip(e) for e in envs] == [{"ok": True, "value": 2}, {"ok": True, "value": 4}]


@pytest.mark.parametrize("how", ["throw", "close"])
async def test_a_turn_thrown_into_or_closed_before_it_started_ends_with_no_call_run(how: str) -> None:
    """An exception thrown into a turn not started is raised as it is, and ``close()`` does
    nothing but end it, as for a coroutine: no call is admitted, no audit record made; the
    turn then refuses to be awaited or stepped as an awaited coroutine does."""
    records: list[Any] = []
    inv = Invoker(ToolRegistry([naps]), middleware=[mw.audit(records.append)])
    turn = _turn_of(inv, [call("naps", "1", x=1), call("naps", "2", x=2)])
    boom = KeyError("boom")
    if how == "throw":
        with pytest.raises(KeyError) as got:
            turn.throw(boom)
        assert got.value is boom
    else:
        assert turn.close() is None
    assert turn.close() is None  # closing again does nothing
    with pytest.raises(RuntimeError, match="^cannot reuse already awaited coroutine$"):
        turn.send(None)
    with pytest.raises(RuntimeError, match="^cannot reuse already awaited coroutine$"):
        await turn
    again = ValueError("again")
    with pytest.raises(ValueError) as got_again:
        turn.throw(again)
    assert got_again.value is again
    await asyncio.sleep(0.03)
    assert records == []


async def test_a_stop_iteration_thrown_into_a_turn_not_started_is_a_runtime_error() -> None:
    """As a coroutine does, a ``StopIteration`` thrown in is not read as the turn's value."""
    stop = StopIteration(["forged"])
    want = native_refusal(lambda co: co.throw(stop))
    turn = _turn_of(Invoker(ToolRegistry([naps])), [call("naps", "1", x=1), call("naps", "2", x=2)])
    with pytest.raises(RuntimeError) as got:
        turn.throw(stop)
    assert type(want) is RuntimeError
    assert str(got.value) == str(want) == "coroutine raised StopIteration"
    assert got.value.__cause__ is stop


async def test_a_turn_that_ended_refuses_a_value_and_raises_what_is_thrown_in() -> None:
    """Once the turn returned its envelopes, a step raises as an exhausted coroutine's does."""
    turn = _turn_of(Invoker(ToolRegistry([instant])), [call("instant", "1", x=1), call("instant", "2", x=2)])
    assert [strip(e) for e in await turn] == [{"ok": True, "value": 2}, {"ok": True, "value": 3}]
    with pytest.raises(RuntimeError, match="^cannot reuse already awaited coroutine$"):
        turn.send(None)
    boom = KeyError("boom")
    with pytest.raises(KeyError) as got:
        turn.throw(boom)
    assert got.value is boom
    assert turn.close() is None


TURN_PENDING_AT_EXIT = '''
import asyncio
from agentkit_tools import Invoker, ToolRegistry, tool

@tool(read_only=True, timeout_s=60)
async def slow(x: int) -> int:
    """Sleep for half a minute, then answer with the number given."""
    await asyncio.sleep(30)
    return x

inv = Invoker(ToolRegistry([slow]))
loop = asyncio.new_event_loop()
TASK = loop.create_task(inv.{entry}({calls}))
loop.run_until_complete(asyncio.sleep(0.05))
loop.close()
print("exiting", flush=True)
'''


@pytest.mark.parametrize("python", interpreters())
@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
def test_an_interpreter_exiting_with_a_call_pending_on_a_closed_loop_exits_cleanly(python: str, entry: str, tmp_path: Path) -> None:
    """The task of a call still pending on a closed loop is kept until the interpreter exits:
    the collector closes it during finalization, and nothing panics (an exception made for the
    bodies' close is made without taking the interpreter lock again)."""
    one = '{"id": "1", "name": "slow", "input": {"x": 1}}'
    calls = one if entry == "invoke" else f'[{one}, {one.replace(chr(34) + "1" + chr(34), chr(34) + "2" + chr(34))}]'
    source = TURN_PENDING_AT_EXIT.format(entry=entry, calls=calls)
    for code, out, err in run_many(python, source, tmp_path, runs=5, parallel=5):
        assert "panicked" not in err and "Exception ignored" not in err, err
        assert (code, out) == (0, "exiting\n"), err


@pytest.mark.parametrize("turn", [False, True])
@pytest.mark.parametrize("raised", ["ValueError", "KeyboardInterrupt"])
async def test_closing_a_clean_up_past_the_deadline_lets_only_a_stop_through(turn: bool, raised: str) -> None:
    """A body abandoned at its deadline whose clean-up still runs, closed (as its loop's holder
    closes it when the loop is closed): what the body's close raises is dropped as the rest of
    its outcome is, but a request to stop the process; the same for a turn's call and a call
    alone."""
    from agentkit_tools import _runner

    exc = {"ValueError": ValueError, "KeyboardInterrupt": KeyboardInterrupt}[raised]

    @tool(read_only=True, timeout_s=0.05)
    async def lingers(q: str) -> str:
        """Wait too long; when cancelled, clean up for a long while, failing when closed."""
        try:
            await asyncio.sleep(10)
        finally:
            try:
                await asyncio.sleep(10)
            finally:
                raise exc("closed")
        return q

    inv = Invoker(ToolRegistry([lingers]))
    if turn:
        envs = await asyncio.wait_for(inv.invoke_many([call("lingers", "1", q="a"), call("lingers", "2", q="b")]), 5)
    else:
        envs = [await asyncio.wait_for(inv.invoke(call("lingers", "1", q="a")), 5)]
    assert [strip(e) for e in envs] == [timeout_env("lingers", "0.05")] * len(envs)
    tasks = list(_runner._held(asyncio.get_running_loop()).tasks)
    assert len(tasks) == len(envs)
    for task in tasks:
        if exc is KeyboardInterrupt:
            with pytest.raises(KeyboardInterrupt):
                task.get_coro().close()
        else:
            assert task.get_coro().close() is None
        task.cancel()
    await asyncio.sleep(0)
