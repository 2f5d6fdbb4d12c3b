"""The developer scripts: ``scripts/test`` leaves nothing behind outside the repository, and
``benches/compare.py`` reports progress while it runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A stand-in for the interpreter: pip and maturin succeed (maturin leaves a wheel), ``-m venv``
# makes a venv whose demo fails, so scripts/test stops half-way, as a real failure would.
FAKE_PYTHON = """#!/usr/bin/env bash
case "$1 $2" in
  "-m maturin") mkdir -p dist && touch dist/agentkit_tools-0.1.0-cp310-abi3-linux_x86_64.whl ;;
  "-m venv")
    mkdir -p "$3/bin"
    printf '#!/usr/bin/env bash\\nexit 0\\n' > "$3/bin/python"
    printf '#!/usr/bin/env bash\\necho demo broke; exit 3\\n' > "$3/bin/agentkit-tools"
    chmod +x "$3/bin/python" "$3/bin/agentkit-tools" ;;
esac
exit 0
"""


def test_scripts_test_removes_its_temporary_venv_when_it_fails(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", repo / "scripts" / "test")
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = subprocess.run(
        ["bash", str(repo / "scripts" / "test")],
        env={**os.environ, "PYTHON": str(fake), "TMPDIR": str(temp)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (1, "demo broke\n"), proc.stderr
    assert list(temp.iterdir()) == []  # the venv made under TMPDIR is gone


def test_compare_reports_each_measured_group_on_stderr() -> None:
    code = (
        "import sys; sys.path.insert(0, 'benches'); import compare\n"
        "res = compare.Results()\n"
        "res.add('M1 definition', 'ours', [('ours', [1.0, 2.0], True)])\n"
        "res.add('M3 invalid call', 'ours', [('ours', [3.0], True)])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert re.fullmatch(r"\[ +\d+ s\] measured M1 definition\n\[ +\d+ s\] measured M3 invalid call\n", proc.stderr)


def test_license_file_matches_the_metadata() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = \{ text = "MIT" \}$', pyproject, re.M)
    assert re.search(r'^agentkit-tools = "agentkit_tools.__main__:main"$', pyproject, re.M)
    lines = (ROOT / "LICENSE").read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["MIT License", "", "Copyright (c) 2026 the agentkit-tools authors"]
