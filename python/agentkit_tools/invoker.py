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
import logging
import uuid
from typing import Any, Iterable, Mapping, Sequence

from . import _core
from ._runner import BODY_ASYNC
from .frozen import FrozenDict, FrozenList
from .middleware import Handler, Middleware, ToolCall, _Builtin, default_chain

__all__ = ["Invoker"]

_log = logging.getLogger("agentkit_tools.invoker")
_STOP = (KeyboardInterrupt, SystemExit)
_Drive, _drive, _call_fault, DONE, RUN = _core.Drive, _core.drive, _core.call_fault, _core.STEP_DONE, _core.STEP_RUN


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
        it is that task. Any later attempt (a retry), and a body reached after other steps, runs
        as in :meth:`invoke`, where ``asyncio.current_task()`` is a stand-in task for the body
        (it cancels the body, never the caller). Either way the body's ``contextvars`` changes
        reach neither the caller nor the call's later steps."""
        calls = list(calls)
        if len(calls) == 1:
            return [await self.invoke(calls[0], ctx)]
        if self._only is None or not calls:
            return list(await asyncio.gather(*(self.invoke(c, ctx) for c in calls)))
        return await _Turn(self, calls, ctx).run()

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


class _Turn:
    """The calls of one ``invoke_many`` turn of an Invoker whose chain is built-in rules only.

    Every call is admitted (``Pipeline.begin``) in call order before any body runs. A call the
    pipeline answers at once is answered; a call whose first step is to await an ``async`` body
    gets one task of its own whose coroutine is the core's ``Relay``: it calls the body, steps
    just it (no driver coroutine, no stand-in task around it), checks and feeds in what it
    returns, and the call is answered (:meth:`_then`, :meth:`_failed`); any other call, and whatever
    a call asks for after its body (a retry, an audit record), goes through the Invoker's
    driver, in that same task or in one of its own. A body's deadline starts when its task
    starts the body (as for a call alone) and is one entry of the loop's deadline timer (the
    core's): at the deadline the call gets ``timeout`` at once and its body is
    cancelled, its clean-up going on in a task of its own, its outcome dropped.

    The caller's cancellation reaches every body still running (and every call in the driver);
    once they have all ended, the calls still unanswered are aborted (records ``cancelled``,
    shared claims released, shielded from further cancellations) and it propagates. As for a
    single call, a body is the one to act on it: one that ends by the cancellation is aborted,
    one that swallows it and answers is settled as it answered. ``KeyboardInterrupt`` or
    ``SystemExit`` from a call aborts it and reaches the caller's ``await`` the same way."""

    __slots__ = ("inv", "calls", "ctx", "envs", "tasks", "machines", "pending", "waiter", "cancelled", "stop")

    def __init__(self, inv: Invoker, calls: list[Any], ctx: Any) -> None:
        self.inv = inv
        self.calls = calls
        self.ctx = ctx
        n = len(calls)
        self.envs: list[Any] = [None] * n
        self.tasks: list[Any] = [None] * n  # the task of each call not answered yet
        self.machines: list[Any] = [None] * n  # the call state of each call not answered nor aborted
        self.pending = n
        self.waiter: Any = None
        self.cancelled = False  # the caller's cancellation (or a stop) reached the turn
        self.stop: BaseException | None = None  # the first KeyboardInterrupt/SystemExit of a call

    async def run(self) -> list[dict[str, Any]]:
        inv, ctx, calls = self.inv, self.ctx, self.calls
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        pipe, registry = inv._only, inv.registry._core
        begin, create_task, Relay = pipe.begin, loop.create_task, _core.Relay
        tasks, machines = self.tasks, self.machines
        for i, call in enumerate(calls):
            try:
                m, step, arg = begin(registry, call, ctx)
            except BaseException as exc:
                if isinstance(exc, _STOP):  # the process is being stopped
                    await self._cancel(exc)
                    raise
                self._answer(i, _call_fault(exc, call, False))
                continue
            if step == DONE:
                self._answer(i, arg)
                continue
            machines[i] = m
            if step == RUN and arg[3] == BODY_ASYNC:
                task = tasks[i] = create_task(Relay(arg, ctx, self, i, m))
            else:
                task = tasks[i] = create_task(self._drive(i, m, step, arg))
            # As asyncio.gather does for the tasks it creates: the turn's caller cannot reach
            # them, so a loop closed with them pending drops them without a report (the caller's
            # own task is reported, if it asks for that).
            task._log_destroy_pending = False  # type: ignore[attr-defined]
        try:
            if self.pending:
                await self.waiter
        except GeneratorExit:
            self._drop()
            raise
        except BaseException as exc:
            await self._cancel(exc)
            if self.stop is not None and self.stop is not exc:
                raise self.stop from None  # a call stopped the process while the turn was cancelled
            raise
        return self.envs

    def _answer(self, i: int, env: dict[str, Any]) -> None:
        self.envs[i] = env
        self.machines[i] = None
        self.tasks[i] = None
        self.pending -= 1
        if self.pending == 0 and not self.waiter.done():
            self.waiter.set_result(None)

    def _stop(self, i: int, exc: BaseException) -> None:
        """Call ``i`` raised ``KeyboardInterrupt``/``SystemExit`` (it was aborted): the caller's
        ``await`` raises it."""
        self.machines[i] = None
        if self.stop is None:
            self.stop = exc
        if not self.waiter.done():
            self.waiter.set_exception(exc)

    def _failed(self, i: int, m: Any, exc: BaseException) -> Any:
        """Call ``i``'s async body raised ``exc`` in its task (a :class:`_core.Relay`; its
        deadline's ``ToolTimeoutError`` included). Returns None when the call is settled, else
        the coroutine its task goes on with (see :meth:`_then`)."""
        try:
            if isinstance(exc, _STOP):
                raise exc
            if self.cancelled and isinstance(exc, asyncio.CancelledError):
                return None  # ended by the caller's cancellation: the turn aborts it
            step, arg = m.failed(exc)  # an exception of the body's, a BaseException of its own too
        except BaseException as e:
            return self._abort_one(i, m, e)
        return self._then(i, m, step, arg)

    def _closed(self, i: int, m: Any, exc: BaseException) -> None:
        """The coroutine of call ``i``'s task (a :class:`_core.Relay`) was closed before the call
        ended: its body, if it had started, ended by ``exc`` (``GeneratorExit``, or what its
        ``finally`` raised). A turn being cancelled or dropped aborts the call itself; with its
        loop closed, the call is aborted as cancelled without awaiting; else it ends as a call
        whose body raised ``exc`` (its later steps in a task of their own)."""
        if self.cancelled or self.machines[i] is not m:
            return
        loop = self.waiter.get_loop()
        if loop.is_closed():
            self.machines[i] = None
            _Drive.closed(m, self.ctx)
            return
        try:
            if isinstance(exc, _STOP):
                raise exc
            step, arg = m.failed(exc)
        except BaseException as e:
            self.tasks[i] = loop.create_task(self._abort_one(i, m, e))
            return
        if step == DONE:
            self._answer(i, arg)
        else:
            self.tasks[i] = loop.create_task(self._drive(i, m, step, arg))

    def _then(self, i: int, m: Any, step: int, arg: Any) -> Any:
        """Call ``i`` goes on from ``(step, arg)`` after its body (its ``Relay`` checked and fed
        in a value it returned): answered at once, else the driver's coroutine its task goes on
        with (returned), or a task of its own."""
        if step == DONE:
            self._answer(i, arg)
            return None
        if asyncio.current_task()._must_cancel:  # type: ignore[union-attr]
            # The body cancelled its own task and returned: as for a call alone, that
            # cancellation was the body's; the call's later steps (settling an awaitable it
            # returned included) go on in a task of their own.
            task = self.tasks[i] = asyncio.get_running_loop().create_task(self._drive(i, m, step, arg))
            task._log_destroy_pending = False  # type: ignore[attr-defined]
            return None
        return self._drive(i, m, step, arg)

    async def _abort_one(self, i: int, m: Any, exc: BaseException) -> None:
        """Call ``i`` faulted (or a request to stop came from its body): abort it, then answer it
        (or raise the stop at the caller's ``await``)."""
        await _Drive.abort(m, exc, self.ctx)
        if isinstance(exc, _STOP):
            self._stop(i, exc)
        else:
            self._answer(i, _call_fault(exc, self.calls[i], False))

    async def _drive(self, i: int, m: Any, step: int, arg: Any) -> None:
        """Finish call ``i`` through the core's driver from ``(step, arg)``."""
        drive = _Drive.go(m, step, arg, self.ctx)
        try:
            env = await drive
        except BaseException as exc:  # the driver aborted the call
            # Closed: the driver aborted the call as cancelled. (A GeneratorExit a callback raised
            # itself is its own failure, answered below as any other.)
            if isinstance(exc, GeneratorExit) and drive.was_closed:
                self.machines[i] = None
                if not self.cancelled and not self.waiter.get_loop().is_closed():
                    self._answer(i, _core.fault_envelope(exc))  # something closed it: the turn goes on
                raise
            if isinstance(exc, _STOP):
                self._stop(i, exc)
                return
            if self.cancelled and isinstance(exc, asyncio.CancelledError):
                self.machines[i] = None
                return
            env = _call_fault(exc, self.calls[i], False)
        self._answer(i, env)

    async def _cancel(self, exc: BaseException) -> None:
        """The caller's cancellation, or a request to stop (``exc``): every body and driver still
        running is cancelled; once all have ended, the calls still unanswered are aborted (their
        shared claims released, their records emitted unless the process is being stopped) in
        a task of their own that further cancellations of the caller do not interrupt."""
        self.cancelled = True
        running = [t for t in self.tasks if t is not None and not t.done()]
        while running:
            for t in running:
                t.cancel()
            try:
                await asyncio.wait(running)
            except asyncio.CancelledError:
                pass  # cancelled again: they are cancelled again (as gather does)
            running = [t for t in running if not t.done()]
        rest = [m for m in self.machines if m is not None]
        self.machines = [None] * len(self.machines)
        if rest:
            aborts = asyncio.get_running_loop().create_task(self._abort(rest, exc))
            while not aborts.done():
                try:
                    await asyncio.shield(aborts)
                except asyncio.CancelledError:
                    pass  # cancelled again: the aborts go on; the first cancellation propagates

    def _drop(self) -> None:
        """The turn's coroutine is being closed with calls unanswered (its loop was closed with
        the turn pending): nothing can be awaited any more. Each task left is closed (its body's
        ``finally`` blocks run, its call is aborted as cancelled), or cancelled if its loop
        still runs; each call left is aborted as cancelled without awaiting (``Drive.closed``: its
        release and record go as far as they get without suspending)."""
        self.cancelled = True
        for t in self.tasks:
            if t is None or t.done():
                continue
            if not t.get_loop().is_closed():
                t.cancel()
                continue
            try:
                t.get_coro().close()
            except Exception:  # noqa: BLE001 - a body whose clean-up raised or awaits while closed: its call is aborted below
                pass
        for m in self.machines:
            if m is not None:
                _Drive.closed(m, self.ctx)
        self.machines = [None] * len(self.machines)

    async def _abort(self, machines: list[Any], exc: BaseException) -> None:
        ctx = self.ctx
        for m in machines:
            try:
                await _Drive.abort(m, exc, ctx)
            except Exception:
                _log.error("Invoker failed to abort a call of a cancelled turn", exc_info=True)

