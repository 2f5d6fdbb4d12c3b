"""A result the pipeline holds (for deduplication) is let go while the pipeline's state is in
use (a conversation forgotten): releasing it runs Python code (its finalizer), which may call the
same Invoker again, or let another thread do so. Neither call may find the state in use."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

from agentkit_tools import Invoker, ToolRegistry, tool
from agentkit_tools import middleware as mw
from agentkit_tools.context import ToolContext

got: list[Any] = []
hooks: list[Any] = []


class Result:
    """A result whose finalizer runs the hook of the test."""

    def __del__(self) -> None:
        for hook in hooks:
            hook()


@tool(idempotent=True, side_effecting=True)
def make(n: int) -> Any:
    """Make a result object for this test (n == 1: one with a finalizer), once per call."""
    return Result() if n == 1 else n


def call(inv: Invoker, n: int, run_id: str) -> dict[str, Any]:
    return asyncio.run(inv.invoke({"id": f"c{n}", "name": "make", "input": {"n": n}}, ctx=ToolContext(run_id=run_id)))


def held_result() -> Invoker:
    inv = Invoker(ToolRegistry([make]), middleware=[mw.idempotency(None)])
    env = call(inv, 1, "r1")
    assert env["ok"] is True
    assert type(env["value"]) is Result
    del env
    gc.collect()  # only the pipeline holds the result now
    return inv


def test_a_finalizer_that_calls_the_invoker_while_a_conversation_is_forgotten() -> None:
    got.clear()
    inv = held_result()
    hooks[:] = [lambda: got.append(call(inv, 2, "r2"))]
    try:
        inv.forget("r1")
    finally:
        hooks.clear()
    assert [(e["ok"], e.get("value")) for e in got] == [(True, 2)]


def test_a_finalizer_that_lets_another_thread_call_the_invoker() -> None:
    got.clear()
    inv = held_result()

    def other_thread() -> None:
        t = threading.Thread(target=lambda: got.append(call(inv, 3, "r3")))
        t.start()
        t.join(10)  # the interpreter lock is let go meanwhile

    hooks[:] = [other_thread]
    try:
        inv.forget("r1")
    finally:
        hooks.clear()
    assert [(e["ok"], e.get("value")) for e in got] == [(True, 3)]
