"""Reading a Python callable into what the Rust core needs.

This module does only what needs Python's own reflection: the signature (read straight from
the code object of a plain function, ``inspect.signature`` for every other callable), the hints
(``typing.get_type_hints`` when a hint needs resolving) and the classes behind the hints. It
turns each parameter's hint into a JSON Schema fragment and, where the body needs a richer
Python value than JSON gives (an ``Enum`` member, a ``set``, a dataclass, a ``datetime``), a
converter applied after validation.
Docstring parsing, description rules and schema assembly happen in the core.
"""

from __future__ import annotations

import base64
import collections.abc as cabc
import dataclasses
import datetime as dt
import decimal
import enum
import functools
import inspect
import pathlib
import re
import sys
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import ToolDefinitionError


def _core_patterns() -> dict[str, str]:
    from ._core import FORMAT_PATTERNS

    return FORMAT_PATTERNS

__all__ = ["Introspection", "introspect", "schema_for", "json_form", "is_typeddict", "CONTEXT_TYPE_NAMES"]

#: Annotations (checked by class name, so string annotations work) that mark an injected
#: run-context parameter.
CONTEXT_TYPE_NAMES = frozenset({"RunContext", "Ctx", "ToolContext"})
_CONTEXT_PARAM_NAMES = ("ctx", "context")

Converter = Callable[[Any], Any]
_NO_DEFAULT = object()


@dataclass
class Introspection:
    """What introspection found in one callable."""

    name: str
    doc: str | None
    #: ``(name, schema fragment, required, JSON default or None, Annotated description)``
    params: list[tuple[str, dict[str, Any], bool, Any, str | None]]
    #: True when the callable takes ``**kwargs`` (the input schema stays open).
    var_keyword: bool
    #: The parameter receiving the run context, if any.
    context_param: str | None
    #: Parameters that must be passed positionally, in order.
    positional_only: tuple[str, ...]
    #: Per-argument converters applied after validation, for the arguments that need one.
    converters: dict[str, Converter]
    #: Hints that could not be resolved (parameter name -> why); those parameters accept any value.
    unresolved: dict[str, str] = field(default_factory=dict)
    #: Parameters whose default is not JSON-representable (left out of the schema).
    non_json_defaults: tuple[str, ...] = ()
    #: The resolved return annotation (``inspect.Signature.empty`` when absent).
    return_hint: Any = inspect.Signature.empty
    #: True when calling the target returns an awaitable (an ``async def``).
    is_async: bool = False
    #: ``$defs`` for genuinely recursive structured types (empty when there are none).
    defs: dict[str, Any] = field(default_factory=dict)
    #: ``"self"``/``"cls"`` when that first parameter was skipped on a function that is not bound
    #: (a method decorated inside its class body, a raw classmethod): nothing will pass it.
    unbound_first: str | None = None


def _unwrap_callable(func: Any) -> tuple[Any, Any]:
    """The object whose signature describes the call, and the one whose docstring describes the tool."""
    if isinstance(func, staticmethod | classmethod):
        func = func.__func__
    doc_source = func
    if isinstance(func, functools.partial):
        doc_source = func.func
    elif not (inspect.isfunction(func) or inspect.ismethod(func) or inspect.isbuiltin(func)):
        call = getattr(type(func), "__call__", None)
        if call is not None and (func.__doc__ is None or func.__doc__ == type(func).__doc__):
            doc_source = func if type(func).__doc__ else call
    return func, doc_source


def _callable_name(func: Any) -> str:
    target = func.func if isinstance(func, functools.partial) else func
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) else type(target).__name__


def _is_async(func: Any) -> bool:
    target = func
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(type(target), "__call__", None)
    return not inspect.isroutine(target) and call is not None and inspect.iscoroutinefunction(call)


