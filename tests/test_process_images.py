"""What the core reads of its own process once and keeps: the process id behind its reading of
the running loop (forgotten in the child of any fork, also one that runs none of Python's fork
hooks). Each runs in a subprocess of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FORK_SCRIPT = textwrap.dedent(
    """
    import asyncio, ctypes, json, os, sys
    from agentkit_tools import Invoker, ToolRegistry, tool

    @tool(read_only=True)
    async def ran(x: int) -> int:
        '''Answer with the number it was given, on the running loop (test tool).'''
        return x

    inv = Invoker(ToolRegistry([ran]))

    async def main() -> None:
        first = await inv.invoke({"id": "1", "name": "ran", "input": {"x": 1}})
        assert first["ok"], first  # the core found the running loop (and read the process id)
        r, w = os.pipe()
        # the C library's fork (no GIL released around it): none of Python's fork hooks run
        pid = ctypes.PyDLL(None).fork() if sys.argv[1] == "libc" else os.fork()
        if pid == 0:  # the child: report, then leave at once
            try:
                try:
                    asyncio.get_running_loop()
                    running = "a loop"
                except RuntimeError as e:
                    running = str(e)
                env = await inv.invoke({"id": "2", "name": "ran", "input": {"x": 2}})
                env.pop("elapsed_ms", None)
                os.write(w, json.dumps([running, env]).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            print(f.read())
        os.waitpid(pid, 0)

    asyncio.run(main())
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("fork", ["os.fork", "libc"])
def test_the_child_of_any_fork_asks_for_its_running_loop_itself(fork: str) -> None:
    """A child forked inside a running loop gets what ``asyncio.get_running_loop()`` answers
    there (on Python 3.10 and 3.11: no loop, it ran in the parent), also after a fork made by a C
    extension or through ``ctypes``, which runs none of Python's fork hooks: the core does not
    answer the parent's loop from the process id it kept."""
    out = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, fork], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    running, env = json.loads(out.stdout)
    if running == "no running event loop":
        assert env == {
            "ok": False,
            "error": {
                "code": "internal_error",
                "message": "ran failed: RuntimeError: no running event loop. This is a bug in the tool, not in your "
                           "arguments; do not retry.",
            },
        }
    else:  # Python 3.12+ after a fork that runs no hook: asyncio itself still sees the loop
        assert (running, env) == ("a loop", {"ok": True, "value": 2})
    if sys.version_info < (3, 12) or fork == "os.fork":
        assert running == "no running event loop"
