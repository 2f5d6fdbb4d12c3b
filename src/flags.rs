//! A tool's flags as the call pipeline reads them: which attributes a call's admission reads,
//! which raw values can be kept between calls, and what each value means to the rules. The
//! binding reads the raw attribute values (converting each into a [`Raw`]) and asks here.

use crate::pipeline::{BodyKind, Needs};

/// The flags a call's admission reads, in this order (their index is their bit in
/// [`read_by`]'s mask).
pub const NAMES: [&str; 7] = [
    "name",
    "requires_approval",
    "side_effecting",
    "idempotent",
    "effects_declared",
    "timeout_s",
    "url_arg",
];

pub const NAME: usize = 0;
pub const REQUIRES_APPROVAL: usize = 1;
pub const SIDE_EFFECTING: usize = 2;
pub const IDEMPOTENT: usize = 3;
pub const EFFECTS_DECLARED: usize = 4;
pub const TIMEOUT_S: usize = 5;
pub const URL_ARG: usize = 6;

/// An attribute value as the binding read it, converted without running the value's own code.
#[derive(Debug, Clone, PartialEq)]
pub enum Raw {
    /// `None`.
    None,
    /// Exactly a `bool`.
    Bool(bool),
    /// Exactly an `int` or a `float`, as a float (None: an integer beyond a float's range).
    Number(Option<f64>),
    /// Exactly a `str`.
    Text(String),
    /// Anything else (a subclass included): its meaning needs its own code, so it is never kept.
    Other,
}

/// The flags as the rules read them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolFlags {
    pub name: String,
    pub requires_approval: bool,
    pub side_effecting: bool,
    pub idempotent: bool,
    /// Only an explicit `effects_declared = False` counts as undeclared.
    pub undeclared: bool,
    pub timeout_s: Option<f64>,
    pub url_arg: Option<String>,
}

/// A plain flag's truth value: `None` is false, a `bool` itself; anything else is not plain.
pub fn truth(raw: &Raw) -> Option<bool> {
    match raw {
        Raw::None => Some(false),
        Raw::Bool(b) => Some(*b),
        _ => None,
    }
}

/// Whether flag `index` holding `raw` can be kept between calls (converting it again would
/// answer the same): the name a string, `timeout_s` None or a number, `url_arg` None or a
/// string, the others None or a bool.
pub fn keeps(index: usize, raw: &Raw) -> bool {
    match index {
        NAME => matches!(raw, Raw::Text(_)),
        TIMEOUT_S => matches!(raw, Raw::None | Raw::Number(_)),
        URL_ARG => matches!(raw, Raw::None | Raw::Text(_)),
        _ => truth(raw).is_some(),
    }
}

/// The tool's own deadline: `timeout_s` when a number greater than 0 (`number`: the value as a
/// float, None when it is None or is no number).
pub fn timeout_s(number: Option<f64>) -> Option<f64> {
    number.filter(|t| *t > 0.0)
}

/// The argument holding the URL the tool reaches: `url_arg` when a non-empty string.
pub fn url_arg(text: Option<String>) -> Option<String> {
    text.filter(|u| !u.is_empty())
}

/// `url_arg` as read at a call (a value that is not kept): it names an argument only when it is
/// true (`truth`), by its text then (`text`, asked only then), as [`url_arg`] reads it. What
/// reading its truth value or converting it raised fails the call: an egress rule fails closed,
/// never skipping its check for a flag it could not read.
pub fn url_arg_of<E>(truth: Result<bool, E>, text: impl FnOnce() -> Result<String, E>) -> Result<Option<String>, E> {
    if !truth? {
        return Ok(None);
    }
    Ok(url_arg(Some(text()?)))
}

/// Only an explicit `False` leaves a tool's effects undeclared.
pub fn undeclared(raw: &Raw) -> bool {
    *raw == Raw::Bool(false)
}

/// A sync body runs on the caller's thread only when `non_blocking` is `True` itself.
pub fn non_blocking(raw: &Raw) -> bool {
    *raw == Raw::Bool(true)
}

/// `_is_async` as a kept view answers it: None is false, a `bool` itself; anything else is not
/// kept (its truth value is asked at each call).
pub fn is_async(raw: &Raw) -> Option<bool> {
    truth(raw)
}

impl ToolFlags {
    /// The flags of the raw values of [`NAMES`], in order; Err: the index of the first that
    /// cannot be kept (see [`keeps`]).
    pub fn of(raw: [Raw; 7]) -> Result<ToolFlags, usize> {
        if let Some(i) = (0..raw.len()).find(|&i| !keeps(i, &raw[i])) {
            return Err(i);
        }
        let flag = |i: usize| truth(&raw[i]).unwrap_or(false);
        let mut f = ToolFlags {
            name: String::new(),
            requires_approval: flag(REQUIRES_APPROVAL),
            side_effecting: flag(SIDE_EFFECTING),
            idempotent: flag(IDEMPOTENT),
            undeclared: undeclared(&raw[EFFECTS_DECLARED]),
            timeout_s: match raw[TIMEOUT_S] {
                Raw::Number(n) => timeout_s(n),
                _ => None,
            },
            url_arg: None,
        };
        let [name, _, _, _, _, _, url] = raw;
        if let Raw::Text(t) = name {
            f.name = t;
        }
        if let Raw::Text(t) = url {
            f.url_arg = url_arg(Some(t));
        }
        Ok(f)
    }
}

