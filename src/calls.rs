//! The shapes of a tool call, and which key means what:
//!
//! - Anthropic `{"id", "name", "input": {...}}`;
//! - OpenAI Chat `{"id", "function": {"name", "arguments": "<JSON text>"}}`;
//! - OpenAI Responses `{"call_id", "name", "arguments": "<JSON text>"}`.
//!
//! The name and arguments are read from `function` when it is a mapping, else from the call
//! itself; the arguments are `input` when present, else `arguments`; the id is `id` when
//! present and not null, else `call_id`. A call that is not a mapping, or whose name is not a
//! string, is an `invalid_call` ([`CallError`]); a call with no name (or a null one) too
//! (`envelope::Failure::no_tool_name`).
//!
//! Generic over the mapping ([`CallMap`]) so the binding reads a Python dict through the same
//! rule, without copying it.

/// A mapping a call is read from (a Python dict in the binding, a JSON object here).
pub trait CallMap: Sized {
    /// A value in the mapping.
    type Value;
    /// An error reading the mapping (a Python exception raised by `__eq__`/`__hash__`).
    type Error;
    /// The value under `key`, if any.
    fn get(&self, key: &'static str) -> Result<Option<Self::Value>, Self::Error>;
    /// `value` as a mapping, when it is one.
    fn mapping(value: &Self::Value) -> Option<Self>;
    /// Whether `value` is null (`None`).
    fn is_null(value: &Self::Value) -> bool;
    /// `value` as text, or the name of its type when it is not text (usable text: a Python
    /// `str` with a lone surrogate is not).
    fn text(value: &Self::Value) -> Result<&str, String>;
}

/// The keys of the call shapes.
pub mod keys {
    pub const ID: &str = "id";
    pub const CALL_ID: &str = "call_id";
    pub const FUNCTION: &str = "function";
    pub const NAME: &str = "name";
    pub const INPUT: &str = "input";
    pub const ARGUMENTS: &str = "arguments";
}

/// What a call holds, each part as found (not converted).
#[derive(Debug, Clone, PartialEq)]
pub struct CallParts<V> {
    pub id: Option<V>,
    /// None when the call has no name or a null one.
    pub name: Option<V>,
    /// None when the call has neither `input` nor `arguments`.
    pub args: Option<V>,
}

/// Why a call is malformed (an `invalid_call`); [`CallError::problem`] words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The call is not a mapping; the type it is.
    NotAMapping(String),
    /// The name is not a string (or not valid Unicode text: a `str` with a lone surrogate);
    /// the type it is.
    NameNotAString(String),
}

impl CallError {
    /// The problem as one sentence without its final period; the `invalid_call` message is
    /// `errors::invalid_call_message(problem)`.
    pub fn problem(&self) -> String {
        match self {
            CallError::NotAMapping(t) => {
                format!("a tool call must be a dict like {{'id': ..., 'name': ..., 'input': {{...}}}}, got {t}")
            }
            CallError::NameNotAString(t) => format!("the tool call's name must be a string, got {t}"),
        }
    }
}

/// The id of `call` (see the module's rule).
pub fn id_of<M: CallMap>(call: &M) -> Result<Option<M::Value>, M::Error> {
    match call.get(keys::ID)? {
        Some(v) if !M::is_null(&v) => Ok(Some(v)),
        _ => call.get(keys::CALL_ID),
    }
}

/// The name and arguments of `call` (see the module's rule); the name is not checked here.
pub fn parts<M: CallMap>(call: &M) -> Result<CallParts<M::Value>, M::Error> {
    let function = call.get(keys::FUNCTION)?.and_then(|f| M::mapping(&f));
    let holder = function.as_ref().unwrap_or(call);
    let name = holder.get(keys::NAME)?.filter(|n| !M::is_null(n));
    let args = match holder.get(keys::INPUT)? {
        Some(a) => Some(a),
        None => holder.get(keys::ARGUMENTS)?,
    };
    Ok(CallParts { id: None, name, args })
}

/// [`parts`] with the id.
pub fn all_parts<M: CallMap>(call: &M) -> Result<CallParts<M::Value>, M::Error> {
    let mut p = parts(call)?;
    p.id = id_of(call)?;
    Ok(p)
}

impl CallMap for serde_json::Map<String, serde_json::Value> {
    type Value = serde_json::Value;
    type Error = std::convert::Infallible;
    fn get(&self, key: &'static str) -> Result<Option<serde_json::Value>, Self::Error> {
        Ok(serde_json::Map::get(self, key).cloned())
    }
    fn mapping(value: &serde_json::Value) -> Option<Self> {
        value.as_object().cloned()
    }
    fn is_null(value: &serde_json::Value) -> bool {
        value.is_null()
    }
    fn text(value: &serde_json::Value) -> Result<&str, String> {
        use serde_json::Value;
        match value {
            Value::String(s) => Ok(s),
            Value::Null => Err("null".into()),
            Value::Bool(_) => Err("boolean".into()),
            Value::Number(n) if n.is_f64() => Err("number".into()),
            Value::Number(_) => Err("integer".into()),
            Value::Array(_) => Err("array".into()),
            Value::Object(_) => Err("object".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn read(v: Value) -> CallParts<Value> {
        let m: Map<String, Value> = v.as_object().unwrap().clone();
        all_parts(&m).unwrap()
    }

    #[test]
    fn the_three_shapes() {
        let anthropic = read(json!({"id": "t1", "name": "add", "input": {"a": 1}}));
        assert_eq!(
            anthropic,
            CallParts {
                id: Some(json!("t1")),
                name: Some(json!("add")),
                args: Some(json!({"a": 1}))
            }
        );
        let chat = read(json!({"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}));
        assert_eq!(
            chat,
            CallParts {
                id: Some(json!("c1")),
                name: Some(json!("add")),
                args: Some(json!("{\"a\":1}"))
            }
        );
        let responses = read(json!({"type": "function_call", "call_id": "r1", "name": "add", "arguments": "{}"}));
        assert_eq!(
            responses,
            CallParts {
                id: Some(json!("r1")),
                name: Some(json!("add")),
                args: Some(json!("{}"))
            }
        );
    }

    #[test]
    fn edges() {
        // `function` that is not a mapping: the call itself holds the name
        assert_eq!(read(json!({"function": "x", "name": "n"})).name, Some(json!("n")));
        // a null name is no name; a null id falls back to call_id
        let p = read(json!({"id": null, "call_id": "c", "name": null}));
        assert_eq!((p.id, p.name, p.args), (Some(json!("c")), None, None));
        // input wins over arguments, even when null (a present null is passed on)
        assert_eq!(
            read(json!({"name": "n", "input": null, "arguments": "{}"})).args,
            Some(Value::Null)
        );
        assert_eq!(read(json!({"name": "n", "arguments": "{}"})).args, Some(json!("{}")));
    }

    #[test]
    fn problems() {
        assert_eq!(
            CallError::NotAMapping("list".into()).problem(),
            "a tool call must be a dict like {'id': ..., 'name': ..., 'input': {...}}, got list"
        );
        assert_eq!(
            CallError::NameNotAString("int".into()).problem(),
            "the tool call's name must be a string, got int"
        );
    }
}
