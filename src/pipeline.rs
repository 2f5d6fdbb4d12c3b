//! The call pipeline: the Invoker's built-in rules (audit, approval, repeat guard, idempotency,
//! retry with backoff and circuit breaker, timeout, egress) as one sans-IO state machine.
//!
//! A [`Pipeline`] is built once per Invoker from the built-in rules in chain order and owns the
//! per-Invoker state (the conversations' repeat counts and idempotency windows, the circuit
//! breakers). Each call is a [`CallMachine`]: [`Pipeline::begin`] takes the call's [`Facts`]
//! (plain data the binding read from the tool, the context and the call) and returns the first
//! [`Step`]; the driver performs it (run the body, ask the approver, sleep, wait for an identical
//! call in flight, read or write the shared store, emit the audit record) and feeds the
//! [`Event`] back with [`Pipeline::feed`], until [`Step::Done`]:
//!
//! ```text
//! begin ─► (rules, outermost first) ─► RunBody ─► feed(BodyOk | BodyFailed) ─► (rules, innermost
//!            │ AskApprover / WaitInFlight /                                     first) ─► Done
//!            │ Store* / AuditOpen                                  Retry: Sleep ─► RunBody again
//!            └ a refusal or a cached result ──────────────────────────────────────────► Done
//! ```
//! The rules run in the order the chain gives them, like nested middleware: each rule acts on
//! the way in (may answer itself: a refusal, a cached result) and on the way out (sees the
//! envelope: records it, resets counts, retries). Times are seconds on a monotonic clock given
//! by the driver ([`Time`]), so the tests drive the machine without sleeping.

use std::collections::HashMap;

use serde_json::Value;

use crate::envelope::Code;
use crate::errors::ErrorCode;
use crate::middleware::{
    check_egress, is_repeat, store_key, CircuitBreaker, Claim, Conversations, EgressDenial, FailureKind, HostAllowList,
    RetryPolicy,
};

/// The audit outcome of a success.
pub const OK_OUTCOME: &str = "ok";
/// The audit outcome of a call its caller cancelled.
pub const CANCELLED_OUTCOME: &str = "cancelled";

/// The deadline of one attempt when no `timeout` rule sets one but the idempotency lease needs
/// an estimate (seconds).
pub const FALLBACK_LIMIT_S: f64 = 10.0;
/// The shared store's record of a call nobody holds (a claim released after a failure or an
/// abort): the next identical call claims it over this record.
pub const FREE: &str = "{\"s\":\"free\"}";
/// How long a worker waits before reading a call another worker runs again (seconds).
pub const POLL_S: f64 = 0.05;
/// How many claims in a row a call may lose without waiting before the shared store is held
/// failing ([`Step::StoreFailing`]: the driver logs it; the call goes on without sharing its
/// deduplication). With a
/// store that keeps its promise, a lost claim means another worker wrote the key between this
/// worker's read and its compare-and-set; when the read that follows shows a live claim the
/// call waits (and the count starts again), so each further loss without waiting needs another
/// worker to have claimed and freed the key, or stored its result in a closed window, within
/// one round trip of this one. A few such races in a row happen; eight do not: such a store
/// refuses every claim (its compare_and_set does not compare what its get answers), and
/// claiming again would spin without end, never suspending.
pub const CLAIM_TRIES: u32 = 8;

/// Why a store that refused [`CLAIM_TRIES`] claims in a row is failing (the text logged).
fn refused() -> String {
    format!(
        "store.compare_and_set refused {CLAIM_TRIES} claims in a row, each over the record its get had just answered; fix the StorePort implementation (compare_and_set must write and return True when the key holds exactly the expected value)"
    )
}

/// One built-in rule with its configuration.
#[derive(Debug, Clone)]
pub enum Rule {
    /// One audit record per call (when the call is observed, see [`Facts::audit`]).
    Audit,
    /// The approval gate; `approver`: an approver callback is configured.
    Approval { approver: bool },
    /// Repeat detection: the `limit`-th identical call is refused.
    Repeat { limit: u32 },
    /// Deduplication of side-effecting calls; `shared`: a store shares it between processes.
    Idempotency { shared: bool, lease_s: f64 },
    /// Retry of transient failures; `breaker`: `(threshold, cooldown_s)`.
    Retry {
        policy: RetryPolicy,
        breaker: Option<(u32, f64)>,
    },
    /// A deadline per attempt.
    Timeout { default_s: f64 },
    /// A host allow-list for the URL argument.
    Egress { allow: HostAllowList },
}

/// The kinds of built-in rule, by the names a host configures a pipeline with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    Audit,
    Approval,
    Repeat,
    Idempotency,
    Retry,
    Timeout,
    Egress,
}

impl RuleKind {
    /// Each kind with its name.
    pub const NAMES: [(RuleKind, &'static str); 7] = [
        (RuleKind::Audit, "audit"),
        (RuleKind::Approval, "approval"),
        (RuleKind::Repeat, "repeat_guard"),
        (RuleKind::Idempotency, "idempotency"),
        (RuleKind::Retry, "retry"),
        (RuleKind::Timeout, "timeout"),
        (RuleKind::Egress, "egress"),
    ];

    /// The kind named `name`; the error names an unknown one.
    pub fn of(name: &str) -> Result<RuleKind, String> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|&(kind, _)| kind)
            .ok_or_else(|| format!("unknown pipeline rule {name:?}"))
    }
}

/// How an audit rule observes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Observed {
    /// Nobody reads the record: none is built.
    #[default]
    No = 0,
    /// A record is emitted at the end.
    Record = 1,
    /// A record, and a tracing span is opened around the call ([`Step::AuditOpen`]).
    Span = 2,
}

impl Observed {
    /// How a call is observed: a span (and a record) while a tracer is installed (`tracing`),
    /// else a record when anything reads one (`readers`: a sink, the audit log at DEBUG, the
    /// context's `trace`), else nothing.
    pub fn of(tracing: bool, readers: bool) -> Observed {
        if tracing {
            Observed::Span
        } else if readers {
            Observed::Record
        } else {
            Observed::No
        }
    }

    /// 0 nobody reads the record, 1 a record, 2 a record and a span.
    pub fn level(self) -> u8 {
        self as u8
    }

    /// How an audit rule observes a call, its readers asked in order and only until one reads
    /// it (see [`Observed::of`]): a sink set on the rule (`sink`), the audit log enabled at DEBUG
    /// (`logged`), the call's context tracing (`traced`). What asking raises is the call's
    /// failure.
    pub fn asked<E>(
        tracing: bool,
        sink: impl FnOnce() -> Result<bool, E>,
        logged: impl FnOnce() -> Result<bool, E>,
        traced: impl FnOnce() -> Result<bool, E>,
    ) -> Result<Observed, E> {
        let readers = tracing || sink()? || logged()? || traced()?;
        Ok(Observed::of(tracing, readers))
    }

    /// Whether the call's context traces it, as reading its `trace` went (`Ok(None)`: it has
    /// none): one that cannot be read counts as set (its failure is logged when the record goes
    /// to it), unless what reading it raised propagates (`propagates`, asked only then).
    pub fn traced<E>(read: Result<Option<bool>, E>, propagates: impl FnOnce(&E) -> bool) -> Result<bool, E> {
        match read {
            Ok(set) => Ok(set.unwrap_or(false)),
            Err(e) if propagates(&e) => Err(e),
            Err(_) => Ok(true),
        }
    }
}

/// Which facts of a call the rules of a pipeline read: the binding gathers only these (each
/// costs a read of the tool, the context or the arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// `requires_approval` and the host's approval (an approval rule).
    pub approval: bool,
    /// The conversation's counts or idempotency window, keyed by the canonical arguments
    /// (repeat guard, idempotency).
    pub counts: bool,
    /// Whether the call changes nothing (repeat guard, idempotency, retry).
    pub read_only: bool,
    /// Whether running the call again is safe (retry).
    pub retry: bool,
    /// The tool's own deadline and the context's (timeout, idempotency's lease).
    pub timeout: bool,
    /// The URL argument (egress).
    pub egress: bool,
    /// How each audit rule observes the call.
    pub audit: bool,
    /// A shared idempotency store, keyed on the canonical text.
    pub store: bool,
}

impl Needs {
    /// What `rules` read.
    pub fn of(rules: &[Rule]) -> Needs {
        let mut n = Needs::default();
        for rule in rules {
            match rule {
                Rule::Audit => n.audit = true,
                Rule::Approval { .. } => n.approval = true,
                Rule::Repeat { .. } => {
                    n.counts = true;
                    n.read_only = true;
                }
                Rule::Idempotency { shared, .. } => {
                    n.counts = true;
                    n.read_only = true;
                    n.timeout = true;
                    n.store |= *shared;
                }
                Rule::Retry { .. } => {
                    n.retry = true;
                    n.read_only = true;
                }
                Rule::Timeout { .. } => n.timeout = true,
                Rule::Egress { .. } => n.egress = true,
            }
        }
        n
    }

    /// An admitted call needs its canonical argument text when a shared store keys on it, an
    /// audit record hashes it (`observed`) or the approval refusal quotes it.
    pub fn canonical_of_admitted(&self, observed: bool, requires_approval: bool) -> bool {
        self.store || observed || requires_approval
    }

    /// An admitted call needs its arguments' key ([`Facts::key`]) when a rule counts or
    /// deduplicates identical calls.
    pub fn key_of_admitted(&self) -> bool {
        self.counts
    }

