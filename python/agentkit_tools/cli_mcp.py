"""``python -m agentkit_tools serve-mcp MODULE:OBJ [--http PORT] [--host HOST] [--name NAME]``
(SPEC §9): serve tools over the Model Context Protocol with ``agentkit_tools.mcp_server``.

``MODULE:OBJ`` names what ``schema`` accepts: a ``ToolRegistry``, a tool, a function, a list of
them or an object's public methods. Without ``--http`` the server speaks MCP over stdio (what an
MCP host launches as a subprocess); with ``--http PORT`` it serves streamable HTTP at
``http://HOST:PORT/mcp`` (``HOST`` defaults to 127.0.0.1; ``PORT`` 0 picks a free port) and
prints ``serving MCP on <url>`` to stderr once it accepts connections.

Exit status: 0 the client closed the session (stdio) or the server was stopped; 1 the object
cannot be turned into tools or the ``mcp`` SDK is missing; 2 bad ``MODULE:OBJ``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "run", "registry_of"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve-mcp`` subcommand to an ``argparse`` subparsers object; returns its parser
    (``run`` is set as its ``func`` default)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve-mcp",
        help="serve tools over MCP (stdio, or streamable HTTP with --http PORT)",
        description="Serve a ToolRegistry (or a tool, a function, a list of them, an object's public "
        "methods) over the Model Context Protocol: stdio by default, streamable HTTP on loopback "
        "with --http PORT.",
    )
    p.add_argument("target", metavar="MODULE:OBJ", help="e.g. myapp.tools:registry (OBJ may be dotted)")
    p.add_argument(
        "--http", type=int, metavar="PORT", default=None, help="serve streamable HTTP on PORT (0: a free port)"
    )
    p.add_argument("--host", default="127.0.0.1", help="the address --http binds to (default: 127.0.0.1)")
    p.add_argument("--name", default="agentkit-tools", help="the server name reported to clients")
    p.set_defaults(func=run)
    return p


def registry_of(obj: Any) -> Any:
    """A ``ToolRegistry`` for ``obj``: the registry itself, or a new one holding the tools
    ``cli_schema.tools_of(obj)`` finds (bare ``ToolSchema`` objects, which cannot run, are
    skipped). Raises ``TypeError`` and ``ToolDefinitionError`` as ``tools_of`` does."""
    from .cli_schema import tools_of
    from .registry import ToolRegistry
    from .schema import ToolSchema

    if isinstance(obj, ToolRegistry):
        return obj
    tools, _ = tools_of(obj)
    return ToolRegistry([t for t in tools if not isinstance(t, ToolSchema)])


def run(args: argparse.Namespace) -> int:
    """Serve ``args.target`` until the client disconnects (stdio) or the process is stopped
    (HTTP); returns the exit status."""
    from .cli_schema import load

    try:
        obj = load(args.target)
    except (ValueError, ImportError, AttributeError) as exc:
        print(f"error: cannot load {args.target}: {exc}", file=sys.stderr)
        return 2
    try:
        registry = registry_of(obj)
        from . import mcp_server

        mcp_server._require_mcp()
    except Exception as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    import anyio

    if args.http is None:
        anyio.run(lambda: mcp_server.serve_stdio(registry, name=args.name))
        return 0

    def ready(port: int) -> None:
        print(f"serving MCP on http://{args.host}:{port}/mcp", file=sys.stderr, flush=True)

    anyio.run(lambda: mcp_server.serve_http(registry, args.http, host=args.host, on_ready=ready, name=args.name))
    return 0

