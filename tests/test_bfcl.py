"""Real third-party input: the Berkeley Function Calling Leaderboard's multi-turn API classes
(``bfcl-eval==2026.3.23``, installed by ``scripts/test``) defined as tools, compared with BFCL's
own JSON docs, and every ground-truth call of ``BFCL_v4_multi_turn_base`` replayed through
``dispatch`` (``examples/bfcl_replay.py``)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import bfcl_replay  # noqa: E402

OPTIONAL_MARKER = "description: [Optional] marker"


@pytest.fixture(scope="module")
def definitions() -> Any:
    return bfcl_replay.definition_report()


@pytest.fixture(scope="module", params=["json", "mapping", "openai-strict"])
def outcomes(request: pytest.FixtureRequest) -> list[bfcl_replay.Outcome]:
    # Arguments as the JSON text a provider returns, as an already-parsed mapping, and as a model
    # following the openai-strict rendering sends them (null for every argument left out).
    return bfcl_replay.replay_all(request.param)


@pytest.fixture(scope="module")
def renderings() -> dict[str, bfcl_replay.RenderingFidelity]:
    return bfcl_replay.rendering_report()


@pytest.fixture(scope="module")
def ticket_tools() -> Any:
    registry, _ = bfcl_replay.build_registry(bfcl_replay.api_class("TicketAPI")())
    return registry


def test_every_public_method_of_the_eight_classes_becomes_a_tool(definitions: Any) -> None:
    registered, failures, _ = definitions
    assert registered == {
        "GorillaFileSystem": 18,
        "MathAPI": 17,
        "MessageAPI": 10,
        "TwitterAPI": 14,
        "TicketAPI": 9,
        "TradingBot": 20,
        "TravelAPI": 18,
        "VehicleControlAPI": 22,
    }
    assert failures == []


def test_schema_fidelity_counts_per_class(definitions: Any) -> None:
    _, _, fidelities = definitions

    def row(tools: int, param_descriptions: int) -> dict[str, int]:
        same = dict.fromkeys(bfcl_replay.Fidelity.COLUMNS, tools)
        return {**same, "param_descriptions": param_descriptions}

    assert {name: f.counts() for name, f in fidelities.items()} == {
        "GorillaFileSystem": row(18, 15),
        "MathAPI": row(17, 16),
        "MessageAPI": row(10, 10),
        "TwitterAPI": row(14, 13),
        "TicketAPI": row(9, 7),
        "TradingBot": row(20, 19),
        "TravelAPI": row(18, 16),
        "VehicleControlAPI": row(22, 21),
    }
    totals: Counter[str] = Counter()
    for f in fidelities.values():
        totals.update(f.counts())
    assert dict(totals) == {**dict.fromkeys(bfcl_replay.Fidelity.COLUMNS, 128), "param_descriptions": 117}


def test_schema_fidelity_mismatches_are_listed(definitions: Any) -> None:
    _, _, fidelities = definitions
    listed = {name: [(where, aspect) for where, aspect, _, _ in f.mismatches] for name, f in fidelities.items()}
    assert listed == {
        "GorillaFileSystem": [
            ("echo.file_name", OPTIONAL_MARKER),
            ("find.name", OPTIONAL_MARKER),
            ("ls.a", OPTIONAL_MARKER),
        ],
        "MathAPI": [("round_number.decimal_places", OPTIONAL_MARKER)],
        "MessageAPI": [],
        "TwitterAPI": [("post_tweet.tags", OPTIONAL_MARKER), ("post_tweet.mentions", OPTIONAL_MARKER)],
        "TicketAPI": [
            ("edit_ticket.updates", "keys named by BFCL only"),
            ("edit_ticket.updates", "description"),
            ("get_user_tickets.status", OPTIONAL_MARKER),
        ],
        "TradingBot": [
            ("get_transaction_history.start_date", OPTIONAL_MARKER),
            ("get_transaction_history.end_date", OPTIONAL_MARKER),
        ],
        "TravelAPI": [
            ("get_budget_fiscal_year.lastModifiedAfter", OPTIONAL_MARKER),
            ("get_budget_fiscal_year.includeRemoved", OPTIONAL_MARKER),
            ("retrieve_invoice.booking_id", OPTIONAL_MARKER),
            ("retrieve_invoice.insurance_id", OPTIONAL_MARKER),
        ],
        "VehicleControlAPI": [
            ("adjustClimateControl.unit", OPTIONAL_MARKER),
            ("adjustClimateControl.fanSpeed", OPTIONAL_MARKER),
            ("adjustClimateControl.mode", OPTIONAL_MARKER),
        ],
    }
    ticket = {(w, a): (ours, theirs) for w, a, ours, theirs in fidelities["TicketAPI"].mismatches}
    assert ticket[("edit_ticket.updates", "description")] == (
        "Dictionary containing the fields to be updated. - title (str): [Optional] New title for the "
        "ticket. - description (str): [Optional] New description for the ticket. - status (str): "
        "[Optional] New status for the ticket. - priority (int): [Optional] New priority for the ticket.",
        "Dictionary containing the fields to be updated.",
    )
    nullable = [f"{name}.{p}" for name, f in fidelities.items() for p in f.nullable]
    assert nullable == [
        "GorillaFileSystem.echo.file_name",
        "GorillaFileSystem.find.name",
        "TicketAPI.get_user_tickets.status",
        "TradingBot.get_transaction_history.start_date",
        "TradingBot.get_transaction_history.end_date",
        "TravelAPI.get_budget_fiscal_year.lastModifiedAfter",
        "TravelAPI.get_budget_fiscal_year.includeRemoved",
        "TravelAPI.retrieve_invoice.booking_id",
        "TravelAPI.retrieve_invoice.insurance_id",
    ]


def test_replay_covers_every_multi_turn_base_entry(outcomes: list[bfcl_replay.Outcome]) -> None:
    assert len({o.entry_id for o in outcomes}) == 200
    assert len(outcomes) == 1142  # every ground-truth call; no final-state mismatch entries
    assert Counter(o.kind for o in outcomes) == {"identical": 1141, "rejected_hint": 1}
    # The target: every call that respects its method's own hints gives the direct result.
    assert bfcl_replay.replay_summary(outcomes) == {"calls": 1142, "respecting_hints": 1141, "identical": 1141}
    assert [o for o in outcomes if o.kind != "identical"] == [
        bfcl_replay.Outcome(
            "multi_turn_base_173",
            3,
            "close_ticket(ticket_id='ticket_001')",
            "rejected_hint",
            "ticket_id='ticket_001' breaks the hint int "
            '(rejected: ticket_id: expected integer, got string "ticket_001")',
        )
    ]


def test_replay_detects_a_result_that_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Control: the comparison is not vacuous. A dispatcher that answers differently from the
    # method is reported as a mismatch, and the two instances' states then differ too.
    entry, turns = bfcl_replay.load_entries()[0]
    real = bfcl_replay.dispatch

    def skewed(call: dict[str, Any], registry: Any) -> dict[str, Any]:
        if call["name"] == "mkdir":
            return {"ok": True, "value": {"skipped": True}, "elapsed_ms": 0.0}
        return real(call, registry)

    monkeypatch.setattr(bfcl_replay, "dispatch", skewed)
    found = [(o.turn, o.source, o.kind) for o in bfcl_replay.replay_entry(entry, turns) if o.kind != "identical"]
    assert found == [
        (0, "mkdir(dir_name='temp')", "mismatch"),
        (0, "mv(source='final_report.pdf', destination='temp')", "mismatch"),
        (1, "cd(folder='temp')", "mismatch"),
        (1, "grep(file_name='final_report.pdf',pattern='budget analysis')", "mismatch"),
        (2, "sort('final_report.pdf')", "mismatch"),
        (3, "mv(source='previous_report.pdf',destination='temp')", "mismatch"),
        (3, "cd(folder='temp')", "mismatch"),
        (3, "diff(file_name1='final_report.pdf',file_name2='previous_report.pdf')", "mismatch"),
        (4, "<final state of GorillaFileSystem>", "mismatch"),
    ]


def test_replay_classifies_each_kind_of_outcome() -> None:
    # Calls no ground truth makes, one per outcome kind, on the stateless MathAPI and TravelAPI.
    math = {"id": "synthetic", "involved_classes": ["MathAPI"], "initial_config": {}}
    calls = ["add(a=1, b=2.5)", "square_root(16, True)", "add(a='1', b=2)", "nosuch(x=1)", "add(1, 2, 3)"]
    assert list(bfcl_replay.replay_entry(math, [calls])) == [
        bfcl_replay.Outcome("synthetic", 0, "add(a=1, b=2.5)", "identical"),
        bfcl_replay.Outcome(
            "synthetic",
            0,
            "square_root(16, True)",
            "rejected_rule",
            "precision=True for the hint int (a boolean is not a number) "
            "(rejected: precision: expected integer, got boolean true)",
        ),
        bfcl_replay.Outcome(
            "synthetic",
            0,
            "add(a='1', b=2)",
            "rejected_hint",
            "a='1' breaks the hint float (rejected: a: expected number, got string \"1\")",
        ),
        bfcl_replay.Outcome("synthetic", 0, "nosuch(x=1)", "unparsed", "no method 'nosuch' in ['MathAPI']"),
        bfcl_replay.Outcome(
            "synthetic",
            0,
            "add(1, 2, 3)",
            "unparsed",
            "'add(1, 2, 3)' does not bind to add(a: float, b: float) -> Dict[str, float]: too many positional arguments",
        ),
    ]
    travel = {"id": "raises", "involved_classes": ["TravelAPI"], "initial_config": {}}
    call = "compute_exchange_rate(base_currency='XXX', target_currency='YYY', value=1)"
    assert list(bfcl_replay.replay_entry(travel, [[call]])) == [
        bfcl_replay.Outcome(
            "raises", 0, call, "identical", "both raised: ValueError: No available exchange rate for the given currencies."
        )
    ]


def test_parse_call_names_positional_arguments_by_the_signature() -> None:
    def sort(file_name: str, reverse: bool = False) -> None: ...

    assert bfcl_replay.parse_call("sort('a.txt', True)", {"sort": sort}) == ("sort", {"file_name": "a.txt", "reverse": True})
    assert bfcl_replay.parse_call("sort(file_name='a.txt')", {"sort": sort}) == ("sort", {"file_name": "a.txt"})
    with pytest.raises(ValueError) as err:
        bfcl_replay.parse_call("sort('a', 'b', 'c')", {"sort": sort})
    assert str(err.value) == (
        "\"sort('a', 'b', 'c')\" does not bind to "
        "sort(file_name: 'str', reverse: 'bool' = False) -> 'None': too many positional arguments"
    )
    with pytest.raises(ValueError, match="not a plain function call"):
        bfcl_replay.parse_call("x.sort('a')", {"sort": sort})


@pytest.mark.parametrize(
    ("value", "hint", "allowed"),
    [
        (3, float, True),  # PEP 484: an int is acceptable for float
        (3.5, int, False),
        (True, int, True),  # bool is an int to a type checker (our validator refuses it: SPEC §4)
        ("ticket_001", int, False),
        (None, Optional[str], True),
        (None, str, False),
        ([1, 2.5], List[float], True),
        ([1, "x"], List[float], False),
        ({"a": 1}, Dict[str, Union[str, int]], True),
        ({"a": 1.5}, Dict[str, Union[str, int]], False),
        ((1, "a"), Tuple[int, str], True),
        ((1, 2), Tuple[int, str], False),
        ((1, 2, 3), Tuple[int, ...], True),
        (object(), Any, True),
    ],
)
def test_hint_allows(value: Any, hint: Any, allowed: bool) -> None:
    assert bfcl_replay.hint_allows(value, hint) is allowed


def test_type_words_of_both_schema_dialects() -> None:
    assert bfcl_replay.doc_type({"type": "dict"}) == "object"
    assert bfcl_replay.doc_type({"type": "array", "items": {"type": "float"}}) == "array<number>"
    assert bfcl_replay.doc_type({"type": "any"}) == "any"
    assert bfcl_replay.doc_type({"type": "tuple"}) == "array"
    assert bfcl_replay.schema_type({}) == "any"
    assert bfcl_replay.schema_type({"type": "array", "items": {"type": "number"}}) == "array<number>"
    assert bfcl_replay.schema_type({"type": "array", "items": {}}) == "array"
    assert bfcl_replay.schema_type({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string"
    assert bfcl_replay.schema_type({"anyOf": [{"type": "string"}, {"type": "integer"}]}) == "string|integer"


# ----------------------------------------------------------------------------- rendering fidelity

STRICT_DICT = (
    "cannot be made strict (an object with arbitrary keys (dict[str, V]) cannot be closed: strict mode "
    "requires every key to be listed); the tool is rendered with strict: false and its plain schema"
)


def test_rendering_fidelity_per_provider(renderings: dict[str, bfcl_replay.RenderingFidelity]) -> None:
    # (tools without loss, tools, parameter descriptions starting with BFCL's "[Optional] ").
    assert {p: (f.lossless, f.tools, f.optional_prefix) for p, f in renderings.items()} == {
        "anthropic": (128, 128, 16),
        "openai": (128, 128, 16),
        "openai-strict": (127, 128, 16),
        "openai-responses": (128, 128, 16),
        "openai-responses-strict": (127, 128, 16),
        "gemini": (0, 128, 16),
        "mcp": (128, 128, 16),
    }
    assert {p: f.kinds() for p, f in renderings.items()} == {
        "anthropic": {},
        "openai": {},
        "openai-strict": {"rendered with strict: false": 1},
        "openai-responses": {},
        "openai-responses-strict": {"rendered with strict: false": 1},
        "gemini": {
            "closed object shown open": 128,
            "'type' dropped, description extended, value schema of an open object dropped": 1,
        },
        "mcp": {},
    }


def test_rendering_losses_are_listed_with_lint_messages(renderings: dict[str, bfcl_replay.RenderingFidelity]) -> None:
    loss = bfcl_replay.RenderingLoss
    root = [x for x in renderings["gemini"].losses if x.path == "<root>"]
    # Gemini's Schema has no additionalProperties: every tool's closed argument object is shown
    # open, and lint does not report it.
    assert len(root) == 128
    assert {(x.kind, x.detail, x.lint) for x in root} == {
        ("closed object shown open", "additionalProperties: expected false, rendered (absent)", None)
    }
    assert sorted(x.tool for x in root) == sorted(
        name for c in bfcl_replay.CLASS_NAMES for name, _ in bfcl_replay.public_methods(bfcl_replay.api_class(c)())
    )
    rest = [x for f in renderings.values() for x in f.losses if x not in root]
    assert rest == [
        loss("openai-strict", "edit_ticket", "properties.updates", "rendered with strict: false", "strict: false", STRICT_DICT),
        loss(
            "openai-responses-strict",
            "edit_ticket",
            "properties.updates",
            "rendered with strict: false",
            "strict: false",
            STRICT_DICT,
        ),
        loss(
            "gemini",
            "edit_ticket",
            "properties.updates",
            "'type' dropped, description extended, value schema of an open object dropped",
            'type: expected "object", rendered (absent); additionalProperties: expected {"anyOf": [{"type": '
            '"string"}, {"type": "integer"}], "nullable": true}, rendered (absent); description: \'A JSON '
            'object whose values match {"anyOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}.\' appended',
            "an object without listed properties (dict[str, V], dict) is shown without a type and described in "
            "words (Gemini requires OBJECT schemas to list properties); keys and values are checked at call time",
        ),
    ]


def test_lossless_parameters_apply_only_the_documented_rewrites() -> None:
    ours = {
        "type": "object",
        "properties": {
            "start": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "From.", "default": None},
            "hidden": {"type": "boolean", "description": "Show all.", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
        },
        "required": ["tags"],
        "additionalProperties": False,
    }
    assert bfcl_replay.lossless_parameters("anthropic", ours) == ours
    assert bfcl_replay.lossless_parameters("openai-strict", ours) == {
        "type": "object",
        "properties": {
            "start": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "From."},
            "hidden": {"type": ["boolean", "null"], "description": "Show all.", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
        },
        "required": ["start", "hidden", "tags"],
        "additionalProperties": False,
    }
    assert bfcl_replay.lossless_parameters("gemini", {**ours, "required": []}) == {
        "type": "object",
        "properties": {
            "start": {"type": "string", "nullable": True, "description": "From.", "default": None},
            "hidden": {"type": "boolean", "description": "Show all.", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
        },
        "additionalProperties": False,
    }


def test_schema_differences() -> None:
    a = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}}, "required": ["x", "y"]}
    assert bfcl_replay.schema_differences(a, {**a, "required": ["y", "x"]}) == []  # required is a set
    b = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x", "y"], "additionalProperties": False}
    assert bfcl_replay.schema_differences(a, b) == [
        ("properties.x", "type", "integer", "number"),
        ("properties.y", "<property>", {"type": "string"}, bfcl_replay.ABSENT),
        ("<root>", "additionalProperties", bfcl_replay.ABSENT, False),
    ]
    # JSON equality: a default of 1 is not a default of 1.0 or true.
    assert bfcl_replay.schema_differences({"default": 1}, {"default": True}) == [("<root>", "default", 1, True)]


def test_a_changed_rendering_is_reported_as_a_loss(ticket_tools: Any) -> None:
    # Control: the comparison is not vacuous. A rendering that drops a parameter's description,
    # renames the tool or loses its strict flag is a loss that lint does not know about.
    tool = ticket_tools.get("close_ticket")
    rendering = bfcl_replay.render(tool, "anthropic")
    assert bfcl_replay.tool_losses("anthropic", tool, rendering, {}) == []
    del rendering["input_schema"]["properties"]["ticket_id"]["description"]
    rendering["name"] = "close"
    assert bfcl_replay.tool_losses("anthropic", tool, rendering, {}) == [
        bfcl_replay.RenderingLoss("anthropic", "close_ticket", "<tool>", "name changed", "name: expected 'close_ticket', rendered 'close'", None),
        bfcl_replay.RenderingLoss(
            "anthropic",
            "close_ticket",
            "properties.ticket_id",
            "'description' dropped",
            'description: expected "ID of the ticket to be closed.", rendered (absent)',
            None,
        ),
    ]
    strict = bfcl_replay.render(tool, "openai-responses-strict")
    assert bfcl_replay.tool_losses("openai-responses-strict", tool, strict, {}) == []
    strict["strict"] = False
    assert bfcl_replay.tool_losses("openai-responses-strict", tool, strict, {}) == [
        bfcl_replay.RenderingLoss(
            "openai-responses-strict", "close_ticket", "<root>", "rendered with strict: false", "strict: false", None
        ),
    ]


def test_strict_arguments_send_null_for_what_a_call_leaves_out(ticket_tools: Any) -> None:
    tickets = ticket_tools.get("get_user_tickets")
    sent = bfcl_replay.strict_arguments(tickets, {})
    assert sent == {"status": None}
    assert bfcl_replay.from_strict_arguments(tickets, sent) == {"status": None}  # Optional: null is its value
    # edit_ticket is rendered with strict: false (an open dict), so a model sends only what it means.
    edit = ticket_tools.get("edit_ticket")
    assert bfcl_replay.strict_arguments(edit, {"ticket_id": 1, "updates": {}}) == {"ticket_id": 1, "updates": {}}
    fs, _ = bfcl_replay.build_registry(bfcl_replay.api_class("GorillaFileSystem")())
    ls = fs.get("ls")
    assert bfcl_replay.strict_arguments(ls, {}) == {"a": None}
    assert bfcl_replay.from_strict_arguments(ls, {"a": None}) == {}  # not nullable: the default applies


def test_strict_replay_sends_nulls_in_53_calls() -> None:
    # The openai-strict replay differs from the JSON one: 53 of the 1142 ground-truth calls leave
    # out an optional argument, which a strict-mode model sends as null.
    registries = {}
    for class_name in bfcl_replay.CLASS_NAMES:
        instance = bfcl_replay.api_class(class_name)()
        registries[class_name] = (bfcl_replay.build_registry(instance)[0], dict(bfcl_replay.public_methods(instance)))
    with_nulls = total = 0
    for entry, turns in bfcl_replay.load_entries():
        methods = {n: m for c in entry["involved_classes"] for n, m in registries[c][1].items()}
        tools = {n: registries[c][0] for c in entry["involved_classes"] for n in registries[c][1]}
        for source in (s for turn in turns for s in turn):
            name, kwargs = bfcl_replay.parse_call(source, methods)
            total += 1
            with_nulls += bfcl_replay.strict_arguments(tools[name].get(name), kwargs) != kwargs
    assert (total, with_nulls) == (1142, 53)
