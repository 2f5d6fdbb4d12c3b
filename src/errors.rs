//! The error model: every error code an envelope can carry, with its wire string, whether
//! sending the same call again may succeed, and the message template the model reads. Every
//! message names the problem and prescribes the next action (docs/errors.md lists them all).
//!
//! Nothing else spells a code: Rust uses [`ErrorCode`], Python the names `_core.codes` exports.

use crate::middleware::EgressDenial;
use crate::validate::Rejection;

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $wire:literal, $py:ident, retriable: $retriable:literal; )*) => {
        /// An error code of the envelope (`error.code`). A tool's own `ToolError` may carry a
        /// code of its choosing besides these (see `envelope::Code`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorCode {
            /// Every code, in the order docs/errors.md presents them.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as the envelope spells it, e.g. `"unknown_tool"`.
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $wire,)* }
            }

            /// The name Python reads it under (`_core.codes.UNKNOWN_TOOL`).
            pub const fn py_name(self) -> &'static str {
                match self { $(ErrorCode::$variant => stringify!($py),)* }
            }

            /// Whether the same call, sent again unchanged, may succeed. Only a lost
            /// compare-and-set race is; a tool's own `ToolError` says for itself.
            pub const fn retriable(self) -> bool {
                match self { $(ErrorCode::$variant => $retriable,)* }
            }

            /// The code spelled `wire`, if it is one of ours.
            pub fn from_wire(wire: &str) -> Option<ErrorCode> {
                match wire { $($wire => Some(ErrorCode::$variant),)* _ => None }
            }
        }
    };
}

codes! {
    // ---- calling a tool that is not there, or calling it wrong
    /// No tool has the name the call gives.
    UnknownTool = "unknown_tool", UNKNOWN_TOOL, retriable: false;
    /// The arguments do not fit the tool's input schema.
    InvalidArguments = "invalid_arguments", INVALID_ARGUMENTS, retriable: false;
    /// The call itself is malformed (not a dict, no tool name).
    InvalidCall = "invalid_call", INVALID_CALL, retriable: false;
    // ---- refusals: the tool was not run
    /// The tool needs approval and nobody gave it.
    ApprovalRequired = "approval_required", APPROVAL_REQUIRED, retriable: false;
    /// The same call again, the limit-th time in one conversation.
    RepeatedCall = "repeated_call", REPEATED_CALL, retriable: false;
    /// The URL argument names a host that is not allowed.
    EgressDenied = "egress_denied", EGRESS_DENIED, retriable: false;
    /// The tool's circuit breaker is open.
    CircuitOpen = "circuit_open", CIRCUIT_OPEN, retriable: false;
    /// Every worker thread is held by calls that overran their deadline.
    BackendSaturated = "backend_saturated", BACKEND_SATURATED, retriable: false;
    // ---- the tool ran and failed
    /// Our own deadline expired.
    Timeout = "timeout", TIMEOUT, retriable: false;
    /// A `ToolError` raised without a code of its own.
    ToolError = "tool_error", TOOL_ERROR, retriable: false;
    /// The tool returned a value its output schema forbids.
    OutputMismatch = "output_mismatch", OUTPUT_MISMATCH, retriable: false;
    /// Any other exception: a bug in the tool (or in the tooling around it).
    InternalError = "internal_error", INTERNAL_ERROR, retriable: false;
    // ---- the memory tool
    /// The target already exists.
    AlreadyExists = "already_exists", ALREADY_EXISTS, retriable: false;
    /// `old_str` occurs more than once.
    AmbiguousMatch = "ambiguous_match", AMBIGUOUS_MATCH, retriable: false;
    /// `old_str` does not occur.
    NoMatch = "no_match", NO_MATCH, retriable: false;
    /// A line number or range outside the file.
    OutOfRange = "out_of_range", OUT_OF_RANGE, retriable: false;
    /// A file operation on a directory.
    IsADirectory = "is_a_directory", IS_A_DIRECTORY, retriable: false;
    /// A path below a file.
    NotADirectory = "not_a_directory", NOT_A_DIRECTORY, retriable: false;
    /// No file or directory at the path.
    NotFound = "not_found", NOT_FOUND, retriable: false;
    /// A path outside the memory root, or an operation on the root itself.
    PermissionDenied = "permission_denied", PERMISSION_DENIED, retriable: false;
    /// A command without one of its required arguments.
    MissingArgument = "missing_argument", MISSING_ARGUMENT, retriable: false;
    /// The command would push the tree over a limit.
    MemoryLimit = "memory_limit", MEMORY_LIMIT, retriable: false;
    /// An argument of the wrong type, when the tool is run directly.
    InvalidArgument = "invalid_argument", INVALID_ARGUMENT, retriable: false;
    /// An argument the command does not take, when the tool is run directly.
    UnexpectedArgument = "unexpected_argument", UNEXPECTED_ARGUMENT, retriable: false;
    /// A path over the byte limit.
    PathTooLong = "path_too_long", PATH_TOO_LONG, retriable: false;
    /// An unusable memory root (raised when the tool is built).
    InvalidRoot = "invalid_root", INVALID_ROOT, retriable: false;
    /// The compare-and-set loop lost every race; nothing was written.
    StoreConflict = "store_conflict", STORE_CONFLICT, retriable: true;
    /// The stored memory document is not a valid tree.
    CorruptTree = "corrupt_tree", CORRUPT_TREE, retriable: false;
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// ------------------------------------------------------------------ what a call raised

/// What a tool call raised, as the rules see it (the binding maps each exception class here
/// once): it decides both the envelope's code and whether the call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    /// `ToolArgumentError`: the arguments do not fit (`invalid_arguments`).
    Arguments,
    /// `ToolTimeoutError`: our own deadline expired (`timeout`).
    Deadline,
    /// `ToolError`: the tool's own failure, with its `retriable` flag (its own code).
    Tool { retriable: bool },
    /// `ToolShapeError`: the value does not match the output schema (`output_mismatch`).
    Shape,
    /// Anything else (`internal_error`); `transient` when it says the backend may recover
    /// (`ConnectionError`, a `TimeoutError` the body raised, a declared transient type).
    Other { transient: bool },
}