def _hints(func: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Resolved hints with ``Annotated`` kept; per-name fallbacks when the whole set fails."""
    target = func
    while isinstance(target, functools.partial):
        target = target.func
    if not inspect.isroutine(target) and callable(target):
        target = type(target).__call__
    try:
        return typing.get_type_hints(target, include_extras=True), {}
    except Exception:
        pass
    # Resolve one annotation at a time so a single bad hint degrades only its own parameter.
    raw = getattr(inspect.unwrap(target), "__annotations__", {}) or {}
    globalns = getattr(inspect.unwrap(target), "__globals__", {})
    hints: dict[str, Any] = {}
    unresolved: dict[str, str] = {}
    for name, ann in raw.items():
        try:
            for _ in range(2):  # a quoted hint under PEP 563 is a string of a string
                if isinstance(ann, str):
                    ann = eval(ann, globalns, {})  # noqa: S307 - a hint the user wrote, like typing does
            hints[name] = ann
        except Exception as exc:
            unresolved[name] = f"{ann!r} could not be resolved ({type(exc).__name__}: {exc})"
    return hints, unresolved


def _is_context(name: str, annotation: Any) -> bool:
    if name not in _CONTEXT_PARAM_NAMES:
        return False
    if annotation is inspect.Parameter.empty:
        return True
    if isinstance(annotation, str):
        # A quoted hint under PEP 563 arrives as a string of a string: "'RunContext'".
        return annotation.strip("'\" ").split("[")[0].split(".")[-1] in CONTEXT_TYPE_NAMES
    target = typing.get_origin(annotation) or annotation
    return getattr(target, "__name__", None) in CONTEXT_TYPE_NAMES


_JSON_ATOMS = (str, int)  # bool is an int


def _json_default(value: Any) -> tuple[bool, Any]:
    """(representable, JSON value) of a default."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return False, None  # the core's JSON values hold 64-bit integers: left out of the schema
    if value is None or isinstance(value, _JSON_ATOMS):
        return True, value
    if isinstance(value, float):
        return (value == value and value not in (float("inf"), float("-inf"))), value
    if isinstance(value, enum.Enum):
        return _json_default(value.value)
    if isinstance(value, list | tuple | frozenset | set):
        items = _sorted_set(value) if isinstance(value, set | frozenset) else value
        out = []
        for v in items:
            ok, j = _json_default(v)
            if not ok:
                return False, None
            out.append(j)
        return True, out
    if isinstance(value, dict):
        obj = {}
        for k, v in value.items():
            ok, j = _json_default(v)
            if not isinstance(k, str) or not ok:
                return False, None
            obj[k] = j
        return True, obj
    fmt = _format_of(type(value))
    if fmt is not None and not isinstance(value, bool | int | float):
        try:
            return True, fmt[2](value)
        except ValueError:
            return False, None
    return False, None


def json_form(value: Any, _depth: int = 0) -> Any:
    """The JSON form of a Python value an in-process caller passed as an argument: an ``Enum``
    member's value, a dataclass/NamedTuple/attrs instance's fields, a pydantic model's
    ``model_dump(mode="json", by_alias=True)``, a format type's string (``datetime``, ``UUID``,
    ``bytes`` as base64, ...), tuples and sets as lists. The arguments are then validated as that
    form and converted back to the annotated types for the body. Anything else is returned as it
    is (the validator reports what JSON cannot carry)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if _depth > 200:
        return value  # the validator refuses the nesting
    inner = _depth + 1
    if isinstance(value, enum.Enum):
        return json_form(value.value, inner)
    if isinstance(value, cabc.Mapping):
        return {k: json_form(v, inner) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: json_form(v, inner) for k, v in zip(value._fields, value)}
    if isinstance(value, list | tuple):
        return [json_form(v, inner) for v in value]
    if isinstance(value, set | frozenset):
        return [json_form(v, inner) for v in _sorted_set(value)]
    if isinstance(value, bool | int | float | str):  # subclasses (IntEnum handled above)
        return value
    cls = type(value)
    if dataclasses.is_dataclass(cls):
        return {f.name: json_form(getattr(value, f.name), inner) for f in dataclasses.fields(value) if f.init}
    if hasattr(cls, "model_fields") and hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if hasattr(cls, "__attrs_attrs__"):
        return {(getattr(a, "alias", None) or a.name): json_form(getattr(value, a.name), inner) for a in cls.__attrs_attrs__ if a.init}
    if isinstance(value, bytearray):
        return base64.b64encode(bytes(value)).decode()
    fmt = _format_of(cls)
    if fmt is not None:
        try:
            return fmt[2](value)
        except ValueError:
            return value
    return value


def _sorted_set(values: set[Any] | frozenset[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=repr)


_EMPTY = inspect.Parameter.empty
_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD
_FUNCTION = types.FunctionType
_NONE_TYPE = type(None)
_CO_VARARGS = inspect.CO_VARARGS
_CO_VARKEYWORDS = inspect.CO_VARKEYWORDS
_CO_COROUTINE = inspect.CO_COROUTINE
_CO_GENERATORS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
#: ``typing.get_type_hints`` before Python 3.11 made the hint of a parameter defaulting to None
#: ``Optional[hint]``; the fast path does the same there so both paths agree on every version.
_OPTIONAL_FOR_NONE_DEFAULT = sys.version_info < (3, 11)
_STRING_HINTS = (str, typing.ForwardRef)

#: ``(name, kind, default, raw annotation)`` of one parameter, as ``inspect.Parameter`` has them.
_Param = tuple[str, Any, Any, Any]


def _is_plain_function(func: Any) -> bool:
    """A ``def``/``lambda`` function with nothing attached that ``inspect.signature`` would
    honour instead of its code (``__wrapped__``, ``__signature__``, ``_partialmethod``, ...):
    its signature can be read from ``__code__``, ``__defaults__`` and ``__kwdefaults__``."""
    return type(func) is _FUNCTION and not func.__dict__


def _code_parameters(func: types.FunctionType, annotations: dict[str, Any]) -> list[_Param] | None:
    """The parameters of a plain function in ``inspect.signature`` order (positional-only,
    positional-or-keyword, keyword-only, ``**kwargs``), read from its code object as
    ``inspect._signature_from_function`` does. None when the function takes ``*args``: the
    general path reports that."""
    code = func.__code__
    flags = code.co_flags
    if flags & _CO_VARARGS:
        return None
    names = code.co_varnames
    n_pos = code.co_argcount
    n_posonly = code.co_posonlyargcount
    n_kwonly = code.co_kwonlyargcount
    defaults = func.__defaults__ or ()
    first_default = n_pos - len(defaults)
    get = annotations.get
    params: list[_Param] = []
    for i in range(n_pos):
        pname = names[i]
        params.append((
            pname,
            _POSITIONAL_ONLY if i < n_posonly else _POSITIONAL_OR_KEYWORD,
            defaults[i - first_default] if i >= first_default else _EMPTY,
            get(pname, _EMPTY),
        ))
    if n_kwonly:
        kwdefaults = func.__kwdefaults__ or {}
        for pname in names[n_pos:n_pos + n_kwonly]:
            params.append((pname, _KEYWORD_ONLY, kwdefaults.get(pname, _EMPTY), get(pname, _EMPTY)))
    if flags & _CO_VARKEYWORDS:
        pname = names[n_pos + n_kwonly]
        params.append((pname, _VAR_KEYWORD, _EMPTY, get(pname, _EMPTY)))
    return params


def _plain_hints(annotations: dict[str, Any]) -> dict[str, Any] | None:
    """``typing.get_type_hints(func, include_extras=True)`` of a plain function whose annotations
    are all evaluated objects (no string, no top-level ``ForwardRef``): the annotations with
    ``None`` read as ``NoneType``. None when a string needs resolving (the caller asks
    ``typing``). A forward reference nested inside a hint (``list["Item"]``) is not seen here:
    it reaches ``_schema`` unresolved, which refuses it, and the caller then starts over with
    ``typing``'s resolution."""
    hints = {}
    for key, value in annotations.items():
        if value is None:
            value = _NONE_TYPE
        elif isinstance(value, _STRING_HINTS):
            return None
        hints[key] = value
    return hints


def introspect(func: Any, name: str | None = None) -> Introspection:
    """Read ``func``'s signature, hints and docstring. Raises ``ToolDefinitionError`` for
    ``*args`` (the model can only send named arguments).

    A plain function (see ``_is_plain_function``) is read from its code object and its
    annotations directly, and ``typing.get_type_hints`` runs only when a hint is a string or a
    nested forward reference fails; everything else goes through ``inspect.signature``. Both
    paths give the same result."""
    target, doc_source = _unwrap_callable(func)
    params: list[_Param] | None = None
    if _is_plain_function(target):
        annotations = target.__annotations__
        params = _code_parameters(target, annotations)
    if params is not None:
        tool_name = name or target.__name__
        return_annotation = annotations.get("return", _EMPTY)
        is_async = bool(target.__code__.co_flags & _CO_COROUTINE)
        hints = _plain_hints(annotations)
        if hints is not None:
            if _OPTIONAL_FOR_NONE_DEFAULT:
                for pname, _, default, _ in params:
                    if default is None and pname in hints:
                        hints[pname] = typing.Optional[hints[pname]]  # noqa: UP007 - as typing does
            info = _introspect_params(tool_name, doc_source, params, return_annotation, hints, {}, is_async)
            if not info.unresolved:
                return info
            # A hint failed: it may hold a forward reference that typing resolves; start over.
        hints, unresolved = _hints(target)
        return _introspect_params(tool_name, doc_source, params, return_annotation, hints, unresolved, is_async)
    tool_name = name or _callable_name(target)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read the signature of {func!r}: {exc}") from exc
    hints, unresolved = _hints(target)
    return _introspect_params(
        tool_name,
        doc_source,
        [(pname, p.kind, p.default, p.annotation) for pname, p in sig.parameters.items()],
        sig.return_annotation,
        hints,
        unresolved,
        _is_async(target),
    )


def _introspect_params(
    tool_name: str,
    doc_source: Any,
    sig_params: list[_Param],
    return_annotation: Any,
    hints: dict[str, Any],
    unresolved: dict[str, str],
    is_async: bool,
) -> Introspection:
    """The ``Introspection`` of a signature (``(name, kind, default, raw annotation)`` per
    parameter) under the resolved ``hints``; ``unresolved`` (name -> why) is extended in place."""
    params: list[tuple[str, dict[str, Any], bool, Any, str | None]] = []
    converters: dict[str, Converter] = {}
    positional_only: list[str] = []
    non_json: list[str] = []
    context_param = None
    var_keyword = False
    defs: _Defs | None = None  # made on the first hint that is not in _FRAGMENTS
    unbound_first = None
    first = True
    for pname, kind, default, raw_annotation in sig_params:
        if first:
            first = False
            if pname in ("self", "cls") and (kind is _POSITIONAL_ONLY or kind is _POSITIONAL_OR_KEYWORD):
                unbound_first = pname
                continue
        if kind is _VAR_POSITIONAL:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter '*{pname}' takes positional arguments, which a model "
                "cannot send (tool calls carry named arguments only); replace it with a named "
                f"list parameter such as '{pname}: list[str]', or take '**kwargs' to receive "
                "named arguments the schema does not declare"
            )
        if kind is _VAR_KEYWORD:
            var_keyword = True
            continue
        annotation = hints.get(pname, raw_annotation)
        if pname in _CONTEXT_PARAM_NAMES and _is_context(pname, annotation):
            context_param = pname
            continue
        if kind is _POSITIONAL_ONLY:
            positional_only.append(pname)
        fragment: dict[str, Any] = {}
        conv: Converter | None = None
        desc: str | None = None
        if pname in unresolved:
            pass
        elif (hit := _cached_fragment(annotation)) is not None:
            fragment, desc = hit
        else:
            if defs is None:
                defs = _Defs()
            seen = len(defs.problems)
            try:
                fragment, conv, desc = _cached_schema(annotation, defs)
            except _Unsupported as exc:
                unresolved[pname] = str(exc)
                fragment, conv, desc = {}, None, None
            except Unresolvable as exc:
                raise ToolDefinitionError(f"tool {tool_name!r}: parameter {pname!r}: {exc}") from None
            except Exception as exc:  # a broken class behind a hint must not break the tool
                unresolved[pname] = f"{_type_name(annotation)}: {type(exc).__name__}: {exc}"
                fragment, conv, desc = {}, None, None
            if len(defs.problems) > seen and pname not in unresolved:
                unresolved[pname] = "; ".join(f"field {p} (accepts any value)" for p in defs.problems[seen:])
        if default is _EMPTY:
            params.append((pname, fragment, True, None, desc))
        else:
            ok, json_default = _json_default(default)
            if not ok:
                non_json.append(pname)
                json_default = None
            params.append((pname, fragment, False, json_default, desc))
        if conv is not None:
            converters[pname] = conv
    return Introspection(
        name=tool_name,
        doc=getattr(doc_source, "__doc__", None),
        params=params,
        var_keyword=var_keyword,
        context_param=context_param,
        positional_only=tuple(positional_only),
        converters=converters,
        unresolved=unresolved,
        non_json_defaults=tuple(non_json),
        return_hint=hints.get("return", return_annotation),
        is_async=is_async,
        defs=defs.render() if defs is not None and defs.used else {},
        unbound_first=unbound_first,
    )


