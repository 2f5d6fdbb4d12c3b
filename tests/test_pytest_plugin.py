"""The pytest plugin (SPEC §9): its entry point, and its fixtures as a user's test file sees them
(run in a fresh pytest session with ``pytester``)."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from agentkit_tools import tool
from agentkit_tools.testing import assert_tool_schema

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

# The example of the README ("Test with the pytest plugin"), verbatim.
EXAMPLE = '''
import asyncio

from agentkit_tools import tool
from agentkit_tools.testing import run_loop, text, tool_calls


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers and return their sum to the caller."""
    return a + b


def test_schema(assert_tool_schema):
    assert_tool_schema(add, {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    })


def test_agent_loop(tool_registry, scripted_model):
    tool_registry.register(add)
    model = scripted_model([
        tool_calls({"id": "c1", "name": "add", "input": {"a": 2, "b": 3}}),
        text("2 + 3 = 5"),
    ])
    result = run_loop(model, tool_registry, "What is 2 + 3?")
    assert result.answer == "2 + 3 = 5"
    assert [step.envelope["value"] for step in result.steps] == [5]


def test_invoker_audit(tool_registry, invoker, audit_records):
    tool_registry.register(add)
    envelope = asyncio.run(invoker.invoke({"id": "c1", "name": "add", "input": {"a": "2", "b": 3}}))
    assert envelope["error"]["code"] == "invalid_arguments"
    assert [(r["tool"], r["outcome"], r["decision"]) for r in audit_records] == [
        ("add", "invalid_arguments", "failed"),
    ]
'''

FAILING = '''

def test_schema_mismatch(assert_tool_schema):
    assert_tool_schema(add, {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    })
'''

MORE = '''
import asyncio

import pytest

from agentkit_tools import Invoker, ToolError, ToolRegistry, tool
from agentkit_tools.testing import ScriptedModel


@tool(read_only=True)
def flaky(n: int) -> int:
    """Fails twice with a retriable error, then returns n."""
    flaky.calls += 1
    if flaky.calls < 3:
        raise ToolError("backend busy; try again", code="busy", retriable=True)
    return n


flaky.calls = 0


def test_fresh_registry_per_test_a(tool_registry):
    assert isinstance(tool_registry, ToolRegistry)
    tool_registry.register(flaky)
    assert tool_registry.names() == ["flaky"]


def test_fresh_registry_per_test_b(tool_registry):
    assert len(tool_registry) == 0


def test_scripted_model_factory(scripted_model):
    model = scripted_model([{"type": "text", "text": "hi"}])
    assert isinstance(model, ScriptedModel)
    assert model([], []) == {"type": "text", "text": "hi"}
    assert model.remaining == 0


def test_invoker_retries_without_sleeping(tool_registry, invoker, audit_records):
    assert isinstance(invoker, Invoker)
    assert invoker.registry is tool_registry
    assert invoker.audit_records is audit_records
    assert [m.name for m in invoker.middleware] == [
        "audit", "approval", "repeat_guard", "idempotency", "retry", "timeout",
    ]
    tool_registry.register(flaky)
    env = asyncio.run(invoker.invoke({"id": "c9", "name": "flaky", "input": {"n": 4}}))
    assert (env["ok"], env["value"]) == (True, 4)
    assert len(invoker.retry_delays) == 2
    assert 0.0 <= invoker.retry_delays[0] < 0.5 and 0.0 <= invoker.retry_delays[1] < 1.0
    [record] = audit_records
    del record["elapsed_ms"]
    assert record == {
        "tool": "flaky",
        "call_id": "c9",
        "args_hash": record["args_hash"],
        "outcome": "ok",
        "attempts": 3,
        "decision": "executed",
    }
    assert len(record["args_hash"]) == 16


def test_no_schema(assert_tool_schema):
    class Hidden:
        name = "hidden"
        schema = None

    with pytest.raises(AssertionError) as err:
        assert_tool_schema(Hidden(), {})
    assert str(err.value) == "tool 'hidden' has no input schema (schema=None: the model is not shown it)"
