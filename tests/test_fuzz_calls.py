"""A hostile-call corpus, generated with hypothesis, thrown at ``dispatch`` and at
``Invoker.invoke_many`` (default chain): random and hostile call dicts (wrong shapes, non-dicts,
huge keys and names, deep nesting, odd unicode, JSON text good and bad) and tool bodies that
raise every kind of exception or return values that cannot be rendered.

The promise checked: every result is an envelope — a dict with a bool ``ok``; a success has a
``value``; a failure has ``error`` with a ``code`` and a ``message`` that are both ``str`` — and
no exception escapes into the agent loop. Every error message is also checked to be renderable
(``tool_result_text``) and bounded in size.

Fast by default (CI); ``AGENTKIT_FUZZ_EXAMPLES=5000`` (per test) for a long local run.
"""

from __future__ import annotations

import asyncio
import enum
import math
import os
import sys
import uuid
from typing import Any, Literal, Optional

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agentkit_tools import (
    FileTool,
    FrozenDict,
    Invoker,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolTimeoutError,
    dispatch,
    tool,
)
from agentkit_tools.roundtrip import tool_result_text

EXAMPLES = int(os.environ.get("AGENTKIT_FUZZ_EXAMPLES", "120"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="AGENTKIT_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=list(HealthCheck),
    database=None,
)


# ------------------------------------------------------------------ hostile bodies


class Halt(BaseException):
    """A BaseException subclass that is not a request to stop the process."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class BadAttrs(ToolError):
    """A ToolError whose attributes fail to read."""

    @property
    def code(self) -> str:  # type: ignore[override]
        raise RuntimeError("code unreadable")


class Loud:
    def __str__(self) -> str:
        raise ValueError("cannot print")

    __repr__ = __str__


def _cyclic() -> list:
    x: list = []
    x.append(x)
    return x


def _deep(n: int) -> list:
    v: list = []
    for _ in range(n):
        v = [v]
    return v


RAISES = {
    "value_error": lambda: ValueError("bad value"),
    "key_error": lambda: KeyError("k"),
    "type_error": lambda: TypeError("wrong type"),
    "recursion": lambda: RecursionError("too deep"),
    "memory": lambda: MemoryError(),
    "cancelled": lambda: asyncio.CancelledError(),
    "halt": lambda: Halt("halt"),
    "generator_exit": lambda: GeneratorExit(),
    "stop_iteration": lambda: StopIteration(5),
    "stop_async_iteration": lambda: StopAsyncIteration(),
    "timeout_error": lambda: TimeoutError("backend slow"),
    "tool_timeout": lambda: ToolTimeoutError("other", 1.0),
    "connection": lambda: ConnectionError("down"),
    "tool_error": lambda: ToolError("nope; try later", code="rate_limited", retriable=True, wait_s=3),
    "tool_error_odd_code": lambda: ToolError("odd", code="\ud800\x00" * 3, extra=object()),
    "tool_error_huge": lambda: ToolError("x" * 200_000, code="huge"),
    "unprintable": lambda: Unprintable(),
    "bad_attrs": lambda: BadAttrs("attrs"),
    "os_error": lambda: OSError(28, "No space left on device"),
    "unicode": lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    "exception_group": lambda: ExceptionGroup("many", [ValueError("a"), Halt("b")])
    if sys.version_info >= (3, 11)
    else ValueError("a"),
}
RETURNS = {
    "object": lambda: object(),
    "loud": lambda: Loud(),
    "cyclic": _cyclic,
    "deep": lambda: _deep(5000),
    "nan": lambda: {"x": math.nan, "y": math.inf},
    "surrogate": lambda: "\ud800 lone",
    "bytes": lambda: b"\xff\x00",
    "set": lambda: {1, 2, 3},
    "huge": lambda: "y" * 3_000_000,
    "big_int": lambda: 2**200,
    "frozen": lambda: FrozenDict({"a": [1, 2]}),
    "none": lambda: None,
    "coroutine_like": lambda: _Awaitable(),
}
KINDS = sorted(RAISES) + sorted(RETURNS)


class _Awaitable:
    def __await__(self):  # an awaitable that fails when awaited
        raise RuntimeError("broken awaitable")
        yield  # pragma: no cover


def _act(kind: str) -> Any:
    if kind in RAISES:
        raise RAISES[kind]()
    return RETURNS[kind]()


Kind = enum.Enum("Kind", {k: k for k in KINDS}, type=str)  # type: ignore[misc]


@tool(read_only=True, timeout_s=5)
def explode(kind: Kind) -> Any:  # type: ignore[valid-type]
    """Misbehave in the way selected: raise an exception or return an awkward value."""
    return _act(kind.value)


@tool(read_only=True, timeout_s=5)
async def explode_async(kind: Kind) -> Any:  # type: ignore[valid-type]
    """Misbehave asynchronously in the way selected: raise or return an awkward value."""
    await asyncio.sleep(0)
    return _act(kind.value)


@tool(side_effecting=True, timeout_s=5)
def explode_effect(kind: Kind, n: int = 0) -> Any:  # type: ignore[valid-type]
    """Misbehave, as a side-effecting tool (deduplicated and never retried)."""
    return _act(kind.value)


@tool(read_only=True)
def shaped(
    count: int,
    name: str,
    ratio: float = 1.0,
    tags: list[str] = [],  # noqa: B006
    mode: Literal["fast", "slow", 3] = "fast",
    extra: Optional[dict[str, int]] = None,
    pair: tuple[int, str] = (0, ""),
) -> dict:
    """Echo a well-typed set of arguments back to the caller."""
    return {"count": count, "name": name, "ratio": ratio, "tags": list(tags), "mode": mode, "extra": extra, "pair": list(pair)}


@tool(side_effecting=True, requires_approval=True)
def wipe(sku: str) -> str:
    """Erase the stock records of a SKU (needs a human's approval)."""
    return f"{sku} wiped"


REGISTRY = ToolRegistry([explode, explode_async, explode_effect, shaped, wipe, FileTool()])
NAMES = REGISTRY.names()


# ------------------------------------------------------------------ hostile calls

odd_text = st.one_of(
    st.text(max_size=30),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=4),  # lone surrogates
    st.sampled_from(["\x00", "\u202e", "\ufeff", "e\u0301", "🙂" * 50, "\n", " ", "", "null", "{}", "[]", "a" * 5000]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**130), max_value=2**130),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
    st.binary(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(odd_text, inner, max_size=4),
        st.tuples(inner, inner),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=20,
)


class Deep:
    """Arguments nested ``depth`` levels deep, built only when the call is made: hypothesis
    prints a failing example, and printing 5,000 levels would itself overflow the stack."""

    def __init__(self, depth: int, as_dict: bool, leaf: Any) -> None:
        self.depth, self.as_dict, self.leaf = depth, as_dict, leaf

    def __repr__(self) -> str:
        return f"Deep(depth={self.depth}, as_dict={self.as_dict}, leaf={self.leaf!r})"

    def build(self) -> Any:
        v = self.leaf
        for _ in range(self.depth):
            v = {"k": v} if self.as_dict else [v]
        return v


def materialize(call: Any) -> Any:
    """``call`` with any ``Deep`` placeholder (as the arguments) replaced by the nested value."""
    if not isinstance(call, dict):
        return call
    out = dict(call)
    for key in ("input", "arguments"):
        if isinstance(out.get(key), Deep):
            out[key] = out[key].build()
    fn = out.get("function")
    if isinstance(fn, dict) and isinstance(fn.get("arguments"), Deep):
        out["function"] = dict(fn, arguments=fn["arguments"].build())
    return out


deep_value = st.builds(Deep, st.sampled_from([50, 200, 1000, 5000]), st.booleans(), scalars)


@st.composite
def json_text(draw: Any) -> str:
    kind = draw(st.sampled_from(["good", "bad", "deep", "dupe", "huge_key", "nonobject"]))
    if kind == "good":
        import json

        return json.dumps(draw(st.dictionaries(st.text(max_size=8), st.integers(), max_size=4)))
    if kind == "bad":
        return draw(st.sampled_from(['{"count": ', "{'a': 1}", '{"a": NaN}', '{"a": 1}}', "\ud800", '{"a":"\\ud800"}', "1e999"]))
    if kind == "deep":
        n = draw(st.sampled_from([100, 129, 5000]))
        return '{"count": ' + "[" * n + "]" * n + "}"
    if kind == "dupe":
        return '{"count": 1, "count": "x", "name": "a"}'
    if kind == "huge_key":
        return '{"' + "k" * draw(st.sampled_from([1000, 20_000])) + '": 1}'
    return draw(st.sampled_from(["[]", "null", "5", '"text"', "true", ""]))


arguments = st.one_of(
    values,
    deep_value,
    json_text(),
    st.dictionaries(odd_text, values, max_size=6),
    st.builds(lambda k: {k: 1}, st.sampled_from(["k" * 20_000, "\x00", "\ud800", "__proto__", "ctx", "context"])),
    st.builds(lambda n: {f"k{i}": i for i in range(n)}, st.sampled_from([100, 5000])),
    st.builds(lambda kind, n: {"kind": kind, "n": n}, st.sampled_from(KINDS), st.integers(0, 2)),
    st.fixed_dictionaries(
        {"count": values, "name": values},
        optional={"ratio": values, "tags": values, "mode": values, "extra": values, "pair": values},
    ),
    st.fixed_dictionaries(
        {"command": st.sampled_from(["view", "create", "str_replace", "insert", "delete", "rename", "bogus"])},
        optional={
            "path": st.one_of(odd_text, st.sampled_from(["/memories/a.md", "/memories/../etc/passwd", "/memories/a\nb"])),
            "file_text": values,
            "old_str": values,
            "new_str": values,
            "insert_line": values,
            "insert_text": values,
            "view_range": values,
            "old_path": values,
            "new_path": values,
        },
    ),
)
tool_names = st.one_of(
    st.sampled_from(NAMES),
    odd_text,
    st.sampled_from(["explod", "EXPLODE", "explode ", "x" * 20_000]),
    scalars,
)


@st.composite
def calls(draw: Any) -> Any:
    shape = draw(st.sampled_from(["anthropic", "chat", "responses", "junk", "nondict", "kinds"]))
    name = draw(tool_names)
    args = draw(arguments)
    if shape == "kinds":  # a well-formed call of a misbehaving tool
        tool_name = draw(st.sampled_from(["explode", "explode_async", "explode_effect"]))
        return {"id": draw(odd_text), "name": tool_name, "input": {"kind": draw(st.sampled_from(KINDS))}}
    if shape == "anthropic":
        call: Any = {"id": draw(st.one_of(odd_text, scalars)), "name": name, "input": args}
    elif shape == "chat":
        call = {"id": draw(odd_text), "function": draw(st.one_of(st.just({"name": name, "arguments": args}), values))}
    elif shape == "responses":
        call = {"call_id": draw(odd_text), "name": name, "arguments": args}
    elif shape == "junk":
        call = draw(st.dictionaries(st.one_of(odd_text, st.integers()), values, max_size=6))
    else:
        return draw(st.one_of(values, st.just(object()), st.just(FrozenDict({"name": "shaped"}))))
    if draw(st.booleans()):
        call["approved"] = draw(st.one_of(st.just(True), values))
    return call


# ------------------------------------------------------------------ the promise


def short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 300 else text[:300] + f"... ({len(text)} chars)"


#: Codes whose message is built by the library itself (not a tool's own ToolError text): their
#: message must stay bounded whatever the call held (a 20,000-character name is not echoed whole).
OWN_CODES = ("unknown_tool", "invalid_arguments", "invalid_call", "approval_required", "repeated_call")


def check_envelope(env: Any, call: Any) -> None:
    assert isinstance(env, dict), (type(env), short(call))
    assert isinstance(env.get("ok"), bool), (short(env), short(call))
    if env["ok"]:
        assert "value" in env and "error" not in env, short(env)
        text = tool_result_text(env)
        plain = text
        if env.get("deduplicated"):  # the one-sentence notice comes on top of the limited rendering
            plain = tool_result_text({k: v for k, v in env.items() if k != "deduplicated"})
            assert text.endswith(plain) and len(text) - len(plain) < 300, short(text)
        assert isinstance(plain, str) and len(plain) <= 2000, len(plain)
        return
    error = env.get("error")
    assert isinstance(error, dict), short(env)
    assert isinstance(error.get("code"), str) and error["code"], short(env)
    assert isinstance(error.get("message"), str) and error["message"], short(env)
    # what the model reads is encodable as UTF-8 text (no lone surrogates)
    tool_result_text(env).encode("utf-8", "strict")
    if error["code"] in OWN_CODES:
        assert len(error["message"]) <= 10_000, (error["code"], short(error["message"]))
    if error["code"] == "internal_error":
        # only a misbehaving body is "a bug in the tool": a hostile call is the caller's problem
        # (unknown_tool, invalid_call, invalid_arguments), never reported as our own fault
        assert _name_of(call) in ("explode", "explode_async", "explode_effect"), (short(error), short(call))


def _name_of(call: Any) -> Any:
    if not isinstance(call, dict):
        return None
    holder = call.get("function") if isinstance(call.get("function"), dict) else call
    return holder.get("name")


@FUZZ
@given(call=calls())
def test_dispatch_never_raises(call):
    call = materialize(call)
    env = dispatch(call, REGISTRY)
    check_envelope(env, call)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@FUZZ
@given(batch=st.lists(calls(), min_size=1, max_size=6))
def test_invoke_many_never_raises(loop, batch):
    batch = [materialize(call) for call in batch]
    inv = Invoker(REGISTRY)
    ctx = ToolContext(run_id=uuid.uuid4().hex)
    envs = loop.run_until_complete(asyncio.wait_for(inv.invoke_many(batch, ctx), 60))
    assert isinstance(envs, list) and len(envs) == len(batch)
    for env, call in zip(envs, batch):
        check_envelope(env, call)


@FUZZ
@given(call=calls())
def test_invoke_never_raises(loop, call):
    call = materialize(call)
    env = loop.run_until_complete(asyncio.wait_for(Invoker(REGISTRY).invoke(call), 60))
    check_envelope(env, call)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["explode", "explode_async", "explode_effect"])
