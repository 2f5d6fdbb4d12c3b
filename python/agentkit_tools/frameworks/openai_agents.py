"""Our tools as OpenAI Agents SDK tools (``pip install 'agentkit-tools[openai-agents]'``)::

    from agents import Agent
    from agentkit_tools.frameworks.openai_agents import tools

    agent = Agent(name="shop", tools=tools(registry))

Each tool is an ``agents.FunctionTool`` whose ``params_json_schema`` is our OpenAI strict
rendering (``strict_json_schema=True``) when the tool can be made strict, else our plain schema
(``strict_json_schema=False``); ``strict=False`` always sends the plain one. The SDK hands the
model's JSON text to the Invoker unparsed (strict ``null``s of "not given" are dropped first),
so our validation decides. A successful call returns the text our renderings give the model, or
for images and files a list of ``ToolOutputText`` / ``ToolOutputImage`` /
``ToolOutputFileContent``; a failed call returns our message as the tool output (the SDK's way
of sending an error back to the model), never an exception.

The Invoker's ``ctx`` is the run context you pass to ``Runner.run(..., context=...)`` when it
has a ``run_id`` (a ``ToolContext``, say), so repeat detection and idempotency follow the run;
otherwise ``None`` (one scope per Invoker). ``context=`` (a function of the SDK's
``ToolContext``) overrides this.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from . import Bridge, schema_of

__all__ = ["tools"]


def _require() -> Any:
    try:
        import agents
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("the OpenAI Agents SDK adapter needs openai-agents: pip install 'agentkit-tools[openai-agents]'") from exc
    return agents


def _default_context(tool_ctx: Any) -> Any:
    run = getattr(tool_ctx, "context", None)
    return run if getattr(run, "run_id", None) is not None else None


def _outputs(parts: list[Any]) -> list[Any]:
    from agents import ToolOutputFileContent, ToolOutputImage, ToolOutputText

    from ..media import ToolImage

    out: list[Any] = []
    for p in parts:
        if isinstance(p, str):
            out.append(ToolOutputText(text=p))
        elif isinstance(p, ToolImage):
            out.append(ToolOutputImage(image_url=p.data_url()))
        else:
            out.append(ToolOutputFileContent(file_data=p.data_url(), filename=p.filename()))
    return out


def tools(
    source: Any, *, invoker: Any = None, strict: bool = True, context: Callable[[Any], Any] | None = None
) -> list[Any]:
    """``agents.FunctionTool`` objects for ``source`` (a tool, a ``ToolRegistry`` or a list of
    tools), sorted by name, each calling through ``invoker`` (default: a new ``Invoker`` of
    those tools). Raises ``ImportError`` without the SDK, ``ValueError`` when ``invoker``'s
    registry lacks one of the tools."""
    agents = _require()
    from ..providers import render

    bridge = Bridge(source, invoker)
    make_ctx = context or _default_context
    out = []
    for tool in bridge.tools:
        rendering = render(tool, "openai-responses-strict") if strict else {}
        is_strict = bool(rendering.get("strict"))
        out.append(
            agents.FunctionTool(
                name=tool.name,
                description=tool.description,
                params_json_schema=rendering["parameters"] if is_strict else schema_of(tool),
                on_invoke_tool=_invoke(bridge, tool, is_strict, make_ctx),
                strict_json_schema=is_strict,
            )
        )
    return out


def _invoke(bridge: Bridge, tool: Any, strict: bool, make_ctx: Callable[[Any], Any]) -> Any:
    from ..providers import from_strict_arguments

    name = tool.name

    async def on_invoke_tool(tool_ctx: Any, input_json: str) -> Any:
        arguments: Any = input_json
        if strict and "null" in input_json:  # no null token: nothing to drop
            try:
                parsed = json.loads(input_json) if input_json else {}
            except ValueError:
                parsed = None  # not JSON: the Invoker reports it
            if isinstance(parsed, dict):
                arguments = from_strict_arguments(tool, parsed)
        env = await bridge.call(name, arguments or {}, getattr(tool_ctx, "tool_call_id", None), make_ctx(tool_ctx))
        read = bridge.read(name, env)[1]
        return read if isinstance(read, str) else _outputs(read)

    return on_invoke_tool
