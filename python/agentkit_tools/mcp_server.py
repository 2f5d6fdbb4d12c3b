"""Serve a ``ToolRegistry`` over the Model Context Protocol, with the official ``mcp`` Python SDK
(an optional extra: ``pip install 'agentkit-tools[mcp]'``).

- ``tools/list`` returns the registry's MCP rendering (``registry.to_mcp()``): name,
  description, ``inputSchema``, ``outputSchema`` when the tool has an object output schema, and
  the ``readOnlyHint`` / ``destructiveHint`` / ``idempotentHint`` annotations from the tool's
  ``side_effecting`` / ``idempotent`` flags.
- ``tools/call`` runs through an :class:`~agentkit_tools.Invoker` (the default middleware chain
  unless one is given): a success is one text content block with ``render_result`` of the value
  (the tool's ``max_result_chars``, else the registry's, else 2000 characters) plus
  ``structuredContent`` (the value as JSON) when the tool has an output schema; every failure
  (unknown tool, invalid arguments, a tool error, a refusal of the middleware) is a result with
  ``isError: true`` whose text is the envelope's ``error.message``, so the model can correct
  itself (MCP reports tool errors inside the result, not as protocol errors). A success whose
  ``structuredContent`` would not match the advertised ``outputSchema`` (an instance of the
  declared class passes the tool's own check as it is) is answered as ``output_mismatch``:
  MCP clients refuse a result that breaks the schema.
- A tool with ``requires_approval=True`` runs when the server allows it (``approve=`` names it,
  or ``approver(tool, args, ctx)`` returns ``True``); without either, the server asks the user
  through the client when the client supports form elicitation, and otherwise refuses the call
  with a message telling the model that the server's host must allow the tool.

Entry points: :func:`build_server` (the low-level ``mcp.server.lowlevel.Server``),
:func:`serve_stdio` and :func:`serve_http` (streamable HTTP, on loopback by default); the CLI
``python -m agentkit_tools serve-mcp MODULE:OBJ [--http PORT]`` (``cli_mcp``) wraps them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Mapping

from . import _core
from .dispatch import render_result
from .media import DEFAULT_MAX_MEDIA_BYTES, mcp_content, media_limit
from .roundtrip import _media_parts, result_limit, tool_result_text

__all__ = ["build_server", "call_tool_result", "serve_stdio", "serve_http"]


def _require_mcp() -> Any:
    try:
        import mcp_types  # noqa: F401
        from mcp.server.lowlevel import Server
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "serving over MCP needs the official MCP SDK: pip install 'agentkit-tools[mcp]'"
        ) from exc
    return Server


def _as_registry(registry: Any) -> Any:
    if hasattr(registry, "_core") and hasattr(registry, "to_mcp"):
        return registry
    from .registry import ToolRegistry

    return ToolRegistry(registry)


def _jsonable(value: Any) -> Any:
    """A tool's structured value as JSON data: pydantic models, dataclasses, attrs classes and
    frozen containers become plain dicts and lists (pydantic's serializer; other values via
    ``str``)."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str)


def call_tool_result(
    envelope: Mapping[str, Any], *, max_chars: int, structured: bool, max_media_bytes: int | None = None
) -> Any:
    """An MCP ``CallToolResult`` (``mcp_types.CallToolResult``) from an Invoker envelope.

    ``{"ok": True, "value": v}`` → one ``TextContent`` with ``render_result(v, max_chars=...)``
    and, when ``structured`` (the tool declares an output schema), ``structuredContent`` = ``v``
    as JSON data (the text is then the rendering of that JSON). ``{"ok": False, "error": {...}}``
    → ``isError: true`` with one ``TextContent`` holding ``error["message"]``. A value holding
    images or files (``agentkit_tools.media``) → ``TextContent`` / ``ImageContent`` /
    ``AudioContent`` / ``EmbeddedResource`` blocks in order, items over ``max_media_bytes``
    (default ``media.DEFAULT_MAX_MEDIA_BYTES``) replaced by a notice.
    """
    import mcp_types as types

    parts = _media_parts(envelope, max_chars)
    if parts is not None:
        return types.CallToolResult(content=mcp_content(parts, max_media_bytes=max_media_bytes or DEFAULT_MAX_MEDIA_BYTES))

    if not envelope.get("ok"):
        return types.CallToolResult(
            content=[types.TextContent(text=tool_result_text(envelope, max_chars=max_chars))], is_error=True
        )
    if structured:
        data = _jsonable(envelope.get("value"))
        return types.CallToolResult(
            content=[types.TextContent(text=tool_result_text(envelope, max_chars=max_chars, value=data))],
            structured_content=data,
        )
    return types.CallToolResult(content=[types.TextContent(text=tool_result_text(envelope, max_chars=max_chars))])


