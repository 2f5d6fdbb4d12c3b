"""How a tool body runs — the same way on every path (``Invoker``, ``dispatch``,
``FunctionTool.run``, the MCP server, the command line).

- Every body runs in a copy of the caller's ``contextvars`` (as ``asyncio.to_thread`` and a new
  task do): it sees the caller's values, and what it sets reaches neither the caller nor the
  call's later steps. That holds for each kind: a sync body on a worker thread or on the
  caller's own thread (``non_blocking``), an ``async`` body (the call of its function, which
  may run code before it returns the coroutine, and each of its steps: one copy), and an
  awaitable a sync body returns (a copy of its own, taken when it is awaited).
- An ``async`` body is awaited in the caller's own task (no task of its own: one that never
  suspends costs no pass of the event loop; the exception: a turn of ``Invoker.invoke_many`` gives
  each async body a real task of its own, as ``asyncio.gather`` would), each of its steps as a
  task of its own: during its steps ``asyncio.current_task()`` is a stand-in for the body
  (the core's ``BodyTask``), so what the body enters that remembers its task (``asyncio.timeout``, a
  task group, an anyio cancel scope) cancels the body, never the caller, and the caller's own
  cancellation reaches the body as a cancellation of the body's task. At the deadline the caller
  gets ``timeout`` at once: the body is cancelled and, if its clean-up awaits (a ``finally`` that
  awaits, a body that swallows the cancellation), that goes on in a task of its own, its outcome
  dropped; the body's scopes and the deadlines of calls it made go on cancelling the body there. A
  result past the deadline is never a success, even from a body that blocked the loop. As for any
  task of its own, the body is outside the anyio cancel scopes the caller entered: the caller's
  scope cancels it as a plain task cancellation (a shield the body entered does not hold that
  off).
- A sync body runs on a worker thread of one process-wide pool (or, for a tool declared
  ``non_blocking``, directly on the caller's thread: no hop, and no deadline can interrupt it).
  Python cannot kill a thread: at the deadline the caller gets ``timeout`` and the thread runs
  on until the function returns, its result discarded. A queued call whose deadline passed
  before a worker was free never starts.
- The worker pool is the core's (``_core.WorkerPool``: its jobs, its threads' accounting, the
  waits of its callers and workers); its threads are daemon threads that call the bodies from
  Python (:func:`_work`). The hand-off costs as few thread wake-ups as possible: a worker that
  finished a call waits for the next one spinning for up to 50 µs with the interpreter lock
  released (one idle worker at a time; the others park), so a call submitted right after finds
  it awake; a job is queued only once the caller has released the interpreter lock, and the
  worker publishes the outcome only once it has released it, so neither side wakes to find the
  lock held. A synchronous caller (``dispatch``) waits spinning up to 50 µs, then parked
  (waking every 50 ms so that Ctrl-C is handled). A caller on an event loop waits the same brief
  spin only when the loop has nothing else to run, otherwise it awaits a future the worker
  completes. Spinning yields the CPU between checks and shrinks to 2 µs while recent waits were
  longer than 50 µs.
- Worker threads are daemon threads: a body still running never keeps the interpreter from
  exiting (it is stopped with the process, like any daemon thread); a worker or caller waiting
  in the core when the interpreter finalizes stays parked until the process is gone.
- Pool limits: at most ``MAX_WORKERS`` threads run calls that are within their deadline (more
  calls queue). A thread whose call overran its deadline stops counting against that limit, up
  to ``MAX_STUCK`` such threads; when every thread is held by an overrun call and no other may
  start, a sync call is refused with ``backend_saturated`` instead of waiting for a timeout.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import selectors
import threading
import time
import types
import weakref
from typing import Any, Callable

from . import _core
from .errors import ToolError, ToolTimeoutError

__all__ = ["MAX_WORKERS", "MAX_STUCK", "BackendSaturatedError", "run_body", "run_inline", "start_async", "start_in_copy", "checked", "on_time", "in_worker", "BodyFailed"]

#: Threads that run sync bodies within their deadline (tool bodies block on I/O, so more than the
#: CPU count): 8 per CPU this process may run on, at least 32, at most 256.
MAX_WORKERS: int = _core.POOL_MAX_WORKERS
#: Threads whose call overran its deadline that the pool tolerates on top of ``MAX_WORKERS``.
MAX_STUCK: int = _core.POOL_MAX_STUCK

_monotonic = time.monotonic
#: The end on ``time.monotonic`` of a call of ``limit`` seconds starting now (None: none), as the
#: core computes every call's end.
_deadline_end = _core.deadline_end


class BackendSaturatedError(ToolError):
    """Every worker thread is held by a tool call that overran its deadline: the call was not
    run (code ``backend_saturated``, not retriable right away)."""

    def __init__(self, tool_name: str, stuck: int) -> None:
        super().__init__(
            _core.backend_saturated_message(tool_name, stuck),
            code=_core.codes.BACKEND_SATURATED,
            retriable=False,
        )


class BodyFailed(Exception):
    """Carries a ``BaseException`` a tool body raised (``CancelledError`` it raised itself, a
    custom ``BaseException`` subclass) through code that must tell it apart from the caller's own
    cancellation; ``exc`` is the original."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(exc)
        self.exc = exc


