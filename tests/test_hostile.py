"""Hostile inputs: what a confused or malicious model, or a careless caller, can send through the
public API (SPEC §1–8, §10, §11). Every probe asserts the exact observable outcome; probes that
could crash the interpreter run in a subprocess so the suite survives a regression."""

from __future__ import annotations

import asyncio
import datetime
import enum
import functools
import json
import subprocess
import sys
import textwrap
from typing import Any, Optional

import pytest

from agentkit_tools import (
    FileTool,
    FunctionTool,
    InMemoryFiles,
    InMemoryStore,
    StoreFiles,
    ToolArgumentError,
    ToolDefinitionError,
    ToolError,
    ToolRegistry,
    dispatch,
    render_result,
    tool,
)

SEEN: dict[str, Any] = {}


@tool(read_only=True)
def probe(n: int = 0, x: float = 0.0, o: Optional[float] = None, a: Any = None, s: str = "",
          l: list[int] = [], d: dict[str, int] = {}) -> str:  # noqa: B006 - defaults are never mutated
    """Accept a little of everything so hostile arguments can be probed."""
    SEEN.clear()
    SEEN.update(n=n, x=x, o=o, a=a, s=s, l=l, d=d)
    return "ok"


@tool(read_only=True)
def with_ctx(ctx, q: str) -> str:
    """Echo q; receives the run context as ctx, which is never advertised."""
    return f"{q}:{ctx}"


REG = ToolRegistry([probe, with_ctx])
ACCEPTED = "['n', 'x', 'o', 'a', 's', 'l', 'd']"


def rejected(reason: str, tool_name: str = "probe", accepted: str = ACCEPTED) -> dict[str, Any]:
    """The `invalid_arguments` error object (without `schema`) of a call whose arguments as a whole
    are unusable."""
    return {
        "code": "invalid_arguments",
        "message": f"tool '{tool_name}' call rejected: {reason}. Accepted arguments: {accepted}. Re-read the "
        f"input schema and call '{tool_name}' again with corrected arguments.",
        "errors": [{"path": "<arguments>", "reason": reason}],
    }


def error_of(env: dict[str, Any]) -> dict[str, Any]:
    assert env["ok"] is False, env
    err = dict(env["error"])
    if err.get("code") == "invalid_arguments":
        assert err.pop("schema") == probe.schema.parameters or err.get("message", "").startswith("tool 'with_ctx'")
    return err


def call(args: Any, name: str = "probe") -> dict[str, Any]:
    return dispatch({"id": "c1", "name": name, "input": args}, REG)


def run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter: a stack overflow there is a failed assertion here, not
    a dead test run."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


# ------------------------------------------------------------------ process crashes (stack depth)

DEEP_PRELUDE = """
    import json
    from typing import Any
    from agentkit_tools import tool, ToolRegistry, dispatch

    @tool(read_only=True)
    def f(a: Any = None) -> Any:
        '''Accept any value at all, to probe very deep nesting.'''
        return a
"""


