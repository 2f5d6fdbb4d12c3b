"""The definition-time check of input and output schemas (issue 6, M1).

``SchemaValidator::new`` no longer runs the draft 2020-12 meta-schema over a schema that keeps
to a fixed subset of keywords and value shapes valid by construction (everything introspection
generates). Anything else, and in particular any value a user supplies (``Annotated``
constraints, pydantic ``Field`` arguments, dataclass field metadata, ``output_schema`` dicts,
hand-written ``ToolSchema`` parameters, ``CoreTool.from_schema``, ``define_tool``), is checked
as before: these tests pin the exact messages the meta-schema check gave before the change.
"""

import dataclasses
import datetime as dt
import enum
import json
from typing import Annotated, Any, Optional, TypedDict

import annotated_types as at
import jsonschema
import pydantic
import pytest
from agentkit_tools._core import FORMAT_PATTERNS
from bench_tool import search_docs

from agentkit_tools import FunctionTool, ToolArgumentError, ToolDefinitionError, ToolSchema, _core, tool
from agentkit_tools.tools import core_of

DOC = "Search the catalogue for products that match the query text."


# ------------------------------------------------------------------ user values are still checked


def _annotated_multiple_of_zero(n: Annotated[int, at.MultipleOf(0)]) -> str:
    """Search the catalogue for products that match the query text."""
    return ""


def _annotated_negative_min_len(tags: Annotated[list[str], at.MinLen(-1)]) -> str:
    """Search the catalogue for products that match the query text."""
    return ""


def _annotated_string_bound(n: Annotated[int, at.Ge("x")]) -> str:
    """Search the catalogue for products that match the query text."""
    return ""


def _annotated_negative_max_len(n: Annotated[str, at.MaxLen(-3)] = "a") -> str:
    """Search the catalogue for products that match the query text."""
    return ""


@dataclasses.dataclass
class _Item:
    sku: str = dataclasses.field(metadata={"description": 5})


def _dataclass_metadata(item: _Item) -> str:
    """Search the catalogue for products that match the query text."""
    return ""


class _Model(pydantic.BaseModel):
    # A constraint pydantic stores without checking (on a number field, pydantic >= 2.14
    # refuses a multiple_of <= 0 itself).
    a: str = pydantic.Field(description="x", multiple_of=0)


def _pydantic_field(m: _Model) -> str:
    """Search the catalogue for products that match the query text."""
    return ""


@pytest.mark.parametrize(
    ("func", "message"),
    [
        (_annotated_multiple_of_zero, "tool 'f': invalid JSON Schema: 0 is less than or equal to the minimum of 0"),
        (_annotated_negative_min_len, "tool 'f': invalid JSON Schema: -1 is less than the minimum of 0"),
        (_annotated_string_bound, "tool 'f': invalid JSON Schema: \"x\" is not of type \"number\""),
        (_annotated_negative_max_len, "tool 'f': invalid JSON Schema: -3 is less than the minimum of 0"),
        (_dataclass_metadata, "tool 'f': invalid JSON Schema: 5 is not of type \"string\""),
        (_pydantic_field, "tool 'f': invalid JSON Schema: 0 is less than or equal to the minimum of 0"),
    ],
)
def test_an_invalid_user_value_in_a_hint_is_refused_at_definition(func: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError) as err:
        tool(func, read_only=True, name="f")
    assert str(err.value) == message


def test_an_invalid_output_schema_dict_is_refused_at_definition() -> None:
    def f(n: int) -> str:
        """Search the catalogue for products that match the query text."""
        return ""

    with pytest.raises(ValueError) as err:
        tool(f, read_only=True, output_schema={"type": "strng"})
    assert str(err.value) == (
        "invalid JSON Schema: \"strng\" is not valid under any of the schemas listed in the 'anyOf' keyword"
    )


def test_invalid_hand_written_schemas_are_refused() -> None:
    with pytest.raises(ToolDefinitionError) as err:
        _core.CoreTool.from_schema("t", {"type": "object", "properties": {"a": {"type": "text"}}})
    assert str(err.value) == (
        "tool 't': invalid JSON Schema: \"text\" is not valid under any of the schemas listed in the 'anyOf' keyword"
    )
    with pytest.raises(ToolDefinitionError) as err:
        _core.define_tool("t", None, DOC, [("a", {"type": "integer", "minimum": "0"}, True, None, None, False)], False, [])
    assert str(err.value) == "tool 't': invalid JSON Schema: \"0\" is not of type \"number\""
    with pytest.raises(ValueError) as err:
        _core.SchemaValidator({"type": "object", "required": ["a", "a"]})
    assert str(err.value) == "invalid JSON Schema: [\"a\",\"a\"] has non-unique elements"
    hand_built = FunctionTool(
        name="t",
        fn=lambda args, ctx: None,
        description=DOC,
        side_effecting=False,
        schema=ToolSchema("t", DOC, {"type": "object", "properties": {"a": {"type": ["string", "string"]}}}),
    )
    with pytest.raises(ToolDefinitionError) as err:
        core_of(hand_built)
    assert str(err.value) == (
        "tool 't': invalid JSON Schema: [\"string\",\"string\"] is not valid under any of the schemas listed in "
        "the 'anyOf' keyword"
    )


