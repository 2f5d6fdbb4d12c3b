"""Type stubs of ``agentkit_tools._core``, the Rust core (``src/``, bound in ``src/py/``).

The core holds every per-call rule and every piece of shared state:
the docstring parser, JSON Schema assembly and compiled validation, registry order and lookup,
the envelopes of the failure ladder, result truncation, provider renderings, the middleware
state (repeat counts, idempotency cache, circuit breakers, retry decisions, egress), the worker
pool of sync tool bodies, and the memory tree with its compare-and-set loop.

This module is internal: its names may change between releases. The public API is
``agentkit_tools``; these stubs exist so that the public modules type-check and so that readers
know the shapes crossing the boundary. "JSON value" below means what ``json.loads`` can return
(dict with str keys, list, str, int, float, bool, None; tuples and other sequences/mappings are
accepted on input). Envelopes are plain dicts: ``{"ok": True, "value", "elapsed_ms"}`` or
``{"ok": False, "error": {"code", "message", ...}}``.
"""

import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, final

from typing_extensions import Self

__all__ = [
    "Call",
    "Pipeline",
    "Drive",
    "drive",
    "call_fault",
    "Relay",
    "Turn",
    "BodyAwait",
    "BodyTask",
    "host_allow_list",
    "STEP_DONE",
    "STEP_RUN",
    "STEP_APPROVE",
    "STEP_SLEEP",
    "STEP_WAIT",
    "STEP_GET",
    "STEP_SET",
    "STEP_CAS",
    "STEP_OPEN",
    "STEP_RECORD",
    "STEP_SETTLE",
    "STEP_RAISE",
    "STEP_AWAIT",
    "STEP_FAILING",
    "STEP_RECORDING",
    "EV_APPROVED",
    "EV_SLEPT",
    "EV_WOKEN",
    "EV_GOT",
    "EV_SET",
    "EV_CAS",
    "EV_STORE_FAILED",
    "EV_OPENED",
    "EV_RECORDED",
    "BODY_INLINE",
    "BODY_ASYNC",
    "BODY_WORKER",
    "BODY_TOOL",
    "observed_level",
    "CoreRegistry",
    "CoreTool",
    "MAX_CALLS_PER_SCOPE",
    "MAX_SCOPES",
    "MAX_SPELLED_OUT",
    "MIN_DESCRIPTION_CHARS",
    "FORMAT_PATTERNS",
    "HANDOFF_SPIN_S",
    "APPROVER_FAILED",
    "MEMORY_DEFAULT_MAX_ATTEMPTS",
    "MEMORY_DEFAULT_MAX_BYTES",
    "MEMORY_DEFAULT_MAX_FILES",
    "MEMORY_DEFAULT_ROOT",
    "MEMORY_MAX_PATH_BYTES",
    "MemoryCasLoop",
    "MemoryCommand",
    "MemoryStoreEngine",
    "MemoryTree",
    "PROVIDERS",
    "WorkerPool",
    "Job",
    "JobAwait",
    "LoopInbox",
    "LoopJob",
    "POOL_MAX_WORKERS",
    "POOL_MAX_STUCK",
    "LoopDeadlines",
    "RetryPolicy",
    "SchemaValidator",
    "__version__",
    "approval_envelope",
    "args_hash",
    "backend_saturated_message",
    "call_parts",
    "canonical_args",
    "check_tool_name",
    "codes",
    "copy_json",
    "cut_message",
    "deep_freeze",
    "define_function_tool",
    "define_tool",
    "error_envelope",
    "fault_envelope",
    "forks",
    "idempotency_store_key",
    "invalid_call_envelope",
    "memory_parse_call",
    "ok_envelope",
    "parse_docstring",
    "pending_deadlines",
    "deadline_end",
    "protocol_entries",
    "render_tool",
    "sanitized_tool_name",
    "strip_strict_nulls",
    "truncate",
    "url_host",
    "valid_tool_name",
]

__version__: str
"""The version of the crate (``Cargo.toml``), e.g. ``"0.1.0"``."""

MIN_DESCRIPTION_CHARS: int
#: Format name -> the regular expression introspection advertises (``pattern``) for it and the
#: validator enforces: ``date-time``/``date`` (year 0001 or later, seconds 00-59, with
#: ``format``), ``time`` (``HH:MM[:SS[.ffffff]]``, optional offset), ``naive-date-time``,
#: ``duration`` (weeks, or days/hours/minutes/seconds; no years or months), ``decimal``, ``byte``
#: (standard padded base64).
FORMAT_PATTERNS: dict[str, str]
"""The floor of a tool description in characters after stripping: 30."""

MAX_SPELLED_OUT: int
"""How many argument problems an ``invalid_arguments`` message spells out: 5."""

PROVIDERS: list[str]
"""The provider names ``render_tool`` accepts: ``anthropic``, ``openai``, ``openai-strict``,
``openai-responses``, ``openai-responses-strict``, ``gemini``, ``mcp``."""

# ---------------------------------------------------------------------- docstrings

def parse_docstring(doc: str) -> tuple[str, list[tuple[str, str]], str | None]:
    """Parse a raw ``__doc__`` (Google, NumPy or Sphinx style, detected per docstring) into
    ``(description, [(parameter name, text), ...], returns text or None)``.

    The description is the text before the first section, dedented, CR/CRLF normalised; a line
    that is exactly ``---`` ends what the model sees. Raises ``ValueError`` when a line the model
    would read starts with TODO, FIXME, XXX or HACK.
    """

# ---------------------------------------------------------------------- tools

@final
class SchemaValidator:
    """A compiled JSON Schema (draft 2020-12, formats asserted): compile once, validate many.
    Used for ``output_schema`` checks."""

    def __new__(cls, schema: Any) -> Self:
        """Compile ``schema`` (a JSON value: a schema dict or a boolean schema). Raises
        ``ValueError`` when it is not JSON or not a valid schema."""

    def is_valid(self, instance: object) -> bool:
        """True when ``instance`` (a JSON value) is valid; a non-JSON value is invalid."""

    def problems(self, instance: object) -> list[tuple[str, str]]:
        """Every problem as ``(path, reason)`` pairs (path like ``"items[0].id"``; ``"<root>"``
        for a value that is not JSON at all); ``[]`` when valid. Never raises."""

