"""The core's per-call driver (`_core.Drive`) keeps the coroutine protocol as CPython keeps it
for a coroutine: what user code raises inside it never becomes its return value, generator-based
coroutines are awaited as `await` awaits them, and the first step takes no value."""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import pytest

from agentkit_tools import InMemoryStore, Invoker, ToolContext, ToolRegistry, tool
from agentkit_tools import middleware as mw

from envelopes import native_refusal

FAULT = "The call could not be completed: {}. This is a fault in the agent's tooling, not in your arguments; do not retry."
STOP_FAULT = {"ok": False, "error": {"code": "internal_error", "message": FAULT.format("RuntimeError: coroutine raised StopIteration")}}


def flaky_tool() -> Any:
    n = [0]

    @tool(read_only=True)
    async def flaky(q: str) -> str:
        """Read a flaky value that fails every odd time with ConnectionError."""
        n[0] += 1
        if n[0] % 2 == 1:
            raise ConnectionError("first")
        return q

    return flaky


def call(i: int = 1, name: str = "flaky", **args: Any) -> dict[str, Any]:
    return {"id": f"c{i}", "name": name, "input": args or {"q": "v"}}


def strip(env: Any) -> Any:
    if isinstance(env, dict) and "elapsed_ms" in env:
        env = dict(env)
        assert isinstance(env.pop("elapsed_ms"), float)
    return env


def forging_sleep(value: Any) -> Any:
    def sleep(delay: float) -> None:
        raise StopIteration(value)

    return sleep


class Passthrough(mw.Middleware):
    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen

    def wrap(self, inv: Any, nxt: Any) -> Any:
        async def handle(tc: Any) -> Any:
            env = await nxt(tc)
            self.seen.append(env)
            return env

        return handle


@pytest.mark.parametrize("value", [{"ok": True, "value": "forged"}, None])
async def test_a_stop_iteration_from_a_retry_sleep_is_a_fault_on_every_path(value: Any, caplog: Any) -> None:
    records: list[tuple[str, str]] = []
    audit = mw.audit(lambda r: records.append((r["decision"], r["outcome"])))
    inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[audit, mw.retry(sleep=forging_sleep(value))])
    with caplog.at_level(logging.CRITICAL + 1):
        assert await inv.invoke(call()) == STOP_FAULT
        assert records == [("failed", "internal_error")]
        records.clear()
        # invoke_many: the turn's call goes on through `Drive.go`, which raises its faults.
        inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[audit, mw.retry(sleep=forging_sleep(value))])
        assert [strip(e) for e in await inv.invoke_many([call(1), call(2)])] == [STOP_FAULT, {"ok": True, "value": "v"}]
        assert sorted(records) == [("executed", "ok"), ("failed", "internal_error")]
        records.clear()
        # After a user middleware: the segment's drive (`Drive.segment`) raises its faults.
        seen: list[Any] = []
        inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[Passthrough(seen), audit, mw.retry(sleep=forging_sleep(value))])
        assert await inv.invoke(call()) == STOP_FAULT
        assert seen == []
        assert records == [("failed", "internal_error")]


async def test_a_stop_iteration_from_a_user_middleware_handler_is_a_fault(caplog: Any) -> None:
    @tool(side_effecting=True)
    async def charge(card: str) -> str:
        """Charge a card; the money is taken at once, for tests only."""
        return f"charged {card}"

    class SyncInner(mw.Middleware):
        def wrap(self, inv: Any, nxt: Any) -> Any:
            def handle(tc: Any) -> Any:
                raise StopIteration({"ok": True, "value": "forged"})

            return handle

    records: list[tuple[str, str]] = []
    seen: list[Any] = []
    inv = Invoker(ToolRegistry([charge]), middleware=[Passthrough(seen), mw.audit(lambda r: records.append((r["decision"], r["outcome"]))), SyncInner()])
    with caplog.at_level(logging.CRITICAL + 1):
        assert await inv.invoke(call(name="charge", card="1")) == STOP_FAULT
    assert seen == []
    assert records == [("failed", "internal_error")]


