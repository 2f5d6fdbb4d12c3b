"""Provider renderings (SPEC §9): exact values, the providers' own SDK types, the OpenAI strict
rules on every nested object, caching and byte-stability."""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import datetime as dt
import enum
import json
from typing import Annotated, Any, Literal, Optional

import annotated_types as at
import anthropic.types
import mcp.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest
from google.genai import types as genai_types

from agentkit_tools import FunctionTool, ToolRegistry, ToolSchema, tool
from agentkit_tools.providers import PROVIDERS, Finding, findings, from_strict_arguments, render

from test_schema_types import CASES, Color, T


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Line:
    """One order line.

    Attributes:
        sku: The SKU to ship.
        qty: How many units.
    """

    sku: str
    qty: int = 1


@dataclasses.dataclass
class Receipt:
    order_id: str
    total: float


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node] = dataclasses.field(default_factory=list)


@tool(side_effecting=True, idempotent=True)
def place_order(
    lines: list[Line],
    note: Optional[str] = None,
    priority: Priority = Priority.LOW,
    due: Optional[dt.date] = None,
) -> Receipt:
    """Place an order for the given lines in the warehouse system.

    Args:
        lines: What to ship.
        note: A note for the packer.
        priority: How urgent it is.
        due: The latest delivery day.
    """
    return Receipt("o-1", 1.0)


#: Dates are advertised from year 0001 (what Python's date can hold).
DATE_PATTERN = "^(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})-"
LINE = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "description": "The SKU to ship."},
        "qty": {"type": "integer", "description": "How many units.", "default": 1},
    },
    "required": ["sku"],
    "additionalProperties": False,
}
INPUT = {
    "type": "object",
    "properties": {
        "lines": {"type": "array", "items": LINE, "description": "What to ship."},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "A note for the packer.", "default": None},
        "priority": {"type": "integer", "enum": [1, 2], "description": "How urgent it is.", "default": 1},
        "due": {
            "anyOf": [{"type": "string", "format": "date", "pattern": DATE_PATTERN}, {"type": "null"}],
            "description": "The latest delivery day.",
            "default": None,
        },
    },
    "required": ["lines"],
    "additionalProperties": False,
}
DESCRIPTION = "Place an order for the given lines in the warehouse system."


def test_anthropic_exact() -> None:
    assert place_order.to_anthropic() == {"name": "place_order", "description": DESCRIPTION, "input_schema": INPUT}


def test_openai_chat_and_responses_exact() -> None:
    assert place_order.to_openai() == {
        "type": "function",
        "function": {"name": "place_order", "description": DESCRIPTION, "parameters": INPUT},
    }
    assert place_order.to_openai(api="responses") == {
        "type": "function",
        "name": "place_order",
        "description": DESCRIPTION,
        "parameters": INPUT,
        "strict": False,
    }


STRICT_INPUT = {
    "type": "object",
    "properties": {
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"type": "string", "description": "The SKU to ship."},
                    "qty": {"type": ["integer", "null"], "description": "How many units.", "default": 1},
                },
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
            "description": "What to ship.",
        },
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "A note for the packer."},
        "priority": {"type": ["integer", "null"], "enum": [1, 2, None], "description": "How urgent it is.", "default": 1},
        "due": {"anyOf": [{"type": "string", "format": "date", "pattern": DATE_PATTERN}, {"type": "null"}], "description": "The latest delivery day."},
    },
    "required": ["lines", "note", "priority", "due"],
    "additionalProperties": False,
}


def test_openai_strict_exact() -> None:
    assert place_order.to_openai(strict=True) == {
        "type": "function",
        "function": {"name": "place_order", "description": DESCRIPTION, "parameters": STRICT_INPUT, "strict": True},
    }
    assert place_order.to_openai(strict=True, api="responses") == {
        "type": "function",
        "name": "place_order",
        "description": DESCRIPTION,
        "parameters": STRICT_INPUT,
        "strict": True,
    }
    assert [f for f in findings(place_order) if f.provider.startswith("openai")] == []


def test_gemini_exact() -> None:
    assert place_order.to_gemini() == {
        "name": "place_order",
        "description": DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "lines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": {"type": "string", "description": "The SKU to ship."},
                            "qty": {"type": "integer", "description": "How many units.", "default": 1},
                        },
                        "required": ["sku"],
                    },
                    "description": "What to ship.",
                },
                "note": {"type": "string", "nullable": True, "description": "A note for the packer.", "default": None},
                "priority": {"type": "integer", "description": "How urgent it is. One of: 1, 2.", "default": 1},
                "due": {
                    "type": "string",
                    "pattern": DATE_PATTERN,
                    "description": "The latest delivery day. Format: date.",
                    "nullable": True,
                    "default": None,
                },
            },
            "required": ["lines"],
        },
    }
    assert findings(place_order, ("gemini",)) == [
        Finding(
            "gemini",
            "properties.priority",
            "Gemini accepts only string enums; the allowed values are listed in the description (checked at call time)",
        )
    ]


