//! The envelope every tool call answers with (docs/errors.md): a success with the value, or a
//! failure with a code, the message the model reads and the extra fields of that code. Built
//! here for every code; the binding layer converts it to a Python dict key for key.
//!
//! Generic over the value `V` (a Python object in the binding, JSON here) and over `D`, the
//! details a tool's own `ToolError` carries, so the core knows nothing of Python.

use serde_json::{Map, Value};

use crate::errors::{self, ErrorCode};
use crate::middleware::EgressDenial;
use crate::validate::{self, Rejection};

/// A failure's code: one of ours, or the code a tool's own `ToolError` chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    Known(ErrorCode),
    Own(String),
}

impl Code {
    /// `wire` as a code: ours when it spells one of ours.
    pub fn of(wire: String) -> Code {
        ErrorCode::from_wire(&wire).map_or(Code::Own(wire), Code::Known)
    }

    /// The code an envelope carries (`wire`: its `error.code` as text): `internal_error` when it
    /// carries none.
    pub fn of_envelope(wire: Option<String>) -> Code {
        wire.map_or(Code::Known(ErrorCode::InternalError), Code::of)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Code::Known(c) => c.as_str(),
            Code::Own(s) => s,
        }
    }
}

impl From<ErrorCode> for Code {
    fn from(c: ErrorCode) -> Self {
        Code::Known(c)
    }
}

/// One problem of an `invalid_arguments` failure: where (`items[2].sku`, an argument's name,
/// or `<arguments>`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub reason: String,
}

/// A call that ran and returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Success<V> {
    pub value: V,
    /// Milliseconds, rounded to 3 decimals.
    pub elapsed_ms: f64,
    /// Answered from the idempotency cache without running the tool (the key is present only
    /// when true).
    pub deduplicated: bool,
}

impl<V> Success<V> {
    /// A success that took `elapsed_ms` (rounded here to 3 decimals).
    pub fn new(value: V, elapsed_ms: f64) -> Self {
        Self {
            value,
            elapsed_ms: (elapsed_ms * 1000.0).round() / 1000.0,
            deduplicated: false,
        }
    }
}

/// A call that did not succeed (it may not have run at all). The keys of `error`, in order:
/// the tool's own `details` (so they can never overwrite ours), `code`, `message`, then each
/// extra field that is set, in the order of the struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure<'a, D = Map<String, Value>> {
    pub details: Option<D>,
    pub code: Code,
    pub message: String,
    pub tool: Option<String>,
    pub count: Option<u32>,
    pub host: Option<String>,
    pub allowed: Option<Vec<String>>,
    pub available: Option<Vec<String>>,
    pub did_you_mean: Option<String>,
    /// The `errors` key of `invalid_arguments`.
    pub problems: Option<Vec<Problem>>,
    /// The tool's input schema (`invalid_arguments`).
    pub schema: Option<&'a Value>,
    pub retriable: Option<bool>,
}

/// What a call answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Envelope<'a, V, D = Map<String, Value>> {
    Ok(Success<V>),
    Err(Failure<'a, D>),
}

impl<'a, D> Failure<'a, D> {
    /// A failure with `code` and `message` and no extra field.
    pub fn new(code: impl Into<Code>, message: String) -> Self {
        Self {
            details: None,
            code: code.into(),
            message,
            tool: None,
            count: None,
            host: None,
            allowed: None,
            available: None,
            did_you_mean: None,
            problems: None,
            schema: None,
            retriable: None,
        }
    }

    /// `unknown_tool` for `name`, given the registered names (sorted): `available` lists them,
    /// `did_you_mean` names the closest when one is close enough.
    pub fn unknown_tool(name: &str, names: &[&str]) -> Self {
        let close = crate::registry::closest(name, names.iter().copied());
        let mut f = Self::new(ErrorCode::UnknownTool, errors::unknown_tool_message(name, names, close));
        f.available = Some(names.iter().map(|n| (*n).to_owned()).collect());
        f.did_you_mean = close.map(str::to_owned);
        f
    }

