//! Binding of the call pipeline (`crate::pipeline`): reads a call's facts from the tool, the
//! context and the call, converts the machine's steps into tuples a Python driver performs and
//! its events back, classifies exceptions and renders envelopes. The rules live in the core.
//!
//! A step is `(code, payload)`; see `STEP_*` and `EV_*` (exported to Python with the same names).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::body::{self, Check, Disposition, Returned, Stage};
use crate::envelope::{Code, Success};
use crate::flags::{self, Raw};
use crate::handoff::lock;
use crate::middleware::{self as rules, FailureKind, HostAllowList};
use crate::observe::{self, DebugLogged, Truth};
use crate::pipeline::{
    self as core, Approvals, AuditRecord, AuditValue, BodyKind, CallMachine, Env, Event, Facts, Identity, Needs,
    Observed, RawArgs, RawSent, Refusal, Rule, RuleKind, Step, Time, UrlValue, Val, Wake,
};
use crate::stored::{self, JsonDefault};

use super::calls::PyCall;
use super::envelope::{self, PyFailure as Failure};
use super::gil::GilCell;
use super::registry::{frozen_args, Admission, CoreRegistry, Frozen};
use super::tools::{classify as raised, error_failure, CoreTool};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pipeline>()?;
    m.add_class::<Call>()?;
    m.add_class::<RetryPolicy>()?;
    m.add_function(wrap_pyfunction!(canonical_args, m)?)?;
    m.add_function(wrap_pyfunction!(args_hash, m)?)?;
    m.add_function(wrap_pyfunction!(idempotency_store_key, m)?)?;
    m.add_function(wrap_pyfunction!(approval_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(url_host, m)?)?;
    m.add_function(wrap_pyfunction!(host_allow_list, m)?)?;
    m.add_function(wrap_pyfunction!(observed_level, m)?)?;
    m.add("MAX_SCOPES", rules::MAX_SCOPES)?;
    m.add("MAX_CALLS_PER_SCOPE", rules::MAX_CALLS_PER_SCOPE)?;
    for (name, v) in [
        ("STEP_DONE", STEP_DONE),
        ("STEP_RUN", STEP_RUN),
        ("STEP_APPROVE", STEP_APPROVE),
        ("STEP_SLEEP", STEP_SLEEP),
        ("STEP_WAIT", STEP_WAIT),
        ("STEP_GET", STEP_GET),
        ("STEP_SET", STEP_SET),
        ("STEP_CAS", STEP_CAS),
        ("STEP_OPEN", STEP_OPEN),
        ("STEP_RECORD", STEP_RECORD),
        ("STEP_SETTLE", STEP_SETTLE),
        ("STEP_RAISE", STEP_RAISE),
        ("STEP_AWAIT", STEP_AWAIT),
        ("STEP_FAILING", STEP_FAILING),
        ("STEP_RECORDING", STEP_RECORDING),
        ("BODY_INLINE", BodyKind::Inline as u8),
        ("BODY_ASYNC", BodyKind::Async as u8),
        ("BODY_WORKER", BodyKind::Worker as u8),
        ("BODY_TOOL", BodyKind::Tool as u8),
        ("EV_APPROVED", EV_APPROVED),
        ("EV_SLEPT", EV_SLEPT),
        ("EV_WOKEN", EV_WOKEN),
        ("EV_GOT", EV_GOT),
        ("EV_SET", EV_SET),
        ("EV_CAS", EV_CAS),
        ("EV_STORE_FAILED", EV_STORE_FAILED),
        ("EV_OPENED", EV_OPENED),
        ("EV_RECORDED", EV_RECORDED),
    ] {
        m.add(name, v)?;
    }
    Ok(())
}

pub(crate) const STEP_DONE: u8 = 0;
pub(super) const STEP_RUN: u8 = 1;
pub(super) const STEP_APPROVE: u8 = 2;
pub(super) const STEP_SLEEP: u8 = 3;
pub(super) const STEP_WAIT: u8 = 4;
pub(super) const STEP_GET: u8 = 5;
pub(super) const STEP_SET: u8 = 6;
pub(super) const STEP_CAS: u8 = 7;
pub(super) const STEP_OPEN: u8 = 8;
pub(super) const STEP_RECORD: u8 = 9;
/// The core ran a non-blocking sync body itself and it returned an awaitable: the payload is a
/// `_runner.Later`; `await payload.settle()`, then `Call.ok` / `Call.failed`.
pub(super) const STEP_SETTLE: u8 = 10;
/// The core ran a non-blocking sync body itself and it (or its output check) raised a
/// `BaseException` that is not an `Exception` and stops the process (`KeyboardInterrupt`,
/// `SystemExit`) or that the driver must see: the payload is the exception; raise it.
pub(super) const STEP_RAISE: u8 = 11;
/// The core started an `async` body itself and its first step suspended: the payload is `(tool,
/// awaiting, end, timeout_s)`, `awaiting` the rest of the body to await in the caller's task (a
/// `BodyAwait`; the awaitable `fn` returned when that is no coroutine), `end` its deadline on
/// `time.monotonic` (an awaitable result is settled within what is left of it); then
/// `Call.ok` / `Call.failed`.
pub(super) const STEP_AWAIT: u8 = 12;
/// The shared idempotency store is failing, though it raised nothing (it refused a claim after
/// claim): the payload is `(key, why)`; log it as a failing store on `key`, then
/// `feed(EV_STORE_FAILED)` (the call goes on without sharing).
pub(super) const STEP_FAILING: u8 = 13;
/// An abort's step only: the call's own record `(config, record)` is being written in a task of
/// its own, its driver's (`Call::recording`): wait for that task; the record is not emitted again.
pub(super) const STEP_RECORDING: u8 = 14;

pub(super) const EV_APPROVED: u8 = 0;
pub(super) const EV_SLEPT: u8 = 1;
pub(super) const EV_WOKEN: u8 = 2;
pub(super) const EV_GOT: u8 = 3;
pub(super) const EV_SET: u8 = 4;
pub(super) const EV_CAS: u8 = 5;
pub(super) const EV_STORE_FAILED: u8 = 6;
pub(super) const EV_OPENED: u8 = 7;
pub(super) const EV_RECORDED: u8 = 8;

/// A Python value carried by the machine (a result held for deduplication).
type V = Arc<super::gil::Held>;

// ------------------------------------------------------------------ envelopes

/// The `approval_required` envelope: `{"ok": False, "error": {"code": "approval_required",
/// "message", "tool"}}`; the message names the tool and its arguments and tells the model to
/// ask the user.
#[pyfunction]
fn approval_envelope<'py>(py: Python<'py>, tool: &str, canonical: &str) -> PyResult<Bound<'py, PyDict>> {
    let _in = super::shutdown::inside(py);
    envelope::failure(py, &Failure::approval_required(tool, canonical))
}

fn refusal_envelope<'py>(py: Python<'py>, r: &Refusal, facts: &Facts) -> PyResult<Bound<'py, PyDict>> {
    envelope::failure(py, &r.failure(facts.name.as_deref().unwrap_or(""), &facts.canonical))
}

/// The error code of an envelope dict a handler answered, as text (None: it has none; see
/// `Code::of_envelope`).
fn code_text(env: &Bound<'_, PyDict>) -> Option<String> {
    env.get_item("error")
        .ok()
        .flatten()
        .and_then(|e| e.get_item("code").ok())
        .map(|c| c.to_string())
}

/// The failure of a body that raised `exc`, with its code, as an envelope; an exception too
/// broken to describe (its attributes raise) is described by its type's name alone.
fn failure_envelope<'py>(
    py: Python<'py>,
    name: &str,
    exc: &Bound<'py, PyAny>,
    core: Option<&Bound<'py, CoreTool>>,
) -> PyResult<(Code, Bound<'py, PyDict>)> {
    match error_failure(py, name, exc, core) {
        Ok(described) => Ok(described),
        Err(_) => {
            let qualname = exc.get_type().qualname().ok().map(|q| q.to_string());
            let f = Failure::undescribable(name, qualname.as_deref());
            Ok((f.code.clone(), envelope::failure(py, &f)?))
        }
    }
}

fn internal_envelope<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
    envelope::failure(py, &Failure::lost_state(name))
}

// ------------------------------------------------------------------ arguments

/// `(canonical JSON text, args_hash)` of a call's arguments (a mapping, JSON text or None).
/// JSON text that does not parse is hashed as it is; a mapping that is not JSON is hashed by
/// its `repr` (such a call is rejected by validation anyway), one that cannot even be printed
/// by a placeholder naming its type (see [`raw_canonical`]). Raises only a stop
/// (`KeyboardInterrupt`, `SystemExit`) that reading or printing them raised.
#[pyfunction]
pub(crate) fn canonical_args(args: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    let _in = super::shutdown::inside(args.py());
    let canonical = raw_canonical(args)?;
    let hash = rules::args_hash(&canonical);
    Ok((canonical, hash))
}

/// The canonical text of a call's raw arguments `args` (see `core::raw_canonical`,
/// `core::held_canonical`): what reading or printing them raised is raised only when it
/// propagates (a stop).
fn raw_canonical(args: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = args.cast::<PyString>() {
        let text = text.to_string_lossy(); // a lone surrogate (not JSON) as U+FFFD
        return Ok(core::raw_canonical(RawArgs::Text(&text)));
    }
    if args.is_none() {
        return Ok(core::raw_canonical(RawArgs::Absent));
    }
    let py = args.py();
    core::held_canonical(
        || super::args::canonical_text(args),
        || Ok(args.repr()?.to_string_lossy().into_owned()),
        || args.get_type().qualname().ok().map(|q| q.to_string()),
        |e| super::drive::propagates(py, e),
    )
}

/// The audit record's `args_hash` of canonical JSON text (as `canonical_args` gives it).
#[pyfunction]
fn args_hash(canonical: &str) -> String {
    rules::args_hash(canonical)
}

/// The key under which a shared store keeps the result of a side-effecting call.
#[pyfunction]
fn idempotency_store_key(scope: &str, name: &str, canonical: &str) -> String {
    rules::store_key(scope, name, canonical)
}

/// The host of an absolute URL as the egress check sees it (lowercase, no port), or None.
#[pyfunction]
fn url_host(url: &str) -> Option<String> {
    rules::url_host(url)
}

/// The entries of an egress allow-list as the check reads them (lowercase, no brackets or final
/// dot; `*.x` for subdomain-only entries; blanks dropped), exact ones first.
#[pyfunction]
fn host_allow_list(py: Python<'_>, allow: Vec<String>) -> Vec<String> {
    let _in = super::shutdown::inside(py);
    HostAllowList::new(allow).entries()
}

// ------------------------------------------------------------------ audit

const DEBUG: u8 = 10;

/// `audit_log.isEnabledFor(DEBUG)`, answered from the logger's own cache when it holds the answer
/// (logging clears that cache on every level change, `logging.disable` included), so a level
/// set at run time is followed without a call per tool call.
///
/// Where dict versions can be read (see `super::watch`), an answer read from the logger's dict
/// and its cache (both plain `bool`s) is kept while those two dicts are unchanged.
pub(super) fn debug_logged(py: Python<'_>, h: &Helpers) -> PyResult<bool> {
    /// The logger's dict and its cache as they were, and the answer they gave.
    static KEPT: GilCell<Option<(super::watch::Seen, super::watch::Seen, bool)>> = GilCell::new(None);
    let log = h.audit_log.bind(py);
    if let Some(cache) = &h.audit_cache {
        let (cache, dict) = (cache.bind(py), h.audit_log_dict.as_ref().map(|d| d.bind(py)));
        if let (Some(d), Some(Some((at_dict, at_cache, answer)))) = (dict, KEPT.with(py, |k| *k)) {
            if at_dict.holds(d) && at_cache.holds(cache) {
                return Ok(answer);
            }
        }
        let disabled = match dict.map(|d| d.get_item(intern!(py, "disabled"))).transpose()?.flatten() {
            Some(d) => d,
            None => log.getattr(intern!(py, "disabled"))?,
        };
        let truth = |v: &Bound<'_, PyAny>| -> PyResult<Truth> {
            Ok(match v.cast::<PyBool>() {
                Ok(b) => Truth::Bool(b.is_true()), // bool cannot be subclassed
                Err(_) => Truth::Other(v.is_truthy()?),
            })
        };
        let cached = || cache.get_item(DEBUG)?.map(|known| truth(&known)).transpose();
        match observe::debug_logged(truth(&disabled)?, cached)? {
            DebugLogged::Known { enabled, keep } => {
                if let Some(d) = dict.filter(|_| keep && super::watch::on(py)) {
                    KEPT.with(py, |k| {
                        *k = Some((super::watch::Seen::of(d), super::watch::Seen::of(cache), enabled))
                    });
                }
                return Ok(enabled);
            }
            DebugLogged::Ask => {}
        }
    }
    log.call_method1(intern!(py, "isEnabledFor"), (DEBUG,))?.is_truthy()
}

/// How the audit rule `config` observes a call in `ctx` (see `Observed::of`): a record is read
/// when `config.sink` is set, the audit log is enabled at DEBUG or `ctx.trace` is set; a span is
/// opened too while a tracer provider is installed. Read per call (a sink, a log level or a
/// tracer provider set later is followed).
fn observed_by<'py>(py: Python<'py>, config: &Bound<'py, PyAny>, ctx: &Bound<'py, PyAny>) -> PyResult<Observed> {
    let h = helpers(py)?;
    Observed::asked(
        super::observe::tracing_on(py)?,
        || Ok(!config.getattr(intern!(py, "sink"))?.is_none()),
        || debug_logged(py, h),
        || Ok(!ctx.is_none() && traces(py, ctx)?),
    )
}

/// Whether `ctx.trace` is set (see `Observed::traced`; its failure is logged by `observe::traced`
/// when the record goes to it).
fn traces(py: Python<'_>, ctx: &Bound<'_, PyAny>) -> PyResult<bool> {
    let read = ctx
        .getattr_opt(intern!(py, "trace"))
        .map(|trace| trace.map(|t| !t.is_none()));
    Observed::traced(read, |e| super::drive::propagates(py, e))
}

/// How the audit rule `config` (an `audit()` middleware) observes a call in `ctx`: 0 nobody reads
/// its record, 1 a record (a sink, the `agentkit_tools.audit` log at DEBUG, `ctx.trace`), 2 a
/// record and an OpenTelemetry span (a tracer provider is installed).
#[pyfunction]
fn observed_level(py: Python<'_>, config: &Bound<'_, PyAny>, ctx: &Bound<'_, PyAny>) -> PyResult<u8> {
    let _in = super::shutdown::inside(py);
    Ok(observed_by(py, config, ctx)?.level())
}

// ------------------------------------------------------------------ retry

thread_local! {
    /// The draws of `RetryPolicy.decide` and `.delay_s` (the pipeline's own retries draw from
    /// its own generator), with `handoff::forks` when it was seeded.
    static RNG: std::cell::RefCell<(u64, fastrand::Rng)> =
        std::cell::RefCell::new((super::handoff::forks(), fastrand::Rng::new()));
}

/// `f` of this thread's generator for `RetryPolicy`, seeded anew from this process's entropy in
/// the child of a fork (its copy would draw what the parent's draws).
fn with_rng<R>(f: impl FnOnce(&mut fastrand::Rng) -> R) -> R {
    RNG.with(|r| {
        let mut r = r.borrow_mut();
        let forks = super::handoff::forks();
        if r.0 != forks {
            *r = (forks, fastrand::Rng::with_seed(super::memory::next_seed()));
        }
        f(&mut r.1)
    })
}

