"""A process that used ``StoreFiles`` exits cleanly.

The race this guards against: a helper thread completing a Python future while the interpreter
finalises (SIGSEGV or SIGABRT in ``PyGILState_Release``), in a fraction of runs and more often on
a loaded machine. So the script runs in many fresh interpreters at once, on every interpreter
found, and every single exit must be clean. One script covers every variant: an event loop left
open after ``run_until_complete`` (on ``InMemoryStore``, ``FileStore``, and Redis/PostgreSQL when
configured and importable) and a last line that is ``asyncio.run(...)``.
"""

from __future__ import annotations

import os
import sys

import pytest

from exit_runs import interpreters, run_many

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


@pytest.mark.parametrize("python", interpreters())
def test_storefiles_process_exits_cleanly_every_time(python, tmp_path):
    results = [(rc, out.strip(), err) for rc, out, err in run_many(python, SCRIPT, tmp_path, RUNS, parallel=8)]
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
