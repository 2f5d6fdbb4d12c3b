//! Provider renderings of a tool definition: the JSON each model API expects in its
//! tools list, derived from the one input schema the validator enforces.
//!
//! - Anthropic Messages: `{name, description, input_schema}` (full JSON Schema).
//! - OpenAI Chat Completions: `{type: "function", function: {name, description, parameters}}`;
//!   Responses: `{type: "function", name, description, parameters, strict}`. The strict variants
//!   follow OpenAI's Structured Outputs rules: every object closed (`additionalProperties:
//!   false`) with `required` listing every property, optional properties made nullable, only the
//!   supported keywords kept.
//! - Gemini `FunctionDeclaration`: `{name, description, parameters}` in Gemini's OpenAPI 3.0
//!   subset (`nullable` instead of a `null` branch, no `additionalProperties`, `$ref`,
//!   `prefixItems`, exclusive bounds, ...; `items` on every array).
//! - MCP `tools/list` entry: `{name, description, inputSchema, outputSchema?, annotations}`.
//!
//! A rendering never fails: whatever a provider cannot express is weakened (the validator still
//! enforces the full schema at call time) and reported as a [`Finding`] at definition time, so
//! `lint` can show it. Renderings are pure functions of their input: byte-stable.

use serde_json::{json, Map, Value};

/// The renderings this module produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    /// OpenAI Chat Completions `tools` entry.
    OpenAiChat {
        strict: bool,
    },
    /// OpenAI Responses API `tools` entry.
    OpenAiResponses {
        strict: bool,
    },
    Gemini,
    Mcp,
}

impl Provider {
    /// Parse a provider name: `anthropic`, `openai` (= `openai-chat`), `openai-strict`,
    /// `openai-responses`, `openai-responses-strict`, `gemini`, `mcp`.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "anthropic" => Self::Anthropic,
            "openai" | "openai-chat" => Self::OpenAiChat { strict: false },
            "openai-strict" | "openai-chat-strict" => Self::OpenAiChat { strict: true },
            "openai-responses" => Self::OpenAiResponses { strict: false },
            "openai-responses-strict" => Self::OpenAiResponses { strict: true },
            "gemini" => Self::Gemini,
            "mcp" => Self::Mcp,
            _ => return None,
        })
    }

    /// The canonical name (what [`Provider::parse`] accepts).
    pub fn name(self) -> &'static str {
        match self {
            Self::Anthropic => "anthropic",
            Self::OpenAiChat { strict: false } => "openai",
            Self::OpenAiChat { strict: true } => "openai-strict",
            Self::OpenAiResponses { strict: false } => "openai-responses",
            Self::OpenAiResponses { strict: true } => "openai-responses-strict",
            Self::Gemini => "gemini",
            Self::Mcp => "mcp",
        }
    }
}

/// The error message for a provider name [`Provider::parse`] does not know.
pub fn unknown_provider_message(name: &str) -> String {
    format!(
        "unknown provider {name:?}; expected one of {}",
        PROVIDER_NAMES.join(", ")
    )
}

/// Every provider name, in a fixed order.
pub const PROVIDER_NAMES: [&str; 7] = [
    "anthropic",
    "openai",
    "openai-strict",
    "openai-responses",
    "openai-responses-strict",
    "gemini",
    "mcp",
];

/// What a rendering needs to know about a tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec<'a> {
    pub name: &'a str,
    pub description: &'a str,
    /// The input schema (a JSON Schema object, as the validator enforces it).
    pub input_schema: &'a Value,
    /// The output schema, when the tool declares one.
    pub output_schema: Option<&'a Value>,
    /// What the tool declared about its effects, when known (MCP annotations are left out
    /// otherwise).
    pub flags: Option<Effects>,
}

/// A tool's declared effects, for MCP's annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effects {
    pub side_effecting: bool,
    pub idempotent: bool,
    /// False for a tool made from a plain callable without a declaration: no read-only or
    /// destructive hint is given for it (nobody classified it).
    pub declared: bool,
    /// For a side-effecting tool: whether it may destroy or overwrite (None: MCP's default, yes).
    /// `Some(false)`: it only adds (`destructiveHint: false`).
    pub destructive: Option<bool>,
}

impl Effects {
    /// The effects a host passed: `declared` None counts as declared (only a tool made from a
    /// plain callable says it is not), `destructive` None is MCP's default.
    pub fn of(side_effecting: bool, idempotent: bool, declared: Option<bool>, destructive: Option<bool>) -> Self {
        Self {
            side_effecting,
            idempotent,
            declared: declared.unwrap_or(true),
            destructive,
        }
    }

