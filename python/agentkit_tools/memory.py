"""The ``memory`` tool: persistent notes for agents, edited without ever losing an update.

The tool follows Anthropic's memory-tool contract: one ``command`` argument selects ``view``,
``create``, ``str_replace``, ``insert``, ``delete`` or ``rename``, on POSIX paths confined under a
root (``/memories``). Paths are virtual: they are keys of a tree document, never operating-system
paths.

Backends share one async protocol (:class:`MemoryBackend`):

- :class:`InMemoryFiles` — a tree held in this process.
- :class:`StoreFiles` — the whole tree of one namespace is one JSON document in a
  :class:`~agentkit_tools.stores.StorePort`, changed only by compare-and-set. The loop (decided
  in the Rust core, driven on the caller's event loop) reads the document, applies the command,
  and writes with compare-and-set; on a lost race it re-applies the command to the fresh
  document, so concurrent edits from many tasks, processes or machines never lose an update. It
  gives up after ``max_attempts`` (32) cycles with :class:`StoreConflictError`, having written
  nothing.

Limits: ``max_bytes`` counts the UTF-8 bytes of every file's path and text; ``max_files`` the
files; a path is at most 1,024 bytes (as sent and once joined under the root); control
characters in a path are refused like ``..`` escapes. See ``docs/memory.md``.

Errors are raised as classes that are both the standard Python exception the spec names
(``PermissionError``, ``FileNotFoundError``, ``ValueError``, ``RuntimeError``) and a
:class:`~agentkit_tools.errors.ToolError` with a stable ``code``, so the dispatcher turns them into
tool-result envelopes the model can act on. A failed command never changes anything.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Protocol, Sequence, runtime_checkable

from . import _core
from ._core import codes
from .errors import ToolError
from .schema import ToolSchema
from .stores import StorePort

__all__ = [
    "TOOL_NAME",
    "FileTool",
    "MemoryBackend",
    "InMemoryFiles",
    "StoreFiles",
    "CasStats",
    "MemoryLimitError",
    "StoreConflictError",
    "MemoryPermissionError",
    "MemoryNotFoundError",
    "MemoryExistsError",
    "MemoryCommandError",
    "MemoryCorruptError",
]

TOOL_NAME = "memory"
"""The tool's name, fixed by Anthropic's memory-tool contract (what the model calls)."""

DEFAULT_ROOT: str = _core.MEMORY_DEFAULT_ROOT
"""The memory root unless another is given: ``"/memories"``."""
DEFAULT_MAX_BYTES: int = _core.MEMORY_DEFAULT_MAX_BYTES
"""The default limit on the UTF-8 bytes of all file paths and texts: 8388608 (8 MiB)."""
MAX_PATH_BYTES: int = _core.MEMORY_MAX_PATH_BYTES
"""The longest memory path, in UTF-8 bytes, as sent and once joined under the root."""
DEFAULT_MAX_FILES: int = _core.MEMORY_DEFAULT_MAX_FILES
"""The default limit on the number of files: 4096."""
DEFAULT_MAX_ATTEMPTS: int = _core.MEMORY_DEFAULT_MAX_ATTEMPTS
"""The default number of compare-and-set cycles before :class:`StoreConflictError`: 32."""


# ---------------------------------------------------------------------------------------- errors


class MemoryPermissionError(ToolError, PermissionError):
    """A path escapes the memory root (``..``, another root, a backslash, a NUL byte or another
    control character), or the command would delete or move the root itself.
    ``code="permission_denied"``."""

    def __init__(self, message: str, *, code: str = codes.PERMISSION_DENIED) -> None:
        super().__init__(message, code=code)


class MemoryNotFoundError(ToolError, FileNotFoundError):
    """No file or directory at the path. ``code="not_found"``."""

    def __init__(self, message: str, *, code: str = codes.NOT_FOUND) -> None:
        super().__init__(message, code=code)


class MemoryExistsError(ToolError, FileExistsError, ValueError):
    """The target exists: ``create`` without ``overwrite=True``, or ``rename`` onto an existing
    path ("... already exists; delete it first"). ``code="already_exists"``.

    Both a ``FileExistsError`` (what code written for ``agentkit.tools`` catches from
    ``create``) and a ``ValueError`` (what it catches from ``rename``)."""

    def __init__(self, message: str, *, code: str = codes.ALREADY_EXISTS) -> None:
        super().__init__(message, code=code)


class MemoryCommandError(ToolError, ValueError):
    """A model mistake in a command's arguments. ``code`` says which: ``missing_argument``,
    ``unexpected_argument``, ``invalid_argument``, ``no_match`` / ``ambiguous_match``
    (``str_replace``'s ``old_str`` found zero or several times; the message says how many),
    ``out_of_range`` (``insert_line``, ``view_range``), ``is_a_directory``, ``not_a_directory``,
    ``path_too_long`` (over 1,024 bytes)."""

    def __init__(self, message: str, *, code: str = codes.INVALID_ARGUMENT) -> None:
        super().__init__(message, code=code)


class MemoryLimitError(ToolError, ValueError):
    """The command would grow the tree past ``max_bytes`` (UTF-8 bytes of all file paths and
    texts) or ``max_files``; nothing was changed. ``code="memory_limit"``.

    Attributes: ``limit`` (``"max_bytes"`` or ``"max_files"``), ``maximum`` (the configured
    limit), ``used`` (the tree's use before the command), ``requested`` (what the command would
    have made it). They are also merged into the tool-result envelope.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        maximum: int,
        used: int,
        requested: int,
        code: str = codes.MEMORY_LIMIT,
    ) -> None:
        super().__init__(message, code=code, limit=limit, maximum=maximum, used=used, requested=requested)
        self.limit = limit
        self.maximum = maximum
        self.used = used
        self.requested = requested


