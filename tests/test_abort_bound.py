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


def call(name: str, cid: str = "c1", **args: Any) -> dict:
    return {"id": cid, "name": name, "input": args}


def doc(v: Any) -> dict:
    return json.loads(v) if isinstance(v, str) else v


class ReleaseWaits:
    """Wraps a store; its compare-and-set from a claim (the release) waits for ``finish``."""

    def __init__(self, finish: asyncio.Event) -> None:
        self.inner = InMemoryStore()
        self.finish = finish

    async def get(self, key: str) -> Any:
        return await self.inner.get(key)

    async def set(self, key: str, value: Any) -> None:
        await self.inner.set(key, value)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        if expected is not None and doc(expected).get("s") == "running":
            await self.finish.wait()
        return await self.inner.compare_and_set(key, expected, value)

    def claims(self) -> list[str]:
        return [doc(v)["s"] for v in self.inner._data.values()]  # type: ignore[attr-defined]


@tool(side_effecting=True)
async def charge(card: str, cents: int) -> str:
    """Charge a card an amount in cents; the money is taken at once."""
    await asyncio.sleep(3600)
    return "charged"



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

    store = ReleaseWaits(finish) if what == "store" else ReleaseWaits(asyncio.Event())
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

