"""Memory speed: the cost of a ``StoreFiles`` view against ``InMemoryFiles``, and edits per second
through ``StoreFiles`` on every store, one writer and four contending writers.

Targets (checked at the end of the run): ``StoreFiles(InMemoryStore()).view`` at most 3x
``InMemoryFiles.view`` (same file, same run, medians of repeated rounds); Redis compare-and-set
edits with 4 writers at least 1,500/s with 0 lost.

Edits per second:

Each edit is a ``str_replace`` of one distinct line of a 200-line file (one read, one
compare-and-set when nothing races). "4 writers" are four asyncio tasks in this process, each with
its own ``StoreFiles`` on the same namespace, editing disjoint lines at the same time, so every
lost compare-and-set race is retried against the fresh tree. Reported per store and scenario:
edits/s, the mean retries per edit (lost races), and the ratio to the InMemoryStore figure of the
same scenario (the baseline measured in the same run).

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
import tempfile
import time
import uuid
from pathlib import Path

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

        async def writer(w: int, files: StoreFiles) -> None:
            for j in range(per_writer):
                i = w * per_writer + j
                await files.str_replace(PATH, f"line {i:03d}: todo", f"line {i:03d}: done")

        started = time.perf_counter()
        await asyncio.gather(*(writer(w, c) for w, c in enumerate(clients)))
        elapsed = time.perf_counter() - started
        done = per_writer * writers
        text = await setup.view(PATH)
        lost = sum(1 for line in text.splitlines()[:done] if not line.endswith("done"))
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
            "max_attempts_seen": None,
            "lost_updates": lost,
        }
    finally:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()


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
    base = {r["writers"]: r["edits_per_s"] for r in rows if r["store"] == "InMemoryStore"}
    for r in rows:
        r["vs_in_memory"] = round(r["edits_per_s"] / base[r["writers"]], 3)
        r.pop("max_attempts_seen")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=200, help="edits per scenario (at most 200)")
    opts = parser.parse_args()
    view = asyncio.run(view_costs())
    print(
        f"view of a 20-line file: InMemoryFiles {view['in_memory_files_us']:.2f} us, "
        f"StoreFiles(InMemoryStore) {view['store_files_us']:.2f} us, ratio {view['ratio']:.2f} (target <= 3)\n"
    )
    rows = asyncio.run(main(min(opts.edits, LINES)))
    header = f"{'store':<14} {'writers':>7} {'edits':>6} {'edits/s':>9} {'retries/edit':>13} {'vs memory':>10} {'lost':>5}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['store']:<14} {r['writers']:>7} {r['edits']:>6} {r['edits_per_s']:>9.1f} "
            f"{r['retries_per_edit']:>13.3f} {r['vs_in_memory']:>10.3f} {r['lost_updates']:>5}"
        )
    out = Path(__file__).with_name("results")
    out.mkdir(exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(), "lines": LINES}
    (out / "memory_bench.json").write_text(json.dumps({"meta": meta, "view": view, "rows": rows}, indent=2) + "\n")
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