class StoreConflictError(ToolError, RuntimeError):
    """The compare-and-set loop lost every race it was allowed (``max_attempts``, 32 by default)
    because other writers kept changing the tree; nothing was written. Calling again usually
    succeeds. ``code="store_conflict"``, ``retriable=True``."""

    def __init__(self, message: str, *, code: str = codes.STORE_CONFLICT) -> None:
        super().__init__(message, code=code, retriable=True)


class MemoryCorruptError(RuntimeError):
    """The stored document is not a memory tree this version reads (another format or version,
    another root, a malformed path). Not a model mistake: inspect or delete the store key."""

    def __init__(self, message: str, *, code: str = codes.CORRUPT_TREE) -> None:
        super().__init__(message)
        self.code = code


# -------------------------------------------------------------------------------------- backends


@runtime_checkable
class MemoryBackend(Protocol):
    """The async protocol every memory backend implements (the signatures of
    ``agentkit.tools``' ``InMemoryFiles``); each method returns the result text and raises the
    errors of this module (nothing changes on an error). :class:`FileTool` resolves and confines
    every path before it calls a backend, and calls ``view(path)`` without a range,
    ``view(path, view_range)`` with one, and every other method with positional arguments
    (``overwrite`` by keyword), so a backend written to those signatures works."""

    async def view(self, path: str, view_range: Optional[Sequence[int]] = None) -> str: ...

    async def create(self, path: str, file_text: str, overwrite: bool = False) -> str: ...

    async def str_replace(self, path: str, old_str: str, new_str: str) -> str: ...

    async def insert(self, path: str, insert_line: int, insert_text: str) -> str: ...

    async def delete(self, path: str) -> str: ...

    async def rename(self, path: str, new_path: str) -> str: ...


