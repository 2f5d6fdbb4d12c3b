//! The registry of tools: names, the one tool-name rule, a byte-stable order (names sorted by
//! byte), insertion order, the replace rule, and the lookup of a call (its name read through the
//! call-shape rule of `calls`) that answers `unknown_tool` / `invalid_call` failures.
//!
//! Generic over the stored tool handle `T` (the binding stores the Python tool and its compiled
//! core), so this module knows nothing of Python.

use std::collections::BTreeMap;

use crate::calls::{self, CallError, CallMap};
use crate::envelope::Failure;

/// The longest tool name model providers accept, in characters.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The one tool-name rule, applied by every way of making or registering a tool: 1 to
/// [`MAX_TOOL_NAME_CHARS`] characters from a-z, A-Z, 0-9, `_` and `-`, the whole name (a
/// trailing newline included).
pub fn valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME_CHARS).contains(&name.len()) && name.bytes().all(is_name_byte)
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// `name` with every character the rule refuses replaced by `_` (the length is not changed:
/// check the result with [`valid_tool_name`]).
pub fn sanitized_tool_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii() && is_name_byte(c as u8) { c } else { '_' })
        .collect()
}

/// How a refused name is shown when the host cannot quote it (its `repr` failed).
pub const UNPRINTABLE_NAME: &str = "<unprintable>";

/// The message of a name the rule refuses; `shown` is the name as the host's language quotes it
/// (Python's `repr`; [`UNPRINTABLE_NAME`] when it cannot).
pub fn tool_name_message(shown: &str) -> String {
    format!(
        "tool name {shown} is not accepted by model providers: use 1-{MAX_TOOL_NAME_CHARS} characters \
         from a-z, A-Z, 0-9, '_' and '-' (pass name=...)"
    )
}

/// Why the registry refused a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The name breaks the tool-name rule ([`tool_name_message`] words it).
    BadName(String),
    /// The name is taken and the caller did not ask to replace the tool.
    Taken(String),
    /// No tool has the name.
    NotFound(String),
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistryError::BadName(n) => f.write_str(&tool_name_message(&format!("{n:?}"))),
            RegistryError::Taken(n) => {
                write!(
                    f,
                    "ToolRegistry: tool '{n}' already registered. Pass replace=True to swap deliberately."
                )
            }
            RegistryError::NotFound(n) => write!(f, "no tool '{n}'"),
        }
    }
}

impl std::error::Error for RegistryError {}

/// What a call's lookup found.
#[derive(Debug)]
pub enum Lookup<'r, T, V, D = ()> {
    /// The registered tool the call names, and its arguments (None when it has none).
    Found(&'r T, Option<V>),
    /// The call names no tool, or a tool that is not registered: the failure to answer with.
    Refused(Failure<'static, D>),
    /// The call's name is not a string.
    Malformed(CallError),
}

/// Tools by name: the names sorted by byte (the order of schemas and renderings, stable across
/// runs and registration orders) and the order they were added in.
#[derive(Debug, Clone)]
pub struct Registry<T> {
    by_name: BTreeMap<String, T>,
    order: Vec<String>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            by_name: BTreeMap::new(),
            order: Vec::new(),
        }
    }
}

impl<T> Registry<T> {
    /// Add `tool` under `name`. A taken name is refused unless `replace` (the tool then keeps
    /// its place in the insertion order); a name the rule refuses is refused.
    pub fn add(&mut self, name: &str, tool: T, replace: bool) -> Result<(), RegistryError> {
        if !valid_tool_name(name) {
            return Err(RegistryError::BadName(name.to_owned()));
        }
        if let Some(slot) = self.by_name.get_mut(name) {
            if !replace {
                return Err(RegistryError::Taken(name.to_owned()));
            }
            *slot = tool;
            return Ok(());
        }
        self.order.push(name.to_owned());
        self.by_name.insert(name.to_owned(), tool);
        Ok(())
    }

