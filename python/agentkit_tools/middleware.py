"""The Invoker's middleware: the rules every tool call goes through (see ``docs/middleware.md``
for each rule, its envelopes and its limits).

The built-in constructors return configuration: an ``Invoker`` compiles consecutive built-ins
into one call pipeline in the Rust core (``_core.Pipeline``), which makes every decision and
keeps the state (repeat counts, the idempotency window, circuit breakers); the Invoker performs
the steps it asks for. A ``Middleware`` subclass of your own stays an extension point anywhere
in the chain: its ``wrap(invoker, next)`` returns an ``async`` handler ``(call: ToolCall) ->
envelope`` that calls the next one or answers itself.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Awaitable, Callable, Iterable

from . import _core
from .tools import MAX_TIMEOUT_S

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

_mw_log = logging.getLogger("agentkit_tools.middleware")


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
        "_abort",  # set by the core while the call is aborted: the bound its segments share
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
        else:
            self._canonical, self._hash = _core.canonical_args(self.args if self.tool is not None else self.raw_args)

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


class Middleware:
    """Base of the middleware: ``wrap(invoker, next)`` returns the handler for one Invoker.

    The middleware object holds configuration only; per-Invoker state lives in the Invoker, so
    one middleware object may serve many Invokers.
    """

    name = "middleware"

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}()"


class _Builtin(Middleware):
    """A built-in rule: configuration the Invoker compiles into its call pipeline. Wrapped on
    its own (a subclass that overrides ``wrap`` and calls this one) it is a pipeline of one rule."""

    def wrap(self, invoker: Any, nxt: Handler) -> Handler:
        return invoker._segment([self], nxt)  # type: ignore[no-any-return]


# ------------------------------------------------------------------ audit

class _Audit(_Builtin):
    name = "audit"

    def __init__(self, sink: Callable[[dict[str, Any]], Any] | None) -> None:
        self.sink = sink
        # Asked now, the core imports opentelemetry (when installed) now, not on the first call:
        # an import while a call is observed, in a daemon thread of a process that is exiting,
        # aborted the process (the thread is unwound through the core).
        self.observed_level(None)

    def observed_level(self, ctx: Any) -> int:
        """0: nobody reads the record; 1: a record (a sink, the ``agentkit_tools.audit`` log at
        DEBUG, ``ctx.trace``); 2: a record and a span (a tracer provider is installed). The
        pipeline asks the same per call, so a sink, log level or tracer provider set later is
        followed."""
        return _core.observed_level(self, ctx)  # type: ignore[no-any-return]


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

    A call aborted by its caller's cancellation (or a ``KeyboardInterrupt``/``SystemExit`` from
    its body) waits for the awaitable an async sink returns, and for the release of its
    idempotency claim, at most 1 s from the cancellation, for all of them together; past that the
    sink gets the record without holding the caller (a warning names it). The bound applies to
    awaitables only: a sync sink that blocks holds the caller as long as it blocks.
    """
    return _Audit(sink)


# ------------------------------------------------------------------ approval

class _Approval(_Builtin):
    name = "approval"

    def __init__(self, approver: Callable[..., Any] | None) -> None:
        self.approver = approver


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

class _RepeatGuard(_Builtin):
    name = "repeat_guard"

    def __init__(self, limit: int) -> None:
        # The core counts calls in 32 bits.
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 2**32 - 1:
            raise ValueError(f"repeat_guard: limit must be an integer from 1 to 4294967295, got {limit!r}")
        self.limit = limit

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

class _Idempotency(_Builtin):
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

    A call that fails, times out or is cancelled (its caller's task cancelled, e.g. the agent
    loop shut a turn down) leaves no result: its claim is released at once and an identical
    call — one already waiting for it, here or in another process, or a later one — runs the
    tool. That holds when the tool had already started and may have done its side effect:
    keeping the claim would only delay the second run until the lease ran out, not prevent it
    (a sync tool cannot be stopped at all: its thread runs on). A side effect that must never
    happen twice needs a key the backend itself deduplicates (a request id). A call cancelled
    after the tool returned, while its result was being stored, stores that result.

    ``store=None``: in-process, held by the Invoker (the result object itself). A StorePort
    (async ``get``, ``set``, ``compare_and_set``; Redis or Postgres for many workers) shares the
    deduplication between processes: the call is claimed atomically with ``compare_and_set``
    before the tool runs, so of two workers receiving the same call one runs it and the other
    waits for its result (both return it); the claim is a lease covering every attempt the
    rules inside ``idempotency`` may make (one attempt's deadline times ``retry``'s attempts,
    plus the backoff ceilings, plus 5 s; at least ``lease_s`` seconds), after which a crashed
    worker's claim is taken over. A released claim is changed with ``compare_and_set`` from
    exactly the record this call wrote, so it never overwrites another worker's claim or a
    stored result. Results are stored as JSON (a result that is not JSON is not shared); a
    failing store is logged and the tool runs (a store failing on the release of a cancelled
    call is logged and the claim holds until its lease runs out; the cancellation goes on).
    Raises ``TypeError`` for a store without those methods, ``ValueError`` for ``lease_s <= 0``."""
    return _Idempotency(store, lease_s)


# ------------------------------------------------------------------ retry

class _Retry(_Builtin):
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

class _Timeout(_Builtin):
    name = "timeout"

    def __init__(self, default_s: float) -> None:
        number = isinstance(default_s, (int, float)) and not isinstance(default_s, bool)
        if not number or not 0 < default_s <= MAX_TIMEOUT_S:  # NaN fails the comparison too
            raise ValueError(
                f"timeout: default_s must be a number of seconds greater than 0 and at most "
                f"{MAX_TIMEOUT_S:.0f} (30 days), got {default_s!r}"
            )
        self.default_s = default_s

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

class _Egress(_Builtin):
    name = "egress"

    def __init__(self, allow: Iterable[str]) -> None:
        if isinstance(allow, str):
            allow = (allow,)
        self.allowed = tuple(_core.host_allow_list(list(allow)))

    def __repr__(self) -> str:
        return f"egress(allow={self.allowed!r})"


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