# --------------------------------------------------------------------------------------------
# Types -> JSON Schema fragments (+ converters for the body)


class _Unsupported(Exception):
    pass


class _Defs:
    """State of one introspection: `$defs` for genuinely recursive structured types, their
    converters, and struct fields whose hint could not be expressed."""

    def __init__(self, serialization: bool = False) -> None:
        #: Schemas of the serialised form (what a result becomes as JSON: pydantic's
        #: serialization aliases and computed fields, every field present) instead of the input form.
        self.serialization = serialization
        self.active: list[Any] = []
        self.defs: dict[str, dict[str, Any]] = {}
        self.names: dict[Any, str] = {}
        self.converters: dict[Any, Converter] = {}
        self.used = False
        #: ``"Class.field: why"`` for struct fields that degraded to ``{}``.
        self.problems: list[str] = []

    def name_of(self, cls: Any) -> str:
        """The ``$defs`` key of a class: its name, qualified when two classes share it."""
        name = self.names.get(cls)
        if name is None:
            base = re.sub(r"[^A-Za-z0-9_.-]", "_", _type_name(cls))
            name = base
            if name in self.names.values():
                module = getattr(cls, "__module__", "") or ""
                name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{module}.{base}")
            n = 2
            while name in self.names.values():
                name = f"{base}_{n}"
                n += 1
            self.names[cls] = name
        return name

    def ref(self, cls: Any) -> dict[str, str]:
        return {"$ref": f"#/$defs/{self.name_of(cls)}"}

    def render(self) -> dict[str, Any]:
        return self.defs


def _type_name(tp: Any) -> str:
    """A hint's name in messages, alike on every Python version: ``tuple[int, int]`` (3.10 takes
    ``tuple[int, int]`` for a class), ``int | None`` for either spelling of a union."""
    origin = typing.get_origin(tp)
    if origin is None:
        if tp is type(None):
            return "None"
        if isinstance(tp, type):
            return tp.__name__
        return getattr(tp, "__name__", None) or repr(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(_type_name(a) for a in args)
    inner = ", ".join(_type_name(a) for a in args)
    return f"{_type_name(origin)}[{inner}]"


#: name -> the ``pattern`` advertised and enforced for a string format (the core keeps them, with
#: the words its rejection reasons use): what is advertised is exactly what converts.
_FORMAT_PATTERNS: dict[str, str] = dict(_core_patterns())

_DATETIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
_TIME_RE = re.compile(r"([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?([Zz]|[+-][0-9]{2}:[0-9]{2})?")


def _tz(offset: str | None) -> dt.tzinfo | None:
    if offset is None:
        return None
    if offset in ("Z", "z"):
        return dt.timezone.utc
    sign = -1 if offset[0] == "-" else 1
    return dt.timezone(sign * dt.timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))


