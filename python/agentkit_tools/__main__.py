"""The command line: ``agentkit-tools COMMAND ...`` (the same as ``python -m agentkit_tools``).

Commands: ``demo``, ``schema``, ``call``, ``replay`` and ``serve-mcp``; ``agentkit-tools COMMAND
--help`` shows a command's options and an example. A mistake in the command line (a target that
cannot be loaded, a trace that cannot be read) is one ``error:`` line on stderr and exit status 2,
never a traceback. The user guide is docs/cli.md in the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
Turn Python functions into validated tools for language models: print what a provider is sent,
call a tool, replay a trace of tool calls, or serve tools over MCP. "python -m agentkit_tools"
is the same command."""

EPILOG = """\
examples:
  agentkit-tools demo
  agentkit-tools schema agentkit_tools.demo:registry --format openai-strict
  agentkit-tools call agentkit_tools.demo:registry '{"sku": "SKU-2001"}' --tool check_stock
  agentkit-tools replay tests/data/demo_trace.jsonl --tools agentkit_tools.demo:registry
  agentkit-tools serve-mcp ./mytools.py:registry --approve refund

Run "agentkit-tools COMMAND --help" for a command's options."""


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main

    return main()


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The ``argparse`` parser of the command line (each command's ``func`` default runs it)."""
    from . import __version__, cli_mcp, cli_run, cli_schema
    from .cli_target import paragraph

    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog=prog or "agentkit-tools", description=DESCRIPTION, epilog=EPILOG, formatter_class=raw
    )
    parser.add_argument("--version", action="version", version=f"agentkit-tools {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", required=True)
    sub.add_parser(
        "demo",
        help="run the inventory demo: tools, a scripted model turn, every failure the model can meet",
        description=paragraph(
            "Run the inventory demo: tools defined from plain functions, a scripted model that asks "
            "for two calls in one turn, and every failure the model can meet with the exact message "
            "it receives."
        ),
        epilog="example:\n  agentkit-tools demo",
        formatter_class=raw,
    ).set_defaults(func=_cmd_demo)
    cli_schema.add_parser(sub)
    cli_run.add_parsers(sub)
    cli_mcp.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status:
    0 success, 1 the command ran and reports a failure (a failed call, a replay that differs),
    2 a mistake in the command line (one ``error:`` line on stderr)."""
    from .cli_target import CliError

    _escape_what_cannot_be_encoded()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # anything else: still one line, never a traceback
        print(f"error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
    return 2


def _escape_what_cannot_be_encoded() -> None:
    """Let stdout and stderr write what their encoding cannot (a lone surrogate in a tool's
    result, a character a legacy code page lacks) as a backslash escape: printing a successful
    call's envelope must not end in a UnicodeEncodeError and the exit status of a usage error."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - a stream that cannot change
                pass


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":
    raise SystemExit(main())