    /// `invalid_arguments` for a rejection of `tool`'s arguments: every problem in `errors`
    /// (the first [`validate::MAX_ECHOED_NAMES`] unexpected names, then a count), the message,
    /// and the input schema. `accepted_repr`: the accepted names written as a Python list.
    pub fn invalid_arguments(tool: &str, rejection: &Rejection, accepted_repr: &str, schema: &'a Value) -> Self {
        let mut f = Self::new(
            ErrorCode::InvalidArguments,
            errors::rejection_message(tool, rejection, accepted_repr),
        );
        f.problems = Some(problems_of(rejection));
        f.schema = Some(schema);
        f
    }

    /// `invalid_call`: the call is malformed (`problem` says how, without a final period).
    pub fn invalid_call(problem: &str) -> Self {
        Self::new(ErrorCode::InvalidCall, errors::invalid_call_message(problem))
    }

    /// `invalid_call`: the call names no tool.
    pub fn no_tool_name() -> Self {
        Self::new(ErrorCode::InvalidCall, errors::NO_TOOL_NAME_MESSAGE.to_owned())
    }

    /// `approval_required`, with `tool`.
    pub fn approval_required(tool: &str, canonical_args: &str) -> Self {
        let mut f = Self::new(
            ErrorCode::ApprovalRequired,
            errors::approval_required_message(tool, canonical_args),
        );
        f.tool = Some(tool.to_owned());
        f
    }

    /// `repeated_call`, with `tool` and `count`.
    pub fn repeated_call(tool: &str, count: u32) -> Self {
        let mut f = Self::new(ErrorCode::RepeatedCall, errors::repeated_call_message(tool, count));
        f.tool = Some(tool.to_owned());
        f.count = Some(count);
        f
    }

    /// `circuit_open`, with `tool` and `retriable: false`.
    pub fn circuit_open(tool: &str, failures: u32, retry_after_s: f64) -> Self {
        let mut f = Self::new(
            ErrorCode::CircuitOpen,
            errors::circuit_open_message(tool, failures, retry_after_s),
        );
        f.tool = Some(tool.to_owned());
        f.retriable = Some(ErrorCode::CircuitOpen.retriable());
        f
    }

    /// `egress_denied`, with `tool`, `host` (when the URL has one) and `allowed`.
    pub fn egress_denied(tool: &str, url_arg: &str, denial: &EgressDenial, allowed: Vec<String>) -> Self {
        let mut f = Self::new(
            ErrorCode::EgressDenied,
            errors::egress_denied_message(tool, url_arg, denial, &allowed),
        );
        f.tool = Some(tool.to_owned());
        if let EgressDenial::HostNotAllowed(h) | EgressDenial::Internal(h) = denial {
            f.host = Some(h.clone());
        }
        f.allowed = Some(allowed);
        f
    }

    /// `timeout`: our own deadline of `timeout_s` seconds expired.
    pub fn timeout(tool: &str, timeout_s: f64) -> Self {
        Self::new(ErrorCode::Timeout, errors::timeout_message(tool, timeout_s))
    }

    /// `internal_error`: the tool raised `exc_type` with `exc_text`.
    pub fn internal_error(tool: &str, exc_type: &str, exc_text: &str) -> Self {
        Self::new(
            ErrorCode::InternalError,
            errors::internal_error_message(tool, exc_type, exc_text),
        )
    }

    /// `internal_error`: the tool raised an exception of type `qualname` too broken to describe
    /// (reading its details raised; None: its type's name cannot be read either).
    pub fn undescribable(tool: &str, qualname: Option<&str>) -> Self {
        Self::internal_error(
            tool,
            "RuntimeError",
            &format!("{} (its details cannot be read)", qualname.unwrap_or("exception")),
        )
    }

    /// `internal_error`: the call pipeline ended a call without the envelope it should hold.
    pub fn lost_state(tool: &str) -> Self {
        Self::internal_error(tool, "RuntimeError", "the call pipeline lost its state")
    }

    /// `internal_error`: the tooling around the tool raised.
    pub fn tooling_fault(exc_type: &str, exc_text: &str) -> Self {
        Self::new(
            ErrorCode::InternalError,
            errors::tooling_fault_message(exc_type, exc_text),
        )
    }

    /// `output_mismatch`: the value does not match the output schema named `expected`.
    pub fn output_mismatch(tool: &str, expected: &str, problems: &str) -> Self {
        Self::new(
            ErrorCode::OutputMismatch,
            errors::output_mismatch_message(tool, expected, problems),
        )
    }

