"""Hostile results against a shared idempotency store: what one worker stores, another reads
back as the same value, or it is not shared (logged) — never a record the other worker cannot
read, which made it run the side effect again without a word."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolRegistry, middleware as mw, tool
from agentkit_tools.stores import InMemoryStore

UNSHARED = "a result of type {} cannot be stored as JSON; not shared for deduplication"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def two_workers(result: Any) -> tuple[list[str], Invoker, Invoker, InMemoryStore]:
    runs: list[str] = []

    @tool(side_effecting=True)
    def pay(order: str) -> Any:
        """Pay the supplier for one order and return the receipt."""
        runs.append(order)
        return result

    store = InMemoryStore()
    a = Invoker(ToolRegistry([pay]), middleware=[mw.idempotency(store=store)])
    b = Invoker(ToolRegistry([pay]), middleware=[mw.idempotency(store=store)])
    return runs, a, b, store


def pay_call(cid: str) -> dict:
    return {"id": cid, "name": "pay", "input": {"order": "A-7"}}


@pytest.mark.parametrize(
    "result,type_name",
    [
        ({"ratio": float("nan")}, "dict"),
        ([float("inf")], "list"),
        (float("-inf"), "float"),
        (2**64, "int"),
        ({"id": -(2**63) - 1}, "dict"),
        (nested(127), "list"),
        (nested(500), "list"),
    ],
    ids=["nan", "inf", "-inf", "2**64", "-2**63-1", "depth127", "depth500"],
)
async def test_a_result_another_worker_could_not_read_back_is_not_shared(result, type_name, caplog) -> None:
    """NaN and infinity (not JSON), an integer beyond 64 bits (read back as a float: another
    value) and a value nested too deep for the reader were stored as a record the other worker
    could not read (or read as another value): it ran the side effect again, nothing logged."""
    runs, a, b, store = two_workers(result)
    ctx = ToolContext(run_id="r")
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        first = await a.invoke(pay_call("c1"), ctx)
        second = await b.invoke(pay_call("c2"), ctx)
    assert first["ok"] is True and first["value"] is result
    assert second["ok"] is True and second["value"] is result  # ran again: it was not shared
    assert "deduplicated" not in second
    assert runs == ["A-7", "A-7"]
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("agentkit_tools.middleware", "WARNING", UNSHARED.format(type_name))
    ] * 2
    assert [v for k, v in store._data.items() if k.startswith("agentkit-tools:idem:")] == ['{"s":"free"}']


@pytest.mark.parametrize(
    "result,read_back",
    [
        (2**63 - 1, 2**63 - 1),
        (-(2**63), -(2**63)),
        (2**64 - 1, 2**64 - 1),
        ({"n": [1.5, -0.0, 1e300, 5e-324]}, {"n": [1.5, -0.0, 1e300, 5e-324]}),
        (nested(126), nested(126)),
        ({"k\"[1e999]": "NaN 1e999 99999999999999999999"}, {"k\"[1e999]": "NaN 1e999 99999999999999999999"}),
    ],
    ids=["i64max", "i64min", "u64max", "floats", "depth126", "number-like-text"],
)
async def test_a_result_another_worker_reads_back_is_shared(result, read_back, caplog) -> None:
    runs, a, b, _ = two_workers(result)
    ctx = ToolContext(run_id="r")
    with caplog.at_level(logging.WARNING, logger="agentkit_tools.middleware"):
        first = await a.invoke(pay_call("c1"), ctx)
        second = await b.invoke(pay_call("c2"), ctx)
    assert first["value"] is result
    assert (second["ok"], second["value"], second["deduplicated"]) == (True, read_back, True)
    assert type(second["value"]) is type(read_back)
    assert runs == ["A-7"]
    assert caplog.records == []