def _micro(fraction: str | None) -> int:
    """Microseconds of a fraction of a second (digits past the sixth are dropped)."""
    return int((fraction or "0")[:6].ljust(6, "0"))


def _parse_datetime(s: str) -> dt.datetime:
    """An RFC 3339 date-time (``T``/``Z`` in either case, any number of fraction digits, the
    offset required by the schema), the same on every Python version."""
    m = _DATETIME_RE.fullmatch(s)
    if m is None:
        raise ValueError(f"not an RFC 3339 date-time: {s!r}")
    y, mo, d, h, mi, sec, frac, off = m.groups()
    return dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), _micro(frac), _tz(off))


def _parse_time(s: str) -> dt.time:
    """``HH:MM[:SS[.ffffff]]`` with an optional offset."""
    m = _TIME_RE.fullmatch(s)
    if m is None:
        raise ValueError(f"not a time of day HH:MM[:SS[.ffffff]]: {s!r}")
    h, mi, sec, frac, off = m.groups()
    return dt.time(int(h), int(mi), int(sec or 0), _micro(frac), _tz(off))


_DURATION = re.compile(
    r"P(?:(?P<w>[0-9]+)W)?(?:(?P<d>[0-9]+)D)?(?:T(?:(?P<h>[0-9]+)H)?(?:(?P<m>[0-9]+)M)?(?:(?P<s>[0-9]+)S)?)?"
)


def _parse_duration(s: str) -> dt.timedelta:
    """An ISO 8601 duration of weeks, or of days, hours, minutes and seconds (``P1DT2H``,
    ``PT30S``), in integers. Years and months have no fixed length and are refused
    (``ValueError``), as is a total beyond ``timedelta``'s range."""
    m = _DURATION.fullmatch(s)
    if not m or s.endswith(("P", "T")):
        raise ValueError(f"not an ISO 8601 duration of weeks/days/hours/minutes/seconds: {s!r}")
    g = {k: int(v) if v else 0 for k, v in m.groupdict().items()}
    try:
        return dt.timedelta(weeks=g["w"], days=g["d"], hours=g["h"], minutes=g["m"], seconds=g["s"])
    except OverflowError:
        raise ValueError(f"the duration {s!r} is longer than 999999999 days") from None


def _format_duration(td: dt.timedelta) -> str:
    """``PT<seconds>S`` (``PT3600S``). RFC 3339's duration has no fractions or sign, so a
    negative or sub-second ``timedelta`` raises ``ValueError`` (such a default is left out)."""
    if td.microseconds or td < dt.timedelta(0):
        raise ValueError(f"{td!r} has no RFC 3339 duration form")
    seconds = td.days * 86400 + td.seconds
    if seconds >= 10**9:
        return f"P{td.days}D" if not td.seconds else f"P{td.days}DT{td.seconds}S"
    return f"PT{seconds}S"


def _parse_naive_datetime(s: str) -> dt.datetime:
    m = _DATETIME_RE.fullmatch(s)
    if m is None or m.group(8) is not None:
        raise ValueError(f"not a date-time without an offset: {s!r}")
    return _parse_datetime(s)


# type -> (JSON Schema format, parse from JSON string, render a default)
_FORMATS: dict[type, tuple[str, Converter, Converter]] = {
    dt.datetime: ("date-time", _parse_datetime, lambda v: v.isoformat()),
    dt.date: ("date", dt.date.fromisoformat, lambda v: v.isoformat()),
    dt.time: ("time", _parse_time, lambda v: v.isoformat()),
    dt.timedelta: ("duration", _parse_duration, _format_duration),
    uuid.UUID: ("uuid", uuid.UUID, str),
    pathlib.Path: ("path", pathlib.Path, str),
    pathlib.PurePath: ("path", pathlib.PurePath, str),
    pathlib.PurePosixPath: ("path", pathlib.PurePosixPath, str),
    decimal.Decimal: ("decimal", decimal.Decimal, str),
    bytes: ("byte", lambda s: base64.b64decode(s, validate=True), lambda v: base64.b64encode(v).decode()),
}
#: Formats advertised by their pattern alone (no ``format`` keyword): a standard keyword would
#: promise what does not convert (``format: time`` requires an offset).
_PATTERN_ONLY = frozenset({"time", "naive-date-time"})


def _format_schema(fmt: str) -> dict[str, Any]:
    """The schema of a string format: ``format`` and/or the ``pattern`` that is enforced."""
    out: dict[str, Any] = {"type": "string"}
    if fmt not in _PATTERN_ONLY:
        out["format"] = fmt
    if fmt in _FORMAT_PATTERNS:
        out["pattern"] = _FORMAT_PATTERNS[fmt]
    return out


def _format_of(tp: Any) -> tuple[str, Converter, Converter] | None:
    """The format entry of a class or of its nearest listed base (``PosixPath`` -> ``Path``)."""
    if not isinstance(tp, type):
        return None
    for klass in tp.__mro__:
        entry = _FORMATS.get(klass)
        if entry is not None:
            if klass is not tp and klass in (pathlib.Path, pathlib.PurePath):
                return (entry[0], tp, entry[2])  # PosixPath, PureWindowsPath, ...: build that class
            return entry
    return None

_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
}

_ARRAY_ORIGINS = {
    list: list,
    cabc.Sequence: list,
    cabc.MutableSequence: list,
    cabc.Iterable: list,
    cabc.Collection: list,
    set: set,
    cabc.Set: frozenset,
    cabc.MutableSet: set,
    frozenset: frozenset,
}
_MAPPING_ORIGINS = {dict, cabc.Mapping, cabc.MutableMapping}


def _is_json_atom(value: Any) -> bool:
    """True for a value that is its own JSON form (a string, a finite number, a boolean, None)."""
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    return value is None or isinstance(value, str | int)


def _enum_values(members: list[tuple[Any, Any]], owner: str) -> list[Any]:
    """The JSON forms of the values of an ``Enum``'s members or a ``Literal``'s values (a tuple
    is an array, a ``date`` its ISO string, ...); a value JSON cannot carry (NaN, an arbitrary
    object) makes the hint unexpressible."""
    out = []
    for value, member in members:
        ok, form = _json_default(value)
        if not ok:
            shown = f"member {member.name}" if isinstance(member, enum.Enum) else "value"
            raise _Unsupported(f"the {owner} {shown} {value!r} has no JSON form")
        out.append(form)
    return out


