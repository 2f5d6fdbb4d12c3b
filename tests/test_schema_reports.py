"""Cases from public bug reports of other tool frameworks and from the reference's own tool-layer
tests, written as our own minimal cases: schemas, validation, renderings and messages."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import inspect
import itertools
from typing import Any, Optional

import pydantic
import pytest
import typing_extensions as te

from agentkit_tools import (
    FunctionTool,
    ToolArgumentError,
    ToolDefinitionError,
    ToolRegistry,
    ToolShapeError,
    as_tool,
    dispatch,
    lint,
    render_result,
    tool,
)
from agentkit_tools._core import FORMAT_PATTERNS


def run(t: FunctionTool, args: Any, ctx: Any = None) -> Any:
    return asyncio.run(t.run(args, ctx))


def error_of(env: dict[str, Any]) -> dict[str, Any]:
    assert env["ok"] is False, env
    return env["error"]


# ------------------------------------------------------------------ 1. typing_extensions twins


class BookingTE(te.TypedDict, total=False):
    guest: te.Required[str]
    nights: te.NotRequired[int]
    room: te.ReadOnly[te.Required[str]]
    note: str


BOOKING_SCHEMA = {
    "type": "object",
    "properties": {
        "guest": {"type": "string"},
        "nights": {"type": "integer"},
        "room": {"type": "string"},
        "note": {"type": "string"},
    },
    "required": ["guest", "room"],
    "additionalProperties": False,
}

Nights = te.TypeAliasType("Nights", list[int])


def test_typing_extensions_typeddict_and_alias_get_the_closed_schema() -> None:
    def book(booking: BookingTE, nights: Nights) -> str:
        """Book a room for a guest for the given nights of the month."""
        return f"{booking['guest']}:{nights}"

    t = tool(book, side_effecting=True)
    assert t.schema.parameters["properties"] == {
        "booking": BOOKING_SCHEMA,
        "nights": {"type": "array", "items": {"type": "integer"}},
    }
    env = dispatch({"name": "book", "input": {"booking": {"guest": "Ann"}, "nights": [1, "2"]}}, ToolRegistry([t]))
    assert error_of(env)["errors"] == [
        {"path": "booking", "reason": 'missing required field "room"'},
        {"path": "nights[1]", "reason": 'expected integer, got string "2"'},
    ]
    ok = dispatch({"name": "book", "input": {"booking": {"guest": "Ann", "room": "12"}, "nights": [3]}}, ToolRegistry([t]))
    assert ok["value"] == "Ann:[3]"


# ------------------------------------------------------------------ 2. default_factory

_ids = itertools.count(1)


class Ticket(pydantic.BaseModel):
    title: str
    ticket_id: str = pydantic.Field(default_factory=lambda: f"T-{next(_ids)}")


@dataclasses.dataclass
class Batch:
    tags: list[str] = dataclasses.field(default_factory=list)


def test_default_factory_fields_advertise_no_default_and_run_per_call() -> None:
    seen: list[str] = []

    @tool(side_effecting=True)
    def open_ticket(ticket: Ticket, batch: Batch) -> str:
        """Open a support ticket and return its identifier."""
        seen.append(ticket.ticket_id)
        return ticket.ticket_id

    props = open_ticket.schema.parameters["properties"]
    assert props["ticket"]["properties"]["ticket_id"] == {"type": "string"}
    assert props["ticket"]["required"] == ["title"]
    assert props["batch"]["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    reg = ToolRegistry([open_ticket])
    first = dispatch({"name": "open_ticket", "input": {"ticket": {"title": "a"}, "batch": {}}}, reg)["value"]
    second = dispatch({"name": "open_ticket", "input": {"ticket": {"title": "a"}, "batch": {}}}, reg)["value"]
    assert first != second and first.startswith("T-") and second.startswith("T-")


# ------------------------------------------------------------------ 3. strict $ref stands alone


class Category(pydantic.BaseModel):
    name: str
    parent: Optional[Category] = pydantic.Field(default=None, description="The enclosing category.")


def _refs_with_siblings(node: Any) -> list[Any]:
    out = []
    if isinstance(node, dict):
        if "$ref" in node and len(node) > 1:
            out.append(node)
        for v in node.values():
            out.extend(_refs_with_siblings(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_refs_with_siblings(v))
    return out


def test_strict_rendering_never_puts_siblings_next_to_a_ref() -> None:
    @tool(side_effecting=False)
    def file_under(category: Category, child: Optional[Category] = None) -> str:
        """File a document under a category of the catalogue tree."""
        return category.name

    for strict_rendering in (file_under.to_openai(strict=True), file_under.to_openai(strict=True, api="responses")):
        assert _refs_with_siblings(strict_rendering) == []
    params = file_under.to_openai(strict=True)["function"]["parameters"]
    assert params["$defs"]["Category"]["properties"]["parent"] == {
        "anyOf": [{"$ref": "#/$defs/Category"}, {"type": "null"}],
        "description": "The enclosing category.",
    }
    assert params["properties"]["child"] == {"anyOf": [{"$ref": "#/$defs/Category"}, {"type": "null"}]}


# ------------------------------------------------------------------ 6. an unresolvable forward reference


class Box(pydantic.BaseModel):
    content: Missing  # noqa: F821 - never defined


class Crate(pydantic.BaseModel):
    size: int


def test_a_model_with_a_name_that_never_resolves_is_a_definition_error() -> None:
    def pack(box: Box) -> str:
        """Pack a box for shipping and return its label text."""
        return "label"

    with pytest.raises(ToolDefinitionError) as err:
        tool(pack, side_effecting=True)
    assert str(err.value) == (
        "tool 'pack': parameter 'box': the model Box refers to 'Missing', which is not defined: define "
        "or import it before the tool is defined (or call Box.model_rebuild() once it exists)"
    )


def test_a_model_broken_after_definition_is_an_internal_error_not_the_models_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    @tool(side_effecting=True)
    def ship(crate: Crate) -> int:
        """Ship a crate and return its size in litres."""
        return crate.size

    # As a model whose forward reference cannot be resolved when the call comes.
    monkeypatch.setattr(Crate, "__pydantic_complete__", False)
    monkeypatch.setattr(Crate, "model_rebuild", classmethod(lambda cls, **kw: (_ for _ in ()).throw(NameError("Gone"))))
    err = error_of(dispatch({"name": "ship", "input": {"crate": {"size": 3}}}, ToolRegistry([ship])))
    assert err["code"] == "internal_error"
    assert err["message"].startswith("ship failed: RuntimeError: the model Crate refers to a type that cannot be resolved")


# ------------------------------------------------------------------ 7. Gemini names


@pytest.mark.parametrize("name", ["3d_scan", "-scan"])
def test_names_gemini_refuses_are_reported_with_the_rule(name: str) -> None:
    def scan() -> str:
        """Scan the object on the turntable and return a mesh id."""
        return "m1"

    t = tool(scan, name=name, side_effecting=False)
    assert [(f.code, f.subject, f.message) for f in lint(t) if f.subject == "gemini:name"] == [
        (
            "weakened_rendering",
            "gemini:name",
            f"Gemini refuses the function name '{name}': its names must start with a letter or an underscore, "
            "then use only a-z, A-Z, 0-9, '_', '.', ':' and '-' (at most 64 characters); rename the tool (name=...)",
        )
    ]
    assert [f for f in lint(tool(scan, name="scan_3d", side_effecting=False)) if f.subject == "gemini:name"] == []


# ------------------------------------------------------------------ 8. Returns in all three styles


def _numpy(event_id: int) -> dict:
    """Move an event to the next free slot of the calendar.

    Parameters
    ----------
    event_id : int
        The event.

    Returns
    -------
    dict
        The updated event.
    """
    return {}


def _google(event_id: int) -> dict:
    """Move an event to the next free slot of the calendar.

    Args:
        event_id: The event.

    Returns:
        The updated event.
    """
    return {}


def _sphinx(event_id: int) -> dict:
    """Move an event to the next free slot of the calendar.

    :param event_id: The event.
    :returns: The updated event.
    :rtype: dict
    """
    return {}


def test_returns_reads_the_same_in_numpy_google_and_sphinx() -> None:
    descriptions = {tool(f, side_effecting=True).description for f in (_numpy, _google, _sphinx)}
    assert descriptions == {"Move an event to the next free slot of the calendar.\n\nReturns: The updated event."}


def test_numpy_returns_with_named_values() -> None:
    def bounds(xs: list[float]) -> tuple:
        """Find the smallest and the largest of a list of numbers.

        Returns
        -------
        low : float
            The smallest.
        high : float
            The largest.
        """
        return ()

    assert tool(bounds, side_effecting=False).description == (
        "Find the smallest and the largest of a list of numbers.\n\nReturns: low: The smallest.\nhigh: The largest."
    )


# ------------------------------------------------------------------ 9. time, datetimes, null for a default


def test_time_of_day_accepts_what_python_users_write_and_advertises_exactly_that() -> None:
    @tool(side_effecting=True)
    def remind(at: dt.time) -> str:
        """Set a daily reminder at the given time of day."""
        return repr(at)

    assert remind.schema.parameters["properties"]["at"] == {"type": "string", "pattern": FORMAT_PATTERNS["time"]}
    reg = ToolRegistry([remind])
    cases = {
        "09:30": "datetime.time(9, 30)",
        "09:30:00": "datetime.time(9, 30)",
        "09:30:05.25": "datetime.time(9, 30, 5, 250000)",
        "09:30:00Z": "datetime.time(9, 30, tzinfo=datetime.timezone.utc)",
        "09:30:00z": "datetime.time(9, 30, tzinfo=datetime.timezone.utc)",
        "23:59:59-05:00": "datetime.time(23, 59, 59, tzinfo=datetime.timezone(datetime.timedelta(days=-1, seconds=68400)))",
    }
    for text, body in cases.items():
        assert dispatch({"name": "remind", "input": {"at": text}}, reg)["value"] == body, text
    reason = (
        'expected a time of day HH:MM[:SS[.ffffff]] with an optional offset such as Z or +01:00 (e.g. "09:30" or '
        '"09:30:00Z")'
    )
    for bad in ("9:30", "24:00", "23:59:60", "09:30:00.1234567", "09:30+1"):
        assert error_of(dispatch({"name": "remind", "input": {"at": bad}}, reg))["errors"] == [
            {"path": "at", "reason": f'{reason}, got string "{bad}"'}
        ]


def test_a_naive_datetime_is_told_the_offset_is_missing() -> None:
    @tool(side_effecting=True)
    def book(start: dt.datetime) -> str:
        """Book the meeting room from the given start time."""
        return start.isoformat()

    reg = ToolRegistry([book])
    assert error_of(dispatch({"name": "book", "input": {"start": "2024-05-01T10:00:00"}}, reg))["errors"] == [
        {
            "path": "start",
            "reason": 'expected a date-time with a UTC offset (RFC 3339): add an offset such as Z or +01:00 '
            '(e.g. "2024-05-01T12:00:00Z"), got string "2024-05-01T10:00:00"',
        }
    ]


def test_pydantic_aware_and_naive_datetimes_are_honoured() -> None:
    @tool(side_effecting=True)
    def log(at: pydantic.AwareDatetime, local: pydantic.NaiveDatetime) -> str:
        """Log an event at an absolute and a local wall-clock time."""
        return f"{at.isoformat()} {local.isoformat()}"

    reg = ToolRegistry([log])
    ok = dispatch({"name": "log", "input": {"at": "2024-05-01T10:00:00Z", "local": "2024-05-01T12:00:00"}}, reg)
    assert ok["value"] == "2024-05-01T10:00:00+00:00 2024-05-01T12:00:00"
    err = error_of(dispatch({"name": "log", "input": {"at": "2024-05-01T10:00:00Z", "local": "2024-05-01T12:00:00Z"}}, reg))
    assert err["errors"] == [
        {"path": "local", "reason": 'expected a date-time without an offset (e.g. "2024-05-01T12:00:00"), got string "2024-05-01T12:00:00Z"'}
    ]


def test_null_for_a_parameter_with_a_default_says_to_omit_it() -> None:
    @tool(side_effecting=False)
    def page(limit: int = 20) -> int:
        """Return one page of results of the given size."""
        return limit

    err = error_of(dispatch({"name": "page", "input": {"limit": None}}, ToolRegistry([page])))
    assert err["message"] == (
        "tool 'page' call rejected: invalid argument(s): limit: null is not accepted here; omit the argument to "
        "use its default (20). Accepted arguments: ['limit']. Re-read the input schema and call 'page' again "
        "with corrected arguments."
    )


# ------------------------------------------------------------------ 12. in-process Python values


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclasses.dataclass
class Reading:
    value: float
    unit: Unit


def test_run_accepts_members_and_instances_of_the_declared_types() -> None:
    @tool(side_effecting=False)
    def convert(reading: Reading, to: Unit, when: Optional[dt.date] = None) -> str:
        """Convert a temperature reading into another unit of measure."""
        return f"{reading!r} -> {to!r} on {when!r}"

    assert run(convert, {"reading": Reading(20.0, Unit.C), "to": Unit.F, "when": dt.date(2024, 5, 1)}) == (
        "Reading(value=20.0, unit=<Unit.C: 'celsius'>) -> <Unit.F: 'fahrenheit'> on datetime.date(2024, 5, 1)"
    )
    # Validated as what they are: a member of another Enum, an instance with a bad field.
    with pytest.raises(ToolArgumentError) as err:
        run(convert, {"reading": Reading("warm", Unit.C), "to": Unit.F})  # type: ignore[arg-type]
    assert err.value.invalid == (("reading.value", 'expected number, got string "warm"'),)


def test_run_accepts_instances_nested_in_containers() -> None:
    @tool(side_effecting=False)
    def average(readings: list[Reading]) -> str:
        """Average a list of temperature readings for display."""
        return repr(readings)

    assert run(average, {"readings": [Reading(1.0, Unit.C), {"value": 2.0, "unit": Unit.F}]}) == (
        "[Reading(value=1.0, unit=<Unit.C: 'celsius'>), Reading(value=2.0, unit=<Unit.F: 'fahrenheit'>)]"
    )
    with pytest.raises(ToolArgumentError) as err:
        run(average, {"readings": [Reading("warm", Unit.C)]})  # type: ignore[arg-type]
    assert err.value.invalid == (("readings[0].value", 'expected number, got string "warm"'),)


# ------------------------------------------------------------------ 13. the --- cut and the floor


def test_floor_error_says_the_text_below_the_cut_was_not_counted() -> None:
    def sync_ledger() -> None:
        """
        ---
        Internal: re-reads the whole ledger from the upstream accounting system every night.
        """

    with pytest.raises(ToolDefinitionError) as err:
        tool(sync_ledger, side_effecting=True)
    assert str(err.value) == (
        "tool 'sync_ledger' needs a docstring/description of at least 30 characters (the model reads it to "
        "decide when and how to call the tool: say what it does and when to use it); got 0 chars: ''. The text "
        "below the '---' line is for humans and was not counted: move what the model needs above that line"
    )


# ------------------------------------------------------------------ 14. shape mismatch event and errors


class Point(pydantic.BaseModel):
    x: int
    y: int


class Trace:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def add_event_to_current_span(self, name: str, attributes: dict[str, Any]) -> None:
        self.events.append((name, attributes))


class Ctx:
    def __init__(self) -> None:
        self.trace = Trace()


def test_shape_mismatch_reaches_the_trace_and_errors_are_strings() -> None:
    @tool(side_effecting=False)
    def locate() -> Point:
        """Locate the robot and return its grid position."""
        return {"x": 1, "y": "north"}  # type: ignore[return-value]

    ctx = Ctx()
    with pytest.raises(ToolShapeError) as err:
        run(locate, {}, ctx)
    assert ctx.trace.events == [("tool.shape_mismatch", {"tool": "locate", "expected": "Point"})]
    assert err.value.errors == ['y: expected integer, got string "north"']
    assert "; ".join(err.value.errors) == 'y: expected integer, got string "north"'
    assert ToolShapeError("t", "Point", {}).errors == []
    env = dispatch({"name": "locate", "input": {}}, ToolRegistry([locate]))
    assert error_of(env)["message"].startswith(
        "locate returned a value that does not match its declared output schema 'Point' "
        '(y: expected integer, got string "north").'
    )


def test_a_ctx_whose_trace_cannot_be_read_still_gets_the_shape_error() -> None:
    """Reporting the mismatch never breaks the call: a ``ctx.trace`` that raises when read is
    skipped as a tracer that raises when called is, and the caller gets the shape error."""

    @tool(side_effecting=False)
    def locate() -> Point:
        """Locate the robot and return its grid position."""
        return {"x": 1, "y": "north"}  # type: ignore[return-value]

    class Broken:
        @property
        def trace(self) -> Any:
            raise RuntimeError("no tracer here")

    with pytest.raises(ToolShapeError) as err:
        run(locate, {}, Broken())
    assert err.value.errors == ['y: expected integer, got string "north"']
    env = dispatch({"name": "locate", "input": {}}, ToolRegistry([locate]), ctx=Broken())
    assert error_of(env)["message"].startswith(
        "locate returned a value that does not match its declared output schema 'Point' "
        '(y: expected integer, got string "north").'
    )


# ------------------------------------------------------------------ 15. workflow outputs


def test_render_result_of_workflow_outputs_is_one_line_each() -> None:
    class WorkflowResult:
        outputs = {"summary": "three issues found", "count": 3, "ids": [4, 7]}

    assert render_result(WorkflowResult()) == "summary: three issues found\ncount: 3\nids: [4, 7]"


# ------------------------------------------------------------------ 16. registry and signature details


def test_requires_approval_of_an_unknown_name_is_false() -> None:
    @tool(side_effecting=True, requires_approval=True)
    def wire(amount: int) -> str:
        """Wire an amount of money to the supplier on file."""
        return "sent"

    reg = ToolRegistry([wire])
    assert (reg.requires_approval("wire"), reg.requires_approval("unknown")) == (True, False)


def test_inspect_signature_of_the_class_and_of_a_tool() -> None:
    assert list(inspect.signature(FunctionTool).parameters)[:10] == [
        "name", "fn", "description", "side_effecting", "schema", "idempotent", "requires_approval", "caps",
        "url_arg", "output_schema",
    ]

    @tool(side_effecting=False)
    def echo(text: str) -> str:
        """Echo the text back to the caller unchanged."""
        return text

    assert inspect.signature(echo) == inspect.signature(echo.func)
    assert list(inspect.signature(echo).parameters) == ["text"]


def test_no_accepted_arguments_reads_none() -> None:
    @tool(side_effecting=False)
    def now() -> str:
        """Return the current time on the server clock."""
        return "12:00"

    with pytest.raises(ToolArgumentError) as err:
        run(now, {"tz": "UTC"})
    assert str(err.value) == "tool 'now' call rejected: unexpected argument(s) ['tz']. Accepted arguments: <none>"
    assert error_of(dispatch({"name": "now", "input": {"tz": "UTC"}}, ToolRegistry([now])))["message"] == (
        "tool 'now' call rejected: unexpected argument(s) ['tz']. Accepted arguments: <none>. Re-read the input "
        "schema and call 'now' again with corrected arguments."
    )


# ------------------------------------------------------------------ 17. as_tool, *args, Unit | str


def test_as_tool_has_no_floor_when_the_description_defaults() -> None:
    class Helper:
        """Helps."""

        async def run(self, task: str, ctx: Any) -> str:
            return task.upper()

    t = as_tool(Helper(), name="helper")
    assert t.description == "Helps."
    assert [(f.code, f.message) for f in lint(t)] == [
        ("short_description", "the description has 6 characters (floor 30): say what the tool does and when to use it")
    ]


def test_star_args_refusal_mentions_kwargs() -> None:
    def tag(*labels: str) -> str:
        """Tag the current document with the given labels."""
        return ""

    with pytest.raises(ToolDefinitionError) as err:
        tool(tag, side_effecting=True)
    assert str(err.value) == (
        "tool 'tag': parameter '*labels' takes positional arguments, which a model cannot send (tool calls carry "
        "named arguments only); replace it with a named list parameter such as 'labels: list[str]', or take "
        "'**kwargs' to receive named arguments the schema does not declare"
    )


def test_a_union_converts_with_its_first_matching_member() -> None:
    # The documented rule: the first member (in declaration order) whose schema accepts the value
    # converts it. "celsius" is a Unit value, so `Unit | str` gives the member and `str | Unit` the string.
    @tool(side_effecting=False)
    def first_unit(u: Unit | str) -> str:
        """Show how a unit-or-text argument reaches the body."""
        return repr(u)

    @tool(side_effecting=False)
    def first_text(u: str | Unit) -> str:
        """Show how a text-or-unit argument reaches the body."""
        return repr(u)

    assert run(first_unit, {"u": "celsius"}) == "<Unit.C: 'celsius'>"
    assert run(first_unit, {"u": "kelvin"}) == "'kelvin'"
    assert run(first_text, {"u": "celsius"}) == "'celsius'"


# ------------------------------------------------------------------ 5. output schema == structured result


class Order(pydantic.BaseModel):
    order_id: str = pydantic.Field(serialization_alias="orderId")
    qty: int

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def total_units(self) -> int:
        return self.qty * 2


async def test_mcp_output_schema_matches_the_structured_result_for_the_official_client() -> None:
    from mcp import Client

    from agentkit_tools.mcp_server import build_server

    @tool(side_effecting=False)
    def get_order(order_id: str) -> Order:
        """Look up an order by its identifier and return it."""
        return Order(order_id=order_id, qty=3)

    assert get_order.to_mcp()["outputSchema"] == {
        "type": "object",
        "properties": {"orderId": {"type": "string"}, "qty": {"type": "integer"}, "total_units": {"type": "integer"}},
        "required": ["orderId", "qty", "total_units"],
        "additionalProperties": False,
    }
    # The official client validates structuredContent against the advertised outputSchema.
    async with Client(build_server(ToolRegistry([get_order]))) as client:
        result = await client.call_tool("get_order", {"order_id": "A1"})
    assert result.structured_content == {"orderId": "A1", "qty": 3, "total_units": 6}
    # The input side is unchanged: a returned dict is still checked in the model's field names.
    from_dict = FunctionTool.from_callable(
        lambda: {"order_id": "B", "qty": 1}, name="g", description="Return an order built from a plain dict here.",
        output_schema=Order,
    )
    assert await from_dict.run({}) == Order(order_id="B", qty=1)