/// Retry settings and the classification of failures by exception type.
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct RetryPolicy {
    policy: rules::RetryPolicy,
    transient: Py<PyTuple>,
}

impl RetryPolicy {
    fn classify(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<FailureKind> {
        classify(py, exc, Some(self.transient.bind(py)))
    }
}

fn classify(py: Python<'_>, exc: &Bound<'_, PyAny>, transient: Option<&Bound<'_, PyTuple>>) -> PyResult<FailureKind> {
    Ok(raised(py, exc, transient)?.failure_kind())
}

#[pymethods]
impl RetryPolicy {
    /// `max_attempts` ≥ 1 (the first call included); `base_s`, `cap_s` ≥ 0 seconds; `transient`:
    /// extra exception classes to retry. Raises `ValueError` on out-of-range values.
    #[new]
    #[pyo3(signature = (max_attempts=3, base_s=0.5, cap_s=30.0, transient=None))]
    fn new(
        py: Python<'_>,
        max_attempts: u32,
        base_s: f64,
        cap_s: f64,
        transient: Option<Bound<'_, PyTuple>>,
    ) -> PyResult<Self> {
        let _in = super::shutdown::inside(py);
        let policy = rules::RetryPolicy::new(max_attempts, base_s, cap_s).map_err(PyValueError::new_err)?;
        Ok(Self {
            policy,
            transient: transient.unwrap_or_else(|| PyTuple::empty(py)).unbind(),
        })
    }

    #[getter]
    fn max_attempts(&self) -> u32 {
        self.policy.max_attempts
    }

    /// After failed attempt `attempt` (1-based) with `exc`: `(kind, delay_s)` where `kind` is
    /// `"transient"`, `"deadline"` or `"permanent"` and `delay_s` the full-jitter wait before
    /// the next attempt, or None when the call is not retried.
    fn decide(
        &self,
        py: Python<'_>,
        exc: &Bound<'_, PyAny>,
        retry_safe: bool,
        attempt: u32,
    ) -> PyResult<(&'static str, Option<f64>)> {
        let _in = super::shutdown::inside(py);
        let kind = self.classify(py, exc)?;
        let delay = with_rng(|r| self.policy.decide(kind, retry_safe, attempt, r));
        Ok((kind.as_str(), delay))
    }

    /// A full-jitter delay in seconds, uniform in `[0, min(cap_s, base_s * 2**(attempt-1)))`.
    fn delay_s(&self, attempt: u32) -> f64 {
        with_rng(|r| self.policy.delay_s(attempt, r))
    }

    /// The upper bound of the delay after attempt `attempt`, in seconds.
    fn ceiling_s(&self, attempt: u32) -> f64 {
        self.policy.ceiling_s(attempt)
    }
}

// ------------------------------------------------------------------ the pipeline

/// Python helpers the binding calls back (imported once); the relay (`super::relay`) uses them too.
pub(super) struct Helpers {
    read_only: Py<PyAny>,
    pub(super) monotonic: Py<PyAny>,
    pub(super) get_running_loop: Py<PyAny>,
    frozen_dict: Py<PyType>,
    frozen_list: Py<PyType>,
    /// `builtins.getattr`: `getattr(obj, name, None)` reads an attribute that is usually absent
    /// without raising (and formatting) an `AttributeError` first.
    pub(super) getattr: Py<PyAny>,
    /// The audit logger (`agentkit_tools.audit`) and its `isEnabledFor` cache (a dict logging
    /// clears, never replaces, on every level change).
    pub(super) audit_log: Py<PyAny>,
    audit_cache: Option<Py<PyDict>>,
    /// The audit logger's instance dict when it is exactly a `logging.Logger` (its `disabled`
    /// read there; a logger class of the host's own is asked).
    audit_log_dict: Option<Py<PyDict>>,
    /// `_runner.Later` (an awaitable a non-blocking sync body returned, to settle),
    /// `errors.ToolTimeoutError` and `inspect.isawaitable`: a body the core calls itself.
    later: Py<PyAny>,
    pub(super) timeout_error: Py<PyAny>,
    isawaitable: Py<PyAny>,
    /// What stepping an `async` body needs (see `super::awaiting`): `contextvars.copy_context`,
    /// `types.CoroutineType`, `asyncio.isfuture`, and the swap of the
    /// loop's current task (`asyncio.tasks._swap_current_task` on Python 3.12+, else
    /// `current_task` / `_leave_task` / `_enter_task`).
    pub(super) copy_context: Py<PyAny>,
    /// `contextvars.Context.run`, unbound: a non-blocking sync body's call in a copy of the
    /// caller's context (no bound method made per call).
    pub(super) context_run: Py<PyAny>,
    pub(super) coroutine: Py<PyAny>,
    pub(super) coro_send: Py<PyAny>,
    pub(super) coro_throw: Py<PyAny>,
    /// The relay's: `_runner.hold_clean_up`, `asyncio.CancelledError`, `_runner._as_coro`.
    pub(super) hold_clean_up: Py<PyAny>,
    pub(super) cancelled_error: Py<PyAny>,
    pub(super) as_coro: Py<PyAny>,
    pub(super) isfuture: Py<PyAny>,
    /// What awaiting a body in the caller's task needs (`super::awaiting`): `asyncio.Future`,
    /// `_runner.BodyFailed`, `_runner.bodies_of`, and whether every task counts its cancellation
    /// requests (3.11+; see `deadline::counts_cancels`).
    pub(super) future: Py<PyAny>,
    pub(super) body_failed: Py<PyAny>,
    pub(super) bodies_of: Py<PyAny>,
    pub(super) counts_cancels: bool,
    swap_task: Option<Py<PyAny>>,
    /// `asyncio.tasks._current_tasks`, the loop -> current task dict, where there is no swap.
    current_tasks: Option<Py<PyDict>>,
    pub(super) current_task: Py<PyAny>,
    enter_task: Py<PyAny>,
    leave_task: Py<PyAny>,
    /// `tools.FunctionTool` and its own `check_output` (see `Flags`).
    function_tool: Py<PyAny>,
    check_output: Py<PyAny>,
    /// `types.FunctionType` and `tools._ARGS_UNPACKED` (see `Call::seal_for`); the code of
    /// `invoke_plain` among them (`fn(args, ctx)` is `func(**args)`: see `Call::call_body`).
    function_type: Py<PyAny>,
    args_unpacked: Vec<Py<PyAny>>,
    invoke_plain: Py<PyAny>,
    /// The dicts of the classes of `FunctionTool` (its `__mro__` as defined, read once; `object`
    /// left out: nothing can be set on it), what each defines now (see `Helpers::class_attr`).
    class_dicts: Vec<Py<PyDict>>,
}

impl Helpers {
    /// `FunctionTool.<name>` as its classes define it now (a method unbound), found in their
    /// dicts without making an `AttributeError`; None when none defines it.
    fn class_attr<'py>(&self, py: Python<'py>, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
        for d in &self.class_dicts {
            if let Some(v) = d.bind(py).get_item(name)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
}

static HELPERS: PyOnceLock<Helpers> = PyOnceLock::new();

pub(super) fn helpers(py: Python<'_>) -> PyResult<&Helpers> {
    HELPERS.get_or_try_init(py, || {
        let mw = py.import("agentkit_tools.middleware")?;
        let audit_log = py
            .import("logging")?
            .call_method1("getLogger", ("agentkit_tools.audit",))?;
        let frozen = py.import("agentkit_tools.frozen")?;
        Ok(Helpers {
            read_only: mw.getattr("call_is_read_only")?.unbind(),
            monotonic: py.import("time")?.getattr("monotonic")?.unbind(),
            get_running_loop: py.import("asyncio")?.getattr("get_running_loop")?.unbind(),
            frozen_dict: frozen.getattr("FrozenDict")?.cast_into::<PyType>()?.unbind(),
            frozen_list: frozen.getattr("FrozenList")?.cast_into::<PyType>()?.unbind(),
            getattr: py.import("builtins")?.getattr("getattr")?.unbind(),
            audit_cache: audit_log
                .getattr_opt("_cache")?
                .and_then(|c| c.cast_into::<PyDict>().ok())
                .map(Bound::unbind),
            audit_log_dict: {
                let log = &audit_log;
                if log.get_type().is(py.import("logging")?.getattr("Logger")?) {
                    log.getattr("__dict__")?.cast_into::<PyDict>().ok().map(Bound::unbind)
                } else {
                    None
                }
            },
            audit_log: audit_log.clone().unbind(),
            later: py.import("agentkit_tools._runner")?.getattr("Later")?.unbind(),
            timeout_error: py
                .import("agentkit_tools.errors")?
                .getattr("ToolTimeoutError")?
                .unbind(),
            isawaitable: py.import("inspect")?.getattr("isawaitable")?.unbind(),
            copy_context: py.import("contextvars")?.getattr("copy_context")?.unbind(),
            context_run: py.import("contextvars")?.getattr("Context")?.getattr("run")?.unbind(),
            coroutine: py.import("types")?.getattr("CoroutineType")?.unbind(),
            coro_send: py.import("types")?.getattr("CoroutineType")?.getattr("send")?.unbind(),
            coro_throw: py.import("types")?.getattr("CoroutineType")?.getattr("throw")?.unbind(),
            hold_clean_up: py.import("agentkit_tools._runner")?.getattr("hold_clean_up")?.unbind(),
            cancelled_error: py.import("asyncio")?.getattr("CancelledError")?.unbind(),
            as_coro: py.import("agentkit_tools._runner")?.getattr("_as_coro")?.unbind(),
            isfuture: py.import("asyncio")?.getattr("isfuture")?.unbind(),
            future: py.import("asyncio")?.getattr("Future")?.unbind(),
            body_failed: py.import("agentkit_tools._runner")?.getattr("BodyFailed")?.unbind(),
            bodies_of: py.import("agentkit_tools._runner")?.getattr("bodies_of")?.unbind(),
            counts_cancels: py.import("asyncio")?.getattr("Task")?.hasattr("cancelling")?,
            swap_task: py
                .import("asyncio.tasks")?
                .getattr_opt("_swap_current_task")?
                .map(Bound::unbind),
            current_tasks: match py.import("asyncio.tasks")?.getattr_opt("_swap_current_task")? {
                Some(_) => None,
                None => py
                    .import("asyncio.tasks")?
                    .getattr_opt("_current_tasks")?
                    .and_then(|d| d.cast_into::<PyDict>().ok())
                    .map(Bound::unbind),
            },
            current_task: py.import("asyncio.tasks")?.getattr("current_task")?.unbind(),
            enter_task: py.import("asyncio.tasks")?.getattr("_enter_task")?.unbind(),
            leave_task: py.import("asyncio.tasks")?.getattr("_leave_task")?.unbind(),
            function_tool: py.import("agentkit_tools.tools")?.getattr("FunctionTool")?.unbind(),
            check_output: py
                .import("agentkit_tools.tools")?
                .getattr("FunctionTool")?
                .getattr("check_output")?
                .unbind(),
            function_type: py.import("types")?.getattr("FunctionType")?.unbind(),
            args_unpacked: py
                .import("agentkit_tools.tools")?
                .getattr("_ARGS_UNPACKED")?
                .extract()?,
            invoke_plain: {
                let codes = py.import("agentkit_tools.tools")?.getattr("_ARGS_UNPACKED")?;
                let mut plain = None;
                for c in codes.try_iter()? {
                    let c = c?;
                    if c.getattr("co_name")?.extract::<String>()? == "invoke_plain" {
                        plain = Some(c.unbind());
                    }
                }
                plain.ok_or_else(|| PyRuntimeError::new_err("tools._ARGS_UNPACKED lacks invoke_plain"))?
            },
            class_dicts: {
                // A class's `__dict__` is a read-only view; the dict it shows is what the garbage
                // collector sees it refer to.
                let referents = py.import("gc")?.getattr("get_referents")?;
                let mut dicts = Vec::new();
                for cls in py
                    .import("agentkit_tools.tools")?
                    .getattr("FunctionTool")?
                    .getattr("__mro__")?
                    .try_iter()?
                {
                    let cls = cls?.cast_into::<PyType>()?;
                    if cls.is(py.get_type::<PyAny>()) {
                        continue; // `object`: nothing can be set on it
                    }
                    let view = cls.getattr("__dict__")?;
                    let dict = referents.call1((&view,))?.get_item(0)?.cast_into::<PyDict>()?;
                    if dict.len() != view.len()? {
                        return Err(PyRuntimeError::new_err(
                            "a class's __dict__ does not show the dict it refers to",
                        ));
                    }
                    dicts.push(dict.unbind());
                }
                dicts
            },
        })
    })
}

/// The Invoker's built-in rules of one chain segment, compiled (see `crate::pipeline`), with
/// the state they share across calls.
///
/// `rules`: `(kind, config)` pairs in chain order, `kind` one of `"audit"` (config: has
/// `sink` and `emit(record, ctx)`), `"approval"` (`approver`), `"repeat_guard"`
/// (`limit`), `"idempotency"` (`store`, `lease_s`), `"retry"` (`policy`: a `RetryPolicy`,
/// `breaker_threshold`, `breaker_cooldown_s`), `"timeout"` (`default_s`), `"egress"`
/// (`allowed`). `default_scope`: the scope of calls without `ctx.run_id`. `frozen`: the body
/// gets deep-frozen arguments (the Invoker) or a fresh dict (`dispatch`).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct Pipeline {
    inner: GilCell<core::Pipeline<V>>,
    configs: Vec<Py<PyAny>>,
    transient: Option<Py<PyTuple>>,
    /// The indices of the audit rules (their configs are asked how a call is observed).
    audits: Vec<usize>,
    needs: Needs,
    /// A rule reads the wall clock (an idempotency rule with a shared store: its leases).
    unix: bool,
    default_scope: std::sync::Arc<str>,
    frozen: bool,
    /// Names of tools whose sync body is called on the caller's thread (as `non_blocking`).
    inline: std::collections::HashSet<String>,
    /// Futures of calls waiting for an identical call in flight, by ticket.
    waiters: Mutex<HashMap<u64, Py<PyAny>>>,
    /// `handoff::forks` when the core's generator was seeded (see `core::Pipeline::reseed`).
    forks: std::sync::atomic::AtomicU64,
}

impl Pipeline {
    /// `Pipeline.begin` (see there): the call's state, the step's code and its payload.
    pub(super) fn admit<'py>(
        slf: &Bound<'py, Self>,
        registry: &Bound<'py, CoreRegistry>,
        call: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        here: bool,
    ) -> PyResult<(Call, u8, Bound<'py, PyAny>)> {
        Self::admit_with(slf, registry, call, ctx, here, here, None)
    }

    /// In the child of a fork (any: see `handoff::forks`), the core's generator is seeded anew
    /// from this process's entropy before it draws here.
    #[inline]
    fn draw_in_this_process(&self, py: Python<'_>) {
        use std::sync::atomic::Ordering::Relaxed;
        let forks = super::handoff::forks();
        // (its state in use: seeded at the next call)
        if self.forks.load(Relaxed) != forks
            && self
                .inner
                .with_pure(py, |p| p.reseed(super::memory::next_seed()))
                .is_ok()
        {
            self.forks.store(forks, Relaxed);
        }
    }

