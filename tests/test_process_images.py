"""What the core reads of its own process once and keeps: the process id behind its reading of
the running loop (forgotten in the child of any fork, also one that runs none of Python's fork
hooks), and CPython's ``PyContext_Enter``/``PyContext_Exit`` (taken from the interpreter's own
image, never from another library loaded in the process that defines the same names). Each runs
in a subprocess of its own."""

from __future__ import annotations

import json
import os
import shutil
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


IMPOSTOR = r"""
#include <unistd.h>
int PyContext_Enter(void *ctx) { (void)ctx; write(2, "impostor entered\n", 17); _exit(97); }
int PyContext_Exit(void *ctx) { (void)ctx; write(2, "impostor left\n", 14); _exit(97); }
"""

CONTEXT_SCRIPT = textwrap.dedent(
    """
    import asyncio, contextvars
    from agentkit_tools import Invoker, ToolRegistry, dispatch, tool

    var = contextvars.ContextVar("var", default="unset")

    @tool(read_only=True)
    async def reads(x: int) -> str:
        '''Read a context variable the caller set, after one suspension (test tool).'''
        await asyncio.sleep(0)
        seen = var.get()
        var.set("body")
        return f"{seen}-{x}"

    @tool(read_only=True, non_blocking=True)
    def reads_sync(x: int) -> str:
        '''Read a context variable the caller set, on the loop (test tool).'''
        return f"{var.get()}-{x}"

    async def main() -> None:
        var.set("caller")
        inv = Invoker(ToolRegistry([reads, reads_sync]))
        one = await inv.invoke({"id": "1", "name": "reads", "input": {"x": 1}})
        turn = await inv.invoke_many(
            [{"id": "2", "name": "reads", "input": {"x": 2}}, {"id": "3", "name": "reads_sync", "input": {"x": 3}}]
        )
        print(one["value"], [e["value"] for e in turn], var.get())

    asyncio.run(main())
    print(dispatch({"id": "4", "name": "reads", "input": {"x": 4}}, ToolRegistry([reads]))["value"])
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="LD_PRELOAD is the Linux dynamic linker's")
def test_a_library_that_defines_the_context_functions_too_is_never_called(tmp_path: Path) -> None:
    """A library loaded ahead of the interpreter's own (``LD_PRELOAD``; the same for a second
    libpython) that defines ``PyContext_Enter``/``PyContext_Exit``: the core enters a body's
    context with the interpreter's own functions, never that library's (which would end the
    process here), and every body sees its caller's context variables."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (the Rust toolchain that builds the core needs one)"
    (tmp_path / "impostor.c").write_text(IMPOSTOR)
    lib = tmp_path / "libimpostor.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "impostor.c")], check=True)
    env = {**os.environ, "LD_PRELOAD": str(lib)}
    out = subprocess.run([sys.executable, "-c", CONTEXT_SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == "caller-1 ['caller-2', 'caller-3'] caller\nunset-4\n"


POOL_SCRIPT = textwrap.dedent(
    """
    import asyncio, ctypes, json, os, sys, time
    from agentkit_tools import Invoker, ToolRegistry, dispatch, tool

    @tool(read_only=True, timeout_s=2)
    def on_a_worker(x: int) -> int:
        '''Answer with the number it was given, on a worker thread of the pool (test tool).'''
        return x

    reg = ToolRegistry([on_a_worker])

    def call(x: int) -> dict:
        return {"id": str(x), "name": "on_a_worker", "input": {"x": x}}

    assert dispatch(call(1), reg)["value"] == 1  # the pool's worker runs, then waits idle
    time.sleep(0.1)
    r, w = os.pipe()
    pid = ctypes.PyDLL(None).fork() if sys.argv[1] == "libc" else os.fork()
    if pid == 0:  # the child: report, then leave at once
        try:
            got = []
            for way in ("dispatch", "invoke"):
                t = time.monotonic()
                if way == "dispatch":
                    env = dispatch(call(2), reg)
                else:
                    env = asyncio.run(Invoker(reg).invoke(call(3)))
                env.pop("elapsed_ms", None)
                got.append([env, time.monotonic() - t < 1.0])
            os.write(w, json.dumps(got).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        print(f.read())
    os.waitpid(pid, 0)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("fork", ["os.fork", "libc"])
def test_the_child_of_any_fork_runs_sync_bodies_on_a_pool_of_its_own(fork: str) -> None:
    """After a fork that runs none of Python's fork hooks the child kept the parent's pool, whose
    idle worker is not there: its first sync call waited for it until its deadline ('timeout')."""
    out = subprocess.run([sys.executable, "-c", POOL_SCRIPT, fork], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[{"ok": True, "value": 2}, True], [{"ok": True, "value": 3}, True]]


DRAWS_SCRIPT = textwrap.dedent(
    """
    import asyncio, ctypes, json, os, sys
    from agentkit_tools import Invoker, ToolContext, ToolRegistry, _core, middleware as mw, tool

    @tool(side_effecting=True)
    async def charge(cents: int) -> int:
        '''Charge an amount in cents, once per call (test tool of the fork tests).'''
        return cents

    class Store:
        '''A shared store that keeps each claim this process writes.'''

        def __init__(self) -> None:
            self.docs, self.claims = {}, []

        async def get(self, key):
            return self.docs.get(key)

        async def set(self, key, value):
            self.docs[key] = value

        async def compare_and_set(self, key, expected, value):
            if self.docs.get(key) != expected:
                return False
            self.docs[key] = value
            if json.loads(value)["s"] == "running":
                self.claims.append(json.loads(value)["owner"])
            return True

    store = Store()
    inv = Invoker(ToolRegistry([charge]), middleware=[mw.idempotency(store=store)])
    policy = _core.RetryPolicy(5, 1.0, 30.0)

    def draws(run: str) -> list:
        asyncio.run(inv.invoke({"id": "1", "name": "charge", "input": {"cents": 5}}, ToolContext(run_id=run)))
        return [store.claims[-1], [policy.delay_s(4) for _ in range(3)]]

    draws("before")  # the generators drew in the parent before the fork
    r, w = os.pipe()
    pid = ctypes.PyDLL(None).fork() if sys.argv[1] == "libc" else os.fork()
    if pid == 0:
        try:
            os.write(w, json.dumps(draws("after")).encode())
        finally:
            os._exit(0)
    os.close(w)
    mine = draws("after")
    with os.fdopen(r) as f:
        print(json.dumps([mine, json.loads(f.read())]))
    os.waitpid(pid, 0)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("fork", ["os.fork", "libc"])
def test_a_forked_child_never_draws_what_its_parent_draws(fork: str) -> None:
    """The pipeline's generator (a shared claim's owner, backoff jitter) and ``RetryPolicy``'s were
    copied into the child of any fork, ``os.fork`` included: parent and child drew the same
    owner, so two workers forked from one process claimed a call as one owner, and the same
    jitter, retrying in step."""
    out = subprocess.run([sys.executable, "-c", DRAWS_SCRIPT, fork], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (owner, jitter), (child_owner, child_jitter) = json.loads(out.stdout)
    assert len(owner) == len(child_owner) == 16
    assert owner != child_owner
    assert jitter != child_jitter
