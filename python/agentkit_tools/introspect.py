"""Reading a Python callable into what the Rust core needs (SPEC §1, §3).

This module does only what needs Python's own reflection: ``inspect.signature``,
``typing.get_type_hints`` and the classes behind the hints. It turns each parameter's hint into a
JSON Schema fragment and, where the body needs a richer Python value than JSON gives (an
``Enum`` member, a ``set``, a dataclass, a ``datetime``), a converter applied after validation.
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
import sys
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import ToolDefinitionError

__all__ = ["Introspection", "introspect", "schema_for", "CONTEXT_TYPE_NAMES"]

#: Annotations (checked by class name, so string annotations work) that mark an injected
#: run-context parameter (SPEC §1).
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
        return annotation.split("[")[0].split(".")[-1] in CONTEXT_TYPE_NAMES
    target = typing.get_origin(annotation) or annotation
    return getattr(target, "__name__", None) in CONTEXT_TYPE_NAMES


def _json_default(value: Any) -> tuple[bool, Any]:
    """(representable, JSON value) of a default."""
    if value is None or isinstance(value, bool | int | str):
        return True, value
    if isinstance(value, float):
        return (value == value and value not in (float("inf"), float("-inf"))), value
    if isinstance(value, enum.Enum):
        return _json_default(value.value)
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
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
    fmt = _FORMATS.get(type(value))
    if fmt is not None:
        return True, fmt[2](value)
    return False, None


def introspect(func: Any, name: str | None = None) -> Introspection:
    """Read ``func``'s signature, hints and docstring. Raises ``ToolDefinitionError`` for
    ``*args`` (the model can only send named arguments)."""
    target, doc_source = _unwrap_callable(func)
    tool_name = name or _callable_name(target)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read the signature of {func!r}: {exc}") from exc
    hints, unresolved = _hints(target)
    params: list[tuple[str, dict[str, Any], bool, Any, str | None]] = []
    converters: dict[str, Converter] = {}
    positional_only: list[str] = []
    non_json: list[str] = []
    context_param = None
    var_keyword = False
    defs = _Defs()
    for i, (pname, p) in enumerate(sig.parameters.items()):
        if i == 0 and pname in ("self", "cls") and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue
        if p.kind is p.VAR_POSITIONAL:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter '*{pname}' takes positional arguments, which a model "
                "cannot send (tool calls carry named arguments only); replace it with a named "
                f"list parameter such as '{pname}: list[str]'"
            )
        if p.kind is p.VAR_KEYWORD:
            var_keyword = True
            continue
        annotation = hints.get(pname, p.annotation)
        if _is_context(pname, annotation):
            context_param = pname
            continue
        if p.kind is p.POSITIONAL_ONLY:
            positional_only.append(pname)
        if pname in unresolved:
            fragment, conv, desc = {}, None, None
        else:
            try:
                fragment, conv, desc = _schema(annotation, defs)
            except _Unsupported as exc:
                unresolved[pname] = str(exc)
                fragment, conv, desc = {}, None, None
        required = p.default is inspect.Parameter.empty
        default = None
        if not required:
            ok, default = _json_default(p.default)
            if not ok:
                non_json.append(pname)
                default = None
        params.append((pname, fragment, required, default, desc))
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
        return_hint=hints.get("return", sig.return_annotation),
        is_async=_is_async(target),
        defs=defs.render() if defs.used else {},
    )


# --------------------------------------------------------------------------------------------
# Types -> JSON Schema fragments (+ converters for the body)


class _Unsupported(Exception):
    pass


class _Defs:
    """`$defs` for genuinely recursive structured types."""

    def __init__(self) -> None:
        self.active: list[Any] = []
        self.defs: dict[str, dict[str, Any]] = {}
        self.used = False

    def render(self) -> dict[str, Any]:
        return self.defs


def _parse_datetime(s: str) -> dt.datetime:
    if sys.version_info < (3, 11) and s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    return dt.datetime.fromisoformat(s)


def _parse_time(s: str) -> dt.time:
    if sys.version_info < (3, 11) and s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    return dt.time.fromisoformat(s)


def _parse_duration(s: str) -> dt.timedelta:
    import re

    m = re.fullmatch(
        r"P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
        s,
    )
    if not m or s in ("P", "PT"):
        raise ValueError(f"not an ISO 8601 duration: {s!r}")
    g = {k: float(v) if v else 0.0 for k, v in m.groupdict().items()}
    return dt.timedelta(days=g["d"], hours=g["h"], minutes=g["m"], seconds=g["s"])


def _format_duration(td: dt.timedelta) -> str:
    total = td.total_seconds()
    return f"PT{total:g}S"


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
# JSON Schema has no standard pattern for these formats; give the validator one so it enforces them.
_FORMAT_PATTERNS = {
    "decimal": r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$",
    "byte": r"^[A-Za-z0-9+/]*={0,2}$",
}

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


def schema_for(tp: Any) -> dict[str, Any]:
    """The JSON Schema fragment for one type hint (SPEC §3)."""
    defs = _Defs()
    schema, _, desc = _schema(tp, defs)
    if desc:
        schema = {**schema, "description": desc}
    if defs.used:
        schema = {**schema, "$defs": defs.render()}
    return schema


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

    if origin is typing.Annotated:
        base, conv, desc = _schema(args[0], defs)
        out = dict(base)
        for meta in args[1:]:
            d = _apply_metadata(out, meta)
            if d:
                desc = d
        return out, conv, desc
    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp]), None, None
    if origin is typing.Literal:
        values = [a.value if isinstance(a, enum.Enum) else a for a in args]
        out = {"enum": values}
        t = _json_type_of(values)
        if t:
            out = {"type": t, "enum": values}
        members = {a.value: a for a in args if isinstance(a, enum.Enum)}
        return out, (members.__getitem__ if members else None), None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        t = _json_type_of(values)
        return ({"type": t, "enum": values} if t else {"enum": values}), tp, None
    if origin in (typing.Union, types.UnionType):
        return _union(args, defs)
    if tp in _FORMATS:
        fmt, parse, _ = _FORMATS[tp]
        out = {"type": "string", "format": fmt}
        if fmt in _FORMAT_PATTERNS:
            out["pattern"] = _FORMAT_PATTERNS[fmt]
        return out, parse, None
    if isinstance(tp, type) and issubclass(tp, bytearray):
        return {"type": "string", "format": "byte"}, lambda s: bytearray(base64.b64decode(s)), None

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
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            items, conv, _ = _schema(args[0] if args else typing.Any, defs)
            return {"type": "array", "items": items}, _container_converter(tuple, conv), None
        if args == ((),):
            return {"type": "array", "items": False, "maxItems": 0}, tuple, None
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
        if key_tp is not str and not (isinstance(key_tp, type) and issubclass(key_tp, str)):
            key_schema, _, _ = _schema(key_tp, defs)
            if key_schema.get("type") != "string":
                raise _Unsupported(
                    f"dict keys of type {key_tp!r} cannot be expressed: JSON object keys are strings"
                )
        val_schema, conv, _ = _schema(val_tp, defs)
        if not val_schema:
            return {"type": "object"}, None, None
        out = {"type": "object", "additionalProperties": val_schema}
        if conv is None:
            return out, None, None
        return out, lambda v: {k: conv(x) for k, x in v.items()}, None
    if isinstance(tp, type):
        structured = _structured(tp, defs)
        if structured is not None:
            return structured
    raise _Unsupported(f"no JSON Schema for the type {tp!r}; annotate with a JSON type or a structured class")


def _container_converter(container: type, item: Converter | None) -> Converter:
    if item is None:
        return container
    return lambda v: container(item(x) for x in v)


def _union(args: tuple[Any, ...], defs: _Defs) -> tuple[dict[str, Any], Converter | None, None]:
    has_null = any(a is type(None) or a is None for a in args)
    branches = []
    convs: list[Converter | None] = []
    for a in args:
        if a is type(None) or a is None:
            continue
        s, c, d = _schema(a, defs)
        if d:
            s = {**s, "description": d}
        # Flatten nested unions (Optional[A | B]).
        if set(s) == {"anyOf"}:
            branches.extend(s["anyOf"])
        else:
            branches.append(s)
        convs.append(c)
    if any(b == {} for b in branches):
        return {}, None, None
    if has_null:
        branches.append({"type": "null"})
    out = branches[0] if len(branches) == 1 else {"anyOf": branches}
    real = [c for c in convs if c is not None]
    if not real:
        return out, None, None
    if len(convs) == 1:
        conv = convs[0]
        return out, (lambda v: None if v is None else conv(v)), None  # type: ignore[misc]
    # Several branches: convert with the first branch whose validator accepts the value.
    from ._core import SchemaValidator

    checks = [(SchemaValidator(b), c) for b, c in zip(branches, convs)]

    def convert(v: Any) -> Any:
        if v is None:
            return None
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


def _structured(cls: type, defs: _Defs) -> tuple[dict[str, Any], Converter | None, None] | None:
    kind = _struct_kind(cls)
    if kind is None:
        return None
    if cls in defs.active:
        # Genuinely recursive: refer to a definition.
        defs.used = True
        return {"$ref": f"#/$defs/{cls.__name__}"}, _lazy_converter(cls, defs), None
    defs.active.append(cls)
    try:
        fields = _struct_fields(cls, kind)
        docs = _field_docs(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        convs: dict[str, Converter] = {}
        for fname, ftp, has_default, default, fdesc in fields:
            try:
                s, c, d = _schema(ftp, defs)
            except _Unsupported:
                s, c, d = {}, None, None
            s = dict(s)
            text = d or fdesc or docs.get(fname)
            if text:
                s["description"] = text
            if has_default:
                ok, j = _json_default(default)
                if ok:
                    s["default"] = j
            else:
                required.append(fname)
            props[fname] = s
            if c is not None:
                convs[fname] = c
        schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    finally:
        defs.active.pop()
    builder = _builder(cls, kind, convs)
    if defs.used and any(r == {"$ref": f"#/$defs/{cls.__name__}"} for r in _refs(schema)):
        defs.defs[cls.__name__] = schema
        _CONVERTERS[(id(defs), cls)] = builder
        return {"$ref": f"#/$defs/{cls.__name__}"}, builder, None
    return schema, builder, None


_CONVERTERS: dict[tuple[int, type], Converter] = {}


def _lazy_converter(cls: type, defs: _Defs) -> Converter:
    key = (id(defs), cls)
    return lambda v: _CONVERTERS[key](v)


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
    if typing.is_typeddict(cls):
        return "typeddict"
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return "namedtuple"
    if hasattr(cls, "model_fields") and hasattr(cls, "model_validate"):
        return "pydantic"
    if hasattr(cls, "__attrs_attrs__"):
        return "attrs"
    return None


def _struct_fields(cls: type, kind: str) -> list[tuple[str, Any, bool, Any, str | None]]:
    """(name, hint, has default, default, description) per field, in declaration order."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        hints = dict(getattr(cls, "__annotations__", {}))
    out: list[tuple[str, Any, bool, Any, str | None]] = []
    if kind == "dataclass":
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            has = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else None
            )
            out.append((f.name, hints.get(f.name, f.type), has, default, f.metadata.get("description")))
    elif kind == "typeddict":
        required_keys = getattr(cls, "__required_keys__", frozenset(hints))
        for name, hint in hints.items():
            base = hint
            if typing.get_origin(base) in (typing.Required, typing.NotRequired):
                base = typing.get_args(base)[0]
            out.append((name, base, name not in required_keys, _NO_DEFAULT, None))
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
            default = None
            if has:
                try:
                    default = info.get_default(call_default_factory=True)
                except TypeError:
                    default = info.get_default()
            key = info.alias or name
            out.append((key, ann, has, default, info.description))
    elif kind == "attrs":
        import attrs

        for a in attrs.fields(cls):
            if not a.init:
                continue
            has = a.default is not attrs.NOTHING
            default = a.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()  # type: ignore[union-attr]
            out.append((a.alias or a.name, hints.get(a.name, a.type), has, default, a.metadata.get("description")))
    return out


def _builder(cls: type, kind: str, convs: dict[str, Converter]) -> Converter:
    def convert_fields(v: dict[str, Any]) -> dict[str, Any]:
        return {k: (convs[k](x) if k in convs and x is not None else x) for k, x in v.items()}

    if kind == "typeddict":
        return convert_fields if convs else dict
    if kind == "pydantic":
        return lambda v: cls.model_validate(v)  # type: ignore[attr-defined]
    return lambda v: cls(**convert_fields(v))