    /// What the calls of a turn in `ctx` share, read once for the turn (see `Shared`).
    pub(super) fn shared(slf: &Bound<'_, Self>, ctx: &Bound<'_, PyAny>) -> Shared {
        let py = slf.py();
        let p = slf.get();
        let scope = scope_in(py, ctx, &p.default_scope).ok();
        let observed = if p.needs.audit {
            p.audits
                .iter()
                .map(|&i| observed_by(py, p.configs[i].bind(py), ctx).ok())
                .collect::<Option<Vec<_>>>()
        } else {
            Some(Vec::new())
        };
        Shared { scope, observed }
    }

    /// `admit` for a turn's call (no `here`): a call whose first step is to run its `async`
    /// body is begun as `Begun::Body` (no payload made; its arguments stay a plain dict of
    /// frozen values: the turn's relay starts the body through `Call::start_body`, which seals
    /// them only for a body that does not unpack them). Any other step comes with its payload,
    /// the arguments sealed, as from `admit`.
    pub(super) fn admit_unsealed<'py>(
        slf: &Bound<'py, Self>,
        registry: &Bound<'py, CoreRegistry>,
        call: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        shared: &Shared,
    ) -> PyResult<Begun<'py>> {
        let (mut c, code, payload) = Self::admit_with(slf, registry, call, ctx, false, true, Some(shared))?;
        Ok(match c.lent.take() {
            Some(limit) => Begun::Body(c, limit),
            None => Begun::Step(c, code, payload),
        })
    }

    fn admit_with<'py>(
        slf: &Bound<'py, Self>,
        registry: &Bound<'py, CoreRegistry>,
        call: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        here: bool,
        unsealed: bool,
        shared: Option<&Shared>,
    ) -> PyResult<(Call, u8, Bound<'py, PyAny>)> {
        let py = slf.py();
        let this = slf.get();
        if this.needs.draws() {
            this.draw_in_this_process(py);
        }
        let admitted = (|| -> PyResult<Admitted<'py>> {
            let reg = registry.borrow();
            let admission = if this.frozen {
                // The core calls the body itself (`here`), or a turn's relay does
                // (`unsealed`): a plain dict of frozen values, sealed only if something else
                // gets it; else the driver gets the arguments sealed.
                let h = helpers(py)?;
                let (fdict, flist) = (h.frozen_dict.bind(py), h.frozen_list.bind(py));
                match reg.admit_frozen(py, call, fdict, flist, !unsealed)? {
                    Frozen::Plain { entry, args, key } => {
                        return Ok(Admitted::Tool {
                            tool: entry.tool.bind(py).clone(),
                            args,
                            sealed: !unsealed,
                            core: Some(entry.core.bind(py).clone()),
                            canonical: Identity::Key(key),
                        })
                    }
                    Frozen::Other(admission) => admission,
                }
            } else {
                reg.admit_call(py, call)?
            };
            Ok(match admission {
                Admission::Tool { entry, args, checked } => {
                    let (body_args, canonical) = if this.frozen {
                        let h = helpers(py)?;
                        let frozen = frozen_args(
                            py,
                            entry,
                            &args,
                            &checked,
                            h.frozen_dict.bind(py),
                            h.frozen_list.bind(py),
                            !unsealed,
                        )?;
                        (frozen, Identity::Of(checked.value))
                    } else {
                        (
                            entry.core.get().kwargs(py, &args, &checked)?.into_any(),
                            Identity::FromArgs,
                        )
                    };
                    Admitted::Tool {
                        tool: entry.tool.bind(py).clone(),
                        args: body_args,
                        sealed: !this.frozen || !unsealed,
                        core: Some(entry.core.bind(py).clone()),
                        canonical,
                    }
                }
                Admission::Refused { env, code, raw } => Admitted::Rejected {
                    env,
                    code: Some(code),
                    raw,
                    name: None,
                    args: None,
                    call_id: None,
                },
            })
        })();
        let parts = match admitted {
            Ok(parts) => parts,
            // A stop raised while the call was read (its arguments' containers) is no malformed call.
            Err(exc) if super::drive::propagates(py, &exc) => return Err(exc),
            Err(exc) => {
                let msg = exc.value(py).str().map_or_else(|_| String::new(), |s| s.to_string());
                let f = Failure::invalid_call(&msg);
                let env = envelope::failure(py, &f)?;
                Admitted::Rejected {
                    env,
                    code: Some(f.code),
                    raw: None,
                    name: None,
                    args: None,
                    call_id: None,
                }
            }
        };
        let parts = match parts {
            Admitted::Rejected { env, code, raw, .. } if call.is_instance_of::<PyDict>() => {
                let (name, args) = call_parts(call);
                Admitted::Rejected {
                    env,
                    code,
                    raw,
                    name,
                    args,
                    call_id: call_id(call),
                }
            }
            other => other,
        };
        let mut c = Call::new(slf, parts, call, ctx, shared)?;
        if here && c.tool.is_some() {
            c.here = true;
            c.ctx = Some(ctx.clone().unbind());
        }
        c.lend = unsealed && !here;
        let started = c.start(py);
        c.lend = false;
        let (code, payload) = started?;
        Ok((c, code, payload))
    }
}

/// The conversation of a call in `ctx` (see `core::scope_of`): its `run_id` as text, read now;
/// what reading it raises propagates.
fn scope_in(py: Python<'_>, ctx: &Bound<'_, PyAny>, default_scope: &Arc<str>) -> PyResult<Arc<str>> {
    let run_id = (!ctx.is_none())
        .then(|| ctx.getattr_opt(intern!(py, "run_id")))
        .transpose()?
        .flatten()
        .filter(|r| !r.is_none())
        .map(|r| r.str())
        .transpose()?;
    let run_id = run_id.as_ref().map(|r| r.to_string_lossy());
    Ok(core::scope_of(run_id.as_deref(), default_scope))
}

#[pymethods]
impl Pipeline {
    // The garbage collector sees the rules' configurations (an approver or store may refer back
    // to the Invoker) and the futures of waiting calls.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for c in &self.configs {
            visit.call(c)?;
        }
        visit.call(&self.transient)?;
        if let Ok(waiters) = self.waiters.try_lock() {
            for f in waiters.values() {
                visit.call(f)?;
            }
        }
        Ok(())
    }

    #[new]
    #[pyo3(signature = (rules, default_scope, frozen=true, inline=None))]
    fn new(
        py: Python<'_>,
        rules: Vec<(String, Bound<'_, PyAny>)>,
        default_scope: String,
        frozen: bool,
        inline: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let _in = super::shutdown::inside(py);
        let mut compiled = Vec::with_capacity(rules.len());
        let mut configs = Vec::with_capacity(rules.len());
        let mut transients = Vec::with_capacity(rules.len());
        for (kind, cfg) in rules {
            // The retry rule's extra transient classes.
            let mut transient = None;
            let rule = match RuleKind::of(&kind).map_err(PyValueError::new_err)? {
                RuleKind::Audit => Rule::Audit,
                RuleKind::Approval => Rule::Approval {
                    approver: !cfg.getattr("approver")?.is_none(),
                },
                RuleKind::Repeat => Rule::Repeat {
                    limit: cfg.getattr("limit")?.extract()?,
                },
                RuleKind::Idempotency => Rule::Idempotency {
                    shared: !cfg.getattr("store")?.is_none(),
                    lease_s: cfg.getattr("lease_s")?.extract()?,
                },
                RuleKind::Retry => {
                    let policy = cfg.getattr("policy")?.cast_into::<RetryPolicy>()?;
                    transient = Some(policy.get().transient.clone_ref(py));
                    let threshold: Option<u32> = cfg.getattr("breaker_threshold")?.extract()?;
                    let cooldown: f64 = cfg.getattr("breaker_cooldown_s")?.extract()?;
                    Rule::Retry {
                        policy: policy.get().policy,
                        breaker: threshold.map(|t| (t, cooldown)),
                    }
                }
                RuleKind::Timeout => Rule::Timeout {
                    default_s: cfg.getattr("default_s")?.extract()?,
                },
                RuleKind::Egress => Rule::Egress {
                    allow: HostAllowList::new(cfg.getattr("allowed")?.extract::<Vec<String>>()?),
                },
            };
            transients.push(transient);
            compiled.push(rule);
            configs.push(cfg.unbind());
        }
        let transient = core::classifying_rule(&compiled).and_then(|i| transients.swap_remove(i));
        let needs = Needs::of(&compiled);
        let audits = core::audit_rules(&compiled);
        let unix = needs.wall_clock();
        Ok(Self {
            inner: GilCell::new(core::Pipeline::new(compiled)),
            configs,
            transient,
            audits,
            needs,
            unix,
            default_scope: default_scope.into(),
            frozen,
            inline: inline.into_iter().flatten().collect(),
            waiters: Mutex::new(HashMap::new()),
            forks: super::handoff::forks().into(),
        })
    }

    /// Admit `call` against `registry` (a `CoreRegistry`: lookup and validation) and start it:
    /// `(call_state, code, payload)`. Raises nothing for a malformed call (it is answered with
    /// an `invalid_call` envelope). `here`: the core calls a non-blocking sync body itself, and
    /// takes an `async` body's first step (see `Call::run_here`, `Call::start_here`), at every
    /// attempt of the call; a call answered at once is then returned as its envelope itself (a
    /// `dict`), not as `(None, STEP_DONE, envelope)`.
    #[pyo3(signature = (registry, call, ctx, here=false))]
    pub(super) fn begin<'py>(
        slf: &Bound<'py, Self>,
        registry: &Bound<'py, CoreRegistry>,
        call: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        here: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let (c, code, payload) = Self::admit(slf, registry, call, ctx, here)?;
        if code == STEP_DONE {
            // A call answered already needs no state of its own on the Python side.
            return if here {
                Ok(payload)
            } else {
                (None::<Call>, code, payload).into_pyobject(py).map(Bound::into_any)
            };
        }
        (c, code, payload).into_pyobject(py).map(Bound::into_any)
    }

    /// Start a call a user middleware passed on (a `ToolCall`): `(call_state, code, payload)`.
    pub(super) fn begin_call<'py>(
        slf: &Bound<'py, Self>,
        tc: &Bound<'py, PyAny>,
    ) -> PyResult<(Call, u8, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let tool = tc.getattr(intern!(py, "tool"))?;
        let parts = if tool.is_none() {
            let env = tc.getattr(intern!(py, "rejection"))?.cast_into::<PyDict>()?;
            let name = tc.getattr(intern!(py, "name"))?;
            Admitted::Rejected {
                env,
                code: None,
                raw: None,
                name: (!name.is_none()).then_some(name),
                args: Some(tc.getattr(intern!(py, "raw_args"))?),
                call_id: Some(tc.getattr(intern!(py, "call_id"))?),
            }
        } else {
            let core = tc.getattr(intern!(py, "core"))?;
            Admitted::Tool {
                tool,
                args: tc.getattr(intern!(py, "args"))?,
                sealed: true,
                core: core.cast_into::<CoreTool>().ok(),
                canonical: Identity::Text(tc.getattr(intern!(py, "canonical"))?.extract()?),
            }
        };
        let call = tc.getattr(intern!(py, "call"))?;
        let ctx = tc.getattr(intern!(py, "ctx"))?;
        let mut c = Call::new(slf, parts, &call, &ctx, None)?;
        c.tc = Some(tc.clone().unbind());
        let (code, payload) = c.start(py)?;
        Ok((c, code, payload))
    }

    /// Forget the repeat counts and cached results of conversation `scope`.
    fn forget(&self, py: Python<'_>, scope: &str) -> PyResult<()> {
        let _in = super::shutdown::inside(py);
        self.inner.with_pure(py, |p| p.forget(scope))
    }

    /// `(repeat keys, idempotency entries, breakers)`: sizes, for tests and monitoring.
    fn sizes(&self, py: Python<'_>) -> PyResult<(usize, usize, usize)> {
        let _in = super::shutdown::inside(py);
        self.inner.with_pure(py, |p| p.sizes())
    }

    /// How many conversations are held (at most `MAX_SCOPES`).
    fn scopes(&self, py: Python<'_>) -> PyResult<usize> {
        self.inner.with_pure(py, |p| p.scopes())
    }

    /// The configuration objects of the rules, in order.
    #[getter]
    fn configs(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let _in = super::shutdown::inside(py);
        self.configs.iter().map(|c| c.clone_ref(py)).collect()
    }
}

/// What the calls of one turn share, read once for the turn: the scope (the context's `run_id`,
/// else the default) and how each audit rule observes the calls (by the rules' order in
/// `Pipeline::audits`). None where reading it failed: each call then reads it itself (and fails
/// as a call alone does).
pub(super) struct Shared {
    scope: Option<Arc<str>>,
    observed: Option<Vec<Observed>>,
}

enum Admitted<'py> {
    /// `sealed` false: `args` is a plain dict of frozen values, for a wrapper that only unpacks
    /// it (see `Call::sealed_args`).
    Tool {
        tool: Bound<'py, PyAny>,
        args: Bound<'py, PyAny>,
        sealed: bool,
        core: Option<Bound<'py, CoreTool>>,
        canonical: Identity,
    },
    /// `code`: the envelope's error code when known (else read from it); `raw`: the arguments
    /// as read, when exactly what was sent (their canonical text is the raw arguments').
    Rejected {
        env: Bound<'py, PyDict>,
        code: Option<Code>,
        raw: Option<serde_json::Value>,
        name: Option<Bound<'py, PyAny>>,
        args: Option<Bound<'py, PyAny>>,
        call_id: Option<Bound<'py, PyAny>>,
    },
}

/// The name (a string) and arguments of a call, read through the core's call-shape rule.
fn call_parts<'py>(call: &Bound<'py, PyAny>) -> (Option<Bound<'py, PyAny>>, Option<Bound<'py, PyAny>>) {
    let Ok(d) = call.cast::<PyDict>() else {
        return (None, None);
    };
    match crate::calls::parts(&PyCall(d.clone())) {
        Ok(p) => (p.name.filter(|n| n.is_instance_of::<PyString>()), p.args),
        Err(_) => (None, None),
    }
}

fn call_id<'py>(call: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    let d = call.cast::<PyDict>().ok()?;
    crate::calls::id_of(&PyCall(d.clone())).ok().flatten()
}

/// Whether the host approved this call already: the call dict's `"approved": True` (a key of
/// the call, never of the model's arguments), or `ctx.approvals` (a collection: a bare string is
/// not one, `in` would match substrings) holding the tool name or the call id. A collection that
/// cannot hold them (`TypeError`) approves nothing; other errors fail the call.
fn host_approved(call: &Bound<'_, PyAny>, ctx: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    let py = call.py();
    let flagged = match call.cast::<PyDict>() {
        Ok(d) => crate::drive::approves(d.get_item(intern!(py, "approved"))?.and_then(|v| bool_of(&v))),
        Err(_) => false,
    };
    let held = std::cell::OnceCell::new();
    let approvals = || {
        let Some(a) = ctx.getattr_opt(intern!(py, "approvals"))? else {
            return Ok(Approvals::Absent);
        };
        let kind = if a.is_instance_of::<PyString>() || a.is_instance_of::<PyBytes>() {
            Approvals::Text
        } else if !a.is_truthy()? {
            Approvals::Empty
        } else {
            Approvals::Collection
        };
        let _ = held.set(a);
        Ok(kind)
    };
    let holds = |v: &Bound<'_, PyAny>| held.get().map_or(Ok(false), |a: &Bound<'_, PyAny>| a.contains(v));
    core::host_approved(
        flagged,
        approvals,
        || holds(PyString::new(py, name).as_any()),
        || match call_id(call) {
            Some(cid) if !cid.is_none() => holds(&cid).map(Some),
            _ => Ok(None),
        },
        |e| e.is_instance_of::<PyTypeError>(py),
    )
}

