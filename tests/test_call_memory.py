"""Memory of finished calls: once a call has ended and its Invoker is dropped, nothing of the
call is kept alive — not the body's exception, its traceback, the body's frame and locals, the
deadline machinery of a timed-out call, nor the values of successful ones."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
import weakref
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolRegistry, dispatch, middleware as mw, tool
from agentkit_tools.middleware import Middleware

N = 40


@pytest.fixture(autouse=True)
def no_log_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failing approver is logged with its exception, and the test's log capture would keep
    that record (and the approver's frame) alive: the middleware's log is off here."""
    monkeypatch.setattr(logging.getLogger("agentkit_tools.middleware"), "disabled", True)

DESC = "A tool body of the call memory tests; it keeps a sentinel among its locals."


class Sentinel:
    """An object the body keeps as a local: alive as long as the body's frame is."""


class Box(dict):  # type: ignore[type-arg]
    """A result that can be weakly referenced."""


REFS: list[tuple[str, weakref.ref[Any]]] = []  # (the body that made it, the object)
SLOW_STARTED: list[int] = []  # the timed-out sync bodies that started on a worker thread
SLOW_DONE: list[int] = []  # ... and those that ended there


def sentinel() -> Sentinel:
    s = Sentinel()
    REFS.append((sys._getframe(1).f_code.co_name, weakref.ref(s)))
    return s


def boxed(i: int, s: Sentinel) -> Box:
    box = Box(i=i, s=id(s))
    REFS.append((sys._getframe(1).f_code.co_name + " result", weakref.ref(box)))
    return box


def tally() -> tuple[dict[str, int], dict[str, int]]:
    """``(made, alive)``: objects made per body, and those still alive after a collection.

    A worker thread drops its references to the outcome it handed over a moment after the caller
    got it (it may not have run again yet when the call returns): the count is taken again, for
    at most 5 s, until nothing is alive. What a leak keeps stays alive however long it waits."""
    give_up = time.monotonic() + 5.0
    while True:
        gc.collect()
        made: dict[str, int] = {}
        alive: dict[str, int] = {}
        for name, r in REFS:
            made[name] = made.get(name, 0) + 1
            if r() is not None:
                alive[name] = alive.get(name, 0) + 1
        if not alive or time.monotonic() > give_up:
            return made, alive
        time.sleep(0.01)


@tool(read_only=True, description=DESC)
async def araise(i: int) -> int:
    s = sentinel()
    await asyncio.sleep(0)
    raise ValueError(f"failed {i} {s!r}")


@tool(read_only=True, timeout_s=0.02, description=DESC)
async def aslow(i: int) -> int:
    s = sentinel()
    await asyncio.sleep(1)
    return i + id(s)


@tool(read_only=True, description=DESC)
async def aok(i: int) -> dict:  # type: ignore[type-arg]
    s = sentinel()
    return boxed(i, s)


@tool(read_only=True, description=DESC)
def sraise(i: int) -> int:
    s = sentinel()
    raise ValueError(f"failed {i} {s!r}")


@tool(read_only=True, timeout_s=0.02, description=DESC)
def sslow(i: int) -> int:
    s = sentinel()
    SLOW_STARTED.append(i)
    try:
        time.sleep(0.05)
        return i + id(s)
    finally:
        SLOW_DONE.append(i)


@tool(read_only=True, description=DESC)
def sok(i: int) -> dict:  # type: ignore[type-arg]
    s = sentinel()
    return boxed(i, s)


@tool(read_only=True, non_blocking=True, description=DESC)
def iraise(i: int) -> int:
    s = sentinel()
    raise ValueError(f"failed {i} {s!r}")


@tool(read_only=True, requires_approval=True, description=DESC)
def guarded(i: int) -> int:
    return i


TOOLS = [araise, aslow, aok, sraise, sslow, sok, iraise, guarded]
BODIES = ["araise", "aslow", "aok", "sraise", "sslow", "sok", "iraise"]


class Passing(Middleware):
    """A user middleware: the built-in rules after it run as a segment of their own."""

    name = "passing"

    def wrap(self, invoker: Any, nxt: Any) -> Any:
        async def handle(tc: Any) -> Any:
            return await nxt(tc)

        return handle


