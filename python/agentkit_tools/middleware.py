"""The Invoker's middleware chain: the rules every tool call goes through (see
``docs/middleware.md``).

Each constructor returns a ``Middleware``; an ``Invoker`` composes them outermost first around
the call of the tool body. The default chain is ``[audit(), approval(), repeat_guard(),
idempotency(), retry(), timeout()]``; ``egress(allow=...)`` is added only when configured.

Every middleware is an ``async`` handler ``(call: ToolCall) -> envelope`` that calls the next
one or answers itself (a refusal, a cached result). The decisions and the shared state (argument
hashes, repeat counts, the idempotency cache, backoff, circuit breakers, the host allow-list,
the refusal messages) live in the Rust core (``agentkit_tools._core``); this module only awaits.

Envelopes of the refusals (``{"ok": False, "error": {...}}``):

- ``approval_required`` (``tool``): the tool needs the user's approval and was not run;
- ``repeated_call`` (``tool``, ``count``): the same call for the ``limit``-th time in a
  conversation; the model is told to stop and explain the problem to the user;
- ``egress_denied`` (``tool``, ``host`` when the URL has one, ``allowed``);
- ``circuit_open`` (``tool``, ``retriable: False``): the tool's circuit breaker is open;
- ``backend_saturated`` (``retriable: False``): every worker thread is held by sync calls that
  overran their deadline, so the call was not run.

Effects are per call: a tool may implement ``is_read_only_call(args) -> bool`` (``args``: the
validated arguments) to say that one particular call changes nothing (``FileTool``: ``view``).
Such a call is never deduplicated, does not reset repeat counts and may be retried. Without the
method the tool's ``side_effecting`` flag decides.

A successful result served from the idempotency cache is ``{"ok": True, "value": <first
result>, "elapsed_ms": ..., "deduplicated": True}``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import time
from typing import Any, Awaitable, Callable, Iterable

from . import _core
from .context import _is_approved

__all__ = [
    "Middleware",
    "ToolCall",
    "Handler",
    "approval",
    "audit",
    "default_chain",
    "egress",
    "idempotency",
    "repeat_guard",
    "retry",
    "timeout",
]

_log = logging.getLogger("agentkit_tools.audit")
_mw_log = logging.getLogger("agentkit_tools.middleware")

#: The decisions of an audit record for refusals.
_REFUSALS = frozenset({_core.codes.APPROVAL_REQUIRED, _core.codes.REPEATED_CALL, _core.codes.EGRESS_DENIED})


class ToolCall:
    """One call travelling down the chain (built by the Invoker; read by middleware).

    ``call`` is the provider's call dict, ``call_id`` its id, ``name`` the tool name,
    ``tool`` the registered tool (None when the call was rejected before reaching a tool: then
    ``rejection`` holds the ``unknown_tool``/``invalid_arguments``/``invalid_call`` envelope),
    ``args`` the validated arguments (deep-frozen), ``core`` the tool's compiled core, ``ctx``
    the run context, ``scope`` the repeat/idempotency scope (``ctx.run_id`` or the Invoker's
    default), ``attempts`` how many times the body was started, ``exc`` the exception of the last
    failed attempt, ``timeout_s`` the deadline of one attempt (set by ``timeout``; None: none).
    ``canonical`` and ``args_hash`` are computed on first use; ``read_only`` says whether this
    call changes nothing (per call, see :func:`call_is_read_only`).
    """

    __slots__ = (
        "call", "call_id", "name", "tool", "args", "raw_args", "core", "ctx", "scope", "rejection",
        "attempts", "exc", "timeout_s", "_canonical", "_hash", "_read_only",
    )

    def __init__(
        self,
        call: Any,
        call_id: Any,
        name: str | None,
        tool: Any,
        args: Any,
        raw_args: Any,
        core: Any,
        ctx: Any,
        scope: str,
        rejection: dict[str, Any] | None,
    ) -> None:
        self.call = call
        self.call_id = call_id
        self.name = name
        self.tool = tool
        self.args = args
        self.raw_args = raw_args
        self.core = core
        self.ctx = ctx
        self.scope = scope
        self.rejection = rejection
        self.attempts = 0
        self.exc: BaseException | None = None
        self.timeout_s: float | None = None
        self._canonical: str | None = None
        self._hash: str | None = None
        self._read_only: bool | None = None

    @property
    def read_only(self) -> bool:
        """Whether this call changes nothing (see :func:`call_is_read_only`)."""
        ro = self._read_only
        if ro is None:
            ro = self._read_only = call_is_read_only(self.tool, self.args)
        return ro

    def _digest(self) -> None:
        if self._canonical is not None:  # given by the Invoker: only the hash is missing
            self._hash = _core.args_hash(self._canonical)
            return
        source = self.args if self.tool is not None else self.raw_args
        try:
            self._canonical, self._hash = _core.canonical_args(source)
        except Exception:
            try:  # not JSON (a rejected call's raw arguments): its repr stands for it
                text = repr(source).encode("utf-8", "backslashreplace").decode("utf-8")
            except Exception:  # nested too deeply to print, a broken __repr__
                text = f"<unreadable {type(source).__qualname__}>"
            self._canonical, self._hash = _core.canonical_args(text)

    @property
    def canonical(self) -> str:
        """The arguments as canonical JSON text (sorted keys, no whitespace)."""
        if self._canonical is None:
            self._digest()
        return self._canonical  # type: ignore[return-value]

    @property
    def args_hash(self) -> str:
        """The first 16 hex characters of the SHA-256 of ``canonical``."""
        if self._hash is None:
            self._digest()
        return self._hash  # type: ignore[return-value]


Handler = Callable[[ToolCall], Awaitable[dict[str, Any]]]


def call_is_read_only(tool: Any, args: Any) -> bool:
    """Whether one call of ``tool`` with the validated ``args`` changes nothing.

    A tool may decide per call with a method ``is_read_only_call(args) -> bool`` (``FileTool``:
    its ``view`` command); without one, or when it raises or answers anything but a bool (an
    ``async`` method included), the tool's ``side_effecting`` flag decides (fail safe). A read-only call is never deduplicated, does not reset repeat counts and may be
    retried."""
    if tool is None:
        return True
    hook = getattr(tool, "is_read_only_call", None)
    if hook is not None:
        try:
            answer = hook(args)
        except Exception:
            _mw_log.warning("%r.is_read_only_call failed; its side_effecting flag decides", tool, exc_info=True)
        else:
            if answer is True or answer is False:
                return answer
            close = getattr(answer, "close", None)
            if inspect.iscoroutine(answer) and close is not None:
                close()  # an async hook: its answer cannot be waited for here
            _mw_log.warning(
                "%r.is_read_only_call returned %r, not a bool; its side_effecting flag decides", tool, type(answer)
            )
    return not getattr(tool, "side_effecting", False)


def effects_declared(tool: Any) -> bool:
    """Whether ``tool`` says if it changes the world (False for ``from_callable``/``from_tools``
    on a plain function without a declaration)."""
    return getattr(tool, "effects_declared", True) is not False


class Middleware:
    """Base of the middleware: ``wrap(invoker, next)`` returns the handler for one Invoker.

    The middleware object holds configuration only; per-Invoker state lives in
    ``invoker.state`` (a ``_core.MiddlewareState``), so one middleware object may serve many
    Invokers.
    """

    name = "middleware"

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}()"


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


# ------------------------------------------------------------------ audit

_OTEL: Any = None


def _otel() -> Any:
    """``(tracer, Status, StatusCode)`` when opentelemetry-api is installed and a tracer provider
    is configured, else False. Without a provider every span would be a no-op that still costs
    more than the rest of the chain, so none is started."""
    global _OTEL
    if _OTEL is None:
        try:
            from opentelemetry import trace
            from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Status, StatusCode

            _OTEL = (
                trace,
                (NoOpTracerProvider, ProxyTracerProvider),
                trace.get_tracer("agentkit_tools"),
                Status,
                StatusCode,
                # the provider named by the environment is installed on first lookup
                "OTEL_PYTHON_TRACER_PROVIDER" in os.environ,
            )
        except ImportError:
            _OTEL = False
    if not _OTEL:
        return False
    trace, no_ops, tracer, status, status_code, from_env = _OTEL
    # Fast path: no provider set yet (the global is only ever set once) means no spans.
    if getattr(trace, "_TRACER_PROVIDER", False) is None and not from_env:
        return False
    if isinstance(trace.get_tracer_provider(), no_ops):
        return False
    return tracer, status, status_code


def _emit(trace: Any, name: str, attributes: dict[str, Any]) -> None:
    emit = getattr(trace, "event", None) or getattr(trace, "add_event", None) or trace
    emit(name, attributes)


class _Audit(Middleware):
    name = "audit"

    def __init__(self, sink: Callable[[dict[str, Any]], Any] | None) -> None:
        self.sink = sink

    def observed(self, ctx: Any) -> bool:
        """Whether a record of a call in ``ctx`` would go anywhere (a sink, the DEBUG log,
        ``ctx.trace`` or an OpenTelemetry span). An unobserved call needs no record at all."""
        return (
            self.sink is not None
            or _log.isEnabledFor(logging.DEBUG)
            or (ctx is not None and getattr(ctx, "trace", None) is not None)
            or bool(_otel())
        )

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        async def record(call: ToolCall, outcome: str, decision: str, started: float) -> dict[str, Any]:
            sink = self.sink  # read live, as observed() does: a sink set later is not skipped
            rec = {
                "tool": call.name,
                "call_id": call.call_id,
                "args_hash": call.args_hash,
                "outcome": outcome,
                "attempts": call.attempts,
                "elapsed_ms": round((time.perf_counter() - started) * 1000.0, 3),
                "decision": decision,
            }
            if _log.isEnabledFor(logging.DEBUG):
                _log.debug(
                    "tool call %s %s: %s after %d attempt(s) in %.3f ms",
                    rec["tool"], rec["decision"], rec["outcome"], rec["attempts"], rec["elapsed_ms"],
                    extra={"audit": rec},
                )
            if sink is not None:
                try:
                    await _maybe_await(sink(rec))
                except Exception:
                    _mw_log.exception("audit sink %r failed (the call's result is unaffected)", sink)
            trace = getattr(call.ctx, "trace", None)
            if trace is not None:
                try:
                    _emit(trace, "tool.call", rec)
                except Exception:
                    _mw_log.exception("ctx.trace failed (the call's result is unaffected)")
            return rec

        async def run(call: ToolCall, started: float) -> tuple[dict[str, Any], dict[str, Any]]:
            try:
                env = await nxt(call)
            except asyncio.CancelledError:
                await asyncio.shield(record(call, "cancelled", "failed", started))
                raise
            if env.get("ok"):
                outcome = "ok"
                decision = "deduplicated" if env.get("deduplicated") else "executed"
            else:
                outcome = str(env.get("error", {}).get("code", _core.codes.INTERNAL_ERROR))
                decision = "refused" if outcome in _REFUSALS else "failed"
            return env, await record(call, outcome, decision, started)

        async def handle(call: ToolCall) -> dict[str, Any]:
            if not self.observed(call.ctx):
                return await nxt(call)
            started = time.perf_counter()
            otel = _otel()
            if not otel:
                return (await run(call, started))[0]
            tracer, status, status_code = otel
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name or ""}
            if call.call_id is not None:
                attributes["gen_ai.tool.call.id"] = str(call.call_id)
            with tracer.start_as_current_span(
                "execute_tool", attributes=attributes, record_exception=False, set_status_on_exception=False
            ) as span:
                env, rec = await run(call, started)
                span.set_attributes(
                    {
                        "agentkit.tool.args_hash": rec["args_hash"],
                        "agentkit.tool.outcome": rec["outcome"],
                        "agentkit.tool.decision": rec["decision"],
                        "agentkit.tool.attempts": rec["attempts"],
                    }
                )
                if not env.get("ok"):
                    span.set_attribute("error.type", rec["outcome"])
                    span.set_status(status(status_code.ERROR, rec["outcome"]))
            return env

        return handle


def audit(sink: Callable[[dict[str, Any]], Any] | None = None) -> Middleware:
    """One audit record per call, outermost in the default chain so refused and
    deduplicated calls are recorded too.

    The record is ``{"tool", "call_id", "args_hash", "outcome", "attempts", "elapsed_ms",
    "decision"}``: ``args_hash`` the first 16 hex characters of the SHA-256 of the canonical JSON
    arguments; ``outcome`` ``"ok"`` or the error code (``"cancelled"`` when the caller cancelled);
    ``attempts`` how many times the body started; ``elapsed_ms`` the whole call in milliseconds;
    ``decision`` ``executed`` / ``deduplicated`` / ``refused`` (approval, repeat, egress) /
    ``failed``. It goes to ``sink(record)`` (sync or async; a failing sink is logged, never
    breaks the call), to logger ``agentkit_tools.audit`` at DEBUG (``extra={"audit": record}``),
    to ``ctx.trace`` as a ``"tool.call"`` event, and, when opentelemetry-api is installed, an
    ``execute_tool`` span (attributes ``gen_ai.operation.name``, ``gen_ai.tool.name``,
    ``gen_ai.tool.call.id``, ``agentkit.tool.*``; status ERROR and ``error.type`` on failure)
    around the call.
    """
    return _Audit(sink)


# ------------------------------------------------------------------ approval

class _Approval(Middleware):
    name = "approval"

    def __init__(self, approver: Callable[..., Any] | None) -> None:
        self.approver = approver

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        approver = self.approver

        async def handle(call: ToolCall) -> dict[str, Any]:
            tool = call.tool
            if tool is None or not getattr(tool, "requires_approval", False):
                return await nxt(call)
            if host_approved(call.call, call.ctx, call.name, call.call_id):  # type: ignore[arg-type]
                return await nxt(call)
            if approver is not None:
                try:
                    # Only the boolean True approves (like the call's "approved" key): a truthy
                    # answer such as {"approved": False} or "no" must not fail open.
                    allowed = await _maybe_await(approver(tool, call.args, call.ctx)) is True
                except Exception:
                    _mw_log.exception("approver %r failed: the call of %s is refused", approver, call.name)
                    allowed = False
                if allowed:
                    return await nxt(call)
            return _core.approval_envelope(call.name, call.canonical)  # type: ignore[no-any-return]

        return handle


def host_approved(call: Any, ctx: Any, name: str, call_id: Any) -> bool:
    """Whether the host approved this call already: the call dict's ``"approved": True`` (a key
    of the call, never of the model's arguments) or ``ctx.approvals`` naming the tool or call id."""
    return (isinstance(call, dict) and call.get("approved") is True) or _is_approved(ctx, name, call_id)


