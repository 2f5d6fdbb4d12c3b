"""Memory speed: the cost of a ``StoreFiles`` view against ``InMemoryFiles``, and edits per second
through ``StoreFiles`` on every store, one writer and four contending writers.

Targets (checked at the end of the run): ``StoreFiles(InMemoryStore()).view`` at most 3x
``InMemoryFiles.view`` (same file, same run, medians of repeated rounds); Redis compare-and-set
edits with 4 writers at least 1,500/s with 0 lost.

Edits per second:

Each edit is a ``str_replace`` of one distinct line of a 200-line file (one compare-and-set
against the document the writer last saw when nothing races; every store here hands back the
current document with a lost race). "4 writers" are four asyncio tasks in this process, each with
its own ``StoreFiles`` on the same namespace, editing disjoint lines at the same time, so every
lost compare-and-set race is retried against the fresh tree. Reported per store and scenario:
edits/s, the mean retries per edit (lost races), the most attempts one edit needed, the ratio to
the InMemoryStore figure of the same scenario (the baseline measured in the same run), and the
lost edits, counted exactly: an acknowledged edit missing from the final file (any other change
to the file aborts the run).

Redis and PostgreSQL come from AGENTKIT_TEST_REDIS_URL / AGENTKIT_TEST_POSTGRES_DSN:

    eval "$(scripts/services start)"; python benches/memory_bench.py; scripts/services stop

Writes the table to stdout and JSON to benches/results/memory_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentkit_tools.memory import InMemoryFiles, StoreFiles
from agentkit_tools.stores import FileStore, InMemoryStore, PostgresStore, RedisStore

LINES = 200
PATH = "/memories/bench.md"


async def _open(kind: str, tmp: Path):
    if kind == "InMemoryStore":
        return InMemoryStore()
    if kind == "FileStore":
        return FileStore(tmp / f"fs-{uuid.uuid4().hex}")
    if kind == "RedisStore":
        return RedisStore(os.environ["AGENTKIT_TEST_REDIS_URL"], namespace="bench")
    if kind == "PostgresStore":
        return PostgresStore(os.environ["AGENTKIT_TEST_POSTGRES_DSN"], table="agentkit_bench")
    raise ValueError(kind)


async def _scenario(kind: str, writers: int, edits: int, tmp: Path) -> dict:
    store = await _open(kind, tmp)
    ns = f"bench-{uuid.uuid4().hex}"
    try:
        setup = StoreFiles(store, namespace=ns)
        await setup.create(PATH, "".join(f"line {i:03d}: todo\n" for i in range(LINES)))
        per_writer = edits // writers
        clients = [StoreFiles(store, namespace=ns) for _ in range(writers)]

        acknowledged: list[int] = []
        most_attempts = 0

        async def writer(w: int, files: StoreFiles) -> None:
            nonlocal most_attempts
            for j in range(per_writer):
                i = w * per_writer + j
                before = files.stats.attempts
                await files.str_replace(PATH, f"line {i:03d}: todo", f"line {i:03d}: done")
                most_attempts = max(most_attempts, files.stats.attempts - before)
                acknowledged.append(i)

        started = time.perf_counter()
        await asyncio.gather(*(writer(w, c) for w, c in enumerate(clients)))
        elapsed = time.perf_counter() - started
        done = len(acknowledged)
        lost = await _lost(setup, set(acknowledged), f"{kind}, {writers} writers")
        commands = sum(c.stats.commands for c in clients)
        attempts = sum(c.stats.attempts for c in clients)
        await store.delete(setup.key)
        return {
            "store": kind,
            "writers": writers,
            "edits": done,
            "seconds": round(elapsed, 4),
            "edits_per_s": round(done / elapsed, 1),
            "retries_per_edit": round((attempts - commands) / commands, 3),
            "max_attempts_seen": most_attempts,
            "lost_updates": lost,
        }
    finally:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()


async def _proc_worker(kind: str, url: str, ns: str, index: int, per_writer: int) -> None:
    """One writer process of the ``processes`` scenario (run as ``--worker``): edits its own
    lines after the parent's go signal, then prints its figures as JSON."""
    if kind == "FileStore":
        store: Any = FileStore(url)
    elif kind == "RedisStore":
        store = RedisStore(url, namespace="bench")
    else:
        store = PostgresStore(url, table="agentkit_bench")
    files = StoreFiles(store, namespace=ns)
    await store.get("warm-up")  # connected before the start signal
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    acknowledged, most = [], 0
    for j in range(per_writer):
        i = index * per_writer + j
        before = files.stats.attempts
        await files.str_replace(PATH, f"line {i:03d}: todo", f"line {i:03d}: done")
        most = max(most, files.stats.attempts - before)
        acknowledged.append(i)
    print(json.dumps({"acknowledged": acknowledged, "commands": files.stats.commands,
                      "attempts": files.stats.attempts, "most": most}), flush=True)
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


