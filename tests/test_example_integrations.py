"""``examples/integrations.py`` runs and prints exactly the output the README shows for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_example_output_is_the_readme_block() -> None:
    # the example runs our tools in a pydantic-ai agent (pydantic-ai-slim needs Python 3.11+)
    pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim>=2.60 (Python 3.11+) is not installed")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "integrations.py")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Tools from MCP servers, media results, other frameworks") :]
    blocks: list[tuple[str, list[str]]] = []
    fence: tuple[str, list[str]] | None = None
    for line in section.splitlines():
        if fence is None and line.startswith("```"):
            fence = (line[3:], [])
        elif fence is not None and line == "```":
            blocks.append(fence)
            fence = None
        elif fence is not None:
            fence[1].append(line)
    shown = next(lines for lang, lines in blocks if lang == "")  # the output block follows the code
    assert proc.stdout == "\n".join(shown) + "\n"
