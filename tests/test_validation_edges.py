"""Validation edges: what the schema advertises is exactly what reaches the body, on every path
(``dispatch``, the ``Invoker``, ``FunctionTool.run``), for values at the limits of the formats and
of 64-bit integers, for absent arguments in every form, and for hostile numbers of names."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
from typing import Any, Literal

import pytest

from agentkit_tools import FunctionTool, Invoker, ToolArgumentError, ToolRegistry, dispatch, tool

SEEN: dict[str, Any] = {}


@tool(side_effecting=False)
def numbers(
    n: int = 0,
    ns: list[int] = [],  # noqa: B006 - never mutated
    pick: Literal[1, "one", 2.5] = "one",
    pair: tuple[int, str] = (0, ""),
) -> str:
    """Record the numbers it was given, for the validation tests."""
    SEEN.clear()
    SEEN.update(n=n, ns=ns, pick=pick, pair=pair)
    return "ok"


@tool(side_effecting=False)
def formats(
    when: dt.datetime | None = None,
    day: dt.date | None = None,
    at: dt.time | None = None,
    span: dt.timedelta | None = None,
    blob: bytes | None = None,
) -> str:
    """Record the formatted values it was given, for the tests."""
    SEEN.clear()
    SEEN.update(when=when, day=day, at=at, span=span, blob=blob)
    return "ok"


REG = ToolRegistry([numbers, formats])
INVOKER = Invoker(REG, middleware=[])

BIG = 25227143063332189585438


def via_dispatch(name: str, args: Any) -> dict[str, Any]:
    return dispatch({"id": "c", "name": name, "input": args}, REG)


def via_invoker(name: str, args: Any) -> dict[str, Any]:
    return asyncio.run(INVOKER.invoke({"id": "c", "name": name, "input": args}))


def via_run(name: str, args: Any) -> dict[str, Any]:
    try:
        return {"ok": True, "value": asyncio.run(REG.get(name).run(args))}
    except ToolArgumentError as exc:
        return {"ok": False, "error": {"code": "invalid_arguments", "errors": [{"path": p, "reason": r} for p, r in exc.invalid]}}


PATHS = [via_dispatch, via_invoker, via_run]


# ------------------------------------------------------------------ integers


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("args", [json.dumps({"n": BIG, "ns": [1, BIG, -BIG]}), {"n": BIG, "ns": [1, BIG, -BIG]}])
def test_integers_beyond_64_bits_reach_the_body_exactly(path: Any, args: Any) -> None:
    assert path("numbers", args)["ok"] is True
    assert (SEEN["n"], SEEN["ns"]) == (BIG, [1, BIG, -BIG])
    assert all(type(v) is int for v in (SEEN["n"], *SEEN["ns"]))


@pytest.mark.parametrize("path", PATHS)
def test_a_huge_integer_with_an_injected_key_dropped_stays_exact(path: Any) -> None:
    # 2**200 as text: Python's json reads it; the body gets the same int.
    assert path("numbers", '{"n": %d}' % 2**200)["ok"] is True
    assert SEEN["n"] == 2**200


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("text", "value"), [("1e22", 10**22), ("9.3e18", 9300000000000000000), ("-2.0", -2)])
def test_integral_floats_reach_an_int_parameter_as_ints(path: Any, text: str, value: int) -> None:
    assert path("numbers", '{"n": %s, "ns": [%s]}' % (text, text))["ok"] is True
    assert (SEEN["n"], SEEN["ns"]) == (value, [value])
    assert type(SEEN["n"]) is int and type(SEEN["ns"][0]) is int


@pytest.mark.parametrize("path", PATHS)
def test_a_literal_gets_the_listed_integer_for_an_integral_float(path: Any) -> None:
    assert path("numbers", '{"pick": 1.0}')["ok"] is True
    assert (SEEN["pick"], type(SEEN["pick"])) == (1, int)
    assert path("numbers", '{"pick": 2.5}')["ok"] is True
    assert SEEN["pick"] == 2.5


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("container", [tuple, set, frozenset])
def test_a_tuple_or_set_for_a_list_parameter_reaches_the_body_as_a_list(path: Any, container: type) -> None:
    assert path("numbers", {"ns": container([3]), "pair": (1, "a")})["ok"] is True
    # A list (the Invoker hands it down deep-frozen: a FrozenList, which is a list).
    assert SEEN["ns"] == [3] and isinstance(SEEN["ns"], list)
    assert SEEN["pair"] == (1, "a")


# ------------------------------------------------------------------ formats: advertised == converted


ACCEPTED = [
    ("when", "2024-05-01t10:00:00z", dt.datetime(2024, 5, 1, 10, tzinfo=dt.timezone.utc)),
    ("when", "2024-05-01T10:00:00.1234567+01:00", dt.datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=1)))),
    ("when", "0001-01-01T00:00:00Z", dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)),
    ("day", "0001-01-01", dt.date(1, 1, 1)),
    ("at", "23:59:59.999999z", dt.time(23, 59, 59, 999999, tzinfo=dt.timezone.utc)),
    ("span", "P2W", dt.timedelta(weeks=2)),
    ("span", "P99999999DT999999999H", dt.timedelta(days=99999999, hours=999999999)),
    ("span", "PT90S", dt.timedelta(seconds=90)),
    ("blob", "YWJj", b"abc"),
    ("blob", "YQ==", b"a"),
    ("blob", "", b""),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("arg", "text", "value"), ACCEPTED)
def test_every_advertised_value_converts(path: Any, arg: str, text: str, value: Any) -> None:
    env = path("formats", {arg: text})
    assert (env["ok"], env.get("value")) == (True, "ok"), env
    assert SEEN[arg] == value


REFUSED = [
    ("when", "2016-12-31T23:59:60Z", 'expected a date-time with an offset (RFC 3339, e.g. "2024-05-01T12:00:00Z"), year 0001 or later, seconds 00-59, got string "2016-12-31T23:59:60Z"'),
    ("when", "0000-01-01T00:00:00Z", 'expected a date-time with an offset (RFC 3339, e.g. "2024-05-01T12:00:00Z"), year 0001 or later, seconds 00-59, got string "0000-01-01T00:00:00Z"'),
    ("day", "0000-12-31", 'expected a date YYYY-MM-DD, year 0001 or later, got string "0000-12-31"'),
    ("at", "23:59:60", 'expected a time of day HH:MM[:SS[.ffffff]] with an optional offset such as Z or +01:00 (e.g. "09:30" or "09:30:00Z"), got string "23:59:60"'),
    ("span", "P1M", 'expected an ISO 8601 duration in whole weeks, or days/hours/minutes/seconds (e.g. "P1DT2H", "PT90S"; no years or months), got string "P1M"'),
    ("span", "P10000000000D", 'expected an ISO 8601 duration in whole weeks, or days/hours/minutes/seconds (e.g. "P1DT2H", "PT90S"; no years or months), got string "P10000000000D"'),
    ("span", "PT", 'expected an ISO 8601 duration in whole weeks, or days/hours/minutes/seconds (e.g. "P1DT2H", "PT90S"; no years or months), got string "PT"'),
    ("blob", "abc", "expected standard base64 (groups of 4 characters, padded with '='), got string \"abc\""),
    ("blob", "YQ=", "expected standard base64 (groups of 4 characters, padded with '='), got string \"YQ=\""),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("arg", "text", "reason"), REFUSED)
def test_what_would_not_convert_is_refused_by_the_schema(path: Any, arg: str, text: str, reason: str) -> None:
    env = path("formats", {arg: text})
    assert env["ok"] is False
    assert env["error"]["errors"] == [{"path": arg, "reason": reason}]


def test_no_internal_message_leaks_for_a_huge_duration() -> None:
    env = via_dispatch("formats", {"span": "P" + "9" * 40 + "D"})
    assert "too large" not in json.dumps(env) and "C int" not in json.dumps(env)
    assert env["error"]["code"] == "invalid_arguments"


# ------------------------------------------------------------------ absent arguments


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("empty", [None, "", "   ", "null", "{}", {}])
def test_absent_arguments_in_any_form_are_the_empty_call(path: Any, empty: Any) -> None:
    assert path("numbers", empty)["ok"] is True
    assert SEEN == {"n": 0, "ns": [], "pick": "one", "pair": (0, "")}


def test_a_call_without_an_input_key_is_the_empty_call() -> None:
    for call in ({"id": "c", "name": "numbers"}, {"id": "c", "function": {"name": "numbers"}}):
        SEEN.clear()
        assert dispatch(call, REG)["ok"] is True
        assert SEEN == {"n": 0, "ns": [], "pick": "one", "pair": (0, "")}


# ------------------------------------------------------------------ hostile numbers of names


def test_forty_thousand_unknown_names_are_reported_briefly() -> None:
    args = {f"k{i}": i for i in range(40_000)}
    for env in (via_dispatch("numbers", args), via_dispatch("numbers", json.dumps(args)), via_invoker("numbers", args)):
        err = env["error"]
        names = ", ".join(f"'k{i}'" for i in range(20))
        assert err["message"] == (
            f"tool 'numbers' call rejected: unexpected argument(s) [{names}, ... and 39980 more]. Accepted "
            "arguments: ['n', 'ns', 'pick', 'pair']. Re-read the input schema and call 'numbers' again with "
            "corrected arguments."
        )
        assert len(err["errors"]) == 21
        assert err["errors"][-1] == {
            "path": "<arguments>",
            "reason": "and 39980 more unexpected argument(s): send only the accepted arguments",
        }
    with pytest.raises(ToolArgumentError) as exc:
        asyncio.run(numbers.run(args))
    assert len(exc.value.unexpected) == 40_000
    assert str(exc.value).endswith("... and 39980 more]. Accepted arguments: ['n', 'ns', 'pick', 'pair']")


def test_a_long_unknown_name_is_echoed_cut() -> None:
    name = "x" * 100_000
    err = via_dispatch("numbers", {name: 1})["error"]
    assert err["message"].startswith(f"tool 'numbers' call rejected: unexpected argument(s) ['{'x' * 64}...']. ")
    assert err["errors"] == [{"path": "x" * 64 + "...", "reason": "unexpected argument: this tool does not take it"}]


# ------------------------------------------------------------------ number literals at the JSON boundary


def rejected(env: dict[str, Any]) -> list[tuple[str, str]]:
    assert env["ok"] is False and env["error"]["code"] == "invalid_arguments", env
    return [(e["path"], e["reason"]) for e in env["error"]["errors"]]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ('{"n": 1e-400}', "n", "expected integer, got number 1e-400"),
        ('{"ns": [1, 2.000000000000000000001]}', "ns[1]", "expected integer, got number 2.000000000000000000001"),
        ('{"pair": [5e-324, "x"]}', "pair[0]", "expected integer, got number 5e-324"),
        (
            '{"n": 9007199254740993.0}',
            "n",
            "9007199254740993.0 has more digits than a JSON float holds exactly (it would arrive as 9007199254740992); "
            "send the whole number as plain digits, without a fraction or exponent",
        ),
        (
            '{"n": 1e300}',
            "n",
            "1e300 has more digits than a JSON float holds exactly (it would arrive as 10000000000000000525... (301 "
            "digits)); send the whole number as plain digits, without a fraction or exponent",
        ),
        (
            '{"n": 1e30}',
            "n",
            "1e30 has more digits than a JSON float holds exactly (it would arrive as 1000000000000000019884624838656); "
            "send the whole number as plain digits, without a fraction or exponent",
        ),
    ],
)
def test_a_number_literal_reaches_an_int_only_when_it_is_exactly_that_integer(path: Any, text: str, where: str, reason: str) -> None:
    SEEN.clear()
    assert rejected(path("numbers", text)) == [(where, reason)]
    assert SEEN == {}


@pytest.mark.parametrize("path", PATHS)
def test_numbers_too_large_to_read_are_named_not_called_invalid_json(path: Any) -> None:
    digits = "9" * 5000
    assert rejected(path("numbers", '{"n": %s}' % digits)) == [
        ("n", "99999999999999999999... (5000 characters) is too long: 5000 digits, at most 4300; send a smaller number")
    ]
    assert rejected(path("numbers", '{"ns": [%s.0]}' % ("9" * 401))) == [
        (
            "ns[0]",
            "99999999999999999999... (403 characters) is beyond the largest JSON number this tool reads (about "
            "1.8e308); a whole number may be sent as plain digits (at most 4300), without a fraction or exponent",
        )
    ]
    assert rejected(path("numbers", '{"n": -1e400}')) == [
        ("n", "-1e400 is beyond the largest JSON number this tool reads (about 1.8e308); a whole number may be sent "
         "as plain digits (at most 4300), without a fraction or exponent")
    ]
    # The advice holds: the same whole number as plain digits arrives exactly.
    assert path("numbers", '{"n": %s}' % ("9" * 401))["ok"] is True
    assert SEEN["n"] == int("9" * 401)


@pytest.mark.parametrize("path", PATHS)
def test_exact_integral_literals_still_arrive_as_ints(path: Any) -> None:
    assert path("numbers", '{"n": 1.5e1, "ns": [1e2, -0.0, 9007199254740992.0], "pick": 1.0}')["ok"] is True
    assert SEEN["n"] == 15 and SEEN["ns"] == [100, 0, 9007199254740992] and SEEN["pick"] == 1
    assert all(type(v) is int for v in (SEEN["n"], *SEEN["ns"], SEEN["pick"]))
