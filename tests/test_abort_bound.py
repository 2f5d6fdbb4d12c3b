"""The bound of an aborted call's wait: a caller that cancels a call (or whose call's body stops
the process) waits for the call's release and record at most 1 s in all, however many pipeline
segments a chain of user middleware splits the call into; and nothing an audit sink, a store or
the logging does on the way changes what the caller gets."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolRegistry, middleware as mw, tool
from agentkit_tools.middleware import Middleware
from agentkit_tools.stores import InMemoryStore

from memory_fixtures import ReleaseHeld, store_doc as doc


def call(name: str, cid: str = "c1", **args: Any) -> dict:
    return {"id": cid, "name": name, "input": args}


class Passthrough(Middleware):
    name = "passthrough"

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handler(tc: Any) -> dict:
            return await nxt(tc)

        return handler


@tool(side_effecting=True)
async def charge(card: str, cents: int) -> str:
    """Charge a card an amount in cents; the money is taken at once."""
    await asyncio.sleep(3600)
    return "charged"


RELEASE = "idempotency store has not released the claim on <key> of an aborted call when the abort's wait ended (at most 1.0 s from the caller's cancellation or stop, for all the releases and records it waits for); the caller goes on without it and the release goes on by itself (the claim's lease bounds it)"
RECORD = "audit sink <sink> has not taken the record of an aborted call when the abort's wait ended (at most 1.0 s from the caller's cancellation or stop, for all the releases and records it waits for); the caller goes on without it and the sink gets the record when it is done (it is lost if its event loop is closed first)"


@pytest.mark.parametrize(
    "shape, calls",
    [
        ("audit | mw | idempotency", 1),
        ("audit | mw | audit | mw | idempotency", 1),
        ("audit | mw | idempotency", 3),  # invoke_many of a chain with user middleware
    ],
)
async def test_a_user_middleware_between_segments_does_not_restart_the_abort_bound(
    shape: str, calls: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Each segment of the chain has a step that does not finish (an audit sink, the release of
    the claim): the caller's cancellation waits 1 s for them all, not 1 s per segment, each is
    named in a warning, and each finishes once it can (the records reach their sinks, the claims
    are released)."""
    finish = asyncio.Event()
    got: list[tuple[str, str, str]] = []

    def sink(name: str) -> Any:
        async def sink(rec: dict) -> None:
            await finish.wait()
            got.append((name, rec["call_id"], rec["outcome"]))

        return sink

    store = ReleaseHeld(InMemoryStore(), finish)
    rules: list[Any] = []
    sinks: list[str] = []
    for part in shape.split(" | "):
        if part == "audit":
            sinks.append(f"sink{len(sinks)}")
            rules.append(mw.audit(sink(sinks[-1])))
        elif part == "mw":
            rules.append(Passthrough())
        else:
            rules += [mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, lease_s=30), mw.retry(), mw.timeout()]
    inv = Invoker(ToolRegistry([charge]), middleware=rules)
    ctx = ToolContext(run_id="r")
    ids = [f"c{i}" for i in range(calls)]
    task = asyncio.ensure_future(
        inv.invoke(call("charge", "c0", card="4", cents=0), ctx)
        if calls == 1
        else inv.invoke_many([call("charge", c, card="4", cents=i) for i, c in enumerate(ids)], ctx)
    )
    await asyncio.sleep(0.1)
    assert store.claims() == ["running"] * calls
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        task.cancel()
        t0 = time.monotonic()
        await asyncio.wait([task], timeout=10)
        took = time.monotonic() - t0
    assert task.cancelled() is True
    assert 0.95 <= took < 1.6, took  # 2 s (3 s with two audits) when each segment had its own bound
    said = [r.getMessage() for r in caplog.records]
    for key in store.inner._data:  # type: ignore[attr-defined]
        said = [m.replace(key, "<key>") for m in said]
    for m in inv.middleware:
        if getattr(m, "sink", None) is not None:
            said = [s.replace(repr(m.sink), "<sink>") for s in said]
    assert sorted(said) == sorted([RELEASE] * calls + [RECORD] * (len(sinks) * calls))
    assert got == []
    finish.set()
    for _ in range(200):
        if len(got) == len(sinks) * calls and store.claims() == ["free"] * calls:
            break
        await asyncio.sleep(0.01)
    assert sorted(got) == sorted((s, c, "cancelled") for s in sinks for c in ids)
    assert store.claims() == ["free"] * calls