def test_what_compilation_checks_is_still_compiled_at_definition() -> None:
    def f(code: Annotated[str, at.Predicate(str.isalpha), pydantic.Field(pattern="([")]) -> str:
        """Search the catalogue for products that match the query text."""
        return ""

    with pytest.raises(ToolDefinitionError) as err:
        tool(f, read_only=True)
    assert str(err.value).startswith("tool 'f': invalid JSON Schema: ")


# ------------------------------------------------------------------ generated schemas are unchanged


def test_the_benchmark_tool_schema_is_exactly_as_before() -> None:
    t = tool(search_docs, read_only=True)
    assert t.schema.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "The words to look for, as the user would type them."},
            "scope": {
                "type": "string",
                "enum": ["all", "code", "issues", "docs"],
                "description": "Which part of the project to search.",
            },
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only pages that carry all of these tags.",
            },
            "exact": {"type": "boolean", "description": "Match the query as one phrase instead of any of its words."},
            "limit": {"type": "integer", "description": "The most titles to return.", "default": 10},
            "min_score": {
                "anyOf": [{"type": "number"}, {"type": "null"}],
                "description": "Drop pages whose relevance score is below this (0 to 1).",
                "default": None,
            },
        },
        "required": ["query", "scope", "tags", "exact"],
        "additionalProperties": False,
    }
    assert t.validate({"query": "q", "scope": "docs", "tags": [], "exact": True}) == {
        "query": "q",
        "scope": "docs",
        "tags": [],
        "exact": True,
    }
    # Compiled lazily, on this first use, and rejecting as before.
    with pytest.raises(ToolArgumentError) as err:
        t.validate({"query": "q", "scope": "everything", "tags": [], "exact": True})
    assert str(err.value) == (
        "tool 'search_docs' call rejected: invalid argument(s): scope: must be one of "
        '["all","code","issues","docs"], got string "everything". Accepted arguments: '
        "['query', 'scope', 'tags', 'exact', 'limit', 'min_score']"
    )


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(TypedDict):
    street: str
    zip: Optional[str]


@dataclasses.dataclass
class Line:
    """A line of an order.

    Attributes:
        sku: The product.
        qty: How many.
    """

    sku: str
    qty: int = 1


def rich(
    colour: Colour,
    address: Address,
    lines: list[Line],
    when: dt.datetime,
    weights: dict[str, float],
    labels: set[str],
    pair: tuple[int, str],
    note: Annotated[str, "A free-form note.", at.MaxLen(200)] = "",
    level: Annotated[int, at.Ge(0), at.Lt(10)] = 0,
) -> str:
    """Place an order for the given lines at the address, in one colour."""
    return ""


def test_generated_schemas_are_meta_valid_and_exactly_as_before() -> None:
    params = tool(rich, read_only=True).schema.parameters
    assert json.loads(json.dumps(params)) == {
        "type": "object",
        "properties": {
            "colour": {"type": "string", "enum": ["red", "green"]},
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                "required": ["street", "zip"],
                "additionalProperties": False,
            },
            "lines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "description": "The product."},
                        "qty": {"type": "integer", "description": "How many.", "default": 1},
                    },
                    "required": ["sku"],
                    "additionalProperties": False,
                },
            },
            "when": {"type": "string", "format": "date-time", "pattern": FORMAT_PATTERNS["date-time"]},
            "weights": {"type": "object", "additionalProperties": {"type": "number"}},
            "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "items": False,
                "minItems": 2,
                "maxItems": 2,
            },
            "note": {"type": "string", "maxLength": 200, "description": "A free-form note.", "default": ""},
            "level": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10, "default": 0},
        },
        "required": ["colour", "address", "lines", "when", "weights", "labels", "pair"],
        "additionalProperties": False,
    }
    # An independent meta-schema check (the Python jsonschema package) agrees it is valid.
    jsonschema.Draft202012Validator.check_schema(params)