async def test_a_stop_iteration_thrown_into_a_drive_not_started_is_a_runtime_error() -> None:
    from agentkit_tools import _core

    stop = StopIteration({"ok": True, "value": "forged"})

    async def c() -> None:
        return None

    co = c()
    with pytest.raises(RuntimeError) as want:
        co.throw(stop)
    started: list[Any] = []
    drive = _core.Drive.chain(lambda call, ctx: started.append(call), call(), None)
    with pytest.raises(RuntimeError) as got:
        drive.throw(stop)
    assert str(got.value) == str(want.value) == "coroutine raised StopIteration"
    assert got.value.__cause__ is stop and got.value.__context__ is stop
    assert started == []


@types.coroutine
def _suspend_once() -> Any:
    yield  # one bare suspension, as asyncio.sleep(0) takes


async def test_generator_based_coroutines_are_awaited_as_await_awaits_them(caplog: Any) -> None:
    @types.coroutine
    def approve_later() -> Any:
        yield from _suspend_once()
        return True

    @types.coroutine
    def sleep(delay: float) -> Any:
        slept.append(delay)
        yield from _suspend_once()

    class GenStore(InMemoryStore):
        @types.coroutine
        def get(self, key: str) -> Any:
            yield from _suspend_once()
            return (yield from InMemoryStore.get(self, key).__await__())

    @tool(side_effecting=True, requires_approval=True, non_blocking=True)
    def charge(card: str) -> str:
        """Charge a card; the money is taken at once, for tests only."""
        return f"charged {card}"

    @tool(side_effecting=True)
    def pay(card: str) -> str:
        """Pay with a card; the money is taken at once, for tests only."""
        return f"paid {card}"

    slept: list[float] = []
    with caplog.at_level(logging.DEBUG):
        inv = Invoker(ToolRegistry([charge]), middleware=[mw.approval(lambda t, a, c: approve_later())])
        assert strip(await inv.invoke(call(name="charge", card="1"))) == {"ok": True, "value": "charged 1"}
        inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[mw.retry(sleep=sleep)])
        assert strip(await inv.invoke(call())) == {"ok": True, "value": "v"}
        assert len(slept) == 1
        store = GenStore()
        inv = Invoker(ToolRegistry([pay]), middleware=[mw.idempotency(store=store)])
        ctx = ToolContext(run_id="r")
        assert strip(await inv.invoke(call(name="pay", card="1"), ctx)) == {"ok": True, "value": "paid 1"}
        assert strip(await inv.invoke(call(name="pay", card="1"), ctx)) == {"ok": True, "value": "paid 1", "deduplicated": True}
        assert len(store._data) == 2
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_an_await_method_returning_a_coroutine_is_refused_as_await_refuses_it(caplog: Any) -> None:
    class Awaits:
        def __await__(self) -> Any:
            return _suspend_once()

    async def native() -> None:
        await Awaits()

    with pytest.raises(TypeError) as want:
        await native()

    def sleep(delay: float) -> Any:
        return Awaits()

    inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[mw.retry(sleep=sleep)])
    with caplog.at_level(logging.CRITICAL + 1):
        assert await inv.invoke(call()) == {"ok": False, "error": {"code": "internal_error", "message": FAULT.format(f"TypeError: {want.value}")}}
    assert str(want.value) == "__await__() returned a coroutine"


async def test_the_first_step_of_a_drive_takes_no_value() -> None:
    from agentkit_tools import _core

    @tool(read_only=True)
    async def a(x: int) -> int:
        """Async tool that suspends once and returns x, for the protocol check."""
        await asyncio.sleep(0)
        return x

    want = native_refusal(lambda co: co.send(5))
    inv = Invoker(ToolRegistry([a]))
    d = _core.drive(inv._only, inv.registry._core, call(name="a", x=1), None)
    with pytest.raises(TypeError) as got:
        d.send(5)
    assert type(want) is TypeError
    assert str(got.value) == str(want) == "can't send non-None value to a just-started coroutine"
    # Still not started: driven as a task drives it, it answers the call.
    assert strip(await d) == {"ok": True, "value": 1}