    /// Remove the tool called `name` and return it.
    pub fn remove(&mut self, name: &str) -> Result<T, RegistryError> {
        let tool = self
            .by_name
            .remove(name)
            .ok_or_else(|| RegistryError::NotFound(name.to_owned()))?;
        self.order.retain(|n| n != name);
        Ok(tool)
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Result<&T, RegistryError> {
        self.by_name
            .get(name)
            .ok_or_else(|| RegistryError::NotFound(name.to_owned()))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The names, sorted by byte.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// The tools, sorted by name.
    pub fn sorted(&self) -> impl ExactSizeIterator<Item = &T> {
        self.by_name.values()
    }

    /// The tools in the order they were added.
    pub fn in_order(&self) -> impl Iterator<Item = &T> {
        self.order.iter().filter_map(|n| self.by_name.get(n))
    }

    /// The `unknown_tool` failure for `name`: every registered name, and the closest one when
    /// it is a likely typo.
    pub fn unknown_tool<'a, D>(&self, name: &str) -> Failure<'a, D> {
        let names: Vec<&str> = self.names().collect();
        Failure::unknown_tool(name, &names)
    }

    /// The tool `call` names and its arguments, read through the call-shape rule of `calls`;
    /// or the `invalid_call` / `unknown_tool` failure. Errors are the mapping's own.
    pub fn lookup<M: CallMap, D>(&self, call: &M) -> Result<Lookup<'_, T, M::Value, D>, M::Error> {
        let parts = calls::parts(call)?;
        let Some(name) = &parts.name else {
            return Ok(Lookup::Refused(Failure::no_tool_name()));
        };
        let name = match M::text(name) {
            Ok(n) => n,
            Err(type_name) => return Ok(Lookup::Malformed(CallError::NameNotAString(type_name))),
        };
        Ok(match self.by_name.get(name) {
            Some(tool) => Lookup::Found(tool, parts.args),
            None => Lookup::Refused(self.unknown_tool(name)),
        })
    }
}

/// The registered name closest to `name`, when one is close enough to be a likely typo:
/// a case-insensitive match, or an optimal-string-alignment distance of at most a third of the
/// name's length (at least 1). Ties go to the alphabetically first name.
///
/// Linear in the length of `name` whatever it is: a candidate whose length differs from the
/// name's by more than the budget cannot be within it and is skipped before any distance is
/// computed (so a megabyte-long name costs one pass, not one distance per tool).
pub fn closest<'a>(name: &str, names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    let budget = (len / 3).max(1);
    let lower = name.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in names {
        if candidate.chars().count().abs_diff(len) > budget {
            continue;
        }
        let d = if candidate.to_lowercase() == lower {
            0
        } else {
            strsim::osa_distance(&lower, &candidate.to_lowercase())
        };
        if d <= budget && best.is_none_or(|(bd, bn)| d < bd || (d == bd && candidate < bn)) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cheap() {
        let huge = "x".repeat(1_000_000);
        let names: Vec<String> = (0..500).map(|i| format!("tool_{i}")).collect();
        let started = std::time::Instant::now();
        assert_eq!(closest(&huge, names.iter().map(String::as_str)), None);
        // generous bound on a hang: the quadratic version took seconds
        assert!(started.elapsed().as_secs_f64() < 1.0);
    }

    #[test]
    fn an_unprintable_refused_name() {
        assert_eq!(
            tool_name_message(UNPRINTABLE_NAME),
            "tool name <unprintable> is not accepted by model providers: use 1-64 characters from a-z, A-Z, \
             0-9, '_' and '-' (pass name=...)"
        );
    }

    #[test]
    fn the_name_rule() {
        for good in ["a", "check_stock", "A-1_b", &"a".repeat(64)] {
            assert!(valid_tool_name(good), "{good:?}");
        }
        for bad in [
            "",
            "research\n",
            "has space",
            "dots.not.allowed",
            "tööl",
            "<lambda>",
            &"a".repeat(65),
        ] {
            assert!(!valid_tool_name(bad), "{bad:?}");
        }
        assert_eq!(sanitized_tool_name("srv.tööl x"), "srv_t__l_x");
        assert_eq!(
            RegistryError::BadName("a b".into()).to_string(),
            "tool name \"a b\" is not accepted by model providers: use 1-64 characters from a-z, A-Z, 0-9, '_' and '-' (pass name=...)"
        );
    }

    #[test]
    fn order_and_the_replace_rule() {
        let mut r: Registry<u32> = Registry::default();
        r.add("b", 1, false).unwrap();
        r.add("a", 2, false).unwrap();
        r.add("B", 3, false).unwrap();
        assert_eq!(r.names().collect::<Vec<_>>(), ["B", "a", "b"]);
        assert_eq!(r.in_order().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(r.add("a", 9, false), Err(RegistryError::Taken("a".into())));
        assert_eq!(
            RegistryError::Taken("a".into()).to_string(),
            "ToolRegistry: tool 'a' already registered. Pass replace=True to swap deliberately."
        );
        r.add("a", 9, true).unwrap();
        assert_eq!(r.in_order().copied().collect::<Vec<_>>(), [1, 9, 3]);
        assert_eq!(r.add("a b", 0, true), Err(RegistryError::BadName("a b".into())));
        assert_eq!(r.remove("b"), Ok(1));
        assert_eq!(r.remove("b"), Err(RegistryError::NotFound("b".into())));
        assert_eq!(RegistryError::NotFound("b".into()).to_string(), "no tool 'b'");
        assert_eq!(r.sorted().copied().collect::<Vec<_>>(), [3, 9]);
        assert_eq!((r.len(), r.contains("a"), r.get("zz").is_err()), (2, true, true));
    }

    #[test]
    fn lookup() {
        use serde_json::{json, Map, Value};
        let mut r: Registry<&str> = Registry::default();
        r.add("check_stock", "CS", false).unwrap();
        let call = |v: Value| -> Map<String, Value> { v.as_object().unwrap().clone() };
        match r
            .lookup::<_, ()>(&call(json!({"function": {"name": "check_stock", "arguments": "{}"}})))
            .unwrap()
        {
            Lookup::Found(t, args) => assert_eq!((*t, args), ("CS", Some(json!("{}")))),
            other => panic!("{other:?}"),
        }
        match r.lookup::<_, ()>(&call(json!({"name": "chek_stock"}))).unwrap() {
            Lookup::Refused(f) => assert_eq!(f.did_you_mean.as_deref(), Some("check_stock")),
            other => panic!("{other:?}"),
        }
        match r.lookup::<_, ()>(&call(json!({"name": null, "input": {}}))).unwrap() {
            Lookup::Refused(f) => assert_eq!(f.message, crate::errors::NO_TOOL_NAME_MESSAGE),
            other => panic!("{other:?}"),
        }
        match r.lookup::<_, ()>(&call(json!({"name": 5}))).unwrap() {
            Lookup::Malformed(e) => assert_eq!(e, CallError::NameNotAString("integer".into())),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn closest_names() {
        let names = ["check_stock", "find_sku", "slow_report"];
        assert_eq!(closest("chekc_stock", names), Some("check_stock"));
        assert_eq!(closest("Find_SKU", names), Some("find_sku"));
        assert_eq!(closest("weather", names), None);
        assert_eq!(closest("", names), None);
    }
}