/// The flags a `ToolFlags` keeps, in its order: interned once.
static NAMES: PyOnceLock<[Py<PyString>; 7]> = PyOnceLock::new();

fn names(py: Python<'_>) -> &[Py<PyString>; 7] {
    NAMES.get_or_init(py, || flags::NAMES.map(|n| PyString::intern(py, n).unbind()))
}

/// The flags a `ToolFlags` keeps, in its order.
fn kept_names(py: Python<'_>) -> [&Bound<'_, PyString>; 7] {
    let n = names(py);
    std::array::from_fn(|i| n[i].bind(py))
}

/// What a call's admission reads of an exact `FunctionTool` (see `Flags`): kept with the tool's
/// `CoreTool` and used while Python's attribute access on the tool (`getattr(tool, name)`: a
/// data descriptor of its class first, then its instance `__dict__`, then its class) answers the
/// very objects they were read from: where dict versions can be read (see `ToolView`), while the
/// tool's instance dict and its classes' dicts are unchanged, with nothing read at all; else
/// compared by identity at each call (the flags its rules read: a call whose rules read only some
/// answers only those from here). A change however written
/// (assignment, `object.__setattr__`, `vars(t)[...] =`, `t.__dict__.update`, `del`, a key of the
/// dict's own that now equals the name, a property put on the class) is followed at the next call:
/// what is kept is only what was made of those objects (their conversion). Taken only when each
/// of these flags is a plain value (exactly a `bool`, `None`, a `str`, an `int` or a `float`):
/// converting it runs no code, so converting the same object again would answer the same. It
/// holds strong references to those values (an object's address is reused once it is freed), and
/// only to them: objects of these types refer to nothing, so no reference cycle goes through a
/// snapshot and the garbage collector need not see it. The tool's `fn`, `_is_async`,
/// `non_blocking`, its output check and read-only hook are read where they are used, at every
/// call, unless its `ToolView` answers them (checked at each answer). A Python object of its own,
/// so that a call holds it by a reference count the interpreter lock guards (no atomic operation,
/// as an `Arc` would take, per reference taken or let go).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub(crate) struct ToolFlags {
    values: [Py<PyAny>; 7],
    flags: flags::ToolFlags,
    /// What else a call reads of the tool, while its instance dict and its classes' dicts are
    /// unchanged (see `ToolView`); None where dict versions cannot be read or the tool does not
    /// qualify.
    view: Option<ToolView>,
}

/// Names of what `ToolView` answers besides the flags: `fn`, `_is_async`, `non_blocking`,
/// `_output`, and the two the instance dict must not hold, `check_output` and
/// `is_read_only_call`.
static VIEW_NAMES: PyOnceLock<[Py<PyString>; 6]> = PyOnceLock::new();

fn view_names(py: Python<'_>) -> [&Bound<'_, PyString>; 6] {
    let n = VIEW_NAMES.get_or_init(py, || {
        [
            "fn",
            "_is_async",
            "non_blocking",
            "_output",
            "check_output",
            "is_read_only_call",
        ]
        .map(|n| PyString::intern(py, n).unbind())
    });
    std::array::from_fn(|i| n[i].bind(py))
}

/// What `getattr` answers for every attribute a call reads of an exact `FunctionTool` (its
/// flags, `fn`, `_is_async`, `non_blocking`, `_output`, its read-only hook and output check), kept
/// while the tool's instance dict and the dicts of `FunctionTool`'s classes are the very dicts,
/// unchanged, they were when it was made (`super::watch`: no attribute is read to know it; any
/// change however written, to any key, is a change). Made only when `getattr` answers each of
/// them from the instance dict without running code: each is in the instance dict (its keys all
/// exact `str`), the classes define no data descriptor for any of them (see `ClassView`), and
/// neither the dict nor the classes hold `is_read_only_call` or another `check_output` than
/// `FunctionTool`'s own. Then each answer follows from those dicts alone, so unchanged dicts
/// answer the same.
#[derive(Clone)]
struct ToolView {
    dict: super::watch::Seen,
    classes: Arc<[super::watch::Seen]>,
    /// A function tool (`flags::function`; `fn` is read from the dict where it is called: it is
    /// not kept here).
    function: bool,
    is_async: bool,
    non_blocking: bool,
    /// `_output` is None: `check_output` returns the result as it is.
    plain_output: bool,
}

impl ToolView {
    /// The view of `d`, the instance dict of an exact `FunctionTool` whose flags `flags` has
    /// just read with `getattr`; None when it does not qualify (see `ToolView`).
    fn of(py: Python<'_>, d: &Bound<'_, PyDict>, flags: &[Py<PyAny>; 7]) -> PyResult<Option<Self>> {
        if !super::watch::on(py) {
            return Ok(None);
        }
        let Some(classes) = class_view(py)? else {
            return Ok(None);
        };
        let seen = super::watch::Seen::of(d);
        // Exact `str` keys only: looking a name up runs no code, and no key can come to equal
        // a name without a change of the dict.
        if d.keys().iter().any(|k| !k.is_exact_instance_of::<PyString>()) {
            return Ok(None);
        }
        for (name, v) in kept_names(py).into_iter().zip(flags) {
            if !d.get_item(name)?.is_some_and(|x| x.is(v)) {
                return Ok(None);
            }
        }
        let [fn_, is_async, non_blocking, output, check_output, hook] = view_names(py);
        let (Some(f), Some(a), Some(nb), Some(o)) = (
            d.get_item(fn_)?,
            d.get_item(is_async)?,
            d.get_item(non_blocking)?,
            d.get_item(output)?,
        ) else {
            return Ok(None);
        };
        if d.contains(check_output)? || d.contains(hook)? {
            return Ok(None);
        }
        // `_is_async`'s truth value, when it is one that cannot change.
        let Some(is_async) = flags::is_async(&raw(&a)) else {
            return Ok(None);
        };
        let view = ToolView {
            dict: seen,
            classes,
            // (`check_output` is `FunctionTool`'s own: set)
            function: flags::function(|| Ok::<_, PyErr>(!f.is_none()), || Ok(true))?,
            is_async,
            non_blocking: flags::non_blocking(&raw(&nb)),
            plain_output: o.is_none(),
        };
        // Nothing above changed it (no code ran).
        Ok(super::watch::Seen::of(d).eq(&seen).then_some(view))
    }

    /// The tool's instance dict `d` and its classes' dicts are as they were.
    #[inline]
    fn holds(&self, py: Python<'_>, d: &Bound<'_, PyDict>) -> bool {
        self.dict.holds(d) && class_dicts_hold(py, &self.classes)
    }
}

/// The dicts of `FunctionTool`'s classes are as `seen`.
#[inline]
fn class_dicts_hold(py: Python<'_>, seen: &[super::watch::Seen]) -> bool {
    let Ok(h) = helpers(py) else { return false };
    h.class_dicts.len() == seen.len() && h.class_dicts.iter().zip(seen).all(|(d, s)| s.holds(d.bind(py)))
}

/// The last look at `FunctionTool`'s classes (see `class_view`).
static CLASSES: Mutex<Option<(Arc<[super::watch::Seen]>, bool)>> = Mutex::new(None);

/// The dicts of `FunctionTool`'s classes as they are now, when a `ToolView` may be made under
/// them: they define no data descriptor (a `__set__` or `__delete__`) for any name a view
/// answers, no `is_read_only_call`, and `check_output` is `FunctionTool`'s own. Looked at again
/// only when one of those dicts changed.
fn class_view(py: Python<'_>) -> PyResult<Option<Arc<[super::watch::Seen]>>> {
    let h = helpers(py)?;
    let now: Vec<super::watch::Seen> = h
        .class_dicts
        .iter()
        .map(|d| super::watch::Seen::of(d.bind(py)))
        .collect();
    if let Some((seen, clean)) = &*lock(&CLASSES) {
        if **seen == *now {
            return Ok(clean.then(|| seen.clone()));
        }
    }
    // A `__set__` or a `__delete__` (one slot).
    let data_descriptor = |v: &Bound<'_, PyAny>| {
        // SAFETY: a live type; the slot is only compared.
        !unsafe { pyo3::ffi::PyType_GetSlot(v.get_type().as_ptr().cast(), pyo3::ffi::Py_tp_descr_set) }.is_null()
    };
    let mut clean = h
        .class_attr(py, intern!(py, "check_output"))?
        .is_some_and(|c| c.is(h.check_output.bind(py)))
        && h.class_attr(py, intern!(py, "is_read_only_call"))?.is_none();
    for name in kept_names(py).into_iter().chain(view_names(py).into_iter().take(4)) {
        if h.class_attr(py, name)?.is_some_and(|v| data_descriptor(&v)) {
            clean = false;
        }
    }
    let after: Vec<super::watch::Seen> = h
        .class_dicts
        .iter()
        .map(|d| super::watch::Seen::of(d.bind(py)))
        .collect();
    if after != now {
        return Ok(None);
    }
    let seen: Arc<[super::watch::Seen]> = now.into();
    *lock(&CLASSES) = Some((seen.clone(), clean));
    Ok(clean.then_some(seen))
}

impl ToolFlags {
    /// The flags of `tool` as `getattr` answers them now, or which one cannot be kept (see
    /// `Kept::Unkept`): a flag that `getattr` does not answer (raises) or that is not a plain
    /// value. `Flags` then reads the tool as `getattr` does, raising what it raises.
    fn read(py: Python<'_>, tool: &Bound<'_, PyAny>) -> PyResult<Result<Self, Kept>> {
        let names = kept_names(py);
        let mut values: Vec<Bound<'_, PyAny>> = Vec::with_capacity(names.len());
        let mut raws: Vec<Raw> = Vec::with_capacity(names.len());
        for (index, name) in names.into_iter().enumerate() {
            let Some(v) = attr(tool, name)? else {
                return Ok(Err(Kept::Unkept { index, at: 0 }));
            };
            // Each in turn: the first that cannot be kept ends the reading.
            let r = raw(&v);
            if !flags::keeps(index, &r) {
                return Ok(Err(Kept::Unkept {
                    index,
                    at: v.as_ptr() as usize,
                }));
            }
            values.push(v);
            raws.push(r);
        }
        let unkept = |index| Kept::Unkept { index, at: 0 };
        let Ok(raws) = <[Raw; 7]>::try_from(raws) else {
            return Ok(Err(unkept(0)));
        };
        Ok(flags::ToolFlags::of(raws).map_err(unkept).and_then(|flags| {
            Ok(ToolFlags {
                flags,
                view: None,
                values: values
                    .iter()
                    .map(|v| v.clone().unbind())
                    .collect::<Vec<_>>()
                    .try_into()
                    .map_err(|_| unkept(0))?,
            })
        }))
    }

