"""``Invoker``: the async dispatcher of an agent loop.

``await Invoker(registry).invoke(call, ctx)`` runs one tool call through the middleware chain
and always returns an envelope; ``await invoke_many(calls, ctx)`` runs a model turn's calls
concurrently and returns their envelopes in call order.

The built-in rules of the chain are one call pipeline in the Rust core: it admits the call
(lookup, validation), makes every decision and answers with the steps to perform (run the body,
ask the approver, sleep, wait for an identical call, read or write the idempotency store, emit
the audit record); the core's driver (``_core.Drive``) performs them. How a tool body runs is
the same on every path (see ``agentkit_tools._runner``): an ``async`` body awaited in the
caller's own task, a sync body on the process's worker pool (daemon threads), a sync body of a
tool declared non-blocking (``Invoker(..., inline={"name", ...})`` or ``non_blocking = True``)
directly on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Any, Iterable, Mapping, Sequence

from . import _core
from .frozen import FrozenDict, FrozenList
from .middleware import Handler, Middleware, ToolCall, _Builtin, default_chain

__all__ = ["Invoker"]

_Drive, _drive = _core.Drive, _core.drive


def _builtin(mw: Any) -> bool:
    """A built-in rule the pipeline runs (not one whose ``wrap`` was replaced)."""
    return isinstance(mw, _Builtin) and type(mw).wrap is _Builtin.wrap and "wrap" not in vars(mw)


class _State:
    """The per-Invoker state of every pipeline segment (sizes and ``forget`` for tests and
    monitoring)."""

    def __init__(self, pipelines: list[Any]) -> None:
        self.pipelines = pipelines

    def sizes(self) -> tuple[int, int, int]:
        sizes = [p.sizes() for p in self.pipelines] or [(0, 0, 0)]
        return tuple(sum(s[i] for s in sizes) for i in range(3))  # type: ignore[return-value]

    def scopes(self) -> int:
        return max((p.scopes() for p in self.pipelines), default=0)

    def forget(self, scope: str) -> None:
        for p in self.pipelines:
            p.forget(scope)


def _cancelling(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` was asked to cancel and has not ended (Python 3.10 does not count the
    requests: a task is asked again there)."""
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() > 0 and not task.done()


