"""A pure-Python tool layer on the ``jsonschema`` package: the baseline of ``benches/compare.py``.

What a careful team would write without agentkit-tools, doing the same work as our dispatch:
read a function (``inspect.signature``, ``typing.get_type_hints``, a Google docstring) into a
JSON Schema, check the schema and build a ``Draft202012Validator`` once at definition time,
then per call: find the tool, decode JSON text, collect every validation problem into one
model-facing message, fill defaults, call the body, wrap the result in an envelope. It supports
the hints of the benchmark tool (``str``, ``int``, ``float``, ``bool``, ``None``, ``Literal``,
``list[X]``, ``dict[str, X]``, unions) and nothing more.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

import jsonschema

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def hint_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema of one type hint. Raises ``TypeError`` for an unsupported hint."""
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        kinds = {_SCALARS[type(a)] for a in args}
        schema: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1:
            schema["type"] = kinds.pop()
        return schema
    if origin is list:
        return {"type": "array", "items": hint_schema(args[0])} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object", "additionalProperties": hint_schema(args[1])} if args else {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [hint_schema(a) for a in args]}
    raise TypeError(f"unsupported type hint {tp!r}")


def parse_google(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section = None
    current = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section, current = m.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            if line.startswith((" ", "\t")) and not line.startswith(("        ", "\t\t")):
                am = _ARG.match(line.strip())
                if am:
                    current = am.group(1).lstrip("*")
                    params[current] = am.group(2).strip()
                    continue
            if current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


@dataclass
class BaselineTool:
    name: str
    description: str
    parameters: dict[str, Any]
    validator: Any
    defaults: dict[str, Any]
    fn: Callable[..., Any]
    is_async: bool


def define(fn: Callable[..., Any], *, check_schema: bool = True) -> BaselineTool:
    """A tool from a function; raises ``TypeError``/``jsonschema.SchemaError`` for a bad one.
    ``check_schema=False`` skips the meta-schema check (a bad schema then fails on first use
    instead of at definition time, unlike ours)."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    description, docs = parse_google(fn.__doc__)
    props: dict[str, Any] = {}
    required: list[str] = []
    defaults: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: *args/**kwargs are not supported")
        schema = hint_schema(hints[p.name]) if p.name in hints else {}
        if p.name in docs:
            schema["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        else:
            schema["default"] = p.default
            defaults[p.name] = p.default
        props[p.name] = schema
    parameters = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if check_schema:
        jsonschema.Draft202012Validator.check_schema(parameters)  # reject a bad schema (e.g. a regex) now
    validator = jsonschema.Draft202012Validator(parameters)
    return BaselineTool(fn.__name__, description, parameters, validator, defaults, fn, inspect.iscoroutinefunction(fn))


def _error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}}


def prepare(call: Mapping[str, Any], registry: Mapping[str, BaselineTool]) -> tuple[BaselineTool | None, Any]:
    """(tool, kwargs) of a valid call, or (None, error envelope)."""
    name = call.get("name")
    tool = registry.get(name)  # type: ignore[arg-type]
    if tool is None:
        return None, _error("unknown_tool", f"There is no tool named {name!r}. Available tools: {sorted(registry)}.")
    args = call.get("input")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            return None, _error("invalid_arguments", f"The arguments are not valid JSON: {exc}.")
    if not isinstance(args, dict):
        return None, _error("invalid_arguments", "The arguments must be a JSON object.")
    errors = sorted(tool.validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if errors:
        problems = "; ".join(
            f"{'/'.join(map(str, e.absolute_path)) or '(arguments)'}: {e.message}" for e in errors
        )
        return None, _error(
            "invalid_arguments",
            f"Tool {tool.name!r} rejected its arguments: {problems}. Fix these and call it again.",
        )
    return tool, {**tool.defaults, **args}


def dispatch(call: Mapping[str, Any], registry: Mapping[str, BaselineTool]) -> dict[str, Any]:
    """One call, run inline; an envelope, never an exception."""
    tool, kwargs = prepare(call, registry)
    if tool is None:
        return kwargs  # type: ignore[no-any-return]
    started = time.perf_counter()
    try:
        value = tool.fn(**kwargs)
    except Exception as exc:
        return _error("internal_error", f"{type(exc).__name__}: {exc}")
    return {"ok": True, "value": value, "elapsed_ms": (time.perf_counter() - started) * 1000.0}


async def adispatch(call: Mapping[str, Any], registry: Mapping[str, BaselineTool], *, to_thread: bool = False) -> dict[str, Any]:
    """One call on an event loop: an async body awaited, a sync body inline or via ``asyncio.to_thread``."""
    tool, kwargs = prepare(call, registry)
    if tool is None:
        return kwargs  # type: ignore[no-any-return]
    started = time.perf_counter()
    try:
        if tool.is_async:
            value = await tool.fn(**kwargs)
        elif to_thread:
            value = await asyncio.to_thread(tool.fn, **kwargs)
        else:
            value = tool.fn(**kwargs)
    except Exception as exc:
        return _error("internal_error", f"{type(exc).__name__}: {exc}")
    return {"ok": True, "value": value, "elapsed_ms": (time.perf_counter() - started) * 1000.0}


def render_openai(registry: Mapping[str, BaselineTool]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions ``tools``, sorted by name."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for _, t in sorted(registry.items())
    ]
