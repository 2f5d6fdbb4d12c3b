"""A call of a tool with a plain schema (strings, enums, booleans, numbers, lists of those) whose
arguments are a plain mapping is admitted in one walk of the mapping; these tests pin that it
admits exactly what the full check admits, gives the body the same frozen arguments, and keys the
call as the full check does."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from agentkit_tools import Invoker, ToolRegistry, tool
from agentkit_tools import middleware as mw
from agentkit_tools.frozen import FrozenDict, FrozenList

seen: list[Any] = []


def search(
    query: str,
    scope: Literal["all", "docs"],
    tags: list[str],
    exact: bool,
    limit: int = 10,
    min_score: float | None = None,
) -> int:
    """Search the project's documentation for pages that match a query.

    Args:
        query: The words to look for.
        scope: Which part of the project to search.
        tags: Only pages that carry all of these tags.
        exact: Match the query as one phrase.
        limit: The most titles to return.
        min_score: Drop pages whose score is below this.
    """
    seen.append((query, scope, tags, exact, limit, min_score))
    return len(seen)


def run(inv: Invoker, args: Any) -> dict[str, Any]:
    return asyncio.run(inv.invoke({"id": "c1", "name": "search", "input": args}))


def test_a_plain_mapping_a_reordered_one_and_the_json_text_are_the_same_call() -> None:
    inv = Invoker(ToolRegistry([tool(search, read_only=True)]), middleware=[mw.repeat_guard(limit=3)])
    args = {"query": "q", "scope": "docs", "tags": ["a", "b"], "exact": False, "limit": 5, "min_score": 0.5}
    reordered = dict(reversed(list(args.items())))
    first, second = run(inv, args), run(inv, json.dumps(args))
    assert (first["ok"], second["ok"]) == (True, True)
    third = run(inv, reordered)
    assert third["ok"] is False
    assert third["error"]["code"] == "repeated_call"


def test_the_body_gets_frozen_lists_and_the_callers_mapping_is_untouched() -> None:
    seen.clear()
    inv = Invoker(ToolRegistry([tool(search, read_only=True)]), middleware=[])
    args = {"query": "q", "scope": "all", "tags": ["x"], "exact": True}
    env = run(inv, args)
    assert env["ok"] is True
    (query, scope, tags, exact, limit, min_score) = seen[-1]
    assert (query, scope, list(tags), exact, limit, min_score) == ("q", "all", ["x"], True, 10, None)
    assert type(tags) is FrozenList
    assert args == {"query": "q", "scope": "all", "tags": ["x"], "exact": True}
    assert type(args["tags"]) is list


def test_what_the_walk_does_not_accept_is_decided_by_the_full_check() -> None:
    inv = Invoker(ToolRegistry([tool(search, read_only=True)]), middleware=[])
    ok = {"query": "q", "scope": "docs", "tags": [], "exact": False}
    cases: list[tuple[dict[str, Any], bool]] = [
        (ok, True),
        ({**ok, "limit": 3.0}, True),  # an integral float for an integer: made an int
        ({**ok, "tags": ("a",)}, True),  # a tuple for a list
        ({**ok, "limit": True}, False),  # a bool is no integer
        ({**ok, "scope": "code"}, False),
        ({**ok, "extra": 1}, False),
        ({"query": "q", "scope": "docs", "tags": []}, False),  # `exact` missing
        ({**ok, "tags": ["a", 1]}, False),
        ({**ok, "min_score": float("nan")}, False),
        ({**ok, "limit": 2**70}, True),  # beyond 64 bits: the body gets it exactly
    ]
    assert [run(inv, a)["ok"] for a, _ in cases] == [want for _, want in cases]
    seen.clear()
    assert run(inv, {**ok, "limit": 3.0})["ok"] is True
    assert run(inv, {**ok, "limit": 2**70})["ok"] is True
    assert [(type(s[4]), s[4]) for s in seen] == [(int, 3), (int, 2**70)]


def test_a_body_that_does_not_unpack_gets_a_frozen_dict() -> None:
    got: list[Any] = []

    @tool(read_only=True)
    def take(query: str, tags: list[str]) -> int:
        """Record the arguments this tool was called with, for the test."""
        return 0

    async def body(args: Any, ctx: Any = None) -> int:
        got.append(args)
        return 1

    take.fn = body  # type: ignore[attr-defined]
    inv = Invoker(ToolRegistry([take]), middleware=[])
    env = asyncio.run(inv.invoke({"id": "c1", "name": "take", "input": {"query": "q", "tags": ["t"]}}))
    assert env["ok"] is True, env
    assert type(got[0]) is FrozenDict
    assert type(got[0]["tags"]) is FrozenList
    assert dict(got[0]) == {"query": "q", "tags": ["t"]}
