"""The fast definition path (issue 6, M1): a plain function is read from its code object and
annotations instead of ``inspect.signature`` and ``typing.get_type_hints``, and the core returns
the frozen input schema in the same call. Every case here checks the exact result and that it is
the one the general path (``inspect.signature`` + ``typing.get_type_hints``) gives.

No ``from __future__ import annotations`` in this module: the hints must be evaluated objects so
that the fast path is the one taken (string hints are covered through ``exec`` below).
"""

import dataclasses
import functools
import inspect
import math
import sys
import textwrap
import typing
from typing import Annotated, Any, Literal, Optional

import pytest

from agentkit_tools import FunctionTool, ToolDefinitionError, ToolSchema, _core, tool
from agentkit_tools import introspect as introspect_module
from agentkit_tools.frozen import FrozenDict, FrozenList
from agentkit_tools.introspect import _code_parameters, _is_plain_function, introspect

DOC = "Search the catalogue for products that match the query text."


def _summary(info: introspect_module.Introspection) -> dict[str, Any]:
    """Every field of an ``Introspection``, with converters reduced to the names that have one
    (converters are closures made per definition)."""
    out = dataclasses.asdict(info)
    out["converters"] = sorted(info.converters)
    return out


def _general(func: Any, name: str | None = None) -> dict[str, Any]:
    """The ``Introspection`` summary the general path (``inspect.signature``) gives."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(introspect_module, "_is_plain_function", lambda f: False)
        return _summary(introspect(func, name))


def _fast(func: Any, name: str | None = None) -> dict[str, Any]:
    assert _is_plain_function(func.__func__ if isinstance(func, staticmethod | classmethod) else func)
    return _summary(introspect(func, name))


def _inspect_params(func: Any) -> list[tuple[str, Any, Any, Any]]:
    return [(n, p.kind, p.default, p.annotation) for n, p in inspect.signature(func).parameters.items()]


P = inspect.Parameter


# ------------------------------------------------------------------------------- signatures


def kinds(a: int, b: str = "x", /, c: float = 1.5, *, d: bool, e: list[str] | None = None, **extra: Any) -> str:
    """Search the catalogue for products that match the query text."""
    return ""


def test_code_parameters_agree_with_inspect_on_every_kind():
    params = _code_parameters(kinds, kinds.__annotations__)
    assert params == [
        ("a", P.POSITIONAL_ONLY, P.empty, int),
        ("b", P.POSITIONAL_ONLY, "x", str),
        ("c", P.POSITIONAL_OR_KEYWORD, 1.5, float),
        ("d", P.KEYWORD_ONLY, P.empty, bool),
        ("e", P.KEYWORD_ONLY, None, list[str] | None),
        ("extra", P.VAR_KEYWORD, P.empty, Any),
    ]
    assert params == _inspect_params(kinds)


def test_every_kind_gives_the_general_result():
    fast = _fast(kinds)
    assert fast == _general(kinds)
    assert fast["params"] == [
        ("a", {"type": "integer"}, True, None, None),
        ("b", {"type": "string"}, False, "x", None),
        ("c", {"type": "number"}, False, 1.5, None),
        ("d", {"type": "boolean"}, True, None, None),
        ("e", {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}, False, None, None),
    ]
    assert (fast["positional_only"], fast["var_keyword"], fast["return_hint"]) == (("a", "b"), True, str)
    t = tool(kinds, read_only=True)
    assert t.fn({"a": 1, "b": "y", "c": 2.0, "d": True, "z": 3}, None) == ""
    assert t.schema.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "string", "default": "x"},
            "c": {"type": "number", "default": 1.5},
            "d": {"type": "boolean"},
            "e": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
        },
        "required": ["a", "d"],
    }


def keyword_only_defaults(*, limit: int = 10, query: str, flag: bool = False) -> None:
    """Search the catalogue for products that match the query text."""


def test_keyword_only_defaults_without_positional_parameters():
    assert _code_parameters(keyword_only_defaults, keyword_only_defaults.__annotations__) == [
        ("limit", P.KEYWORD_ONLY, 10, int),
        ("query", P.KEYWORD_ONLY, P.empty, str),
        ("flag", P.KEYWORD_ONLY, False, bool),
    ]
    assert _fast(keyword_only_defaults) == _general(keyword_only_defaults)


def unannotated(query, limit=3, *, scope="all"):
    """Search the catalogue for products that match the query text."""


def test_unannotated_parameters_accept_any_value():
    fast = _fast(unannotated)
    assert fast == _general(unannotated)
    assert fast["params"] == [("query", {}, True, None, None), ("limit", {}, False, 3, None), ("scope", {}, False, "all", None)]
    assert fast["return_hint"] is P.empty


def test_star_args_is_refused_with_the_general_message():
    def spread(query: str, *terms: str) -> None:
        """Search the catalogue for products that match the query text."""

    assert _code_parameters(spread, spread.__annotations__) is None
    with pytest.raises(ToolDefinitionError) as err:
        introspect(spread)
    assert str(err.value) == (
        "tool 'spread': parameter '*terms' takes positional arguments, which a model cannot send "
        "(tool calls carry named arguments only); replace it with a named list parameter such as "
        "'terms: list[str]', or take '**kwargs' to receive named arguments the schema does not declare"
    )


def test_defaults_that_json_cannot_carry_are_not_advertised():
    marker = object()

    def odd(query: str, ratio: float = math.nan, token: object = marker, size: int = 2**70) -> None:
        """Search the catalogue for products that match the query text."""

    fast = _fast(odd)
    assert fast == _general(odd)
    assert fast["non_json_defaults"] == ("ratio", "token", "size")
    t = tool(odd, read_only=True)
    assert t.schema.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "ratio": {"type": "number"}, "token": {}, "size": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    }


def test_context_parameter_is_found_on_the_fast_path():
    def with_ctx(query: str, ctx=None) -> None:
        """Search the catalogue for products that match the query text."""

    fast = _fast(with_ctx)
    assert fast == _general(with_ctx)
    assert (fast["context_param"], [p[0] for p in fast["params"]]) == ("ctx", ["query"])


# ------------------------------------------------------------------------------- what is not a plain function


def test_functions_with_attributes_inspect_honours_take_the_general_path():
    def base(query: str, limit: int = 5) -> str:
        """Search the catalogue for products that match the query text."""
        return query

    @functools.wraps(base)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        return base(*args, **kwargs)

    assert (_is_plain_function(base), _is_plain_function(wrapper)) == (True, False)
    # inspect follows __wrapped__: the wrapper is described by the wrapped signature.
    info = introspect(wrapper)
    assert [p[:4] for p in info.params] == [("query", {"type": "string"}, True, None), ("limit", {"type": "integer"}, False, 5)]
    assert tool(wrapper, read_only=True).fn({"query": "q"}, None) == "q"

    def declared(*args: Any) -> None:
        """Search the catalogue for products that match the query text."""

    declared.__signature__ = inspect.Signature([P("query", P.KEYWORD_ONLY, annotation=str)])  # type: ignore[attr-defined]
    assert _is_plain_function(declared) is False
    assert [p[:3] for p in introspect(declared).params] == [("query", {"type": "string"}, True)]


def test_partials_and_methods():
    def search(query: str, limit: int = 5, scope: str = "all") -> str:
        """Search the catalogue for products that match the query text."""
        return f"{query}:{limit}:{scope}"

    part = functools.partial(search, limit=2)
    assert [p[:4] for p in introspect(part).params] == [
        ("query", {"type": "string"}, True, None),
        ("limit", {"type": "integer"}, False, 2),
        ("scope", {"type": "string"}, False, "all"),
    ]

    class Shop:
        def find(self, query: str, limit: int = 5) -> str:
            """Search the catalogue for products that match the query text."""
            return f"{query}:{limit}"

        @staticmethod
        def static(query: str) -> str:
            """Search the catalogue for products that match the query text."""
            return query

        @classmethod
        def klass(cls, query: str) -> str:
            """Search the catalogue for products that match the query text."""
            return query

    # The function in the class body: plain, with an unbound ``self`` to skip.
    unbound = _fast(Shop.__dict__["find"])
    assert unbound == _general(Shop.__dict__["find"])
    assert (unbound["unbound_first"], [p[0] for p in unbound["params"]]) == ("self", ["query", "limit"])
    # A bound method: the general path, ``self`` already bound.
    bound = _summary(introspect(Shop().find))
    assert (bound["unbound_first"], [p[0] for p in bound["params"]]) == (None, ["query", "limit"])
    assert _fast(Shop.__dict__["static"]) == _general(Shop.__dict__["static"])
    raw_classmethod = _fast(Shop.__dict__["klass"])
    assert raw_classmethod == _general(Shop.__dict__["klass"])
    assert raw_classmethod["unbound_first"] == "cls"


def test_async_and_generator_functions():
    async def fetch(query: str) -> str:
        """Search the catalogue for products that match the query text."""
        return query

    def gen(query: str) -> typing.Iterator[str]:
        """Search the catalogue for products that match the query text."""
        yield query

    async def agen(query: str) -> typing.AsyncIterator[str]:
        """Search the catalogue for products that match the query text."""
        yield query

    assert (_fast(fetch)["is_async"], _general(fetch)["is_async"]) == (True, True)
    assert _fast(gen)["is_async"] is False
    for f in (gen, agen):
        with pytest.raises(ToolDefinitionError) as err:
            tool(f, read_only=True)
        assert str(err.value) == (
            f"tool {f.__name__!r} is a generator function: a tool call returns one result, so "
            "collect the items into a list and return it"
        )


# ------------------------------------------------------------------------------- hints


@dataclasses.dataclass
class Item:
    sku: str
    qty: int = 1


def test_string_hints_are_resolved_by_typing():
    namespace: dict[str, Any] = {}
    source = textwrap.dedent(
        '''
        from __future__ import annotations
        from typing import Literal

        def stringly(query: str, scope: Literal["a", "b"] = "a", tags: list[str] | None = None) -> list[str]:
            """Search the catalogue for products that match the query text."""
            return []
        '''
    )
    exec(compile(source, "<stringly>", "exec"), namespace)  # noqa: S102 - test source
    stringly = namespace["stringly"]
    assert stringly.__annotations__["query"] == "str"
    fast = _fast(stringly)
    assert fast == _general(stringly)
    assert fast["params"] == [
        ("query", {"type": "string"}, True, None, None),
        ("scope", {"type": "string", "enum": ["a", "b"]}, False, "a", None),
        ("tags", {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}, False, None, None),
    ]
    assert fast["return_hint"] == list[str]


def test_a_nested_forward_reference_is_resolved_by_typing():
    # typing.List: its string argument is a ForwardRef on every Python version (``list["Item"]``
    # keeps a plain string, which typing resolves only from 3.11 on).
    def order(items: typing.List["Item"], note: Optional["str"] = None) -> None:  # noqa: UP006, UP037
        """Search the catalogue for products that match the query text."""

    fast = _fast(order)
    assert fast == _general(order)
    assert fast["unresolved"] == {}
    assert fast["converters"] == ["items"]
    assert fast["params"][0] == (
        "items",
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}},
                "required": ["sku"],
                "additionalProperties": False,
            },
        },
        True,
        None,
        None,
    )
    assert tool(order, read_only=True).fn({"items": [{"sku": "A"}]}, None) is None


def test_an_unresolvable_forward_reference_degrades_its_parameter_only():
    def broken(query: str, thing: list["Missing"]) -> None:  # type: ignore[name-defined]  # noqa: F821
        """Search the catalogue for products that match the query text."""

    fast = _fast(broken)
    assert fast == _general(broken)
    assert fast["params"] == [("query", {"type": "string"}, True, None, None), ("thing", {}, True, None, None)]
    assert list(fast["unresolved"]) == ["thing"]


def test_none_hints_and_none_defaults_match_typing():
    def nones(flag: None, limit: int = None, label: Annotated[str, "The label."] = None) -> None:  # type: ignore[assignment]
        """Search the catalogue for products that match the query text."""

    fast = _fast(nones)
    assert fast == _general(nones)
    assert fast["return_hint"] is type(None)
    if sys.version_info < (3, 11):  # typing made a None default Optional before 3.11
        limit = ("limit", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, False, None, None)
        label = ("label", {"anyOf": [{"type": "string", "description": "The label."}, {"type": "null"}]}, False, None, None)
    else:
        limit = ("limit", {"type": "integer"}, False, None, None)
        label = ("label", {"type": "string"}, False, None, "The label.")
    assert fast["params"] == [("flag", {"type": "null"}, True, None, None), limit, label]


def test_hints_equal_in_python_but_different_in_json_keep_their_own_fragments():
    def a(x: int | str, y: Literal["p", "q"], z: Literal[1]) -> None:
        """Search the catalogue for products that match the query text."""

    def b(x: str | int, y: Literal["q", "p"], z: Literal[True]) -> None:
        """Search the catalogue for products that match the query text."""

    assert [p[1] for p in introspect(a).params] == [
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"type": "string", "enum": ["p", "q"]},
        {"type": "integer", "enum": [1]},
    ]
    assert [p[1] for p in introspect(b).params] == [
        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        {"type": "string", "enum": ["q", "p"]},
        {"type": "boolean", "enum": [True]},
    ]


# ------------------------------------------------------------------------------- the core call


def test_define_function_tool_returns_the_core_and_the_frozen_schema():
    core, frozen = _core.define_function_tool(
        "search",
        None,
        DOC + "\n\nArgs:\n    tags: Labels to match.\n",
        [
            ("query", {"type": "string"}, True, None, "From Annotated."),
            ("tags", {"type": "array", "items": {"type": "string"}}, False, ["a"], None),
            ("token", {}, False, None, None),
        ],
        ["token"],
        False,
        ["ctx"],
        None,
        FrozenDict,
        FrozenList,
    )
    expected = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "From Annotated."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels to match.", "default": ["a"]},
            "token": {},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert (core.name, core.description, core.documented, core.accepted) == ("search", DOC, ["tags"], ["query", "tags", "token"])
    assert frozen == expected
    assert core.parameters is frozen
    assert (type(frozen), type(frozen["properties"]), type(frozen["required"])) == (FrozenDict, FrozenDict, FrozenList)
    assert type(frozen["properties"]["tags"]["default"]) is FrozenList
    assert core.validate({"query": "q", "ctx": 1}) == {"query": "q"}


def test_define_function_tool_keeps_the_definition_errors():
    with pytest.raises(ToolDefinitionError) as err:
        _core.define_function_tool("f", None, "Too short.", [], [], False, [], None, FrozenDict, FrozenList)
    assert str(err.value) == (
        "tool 'f' needs a docstring/description of at least 30 characters (the model reads it to "
        "decide when and how to call the tool: say what it does and when to use it); got 10 chars: "
        "'Too short.'"
    )
    with pytest.raises(ToolDefinitionError) as err:
        _core.define_function_tool(
            "f", None, DOC, [("n", {"type": 5}, True, None, None)], [], False, [], None, FrozenDict, FrozenList
        )
    assert str(err.value).startswith("tool 'f': invalid JSON Schema: ")


def test_the_tool_schema_of_a_function_tool_is_frozen_and_equal_to_a_built_one():
    def search(query: str, limit: int = 10) -> list[str]:
        """Search the catalogue for products that match the query text.

        Args:
            query: The words to look for.
        """
        return []

    t = tool(search, read_only=True)
    built = ToolSchema(t.name, t.description, dict(t.schema.parameters))
    assert (t.schema, hash(t.schema)) == (built, hash(built))
    assert t.schema.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "The words to look for."},
            "limit": {"type": "integer", "default": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert type(t.schema.parameters["required"]) is FrozenList
    with pytest.raises(TypeError):
        t.schema.parameters["properties"]["query"]["type"] = "integer"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.schema.name = "other"  # type: ignore[misc]


def _ranked(query: str, limit: int = 10) -> dict[str, int]:
    """Search the catalogue for products that match the query text."""
    return {query: limit}


def test_from_callable_sets_every_field_as_the_dataclass_init_does():
    t = FunctionTool.from_callable(
        _ranked, side_effecting=True, caps=["net"], url_arg="query", output_schema={"type": "object"}, timeout_s=2.5
    )
    assert type(t) is FunctionTool
    given = {f.name: getattr(t, f.name) for f in dataclasses.fields(FunctionTool) if f.name not in ("_output", "_bound")}
    built = FunctionTool(**given)
    assert sorted(vars(t)) == sorted(vars(built)) == sorted(f.name for f in dataclasses.fields(FunctionTool))
    for key, value in vars(built).items():
        if key == "_output":
            assert (t._output.schema, t._output.expected, t._output.cls) == ({"type": "object"}, "schema", None)
            assert (value.schema, value.expected, value.cls) == ({"type": "object"}, "schema", None)
        else:
            assert getattr(t, key) is value, key
    assert (t.caps, t._bound, t.read_only, t.timeout_s) == (("net",), None, False, 2.5)
    assert tool(_ranked, read_only=True)._output is None


def test_a_subclass_of_function_tool_is_built_through_its_own_init():
    class Audited(FunctionTool):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.audited = True

    t = Audited.from_callable(_ranked, caps=["net"])
    assert (type(t), t.audited, t.caps, t.name, t.fn({"query": "q"}, None)) == (Audited, True, ("net",), "_ranked", {"q": 10})