    /// A tool's own `ToolError`: its code (`tool_error` when it chose none), its message and
    /// `retriable` flag, its details first.
    pub fn tool_error(code: Code, message: String, retriable: bool, details: Option<D>) -> Self {
        let mut f = Self::new(code, message);
        f.retriable = Some(retriable);
        f.details = details;
        f
    }
}

/// What the binding read of an exception a tool call raised, by its class (see
/// `errors::Raised`), to describe it in an envelope.
#[derive(Debug, Clone, PartialEq)]
pub enum Described<D> {
    /// `ToolTimeoutError`: our own deadline of `limit_s` seconds expired.
    Deadline { limit_s: f64 },
    /// A tool's own `ToolError`: its `code` as text (None: it has none that reads as text),
    /// its message, its `retriable` flag and its details.
    Tool {
        code: Option<String>,
        message: String,
        retriable: bool,
        details: Option<D>,
    },
    /// `ToolShapeError`: the output schema named `expected` was not met.
    Shape { expected: String, errors: ShapeErrors },
    /// Any other exception (a `ToolArgumentError` too, when there is no tool to describe it
    /// against): its type's qualified name and its text.
    Other { exc_type: String, text: String },
}

impl<D> Described<D> {
    /// A `ToolTimeoutError` whose `timeout_s` read as `limit_s` (None: it could not be read as a
    /// number, which counts as 0 s).
    pub fn deadline(limit_s: Option<f64>) -> Self {
        Described::Deadline {
            limit_s: limit_s.unwrap_or(0.0),
        }
    }
}

/// The problems a `ToolShapeError` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeErrors {
    None,
    /// A list of texts.
    List(Vec<String>),
    /// Anything else, as its text.
    Text(String),
}

impl<'a, D> Failure<'a, D> {
    /// The failure of tool `tool` that raised what `d` describes: `timeout`, the tool's own code
    /// (`tool_error` when it chose none), `output_mismatch` (its problems joined with "; ") or
    /// `internal_error`.
    pub fn of_described(tool: &str, d: Described<D>) -> Self {
        match d {
            Described::Deadline { limit_s } => Self::timeout(tool, limit_s),
            Described::Tool {
                code,
                message,
                retriable,
                details,
            } => {
                let code = code.map_or(Code::Known(ErrorCode::ToolError), Code::of);
                Self::tool_error(code, message, retriable, details)
            }
            Described::Shape { expected, errors } => {
                let problems = match errors {
                    ShapeErrors::None => String::new(),
                    ShapeErrors::List(list) => list.join("; "),
                    ShapeErrors::Text(t) => t,
                };
                Self::output_mismatch(tool, &expected, &problems)
            }
            Described::Other { exc_type, text } => Self::internal_error(tool, &exc_type, &text),
        }
    }
}

/// The `errors` list of an `invalid_arguments` failure. A hostile call may send thousands of
/// names: the first [`validate::MAX_ECHOED_NAMES`] unexpected ones are listed, then a count.
pub fn problems_of(rejection: &Rejection) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut push = |path: &str, reason: &str| {
        out.push(Problem {
            path: path.to_owned(),
            reason: reason.to_owned(),
        })
    };
    match rejection {
        Rejection::Problems(p) => {
            for n in p.unexpected.iter().take(validate::MAX_ECHOED_NAMES) {
                let mut shown = String::new();
                validate::push_capped_name(&mut shown, n);
                push(&shown, "unexpected argument: this tool does not take it");
            }
            if p.unexpected.len() > validate::MAX_ECHOED_NAMES {
                push(
                    "<arguments>",
                    &format!(
                        "and {} more unexpected argument(s): send only the accepted arguments",
                        p.unexpected.len() - validate::MAX_ECHOED_NAMES
                    ),
                );
            }
            for n in &p.missing {
                push(n, "missing required argument");
            }
            for (path, why) in &p.invalid {
                push(path, why);
            }
        }
        other => push("<arguments>", &other.summary(usize::MAX)),
    }
    out
}

