"""Hostile argument mappings: a stop raised while the arguments are read propagates (it is no
invalid argument), and the body gets exactly the arguments the validator read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from agentkit_tools import Invoker, ToolContext, ToolRegistry, _core, dispatch, middleware as mw, tool

seen: list[Any] = []


@tool(read_only=True)
def probe(a: int, n: dict[str, int] | None = None, l: list[int] | None = None) -> int:
    """Record the arguments this tool was called with, for the hostile mapping tests.

    Args:
        a: An integer.
        n: Integers by name.
        l: Integers.
    """
    seen.append((a, n, l))
    return 0


def raising(exc: BaseException, kind: str) -> Any:
    """Arguments whose reading raises `exc` (where `kind` says)."""

    def boom(*_: Any) -> Any:
        raise exc

    if kind == "mapping":
        return type("Raises", (dict,), {"keys": boom, "values": boom, "items": boom, "__iter__": boom})(a=1)
    if kind == "nested-mapping":
        return {"a": 1, "n": type("Raises", (dict,), {"keys": boom, "values": boom, "__iter__": boom})(x=1)}
    if kind == "nested-list":
        return {"a": 1, "l": type("Raises", (list,), {"__getitem__": boom, "__iter__": boom})([1])}
    if kind == "length":
        return type("Raises", (dict,), {"__len__": boom})(a=1)
    assert kind == "text"  # Python's json reads a text with an integer beyond 64 bits
    return type("Raises", (str,), {"startswith": boom})('{"a": 18446744073709551616}')


def call(args: Any) -> dict[str, Any]:
    return {"id": "c1", "name": "probe", "input": args}


async def run(path: str, args: Any) -> Any:
    registry = ToolRegistry([probe])
    if path == "invoke":
        return await Invoker(registry).invoke(call(args), ToolContext(run_id="r"))
    if path == "invoke-chain":
        chain = [mw.audit(lambda r: None), mw.repeat_guard(), mw.retry(), mw.timeout()]
        return await Invoker(registry, middleware=chain).invoke(call(args), ToolContext(run_id="r"))
    if path == "invoke_many":
        return await Invoker(registry).invoke_many([call({"a": 2}), call(args)], ToolContext(run_id="r"))
    return dispatch(call(args), registry)


KINDS = ["mapping", "nested-mapping", "nested-list", "length", "text"]
PATHS = ["invoke", "invoke-chain", "invoke_many", "dispatch"]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", PATHS)
async def test_a_stop_raised_while_the_arguments_are_read_propagates(stop: type, kind: str, path: str) -> None:
    """It was caught and answered as arguments that are not valid JSON ('(KeyboardInterrupt: )'):
    the request to stop was lost."""
    seen.clear()
    exc = stop()
    with pytest.raises(stop) as got:
        await run(path, raising(exc, kind))
    assert got.value is exc
    assert seen == []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("path", PATHS)
async def test_an_exception_raised_while_the_arguments_are_read_refuses_the_call(kind: str, path: str) -> None:
    seen.clear()
    got = await run(path, raising(RuntimeError("unreadable"), kind))
    env = got[1] if path == "invoke_many" else got
    assert env["ok"] is False
    assert env["error"]["code"] == "invalid_arguments"
    # (Python's json read the text: its exception's own words)
    why = "unreadable" if kind == "text" else "RuntimeError: unreadable"
    assert env["error"]["message"] == (
        f"tool 'probe' call rejected: the arguments are not valid JSON ({why}). Accepted arguments: ['a', 'n', 'l']. "
        "Re-read the input schema and call 'probe' again with corrected arguments."
    )
    assert seen == ([(2, None, None)] if path == "invoke_many" else [])


class StorageLies(dict):  # type: ignore[type-arg]
    """Its storage holds one thing; iterating it and its items another."""

    def __iter__(self) -> Any:
        return iter(["a", "x"])

    def __getitem__(self, k: Any) -> Any:
        return "evil"


class ValuesLie(dict):  # type: ignore[type-arg]
    """Its values() answer what its storage does not hold."""

    def values(self) -> Any:
        return [1 for _ in dict.keys(self)]


class ItemsLie(list):  # type: ignore[type-arg]
    def __getitem__(self, i: Any) -> Any:
        return 1


@pytest.mark.parametrize(
    "args,body_gets",
    [
        (StorageLies({"a": 2**64}), (2**64, None, None)),
        ({"a": 2**64, "n": ValuesLie({"x": "evil"})}, (2**64, {"x": 1}, None)),
        ({"a": 2**64, "l": ItemsLie(["evil"])}, (2**64, None, [1])),
    ],
    ids=["top-level", "nested-mapping", "nested-list"],
)
@pytest.mark.parametrize("path", ["invoke", "dispatch"])
async def test_the_body_gets_the_arguments_the_validator_read(args: Any, body_gets: Any, path: str) -> None:
    """With an integer beyond 64 bits the body's arguments were made from the caller's mapping
    read a second time, another way than the validator read it: the body of `a: int` got the
    text 'evil' (its `__getitem__`), a `dict[str, int]` or `list[int]` what the validator never
    saw (their storage)."""
    seen.clear()
    env = await run(path, args)
    assert (env["ok"], env["value"]) == (True, 0)
    [(a, n, l)] = seen
    assert (a, None if n is None else dict(n), None if l is None else list(l)) == body_gets
    assert type(a) is int


class Unprintable:
    """A value that is not JSON and whose `repr` raises `exc`."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __repr__(self) -> str:
        raise self.exc