def test_every_misbehaviour_is_an_envelope(loop, name, kind):
    """Each hostile body once on each path, so a CI run always covers all of them."""
    call = {"id": "k", "name": name, "input": {"kind": kind}}
    check_envelope(dispatch(call, REGISTRY), call)
    check_envelope(loop.run_until_complete(asyncio.wait_for(Invoker(REGISTRY).invoke(call), 60)), call)
    envs = loop.run_until_complete(
        asyncio.wait_for(Invoker(REGISTRY).invoke_many([call, {"id": "s", "name": "shaped", "input": {"count": 1, "name": "n"}}]), 60)
    )
    check_envelope(envs[0], call)
    assert envs[1]["ok"] is True and envs[1]["value"]["count"] == 1


@pytest.mark.parametrize("name", ["shaped", "no_such_tool"])
@pytest.mark.parametrize("depth", [200, 5000])
def test_deeply_nested_arguments_are_the_callers_problem(loop, name, depth):
    """Arguments nested deeper than any schema allows: the model is told its call is wrong
    (``invalid_arguments`` / ``unknown_tool``), on every path, never ``internal_error``."""
    args: Any = {"count": 1, "name": "n"}
    for _ in range(depth):
        args = {"extra": args} if name == "shaped" else [args]
    call = {"id": "deep", "name": name, "input": args}
    expected = "invalid_arguments" if name == "shaped" else "unknown_tool"
    envs = [
        dispatch(call, REGISTRY),
        loop.run_until_complete(asyncio.wait_for(Invoker(REGISTRY).invoke(call), 60)),
        loop.run_until_complete(asyncio.wait_for(Invoker(REGISTRY).invoke_many([call, call]), 60))[0],
    ]
    assert [e["error"]["code"] for e in envs] == [expected] * 3, [short(e) for e in envs]


