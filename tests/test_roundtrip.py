"""Provider round-trips (SPEC §9) with the official ``anthropic`` and ``openai`` clients pointed at
a loopback server replaying recorded model responses (``tests/fakes``): turn 1 asks for two tool
calls at once, ``agentkit_tools.roundtrip`` runs them through an Invoker, and the exact request
the client sends on turn 2 is asserted."""

from __future__ import annotations

import asyncio

import anthropic
import openai

from agentkit_tools import FunctionTool, Invoker, ToolRegistry, tool
from agentkit_tools.roundtrip import (
    anthropic_tool_calls,
    anthropic_tool_results,
    openai_chat_tool_calls,
    openai_chat_tool_results,
    openai_responses_tool_calls,
    openai_responses_tool_results,
    result_limit,
    tool_result_text,
)
from fakes.inventory_tools import registry
from fakes.loopback import ReplayServer, recorded

# ------------------------------------------------------------------ the tools as the model sees them

DELETE_SKU_PARAMS = {
    "type": "object",
    "properties": {"sku": {"type": "string", "description": "The SKU code to remove."}},
    "required": ["sku"],
    "additionalProperties": False,
}
GET_STOCK_PARAMS = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "description": "The SKU code, e.g. SKU-1."},
        "warehouse": {
            "type": "string",
            "enum": ["main", "east"],
            "description": "Which warehouse to look in.",
            "default": "main",
        },
    },
    "required": ["sku"],
    "additionalProperties": False,
}
GET_STOCK_STRICT_PARAMS = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "description": "The SKU code, e.g. SKU-1."},
        "warehouse": {
            "type": ["string", "null"],
            "enum": ["main", "east", None],
            "description": "Which warehouse to look in.",
            "default": "main",
        },
    },
    "required": ["sku", "warehouse"],
    "additionalProperties": False,
}
SET_PRICE_PARAMS = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "description": "The SKU code, e.g. SKU-1."},
        "cents": {"type": "integer", "description": "The new price in cents (a positive integer)."},
    },
    "required": ["sku", "cents"],
    "additionalProperties": False,
}
DESCRIPTIONS = {
    "delete_sku": "Remove a SKU from the catalogue for good; it cannot be undone.",
    "get_stock": "Look up how many units of a SKU are in a warehouse.",
    "set_price": "Set the shelf price of a SKU, replacing the current one.",
}

ANTHROPIC_TOOLS = [
    {"name": "delete_sku", "description": DESCRIPTIONS["delete_sku"], "input_schema": DELETE_SKU_PARAMS},
    {"name": "get_stock", "description": DESCRIPTIONS["get_stock"], "input_schema": GET_STOCK_PARAMS},
    {"name": "set_price", "description": DESCRIPTIONS["set_price"], "input_schema": SET_PRICE_PARAMS},
]
OPENAI_CHAT_TOOLS = [
    {"type": "function", "function": {"name": n, "description": DESCRIPTIONS[n], "parameters": p}}
    for n, p in (("delete_sku", DELETE_SKU_PARAMS), ("get_stock", GET_STOCK_PARAMS), ("set_price", SET_PRICE_PARAMS))
]
OPENAI_RESPONSES_STRICT_TOOLS = [
    {"type": "function", "name": n, "description": DESCRIPTIONS[n], "parameters": p, "strict": True}
    for n, p in (
        ("delete_sku", DELETE_SKU_PARAMS),
        ("get_stock", GET_STOCK_STRICT_PARAMS),
        ("set_price", SET_PRICE_PARAMS),
    )
]

SET_PRICE_REJECTED = (
    "tool 'set_price' call rejected: invalid argument(s): cents: expected integer, got string \"12.50\". "
    "Accepted arguments: ['sku', 'cents']. Re-read the input schema and call "
    "'set_price' again with corrected arguments."
)
UNKNOWN_GET_STOK = (
    "No tool named 'get_stok'. Did you mean 'get_stock'? Available tools: delete_sku, get_stock, "
    "set_price. Call one of those instead."
)


# ------------------------------------------------------------------ end to end with the real clients


