"""Every entry point of the binding (``src/py``) counts itself in at the exit gate, or is listed
here with the reason it need not.

A thread inside the core that runs Python code (a finaliser of an object it drops, a callback, an
exception constructor, a conversion of a host object) while the interpreter finalizes takes the
process down (see ``test_exit_during_calls``); the gate (``shutdown::inside``, the first
statement of an entry point) keeps threads out once the interpreter is exiting and lets the
exiting thread wait for the ones inside. This test reads the binding's source: each
``#[pyfunction]`` and each method of a ``#[pymethods]`` block must start with that statement
unless it is in ``UNGATED``, so a new entry point cannot be added without that decision. What it
cannot see: whether the reason given still holds once an entry point is changed.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "py"

_PURE = "reads and returns only strings, numbers and references it holds: no host object is read, dropped or made"
_GC = "called by the collector, which must neither park nor run Python code"
_GATE = "the gate itself"
#: ``file::Type::method`` or ``file::function`` -> why it is not gated.
UNGATED = {
    "handoff.rs::forks": _PURE,
    "handoff.rs::WorkerPool::forked": _PURE,
    "handoff.rs::Job::__traverse__": _GC,
    "handoff.rs::WorkerPool::__traverse__": _GC,
    "handoff.rs::JobAwait::__traverse__": _GC,
    "inbox.rs::LoopInbox::__traverse__": _GC,
    "inbox.rs::LoopJob::__traverse__": _GC,
    "pipeline.rs::Pipeline::__traverse__": _GC,
    "pipeline.rs::Call::__traverse__": _GC,
    "pipeline.rs::Call::__clear__": _GC,
    "registry.rs::CoreRegistry::__traverse__": _GC,
    "registry.rs::CoreRegistry::__clear__": _GC,
    "relay.rs::Relay::__traverse__": _GC,
    "relay.rs::Relay::__clear__": _GC,
    "turn.rs::Turn::__traverse__": _GC,
    "turn.rs::Turn::__clear__": _GC,
    "awaiting.rs::BodyAwait::__traverse__": _GC,
    "awaiting.rs::BodyAwait::__clear__": (
        "called by the collector, which must not park; what it drops may run host code (a body's "
        "finally, a deadline still entered left by its guard, whose drop counts itself in at the "
        "gate and does nothing once the interpreter is exiting)"
    ),
    "drive.rs::Drive::__traverse__": _GC,
    "drive.rs::Drive::__clear__": (
        "called by the collector, which must not park; a drive collected suspended is closed "
        "first (what it awaits is closed, its call aborted without awaiting: host code), through "
        "shutdown::when_dropped, which counts itself in at the gate and does nothing once the "
        "interpreter is exiting"
    ),
    "awaiting.rs::BodyTask::__traverse__": _GC,
    "awaiting.rs::BodyTask::__clear__": _GC,
    "awaiting.rs::Woken::__traverse__": _GC,
    "deadline.rs::LoopDeadlines::__traverse__": _GC,
    "deadline.rs::LoopDeadlines::__clear__": _GC,
    "shutdown.rs::_close_exit_gate": _GATE,
    **{
        name: _PURE
        for name in (
            "memory.rs::PyMemoryTree::new",
            "memory.rs::PyMemoryTree::to_json",
            "memory.rs::PyMemoryTree::bytes",
            "memory.rs::PyMemoryTree::file_count",
            "memory.rs::PyMemoryTree::root",
            "memory.rs::PyMemoryStoreEngine::new",
            "memory.rs::PyMemoryStoreEngine::key",
            "memory.rs::PyMemoryCommand::read_only",
            "memory.rs::PyMemoryCasLoop::attempts",
            "memory.rs::PyMemoryCasLoop::written",
            "pipeline.rs::args_hash",
            "pipeline.rs::idempotency_store_key",
            "pipeline.rs::url_host",
            "pipeline.rs::RetryPolicy::max_attempts",
            "pipeline.rs::RetryPolicy::delay_s",
            "pipeline.rs::RetryPolicy::ceiling_s",
            "pipeline.rs::Pipeline::scopes",
            "pipeline.rs::Call::attempts",
            "pipeline.rs::Call::tool",
            "registry.rs::valid_tool_name",
            "registry.rs::sanitized_tool_name",
            "registry.rs::CoreRegistry::new",
            "registry.rs::CoreRegistry::get",
            "registry.rs::CoreRegistry::core",
            "registry.rs::CoreRegistry::__len__",
            "registry.rs::CoreRegistry::__contains__",
            "tools.rs::backend_saturated_message",
            "tools.rs::truncate",
            "tools.rs::cut_message",
            "tools.rs::CoreTool::name",
            "tools.rs::CoreTool::description",
            "tools.rs::CoreTool::parameters",
            "awaiting.rs::BodyTask::cancelled",
            "awaiting.rs::BodyTask::cancelling",
            "awaiting.rs::BodyTask::uncancel",
            "awaiting.rs::BodyTask::pending_cancel",
        )
    },
}

_FN = re.compile(r"^(?P<indent>\s*)(?:pub(?:\([a-z]+\))?\s+)?fn\s+(?P<name>\w+)")
_GATED = re.compile(r"let _in = super::shutdown::inside\(")


def entry_points() -> dict[str, bool]:
    """``qualified name -> gated`` for every ``#[pyfunction]`` and ``#[pymethods]`` method."""
    found: dict[str, bool] = {}
    for path in sorted(SRC.glob("*.rs")):
        lines = path.read_text().splitlines()
        methods_of: str | None = None  # the type of the #[pymethods] block we are in
        indent = ""  # of its `impl` line (deeper in the macro that writes the coroutine protocol)
        in_methods = function_next = False
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith(("#[pymethods]", "#[::pyo3::pymethods]")):
                in_methods = True
            elif in_methods and methods_of is None and stripped.startswith("impl "):
                methods_of, indent = stripped.split()[1], line[: len(line) - len(stripped)]
            elif methods_of is not None and line == indent + "}":
                in_methods, methods_of = False, None
            elif stripped.startswith("#[pyfunction"):
                function_next = True
            match = _FN.match(line)
            if match is None:
                continue
            if methods_of is not None and match["indent"] == indent + "    ":
                name = f"{path.name}::{methods_of}::{match['name']}"
            elif function_next and match["indent"] == "":
                name = f"{path.name}::{match['name']}"
                function_next = False
            else:
                continue
            body = i
            while not lines[body].rstrip().endswith("{"):
                body += 1
            first = next(s for s in lines[body + 1:] if s.strip() and not s.strip().startswith("//"))
            found[name] = bool(_GATED.search(first))
    return found


def test_the_source_reader_finds_the_entry_points() -> None:
    found = entry_points()
    assert found["registry.rs::CoreRegistry::add"] is True
    assert found["tools.rs::define_function_tool"] is True
    assert found["providers.rs::render_tool"] is True
    assert found["handoff.rs::WorkerPool::next_job"] is True
    assert found["handoff.rs::Job::__traverse__"] is False
    assert found["drive.rs::Drive::was_closed"] is True
    assert found["coroutine.rs::$ty::__next__"] is True  # the protocol of every awaitable of the core
    assert len(found) > 80


def test_every_entry_point_is_gated_or_says_why_not() -> None:
    found = entry_points()
    ungated = sorted(name for name, gated in found.items() if not gated and name not in UNGATED)
    assert ungated == [], "entry points that must start with `let _in = super::shutdown::inside(py);`"
    gated_but_listed = sorted(name for name in UNGATED if found.get(name) is not False)
    assert gated_but_listed == [], "listed in UNGATED but gated, or gone: drop them from the list"