class Raising(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        raise RuntimeError("filter broke")


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append((type(u.exc_value).__name__, str(u.exc_value), repr(u.object))))
    return seen


@pytest.fixture
def raising_filter(request: pytest.FixtureRequest) -> Any:
    log = logging.getLogger(request.param)
    f = Raising()
    log.addFilter(f)
    yield request.param
    log.removeFilter(f)


@pytest.mark.parametrize("raising_filter", ["agentkit_tools.middleware"], indirect=True)
@pytest.mark.parametrize("what", ["sink", "store"])
async def test_a_logging_filter_that_raises_does_not_change_what_an_aborted_call_does(
    what: str, raising_filter: str, unraisable: list
) -> None:
    """The warning that the abort's wait ended without a sink or a release goes to a logger whose
    filter raises: the caller still gets its cancellation (not an ``internal_error`` envelope),
    the filter's error goes to ``sys.unraisablehook``, and the rest of the abort goes on."""
    finish = asyncio.Event()
    got: list[str] = []

    async def sink(rec: dict) -> None:
        if what == "sink":
            await finish.wait()
        got.append(rec["outcome"])

    store = ReleaseHeld(InMemoryStore(), finish) if what == "store" else ReleaseHeld(InMemoryStore(), asyncio.Event())
    if what == "sink":
        store.finish.set()
    inv = Invoker(ToolRegistry([charge]), middleware=[mw.audit(sink), mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, lease_s=30), mw.retry(), mw.timeout()])
    task = asyncio.ensure_future(inv.invoke(call("charge", card="4", cents=1), ToolContext(run_id="r")))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.wait([task], timeout=10)
    assert task.cancelled() is True  # was: {"ok": False, "error": {"code": "internal_error", ...}}
    assert unraisable == [("RuntimeError", "filter broke", "<Logger agentkit_tools.middleware (WARNING)>")]
    finish.set()
    for _ in range(200):
        if got and store.claims() == ["free"]:
            break
        await asyncio.sleep(0.01)
    assert (got, store.claims()) == (["cancelled"], ["free"])


@pytest.mark.parametrize("raising_filter", ["agentkit_tools.invoker"], indirect=True)
async def test_a_logging_filter_that_raises_does_not_replace_a_fault_envelope(raising_filter: str, unraisable: list) -> None:
    """A user middleware answers with no envelope (a fault around the tool, logged on
    ``agentkit_tools.invoker``, whose filter raises): the caller still gets the fault envelope,
    and the filter's error goes to ``sys.unraisablehook``."""

    class Broken(Middleware):
        name = "broken"

        def wrap(self, invoker: Any, nxt: Any) -> Any:
            async def handler(tc: Any) -> Any:
                return "not an envelope"

            return handler

    inv = Invoker(ToolRegistry([charge]), middleware=[Broken(), *mw.default_chain()])
    env = await inv.invoke(call("charge", card="4", cents=1))
    assert (env["ok"], env["error"]["code"]) == (False, "internal_error")
    assert unraisable == [("RuntimeError", "filter broke", "<Logger agentkit_tools.invoker (WARNING)>")]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_from_one_call_of_a_turn_waits_for_the_turns_aborts_within_one_bound(stop: type, caplog: pytest.LogCaptureFixture) -> None:
    """One body of a turn of four stops the process; the audit sink never finishes: the stop
    comes out of ``asyncio.run`` once the one bound of the turn's aborts has passed (1 s), not
    1 s for the call that stopped and 1 s more for the three others, and each record's sink is
    named in a warning."""
    started: list[int] = []

    @tool(read_only=True)
    async def waits(x: int) -> int:
        """Wait a long time for the thing to happen, then answer."""
        started.append(x)
        if x == 0:
            await asyncio.sleep(0.05)
            raise stop()
        await asyncio.sleep(3600)
        return x

    async def sink(rec: dict) -> None:
        await asyncio.Event().wait()

    inv = Invoker(ToolRegistry([waits]), middleware=[mw.audit(sink), *mw.default_chain()[1:]])
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"), pytest.raises(stop):
        asyncio.run(inv.invoke_many([call("waits", f"c{i}", x=i) for i in range(4)]))
    took = time.monotonic() - t0
    assert sorted(started) == [0, 1, 2, 3]
    assert 0.95 <= took < 1.6, took  # 2 s: one bound for the call that stopped, one for the rest
    assert [r.getMessage().replace(repr(sink), "<sink>") for r in caplog.records] == [RECORD] * 4