    /// An admitted call needs its canonical text or its key (see [`admitted_identity`]).
    pub fn identity_of_admitted(&self, observed: bool, requires_approval: bool) -> bool {
        self.canonical_of_admitted(observed, requires_approval) || self.key_of_admitted()
    }

    /// A rule draws from the pipeline's generator: a retry's backoff jitter, a shared
    /// idempotency store's claim owner (see [`Pipeline::reseed`]).
    pub fn draws(&self) -> bool {
        self.retry || self.store
    }

    /// A rule reads the wall clock: a shared idempotency store's leases are on it.
    pub fn wall_clock(&self) -> bool {
        self.store
    }

    /// A rejected call (its raw arguments) needs it when the repeat guard counts it (it names a
    /// tool) or an audit record hashes it.
    pub fn canonical_of_rejected(&self, named: bool, observed: bool) -> bool {
        (named && self.counts) || observed
    }
}

/// The indices of the audit rules among `rules` (their hosts are asked how a call is observed).
pub fn audit_rules(rules: &[Rule]) -> Vec<usize> {
    rules
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Rule::Audit))
        .map(|(i, _)| i)
        .collect()
}

/// The retry rule whose extra transient exception classes classify a body's failures for the
/// whole pipeline (a failure is fed in with one kind): the first in chain order; None: there is
/// no retry rule (the built-in transient classes alone).
pub fn classifying_rule(rules: &[Rule]) -> Option<usize> {
    rules.iter().position(|r| matches!(r, Rule::Retry { .. }))
}

/// How a tool body runs (decided at each attempt: a tool may change its flags between them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// A sync function body declared non-blocking: called on the caller's thread.
    Inline = 0,
    /// An `async` function body: awaited in the caller's task.
    Async = 1,
    /// A sync function body: run on the worker pool.
    Worker = 2,
    /// Any other tool: its own `run(args, ctx)`.
    Tool = 3,
}

impl BodyKind {
    /// `function`: the tool wraps a function (else it runs itself); `is_async`: that function is
    /// `async`; `non_blocking`: the tool, or the caller's list of inline tools, declares its sync
    /// body non-blocking.
    pub fn of(function: bool, is_async: bool, non_blocking: bool) -> BodyKind {
        match (function, is_async, non_blocking) {
            (false, _, _) => BodyKind::Tool,
            (true, true, _) => BodyKind::Async,
            (true, false, true) => BodyKind::Inline,
            (true, false, false) => BodyKind::Worker,
        }
    }
}

impl BodyKind {
    /// Whether the core runs this body itself when the driver let it (`here`): a non-blocking
    /// sync body (called) or an `async` one (its first step taken), unless the call is past its
    /// deadline already (`timeout_s` not above 0: the driver answers it).
    pub fn runs_here(self, here: bool, timeout_s: Option<f64>) -> bool {
        here && matches!(self, BodyKind::Inline | BodyKind::Async) && !crate::deadline::never_starts(timeout_s)
    }
}

impl BodyKind {
    /// Whether a call begun for a turn's relay (`lend`: the relay holds the call's state) leaves
    /// its body's start to the relay: an `async` body, whose first step the relay takes in its
    /// own task (no step payload is made); any other body is a step for the driver.
    #[inline]
    pub fn lent(self, lend: bool) -> bool {
        lend && self == BodyKind::Async
    }
}

/// The value of a tool's URL argument in a call's arguments, as the binding found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlValue<T> {
    /// The arguments do not hold it.
    Missing,
    /// It is None.
    Null,
    /// Any other value.
    Set(T),
}

/// The URL a call's egress check reads ([`Facts::url`]): `(arg, text)`, the text of the value
/// of the tool's URL argument `arg` (`text`, asked only for a value that is set; a value that is
/// no string is checked as it prints, so denied unless that is an allowed URL). A call whose
/// arguments lack it or set it to None reaches no URL through it: it has no URL to check (the
/// egress rule lets it through). What `text` raises fails the call.
pub fn egress_url<T, E>(
    arg: String,
    value: UrlValue<T>,
    text: impl FnOnce(T) -> Result<String, E>,
) -> Result<Option<(String, String)>, E> {
    match value {
        UrlValue::Set(v) => Ok(Some((arg, text(v)?))),
        UrlValue::Missing | UrlValue::Null => Ok(None),
    }
}

/// How a call that waits for an identical call in flight (its future) is woken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// It is done already (woken, or its waiter gave up): nothing.
    Nothing,
    /// Its result is set now: it awaits on the loop running here.
    SetResult,
    /// Its loop (another thread's: an Invoker shared between threads) is asked to set it, since
    /// only that loop may, and it must be woken to see it; a loop closed meanwhile has nobody
    /// waiting (what asking raises is dropped).
    SetResultThreadsafe,
}

/// How a waiting call's future is woken: `done` it is done already; `on_running_loop` it awaits
/// on the loop running here (asked only when not done; what asking raises fails the waking call).
pub fn wake<E>(done: bool, on_running_loop: impl FnOnce() -> Result<bool, E>) -> Result<Wake, E> {
    if done {
        return Ok(Wake::Nothing);
    }
    Ok(if on_running_loop()? {
        Wake::SetResult
    } else {
        Wake::SetResultThreadsafe
    })
}

/// The conversation of a call: its context's `run_id` (as text) when it has one, else the
/// pipeline's default scope.
pub fn scope_of(run_id: Option<&str>, default_scope: &std::sync::Arc<str>) -> std::sync::Arc<str> {
    run_id.map_or_else(|| default_scope.clone(), Into::into)
}

/// The context's deadline on the [`Time::mono`] clock: `left` seconds (the deadline less the
/// host's clock now) after `now`.
pub fn deadline_at(now: f64, left: f64) -> f64 {
    now + left
}

/// What a call's context holds as its host's approvals (`ctx.approvals`), as the binding read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approvals {
    /// It has none.
    Absent,
    /// A bare string (or bytes): not a collection (`in` would match substrings).
    Text,
    /// An empty (false) one.
    Empty,
    /// A collection to look the call up in.
    Collection,
}

/// Whether the host approved a call already: the call's own `"approved": True` (`flagged`: a
/// key of the call, never of the model's arguments), or a collection of approvals (`approvals`,
/// read only then) holding the tool name (`holds_name`) or the call's id (`holds_id`, asked only
/// when the name is not held; None: the call has no id). A collection that cannot hold them
/// (`type_error`: looking up raised a `TypeError`) approves nothing; any other error of these
/// reads fails the call.
pub fn host_approved<E>(
    flagged: bool,
    approvals: impl FnOnce() -> Result<Approvals, E>,
    holds_name: impl FnOnce() -> Result<bool, E>,
    holds_id: impl FnOnce() -> Result<Option<bool>, E>,
    type_error: impl FnOnce(&E) -> bool,
) -> Result<bool, E> {
    if flagged {
        return Ok(true);
    }
    if approvals()? != Approvals::Collection {
        return Ok(false);
    }
    let held = holds_name().and_then(|by_name| match by_name {
        true => Ok(true),
        false => Ok(holds_id()?.unwrap_or(false)),
    });
    match held {
        Err(e) if type_error(&e) => Ok(false),
        held => held,
    }
}