def unwrap(exc: BaseException) -> BaseException:
    """The exception a body raised: ``BodyFailed`` unwrapped."""
    return exc.exc if type(exc) is BodyFailed else exc


def _carried(exc: BaseException) -> BaseException:
    """What a body's ``BaseException`` (not an ``Exception``) becomes on its way to the caller:
    ``KeyboardInterrupt``/``SystemExit`` as they are (the process is being stopped), anything
    else wrapped in ``BodyFailed``."""
    return exc if isinstance(exc, _STOP) else BodyFailed(exc)


_STOP = (KeyboardInterrupt, SystemExit)

# ------------------------------------------------------------------ the worker pool

def _work(pool: Any) -> None:
    """A worker thread of ``pool``: the core hands the last outcome over and waits for the next
    job (``WorkerPool.next_job``); the body is called here, from Python, so that no frame of the
    core is under it (a body still running when the interpreter exits is stopped like any
    daemon thread's code)."""
    next_job, run = pool.next_job, contextvars.Context.run
    held: list[Any] = [None, True, None]  # the job run last, whether it returned, its outcome
    while True:
        try:
            held[2] = run(*next_job(held))
            held[1] = True
        except Exception as exc:
            held[1], held[2] = False, exc
        except BaseException as exc:  # noqa: B036 - handed to the caller, never lost
            held[1], held[2] = False, _carried(exc)


def _start_worker(pool: Any, n: int) -> None:
    threading.Thread(target=_work, args=(pool,), name=f"agentkit-tool-{n}", daemon=True).start()


def _make_pool() -> Any:
    """A worker pool of the core's (``_core.WorkerPool``): its jobs, thread accounting and
    hand-off; its threads are started here."""
    return _core.WorkerPool(_start_worker, BackendSaturatedError)


_POOL = _make_pool()


def _pool() -> Any:
    """The worker pool of this process: a forked child has none of the parent's threads, so it
    starts a pool of its own at its first use (the core counts every fork, also one that runs
    none of Python's fork hooks: a C extension's, or ``ctypes.PyDLL(None).fork()``)."""
    global _POOL
    pool = _POOL
    if pool.forked():
        pool = _POOL = _make_pool()
    return pool


def pool_sizes() -> tuple[int, int, int]:
    """``(threads, idle, stuck)`` of the worker pool."""
    return _pool().sizes()  # type: ignore[no-any-return]


# ------------------------------------------------------------------ running on an event loop



def on_time(end: float | None, name: str, limit: float | None) -> None:
    """Nothing past the deadline is a success: raises ``ToolTimeoutError(name, limit)`` once
    ``time.monotonic()`` is past ``end`` (None: no deadline), even for a body that answered (one
    that blocked the loop or the thread past it)."""
    if end is not None and _monotonic() > end:
        raise ToolTimeoutError(name, limit) from None  # type: ignore[arg-type]


#: Results that are never awaitable: ``inspect.isawaitable`` (an ABC check) is skipped for them.
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, list, tuple, dict})


# ------------------------------------------------------------------ an async body, in the caller's task

_COROUTINE = types.CoroutineType
#: An async body awaited in the caller's own task, each step as its stand-in task (the core's
#: ``BodyAwait``): ``await BodyAwait(awaitable, limit_s, name, end)``.
BodyAwait = _core.BodyAwait