    /// `getattr(tool, name)` still answers the very object each flag of `read` (a bit per flag,
    /// in `kept_names` order) was read from (else false: the flags are read again). The flags
    /// outside `read` are not checked, so not answered from here (see `Flags::of_tool`).
    fn holds(&self, py: Python<'_>, tool: &Bound<'_, PyAny>, read: u8) -> PyResult<bool> {
        for (i, (name, v)) in kept_names(py).iter().zip(&self.values).enumerate() {
            if read & (1 << i) != 0 && !attr(tool, name)?.is_some_and(|a| a.is(v)) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A flag's value as the core reads it (`flags::Raw`): no code of the value's own runs.
/// `v` when it is a `bool` (None: anything else).
#[inline]
pub(super) fn bool_of(v: &Bound<'_, PyAny>) -> Option<bool> {
    v.cast::<PyBool>().ok().map(|b| b.is_true()) // bool cannot be subclassed
}

fn raw(v: &Bound<'_, PyAny>) -> Raw {
    if v.is_none() {
        Raw::None
    } else if let Ok(b) = v.cast::<PyBool>() {
        Raw::Bool(b.is_true()) // bool cannot be subclassed
    } else if v.is_exact_instance_of::<PyFloat>() || v.is_exact_instance_of::<PyInt>() {
        Raw::Number(v.extract::<f64>().ok())
    } else if v.is_exact_instance_of::<PyString>() {
        v.extract::<String>().map_or(Raw::Other, Raw::Text)
    } else {
        Raw::Other
    }
}

/// `getattr(tool, name)` (Python's attribute access: the generic lookup of `tool`'s type, its
/// data descriptors before the instance dict), None when it raises an `Exception`: that error is
/// dropped, as the flags are then read by `Flags` itself, which raises it where the call needs
/// that flag. Anything else (`KeyboardInterrupt`, `SystemExit`) propagates.
fn attr<'py>(tool: &Bound<'py, PyAny>, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    match tool.getattr(name) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyException>(tool.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What `Flags::of_tool` found of a tool the last time (kept on its `CoreTool`).
#[derive(Default)]
pub(crate) enum Kept {
    #[default]
    Nothing,
    Flags(Py<ToolFlags>),
    /// `getattr` of flag `kept_names()[index]` raised (`at` 0) or answered the object at address
    /// `at`, not a plain value: while it still answers the same, the flags are read, not kept,
    /// without trying to keep them first. Only the address is kept (no
    /// reference): another object at that address later only has its flags read at each call.
    Unkept {
        index: usize,
        at: usize,
    },
}

/// Attribute access on instances of `ty` is Python's generic lookup (`object.__getattribute__`):
/// the class defines neither `__getattribute__` nor `__getattr__` (either replaces the type's
/// slot), so what its classes' dicts and an instance dict hold is what `getattr` answers.
fn generic_getattr(ty: &Bound<'_, PyType>) -> bool {
    // SAFETY: a live heap type; the slot is only compared.
    let slot = unsafe { pyo3::ffi::PyType_GetSlot(ty.as_ptr().cast(), pyo3::ffi::Py_tp_getattro) };
    slot == pyo3::ffi::PyObject_GenericGetAttr as *mut std::ffi::c_void
}

/// The instance `__dict__` of `tool` (`object.__dict__`'s answer: made when it has none yet).
fn instance_dict<'py>(tool: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    // SAFETY: `tool` is a live object; the result is a new reference or NULL with an exception set.
    let d = unsafe {
        Bound::from_owned_ptr_or_err(
            tool.py(),
            pyo3::ffi::PyObject_GenericGetDict(tool.as_ptr(), std::ptr::null_mut()),
        )
    }?;
    Ok(d.cast_into::<PyDict>().ok())
}

/// A tool's attributes as `getattr` reads them, at each call (a flag set on the tool between
/// calls, or between attempts of one call, is followed). An instance of exactly `FunctionTool`
/// (a dataclass: every field is set in the instance's `__dict__`, and its class defines no
/// descriptor for them) is read from that dict, the class (its classes' own dicts, as it has
/// them now) consulted only for a name the dict lacks, for what `getattr` would find there
/// without running code (its read-only hook and output check); its flags, `fn`, `_is_async`,
/// `non_blocking` and `_output` are read as `getattr` reads them, the flags its admission reads
/// kept (`ToolFlags`) while `getattr` answers the same objects.
struct Flags<'py> {
    tool: Bound<'py, PyAny>,
    dict: Option<Bound<'py, PyDict>>,
    /// `fn` as read the first time (`Flags::fn_attr`): one `Flags` lives for one step of the
    /// core, in which no code of the tool's runs before its body is called.
    body: std::cell::OnceCell<Option<Bound<'py, PyAny>>>,
    /// The admission's flags, still what `getattr` answers: those answers come from it.
    snap: Option<Bound<'py, ToolFlags>>,
    /// Flags whose `ToolView` answers the rest while it holds (checked at each answer).
    view: Option<Bound<'py, ToolFlags>>,
}

impl<'py> Flags<'py> {
    fn of(py: Python<'py>, tool: &Bound<'py, PyAny>) -> PyResult<Self> {
        let ty = tool.get_type();
        let dict = if ty.is(helpers(py)?.function_tool.bind(py)) && generic_getattr(&ty) {
            instance_dict(tool)?
        } else {
            None
        };
        Ok(Flags {
            tool: tool.clone(),
            dict,
            body: std::cell::OnceCell::new(),
            snap: None,
            view: None,
        })
    }

    /// The flags of `tool` at its admission under the rules `n`, the snapshot kept on its `core`
    /// used while `getattr` still answers what the flags those rules read were read from (else
    /// read again, and kept when it can be): only those flags are asked of it.
    fn of_tool(
        py: Python<'py>,
        tool: &Bound<'py, PyAny>,
        core: Option<&Bound<'py, CoreTool>>,
        n: Needs,
    ) -> PyResult<Self> {
        let mut flags = Self::of(py, tool)?;
        if let (Some(d), Some(core)) = (flags.dict.clone(), core) {
            // In use (another thread reading or replacing it while Python code it ran let the
            // interpreter lock go, or a flag's own code calling the tool): this call reads the
            // tool itself.
            if let Some(kept) = core.get().flags.with(py, |slot| flags.keep(py, &d, slot, n)) {
                kept?;
            }
        }
        Ok(flags)
    }

    /// `of_tool` with the snapshot kept on the tool's `CoreTool` (`slot`), `d` its instance dict.
    fn keep(&mut self, py: Python<'py>, d: &Bound<'py, PyDict>, slot: &mut Kept, n: Needs) -> PyResult<()> {
        let tool = &self.tool;
        match &*slot {
            // Its dicts unchanged: nothing is read.
            Kept::Flags(s) if s.get().view.as_ref().is_some_and(|v| v.holds(py, d)) => {
                let s = s.bind(py);
                self.snap = Some(s.clone());
                self.view = Some(s.clone());
                return Ok(());
            }
            // No view (the tool does not qualify): the flags its rules read, compared.
            Kept::Flags(s) if s.get().view.is_none() && s.get().holds(py, tool, flags::read_by(n))? => {
                self.snap = Some(s.bind(py).clone());
                return Ok(());
            }
            Kept::Unkept { index, at }
                if attr(tool, kept_names(py)[*index])?.map_or(0, |v| v.as_ptr() as usize) == *at =>
            {
                return Ok(())
            }
            _ => {}
        }
        *slot = match ToolFlags::read(py, tool)? {
            Ok(mut s) => {
                s.view = ToolView::of(py, d, &s.values)?;
                let s = Bound::new(py, s)?;
                if s.get().view.is_some() {
                    self.view = Some(s.clone());
                }
                self.snap = Some(s.clone());
                Kept::Flags(s.unbind())
            }
            Err(unkept) => unkept,
        };
        Ok(())
    }

    /// The flags of the call's tool: its instance dict as `Call::new` found it (the object
    /// stays the same through the call), else read.
    fn of_call(py: Python<'py>, c: &Call) -> PyResult<Self> {
        let tool = c
            .tool
            .as_ref()
            .map_or_else(|| py.None().into_bound(py), |t| t.bind(py).clone());
        match &c.flags {
            Some(d) => Ok(Flags {
                tool,
                dict: Some(d.bind(py).clone()),
                body: std::cell::OnceCell::new(),
                snap: None,
                view: c.kept.as_ref().map(|k| k.bind(py).clone()),
            }),
            None => Self::of(py, &tool),
        }
    }

    /// The admission's flags (see `snap`).
    #[inline]
    fn snapshot(&self) -> Option<&ToolFlags> {
        self.snap.as_ref().map(|s| s.get())
    }

    /// `tool.name` as a string (its `AttributeError` when it has none).
    fn name(&self) -> PyResult<String> {
        if let Some(s) = self.snapshot() {
            return Ok(s.flags.name.clone());
        }
        let py = self.tool.py();
        match self.get(intern!(py, "name"))? {
            Some(n) => n.extract(),
            None => self.tool.getattr(intern!(py, "name"))?.extract(),
        }
    }

    fn requires_approval(&self) -> PyResult<bool> {
        match self.snapshot() {
            Some(s) => Ok(s.flags.requires_approval),
            None => self.truthy(intern!(self.tool.py(), "requires_approval")),
        }
    }

    fn side_effecting(&self) -> PyResult<bool> {
        match self.snapshot() {
            Some(s) => Ok(s.flags.side_effecting),
            None => self.truthy(intern!(self.tool.py(), "side_effecting")),
        }
    }

    fn idempotent(&self) -> PyResult<bool> {
        match self.snapshot() {
            Some(s) => Ok(s.flags.idempotent),
            None => self.truthy(intern!(self.tool.py(), "idempotent")),
        }
    }

    /// See `flags::undeclared`.
    fn undeclared(&self) -> PyResult<bool> {
        if let Some(s) = self.snapshot() {
            return Ok(s.flags.undeclared);
        }
        let py = self.tool.py();
        Ok(self
            .get(intern!(py, "effects_declared"))?
            .is_some_and(|v| flags::undeclared(&raw(&v))))
    }

    /// The tool's own deadline (see `flags::timeout_s`): `timeout_s` as a float.
    fn timeout_s(&self) -> PyResult<Option<f64>> {
        if let Some(s) = self.snapshot() {
            return Ok(s.flags.timeout_s);
        }
        let number = match self.get(intern!(self.tool.py(), "timeout_s"))? {
            Some(t) if !t.is_none() => t.extract::<f64>().ok(),
            _ => None,
        };
        Ok(flags::timeout_s(number))
    }

    /// The name of the argument holding the URL the tool reaches (see `flags::url_arg_of`):
    /// `url_arg` when true, as a string (what reading its truth value or converting it raises
    /// fails the call).
    fn url_arg(&self) -> PyResult<Option<String>> {
        if let Some(s) = self.snapshot() {
            return Ok(s.flags.url_arg.clone());
        }
        let arg = self.get(intern!(self.tool.py(), "url_arg"))?;
        let truth = arg.as_ref().map_or(Ok(false), |a| a.is_truthy());
        flags::url_arg_of(truth, || arg.as_ref().map_or(Ok(String::new()), |a| a.extract()))
    }

    /// A function tool (see `flags::function`).
    fn function(&self) -> PyResult<bool> {
        if let Some(v) = self.viewed() {
            return Ok(v.function);
        }
        let set = |v: Option<Bound<'_, PyAny>>| v.is_some_and(|v| !v.is_none());
        flags::function(
            || Ok(set(self.fn_attr()?)),
            || Ok(set(self.get_unbound(intern!(self.tool.py(), "check_output"))?)),
        )
    }

    fn is_async(&self) -> PyResult<bool> {
        if let Some(v) = self.viewed() {
            return Ok(v.is_async);
        }
        match self.get(intern!(self.tool.py(), "_is_async"))? {
            Some(v) => v.is_truthy(),
            None => Ok(false),
        }
    }

    /// See `flags::non_blocking`.
    fn non_blocking(&self) -> PyResult<bool> {
        if let Some(v) = self.viewed() {
            return Ok(v.non_blocking);
        }
        let py = self.tool.py();
        Ok(self
            .get(intern!(py, "non_blocking"))?
            .is_some_and(|v| flags::non_blocking(&raw(&v))))
    }

    /// `getattr(tool, "is_read_only_call", None)`, answered from the instance dict when no class
    /// of `FunctionTool` defines such a hook.
    fn read_only_hook(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.viewed().is_some() {
            return Ok(None);
        }
        let h = helpers(py)?;
        let name = intern!(py, "is_read_only_call");
        if let Some(d) = &self.dict {
            if h.class_attr(py, name)?.is_none() {
                return Ok(d.get_item(name)?.filter(|hook| !hook.is_none()));
            }
        }
        let hook = h.getattr.bind(py).call1((&self.tool, name, py.None()))?;
        Ok((!hook.is_none()).then_some(hook))
    }

    /// The tool's `ToolView`, when its dicts are still as it found them (checked now: a body,
    /// a host callback or another thread may have changed them since).
    #[inline]
    fn viewed(&self) -> Option<&ToolView> {
        let v = self.view.as_ref()?.get().view.as_ref()?;
        v.holds(self.tool.py(), self.dict.as_ref()?).then_some(v)
    }

    /// `getattr(tool, name)`, None when it has none.
    fn get(&self, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.tool.getattr_opt(name)
    }

    /// `get`, where an attribute the instance dict lacks is read from the class as it is there
    /// (a method unbound: enough to tell whether it is set).
    fn get_unbound(&self, name: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = self.tool.py();
        match &self.dict {
            Some(d) => match d.get_item(name)? {
                Some(v) => Ok(Some(v)),
                None => helpers(py)?.class_attr(py, name),
            },
            None => self.tool.getattr_opt(name),
        }
    }

    /// `getattr(tool, "fn", None)`, read once.
    fn fn_attr(&self) -> PyResult<Option<Bound<'py, PyAny>>> {
        if let Some(f) = self.body.get() {
            return Ok(f.clone());
        }
        let py = self.tool.py();
        let f = match (self.viewed(), &self.dict) {
            (Some(_), Some(d)) => d.get_item(intern!(py, "fn"))?,
            _ => self.get(intern!(py, "fn"))?,
        };
        Ok(self.body.get_or_init(|| f).clone())
    }

    /// `tool.fn` (its `AttributeError` when it has none).
    fn body(&self) -> PyResult<Bound<'py, PyAny>> {
        let py = self.tool.py();
        match self.fn_attr()? {
            Some(f) => Ok(f),
            None => self.tool.getattr(intern!(py, "fn")),
        }
    }

    /// `bool(getattr(tool, name, False))`; a flag that raises while read fails the call.
    fn truthy(&self, name: &Bound<'py, PyString>) -> PyResult<bool> {
        match self.get(name)? {
            Some(v) => v.is_truthy(),
            None => Ok(false),
        }
    }

    /// `FunctionTool.check_output` would return the result as it is (no output schema, the
    /// method neither replaced on the instance nor on the class): the call can be skipped. Read
    /// when the body has returned (a body may set its tool's output check).
    fn plain_output(&self, py: Python<'py>) -> PyResult<bool> {
        if let Some(v) = self.viewed() {
            return Ok(v.plain_output);
        }
        let Some(d) = &self.dict else { return Ok(false) };
        let name = intern!(py, "check_output");
        if d.contains(name)? || !self.get(intern!(py, "_output"))?.is_some_and(|o| o.is_none()) {
            return Ok(false);
        }
        let h = helpers(py)?;
        Ok(h.class_attr(py, name)?.is_some_and(|c| c.is(h.check_output.bind(py))))
    }
}

