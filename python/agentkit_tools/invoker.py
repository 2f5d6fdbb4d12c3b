"""``Invoker``: the async dispatcher of an agent loop.

``await Invoker(registry).invoke(call, ctx)`` runs one tool call through the middleware chain
and always returns an envelope; ``await invoke_many(calls, ctx)`` runs a model turn's calls
concurrently and returns their envelopes in call order.

Where a tool body runs:

- an ``async`` body is awaited on the event loop (cancelled on its deadline);
- a sync body runs on a worker thread of the Rust core's pool, which hands the outcome back to
  the loop through a socket it watches (written after the worker released the GIL), cheaper
  than ``asyncio.to_thread`` (see ``benches/thread_hop.py``); the caller's ``contextvars``
  (OpenTelemetry's current span among them) are copied into the thread as
  ``asyncio.to_thread`` does;
- a sync body of a tool declared non-blocking (``Invoker(..., inline={"name", ...})`` or a tool
  attribute ``non_blocking = True``) is called directly on the event loop: no thread hop at all,
  but it blocks the loop while it runs and its deadline cannot interrupt it.

A sync body that outlives its deadline keeps its worker thread until it returns (Python cannot
kill a thread); interpreter exit waits for such bodies, as it does for ``asyncio.to_thread``'s.
"""

from __future__ import annotations

import asyncio
import atexit
import collections.abc
import contextvars
import inspect
import logging
import time
import uuid
import weakref
from typing import Any, Iterable, Mapping, Sequence

from . import _core
from .errors import ToolTimeoutError
from .frozen import FrozenDict, FrozenList
from .middleware import (
    Handler,
    Middleware,
    ToolCall,
    _Approval,
    _Audit,
    _Egress,
    _Idempotency,
    _RepeatGuard,
    _Retry,
    _Timeout,
    default_chain,
    retry_safe,
)

__all__ = ["Invoker"]

_log = logging.getLogger("agentkit_tools.invoker")


