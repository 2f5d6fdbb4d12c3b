"""The exceptions of agentkit-tools, importable from ``agentkit_tools``.

Names, signatures and base classes match ``agentkit.tools`` so ``except`` clauses written against
that project keep working.
"""

from __future__ import annotations

from typing import Any

from ._core import codes

__all__ = [
    "ToolDefinitionError",
    "ToolArgumentError",
    "ToolShapeError",
    "ToolError",
    "ToolTimeoutError",
]


class ToolDefinitionError(ValueError):
    """A tool breaks the definition contract; raised at decoration or registration time.

    Examples: no ``side_effecting=``/``read_only=`` declaration, a description under 30
    characters, a TODO marker in the docstring the model would read, ``*args``, an invalid name.
    """


class ToolArgumentError(ValueError):
    """A tool call named arguments the tool does not accept, omitted required ones, or sent
    values its input schema forbids. Every problem of the call is reported at once.

    Attributes (all tuples): ``unexpected`` (argument names the schema does not declare),
    ``missing`` (required names, in signature order), ``accepted`` (every declared name, in
    signature order), ``invalid`` (``(argument path, reason)`` pairs; the reason names the legal
    values, the expected type or the bound).
    """

    def __init__(
        self,
        tool_name: str,
        *,
        unexpected: tuple[str, ...] = (),
        missing: tuple[str, ...] = (),
        accepted: tuple[str, ...] = (),
        invalid: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.tool_name = tool_name
        self.unexpected = tuple(unexpected)
        self.missing = tuple(missing)
        self.accepted = tuple(accepted)
        self.invalid = tuple((str(p), str(r)) for p, r in invalid)
        parts = []
        if self.unexpected:
            parts.append(f"unexpected argument(s) {_names(self.unexpected)}")
        if self.missing:
            parts.append(f"missing required argument(s) {_names(self.missing)}")
        if self.invalid:
            parts.append("invalid argument(s): " + "; ".join(f"{p}: {r}" for p, r in self.invalid))
        detail = "; ".join(parts) if parts else "arguments do not match the input schema"
        super().__init__(
            f"tool {tool_name!r} call rejected: {detail}. "
            f"Accepted arguments: {_names(self.accepted)}"
        )

    def __reduce__(self) -> Any:
        return (
            _rebuild_argument_error,
            (self.tool_name, self.unexpected, self.missing, self.accepted, self.invalid),
        )


#: How many names of a list a message spells out (a hostile call may send thousands).
_MAX_NAMES = 20
#: How many characters of one name a message shows.
_MAX_NAME_CHARS = 64


def _names(names: tuple[str, ...]) -> str:
    """A list of names for a message: ``['a', 'b']``, ``<none>`` when empty, at most 20 names
    of at most 64 characters each (``... and N more``)."""
    if not names:
        return "<none>"
    shown = [n if len(n) <= _MAX_NAME_CHARS else n[:_MAX_NAME_CHARS] + "..." for n in names[:_MAX_NAMES]]
    text = repr(shown)
    if len(names) > _MAX_NAMES:
        text = f"{text[:-1]}, ... and {len(names) - _MAX_NAMES} more]"
    return text


def _rebuild_argument_error(tool_name, unexpected, missing, accepted, invalid):  # type: ignore[no-untyped-def]
    return ToolArgumentError(
        tool_name, unexpected=unexpected, missing=missing, accepted=accepted, invalid=invalid
    )


class ToolShapeError(Exception):
    """A tool's result does not match its declared ``output_schema``.

    Raised by ``FunctionTool.run`` after the body returned. ``expected`` is the schema's name
    (a class name, or the JSON Schema ``title``/``"schema"``), ``raw`` the value the tool
    returned, ``errors`` the validator's reasons as a list of strings (``"path: reason"``; empty
    when none were given), which a loop can join with ``"; "`` for the model.
    """

    def __init__(self, tool_name: str, expected: str, raw: Any, errors: Any = None) -> None:
        self.tool_name = tool_name
        self.expected = expected
        self.raw = raw
        self.errors: list[str] = [
            e if isinstance(e, str) else (f"{e[0]}: {e[1]}" if isinstance(e, tuple) and len(e) == 2 else str(e))
            for e in (errors or ())
        ]
        super().__init__(f"tool {tool_name!r} returned value not matching schema {expected!r}")


class ToolError(Exception):
    """An expected business failure raised inside a tool (not found, permission denied, rate
    limited). The message is shown to the model, so it should say what to do next.

    ``code`` becomes the envelope's error code; ``retriable=True`` lets the retry middleware try
    again (only for read-only or idempotent tools); other keyword ``details`` are merged into the
    envelope's error object.
    """

    def __init__(
        self, message: str, *, code: str = codes.TOOL_ERROR, retriable: bool = False, **details: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retriable = retriable
        self.details = details


class ToolTimeoutError(TimeoutError):
    """A tool call outlived its deadline (``timeout_s``). Names the tool and the limit in seconds."""

    def __init__(self, tool_name: str, timeout_s: float) -> None:
        self.tool_name = tool_name
        self.timeout_s = timeout_s
        super().__init__(f"tool {tool_name!r} did not finish within {timeout_s:g}s")
