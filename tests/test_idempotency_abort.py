"""A side-effecting call cancelled while it holds its shared idempotency claim.

The claim is released at once (compare-and-set from exactly the record this call wrote), so an
identical call — in the same process or in another one sharing the store — goes on at once
instead of waiting for the lease to run out. A cancelled call leaves no result: like a call that
failed, the identical call then runs the tool (a body cancelled after it started may have done
its side effect; waiting for the lease would only delay the second run, not prevent it).

Every store kind the suite knows: in memory, files, Redis and PostgreSQL (the servers come from
``scripts/services``; see ``memory_fixtures``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolRegistry, _core, middleware as mw, tool

from memory_fixtures import PG_TABLE, POSTGRES_DSN, REDIS_URL, SERVER_KINDS, STORE_KINDS, ReleaseHeld, open_store

ROOT = Path(__file__).resolve().parent.parent

#: The claim's lease in these tests (seconds): a waiter that waits for it is plainly seen.
LEASE_S = 30.0
#: How long an identical call may take once the claim is released: a few store round trips and
#: the waiters' poll interval (0.05 s), far below the lease.
PROMPT_S = 1.0

CALL_ARGS = {"card": "4242", "cents": 900}


def chain(store: Any) -> list[Any]:
    return [mw.audit(), mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, lease_s=LEASE_S), mw.retry(), mw.timeout()]


def call(i: int) -> dict[str, Any]:
    return {"id": f"c{i}", "name": "charge", "input": dict(CALL_ARGS)}


def claim_key(run_id: str) -> str:
    return _core.idempotency_store_key(run_id, "charge", json.dumps(CALL_ARGS, separators=(",", ":"), sort_keys=True))


def charging(runs: list[str], first_started: asyncio.Event, hang_first: bool = True) -> Any:
    """A tool whose first run hangs until cancelled (``hang_first``); other runs answer at once."""

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        if hang_first and len(runs) == 1:
            first_started.set()
            await asyncio.sleep(3600)
        return f"charge #{len(runs)} of {cents} on {card}"

    return charge


def doc(value: Any) -> Any:
    """A store document as JSON (stores hand back the text they were given, or parsed JSON)."""
    return json.loads(value) if isinstance(value, str) else value


async def cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_call_cancelled_while_running_releases_its_claim_at_once(kind, tmp_path):
    """The claiming call's body started, then its task was cancelled: an identical call after it
    claims at once and runs the tool (the cancelled run left no result)."""
    runs: list[str] = []
    started = asyncio.Event()
    async with open_store(kind, tmp_path) as store:
        inv = Invoker(ToolRegistry([charging(runs, started)]), middleware=chain(store))
        ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
        first = asyncio.create_task(inv.invoke(call(1), ctx))
        await asyncio.wait_for(started.wait(), 30)
        assert doc(await store.get(claim_key(ctx.run_id)))["s"] == "running"
        await cancel(first)
        assert doc(await store.get(claim_key(ctx.run_id))) == {"s": "free"}
        t0 = time.monotonic()
        env = await asyncio.wait_for(inv.invoke(call(2), ctx), 2 * LEASE_S)
        waited = time.monotonic() - t0
    assert env["ok"] is True and env["value"] == "charge #2 of 900 on 4242" and "deduplicated" not in env
    assert runs == ["4242", "4242"]
    assert waited < PROMPT_S, waited


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_waiters_in_this_and_another_worker_go_on_when_the_claimer_is_cancelled(kind, tmp_path):
    """Two identical calls already waiting for the claimer — one in the same Invoker (woken in
    process), one in another Invoker sharing the store (as another process would) — go on as soon
    as the claimer is cancelled: one of them runs the tool, the other gets its result."""
    runs: list[str] = []
    started = asyncio.Event()
    charge = charging(runs, started)
    async with open_store(kind, tmp_path) as store:
        here, elsewhere = (Invoker(ToolRegistry([charge]), middleware=chain(store)) for _ in range(2))
        ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
        first = asyncio.create_task(here.invoke(call(1), ctx))
        await asyncio.wait_for(started.wait(), 30)
        waiters = [asyncio.create_task(here.invoke(call(2), ctx)), asyncio.create_task(elsewhere.invoke(call(3), ctx))]
        await asyncio.sleep(0.3)  # both are waiting now (the other worker polls the store)
        assert not any(w.done() for w in waiters)
        t0 = time.monotonic()
        await cancel(first)
        envs = await asyncio.wait_for(asyncio.gather(*waiters), 2 * LEASE_S)
        waited = time.monotonic() - t0
    assert runs == ["4242", "4242"]
    assert [e["value"] for e in envs] == ["charge #2 of 900 on 4242"] * 2
    assert sorted(e.get("deduplicated", False) for e in envs) == [False, True]
    assert waited < PROMPT_S, waited


class CasThenHang:
    """A store whose compare-and-sets write, then hang while ``hang`` is set (the answer of a
    loaded server that never arrives): the call is cancelled with its claim written but not
    yet acknowledged."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hang = True
        self.written = asyncio.Event()

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: Any) -> None:
        await self.inner.set(key, value)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        won = await self.inner.compare_and_set(key, expected, value)
        if self.hang:
            self.written.set()
            await asyncio.sleep(3600)
        return bool(won)


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_call_cancelled_while_its_claim_is_being_written_releases_it(kind, tmp_path):
    """Cancelled before its body started, while the store had written its claim but not answered:
    the claim is released all the same, and the identical call runs the tool once at once."""
    runs: list[str] = []
    started = asyncio.Event()
    async with open_store(kind, tmp_path) as inner:
        store = CasThenHang(inner)
        inv = Invoker(ToolRegistry([charging(runs, started, hang_first=False)]), middleware=chain(store))
        ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
        first = asyncio.create_task(inv.invoke(call(1), ctx))
        await asyncio.wait_for(store.written.wait(), 30)
        assert doc(await inner.get(claim_key(ctx.run_id)))["s"] == "running"
        store.hang = False
        await cancel(first)
        assert doc(await inner.get(claim_key(ctx.run_id))) == {"s": "free"}
        t0 = time.monotonic()
        env = await asyncio.wait_for(inv.invoke(call(2), ctx), 2 * LEASE_S)
        waited = time.monotonic() - t0
    assert env["ok"] is True and env["value"] == "charge #1 of 900 on 4242" and "deduplicated" not in env
    assert runs == ["4242"]
    assert waited < PROMPT_S, waited


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_the_release_never_erases_another_workers_claim(kind, tmp_path):
    """The cancelled call's record was taken over meanwhile (its lease had run out and another
    worker claimed the call): the release leaves the other worker's claim as it is."""
    runs: list[str] = []
    started = asyncio.Event()
    async with open_store(kind, tmp_path) as store:
        inv = Invoker(ToolRegistry([charging(runs, started)]), middleware=chain(store))
        ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
        key = claim_key(ctx.run_id)
        first = asyncio.create_task(inv.invoke(call(1), ctx))
        await asyncio.wait_for(started.wait(), 30)
        mine = await store.get(key)
        theirs = json.dumps({"s": "running", "owner": "another-worker", "until": time.time() + 600})
        assert await store.compare_and_set(key, mine, theirs) is True
        await cancel(first)
        assert doc(await store.get(key)) == json.loads(theirs)
    assert runs == ["4242"]


