//! Validating a tool call's arguments against the tool's input schema.
//!
//! A [`SchemaValidator`] is checked when built and compiled once, on first use (JSON Schema
//! 2020-12, the `jsonschema` crate, format assertions on), and then only run. [`ArgumentValidator`] adds what a tool call
//! needs on top: every problem of a call collected at once and sorted into the three kinds the
//! model can act on (unexpected names, missing names, invalid values), each invalid value with a
//! reason that carries the legal values.

use std::fmt::Write as _;
use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use serde_json::{Map, Value};

/// The deepest nesting of arrays and objects a call's arguments may have, the outer object
/// included: what `serde_json` accepts in JSON text, applied to Python values too so that
/// neither form can overflow the stack.
pub const MAX_NESTING: usize = 127;

/// Why a value converted from the host's own objects is not JSON: nested past [`MAX_NESTING`].
pub fn too_deep_message() -> String {
    format!("arrays and objects are nested more than {MAX_NESTING} levels deep")
}

/// Why a value is not JSON: the float `v` (NaN, an infinity) is not a JSON number.
pub fn not_a_number_message(v: f64) -> String {
    format!("{v} is not a JSON number; send a finite number")
}

/// Why a value is not JSON: bytes.
pub const BYTES_NOT_JSON: &str = "bytes are not a JSON value (send text, e.g. base64)";

/// The message of a value that is not JSON (`why`: what is wrong with it).
pub fn not_json_message(why: &str) -> String {
    format!("not a JSON value: {why}")
}

/// The path of a problem with the value itself (not one of its parts).
pub const ROOT_PATH: &str = "<root>";

/// The problems of a value that is not JSON (`why`): one, at [`ROOT_PATH`].
pub fn not_json_problems(why: &str) -> Vec<(String, String)> {
    vec![(ROOT_PATH.to_owned(), not_json_message(why))]
}

/// The number an integer beyond 64 bits is validated as: the float of the same magnitude
/// (`as_float`), or, for one beyond every float (None), the largest finite float of its sign
/// (`negative`, asked only then). Exact enough for the type and bound checks; the body gets the
/// integer itself.
pub fn big_int_stand_in(as_float: Option<f64>, negative: impl FnOnce() -> bool) -> f64 {
    as_float.unwrap_or_else(|| if negative() { -f64::MAX } else { f64::MAX })
}

/// A year from 0001 (Python's `datetime` has no year 0).
macro_rules! year {
    () => {
        "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
    };
}
macro_rules! clock {
    () => {
        "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
    };
}
macro_rules! offset {
    () => {
        "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
    };
}

/// `(name, pattern, what it admits in words)` of the string formats introspection advertises:
/// the pattern makes what is advertised exactly what converts into the Python type.
/// `date-time`/`date` keep `format` for RFC 3339's rules and add the limits of Python's
/// `datetime` (no year 0000, no leap second); `time` and `naive-date-time` are advertised by
/// their pattern alone (`format: time` requires an offset).
pub const FORMAT_PATTERNS: &[(&str, &str, &str)] = &[
    (
        "date-time",
        concat!("^", year!(), "-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-5][0-9]"),
        "a date-time with an offset (RFC 3339, e.g. \"2024-05-01T12:00:00Z\"), year 0001 or later, seconds 00-59",
    ),
    ("date", concat!("^", year!(), "-"), "a date YYYY-MM-DD, year 0001 or later"),
    (
        "time",
        concat!("^", clock!(), "(?::[0-5][0-9](?:\\.[0-9]{1,6})?)?", offset!(), "?$"),
        "a time of day HH:MM[:SS[.ffffff]] with an optional offset such as Z or +01:00 (e.g. \"09:30\" or \"09:30:00Z\")",
    ),
    (
        "naive-date-time",
        concat!(
            "^",
            year!(),
            "-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[Tt]",
            clock!(),
            ":[0-5][0-9](?:\\.[0-9]{1,6})?$"
        ),
        "a date-time without an offset (e.g. \"2024-05-01T12:00:00\")",
    ),
    (
        "duration",
        "^P(?:[0-9]{1,8}W|(?:[0-9]{1,8}D)?(?:T(?:[0-9]{1,9}H)?(?:[0-9]{1,9}M)?(?:[0-9]{1,9}S)?)?)$",
        "an ISO 8601 duration in whole weeks, or days/hours/minutes/seconds (e.g. \"P1DT2H\", \"PT90S\"; no years or months)",
    ),
    (
        "decimal",
        "^[+-]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?$",
        "a decimal number written as a string (e.g. \"12.50\")",
    ),
    (
        "byte",
        "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        "standard base64 (groups of 4 characters, padded with '=')",
    ),
];

/// The words for a pattern of [`FORMAT_PATTERNS`].
fn pattern_words(pattern: &str) -> Option<&'static str> {
    FORMAT_PATTERNS
        .iter()
        .find(|(_, p, _)| *p == pattern)
        .map(|(_, _, words)| *words)
}

/// A schema checked at once and compiled on first use, then validated many times.
///
/// Compiling (the `jsonschema` crate's validator tree) costs about 30 µs and 18 KiB per tool
/// schema, so it is deferred to the first validation: most tools of a large registry are never
/// called in a given process. An invalid schema is still refused by [`SchemaValidator::new`]:
/// a schema with references, identifiers, regular expressions or content keywords (whatever
/// compilation can reject beyond the meta-schema) is compiled at once; any other is checked
/// against the draft 2020-12 meta-schema, which covers what compilation would reject in it,
/// unless it keeps to a fixed subset of keywords and value shapes that is valid by
/// construction (every schema introspection generates does; see `plain_schema`).
pub struct SchemaValidator {
    schema: Value,
    compiled: OnceLock<Result<Validator, String>>,
}

/// Keywords whose values compilation checks beyond the meta-schema (reference resolution,
/// regular-expression syntax, identifiers, vocabularies, content decoders).
const COMPILE_CHECKED: &[&str] = &[
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "pattern",
    "patternProperties",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
];

fn needs_compiler(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.keys().any(|k| COMPILE_CHECKED.contains(&k.as_str())) || map.values().any(needs_compiler)
        }
        Value::Array(items) => items.iter().any(needs_compiler),
        _ => false,
    }
}

/// The type names of draft 2020-12 (`simpleTypes` of its validation meta-schema).
const SIMPLE_TYPES: &[&str] = &["array", "boolean", "integer", "null", "number", "object", "string"];

/// How deep [`plain_schema`] follows subschemas before leaving the schema to the meta-schema.
const PLAIN_MAX_DEPTH: usize = 64;

/// True when `schema` is valid against the draft 2020-12 meta-schema by construction and holds
/// none of [`COMPILE_CHECKED`] anywhere (not as a keyword, property name or key inside a
/// `default`/`const`/`enum`/`examples` value), so that [`SchemaValidator::new`] has nothing to
/// check: the result `jsonschema::meta::validate` would give, without running it (about 4 µs
/// for a six-parameter tool schema, 10 µs with cold caches).
///
/// A sound subset check, not a validator: every keyword is one of a fixed list whose value
/// shape is checked exactly as the meta-schema's vocabularies (validation, applicator,
/// meta-data, format-annotation, core's `$comment`/`$defs`) require it; anything else (an
/// unlisted keyword, a value shape not recognised, such as an integral float for `minItems`,
/// or nesting beyond [`PLAIN_MAX_DEPTH`]) gives false, and the meta-schema then decides. It
/// covers everything introspection generates, and any hand-written schema that keeps to it.
fn plain_schema(schema: &Value, depth: usize) -> bool {
    let map = match schema {
        Value::Bool(_) => return true,
        Value::Object(map) if depth < PLAIN_MAX_DEPTH => map,
        _ => return false,
    };
    let inner = depth + 1;
    map.iter().all(|(key, value)| match key.as_str() {
        "type" => match value {
            Value::String(t) => SIMPLE_TYPES.contains(&t.as_str()),
            // A non-empty array of distinct type names.
            Value::Array(types) => {
                !types.is_empty()
                    && types.len() <= SIMPLE_TYPES.len()
                    && types
                        .iter()
                        .enumerate()
                        .all(|(i, t)| t.as_str().is_some_and(|t| SIMPLE_TYPES.contains(&t)) && !types[..i].contains(t))
            }
            _ => false,
        },
        "title" | "description" | "format" | "$comment" => value.is_string(),
        "default" | "const" => !needs_compiler(value),
        "enum" | "examples" => value.is_array() && !needs_compiler(value),
        "uniqueItems" | "deprecated" | "readOnly" | "writeOnly" => value.is_boolean(),
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => value.is_number(),
        "multipleOf" => value.as_f64().is_some_and(|m| m > 0.0),
        // nonNegativeInteger.
        "minLength" | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties" | "minContains"
        | "maxContains" => value.is_u64(),
        // stringArray: distinct strings (a long list is left to the meta-schema).
        "required" => value.as_array().is_some_and(|names| {
            names.len() <= 64
                && names
                    .iter()
                    .enumerate()
                    .all(|(i, n)| n.is_string() && !names[..i].contains(n))
        }),
        "items" | "additionalProperties" | "propertyNames" | "contains" | "not" | "if" | "then" | "else" => {
            plain_schema(value, inner)
        }
        // schemaArray: a non-empty array of schemas.
        "prefixItems" | "allOf" | "anyOf" | "oneOf" => value
            .as_array()
            .is_some_and(|items| !items.is_empty() && items.iter().all(|s| plain_schema(s, inner))),
        "properties" | "dependentSchemas" | "$defs" => value.as_object().is_some_and(|props| {
            props
                .iter()
                .all(|(name, s)| !COMPILE_CHECKED.contains(&name.as_str()) && plain_schema(s, inner))
        }),
        _ => false,
    })
}

fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("invalid JSON Schema: {e}"))
}