impl Failure<'_, Map<String, Value>> {
    /// The `error` object as JSON, keys in envelope order.
    pub fn error_json(&self) -> Map<String, Value> {
        let mut error = self.details.clone().unwrap_or_default();
        error.insert("code".into(), self.code.as_str().into());
        error.insert("message".into(), self.message.clone().into());
        let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
        if let Some(t) = &self.tool {
            error.insert("tool".into(), t.clone().into());
        }
        if let Some(c) = self.count {
            error.insert("count".into(), c.into());
        }
        if let Some(h) = &self.host {
            error.insert("host".into(), h.clone().into());
        }
        if let Some(a) = &self.allowed {
            error.insert("allowed".into(), strings(a));
        }
        if let Some(a) = &self.available {
            error.insert("available".into(), strings(a));
        }
        if let Some(d) = &self.did_you_mean {
            error.insert("did_you_mean".into(), d.clone().into());
        }
        if let Some(ps) = &self.problems {
            let items = ps
                .iter()
                .map(|p| serde_json::json!({"path": p.path, "reason": p.reason}))
                .collect();
            error.insert("errors".into(), Value::Array(items));
        }
        if let Some(s) = self.schema {
            error.insert("schema".into(), s.clone());
        }
        if let Some(r) = self.retriable {
            error.insert("retriable".into(), r.into());
        }
        error
    }
}

