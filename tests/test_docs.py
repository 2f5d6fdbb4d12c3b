"""The user's docs (docs/ and README) tell the truth and stay inside the repository:

- every envelope error code the code base can produce is documented in docs/errors.md, and each
  example there is exactly the envelope a scenario produces today;
- the docs index links to pages that exist (or are announced as coming);
- nothing a user reads (docstrings, the stub, --help, README, docs/) points at files outside
  the repository.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import pytest

from agentkit_tools import (
    FileTool,
    InMemoryStore,
    Invoker,
    StoreFiles,
    ToolContext,
    ToolError,
    ToolRegistry,
    dispatch,
    tool,
)
from agentkit_tools import _core
from agentkit_tools import middleware as mw

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ERRORS = DOCS / "errors.md"


# ---------------------------------------------------------------- the tools of docs/errors.md


@tool(read_only=True, timeout_s=0.2)
def check_stock(sku: str, warehouse: Literal["AMS", "SIN"] = "AMS") -> dict[str, Any]:
    """Report how many units of one SKU are available to ship today.

    Args:
        sku: The exact SKU identifier, e.g. "SKU-1001".
        warehouse: Which warehouse to check.
    """
    if sku == "SLOW":
        time.sleep(1)
    if sku == "BUG":
        return {}["on_hand"]  # type: ignore[no-any-return]
    if sku == "GONE":
        raise ToolError("No product with SKU 'GONE'. Call find_sku first.", code="not_found", sku=sku)
    if sku == "BUSY":
        raise ToolError("The stock service is busy; try again in a minute.", retriable=True)
    return {"sku": sku, "on_hand": 42}


@dataclass
class Stock:
    sku: str
    on_hand: int


@tool(read_only=True)
def stock_row(sku: str) -> Stock:
    """Return the stock row of one SKU as a structured record."""
    return {"sku": sku, "on_hand": "many"}  # type: ignore[return-value]


@tool(read_only=True, url_arg="url")
def fetch(url: str) -> str:
    """Fetch a web page and return its text for the model."""
    return "<html>...</html>"


@tool(side_effecting=True, requires_approval=True)
def refund(order_id: str, cents: int) -> str:
    """Refund part of an order to the customer's original payment method."""
    return f"refunded {cents} cents on {order_id}"


def registry() -> ToolRegistry:
    memory = FileTool(StoreFiles(InMemoryStore(), namespace="docs", max_files=2))
    return ToolRegistry([check_stock, stock_row, fetch, refund, memory])


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"id": "c1", "name": name, "input": args}


def dispatched(*calls: Any) -> Callable[[], dict[str, Any]]:
    """The envelope of the last of ``calls`` dispatched in turn on one fresh registry."""

    def run() -> dict[str, Any]:
        reg = registry()
        envelopes = [dispatch(c, reg) for c in calls]
        return envelopes[-1]

    return run


def invoked(*calls: Any) -> Callable[[], dict[str, Any]]:
    """The envelope of the last of ``calls`` invoked in turn in one conversation of an Invoker
    with an egress allow-list."""

    async def run() -> dict[str, Any]:
        chain = [*mw.default_chain(), mw.egress(allow=["example.com"])]
        invoker = Invoker(registry(), middleware=chain)
        ctx = ToolContext(run_id="conversation-1")
        return [await invoker.invoke(c, ctx) for c in calls][-1]

    return lambda: asyncio.run(run())


def breaker() -> dict[str, Any]:
    """Two failures in a row open check_stock's circuit: the third call is refused."""

    async def run() -> dict[str, Any]:
        chain = [mw.retry(max_attempts=1, breaker_threshold=2, breaker_cooldown_s=60)]
        invoker = Invoker(registry(), middleware=chain)
        return [await invoker.invoke(call("check_stock", sku="BUSY")) for _ in range(3)][-1]

    return asyncio.run(run())


NOTES = "- likes tea\n- likes tea\n"
CREATE = call("memory", command="create", path="/memories/notes.md", file_text=NOTES)

