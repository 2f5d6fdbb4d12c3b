"""The agentkit-tools pytest plugin: fixtures for testing tools and agent loops offline.

Registered through the ``pytest11`` entry point (``pip install "agentkit-tools[pytest]"``), so
the fixtures are available in every test module with no import:

- ``tool_registry``: a fresh, empty ``ToolRegistry`` per test;
- ``scripted_model``: a factory, ``scripted_model([turns...]) -> ScriptedModel`` (turns built with
  ``agentkit_tools.testing.text`` / ``tool_calls``), to drive ``run_loop`` without a network;
- ``invoker``: an ``Invoker`` over ``tool_registry`` with the default middleware chain, whose
  audit middleware records into ``audit_records`` (also ``invoker.audit_records``); the retry
  middleware skips its backoff waits (the delays it would have slept, in seconds, are in
  ``invoker.retry_delays``), so a test of a retried call does not sleep;
- ``audit_records``: the list of audit records of the ``invoker``'s calls, in the
  order the calls ended;
- ``assert_tool_schema``: ``agentkit_tools.testing.assert_tool_schema``, a schema assertion whose
  failure shows a unified diff.

Outside pytest (or without the entry point) load it with ``-p agentkit_tools.pytest_plugin`` or
``pytest_plugins = ["agentkit_tools.pytest_plugin"]`` in a ``conftest.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import pytest

from . import middleware
from .invoker import Invoker
from .registry import ToolRegistry
from .testing import ScriptedModel, assert_tool_schema as _assert_tool_schema

__all__ = ["assert_tool_schema", "audit_records", "invoker", "scripted_model", "tool_registry"]


@pytest.fixture
def tool_registry() -> ToolRegistry:
    """A fresh, empty ``ToolRegistry``; register the tools under test in it."""
    return ToolRegistry()


@pytest.fixture
def scripted_model() -> Callable[[Iterable[Mapping[str, Any]]], ScriptedModel]:
    """``scripted_model(turns) -> ScriptedModel``: a model that replays ``turns`` (each a
    ``text(...)`` or ``tool_calls(...)`` turn) and records what it was sent in ``.requests``."""

    def make(turns: Iterable[Mapping[str, Any]]) -> ScriptedModel:
        return ScriptedModel(turns)

    return make


@pytest.fixture
def audit_records() -> list[dict[str, Any]]:
    """The audit records of the ``invoker`` fixture's calls (``{"tool", "call_id", "args_hash",
    "outcome", "attempts", "elapsed_ms", "decision"}``), in the order the calls ended."""
    return []


@pytest.fixture
def invoker(tool_registry: ToolRegistry, audit_records: list[dict[str, Any]]) -> Invoker:
    """An ``Invoker`` over ``tool_registry`` with the default chain in which the audit
    middleware appends every record to ``audit_records`` and the retry middleware does not
    sleep between attempts (its delays are kept in ``invoker.retry_delays``, seconds)."""
    delays: list[float] = []

    async def no_sleep(seconds: float) -> None:
        delays.append(seconds)

    chain: list[middleware.Middleware] = []
    for mw in middleware.default_chain():
        if mw.name == "audit":
            mw = middleware.audit(sink=audit_records.append)
        elif mw.name == "retry":
            mw = middleware.retry(sleep=no_sleep)
        chain.append(mw)
    inv = Invoker(tool_registry, middleware=chain)
    inv.audit_records = audit_records  # type: ignore[attr-defined]
    inv.retry_delays = delays  # type: ignore[attr-defined]
    return inv


@pytest.fixture
def assert_tool_schema() -> Callable[..., None]:
    """``assert_tool_schema(tool, expected, *, ordered=False)``: see
    ``agentkit_tools.testing.assert_tool_schema``."""
    return _assert_tool_schema
