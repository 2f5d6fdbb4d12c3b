"""Tools of MCP servers as ordinary tools, with the official ``mcp`` SDK (an optional extra:
``pip install 'agentkit-tools[mcp]'``).

``MCPToolset`` connects to one MCP server (a command over stdio, a streamable HTTP URL, or, in
tests, an SDK ``Server``/``MCPServer`` in-process), lists its tools and turns each into an
:class:`MCPTool`, an object of the ``Tool`` protocol that registers in a ``ToolRegistry`` like
any other, so the Invoker's middleware (audit, approval, repeat detection, idempotency, retry,
timeout) applies to it::

    async with MCPToolset.stdio("python", ["-m", "weather_server"], prefix="weather_") as tools:
        registry = ToolRegistry()
        tools.register(registry)
        envelope = await Invoker(registry).invoke({"name": "weather_forecast", "input": {...}})

What each tool takes from the server's ``tools/list`` entry:

- ``inputSchema`` is compiled by this package's validator: a bad call is refused locally with
  the usual ``invalid_arguments`` message, before anything travels;
- ``outputSchema`` checks the ``structuredContent`` of every successful result (a mismatch, or
  no structured content, is ``output_mismatch``);
- ``annotations``: ``readOnlyHint`` true → not side-effecting (else side-effecting, the MCP
  default), ``idempotentHint`` → ``idempotent``, ``destructiveHint`` → ``destructive`` (MCP's
  default true for a tool that is not read-only). Annotations are hints from the server; name
  the tools that need a human in ``requires_approval=``;
- results: ``isError: true`` → a ``ToolError`` (code ``tool_error``) carrying the server's text;
  ``structuredContent`` → the value; otherwise the content blocks: text → ``str`` (blocks
  joined with a newline), images → :class:`~agentkit_tools.media.ToolImage`, audio and binary
  resources → :class:`~agentkit_tools.media.ToolFile`, text resources → their text, resource
  links → a line naming them; several blocks with media → a list of those. A broken connection
  raises ``ConnectionError`` (retried for read-only and idempotent tools by the retry
  middleware); a protocol error from the server is a ``ToolError`` with code ``mcp_error``.

The tool list is cached, and refreshed when the server sends
``notifications/tools/list_changed`` (through ``subscriptions/listen`` on the 2026-07-28
protocol): every registry the toolset registered into is updated in place (new tools added,
changed ones replaced, vanished ones removed). A registry ``view`` is a snapshot and is not.
"""

from __future__ import annotations

import base64
import logging
from contextlib import AsyncExitStack
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import _core
from .errors import ToolError, ToolShapeError
from .frozen import FrozenDict
from .media import ToolFile, ToolImage
from .schema import ToolSchema

__all__ = ["MCPTool", "MCPToolset"]

_log = logging.getLogger("agentkit_tools.mcp_client")


def _require_mcp() -> Any:
    try:
        import mcp_types  # noqa: F401
        from mcp import Client
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError("MCP tools need the official MCP SDK: pip install 'agentkit-tools[mcp]'") from exc
    return Client


