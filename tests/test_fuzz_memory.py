"""Random memory command sequences on every backend, checked against a plain model.

The model is a dict ``path -> text`` with the memory tool's rules written out in Python (path
resolution, implicit directories, the order of the checks, the limits on files and on the bytes
of paths and texts). Each generated sequence runs on a fresh backend; after every command the
backend's answer must be the model's (the same text, or the same error class) and its files must
equal the model's, so a failed command provably changed nothing.

Backends: ``InMemoryFiles`` and ``StoreFiles`` on ``InMemoryStore``, ``FileStore``, Redis and
PostgreSQL (the last two when ``AGENTKIT_TEST_REDIS_URL`` / ``AGENTKIT_TEST_POSTGRES_DSN`` are
set). ``AGENTKIT_FUZZ_EXAMPLES`` sets the number of sequences per backend (default: 200 for the
in-process backends, 30-40 for the others; try 2000 locally) and makes the run random instead of
the fixed derandomized one.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import unicodedata
import uuid
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit_tools.memory import (
    InMemoryFiles,
    MemoryCommandError,
    MemoryExistsError,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryPermissionError,
    StoreFiles,
)
from agentkit_tools.stores import FileStore, InMemoryStore

from memory_fixtures import NO_POSTGRES, NO_REDIS, PG_TABLE, POSTGRES_DSN, REDIS_URL

ROOT = "/memories"
MAX_BYTES = 150
MAX_FILES = 4
MAX_PATH = 1024
_EXAMPLES = os.environ.get("AGENTKIT_FUZZ_EXAMPLES")


class Refused(Exception):
    def __init__(self, cls: type) -> None:
        self.cls = cls


def _resolve(p: str) -> str:
    if p == "":
        raise Refused(MemoryCommandError)
    if len(p.encode()) > MAX_PATH:
        raise Refused(MemoryCommandError)
    if "\\" in p or any(unicodedata.category(c) == "Cc" for c in p):
        raise Refused(MemoryPermissionError)
    full = p if p.startswith("/") else f"{ROOT}/{p}"
    parts: list[str] = []
    for seg in full.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not parts:
                raise Refused(MemoryPermissionError)
            parts.pop()
        else:
            parts.append(seg)
    if parts[:1] != [ROOT[1:]]:
        raise Refused(MemoryPermissionError)
    out = "/" + "/".join(parts)
    if len(out.encode()) > MAX_PATH:
        raise Refused(MemoryCommandError)
    return out


class Model:
    """The memory tree as a dict, with the documented rules."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def size(self, files: Optional[dict[str, str]] = None) -> int:
        return sum(len(p.encode()) + len(t.encode()) for p, t in (files if files is not None else self.files).items())

    def below(self, d: str) -> list[str]:
        return sorted(p for p in self.files if p.startswith(d + "/"))

    def is_dir(self, p: str) -> bool:
        return p == ROOT or bool(self.below(p))

    def _commit(self, new: dict[str, str]) -> None:
        if len(new) > MAX_FILES and len(new) > len(self.files):
            raise Refused(MemoryLimitError)
        if self.size(new) > MAX_BYTES and self.size(new) > self.size():
            raise Refused(MemoryLimitError)
        self.files = new

    def _file(self, p: str) -> str:
        if p in self.files:
            return self.files[p]
        raise Refused(MemoryCommandError if self.is_dir(p) else MemoryNotFoundError)

    def _parents_are_dirs(self, p: str) -> None:
        d = p.rsplit("/", 1)[0]
        while d != ROOT and d.startswith(ROOT + "/"):
            if d in self.files:
                raise Refused(MemoryCommandError)
            d = d.rsplit("/", 1)[0]

    def view(self, path: str, view_range: Optional[list[int]] = None) -> str:
        p = _resolve(path)
        if p in self.files:
            text = self.files[p]
            if view_range is None:
                return text
            lines = text.splitlines(keepends=True)
            start, end = view_range
            n = len(lines)
            end = n if end == -1 else end
            if n == 0 or start < 1 or start > n or end < start or end > n:
                raise Refused(MemoryCommandError)
            out = "".join(lines[start - 1 : end])
            return out[:-1] if out.endswith("\n") else out
        if self.is_dir(p):
            if view_range is not None:
                raise Refused(MemoryCommandError)
            return "\n".join(self.below(p))
        raise Refused(MemoryNotFoundError)

    def create(self, path: str, file_text: str, overwrite: bool = False) -> None:
        p = _resolve(path)
        if p == ROOT or self.below(p):
            raise Refused(MemoryCommandError)
        self._parents_are_dirs(p)
        if p in self.files and not overwrite:
            raise Refused(MemoryExistsError)
        self._commit({**self.files, p: file_text})

    def str_replace(self, path: str, old_str: str, new_str: str) -> None:
        p = _resolve(path)
        text = self._file(p)
        if old_str == "":
            raise Refused(MemoryCommandError)
        hits = [i for i in range(len(text)) if text.startswith(old_str, i)]
        if len(hits) != 1:
            raise Refused(MemoryCommandError)
        at = hits[0]
        self._commit({**self.files, p: text[:at] + new_str + text[at + len(old_str) :]})

    def insert(self, path: str, insert_line: int, insert_text: str) -> None:
        p = _resolve(path)
        lines = self._file(p).split("\n")
        if not 0 <= insert_line <= len(lines):
            raise Refused(MemoryCommandError)
        lines.insert(insert_line, insert_text.rstrip("\n"))
        self._commit({**self.files, p: "\n".join(lines)})

    def delete(self, path: str) -> None:
        p = _resolve(path)
        if p == ROOT:
            raise Refused(MemoryPermissionError)
        if p in self.files:
            doomed = [p]
        else:
            doomed = self.below(p)
            if not doomed:
                raise Refused(MemoryNotFoundError)
        self.files = {k: v for k, v in self.files.items() if k not in doomed}

    def rename(self, path: str, new_path: str) -> None:
        old, new = _resolve(path), _resolve(new_path)
        if ROOT in (old, new):
            raise Refused(MemoryPermissionError)
        is_file = old in self.files
        if not is_file and not self.is_dir(old):
            raise Refused(MemoryNotFoundError)
        if new in self.files or self.is_dir(new):
            raise Refused(MemoryExistsError)
        if not is_file and new.startswith(old + "/"):
            raise Refused(MemoryCommandError)
        self._parents_are_dirs(new)
        moved = [old] if is_file else self.below(old)
        nxt = {k: v for k, v in self.files.items() if k not in moved}
        for k in moved:
            nxt[new + k[len(old) :]] = self.files[k]
        self._commit(nxt)