/// What became of a body the core called itself (`Call::run_here`).
enum Here<'py> {
    /// Its checked result, and the clock read when it returned when that reading is still now
    /// (nothing ran since but the core's own work: its result needed no check).
    Ok(Bound<'py, PyAny>, Option<Instant>),
    /// What it (or its deadline, or its output check) raised, as a failure of the attempt.
    Failed(Bound<'py, PyAny>),
    /// A step only the driver performs (`STEP_SETTLE`, `STEP_RAISE`).
    Out(u8, Bound<'py, PyAny>),
}

/// What becomes of `e`, raised at `stage` of a body the core runs itself (see
/// `body::disposition`).
fn here_raised(py: Python<'_>, stage: Stage, e: PyErr) -> Here<'_> {
    let exc = e.into_value(py).into_bound(py).into_any();
    match body::disposition(stage, super::awaiting::thrown(&exc)) {
        Disposition::Fails => Here::Failed(exc),
        Disposition::FailsAsRuntimeError => {
            let err = PyRuntimeError::new_err(body::STOP_ITERATION_MESSAGE);
            err.set_cause(py, Some(PyErr::from_value(exc)));
            Here::Failed(err.into_value(py).into_bound(py).into_any())
        }
        Disposition::Raised => Here::Out(STEP_RAISE, exc),
    }
}

/// Make `task` the current task of loop `lp` (as `asyncio.tasks._swap_current_task`); returns
/// the previous one (None when there was none; `task` None leaves none current).
pub(super) fn swap_task<'py>(
    py: Python<'py>,
    h: &Helpers,
    lp: &Bound<'py, PyAny>,
    task: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(swap) = &h.swap_task {
        return swap.bind(py).call1((lp, task));
    }
    if let Some(current) = &h.current_tasks {
        // What `_swap_current_task` does, on the dict `current_task` / `_enter_task` /
        // `_leave_task` keep (Python 3.10 and 3.11).
        let current = current.bind(py);
        let prev = current.get_item(lp)?.unwrap_or_else(|| py.None().into_bound(py));
        if task.is_none() {
            if !prev.is_none() {
                current.del_item(lp)?;
            }
        } else {
            current.set_item(lp, task)?;
        }
        return Ok(prev);
    }
    let prev = h.current_task.bind(py).call1((lp,))?;
    if !prev.is_none() {
        h.leave_task.bind(py).call1((lp, &prev))?;
    }
    if !task.is_none() {
        h.enter_task.bind(py).call1((lp, task))?;
    }
    Ok(prev)
}

/// `args` (a plain dict of frozen values, see `registry::frozen_args`) as a `FrozenDict`.
fn seal<'py>(py: Python<'py>, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    match args.cast::<PyDict>() {
        Ok(d) => super::frozen::seal(d, helpers(py)?.frozen_dict.bind(py)),
        Err(_) => Ok(args.clone()),
    }
}

/// A result that is never awaitable (`inspect.isawaitable`, an ABC check, is skipped for it).
fn plain(v: &Bound<'_, PyAny>) -> bool {
    v.is_none()
        || v.is_exact_instance_of::<PyString>()
        || v.is_exact_instance_of::<PyList>()
        || v.is_exact_instance_of::<PyDict>()
        || v.is_exact_instance_of::<PyBool>()
        || v.is_exact_instance_of::<PyInt>()
        || v.is_exact_instance_of::<PyFloat>()
        || v.is_exact_instance_of::<PyTuple>()
        || v.is_exact_instance_of::<PyBytes>()
}

/// What `Pipeline::admit_unsealed` began: a call whose first step is to run its `async` body
/// (its limit in seconds), or a call and its first step (code and payload).
pub(super) enum Begun<'py> {
    Body(Call, Option<f64>),
    Step(Call, u8, Bound<'py, PyAny>),
}

/// One call going through a pipeline (see `Pipeline.begin`). Feed it the outcome of each step.
#[pyclass(module = "agentkit_tools._core")]
pub struct Call {
    pipe: Py<Pipeline>,
    /// (Boxed: a call's state is moved several times between its admission and its task.)
    m: Box<CallMachine<V>>,
    tool: Option<Py<PyAny>>,
    args: Option<Py<PyAny>>,
    core: Option<Py<CoreTool>>,
    call_id: Option<Py<PyAny>>,
    /// The envelope the call ends with when the machine says `Failed`/`Rejected`/`Passed`.
    held: Option<Py<PyDict>>,
    /// The `ToolCall` of a segment after a user middleware.
    tc: Option<Py<PyAny>>,
    /// The core calls the body itself (`Pipeline.begin(..., here=True)`), with the call's
    /// context `ctx`.
    here: bool,
    ctx: Option<Py<PyAny>>,
    /// `args` may go to anyone: false while it is a plain dict only a wrapper that unpacks it
    /// may get (`Call::sealed_args` makes it a `FrozenDict` first).
    sealed: bool,
    /// The instance dict of the tool (an exact `FunctionTool`), see `Flags`.
    flags: Option<Py<PyDict>>,
    /// During `Pipeline::admit_unsealed`'s start: a first step that runs the `async` body is
    /// not made into a payload; its limit is kept in `lent` instead (see there).
    lend: bool,
    lent: Option<Option<f64>>,
    /// The clock read when the call started, until an event is fed in: a body run in that same
    /// step (by `advance`, before anything but the core's own work) is timed from it.
    began: Option<Instant>,
    /// Its flags at admission with their `ToolView` (see `Flags::viewed`).
    kept: Option<Py<ToolFlags>>,
}

/// What `Facts::read_admitted` asks of an admitted call, read from its tool (`flags`), the call
/// dict, its context and its arguments (sealed first when the tool's read-only hook gets them).
struct Reads<'a, 'py> {
    flags: &'a Flags<'py>,
    call: &'a Bound<'py, PyAny>,
    ctx: &'a Bound<'py, PyAny>,
    args: std::cell::RefCell<Bound<'py, PyAny>>,
    sealed: std::cell::Cell<bool>,
    /// The tool's read-only hook, as `has_read_only_hook` found it.
    hook: std::cell::OnceCell<Option<Bound<'py, PyAny>>>,
}

impl<'py> core::AdmittedReads for Reads<'_, 'py> {
    type Error = PyErr;
    type Value = Bound<'py, PyAny>;

    fn name(&self) -> PyResult<String> {
        self.flags.name()
    }

    fn requires_approval(&self) -> PyResult<bool> {
        self.flags.requires_approval()
    }

    fn host_approved(&self, name: &str) -> PyResult<bool> {
        host_approved(self.call, self.ctx, name)
    }

    fn has_read_only_hook(&self) -> PyResult<bool> {
        let hook = self.flags.read_only_hook(self.ctx.py())?;
        Ok(self.hook.get_or_init(|| hook).is_some())
    }

    fn ask_read_only_hook(&self) -> PyResult<bool> {
        let py = self.ctx.py();
        if !self.sealed.get() {
            let sealed = seal(py, &self.args.borrow())?;
            *self.args.borrow_mut() = sealed;
            self.sealed.set(true);
        }
        let tool = &self.flags.tool;
        helpers(py)?
            .read_only
            .bind(py)
            .call1((tool, &*self.args.borrow()))?
            .is_truthy()
    }

    fn side_effecting(&self) -> PyResult<bool> {
        self.flags.side_effecting()
    }

    fn idempotent(&self) -> PyResult<bool> {
        self.flags.idempotent()
    }

    fn undeclared(&self) -> PyResult<bool> {
        self.flags.undeclared()
    }

    fn timeout_s(&self) -> PyResult<Option<f64>> {
        self.flags.timeout_s()
    }

    /// `ctx.deadline - time.monotonic()`, with Python's own errors for a bad value.
    fn deadline_left(&self) -> PyResult<Option<f64>> {
        let (py, ctx) = (self.ctx.py(), self.ctx);
        if ctx.is_none() {
            return Ok(None);
        }
        match ctx.getattr_opt(intern!(py, "deadline"))?.filter(|d| !d.is_none()) {
            Some(d) => Ok(Some(d.sub(super::deadline::now(py, helpers(py)?)?)?.extract()?)),
            None => Ok(None),
        }
    }

    fn url_arg(&self) -> PyResult<Option<String>> {
        self.flags.url_arg()
    }

    fn url_value(&self, arg: &str) -> UrlValue<Bound<'py, PyAny>> {
        match self.args.borrow().get_item(arg) {
            Err(_) => UrlValue::Missing,
            Ok(v) if v.is_none() => UrlValue::Null,
            Ok(v) => UrlValue::Set(v),
        }
    }

    fn url_text(&self, v: Bound<'py, PyAny>) -> PyResult<String> {
        Ok(match v.cast::<PyString>() {
            Ok(s) => s.to_str()?.to_owned(),
            Err(_) => v.str()?.to_string(),
        })
    }
}

impl Call {
    /// The step this call's machine handed out last was never performed (see
    /// `CallMachine::unperformed`).
    pub(super) fn unperformed(&mut self) {
        self.m.unperformed();
    }

    /// The record this call's machine handed out last is written in a task of its own, the
    /// driver's (see `CallMachine::recording`).
    pub(super) fn recording(&mut self) {
        self.m.recording();
    }

