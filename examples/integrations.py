"""Tools from an MCP server, an image result, a per-run view, and our tools inside pydantic-ai.

Run: ``pip install '.[mcp,pydantic-ai]'`` then ``python examples/integrations.py``.
"""

import asyncio

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from agentkit_tools import Invoker, ToolImage, ToolRegistry, tool
from agentkit_tools.frameworks.pydantic_ai import toolset
from agentkit_tools.mcp_client import MCPToolset
from agentkit_tools.roundtrip import anthropic_tool_results

# An MCP server written with the official SDK (run in-process here; MCPToolset.stdio(...) and
# MCPToolset.http(url) connect to real ones).
weather = MCPServer("weather")


@weather.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str, days: int = 1) -> str:
    """Forecast the weather of a city."""
    return f"{city}: sunny for {days} day(s)"


@tool(read_only=True)
def radar(city: str) -> list:
    """Return the current rain radar picture of a city, with a caption."""
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16  # a real tool would render or fetch one
    return [f"radar of {city}:", ToolImage(png)]


async def main() -> None:
    async with MCPToolset(weather, prefix="wx_") as remote:
        registry = ToolRegistry([radar])
        remote.register(registry)  # kept up to date on tools/list_changed
        print(registry.names(), registry.get("wx_forecast").read_only)
        invoker = Invoker(registry)
        ok = await invoker.invoke({"name": "wx_forecast", "input": {"city": "Oslo", "days": 2}})
        print(ok["value"])
        bad = await invoker.invoke({"name": "wx_forecast", "input": {"city": "Oslo", "days": "two"}})
        print(bad["error"]["message"])  # refused here, before anything travels

        # Media reach the model natively (Anthropic: image blocks inside tool_result)
        reply = await anthropic_tool_results(
            {"content": [{"type": "tool_use", "id": "t1", "name": "radar", "input": {"city": "Oslo"}}]}, invoker
        )
        print([block["type"] for block in reply["content"][0]["content"]])

        # One run sees only the forecast; any other tool answers unknown_tool
        view = registry.view(names=["wx_forecast"])
        hidden = await Invoker(view).invoke({"name": "radar", "input": {"city": "Oslo"}})
        print(hidden["error"]["code"], "-", hidden["error"]["message"])

        # The same tools inside a pydantic-ai agent (a scripted model stands in for an LLM)
        def model(messages, info):
            if len(messages) == 1:
                return ModelResponse(parts=[ToolCallPart("wx_forecast", {"city": "Bergen"})])
            return ModelResponse(parts=[TextPart(f"tool said: {messages[-1].parts[0].content}")])

        agent = Agent(FunctionModel(model), toolsets=[toolset(registry)])
        print((await agent.run("Weather in Bergen?")).output)


asyncio.run(main())
