"""Running one script many times in fresh interpreters, for the tests that a process exits
cleanly (no abort, no crash, nothing on stderr) whatever its threads are doing at that moment.

The package is the abi3 build under test, importable from any interpreter of 3.10 or later: a
run sees it through a symlink in its own directory. Python 3.10 and 3.13 are used when this
machine has them (pyenv's default place); otherwise those cases are skipped with that reason.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import agentkit_tools


def interpreters() -> list:
    """``pytest.param`` per interpreter: this one, and Python 3.10 / 3.13 when installed."""
    found = [pytest.param(sys.executable, id="sys.executable")]
    for version in ("3.10.13", "3.13.0"):
        exe = Path(f"/root/.pyenv/versions/{version}/bin/python3")
        reason = f"no Python {version} interpreter at {exe} on this machine"
        found.append(pytest.param(str(exe), id=f"python{version}", marks=pytest.mark.skipif(not exe.exists(), reason=reason)))
    return found


def run_many(python: str, source: str, tmp_path: Path, runs: int, parallel: int) -> list[tuple[int, str, str]]:
    """Run ``source`` as a script ``runs`` times with ``python`` (``parallel`` at a time);
    ``(returncode, stdout, stderr)`` per run, stderr cut to its first and last 2,000 characters
    (the first error and what the exit printed after it)."""
    (tmp_path / "agentkit_tools").symlink_to(Path(agentkit_tools.__file__).parent, target_is_directory=True)
    script = tmp_path / "exit_script.py"
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONHOME", None)

    def once(_: int) -> tuple[int, str, str]:
        p = subprocess.run([python, str(script)], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=120)
        err = p.stderr if len(p.stderr) <= 4000 else p.stderr[:2000] + "\n[...]\n" + p.stderr[-2000:]
        return p.returncode, p.stdout, err

    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(once, range(runs)))
