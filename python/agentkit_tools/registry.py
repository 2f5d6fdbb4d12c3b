"""``ToolRegistry``: tools by name, with a byte-stable order (SPEC §6)."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from . import _core
from .schema import ToolSchema
from .tools import core_of, ensure_tool

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Tools by name. The lookup, the sorted order and call validation live in the Rust core.

    ``schemas()`` and the provider renderings are sorted by name and byte-identical across runs
    and registration orders, so a cached prompt prefix stays valid; they are computed once and
    cached until the registry changes. ``max_result_chars`` is the default limit of a rendered
    result (a tool's own ``max_result_chars`` wins).
    """

    def __init__(self, tools: Iterable[Any] = (), *, max_result_chars: int | None = None) -> None:
        self._core = _core.CoreRegistry()
        self._cache: dict[str, Any] = {}
        self.max_result_chars = max_result_chars
        for t in tools:
            self.register(t)

    @classmethod
    def from_tools(cls, items: Iterable[Any]) -> ToolRegistry:
        """A registry of ``items`` (tools and plain callables, each converted with
        ``from_callable``). Raises ``ToolDefinitionError`` for a bad callable and ``ValueError``
        on a name collision."""
        return cls(items)

    def register(self, tool: Any, *, replace: bool = False) -> Any:
        """Add a tool (a plain callable is converted with ``from_callable``, read-only by
        default). Returns the tool. Raises ``ValueError`` when the name is taken and not
        ``replace``."""
        t = ensure_tool(tool)
        self._core.add(t.name, t, core_of(t), replace)
        self._cache.clear()
        return t

    def unregister(self, name: str) -> None:
        """Remove a tool. Raises ``KeyError("no tool '<name>'")`` when absent."""
        self._core.remove(name)
        self._cache.clear()

    def get(self, name: str) -> Any:
        """The tool called ``name``. Raises ``KeyError("no tool '<name>'")``."""
        return self._core.get(name)

    def names(self) -> list[str]:
        """Tool names, sorted."""
        return self._core.names()  # type: ignore[no-any-return]

    def tools(self) -> list[Any]:
        """Tools in insertion order."""
        return self._core.tools()  # type: ignore[no-any-return]

    def schemas(self) -> list[ToolSchema]:
        """The schemas the model is shown, sorted by name; tools without a schema are skipped."""
        cached = self._cache.get("schemas")
        if cached is None:
            cached = [t.schema for t in self._core.sorted_tools() if getattr(t, "schema", None) is not None]
            self._cache["schemas"] = cached
        return list(cached)

    def render(self, provider: str) -> list[dict[str, Any]]:
        """Every schema'd tool rendered for ``provider`` (a name of
        ``agentkit_tools.providers.PROVIDERS``), sorted by name and byte-stable; cached until the
        registry changes. Raises ``ValueError`` for an unknown provider."""
        from .providers import render_registry

        return render_registry(self, provider)

    def to_anthropic(self) -> list[dict[str, Any]]:
        """``render("anthropic")``."""
        return self.render("anthropic")

    def to_openai(self, strict: bool = False, api: str = "chat") -> list[dict[str, Any]]:
        """``render("openai"...)`` for ``api="chat"`` or ``"responses"``, strict or not."""
        from .providers import _provider

        return self.render(_provider("openai", strict, api))

    def to_gemini(self) -> list[dict[str, Any]]:
        """``render("gemini")``: the ``functionDeclarations`` list."""
        return self.render("gemini")

    def to_mcp(self) -> list[dict[str, Any]]:
        """``render("mcp")``: the ``tools`` list of an MCP ``tools/list`` result."""
        return self.render("mcp")

    def requires_approval(self, name: str) -> bool:
        """Whether the tool called ``name`` runs only after approval. Raises ``KeyError``."""
        return bool(getattr(self.get(name), "requires_approval", False))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._core

    def __len__(self) -> int:
        return len(self._core)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._core.tools())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"