def _conforming(envelope: Mapping[str, Any], tool_name: str, output_schema: Any, registry: Any) -> Mapping[str, Any]:
    """``envelope``, or the ``output_mismatch`` envelope when the value's JSON form (what
    ``structuredContent`` carries) does not match the output schema the tool advertises: MCP
    requires structured results to conform, and a client refuses one that does not, so the model
    would get no answer at all. An instance of the declared class passes the tool's own output
    check as it is, so its JSON can still break the schema (a dataclass field of the wrong type, a
    float that is not finite, which JSON cannot carry)."""
    from .errors import ToolShapeError

    problems = _output_validator(_core.canonical_args(output_schema)[0]).problems(_jsonable(envelope.get("value")))
    if not problems:
        return envelope
    check = getattr(registry.get(tool_name), "_output", None)
    expected = getattr(check, "expected", None) or str(output_schema.get("title") or "schema")
    shape = ToolShapeError(tool_name, expected, envelope.get("value"), problems)
    return _core.error_envelope(tool_name, shape)


@functools.lru_cache(maxsize=256)
def _output_validator(schema_json: str) -> Any:
    """The compiled validator of an output schema (its canonical JSON), compiled once."""
    import json

    return _core.SchemaValidator(json.loads(schema_json))


class _SessionScopes:
    """The default run contexts of :func:`build_server`, so repeat detection and idempotency
    (scoped by ``ctx.run_id``) follow the MCP session:

    - a handshake-era connection over streamable HTTP: one ``ToolContext`` per
      ``Mcp-Session-Id`` (the last ``max_sessions`` sessions are kept; an evicted session's
      Invoker state is forgotten);
    - a handshake-era connection over stdio: one ``ToolContext`` for the server (a stdio server
      serves one client);
    - the stateless protocol (2026-07-28 and later: every request stands alone): a fresh
      ``ToolContext`` per request, forgotten by the Invoker once the call is answered.
    """

    def __init__(self, invoker: Any, max_sessions: int = 1024) -> None:
        from collections import OrderedDict

        from .context import ToolContext

        self.invoker = invoker
        self.max_sessions = max_sessions
        self.new = ToolContext
        self.process = ToolContext()
        self.sessions: OrderedDict[str, Any] = OrderedDict()

    def enter(self, request_ctx: Any) -> tuple[Any, bool]:
        """``(ctx, ephemeral)`` for one request; an ephemeral context is forgotten after it."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if getattr(request_ctx, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS:
            return self.new(), True
        headers = getattr(getattr(request_ctx, "request", None), "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if not session_id:
            return self.process, False
        ctx = self.sessions.get(session_id)
        if ctx is None:
            ctx = self.sessions[session_id] = self.new(run_id=f"mcp-session-{session_id}")
            while len(self.sessions) > self.max_sessions:
                _, old = self.sessions.popitem(last=False)
                self.invoker.forget(old.run_id)
        self.sessions.move_to_end(session_id)
        return ctx, False


class _GivenContext:
    """The ``context=`` function of :func:`build_server`, with the interface of
    ``_SessionScopes`` (its contexts are the host's, never forgotten by the server)."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self.make = make

    def enter(self, request_ctx: Any) -> tuple[Any, bool]:
        return self.make(request_ctx), False


def build_server(
    registry: Any,
    *,
    invoker: Any = None,
    name: str = "agentkit-tools",
    version: str | None = None,
    instructions: str | None = None,
    context: Callable[[Any], Any] | None = None,
    approver: Callable[..., Any] | None = None,
    approve: Iterable[str] = (),
) -> Any:
    """A low-level MCP ``Server`` (``mcp.server.lowlevel.Server``) exposing ``registry``.

    ``registry``: a ``ToolRegistry`` (or an iterable of tools, turned into one). ``invoker``: the
    ``Invoker`` that runs ``tools/call`` (default ``Invoker(registry)``, the default middleware
    chain). ``name``/``version``: the
    server's ``serverInfo`` (``version`` defaults to this package's version). ``context``: maps
    the SDK's request context (``mcp.server.context.ServerRequestContext``) to the ``ctx``
    passed to the Invoker; the default scopes repeat detection and idempotency to the MCP
    session: one ``ToolContext`` per ``Mcp-Session-Id`` over HTTP, one per server over stdio,
    and a fresh one per request on the stateless 2026-07-28 protocol, which has no session.

    Approval of a tool with ``requires_approval=True`` (its arguments valid): allowed when
    ``approve`` names the tool, else ``approver(tool, args, ctx)`` decides when given (sync or
    async; only ``True`` allows; ``args`` the validated arguments, ``ctx`` the run context), else
    the user is asked through the client with a form elicitation (``elicitation/create`` on
    handshake-era sessions; an ``InputRequiredResult`` on the 2026-07-28 protocol) when the
    client declared the capability. An allowed call reaches the invoker marked ``"approved":
    True``; a refused one reaches it unmarked (so the invoker's ``approval`` middleware may still
    allow it) and, refused there too, is answered with a message saying why it was not run and
    what would allow it: the user declined, or the client cannot ask and the host must allow the
    tool (``serve-mcp --approve NAME`` or ``approver=``).

    ``tools/list`` is the registry's MCP rendering, read on every request (tools registered
    later are listed). Raises ``ImportError`` without the ``mcp`` SDK.
    """
    Server = _require_mcp()
    import mcp_types as types

    from . import __version__
    from .invoker import Invoker

    reg = _as_registry(registry)
    inv = invoker if invoker is not None else Invoker(reg)
    scopes: Any = _SessionScopes(inv) if context is None else _GivenContext(context)
    gate = _ApprovalGate(approver, approve)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[types.Tool.model_validate(entry) for entry in reg.to_mcp()])

    async def call_tool(ctx: Any, params: Any) -> Any:
        tool_name = params.name
        call: dict[str, Any] = {"name": tool_name, "input": dict(params.arguments or {})}
        request_id = getattr(ctx, "request_id", None)
        if request_id is not None:
            call["id"] = f"mcp-{request_id}"
        run_ctx, ephemeral = scopes.enter(ctx)
        try:
            tool = reg.get(tool_name) if tool_name in reg else None
            refusal = None
            if tool is not None and getattr(tool, "requires_approval", False):
                decision = await gate.decide(tool, call["input"], ctx, params, run_ctx)
                if isinstance(decision, types.InputRequiredResult):
                    return decision
                if decision is True:
                    call["approved"] = True
                else:
                    refusal = decision
            envelope = await inv.invoke(call, run_ctx)
            if refusal and not envelope.get("ok") and envelope.get("error", {}).get("code") == _core.codes.APPROVAL_REQUIRED:
                envelope = {**envelope, "error": {**envelope["error"], "message": refusal}}
        finally:
            if ephemeral:
                inv.forget(run_ctx.run_id)
        output_schema = _mcp_entry(reg, tool_name).get("outputSchema")
        structured = output_schema is not None
        if structured and envelope.get("ok") and _media_parts(envelope, 0) is None:
            envelope = _conforming(envelope, tool_name, output_schema, reg)
        return call_tool_result(
            envelope,
            max_chars=result_limit(reg, tool_name),
            structured=structured,
            max_media_bytes=media_limit(reg, tool_name),
        )

    def input_schema(tool_name: str) -> Mapping[str, Any] | None:
        return _mcp_entry(reg, tool_name).get("inputSchema")

    return Server(
        name,
        version=__version__ if version is None else version,
        instructions=instructions,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


#: The key of the approval question in an ``InputRequiredResult`` (2026-07-28 protocol).
APPROVAL_INPUT = "agentkit_tools.approval"

_APPROVAL_FORM = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Allow this call",
            "description": "Run the tool with the arguments shown.",
            "default": False,
        }
    },
    "required": ["approve"],
}


