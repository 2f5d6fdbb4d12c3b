"""``python -m agentkit_tools schema MODULE:OBJ [--format ...]`` (SPEC §9): print the provider
rendering of a function, a tool, a registry, a list of tools or an instance's public methods as
JSON (indent 2). What the rendering had to weaken goes to stderr as ``warning:`` lines.

Exit status: 0 printed; 1 the object cannot be turned into tools (``ToolDefinitionError``, ...);
2 bad ``MODULE:OBJ`` (import or attribute error).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from typing import Any

__all__ = ["add_parser", "run", "load", "tools_of"]

FORMATS = ("anthropic", "openai", "openai-strict", "openai-responses", "openai-responses-strict", "gemini", "mcp")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``schema`` subcommand to an ``argparse`` subparsers object; returns its parser
    (``run`` is set as its ``func`` default)."""
    p = subparsers.add_parser(
        "schema",
        help="print the provider rendering of tools",
        description="Print the provider rendering (JSON) of a function, a tool, a ToolRegistry, a "
        "list of tools or an object's public methods.",
    )
    p.add_argument("target", metavar="MODULE:OBJ", help="e.g. myapp.tools:registry (OBJ may be dotted)")
    p.add_argument("--format", choices=FORMATS, default="anthropic", help="provider rendering (default: anthropic)")
    p.set_defaults(func=run)
    return p


def load(target: str) -> Any:
    """The object named by ``MODULE:OBJ`` (``OBJ`` may be a dotted path). Raises ``ValueError``
    for a malformed target, ``ImportError``/``AttributeError`` when it does not exist."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:OBJ (e.g. myapp.tools:search), got {target!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def tools_of(obj: Any) -> tuple[list[Any], bool]:
    """``(tools, single)``: the tools ``obj`` stands for, and whether it is one tool (printed as
    an object) rather than a collection (printed as a list, sorted by name)."""
    from .registry import ToolRegistry
    from .schema import ToolSchema
    from .tools import FunctionTool

    if isinstance(obj, ToolRegistry):
        return [obj.get(n) for n in obj.names()], False
    if isinstance(obj, FunctionTool) or isinstance(obj, ToolSchema) or hasattr(obj, "schema"):
        return [obj], True
    if isinstance(obj, list | tuple):
        return sorted((tools_of(o)[0][0] for o in obj), key=lambda t: t.name), False
    if inspect.isroutine(obj) or (callable(obj) and not isinstance(obj, type) and _is_plain_callable(obj)):
        return [FunctionTool.from_callable(obj)], True
    if not isinstance(obj, type) and not inspect.ismodule(obj):
        methods = [
            getattr(obj, n)
            for n in sorted(dir(obj))
            if not n.startswith("_") and inspect.ismethod(getattr(obj, n, None))
        ]
        if methods:
            return [FunctionTool.from_callable(m) for m in methods], False
    raise TypeError(
        f"{obj!r} is not a function, a tool, a ToolRegistry, a list of tools or an object with public methods"
    )


def _is_plain_callable(obj: Any) -> bool:
    """A callable object with no public methods of its own: treat it as one tool."""
    return not any(not n.startswith("_") and inspect.ismethod(getattr(obj, n, None)) for n in dir(obj))


def run(args: argparse.Namespace) -> int:
    """Print the rendering of ``args.target`` in ``args.format``; returns the exit status."""
    from .providers import findings, render, render_schema
    from .schema import ToolSchema

    try:
        obj = load(args.target)
    except (ValueError, ImportError, AttributeError) as exc:
        print(f"error: cannot load {args.target}: {exc}", file=sys.stderr)
        return 2
    try:
        tools, single = tools_of(obj)
        rendered = []
        for t in tools:
            if isinstance(t, ToolSchema):
                rendered.append(render_schema(t, args.format))
            elif getattr(t, "schema", None) is not None:
                rendered.append(render(t, args.format))
                for f in findings(t, (args.format,)):
                    print(f"warning: {t.name} [{f.path}]: {f.message}", file=sys.stderr)
    except Exception as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    out = rendered[0] if single and rendered else rendered
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0