def _held(loop: asyncio.AbstractEventLoop) -> _CleanUps:
    held = _HELD.get(loop)
    holder = None if held is None else held()
    if holder is None:
        holder = _CleanUps()
        _HELD[loop] = weakref.ref(holder)
    return holder


def hold_clean_up(task: asyncio.Task[Any]) -> None:
    """Hold ``task``, which drives the clean-up of a body past its deadline (its outcome
    dropped), until it ends or its loop is closed (see :class:`_CleanUps`)."""
    _held(task.get_loop()).add(task)


def bodies_of(loop: asyncio.AbstractEventLoop) -> tuple[_CleanUps, set[weakref.ref[Any]]]:
    """The holder of ``loop`` (see :class:`_CleanUps`), armed, and its set of weak references to
    the bodies its callers' tasks await (the core's ``BodyAwait`` adds one while it is awaited,
    and discards it when it ends)."""
    held = _held(loop)
    held._armed(loop)
    return held, held.bodies


#: How far ahead the timer that holds a loop's clean-up tasks is set (seconds; reached, it is
#: set again).
_HOLD_S = 86400.0


class _CleanUps:
    """What one event loop must close if it is closed first: the tasks driving the clean-up of
    bodies abandoned at their deadline (the core's ``BodyAwait`` and a turn's ``Relay``), and,
    weakly, the bodies its callers' tasks await (``BodyAwait``). A loop holds its tasks weakly
    only; these are held by the loop itself, through a timer of its own that never runs them,
    and by nothing else: a loop closed while one is still running (``loop.close()`` alone, or
    one started during ``asyncio.run``'s own shut-down, after it cancelled the tasks left)
    drops that timer and with it this holder, which then abandons each body still awaited
    there (as at its deadline; with no loop running, its clean-up is closed) and closes each
    clean-up task's body (its ``finally`` blocks run as its own task, whatever order the
    collector would finalize what is left in), and drops each task without asyncio's
    'destroyed but it is pending' report. Nothing of a closed loop is kept."""

    __slots__ = ("tasks", "bodies", "handle", "__weakref__")

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.bodies: set[weakref.ref[Any]] = set()
        self.handle: weakref.ref[asyncio.TimerHandle] | None = None

    def hold(self, loop: asyncio.AbstractEventLoop) -> None:
        self.handle = weakref.ref(loop.call_at(loop.time() + _HOLD_S, self.hold, loop))

    def _armed(self, loop: asyncio.AbstractEventLoop) -> None:
        handle = None if self.handle is None else self.handle()
        if handle is None or handle.cancelled():
            self.hold(loop)

    def add(self, task: asyncio.Task[Any]) -> None:
        self._armed(task.get_loop())
        self.tasks.add(task)
        task._log_destroy_pending = False  # type: ignore[attr-defined]
        me = weakref.ref(self)  # the task must not hold this: the loop alone does
        task.add_done_callback(lambda t: None if (held := me()) is None else held.ended(t))

    def ended(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not self.tasks and not self.bodies:
            handle = None if self.handle is None else self.handle()
            if handle is not None:
                handle.cancel()  # the loop lets go of this holder

    def __del__(self) -> None:  # the loop was closed with bodies still awaited or cleaning up
        for ref in list(self.bodies):
            awaiting = ref()
            if awaiting is None:
                continue
            try:
                awaiting.close()
            except BaseException:  # noqa: BLE001 - nothing is left to tell
                pass
        for task in self.tasks:
            try:
                task.get_coro().close()  # type: ignore[union-attr]
            except BaseException:  # noqa: BLE001 - a body that awaits while closed: dropped
                pass


#: Each loop's :class:`_CleanUps`, held weakly (its loop's timer holds it).
_HELD: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[_CleanUps]] = weakref.WeakKeyDictionary()


async def _await_worker(tool: Any, fn: Any, a: Any, b: Any, limit: float | None, name: str) -> Any:
    """``fn(a, b)`` on a worker thread, awaited within ``limit`` seconds (None: no deadline):
    the core's ``WorkerPool.start`` (which waits briefly for the outcome itself when the loop has
    nothing else to run), else the core's awaitable of the outcome it answers (``JobAwait``: the
    deadline's timer entered and left, the job given up when the await ends otherwise)."""
    ready, got = _pool().start(fn, a, b, limit, name)
    return got if ready else await got


