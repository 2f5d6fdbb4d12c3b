//! A flat input schema: an object whose properties are each a string (or one of a set of
//! strings), a boolean, an integer, a number, null, an array of those, or a choice among those,
//! with nothing else constraining them. For such a schema, arguments made only of plain values
//! (text, booleans, 64-bit integers, finite floats, None, lists of those) are accepted or not
//! entry by entry, without converting them to JSON first: a binding walks the caller's mapping
//! once, asks [`Flat`] about each entry, and builds the body's arguments and their
//! [`crate::middleware::args_key`] in the same walk.
//!
//! This is an acceptance shortcut and nothing more: [`Flat`] answers only "accepted" or "not
//! sure". Whatever it does not accept (a wrong type, a missing argument, an unknown name, a value
//! it does not know) goes through the full validator ([`crate::validate::ArgumentValidator`]),
//! which decides and words every rejection. Where it accepts, the full validator accepts the same
//! arguments and changes nothing in them (no integral float made an integer, nothing dropped).

use serde_json::{Map, Value};

use crate::middleware;

/// A plain value as a binding reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Atom<'a> {
    Null,
    Bool(bool),
    /// An integer within 64 bits (signed).
    Int(i64),
    /// A finite float.
    Float(f64),
    Str(&'a str),
}

impl Atom<'_> {
    /// The atom in its [`middleware::args_key`] encoding (as its JSON value would be).
    pub fn key(&self, out: &mut Vec<u8>) {
        match *self {
            Atom::Null => middleware::key_null(out),
            Atom::Bool(b) => middleware::key_bool(out, b),
            Atom::Int(i) => middleware::key_int(out, i),
            Atom::Float(f) => middleware::key_float(out, f),
            Atom::Str(s) => middleware::key_string(out, s),
        }
    }
}

/// What one property (or an array's items) accepts.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    String,
    /// One of these strings.
    Enum(Vec<String>),
    Boolean,
    /// An integer (a float, even an integral one, is left to the full validator).
    Integer,
    Number,
    Null,
    Array(Box<Kind>),
    AnyOf(Vec<Kind>),
    /// What the kind accepts but an integral float (`2.0`): where a choice offers an integer,
    /// the full validator makes such a float that integer (its first branch that changes it),
    /// which is its to do.
    NoIntegralFloat(Box<Kind>),
}

/// Keywords that only annotate (no effect on what is valid).
const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];

fn annotation(k: &str) -> bool {
    ANNOTATIONS.contains(&k)
}

impl Kind {
    /// The kind of a property schema, None when it uses anything this module does not decide.
    pub fn of(schema: &Value) -> Option<Kind> {
        let s = schema.as_object()?;
        if let Some(branches) = s.get("anyOf") {
            if s.keys().any(|k| k != "anyOf" && !annotation(k)) {
                return None;
            }
            let kinds = branches.as_array()?.iter().map(Kind::of).collect::<Option<Vec<_>>>()?;
            if kinds.is_empty() {
                return None;
            }
            // An integral float that a branch makes an integer, at this place or as a list's item,
            // is left to the full validator (see `NoIntegralFloat`).
            let at_place = kinds.iter().any(Kind::makes_integers);
            let in_lists = kinds.iter().any(Kind::makes_integer_items);
            let mut kind = Kind::AnyOf(kinds);
            if in_lists {
                kind = kind.no_integral_items();
            }
            if at_place {
                kind = Kind::NoIntegralFloat(Box::new(kind));
            }
            return Some(kind);
        }
        if s.keys()
            .any(|k| !matches!(k.as_str(), "type" | "enum" | "items") && !annotation(k))
        {
            return None;
        }
        if let Some(values) = s.get("enum") {
            if s.contains_key("items") || s.get("type").is_some_and(|t| t != "string") {
                return None;
            }
            let values = values
                .as_array()?
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()?;
            return Some(Kind::Enum(values));
        }
        let types: Vec<&str> = match s.get("type")? {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().map(Value::as_str).collect::<Option<_>>()?,
            _ => return None,
        };
        if s.contains_key("items") && !types.contains(&"array") {
            return None;
        }
        // With `number` among the types, an integer is one of its values (and the full validator
        // makes no integral float an integer there).
        let number = types.contains(&"number");
        let mut kinds = Vec::with_capacity(types.len());
        for t in types {
            kinds.push(match t {
                "string" => Kind::String,
                "boolean" => Kind::Boolean,
                "integer" if number => continue,
                "integer" => Kind::Integer,
                "number" => Kind::Number,
                "null" => Kind::Null,
                "array" => Kind::Array(Box::new(Kind::of(s.get("items")?)?)),
                _ => return None,
            });
        }
        match kinds.len() {
            0 => None,
            1 => kinds.pop(),
            _ => Some(Kind::AnyOf(kinds)),
        }
    }