def _thaw(value: Any) -> Any:
    """Plain dicts and lists of the (deep-frozen) arguments, for the wire."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value


class MCPTool:
    """One tool of an MCP server, as a ``Tool``: ``name`` (with the toolset's prefix),
    ``remote_name`` (the server's name), ``description``, ``schema`` (a ``ToolSchema`` of the
    server's ``inputSchema``), ``output_schema`` (its ``outputSchema`` or None), the flags
    ``side_effecting``, ``idempotent``, ``destructive``, ``requires_approval``, and
    ``annotations`` (the server's, as a dict). ``run(args, ctx)`` calls the tool on the server
    (see the module docstring for what it returns and raises)."""

    caps: tuple[str, ...] = ()
    url_arg: str | None = None
    max_result_chars: int | None = None
    max_media_bytes: int | None = None

    def __init__(self, toolset: MCPToolset, entry: Any, name: str, *, requires_approval: bool, timeout_s: float | None) -> None:
        from .tools import _OutputCheck

        annotations = entry.annotations
        self.toolset = toolset
        self.remote_name: str = entry.name
        self.name = name
        self.description: str = entry.description or entry.title or ""
        self.schema = ToolSchema(name, self.description, entry.input_schema)
        self.output_schema: dict[str, Any] | None = entry.output_schema
        self.annotations: dict[str, Any] = (
            annotations.model_dump(by_alias=True, exclude_none=True) if annotations is not None else {}
        )
        read_only = bool(annotations is not None and annotations.read_only_hint)
        self.side_effecting = not read_only
        self.idempotent = bool(annotations is not None and annotations.idempotent_hint)
        self.destructive = not read_only and (annotations is None or annotations.destructive_hint is not False)
        self.requires_approval = requires_approval
        self.timeout_s = timeout_s
        self._core = _core.CoreTool.from_schema(name, dict(entry.input_schema), [], self.description)
        self._output = _OutputCheck(self.output_schema) if self.output_schema is not None else None
        self._entry = entry

    @property
    def read_only(self) -> bool:
        """The inverse of ``side_effecting``."""
        return not self.side_effecting

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, remote_name={self.remote_name!r})"

    async def run(self, args: Mapping[str, Any], ctx: Any = None) -> Any:
        """Call the tool on the server with ``args`` (already validated by the Invoker; validated
        here when called directly) and return its value."""
        if not isinstance(args, FrozenDict):  # the Invoker hands validated, frozen arguments
            args = self._core.validate(args)
        result = await self.toolset._call(self.remote_name, _thaw(args), self.name)
        return self.value_of(result)

    def value_of(self, result: Any) -> Any:
        """The value of an MCP ``CallToolResult`` (``isError`` → ``ToolError``; structured
        content checked against the output schema → ``ToolShapeError``)."""
        if result.is_error:
            text = _content_value(result.content, text_only=True) or "the tool reported an error without a message"
            raise ToolError(str(text), code=_core.codes.TOOL_ERROR)
        structured = result.structured_content
        if self._output is not None:
            if structured is None:
                raise ToolShapeError(
                    self.name, self._output.expected, _content_value(result.content), ["no structuredContent in the result"]
                )
            return self._output.check(self.name, structured)
        if structured is not None:
            return structured
        return _content_value(result.content)


def _content_value(blocks: Sequence[Any], *, text_only: bool = False) -> Any:
    """Text → str (joined with newlines); with media: a list of str / ToolImage / ToolFile."""
    parts: list[Any] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        item: Any
        if kind == "text":
            item = block.text
        elif kind == "image":
            item = ToolImage(base64.b64decode(block.data), mime=block.mime_type)
        elif kind == "audio":
            item = ToolFile(base64.b64decode(block.data), mime=block.mime_type)
        elif kind == "resource":
            res = block.resource
            name = str(res.uri).rstrip("/").rsplit("/", 1)[-1] or None
            if getattr(res, "text", None) is not None:
                item = res.text
            else:
                item = ToolFile(base64.b64decode(res.blob), mime=res.mime_type or None, name=name)
        elif kind == "resource_link":
            item = f"[resource {block.name!r}: {block.uri}]"
        else:
            item = str(block)
        if text_only and not isinstance(item, str):
            item = str(item)
        if isinstance(item, str) and parts and isinstance(parts[-1], str):
            parts[-1] = parts[-1] + "\n" + item
        else:
            parts.append(item)
    if not parts:
        return ""
    if len(parts) == 1:
        return parts[0]
    return parts


class MCPToolset:
    """The tools of one MCP server; an async context manager owning the connection.

    ``server``: anything ``mcp.Client`` connects to: a URL string (streamable HTTP), a
    ``StdioServerParameters`` (a command run as a subprocess), an SDK ``Server``/``MCPServer``
    (in-process, for tests) or a transport. :meth:`stdio` and :meth:`http` build the first two.

    ``prefix``: prepended to every tool name (``"gh_"`` → ``gh_search``), for servers whose names
    collide. ``include``/``exclude``: the server's tool names (before the prefix) to keep / drop,
    or a predicate on the SDK's ``Tool`` entry. ``requires_approval``: True (every tool) or the
    server's names of tools that run only after approval. ``timeout_s``: each tool's deadline
    (None: the Invoker's default). ``on_change(tools)``: called after the list was refreshed
    because the server said it changed. ``client_options``: more keyword arguments of
    ``mcp.Client`` (``read_timeout_seconds``, ``mode``, callbacks...).

    A server name that providers do not accept (outside ``^[a-zA-Z0-9_-]{1,64}$`` once
    prefixed) has its other characters replaced by ``_``. A tool is left out, with a warning on
    the ``agentkit_tools.mcp_client`` logger and its reason in ``skipped`` (keyed by the server's
    name), while every other tool stays usable, when: its name cannot be made acceptable (empty,
    or longer than 64 characters with the prefix), its mapped name is one another tool already
    has (a name that needs no mapping keeps it), or its input schema cannot be compiled.
    Raises ``ToolDefinitionError`` for a ``timeout_s`` that is not None or a number of seconds
    in (0, 2592000].
    """

    def __init__(
        self,
        server: Any,
        *,
        prefix: str = "",
        include: Iterable[str] | Callable[[Any], bool] | None = None,
        exclude: Iterable[str] | Callable[[Any], bool] = (),
        requires_approval: bool | Iterable[str] = (),
        timeout_s: float | None = None,
        on_change: Callable[[list[MCPTool]], Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.prefix = prefix
        self.include = include if include is None or callable(include) else frozenset(include)
        self.exclude = exclude if callable(exclude) else frozenset(exclude)
        self.requires_approval = requires_approval if isinstance(requires_approval, bool) else frozenset(requires_approval)
        from .tools import check_tool_options

        check_tool_options("", timeout_s, owner="MCPToolset")
        self.timeout_s = timeout_s
        self.on_change = on_change
        self.client_options = dict(client_options or {})
        self.client: Any = None
        self.skipped: dict[str, str] = {}
        self._tools: dict[str, MCPTool] = {}
        self._registries: list[Any] = []
        self._stack: AsyncExitStack | None = None
        self._tg: Any = None
        self._loop: Any = None
        self._lock: Any = None
        self._http_headers: dict[str, str] = {}

    # ---------------------------------------------------------------- constructors

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        **options: Any,
    ) -> MCPToolset:
        """The tools of a server run as a subprocess speaking MCP on its stdin/stdout."""
        _require_mcp()
        from mcp.client.stdio import StdioServerParameters

        params = StdioServerParameters(command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd)
        return cls(params, **options)

    @classmethod
    def http(cls, url: str, *, headers: Mapping[str, str] | None = None, **options: Any) -> MCPToolset:
        """The tools of a server at a streamable HTTP ``url``; ``headers`` are sent with every
        request (an ``Authorization`` header, say)."""
        _require_mcp()
        toolset = cls(url, **options)
        toolset._http_headers = dict(headers or {})
        return toolset

    # ---------------------------------------------------------------- the session

    async def __aenter__(self) -> MCPToolset:
        Client = _require_mcp()
        import anyio

        import asyncio

        stack = AsyncExitStack()
        self._loop = asyncio.get_running_loop()
        self._lock = anyio.Lock()
        try:
            server = self.server
            if self._http_headers:  # a transport of our own (closed after the session), per connection
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                http = httpx2.AsyncClient(headers=self._http_headers, timeout=30.0)
                stack.push_async_callback(http.aclose)
                server = streamable_http_client(self.server, http_client=http)
            client = Client(server, message_handler=self._on_message, **self.client_options)
            self.client = await stack.enter_async_context(client)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            await self.refresh()
            await self._listen()
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: Any) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(*exc)
        self.client = None

    async def _listen(self) -> None:
        """On the 2026-07-28 protocol, change notifications come through ``subscriptions/listen``."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        caps = self.client.server_capabilities
        if self.client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (caps.tools and caps.tools.list_changed):
            return
        import anyio

        ready = anyio.Event()

        async def listen() -> None:
            try:
                async with self.client.listen(tools_list_changed=True) as sub:
                    ready.set()
                    async for _event in sub:
                        await self._changed()
            except Exception as exc:  # the server refused or dropped the stream: no live updates
                _log.warning("MCP tools/list_changed subscription ended: %s", exc)
            finally:
                ready.set()

        self._tg.start_soon(listen)
        await ready.wait()

    async def _on_message(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, types.ToolListChangedNotification) and self._tg is not None:
            # Not awaited here: the refresh needs the receive loop this handler runs on.
            self._tg.start_soon(self._changed)

    async def _changed(self) -> None:
        try:
            tools = await self.refresh(force=True)
        except Exception as exc:
            _log.warning("refreshing the tools of an MCP server after tools/list_changed failed: %s", exc)
            return
        if self.on_change is not None:
            outcome = self.on_change(tools)
            if hasattr(outcome, "__await__"):
                await outcome

    def _connected(self) -> Any:
        if self.client is None:
            raise RuntimeError("MCPToolset is not connected: use it as `async with MCPToolset(...) as tools:`")
        return self.client

    # ---------------------------------------------------------------- the tools

    def tools(self) -> list[MCPTool]:
        """The tools of the last listing, sorted by name."""
        return [self._tools[n] for n in sorted(self._tools)]

    def get(self, name: str) -> MCPTool:
        """The tool called ``name`` (with the prefix). Raises ``KeyError``."""
        return self._tools[name]

    def _kept(self, entry: Any) -> bool:
        inc, exc = self.include, self.exclude
        if inc is not None and not (inc(entry) if callable(inc) else entry.name in inc):
            return False
        return not (exc(entry) if callable(exc) else entry.name in exc)

    def _local_name(self, remote: str) -> str:
        name = self.prefix + remote
        if not _core.valid_tool_name(name):
            name = _core.sanitized_tool_name(name)
            if not _core.valid_tool_name(name):
                raise ValueError(
                    f"MCP tool {remote!r} cannot get a name model providers accept (1-64 characters of "
                    "a-z, A-Z, 0-9, '_', '-'): use a shorter prefix or exclude it"
                )
        return name

    async def refresh(self, *, force: bool = False) -> list[MCPTool]:
        """List the server's tools again (all pages), rebuild the cache and update every
        registry the toolset registered into. ``force``: bypass the client's response cache.
        Returns :meth:`tools`."""
        self._connected()
        async with self._lock:  # one listing at a time: back-to-back notifications queue up
            return await self._refresh(force)

    async def _refresh(self, force: bool) -> list[MCPTool]:
        client = self._connected()
        entries: list[Any] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="refresh" if force else "use")
            entries.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        approve_all = self.requires_approval is True
        tools: dict[str, MCPTool] = {}
        skipped: dict[str, str] = {}

        def skip(entry: Any, why: str) -> None:
            skipped[entry.name] = why
            _log.warning("MCP tool %r left out: %s", entry.name, why)

        # Local names: a name that is already acceptable claims it first, so a mapped name never
        # pushes out a tool that kept its own; a tool whose name cannot be mapped, or whose mapped
        # name is taken, is left out (the others stay usable).
        named: list[tuple[str, Any]] = []
        claimed: dict[str, Any] = {}
        kept = [e for e in entries if self._kept(e)]
        for exact_first in (True, False):
            for entry in kept:
                name = self.prefix + entry.name
                if _core.valid_tool_name(name) != exact_first:
                    continue
                try:
                    name = self._local_name(entry.name)
                except ValueError as exc:
                    skip(entry, str(exc))
                    continue
                if name in claimed:
                    skip(
                        entry,
                        f"its name becomes {name!r}, which MCP tool {claimed[name].name!r} already has: "
                        "exclude one of them or list the other with include=",
                    )
                    continue
                claimed[name] = entry
                named.append((name, entry))
        named.sort(key=lambda item: kept.index(item[1]))
        for name, entry in named:
            old = self._tools.get(name)
            if old is not None and old._entry == entry:
                tools[name] = old  # unchanged: keep the object (and its cached renderings)
                continue
            try:
                tools[name] = MCPTool(
                    self,
                    entry,
                    name,
                    requires_approval=approve_all or (not isinstance(self.requires_approval, bool) and entry.name in self.requires_approval),
                    timeout_s=self.timeout_s,
                )
            except Exception as exc:
                skip(entry, f"{type(exc).__name__}: {exc}")
        previous, self._tools, self.skipped = self._tools, tools, skipped
        for registry in self._registries:
            self._sync(registry, previous)
        return self.tools()

    def _sync(self, registry: Any, previous: Mapping[str, MCPTool]) -> None:
        for name, old in previous.items():
            if self._tools.get(name) is not old and name in registry and registry.get(name) is old:
                registry.unregister(name)
        for name, tool in self._tools.items():
            if name not in registry:
                registry.register(tool)

    def register(self, registry: Any, *, replace: bool = False) -> list[MCPTool]:
        """Register every tool in ``registry`` (a ``ToolRegistry``) and keep it updated when the
        server's list changes. Raises ``ValueError`` when a name is taken there (unless
        ``replace``). Returns the tools."""
        for tool in self.tools():
            registry.register(tool, replace=replace)
        if all(r is not registry for r in self._registries):
            self._registries.append(registry)
        return self.tools()

    def registry(self, **options: Any) -> Any:
        """A new ``ToolRegistry`` of these tools (``options`` go to ``ToolRegistry``), kept
        updated when the server's list changes."""
        from .registry import ToolRegistry

        reg = ToolRegistry(**options)
        self.register(reg)
        return reg

    async def _call(self, name: str, arguments: dict[str, Any], label: str | None = None) -> Any:
        """One ``tools/call`` round trip; the result is the SDK's ``CallToolResult``, not checked
        by the SDK (the output schema is checked by the tool, with this package's validator).
        Called from another event loop (``dispatch`` runs a tool on a private loop in a worker
        thread), the request is sent from the session's own loop, which must be running: a
        ``dispatch`` blocking that very loop's thread waits out the tool's deadline. ``label``: the
        tool's name as the model knows it (for messages)."""
        import asyncio

        label = label or name
        if self.client is None:
            raise ToolError(
                f"The MCP server of tool {label!r} is no longer connected (its session was closed). Do not "
                "retry; tell the user this tool is unavailable.",
                code="mcp_disconnected",
            )
        if asyncio.get_running_loop() is not self._loop:
            future = asyncio.run_coroutine_threadsafe(self._call(name, arguments, label), self._loop)
            return await asyncio.wrap_future(future)
        import mcp_types as types
        from mcp import MCPError

        client = self.client
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        try:
            return await client.session.send_request(request, types.CallToolResult)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                raise ConnectionError(f"the MCP server closed the connection during the call of {label!r}") from exc
            raise ToolError(
                f"The MCP server refused the call of {label!r}: {exc}. Check the arguments against the tool's "
                "description; if they are right, tell the user the tool is failing.",
                code="mcp_error",
            ) from exc
        except (OSError, EOFError) as exc:
            raise ConnectionError(f"the MCP server could not be reached for {label!r}: {exc}") from exc