/// The flags a call's admission reads under the rules `n` (a bit per flag, in [`NAMES`] order):
/// its name always, each other one where a rule reads it.
pub fn read_by(n: Needs) -> u8 {
    let mut read = 1 << NAME;
    if n.approval {
        read |= 1 << REQUIRES_APPROVAL;
    }
    if n.read_only {
        read |= 1 << SIDE_EFFECTING;
    }
    if n.retry {
        read |= 1 << IDEMPOTENT | 1 << EFFECTS_DECLARED;
    }
    if n.timeout {
        read |= 1 << TIMEOUT_S;
    }
    if n.egress {
        read |= 1 << URL_ARG;
    }
    read
}

/// Whether a call changes nothing: what the tool's own read-only hook answers for it when the
/// tool has one (`hook`), else that the tool is not `side_effecting` (asked only then).
#[inline]
pub fn read_only<E>(
    hook: Option<impl FnOnce() -> Result<bool, E>>,
    side_effecting: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    match hook {
        Some(ask) => ask(),
        None => Ok(!side_effecting()?),
    }
}

/// Whether a tool is a function tool: `fn` set and `check_output` set (`fn_set`, then
/// `check_output_set`, asked only when `fn` is; set: present and not None).
#[inline]
pub fn function<E>(
    fn_set: impl FnOnce() -> Result<bool, E>,
    check_output_set: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    Ok(fn_set()? && check_output_set()?)
}