impl SchemaValidator {
    /// Check `schema` (draft 2020-12, formats asserted) and prepare it for validation.
    ///
    /// # Errors
    /// The schema is not a valid JSON Schema (the message says where).
    pub fn new(schema: Value) -> Result<Self, String> {
        let compiled = OnceLock::new();
        if plain_schema(&schema, 0) {
            // Valid against the meta-schema by construction (see `plain_schema`): nothing to
            // check, and nothing compilation could reject beyond it.
        } else if needs_compiler(&schema) {
            let _ = compiled.set(Ok(compile(&schema)?));
        } else {
            jsonschema::meta::validate(&schema).map_err(|e| format!("invalid JSON Schema: {e}"))?;
        }
        Ok(Self { schema, compiled })
    }

    /// The compiled validator (compiled now if this is the first use). An error here means the
    /// schema passed the meta-schema yet does not compile, which [`SchemaValidator::new`] is
    /// built to prevent; callers report it as a problem instead of panicking.
    fn validator(&self) -> Result<&Validator, &str> {
        self.compiled
            .get_or_init(|| compile(&self.schema))
            .as_ref()
            .map_err(String::as_str)
    }

    /// The schema this validator was compiled from.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// True when `instance` is valid (no error objects are built).
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator().is_ok_and(|v| v.is_valid(instance))
    }

    /// Every problem with `instance` as `(path, reason)` pairs, in the validator's order.
    /// Paths use the model-facing notation of [`display_path`] (`<root>` for the value itself).
    pub fn problems(&self, instance: &Value) -> Vec<(String, String)> {
        let validator = match self.validator() {
            Ok(v) => v,
            Err(e) => return vec![(ROOT_PATH.to_owned(), e.to_owned())],
        };
        let errors: Vec<ValidationError<'_>> = validator.iter_errors(instance).collect();
        let mut leaves = Vec::with_capacity(errors.len());
        for e in &errors {
            specific(e, &mut leaves);
        }
        leaves
            .into_iter()
            .map(|e| {
                let segs = segments(e, instance);
                let path = if segs.is_empty() {
                    ROOT_PATH.to_owned()
                } else {
                    display_path(&segs)
                };
                (path, reason(&self.schema, e))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .fold(Vec::new(), |mut out: Vec<(String, String)>, item| {
                if out.last() != Some(&item) {
                    out.push(item);
                }
                out
            })
    }
}

/// Why a call's arguments were rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The arguments are not a JSON object (the JSON type that was sent instead).
    NotAnObject(&'static str),
    /// The arguments are not valid JSON text (the parser's message).
    NotJson(String),
    /// Everything wrong with an object of arguments, collected at once.
    Problems(ArgumentProblems),
}

/// The problems of one call, sorted the way [`ArgumentValidator::check`] documents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgumentProblems {
    /// Top-level names the schema does not declare, in the order they were sent.
    pub unexpected: Vec<String>,
    /// Required names that were not sent, in signature order.
    pub missing: Vec<String>,
    /// `(path, reason)` for every value the schema forbids, in signature order.
    pub invalid: Vec<(String, String)>,
}

impl Rejection {
    /// The rejection as problems (what `ToolArgumentError` carries): a call that is not an
    /// object, or not JSON, is one invalid value at `<arguments>`.
    pub fn to_problems(&self) -> ArgumentProblems {
        match self {
            Rejection::Problems(p) => p.clone(),
            other => ArgumentProblems {
                invalid: vec![("<arguments>".to_owned(), other.summary(usize::MAX))],
                ..Default::default()
            },
        }
    }

    /// The model-facing one-line summary: every problem, `limit` invalid values spelled out.
    pub fn summary(&self, limit: usize) -> String {
        let mut out = String::new();
        self.write_summary(&mut out, limit);
        out
    }

    /// [`Rejection::summary`] appended to `out`.
    pub fn write_summary(&self, out: &mut String, limit: usize) {
        match self {
            Rejection::NotAnObject(kind) => {
                out.push_str("the arguments must be a JSON object of named arguments, got ");
                out.push_str(article(kind));
                out.push(' ');
                out.push_str(kind);
            }
            Rejection::NotJson(msg) => {
                out.push_str("the arguments are not valid JSON (");
                out.push_str(msg);
                out.push(')');
            }
            Rejection::Problems(p) => p.write_summary(out, limit),
        }
    }
}

impl ArgumentProblems {
    /// True when nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.unexpected.is_empty() && self.missing.is_empty() && self.invalid.is_empty()
    }

    /// `unexpected argument(s) ['x']; missing required argument(s) ['a']; invalid argument(s):
    /// b: reason; c: reason` with at most `limit` invalid entries spelled out (names are
    /// written as Python lists, as `str(ToolArgumentError)` writes them).
    pub fn summary(&self, limit: usize) -> String {
        let mut out = String::new();
        self.write_summary(&mut out, limit);
        out
    }

    /// [`ArgumentProblems::summary`] appended to `out`.
    pub fn write_summary(&self, out: &mut String, limit: usize) {
        let start = out.len();
        let sep = |out: &mut String| {
            if out.len() > start {
                out.push_str("; ");
            }
        };
        if !self.unexpected.is_empty() {
            out.push_str("unexpected argument(s) ");
            push_capped_names(out, &self.unexpected);
        }
        if !self.missing.is_empty() {
            sep(out);
            out.push_str("missing required argument(s) ");
            push_capped_names(out, &self.missing);
        }
        if !self.invalid.is_empty() {
            sep(out);
            out.push_str("invalid argument(s): ");
            for (i, (path, why)) in self.invalid.iter().take(limit).enumerate() {
                if i > 0 {
                    out.push_str("; ");
                }
                out.push_str(path);
                out.push_str(": ");
                out.push_str(why);
            }
            if self.invalid.len() > limit {
                let _ = write!(out, "; and {} more", self.invalid.len() - limit);
            }
        }
    }
}

/// The input schema of one tool, compiled, plus what a call check needs to know about it.
pub struct ArgumentValidator {
    inner: SchemaValidator,
    /// Declared argument names, in signature order.
    accepted: Vec<String>,
    /// Required argument names, in signature order.
    required: Vec<String>,
    /// Names the model may send but that are dropped before validation (an injected `ctx`).
    dropped: Vec<String>,
    /// `accepted` written as a Python list (what every rejection message quotes; `<none>` when
    /// the tool takes no arguments), built once.
    accepted_repr: String,
    /// The schema's flat form, when it has one and no dropped name is one of its properties
    /// (see `crate::flat`: which plain calls are accepted without converting them first).
    flat: Option<crate::flat::Flat>,
}

impl ArgumentValidator {
    /// Compile an input schema (a JSON Schema object with `properties` in signature order).
    /// `dropped` names keys removed from a call before validation (a model-sent
    /// `ctx`/`context` when the function declares that injected parameter).
    ///
    /// # Errors
    /// The schema is not a valid JSON Schema.
    pub fn new(schema: Value, dropped: Vec<String>) -> Result<Self, String> {
        let accepted: Vec<String> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let mut required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let order = |n: &String| index_of(&accepted, n);
        required.sort_by_key(order);
        let mut accepted_repr = String::new();
        push_capped_names(&mut accepted_repr, &accepted);
        let flat = crate::flat::Flat::of(&schema).filter(|f| dropped.iter().all(|d| f.find(d).is_none()));
        Ok(Self {
            inner: SchemaValidator::new(schema)?,
            accepted,
            required,
            dropped,
            accepted_repr,
            flat,
        })
    }

    /// The schema's flat form (see `crate::flat`), if it has one.
    pub fn flat(&self) -> Option<&crate::flat::Flat> {
        self.flat.as_ref()
    }

    /// Declared argument names, in signature order.
    pub fn accepted(&self) -> &[String] {
        &self.accepted
    }

    /// The declared names written as a Python list (`['query', 'scope']`, `<none>`), as
    /// [`push_capped_names`].
    pub fn accepted_repr(&self) -> &str {
        &self.accepted_repr
    }

    /// The input schema.
    pub fn schema(&self) -> &Value {
        self.inner.schema()
    }

    /// Names dropped from a call before validation.
    pub fn dropped(&self) -> &[String] {
        &self.dropped
    }

    /// Remove the dropped keys from `args` (returns whether anything was removed).
    pub fn drop_injected(&self, args: &mut Value) -> bool {
        let Some(obj) = args.as_object_mut() else { return false };
        let mut removed = false;
        for k in &self.dropped {
            removed |= obj.shift_remove(k).is_some();
        }
        removed
    }

    /// Check one call's arguments (dropped keys must already be removed).
    ///
    /// # Errors
    /// [`Rejection::NotAnObject`] when `args` is not an object; otherwise
    /// [`Rejection::Problems`] with every problem: top-level unknown names in `unexpected`,
    /// top-level missing required names in `missing` (signature order), everything else in
    /// `invalid` as `(path, reason)` sorted by the argument's position in the signature.
    pub fn check(&self, args: &Value) -> Result<(), Rejection> {
        let Value::Object(map) = args else {
            return Err(Rejection::NotAnObject(json_type(args)));
        };
        if self.inner.is_valid(args) {
            return Ok(());
        }
        Err(Rejection::Problems(self.collect(map, args)))
    }