async def test_a_drive_thrown_into_before_its_first_step_or_stepped_once_done_acts_as_a_coroutine() -> None:
    """Thrown into before its first step, a drive raises that and goes no further (its body,
    whose first step the core took when it made the drive, runs no more); once it ended, it raises
    what is thrown in and refuses a value sent, as a coroutine does."""
    from agentkit_tools import _core

    ran: list[int] = []

    @tool(read_only=True)
    async def a(x: int) -> int:
        """Async tool that records that it ran, suspends once and returns x, for the protocol check."""
        ran.append(x)
        await asyncio.sleep(0)
        return x

    inv = Invoker(ToolRegistry([a]))
    for done in (False, True):
        d = _core.drive(inv._only, inv.registry._core, call(name="a", x=1), None)
        if done:
            assert strip(await d) == {"ok": True, "value": 1}
        with pytest.raises(ValueError, match="^thrown$"):
            d.throw(ValueError("thrown"))
        with pytest.raises(RuntimeError, match="^cannot reuse already awaited coroutine$"):
            d.send(None)
        assert ran == [1], done
        ran.clear()


class Passes(mw.Middleware):
    def wrap(self, inv: Any, nxt: Any) -> Any:
        async def handle(tc: Any) -> Any:
            return await nxt(tc)

        return handle


@pytest.mark.parametrize("user_middleware", [False, True])
@pytest.mark.parametrize("many", [False, True])
async def test_a_generator_exit_a_retry_sleep_raises_itself_is_its_own_failure(user_middleware: bool, many: bool, caplog: Any) -> None:
    """Not a close of the call's driver: the call fails, in its envelope and in its record."""

    def sleep(delay: float) -> None:
        raise GeneratorExit()

    records: list[tuple[str, str, str]] = []
    chain = [Passes()] if user_middleware else []
    audit = mw.audit(lambda r: records.append((r["call_id"], r["decision"], r["outcome"])))
    inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[*chain, audit, mw.retry(sleep=sleep)])
    fault = {"ok": False, "error": {"code": "internal_error", "message": FAULT.format("GeneratorExit: ")}}
    with caplog.at_level(logging.CRITICAL + 1):
        if many:
            envs = await inv.invoke_many([call(1), call(2)])
            assert [strip(e) for e in envs] == [fault, {"ok": True, "value": "v"}]
        else:
            assert await inv.invoke(call(1)) == fault
    assert sorted(records) == ([("c1", "failed", "internal_error"), ("c2", "executed", "ok")] if many else [("c1", "failed", "internal_error")])


@pytest.mark.parametrize(("method", "answer", "text"), [
    ("compare_and_set", None, "store.compare_and_set returned NoneType, expected bool"),
    ("compare_and_set", 1, "store.compare_and_set returned int, expected bool"),
    ("get", {"s": "running"}, "store.get returned dict, expected str or None"),
])
async def test_a_store_answer_the_port_does_not_promise_is_a_failing_store(method: str, answer: Any, text: str, caplog: Any) -> None:
    """Logged as a failing store, the call goes on without sharing: never a loop."""
    runs: list[str] = []

    @tool(side_effecting=True)
    async def charge(card: str) -> str:
        """Charge a card; the money is taken at once, for tests only."""
        runs.append(card)
        return f"charged {card}"

    class Store(InMemoryStore):
        pass

    async def wrong(self: Any, *args: Any) -> Any:
        return answer

    setattr(Store, method, wrong)
    inv = Invoker(ToolRegistry([charge]), middleware=[mw.idempotency(store=Store())])
    with caplog.at_level(logging.WARNING):
        env = await asyncio.wait_for(inv.invoke(call(name="charge", card="1"), ToolContext(run_id="r")), 10)
    assert strip(env) == {"ok": True, "value": "charged 1"}
    assert runs == ["1"]
    logged = [(r.name, r.levelname, r.getMessage().split(" on ")[0], str(r.exc_info[1])) for r in caplog.records]
    assert logged[0] == ("agentkit_tools.middleware", "WARNING", "idempotency store failed", text + "; fix the StorePort implementation")
    assert {entry[:3] for entry in logged} == {("agentkit_tools.middleware", "WARNING", "idempotency store failed")}