class SetThenHang:
    """A store whose ``set`` writes, then hangs (the answer never arrives)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.written = asyncio.Event()

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: Any) -> None:
        await self.inner.set(key, value)
        self.written.set()
        await asyncio.sleep(3600)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        return bool(await self.inner.compare_and_set(key, expected, value))


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_call_cancelled_after_the_tool_returned_stores_its_result(kind, tmp_path):
    """The tool returned and the result was being stored when the call was cancelled: the
    result is stored all the same, and another worker's identical call is answered from it
    without running the tool again."""
    runs: list[str] = []
    started = asyncio.Event()
    charge = charging(runs, started, hang_first=False)
    async with open_store(kind, tmp_path) as inner:
        here = Invoker(ToolRegistry([charge]), middleware=chain(SetThenHang(inner)))
        elsewhere = Invoker(ToolRegistry([charge]), middleware=chain(inner))
        ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
        first = asyncio.create_task(here.invoke(call(1), ctx))
        await asyncio.wait_for(here.middleware[3].store.written.wait(), 30)
        await cancel(first)
        assert doc(await inner.get(claim_key(ctx.run_id))) == {"s": "done", "value": "charge #1 of 900 on 4242"}
        env = await asyncio.wait_for(elsewhere.invoke(call(2), ctx), 2 * LEASE_S)
    assert (env["ok"], env["value"], env["deduplicated"]) == (True, "charge #1 of 900 on 4242", True)
    assert runs == ["4242"]


class FailingRelease:
    """A store that fails every compare-and-set after the first (the claim)."""

    def __init__(self, inner: Any, raised: BaseException | None = None) -> None:
        self.inner = inner
        self.raised = raised if raised is not None else ConnectionError("the store went away")
        self.cas_calls = 0

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: Any) -> None:
        await self.inner.set(key, value)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        self.cas_calls += 1
        if self.cas_calls > 1:
            raise self.raised
        return bool(await self.inner.compare_and_set(key, expected, value))


@pytest.mark.parametrize(
    "raised",
    [
        ConnectionError("the store went away"),
        pytest.param(
            asyncio.CancelledError(),
            marks=pytest.mark.skipif(
                sys.version_info < (3, 11),
                reason="a Python 3.10 task keeps no count of its cancellations, so a store's own "
                "CancelledError cannot be told from the caller's (docs/middleware.md)",
            ),
        ),
        GeneratorExit(),
        BaseException("odd"),
    ],
    ids=["ConnectionError", "its-own-CancelledError", "its-own-GeneratorExit", "BaseException"],
)
async def test_a_store_failing_on_release_is_logged_and_the_cancellation_still_propagates(caplog, raised):
    """Whatever the store raises itself on the release (a ``BaseException`` other than a request
    to stop included) is its failure: logged, the record emitted, the caller's cancellation
    propagated."""
    from agentkit_tools import InMemoryStore

    runs: list[str] = []
    started = asyncio.Event()
    store = FailingRelease(InMemoryStore(), raised)
    records: list[dict[str, Any]] = []
    inv = Invoker(
        ToolRegistry([charging(runs, started)]),
        middleware=[mw.audit(sink=records.append), *chain(store)[1:]],
    )
    ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
    first = asyncio.create_task(inv.invoke(call(1), ctx))
    await asyncio.wait_for(started.wait(), 30)
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        await cancel(first)
    assert store.cas_calls == 2
    released = [r for r in caplog.records if "release" in r.getMessage()]
    assert len(released) == 1 and released[0].exc_info is not None
    assert released[0].exc_info[0] is type(raised)
    # the audit record of the cancelled call is still emitted
    assert [(r["outcome"], r["attempts"], r["decision"]) for r in records] == [("cancelled", 1, "failed")]
    assert runs == ["4242"]


CANCELLED_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from agentkit_tools import Invoker, PostgresStore, RedisStore, ToolContext, ToolRegistry, middleware as mw, tool

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        \"\"\"Charge a card an amount in cents; the money is taken at once.\"\"\"
        print("started", flush=True)
        await asyncio.sleep(3600)
        return "never"

    async def main(kind, where, run_id, lease_s):
        store = RedisStore(where, namespace=run_id) if kind == "redis" else PostgresStore(where, table=sys.argv[5])
        chain = [mw.audit(), mw.approval(), mw.repeat_guard(), mw.idempotency(store=store, lease_s=float(lease_s)), mw.retry(), mw.timeout()]
        inv = Invoker(ToolRegistry([charge]), middleware=chain)
        call = {"id": "w1", "name": "charge", "input": {"card": "4242", "cents": 900}}
        task = asyncio.create_task(inv.invoke(call, ToolContext(run_id=run_id)))
        assert await asyncio.to_thread(sys.stdin.readline) == "cancel\\n"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            print("cancelled", flush=True)
        await asyncio.sleep(3600)  # the process lives on: only the release can free the claim

    asyncio.run(main(*sys.argv[1:5]))
    """
)