    fn collect(&self, map: &Map<String, Value>, args: &Value) -> ArgumentProblems {
        let mut p = ArgumentProblems::default();
        // The signature position of each entry of `p.invalid`, for the final ordering.
        let mut ranks: Vec<usize> = Vec::new();
        let errors: Vec<ValidationError<'_>> = match self.inner.validator() {
            Ok(v) => v.iter_errors(args).collect(),
            Err(e) => {
                p.invalid.push(("<arguments>".to_owned(), e.to_owned()));
                return p;
            }
        };
        let mut leaves = Vec::with_capacity(errors.len());
        for e in &errors {
            specific(e, &mut leaves);
        }
        for err in leaves {
            let pointer = err.instance_path().as_str();
            match err.kind() {
                ValidationErrorKind::AdditionalProperties { unexpected } if pointer.is_empty() => {
                    p.unexpected.extend(unexpected.iter().cloned());
                }
                ValidationErrorKind::Required { property } if pointer.is_empty() => {
                    if let Some(name) = property.as_str() {
                        p.missing.push(name.to_owned());
                    }
                }
                _ => {
                    // The usual case, an argument itself (`/name`, no escapes): no path to walk.
                    let argument = pointer.strip_prefix('/').filter(|t| !t.contains(['/', '~']));
                    let (rank, path) = match argument {
                        Some(name) if is_identifier(name) => (index_of(&self.accepted, name), name.to_owned()),
                        _ => {
                            let segs = segments(err, args);
                            match segs.first() {
                                Some(Seg::Key(top)) => (index_of(&self.accepted, top), display_path(&segs)),
                                _ => (usize::MAX, "<arguments>".to_owned()),
                            }
                        }
                    };
                    ranks.push(rank);
                    p.invalid.push((path, reason(self.inner.schema(), err)));
                }
            }
        }
        // Report unexpected names in the order the model sent them (each once), missing ones in
        // signature order. Linear in the number of keys: a hostile call may send thousands.
        if p.unexpected.len() > 1 {
            let unexpected: std::collections::HashSet<&str> = p.unexpected.iter().map(String::as_str).collect();
            p.unexpected = map
                .keys()
                .filter(|k| unexpected.contains(k.as_str()))
                .cloned()
                .collect();
        }
        p.missing.sort_by_key(|n| index_of(&self.required, n));
        p.missing.dedup();
        if !ranks.is_sorted() {
            // A stable sort by signature position (the validator's order within one argument).
            let mut order: Vec<usize> = (0..ranks.len()).collect();
            order.sort_by_key(|&i| ranks[i]);
            let mut slots: Vec<Option<(String, String)>> = p.invalid.drain(..).map(Some).collect();
            p.invalid = order.into_iter().filter_map(|i| slots[i].take()).collect();
        }
        // A value failing both `format` and our `pattern` gets one reason.
        p.invalid.dedup();
        p
    }
}

fn index_of(names: &[String], name: &str) -> usize {
    names.iter().position(|n| n == name).unwrap_or(usize::MAX)
}

/// The most specific errors behind one error. When a value matches the type of exactly one
/// branch of an `anyOf` (an `Optional[X]` that got an `X` with a bad item, say), that branch's own
/// errors say more than "expected X or null"; otherwise the error stands as it is.
fn specific<'a, 'i>(err: &'a ValidationError<'i>, out: &mut Vec<&'a ValidationError<'i>>)
where
    'static: 'i,
{
    let ValidationErrorKind::AnyOf { context } = err.kind() else {
        return out.push(err);
    };
    let here = err.instance_path().as_str();
    let type_fits = |branch: &Vec<ValidationError<'static>>| {
        !branch.iter().any(|e| {
            e.instance_path().as_str() == here
                && matches!(
                    e.kind(),
                    ValidationErrorKind::Type { .. }
                        | ValidationErrorKind::Enum { .. }
                        | ValidationErrorKind::Constant { .. }
                        | ValidationErrorKind::AnyOf { .. }
                )
        })
    };
    let mut fitting = context.iter().filter(|b| type_fits(b));
    match (fitting.next(), fitting.next()) {
        (Some(branch), None) if !branch.is_empty() => {
            for e in branch {
                specific(e, out);
            }
        }
        _ => out.push(err),
    }
}

/// One step of an instance path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// The steps of an error's instance path, read from its JSON Pointer against the instance
/// itself: a token is an index only where the instance holds an array there, so an object key
/// `"0"` stays a key and an empty key `""` is kept (the pointer iterator of `jsonschema` turns
/// the first into an index and drops the second).
fn segments(err: &ValidationError<'_>, root: &Value) -> Vec<Seg> {
    let pointer = err.instance_path().as_str();
    let mut here = Some(root);
    let mut out = Vec::with_capacity(pointer.bytes().filter(|&b| b == b'/').count());
    let mut tokens = pointer.split('/').skip(1).peekable();
    while let Some(token) = tokens.next() {
        let key = if token.contains('~') {
            token.replace("~1", "/").replace("~0", "~")
        } else {
            token.to_owned()
        };
        let last = tokens.peek().is_none();
        match (here, key.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(i)) => {
                here = items.get(i);
                out.push(Seg::Index(i));
            }
            (node, _) => {
                // Only a step with more steps after it needs to know what it leads to.
                here = if last { None } else { node.and_then(|n| n.get(&key)) };
                out.push(Seg::Key(key));
            }
        }
    }
    out
}

/// `arg.sub[0]`: keys joined with dots, indexes in brackets; a key that is not a plain
/// identifier is written as `["key"]`.
fn display_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Seg::Key(k) if is_identifier(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Key(k) => {
                let _ = write!(out, "[{}]", Value::String(k.clone()));
            }
        }
    }
    out
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// Turn integral floats (`1.0`) into integers wherever the schema asks for an `integer` (or
/// lists the integer in an `enum`/`const`), so a body annotated `int` never receives a float.
/// JSON Schema counts `1.0` as an integer (draft 2020-12, §6.1.1), and JSON text cannot say which
/// one the model meant. Floats at or beyond 2^63 cannot become a 64-bit integer here: they are
/// counted in `beyond_64_bits`, and the binding makes them Python integers.
pub fn integral_floats_to_ints(schema: &Value, value: &mut Value) -> IntegerFix {
    let mut fix = IntegerFix::default();
    if contains_float(value) {
        let mut walk = Walk {
            beyond: false,
            path: Vec::new(),
            places: Vec::new(),
        };
        fix.changed = normalize_integers(schema, value, &mut walk);
        fix.beyond_64_bits = walk.beyond;
        fix.places = walk.places;
    }
    fix
}

/// What [`integral_floats_to_ints`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct IntegerFix {
    /// Some float became an integer.
    pub changed: bool,
    /// Some integral float at an integer place is at or beyond 2^63 (left a float).
    pub beyond_64_bits: bool,
    /// Every integer place that received a float (converted or beyond 2^63): its path (as
    /// error paths are written) and the float.
    pub places: Vec<(String, f64)>,
}

struct Walk {
    beyond: bool,
    path: Vec<Seg>,
    places: Vec<(String, f64)>,
}

/// A float read from JSON text reaches an integer place only when its literal is exactly that
/// integer: `1e-400` (read as 0.0) and `1.00000000000000000001` (read as 1.0) are not integers,
/// and `9007199254740993.0` or `1e30` would arrive as another integer than the one written
/// (a float holds 53 bits). `places` from [`integral_floats_to_ints`], `text` the JSON text the
/// value was parsed from. Returns `(path, reason)` for every place whose literal disagrees.
pub fn check_integer_literals(text: &str, places: &[(String, f64)]) -> Vec<(String, String)> {
    if places.is_empty() {
        return Vec::new();
    }
    let literals = number_literals(text);
    let mut out = Vec::new();
    for (path, f) in places {
        let Some((_, lit)) = literals.iter().find(|(p, _)| p == path) else {
            continue;
        };
        if !lit.contains(['.', 'e', 'E']) {
            continue; // plain digits: integers beyond a float's reach are read exactly elsewhere
        }
        let read = if f.abs() < 2f64.powi(63) {
            (*f as i64).to_string()
        } else {
            format!("{f:.0}")
        };
        let shown_read = if read.len() <= 40 {
            read.clone()
        } else {
            format!("{}... ({} digits)", &read[..20], read.len())
        };
        match literal_integer(lit) {
            LiteralInteger::Exact(exact) if exact == read => {}
            LiteralInteger::Exact(_) | LiteralInteger::TooLong => out.push((
                path.clone(),
                format!(
                    "{} has more digits than a JSON float holds exactly (it would arrive as {shown_read}); send \
                     the whole number as plain digits, without a fraction or exponent",
                    shown_literal(lit)
                ),
            )),
            LiteralInteger::Fraction => out.push((
                path.clone(),
                format!("expected integer, got number {}", shown_literal(lit)),
            )),
        }
    }
    out
}

/// A run of this many digits in JSON text may be an integer beyond 64 bits (`i64::MAX` has 19),
/// which `serde_json` would read as a float of another value.
pub const LONG_DIGITS: usize = 19;

/// How a call's arguments sent as JSON text are read (see [`arguments_text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgumentsText {
    /// No arguments: blank text or `null`, the empty call `{}`.
    Empty,
    /// The text has a run of [`LONG_DIGITS`] digits or more (inside a string too): it may hold
    /// an integer beyond 64 bits, so it is read by a reader that keeps every integer exact (the
    /// body gets the integers that were sent; the validator sees floats of their magnitude).
    ExactIntegers,
    /// Anything else: read as JSON here.
    Plain,
}

/// The reader for arguments sent as JSON `text`.
pub fn arguments_text(text: &str) -> ArgumentsText {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return ArgumentsText::Empty;
    }
    let mut run = 0;
    for b in text.bytes() {
        if b.is_ascii_digit() {
            run += 1;
            if run >= LONG_DIGITS {
                return ArgumentsText::ExactIntegers;
            }
        } else {
            run = 0;
        }
    }
    ArgumentsText::Plain
}

impl Rejection {
    /// Values the schema forbids, as `(path, reason)` pairs.
    pub fn invalid(invalid: Vec<(String, String)>) -> Self {
        Rejection::Problems(ArgumentProblems {
            invalid,
            ..Default::default()
        })
    }
}

/// Why arguments holding the lone surrogate `code` (half of a UTF-16 pair without its other
/// half: no character, so no text a body can use) are refused, whether JSON text escapes it
/// (`"\ud800"`) or a string of the caller's holds it: what to send instead.
pub fn lone_surrogate_message(code: u32) -> String {
    format!(
        "a string holds the lone surrogate \\u{code:04x}, half of a UTF-16 pair and no character: \
         send the character itself, or both halves of its pair"
    )
}

/// The first lone surrogate escape of JSON text `text` (`\ud800` not followed by the escape of
/// a low surrogate, or a low surrogate's escape alone), with the byte range of its escape.
fn lone_surrogate_escape(text: &str) -> Option<(u32, std::ops::Range<usize>)> {
    let b = text.as_bytes();
    let hex = |at: usize| -> Option<u32> {
        let h = b.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let escape_at = |at: usize| -> Option<u32> { (b.get(at..at + 2)? == b"\\u").then(|| hex(at + 2)).flatten() };
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match escape_at(i) {
            Some(high @ 0xD800..=0xDBFF) => match escape_at(i + 6) {
                Some(0xDC00..=0xDFFF) => i += 12,
                _ => return Some((high, i..i + 6)),
            },
            Some(low @ 0xDC00..=0xDFFF) => return Some((low, i..i + 6)),
            _ => i += 2, // any other escape, `\\` included
        }
    }
    None
}

