"""A process forked while another thread is making the background loop (holding the lock that
guards its creation): the child has none of the parent's threads, so nothing would ever release
that lock there; the child's first async body must still run, on a loop of its own. Also after a
fork that runs none of Python's fork hooks (``ctypes.PyDLL(None).fork()``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import asyncio, ctypes, os, signal, sys, threading, time
from agentkit_tools import ToolRegistry, dispatch, tool
from agentkit_tools import _runner

@tool(read_only=True)
async def double(n: int) -> int:
    '''Double a number on the event loop, for the fork test of the background loop.'''
    await asyncio.sleep(0)
    return 2 * n

reg = ToolRegistry([double])
assert dispatch({"id": "p", "name": "double", "input": {"n": 1}}, reg)["value"] == 2
held, release = threading.Event(), threading.Event()

def making_the_loop():
    with _runner._LOOP_LOCK:  # as a thread creating the loop at the moment of the fork
        held.set()
        release.wait(30)

t = threading.Thread(target=making_the_loop)
t.start()
held.wait()
# The fork comes once the loop's thread is parked in its poll. Taken while that thread is coming
# back from its spin after the call above, a fork that runs no hooks left a child in which no
# thread could start, not even a plain threading.Thread (9 of 10 runs). Such a fork skips the
# hooks that set CPython's own thread state right again; the cause is not yet known, an open fault.
time.sleep(0.3)
pid = ctypes.PyDLL(None).fork() if sys.argv[1] == "libc" else os.fork()
if pid == 0:
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(10)  # a child that hangs is killed (exit code -14)
    env = dispatch({"id": "c", "name": "double", "input": {"n": 21}}, reg)
    print("child", env["ok"], env.get("value"), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
release.set()
t.join()
env = dispatch({"id": "p2", "name": "double", "input": {"n": 2}}, reg)
print("parent", os.waitstatus_to_exitcode(status), env["value"], flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
@pytest.mark.parametrize("fork", ["os.fork", "libc"])
def test_a_child_forked_while_the_loop_is_being_made_runs_async_bodies(fork: str) -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, fork], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n") == ["child True 42", "parent 0 4", ""], out
