"""Thread hop and Invoker overhead, side by side in one run (issue 4).

Measures, per call, on one event loop, calls awaited one after another (latency, not
throughput):

- ``asyncio.to_thread(fn, a, b)``: the baseline way to run a sync tool off the loop;
- ``in_worker(fn, a, b)``: the package's worker pool (daemon threads) completing an asyncio future;
- a direct call on the loop (what ``Invoker(..., inline=...)`` does for non-blocking tools);
- ``Invoker.invoke`` of a trivial tool: bare (``middleware=[]``) and with the full default chain
  (audit, approval, repeat guard, idempotency, retry, timeout), each with the tool run through
  the worker pool and inline, and for an ``async`` tool. The chain's overhead is the difference
  between the default chain and the bare Invoker on the same tool.

Run: ``python3 benches/thread_hop.py [--calls N] [--repeat R]`` (best of R rounds of N calls).
Build the core in release mode first for representative figures (``maturin develop -r`` or a
release build copied to ``python/agentkit_tools/_core.abi3.so``). No OpenTelemetry tracer provider
is configured, so the audit middleware starts no spans (as in an application without tracing).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import sys
import time
from typing import Any, Awaitable, Callable

from agentkit_tools import Invoker, ToolRegistry, tool
from agentkit_tools._runner import in_worker


def body(args: Any, ctx: Any) -> int:
    return 1


async def measure(cases: dict[str, Callable[[int], Awaitable[Any]]], calls: int, repeat: int) -> dict[str, float]:
    """Best µs/call of each case; the rounds of the cases are interleaved so that load from
    other processes affects them alike."""
    for make in cases.values():  # warm up: threads started, caches filled
        for i in range(min(200, calls)):
            await make(i)
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeat):
        for label, make in cases.items():
            t0 = time.perf_counter()
            for i in range(calls):
                await make(i)
            best[label] = min(best[label], (time.perf_counter() - t0) / calls * 1e6)
    for label, us in best.items():
        print(f"  {label:<58} {us:8.1f} µs/call")
    return best


async def main(calls: int, repeat: int) -> dict[str, float]:
    @tool(read_only=True)
    def trivial(n: int) -> int:
        """Return n plus one; a trivial tool for measuring overhead."""
        return n + 1

    @tool(read_only=True)
    async def trivial_async(n: int) -> int:
        """Return n plus one; a trivial async tool for measuring overhead."""
        return n + 1

    reg = ToolRegistry([trivial, trivial_async])
    bare = Invoker(reg, middleware=[])
    full = Invoker(reg)  # the default chain
    bare_inline = Invoker(reg, middleware=[], inline={"trivial"})
    full_inline = Invoker(reg, inline={"trivial"})
    counter = itertools.count()

    def call(name: str) -> dict[str, Any]:
        # distinct arguments, so the repeat guard never refuses and the chain does its full work
        return {"id": "c", "name": name, "input": {"n": next(counter)}}

    async def direct(i: int) -> int:
        return body(i, None)

    print(f"Python {sys.version.split()[0]}; best of {repeat} interleaved rounds of {calls} sequential calls")
    print("thread hop:")
    hop = await measure(
        {
            "asyncio.to_thread(fn, args, ctx)": lambda i: asyncio.to_thread(body, i, None),
            "in_worker(fn, args, ctx)  [worker pool]": lambda i: in_worker(body, i, None),
            "direct call on the loop  [inline]": direct,
        },
        calls,
        repeat,
    )
    print("Invoker.invoke of a trivial tool:")
    inv = await measure(
        {
            "middleware=[]           sync tool, worker pool": lambda i: bare.invoke(call("trivial")),
            "default chain           sync tool, worker pool": lambda i: full.invoke(call("trivial")),
            "middleware=[]           sync tool, inline": lambda i: bare_inline.invoke(call("trivial")),
            "default chain           sync tool, inline": lambda i: full_inline.invoke(call("trivial")),
            "middleware=[]           async tool": lambda i: bare.invoke(call("trivial_async")),
            "default chain           async tool": lambda i: full.invoke(call("trivial_async")),
        },
        calls,
        repeat,
    )
    keys = ["to_thread", "pool", "inline", "bare_pool", "full_pool", "bare_inline", "full_inline", "bare_async", "full_async"]
    r = dict(zip(keys, [*hop.values(), *inv.values()]))
    @tool(read_only=True)
    async def wait_async(n: int) -> int:
        """Wait 0.2 seconds without blocking, then return n."""
        await asyncio.sleep(0.2)
        return n

    @tool(read_only=True)
    def wait_sync(n: int) -> int:
        """Block a worker thread for 0.2 seconds, then return n."""
        time.sleep(0.2)
        return n

    turn_inv = Invoker(ToolRegistry([wait_async, wait_sync]))
    print("invoke_many of ten 0.2 s tools (default chain), wall time:")
    for name in ("wait_async", "wait_sync"):
        t0 = time.perf_counter()
        envs = await turn_inv.invoke_many([{"id": str(i), "name": name, "input": {"n": i}} for i in range(10)])
        assert [e["value"] for e in envs] == list(range(10))
        r[name] = time.perf_counter() - t0
        print(f"  {name:<58} {r[name]:8.3f} s")
    print("summary:")
    print(f"  thread hop: to_thread / Rust pool = {r['to_thread'] / r['pool']:.2f}x "
          f"({r['to_thread']:.1f} µs vs {r['pool']:.1f} µs; inline {r['inline']:.2f} µs)")
    print(f"  default chain overhead per call (vs middleware=[]): "
          f"{r['full_inline'] - r['bare_inline']:.1f} µs (inline tool), {r['full_async'] - r['bare_async']:.1f} µs (async tool)")
    print(f"  whole invoke, default chain: {r['full_pool']:.1f} µs (sync tool via pool), "
          f"{r['full_inline']:.1f} µs (inline), {r['full_async']:.1f} µs (async)")
    return r


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    ns = parser.parse_args()
    logging.getLogger("agentkit_tools").setLevel(logging.WARNING)
    asyncio.run(main(ns.calls, ns.repeat))