    /// Whether a value that is `atom` is accepted.
    #[inline]
    pub fn accepts(&self, atom: Atom<'_>) -> bool {
        match self {
            Kind::String => matches!(atom, Atom::Str(_)),
            Kind::Boolean => matches!(atom, Atom::Bool(_)),
            Kind::Null => matches!(atom, Atom::Null),
            Kind::Integer => matches!(atom, Atom::Int(_)),
            Kind::Number => matches!(atom, Atom::Int(_) | Atom::Float(_)),
            Kind::Enum(values) => matches!(atom, Atom::Str(s) if values.iter().any(|v| v == s)),
            Kind::Array(_) => false,
            Kind::AnyOf(kinds) => kinds.iter().any(|k| k.accepts(atom)),
            Kind::NoIntegralFloat(kind) => kind.accepts_unless_integral(atom),
        }
    }

    /// `accepts`, an integral float refused (see `NoIntegralFloat`); out of the common path.
    #[inline(never)]
    fn accepts_unless_integral(&self, atom: Atom<'_>) -> bool {
        !matches!(atom, Atom::Float(f) if f.fract() == 0.0) && self.accepts(atom)
    }

    /// Whether a list is accepted: `items(kind)` says whether every item of the list is
    /// accepted by `kind`, asked for each array kind this one allows.
    pub fn accepts_list(&self, items: &mut dyn FnMut(&Kind) -> bool) -> bool {
        match self {
            Kind::Array(item) => items(item),
            Kind::AnyOf(kinds) => kinds.iter().any(|k| k.accepts_list(items)),
            Kind::NoIntegralFloat(kind) => kind.accepts_list(items),
            _ => false,
        }
    }

    /// Whether the full validator makes an integral float at a place of this kind an integer
    /// (the schema says `integer`, or a choice offers one).
    fn makes_integers(&self) -> bool {
        match self {
            Kind::Integer => true,
            Kind::AnyOf(kinds) => kinds.iter().any(Kind::makes_integers),
            Kind::NoIntegralFloat(kind) => kind.makes_integers(),
            _ => false,
        }
    }

    /// Whether it makes an integral float that is an item of a list at such a place an integer.
    fn makes_integer_items(&self) -> bool {
        match self {
            Kind::Array(item) => item.makes_integers(),
            Kind::AnyOf(kinds) => kinds.iter().any(Kind::makes_integer_items),
            Kind::NoIntegralFloat(kind) => kind.makes_integer_items(),
            _ => false,
        }
    }

    /// This kind with every list's items refusing integral floats (a choice among lists one of
    /// which makes such an item an integer: the full validator decides).
    fn no_integral_items(self) -> Kind {
        match self {
            Kind::Array(item) => Kind::Array(Box::new(Kind::NoIntegralFloat(item))),
            Kind::AnyOf(kinds) => Kind::AnyOf(kinds.into_iter().map(Kind::no_integral_items).collect()),
            Kind::NoIntegralFloat(kind) => Kind::NoIntegralFloat(Box::new(kind.no_integral_items())),
            other => other,
        }
    }
}

/// A flat schema (see the module): its properties, which are required, and their key order.
#[derive(Debug, Clone, PartialEq)]
pub struct Flat {
    names: Vec<String>,
    kinds: Vec<Kind>,
    /// Bit `i`: property `i` is required.
    required: u64,
    /// The property indices in the order of an object's entries in its key.
    sorted: Vec<usize>,
}

/// At most this many properties (one bit each).
pub const MAX_PROPERTIES: usize = 64;