    pub fn new(side_effecting: bool, idempotent: bool) -> Self {
        Self {
            side_effecting,
            idempotent,
            declared: true,
            destructive: None,
        }
    }
}

/// Something a rendering could not express exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The provider name (see [`Provider::name`]).
    pub provider: &'static str,
    /// Where in the input schema: `"<root>"`, `"properties.tags.items"`, ...
    pub path: String,
    pub message: String,
}

/// A rendering and what it had to weaken.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendering {
    pub value: Value,
    pub findings: Vec<Finding>,
}

/// Render one tool for `provider`.
pub fn render(provider: Provider, spec: &ToolSpec<'_>) -> Rendering {
    let mut findings = Vec::new();
    let value = match provider {
        Provider::Anthropic => json!({
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.input_schema,
        }),
        Provider::OpenAiChat { strict } => {
            let (parameters, is_strict) = openai_parameters(spec.input_schema, strict, provider, &mut findings);
            let mut function = Map::new();
            function.insert("name".into(), spec.name.into());
            function.insert("description".into(), spec.description.into());
            function.insert("parameters".into(), parameters);
            if strict {
                function.insert("strict".into(), is_strict.into());
            }
            json!({"type": "function", "function": function})
        }
        Provider::OpenAiResponses { strict } => {
            let (parameters, is_strict) = openai_parameters(spec.input_schema, strict, provider, &mut findings);
            json!({
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": parameters,
                "strict": is_strict,
            })
        }
        Provider::Gemini => {
            if !gemini_name_ok(spec.name) {
                findings.push(Finding {
                    provider: "gemini",
                    path: "name".into(),
                    message: format!(
                        "Gemini refuses the function name '{}': its names must start with a letter or \
                         an underscore, then use only a-z, A-Z, 0-9, '_', '.', ':' and '-' (at most 64 \
                         characters); rename the tool (name=...)",
                        spec.name
                    ),
                });
            }
            let mut g = Gemini {
                defs: defs_of(spec.input_schema),
                stack: Vec::new(),
                findings: &mut findings,
            };
            let parameters = g.convert(spec.input_schema, "<root>");
            let mut decl = Map::new();
            decl.insert("name".into(), spec.name.into());
            decl.insert("description".into(), spec.description.into());
            // A function without parameters has no `parameters` (Gemini refuses an OBJECT schema
            // with empty properties).
            if parameters
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| !p.is_empty())
            {
                decl.insert("parameters".into(), parameters);
            }
            Value::Object(decl)
        }
        Provider::Mcp => {
            let mut entry = Map::new();
            entry.insert("name".into(), spec.name.into());
            entry.insert("description".into(), spec.description.into());
            entry.insert("inputSchema".into(), spec.input_schema.clone());
            if let Some(out) = spec.output_schema {
                if out.get("type").and_then(Value::as_str) == Some("object") {
                    entry.insert("outputSchema".into(), out.clone());
                } else {
                    findings.push(Finding {
                        provider: provider.name(),
                        path: "outputSchema".into(),
                        message: "MCP requires an output schema of type \"object\"; this tool's output \
                                  schema is left out of its tools/list entry"
                            .into(),
                    });
                }
            }
            if let Some(fx) = spec.flags {
                // MCP's hints: a read-only tool changes nothing (so it is idempotent and not
                // destructive); a side-effecting one may be destructive (MCP's own default)
                // unless it said it only adds. A tool nobody classified gets no read-only or
                // destructive hint at all.
                let mut hints = Map::new();
                if fx.declared {
                    hints.insert("readOnlyHint".into(), (!fx.side_effecting).into());
                    hints.insert(
                        "destructiveHint".into(),
                        (fx.side_effecting && fx.destructive != Some(false)).into(),
                    );
                    hints.insert("idempotentHint".into(), (fx.idempotent || !fx.side_effecting).into());
                } else {
                    hints.insert("idempotentHint".into(), fx.idempotent.into());
                }
                entry.insert("annotations".into(), Value::Object(hints));
            }
            Value::Object(entry)
        }
    };
    Rendering { value, findings }
}

// ------------------------------------------------------------------------------------------
// OpenAI strict mode

