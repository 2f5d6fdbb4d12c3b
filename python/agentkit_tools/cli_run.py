"""The ``call`` and ``replay`` commands: run tool calls from the command line.

``call TARGET JSON [--tool NAME] [--approve NAME]``: dispatch one call and print its envelope
(JSON, indent 2). Exit status 0 the call succeeded, 1 it failed (the envelope says why), 2 a
mistake in the command line.

``replay TRACE.jsonl --tools TARGET``: dispatch the calls of a trace again, one per line (a tool
call, or ``{"call": ..., "envelope": ...}`` to compare with the envelope recorded then), and
print one line per call, the keys that differ under it, and a summary line. Side-effecting calls
are not run unless ``--run-side-effects`` or ``--approve NAME``; ``--dry-run`` runs nothing.
Exit status 0 every line was replayed and agrees with what was recorded, 1 a recorded envelope
differs or a line was skipped, 2 the trace or the target cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Iterator

from . import _core

__all__ = ["add_parsers", "run_call", "run_replay", "differences"]

CALL_EXAMPLE = """\
examples:
  agentkit-tools call agentkit_tools.demo:registry '{"sku": "SKU-2001"}' --tool check_stock
  agentkit-tools call ./mytools.py:refund '{"order_id": "A-7", "cents": 500}' --approve refund

exit status: 0 the call succeeded, 1 it failed (see the envelope), 2 a usage error."""

REPLAY_EXAMPLE = """\
examples:
  agentkit-tools replay tests/data/demo_trace.jsonl --tools agentkit_tools.demo:registry
  agentkit-tools replay calls.jsonl --tools ./mytools.py:registry --dry-run

A trace line is a tool call ({"id": ..., "name": ..., "input": {...}}, or the OpenAI shapes), or
{"call": {...}, "envelope": {...}} to compare the new envelope with the recorded one. Timing
(elapsed_ms) is never compared.