def _form_key(form: Any) -> Any:
    """A hashable key of a JSON form, equal where JSON Schema's ``enum`` finds two values equal
    (1 and 1.0 alike, true and 1 not, arrays by items, objects by members)."""
    if isinstance(form, bool):
        return ("bool", form)
    if isinstance(form, list | tuple):
        return ("array", tuple(_form_key(x) for x in form))
    if isinstance(form, cabc.Mapping):
        return ("object", tuple(sorted((k, _form_key(v)) for k, v in form.items())))
    return ("atom", form)


def _by_json_form(forms: list[Any], members: list[Any]) -> Converter:
    """The converter of an ``Enum``/``Literal`` whose values are not their own JSON forms (a
    tuple sent as an array, a ``date`` as its string): the member whose form the model sent."""
    table = {_form_key(f): m for f, m in zip(forms, members)}

    def convert(v: Any) -> Any:
        member = table.get(_form_key(v), _MISSING)
        if member is _MISSING:
            raise ValueError(f"{v!r} is none of the allowed values")
        return member

    return convert


_MISSING = object()


def _json_type_of(values: list[Any]) -> str | None:
    kinds = set()
    for v in values:
        if isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("integer")
        elif isinstance(v, float):
            kinds.add("number")
        elif isinstance(v, str):
            kinds.add("string")
        elif v is None:
            kinds.add("null")
        else:
            return None
    return kinds.pop() if len(kinds) == 1 else None


def output_schema_for(tp: Any) -> dict[str, Any]:
    """The JSON Schema of what a value of ``tp`` becomes as JSON (a tool's structured result):
    ``schema_for`` in the serialised form, see ``_struct_fields``."""
    return schema_for(tp, serialization=True)


def schema_for(tp: Any, *, serialization: bool = False) -> dict[str, Any]:
    """The JSON Schema fragment for one type hint."""
    defs = _Defs(serialization)
    schema, _, desc = _schema(tp, defs)
    if desc:
        schema = {**schema, "description": desc}
    if defs.used:
        schema = {**schema, "$defs": defs.render()}
    return schema


#: Fragments of plain hints (no converter, no ``$defs``), by hint: hints are immutable, and tools
#: of one program share most of theirs. The key must tell apart hints that compare equal yet give
#: different fragments (``Literal['a', 'b'] == Literal['b', 'a']``, ``int | str == str | int``):
#: see ``_hint_key``.
_FRAGMENTS: dict[Any, tuple[dict[str, Any], str | None]] = {}
_FRAGMENTS_MAX = 4096
_GENERIC_ALIAS = types.GenericAlias
_UNION_TYPE = types.UnionType
_LITERAL_ALIAS = type(typing.Literal["a"])
_LITERAL_VALUE_CLASSES = (str, int, bool, _NONE_TYPE)


def _hint_key(tp: Any) -> Any:
    """The ``_FRAGMENTS`` key of a hint: exact for what ``_schema`` distinguishes.

    Cheap structural keys for the common shapes — a plain class (``str``), a builtin generic or
    ``|`` union of plain classes (``list[str]``, ``float | None``: ordered tuples of classes,
    which compare by identity), a ``Literal`` of strings, integers, booleans and None (each value
    with its class, so ``Literal[1]`` and ``Literal[True]`` differ) — and ``(hint, repr(hint))``
    for everything else. Raises ``TypeError`` for an unhashable hint."""
    cls = tp.__class__
    if cls is type:
        return tp
    if cls is _GENERIC_ALIAS or cls is _UNION_TYPE:
        args = tp.__args__
        for a in args:
            if a.__class__ is not type:
                break
        else:
            return (tp.__origin__ if cls is _GENERIC_ALIAS else _UNION_TYPE, args)
    elif cls is _LITERAL_ALIAS:
        values = tuple((a.__class__, a) for a in tp.__args__)
        if all(c in _LITERAL_VALUE_CLASSES for c, _ in values):
            return (_LITERAL_ALIAS, values)
    key = (tp, repr(tp))
    hash(key)
    return key


def _cached_fragment(tp: Any) -> tuple[dict[str, Any], str | None] | None:
    """The memoised ``(fragment, Annotated description)`` of a hint, or None (not memoised yet,
    or a hint that cannot be: unhashable, or with a converter or ``$defs``)."""
    try:
        return _FRAGMENTS.get(tp if tp.__class__ is type else _hint_key(tp))
    except Exception:  # an unhashable hint (e.g. Annotated metadata that is a dict)
        return None


def _cached_schema(tp: Any, defs: _Defs) -> tuple[dict[str, Any], Converter | None, str | None]:
    """``_schema`` of a top-level parameter hint, memoised for hints whose fragment depends on
    nothing else. The fragment is shared between tools: it must not be changed in place (it is
    only read, by the core's ``define_tool``)."""
    try:
        key = _hint_key(tp)
        hit = _FRAGMENTS.get(key)
    except Exception:  # an unhashable hint (e.g. Annotated metadata that is a dict)
        return _schema(tp, defs)
    if hit is not None:
        return hit[0], None, hit[1]
    state = (len(defs.problems), defs.used, len(defs.defs), len(defs.names), len(defs.converters))
    fragment, conv, desc = _schema(tp, defs)
    if conv is None and state == (len(defs.problems), defs.used, len(defs.defs), len(defs.names), len(defs.converters)):
        if len(_FRAGMENTS) >= _FRAGMENTS_MAX:
            _FRAGMENTS.clear()
        _FRAGMENTS[key] = (fragment, desc)
    return fragment, conv, desc


