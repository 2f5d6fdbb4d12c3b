"""A call's audit record when the caller cancels as the call's body returns or while an async
sink writes the record.

A turn cancelled in the loop pass its bodies return in: each call still gets its audit record.
The call's record step, handed to a task of its own that the cancellation reached before its
first step, was dropped with that task, and the turn's abort of the call found no record left
to emit: the bodies ran (their side effects done) and no call of the turn had a record.

A call (or a turn) cancelled while an async sink awaits its record: the cancellation reached the
sink's awaitable, and the record was lost without a warning. The cancellation no longer reaches
the sink: it goes on in a task of its own, and the call's abort waits for it within its bound."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolRegistry, middleware as mw, tool

runs: list[int] = []


@tool(side_effecting=True, timeout_s=5)
async def quick(x: int) -> int:
    """Write the number given somewhere and answer with it at once."""
    runs.append(x)
    return x


async def cancelled_and_timed(task: asyncio.Future, caplog: pytest.LogCaptureFixture) -> float:
    """Cancel ``task`` with the package's warnings captured; the seconds until it ended (at most 5)."""
    with caplog.at_level(logging.WARNING, logger="agentkit_tools"):
        task.cancel()
        t0 = time.monotonic()
        await asyncio.wait([task], timeout=5)
        return time.monotonic() - t0


@pytest.mark.parametrize("sink", ["sync", "async"])
@pytest.mark.parametrize("n", [2, 3])
async def test_a_turn_cancelled_as_its_bodies_return_records_every_call(sink: str, n: int) -> None:
    runs.clear()
    records: list[dict[str, Any]] = []

    async def later(rec: dict[str, Any]) -> None:
        await asyncio.sleep(0.01)
        records.append(rec)

    inv = Invoker(
        ToolRegistry([quick]),
        middleware=[mw.audit(records.append if sink == "sync" else later), mw.timeout()],
    )
    calls = [{"id": str(i), "name": "quick", "input": {"x": i}} for i in range(n)]
    turn = asyncio.ensure_future(inv.invoke_many(calls, ToolContext(run_id="r")))
    await asyncio.sleep(0)  # the turn starts its bodies' tasks
    turn.cancel()  # reaches it in the pass the bodies return in
    with pytest.raises(asyncio.CancelledError):
        await turn
    await asyncio.sleep(0.1)
    assert sorted(runs) == list(range(n))
    assert sorted((r["call_id"], r["outcome"], r["attempts"], r["decision"]) for r in records) == [
        (str(i), "ok", 1, "executed") for i in range(n)
    ]


@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
async def test_a_call_cancelled_while_its_async_sink_writes_the_record_keeps_the_record(entry: str) -> None:
    runs.clear()
    records: list[dict[str, Any]] = []
    writing = asyncio.Event()

    async def slow(rec: dict[str, Any]) -> None:
        writing.set()
        await asyncio.sleep(0.05)
        records.append(rec)

    inv = Invoker(ToolRegistry([quick]), middleware=[mw.audit(slow), mw.timeout()])
    call = {"id": "0", "name": "quick", "input": {"x": 0}}
    ctx = ToolContext(run_id="r")
    task = asyncio.ensure_future(inv.invoke(call, ctx) if entry == "invoke" else inv.invoke_many([call], ctx))
    await writing.wait()  # the body returned; its record is in the sink's hands
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert runs == [0]
    assert [(r["call_id"], r["outcome"], r["decision"]) for r in records] == [("0", "ok", "executed")]


LEFT_BEHIND = (
    "audit sink <sink> has not taken the record of an aborted call when the abort's wait ended (at most 1.0 s "
    "from the caller's cancellation or stop, for all the releases and records it waits for); the caller goes on "
    "without it and the sink gets the record when it is done (it is lost if its event loop is closed first)"
)


