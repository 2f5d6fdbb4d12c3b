"""Typing (issue 7 item 5): ``py.typed`` and ``_core.pyi`` ship with the package; an example
module using the public API passes ``mypy --strict``; the stubs match the compiled core."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentkit_tools
from agentkit_tools import _core

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(agentkit_tools.__file__).resolve().parent
EXAMPLE = ROOT / "examples" / "typed_usage.py"


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_markers_ship_with_the_package():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_core.pyi").is_file()


def test_stub_names_are_exactly_the_core_names():
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    stub_names = set()
    stub_all: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stub_names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stub_names.add(node.target.id)
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            stub_all = ast.literal_eval(node.value)
    runtime = {n for n in dir(_core) if not n.startswith("__")} | {"__version__"}
    assert stub_names == runtime
    assert sorted(stub_all) == sorted(_core.__all__)


def test_every_stub_has_a_docstring():
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    undocumented = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and ast.get_docstring(node) is None:
            undocumented.append(node.name)
        if isinstance(node, ast.ClassDef):
            if ast.get_docstring(node) is None:
                undocumented.append(node.name)
            for item in node.body:
                if (
                    isinstance(item, ast.FunctionDef)
                    and not item.name.startswith("__")
                    and ast.get_docstring(item) is None
                    and item.name != "max_attempts"
                ):
                    undocumented.append(f"{node.name}.{item.name}")
    assert undocumented == []


def test_stubs_match_the_compiled_core():
    """``mypy.stubtest`` imports the core and compares every name, signature and default."""
    result = run("-m", "mypy.stubtest", "agentkit_tools._core")
    assert (result.returncode, result.stdout.strip()) == (0, "Success: no issues found in 1 module"), result.stdout


def test_example_fails_mypy_strict_only_on_its_deliberate_misuse(mypy_cache: Path):
    """The example passes ``mypy --strict`` except for ``misuse()``, an expected failure: a
    decorated tool keeps its function's signature, so its ``int`` result cannot go into a ``str``."""
    source = EXAMPLE.read_text(encoding="utf-8").splitlines()
    line = source.index("    level: str = stock_level(\"A-100\")  # stock_level returns int") + 1
    result = run("-m", "mypy", "--strict", "--cache-dir", str(mypy_cache), "examples/typed_usage.py")
    assert (result.returncode, result.stdout.splitlines()) == (
        1,
        [
            f"examples/typed_usage.py:{line}: error: Incompatible types in assignment (expression has type "
            '"int", variable has type "str")  [assignment]',
            "Found 1 error in 1 file (checked 1 source file)",
        ],
    ), result.stdout + result.stderr


def test_mypy_strict_catches_misuse(mypy_cache: Path, tmp_path: Path):
    """The annotations are real (not ``Any``): misuse of the public API is reported."""
    bad = tmp_path / "bad_usage.py"
    bad.write_text(
        textwrap.dedent(
            """\
            from agentkit_tools import ToolRegistry, as_tool, render_result, tool
            from agentkit_tools import _core

            count: int = render_result({"a": 1})
            names: set[str] = ToolRegistry().names()
            _core.truncate(5)


            class Agent:
                \"\"\"Answers questions about the inventory in plain words.\"\"\"

                async def run(self, task: str, ctx: object) -> str:
                    return task


            as_tool(Agent())


            @tool(read_only=True)
            def f(x: int) -> int:
                \"\"\"Returns x unchanged, for checking decorator types.\"\"\"
                return x


            f.no_such_attribute
            total: str = f(1)
            f("1")
            f(1, 2)
            """
        ),
        encoding="utf-8",
    )
    result = run("-m", "mypy", "--strict", "--cache-dir", str(mypy_cache), "--no-error-summary", str(bad))
    lines = [line.split("bad_usage.py:", 1)[1] for line in result.stdout.splitlines() if "bad_usage.py:" in line and ": error:" in line]
    assert result.returncode == 1
    assert lines == [
        '4: error: Incompatible types in assignment (expression has type "str", variable has type "int")  [assignment]',
        '5: error: Incompatible types in assignment (expression has type "list[str]", variable has type "set[str]")  [assignment]',
        '6: error: Argument 1 to "truncate" has incompatible type "int"; expected "str"  [arg-type]',
        '16: error: Missing named argument "name" for "as_tool"  [call-arg]',
        '25: error: "FunctionTool[[int], int]" has no attribute "no_such_attribute"  [attr-defined]',
        '26: error: Incompatible types in assignment (expression has type "int", variable has type "str")  [assignment]',
        '27: error: Argument 1 to "__call__" of "FunctionTool" has incompatible type "str"; expected "int"  [arg-type]',
        '28: error: Too many arguments for "__call__" of "FunctionTool"  [call-arg]',
    ]


def test_example_runs():
    result = run("examples/typed_usage.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['echo', 'memory', 'planner', 'stock_level'] ['echo', 'memory', 'planner', 'stock_level']",
        '{"ok": false, "error": {"code": "not_found", "message": "No item \'Z\'. Check the SKU with the user.", '
        '"retriable": false}}',
        "7",
        "plan for: restock A-100",
        "File created successfully at /memories/a.md (2 bytes).",
        "[]",
        "7",
    ]