@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_a_worker_in_another_process_goes_on_when_the_claimer_is_cancelled(kind, tmp_path):
    """Another process claimed the call and its task was cancelled while the tool ran (the
    process lives on): this process's identical call, already waiting, runs the tool at once."""
    run_id = f"conv-{uuid.uuid4().hex}"
    where = REDIS_URL if kind == "redis" else POSTGRES_DSN
    script = tmp_path / "worker.py"
    script.write_text(CANCELLED_WORKER)
    proc = subprocess.Popen(
        [sys.executable, str(script), kind, where, run_id, str(LEASE_S), PG_TABLE],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    runs: list[str] = []

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        return f"charged {cents} on {card}"

    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)  # type: ignore[union-attr]
        assert line == "started\n"
        async with open_store(kind, tmp_path) as store:
            if kind == "redis":
                store = type(store)(REDIS_URL, namespace=run_id)
            inv = Invoker(ToolRegistry([charge]), middleware=chain(store))
            waiter = asyncio.create_task(inv.invoke({"id": "w2", "name": "charge", "input": dict(CALL_ARGS)}, ToolContext(run_id=run_id)))
            await asyncio.sleep(0.3)
            assert not waiter.done()  # polling the other process's claim
            t0 = time.monotonic()
            proc.stdin.write("cancel\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)  # type: ignore[union-attr]
            assert line == "cancelled\n"
            env = await asyncio.wait_for(waiter, 2 * LEASE_S)
            waited = time.monotonic() - t0
            if kind == "redis":
                keys = await store.client.keys(f"{run_id}:*")
                if keys:
                    await store.client.delete(*keys)
                await store.aclose()
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stdin.close()  # type: ignore[union-attr]
    assert (env["ok"], env["value"], "deduplicated" in env) == (True, "charged 900 on 4242", False)
    assert runs == ["4242"]
    assert waited < PROMPT_S, waited


class SlowRelease:
    """A store whose release (the compare-and-set of a claim back to free) waits until told."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.releasing = asyncio.Event()
        self.go_on = asyncio.Event()
        self.released: list[Any] = []

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: str) -> None:
        await self.inner.set(key, value)

    async def compare_and_set(self, key: str, expected: Any, value: str) -> bool:
        if expected is not None and doc(value) == {"s": "free"}:
            self.releasing.set()
            await self.go_on.wait()
            won = await self.inner.compare_and_set(key, expected, value)
            self.released.append(won)
            return won
        return await self.inner.compare_and_set(key, expected, value)


async def test_a_call_cancelled_again_while_it_is_aborted_still_releases_its_claim_and_emits_its_record():
    """Cancelled while running, then cancelled again while its release awaits the store (the
    abort's steps are shielded): the second cancellation propagates at once, and the abort goes on
    by itself: the claim released, then the audit record (``cancelled``) emitted."""
    from agentkit_tools import InMemoryStore

    runs: list[str] = []
    started = asyncio.Event()
    store = SlowRelease(InMemoryStore())
    records: list[dict[str, Any]] = []
    inv = Invoker(ToolRegistry([charging(runs, started)]), middleware=[mw.audit(sink=records.append), *chain(store)[1:]])
    ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
    first = asyncio.create_task(inv.invoke(call(1), ctx))
    await asyncio.wait_for(started.wait(), 30)
    first.cancel()
    await asyncio.wait_for(store.releasing.wait(), 30)
    await cancel(first)  # cancelled again while the release awaits
    assert (store.released, records) == ([], [])
    store.go_on.set()
    for _ in range(100):
        if records:
            break
        await asyncio.sleep(0.01)
    assert store.released == [True]
    assert doc(await store.inner.get(claim_key(ctx.run_id))) == {"s": "free"}
    assert [(r["outcome"], r["attempts"], r["decision"]) for r in records] == [("cancelled", 1, "failed")]
    assert runs == ["4242"]


async def test_a_call_cancelled_again_while_it_is_aborted_ends_its_span_and_logs_nothing(
    span_exporter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The rest of the abort goes on in a task of its own: it ends the call's ``execute_tool``
    span with its record, and the context that span was made current in (the caller's task's)
    is not restored from there (that fails, logged as an error by opentelemetry)."""
    from agentkit_tools import InMemoryStore

    runs: list[str] = []
    started = asyncio.Event()
    store = SlowRelease(InMemoryStore())
    inv = Invoker(ToolRegistry([charging(runs, started)]), middleware=chain(store))
    ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
    first = asyncio.create_task(inv.invoke(call(1), ctx))
    await asyncio.wait_for(started.wait(), 30)
    first.cancel()
    await asyncio.wait_for(store.releasing.wait(), 30)
    caplog.clear()
    await cancel(first)  # cancelled again while the release awaits
    store.go_on.set()
    for _ in range(100):
        if span_exporter.get_finished_spans():
            break
        await asyncio.sleep(0.01)
    assert store.released == [True]
    assert [(s.name, dict(s.attributes)) for s in span_exporter.get_finished_spans()] == [
        ("execute_tool", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "charge", "gen_ai.tool.call.id": "c1",
            "agentkit.tool.args_hash": _core.canonical_args(CALL_ARGS)[1], "agentkit.tool.outcome": "cancelled",
            "agentkit.tool.decision": "failed", "agentkit.tool.attempts": 1,
        })
    ]
    assert [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == []


# ------------------------------------------------------------------ a request to stop the process


def fresh_store(kind: str, tmp_path: Path, shared: dict[str, Any]) -> Any:
    """The store of one event loop, as one process would open it: a new client of the same
    data (files, Redis namespace, PostgreSQL table); in memory the one store there is."""
    from agentkit_tools import FileStore, InMemoryStore, PostgresStore, RedisStore

    if kind == "memory":
        return shared.setdefault("memory", InMemoryStore())
    if kind == "file":
        return FileStore(tmp_path / "store")
    if kind == "redis":
        return RedisStore(REDIS_URL, namespace=shared.setdefault("namespace", f"test-{uuid.uuid4().hex}"))
    return PostgresStore(POSTGRES_DSN, table=PG_TABLE)


async def closed(store: Any) -> None:
    if hasattr(store, "aclose"):
        await store.aclose()


@pytest.mark.parametrize("path", ["invoke", "invoke_many"])
@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("kind", STORE_KINDS)
def test_a_stop_raised_by_the_body_releases_its_claim_before_it_propagates(kind, stop, path, tmp_path):
    """A body raises a request to stop the process under ``asyncio.run`` while its call holds
    the shared claim: the stop comes out of ``asyncio.run``, the claim is free by then, the call's
    record says ``cancelled``, and an identical call in a new loop with a new client of the store
    (as another process would make it) runs the tool at once instead of waiting for the lease."""
    runs: list[str] = []
    records: list[tuple[str, str, str]] = []
    shared: dict[str, Any] = {}
    run_id = f"conv-{uuid.uuid4().hex}"

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        if len(runs) == 1:
            await asyncio.sleep(0)
            raise stop()
        return f"charge #{len(runs)} of {cents} on {card}"

    def invoker(store: Any) -> Invoker:
        sink = mw.audit(sink=lambda r: records.append((r["call_id"], r["outcome"], r["decision"])))
        return Invoker(ToolRegistry([charge]), middleware=[sink, *chain(store)[1:]])

    async def first() -> None:
        store = fresh_store(kind, tmp_path, shared)
        try:
            inv = invoker(store)
            await (inv.invoke(call(1), ToolContext(run_id=run_id)) if path == "invoke" else inv.invoke_many([call(1)], ToolContext(run_id=run_id)))
        finally:
            await closed(store)

    async def claim() -> Any:
        store = fresh_store(kind, tmp_path, shared)
        try:
            return doc(await store.get(claim_key(run_id)))
        finally:
            await closed(store)

    async def again() -> tuple[dict[str, Any], float]:
        store = fresh_store(kind, tmp_path, shared)
        try:
            t0 = time.monotonic()
            env = await asyncio.wait_for(invoker(store).invoke(call(2), ToolContext(run_id=run_id)), 2 * LEASE_S)
            return env, time.monotonic() - t0
        finally:
            await closed(store)

    with pytest.raises(stop):
        asyncio.run(first())
    assert asyncio.run(claim()) == {"s": "free"}
    assert records == [("c1", "cancelled", "failed")]
    env, waited = asyncio.run(again())
    assert (env["ok"], env["value"], "deduplicated" in env) == (True, "charge #2 of 900 on 4242", False)
    assert runs == ["4242", "4242"]
    assert waited < PROMPT_S, waited


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
def test_a_stop_whose_release_never_ends_propagates_after_the_bound_and_says_so(stop, caplog):
    """The store never answers the release of a stopped call: the stop comes out of
    ``asyncio.run`` once the abort's bound (1 s) has passed, the claim left to its lease, and the
    warning names the claim; nothing else is reported (no task destroyed while pending)."""
    from agentkit_tools import InMemoryStore

    runs: list[str] = []
    run_id = f"conv-{uuid.uuid4().hex}"
    store = ReleaseHeld(InMemoryStore())

    @tool(side_effecting=True)
    async def charge(card: str, cents: int) -> str:
        """Charge a card an amount in cents; the money is taken at once."""
        runs.append(card)
        raise stop()

    inv = Invoker(ToolRegistry([charge]), middleware=chain(store))
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(stop):
        asyncio.run(inv.invoke(call(1), ToolContext(run_id=run_id)))
    took = time.monotonic() - t0
    assert 0.95 <= took < 5, took
    assert doc(asyncio.run(store.inner.get(claim_key(run_id))))["s"] == "running"
    key = claim_key(run_id)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [(
        "agentkit_tools.middleware", "WARNING",
        f"idempotency store has not released the claim on {key} of an aborted call when the abort's "
        "wait ended (at most 1.0 s from the caller's cancellation or stop, for all the releases and "
        "records it waits for); the caller goes on without it and the release goes on by itself (the "
        "claim's lease bounds it)",
    )]
    assert runs == ["4242"]


async def test_a_release_that_does_not_finish_does_not_hold_the_callers_cancellation(caplog):
    """The store does not answer the release of a cancelled call: the cancellation completes
    once the abort's bound (1 s) has passed, a warning names the claim, and the call's record is
    emitted once the release is done."""
    from agentkit_tools import InMemoryStore

    runs: list[str] = []
    started = asyncio.Event()
    finish = asyncio.Event()
    records: list[tuple[str, str]] = []

    store = ReleaseHeld(InMemoryStore(), finish)
    inv = Invoker(
        ToolRegistry([charging(runs, started)]),
        middleware=[mw.audit(sink=lambda r: records.append((r["call_id"], r["outcome"]))), *chain(store)[1:]],
    )
    ctx = ToolContext(run_id=f"conv-{uuid.uuid4().hex}")
    first = asyncio.create_task(inv.invoke(call(1), ctx))
    await asyncio.wait_for(started.wait(), 30)
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        first.cancel()
        t0 = time.monotonic()
        await asyncio.wait([first], timeout=5)
        took = time.monotonic() - t0
    assert (first.done(), first.done() and first.cancelled()) == (True, True)
    assert 0.95 <= took < 5, took
    key = claim_key(ctx.run_id)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(
        "WARNING",
        f"idempotency store has not released the claim on {key} of an aborted call when the abort's "
        "wait ended (at most 1.0 s from the caller's cancellation or stop, for all the releases and "
        "records it waits for); the caller goes on without it and the release goes on by itself (the "
        "claim's lease bounds it)",
    )]
    assert (records, doc(await store.get(key))["s"]) == ([], "running")
    finish.set()
    for _ in range(100):
        if records:
            break
        await asyncio.sleep(0.01)
    assert (records, doc(await store.get(key))) == ([("c1", "cancelled")], {"s": "free"})
