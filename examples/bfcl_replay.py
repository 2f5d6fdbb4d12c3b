"""Real third-party input: the Berkeley Function Calling Leaderboard's multi-turn APIs.

The ``bfcl-eval`` package (``pip install --no-deps bfcl-eval==2026.3.23``; its API classes need
only ``mpmath`` besides the standard library) ships eight executable API classes with
Google-style docstrings, hand-written JSON function docs for the same methods, and ground-truth
call sequences. Nobody here wrote any of it. This script

1. registers every public method of each class with ``FunctionTool.from_callable(bound_method)``
   into one ``ToolRegistry`` per instance, reporting each definition failure with its reason;
2. compares every generated schema with BFCL's own doc (parameter names, required sets, types,
   defaults, descriptions) and prints a table per class with the mismatches listed;
3. replays every ground-truth call of ``BFCL_v4_multi_turn_base.json`` through
   ``agentkit_tools.dispatch`` and compares each result with calling the method directly on a
   second, identically initialised instance; a call our validator rejects is classified as a
   violation of the function's own type hints or as a bug of ours.

Run: ``python examples/bfcl_replay.py``. The functions are importable (``tests/test_bfcl.py``).
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import os
import types
import typing
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from agentkit_tools import FunctionTool, ToolRegistry, dispatch

#: The multi-turn API classes, in BFCL's order, with their modules and JSON doc files
#: (``bfcl_eval.constants.executable_backend_config``).
CLASS_NAMES: tuple[str, ...] = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)

#: The ground-truth test category replayed.
CATEGORY = "BFCL_v4_multi_turn_base"


def _bfcl() -> Any:
    import bfcl_eval.constants.executable_backend_config as config

    return config


def data_dir() -> str:
    """The ``bfcl_eval/data`` directory of the installed package."""
    import bfcl_eval

    return os.path.join(os.path.dirname(bfcl_eval.__file__), "data")


def api_class(class_name: str) -> type:
    """The BFCL API class called ``class_name`` (one of ``CLASS_NAMES``)."""
    module = importlib.import_module(_bfcl().CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)  # type: ignore[no-any-return]


def new_instance(class_name: str, initial_config: dict[str, Any] | None = None) -> Any:
    """A fresh instance loaded the way BFCL's ``execute_multi_turn_func_call`` loads it: the
    class's own ``_load_scenario`` on a deep copy of its part of ``initial_config`` (stateless
    classes, i.e. ``MathAPI``, are not loaded)."""
    instance = api_class(class_name)()
    if class_name not in _bfcl().STATELESS_CLASSES:
        config = (initial_config or {}).get(class_name, {})
        instance._load_scenario(copy.deepcopy(config), long_context=False)
    return instance


def public_methods(instance: Any) -> list[tuple[str, Callable[..., Any]]]:
    """The bound public methods of ``instance``, sorted by name: BFCL's own rule
    (``inspect.getmembers(instance, inspect.ismethod)`` without names starting with ``_``)."""
    return [(n, m) for n, m in inspect.getmembers(instance, predicate=inspect.ismethod) if not n.startswith("_")]


@dataclass(frozen=True)
class DefinitionFailure:
    """A method ``from_callable`` refused: the class, the method and the error text."""

    class_name: str
    method: str
    reason: str


def build_registry(instance: Any) -> tuple[ToolRegistry, list[DefinitionFailure]]:
    """One ``ToolRegistry`` of every public method of ``instance`` (each through
    ``FunctionTool.from_callable(bound_method)`` with our rules unchanged), and the methods it
    refused with the reason."""
    registry = ToolRegistry()
    failures = []
    for name, method in public_methods(instance):
        try:
            registry.register(FunctionTool.from_callable(method))
        except Exception as exc:
            failures.append(DefinitionFailure(type(instance).__name__, name, f"{type(exc).__name__}: {exc}"))
    return registry, failures


# ----------------------------------------------------------------------------- schema fidelity


def bfcl_docs(class_name: str) -> dict[str, dict[str, Any]]:
    """BFCL's hand-written function docs of a class (``multi_turn_func_doc/*.json``), by name."""
    path = os.path.join(data_dir(), "multi_turn_func_doc", _bfcl().MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name])
    with open(path, encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh if line.strip()]
    return {d["name"]: d for d in docs}


#: BFCL's type words → JSON Schema's (``dict`` is ``object``, ``float`` is ``number``,
#: ``tuple`` is an array, ``any`` is ``{}``).
_BFCL_TO_JSON = {"dict": "object", "float": "number", "tuple": "array", "any": "any"}


