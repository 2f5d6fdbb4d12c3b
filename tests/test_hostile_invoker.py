"""Hostile but realistic inputs to the Invoker and its middleware (SPEC §7, §11): approvers that
raise or lie, forged approvals, odd run ids, broken idempotency stores and audit sinks, retry
limits, the circuit breaker, egress URLs, and invoke_many's edge cases and cancellation."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolError, ToolRegistry, middleware as mw, tool


def call(name: str, cid: str = "c1", **args: Any) -> dict:
    return {"id": cid, "name": name, "input": args}


def make_pay(runs: list) -> Any:
    @tool(side_effecting=True, requires_approval=True)
    def pay(amount: int) -> str:
        """Pay an amount of money to the supplier on file."""
        runs.append(amount)
        return f"paid {amount}"

    return pay


def gate(approver: Any = None) -> Invoker:
    return Invoker(ToolRegistry([make_pay(RUNS)]), middleware=[mw.approval(approver)])


RUNS: list = []


@pytest.fixture(autouse=True)
def _clear_runs():
    RUNS.clear()
    yield
    RUNS.clear()


def code(env: dict) -> str:
    return "ok" if env["ok"] else env["error"]["code"]


# ------------------------------------------------------------------ approval


async def test_approver_that_raises_refuses():
    def approver(tool, args, ctx):
        raise RuntimeError("approval service down")

    env = await gate(approver).invoke(call("pay", amount=5))
    assert (code(env), RUNS) == ("approval_required", [])


async def test_an_approver_that_raises_is_logged_in_the_same_words_by_invoke_and_dispatch(caplog):
    """Both paths log the failing approver with the one log line of the core: the approver, the
    tool's name, the exception."""
    from agentkit_tools import dispatch

    def approver(tool, args, ctx):
        raise RuntimeError("approval service down")

    with caplog.at_level("ERROR", logger="agentkit_tools.middleware"):
        env = await gate(approver).invoke(call("pay", amount=5))
        registry = ToolRegistry([make_pay(RUNS)])
        envd = await asyncio.to_thread(dispatch, call("pay", amount=6), registry, approver=approver)
    assert (code(env), code(envd), RUNS) == ("approval_required", "approval_required", [])
    logged = [(r.name, r.levelname, r.getMessage(), repr(r.exc_info[1])) for r in caplog.records]
    line = f"approver {approver!r} failed: the call of pay is refused"
    exc = "RuntimeError('approval service down')"
    assert logged == [("agentkit_tools.middleware", "ERROR", line, exc)] * 2


async def test_approver_whose_result_cannot_be_made_a_bool_refuses():
    class Liar:
        def __bool__(self):
            raise ValueError("no truth value")

    env = await gate(lambda t, a, c: Liar()).invoke(call("pay", amount=5))
    assert (code(env), RUNS) == ("approval_required", [])


async def test_slow_async_approver_is_awaited():
    async def approver(tool, args, ctx):
        await asyncio.sleep(0.01)
        return dict(args) == {"amount": 5}

    inv = gate(approver)
    assert code(await inv.invoke(call("pay", amount=5))) == "ok"
    assert code(await inv.invoke(call("pay", amount=6))) == "approval_required"
    assert RUNS == [5]


async def test_approver_gets_frozen_args_it_cannot_change():
    def approver(tool, args, ctx):
        with pytest.raises(TypeError, match="frozen value"):
            args["amount"] = 1_000_000  # type: ignore[index]
        return True

    env = await gate(approver).invoke(call("pay", amount=5))
    assert (env["value"], RUNS) == ("paid 5", [5])


@pytest.mark.parametrize("mark", ["yes", "true", 1, 1.0, [True], {"ok": True}])
async def test_only_the_boolean_true_approves_a_call(mark):
    env = await gate().invoke({**call("pay", amount=5), "approved": mark})
    assert (code(env), RUNS) == ("approval_required", [])


async def test_approved_in_the_model_arguments_does_not_approve():
    @tool(side_effecting=True, requires_approval=True)
    def wire(amount: int, approved: bool = False) -> str:
        """Wire money; `approved` is just a parameter the model may fill."""
        RUNS.append(amount)
        return "wired"

    inv = Invoker(ToolRegistry([wire]), middleware=[mw.approval()])
    env = await inv.invoke(call("wire", amount=5, approved=True))
    assert (code(env), RUNS) == ("approval_required", [])
    env = await inv.invoke({"id": "o1", "function": {"name": "wire", "arguments": '{"amount": 5}', "approved": True}})
    assert (code(env), RUNS) == ("approval_required", [])