async def test_anthropic_messages_round_trip() -> None:
    invoker = Invoker(registry)
    prompt = [{"role": "user", "content": "How many SKU-1 do we have? Also set its price to 12.50."}]
    with ReplayServer([recorded("anthropic_turn1"), recorded("anthropic_turn2")]) as fake:
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake.url, max_retries=0)
        first = await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=1024, tools=registry.to_anthropic(), messages=prompt
        )
        results = await anthropic_tool_results(first, invoker)
        second = await client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=1024,
            tools=registry.to_anthropic(),
            messages=[*prompt, {"role": "assistant", "content": first.content}, results],
        )
        await client.close()

    assert [(r.method, r.path) for r in fake.requests] == [("POST", "/v1/messages"), ("POST", "/v1/messages")]
    assert fake.requests[0].body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "tools": ANTHROPIC_TOOLS,
        "messages": prompt,
    }
    assert fake.requests[1].body == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "tools": ANTHROPIC_TOOLS,
        "messages": [
            {"role": "user", "content": "How many SKU-1 do we have? Also set its price to 12.50."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll look up the stock and set the new price at the same time."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A09q90qw90lq917835lq9",
                        "name": "get_stock",
                        "input": {"sku": "SKU-1"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_01B7gJ3kzQm1hYV4W7pDnFfo",
                        "name": "set_price",
                        "input": {"sku": "SKU-1", "cents": "12.50"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
                        "content": '{"sku": "SKU-1", "on_hand": 12}',
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01B7gJ3kzQm1hYV4W7pDnFfo",
                        "content": SET_PRICE_REJECTED,
                        "is_error": True,
                    },
                ],
            },
        ],
    }
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == (
        "SKU-1 has 12 units on hand. The price was not changed: it must be a whole number of cents, e.g. 1250."
    )


async def test_openai_chat_round_trip() -> None:
    invoker = Invoker(registry)
    prompt = [{"role": "user", "content": "How many SKU-2 are in the east warehouse?"}]
    with ReplayServer([recorded("openai_chat_turn1"), recorded("openai_chat_turn2")]) as fake:
        client = openai.AsyncOpenAI(api_key="test-key", base_url=fake.url + "/v1", max_retries=0)
        first = await client.chat.completions.create(model="gpt-4.1", tools=registry.to_openai(), messages=prompt)
        results = await openai_chat_tool_results(first, invoker)
        second = await client.chat.completions.create(
            model="gpt-4.1", tools=registry.to_openai(), messages=[*prompt, first.choices[0].message, *results]
        )
        await client.close()

    assert [(r.method, r.path) for r in fake.requests] == [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions"),
    ]
    assert fake.requests[0].body == {"model": "gpt-4.1", "tools": OPENAI_CHAT_TOOLS, "messages": prompt}
    assert fake.requests[1].body == {
        "model": "gpt-4.1",
        "tools": OPENAI_CHAT_TOOLS,
        "messages": [
            {"role": "user", "content": "How many SKU-2 are in the east warehouse?"},
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "annotations": [],
                "tool_calls": [
                    {
                        "id": "call_Vb2Kq7hN1sYx0dL4mPzR8tWe",
                        "type": "function",
                        "function": {"name": "get_stock", "arguments": '{"sku":"SKU-2","warehouse":"east"}'},
                    },
                    {
                        "id": "call_3FhT9cJm6QpXy2RkLs0NbU1d",
                        "type": "function",
                        "function": {"name": "get_stok", "arguments": '{"sku":"SKU-2"}'},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_Vb2Kq7hN1sYx0dL4mPzR8tWe",
                "content": '{"sku": "SKU-2", "on_hand": 7}',
            },
            {"role": "tool", "tool_call_id": "call_3FhT9cJm6QpXy2RkLs0NbU1d", "content": UNKNOWN_GET_STOK},
        ],
    }
    assert second.choices[0].message.content == "The east warehouse has 7 units of SKU-2."


async def test_openai_responses_round_trip_strict() -> None:
    invoker = Invoker(registry)
    prompt = [{"role": "user", "content": "Stock of SKU-1 here and of SKU-7 in the east?"}]
    tools = registry.to_openai(strict=True, api="responses")
    with ReplayServer([recorded("openai_responses_turn1"), recorded("openai_responses_turn2")]) as fake:
        client = openai.AsyncOpenAI(api_key="test-key", base_url=fake.url + "/v1", max_retries=0)
        first = await client.responses.create(model="gpt-4.1", tools=tools, input=prompt)
        outputs = await openai_responses_tool_results(first, invoker, strict=True)
        second = await client.responses.create(model="gpt-4.1", tools=tools, input=[*prompt, *first.output, *outputs])
        await client.close()

    assert [(r.method, r.path) for r in fake.requests] == [("POST", "/v1/responses"), ("POST", "/v1/responses")]
    assert fake.requests[0].body == {"model": "gpt-4.1", "tools": OPENAI_RESPONSES_STRICT_TOOLS, "input": prompt}
    assert fake.requests[1].body == {
        "model": "gpt-4.1",
        "tools": OPENAI_RESPONSES_STRICT_TOOLS,
        "input": [
            {"role": "user", "content": "Stock of SKU-1 here and of SKU-7 in the east?"},
            {
                "type": "function_call",
                "id": "fc_68a3f0c3a2c88190b5e7f1d2c3a4b5c6",
                "call_id": "call_kR4nX8vT2pLq6WsY0mJc3HzB",
                "name": "get_stock",
                # strict mode: every key is sent; null means "not given" (the default "main" applies)
                "arguments": '{"sku":"SKU-1","warehouse":null}',
                "status": "completed",
            },
            {
                "type": "function_call",
                "id": "fc_68a3f0c3a2d08190a9b8c7d6e5f4a3b2",
                "call_id": "call_Pz7Ym1Qd5Nw9Fe3Tk8Hs2LgV",
                "name": "get_stock",
                "arguments": '{"sku":"SKU-7","warehouse":"east"}',
                "status": "completed",
            },
            {
                "type": "function_call_output",
                "call_id": "call_kR4nX8vT2pLq6WsY0mJc3HzB",
                "output": '{"sku": "SKU-1", "on_hand": 12}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_Pz7Ym1Qd5Nw9Fe3Tk8Hs2LgV",
                "output": "unknown SKU 'SKU-7'; known SKUs: SKU-1, SKU-2",
            },
        ],
    }
    assert second.output_text == "The main warehouse has 12 units of SKU-1; SKU-7 does not exist."


# ------------------------------------------------------------------ the helpers on plain dicts


async def test_responses_without_strict_keeps_null_and_fails_validation() -> None:
    items = [{"type": "function_call", "call_id": "c1", "name": "get_stock", "arguments": '{"sku":"SKU-1","warehouse":null}'}]
    assert await openai_responses_tool_results(items, registry) == [
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": "tool 'get_stock' call rejected: invalid argument(s): warehouse: null is not accepted "
            "here; omit the argument to use its default (\"main\"). Accepted arguments: ['sku', "
            "'warehouse']. Re-read the input schema and call 'get_stock' again with "
            "corrected arguments.",
        }
    ]


