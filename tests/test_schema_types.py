"""Type hints -> JSON Schema (SPEC §3, §11 "Schema"): exact fragments for every kind of hint."""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import datetime as dt
import decimal
import enum
import pathlib
import sys
import typing
import uuid
from typing import Annotated, Any, Generic, Literal, NamedTuple, Optional, TypedDict, TypeVar, Union

import annotated_types as at
import attrs
import pydantic
import pytest

from agentkit_tools import FunctionTool
from agentkit_tools._core import FORMAT_PATTERNS
from agentkit_tools.introspect import introspect, schema_for

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required
else:  # typing has them from 3.11 (PEP 655): on 3.10 a user writes typing_extensions'
    from typing_extensions import NotRequired, Required


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    A = 1
    B = "b"


@dataclasses.dataclass
class Point:
    """A point on the plane.

    Attributes:
        x: Horizontal position in metres.
        y: Vertical position in metres.
    """

    x: float
    y: float = 0.0


class Movie(TypedDict):
    title: str
    year: int


class PartialMovie(TypedDict, total=False):
    title: Required[str]
    year: int


class MovieNR(TypedDict):
    title: str
    year: NotRequired[int]


class Pair(NamedTuple):
    left: int
    right: str = "r"


class Address(pydantic.BaseModel):
    street: str = pydantic.Field(description="Street and number.")
    zip_code: Annotated[str, pydantic.Field(pattern=r"^\d{5}$")]
    floor: Optional[int] = None


class Person(pydantic.BaseModel):
    name: str
    addresses: list[Address] = []


@attrs.define
class Box:
    label: str
    weight: float = attrs.field(default=1.0, metadata={"description": "Weight in kg."})


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node] = dataclasses.field(default_factory=list)


class Tree(pydantic.BaseModel):
    label: str
    kids: list[Tree] = []


@dataclasses.dataclass
class Dept:
    name: str
    head: Optional[Employee] = None


@dataclasses.dataclass
class Employee:
    name: str
    dept: Dept


class Opaque:
    pass


@dataclasses.dataclass
class WithOpaque:
    ok: int
    bad: Opaque


T = TypeVar("T")


@dataclasses.dataclass
class Holder(Generic[T]):
    item: T
    many: list[T]


POINT = {
    "type": "object",
    "properties": {
        "x": {"type": "number", "description": "Horizontal position in metres."},
        "y": {"type": "number", "description": "Vertical position in metres.", "default": 0.0},
    },
    "required": ["x"],
    "additionalProperties": False,
}
ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "description": "Street and number."},
        "zip_code": {"type": "string", "pattern": r"^\d{5}$"},
        "floor": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    },
    "required": ["street", "zip_code"],
    "additionalProperties": False,
}

