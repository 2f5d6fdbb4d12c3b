"""Our tools inside other frameworks' agent loops, each driven by that framework's own scripted
test model: pydantic-ai's ``FunctionModel``, an OpenAI Agents SDK ``Model`` that replays turns,
and langchain-core's ``GenericFakeChatModel``. In each: the schema the framework sends is ours,
a valid call runs our tool, an invalid call returns our message to the model."""

from __future__ import annotations

from typing import Any

import pytest

from agentkit_tools import Invoker, ToolImage, ToolRegistry, tool
from fakes.inventory_tools import registry

# Both need Python 3.11+ (pydantic-ai-slim 2.60, langchain-core 1.8): not installable on 3.10.
NO_PYDANTIC_AI = "pydantic-ai-slim>=2.60 (Python 3.11+) is not installed"
NO_LANGCHAIN = "langchain-core>=1.8 (Python 3.11+) is not installed"

BAD_PRICE = (
    "tool 'set_price' call rejected: missing required argument(s) ['cents']; invalid argument(s): sku: expected "
    "string, got integer 1. Accepted arguments: ['sku', 'cents']. Re-read the input schema and call 'set_price' "
    "again with corrected arguments."
)
STOCK = '{"sku": "SKU-1", "on_hand": 12}'
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


@tool(read_only=True)
def label(sku: str) -> list[Any]:
    """Render the shelf label of a SKU as an image, with its caption.

    Args:
        sku: The SKU code.
    """
    return [f"label of {sku}", ToolImage(PNG)]


def plain_schemas() -> dict[str, Any]:
    return {t["name"]: t["input_schema"] for t in registry.to_anthropic()}


# ------------------------------------------------------------------ pydantic-ai


async def test_pydantic_ai_agent_loop() -> None:
    pytest.importorskip("pydantic_ai", reason=NO_PYDANTIC_AI)
    from pydantic_ai import Agent, BinaryContent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agentkit_tools.frameworks.pydantic_ai import toolset

    seen: dict[str, Any] = {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["schemas"] = {t.name: t.parameters_json_schema for t in info.function_tools}
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("get_stock", {"sku": "SKU-1"}, tool_call_id="c1"),
                    ToolCallPart("set_price", {"sku": 1}, tool_call_id="c2"),
                    ToolCallPart("label", {"sku": "SKU-1"}, tool_call_id="c3"),
                ]
            )
        seen["returns"] = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart("done")])

    reg = ToolRegistry([*registry, label])
    result = await Agent(FunctionModel(model), toolsets=[toolset(reg)]).run("check SKU-1")
    assert result.output == "done"
    assert seen["schemas"] == {**plain_schemas(), "label": label.schema.parameters}
    by_id = {p.tool_call_id: p for p in seen["returns"]}
    assert by_id["c1"].content == STOCK
    assert by_id["c2"].content == BAD_PRICE and by_id["c2"].outcome == "failed"
    assert by_id["c3"].content == ["label of SKU-1", BinaryContent(data=PNG, media_type="image/png")]


# ------------------------------------------------------------------ OpenAI Agents SDK