class _ApprovalGate:
    """The server's approval decision for one call of a tool that requires approval.

    ``decide`` returns ``True`` (allowed), an ``InputRequiredResult`` (ask the user first, on the
    2026-07-28 protocol) or the message the model reads when the call is refused."""

    def __init__(self, approver: Callable[..., Any] | None, approve: Iterable[str]) -> None:
        if isinstance(approve, str):
            raise TypeError("approve= takes tool names (a list or tuple), not one string")
        self.approver = approver
        self.approve = frozenset(approve)

    async def decide(self, tool: Any, arguments: Any, request_ctx: Any, params: Any, run_ctx: Any) -> Any:
        import inspect

        import mcp_types as types

        name = tool.name
        if name in self.approve:
            return True
        try:
            from .tools import core_of

            args = core_of(tool).validate(arguments)
        except Exception:
            return None  # invalid arguments: the invoker answers them; nobody is asked
        if self.approver is not None:
            try:
                answer = self.approver(tool, args, run_ctx)
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception:
                import logging

                logging.getLogger("agentkit_tools.mcp_server").exception("approver failed: %s is refused", name)
                answer = False
            if answer is True:
                return True
            return (
                f"{name} was not allowed by the server's approval policy, so it was not run. Tell the "
                "user; calling it again with the same arguments will be refused again."
            )
        if not _can_elicit(request_ctx):
            return _host_must_allow(name, "this MCP client cannot ask the user (it does not support elicitation)")
        message = f"Allow the tool {name} to run with these arguments? {_core.canonical_args(args)[0]}"
        modern = getattr(request_ctx, "protocol_version", None) in _modern_versions()
        if modern:
            responses = getattr(params, "input_responses", None) or {}
            answer = responses.get(APPROVAL_INPUT)
            if answer is None:
                form = types.ElicitRequestFormParams(message=message, requested_schema=_APPROVAL_FORM)
                return types.InputRequiredResult(input_requests={APPROVAL_INPUT: types.ElicitRequest(params=form)})
        else:
            try:
                answer = await request_ctx.session.elicit_form(
                    message, _APPROVAL_FORM, related_request_id=getattr(request_ctx, "request_id", None)
                )
            except Exception as exc:
                return _host_must_allow(name, f"asking the user through the MCP client failed ({exc})")
        action = getattr(answer, "action", None)
        content = getattr(answer, "content", None) or {}
        if action == "accept" and content.get("approve") is True:
            return True
        if action == "cancel":
            return (
                f"The user dismissed the request to allow {name}, so it was not run. Call it again only "
                "if the user asks for it."
            )
        return (
            f"The user did not allow {name} with these arguments, so it was not run. Do not call it "
            "again unless the user asks for it."
        )