class Invoker:
    """Runs tool calls through a middleware chain; never raises into the agent loop.

    ``registry``: a ``ToolRegistry`` (or an iterable of tools, turned into one). ``middleware``:
    the chain, outermost first; ``None`` is the default chain ``[audit(), approval(),
    repeat_guard(), idempotency(), retry(), timeout()]``; ``[]`` runs bare calls. ``inline``:
    names of sync tools that do not block (pure computation) and run on the event loop instead
    of a worker thread; a tool attribute ``non_blocking = True`` does the same.

    The state of repeat detection, idempotency and the circuit breakers lives in the Invoker
    (``state``), scoped by ``ctx.run_id``; calls without a context or run id share one default
    scope per Invoker. It is bounded: per conversation the counts of the last 256 distinct calls
    and one open idempotency window (plus the calls in flight), and at most 4,096 conversations
    (the least recently used one without a call in flight is forgotten first).
    ``forget(run_id)`` drops a finished conversation's state at once.
    """

    def __init__(
        self,
        registry: Any,
        *,
        middleware: Sequence[Middleware] | None = None,
        inline: Iterable[str] = (),
    ) -> None:
        if not hasattr(registry, "_core"):
            from .registry import ToolRegistry

            registry = ToolRegistry(registry)
        self.registry = registry
        self.middleware: tuple[Middleware, ...] = tuple(default_chain() if middleware is None else middleware)
        # a bare string is one name, not a set of one-letter names
        self.inline = frozenset((inline,) if isinstance(inline, str) else inline)
        self.default_scope = f"invoker-{uuid.uuid4().hex}"
        self._pipelines: list[Any] = []
        self.state = _State(self._pipelines)
        # Consecutive built-ins are one pipeline segment; a user middleware wraps between them.
        groups: list[Any] = []
        for mw in self.middleware:
            if _builtin(mw) and groups and isinstance(groups[-1], list):
                groups[-1].append(mw)
            else:
                groups.append([mw] if _builtin(mw) else mw)
        if len(groups) <= 1 and all(isinstance(g, list) for g in groups):  # built-ins only
            self._only = self._pipeline(groups[0] if groups else [])
            self._entry: Handler = self._segment_of(self._only, None)
            return
        self._only = None
        handler: Handler | None = None
        for group in reversed(groups):
            if isinstance(group, list):
                handler = self._segment(group, handler)
            else:
                handler = group.wrap(self, handler if handler is not None else self._segment([], None))
        self._entry = handler  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Invoker({len(self.registry)} tools, middleware={list(self.middleware)!r})"

    def forget(self, run_id: str) -> None:
        """Forget the repeat counts and cached results of conversation ``run_id``."""
        self.state.forget(str(run_id))

    # ---------------------------------------------------------------- entry points

    async def invoke(self, call: Mapping[str, Any], ctx: Any = None) -> dict[str, Any]:
        """Run one tool call; returns its envelope, never raises. ``KeyboardInterrupt`` and
        ``SystemExit`` propagate (the process is being stopped), and so does the cancellation of
        the awaiting task; anything else — a ``CancelledError`` or another ``BaseException`` a
        tool body raised itself included — becomes an envelope.

        ``call``: ``{"id", "name", "input"}`` (Anthropic; ``input`` a mapping or JSON text),
        ``{"id", "function": {"name", "arguments"}}`` (OpenAI Chat; ``arguments`` JSON text) or
        ``{"call_id", "name", "arguments"}`` (OpenAI Responses); a host may add ``"approved":
        True``. The envelope is ``{"ok": True, "value", "elapsed_ms"}`` (+ ``"deduplicated":
        True``) or ``{"ok": False, "error": {"code", "message", ...}}``.
        """
        # One coroutine frame per call: collected pending (its loop closed with it), it is
        # closed before anything it refers to is cleared, so its call is aborted whole.
        only = self._only
        if only is None:
            return await _Drive.chain(self._chained, call, ctx)  # type: ignore[no-any-return]
        # The core admits the call, calls a non-blocking sync body itself and takes an async
        # body's first step: a call answered at once needs no driver.
        out = _drive(only, self.registry._core, call, ctx)
        return out if type(out) is not _Drive else await out  # type: ignore[no-any-return]

    def _chained(self, call: Any, ctx: Any) -> Any:
        return self._entry(self._start(call, ctx))

    async def invoke_many(self, calls: Iterable[Mapping[str, Any]], ctx: Any = None) -> list[dict[str, Any]]:
        """Run a model turn's calls concurrently; the envelopes come back in call order. Never
        raises but as :meth:`invoke` does; the cancellation of the awaiting task cancels every
        call of the turn (each body gets it) and propagates once they have all ended.

        The calls are admitted in call order before any body runs, and their bodies start in
        call order; each call's deadline starts when its body starts, as for a call alone. With
        the built-in rules only (the default chain), a call whose first step is its ``async``
        body (no approval to ask, no tracing span to open) runs that first attempt as a task of
        its own (one task per call, as ``asyncio.gather`` costs): ``asyncio.current_task()`` in
        it is that task, named as the body of a call alone is (``tool body <qualified name of the
        tool's function>``). Any later attempt (a retry), and a body reached after other steps, runs
        as in :meth:`invoke`, where ``asyncio.current_task()`` is a stand-in task for the body
        (it cancels the body, never the caller). Either way the body's ``contextvars`` changes
        reach neither the caller nor the call's later steps."""
        calls = list(calls)
        if len(calls) == 1:
            return [await self.invoke(calls[0], ctx)]
        if not calls:
            return []
        if self._only is None:
            return await self._each(calls, ctx)
        return await _core.Turn(self._only, self.registry._core, calls, ctx)  # type: ignore[no-any-return]

    async def _each(self, calls: list[Mapping[str, Any]], ctx: Any) -> list[dict[str, Any]]:
        """``invoke_many`` through a chain with user middleware: each call in a task of its own,
        as ``asyncio.gather`` makes them, except at the caller's cancellation: each call's task
        is cancelled once — one already asked to cancel is not asked again (``asyncio.run``'s
        shut-down cancels every task itself, and a second cancellation would cut the call's
        abort short, its record lost with the loop) — and the cancellation propagates once they
        have all ended, however often it is repeated meanwhile (each call's abort is bounded),
        as a turn of built-in rules does."""
        tasks = [asyncio.ensure_future(self.invoke(c, ctx)) for c in calls]
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            for t in tasks:
                if not _cancelling(t):
                    t.cancel()
            while not all(t.done() for t in tasks):
                try:
                    await asyncio.wait(tasks)
                except asyncio.CancelledError:
                    pass
            raise
        return [t.result() for t in tasks]

    # ---------------------------------------------------------------- the pipeline driver

    def _pipeline(self, rules: list[Any]) -> Any:
        pipe = _core.Pipeline([(r.name, r) for r in rules], self.default_scope, True, list(self.inline))
        self._pipelines.append(pipe)
        return pipe

    def _segment(self, rules: list[Any], nxt: Handler | None) -> Handler:
        """The handler of consecutive built-in ``rules`` (a pipeline segment) before ``nxt``
        (None: the tool body)."""
        return self._segment_of(self._pipeline(rules), nxt)

    def _segment_of(self, pipe: Any, nxt: Handler | None) -> Handler:
        """The handler of pipeline segment ``pipe``: the core's driver of the ``ToolCall`` it is
        given."""
        return functools.partial(_Drive.segment, pipe, nxt=nxt)

    def _start(self, call: Any, ctx: Any) -> ToolCall:
        """The ``ToolCall`` user middleware reads (only built when the chain has some)."""
        run_id = getattr(ctx, "run_id", None) if ctx is not None else None
        scope = self.default_scope if run_id is None else str(run_id)
        try:
            ok, tool, args, core, canonical = self.registry._core.admit(call, FrozenDict, FrozenList)
        except Exception as exc:  # not a dict: still an envelope
            env = _core.invalid_call_envelope(str(exc))
            return ToolCall({}, None, None, None, None, None, None, ctx, scope, env)
        cid, name, raw = _core.call_parts(call)
        if not ok:
            return ToolCall(call, cid, name, None, None, raw, None, ctx, scope, tool)
        tc = ToolCall(call, cid, tool.name, tool, args, None, core, ctx, scope, None)
        tc._canonical = canonical
        return tc
