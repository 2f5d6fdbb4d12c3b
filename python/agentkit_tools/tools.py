"""Defining tools: ``FunctionTool``, ``FunctionTool.from_callable`` and the ``@tool`` decorator."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import types
import typing
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, overload

from . import _core
from .errors import ToolArgumentError, ToolDefinitionError, ToolShapeError
from .frozen import FrozenDict, FrozenList
from .introspect import Introspection, introspect, is_typeddict, json_form
from .schema import Tool, ToolSchema

__all__ = ["FunctionTool", "tool", "OUTPUT_AUTO"]

if TYPE_CHECKING:
    from typing_extensions import ParamSpec, TypeVar

    # The decorated function's parameters and return type, for type checkers; a bare
    # ``FunctionTool`` (a hand-built tool) means ``FunctionTool[..., Any]``.
    P = ParamSpec("P", default=...)
    R = TypeVar("R", default=Any)
else:
    from typing import ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")

MAX_TIMEOUT_S = 2_592_000.0
"""The longest per-call deadline a tool may declare: 30 days, in seconds."""

MAX_RESULT_CHARS = 2**63 - 1
"""The largest ``max_result_chars`` a tool or registry may declare (what rendering a result takes)."""


def check_tool_options(
    name: str,
    timeout_s: Any = None,
    max_result_chars: Any = None,
    *,
    max_media_bytes: Any = None,
    owner: str | None = None,
) -> None:
    """The rule for a tool's numeric options (every way of making a tool, and a registry's
    defaults, apply it): ``timeout_s`` is None or a number of seconds greater than 0 and at most
    2,592,000 (30 days); ``max_result_chars`` is None or a whole number of characters, at least
    1 and at most :data:`MAX_RESULT_CHARS` (a larger one could not be applied when a result is
    rendered); ``max_media_bytes`` is None or a whole number of bytes, at least 1. Booleans, strings,
    NaN and infinity are refused. Raises ``ToolDefinitionError`` naming the tool (or ``owner``,
    for options that several tools share) and the option."""
    what = owner if owner is not None else f"tool {name!r}"
    if timeout_s is not None:
        ok = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
        if not ok or not 0 < timeout_s <= MAX_TIMEOUT_S:  # NaN fails the comparison too
            raise ToolDefinitionError(
                f"{what}: timeout_s={timeout_s!r} is not a deadline; pass a number of seconds "
                f"greater than 0 and at most {MAX_TIMEOUT_S:.0f} (30 days), or None for the "
                "dispatcher's default of 10 s"
            )
    if max_result_chars is not None:
        ok = isinstance(max_result_chars, int) and not isinstance(max_result_chars, bool)
        if not ok or not 1 <= max_result_chars <= MAX_RESULT_CHARS:
            raise ToolDefinitionError(
                f"{what}: max_result_chars={max_result_chars!r} is not a limit; pass a whole "
                f"number of characters (at least 1, at most {MAX_RESULT_CHARS}), or None for the "
                "registry's limit (default 2000)"
            )
    if max_media_bytes is not None:
        ok = isinstance(max_media_bytes, int) and not isinstance(max_media_bytes, bool)
        if not ok or max_media_bytes < 1:
            raise ToolDefinitionError(
                f"{what}: max_media_bytes={max_media_bytes!r} is not a limit; pass a whole "
                "number of bytes (at least 1), or None for the default of 5 MiB"
            )


class _Undeclared:
    """The default of ``from_callable(side_effecting=...)``: False (the reference's default), but
    remembered as "not declared"."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "False"


_UNDECLARED: Any = _Undeclared()
_CO_GENERATORS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


class _OutputAuto:
    """Sentinel: infer ``output_schema`` from the return annotation."""

    _instance: _OutputAuto | None = None

    def __new__(cls) -> _OutputAuto:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OUTPUT_AUTO"


#: The default of ``output_schema=``: infer it from the return annotation when that is a
#: pydantic model, dataclass, attrs class or TypedDict.
OUTPUT_AUTO: Any = _OutputAuto()
_REQUIRED: Any = object()
#: Argument values that are JSON already (nested values are the core's to check).
_PLAIN = frozenset({str, int, float, bool, type(None), dict, list})


def _is_structured_class(tp: Any) -> bool:
    return isinstance(tp, type) and (
        dataclasses.is_dataclass(tp)
        or is_typeddict(tp)
        or (hasattr(tp, "model_fields") and hasattr(tp, "model_validate"))
        or hasattr(tp, "__attrs_attrs__")
    )


class _OutputCheck:
    """A compiled output schema: a class (instances pass as they are; a matching dict is built
    into the class) or a JSON Schema dict."""

    def __init__(self, spec: Any) -> None:
        self.cls: type | None = None
        if isinstance(spec, Mapping):
            schema = dict(spec)
            self.expected = str(schema.get("title") or "schema")
            self.builder: Callable[[Any], Any] | None = None
        else:
            from .introspect import _Defs, _schema

            defs = _Defs()
            schema, self.builder, _ = _schema(spec, defs)
            if defs.used:
                schema = {**schema, "$defs": defs.render()}
            self.cls = None if is_typeddict(spec) else spec
            self.expected = getattr(spec, "__name__", str(spec))
        self.schema = schema
        #: The schema of the result as JSON (what MCP's structuredContent carries): the serialised
        #: form of a class (pydantic's serialization aliases and computed fields).
        self.advertised = schema
        if not isinstance(spec, Mapping):
            from .introspect import output_schema_for

            try:
                self.advertised = output_schema_for(spec)
            except Exception:
                pass
        self.validator = _core.SchemaValidator(schema)

    def check(self, tool_name: str, value: Any) -> Any:
        if self.cls is not None and isinstance(value, self.cls):
            return value
        problems = self.validator.problems(value)
        if problems:
            raise ToolShapeError(tool_name, self.expected, value, [f"{p}: {r}" for p, r in problems])
        if self.builder is not None and isinstance(value, dict):
            return self.builder(value)
        return value


def _emit_shape_mismatch(ctx: Any, err: ToolShapeError) -> None:
    """Report a shape mismatch on ``ctx.trace`` and the current OpenTelemetry span, never
    letting a broken tracer break the call."""
    attributes = {"tool": err.tool_name, "expected": err.expected}
    try:
        trace = getattr(ctx, "trace", None)
        if trace is not None:
            emit = (
                getattr(trace, "add_event_to_current_span", None)
                or getattr(trace, "event", None)
                or getattr(trace, "add_event", None)
                or trace
            )
            emit("tool.shape_mismatch", attributes)
    except Exception:
        pass
    try:
        from opentelemetry import trace as otel_trace

        otel_trace.get_current_span().add_event("tool.shape_mismatch", attributes)
    except Exception:
        pass


class _Wrapped:
    """``tool.__wrapped__``: the user's function (else ``fn``). Absent on the class itself, so
    ``inspect.signature(FunctionTool)`` reads the constructor instead of following a property."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            raise AttributeError("__wrapped__")
        return instance.func if instance.func is not None else instance.fn


@dataclass(eq=False)
class FunctionTool(Generic[P, R]):
    """A tool backed by a Python callable.

    ``fn(args, ctx)`` is the raw callable (sync or async). Built by ``from_callable``/``@tool``
    it validates and converts the model's arguments before the body runs; constructed directly it
    is trusted as given. Calling the object calls the user's function directly, unvalidated (for
    plain unit tests), and type checkers see that function's signature: ``FunctionTool[P, R]``
    carries its parameters ``P`` and return type ``R``.
    """

    name: str
    fn: Callable[[Any, Any], Any]
    description: str
    side_effecting: bool
    schema: ToolSchema | None = None
    idempotent: bool = False
    requires_approval: bool = False
    caps: tuple[str, ...] = ()
    url_arg: str | None = None
    output_schema: Any = None
    #: Per-call deadline in seconds (None: the dispatcher's default, 10 s).
    timeout_s: float | None = None
    #: Limit of the rendered result in characters (None: the registry's, default 2000).
    max_result_chars: int | None = None
    #: A sync body that never blocks (pure computation): the Invoker calls it on the event loop
    #: instead of hopping to a worker thread. Leave False for anything doing I/O.
    non_blocking: bool = False
    #: False when nobody said whether the tool changes the world (``from_callable`` or
    #: ``from_tools`` on a plain function without ``side_effecting=``): it is treated as
    #: read-only, but lint reports it, its MCP annotations give no read-only/destructive hint
    #: and the retry middleware does not repeat it.
    effects_declared: bool = True
    #: For a side-effecting tool: whether it may destroy or overwrite data (None: assume so, MCP's
    #: default). ``False`` says it only adds (``create_event``): MCP ``destructiveHint: false``.
    destructive: bool | None = None
    #: The user's function, when built from one.
    func: Callable[P, R] | None = field(default=None, repr=False)
    _core: Any = field(default=None, repr=False, compare=False)
    _output: _OutputCheck | None = field(default=None, repr=False, compare=False)
    _is_async: bool | None = field(default=None, repr=False, compare=False)
    _lint: Any = field(default=None, repr=False, compare=False)
    _bound: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_tool_options(self.name, self.timeout_s, self.max_result_chars)
        if self._is_async is None:
            self._is_async = inspect.iscoroutinefunction(self.fn)
        if self.output_schema is not None and self._output is None:
            self._output = _OutputCheck(self.output_schema)
        self.caps = tuple(self.caps)

    @property
    def read_only(self) -> bool:
        """The inverse of ``side_effecting``."""
        return not self.side_effecting

    __wrapped__ = _Wrapped()

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """``@tool`` on a method inside its class body: reached through an instance (or, for a
        ``cls`` method, through the class) the tool binds to it, so ``Shop().search`` is a
        working tool of that instance. Bound tools are cached per instance."""
        info = self._lint
        first = getattr(info, "unbound_first", None)
        if first is None or self.func is None:
            return self
        target = owner if first == "cls" else instance
        if target is None:
            return self
        try:
            bound = self._bound.get(target) if self._bound is not None else None
        except TypeError:  # not weak-referenceable: never cached, bound afresh each time
            bound = None
        if bound is None:
            func = self.func.__func__ if isinstance(self.func, classmethod) else self.func
            bound = FunctionTool.from_callable(
                func.__get__(target, owner),
                name=self.name,
                description=self.description,
                side_effecting=self.side_effecting,
                idempotent=self.idempotent,
                requires_approval=self.requires_approval,
                caps=self.caps,
                url_arg=self.url_arg,
                output_schema=self.output_schema,
                timeout_s=self.timeout_s,
                max_result_chars=self.max_result_chars,
                non_blocking=self.non_blocking,
                destructive=self.destructive,
            )
            bound.effects_declared = self.effects_declared
            try:
                if self._bound is None:
                    self._bound = weakref.WeakKeyDictionary()
                self._bound[target] = bound
            except TypeError:  # not weak-referenceable: bind afresh each time
                pass
        return bound

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the user's function directly (unvalidated), as if undecorated."""
        if self.func is not None:
            return self.func(*args, **kwargs)
        return self.fn(kwargs, None)  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- running

    def validate(self, args: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Check a call's arguments (a mapping or raw JSON text) against the input schema and
        return them as a fresh dict. Raises ``ToolArgumentError`` with every problem at once."""
        return core_of(self).validate(args)  # type: ignore[no-any-return]

    async def run(self, args: Mapping[str, Any] | str, ctx: Any = None) -> Any:
        """Validate and convert ``args``, run the body (awaited when async; a sync body in a
        worker thread, never on the event loop; an awaitable it returns is awaited too), then
        check the result against ``output_schema``. Raises ``ToolArgumentError`` before the
        body runs, ``ToolShapeError`` after it."""
        if self._core is None:
            return await self.run_validated(args, ctx)
        if type(args) is not dict or not all(type(v) in _PLAIN for v in args.values()):
            # An in-process caller may pass Python values (Enum members, dataclass instances,
            # datetimes, tuples): checked as their JSON form, converted back for the body.
            args = json_form(args) if isinstance(args, Mapping) else args
        try:
            kwargs = self._core.validate(args)
        except ToolArgumentError as exc:
            # The same deeper inside (a list of dataclass instances holding Enum members).
            if not (isinstance(args, Mapping) and len(exc.invalid) == 1 and exc.invalid[0][0] == "<arguments>"):
                raise
            kwargs = self._core.validate(json_form(args))
        return await self.run_validated(kwargs, ctx)

    async def run_validated(self, kwargs: Mapping[str, Any], ctx: Any = None) -> Any:
        """``run`` for arguments that were already validated by the dispatcher. The body runs as
        on every path (no deadline here: ``timeout_s`` is the dispatcher's): a sync body on the
        worker pool, an async one (or an awaitable a sync body returns) stepped in the caller's
        task; either in a copy of the caller's ``contextvars``."""
        from ._runner import BodyAwait, in_worker, start_in_copy

        if self._is_async:
            coro, within = start_in_copy(self.fn, kwargs, ctx)  # a sync prelude is the body's too
            result = await BodyAwait(coro, None, self.name, None, within)
        else:
            result = await in_worker(self.fn, kwargs, ctx)
            if inspect.isawaitable(result):
                result = await BodyAwait(result, None, self.name)
        return self.check_output(result, ctx)

    def check_output(self, result: Any, ctx: Any = None) -> Any:
        """Check ``result`` against ``output_schema``: an instance of the declared class
        passes as the same object; a matching dict is built into the class; anything else raises
        ``ToolShapeError`` (after reporting a ``tool.shape_mismatch`` event)."""
        if self._output is None:
            return result
        try:
            return self._output.check(self.name, result)
        except ToolShapeError as err:
            _emit_shape_mismatch(ctx, err)
            raise

    # ---------------------------------------------------------------- provider renderings

    def to_anthropic(self) -> dict[str, Any]:
        """``{"name", "description", "input_schema"}`` for the Anthropic Messages API.
        Raises ``ValueError`` when the tool has no schema."""
        from .providers import render

        return render(self, "anthropic")

    def to_openai(self, strict: bool = False, api: str = "chat") -> dict[str, Any]:
        """An OpenAI ``function`` tool for ``api="chat"`` or ``"responses"``; ``strict=True`` gives
        the Structured Outputs form (``"strict": false`` with the plain schema when the tool
        cannot be made strict; ``agentkit_tools.lint`` says why)."""
        from .providers import _provider, render

        return render(self, _provider("openai", strict, api))

    def to_gemini(self) -> dict[str, Any]:
        """A Gemini ``FunctionDeclaration`` (its OpenAPI schema subset)."""
        from .providers import render

        return render(self, "gemini")

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``tools/list`` entry with ``outputSchema`` (when the tool has an object output
        schema) and ``readOnlyHint``/``destructiveHint``/``idempotentHint`` from the flags."""
        from .providers import render

        return render(self, "mcp")

    # ---------------------------------------------------------------- defining

    @classmethod
    def from_callable(
        cls,
        func: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        side_effecting: bool | None = _UNDECLARED,
        idempotent: bool = False,
        requires_approval: bool = False,
        caps: tuple[str, ...] = (),
        url_arg: str | None = None,
        output_schema: Any = OUTPUT_AUTO,
        timeout_s: float | None = None,
        max_result_chars: int | None = None,
        non_blocking: bool = False,
        destructive: bool | None = None,
    ) -> FunctionTool[P, R]:
        """Turn a Python callable into a tool.

        Reads the signature, type hints (``typing.get_type_hints``; an unresolvable hint accepts
        any value) and docstring (Google, NumPy or Sphinx) into the input schema and description.
        Functions, bound methods, ``functools.partial``, callable objects, static and class
        methods all work. A parameter named ``ctx``/``context`` (unannotated or annotated
        ``RunContext``/``Ctx``/``ToolContext``) receives the run context and is not advertised;
        ``**kwargs`` receives undeclared keys.

        Effects: ``side_effecting`` left out keeps the read-only default but marks the tool as
        undeclared (``effects_declared=False``: lint reports it, MCP gets no read-only or
        destructive hint, retry does not repeat it); ``side_effecting=None`` counts as declared
        (False). ``destructive=False`` says a side-effecting tool only adds (MCP
        ``destructiveHint: false``).

        Raises ``ToolDefinitionError``: a name outside ``^[a-zA-Z0-9_-]{1,64}$``, a generator
        function (sync or async: a call returns one result), ``*args``, a
        description under 30 characters, a TODO/FIXME/XXX/HACK line in the docstring the model
        would read, a ``url_arg`` that is not a parameter, a ``timeout_s`` that is not a number
        of seconds in (0, 2592000] or a ``max_result_chars`` that is not a whole number >= 1
        (booleans and strings are refused too).
        """
        info = introspect(func, name or None)
        _core.check_tool_name(info.name)
        check_tool_options(info.name, timeout_s, max_result_chars)
        if (
            bool(func.__code__.co_flags & _CO_GENERATORS)
            if type(func) is types.FunctionType
            else inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func)
        ):
            raise ToolDefinitionError(
                f"tool {info.name!r} is a generator function: a tool call returns one result, so "
                "collect the items into a list and return it"
            )
        core, parameters = _core.define_function_tool(
            info.name,
            description,
            info.doc,
            info.params,
            info.non_json_defaults,
            info.var_keyword,
            [info.context_param] if info.context_param else [],
            info.defs or None,
            FrozenDict,
            FrozenList,
        )
        if url_arg is not None and url_arg not in core.accepted:
            raise ToolDefinitionError(
                f"tool {info.name!r}: url_arg={url_arg!r} is not one of its parameters {core.accepted}"
            )
        if output_schema is OUTPUT_AUTO:
            hint = info.return_hint
            output_schema = hint if _is_structured_class(hint) else None
        tool_description = core.description
        fields = {
            "name": info.name,
            "fn": _make_invoker(func, info),
            "description": tool_description,
            "side_effecting": bool(side_effecting),
            "schema": ToolSchema._of_frozen(info.name, tool_description, parameters),
            "idempotent": idempotent,
            "requires_approval": requires_approval,
            "caps": tuple(caps),
            "url_arg": url_arg,
            "output_schema": output_schema,
            "timeout_s": timeout_s,
            "max_result_chars": max_result_chars,
            "non_blocking": non_blocking,
            "effects_declared": side_effecting is not _UNDECLARED,
            "destructive": destructive,
            "func": func,
            "_core": core,
            "_is_async": info.is_async,
            "_lint": info,
        }
        if cls is not FunctionTool:  # a subclass may extend __init__/__post_init__
            return cls(**fields)
        # Every field is given in its final form: set them as the dataclass __init__ and
        # __post_init__ would, without their per-field work.
        fields["_output"] = _OutputCheck(output_schema) if output_schema is not None else None
        fields["_bound"] = None
        self = object.__new__(FunctionTool)
        self.__dict__.update(fields)
        return self


def _core_from_schema(t: Any) -> Any:
    """A compiled core for any Tool-shaped object (hand-built tools, other implementations)."""
    schema = getattr(t, "schema", None)
    parameters = dict(schema.parameters) if schema is not None else {"type": "object"}
    return _core.CoreTool.from_schema(t.name, parameters, [], getattr(t, "description", "") or "")


def _make_invoker(func: Callable[..., Any], info: Introspection) -> Callable[[Any, Any], Any]:
    """``fn(args, ctx)``: convert validated arguments for the body and call it."""
    converters = info.converters
    context_param = info.context_param
    positional = info.positional_only
    name = info.name

    def prepare(args: Mapping[str, Any], ctx: Any) -> tuple[list[Any], dict[str, Any]]:
        kwargs = dict(args)
        for key, conv in converters.items():
            # Only keys that were sent; a null the schema admitted is the converter's to read
            # (Optional converters keep None, an Enum with a None-valued member maps it).
            if key in kwargs:
                try:
                    kwargs[key] = conv(kwargs[key])
                except RuntimeError:
                    raise  # a defect of the definition (an undefined class), not of the arguments
                except Exception as exc:
                    raise ToolArgumentError(
                        name, accepted=tuple(p[0] for p in info.params), invalid=((key, f"cannot be read: {exc}"),)
                    ) from exc
        if context_param is not None:
            kwargs[context_param] = ctx
        pos = [kwargs.pop(p) for p in positional if p in kwargs]
        return pos, kwargs

    if not converters and context_param is None and not positional:
        # Nothing to convert, inject or pass by position (the common case): call the body with
        # the validated mapping itself; for an async body this returns its coroutine directly,
        # so awaiting it adds no frame of ours.
        def invoke_plain(args: Mapping[str, Any], ctx: Any) -> Any:
            return func(**args)

        return invoke_plain

    if info.is_async:

        async def invoke_async(args: Mapping[str, Any], ctx: Any) -> Any:
            pos, kwargs = prepare(args, ctx)
            return await func(*pos, **kwargs)

        return invoke_async

    def invoke(args: Mapping[str, Any], ctx: Any) -> Any:
        pos, kwargs = prepare(args, ctx)
        return func(*pos, **kwargs)

    return invoke


# The code of the ``fn`` wrappers ``_make_invoker`` builds. Each reads the arguments mapping once
# (``func(**args)`` or ``dict(args)``) and keeps no reference to it, so the Invoker's core hands
# them a plain dict whose nested containers are frozen instead of a ``FrozenDict`` copy.
_ARGS_UNPACKED = tuple(
    c for c in _make_invoker.__code__.co_consts
    if isinstance(c, types.CodeType) and c.co_name in ("invoke_plain", "invoke_async", "invoke")
)
assert len(_ARGS_UNPACKED) == 3, _ARGS_UNPACKED


@overload
def tool(
    func: Callable[P, R],
    *,
    side_effecting: Any = ...,
    idempotent: bool = ...,
    name: str | None = ...,
    description: str | None = ...,
    requires_approval: bool = ...,
    caps: tuple[str, ...] = ...,
    url_arg: str | None = ...,
    output_schema: Any = ...,
    timeout_s: float | None = ...,
    read_only: bool | None = ...,
    max_result_chars: int | None = ...,
    non_blocking: bool = ...,
    registry: Any = ...,
    destructive: bool | None = ...,
) -> FunctionTool[P, R]: ...


@overload
def tool(
    func: None = None,
    *,
    side_effecting: Any = ...,
    idempotent: bool = ...,
    name: str | None = ...,
    description: str | None = ...,
    requires_approval: bool = ...,
    caps: tuple[str, ...] = ...,
    url_arg: str | None = ...,
    output_schema: Any = ...,
    timeout_s: float | None = ...,
    read_only: bool | None = ...,
    max_result_chars: int | None = ...,
    non_blocking: bool = ...,
    registry: Any = ...,
    destructive: bool | None = ...,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    func: Callable[..., Any] | None = None,
    *,
    side_effecting: Any = _REQUIRED,
    idempotent: bool = False,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    caps: tuple[str, ...] = (),
    url_arg: str | None = None,
    output_schema: Any = OUTPUT_AUTO,
    timeout_s: float | None = None,
    read_only: bool | None = None,
    max_result_chars: int | None = None,
    non_blocking: bool = False,
    registry: Any = None,
    destructive: bool | None = None,
) -> Any:
    """Declare a tool: ``@tool(side_effecting=...)`` returns a decorator, ``tool(fn,
    side_effecting=...)`` the ``FunctionTool``.

    Declaring whether the tool changes the world is mandatory: ``side_effecting=`` or its inverse
    ``read_only=``; ``side_effecting=None`` counts as declared (False). ``timeout_s`` is the
    per-call deadline in seconds (None: the dispatcher's 10 s); ``non_blocking=True`` lets the
    Invoker run a sync body on the event loop (only for pure computation); ``destructive=False``
    says a side-effecting tool only adds, never destroys or overwrites (MCP ``destructiveHint:
    false``; None: it may, MCP's default); ``registry`` also registers the tool there. Raises ``ToolDefinitionError`` (missing or contradictory declaration, and every
    ``from_callable`` check).
    """
    if side_effecting is _REQUIRED and read_only is None:
        raise ToolDefinitionError(
            "tool(...) needs side_effecting=True/False (or read_only=): declare whether the tool "
            "changes the world, so approval, idempotency and retry can treat it safely"
        )
    if side_effecting is not _REQUIRED and read_only is not None and bool(side_effecting) == bool(read_only):
        raise ToolDefinitionError(
            f"tool(...) got side_effecting={side_effecting!r} and read_only={read_only!r}, which "
            "contradict each other; pass only one of them"
        )
    effecting = bool(side_effecting) if side_effecting is not _REQUIRED else not read_only

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        if isinstance(fn, FunctionTool):
            raise ToolDefinitionError(f"{fn.name!r} is already a tool; apply @tool once")
        t = FunctionTool.from_callable(
            fn,
            name=name or None,
            description=description,
            side_effecting=effecting,
            idempotent=idempotent,
            requires_approval=requires_approval,
            caps=caps,
            url_arg=url_arg,
            output_schema=output_schema,
            timeout_s=timeout_s,
            max_result_chars=max_result_chars,
            non_blocking=non_blocking,
            destructive=destructive,
        )
        if registry is not None:
            registry.register(t)
        return t

    if func is not None:
        return decorate(func)
    return decorate


def ensure_tool(obj: Any) -> Any:
    """``obj`` if it already has the ``Tool`` shape, else ``FunctionTool.from_callable(obj)``
    (read-only by default; the docstring floor applies)."""
    if isinstance(obj, FunctionTool) or isinstance(obj, Tool):
        return obj
    if callable(obj):
        return FunctionTool.from_callable(obj)
    raise TypeError(f"cannot register {obj!r}: expected a tool or a callable")


def core_of(t: Any) -> Any:
    """The compiled core of a tool (built from its schema when it was not made by us)."""
    core = getattr(t, "_core", None)
    return core if core is not None else _core_from_schema(t)

