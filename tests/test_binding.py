"""Every parameter kind binds, and the body receives real instances (SPEC §1, §3, §4)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import functools
import pathlib
import uuid
from typing import Annotated, Any, Literal, NamedTuple, Optional, TypedDict

import annotated_types as at
import attrs
import pydantic
import pytest

from agentkit_tools import FunctionTool, ToolArgumentError, ToolRegistry, dispatch, tool


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Size(enum.IntEnum):
    S = 1
    L = 3


@dataclasses.dataclass
class Line:
    sku: str
    qty: int = 1


@dataclasses.dataclass
class Order:
    lines: list[Line]
    color: Color
    due: Optional[dt.date] = None


class Customer(pydantic.BaseModel):
    name: str
    orders: list[Order] = []
    since: dt.datetime


@attrs.define
class Tag:
    key: str
    size: Size = Size.S


class Span(NamedTuple):
    start: int
    end: int


class Opts(TypedDict, total=False):
    when: dt.time
    color: Color


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node] = dataclasses.field(default_factory=list)


def run(t: FunctionTool, args: Any) -> Any:
    env = dispatch({"id": "1", "name": t.name, "input": args}, ToolRegistry([t]))
    assert env["ok"] is True, env
    return env["value"]


def test_nested_structures_arrive_as_instances() -> None:
    seen: dict[str, Any] = {}

    @tool(side_effecting=False)
    def take(customer: Customer, tags: list[Tag], spans: list[Span], opts: Opts, tree: Node) -> str:
        """Receive nested structured values so the test can inspect them."""
        seen.update(customer=customer, tags=tags, spans=spans, opts=opts, tree=tree)
        return "ok"

    run(
        take,
        {
            "customer": {
                "name": "Ada",
                "since": "2024-01-02T03:04:05Z",
                "orders": [{"lines": [{"sku": "A"}, {"sku": "B", "qty": 2}], "color": "green", "due": "2024-06-01"}],
            },
            "tags": [{"key": "k"}, {"key": "z", "size": 3}],
            "spans": [{"start": 1, "end": 2}],
            "opts": {"when": "10:30:00Z", "color": "red"},
            "tree": {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]},
        },
    )
    utc = dt.timezone.utc
    assert seen["customer"] == Customer(
        name="Ada",
        since=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=utc),
        orders=[Order(lines=[Line("A"), Line("B", 2)], color=Color.GREEN, due=dt.date(2024, 6, 1))],
    )
    assert type(seen["customer"].orders[0].lines[0]) is Line
    assert seen["tags"] == [Tag("k"), Tag("z", Size.L)]
    assert type(seen["tags"][1].size) is Size
    assert seen["spans"] == [Span(1, 2)] and type(seen["spans"][0]) is Span
    assert seen["opts"] == {"when": dt.time(10, 30, tzinfo=utc), "color": Color.RED}
    assert seen["tree"] == Node(1, [Node(2, [Node(3)])])


def test_containers_enums_and_formats_arrive_typed() -> None:
    seen: dict[str, Any] = {}

    @tool(side_effecting=False)
    def take(
        colors: set[Color],
        frozen: frozenset[int],
        pair: tuple[int, Color],
        many: tuple[dt.date, ...],
        by_day: dict[str, dt.date],
        by_id: dict[int, str],
        lit: Literal["a", "b"],
        size: Size,
        when: dt.datetime,
        span: dt.timedelta,
        uid: uuid.UUID,
        path: pathlib.Path,
        amount: decimal.Decimal,
        blob: bytes,
        maybe: Optional[Color] = None,
        either: int | dt.date = 0,
    ) -> str:
        """Receive containers, enums and formatted strings so the test can inspect them."""
        seen.update(locals())
        return "ok"

    run(
        take,
        {
            "colors": ["red", "green"],
            "frozen": [1, 2],
            "pair": [1, "red"],
            "many": ["2024-01-01", "2024-01-02"],
            "by_day": {"x": "2024-02-03"},
            "by_id": {"7": "seven"},
            "lit": "b",
            "size": 3,
            "when": "2024-05-01T12:00:00+02:00",
            "span": "P1DT2H0M3S",
            "uid": "123e4567-e89b-12d3-a456-426614174000",
            "path": "/tmp/a b",
            "amount": "10.50",
            "blob": "aGVsbG8=",
            "maybe": "green",
            "either": "2024-03-04",
        },
    )
    assert seen["colors"] == {Color.RED, Color.GREEN} and type(seen["colors"]) is set
    assert seen["frozen"] == frozenset({1, 2}) and type(seen["frozen"]) is frozenset
    assert seen["pair"] == (1, Color.RED)
    assert seen["many"] == (dt.date(2024, 1, 1), dt.date(2024, 1, 2))
    assert seen["by_day"] == {"x": dt.date(2024, 2, 3)}
    assert seen["by_id"] == {7: "seven"}
    assert seen["lit"] == "b"
    assert seen["size"] is Size.L
    assert seen["when"] == dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert seen["span"] == dt.timedelta(days=1, hours=2, seconds=3)
    assert seen["uid"] == uuid.UUID("123e4567-e89b-12d3-a456-426614174000")
    assert seen["path"] == pathlib.Path("/tmp/a b")
    assert seen["amount"] == decimal.Decimal("10.50") and str(seen["amount"]) == "10.50"
    assert seen["blob"] == b"hello"
    assert seen["maybe"] is Color.GREEN
    assert seen["either"] == dt.date(2024, 3, 4)


class Corner(enum.Enum):
    ORIGIN = (0, 0)
    FAR = (9, 9)
    NAMED = "named"


class Holiday(enum.Enum):
    NEW_YEAR = dt.date(2024, 1, 1)
    MIDSUMMER = dt.date(2024, 6, 21)


class NotJson(enum.Enum):
    NAN = float("nan")
    ONE = 1.5


def test_enum_members_whose_values_are_not_their_json_form_arrive_as_members() -> None:
    # A tuple value is advertised as an array and a date as its string; the body used to get
    # "cannot be read: [0, 0] is not a valid Corner" for a value the schema advertised.
    seen: list[Any] = []

    @tool(side_effecting=False)
    def place(corner: Corner, day: Holiday = Holiday.NEW_YEAR, pick: Literal[b"x", "y"] = "y") -> str:
        """Place a marker at a corner on a holiday, for the test to inspect."""
        seen.append((corner, day, pick))
        return "ok"

    props = place.schema.parameters["properties"]
    assert props["corner"] == {"enum": [[0, 0], [9, 9], "named"]}
    assert props["day"] == {"type": "string", "enum": ["2024-01-01", "2024-06-21"], "default": "2024-01-01"}
    assert props["pick"] == {"type": "string", "enum": ["eA==", "y"], "default": "y"}
    assert run(place, {"corner": [9, 9], "day": "2024-06-21", "pick": "eA=="}) == "ok"
    assert run(place, {"corner": "named"}) == "ok"
    assert run(place, {"corner": [0.0, 0]}) == "ok"  # JSON Schema's equality: 0.0 is 0
    assert seen == [
        (Corner.FAR, Holiday.MIDSUMMER, b"x"),
        (Corner.NAMED, Holiday.NEW_YEAR, "y"),
        (Corner.ORIGIN, Holiday.NEW_YEAR, "y"),
    ]
    env = dispatch({"id": "1", "name": "place", "input": {"corner": [0, 1]}}, ToolRegistry([place]))
    assert env["error"]["errors"] == [{"path": "corner", "reason": 'must be one of [[0,0],[9,9],"named"], got an array'}]


def test_an_enum_with_a_value_json_cannot_carry_degrades_to_any_value() -> None:
    # It raised a bare ValueError at definition ("not a JSON value: NaN is not a JSON number;
    # send a finite number"), naming neither the tool nor the parameter.
    def measure(unit: NotJson, n: int = 1) -> str:
        """Measure something in a unit whose enum holds NaN, for the test."""
        return "ok"

    t = FunctionTool.from_callable(measure, side_effecting=False)
    assert t.schema.parameters["properties"] == {"unit": {}, "n": {"type": "integer", "default": 1}}
    assert t._lint.unresolved == {"unit": "the NotJson member NAN nan has no JSON form"}


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        # Integer keys travel as canonical decimals: "01" and "-0" are refused by the schema, so
        # {"1": ..., "01": ...} no longer arrives as one entry with the other value dropped.
        ({"by_id": {"1": "one", "01": "uno"}}, 'by_id: "01" does not match "^(?:0|-?[1-9][0-9]*)$"'),
        ({"by_id": {"0": "zero", "-0": "nil"}}, 'by_id: "-0" does not match "^(?:0|-?[1-9][0-9]*)$"'),
        # Keys whose spellings the schema cannot tell apart are refused when they convert to one.
        (
            {"by_uid": {"123e4567-e89b-12d3-a456-426614174000": 1, "123E4567-E89B-12D3-A456-426614174000": 2}},
            "by_uid: cannot be read: the keys '123e4567-e89b-12d3-a456-426614174000' and "
            "'123E4567-E89B-12D3-A456-426614174000' stand for the same key "
            "UUID('123e4567-e89b-12d3-a456-426614174000'); send it once",
        ),
        (
            {"by_amount": {"1.0": 1, "1.00": 2}},
            "by_amount: cannot be read: the keys '1.0' and '1.00' stand for the same key Decimal('1.00'); send it once",
        ),
    ],
)
def test_keys_that_convert_to_one_key_are_refused_not_merged(args: dict[str, Any], reason: str) -> None:
    seen: list[Any] = []

    @tool(side_effecting=False)
    def keyed(
        by_id: dict[int, str] = {}, by_uid: dict[uuid.UUID, int] = {}, by_amount: dict[decimal.Decimal, int] = {}
    ) -> str:
        """Receive mappings with converted keys so the test can see what arrives."""
        seen.append((by_id, by_uid, by_amount))
        return "ok"

    env = dispatch({"id": "1", "name": "keyed", "input": args}, ToolRegistry([keyed]))
    assert env["ok"] is False and env["error"]["code"] == "invalid_arguments"
    assert [f"{e['path']}: {e['reason']}" for e in env["error"]["errors"]] == [reason]
    assert seen == []
    # One spelling of each still arrives converted.
    assert run(keyed, {"by_id": {"0": "zero", "-7": "m", "10": "ten"}}) == "ok"
    assert run(keyed, {"by_uid": {"123E4567-E89B-12D3-A456-426614174000": 2}, "by_amount": {"1.00": 2}}) == "ok"
    assert seen == [
        ({0: "zero", -7: "m", 10: "ten"}, {}, {}),
        ({}, {uuid.UUID("123e4567-e89b-12d3-a456-426614174000"): 2}, {decimal.Decimal("1.00"): 2}),
    ]


@pytest.mark.parametrize(
    ("args", "invalid"),
    [
        ({"n": 0}, [("n", "must be >= 1, got integer 0")]),
        ({"n": True}, [("n", "expected integer, got boolean true")]),
        ({"n": 1, "color": "blue"}, [("color", 'must be one of ["red","green"], got string "blue"')]),
        # What is advertised is what converts: base64 in whole groups of four, durations without
        # years, months or fractions (each refused by the schema, with one reason).
        ({"n": 1, "blob": "a"}, [("blob", "expected standard base64 (groups of 4 characters, padded with '='), got string \"a\"")]),
        ({"n": 1, "blob": "abc"}, [("blob", "expected standard base64 (groups of 4 characters, padded with '='), got string \"abc\"")]),
        ({"n": 1, "span": "PT1.5S"}, [("span", 'expected an ISO 8601 duration in whole weeks, or days/hours/minutes/seconds (e.g. "P1DT2H", "PT90S"; no years or months), got string "PT1.5S"')]),
        ({"n": 1, "span": "P1Y"}, [("span", 'expected an ISO 8601 duration in whole weeks, or days/hours/minutes/seconds (e.g. "P1DT2H", "PT90S"; no years or months), got string "P1Y"')]),
    ],
)
def test_constraints_and_formats_are_enforced(args: dict[str, Any], invalid: list[tuple[str, str]]) -> None:
    def f(
        n: Annotated[int, at.Ge(1)],
        color: Color = Color.RED,
        blob: bytes = b"",
        span: dt.timedelta = dt.timedelta(0),
    ) -> None:
        """Check constraints and formats on one call, for the test suite."""

    t = FunctionTool.from_callable(f)
    with pytest.raises(ToolArgumentError) as err:
        import asyncio

        asyncio.run(t.run(args))
    assert [(p, r) for p, r in err.value.invalid] == invalid


def test_positional_only_keyword_only_and_defaults_of_every_json_type() -> None:
    def f(
        a: int,
        /,
        b: str,
        *,
        c: bool = False,
        d: float = 1.5,
        e: Optional[str] = None,
        g: list[int] = [1, 2],  # noqa: B006
        h: dict[str, int] = {"k": 1},  # noqa: B006
        i: Color = Color.GREEN,
    ) -> list[Any]:
        """Return every argument, to show how each parameter kind binds."""
        return [a, b, c, d, e, g, h, i.value]

    t = FunctionTool.from_callable(f)
    assert dict(t.schema.parameters) == {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "string"},
            "c": {"type": "boolean", "default": False},
            "d": {"type": "number", "default": 1.5},
            "e": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "g": {"type": "array", "items": {"type": "integer"}, "default": [1, 2]},
            "h": {"type": "object", "additionalProperties": {"type": "integer"}, "default": {"k": 1}},
            "i": {"type": "string", "enum": ["red", "green"], "default": "green"},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert run(t, {"a": 1, "b": "x"}) == [1, "x", False, 1.5, None, [1, 2], {"k": 1}, "green"]
    assert run(t, {"b": "y", "a": 2, "c": True, "e": "z", "i": "red"}) == [2, "y", True, 1.5, "z", [1, 2], {"k": 1}, "red"]


class Repo:
    """A store of items, for method-binding tests."""

    prefix = "cls"

    def __init__(self) -> None:
        self.prefix = "inst"

    def find(self, q: str, limit: int = 2) -> str:
        """Find items whose name contains the query, most recent first."""
        return f"{self.prefix}:{q}:{limit}"

    @classmethod
    def build(cls, q: str) -> str:
        """Build a query object from the text the model sends."""
        return f"{cls.prefix}:{q}"

    @staticmethod
    def norm(q: str) -> str:
        """Normalise a query: strip it and lower-case it."""
        return q.strip().lower()

    def __call__(self, q: str) -> str:
        """Answer a query directly from the repository object."""
        return f"call:{self.prefix}:{q}"


def _schema_props(t: FunctionTool) -> dict[str, Any]:
    return dict(t.schema.parameters["properties"])


def test_bound_method_classmethod_staticmethod_and_callable_object() -> None:
    repo = Repo()
    m = FunctionTool.from_callable(repo.find)
    assert (m.name, _schema_props(m)) == ("find", {"q": {"type": "string"}, "limit": {"type": "integer", "default": 2}})
    assert run(m, {"q": "a"}) == "inst:a:2"

    c = FunctionTool.from_callable(Repo.build)
    assert (c.name, _schema_props(c)) == ("build", {"q": {"type": "string"}})
    assert run(c, {"q": "b"}) == "cls:b"

    s = FunctionTool.from_callable(Repo.__dict__["norm"])  # the raw staticmethod object
    assert (s.name, s.description, _schema_props(s)) == (
        "norm",
        "Normalise a query: strip it and lower-case it.",
        {"q": {"type": "string"}},
    )
    assert run(s, {"q": " Hi "}) == "hi"

    o = FunctionTool.from_callable(repo, name="repo")
    assert (o.description, _schema_props(o)) == ("A store of items, for method-binding tests.", {"q": {"type": "string"}})
    assert run(o, {"q": "c"}) == "call:inst:c"


def test_a_method_tool_reached_through_an_instance_without_weak_references_binds_at_every_access() -> None:
    class Slotted:
        __slots__ = ()

        @tool(read_only=True)
        def search(self, q: str) -> str:
            """Search the shop's catalogue for products matching the query text."""
            return q

    shop = Slotted()
    first, second = shop.search, shop.search
    assert (type(first), type(second), first is second) == (FunctionTool, FunctionTool, False)
    assert (run(first, {"q": "lamp"}), run(second, {"q": "desk"})) == ("lamp", "desk")


