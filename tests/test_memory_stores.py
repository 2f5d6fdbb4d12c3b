"""StorePort implementations and StoreFiles on every store (SPEC §10, §11 "Memory").

Redis and PostgreSQL cases read AGENTKIT_TEST_REDIS_URL / AGENTKIT_TEST_POSTGRES_DSN and skip
without them ("run the suite through scripts/test", which starts both servers).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import sys
from pathlib import Path

import pytest

from agentkit_tools.memory import (
    InMemoryFiles,
    MemoryCommandError,
    MemoryCorruptError,
    MemoryExistsError,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryPermissionError,
    StoreConflictError,
    StoreFiles,
)
from agentkit_tools.stores import FileStore, InMemoryStore, PostgresStore, RedisStore, StorePort

from memory_fixtures import (
    NO_POSTGRES,
    NO_REDIS,
    PG_TABLE,
    POSTGRES_DSN,
    REDIS_URL,
    SERVER_KINDS,
    STORE_KINDS,
    CountingStore,
    GatedStore,
    _proc_store,
    LosingStore,
    lines_file,
    open_store,
    unique_namespace,
)

F = "/memories/notes.md"


@pytest.fixture(params=STORE_KINDS)
def kind(request):
    return request.param


@pytest.fixture
async def store(kind, tmp_path):
    async with open_store(kind, tmp_path) as s:
        yield s


def doc(files: dict) -> str:
    return json.dumps(
        {"format": "agentkit-memory-tree", "version": 1, "root": "/memories", "files": dict(sorted(files.items()))},
        separators=(",", ":"),
        ensure_ascii=False,
    )


# ------------------------------------------------------------------ the StorePort itself


async def test_store_port_get_set_delete_cas(store):
    assert isinstance(store, StorePort)
    k = unique_namespace()
    assert await store.get(k) is None
    # expected None: only if absent.
    assert await store.compare_and_set(k, None, "v1") is True
    assert await store.compare_and_set(k, None, "v2") is False
    assert await store.get(k) == "v1"
    # A stale expected value loses and changes nothing.
    assert await store.compare_and_set(k, "stale", "v3") is False
    assert await store.get(k) == "v1"
    assert await store.compare_and_set(k, "v1", "v2 é ✓") is True
    assert await store.get(k) == "v2 é ✓"
    await store.set(k, "")
    assert await store.get(k) == ""
    assert await store.compare_and_set(k, None, "x") is False  # "" is present, not absent
    assert await store.compare_and_set(k, "", "after-empty") is True
    await store.delete(k)
    assert await store.get(k) is None
    await store.delete(k)  # deleting an absent key is fine
    assert await store.compare_and_set(k, "after-empty", "x") is False
    assert await store.get(k) is None


async def test_store_port_large_and_unicode_values(store):
    k = unique_namespace()
    big = "ü" * 300_000 + "\n" + "🙂" * 1000
    await store.set(k, big)
    assert await store.get(k) == big
    assert await store.compare_and_set(k, big, big + "!") is True
    assert await store.get(k) == big + "!"
    await store.delete(k)


async def test_store_port_takes_any_json_value_compared_by_canonical_json(store):
    k = unique_namespace()
    doc = {"b": [1, 2.5, None, True], "a": {"z": "é", "y": {}}}
    await store.set(k, doc)
    got = await store.get(k)
    assert got == doc
    got["b"].append("mutated")  # a value read is a copy: the store does not change
    assert await store.get(k) == doc
    # Same items in another order: the same value.
    assert await store.compare_and_set(k, {"a": {"y": {}, "z": "é"}, "b": [1, 2.5, None, True]}, [1, "two"]) is True
    assert await store.get(k) == [1, "two"]
    assert await store.compare_and_set(k, [1, "two", 3], 0) is False
    assert await store.compare_and_set(k, [1, "two"], 1) is True
    # 1.0 and True are other JSON values than 1.
    assert await store.compare_and_set(k, 1.0, "x") is False
    assert await store.compare_and_set(k, True, "x") is False
    assert await store.get(k) == 1 and type(await store.get(k)) is int
    for value in (0.5, False, "", -7, 2**70):
        await store.set(k, value)
        assert await store.get(k) == value and type(await store.get(k)) is type(value)
    # null stored counts as absent for compare_and_set(expected=None).
    await store.set(k, None)
    assert await store.get(k) is None
    assert await store.compare_and_set(k, None, "after-null") is True
    assert await store.get(k) == "after-null"
    await store.delete(k)


async def test_store_port_refuses_values_that_are_not_json(store):
    k = unique_namespace()
    with pytest.raises(TypeError, match="store values must be JSON values"):
        await store.set(k, b"bytes")
    with pytest.raises(TypeError, match="store values must be JSON values"):
        await store.compare_and_set(k, None, {1, 2})
    with pytest.raises(ValueError, match="NaN and infinity have no JSON form"):
        await store.set(k, float("nan"))
    with pytest.raises(ValueError, match="store keys must be non-empty strings, got ''"):
        await store.get("")
    assert await store.get(k) is None


async def test_concurrent_cas_on_one_key_exactly_one_wins(store):
    k = unique_namespace()
    await store.set(k, "v0")
    results = await asyncio.gather(*(store.compare_and_set(k, "v0", f"w{i}") for i in range(10)))
    assert sorted(results) == [False] * 9 + [True]
    assert await store.get(k) == f"w{results.index(True)}"
    await store.delete(k)


def test_file_store_names_are_safe_and_writes_atomic(tmp_path):
    fs = FileStore(str(tmp_path / "d"))
    assert fs.directory == tmp_path / "d"
    assert fs.path_for("memory:user-1") == tmp_path / "d" / "k-memory%3Auser-1"
    assert fs.path_for("../../etc/passwd") == tmp_path / "d" / "k-..%2F..%2Fetc%2Fpasswd"
    long = fs.path_for("x" * 500)
    assert long.parent == tmp_path / "d" and long.name.startswith("h-") and len(long.name) == 66

    async def go():
        await fs.set("../../etc/passwd", "no escape")
        assert await fs.compare_and_set("a", None, "1")
        assert await fs.compare_and_set("a", "1", "2")

    asyncio.run(go())
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [".lock", "k-..%2F..%2Fetc%2Fpasswd", "k-a"]
    assert (tmp_path / "d" / "k-a").read_text() == '"2"'  # the canonical JSON of the value
    # Durable: a new FileStore on the same directory sees the data.
    assert asyncio.run(FileStore(tmp_path / "d").get("a")) == "2"


# ------------------------------------------------------------------ StoreFiles: every command


async def test_every_command_with_exact_results(store):
    files = StoreFiles(store, namespace=unique_namespace())
    assert files.root == "/memories"
    assert await files.view("/memories") == ""
    assert await files.create(F, "alpha\nbeta\n") == f"File created successfully at {F} (11 bytes)."
    assert await files.create("/memories/d/x.md", "x") == "File created successfully at /memories/d/x.md (1 bytes)."
    assert await files.view("/memories") == "/memories/d/x.md\n/memories/notes.md"
    assert await files.view(F) == "alpha\nbeta\n"
    assert await files.view(F, [2, 2]) == "beta"
    assert await files.str_replace(F, "beta", "gamma") == f"The file {F} has been edited."
    assert await files.insert(F, 0, "top") == f"Text inserted after line 0 of {F}."
    assert await files.view(F) == "top\nalpha\ngamma\n"
    assert await files.create(F, "new\n", overwrite=True) == f"File {F} overwritten (4 bytes)."
    assert await files.rename(F, "/memories/d/moved.md") == f"Renamed {F} to /memories/d/moved.md."
    assert await files.rename("/memories/d", "/memories/e") == "Renamed directory /memories/d to /memories/e (2 file(s))."
    assert await files.files() == {"/memories/e/moved.md": "new\n", "/memories/e/x.md": "x"}
    assert await files.delete("/memories/e/x.md") == "Deleted file /memories/e/x.md."
    assert await files.delete("/memories/e") == "Deleted directory /memories/e (1 file(s))."
    assert await files.files() == {}
    # The document is the canonical JSON tree.
    assert await store.get(files.key) == doc({})
    assert files.key == f"memory:{files.namespace}"


async def test_every_error_changes_nothing(store):
    files = StoreFiles(store, namespace=unique_namespace())
    await files.create(F, "a\nb\na\n")
    await files.create("/memories/other.md", "o")
    before = await store.get(files.key)
    cases = [
        (files.view("/etc/passwd"), MemoryPermissionError, "permission_denied"),
        (files.create("../escape", "x"), MemoryPermissionError, "permission_denied"),
        (files.create("a\\b", "x"), MemoryPermissionError, "permission_denied"),
        (files.create("a\x00b", "x"), MemoryPermissionError, "permission_denied"),
        (files.delete("/memories"), MemoryPermissionError, "permission_denied"),
        (files.view("/memories/missing"), MemoryNotFoundError, "not_found"),
        (files.delete("/memories/missing"), MemoryNotFoundError, "not_found"),
        (files.create(F, "clobber"), MemoryExistsError, "already_exists"),
        (files.rename(F, "/memories/other.md"), MemoryExistsError, "already_exists"),
        (files.str_replace(F, "a", "z"), MemoryCommandError, "ambiguous_match"),
        (files.str_replace(F, "zzz", "z"), MemoryCommandError, "no_match"),
        (files.insert(F, 5, "x"), MemoryCommandError, "out_of_range"),
        (files.create("/memories/a\nb", "x"), MemoryPermissionError, "permission_denied"),
        (files.create("/memories/" + "x" * 1100, "x"), MemoryCommandError, "path_too_long"),
        (files.view(F, [0, 1]), MemoryCommandError, "out_of_range"),
    ]
    for coro, cls, code in cases:
        with pytest.raises(cls) as info:
            await coro
        assert info.value.code == code
        assert await store.get(files.key) == before
    with pytest.raises(MemoryCommandError) as info:
        await files.str_replace(F, "a", "z")
    assert str(info.value) == (
        f"old_str occurs 2 times in {F} (at lines 1, 3); it must occur exactly once: add surrounding "
        "context to old_str so it matches only the place you mean"
    )
    with pytest.raises(ValueError, match=r"already exists; delete it first"):
        await files.rename(F, "/memories/other.md")
    # No command ever issued a write for a failure: still the same document.
    assert await store.get(files.key) == before


async def test_limits_refuse_and_change_nothing(store):
    # "/memories/a" and "/memories/b" are 11 bytes each: paths count as well as texts.
    files = StoreFiles(store, namespace=unique_namespace(), max_bytes=32, max_files=2)
    await files.create("/memories/a", "12345678")
    before = await store.get(files.key)
    with pytest.raises(MemoryLimitError) as info:
        await files.create("/memories/b", "xyz")
    e = info.value
    assert (e.limit, e.maximum, e.used, e.requested, e.code) == ("max_bytes", 32, 19, 33, "memory_limit")
    assert isinstance(e, ValueError)
    assert str(e) == (
        "memory limit max_bytes=32 exceeded: the tree holds 19 bytes (file texts and paths) and this create "
        "on /memories/b would make it 33 bytes (+14); nothing was changed. Shorten or delete files under "
        "/memories, then try again"
    )
    assert e.details == {"limit": "max_bytes", "maximum": 32, "used": 19, "requested": 33}
    assert await store.get(files.key) == before
    await files.create("/memories/b", "")
    with pytest.raises(MemoryLimitError) as info:
        await StoreFiles(store, namespace=files.namespace, max_files=2).create("/memories/c", "")
    assert (info.value.limit, info.value.maximum, info.value.used, info.value.requested) == ("max_files", 2, 2, 3)
    # max_bytes counts UTF-8 bytes: "é" is 2 bytes, so 30 + 2 = 32 fits but 30 + 3 does not.
    await files.create("/memories/b", "é", overwrite=True)
    with pytest.raises(MemoryLimitError):
        await files.str_replace("/memories/b", "é", "é!")
    assert await files.files() == {"/memories/a": "12345678", "/memories/b": "é"}


async def test_two_namespaces_on_one_store_never_see_each_other(store):
    a = StoreFiles(store, namespace=unique_namespace())
    b = StoreFiles(store, namespace=unique_namespace())
    await a.create(F, "from a")
    await b.create(F, "from b")
    assert await a.view(F) == "from a"
    assert await b.view(F) == "from b"
    await b.delete(F)
    assert await a.view("/memories") == F
    assert await b.view("/memories") == ""
    # No path trick reaches the other namespace.
    for escape in ["../" + b.namespace, "/memories/../" + b.key, "/" + b.key]:
        with pytest.raises(MemoryPermissionError):
            await a.view(escape)


# ------------------------------------------------------------------ contention


async def test_twenty_tasks_edit_distinct_lines_all_land(store):
    files = StoreFiles(store, namespace=unique_namespace())
    await files.create(F, lines_file(20))
    results = await asyncio.gather(
        *(files.str_replace(F, f"line {i:02d}: todo", f"line {i:02d}: done by task {i}") for i in range(20))
    )
    assert results == [f"The file {F} has been edited."] * 20
    lines = (await files.view(F)).splitlines()
    assert lines == [f"line {i:02d}: done by task {i}" for i in range(20)]
    assert files.stats.commands == 22  # create + 20 edits + view
    assert files.stats.attempts >= 22


async def test_two_racing_str_replace_exactly_one_wins(store):
    ns = unique_namespace()
    setup = StoreFiles(store, namespace=ns)
    await setup.create(F, "status: open\n")
    gated = GatedStore(store, n=2)  # both commands read the same document before either writes
    files = StoreFiles(gated, namespace=ns)
    rival = StoreFiles(gated.twin(), namespace=ns)
    results = await asyncio.gather(
        files.str_replace(F, "status: open", "status: closed by A"),
        rival.str_replace(F, "status: open", "status: closed by B"),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, str)]
    errors = [r for r in results if isinstance(r, BaseException)]
    assert wins == [f"The file {F} has been edited."]
    assert len(errors) == 1 and isinstance(errors[0], MemoryCommandError)
    assert errors[0].code == "no_match"
    assert str(errors[0]) == (
        f"old_str was not found in {F}; view the file and copy the exact text, including whitespace and line breaks"
    )
    text = await setup.view(F)
    winner = "A" if isinstance(results[0], str) else "B"
    assert text == f"status: closed by {winner}\n"
    # The loser read, lost the compare-and-set, re-read and failed: 3 reads in all; only the
    # winner's command counts in the stats.
    assert gated.gets == 3
    won = files if winner == "A" else rival
    lost = rival if winner == "A" else files
    assert (won.stats.commands, won.stats.attempts, lost.stats.commands) == (1, 1, 0)


async def test_concurrent_commands_in_one_process_share_writes(store):
    """Commands on one document from one process never race each other: while a write is in
    flight the others queue, and the next write carries all of them, each with its own answer
    (in order, as if they had run one after another)."""
    ns = unique_namespace()
    await StoreFiles(store, namespace=ns).create(F, lines_file(40))
    counting = CountingStore(store, delay=0.01)  # each write stays in flight a while
    writers = [StoreFiles(counting, namespace=ns) for _ in range(4)]
    results = await asyncio.gather(
        *(writers[i % 4].str_replace(F, f"line {i:02d}: todo", f"line {i:02d}: done") for i in range(40)),
        writers[0].str_replace(F, "line 00: todo", "twice"),  # queued after the first: no longer there
        writers[1].insert(F, 0, "top"),
        return_exceptions=True,
    )
    assert results[:40] == [f"The file {F} has been edited."] * 40
    assert results[41] == f"Text inserted after line 0 of {F}."
    assert (await writers[2].view(F)).split("\n") == ["top"] + [f"line {i:02d}: done" for i in range(40)] + [""]
    assert sum(w.stats.retries for w in writers) == 0
    assert sum(w.stats.commands for w in writers) == 42  # 40 edits, the insert, the view
    # The first command writes alone; everything queued meanwhile goes in one more write.
    assert counting.cas_calls == 2
    # The rejected command is the one queued behind the edit of its line.
    assert isinstance(results[40], MemoryCommandError) and results[40].code == "no_match"


async def test_cancelling_the_caller_that_carries_a_write_never_loses_the_others(store):
    ns = unique_namespace()
    await StoreFiles(store, namespace=ns).create(F, lines_file(6))
    # Each write stays in flight until the test lets it through: the steps are ordered by
    # events, never by time (a stall of the machine cannot split the batch).
    slow = CountingStore(store, held=True)
    files = StoreFiles(slow, namespace=ns)
    first = asyncio.ensure_future(files.str_replace(F, "line 00: todo", "line 00: done"))
    await slow.entered(1)  # the first write is in flight
    queued = [asyncio.ensure_future(files.str_replace(F, f"line {i:02d}: todo", f"line {i:02d}: done")) for i in range(1, 6)]
    await asyncio.sleep(0)  # each queued caller takes its first step: it joins the next write
    queued[0].cancel()  # a queued caller gives up before its turn: its edit never runs
    slow.release(1)
    await first
    await slow.entered(2)  # the batch of lines 2..5 is in flight, carried by line 2's caller
    queued[1].cancel()
    await asyncio.sleep(0)  # the carrier sees its cancellation while its batch is in flight
    assert queued[1].cancelled()
    slow.release(2)
    assert await asyncio.gather(*queued[2:]) == [f"The file {F} has been edited."] * 3
    with pytest.raises(asyncio.CancelledError):
        await queued[1]
    # The cancelled carrier's edit went with the batch (a write in flight is never abandoned);
    # the caller cancelled while queued changed nothing.
    text = await StoreFiles(store, namespace=ns).view(F)
    assert text == "line 00: done\nline 01: todo\n" + "".join(f"line {i:02d}: done\n" for i in range(2, 6))
    assert slow.cas_calls == 2


async def test_a_store_failure_reaches_every_caller_of_the_write(store):
    ns = unique_namespace()
    await StoreFiles(store, namespace=ns).create(F, lines_file(3))
    failing = CountingStore(store, delay=0.02, fail_on=(2,))
    files = StoreFiles(failing, namespace=ns)
    results = await asyncio.gather(
        *(files.str_replace(F, f"line {i:02d}: todo", f"line {i:02d}: done") for i in range(3)),
        return_exceptions=True,
    )
    assert results[0] == f"The file {F} has been edited."
    assert [type(r) for r in results[1:]] == [ConnectionError, ConnectionError]
    assert await StoreFiles(store, namespace=ns).view(F) == "line 00: done\nline 01: todo\nline 02: todo\n"
    # The next command is not stuck behind the failed write.
    assert await files.str_replace(F, "line 01: todo", "line 01: done") == f"The file {F} has been edited."


async def test_losing_the_first_cas_on_purpose_still_ends_correct(store):
    ns = unique_namespace()
    setup = StoreFiles(store, namespace=ns)
    await setup.create(F, lines_file(2))

    async def rival(inner, key):
        await StoreFiles(inner, namespace=ns).str_replace(F, "line 01: todo", "line 01: rival")

    losing = LosingStore(store, lose=1, rival=rival)
    files = StoreFiles(losing, namespace=ns)
    assert await files.str_replace(F, "line 00: todo", "line 00: mine") == f"The file {F} has been edited."
    assert await setup.view(F) == "line 00: mine\nline 01: rival\n"
    assert (losing.get_calls, losing.cas_calls) == (2, 2)
    assert (files.stats.commands, files.stats.attempts, files.stats.retries) == (1, 2, 1)


async def test_cas_exhausted_raises_conflict_and_writes_nothing(store):
    ns = unique_namespace()
    await StoreFiles(store, namespace=ns).create(F, "x\n")
    before = await store.get(f"memory:{ns}")
    losing = LosingStore(store, lose=10**6)
    files = StoreFiles(losing, namespace=ns, max_attempts=3)
    with pytest.raises(StoreConflictError) as info:
        await files.insert(F, 1, "y")
    assert isinstance(info.value, RuntimeError)
    assert (info.value.code, info.value.retriable) == ("store_conflict", True)
    assert str(info.value) == (
        "insert gave up after 3 compare-and-set attempts: other writers changed the memory tree every time; "
        "nothing was written. Call the command again (view the file first if it depends on the current text)"
    )
    assert losing.cas_calls == 3
    assert await store.get(f"memory:{ns}") == before


# ------------------------------------------------------------------ odd stores and documents


async def test_corrupt_document_is_reported_not_overwritten():
    store = InMemoryStore()
    files = StoreFiles(store, namespace="n")
    await store.set(files.key, '{"format": "something else"}')
    with pytest.raises(MemoryCorruptError) as info:
        await files.create(F, "x")
    assert info.value.code == "corrupt_tree"
    assert "delete it to start an empty memory" in str(info.value)
    assert await store.get(files.key) == '{"format": "something else"}'
    other_root = StoreFiles(store, namespace="r", root="/notes")
    await other_root.create("/notes/a", "x")
    with pytest.raises(MemoryCorruptError, match=r"written with root \"/notes\", not \"/memories\""):
        await StoreFiles(store, namespace="r").view("/memories")


async def test_store_returning_wrong_types_is_a_clear_type_error():
    class BadGet(InMemoryStore):
        async def get(self, key):
            return 42

    class BadCas(InMemoryStore):
        async def compare_and_set(self, key, expected, value):
            return "yes"

    with pytest.raises(TypeError, match=r"store.get returned int, expected the tree document \(str or dict\) or None"):
        await StoreFiles(BadGet(), namespace="n").view("/memories")
    with pytest.raises(TypeError, match=r"returned str, expected bool"):
        await StoreFiles(BadCas(), namespace="n").create(F, "x")


async def test_store_errors_propagate_and_nothing_is_written():
    class Down(InMemoryStore):
        async def compare_and_set(self, key, expected, value):
            raise ConnectionError("store unreachable")

    store = Down()
    with pytest.raises(ConnectionError, match="store unreachable"):
        await StoreFiles(store, namespace="n").create(F, "x")
    assert await store.get("memory:n") is None


def test_store_files_validates_its_arguments():
    with pytest.raises(ValueError, match="non-empty namespace"):
        StoreFiles(InMemoryStore(), namespace="")
    with pytest.raises(ValueError, match="max_attempts must be between 1 and 100000, got 0"):
        StoreFiles(InMemoryStore(), namespace="n", max_attempts=0)
    with pytest.raises(ValueError, match="max_attempts must be between 1 and 100000, got 100001"):
        StoreFiles(InMemoryStore(), namespace="n", max_attempts=100_001)
    with pytest.raises(ValueError, match="max_bytes and max_files must be >= 0, got max_bytes=-1, max_files=4096"):
        StoreFiles(InMemoryStore(), namespace="n", max_bytes=-1)
    with pytest.raises(ValueError, match="max_bytes and max_files must be >= 0, got max_bytes=8388608, max_files=-2"):
        InMemoryFiles(max_files=-2)
    with pytest.raises(ValueError, match="memory root \"rel\" is not usable"):
        StoreFiles(InMemoryStore(), namespace="n", root="rel")


# ------------------------------------------------------------------ clients and pools of the user


@pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS)
async def test_redis_store_accepts_a_client_and_prefixes_keys():
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    ns = unique_namespace()
    store = RedisStore(client=client, namespace=ns)
    try:
        assert await store.compare_and_set("k", None, "v") is True
        assert await client.get(f"{ns}:k") == '"v"'  # the canonical JSON of the value
        assert await store.get("k") == "v"
        assert await store.compare_and_set("k", "v", {"b": 1, "a": [2]}) is True
        assert await client.get(f"{ns}:k") == '{"a":[2],"b":1}'
        await store.aclose()  # does not close a client it does not own
        assert await client.get(f"{ns}:k") == '{"a":[2],"b":1}'
    finally:
        await client.delete(f"{ns}:k")
        await client.aclose()


@pytest.mark.skipif(not POSTGRES_DSN, reason=NO_POSTGRES)
async def test_postgres_store_accepts_a_pool_and_creates_its_table():
    from psycopg_pool import AsyncConnectionPool

    table = f"t_{unique_namespace().replace('-', '_')}"
    async with AsyncConnectionPool(POSTGRES_DSN, open=False) as pool:
        store = PostgresStore(pool=pool, table=table)
        try:
            assert await store.compare_and_set("k", None, "v") is True
            assert await store.compare_and_set("k", None, "v2") is False
            assert await store.compare_and_set("k", "v", {"b": 1, "a": "w"}) is True
            async with pool.connection() as conn:
                rows = await (await conn.execute(f"SELECT key, value FROM {table}")).fetchall()
            assert rows == [("k", '{"a":"w","b":1}')]
        finally:
            async with pool.connection() as conn:
                await conn.execute(f"DROP TABLE IF EXISTS {table}")
    with pytest.raises(ValueError, match="table must be a plain SQL identifier"):
        PostgresStore(POSTGRES_DSN, table="x; DROP TABLE y")


# ------------------------------------------------------------------ many processes


@pytest.mark.parametrize("server", ["file", *SERVER_KINDS])
async def test_four_processes_fifty_edits_each_lose_nothing(server, tmp_path):
    procs, edits = 4, 50
    url = {"file": str(tmp_path / "shared"), "redis": REDIS_URL, "postgres": POSTGRES_DSN}[server]
    store = _proc_store(server, url)
    ns = unique_namespace()
    files = StoreFiles(store, namespace=ns)
    text = "".join(f"p{p}-{j:03d}: todo\n" for p in range(procs) for j in range(edits))
    await files.create("/memories/shared.md", text)
    worker = Path(__file__).with_name("memory_fixtures.py")
    env = dict(os.environ)
    children = [
        subprocess.Popen(
            [sys.executable, str(worker), server, url, ns, str(p), str(edits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(procs)
    ]
    try:
        loop = asyncio.get_running_loop()
        for c in children:  # every worker is connected before any starts editing
            line = await loop.run_in_executor(None, c.stdout.readline)
            assert line.strip() == "ready", c.stderr.read()
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        outs = []
        for c in children:
            out, err = await loop.run_in_executor(None, lambda c=c: c.communicate(timeout=120))
            assert c.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
        assert [o["commands"] for o in outs] == [edits] * procs
        final = (await files.view("/memories/shared.md")).splitlines()
        assert final == [f"p{p}-{j:03d}: done by {p}" for p in range(procs) for j in range(edits)]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
        await store.delete(files.key)
        close = getattr(store, "aclose", None)
        if close is not None:
            await close()


def test_file_store_removes_orphans_of_a_writer_killed_mid_write(tmp_path):
    """A real SIGKILL while big values are being written: the next FileStore opened on the
    directory removes the temporary files the dead writer left, and every key still holds a
    complete value."""
    directory = tmp_path / "killed"
    worker = Path(__file__).with_name("memory_fixtures.py")
    orphans_seen = 0
    for round_ in range(6):
        child = subprocess.Popen(
            [sys.executable, str(worker), "kill-writer", str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            deadline = time.monotonic() + 20
            # Kill it while a temporary file exists: mid-write.
            while not any(n.startswith(".tmp-") for n in os.listdir(directory)):
                assert time.monotonic() < deadline, "the writer never started a write"
                time.sleep(0.001)
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
        assert child.returncode == -signal.SIGKILL
        left = sorted(n for n in os.listdir(directory) if n.startswith(".tmp-"))
        orphans_seen += len(left)
        store = FileStore(directory)
        assert store.orphans_removed == len(left)
        assert sorted(n for n in os.listdir(directory) if n.startswith(".tmp-")) == []
        for k in range(4):
            value = asyncio.run(store.get(f"k{k}"))
            assert value in (None, "x" * 4_000_000), (round_, k, None if value is None else len(value))
    assert orphans_seen >= 1


async def test_memory_sequence_through_the_default_invoker_reads_fresh_text(store):
    """A view is a read-only call: the default Invoker never answers it from the idempotency
    cache nor counts it as a repeat, so every view shows the store's current text."""
    from agentkit_tools import Invoker, ToolRegistry
    from agentkit_tools.memory import FileTool

    inv = Invoker(ToolRegistry([FileTool(StoreFiles(store, namespace=unique_namespace()))]))
    view = {"command": "view", "path": F}
    steps = [
        {"command": "create", "path": F, "file_text": "a\nb\n"},
        view,
        {"command": "str_replace", "path": F, "old_str": "b", "new_str": "B"},
        view,
        {"command": "insert", "path": F, "insert_line": 2, "insert_text": "c"},
        view,
        view,
    ]
    out = []
    for i, args in enumerate(steps):
        env = await inv.invoke({"id": f"c{i}", "name": "memory", "input": args})
        out.append((env["ok"], env.get("value"), env.get("deduplicated", False)))
    fresh = "     1\ta\n     2\tB\n     3\tc"
    assert out == [
        (True, f"File created successfully at {F} (4 bytes).", False),
        (True, "     1\ta\n     2\tb", False),
        (True, f"The file {F} has been edited.", False),
        (True, "     1\ta\n     2\tB", False),
        (True, f"Text inserted after line 2 of {F}.", False),
        (True, fresh, False),
        (True, fresh, False),
    ]


