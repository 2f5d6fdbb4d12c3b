"""The one-walk admission of a plain call (a flat schema, an exact dict of plain values) against
the full check: for any arguments, the call admitted in one walk is the call the full check makes
of the same arguments (a mapping that is not an exact dict, or JSON text): the same envelope, the
same values of the same types reaching the body, and the same key for the repeat guard."""

from __future__ import annotations

import asyncio
import enum
import json
import math
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings, strategies as st

from agentkit_tools import Invoker, ToolRegistry, tool
from agentkit_tools import middleware as mw
from agentkit_tools.frozen import FrozenDict, FrozenList

seen: list[Any] = []


def probe(
    a: int,
    b: float = 0.5,
    c: str = "",
    d: bool = False,
    e: Literal["x", "y"] = "x",
    f: int | float = 0,
    g: float | None = None,
    h: list[int] | None = None,
    i: list[int | float] | None = None,
    j: list[str] | None = None,
    k: int | None = None,
    m: list[float] | None = None,
) -> int:
    """Record the arguments this tool was called with, for the agreement tests of this module.

    Args:
        a: An integer.
        b: A number.
        c: A text.
        d: A flag.
        e: One of two names.
        f: An integer or a number.
        g: A number or nothing.
        h: Integers.
        i: Integers or numbers.
        j: Texts.
        k: An integer or nothing.
        m: Numbers.
    """
    seen.append(shape(dict(a=a, b=b, c=c, d=d, e=e, f=f, g=g, h=h, i=i, j=j, k=k, m=m)))
    return 0


PROBE = tool(probe, read_only=True)
# The same schema, its body given the arguments whole (a FrozenDict: sealed).
WHOLE = tool(probe, name="whole", read_only=True)


async def _whole(args: Any, ctx: Any = None) -> int:
    seen.append(shape(args))
    return 0


WHOLE.fn = _whole  # type: ignore[attr-defined]
NAMES = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"]


def shape(v: Any) -> Any:
    """`v` with the type of every value in it (so `2` and `2.0`, `True` and `1`, a list and a
    FrozenList, `0.0` and `-0.0` differ)."""
    if isinstance(v, (dict, FrozenDict)):
        return (type(v).__name__, sorted(((repr(k), shape(x)) for k, x in v.items()), key=repr))
    if isinstance(v, (list, tuple, FrozenList)):
        return (type(v).__name__, [shape(x) for x in v])
    if isinstance(v, float):
        return (type(v).__name__, "nan" if math.isnan(v) else repr(v))
    return (type(v).__name__, repr(v))


def envelope(env: dict[str, Any]) -> Any:
    return shape({k: v for k, v in env.items() if k != "elapsed_ms"})


class Sub(dict):  # type: ignore[type-arg]
    """Not an exact dict: the full check reads it."""


class Num(enum.IntEnum):
    ONE = 1


class MyInt(int):
    pass


class MyStr(str):
    pass


class MyFloat(float):
    pass


def run_all(calls: list[Any], name: str = "probe") -> list[Any]:
    """The calls of tool `name`, in order, on a fresh Invoker with a repeat guard: what each
    answered and what its body got."""
    inv = Invoker(ToolRegistry([PROBE, WHOLE]), middleware=[mw.repeat_guard(limit=2)])

    async def go() -> list[Any]:
        out = []
        for args in calls:
            seen.clear()
            env = await inv.invoke({"id": "c1", "name": name, "input": args})
            out.append((envelope(env), list(seen)))
        return out

    return asyncio.run(go())