# ------------------------------------------------------------------ the generated commands

_good_paths = st.sampled_from(["a", "b", "d/a", "d/b", "d/e/f", "/memories/a", "d", "./d/../b", "e", "/memories/d/"])
_bad_paths = st.sampled_from(
    ["/memories", "../x", "/etc/passwd", "a\nb", "a\tb", "/memories/a\\b", "", "/memories/" + "n" * 1020]
)
_paths = st.one_of(_good_paths, _good_paths, _good_paths, _bad_paths)  # mostly paths that work
_texts = st.text(alphabet="ab \né", max_size=12)
_olds = st.sampled_from(["a", "b", "\n", "ab", "a\nb", " ", "é", ""])
_create = st.tuples(st.just("create"), _good_paths, _texts, st.booleans())
_commands = st.one_of(
    _create,
    _create,
    st.tuples(st.just("view"), _paths, st.one_of(st.none(), st.tuples(st.integers(-1, 4), st.integers(-1, 4)).map(list))),
    st.tuples(st.just("create"), _paths, _texts, st.booleans()),
    st.tuples(st.just("str_replace"), _paths, _olds, _texts),
    st.tuples(st.just("insert"), _paths, st.integers(-1, 5), _texts),
    st.tuples(st.just("delete"), _paths),
    st.tuples(st.just("rename"), _paths, _paths),
)
_sequences = st.lists(_commands, min_size=3, max_size=40)


async def _run(backend: Any, model: Model, ops: list[tuple]) -> int:
    """Runs the sequence on both; returns the number of commands the backend refused."""
    refused = 0
    for op in ops:
        name, args = op[0], op[1:]
        if name == "create":
            args = (args[0], args[1], args[2])
        expected: Any
        try:
            expected = getattr(model, name)(*args)
            expected_cls = None
        except Refused as r:
            expected, expected_cls = None, r.cls
        try:
            got = await getattr(backend, name)(*args)
            got_cls = None
        except (MemoryCommandError, MemoryExistsError, MemoryLimitError, MemoryNotFoundError, MemoryPermissionError) as e:
            got, got_cls = str(e), type(e)
        assert got_cls is expected_cls, (op, got, expected_cls)
        if got_cls is None and name == "view":
            assert got == expected, op
        if got_cls is not None:
            refused += 1
        files = backend.files()
        if asyncio.iscoroutine(files):
            files = await files
        assert files == model.files, op
    return refused


def _settings(default: int):
    n = int(_EXAMPLES) if _EXAMPLES else default
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=not _EXAMPLES)


async def _open(kind: str, tmp: str) -> tuple[Any, Any]:
    ns = f"fuzz-{uuid.uuid4().hex}"
    if kind == "InMemoryFiles":
        return InMemoryFiles(max_bytes=MAX_BYTES, max_files=MAX_FILES), None
    if kind == "InMemoryStore":
        store: Any = InMemoryStore()
    elif kind == "FileStore":
        store = FileStore(os.path.join(tmp, ns))
    elif kind == "RedisStore":
        from agentkit_tools.stores import RedisStore

        store = RedisStore(REDIS_URL, namespace="fuzz")
    else:
        from agentkit_tools.stores import PostgresStore

        store = PostgresStore(POSTGRES_DSN, table=PG_TABLE)
    return StoreFiles(store, namespace=ns, max_bytes=MAX_BYTES, max_files=MAX_FILES), store


KINDS = [
    pytest.param("InMemoryFiles", 200),
    pytest.param("InMemoryStore", 200),
    pytest.param("FileStore", 30),
    pytest.param("RedisStore", 40, marks=pytest.mark.skipif(not REDIS_URL, reason=NO_REDIS)),
    pytest.param("PostgresStore", 40, marks=pytest.mark.skipif(not POSTGRES_DSN, reason=NO_POSTGRES)),
]


@pytest.mark.parametrize("kind, examples", KINDS)
def test_random_command_sequences_match_the_model(kind, examples):
    totals = {"sequences": 0, "commands": 0, "refused": 0}
    tmp = tempfile.mkdtemp(prefix="fuzz-memory-")

    @_settings(examples)
    @given(_sequences)
    def check(ops):
        async def go() -> int:
            backend, store = await _open(kind, tmp)
            try:
                return await _run(backend, Model(), ops)
            finally:
                if store is not None:
                    await store.delete(backend.key)
                    close = getattr(store, "aclose", None)
                    if close is not None:
                        await close()

        totals["refused"] += asyncio.run(go())
        totals["sequences"] += 1
        totals["commands"] += len(ops)

    check()
    print(f"\nfuzz memory {kind}: {totals}")
    assert totals["sequences"] >= 1