exit status: 0 all lines replayed and none differs, 1 an envelope differs or a line was skipped,
2 the trace or the target cannot be read."""

APPROVE_HELP = (
    "allow the tool NAME to run although it is side-effecting or requires approval; repeat for "
    "several tools"
)

# Keys of an envelope that change from run to run and are never compared.
_UNCOMPARED = frozenset({"elapsed_ms"})


def add_parsers(subparsers: Any) -> None:
    """Add the ``call`` and ``replay`` commands to an ``argparse`` subparsers object."""
    from .cli_target import TARGET_HELP, add_approve_option, paragraph

    raw = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "call",
        help="dispatch one tool call and print its envelope",
        description=paragraph(
            "Dispatch one tool call and print the envelope the model would get (JSON). A tool "
            "that requires approval runs only with --approve NAME."
        ),
        epilog=CALL_EXAMPLE,
        formatter_class=raw,
    )
    p.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    p.add_argument("arguments", metavar="JSON", help="the call's arguments as a JSON object")
    p.add_argument("--tool", metavar="NAME", help="which tool to call when the target holds several")
    add_approve_option(p)
    p.set_defaults(func=run_call)

    p = subparsers.add_parser(
        "replay",
        help="dispatch the tool calls of a JSONL trace again and compare",
        description=paragraph(
            "Dispatch the tool calls of a JSONL trace again, show where an envelope differs "
            "from the recorded one, key by key, and end with a summary line. Side-effecting calls are "
            "not run unless --run-side-effects or --approve NAME says so."
        ),
        epilog=REPLAY_EXAMPLE,
        formatter_class=raw,
    )
    p.add_argument("trace", metavar="TRACE.jsonl", help="the trace: one JSON object per line")
    p.add_argument("--tools", required=True, metavar="TARGET", help="the tools to run the calls on (a TARGET, as for call)")
    p.add_argument("--dry-run", action="store_true", help="check every call and show what would run; run nothing")
    p.add_argument(
        "--run-side-effects",
        action="store_true",
        help="run side-effecting calls too (tools that require approval still need --approve NAME)",
    )
    add_approve_option(p, APPROVE_HELP)
    p.set_defaults(func=run_replay)


def _approval(names: list[str]) -> dict[str, Callable[[Any, Any, Any], bool]]:
    """The ``approver=`` of ``dispatch`` allowing the tools named by ``--approve`` (none: no
    approver, so every tool that requires approval is refused)."""
    if not names:
        return {}
    allowed = frozenset(names)
    return {"approver": lambda tool, args, ctx: getattr(tool, "name", None) in allowed}


def _check_names(registry: Any, names: list[str]) -> None:
    from .cli_target import CliError

    unknown = [n for n in names if n not in registry]
    if unknown:
        raise CliError(
            f"--approve {unknown[0]}: no such tool (the tools are: {', '.join(registry.names())})"
        )


def run_call(args: argparse.Namespace) -> int:
    """Dispatch one call of ``args.target`` and print its envelope; returns the exit status."""
    from .cli_target import CliError, load, registry_of
    from .dispatch import dispatch

    registry = registry_of(load(args.target))
    if not len(registry):
        raise CliError(f"{args.target} holds no tool that can run")
    _check_names(registry, args.approve)
    name = args.tool or (registry.names()[0] if len(registry) == 1 else None)
    if name is None:
        raise CliError(f"the target has several tools; pick one with --tool ({', '.join(registry.names())})")
    envelope = dispatch({"id": "cli", "name": name, "input": args.arguments}, registry, **_approval(args.approve))
    print(json.dumps(envelope, indent=2, default=str, ensure_ascii=False))
    return 0 if envelope.get("ok") else 1


# ---------------------------------------------------------------- replay


def _plain(value: Any) -> Any:
    """``value`` as JSON data (what a trace file holds)."""
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def _show(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MISSING = object()


def differences(recorded: Any, now: Any) -> list[str]:
    """The keys where two envelopes disagree, as lines ``path: recorded X, now Y`` (values as
    JSON; ``nothing`` for a key that is absent on one side). ``elapsed_ms`` is never compared.
    Both envelopes are compared as JSON data (a tuple equals a list)."""
    rec = {k: v for k, v in _plain(recorded).items() if k not in _UNCOMPARED}
    cur = {k: v for k, v in _plain(now).items() if k not in _UNCOMPARED}
    return [
        f"{path or '(envelope)'}: recorded {_absent_or(a)}, now {_absent_or(b)}" for path, a, b in _walk("", rec, cur)
    ]


def _absent_or(value: Any) -> str:
    return "nothing" if value is _MISSING else _show(value)


def _walk(path: str, a: Any, b: Any) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            yield from _walk(f"{path}.{key}" if path else str(key), a.get(key, _MISSING), b.get(key, _MISSING))
    elif isinstance(a, list) and isinstance(b, list) and a != b:
        for i in range(max(len(a), len(b))):
            yield from _walk(
                f"{path}[{i}]", a[i] if i < len(a) else _MISSING, b[i] if i < len(b) else _MISSING
            )
    elif a != b or type(a) is not type(b):
        yield path, a, b


def _call_of(entry: Any) -> tuple[dict[str, Any] | None, Any, str | None]:
    """``(call, recorded_envelope, problem)`` of one parsed trace line."""
    if not isinstance(entry, dict):
        return None, None, f"expected a JSON object, got {type(entry).__name__}"
    if "call" in entry:
        call, recorded = entry["call"], entry.get("envelope")
        if recorded is not None and not isinstance(recorded, dict):
            return None, None, '"envelope" must be an object (the envelope recorded for the call)'
    else:
        call, recorded = entry, None
    if not isinstance(call, dict):
        return None, None, '"call" must be a tool call object'
    if _core.call_parts(call)[1] is None:
        return None, None, 'a tool call needs a "name" (or "function": {"name": ...})'
    return call, recorded, None


def run_replay(args: argparse.Namespace) -> int:
    """Replay ``args.trace`` on ``args.tools``; returns the exit status."""
    from .cli_target import CliError, load, registry_of
    from .dispatch import dispatch
    from .middleware import call_is_read_only

    registry = registry_of(load(args.tools))
    _check_names(registry, args.approve)
    try:
        with open(args.trace, encoding="utf-8") as fh:
            lines = [(n, line) for n, line in enumerate(fh, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {args.trace}: {exc}") from None
    approved = set(args.approve)
    approval = _approval(args.approve)
    counts = dict.fromkeys(("replayed", "ok", "failed", "same", "differ", "not_run", "skipped", "would_run"), 0)
    for n, line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            counts["skipped"] += 1
            print(f"{n}: skipped: not JSON ({exc})")
            continue
        call, recorded, problem = _call_of(entry)
        if call is None:
            counts["skipped"] += 1
            print(f"{n}: skipped: {problem}")
            continue
        try:
            ok, tool, kwargs, _ = registry._core.prepare(call)
        except Exception as exc:
            ok, tool, kwargs = False, None, None
            counts["skipped"] += 1
            print(f"{n}: skipped: {exc}")
            continue
        name = tool.name if ok else _name_of(call)
        held = ""
        if ok and not call_is_read_only(tool, kwargs) and not (args.run_side_effects or name in approved):
            held = f"side-effecting; pass --run-side-effects or --approve {name} to run it"
        elif ok and getattr(tool, "requires_approval", False) and name not in approved:
            held = f"requires approval; pass --approve {name} to run it"
        if args.dry_run:
            if not ok:
                print(f"{n}: {name} -> would fail: {_outcome(tool)}")
            elif held:
                counts["not_run"] += 1
                print(f"{n}: {name} {_show(_plain(kwargs), 120)} -> would not run ({held})")
            else:
                counts["would_run"] += 1
                print(f"{n}: {name} {_show(_plain(kwargs), 120)} -> would run")
            continue
        if held:
            counts["not_run"] += 1
            print(f"{n}: {name} -> not run ({held})")
            continue
        envelope = dispatch(call, registry, **approval)
        counts["replayed"] += 1
        counts["ok" if envelope.get("ok") else "failed"] += 1
        verdict, diff = "", []
        if recorded is not None:
            diff = differences(recorded, envelope)
            counts["differ" if diff else "same"] += 1
            verdict = "  [DIFFERS from recorded]" if diff else "  [same as recorded]"
        print(f"{n}: {name} -> {_outcome(envelope)}{verdict}")
        for d in diff:
            print(f"    {d}")
    total = _count(len(lines), "line")
    if args.dry_run:
        fail = len(lines) - counts["would_run"] - counts["not_run"] - counts["skipped"]
        print(
            f"dry run: {total}: {counts['would_run']} would run, {counts['not_run']} would not run, "
            f"{fail} would fail at once, {counts['skipped']} skipped"
        )
        return 1 if counts["skipped"] else 0
    differ = "differs" if counts["differ"] == 1 else "differ"
    print(
        f"{total}: {counts['replayed']} replayed ({counts['ok']} ok, {counts['failed']} failed), "
        f"{counts['same']} same as recorded, {counts['differ']} {differ}, {counts['not_run']} not run, "
        f"{counts['skipped']} skipped"
    )
    return 1 if counts["differ"] or counts["skipped"] else 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _name_of(call: dict[str, Any]) -> str:
    return _core.call_parts(call)[1] or ""


def _outcome(envelope: Any) -> str:
    if envelope.get("ok"):
        return "ok (deduplicated)" if envelope.get("deduplicated") else "ok"
    error = envelope.get("error") or {}
    return f"{error.get('code')}: {error.get('message')}"
