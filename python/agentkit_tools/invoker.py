"""``Invoker``: the async dispatcher of an agent loop.

``await Invoker(registry).invoke(call, ctx)`` runs one tool call through the middleware chain
and always returns an envelope; ``await invoke_many(calls, ctx)`` runs a model turn's calls
concurrently and returns their envelopes in call order.

How a tool body runs (the same on every path; see ``agentkit_tools._runner``):

- an ``async`` body runs as its own task on the caller's event loop; at its deadline the caller
  gets ``timeout`` at once and the body is cancelled without the caller waiting for its
  clean-up;
- a sync body runs on a worker thread of the process's pool (daemon threads: a body still
  running never keeps the interpreter from exiting); at its deadline the caller gets
  ``timeout`` and the thread runs on until the function returns, its result discarded; a queued
  call whose deadline passed never starts; the caller's ``contextvars`` are copied into the
  thread as ``asyncio.to_thread`` does;
- a sync body of a tool declared non-blocking (``Invoker(..., inline={"name", ...})`` or a tool
  attribute ``non_blocking = True``) is called directly on the event loop: no thread hop, but
  it blocks the loop while it runs and its deadline cannot interrupt it.
"""

from __future__ import annotations

import asyncio
import collections.abc
import logging
import time
import uuid
from typing import Any, Iterable, Mapping, Sequence

from . import _core
from ._runner import BodyFailed, run_body
from .frozen import FrozenDict, FrozenList
from .middleware import Handler, Middleware, ToolCall, default_chain

__all__ = ["Invoker"]

_log = logging.getLogger("agentkit_tools.invoker")
_STOP = (KeyboardInterrupt, SystemExit)
#: Python 3.11+: a task counts its cancellation requests, so the caller's own cancellation can be
#: told apart from a CancelledError raised by a middleware.
_COUNTS_CANCELS = hasattr(asyncio.Task, "cancelling")


def error_envelope(tool_name: str, exc: BaseException, core: Any) -> dict[str, Any]:
    """The envelope of a failed call; an exception too broken to describe (its attributes
    raise) still yields an ``internal_error`` envelope."""
    if type(exc) is BodyFailed:
        exc = exc.exc
    try:
        return _core.error_envelope(tool_name, exc, core)  # type: ignore[no-any-return]
    except Exception:
        broken = RuntimeError(f"{type(exc).__qualname__} (its details cannot be read)")
        return _core.error_envelope(tool_name, broken, None)  # type: ignore[no-any-return]


def _fault_envelope(exc: BaseException) -> dict[str, Any]:
    return _core.fault_envelope(exc)  # type: ignore[no-any-return]


def _caller_cancelled() -> bool:
    task = asyncio.current_task()
    return task is None or not _COUNTS_CANCELS or task.cancelling() > 0


#: ``isinstance`` against ``typing.Mapping`` goes through typing's slow ``__subclasscheck__``;
#: a dict (the usual call) is checked first.
_MAPPING = (dict, collections.abc.Mapping)


def _call_name(call: Any) -> str | None:
    if not isinstance(call, _MAPPING):
        return None
    holder = call.get("function")
    name = (holder if isinstance(holder, _MAPPING) else call).get("name")
    return name if isinstance(name, str) else None


def _call_args(call: Any) -> Any:
    if not isinstance(call, _MAPPING):
        return None
    holder = call.get("function")
    holder = holder if isinstance(holder, _MAPPING) else call
    args = holder.get("input")
    return holder.get("arguments") if args is None else args


def _call_id(call: Any) -> Any:
    if not isinstance(call, _MAPPING):
        return None
    cid = call.get("id")
    return call.get("call_id") if cid is None else cid


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
        self.state = _core.MiddlewareState()
        self.default_scope = f"invoker-{uuid.uuid4().hex}"
        handler: Handler = self._execute
        for mw in reversed(self.middleware):
            handler = mw.wrap(self, handler)
        self._entry = handler

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
        try:
            return await self._entry(self._start(call, ctx))
        except Exception as exc:  # a fault in a middleware or a host callback, not in the tool
            _log.exception("Invoker failed on a call of %r", _call_name(call))
            return _fault_envelope(exc)
        except BaseException as exc:
            if isinstance(exc, _STOP) or (isinstance(exc, asyncio.CancelledError) and _caller_cancelled()):
                raise
            _log.exception("Invoker failed on a call of %r", _call_name(call))
            return _fault_envelope(exc)

    async def invoke_many(self, calls: Iterable[Mapping[str, Any]], ctx: Any = None) -> list[dict[str, Any]]:
        """Run a model turn's calls concurrently; the envelopes come back in call order."""
        calls = list(calls)
        if len(calls) == 1:
            return [await self.invoke(calls[0], ctx)]
        return list(await asyncio.gather(*(self.invoke(c, ctx) for c in calls)))

    # ---------------------------------------------------------------- the pipeline ends

    def _scope(self, ctx: Any) -> str:
        run_id = getattr(ctx, "run_id", None) if ctx is not None else None
        return self.default_scope if run_id is None else str(run_id)

    def _start(self, call: Any, ctx: Any) -> ToolCall:
        try:
            ok, tool, args, core, canonical = self.registry._core.admit(call, FrozenDict, FrozenList)
        except Exception as exc:  # not a dict: still an envelope
            env = _core.invalid_call_envelope(str(exc))
            return ToolCall({}, None, None, None, None, None, None, ctx, self._scope(ctx), env)
        if not ok:
            scope = self._scope(ctx)
            return ToolCall(call, _call_id(call), _call_name(call), None, None, _call_args(call), None, ctx, scope, tool)
        return self._prepared(call, ctx, tool, args, core, canonical)

    def _prepared(self, call: Any, ctx: Any, tool: Any, args: Any, core: Any, canonical: str) -> ToolCall:
        tc = ToolCall(call, _call_id(call), tool.name, tool, args, None, core, ctx, self._scope(ctx), None)
        tc._canonical = canonical
        return tc

    async def _execute(self, call: ToolCall) -> dict[str, Any]:
        """The innermost handler: run the body once; the exception of a failure is kept on
        ``call.exc`` for the retry middleware."""
        tool = call.tool
        if tool is None:
            return call.rejection  # type: ignore[return-value]
        call.attempts += 1
        started = time.perf_counter()
        try:
            value = await run_body(tool, call.args, call.ctx, call.timeout_s, self._inline(tool))
        except Exception as exc:
            if type(exc) is BodyFailed:
                exc = exc.exc
            call.exc = exc
            return error_envelope(tool.name, exc, call.core)
        return _core.ok_envelope(value, (time.perf_counter() - started) * 1000.0)  # type: ignore[no-any-return]

    def _inline(self, tool: Any) -> bool:
        """Whether ``tool`` is a sync function tool that runs on the event loop (declared
        non-blocking, or named in ``Invoker(..., inline=...)``)."""
        return (
            getattr(tool, "fn", None) is not None
            and getattr(tool, "check_output", None) is not None
            and not getattr(tool, "_is_async", False)
            and (tool.name in self.inline or getattr(tool, "non_blocking", False) is True)
        )