async def test_approvals_given_as_a_string_do_not_approve_by_substring():
    # A host that wrote approvals="pay_all" instead of {"pay_all"} must not approve "pay".
    ctx = ToolContext(run_id="r")
    ctx.approvals = "pay_all"  # type: ignore[assignment]
    env = await gate().invoke(call("pay", amount=5), ctx)
    assert (code(env), RUNS) == ("approval_required", [])


class Approvals:
    """A host's collection of approvals: ``in`` answers from ``holds`` or raises ``error``."""

    def __init__(self, holds: set, error: BaseException | None = None) -> None:
        self.holds, self.error, self.asked = holds, error, []

    def __bool__(self) -> bool:
        return True

    def __contains__(self, key: object) -> bool:
        self.asked.append(key)
        if self.error is not None:
            raise self.error
        return key in self.holds


async def test_approvals_are_asked_for_the_name_then_the_call_id_and_a_type_error_refuses():
    ctx = ToolContext(run_id="r")
    for approvals, expected, asked in [
        (Approvals({"pay"}), "ok", ["pay"]),
        (Approvals({"c1"}), "ok", ["pay", "c1"]),
        (Approvals(set()), "approval_required", ["pay", "c1"]),
        (Approvals(set(), TypeError("unhashable")), "approval_required", ["pay"]),
    ]:
        ctx.approvals = approvals  # type: ignore[assignment]
        env = await gate().invoke(call("pay", amount=5), ctx)
        assert (code(env), approvals.asked) == (expected, asked)
    assert RUNS == [5, 5]


async def test_approvals_that_fail_otherwise_fail_the_call_as_a_fault():
    ctx = ToolContext(run_id="r")
    ctx.approvals = Approvals(set(), RuntimeError("approvals store down"))  # type: ignore[assignment]
    env = await gate().invoke(call("pay", amount=5), ctx)
    assert (code(env), RUNS) == ("internal_error", [])


# ------------------------------------------------------------------ run ids


class RunCtx:
    def __init__(self, run_id: Any) -> None:
        self.run_id = run_id


@pytest.mark.parametrize("run_id", [None, 7, 3.5, object(), ("a", 1)])
async def test_run_ids_that_are_not_strings_still_scope_repeat_detection(run_id):
    @tool(read_only=True)
    def look(q: str) -> str:
        """Look a query up in the read-only catalogue and return it."""
        return q

    inv = Invoker(ToolRegistry([look]), middleware=[mw.repeat_guard(limit=2)])
    ctx = RunCtx(run_id)
    assert code(await inv.invoke(call("look", q="x"), ctx)) == "ok"
    assert code(await inv.invoke(call("look", q="x"), ctx)) == "repeated_call"
    # another conversation is not affected
    assert code(await inv.invoke(call("look", q="x"), RunCtx("other"))) == "ok"


async def test_run_id_that_cannot_be_read_gives_an_envelope():
    class Broken:
        @property
        def run_id(self):
            raise RuntimeError("boom")

    @tool(read_only=True)
    def look(q: str) -> str:
        """Look a query up in the read-only catalogue and return it."""
        return q

    env = await Invoker(ToolRegistry([look])).invoke(call("look", q="x"), Broken())
    assert env["ok"] is False and env["error"]["code"] == "internal_error"
    assert env["error"]["message"].startswith("The call could not be completed: RuntimeError: boom.")


# ------------------------------------------------------------------ idempotency


class BrokenStore:
    """A StorePort whose get/set raise or return garbage."""

    def __init__(self, get_result: Any = None, get_raises: bool = False, set_raises: bool = False) -> None:
        self.get_result, self.get_raises, self.set_raises = get_result, get_raises, set_raises
        self.sets: list = []

    async def get(self, key: str) -> Any:
        if self.get_raises:
            raise ConnectionError("redis down")
        return self.get_result

    async def set(self, key: str, value: str) -> None:
        if self.set_raises:
            raise ConnectionError("redis down")
        self.sets.append(value)

    async def compare_and_set(self, key: str, expected: Any, value: str) -> bool:
        if self.set_raises:
            raise ConnectionError("redis down")
        self.sets.append(value)
        return True


def make_order(runs: list, result: Any = "ordered") -> Any:
    @tool(side_effecting=True)
    def order(item: str) -> Any:
        """Place an order for an item with the supplier on file."""
        runs.append(item)
        return result

    return order