/// Keywords OpenAI Structured Outputs accepts (its documented supported subset).
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "default",
    "pattern",
    "format",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "title",
];
/// Keywords that describe a value without constraining it: a schema of only these accepts anything.
const ANNOTATION_KEYWORDS: &[&str] = &["description", "default", "title", "examples"];
/// String formats OpenAI strict mode accepts.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// `(parameters, strict)` for an OpenAI rendering. Non-strict: the schema as it is. Strict: the
/// strict transform, or — when some part cannot be made strict without changing what calls are
/// valid (an open `dict[str, V]` object, a value of any type) — the plain schema with `strict:
/// false` and a finding saying why.
fn openai_parameters(schema: &Value, strict: bool, provider: Provider, findings: &mut Vec<Finding>) -> (Value, bool) {
    if !strict {
        return (schema.clone(), false);
    }
    let mut s = Strict {
        findings: Vec::new(),
        blockers: Vec::new(),
        provider: provider.name(),
    };
    let out = s.convert(schema, "<root>", true);
    if s.blockers.is_empty() {
        findings.extend(s.findings);
        return (out, true);
    }
    for (path, why) in s.blockers {
        findings.push(Finding {
            provider: provider.name(),
            path,
            message: format!(
                "cannot be made strict ({why}); the tool is rendered with strict: false and its plain schema"
            ),
        });
    }
    (schema.clone(), false)
}

struct Strict {
    findings: Vec<Finding>,
    blockers: Vec<(String, String)>,
    provider: &'static str,
}

/// What a rendering that cannot express `prefixItems` says it weakened.
const TUPLE_WEAKENED: &str = "a fixed-position tuple (prefixItems) is shown as an array of its member \
                              types; positions are checked at call time";

/// The `items` schema standing in for a fixed-position tuple: its distinct member schemas,
/// one as it is or several under `anyOf`.
fn tuple_items(members: impl Iterator<Item = Value>) -> Value {
    let mut parts: Vec<Value> = Vec::new();
    for m in members {
        if !parts.contains(&m) {
            parts.push(m);
        }
    }
    if parts.len() == 1 {
        parts.remove(0)
    } else {
        json!({"anyOf": parts})
    }
}

fn child(path: &str, seg: &str) -> String {
    if path == "<root>" {
        seg.to_owned()
    } else {
        format!("{path}.{seg}")
    }
}

/// True when `schema` already admits `null`.
fn admits_null(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            let by_type = match m.get("type") {
                Some(Value::String(t)) => t == "null",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
                _ => false,
            };
            by_type
                || m.get("anyOf")
                    .and_then(Value::as_array)
                    .is_some_and(|bs| bs.iter().any(admits_null))
                || m.get("enum")
                    .and_then(Value::as_array)
                    .is_some_and(|vs| vs.iter().any(Value::is_null))
        }
        Value::Bool(b) => *b,
        _ => false,
    }
}

/// `schema` made nullable for strict mode: `null` added to a single `type` (and to `enum`), or an
/// `anyOf` with a `null` branch; the description stays on the outside.
fn nullable(schema: Value) -> Value {
    if admits_null(&schema) {
        return schema;
    }
    let Value::Object(mut m) = schema else { return schema };
    if let Some(Value::Array(branches)) = m.get_mut("anyOf") {
        branches.push(json!({"type": "null"}));
        return Value::Object(m);
    }
    if !m.contains_key("$ref") {
        if let Some(Value::String(t)) = m.get("type").cloned() {
            m.insert("type".into(), json!([t, "null"]));
            if let Some(Value::Array(vs)) = m.get_mut("enum") {
                vs.push(Value::Null);
            }
            return Value::Object(m);
        }
    }
    let description = m.remove("description");
    let mut out = Map::new();
    out.insert("anyOf".into(), json!([Value::Object(m), {"type": "null"}]));
    if let Some(d) = description {
        out.insert("description".into(), d);
    }
    Value::Object(out)
}

impl Strict {
    fn weaken(&mut self, path: &str, message: String) {
        self.findings.push(Finding {
            provider: self.provider,
            path: path.to_owned(),
            message,
        });
    }

