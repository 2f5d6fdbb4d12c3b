"""Differential fuzzing of the validator against the ``jsonschema`` package (Draft 2020-12, with
format checking).

Hypothesis generates schemas of the kinds introspection emits (primitives with their
constraints, the string formats we advertise with their patterns, enums, lists, sets, tuples,
closed structs, dicts, unions with null) and, for each, instances that are mostly near-valid
(built from the schema, then sometimes mutated) and sometimes arbitrary JSON. Both validators must
agree on every instance. ``AGENTKIT_FUZZ_EXAMPLES`` (default 150 schemas, each with up to 25
instances) raises the effort for a local run; the summary test prints the number of calls.

Kept out of the comparison, with the reason:

- ``format: duration``: the ``jsonschema`` package checks it only when ``isoduration`` is
  installed (it is not a test dependency); our validator checks RFC 3339's grammar, and the
  pattern we add is compared here like any pattern.
- ``multipleOf`` with a divisor that is not exactly representable in binary (``0.1``): the two
  libraries round differently; introspection copies the user's divisor as given, and the
  generated divisors here are exact (``0.5``, ``0.25``, integers).
- integers beyond 64 bits under bounds: our core carries them as floats of the same magnitude for
  validation (the body gets the exact integer), so a bound within one float step can differ;
  generated integers stay within 64 bits, and big integers are compared without bounds.
"""

from __future__ import annotations

import os
import string
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit_tools._core import FORMAT_PATTERNS, SchemaValidator

EXAMPLES = int(os.environ.get("AGENTKIT_FUZZ_EXAMPLES", "150"))
INSTANCES = 25
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
# Without rfc3339-validator the reference silently skips date-time and time, and every disagreement
# below would be ours to explain: say so instead (requirements-test.txt installs it).
assert "date-time" in FORMAT_CHECKER.checkers, "the reference jsonschema needs rfc3339-validator to check date-time"

#: Calls made and disagreements found in this process (the summary test prints them).
STATS = {"schemas": 0, "calls": 0, "disagreements": 0}

NAMES = ["a", "b", "sku", "qty", "note", "when", "ctx", "0", ""]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=12),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(NAMES), inner, max_size=4)),
    max_leaves=10,
)

# Strings that sit on the edges of the formats we advertise.
FORMAT_SAMPLES = [
    "2024-05-01T12:00:00Z", "2024-05-01t12:00:00z", "2024-05-01T12:00:00.123456789+01:00", "2024-05-01T12:00:00",
    "2016-12-31T23:59:60Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "2024-02-30T00:00:00Z",
    "2024-05-01T24:00:00Z", "2024-05-01T12:00:00+24:00", "2024-05-01 12:00:00Z",
    "2024-05-01", "0000-01-01", "2024-13-01", "2023-02-29", "2024-02-29", "20240501",
    "09:30", "09:30:00", "09:30:00.5", "09:30:00.1234567", "09:30:00Z", "09:30:00z", "09:30:00+01:00",
    "23:59:60", "24:00", "9:30", "09:30:00+1",
    "P1D", "PT1H", "P1W", "P1M", "P1Y", "PT", "P", "P1DT", "PT1.5S", "P10000000000D",
    "YWJj", "YQ==", "YWI=", "abc", "YQ=", "====", "", "a b=",
    "12.50", "-0.5", ".5", "5.", "1e10", "+3", "1.2.3", "٣",
    "123e4567-e89b-12d3-a456-426614174000", "123e4567e89b12d3a456426614174000", "{123e4567-e89b-12d3-a456-426614174000}",
]

STRING_FORMATS = [
    {"type": "string", "format": "date-time", "pattern": FORMAT_PATTERNS["date-time"]},
    {"type": "string", "format": "date", "pattern": FORMAT_PATTERNS["date"]},
    {"type": "string", "pattern": FORMAT_PATTERNS["time"]},
    {"type": "string", "pattern": FORMAT_PATTERNS["naive-date-time"]},
    {"type": "string", "pattern": FORMAT_PATTERNS["duration"]},
    {"type": "string", "format": "decimal", "pattern": FORMAT_PATTERNS["decimal"]},
    {"type": "string", "format": "byte", "pattern": FORMAT_PATTERNS["byte"]},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "path"},
]
#: Bare formats, as a hand-written schema may have them (compared in the exhaustive test only).
BARE_FORMATS = [{"type": "string", "format": "date-time"}, {"type": "string", "format": "date"}]
USER_PATTERNS = ["^[A-Z]+$", "^[0-9]{5}$", "^-?[0-9]+$", "a+", "^$", "^[a-z_][a-z0-9_]*$"]