def _schema(tp: Any, defs: _Defs) -> tuple[dict[str, Any], Converter | None, str | None]:
    """(fragment, converter or None, Annotated description or None)."""
    if tp is inspect.Parameter.empty or tp is typing.Any or tp is object:
        return {}, None, None
    if isinstance(tp, str | typing.ForwardRef):
        raise _Unsupported(f"the hint {tp!r} could not be resolved")
    if isinstance(tp, typing.TypeVar):
        bound = tp.__bound__
        return _schema(bound, defs) if bound is not None else ({}, None, None)
    if isinstance(tp, typing.NewType):
        return _schema(tp.__supertype__, defs)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if _is_type_alias(tp) or (origin is not None and _is_type_alias(origin)):
        return _alias_schema(tp, origin, args, defs)

    if origin is typing.Annotated:
        base, conv, desc = _schema(args[0], defs)
        out = dict(base)
        if isinstance(out.get("anyOf"), list):
            # Optional[...] under Annotated: constraints apply to the non-null branches.
            branches = [dict(b) for b in out["anyOf"]]
            for meta in args[1:]:
                for b in branches:
                    if b != {"type": "null"}:
                        d = _apply_metadata(b, meta)
                if isinstance(meta, str) or type(meta).__name__ == "FieldInfo":
                    d = _apply_metadata({}, meta)
                    if d:
                        desc = d
            out["anyOf"] = branches
            return out, conv, desc
        for meta in args[1:]:
            d = _apply_metadata(out, meta)
            if d:
                desc = d
        return out, conv, desc
    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp]), None, None
    if origin is typing.Literal:
        values = _enum_values([(a.value if isinstance(a, enum.Enum) else a, a) for a in args], "Literal")
        out = {"enum": values}
        t = _json_type_of(values)
        if t:
            out = {"type": t, "enum": values}
        if all(_is_json_atom(a.value if isinstance(a, enum.Enum) else a) for a in args):
            members = {a.value: a for a in args if isinstance(a, enum.Enum)}
            return out, ((lambda v: members.get(v, v)) if members else None), None
        return out, _by_json_form(values, list(args)), None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = _enum_values([(m.value, m) for m in tp], tp.__name__)
        t = _json_type_of(values)
        out = {"type": t, "enum": values} if t else {"enum": values}
        if all(_is_json_atom(m.value) for m in tp):
            return out, tp, None
        return out, _by_json_form(values, list(tp)), None
    if origin in (typing.Union, types.UnionType):
        return _union(args, defs)
    pydantic_dt = _pydantic_datetime(tp)
    if pydantic_dt is not None:
        return pydantic_dt
    entry = _format_of(tp)
    if entry is not None:
        fmt, parse, _ = entry
        return _format_schema(fmt), parse, None
    if isinstance(tp, type) and issubclass(tp, bytearray):
        return _format_schema("byte"), lambda s: bytearray(base64.b64decode(s, validate=True)), None

    container = _ARRAY_ORIGINS.get(origin if origin is not None else tp)
    if container is not None:
        item_tp = args[0] if args else typing.Any
        items, conv, _ = _schema(item_tp, defs)
        out = {"type": "array", "items": items}
        if container in (set, frozenset):
            out["uniqueItems"] = True
        if conv is None and container is list:
            return out, None, None
        return out, _container_converter(container, conv), None
    if origin is tuple or tp is tuple:
        if origin is tuple and not args and tp is not typing.Tuple and not getattr(tp, "_special", False):
            # tuple[()]: the empty tuple.
            return {"type": "array", "items": False, "maxItems": 0}, (lambda v: ()), None
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            items, conv, _ = _schema(args[0] if args else typing.Any, defs)
            return {"type": "array", "items": items}, _container_converter(tuple, conv), None
        if args == ((),):
            return {"type": "array", "items": False, "maxItems": 0}, (lambda v: ()), None
        parts = [_schema(a, defs) for a in args]
        convs = [c for _, c, _ in parts]
        out = {
            "type": "array",
            "prefixItems": [s for s, _, _ in parts],
            "items": False,
            "minItems": len(args),
            "maxItems": len(args),
        }
        if any(convs):
            return out, lambda v: tuple(c(x) if c else x for c, x in zip(convs, v)), None
        return out, tuple, None
    if origin in _MAPPING_ORIGINS or tp in _MAPPING_ORIGINS or tp is dict:
        if not args:
            return {"type": "object"}, None, None
        key_tp, val_tp = args
        key_schema: dict[str, Any] = {}
        key_conv: Converter | None = None
        if key_tp is int:
            # JSON object keys are strings: integer keys travel as their canonical decimal text
            # (no leading zeros, no "-0"), so two keys never stand for one integer.
            key_schema, key_conv = {"pattern": INT_KEY_PATTERN}, int
        elif key_tp is not str and key_tp is not typing.Any:
            key_schema, key_conv, _ = _schema(key_tp, defs)
            if key_schema.get("type") != "string":
                raise _Unsupported(
                    f"dict keys of type {_type_name(key_tp)} cannot be expressed: JSON object keys are strings"
                )
            key_schema = {k: v for k, v in key_schema.items() if k != "type"}
        val_schema, conv, _ = _schema(val_tp, defs)
        out = {"type": "object"}
        if key_schema:
            out["propertyNames"] = key_schema
        if val_schema:
            out["additionalProperties"] = val_schema
        if conv is None and key_conv is None:
            return out, None, None
        vc = conv or (lambda x: x)
        if key_conv is None:
            return out, lambda v: {k: (None if x is None else vc(x)) for k, x in v.items()}, None
        return out, _keyed_converter(key_conv, vc), None
    structured = _structured(tp, defs)
    if structured is not None:
        return structured
    raise _Unsupported(f"no JSON Schema for the type {tp!r}; annotate with a JSON type or a structured class")


#: The ``propertyNames`` pattern of ``dict[int, V]``: canonical decimal integers only.
INT_KEY_PATTERN = r"^(?:0|-?[1-9][0-9]*)$"


def _keyed_converter(key_conv: Converter, vc: Converter) -> Converter:
    """The converter of a mapping whose keys are converted too (``dict[UUID, V]``, ...): two
    keys that convert to one (``"A0..."`` and ``"a0..."`` as UUIDs, ``"1.0"`` and ``"1.00"`` as
    Decimals, one instant at two offsets) are refused instead of one value silently replacing
    the other."""

    def convert(v: "cabc.Mapping[str, Any]") -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        sent: dict[Any, str] = {}
        for k, x in v.items():
            ck = key_conv(k)
            if ck in sent:
                raise ValueError(f"the keys {sent[ck]!r} and {k!r} stand for the same key {ck!r}; send it once")
            sent[ck] = k
            out[ck] = None if x is None else vc(x)
        return out

    return convert


def _alias_schema(tp: Any, origin: Any, args: tuple[Any, ...], defs: _Defs) -> tuple[dict[str, Any], Converter | None, str | None]:
    """The schema of what a type alias stands for (``Alias`` or ``Alias[int]``); an alias that
    refers to itself cannot be inlined and is refused."""
    alias = origin if origin is not None and _is_type_alias(origin) else tp
    if alias in defs.active:
        raise _Unsupported(f"the type alias {alias.__name__} refers to itself")
    value = alias.__value__
    if alias is not tp:
        value = _substitute(value, dict(zip(getattr(alias, "__type_params__", ()), args)))
    defs.active.append(alias)
    try:
        return _schema(value, defs)
    finally:
        defs.active.pop()


def _pydantic_datetime(tp: Any) -> tuple[dict[str, Any], Converter, None] | None:
    """pydantic's ``AwareDatetime`` (a date-time with an offset, as ``datetime``) and
    ``NaiveDatetime`` (without one), recognised by name."""
    if not isinstance(tp, type) or tp.__module__ != "pydantic.types":
        return None
    if tp.__name__ == "AwareDatetime":
        return _format_schema("date-time"), _parse_datetime, None
    if tp.__name__ == "NaiveDatetime":
        return _format_schema("naive-date-time"), _parse_naive_datetime, None
    return None


