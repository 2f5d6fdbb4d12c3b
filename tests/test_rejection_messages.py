"""The model-facing text of rejected calls (SPEC §4, §7): whole messages and error lists, byte for
byte, for the shapes the core builds on its fast paths (a top-level argument, a nested path, a
key that is not an identifier, arguments sent out of signature order, long and non-ASCII values,
several JSON types, a name that is not valid Unicode)."""

from __future__ import annotations

from typing import Any

from agentkit_tools import FunctionTool, ToolRegistry, ToolSchema, dispatch, tool

import bench_tool


search_docs = tool(bench_tool.search_docs, read_only=True)


SPACED = FunctionTool(
    name="spaced",
    fn=lambda args, ctx: "ok",
    description="Take oddly named arguments, to probe how their paths are written.",
    side_effecting=False,
    schema=ToolSchema(
        name="spaced",
        description="Take oddly named arguments, to probe how their paths are written.",
        parameters={
            "type": "object",
            "properties": {
                "two words": {"type": "integer"},
                "n": {"type": ["integer", "null"]},
                "pick": {"enum": [1, "a", None]},
                "ids": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
            },
            "additionalProperties": False,
        },
    ),
)

REG = ToolRegistry([search_docs, SPACED])
ACCEPTED = "['query', 'scope', 'tags', 'exact', 'limit', 'min_score']"
TAIL = (
    f". Accepted arguments: {ACCEPTED}. Re-read the input schema and call 'search_docs' again with corrected arguments."
)


def rejection(args: Any, name: str = "search_docs") -> dict[str, Any]:
    env = dispatch({"id": "c1", "name": name, "input": args}, REG)
    assert env["ok"] is False, env
    return env["error"]  # type: ignore[no-any-return]


def test_the_benchmark_call_gets_the_whole_envelope() -> None:
    err = rejection({"query": "rate limits", "scope": "everything", "tags": ["api"], "exact": "maybe"})
    assert err == {
        "code": "invalid_arguments",
        "message": "tool 'search_docs' call rejected: invalid argument(s): scope: must be one of "
        '["all","code","issues","docs"], got string "everything"; exact: expected boolean, got string "maybe"'
        + TAIL,
        "errors": [
            {"path": "scope", "reason": 'must be one of ["all","code","issues","docs"], got string "everything"'},
            {"path": "exact", "reason": 'expected boolean, got string "maybe"'},
        ],
        "schema": search_docs.schema.parameters,
    }


def test_problems_are_listed_in_signature_order_whatever_order_they_were_sent_in() -> None:
    err = rejection({"exact": "maybe", "limit": "ten", "tags": "api", "scope": "everything", "query": 1})
    assert err["errors"] == [
        {"path": "query", "reason": "expected string, got integer 1"},
        {"path": "scope", "reason": 'must be one of ["all","code","issues","docs"], got string "everything"'},
        {"path": "tags", "reason": 'expected array, got string "api"'},
        {"path": "exact", "reason": 'expected boolean, got string "maybe"'},
        {"path": "limit", "reason": 'expected integer, got string "ten"'},
    ]


def test_every_kind_of_problem_in_one_message() -> None:
    err = rejection({"zeta": 1, "scope": "docs", "tags": ["a", 2], "exact": True, "min_score": "high", "alpha": []})
    assert err["message"] == (
        "tool 'search_docs' call rejected: unexpected argument(s) ['zeta', 'alpha']; missing required "
        "argument(s) ['query']; invalid argument(s): tags[1]: expected string, got integer 2; min_score: "
        'expected number or null, got string "high"' + TAIL
    )
    assert err["errors"] == [
        {"path": "zeta", "reason": "unexpected argument: this tool does not take it"},
        {"path": "alpha", "reason": "unexpected argument: this tool does not take it"},
        {"path": "query", "reason": "missing required argument"},
        {"path": "tags[1]", "reason": "expected string, got integer 2"},
        {"path": "min_score", "reason": 'expected number or null, got string "high"'},
    ]


def test_long_values_are_cut_at_sixty_characters_not_bytes() -> None:
    ascii_text = "x" * 100
    accented = "é" * 100
    err = rejection({"query": "q", "scope": ascii_text, "tags": [], "exact": accented})
    assert err["errors"] == [
        {"path": "scope", "reason": 'must be one of ["all","code","issues","docs"], got string "' + "x" * 56 + "..."},
        {"path": "exact", "reason": 'expected boolean, got string "' + "é" * 56 + "..."},
    ]
    # 59 characters of JSON text (57 between the quotes) pass whole, whatever their byte length.
    err = rejection({"query": "q", "scope": "docs", "tags": [], "exact": "é" * 58})
    assert err["errors"] == [{"path": "exact", "reason": 'expected boolean, got string "' + "é" * 58 + '"'}]


def test_values_of_every_json_type_are_named() -> None:
    err = rejection({"query": None, "scope": 3.5, "tags": {"a": 1}, "exact": [True], "limit": 9.5})
    assert [e["reason"] for e in err["errors"]] == [
        "expected string, got null",
        "expected string, got number 3.5",
        'must be one of ["all","code","issues","docs"], got number 3.5',
        "expected array, got an object",
        "expected boolean, got an array",
        "expected integer, got number 9.5",
    ]


def test_keys_that_are_not_identifiers_and_several_types() -> None:
    err = rejection({"two words": "1", "n": "x", "pick": 2, "ids": [{"id": 7}]}, name="spaced")
    assert err["message"] == (
        "tool 'spaced' call rejected: invalid argument(s): [\"two words\"]: expected integer, got string \"1\"; "
        'n: expected null or integer, got string "x"; pick: must be one of [1,"a",null], got integer 2; '
        "ids[0].id: expected string, got integer 7. Accepted arguments: ['two words', 'n', 'pick', 'ids']. "
        "Re-read the input schema and call 'spaced' again with corrected arguments."
    )
    assert err["errors"] == [
        {"path": '["two words"]', "reason": 'expected integer, got string "1"'},
        {"path": "n", "reason": 'expected null or integer, got string "x"'},
        {"path": "pick", "reason": 'must be one of [1,"a",null], got integer 2'},
        {"path": "ids[0].id", "reason": "expected string, got integer 7"},
    ]


def test_a_name_that_is_not_valid_unicode_is_an_invalid_call() -> None:
    assert dispatch({"name": "search\ud800", "input": {}}, REG) == {"ok": False, "error": {
        "code": "invalid_call",
        "message": "the tool call's name must be a string, got str. Send a tool call with a name and its arguments.",
    }}


def test_the_openai_call_shapes_reject_alike() -> None:
    args = '{"query": "q", "scope": "all", "tags": [], "exact": "no"}'
    expected = rejection(args)
    chat = dispatch({"id": "c1", "function": {"name": "search_docs", "arguments": args}}, REG)
    responses = dispatch({"call_id": "c1", "name": "search_docs", "arguments": args}, REG)
    assert chat == responses == {"ok": False, "error": expected}
    assert expected["errors"] == [{"path": "exact", "reason": 'expected boolean, got string "no"'}]
