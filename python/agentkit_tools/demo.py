"""The main job: ``python -m agentkit_tools demo``.

An inventory assistant with three tools: a scripted model asks for two tool calls in one turn,
then for two more, then answers; after that every rung of the failure ladder is shown with the
exact code and message the model would receive.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from . import ToolError, ToolRegistry, _core, dispatch, render_result, tool
from .testing import ScriptedModel, run_loop, text, tool_calls

INVENTORY = {
    "SKU-1001": {"name": "Astro Zoom Trainers", "warehouse": "AMS", "on_hand": 42},
    "SKU-1002": {"name": "Cirrus Rain Shell", "warehouse": "AMS", "on_hand": 0},
    "SKU-2001": {"name": "Tidal Swim Goggles", "warehouse": "SIN", "on_hand": 7},
}


def build_registry() -> ToolRegistry:
    """The demo's tools, registered in a fresh registry."""
    registry = ToolRegistry()

    @tool(read_only=True, registry=registry)
    def find_sku(query: str, limit: int = 3) -> list[dict[str, str]]:
        """Find product SKUs whose name matches a shopper's words.

        Use this first when you only have a product name and need a SKU.

        Args:
            query: Words from the product name, e.g. "rain shell".
            limit: Maximum number of matches to return. Defaults to 3.

        Returns:
            A list of {sku, name} objects, most relevant first. Empty if nothing matched.
        """
        q = query.lower()
        hits = [{"sku": k, "name": v["name"]} for k, v in INVENTORY.items() if q in v["name"].lower()]
        return hits[:limit]

    @tool(read_only=True, timeout_s=2.0, registry=registry)
    def check_stock(sku: str, warehouse: Literal["AMS", "SIN", "any"] = "any") -> dict[str, Any]:
        """Report how many units of one SKU are available to ship today.

        Args:
            sku: The exact SKU identifier, e.g. "SKU-1001". Get it from find_sku.
            warehouse: Which warehouse to check. "any" checks all of them.

        Returns:
            {sku, on_hand, warehouse, shippable}. shippable is false when on_hand is 0.
        """
        row = INVENTORY.get(sku)
        if row is None:
            raise ToolError(
                f"No product with SKU {sku!r}. Ask the shopper for the product name and call "
                "find_sku to get a valid SKU, then try again.",
                code="not_found",
            )
        if warehouse != "any" and row["warehouse"] != warehouse:
            return {"sku": sku, "on_hand": 0, "warehouse": warehouse, "shippable": False}
        return {"sku": sku, "on_hand": row["on_hand"], "warehouse": row["warehouse"], "shippable": row["on_hand"] > 0}

    @tool(read_only=True, timeout_s=0.5, registry=registry)
    def slow_report(rows: int = 100000) -> dict[str, int]:
        """Generate an inventory report. Deliberately slow, to demonstrate timeouts.

        Args:
            rows: How many rows to generate.
        """
        time.sleep(3)
        return {"rows": rows}

    @tool(read_only=True, registry=registry)
    def reorder_point(sku: str) -> int:
        """Suggest the stock level at which to reorder one SKU. Contains a deliberate bug.

        Args:
            sku: The exact SKU identifier, e.g. "SKU-1001".
        """
        row = INVENTORY[sku]
        return row["on_hand"] // row["daily_sales"]  # bug: there is no daily_sales column

    return registry


HAPPY_PATH = [
    tool_calls(
        {"id": "a1", "name": "find_sku", "input": {"query": "rain shell"}},
        {"id": "a2", "name": "find_sku", "input": {"query": "goggles"}},
    ),
    tool_calls(
        {"id": "b1", "name": "check_stock", "input": {"sku": "SKU-1002"}},
        {"id": "b2", "name": "check_stock", "input": '{"sku": "SKU-2001", "warehouse": "SIN"}'},
    ),
    text("The Cirrus Rain Shell is out of stock; 7 Tidal Swim Goggles ship from SIN."),
]

FAILURE_LADDER = [
    ("misspelt tool", {"id": "c1", "name": "chekc_stock", "input": {"sku": "SKU-1001"}}),
    ("wrong type", {"id": "c2", "name": "check_stock", "input": {"sku": 1001}}),
    ("enum violation", {"id": "c3", "name": "check_stock", "input": {"sku": "SKU-1001", "warehouse": "LHR"}}),
    ("missing argument", {"id": "c4", "name": "check_stock", "input": {}}),
    ("business failure", {"id": "c5", "name": "check_stock", "input": {"sku": "SKU-9999"}}),
    ("timeout", {"id": "c6", "name": "slow_report", "input": {}}),
    ("bug inside a tool", {"id": "c7", "name": "reorder_point", "input": {"sku": "SKU-1001"}}),
]


def _short(call_input: Any) -> str:
    return call_input if isinstance(call_input, str) else json.dumps(call_input)


def main(out: Any = print) -> int:
    """Print the demo. Returns 0 when every rung produced its expected code."""
    registry = build_registry()
    out("== registered tools ==")
    for s in registry.schemas():
        out(f"- {s.name}: {s.description.splitlines()[0]}")

    out("\n== input schema of check_stock (what the model sees and what every call is checked against) ==")
    out(json.dumps(registry.get("check_stock").schema.parameters, indent=2))

    out("\n== happy path: a scripted model, two tool calls per turn ==")
    result = run_loop(ScriptedModel(HAPPY_PATH), registry, "Do you have the rain shell and the goggles?")
    for rec in result.steps:
        out(f"  step {rec.step}  {rec.call['name']}({_short(rec.call['input'])}) -> {rec.rendered[:150]}")
    out(f"  final: {result.answer}")

    out("\n== the failure ladder: every failure is an envelope the model can act on ==")
    c = _core.codes
    # not_found: check_stock's own ToolError code
    expected = [c.UNKNOWN_TOOL, c.INVALID_ARGUMENTS, c.INVALID_ARGUMENTS, c.INVALID_ARGUMENTS, "not_found", c.TIMEOUT, c.INTERNAL_ERROR]
    codes = []
    for (label, call), want in zip(FAILURE_LADDER, expected):
        env = dispatch(call, registry)
        err = env["error"]
        codes.append(err["code"])
        out(f"- {label}: {call['name']}({_short(call['input'])})")
        out(f"    {err['code']}: {err['message']}")
    out("\n== a long result is cut for the model, with a notice saying what to do ==")
    out("  ..." + render_result({"rows": list(range(1000))}, max_chars=300)[-140:])
    return 0 if codes == expected else 1


#: The demo's registry, for the command line: ``python -m agentkit_tools schema
#: agentkit_tools.demo:registry``.
registry = build_registry()