'''


def _plugin_args() -> list[str]:
    """Load the plugin the way this environment can: through its ``pytest11`` entry point when the
    package is installed (a wheel), else by module name (the source tree on ``sys.path``)."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "agentkit_tools" in names else ["-p", "agentkit_tools.pytest_plugin"]


@pytest.mark.skipif(tomllib is None, reason="tomllib is Python 3.11+")
def test_entry_point_and_extra_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"agentkit_tools": "agentkit_tools.pytest_plugin"}
    assert project["optional-dependencies"]["pytest"] == ["pytest>=8"]


def test_readme_example_passes(pytester):
    pytester.makepyfile(test_example=EXAMPLE)
    result = pytester.runpytest(*_plugin_args(), "-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(passed=3)


def test_failing_schema_assertion_shows_a_diff(pytester):
    pytester.makepyfile(test_example=EXAMPLE + FAILING)
    result = pytester.runpytest(*_plugin_args(), "-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*_ test_schema_mismatch _*"])
    result.stdout.fnmatch_lines(
        [
            "E       AssertionError: tool 'add': input schema differs from expected (- expected, + actual):",
            "E       --- expected",
            "E       +++ actual",
            "E       @@ -2,7 +2,7 @@",
            'E          "type": "object",',
            'E          "properties": {',
            'E            "a": {',
            'E       -      "type": "number"',
            'E       +      "type": "integer"',
            "E            },",
            'E            "b": {',
            'E              "type": "integer"',
            "",
            "test_example.py:*: AssertionError",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(["FAILED test_example.py::test_schema_mismatch - AssertionError: tool 'add'*"])


def test_fixture_details(pytester):
    pytester.makepyfile(test_more=MORE)
    result = pytester.runpytest(*_plugin_args(), "-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(passed=5)


# ------------------------------------------------------------------ assert_tool_schema directly


@tool(read_only=True)
def add(a: int, b: int = 2) -> int:
    """Add two integers and return their sum to the caller."""
    return a + b


ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
    "required": ["a"],
    "additionalProperties": False,
}


def test_assert_tool_schema_passes_on_equal_schemas():
    assert_tool_schema(add, ADD_SCHEMA)
    assert_tool_schema(add.schema, ADD_SCHEMA)
    reordered = {"required": ["a"], **{k: v for k, v in ADD_SCHEMA.items() if k != "required"}}
    assert_tool_schema(add, reordered)  # key order is not compared by default


def test_assert_tool_schema_ordered_compares_key_order():
    reordered = {"required": ["a"], **{k: v for k, v in ADD_SCHEMA.items() if k != "required"}}
    assert_tool_schema(add, ADD_SCHEMA, ordered=True)
    with pytest.raises(AssertionError) as err:
        assert_tool_schema(add, reordered, ordered=True)
    assert str(err.value).splitlines() == [
        "tool 'add': input schema differs from expected (- expected, + actual):",
        "--- expected",
        "+++ actual",
        "@@ -1,7 +1,4 @@",
        " {",
        '-  "required": [',
        '-    "a"',
        "-  ],",
        '   "type": "object",',
        '   "properties": {',
        '     "a": {',
        "@@ -12,5 +9,8 @@",
        '       "default": 2',
        "     }",
        "   },",
        '+  "required": [',
        '+    "a"',
        "+  ],",
        '   "additionalProperties": false',
        " }",
    ]


def test_assert_tool_schema_diff_keeps_non_ascii():
    with pytest.raises(AssertionError) as err:
        assert_tool_schema(add, {**ADD_SCHEMA, "description": "Zählt"})
    assert str(err.value).splitlines() == [
        "tool 'add': input schema differs from expected (- expected, + actual):",
        "--- expected",
        "+++ actual",
        "@@ -12,6 +12,5 @@",
        '   "required": [',
        '     "a"',
        "   ],",
        '-  "additionalProperties": false,',
        '-  "description": "Zählt"',
        '+  "additionalProperties": false',
        " }",
    ]