def doc_type(fragment: dict[str, Any]) -> str:
    """A BFCL doc property's type in JSON Schema words, with the item type of arrays
    (``"array<number>"``)."""
    t = fragment.get("type", "any")
    t = _BFCL_TO_JSON.get(t, t)
    if t == "array" and "items" in fragment:
        return f"array<{doc_type(fragment['items'])}>"
    return str(t)


def schema_type(fragment: Any) -> str:
    """Our schema fragment's type in the same words as ``doc_type``. BFCL's format has no null:
    an ``anyOf`` of one type and ``null`` (an ``Optional`` hint) counts as that type; ``{}`` is
    ``any``; other unions are spelled ``a|b``."""
    if not isinstance(fragment, typing.Mapping) or not fragment:
        return "any"
    if "anyOf" in fragment:
        branches = [b for b in fragment["anyOf"] if dict(b) != {"type": "null"}]
        return "|".join(schema_type(b) for b in branches)
    t = fragment.get("type")
    if t is None:
        return "any"
    if t == "array":
        items = fragment.get("items")
        if isinstance(items, typing.Mapping) and items:
            return f"array<{schema_type(items)}>"
        if "prefixItems" in fragment:
            return "array<" + ",".join(schema_type(p) for p in fragment["prefixItems"]) + ">"
        return "array"
    return str(t)


def _plain(value: Any) -> Any:
    # FrozenDict/FrozenList → dict/list for json.dumps.
    return dict(value) if isinstance(value, typing.Mapping) else list(value)


def _doc_default(fragment: dict[str, Any]) -> Any:
    # BFCL writes a None default as the string "None".
    value = fragment.get("default")
    return None if value == "None" else value


def _ws(text: str) -> str:
    return " ".join(text.split())


def _our_summary(description: str) -> str:
    # Our description ends with a "Returns: ..." paragraph when the docstring has that section;
    # BFCL keeps the return value in a separate "response" object.
    return description.split("\n\nReturns: ")[0]


def _bfcl_summary(description: str) -> str:
    # "<what the API is>. Tool description: <the method's summary>".
    return description.split("Tool description: ", 1)[-1]


@dataclass
class Fidelity:
    """Schema fidelity of one class: counts of tools whose aspect equals BFCL's doc, and every
    mismatch as ``(tool, aspect, ours, bfcl)``."""

    class_name: str
    tools: int = 0
    documented: int = 0
    names: int = 0
    required: int = 0
    types: int = 0
    defaults: int = 0
    tool_descriptions: int = 0
    param_descriptions: int = 0
    mismatches: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: Parameters our schema lets be null (an ``Optional`` hint); BFCL's format cannot say so.
    nullable: list[str] = field(default_factory=list)

    COLUMNS: typing.ClassVar[tuple[str, ...]] = (
        "tools",
        "documented",
        "names",
        "required",
        "types",
        "defaults",
        "tool_descriptions",
        "param_descriptions",
    )

    def counts(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in self.COLUMNS}