/// The arguments of a call that was not admitted, as the binding could read them.
#[derive(Debug, Clone, PartialEq)]
pub enum RawArgs<'a> {
    /// None were given.
    Absent,
    /// Exactly what was sent, parsed.
    Value(&'a Value),
    /// JSON text as sent.
    Text(&'a str),
    /// A mapping's canonical JSON text.
    Canonical(String),
    /// A value that is not JSON, as it prints (`repr`).
    Printed(String),
    /// A value that cannot even be printed: its type's name (None: that cannot be read either).
    Unreadable(Option<String>),
}

/// The canonical text of arguments the host holds as an object (neither text nor None): their
/// canonical JSON text when they read as JSON (`canonical`), else how they print (`printed`,
/// asked only then), else a placeholder naming their type (`type_name`, asked only then; see
/// [`raw_canonical`]). What reading or printing them raised is the next way tried, but what
/// propagates (`propagates`: a stop, the caller's cancellation): that is raised, as everywhere
/// the caller's objects are read.
pub fn held_canonical<E>(
    canonical: impl FnOnce() -> Result<String, E>,
    printed: impl FnOnce() -> Result<String, E>,
    type_name: impl FnOnce() -> Option<String>,
    propagates: impl Fn(&E) -> bool,
) -> Result<String, E> {
    let args = match canonical() {
        Ok(text) => RawArgs::Canonical(text),
        Err(e) if propagates(&e) => return Err(e),
        Err(_) => match printed() {
            Ok(text) => RawArgs::Printed(text),
            Err(e) if propagates(&e) => return Err(e),
            Err(_) => RawArgs::Unreadable(type_name()),
        },
    };
    Ok(raw_canonical(args))
}

/// The raw arguments of a call refused at admission, as the binding holds them (see
/// [`Facts::rejected`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RawSent<'a, A> {
    /// Parsed, exactly as they were sent.
    Parsed(&'a Value),
    /// Only as the host's object `A` (its text made by the binding, see [`raw_canonical`]).
    Held(A),
    /// None were given.
    Absent,
}

/// The canonical text of a call's raw arguments (hashed in its audit record, counted by the
/// repeat guard): JSON as canonical JSON; JSON text that does not parse as it is; a value that is
/// not JSON by how it prints, one that cannot be printed by a placeholder naming its type; no
/// arguments as `{}`.
pub fn raw_canonical(args: RawArgs<'_>) -> String {
    match args {
        RawArgs::Absent => "{}".to_owned(),
        RawArgs::Value(v) => crate::middleware::canonical_json(v),
        RawArgs::Text(text) => match serde_json::from_str::<Value>(text) {
            Ok(v) => crate::middleware::canonical_json(&v),
            Err(_) => text.to_owned(),
        },
        RawArgs::Canonical(text) | RawArgs::Printed(text) => text,
        RawArgs::Unreadable(ty) => format!("<unreadable {}>", ty.as_deref().unwrap_or("object")),
    }
}

/// An admitted call's canonical text and key ([`Facts::canonical`], [`Facts::key`]) of its
/// validated arguments `value`, each made only when read: the text when a shared store keys on
/// it, an audit record hashes it (`observed`) or the approval refusal quotes it; the key when a
/// rule counts or deduplicates identical calls (from the text when it is made: the text is the
/// key then).
pub fn admitted_identity(n: &Needs, value: &Value, observed: bool, requires_approval: bool) -> (String, Vec<u8>) {
    match (
        n.canonical_of_admitted(observed, requires_approval),
        n.key_of_admitted(),
    ) {
        (true, true) => crate::middleware::canonical_and_key(value),
        (true, false) => (crate::middleware::canonical_json(value), Vec::new()),
        (false, true) => (String::new(), crate::middleware::args_key(value)),
        (false, false) => (String::new(), Vec::new()),
    }
}

/// Running a call again is safe: the tool is idempotent, or the call is read-only and the tool
/// declared its effects (an undeclared tool is read-only by default but never repeated).
pub fn retry_safe(idempotent: bool, read_only: bool, effects_declared: bool) -> bool {
    idempotent || (read_only && effects_declared)
}

/// What the binding reads of an admitted call (its tool's flags, its context, its arguments) for
/// [`Facts::read_admitted`], which asks each only when a rule of the pipeline reads it, in its
/// order: what a read raises is the call's failure, the first to raise the one reported.
pub trait AdmittedReads {
    type Error;
    /// A value of the call's arguments (the URL argument's).
    type Value;
    /// The tool's name.
    fn name(&self) -> Result<String, Self::Error>;
    fn requires_approval(&self) -> Result<bool, Self::Error>;
    /// The host approved the call already (see [`host_approved`]); `name`: the tool's.
    fn host_approved(&self, name: &str) -> Result<bool, Self::Error>;
    /// The tool has a read-only hook of its own.
    fn has_read_only_hook(&self) -> Result<bool, Self::Error>;
    /// What the tool's read-only hook answers for this call.
    fn ask_read_only_hook(&self) -> Result<bool, Self::Error>;
    fn side_effecting(&self) -> Result<bool, Self::Error>;
    fn idempotent(&self) -> Result<bool, Self::Error>;
    /// The tool left its effects undeclared (see `flags::undeclared`).
    fn undeclared(&self) -> Result<bool, Self::Error>;
    /// The tool's own deadline per attempt (see `flags::timeout_s`).
    fn timeout_s(&self) -> Result<Option<f64>, Self::Error>;
    /// Seconds left before the context's deadline, on the host's clock (None: it sets none).
    fn deadline_left(&self) -> Result<Option<f64>, Self::Error>;
    /// The name of the argument holding the URL the tool reaches (see `flags::url_arg`).
    fn url_arg(&self) -> Result<Option<String>, Self::Error>;
    /// The value of argument `arg` in the call's arguments.
    fn url_value(&self, arg: &str) -> UrlValue<Self::Value>;
    /// A set URL value as text (see [`egress_url`]).
    fn url_text(&self, value: Self::Value) -> Result<String, Self::Error>;
}

/// Where an admitted call's canonical argument text and key come from (each made only when a
/// rule reads it, see [`Facts::identify`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Identity {
    /// The text is known already (a call a user middleware passed on carries it).
    Text(String),
    /// The validated arguments.
    Of(Value),
    /// The arguments' key ([`crate::middleware::args_key`]), made as they were checked; their
    /// text, if read, made from the body's arguments.
    Key(Vec<u8>),
    /// Only the body's arguments: the text, if read, is made from them (and is the key).
    FromArgs,
}

/// What the binding read from the tool, the context and the call before the first step.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The tool name (None: the call named none).
    pub name: Option<String>,
    /// The call was admitted (a registered tool, valid arguments); false: the answer is the
    /// rejection envelope the binding holds.
    pub admitted: bool,
    /// The error code of the rejection envelope when not admitted.
    pub rejection_code: Option<Code>,
    /// The conversation (repeat and idempotency scope); shared, as most calls are in the
    /// default one.
    pub scope: std::sync::Arc<str>,
    /// The canonical JSON text of the arguments, when something reads it (see
    /// [`Needs::canonical_of_admitted`]).
    pub canonical: String,
    /// The arguments' identity the per-conversation state keys on (repeat counts, the
    /// idempotency window): equal for two calls exactly when their canonical texts are equal
    /// (`crate::middleware::args_key`); empty: `canonical` is the key.
    pub key: Vec<u8>,
    pub requires_approval: bool,
    /// The host approved this call already (the call's `"approved": True`, `ctx.approvals`).
    pub host_approved: bool,
    /// This call changes nothing.
    pub read_only: bool,
    /// Running this call again is safe (idempotent tool or read-only call of a declared tool).
    pub retry_safe: bool,
    /// The tool's own deadline per attempt (seconds).
    pub tool_timeout_s: Option<f64>,
    /// `ctx.deadline` on the [`Time::mono`] clock.
    pub deadline: Option<f64>,
    /// `(url_arg, its value as text)` when the tool has a URL argument and the call sets it.
    pub url: Option<(String, String)>,
    /// How each audit rule observes this call, by rule index (missing: not observed).
    pub audit: Vec<Observed>,
}

impl Facts {
    /// The facts of a call in conversation `scope`, before anything else is read: the same as
    /// `Facts { scope, ..Facts::default() }`, without making the default's empty scope (an
    /// `Arc<str>` shared process-wide: two atomic operations per call).
    pub fn in_scope(scope: std::sync::Arc<str>) -> Self {
        Facts {
            name: None,
            admitted: false,
            rejection_code: None,
            scope,
            canonical: String::new(),
            key: Vec::new(),
            requires_approval: false,
            host_approved: false,
            read_only: false,
            retry_safe: false,
            tool_timeout_s: None,
            deadline: None,
            url: None,
            audit: Vec::new(),
        }
    }
}

impl Facts {
    /// Record how the audit rules observe the call: `audits` their indices among the pipeline's
    /// `rules` rules, each asked `how(nth, index)` in order (what asking raises is the call's
    /// failure). [`Facts::audit`] stays empty (no allocation) while nobody observes the call: a
    /// rule without an entry is not observed. Returns whether anything observes it.
    #[inline]
    pub fn observe<E>(
        &mut self,
        audits: &[usize],
        rules: usize,
        mut how: impl FnMut(usize, usize) -> Result<Observed, E>,
    ) -> Result<bool, E> {
        let mut observed = false;
        for (nth, &i) in audits.iter().enumerate() {
            let o = how(nth, i)?;
            if o != Observed::No {
                if self.audit.is_empty() {
                    self.audit = vec![Observed::No; rules];
                }
                self.audit[i] = o;
                observed = true;
            }
        }
        Ok(observed)
    }

    /// The facts of a call refused at admission with `code`: its `name` (None: it named none),
    /// and the canonical text of its raw arguments `args` when a rule reads it (see
    /// [`Needs::canonical_of_rejected`]; `observed`: an audit record hashes it): from what was
    /// parsed when the arguments were, else from the host's object (`text`, asked only then;
    /// what it raises is raised: see [`held_canonical`]).
    #[cold]
    pub fn rejected<A, E>(
        &mut self,
        n: &Needs,
        code: Code,
        name: Option<String>,
        observed: bool,
        args: RawSent<'_, A>,
        text: impl FnOnce(A) -> Result<String, E>,
    ) -> Result<(), E> {
        self.rejection_code = Some(code);
        if n.canonical_of_rejected(name.is_some(), observed) {
            self.canonical = match args {
                RawSent::Parsed(value) => raw_canonical(RawArgs::Value(value)),
                RawSent::Held(a) => text(a)?,
                RawSent::Absent => raw_canonical(RawArgs::Absent),
            };
        }
        self.name = name;
        Ok(())
    }

    /// The facts of an admitted call that the rules `n` read, asked of `r` in this order and
    /// only when read: its name; the approval (`requires_approval`, then the host's approval only
    /// for a tool that requires it); whether it is read-only (the tool's hook when it has one,
    /// else not `side_effecting`); whether a retry is safe (`idempotent`, then `undeclared`);
    /// the tool's deadline, then the context's (placed on the [`Time::mono`] clock read by
    /// `mono` once it is known); the URL argument and its value.
    #[inline]
    pub fn read_admitted<R: AdmittedReads>(
        &mut self,
        n: &Needs,
        r: &R,
        mono: impl FnOnce() -> f64,
    ) -> Result<(), R::Error> {
        self.admitted = true;
        let name = r.name()?;
        if n.approval && r.requires_approval()? {
            self.requires_approval = true;
            self.host_approved = r.host_approved(&name)?;
        }
        if n.read_only {
            let hook = r.has_read_only_hook()?;
            self.read_only = crate::flags::read_only(hook.then_some(|| r.ask_read_only_hook()), || r.side_effecting())?;
        }
        if n.retry {
            self.retry_safe = retry_safe(r.idempotent()?, self.read_only, !r.undeclared()?);
        }
        if n.timeout {
            self.tool_timeout_s = r.timeout_s()?;
            if let Some(left) = r.deadline_left()? {
                self.deadline = Some(deadline_at(mono(), left));
            }
        }
        if n.egress {
            if let Some(arg) = r.url_arg()? {
                let value = r.url_value(&arg);
                self.url = egress_url(arg, value, |v| r.url_text(v))?;
            }
        }
        self.name = Some(name);
        Ok(())
    }