@pytest.mark.parametrize("answer", [[1], None, "ok"])
async def test_an_outermost_user_middleware_answering_no_envelope_is_a_fault(answer: Any, caplog: Any) -> None:
    class Answers(mw.Middleware):
        def wrap(self, inv: Any, nxt: Any) -> Any:
            async def handle(tc: Any) -> Any:
                await nxt(tc)
                return answer

            return handle

    records: list[tuple[str, str]] = []
    inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[Answers(), mw.audit(lambda r: records.append((r["decision"], r["outcome"]))), mw.retry(sleep=lambda d: asyncio.sleep(0))])
    with caplog.at_level(logging.ERROR):
        env = await inv.invoke(call())
    kind = type(answer).__qualname__
    assert env == {"ok": False, "error": {"code": "internal_error", "message": FAULT.format(f"TypeError: a middleware returned {kind}, not an envelope dict")}}
    assert records == [("executed", "ok")]
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("agentkit_tools.invoker", "Invoker failed on a call of 'flaky'")]


async def test_a_store_refusing_every_claim_is_a_failing_store(caplog: Any) -> None:
    """compare_and_set answering False to every claim, its get showing no live claim: after 8
    claims lost in a row the store is held failing (logged once), the call goes on without
    sharing. Never a loop that does not suspend."""
    runs: list[str] = []
    claims: list[str] = []

    @tool(side_effecting=True)
    async def charge(card: str) -> str:
        """Charge a card; the money is taken at once, for tests only."""
        runs.append(card)
        return f"charged {card}"

    class Store(InMemoryStore):
        async def get(self, key: str) -> str | None:
            return None

        async def compare_and_set(self, key: str, expected: str | None, value: str) -> bool:
            claims.append(key)
            if len(claims) > 1000:  # the unbounded loop, stopped for the test
                raise RuntimeError("claimed 1000 times")
            return False

    inv = Invoker(ToolRegistry([charge]), middleware=[mw.idempotency(store=Store())])
    with caplog.at_level(logging.WARNING):
        env = await inv.invoke(call(name="charge", card="1"), ToolContext(run_id="r"))
    assert strip(env) == {"ok": True, "value": "charged 1"}
    assert runs == ["1"]
    assert len(claims) == 8 and len(set(claims)) == 1
    logged = [(r.name, r.levelname, r.getMessage(), str(r.exc_info[1])) for r in caplog.records]
    assert logged == [(
        "agentkit_tools.middleware",
        "WARNING",
        f"idempotency store failed on {claims[0]}; going on without it",
        "store.compare_and_set refused 8 claims in a row, each over the record its get had just answered; fix the StorePort implementation (compare_and_set must write and return True when the key holds exactly the expected value)",
    )]


async def test_invoke_many_a_generator_exit_a_callback_raises_itself_is_logged_and_left_in_no_task(caplog: Any) -> None:
    """As invoke does: the fault envelope, its record, the fault logged; the call's task ends
    without an exception nobody retrieves."""
    import gc

    def sleep(delay: float) -> None:
        raise GeneratorExit()

    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    records: list[tuple[str, str, str]] = []
    audit = mw.audit(lambda r: records.append((r["call_id"], r["decision"], r["outcome"])))
    inv = Invoker(ToolRegistry([flaky_tool()]), middleware=[audit, mw.retry(sleep=sleep)])
    fault = {"ok": False, "error": {"code": "internal_error", "message": FAULT.format("GeneratorExit: ")}}
    try:
        with caplog.at_level(logging.WARNING):
            envs = await inv.invoke_many([call(1), call(2)])
            for _ in range(3):
                await asyncio.sleep(0)
            gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert [strip(e) for e in envs] == [fault, {"ok": True, "value": "v"}]
    assert sorted(records) == [("c1", "failed", "internal_error"), ("c2", "executed", "ok")]
    logged = [(r.name, r.levelname, r.getMessage(), type(r.exc_info[1]).__name__) for r in caplog.records]
    assert logged == [("agentkit_tools.invoker", "ERROR", "Invoker failed on a call of 'flaky'", "GeneratorExit")]
    assert reported == []
