"""Defining tools: the declaration rule, names, descriptions from docstrings, context injection
(SPEC §1, §2, §11)."""

from __future__ import annotations

import asyncio
import dataclasses
import typing

import pytest

from agentkit_tools import FunctionTool, ToolDefinitionError, ToolRegistry, ToolSchema, tool

DOC = "Look up the current weather for one city, in metric units."


def weather(city: str, days: int = 1) -> dict:
    """Look up the current weather for one city, in metric units.

    Use it before suggesting clothes or travel plans.

    Args:
        city (str): The city's name, e.g. "Lisbon".
        days (int, optional): How many days to forecast,
            counting today.

    Returns:
        A dict with temperature in °C and a summary line.

    ---
    TODO: cache the upstream call (only humans read this part).
    """
    return {"city": city, "days": days}


def test_google_docstring_becomes_description_and_property_descriptions():
    t = tool(weather, read_only=True)
    assert t.description == (
        "Look up the current weather for one city, in metric units.\n\n"
        "Use it before suggesting clothes or travel plans.\n\n"
        "Returns: A dict with temperature in °C and a summary line."
    )
    assert dict(t.schema.parameters) == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": 'The city\'s name, e.g. "Lisbon".'},
            "days": {"type": "integer", "description": "How many days to forecast, counting today.", "default": 1},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert t.schema == ToolSchema("weather", t.description, t.schema.parameters)


def test_numpy_and_sphinx_docstrings():
    def numpy_style(x: int, y: int) -> int:
        """Add two integers and return their exact sum.

        Parameters
        ----------
        x, y : int
            The numbers to add.
        """
        return x + y

    def sphinx_style(path: str) -> str:
        """Read a text file from the project workspace.

        :param str path: Path relative to the workspace root.
        :returns: The file's text.
        """
        return path

    n = tool(numpy_style, read_only=True)
    assert [p["description"] for p in n.schema.parameters["properties"].values()] == [
        "The numbers to add.",
        "The numbers to add.",
    ]
    s = tool(sphinx_style, read_only=True)
    assert s.description == "Read a text file from the project workspace.\n\nReturns: The file's text."
    assert s.schema.parameters["properties"]["path"]["description"] == "Path relative to the workspace root."


def test_declaration_is_mandatory():
    with pytest.raises(ToolDefinitionError, match="side_effecting"):
        tool(weather)
    with pytest.raises(ToolDefinitionError, match="side_effecting"):

        @tool
        def bare(x: int) -> int:
            """A tool declared with a bare decorator and no flags at all."""
            return x

    with pytest.raises(ToolDefinitionError, match="contradict"):
        tool(weather, side_effecting=True, read_only=True)
    assert tool(weather, side_effecting=None).side_effecting is False
    assert tool(weather, read_only=False).side_effecting is True
    assert tool(weather, side_effecting=True, read_only=False).side_effecting is True


def test_description_floor_and_markers():
    def short(x: int) -> int:
        """Too short."""
        return x

    with pytest.raises(ToolDefinitionError) as err:
        tool(short, read_only=True)
    assert str(err.value) == (
        "tool 'short' needs a docstring/description of at least 30 characters (the model reads "
        "it to decide when and how to call the tool: say what it does and when to use it); got 10 "
        "chars: 'Too short.'"
    )
    # An explicit description is used as given.
    t = tool(short, read_only=True, description="  Doubles nothing; returns x as it was given.  ")
    assert t.description == "Doubles nothing; returns x as it was given."

    def marked(x: int) -> int:
        """Return x unchanged, for tests of the marker rule.

        - FIXME: handle negative x
        """
        return x

    with pytest.raises(ToolDefinitionError, match=r"^tool 'marked': .*FIXME.*'---'"):
        tool(marked, read_only=True)


def test_names():
    assert tool(weather, read_only=True, name="get_weather").name == "get_weather"
    assert tool(weather, read_only=True, name="").name == "weather"
    with pytest.raises(ToolDefinitionError, match="not accepted by model providers"):
        tool(weather, read_only=True, name="get weather!")