def test_partial_and_wraps() -> None:
    def search(q: str, limit: int, region: str = "eu") -> str:
        """Search the catalogue for items matching the query text."""
        return f"{q}:{limit}:{region}"

    p = FunctionTool.from_callable(functools.partial(search, limit=5))
    assert p.name == "search"
    assert p.description == "Search the catalogue for items matching the query text."
    assert _schema_props(p) == {
        "q": {"type": "string"},
        "limit": {"type": "integer", "default": 5},
        "region": {"type": "string", "default": "eu"},
    }
    assert p.schema.parameters["required"] == ["q"]
    assert run(p, {"q": "x"}) == "x:5:eu"

    p2 = FunctionTool.from_callable(functools.partial(search, "fixed"))
    assert _schema_props(p2) == {"limit": {"type": "integer"}, "region": {"type": "string", "default": "eu"}}
    assert run(p2, {"limit": 1}) == "fixed:1:eu"

    calls: list[str] = []

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(fn.__name__)
            return fn(*args, **kwargs)

        return wrapper

    w = FunctionTool.from_callable(logged(search))
    assert (w.name, w.description, _schema_props(w)) == (
        "search",
        "Search the catalogue for items matching the query text.",
        {"q": {"type": "string"}, "limit": {"type": "integer"}, "region": {"type": "string", "default": "eu"}},
    )
    assert run(w, {"q": "y", "limit": 3}) == "y:3:eu"
    assert calls == ["search"]