#: How a body runs, as the core's call pipeline decides it at each attempt (``STEP_RUN``).
BODY_INLINE, BODY_ASYNC, BODY_WORKER, BODY_TOOL = _core.BODY_INLINE, _core.BODY_ASYNC, _core.BODY_WORKER, _core.BODY_TOOL


class Later:
    """The result of a body that is itself awaitable: ``await later.settle()`` awaits it within
    what is left of the call's deadline (``end`` on ``time.monotonic``, None: none; ``limit``:
    the call's limit in seconds, which a ``ToolTimeoutError`` names) and checks it against the
    output schema. Once the deadline has passed it never starts: ``ToolTimeoutError``."""

    __slots__ = ("tool", "result", "ctx", "limit", "end")

    def __init__(self, tool: Any, result: Any, ctx: Any, limit: float | None, end: float | None) -> None:
        self.tool, self.result, self.ctx, self.limit, self.end = tool, result, ctx, limit, end

    async def settle(self) -> Any:
        if self.end is not None and _monotonic() >= self.end:
            if type(self.result) is _COROUTINE:
                self.result.close()  # never started: no warning that it was never awaited
            raise ToolTimeoutError(self.tool.name, self.limit)  # type: ignore[arg-type]
        result = await BodyAwait(self.result, self.limit, self.tool.name, self.end)
        return self.tool.check_output(result, self.ctx)


def run_inline(tool: Any, args: Any, ctx: Any, limit: float | None, end: float | None) -> Any:
    """Call the sync body of a non-blocking function tool (``BODY_INLINE``) on this thread, from
    a coroutine, as :func:`run_body` does: returns its result as :func:`checked` gives it,
    raises as :func:`run_body` (a ``StopIteration`` as the ``RuntimeError`` a coroutine makes of
    it). Nothing interrupts it; a result past ``end`` (the end of ``limit`` seconds, on
    ``time.monotonic``, as the core computed it when the attempt started) is ``ToolTimeoutError``."""
    if limit is not None and limit <= 0:
        raise ToolTimeoutError(tool.name, limit)  # a call never starts after its deadline
    try:
        result = _call_here(tool, args, ctx)
    except StopIteration as exc:
        raise RuntimeError("coroutine raised StopIteration") from exc
    on_time(end, tool.name, limit)
    return checked(tool, result, ctx, limit, end)


def start_async(tool: Any, args: Any, ctx: Any, limit: float | None) -> tuple[Any, Any]:
    """``(coro, context)``: the coroutine of an ``async`` function tool's body (``BODY_ASYNC``),
    made in ``context``, a copy of the caller's context (a sync prelude before the coroutine is
    the body's too), to await with ``BodyAwait(coro, limit, name, end, context)``; raises as
    :func:`run_body` (``ToolTimeoutError`` when the deadline has passed already: the body never
    starts)."""
    if limit is not None and limit <= 0:
        raise ToolTimeoutError(tool.name, limit)
    within = contextvars.copy_context()
    return within.run(_call, tool, args, ctx), within