@pytest.mark.parametrize(
    "store",
    [
        BrokenStore(get_raises=True),
        BrokenStore(set_raises=True),
        BrokenStore(get_result=12345),
        BrokenStore(get_result="{not json"),
        BrokenStore(get_result=object()),
    ],
    ids=["get-raises", "set-raises", "get-int", "get-bad-json", "get-object"],
)
async def test_a_broken_store_never_breaks_the_call(store):
    inv = Invoker(ToolRegistry([make_order(RUNS)]), middleware=[mw.idempotency(store)])
    env = await inv.invoke(call("order", item="a"))
    assert (env["ok"], env["value"], "deduplicated" in env, RUNS) == (True, "ordered", False, ["a"])


async def test_a_result_another_worker_stored_is_a_hit_without_running_the_tool():
    from agentkit_tools import _core
    from agentkit_tools.stores import InMemoryStore

    store = InMemoryStore()
    inv = Invoker(ToolRegistry([make_order(RUNS)]), middleware=[mw.idempotency(store)])
    key = _core.idempotency_store_key(inv.default_scope, "order", '{"item":"a"}')
    window = "agentkit-tools:idem-window:" + _core.idempotency_store_key(inv.default_scope, "", "")[20:]
    await store.set(key, '{"s":"done","value":{"cached":[1,2]}}')
    await store.set(window, key)
    env = await inv.invoke(call("order", item="a"))
    assert (env["value"], env["deduplicated"], RUNS) == ({"cached": [1, 2]}, True, [])
    await store.set(window, "another call succeeded since")  # its window closed: the call runs
    env = await inv.invoke(call("order", item="a"))
    assert (env["value"], "deduplicated" in env, RUNS) == ("ordered", False, ["a"])


async def test_a_non_json_result_is_stored_as_its_json_form_and_still_deduplicated():
    from agentkit_tools.stores import InMemoryStore

    marker = object()
    store = InMemoryStore()
    inv = Invoker(ToolRegistry([make_order(RUNS, result={"obj": marker})]), middleware=[mw.idempotency(store)])
    first = await inv.invoke(call("order", item="a"))
    second = await inv.invoke(call("order", item="a"))
    # deduplicated all the same: this worker keeps the object itself, the store its JSON form
    assert (first["ok"], first["value"]["obj"] is marker, "deduplicated" in first) == (True, True, False)
    assert (second["ok"], second["deduplicated"], second["value"]["obj"] is marker, RUNS) == (True, True, True, ["a"])


@pytest.mark.parametrize("with_store", [False, True])
async def test_a_failure_is_never_cached(with_store):
    from agentkit_tools.stores import InMemoryStore

    outcomes = iter([ToolError("supplier busy; try later", code="busy"), None, None])

    @tool(side_effecting=True)
    def order(item: str) -> str:
        """Place an order for an item with the supplier on file."""
        RUNS.append(item)
        exc = next(outcomes)
        if exc is not None:
            raise exc
        return "ordered"

    inv = Invoker(ToolRegistry([order]), middleware=[mw.idempotency(InMemoryStore() if with_store else None)])
    envs = [await inv.invoke(call("order", item="a")) for _ in range(3)]
    assert [code(e) for e in envs] == ["busy", "ok", "ok"]
    assert [e.get("deduplicated", False) for e in envs] == [False, False, True]
    assert RUNS == ["a", "a"]


# ------------------------------------------------------------------ retry and the circuit breaker


def make_flaky(errors: list[BaseException]) -> Any:
    @tool(read_only=True)
    def fetch(q: str) -> str:
        """Fetch a record from the remote catalogue by query."""
        RUNS.append(q)
        if errors:
            raise errors.pop(0)
        return "record"

    return fetch


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_retriable_tool_error_forever_is_attempted_exactly_max_attempts_times():
    @tool(read_only=True)
    def fetch(q: str) -> str:
        """Fetch a record from the remote catalogue by query."""
        RUNS.append(q)
        raise ToolError("backend busy", code="busy", retriable=True)

    records: list = []
    sleeps = Sleeps()
    inv = Invoker(
        ToolRegistry([fetch]),
        middleware=[mw.audit(records.append), mw.retry(max_attempts=4, base_s=10.0, cap_s=2.0, sleep=sleeps)],
    )
    env = await inv.invoke(call("fetch", q="x"))
    assert (code(env), env["error"]["retriable"], len(RUNS)) == ("busy", True, 4)
    assert [(r["attempts"], r["outcome"], r["decision"]) for r in records] == [(4, "busy", "failed")]
    assert len(sleeps.delays) == 3
    assert all(0.0 <= d <= 2.0 for d in sleeps.delays)