impl Flat {
    /// The flat form of an input schema, None when it is not flat.
    pub fn of(schema: &Value) -> Option<Flat> {
        let s: &Map<String, Value> = schema.as_object()?;
        for (k, v) in s {
            let ok = match k.as_str() {
                "type" => v == "object",
                "properties" | "required" | "$schema" => true,
                "additionalProperties" => v == &Value::Bool(false),
                k => annotation(k),
            };
            if !ok {
                return None;
            }
        }
        if s.get("type")? != "object" {
            return None;
        }
        let props = match s.get("properties") {
            Some(p) => p.as_object()?,
            None => return None,
        };
        if props.len() > MAX_PROPERTIES {
            return None;
        }
        let names: Vec<String> = props.keys().cloned().collect();
        let kinds = props.values().map(Kind::of).collect::<Option<Vec<_>>>()?;
        let mut required = 0u64;
        if let Some(r) = s.get("required") {
            for name in r.as_array()? {
                let i = names.iter().position(|n| Some(n.as_str()) == name.as_str())?;
                required |= 1 << i;
            }
        }
        let mut sorted: Vec<usize> = (0..names.len()).collect();
        sorted.sort_by(|&a, &b| middleware::key_sorted(&names[a], &names[b]));
        Some(Flat {
            names,
            kinds,
            required,
            sorted,
        })
    }

    /// The index of property `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The index of property `name`, met as the `at`-th entry of the arguments: property `at`
    /// is looked at first (arguments usually come in the schema's order).
    pub fn find_at(&self, at: usize, name: &str) -> Option<usize> {
        match self.names.get(at) {
            Some(n) if n == name => Some(at),
            _ => self.find(name),
        }
    }

    pub fn kind(&self, i: usize) -> &Kind {
        &self.kinds[i]
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Whether the properties present (bit `i`: property `i`) include every required one.
    pub fn has_required(&self, present: u64) -> bool {
        present & self.required == self.required
    }

    /// The present properties (bit `i`: property `i`) in the order their entries take in the
    /// arguments' key.
    pub fn key_order(&self, present: u64) -> impl Iterator<Item = usize> + '_ {
        self.sorted.iter().copied().filter(move |&i| present & (1 << i) != 0)
    }
}

