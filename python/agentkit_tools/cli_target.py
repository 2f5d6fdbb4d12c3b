"""What the command line's TARGET argument names, and the tools it stands for.

A target is ``MODULE:OBJ`` (``myapp.tools:registry``; the module is imported as ``import``
would) or ``path/to/file.py:OBJ`` (the file is loaded as a module, its directory put first on
``sys.path`` as ``python path/to/file.py`` would). ``OBJ`` may be dotted (``shop.search``).

The object may be a ``ToolRegistry``, a tool, a function, a list or tuple of them, or an instance:
of an instance, the methods decorated with ``@tool`` are its tools when it has any, otherwise all
its public methods (read as undeclared tools).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any

__all__ = ["CliError", "load", "tools_of", "registry_of", "paragraph", "TARGET_HELP"]

#: The help text of a TARGET argument.
TARGET_HELP = (
    "MODULE:OBJ (myapp.tools:registry) or path/to/file.py:OBJ naming a ToolRegistry, a tool, a "
    "function, a list of them, or an instance (its @tool methods, else its public methods)"
)


def add_approve_option(parser: Any, help: str = "allow the tool NAME to run although it requires approval; repeat for several tools") -> None:
    """The repeatable ``--approve NAME`` option shared by ``call``, ``replay`` and ``serve-mcp``."""
    parser.add_argument("--approve", metavar="NAME", action="append", default=[], help=help)


def paragraph(text: str) -> str:
    """``text`` wrapped at 88 columns, for a ``--help`` description."""
    import textwrap

    return textwrap.fill(text, width=88)


class CliError(Exception):
    """A mistake in what the user typed: reported as one ``error:`` line, exit status 2."""


def load(target: str) -> Any:
    """The object named by ``MODULE:OBJ`` or ``path/to/file.py:OBJ``.

    Raises ``CliError`` with a one-line message when the target is malformed, the module or file
    cannot be imported, or the object does not exist."""
    where, sep, attr = target.rpartition(":")
    if not sep or not where or not attr:
        raise CliError(
            f"cannot load {target}: expected MODULE:OBJ or path/to/file.py:OBJ "
            f"(e.g. myapp.tools:registry), got {target!r}"
        )
    try:
        obj: Any = _import_file(where) if _is_path(where) else importlib.import_module(where)
    except CliError as exc:
        raise CliError(f"cannot load {target}: {exc}") from None
    except ImportError as exc:
        raise CliError(f"cannot load {target}: {exc}") from None
    except Exception as exc:  # the module itself failed while being imported
        raise CliError(f"cannot load {target}: importing it raised {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise CliError(f"cannot load {target}: {exc}") from None
    return obj


def _is_path(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where


def _import_file(path: str) -> Any:
    if not path.endswith(".py"):
        raise CliError(f"{path} is not a .py file (a file target is path/to/file.py:OBJ)")
    if not os.path.isfile(path):
        raise CliError(f"no such file: {path}")
    full = os.path.abspath(path)
    directory = os.path.dirname(full)
    stem = os.path.splitext(os.path.basename(full))[0]
    existing = sys.modules.get(stem)
    if existing is not None and os.path.abspath(getattr(existing, "__file__", "") or "") == full:
        return existing
    name = stem if existing is None and stem.isidentifier() else f"_agentkit_target_{abs(hash(full))}"
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise CliError(f"{path} is not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def tools_of(obj: Any) -> tuple[list[Any], bool]:
    """``(tools, single)``: the tools ``obj`` stands for, and whether it is one tool (printed as
    an object) rather than a collection (printed as a list, sorted by name). Raises ``CliError``
    when ``obj`` stands for no tool, and ``ToolDefinitionError`` when a function cannot be one."""
    from .registry import ToolRegistry
    from .schema import ToolSchema
    from .tools import FunctionTool

    if isinstance(obj, ToolRegistry):
        return [obj.get(n) for n in obj.names()], False
    if isinstance(obj, (FunctionTool, ToolSchema)) or (hasattr(obj, "schema") and hasattr(obj, "name")):
        return [obj], True
    if isinstance(obj, (list, tuple)):
        return sorted((t for o in obj for t in tools_of(o)[0]), key=lambda t: t.name), False
    if inspect.isroutine(obj):
        return [FunctionTool.from_callable(obj)], True
    if not isinstance(obj, type) and not inspect.ismodule(obj):
        names = [n for n in sorted(dir(obj)) if not n.startswith("_")]
        members = [getattr(obj, n, None) for n in names]
        decorated = [m for m in members if isinstance(m, FunctionTool)]
        if decorated:
            return sorted(decorated, key=lambda t: t.name), False
        methods = [m for m in members if inspect.ismethod(m)]
        if methods:
            return [FunctionTool.from_callable(m) for m in methods], False
        if callable(obj):
            return [FunctionTool.from_callable(obj)], True
    kind = "a class" if isinstance(obj, type) else "a module" if inspect.ismodule(obj) else type(obj).__name__
    raise CliError(
        f"{_short(obj)} ({kind}) stands for no tool: name a ToolRegistry, a tool, a function, a list "
        "of them or an instance (its @tool methods, else its public methods)"
        + (" — for a class, name an instance of it" if isinstance(obj, type) else "")
    )


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."


def registry_of(obj: Any) -> Any:
    """A ``ToolRegistry`` for ``obj``: the registry itself, or a new one holding the tools
    ``tools_of(obj)`` finds (bare ``ToolSchema`` objects, which cannot run, are left out).
    Raises as ``tools_of`` does."""
    from .registry import ToolRegistry
    from .schema import ToolSchema

    if isinstance(obj, ToolRegistry):
        return obj
    tools, _ = tools_of(obj)
    return ToolRegistry([t for t in tools if not isinstance(t, ToolSchema)])
