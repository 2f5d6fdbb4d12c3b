"""Shared helpers of the memory tests: store factories for every backend, wrapper stores that
lose races on purpose, and the subprocess worker of the cross-process contention tests.

Redis and PostgreSQL come from ``AGENTKIT_TEST_REDIS_URL`` / ``AGENTKIT_TEST_POSTGRES_DSN``
(``eval "$(scripts/services start)"``); without them those cases skip.

Run as a script it is the worker: ``python memory_fixtures.py KIND URL NAMESPACE INDEX EDITS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import AsyncIterator, Optional

import pytest

from agentkit_tools.stores import FileStore, InMemoryStore, PostgresStore, RedisStore

REDIS_URL = os.environ.get("AGENTKIT_TEST_REDIS_URL")
POSTGRES_DSN = os.environ.get("AGENTKIT_TEST_POSTGRES_DSN")
NO_REDIS = "no Redis server: run the suite through scripts/test"
NO_POSTGRES = "no PostgreSQL server: run the suite through scripts/test"
PG_TABLE = "agentkit_store_test"

STORE_KINDS = [
    "memory",
    "file",
    pytest.param("redis", marks=pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS)),
    pytest.param("postgres", marks=pytest.mark.skipif(not POSTGRES_DSN, reason=NO_POSTGRES)),
]
SERVER_KINDS = STORE_KINDS[2:]


@contextlib.asynccontextmanager
async def open_store(kind: str, tmp_path: Path) -> AsyncIterator[object]:
    """A fresh store of ``kind``; server stores get a unique namespace/keys and are closed after."""
    if kind == "memory":
        yield InMemoryStore()
    elif kind == "file":
        yield FileStore(tmp_path / "store")
    elif kind == "redis":
        store = RedisStore(REDIS_URL, namespace=f"test-{uuid.uuid4().hex}")
        try:
            yield store
        finally:
            keys = await store.client.keys(f"{store.namespace}:*")
            if keys:
                await store.client.delete(*keys)
            await store.aclose()
    elif kind == "postgres":
        store = PostgresStore(POSTGRES_DSN, table=PG_TABLE)
        try:
            yield store
        finally:
            await store.aclose()
    else:  # pragma: no cover
        raise ValueError(kind)


def unique_namespace() -> str:
    """Namespaces are unique per test so server stores shared across tests never collide."""
    return f"ns-{uuid.uuid4().hex}"


class LosingStore:
    """Wraps a store; its first ``lose`` compare-and-sets return False without writing, after
    running ``rival`` (an async callable on the inner store) as a concurrent writer would."""

    def __init__(self, inner, lose: int = 1, rival=None) -> None:
        self.inner = inner
        self.lose = lose
        self.rival = rival
        self.cas_calls = 0
        self.get_calls = 0

    async def get(self, key):
        self.get_calls += 1
        return await self.inner.get(key)

    async def set(self, key, value):
        await self.inner.set(key, value)

    async def delete(self, key):
        await self.inner.delete(key)

    async def compare_and_set(self, key, expected, value):
        self.cas_calls += 1
        if self.lose > 0:
            self.lose -= 1
            if self.rival is not None:
                await self.rival(self.inner, key)
            return False
        return await self.inner.compare_and_set(key, expected, value)


class GatedStore:
    """Wraps a store so that the first ``n`` reads all complete before any of them returns:
    ``n`` concurrent commands are guaranteed to read the same document and race.

    Commands of one process on one store object share their writes (they never race each
    other), so racing writers need store objects of their own: :meth:`twin` is another wrapper
    of the same store sharing this one's gate and read count."""

    def __init__(self, inner, n: int) -> None:
        self.inner = inner
        self._shared = {"n": n, "gate": None, "gets": 0}

    def twin(self) -> "GatedStore":
        other = GatedStore(self.inner, 0)
        other._shared = self._shared
        return other

    @property
    def gets(self) -> int:
        return self._shared["gets"]

    async def get(self, key):
        shared = self._shared
        shared["gets"] += 1
        value = await self.inner.get(key)
        if shared["n"] > 0:
            if shared["gate"] is None:
                shared["gate"] = asyncio.Event()
            shared["n"] -= 1
            if shared["n"] == 0:
                shared["gate"].set()
            else:
                await asyncio.wait_for(shared["gate"].wait(), 10)
        return value

    async def set(self, key, value):
        await self.inner.set(key, value)

    async def delete(self, key):
        await self.inner.delete(key)

    async def compare_and_set(self, key, expected, value):
        return await self.inner.compare_and_set(key, expected, value)