def _resolve(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Complete ``fut`` on the loop's thread with a worker's result (unless it was cancelled)."""
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        if isinstance(value, StopIteration):
            # A future refuses StopIteration (TypeError in this callback, the caller would wait
            # forever); Python 3.12+ converts it this way.
            err = RuntimeError("StopIteration interacts badly with generators and cannot be raised into a Future")
            err.__cause__ = value
            value = err
        fut.set_exception(value)


# Interpreter exit waits for sync bodies still running on the pool (as it does for the threads of
# asyncio.to_thread): a Rust thread touching Python during finalization would abort the process.
atexit.register(_core.drain_pool)


def run_in_worker(fn: Any, a: Any, b: Any) -> asyncio.Future[Any]:
    """``fn(a, b)`` on a worker thread of the core's pool (a tool body: ``fn(args, ctx)``);
    returns a future of the running loop with its result or exception. The caller's context
    variables are copied into the thread. The worker hands the outcome back through a socket
    the loop watches, written after it has released the GIL (``_core.Completions``)."""
    loop = asyncio.get_running_loop()
    state = _state_of(loop)
    done = state.completions
    if done is None:  # the loop's first sync body
        done = state.completions = _core.Completions()
        loop.add_reader(done.fileno(), done.drain, _resolve)
    fut = loop.create_future()
    _core.submit_sync(contextvars.copy_context().run, fn, a, b, done, fut)
    return fut


class _Deadlines:
    """All pending call deadlines of one event loop behind a single timer. The queue lives in
    the Rust core; arming one asyncio timer per call would cost more than the rest of the
    middleware chain together."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: ``_LOOPS`` is keyed weakly by the loop, a strong reference in the value
        # would keep every loop (and its queue) alive forever.
        self.loop = weakref.proxy(loop)
        self.queue = _core.DeadlineQueue()
        self.armed_at: float | None = None
        # also weakly: a timer handle holds its loop (the loop holds the handle while armed)
        self.handle: weakref.ref[asyncio.TimerHandle] | None = None

    def add(self, when: float, deadline: _Deadline) -> int:
        token: int = self.queue.push(when, deadline)
        if self.armed_at is None or when < self.armed_at:
            self._arm(when)
        return token

    def _arm(self, when: float) -> None:
        handle = None if self.handle is None else self.handle()
        if handle is not None:
            handle.cancel()
        self.armed_at = when
        self.handle = weakref.ref(self.loop.call_at(when, self._fire))

    def _fire(self) -> None:
        self.handle = self.armed_at = None
        # asyncio runs a timer up to one clock resolution early
        for deadline in self.queue.pop_expired(self.loop.time() + _CLOCK_RESOLUTION):
            deadline.expire()
        nxt = self.queue.next_deadline()
        if nxt is not None:
            self._arm(nxt)


_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution
#: Python 3.11+: a task counts its cancellation requests (``cancelling`` / ``uncancel``).
_COUNTS_CANCELS = hasattr(asyncio.Task, "cancelling")


class _LoopState:
    """What the Invoker keeps per event loop: its call deadlines, and where the worker threads
    hand their outcomes back (created with the loop's first sync body)."""

    __slots__ = ("deadlines", "completions")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.deadlines = _Deadlines(loop)
        self.completions: Any = None


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()
#: The last loop looked up and its state (the usual case: one loop), without keeping it alive.
_LAST: tuple[weakref.ref[asyncio.AbstractEventLoop], _LoopState] | None = None


def _state_of(loop: asyncio.AbstractEventLoop) -> _LoopState:
    global _LAST
    last = _LAST
    if last is not None and last[0]() is loop:
        return last[1]
    state = _LOOPS.get(loop)
    if state is None:
        state = _LOOPS[loop] = _LoopState(loop)
    _LAST = (weakref.ref(loop), state)
    return state


class _Deadline:
    """``with _Deadline(limit, name): result = await body``: at most ``limit`` seconds for the
    awaits inside (None: no limit). On expiry the awaiting task is cancelled at its current
    ``await`` (an async body sees ``CancelledError``; the future of a sync body is abandoned)
    and the block raises ``ToolTimeoutError``. A ``TimeoutError`` raised by the body itself
    passes through unchanged (it is the tool's, and retriable). A plain context manager, not a
    coroutine, so it adds no frame to every resumption of the body."""

    __slots__ = ("limit", "name", "task", "expired", "deadlines", "token", "cancelling")

    def __init__(self, limit: float | None, name: str) -> None:
        self.limit = limit
        self.name = name
        self.task: asyncio.Task[Any] | None = None
        self.expired = False

    def __enter__(self) -> _Deadline:
        if self.limit is None:
            return self
        task = asyncio.current_task()
        if task is None:  # not inside a task: nothing to cancel, so no deadline
            return self
        loop = task.get_loop()
        self.task = task
        self.deadlines = deadlines = _state_of(loop).deadlines
        self.cancelling = task.cancelling() if _COUNTS_CANCELS else 0
        self.token = deadlines.add(loop.time() + self.limit, self)
        return self

    def expire(self) -> None:
        self.expired = True
        self.task.cancel()  # type: ignore[union-attr]

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.task is None:
            return
        self.deadlines.queue.remove(self.token)
        if self.expired:
            if _COUNTS_CANCELS:  # this cancellation is consumed here
                if self.task.uncancel() > self.cancelling:
                    return  # the caller cancelled too: its CancelledError propagates (as asyncio.timeout)
            if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                raise ToolTimeoutError(self.name, self.limit) from None  # type: ignore[arg-type]
        # else: the body swallowed the cancellation and returned; its result stands


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


#: Results that are never awaitable: ``inspect.isawaitable`` (an ABC check) is skipped for them.
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, list, tuple, dict})


