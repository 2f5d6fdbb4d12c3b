"""The command line: ``python -m agentkit_tools <command>``.

Commands: ``demo`` (the inventory scenario), ``schema MODULE:OBJ [--format ...]`` (print a
provider rendering), ``call MODULE:OBJ JSON`` (dispatch one call).
"""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main

    return main()


def _cmd_call(args: argparse.Namespace) -> int:
    from . import dispatch
    from .cli_mcp import registry_of
    from .cli_schema import load

    try:
        obj = load(args.target)
    except (ValueError, ImportError, AttributeError) as exc:
        print(f"error: cannot load {args.target}: {exc}", file=sys.stderr)
        return 2
    registry = registry_of(obj)
    name = args.tool or (registry.names()[0] if len(registry) == 1 else None)
    if name is None:
        print(f"error: the target has several tools; pick one with --tool ({', '.join(registry.names())})", file=sys.stderr)
        return 2
    envelope = dispatch({"id": "cli", "name": name, "input": args.arguments}, registry)
    print(json.dumps(envelope, indent=2, default=str, ensure_ascii=False))
    return 0 if envelope["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agentkit_tools", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the inventory demo: schema, a scripted happy path, the failure ladder")
    p.set_defaults(func=_cmd_demo)
    from . import cli_schema

    cli_schema.add_parser(sub)
    from . import cli_mcp

    cli_mcp.add_parser(sub)
    p = sub.add_parser("call", help="dispatch one tool call and print its envelope")
    p.add_argument("target", help="MODULE:OBJ naming a tool, a function, a registry or a list of them")
    p.add_argument("arguments", help="the call's arguments as JSON text, e.g. '{\"sku\": \"SKU-1\"}'")
    p.add_argument("--tool", help="the tool's name when the target holds several")
    p.set_defaults(func=_cmd_call)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
