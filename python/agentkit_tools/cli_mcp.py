"""The ``serve-mcp`` command: serve a target's tools over the Model Context Protocol with
``agentkit_tools.mcp_server`` (needs the ``mcp`` extra).

Without ``--http`` the server speaks MCP over stdio (what an MCP host launches as a subprocess);
with ``--http PORT`` it serves streamable HTTP at ``http://HOST:PORT/mcp`` (``HOST`` defaults to
127.0.0.1; ``PORT`` 0 picks a free port) and prints ``serving MCP on <url>`` to stderr once it
accepts connections. ``--approve NAME`` (repeatable) allows a tool that requires approval; any
other such tool is put to the user through the client when it supports elicitation, and refused
otherwise.

Exit status: 0 the client closed the session (stdio) or the server was stopped; 2 the target
cannot be loaded, stands for no tool, or the ``mcp`` SDK is missing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "run"]

EXAMPLE = """\
examples:
  agentkit-tools serve-mcp agentkit_tools.demo:registry
  agentkit-tools serve-mcp ./mytools.py:registry --http 8765 --approve refund

Over stdio it prints nothing and waits for a client on stdin (an MCP host starts it). A tool
that requires approval runs when --approve names it; otherwise the server asks the user through
the client (MCP elicitation) when the client can, and refuses the call when it cannot."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve-mcp`` command to an ``argparse`` subparsers object; returns its parser
    (``run`` is set as its ``func`` default)."""
    from .cli_target import TARGET_HELP, add_approve_option, paragraph

    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve-mcp",
        help="serve tools over MCP (stdio, or streamable HTTP with --http PORT)",
        description=paragraph(
            "Serve the target's tools over the Model Context Protocol: over stdio by "
            "default, over streamable HTTP on loopback with --http PORT."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    p.add_argument(
        "--http", type=int, metavar="PORT", default=None, help="serve streamable HTTP on PORT (0: a free port)"
    )
    p.add_argument("--host", default="127.0.0.1", help="the address --http binds to (default: 127.0.0.1)")
    p.add_argument("--name", default="agentkit-tools", help="the server name reported to clients")
    add_approve_option(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Serve ``args.target`` until the client disconnects (stdio) or the process is stopped
    (HTTP); returns the exit status. Raises ``CliError`` for a target that cannot be served."""
    from .cli_target import CliError, load, registry_of

    registry = registry_of(load(args.target))
    unknown = [n for n in args.approve if n not in registry]
    if unknown:
        raise CliError(f"--approve {unknown[0]}: no such tool (the tools are: {', '.join(registry.names())})")
    from . import mcp_server

    try:
        mcp_server._require_mcp()
    except ImportError as exc:
        raise CliError(str(exc)) from None
    import anyio

    options: dict[str, Any] = {"name": args.name}
    if args.approve:
        options["approve"] = tuple(args.approve)
    if args.http is None:
        anyio.run(lambda: mcp_server.serve_stdio(registry, **options))
        return 0

    def ready(port: int) -> None:
        print(f"serving MCP on http://{args.host}:{port}/mcp", file=sys.stderr, flush=True)

    anyio.run(lambda: mcp_server.serve_http(registry, args.http, host=args.host, on_ready=ready, **options))
    return 0
