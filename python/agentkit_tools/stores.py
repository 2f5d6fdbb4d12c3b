"""Key-value stores with compare-and-set.

A store maps ``str`` keys to ``str`` values. Every store offers the same async protocol,
:class:`StorePort`; the memory tool (:class:`agentkit_tools.memory.StoreFiles`) and the
idempotency middleware build on it. ``compare_and_set`` is the primitive that makes concurrent
writers safe: it writes only when the stored value is still the one the writer read.

Stores:

- :class:`InMemoryStore` — a dict; one process, one event loop or thread at a time.
- :class:`FileStore` — one file per key in a directory; durable (fsync + atomic replace);
  **one process** (compare-and-set is atomic between the tasks and threads of one process only).
- :class:`RedisStore` — Redis via ``redis.asyncio``; compare-and-set is one Lua script, atomic on
  the server, safe across processes and machines. Needs ``agentkit-tools[redis]``.
- :class:`PostgresStore` — PostgreSQL via psycopg 3 (async pool); compare-and-set is one SQL
  statement, safe across processes and machines. Needs ``agentkit-tools[postgres]``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Optional, Protocol, runtime_checkable
from urllib.parse import quote

__all__ = ["StorePort", "InMemoryStore", "FileStore", "RedisStore", "PostgresStore"]


@runtime_checkable
class StorePort(Protocol):
    """The async key-value protocol every store implements.

    - ``get(key) -> str | None``: the value, or None when the key is absent.
    - ``set(key, value)``: writes unconditionally.
    - ``delete(key)``: removes the key (absent keys are fine).
    - ``compare_and_set(key, expected, value) -> bool``: writes ``value`` only if the stored value
      equals ``expected`` (``expected=None`` means "only if the key is absent"), atomically.
      Returns True when written; a lost race returns False and never raises. Connection failures
      still raise (``ConnectionError``/the driver's error): the write may or may not have happened.
    """

    async def get(self, key: str) -> Optional[str]: ...

    async def set(self, key: str, value: str) -> None: ...

    async def delete(self, key: str) -> None: ...

    async def compare_and_set(self, key: str, expected: Optional[str], value: str) -> bool: ...


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"store keys must be non-empty strings, got {key!r}")
    return key


def _check_value(value: Any, name: str = "value") -> str:
    if not isinstance(value, str):
        raise TypeError(f"store {name} must be a str, got {type(value).__name__}; serialise it first")
    return value


class InMemoryStore:
    """A :class:`StorePort` over a dict: per process, nothing survives a restart.

    Each operation runs without awaiting, so on one event loop it is atomic; a lock also makes
    it safe from several threads.
    """

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    async def get(self, key: str) -> Optional[str]:
        """The value at ``key``, or None."""
        with self._lock:
            return self._data.get(_check_key(key))

    async def set(self, key: str, value: str) -> None:
        """Writes ``value`` at ``key`` unconditionally."""
        with self._lock:
            self._data[_check_key(key)] = _check_value(value)

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        with self._lock:
            self._data.pop(_check_key(key), None)

    async def compare_and_set(self, key: str, expected: Optional[str], value: str) -> bool:
        """Writes ``value`` if the current value equals ``expected`` (None = absent); True if written."""
        _check_value(value)
        with self._lock:
            if self._data.get(_check_key(key)) != expected:
                return False
            self._data[key] = value
            return True

    def __repr__(self) -> str:
        return f"InMemoryStore({len(self._data)} keys)"


_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,150}$")


class FileStore:
    """A durable :class:`StorePort`: one UTF-8 file per key in ``directory`` (``str`` or ``Path``,
    created if missing).

    Every write goes to a temporary file in the same directory, is fsync'ed, atomically replaces
    the key's file (``os.replace``), and the directory is fsync'ed, so a crash leaves either the
    old or the new value, never a torn one. Keys map to safe file names (percent-encoded with a
    ``k-`` prefix; long keys use a SHA-256 name), so no key can reach outside the directory.

    One process only: compare-and-set is atomic between the tasks and threads of this process
    (a lock serialises them); two processes sharing the directory can lose updates. Use
    :class:`RedisStore` or :class:`PostgresStore` for many workers. File I/O runs in a worker
    thread, never on the event loop.
    """

    def __init__(self, directory: "str | os.PathLike[str]") -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def path_for(self, key: str) -> Path:
        """The file that holds ``key``."""
        encoded = quote(_check_key(key), safe="")
        name = "k-" + encoded
        if not _SAFE_NAME.match(name.replace("%", "_")):
            name = "h-" + hashlib.sha256(key.encode("utf-8")).hexdigest()
        return self.directory / name

    # -- synchronous helpers, run in a worker thread -------------------------------------------

    def _read(self, key: str) -> Optional[str]:
        try:
            return self.path_for(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _write(self, key: str, value: str) -> None:
        target = self.path_for(key)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value.encode("utf-8"))
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

    def _get_sync(self, key: str) -> Optional[str]:
        with self._lock:
            return self._read(key)

    def _set_sync(self, key: str, value: str) -> None:
        with self._lock:
            self._write(key, value)

    def _delete_sync(self, key: str) -> None:
        with self._lock:
            try:
                os.unlink(self.path_for(key))
            except FileNotFoundError:
                return
            self._sync_dir()

    def _cas_sync(self, key: str, expected: Optional[str], value: str) -> bool:
        with self._lock:
            if self._read(key) != expected:
                return False
            self._write(key, value)
            return True

    # -- the async protocol --------------------------------------------------------------------

    async def get(self, key: str) -> Optional[str]:
        """The value at ``key``, or None."""
        _check_key(key)
        return await asyncio.to_thread(self._get_sync, key)

    async def set(self, key: str, value: str) -> None:
        """Writes ``value`` durably at ``key``."""
        _check_key(key)
        _check_value(value)
        await asyncio.to_thread(self._set_sync, key, value)

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        _check_key(key)
        await asyncio.to_thread(self._delete_sync, key)

    async def compare_and_set(self, key: str, expected: Optional[str], value: str) -> bool:
        """Writes ``value`` durably if the current value equals ``expected`` (None = absent)."""
        _check_key(key)
        _check_value(value)
        return await asyncio.to_thread(self._cas_sync, key, expected, value)

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"


# Compare-and-set as one server-side step. KEYS[1] = key; ARGV[1] = "1" if a value is expected
# ("0" = only if absent), ARGV[2] = expected value, ARGV[3] = new value.
_REDIS_CAS = """
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
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

    ``compare_and_set`` is one Lua script (``register_script``, EVALSHA with EVAL fallback), so
    the comparison and the write are one atomic server-side step. Needs the extra
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

    @staticmethod
    def _text(v: Any) -> Optional[str]:
        if v is None:
            return None
        return v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v)

    async def get(self, key: str) -> Optional[str]:
        """The value at ``key``, or None."""
        return self._text(await self.client.get(self._key(key)))

    async def set(self, key: str, value: str) -> None:
        """Writes ``value`` at ``key`` unconditionally."""
        await self.client.set(self._key(key), _check_value(value).encode("utf-8"))

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        await self.client.delete(self._key(key))

    async def compare_and_set(self, key: str, expected: Optional[str], value: str) -> bool:
        """One Lua script: writes ``value`` if the current value equals ``expected`` (None = absent)."""
        _check_value(value)
        args = ["0", "", value.encode("utf-8")] if expected is None else ["1", _check_value(expected, "expected").encode("utf-8"), value.encode("utf-8")]
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
        table: the table (a plain identifier) holding ``key text primary key, value text``;
            created on first use when missing.

    ``compare_and_set`` is one statement: ``UPDATE ... WHERE key = %s AND value = %s`` for an
    expected value, ``INSERT ... ON CONFLICT DO NOTHING`` for "only if absent"; PostgreSQL's row
    locking makes it atomic. Needs the extra ``agentkit-tools[postgres]``. The pool is opened on
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
        self._sql_insert = sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING").format(t)
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

    async def get(self, key: str) -> Optional[str]:
        """The value at ``key``, or None."""
        await self._setup()
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._sql_get, (_check_key(key),))
            row = await cur.fetchone()
        return None if row is None else row[0]

    async def set(self, key: str, value: str) -> None:
        """Writes ``value`` at ``key`` unconditionally (an upsert)."""
        await self._execute(self._sql_set, (_check_key(key), _check_value(value)))

    async def delete(self, key: str) -> None:
        """Removes ``key`` (no error when absent)."""
        await self._execute(self._sql_delete, (_check_key(key),))

    async def compare_and_set(self, key: str, expected: Optional[str], value: str) -> bool:
        """One statement: writes ``value`` if the current value equals ``expected`` (None = absent)."""
        _check_key(key)
        _check_value(value)
        if expected is None:
            rows = await self._execute(self._sql_insert, (key, value))
        else:
            rows = await self._execute(self._sql_update, (value, key, _check_value(expected, "expected")))
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
