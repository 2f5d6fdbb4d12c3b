"""The Invoker's fast lane (the built-in chain fused into one coroutine) gives the same envelopes,
runs bodies the same number of times and sleeps the same retry delays as the composed chain.

An audit sink makes every call observed, which sends it down the composed chain; the same call
without a sink takes the fast lane. Both are run on fresh Invokers and compared."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolError, ToolRegistry, tool
from agentkit_tools import middleware as mw
from agentkit_tools.invoker import _FastLane


class Sleeps:
    """An injected retry sleep that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def make_tools(runs: list[str]) -> list[Any]:
    flaky_left = {"n": 2}

    @tool(read_only=True, non_blocking=True)
    def inline_add(a: int, b: int) -> int:
        """Add two integers on the event loop and return the sum."""
        runs.append("inline_add")
        return a + b

    @tool(read_only=True)
    def thread_add(a: int, b: int) -> int:
        """Add two integers in a worker thread and return the sum."""
        runs.append("thread_add")
        return a + b

    @tool(read_only=True)
    async def async_add(a: int, b: int) -> int:
        """Add two integers in a coroutine and return the sum."""
        runs.append("async_add")
        return a + b

    @tool(read_only=True, non_blocking=True)
    def flaky(x: int) -> int:
        """Fail twice with a retriable error, then return x."""
        runs.append("flaky")
        if flaky_left["n"]:
            flaky_left["n"] -= 1
            raise ToolError("backend busy", retriable=True)
        return x

    @tool(read_only=True, non_blocking=True)
    def broken(x: int) -> int:
        """Always fail with a KeyError, like a buggy tool."""
        runs.append("broken")
        raise KeyError("missing")

    @tool(read_only=True, timeout_s=0.05)
    async def stuck(x: int) -> int:
        """Sleep for five seconds, far past its deadline."""
        runs.append("stuck")
        await asyncio.sleep(5)
        return x

    @tool(read_only=True, non_blocking=True)
    def deferred(x: int) -> Any:
        """A sync body that returns a coroutine to be awaited."""
        runs.append("deferred")

        async def later() -> int:
            return x * 2

        return later()

    @tool(read_only=True, non_blocking=True, output_schema={"type": "object", "title": "P", "required": ["x"]})
    def shapeless() -> Any:
        """Return an object that lacks its required key x."""
        runs.append("shapeless")
        return {"y": 1}

    @tool(read_only=True)
    def with_context(x: int, ctx: ToolContext) -> str:
        """Echo the run id of the context and the number x."""
        runs.append("with_context")
        return f"{ctx.run_id}:{x}"

    return [inline_add, thread_add, async_add, flaky, broken, stuck, deferred, shapeless, with_context]


CALLS = [
    {"id": "1", "name": "inline_add", "input": {"a": 1, "b": 2}},
    {"id": "2", "name": "thread_add", "input": '{"a": 3, "b": 4}'},
    {"id": "3", "name": "async_add", "input": {"a": 5, "b": 6}},
    {"id": "4", "name": "flaky", "input": {"x": 7}},
    {"id": "5", "name": "broken", "input": {"x": 1}},
    {"id": "6", "name": "stuck", "input": {"x": 1}},
    {"id": "7", "name": "deferred", "input": {"x": 21}},
    {"id": "8", "name": "shapeless", "input": {}},
    {"id": "9", "name": "with_context", "input": {"x": 3}},
    {"id": "10", "name": "inline_ad", "input": {"a": 1}},
    {"id": "11", "name": "inline_add", "input": {"a": "one", "b": 2}},
    {"id": "12", "name": "inline_add", "input": {"a": 1, "b": 2}},
    {"id": "13", "name": "inline_add", "input": {"b": 2, "a": 1}},
]