/// Why JSON text the parser refused (`parser_said`, its words) is not JSON: when all that is
/// wrong with it is lone surrogate escapes (Python's `json` reads each as a string holding no
/// character; this reader refuses them), the first of them (see [`lone_surrogate_message`]),
/// as for a string of the caller's that holds one; else the parser's words.
#[cold]
#[inline(never)]
pub fn text_not_json(text: &str, parser_said: String) -> String {
    let Some((first, _)) = lone_surrogate_escape(text) else {
        return parser_said;
    };
    let mut patched = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((_, at)) = lone_surrogate_escape(rest) {
        patched.push_str(&rest[..at.start]);
        patched.push_str("\\ufffd");
        rest = &rest[at.end..];
    }
    patched.push_str(rest);
    match serde_json::from_str::<serde::de::IgnoredAny>(&patched) {
        Ok(_) => lone_surrogate_message(first),
        Err(_) => parser_said,
    }
}

/// The reason for a number literal too large for this reader (a float beyond about 1.8e308, or an
/// integer of more than `max_digits` digits), and its path; `None` when `text` has no such
/// literal.
pub fn oversized_number(text: &str, max_digits: usize) -> Option<(String, String)> {
    number_literals(text).into_iter().find_map(|(path, lit)| {
        let digits = lit.bytes().filter(u8::is_ascii_digit).count();
        let integer = !lit.contains(['.', 'e', 'E']);
        if integer && digits > max_digits {
            Some((
                path,
                format!(
                    "{} is too long: {digits} digits, at most {max_digits}; send a smaller number",
                    shown_literal(&lit)
                ),
            ))
        } else if !integer && lit.parse::<f64>().is_ok_and(f64::is_infinite) {
            Some((
                path,
                format!(
                    "{} is beyond the largest JSON number this tool reads (about 1.8e308); a whole number may be \
                     sent as plain digits (at most {max_digits}), without a fraction or exponent",
                    shown_literal(&lit)
                ),
            ))
        } else {
            None
        }
    })
}

/// A literal as a message shows it: at most 24 characters, then `...` and its length.
fn shown_literal(lit: &str) -> String {
    if lit.len() <= 24 {
        lit.to_owned()
    } else {
        format!("{}... ({} characters)", &lit[..20], lit.len())
    }
}

enum LiteralInteger {
    /// The integer the literal writes exactly (decimal digits, `-` for a negative one).
    Exact(String),
    /// The literal's value has a fractional part.
    Fraction,
    /// An integer with more than 5,000 digits once its exponent is spelled out.
    TooLong,
}

/// What a JSON number literal is, read exactly (no float on the way).
fn literal_integer(lit: &str) -> LiteralInteger {
    let (negative, body) = match lit.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, lit),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (
            &body[..i],
            body[i + 1..]
                .parse::<i64>()
                .unwrap_or(if body[i + 1..].starts_with('-') {
                    i64::MIN
                } else {
                    i64::MAX
                }),
        ),
        None => (body, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int_part}{frac_part}").trim_start_matches('0').to_owned();
    let mut exp = exp.saturating_sub(frac_part.len() as i64);
    if digits.is_empty() {
        return LiteralInteger::Exact("0".to_owned());
    }
    let trailing = digits.len() - digits.trim_end_matches('0').len();
    digits.truncate(digits.len() - trailing);
    exp = exp.saturating_add(trailing as i64);
    if exp < 0 {
        return LiteralInteger::Fraction;
    }
    if exp > 5000 || digits.len() as i64 + exp > 5000 {
        return LiteralInteger::TooLong;
    }
    let sign = if negative { "-" } else { "" };
    LiteralInteger::Exact(format!("{sign}{digits}{}", "0".repeat(exp as usize)))
}

/// Every number literal of a JSON text with its path (as error paths are written; the text's
/// top-level value is the root). Lenient: it reads what it can of a text that is not JSON.
fn number_literals(text: &str) -> Vec<(String, String)> {
    enum Frame {
        Object { key: Option<String>, want_key: bool },
        Array { index: usize },
    }
    let b = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut out = Vec::new();
    let path = |stack: &[Frame]| {
        let segs: Vec<Seg> = stack
            .iter()
            .map(|f| match f {
                Frame::Object { key, .. } => Seg::Key(key.clone().unwrap_or_default()),
                Frame::Array { index } => Seg::Index(*index),
            })
            .collect();
        display_path(&segs)
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => stack.push(Frame::Object {
                key: None,
                want_key: true,
            }),
            b'[' => stack.push(Frame::Array { index: 0 }),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array { index }) => *index += 1,
                Some(Frame::Object { want_key, .. }) => *want_key = true,
                None => {}
            },
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Object {
                    key,
                    want_key: want @ true,
                }) = stack.last_mut()
                {
                    *key = serde_json::from_str::<String>(&text[start..(i + 1).min(b.len())]).ok();
                    *want = false;
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    i += 1;
                }
                out.push((path(&stack), text[start..i].to_owned()));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn contains_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(contains_float),
        Value::Object(map) => map.values().any(contains_float),
        _ => false,
    }
}

/// True when an integral float `f` at a place with this schema is meant as an integer: the schema
/// says `integer` (and not `number`), or its `enum`/`const` holds the integer equal to `f`.
pub fn wants_integer(schema: &Map<String, Value>, f: f64) -> bool {
    if f.fract() != 0.0 || !f.is_finite() {
        return false;
    }
    let by_type = match schema.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer") && !ts.iter().any(|t| t == "number"),
        _ => false,
    };
    let is_int = |v: &Value| v.as_i64().is_some_and(|i| i as f64 == f) || v.as_u64().is_some_and(|u| u as f64 == f);
    by_type
        || schema.get("enum").and_then(Value::as_array).is_some_and(|vs| {
            // Only when the float itself is not listed (`Literal[1.0]` keeps a float).
            vs.iter().any(is_int) && !vs.iter().any(|v| v.is_f64() && v.as_f64() == Some(f))
        })
        || schema.get("const").is_some_and(is_int)
}

fn normalize_integers(schema: &Value, value: &mut Value, walk: &mut Walk) -> bool {
    let Value::Object(s) = schema else { return false };
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if wants_integer(s, f) {
                walk.places.push((display_path(&walk.path), f));
                // Exactly representable integers only: |f| < 2^63.
                if f.abs() < 2f64.powi(63) {
                    *value = Value::from(f as i64);
                    return true;
                }
                walk.beyond = true;
                return false;
            }
            branches(s, value, walk)
        }
        Value::Array(items) => {
            let subs = ItemSchemas::of(s);
            let mut changed = false;
            for (i, item) in items.iter_mut().enumerate() {
                if let Some(sub) = subs.get(i) {
                    walk.path.push(Seg::Index(i));
                    changed |= normalize_integers(sub, item, walk);
                    walk.path.pop();
                }
            }
            changed || branches(s, value, walk)
        }
        Value::Object(map) => {
            let subs = PropertySchemas::of(s);
            let mut changed = false;
            for (k, v) in map.iter_mut() {
                if let Some(sub) = subs.get(k) {
                    walk.path.push(Seg::Key(k.clone()));
                    changed |= normalize_integers(sub, v, walk);
                    walk.path.pop();
                }
            }
            changed || branches(s, value, walk)
        }
        _ => branches(s, value, walk),
    }
}

/// The first `anyOf`/`oneOf` branch that changes the value decides.
fn branches(s: &Map<String, Value>, value: &mut Value, walk: &mut Walk) -> bool {
    branch_schemas(s).any(|branch| normalize_integers(branch, value, walk))
}

/// The schemas of an object's values under object schema `s`: `properties`, else
/// `additionalProperties` (a schema, or `false`/`true`).
#[derive(Clone, Copy)]
pub struct PropertySchemas<'a> {
    props: Option<&'a Map<String, Value>>,
    extra: Option<&'a Value>,
}

impl<'a> PropertySchemas<'a> {
    #[inline]
    pub fn of(s: &'a Map<String, Value>) -> Self {
        PropertySchemas {
            props: s.get("properties").and_then(Value::as_object),
            extra: s.get("additionalProperties"),
        }
    }

    /// The schema of the value under `key` (None: the schema says nothing of it).
    #[inline]
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.props.and_then(|p| p.get(key)).or(self.extra)
    }

    /// The schema of a value under a key `properties` does not name.
    #[inline]
    pub fn others(&self) -> Option<&'a Value> {
        self.extra
    }
}

/// The schemas of an array's items under array schema `s`: `prefixItems` by position, else
/// `items`.
#[derive(Clone, Copy)]
pub struct ItemSchemas<'a> {
    prefix: Option<&'a Vec<Value>>,
    rest: Option<&'a Value>,
}

impl<'a> ItemSchemas<'a> {
    #[inline]
    pub fn of(s: &'a Map<String, Value>) -> Self {
        ItemSchemas {
            prefix: s.get("prefixItems").and_then(Value::as_array),
            rest: s.get("items"),
        }
    }

    /// The schema of item `i` (None: the schema says nothing of it).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a Value> {
        self.prefix.and_then(|p| p.get(i)).or(self.rest)
    }
}

/// The `anyOf` then `oneOf` branches of schema `s`, in the order a pass that changes a value
/// tries them (the first branch that changes it decides).
pub fn branch_schemas(s: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    ["anyOf", "oneOf"]
        .into_iter()
        .filter_map(|k| s.get(k).and_then(Value::as_array))
        .flatten()
}

/// The JSON type name of a value, as the model would say it.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn json_list(names: &[String]) -> String {
    Value::Array(names.iter().cloned().map(Value::String).collect()).to_string()
}

/// How many names of a list a message spells out (a hostile call may send thousands).
pub const MAX_ECHOED_NAMES: usize = 20;
/// How many characters of one name a message shows.
pub const MAX_ECHOED_NAME_CHARS: usize = 64;