class CountingStore:
    """Wraps a store: counts the calls, can slow each compare-and-set down by ``delay`` seconds,
    and can fail the compare-and-sets numbered in ``fail_on`` (1-based) with ``ConnectionError``
    (as a dropped connection would). ``held``: each compare-and-set stays in flight until the
    test lets it through (``await entered(n)``: the n-th one (1-based) is in flight;
    ``release(n)``): a test orders its steps by these events, not by time."""

    def __init__(self, inner, delay: float = 0.0, fail_on: tuple = (), held: bool = False) -> None:
        self.inner = inner
        self.delay = delay
        self.fail_on = fail_on
        self.held = held
        self._entered: dict[int, asyncio.Event] = {}
        self._released: dict[int, asyncio.Event] = {}
        self.gets = 0
        self.cas_calls = 0

    async def entered(self, n: int) -> None:
        """The n-th compare-and-set is in flight (a hang guard of 10 s)."""
        await asyncio.wait_for(self._entered.setdefault(n, asyncio.Event()).wait(), 10)

    def release(self, n: int) -> None:
        """Let the n-th compare-and-set go on."""
        self._released.setdefault(n, asyncio.Event()).set()

    async def get(self, key):
        self.gets += 1
        return await self.inner.get(key)

    async def set(self, key, value):
        await self.inner.set(key, value)

    async def delete(self, key):
        await self.inner.delete(key)

    async def compare_and_set(self, key, expected, value):
        self.cas_calls += 1
        n = self.cas_calls
        if self.held:
            self._entered.setdefault(n, asyncio.Event()).set()
            await asyncio.wait_for(self._released.setdefault(n, asyncio.Event()).wait(), 10)
        if self.delay:
            await asyncio.sleep(self.delay)
        if n in self.fail_on:
            raise ConnectionError("store connection lost")
        return await self.inner.compare_and_set(key, expected, value)


class ReleaseHeld:
    """Wraps a store for the idempotency tests; its compare-and-set from a claim (the release of
    a call's claim, ``{"s": "running"}``) waits for ``finish``, or never answers without one."""

    def __init__(self, inner: object, finish: Optional[asyncio.Event] = None) -> None:
        self.inner = inner
        self.finish = finish

    async def get(self, key: str) -> object:
        return await self.inner.get(key)

    async def set(self, key: str, value: object) -> None:
        await self.inner.set(key, value)

    async def compare_and_set(self, key: str, expected: object, value: object) -> bool:
        if expected is not None and store_doc(expected).get("s") == "running":
            await (self.finish or asyncio.Event()).wait()
        return await self.inner.compare_and_set(key, expected, value)

    def claims(self) -> list:
        """The state of every claim the wrapped in-memory store holds."""
        return [store_doc(v)["s"] for v in self.inner._data.values()]


def store_doc(value: object) -> dict:
    """A store document as JSON (stores hand back the text they were given, or parsed JSON)."""
    return json.loads(value) if isinstance(value, str) else value


def lines_file(n: int, prefix: str = "line") -> str:
    """``line 00: todo\\n`` ... one line per index."""
    return "".join(f"{prefix} {i:02d}: todo\n" for i in range(n))


# ------------------------------------------------------------------ cross-process worker


async def _worker(kind: str, url: str, namespace: str, index: int, edits: int) -> dict:
    from agentkit_tools.memory import StoreFiles

    store = _proc_store(kind, url)
    try:
        files = StoreFiles(store, namespace=namespace)
        await store.get("warm-up")  # connect before the start signal
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        for j in range(edits):
            await files.str_replace(
                "/memories/shared.md", f"p{index}-{j:03d}: todo", f"p{index}-{j:03d}: done by {index}"
            )
        return {"commands": files.stats.commands, "attempts": files.stats.attempts}
    finally:
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()


def _proc_store(kind: str, url: str):
    """The store a cross-process worker opens: ``url`` is a directory for ``file``."""
    if kind == "file":
        return FileStore(url)
    if kind == "redis":
        return RedisStore(url, namespace="proc-test")
    return PostgresStore(url, table=PG_TABLE)


async def _kill_writer(directory: str) -> None:
    """Writes big values to a FileStore forever (the SIGKILL test kills it mid-write)."""
    store = FileStore(directory)
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        await store.set(f"k{i % 4}", "x" * 4_000_000)


if __name__ == "__main__":
    if sys.argv[1] == "kill-writer":
        asyncio.run(_kill_writer(sys.argv[2]))
        sys.exit(0)
    kind, url, namespace, index, edits = sys.argv[1:6]
    result = asyncio.run(_worker(kind, url, namespace, int(index), int(edits)))
    print(json.dumps(result), flush=True)