class _Commands:
    """The six commands, each a thin call of ``_apply`` (which the Rust core executes)."""

    root: str

    async def _apply(self, command: str, kwargs: dict[str, Any], numbered: bool = False) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    async def view(self, path: str, view_range: Optional[Sequence[int]] = None) -> str:
        """A directory: the sorted paths of the files below it, one per line (``""`` when empty;
        ``"/"`` lists every file under the root). A file: its text; with
        ``view_range=[start, end]`` (1-based, inclusive; ``end=-1`` = last line) those lines
        joined by ``\\n``. (The ``memory`` tool shows the model the same with line numbers.)

        Raises MemoryNotFoundError, MemoryPermissionError, MemoryCommandError (``out_of_range``,
        ``is_a_directory`` for a range on a directory)."""
        return await self._apply("view", {"path": path, "view_range": view_range})

    async def create(self, path: str, file_text: str, overwrite: bool = False) -> str:
        """Writes a file (parent directories are implicit). Refuses an existing file unless
        ``overwrite=True`` (MemoryExistsError, also a FileExistsError), a directory or the root
        (MemoryCommandError ``is_a_directory``), a path below a file (``not_a_directory``);
        MemoryLimitError when the tree would outgrow ``max_bytes``/``max_files``."""
        return await self._apply("create", {"path": path, "file_text": file_text, "overwrite": overwrite})

    async def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        """Replaces the only occurrence of ``old_str`` with ``new_str`` (``""`` deletes it).
        Zero or several occurrences (overlapping ones count) → MemoryCommandError ``no_match`` /
        ``ambiguous_match`` saying how many and on which lines."""
        return await self._apply("str_replace", {"path": path, "old_str": old_str, "new_str": new_str})

    async def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        """Inserts ``insert_text`` (its trailing line breaks dropped) as a line after line
        ``insert_line`` of the text split on ``\\n`` (0 = at the top; a text ending in ``\\n``
        has an empty last line, so ``"a\\nb\\n"`` takes 0 to 3). Out of range →
        MemoryCommandError ``out_of_range``."""
        return await self._apply("insert", {"path": path, "insert_line": insert_line, "insert_text": insert_text})

    async def delete(self, path: str) -> str:
        """Deletes a file, or a directory with every file below it. The root is refused
        (MemoryPermissionError)."""
        return await self._apply("delete", {"path": path})

    async def rename(self, path: str, new_path: str) -> str:
        """Moves a file or directory from ``path`` to ``new_path``. Refuses an existing
        ``new_path`` (MemoryExistsError: "... already exists; delete it first"), the root, and
        moving a directory into itself."""
        return await self._apply("rename", {"old_path": path, "new_path": new_path})


class InMemoryFiles(_Commands):
    """A memory tree held in this process (lost at exit); thread- and task-safe.

    Args:
        root: the directory every path is confined under (default ``/memories``).
        max_bytes: limit on the UTF-8 bytes of all file paths and texts (default 8 MiB).
        max_files: limit on the number of files (default 4096).
    """

    def __init__(
        self,
        root: str = DEFAULT_ROOT,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
    ) -> None:
        self._tree = _core.MemoryTree(root, max_bytes=max_bytes, max_files=max_files)
        self.root: str = self._tree.root
        self.max_bytes = max_bytes
        self.max_files = max_files

    async def _apply(self, command: str, kwargs: dict[str, Any], numbered: bool = False) -> str:
        return self._tree.apply(command, kwargs, numbered)

    def files(self) -> dict[str, str]:
        """A snapshot ``{path: text}``, sorted by path."""
        return self._tree.files()

    def __repr__(self) -> str:
        return f"InMemoryFiles(root={self.root!r}, files={self._tree.file_count})"


@dataclass
class CasStats:
    """Counters of a :class:`StoreFiles`: ``commands`` that succeeded and the ``attempts``
    (read-apply cycles) they used; ``retries = attempts - commands`` is the number of lost
    compare-and-set races those commands retried."""

    commands: int = 0
    attempts: int = 0

    @property
    def retries(self) -> int:
        """Lost compare-and-set races that were retried (``attempts - commands``)."""
        return self.attempts - self.commands


_UNSEEN = object()  # StoreFiles: no copy of the document at hand
_LEAD = object()  # StoreFiles: a queued caller's turn to write for everyone queued
_GROUPS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


class _Group:
    """The writers of one document in this process, on one event loop."""

    __slots__ = ("loop", "busy", "queue", "seen")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.busy = False  # a write is in flight
        self.queue: list = []  # (command, future, StoreFiles) waiting for the next write
        self.seen: Any = _UNSEEN  # the last document read or written

    def hand_over(self) -> None:
        """The write in flight is finished: the first caller still waiting leads the next."""
        while self.queue:
            _, fut, _ = self.queue.pop(0)
            if not fut.done():
                fut.set_result(_LEAD)
                return
        self.busy = False


def _answer(owner: "StoreFiles", out: Any, attempts: int) -> str:
    """A command's outcome for its caller: raises its error, or counts it and returns the text."""
    if isinstance(out, BaseException):
        raise out
    stats = owner.stats
    stats.commands += 1
    stats.attempts += attempts
    return out  # type: ignore[no-any-return]


