"""The Invoker's middleware (SPEC §7, §11): audit, approval, repeat guard, idempotency, retry
(with the circuit breaker), timeout and egress, each with exact observable results."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolError, ToolRegistry, _core, middleware as mw, tool
from agentkit_tools.stores import InMemoryStore


def canonical_hash(args: dict) -> str:
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def strip(record: dict) -> dict:
    out = dict(record)
    assert isinstance(out.pop("elapsed_ms"), float)
    return out


def call(name: str, cid: str = "c1", **args: Any) -> dict:
    return {"id": cid, "name": name, "input": args}


class Counter:
    def __init__(self) -> None:
        self.n = 0


# ------------------------------------------------------------------ audit


async def test_audit_records_every_decision():
    runs = Counter()

    @tool(side_effecting=True, requires_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount of money to the supplier on file."""
        runs.n += 1
        return f"paid {amount}"

    @tool(read_only=True)
    def fail(x: int) -> int:
        """A read-only tool that always fails with a business error."""
        raise ToolError("no such item; search first", code="not_found")

    records: list[dict] = []
    inv = Invoker(ToolRegistry([pay, fail]), middleware=[mw.audit(records.append), *mw.default_chain()[1:]])
    await inv.invoke(call("pay", "1", amount=5))  # refused: needs approval
    await inv.invoke({**call("pay", "2", amount=5), "approved": True})
    await inv.invoke({**call("pay", "3", amount=5), "approved": True})  # deduplicated
    await inv.invoke(call("fail", "4", x=1))
    await inv.invoke(call("nope", "5", q="z"))
    h5, h1 = canonical_hash({"amount": 5}), canonical_hash({"x": 1})
    assert [strip(r) for r in records] == [
        {"tool": "pay", "call_id": "1", "args_hash": h5, "outcome": "approval_required", "attempts": 0, "decision": "refused"},
        {"tool": "pay", "call_id": "2", "args_hash": h5, "outcome": "ok", "attempts": 1, "decision": "executed"},
        {"tool": "pay", "call_id": "3", "args_hash": h5, "outcome": "ok", "attempts": 0, "decision": "deduplicated"},
        {"tool": "fail", "call_id": "4", "args_hash": h1, "outcome": "not_found", "attempts": 1, "decision": "failed"},
        {"tool": "nope", "call_id": "5", "args_hash": canonical_hash({"q": "z"}), "outcome": "unknown_tool", "attempts": 0, "decision": "failed"},
    ]
    assert runs.n == 1


async def test_rejected_calls_are_audited_and_counted_by_their_raw_arguments():
    """A rejected call's record carries the hash of its arguments as sent (the canonical text of
    the raw mapping or JSON text: keys sorted, injected keys and big integers kept as they came),
    and the repeat guard counts identical rejected calls, whichever form they came in."""

    @tool(read_only=True)
    def look(n: int, ctx: ToolContext) -> int:
        """Look an item up by its number in the catalogue."""
        return n

    records: list[dict] = []
    inv = Invoker(ToolRegistry([look]), middleware=[mw.audit(records.append), mw.repeat_guard(limit=3)])
    raw = [
        {"n": "x", "tags": ["é", 1.5, None, True], "z": {"b": 2, "a": -0.0}},
        '{"z": {"a": -0.0, "b": 2}, "n": "x", "tags": ["é", 1.5, null, true]}',
        {"n": "x", "ctx": 1},  # an injected key, dropped before validation, still hashed
        {"n": 1.5, "big": 123456789012345678901234567890},
        {"n": "x", "pair": (1, 2)},
        "[1, 2]",
        "{not json",
    ]
    for i, args in enumerate(raw):
        await inv.invoke({"id": str(i), "name": "look", "input": args})
    expected = [_core.canonical_args(a)[1] for a in raw]
    assert expected[0] == expected[1] == canonical_hash({"n": "x", "tags": ["é", 1.5, None, True], "z": {"a": -0.0, "b": 2}})
    assert expected[3] == hashlib.sha256(b'{"big":123456789012345678901234567890,"n":1.5}').hexdigest()[:16]
    assert expected[4] == canonical_hash({"n": "x", "pair": [1, 2]})
    assert expected[6] == hashlib.sha256(b"{not json").hexdigest()[:16]
    assert [(r["call_id"], r["args_hash"], r["outcome"]) for r in records] == [
        (str(i), h, "invalid_arguments") for i, h in enumerate(expected)
    ]
    # the same invalid call a third time, as text: the repeat guard refuses it
    env = await inv.invoke({"id": "7", "name": "look", "input": raw[1]})
    assert env["error"]["code"] == "repeated_call"
    assert env["error"]["count"] == 3


async def test_audit_logs_at_debug_and_feeds_ctx_trace(caplog):
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    events: list[tuple[str, dict]] = []
    ctx = ToolContext(run_id="r", trace=lambda name, attrs: events.append((name, attrs)))
    with caplog.at_level(logging.DEBUG, logger="agentkit_tools.audit"):
        await Invoker(ToolRegistry([ping]), middleware=[mw.audit()]).invoke(call("ping", "p1"), ctx)
    [log] = [r for r in caplog.records if r.name == "agentkit_tools.audit"]
    assert log.levelno == logging.DEBUG
    expected = {"tool": "ping", "call_id": "p1", "args_hash": canonical_hash({}), "outcome": "ok", "attempts": 1, "decision": "executed"}
    assert strip(log.audit) == expected
    assert log.getMessage() == f"tool call ping executed: ok after 1 attempt(s) in {log.audit['elapsed_ms']:.3f} ms"
    assert [(n, strip(a)) for n, a in events] == [("tool.call", expected)]


async def test_audit_follows_log_level_changes_made_while_calls_run():
    """Whether anybody reads a record is decided per call without asking Python (the logger's
    own cache of ``isEnabledFor``): a level set on the audit logger or on a parent, or
    ``logging.disable``, between two calls of the same Invoker takes effect at the next call (an
    answer kept while the logger and its cache are unchanged included)."""
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    audit_log, parent = logging.getLogger("agentkit_tools.audit"), logging.getLogger("agentkit_tools")
    levels = (audit_log.level, parent.level)
    handler = Keep(logging.DEBUG)
    audit_log.addHandler(handler)
    audit = mw.audit()
    inv = Invoker(ToolRegistry([ping]), middleware=[audit])
    seen = []
    try:
        audit_log.setLevel(logging.NOTSET)
        for change in (
            lambda: parent.setLevel(logging.WARNING),
            lambda: parent.setLevel(logging.DEBUG),
            lambda: logging.disable(logging.DEBUG),
            lambda: logging.disable(logging.NOTSET),
            lambda: audit_log.setLevel(logging.INFO),
            lambda: audit_log.setLevel(logging.DEBUG),
        ):
            change()
            before = len(records)
            # twice: the second call finds what the first one read (and logging cached) unchanged
            for _ in range(2):
                assert (await inv.invoke(call("ping")))["value"] == "pong"
            seen.append((len(records) - before, audit.observed_level(None)))
    finally:
        audit_log.removeHandler(handler)
        audit_log.setLevel(levels[0])
        parent.setLevel(levels[1])
        logging.disable(logging.NOTSET)
    tracing = audit.observed_level(None) == 2  # a tracer provider set by another test
    if tracing:
        assert [n for n, _ in seen] == [0, 2, 0, 2, 0, 2]
    else:
        assert seen == [(0, 0), (2, 1), (0, 0), (2, 1), (0, 0), (2, 1)]