ints = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 2.0, -3.0, 0.5, 2.0**53, 2.0**63, -(2.0**63), 2.0**64, 1e300]),
)
texts = st.one_of(
    st.sampled_from(["x", "y", "z", "", "é", "\U0001f600", "\ud800"]),
    st.text(st.characters(exclude_categories=()), max_size=4),
)
odd = st.sampled_from([Num.ONE, MyInt(1), MyStr("x"), MyFloat(1.0), b"x", bytearray(b"x")])
atoms = st.one_of(st.none(), st.booleans(), ints, floats, texts, odd)
values = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from(NAMES + ["zz"]), inner, max_size=2),
    ),
    max_leaves=6,
)
# Values of the kinds the schema names, more often than not.
likely = st.one_of(
    atoms,
    st.sampled_from([2.0, 1.0, 0.0, -0.0, 2.5, 1, 0, True, False, 2**64, "x"]),
    st.lists(st.one_of(ints, floats), max_size=3),
    st.lists(texts, max_size=3),
    st.lists(st.sampled_from([1, 1.0, True, 2, 2.0, -0.0, 0]), max_size=3),
)
keys = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(NAMES),
    st.sampled_from(["zz", "A", "a ", "\ud800"]),
    st.sampled_from([1, 2.0, None, b"a", MyStr("a"), MyStr("b")]),
)
# Values near what each argument takes (mostly accepted, at the edges of each kind).
number = st.one_of(ints, floats, st.sampled_from([2.0, -0.0, 2.5, True, Num.ONE, MyInt(3), MyFloat(2.0)]))
numbers = st.lists(number, max_size=3)
near = {
    "a": number,
    "b": number,
    "c": st.one_of(texts, st.sampled_from([MyStr("x"), b"x", 1])),
    "d": st.one_of(st.booleans(), st.sampled_from([0, 1, 1.0, "true"])),
    "e": st.one_of(st.sampled_from(["x", "y", "z", MyStr("x"), "X"]), texts),
    "f": number,
    "g": st.one_of(number, st.none()),
    "h": st.one_of(numbers, numbers.map(tuple), st.none()),
    "i": st.one_of(numbers, st.none()),
    "j": st.one_of(st.lists(texts, max_size=3), st.none(), st.lists(st.sampled_from(["x", 1, None]), max_size=2)),
    "k": st.one_of(number, st.none()),
    "m": st.one_of(numbers, st.none()),
}
arguments = st.one_of(
    st.fixed_dictionaries({"a": st.integers(-5, 5)}, optional={n: v for n, v in near.items() if n != "a"}),
    st.fixed_dictionaries({}, optional=near),
    st.fixed_dictionaries({"a": st.one_of(ints, atoms)}, optional={n: st.one_of(likely, values) for n in NAMES[1:]}),
    st.dictionaries(keys, st.one_of(likely, values), max_size=6),
)

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def variant(args: dict[Any, Any], how: str) -> dict[Any, Any]:
    """`args` reordered, or with one value swapped for an equal one of another type."""
    if how == "reorder":
        return dict(reversed(list(args.items())))
    swap = {"int-float": {1: 1.0, 0: 0.0, 2: 2.0}, "float-int": {1.0: 1, 0.0: 0, 2.0: 2}, "int-bool": {1: True, 0: False}}
    table = swap[how]
    out = dict(args)
    for k, v in args.items():
        if type(v) in (int, float) and v in table and not isinstance(v, bool):
            out[k] = table[v]
            break
        if type(v) is list:
            for n, x in enumerate(v):
                if type(x) in (int, float) and x in table:
                    out[k] = v[:n] + [table[x]] + v[n + 1 :]
                    break
    return out


@SETTINGS
@given(arguments, st.sampled_from(["reorder", "int-float", "float-int", "int-bool"]), st.sampled_from(["probe", "whole"]))
def test_the_one_walk_and_the_full_check_make_the_same_call(args: dict[Any, Any], how: str, name: str) -> None:
    other = variant(args, how)
    fast = run_all([args, other], name)
    full = run_all([Sub(args), Sub(other)], name)
    assert fast == full


def plain(v: Any) -> bool:
    """Made only of the exact types JSON text reads back as the same values."""
    if type(v) is dict:
        return all(type(k) is str and plain(k) and plain(x) for k, x in v.items())
    if type(v) is list:
        return all(plain(x) for x in v)
    if type(v) is float:
        # (JSON text of a larger integral float may name another integer than the float holds:
        # refused at an integer place, by design)
        return math.isfinite(v) and abs(v) < 2.0**53
    if type(v) is str:
        return not any("\ud800" <= ch <= "\udfff" for ch in v)
    return v is None or type(v) in (bool, int)


@SETTINGS
@given(arguments)
def test_the_one_walk_and_the_json_text_make_the_same_call(args: dict[Any, Any]) -> None:
    if not plain(args):
        return
    text = json.dumps(args)
    assert run_all([args, args, text]) == run_all([text, text, args])


def test_an_integral_float_for_an_integer_or_a_number_is_an_integer_on_both_paths() -> None:
    # `int | float`: the full check makes an integral float the integer (its first branch), so
    # 2.0 and 2 are the same call, the body gets the int.
    for make in (dict, Sub):
        [(first, got), (second, _)] = run_all([make({"a": 1, "f": 2.0}), make({"a": 1, "f": 2})])
        assert first == shape({"ok": True, "value": 0})
        assert dict(got[0][1])["'f'"] == ("int", "2")
        assert dict(dict(second[1])["'error'"][1])["'code'"] == ("str", "'repeated_call'")
        # a list of `int | float`; a non-integral float stays a float
        [(_, got), (_, more)] = run_all([make({"a": 1, "i": [2.0, 2.5]}), make({"a": 1, "f": 2.5})])
        assert dict(got[0][1])["'i'"] == ("FrozenList", [("int", "2"), ("float", "2.5")])
        assert dict(more[0][1])["'f'"] == ("float", "2.5")
