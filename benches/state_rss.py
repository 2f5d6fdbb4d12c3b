"""Memory of an Invoker over many conversations that are never forgotten.

Runs ``N`` calls (default 1,000,000) through one default-chain ``Invoker``, each with a fresh
``ctx.run_id`` and never calling ``forget``: a read-only call and a side-effecting call per
conversation, so both the repeat counts and the idempotency window are filled. Prints the
process's resident memory every tenth of the run and the held state (``Invoker.state.sizes()``,
``state.scopes()``). The state is bounded (4,096 conversations, the least recently used forgotten
first), so the RSS must stay flat after warm-up.

    python benches/state_rss.py [N]
"""

from __future__ import annotations

import asyncio
import resource
import sys
import time

from agentkit_tools import Invoker, ToolContext, ToolRegistry, tool


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@tool(read_only=True)
async def look(q: str) -> str:
    """Look a word up in the dictionary and return its entry."""
    return q


@tool(side_effecting=True)
async def note(text: str) -> str:
    """Write a note into the user's notebook and return its id."""
    return "n-1"


async def main(n: int) -> None:
    inv = Invoker(ToolRegistry([look, note]))
    step = max(1, n // 10)
    started = time.perf_counter()
    first_rss = None
    for i in range(n // 2):
        ctx = ToolContext(run_id=f"run-{i}")
        await inv.invoke({"id": "a", "name": "look", "input": {"q": f"word {i}"}}, ctx)
        await inv.invoke({"id": "b", "name": "note", "input": {"text": f"note {i}"}}, ctx)
        if (2 * i) % step < 2:
            rss = rss_mb()
            if first_rss is None and i >= n // 20:
                first_rss = rss
            print(
                f"{2 * i + 2:>9} calls  rss {rss:7.1f} MB  sizes {inv.state.sizes()}  scopes {inv.state.scopes()}"
                f"  {time.perf_counter() - started:6.1f} s",
                flush=True,
            )
    print(f"done: {n} calls, rss {rss_mb():.1f} MB (after 5%: {first_rss:.1f} MB)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
