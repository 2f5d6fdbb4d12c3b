"""``ToolRegistry``: tools by name, with a byte-stable order."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from . import _core
from .schema import ToolSchema
from .tools import check_tool_options, core_of, ensure_tool

__all__ = ["ToolRegistry"]


def _is_read_only(t: Any) -> bool:
    """Declared read-only: not side-effecting, and its effects were declared."""
    return not getattr(t, "side_effecting", False) and getattr(t, "effects_declared", True) is not False


class ToolRegistry:
    """Tools by name. The lookup, the sorted order and call validation live in the Rust core.

    ``schemas()`` and the provider renderings are sorted by name and byte-identical across runs
    and registration orders, so a cached prompt prefix stays valid; they are computed once and
    cached until the registry changes. ``max_result_chars`` is the default limit of a rendered
    result (a tool's own ``max_result_chars`` wins); ``max_media_bytes`` the default limit of one
    image or file in a result, in bytes (a tool's own ``max_media_bytes`` wins; None: 5 MiB).
    Raises ``ToolDefinitionError`` when either is not a whole number of at least 1 (a bool, a
    string, a float, 0 or less).
    """

    def __init__(
        self, tools: Iterable[Any] = (), *, max_result_chars: int | None = None, max_media_bytes: int | None = None
    ) -> None:
        check_tool_options(
            "", max_result_chars=max_result_chars, max_media_bytes=max_media_bytes, owner="ToolRegistry"
        )
        self._core = _core.CoreRegistry()
        self._cache: dict[str, Any] = {}
        self.max_result_chars = max_result_chars
        self.max_media_bytes = max_media_bytes
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
        ``replace``, ``ToolDefinitionError`` for a name outside ``^[a-zA-Z0-9_-]{1,64}$``."""
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

    def view(
        self,
        names: Iterable[str] | None = None,
        *,
        exclude: Iterable[str] = (),
        read_only: bool | None = None,
        where: Callable[[Any, Any], bool] | None = None,
        ctx: Any = None,
    ) -> ToolRegistry:
        """A registry holding only some of these tools, for one run: hand it to an ``Invoker``,
        ``dispatch`` or a round-trip helper and the model is shown, and may call, only those
        (a call of any other answers ``unknown_tool``, listing the visible names).

        A tool is kept when it passes every filter given: ``names`` (keep only these),
        ``exclude`` (drop these), ``read_only`` (True: keep tools declared read-only; a tool
        whose effects were never declared, ``effects_declared=False``, is left out, as it is not
        known to change nothing; False: keep the others, side-effecting or undeclared), ``where(tool, ctx)`` (a predicate,
        given ``ctx``).
        The view shares the tool objects and the limits of this registry; its schemas and
        renderings are sorted and byte-stable like any registry's. It is a snapshot: tools
        registered here later are not added to it. Raises ``KeyError`` naming any name of
        ``names``/``exclude`` that is not registered (a typo would silently hide a tool).
        """
        wanted = None if names is None else ([names] if isinstance(names, str) else list(names))
        dropped = {exclude} if isinstance(exclude, str) else set(exclude)
        unknown = sorted(n for n in [*(wanted or ()), *dropped] if n not in self)
        if unknown:
            raise KeyError(f"ToolRegistry.view: no tool named {', '.join(map(repr, unknown))}; registered: {', '.join(self.names())}")
        keep = set(wanted) if wanted is not None else None
        out = ToolRegistry(max_result_chars=self.max_result_chars, max_media_bytes=self.max_media_bytes)
        for t in self._core.tools():
            if keep is not None and t.name not in keep or t.name in dropped:
                continue
            if read_only is not None and _is_read_only(t) != bool(read_only):
                continue
            if where is not None and not where(t, ctx):
                continue
            out._core.add(t.name, t, core_of(t), False)
        return out

    def requires_approval(self, name: str) -> bool:
        """Whether the tool called ``name`` runs only after approval; False for a name that is not
        registered (as the reference answers; the call itself is then refused as unknown)."""
        if name not in self:
            return False
        return bool(getattr(self.get(name), "requires_approval", False))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._core

    def __len__(self) -> int:
        return len(self._core)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._core.tools())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"