def test_mcp_exact() -> None:
    assert place_order.to_mcp() == {
        "name": "place_order",
        "description": DESCRIPTION,
        "inputSchema": INPUT,
        "outputSchema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "total": {"type": "number"}},
            "required": ["order_id", "total"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    }


def test_read_only_tool_annotations_and_schema_level_rendering() -> None:
    @tool(read_only=True)
    def look(q: str) -> list[str]:
        """Look items up by name and return the matching SKUs."""
        return []

    assert look.to_mcp() == {
        "name": "look",
        "description": "Look items up by name and return the matching SKUs.",
        "inputSchema": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    }
    schema = ToolSchema("look", "Look items up.", {"type": "object", "properties": {}})
    assert schema.to_mcp() == {"name": "look", "description": "Look items up.", "inputSchema": {"type": "object", "properties": {}}}
    assert schema.to_anthropic() == {"name": "look", "description": "Look items up.", "input_schema": {"type": "object", "properties": {}}}


def test_open_dict_is_not_made_strict_and_says_so() -> None:
    @tool(side_effecting=False)
    def tally(counts: dict[str, int], label: str = "x") -> int:
        """Add up the counts per label and return the total."""
        return 0

    plain = dict(tally.schema.parameters)
    assert tally.to_openai(strict=True) == {
        "type": "function",
        "function": {
            "name": "tally",
            "description": "Add up the counts per label and return the total.",
            "parameters": plain,
            "strict": False,
        },
    }
    message = (
        "cannot be made strict (an object with arbitrary keys (dict[str, V]) cannot be closed: strict mode "
        "requires every key to be listed); the tool is rendered with strict: false and its plain schema"
    )
    assert findings(tally, ("openai-strict", "openai-responses-strict")) == [
        Finding("openai-strict", "properties.counts", message),
        Finding("openai-responses-strict", "properties.counts", message),
    ]


def test_recursive_type_strict_keeps_refs_gemini_cuts_the_cycle() -> None:
    @tool(side_effecting=False)
    def walk(root: Node) -> int:
        """Walk a tree of nodes and return how many there are."""
        return 0

    strict = walk.to_openai(strict=True)["function"]
    assert strict["strict"] is True
    assert strict["parameters"] == {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "required": ["root"],
        "additionalProperties": False,
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": ["array", "null"], "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["value", "children"],
                "additionalProperties": False,
            }
        },
    }
    assert walk.to_gemini()["parameters"] == {
        "type": "object",
        "properties": {
            "root": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"type": "object"}},
                },
                "required": ["value"],
            }
        },
        "required": ["root"],
    }


def test_from_strict_arguments_drops_nulls_meaning_absent() -> None:
    sent = {"lines": [{"sku": "A", "qty": None}], "note": None, "priority": None, "due": None}
    assert from_strict_arguments(place_order, sent) == {"lines": [{"sku": "A"}], "note": None, "due": None}
    assert place_order.validate(from_strict_arguments(place_order, sent)) == {
        "lines": [{"sku": "A"}],
        "note": None,
        "due": None,
    }


# ---------------------------------------------------------------------------------------------
# Every hint of the schema test table, as a parameter: checked against the SDK types and rules


def _tool_for(hint: Any, i: int) -> FunctionTool:
    def f(value, maybe=None) -> None:  # type: ignore[no-untyped-def]
        """A tool taking one value of the hint under test and an optional one."""

    f.__annotations__ = {"value": hint, "maybe": hint, "return": None}
    return FunctionTool.from_callable(f, name=f"t{i}")


TOOLS = [_tool_for(h, i) for i, (h, _) in enumerate(CASES)] + [place_order]


def _strict_problems(schema: Any, path: str = "<root>") -> list[str]:
    """Every violation of OpenAI's strict-mode rules in a schema, recursively."""
    out: list[str] = []
    if isinstance(schema, list):
        for i, s in enumerate(schema):
            out += _strict_problems(s, f"{path}[{i}]")
        return out
    if not isinstance(schema, dict):
        return out
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            out.append(f"{path}: additionalProperties is not false")
        if sorted(schema.get("required", [])) != sorted(schema.get("properties", {})):
            out.append(f"{path}: required is not every property")
    if schema.get("type") == "array" and "items" not in schema:
        out.append(f"{path}: array without items")
    for key in ("prefixItems", "uniqueItems", "propertyNames", "minLength", "maxLength", "allOf", "oneOf", "not"):
        if key in schema:
            out.append(f"{path}: unsupported keyword {key}")
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            for name, sub in value.items():
                out += _strict_problems(sub, f"{path}.{key}.{name}")
        elif key in ("items", "anyOf"):
            out += _strict_problems(value, f"{path}.{key}")
    return out