    fn new<'py>(
        pipe: &Bound<'py, Pipeline>,
        parts: Admitted<'py>,
        call: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        shared: Option<&Shared>,
    ) -> PyResult<Self> {
        let py = pipe.py();
        let p = pipe.get();
        let n = p.needs;
        // The scope is read for every call (a context whose run_id fails fails every call), once
        // for a turn's calls.
        let mut f = Facts::in_scope(match shared.and_then(|s| s.scope.as_ref()) {
            Some(scope) => scope.clone(),
            None => scope_in(py, ctx, &p.default_scope)?,
        });
        // What the call state holds besides its machine (made last, with the facts).
        let (mut tool_held, mut args_held, mut core_held, mut call_id_held, mut env_held) =
            (None, None, None, None, None);
        let (mut call_sealed, mut flags_dict, mut kept) = (true, None, None);
        let observed = n.audit && {
            let known = shared.and_then(|s| s.observed.as_deref());
            f.observe(&p.audits, p.configs.len(), |nth, i| match known {
                Some(o) => Ok(o[nth]),
                None => observed_by(py, p.configs[i].bind(py), ctx),
            })?
        };
        match parts {
            Admitted::Rejected {
                env,
                code,
                raw,
                name,
                args,
                call_id,
            } => {
                let code = code.unwrap_or_else(|| Code::of_envelope(code_text(&env)));
                let sent = match (&raw, &args) {
                    (Some(value), _) => RawSent::Parsed(value),
                    (None, Some(a)) => RawSent::Held(a),
                    (None, None) => RawSent::Absent,
                };
                let name = name.as_ref().map(|n| n.to_string());
                f.rejected(&n, code, name, observed, sent, raw_canonical)?;
                call_id_held = call_id.map(Bound::unbind);
                env_held = Some(env.unbind());
            }
            Admitted::Tool {
                tool,
                args,
                sealed,
                core,
                canonical,
            } => {
                // Read here, no registry borrowed: what reading a flag raises is the call's failure.
                let mut flags = Flags::of_tool(py, &tool, core.as_ref(), n)?;
                let reads = Reads {
                    flags: &flags,
                    call,
                    ctx,
                    args: std::cell::RefCell::new(args),
                    sealed: std::cell::Cell::new(sealed),
                    hook: std::cell::OnceCell::new(),
                };
                f.read_admitted(&n, &reads, core::mono_now)?;
                let (args, sealed) = (reads.args.into_inner(), reads.sealed.get());
                f.identify(&n, canonical, observed, || raw_canonical(&args))?;
                kept = flags.view.take().map(Bound::unbind);
                flags_dict = flags.dict.map(Bound::unbind);
                tool_held = Some(tool.unbind());
                args_held = Some(args.unbind());
                core_held = core.map(Bound::unbind);
                call_sealed = sealed;
            }
        }
        if observed && call_id_held.is_none() {
            call_id_held = call_id(call).map(Bound::unbind);
        }
        Ok(Call {
            pipe: pipe.clone().unbind(),
            m: Box::new(CallMachine::with_facts(f)),
            tool: tool_held,
            args: args_held,
            core: core_held,
            call_id: call_id_held,
            held: env_held,
            tc: None,
            here: false,
            ctx: None,
            sealed: call_sealed,
            flags: flags_dict,
            kept,
            lend: false,
            lent: None,
            began: None,
        })
    }

    fn start<'py>(&mut self, py: Python<'py>) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let at = Instant::now();
        let t = Time::at(self.pipe.get().unix, at);
        self.began = Some(at);
        let pipe = self.pipe.clone_ref(py);
        let step = pipe.get().inner.with_pure(py, |p| p.start(&mut self.m, t))?;
        self.advance(py, step)
    }

    /// Feed `ev` in, at `at` (a reading of the clock taken when the event happened, nothing run
    /// since; None: read now).
    fn feed_step(&mut self, py: Python<'_>, ev: Event<V>, at: Option<Instant>) -> PyResult<Step<V>> {
        self.began = None;
        let pipe = self.pipe.clone_ref(py);
        let t = Time::at(pipe.get().unix, at.unwrap_or_else(Instant::now));
        pipe.get().inner.with_pure(py, |p| p.feed(&mut self.m, ev, t))
    }

    fn feed_event<'py>(&mut self, py: Python<'py>, ev: Event<V>) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let step = self.feed_step(py, ev, None)?;
        self.advance(py, step)
    }

    /// The step for the driver after `step`: a non-blocking sync body the core may call itself
    /// (`Pipeline.begin(..., here=True)`) is called here, its outcome fed in, until
    /// a step that needs the driver.
    fn advance<'py>(&mut self, py: Python<'py>, mut step: Step<V>) -> PyResult<(u8, Bound<'py, PyAny>)> {
        loop {
            let Step::RunBody { timeout_s } = step else {
                return self.render(py, step);
            };
            let flags = Flags::of_call(py, self)?;
            let tool = flags.tool.clone();
            let kind = self.body_kind(py, &flags)?;
            if !kind.runs_here(self.here, timeout_s) {
                self.wake(py)?;
                return self.run_step(py, tool, timeout_s, kind);
            }
            self.wake(py)?;
            self.seal_for(py, &flags)?;
            // The call's start reading times the body when no code but the core's ran since (its
            // tool's attributes answered from its view, see `Flags`).
            let began = self.began.take().filter(|_| flags.viewed().is_some());
            let outcome = if kind == BodyKind::Inline {
                self.run_here(py, &flags, timeout_s, began)?
            } else {
                self.start_here(py, &flags, timeout_s, began)?
            };
            step = match outcome {
                Here::Ok(value, at) => self.ok_step(py, value, at)?,
                Here::Failed(exc) => self.failed_step(py, exc)?,
                Here::Out(code, payload) => return Ok((code, payload)),
            };
        }
    }

    /// The arguments as any code may get them (a `FrozenDict`, sealed now if need be).
    fn sealed_args<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let args = self
            .args
            .as_ref()
            .map_or_else(|| py.None().into_bound(py), |a| a.bind(py).clone());
        if self.sealed {
            return Ok(args);
        }
        let args = seal(py, &args)?;
        self.args = Some(args.clone().unbind());
        self.sealed = true;
        Ok(args)
    }

    /// `tool.fn(args, ctx)`; when `fn` is the wrapper `tools.from_callable` makes for a function
    /// with nothing to convert or inject (`invoke_plain`: `func(**args)`) and `func` is a Python
    /// function (its keyword arguments are unpacked into its own frame, the dict never kept),
    /// `func(**args)` itself: the same call without the wrapper's frame. Called in `within`, the
    /// body's copy of the caller's context (`Context.run(within, ...)`, the method unbound: no
    /// bound method made per call): every body runs in one. `within` None: the body's copy is
    /// the context this runs in already (a turn's task made with it).
    fn call_body<'py>(
        &self,
        py: Python<'py>,
        flags: &Flags<'py>,
        args: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        within: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.call_body_planned(py, flags, args, ctx, within, None)
    }

    /// `call_body`, with the plan of the body (`body_plan`) when it is known already.
    fn call_body_planned<'py>(
        &self,
        py: Python<'py>,
        flags: &Flags<'py>,
        args: &Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        within: Option<&Bound<'py, PyAny>>,
        plan: Option<(bool, Option<Bound<'py, PyAny>>)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let body = flags.body()?;
        let h = helpers(py)?;
        let run = h.context_run.bind(py);
        if let Ok(kwargs) = args.cast::<PyDict>() {
            let plan = match plan {
                Some(p) => p,
                None => self.body_plan(py, &body)?,
            };
            if let (_, Some(func)) = plan {
                return match within {
                    // Entered directly where the interpreter allows (see `super::context`).
                    Some(within) => super::context::within(py, within, || func.call((), Some(kwargs)))
                        .unwrap_or_else(|| run.call((within, func), Some(kwargs))),
                    None => func.call((), Some(kwargs)),
                };
            }
        }
        match within {
            Some(within) => run.call1((within, body, args, ctx)),
            None => body.call1((args, ctx)),
        }
    }

    /// The call's tool (None for a call refused at admission).
    pub(super) fn tool_object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.tool
            .as_ref()
            .map_or_else(|| py.None().into_bound(py), |t| t.bind(py).clone())
    }

    /// The call's body called with its arguments and `ctx` in `within` (see `call_body`): how a
    /// turn's relay starts an `async` body in its task. The arguments are sealed first unless
    /// the body unpacks them (see `seal_for`).
    pub(super) fn start_body<'py>(
        &mut self,
        py: Python<'py>,
        ctx: &Bound<'py, PyAny>,
        within: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let flags = Flags::of_call(py, self)?;
        // As `seal_for`, the body's plan found once for both.
        let plan = match flags.fn_attr()? {
            Some(f) => Some(self.body_plan(py, &f)?),
            None => None,
        };
        if !plan.as_ref().is_some_and(|p| p.0) {
            self.sealed_args(py)?;
        }
        let args = self
            .args
            .as_ref()
            .map_or_else(|| py.None().into_bound(py), |a| a.bind(py).clone());
        self.call_body_planned(py, &flags, &args, ctx, within, plan)
    }

    /// What the tool's body callable `body` is: `(unpacks, plain)`, `unpacks` when it is one of
    /// the wrappers `tools.from_callable` makes (`tools._ARGS_UNPACKED`), which only unpack or
    /// copy the mapping, `plain` the Python function `func` when it is `invoke_plain`
    /// (`func(**args)`). Found once per `fn` object (kept on the tool's `CoreTool`).
    fn body_plan<'py>(&self, py: Python<'py>, body: &Bound<'py, PyAny>) -> PyResult<(bool, Option<Bound<'py, PyAny>>)> {
        let core = self.core.as_ref().map(|c| c.bind(py).get());
        if let Some(hit) = core.and_then(|c| c.cached_plan(body)) {
            return Ok(hit);
        }
        let h = helpers(py)?;
        let (mut unpacks, mut plain) = (false, None);
        if body.get_type().is(h.function_type.bind(py)) {
            let code = body.getattr(intern!(py, "__code__"))?;
            unpacks = h.args_unpacked.iter().any(|c| c.bind(py).is(&code));
            if code.is(h.invoke_plain.bind(py)) {
                let func = body
                    .getattr(intern!(py, "__closure__"))?
                    .get_item(0)?
                    .getattr(intern!(py, "cell_contents"))?;
                if func.get_type().is(h.function_type.bind(py)) {
                    plain = Some(func);
                }
            }
        }
        if let Some(plan) = core.and_then(|_| super::tools::BodyPlan::new(body, unpacks, plain.as_ref())) {
            core.expect("a core").keep_plan(py, plan);
        }
        Ok((unpacks, plain))
    }

    /// Before the body of `flags`' tool is called with the arguments: sealed unless its `fn` is
    /// one of the wrappers `tools.from_callable` makes (`tools._ARGS_UNPACKED`), which only
    /// unpack or copy the mapping.
    fn seal_for<'py>(&mut self, py: Python<'py>, flags: &Flags<'py>) -> PyResult<()> {
        if self.sealed {
            return Ok(());
        }
        let unpacks = match flags.fn_attr()? {
            Some(f) => self.body_plan(py, &f)?.0,
            None => false,
        };
        if !unpacks {
            self.sealed_args(py)?;
        }
        Ok(())
    }

    fn run_step<'py>(
        &mut self,
        py: Python<'py>,
        tool: Bound<'py, PyAny>,
        timeout_s: Option<f64>,
        kind: BodyKind,
    ) -> PyResult<(u8, Bound<'py, PyAny>)> {
        if kind.lent(self.lend) {
            self.lent = Some(timeout_s);
            return Ok((STEP_RUN, py.None().into_bound(py)));
        }
        let args = self.sealed_args(py)?;
        let limit = timeout_s.into_pyobject(py)?.into_any();
        let kind = (kind as u8).into_pyobject(py)?.into_any();
        Ok((STEP_RUN, PyTuple::new(py, [tool, args, limit, kind])?.into_any()))
    }

    /// Call the non-blocking sync body of function tool `tool` on this thread, as
    /// `_runner.run_inline` does, within `limit` seconds (> 0): a `StopIteration` it raises is a
    /// `RuntimeError`, a result past the deadline a `ToolTimeoutError`, the result is checked
    /// against the output schema (an awaitable one is handed to the driver as a `Later` to
    /// settle); `KeyboardInterrupt`/`SystemExit` from the body, and a `BaseException` that is not
    /// an `Exception` from the output check, go to the driver to raise.
    fn run_here<'py>(
        &self,
        py: Python<'py>,
        flags: &Flags<'py>,
        limit: Option<f64>,
        began: Option<Instant>,
    ) -> PyResult<Here<'py>> {
        let none = || py.None().into_bound(py);
        let args = self.args.as_ref().map_or_else(none, |a| a.bind(py).clone());
        let ctx = self.ctx.as_ref().map_or_else(none, |c| c.bind(py).clone());
        let h = helpers(py)?;
        // Timed from the call's start when it runs in the step the call started with (`began`: the
        // same reading, nothing but the core's own work since), else from now.
        let started = began.unwrap_or_else(Instant::now);
        // In a copy of the caller's context, as every other body: its changes never reach the
        // caller.
        let value = match h
            .copy_context
            .bind(py)
            .call0()
            .and_then(|within| self.call_body(py, flags, &args, &ctx, Some(&within)))
        {
            Ok(v) => v,
            Err(e) => return Ok(here_raised(py, Stage::SyncBody, e)),
        };
        Ok(self.returned_here(py, h, flags, value, &ctx, limit, started))
    }

    /// A body the core runs returned `value` (`started`: when it was started, `limit`: its
    /// deadline in seconds): what becomes of it (see `body::returned`).
    #[allow(clippy::too_many_arguments)]
    fn returned_here<'py>(
        &self,
        py: Python<'py>,
        h: &Helpers,
        flags: &Flags<'py>,
        value: Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        limit: Option<f64>,
        started: Instant,
    ) -> Here<'py> {
        let after = |e: PyErr| here_raised(py, Stage::Around, e);
        // The clock read once when it returned: for its deadline and as the time the pipeline
        // is told it returned.
        let returned_at = Instant::now();
        let elapsed_s = || returned_at.duration_since(started).as_secs_f64();
        match body::returned(limit, elapsed_s, || plain(&value)) {
            Returned::TimedOut => {
                let name = self.m.facts().name.clone().unwrap_or_default();
                match h.timeout_error.bind(py).call1((name, limit)) {
                    Ok(exc) => Here::Failed(exc),
                    Err(e) => after(e),
                }
            }
            Returned::Checked { end } => {
                // The deadline's end on `time.monotonic`.
                let end = match end.then(|| super::deadline::end_since(py, h, limit, started)) {
                    None => None,
                    Some(Ok(end)) => end,
                    Some(Err(e)) => return after(e),
                };
                self.checked(py, flags, value, ctx, limit, end, Some(returned_at))
            }
        }
    }

    /// Start the `async` body of function tool `tool` and take its first step here, as
    /// `super::awaiting::BodyAwait` does (in a copy of the caller's context, as its own stand-in task
    /// `super::awaiting::BodyTask`), within `limit` seconds: a body that finishes at once is done here
    /// (its result checked as `run_here` does; past the deadline a `ToolTimeoutError`); one that
    /// suspends goes to the driver (`STEP_AWAIT`), which awaits the rest under the deadline.
    fn start_here<'py>(
        &self,
        py: Python<'py>,
        flags: &Flags<'py>,
        limit: Option<f64>,
        began: Option<Instant>,
    ) -> PyResult<Here<'py>> {
        let tool = &flags.tool;
        let none = || py.None().into_bound(py);
        let args = self.args.as_ref().map_or_else(none, |a| a.bind(py).clone());
        let ctx = self.ctx.as_ref().map_or_else(none, |c| c.bind(py).clone());
        let failed = |e: PyErr| here_raised(py, Stage::AsyncBody, e);
        let after = |e: PyErr| here_raised(py, Stage::Around, e);
        let h = helpers(py)?;
        // The body (a sync prelude before its coroutine included) runs in one copy of the
        // caller's context: what it sets reaches neither the caller nor the call's later steps.
        let within = h.copy_context.bind(py).call0()?;
        let coro = match self.call_body(py, flags, &args, &ctx, Some(&within)) {
            Ok(c) => c,
            Err(e) => return Ok(failed(e)),
        };
        let limit_obj = limit.into_pyobject(py)?.into_any();
        if !coro.get_type().is(h.coroutine.bind(py)) {
            // Some other awaitable: the driver awaits it the general way.
            let name = tool.getattr(intern!(py, "name"))?;
            let end = super::deadline::end_of(py, h, limit)?;
            let awaiting = match super::awaiting::BodyAwait::fresh(py, coro, limit, name, end, Some(within)) {
                Ok(a) => Bound::new(py, a)?.into_any(),
                Err(e) => return Ok(failed(e)),
            };
            let items = [tool.clone(), awaiting, end.into_pyobject(py)?.into_any(), limit_obj];
            return Ok(Here::Out(STEP_AWAIT, PyTuple::new(py, items)?.into_any()));
        }
        // The deadline runs from here; its end on `time.monotonic` is read only when the body
        // suspends or returns an awaitable (a body done in this step is timed with `Instant`).
        // (Timed as in `run_here`.)
        let first = super::awaiting::Body::new(py, h, &coro, Some(&within))
            .map(|body| (began.unwrap_or_else(Instant::now), body));
        let (started, body) = match first {
            Ok(parts) => parts,
            Err(e) => {
                drop(coro.call_method0(intern!(py, "close"))); // never started: no warning it was never awaited
                return Ok(after(e));
            }
        };
        // Its first step, as its own stand-in task (see `super::awaiting`).
        match body.step_sent(py, h, false, py.None().into_bound(py)) {
            Ok(super::awaiting::Sent::Yielded(y)) => {
                // It suspended on `y`: the driver awaits the rest.
                let awaiting = super::deadline::end_since(py, h, limit, started)
                    .and_then(|end| {
                        Ok((
                            end,
                            super::awaiting::BodyAwait::suspended(body, y, end, limit, tool.clone())?,
                        ))
                    })
                    .and_then(|(end, a)| Ok((end, Bound::new(py, a)?)));
                let (end, awaiting) = match awaiting {
                    Ok((end, a)) => (end, a.into_any()),
                    Err(e) => return Ok(after(e)),
                };
                let items = [tool.clone(), awaiting, end.into_pyobject(py)?.into_any(), limit_obj];
                Ok(Here::Out(STEP_AWAIT, PyTuple::new(py, items)?.into_any()))
            }
            Ok(super::awaiting::Sent::Returned(value)) => {
                Ok(self.returned_here(py, h, flags, value, &ctx, limit, started))
            }
            Err(e) => Ok(failed(e)),
        }
    }

    /// The `async` body a `Relay` stepped returned `value` within its deadline: checked as
    /// `start_here` checks a body that finished at once (`ctx`: the call's context, `limit`: its
    /// deadline in seconds, `end`: that deadline on `time.monotonic`), fed in; returns the next
    /// step for the driver.
    pub(crate) fn returned<'py>(
        &mut self,
        py: Python<'py>,
        value: Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        limit: Option<f64>,
        end: Option<f64>,
    ) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let flags = Flags::of_call(py, self)?;
        let step = match self.checked(py, &flags, value, ctx, limit, end, None) {
            Here::Ok(v, at) => self.ok_step(py, v, at)?,
            Here::Failed(exc) => self.failed_step(py, exc)?,
            Here::Out(code, payload) => return Ok((code, payload)),
        };
        self.advance(py, step)
    }

    /// A body's result checked as `_runner.checked` does: an awaitable one goes to the driver as
    /// a `Later` to settle (`STEP_SETTLE`) within what is left of the deadline (`end`, on
    /// `time.monotonic`), any other against the output schema. `returned_at`: the clock read when
    /// the body returned, which dates a result that needs no check (see `Here::Ok`).
    #[allow(clippy::too_many_arguments)]
    fn checked<'py>(
        &self,
        py: Python<'py>,
        flags: &Flags<'py>,
        value: Bound<'py, PyAny>,
        ctx: &Bound<'py, PyAny>,
        limit: Option<f64>,
        end: Option<f64>,
        returned_at: Option<Instant>,
    ) -> Here<'py> {
        let tool = &flags.tool;
        let after = |e: PyErr| here_raised(py, Stage::Around, e);
        let h = match helpers(py) {
            Ok(h) => h,
            Err(e) => return after(e),
        };
        let how = body::check(
            plain(&value),
            || h.isawaitable.bind(py).call1((&value,)).and_then(|a| a.is_truthy()),
            || flags.plain_output(py),
        );
        match how {
            Ok(Check::Settle) => match h.later.bind(py).call1((tool, &value, ctx, limit, end)) {
                Ok(later) => Here::Out(STEP_SETTLE, later),
                Err(e) => after(e),
            },
            Ok(Check::AsIs) => Here::Ok(value, returned_at),
            Ok(Check::Checked) => match tool.call_method1(intern!(py, "check_output"), (&value, ctx)) {
                Ok(v) => Here::Ok(v, None),
                Err(e) => after(e),
            },
            Err(e) => after(e),
        }
    }

    /// Feed in the value the body returned (checked against the output schema), at `at` (see
    /// `feed_step`).
    fn ok_step(&mut self, py: Python<'_>, value: Bound<'_, PyAny>, mut at: Option<Instant>) -> PyResult<Step<V>> {
        if self.m.wants_value_json() {
            self.m.set_value_json(stored_text(py, &value)?);
            at = None; // its text took time
        }
        self.feed_step(py, Event::BodyOk(Arc::new(super::gil::Held::new(value.unbind()))), at)
    }

    /// Feed in what the body (or its deadline) raised.
    fn failed_step(&mut self, py: Python<'_>, exc: Bound<'_, PyAny>) -> PyResult<Step<V>> {
        let pipe = self.pipe.bind(py).get();
        let kind = classify(py, &exc, pipe.transient.as_ref().map(|t| t.bind(py)))?;
        let name = self.m.facts().name.clone().unwrap_or_default();
        let (code, env) = failure_envelope(py, &name, &exc, self.core.as_ref().map(|c| c.bind(py)))?;
        self.held = Some(env.unbind());
        if let Some(tc) = &self.tc {
            tc.bind(py).setattr(intern!(py, "exc"), &exc)?;
        }
        self.feed_step(py, Event::BodyFailed { kind, code }, None)
    }

    fn wake(&mut self, py: Python<'_>) -> PyResult<()> {
        let wakes = self.m.take_wakes();
        if wakes.is_empty() {
            return Ok(());
        }
        let pipe = self.pipe.bind(py).get();
        let futures: Vec<Py<PyAny>> = {
            let mut waiters = lock(&pipe.waiters);
            wakes.iter().filter_map(|t| waiters.remove(t)).collect()
        };
        let running = super::running::running_loop(py).ok();
        for fut in futures {
            let fut = fut.bind(py);
            let owner = std::cell::OnceCell::new();
            let how = core::wake(fut.call_method0(intern!(py, "done"))?.is_truthy()?, || {
                let lp = fut.call_method0(intern!(py, "get_loop"))?;
                Ok::<_, PyErr>(running.as_ref().is_some_and(|r| r.is(owner.get_or_init(|| lp))))
            })?;
            match (how, owner.get()) {
                (Wake::SetResult, _) => {
                    fut.call_method1(intern!(py, "set_result"), (py.None(),))?;
                }
                (Wake::SetResultThreadsafe, Some(owner)) => {
                    let set = fut.getattr(intern!(py, "set_result"))?;
                    let _ = owner.call_method1(intern!(py, "call_soon_threadsafe"), (set, py.None()));
                }
                (Wake::Nothing, _) | (Wake::SetResultThreadsafe, None) => {}
            }
        }
        Ok(())
    }

    /// How `tool`'s body runs at this attempt (its flags are read each time): a function tool
    /// (`fn` and `check_output` set) with an `async` `fn` (`_is_async`) is awaited, a sync one
    /// declared `non_blocking = True` or named in the pipeline's inline tools is called on the
    /// caller's thread, any other sync one goes to the worker pool; any other tool runs itself.
    fn body_kind<'py>(&self, py: Python<'py>, flags: &Flags<'py>) -> PyResult<BodyKind> {
        let inline = &self.pipe.bind(py).get().inline;
        flags::body_kind(
            || flags.function(),
            || flags.is_async(),
            || flags.non_blocking(),
            || inline.contains(self.m.facts().name.as_deref().unwrap_or("")),
        )
    }

    fn config<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        let pipe = self.pipe.bind(py).get();
        match self.m.rule_index().and_then(|i| pipe.configs.get(i)) {
            Some(c) => c.bind(py).clone(),
            None => py.None().into_bound(py),
        }
    }

    fn store<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.config(py).getattr(intern!(py, "store"))
    }

    fn render<'py>(&mut self, py: Python<'py>, step: Step<V>) -> PyResult<(u8, Bound<'py, PyAny>)> {
        self.wake(py)?;
        let none = || py.None().into_bound(py);
        Ok(match step {
            Step::Done(env) => {
                let env = self.envelope(py, env)?.into_any();
                self.release();
                (STEP_DONE, env)
            }
            Step::RunBody { timeout_s } => {
                let tool = self.tool.as_ref().map_or_else(none, |t| t.bind(py).clone());
                let kind = self.body_kind(py, &Flags::of_call(py, self)?)?;
                return self.run_step(py, tool, timeout_s, kind);
            }
            Step::AskApprover => {
                let tool = self.tool.as_ref().map_or_else(none, |t| t.bind(py).clone());
                let args = self.sealed_args(py)?;
                let approver = self.config(py).getattr(intern!(py, "approver"))?;
                (STEP_APPROVE, PyTuple::new(py, [approver, tool, args])?.into_any())
            }
            Step::Sleep(d) => {
                let sleep = match self.config(py).getattr_opt(intern!(py, "sleep"))? {
                    Some(s) => s,
                    None => none(),
                };
                (
                    STEP_SLEEP,
                    PyTuple::new(py, [sleep, d.into_pyobject(py)?.into_any()])?.into_any(),
                )
            }
            Step::WaitInFlight(ticket) => {
                let pipe = self.pipe.bind(py).get();
                let existing = lock(&pipe.waiters).get(&ticket).map(|f| f.clone_ref(py));
                let fut = match existing {
                    Some(f) => f.into_bound(py),
                    None => {
                        let fut = super::running::running_loop(py)?.call_method0(intern!(py, "create_future"))?;
                        lock(&pipe.waiters).insert(ticket, fut.clone().unbind());
                        fut
                    }
                };
                (STEP_WAIT, fut)
            }
            Step::StoreGet(key) => (
                STEP_GET,
                PyTuple::new(py, [self.store(py)?, PyString::new(py, &key).into_any()])?.into_any(),
            ),
            Step::StoreSet(key, value) => {
                let items = [
                    self.store(py)?,
                    PyString::new(py, &key).into_any(),
                    PyString::new(py, &value).into_any(),
                ];
                (STEP_SET, PyTuple::new(py, items)?.into_any())
            }
            Step::StoreCas { key, expected, value } => {
                let items = [
                    self.store(py)?,
                    PyString::new(py, &key).into_any(),
                    expected.into_pyobject(py)?.into_any(),
                    PyString::new(py, &value).into_any(),
                ];
                (STEP_CAS, PyTuple::new(py, items)?.into_any())
            }
            Step::StoreFailing { key, why } => (
                STEP_FAILING,
                PyTuple::new(py, [PyString::new(py, &key), PyString::new(py, &why)])?.into_any(),
            ),
            Step::AuditOpen => {
                let name = PyString::new(py, self.m.facts().name.as_deref().unwrap_or("")).into_any();
                let cid = self.call_id.as_ref().map_or_else(none, |c| c.bind(py).clone());
                (STEP_OPEN, PyTuple::new(py, [self.config(py), name, cid])?.into_any())
            }
            Step::Record(rec) => {
                let rec = self.record(py, &rec)?;
                (
                    STEP_RECORD,
                    PyTuple::new(py, [self.config(py), rec.into_any()])?.into_any(),
                )
            }
            Step::Recording(_) => {
                return Err(PyRuntimeError::new_err(
                    "the pipeline asked to wait for a record's task outside an abort",
                ))
            }
        })
    }

    /// The call ended: the Python objects only its steps needed are let go at once (the
    /// driver's frame may outlive the call in a traceback, and the call state with it).
    fn release(&mut self) {
        self.tool = None;
        self.args = None;
        self.core = None;
        self.held = None;
        self.tc = None;
        self.ctx = None;
        self.flags = None;
        self.kept = None;
    }

    fn record<'py>(&self, py: Python<'py>, r: &AuditRecord) -> PyResult<Bound<'py, PyDict>> {
        /// `AuditRecord::KEYS`, interned once.
        static KEYS: PyOnceLock<[Py<PyString>; 7]> = PyOnceLock::new();
        let keys = KEYS.get_or_init(py, || AuditRecord::KEYS.map(|k| PyString::intern(py, k).unbind()));
        let f = self.m.facts();
        let d = PyDict::new(py);
        for (key, value) in keys.iter().zip(r.values(f.name.as_deref(), &f.canonical)) {
            let key = key.bind(py);
            match value {
                AuditValue::Text(t) => d.set_item(key, t)?,
                AuditValue::Owned(t) => d.set_item(key, t)?,
                AuditValue::CallId => d.set_item(key, self.call_id.as_ref().map(|c| c.bind(py)))?,
                AuditValue::Count(n) => d.set_item(key, n)?,
                AuditValue::Number(x) => d.set_item(key, x)?,
            }
        }
        Ok(d)
    }

    fn envelope<'py>(&mut self, py: Python<'py>, env: Env<V>) -> PyResult<Bound<'py, PyDict>> {
        match env {
            Env::Ok {
                value,
                elapsed_ms,
                deduplicated,
            } => {
                let value = match value {
                    Val::Obj(v) => v.bind(py).clone(),
                    Val::Json(j) => super::tools::to_py(py, &j)?,
                };
                let mut s = Success::new(value, elapsed_ms);
                s.deduplicated = deduplicated;
                envelope::success(py, s)
            }
            Env::Refused(r) => refusal_envelope(py, &r, self.m.facts()),
            Env::Failed { .. } | Env::Rejected { .. } | Env::Passed { .. } => match self.held.take() {
                Some(env) => Ok(env.into_bound(py)),
                None => internal_envelope(py, self.m.facts().name.as_deref().unwrap_or("")),
            },
        }
    }
}