async def test_ctx_trace_gets_the_record_through_event_then_add_event_then_itself(caplog):
    """``ctx.trace``'s ``event`` method, else (absent or falsy) its ``add_event``, else the
    object itself is called; one that raises is logged and the call's result is unaffected."""
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    got: list[tuple[str, str, str]] = []

    class Both:
        def event(self, name: str, rec: dict) -> None:
            got.append(("event", name, rec["call_id"]))

        def add_event(self, name: str, rec: dict) -> None:
            got.append(("add_event", name, rec["call_id"]))

    class AddOnly:
        event = None

        def add_event(self, name: str, rec: dict) -> None:
            got.append(("add_event", name, rec["call_id"]))

    class Broken:
        def event(self, name: str, rec: dict) -> None:
            raise ValueError("trace is down")

    inv = Invoker(ToolRegistry([ping]), middleware=[mw.audit()])
    traces = [Both(), AddOnly(), lambda name, rec: got.append(("called", name, rec["call_id"])), Broken()]
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        for i, trace in enumerate(traces):
            env = await inv.invoke(call("ping", f"t{i}"), ToolContext(run_id="r", trace=trace))
            assert (env["ok"], env["value"]) == (True, "pong")
    assert got == [("event", "tool.call", "t0"), ("add_event", "tool.call", "t1"), ("called", "tool.call", "t2")]
    assert [(r.name, r.levelname, r.getMessage(), r.exc_info[0]) for r in caplog.records] == [
        ("agentkit_tools.middleware", "ERROR", "ctx.trace failed (the call's result is unaffected)", ValueError)
    ]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_audit_sink_stopping_the_process_stops_it_and_its_own_cancellation_is_logged(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``KeyboardInterrupt`` from the sink reaches the caller's ``await`` (the record is not
    sent again); a ``CancelledError`` the sink raised itself (the caller's task was not
    cancelled) is the sink's failure: logged, the call's result unaffected."""
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    ping.non_blocking = True  # type: ignore[attr-defined]
    raised: list[BaseException] = []

    def sync_sink(rec: dict) -> None:
        raise raised[-1]

    async def async_sink(rec: dict) -> None:
        await asyncio.sleep(0)
        raise raised[-1]

    sink = sync_sink if kind == "sync" else async_sink
    inv = Invoker(ToolRegistry([ping]), middleware=[mw.audit(sink), *mw.default_chain()[1:]])
    raised.append(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        await inv.invoke(call("ping", "k"))
    raised.append(asyncio.CancelledError())
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        env = await inv.invoke(call("ping", "c"))
    assert (env["ok"], env["value"]) == (True, "pong")
    assert [(r.levelname, r.getMessage().split(" at 0x")[0], r.exc_info[0]) for r in caplog.records] == [
        ("ERROR", f"audit sink <function test_an_audit_sink_stopping_the_process_stops_it_and_its_own_cancellation_is_logged.<locals>.{kind}_sink", asyncio.CancelledError)
    ]


async def test_an_audit_sink_answer_that_cannot_be_inspected_is_the_sink_failure(caplog):
    """A sink returning an object ``inspect.isawaitable`` cannot look at (its ``__class__``
    raises) is the sink's failure: logged, the call's result unaffected, ``ctx.trace`` still
    gets the record."""
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    class Odd:
        @property
        def __class__(self):  # type: ignore[override]
            raise RuntimeError("no class for you")

    def sink(rec: dict) -> Any:
        return Odd()

    traced: list[str] = []

    class Trace:
        def event(self, name: str, rec: dict) -> None:
            traced.append(name)

    inv = Invoker(ToolRegistry([ping]), middleware=[mw.audit(sink)])
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        env = await inv.invoke(call("ping", "c1"), ToolContext(run_id="r", trace=Trace()))
    env.pop("elapsed_ms", None)
    assert env == {"ok": True, "value": "pong"}
    assert traced == ["tool.call"]
    assert [(r.name, r.levelname, r.getMessage().split(" at 0x")[0], r.exc_info[0]) for r in caplog.records] == [
        ("agentkit_tools.middleware", "ERROR", "audit sink <function test_an_audit_sink_answer_that_cannot_be_inspected_is_the_sink_failure.<locals>.sink", RuntimeError)
    ]


async def test_a_sink_that_changes_the_record_leaves_the_span_as_the_core_built_it(span_exporter, caplog):
    """The span's attributes are the record's as the core built it: a sink that empties the
    record changes neither the call's result nor the span, which is ended."""
    @tool(read_only=True)
    def ping_mut() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    inv = Invoker(ToolRegistry([ping_mut]), middleware=[mw.audit(lambda rec: rec.clear())])
    with caplog.at_level(logging.WARNING):
        env = await inv.invoke(call("ping_mut", "m1"))
    env.pop("elapsed_ms", None)
    assert env == {"ok": True, "value": "pong"}
    assert [(r.name, r.getMessage()) for r in caplog.records] == []
    spans = [s for s in span_exporter.get_finished_spans() if s.name == "execute_tool"]
    assert [dict(s.attributes) for s in spans] == [
        {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ping_mut", "gen_ai.tool.call.id": "m1",
            "agentkit.tool.args_hash": canonical_hash({}), "agentkit.tool.outcome": "ok",
            "agentkit.tool.decision": "executed", "agentkit.tool.attempts": 1,
        }
    ]


@pytest.mark.parametrize("raised", [RuntimeError("ctx.trace prop"), asyncio.CancelledError()])
async def test_a_ctx_whose_trace_cannot_be_read_is_the_trace_failure(raised: BaseException, caplog) -> None:
    """Reading ``ctx.trace`` that raises (other than ``AttributeError``; a ``CancelledError`` it
    raised itself included) is ``ctx.trace``'s failure: logged, the call's result unaffected.
    A ``KeyboardInterrupt`` from it reaches the caller."""
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    class Ctx:
        run_id = "r"

        @property
        def trace(self) -> Any:
            raise exc[0]

    exc = [raised]
    inv = Invoker(ToolRegistry([ping]), middleware=[mw.audit()])
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        env = await inv.invoke(call("ping", "c1"), Ctx())
    env.pop("elapsed_ms", None)
    assert env == {"ok": True, "value": "pong"}
    assert [(r.name, r.levelname, r.getMessage(), r.exc_info[0]) for r in caplog.records] == [
        ("agentkit_tools.middleware", "ERROR", "ctx.trace failed (the call's result is unaffected)", type(raised))
    ]
    exc[0] = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        await inv.invoke(call("ping", "c2"), Ctx())