def test_call_extraction_from_dicts() -> None:
    anthropic_dict = {
        "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "t1", "name": "get_stock", "input": {"sku": "SKU-2"}},
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "x"}},
        ]
    }
    assert anthropic_tool_calls(anthropic_dict) == [{"id": "t1", "name": "get_stock", "input": {"sku": "SKU-2"}}]
    assert anthropic_tool_calls(anthropic_dict["content"]) == anthropic_tool_calls(anthropic_dict)
    chat = recorded("openai_chat_turn1")
    assert openai_chat_tool_calls(chat) == [
        {"id": "call_Vb2Kq7hN1sYx0dL4mPzR8tWe", "function": {"name": "get_stock", "arguments": '{"sku":"SKU-2","warehouse":"east"}'}},
        {"id": "call_3FhT9cJm6QpXy2RkLs0NbU1d", "function": {"name": "get_stok", "arguments": '{"sku":"SKU-2"}'}},
    ]
    assert openai_chat_tool_calls(chat["choices"][0]["message"]) == openai_chat_tool_calls(chat)
    assert openai_responses_tool_calls(recorded("openai_responses_turn1")) == [
        {"call_id": "call_kR4nX8vT2pLq6WsY0mJc3HzB", "name": "get_stock", "arguments": '{"sku":"SKU-1","warehouse":null}'},
        {"call_id": "call_Pz7Ym1Qd5Nw9Fe3Tk8Hs2LgV", "name": "get_stock", "arguments": '{"sku":"SKU-7","warehouse":"east"}'},
    ]