def _host_must_allow(name: str, why: str) -> str:
    return (
        f"{name} needs the user's approval and {why}, so it was not run. Calling it again will not "
        f"help: tell the user that the host of this MCP server must allow {name} (for example by "
        f"starting it with --approve {name})."
    )


def _modern_versions() -> tuple[str, ...]:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return tuple(MODERN_PROTOCOL_VERSIONS)


def _can_elicit(request_ctx: Any) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` counts as form,
    as the MCP specification says)."""
    session = getattr(request_ctx, "session", None)
    capabilities = getattr(session, "client_capabilities", None)
    elicitation = getattr(capabilities, "elicitation", None)
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _mcp_entry(registry: Any, name: str) -> dict[str, Any]:
    """The MCP rendering of the tool called ``name`` ({} when absent or without a schema)."""
    from .providers import render

    tool = registry.get(name) if name in registry else None
    if tool is None or getattr(tool, "schema", None) is None:
        return {}
    return render(tool, "mcp")


async def serve_stdio(registry: Any, **options: Any) -> None:
    """Serve ``registry`` over stdio (the process's stdin/stdout) until the client closes the
    stream. ``options`` go to :func:`build_server`."""
    _require_mcp()
    from mcp.server.stdio import stdio_server

    server = build_server(registry, **options)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(
    registry: Any,
    port: int,
    *,
    host: str = "127.0.0.1",
    path: str = "/mcp",
    on_ready: Callable[[int], None] | None = None,
    **options: Any,
) -> None:
    """Serve ``registry`` over MCP streamable HTTP at ``http://{host}:{port}{path}`` until
    cancelled (uvicorn). ``host`` defaults to loopback; the SDK's DNS-rebinding protection is on
    for loopback hosts. ``port=0`` picks a free port; ``on_ready(port)`` is called with the bound
    port once the server accepts connections. ``options`` go to :func:`build_server`."""
    _require_mcp()
    import uvicorn

    server = build_server(registry, **options)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    if on_ready is None:
        await http.serve()
        return

    import asyncio

    task = asyncio.ensure_future(http.serve())
    try:
        while not http.started:
            if task.done():
                await task  # it failed to start: raise its error
                return
            await asyncio.sleep(0.01)
        sockets = [s for srv in getattr(http, "servers", []) for s in srv.sockets]
        on_ready(sockets[0].getsockname()[1] if sockets else port)
        await task
    finally:
        if not task.done():
            http.should_exit = True
            await task