/// `names` as [`push_py_list`] writes them, at most [`MAX_ECHOED_NAMES`] of them (`..., ... and
/// N more]`), each cut at [`MAX_ECHOED_NAME_CHARS`] characters (`...` appended); `<none>` when
/// empty. What `ToolArgumentError`'s message writes too.
pub fn push_capped_names(out: &mut String, names: &[String]) {
    if names.is_empty() {
        out.push_str("<none>");
        return;
    }
    out.push('[');
    for (i, n) in names.iter().take(MAX_ECHOED_NAMES).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let mut shown = String::new();
        push_capped_name(&mut shown, n);
        push_py_str(out, &shown);
    }
    if names.len() > MAX_ECHOED_NAMES {
        let _ = write!(out, ", ... and {} more", names.len() - MAX_ECHOED_NAMES);
    }
    out.push(']');
}

/// `name` cut at [`MAX_ECHOED_NAME_CHARS`] characters (`...` appended when cut).
pub fn push_capped_name(out: &mut String, name: &str) {
    match name.char_indices().nth(MAX_ECHOED_NAME_CHARS) {
        Some((end, _)) => {
            out.push_str(&name[..end]);
            out.push_str("...");
        }
        None => out.push_str(name),
    }
}

/// A list of names written as Python's `repr` writes a list of strings: `['a', "it's"]`.
pub fn py_list(names: &[String]) -> String {
    let mut out = String::with_capacity(2 + names.iter().map(|n| n.len() + 4).sum::<usize>());
    push_py_list(&mut out, names);
    out
}

/// [`py_list`] appended to `out`.
pub fn push_py_list(out: &mut String, names: &[String]) {
    out.push('[');
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_py_str(out, n);
    }
    out.push(']');
}

fn push_py_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// The JSON text of a value (`serde_json`'s compact form, written straight to a buffer rather
/// than through `Display`).
fn json_text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// A short rendering of a value for a reason: its JSON text, cut at 60 characters.
fn show(v: &Value) -> String {
    let text = json_text(v);
    // A text of at most 60 bytes has at most 60 characters.
    if text.len() <= 60 || text.chars().count() <= 60 {
        return text;
    }
    let end = text.char_indices().nth(57).map_or(text.len(), |(i, _)| i);
    format!("{}...", &text[..end])
}

/// `{head}, got integer 1001`, `{head}, got null`: a reason ending with what was sent.
fn then_got(head: String, v: &Value) -> String {
    let mut out = head;
    out.push_str(", got ");
    match v {
        Value::Null => out.push_str("null"),
        Value::Object(_) | Value::Array(_) => {
            out.push_str(article(json_type(v)));
            out.push(' ');
            out.push_str(json_type(v));
        }
        _ => {
            out.push_str(json_type(v));
            out.push(' ');
            out.push_str(&show(v));
        }
    }
    out
}

/// The subschema holding the keyword an error came from.
fn keyword_parent<'s>(schema: &'s Value, err: &ValidationError<'_>) -> Option<&'s Value> {
    let ptr = err.schema_path().as_str();
    let parent = &ptr[..ptr.rfind('/').unwrap_or(0)];
    schema.pointer(parent)
}

/// A model-facing reason for one validation error: what was expected and what was sent.
fn reason(schema: &Value, err: &ValidationError<'_>) -> String {
    let inst: &Value = err.instance();
    match err.kind() {
        ValidationErrorKind::Type { .. } | ValidationErrorKind::Enum { .. } | ValidationErrorKind::Constant { .. }
            if inst.is_null() && has_default(schema, err) =>
        {
            let default = keyword_parent(schema, err)
                .and_then(|s| s.get("default"))
                .map_or_else(String::new, show);
            format!("null is not accepted here; omit the argument to use its default ({default})")
        }
        ValidationErrorKind::Type { kind } => {
            let mut head = String::with_capacity(64);
            head.push_str("expected ");
            match kind {
                TypeKind::Single(t) => head.push_str(t.as_str()),
                TypeKind::Multiple(set) => {
                    for (i, t) in set.iter().enumerate() {
                        if i > 0 {
                            head.push_str(" or ");
                        }
                        head.push_str(t.as_str());
                    }
                }
            }
            then_got(head, inst)
        }
        ValidationErrorKind::Enum { options } => {
            let mut head = String::with_capacity(96);
            head.push_str("must be one of ");
            head.push_str(&json_text(options));
            then_got(head, inst)
        }
        ValidationErrorKind::Constant { expected_value } => then_got(format!("must be {}", expected_value), inst),
        ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => {
            let expected = keyword_parent(schema, err).map_or_else(|| "another value".to_owned(), describe);
            then_got(format!("expected {expected}"), inst)
        }
        ValidationErrorKind::Required { property } => {
            format!("missing required field {property}")
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            format!("unexpected field(s) {}", json_list(unexpected))
        }
        ValidationErrorKind::FalseSchema => "not allowed here (no such field or position)".to_owned(),
        ValidationErrorKind::Minimum { limit } => then_got(format!("must be >= {limit}"), inst),
        ValidationErrorKind::Maximum { limit } => then_got(format!("must be <= {limit}"), inst),
        ValidationErrorKind::ExclusiveMinimum { limit } => then_got(format!("must be > {limit}"), inst),
        ValidationErrorKind::ExclusiveMaximum { limit } => then_got(format!("must be < {limit}"), inst),
        ValidationErrorKind::MultipleOf { .. } => {
            let m = keyword_parent(schema, err).and_then(|s| s.get("multipleOf")).cloned();
            then_got(format!("must be a multiple of {}", m.unwrap_or(Value::Null)), inst)
        }
        ValidationErrorKind::MinLength { limit } => {
            then_got(format!("must be at least {limit} character(s) long"), inst)
        }
        ValidationErrorKind::MaxLength { limit } => {
            then_got(format!("must be at most {limit} character(s) long"), inst)
        }
        ValidationErrorKind::MinItems { limit } => {
            format!(
                "must have at least {limit} item(s), got {}",
                inst.as_array().map_or(0, Vec::len)
            )
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!(
                "must have at most {limit} item(s), got {}",
                inst.as_array().map_or(0, Vec::len)
            )
        }
        ValidationErrorKind::UniqueItems => "items must be unique, got duplicates".to_owned(),
        ValidationErrorKind::Pattern { pattern } => match pattern_words(pattern) {
            Some(words) => then_got(format!("expected {words}"), inst),
            None => then_got(
                format!("must match the pattern {}", Value::String(pattern.clone())),
                inst,
            ),
        },
        ValidationErrorKind::Format { format } if format == "date-time" && lacks_offset(inst) => then_got(
            "expected a date-time with a UTC offset (RFC 3339): add an offset such as Z or +01:00 \
             (e.g. \"2024-05-01T12:00:00Z\")"
                .to_owned(),
            inst,
        ),
        ValidationErrorKind::Format { format } => {
            // A format that also has a pattern of ours: the pattern's words, which say exactly what
            // is accepted (the same reason as the pattern's own failure, which then merges with it).
            match keyword_parent(schema, err)
                .and_then(|s| s.get("pattern"))
                .and_then(Value::as_str)
                .and_then(pattern_words)
            {
                Some(words) => then_got(format!("expected {words}"), inst),
                None => then_got(format!("expected a string in {} format", format_name(format)), inst),
            }
        }
        ValidationErrorKind::MinProperties { limit } => format!("must have at least {limit} field(s)"),
        ValidationErrorKind::MaxProperties { limit } => format!("must have at most {limit} field(s)"),
        _ => err.to_string(),
    }
}

/// True when the schema at the failing keyword gives a default (for a `null` sent instead).
fn has_default(schema: &Value, err: &ValidationError<'_>) -> bool {
    keyword_parent(schema, err).is_some_and(|s| s.get("default").is_some())
}

/// A string that is an RFC 3339 date-time except that it has no offset
/// (`2024-05-01T12:00:00`, `2024-05-01 12:00`).
fn lacks_offset(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    b.len() >= 16
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && !s[16..].contains(['Z', 'z', '+'])
        && !s[16..].contains('-')
}

fn format_name(format: &str) -> String {
    match format {
        "date-time" => "date-time (RFC 3339, e.g. \"2024-05-01T12:00:00Z\")".to_owned(),
        "date" => "date (YYYY-MM-DD)".to_owned(),
        "time" => "time (HH:MM:SS with an offset, e.g. \"12:00:00Z\")".to_owned(),
        "uuid" => "uuid (e.g. \"123e4567-e89b-12d3-a456-426614174000\")".to_owned(),
        other => other.to_owned(),
    }
}