def _gemini_problems(schema: Any, path: str = "<root>") -> list[str]:
    out: list[str] = []
    if not isinstance(schema, dict):
        return [f"{path}: not an object"]
    for key in ("additionalProperties", "$ref", "$defs", "prefixItems", "exclusiveMinimum", "exclusiveMaximum", "const"):
        if key in schema:
            out.append(f"{path}: {key}")
    if schema.get("type") == "array" and "items" not in schema:
        out.append(f"{path}: array without items")
    if "enum" in schema and not all(isinstance(v, str) for v in schema["enum"]):
        out.append(f"{path}: non-string enum")
    if "anyOf" in schema and any(b == {"type": "null"} for b in schema["anyOf"]):
        out.append(f"{path}: null branch")
    for name, sub in schema.get("properties", {}).items():
        out += _gemini_problems(sub, f"{path}.properties.{name}")
    if isinstance(schema.get("items"), dict):
        out += _gemini_problems(schema["items"], f"{path}.items")
    for i, b in enumerate(schema.get("anyOf", [])):
        out += _gemini_problems(b, f"{path}.anyOf[{i}]")
    return out


def _keys_allowed(entry: dict[str, Any], typed_dict: Any) -> None:
    allowed = set(typed_dict.__annotations__)
    assert set(entry) <= allowed, (set(entry) - allowed, typed_dict)


ANTHROPIC = pydantic.TypeAdapter(anthropic.types.ToolParam)
# Named ChatCompletionToolParam before openai 1.99 added custom tools.
CHAT_TOOL_PARAM = getattr(openai.types.chat, "ChatCompletionFunctionToolParam", None) or openai.types.chat.ChatCompletionToolParam
OPENAI_CHAT = pydantic.TypeAdapter(CHAT_TOOL_PARAM)
OPENAI_RESPONSES = pydantic.TypeAdapter(openai.types.responses.FunctionToolParam)


@pytest.mark.parametrize("t", TOOLS, ids=[t.name for t in TOOLS])
def test_renderings_validate_against_the_sdk_types(t: FunctionTool) -> None:
    a = t.to_anthropic()
    ANTHROPIC.validate_python(a)
    _keys_allowed(a, anthropic.types.ToolParam)
    for strict in (False, True):
        c = t.to_openai(strict=strict)
        OPENAI_CHAT.validate_python(c)
        _keys_allowed(c, CHAT_TOOL_PARAM)
        from openai.types.shared_params import FunctionDefinition

        _keys_allowed(c["function"], FunctionDefinition)
        r = t.to_openai(strict=strict, api="responses")
        OPENAI_RESPONSES.validate_python(r)
        _keys_allowed(r, openai.types.responses.FunctionToolParam)
    mcp.types.Tool.model_validate(t.to_mcp())
    g = t.to_gemini()
    genai_types.FunctionDeclaration.model_validate(g)  # extra keys are forbidden there
    assert _gemini_problems(g["parameters"]) == []


@pytest.mark.parametrize("t", TOOLS, ids=[t.name for t in TOOLS])
def test_strict_renderings_follow_the_strict_rules_or_say_why_not(t: FunctionTool) -> None:
    for api in ("chat", "responses"):
        r = t.to_openai(strict=True, api=api)
        fn = r["function"] if api == "chat" else r
        provider = "openai-strict" if api == "chat" else "openai-responses-strict"
        blockers = [f for f in findings(t, (provider,)) if f.message.startswith("cannot be made strict")]
        if fn["strict"]:
            assert _strict_problems(fn["parameters"]) == []
            assert blockers == []
        else:
            assert fn["parameters"] == dict(t.schema.parameters)
            assert blockers != []


def test_which_hints_cannot_be_made_strict() -> None:
    not_strict = [h for (h, _), t in zip(CASES, TOOLS) if not t.to_openai(strict=True)["function"]["strict"]]
    # The hints themselves: their repr differs between Python versions (3.10 prints
    # ``typing.Union[int, typing.Any]`` for ``int | Any``).
    assert not_strict == [
        Any,
        object,
        list,
        tuple,
        tuple[()],
        dict,
        dict[str, Any],
        dict[str, int],
        cabc.Mapping[str, float],
        dict[int, str],
        dict[Color, int],
        int | Any,
        T,
    ]


