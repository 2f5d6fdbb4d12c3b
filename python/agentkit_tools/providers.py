"""Provider renderings of tools and registries. The rules live in the Rust core
(``src/providers.rs``); this module finds a tool's schema, flags and output schema, and caches.

Provider names (``PROVIDERS``):

- ``anthropic``: ``{"name", "description", "input_schema"}`` (Messages API ``tools``).
- ``openai``: ``{"type": "function", "function": {"name", "description", "parameters"}}``
  (Chat Completions); ``openai-strict`` adds ``"strict": true`` and the Structured Outputs form
  of the schema (every object closed, every property required, optional ones nullable).
- ``openai-responses`` / ``openai-responses-strict``: ``{"type": "function", "name",
  "description", "parameters", "strict"}`` (Responses API).
- ``gemini``: a ``FunctionDeclaration`` ``{"name", "description", "parameters"}`` in Gemini's
  OpenAPI 3.0 schema subset.
- ``mcp``: a ``tools/list`` entry ``{"name", "description", "inputSchema", "outputSchema"?,
  "annotations"}``.

What a provider cannot express is weakened in its rendering (the validator still enforces the
full schema at call time) and reported by :func:`findings` and ``agentkit_tools.lint``. When a
tool cannot be made strict at all (an open ``dict[str, V]`` object, a value of any type), its
strict rendering says ``"strict": false`` and carries the plain schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from . import _core

__all__ = ["PROVIDERS", "Finding", "render", "render_schema", "render_registry", "findings", "from_strict_arguments"]

#: Every provider name :func:`render` accepts.
PROVIDERS: tuple[str, ...] = tuple(_core.PROVIDERS)


@dataclass(frozen=True)
class Finding:
    """Something a provider rendering could not express exactly: ``path`` is a dotted path into
    the input schema (``"<root>"``, ``"properties.tags.items"``)."""

    provider: str
    path: str
    message: str


def _provider(provider: str, strict: bool = False, api: str = "chat") -> str:
    if provider == "openai":
        if api not in ("chat", "responses"):
            raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
        name = "openai" if api == "chat" else "openai-responses"
        return f"{name}-strict" if strict else name
    return provider


def _output_schema(tool: Any) -> Any:
    check = getattr(tool, "_output", None)
    if check is not None:
        return dict(check.advertised)
    spec = getattr(tool, "output_schema", None)
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        return dict(spec)
    from .introspect import output_schema_for

    try:
        return output_schema_for(spec)
    except Exception:
        return None


def _render(tool: Any, provider: str) -> tuple[dict[str, Any], list[Finding]]:
    cache = getattr(tool, "__dict__", {}).get("_renderings")
    if cache is not None and provider in cache:
        return cache[provider]
    schema = tool.schema
    destructive = getattr(tool, "destructive", None)
    flags = (
        bool(getattr(tool, "side_effecting", False)),
        bool(getattr(tool, "idempotent", False)),
        getattr(tool, "effects_declared", True) is not False,
        None if destructive is None else bool(destructive),
    )
    value, found = _core.render_tool(
        provider, schema.name, schema.description, schema.parameters, _output_schema(tool), flags
    )
    result = (value, [Finding(*f) for f in found])
    try:
        tool.__dict__.setdefault("_renderings", {})[provider] = result
    except (AttributeError, TypeError):
        pass
    return result


def render(tool: Any, provider: str) -> dict[str, Any]:
    """The ``provider`` rendering of a tool (anything with ``.schema``, a ``ToolSchema``).

    Computed once per tool and provider, then copied out (so the caller may change it).
    Raises ``ValueError`` for an unknown provider and for a tool without a schema.
    """
    if getattr(tool, "schema", None) is None:
        raise ValueError(f"tool {getattr(tool, 'name', tool)!r} has no schema: the model is not shown it")
    return _core.copy_json(_render(tool, provider)[0])


def render_schema(schema: Any, provider: str) -> dict[str, Any]:
    """The ``provider`` rendering of a bare ``ToolSchema`` (no flags: MCP annotations are left
    out). Cached on the schema."""
    cache = schema.__dict__.get("_renderings")
    if cache is None:
        cache = {}
        object.__setattr__(schema, "_renderings", cache)
    if provider not in cache:
        value, found = _core.render_tool(provider, schema.name, schema.description, schema.parameters, None, None)
        cache[provider] = (value, [Finding(*f) for f in found])
    return _core.copy_json(cache[provider][0])


def render_registry(registry: Any, provider: str) -> list[dict[str, Any]]:
    """The ``provider`` rendering of every tool of ``registry`` that has a schema, sorted by
    name (byte-stable across runs and registration orders); cached until the registry changes."""
    key = ("render", provider)
    cached = registry._cache.get(key)
    if cached is None:
        tools = [t for t in registry._core.sorted_tools() if getattr(t, "schema", None) is not None]
        cached = [_render(t, provider)[0] for t in tools]
        registry._cache[key] = cached
    return _core.copy_json(cached)


def findings(tool: Any, providers: tuple[str, ...] = PROVIDERS) -> list[Finding]:
    """What each provider rendering of ``tool`` had to weaken (empty for a tool without schema)."""
    if getattr(tool, "schema", None) is None:
        return []
    out: list[Finding] = []
    for p in providers:
        out.extend(_render(tool, p)[1])
    return out


def from_strict_arguments(tool: Any, args: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments a model sent through an OpenAI strict rendering, made valid for the tool's real
    schema: strict mode sends every key, with ``null`` meaning "not given", so ``null`` is
    removed wherever the real schema neither requires the property nor admits ``null`` (nested
    objects too). The function's own defaults then apply."""
    return _core.strip_strict_nulls(tool.schema.parameters, dict(args))  # type: ignore[no-any-return]
