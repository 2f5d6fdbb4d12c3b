"""The main job and the offline loop helpers."""

from __future__ import annotations

import subprocess
import sys

from agentkit_tools import ToolRegistry, tool
from agentkit_tools.testing import ScriptedModel, run_loop, text, tool_calls


def test_demo_runs_and_shows_every_rung():
    proc = subprocess.run([sys.executable, "-m", "agentkit_tools", "demo"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for line in [
        "- check_stock: Report how many units of one SKU are available to ship today.",
        "  final: The Cirrus Rain Shell is out of stock; 7 Tidal Swim Goggles ship from SIN.",
        "    unknown_tool: No tool named 'chekc_stock'. Did you mean 'check_stock'? Available tools: check_stock, "
        "find_sku, reorder_point, slow_report. Call one of those instead.",
        "    not_found: No product with SKU 'SKU-9999'. Ask the shopper for the product name and call find_sku to "
        "get a valid SKU, then try again.",
        "    timeout: slow_report did not finish within 0.5s. Do not retry immediately; tell the user the backend is slow.",
        "    internal_error: reorder_point failed: KeyError: 'daily_sales'. This is a bug in the tool, not in your "
        "arguments; do not retry.",
    ]:
        assert line in out.splitlines(), line
    assert out.count("    invalid_arguments: ") == 3
    assert '  step 1  check_stock({"sku": "SKU-2001", "warehouse": "SIN"}) -> {"ok": true, "value": {"sku": "SKU-2001", "on_hand": 7, "warehouse": "SIN", "shippable": true}' in out


def test_run_loop_feeds_results_back_in_call_order():
    @tool(read_only=True)
    def double(n: int) -> int:
        """Double an integer and return the product of n and two."""
        return n * 2

    reg = ToolRegistry.from_tools([double])
    model = ScriptedModel(
        [tool_calls({"id": "1", "name": "double", "input": {"n": 2}}, {"id": "2", "name": "double", "input": {"n": "x"}}), text("4")]
    )
    result = run_loop(model, reg, "double 2")
    assert result.answer == "4" and not result.reached_limit
    assert [r["tool_use_id"] for r in result.messages[2]["content"]] == ["1", "2"]
    assert [r["is_error"] for r in result.messages[2]["content"]] == [False, True]
    assert result.messages[2]["content"][0]["content"].startswith('{"ok": true, "value": 4, "elapsed_ms": ')
    assert model.remaining == 0 and len(model.requests) == 2
    assert model.requests[0][1] == reg.schemas()
    stuck = run_loop(ScriptedModel([tool_calls({"id": "x", "name": "double", "input": {"n": 1}})] * 3), reg, "go", max_steps=2)
    assert (stuck.answer, stuck.reached_limit, len(stuck.steps)) == ("(step limit reached)", True, 2)