CASES: list[tuple[Any, dict[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (None, {"type": "null"}),
    (type(None), {"type": "null"}),
    (Any, {}),
    (object, {}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
    (Literal[1, "a"], {"enum": [1, "a"]}),
    (Color, {"type": "string", "enum": ["red", "green"]}),
    (Level, {"type": "integer", "enum": [1, 2]}),
    (Mixed, {"enum": [1, "b"]}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (list, {"type": "array", "items": {}}),
    (typing.List[str], {"type": "array", "items": {"type": "string"}}),
    (cabc.Sequence[int], {"type": "array", "items": {"type": "integer"}}),
    (cabc.Iterable[str], {"type": "array", "items": {"type": "string"}}),
    (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (tuple, {"type": "array", "items": {}}),
    (
        tuple[int, str],
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False, "minItems": 2, "maxItems": 2},
    ),
    (tuple[()], {"type": "array", "items": False, "maxItems": 0}),
    (dict, {"type": "object"}),
    (dict[str, Any], {"type": "object"}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (cabc.Mapping[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (
        dict[int, str],
        {"type": "object", "propertyNames": {"pattern": "^(?:0|-?[1-9][0-9]*)$"}, "additionalProperties": {"type": "string"}},
    ),
    (
        dict[Color, int],
        {"type": "object", "propertyNames": {"enum": ["red", "green"]}, "additionalProperties": {"type": "integer"}},
    ),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (Union[None, int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}),
    # (Not Union[int, str]: typing caches equal unions as one object, so that row would decide
    # the member order of every later Union[str, int] in this process, BFCL's included.)
    (Optional[Union[int, bytes]], {"anyOf": [{"type": "integer"}, {"type": "string", "format": "byte", "pattern": FORMAT_PATTERNS["byte"]}, {"type": "null"}]}),
    (int | Any, {}),
    (Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
    (Annotated[int, at.Ge(1), at.Lt(10)], {"type": "integer", "minimum": 1, "exclusiveMaximum": 10}),
    (Annotated[float, at.Gt(0), at.Le(1)], {"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
    (Annotated[int, at.Interval(ge=0, le=5)], {"type": "integer", "minimum": 0, "maximum": 5}),
    (Annotated[float, at.MultipleOf(0.5)], {"type": "number", "multipleOf": 0.5}),
    (Annotated[str, at.MinLen(2), at.MaxLen(8)], {"type": "string", "minLength": 2, "maxLength": 8}),
    (Annotated[list[int], at.Len(1, 3)], {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}),
    (
        Annotated[str, pydantic.Field(description="A code.", min_length=2, pattern="^[A-Z]+$")],
        {"type": "string", "minLength": 2, "pattern": "^[A-Z]+$", "description": "A code."},
    ),
    (
        Annotated[int, pydantic.Field(ge=0, le=100, multiple_of=5)],
        {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 5},
    ),
    (
        Annotated[Optional[int], at.Ge(1), "Page size."],
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "description": "Page size."},
    ),
    (dt.datetime, {"type": "string", "format": "date-time", "pattern": FORMAT_PATTERNS["date-time"]}),
    (dt.date, {"type": "string", "format": "date", "pattern": FORMAT_PATTERNS["date"]}),
    (dt.time, {"type": "string", "pattern": FORMAT_PATTERNS["time"]}),
    (dt.timedelta, {"type": "string", "format": "duration", "pattern": FORMAT_PATTERNS["duration"]}),
    (uuid.UUID, {"type": "string", "format": "uuid"}),
    (pathlib.Path, {"type": "string", "format": "path"}),
    (pathlib.PurePosixPath, {"type": "string", "format": "path"}),
    (decimal.Decimal, {"type": "string", "format": "decimal", "pattern": FORMAT_PATTERNS["decimal"]}),
    (bytes, {"type": "string", "format": "byte", "pattern": FORMAT_PATTERNS["byte"]}),
    (pydantic.AwareDatetime, {"type": "string", "format": "date-time", "pattern": FORMAT_PATTERNS["date-time"]}),
    (pydantic.NaiveDatetime, {"type": "string", "pattern": FORMAT_PATTERNS["naive-date-time"]}),
    (typing.NewType("UserId", int), {"type": "integer"}),
    (TypeVar("B", bound=str), {"type": "string"}),
    (T, {}),
    (Point, POINT),
    (
        Movie,
        {
            "type": "object",
            "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
            "required": ["title", "year"],
            "additionalProperties": False,
        },
    ),
    (
        PartialMovie,
        {
            "type": "object",
            "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
            "required": ["title"],
            "additionalProperties": False,
        },
    ),
    (
        MovieNR,
        {
            "type": "object",
            "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
            "required": ["title"],
            "additionalProperties": False,
        },
    ),
    (
        Pair,
        {
            "type": "object",
            "properties": {"left": {"type": "integer"}, "right": {"type": "string", "default": "r"}},
            "required": ["left"],
            "additionalProperties": False,
        },
    ),
    (Address, ADDRESS),
    (
        Person,
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "addresses": {"type": "array", "items": ADDRESS, "default": []},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    ),
    (
        Box,
        {
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "weight": {"type": "number", "description": "Weight in kg.", "default": 1.0},
            },
            "required": ["label"],
            "additionalProperties": False,
        },
    ),
    (Optional[Point], {"anyOf": [POINT, {"type": "null"}]}),
    (list[Point], {"type": "array", "items": POINT}),
    (
        Holder[int],
        {
            "type": "object",
            "properties": {"item": {"type": "integer"}, "many": {"type": "array", "items": {"type": "integer"}}},
            "required": ["item", "many"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize(("hint", "expected"), CASES, ids=[repr(c[0]) for c in CASES])
def test_fragment(hint: Any, expected: dict[str, Any]) -> None:
    assert schema_for(hint) == expected


NODE_DEF = {
    "type": "object",
    "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
    },
    "required": ["value"],
    "additionalProperties": False,
}


def test_recursive_dataclass_uses_defs_and_a_local_ref() -> None:
    assert schema_for(Node) == {"$ref": "#/$defs/Node", "$defs": {"Node": NODE_DEF}}
    assert schema_for(list[Node]) == {"type": "array", "items": {"$ref": "#/$defs/Node"}, "$defs": {"Node": NODE_DEF}}


def test_recursive_pydantic_model() -> None:
    assert schema_for(Tree) == {
        "$ref": "#/$defs/Tree",
        "$defs": {
            "Tree": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}, "default": []},
                },
                "required": ["label"],
                "additionalProperties": False,
            }
        },
    }


def test_mutual_recursion_defines_only_the_entry_type() -> None:
    assert schema_for(Employee) == {
        "$ref": "#/$defs/Employee",
        "$defs": {
            "Employee": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "dept": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "head": {"anyOf": [{"$ref": "#/$defs/Employee"}, {"type": "null"}], "default": None},
                        },
                        "required": ["name"],
                        "additionalProperties": False,
                    },
                },
                "required": ["name", "dept"],
                "additionalProperties": False,
            }
        },
    }


def test_no_title_keys_anywhere() -> None:
    text = repr([schema_for(h) for h, _ in CASES] + [schema_for(Tree), schema_for(Employee)])
    assert "'title':" not in text.replace("'title': {'type': 'string'}", "")


def _params(fn: Any) -> dict[str, Any]:
    return dict(FunctionTool.from_callable(fn).schema.parameters)


def test_parameters_object_order_required_defaults_and_recursive_defs_at_root() -> None:
    def plan(
        root: Node,
        limit: Annotated[int, at.Ge(1), "Most results."] = 10,
        colors: Optional[list[Color]] = None,
        when: dt.date = dt.date(2024, 5, 1),
        tags: frozenset[str] = frozenset({"b", "a"}),
        span: dt.timedelta = dt.timedelta(hours=1),
        where: pathlib.Path = pathlib.Path("/tmp/x"),
    ) -> None:
        """Plan a walk over a tree of nodes, for the test suite.

        Args:
            root: The root node.
            limit: Ignored: the Annotated description wins.
        """

    assert _params(plan) == {
        "type": "object",
        "properties": {
            "root": {"$ref": "#/$defs/Node", "description": "The root node."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most results.", "default": 10},
            "colors": {
                "anyOf": [{"type": "array", "items": {"type": "string", "enum": ["red", "green"]}}, {"type": "null"}],
                "default": None,
            },
            "when": {"type": "string", "format": "date", "pattern": FORMAT_PATTERNS["date"], "default": "2024-05-01"},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": ["a", "b"]},
            "span": {"type": "string", "format": "duration", "pattern": FORMAT_PATTERNS["duration"], "default": "PT3600S"},
            "where": {"type": "string", "format": "path", "default": "/tmp/x"},
        },
        "required": ["root"],
        "additionalProperties": False,
        "$defs": {"Node": NODE_DEF},
    }


def test_a_default_does_not_make_a_parameter_nullable() -> None:
    def f(q: str = "x", n: Optional[int] = 3) -> None:
        """A function with two defaults, for the test suite."""

    assert _params(f)["properties"] == {
        "q": {"type": "string", "default": "x"},
        "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
    }


def test_two_recursive_classes_with_one_name_get_distinct_defs(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    other = types.ModuleType("other_mod")
    monkeypatch.setitem(sys.modules, "other_mod", other)
    exec(
        "import dataclasses\nfrom typing import Optional\n"
        "@dataclasses.dataclass\nclass Node:\n    label: str\n    nxt: Optional['Node'] = None\n",
        other.__dict__,
    )

    def f(a: Node, b: other.Node) -> None:  # type: ignore[name-defined]
        """Takes two different recursive classes of the same name."""

    f.__annotations__ = {"a": Node, "b": other.Node, "return": None}
    info = introspect(f)
    assert info.params[0][1] == {"$ref": "#/$defs/Node"}
    assert info.params[1][1] == {"$ref": "#/$defs/other_mod.Node"}
    assert info.defs == {
        "Node": NODE_DEF,
        "other_mod.Node": {
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "nxt": {"anyOf": [{"$ref": "#/$defs/other_mod.Node"}, {"type": "null"}], "default": None},
            },
            "required": ["label"],
            "additionalProperties": False,
        },
    }


def test_unexpressible_hints_degrade_to_any_for_that_parameter_only() -> None:
    def f(a: Opaque, b: dict[float, int], c: WithOpaque, d: int) -> None:
        """Takes hints that JSON Schema cannot express, for the test suite."""

    t = FunctionTool.from_callable(f)
    assert t.schema.parameters["properties"] == {
        "a": {},
        "b": {},
        "c": {
            "type": "object",
            "properties": {"ok": {"type": "integer"}, "bad": {}},
            "required": ["ok", "bad"],
            "additionalProperties": False,
        },
        "d": {"type": "integer"},
    }
    assert t._lint.unresolved == {
        "a": f"no JSON Schema for the type {Opaque!r}; annotate with a JSON type or a structured class",
        "b": "dict keys of type float cannot be expressed: JSON object keys are strings",
        "c": "field WithOpaque.bad: no JSON Schema for the type "
        f"{Opaque!r}; annotate with a JSON type or a structured class (accepts any value)",
    }


def test_unresolvable_string_annotation_degrades_alone() -> None:
    ns: dict[str, Any] = {}
    exec(
        "def f(a: 'Missing', b: 'int') -> None:\n"
        "    '''A function whose first hint names a missing class.'''\n",
        ns,
    )
    t = FunctionTool.from_callable(ns["f"])
    assert t.schema.parameters["properties"] == {"a": {}, "b": {"type": "integer"}}
    assert list(t._lint.unresolved) == ["a"]
    assert t._lint.unresolved["a"].startswith("'Missing' could not be resolved (NameError:")


def test_non_json_defaults_are_left_out() -> None:
    sentinel = object()

    def f(
        a: int = 1,
        b: Any = sentinel,
        c: float = float("nan"),
        d: list[Any] = [object()],  # noqa: B006
        e: dt.timedelta = dt.timedelta(milliseconds=1),
    ) -> None:
        """A function with defaults that JSON cannot represent."""

    t = FunctionTool.from_callable(f)
    assert t.schema.parameters["properties"] == {
        "a": {"type": "integer", "default": 1},
        "b": {},
        "c": {"type": "number"},
        "d": {"type": "array", "items": {}},
        "e": {"type": "string", "format": "duration", "pattern": FORMAT_PATTERNS["duration"]},
    }
    assert t.schema.parameters["required"] == []
    assert t._lint.non_json_defaults == ("b", "c", "d", "e")


def test_a_default_nested_deeper_than_json_carries_is_left_out() -> None:
    """A default introspection takes for JSON but the core cannot convert (nested past the
    core's 127 levels) is left out by the same rule as any other: the tool is still defined."""
    deep: Any = 0
    for _ in range(200):
        deep = [deep]

    def f(a: int = 1, b: Any = deep) -> None:
        """A function whose default is nested two hundred levels deep."""

    t = FunctionTool.from_callable(f)
    assert t.schema.parameters["properties"] == {"a": {"type": "integer", "default": 1}, "b": {}}
    assert t.schema.parameters["required"] == []


def test_define_tool_advertises_no_default_for_a_required_parameter() -> None:
    """The core's ``define_tool`` decides which defaults are advertised by the one rule: a
    required parameter has none, whatever it was passed; an optional one only with a JSON
    default."""
    from agentkit_tools import _core

    doc = "A tool defined straight through the core for this test."
    core = _core.define_tool(
        "t",
        None,
        doc,
        [
            ("a", {"type": "integer"}, True, 5, None, True),
            ("b", {"type": "integer"}, False, 6, None, True),
            ("c", {"type": "integer"}, False, None, None, False),
        ],
        False,
        [],
    )
    assert core.parameters["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer", "default": 6},
        "c": {"type": "integer"},
    }
    assert core.parameters["required"] == ["a"]


@pytest.mark.parametrize(
    ("default", "expected"),
    [
        (None, None),
        (True, True),
        (0, 0),
        (1.5, 1.5),
        ("s", "s"),
        ([1, "a"], [1, "a"]),
        ((1, 2), [1, 2]),
        ({"k": [1, {"z": None}]}, {"k": [1, {"z": None}]}),
        ({3, 1, 2}, [1, 2, 3]),
        (Color.GREEN, "green"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), "2024-01-02T03:04:05+00:00"),
        (dt.time(7, 30), "07:30:00"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (decimal.Decimal("1.10"), "1.10"),
        (b"hi", "aGk="),
        (dt.timedelta(seconds=1e6), "PT1000000S"),
        (dt.timedelta(days=1, seconds=5), "PT86405S"),
    ],
)
def test_json_defaults(default: Any, expected: Any) -> None:
    def f(x: Any = default) -> None:
        """A function with one default, for the test suite."""

    assert _params(f)["properties"]["x"] == {"default": expected}


def test_a_hint_is_named_alike_on_every_python_version_and_in_either_union_spelling() -> None:
    def f(
        a: dict[tuple[int, int], str],
        b: dict[Optional[float], int],
        c: dict[Union[float, bytes], int],
        d: dict[float | bytes, int],
    ) -> None:
        """A function whose dict keys JSON cannot have."""

    t = FunctionTool.from_callable(f)
    why = "cannot be expressed: JSON object keys are strings"
    assert t._lint.unresolved == {
        "a": f"dict keys of type tuple[int, int] {why}",
        "b": f"dict keys of type float | None {why}",
        "c": f"dict keys of type float | bytes {why}",
        "d": f"dict keys of type float | bytes {why}",
    }