async def test_a_sync_sink_that_blocks_holds_the_cancelled_caller_as_long_as_it_blocks(caplog: pytest.LogCaptureFixture) -> None:
    """The abort's bound applies to awaitables: a sync sink that blocks the loop 1.3 s holds the
    cancelled caller that long, gets the record, and no warning says it was left behind."""
    got: list[str] = []

    returned: list[float] = []

    def sink(rec: dict) -> None:
        time.sleep(1.3)
        got.append(rec["outcome"])
        returned.append(time.monotonic())

    inv = Invoker(ToolRegistry([charge]), middleware=[mw.audit(sink), *mw.default_chain()[1:]])
    task = asyncio.ensure_future(inv.invoke(call("charge", card="4", cents=1)))
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        task.cancel()
        t0 = time.monotonic()
        await asyncio.wait([task], timeout=10)
        took = time.monotonic() - t0
    assert task.cancelled() is True
    assert (got, caplog.records) == (["cancelled"], [])
    assert len(returned) == 1
    resumed = t0 + took
    # Held by the sink itself: the caller resumed after the sink returned (1.3 s after the
    # cancel at least), and not a further abort bound (1 s) after that.
    assert 1.3 <= returned[0] - t0 <= took, (returned[0] - t0, took)
    assert 0 <= resumed - returned[0] < 1.0, resumed - returned[0]



def test_a_call_closed_with_its_loop_whose_approver_stops_on_the_close_still_releases_and_records(unraisable: list) -> None:
    """A call is still waiting for its async approver when its event loop is closed and it is
    collected; the approver's clean-up raises ``KeyboardInterrupt`` at the close: the call is
    aborted without its loop all the same, its claim released and its record emitted (neither
    needs to wait), and the stop is reported, nowhere to go."""
    import gc

    got: list[str] = []

    @tool(side_effecting=True, requires_approval=True)
    async def refund(card: str) -> str:
        """Refund the last charge on a card."""
        return card

    async def approver(tool: Any, args: Any, ctx: Any) -> bool:
        try:
            await asyncio.sleep(3600)
        finally:
            raise KeyboardInterrupt()

    store = InMemoryStore()
    inv = Invoker(ToolRegistry([refund]), middleware=[mw.audit(lambda r: got.append(r["outcome"])), mw.idempotency(store=store, lease_s=30), mw.approval(approver), mw.retry(), mw.timeout()])
    loop = asyncio.new_event_loop()
    task = loop.create_task(inv.invoke(call("refund", card="4"), ToolContext(run_id="r")))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.run_until_complete(asyncio.sleep(0.05))
    assert [doc(v)["s"] for v in store._data.values()] == ["running"]  # type: ignore[attr-defined]
    loop.close()
    del task
    gc.collect()
    assert (got, [doc(v)["s"] for v in store._data.values()]) == (["cancelled"], ["free"])  # type: ignore[attr-defined]
    assert [u[0] for u in unraisable] == ["KeyboardInterrupt"]