    fn convert(&mut self, schema: &Value, path: &str, root: bool) -> Value {
        let Value::Object(m) = schema else {
            if schema == &Value::Bool(true) {
                self.blockers
                    .push((path.to_owned(), "a value of any type has no strict form".into()));
            }
            return schema.clone();
        };
        if m.keys().all(|k| ANNOTATION_KEYWORDS.contains(&k.as_str())) {
            self.blockers
                .push((path.to_owned(), "a value of any type has no strict form".into()));
            return schema.clone();
        }
        let mut out = Map::new();
        for (k, v) in m {
            match k.as_str() {
                "properties" | "required" | "additionalProperties" => {}
                "items" => match v {
                    Value::Bool(false) if !m.contains_key("prefixItems") => {
                        self.blockers
                            .push((path.to_owned(), "an empty tuple has no strict form".into()));
                    }
                    Value::Bool(false) => {}
                    _ => {
                        out.insert(k.clone(), self.convert(v, &child(path, "items"), false));
                    }
                },
                "prefixItems" => {
                    let parts = v.as_array().into_iter().flatten().enumerate();
                    let items = tuple_items(
                        parts.map(|(i, p)| self.convert(p, &child(path, &format!("prefixItems[{i}]")), false)),
                    );
                    out.insert("items".into(), items);
                    self.weaken(path, TUPLE_WEAKENED.into());
                }
                "anyOf" => {
                    let branches: Vec<Value> = v
                        .as_array()
                        .map(|bs| {
                            bs.iter()
                                .enumerate()
                                .map(|(i, b)| self.convert(b, &child(path, &format!("anyOf[{i}]")), false))
                                .collect()
                        })
                        .unwrap_or_default();
                    out.insert(k.clone(), Value::Array(branches));
                }
                "$defs" => {
                    let mut defs = Map::new();
                    if let Some(d) = v.as_object() {
                        for (name, def) in d {
                            defs.insert(
                                name.clone(),
                                self.convert(def, &child(path, &format!("$defs.{name}")), false),
                            );
                        }
                    }
                    out.insert(k.clone(), Value::Object(defs));
                }
                "format" => match v.as_str() {
                    Some(f) if STRICT_FORMATS.contains(&f) => {
                        out.insert(k.clone(), v.clone());
                    }
                    _ => {
                        // An unsupported format is only a hint to the model: say it in words.
                        let text = format!("Format: {}.", v.as_str().unwrap_or_default());
                        let d = match m.get("description").and_then(Value::as_str) {
                            Some(d) => format!("{d} {text}"),
                            None => text,
                        };
                        out.insert("description".into(), d.into());
                    }
                },
                "description" if out.contains_key("description") => {}
                "default" if v.is_null() => {}
                _ if STRICT_KEYWORDS.contains(&k.as_str()) => {
                    out.insert(k.clone(), v.clone());
                }
                _ => self.weaken(
                    &child(path, k),
                    format!("OpenAI strict mode does not support '{k}'; it is left out (checked at call time)"),
                ),
            }
        }
        let is_object = m.get("type").and_then(Value::as_str) == Some("object");
        if is_object {
            let props = m.get("properties").and_then(Value::as_object);
            let open = match m.get("additionalProperties") {
                None | Some(Value::Bool(true)) => true,
                Some(Value::Bool(false)) => false,
                Some(_) => {
                    self.blockers.push((
                        path.to_owned(),
                        "an object with arbitrary keys (dict[str, V]) cannot be closed: strict mode \
                         requires every key to be listed"
                            .into(),
                    ));
                    false
                }
            };
            match props {
                None if open => {
                    self.blockers.push((
                        path.to_owned(),
                        "an object with arbitrary keys (a bare dict) cannot be closed: strict mode \
                         requires every key to be listed"
                            .into(),
                    ));
                }
                _ if open => self.weaken(
                    path,
                    if root {
                        "the input schema is open (**kwargs, or additionalProperties not false); strict \
                         mode closes it, so only the listed arguments can be sent"
                            .into()
                    } else {
                        "an open object is closed for strict mode".into()
                    },
                ),
                _ => {}
            }
            let required: Vec<&str> = m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut new_props = Map::new();
            if let Some(props) = props {
                for (name, p) in props {
                    let c = self.convert(p, &child(path, &format!("properties.{name}")), false);
                    let c = if required.contains(&name.as_str()) {
                        c
                    } else {
                        nullable(c)
                    };
                    new_props.insert(name.clone(), c);
                }
            }
            let keys: Vec<Value> = new_props.keys().map(|k| Value::String(k.clone())).collect();
            out.insert("properties".into(), Value::Object(new_props));
            out.insert("required".into(), Value::Array(keys));
            out.insert("additionalProperties".into(), Value::Bool(false));
        }
        if out.len() > 1 {
            if let Some(r) = out.shift_remove("$ref") {
                // Strict mode refuses a `$ref` with sibling keywords (a description on a recursive
                // field): the reference stands alone inside an `anyOf` of one branch.
                out.insert("anyOf".into(), json!([{"$ref": r}]));
            }
        }
        Value::Object(out)
    }
}