/// A value as [`Flat`] reads it: an atom or a list of atoms.
#[derive(Debug, Clone, PartialEq)]
pub enum Plain<'a> {
    Atom(Atom<'a>),
    List(Vec<Atom<'a>>),
}

impl Flat {
    /// Whether `entries` (name, value) are accepted, and if so their key. For tests and for
    /// values held as a whole; a binding walks its own values the same way.
    pub fn accept(&self, entries: &[(&str, Plain<'_>)]) -> Option<Vec<u8>> {
        let mut present = 0u64;
        let mut at = [usize::MAX; MAX_PROPERTIES];
        for (n, (name, value)) in entries.iter().enumerate() {
            let i = self.find(name)?;
            if present & (1 << i) != 0 {
                return None;
            }
            let ok = match value {
                Plain::Atom(a) => self.kind(i).accepts(*a),
                Plain::List(items) => self.kind(i).accepts_list(&mut |k| items.iter().all(|a| k.accepts(*a))),
            };
            if !ok {
                return None;
            }
            present |= 1 << i;
            at[i] = n;
        }
        if !self.has_required(present) {
            return None;
        }
        let mut key = Vec::with_capacity(64);
        middleware::key_object(&mut key, entries.len());
        for i in self.key_order(present) {
            middleware::key_entry_name(&mut key, self.name(i));
            match &entries[at[i]].1 {
                Plain::Atom(a) => a.key(&mut key),
                Plain::List(items) => {
                    middleware::key_array(&mut key, items.len());
                    for a in items {
                        a.key(&mut key);
                    }
                }
            }
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::ArgumentValidator;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "query": {"type": "string", "description": "q."},
            "scope": {"type": "string", "enum": ["all", "code", "issues", "docs"], "description": "s."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "t."},
            "exact": {"type": "boolean", "description": "e."},
            "limit": {"type": "integer", "description": "l.", "default": 10},
            "min_score": {"anyOf": [{"type": "number"}, {"type": "null"}], "description": "m.", "default": null}},
            "required": ["query", "scope", "tags", "exact"], "additionalProperties": false})
    }

    fn to_json(entries: &[(&str, Plain<'_>)]) -> Value {
        let atom = |a: &Atom<'_>| match *a {
            Atom::Null => Value::Null,
            Atom::Bool(b) => json!(b),
            Atom::Int(i) => json!(i),
            Atom::Float(f) => json!(f),
            Atom::Str(s) => json!(s),
        };
        let mut m = Map::new();
        for (k, v) in entries {
            let v = match v {
                Plain::Atom(a) => atom(a),
                Plain::List(items) => Value::Array(items.iter().map(atom).collect()),
            };
            m.insert((*k).to_owned(), v);
        }
        Value::Object(m)
    }

    #[test]
    fn the_schema_of_a_plain_function_is_flat() {
        let f = Flat::of(&schema()).expect("flat");
        assert_eq!(f.find("tags"), Some(2));
        assert_eq!(f.find_at(2, "tags"), Some(2));
        assert_eq!(f.find_at(0, "tags"), Some(2));
        assert_eq!(f.find_at(9, "tags"), Some(2));
        assert_eq!(f.find_at(2, "other"), None);
        assert_eq!(f.kind(2), &Kind::Array(Box::new(Kind::String)));
        assert_eq!(f.kind(5), &Kind::AnyOf(vec![Kind::Number, Kind::Null]));
        assert_eq!(
            f.kind(1),
            &Kind::Enum(vec!["all".into(), "code".into(), "issues".into(), "docs".into()])
        );
        // the key order: exact, limit, min_score, query, scope, tags
        assert_eq!(f.key_order(0b111111).collect::<Vec<_>>(), vec![3, 4, 5, 0, 1, 2]);
        assert!(f.has_required(0b1111));
        assert!(!f.has_required(0b0111));
    }

    #[test]
    fn a_schema_with_anything_else_is_not_flat() {
        let with = |path: &[&str], key: &str, v: Value| {
            let mut s = schema();
            let mut at = &mut s;
            for p in path {
                at = at.get_mut(*p).expect("path");
            }
            at.as_object_mut().expect("object").insert(key.to_owned(), v);
            Flat::of(&s)
        };
        assert!(with(&[], "description", json!("x")).is_some());
        assert!(with(&[], "$defs", json!({})).is_none());
        assert!(with(&[], "additionalProperties", json!(true)).is_none());
        assert!(with(&[], "minProperties", json!(1)).is_none());
        assert!(with(&["properties", "query"], "minLength", json!(1)).is_none());
        assert!(with(&["properties", "query"], "format", json!("email")).is_none());
        assert!(with(&["properties", "query"], "pattern", json!("a")).is_none());
        assert!(with(&["properties", "limit"], "minimum", json!(0)).is_none());
        assert!(with(&["properties", "tags"], "maxItems", json!(2)).is_none());
        assert!(with(&["properties", "tags", "items"], "enum", json!(["a"])).is_some());
        assert!(with(&["properties", "tags", "items"], "enum", json!([1])).is_none());
        assert!(with(&["properties", "query"], "type", json!("object")).is_none());
        assert!(with(&["properties", "query"], "type", json!(["string", "null"])).is_some());
        assert!(with(&["properties", "query"], "$ref", json!("#/$defs/x")).is_none());
        assert!(with(&["properties", "query"], "const", json!("x")).is_none());
        assert!(with(&["properties"], "any", json!({})).is_none());
        assert!(with(&["properties"], "any", json!(true)).is_none());
        assert!(with(&["properties", "min_score"], "type", json!("number")).is_none());
        assert!(Flat::of(&json!({"type": "object"})).is_none());
        assert!(Flat::of(&json!({"type": "object", "properties": {}})).is_some());
    }

    #[test]
    fn what_is_accepted_the_validator_accepts_unchanged_with_the_same_key() {
        let flat = Flat::of(&schema()).expect("flat");
        let v = ArgumentValidator::new(schema(), Vec::new()).expect("schema");
        use Atom::*;
        let atoms = [
            Null,
            Bool(true),
            Bool(false),
            Int(0),
            Int(-3),
            Int(i64::MAX),
            Int(i64::MIN),
            Float(1.5),
            Float(2.0),
            Float(-0.0),
            Str(""),
            Str("docs"),
            Str("everything"),
            Str("é\"x"),
        ];
        let mut plains: Vec<Plain<'_>> = atoms.iter().map(|a| Plain::Atom(*a)).collect();
        plains.push(Plain::List(vec![]));
        plains.push(Plain::List(vec![Str("api"), Str("http")]));
        plains.push(Plain::List(vec![Str("api"), Int(1)]));
        plains.push(Plain::List(vec![Null]));
        let base = [
            ("query", Plain::Atom(Str("rate limits"))),
            ("scope", Plain::Atom(Str("docs"))),
            ("tags", Plain::List(vec![Str("api")])),
            ("exact", Plain::Atom(Bool(false))),
        ];
        let (mut accepted, mut refused) = (0, 0);
        for name in ["query", "scope", "tags", "exact", "limit", "min_score", "other"] {
            for p in &plains {
                let mut entries: Vec<(&str, Plain<'_>)> = base.iter().filter(|(k, _)| *k != name).cloned().collect();
                entries.push((name, p.clone()));
                let json = to_json(&entries);
                let valid = v.check(&json).is_ok();
                match flat.accept(&entries) {
                    Some(key) => {
                        accepted += 1;
                        assert!(valid, "{json}");
                        let mut fixed = json.clone();
                        let fix = crate::validate::integral_floats_to_ints(v.schema(), &mut fixed);
                        assert!(!fix.changed, "{json}");
                        assert_eq!(key, middleware::args_key(&json), "{json}");
                    }
                    None => refused += 1,
                }
            }
            // without it
            let entries: Vec<(&str, Plain<'_>)> = base.iter().filter(|(k, _)| *k != name).cloned().collect();
            let json = to_json(&entries);
            assert_eq!(flat.accept(&entries).is_some(), v.check(&json).is_ok(), "{json}");
        }
        // query: 4 strings; scope: "docs"; tags: [] and two strings; exact: 2; limit: 4 integers;
        // min_score: null, 4 integers, 3 floats; an unknown name: none
        assert_eq!((accepted, refused), (21, 105));
    }

    #[test]
    fn an_integral_float_a_choice_makes_an_integer_is_left_to_the_validator() {
        use Atom::*;
        let values = [
            Plain::Atom(Int(2)),
            Plain::Atom(Float(2.0)),
            Plain::Atom(Float(-0.0)),
            Plain::Atom(Float(2.5)),
            Plain::Atom(Null),
            Plain::List(vec![Int(2), Float(2.5)]),
            Plain::List(vec![Float(2.0)]),
            Plain::List(vec![Float(2.5), Null]),
        ];
        // Per property schema: which of `values` the walk accepts (the others go to the validator).
        let cases = [
            // int | float: 2.0 and -0.0 become integers there
            (json!({"anyOf": [{"type": "integer"}, {"type": "number"}]}), "1..1...."),
            (json!({"anyOf": [{"type": "number"}, {"type": "integer"}]}), "1..1...."),
            (
                json!({"anyOf": [{"type": ["integer", "null"]}, {"type": "number"}]}),
                "1..11...",
            ),
            // a type list with `number`: nothing becomes an integer
            (json!({"type": ["integer", "number"]}), "1111...."),
            (
                json!({"anyOf": [{"type": ["integer", "number"]}, {"type": "null"}]}),
                "11111...",
            ),
            (json!({"anyOf": [{"type": "integer"}, {"type": "null"}]}), "1...1..."),
            // lists: a choice among lists of integers and of numbers
            (
                json!({"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "number"}}]}),
                ".....1..",
            ),
            (
                json!({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}),
                ".....1..",
            ),
            (
                json!({"type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "null"}]}}),
                ".....111",
            ),
            // an integer beside a list of numbers: a list's items are not at the integer's place
            (
                json!({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "number"}}]}),
                "1....11.",
            ),
        ];
        for (prop, want) in cases {
            let schema = json!({"type": "object", "properties": {"x": prop}, "additionalProperties": false});
            let flat = Flat::of(&schema).unwrap_or_else(|| panic!("flat: {schema}"));
            let v = ArgumentValidator::new(schema.clone(), Vec::new()).expect("schema");
            let mut got = String::new();
            for p in &values {
                let entries = [("x", p.clone())];
                let json = to_json(&entries);
                match flat.accept(&entries) {
                    Some(key) => {
                        got.push('1');
                        assert!(v.check(&json).is_ok(), "{schema} {json}");
                        let mut fixed = json.clone();
                        let fix = crate::validate::integral_floats_to_ints(v.schema(), &mut fixed);
                        assert!(!fix.changed, "{schema} {json}");
                        assert_eq!(key, middleware::args_key(&json), "{json}");
                    }
                    None => got.push('.'),
                }
            }
            assert_eq!(got, want, "{schema}");
        }
    }

    /// Every property schema of a small grammar (leaves, type lists, arrays, choices, nested
    /// one level) against atoms and short lists: whatever the walk accepts, the validator accepts
    /// unchanged, with the same key.
    #[test]
    fn what_any_small_flat_schema_accepts_the_validator_accepts_unchanged() {
        use Atom::*;
        let leaves = [
            json!({"type": "string"}),
            json!({"type": "boolean"}),
            json!({"type": "integer"}),
            json!({"type": "number"}),
            json!({"type": "null"}),
            json!({"enum": ["a"]}),
            json!({"type": ["integer", "null"]}),
            json!({"type": ["number", "integer"]}),
            json!({"type": ["string", "number"]}),
        ];
        let mut props: Vec<Value> = leaves.to_vec();
        for l in &leaves {
            props.push(json!({"type": "array", "items": l}));
            props.push(json!({"type": ["array", "null"], "items": l}));
        }
        let singles = props.clone();
        for a in &singles {
            for b in &singles {
                props.push(json!({"anyOf": [a, b]}));
            }
        }
        for a in &leaves {
            for b in &leaves {
                props.push(json!({"type": "array", "items": {"anyOf": [a, b]}}));
            }
        }
        let atoms = [
            Null,
            Bool(true),
            Int(2),
            Int(-1),
            Float(2.0),
            Float(2.5),
            Float(-0.0),
            Float(1e20),
            Str("a"),
            Str("b"),
        ];
        let mut values: Vec<Plain<'_>> = atoms.iter().map(|a| Plain::Atom(*a)).collect();
        values.push(Plain::List(vec![]));
        for a in &atoms {
            values.push(Plain::List(vec![*a]));
            for b in &atoms {
                values.push(Plain::List(vec![*a, *b]));
            }
        }
        let (mut schemas, mut accepted) = (0, 0);
        for prop in &props {
            let schema = json!({"type": "object", "properties": {"x": prop}, "required": ["x"]});
            let Some(flat) = Flat::of(&schema) else {
                panic!("not flat: {schema}");
            };
            schemas += 1;
            let v = ArgumentValidator::new(schema.clone(), Vec::new()).expect("schema");
            for p in &values {
                let entries = [("x", p.clone())];
                if let Some(key) = flat.accept(&entries) {
                    accepted += 1;
                    let json = to_json(&entries);
                    assert!(v.check(&json).is_ok(), "{schema} {json}");
                    let mut fixed = json.clone();
                    let fix = crate::validate::integral_floats_to_ints(v.schema(), &mut fixed);
                    assert!(!fix.changed && !fix.beyond_64_bits, "{schema} {json}");
                    assert_eq!(key, middleware::args_key(&json), "{schema} {json}");
                }
            }
        }
        assert_eq!(schemas, 9 + 18 + 27 * 27 + 81);
        assert!(accepted > 10_000, "{accepted}");
    }

    #[test]
    fn an_argument_given_twice_is_left_to_the_validator() {
        let flat = Flat::of(&schema()).expect("flat");
        let e = [
            ("query", Plain::Atom(Atom::Str("a"))),
            ("query", Plain::Atom(Atom::Str("b"))),
            ("scope", Plain::Atom(Atom::Str("docs"))),
            ("tags", Plain::List(vec![])),
            ("exact", Plain::Atom(Atom::Bool(true))),
        ];
        assert_eq!(flat.accept(&e), None);
    }
}
