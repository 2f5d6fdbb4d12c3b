"""Hostile review of the call pipeline (core state machine + Python drivers): host callbacks that
fail with a ``BaseException``, a cancelled half-open trial of the circuit breaker, shared-store
leases that never run out, user middleware that misbehaves, contexts that fail to read."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolRegistry, dispatch, middleware as mw, tool
from agentkit_tools.middleware import Middleware
from agentkit_tools.stores import InMemoryStore


class Boom(BaseException):
    """A BaseException that is neither a stop of the process nor a cancellation."""


RUNS: list[int] = []


@tool(side_effecting=True)
async def pay(cents: int) -> str:
    """Pay cents to the vendor and return a receipt."""
    RUNS.append(cents)
    await asyncio.sleep(0.05)
    return f"paid {cents}"


@tool(side_effecting=True, requires_approval=True)
def refund(cents: int) -> str:
    """Refund cents to the customer and return a receipt."""
    RUNS.append(cents)
    return f"refunded {cents}"


@tool(read_only=True)
async def probe(mode: str) -> str:
    """Probe the backend: fail, hang or answer depending on mode."""
    if mode == "hang":
        await asyncio.sleep(30)
    if mode == "fail":
        raise ConnectionError("backend down")
    return "healthy"


@pytest.fixture(autouse=True)
def _clear_runs():
    RUNS.clear()
    yield
    RUNS.clear()


def _call(name: str, cid: str = "c1", **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "input": args}


def _code(env: dict[str, Any]) -> str:
    return "ok" if env["ok"] else env["error"]["code"]


class Ctx:
    def __init__(self, run_id: str = "run-1") -> None:
        self.run_id = run_id


async def _no_sleep(_: float) -> None:
    return None


# ------------------------------------------------------------------ circuit breaker


async def test_cancelled_half_open_trial_frees_the_trial_slot():
    inv = Invoker(
        ToolRegistry([probe]),
        middleware=[mw.retry(max_attempts=1, sleep=_no_sleep, breaker_threshold=1, breaker_cooldown_s=0.05)],
    )
    assert _code(await inv.invoke(_call("probe", mode="fail"))) == "internal_error"
    assert _code(await inv.invoke(_call("probe", mode="ok"))) == "circuit_open"
    await asyncio.sleep(0.1)
    trial = asyncio.ensure_future(inv.invoke(_call("probe", mode="hang")))
    await asyncio.sleep(0.05)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    # The cancelled trial said nothing about the backend: the next call is the trial.
    env = await inv.invoke(_call("probe", mode="ok"))
    assert {k: v for k, v in env.items() if k != "elapsed_ms"} == {"ok": True, "value": "healthy"}
    assert _code(await inv.invoke(_call("probe", mode="ok"))) == "ok"


# ------------------------------------------------------------------ shared idempotency store


@pytest.mark.parametrize("chain", ["lease_s=inf", "timeout=30 days"])
async def test_infinite_or_longest_lease_still_claims_the_call(chain):
    store = InMemoryStore()

    def rules() -> list[Any]:
        if chain == "lease_s=inf":
            return [mw.idempotency(store, lease_s=float("inf")), mw.timeout()]
        return [mw.idempotency(store), mw.timeout(2_592_000)]

    a, b = Invoker(ToolRegistry([pay]), middleware=rules()), Invoker(ToolRegistry([pay]), middleware=rules())
    ea, eb = await asyncio.gather(
        a.invoke(_call("pay", "w1", cents=5), Ctx()), b.invoke(_call("pay", "w2", cents=5), Ctx())
    )
    assert RUNS == [5]
    assert (ea["value"], eb["value"]) == ("paid 5", "paid 5")
    assert sorted([ea.get("deduplicated", False), eb.get("deduplicated", False)]) == [False, True]


class FailingStore:
    """A StorePort whose ``where`` method raises ``exc``; the others behave like an empty store."""

    def __init__(self, exc: BaseException, where: str) -> None:
        self.exc, self.where = exc, where

    async def get(self, key: str) -> Any:
        if self.where == "get":
            raise self.exc
        return None

    async def set(self, key: str, value: Any) -> None:
        if self.where == "set":
            raise self.exc

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        if self.where == "compare_and_set":
            raise self.exc
        return True


@pytest.mark.parametrize("where", ["get", "set", "compare_and_set"])
@pytest.mark.parametrize("exc", [RuntimeError("store down"), Boom("store down")], ids=["Exception", "BaseException"])
async def test_failing_store_never_fails_the_call_nor_repeats_a_side_effect(exc, where, caplog):
    records: list[dict[str, Any]] = []
    inv = Invoker(ToolRegistry([pay]), middleware=[mw.audit(records.append), mw.idempotency(FailingStore(exc, where))])
    with caplog.at_level(logging.CRITICAL):
        first = await inv.invoke(_call("pay", cents=7), Ctx())
        second = await inv.invoke(_call("pay", "c2", cents=7), Ctx())
    assert (first["ok"], first["value"]) == (True, "paid 7")
    # The Invoker's own memory still knows the first payment ran.
    assert (second["ok"], second["value"], second.get("deduplicated")) == (True, "paid 7", True)
    assert RUNS == [7]
    assert [(r["outcome"], r["decision"]) for r in records] == [("ok", "executed"), ("ok", "deduplicated")]


# ------------------------------------------------------------------ host callbacks raising


async def _async_boom(tool: Any, args: Any, ctx: Any) -> bool:
    raise Boom("approver crashed")


def _sync_boom(tool: Any, args: Any, ctx: Any) -> bool:
    raise Boom("approver crashed")


@pytest.mark.parametrize("approver", [_sync_boom, _async_boom], ids=["sync", "async"])
async def test_approver_raising_a_base_exception_refuses(approver, caplog):
    with caplog.at_level(logging.CRITICAL):
        env = await Invoker(ToolRegistry([refund]), middleware=[mw.approval(approver)]).invoke(_call("refund", cents=3))
    assert _code(env) == "approval_required"
    assert RUNS == []


@pytest.mark.parametrize("approver", [_sync_boom, _async_boom], ids=["sync", "async"])
def test_dispatch_approver_raising_a_base_exception_refuses(approver, caplog):
    with caplog.at_level(logging.CRITICAL):
        env = dispatch(_call("refund", cents=3), ToolRegistry([refund]), approver=approver)
    assert _code(env) == "approval_required"
    assert env["error"]["tool"] == "refund"
    assert RUNS == []


def _sink_boom(rec: dict[str, Any]) -> None:
    raise Boom("sink crashed")


async def _async_sink_boom(rec: dict[str, Any]) -> None:
    raise Boom("sink crashed")


class _TraceBoom:
    def event(self, name: str, attributes: dict[str, Any]) -> None:
        raise Boom("trace crashed")


@pytest.mark.parametrize("where", ["sink", "async sink", "ctx.trace"])
async def test_audit_sink_raising_a_base_exception_does_not_break_the_call(where, caplog):
    sink = {"sink": _sink_boom, "async sink": _async_sink_boom, "ctx.trace": None}[where]
    ctx = Ctx()
    if where == "ctx.trace":
        ctx.trace = _TraceBoom()  # type: ignore[attr-defined]
    with caplog.at_level(logging.CRITICAL):
        env = await Invoker(ToolRegistry([pay]), middleware=[mw.audit(sink)]).invoke(_call("pay", cents=9), ctx)
    assert (env["ok"], env["value"]) == (True, "paid 9")
    assert RUNS == [9]


# ------------------------------------------------------------------ contexts that fail to read


class BadDeadline:
    run_id = "r"
    deadline = "soon"


class BadRunId:
    @property
    def run_id(self) -> str:
        raise RuntimeError("run_id unavailable")


@pytest.mark.parametrize("ctx", [BadDeadline(), BadRunId()], ids=["deadline", "run_id"])
def test_dispatch_with_a_broken_context_returns_an_envelope(ctx, caplog):
    with caplog.at_level(logging.CRITICAL):
        env = dispatch(_call("pay", cents=1), ToolRegistry([pay]), ctx=ctx)
    assert env["ok"] is False
    assert env["error"]["code"] == "internal_error"
    assert RUNS == []


# ------------------------------------------------------------------ user middleware


class NotAnEnvelope(Middleware):
    name = "not_an_envelope"

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handle(call: Any) -> Any:
            await nxt(call)
            return "done"

        return handle


async def test_user_middleware_returning_a_non_dict_is_blamed_not_the_tool(caplog):
    inv = Invoker(ToolRegistry([pay]), middleware=[mw.audit(), NotAnEnvelope(), mw.timeout()])
    with caplog.at_level(logging.CRITICAL):
        env = await inv.invoke(_call("pay", cents=2))
    assert env == {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "The call could not be completed: TypeError: a middleware returned str, not an envelope "
            "dict. This is a fault in the agent's tooling, not in your arguments; do not retry.",
        },
    }


class Answers(Middleware):
    """Answers every call itself; the tool never runs."""

    name = "answers"

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handle(call: Any) -> dict[str, Any]:
            return {"ok": True, "value": "cached elsewhere", "elapsed_ms": 0.0}

        return handle


async def test_audit_attempts_count_only_body_starts_past_a_user_middleware():
    records: list[dict[str, Any]] = []
    inv = Invoker(ToolRegistry([pay]), middleware=[mw.audit(records.append), Answers(), mw.timeout()])
    env = await inv.invoke(_call("pay", cents=4))
    assert env["value"] == "cached elsewhere"
    assert RUNS == []
    assert [(r["outcome"], r["decision"], r["attempts"]) for r in records] == [("ok", "executed", 0)]


# ------------------------------------------------------------------ deadlines

ATTEMPTS: list[float] = []


@tool(read_only=True, timeout_s=1.0)
async def slow_then_hang(x: int) -> int:
    """Fails after 0.6 s the first time, then hangs on every later attempt."""
    ATTEMPTS.append(time.monotonic())
    if len(ATTEMPTS) == 1:
        await asyncio.sleep(0.6)
        raise ConnectionError("backend down")
    await asyncio.sleep(5)
    return x


@pytest.mark.parametrize("order", ["retry,timeout", "timeout,retry"])
async def test_a_retried_attempt_never_outlives_ctx_deadline(order):
    ATTEMPTS.clear()
    chain = [mw.retry(sleep=_no_sleep), mw.timeout()]
    inv = Invoker(ToolRegistry([slow_then_hang]), middleware=chain if order == "retry,timeout" else chain[::-1])
    ctx = Ctx()
    ctx.deadline = time.monotonic() + 1.0  # type: ignore[attr-defined]
    started = time.monotonic()
    env = await inv.invoke(_call("slow_then_hang", x=1), ctx)
    elapsed = time.monotonic() - started
    assert _code(env) == "timeout"
    assert len(ATTEMPTS) == 2
    assert elapsed < 1.3, elapsed  # the deadline (1.0 s) plus scheduling slack; 1.6 s when the second attempt got a full second


# ------------------------------------------------------------------ one Invoker, many threads


@tool(side_effecting=True)
def slow_pay(cents: int) -> str:
    """Pay cents to the vendor (slowly) and return a receipt."""
    RUNS.append(cents)
    time.sleep(0.3)
    return f"paid {cents}"


def test_identical_call_waiting_on_another_threads_loop_is_woken():
    inv = Invoker(ToolRegistry([slow_pay]))
    out: dict[str, dict[str, Any]] = {}

    def run(cid: str, delay: float) -> None:
        time.sleep(delay)
        out[cid] = asyncio.run(inv.invoke(_call("slow_pay", cid, cents=6), Ctx()))

    threads = [threading.Thread(target=run, args=("a", 0.0), daemon=True), threading.Thread(target=run, args=("b", 0.1), daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert [t.is_alive() for t in threads] == [False, False]
    assert RUNS == [6]
    assert (out["a"]["value"], out["b"]["value"], out["b"].get("deduplicated")) == ("paid 6", "paid 6", True)


# ------------------------------------------------------------------ a user middleware that raises


class Raises(Middleware):
    name = "raises"

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handle(call: Any) -> Any:
            if call.args["cents"] > 1:
                await nxt(call)
            raise ValueError("middleware bug")

        return handle


@pytest.mark.parametrize(("cents", "attempts"), [(1, 0), (2, 1)])
async def test_a_call_whose_user_middleware_raises_is_still_audited(cents, attempts, caplog):
    records: list[dict[str, Any]] = []
    inv = Invoker(ToolRegistry([pay]), middleware=[mw.audit(records.append), Raises(), mw.timeout()])
    with caplog.at_level(logging.CRITICAL):
        env = await inv.invoke(_call("pay", cents=cents))
    assert _code(env) == "internal_error"
    assert [(r["tool"], r["outcome"], r["decision"], r["attempts"]) for r in records] == [
        ("pay", "internal_error", "failed", attempts)
    ]


# ------------------------------------------------------------------ the lease of a "retry forever" chain

_LEASE_SCRIPT = """
import asyncio, json, time
from agentkit_tools import Invoker, ToolRegistry, tool, middleware as mw
from agentkit_tools.stores import InMemoryStore

@tool(side_effecting=True, idempotent=True)
async def pay(cents: int) -> str:
    '''Pay cents to the vendor and return a receipt.'''
    return "paid"

store = InMemoryStore()
seen = []

async def cas(key, expected, value, _cas=store.compare_and_set):
    seen.append((time.time(), value))
    return await _cas(key, expected, value)

store.compare_and_set = cas
inv = Invoker(ToolRegistry([pay]), middleware=[mw.idempotency(store), mw.retry(max_attempts=2**32 - 1), mw.timeout()])
asyncio.run(inv.invoke({"id": "1", "name": "pay", "input": {"cents": 1}}))
now, claim = seen[0]
print(json.loads(claim)["until"] - now)
"""


def test_lease_of_a_retry_forever_chain_is_computed_at_once():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _LEASE_SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # 10 s per attempt times 2**32-1 attempts, the backoff ceilings 0.5+1+2+4+8+16 then 30 s for
    # each of the other 2**32-8 waits, plus 5 s.
    expected = 10.0 * (2**32 - 1) + 31.5 + 30.0 * (2**32 - 8) + 5.0
    assert abs(float(out.stdout) - expected) < 1.0
