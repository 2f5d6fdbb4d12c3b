"""Hostile async bodies (review of stepping an async body in the caller's task).

Bounds on time are hang guards (seconds), never speed assertions.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

from agentkit_tools import Invoker, ToolRegistry, tool


def call(name: str, cid: str = "c1", **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "input": args}


def timeout_env(name: str, limit: str) -> dict[str, Any]:
    return {"ok": False, "error": {
        "code": "timeout",
        "message": f"{name} did not finish within {limit}s. Do not retry immediately; tell the user the backend is slow."}}

# A body that swallows every cancellation and keeps awaiting. The caller gets ``timeout`` at its
# deadline; the body's clean-up then runs in a background task, which ``asyncio.run`` cancels
# when ``main`` ends. That cancellation must end the body too: ``asyncio.run`` returns.
SWALLOWS_FOREVER = textwrap.dedent(
    """
    import asyncio, logging, sys, time
    from agentkit_tools import Invoker, ToolRegistry, tool

    logging.basicConfig(stream=sys.stderr)
    steps = []

    @tool(read_only=True, timeout_s=0.05)
    async def stubborn(x: int) -> int:
        \"\"\"Wait forever, ignoring every cancellation (a hostile body).\"\"\"
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                steps.append("swallowed")

    async def main():
        env = await Invoker(ToolRegistry([stubborn])).invoke({"id": "c", "name": "stubborn", "input": {"x": 1}})
        await asyncio.sleep(0.1)
        return env["error"]["code"]

    started = time.monotonic()
    code = asyncio.run(main())
    print(code, steps, time.monotonic() - started < 5)
    """
)


def test_a_body_that_swallows_every_cancellation_never_keeps_asyncio_run_from_ending() -> None:
    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, "-W", "error", "-c", SWALLOWS_FOREVER],
            capture_output=True, text=True, timeout=30,
        )
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "timeout ['swallowed', 'swallowed'] True\n", "")


async def test_a_call_the_body_made_never_cancels_the_caller_after_the_body_was_abandoned() -> None:
    """The outer body calls an inner tool (its own deadline later than the outer one) whose
    ``finally`` takes a while. At the outer deadline the caller gets ``timeout`` and the bodies'
    clean-up goes on in a background task; when the inner deadline passes during that clean-up it
    cancels that task, never the caller's (which has moved on)."""
    seen: list[Any] = []

    @tool(read_only=True, timeout_s=0.2)
    async def inner(x: int) -> int:
        """Wait long, then close a connection slowly (a slow clean-up)."""
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.5)
        return x

    inner_inv = Invoker(ToolRegistry([inner]))

    @tool(read_only=True, timeout_s=0.05)
    async def outer(x: int) -> int:
        """Call the inner tool through its own Invoker and report what it answered."""
        try:
            env = await inner_inv.invoke(call("inner", x=x))
        finally:
            seen.append("outer clean-up")
        return 1

    inv = Invoker(ToolRegistry([outer]))
    me = asyncio.current_task()
    assert me is not None
    for round_ in range(3):
        seen.clear()
        env = await inv.invoke(call("outer", x=round_))
        assert env == timeout_env("outer", "0.05")
        await asyncio.sleep(0.8)  # the inner deadline passes meanwhile; the clean-up ends
        assert seen == ["outer clean-up"]
        if sys.version_info >= (3, 11):
            assert me.cancelling() == 0
