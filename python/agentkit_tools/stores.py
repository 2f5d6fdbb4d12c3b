"""Key-value stores with compare-and-set.

A store maps ``str`` keys to JSON values (``str``, numbers, booleans, ``None``, lists and dicts
of them), as the stores of ``agentkit`` take them. Every store offers the same async protocol,
:class:`StorePort`; the memory tool (:class:`agentkit_tools.memory.StoreFiles`) and the
idempotency middleware build on it. ``compare_and_set`` is the primitive that makes concurrent
writers safe: it writes only when the stored value is still the one the writer read. Values are
compared by their canonical JSON (sorted keys, no spaces), so ``1`` and ``1.0`` or ``1`` and
``True`` are different values, and a dict equals any dict with the same items.

Stores:

- :class:`InMemoryStore` — a dict; one process.
- :class:`FileStore` — one file per key in a directory; durable (fsync + atomic replace); safe
  for any number of processes on one host (an exclusive ``fcntl.flock`` around every write).
- :class:`RedisStore` — Redis via ``redis.asyncio``; compare-and-set is one Lua script, atomic on
  the server, safe across processes and machines. Needs ``agentkit-tools[redis]``.
- :class:`PostgresStore` — PostgreSQL via psycopg 3 (async pool); compare-and-set is one SQL
  statement, safe across processes and machines. Needs ``agentkit-tools[postgres]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol, runtime_checkable
from urllib.parse import quote

try:  # POSIX: FileStore's cross-process lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["StorePort", "InMemoryStore", "FileStore", "RedisStore", "PostgresStore", "canonical_json"]


@runtime_checkable
class StorePort(Protocol):
    """The async key-value protocol every store implements.

    - ``get(key) -> value | None``: the value, or None when the key is absent.
    - ``set(key, value)``: writes unconditionally.
    - ``delete(key)``: removes the key (absent keys are fine).
    - ``compare_and_set(key, expected, value) -> bool``: writes ``value`` only if the stored value
      equals ``expected`` by canonical JSON (``expected=None`` means "only if the key is absent
      or holds null"), atomically. Returns True when written; a lost race returns False and
      never raises. Connection failures still raise (``ConnectionError``/the driver's error): the
      write may or may not have happened.

    Keys are non-empty ``str`` (``ValueError`` otherwise); values are JSON values (``TypeError``
    for anything ``json`` cannot encode, ``ValueError`` for NaN or infinity).
    """

    async def get(self, key: str) -> Any: ...

    async def set(self, key: str, value: Any) -> None: ...

    async def delete(self, key: str) -> None: ...

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool: ...


def _check_key(key: Any) -> str:
    if type(key) is not str or not key:
        raise ValueError(f"store keys must be non-empty strings, got {key!r}")
    return key


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a store value: keys sorted, no spaces, UTF-8 text kept as is.
    Two values are the same store value exactly when their canonical texts are equal.

    Raises ``TypeError`` for a value that is not JSON (a set, bytes, an object), ``ValueError``
    for NaN or infinity."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except TypeError as e:
        raise TypeError(f"store values must be JSON values (str, int, float, bool, None, list, dict): {e}") from None
    except ValueError as e:
        raise ValueError(f"store values must be JSON values: {e}; NaN and infinity have no JSON form") from None


_SCALARS = (str, int, float, bool)


def _same(current: Any, expected: Any) -> bool:
    """Whether a stored value (as ``get`` would return it) equals ``expected`` by canonical JSON."""
    if expected is None:
        return current is None
    if type(current) is str and type(expected) is str:
        return current == expected
    if current is None:
        return False
    return canonical_json(current) == canonical_json(expected)


class _Json:
    """A container value held by InMemoryStore as its canonical text (so nobody can change it in
    place); ``get`` hands out a fresh copy."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class InMemoryStore:
    """A :class:`StorePort` over a dict: per process, nothing survives a restart.

    Each operation runs without awaiting, so on one event loop it is atomic; a lock also makes
    it safe from several threads. Strings and numbers are kept as given; lists and dicts are kept
    as canonical JSON and every ``get`` returns a fresh copy, so changing a value you read or
    wrote never changes the store.
    """

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _pack(value: Any) -> Any:
        if value is None or type(value) in _SCALARS:
            canonical_json(value)  # refuses NaN and infinity
            return value
        return _Json(canonical_json(value))

    async def get(self, key: str) -> Any:
        """The value at ``key``, or None."""
        if type(key) is not str or not key:
            _check_key(key)
        with self._lock:
            v = self._data.get(key)
        return json.loads(v.text) if type(v) is _Json else v

    async def set(self, key: str, value: Any) -> None:
        """Writes ``value`` at ``key`` unconditionally."""
        packed = self._pack(value)
        with self._lock:
            self._data[_check_key(key)] = packed

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        with self._lock:
            self._data.pop(_check_key(key), None)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        """Writes ``value`` if the current value equals ``expected`` by canonical JSON (None =
        absent); True if written."""
        packed = self._pack(value)
        _check_key(key)
        with self._lock:
            current = self._data.get(key)
            if current is not expected:
                if type(current) is _Json:
                    if expected is None or current.text != canonical_json(expected):
                        return False
                elif not _same(current, expected):
                    return False
            self._data[key] = packed
            return True

    def __repr__(self) -> str:
        return f"InMemoryStore({len(self._data)} keys)"


_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,150}$")
_TMP_PREFIX = ".tmp-"
_LOCK_NAME = ".lock"


class FileStore:
    """A durable :class:`StorePort`: one file per key in ``directory`` (``str`` or ``Path``,
    created if missing), holding the value's canonical JSON.

    Every write goes to a temporary file in the same directory, is fsync'ed, atomically replaces
    the key's file (``os.replace``), and the directory is fsync'ed, so a crash leaves either the
    old or the new value, never a torn one. Keys map to safe file names (percent-encoded with a
    ``k-`` prefix; long keys use a SHA-256 name), so no key can reach outside the directory.

    Safe for any number of processes (and threads) on one host: every write and every
    compare-and-set holds an exclusive ``fcntl.flock`` on the directory's ``.lock`` file, so a
    read-compare-write is atomic across processes. A process killed mid-write leaves at most a
    temporary ``.tmp-*`` file and releases its lock; opening a FileStore removes such orphans
    (under the lock, so no live writer's file is touched) and counts them in
    ``orphans_removed``. Not for network file systems whose ``flock`` is not shared between
    hosts: use :class:`RedisStore` or :class:`PostgresStore` across machines. File I/O runs in a
    worker thread, never on the event loop.
    """

    def __init__(self, directory: "str | os.PathLike[str]") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.orphans_removed = self._remove_orphans()

    def path_for(self, key: str) -> Path:
        """The file that holds ``key``."""
        encoded = quote(_check_key(key), safe="")
        name = "k-" + encoded
        if not _SAFE_NAME.match(name.replace("%", "_")):
            name = "h-" + hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.directory / name

    # -- synchronous helpers, run in a worker thread -------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads, then every process on the host (flock on ``.lock``)."""
        with self._lock:
            if fcntl is None:  # pragma: no cover - Windows: one process only
                yield
                return
            fd = os.open(self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the lock

    def _remove_orphans(self) -> int:
        removed = 0
        with self._locked():
            for entry in os.scandir(self.directory):
                if entry.name.startswith(_TMP_PREFIX) and entry.is_file(follow_symlinks=False):
                    try:
                        os.unlink(entry.path)
                        removed += 1
                    except FileNotFoundError:  # pragma: no cover - removed meanwhile
                        pass
        if removed:
            self._sync_dir()
        return removed

    def _read(self, key: str) -> Optional[str]:
        try:
            return self.path_for(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _write(self, key: str, text: str) -> None:
        target = self.path_for(key)
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(text.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        self._sync_dir()

    def _sync_dir(self) -> None:
        try:
            dfd = os.open(self.directory, os.O_RDONLY)
        except OSError:  # pragma: no cover - platforms without directory fds
            return
        try:
            os.fsync(dfd)
        except OSError:  # pragma: no cover
            pass
        finally:
            os.close(dfd)

    def _get_sync(self, key: str) -> Any:
        text = self._read(key)  # atomic replace: a reader sees the old or the new file
        return None if text is None else json.loads(text)

    def _set_sync(self, key: str, text: str) -> None:
        with self._locked():
            self._write(key, text)

    def _delete_sync(self, key: str) -> None:
        with self._locked():
            try:
                os.unlink(self.path_for(key))
            except FileNotFoundError:
                return
            self._sync_dir()

    def _cas_sync(self, key: str, expected: Optional[str], text: str) -> bool:
        with self._locked():
            current = self._read(key)
            if expected is None:
                if current is not None and current != "null":
                    return False
            elif current != expected:
                return False
            self._write(key, text)
            return True

    # -- the async protocol --------------------------------------------------------------------

    async def get(self, key: str) -> Any:
        """The value at ``key``, or None."""
        _check_key(key)
        return await asyncio.to_thread(self._get_sync, key)

    async def set(self, key: str, value: Any) -> None:
        """Writes ``value`` durably at ``key``."""
        _check_key(key)
        await asyncio.to_thread(self._set_sync, key, canonical_json(value))

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        _check_key(key)
        await asyncio.to_thread(self._delete_sync, key)

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        """Writes ``value`` durably if the current value equals ``expected`` by canonical JSON
        (None = absent); atomic across the processes of this host."""
        _check_key(key)
        text = canonical_json(value)
        exp = None if expected is None else canonical_json(expected)
        return await asyncio.to_thread(self._cas_sync, key, exp, text)

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"


# Compare-and-set as one server-side step. KEYS[1] = key; ARGV[1] = "1" if a value is expected
# ("0" = only if absent or null), ARGV[2] = expected canonical JSON, ARGV[3] = new value's.
_REDIS_CAS = """
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur and cur ~= 'null' then return 0 end
else
  if cur ~= ARGV[2] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[3])
return 1
"""


class RedisStore:
    """A :class:`StorePort` on Redis (``redis.asyncio``), safe across processes and machines.

    Args:
        url: a Redis URL such as ``redis://127.0.0.1:6379/0`` (default
            ``redis://localhost:6379/0``). Ignored when ``client`` is given.
        client: your own ``redis.asyncio.Redis`` client (it is not closed by :meth:`aclose`).
        namespace: prefix of every key (``"<namespace>:<key>"``), so several applications can
            share one database.

    Values are stored as their canonical JSON text. ``compare_and_set`` is one Lua script
    (``register_script``, EVALSHA with EVAL fallback), so the comparison and the write are one
    atomic server-side step. Needs the extra
    ``agentkit-tools[redis]``. A client is bound to the event loop it first ran on: create the
    store inside the loop that uses it.
    """

    def __init__(self, url: Optional[str] = None, *, client: Any = None, namespace: str = "agentkit") -> None:
        if client is None:
            try:
                import redis.asyncio as aioredis
            except ImportError as e:  # pragma: no cover - exercised without redis installed
                raise ImportError(
                    "RedisStore needs the redis package: pip install 'agentkit-tools[redis]' "
                    "(or pass client=<redis.asyncio.Redis>)"
                ) from e
            client = aioredis.Redis.from_url(url or "redis://localhost:6379/0")
            self._owns_client = True
        else:
            self._owns_client = False
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"namespace must be a non-empty string, got {namespace!r}")
        self.client = client
        self.namespace = namespace
        self._cas = client.register_script(_REDIS_CAS)

    def _key(self, key: str) -> str:
        return f"{self.namespace}:{_check_key(key)}"

    async def get(self, key: str) -> Any:
        """The value at ``key``, or None."""
        raw = await self.client.get(self._key(key))
        return None if raw is None else json.loads(raw)

    async def set(self, key: str, value: Any) -> None:
        """Writes ``value`` at ``key`` unconditionally."""
        await self.client.set(self._key(key), canonical_json(value).encode("utf-8"))

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        await self.client.delete(self._key(key))

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        """One Lua script: writes ``value`` if the current value equals ``expected`` by
        canonical JSON (None = absent)."""
        new = canonical_json(value).encode("utf-8")
        if expected is None:
            args = ["0", "", new]
        else:
            args = ["1", canonical_json(expected).encode("utf-8"), new]
        won = await self._cas(keys=[self._key(key)], args=args)
        return int(won) == 1

    async def aclose(self) -> None:
        """Closes the client if this store created it."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> "RedisStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"RedisStore(namespace={self.namespace!r})"


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PostgresStore:
    """A :class:`StorePort` on PostgreSQL (psycopg 3, async), safe across processes and machines.

    Args:
        dsn: a libpq connection string or URL (``postgresql://user@host:5432/db``); empty or None
            uses libpq's defaults (``PG*`` environment variables). Ignored when ``pool`` is given.
        pool: your own ``psycopg_pool.AsyncConnectionPool`` (not closed by :meth:`aclose`).
        table: the table (a plain identifier) holding ``key text primary key, value text``
            (the value's canonical JSON); created on first use when missing.

    ``compare_and_set`` is one statement: ``UPDATE ... WHERE key = %s AND value = %s`` for an
    expected value, ``INSERT ... ON CONFLICT DO UPDATE ... WHERE value = 'null'`` for "only if
    absent"; PostgreSQL's row locking makes it atomic. Needs the extra ``agentkit-tools[postgres]``. The pool is opened on
    first use, in the running event loop.
    """

    def __init__(self, dsn: Optional[str] = None, *, pool: Any = None, table: str = "agentkit_store") -> None:
        try:
            import psycopg  # noqa: F401
            from psycopg import sql
        except ImportError as e:  # pragma: no cover - exercised without psycopg installed
            raise ImportError(
                "PostgresStore needs psycopg 3: pip install 'agentkit-tools[postgres]'"
            ) from e
        if not isinstance(table, str) or not _IDENT.match(table):
            raise ValueError(
                f"table must be a plain SQL identifier (letters, digits, underscores), got {table!r}"
            )
        if pool is None:
            try:
                from psycopg_pool import AsyncConnectionPool
            except ImportError as e:  # pragma: no cover
                raise ImportError(
                    "PostgresStore needs psycopg-pool: pip install 'agentkit-tools[postgres]' "
                    "(or pass pool=<psycopg_pool.AsyncConnectionPool>)"
                ) from e
            pool = AsyncConnectionPool(dsn or "", open=False, min_size=1, max_size=4, kwargs={"autocommit": True})
            self._owns_pool = True
        else:
            self._owns_pool = False
        self.pool = pool
        self.table = table
        t = sql.Identifier(table)
        self._sql_create = sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value text NOT NULL)").format(t)
        self._sql_get = sql.SQL("SELECT value FROM {} WHERE key = %s").format(t)
        self._sql_set = sql.SQL(
            "INSERT INTO {} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
        ).format(t)
        self._sql_delete = sql.SQL("DELETE FROM {} WHERE key = %s").format(t)
        self._sql_update = sql.SQL("UPDATE {} SET value = %s WHERE key = %s AND value = %s").format(t)
        self._sql_insert = sql.SQL(
            "INSERT INTO {} AS t (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
            "SET value = EXCLUDED.value WHERE t.value = 'null'"
        ).format(t)
        self._ready = False
        self._setup_lock: Optional[asyncio.Lock] = None

    async def _setup(self) -> None:
        if self._ready:
            return
        if self._setup_lock is None:
            self._setup_lock = asyncio.Lock()
        async with self._setup_lock:
            if not self._ready:
                await self._create()
                self._ready = True

    async def _create(self) -> None:
        import psycopg

        if self._owns_pool:
            await self.pool.open(wait=True)
        async with self.pool.connection() as conn:
            try:
                await conn.execute(self._sql_create)
                if not conn.autocommit:
                    await conn.commit()
            except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                # Another process created the table at the same moment.
                if not conn.autocommit:
                    await conn.rollback()

    async def _execute(self, query: Any, params: tuple) -> int:
        """Runs one statement; returns its row count."""
        await self._setup()
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return cur.rowcount

    async def get(self, key: str) -> Any:
        """The value at ``key``, or None."""
        await self._setup()
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._sql_get, (_check_key(key),))
            row = await cur.fetchone()
        return None if row is None else json.loads(row[0])

    async def set(self, key: str, value: Any) -> None:
        """Writes ``value`` at ``key`` unconditionally (an upsert)."""
        await self._execute(self._sql_set, (_check_key(key), canonical_json(value)))

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        await self._execute(self._sql_delete, (_check_key(key),))

    async def compare_and_set(self, key: str, expected: Any, value: Any) -> bool:
        """One statement: writes ``value`` if the current value equals ``expected`` by
        canonical JSON (None = absent)."""
        _check_key(key)
        new = canonical_json(value)
        if expected is None:
            rows = await self._execute(self._sql_insert, (key, new))
        else:
            rows = await self._execute(self._sql_update, (new, key, canonical_json(expected)))
        return rows == 1

    async def aclose(self) -> None:
        """Closes the pool if this store created it."""
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> "PostgresStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"PostgresStore(table={self.table!r})"