// ------------------------------------------------------------------------------------------
// Gemini

/// Gemini's rule for function names: a letter or `_` first, then letters, digits, `_`, `.`,
/// `:` and `-`, at most 64 characters.
pub fn gemini_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
}

/// Keywords of Gemini's `Schema` (an OpenAPI 3.0 subset) that carry over as they are.
const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "enum",
    "items",
    "properties",
    "required",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minProperties",
    "maxProperties",
    "default",
    "title",
];

fn defs_of(schema: &Value) -> Map<String, Value> {
    schema
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

struct Gemini<'a> {
    defs: Map<String, Value>,
    /// `$defs` names being expanded (a `$ref` back into one of them is recursion).
    stack: Vec<String>,
    findings: &'a mut Vec<Finding>,
}

impl Gemini<'_> {
    fn weaken(&mut self, path: &str, message: String) {
        self.findings.push(Finding {
            provider: "gemini",
            path: path.to_owned(),
            message,
        });
    }

    fn convert(&mut self, schema: &Value, path: &str) -> Value {
        let Value::Object(m) = schema else {
            return json!({});
        };
        if let Some(r) = m.get("$ref").and_then(Value::as_str) {
            let name = r.strip_prefix("#/$defs/").unwrap_or(r).to_owned();
            let Some(def) = self.defs.get(&name).cloned() else {
                self.weaken(path, format!("unresolvable $ref '{r}' is shown as an object"));
                return json!({"type": "object"});
            };
            if self.stack.contains(&name) {
                self.weaken(
                    path,
                    format!(
                        "recursive type '{name}': Gemini has no references, so the nested level is shown as \
                         an object of any shape (checked at call time)"
                    ),
                );
                let mut out = Map::new();
                out.insert("type".into(), "object".into());
                if let Some(d) = m.get("description").or_else(|| def.get("description")) {
                    out.insert("description".into(), d.clone());
                }
                return Value::Object(out);
            }
            self.stack.push(name);
            let mut out = self.convert(&def, path);
            self.stack.pop();
            if let (Value::Object(o), Some(d)) = (&mut out, m.get("description")) {
                o.insert("description".into(), d.clone());
            }
            return out;
        }
        let mut out = Map::new();
        let mut notes: Vec<String> = Vec::new();
        for (k, v) in m {
            match k.as_str() {
                "$defs" => {}
                "additionalProperties" => {}
                "anyOf" => {
                    let bs = v.as_array().cloned().unwrap_or_default();
                    let has_null = bs.iter().any(|b| b == &json!({"type": "null"}));
                    let rest: Vec<Value> = bs
                        .iter()
                        .filter(|b| *b != &json!({"type": "null"}))
                        .enumerate()
                        .map(|(i, b)| self.convert(b, &child(path, &format!("anyOf[{i}]"))))
                        .collect();
                    match rest.len() {
                        0 => {
                            out.insert("nullable".into(), true.into());
                        }
                        1 => {
                            if let Value::Object(inner) = &rest[0] {
                                for (ik, iv) in inner {
                                    if ik == "description" && m.contains_key("description") {
                                        // The outer description leads; the branch's own text
                                        // (e.g. a format note) follows it.
                                        if let Some(t) = iv.as_str() {
                                            notes.push(t.to_owned());
                                        }
                                    } else {
                                        out.insert(ik.clone(), iv.clone());
                                    }
                                }
                            }
                        }
                        _ => {
                            out.insert("anyOf".into(), Value::Array(rest));
                        }
                    }
                    if has_null {
                        out.insert("nullable".into(), true.into());
                    }
                }
                "items" => match v {
                    Value::Bool(false) => {}
                    _ => {
                        out.insert("items".into(), self.convert(v, &child(path, "items")));
                    }
                },
                "prefixItems" => {
                    let parts = v.as_array().into_iter().flatten().enumerate();
                    let items =
                        tuple_items(parts.map(|(i, p)| self.convert(p, &child(path, &format!("prefixItems[{i}]")))));
                    out.insert("items".into(), items);
                    self.weaken(path, TUPLE_WEAKENED.into());
                }
                "properties" => {
                    let mut props = Map::new();
                    if let Some(ps) = v.as_object() {
                        for (name, p) in ps {
                            props.insert(
                                name.clone(),
                                self.convert(p, &child(path, &format!("properties.{name}"))),
                            );
                        }
                    }
                    out.insert("properties".into(), Value::Object(props));
                }
                "enum" => {
                    let all_strings = v.as_array().is_some_and(|vs| vs.iter().all(Value::is_string));
                    if all_strings {
                        out.insert(k.clone(), v.clone());
                    } else {
                        let shown: Vec<String> = v
                            .as_array()
                            .map(|vs| vs.iter().map(Value::to_string).collect())
                            .unwrap_or_default();
                        notes.push(format!("One of: {}.", shown.join(", ")));
                        self.weaken(
                            path,
                            "Gemini accepts only string enums; the allowed values are listed in the \
                             description (checked at call time)"
                                .into(),
                        );
                    }
                }
                "type" if v.is_array() => {
                    // `["T", "null"]`: T + nullable.
                    let ts: Vec<&str> = v.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                    let non_null: Vec<&str> = ts.iter().copied().filter(|t| *t != "null").collect();
                    if non_null.len() == 1 {
                        out.insert("type".into(), non_null[0].into());
                    }
                    if ts.contains(&"null") {
                        out.insert("nullable".into(), true.into());
                    }
                }
                "format" => match (m.get("type").and_then(Value::as_str), v.as_str()) {
                    (Some("string"), Some("date-time")) => {
                        out.insert(k.clone(), v.clone());
                    }
                    (_, Some(f)) => notes.push(format!("Format: {f}.")),
                    _ => {}
                },
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    let (kw, op) = if k == "exclusiveMinimum" {
                        ("minimum", ">")
                    } else {
                        ("maximum", "<")
                    };
                    if !m.contains_key(kw) {
                        out.insert(kw.into(), v.clone());
                    }
                    notes.push(format!("Must be {op} {v}."));
                    self.weaken(
                        path,
                        format!("Gemini has no '{k}'; shown as '{kw}' and in the description (checked at call time)"),
                    );
                }
                "const" => {
                    if v.is_string() {
                        out.insert("enum".into(), json!([v]));
                    } else {
                        notes.push(format!("Must be {v}."));
                    }
                }
                _ if GEMINI_KEYWORDS.contains(&k.as_str()) => {
                    if !(k == "description" && out.contains_key(k)) {
                        out.insert(k.clone(), v.clone());
                    }
                }
                _ => self.weaken(
                    &child(path, k),
                    format!("Gemini does not support '{k}'; it is left out (checked at call time)"),
                ),
            }
        }
        let no_properties = out
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
        if out.get("type").and_then(Value::as_str) == Some("object") && no_properties && path != "<root>" {
            // Gemini refuses an OBJECT schema without properties ("should be non-empty for OBJECT
            // type"): an open object (dict[str, V], dict) is shown untyped and described in words.
            out.remove("type");
            out.remove("properties");
            out.remove("required");
            notes.push(match m.get("additionalProperties") {
                Some(v @ Value::Object(_)) => format!("A JSON object whose values match {v}."),
                _ => "A JSON object.".to_owned(),
            });
            self.weaken(
                path,
                "an object without listed properties (dict[str, V], dict) is shown without a type and \
                 described in words (Gemini requires OBJECT schemas to list properties); keys and values \
                 are checked at call time"
                    .into(),
            );
        }
        if out.get("required").and_then(Value::as_array).is_some_and(Vec::is_empty) {
            out.remove("required");
        }
        if out.get("type").and_then(Value::as_str) == Some("array") && !out.contains_key("items") {
            out.insert("items".into(), json!({}));
        }
        if !notes.is_empty() {
            let text = notes.join(" ");
            let d = match out.get("description").and_then(Value::as_str) {
                Some(d) => format!("{d} {text}"),
                None => text,
            };
            out.insert("description".into(), d.into());
        }
        if out.get("type").and_then(Value::as_str) == Some("null") {
            out.remove("type");
            out.insert("nullable".into(), true.into());
        }
        Value::Object(out)
    }
}

