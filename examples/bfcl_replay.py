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
   violation of the function's own type hints or as a bug of ours. The replay runs again with the
   arguments a model following the ``openai-strict`` rendering sends (``null`` for every argument
   left out, mapped back by ``from_strict_arguments``); its target is 100% identical results for
   the calls that respect the hints (``replay_summary``);
4. renders every tool for every provider of ``agentkit_tools.providers.PROVIDERS`` and counts, per
   provider, the tools rendered without loss, listing each loss with the tool, the schema path,
   what was lost and lint's ``weakened_rendering`` message for it, if any. BFCL's
   ``"[Optional] "`` description marker is counted per rendering and left as written (our
   docstring parser has no special case for one project's convention).

**Without loss.** A provider rendering of a tool is without loss when all of these hold:

- its tool name and description equal ``ToolSchema.name`` and ``ToolSchema.description``,
  character for character;
- the parameters schema it shows the model (``input_schema``, ``parameters``, ``inputSchema``;
  a Gemini declaration without ``parameters`` counts as ``{"type": "object", "properties": {}}``)
  equals our input schema after the provider's documented mechanical rewrites and nothing else
  (``lossless_parameters``), compared as JSON (``1`` is not ``1.0``, key order ignored,
  ``required`` as a set). The rewrites keep every constraint and every word:

  - ``openai-strict``, ``openai-responses-strict`` (OpenAI Structured Outputs): in each object
    with listed properties, ``required`` lists every property, and each property that was not
    required is made nullable (``"type": [T, "null"]``, or a ``{"type": "null"}`` branch) since
    ``null`` then means "not given" (``from_strict_arguments`` undoes it); a ``null`` default is
    dropped (as openai-python's ``to_strict_json_schema`` does);
  - ``gemini`` (the Gemini API's ``Schema``, an OpenAPI 3.0 subset): an ``anyOf`` with a
    ``{"type": "null"}`` branch becomes ``nullable: true`` (a lone other branch merged in), an
    empty ``required`` is left out;
  - ``anthropic``, ``openai``, ``openai-responses``, ``mcp``: none (our schema as it is);
- a strict rendering says ``"strict": true``.

Anything else is a loss, whether or not lint reports it: a dropped keyword (a closed object's
``additionalProperties: false`` included: the validator still refuses unknown arguments at call
time, but the model is not told), a type or constraint moved into the description's words, a
strict rendering that falls back to ``"strict": false``. MCP ``annotations`` and
``outputSchema`` are not part of the measure.

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

from agentkit_tools import FunctionTool, ToolRegistry, dispatch, lint
from agentkit_tools.providers import PROVIDERS, from_strict_arguments, render

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
    checker allows it, our validator refuses it on purpose: a boolean is not a number), ``rejected_bug`` (refused although it
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
    # A type checker accepts True for an int/float hint; our validator deliberately does not.
    hints = typing.get_type_hints(method)
    return [
        f"{name}={value!r} for the hint {_hint_text(hints[name])} (a boolean is not a number)"
        for name, value in kwargs.items()
        if isinstance(value, bool) and hints.get(name) in (int, float)
    ]


def _hint_text(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def strict_arguments(tool: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments a model following ``tool``'s ``openai-strict`` rendering sends for the call
    ``kwargs``: strict mode makes every parameter required, with ``null`` for "not given", so each
    parameter the call leaves out is sent as ``None`` (top level only: no BFCL parameter is an
    object with listed properties). A tool rendered with ``"strict": false`` is shown its plain
    schema, so its ``kwargs`` are sent as they are."""
    if not render(tool, "openai-strict")["function"]["strict"]:
        return dict(kwargs)
    return {**dict.fromkeys(tool.schema.parameters.get("properties", {})), **kwargs}


def replay_entry(entry: dict[str, Any], turns: list[list[str]], input_form: str = "json") -> Iterator[Outcome]:
    """Replay one entry: fresh instances of its ``involved_classes`` loaded with its
    ``initial_config`` on both sides (one behind registries and ``dispatch``, one called
    directly), then every ground-truth call in order, state carried across turns as in BFCL.

    ``input_form``: ``"json"`` sends the arguments as the JSON text a provider returns (the
    validator's fast path); ``"mapping"`` sends the parsed Python values as they are;
    ``"openai-strict"`` sends what a model following the tool's ``openai-strict`` rendering sends
    (``strict_arguments``: ``null`` for every argument the call leaves out) after
    ``agentkit_tools.providers.from_strict_arguments``, as JSON text, so the replay checks that
    strict mode's rewrite of optional parameters loses nothing.

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
            if input_form == "openai-strict":
                tool = registries[name].get(name)
                arguments: Any = json.dumps(from_strict_arguments(tool, strict_arguments(tool, kwargs)))
            else:
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


def replay_summary(outcomes: list[Outcome]) -> dict[str, int]:
    """``calls`` (ground-truth calls replayed), ``respecting_hints`` (those neither rejected for
    breaking the method's own type hints, a violation ``hint_allows`` confirms, nor unparsed) and
    ``identical`` (same result both ways): the replay's target is ``identical ==
    respecting_hints``."""
    calls = [o for o in outcomes if not o.source.startswith("<final state")]
    kinds = Counter(o.kind for o in calls)
    return {
        "calls": len(calls),
        "respecting_hints": len(calls) - kinds["rejected_hint"] - kinds["unparsed"],
        "identical": kinds["identical"],
    }


def replay_all(input_form: str = "json") -> list[Outcome]:
    """Replay every entry of the category (see ``replay_entry``)."""
    outcomes: list[Outcome] = []
    for entry, turns in load_entries():
        outcomes.extend(replay_entry(entry, turns, input_form))
    return outcomes


# ----------------------------------------------------------------------------- rendering fidelity

#: The provider renderings the report covers (``agentkit_tools.providers.PROVIDERS``, in order).
RENDERINGS: tuple[str, ...] = PROVIDERS

#: The renderings that promise OpenAI Structured Outputs (``"strict": true``).
STRICT_RENDERINGS: tuple[str, ...] = ("openai-strict", "openai-responses-strict")

#: What BFCL's docstrings put before an optional parameter's text. Our docstring parser keeps it as
#: part of the description (no special case for one project's convention); the report counts it.
OPTIONAL_PREFIX = "[Optional] "


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


#: A key one side of a comparison does not have.
ABSENT: Any = _Absent()


def _to_json(value: Any) -> Any:
    # FrozenDict/FrozenList (our schemas) → plain dicts and lists.
    return json.loads(json.dumps(value, default=_plain))


def _canon(value: Any) -> str:
    # JSON equality: 1 != 1.0 != true (Python's == says they are equal), key order ignored.
    return json.dumps(value, sort_keys=True)


def rendered_parts(provider: str, rendering: dict[str, Any]) -> tuple[str, str, Any, bool | None]:
    """``(name, description, parameters, strict)`` of one rendering: ``parameters`` is the schema
    the model is shown (``None`` when the rendering has none: a Gemini declaration of a function
    without parameters), ``strict`` the OpenAI ``strict`` flag (``None`` where the rendering has no
    such flag). Raises ``ValueError`` for a provider not in ``RENDERINGS``."""
    if provider == "anthropic":
        return rendering["name"], rendering["description"], rendering["input_schema"], None
    if provider == "mcp":
        return rendering["name"], rendering["description"], rendering["inputSchema"], None
    if provider == "gemini":
        return rendering["name"], rendering["description"], rendering.get("parameters"), None
    if provider in ("openai", "openai-strict"):
        f = rendering["function"]
        return f["name"], f["description"], f["parameters"], f.get("strict")
    if provider in ("openai-responses", "openai-responses-strict"):
        return rendering["name"], rendering["description"], rendering["parameters"], rendering.get("strict")
    raise ValueError(f"unknown provider {provider!r}")


def _admits_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return schema is True
    t = schema.get("type")
    return (
        t == "null"
        or (isinstance(t, list) and "null" in t)
        or any(_admits_null(b) for b in schema.get("anyOf", ()))
        or None in schema.get("enum", ())
    )


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    # OpenAI's documented form of an optional field: `"type": [T, "null"]`, or a null branch.
    if _admits_null(schema):
        return schema
    if "anyOf" in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    if isinstance(schema.get("type"), str):
        out = {**schema, "type": [schema["type"], "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    inner = {k: v for k, v in schema.items() if k != "description"}
    out = {"anyOf": [inner, {"type": "null"}]}
    if "description" in schema:
        out["description"] = schema["description"]
    return out


def strict_form(schema: Any) -> Any:
    """``schema`` after OpenAI strict mode's mechanical rewrites only: in every object with listed
    properties, ``required`` lists every property and each property that was not required is made
    nullable (``null`` then means "not given", undone by ``from_strict_arguments``); a ``default``
    of ``null`` is dropped (openai-python's ``to_strict_json_schema`` does the same: "no
    meaningful distinction" once the field is nullable). ``additionalProperties`` is left as it is:
    closing an open object changes which calls are valid, so it is a loss, not a rewrite."""
    if not isinstance(schema, dict):
        return schema
    s = {k: v for k, v in schema.items() if not (k == "default" and v is None)}
    if isinstance(s.get("items"), dict):
        s["items"] = strict_form(s["items"])
    if "anyOf" in s:
        s["anyOf"] = [strict_form(b) for b in s["anyOf"]]
    if isinstance(s.get("properties"), dict):
        required = set(s.get("required", ()))
        s["properties"] = {
            n: strict_form(p) if n in required else _nullable(strict_form(p)) for n, p in s["properties"].items()
        }
        s["required"] = list(s["properties"])
    return s


def gemini_form(schema: Any) -> Any:
    """``schema`` after Gemini's mechanical rewrites only: an ``anyOf`` with a ``{"type":
    "null"}`` branch becomes ``nullable: true`` (and the lone other branch is merged in, the outer
    description leading), an empty ``required`` is left out. ``additionalProperties`` is kept:
    Gemini's ``Schema`` (OpenAPI 3.0 subset) has no such field, so a closed object shown without
    it is a loss, not a rewrite."""
    if not isinstance(schema, dict):
        return schema
    s = dict(schema)
    if "anyOf" in s:
        branches = [b for b in s.pop("anyOf") if b != {"type": "null"}]
        nullable = len(branches) < len(schema["anyOf"])
        branches = [gemini_form(b) for b in branches]
        if len(branches) == 1 and isinstance(branches[0], dict):
            s = {**branches[0], **s}
        elif branches:
            s["anyOf"] = branches
        if nullable:
            s["nullable"] = True
    if s.get("required") == []:
        del s["required"]
    for key in ("items", "additionalProperties"):
        if isinstance(s.get(key), dict):
            s[key] = gemini_form(s[key])
    if isinstance(s.get("properties"), dict):
        s["properties"] = {n: gemini_form(p) for n, p in s["properties"].items()}
    return s


def lossless_parameters(provider: str, schema: Any) -> Any:
    """The parameters schema a rendering for ``provider`` carries when nothing is lost: our input
    schema (plain JSON) after that provider's documented mechanical rewrites (``strict_form`` for
    the strict renderings, ``gemini_form`` for Gemini, none for the others)."""
    plain = _to_json(schema)
    if provider in STRICT_RENDERINGS:
        return strict_form(plain)
    if provider == "gemini":
        return gemini_form(plain)
    return plain


def _child(path: str, segment: str) -> str:
    return segment if path == "<root>" else f"{path}.{segment}"


def schema_differences(expected: Any, got: Any, path: str = "<root>") -> list[tuple[str, str, Any, Any]]:
    """Where schema ``got`` differs from ``expected``, as ``(node path, key, expected value,
    got value)`` (``ABSENT`` for a key one side lacks; key ``"<property>"`` for a property one
    side lacks). Paths are dotted, as lint's (``"properties.updates"``). Recurses into
    ``properties``, ``items``, ``additionalProperties`` and same-length ``anyOf``; ``required`` is
    compared as a set; other values whole, with JSON equality (``1`` is not ``1.0``)."""
    out: list[tuple[str, str, Any, Any]] = []
    keys = list(expected) + [k for k in got if k not in expected]
    for key in keys:
        e, g = expected.get(key, ABSENT), got.get(key, ABSENT)
        if key == "required" and isinstance(e, list) and isinstance(g, list):
            e_cmp, g_cmp = sorted(e), sorted(g)
        else:
            e_cmp, g_cmp = e, g
        if e is not ABSENT and g is not ABSENT and _canon(e_cmp) == _canon(g_cmp):
            continue
        if key == "properties" and isinstance(e, dict) and isinstance(g, dict):
            for name in list(e) + [n for n in g if n not in e]:
                pe, pg = e.get(name, ABSENT), g.get(name, ABSENT)
                where = _child(path, f"properties.{name}")
                if isinstance(pe, dict) and isinstance(pg, dict):
                    out.extend(schema_differences(pe, pg, where))
                elif pe is ABSENT or pg is ABSENT or _canon(pe) != _canon(pg):
                    out.append((where, "<property>", pe, pg))
        elif key in ("items", "additionalProperties") and isinstance(e, dict) and isinstance(g, dict):
            out.extend(schema_differences(e, g, _child(path, key)))
        elif key == "anyOf" and isinstance(e, list) and isinstance(g, list) and len(e) == len(g):
            for i, (be, bg) in enumerate(zip(e, g)):
                if isinstance(be, dict) and isinstance(bg, dict):
                    out.extend(schema_differences(be, bg, _child(path, f"anyOf[{i}]")))
                elif _canon(be) != _canon(bg):
                    out.append((path, f"anyOf[{i}]", be, bg))
        else:
            out.append((path, key, e, g))
    return out


def _what_changed(key: str, e: Any, g: Any) -> str:
    if g is ABSENT:
        if key == "additionalProperties":
            return "closed object shown open" if e is False else "value schema of an open object dropped"
        return "parameter dropped" if key == "<property>" else f"'{key}' dropped"
    if e is ABSENT:
        if key == "additionalProperties" and g is False:
            return "open object closed"
        return "parameter added" if key == "<property>" else f"'{key}' added"
    if key == "description" and isinstance(e, str) and isinstance(g, str) and g.startswith(e):
        return "description extended"
    return f"'{key}' changed"


def _show_change(key: str, e: Any, g: Any) -> str:
    if key == "description" and isinstance(e, str) and isinstance(g, str) and g.startswith(e):
        return f"description: {g[len(e):].strip()!r} appended"
    show = lambda v: repr(v) if v is ABSENT else json.dumps(v)  # noqa: E731
    return f"{key}: expected {show(e)}, rendered {show(g)}"


@dataclass(frozen=True)
class RenderingLoss:
    """Something one provider rendering of one tool does not carry.

    ``path``: where in the input schema (dotted, as lint's: ``"<root>"``,
    ``"properties.updates"``; ``"<tool>"`` for the name and description). ``kind``: what was
    lost, in short words (``"closed object shown open"``, ``"rendered with strict: false"``,
    ``"'type' dropped, description extended"``). ``detail``: per key, the value a lossless
    rendering has (``lossless_parameters``) and the rendered one, or the text appended.
    ``lint``: the message of ``agentkit_tools.lint``'s ``weakened_rendering`` finding at this path,
    ``None`` when lint does not report it."""

    provider: str
    tool: str
    path: str
    kind: str
    detail: str
    lint: str | None


@dataclass
class RenderingFidelity:
    """One provider's renderings of a set of tools: how many carry everything, and each loss."""

    provider: str
    tools: int = 0
    lossless: int = 0
    #: Parameter descriptions in the rendering that start with BFCL's ``"[Optional] "`` marker.
    optional_prefix: int = 0
    losses: list[RenderingLoss] = field(default_factory=list)

    def kinds(self) -> dict[str, int]:
        """Loss kind → number of tools with a loss of that kind, most frequent first."""
        tools = Counter({(loss.kind, loss.tool) for loss in self.losses})
        return dict(Counter(kind for kind, _ in tools).most_common())


def _lint_paths(registry: ToolRegistry) -> dict[tuple[str, str, str], str]:
    # (tool, provider, path) → message of every weakened_rendering finding.
    out = {}
    for f in lint(registry):
        if f.code == "weakened_rendering":
            provider, _, path = f.subject.partition(":")
            out[(f.tool, provider, path)] = f.message
    return out


def tool_losses(provider: str, tool: Any, rendering: dict[str, Any], lint_messages: dict[tuple[str, str, str], str]) -> list[RenderingLoss]:
    """What ``rendering`` (``tool``'s rendering for ``provider``) loses, by the module
    docstring's definition of "without loss" (empty: nothing lost). ``lint_messages`` maps
    ``(tool, provider, path)`` to lint's ``weakened_rendering`` message; a lint finding at a path
    where the comparison finds no difference is still listed (kind ``"reported by lint only"``)."""
    name, description, parameters, strict = rendered_parts(provider, rendering)
    reported = {path: msg for (t, p, path), msg in lint_messages.items() if t == tool.name and p == provider}
    losses: list[RenderingLoss] = []

    def lost(path: str, kind: str, detail: str) -> None:
        losses.append(RenderingLoss(provider, tool.name, path, kind, detail, reported.get(path)))

    if name != tool.name:
        lost("<tool>", "name changed", f"name: expected {tool.name!r}, rendered {name!r}")
    if description != tool.schema.description:
        lost("<tool>", "tool description changed", _show_change("description", tool.schema.description, description))
    expected = lossless_parameters(provider, tool.schema.parameters)
    if provider in STRICT_RENDERINGS and strict is not True:
        # Not strict: the rendering must then carry the plain schema, unchanged.
        for path in sorted(reported) or ["<root>"]:
            lost(path, "rendered with strict: false", f"strict: {json.dumps(strict)}")
        expected = _to_json(tool.schema.parameters)
    if parameters is None and provider == "gemini":
        # A declaration without `parameters` takes no arguments: an object without properties.
        parameters = {"type": "object", "properties": {}}
    by_path: dict[str, list[tuple[str, Any, Any]]] = {}
    for path, key, e, g in schema_differences(expected, parameters):
        by_path.setdefault(path, []).append((key, e, g))
    for path, changes in by_path.items():
        kind = ", ".join(sorted({_what_changed(*c) for c in changes}))
        lost(path, kind, "; ".join(_show_change(*c) for c in changes))
    for path, message in sorted(reported.items()):
        if not any(loss.path == path for loss in losses):
            lost(path, "reported by lint only", message)
    return losses


def rendering_fidelity(registries: list[ToolRegistry], providers: tuple[str, ...] = RENDERINGS) -> dict[str, RenderingFidelity]:
    """Per provider of ``providers``, how many tools of ``registries`` render without loss (as
    defined in this module's docstring: ``tool_losses`` finds nothing) and every loss, sorted by
    tool, path and kind. Renderings come from ``ToolRegistry.render(provider)``, lint messages
    from ``agentkit_tools.lint(registry)``."""
    report = {p: RenderingFidelity(p) for p in providers}
    for registry in registries:
        lint_messages = _lint_paths(registry)
        tools = {t.name: t for t in registry.tools() if getattr(t, "schema", None) is not None}
        for provider in providers:
            fid = report[provider]
            renderings = registry.render(provider)  # sorted by name
            for tool, rendering in zip(sorted(tools.values(), key=lambda t: t.name), renderings, strict=True):
                losses = tool_losses(provider, tool, rendering, lint_messages)
                fid.tools += 1
                fid.lossless += not losses
                fid.losses.extend(losses)
                parameters = rendered_parts(provider, rendering)[2] or {}
                fid.optional_prefix += sum(
                    str(p.get("description", "")).startswith(OPTIONAL_PREFIX)
                    for p in parameters.get("properties", {}).values()
                )
    for fid in report.values():
        fid.losses.sort(key=lambda loss: (loss.tool, loss.path, loss.kind))
    return report


def rendering_report() -> dict[str, RenderingFidelity]:
    """``rendering_fidelity`` of the tools of every class in ``CLASS_NAMES``."""
    return rendering_fidelity([build_registry(api_class(c)())[0] for c in CLASS_NAMES])


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


def print_rendering_report(report: dict[str, RenderingFidelity]) -> None:
    """Print ``rendering_fidelity``'s table, the loss kinds per provider and every loss (losses
    of one provider, kind, path and lint message are printed once with the tools they hit)."""
    total = max((f.tools for f in report.values()), default=0)
    print(f"\nProvider renderings of the {total} tools (without loss: the schema equals ours up to the")
    print("provider's documented mechanical rewrites; defined in this script's docstring):")
    header = ["provider", "without loss", "tools with a loss", "not reported by lint", f"{OPTIONAL_PREFIX.strip()!s} descriptions"]
    rows = []
    for f in report.values():
        silent = len({loss.tool for loss in f.losses if loss.lint is None})
        rows.append([f.provider, f"{f.lossless}/{f.tools}", str(f.tools - f.lossless), str(silent), str(f.optional_prefix)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
    print(f"  ({OPTIONAL_PREFIX.strip()} descriptions: BFCL's docstring marker, kept in every rendering as written.)")
    for f in report.values():
        if not f.losses:
            continue
        print(f"\n  {f.provider} losses (kind: tools):")
        for kind, n in f.kinds().items():
            print(f"    {kind}: {n}")
        groups: dict[tuple[str, str, str | None], list[str]] = {}
        for loss in f.losses:
            groups.setdefault((loss.kind, loss.path, loss.lint), []).append(loss.tool)
        for (kind, path, message), tools in groups.items():
            details = sorted({loss.detail for loss in f.losses if (loss.kind, loss.path, loss.lint) == (kind, path, message)})
            who = f"all {len(tools)} tools" if len(tools) == f.tools else ", ".join(tools)
            print(f"    [{kind}] at {path} in {who}")
            for d in details:
                print(f"      lost: {d}")
            print(f"      lint: {message if message is not None else 'not reported'}")


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

    print_rendering_report(rendering_report())

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
    for form, found in (("JSON text", outcomes), ("openai-strict arguments", replay_all("openai-strict"))):
        summary = replay_summary(found)
        print(
            f"  calls respecting their hints, sent as {form}: {summary['respecting_hints']}, identical: "
            f"{summary['identical']} ({100 * summary['identical'] / summary['respecting_hints']:.1f}%)"
        )


if __name__ == "__main__":
    main()
