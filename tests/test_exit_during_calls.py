"""A process exits cleanly while its daemon threads are in the middle of tool calls.

The core runs the host's Python code from inside its own frames: a context's ``run_id`` (here a
property that computes it), the audit rule's question whether anyone observes a call, the
approval check, an idempotency store's encoding of a result, exception constructors. Python code
can give up the interpreter lock at any moment (the 5 ms switch interval); before Python 3.14,
a daemon thread that waits to take it back while the interpreter finalizes is unwound by
``pthread_exit`` through the core's frames, which aborts the process (SIGABRT, "FATAL: exception
not rethrown") or crashes it (SIGSEGV in a clean-up run without the lock). Measured with this
script before the exit gate: 14 of 20 runs failed on Python 3.11; with the default chain and
no computed ``run_id``, 1 in 360 runs.

So the script keeps daemon threads calling ``dispatch`` and ``Invoker.invoke`` (sync tools on
the worker pool, ``non_blocking`` tools inline, async tools; the default chain, and one with an
audit sink, an approver and idempotency on an ``InMemoryStore``) while the main thread returns
after a few milliseconds, in many fresh interpreters at once, on every interpreter found. Every
run must exit with status 0 and nothing on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from exit_runs import interpreters, run_many

RUNS = int(os.environ.get("AGENTKIT_EXIT_RUNS", "200")) // 8  # per interpreter

SCRIPT = r"""
import asyncio, random, threading, time
from agentkit_tools import Invoker, ToolRegistry, dispatch, tool
from agentkit_tools import middleware as mw
from agentkit_tools.stores import InMemoryStore

class Ctx:
    approvals = ()

    @property
    def run_id(self):  # Python code the core runs while it reads the context
        n = 0
        for i in range(200):
            n += i
        return f"run-{n}"

@tool(read_only=True)
def sync_tool(n: int) -> int:
    '''Return the number n unchanged (runs on the worker pool).'''
    return n

@tool(read_only=True, non_blocking=True)
def inline_tool(n: int) -> int:
    '''Return the number n unchanged (runs on the caller's thread).'''
    return n

@tool(read_only=True)
async def async_tool(n: int) -> int:
    '''Return the number n unchanged (an async body).'''
    if n % 2:
        await asyncio.sleep(0)
    return n

@tool(side_effecting=True, requires_approval=True)
def gated(n: int) -> int:
    '''Return the number n unchanged; a side effect that needs approval.'''
    return n

reg = ToolRegistry([sync_tool, inline_tool, async_tool, gated])
records = []

def approve(tool, args, ctx):
    return True

def dispatching(name, ctx):
    i = 0
    while True:
        i += 1
        dispatch({"id": f"d{i}", "name": name, "input": {"n": i}}, reg, ctx=ctx, approver=approve)

def invoking(name, ctx, chain):
    inv = Invoker(reg, middleware=chain)

    async def main():
        i = 0
        while True:
            i += 1
            await inv.invoke({"id": f"c{i}", "name": name, "input": {"n": i}}, ctx)
            if i % 5 == 0:
                calls = [{"id": f"g{i}-{k}", "name": name, "input": {"n": k}} for k in range(3)]
                await inv.invoke_many(calls, ctx)

    asyncio.run(main())

def full():
    return [mw.audit(records.append), mw.approval(approve), mw.repeat_guard(10**9),
            mw.idempotency(InMemoryStore()), mw.retry(), mw.timeout()]

threads = []
for name in ("sync_tool", "inline_tool", "async_tool", "gated"):
    threads.append(threading.Thread(target=dispatching, args=(name, Ctx()), daemon=True))
    threads.append(threading.Thread(target=invoking, args=(name, Ctx(), full()), daemon=True))
    threads.append(threading.Thread(target=invoking, args=(name, None, None), daemon=True))
random.shuffle(threads)
for t in threads:
    t.start()
time.sleep(random.uniform(0.01, 0.06))
print("exit", flush=True)
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_process_exits_cleanly_while_daemon_threads_are_calling_tools(python, tmp_path) -> None:
    results = run_many(python, SCRIPT, tmp_path, RUNS, parallel=2)
    failures = [r for r in results if r != (0, "exit\n", "")]
    assert not failures, f"{len(failures)} of {RUNS} runs did not exit cleanly; first: {failures[0]}"