@pytest.mark.parametrize("depth", [10_000, 100_000])
@pytest.mark.parametrize("container", ["list", "dict"])
def test_deeply_nested_python_arguments_are_rejected_not_a_segfault(depth: int, container: str) -> None:
    wrap = "x = [x]" if container == "list" else "x = {'k': x}"
    proc = run_isolated(DEEP_PRELUDE + f"""
    x = []
    for _ in range({depth}):
        {wrap}
    env = dispatch({{"name": "f", "input": {{"a": x}}}}, ToolRegistry([f]))
    print(json.dumps(env["error"]["errors"]))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reason = "the arguments are not valid JSON (arrays and objects are nested more than 127 levels deep)"
    assert json.loads(proc.stdout) == [{"path": "<arguments>", "reason": reason}]


def test_deeply_nested_json_text_is_rejected_not_a_segfault() -> None:
    proc = run_isolated(DEEP_PRELUDE + """
    text = '{"a": ' + '[' * 100_000 + ']' * 100_000 + '}'
    env = dispatch({"name": "f", "input": text}, ToolRegistry([f]))
    print(json.dumps(env["error"]["errors"]))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [
        {"path": "<arguments>", "reason": "the arguments are not valid JSON (recursion limit exceeded at line 1 column 133)"}
    ]


def test_deeply_nested_result_against_an_output_schema_is_an_output_mismatch_not_a_segfault() -> None:
    proc = run_isolated("""
    import json
    from agentkit_tools import tool, ToolRegistry, dispatch

    @tool(read_only=True, output_schema={"type": "array", "title": "Rows"})
    def deep() -> list:
        '''Return a list nested far deeper than any JSON parser accepts.'''
        x = []
        for _ in range(100_000):
            x = [x]
        return x

    env = dispatch({"name": "deep", "input": {}}, ToolRegistry([deep]))
    print(json.dumps(env))
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {"ok": False, "error": {"code": "output_mismatch", "message": (
        "deep returned a value that does not match its declared output schema 'Rows' (<root>: not a JSON value: "
        "arrays and objects are nested more than 127 levels deep). This is a fault in the tool, not in your "
        "arguments: try different arguments once, or tell the user the tool is returning malformed data.")}}


def nested(levels: int, as_text: bool) -> Any:
    """Arguments `{"a": [[...]]}` with `levels` arrays and objects in all, the outer object included."""
    if as_text:
        return '{"a": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"
    x: list[Any] = []
    for _ in range(levels - 2):
        x = [x]
    return {"a": x}


@pytest.mark.parametrize("as_text", [False, True])
def test_nesting_limit_is_the_same_for_python_values_and_json_text(as_text: bool) -> None:
    env = call(nested(127, as_text))
    assert (env["ok"], env["value"]) == (True, "ok")
    err = error_of(call(nested(128, as_text)))
    assert err["code"] == "invalid_arguments"
    assert err["errors"][0]["reason"] in (
        "the arguments are not valid JSON (arrays and objects are nested more than 127 levels deep)",
        "the arguments are not valid JSON (recursion limit exceeded at line 1 column 133)",
    )


# ------------------------------------------------------------------ arguments that are not JSON


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"x": float("nan")}, "NaN is not a JSON number; send a finite number"),
        ({"x": float("inf")}, "inf is not a JSON number; send a finite number"),
        # An Optional/Any parameter used to validate NaN as null and then hand the body NaN.
        ({"o": float("nan")}, "NaN is not a JSON number; send a finite number"),
        ({"a": [float("-inf")]}, "-inf is not a JSON number; send a finite number"),
        ({"s": b"abc"}, "bytes are not a JSON value (send text, e.g. base64)"),
        ({1: 2}, "invalid type: integer `1`, expected a string object key (JSON object keys are strings)"),
        ({"d": {(1, 2): 2}}, "invalid type: sequence, expected a string object key (JSON object keys are strings)"),
        ({"a": datetime.datetime(2020, 1, 1)}, "unsupported type datetime"),
        ({"a": object()}, "unsupported type object"),
    ],
)
def test_python_values_json_cannot_carry_are_rejected(args: dict[Any, Any], reason: str) -> None:
    SEEN.clear()
    assert error_of(call(args)) == rejected(f"the arguments are not valid JSON ({reason})")
    assert SEEN == {}  # the body never ran


def test_sixty_four_bit_integers_at_the_edges_pass() -> None:
    for n in (2**63 - 1, -(2**63)):
        assert call({"n": n})["ok"] is True
        assert SEEN["n"] == n


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"x": NaN}', "expected value at line 1 column 7"),
        ('{"x": Infinity}', "expected value at line 1 column 7"),
        ('{"n": ', "EOF while parsing a value at line 1 column 6"),
        (
            '{"s": "\\ud800"}',  # (see test_lone_surrogate.py)
            "a string holds the lone surrogate \\ud800, half of a UTF-16 pair and no character: send the character "
            "itself, or both halves of its pair",
        ),
    ],
)
def test_json_text_that_is_not_json(text: str, reason: str) -> None:
    assert error_of(call(text)) == rejected(f"the arguments are not valid JSON ({reason})")


@pytest.mark.parametrize(
    ("args", "kind"),
    [([1], "an array"), ("[1, 2]", "an array"), (5, "an integer"), (True, "a boolean"), ('"x"', "a string")],
)
def test_non_object_arguments_are_a_call_error(args: Any, kind: str) -> None:
    assert error_of(call(args)) == rejected(f"the arguments must be a JSON object of named arguments, got {kind}")


@pytest.mark.parametrize("empty", [None, "", "   ", "\n\t", "null", " null ", "{}", {}])
def test_no_arguments_in_any_form_is_one_empty_call(empty: Any) -> None:
    # One rule: no arguments, however they come (None, blank text, JSON null), is the call `{}`.
    assert dispatch({"name": "with_ctx", "input": empty}, REG) == dispatch({"name": "with_ctx", "input": {}}, REG)
    assert error_of(dispatch({"name": "with_ctx", "input": empty}, REG))["errors"] == [
        {"path": "q", "reason": "missing required argument"}
    ]


def test_bytes_as_the_whole_arguments_are_rejected() -> None:
    assert error_of(call(b'{"n": 1}')) == rejected("the arguments are not valid JSON (bytes are not a JSON value (send text, e.g. base64))")


def test_duplicate_keys_in_json_text_keep_the_last_like_json_loads() -> None:
    assert call('{"n": 1, "n": 2}')["ok"] is True
    assert SEEN["n"] == json.loads('{"n": 1, "n": 2}')["n"] == 2


def test_a_very_long_string_passes_through_whole() -> None:
    assert call({"s": "x" * 5_000_000})["ok"] is True
    assert len(SEEN["s"]) == 5_000_000


@pytest.mark.parametrize("args", [{"n": 1.0}, '{"n": 1.0}'])
def test_an_integer_parameter_never_receives_a_float(args: Any) -> None:
    assert call(args)["ok"] is True
    assert (SEEN["n"], type(SEEN["n"])) == (1, int)


@pytest.mark.parametrize(
    ("args", "n"),
    [
        ('{"n": 18446744073709551616}', 2**64),
        ({"n": 18446744073709551616}, 2**64),
        ('{"n": 18446744073709551616.0}', 2**64),
        ({"n": -(2**63) - 1}, -(2**63) - 1),
        ('{"n": -9223372036854775809}', -(2**63) - 1),
    ],
)
def test_an_integer_beyond_64_bits_reaches_the_body_exactly(args: Any, n: int) -> None:
    assert call(args)["ok"] is True
    assert (SEEN["n"], type(SEEN["n"])) == (n, int)


# ------------------------------------------------------------------ malformed calls


@pytest.mark.parametrize(
    ("bad_call", "message"),
    [
        ([1, 2], "a tool call must be a dict like {'id': ..., 'name': ..., 'input': {...}}, got list. "
                 "Send a tool call with a name and its arguments."),
        (None, "a tool call must be a dict like {'id': ..., 'name': ..., 'input': {...}}, got NoneType. "
               "Send a tool call with a name and its arguments."),
        ("probe", "a tool call must be a dict like {'id': ..., 'name': ..., 'input': {...}}, got str. "
                  "Send a tool call with a name and its arguments."),
        ({"name": 5, "input": {}}, "the tool call's name must be a string, got int. Send a tool call with a name and its arguments."),
        ({"name": ["probe"], "input": {}}, "the tool call's name must be a string, got list. Send a tool call with a name and its arguments."),
        ({"input": {}}, "The tool call has no tool name. Send a call with a 'name' and its arguments."),
        ({"name": None, "input": {}}, "The tool call has no tool name. Send a call with a 'name' and its arguments."),
    ],
)
def test_malformed_calls_are_invalid_call_envelopes(bad_call: Any, message: str) -> None:
    assert dispatch(bad_call, REG) == {"ok": False, "error": {"code": "invalid_call", "message": message}}


def test_unknown_unicode_name() -> None:
    assert dispatch({"name": "prøbe", "input": {}}, REG) == {"ok": False, "error": {
        "code": "unknown_tool",
        "message": "No tool named 'prøbe'. Did you mean 'probe'? Available tools: probe, with_ctx. Call one of those instead.",
        "available": ["probe", "with_ctx"], "did_you_mean": "probe"}}


def test_model_sent_ctx_is_dropped_only_when_the_function_injects_it() -> None:
    env = dispatch({"name": "with_ctx", "input": {"q": "hi", "ctx": {"evil": True}}}, REG, ctx="RUN")
    assert (env["ok"], env["value"]) == (True, "hi:RUN")
    assert error_of(call({"ctx": 1}))["errors"] == [{"path": "ctx", "reason": "unexpected argument: this tool does not take it"}]
    err = error_of(dispatch({"name": "with_ctx", "input": {"q": "x", "context": 1}}, REG))
    assert err["errors"] == [{"path": "context", "reason": "unexpected argument: this tool does not take it"}]


def test_error_paths_name_keys_exactly_even_empty_numeric_and_pointer_like_ones() -> None:
    err = error_of(call({"l": [1, "2"], "d": {"a/b": "x", "a~b": "y", "": "z", "0": "w", "ключ": "v"}}))
    assert err["errors"] == [
        {"path": "l[1]", "reason": 'expected integer, got string "2"'},
        {"path": 'd["a/b"]', "reason": 'expected integer, got string "x"'},
        {"path": 'd["a~b"]', "reason": 'expected integer, got string "y"'},
        {"path": 'd[""]', "reason": 'expected integer, got string "z"'},
        {"path": 'd["0"]', "reason": 'expected integer, got string "w"'},
        {"path": "d.ключ", "reason": 'expected integer, got string "v"'},
    ]
    assert "and 1 more" in err["message"]


def test_unexpected_keys_that_look_like_pointers_are_reported_verbatim() -> None:
    err = error_of(call({"a/b": 1, "a~1b": 2, "\x00": 3}))
    assert err["errors"] == [
        {"path": p, "reason": "unexpected argument: this tool does not take it"} for p in ("a/b", "a~1b", "\x00")
    ]
    assert "unexpected argument(s) ['a/b', 'a~1b', '\\x00']" in err["message"]


def test_run_rejects_the_same_way_as_dispatch() -> None:
    with pytest.raises(ToolArgumentError) as info:
        asyncio.run(probe.run({"x": float("nan")}))
    assert info.value.invalid == (("<arguments>", "the arguments are not valid JSON (NaN is not a JSON number; send a finite number)"),)


# ------------------------------------------------------------------ results and exceptions


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


def make_failing(exc: BaseException, name: str = "boom", is_async: bool = False) -> FunctionTool:
    if is_async:
        async def body() -> None:
            raise exc
    else:
        def body() -> None:
            raise exc
    body.__doc__ = "Raise the exception this probe was built with."
    return tool(body, read_only=True, name=name, timeout_s=5)


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (BrokenStr(), "BrokenStr"),
        (TimeoutError("upstream API timed out"), "TimeoutError: upstream API timed out"),
        (asyncio.CancelledError(), "CancelledError"),
        (GeneratorExit(), "GeneratorExit"),
        (BaseException("base"), "BaseException: base"),
        (RecursionError("maximum recursion depth exceeded"), "RecursionError: maximum recursion depth exceeded"),
    ],
)
def test_every_body_exception_becomes_an_internal_error_envelope(exc: BaseException, text: str, is_async: bool) -> None:
    env = dispatch({"name": "boom", "input": {}}, ToolRegistry([make_failing(exc, is_async=is_async)]))
    assert env == {"ok": False, "error": {"code": "internal_error", "message": (
        f"boom failed: {text}. This is a bug in the tool, not in your arguments; do not retry.")}}


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_keyboard_interrupt_and_system_exit_propagate(exc: BaseException, is_async: bool) -> None:
    with pytest.raises(type(exc)):
        dispatch({"name": "boom", "input": {}}, ToolRegistry([make_failing(exc, is_async=is_async)]))


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (ToolError("Locked.", code=5), {"code": "5", "message": "Locked.", "retriable": False}),  # type: ignore[arg-type]
        (ToolError("Locked.", code="locked", when=datetime.date(2020, 1, 1), code_hint="x"),
         {"when": datetime.date(2020, 1, 1), "code_hint": "x", "code": "locked", "message": "Locked.", "retriable": False}),
    ],
)
def test_tool_errors_with_odd_fields_still_give_an_envelope(exc: ToolError, error: dict[str, Any]) -> None:
    assert dispatch({"name": "boom", "input": {}}, ToolRegistry([make_failing(exc)])) == {"ok": False, "error": error}


def test_tool_error_with_unreadable_retriable_is_not_retriable() -> None:
    class Weird(ToolError):
        @property
        def retriable(self) -> bool:  # type: ignore[override]
            raise RuntimeError("nope")

        @retriable.setter
        def retriable(self, value: bool) -> None:
            pass

    env = dispatch({"name": "boom", "input": {}}, ToolRegistry([make_failing(Weird("Try later."))]))
    assert env == {"ok": False, "error": {"code": "tool_error", "message": "Try later.", "retriable": False}}


def test_deadline_still_reported_as_timeout() -> None:
    @tool(read_only=True, timeout_s=0.05)
    async def slow() -> None:
        """Sleep far past the deadline so the call times out."""
        await asyncio.sleep(5)

    assert dispatch({"name": "slow", "input": {}}, ToolRegistry([slow])) == {"ok": False, "error": {
        "code": "timeout", "message": "slow did not finish within 0.05s. Do not retry immediately; tell the user the backend is slow."}}


def test_render_result_never_raises() -> None:
    circular: list[Any] = []
    circular.append(circular)
    assert render_result(circular) == "[[...]]"
    assert render_result({"v": circular}) == "{'v': [[...]]}"
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert render_result(deep) == "<list object that cannot be rendered as text>"
    assert render_result({"v": Unprintable()}) == '{"v": "<Unprintable object that cannot be rendered as text>"}'
    assert render_result(Unprintable()) == '"<Unprintable object that cannot be rendered as text>"'
    assert render_result({1, 2}) == '"{1, 2}"'


def test_huge_result_is_cut_inside_the_limit() -> None:
    text = render_result({"rows": "é" * 5_000_000}, max_chars=300)
    # 5_000_012 characters of JSON, 199 kept: the notice is the other 101.
    notice = "\n...[truncated 4999813 chars]. Narrow your arguments (add filters or a smaller limit) and call again."
    assert text == '{"rows": "' + "é" * (300 - len(notice) - 10) + notice
    assert len(text) == 300


# ------------------------------------------------------------------ definitions


DOC = "A tool used to probe odd definitions in hostile tests."


def fn_named(name: str) -> Any:
    def f() -> None:
        pass

    f.__doc__ = DOC
    f.__name__ = name
    return f


@pytest.mark.parametrize("name", ["a" * 65, "abc\n", "tööl", "<lambda>", "a b", ""])
def test_names_providers_refuse_are_refused(name: str) -> None:
    with pytest.raises(ToolDefinitionError) as info:
        FunctionTool.from_callable(fn_named(name or "x"), name=name or "bad name")
    shown = name or "bad name"
    assert str(info.value) == (
        f"tool name {shown!r} is not accepted by model providers: use 1-64 characters from a-z, A-Z, 0-9, "
        "'_' and '-' (pass name=...)"
    )


def test_a_64_character_name_is_accepted() -> None:
    assert FunctionTool.from_callable(fn_named("a" * 64)).name == "a" * 64


def gen_fn(x: int):  # type: ignore[no-untyped-def]
    """Yield x; a generator cannot be a tool because a call returns one result."""
    yield x


async def agen_fn(x: int):  # type: ignore[no-untyped-def]
    """Yield x; an async generator cannot be a tool because a call returns one result."""
    yield x


@pytest.mark.parametrize("fn", [gen_fn, agen_fn, functools.partial(gen_fn)])
def test_generator_functions_are_refused(fn: Any) -> None:
    name = getattr(fn, "__name__", None) or fn.func.__name__
    with pytest.raises(ToolDefinitionError) as info:
        tool(fn, read_only=True, name=name)
    assert str(info.value) == (
        f"tool {name!r} is a generator function: a tool call returns one result, so collect the items into a "
        "list and return it"
    )


class Obj:
    pass


def test_defaults_json_cannot_carry_are_not_advertised() -> None:
    def defaults(a=[], b={}, c=(1, 2), e=Obj(), f=float("nan"), g=2**70, h=b"x", i=None):  # noqa: B006
        return (a, b, c, e, f, g, h, i)

    defaults.__doc__ = DOC
    t = FunctionTool.from_callable(defaults)
    props = t.schema.parameters["properties"]
    assert {k: v.get("default", "<none>") for k, v in props.items()} == {
        "a": [], "b": {}, "c": [1, 2], "e": "<none>", "f": "<none>", "g": "<none>", "h": "eA==", "i": None,
    }
    env = dispatch({"name": "defaults", "input": {}}, ToolRegistry([t]))
    assert env["ok"] is True and env["value"][5] == 2**70


def test_positional_only_and_keyword_only_parameters_are_called_right() -> None:
    def po(a: int, /, b: int, *, c: int = 1) -> list[int]:
        return [a, b, c]

    po.__doc__ = DOC
    env = dispatch({"name": "po", "input": '{"c": 3, "b": 2, "a": 1}'}, ToolRegistry([tool(po, read_only=True)]))
    assert (env["ok"], env["value"]) == (True, [1, 2, 3])


def test_varargs_is_refused_naming_it() -> None:
    def va(*rows: int) -> None:
        pass

    va.__doc__ = DOC
    with pytest.raises(ToolDefinitionError, match=r"^tool 'va': parameter '\*rows' takes positional arguments"):
        tool(va, read_only=True)


def test_todo_in_a_summary_replaced_by_description_is_fine() -> None:
    def f(a: int) -> None:
        """Short.

        TODO: later
        """

    t = tool(f, read_only=True, description="An explicit description that is long enough.")
    assert t.description == "An explicit description that is long enough."


class WithNone(enum.Enum):
    A = 1
    C = None


class Mixed(enum.Enum):
    A = 1
    B = "b"
    D = 1.5


def test_enum_member_with_none_value_is_converted() -> None:
    def pick(m: WithNone) -> str:
        return repr(m)

    pick.__doc__ = DOC
    env = dispatch({"name": "pick", "input": {"m": None}}, ToolRegistry([tool(pick, read_only=True)]))
    assert env["value"] == "<WithNone.C: None>"


def test_mixed_enum_members() -> None:
    def pick(m: Mixed) -> str:
        return repr(m)

    pick.__doc__ = DOC
    t = tool(pick, read_only=True)
    assert t.schema.parameters["properties"]["m"] == {"enum": [1, "b", 1.5]}
    reg = ToolRegistry([t])
    assert [dispatch({"name": "pick", "input": {"m": v}}, reg).get("value") for v in (1, "b", 1.5)] == [
        "<Mixed.A: 1>", "<Mixed.B: 'b'>", "<Mixed.D: 1.5>"]
    err = dispatch({"name": "pick", "input": {"m": True}}, reg)["error"]
    assert err["errors"] == [{"path": "m", "reason": 'must be one of [1,"b",1.5], got boolean true'}]


def test_docstring_oddities() -> None:
    def crlf(a: int) -> None:
        pass

    crlf.__doc__ = "First line of a long description here.\r\n\r\nArgs:\r\n    a: The a param.\r\n        continued.\r\n---\r\nTODO hidden\r\n"
    t = tool(crlf, read_only=True)
    assert (t.description, t.schema.parameters["properties"]["a"]) == (
        "First line of a long description here.", {"type": "integer", "description": "The a param. continued."})

    def todo_param(a: int) -> None:
        pass

    todo_param.__doc__ = "Long enough description for the tool here.\n\nArgs:\n    a: TODO explain this.\n"
    with pytest.raises(ToolDefinitionError, match="^tool 'todo_param': docstring line \"TODO explain this.\" starts with TODO"):
        tool(todo_param, read_only=True)

    def only_args(a: int) -> None:
        pass

    only_args.__doc__ = "Args:\n    a: The thing to use for the probing that is long.\n"
    with pytest.raises(ToolDefinitionError, match="got 0 chars: ''$"):
        tool(only_args, read_only=True)


# ------------------------------------------------------------------ the memory tool


def memory_tools() -> list[FileTool]:
    return [FileTool(InMemoryFiles()), FileTool(StoreFiles(InMemoryStore(), namespace="hostile"))]


async def attempt(t: FileTool, **args: Any) -> str:
    try:
        return "ok: " + await t.run(args)
    except Exception as exc:  # noqa: BLE001 - the class and message are the observation
        return f"{type(exc).__name__}: {exc}"


OUTSIDE = "MemoryPermissionError: path {p} is outside the memory directory /memories; use a path under /memories/ (relative paths are joined under it)"


@pytest.mark.parametrize("t", memory_tools(), ids=["in_memory", "store"])
def test_memory_paths_cannot_escape(t: FileTool) -> None:
    async def go() -> dict[str, str]:
        out = {}
        for p in ["/memories/../etc/passwd", "/memories/a/../../x", "/memoriesX/a", "../x", "/", "/etc/passwd",
                  "/memories/d\\e", "/memories/n\x00ul", "", "/memories", "/memories/.", "/memories/x/.."]:
            out[p] = await attempt(t, command="create", path=p, file_text="x")
        return out

    got = asyncio.run(go())
    root = "MemoryCommandError: /memories is the memory root directory; create a file below it, e.g. /memories/notes.md"
    assert got == {
        "/memories/../etc/passwd": OUTSIDE.format(p='"/memories/../etc/passwd"'),
        "/memories/a/../../x": OUTSIDE.format(p='"/memories/a/../../x"'),
        "/memoriesX/a": OUTSIDE.format(p='"/memoriesX/a"'),
        "../x": OUTSIDE.format(p='"../x"'),
        "/": OUTSIDE.format(p='"/"'),
        "/etc/passwd": OUTSIDE.format(p='"/etc/passwd"'),
        "/memories/d\\e": 'MemoryPermissionError: path "/memories/d\\\\e" contains a backslash; memory paths are POSIX paths separated by / under /memories',
        "/memories/n\x00ul": 'MemoryPermissionError: path "/memories/n\\0ul" contains a NUL byte; use a plain path under /memories',
        "": "MemoryCommandError: path is empty; pass a path under /memories, e.g. /memories/notes.md",
        "/memories": root,
        "/memories/.": root,
        "/memories/x/..": root,
    }


@pytest.mark.parametrize("t", memory_tools(), ids=["in_memory", "store"])
def test_memory_hostile_edits(t: FileTool) -> None:
    async def go() -> list[str]:
        f = "/memories/a.txt"
        steps = [
            dict(command="create", path="//memories/a.txt", file_text="l1\nl2\nl3\n"),
            dict(command="create", path="/memories/．．/x", file_text="fullwidth dots are a name"),
            dict(command="view", path=f, view_range=[2, 1]),
            dict(command="view", path=f, view_range=[0, 1]),
            dict(command="view", path=f, view_range=[3, 3]),
            dict(command="view", path=f, view_range=[1, -1]),
            dict(command="str_replace", path=f, old_str="", new_str="Z"),
            dict(command="str_replace", path=f, old_str="l", new_str="Z"),
            dict(command="insert", path=f, insert_line=-1, insert_text="x"),
            dict(command="insert", path=f, insert_line=2**40, insert_text="x"),
            dict(command="insert", path=f, insert_line=3, insert_text="end"),
            dict(command="rename", old_path=f, new_path=f),
            dict(command="create", path="/memories/dir/f", file_text="x"),
            dict(command="rename", old_path="/memories/dir", new_path="/memories/dir/sub"),
            dict(command="rename", old_path="/memories", new_path="/memories/x"),
            dict(command="delete", path="/memories/"),
            dict(command="view", path="/memories", ctx=1),
        ]
        return [await attempt(t, **s) for s in steps]

    range_err = ("MemoryCommandError: view_range {r} is out of range for /memories/a.txt, which has 3 line(s); pass "
                 "[start, end] with 1 <= start <= end <= 3 (end may be -1 for the last line), or omit view_range to read the whole file")
    insert_err = ("MemoryCommandError: insert_line {n} is out of range for /memories/a.txt, which has 4 line(s) "
                  "counting an empty last line after a final line break; pass 0 to insert at the top or a value from "
                  "1 to 4 to insert after that line")
    assert asyncio.run(go()) == [
        "ok: File created successfully at /memories/a.txt (9 bytes).",
        "ok: File created successfully at /memories/．．/x (25 bytes).",
        range_err.format(r="[2, 1]"),
        range_err.format(r="[0, 1]"),
        "ok:      3\tl3",
        "ok:      1\tl1\n     2\tl2\n     3\tl3",
        "MemoryCommandError: old_str is empty; pass the exact text to replace in /memories/a.txt, copied from a view of the file",
        "MemoryCommandError: old_str occurs 3 times in /memories/a.txt (at lines 1, 2, 3); it must occur exactly once: "
        "add surrounding context to old_str so it matches only the place you mean",
        insert_err.format(n=-1),
        insert_err.format(n=2**40),
        "ok: Text inserted after line 3 of /memories/a.txt.",
        "MemoryCommandError: old_path and new_path are both /memories/a.txt, so there is nothing to rename and nothing "
        "was changed; pass the new name as new_path",
        "ok: File created successfully at /memories/dir/f (1 bytes).",
        "MemoryCommandError: cannot move directory /memories/dir into itself (/memories/dir/sub); choose a new_path outside /memories/dir",
        "MemoryPermissionError: cannot rename /memories to /memories/x: the memory root /memories cannot be moved or replaced",
        "MemoryPermissionError: refusing to delete the memory root /memories; delete the files or directories below it one by one",
        "MemoryCommandError: unexpected argument(s) ctx; the memory tool accepts command, path, file_text, overwrite, "
        "old_str, new_str, insert_line, insert_text, view_range, old_path, new_path. Remove them and call again",
    ]


def test_memory_limits_exactly_at_the_boundary() -> None:
    # Paths count: "/memories/a" and "/memories/b" are 11 bytes each.
    t = FileTool(StoreFiles(InMemoryStore(), namespace="limits", max_bytes=32, max_files=2))

    async def go() -> list[str]:
        return [
            await attempt(t, command="create", path="a", file_text="é" * 5),  # 11 + 10 UTF-8 bytes
            await attempt(t, command="create", path="b", file_text=""),  # 32 bytes, 2 files: exactly the limits
            await attempt(t, command="create", path="c", file_text=""),
            await attempt(t, command="insert", path="b", insert_line=0, insert_text="x"),
        ]

    got = asyncio.run(go())
    assert got[:2] == ["ok: File created successfully at /memories/a (10 bytes).",
                       "ok: File created successfully at /memories/b (0 bytes)."]
    assert got[2].startswith("MemoryLimitError: ") and "max_files" in got[2]
    assert got[3].startswith("MemoryLimitError: ") and "max_bytes" in got[3]
    assert asyncio.run(t.backend.files()) == {"/memories/a": "é" * 5, "/memories/b": ""}


def test_memory_through_dispatch_is_an_envelope() -> None:
    env = dispatch({"name": "memory", "input": {"command": "delete", "path": "/memories"}}, ToolRegistry([FileTool()]))
    assert env == {"ok": False, "error": {"code": "permission_denied", "retriable": False, "message": (
        "refusing to delete the memory root /memories; delete the files or directories below it one by one")}}