#: One scenario per envelope error code documented in docs/errors.md.
SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "unknown_tool": dispatched(call("chek_stock", sku="SKU-1")),
    "invalid_arguments": dispatched(call("check_stock", sku=1, warehouse="LHR", qty=2)),
    "invalid_call": dispatched("check_stock SKU-1"),
    "approval_required": invoked(call("refund", order_id="A-7", cents=500)),
    "repeated_call": invoked(*[call("check_stock", sku="SKU-1")] * 3),
    "egress_denied": invoked(call("fetch", url="http://10.0.0.1/admin")),
    "circuit_open": breaker,
    "timeout": dispatched(call("check_stock", sku="SLOW")),
    "tool_error": dispatched(call("check_stock", sku="BUSY")),
    "not_found (a ToolError's own code)": dispatched(call("check_stock", sku="GONE")),
    "output_mismatch": dispatched(call("stock_row", sku="SKU-1")),
    "internal_error": dispatched(call("check_stock", sku="BUG")),
    # The memory tool's own codes.
    "already_exists": dispatched(CREATE, CREATE),
    "ambiguous_match": dispatched(
        CREATE, call("memory", command="str_replace", path="/memories/notes.md", old_str="- likes tea", new_str="")
    ),
    "no_match": dispatched(
        CREATE, call("memory", command="str_replace", path="/memories/notes.md", old_str="coffee", new_str="")
    ),
    "out_of_range": dispatched(
        CREATE, call("memory", command="insert", path="/memories/notes.md", insert_line=9, insert_text="- x")
    ),
    "is_a_directory": dispatched(call("memory", command="view", path="/memories", view_range=[1, 2])),
    "not_a_directory": dispatched(
        CREATE, call("memory", command="create", path="/memories/notes.md/more.md", file_text="x")
    ),
    "not_found": dispatched(call("memory", command="view", path="/memories/nope.md")),
    "permission_denied": dispatched(call("memory", command="view", path="/etc/passwd")),
    "missing_argument": dispatched(call("memory", command="view")),
    "memory_limit": dispatched(
        CREATE,
        call("memory", command="create", path="/memories/b.md", file_text="x"),
        call("memory", command="create", path="/memories/c.md", file_text="x"),
    ),
}


def documented_examples() -> dict[str, dict[str, Any]]:
    """``{heading: envelope}``: each ``### `code` `` heading of docs/errors.md and the first
    JSON block below it."""
    text = ERRORS.read_text(encoding="utf-8")
    found: dict[str, dict[str, Any]] = {}
    for m in re.finditer(r"^### `([^`]+)`(.*?)$(.*?)```json\n(.*?)```", text, re.M | re.S):
        heading = m.group(1) + m.group(2).rstrip()
        found[heading.strip()] = json.loads(m.group(4))
    return found


def without_timing(envelope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in envelope.items() if k != "elapsed_ms"}


@pytest.mark.parametrize("heading", list(SCENARIOS))
def test_each_documented_example_is_the_real_envelope(heading: str) -> None:
    examples = documented_examples()
    assert heading in examples, f"docs/errors.md has no example under ### `{heading}`"
    assert examples[heading] == without_timing(SCENARIOS[heading]())


def test_every_example_in_errors_md_has_a_scenario() -> None:
    assert sorted(documented_examples()) == sorted(SCENARIOS)


def test_every_code_is_documented_and_every_documented_code_is_one() -> None:
    # The core's enum of codes (src/errors.rs) is the one list; docs/errors.md documents each.
    text = ERRORS.read_text(encoding="utf-8")
    sections = set(re.findall(r"^### `([a-z_]+)`", text, re.M))
    table = set(re.findall(r"^\| `([a-z_]+)` \|", text.split("| code | when |", 1)[1], re.M))
    mentioned = set(re.findall(r"`([a-z_]+)`", text))
    assert sections | table <= set(_core.codes.ALL)
    assert set(_core.codes.ALL) - mentioned == set()
    assert set(_core.codes.ALL) - sections - table == {"backend_saturated"}  # told of under timeout
    assert len(_core.codes.ALL) == 28
    assert _core.codes.RETRIABLE == frozenset({"store_conflict"})
    for code in _core.codes.ALL:
        assert getattr(_core.codes, code.upper()) == code


