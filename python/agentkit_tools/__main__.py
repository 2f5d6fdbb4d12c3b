"""The command line: ``python -m agentkit_tools <command>``.

Commands: ``demo`` (the inventory scenario), ``schema MODULE:OBJ [--format ...]`` (print a
provider rendering), ``serve-mcp MODULE:OBJ`` (serve over MCP), ``call MODULE:OBJ JSON``
(dispatch one call), ``replay TRACE.jsonl --tools MODULE:OBJ`` (dispatch recorded calls again).
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


def _same(recorded: dict, fresh: dict) -> bool:
    """Envelopes agree when they match apart from timing."""
    strip = lambda e: {k: v for k, v in e.items() if k != "elapsed_ms"}  # noqa: E731
    return json.loads(json.dumps(strip(recorded), default=str)) == json.loads(json.dumps(strip(fresh), default=str))


def _cmd_replay(args: argparse.Namespace) -> int:
    """Dispatch every call of a JSONL trace again. A line is a tool call, or ``{"call": {...},
    "envelope": {...}}`` to also compare with the envelope recorded then. Exit status 1 when a
    recorded envelope differs, 2 for an unreadable trace or target."""
    from . import dispatch
    from .cli_mcp import registry_of
    from .cli_schema import load

    try:
        registry = registry_of(load(args.tools))
    except (ValueError, ImportError, AttributeError) as exc:
        print(f"error: cannot load {args.tools}: {exc}", file=sys.stderr)
        return 2
    counts = {"calls": 0, "ok": 0, "failed": 0, "differ": 0}
    try:
        with open(args.trace, encoding="utf-8") as fh:
            lines = [(n, line) for n, line in enumerate(fh, 1) if line.strip()]
    except OSError as exc:
        print(f"error: cannot read {args.trace}: {exc}", file=sys.stderr)
        return 2
    for n, line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            print(f"error: {args.trace}:{n} is not JSON ({exc}); one tool call per line", file=sys.stderr)
            return 2
        call = entry.get("call", entry) if isinstance(entry, dict) else entry
        envelope = dispatch(call, registry)
        counts["calls"] += 1
        counts["ok" if envelope["ok"] else "failed"] += 1
        name = call.get("name") or call.get("function", {}).get("name") if isinstance(call, dict) else None
        outcome = "ok" if envelope["ok"] else f"{envelope['error']['code']}: {envelope['error']['message']}"
        verdict = ""
        if isinstance(entry, dict) and isinstance(entry.get("envelope"), dict):
            same = _same(entry["envelope"], envelope)
            counts["differ"] += not same
            verdict = "  [same as recorded]" if same else "  [DIFFERS from recorded]"
        print(f"{n}: {name} -> {outcome}{verdict}")
    print(f"{counts['calls']} calls: {counts['ok']} ok, {counts['failed']} failed, {counts['differ']} differ from the trace")
    return 1 if counts["differ"] else 0


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
    p = sub.add_parser("replay", help="dispatch the tool calls of a JSONL trace again and compare")
    p.add_argument("trace", help="a JSONL file: one tool call per line, or {\"call\": ..., \"envelope\": ...}")
    p.add_argument("--tools", required=True, metavar="MODULE:OBJ", help="the registry (or tools) to run them on")
    p.set_defaults(func=_cmd_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