    /// The canonical text and key of an admitted call (read after [`Facts::read_admitted`]:
    /// the approval refusal quotes the text), from `id`, each made only when a rule reads it
    /// (see [`admitted_identity`]; `observed`: an audit record hashes the text): a text known
    /// already is the key itself; `text` makes it from the body's arguments (what it raises
    /// fails the call).
    #[inline]
    pub fn identify<E>(
        &mut self,
        n: &Needs,
        id: Identity,
        observed: bool,
        text: impl FnOnce() -> Result<String, E>,
    ) -> Result<(), E> {
        match id {
            Identity::Text(c) => self.canonical = c,
            Identity::Of(value) => {
                (self.canonical, self.key) = admitted_identity(n, &value, observed, self.requires_approval);
            }
            Identity::Key(key) => {
                self.key = key;
                if n.canonical_of_admitted(observed, self.requires_approval) {
                    self.canonical = text()?;
                }
            }
            Identity::FromArgs => {
                if n.identity_of_admitted(observed, self.requires_approval) {
                    self.canonical = text()?;
                }
            }
        }
        Ok(())
    }
}

/// The clocks the driver reads at each step.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Time {
    /// Monotonic seconds.
    pub mono: f64,
    /// Unix seconds (the shared store's leases).
    pub unix: f64,
}

impl Time {
    /// The clocks at `at` (a reading of `Instant::now()`): [`mono_at`]; the wall clock only when
    /// `unix` (a rule reads it: a shared store's leases), else 0.
    #[inline]
    pub fn at(unix: bool, at: std::time::Instant) -> Time {
        let unix = if unix {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        } else {
            0.0
        };
        Time {
            mono: mono_at(at),
            unix,
        }
    }

    /// The clocks now (see [`Time::at`]).
    #[inline]
    pub fn now(unix: bool) -> Time {
        Time::at(unix, std::time::Instant::now())
    }
}

/// The [`Time::mono`] clock at `at` (a reading of `Instant::now()`): seconds since its first
/// reading in this process (0 for an instant before it).
pub fn mono_at(at: std::time::Instant) -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    at.saturating_duration_since(*START.get_or_init(std::time::Instant::now))
        .as_secs_f64()
}

/// The [`Time::mono`] clock now.
pub fn mono_now() -> f64 {
    mono_at(std::time::Instant::now())
}

/// A refusal the pipeline answers itself (the tool is not run).
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    ApprovalRequired,
    Repeated {
        count: u32,
    },
    EgressDenied {
        url_arg: String,
        denial: EgressDenial,
        allowed: Vec<String>,
    },
    CircuitOpen {
        failures: u32,
        retry_after_s: f64,
    },
}

impl Refusal {
    /// The envelope's error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refusal::ApprovalRequired => ErrorCode::ApprovalRequired,
            Refusal::Repeated { .. } => ErrorCode::RepeatedCall,
            Refusal::EgressDenied { .. } => ErrorCode::EgressDenied,
            Refusal::CircuitOpen { .. } => ErrorCode::CircuitOpen,
        }
    }

    /// The failure refusing a call of tool `tool` with arguments `canonical` (their canonical
    /// text, which an approval request shows).
    pub fn failure<D>(&self, tool: &str, canonical: &str) -> crate::envelope::Failure<'static, D> {
        use crate::envelope::Failure;
        match self {
            Refusal::ApprovalRequired => Failure::approval_required(tool, canonical),
            Refusal::Repeated { count } => Failure::repeated_call(tool, *count),
            Refusal::EgressDenied {
                url_arg,
                denial,
                allowed,
            } => Failure::egress_denied(tool, url_arg, denial, allowed.clone()),
            Refusal::CircuitOpen {
                failures,
                retry_after_s,
            } => Failure::circuit_open(tool, *failures, *retry_after_s),
        }
    }
}

/// A result value: the body's own object, or JSON another worker stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Val<V> {
    Obj(V),
    Json(Value),
}

/// The envelope a call ends with (the binding renders it; the failures' details it holds).
#[derive(Debug, Clone, PartialEq)]
pub enum Env<V> {
    /// Success; `deduplicated`: served from the idempotency window without running the tool.
    Ok {
        value: Val<V>,
        elapsed_ms: f64,
        deduplicated: bool,
    },
    /// A refusal of a rule.
    Refused(Refusal),
    /// The body (or our deadline) failed with this kind; `code`: the envelope's error code.
    Failed { kind: FailureKind, code: Code },
    /// Not admitted: the lookup/validation envelope (`code`: its error code).
    Rejected { code: Code },
    /// An envelope the next handler (a user middleware) returned: `ok`, `deduplicated`, its
    /// code, the failure kind when a body failed, and its value.
    Passed {
        ok: bool,
        deduplicated: bool,
        code: Code,
        kind: Option<FailureKind>,
        value: Option<V>,
    },
}

impl<V> Env<V> {
    /// The envelope the next handler (a user middleware) answered, as the binding read it: `ok`
    /// and `deduplicated` its flags, `code` its `error.code` as text (see [`Code::of_envelope`]),
    /// `kind` the failure kind of the attempt it saw fail; its value (`value`, read only for a
    /// success) is kept only for a success. An answer that is no envelope is read as one with
    /// neither flag nor code: a failure, `internal_error`.
    pub fn passed(
        ok: bool,
        deduplicated: bool,
        code: Option<String>,
        kind: Option<FailureKind>,
        value: impl FnOnce() -> Option<V>,
    ) -> Env<V> {
        Env::Passed {
            ok,
            deduplicated,
            code: Code::of_envelope(code),
            kind,
            value: if ok { value() } else { None },
        }
    }

    pub fn ok(&self) -> bool {
        matches!(self, Env::Ok { .. } | Env::Passed { ok: true, .. })
    }
    fn deduplicated(&self) -> bool {
        matches!(
            self,
            Env::Ok { deduplicated: true, .. } | Env::Passed { deduplicated: true, .. }
        )
    }
    /// The error code (`"ok"` for a success).
    pub fn outcome(&self) -> String {
        match self {
            Env::Ok { .. } | Env::Passed { ok: true, .. } => OK_OUTCOME.into(),
            Env::Refused(r) => r.code().as_str().into(),
            Env::Failed { code, .. } | Env::Rejected { code } | Env::Passed { code, .. } => code.as_str().into(),
        }
    }
    fn failure(&self) -> Option<FailureKind> {
        match self {
            Env::Failed { kind, .. } => Some(*kind),
            Env::Passed { kind, .. } => *kind,
            _ => None,
        }
    }
}

/// One audit record (the binding adds the tool name, call id and argument hash).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    /// `"ok"`, the error code, or `"cancelled"`.
    pub outcome: String,
    /// How many times the body started.
    pub attempts: u32,
    pub elapsed_ms: f64,
    /// `executed`, `deduplicated`, `refused` or `failed`.
    pub decision: &'static str,
}

/// A value of an audit record (the binding converts each to its own type).
#[derive(Debug, Clone, PartialEq)]
pub enum AuditValue<'a> {
    /// Text, or none (a call that named no tool).
    Text(Option<&'a str>),
    /// Text made for the record.
    Owned(String),
    /// The call's id as the call gave it (the binding holds it).
    CallId,
    Count(u32),
    Number(f64),
}

impl AuditRecord {
    /// The keys of a record, in its order.
    pub const KEYS: [&'static str; 7] = [
        "tool",
        "call_id",
        "args_hash",
        "outcome",
        "attempts",
        "elapsed_ms",
        "decision",
    ];

    /// The values of the record of a call of `tool` whose arguments' canonical text is
    /// `canonical`, in the order of [`AuditRecord::KEYS`]: the tool, its call id, `args_hash` (of
    /// `canonical`), the outcome, the attempts, the elapsed milliseconds, the decision.
    pub fn values<'a>(&'a self, tool: Option<&'a str>, canonical: &str) -> [AuditValue<'a>; 7] {
        [
            AuditValue::Text(tool),
            AuditValue::CallId,
            AuditValue::Owned(crate::middleware::args_hash(canonical)),
            AuditValue::Text(Some(&self.outcome)),
            AuditValue::Count(self.attempts),
            AuditValue::Number(self.elapsed_ms),
            AuditValue::Text(Some(self.decision)),
        ]
    }
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<V> {
    /// Run the body once (or, in a segment followed by user middleware, call the next handler)
    /// within `timeout_s` seconds (None: no deadline); then `BodyOk` / `BodyFailed` / `Passed`.
    RunBody { timeout_s: Option<f64> },
    /// Ask the approver; then `Approved`.
    AskApprover,
    /// Wait this many seconds; then `Slept`.
    Sleep(f64),
    /// Wait until the identical call in flight wakes ticket `.0`; then `Woken`.
    WaitInFlight(u64),
    /// `store.get(key)`; then `StoreGot` (or `StoreFailed`).
    StoreGet(String),
    /// `store.set(key, value)`; then `StoreSet`.
    StoreSet(String, String),
    /// `store.compare_and_set(key, expected, value)`; then `StoreCas`.
    StoreCas {
        key: String,
        expected: Option<String>,
        value: String,
    },
    /// The shared store is failing (`why`: how; the store raised nothing): log it as a failing
    /// store on `key`; then `StoreFailed` (the call goes on without sharing).
    StoreFailing { key: String, why: String },
    /// Open the tracing span of the call; then `Opened`.
    AuditOpen,
    /// Emit the record (and close the span when one was opened); then `Recorded`.
    Record(AuditRecord),
    /// An abort's step only: wait for the task of its own that writes this record, the call's
    /// (see [`CallMachine::recording`]); the record is not emitted again.
    Recording(AuditRecord),
    /// Finished.
    Done(Env<V>),
}