def test_flags_and_dataclass_field_order():
    t = tool(
        weather,
        side_effecting=True,
        idempotent=True,
        requires_approval=True,
        caps=("net",),
        url_arg=None,
        timeout_s=2.5,
        max_result_chars=500,
    )
    names = [f.name for f in dataclasses.fields(FunctionTool)]
    assert names[:10] == [
        "name", "fn", "description", "side_effecting", "schema", "idempotent",
        "requires_approval", "caps", "url_arg", "output_schema",
    ]
    assert (t.side_effecting, t.idempotent, t.requires_approval, t.caps, t.timeout_s, t.max_result_chars) == (
        True, True, True, ("net",), 2.5, 500,
    )
    with pytest.raises(ToolDefinitionError, match="url_arg='url' is not one of its parameters"):
        tool(weather, read_only=True, url_arg="url")


def test_decorated_name_is_the_tool_and_the_function_stays_callable():
    @tool(read_only=True)
    def add(a: int, b: int = 2) -> int:
        """Add two integers and return the sum of both."""
        return a + b

    assert isinstance(add, FunctionTool)
    assert add(a=1) == 3  # direct call: the user's function, unvalidated
    assert add("x", b="y") == "xy"
    assert add.func is add.__wrapped__
    assert add.fn({"a": 1, "b": 5}, None) == 6


def test_context_injection_self_cls_kwargs_and_star_args():
    class RunContext:
        pass

    class Svc:
        def lookup(self, key: str, ctx: "RunContext") -> str:
            """Look a key up in this service's cache and return it."""
            return f"{key}:{type(ctx).__name__}"

        @classmethod
        def make(cls, n: int, context=None) -> str:
            """Build a thing of size n with the class's factory method."""
            return f"{cls.__name__}:{n}:{context}"

    t = FunctionTool.from_callable(Svc().lookup)
    assert list(t.schema.parameters["properties"]) == ["key"]
    assert asyncio.run(t.run({"key": "k", "ctx": "dropped"}, RunContext())) == "k:RunContext"
    c = FunctionTool.from_callable(Svc.make)
    assert list(c.schema.parameters["properties"]) == ["n"]
    assert asyncio.run(c.run({"n": 2}, "C")) == "Svc:2:C"

    def ctx_is_data(context: str) -> str:
        """Echo the context string the model sends back to it."""
        return context

    d = FunctionTool.from_callable(ctx_is_data)
    assert list(d.schema.parameters["properties"]) == ["context"]

    def open_kwargs(a: int, **extra: typing.Any) -> dict:
        """Collect every extra keyword argument the model sends."""
        return {"a": a, **extra}

    k = FunctionTool.from_callable(open_kwargs)
    assert "additionalProperties" not in k.schema.parameters
    assert asyncio.run(k.run({"a": 1, "b": [2]}, None)) == {"a": 1, "b": [2]}

    def star(*names: str) -> int:
        """Count the names the caller passed to this function."""
        return len(names)

    with pytest.raises(ToolDefinitionError, match=r"'\*names'.*names: list\[str\]"):
        FunctionTool.from_callable(star)


def test_registry_param_registers():
    reg = ToolRegistry()

    @tool(read_only=True, registry=reg)
    def ping(host: str) -> str:
        """Ping one host on the network and report if it answers."""
        return host

    assert reg.get("ping") is ping


def test_schema_parameters_are_frozen():
    t = tool(weather, read_only=True)
    with pytest.raises(TypeError, match="frozen value"):
        t.schema.parameters["properties"]["city"]["type"] = "integer"
    assert hash(t.schema) == hash(("weather", t.description))


def test_a_tool_decorated_in_its_class_body_binds_to_each_instance():
    from agentkit_tools import dispatch

    class Shop:
        def __init__(self, name: str) -> None:
            self.name = name

        @tool(read_only=True, timeout_s=3.0)
        def search(self, q: str) -> str:
            """Search this shop's catalogue for products matching the words."""
            return f"{self.name}:{q}"

        @tool(read_only=True)
        @classmethod
        def kind(cls, n: int) -> str:
            """Describe the kind of shop this class models, n times over."""
            return f"{cls.__name__}*{n}"

    a, b = Shop("a"), Shop("b")
    assert a.search is a.search and a.search is not b.search
    assert Shop.search is Shop.__dict__["search"]  # through the class: the unbound tool itself
    assert (a.search.name, a.search.timeout_s, a.search.description) == (
        "search", 3.0, "Search this shop's catalogue for products matching the words.",
    )
    reg = ToolRegistry.from_tools([b.search, Shop.kind])
    assert dispatch({"name": "search", "input": {"q": "x"}}, reg)["value"] == "b:x"
    assert dispatch({"name": "kind", "input": {"n": 2}}, reg)["value"] == "Shop*2"
    assert a.search(q="direct") == "a:direct"