@pytest.mark.parametrize("how", ["invoke", "invoke_many"])
@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("where", ["sink", "store"])
@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_raised_by_a_sink_or_a_store_during_an_abort_propagates_once_the_abort_is_done(
    stop: type, where: str, kind: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller cancels its call(s); the audit sink, or the store releasing the claim, raises
    ``KeyboardInterrupt``/``SystemExit`` (at once, or from the awaitable it returns): the stop
    comes out of ``asyncio.run`` once the abort is done, every record emitted (the claim a
    stopped store did not release stays until its lease runs out), and asyncio reports nothing
    (no task destroyed while pending, no exception never retrieved)."""
    got: list[tuple[str, str]] = []

    async def raising() -> None:
        await asyncio.sleep(0)
        raise stop()

    def sink(rec: dict) -> Any:
        got.append((rec["call_id"], rec["outcome"]))
        if where == "sink" and rec["call_id"] == "c0":
            if kind == "sync":
                raise stop()
            return raising()
        return None

    class Store(ReleaseHeld):
        stopped = False

        def compare_and_set(self, key: str, expected: Any, value: Any) -> Any:  # type: ignore[override]
            if where == "store" and not self.stopped and expected is not None and doc(expected).get("s") == "running":
                self.stopped = True  # the first release only
                if kind == "sync":
                    raise stop()
                return raising()
            return self.inner.compare_and_set(key, expected, value)

    store = Store(InMemoryStore(), asyncio.Event())
    inv = Invoker(ToolRegistry([charge]), middleware=[mw.audit(sink), mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, lease_s=30), mw.retry(), mw.timeout()])
    ids = ["c0"] if how == "invoke" else ["c0", "c1"]

    async def main() -> None:
        ctx = ToolContext(run_id="r")
        task = asyncio.ensure_future(
            inv.invoke(call("charge", "c0", card="4", cents=0), ctx) if how == "invoke"
            else inv.invoke_many([call("charge", c, card="4", cents=i) for i, c in enumerate(ids)], ctx)
        )
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.wait([task], timeout=10)

    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(stop):
        asyncio.run(main())
    took = time.monotonic() - t0
    import gc

    gc.collect()
    assert took < 1.0, took
    assert sorted(got) == [(c, "cancelled") for c in ids]
    released = ["free"] * len(ids) if where == "sink" else ["running"] + ["free"] * (len(ids) - 1)
    assert sorted(store.claims(), reverse=True) == sorted(released, reverse=True)
    # (the stop leaves the caller's own task with an exception nobody retrieves, as any task a
    # stop ends: asyncio says so of that task, and only of that one)
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio" or r.levelno >= logging.ERROR]
    assert [m.split(" coro=<")[1].split("()")[0] if "never retrieved" in m else m for m in said] == [
        "Invoker.invoke" if how == "invoke" else "Invoker.invoke_many"
    ]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 does not count a task's cancellation requests: a call's task already being cancelled is asked again, which cuts its abort short")
@pytest.mark.parametrize("rounds", [5])
def test_invoke_many_through_user_middleware_cancelled_twice_as_asyncio_run_does_records_each_call_once(rounds: int) -> None:
    """``asyncio.run``'s shut-down cancels every task, the calls' tasks of an ``invoke_many``
    through user middleware and the task awaiting it: the calls' tasks are not cancelled a
    second time by the turn (that cut each call's abort short, its record lost when the loop
    closed right after); each call gets exactly one record and its claim is released."""
    for _ in range(rounds):
        got: list[tuple[str, str]] = []

        async def sink(rec: dict) -> None:
            await asyncio.sleep(0.2)
            got.append((rec["call_id"], rec["outcome"]))

        store = InMemoryStore()
        # (the release and the record in the segment the cancellation reaches last)
        inv = Invoker(ToolRegistry([charge]), middleware=[mw.audit(sink), mw.idempotency(store=store, lease_s=30), Passthrough(), mw.retry(), mw.timeout()])
        ids = ["c0", "c1", "c2"]

        async def main() -> None:
            outer = asyncio.ensure_future(inv.invoke_many([call("charge", c, card="4", cents=i) for i, c in enumerate(ids)], ToolContext(run_id="r")))
            await asyncio.sleep(0.1)
            for t in asyncio.all_tasks():
                if t is not outer and t is not asyncio.current_task():
                    t.cancel()  # the calls' tasks first, as the shut-down may
            await asyncio.sleep(0)
            outer.cancel()
            await asyncio.wait([outer], timeout=10)
            assert outer.cancelled() is True

        asyncio.run(main())
        assert sorted(got) == [(c, "cancelled") for c in ids]
        assert [doc(v)["s"] for v in store._data.values()] == ["free"] * 3  # type: ignore[attr-defined]