def test_registry_renderings_sorted_cached_and_byte_stable() -> None:
    @tool(side_effecting=False)
    def alpha(q: str) -> str:
        """Alpha looks things up by their exact name."""
        return q

    @tool(side_effecting=False)
    def beta(q: str) -> str:
        """Beta looks things up by a part of their name."""
        return q

    r1 = ToolRegistry([beta, place_order, alpha])
    r2 = ToolRegistry([alpha, beta, place_order])
    for p in PROVIDERS:
        assert json.dumps(r1.render(p)) == json.dumps(r2.render(p))
        assert [e.get("name") or e["function"]["name"] for e in r1.render(p)] == ["alpha", "beta", "place_order"]
    assert r1.to_anthropic() == [alpha.to_anthropic(), beta.to_anthropic(), place_order.to_anthropic()]
    assert r1.to_openai(strict=True, api="responses") == r1.render("openai-responses-strict")
    assert r1.to_gemini() == r1.render("gemini") and r1.to_mcp() == r1.render("mcp")
    first = r1._cache[("render", "anthropic")]
    r1.to_anthropic()[0]["name"] = "changed"  # callers get copies
    assert r1._cache[("render", "anthropic")] is first and first[0]["name"] == "alpha"
    r1.unregister("beta")
    assert [e["name"] for e in r1.to_anthropic()] == ["alpha", "place_order"]


def test_unknown_provider_and_bad_api() -> None:
    with pytest.raises(ValueError, match='unknown provider "bedrock"; expected one of anthropic, openai, openai-strict, openai-responses, openai-responses-strict, gemini, mcp$'):
        render(place_order, "bedrock")
    with pytest.raises(ValueError, match="api must be 'chat' or 'responses', got 'batch'"):
        place_order.to_openai(api="batch")


def test_constraints_survive_where_the_provider_has_them() -> None:
    @tool(side_effecting=False)
    def page(
        size: Annotated[int, at.Gt(0), at.Le(100)] = 10,
        code: Annotated[str, at.MinLen(2)] = "ab",
        mode: Literal["fast", "slow"] = "fast",
        pair: tuple[int, str] = (1, "a"),
    ) -> None:
        """Fetch one page of results with the given options."""

    params = page.to_openai(strict=True)["function"]["parameters"]
    assert params["properties"] == {
        "size": {"type": ["integer", "null"], "exclusiveMinimum": 0, "maximum": 100, "default": 10},
        "code": {"type": ["string", "null"], "default": "ab"},
        "mode": {"type": ["string", "null"], "enum": ["fast", "slow", None], "default": "fast"},
        "pair": {
            "type": ["array", "null"],
            "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "minItems": 2,
            "maxItems": 2,
            "default": [1, "a"],
        },
    }
    assert [(f.path, f.message) for f in findings(page, ("openai-strict",))] == [
        ("properties.code.minLength", "OpenAI strict mode does not support 'minLength'; it is left out (checked at call time)"),
        (
            "properties.pair",
            "a fixed-position tuple (prefixItems) is shown as an array of its member types; positions are checked at call time",
        ),
    ]
    assert page.to_gemini()["parameters"]["properties"] == {
        "size": {"type": "integer", "minimum": 0, "maximum": 100, "default": 10, "description": "Must be > 0."},
        "code": {"type": "string", "minLength": 2, "default": "ab"},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
        "pair": {
            "type": "array",
            "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "minItems": 2,
            "maxItems": 2,
            "default": [1, "a"],
        },
    }


def test_tool_renderings_are_computed_once_and_handed_out_as_copies() -> None:
    @tool(side_effecting=False)
    def once(q: str) -> str:
        """Look a thing up once and cache the rendering."""
        return q

    first = once.to_gemini()
    cached = once.__dict__["_renderings"]["gemini"][0]
    first["name"] = "changed"
    assert once.to_gemini()["name"] == "once"
    assert once.__dict__["_renderings"]["gemini"][0] is cached


def test_gemini_open_objects_and_parameterless_tools() -> None:
    @tool(side_effecting=False)
    def tally(counts: dict[str, int], extra: Optional[dict[str, Any]] = None) -> int:
        """Add up the counts per label and return the total."""
        return 0

    @tool(side_effecting=False)
    def now() -> str:
        """Return the current time of the warehouse clock."""
        return ""

    assert tally.to_gemini()["parameters"] == {
        "type": "object",
        "properties": {
            "counts": {"description": 'A JSON object whose values match {"type":"integer"}.'},
            "extra": {"nullable": True, "default": None, "description": "A JSON object."},
        },
        "required": ["counts"],
    }
    assert now.to_gemini() == {"name": "now", "description": "Return the current time of the warehouse clock."}
    genai_types.FunctionDeclaration.model_validate(now.to_gemini())