class StoreFiles(_Commands):
    """A memory tree stored as one JSON document in a :class:`~agentkit_tools.stores.StorePort`,
    changed only with compare-and-set.

    Args:
        store: any StorePort (``InMemoryStore``, ``FileStore``, ``RedisStore``, ``PostgresStore``).
        namespace: fixed by the host (for example a user or project id): the tree lives at store
            key ``memory:<namespace>``. Nothing the model sends can reach another namespace.
        root: the directory every path is confined under (default ``/memories``).
        max_bytes: limit on the UTF-8 bytes of all file paths and texts (default 8388608).
        max_files: limit on the number of files (default 4096).
        max_attempts: compare-and-set cycles before :class:`StoreConflictError` (default 32).

    The tree is stored as its JSON text (a string value; a document stored as a JSON object is
    read too). Each command reads it with ``store.get``, applies the command in the Rust core,
    and writes with ``store.compare_and_set`` against the exact value read; the store is awaited
    on the caller's event loop. Between lost races it backs off with full jitter (1 ms doubling
    up to 50 ms). ``stats`` counts commands and attempts.

    Commands of this process on one document (every ``StoreFiles`` on the same store object,
    namespace and settings, on one event loop) never race each other: while one write is in
    flight, the others queue and the next compare-and-set carries them all, applied in order
    with one answer each. An edit starts from the last document this process read or wrote and
    goes straight to the compare-and-set (one round trip when nothing changed meanwhile; a
    stale copy only loses the race and is read afresh). A view, and any error or no-op answer,
    comes from a fresh read or a won write. Races with other processes are retried as above.
    """

    def __init__(
        self,
        store: StorePort,
        *,
        namespace: str,
        root: str = DEFAULT_ROOT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"StoreFiles needs a non-empty namespace string, got {namespace!r}")
        self.store = store
        self.namespace = namespace
        self.key = f"memory:{namespace}"
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.max_attempts = max_attempts
        self._engine = _core.MemoryStoreEngine(
            self.key, root=root, max_bytes=max_bytes, max_files=max_files, max_attempts=max_attempts
        )
        self.root: str = _core.MemoryTree(root).root
        self.stats = CasStats()
        # Writers of one document in this process (StoreFiles objects on the same store, key
        # and settings, on one event loop) share a _Group: while one write is in flight, the
        # commands of the others queue up and go together in the next compare-and-set, so they
        # do not race each other.
        self._settings = (self.key, self.root, max_bytes, max_files, max_attempts)
        try:
            self._groups: dict = _GROUPS.setdefault(store, {})
        except TypeError:  # a store without weak references: group this object's calls only
            self._groups = {}

    async def _apply(self, command: str, kwargs: dict[str, Any], numbered: bool = False) -> str:
        if command == "view":  # a view reads on its own; it never waits for a write
            text = self._engine.read(command, kwargs, await self.store.get(self.key), numbered)
            stats = self.stats
            stats.commands += 1
            stats.attempts += 1
            return text  # type: ignore[no-any-return]
        cmd = self._engine.command(command, kwargs, numbered)
        group = self._group()
        if group.busy:  # a write to this document is in flight in this process: join the next one
            fut = asyncio.get_running_loop().create_future()
            group.queue.append((cmd, fut, self))
            try:
                got = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled() and fut.result() is _LEAD:
                    group.hand_over()
                raise
            if got is not _LEAD:
                return got  # type: ignore[no-any-return]
        else:
            group.busy = True
        # This call leads: it writes its command together with every one queued meanwhile.
        others = [item for item in group.queue if not item[1].done()]
        group.queue = []
        if not others:
            try:
                (out,), attempts = await self._commit(group, [cmd])
            finally:
                group.hand_over()
            return _answer(self, out, attempts)
        fut = asyncio.get_running_loop().create_future()
        others.insert(0, (cmd, fut, self))
        # A task of its own, so that cancelling this caller never abandons the others' write.
        asyncio.get_running_loop().create_task(self._commit_for(group, others))
        return await fut  # type: ignore[no-any-return]

    async def _commit_for(self, group: "_Group", items: list) -> None:
        """Writes a batch of queued commands and settles each caller's future."""
        try:
            outcomes, attempts = await self._commit(group, [cmd for cmd, _, _ in items])
        except BaseException as e:  # the store failed: every caller of the batch hears it
            for _, fut, _ in items:
                if fut.done():
                    continue
                if isinstance(e, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(e)
            if not isinstance(e, Exception):
                raise
        else:
            for (_, fut, owner), out in zip(items, outcomes):
                if fut.done():
                    continue
                if isinstance(out, BaseException):
                    fut.set_exception(out)
                else:
                    fut.set_result(_answer(owner, out, attempts))
        finally:
            group.hand_over()

    async def _commit(self, group: "_Group", cmds: list) -> "tuple[list, int]":
        """One compare-and-set loop for ``cmds``: their outcomes (text or exception) and the
        read-apply cycles used."""
        loop = self._engine.begin(cmds)
        store, key = self.store, self.key
        # The last document this process read or wrote is offered first: when the batch changes
        # it, the write goes out without a read (one round trip), and a stale copy only loses
        # the compare-and-set. The core answers nothing from it without a fresh read or a won
        # write. After a lost race: back off, then read afresh.
        doc = group.seen
        value = None if doc is _UNSEEN else loop.on_cached(doc)
        while True:
            if value is None:
                doc = await store.get(key)
                value = loop.on_get(doc)
                if value is None:
                    break
            delay = loop.on_cas(await store.compare_and_set(key, doc, value))
            if delay is None:
                doc = value if loop.written else _UNSEEN
                break
            value = None
            if delay:
                await asyncio.sleep(delay)
        group.seen = doc
        return loop.outcomes(), loop.attempts

    def _group(self) -> "_Group":
        loop = asyncio.get_running_loop()
        gkey = (id(loop), self._settings)
        group = self._groups.get(gkey)
        if group is None or group.loop() is not loop:
            for k in [k for k, g in self._groups.items() if g.loop() is None]:
                del self._groups[k]
            group = self._groups[gkey] = _Group(loop)
        return group

    async def files(self) -> dict[str, str]:
        """A snapshot ``{path: text}`` read from the store."""
        doc = await self.store.get(self.key)
        if doc is None:
            return {}
        if isinstance(doc, str):
            doc = json.loads(doc)
        return dict(doc["files"])

    def __repr__(self) -> str:
        return f"StoreFiles({self.store!r}, namespace={self.namespace!r}, root={self.root!r})"


# ------------------------------------------------------------------------------------- the tool

_COMMANDS = ["view", "create", "str_replace", "insert", "delete", "rename"]


def _description(root: str) -> str:
    return (
        f"Your persistent memory: a directory of text files under {root} that survives between "
        "conversations and is shared with other runs. At the start of a task, view the directory "
        "to see what you already know; record progress, decisions and facts worth keeping as you "
        "go, and keep the files short and organised.\n"
        "Commands: view (list a directory, or read a file with numbered lines; view_range=[start, end] "
        "reads lines start..end, 1-based), create (write a new file with file_text; refuses to replace an "
        "existing file unless overwrite=true), str_replace (replace old_str, which must occur "
        "exactly once, with new_str), insert (insert insert_text after line insert_line; 0 = top), "
        "delete (a file or directory), rename (old_path to new_path; never overwrites).\n"
        f"Paths must stay under {root}; relative paths are joined under it."
    )


def _parameters(root: str) -> dict[str, Any]:
    path_hint = f"e.g. {root}/notes.md"
    return {
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "enum": list(_COMMANDS),
                "description": "The operation: view, create, str_replace, insert, delete or rename.",
            },
            "path": {
                "type": "string",
                "description": f"File or directory under {root} ({path_hint}). Used by view, create, "
                "str_replace, insert and delete; for rename it is an alias of old_path.",
            },
            "file_text": {
                "type": "string",
                "description": "create: the full text of the file.",
            },
            "overwrite": {
                "type": "boolean",
                "default": False,
                "description": "create: replace the file if it already exists (default false).",
            },
            "old_str": {
                "type": "string",
                "description": "str_replace: the exact text to replace; it must occur exactly once "
                "in the file, so include enough surrounding context.",
            },
            "new_str": {
                "type": "string",
                "description": "str_replace: the replacement text (required; an empty string deletes old_str).",
            },
            "insert_line": {
                "type": "integer",
                "minimum": 0,
                "description": "insert: the line after which to insert (0 inserts at the top).",
            },
            "insert_text": {
                "type": "string",
                "description": "insert: the text to insert as a new line (a trailing line break is dropped).",
            },
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "minItems": 2,
                "maxItems": 2,
                "description": "view of a file: [start, end] 1-based inclusive line numbers; end "
                "may be -1 for the last line. Omit to read the whole file.",
            },
            "old_path": {
                "type": "string",
                "description": f"rename: the file or directory to move, under {root}.",
            },
            "new_path": {
                "type": "string",
                "description": f"rename: the destination under {root}; it must not exist yet.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }


class FileTool:
    """The ``memory`` tool (the name is fixed by Anthropic's memory-tool contract).

    Args:
        backend: a :class:`MemoryBackend` (:class:`InMemoryFiles`, :class:`StoreFiles`, or your
            own); default: a fresh ``InMemoryFiles(root)``.
        root: the directory every path is confined under. Must match the backend's ``root``.

    Side-effecting, not idempotent. ``run(args, ctx)`` checks the arguments of the selected
    command (missing, misplaced or ill-typed ones → :class:`MemoryCommandError`), calls the
    backend method and returns the result text. Every error is also a ``ToolError`` with a
    ``code``, so the dispatcher reports it to the model with the next step to take.
    """

    name = TOOL_NAME
    side_effecting = True
    idempotent = False
    requires_approval = False
    caps: tuple = ()
    url_arg = None
    timeout_s = None
    max_result_chars = None
    output_schema = None

    def __init__(self, backend: Optional[MemoryBackend] = None, *, root: str = DEFAULT_ROOT) -> None:
        normalised = _core.MemoryTree(root).root
        if backend is None:
            backend = InMemoryFiles(normalised)
        else:
            backend_root = getattr(backend, "root", normalised)
            if isinstance(backend_root, str) and backend_root.rstrip("/") != normalised:
                raise ValueError(
                    f"FileTool root {normalised!r} differs from the backend's root {backend_root!r}; "
                    f"pass the same root= to both"
                )
        self.backend = backend
        self.root = normalised
        self.description = _description(normalised)
        self.schema = ToolSchema(self.name, self.description, _parameters(normalised))

    def is_read_only_call(self, args: Mapping[str, Any]) -> bool:
        """Whether this particular call only reads: True for ``command == "view"``.

        ``args`` is the call's validated arguments mapping. The Invoker asks this per call, so a
        ``view`` is never deduplicated, does not reset repeat counts and may be retried, while
        every other command stays side-effecting. Any tool may define this method."""
        return args.get("command") == "view"

    async def run(self, args: Any, ctx: Any = None) -> str:
        """Executes one call. ``args``: the model's arguments (a mapping, or its JSON text).

        Checks the selected command's arguments and resolves every path under ``root`` (``..``
        escapes, other roots, backslashes and control characters → MemoryPermissionError)
        before the backend is called. Returns the result text: for a ``view`` of a file on this
        module's backends, its lines with 1-based numbers (``"     1\\tfirst line"``); an empty
        directory says that it is empty. Raises the errors of this module."""
        if isinstance(args, (str, bytes, bytearray)):
            try:
                args = json.loads(args)
            except ValueError as e:
                raise MemoryCommandError(
                    f"memory tool arguments are not valid JSON ({e}); send a JSON object such as "
                    f'{{"command": "view", "path": "{self.root}"}}',
                    code=codes.INVALID_ARGUMENT,
                ) from None
        if not isinstance(args, Mapping):
            raise MemoryCommandError(
                f"memory tool arguments must be a JSON object, got {type(args).__name__}; send e.g. "
                f'{{"command": "view", "path": "{self.root}"}}',
                code=codes.INVALID_ARGUMENT,
            )
        method, params = _core.memory_parse_call(dict(args), self.root)
        backend = self.backend
        if method == "view":
            path, view_range = params
            if isinstance(backend, _Commands):
                return await backend._apply("view", {"path": path, "view_range": view_range}, True)
            if view_range is None:
                return await backend.view(path)  # type: ignore[no-any-return]
            return await backend.view(path, list(view_range))  # type: ignore[no-any-return]
        if method == "create":
            path, file_text, overwrite = params
            return await backend.create(path, file_text, overwrite=overwrite)  # type: ignore[no-any-return]
        return await getattr(backend, method)(*params)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"FileTool({self.backend!r})"