def _container_converter(container: type, item: Converter | None) -> Converter:
    if item is None:
        return container
    return lambda v: container(item(x) for x in v)


def _union(args: tuple[Any, ...], defs: _Defs) -> tuple[dict[str, Any], Converter | None, None]:
    """``anyOf`` of the members in declaration order, nested unions flattened, duplicates
    dropped, ``null`` last; a member that accepts anything makes the union ``{}``."""
    has_null = False
    branches: list[dict[str, Any]] = []
    members: list[tuple[dict[str, Any], Converter | None]] = []
    for a in args:
        if a is type(None) or a is None:
            has_null = True
            continue
        s, c, d = _schema(a, defs)
        if d:
            s = {**s, "description": d}
        members.append((s, c))
        for b in s["anyOf"] if set(s) == {"anyOf"} else [s]:
            if b == {"type": "null"}:
                has_null = True
            elif b not in branches:
                branches.append(b)
    if any(b == {} for b in branches):
        return {}, None, None
    if has_null:
        branches.append({"type": "null"})
    out = branches[0] if len(branches) == 1 else {"anyOf": branches}
    if all(c is None for _, c in members):
        return out, None, None
    if len(members) == 1:
        conv = members[0][1]
        return out, (lambda v: None if v is None else conv(v)), None  # type: ignore[misc]
    # Several members: convert with the first one whose schema accepts the value. The validators
    # are compiled on first use, when every `$defs` entry a member refers to exists.
    checks: list[tuple[Any, Converter | None]] = []

    def convert(v: Any) -> Any:
        if v is None:
            return None
        if not checks:
            from ._core import SchemaValidator

            for m, c in members:
                checks.append((SchemaValidator({**m, "$defs": defs.defs} if defs.defs else m), c))
        for check, c in checks:
            if check.is_valid(v):
                return c(v) if c else v
        return v

    return out, convert, None


def _apply_metadata(schema: dict[str, Any], meta: Any) -> str | None:
    """Apply one ``Annotated`` metadata item; returns a description when it carries one."""
    if isinstance(meta, str):
        return meta
    desc = None
    # pydantic.Field(...) -> FieldInfo: a description and constraint metadata.
    if type(meta).__name__ == "FieldInfo" and hasattr(meta, "metadata"):
        desc = getattr(meta, "description", None)
        for m in getattr(meta, "metadata", ()):
            _apply_metadata(schema, m)
        if getattr(meta, "pattern", None):
            schema["pattern"] = meta.pattern
        return desc
    names = {
        "ge": "minimum",
        "gt": "exclusiveMinimum",
        "le": "maximum",
        "lt": "exclusiveMaximum",
        "multiple_of": "multipleOf",
        "pattern": "pattern",
    }
    if type(meta).__name__ == "Interval":
        for attr in ("ge", "gt", "le", "lt"):
            v = getattr(meta, attr, None)
            if v is not None:
                schema[names[attr]] = v
        return None
    for attr, key in names.items():
        v = getattr(meta, attr, None) if type(meta).__module__.startswith(("annotated_types", "pydantic")) else None
        if v is not None and not callable(v):
            schema[key] = v if attr != "pattern" else str(getattr(v, "pattern", v))
    for attr in ("min_length", "max_length"):
        v = getattr(meta, attr, None) if type(meta).__module__.startswith(("annotated_types", "pydantic")) else None
        if v is not None:
            if schema.get("type") == "array":
                schema["minItems" if attr == "min_length" else "maxItems"] = v
            elif schema.get("type") == "object":
                schema["minProperties" if attr == "min_length" else "maxProperties"] = v
            else:
                schema["minLength" if attr == "min_length" else "maxLength"] = v
    return desc