/// The exception classes of `agentkit_tools.errors` the rules tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// `ToolArgumentError`.
    Arguments,
    /// `ToolTimeoutError`.
    Deadline,
    /// `ToolError`.
    Tool,
    /// `ToolShapeError`.
    Shape,
}

impl ErrorClass {
    /// The order an exception is tested against the classes: the first it is an instance of
    /// decides (a class deriving from two of them is what the earlier one says).
    pub const ORDER: [ErrorClass; 4] = [
        ErrorClass::Arguments,
        ErrorClass::Deadline,
        ErrorClass::Tool,
        ErrorClass::Shape,
    ];
}

/// Built-in exception classes whose instances say the backend may recover (transient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransientBuiltin {
    /// `ConnectionError` (and its subclasses: refused, reset, aborted, broken pipe).
    ConnectionError,
    /// `TimeoutError` raised by the body itself (not our own deadline, `ToolTimeoutError`).
    TimeoutError,
}

/// Every built-in class of [`TransientBuiltin`], in the order they are tested.
pub const TRANSIENT_BUILTINS: [TransientBuiltin; 2] =
    [TransientBuiltin::ConnectionError, TransientBuiltin::TimeoutError];

/// What an envelope says of an exception a call raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Describe {
    /// The `invalid_arguments` failure, against the tool's input schema.
    InvalidArguments,
    /// `timeout`.
    Deadline,
    /// The tool's own code.
    Tool,
    /// `output_mismatch`.
    Shape,
    /// `internal_error`, naming the exception.
    Other,
}

