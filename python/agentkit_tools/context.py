"""``ToolContext``: what the Invoker passes to tools as ``ctx``.

The Invoker reads only a few attributes, each optional, so any object that has them works
(agentkit's own ``RunContext`` passes through unchanged):

- ``run_id`` — the conversation; repeat detection and idempotency are scoped by it (no context
  or no run id: one default scope per Invoker);
- ``approvals`` — a collection of tool names (or call ids) the host has approved for this run;
- ``deadline`` — an absolute ``time.monotonic()`` time in seconds; every call's timeout is cut
  to the time left;
- ``trace`` — an optional sink for events: an object with ``event(name, attributes)`` or
  ``add_event(name, attributes)``, or a callable ``(name, attributes)``. It receives one
  ``"tool.call"`` event per call (the audit record) and ``"tool.shape_mismatch"`` events.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolContext"]


@dataclass
class ToolContext:
    """The run context of a tool call.

    ``run_id`` defaults to a fresh random hex id; ``approvals`` is a set of tool names or call ids
    approved by the host for this run; ``deadline`` is absolute ``time.monotonic()`` seconds (or
    None: no run-wide deadline); ``trace`` an optional event sink; ``parent`` the context this one
    was derived from with ``child()``.
    """

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    trace: Any = None
    approvals: set[str] = field(default_factory=set)
    deadline: float | None = None
    parent: ToolContext | None = field(default=None, repr=False, compare=False)

    @classmethod
    def with_timeout(cls, seconds: float, **kwargs: Any) -> ToolContext:
        """A context whose ``deadline`` is ``seconds`` from now."""
        return cls(deadline=time.monotonic() + seconds, **kwargs)

    def child(self, *, run_id: str | None = None) -> ToolContext:
        """A context for a sub-run (an agent used as a tool): a new ``run_id`` (default
        ``"<parent run id>/<random hex>"``, so repeat detection and idempotency are scoped to the
        sub-run), the same ``trace`` and ``deadline``, a copy of ``approvals``, and ``parent``
        set to this context."""
        return ToolContext(
            run_id=run_id if run_id is not None else f"{self.run_id}/{uuid.uuid4().hex[:12]}",
            trace=self.trace,
            approvals=set(self.approvals),
            deadline=self.deadline,
            parent=self,
        )

    def approve(self, *names: str) -> None:
        """Approve tools (by name) or single calls (by call id) for the rest of this run."""
        self.approvals.update(names)

    def remaining_s(self) -> float | None:
        """Seconds left before ``deadline`` (negative once passed), or None without a deadline."""
        return None if self.deadline is None else self.deadline - time.monotonic()