def approval(approver: Callable[..., Any] | None = None) -> Middleware:
    """The approval gate: a tool with ``requires_approval=True`` runs only when the host marked
    the call ``"approved": True`` (a key of the call dict, never of the model's arguments), when
    ``ctx.approvals`` (a collection, not a bare string) contains the tool name or the call id, or
    when ``approver(tool, args, ctx)`` (sync or async) returns ``True`` (the boolean: any other
    value, truthy or not, refuses). ``dispatch(..., approver=...)`` applies the same gate.
    Otherwise the tool is not run and the envelope is
    ``approval_required`` naming the tool and its arguments (what to ask the user). An approver
    that raises refuses (logged)."""
    return _Approval(approver)


# ------------------------------------------------------------------ repeat guard

class _RepeatGuard(Middleware):
    name = "repeat_guard"

    def __init__(self, limit: int) -> None:
        # The core counts calls in 32 bits.
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 2**32 - 1:
            raise ValueError(f"repeat_guard: limit must be an integer from 1 to 4294967295, got {limit!r}")
        self.limit = limit

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        state, limit = invoker.state, self.limit

        async def handle(call: ToolCall) -> dict[str, Any]:
            name = call.name
            if name is None:  # not a tool call at all (no name): nothing to count
                return await nxt(call)
            scope = call.scope
            refused = state.repeat_check(scope, name, call.canonical, limit)
            if refused is not None:
                return refused  # type: ignore[no-any-return]
            env = await nxt(call)
            if env.get("ok") and call.tool is not None and "deduplicated" not in env and not call.read_only:
                state.repeat_reset(scope)  # the world changed: reading it again is legitimate
            return env

        return handle

    def __repr__(self) -> str:
        return f"repeat_guard(limit={self.limit})"


