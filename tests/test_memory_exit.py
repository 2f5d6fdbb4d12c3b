"""A process that used ``StoreFiles`` exits cleanly.

The race this guards against: a helper thread completing a Python future while the interpreter
finalises (SIGSEGV or SIGABRT in ``PyGILState_Release``), in a fraction of runs and more often on
a loaded machine. So the script runs in many fresh interpreters at once, on every interpreter
found, and every single exit must be clean. One script covers every variant: an event loop left
open after ``run_until_complete`` (on ``InMemoryStore``, ``FileStore``, and Redis/PostgreSQL when
configured and importable) and a last line that is ``asyncio.run(...)``.
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

RUNS = int(os.environ.get("AGENTKIT_EXIT_RUNS", "200"))

SCRIPT = r"""
import asyncio, os, sys, tempfile
from agentkit_tools.memory import StoreFiles
from agentkit_tools.stores import FileStore, InMemoryStore

covered = []
loop = asyncio.new_event_loop()  # left open on purpose

def use(store, name):
    files = StoreFiles(store, namespace="n" + str(os.getpid()))
    loop.run_until_complete(files.create("/memories/f.md", "x", overwrite=True))
    assert loop.run_until_complete(files.view("/memories/f.md")) == "x"
    covered.append(name)

use(InMemoryStore(), "memory")
use(FileStore(tempfile.mkdtemp()), "file")
if os.environ.get("AGENTKIT_TEST_REDIS_URL"):
    try:
        from agentkit_tools.stores import RedisStore
        store = RedisStore(os.environ["AGENTKIT_TEST_REDIS_URL"], namespace="exit-test")
    except ImportError:
        pass
    else:
        use(store, "redis")
if os.environ.get("AGENTKIT_TEST_POSTGRES_DSN"):
    try:
        from agentkit_tools.stores import PostgresStore
        store = PostgresStore(os.environ["AGENTKIT_TEST_POSTGRES_DSN"], table="agentkit_exit_test")
    except ImportError:
        pass
    else:
        use(store, "postgres")
print(",".join(covered), flush=True)
asyncio.run(StoreFiles(InMemoryStore(), namespace="n").create("/memories/f.md", "x"))
"""


def _interpreters() -> list:
    found = [pytest.param(sys.executable, id="sys.executable")]
    for version in ("3.10.13", "3.13.0"):
        exe = Path(f"/root/.pyenv/versions/{version}/bin/python3")
        found.append(
            pytest.param(
                str(exe),
                id=f"python{version}",
                marks=pytest.mark.skipif(
                    not exe.exists(), reason=f"no Python {version} interpreter at {exe} on this machine"
                ),
            )
        )
    return found


@pytest.mark.parametrize("python", _interpreters())
def test_storefiles_process_exits_cleanly_every_time(python, tmp_path):
    # The abi3 package directory, importable from any interpreter of 3.10 or later.
    pkg = Path(agentkit_tools.__file__).parent
    (tmp_path / "agentkit_tools").symlink_to(pkg, target_is_directory=True)
    script = tmp_path / "exit_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONHOME", None)

    def once(_: int) -> tuple[int, str, str]:
        p = subprocess.run(
            [python, str(script)], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=120
        )
        return p.returncode, p.stdout.strip(), p.stderr[-2000:]

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(once, range(RUNS)))
    failures = [r for r in results if r[0] != 0]
    assert not failures, f"{len(failures)} of {RUNS} runs did not exit cleanly; first: {failures[0]}"
    covered = {r[1] for r in results}
    assert len(covered) == 1, covered
    kinds = covered.pop().split(",")
    assert kinds[:2] == ["memory", "file"]
    if python == sys.executable:
        expected = ["memory", "file"]
        expected += ["redis"] if os.environ.get("AGENTKIT_TEST_REDIS_URL") else []
        expected += ["postgres"] if os.environ.get("AGENTKIT_TEST_POSTGRES_DSN") else []
        assert kinds == expected