def start_in_copy(fn: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """``(awaitable, context)``: ``fn(a, b)`` called in ``context``, a copy of the caller's
    context, where ``BodyAwait(awaitable, ..., context=context)`` steps what it returns (the
    ``run`` of a tool that is no function tool; ``FunctionTool.run``)."""
    within = contextvars.copy_context()
    return within.run(fn, a, b), within


def _call(tool: Any, args: Any, ctx: Any) -> Any:
    """``tool.fn(args, ctx)``; raises what it raised, a ``BaseException`` that is not an
    ``Exception`` as :func:`_carried` makes it."""
    try:
        return tool.fn(args, ctx)
    except Exception:
        raise
    except BaseException as exc:
        raise _carried(exc) from None


def _call_here(tool: Any, args: Any, ctx: Any) -> Any:
    """:func:`_call` on this thread (a non-blocking sync body) in a copy of the caller's
    context."""
    return contextvars.copy_context().run(_call, tool, args, ctx)


def checked(tool: Any, result: Any, ctx: Any, limit: float | None, end: float | None) -> Any:
    """A body's result checked against the tool's output schema, or, when the result is itself
    awaitable, a :class:`Later` to ``await later.settle()`` within what is left of the call's
    deadline (``end`` on ``time.monotonic``, None: none)."""
    if type(result) not in _PLAIN and inspect.isawaitable(result):
        return Later(tool, result, ctx, limit, end)
    return tool.check_output(result, ctx)


async def run_body(tool: Any, args: Any, ctx: Any, limit: float | None, kind: int, end: float | None) -> Any:
    """Run ``tool``'s body once on validated ``args`` on the running loop within ``limit``
    seconds (None: no deadline; ``end``: that deadline on ``time.monotonic``, as the core computed
    it when the attempt started) and return the value. ``kind`` (given by the call pipeline):
    ``BODY_ASYNC``, an ``async`` function, its result checked against the output schema;
    ``BODY_TOOL``, any other tool, its own ``run(args, ctx)``. Raises what the body raised (a
    ``BaseException`` that is not an ``Exception`` comes wrapped in ``BodyFailed``, except
    ``KeyboardInterrupt``/``SystemExit``), ``ToolTimeoutError`` at the deadline. (The core's
    driver runs a sync function tool's body itself: inline, or on the worker pool.)"""
    name = tool.name
    if kind == BODY_TOOL:
        if limit is not None and limit <= 0:
            raise ToolTimeoutError(name, limit)  # a call never starts after its deadline
        awaitable, within = start_in_copy(tool.run, args, ctx)
        return await BodyAwait(awaitable, limit, name, end, within)
    coro, within = start_async(tool, args, ctx, limit)
    result = checked(tool, await BodyAwait(coro, limit, name, end, within), ctx, limit, end)
    return await result.settle() if type(result) is Later else result


async def _as_coro(awaitable: Any) -> Any:
    return await awaitable


async def in_worker(fn: Any, a: Any, b: Any) -> Any:
    """``fn(a, b)`` on a worker thread of the pool, no deadline (``FunctionTool.run``)."""
    return await _await_worker(None, fn, a, b, None, getattr(fn, "__name__", "the tool"))


# ------------------------------------------------------------------ the synchronous caller


def run_sync_in_worker(fn: Any, a: Any, b: Any, limit: float | None, name: str) -> Any:
    """``fn(a, b)`` on a worker thread, waited for from a thread without an event loop, within
    ``limit`` seconds; raises as :func:`run_body` (the core's ``WorkerPool.run``: the job is
    queued once this thread has released the interpreter lock, and this thread waits spinning
    first, at most 50 µs, then parked, waking every 50 ms so that a signal is handled)."""
    return _pool().run(fn, a, b, limit, name)


def run_body_sync(tool: Any, args: Any, ctx: Any, limit: float | None, kind: int) -> Any:
    """:func:`run_body` for a caller without an event loop (``dispatch``): a sync body on the
    worker pool (the caller waits up to ``limit``) or on this thread for a ``non_blocking``
    tool; an async body (or an awaitable a sync body returns) on :func:`background_loop`.
    Raises as :func:`run_body`."""
    name = tool.name
    end = _deadline_end(limit)
    if kind != BODY_WORKER and kind != BODY_INLINE:
        return run_on_background_loop(run_body(tool, args, ctx, limit, kind, end), limit, name)
    if kind == BODY_INLINE:
        value = _call_here(tool, args, ctx)
    else:
        value = _pool().run(tool.fn, args, ctx, limit, name)
    if type(value) not in _PLAIN and inspect.isawaitable(value):
        # Within what is left of the deadline (it never starts past it).
        later = Later(tool, value, ctx, limit, end)
        return run_on_background_loop(later.settle(), limit, name, None if end is None else end - _monotonic())
    on_time(end, name, limit)
    return tool.check_output(value, ctx)


# ------------------------------------------------------------------ a loop for synchronous callers

_LOOP: asyncio.AbstractEventLoop | None = None
_INBOX: Any = None
_LOOP_THREAD: int | None = None
_LOOP_PID: int | None = None
_LOOP_LOCK = threading.Lock()
_LOCK_FORKS = _core.forks()


def _loop_lock() -> threading.Lock:
    """The lock making :func:`background_loop`: a new one in a forked child (the parent's may
    have been held by a thread of the parent making the loop at the moment of the fork, which
    the child does not have: it would never be released there), after any fork (see
    :func:`_pool`)."""
    global _LOOP_LOCK, _LOCK_FORKS
    if _LOCK_FORKS != _core.forks():
        _LOOP_LOCK, _LOCK_FORKS = threading.Lock(), _core.forks()
    return _LOOP_LOCK


class _InboxSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The selector of :func:`background_loop`: before it polls, the loop's thread publishes the
    outcomes of the calls it finished and, when the loop has nothing else to do, spins briefly
    for the next call of a synchronous caller (the core's ``LoopInbox.idle``), which it then
    starts."""

    inbox: Any = None

    def select(self, timeout: float | None = None) -> Any:
        if self.inbox.idle(timeout):
            self.inbox.start()
            timeout = 0
        return super().select(timeout)


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's long-lived event loop for synchronous callers (``dispatch``), on a daemon
    thread: async bodies, async approvers and the clients they bind to it (a Redis connection
    pool) keep working from one call to the next. A call is handed to it through the core's
    ``LoopInbox`` (see :func:`run_on_background_loop`)."""
    global _LOOP, _INBOX, _LOOP_THREAD, _LOOP_PID
    loop = _LOOP
    if loop is not None and _LOOP_PID == os.getpid():
        return loop
    with _loop_lock():
        if _LOOP is None or _LOOP_PID != os.getpid():
            selector = _InboxSelector()
            loop = asyncio.SelectorEventLoop(selector)
            selector.inbox = _INBOX = _core.LoopInbox(loop)
            ready = threading.Event()

            def serve() -> None:
                global _LOOP_THREAD
                asyncio.set_event_loop(loop)
                _LOOP_THREAD = threading.get_ident()
                loop.call_soon(ready.set)
                while True:
                    try:
                        loop.run_forever()
                    except BaseException:  # noqa: BLE001 - a body's KeyboardInterrupt/SystemExit:
                        continue  # it reached its caller through the call's future; keep serving

            threading.Thread(target=serve, name="agentkit-dispatch-loop", daemon=True).start()
            ready.wait()
            _LOOP, _LOOP_PID = loop, os.getpid()
    return _LOOP  # type: ignore[return-value]


def on_background_loop() -> bool:
    return _LOOP_THREAD is not None and threading.get_ident() == _LOOP_THREAD and _LOOP_PID == os.getpid()


#: How long past a call's deadline a synchronous caller waits for the loop to answer before it
#: answers ``timeout`` itself (an async body that blocks the loop cannot be cancelled).
_LOOP_GRACE_S = 0.25


def _run_private(coro: Any, _: Any) -> Any:
    return asyncio.run(coro)


def run_on_background_loop(coro: Any, limit: float | None = None, name: str = "", left: float | None = None) -> Any:
    """Run ``coro`` on :func:`background_loop` and wait for its result (this thread blocks, with
    the interpreter lock released: the core's ``LoopInbox.call``, which hands the coroutine to
    the loop's thread and its outcome back spinning briefly on both sides before either parks).
    With ``limit`` (seconds; ``left``: what is left of it, if less), a loop that has not answered
    that plus a quarter second later (an async body blocking it) is not waited for:
    ``ToolTimeoutError(name, limit)``, the coroutine cancelled. Called from that loop's own
    thread (a tool running there called ``dispatch``), ``coro`` runs on a loop of its own in a
    worker thread instead of waiting forever."""
    wait = limit if left is None else max(left, 0.0)
    if on_background_loop():
        # A tool running on that loop called dispatch(): the loop cannot wait for itself, so the
        # coroutine runs on a loop of its own in a worker thread (this loop waits meanwhile, as it
        # does for a sync body the tool calls).
        try:
            return run_sync_in_worker(_run_private, coro, None, None if wait is None else wait + _LOOP_GRACE_S, name)
        except ToolTimeoutError:
            raise ToolTimeoutError(name, limit) from None  # type: ignore[arg-type]
    if _LOOP_PID != os.getpid():
        background_loop()  # and its inbox
    done, value = _INBOX.call(coro, None if wait is None else wait + _LOOP_GRACE_S)
    if not done:
        raise ToolTimeoutError(name, limit) from None  # type: ignore[arg-type]
    return value