def repeat_guard(limit: int = 3) -> Middleware:
    """Repeat detection per conversation (scope ``ctx.run_id``): the ``limit``-th identical call
    (same tool name, same canonical arguments; the third by default) and every later one is not
    run and returns ``repeated_call``, telling the model to stop and explain the problem to the
    user. Identical calls count whatever their outcome — an unknown tool or invalid arguments
    sent again and again is the loop models get stuck in. A side-effecting call that succeeds
    resets every count of the conversation (the world changed, so reading it again is
    legitimate); a read-only call (see ``is_read_only_call``) does not. The counts are bounded:
    the last 256 distinct calls per conversation and 4,096 conversations per Invoker (the least
    recently used is forgotten first); ``Invoker.forget(run_id)`` drops one at once."""
    return _RepeatGuard(limit)


# ------------------------------------------------------------------ idempotency

class _SharedClaim:
    """The claim of one side-effecting call in a shared store, so that across workers it runs once.

    Records (JSON text) under ``agentkit-tools:idem:<sha256 of scope, name, arguments>``:
    ``{"s": "running", "owner", "until"}`` while a worker runs it (``until``: the lease's end,
    Unix seconds), ``{"s": "done", "value"}`` after a success, ``{"s": "free"}`` after a failure.
    The claim is taken with the store's ``compare_and_set``, so two workers cannot both take it;
    a second worker polls until the first one's result is there (or its lease ran out: a crashed
    worker, then it claims the call itself). The conversation's open window is the key under
    ``agentkit-tools:idem-window:<sha256 of scope>``: a finished result is reused only while it
    is the last side-effecting success of the conversation."""

    POLL_S = 0.05

    def __init__(self, store: Any, scope: str, name: str, canonical: str, lease_s: float) -> None:
        self.store = store
        self.key = _core.idempotency_store_key(scope, name, canonical)
        self.window = "agentkit-tools:idem-window:" + _core.idempotency_store_key(scope, "", "")[20:]
        self.lease_s = lease_s
        self.mine: str | None = None

    async def acquire(self) -> tuple[bool, Any]:
        """``(True, value)`` for a result to reuse, ``(False, None)`` once claimed."""
        store = self.store
        text = await store.get(self.key)
        while True:
            rec = _load(text)
            state = rec.get("s") if isinstance(rec, dict) else None
            if state == "done" and await store.get(self.window) == self.key:
                return True, rec.get("value")  # type: ignore[union-attr]
            if state == "running" and float(rec.get("until", 0)) > time.time():  # type: ignore[union-attr]
                await asyncio.sleep(self.POLL_S)  # another worker runs it: wait for its result
                text = await store.get(self.key)
                continue
            mine = json.dumps({"s": "running", "owner": os.urandom(8).hex(), "until": time.time() + self.lease_s})
            if await store.compare_and_set(self.key, text, mine):
                self.mine = mine
                return False, None
            text = await store.get(self.key)

    async def finish(self, env: dict[str, Any]) -> None:
        store, mine = self.store, self.mine
        if mine is None:
            return
        if env.get("ok"):
            try:
                done = json.dumps(
                    {"s": "done", "value": env.get("value")}, ensure_ascii=False, separators=(",", ":"), default=_json_default
                )
            except (TypeError, ValueError, RecursionError):
                _mw_log.warning("result of %s cannot be stored as JSON; not shared for deduplication", self.key)
            else:
                # The window first: a worker waiting for this result must find it open once it
                # sees the result.
                await store.set(self.window, self.key)
                await store.compare_and_set(self.key, mine, done)
                return
        await store.compare_and_set(self.key, mine, '{"s":"free"}')