class _FastLane:
    """The built-in chain fused into one coroutine for the calls it would only pass through.

    Built when every middleware of the chain is a built-in one, each at most once, with
    ``repeat_guard`` outside ``retry`` and ``retry`` outside ``timeout`` (their default order).
    A call takes the lane when nothing would observe its audit record and none of approval,
    idempotency or egress applies to its tool (no ``requires_approval``, not side-effecting, no
    ``url_arg``) and ``retry`` keeps no circuit breaker: then the chain reduces to the repeat
    check, the retry loop and the per-attempt deadline, run here without one coroutine per
    middleware. Every other call goes down the composed chain; both give the same envelope.
    """

    __slots__ = ("audit", "approval", "idempotency", "egress", "repeat_limit", "policy", "sleep", "timeout")

    def __init__(self, chain: Sequence[Middleware]) -> None:
        kinds = {type(mw): mw for mw in chain}
        self.audit: _Audit | None = kinds.get(_Audit)  # type: ignore[assignment]
        self.approval = _Approval in kinds
        self.idempotency = _Idempotency in kinds
        self.egress = _Egress in kinds
        guard: _RepeatGuard | None = kinds.get(_RepeatGuard)  # type: ignore[assignment]
        self.repeat_limit = None if guard is None else guard.limit
        retry: _Retry | None = kinds.get(_Retry)  # type: ignore[assignment]
        self.policy = None if retry is None else retry.policy  # read once, as retry's wrap does
        self.sleep = asyncio.sleep if retry is None or retry.sleep is None else retry.sleep
        self.timeout: _Timeout | None = kinds.get(_Timeout)  # type: ignore[assignment]

    @classmethod
    def of(cls, chain: Sequence[Middleware]) -> _FastLane | None:
        """The lane for ``chain``, or None when the chain holds anything else."""
        builtin = (_Audit, _Approval, _RepeatGuard, _Idempotency, _Retry, _Timeout, _Egress)
        kinds = [type(mw) for mw in chain]
        if any(k not in builtin for k in kinds) or len(set(kinds)) != len(kinds):
            return None
        if any("wrap" in getattr(mw, "__dict__", ()) for mw in chain):  # a wrap replaced on the instance
            return None
        order = [k for k in kinds if k in (_RepeatGuard, _Retry, _Timeout)]
        if order != sorted(order, key=(_RepeatGuard, _Retry, _Timeout).index):
            return None
        retry = next((mw for mw in chain if isinstance(mw, _Retry)), None)
        if retry is not None and retry.breaker_threshold is not None:
            return None
        return cls(chain)

    def takes(self, tool: Any) -> bool:
        """Whether a call of ``tool`` skips approval, idempotency and egress."""
        return not (
            (self.approval and getattr(tool, "requires_approval", False))
            or (self.idempotency and getattr(tool, "side_effecting", False))
            or (self.egress and getattr(tool, "url_arg", None))
        )