impl Raised {
    /// What an exception is: `class`, the first of [`ErrorClass::ORDER`] it is an instance of
    /// (None: none of them); `retriable`, a `ToolError`'s flag as read (None: it could not be read,
    /// which counts as not retriable); `transient`, whether an exception of no class of ours is
    /// an instance of a [`TransientBuiltin`] or of a class the caller declared transient.
    pub fn of(class: Option<ErrorClass>, retriable: Option<bool>, transient: bool) -> Raised {
        match class {
            Some(ErrorClass::Arguments) => Raised::Arguments,
            Some(ErrorClass::Deadline) => Raised::Deadline,
            Some(ErrorClass::Tool) => Raised::Tool {
                retriable: retriable.unwrap_or(false),
            },
            Some(ErrorClass::Shape) => Raised::Shape,
            None => Raised::Other { transient },
        }
    }

    /// How an envelope describes it: a `ToolArgumentError` against the tool's input schema when
    /// that is known (`schema_known`), else as any other exception.
    pub fn describe(self, schema_known: bool) -> Describe {
        match self {
            Raised::Arguments if schema_known => Describe::InvalidArguments,
            Raised::Arguments | Raised::Other { .. } => Describe::Other,
            Raised::Deadline => Describe::Deadline,
            Raised::Tool { .. } => Describe::Tool,
            Raised::Shape => Describe::Shape,
        }
    }

    /// How the retry rule classifies the failed attempt.
    pub fn failure_kind(self) -> crate::middleware::FailureKind {
        use crate::middleware::FailureKind;
        match self {
            Raised::Deadline => FailureKind::Deadline,
            Raised::Tool { retriable: true } | Raised::Other { transient: true } => FailureKind::Transient,
            Raised::Arguments
            | Raised::Shape
            | Raised::Tool { retriable: false }
            | Raised::Other { transient: false } => FailureKind::Permanent,
        }
    }
}

// ------------------------------------------------------------------ message templates

/// The most invalid values spelled out in an `invalid_arguments` message.
pub const MAX_SPELLED_OUT: usize = 5;

/// The most characters of a model-sent name echoed back in a message.
pub const MAX_ECHOED_NAME_CHARS: usize = 64;

/// `name` as quoted back to the model: at most [`MAX_ECHOED_NAME_CHARS`] characters, then
/// `...` and the full length.
pub fn echoed_name(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(MAX_ECHOED_NAME_CHARS) {
        None => name.into(),
        Some((cut, _)) => format!("{}... ({} characters)", &name[..cut], name.chars().count()).into(),
    }
}

/// `unknown_tool`: names the closest match and lists every available tool (sorted). The name
/// is echoed at most [`MAX_ECHOED_NAME_CHARS`] characters long.
pub fn unknown_tool_message(name: &str, available: &[&str], did_you_mean: Option<&str>) -> String {
    let name = echoed_name(name);
    let hint = did_you_mean
        .map(|n| format!(" Did you mean '{n}'?"))
        .unwrap_or_default();
    if available.is_empty() {
        return format!("No tool named '{name}', and no tools are available. Answer without calling a tool.");
    }
    format!(
        "No tool named '{name}'.{hint} Available tools: {}. Call one of those instead.",
        available.join(", ")
    )
}

/// `invalid_arguments`: every problem (at most [`MAX_SPELLED_OUT`] values spelled out), the
/// accepted names, and what to do.
pub fn invalid_arguments_message(tool: &str, rejection: &Rejection, accepted: &[String]) -> String {
    let mut accepted_repr = String::new();
    crate::validate::push_capped_names(&mut accepted_repr, accepted);
    rejection_message(tool, rejection, &accepted_repr)
}

/// [`invalid_arguments_message`] with the accepted names already written as a Python list
/// (`ArgumentValidator::accepted_repr`), built in one buffer.
pub fn rejection_message(tool: &str, rejection: &Rejection, accepted_repr: &str) -> String {
    let mut out = String::with_capacity(160 + 2 * tool.len() + accepted_repr.len());
    out.push_str("tool '");
    out.push_str(tool);
    out.push_str("' call rejected: ");
    rejection.write_summary(&mut out, MAX_SPELLED_OUT);
    out.push_str(". Accepted arguments: ");
    out.push_str(accepted_repr);
    out.push_str(". Re-read the input schema and call '");
    out.push_str(tool);
    out.push_str("' again with corrected arguments.");
    out
}

