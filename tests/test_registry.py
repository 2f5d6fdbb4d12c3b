"""``ToolRegistry`` (SPEC §6) and ``render_result`` (SPEC §8)."""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import pytest

from agentkit_tools import FunctionTool, ToolDefinitionError, ToolRegistry, dispatch, render_result, tool


def make(name: str):
    def fn(x: int) -> int:
        """Return the integer it was given, unchanged, for tests."""
        return x

    return FunctionTool.from_callable(fn, name=name)


def test_order_is_sorted_and_byte_stable_across_registration_orders():
    a = ToolRegistry.from_tools([make("zeta"), make("alpha"), make("Mid")])
    b = ToolRegistry.from_tools([make("Mid"), make("zeta"), make("alpha")])
    assert a.names() == ["Mid", "alpha", "zeta"]
    dump = lambda r: json.dumps([[s.name, s.description, s.parameters] for s in r.schemas()])  # noqa: E731
    assert dump(a) == dump(b)
    assert [t.name for t in a.tools()] == ["zeta", "alpha", "Mid"]  # insertion order
    assert [t.name for t in a] == ["zeta", "alpha", "Mid"]
    assert (len(a), "alpha" in a, "beta" in a, 3 in a) == (3, True, False, False)


def test_register_rules():
    reg = ToolRegistry()
    t = reg.register(make("x"))
    with pytest.raises(ValueError) as err:
        reg.register(make("x"))
    assert str(err.value) == "ToolRegistry: tool 'x' already registered. Pass replace=True to swap deliberately."
    t2 = reg.register(make("x"), replace=True)
    assert reg.get("x") is t2 and reg.get("x") is not t
    with pytest.raises(KeyError) as kerr:
        reg.get("nope")
    assert kerr.value.args == ("no tool 'nope'",)

    def plain(q: str) -> str:
        """Search the catalogue for products matching the query words."""
        return q

    converted = reg.register(plain)
    assert isinstance(converted, FunctionTool) and converted.side_effecting is False

    def thin(q: str) -> str:
        """Search."""
        return q

    with pytest.raises(ToolDefinitionError):
        reg.register(thin)
    assert reg.names() == ["plain", "x"]


def test_requires_approval_and_schemaless_tools():
    @tool(side_effecting=True, requires_approval=True)
    def wire(amount: int) -> str:
        """Wire money to the saved account; needs the user's approval."""
        return "sent"

    async def hidden_fn(args, ctx):
        return 1

    hidden = FunctionTool("hidden", hidden_fn, "Not shown to the model at all.", False)
    reg = ToolRegistry.from_tools([wire, hidden])
    assert reg.requires_approval("wire") is True
    assert reg.requires_approval("hidden") is False
    assert [s.name for s in reg.schemas()] == ["wire"]


def test_render_result():
    assert render_result("plain text") == "plain text"
    assert render_result({"a": "é", "n": [1, 2]}) == '{"a": "é", "n": [1, 2]}'
    import datetime

    assert render_result({"at": datetime.date(2024, 5, 1)}) == '{"at": "2024-05-01"}'
    out = render_result("x" * 2500)
    notice = "\n...[truncated 597 chars]. Narrow your arguments (add filters or a smaller limit) and call again."
    assert out == "x" * 1903 + notice and len(out) == 2000
    assert render_result("🙂" * 200, max_chars=120) == "🙂" * 23 + "\n...[truncated 177 chars]. Narrow your arguments (add filters or a smaller limit) and call again."

    class AgentResult:
        output = "the sub-agent's answer"

    class WorkflowResult:
        outputs = {"step": "done"}

    assert render_result(AgentResult()) == "the sub-agent's answer"
    assert render_result(WorkflowResult()) == "step: done"


BAD_NAME = (
    "tool name 'research\\n' is not accepted by model providers: use 1-64 characters from a-z, A-Z, "
    "0-9, '_' and '-' (pass name=...)"
)


def test_one_name_rule_for_every_way_of_naming_a_tool():
    from agentkit_tools import as_tool

    class Researcher:
        """Researches a topic and writes up what it found, with sources."""

        async def run(self, task: str, ctx: object) -> str:
            return task

    def research(q: str) -> str:
        """Research a topic and report what was found, with sources."""
        return q

    async def body(args: object, ctx: object) -> str:
        return "x"

    attempts = {
        "@tool": lambda: tool(name="research\n", read_only=True)(research),
        "from_callable": lambda: FunctionTool.from_callable(research, name="research\n"),
        "as_tool": lambda: as_tool(Researcher(), name="research\n"),
        "register": lambda: ToolRegistry().register(
            FunctionTool("research\n", body, "Research a topic and report what was found.", False)
        ),
    }
    for how, attempt in attempts.items():
        with pytest.raises(ToolDefinitionError) as err:
            attempt()
        assert str(err.value) == BAD_NAME, how
    # the same names pass everywhere
    assert as_tool(Researcher(), name="research").name == "research"
    assert ToolRegistry([FunctionTool("research", body, "Research a topic.", False)]).names() == ["research"]


def test_a_read_only_view_leaves_out_tools_whose_effects_are_undeclared():
    def lookup(q: str) -> str:
        """Look the query up in the catalogue and return the best match."""
        return q

    undeclared = FunctionTool.from_callable(lookup, name="undeclared")
    declared = FunctionTool.from_callable(lookup, name="declared", side_effecting=False)
    writer = FunctionTool.from_callable(lookup, name="writer", side_effecting=True)
    assert (undeclared.effects_declared, declared.effects_declared) == (False, True)
    reg = ToolRegistry([undeclared, declared, writer])
    assert reg.view(read_only=True).names() == ["declared"]
    # the two views split the registry: a tool not known to be read-only may change something
    assert reg.view(read_only=False).names() == ["undeclared", "writer"]
    assert reg.view().names() == ["declared", "undeclared", "writer"]


@pytest.mark.parametrize("non_blocking", [True, False], ids=["on-this-thread", "on-a-worker"])
def test_a_tool_whose_body_refers_to_its_own_registry_is_collected(non_blocking: bool) -> None:
    """Whether the body ran on the caller's thread or on a worker (which keeps nothing of a call
    once it has handed the outcome over)."""

    def make() -> tuple[Any, Any]:
        reg = ToolRegistry()

        @tool(read_only=True, non_blocking=non_blocking)
        def echo(x: int) -> int:
            """Return the integer x it was given, unchanged."""
            return x if reg else -x  # the body refers to its registry: registry -> tool -> fn -> registry

        reg.register(echo)
        assert dispatch({"id": "1", "name": "echo", "input": {"x": 3}}, reg)["value"] == 3
        return weakref.ref(reg), weakref.ref(echo)

    reg, echo = make()
    gc.collect()
    assert (reg(), echo()) == (None, None)