@pytest.mark.parametrize("where", ["handler", "filter"])
async def test_a_failing_audit_log_handler_is_logged_and_the_call_goes_on(where: str, caplog) -> None:
    """A handler or filter of the ``agentkit_tools.audit`` log that raises is the audit log's
    failure: logged, the call's result unaffected, the sink and ``ctx.trace`` still get the
    record. A ``KeyboardInterrupt`` from it reaches the caller."""
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    raised: list[BaseException] = [ValueError("log is down")]

    class Raising(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise raised[0]

    class Filt(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise raised[0]

    sunk: list[str] = []
    traced: list[str] = []

    class Trace:
        def event(self, name: str, rec: dict) -> None:
            traced.append(rec["call_id"])

    audit_log = logging.getLogger("agentkit_tools.audit")
    level = audit_log.level
    broken: Any = Raising(logging.DEBUG) if where == "handler" else Filt()
    inv = Invoker(ToolRegistry([ping]), middleware=[mw.audit(lambda rec: sunk.append(rec["call_id"]))])
    try:
        audit_log.setLevel(logging.DEBUG)
        (audit_log.addHandler if where == "handler" else audit_log.addFilter)(broken)
        with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
            env = await inv.invoke(call("ping", "c1"), ToolContext(run_id="r", trace=Trace()))
        records = [(r.name, r.levelname, r.getMessage(), r.exc_info[0]) for r in caplog.records if r.levelno >= logging.WARNING]
        raised[0] = KeyboardInterrupt()
        with pytest.raises(KeyboardInterrupt):
            await inv.invoke(call("ping", "c2"), ToolContext(run_id="r", trace=Trace()))
    finally:
        (audit_log.removeHandler if where == "handler" else audit_log.removeFilter)(broken)
        audit_log.setLevel(level)
    env.pop("elapsed_ms", None)
    assert env == {"ok": True, "value": "pong"}
    assert (sunk, traced) == (["c1"], ["c1"])
    assert records == [
        ("agentkit_tools.middleware", "ERROR", "audit log failed (the call's result is unaffected)", ValueError)
    ]


async def test_audit_sink_may_be_async_and_a_broken_sink_never_breaks_the_call():
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    got: list[dict] = []

    async def async_sink(rec):
        got.append(rec)

    def bad_sink(rec):
        raise RuntimeError("sink down")

    inv = Invoker(ToolRegistry([ping]), middleware=[mw.audit(bad_sink), mw.audit(async_sink)])
    env = await inv.invoke(call("ping"))
    assert env["value"] == "pong"
    assert [r["outcome"] for r in got] == ["ok"]


@pytest.mark.parametrize("entry", ["invoke", "invoke_many"])
async def test_a_dropped_call_ends_its_span_and_logs_nothing(
    entry: str, span_exporter: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With a tracer provider, a call dropped while its audit sink awaits and garbage-collected
    ends its ``execute_tool`` span and logs nothing: the collector closes the call outside the
    task whose context the span was made current in, where that context cannot be restored."""
    import gc

    async def forever(*_: Any) -> Any:
        await asyncio.get_running_loop().create_future()

    @tool(read_only=True)
    async def quick_otel(x: int) -> int:
        """Answer right away with the number given."""
        return x

    inv = Invoker(ToolRegistry([quick_otel]), middleware=[mw.audit(forever)])
    ids = ["1", "2"] if entry == "invoke_many" else ["1"]
    calls = [call("quick_otel", i, x=int(i)) for i in ids]
    task = asyncio.ensure_future(inv.invoke_many(calls) if entry == "invoke_many" else inv.invoke(calls[0]))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    assert not task.done()
    assert span_exporter.get_finished_spans() == ()
    caplog.clear()
    del task, inv
    gc.collect()
    await asyncio.sleep(0)
    assert [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == []
    spans = sorted(span_exporter.get_finished_spans(), key=lambda s: s.attributes["gen_ai.tool.call.id"])
    assert [dict(s.attributes) for s in spans] == [
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "quick_otel", "gen_ai.tool.call.id": i}
        for i in ids
    ]


async def test_audit_emits_an_execute_tool_span(span_exporter):
    from opentelemetry.trace import StatusCode

    @tool(read_only=True, output_schema={"type": "object", "title": "Point", "required": ["x"]})
    def point_otel(ok: bool) -> Any:
        """Return a point; a broken one when ok is false."""
        return {"x": 1} if ok else {"y": 1}

    span_exporter.clear()
    inv = Invoker(ToolRegistry([point_otel]), middleware=[mw.audit()])
    await inv.invoke(call("point_otel", "s1", ok=True))
    await inv.invoke(call("point_otel", "s2", ok=False))
    spans = [s for s in span_exporter.get_finished_spans() if s.name == "execute_tool"]
    assert [dict(s.attributes) for s in spans] == [
        {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "point_otel", "gen_ai.tool.call.id": "s1",
            "agentkit.tool.args_hash": canonical_hash({"ok": True}), "agentkit.tool.outcome": "ok",
            "agentkit.tool.decision": "executed", "agentkit.tool.attempts": 1,
        },
        {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "point_otel", "gen_ai.tool.call.id": "s2",
            "agentkit.tool.args_hash": canonical_hash({"ok": False}), "agentkit.tool.outcome": "output_mismatch",
            "agentkit.tool.decision": "failed", "agentkit.tool.attempts": 1, "error.type": "output_mismatch",
        },
    ]
    assert [s.status.status_code for s in spans] == [StatusCode.UNSET, StatusCode.ERROR]
    assert [e.name for e in spans[0].events] == []
    assert [(e.name, dict(e.attributes)) for e in spans[1].events] == [
        ("tool.shape_mismatch", {"tool": "point_otel", "expected": "Point"})
    ]


# ------------------------------------------------------------------ approval


def make_pay(runs: Counter):
    @tool(side_effecting=True, requires_approval=True)
    def pay(amount: int, approved: bool = False) -> str:
        """Pay an amount of money to the supplier on file."""
        runs.n += 1
        return f"paid {amount}"

    return pay


async def test_approval_required_without_an_approver():
    runs = Counter()
    inv = Invoker(ToolRegistry([make_pay(runs)]), middleware=[mw.approval()])
    env = await inv.invoke(call("pay", amount=10))
    assert env == {
        "ok": False,
        "error": {
            "code": "approval_required",
            "message": 'pay needs the user\'s approval before it runs, and it was not run. Ask the user whether to '
            'allow pay with arguments {"amount":10}; call it again only after they approve.',
            "tool": "pay",
        },
    }
    # "approved" inside the model's arguments is not an approval
    env = await inv.invoke(call("pay", amount=10, approved=True))
    assert env["error"]["code"] == "approval_required"
    assert runs.n == 0


async def test_approval_by_the_host_marking_the_call():
    runs = Counter()
    inv = Invoker(ToolRegistry([make_pay(runs)]), middleware=[mw.approval()])
    env = await inv.invoke({**call("pay", amount=10), "approved": True})
    assert (env["ok"], env["value"], runs.n) == (True, "paid 10", 1)
    env = await inv.invoke({**call("pay", amount=10), "approved": "yes"})  # only True counts
    assert env["error"]["code"] == "approval_required"
    chat = {"id": "c", "approved": True, "function": {"name": "pay", "arguments": '{"amount": 3}'}}
    assert (await inv.invoke(chat))["value"] == "paid 3"


async def test_approval_by_sync_and_async_approvers():
    runs = Counter()
    seen: list[tuple] = []
    pay = make_pay(runs)
    ctx = ToolContext(run_id="r")

    def sync_approver(t, args, c):
        seen.append((t.name, dict(args), c))
        return args["amount"] < 100

    async def async_approver(t, args, c):
        await asyncio.sleep(0)
        return args["amount"] < 5

    inv = Invoker(ToolRegistry([pay]), middleware=[mw.approval(sync_approver)])
    assert (await inv.invoke(call("pay", amount=50), ctx))["ok"] is True
    assert (await inv.invoke(call("pay", amount=500), ctx))["error"]["code"] == "approval_required"
    assert seen == [("pay", {"amount": 50}, ctx), ("pay", {"amount": 500}, ctx)]
    inv = Invoker(ToolRegistry([pay]), middleware=[mw.approval(async_approver)])
    assert (await inv.invoke(call("pay", amount=1)))["ok"] is True
    assert (await inv.invoke(call("pay", amount=7)))["error"]["code"] == "approval_required"
    assert runs.n == 2


async def test_approval_from_context_and_failing_approver_refuses():
    runs = Counter()
    pay = make_pay(runs)

    def crashing(t, args, c):
        raise RuntimeError("approver down")

    inv = Invoker(ToolRegistry([pay, ping_tool()]), middleware=[mw.approval(crashing)])
    assert (await inv.invoke(call("pay", amount=1)))["error"]["code"] == "approval_required"
    ctx = ToolContext(approvals={"pay"})
    assert (await inv.invoke(call("pay", amount=1), ctx))["ok"] is True
    ctx = ToolContext(approvals={"call-9"})
    assert (await inv.invoke(call("pay", "call-9", amount=2), ctx))["ok"] is True
    assert (await inv.invoke(call("ping")))["ok"] is True  # tools without requires_approval pass
    assert runs.n == 2


def ping_tool():
    @tool(read_only=True)
    def ping() -> str:
        """Answer pong, to check that tools are reachable."""
        return "pong"

    return ping


# ------------------------------------------------------------------ repeat guard


async def test_third_identical_call_is_refused():
    runs = Counter()

    @tool(read_only=True)
    def search(q: str, limit: int = 5) -> int:
        """Search the catalogue for a query and count the runs."""
        runs.n += 1
        return runs.n

    inv = Invoker(ToolRegistry([search]), middleware=[mw.repeat_guard()])
    ctx = ToolContext(run_id="conv")
    envs = [
        await inv.invoke(call("search", q="x", limit=1), ctx),
        await inv.invoke({"id": "c", "name": "search", "input": '{"limit": 1, "q": "x"}'}, ctx),  # same, other key order
        await inv.invoke(call("search", q="y", limit=1), ctx),
        await inv.invoke(call("search", q="x", limit=1), ctx),
        await inv.invoke(call("search", q="x", limit=1), ctx),
        await inv.invoke(call("search", q="x", limit=1), ToolContext(run_id="other")),
    ]
    assert [e["ok"] for e in envs] == [True, True, True, False, False, True]
    assert envs[3] == {
        "ok": False,
        "error": {
            "code": "repeated_call",
            "message": "search has now been called 3 times with these same arguments in this conversation, and it "
            "was not run again. Stop calling it; explain the problem to the user instead.",
            "tool": "search",
            "count": 3,
        },
    }
    assert envs[4]["error"]["count"] == 4
    assert runs.n == 4


async def test_repeat_limit_invalid_calls_and_forget():
    runs = Counter()

    @tool(read_only=True)
    def look(q: str) -> str:
        """Look a word up in the dictionary and return it."""
        runs.n += 1
        return q

    inv = Invoker(ToolRegistry([look]), middleware=[mw.repeat_guard(limit=2)])
    # an identical invalid call counts like any other: the loop models get stuck in
    assert (await inv.invoke(call("look", q=1)))["error"]["code"] == "invalid_arguments"
    assert [(await inv.invoke(call("look", q=1)))["error"]["code"] for _ in range(2)] == ["repeated_call"] * 2
    assert (await inv.invoke(call("nope", q=1)))["error"]["code"] == "unknown_tool"
    assert (await inv.invoke(call("nope", q=1)))["error"]["code"] == "repeated_call"
    assert (await inv.invoke(call("look", q="a")))["ok"] is True
    assert (await inv.invoke(call("look", q="a")))["error"]["code"] == "repeated_call"
    inv.forget(inv.default_scope)
    assert (await inv.invoke(call("look", q="a")))["ok"] is True
    assert runs.n == 2
    with pytest.raises(ValueError, match="limit must be an integer from 1 to 4294967295, got 0"):
        mw.repeat_guard(0)


# ------------------------------------------------------------------ idempotency


def make_send(runs: Counter, fail_first: int = 0, idempotent: bool = False):
    @tool(side_effecting=True, idempotent=idempotent)
    def send(to: str) -> dict:
        """Send an email to a recipient and return the receipt."""
        runs.n += 1
        if runs.n <= fail_first:
            raise ToolError("mail server said no", code="send_failed")
        return {"receipt": runs.n, "to": to}

    return send


async def test_side_effecting_repeat_is_deduplicated():
    runs = Counter()
    inv = Invoker(ToolRegistry([make_send(runs)]), middleware=[mw.idempotency()])
    first = await inv.invoke(call("send", to="bob"))
    second = await inv.invoke(call("send", "c2", to="bob"))
    other = await inv.invoke(call("send", to="eve"))
    assert {k: v for k, v in first.items() if k != "elapsed_ms"} == {"ok": True, "value": {"receipt": 1, "to": "bob"}}
    assert {k: v for k, v in second.items() if k != "elapsed_ms"} == {
        "ok": True, "value": {"receipt": 1, "to": "bob"}, "deduplicated": True,
    }
    assert other["value"] == {"receipt": 2, "to": "eve"} and "deduplicated" not in other
    assert runs.n == 2


async def test_failures_are_never_cached():
    runs = Counter()
    inv = Invoker(ToolRegistry([make_send(runs, fail_first=1)]), middleware=[mw.idempotency()])
    envs = [await inv.invoke(call("send", to="bob")) for _ in range(3)]
    assert [e["ok"] for e in envs] == [False, True, True]
    assert [e.get("deduplicated", False) for e in envs] == [False, False, True]
    assert runs.n == 2


async def test_read_only_tools_are_not_deduplicated():
    runs = Counter()

    @tool(read_only=True)
    def now() -> int:
        """Return how many times this clock was read so far."""
        runs.n += 1
        return runs.n

    inv = Invoker(ToolRegistry([now]), middleware=[mw.idempotency()])
    assert [(await inv.invoke(call("now")))["value"] for _ in range(2)] == [1, 2]


async def test_concurrent_identical_calls_run_once():
    runs = Counter()
    release = asyncio.Event()

    @tool(side_effecting=True)
    async def book(room: str) -> str:
        """Book a meeting room and return the booking id."""
        runs.n += 1
        await release.wait()
        return f"booking-{runs.n}"

    inv = Invoker(ToolRegistry([book]), middleware=[mw.idempotency()])
    task = asyncio.ensure_future(inv.invoke_many([call("book", "a", room="r1"), call("book", "b", room="r1")]))
    await asyncio.sleep(0.01)
    release.set()
    first, second = await task
    assert (first["value"], second["value"], second.get("deduplicated"), runs.n) == ("booking-1", "booking-1", True, 1)


async def test_shared_store_deduplicates_across_invokers():
    store = InMemoryStore()
    runs = Counter()
    send = make_send(runs)
    ctx = ToolContext(run_id="conv-1")
    worker_a = Invoker(ToolRegistry([send]), middleware=[mw.idempotency(store)])
    worker_b = Invoker(ToolRegistry([send]), middleware=[mw.idempotency(store)])
    a = await worker_a.invoke(call("send", to="bob"), ctx)
    b = await worker_b.invoke(call("send", to="bob"), ctx)
    assert (a["value"], b["value"], b.get("deduplicated"), runs.n) == (
        {"receipt": 1, "to": "bob"}, {"receipt": 1, "to": "bob"}, True, 1,
    )
    key = "agentkit-tools:idem:" + hashlib.sha256('conv-1\0send\0{"to":"bob"}'.encode()).hexdigest()
    assert _core.idempotency_store_key("conv-1", "send", '{"to":"bob"}') == key
    assert await store.get(key) == '{"s":"done","value":{"receipt":1,"to":"bob"}}'


async def test_store_failures_are_not_cached_and_non_json_results_are_not_stored():
    store = InMemoryStore()
    runs = Counter()
    inv = Invoker(ToolRegistry([make_send(runs, fail_first=1)]), middleware=[mw.idempotency(store)])
    assert (await inv.invoke(call("send", to="x")))["ok"] is False
    key = _core.idempotency_store_key(inv.default_scope, "send", '{"to":"x"}')
    assert store._data == {key: '{"s":"free"}'}  # the claim released, nothing cached
    assert (await inv.invoke(call("send", to="x")))["ok"] is True
    assert json.loads(store._data[key]) == {"s": "done", "value": {"receipt": 2, "to": "x"}}

    @tool(side_effecting=True)
    def make_set() -> Any:
        """Return a Python set, which JSON cannot represent."""
        runs.n += 1
        return {1}

    inv = Invoker(ToolRegistry([make_set]), middleware=[mw.idempotency(InMemoryStore())])
    assert [(await inv.invoke(call("make_set")))["value"] for _ in range(2)] == [{1}, {1}]
    with pytest.raises(TypeError, match="store must have async get"):
        mw.idempotency(store=object())


@pytest.mark.parametrize(
    ("chain", "timeout_s", "deadline_in", "lease_s", "lease"),
    [
        # the timeout middleware's default, not the tool's missing timeout_s, bounds one attempt
        (lambda: [mw.timeout(default_s=120.0)], None, None, 1.0, 125.0),
        # the tool's own timeout_s wins; three attempts of a retry-safe call and the backoff
        # ceilings between them (1 + 2 s) count too
        (lambda: [mw.retry(max_attempts=3, base_s=1.0), mw.timeout(default_s=5.0)], 50.0, None, 1.0, 3 * 50.0 + 3.0 + 5.0),
        # never more than the time the context has left (plus 5 s), never less than lease_s
        (lambda: [mw.retry(max_attempts=3, base_s=1.0), mw.timeout()], 50.0, 20.0, 1.0, 25.0),
        (lambda: [mw.timeout()], 1.0, None, 30.0, 30.0),
    ],
    ids=["timeout-default", "retries-and-backoff", "ctx-deadline", "at-least-lease_s"],
)
async def test_the_shared_claim_lease_covers_every_attempt_the_chain_may_make(chain, timeout_s, deadline_in, lease_s, lease):
    """The lease of a shared idempotency claim was three times the tool's ``timeout_s`` (10 s
    when unset) plus 5 s: a tool without ``timeout_s`` under ``timeout(default_s=120)`` held a
    60 s lease, so another worker took the call over and ran it a second time while the first
    was still within its deadline."""
    store = InMemoryStore()
    leases: list[float] = []

    @tool(side_effecting=True, idempotent=True, timeout_s=timeout_s)
    async def order(item: str) -> str:
        """Place an order for an item and return its receipt."""
        key = _core.idempotency_store_key("run", "order", json.dumps({"item": item}, separators=(",", ":")))
        leases.append(json.loads(await store.get(key))["until"] - time.time())
        return "receipt"

    inv = Invoker(ToolRegistry([order]), middleware=[mw.idempotency(store, lease_s=lease_s), *chain()])
    ctx = ToolContext(run_id="run", deadline=None if deadline_in is None else time.monotonic() + deadline_in)
    env = await inv.invoke(call("order", item="a"), ctx)
    assert env["value"] == "receipt"
    assert len(leases) == 1 and lease - 1.0 < leases[0] <= lease


# ------------------------------------------------------------------ retry


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def flaky_tool(runs: Counter, exc_factory, fails: int, *, side_effecting=False, idempotent=False, name="flaky"):
    @tool(side_effecting=side_effecting, idempotent=idempotent, name=name)
    def flaky(x: int) -> str:
        """A tool that fails a given number of times before it works."""
        runs.n += 1
        if runs.n <= fails:
            raise exc_factory()
        return f"ok after {runs.n}"

    return flaky


async def run_retry(t, **kwargs):
    sleeps = Sleeps()
    records: list[dict] = []
    inv = Invoker(ToolRegistry([t]), middleware=[mw.audit(records.append), mw.retry(sleep=sleeps, **kwargs), mw.timeout()])
    env = await inv.invoke(call(t.name, x=1))
    return env, records[0], sleeps


@pytest.mark.parametrize(
    "exc_factory",
    [
        lambda: ToolError("rate limited; wait", code="rate_limited", retriable=True),
        lambda: ConnectionError("reset"),
        lambda: TimeoutError("upstream read timed out"),
    ],
    ids=["retriable-tool-error", "connection-error", "body-timeout-error"],
)
async def test_transient_errors_are_retried_with_full_jitter(exc_factory):
    runs = Counter()
    env, record, sleeps = await run_retry(flaky_tool(runs, exc_factory, fails=2))
    assert (env["value"], record["attempts"], record["decision"], runs.n) == ("ok after 3", 3, "executed", 3)
    assert len(sleeps) == 2 and 0.0 <= sleeps[0] < 0.5 and 0.0 <= sleeps[1] < 1.0


async def test_retry_gives_up_after_max_attempts_with_the_last_envelope():
    runs = Counter()
    env, record, sleeps = await run_retry(flaky_tool(runs, lambda: ConnectionError("down"), fails=10), max_attempts=4)
    assert env == {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "flaky failed: ConnectionError: down. This is a bug in the tool, not in your arguments; do not retry.",
        },
    }
    assert (record["attempts"], record["outcome"], len(sleeps), runs.n) == (4, "internal_error", 3, 4)


@pytest.mark.parametrize(
    "exc_factory,fails_expected",
    [
        (lambda: ToolError("not found", code="not_found"), 1),
        (lambda: ValueError("connection reset, please retry"), 1),  # words in a message never count
        (lambda: KeyError("k"), 1),
    ],
    ids=["non-retriable-tool-error", "message-words", "other-exception"],
)
async def test_permanent_errors_are_not_retried(exc_factory, fails_expected):
    runs = Counter()
    env, record, sleeps = await run_retry(flaky_tool(runs, exc_factory, fails=5))
    assert (env["ok"], record["attempts"], sleeps, runs.n) == (False, fails_expected, [], fails_expected)


async def test_declared_transient_types_are_retried():
    runs = Counter()
    env, record, _ = await run_retry(flaky_tool(runs, lambda: KeyError("cache miss"), fails=1), transient=(KeyError,))
    assert (env["ok"], record["attempts"]) == (True, 2)


@pytest.mark.parametrize("kind", ["str_raises", "lone_surrogate"])
async def test_a_result_whose_text_cannot_be_made_is_not_stored_and_the_call_is_ok(kind: str, caplog) -> None:
    """A result whose JSON text cannot be made (its ``__str__`` raises, a string with a lone
    surrogate) is not shared (logged) and the call, its side effect done, is answered ok."""
    runs: list[str] = []

    class Receipt:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    receipt = Receipt()

    @tool(side_effecting=True)
    def pay(kind: str) -> Any:
        """Pay the supplier and return the receipt."""
        runs.append(kind)
        return receipt if kind == "str_raises" else "a\ud800b"

    inv = Invoker(ToolRegistry([pay]), middleware=[mw.idempotency(store=InMemoryStore())])
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        env = await inv.invoke(call("pay", "c1", kind=kind), ToolContext(run_id="r"))
    env.pop("elapsed_ms", None)
    assert env == {"ok": True, "value": receipt if kind == "str_raises" else "a\ud800b"}
    assert runs == [kind]
    type_name = "Receipt" if kind == "str_raises" else "str"
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("agentkit_tools.middleware", "WARNING", f"a result of type {type_name} cannot be stored as JSON; not shared for deduplication")
    ]


async def test_side_effecting_tools_are_retried_only_when_idempotent():
    runs = Counter()
    env, record, _ = await run_retry(flaky_tool(runs, lambda: ConnectionError("x"), fails=1, side_effecting=True))
    assert (env["ok"], record["attempts"], runs.n) == (False, 1, 1)
    runs = Counter()
    env, record, _ = await run_retry(
        flaky_tool(runs, lambda: ConnectionError("x"), fails=1, side_effecting=True, idempotent=True)
    )
    assert (env["ok"], record["attempts"], runs.n) == (True, 2, 2)


async def test_our_own_deadline_and_argument_errors_are_never_retried():
    runs = Counter()

    @tool(read_only=True, timeout_s=0.05)
    async def stuck(x: int) -> str:
        """A tool that never answers within its deadline."""
        runs.n += 1
        await asyncio.sleep(10)
        return "late"

    env, record, sleeps = await run_retry(stuck)
    assert (env["error"]["code"], record["attempts"], sleeps, runs.n) == ("timeout", 1, [], 1)
    sleeps = Sleeps()
    records: list[dict] = []
    inv = Invoker(ToolRegistry([stuck]), middleware=[mw.audit(records.append), mw.retry(sleep=sleeps)])
    env = await inv.invoke(call("stuck", x="not an int"))
    assert (env["error"]["code"], records[0]["attempts"], sleeps, runs.n) == ("invalid_arguments", 0, [], 1)


async def test_circuit_breaker_opens_after_consecutive_failures():
    runs = Counter()
    flaky = flaky_tool(runs, lambda: ConnectionError("down"), fails=100)
    records: list[dict] = []
    inv = Invoker(
        ToolRegistry([flaky]),
        middleware=[mw.audit(records.append), mw.retry(max_attempts=1, breaker_threshold=2, breaker_cooldown_s=60)],
    )
    envs = [await inv.invoke(call("flaky", x=1)) for _ in range(3)]
    assert [e["error"]["code"] for e in envs] == ["internal_error", "internal_error", "circuit_open"]
    assert envs[2] == {
        "ok": False,
        "error": {
            "code": "circuit_open",
            "message": "flaky is failing repeatedly (2 failures in a row) and is paused for 60s. Do not call it now; "
            "tell the user the service is unavailable and try later.",
            "tool": "flaky",
            "retriable": False,
        },
    }
    assert ([r["attempts"] for r in records], runs.n) == ([1, 1, 0], 2)


async def test_breaker_stops_retries_and_success_resets_it():
    runs = Counter()
    inv = Invoker(
        ToolRegistry([flaky_tool(runs, lambda: ConnectionError("down"), fails=1)]),
        middleware=[mw.retry(max_attempts=3, breaker_threshold=2, sleep=Sleeps())],
    )
    assert (await inv.invoke(call("flaky", x=1)))["ok"] is True  # one failure, then success
    assert runs.n == 2
    runs2 = Counter()
    inv = Invoker(
        ToolRegistry([flaky_tool(runs2, lambda: ConnectionError("down"), fails=100)]),
        middleware=[mw.retry(max_attempts=5, breaker_threshold=2, sleep=Sleeps())],
    )
    env = await inv.invoke(call("flaky", x=1))
    assert (env["error"]["code"], runs2.n) == ("internal_error", 2)  # the open circuit ended the retries


def test_pipeline_refuses_an_unknown_rule_kind():
    with pytest.raises(ValueError) as e:
        _core.Pipeline([("audit", mw.audit()), ("Retry", mw.retry())], "s")
    assert str(e.value) == 'unknown pipeline rule "Retry"'
    assert [type(c).__name__ for c in _core.Pipeline([("timeout", mw.timeout(1.0))], "s").configs] == ["_Timeout"]


def test_retry_policy_bounds_and_validation():
    policy = _core.RetryPolicy(3, 0.5, 30.0)
    assert [policy.ceiling_s(a) for a in (1, 2, 3, 7, 8)] == [0.5, 1.0, 2.0, 30.0, 30.0]
    assert all(0.0 <= policy.delay_s(2) < 1.0 for _ in range(200))
    assert policy.decide(ConnectionError(), True, 3) == ("transient", None)
    assert policy.decide(ConnectionError(), False, 1) == ("transient", None)
    from agentkit_tools import ToolArgumentError, ToolTimeoutError

    assert policy.decide(ToolTimeoutError("t", 1.0), True, 1) == ("deadline", None)
    assert _core.RetryPolicy(3, 0.5, 30.0, (ValueError,)).decide(ToolArgumentError("t"), True, 1) == ("permanent", None)
    from agentkit_tools import ToolShapeError

    catch_all = _core.RetryPolicy(3, 0.5, 30.0, (Exception,))
    assert catch_all.decide(ToolShapeError("t", "Point", {}), True, 1) == ("permanent", None)
    assert catch_all.decide(ToolError("x", retriable=False), True, 1) == ("permanent", None)
    assert catch_all.decide(ToolError("x", retriable=True), True, 1)[0] == "transient"
    assert catch_all.decide(RuntimeError("x"), True, 1)[0] == "transient"
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        mw.retry(max_attempts=0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        mw.retry(base_s=-1)
    with pytest.raises(TypeError, match="exception classes"):
        mw.retry(transient=("KeyError",))


# ------------------------------------------------------------------ timeout


async def test_async_body_is_cancelled_at_its_deadline():
    observed: list[str] = []

    @tool(read_only=True, timeout_s=0.05)
    async def slow_report(x: int) -> str:
        """Build a report that takes far longer than allowed."""
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            observed.append("cancelled")
            raise
        return "done"

    env = await Invoker(ToolRegistry([slow_report]), middleware=[mw.timeout()]).invoke(call("slow_report", x=1))
    assert env == {
        "ok": False,
        "error": {
            "code": "timeout",
            "message": "slow_report did not finish within 0.05s. Do not retry immediately; tell the user the backend is slow.",
        },
    }
    await asyncio.sleep(0)  # the cancelled body runs its clean-up on its own, after the caller has its answer
    assert observed == ["cancelled"]


async def test_sync_body_wait_is_bounded_and_its_thread_left_to_finish():
    release, finished = threading.Event(), threading.Event()

    @tool(read_only=True)
    def blocking(x: int) -> str:
        """Block in a thread until the test releases it."""
        release.wait(5)
        finished.set()
        return "late"

    inv = Invoker(ToolRegistry([blocking]), middleware=[mw.timeout(default_s=0.05)])
    env = await inv.invoke(call("blocking", x=1))
    assert env["error"]["code"] == "timeout"
    assert env["error"]["message"].startswith("blocking did not finish within 0.05s.")
    assert not finished.is_set()  # the thread is still running: it cannot be killed
    release.set()
    assert await asyncio.to_thread(finished.wait, 5) is True


async def test_context_deadline_cuts_the_timeout_and_body_timeout_error_is_not_ours():
    @tool(read_only=True, timeout_s=30)
    async def wait_long() -> str:
        """Wait far longer than the run has left."""
        await asyncio.sleep(5)
        return "late"

    @tool(read_only=True)
    async def own_timeout() -> str:
        """Raise TimeoutError from the body itself."""
        raise TimeoutError("backend read timeout")

    inv = Invoker(ToolRegistry([wait_long, own_timeout]), middleware=[mw.timeout()])
    env = await inv.invoke(call("wait_long"), ToolContext.with_timeout(0.05))
    assert env["error"]["code"] == "timeout"
    env = await inv.invoke(call("own_timeout"))
    assert env["error"]["code"] == "internal_error"
    assert env["error"]["message"].startswith("own_timeout failed: TimeoutError: backend read timeout.")
    for bad in (0, -1, float("nan"), float("inf"), 2_592_001, True, "5", None):
        with pytest.raises(ValueError) as info:
            mw.timeout(bad)
        assert str(info.value) == (
            "timeout: default_s must be a number of seconds greater than 0 and at most 2592000 (30 days), "
            f"got {bad!r}"
        )
    assert mw.timeout(2_592_000).default_s == 2_592_000


async def test_concurrent_deadlines_expire_independently():
    cancelled: list[str] = []

    def make(name: str, limit: float, sleep_s: float):
        async def body(args, ctx):
            try:
                await asyncio.sleep(sleep_s)
            except asyncio.CancelledError:
                cancelled.append(name)
                raise
            return name

        from agentkit_tools import FunctionTool, ToolSchema

        return FunctionTool(name, body, "test tool", False, schema=ToolSchema(name, "t", {"type": "object"}), timeout_s=limit)

    tools = [make("late_short", 0.05, 5), make("early_long", 5, 0.01), make("late_mid", 0.1, 5), make("ok_mid", 5, 0.15)]
    inv = Invoker(ToolRegistry(tools), middleware=[mw.timeout()])
    envs = await inv.invoke_many([call(t.name, t.name) for t in tools])
    assert [e.get("value", e.get("error", {}).get("code")) for e in envs] == ["timeout", "early_long", "timeout", "ok_mid"]
    assert cancelled == ["late_short", "late_mid"]
    assert [e["error"]["message"].split(".")[0] for e in envs if not e["ok"]] == [
        "late_short did not finish within 0", "late_mid did not finish within 0",
    ]


async def test_a_body_that_swallows_its_cancellation_keeps_the_task_usable():
    @tool(read_only=True, timeout_s=0.02)
    async def stubborn() -> str:
        """Ignore cancellation and return a value anyway."""
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "ignored the deadline"
        return "slept"

    inv = Invoker(ToolRegistry([stubborn]), middleware=[mw.timeout()])
    started = time.perf_counter()
    env = await inv.invoke(call("stubborn"))
    # past its deadline a call is never a success, whatever the body returns later
    assert env["error"]["code"] == "timeout" and time.perf_counter() - started < 1.0
    task = asyncio.current_task()
    assert task is not None and getattr(task, "cancelling", lambda: 0)() == 0  # 3.11+
    await asyncio.sleep(0.01)  # the task was not left with a pending cancellation


# ------------------------------------------------------------------ egress


def make_fetch(runs: Counter):
    @tool(read_only=True, url_arg="url")
    def fetch(url: str) -> str:
        """Fetch a web page and return its text content."""
        runs.n += 1
        return f"fetched {url}"

    return fetch


async def test_egress_allows_listed_hosts_and_denies_others():
    runs = Counter()
    inv = Invoker(
        ToolRegistry([make_fetch(runs), ping_tool()]),
        middleware=[mw.egress(allow=("api.example.com", "*.docs.example.org"))],
    )
    assert (await inv.invoke(call("fetch", url="https://API.example.com:443/v1")))["ok"] is True
    assert (await inv.invoke(call("fetch", url="https://v2.docs.example.org/x")))["ok"] is True
    denied = await inv.invoke(call("fetch", url="https://api.example.com.evil.net/"))
    assert denied == {
        "ok": False,
        "error": {
            "code": "egress_denied",
            "message": "fetch may not reach host 'api.example.com.evil.net': it is not on the allow-list "
            "(api.example.com, *.docs.example.org). Do not retry with this URL; use an allowed host or tell the "
            "user this host is not permitted.",
            "tool": "fetch",
            "host": "api.example.com.evil.net",
            "allowed": ["api.example.com", "*.docs.example.org"],
        },
    }
    tricky = await inv.invoke(call("fetch", url="https://evil.net\\@api.example.com/"))
    assert tricky["error"] == {
        "code": "egress_denied",
        "message": "fetch refused the URL in 'url': the URL has a backslash before its path, which some parsers "
        "read as '/' and others do not, so its host is ambiguous. Call it again with a plain http or https URL "
        "such as https://host/path (allowed hosts: api.example.com, *.docs.example.org).",
        "tool": "fetch",
        "allowed": ["api.example.com", "*.docs.example.org"],
    }
    no_host = await inv.invoke(call("fetch", url="api.example.com/v1"))
    assert no_host["error"] == {
        "code": "egress_denied",
        "message": "fetch needs an absolute URL with a host in 'url' (allowed hosts: api.example.com, "
        "*.docs.example.org). Call it again with a full URL such as https://host/path.",
        "tool": "fetch",
        "allowed": ["api.example.com", "*.docs.example.org"],
    }
    assert (await inv.invoke(call("ping")))["ok"] is True
    assert runs.n == 2
    assert _core.url_host("http://Example.COM.:8080/p") == "example.com"
    assert _core.url_host("http://user@Example.COM.:8080/p") is None


async def test_empty_egress_allow_list_denies_every_url_and_audit_says_refused():
    runs = Counter()
    records: list[dict] = []
    inv = Invoker(ToolRegistry([make_fetch(runs)]), middleware=[mw.audit(records.append), mw.egress()])
    env = await inv.invoke(call("fetch", url="https://example.com"))
    assert env["error"]["message"].endswith("(none). Do not retry with this URL; use an allowed host or tell the user this host is not permitted.")
    assert (records[0]["decision"], records[0]["outcome"], runs.n) == ("refused", "egress_denied", 0)


# ------------------------------------------------------------------ the default chain end to end


async def test_default_chain_order_dedup_is_recorded_and_repeat_wins_after_the_success():
    runs = Counter()
    records: list[dict] = []
    send = make_send(runs)
    inv = Invoker(ToolRegistry([send]), middleware=[mw.audit(records.append), *mw.default_chain()[1:]])
    envs = [await inv.invoke(call("send", to="bob")) for _ in range(4)]
    # the success resets the counts (the world changed); the deduplicated repeats count
    assert [(r["decision"], r["outcome"]) for r in records] == [
        ("executed", "ok"), ("deduplicated", "ok"), ("deduplicated", "ok"), ("refused", "repeated_call"),
    ]
    assert [e.get("deduplicated", False) for e in envs[:3]] == [False, True, True]
    assert runs.n == 1


def test_repeat_guard_limit_is_range_checked_when_built() -> None:
    import pytest

    from agentkit_tools import middleware as mw

    for bad in (0, -1, 2**32, 2**62, 1.5, True):
        with pytest.raises(ValueError, match="repeat_guard: limit must be an integer from 1 to 4294967295"):
            mw.repeat_guard(limit=bad)
    assert mw.repeat_guard(limit=2**32 - 1).limit == 4294967295


def test_canonical_text_of_a_mapping_and_of_json_text_agree() -> None:
    from agentkit_tools import _core

    args = {"b": [1, 1.5, None, True, (2, "x")], "a": "é\n\"q\"", "c": {"z": -0.0, "y": 1e300}}
    text = json.dumps(args)
    expected = '{"a":"é\\n\\"q\\"","b":[1,1.5,null,true,[2,"x"]],"c":{"y":1e+300,"z":-0.0}}'
    assert _core.canonical_args(args)[0] == _core.canonical_args(text)[0] == expected
    # integers beyond 64 bits stay exact; what JSON cannot hold falls back to the repr
    assert _core.canonical_args({"n": 2**70})[0] == '{"n":1180591620717411303424}'
    assert _core.canonical_args({"f": float("nan")})[0] == "{'f': nan}"
    assert _core.canonical_args({1: 2})[0] == "{1: 2}"
    deep: list = []
    for _ in range(300):
        deep = [deep]
    assert _core.canonical_args({"d": deep})[0].startswith("{'d': [[[")


def test_audit_imports_opentelemetry_when_built_not_on_the_first_call():
    """The core asks the audit rule per call whether anyone observes the record; an import
    there, in a daemon thread of an exiting process, aborted the process (22 of 60 runs of a
    script whose daemon threads made their first calls as the main thread returned). The rule
    is resolved when ``audit()`` is built, on the constructing thread."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from agentkit_tools import middleware as mw\n"
        "before = 'opentelemetry.trace' in sys.modules\n"
        "mw.audit()\n"
        "print(before, 'opentelemetry.trace' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (0, "False True\n", "")


@pytest.mark.parametrize("how", ["invoke", "invoke_many"])
async def test_an_async_sink_that_does_not_finish_does_not_hold_the_callers_cancellation(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The caller cancels a call (a turn of three) whose async sink does not finish with the
    record: the cancellation completes once the abort's bound (1 s, one for the whole turn) has
    passed, a warning names the sink for each record, and the sink still gets each record when it
    finishes later."""
    started = asyncio.Event()
    finish = asyncio.Event()
    got: list[tuple[str, str]] = []

    @tool(read_only=True)
    async def waits(x: int) -> int:
        """Wait a long time for the thing to happen, then answer."""
        started.set()
        await asyncio.sleep(3600)
        return x

    async def sink(rec: dict) -> None:
        await finish.wait()
        got.append((rec["call_id"], rec["outcome"]))

    inv = Invoker(ToolRegistry([waits]), middleware=[mw.audit(sink), *mw.default_chain()[1:]])
    ids = ["a"] if how == "invoke" else ["a", "b", "c"]
    task = asyncio.ensure_future(inv.invoke(call("waits", "a", x=1)) if how == "invoke" else inv.invoke_many([call("waits", i, x=n) for n, i in enumerate(ids)]))
    await asyncio.wait_for(started.wait(), 5)
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        task.cancel()
        t0 = time.monotonic()
        await asyncio.wait([task], timeout=5)
        took = time.monotonic() - t0
    assert (task.done(), task.done() and task.cancelled()) == (True, True)
    assert 0.95 <= took < 2.5, took
    assert [(r.levelname, r.getMessage().replace(repr(sink), "<sink>")) for r in caplog.records] == [(
        "WARNING",
        "audit sink <sink> has not taken the record of an aborted call when the abort's wait ended "
        "(at most 1.0 s from the caller's cancellation or stop, for all the releases and records it "
        "waits for); the caller goes on without it and the sink gets the record when it is done (it "
        "is lost if its event loop is closed first)",
    )] * len(ids)
    assert got == []
    finish.set()
    for _ in range(100):
        if len(got) == len(ids):
            break
        await asyncio.sleep(0.01)
    assert sorted(got) == [(i, "cancelled") for i in ids]


@pytest.mark.parametrize("how", ["invoke", "invoke_many"])
def test_an_async_sink_whose_loop_is_closed_under_an_aborted_call_says_the_record_is_lost(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A call is still waiting when its event loop is closed: the call is aborted without its
    loop, and an async sink that would have to await for the record cannot get it; a warning
    names the sink and says the record is lost."""
    import gc

    got: list[str] = []

    @tool(read_only=True, timeout_s=5)
    async def waits(x: int) -> int:
        """Wait a long time for the thing to happen, then answer."""
        await asyncio.sleep(10)
        return x

    async def sink(rec: dict) -> None:
        await asyncio.sleep(0)
        got.append(rec["call_id"])

    inv = Invoker(ToolRegistry([waits]), middleware=[mw.audit(sink), *mw.default_chain()[1:]])
    loop = asyncio.new_event_loop()
    c = call("waits", "a", x=1)
    task = loop.create_task(inv.invoke(c) if how == "invoke" else inv.invoke_many([c]))
    task._log_destroy_pending = False  # type: ignore[attr-defined]
    loop.run_until_complete(asyncio.sleep(0.05))
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        loop.close()
        del task
        gc.collect()
    assert [(r.levelname, r.getMessage().replace(repr(sink), "<sink>")) for r in caplog.records] == [
        ("WARNING", "audit sink <sink> could not take the record of an aborted call: its event loop is closed (the record is lost)")
    ]
    assert got == []


def test_a_sink_left_behind_by_a_cancellation_and_then_its_loop_closed_says_the_record_is_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The caller's cancellation went on without a sink that did not take the record within the
    abort's bound; then the loop is closed: the record is said lost, and nothing else is
    reported (no task destroyed while pending)."""
    import gc

    @tool(read_only=True, timeout_s=5)
    async def waits(x: int) -> int:
        """Wait a long time for the thing to happen, then answer."""
        await asyncio.sleep(10)
        return x

    async def sink(rec: dict) -> None:
        await asyncio.Event().wait()

    inv = Invoker(ToolRegistry([waits]), middleware=[mw.audit(sink), *mw.default_chain()[1:]])

    async def main() -> bool:
        task = asyncio.create_task(inv.invoke(call("waits", "a", x=1)))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.wait([task], timeout=5)
        return task.cancelled()

    loop = asyncio.new_event_loop()
    with caplog.at_level(logging.WARNING):
        assert loop.run_until_complete(main()) is True
        loop.close()
        gc.collect()
    assert [(r.name, r.levelname, r.getMessage().replace(repr(sink), "<sink>")) for r in caplog.records] == [
        ("agentkit_tools.middleware", "WARNING",
         "audit sink <sink> has not taken the record of an aborted call when the abort's wait ended (at most "
         "1.0 s from the caller's cancellation or stop, for all the releases and records it waits for); the "
         "caller goes on without it and the sink gets the record when it is done (it is lost if its event "
         "loop is closed first)"),
        ("agentkit_tools.middleware", "WARNING",
         "audit sink <sink> could not take the record of an aborted call: its event loop is closed (the record is lost)"),
    ]
