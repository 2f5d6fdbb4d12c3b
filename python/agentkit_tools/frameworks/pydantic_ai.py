"""Our tools as pydantic-ai tools (``pip install 'agentkit-tools[pydantic-ai]'``)::

    from pydantic_ai import Agent
    from agentkit_tools.frameworks.pydantic_ai import toolset

    agent = Agent("openai:gpt-5", toolsets=[toolset(registry)])

Each tool is ``pydantic_ai.Tool.from_schema``: the model is shown our input schema as is, and
pydantic-ai's own argument validation is skipped so that ours (in the Invoker) decides. A
successful call returns the text our renderings give the model (a ``str``); a result holding
images or files returns a list of texts and ``pydantic_ai.BinaryContent``; a failed call
raises ``pydantic_ai.ToolFailed`` with our message, so the model reads exactly that message and
the tool's retry budget is not spent (our repeat guard bounds identical calls instead).

The Invoker's ``ctx`` is a ``ToolContext`` whose ``run_id`` is pydantic-ai's run id, so repeat
detection and idempotency are scoped to the agent run; pass ``context=`` (a function of
pydantic-ai's ``RunContext``) to supply your own.
"""

from __future__ import annotations

from typing import Any, Callable

from . import Bridge, schema_of

__all__ = ["tools", "toolset"]


def _require() -> Any:
    try:
        import pydantic_ai
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("the pydantic-ai adapter needs pydantic-ai: pip install 'agentkit-tools[pydantic-ai]'") from exc
    return pydantic_ai


def _content(parts: list[Any]) -> list[Any]:
    from pydantic_ai import BinaryContent

    return [p if isinstance(p, str) else BinaryContent(data=p.data, media_type=p.mime) for p in parts]


def tools(source: Any, *, invoker: Any = None, context: Callable[[Any], Any] | None = None) -> list[Any]:
    """``pydantic_ai.Tool`` objects for ``source`` (a tool, a ``ToolRegistry`` or a list of
    tools), sorted by name, each calling through ``invoker`` (default: a new ``Invoker`` of
    those tools). Raises ``ImportError`` without pydantic-ai, ``ValueError`` when ``invoker``'s
    registry lacks one of the tools."""
    pai = _require()
    bridge = Bridge(source, invoker)
    make_ctx = context or (lambda run_ctx: bridge.context(getattr(run_ctx, "run_id", None)))
    out = []
    for tool in bridge.tools:
        out.append(
            pai.Tool.from_schema(
                _function(bridge, tool.name, make_ctx),
                name=tool.name,
                description=tool.description,
                json_schema=schema_of(tool),
                takes_ctx=True,
            )
        )
    return out


def toolset(source: Any, *, invoker: Any = None, context: Callable[[Any], Any] | None = None) -> Any:
    """A ``pydantic_ai.toolsets.FunctionToolset`` of :func:`tools`."""
    _require()
    from pydantic_ai.toolsets import FunctionToolset

    return FunctionToolset(tools(source, invoker=invoker, context=context))


def _function(bridge: Bridge, name: str, make_ctx: Callable[[Any], Any]) -> Any:
    from pydantic_ai import ToolFailed

    async def call(run_ctx: Any, **arguments: Any) -> Any:
        env = await bridge.call(name, arguments, getattr(run_ctx, "tool_call_id", None), make_ctx(run_ctx))
        ok, read = bridge.read(name, env)
        if not ok:
            raise ToolFailed(read)
        return read if isinstance(read, str) else _content(read)

    call.__name__ = name
    return call
