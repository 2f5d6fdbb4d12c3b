//! Assembling a tool's definition: the description the model reads and the input schema.
//! Python reads the signature and type hints into [`ParamSpec`]s; everything from
//! there on — docstring parsing, the 30-character floor, descriptions, `required`, defaults and
//! `additionalProperties` — happens here, once per tool.

use serde_json::{Map, Value};

use crate::docstring::{self, DocstringError};

/// The minimum length of a tool description after stripping: shorter ones are refused at definition time.
pub const MIN_DESCRIPTION_CHARS: usize = 30;

/// The default an optional parameter advertises in the input schema: its JSON when the
/// parameter has a default (`default`: None when it has none) that JSON can carry — the host's
/// introspection did not find it otherwise (`carried`: not NaN, not an integer beyond 64 bits,
/// ...) and its conversion (`json`, asked only then) succeeds. A required parameter advertises
/// none. The one rule for every way a tool is defined.
pub fn advertised_default<D, E>(
    required: bool,
    default: Option<D>,
    carried: bool,
    json: impl FnOnce(D) -> Result<Value, E>,
) -> Option<Value> {
    if required || !carried {
        return None;
    }
    json(default?).ok()
}

/// One advertised parameter, as Python's introspection found it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    /// The JSON Schema fragment of the parameter's type (`{}` when unconstrained).
    pub schema: Value,
    /// True when the parameter has no default.
    pub required: bool,
    /// The JSON value of the default, when it has one that JSON can represent.
    pub default: Option<Value>,
    /// A description that wins over the docstring's (from `Annotated`).
    pub description: Option<String>,
}

/// What a tool definition produces.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// The description the model reads.
    pub description: String,
    /// The input schema: a JSON Schema object, properties in signature order.
    pub parameters: Value,
    /// Names the docstring documents, in order (for lint).
    pub documented: Vec<String>,
}

impl Definition {
    /// Place `defs` (the `$defs` of recursive types) at the root of the input schema; an empty
    /// or non-object `defs` adds nothing.
    pub fn set_defs(&mut self, defs: Value) {
        if let (Value::Object(root), true) = (&mut self.parameters, defs.as_object().is_some_and(|d| !d.is_empty())) {
            root.insert("$defs".into(), defs);
        }
    }
}

/// Why a definition was refused. The Display text is the whole model-independent message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefinitionError {
    Docstring {
        tool: String,
        error: DocstringError,
    },
    /// `cut`: the docstring had text below a `---` line, which was not counted.
    TooShort {
        tool: String,
        chars: usize,
        text: String,
        cut: bool,
    },
    /// The input schema does not compile (`error`: why).
    Schema {
        tool: String,
        error: String,
    },
}