impl Envelope<'_, Value, Map<String, Value>> {
    /// The envelope as JSON, as docs/errors.md shows it.
    pub fn to_json(&self) -> Value {
        let mut env = Map::new();
        match self {
            Envelope::Ok(s) => {
                env.insert("ok".into(), true.into());
                env.insert("value".into(), s.value.clone());
                env.insert(
                    "elapsed_ms".into(),
                    serde_json::Number::from_f64(s.elapsed_ms).map_or(Value::Null, Value::Number),
                );
                if s.deduplicated {
                    env.insert("deduplicated".into(), true.into());
                }
            }
            Envelope::Err(f) => {
                env.insert("ok".into(), false.into());
                env.insert("error".into(), Value::Object(f.error_json()));
            }
        }
        Value::Object(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::ArgumentProblems;
    use serde_json::json;

    type F<'a> = Failure<'a, Map<String, Value>>;

    fn text(f: F<'_>) -> String {
        serde_json::to_string(&Envelope::<Value>::Err(f).to_json()).unwrap()
    }

    #[test]
    fn success() {
        let s = Envelope::<Value>::Ok(Success::new(json!({"a": 1}), 0.41249));
        assert_eq!(
            serde_json::to_string(&s.to_json()).unwrap(),
            r#"{"ok":true,"value":{"a":1},"elapsed_ms":0.412}"#
        );
        let mut s = Success::new(json!(1), 2.0);
        s.deduplicated = true;
        assert_eq!(
            serde_json::to_string(&Envelope::<Value>::Ok(s).to_json()).unwrap(),
            r#"{"ok":true,"value":1,"elapsed_ms":2.0,"deduplicated":true}"#
        );
    }

    #[test]
    fn keys_in_envelope_order() {
        assert_eq!(
            text(F::unknown_tool("chek_stock", &["check_stock", "fetch"])),
            r#"{"ok":false,"error":{"code":"unknown_tool","message":"No tool named 'chek_stock'. Did you mean 'check_stock'? Available tools: check_stock, fetch. Call one of those instead.","available":["check_stock","fetch"],"did_you_mean":"check_stock"}}"#
        );
        assert_eq!(
            text(F::circuit_open("t", 2, 60.0)),
            r#"{"ok":false,"error":{"code":"circuit_open","message":"t is failing repeatedly (2 failures in a row) and is paused for 60s. Do not call it now; tell the user the service is unavailable and try later.","tool":"t","retriable":false}}"#
        );
        let e = F::egress_denied(
            "fetch",
            "url",
            &EgressDenial::Internal("10.0.0.1".into()),
            vec!["example.com".into()],
        );
        assert_eq!(
            e.error_json().keys().collect::<Vec<_>>(),
            ["code", "message", "tool", "host", "allowed"]
        );
        assert_eq!(
            F::repeated_call("t", 3).error_json().keys().collect::<Vec<_>>(),
            ["code", "message", "tool", "count"]
        );
        let mut details = Map::new();
        details.insert("sku".into(), "GONE".into());
        details.insert("code".into(), "ignored".into());
        assert_eq!(
            text(F::tool_error(
                Code::of("not_found".into()),
                "No product.".into(),
                false,
                Some(details)
            )),
            r#"{"ok":false,"error":{"sku":"GONE","code":"not_found","message":"No product.","retriable":false}}"#
        );
        assert_eq!(Code::of("not_found".into()), Code::Known(ErrorCode::NotFound));
        assert_eq!(Code::of("mine".into()), Code::Own("mine".into()));
    }

    #[test]
    fn invalid_arguments_lists_every_problem() {
        let schema = json!({"type": "object"});
        let unexpected: Vec<String> = (0..validate::MAX_ECHOED_NAMES + 4).map(|i| format!("x{i}")).collect();
        let r = Rejection::Problems(ArgumentProblems {
            unexpected,
            missing: vec!["sku".into()],
            invalid: vec![("n".into(), "expected integer".into())],
        });
        let f = F::invalid_arguments("t", &r, "['sku', 'n']", &schema);
        let problems = f.problems.as_ref().unwrap();
        assert_eq!(problems.len(), validate::MAX_ECHOED_NAMES + 3);
        assert_eq!(problems[validate::MAX_ECHOED_NAMES].path, "<arguments>");
        assert_eq!(
            problems.last().unwrap(),
            &Problem {
                path: "n".into(),
                reason: "expected integer".into()
            }
        );
        assert_eq!(
            f.error_json().keys().collect::<Vec<_>>(),
            ["code", "message", "errors", "schema"]
        );
    }

    #[test]
    fn a_raised_exception_described() {
        type D = Described<Map<String, Value>>;
        let f = F::of_described("t", D::Deadline { limit_s: 2.5 });
        assert_eq!(
            (f.code.as_str(), f.message.as_str()),
            ("timeout", F::timeout("t", 2.5).message.as_str())
        );
        assert_eq!(D::deadline(Some(1.5)), D::Deadline { limit_s: 1.5 });
        assert_eq!(D::deadline(None), D::Deadline { limit_s: 0.0 });
        let f = F::of_described(
            "t",
            D::Tool {
                code: None,
                message: "boom".into(),
                retriable: true,
                details: None,
            },
        );
        assert_eq!(
            text(f),
            r#"{"ok":false,"error":{"code":"tool_error","message":"boom","retriable":true}}"#
        );
        let f = F::of_described(
            "t",
            D::Tool {
                code: Some("mine".into()),
                message: "m".into(),
                retriable: false,
                details: None,
            },
        );
        assert_eq!(f.code, Code::Own("mine".into()));
        let shape = |errors| {
            F::of_described(
                "t",
                D::Shape {
                    expected: "Out".into(),
                    errors,
                },
            )
            .message
        };
        assert_eq!(
            shape(ShapeErrors::List(vec!["a: x".into(), "b: y".into()])),
            F::output_mismatch("t", "Out", "a: x; b: y").message
        );
        assert_eq!(
            shape(ShapeErrors::Text("odd".into())),
            F::output_mismatch("t", "Out", "odd").message
        );
        assert_eq!(shape(ShapeErrors::None), F::output_mismatch("t", "Out", "").message);
        let f = F::of_described(
            "t",
            D::Other {
                exc_type: "KeyError".into(),
                text: "'k'".into(),
            },
        );
        assert_eq!(f.error_json(), F::internal_error("t", "KeyError", "'k'").error_json());
        assert_eq!(f.code, Code::Known(ErrorCode::InternalError));
    }

    #[test]
    fn an_undescribable_exception_and_a_lost_state_are_internal_errors() {
        let f = F::undescribable("t", Some("Weird"));
        assert_eq!(f.code, Code::Known(ErrorCode::InternalError));
        assert_eq!(
            f.message,
            errors::internal_error_message("t", "RuntimeError", "Weird (its details cannot be read)")
        );
        // Its type's name cannot be read either.
        let f = F::undescribable("t", None);
        assert_eq!(
            f.message,
            errors::internal_error_message("t", "RuntimeError", "exception (its details cannot be read)")
        );
        let f = F::lost_state("t");
        assert_eq!(
            f.message,
            errors::internal_error_message("t", "RuntimeError", "the call pipeline lost its state")
        );
    }
}