def _bounds(draw: Any, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    num = st.integers(-50, 50) if kind == "integer" else st.one_of(st.integers(-50, 50), st.sampled_from([-2.5, 0.5, 1.25, 10.75]))
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if draw(st.integers(0, 4)) == 0:
            out[key] = draw(num)
    if draw(st.integers(0, 5)) == 0:
        out["multipleOf"] = draw(st.sampled_from([2, 3, 5]) if kind == "integer" else st.sampled_from([0.5, 0.25, 2, 3]))
    return out


@st.composite
def schemas(draw: Any, depth: int = 0) -> dict[str, Any]:
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "format"]
    if depth < 3:
        kinds += ["array", "set", "tuple", "struct", "dict", "union", "optional"]
    kind = draw(st.sampled_from(kinds))
    if kind == "string":
        s: dict[str, Any] = {"type": "string"}
        if draw(st.booleans()):
            s["minLength"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            s["maxLength"] = draw(st.integers(0, 6))
        if draw(st.integers(0, 3)) == 0:
            s["pattern"] = draw(st.sampled_from(USER_PATTERNS))
        return s
    if kind in ("integer", "number"):
        return {"type": kind, **_bounds(draw, kind)}
    if kind in ("boolean", "null"):
        return {"type": kind}
    if kind == "format":
        return dict(draw(st.sampled_from(STRING_FORMATS)))
    if kind == "enum":
        values = draw(st.lists(st.one_of(st.text(max_size=4), st.integers(-3, 3), st.sampled_from([2.5, 1.0, True, False, None])), min_size=1, max_size=4, unique_by=repr))
        kinds_ = {type(v) for v in values}
        if kinds_ == {str}:
            return {"type": "string", "enum": values}
        return {"enum": values}
    if kind in ("array", "set"):
        s = {"type": "array", "items": draw(schemas(depth + 1))}
        if kind == "set":
            s["uniqueItems"] = True
        if draw(st.integers(0, 3)) == 0:
            s["minItems"] = draw(st.integers(0, 2))
        if draw(st.integers(0, 3)) == 0:
            s["maxItems"] = draw(st.integers(0, 3))
        return s
    if kind == "tuple":
        parts = draw(st.lists(schemas(depth + 1), min_size=1, max_size=3))
        return {"type": "array", "prefixItems": parts, "items": False, "minItems": len(parts), "maxItems": len(parts)}
    if kind == "struct":
        names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
        props = {n: draw(schemas(depth + 1)) for n in names}
        required = [n for n in names if draw(st.booleans())]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if kind == "dict":
        s = {"type": "object", "additionalProperties": draw(schemas(depth + 1))}
        if draw(st.integers(0, 3)) == 0:
            s["propertyNames"] = {"pattern": "^-?[0-9]+$"}
        return s
    if kind == "optional":
        return {"anyOf": [draw(schemas(depth + 1)), {"type": "null"}]}
    return {"anyOf": draw(st.lists(schemas(depth + 1), min_size=2, max_size=3))}


def _near(draw: Any, schema: Any, depth: int = 0) -> Any:
    """A value built from the schema (valid more often than not), or an arbitrary one."""
    if not isinstance(schema, dict) or depth > 6 or draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    if "anyOf" in schema:
        return _near(draw, draw(st.sampled_from(schema["anyOf"])), depth + 1)
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    t = schema.get("type")
    if t == "string":
        if "pattern" in schema or "format" in schema:
            return draw(st.one_of(st.sampled_from(FORMAT_SAMPLES), st.sampled_from(["ABC", "12345", "-7", "a", "x_1"])))
        return draw(st.text(max_size=7))
    if t == "integer":
        return draw(st.one_of(st.integers(-60, 60), st.integers(-(2**63), 2**64 - 1), st.sampled_from([1.0, -3.0, 2.5, True])))
    if t == "number":
        return draw(st.one_of(st.integers(-60, 60), st.floats(-60, 60, allow_nan=False), st.sampled_from([0.5, 2.75, 1e300, False])))
    if t == "boolean":
        return draw(st.sampled_from([True, False, 0, "true"]))
    if t == "null":
        return draw(st.sampled_from([None, None, 0, "null"]))
    if t == "array":
        if "prefixItems" in schema:
            parts = [_near(draw, p, depth + 1) for p in schema["prefixItems"]]
            extra = draw(st.integers(-1, 1))
            return parts[: len(parts) + extra] if extra < 0 else parts + [draw(JSON)] * extra
        n = draw(st.integers(0, 4))
        return [_near(draw, schema.get("items", {}), depth + 1) for _ in range(n)]
    if t == "object":
        props = schema.get("properties")
        if props is not None:
            out = {k: _near(draw, v, depth + 1) for k, v in props.items() if draw(st.integers(0, 3)) > 0}
            if draw(st.integers(0, 5)) == 0:
                out[draw(st.sampled_from(["zzz", "ctx", "a"]))] = draw(JSON)
            return out
        keys = draw(st.lists(st.sampled_from(["1", "-2", "k", ""]), max_size=3, unique=True))
        return {k: _near(draw, schema.get("additionalProperties", {}), depth + 1) for k in keys}
    return draw(JSON)


@st.composite
def cases(draw: Any) -> tuple[dict[str, Any], list[Any]]:
    schema = draw(schemas())
    n = draw(st.integers(1, INSTANCES))
    return schema, [_near(draw, schema) for _ in range(n)]


def _reference(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema, format_checker=FORMAT_CHECKER)


def _disagreement(schema: dict[str, Any], instance: Any) -> str | None:
    ours = SchemaValidator(schema).is_valid(instance)
    theirs = _reference(schema).is_valid(instance)
    STATS["calls"] += 1
    if ours == theirs:
        return None
    STATS["disagreements"] += 1
    return f"schema {schema!r}, instance {instance!r}: ours {ours}, jsonschema {theirs}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(cases())
def test_validator_agrees_with_jsonschema(case: tuple[dict[str, Any], list[Any]]) -> None:
    schema, instances = case
    STATS["schemas"] += 1
    ours = SchemaValidator(schema)
    theirs = _reference(schema)
    problems = []
    for instance in instances:
        a, b = ours.is_valid(instance), theirs.is_valid(instance)
        STATS["calls"] += 1
        if a != b:
            STATS["disagreements"] += 1
            problems.append(f"{instance!r}: ours {a}, jsonschema {b}")
    assert not problems, f"schema {schema!r}:\n" + "\n".join(problems)


#: Where a bare ``format`` (a hand-written schema; introspection always adds its pattern) is
#: judged differently: RFC 3339 allows the leap second ``:60`` and the year ``0000`` (the JSON
#: Schema test suite counts both valid), which our validator follows; the ``jsonschema`` package
#: refuses them because it checks with Python's ``datetime`` (and ``rfc3339-validator``). With the
#: pattern introspection emits, both refuse them, and so does the body's conversion.
KNOWN = [
    "schema {'type': 'string', 'format': 'date-time'}, instance '2016-12-31T23:59:60Z': ours True, jsonschema False",
    "schema {'type': 'string', 'format': 'date-time'}, instance '0000-01-01T00:00:00Z': ours True, jsonschema False",
    "schema {'type': 'string', 'format': 'date'}, instance '0000-01-01': ours True, jsonschema False",
]


def test_every_format_sample_against_every_format_schema() -> None:
    # The edge strings of the formats, each against each advertised string schema: exhaustive.
    found = [d for s in STRING_FORMATS + BARE_FORMATS for v in FORMAT_SAMPLES if (d := _disagreement(s, v))]
    STATS["disagreements"] -= len(KNOWN)
    assert found == KNOWN


def test_big_integers_without_bounds_agree() -> None:
    for schema in ({"type": "integer"}, {"type": "number"}, {"type": "array", "items": {"type": "integer"}}, {"enum": [1, 2]}):
        for value in (2**64, -(2**63) - 1, 2**200, [2**70, 1], 10**400):
            assert _disagreement(schema, value) is None, (schema, value)


def test_fuzz_summary(capsys: Any) -> None:
    # Runs last in this module: the figures of this process's differential run.
    with capsys.disabled():
        print(
            f"\nvalidation fuzz: {STATS['schemas']} schemas, {STATS['calls']} instance checks, "
            f"{STATS['disagreements']} disagreements with jsonschema"
        )
    assert STATS["disagreements"] == 0
