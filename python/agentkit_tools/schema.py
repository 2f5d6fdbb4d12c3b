"""``ToolSchema`` (what the model is shown of a tool) and the ``Tool`` protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

from .frozen import deep_freeze

__all__ = ["ToolSchema", "Tool"]


@dataclass(frozen=True)
class ToolSchema:
    """The model's view of one tool: its name, description and input schema.

    ``parameters`` is a JSON Schema object (draft 2020-12), deep-frozen on construction. The
    dataclass is frozen and hashable; the hash covers ``name`` and ``description``.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", deep_freeze(dict(self.parameters)))

    def __hash__(self) -> int:
        return hash((self.name, self.description))

    @classmethod
    def _of_frozen(cls, name: str, description: str, parameters: Mapping[str, Any]) -> ToolSchema:
        """A ``ToolSchema`` over ``parameters`` that is already deep-frozen (a ``FrozenDict`` of
        frozen containers, as the core's ``define_function_tool`` returns it): no copy is made."""
        self = object.__new__(cls)
        self.__dict__.update(name=name, description=description, parameters=parameters)
        return self

    # Provider renderings (rules in agentkit_tools.providers), cached on the schema.

    def to_anthropic(self) -> dict[str, Any]:
        """``{"name", "description", "input_schema"}`` for the Anthropic Messages API."""
        from .providers import render_schema

        return render_schema(self, "anthropic")

    def to_openai(self, strict: bool = False, api: str = "chat") -> dict[str, Any]:
        """An OpenAI ``function`` tool for ``api="chat"`` (Chat Completions) or ``"responses"``;
        ``strict=True`` gives the Structured Outputs form. Raises ``ValueError`` for another api."""
        from .providers import _provider, render_schema

        return render_schema(self, _provider("openai", strict, api))

    def to_gemini(self) -> dict[str, Any]:
        """A Gemini ``FunctionDeclaration`` (its OpenAPI schema subset)."""
        from .providers import render_schema

        return render_schema(self, "gemini")

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``tools/list`` entry (no annotations: a bare schema has no flags)."""
        from .providers import render_schema

        return render_schema(self, "mcp")


@runtime_checkable
class Tool(Protocol):
    """Anything with this shape is a tool the registry and the dispatcher accept.

    ``schema`` is a ``ToolSchema`` or None (a tool the model is not shown); ``run`` receives the
    validated arguments as a mapping and the run context (or None).
    """

    name: str
    description: str
    schema: Any
    side_effecting: bool
    requires_approval: bool
    output_schema: Any

    async def run(self, args: Mapping[str, Any], ctx: Any) -> Any: ...
