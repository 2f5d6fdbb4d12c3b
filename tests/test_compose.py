"""``as_tool``: a runnable (agent, workflow, loop) as a tool taking one ``task`` (SPEC §8)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

import agentkit_tools
from agentkit_tools import (
    FunctionTool,
    Invoker,
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolRegistry,
    as_tool,
    dispatch,
    lint,
    middleware as mw,
)
from agentkit_tools.compose import TASK_DESCRIPTION

SCHEMA = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "The complete task in plain language, with every detail needed to do "
            "it: the sub-run does not see this conversation.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


@dataclasses.dataclass
class AgentResult:
    output: str


@dataclasses.dataclass
class WorkflowResult:
    outputs: dict[str, Any]


class Researcher:
    """Researches a topic and answers with a short summary that cites its sources.

    Args:
        model: not a tool argument; documented for humans.
    ---
    Internal: uses the search tool twice per question.
    """

    def __init__(self, result: Any = None, exc: BaseException | None = None) -> None:
        self.result = result
        self.exc = exc
        self.seen: list[tuple[str, Any]] = []

    async def run(self, task: str, ctx: Any) -> Any:
        self.seen.append((task, ctx))
        if self.exc is not None:
            raise self.exc
        return self.result if self.result is not None else AgentResult(f"summary of {task}")


class Plain:
    async def run(self, task: str, ctx: Any) -> str:
        return task.upper()


@dataclasses.dataclass
class DataRunner:
    model: str = "m"

    async def run(self, task: str, ctx: Any) -> str:
        return task


def without_elapsed(env: dict[str, Any]) -> dict[str, Any]:
    out = dict(env)
    assert isinstance(out.pop("elapsed_ms"), float)
    return out


# ------------------------------------------------------------------ definition


def test_exported_from_package():
    assert agentkit_tools.as_tool is as_tool
    assert "as_tool" in agentkit_tools.__all__


def test_schema_flags_and_explicit_description():
    t = as_tool(
        Researcher(),
        name="research",
        description="  Research a topic and answer with cited sources.  ",
        side_effecting=True,
        requires_approval=True,
    )
    assert isinstance(t, FunctionTool)
    assert t.name == "research"
    assert t.description == "Research a topic and answer with cited sources."
    assert t.schema is not None
    assert t.schema.name == "research"
    assert t.schema.description == "Research a topic and answer with cited sources."
    assert t.schema.parameters == SCHEMA
    assert list(t.schema.parameters) == ["type", "properties", "required", "additionalProperties"]
    assert t.schema.parameters["properties"]["task"]["description"] == TASK_DESCRIPTION
    assert (t.side_effecting, t.requires_approval, t.idempotent, t.timeout_s) == (True, True, False, None)
    assert t.to_anthropic() == {
        "name": "research",
        "description": "Research a topic and answer with cited sources.",
        "input_schema": SCHEMA,
    }


def test_defaults_are_read_only_without_approval():
    t = as_tool(Researcher(), name="research", timeout_s=120.0)
    assert (t.side_effecting, t.requires_approval, t.timeout_s) == (False, False, 120.0)


def test_description_falls_back_to_the_docstring_parsed_by_the_docstring_rules():
    t = as_tool(Researcher(), name="research")
    # Sections and everything below `---` are not shown to the model (SPEC §2).
    assert t.description == "Researches a topic and answers with a short summary that cites its sources."


def test_description_falls_back_to_a_sentence_naming_the_runnable():
    t = as_tool(Plain(), name="plain")
    assert t.description == (
        "Hands a task to Plain and returns its final answer as text. Describe the whole task in "
        "the task argument."
    )


def test_sentence_uses_the_runnable_name_attribute():
    runner = Plain()
    runner.name = "billing-agent"  # type: ignore[attr-defined]
    t = as_tool(runner, name="billing")
    assert t.description.startswith("Hands a task to billing-agent and returns")


def test_dataclass_signature_doc_is_not_a_description():
    assert DataRunner.__doc__ is not None and DataRunner.__doc__.startswith("DataRunner(model: ")
    t = as_tool(DataRunner(), name="data")
    assert t.description == (
        "Hands a task to DataRunner and returns its final answer as text. Describe the whole task "
        "in the task argument."
    )


def test_short_description_has_no_floor_and_lint_reports_it():
    # As in the reference, as_tool has no 30-character floor (its description defaults to "").
    class Terse:
        """Agent."""

        async def run(self, task, ctx):
            return task

    for t, text in ((as_tool(Plain(), name="plain", description="Does things."), "Does things."),
                    (as_tool(Terse(), name="terse"), "Agent.")):
        assert (t.description, t.schema.description) == (text, text)
        assert [(f.code, f.message) for f in lint(t) if f.code == "short_description"] == [
            ("short_description", f"the description has {len(text)} characters (floor 30): say what the tool "
             "does and when to use it")
        ]


def test_todo_in_the_runnable_docstring_is_refused():
    class Todo:
        """Summarises a document for the user in five bullet points.

        TODO: handle PDFs
        """

        async def run(self, task: str, ctx: Any) -> str:
            return task

    with pytest.raises(ToolDefinitionError, match="TODO"):
        as_tool(Todo(), name="todo")


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.not.allowed"])
def test_bad_name_is_refused(name):
    with pytest.raises(ToolDefinitionError) as err:
        as_tool(Plain(), name=name)
    assert str(err.value) == (
        f"tool name {name!r} is not accepted by model providers: use 1-64 characters from a-z, "
        "A-Z, 0-9, '_' and '-' (pass name=...)"
    )


def test_object_without_run_is_refused():
    with pytest.raises(ToolDefinitionError) as err:
        as_tool(42, name="answer")
    assert str(err.value) == (
        "as_tool: 42 has no run method; pass an object with `async run(task, ctx)` (an agent, a "
        "workflow or a loop)"
    )


# ------------------------------------------------------------------ running


def test_runs_on_a_child_context_and_renders_output():
    agent = Researcher()
    registry = ToolRegistry([as_tool(agent, name="research")])
    parent = ToolContext(run_id="parent-run")
    env = dispatch({"id": "c1", "name": "research", "input": {"task": "tides"}}, registry, ctx=parent)
    assert without_elapsed(env) == {"ok": True, "value": "summary of tides"}
    [(task, sub_ctx)] = agent.seen
    assert task == "tides"
    assert isinstance(sub_ctx, ToolContext)
    assert sub_ctx is not parent
    assert sub_ctx.parent is parent
    assert re.fullmatch(r"parent-run/[0-9a-f]{12}", sub_ctx.run_id)


def test_any_context_with_child_is_used():
    class Ctx:
        def __init__(self) -> None:
            self.children: list[str] = []

        def child(self) -> str:
            self.children.append("made")
            return "the-child-context"

    agent = Researcher(result="done")
    ctx = Ctx()
    registry = ToolRegistry([as_tool(agent, name="research")])
    env = dispatch({"id": "c1", "name": "research", "input": '{"task": "x"}'}, registry, ctx=ctx)
    assert without_elapsed(env) == {"ok": True, "value": "done"}
    assert agent.seen == [("x", "the-child-context")]
    assert ctx.children == ["made"]


def test_context_without_child_is_passed_as_is_and_none_stays_none():
    agent = Researcher(result="done")
    registry = ToolRegistry([as_tool(agent, name="research")])
    ctx = object()
    dispatch({"id": "c1", "name": "research", "input": {"task": "a"}}, registry, ctx=ctx)
    dispatch({"id": "c2", "name": "research", "input": {"task": "b"}}, registry)
    assert agent.seen == [("a", ctx), ("b", None)]


@pytest.mark.parametrize(
    ("result", "text"),
    [
        (AgentResult("The answer is 42."), "The answer is 42."),
        # A workflow's outputs: one `key: value` line each (strings as they are, the rest as JSON).
        (WorkflowResult({"draft": "v1", "score": 0.5}), "draft: v1\nscore: 0.5"),
        ("plain text", "plain text"),
        ({"städte": ["Köln"]}, '{"städte": ["Köln"]}'),
        ([1, 2], "[1, 2]"),
    ],
)
def test_result_rendering(result, text):
    registry = ToolRegistry([as_tool(Researcher(result=result), name="research")])
    env = dispatch({"id": "c1", "name": "research", "input": {"task": "q"}}, registry)
    assert without_elapsed(env) == {"ok": True, "value": text}


def test_result_is_not_cut_by_as_tool():
    long = "x" * 5000
    registry = ToolRegistry([as_tool(Researcher(result=AgentResult(long)), name="research")])
    env = dispatch({"id": "c1", "name": "research", "input": {"task": "q"}}, registry)
    assert env["value"] == long


def test_custom_render():
    t = as_tool(
        Researcher(result=AgentResult("raw")),
        name="research",
        render=lambda r: f"[{type(r).__name__}] {r.output}",
    )
    env = dispatch({"id": "c1", "name": "research", "input": {"task": "q"}}, ToolRegistry([t]))
    assert without_elapsed(env) == {"ok": True, "value": "[AgentResult] raw"}


def test_runnable_tool_error_becomes_its_envelope():
    exc = ToolError("No source covers that topic. Ask the user to narrow it.", code="not_found", topic="q")
    registry = ToolRegistry([as_tool(Researcher(exc=exc), name="research")])
    env = dispatch({"id": "c1", "name": "research", "input": {"task": "q"}}, registry)
    assert env == {
        "ok": False,
        "error": {
            "topic": "q",
            "code": "not_found",
            "message": "No source covers that topic. Ask the user to narrow it.",
            "retriable": False,
        },
    }


def test_runnable_crash_becomes_internal_error():
    registry = ToolRegistry([as_tool(Researcher(exc=RuntimeError("boom")), name="research")])
    env = dispatch({"id": "c1", "name": "research", "input": {"task": "q"}}, registry)
    assert env == {
        "ok": False,
        "error": {
            "code": "internal_error",
            "message": "research failed: RuntimeError: boom. This is a bug in the tool, not in your "
            "arguments; do not retry.",
        },
    }


def test_missing_or_mistyped_task_never_reaches_the_runnable():
    agent = Researcher()
    registry = ToolRegistry([as_tool(agent, name="research")])
    env = dispatch({"id": "c1", "name": "research", "input": {"task": 7, "extra": 1}}, registry)
    assert env["ok"] is False
    assert env["error"]["code"] == "invalid_arguments"
    assert env["error"]["errors"] == [
        {"path": "extra", "reason": "unexpected argument: this tool does not take it"},
        {"path": "task", "reason": "expected string, got integer 7"},
    ]
    assert env["error"]["schema"] == SCHEMA
    assert agent.seen == []


async def test_through_the_invoker_with_audit():
    records: list[dict[str, Any]] = []
    agent = Researcher()
    invoker = Invoker(ToolRegistry([as_tool(agent, name="research")]), middleware=[mw.audit(sink=records.append)])
    parent = ToolContext(run_id="conv-1")
    envs = await invoker.invoke_many(
        [
            {"id": "a", "name": "research", "input": {"task": "one"}},
            {"id": "b", "name": "research", "input": {"task": "two"}},
        ],
        parent,
    )
    assert [without_elapsed(e) for e in envs] == [
        {"ok": True, "value": "summary of one"},
        {"ok": True, "value": "summary of two"},
    ]
    children = [ctx for _, ctx in agent.seen]
    assert all(c.parent is parent for c in children)
    assert len({c.run_id for c in children}) == 2
    assert sorted((r["call_id"], r["tool"], r["outcome"], r["decision"], r["attempts"]) for r in records) == [
        ("a", "research", "ok", "executed", 1),
        ("b", "research", "ok", "executed", 1),
    ]


async def test_direct_run_validates_and_renders():
    t = as_tool(Researcher(), name="research")
    assert await t.run({"task": "moon"}, None) == "summary of moon"