@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
async def test_a_sink_that_does_not_finish_a_record_holds_the_callers_cancellation_only_until_the_bound(
    entry: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller cancels while an async sink that does not finish is writing the records of
    calls whose bodies returned (one call, a turn of three): the cancellation completes once the
    abort's bound (1 s) has passed, a warning names the sink for each record, and the sink still
    gets each record (the calls' own, `ok`) when it finishes later."""
    runs.clear()
    ids = ["0"] if entry == "invoke" else ["0", "1", "2"]
    writing: list[str] = []
    finish = asyncio.Event()
    got: list[tuple[str, str, str]] = []

    async def sink(rec: dict[str, Any]) -> None:
        writing.append(rec["call_id"])
        await finish.wait()
        got.append((rec["call_id"], rec["outcome"], rec["decision"]))

    inv = Invoker(ToolRegistry([quick]), middleware=[mw.audit(sink), mw.timeout()])
    calls = [{"id": i, "name": "quick", "input": {"x": int(i)}} for i in ids]
    ctx = ToolContext(run_id="r")
    task = asyncio.ensure_future(inv.invoke(calls[0], ctx) if entry == "invoke" else inv.invoke_many(calls, ctx))
    for _ in range(500):
        if len(writing) == len(ids):
            break
        await asyncio.sleep(0.001)
    assert sorted(writing) == ids
    took = await cancelled_and_timed(task, caplog)
    assert (task.done(), task.done() and task.cancelled()) == (True, True)
    assert 0.95 <= took < 2.5, took
    assert [(r.levelname, r.getMessage().replace(repr(sink), "<sink>")) for r in caplog.records] == [
        ("WARNING", LEFT_BEHIND)
    ] * len(ids)
    assert got == []
    finish.set()
    for _ in range(100):
        if len(got) == len(ids):
            break
        await asyncio.sleep(0.01)
    assert sorted(got) == [(i, "ok", "executed") for i in ids]
    assert sorted(runs) == [int(i) for i in ids]


@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
def test_a_record_its_sink_is_writing_when_the_loop_is_closed_is_said_lost(
    entry: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The call's body returned and its async sink is writing the record when the event loop is
    closed: the record is said lost (a warning names the sink), and nothing else is reported (no
    task destroyed while pending)."""
    import gc

    got: list[str] = []

    async def sink(rec: dict[str, Any]) -> None:
        await asyncio.sleep(10)
        got.append(rec["call_id"])

    inv = Invoker(ToolRegistry([quick]), middleware=[mw.audit(sink), mw.timeout()])
    loop = asyncio.new_event_loop()
    c = {"id": "a", "name": "quick", "input": {"x": 1}}
    task = loop.create_task(inv.invoke(c) if entry == "invoke" else inv.invoke_many([c]))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.run_until_complete(asyncio.sleep(0.05))
    with caplog.at_level(logging.WARNING):
        loop.close()
        del task
        gc.collect()
    assert [(r.name, r.levelname, r.getMessage().replace(repr(sink), "<sink>")) for r in caplog.records] == [
        ("agentkit_tools.middleware", "WARNING",
         "audit sink <sink> could not take the record of an aborted call: its event loop is closed (the record is lost)")
    ]
    assert got == []


async def test_a_cancellation_an_async_sink_raises_itself_in_a_turn_is_its_failure_logged_and_the_call_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An async sink whose awaitable raises `CancelledError` of its own (nobody cancelled the
    turn): logged as the sink's failure, on every version, and the call answers as its body did
    (for `invoke`, see test_middleware.py)."""
    async def sink(rec: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        raise asyncio.CancelledError

    inv = Invoker(ToolRegistry([quick]), middleware=[mw.audit(sink), mw.timeout()])
    c = {"id": "a", "name": "quick", "input": {"x": 4}}
    with caplog.at_level(logging.WARNING, logger="agentkit_tools"):
        [env] = await inv.invoke_many([c])
    assert (env["ok"], env["value"]) == (True, 4)
    assert [(r.levelname, r.getMessage().replace(repr(sink), "<sink>"), type(r.exc_info[1]).__name__)
            for r in caplog.records] == [("ERROR", "audit sink <sink> failed (the call's result is unaffected)",
                                          "CancelledError")]



@tool(read_only=True, timeout_s=60)
async def sometimes_waits(x: int) -> int:
    """Answer with the number given: at once for 0, else after a very long wait."""
    if x:
        await asyncio.sleep(3600)
    return x


async def test_a_turn_cancelled_while_one_record_is_written_and_one_body_runs_waits_one_bound_for_both(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Cancelled while its sink (which does not finish) writes the record of a call whose body
    returned and another call's body still runs: the records of both calls are waited for within
    one bound from the cancellation (1 s), not 1 s for the record being written and 1 s more for
    the aborted call's, and each is named in a warning."""
    writing = asyncio.Event()
    finish = asyncio.Event()
    got: list[tuple[str, str]] = []

    async def sink(rec: dict[str, Any]) -> None:
        writing.set()
        await finish.wait()
        got.append((rec["call_id"], rec["outcome"]))

    inv = Invoker(ToolRegistry([sometimes_waits]), middleware=[mw.audit(sink), mw.timeout()])
    calls = [{"id": str(i), "name": "sometimes_waits", "input": {"x": i}} for i in range(2)]
    task = asyncio.ensure_future(inv.invoke_many(calls, ToolContext(run_id="r")))
    await asyncio.wait_for(writing.wait(), 5)
    took = await cancelled_and_timed(task, caplog)
    assert (task.done(), task.done() and task.cancelled()) == (True, True)
    assert 0.95 <= took < 1.6, took  # 2 s: a bound for the record being written, one for the other call
    assert [(r.levelname, r.getMessage().replace(repr(sink), "<sink>")) for r in caplog.records] == [
        ("WARNING", LEFT_BEHIND)
    ] * 2
    finish.set()
    for _ in range(100):
        if len(got) == 2:
            break
        await asyncio.sleep(0.01)
    assert sorted(got) == [("0", "ok"), ("1", "cancelled")]
