"""Instructions per call of ``Invoker.invoke`` against its floor, under callgrind (issue 11).

Wall-clock figures on a shared machine move by tens of percent between runs; the instruction
count of a call does not. This runs the cases of ``benches/compare.py``'s M2 group (the same
6-parameter tool, the same arguments, the same default chain) under ``valgrind --tool=callgrind``
and prints thousands of instructions per call, steady state:

- floor: ``fn(**core.validate(args))`` in a plain loop, and ``await afn(**core.validate(args))``
  in a coroutine (what ``compare.py`` calls the floor);
- ``Invoker.invoke`` of a ``non_blocking`` sync tool (inline) and of an ``async`` tool whose body
  does not suspend, with the default chain and with none (``middleware=[]``);
- each with a mapping and with the JSON text of the arguments;
- with a mapping, the default chain: a tool whose flag is not a plain value (``idempotent = 0``:
  its flags are read at every call), and a process that constructs a ``FunctionTool`` per request
  (each call constructs one it does not register; the construction's own cost, measured alone,
  is subtracted);
- ``compare.py``'s M5 group: one ``Invoker.invoke_many`` turn of N (and 2N) concurrent calls of an
  async tool that sleeps 10 ms (the default chain), against a bare ``asyncio.gather`` of the same
  coroutines; the calls are built before the region.
- with a mapping, the default chain observed: ``audit(sink)`` with a sync sink (each call builds
  and emits its record), with an async sink that does not suspend, one that suspends once
  (``asyncio.sleep(0)``) and one that waits once on a future, and last, with an OpenTelemetry SDK
  tracer provider installed (no span processor: each call opens and ends its ``execute_tool``
  span too);

How: each measured region is one ``sys.call_tracing(region, ...)``; callgrind collects only
inside that C function (``--toggle-collect=sys_call_tracing``) and dumps a profile after each
(``--dump-after``). Every case runs once with ``N`` calls and once with ``2N`` (after a
warm-up); the difference divided by ``N`` is the cost of one call, without the region's fixed
costs (entering the event loop, the loop's own set-up). Needs valgrind and a Python whose
shared library keeps its symbols (pyenv and distribution builds do).

Run: ``python benches/callgrind.py [--calls N] [--only SUBSTRING]`` with a release build of the
core in place (``cargo build --release --lib --features python``, then copy
``target/release/libagentkit_tools_core.so`` to ``python/agentkit_tools/_core.abi3.so``; a debug
build from ``maturin develop`` counts several times more). About a minute and a half.
``--keep DIR`` keeps the profiles (``callgrind_annotate DIR/cg.out.N`` for a breakdown by
function; the region order is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import glob
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _drop(record: Any) -> None:
    """An audit sink that keeps nothing."""


async def _adrop(record: Any) -> None:
    """An async audit sink that keeps nothing and does not suspend."""


async def _asleep(record: Any) -> None:
    """An async audit sink that keeps nothing and suspends once (``asyncio.sleep(0)``)."""
    await asyncio.sleep(0)


async def _await_future(record: Any) -> None:
    """An async audit sink that keeps nothing and waits once on a future (the loop completes it at
    once)."""
    fut = asyncio.get_running_loop().create_future()
    fut.get_loop().call_soon(fut.set_result, None)
    await fut


def _cases(calls: int) -> list[tuple[str, str, Callable[[int], Any]]]:
    """``(name, kind, run)``: ``run(n)`` performs ``n`` calls; kind ``sync`` runs in a plain
    loop, ``async`` returns a coroutine run on one event loop."""
    from compare import ARGS, ARGS_JSON, EXPECTED, make_fn

    from agentkit_tools import FunctionTool, Invoker, ToolRegistry, tool
    from agentkit_tools.middleware import approval, audit, idempotency, repeat_guard, retry, timeout

    fn = make_fn("search_docs")
    afn = make_fn("search_docs_async", is_async=True)
    inline = tool(make_fn("search_docs_inline"), read_only=True)
    inline.non_blocking = True  # type: ignore[attr-defined]
    atool = tool(afn, read_only=True)
    # The same tools with a flag that is not a plain value (an int for a bool).
    inline_np = tool(make_fn("search_docs_inline_np"), read_only=True)
    inline_np.non_blocking = True  # type: ignore[attr-defined]
    atool_np = tool(make_fn("search_docs_async_np", is_async=True), read_only=True)
    for t in (inline_np, atool_np):
        t.idempotent = 0  # type: ignore[assignment]
    reg = ToolRegistry([inline, atool, inline_np, atool_np])
    # The chain of compare.py: the default chain, a repeat limit identical calls never reach.
    chain = [audit(), approval(), repeat_guard(limit=10**9), idempotency(), retry(), timeout()]
    inv = Invoker(reg, middleware=chain)
    sunk = Invoker(reg, middleware=[audit(_drop), *chain[1:]])
    asunk = Invoker(reg, middleware=[audit(_adrop), *chain[1:]])
    asleeps = Invoker(reg, middleware=[audit(_asleep), *chain[1:]])
    afuture = Invoker(reg, middleware=[audit(_await_future), *chain[1:]])
    bare = Invoker(reg, middleware=[])
    validate = inline._core.validate

    def sync_loop(f: Callable[[], Any]) -> Callable[[int], Any]:
        def run(n: int) -> None:
            for _ in range(n):
                f()
        return run

    def async_loop(f: Callable[[], Any]) -> Callable[[int], Any]:
        async def run(n: int) -> None:
            for _ in range(n):
                await f()
        return run

    def construct() -> Any:
        return FunctionTool(name="made", fn=fn, description="A tool made per request.", side_effecting=False)

    def made_per_call(c: dict[str, Any]) -> Callable[[], Any]:
        def call() -> Any:
            construct()
            return inv.invoke(c)
        return call

    def traced(f: Callable[[], Any]) -> Callable[[int], Any]:
        run = async_loop(f)

        def start(n: int) -> Any:
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider

            if not isinstance(trace._TRACER_PROVIDER, TracerProvider):  # type: ignore[attr-defined]
                trace._TRACER_PROVIDER = TracerProvider()  # type: ignore[attr-defined]
            return run(n)
        return start

    def others() -> list[tuple[str, str, Callable[[int], Any]]]:
        c_in = {"id": "c1", "name": "search_docs_inline", "input": ARGS}
        c_as = {"id": "c1", "name": "search_docs_async", "input": ARGS}
        c_in_np = {"id": "c1", "name": "search_docs_inline_np", "input": ARGS}
        c_as_np = {"id": "c1", "name": "search_docs_async_np", "input": ARGS}
        for c in (c_in_np, c_as_np):
            env = asyncio.run(inv.invoke(c))
            assert env["ok"] and env["value"] == EXPECTED, env
        return [
            ("FunctionTool construction (mapping)", "sync", sync_loop(construct)),
            ("invoke inline, non-plain flag (mapping)", "async", async_loop(lambda: inv.invoke(c_in_np))),
            ("invoke inline, tool made per call (mapping)", "async", async_loop(made_per_call(c_in))),
            ("invoke async, non-plain flag (mapping)", "async", async_loop(lambda: inv.invoke(c_as_np))),
            ("invoke async, tool made per call (mapping)", "async", async_loop(made_per_call(c_as))),
            ("invoke inline, audit sink (mapping)", "async", async_loop(lambda: sunk.invoke(c_in))),
            ("invoke async, audit sink (mapping)", "async", async_loop(lambda: sunk.invoke(c_as))),
            ("invoke inline, async audit sink (mapping)", "async", async_loop(lambda: asunk.invoke(c_in))),
            ("invoke async, async audit sink (mapping)", "async", async_loop(lambda: asunk.invoke(c_as))),
            ("invoke inline, async audit sink that suspends (mapping)", "async",
             async_loop(lambda: asleeps.invoke(c_in))),
            ("invoke inline, async audit sink that awaits a future (mapping)", "async",
             async_loop(lambda: afuture.invoke(c_in))),
            # last: the tracer provider, once installed, stays for the rest of the process
            ("invoke inline, audit sink + span (mapping)", "async", traced(lambda: sunk.invoke(c_in))),
            ("invoke async, audit sink + span (mapping)", "async", traced(lambda: sunk.invoke(c_as))),
        ]

    def cases_of(kind: str, payload: Any) -> list[tuple[str, str, Callable[[int], Any]]]:
        def floor() -> Any:
            return fn(**validate(payload))

        async def afloor() -> Any:
            return await afn(**validate(payload))

        c_in = {"id": "c1", "name": "search_docs_inline", "input": payload}
        c_as = {"id": "c1", "name": "search_docs_async", "input": payload}
        for f in (floor, afloor):
            assert (f() if f is floor else asyncio.run(f())) == EXPECTED
        for i in (inv, bare):
            for c in (c_in, c_as):
                env = asyncio.run(i.invoke(c))
                assert env["ok"] and env["value"] == EXPECTED, env
        return [
            (f"floor sync ({kind})", "sync", sync_loop(floor)),
            (f"invoke inline ({kind})", "async", async_loop(lambda: inv.invoke(c_in))),
            (f"invoke inline, middleware=[] ({kind})", "async", async_loop(lambda: bare.invoke(c_in))),
            (f"floor async ({kind})", "async", async_loop(afloor)),
            (f"invoke async ({kind})", "async", async_loop(lambda: inv.invoke(c_as))),
            (f"invoke async, middleware=[] ({kind})", "async", async_loop(lambda: bare.invoke(c_as))),
        ]

    def concurrent() -> list[tuple[str, str, Callable[[int], Any]]]:
        sleeper = make_fn("sleepy", is_async=True, body="await asyncio.sleep(0.01)")
        turns = Invoker(ToolRegistry([tool(sleeper, read_only=True)]))  # the default chain
        # the turns of the warm-up, N and 2N calls, built before any region (distinct calls)
        argsets = {n: [{**ARGS, "limit": 4 + i} for i in range(n)] for n in (max(200, calls // 5), calls, 2 * calls)}
        turn_calls = {n: [{"id": f"c{i}", "name": "sleepy", "input": a} for i, a in enumerate(a_n)] for n, a_n in argsets.items()}

        async def gathered(n: int) -> None:
            await asyncio.gather(*(sleeper(**a) for a in argsets[n]))

        async def turn(n: int) -> None:
            envs = await turns.invoke_many(turn_calls[n])
            assert all(e["ok"] for e in envs), envs[0]
            turns.forget(turns.default_scope)
        return [
            ("M5 bare gather (turn)", "turn", gathered),
            ("M5 invoke_many (turn)", "turn", turn),
        ]

    # others() last: the tracer provider it installs stays for the rest of the process
    return cases_of("mapping", ARGS) + cases_of("JSON", ARGS_JSON) + concurrent() + others()


def child(calls: int, only: str | None) -> None:
    """Under callgrind: one region per (case, n); prints the region order on stdout."""
    logging.getLogger("agentkit_tools").setLevel(logging.WARNING)
    cases = [c for c in _cases(calls) if only is None or only in c[0]]
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def region(kind: str, run: Callable[[int], Any], n: int) -> None:
        if kind == "sync":
            run(n)
        else:  # "async", "turn": a coroutine
            loop.run_until_complete(run(n))

    for name, kind, run in cases:
        region(kind, run, max(200, calls // 5))  # warm-up, not collected
        for n in (calls, 2 * calls):
            gc.collect()
            sys.call_tracing(region, (kind, run, n))
            print(f"{name}\t{n}", flush=True)
    loop.close()


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="N: calls of the shorter region of each case")
    ap.add_argument("--only", help="only the cases whose name contains this")
    ap.add_argument("--keep", help="keep the callgrind profiles in this directory")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.calls, a.only)
        return
    out_dir = a.keep or tempfile.mkdtemp(prefix="callgrind-")
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "cg.out*")):
        os.remove(old)
    cmd = [
        "valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=sys_call_tracing",
        "--dump-after=sys_call_tracing", f"--callgrind-out-file={out_dir}/cg.out",
        sys.executable, __file__, "--child", "--calls", str(a.calls),
    ] + (["--only", a.only] if a.only else [])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"valgrind failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    regions = [line.split("\t") for line in proc.stdout.splitlines() if "\t" in line]
    dumps = sorted(glob.glob(os.path.join(out_dir, "cg.out.*")), key=lambda p: int(p.rsplit(".", 1)[1]))
    if len(dumps) < len(regions):
        sys.exit(f"{len(regions)} regions but {len(dumps)} profiles in {out_dir}")
    totals = [_total(p) for p in dumps[: len(regions)]]
    per_call: dict[str, float] = {}
    for i in range(0, len(regions), 2):
        (name, n1), (_, n2) = regions[i], regions[i + 1]
        per_call[name] = (totals[i + 1] - totals[i]) / (int(n2) - int(n1))
    print(f"thousand instructions per call (N={a.calls} and 2N calls, difference / N)")
    made = per_call.get("FunctionTool construction (mapping)")
    for name, v in per_call.items():
        if "made per call" in name and made is not None:
            v -= made  # the invoke's own cost
        kind = name[name.index("(") :]
        floor = per_call.get(("floor async " if "async" in name else "floor sync ") + kind)
        if name.startswith("M5 invoke_many"):
            floor = per_call.get("M5 bare gather " + kind)
        against = "gather" if name.startswith("M5") else "floor"
        ratio = f"{v / floor:5.2f}x {against}" if floor and not name.startswith(("floor", "FunctionTool")) else ""
        print(f"  {name:42s} {v / 1000:8.2f}k  {ratio}")
    if a.keep:
        print(f"profiles in {out_dir}: region i is cg.out.{{i+1}}, in the order above (N, then 2N)")


if __name__ == "__main__":
    main()