async def test_async_function_with_context_and_kwargs() -> None:
    @tool(side_effecting=False)
    async def look(q: str, ctx=None, **extra: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        """Look something up and echo the extra keys the model sent."""
        return {"q": q, "ctx": ctx, "extra": extra}

    assert dict(look.schema.parameters) == {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }
    assert await look.run({"q": "a", "zz": 1}, "CTX") == {"q": "a", "ctx": "CTX", "extra": {"zz": 1}}


def test_unresolvable_hint_accepts_any_value_for_that_parameter_only() -> None:
    ns: dict[str, Any] = {}
    code = compile(
        "def f(a: 'Missing', b: int) -> list:\n"
        "    '''Echo both arguments back, for the test suite.'''\n"
        "    return [a, b]\n",
        "<test>",
        "exec",
        dont_inherit=True,
    )
    exec(code, ns)
    t = FunctionTool.from_callable(ns["f"])
    assert _schema_props(t) == {"a": {}, "b": {"type": "integer"}}
    assert run(t, {"a": {"any": ["thing"]}, "b": 1}) == [{"any": ["thing"]}, 1]
    with pytest.raises(ToolArgumentError):
        import asyncio

        asyncio.run(t.run({"a": 1, "b": "1"}))


def test_star_args_is_refused() -> None:
    from agentkit_tools import ToolDefinitionError

    def f(*names: str) -> None:
        """Take names positionally, which a model cannot send."""

    with pytest.raises(ToolDefinitionError, match=r"parameter '\*names' takes positional arguments"):
        FunctionTool.from_callable(f)
