"""The ``schema`` command: print the provider rendering of a target's tools as JSON (indent 2).

What a rendering had to weaken (a schema the provider cannot express) goes to stderr as
``warning:`` lines. Exit status: 0 printed; 2 the target cannot be loaded or stands for no tool.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser", "run", "FORMATS"]

FORMATS = ("anthropic", "openai", "openai-strict", "openai-responses", "openai-responses-strict", "gemini", "mcp")

EXAMPLE = """\
examples:
  agentkit-tools schema agentkit_tools.demo:registry --format openai-strict
  agentkit-tools schema ./mytools.py:search"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``schema`` command to an ``argparse`` subparsers object; returns its parser
    (``run`` is set as its ``func`` default)."""
    from .cli_target import TARGET_HELP, paragraph

    p: argparse.ArgumentParser = subparsers.add_parser(
        "schema",
        help="print the provider rendering (JSON) of tools",
        description=paragraph(
            "Print what a model provider is sent for the target's tools (JSON). A tool the "
            "provider cannot describe exactly gets a warning on stderr."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    p.add_argument(
        "--format", choices=FORMATS, default="anthropic", help="the provider's rendering (default: anthropic)"
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Print the rendering of ``args.target`` in ``args.format``; returns the exit status.
    Raises ``CliError`` for a target that cannot be loaded or stands for no tool."""
    from .cli_target import load, tools_of
    from .providers import findings, render, render_schema
    from .schema import ToolSchema

    tools, single = tools_of(load(args.target))
    rendered = []
    for t in tools:
        if isinstance(t, ToolSchema):
            rendered.append(render_schema(t, args.format))
        elif getattr(t, "schema", None) is not None:
            rendered.append(render(t, args.format))
            for f in findings(t, (args.format,)):
                print(f"warning: {t.name} [{f.path}]: {f.message}", file=sys.stderr)
    out = rendered[0] if single and rendered else rendered
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0