@final
class CoreTool:
    """The per-tool state of the core: the compiled input schema, the description after the
    description rules, and the documented names (for ``lint``). Built by ``define_tool`` or
    ``CoreTool.from_schema``; not constructible directly."""

    @staticmethod
    def from_schema(
        name: str, parameters: Any, dropped: Sequence[str] = ..., description: str = ...
    ) -> CoreTool:
        """Compile the input schema of a tool that already has one (a hand-built tool).
        ``parameters`` is a JSON Schema object; ``dropped`` names keys removed from a
        call before validation (the injected ``ctx``/``context``). Raises
        ``ToolDefinitionError`` when the schema does not compile, ``ValueError`` when it is not
        JSON."""

    @property
    def name(self) -> str:
        """The tool name."""

    @property
    def description(self) -> str:
        """The description the model reads (explicit, or from the docstring)."""

    @property
    def parameters(self) -> dict[str, Any]:
        """The input schema (a JSON Schema object), built once; do not mutate."""

    @property
    def documented(self) -> list[str]:
        """Names the docstring documents (for ``lint``'s ``documented_not_parameter``)."""

    @property
    def accepted(self) -> list[str]:
        """Every argument name the schema declares, in signature order."""

    def validate(self, args: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Check a call's arguments (a mapping, raw JSON text, or None/empty text for ``{}``)
        strictly (no coercion) and return them as a fresh dict. Raises
        ``ToolArgumentError`` with every problem at once (``unexpected``, ``missing``,
        ``invalid``)."""

    def argument_error_envelope(self, exc: BaseException) -> dict[str, Any]:
        """The ``invalid_arguments`` envelope (``errors``, ``schema``) for a
        ``ToolArgumentError`` raised outside validation (by a converter)."""

def define_function_tool(
    name: str,
    description: str | None,
    doc: str | None,
    params: Sequence[tuple[str, Any, bool, Any, str | None]],
    non_json: Sequence[str],
    allow_extra: bool,
    dropped: Sequence[str],
    defs: Mapping[str, Any] | None,
    frozen_dict: type[dict[str, Any]],
    frozen_list: type[list[Any]],
) -> tuple[CoreTool, dict[str, Any]]:
    """``define_tool`` for a tool built from a Python function, in one call: returns the
    ``CoreTool`` and its input schema deep-frozen (objects as ``frozen_dict``, arrays as
    ``frozen_list`` instances) for the tool's ``ToolSchema``; the same object is the core's
    ``parameters``.

    ``params``: per advertised parameter, in signature order, ``(name, schema fragment,
    required, JSON default or None, Annotated description or None)``; ``non_json``: names of
    parameters whose default JSON cannot carry (not advertised). The other arguments and the
    errors raised are those of ``define_tool``.
    """

def define_tool(
    name: str,
    description: str | None,
    doc: str | None,
    params: Sequence[tuple[str, Any, bool, Any, str | None, bool]],
    allow_extra: bool,
    dropped: Sequence[str],
    defs: Mapping[str, Any] | None = None,
) -> CoreTool:
    """Define a tool from what Python introspection read: parse ``doc``, apply the
    description rules (an explicit ``description`` is used stripped; else the docstring's text),
    assemble and compile the input schema.

    ``params``: per advertised parameter, in signature order, ``(name, schema fragment,
    required, JSON default, Annotated description or None, has a JSON default)``.
    ``allow_extra``: the function takes ``**kwargs`` (``additionalProperties`` not false).
    ``dropped``: injected parameter names removed from calls. ``defs``: ``$defs`` of recursive
    types, placed at the schema root. Raises ``ToolDefinitionError``: a description under
    ``MIN_DESCRIPTION_CHARS`` characters (message ``tool '<name>' needs a docstring/description
    of at least 30 characters ...; got N chars: '<text>'``), a TODO/FIXME/XXX/HACK line in the
    model-visible docstring, a schema that does not compile.
    """

@final
class CoreRegistry:
    """The registry's shared state: tools by name in byte order, insertion order, and
    lookup plus validation of a call in one step."""

    def __new__(cls) -> Self: ...
    def add(self, name: str, tool: Any, core: CoreTool, replace: bool = False) -> None:
        """Add ``tool`` with its compiled ``core``. Raises ``ValueError("ToolRegistry: tool
        '<name>' already registered. Pass replace=True to swap deliberately.")`` on a name
        collision unless ``replace``; ``ToolDefinitionError`` for a name the tool-name rule
        refuses (see ``check_tool_name``)."""

    def remove(self, name: str) -> None:
        """Remove a tool. Raises ``KeyError("no tool '<name>'")`` when absent."""

    def get(self, name: str) -> Any:
        """The tool called ``name``. Raises ``KeyError("no tool '<name>'")``."""

    def core(self, name: str) -> CoreTool:
        """The compiled core of tool ``name``. Raises ``KeyError("no tool '<name>'")``."""

    def names(self) -> list[str]:
        """Tool names, sorted by byte order (stable across runs)."""

    def sorted_tools(self) -> list[Any]:
        """Tools sorted by name."""

    def tools(self) -> list[Any]:
        """Tools in insertion order."""

    def prepare(self, call: Mapping[str, Any]) -> tuple[bool, Any, dict[str, Any] | None, CoreTool | None]:
        """Look a call up and validate its arguments in one step.

        ``call``: ``{"id", "name", "input"}`` (Anthropic), ``{"id", "function": {"name",
        "arguments"}}`` (OpenAI Chat) or ``{"call_id", "name", "arguments"}`` (OpenAI
        Responses); arguments a mapping or JSON text. Returns ``(True, tool, kwargs, core)``
        for a valid call, else ``(False, envelope, None, None)`` with the ``invalid_call``,
        ``unknown_tool`` or ``invalid_arguments`` envelope. Raises ``TypeError`` when ``call``
        is not a dict."""

    def admit(
        self, call: Mapping[str, Any], frozen_dict: type[dict[str, Any]], frozen_list: type[list[Any]]
    ) -> tuple[bool, Any, Mapping[str, Any] | None, CoreTool | None, str | None]:
        """``prepare`` for the Invoker in one crossing: ``(True, tool, args, core, canonical)``
        with ``args`` deep-frozen (dicts as ``frozen_dict``, lists as ``frozen_list``) and
        ``canonical`` their canonical JSON text (as ``canonical_args(args)[0]``), else ``(False,
        envelope, None, None, None)``. Raises ``TypeError`` when ``call`` is not a dict."""

    def unknown_tool(self, name: str) -> dict[str, Any]:
        """The ``unknown_tool`` envelope for ``name``: the message lists the available names;
        ``available`` and, for a likely typo, ``did_you_mean``."""

    def __len__(self) -> int: ...
    def __contains__(self, key: str, /) -> bool: ...

def error_envelope(tool_name: str, exc: BaseException, core: CoreTool | None = None) -> dict[str, Any]:
    """The failure envelope for an exception raised by a tool or by a deadline:
    ``ToolArgumentError`` → ``invalid_arguments`` (needs ``core``), ``ToolTimeoutError`` →
    ``timeout``, ``ToolError`` → its own ``code`` with ``retriable`` and its details merged,
    ``ToolShapeError`` → ``output_mismatch``, anything else → ``internal_error`` ("a bug in the
    tool, not in your arguments; do not retry")."""

def check_tool_name(name: object) -> None:
    """The one tool-name rule, applied by every way of making or registering a tool: 1-64
    characters from a-z, A-Z, 0-9, '_' and '-', the whole name (a trailing newline included).
    Raises ``ToolDefinitionError`` quoting the name with ``repr``."""

def valid_tool_name(name: str) -> bool:
    """Whether ``name`` passes the tool-name rule (see ``check_tool_name``)."""

def sanitized_tool_name(name: str) -> str:
    """``name`` with every character the tool-name rule refuses replaced by ``_`` (the length is
    unchanged: check the result with ``valid_tool_name``)."""

def forks() -> int:
    """How many forks this process came from since the core was loaded, counted in the child of
    each, also of a fork that runs none of Python's fork hooks (a C extension's, or
    ``ctypes.PyDLL(None).fork()``): what tells apart a process-wide object made before a fork."""

def fault_envelope(exc: BaseException) -> dict[str, Any]:
    """The ``internal_error`` envelope for a fault of the tooling around a tool (a middleware
    raised ``exc``): it names the exception and tells the model not to retry."""

def invalid_call_envelope(problem: str | None = None) -> dict[str, Any]:
    """The ``invalid_call`` envelope: ``problem`` says what is wrong with the call (the text of
    the ``TypeError`` ``CoreRegistry.prepare``/``admit`` raised); None: the call names no tool."""

def call_parts(call: object) -> tuple[Any, str | None, Any]:
    """``(id, name, arguments)`` of a call in any accepted shape (Anthropic ``{"id", "name",
    "input"}``, OpenAI Chat ``{"id", "function": {"name", "arguments"}}``, OpenAI Responses
    ``{"call_id", "name", "arguments"}``), each None when absent; the name only when it is a
    ``str``. Never raises for a malformed call (a non-dict gives three Nones)."""

def backend_saturated_message(tool: str, stuck: int) -> str:
    """The message of a ``backend_saturated`` failure: ``tool`` was not run, all ``stuck``
    worker threads being held by calls that overran their deadline."""

codes: types.ModuleType
"""The error codes of the envelope (a module object; src/errors.rs is the one list,
docs/errors.md describes each): every code under its upper-case name (``codes.UNKNOWN_TOOL ==
"unknown_tool"``, ``codes.TIMEOUT``, ``codes.STORE_CONFLICT``, ...), ``codes.ALL`` (a tuple of
every code, in the order docs/errors.md presents them) and ``codes.RETRIABLE`` (a frozenset of
the codes whose call may succeed if sent again unchanged; a tool's own ``ToolError`` says for
itself)."""

def ok_envelope(value: object, elapsed_ms: float, deduplicated: bool = False) -> dict[str, Any]:
    """``{"ok": True, "value": value, "elapsed_ms": elapsed_ms}``; ``elapsed_ms`` in
    milliseconds, rounded to 3 decimals; with ``"deduplicated": True`` when ``deduplicated``
    (answered from the idempotency cache)."""

def copy_json(value: Any) -> Any:
    """``copy.deepcopy(value)`` for JSON-shaped trees, done in the core: exact dicts and lists
    are copied, strings, numbers, booleans and None shared; anything else goes to
    ``copy.deepcopy``. Raises ``RecursionError`` past 1000 levels of nesting."""

def deep_freeze(value: object, frozen_dict: type, frozen_list: type) -> Any:
    """``value`` with every dict, list and tuple inside it frozen: dicts become ``frozen_dict``
    instances, lists ``frozen_list`` instances (filled below their refusing ``__setitem__`` /
    ``append``), tuples other than named tuples tuples of frozen items; instances of the frozen
    classes and other values are returned as they are. Raises ``RecursionError`` past 1000
    levels of nesting. Used by ``agentkit_tools.frozen.deep_freeze``."""

def cut_message(text: str, max_chars: int) -> str:
    """An error message the model reads, cut to at most ``max_chars`` characters (never inside
    a character): its start (two thirds of what fits) and its end (one third) around
    `` ...[N chars of this message cut]... ``. A message within the limit is returned
    unchanged."""

def truncate(text: str, max_chars: int = ...) -> str:
    """``text`` cut to at most ``max_chars`` characters (default 2000) (Unicode scalar values, never inside a
    character), the notice included: ``...[truncated N chars]. Narrow your arguments (add
    filters or a smaller limit) and call again.``. Text within the limit is
    returned unchanged. Raises ``OverflowError`` for a negative ``max_chars``."""

# ---------------------------------------------------------------------- providers

def render_tool(
    provider: str,
    name: str,
    description: str,
    parameters: Any,
    output_schema: Any = None,
    flags: tuple[bool, bool, bool | None, bool | None] | None = None,
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Render one tool for ``provider`` (a name of ``PROVIDERS``; ``openai-chat`` and
    ``openai-chat-strict`` are accepted aliases). ``parameters``/``output_schema`` are JSON
    Schema objects; ``flags`` is ``(side_effecting, idempotent, declared, destructive)`` when
    known (it sets the MCP ``readOnlyHint``/``destructiveHint``/``idempotentHint`` annotations;
    an undeclared tool gets no read-only or destructive hint; ``destructive=False`` gives
    ``destructiveHint: false`` to a side-effecting tool; None for either means the default).

    Returns ``(rendering, findings)``: the provider's tools-list entry, and ``(provider, schema
    path, message)`` for each part the provider cannot express and was weakened (the validator
    still enforces it; ``lint`` reports it). Byte-stable. Raises ``ValueError`` for an unknown
    provider or a schema that is not JSON.
    """

def strip_strict_nulls(parameters: Any, args: Any) -> Any:
    """``args`` (a JSON object of a strict-mode OpenAI call) without the ``null`` values strict
    mode sends for absent optional properties, where ``parameters`` (the tool's input schema)
    neither requires the property nor admits ``null``. Raises ``ValueError`` when
    either is not JSON."""

# ---------------------------------------------------------------------- middleware

def canonical_args(args: object) -> tuple[str, str]:
    """``(canonical JSON text, args_hash)`` of a call's arguments (a mapping, JSON text or
    None). Canonical: keys sorted by code point, no whitespace, non-ASCII kept. ``args_hash``:
    the first 16 hex characters of the SHA-256 of that text (the audit record's).
    JSON text that does not parse is hashed as given; a non-JSON mapping by its ``repr`` (one
    that cannot be printed by ``<unreadable TYPE>``; a lone surrogate as U+FFFD). Raises only
    a ``KeyboardInterrupt`` or ``SystemExit`` that reading or printing the arguments raised."""

def args_hash(canonical: str) -> str:
    """The first 16 hex characters of the SHA-256 of ``canonical`` (the audit record's
    ``args_hash``), for text that is already canonical."""

def idempotency_store_key(scope: str, name: str, canonical: str) -> str:
    """The key of a cached side-effecting result in a shared store: ``agentkit-tools:idem:``
    + the SHA-256 hex of scope, tool name and canonical arguments."""

def approval_envelope(tool: str, canonical: str) -> dict[str, Any]:
    """The ``approval_required`` envelope (``tool``); its message names the tool and its
    canonical arguments and tells the model to ask the user."""

def url_host(url: str) -> str | None:
    """The host of an absolute URL as the egress check reads it (lowercase, no port, userinfo
    dropped, ``\\`` ends the authority as in WHATWG parsers), or None when there is no host to
    check (no ``scheme://``, empty host, or a host a URL parser would rewrite)."""

@final
class Pipeline:
    """The built-in rules of one chain segment compiled into the core's call pipeline, with the
    state they share across calls (per conversation: repeat counts and the idempotency window,
    bounded to ``MAX_SCOPES`` conversations of ``MAX_CALLS_PER_SCOPE`` counts; a circuit breaker
    per tool). A driver performs the steps a call asks for: each step is ``(code, payload)``
    with ``code`` one of the ``STEP_*`` constants:

    - ``STEP_DONE``: ``payload`` is the envelope;
    - ``STEP_RUN``: ``(tool, args, timeout_s, kind)``: run the body once (or call the next
      handler) within ``timeout_s`` seconds (None: none), then ``Call.ok`` / ``Call.failed`` /
      ``Call.passed``; ``kind`` (read from the tool at each attempt) says how: ``BODY_INLINE``
      a sync function declared non-blocking (the tool's ``non_blocking = True`` or a name in
      ``inline``), called on the caller's thread; ``BODY_ASYNC`` an ``async`` function,
      awaited; ``BODY_WORKER`` any other sync function, on the worker pool; ``BODY_TOOL`` any
      other tool, its own ``run(args, ctx)``;
    - ``STEP_APPROVE``: ``(approver, tool, args)``: ask, then ``feed(EV_APPROVED, answer)``, the
      answer as it is (only the boolean ``True`` approves);
    - ``STEP_SLEEP``: ``(sleep or None, seconds)``, then ``feed(EV_SLEPT)``;
    - ``STEP_WAIT``: an asyncio future (an identical call in flight), then ``feed(EV_WOKEN)``;
    - ``STEP_GET`` ``(store, key)``, ``STEP_SET`` ``(store, key, value)``, ``STEP_CAS``
      ``(store, key, expected, value)``: the shared idempotency store, then ``feed(EV_GOT,
      text)``, ``feed(EV_SET)``, ``feed(EV_CAS, won)`` or ``feed(EV_STORE_FAILED)``;
    - ``STEP_FAILING`` ``(key, why)``: the shared store is failing though it raised nothing
      (its ``compare_and_set`` refused 8 claims in a row, each over the record its ``get`` had
      just answered): log it as a failing store on ``key``, then ``feed(EV_STORE_FAILED)``;
    - ``STEP_OPEN`` ``(config, tool name, call id)``: open the audit span, then
      ``feed(EV_OPENED)``;
    - ``STEP_RECORD`` ``(config, record)``: emit the audit record, then ``feed(EV_RECORDED)``;
    - ``STEP_SETTLE``: a body the core called itself (``begin(..., here=True)``) returned an
      awaitable: ``payload`` is a ``Later``; ``await payload.settle()`` (it awaits the
      awaitable within what is left of the call's deadline), then ``Call.ok`` /
      ``Call.failed``;
    - ``STEP_AWAIT``: ``(tool, awaiting, end, timeout_s)``: an ``async`` body the core started
      itself (``begin(..., here=True)``: its first step taken) suspended, or ``fn`` returned an
      awaitable that is no coroutine: ``await awaiting`` (a :class:`BodyAwait`) in the caller's
      task, check the result (an awaitable one is settled within what is left of the deadline,
      ``end`` on ``time.monotonic``), then ``Call.ok`` / ``Call.failed``;
    - ``STEP_RAISE``: that body raised ``KeyboardInterrupt``/``SystemExit`` (or its output check
      a ``BaseException`` that is not an ``Exception``): raise ``payload`` (then ``Call.abort``).
    """

    def __new__(
        cls, rules: Sequence[tuple[str, Any]], default_scope: str, frozen: bool = True, inline: Sequence[str] | None = None
    ) -> Self:
        """``rules``: ``(kind, config)`` in chain order; ``kind`` one of ``"audit"``,
        ``"approval"``, ``"repeat_guard"``, ``"idempotency"``, ``"retry"``, ``"timeout"``,
        ``"egress"``; ``config`` the middleware object whose attributes configure it.
        ``default_scope``: the conversation of calls without ``ctx.run_id``; ``frozen``: the
        body gets deep-frozen arguments (else a fresh dict); ``inline``: names of tools whose sync
        body is called on the caller's thread. Raises ``ValueError`` for an
        unknown kind, ``AttributeError``/``TypeError`` for a config without its settings."""

    def begin(self, registry: CoreRegistry, call: object, ctx: object, here: bool = False) -> Any:
        """Look ``call`` up in ``registry``, validate it and start it: ``(call_state, code,
        payload)``; ``call_state`` is None when ``code`` is ``STEP_DONE`` (the call was answered
        at once). ``here``: at every attempt, a non-blocking sync body is called by the core
        itself and an ``async`` one started, its first step taken, and the outcome fed in (no
        ``STEP_RUN`` of ``BODY_INLINE`` or ``BODY_ASYNC`` reaches the driver; ``STEP_SETTLE``,
        ``STEP_AWAIT`` and ``STEP_RAISE`` may); a call answered at once is then returned as its
        envelope itself (a ``dict``) instead of ``(None, STEP_DONE, envelope)``. Raises what
        reading the tool's flags or ``ctx`` raises."""

    def begin_call(self, tc: Any) -> tuple[Call, int, Any]:
        """Start a ``ToolCall`` a user middleware passed on: ``(call_state, code, payload)``."""

    def forget(self, scope: str) -> None:
        """Drop the repeat counts and cached results of a finished conversation (its calls in
        flight keep their claims)."""

    def sizes(self) -> tuple[int, int, int]:
        """``(repeat keys, idempotency entries, breakers)``: sizes for tests and monitoring."""

    def scopes(self) -> int:
        """How many conversations are held (at most ``MAX_SCOPES``)."""

    @property
    def configs(self) -> list[Any]:
        """The rules' configuration objects, in order."""

@final
class Call:
    """One call going through a ``Pipeline``; each method returns the next ``(code, payload)``."""

    def ok(self, value: object) -> tuple[int, Any]:
        """The body returned ``value`` (already checked against its output schema)."""

    def failed(self, exc: BaseException) -> tuple[int, Any]:
        """The body (or its deadline) raised ``exc``."""

    def passed(self, env: dict[str, Any], exc: BaseException | None, attempts: int) -> tuple[int, Any]:
        """The next handler answered ``env``; ``exc``: the failed attempt's exception it saw;
        ``attempts``: body starts so far."""

    def feed(self, event: int, value: object = None) -> tuple[int, Any]:
        """The outcome of the step performed (an ``EV_*`` constant and its value). Raises
        ``ValueError`` for an unknown event."""

    def abort(self, cancelled: bool, attempts: int | None = None) -> list[tuple[int, tuple[Any, ...]]]:
        """The caller gave up (``cancelled``) or a fault outside the pipeline ended the call: the
        identical calls waiting for it in this process wake. Returns the steps to perform before
        re-raising, in order: ``(STEP_CAS, (store, key, expected, value))`` releases the call's
        shared idempotency claim (compare-and-set from exactly its own record; the answer is not
        fed back), ``(STEP_RECORD, (config, record))`` emits the audit record (outcome
        ``"cancelled"``, else ``"internal_error"``) and ``(STEP_RECORDING, (config, record))``
        waits for the task of its own the driver writes the call's own record in (an async
        sink's). ``attempts``: body starts so far, when a user middleware after this segment
        counts them."""

    @property
    def attempts(self) -> int:
        """How many times the body started."""

    @property
    def tool(self) -> Any:
        """The registered tool (None when the call was rejected)."""

STEP_DONE: int
STEP_RUN: int
STEP_APPROVE: int
STEP_SLEEP: int
STEP_WAIT: int
STEP_GET: int
STEP_SET: int
STEP_CAS: int
STEP_OPEN: int
STEP_RECORD: int
STEP_SETTLE: int
STEP_RAISE: int
STEP_AWAIT: int
STEP_FAILING: int
STEP_RECORDING: int
EV_APPROVED: int
EV_SLEPT: int
EV_WOKEN: int
EV_GOT: int
EV_SET: int
EV_CAS: int
EV_STORE_FAILED: int
EV_OPENED: int
EV_RECORDED: int

@final
class BodyAwait:
    """An ``async`` tool body awaited in the caller's own task (no task of its own):
    ``await BodyAwait(coro, limit_s, name, end=None)`` returns what the body returns.

    ``coro``: the body's coroutine (an awaitable that is no coroutine is awaited through its
    ``__await__``; a non-awaitable is a ``TypeError`` at the first await); ``limit_s``: its
    deadline in seconds (None: none; ``end``: that deadline on ``time.monotonic`` when it
    started earlier); ``name``: the tool's, for ``ToolTimeoutError``; ``context``: the copy of
    the caller's ``contextvars.Context`` the body's function was called in (None: a fresh
    copy). Each step of the body runs in that one copy of the caller's context and as the body's own
    stand-in task (``asyncio.current_task()`` meanwhile): scopes the body enters cancel the
    body, never the caller, and the caller's cancellation reaches the body as its task's. A
    body that finishes without suspending costs no pass of the loop. At the deadline the
    caller gets ``ToolTimeoutError`` at once: the body is cancelled and a clean-up that
    suspends goes on in a task of its own, its outcome dropped; a result past the deadline is a
    ``ToolTimeoutError`` too. Raises what the body raised; a ``BaseException`` that is not an
    ``Exception`` comes wrapped in ``_runner.BodyFailed`` (but the caller's own cancellation,
    ``KeyboardInterrupt`` and ``SystemExit``). Closing it abandons the body as its deadline
    would; dropped while the body is suspended, its deadline is left all the same (it never
    cancels the caller later). Awaited once."""

    def __new__(cls, coro: Any, limit_s: float | None, name: str, end: float | None = None, context: Any = None) -> Self: ...
    def __await__(self) -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...
    def send(self, value: object) -> Any:
        """Take the next step, the body getting ``value``; returns what it yields, raises
        ``StopIteration`` with the body's value when it returned."""

    def throw(self, exc: BaseException | type[BaseException], value: object = None, tb: object = None) -> Any:
        """Take the next step, the body getting ``exc`` raised; as :meth:`send`."""

    def close(self) -> None:
        """The awaiting coroutine is closed: the body is abandoned (as at its deadline), or
        closed where no loop runs."""

@final
class BodyTask:
    """The task an ``async`` tool body runs as (made by :class:`BodyAwait`, never by hand):
    ``asyncio.current_task()`` during each step of the body, whichever task drives it (the
    caller's, or a clean-up's task past the deadline). It does what ``asyncio.timeout``,
    ``asyncio.TaskGroup`` and anyio's cancel scopes ask of a task, with a task's semantics, so
    a scope the body entered cancels the body, never the task driving it."""

    def get_loop(self) -> Any:
        """The loop of the task that stepped the body first."""

    def get_coro(self) -> Any:
        """The body's coroutine."""

    def get_name(self) -> str:
        """``tool body <qualname of the body>`` unless :meth:`set_name` named it."""

    def set_name(self, value: object) -> None:
        """Name it ``str(value)``."""

    def done(self) -> bool:
        """The body has ended."""

    def cancelled(self) -> bool:
        """The body ended by a ``CancelledError``."""

    def cancelling(self) -> int:
        """The cancellation requests not withdrawn by :meth:`uncancel`."""

    def uncancel(self) -> int:
        """Withdraw one cancellation request; returns those left."""

    def cancel(self, msg: object = None) -> bool:
        """Cancel the future the body waits on, else throw ``CancelledError(msg)`` into it at
        its next step; False once it has ended."""

    def add_done_callback(self, f: Any, *, context: Any = None) -> None:
        """``f(task)`` is scheduled on the loop (in ``context``) when the body ends."""

    def remove_done_callback(self, f: Any) -> int:
        """Remove every ``f`` added; returns how many."""

    @property
    def _fut_waiter(self) -> Any:
        """The future the body waits on (None while a step runs)."""

    @property
    def _must_cancel(self) -> bool:
        """A cancellation its next step throws."""

    @property
    def _callbacks(self) -> list[tuple[Any, Any]] | None:
        """The done callbacks ``(f, context)`` not scheduled yet; None once it has ended."""

@final
class Relay:
    """The coroutine of each task of an ``Invoker.invoke_many`` turn (see :class:`Turn`), made by
    the turn.

    A call whose first step is its ``async`` body: in the task's first step the body starts
    (``tool.fn(args, ctx)``; none when its time limit is not positive; an awaitable it returns
    that is no coroutine is awaited through its ``__await__``, a non-awaitable is a
    ``TypeError`` of the body, as for ``Invoker.invoke``) within its deadline; the call of
    ``tool.fn`` and each step of the body run in one copy of the task's ``contextvars``; what it
    yields goes to the task, what the task sends or throws goes to it. At the deadline the body
    is cancelled and, if its clean-up suspends, that goes on in a task of its own (its outcome
    dropped) while the call ends at once with ``ToolTimeoutError``; a result past the deadline
    is a ``ToolTimeoutError`` too. A value the body returned is checked against the tool's output
    schema (an awaitable one is settled within what is left of the deadline) and fed to the
    call's state; the call is then answered, or goes on through its :class:`Drive` in the same
    task (a retry, an audit record). Any other call's task steps its :class:`Drive` from the
    start; the aborts of a cancelled turn's calls run in one such task too. Every way the relay
    ends hands its call back to the turn exactly once (answered, stopped, or closed). A
    ``Relay`` is awaited once."""

    @property
    def cr_frame(self) -> Any:
        """The frame of the coroutine the relay steps now (the body; the driver's coroutine
        after it), as asyncio's task repr, ``Task.get_stack()``/``print_stack()`` and debuggers
        read it of a task's coroutine: None before the body started, once done, and during one of
        the relay's own steps."""

    @property
    def cr_code(self) -> Any:
        """The code object of the coroutine the relay steps now (None as for ``cr_frame``)."""

    @property
    def cr_await(self) -> Any:
        """What the coroutine the relay steps now awaits (None as for ``cr_frame``)."""

    @property
    def cr_running(self) -> bool:
        """True during one of the relay's own steps."""

    @property
    def __name__(self) -> str:  # type: ignore[override]
        """The name of the coroutine the relay steps now; ``AttributeError`` when ``cr_frame``
        would be None."""

    @property
    def __qualname__(self) -> str:  # type: ignore[override]
        """The qualified name of the coroutine the relay steps now (as ``__name__``)."""

    def __await__(self) -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...
    def send(self, value: object) -> Any:
        """Take the next step, the body getting ``value``; returns what it yields, raises
        ``StopIteration`` when the call's task is done."""

    def throw(self, exc: BaseException | type[BaseException], value: object = None, tb: object = None) -> Any:
        """Take the next step, the body getting ``exc`` raised; as :meth:`send`."""

    def close(self) -> None:
        """Close what it steps (the body's ``finally`` blocks run); a call not ended yet goes to
        ``turn._closed(i, m, exc)`` (``exc``: ``GeneratorExit``, or what the body's close
        raised). Raises what the body's close raised, as closing a coroutine does.

        ``send``, ``throw``, ``close`` and ``__next__`` called during a step of this relay (by the
        body, on the coroutine of the task running it) raise ``ValueError: coroutine already
        executing``, as a coroutine does."""

@final
class LoopDeadlines:
    """Every pending call deadline of one event loop behind one timer of that loop (a heap of
    deadlines, one ``loop.call_later`` armed for the earliest); calling it is that timer firing.
    Made by the core, held by its loop while armed."""

    def __call__(self, *args: Any, **kwargs: Any) -> None: ...

def pending_deadlines(lp: Any) -> int:
    """How many call deadlines are pending on event loop ``lp``: entered, neither left nor
    expired."""

def deadline_end(limit_s: float | None) -> float | None:
    """The end on ``time.monotonic`` of a call of ``limit_s`` seconds starting now (None: no
    deadline), computed as the core computes every call's end."""

def drive(pipe: Pipeline, registry: CoreRegistry, call: object, ctx: object) -> dict[str, Any] | Drive:
    """``Invoker.invoke`` through a chain of built-in rules only: ``call`` admitted and begun in
    ``pipe`` (``pipe.begin(registry, call, ctx, here=True)``). Returns its envelope when the
    pipeline answered it at once (a refusal, a body the core ran itself), else its :class:`Drive`
    to await. A fault answers with the fault envelope, as :func:`call_fault` says."""

def call_fault(exc: BaseException, call: object, caller_cancelled: bool) -> dict[str, Any]:
    """The envelope of ``call`` whose driver raised ``exc`` (a fault around the tool, not in it),
    logged on ``agentkit_tools.invoker``; ``KeyboardInterrupt``/``SystemExit`` and, when
    ``caller_cancelled``, a ``CancelledError`` are raised again instead (a ``GeneratorExit``
    given here is a callback's own failure, not a close)."""

@final
class Drive:
    """The driver of one call through a pipeline segment: a coroutine (``await`` it; a task steps
    it as it steps a coroutine) that performs every step the pipeline asks for until the
    envelope: it runs the body (a non-blocking sync body on this thread, an ``async`` body in
    this task within its deadline, a sync body on the worker pool; an awaitable result settled),
    asks the approver (only ``True`` approves; an approver that fails refuses, logged), sleeps
    before a retry (the rule's ``sleep``, else ``asyncio.sleep``), waits (shielded) for an
    identical call, reads and writes the shared idempotency store (a store that fails is logged
    and the call goes on without sharing), opens the tracing span and emits the audit record.
    What it awaits is stepped with ``yield from`` semantics. Any other exception aborts the call
    (``Call.abort``: its shared claim released and its record emitted, each in a task of its own
    the caller's cancellation does not reach, awaited until the abort's 1 s bound, one for every
    segment of the call; without awaiting when the drive is closed), then propagates; a drive
    of :func:`drive` answers with the fault envelope instead (see :func:`call_fault`)."""

    @staticmethod
    def chain(start: Any, call: object, ctx: object) -> Drive:
        """``Invoker.invoke`` through a chain with user middleware: awaits ``start(call, ctx)``
        for the envelope; a fault answers with the fault envelope (see :func:`call_fault`)."""

    @staticmethod
    def segment(pipe: Pipeline, tc: Any, nxt: Any = None) -> Drive:
        """The drive of the ``ToolCall`` ``tc`` a user middleware passed on to pipeline segment
        ``pipe`` (begun at the first step); ``nxt``: the handler after the segment (None: the
        tool body). Faults raise."""

    @staticmethod
    def go(m: Call, step: int, arg: Any, ctx: object) -> Drive:
        """The drive of call ``m`` from its step ``(step, arg)`` on. Faults raise."""

    @staticmethod
    def abort(m: Call, exc: BaseException, ctx: object) -> Drive:
        """Abort call ``m`` ended by ``exc`` (its release and record, as a drive's abort); ends
        with None, raises what interrupted it."""

    @staticmethod
    def closed(m: Call, ctx: object) -> None:
        """Abort call ``m`` as cancelled without awaiting: its release and record go as far as
        they get without suspending."""

    @property
    def was_closed(self) -> bool:
        """Whether the drive was closed (``close()``, or a ``GeneratorExit`` thrown in) before it
        ended: a ``GeneratorExit`` it then raises is that close; any other is a callback's own
        failure."""

    @property
    def cr_frame(self) -> Any:
        """None: the drive has no frame of its own."""

    @property
    def cr_running(self) -> bool:
        """True during one of the drive's own steps."""

    def __await__(self) -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...
    def send(self, value: object) -> Any:
        """Take the next step, what the drive awaits getting ``value``; returns what it yields,
        raises ``StopIteration`` with the envelope when the call is done."""

    def throw(self, exc: BaseException | type[BaseException], value: object = None, tb: object = None) -> Any:
        """Take the next step, what the drive awaits getting ``exc`` raised (``GeneratorExit``:
        closed, then raised); as :meth:`send`."""

    def close(self) -> None:
        """Close what the drive awaits, then abort the call as cancelled without awaiting."""

@final
class Turn:
    """The calls of one ``Invoker.invoke_many`` turn through pipeline ``pipe`` (built-in rules
    only) against ``registry``, each with context ``ctx``: ``await Turn(pipe, registry, calls,
    ctx)`` returns their envelopes in call order.

    Every call is admitted in call order before any body runs; a call answered at once is
    answered, every other call runs as a task of its own whose coroutine is a :class:`Relay`.
    The cancellation of the awaiting task cancels every task still running; once they have all
    ended, the calls still unanswered are aborted (their shared claims released, their records
    ``cancelled``) in a task of their own that further cancellations do not interrupt, and it
    propagates. ``KeyboardInterrupt``/``SystemExit`` from a call aborts it and is raised at the
    ``await`` the same way. Closed pending (its loop closed with it), each task left is closed
    (and cancelled if its loop still runs) and each call left aborted as cancelled without
    awaiting."""

    def __new__(cls, pipe: Pipeline, registry: CoreRegistry, calls: list[Any], ctx: object) -> Self: ...
    def __await__(self) -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...
    def send(self, value: object) -> Any:
        """Take the next step, what the turn awaits getting ``value``; returns what it yields,
        raises ``StopIteration`` with the envelopes when every call is answered."""

    def throw(self, exc: BaseException | type[BaseException], value: object = None, tb: object = None) -> Any:
        """Take the next step, what the turn awaits getting ``exc`` raised (``GeneratorExit``:
        closed, then raised); as :meth:`send`."""

    def close(self) -> None:
        """Close the turn: each task left is closed (and cancelled if its loop still runs), each
        call left aborted as cancelled without awaiting."""

def protocol_entries() -> dict[str, int]:
    """How many times the event loop (or anyone) entered the core through the coroutine protocol
    of :class:`BodyAwait`, :class:`Relay`, :class:`Drive`, :class:`JobAwait` and :class:`Turn`
    since the module was loaded, all threads together: keys ``"BodyAwait.__await__"``,
    ``"BodyAwait.__next__"``, ``"BodyAwait.send"``, ``"BodyAwait.throw"``, ``"BodyAwait.close"``
    and the same five for ``"Relay"``, ``"Drive"``, ``"JobAwait"`` and ``"Turn"``. These entries
    are made from C (a task stepping its coroutine, a coroutine its ``await``), so a profile hook
    does not see them."""

def observed_level(config: Any, ctx: object) -> int:
    """How an ``audit()`` rule ``config`` observes a call in ``ctx``: 0 nobody reads its record;
    1 a record (``config.sink`` set, the ``agentkit_tools.audit`` log enabled at DEBUG, or
    ``ctx.trace`` set); 2 a record and an OpenTelemetry span (a tracer provider is installed).
    Raises what reading ``ctx.trace`` raises."""

def host_allow_list(allow: Sequence[str]) -> list[str]:
    """The entries of an egress allow-list as the check reads them (lowercase, no brackets or
    final dot, ``*.x`` for subdomain-only entries, blanks dropped), exact ones first."""

#: How a body runs (the ``kind`` of a ``STEP_RUN``; see ``Pipeline``).
BODY_INLINE: int
BODY_ASYNC: int
BODY_WORKER: int
BODY_TOOL: int
#: The most conversations one Invoker keeps state for.
MAX_SCOPES: int
#: The most distinct calls whose repeat count one conversation keeps.
MAX_CALLS_PER_SCOPE: int

@final
class RetryPolicy:
    """Retry settings and the classification of failures by exception type, never by message
    text."""

    def __new__(
        cls,
        max_attempts: int = 3,
        base_s: float = 0.5,
        cap_s: float = 30.0,
        transient: tuple[type[BaseException], ...] | None = None,
    ) -> Self:
        """``max_attempts`` ≥ 1 (the first call included); ``base_s`` and ``cap_s``: finite
        seconds ≥ 0; ``transient``: extra exception classes to retry. Raises ``ValueError`` on
        out-of-range values."""

    @property
    def max_attempts(self) -> int: ...
    def decide(
        self, exc: BaseException, retry_safe: bool, attempt: int
    ) -> tuple[Literal["transient", "deadline", "permanent"], float | None]:
        """After failed attempt ``attempt`` (1-based) with ``exc``: ``(kind, delay_s)``.
        ``kind``: ``"deadline"`` for ``ToolTimeoutError`` (never retried); ``"transient"`` for
        ``ToolError(retriable=True)``, ``ConnectionError``, a ``TimeoutError`` of the body and
        the ``transient`` classes; ``"permanent"`` otherwise (argument and shape errors
        included). ``delay_s`` is the full-jitter wait in seconds before the next attempt, or
        None when the call is not retried (not transient, ``retry_safe`` false, or attempts
        exhausted)."""

    def delay_s(self, attempt: int) -> float:
        """A full-jitter delay in seconds, uniform in ``[0, min(cap_s, base_s *
        2**(attempt-1)))``."""

    def ceiling_s(self, attempt: int) -> float:
        """The upper bound of ``delay_s(attempt)``, in seconds."""

APPROVER_FAILED: str
"""The log line (``%``-format: the approver, the tool's name) of an approver that failed: the
call is refused."""

# ---------------------------------------------------------------------- worker pool hand-off

HANDOFF_SPIN_S: float
"""The longest a thread waiting in the worker pool's hand-off spins before it parks, in seconds:
50 µs (5e-05). The bound in use is this while recent waits were shorter than it, and 2 µs while
they were longer. Spinning runs with the interpreter lock released and yields the CPU
(``sched_yield``) between checks."""

POOL_MAX_WORKERS: int
"""Threads of a ``WorkerPool`` that run calls within their deadline: 8 per CPU this process may
run on, at least 32, at most 256."""

POOL_MAX_STUCK: int
"""Threads of a ``WorkerPool`` held by a call that overran its deadline tolerated on top of
``POOL_MAX_WORKERS`` (256)."""

@final
class Job:
    """One call for a ``WorkerPool``: its function, arguments and context copy, its deadline,
    where it is (queued, running, abandoned by its caller, done) and its outcome."""

@final
class JobAwait:
    """``await`` of the outcome of a job ``WorkerPool.start`` handed to a worker: the job's future
    awaited within the call's deadline (an entry of the loop's deadline timer, entered at the
    first step for the awaiting task and left on every way the await ends: at the deadline
    ``ToolTimeoutError``, also for a value taken past it (what the body raised stands), the task's own cancellation propagating, also one arriving at the same
    time when the task counts its cancellation requests: every task on Python 3.11+). Ended otherwise than by the outcome (the deadline, a cancellation,
    closed or dropped), the job is given up: queued, it never starts; running, its thread stops
    counting against ``POOL_MAX_WORKERS``."""

    def __await__(self) -> Self: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...
    def send(self, value: object) -> Any:
        """Take the next step, the future getting ``value``; returns what it yields, raises
        ``StopIteration`` with the outcome when it is there."""

    def throw(self, exc: BaseException | type[BaseException], value: object = None, tb: object = None) -> Any:
        """Take the next step, the future getting ``exc`` raised; as :meth:`send`."""

    def close(self) -> None:
        """The awaiting coroutine is closed: the job is given up."""

@final
class LoopJob:
    """One coroutine run on a ``LoopInbox``'s loop for a synchronous caller: the coroutine (with a
    copy of its caller's context) until the loop's thread starts it, its task while it runs, and
    the slot its outcome is handed back in."""

    def cancel(self) -> None:
        """On the loop's thread: the caller gave up; the task is cancelled, or the coroutine is
        closed without starting."""

@final
class LoopInbox:
    """The hand-off between synchronous callers and one long-lived event loop running on a
    thread of its own: a caller queues a coroutine and waits for its outcome with the
    interpreter lock released; the loop's thread, when it has nothing else to do, spins briefly
    for the next call in its selector (which asks :meth:`idle` before it polls) and hands the
    outcomes back only once it has released the interpreter lock there. Both sides spin first
    (at most ``HANDOFF_SPIN_S``), then park: calls that follow each other pass with no kernel
    wake-up. A call queued while the loop's thread is not spinning wakes it with
    ``loop.call_soon_threadsafe``."""

    def __new__(cls, event_loop: Any) -> Self: ...
    def call(self, coro: Any, timeout_s: float | None) -> tuple[bool, Any]:
        """Run ``coro`` on the loop (its task in a copy of this thread's context) and wait for its
        outcome, at most ``timeout_s`` seconds (None: as long as it takes), handling signals every
        50 ms: ``(True, value)``, or raises what it raised; ``(False, None)`` once the wait is
        over, the coroutine then cancelled (or never started), as it is when a signal's exception
        is raised here."""

    def idle(self, timeout: float | None) -> bool:
        """On the loop's thread, in its selector before it polls with ``timeout`` (seconds; None:
        until something happens): the outcomes of the calls whose task is done are handed back,
        then, when the loop has nothing else to do, the thread spins briefly for the next call.
        True when calls are queued: :meth:`start` them."""

    def start(self) -> None:
        """On the loop's thread: start the calls queued, each a task of the loop."""

@final
class WorkerPool:
    """The pool of worker threads that runs sync tool bodies: its jobs, its threads' accounting
    (at most ``POOL_MAX_WORKERS`` threads run calls within their deadline; a thread whose call
    overran its deadline stops counting, up to ``POOL_MAX_STUCK`` such threads; when every thread
    is held by an overrun call a call is refused) and the waits of its callers and workers.
    Waiting workers spin briefly (one at a time), then park; every wait releases the
    interpreter lock; a thread still waiting when the interpreter finalizes stays parked.

    ``start_worker(pool, n)`` starts worker thread ``n`` (a daemon thread calling
    ``next_job`` in a loop and the bodies it returns); ``saturated(name, stuck)`` is the error
    refusing a call of tool ``name`` when all ``stuck`` threads are held."""

    def __new__(cls, start_worker: Callable[[WorkerPool, int], Any], saturated: Callable[[str, int], BaseException]) -> Self: ...
    def start(self, func: Callable[[Any, Any], Any], a: Any, b: Any, limit_s: float | None, name: str) -> tuple[bool, Any]:
        """``func(a, b)`` on a worker thread for a caller on the running event loop, within
        ``limit_s`` seconds (None: no deadline): ``(True, value)`` when the outcome is here
        already (the caller waited for it briefly, with the interpreter lock released, when a
        worker was idle and the loop had nothing else to run), else ``(False, awaiting)``:
        ``await awaiting`` (a :class:`JobAwait`) for the outcome within the deadline. Raises what
        the body raised (a ``StopIteration`` as a ``RuntimeError`` caused by it; also when taken
        past the deadline), ``ToolTimeoutError`` at the deadline and for a value taken past it
        (at once when ``limit_s`` is not above 0: it never starts), the saturation error when no
        worker can take it."""

    def forked(self) -> bool:
        """Whether this process was forked since the pool was made (any fork, also one that runs
        none of Python's fork hooks): its threads are the parent's, none of them is here."""

    def run(self, func: Callable[[Any, Any], Any], a: Any, b: Any, limit_s: float | None, name: str) -> Any:
        """``func(a, b)`` on a worker thread, waited for by this thread (no event loop) within
        ``limit_s`` seconds: returns its value, raises what it raised, ``ToolTimeoutError`` at
        the deadline (a call never starts past it; an outcome handed over later is discarded),
        the saturation error when no worker can take it. This thread spins first (at most
        ``HANDOFF_SPIN_S``), then parks, waking every 50 ms so that a signal is handled."""

    def next_job(self, held: list[Any]) -> tuple[Any, Callable[..., Any], Any, Any]:
        """A worker thread's step: ``held`` is ``[job, ok, value]``, the job it ran last (None at
        first) and its outcome, taken out and handed to its caller (dropped when the caller gave
        up); then waits for the next job to run (one given up, or past its deadline, is
        skipped), puts it in ``held[0]`` and returns ``(context, func, a, b)`` to run as
        ``context.run(func, a, b)``."""

    def sizes(self) -> tuple[int, int, int]:
        """``(threads, idle, stuck)``: threads alive, waiting for a job with none promised to
        them, and held by a call that overran its deadline."""

    def starts(self) -> tuple[int, int]:
        """``(at_once, later)``: calls of ``start`` whose outcome was there by the end of its
        brief wait (the caller did not suspend), and the others (awaited through the job's
        future), since the pool was made."""

# ---------------------------------------------------------------------- memory

MEMORY_DEFAULT_ROOT: str
"""The memory root of a memory tree or tool unless another is given: ``"/memories"``."""

MEMORY_DEFAULT_MAX_BYTES: int
"""The default limit on the UTF-8 bytes of all file paths and texts of a memory tree: 8388608."""

MEMORY_DEFAULT_MAX_FILES: int
"""The default limit on the number of files of a memory tree: 4096."""

MEMORY_DEFAULT_MAX_ATTEMPTS: int
"""The default number of compare-and-set cycles of a store-backed memory command: 32."""

MEMORY_MAX_PATH_BYTES: int
"""The longest memory path, in UTF-8 bytes, as sent and once joined under the root: 1024."""

def memory_parse_call(args: Mapping[str, Any], root: str | None = None) -> tuple[str, tuple[Any, ...]]:
    """Check one call of the ``memory`` tool, resolve its paths under ``root`` (None:
    ``MEMORY_DEFAULT_ROOT``) and return the
    backend method and its positional arguments: ``("view", (path, view_range | None))``,
    ``("create", (path, file_text, overwrite))``, ``("str_replace", (path, old_str, new_str))``,
    ``("insert", (path, insert_line, insert_text))``, ``("delete", (path,))``,
    ``("rename", (old_path, new_path))`` (``path`` is accepted as an alias of ``old_path``).
    Raises ``MemoryCommandError`` (a ``ValueError`` and a ``ToolError``) naming every missing,
    misplaced or ill-typed argument or a path over 1,024 bytes, ``MemoryPermissionError`` for a
    path outside ``root`` or with a control character, ``TypeError`` when ``args`` is not a
    dict."""

@final
class MemoryTree:
    """One in-process memory tree (the engine of ``InMemoryFiles``). Thread-safe: every command
    runs under a lock and applies completely or changes nothing."""

    def __new__(cls, root: str | None = None, *, max_bytes: int | None = None, max_files: int | None = None) -> Self:
        """``root``: the POSIX directory every path is confined under. ``max_bytes``: the
        total UTF-8 bytes of all file paths and texts; ``max_files``: the file count. None: the
        ``MEMORY_DEFAULT_*`` value. Raises ``ValueError`` for a bad root or negative limits."""

    def apply(self, command: str, kwargs: Mapping[str, Any] | None = None, numbered: bool = False) -> str:
        """Apply ``view``/``create``/``str_replace``/``insert``/``delete``/``rename`` with its
        arguments (a dict); returns the result text. ``numbered=True``: a view answers as the
        ``memory`` tool shows the model (a file's lines numbered ``"{n:>6}\\t{line}"`` from 1,
        an empty directory or file said to be empty). Raises ``MemoryPermissionError`` (a path
        outside root), ``MemoryNotFoundError``, ``MemoryExistsError``, ``MemoryCommandError``,
        ``MemoryLimitError``."""

    def to_json(self) -> str:
        """The tree document (JSON text, format version 1)."""

    def files(self) -> dict[str, str]:
        """A copy of the files, ``{path: text}`` sorted by path."""

    @property
    def bytes(self) -> int:
        """Total UTF-8 bytes of all file paths and texts (what ``max_bytes`` bounds)."""

    @property
    def file_count(self) -> int:
        """Number of files."""

    @property
    def root(self) -> str:
        """The normalised root."""

@final
class MemoryStoreEngine:
    """The compare-and-set engine of ``StoreFiles``: the whole tree of a namespace is one JSON
    document at ``key`` of a StorePort, changed only with ``compare_and_set`` and retried
    against fresh content on a lost race."""

    def __new__(
        cls,
        key: str,
        *,
        root: str | None = None,
        max_bytes: int | None = None,
        max_files: int | None = None,
        max_attempts: int | None = None,
    ) -> Self:
        """``key``: the store key of the tree document; ``max_attempts``: 1-100000
        compare-and-set attempts per command. None: the ``MEMORY_DEFAULT_*`` value. Raises
        ``ValueError`` for out-of-range limits or a bad root."""

    def command(self, command: str, kwargs: Mapping[str, Any] | None = None, numbered: bool = False) -> MemoryCommand:
        """Check one command's arguments (as ``MemoryTree.apply`` does) for ``begin``. Raises
        ``MemoryCommandError``."""

    def read(self, command: str, kwargs: Mapping[str, Any] | None, doc: Any, numbered: bool = False) -> str:
        """Answer a command that never writes (``view``) from what ``store.get`` returned (as
        ``MemoryCasLoop.on_get`` takes it). Raises the command's error,
        ``MemoryCorruptError``, ``TypeError`` for a document of another type, ``ValueError``
        for a command that writes."""

    def begin(self, commands: Sequence[MemoryCommand]) -> MemoryCasLoop:
        """Start the loop of a batch of commands, applied in order and written together by one
        compare-and-set, each with its own answer. The caller drives it on its own event loop::

            value = loop.on_cached(copy)          # optional: a recent copy, maybe stale
            while True:
                if value is None:
                    doc = await store.get(key)
                    value = loop.on_get(doc)
                    if value is None: break
                delay = loop.on_cas(await store.compare_and_set(key, doc, value))
                if delay is None: break
                value = None
                await asyncio.sleep(delay)
            loop.outcomes()
        """

    @property
    def key(self) -> str:
        """The store key of the tree document."""

@final
class MemoryCommand:
    """One checked memory command (see ``MemoryStoreEngine.command``)."""

    @property
    def read_only(self) -> bool:
        """True for a command that never writes (``view``)."""

@final
class MemoryCasLoop:
    """A batch's compare-and-set loop (see ``MemoryStoreEngine.begin``)."""

    def on_cached(self, doc: Any) -> str | None:
        """Offer a recent copy of the document that may be stale, when a read is due. A
        ``str``: the new document to write with ``compare_and_set(key, doc, value)``; ``None``:
        read the document and call ``on_get`` (views, no-ops and errors are only answered from
        a fresh read; a won write proves the copy was current)."""

    def on_get(self, doc: Any) -> str | None:
        """Feed what ``store.get`` returned (``None``, the document text, or the document as a
        dict). ``None``: finished (see ``outcomes``); a ``str``: the new document to write with
        ``compare_and_set(key, doc, value)``. Raises ``TypeError`` for a value of another
        type."""

    def on_cas(self, won: Any) -> float | None:
        """Feed what ``compare_and_set`` returned (a bool). ``None``: finished (see
        ``outcomes``); a float: the seconds to wait (0.0 for none) before reading again.
        Raises ``TypeError`` for a non-bool."""

    def outcomes(self) -> list[str | BaseException] | None:
        """Once finished, one outcome per command in order: its answer, or its error (an
        exception instance, not raised): the command's own, ``StoreConflictError`` when every
        attempt lost its race, ``MemoryCorruptError`` for a document this version cannot read.
        ``None`` before."""

    @property
    def written(self) -> bool:
        """True once the batch's compare-and-set won."""

    @property
    def attempts(self) -> int:
        """Read-apply cycles used so far (1 = no lost race)."""