# --------------------------------------------------------------------------------------------
# Structured types: dataclasses, TypedDict, NamedTuple, pydantic models, attrs classes


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute descriptions from the class docstring (Google ``Attributes:``/NumPy/Sphinx)."""
    doc = cls.__doc__
    if not doc:
        return {}
    from ._core import parse_docstring

    try:
        _, params, _ = parse_docstring(doc.replace("Attributes:", "Args:"))
    except ValueError:
        return {}
    return dict(params)


def _structured(tp: Any, defs: _Defs) -> tuple[dict[str, Any], Converter | None, None] | None:
    """A closed object schema for a structured class (or a parametrised generic one such as
    ``Box[int]``), inlined; a class that contains itself goes to ``$defs`` behind a ``$ref``."""
    cls = typing.get_origin(tp) or tp
    if not isinstance(cls, type):
        return None
    kind = _struct_kind(cls)
    if kind is None:
        return None
    if kind == "pydantic":
        _complete_pydantic_model(cls)
    if tp in defs.active or defs.names.get(tp) in defs.defs:
        # Genuinely recursive (or already defined as such): refer to the definition.
        defs.used = True
        return defs.ref(tp), (lambda v: defs.converters[tp](v)), None
    defs.active.append(tp)
    try:
        subst = {}
        if cls is not tp:
            subst = dict(zip(getattr(cls, "__parameters__", ()), typing.get_args(tp)))
        fields = _struct_fields(cls, kind, defs.serialization)
        docs = _field_docs(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        convs: dict[str, Converter] = {}
        for fname, ftp, has_default, default, fdesc in fields:
            try:
                s, c, d = _schema(_substitute(ftp, subst), defs)
            except _Unsupported as exc:
                defs.problems.append(f"{_type_name(tp)}.{fname}: {exc}")
                s, c, d = {}, None, None
            s = dict(s)
            text = d or fdesc or docs.get(fname)
            if text:
                s["description"] = text
            if has_default and default is not _NO_DEFAULT:
                ok, j = _json_default(default)
                if ok:
                    s["default"] = j
            elif not has_default:
                required.append(fname)
            props[fname] = s
            if c is not None:
                convs[fname] = c
        schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    finally:
        defs.active.pop()
    builder = _builder(cls, kind, convs)
    if tp in defs.names and any(r == defs.ref(tp) for r in _refs(schema)):
        defs.defs[defs.name_of(tp)] = schema
        defs.converters[tp] = builder
        return defs.ref(tp), builder, None
    return schema, builder, None


def _substitute(hint: Any, subst: dict[Any, Any]) -> Any:
    """``hint`` with the type variables of a parametrised generic class replaced."""
    if not subst:
        return hint
    if isinstance(hint, typing.TypeVar):
        return subst.get(hint, hint)
    params = getattr(hint, "__parameters__", ())
    if params:
        try:
            return hint[tuple(subst.get(p, p) for p in params)]
        except TypeError:
            return hint
    return hint


def _refs(node: Any) -> typing.Iterator[Any]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _struct_kind(cls: type) -> str | None:
    if dataclasses.is_dataclass(cls):
        return "dataclass"
    if is_typeddict(cls):
        return "typeddict"
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return "namedtuple"
    if hasattr(cls, "model_fields") and hasattr(cls, "model_validate"):
        return "pydantic"
    if hasattr(cls, "__attrs_attrs__"):
        return "attrs"
    return None


def _qualifiers(name: str) -> tuple[Any, ...]:
    """``typing``'s and ``typing_extensions``' spelling of a TypedDict qualifier (they are
    different objects on some Python versions; pydantic requires ``typing_extensions.TypedDict``
    below Python 3.12)."""
    found = [getattr(typing, name, None), getattr(_typing_extensions, name, None)]
    return tuple(dict.fromkeys(q for q in found if q is not None))


try:
    import typing_extensions as _typing_extensions
except ImportError:  # pragma: no cover - typing_extensions is nearly always installed
    _typing_extensions = None  # type: ignore[assignment]

_READ_ONLY = _qualifiers("ReadOnly")
# Required/NotRequired are Python 3.11+ in typing (PEP 655).
_REQUIRED = _qualifiers("Required")
_TYPEDDICT_QUALIFIERS = _REQUIRED + _qualifiers("NotRequired") + _READ_ONLY


def is_typeddict(tp: Any) -> bool:
    """True for a TypedDict class of ``typing`` or ``typing_extensions``."""
    if typing.is_typeddict(tp):
        return True
    return _typing_extensions is not None and _typing_extensions.is_typeddict(tp)


def _is_type_alias(tp: Any) -> bool:
    """A ``type X = ...`` alias or a ``TypeAliasType`` of ``typing``/``typing_extensions``."""
    cls = type(tp)
    return cls.__name__ == "TypeAliasType" and cls.__module__ in ("typing", "typing_extensions")


def _struct_fields(cls: type, kind: str, serialization: bool = False) -> list[tuple[str, Any, bool, Any, str | None]]:
    """(name, hint, has default, default, description) per field, in declaration order. With
    ``serialization``, the fields of the serialised form: every field is present (none has a
    default to fall back on), pydantic's serialization aliases and computed fields, dataclass
    fields outside ``__init__`` too."""
    out = _struct_fields_of(cls, kind, serialization)
    if not serialization:
        return out
    if kind == "pydantic":
        for name, info in getattr(cls, "model_computed_fields", {}).items():
            out.append((info.alias or name, info.return_type, False, _NO_DEFAULT, info.description))
    return [(n, h, False, _NO_DEFAULT, d) for n, h, _, _, d in out]


def _struct_fields_of(cls: type, kind: str, serialization: bool) -> list[tuple[str, Any, bool, Any, str | None]]:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        hints = dict(getattr(cls, "__annotations__", {}))
    out: list[tuple[str, Any, bool, Any, str | None]] = []
    if kind == "dataclass":
        for f in dataclasses.fields(cls):
            if not f.init and not serialization:
                continue
            has = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            # A factory makes a fresh value per call: no one value is advertised.
            default = f.default if f.default is not dataclasses.MISSING else _NO_DEFAULT
            out.append((f.name, hints.get(f.name, f.type), has, default, f.metadata.get("description")))
    elif kind == "typeddict":
        required_keys = getattr(cls, "__required_keys__", frozenset(hints))
        for name, hint in hints.items():
            # Required[...]/NotRequired[...] decide over __required_keys__, which Python 3.10 and
            # 3.11 compute wrongly for string annotations (PEP 563).
            base, is_required = hint, name in required_keys
            while typing.get_origin(base) in _TYPEDDICT_QUALIFIERS:
                q = typing.get_origin(base)
                if q not in _READ_ONLY:
                    is_required = q in _REQUIRED
                base = typing.get_args(base)[0]
            out.append((name, base, not is_required, _NO_DEFAULT, None))
    elif kind == "namedtuple":
        defaults = getattr(cls, "_field_defaults", {})
        for name in cls._fields:  # type: ignore[attr-defined]
            out.append((name, hints.get(name, typing.Any), name in defaults, defaults.get(name), None))
    elif kind == "pydantic":
        for name, info in cls.model_fields.items():  # type: ignore[attr-defined]
            ann = info.annotation
            if info.metadata:
                ann = typing.Annotated[(ann, *info.metadata)]  # type: ignore[valid-type]
            has = not info.is_required()
            # A default_factory runs per call (pydantic's own schema shows no default for it).
            default = info.default if has and info.default_factory is None else _NO_DEFAULT
            key = (info.serialization_alias if serialization else None) or info.alias or name
            out.append((key, ann, has, default, info.description))
    elif kind == "attrs":
        import attrs

        for a in attrs.fields(cls):
            if not a.init:
                continue
            has = a.default is not attrs.NOTHING
            default = a.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = _NO_DEFAULT  # a fresh value per call: none is advertised
            out.append((a.alias or a.name, hints.get(a.name, a.type), has, default, a.metadata.get("description")))
    return out


class Unresolvable(Exception):
    """A structured class behind a hint refers to a name that is not defined: a definition
    defect (``ToolDefinitionError`` at definition, ``internal_error`` at call time), never the
    model's to fix."""


def _complete_pydantic_model(cls: type) -> None:
    """Finish a pydantic model whose annotations named a class not defined yet; raises
    ``Unresolvable`` naming what is still missing."""
    if getattr(cls, "__pydantic_complete__", True):
        return
    try:
        cls.model_rebuild(raise_errors=True)  # type: ignore[attr-defined]
    except Exception as exc:
        missing = getattr(exc, "name", None)
        what = f"{missing!r}, which is not defined" if missing else f"a type that cannot be resolved ({exc})"
        raise Unresolvable(
            f"the model {cls.__name__} refers to {what}: define or import it before the tool is "
            f"defined (or call {cls.__name__}.model_rebuild() once it exists)"
        ) from exc


def _builder(cls: type, kind: str, convs: dict[str, Converter]) -> Converter:
    def convert_fields(v: dict[str, Any]) -> dict[str, Any]:
        return {k: (convs[k](x) if k in convs and x is not None else x) for k, x in v.items()}

    if kind == "typeddict":
        return convert_fields if convs else dict
    if kind == "pydantic":

        def build_model(v: Any) -> Any:
            if not getattr(cls, "__pydantic_complete__", True):
                try:
                    _complete_pydantic_model(cls)
                except Unresolvable as exc:
                    raise RuntimeError(str(exc)) from None
            return cls.model_validate(v)  # type: ignore[attr-defined]

        return build_model
    return lambda v: cls(**convert_fields(v))
