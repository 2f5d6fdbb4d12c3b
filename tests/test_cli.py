"""The command line: ``call`` and ``replay`` (SPEC §9)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

TRACE = pathlib.Path(__file__).parent / "data" / "demo_trace.jsonl"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentkit_tools", *args], capture_output=True, text=True, timeout=60)


def test_call_prints_the_envelope():
    proc = cli("call", "agentkit_tools.demo:registry", '{"sku": "SKU-2001"}', "--tool", "check_stock")
    assert proc.returncode == 0, proc.stderr
    envelope = json.loads(proc.stdout)
    assert envelope["value"] == {"sku": "SKU-2001", "on_hand": 7, "warehouse": "SIN", "shippable": True}
    proc = cli("call", "agentkit_tools.demo:registry", '{"sku": 1}', "--tool", "check_stock")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["errors"] == [{"path": "sku", "reason": "expected string, got integer 1"}]
    proc = cli("call", "agentkit_tools.demo:registry", "{}")
    assert (proc.returncode, proc.stderr.strip()) == (
        2,
        "error: the target has several tools; pick one with --tool (check_stock, find_sku, reorder_point, slow_report)",
    )
    assert cli("call", "no_such_module:x", "{}").returncode == 2


def test_replay_compares_with_the_recorded_envelopes():
    proc = cli("replay", str(TRACE), "--tools", "agentkit_tools.demo:registry")
    assert proc.returncode == 1  # line 3's recorded envelope differs
    assert proc.stdout.splitlines() == [
        "1: check_stock -> ok",
        "2: find_sku -> ok  [same as recorded]",
        "3: check_stock -> ok  [DIFFERS from recorded]",
        "4: chek_stock -> unknown_tool: No tool named 'chek_stock'. Did you mean 'check_stock'? Available "
        "tools: check_stock, find_sku, reorder_point, slow_report. Call one of those instead.",
        "4 calls: 3 ok, 1 failed, 1 differ from the trace",
    ]


def test_replay_rejects_an_unreadable_trace(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "find_sku", "input": {}}\nnot json\n')
    proc = cli("replay", str(bad), "--tools", "agentkit_tools.demo:registry")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}:2 is not JSON")