/// What the driver feeds back.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<V> {
    BodyOk(V),
    /// The body failed; `code`: the error code of its envelope.
    BodyFailed {
        kind: FailureKind,
        code: Code,
    },
    /// The next handler answered (a segment followed by user middleware).
    Passed(Env<V>),
    Approved(bool),
    Slept,
    Woken,
    StoreGot(Option<String>),
    StoreSet,
    StoreCas(bool),
    /// A store call raised (the driver logged it), or the failing store of a
    /// [`Step::StoreFailing`] was logged.
    StoreFailed,
    Opened,
    Recorded,
}

/// The slots of [`Conversations`]: a finished call's result, or the ticket its duplicates wait on.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot<V> {
    Result(V),
    Ticket(u64),
}

/// The per-Invoker pipeline: its rules and the state they share across calls.
#[derive(Debug)]
pub struct Pipeline<V> {
    rules: Vec<Rule>,
    conversations: Conversations<Slot<V>>,
    breakers: HashMap<String, CircuitBreaker>,
    tickets: u64,
    rng: fastrand::Rng,
}

#[derive(Debug, Clone, Default)]
enum Frame {
    #[default]
    Idle,
    /// Audit: observed since this time.
    Audit { started: f64 },
    /// Idempotency: claimed in-process; `shared`: the record this worker wrote to the store.
    Claimed { shared: Option<String>, cached: bool },
    /// Retry: attempts made; `trial`: the attempt in progress is the breaker's half-open trial.
    Retry { attempt: u32, trial: bool },
}

/// How many rules' frames a call holds without an allocation of their own (the default chain
/// has 6 rules).
const INLINE_FRAMES: usize = 6;

/// The frames of a call's rules, one per rule from its start on (none before): inline for up to
/// [`INLINE_FRAMES`] rules, so that starting a call allocates none; on the heap past that.
#[derive(Debug)]
enum Frames {
    Inline { len: u8, items: [Frame; INLINE_FRAMES] },
    Heap(Vec<Frame>),
}

impl Frames {
    /// `n` idle frames (none: nothing to hold).
    fn idle(n: usize) -> Self {
        match u8::try_from(n) {
            Ok(0) => Frames::default(),
            Ok(len) if n <= INLINE_FRAMES => Frames::Inline {
                len,
                items: Default::default(),
            },
            _ => Frames::Heap(vec![Frame::Idle; n]),
        }
    }
}

impl Default for Frames {
    fn default() -> Self {
        Frames::Heap(Vec::new())
    }
}

impl std::ops::Deref for Frames {
    type Target = [Frame];
    fn deref(&self) -> &[Frame] {
        match self {
            Frames::Inline { len, items } => &items[..usize::from(*len)],
            Frames::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for Frames {
    fn deref_mut(&mut self) -> &mut [Frame] {
        match self {
            Frames::Inline { len, items } => &mut items[..usize::from(*len)],
            Frames::Heap(v) => v,
        }
    }
}

#[derive(Debug, Clone)]
enum Phase {
    /// Going in at rule `.0`, waiting for an event.
    In(usize, Pending),
    /// Waiting for the body.
    Body {
        started: f64,
    },
    /// Going out at rule `.0` (its exit step in progress).
    Out(usize, Pending),
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    Approver,
    Wait,
    Window,
    Get,
    PollSleep,
    /// The claim's compare-and-set (its record is `CallMachine::mine`).
    Cas,
    /// The store refused [`CLAIM_TRIES`] claims in a row: its failure being logged.
    Refused,
    /// The window check of a result another worker stored (`CallMachine::stored`).
    Stored,
    Open,
    RetrySleep,
    FinishWindow,
    FinishCas,
    Record,
}

/// One call's state while it goes through the pipeline.
#[derive(Debug)]
pub struct CallMachine<V> {
    facts: Facts,
    frames: Frames,
    phase: Phase,
    attempts: u32,
    /// The deadline of one attempt set by the `timeout` rule.
    timeout_s: Option<f64>,
    /// The envelope going out.
    env: Option<Env<V>>,
    /// The in-process result found for an idempotency hit waiting for its window check.
    hit: Option<V>,
    /// Shared store: the document read last; the claim record this worker is writing; the
    /// result text another worker stored (while its window is checked); the `done` record this
    /// worker writes when it finishes with a result.
    doc: Option<String>,
    mine: Option<String>,
    stored: Option<String>,
    done: Option<String>,
    /// The JSON text of the result for the shared store (set by the driver, see
    /// [`CallMachine::wants_value_json`]).
    value_json: Option<String>,
    /// Tickets whose waiters the driver must wake (drained with [`CallMachine::take_wakes`]).
    wakes: Vec<u64>,
    /// Claims lost in a row since the call last waited (see [`CLAIM_TRIES`]).
    lost: u32,
    /// When the call began ([`Time::mono`]).
    began: f64,
    /// The record of audit rule `.0` handed to the driver, until it says it is emitted, and where
    /// it is (`.2`, see [`Handed`]).
    unrecorded: Option<(usize, AuditRecord, Handed)>,
}

/// Where the record handed to the driver last is, for the call's abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handed {
    /// With the driver: its sink has it (the abort emits nothing again).
    Driver,
    /// Never performed ([`CallMachine::unperformed`]): the abort emits it.
    Unperformed,
    /// Written in a task of its own ([`CallMachine::recording`]): the abort waits for that task
    /// ([`Step::Recording`]).
    InTask,
}

impl<V> CallMachine<V> {
    /// A finished machine holding `facts` (the binding gathers them before [`Pipeline::begin`]).
    pub fn with_facts(facts: Facts) -> Self {
        CallMachine {
            frames: Frames::default(),
            facts,
            phase: Phase::Finished,
            attempts: 0,
            timeout_s: None,
            env: None,
            hit: None,
            doc: None,
            mine: None,
            stored: None,
            done: None,
            value_json: None,
            wakes: Vec::new(),
            lost: 0,
            began: 0.0,
            unrecorded: None,
        }
    }

    /// The driver never performed the step the machine handed it last (the task that was to take
    /// it was cancelled before its first step): a record it was to emit is the abort's to emit.
    pub fn unperformed(&mut self) {
        if let Some((_, _, handed)) = &mut self.unrecorded {
            *handed = Handed::Unperformed;
        }
    }

    /// The driver writes the record it was handed last in a task of its own, which the caller's
    /// cancellation does not reach (see `crate::drive::SinkThrown`): the call's abort waits for
    /// that task ([`Step::Recording`]) instead of losing the record or emitting it again.
    pub fn recording(&mut self) {
        if let Some((_, _, handed)) = &mut self.unrecorded {
            *handed = Handed::InTask;
        }
    }
    /// The rule whose step is in progress (None: the body, or finished).
    pub fn rule_index(&self) -> Option<usize> {
        match self.phase {
            Phase::In(i, _) | Phase::Out(i, _) => Some(i),
            _ => None,
        }
    }
    /// Body starts counted by the handlers after this segment (a user middleware passed them on).
    pub fn set_attempts(&mut self, attempts: u32) {
        self.attempts = attempts;
    }
    /// How many times the body started.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
    /// The facts the call began with.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }
    /// Tickets of waiters to wake now.
    pub fn take_wakes(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.wakes)
    }
    /// Whether the driver should give the JSON text of a successful result with
    /// [`CallMachine::set_value_json`] (a shared idempotency claim is held).
    pub fn wants_value_json(&self) -> bool {
        self.frames
            .iter()
            .any(|f| matches!(f, Frame::Claimed { shared: Some(_), .. }))
    }
    /// Whether the driver should give the JSON text of the value `env` carries (see
    /// [`CallMachine::wants_value_json`]): only a success's value is shared.
    pub fn wants_json_of(&self, env: &Env<V>) -> bool {
        env.ok() && self.wants_value_json()
    }
    /// The JSON text of the result (None: it is not JSON and is not shared).
    pub fn set_value_json(&mut self, text: Option<String>) {
        self.value_json = text;
    }
}

/// The key of a conversation's open idempotency window in a shared store.
pub fn window_key(scope: &str) -> String {
    format!("agentkit-tools:idem-window:{}", &store_key(scope, "", "")[20..])
}

fn record_state(doc: Option<&str>) -> (Option<String>, Option<f64>, Option<Value>) {
    let Some(v) = doc.and_then(|d| serde_json::from_str::<Value>(d).ok()) else {
        return (None, None, None);
    };
    let Value::Object(mut m) = v else {
        return (None, None, None);
    };
    let state = m.get("s").and_then(Value::as_str).map(str::to_owned);
    let until = m.get("until").map(|u| u.as_f64().unwrap_or(0.0));
    (state, until, m.remove("value"))
}

impl<V: Clone> Pipeline<V> {
    pub fn new(rules: Vec<Rule>) -> Self {
        Self {
            rules,
            conversations: Conversations::default(),
            breakers: HashMap::new(),
            tickets: 0,
            rng: fastrand::Rng::new(),
        }
    }