async def test_no_tool_calls() -> None:
    assert await anthropic_tool_results(recorded("anthropic_turn2"), registry) is None
    assert await openai_chat_tool_results(recorded("openai_chat_turn2"), registry) == []
    assert await openai_responses_tool_results(recorded("openai_responses_turn2"), registry) == []


async def test_results_keep_call_order_when_the_first_call_finishes_last() -> None:
    finished: list[str] = []

    async def wait(label: str, delay_ms: int) -> str:
        """Wait delay_ms milliseconds, then answer with the label."""
        await asyncio.sleep(delay_ms / 1000)
        finished.append(label)
        return label

    reg = ToolRegistry([FunctionTool.from_callable(wait)])
    response = {
        "content": [
            {"type": "tool_use", "id": "slow", "name": "wait", "input": {"label": "first", "delay_ms": 200}},
            {"type": "tool_use", "id": "fast", "name": "wait", "input": {"label": "second", "delay_ms": 0}},
        ]
    }
    message = await anthropic_tool_results(response, Invoker(reg))
    assert finished == ["second", "first"]
    assert message == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "slow", "content": "first"},
            {"type": "tool_result", "tool_use_id": "fast", "content": "second"},
        ],
    }


async def test_result_text_uses_the_tool_limit_then_the_registry_limit() -> None:
    @tool(read_only=True, max_result_chars=150)
    def long_text(n: int) -> str:
        """Return a string of n letters x, for testing truncation."""
        return "x" * n

    @tool(read_only=True)
    def long_list(n: int) -> list[int]:
        """Return the integers from 0 to n-1, for testing truncation."""
        return list(range(n))

    reg = ToolRegistry([long_text, long_list], max_result_chars=160)
    assert result_limit(reg, "long_text") == 150
    assert result_limit(reg, "long_list") == 160
    assert result_limit(reg, "missing") == 160
    assert result_limit(ToolRegistry([long_list]), "long_list") == 2000
    calls = [
        {"id": "a", "type": "function", "function": {"name": "long_text", "arguments": '{"n": 300}'}},
        {"id": "b", "type": "function", "function": {"name": "long_list", "arguments": '{"n": 300}'}},
    ]
    out = await openai_chat_tool_results({"choices": [{"message": {"tool_calls": calls}}]}, reg)
    notice = "]. Narrow your arguments (add filters or a smaller limit) and call again."
    assert out == [
        {"role": "tool", "tool_call_id": "a", "content": "x" * 53 + "\n...[truncated 247 chars" + notice},
        {
            "role": "tool",
            "tool_call_id": "b",
            "content": "[" + ", ".join(map(str, range(18))) + ",\n...[truncated 1328 chars" + notice,
        },
    ]


def test_tool_result_text() -> None:
    assert tool_result_text({"ok": True, "value": {"a": "é"}, "elapsed_ms": 1.0}) == '{"a": "é"}'
    assert tool_result_text({"ok": True, "value": "plain", "elapsed_ms": 1.0}) == "plain"
    assert tool_result_text({"ok": False, "error": {"code": "tool_error", "message": "it broke; retry later"}}) == (
        "it broke; retry later"
    )
    assert tool_result_text({"ok": False, "error": {"code": "internal_error"}}) == "internal_error"


async def test_unparsable_arguments_are_an_error_result_with_or_without_strict() -> None:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "get_stock", "arguments": '{"sku": '},
        {"type": "function_call", "call_id": "c2", "name": "get_stock", "arguments": "[1, 2]"},
        {"type": "function_call", "call_id": "c3", "name": "get_stock", "arguments": '{"sku": 5, "warehouse": null}'},
    ]
    tail = " Accepted arguments: ['sku', 'warehouse']. Re-read the input schema and call 'get_stock' again with corrected arguments."
    rejected = "tool 'get_stock' call rejected: "
    assert await openai_responses_tool_results(items, registry, strict=True) == [
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": rejected + "the arguments are not valid JSON (EOF while parsing a value at line 1 column 8)." + tail,
        },
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": rejected + "the arguments must be a JSON object of named arguments, got an array." + tail,
        },
        # strict: the null warehouse means "not given"; only the bad sku is reported
        {
            "type": "function_call_output",
            "call_id": "c3",
            "output": rejected + "invalid argument(s): sku: expected string, got integer 5." + tail,
        },
    ]
