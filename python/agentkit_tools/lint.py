"""``agentkit_tools.lint``: what a tool definition gets away with but should not.

Nothing here blocks a definition: ``from_callable`` already refuses what cannot work. ``lint``
reports what works but costs the model accuracy or hides a loss of fidelity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _core

__all__ = ["LintFinding", "lint", "CODES"]

#: Every finding code, with what it means.
CODES: dict[str, str] = {
    "documented_not_parameter": "the docstring documents a name the function does not take",
    "undocumented_parameter": "a parameter the model sees has no description",
    "short_description": "the tool's description is under the floor of 30 characters",
    "unresolved_hint": "a type hint could not be resolved or expressed; the value accepts anything",
    "non_json_default": "a default JSON cannot represent; the schema does not show it",
    "weakened_rendering": "a provider rendering could not express part of the schema",
    "unbound_method": "the function's first parameter is self/cls but nothing binds it",
    "undeclared_effects": "nobody said whether the tool changes the world; it is treated as read-only",
    "lint_error": "lint itself failed on this tool (a bug in lint, reported instead of raised)",
}


@dataclass(frozen=True)
class LintFinding:
    """One finding: ``tool`` name, ``code`` (a key of ``CODES``), ``subject`` (a parameter name,
    a schema path prefixed with the provider, or ``""`` for the tool itself) and a ``message``
    saying what to change."""

    tool: str
    code: str
    subject: str
    message: str

    def __str__(self) -> str:
        where = f" [{self.subject}]" if self.subject else ""
        return f"{self.tool}{where}: {self.code}: {self.message}"


def lint(target: Any) -> list[LintFinding]:
    """Findings for a tool, a ``ToolRegistry`` (every tool, sorted by name) or an iterable of
    tools. Never raises: a failure inside lint becomes a ``lint_error`` finding."""
    try:
        from .registry import ToolRegistry

        if isinstance(target, ToolRegistry):
            tools = [target.get(n) for n in target.names()]
        elif hasattr(target, "schema") or hasattr(target, "name"):
            tools = [target]
        else:
            tools = list(target)
    except Exception as exc:  # pragma: no cover - defensive: lint never raises
        return [LintFinding(str(getattr(target, "name", target)), "lint_error", "", f"{type(exc).__name__}: {exc}")]
    out: list[LintFinding] = []
    for t in tools:
        try:
            out.extend(_lint_tool(t))
        except Exception as exc:
            out.append(LintFinding(str(getattr(t, "name", t)), "lint_error", "", f"{type(exc).__name__}: {exc}"))
    return out


def _lint_tool(t: Any) -> list[LintFinding]:
    name = str(getattr(t, "name", ""))
    out: list[LintFinding] = []
    if getattr(t, "effects_declared", True) is False:
        out.append(
            LintFinding(
                name,
                "undeclared_effects",
                "",
                "the tool was made without side_effecting=: it runs as read-only, MCP clients get no "
                "read-only or destructive hint for it and it is never retried; declare "
                "side_effecting=True/False (or read_only=) when making it",
            )
        )
    schema = getattr(t, "schema", None)
    description = (getattr(t, "description", None) or getattr(schema, "description", "") or "").strip()
    if len(description) < _core.MIN_DESCRIPTION_CHARS:
        out.append(
            LintFinding(
                name,
                "short_description",
                "",
                f"the description has {len(description)} characters (floor {_core.MIN_DESCRIPTION_CHARS}): "
                "say what the tool does and when to use it",
            )
        )
    props: dict[str, Any] = {}
    if schema is not None:
        props = dict(schema.parameters.get("properties") or {})
    core = getattr(t, "_core", None)
    documented = list(getattr(core, "documented", None) or [])
    for d in documented:
        if d not in props:
            out.append(
                LintFinding(
                    name,
                    "documented_not_parameter",
                    d,
                    f"the docstring documents '{d}', which is not a parameter the model sees; "
                    "rename or remove the entry",
                )
            )
    for p, s in props.items():
        if not (isinstance(s, dict) and str(s.get("description") or "").strip()):
            out.append(
                LintFinding(
                    name,
                    "undocumented_parameter",
                    p,
                    f"parameter '{p}' has no description; document it in the docstring (Args:) or with "
                    "Annotated[T, \"...\"]",
                )
            )
    info = getattr(t, "_lint", None)
    if info is not None:
        for p, why in dict(getattr(info, "unresolved", {}) or {}).items():
            out.append(
                LintFinding(
                    name,
                    "unresolved_hint",
                    p,
                    f"{why}; the parameter accepts any value: import the type where the function is "
                    "defined or annotate with a JSON-expressible type",
                )
            )
        first = getattr(info, "unbound_first", None)
        if first is not None:
            out.append(
                LintFinding(
                    name,
                    "unbound_method",
                    first,
                    f"'{first}' is skipped but nothing binds it, so calls will fail: register the tool "
                    f"through an instance (instance.method) or build it with tool(instance.method, ...)",
                )
            )
        for p in getattr(info, "non_json_defaults", ()) or ():
            out.append(
                LintFinding(
                    name,
                    "non_json_default",
                    p,
                    f"the default of '{p}' is not JSON, so the model is not told it; use a JSON value "
                    "(or None) as the default",
                )
            )
    if schema is not None:
        from .providers import findings

        for f in findings(t):
            out.append(LintFinding(name, "weakened_rendering", f"{f.provider}:{f.path}", f.message))
    return out
