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


@pytest.fixture(scope="module", params=["json", "mapping"])
def outcomes(request: pytest.FixtureRequest) -> list[bfcl_replay.Outcome]:
    # Arguments as the JSON text a provider returns, and as an already-parsed mapping.
    return bfcl_replay.replay_all(request.param)


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
            "precision=True for the hint int (SPEC §4: a boolean is not a number) "
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