@pytest.mark.parametrize("bad", [-1, 0, 0.0, -0.5, float("nan"), float("inf"), float("-inf"), True, False, "5", 2_592_001, 1e300])
def test_timeout_s_that_is_not_a_deadline_is_refused_everywhere(bad):
    from agentkit_tools.compose import as_tool

    def lookup(sku: str) -> str:
        """Look up one stock-keeping unit and return its record."""
        return sku

    expected = (
        f"tool 'lookup': timeout_s={bad!r} is not a deadline; pass a number of seconds greater than 0 and at "
        "most 2592000 (30 days), or None for the dispatcher's default of 10 s"
    )
    with pytest.raises(ToolDefinitionError) as info:
        tool(read_only=True, timeout_s=bad)(lookup)
    assert str(info.value) == expected
    with pytest.raises(ToolDefinitionError) as info:
        FunctionTool.from_callable(lookup, timeout_s=bad)
    assert str(info.value) == expected
    with pytest.raises(ToolDefinitionError) as info:
        FunctionTool("lookup", lambda args, ctx: None, "Looks up one stock-keeping unit.", False, timeout_s=bad)
    assert str(info.value) == expected

    class Agent:
        async def run(self, task, ctx):
            return task

    with pytest.raises(ToolDefinitionError) as info:
        as_tool(Agent(), name="lookup", timeout_s=bad)
    assert str(info.value) == expected


@pytest.mark.parametrize("bad", [0, -3, True, "2000", 2000.0, 1.5, 2**63, 10**30])
def test_max_result_chars_that_is_not_a_limit_is_refused(bad):
    # 10**30 was accepted, and rendering the tool's result then raised OverflowError ("int too
    # big to convert") in the provider round-trips and the MCP server.
    def lookup(sku: str) -> str:
        """Look up one stock-keeping unit and return its record."""
        return sku

    with pytest.raises(ToolDefinitionError) as info:
        tool(read_only=True, max_result_chars=bad)(lookup)
    assert str(info.value) == (
        f"tool 'lookup': max_result_chars={bad!r} is not a limit; pass a whole number of characters (at least "
        "1, at most 9223372036854775807), or None for the registry's limit (default 2000)"
    )


@pytest.mark.parametrize("bad", [0, -1, True, "5", 2.5])
def test_registry_limits_that_are_not_limits_are_refused(bad):
    with pytest.raises(ToolDefinitionError) as info:
        ToolRegistry(max_result_chars=bad)
    assert str(info.value) == (
        f"ToolRegistry: max_result_chars={bad!r} is not a limit; pass a whole number of characters (at least "
        "1, at most 9223372036854775807), or None for the registry's limit (default 2000)"
    )
    with pytest.raises(ToolDefinitionError) as info:
        ToolRegistry(max_media_bytes=bad)
    assert str(info.value) == (
        f"ToolRegistry: max_media_bytes={bad!r} is not a limit; pass a whole number of bytes (at least 1), or "
        "None for the default of 5 MiB"
    )
    reg = ToolRegistry(max_result_chars=1, max_media_bytes=1)
    assert (reg.max_result_chars, reg.max_media_bytes) == (1, 1)


def test_the_largest_max_result_chars_renders_results():
    from agentkit_tools import dispatch
    from agentkit_tools.roundtrip import tool_result_text

    @tool(read_only=True, max_result_chars=2**63 - 1)
    def lookup(sku: str) -> str:
        """Look up one stock-keeping unit and return its record."""
        return sku * 3

    env = dispatch({"id": "1", "name": "lookup", "input": {"sku": "ab"}}, ToolRegistry([lookup]))
    assert tool_result_text(env, max_chars=lookup.max_result_chars) == "ababab"
    with pytest.raises(ToolDefinitionError) as info:
        ToolRegistry(max_result_chars=2**63)
    assert str(info.value) == (
        "ToolRegistry: max_result_chars=9223372036854775808 is not a limit; pass a whole number of characters "
        "(at least 1, at most 9223372036854775807), or None for the registry's limit (default 2000)"
    )


def test_good_numeric_options_are_kept_as_given():
    def lookup(sku: str) -> str:
        """Look up one stock-keeping unit and return its record."""
        return sku

    t = tool(read_only=True, timeout_s=2_592_000, max_result_chars=1)(lookup)
    assert (t.timeout_s, t.max_result_chars) == (2_592_000, 1)
    t = tool(read_only=True, timeout_s=0.001)(lookup)
    assert t.timeout_s == 0.001