async def test_max_attempts_one_never_retries():
    sleeps = Sleeps()
    inv = Invoker(ToolRegistry([make_flaky([ConnectionError("reset")])]), middleware=[mw.retry(max_attempts=1, sleep=sleeps)])
    env = await inv.invoke(call("fetch", q="x"))
    assert (code(env), len(RUNS), sleeps.delays) == ("internal_error", 1, [])


async def test_declared_transient_types_are_retried_by_type_only():
    class Throttled(Exception):
        pass

    class Fatal(Exception):
        pass

    sleeps = Sleeps()
    inv = Invoker(
        ToolRegistry([make_flaky([Throttled("x"), Throttled("y")])]),
        middleware=[mw.retry(transient=(Throttled,), sleep=sleeps)],
    )
    assert (await inv.invoke(call("fetch", q="x")))["value"] == "record"
    assert len(RUNS) == 3
    RUNS.clear()
    # a message that *says* transient does not make an exception retriable
    inv = Invoker(
        ToolRegistry([make_flaky([Fatal("transient, please retry")])]),
        middleware=[mw.retry(transient=(Throttled,), sleep=sleeps)],
    )
    assert code(await inv.invoke(call("fetch", q="x"))) == "internal_error"
    assert len(RUNS) == 1


async def test_side_effecting_non_idempotent_tool_is_not_retried():
    @tool(side_effecting=True)
    def send(to: str) -> str:
        """Send a message to a recipient through the mail gateway."""
        RUNS.append(to)
        raise ConnectionError("reset")

    inv = Invoker(ToolRegistry([send]), middleware=[mw.retry(sleep=Sleeps())])
    assert code(await inv.invoke(call("send", to="bob"))) == "internal_error"
    assert RUNS == ["bob"]


async def test_circuit_breaker_opens_then_recovers_after_cooldown():
    errors: list[BaseException] = [ConnectionError("a"), ConnectionError("b")]
    inv = Invoker(
        ToolRegistry([make_flaky(errors)]),
        middleware=[mw.retry(max_attempts=1, breaker_threshold=2, breaker_cooldown_s=0.05, sleep=Sleeps())],
    )
    assert code(await inv.invoke(call("fetch", q="1"))) == "internal_error"
    assert code(await inv.invoke(call("fetch", q="2"))) == "internal_error"
    refused = await inv.invoke(call("fetch", q="3"))
    assert (code(refused), refused["error"]["retriable"], RUNS) == ("circuit_open", False, ["1", "2"])
    await asyncio.sleep(0.1)
    assert (await inv.invoke(call("fetch", q="4")))["value"] == "record"
    assert (await inv.invoke(call("fetch", q="5")))["value"] == "record"
    assert RUNS == ["1", "2", "4", "5"]


# ------------------------------------------------------------------ egress


def make_get() -> Any:
    @tool(read_only=True, url_arg="url")
    def get(url: str) -> str:
        """Fetch a web page by its absolute URL and return its text."""
        RUNS.append(url)
        return "page"

    return get


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://evil.com@good.com/x", "egress_denied"),  # userinfo is refused altogether
        ("http://good.com@evil.com/x", "egress_denied"),
        ("HTTP://GOOD.COM./x", "ok"),
        ("http://evil.com\\@good.com", "egress_denied"),
        ("http://good.com\\@127.0.0.1/", "egress_denied"),  # WHATWG reads good.com, urllib 127.0.0.1
        ("http://evil.com#@good.com", "egress_denied"),
        ("http://[::1]:8080/x", "ok"),
        ("http://[::2]/x", "egress_denied"),
        ("http://user:pw@good.com:8443/", "egress_denied"),
        ("https://good.com:8443/x", "ok"),
        ("good.com/x", "egress_denied"),
        ("//good.com/x", "egress_denied"),
        ("http://good.com%2e.evil.com/", "egress_denied"),
        ("http://good.com.evil.com/", "egress_denied"),
    ],
)
async def test_egress_reads_the_host_a_url_parser_reads(url, expected):
    inv = Invoker(ToolRegistry([make_get()]), middleware=[mw.egress(allow=["good.com", "[::1]"])])
    env = await inv.invoke(call("get", url=url))
    assert code(env) == expected
    assert RUNS == ([url] if expected == "ok" else [])


async def test_egress_non_string_url_never_reaches_the_tool():
    @tool(read_only=True, url_arg="url")
    def get(url: Any) -> str:
        """Fetch a web page by its absolute URL and return its text."""
        RUNS.append(url)
        return "page"

    inv = Invoker(ToolRegistry([get]), middleware=[mw.egress(allow=["good.com"])])
    envs = [await inv.invoke(call("get", url=v)) for v in (5, ["http://good.com"], {"u": "http://good.com"})]
    assert [code(e) for e in envs] == ["egress_denied"] * 3
    assert RUNS == []