/// `invalid_call`: what is wrong with the call (a sentence without its final period, as
/// `calls::CallError` words it) and what to send instead.
pub fn invalid_call_message(problem: &str) -> String {
    format!("{problem}. Send a tool call with a name and its arguments.")
}

/// `invalid_call` for a call that names no tool.
pub const NO_TOOL_NAME_MESSAGE: &str = "The tool call has no tool name. Send a call with a 'name' and its arguments.";

/// `timeout`: our own deadline expired.
pub fn timeout_message(tool: &str, timeout_s: f64) -> String {
    format!(
        "{tool} did not finish within {}s. Do not retry immediately; tell the user the backend is slow.",
        format_seconds(timeout_s)
    )
}

/// `internal_error`: any exception that is not a `ToolError`.
pub fn internal_error_message(tool: &str, exc_type: &str, exc_text: &str) -> String {
    let text = exc_text.trim_end().trim_end_matches('.');
    let sep = if text.is_empty() { "" } else { ": " };
    format!(
        "{tool} failed: {exc_type}{sep}{text}. This is a bug in the tool, not in your \
         arguments; do not retry."
    )
}

/// `internal_error` for a fault of the tooling around the tool (a middleware raised), not of
/// the tool itself.
pub fn tooling_fault_message(exc_type: &str, exc_text: &str) -> String {
    format!(
        "The call could not be completed: {exc_type}: {exc_text}. This is a fault in the agent's \
         tooling, not in your arguments; do not retry."
    )
}

/// `output_mismatch`: the tool returned a value its output schema forbids.
pub fn output_mismatch_message(tool: &str, expected: &str, problems: &str) -> String {
    let problems = problems.trim_end().trim_end_matches('.');
    let detail = if problems.is_empty() {
        String::new()
    } else {
        format!(" ({problems})")
    };
    format!(
        "{tool} returned a value that does not match its declared output schema '{expected}'{detail}. \
         This is a fault in the tool, not in your arguments: try different arguments once, or tell \
         the user the tool is returning malformed data."
    )
}

/// `approval_required`: the tool was not run; what to ask the user.
pub fn approval_required_message(tool: &str, canonical_args: &str) -> String {
    format!(
        "{tool} needs the user's approval before it runs, and it was not run. Ask the user whether \
         to allow {tool} with arguments {canonical_args}; call it again only after they approve."
    )
}

/// `repeated_call`: the same call again, `count` times in this conversation.
pub fn repeated_call_message(tool: &str, count: u32) -> String {
    format!(
        "{tool} has now been called {count} times with these same arguments in this conversation, \
         and it was not run again. Stop calling it; explain the problem to the user instead."
    )
}

/// `egress_denied`: the URL's host is not allowed, or the URL has no host to check.
pub fn egress_denied_message(tool: &str, url_arg: &str, denial: &EgressDenial, allowed: &[String]) -> String {
    let list = if allowed.is_empty() {
        "none".to_owned()
    } else {
        allowed.join(", ")
    };
    match denial {
        EgressDenial::HostNotAllowed(host) => format!(
            "{tool} may not reach host '{host}': it is not on the allow-list ({list}). Do not retry \
             with this URL; use an allowed host or tell the user this host is not permitted."
        ),
        EgressDenial::Internal(host) => format!(
            "{tool} may not reach host '{host}': it is a private, loopback or link-local address, which \
             is refused unless the allow-list names it ({list}). Do not retry with this URL; tell the \
             user this host is not permitted."
        ),
        EgressDenial::Refused(why) => format!(
            "{tool} refused the URL in '{url_arg}': {why}. Call it again with a plain http or https URL \
             such as https://host/path (allowed hosts: {list})."
        ),
        EgressDenial::NoHost => format!(
            "{tool} needs an absolute URL with a host in '{url_arg}' (allowed hosts: {list}). Call it \
             again with a full URL such as https://host/path."
        ),
    }
}