async def _processes(kind: str, writers: int, edits: int, tmp: Path) -> dict:
    """``writers`` processes, each with its own store client, racing on one document: every
    lost compare-and-set is a real race between processes."""
    url = {"FileStore": str(tmp / "shared"), "RedisStore": os.environ.get("AGENTKIT_TEST_REDIS_URL"),
           "PostgresStore": os.environ.get("AGENTKIT_TEST_POSTGRES_DSN")}[kind]
    store = await _open(kind, tmp) if kind != "FileStore" else FileStore(url)
    ns = f"bench-{uuid.uuid4().hex}"
    setup = StoreFiles(store, namespace=ns)
    await setup.create(PATH, "".join(f"line {i:03d}: todo\n" for i in range(LINES)))
    per_writer = edits // writers
    children = [
        subprocess.Popen([sys.executable, __file__, "--worker", kind, url, ns, str(w), str(per_writer)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(writers)
    ]
    loop = asyncio.get_running_loop()
    for c in children:
        line = await loop.run_in_executor(None, c.stdout.readline)
        if line.strip() != "ready":
            raise RuntimeError(c.stderr.read())
    started = time.perf_counter()
    for c in children:
        c.stdin.write("go\n")
        c.stdin.flush()
    outs = []
    for c in children:
        out, err = await loop.run_in_executor(None, lambda c=c: c.communicate(timeout=300))
        if c.returncode != 0:
            raise RuntimeError(f"{kind} writer failed: {err}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = time.perf_counter() - started  # includes the workers' exit: a lower bound on edits/s
    ack = {i for o in outs for i in o["acknowledged"]}
    lost = await _lost(setup, ack, f"{kind}, {writers} processes")
    commands = sum(o["commands"] for o in outs)
    attempts = sum(o["attempts"] for o in outs)
    await store.delete(setup.key)
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()
    return {
        "store": kind,
        "writers": f"{writers} proc",
        "edits": len(ack),
        "seconds": round(elapsed, 4),
        "edits_per_s": round(len(ack) / elapsed, 1),
        "retries_per_edit": round((attempts - commands) / commands, 3),
        "max_attempts_seen": max(o["most"] for o in outs),
        "lost_updates": lost,
    }


async def _lost(setup: StoreFiles, ack: set, label: str) -> int:
    """Exact: every acknowledged edit must be in the file (else it is lost), and nothing else
    may differ from the original (else the file is corrupt and the run is void)."""
    lines = (await setup.view(PATH)).split("\n")
    expected = [f"line {i:03d}: {'done' if i in ack else 'todo'}" for i in range(LINES)] + [""]
    if len(lines) != len(expected):
        raise AssertionError(f"{label}: {len(lines)} lines, expected {len(expected)}")
    corrupt = [i for i in range(len(lines)) if i not in ack and lines[i] != expected[i]]
    if corrupt:
        raise AssertionError(f"{label}: lines {corrupt} changed without an edit")
    return sum(1 for i in ack if lines[i] != expected[i])


async def view_costs(rounds: int = 15, per_round: int = 2000) -> dict:
    """Microseconds per ``view`` of a 20-line file: ``InMemoryFiles`` against
    ``StoreFiles(InMemoryStore())``, interleaved rounds, medians."""
    text = "".join(f"line {i:02d}: some note text\n" for i in range(20))
    plain = InMemoryFiles()
    stored = StoreFiles(InMemoryStore(), namespace="view-bench")
    for f in (plain, stored):
        await f.create(PATH, text)
    samples: dict[str, list[float]] = {"InMemoryFiles": [], "StoreFiles(InMemoryStore)": []}
    for _ in range(rounds):
        for name, f in (("InMemoryFiles", plain), ("StoreFiles(InMemoryStore)", stored)):
            view = f.view
            started = time.perf_counter()
            for _ in range(per_round):
                await view(PATH)
            samples[name].append((time.perf_counter() - started) / per_round * 1e6)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "in_memory_files_us": round(med["InMemoryFiles"], 2),
        "store_files_us": round(med["StoreFiles(InMemoryStore)"], 2),
        "ratio": round(med["StoreFiles(InMemoryStore)"] / med["InMemoryFiles"], 2),
    }


async def main(edits: int) -> list[dict]:
    kinds = ["InMemoryStore", "FileStore"]
    if os.environ.get("AGENTKIT_TEST_REDIS_URL"):
        kinds.append("RedisStore")
    if os.environ.get("AGENTKIT_TEST_POSTGRES_DSN"):
        kinds.append("PostgresStore")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for writers in (1, 4):
                await _scenario(kind, writers, min(edits, 40), Path(tmp))  # warm-up
                rows.append(await _scenario(kind, writers, edits, Path(tmp)))
            if kind != "InMemoryStore":
                rows.append(await _processes(kind, 4, edits, Path(tmp)))
    base = {r["writers"]: r["edits_per_s"] for r in rows if r["store"] == "InMemoryStore"}
    for r in rows:
        r["vs_in_memory"] = round(r["edits_per_s"] / base[r["writers"]], 3) if r["writers"] in base else None
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        kind, url, ns, index, per_writer = sys.argv[2:7]
        asyncio.run(_proc_worker(kind, url, ns, int(index), int(per_writer)))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=200, help="edits per scenario (at most 200)")
    opts = parser.parse_args()
    view = asyncio.run(view_costs())
    print(
        f"view of a 20-line file: InMemoryFiles {view['in_memory_files_us']:.2f} us, "
        f"StoreFiles(InMemoryStore) {view['store_files_us']:.2f} us, ratio {view['ratio']:.2f} (target <= 3)\n"
    )
    rows = asyncio.run(main(min(opts.edits, LINES)))
    header = (
        f"{'store':<14} {'writers':>7} {'edits':>6} {'edits/s':>9} {'retries/edit':>13} {'max attempts':>13} "
        f"{'vs memory':>10} {'lost':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['store']:<14} {r['writers']:>7} {r['edits']:>6} {r['edits_per_s']:>9.1f} "
            f"{r['retries_per_edit']:>13.3f} {r['max_attempts_seen']:>13} "
            f"{'' if r['vs_in_memory'] is None else format(r['vs_in_memory'], '.3f'):>10} {r['lost_updates']:>5}"
        )
    out = Path(__file__).with_name("results")
    out.mkdir(exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(), "lines": LINES}
    (out / "memory_bench.json").write_text(json.dumps({"meta": meta, "view": view, "rows": rows}, indent=2) + "\n")
    for r in rows:
        if r["store"] == "RedisStore" and r["writers"] == "4 proc":
            print(f"  Redis, 4 processes (every race real): {r['edits_per_s']:.0f} edits/s, "
                  f"{r['retries_per_edit']:.2f} retries/edit, at most {r['max_attempts_seen']} attempts, {r['lost_updates']} lost")
    redis4 = [r for r in rows if r["store"] == "RedisStore" and r["writers"] == 4]
    print("\ntargets:")
    print(f"  StoreFiles view / InMemoryFiles view = {view['ratio']:.2f} (<= 3): {'met' if view['ratio'] <= 3 else 'MISSED'}")
    if redis4:
        r = redis4[0]
        ok = r["edits_per_s"] >= 1500 and r["lost_updates"] == 0
        print(f"  Redis, 4 writers: {r['edits_per_s']:.0f} edits/s, {r['lost_updates']} lost (>= 1500/s, 0 lost): {'met' if ok else 'MISSED'}")
    else:
        print("  Redis, 4 writers: not measured (set AGENTKIT_TEST_REDIS_URL)")
    print(f"\nwrote {out / 'memory_bench.json'}")
