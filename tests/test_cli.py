"""The command line, run as a user runs it: a subprocess, with its exact output."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest

from agentkit_tools import __version__

ROOT = pathlib.Path(__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "demo_trace.jsonl"
SHOP = "tests/fakes/cli_shop.py:shop"  # a file target: an instance with @tool methods
COMMANDS = ("demo", "schema", "call", "replay", "serve-mcp")


def cli(*args: str, outbox: pathlib.Path | None = None, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("AGENTKIT_TEST_OUTBOX", None)
    if outbox is not None:
        env["AGENTKIT_TEST_OUTBOX"] = str(outbox)
    return subprocess.run(
        [sys.executable, "-m", "agentkit_tools", *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


def envelope_of(proc: subprocess.CompletedProcess[str]) -> dict:
    envelope = json.loads(proc.stdout)
    envelope.pop("elapsed_ms", None)
    return envelope


# ---------------------------------------------------------------- the program itself


def test_version() -> None:
    proc = cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"agentkit-tools {__version__}\n", "")


def test_console_script_is_installed_and_is_the_same_program() -> None:
    script = pathlib.Path(sysconfig.get_path("scripts")) / "agentkit-tools"
    if not script.exists():  # an installation into the user's site: pip put it there instead
        script = pathlib.Path(sysconfig.get_path("scripts", f"{os.name}_user")) / "agentkit-tools"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"agentkit-tools {__version__}\n")
    proc = subprocess.run(
        [str(script), "call", "agentkit_tools.demo:registry", '{"sku": "SKU-2001"}', "--tool", "check_stock"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert envelope_of(proc) == {
        "ok": True,
        "value": {"sku": "SKU-2001", "on_hand": 7, "warehouse": "SIN", "shippable": True},
    }


def test_help_is_plain_text_with_an_example_per_command() -> None:
    proc = cli("--help")
    assert proc.returncode == 0
    assert "``" not in proc.stdout and "SPEC" not in proc.stdout
    assert proc.stdout.split("examples:\n", 1)[1] == (
        "  agentkit-tools demo\n"
        "  agentkit-tools schema agentkit_tools.demo:registry --format openai-strict\n"
        "  agentkit-tools call agentkit_tools.demo:registry '{\"sku\": \"SKU-2001\"}' --tool check_stock\n"
        "  agentkit-tools replay tests/data/demo_trace.jsonl --tools agentkit_tools.demo:registry\n"
        "  agentkit-tools serve-mcp ./mytools.py:registry --approve refund\n"
        "\n"
        'Run "agentkit-tools COMMAND --help" for a command\'s options.\n'
    )
    for command in COMMANDS:
        proc = cli(command, "--help")
        assert proc.returncode == 0, command
        assert "``" not in proc.stdout and "SPEC" not in proc.stdout, command
        examples = proc.stdout.split("\nexample", 1)[1].splitlines()[1:]
        assert examples[0].startswith(f"  agentkit-tools {command}"), (command, examples)


def test_no_command_is_a_usage_error() -> None:
    proc = cli()
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == "agentkit-tools: error: the following arguments are required: COMMAND"


# ---------------------------------------------------------------- targets


def test_file_target_with_tool_methods() -> None:
    proc = cli("schema", SHOP, "--format", "anthropic")
    assert (proc.returncode, proc.stderr) == (0, "")
    # The @tool methods and nothing else (the plain method ``helper`` is not a tool).
    assert [t["name"] for t in json.loads(proc.stdout)] == ["price", "refund", "send_email"]
    proc = cli("call", SHOP, '{"sku": "SKU-1"}', "--tool", "price")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert envelope_of(proc) == {"ok": True, "value": 1250}
    # From another directory, by absolute path and by a path relative to it.
    proc = cli("call", str(ROOT / SHOP), '{"sku": "SKU-1"}', "--tool", "price", cwd=ROOT / "tests")
    assert envelope_of(proc) == {"ok": True, "value": 1250}
    proc = cli("call", "fakes/cli_shop.py:shop.price", '{"sku": "SKU-1"}', cwd=ROOT / "tests")
    assert envelope_of(proc) == {"ok": True, "value": 1250}


def test_instance_with_plain_methods_and_a_module_target(tmp_path: pathlib.Path) -> None:
    (tmp_path / "plain.py").write_text(
        "class Calc:\n"
        "    def add(self, a: int, b: int) -> int:\n"
        '        """Add two integers and return their sum to the caller."""\n'
        "        return a + b\n"
        "\n"
        "calc = Calc()\n"
    )
    proc = cli("call", "plain:calc", '{"a": 2, "b": 3}', cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert envelope_of(proc) == {"ok": True, "value": 5}
    proc = cli("call", "./plain.py:calc", '{"a": 2, "b": "3"}', cwd=tmp_path)
    assert proc.returncode == 1
    assert envelope_of(proc)["error"]["errors"] == [{"path": "b", "reason": 'expected integer, got string "3"'}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("schema", "no_such_module:x"), "cannot load no_such_module:x: No module named 'no_such_module'"),
        (("schema", "agentkit_tools.demo:nope"), "cannot load agentkit_tools.demo:nope: module 'agentkit_tools.demo' has no attribute 'nope'"),
        (("schema", "no_colon"), "cannot load no_colon: expected MODULE:OBJ or path/to/file.py:OBJ (e.g. myapp.tools:registry), got 'no_colon'"),
        (("schema", "missing/file.py:x"), "cannot load missing/file.py:x: no such file: missing/file.py"),
        (("schema", "tests/fakes:x"), "cannot load tests/fakes:x: tests/fakes is not a .py file (a file target is path/to/file.py:OBJ)"),
        (
            ("schema", "tests/fakes/cli_shop.py:Shop"),
            "<class 'cli_shop.Shop'> (a class) stands for no tool: name a ToolRegistry, a tool, a function, "
            "a list of them or an instance (its @tool methods, else its public methods) — for a class, name "
            "an instance of it",
        ),
        (("call", SHOP, "{}"), "the target has several tools; pick one with --tool (price, refund, send_email)"),
        (("call", SHOP, "{}", "--approve", "refnd"), "--approve refnd: no such tool (the tools are: price, refund, send_email)"),
        (("replay", "no/such/trace.jsonl", "--tools", SHOP), "cannot read no/such/trace.jsonl: [Errno 2] No such file or directory: 'no/such/trace.jsonl'"),
        (("serve-mcp", SHOP, "--approve", "nope"), "--approve nope: no such tool (the tools are: price, refund, send_email)"),
        (("call", "agentkit_tools:__version__", "{}"), "'0.1.0' (str) stands for no tool: name a ToolRegistry, a tool, a function, a list of them or an instance (its @tool methods, else its public methods)"),
    ],
)
def test_errors_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    proc = cli(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n")


def test_a_module_that_fails_on_import_is_one_line(tmp_path: pathlib.Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('no database configured')\n")
    proc = cli("schema", "broken.py:x", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "error: cannot load broken.py:x: importing it raised RuntimeError: no database configured\n",
    )


# ---------------------------------------------------------------- call


def test_call_prints_the_envelope() -> None:
    proc = cli("call", "agentkit_tools.demo:registry", '{"sku": "SKU-2001"}', "--tool", "check_stock")
    assert proc.returncode == 0, proc.stderr
    assert envelope_of(proc) == {
        "ok": True,
        "value": {"sku": "SKU-2001", "on_hand": 7, "warehouse": "SIN", "shippable": True},
    }
    proc = cli("call", "agentkit_tools.demo:registry", '{"sku": 1}', "--tool", "check_stock")
    assert proc.returncode == 1
    assert envelope_of(proc)["error"]["errors"] == [{"path": "sku", "reason": "expected string, got integer 1"}]


def test_call_prints_a_result_its_stdout_cannot_encode(tmp_path: pathlib.Path) -> None:
    # A lone surrogate in a successful result ended the command with "error: UnicodeEncodeError:
    # 'utf-8' codec can't encode character '\\ud800' ..." and exit status 2, a usage error.
    (tmp_path / "odd.py").write_text(
        "from agentkit_tools import tool\n"
        "@tool(read_only=True)\n"
        "def odd(n: int) -> str:\n"
        '    """Return a text holding a lone surrogate, as a broken decoder may."""\n'
        '    return "a\\ud800b" * n\n'
    )
    proc = cli("call", f"{tmp_path / 'odd.py'}:odd", '{"n": 2}')
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[:3] == ["{", '  "ok": true,', '  "value": "a\\ud800ba\\ud800b",']
    trace = tmp_path / "odd.jsonl"
    trace.write_text(json.dumps({"call": {"name": "odd", "input": {"n": 1}}, "envelope": {"ok": True, "value": "x"}}) + "\n")
    proc = cli("replay", str(trace), "--tools", f"{tmp_path / 'odd.py'}:odd")
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines()[:2] == [
        "1: odd -> ok  [DIFFERS from recorded]",
        '    value: recorded "x", now "a\\ud800b"',
    ]


# ---------------------------------------------------------------- replay


def test_replay_explains_what_differs_from_the_recorded_envelope() -> None:
    proc = cli("replay", str(TRACE), "--tools", "agentkit_tools.demo:registry")
    assert (proc.returncode, proc.stderr) == (1, "")  # line 3's recorded envelope differs
    assert proc.stdout.splitlines() == [
        "1: check_stock -> ok",
        "2: find_sku -> ok  [same as recorded]",  # its elapsed_ms differs: timing is not compared
        "3: check_stock -> ok  [DIFFERS from recorded]",
        "    value.on_hand: recorded 3, now 0",
        '    value.warehouse: recorded nothing, now "AMS"',
        "    value.shippable: recorded nothing, now false",
        "4: chek_stock -> unknown_tool: No tool named 'chek_stock'. Did you mean 'check_stock'? Available "
        "tools: check_stock, find_sku, reorder_point, slow_report. Call one of those instead.",
        "4 lines: 4 replayed (3 ok, 1 failed), 1 same as recorded, 1 differs, 0 not run, 0 skipped",
    ]


MIXED = [
    '{"id": "1", "name": "price", "input": {"sku": "SKU-1"}}',
    '{"call": {"id": "2", "name": "send_email", "input": {"to": "ann@example.com", "body": "Shipped."}}, '
    '"envelope": {"ok": true, "value": "sent to ann@example.com", "elapsed_ms": 3.1}}',
    "not json at all",
    '{"call": {"id": "4", "name": "refund", "input": {"order_id": "A-7", "cents": 500}}, '
    '"envelope": {"ok": true, "value": "refunded 500 cents on A-7"}}',
    "[1, 2]",
    '{"call": {"id": "6", "name": "price", "input": {"sku": "SKU-1"}}, '
    '"envelope": {"ok": true, "value": [1200], "deduplicated": true}}',
    '{"id": "7", "function": {"name": "price", "arguments": "{\\"sku\\": 1}"}}',
    '{"call": {"id": "8", "input": {}}}',
]
PRICE_REJECTED = (
    "invalid_arguments: tool 'price' call rejected: invalid argument(s): sku: expected string, got integer 1. "
    "Accepted arguments: ['sku']. Re-read the input schema and call 'price' again with corrected arguments."
)
NOT_JSON = "3: skipped: not JSON (Expecting value: line 1 column 1 (char 0))"
NOT_OBJECT = "5: skipped: expected a JSON object, got list"
NO_NAME = '8: skipped: a tool call needs a "name" (or "function": {"name": ...})'
PRICE_DIFFERS = [
    "6: price -> ok  [DIFFERS from recorded]",
    "    value: recorded [1200], now 1250",
    "    deduplicated: recorded true, now nothing",
]


@pytest.fixture
def mixed_trace(tmp_path: pathlib.Path) -> pathlib.Path:
    trace = tmp_path / "mixed.jsonl"
    trace.write_text("\n".join(MIXED) + "\n\n")
    return trace


def test_replay_never_runs_side_effects_by_default(mixed_trace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outbox = tmp_path / "outbox"
    proc = cli("replay", str(mixed_trace), "--tools", SHOP, outbox=outbox)
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines() == [
        "1: price -> ok",
        "2: send_email -> not run (side-effecting; pass --run-side-effects or --approve send_email to run it)",
        NOT_JSON,
        "4: refund -> not run (side-effecting; pass --run-side-effects or --approve refund to run it)",
        NOT_OBJECT,
        *PRICE_DIFFERS,
        f"7: price -> {PRICE_REJECTED}",
        NO_NAME,
        "8 lines: 3 replayed (2 ok, 1 failed), 0 same as recorded, 1 differs, 2 not run, 3 skipped",
    ]
    assert not outbox.exists()


def test_replay_dry_run_runs_nothing(mixed_trace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outbox = tmp_path / "outbox"
    proc = cli("replay", str(mixed_trace), "--tools", SHOP, "--dry-run", "--run-side-effects", outbox=outbox)
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines() == [
        '1: price {"sku": "SKU-1"} -> would run',
        '2: send_email {"to": "ann@example.com", "body": "Shipped."} -> would run',
        NOT_JSON,
        '4: refund {"order_id": "A-7", "cents": 500} -> would not run (requires approval; pass --approve refund to run it)',
        NOT_OBJECT,
        '6: price {"sku": "SKU-1"} -> would run',
        f"7: price -> would fail: {PRICE_REJECTED}",
        NO_NAME,
        "dry run: 8 lines: 3 would run, 1 would not run, 1 would fail at once, 3 skipped",
    ]
    assert not outbox.exists()


def test_replay_runs_side_effects_when_told(mixed_trace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outbox = tmp_path / "outbox"
    proc = cli("replay", str(mixed_trace), "--tools", SHOP, "--run-side-effects", outbox=outbox)
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines()[1:4] == [
        "2: send_email -> ok  [same as recorded]",
        NOT_JSON,
        "4: refund -> not run (requires approval; pass --approve refund to run it)",
    ]
    assert proc.stdout.splitlines()[-1] == (
        "8 lines: 4 replayed (3 ok, 1 failed), 1 same as recorded, 1 differs, 1 not run, 3 skipped"
    )
    assert outbox.read_text() == "email to ann@example.com: Shipped.\n"


def test_replay_of_a_clean_trace_exits_0(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "clean.jsonl"
    trace.write_text(
        '{"call": {"id": "1", "name": "price", "input": {"sku": "SKU-1"}}, "envelope": {"ok": true, "value": 1250, "elapsed_ms": 9}}\n'
    )
    proc = cli("replay", str(trace), "--tools", SHOP)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        "1: price -> ok  [same as recorded]\n"
        "1 line: 1 replayed (1 ok, 0 failed), 1 same as recorded, 0 differ, 0 not run, 0 skipped\n",
        "",
    )


REFUND = '{"order_id": "A-7", "cents": 500}'
REFUND_REFUSED = (
    "refund needs the user's approval before it runs, and it was not run. Ask the user whether to allow "
    'refund with arguments {"cents":500,"order_id":"A-7"}; call it again only after they approve.'
)


def test_call_refuses_a_tool_that_requires_approval_unless_approved(tmp_path: pathlib.Path) -> None:
    outbox = tmp_path / "outbox"
    proc = cli("call", SHOP, REFUND, "--tool", "refund", outbox=outbox)
    assert (proc.returncode, proc.stderr) == (1, "")
    assert envelope_of(proc) == {
        "ok": False,
        "error": {"code": "approval_required", "message": REFUND_REFUSED, "tool": "refund"},
    }
    assert not outbox.exists()
    # Approving another tool approves nothing here.
    proc = cli("call", SHOP, REFUND, "--tool", "refund", "--approve", "send_email", outbox=outbox)
    assert envelope_of(proc)["error"]["code"] == "approval_required"
    assert not outbox.exists()
    proc = cli("call", SHOP, REFUND, "--tool", "refund", "--approve", "refund", outbox=outbox)
    assert (proc.returncode, envelope_of(proc)) == (0, {"ok": True, "value": "refunded 500 cents on A-7"})
    assert outbox.read_text() == "refund 500 on A-7\n"


def test_replay_runs_an_approved_tool(mixed_trace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outbox = tmp_path / "outbox"
    proc = cli("replay", str(mixed_trace), "--tools", SHOP, "--approve", "refund", outbox=outbox)
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines()[1:4] == [
        "2: send_email -> not run (side-effecting; pass --run-side-effects or --approve send_email to run it)",
        NOT_JSON,
        "4: refund -> ok  [same as recorded]",
    ]
    assert outbox.read_text() == "refund 500 on A-7\n"



def test_replay_never_takes_a_recorded_approval_as_given(tmp_path: pathlib.Path) -> None:
    """A trace's ``"approved": true`` was the approval of the original run, not of this one."""
    trace = tmp_path / "approved.jsonl"
    trace.write_text('{"id": "1", "name": "refund", "input": {"order_id": "A-7", "cents": 500}, "approved": true}\n')
    outbox = tmp_path / "outbox"
    proc = cli("replay", str(trace), "--tools", SHOP, "--run-side-effects", outbox=outbox)
    assert (proc.returncode, proc.stdout.splitlines()[0]) == (
        0,
        "1: refund -> not run (requires approval; pass --approve refund to run it)",
    )
    assert not outbox.exists()