def fidelity(class_name: str, registry: ToolRegistry) -> Fidelity:
    """Compare each tool of ``registry`` with BFCL's doc of the same name.

    Per tool: ``names`` (the same parameter names), ``required`` (the same required set),
    ``types`` (every common parameter's type, in ``doc_type`` words; the keys BFCL's doc names
    inside a dict our hint leaves open are listed as a mismatch but not counted), ``defaults`` (every common
    parameter's default; BFCL's ``"None"`` is null), ``tool_descriptions`` (our text before the
    ``Returns:`` paragraph against BFCL's text after ``Tool description:``, whitespace runs
    collapsed), ``param_descriptions`` (every common parameter's text, whitespace collapsed).
    """
    docs = bfcl_docs(class_name)
    report = Fidelity(class_name)
    for t in registry.tools():
        report.tools += 1
        doc = docs.get(t.name)
        if doc is None:
            report.mismatches.append((t.name, "undocumented", t.name, "-"))
            continue
        report.documented += 1
        ours = t.schema.parameters
        props = dict(ours.get("properties", {}))
        theirs = doc["parameters"].get("properties", {})
        checks = {}
        checks["names"] = set(props) == set(theirs)
        if not checks["names"]:
            report.mismatches.append((t.name, "names", str(sorted(props)), str(sorted(theirs))))
        ours_req, their_req = sorted(ours.get("required", [])), sorted(doc["parameters"].get("required", []))
        checks["required"] = ours_req == their_req
        if ours_req != their_req:
            report.mismatches.append((t.name, "required", str(ours_req), str(their_req)))
        common = [p for p in props if p in theirs]
        checks["types"] = checks["defaults"] = checks["param_descriptions"] = True
        for p in common:
            if any(dict(b) == {"type": "null"} for b in props[p].get("anyOf", ())):
                report.nullable.append(f"{t.name}.{p}")
            a, b = schema_type(props[p]), doc_type(theirs[p])
            if a != b:
                checks["types"] = False
                report.mismatches.append((f"{t.name}.{p}", "type", a, b))
            if "properties" in theirs[p] and "properties" not in props[p]:
                # Informational (not counted): BFCL's doc names the keys of a dict that the
                # hint leaves open (``Dict[str, ...]``), taken from the docstring's prose.
                report.mismatches.append(
                    (f"{t.name}.{p}", "keys named by BFCL only", json.dumps(props[p], default=_plain), str(sorted(theirs[p]["properties"])))
                )
            da = json.dumps(props[p]["default"]) if "default" in props[p] else "<none>"
            db = json.dumps(_doc_default(theirs[p])) if "default" in theirs[p] else "<none>"
            if da != db:
                checks["defaults"] = False
                report.mismatches.append((f"{t.name}.{p}", "default", da, db))
            ta, tb = _ws(props[p].get("description", "")), _ws(theirs[p].get("description", ""))
            if ta != tb:
                checks["param_descriptions"] = False
                # BFCL's docstrings mark optional parameters "[Optional] "; its JSON docs drop it.
                aspect = "description: [Optional] marker" if ta == f"[Optional] {tb}" else "description"
                report.mismatches.append((f"{t.name}.{p}", aspect, ta, tb))
        sa, sb = _ws(_our_summary(t.description)), _ws(_bfcl_summary(doc["description"]))
        checks["tool_descriptions"] = sa == sb
        if sa != sb:
            report.mismatches.append((t.name, "tool description", sa, sb))
        for key, ok in checks.items():
            setattr(report, key, getattr(report, key) + bool(ok))
    return report


# ----------------------------------------------------------------------------- replay


def load_entries() -> list[tuple[dict[str, Any], list[list[str]]]]:
    """Every entry of the category with its ground truth (a list of turns, each a list of call
    strings), in file order."""
    root = data_dir()
    with open(os.path.join(root, f"{CATEGORY}.json"), encoding="utf-8") as fh:
        entries = [json.loads(line) for line in fh if line.strip()]
    with open(os.path.join(root, "possible_answer", f"{CATEGORY}.json"), encoding="utf-8") as fh:
        answers = {a["id"]: a["ground_truth"] for a in (json.loads(line) for line in fh if line.strip())}
    return [(e, answers[e["id"]]) for e in entries]


