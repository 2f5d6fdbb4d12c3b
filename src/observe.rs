//! How a call is observed, the parts that are rules and text: the OpenTelemetry `execute_tool`
//! span's name and attributes (which of the audit record's fields it carries, which outcomes
//! mark it failed), the `agentkit_tools.audit` log line, the `ctx.trace` event, and the messages
//! logged when an observer fails. The binding performs each (opentelemetry, logging, the sink)
//! with these.

/// The span's name, and its `gen_ai.operation.name`.
pub const SPAN_NAME: &str = "execute_tool";

/// The span attribute naming the operation (its value is [`SPAN_NAME`]).
pub const ATTR_OPERATION: &str = "gen_ai.operation.name";
/// The span attribute naming the tool (empty when the call named none).
pub const ATTR_TOOL_NAME: &str = "gen_ai.tool.name";
/// The span attribute holding the call's id (as text), when it has one.
pub const ATTR_CALL_ID: &str = "gen_ai.tool.call.id";
/// The span attribute set to the outcome of a failed call.
pub const ATTR_ERROR_TYPE: &str = "error.type";

/// The audit record's fields a span carries, and their attribute names, in that order.
pub const RECORD_ATTRIBUTES: [(&str, &str); 4] = [
    ("args_hash", "agentkit.tool.args_hash"),
    ("outcome", "agentkit.tool.outcome"),
    ("decision", "agentkit.tool.decision"),
    ("attempts", "agentkit.tool.attempts"),
];

/// The attribute of [`RECORD_ATTRIBUTES`] that holds the outcome.
pub const ATTR_OUTCOME: &str = RECORD_ATTRIBUTES[1].1;

/// Whether a call of this outcome (`"ok"`, an error code, `"cancelled"`) marks its span failed
/// (`error.type` set to it, an error status): every outcome but a success or a cancellation.
pub fn span_failed(outcome: &str) -> bool {
    outcome != "ok" && outcome != "cancelled"
}

/// What ending a call's span sets besides the attributes of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanEnd {
    /// Nothing more: a success or a cancellation.
    Plain,
    /// [`ATTR_ERROR_TYPE`] set to the outcome, and an error status when `status` (only while
    /// spans are recorded: a tracer provider is installed).
    Failed { status: bool },
}

/// How a call's span ends for its record's `outcome` (None: an outcome that is not text, which
/// is no success); `recording`, asked only for a failed span: whether spans are recorded.
pub fn span_end<E>(outcome: Option<&str>, recording: impl FnOnce() -> Result<bool, E>) -> Result<SpanEnd, E> {
    if outcome.is_some_and(|o| !span_failed(o)) {
        return Ok(SpanEnd::Plain);
    }
    Ok(SpanEnd::Failed { status: recording()? })
}

/// Whether the tracer provider must be looked at to know if spans are recorded: not while none
/// was ever set (`unset`) and the environment names none (`named_by_env`): then none are.
pub fn provider_to_look_at(unset: bool, named_by_env: bool) -> bool {
    !unset || named_by_env
}

/// Whether ending a call's span detaches the context its opening made current: not when that
/// was restored already (`restored`: its call went on elsewhere); for a call dropped and
/// collected (`dropped`: ended wherever the collector runs, not in its task) only when its span
/// is the current one there (`is_current`, asked only then; restoring a context that is not
/// current fails); else always.
pub fn detaches<E>(restored: bool, dropped: bool, is_current: impl FnOnce() -> Result<bool, E>) -> Result<bool, E> {
    if restored {
        return Ok(false);
    }
    Ok(!dropped || is_current()?)
}

/// A truth value read from the host: an exact `bool`'s (no code of the object's own answers it,
/// so the same object answers the same), or another object's, as it answered now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    Bool(bool),
    Other(bool),
}

impl Truth {
    pub fn is_true(self) -> bool {
        matches!(self, Truth::Bool(true) | Truth::Other(true))
    }

    /// An exact `bool`'s.
    fn plain(self) -> bool {
        matches!(self, Truth::Bool(_))
    }
}

/// Whether the audit log is enabled at DEBUG, as the logger's own state shows it (see
/// [`debug_logged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugLogged {
    /// It is `enabled` or not; `keep`: the answer follows from exact `bool`s alone, so it holds
    /// while the logger's dict and its cache are unchanged.
    Known { enabled: bool, keep: bool },
    /// The logger's state does not show it: ask the logger (`isEnabledFor`).
    Ask,
}

/// Whether the audit log is enabled at DEBUG, as `Logger.isEnabledFor` answers from its state:
/// not while the logger is `disabled`; else what its cache holds for DEBUG (`cached`, read only
/// then; None: nothing cached, the logger is asked). What reading raises propagates.
pub fn debug_logged<E>(disabled: Truth, cached: impl FnOnce() -> Result<Option<Truth>, E>) -> Result<DebugLogged, E> {
    if disabled.is_true() {
        return Ok(DebugLogged::Known {
            enabled: false,
            keep: disabled.plain(),
        });
    }
    Ok(match cached()? {
        Some(known) => DebugLogged::Known {
            enabled: known.is_true(),
            keep: disabled.plain() && known.plain(),
        },
        None => DebugLogged::Ask,
    })
}

/// The `agentkit_tools.audit` DEBUG line (logging's `%` format) of a record: its tool, decision,
/// outcome, attempts and elapsed milliseconds, in that order.
pub const LOG_LINE: &str = "tool call %s %s: %s after %d attempt(s) in %.3f ms";
/// The record's fields [`LOG_LINE`] shows, in its order.
pub const LOG_FIELDS: [&str; 5] = ["tool", "decision", "outcome", "attempts", "elapsed_ms"];