async def test_openai_agents_sdk_agent_loop() -> None:
    from agents import Agent, ModelResponse, Runner, Usage, set_tracing_disabled
    from agents.models.interface import Model
    from agents.models.openai_responses import Converter
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from agentkit_tools.frameworks.openai_agents import tools

    set_tracing_disabled(True)
    seen: dict[str, Any] = {}

    class Scripted(Model):
        """Replays two turns: three tool calls, then a final answer."""

        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *args: Any, **kwargs: Any) -> ModelResponse:
            seen["sent"] = Converter.convert_tools(tools, []).tools
            if "outputs" not in seen and not any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input):
                seen["outputs"] = None
                calls = [
                    ("c1", "get_stock", '{"sku": "SKU-1", "warehouse": null}'),
                    ("c2", "set_price", '{"sku": 1}'),
                    ("c3", "label", '{"sku": "SKU-1"}'),
                ]
                output: list[Any] = [
                    ResponseFunctionToolCall(type="function_call", call_id=i, name=n, arguments=a, id=f"fc_{i}", status="completed")
                    for i, n, a in calls
                ]
            else:
                seen["outputs"] = {i["call_id"]: i["output"] for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"}
                output = [
                    ResponseOutputMessage(
                        id="m1", type="message", role="assistant", status="completed",
                        content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    reg = ToolRegistry([*registry, label])
    agent = Agent(name="shop", model=Scripted(), tools=tools(reg))
    result = await Runner.run(agent, "check SKU-1")
    assert result.final_output == "done"
    # what the SDK sends the Responses API is our strict rendering, byte for byte
    assert [dict(t) for t in seen["sent"]] == reg.to_openai(strict=True, api="responses")
    assert seen["outputs"]["c1"] == STOCK
    assert seen["outputs"]["c2"] == BAD_PRICE
    assert seen["outputs"]["c3"] == [
        {"type": "input_text", "text": "label of SKU-1"},
        {"type": "input_image", "image_url": ToolImage(PNG).data_url()},
    ]


# ------------------------------------------------------------------ langchain-core


async def test_langchain_core_tool_loop() -> None:
    pytest.importorskip("langchain_core", reason=NO_LANGCHAIN)
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from agentkit_tools.frameworks.langchain import tools

    reg = ToolRegistry([*registry, label])
    lc_tools = {t.name: t for t in tools(reg)}
    # the schema bind_tools sends (convert_to_openai_tool) is ours
    assert [convert_to_openai_tool(t) for t in lc_tools.values()] == reg.to_openai()

    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    content="",
                    tool_calls=[
                        {"name": "get_stock", "args": {"sku": "SKU-1"}, "id": "c1"},
                        {"name": "set_price", "args": {"sku": 1}, "id": "c2"},
                        {"name": "label", "args": {"sku": "SKU-1"}, "id": "c3"},
                    ],
                ),
                AIMessage(content="done"),
            ]
        )
    )
    messages: list[Any] = [HumanMessage("check SKU-1")]
    while True:  # the tool-calling loop of langchain-core's primitives
        reply = await model.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(await lc_tools[call["name"]].ainvoke({**call, "type": "tool_call"}))
    assert messages[-1].content == "done"
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert (results["c1"].content, results["c1"].status) == (STOCK, "success")
    assert (results["c2"].content, results["c2"].status) == (BAD_PRICE, "error")
    assert results["c3"].content == [
        {"type": "text", "text": "label of SKU-1"},
        {"type": "image", "base64": ToolImage(PNG).base64(), "mime_type": "image/png"},
    ]
    # the sync path runs through the Invoker too
    sync = lc_tools["set_price"].invoke({"name": "set_price", "args": {"sku": 1}, "id": "c9", "type": "tool_call"})
    assert (sync.content, sync.status) == (BAD_PRICE, "error")


def test_adapters_share_a_given_invoker() -> None:
    pytest.importorskip("langchain_core", reason=NO_LANGCHAIN)
    from agentkit_tools.frameworks.langchain import tools

    inv = Invoker(registry)
    [t] = tools(registry.get("get_stock"), invoker=inv)
    assert [t.invoke({"sku": "SKU-1"}) for _ in range(3)] == [
        STOCK,
        STOCK,
        # the third identical call in the invoker's (default) scope is refused by our repeat guard
        "get_stock has now been called 3 times with these same arguments in this conversation, and it was not run "
        "again. Stop calling it; explain the problem to the user instead.",
    ]
    with pytest.raises(ValueError, match=r"^the invoker's registry has no tool named 'label'$"):
        tools(label, invoker=inv)


async def test_adapter_forgets_the_oldest_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentkit_tools.frameworks as fw

    monkeypatch.setattr(fw, "MAX_RUNS", 2)
    bridge = fw.Bridge(registry.get("get_stock"))
    call = ("get_stock", {"sku": "SKU-1"})
    for _ in range(2):
        assert (await bridge.call(*call, ctx=bridge.context("run-a")))["ok"] is True
    assert bridge.context("run-a") is bridge.context("run-a")
    bridge.context("run-b")
    bridge.context("run-c")  # run-a is the oldest of three: its repeat counts are dropped
    assert (await bridge.call(*call, ctx=bridge.context("run-a")))["ok"] is True
    assert (await bridge.call(*call, ctx=bridge.context("run-a")))["ok"] is True
    third = await bridge.call(*call, ctx=bridge.context("run-a"))
    assert third["error"]["code"] == "repeated_call"


def test_adapter_media_over_the_limit_is_a_notice() -> None:
    pytest.importorskip("langchain_core", reason=NO_LANGCHAIN)
    from agentkit_tools.frameworks.langchain import tools

    [t] = tools(ToolRegistry([label], max_media_bytes=4))
    assert t.invoke({"sku": "SKU-1"}) == [
        {"type": "text", "text": "label of SKU-1"},
        {
            "type": "text",
            "text": f"[image: image/png, {len(PNG)} bytes not sent: over the limit of 4 bytes for one image in a tool "
            "result. Ask the tool for a smaller image (a lower resolution, a crop, fewer pages) if it offers that; "
            "otherwise tell the user it was too large to show.]",
        },
    ]