class Invoker:
    """Runs tool calls through a middleware chain; never raises into the agent loop.

    ``registry``: a ``ToolRegistry`` (or an iterable of tools, turned into one). ``middleware``:
    the chain, outermost first; ``None`` is the default chain ``[audit(), approval(),
    repeat_guard(), idempotency(), retry(), timeout()]``; ``[]`` runs bare calls. ``inline``:
    names of sync tools that do not block (pure computation) and run on the event loop instead
    of a worker thread; a tool attribute ``non_blocking = True`` does the same.

    The state of repeat detection, idempotency and the circuit breakers lives in the Invoker
    (``state``), scoped by ``ctx.run_id``; calls without a context or run id share one default
    scope per Invoker. ``forget(run_id)`` drops a finished conversation's state.
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
        self._lane = _FastLane.of(self.middleware)

    def __repr__(self) -> str:
        return f"Invoker({len(self.registry)} tools, middleware={list(self.middleware)!r})"

    def forget(self, run_id: str) -> None:
        """Forget the repeat counts and cached results of conversation ``run_id``."""
        self.state.forget(str(run_id))

    # ---------------------------------------------------------------- entry points

    async def invoke(self, call: Mapping[str, Any], ctx: Any = None) -> dict[str, Any]:
        """Run one tool call; returns its envelope, never raises (cancellation of the
        awaiting task propagates as usual).

        ``call``: ``{"id", "name", "input"}`` (Anthropic; ``input`` a mapping or JSON text),
        ``{"id", "function": {"name", "arguments"}}`` (OpenAI Chat; ``arguments`` JSON text) or
        ``{"call_id", "name", "arguments"}`` (OpenAI Responses); a host may add ``"approved":
        True``. The envelope is ``{"ok": True, "value", "elapsed_ms"}`` (+ ``"deduplicated":
        True``) or ``{"ok": False, "error": {"code", "message", ...}}``.
        """
        try:
            lane = self._lane
            if lane is None or (lane.audit is not None and lane.audit.observed(ctx)):
                return await self._entry(self._start(call, ctx))
            try:
                ok, tool, args, core, canonical = self.registry._core.admit(call, FrozenDict, FrozenList)
            except Exception:  # not a dict: the chain answers with its envelope
                return await self._entry(self._start(call, ctx))
            # The composed chain reads the scope of every call it is given (a failing ctx.run_id
            # fails the call there): so does the lane.
            scope = self._scope(ctx)
            if not ok:  # unknown tool, invalid arguments: no middleware acts on it
                return tool  # type: ignore[no-any-return]
            if not lane.takes(tool):
                return await self._entry(self._prepared(call, ctx, tool, args, core, canonical))
            # The fast lane: the chain reduced to the repeat check, the retry loop and the deadline,
            # each read at the moment the composed chain reads it.
            name = tool.name
            if lane.repeat_limit is not None:
                refused = self.state.repeat_check(scope, name, canonical, lane.repeat_limit)
                if refused is not None:
                    return refused  # type: ignore[no-any-return]
            policy = lane.policy
            safe = policy is not None and retry_safe(tool)  # once, before the first attempt
            attempt = 0
            while True:
                attempt += 1
                # before the body (a ctx.deadline is cut from now), outside the body's try
                limit = None if lane.timeout is None else lane.timeout.limit(tool, ctx)
                started = time.perf_counter()
                try:
                    if self._inline(tool):  # no coroutine: the deadline could not interrupt the body
                        result = tool.fn(args, ctx)
                        if type(result) not in _PLAIN and inspect.isawaitable(result):
                            with _Deadline(limit, name):
                                result = await result
                        value = tool.check_output(result, ctx)
                    else:
                        value = await self._run_body(tool, args, ctx, limit, inline=False)
                except Exception as exc:
                    if isinstance(exc, StopIteration):  # what leaving _run_body's frame makes of it (PEP 479)
                        err = RuntimeError("coroutine raised StopIteration")
                        err.__cause__ = exc
                        exc = err
                    env: dict[str, Any] = _core.error_envelope(name, exc, core)
                    if policy is None:
                        return env
                    delay = policy.decide(exc, safe, attempt)[1]
                    if delay is None:
                        return env
                else:
                    return _core.ok_envelope(value, (time.perf_counter() - started) * 1000.0)  # type: ignore[no-any-return]
                await lane.sleep(delay)  # outside the except block, as in retry (no exception context)
        except Exception as exc:  # a fault in a middleware or a host callback, not in the tool
            _log.exception("Invoker failed on a call of %r", _call_name(call))
            return {
                "ok": False,
                "error": {
                    "code": "internal_error",
                    "message": f"The call could not be completed: {type(exc).__qualname__}: {exc}. This is "
                    "a fault in the agent's tooling, not in your arguments; do not retry.",
                },
            }

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
            env = {
                "ok": False,
                "error": {"code": "invalid_call", "message": f"{exc}. Send a tool call with a name and its arguments."},
            }
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
            value = await self._run_body(tool, call.args, call.ctx, call.timeout_s, self._inline(tool))
        except Exception as exc:
            call.exc = exc
            return _core.error_envelope(tool.name, exc, call.core)  # type: ignore[no-any-return]
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

    async def _run_body(self, tool: Any, args: Any, ctx: Any, limit: float | None, inline: bool) -> Any:
        """Run the body once within ``limit`` seconds (None: no deadline) and check its result;
        ``inline``: ``self._inline(tool)``, as the caller found it."""
        fn = getattr(tool, "fn", None)
        check = getattr(tool, "check_output", None)
        name = tool.name
        if fn is None or check is None:  # any other Tool: its own run(args, ctx)
            with _Deadline(limit, name):
                return await tool.run(args, ctx)
        if getattr(tool, "_is_async", False):
            with _Deadline(limit, name):
                result = await fn(args, ctx)
        elif inline:
            result = fn(args, ctx)
        else:
            with _Deadline(limit, name):
                result = await run_in_worker(fn, args, ctx)
        if type(result) not in _PLAIN and inspect.isawaitable(result):
            with _Deadline(limit, name):
                result = await result
        return check(result, ctx)