    /// Draw anew from `seed` (backoff jitter, the owner of a shared claim): a process forked
    /// from the one that made the pipeline holds a copy of its generator, and must never draw
    /// what another copy draws (two workers claiming one call as the same owner would both run
    /// it).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = fastrand::Rng::with_seed(seed);
    }

    /// A pipeline whose backoff jitter is drawn from `seed` (tests).
    pub fn with_seed(rules: Vec<Rule>, seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            ..Self::new(rules)
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Forget a finished conversation's repeat counts and idempotency window.
    pub fn forget(&mut self, scope: &str) {
        self.conversations.forget(scope);
    }

    /// `(repeat counts, idempotency entries, breakers)`.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let (counts, idem, _) = self.conversations.sizes();
        (counts, idem, self.breakers.len())
    }

    /// Conversations held.
    pub fn scopes(&self) -> usize {
        self.conversations.sizes().2
    }

    /// Start a call.
    pub fn begin(&mut self, facts: Facts, t: Time) -> (CallMachine<V>, Step<V>) {
        let mut m = CallMachine::with_facts(facts);
        let step = self.start(&mut m, t);
        (m, step)
    }

    /// Start the call of machine `m` (made with [`CallMachine::with_facts`]) where it is: no
    /// move of the machine.
    pub fn start(&mut self, m: &mut CallMachine<V>, t: Time) -> Step<V> {
        m.frames = Frames::idle(self.rules.len());
        m.phase = Phase::In(0, Pending::None);
        m.lost = 0;
        m.began = t.mono;
        self.descend(m, 0, t)
    }

    /// Feed the outcome of the last step.
    pub fn feed(&mut self, m: &mut CallMachine<V>, event: Event<V>, t: Time) -> Step<V> {
        match (m.phase.clone(), event) {
            (Phase::Body { started }, ev) => {
                let env = match ev {
                    Event::BodyOk(v) => Env::Ok {
                        value: Val::Obj(v),
                        elapsed_ms: round3((t.mono - started) * 1000.0),
                        deduplicated: false,
                    },
                    Event::BodyFailed { kind, code } => Env::Failed { kind, code },
                    Event::Passed(env) => env,
                    other => return misuse(m, &other),
                };
                self.ascend(m, self.rules.len(), env, t)
            }
            (Phase::In(i, p), ev) => self.resume_in(m, i, p, ev, t),
            (Phase::Out(i, p), ev) => self.resume_out(m, i, p, ev, t),
            (Phase::Finished, ev) => misuse(m, &ev),
        }
    }

    /// The caller gave up (cancelled, or a fault outside the pipeline): release what the call
    /// holds and return the steps the driver performs before it lets the cancellation (or the
    /// fault) go on, in order, each with the index of its rule; their answers are not fed back:
    ///
    /// - [`Step::StoreCas`]: the shared idempotency claim this call wrote goes, by compare-and-set
    ///   from exactly that record, to [`FREE`] (so another caller's claim or a stored result is
    ///   never erased, and the identical calls of other workers go on at once instead of waiting
    ///   for the lease to run out). A call that was already finishing with a result (the body
    ///   returned; the store had not confirmed the result) writes that result instead.
    /// - [`Step::Record`]: the audit record, outcome `cancelled` when `cancelled`, else
    ///   `internal_error` (the envelope the caller gets for a fault outside the pipeline),
    ///   decision `failed`; or the call's own record, made as it went out, that its driver never
    ///   emitted ([`CallMachine::unperformed`]).
    /// - [`Step::Recording`]: the call's own record is being written in a task of its own
    ///   ([`CallMachine::recording`]): wait for that task.
    ///
    /// In-process, the identical calls waiting for this one wake (see
    /// [`CallMachine::take_wakes`]). A call aborted after its body started is released like a
    /// call whose body failed: it leaves no result, so an identical call runs the body again.
    pub fn abort(&mut self, m: &mut CallMachine<V>, cancelled: bool, t: Time) -> Vec<(usize, Step<V>)> {
        let mut steps = Vec::new();
        if matches!(m.phase, Phase::Finished) {
            return steps;
        }
        let limit = match m.phase {
            Phase::In(i, _) | Phase::Out(i, _) => i + 1,
            _ => self.rules.len(),
        };
        match m.unrecorded.take() {
            // The call's record, made as it went out, that its driver never emitted.
            Some((i, rec, Handed::Unperformed)) => steps.push((i, Step::Record(rec))),
            // That record, being written in a task of its own: the abort waits for it.
            Some((i, rec, Handed::InTask)) => steps.push((i, Step::Recording(rec))),
            Some((_, _, Handed::Driver)) | None => {}
        }
        for i in (0..limit.min(self.rules.len())).rev() {
            match std::mem::take(&mut m.frames[i]) {
                Frame::Claimed { shared, cached } => {
                    // Finishing: rule `i` is on its way out (the envelope is known).
                    let finishing = matches!(m.phase, Phase::Out(j, _) if j == i);
                    // The claim written, or being written when the call was aborted.
                    let written = match m.phase {
                        Phase::In(j, Pending::Cas) if j == i => m.mine.take(),
                        _ => shared,
                    };
                    if !finishing {
                        m.env = None;
                    }
                    if let Some(mine) = written {
                        let done = m.done.take().filter(|_| m.env.as_ref().is_some_and(Env::ok));
                        let f = &m.facts;
                        let key = store_key(&f.scope, name_of(f), &f.canonical);
                        steps.push((
                            i,
                            Step::StoreCas {
                                key,
                                expected: Some(mine),
                                value: done.unwrap_or_else(|| FREE.into()),
                            },
                        ));
                    }
                    self.settle(m, cached);
                }
                Frame::Retry { trial: true, .. } => {
                    // A half-open trial that never finished says nothing about the backend: its
                    // slot is freed, or the circuit would refuse the tool for good.
                    if let Some(b) = self.breakers.get_mut(name_of(&m.facts)) {
                        b.record_neutral();
                    }
                }
                Frame::Audit { started } => steps.push((
                    i,
                    Step::Record(AuditRecord {
                        outcome: if cancelled {
                            CANCELLED_OUTCOME.into()
                        } else {
                            ErrorCode::InternalError.as_str().into()
                        },
                        attempts: m.attempts,
                        elapsed_ms: round3((t.mono - started) * 1000.0),
                        decision: "failed",
                    }),
                )),
                _ => {}
            }
        }
        m.env = None;
        m.phase = Phase::Finished;
        steps
    }

    // ---------------------------------------------------------------- going in

    /// Enter the rules from `i` on; at the end, run the body.
    fn descend(&mut self, m: &mut CallMachine<V>, mut i: usize, t: Time) -> Step<V> {
        while i < self.rules.len() {
            match self.enter(m, i, t) {
                Enter::Next => i += 1,
                Enter::Answer(env) => return self.ascend(m, i, env, t),
                Enter::Wait(p, step) => {
                    m.phase = Phase::In(i, p);
                    return step;
                }
            }
        }
        if !m.facts.admitted {
            let code = m
                .facts
                .rejection_code
                .clone()
                .unwrap_or(Code::Known(ErrorCode::InternalError));
            return self.ascend(m, self.rules.len(), Env::Rejected { code }, t);
        }
        m.attempts += 1;
        m.phase = Phase::Body { started: t.mono };
        // Cut to the context's deadline now: a `timeout` outside `retry` set the limit before
        // the first attempt, and a later attempt must not outlive `ctx.deadline`.
        let limit = match (m.timeout_s, m.facts.deadline) {
            (Some(l), Some(d)) => Some(l.min(d - t.mono).max(0.0)),
            (l, _) => l,
        };
        Step::RunBody { timeout_s: limit }
    }

    fn enter(&mut self, m: &mut CallMachine<V>, i: usize, t: Time) -> Enter<V> {
        let f = &m.facts;
        match &self.rules[i] {
            Rule::Audit => {
                let observed = f.audit.get(i).copied().unwrap_or_default();
                if observed == Observed::No {
                    return Enter::Next;
                }
                m.frames[i] = Frame::Audit { started: t.mono };
                if observed == Observed::Span {
                    return Enter::Wait(Pending::Open, Step::AuditOpen);
                }
                Enter::Next
            }
            Rule::Approval { approver } => {
                if !f.admitted || !f.requires_approval || f.host_approved {
                    return Enter::Next;
                }
                if *approver {
                    return Enter::Wait(Pending::Approver, Step::AskApprover);
                }
                Enter::Answer(Env::Refused(Refusal::ApprovalRequired))
            }
            Rule::Repeat { limit } => {
                let Some(name) = &f.name else { return Enter::Next };
                let count = self.conversations.observe(&f.scope, name, key_of(f));
                if is_repeat(count, *limit) {
                    return Enter::Answer(Env::Refused(Refusal::Repeated { count }));
                }
                Enter::Next
            }
            Rule::Idempotency { .. } => {
                if !f.admitted || f.read_only {
                    return Enter::Next;
                }
                self.claim(m, i, t)
            }
            Rule::Retry { breaker, .. } => {
                if !f.admitted {
                    return Enter::Next;
                }
                m.frames[i] = Frame::Retry {
                    attempt: 0,
                    trial: false,
                };
                self.attempt(m, i, *breaker, t)
            }
            Rule::Timeout { default_s } => {
                if f.admitted {
                    m.timeout_s = Some(attempt_limit(f, *default_s, t));
                }
                Enter::Next
            }
            Rule::Egress { allow } => {
                let Some((url_arg, url)) = f.url.as_ref().filter(|_| f.admitted) else {
                    return Enter::Next;
                };
                match check_egress(url, allow) {
                    Ok(_) => Enter::Next,
                    Err(denial) => Enter::Answer(Env::Refused(Refusal::EgressDenied {
                        url_arg: url_arg.clone(),
                        denial,
                        allowed: allow.entries(),
                    })),
                }
            }
        }
    }