def strip(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    if "elapsed_ms" in out:
        assert isinstance(out.pop("elapsed_ms"), float)
    return out


async def run_all(observed: bool) -> tuple[list[dict[str, Any]], list[str], list[float]]:
    runs: list[str] = []
    sleeps = Sleeps()
    records: list[dict[str, Any]] = []
    chain = [
        mw.audit(records.append if observed else None),
        mw.approval(),
        mw.repeat_guard(limit=3),
        mw.idempotency(),
        mw.retry(sleep=sleeps),
        mw.timeout(),
    ]
    inv = Invoker(ToolRegistry(make_tools(runs)), middleware=chain)
    ctx = ToolContext(run_id="run-1")
    envs = [strip(await inv.invoke(c, ctx)) for c in CALLS]
    assert len(records) == (len(CALLS) if observed else 0)
    return envs, runs, sleeps.delays


async def test_fast_lane_and_composed_chain_agree() -> None:
    fast_envs, fast_runs, fast_sleeps = await run_all(observed=False)
    slow_envs, slow_runs, slow_sleeps = await run_all(observed=True)
    assert fast_envs == slow_envs
    assert fast_runs == slow_runs == [
        "inline_add", "thread_add", "async_add", "flaky", "flaky", "flaky", "broken", "stuck", "deferred",
        "shapeless", "with_context", "inline_add",
    ]
    assert len(fast_sleeps) == len(slow_sleeps) == 2
    # full jitter: uniform in [0, 0.5 s) before the second attempt, [0, 1 s) before the third
    assert 0.0 <= fast_sleeps[0] < 0.5 and 0.0 <= fast_sleeps[1] < 1.0
    assert [e["ok"] for e in fast_envs] == [True, True, True, True, False, False, True, False, True, False, False,
                                            True, False]
    assert [e.get("value") for e in fast_envs[:4]] == [3, 7, 11, 7]
    assert fast_envs[6]["value"] == 42 and fast_envs[8]["value"] == "run-1:3"
    assert [e["error"]["code"] for e in fast_envs[4:6]] == ["internal_error", "timeout"]
    assert fast_envs[7]["error"]["code"] == "output_mismatch"
    assert fast_envs[11] == {"ok": True, "value": 3}  # the second identical call still runs
    assert [e["error"]["code"] for e in (*fast_envs[9:11], fast_envs[12])] == [
        "unknown_tool", "invalid_arguments", "repeated_call",  # the third, keys in another order
    ]


@pytest.mark.parametrize(
    "chain,eligible",
    [
        ([], True),
        (None, True),
        ([mw.timeout(), mw.retry()], False),  # the deadline would bound all attempts together
        ([mw.retry(), mw.repeat_guard()], False),  # each attempt would be counted as a repeat
        ([mw.retry(breaker_threshold=2)], False),
        ([mw.timeout(), mw.timeout(1.0)], False),
        ([mw.egress(allow=["example.com"]), mw.audit(), mw.retry()], True),
    ],
)
def test_which_chains_have_a_fast_lane(chain: list[mw.Middleware] | None, eligible: bool) -> None:
    inv = Invoker(ToolRegistry([]), middleware=chain)
    assert (inv._lane is not None) is eligible
    assert (_FastLane.of(inv.middleware) is not None) is eligible


def test_a_custom_middleware_disables_the_fast_lane() -> None:
    class Passthrough(mw.Middleware):
        def wrap(self, invoker: Any, nxt: Any) -> Any:
            return nxt

    assert Invoker(ToolRegistry([]), middleware=[mw.audit(), Passthrough()])._lane is None


async def test_tools_that_need_a_middleware_leave_the_fast_lane() -> None:
    calls: list[str] = []

    @tool(side_effecting=True, non_blocking=True)
    def send(to: str) -> str:
        """Send a message to someone by their name."""
        calls.append(to)
        return f"sent to {to}"

    @tool(read_only=True, requires_approval=True, non_blocking=True)
    def peek(x: int) -> int:
        """Read something sensitive that needs approval."""
        return x

    inv = Invoker(ToolRegistry([send, peek]))
    assert inv._lane is not None
    assert not inv._lane.takes(send) and not inv._lane.takes(peek)
    first = await inv.invoke({"id": "1", "name": "send", "input": {"to": "ann"}})
    second = await inv.invoke({"id": "2", "name": "send", "input": {"to": "ann"}})
    assert (first["value"], second["value"], second.get("deduplicated"), calls) == (
        "sent to ann", "sent to ann", True, ["ann"],
    )
    refused = await inv.invoke({"id": "3", "name": "peek", "input": {"x": 1}})
    assert refused["error"]["code"] == "approval_required"


# ------------------------------------------------------------------ admit: one crossing, same values

from hypothesis import given, settings
from hypothesis import strategies as st

from agentkit_tools import FrozenDict, FrozenList, _core, deep_freeze

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@tool(read_only=True)
def anything(payload: Any = None, label: str = "") -> str:
    """Accept any JSON value as the payload and a label, and return the label."""
    return label


_ANY = ToolRegistry([anything])


@settings(max_examples=200, deadline=None)
@given(payload=_json, label=st.text(max_size=8), as_text=st.booleans())
def test_admit_agrees_with_prepare_deep_freeze_and_canonical_args(payload: Any, label: str, as_text: bool) -> None:
    import json

    args: Any = {"payload": payload, "label": label}
    if as_text:
        args = json.dumps(args)
    call = {"id": "1", "name": "anything", "input": args}
    ok, t, frozen, core, canonical = _ANY._core.admit(call, FrozenDict, FrozenList)
    ok2, t2, kwargs, core2 = _ANY._core.prepare(call)
    assert (ok, t, core) == (ok2, t2, core2) == (True, anything, core2)
    expected = deep_freeze(kwargs)
    assert frozen == expected and type(frozen) is FrozenDict
    assert canonical == _core.canonical_args(expected)[0]


def test_admit_refuses_like_prepare() -> None:
    for call in (
        {"id": "1", "name": "nothing", "input": {}},
        {"id": "1", "input": {}},
        {"id": "1", "name": "anything", "input": "{not json"},
        {"id": "1", "name": "anything", "input": {"label": 5}},
    ):
        ok, env, a, c, canonical = _ANY._core.admit(call, FrozenDict, FrozenList)
        assert (ok, a, c, canonical) == (False, None, None, None)
        assert env == _ANY._core.prepare(call)[1]
    with pytest.raises(TypeError) as admit_err:
        _ANY._core.admit(["not", "a", "dict"], FrozenDict, FrozenList)
    with pytest.raises(TypeError) as prepare_err:
        _ANY._core.prepare(["not", "a", "dict"])
    assert str(admit_err.value) == str(prepare_err.value)


# ------------------------------------------------------------------ sync bodies handed back to their loop

from agentkit_tools.invoker import run_in_worker


def test_worker_outcomes_come_back_to_each_loop_in_full() -> None:
    import threading

    def body(i: int, fail: bool) -> tuple[int, str]:
        if fail:
            raise ValueError(f"bad {i}")
        return i * i, threading.current_thread().name

    async def burst() -> list[Any]:
        futs = [run_in_worker(body, i, i % 7 == 0) for i in range(200)]
        return await asyncio.gather(*futs, return_exceptions=True)

    for _ in range(3):  # a fresh loop each time: each gets its own hand-back socket
        outcomes = asyncio.run(burst())
        assert [o[0] if isinstance(o, tuple) else str(o) for o in outcomes] == [
            f"bad {i}" if i % 7 == 0 else i * i for i in range(200)
        ]
        assert all(o[1] != "MainThread" for o in outcomes if isinstance(o, tuple))
    # More jobs than threads: once the workers are back waiting, every started thread is idle.
    import time as _time
    from agentkit_tools import _core

    for _ in range(200):
        started, idle = _core.pool_size()
        if idle == started:
            break
        _time.sleep(0.005)
    assert started >= 1 and idle == started


def test_a_cancelled_wait_leaves_the_loop_working() -> None:
    import time as _time

    def slow(x: int, _: Any) -> int:
        _time.sleep(0.05)
        return x

    async def main() -> tuple[bool, int]:
        fut = run_in_worker(slow, 1, None)
        fut.cancel()  # the outcome arrives later and is dropped (the future is done)
        await asyncio.sleep(0.1)
        return fut.cancelled(), await run_in_worker(slow, 2, None)

    assert asyncio.run(main()) == (True, 2)


def test_drain_hands_every_outcome_over_even_when_resolve_fails() -> None:
    from agentkit_tools import _core

    done = _core.Completions()
    seen: list[Any] = []

    def resolve(fut: Any, ok: bool, value: Any) -> None:
        seen.append((fut, ok, value))
        raise RuntimeError(f"resolve failed on {fut}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for i in range(3):
            _core.submit_sync(lambda f, a, b: f(a, b), lambda a, b: a + b, i, 10, done, f"fut{i}")
        ready = asyncio.Event()
        loop.add_reader(done.fileno(), ready.set)
        await asyncio.wait_for(ready.wait(), 5)
        loop.remove_reader(done.fileno())
        for _ in range(100):  # the three may arrive in more than one wake-up
            try:
                done.drain(resolve)
            except RuntimeError as err:
                assert str(err).startswith("resolve failed on fut")
            if len(seen) == 3:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert sorted(seen) == [("fut0", True, 10), ("fut1", True, 11), ("fut2", True, 12)]