async def test_a_store_raising_cancelled_error_in_a_shared_write_cancels_its_callers_not_hangs(store):
    ns = unique_namespace()
    await StoreFiles(store, namespace=ns).create(F, lines_file(3))

    class Cancelling(CountingStore):
        async def compare_and_set(self, key, expected, value):
            if self.cas_calls == 1:  # the second write: the batch of lines 1 and 2
                self.cas_calls += 1
                await asyncio.sleep(0.01)
                raise asyncio.CancelledError()
            return await super().compare_and_set(key, expected, value)

    files = StoreFiles(Cancelling(store, delay=0.01), namespace=ns)
    tasks = [asyncio.ensure_future(files.str_replace(F, f"line {i:02d}: todo", f"line {i:02d}: done")) for i in range(3)]
    done, pending = await asyncio.wait(tasks, timeout=5)
    assert pending == set()
    assert tasks[0].result() == f"The file {F} has been edited."
    assert all(t.cancelled() for t in tasks[1:])
    assert await files.str_replace(F, "line 01: todo", "line 01: done") == f"The file {F} has been edited."


async def test_views_follow_every_change_of_the_document(store):
    """A view of an unchanged document reuses its parse; any change, by this object, another
    one or behind the store's back, is seen at once."""
    ns = unique_namespace()
    files = StoreFiles(store, namespace=ns)
    await files.create(F, "one\n")
    assert [await files.view(F) for _ in range(3)] == ["one\n"] * 3
    await StoreFiles(store, namespace=ns).str_replace(F, "one", "two")
    assert await files.view(F) == "two\n"
    await store.set(files.key, doc({F: "three\n"}))
    assert await files.view(F) == "three\n"
    assert await files.view("/memories") == F
    await store.set(files.key, '{"format": "something else"}')
    with pytest.raises(MemoryCorruptError):
        await files.view(F)
    await store.delete(files.key)
    assert await files.view("/memories") == ""