def failing_approver(tool: Any, args: Any, ctx: Any) -> bool:
    s = sentinel()
    raise RuntimeError(f"approver broke {s!r}")


CHAINS = {
    "timeout": lambda: [mw.timeout()],
    "default": lambda: [*mw.default_chain()[:1], mw.approval(failing_approver), *mw.default_chain()[2:]],
    "user middleware": lambda: [mw.audit(), Passing(), mw.idempotency(), mw.retry(), mw.timeout(), mw.approval(failing_approver)],
}


async def run_chain(chain: str) -> tuple[dict[str, int], dict[str, int], dict[str, set[Any]]]:
    """N calls of each body (and of the approval-guarded tool), then the Invoker is dropped:
    ``(made, alive, outcomes per tool)``."""
    REFS.clear()
    SLOW_STARTED.clear()
    SLOW_DONE.clear()
    invoker = Invoker(ToolRegistry(TOOLS), middleware=CHAINS[chain]())
    outcomes: dict[str, set[Any]] = {}
    for name in [*BODIES, "guarded"]:
        for k in range(N):
            env = await invoker.invoke({"id": f"{name}-{k}", "name": name, "input": {"i": k}})
            outcomes.setdefault(name, set()).add(env["ok"] or env["error"]["code"])
    del invoker, env
    for _ in range(400):  # the timed-out sync bodies go on until they end on the worker threads
        if len(SLOW_DONE) == len(SLOW_STARTED):
            break
        await asyncio.sleep(0.05)
    # The loop holds the callback that resumed this task, and with it the future it awaited
    # (the last call's result): resume through a plain yield instead.
    await asyncio.sleep(0)
    made, alive = tally()
    return made, alive, outcomes


# Each body makes one sentinel per attempt (a successful one a result too); a timed-out body
# may be stopped (or skipped on the pool) before it made one, and the retry rule repeats the
# attempts of failures it deems transient.
OUTCOMES = {
    "araise": {"internal_error"},
    "aslow": {"timeout"},
    "aok": {True},
    "sraise": {"internal_error"},
    "sslow": {"timeout"},
    "sok": {True},
    "iraise": {"internal_error"},
}


async def test_timeout_chain_keeps_nothing_of_finished_calls() -> None:
    made, alive, outcomes = await run_chain("timeout")
    assert alive == {}
    assert outcomes == {**OUTCOMES, "guarded": {True}}
    assert {k: v for k, v in made.items() if "slow" not in k} == {
        "araise": N, "aok": N, "aok result": N, "sraise": N, "sok": N, "sok result": N, "iraise": N
    }
    assert 0 < made["aslow"] <= N and 0 < made["sslow"] <= N


async def test_default_chain_keeps_nothing_of_finished_calls() -> None:
    made, alive, outcomes = await run_chain("default")
    assert alive == {}
    assert outcomes == {**OUTCOMES, "guarded": {"approval_required"}}
    assert made["failing_approver"] == N and made["aok result"] == N and made["sok result"] == N


async def test_user_middleware_segments_keep_nothing_of_finished_calls() -> None:
    made, alive, outcomes = await run_chain("user middleware")
    assert alive == {}
    assert outcomes == {**OUTCOMES, "guarded": {"approval_required"}}
    assert made["failing_approver"] == N and made["aok result"] == N and made["sok result"] == N


def test_dispatch_and_tool_run_keep_nothing_of_finished_calls() -> None:
    REFS.clear()
    registry = ToolRegistry(TOOLS)
    for k in range(N):
        for name in ("sraise", "araise", "sok", "aok"):
            dispatch({"id": str(k), "name": name, "input": {"i": k}}, registry)

    async def runs() -> None:
        for k in range(N):
            for t in (araise, sraise):
                try:
                    await t.run({"i": k})
                except ValueError:
                    pass

    asyncio.run(runs())
    del registry
    made, alive = tally()
    assert alive == {}
    assert made == {"sraise": 2 * N, "araise": 2 * N, "sok": N, "sok result": N, "aok": N, "aok result": N}