/// The name of the event a record goes to `ctx.trace` as.
pub const TRACE_EVENT: &str = "tool.call";
/// The methods of `ctx.trace` tried in order (the first set one is called; else `ctx.trace`
/// itself is).
pub const TRACE_METHODS: [&str; 2] = ["event", "add_event"];

/// Which of `ctx.trace`'s methods gets the record: the first of [`TRACE_METHODS`] it has set
/// (`is_set(i)`: method `i` is set; asked in order, none after the first set one), or None:
/// `ctx.trace` itself is called.
pub fn trace_method<E>(mut is_set: impl FnMut(usize) -> Result<bool, E>) -> Result<Option<usize>, E> {
    for i in 0..TRACE_METHODS.len() {
        if is_set(i)? {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Logged when the audit log failed.
pub const LOG_FAILED: &str = "audit log failed (the call's result is unaffected)";
/// Logged (with the sink, `%r`) when the audit sink failed.
pub const SINK_FAILED: &str = "audit sink %r failed (the call's result is unaffected)";
/// Logged when `ctx.trace` failed.
pub const TRACE_FAILED: &str = "ctx.trace failed (the call's result is unaffected)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_detaches_its_context_where_it_is_still_current() {
        let current = |c: bool| move || Ok::<_, ()>(c);
        let never = || -> Result<bool, ()> { panic!("asked only for a dropped call") };
        assert_eq!(detaches(false, false, never), Ok(true));
        assert_eq!(detaches(true, false, never), Ok(false));
        assert_eq!(detaches(true, true, never), Ok(false));
        assert_eq!(detaches(false, true, current(true)), Ok(true));
        assert_eq!(detaches(false, true, current(false)), Ok(false));
        assert_eq!(detaches(false, true, || Err("raised")), Err("raised"));
    }

    #[test]
    fn the_debug_level_is_read_from_the_logger_state() {
        use DebugLogged::{Ask, Known};
        let never = || -> Result<Option<Truth>, ()> { panic!("the cache is read only when enabled") };
        let cached = |t: Option<Truth>| move || Ok::<_, ()>(t);
        // Disabled: off, kept only when `disabled` is a bool.
        assert_eq!(
            debug_logged(Truth::Bool(true), never),
            Ok(Known {
                enabled: false,
                keep: true
            })
        );
        assert_eq!(
            debug_logged(Truth::Other(true), never),
            Ok(Known {
                enabled: false,
                keep: false
            })
        );
        // Enabled: what the cache holds, kept only when both are bools.
        for (disabled, known, want) in [
            (Truth::Bool(false), Truth::Bool(true), (true, true)),
            (Truth::Bool(false), Truth::Bool(false), (false, true)),
            (Truth::Bool(false), Truth::Other(true), (true, false)),
            (Truth::Other(false), Truth::Bool(true), (true, false)),
            (Truth::Other(false), Truth::Other(false), (false, false)),
        ] {
            assert_eq!(
                debug_logged(disabled, cached(Some(known))),
                Ok(Known {
                    enabled: want.0,
                    keep: want.1
                })
            );
        }
        assert_eq!(debug_logged(Truth::Bool(false), cached(None)), Ok(Ask));
        assert_eq!(debug_logged(Truth::Other(false), || Err(3)), Err(3));
    }

    #[test]
    fn failed_outcomes_mark_the_span() {
        assert!(!span_failed("ok"));
        assert!(!span_failed("cancelled"));
        assert!(span_failed("timeout"));
        assert!(span_failed("internal_error"));
        assert!(span_failed("my_own_code"));
        assert_eq!(ATTR_OUTCOME, "agentkit.tool.outcome");
    }

    #[test]
    fn how_a_span_ends() {
        let never = || -> Result<bool, ()> { panic!("asked for a span that did not fail") };
        assert_eq!(span_end(Some("ok"), never), Ok(SpanEnd::Plain));
        assert_eq!(span_end(Some("cancelled"), never), Ok(SpanEnd::Plain));
        assert_eq!(
            span_end(Some("timeout"), || Ok::<_, ()>(true)),
            Ok(SpanEnd::Failed { status: true })
        );
        assert_eq!(
            span_end(Some("my_code"), || Ok::<_, ()>(false)),
            Ok(SpanEnd::Failed { status: false })
        );
        // An outcome that is not text is no success.
        assert_eq!(
            span_end(None, || Ok::<_, ()>(true)),
            Ok(SpanEnd::Failed { status: true })
        );
        assert_eq!(span_end(Some("x"), || Err::<bool, _>("e")), Err("e"));
    }

    #[test]
    fn when_the_tracer_provider_is_looked_at() {
        assert!(!provider_to_look_at(true, false));
        assert!(provider_to_look_at(true, true));
        assert!(provider_to_look_at(false, false));
        assert!(provider_to_look_at(false, true));
    }

    #[test]
    fn the_trace_method_is_the_first_set_one() {
        assert_eq!(TRACE_METHODS, ["event", "add_event"]);
        let mut asked = Vec::new();
        let mut first = |which: [bool; 2]| {
            trace_method(|i| {
                asked.push(i);
                Ok::<_, ()>(which[i])
            })
        };
        assert_eq!(first([true, true]), Ok(Some(0)));
        assert_eq!(first([false, true]), Ok(Some(1)));
        assert_eq!(first([false, false]), Ok(None));
        // None is asked after the first set one.
        assert_eq!(asked, [0, 0, 1, 0, 1]);
        assert_eq!(trace_method(|_| Err::<bool, _>("e")), Err("e"));
    }

    #[test]
    fn the_log_line_shows_each_field() {
        assert_eq!(LOG_LINE.matches('%').count(), LOG_FIELDS.len());
    }
}