impl std::fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DefinitionError::Docstring { tool, error } => write!(f, "tool '{tool}': {error}"),
            DefinitionError::Schema { tool, error } => write!(f, "tool '{tool}': {error}"),
            DefinitionError::TooShort { tool, chars, text, cut } => {
                write!(
                    f,
                    "tool '{tool}' needs a docstring/description of at least {MIN_DESCRIPTION_CHARS} \
                     characters (the model reads it to decide when and how to call the tool: say what \
                     it does and when to use it); got {chars} chars: '{text}'"
                )?;
                if *cut {
                    f.write_str(
                        ". The text below the '---' line is for humans and was not counted: move what \
                         the model needs above that line",
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DefinitionError {}

/// Build a tool's description and input schema.
///
/// `explicit` is a `description=` given by the user (used as given, stripped); otherwise the
/// docstring `doc` is parsed. `allow_extra` is true when the function takes
/// `**kwargs`.
///
/// # Errors
/// A TODO-style marker in the model-visible docstring, or a description under
/// [`MIN_DESCRIPTION_CHARS`] characters.
pub fn define(
    tool: &str,
    explicit: Option<&str>,
    doc: Option<&str>,
    params: Vec<ParamSpec>,
    allow_extra: bool,
) -> Result<Definition, DefinitionError> {
    let explicit = explicit.filter(|text| !text.trim().is_empty());
    let parsed = match doc {
        Some(d) if !d.trim().is_empty() => {
            docstring::parse_with(d, explicit.is_none()).map_err(|error| DefinitionError::Docstring {
                tool: tool.to_owned(),
                error,
            })?
        }
        _ => docstring::ParsedDocstring {
            description: String::new(),
            params: Vec::new(),
            returns: None,
        },
    };
    let description = match explicit {
        Some(text) => text.trim().to_owned(),
        None => parsed.description.clone(),
    };
    let chars = description.chars().count();
    if chars < MIN_DESCRIPTION_CHARS {
        let cut = explicit.is_none() && doc.is_some_and(docstring::has_cut_text);
        return Err(DefinitionError::TooShort {
            tool: tool.to_owned(),
            chars,
            text: description,
            cut,
        });
    }
    let documented = parsed.params.iter().map(|(n, _)| n.clone()).collect();
    let parameters = input_schema(params, &parsed.params, allow_extra);
    Ok(Definition {
        description,
        parameters,
        documented,
    })
}

/// The input schema of a parameter list: `properties` in signature order (each with its
/// description and JSON default), `required` (no default), `additionalProperties: false` unless
/// the function takes `**kwargs`.
pub fn input_schema(params: Vec<ParamSpec>, docs: &[(String, String)], allow_extra: bool) -> Value {
    let mut properties = Map::with_capacity(params.len());
    let mut required = Vec::new();
    for p in params {
        let mut prop = match p.schema {
            Value::Object(m) => m,
            Value::Bool(true) => Map::new(),
            other => {
                // A boolean `false` schema or a non-object: keep it under `allOf` so the
                // description can still be attached.
                let mut m = Map::new();
                m.insert("allOf".into(), Value::Array(vec![other]));
                m
            }
        };
        let described = p
            .description
            .or_else(|| docs.iter().find(|(n, _)| *n == p.name).map(|(_, d)| d.clone()))
            .filter(|d| !d.is_empty());
        if let Some(d) = described {
            prop.insert("description".into(), Value::String(d));
        }
        if let Some(default) = p.default {
            prop.insert("default".into(), default);
        }
        if p.required {
            required.push(Value::String(p.name.clone()));
        }
        properties.insert(p.name, Value::Object(prop));
    }
    let mut schema = Map::with_capacity(4);
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), Value::Array(required));
    if !allow_extra {
        schema.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defs_go_to_the_root_when_there_are_some() {
        let mut d = Definition {
            description: String::new(),
            parameters: json!({"type": "object"}),
            documented: vec![],
        };
        d.set_defs(json!({}));
        d.set_defs(json!(null));
        assert_eq!(d.parameters, json!({"type": "object"}));
        d.set_defs(json!({"Node": {"type": "object"}}));
        assert_eq!(
            d.parameters,
            json!({"type": "object", "$defs": {"Node": {"type": "object"}}})
        );
    }

    fn param(name: &str, schema: Value, default: Option<Value>) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            schema,
            required: default.is_none(),
            default,
            description: None,
        }
    }

    const DOC: &str = "Report how many units of one SKU are available to ship today.

    Args:
        sku: The exact SKU identifier, e.g. \"SKU-1001\". Get it from find_sku.
        warehouse: Which warehouse to check. \"any\" checks all of them.
    ";

    #[test]
    fn assembles_the_seed_schema() {
        let def = define(
            "check_stock",
            None,
            Some(DOC),
            vec![
                param("sku", json!({"type": "string"}), None),
                param(
                    "warehouse",
                    json!({"type": "string", "enum": ["AMS", "SIN", "any"]}),
                    Some(json!("any")),
                ),
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            def.description,
            "Report how many units of one SKU are available to ship today."
        );
        assert_eq!(def.documented, vec!["sku", "warehouse"]);
        assert_eq!(
            serde_json::to_string(&def.parameters).unwrap(),
            r#"{"type":"object","properties":{"sku":{"type":"string","description":"The exact SKU identifier, e.g. \"SKU-1001\". Get it from find_sku."},"warehouse":{"type":"string","enum":["AMS","SIN","any"],"description":"Which warehouse to check. \"any\" checks all of them.","default":"any"}},"required":["sku"],"additionalProperties":false}"#
        );
    }

    #[test]
    fn annotated_description_wins_and_kwargs_open_the_object() {
        let mut p = param("q", json!({"type": "string"}), None);
        p.description = Some("From Annotated.".into());
        let schema = input_schema(vec![p], &[("q".into(), "From the docstring.".into())], true);
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {"q": {"type": "string", "description": "From Annotated."}}, "required": ["q"]})
        );
    }

    #[test]
    fn floor_and_markers() {
        let err = define("f", None, Some("Too short."), vec![], false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool 'f' needs a docstring/description of at least 30 characters (the model reads it \
             to decide when and how to call the tool: say what it does and when to use it); got 10 \
             chars: 'Too short.'"
        );
        let err = define("f", None, None, vec![], false).unwrap_err();
        assert!(matches!(
            err,
            DefinitionError::TooShort {
                chars: 0,
                cut: false,
                ..
            }
        ));
        // Everything below the `---` line is for humans: the message says it was not counted.
        let err = define(
            "f",
            None,
            Some("\n---\nA long explanation for the humans who maintain it.\n"),
            vec![],
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool 'f' needs a docstring/description of at least 30 characters (the model reads it \
             to decide when and how to call the tool: say what it does and when to use it); got 0 \
             chars: ''. The text below the '---' line is for humans and was not counted: move what \
             the model needs above that line"
        );
        // An explicit description is used as given: no docstring rules apply to it.
        let def = define(
            "f",
            Some("  TODO: this text is long enough to pass the floor  "),
            Some("x"),
            vec![],
            false,
        )
        .unwrap();
        assert_eq!(def.description, "TODO: this text is long enough to pass the floor");
        // ... and the docstring's summary, which it replaces, is not checked for markers.
        let def = define(
            "f",
            Some("Explicit text that is long enough to pass."),
            Some("Short.\n\nTODO: later"),
            vec![],
            false,
        )
        .unwrap();
        assert_eq!(def.description, "Explicit text that is long enough to pass.");
        let err = define(
            "f",
            None,
            Some("Does a thing that is long enough to pass.\n\nTODO: later"),
            vec![],
            false,
        )
        .unwrap_err();
        assert!(matches!(err, DefinitionError::Docstring { .. }));
        assert!(err.to_string().starts_with("tool 'f': "));
    }

    #[test]
    fn a_schema_that_does_not_compile_names_its_tool() {
        let e = DefinitionError::Schema {
            tool: "t".into(),
            error: "bad pattern".into(),
        };
        assert_eq!(e.to_string(), "tool 't': bad pattern");
    }

    #[test]
    fn which_defaults_are_advertised() {
        let json = |d: i64| Ok::<_, ()>(Value::from(d));
        let not_json = |_: i64| Err::<Value, _>("nested too deep");
        let asked = |_: i64| -> Result<Value, ()> { panic!("converted") };
        assert_eq!(advertised_default(false, Some(5), true, json), Some(Value::from(5)));
        // a default the host found JSON cannot carry, or whose conversion fails, is not advertised
        assert_eq!(advertised_default(false, Some(5), false, asked), None);
        assert_eq!(advertised_default(false, Some(5), true, not_json), None);
        // no default, or a required parameter: none (nothing converted)
        assert_eq!(advertised_default(false, None, true, asked), None);
        assert_eq!(advertised_default(true, Some(5), true, asked), None);
        assert_eq!(advertised_default(true, Some(5), false, asked), None);
    }
}