    /// Retry: admit one more attempt through the breaker.
    fn attempt(&mut self, m: &mut CallMachine<V>, i: usize, breaker: Option<(u32, f64)>, t: Time) -> Enter<V> {
        let mut is_trial = false;
        if let Some((threshold, cooldown)) = breaker {
            let name = name_of(&m.facts).to_owned();
            let b = self
                .breakers
                .entry(name)
                .or_insert_with(|| CircuitBreaker::new(threshold, cooldown));
            if let Err(wait) = b.admit(t.mono) {
                let failures = b.consecutive_failures();
                return Enter::Answer(Env::Refused(Refusal::CircuitOpen {
                    failures,
                    retry_after_s: wait,
                }));
            }
            // Admitted while the circuit is open: this attempt is the half-open trial.
            is_trial = b.is_open();
        }
        if let Frame::Retry { attempt, trial } = &mut m.frames[i] {
            *attempt += 1;
            *trial = is_trial;
        }
        Enter::Next
    }

    /// Idempotency: look the call up in-process (and claim it).
    fn claim(&mut self, m: &mut CallMachine<V>, i: usize, t: Time) -> Enter<V> {
        let shared = matches!(self.rules[i], Rule::Idempotency { shared: true, .. });
        self.tickets += 1;
        let ticket = self.tickets;
        let f = &m.facts;
        match self
            .conversations
            .claim(&f.scope, name_of(f), key_of(f), Slot::Ticket(ticket))
        {
            Claim::Hit(Slot::Result(v)) => {
                if shared {
                    m.hit = Some(v.clone());
                    return Enter::Wait(Pending::Window, Step::StoreGet(window_key(&f.scope)));
                }
                Enter::Answer(Env::Ok {
                    value: Val::Obj(v.clone()),
                    elapsed_ms: since(m.began, t),
                    deduplicated: true,
                })
            }
            Claim::Pending(Slot::Ticket(w)) => Enter::Wait(Pending::Wait, Step::WaitInFlight(*w)),
            Claim::Hit(Slot::Ticket(_)) | Claim::Pending(Slot::Result(_)) => {
                unreachable!("slots are typed by their place")
            }
            Claim::Claimed => {
                m.frames[i] = Frame::Claimed {
                    shared: None,
                    cached: false,
                };
                if shared {
                    return Enter::Wait(
                        Pending::Get,
                        Step::StoreGet(store_key(&f.scope, name_of(f), &f.canonical)),
                    );
                }
                Enter::Next
            }
        }
    }

    fn resume_in(&mut self, m: &mut CallMachine<V>, i: usize, p: Pending, ev: Event<V>, t: Time) -> Step<V> {
        let key = || store_key(&m.facts.scope, name_of(&m.facts), &m.facts.canonical);
        match (p, ev) {
            (Pending::Open, Event::Opened) => self.descend(m, i + 1, t),
            (Pending::Approver, Event::Approved(true)) => self.descend(m, i + 1, t),
            (Pending::Approver, Event::Approved(false)) => {
                self.ascend(m, i, Env::Refused(Refusal::ApprovalRequired), t)
            }
            (Pending::Wait, Event::Woken) => self.enter_again(m, i, t),
            (Pending::Window, ev) => {
                let hit = m.hit.take();
                // Only another call's key there says the window closed. No window (this call's
                // own write failed, as did its claim) or a store that fails says nothing: what
                // this process knows stands (running a side effect twice is the worse mistake).
                let open = match &ev {
                    Event::StoreGot(Some(k)) => *k == key(),
                    Event::StoreGot(None) | Event::StoreFailed => true,
                    _ => false,
                };
                if let (true, Some(v)) = (open, hit) {
                    return self.ascend(
                        m,
                        i,
                        Env::Ok {
                            value: Val::Obj(v),
                            elapsed_ms: since(m.began, t),
                            deduplicated: true,
                        },
                        t,
                    );
                }
                // Another worker's side effect closed the window: look again.
                self.conversations.close_window(&m.facts.scope);
                self.enter_again(m, i, t)
            }
            (Pending::Get, Event::StoreGot(doc)) => {
                let (state, until, value) = record_state(doc.as_deref());
                m.doc = doc;
                match state.as_deref() {
                    Some("done") => {
                        m.hit = None;
                        m.stored = value.map(|v| v.to_string());
                        // Reuse the stored result only while its window is open.
                        self.window_then(m, i)
                    }
                    Some("running") if until.unwrap_or(0.0) > t.unix => {
                        m.phase = Phase::In(i, Pending::PollSleep);
                        Step::Sleep(POLL_S)
                    }
                    _ => self.cas_claim(m, i, t),
                }
            }
            (Pending::Stored, Event::StoreGot(got)) => {
                // The window check of a stored result (see `window_then`).
                let stored = m.stored.take();
                if matches!(&got, Some(k) if *k == key()) {
                    if let Some(text) = stored {
                        let value = serde_json::from_str(&text).unwrap_or(Value::Null);
                        m.frames[i] = Frame::Claimed {
                            shared: None,
                            cached: true,
                        };
                        let env = Env::Ok {
                            value: Val::Json(value),
                            elapsed_ms: since(m.began, t),
                            deduplicated: true,
                        };
                        return self.ascend(m, i + 1, env, t);
                    }
                }
                self.cas_claim(m, i, t)
            }
            (Pending::PollSleep, Event::Slept) => {
                m.lost = 0;
                m.phase = Phase::In(i, Pending::Get);
                Step::StoreGet(key())
            }
            (Pending::Cas, Event::StoreCas(true)) => {
                m.lost = 0;
                let mine = m.mine.take();
                m.frames[i] = Frame::Claimed {
                    shared: mine,
                    cached: false,
                };
                self.descend(m, i + 1, t)
            }
            (Pending::Cas, Event::StoreCas(false)) => {
                m.lost += 1;
                m.mine = None;
                if m.lost < CLAIM_TRIES {
                    m.phase = Phase::In(i, Pending::Get);
                    return Step::StoreGet(key());
                }
                // Claiming again would spin without end, never suspending: the store is failing.
                m.phase = Phase::In(i, Pending::Refused);
                Step::StoreFailing {
                    key: key(),
                    why: refused(),
                }
            }
            (
                Pending::Get | Pending::Cas | Pending::Stored | Pending::PollSleep | Pending::Refused,
                Event::StoreFailed,
            ) => {
                // A failing store: the call runs without sharing its deduplication.
                m.lost = 0;
                m.frames[i] = Frame::Claimed {
                    shared: None,
                    cached: false,
                };
                self.descend(m, i + 1, t)
            }
            (_, ev) => misuse(m, &ev),
        }
    }

    fn window_then(&mut self, m: &mut CallMachine<V>, i: usize) -> Step<V> {
        m.phase = Phase::In(i, Pending::Stored);
        Step::StoreGet(window_key(&m.facts.scope))
    }

    /// Claim the call in the shared store with compare-and-set against the document read.
    fn cas_claim(&mut self, m: &mut CallMachine<V>, i: usize, t: Time) -> Step<V> {
        let lease = self.lease_s(m, i, t);
        let owner = format!("{:016x}", self.rng.u64(..));
        // An infinite lease (`lease_s` or a deadline of inf) never runs out; JSON has no
        // infinity (it would be written as null, a lease that has already run out).
        let until = (t.unix + lease).min(f64::MAX);
        let mine = format!(
            "{{\"s\":\"running\",\"owner\":\"{owner}\",\"until\":{}}}",
            Value::from(until)
        );
        m.mine = Some(mine.clone());
        m.phase = Phase::In(i, Pending::Cas);
        let f = &m.facts;
        Step::StoreCas {
            key: store_key(&f.scope, name_of(f), &f.canonical),
            expected: m.doc.take(),
            value: mine,
        }
    }

    /// The lease of a shared claim: long enough for every attempt the rules inside the
    /// idempotency rule may make (each up to its deadline, the backoff between them at its
    /// ceiling), plus 5 s; at least the configured `lease_s`.
    pub fn lease_s(&self, m: &CallMachine<V>, i: usize, t: Time) -> f64 {
        let Rule::Idempotency { lease_s, .. } = self.rules[i] else {
            return 0.0;
        };
        let f = &m.facts;
        let mut limit = f.tool_timeout_s.unwrap_or(FALLBACK_LIMIT_S);
        let (mut attempts, mut backoff) = (1u32, 0.0);
        for rule in &self.rules[i + 1..] {
            match rule {
                Rule::Timeout { default_s } => limit = attempt_limit(f, *default_s, t),
                Rule::Retry { policy, .. } if f.retry_safe => {
                    attempts = policy.max_attempts;
                    // The ceiling stops growing by attempt 1024: the rest is one product (a
                    // "retry forever" max_attempts must not cost a loop of billions per call).
                    let waits = policy.max_attempts.saturating_sub(1);
                    let head = waits.min(1024);
                    backoff = (1..=head).map(|a| policy.ceiling_s(a)).sum::<f64>()
                        + f64::from(waits - head) * policy.ceiling_s(1024);
                }
                _ => {}
            }
        }
        let mut total = limit * f64::from(attempts) + backoff;
        if let Some(d) = f.deadline {
            total = total.min((d - t.mono).max(0.0));
        }
        lease_s.max(total + 5.0)
    }