/// How a tool's body runs at this attempt, its facts asked in this order and only when they
/// matter: a function tool (`function`: `fn` and `check_output` set) with an `async` body
/// (`is_async`) is awaited; a sync one declared non-blocking (`non_blocking`) or named among the
/// caller's inline tools (`listed`) is called on the caller's thread; any other sync one goes to
/// the worker pool; any other tool runs itself. What asking raises is the call's failure.
pub fn body_kind<E>(
    function: impl FnOnce() -> Result<bool, E>,
    is_async: impl FnOnce() -> Result<bool, E>,
    non_blocking: impl FnOnce() -> Result<bool, E>,
    listed: impl FnOnce() -> bool,
) -> Result<BodyKind, E> {
    if !function()? {
        return Ok(BodyKind::of(false, false, false));
    }
    let is_async = is_async()?;
    let non_blocking = !is_async && (non_blocking()? || listed());
    Ok(BodyKind::of(true, is_async, non_blocking))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raws() -> [Raw; 7] {
        [
            Raw::Text("t".into()),
            Raw::Bool(true),
            Raw::None,
            Raw::Bool(false),
            Raw::Bool(false),
            Raw::Number(Some(2.5)),
            Raw::Text("url".into()),
        ]
    }

    #[test]
    fn plain_values_are_kept_with_their_meaning() {
        assert_eq!(
            ToolFlags::of(raws()),
            Ok(ToolFlags {
                name: "t".into(),
                requires_approval: true,
                side_effecting: false,
                idempotent: false,
                undeclared: true,
                timeout_s: Some(2.5),
                url_arg: Some("url".into()),
            })
        );
    }

    #[test]
    fn the_first_value_that_is_not_plain_is_named() {
        let mut r = raws();
        r[IDEMPOTENT] = Raw::Number(Some(0.0)); // `idempotent = 0`
        r[URL_ARG] = Raw::Other;
        assert_eq!(ToolFlags::of(r.clone()), Err(IDEMPOTENT));
        let mut r = raws();
        r[NAME] = Raw::None;
        assert_eq!(ToolFlags::of(r.clone()), Err(NAME));
        let mut r = raws();
        r[TIMEOUT_S] = Raw::Text("5".into());
        assert_eq!(ToolFlags::of(r.clone()), Err(TIMEOUT_S));
        let mut r = raws();
        r[URL_ARG] = Raw::Bool(true);
        assert_eq!(ToolFlags::of(r.clone()), Err(URL_ARG));
    }

    #[test]
    fn a_function_tool_has_fn_and_check_output_and_check_output_is_asked_only_after_fn() {
        assert_eq!(function(|| Ok::<_, ()>(true), || Ok(true)), Ok(true));
        assert_eq!(function(|| Ok::<_, ()>(true), || Ok(false)), Ok(false));
        assert_eq!(
            function(|| Ok::<_, ()>(false), || -> Result<bool, ()> { panic!("asked") }),
            Ok(false)
        );
        assert_eq!(
            function(|| Err("fn"), || -> Result<bool, &str> { panic!("asked") }),
            Err("fn")
        );
        assert_eq!(
            function(|| Ok(true), || Err::<bool, _>("check_output")),
            Err("check_output")
        );
    }

    #[test]
    fn a_timeout_counts_only_when_a_number_above_0() {
        assert_eq!(timeout_s(Some(0.5)), Some(0.5));
        assert_eq!(timeout_s(Some(0.0)), None);
        assert_eq!(timeout_s(Some(-1.0)), None);
        assert_eq!(timeout_s(Some(f64::NAN)), None);
        assert_eq!(timeout_s(None), None);
        let mut r = raws();
        r[TIMEOUT_S] = Raw::Number(None); // an int beyond a float's range
        assert_eq!(ToolFlags::of(r.clone()).map(|f| f.timeout_s), Ok(None));
        r[TIMEOUT_S] = Raw::None;
        assert_eq!(ToolFlags::of(r.clone()).map(|f| f.timeout_s), Ok(None));
    }

    #[test]
    fn a_url_arg_read_at_a_call_names_an_argument_only_when_true() {
        let never = || -> Result<String, ()> { panic!("not asked") };
        assert_eq!(
            url_arg_of(Ok(true), || Ok::<_, ()>("url".into())),
            Ok(Some("url".into()))
        );
        assert_eq!(url_arg_of(Ok(false), never), Ok(None));
        assert_eq!(url_arg_of(Ok(true), || Err("not a str")), Err("not a str"));
    }

    #[test]
    fn a_url_arg_whose_truth_value_raises_fails_the_call() {
        let never = || -> Result<String, &str> { panic!("not asked") };
        // fails closed: the egress check is never skipped for a flag that could not be read
        assert_eq!(url_arg_of(Err("__bool__ raised"), never), Err("__bool__ raised"));
    }

    #[test]
    fn an_empty_url_arg_names_no_argument() {
        assert_eq!(url_arg(Some(String::new())), None);
        assert_eq!(url_arg(Some("u".into())), Some("u".into()));
        let mut r = raws();
        r[URL_ARG] = Raw::Text(String::new());
        assert_eq!(ToolFlags::of(r.clone()).map(|f| f.url_arg), Ok(None));
    }

    #[test]
    fn only_an_explicit_false_is_undeclared_and_only_true_is_non_blocking() {
        assert!(undeclared(&Raw::Bool(false)));
        for r in [Raw::None, Raw::Number(Some(0.0)), Raw::Bool(true), Raw::Other] {
            assert!(!undeclared(&r), "{r:?}");
        }
        assert!(non_blocking(&Raw::Bool(true)));
        for r in [Raw::None, Raw::Number(Some(1.0)), Raw::Bool(false), Raw::Other] {
            assert!(!non_blocking(&r), "{r:?}");
        }
        assert_eq!(is_async(&Raw::None), Some(false));
        assert_eq!(is_async(&Raw::Bool(true)), Some(true));
        assert_eq!(is_async(&Raw::Number(Some(1.0))), None);
    }

    #[test]
    fn the_flags_read_are_those_the_rules_read() {
        assert_eq!(read_by(Needs::default()), 0b000_0001);
        let n = Needs {
            approval: true,
            egress: true,
            ..Needs::default()
        };
        assert_eq!(read_by(n), 0b100_0011);
        let n = Needs {
            read_only: true,
            retry: true,
            timeout: true,
            ..Needs::default()
        };
        assert_eq!(read_by(n), 0b011_1101);
    }

    #[test]
    fn a_call_is_read_only_by_its_tools_hook_else_by_its_flag() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(read_only(Some(|| Ok(true)), never), Ok(true));
        assert_eq!(read_only(Some(|| Ok(false)), never), Ok(false));
        assert_eq!(read_only(Some(|| Err(())), never), Err(()));
        assert_eq!(read_only(None::<fn() -> Result<bool, ()>>, || Ok(true)), Ok(false));
        assert_eq!(read_only(None::<fn() -> Result<bool, ()>>, || Ok(false)), Ok(true));
    }

    #[test]
    fn a_body_kind_asks_only_what_matters() {
        let asked = std::cell::RefCell::new(Vec::new());
        let ask = |what: &'static str, v: bool| {
            let asked = &asked;
            move || -> Result<bool, ()> {
                asked.borrow_mut().push(what);
                Ok(v)
            }
        };
        let kind = |f, a, nb, listed: bool| {
            asked.borrow_mut().clear();
            let k = body_kind(ask("function", f), ask("async", a), ask("non_blocking", nb), || listed);
            (k, asked.borrow().clone())
        };
        assert_eq!(kind(false, true, true, true), (Ok(BodyKind::Tool), vec!["function"]));
        assert_eq!(
            kind(true, true, true, true),
            (Ok(BodyKind::Async), vec!["function", "async"])
        );
        assert_eq!(
            kind(true, false, true, false),
            (Ok(BodyKind::Inline), vec!["function", "async", "non_blocking"])
        );
        assert_eq!(kind(true, false, false, true).0, Ok(BodyKind::Inline));
        assert_eq!(kind(true, false, false, false).0, Ok(BodyKind::Worker));
        // What asking raises is the answer.
        assert_eq!(
            body_kind(|| Ok(true), || Err("boom"), || Ok(true), || true),
            Err("boom")
        );
    }
}