# Where a code could be spelled instead of named: an envelope's or a refusal's code, a memory
# error's code, a ToolError's code, a comparison with a code.
CODE_PATTERNS = [
    r'"code"\)?, (?:intern!\(py, )?"([a-z_]+)"',
    r'MemoryError::(?:new|invalid)\(\s*(?:ErrorKind::\w+,\s*)?"([a-z_]+)"',
    r'\bcode: "([a-z_]+)"',
    r'"code": "([a-z_]+)"',
    r'(?<!``)\bcode(?:: str)? ?= ?"([a-z_]+)"',
    r'== "([a-z_]+)"',
    r'\(py, "([a-z_]+)"',
]


def test_no_source_spells_a_code() -> None:
    files = [p for p in (ROOT / "src").rglob("*.rs") if p.name not in ("tests.rs", "errors.rs")]
    files += [p for p in (ROOT / "python" / "agentkit_tools").rglob("*.py") if p.name != "demo.py"]
    spelled = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".rs":  # the code, not its tests or comments
            text = re.sub(r"^\s*//.*$", "", text.split("#[cfg(test)]", 1)[0], flags=re.M)
        for pattern in CODE_PATTERNS:
            spelled += [(path.name, c) for c in re.findall(pattern, text) if c in _core.codes.ALL]
    assert spelled == []


# ---------------------------------------------------------------- runnable examples


def python_examples(page: str) -> list[tuple[str, str]]:
    """``(code, output)`` of each ```python block followed by "prints:" and a ```text block."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```\n\nprints:\n\n```text\n(.*?)```", text, re.S)


def console_examples(page: str) -> list[tuple[str, str]]:
    """``(command, output)`` of each ```console block: ``$ command`` and what it prints."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [
        (m.group(1), m.group(2)) for m in re.finditer(r"```console\n\$ (.*?)\n(.*?)```", text, re.S)
    ]


@pytest.mark.parametrize("page", ["providers.md"])
def test_python_examples_print_what_the_page_shows(page: str, tmp_path: Path) -> None:
    examples = python_examples(page)
    assert examples
    for code, output in examples:
        script = tmp_path / "example.py"
        script.write_text(code, encoding="utf-8")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert (proc.returncode, proc.stdout) == (0, output), proc.stderr


@pytest.mark.parametrize("page", ["cli.md"])
def test_console_examples_print_what_the_page_shows(page: str) -> None:
    examples = console_examples(page)
    assert len(examples) >= 3
    for command, output in examples:
        argv = shlex.split(command)
        assert argv[0] == "agentkit-tools"
        proc = subprocess.run(
            [sys.executable, "-m", "agentkit_tools", *argv[1:]],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        assert proc.stdout == output, command


# ---------------------------------------------------------------- links and pointers


def test_docs_index_links_resolve() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)\)", index)
    assert {"errors.md", "cli.md", "providers.md", "middleware.md", "memory.md"} <= set(links)
    for link in links:
        if not link.startswith("http"):
            assert (DOCS / link).resolve().is_file() or link in {"middleware.md", "memory.md"}, link


def test_nothing_points_outside_the_repository() -> None:
    """``SPEC``/``DESIGN.md`` are internal documents a user does not have: nothing a user reads
    (README, docs, the package and its stubs, the examples, the core's doc comments, the
    benches) points to them."""
    paths = [
        ROOT / "README.md",
        *DOCS.rglob("*.md"),
        *(ROOT / "python").rglob("*.py"),
        *(ROOT / "python").rglob("*.pyi"),
        *(ROOT / "examples").rglob("*.py"),
        *(ROOT / "src").rglob("*.rs"),
        *(ROOT / "benches").rglob("*.py"),
    ]
    hits = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in paths
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"SPEC|DESIGN\.md", line)
    ]
    assert hits == []


def test_readme_first_example_prints_what_it_shows(tmp_path: Path) -> None:
    """The first example's envelope, schema included, is plain data (shown wrapped)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code, shown = re.search(r"## Define a tool\n\n```python\n(.*?)```\n\nprints \(one line, wrapped here\):\n\n```\n(.*?)```", text, re.S).groups()
    script = tmp_path / "first.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == " ".join(line.strip() for line in shown.splitlines())
    assert "FrozenDict" not in proc.stdout