# ------------------------------------------------------------------ what the model reads


@tool(read_only=True)
def lone_surrogate(x: int) -> str:
    """Return text holding a lone surrogate (as a badly decoded file may)."""
    return "caf\udce9 menu"


async def test_round_trips_render_a_lone_surrogate_without_raising():
    """A tool returning a ``str`` with a lone surrogate (``open(..., errors="surrogateescape")``
    does this) must not make the round-trip helpers raise into the agent loop: the text the
    model reads is valid UTF-8 (the surrogate replaced)."""
    from agentkit_tools.roundtrip import anthropic_tool_results, openai_chat_tool_results

    reg = ToolRegistry([lone_surrogate])
    message = await anthropic_tool_results({"content": [{"type": "tool_use", "id": "t1", "name": "lone_surrogate", "input": {"x": 1}}]}, reg)
    text = message["content"][0]["content"]
    text.encode("utf-8", "strict")
    assert text.startswith("caf") and text.endswith(" menu") and len(text) == len("caf\udce9 menu")
    [chat] = await openai_chat_tool_results(
        {"choices": [{"message": {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lone_surrogate", "arguments": '{"x": 1}'}}]}}]},
        reg,
    )
    assert chat["content"] == text
    env = dispatch({"id": "d", "name": "lone_surrogate", "input": {"x": 1}}, reg)
    assert tool_result_text(env) == text