def parse_call(source: str, methods: dict[str, Callable[..., Any]]) -> tuple[str, dict[str, Any]]:
    """``"f(1, b='x')"`` → ``("f", {"a": 1, "b": "x"})``: arguments are Python literals
    (``ast.literal_eval``), positional ones named by the method's signature. Raises
    ``ValueError`` for a call that is not ``name(literals...)`` or does not bind."""
    node = ast.parse(source.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {source!r}")
    name = node.func.id
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    method = methods.get(name)
    if method is None:
        if args:
            raise ValueError(f"positional arguments for unknown function {name!r}")
        return name, kwargs
    try:
        bound = inspect.signature(method).bind(*args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"{source!r} does not bind to {name}{inspect.signature(method)}: {exc}") from None
    return name, dict(bound.arguments)


def hint_allows(value: Any, hint: Any) -> bool:
    """Whether ``value`` is an instance of the type hint ``hint`` as a type checker reads it
    (PEP 484: an ``int`` is acceptable for ``float``; ``bool`` is an ``int``). Covers the hints the
    BFCL classes use: builtins, ``Any``, ``Optional``/``Union``, ``List``, ``Dict``, ``Tuple``,
    ``Literal``."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(hint_allows(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin in (list, set, frozenset):
        if not isinstance(value, origin):
            return False
        return not args or all(hint_allows(v, args[0]) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            return False
        return not args or all(hint_allows(k, args[0]) and hint_allows(v, args[1]) for k, v in value.items())
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return not args or all(hint_allows(v, args[0]) for v in value)
        return len(args) == len(value) and all(hint_allows(v, a) for v, a in zip(value, args))
    if hint is float:
        return isinstance(value, (int, float))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


@dataclass(frozen=True)
class Outcome:
    """One replayed ground-truth call: where it is, what was sent, and how it went.

    ``kind``: ``identical`` (same result, or the same exception, both ways), ``mismatch``
    (both ran, results differ), ``rejected_hint`` (our validator refused a call that breaks the
    method's own type hints), ``rejected_rule`` (a boolean for an ``int``/``float`` hint: a type
    checker allows it, SPEC §4 refuses it on purpose), ``rejected_bug`` (refused although it
    respects the hints: a bug of ours), ``unparsed`` (the call string does not bind to the method).
    """

    entry_id: str
    turn: int
    source: str
    kind: str
    detail: str = ""


def _direct(method: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    try:
        return True, method(**copy.deepcopy(kwargs))
    except Exception as exc:  # the envelope turns it into internal_error / a ToolError code
        return False, f"{type(exc).__name__}: {exc}"


def _hint_violations(method: Callable[..., Any], kwargs: dict[str, Any]) -> list[str]:
    hints = typing.get_type_hints(method)
    return [
        f"{name}={value!r} breaks the hint {_hint_text(hints[name])}"
        for name, value in kwargs.items()
        if name in hints and not hint_allows(value, hints[name])
    ]


def _bools_for_numbers(method: Callable[..., Any], kwargs: dict[str, Any]) -> list[str]:
    # A type checker accepts True for an int/float hint; SPEC §4 deliberately does not.
    hints = typing.get_type_hints(method)
    return [
        f"{name}={value!r} for the hint {_hint_text(hints[name])} (SPEC §4: a boolean is not a number)"
        for name, value in kwargs.items()
        if isinstance(value, bool) and hints.get(name) in (int, float)
    ]


def _hint_text(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def replay_entry(entry: dict[str, Any], turns: list[list[str]], input_form: str = "json") -> Iterator[Outcome]:
    """Replay one entry: fresh instances of its ``involved_classes`` loaded with its
    ``initial_config`` on both sides (one behind registries and ``dispatch``, one called
    directly), then every ground-truth call in order, state carried across turns as in BFCL.

    ``input_form``: ``"json"`` sends the arguments as the JSON text a provider returns (the
    validator's fast path); ``"mapping"`` sends the parsed Python values as they are.

    When our side rejects a call, the call is still applied to our instance directly so both
    sides keep the same state for the calls that follow (the rejection itself is the outcome).
    """
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import _compare_instances

    ours, direct, methods = {}, {}, {}
    registries: dict[str, ToolRegistry] = {}
    for class_name in entry["involved_classes"]:
        ours[class_name] = new_instance(class_name, entry["initial_config"])
        direct[class_name] = new_instance(class_name, entry["initial_config"])
        registry, _ = build_registry(ours[class_name])
        for name in registry.names():
            registries[name] = registry
        for name, method in public_methods(direct[class_name]):
            methods[name] = method
    for turn_index, turn in enumerate(turns):
        for source in turn:
            try:
                name, kwargs = parse_call(source, methods)
            except (ValueError, SyntaxError) as exc:
                yield Outcome(entry["id"], turn_index, source, "unparsed", str(exc))
                continue
            if name not in methods:
                yield Outcome(entry["id"], turn_index, source, "unparsed", f"no method {name!r} in {entry['involved_classes']}")
                continue
            arguments = json.dumps(kwargs) if input_form == "json" else copy.deepcopy(kwargs)
            call = {"id": f"{entry['id']}-{turn_index}", "name": name, "input": arguments}
            envelope = dispatch(call, registries[name])
            expected_ok, expected = _direct(methods[name], kwargs)
            if not envelope["ok"] and envelope["error"]["code"] == "invalid_arguments":
                registries[name].get(name).func(**copy.deepcopy(kwargs))  # keep both sides in step
                reasons = "; ".join(f"{e['path']}: {e['reason']}" for e in envelope["error"].get("errors", []))
                violations = _hint_violations(methods[name], kwargs)
                bools = _bools_for_numbers(methods[name], kwargs)
                kind = "rejected_hint" if violations else "rejected_rule" if bools else "rejected_bug"
                explained = violations or bools
                detail = f"{'; '.join(explained)} (rejected: {reasons})" if explained else f"rejected: {reasons}"
                yield Outcome(entry["id"], turn_index, source, kind, detail)
                continue
            yield _compare(entry["id"], turn_index, source, envelope, expected_ok, expected)
    for class_name in entry["involved_classes"]:
        same, differences = _compare_instances(ours[class_name], direct[class_name])
        if not same:
            yield Outcome(entry["id"], len(turns), f"<final state of {class_name}>", "mismatch", repr(differences))


def _same(a: Any, b: Any) -> bool:
    # Equal, and equal in repr too (1 == 1.0 == True, but a float where the method gave an int
    # is a difference); a repr that cannot be built (an int of over 4300 digits) falls back to
    # the types.
    if a != b:
        return False
    try:
        return repr(a) == repr(b)
    except ValueError:
        return type(a) is type(b)


def _compare(entry_id: str, turn: int, source: str, envelope: dict[str, Any], expected_ok: bool, expected: Any) -> Outcome:
    if envelope["ok"] and expected_ok:
        if _same(envelope["value"], expected):
            return Outcome(entry_id, turn, source, "identical")
        return Outcome(entry_id, turn, source, "mismatch", f"dispatch {envelope['value']!r} != direct {expected!r}")
    if not envelope["ok"] and not expected_ok:
        error = envelope["error"]
        if error.get("code") == "internal_error" and expected in error.get("message", ""):
            return Outcome(entry_id, turn, source, "identical", f"both raised: {expected}")
        return Outcome(entry_id, turn, source, "mismatch", f"dispatch {error!r} vs direct raised {expected}")
    got = envelope["value"] if envelope["ok"] else envelope["error"]
    return Outcome(entry_id, turn, source, "mismatch", f"dispatch {got!r} vs direct {'returned' if expected_ok else 'raised'} {expected!r}")


def replay_all(input_form: str = "json") -> list[Outcome]:
    """Replay every entry of the category (see ``replay_entry``)."""
    outcomes: list[Outcome] = []
    for entry, turns in load_entries():
        outcomes.extend(replay_entry(entry, turns, input_form))
    return outcomes


# ----------------------------------------------------------------------------- report


def definition_report() -> tuple[dict[str, int], list[DefinitionFailure], dict[str, Fidelity]]:
    """Tools registered per class, every definition failure, and the fidelity of each class."""
    registered, failures, fidelities = {}, [], {}
    for class_name in CLASS_NAMES:
        registry, failed = build_registry(api_class(class_name)())
        registered[class_name] = len(registry)
        failures.extend(failed)
        fidelities[class_name] = fidelity(class_name, registry)
    return registered, failures, fidelities


def main() -> None:
    registered, failures, fidelities = definition_report()
    print(f"BFCL multi-turn API classes: {sum(registered.values())} tools registered, {len(failures)} refused")
    for f in failures:
        print(f"  refused {f.class_name}.{f.method}: {f.reason}")

    print("\nSchema fidelity against BFCL's multi_turn_func_doc (tools whose aspect equals BFCL's):")
    header = ["class", *Fidelity.COLUMNS]
    rows = [[name, *map(str, fid.counts().values())] for name, fid in fidelities.items()]
    totals = Counter()
    for fid in fidelities.values():
        totals.update(fid.counts())
    rows.append(["TOTAL", *(str(totals[c]) for c in Fidelity.COLUMNS)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
    nullable = [f"{name}.{p}" for name, fid in fidelities.items() for p in fid.nullable]
    print(f"\n  Optional parameters (null allowed by us; BFCL's doc format has no null), {len(nullable)}:")
    print("    " + ", ".join(nullable))
    for name, fid in fidelities.items():
        if fid.mismatches:
            print(f"\n  {name} mismatches ({len(fid.mismatches)}):")
            for where, aspect, ours, theirs in fid.mismatches:
                print(f"    {where} [{aspect}]\n      ours: {ours}\n      bfcl: {theirs}")

    outcomes = replay_all()
    calls = [o for o in outcomes if not o.source.startswith("<final state")]
    kinds = Counter(o.kind for o in calls)
    entries = len({o.entry_id for o in outcomes})
    print(f"\nReplay of {CATEGORY}: {entries} entries, {len(calls)} ground-truth calls")
    for kind in ("identical", "mismatch", "rejected_hint", "rejected_rule", "rejected_bug", "unparsed"):
        print(f"  {kind}: {kinds[kind]}")
    states = [o for o in outcomes if o.source.startswith("<final state")]
    print(f"  final-state mismatches: {len(states)}")
    for o in outcomes:
        if o.kind != "identical":
            print(f"  [{o.kind}] {o.entry_id} turn {o.turn}: {o.source}\n      {o.detail}")


if __name__ == "__main__":
    main()
