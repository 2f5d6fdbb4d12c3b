"""The public API of agentkit-tools under ``mypy --strict`` (a CI check: tests/test_typing.py).

Run it: ``python examples/typed_usage.py``. Type-check it: ``mypy --strict examples/typed_usage.py``.
It defines tools three ways (``@tool``, a hand-built ``FunctionTool``, ``as_tool`` over an agent),
adds the memory tool, lints them, and calls them through ``dispatch`` and an ``Invoker``.

A decorated tool keeps its function's signature for type checkers: ``misuse`` below, a
deliberate mistake (a tool returning ``int`` assigned to a ``str``), is the one error
``mypy --strict`` reports for this file ("Incompatible types in assignment").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Mapping

from agentkit_tools import (
    FileTool,
    FunctionTool,
    Invoker,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolSchema,
    as_tool,
    dispatch,
    lint,
    middleware,
    render_result,
    tool,
)
from agentkit_tools.lint import LintFinding


@tool(read_only=True)
def stock_level(sku: str, warehouse: str = "main") -> int:
    """Return how many units of an item are in stock in one warehouse.

    Args:
        sku: the item's stock-keeping unit, e.g. "A-100".
        warehouse: the warehouse to look in.
    """
    levels = {"A-100": 7, "B-200": 0}
    if sku not in levels:
        raise ToolError(f"No item {sku!r}. Check the SKU with the user.", code="not_found")
    return levels[sku]


def _echo(args: Mapping[str, Any], ctx: Any) -> str:
    return str(args["text"])


echo = FunctionTool(
    name="echo",
    fn=_echo,
    description="Repeat the given text back unchanged, for testing the loop.",
    side_effecting=False,
    schema=ToolSchema(
        "echo",
        "Repeat the given text back unchanged, for testing the loop.",
        {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to repeat."}},
            "required": ["text"],
            "additionalProperties": False,
        },
    ),
)


@dataclass
class Answer:
    output: str


class Planner:
    """Plans a restock: decides which items to reorder and in what quantity."""

    async def run(self, task: str, ctx: Any) -> Answer:
        return Answer(f"plan for: {task}")


planner: FunctionTool = as_tool(Planner(), name="planner", timeout_s=60.0)


def build_registry() -> ToolRegistry:
    registry = ToolRegistry([stock_level, echo, planner], max_result_chars=4000)
    registry.register(FileTool())
    return registry


def findings(registry: ToolRegistry) -> list[str]:
    found: list[LintFinding] = lint(registry)
    return [str(f) for f in found]


async def invoke_all(registry: ToolRegistry) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    invoker = Invoker(registry, middleware=[middleware.audit(sink=records.append), *middleware.default_chain()[1:]])
    ctx = ToolContext(run_id="typed-example")
    envelopes = await invoker.invoke_many(
        [
            {"id": "c1", "name": "stock_level", "input": {"sku": "A-100"}},
            {"id": "c2", "name": "planner", "input": {"task": "restock A-100"}},
            {"id": "c3", "name": "memory", "input": {"command": "create", "path": "/memories/a.md", "file_text": "hi"}},
        ],
        ctx,
    )
    assert [r["outcome"] for r in records if r["call_id"] == "c1"] == ["ok"]
    return envelopes


def direct_call() -> int:
    """Calling a tool directly runs the function itself, unvalidated, with its own types."""
    return stock_level("A-100", warehouse="main")


def misuse() -> None:
    """Never called: the deliberate type error that ``mypy --strict`` must report."""
    level: str = stock_level("A-100")  # stock_level returns int
    print(level)


def main() -> None:
    registry = build_registry()
    names: list[str] = registry.names()
    schemas: list[ToolSchema] = registry.schemas()
    print(names, [s.name for s in schemas])
    envelope: dict[str, Any] = dispatch({"id": "c0", "name": "stock_level", "input": {"sku": "Z"}}, registry)
    text: str = render_result(envelope, max_chars=200)
    print(text)
    for env in asyncio.run(invoke_all(registry)):
        print(render_result(env["value"] if env["ok"] else env["error"]))
    print(findings(registry))
    print(direct_call())


if __name__ == "__main__":
    main()