#[pymethods]
impl Call {
    // The garbage collector sees what a call state holds (a cycle through it, e.g. an
    // exception's traceback -> the driver's frame -> this state -> the ToolCall, is collected).
    // (A turn's relay that holds a call's state visits it through this too.)
    pub(super) fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.pipe)?;
        visit.call(&self.tool)?;
        visit.call(&self.args)?;
        visit.call(&self.core)?;
        visit.call(&self.call_id)?;
        visit.call(&self.held)?;
        visit.call(&self.tc)?;
        visit.call(&self.ctx)?;
        visit.call(&self.flags)?;
        Ok(())
    }

    fn __clear__(&mut self) {
        self.release();
        self.call_id = None;
    }

    /// The body returned `value` (already checked against the output schema).
    pub(super) fn ok<'py>(&mut self, py: Python<'py>, value: Bound<'py, PyAny>) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(py);
        let step = self.ok_step(py, value, None)?;
        self.advance(py, step)
    }

    /// The body (or its deadline) raised `exc`.
    pub(super) fn failed<'py>(&mut self, py: Python<'py>, exc: Bound<'py, PyAny>) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(py);
        let step = self.failed_step(py, exc)?;
        self.advance(py, step)
    }

    /// The next handler (a user middleware) answered `env`; `exc`: the exception of the failed
    /// attempt it saw (None when it refused or succeeded); `attempts`: body starts so far.
    pub(super) fn passed<'py>(
        &mut self,
        py: Python<'py>,
        env: Bound<'py, PyAny>,
        exc: Option<Bound<'py, PyAny>>,
        attempts: u32,
    ) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(py);
        let pipe = self.pipe.bind(py).get();
        let kind = match &exc {
            Some(e) => Some(classify(py, e, pipe.transient.as_ref().map(|t| t.bind(py)))?),
            None => None,
        };
        // An answer that is no dict reads as no envelope (see `Env::passed`); the call then ends
        // holding none (see `Call::envelope`).
        let d = env.cast_into::<PyDict>().ok();
        let get = |k: &str| d.as_ref().and_then(|d| d.get_item(k).ok().flatten());
        let truthy = |k: &str| get(k).is_some_and(|v| v.is_truthy().unwrap_or(false));
        let answer = Env::passed(
            truthy("ok"),
            truthy("deduplicated"),
            d.as_ref().and_then(code_text),
            kind,
            || get("value").map(|v| Arc::new(super::gil::Held::new(v.unbind()))),
        );
        if self.m.wants_json_of(&answer) {
            let v = get("value").unwrap_or_else(|| py.None().into_bound(py));
            self.m.set_value_json(stored_text(py, &v)?);
        }
        self.held = d.map(Bound::unbind);
        self.m.set_attempts(attempts);
        self.feed_event(py, Event::Passed(answer))
    }

    /// Feed the outcome of the step the driver performed (`EV_*`; `value`: the approver's
    /// answer as it is (see `drive::approves`), the store's document or compare-and-set result).
    #[pyo3(signature = (event, value=None))]
    pub(super) fn feed<'py>(
        &mut self,
        py: Python<'py>,
        event: u8,
        value: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(u8, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(py);
        let ev = match event {
            EV_APPROVED => Event::Approved(crate::drive::approves(value.and_then(|v| bool_of(&v)))),
            EV_SLEPT => Event::Slept,
            EV_WOKEN => Event::Woken,
            EV_GOT => Event::StoreGot(match value {
                Some(v) if !v.is_none() => v.extract::<String>().ok(),
                _ => None,
            }),
            EV_SET => Event::StoreSet,
            EV_CAS => Event::StoreCas(value.is_some_and(|v| v.is_truthy().unwrap_or(false))),
            EV_STORE_FAILED => Event::StoreFailed,
            EV_OPENED => Event::Opened,
            EV_RECORDED => Event::Recorded,
            other => return Err(PyValueError::new_err(format!("unknown pipeline event {other}"))),
        };
        self.feed_event(py, ev)
    }

    /// The caller gave up (`cancelled`) or a fault outside the pipeline ended the call: the
    /// identical calls waiting for it in this process wake; returns the steps the driver performs
    /// before re-raising, in order, as `(STEP_CAS, (store, key, expected, value))` (release the
    /// call's shared idempotency claim; the answer is not fed back), `(STEP_RECORD, (config,
    /// record))` (outcome `cancelled`, else `internal_error`) and `(STEP_RECORDING, (config,
    /// record))` (the call's own record, written in a task of its own: wait for it).
    /// `attempts`: body starts so far, when a user middleware after this segment counts them.
    #[pyo3(signature = (cancelled, attempts=None))]
    pub(super) fn abort<'py>(
        &mut self,
        py: Python<'py>,
        cancelled: bool,
        attempts: Option<u32>,
    ) -> PyResult<Vec<(u8, Bound<'py, PyTuple>)>> {
        let _in = super::shutdown::inside(py);
        if let Some(a) = attempts {
            self.m.set_attempts(a);
        }
        let pipe = self.pipe.clone_ref(py);
        let steps = pipe
            .get()
            .inner
            .with_pure(py, |p| p.abort(&mut self.m, cancelled, Time::now(pipe.get().unix)))?;
        self.wake(py)?;
        let configs = &pipe.get().configs;
        let mut out = Vec::with_capacity(steps.len());
        for (i, step) in steps {
            let config = configs[i].bind(py);
            out.push(match step {
                Step::StoreCas { key, expected, value } => {
                    let store = config.getattr(intern!(py, "store"))?;
                    let items = [
                        store,
                        PyString::new(py, &key).into_any(),
                        expected.into_pyobject(py)?.into_any(),
                        PyString::new(py, &value).into_any(),
                    ];
                    (STEP_CAS, PyTuple::new(py, items)?)
                }
                Step::Record(r) => (
                    STEP_RECORD,
                    PyTuple::new(py, [config.clone(), self.record(py, &r)?.into_any()])?,
                ),
                Step::Recording(r) => (
                    STEP_RECORDING,
                    PyTuple::new(py, [config.clone(), self.record(py, &r)?.into_any()])?,
                ),
                _ => {
                    return Err(PyRuntimeError::new_err(
                        "the pipeline's abort asked for a step other than a release or a record",
                    ))
                }
            });
        }
        Ok(out)
    }

    /// How many times the body started.
    #[getter]
    fn attempts(&self) -> u32 {
        self.m.attempts()
    }

    /// The registered tool (None when the call was rejected).
    #[getter]
    fn tool(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.tool.as_ref().map(|t| t.clone_ref(py))
    }
}

// ------------------------------------------------------------------ idempotency: a result's stored text

/// `json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=json_default).encode`
/// (one encoder: `json.dumps` with these arguments makes the same one per call) and
/// `pydantic_core.to_jsonable_python` when pydantic is installed.
struct StoredJson {
    encode: Py<PyAny>,
    to_jsonable: Option<Py<PyAny>>,
}

static STORED_JSON: PyOnceLock<StoredJson> = PyOnceLock::new();

fn stored_json(py: Python<'_>) -> PyResult<&StoredJson> {
    STORED_JSON.get_or_try_init(py, || {
        let kw = PyDict::new(py);
        kw.set_item("ensure_ascii", false)?;
        kw.set_item("separators", (",", ":"))?;
        kw.set_item("default", wrap_pyfunction!(json_default, py)?)?;
        let encoder = py.import("json")?.getattr("JSONEncoder")?.call((), Some(&kw))?;
        let to_jsonable = match py.import("pydantic_core") {
            Ok(m) => Some(m.getattr("to_jsonable_python")?.unbind()),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyImportError>(py) => None,
            Err(e) => return Err(e),
        };
        Ok(StoredJson {
            encode: encoder.getattr("encode")?.unbind(),
            to_jsonable,
        })
    })
}

/// The JSON text a shared store keeps of a result; None (logged) when it cannot be made and
/// what making it raised does not fail the call (see `stored::unstorable`), or another worker
/// would not read it back as the same value (see `stored::reads_back`).
fn stored_text(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    match stored_json(py)?
        .encode
        .bind(py)
        .call1((value,))
        .and_then(|text| text.extract::<String>())
    {
        Ok(text) if stored::reads_back(&text) => return Ok(Some(text)),
        Ok(_) => {}
        Err(e)
            if stored::unstorable(e.is_instance_of::<pyo3::exceptions::PyException>(py), || {
                super::drive::propagates(py, &e)
            }) => {}
        Err(e) => return Err(e),
    }
    let kind = value.get_type().name()?;
    super::drive::log(
        py,
        &super::drive::own(py)?.middleware_log,
        "warning",
        stored::UNSTORABLE_RESULT,
        vec![kind.into_any()],
        None,
    );
    Ok(None)
}

/// JSON data for a result that is not plain JSON (a dataclass, a pydantic model, a datetime):
/// what another worker reads back is this data (the rung of `stored::JsonDefault`'s ladder
/// `stored::json_default` picks).
#[pyfunction]
fn json_default<'py>(py: Python<'py>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let _in = super::shutdown::inside(py);
    let to_jsonable = &stored_json(py)?.to_jsonable;
    let dataclasses = std::cell::OnceCell::new();
    let isoformat = std::cell::OnceCell::new();
    let rung = stored::json_default(
        to_jsonable.is_some(),
        || {
            let m = dataclasses
                .get_or_init(|| py.import("dataclasses"))
                .as_ref()
                .map_err(|e| e.clone_ref(py))?;
            m.call_method1(intern!(py, "is_dataclass"), (&value,))?.is_truthy()
        },
        || value.is_instance_of::<PyType>(),
        || {
            let f = value.getattr_opt(intern!(py, "isoformat"))?.filter(|f| f.is_callable());
            Ok(isoformat.get_or_init(|| f).is_some())
        },
    )?;
    match rung {
        JsonDefault::Jsonable => {
            let kw = PyDict::new(py);
            kw.set_item(intern!(py, "fallback"), py.get_type::<PyString>())?;
            let to_jsonable = to_jsonable
                .as_ref()
                .ok_or_else(|| PyRuntimeError::new_err("pydantic_core is not installed"))?;
            to_jsonable.bind(py).call((value,), Some(&kw))
        }
        JsonDefault::Fields => match dataclasses.get() {
            Some(Ok(m)) => m.call_method1(intern!(py, "asdict"), (&value,)),
            _ => py.import("dataclasses")?.call_method1(intern!(py, "asdict"), (&value,)),
        },
        JsonDefault::IsoFormat => match isoformat.get() {
            Some(Some(f)) => f.call0(),
            _ => Ok(value.str()?.into_any()),
        },
        JsonDefault::Text => Ok(value.str()?.into_any()),
    }
}