/// `circuit_open`: the breaker refuses calls for `retry_after_s` more seconds.
pub fn circuit_open_message(tool: &str, failures: u32, retry_after_s: f64) -> String {
    let secs = format_seconds((retry_after_s * 10.0).ceil() / 10.0);
    format!(
        "{tool} is failing repeatedly ({failures} failures in a row) and is paused for {secs}s. Do not \
         call it now; tell the user the service is unavailable and try later."
    )
}

/// `backend_saturated`: the call was not run, every worker thread being held by `stuck` calls
/// that overran their deadline.
pub fn backend_saturated_message(tool: &str, stuck: usize) -> String {
    format!(
        "{tool} was not run: all {stuck} worker threads are held by earlier tool calls that \
         overran their deadline and have not returned. Do not retry now; tell the user the service \
         is overloaded."
    )
}

/// Seconds as Python's `{:g}` would print them for the usual values (`2`, `0.5`, `1.25`).
pub fn format_seconds(s: f64) -> String {
    let text = format!("{s}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::ArgumentProblems;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for &c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "{c} twice");
            assert_eq!(ErrorCode::from_wire(c.as_str()), Some(c));
            assert_eq!(c.py_name(), c.as_str().to_ascii_uppercase());
        }
        assert_eq!(ErrorCode::ALL.len(), 28);
        assert_eq!(ErrorCode::from_wire("nope"), None);
        let retriable: Vec<_> = ErrorCode::ALL.iter().filter(|c| c.retriable()).collect();
        assert_eq!(retriable, [&ErrorCode::StoreConflict]);
    }

    #[test]
    fn an_exception_is_what_its_first_class_in_order_says() {
        assert_eq!(
            ErrorClass::ORDER,
            [
                ErrorClass::Arguments,
                ErrorClass::Deadline,
                ErrorClass::Tool,
                ErrorClass::Shape
            ]
        );
        assert_eq!(
            Raised::of(Some(ErrorClass::Arguments), Some(true), true),
            Raised::Arguments
        );
        assert_eq!(Raised::of(Some(ErrorClass::Deadline), None, true), Raised::Deadline);
        assert_eq!(
            Raised::of(Some(ErrorClass::Tool), Some(true), false),
            Raised::Tool { retriable: true }
        );
        // A flag that cannot be read is not retriable.
        assert_eq!(
            Raised::of(Some(ErrorClass::Tool), None, true),
            Raised::Tool { retriable: false }
        );
        assert_eq!(Raised::of(Some(ErrorClass::Shape), None, true), Raised::Shape);
        assert_eq!(Raised::of(None, Some(true), true), Raised::Other { transient: true });
        assert_eq!(Raised::of(None, None, false), Raised::Other { transient: false });
        assert_eq!(
            TRANSIENT_BUILTINS,
            [TransientBuiltin::ConnectionError, TransientBuiltin::TimeoutError]
        );
    }

    #[test]
    fn how_an_envelope_describes_what_was_raised() {
        assert_eq!(Raised::Arguments.describe(true), Describe::InvalidArguments);
        assert_eq!(Raised::Arguments.describe(false), Describe::Other);
        assert_eq!(Raised::Other { transient: true }.describe(true), Describe::Other);
        assert_eq!(Raised::Deadline.describe(false), Describe::Deadline);
        assert_eq!(Raised::Tool { retriable: false }.describe(false), Describe::Tool);
        assert_eq!(Raised::Shape.describe(true), Describe::Shape);
    }

    #[test]
    fn what_is_retried() {
        use crate::middleware::FailureKind::*;
        let kinds: Vec<_> = [
            Raised::Arguments,
            Raised::Deadline,
            Raised::Tool { retriable: true },
            Raised::Tool { retriable: false },
            Raised::Shape,
            Raised::Other { transient: true },
            Raised::Other { transient: false },
        ]
        .iter()
        .map(|r| r.failure_kind())
        .collect();
        assert_eq!(
            kinds,
            [Permanent, Deadline, Transient, Permanent, Permanent, Transient, Permanent]
        );
    }

    #[test]
    fn long_names_are_echoed_short() {
        let huge = "x".repeat(1_000_000);
        let msg = unknown_tool_message(&huge, &["a"], None);
        assert_eq!(
            msg,
            format!(
                "No tool named '{}... (1000000 characters)'. Available tools: a. Call one of those instead.",
                "x".repeat(64)
            )
        );
        assert_eq!(echoed_name("short"), "short");
        assert_eq!(echoed_name(&"é".repeat(64)), "é".repeat(64));
    }

    #[test]
    fn messages() {
        assert_eq!(
            unknown_tool_message("chekc_stock", &["check_stock", "find_sku"], Some("check_stock")),
            "No tool named 'chekc_stock'. Did you mean 'check_stock'? Available tools: check_stock, find_sku. Call one of those instead."
        );
        assert_eq!(
            timeout_message("slow_report", 0.5),
            "slow_report did not finish within 0.5s. Do not retry immediately; tell the user the backend is slow."
        );
        assert_eq!(format_seconds(10.0), "10");
        let r = Rejection::Problems(ArgumentProblems {
            missing: vec!["sku".into()],
            ..Default::default()
        });
        assert_eq!(
            invalid_arguments_message("check_stock", &r, &["sku".into(), "warehouse".into()]),
            "tool 'check_stock' call rejected: missing required argument(s) ['sku']. Accepted arguments: \
             ['sku', 'warehouse']. Re-read the input schema and call 'check_stock' \
             again with corrected arguments."
        );
        assert_eq!(
            rejection_message("check_stock", &r, "['sku', 'warehouse']"),
            invalid_arguments_message("check_stock", &r, &["sku".into(), "warehouse".into()])
        );
        assert_eq!(
            rejection_message("t", &Rejection::NotAnObject("array"), "[]"),
            "tool 't' call rejected: the arguments must be a JSON object of named arguments, got an array. \
             Accepted arguments: []. Re-read the input schema and call 't' again with corrected arguments."
        );
        assert_eq!(
            internal_error_message("t", "KeyError", "'x'"),
            "t failed: KeyError: 'x'. This is a bug in the tool, not in your arguments; do not retry."
        );
        assert_eq!(
            internal_error_message("t", "ValueError", "boom."),
            "t failed: ValueError: boom. This is a bug in the tool, not in your arguments; do not retry."
        );
        assert_eq!(
            approval_required_message("refund", "{}"),
            "refund needs the user's approval before it runs, and it was not run. Ask the user whether \
             to allow refund with arguments {}; call it again only after they approve."
        );
        assert_eq!(
            repeated_call_message("t", 3),
            "t has now been called 3 times with these same arguments in this conversation, and it was \
             not run again. Stop calling it; explain the problem to the user instead."
        );
        assert_eq!(
            circuit_open_message("t", 2, 59.95),
            "t is failing repeatedly (2 failures in a row) and is paused for 60s. Do not call it now; \
             tell the user the service is unavailable and try later."
        );
        assert_eq!(
            invalid_call_message("the tool call's name must be a string, got int"),
            "the tool call's name must be a string, got int. Send a tool call with a name and its arguments."
        );
        assert_eq!(
            egress_denied_message(
                "fetch",
                "url",
                &EgressDenial::HostNotAllowed("evil.com".into()),
                &["a.com".into()]
            ),
            "fetch may not reach host 'evil.com': it is not on the allow-list (a.com). Do not retry with \
             this URL; use an allowed host or tell the user this host is not permitted."
        );
    }
}