// ------------------------------------------------------------------------------------------
// Strict-mode arguments back to the validator's view

/// Undo strict mode's "optional made nullable" on a call's arguments: remove every key whose
/// value is `null` where `schema` (the tool's real input schema) does not require the property
/// and does not admit `null`, recursively through nested objects and arrays of them. A model
/// using the strict rendering must send every key, with `null` for "not given"; after this the
/// arguments validate against the real schema and the function's own defaults apply.
pub fn strip_strict_nulls(schema: &Value, args: &mut Value) {
    let defs = defs_of(schema);
    strip(schema, args, &defs, 0);
}

fn strip(schema: &Value, value: &mut Value, defs: &Map<String, Value>, depth: usize) {
    if depth > 64 {
        return;
    }
    let Value::Object(m) = schema else { return };
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        if let Some(def) = defs.get(r.strip_prefix("#/$defs/").unwrap_or(r)) {
            strip(def, value, defs, depth + 1);
        }
        return;
    }
    if let Some(bs) = m.get("anyOf").and_then(Value::as_array) {
        // The first branch of the value's own kind decides (an object value: the object branch).
        let kind = match value {
            Value::Object(_) => Some("object"),
            Value::Array(_) => Some("array"),
            _ => None,
        };
        if let Some(kind) = kind {
            if let Some(b) = bs.iter().find(|b| branch_kind(b, defs) == Some(kind)) {
                strip(b, value, defs, depth + 1);
            }
        }
        return;
    }
    match value {
        Value::Object(obj) => {
            let Some(props) = m.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required: Vec<&str> = m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            obj.retain(|k, v| {
                !(v.is_null()
                    && !required.contains(&k.as_str())
                    && props.get(k).is_some_and(|p| !admits_null_deref(p, defs)))
            });
            for (k, v) in obj.iter_mut() {
                if let Some(p) = props.get(k) {
                    strip(p, v, defs, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = m.get("items") {
                for v in items.iter_mut() {
                    strip(item_schema, v, defs, depth + 1);
                }
            }
            if let Some(prefix) = m.get("prefixItems").and_then(Value::as_array) {
                for (s, v) in prefix.iter().zip(items.iter_mut()) {
                    strip(s, v, defs, depth + 1);
                }
            }
        }
        _ => {}
    }
}

fn admits_null_deref(schema: &Value, defs: &Map<String, Value>) -> bool {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => defs
            .get(r.strip_prefix("#/$defs/").unwrap_or(r))
            .is_some_and(admits_null),
        None => schema == &json!({}) || admits_null(schema),
    }
}

fn branch_kind<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> Option<&'a str> {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => defs.get(r.strip_prefix("#/$defs/").unwrap_or(r))?.get("type")?.as_str(),
        None => schema.get("type")?.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(schema: &Value) -> ToolSpec<'_> {
        ToolSpec {
            name: "find",
            description: "Find things by name in the catalogue.",
            input_schema: schema,
            output_schema: None,
            flags: Some(Effects::new(false, false)),
        }
    }

    fn input() -> Value {
        json!({
            "type": "object",
            "properties": {
                "q": {"type": "string", "description": "Query."},
                "limit": {"type": "integer", "exclusiveMinimum": 0, "default": 10},
                "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}, "uniqueItems": true}, {"type": "null"}], "default": null},
                "when": {"type": "string", "format": "date"},
                "kind": {"type": "integer", "enum": [1, 2]}
            },
            "required": ["q", "when", "kind"],
            "additionalProperties": false
        })
    }

    #[test]
    fn openai_strict_closes_requires_and_nulls() {
        let schema = input();
        let r = render(Provider::OpenAiChat { strict: true }, &spec(&schema));
        assert_eq!(
            r.value,
            json!({"type": "function", "function": {
                "name": "find", "description": "Find things by name in the catalogue.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "q": {"type": "string", "description": "Query."},
                        "limit": {"type": ["integer", "null"], "exclusiveMinimum": 0, "default": 10},
                        "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
                        "when": {"type": "string", "format": "date"},
                        "kind": {"type": "integer", "enum": [1, 2]}
                    },
                    "required": ["q", "limit", "tags", "when", "kind"],
                    "additionalProperties": false
                },
                "strict": true
            }})
        );
        assert_eq!(
            r.findings,
            vec![Finding {
                provider: "openai-strict",
                path: "properties.tags.anyOf[0].uniqueItems".into(),
                message: "OpenAI strict mode does not support 'uniqueItems'; it is left out (checked at call time)"
                    .into()
            }]
        );
    }

    #[test]
    fn open_dict_falls_back_to_non_strict() {
        let schema = json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}, "required": ["m"], "additionalProperties": false});
        let r = render(Provider::OpenAiResponses { strict: true }, &spec(&schema));
        assert_eq!(r.value["strict"], json!(false));
        assert_eq!(r.value["parameters"], schema);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path, "properties.m");
    }

    #[test]
    fn gemini_subset() {
        let schema = input();
        let r = render(Provider::Gemini, &spec(&schema));
        assert_eq!(
            r.value["parameters"],
            json!({
                "type": "object",
                "properties": {
                    "q": {"type": "string", "description": "Query."},
                    "limit": {"type": "integer", "minimum": 0, "default": 10, "description": "Must be > 0."},
                    "tags": {"type": "array", "items": {"type": "string"}, "nullable": true, "default": null},
                    "when": {"type": "string", "description": "Format: date."},
                    "kind": {"type": "integer", "description": "One of: 1, 2."}
                },
                "required": ["q", "when", "kind"]
            })
        );
        let paths: Vec<&str> = r.findings.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "properties.limit",
                "properties.tags.anyOf[0].uniqueItems",
                "properties.kind"
            ]
        );
    }

    #[test]
    fn gemini_expands_refs_and_cuts_recursion() {
        let schema = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "required": ["root"],
            "additionalProperties": false,
            "$defs": {"Node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}, "required": ["v"], "additionalProperties": false}}
        });
        let r = render(Provider::Gemini, &spec(&schema));
        assert_eq!(
            r.value["parameters"],
            json!({"type": "object", "properties": {"root": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"type": "object"}}}, "required": ["v"]}}, "required": ["root"]})
        );
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].path, "properties.root.properties.kids.items");
    }

    #[test]
    fn gemini_names() {
        for ok in ["scan", "_scan", "scan_3d", "a.b:c-d"] {
            assert!(gemini_name_ok(ok), "{ok}");
        }
        for bad in ["3d_scan", "-scan", "", "a b", &"a".repeat(65)] {
            assert!(!gemini_name_ok(bad), "{bad}");
        }
    }

    #[test]
    fn strict_refs_stand_alone() {
        let schema = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node", "description": "The root."}},
            "required": ["root"],
            "additionalProperties": false,
            "$defs": {"Node": {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"], "additionalProperties": false}}
        });
        let r = render(Provider::OpenAiChat { strict: true }, &spec(&schema));
        assert_eq!(
            r.value["function"]["parameters"]["properties"]["root"],
            json!({"description": "The root.", "anyOf": [{"$ref": "#/$defs/Node"}]})
        );
    }

    #[test]
    fn strips_strict_nulls() {
        let schema = input();
        let mut args = json!({"q": "x", "limit": null, "tags": null, "when": "2024-01-01", "kind": 1});
        strip_strict_nulls(&schema, &mut args);
        assert_eq!(args, json!({"q": "x", "tags": null, "when": "2024-01-01", "kind": 1}));
    }

    #[test]
    fn mcp_annotations() {
        let schema = input();
        let mut s = spec(&schema);
        s.flags = Some(Effects::new(true, false));
        let out = json!({"type": "array"});
        s.output_schema = Some(&out);
        let r = render(Provider::Mcp, &s);
        assert_eq!(
            r.value["annotations"],
            json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false})
        );
        s.flags = Some(Effects {
            destructive: Some(false),
            ..Effects::new(true, false)
        });
        assert_eq!(
            render(Provider::Mcp, &s).value["annotations"],
            json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false})
        );
        s.flags = Some(Effects {
            declared: false,
            ..Effects::new(false, false)
        });
        assert_eq!(
            render(Provider::Mcp, &s).value["annotations"],
            json!({"idempotentHint": false})
        );
        assert!(r.value.get("outputSchema").is_none());
        assert_eq!(r.findings.len(), 1);
    }

    #[test]
    fn effects_as_a_host_passes_them() {
        assert_eq!(Effects::of(true, false, None, None), Effects::new(true, false));
        assert_eq!(
            Effects::of(false, true, Some(false), Some(false)),
            Effects {
                side_effecting: false,
                idempotent: true,
                declared: false,
                destructive: Some(false),
            }
        );
        assert!(Effects::of(false, false, Some(true), None).declared);
    }

    #[test]
    fn an_unknown_provider_is_named_with_the_known_ones() {
        assert_eq!(
            unknown_provider_message("claude"),
            "unknown provider \"claude\"; expected one of anthropic, openai, openai-strict, openai-responses, openai-responses-strict, gemini, mcp"
        );
        assert!(PROVIDER_NAMES
            .iter()
            .all(|n| Provider::parse(n).is_some_and(|p| p.name() == *n)));
    }
}
