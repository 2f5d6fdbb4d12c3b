"""Hostile async bodies (review of stepping an async body in the caller's task).

Bounds on time are hang guards (seconds), never speed assertions.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