/// A short human description of what a schema admits: `string`, `one of ["a", "b"]`,
/// `array of integer`, `integer or null`.
pub fn describe(schema: &Value) -> String {
    let Value::Object(s) = schema else {
        return if schema == &Value::Bool(false) {
            "nothing".into()
        } else {
            "any value".into()
        };
    };
    if let Some(options) = s.get("enum") {
        return format!("one of {options}");
    }
    if let Some(c) = s.get("const") {
        return format!("exactly {c}");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.get(key) {
            return branches.iter().map(describe).collect::<Vec<_>>().join(" or ");
        }
    }
    match s.get("type") {
        Some(Value::String(t)) if t == "array" => match s.get("items") {
            Some(items) if items.as_object().is_some_and(|o| !o.is_empty()) => {
                format!("array of {}", describe(items))
            }
            _ => "array".into(),
        },
        Some(Value::String(t)) if t == "string" => match s.get("format").and_then(Value::as_str) {
            Some(f) => format!("string ({f})"),
            None => "string".into(),
        },
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ if s.contains_key("properties") => "object".into(),
        _ => "any value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_whose_only_fault_is_a_lone_surrogate_says_so_and_what_to_send() {
        let said = |t: &str| text_not_json(t, "parser".into());
        let high = lone_surrogate_message(0xd800);
        assert_eq!(
            high,
            "a string holds the lone surrogate \\ud800, half of a UTF-16 pair and no character: send the \
             character itself, or both halves of its pair"
        );
        assert_eq!(said(r#"{"s": "\ud800"}"#), high);
        assert_eq!(said(r#"{"s": "a\uD800b"}"#), high);
        assert_eq!(said(r#"{"s": "\ud800\u0041"}"#), high);
        assert_eq!(said(r#"{"s": "\udc00"}"#), lone_surrogate_message(0xdc00));
        // the first of several, pairs skipped
        assert_eq!(
            said(r#"{"a": "\ud83d\ude00", "b": "\udbff", "c": "\ud800"}"#),
            lone_surrogate_message(0xdbff)
        );
        // an escaped backslash is no escape
        assert_eq!(said(r#"{"s": "\\ud800", "t": [}"#), "parser");
        // another fault as well: the parser's words
        assert_eq!(said(r#"{"s": "\ud800", "t": [}"#), "parser");
        assert_eq!(said(r#"{"s": "\ud8"}"#), "parser");
        assert_eq!(said("{"), "parser");
    }

    #[test]
    fn a_value_that_is_not_json_is_one_problem_at_the_root() {
        assert_eq!(ROOT_PATH, "<root>");
        assert_eq!(
            not_json_problems("NaN is not allowed"),
            vec![("<root>".to_owned(), "not a JSON value: NaN is not allowed".to_owned())]
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_is_validated_as_a_float() {
        assert_eq!(
            big_int_stand_in(Some(1.8446744073709552e19), || unreachable!()),
            1.8446744073709552e19
        );
        assert_eq!(big_int_stand_in(None, || false), f64::MAX);
        assert_eq!(big_int_stand_in(None, || true), -f64::MAX);
    }
    use serde_json::json;

    #[test]
    fn invalid_schemas_are_refused_when_built_not_on_first_use() {
        // checked against the meta-schema (compiled lazily)
        let e = SchemaValidator::new(json!({"type": "object", "properties": {"n": {"type": "integr"}}}))
            .err()
            .expect("refused");
        assert!(e.starts_with("invalid JSON Schema: "), "{e}");
        let e = SchemaValidator::new(json!({"properties": {"n": {"minimum": "one"}}}))
            .err()
            .expect("refused");
        assert!(e.starts_with("invalid JSON Schema: "), "{e}");
        // compiled at once: a regular expression, a reference
        let e = SchemaValidator::new(json!({"properties": {"s": {"type": "string", "pattern": "(["}}}))
            .err()
            .expect("refused");
        assert!(e.starts_with("invalid JSON Schema: "), "{e}");
        let e = SchemaValidator::new(json!({"properties": {"s": {"$ref": "#/$defs/Missing"}}}))
            .err()
            .expect("refused");
        assert!(e.starts_with("invalid JSON Schema: "), "{e}");
        assert!(needs_compiler(&json!({"anyOf": [{"patternProperties": {}}]})));
        assert!(!needs_compiler(
            &json!({"type": "object", "properties": {"a": {"enum": ["x"]}}})
        ));
    }

    /// The input schema of the benchmark tool (benches/compare.py), as `define` assembles it.
    fn search_docs_schema() -> Value {
        json!({"type": "object", "properties": {
            "query": {"type": "string", "description": "The words to look for."},
            "scope": {"type": "string", "enum": ["all", "code", "issues", "docs"], "description": "Which part."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Only pages with these tags."},
            "exact": {"type": "boolean", "description": "Match as one phrase."},
            "limit": {"type": "integer", "description": "The most titles.", "default": 10},
            "min_score": {"anyOf": [{"type": "number"}, {"type": "null"}], "description": "Drop below.", "default": null}},
            "required": ["query", "scope", "tags", "exact"], "additionalProperties": false})
    }

    #[test]
    fn generated_schemas_skip_the_meta_schema_and_stay_lazy() {
        let schema = search_docs_schema();
        assert!(plain_schema(&schema, 0));
        let v = SchemaValidator::new(schema.clone()).expect("valid");
        assert!(v.compiled.get().is_none());
        assert_eq!(v.schema(), &schema);
        for plain in [
            json!(true),
            json!({"type": ["string", "null"], "format": "date-time", "title": "When"}),
            json!({"type": "array", "prefixItems": [{"type": "integer"}, {}], "items": false, "minItems": 2, "maxItems": 2}),
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
            json!({"type": "object", "propertyNames": {"minLength": 1}, "additionalProperties": {"type": "integer"}}),
            json!({"type": "integer", "minimum": 0, "exclusiveMaximum": 10.5, "multipleOf": 0.5}),
            json!({"allOf": [false], "description": "x", "default": {"type": 1, "items": [2, "x"]}}),
        ] {
            assert!(plain_schema(&plain, 0), "{plain}");
            assert!(jsonschema::meta::is_valid(&plain), "{plain}");
        }
    }

    #[test]
    fn schemas_outside_the_plain_subset_are_checked_as_before() {
        // (schema, the meta-schema's or the compiler's message), none of them plain.
        let cases = [
            (
                json!({"type": "strng"}),
                r#""strng" is not valid under any of the schemas listed in the 'anyOf' keyword"#,
            ),
            (
                json!({"type": ["string", "string"]}),
                r#"["string","string"] is not valid under any of the schemas listed in the 'anyOf' keyword"#,
            ),
            (
                json!({"type": []}),
                r#"[] is not valid under any of the schemas listed in the 'anyOf' keyword"#,
            ),
            (json!({"description": 5}), r#"5 is not of type "string""#),
            (json!({"minimum": "0"}), r#""0" is not of type "number""#),
            (json!({"multipleOf": 0}), "0 is less than or equal to the minimum of 0"),
            (json!({"minItems": -1}), "-1 is less than the minimum of 0"),
            (json!({"required": ["a", "a"]}), r#"["a","a"] has non-unique elements"#),
            (json!({"anyOf": []}), "[] has less than 1 item"),
            (json!({"items": 3}), r#"3 is not of types "boolean", "object""#),
            (json!({"enum": "a"}), r#""a" is not of type "array""#),
            (
                json!({"properties": {"a": {"uniqueItems": "yes"}}}),
                r#""yes" is not of type "boolean""#,
            ),
        ];
        for (schema, message) in cases {
            assert!(!plain_schema(&schema, 0), "{schema}");
            let e = SchemaValidator::new(schema.clone()).err().expect("refused");
            assert_eq!(e, format!("invalid JSON Schema: {message}"), "{schema}");
        }
        // Valid but outside the subset: still accepted (after the meta-schema), still lazy.
        for schema in [
            json!({"minItems": 2.0}),
            json!({"x-vendor": 1}),
            json!({"dependentRequired": {"a": ["b"]}}),
        ] {
            assert!(!plain_schema(&schema, 0), "{schema}");
            assert!(SchemaValidator::new(schema).expect("valid").compiled.get().is_none());
        }
        // What compilation checks is compiled at once, wherever the keyword is.
        for schema in [
            json!({"properties": {"s": {"type": "string", "pattern": "a+"}}}),
            json!({"properties": {"pattern": {"type": "string"}}}),
            json!({"type": "string", "enum": [{"$ref": "x"}]}),
        ] {
            assert!(!plain_schema(&schema, 0), "{schema}");
            assert!(SchemaValidator::new(schema).expect("valid").compiled.get().is_some());
        }
        // Too deep to follow: the meta-schema decides.
        let mut deep = json!({"type": "string"});
        for _ in 0..PLAIN_MAX_DEPTH {
            deep = json!({"items": deep});
        }
        assert!(!plain_schema(&deep, 0));
        assert!(SchemaValidator::new(deep).is_ok());
    }

    /// Random schemas over the listed keywords, unlisted ones and ill-shaped values: whenever
    /// `plain_schema` accepts one, the meta-schema accepts it and nothing in it needs the
    /// compiler (the subset is sound). Both outcomes must occur often for the test to mean much.
    #[test]
    fn plain_schemas_are_always_meta_valid() {
        struct Rng(u64);
        impl Rng {
            fn below(&mut self, n: usize) -> usize {
                // xorshift64*
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
            }
        }
        const KEYWORDS: &[&str] = &[
            "type",
            "title",
            "description",
            "format",
            "$comment",
            "default",
            "const",
            "enum",
            "examples",
            "uniqueItems",
            "deprecated",
            "readOnly",
            "writeOnly",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
            "minContains",
            "maxContains",
            "required",
            "items",
            "additionalProperties",
            "propertyNames",
            "contains",
            "not",
            "if",
            "then",
            "else",
            "prefixItems",
            "allOf",
            "anyOf",
            "oneOf",
            "properties",
            "dependentSchemas",
            "$defs",
            "pattern",
            "$ref",
            "x-extra",
            "dependentRequired",
        ];
        fn value(rng: &mut Rng, depth: usize) -> Value {
            match rng.below(if depth > 3 { 22 } else { 27 }) {
                0 => json!("string"),
                1 => json!("strng"),
                2 => json!(-1),
                3 => json!(0),
                4 => json!(2),
                5 => json!(2.0),
                6 => json!(0.5),
                7 => json!(-0.5),
                8 => json!(true),
                9 => json!(false),
                10 => json!(null),
                11 => json!([]),
                12 => json!(["string"]),
                13 => json!(["string", "null"]),
                14 => json!(["string", "string"]),
                15 => json!(["a", "b"]),
                16 => json!(["a", 1]),
                17 => json!({}),
                18 => json!({"pattern": "x"}),
                19 => json!([1, {"$ref": "#"}]),
                20 => json!(["number", "integer", "boolean", "array", "object", "null", "string"]),
                21 => json!("date-time"),
                22 | 23 => schema(rng, depth + 1),
                24 => Value::Array((0..rng.below(3)).map(|_| schema(rng, depth + 1)).collect()),
                _ => {
                    let names = ["a", "b", "pattern", "type"];
                    Value::Object(
                        (0..rng.below(3))
                            .map(|_| (names[rng.below(names.len())].to_owned(), schema(rng, depth + 1)))
                            .collect(),
                    )
                }
            }
        }
        fn schema(rng: &mut Rng, depth: usize) -> Value {
            match rng.below(10) {
                0 => json!(true),
                1 => json!(false),
                _ => Value::Object(
                    (0..rng.below(4))
                        .map(|_| (KEYWORDS[rng.below(KEYWORDS.len())].to_owned(), value(rng, depth)))
                        .collect(),
                ),
            }
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut plain, mut other) = (0, 0);
        for _ in 0..20_000 {
            let s = schema(&mut rng, 0);
            if plain_schema(&s, 0) {
                plain += 1;
                assert!(
                    jsonschema::meta::is_valid(&s),
                    "plain yet refused by the meta-schema: {s}"
                );
                assert!(!needs_compiler(&s), "plain yet needs the compiler: {s}");
            } else {
                other += 1;
            }
        }
        assert!(plain > 2_000 && other > 2_000, "plain {plain}, other {other}");
    }

    #[test]
    fn a_lazily_compiled_schema_validates_like_an_eager_one() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
                            "required": ["n"], "additionalProperties": false});
        let lazy = SchemaValidator::new(schema.clone()).expect("valid");
        assert!(lazy.compiled.get().is_none());
        assert!(lazy.is_valid(&json!({"n": 2})));
        assert!(lazy.compiled.get().is_some());
        assert_eq!(
            lazy.problems(&json!({"n": 0})),
            vec![("n".to_owned(), "must be >= 1, got integer 0".to_owned())]
        );
    }

    fn check_stock() -> ArgumentValidator {
        ArgumentValidator::new(
            json!({
                "type": "object",
                "properties": {
                    "sku": {"type": "string"},
                    "warehouse": {"enum": ["AMS", "SIN", "any"], "type": "string", "default": "any"},
                    "qty": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
                    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                    "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                             "items": false, "minItems": 2, "maxItems": 2},
                    "when": {"type": "string", "format": "date"},
                    "ctx": {"type": "integer"}
                },
                "required": ["warehouse", "sku"],
                "additionalProperties": false
            }),
            vec!["context".into()],
        )
        .unwrap()
    }

    fn problems(v: &ArgumentValidator, args: Value) -> ArgumentProblems {
        match v.check(&args) {
            Err(Rejection::Problems(p)) => p,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn valid_call_passes() {
        let v = check_stock();
        assert_eq!(
            v.check(&json!({"sku": "SKU-1", "warehouse": "AMS", "qty": null})),
            Ok(())
        );
        assert_eq!(
            v.check(&json!({"sku": "SKU-1", "warehouse": "SIN", "pair": [1, "a"]})),
            Ok(())
        );
    }

    #[test]
    fn invalid_values_are_sorted_by_signature_position_stably() {
        let v = check_stock();
        // Sent in reverse signature order; two problems of `tags` keep the validator's order.
        let p = problems(
            &v,
            json!({"when": 5, "tags": [1, 1], "qty": "x", "sku": 2, "warehouse": "AMS"}),
        );
        assert_eq!(
            p.invalid,
            vec![
                ("sku".to_owned(), "expected string, got integer 2".to_owned()),
                (
                    "qty".to_owned(),
                    "expected integer or null, got string \"x\"".to_owned()
                ),
                ("tags".to_owned(), "items must be unique, got duplicates".to_owned()),
                ("tags[0]".to_owned(), "expected string, got integer 1".to_owned()),
                ("tags[1]".to_owned(), "expected string, got integer 1".to_owned()),
                ("when".to_owned(), "expected string, got integer 5".to_owned()),
            ]
        );
    }

    #[test]
    fn shown_values_are_cut_at_sixty_characters() {
        assert_eq!(show(&json!("é".repeat(58))), format!("\"{}\"", "é".repeat(58)));
        assert_eq!(show(&json!("é".repeat(59))), format!("\"{}...", "é".repeat(56)));
        assert_eq!(show(&json!("a\"b")), r#""a\"b""#);
        assert_eq!(
            check_stock().accepted_repr(),
            "['sku', 'warehouse', 'qty', 'tags', 'pair', 'when', 'ctx']"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let v = check_stock();
        let p = problems(&v, json!({"zeta": 1, "warehouse": "LHR", "alpha": 2, "qty": 0}));
        assert_eq!(p.unexpected, vec!["zeta", "alpha"]);
        assert_eq!(p.missing, vec!["sku"]);
        assert_eq!(
            p.invalid,
            vec![
                (
                    "warehouse".to_owned(),
                    "must be one of [\"AMS\",\"SIN\",\"any\"], got string \"LHR\"".to_owned()
                ),
                ("qty".to_owned(), "must be >= 1, got integer 0".to_owned()),
            ]
        );
        assert_eq!(
            p.summary(5),
            "unexpected argument(s) ['zeta', 'alpha']; missing required argument(s) ['sku']; \
             invalid argument(s): warehouse: must be one of [\"AMS\",\"SIN\",\"any\"], got string \"LHR\"; \
             qty: must be >= 1, got integer 0"
        );
    }

    #[test]
    fn strict_types_no_coercion() {
        let v = check_stock();
        let p = problems(&v, json!({"sku": 1001, "warehouse": "AMS", "qty": "5"}));
        assert_eq!(
            p.invalid,
            vec![
                ("sku".to_owned(), "expected string, got integer 1001".to_owned()),
                (
                    "qty".to_owned(),
                    "expected integer or null, got string \"5\"".to_owned()
                ),
            ]
        );
        let p = problems(&v, json!({"sku": "a", "warehouse": "AMS", "qty": true}));
        assert_eq!(
            p.invalid,
            vec![(
                "qty".to_owned(),
                "expected integer or null, got boolean true".to_owned()
            )]
        );
        let p = problems(&v, json!({"sku": null, "warehouse": "AMS"}));
        assert_eq!(
            p.invalid,
            vec![("sku".to_owned(), "expected string, got null".to_owned())]
        );
    }

    #[test]
    fn nested_paths_and_containers() {
        let v = check_stock();
        let p = problems(
            &v,
            json!({"sku": "a", "warehouse": "AMS", "tags": ["x", 3, "x"], "pair": [1, "b", 3], "when": "May 1"}),
        );
        assert_eq!(
            p.invalid,
            vec![
                ("tags".to_owned(), "items must be unique, got duplicates".to_owned()),
                ("tags[1]".to_owned(), "expected string, got integer 3".to_owned()),
                ("pair".to_owned(), "must have at most 2 item(s), got 3".to_owned()),
                (
                    "pair[2]".to_owned(),
                    "not allowed here (no such field or position)".to_owned()
                ),
                (
                    "when".to_owned(),
                    "expected a string in date (YYYY-MM-DD) format, got string \"May 1\"".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn optional_values_report_the_inner_problem() {
        let v = ArgumentValidator::new(
            json!({"type": "object", "properties": {
                "pair": {"anyOf": [{"type": "array", "prefixItems": [{"type": "integer"}], "items": false}, {"type": "null"}]},
                "n": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
                "u": {"anyOf": [{"type": "integer"}, {"type": "string"}]}
            }}),
            vec![],
        )
        .unwrap();
        let p = problems(&v, json!({"pair": [1, 2], "n": 0, "u": 1.5}));
        assert_eq!(
            p.invalid,
            vec![
                (
                    "pair[1]".to_owned(),
                    "not allowed here (no such field or position)".to_owned()
                ),
                ("n".to_owned(), "must be >= 1, got integer 0".to_owned()),
                ("u".to_owned(), "expected integer or string, got number 1.5".to_owned()),
            ]
        );
    }

    #[test]
    fn non_objects_are_rejected() {
        let v = check_stock();
        assert_eq!(v.check(&json!([1])), Err(Rejection::NotAnObject("array")));
        assert_eq!(v.check(&json!(null)), Err(Rejection::NotAnObject("null")));
        assert_eq!(
            Rejection::NotAnObject("array").summary(5),
            "the arguments must be a JSON object of named arguments, got an array"
        );
    }

    #[test]
    fn injected_keys_are_dropped() {
        let v = check_stock();
        let mut args = json!({"sku": "a", "warehouse": "AMS", "context": {"x": 1}});
        assert!(v.drop_injected(&mut args));
        assert_eq!(v.check(&args), Ok(()));
    }

    #[test]
    fn summary_caps_spelled_out_problems() {
        let p = ArgumentProblems {
            invalid: (0..7).map(|i| (format!("a{i}"), "bad".to_owned())).collect(),
            ..Default::default()
        };
        assert_eq!(
            p.summary(5),
            "invalid argument(s): a0: bad; a1: bad; a2: bad; a3: bad; a4: bad; and 2 more"
        );
    }

    #[test]
    fn describe_schemas() {
        assert_eq!(
            describe(&json!({"type": "array", "items": {"type": "integer"}})),
            "array of integer"
        );
        assert_eq!(
            describe(&json!({"anyOf": [{"enum": [1, 2]}, {"type": "null"}]})),
            "one of [1,2] or null"
        );
        assert_eq!(describe(&json!({})), "any value");
    }

    #[test]
    fn python_list_repr() {
        let names = vec![
            "a".to_owned(),
            "it's".to_owned(),
            "q\"'".to_owned(),
            "t\tb\\".to_owned(),
        ];
        assert_eq!(py_list(&names), r#"['a', "it's", 'q"\'', 't\tb\\']"#);
    }

    #[test]
    fn paths_keep_empty_and_numeric_keys() {
        let v = ArgumentValidator::new(
            json!({"type": "object", "properties": {
                "d": {"type": "object", "additionalProperties": {"type": "integer"}},
                "l": {"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}}}
            }}),
            vec![],
        )
        .unwrap();
        let p = problems(&v, json!({"d": {"": "x", "0": "y", "a/b~c": "z"}, "l": [{"1": "w"}]}));
        assert_eq!(
            p.invalid,
            vec![
                ("d[\"\"]".to_owned(), "expected integer, got string \"x\"".to_owned()),
                ("d[\"0\"]".to_owned(), "expected integer, got string \"y\"".to_owned()),
                (
                    "d[\"a/b~c\"]".to_owned(),
                    "expected integer, got string \"z\"".to_owned()
                ),
                (
                    "l[0][\"1\"]".to_owned(),
                    "expected integer, got string \"w\"".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn integral_floats_become_integers_where_the_schema_says_integer() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "pairs": {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}]}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}}
        }});
        let mut v = json!({"n": 1.0, "x": 2.0, "opt": 3.0, "pairs": [[4.0, 5.0]], "counts": {"a": 6.0}, "big": 1e30});
        let fix = integral_floats_to_ints(&schema, &mut v);
        assert_eq!((fix.changed, fix.beyond_64_bits), (true, false));
        let places: Vec<&str> = fix.places.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(places, ["n", "opt", "pairs[0][0]", "counts.a"]);
        assert_eq!(
            v.to_string(),
            r#"{"n":1,"x":2.0,"opt":3,"pairs":[[4,5.0]],"counts":{"a":6},"big":1e+30}"#
        );
        let mut ints = json!({"n": 1});
        assert_eq!(integral_floats_to_ints(&schema, &mut ints), IntegerFix::default());
        // At or beyond 2^63: left a float, reported for the binding to make a Python int.
        let mut huge = json!({"n": 1e300, "x": 1e300});
        let fix = integral_floats_to_ints(&schema, &mut huge);
        assert_eq!(
            (fix.changed, fix.beyond_64_bits, fix.places),
            (false, true, vec![("n".to_owned(), 1e300)])
        );
        // An enum that lists the integer: `Literal[1, "one", 2.5]` given 1.0 gets 1; 2.5 stays.
        let lit = json!({"type": "object", "properties": {"v": {"enum": [1, "one", 2.5]}, "w": {"enum": [1.0, 2]}}});
        let mut v = json!({"v": 1.0, "w": 1.0});
        assert!(integral_floats_to_ints(&lit, &mut v).changed);
        assert_eq!(v.to_string(), r#"{"v":1,"w":1.0}"#);
    }

    #[test]
    fn number_literals_are_read_with_their_paths() {
        let text = r#"{"n": 1e-400, "a\"b": [1, {"x": -2.5E+3}], "s": "7, 8", "m": {"k": [0, 9.0]}}"#;
        assert_eq!(
            number_literals(text),
            [
                ("n", "1e-400"),
                ("[\"a\\\"b\"][0]", "1"),
                ("[\"a\\\"b\"][1].x", "-2.5E+3"),
                ("m.k[0]", "0"),
                ("m.k[1]", "9.0")
            ]
            .map(|(p, l)| (p.to_owned(), l.to_owned()))
        );
    }

    #[test]
    fn integer_places_take_only_literals_that_are_exactly_that_integer() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "xs": {"type": "array", "items": {"type": "integer"}}, "x": {"type": "number"}
        }});
        let check = |text: &str| {
            let mut v: Value = serde_json::from_str(text).unwrap();
            let fix = integral_floats_to_ints(&schema, &mut v);
            check_integer_literals(text, &fix.places)
        };
        let r = |p: &str, why: &str| vec![(p.to_owned(), why.to_owned())];
        assert_eq!(check(r#"{"n": 1e-400}"#), r("n", "expected integer, got number 1e-400"));
        assert_eq!(
            check(r#"{"n": 1.00000000000000000001}"#),
            r("n", "expected integer, got number 1.00000000000000000001")
        );
        assert_eq!(
            check(r#"{"xs": [1, 0.0000001e-400]}"#),
            r("xs[1]", "expected integer, got number 0.0000001e-400")
        );
        assert_eq!(
            check(r#"{"n": 9007199254740993.0}"#),
            r(
                "n",
                "9007199254740993.0 has more digits than a JSON float holds exactly (it would arrive as \
                   9007199254740992); send the whole number as plain digits, without a fraction or exponent"
            )
        );
        assert_eq!(
            check(r#"{"n": 1e30}"#),
            r(
                "n",
                "1e30 has more digits than a JSON float holds exactly (it would arrive as \
                   1000000000000000019884624838656); send the whole number as plain digits, without a fraction or \
                   exponent"
            )
        );
        for fine in [
            r#"{"n": 1.0}"#,
            r#"{"n": 1e2}"#,
            r#"{"n": -1.5e1}"#,
            r#"{"n": 0.0}"#,
            r#"{"n": -0.0}"#,
            r#"{"n": 1e22}"#,
            r#"{"n": 9007199254740992.0}"#,
            r#"{"x": 1e-400}"#,
            r#"{"n": 5, "x": 2.5}"#,
        ] {
            assert_eq!(check(fine), vec![], "{fine}");
        }
    }

    #[test]
    fn oversized_numbers_are_named_with_their_path() {
        let big_int = "9".repeat(5000);
        let big_float = format!("{}.0", "9".repeat(401));
        assert_eq!(
            oversized_number(&format!(r#"{{"a": 1, "n": {big_int}}}"#), 4300),
            Some((
                "n".into(),
                "99999999999999999999... (5000 characters) is too long: 5000 digits, at most 4300; \
                               send a smaller number"
                    .into()
            ))
        );
        assert_eq!(
            oversized_number(&format!(r#"{{"xs": [{big_float}]}}"#), 4300),
            Some((
                "xs[0]".into(),
                "99999999999999999999... (403 characters) is beyond the largest JSON number this \
                                   tool reads (about 1.8e308); a whole number may be sent as plain digits (at most \
                                   4300), without a fraction or exponent"
                    .into()
            ))
        );
        assert_eq!(
            oversized_number(r#"{"n": 1e400}"#, 4300)
                .unwrap()
                .1
                .split(" is ")
                .next(),
            Some("1e400")
        );
        assert_eq!(oversized_number(r#"{"n": 1e300, "m": 12345}"#, 4300), None);
    }

    #[test]
    fn long_digit_runs_choose_the_exact_integer_reader() {
        use ArgumentsText::*;
        for (text, read) in [
            ("", Empty),
            ("  \n", Empty),
            ("null", Empty),
            (" null ", Empty),
            ("{}", Plain),
            ("nul", Plain),
            (r#"{"n": 922337203685477580}"#, Plain), // 18 digits: within 64 bits
            (r#"{"n": 9223372036854775807}"#, ExactIntegers), // 19: may be beyond
            (r#"{"n": 123456789012345678901234567890}"#, ExactIntegers),
            (r#"{"id": "1234567890123456789"}"#, ExactIntegers), // in a string: read exactly all the same
            (r#"{"a": 123456789, "b": 1234567890}"#, Plain),     // runs are not added up across a separator
            (r#"{"x": 1.2345678901234567890}"#, ExactIntegers),  // a fraction of 19 digits too
        ] {
            assert_eq!(arguments_text(text), read, "{text:?}");
        }
        assert_eq!(LONG_DIGITS, i64::MAX.to_string().len());
    }

    #[test]
    fn an_invalid_rejection_carries_only_its_values() {
        let r = Rejection::invalid(vec![("n".into(), "too long".into())]);
        assert_eq!(
            r.to_problems(),
            ArgumentProblems {
                unexpected: vec![],
                missing: vec![],
                invalid: vec![("n".into(), "too long".into())]
            }
        );
    }

    #[test]
    fn echoed_names_are_capped_and_none_is_said() {
        let mut out = String::new();
        push_capped_names(&mut out, &[]);
        assert_eq!(out, "<none>");
        let names: Vec<String> = (0..25).map(|i| format!("k{i}")).collect();
        let mut out = String::new();
        push_capped_names(&mut out, &names);
        assert!(out.starts_with("['k0', 'k1', "), "{out}");
        assert!(out.ends_with("'k19', ... and 5 more]"), "{out}");
        let mut out = String::new();
        push_capped_names(&mut out, &["é".repeat(70)]);
        assert_eq!(out, format!("['{}...']", "é".repeat(64)));
    }

    #[test]
    fn a_missing_offset_is_recognised() {
        for s in ["2024-05-01T12:00:00", "2024-05-01t12:00", "2024-05-01 12:00:00.5"] {
            assert!(lacks_offset(&json!(s)), "{s}");
        }
        for s in [
            "2024-05-01T12:00:00Z",
            "2024-05-01T12:00:00+01:00",
            "2024-05-01T12:00:00-05:00",
            "May 1",
            "2024-05-01",
        ] {
            assert!(!lacks_offset(&json!(s)), "{s}");
        }
    }

    #[test]
    fn path_notation() {
        let segs = vec![
            Seg::Key("a".into()),
            Seg::Index(0),
            Seg::Key("b c".into()),
            Seg::Key("d".into()),
        ];
        assert_eq!(display_path(&segs), "a[0][\"b c\"].d");
    }

    #[test]
    fn child_schemas() {
        let s = json!({
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": {"type": "string"},
            "prefixItems": [{"type": "boolean"}],
            "items": {"type": "null"},
            "anyOf": [{"const": 1}],
            "oneOf": [{"const": 2}, {"const": 3}]
        });
        let s = s.as_object().unwrap();
        let props = PropertySchemas::of(s);
        assert_eq!(props.get("a"), Some(&json!({"type": "integer"})));
        assert_eq!(props.get("b"), Some(&json!({"type": "string"})));
        assert_eq!(props.others(), Some(&json!({"type": "string"})));
        let items = ItemSchemas::of(s);
        assert_eq!(items.get(0), Some(&json!({"type": "boolean"})));
        assert_eq!(items.get(5), Some(&json!({"type": "null"})));
        let order: Vec<&Value> = branch_schemas(s).collect();
        assert_eq!(
            order,
            [&json!({"const": 1}), &json!({"const": 2}), &json!({"const": 3})]
        );
        let bare = json!({}).as_object().unwrap().clone();
        assert_eq!(PropertySchemas::of(&bare).get("a"), None);
        assert_eq!(ItemSchemas::of(&bare).get(0), None);
        assert_eq!(branch_schemas(&bare).count(), 0);
    }

    #[test]
    fn why_a_host_value_is_not_json() {
        assert_eq!(
            too_deep_message(),
            format!("arrays and objects are nested more than {MAX_NESTING} levels deep")
        );
        assert_eq!(
            not_a_number_message(f64::NAN),
            "NaN is not a JSON number; send a finite number"
        );
        assert_eq!(
            not_a_number_message(f64::INFINITY),
            "inf is not a JSON number; send a finite number"
        );
        assert_eq!(not_json_message("bytes"), "not a JSON value: bytes");
    }
}