# ------------------------------------------------------------------ audit


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_audit_sink_that_raises_does_not_break_the_call(kind):
    def sync_sink(rec):
        raise RuntimeError("log pipeline down")

    async def async_sink(rec):
        raise RuntimeError("log pipeline down")

    def trace(name, attributes):
        raise RuntimeError("tracer down")

    sink = sync_sink if kind == "sync" else async_sink
    inv = Invoker(ToolRegistry([make_flaky([])]), middleware=[mw.audit(sink)])
    env = await inv.invoke(call("fetch", q="x"), ToolContext(run_id="r", trace=trace))
    assert (env["ok"], env["value"], RUNS) == (True, "record", ["x"])


# ------------------------------------------------------------------ invoke_many


async def test_invoke_many_of_nothing_is_an_empty_list():
    assert await Invoker(ToolRegistry([make_flaky([])])).invoke_many([]) == []
    assert await Invoker(ToolRegistry([make_flaky([])])).invoke_many(iter(())) == []


async def test_invoke_many_with_duplicate_call_ids_runs_each_call_in_order():
    @tool(read_only=True)
    def echo(q: str) -> str:
        """Echo the query back, for checking the order of results."""
        return q

    inv = Invoker(ToolRegistry([echo]), middleware=[])
    envs = await inv.invoke_many([call("echo", "same", q=str(i)) for i in range(4)])
    assert [e["value"] for e in envs] == ["0", "1", "2", "3"]


async def test_invoke_many_one_call_hangs_past_its_timeout_others_finish():
    @tool(read_only=True, timeout_s=0.05)
    async def hang(q: str) -> str:
        """Wait on a backend that never answers, for testing timeouts."""
        await asyncio.Event().wait()
        return "never"

    @tool(read_only=True)
    async def quick(q: str) -> str:
        """Answer at once, for testing that other calls finish."""
        return q

    inv = Invoker(ToolRegistry([hang, quick]))
    envs = await inv.invoke_many([call("quick", "1", q="a"), call("hang", "2", q="b"), call("quick", "3", q="c")])
    assert [code(e) for e in envs] == ["ok", "timeout", "ok"]
    assert (envs[0]["value"], envs[2]["value"]) == ("a", "c")


async def test_cancelling_invoke_many_cancels_the_tools_and_propagates():
    started = asyncio.Event()
    cancelled: list[str] = []

    @tool(read_only=True, timeout_s=60)
    async def slow(q: str) -> str:
        """Wait on a slow backend, for testing the caller's cancellation."""
        try:
            started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(q)
            raise
        return q

    records: list = []
    inv = Invoker(ToolRegistry([slow]), middleware=[mw.audit(records.append), *mw.default_chain()[1:]])
    before = set(asyncio.all_tasks())
    task = asyncio.create_task(inv.invoke_many([call("slow", "1", q="a"), call("slow", "2", q="b")]))
    await started.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert sorted(cancelled) == ["a", "b"]
    assert sorted((r["call_id"], r["outcome"], r["decision"]) for r in records) == [
        ("1", "cancelled", "failed"),
        ("2", "cancelled", "failed"),
    ]
    assert set(asyncio.all_tasks()) - before == set()


async def test_cancelling_a_single_call_in_invoke_many_propagates():
    started = threading.Event()
    release = threading.Event()

    @tool(read_only=True, timeout_s=60)
    def blocking(q: str) -> str:
        """Block a worker thread until released, for testing cancellation."""
        started.set()
        release.wait(5)
        return q

    inv = Invoker(ToolRegistry([blocking]))
    task = asyncio.create_task(inv.invoke_many([call("blocking", q="a")]))
    while not started.is_set():
        await asyncio.sleep(0.001)
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()


@pytest.mark.parametrize("answer", ["no", 1, {"approved": False}, [False], object()])
async def test_an_approver_answer_other_than_true_refuses(answer):
    # SPEC §11: allowed when the approver returns true; a truthy non-bool must not fail open.
    env = await gate(lambda t, a, c: answer).invoke(call("pay", amount=5))
    assert (code(env), RUNS) == ("approval_required", [])


async def test_an_async_approver_answer_other_than_true_refuses():
    async def approver(tool, args, ctx):
        return "approved"

    env = await gate(approver).invoke(call("pay", amount=5))
    assert (code(env), RUNS) == ("approval_required", [])