    /// Enter rule `i` again (after waiting for an identical call, or a closed window).
    fn enter_again(&mut self, m: &mut CallMachine<V>, i: usize, t: Time) -> Step<V> {
        match self.claim(m, i, t) {
            Enter::Next => self.descend(m, i + 1, t),
            Enter::Answer(env) => self.ascend(m, i, env, t),
            Enter::Wait(p, step) => {
                m.phase = Phase::In(i, p);
                step
            }
        }
    }

    // ---------------------------------------------------------------- going out

    /// Leave the rules below `i` (innermost first) with `env`.
    fn ascend(&mut self, m: &mut CallMachine<V>, mut i: usize, env: Env<V>, t: Time) -> Step<V> {
        m.env = Some(env);
        while i > 0 {
            i -= 1;
            match self.exit(m, i, t) {
                Exit::Next => {}
                Exit::Wait(p, step) => {
                    m.phase = Phase::Out(i, p);
                    return step;
                }
            }
        }
        m.phase = Phase::Finished;
        Step::Done(m.env.take().expect("an envelope going out"))
    }

    /// Retry rule `i` runs the rules inside it again (after its backoff).
    fn again(&mut self, m: &mut CallMachine<V>, i: usize, t: Time) -> Step<V> {
        let Rule::Retry { breaker, .. } = self.rules[i] else {
            unreachable!("only retry runs again")
        };
        match self.attempt(m, i, breaker, t) {
            Enter::Next => {
                m.env = None;
                self.descend(m, i + 1, t)
            }
            Enter::Answer(env) => self.ascend(m, i, env, t),
            Enter::Wait(..) => unreachable!("a breaker answers at once"),
        }
    }

    fn exit(&mut self, m: &mut CallMachine<V>, i: usize, t: Time) -> Exit<V> {
        let env = m.env.as_ref().expect("an envelope going out");
        match (&self.rules[i], &m.frames[i]) {
            (Rule::Audit, Frame::Audit { started }) => {
                let outcome = env.outcome();
                let refusals = [
                    ErrorCode::ApprovalRequired,
                    ErrorCode::RepeatedCall,
                    ErrorCode::EgressDenied,
                ];
                let decision = if env.ok() {
                    if env.deduplicated() {
                        "deduplicated"
                    } else {
                        "executed"
                    }
                } else if refusals.iter().any(|c| c.as_str() == outcome) {
                    "refused"
                } else {
                    "failed"
                };
                let rec = AuditRecord {
                    outcome,
                    attempts: m.attempts,
                    elapsed_ms: round3((t.mono - started) * 1000.0),
                    decision,
                };
                m.frames[i] = Frame::Idle;
                m.unrecorded = Some((i, rec.clone(), Handed::Driver));
                Exit::Wait(Pending::Record, Step::Record(rec))
            }
            (Rule::Repeat { .. }, _) => {
                let f = &m.facts;
                if env.ok() && f.admitted && !env.deduplicated() && !f.read_only {
                    // The world changed: reading it again is legitimate.
                    self.conversations.reset_counts(&f.scope);
                }
                Exit::Next
            }
            (Rule::Idempotency { .. }, Frame::Claimed { shared: Some(mine), .. }) => {
                let f = &m.facts;
                let key = store_key(&f.scope, name_of(f), &f.canonical);
                let mine = mine.clone();
                if let (true, Some(text)) = (env.ok(), m.value_json.as_ref()) {
                    // The window first: a worker waiting for this result must find it open.
                    m.done = Some(crate::stored::done_record(text));
                    return Exit::Wait(Pending::FinishWindow, Step::StoreSet(window_key(&f.scope), key));
                }
                // The claim stays in the frame until the store answers: a call aborted meanwhile
                // frees it again (see `abort`).
                Exit::Wait(
                    Pending::FinishCas,
                    Step::StoreCas {
                        key,
                        expected: Some(mine),
                        value: FREE.into(),
                    },
                )
            }
            (Rule::Idempotency { .. }, Frame::Claimed { shared: None, cached }) => {
                let cached = *cached;
                self.settle(m, cached);
                m.frames[i] = Frame::Idle;
                Exit::Next
            }
            (Rule::Retry { policy, breaker }, Frame::Retry { attempt, .. }) => {
                let attempt = *attempt;
                let b = match breaker {
                    Some(_) => self.breakers.get_mut(name_of(&m.facts)),
                    None => None,
                };
                if env.ok() {
                    if let Some(b) = b {
                        b.record_success();
                    }
                    return Exit::Next;
                }
                let Some(kind) = env.failure() else {
                    // Refused by a rule inside: nothing to retry.
                    if let Some(b) = b {
                        b.record_neutral();
                    }
                    return Exit::Next;
                };
                if let Some(b) = b {
                    match kind {
                        FailureKind::Transient | FailureKind::Deadline => {
                            b.record_failure(t.mono);
                        }
                        FailureKind::Permanent => b.record_neutral(),
                    }
                    if b.is_open() {
                        return Exit::Next;
                    }
                }
                match policy.decide(kind, m.facts.retry_safe, attempt, &mut self.rng) {
                    Some(delay) => Exit::Wait(Pending::RetrySleep, Step::Sleep(delay)),
                    None => Exit::Next,
                }
            }
            _ => Exit::Next,
        }
    }

    /// Idempotency, in-process: the call ends with the envelope going out (none: it was
    /// aborted). A success (not read from the store) is held for this worker's repeats, anything
    /// else releases the call; the identical calls waiting for it wake.
    fn settle(&mut self, m: &mut CallMachine<V>, cached: bool) {
        let f = &m.facts;
        let (name, scope) = (name_of(f), &*f.scope);
        let env = m.env.as_ref().filter(|e| e.ok() && !cached);
        let woken = match env {
            // Held here too: this worker's repeats read back the object the tool returned.
            Some(Env::Ok { value: Val::Obj(v), .. }) => {
                self.conversations
                    .complete(scope, name, key_of(f), Some(Slot::Result(v.clone())))
            }
            Some(Env::Passed { value: Some(v), .. }) => {
                self.conversations
                    .complete(scope, name, key_of(f), Some(Slot::Result(v.clone())))
            }
            Some(_) => self.conversations.complete(scope, name, key_of(f), None),
            None => self.conversations.release(scope, name, key_of(f)),
        };
        if let Some(Slot::Ticket(w)) = woken {
            m.wakes.push(w);
        }
    }

    fn resume_out(&mut self, m: &mut CallMachine<V>, i: usize, p: Pending, ev: Event<V>, t: Time) -> Step<V> {
        let env = m.env.take().expect("an envelope going out");
        match (p, ev) {
            (Pending::Record, Event::Recorded) | (Pending::FinishCas, Event::StoreCas(_) | Event::StoreFailed) => {
                m.unrecorded = None;
                if p == Pending::FinishCas {
                    m.frames[i] = Frame::Claimed {
                        shared: None,
                        cached: false,
                    };
                    return self.ascend(m, i + 1, env, t);
                }
                self.ascend(m, i, env, t)
            }
            (Pending::RetrySleep, Event::Slept) => {
                m.env = Some(env);
                self.again(m, i, t)
            }
            (Pending::FinishWindow, Event::StoreSet) => {
                let f = &m.facts;
                let key = store_key(&f.scope, name_of(f), &f.canonical);
                let expected = match &m.frames[i] {
                    Frame::Claimed { shared, .. } => shared.clone(),
                    _ => None,
                };
                let value = m.done.clone().unwrap_or_default();
                m.env = Some(env);
                m.phase = Phase::Out(i, Pending::FinishCas);
                Step::StoreCas { key, expected, value }
            }
            (Pending::FinishWindow, Event::StoreFailed) => {
                m.frames[i] = Frame::Claimed {
                    shared: None,
                    cached: false,
                };
                self.ascend(m, i + 1, env, t)
            }
            (_, ev) => {
                m.env = Some(env);
                misuse(m, &ev)
            }
        }
    }
}

enum Enter<V> {
    Next,
    Answer(Env<V>),
    Wait(Pending, Step<V>),
}

enum Exit<V> {
    Next,
    Wait(Pending, Step<V>),
}

fn name_of(f: &Facts) -> &str {
    f.name.as_deref().unwrap_or("")
}

/// What the per-conversation state keys a call's arguments on (see [`Facts::key`]).
fn key_of(f: &Facts) -> &[u8] {
    if f.key.is_empty() {
        f.canonical.as_bytes()
    } else {
        &f.key
    }
}

/// The deadline of one attempt: the tool's `timeout_s`, else `default_s`, cut to the time left
/// before the context's deadline (never below 0).
pub fn attempt_limit(f: &Facts, default_s: f64, t: Time) -> f64 {
    let limit = f.tool_timeout_s.filter(|s| *s > 0.0).unwrap_or(default_s);
    match f.deadline {
        Some(d) => limit.min(d - t.mono).max(0.0),
        None => limit,
    }
}

/// The elapsed time of a deduplicated success (its body not run by this call): the time since
/// the call began (at `began`).
fn since(began: f64, t: Time) -> f64 {
    round3((t.mono - began) * 1000.0)
}

fn round3(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// A driver fed an event the machine was not waiting for: a bug in the driver. The call ends
/// with an internal failure instead of a panic.
fn misuse<V>(m: &mut CallMachine<V>, ev: &Event<V>) -> Step<V> {
    let _ = ev;
    m.phase = Phase::Finished;
    Step::Done(Env::Failed {
        kind: FailureKind::Permanent,
        code: ErrorCode::InternalError.into(),
    })
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
