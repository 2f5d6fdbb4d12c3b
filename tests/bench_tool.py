"""The tool of ``benches/compare.py`` as a plain function, shared by the tests that pin its schema
and its rejection messages (the benchmark builds fresh copies from its own source text)."""

from __future__ import annotations

from typing import Literal


def search_docs(
    query: str,
    scope: Literal["all", "code", "issues", "docs"],
    tags: list[str],
    exact: bool,
    limit: int = 10,
    min_score: float | None = None,
) -> list[str]:
    """Search the project's documentation for pages that match a query.

    Args:
        query: The words to look for, as the user would type them.
        scope: Which part of the project to search.
        tags: Only pages that carry all of these tags.
        exact: Match the query as one phrase instead of any of its words.
        limit: The most titles to return.
        min_score: Drop pages whose relevance score is below this (0 to 1).
    """
    return [query, scope, *tags][:limit]