async def _window_open(store: Any, scope: str, name: str, canonical: str) -> bool:
    """Whether the shared store still has this call as its conversation's open window."""
    claim = _SharedClaim(store, scope, name, canonical, 1.0)
    try:
        return bool(await store.get(claim.window) == claim.key)
    except Exception:
        _mw_log.warning("idempotency store failed reading the window of %s", name, exc_info=True)
        return False


def _json_default(value: Any) -> Any:
    """JSON data for a result that is not plain JSON (a dataclass, a pydantic model, a
    datetime): what another worker reads back is this data."""
    try:
        from pydantic_core import to_jsonable_python
    except ImportError:
        to_jsonable_python = None
    if to_jsonable_python is not None:
        return to_jsonable_python(value, fallback=str)
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    isoformat = getattr(value, "isoformat", None)
    return isoformat() if callable(isoformat) else str(value)


def _load(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


class _Idempotency(Middleware):
    name = "idempotency"

    def __init__(self, store: Any, lease_s: float = 60.0) -> None:
        if store is not None and not all(
            callable(getattr(store, m, None)) for m in ("get", "set", "compare_and_set")
        ):
            raise TypeError(
                f"idempotency: store must have async get(key), set(key, value) and "
                f"compare_and_set(key, expected, value) (a StorePort), got {store!r}"
            )
        if not lease_s > 0:
            raise ValueError(f"idempotency: lease_s must be > 0 seconds, got {lease_s}")
        self.store = store
        self.lease_s = lease_s

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        state, store, lease_s = invoker.state, self.store, self.lease_s

        def hit(value: Any, started: float) -> dict[str, Any]:
            return _core.ok_envelope(value, (time.perf_counter() - started) * 1000.0, True)  # type: ignore[no-any-return]

        async def handle(call: ToolCall) -> dict[str, Any]:
            tool = call.tool
            if tool is None or call.read_only:
                return await nxt(call)
            started = time.perf_counter()
            scope, name, canonical = call.scope, call.name, call.canonical
            loop = asyncio.get_running_loop()
            while True:
                waiter = loop.create_future()
                claim, found = state.idem_claim(scope, name, canonical, waiter)
                if claim == 1:
                    if store is None or await _window_open(store, scope, name, canonical):
                        return hit(found, started)
                    state.idem_close(scope)  # another worker's side effect closed it: look again
                    continue
                if claim == 0:
                    break
                await asyncio.shield(found)  # an identical call is running: wait, then look again
            env: dict[str, Any] | None = None
            cached = False
            try:
                shared = None
                if store is not None:
                    lease = max(lease_s, 3 * (getattr(tool, "timeout_s", None) or 10.0) + 5.0)
                    shared = _SharedClaim(store, scope, name, canonical, lease)
                    try:
                        found_done, value = await shared.acquire()
                    except Exception:
                        _mw_log.warning("idempotency store failed on %s; running the tool", name, exc_info=True)
                        shared = None
                    else:
                        if found_done:
                            cached = True
                            env = hit(value, started)
                            return env
                env = await nxt(call)
                if shared is not None:
                    try:
                        await shared.finish(env)
                    except Exception:
                        _mw_log.warning("idempotency store failed recording %s", name, exc_info=True)
            finally:
                if env is not None and env.get("ok") and not cached:
                    # Held here too (this worker's repeats read back the object the tool returned,
                    # the store's window permitting); other workers read the stored JSON.
                    woken = state.idem_complete(scope, name, canonical, env.get("value"))
                else:
                    woken = state.idem_release(scope, name, canonical)
                if woken is not None and not woken.done():
                    woken.set_result(None)
            return env

        return handle


def idempotency(store: Any = None, *, lease_s: float = 60.0) -> Middleware:
    """Deduplication of side-effecting calls on (conversation, tool name, canonical arguments).

    A repeat of a call that succeeded returns the first result with ``"deduplicated": True``
    and the tool is not run — while that call's window is open: it closes when another
    side-effecting call succeeds in the same conversation (the world changed, so the same call
    now means a new action). What the model reads of a deduplicated result starts with one
    sentence saying that this exact call already ran and was not run again. Identical calls in
    flight at once run the tool once (the others wait for its result). Failures are never
    cached. Read-only calls pass through, including read-only calls of a side-effecting tool
    (``is_read_only_call``).

    ``store=None``: in-process, held by the Invoker (the result object itself). A StorePort
    (async ``get``, ``set``, ``compare_and_set``; Redis or Postgres for many workers) shares the
    deduplication between processes: the call is claimed atomically with ``compare_and_set``
    before the tool runs, so of two workers receiving the same call one runs it and the other
    waits for its result (both return it); the claim is a lease of ``lease_s`` seconds (at least
    three times the tool's ``timeout_s`` plus 5), after which a crashed worker's claim is taken
    over. Results are stored as JSON (a result that is not JSON is not shared); a failing store
    is logged and the tool runs. Raises ``TypeError`` for a store without those methods,
    ``ValueError`` for ``lease_s <= 0``."""
    return _Idempotency(store, lease_s)


# ------------------------------------------------------------------ retry

def retry_safe(tool: Any, args: Any = None) -> bool:
    """Whether running this call of ``tool`` again is safe: the tool is declared idempotent, or
    the call is read-only (``is_read_only_call(args)``, else the tool's flags) and the tool
    declared its effects (a ``from_callable`` tool without a declaration is never retried)."""
    if getattr(tool, "idempotent", False):
        return True
    return effects_declared(tool) and call_is_read_only(tool, args)


class _Retry(Middleware):
    name = "retry"

    def __init__(
        self,
        max_attempts: int,
        base_s: float,
        cap_s: float,
        transient: Iterable[type[BaseException]],
        sleep: Callable[[float], Awaitable[Any]] | None,
        breaker_threshold: int | None,
        breaker_cooldown_s: float,
    ) -> None:
        transient = tuple(transient)
        for t in transient:
            if not (isinstance(t, type) and issubclass(t, BaseException)):
                raise TypeError(f"retry: transient must be exception classes, got {t!r}")
        self.policy = _core.RetryPolicy(max_attempts, base_s, cap_s, transient)
        self.transient = transient
        self.sleep = sleep
        if breaker_threshold is not None and breaker_threshold < 1:
            raise ValueError(f"retry: breaker_threshold must be at least 1, got {breaker_threshold}")
        self.breaker_threshold = breaker_threshold
        self.breaker_cooldown_s = breaker_cooldown_s

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        state, policy = invoker.state, self.policy
        sleep = self.sleep if self.sleep is not None else asyncio.sleep
        threshold, cooldown = self.breaker_threshold, self.breaker_cooldown_s

        async def handle(call: ToolCall) -> dict[str, Any]:
            tool = call.tool
            if tool is None:
                return await nxt(call)
            safe = bool(getattr(tool, "idempotent", False)) or (effects_declared(tool) and call.read_only)
            attempt = 0
            while True:
                if threshold is not None:
                    refused = state.breaker_admit(call.name, threshold, cooldown)
                    if refused is not None:
                        return refused  # type: ignore[no-any-return]
                attempt += 1
                call.exc = None
                env = await nxt(call)
                if env.get("ok"):
                    if threshold is not None:
                        state.breaker_record(call.name, "ok")
                    return env
                if call.exc is None:  # refused by an inner middleware: nothing to retry
                    if threshold is not None:
                        state.breaker_record(call.name, "neutral")
                    return env
                kind, delay = policy.decide(call.exc, safe, attempt)
                if threshold is not None and state.breaker_record(call.name, kind):
                    return env
                if delay is None:
                    return env
                await sleep(delay)

        return handle

    def __repr__(self) -> str:
        return f"retry(max_attempts={self.policy.max_attempts})"


def retry(
    max_attempts: int = 3,
    base_s: float = 0.5,
    cap_s: float = 30.0,
    transient: Iterable[type[BaseException]] = (),
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    *,
    breaker_threshold: int | None = None,
    breaker_cooldown_s: float = 30.0,
) -> Middleware:
    """Retry of transient failures.

    Retried: ``ToolError(retriable=True)``, ``ConnectionError``, a ``TimeoutError`` raised by the
    body, and the ``transient`` classes, decided by exception type, never by message text. Never
    retried: our own deadline expiry (``ToolTimeoutError``: the model is told the backend is
    slow), argument and output-shape errors, any other exception. Only calls that are read-only
    (``is_read_only_call``, else the tool's flags; never a tool whose effects were not declared)
    or of an ``idempotent`` tool are retried. At most ``max_attempts`` attempts (the first included); before
    attempt n+1 it waits a full-jitter delay, uniform in ``[0, min(cap_s, base_s * 2**(n-1)))``
    seconds, through ``sleep`` (default ``asyncio.sleep``; inject one in tests). The audit
    record's ``attempts`` counts the attempts; the envelope is the last attempt's.

    ``breaker_threshold``: a per-tool circuit breaker (per Invoker). After that many consecutive
    failures that say the backend is unhealthy (transient errors and deadline expiries), calls
    of the tool are refused with ``circuit_open`` for ``breaker_cooldown_s`` seconds; then one
    trial call runs: success closes the circuit, failure reopens it. Raises ``ValueError`` for
    ``max_attempts < 1``, negative delays or ``breaker_threshold < 1``; ``TypeError`` when
    ``transient`` holds something other than exception classes.
    """
    return _Retry(max_attempts, base_s, cap_s, transient, sleep, breaker_threshold, breaker_cooldown_s)


# ------------------------------------------------------------------ timeout

class _Timeout(Middleware):
    name = "timeout"

    def __init__(self, default_s: float) -> None:
        if not default_s > 0:
            raise ValueError(f"timeout: default_s must be > 0 seconds, got {default_s}")
        self.default_s = default_s

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        async def handle(call: ToolCall) -> dict[str, Any]:
            if call.tool is not None:
                call.timeout_s = self.limit(call.tool, call.ctx)
            return await nxt(call)

        return handle

    def limit(self, tool: Any, ctx: Any) -> float:
        """Seconds one attempt of ``tool`` may take: its ``timeout_s``, else ``default_s``, cut to
        the time left before ``ctx.deadline`` (never below 0)."""
        limit: float = getattr(tool, "timeout_s", None) or self.default_s
        deadline = getattr(ctx, "deadline", None)
        if deadline is not None:
            limit = max(0.0, min(limit, deadline - time.monotonic()))
        return limit

    def __repr__(self) -> str:
        return f"timeout(default_s={self.default_s})"


def timeout(default_s: float = 10.0) -> Middleware:
    """A deadline for each attempt: the tool's ``timeout_s``, else ``default_s`` seconds, cut to
    the time left before ``ctx.deadline`` when the context has one. On expiry the envelope is
    ``timeout`` (never retried). An async body is cancelled (it sees ``CancelledError`` at its
    current ``await``). A sync body runs in a worker thread that Python cannot kill: the wait
    for it is bounded, the call returns ``timeout`` on time, and the thread runs on until the
    function returns by itself (its result is discarded). Tools run inline (``Invoker(...,
    inline=...)``) block the event loop and cannot be interrupted (a result they return after
    the deadline is still reported as ``timeout``). The ``timeout`` envelope comes at the
    deadline, not after the body's cancellation clean-up; a call past its deadline is never
    reported as a success; a thread left running never keeps the interpreter from exiting."""
    return _Timeout(default_s)


# ------------------------------------------------------------------ egress

class _Egress(Middleware):
    name = "egress"

    def __init__(self, allow: Iterable[str]) -> None:
        if isinstance(allow, str):
            allow = (allow,)
        self.policy = _core.EgressPolicy(list(allow))

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        policy = self.policy

        async def handle(call: ToolCall) -> dict[str, Any]:
            tool = call.tool
            url_arg = getattr(tool, "url_arg", None) if tool is not None else None
            if url_arg:
                value = call.args.get(url_arg)
                if value is not None:
                    refused = policy.check(call.name, url_arg, value)
                    if refused is not None:
                        return refused  # type: ignore[no-any-return]
            return await nxt(call)

        return handle

    def __repr__(self) -> str:
        return f"egress(allow={tuple(self.policy.allowed)!r})"


def egress(allow: Iterable[str] = ()) -> Middleware:
    """A host allow-list for tools with ``url_arg``: before the call, the host of
    ``args[url_arg]`` must be covered by ``allow``, else the tool is not run and the envelope is
    ``egress_denied``. An entry covers itself and its subdomains (``"example.com"`` allows
    ``api.example.com``, never ``example.com.evil.test``); ``"*.example.com"`` covers only the
    subdomains; an IP address covers exactly itself. Case-insensitive; ports ignored. Private,
    loopback and link-local addresses and ``localhost`` (``10.0.0.1``, ``127.0.0.1``,
    ``169.254.169.254``, ``::1``, and numeric forms such as ``2130706433``) are refused unless
    an entry names them exactly. A value that is not an absolute URL with a host (or whose
    host a URL parser would rewrite: percent-escapes, non-ASCII) is denied too. The host is read
    the way WHATWG URL parsers read it (userinfo dropped; ``\\`` ends the authority). An empty
    ``allow`` denies every URL. Tools without ``url_arg`` pass through."""
    return _Egress(allow)


def default_chain() -> list[Middleware]:
    """``[audit(), approval(), repeat_guard(), idempotency(), retry(), timeout()]``."""
    return [audit(), approval(), repeat_guard(), idempotency(), retry(), timeout()]
