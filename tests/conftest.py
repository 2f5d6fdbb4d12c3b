"""Fixtures shared by every test module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest


def _no_tracer_provider() -> None:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def untraced() -> Iterator[None]:
    """Every test starts and ends without a tracer provider, whatever ran before it.

    opentelemetry's global provider can be set only once per process, and with one every call
    opens a span (more entries into the core, each call of a turn opening its span first), so a
    test that installed one would change how every later test runs. A test that wants spans
    takes ``span_exporter``, which installs the provider for that test only."""
    _no_tracer_provider()
    yield
    _no_tracer_provider()


@pytest.fixture(scope="session")
def _tracing() -> Any:
    """One SDK tracer provider with an in-memory exporter for the whole run: the tracer the
    audit middleware got from opentelemetry keeps the first provider it was served by, so the
    provider is the same object each time a test installs it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def span_exporter(untraced: None, _tracing: Any) -> Iterator[Any]:
    """Install the tracer provider for this test only (removed afterwards by ``untraced``);
    yields its exporter, empty at the start of the test."""
    from opentelemetry import trace

    provider, exporter = _tracing
    exporter.clear()
    trace._TRACER_PROVIDER = provider  # type: ignore[attr-defined]
    yield exporter
    exporter.clear()