DEFINING_SCRIPT = r"""
import random, threading, time
from typing import Annotated, Literal, Optional
from agentkit_tools import ToolDefinitionError, ToolRegistry, tool

class Client:
    '''A connection a tool holds: closing it (its finaliser) waits on I/O, with the lock released.'''
    def __del__(self):
        time.sleep(0.001)

def make(i):
    client = Client()
    def lookup(query: Annotated[str, "the words to look for"], limit: int = 10,
               mode: Literal["fast", "full"] = "fast", tags: Optional[list[str]] = None) -> str:
        '''Look a thing up in the catalogue and return the best match.

        Args:
            limit: at most this many matches.
        '''
        return repr(client)
    lookup.__name__ = f"lookup_{i}"
    return lookup

def short(x: int) -> int:
    '''Too short.'''
    return x

def defining():
    while True:
        tool(read_only=True)(make(0))  # the definition is dropped at once
        try:
            tool(short)
        except ToolDefinitionError:
            pass

def registering():
    reg = ToolRegistry()
    i = 0
    while True:
        i += 1
        reg.register(tool(read_only=True)(make(i % 3)), replace=True)  # the tool replaced goes
        if i % 7 == 0:
            reg.unregister(f"lookup_{i % 3}")

def rendering():
    reg = ToolRegistry([tool(read_only=True)(make(k)) for k in range(3)])
    while True:
        reg.to_anthropic(), reg.to_openai(strict=True), reg.to_gemini(), reg.to_mcp()

threads = [threading.Thread(target=f, daemon=True) for f in (defining, registering, rendering) for _ in range(2)]
random.shuffle(threads)
for t in threads:
    t.start()
time.sleep(random.uniform(0.01, 0.06))
print("exit", flush=True)
"""


@pytest.mark.parametrize("python", interpreters())
def test_a_process_exits_cleanly_while_daemon_threads_define_register_and_render_tools(python, tmp_path) -> None:
    """Defining a tool, registering, replacing or removing one and rendering a registry enter
    the core too, and run the host's code there: the finaliser of a tool dropped (the one
    replaced or removed), exception constructors, the collector's finalisers."""
    results = run_many(python, DEFINING_SCRIPT, tmp_path, RUNS, parallel=2)
    failures = [r for r in results if r != (0, "exit\n", "")]
    assert not failures, f"{len(failures)} of {RUNS} runs did not exit cleanly; first: {failures[0]}"


FORK_SCRIPT = r"""
import os, sys, threading, time
from agentkit_tools import ToolRegistry, dispatch, tool

inside = threading.Event()

class SlowCtx:
    approvals = ()

    @property
    def run_id(self):  # read by the core: this thread is inside it for 10 s
        inside.set()
        time.sleep(10)
        return "run"

@tool(read_only=True)
def echo(n: int) -> int:
    '''Return the number n unchanged, for the exit test.'''
    return n

reg = ToolRegistry([echo])
call = {"id": "c", "name": "echo", "input": {"n": 1}}
threading.Thread(target=dispatch, args=(call, reg), kwargs={"ctx": SlowCtx()}, daemon=True).start()
inside.wait()
started = time.monotonic()
# the C library's fork (no GIL released around it) runs none of Python's fork hooks
pid = __import__("ctypes").PyDLL(None).fork() if sys.argv[1] == "libc" else os.fork()
if pid == 0:  # the child: the thread inside the core was not copied, nothing to wait for
    sys.exit(0)
_, status = os.waitpid(pid, 0)
child_s = time.monotonic() - started
print(os.waitstatus_to_exitcode(status), child_s < 1.0, flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
@pytest.mark.parametrize("fork", ["os.fork", "libc"])
def test_exit_waits_only_for_threads_inside_the_core_and_not_past_its_bound(tmp_path, fork) -> None:
    """A forked child exits at once although a thread of its parent was inside the core when it
    forked (that thread does not exist in the child), also after a fork that runs none of
    Python's fork hooks (a C extension's, or through ``ctypes``); the parent, whose daemon thread
    is still inside the core running a 10 s property, waits for it at most the bound (2 s), then
    exits cleanly."""
    script = tmp_path / "fork_exit.py"
    script.write_text(FORK_SCRIPT)
    started = time.monotonic()
    # -W: Python 3.12+ warns that fork() in a process with threads may deadlock (not here).
    p = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", str(script), fork], capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert (p.returncode, p.stdout, p.stderr) == (0, "0 True\n", "")
    assert 2.0 <= took < 9.0