class Unreadable(list):  # type: ignore[type-arg]
    """A list whose iteration raises `exc` (its `repr` reads its storage)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__([1])
        self.exc = exc

    def __iter__(self) -> Iterator[Any]:
        raise self.exc


def rejected(exc: BaseException, kind: str) -> dict[str, Any]:
    """A call refused at admission whose raw arguments raise `exc` when they are printed or read
    for its audit text (where `kind` says)."""
    if kind == "unknown-tool":
        return {"id": "c1", "name": "nope", "input": Unprintable(exc)}
    if kind == "unknown-tool-list":
        return {"id": "c1", "name": "nope", "input": Unreadable(exc)}
    assert kind == "not-json"
    return call({"a": Unprintable(exc)})


async def run_rejected(path: str, c: dict[str, Any], records: list[Any]) -> Any:
    registry = ToolRegistry([probe])
    if path == "invoke":  # the default chain: the repeat guard counts a call that names a tool
        return await Invoker(registry).invoke(c, ToolContext(run_id="r"))
    if path == "invoke-audit":
        return await Invoker(registry, middleware=[mw.audit(records.append)]).invoke(c, ToolContext(run_id="r"))
    assert path == "invoke_many"
    return (await Invoker(registry).invoke_many([call({"a": 2}), c], ToolContext(run_id="r")))[1]


REJECTED_KINDS = ["unknown-tool", "unknown-tool-list", "not-json"]
REJECTED_PATHS = ["invoke", "invoke-audit", "invoke_many"]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("kind", REJECTED_KINDS)
@pytest.mark.parametrize("path", REJECTED_PATHS)
async def test_a_stop_raised_while_a_rejected_calls_arguments_are_printed_propagates(
    stop: type, kind: str, path: str
) -> None:
    """The audit text of a refused call (its arguments' canonical text, else their `repr`) took
    any error of printing them as arguments that cannot be printed, a stop included: the request
    to stop was lost."""
    exc = stop()
    records: list[Any] = []
    with pytest.raises(stop) as got:
        await run_rejected(path, rejected(exc, kind), records)
    assert got.value is exc
    assert records == []


@pytest.mark.parametrize("kind", REJECTED_KINDS)
@pytest.mark.parametrize("path", REJECTED_PATHS)
async def test_a_rejected_call_whose_arguments_cannot_be_printed_is_answered_and_audited(kind: str, path: str) -> None:
    records: list[Any] = []
    c = rejected(RuntimeError("no repr"), kind)
    env = await run_rejected(path, c, records)
    assert env["ok"] is False
    assert env["error"]["code"] == ("invalid_arguments" if kind == "not-json" else "unknown_tool")
    if path == "invoke-audit":
        # (a list that cannot be read as JSON: its `repr`)
        text = {
            "unknown-tool": "<unreadable Unprintable>",
            "unknown-tool-list": "[1]",
            "not-json": "<unreadable dict>",
        }[kind]
        [record] = records
        assert record["args_hash"] == _core.args_hash(text)


def test_canonical_args_raises_a_stop_and_names_the_type_of_what_cannot_be_printed() -> None:
    for stop in (KeyboardInterrupt, SystemExit):
        exc = stop()
        with pytest.raises(stop) as got:
            _core.canonical_args(Unprintable(exc))
        assert got.value is exc
        with pytest.raises(stop):
            _core.canonical_args(Unreadable(stop()))
    text = "<unreadable Unprintable>"
    assert _core.canonical_args(Unprintable(RuntimeError())) == (text, _core.args_hash(text))
