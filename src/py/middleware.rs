//! Binding of the Invoker's middleware core (`crate::middleware`): the per-Invoker state
//! (repeat counts, idempotency cache, circuit breakers), argument hashing, retry decisions,
//! the egress check and the refusal envelopes. Conversions only: the rules live in the core.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use serde_json::Value;

use super::envelope::{self, PyFailure as Failure};
use crate::middleware::{self as core, CircuitBreaker, Claim, Conversations, FailureKind, HostAllowList};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MiddlewareState>()?;
    m.add_class::<RetryPolicy>()?;
    m.add_class::<EgressPolicy>()?;
    m.add_class::<DeadlineQueue>()?;
    m.add_function(wrap_pyfunction!(canonical_args, m)?)?;
    m.add_function(wrap_pyfunction!(args_hash, m)?)?;
    m.add_function(wrap_pyfunction!(idempotency_store_key, m)?)?;
    m.add_function(wrap_pyfunction!(approval_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(url_host, m)?)?;
    m.add("MAX_SCOPES", core::MAX_SCOPES)?;
    m.add("MAX_CALLS_PER_SCOPE", core::MAX_CALLS_PER_SCOPE)?;
    Ok(())
}

// ------------------------------------------------------------------ envelopes

/// The `approval_required` envelope: `{"ok": False, "error": {"code": "approval_required",
/// "message", "tool"}}`; the message names the tool and its arguments and tells the model to
/// ask the user.
#[pyfunction]
fn approval_envelope<'py>(py: Python<'py>, tool: &str, canonical: &str) -> PyResult<Bound<'py, PyDict>> {
    envelope::failure(py, &Failure::approval_required(tool, canonical))
}

// ------------------------------------------------------------------ arguments

/// `(canonical JSON text, args_hash)` of a call's arguments (a mapping, JSON text or None).
/// JSON text that does not parse is hashed as it is; a mapping that is not JSON is hashed by
/// its `repr` (such a call is rejected by validation anyway).
#[pyfunction]
fn canonical_args(args: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    let canonical = if let Ok(text) = args.cast::<PyString>() {
        let text = text.to_str()?;
        match serde_json::from_str::<Value>(text) {
            Ok(v) => core::canonical_json(&v),
            Err(_) => text.to_owned(),
        }
    } else if args.is_none() {
        "{}".to_owned()
    } else {
        match super::args::canonical_text(args) {
            Ok(text) => text,
            Err(_) => args.repr()?.extract()?,
        }
    };
    let hash = core::args_hash(&canonical);
    Ok((canonical, hash))
}

/// The audit record's `args_hash` of canonical JSON text (as `canonical_args` gives it).
#[pyfunction]
fn args_hash(canonical: &str) -> String {
    core::args_hash(canonical)
}

/// The key under which a shared store keeps the result of a side-effecting call.
#[pyfunction]
fn idempotency_store_key(scope: &str, name: &str, canonical: &str) -> String {
    core::store_key(scope, name, canonical)
}

/// The host of an absolute URL as the egress check sees it (lowercase, no port), or None.
#[pyfunction]
fn url_host(url: &str) -> Option<String> {
    core::url_host(url)
}

// ------------------------------------------------------------------ per-Invoker state

fn now_s() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}


/// The state the Invoker's rules share across calls: per conversation, repeat counts and the
/// idempotency window (see `core::Conversations`, bounded), and a circuit breaker per tool name.
/// Used from the event loop's thread only.
#[pyclass(module = "agentkit_tools._core")]
pub struct MiddlewareState {
    conversations: Conversations<Py<PyAny>>,
    breakers: HashMap<String, CircuitBreaker>,
}

#[pymethods]
impl MiddlewareState {
    #[new]
    fn new() -> Self {
        Self { conversations: Conversations::default(), breakers: HashMap::new() }
    }

    /// Count the call; return the `repeated_call` envelope when it is the `limit`-th (or a
    /// later) identical call of `scope`, else None.
    fn repeat_check<'py>(
        &mut self,
        py: Python<'py>,
        scope: &str,
        name: &str,
        canonical: &str,
        limit: u32,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let count = self.conversations.observe(scope, name, canonical);
        if !core::is_repeat(count, limit) {
            return Ok(None);
        }
        envelope::failure(py, &Failure::repeated_call(name, count)).map(Some)
    }

    /// Forget the repeat counts of `scope` (a side-effecting call succeeded in it).
    fn repeat_reset(&mut self, scope: &str) {
        self.conversations.reset_counts(scope);
    }

    /// Look a side-effecting call up: `(0, None)` claimed (run it, then `idem_complete` or
    /// `idem_release`), `(1, value)` the same call succeeded and its window is open, `(2,
    /// waiter)` an identical call in flight.
    fn idem_claim(
        &mut self,
        py: Python<'_>,
        scope: &str,
        name: &str,
        canonical: &str,
        waiter: Py<PyAny>,
    ) -> (u8, Py<PyAny>) {
        match self.conversations.claim(scope, name, canonical, waiter) {
            Claim::Claimed => (0, py.None()),
            Claim::Hit(v) => (1, v.clone_ref(py)),
            Claim::Pending(w) => (2, w.clone_ref(py)),
        }
    }

    /// The claimed call succeeded: hold `value` (None with `keep=False`: the result lives in a
    /// shared store) as the scope's open window, closing any other. Returns the waiter (or None).
    #[pyo3(signature = (scope, name, canonical, value, keep=true))]
    fn idem_complete(&mut self, py: Python<'_>, scope: &str, name: &str, canonical: &str, value: Py<PyAny>, keep: bool) -> Py<PyAny> {
        let value = keep.then_some(value);
        self.conversations.complete(scope, name, canonical, value).unwrap_or_else(|| py.None())
    }

    /// Drop a claim (the call failed); returns the waiter.
    fn idem_release(&mut self, py: Python<'_>, scope: &str, name: &str, canonical: &str) -> Py<PyAny> {
        self.conversations.release(scope, name, canonical).unwrap_or_else(|| py.None())
    }

    /// Close the idempotency window of `scope` (a side-effecting call succeeded there).
    fn idem_close(&mut self, scope: &str) {
        self.conversations.close_window(scope);
    }

    /// The `circuit_open` envelope when the tool's breaker refuses a call now, else None.
    fn breaker_admit<'py>(
        &mut self,
        py: Python<'py>,
        name: &str,
        threshold: u32,
        cooldown_s: f64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let breaker = self.breakers.entry(name.to_owned()).or_insert_with(|| CircuitBreaker::new(threshold, cooldown_s));
        match breaker.admit(now_s()) {
            Ok(()) => Ok(None),
            Err(wait) => {
                let f = Failure::circuit_open(name, breaker.consecutive_failures(), wait);
                envelope::failure(py, &f).map(Some)
            }
        }
    }

    /// Record the end of an attempt: `kind` is `"ok"`, `"transient"`, `"deadline"` or
    /// `"permanent"` (as returned by `RetryPolicy.decide`). Returns whether the circuit is open.
    fn breaker_record(&mut self, name: &str, kind: &str) -> bool {
        let Some(b) = self.breakers.get_mut(name) else { return false };
        match kind {
            "ok" => b.record_success(),
            "transient" | "deadline" => {
                b.record_failure(now_s());
            }
            _ => b.record_neutral(),
        }
        b.is_open()
    }

    /// Forget the repeat counts and cached results of a finished conversation.
    fn forget(&mut self, scope: &str) {
        self.conversations.forget(scope);
    }

    /// `(repeat keys, idempotency entries, breakers)`: sizes, for tests and monitoring.
    fn sizes(&self) -> (usize, usize, usize) {
        let (counts, idem, _) = self.conversations.sizes();
        (counts, idem, self.breakers.len())
    }

    /// How many conversations are held (at most `MAX_SCOPES`).
    fn scopes(&self) -> usize {
        self.conversations.sizes().2
    }
}

// ------------------------------------------------------------------ retry

/// Retry settings and the classification of failures by exception type (SPEC §7, §11).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct RetryPolicy {
    policy: core::RetryPolicy,
    transient: Py<PyTuple>,
}

#[pymethods]
impl RetryPolicy {
    /// `max_attempts` ≥ 1 (the first call included); `base_s`, `cap_s` ≥ 0 seconds; `transient`:
    /// extra exception classes to retry. Raises `ValueError` on out-of-range values.
    #[new]
    #[pyo3(signature = (max_attempts=3, base_s=0.5, cap_s=30.0, transient=None))]
    fn new(py: Python<'_>, max_attempts: u32, base_s: f64, cap_s: f64, transient: Option<Bound<'_, PyTuple>>) -> PyResult<Self> {
        if max_attempts < 1 {
            return Err(PyValueError::new_err(format!("retry: max_attempts must be at least 1, got {max_attempts}")));
        }
        if !(base_s >= 0.0 && cap_s >= 0.0 && base_s.is_finite() && cap_s.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "retry: base_s and cap_s must be finite and >= 0 seconds, got {base_s} and {cap_s}"
            )));
        }
        let transient = transient.unwrap_or_else(|| PyTuple::empty(py)).unbind();
        Ok(Self { policy: core::RetryPolicy { max_attempts, base_s, cap_s }, transient })
    }

    #[getter]
    fn max_attempts(&self) -> u32 {
        self.policy.max_attempts
    }

    /// After failed attempt `attempt` (1-based) with `exc`: `(kind, delay_s)` where `kind` is
    /// `"transient"`, `"deadline"` or `"permanent"` and `delay_s` the full-jitter wait before
    /// the next attempt, or None when the call is not retried.
    fn decide(&self, py: Python<'_>, exc: &Bound<'_, PyAny>, retry_safe: bool, attempt: u32) -> PyResult<(&'static str, Option<f64>)> {
        let kind = crate::py::tools::classify(py, exc, Some(self.transient.bind(py)))?.failure_kind();
        let name = match kind {
            FailureKind::Transient => "transient",
            FailureKind::Deadline => "deadline",
            FailureKind::Permanent => "permanent",
        };
        let delay = self.policy.should_retry(kind, retry_safe, attempt).then(|| self.delay_s(attempt));
        Ok((name, delay))
    }

    /// A full-jitter delay in seconds, uniform in `[0, min(cap_s, base_s * 2**(attempt-1)))`.
    fn delay_s(&self, attempt: u32) -> f64 {
        thread_local! {
            static RNG: std::cell::RefCell<fastrand::Rng> = std::cell::RefCell::new(fastrand::Rng::new());
        }
        RNG.with(|r| self.policy.delay_s(attempt, &mut r.borrow_mut()))
    }

    /// The upper bound of the delay after attempt `attempt`, in seconds.
    fn ceiling_s(&self, attempt: u32) -> f64 {
        self.policy.ceiling_s(attempt)
    }
}

// ------------------------------------------------------------------ egress

/// A host allow-list for the URL argument of tools (`url_arg`).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct EgressPolicy {
    allow: HostAllowList,
}

#[pymethods]
impl EgressPolicy {
    #[new]
    fn new(allow: Vec<String>) -> Self {
        Self { allow: HostAllowList::new(allow) }
    }

    #[getter]
    fn allowed(&self) -> Vec<String> {
        self.allow.entries()
    }

    /// None when `url` may be fetched, else the `egress_denied` envelope (with `host` when the
    /// URL has one, and `allowed`).
    fn check<'py>(&self, py: Python<'py>, tool: &str, url_arg: &str, url: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let text: String = match url.cast::<PyString>() {
            Ok(s) => s.to_str()?.to_owned(),
            Err(_) => url.str()?.extract()?,
        };
        let denial = match core::check_egress(&text, &self.allow) {
            Ok(_) => return Ok(None),
            Err(d) => d,
        };
        envelope::failure(py, &Failure::egress_denied(tool, url_arg, &denial, self.allow.entries())).map(Some)
    }
}

// ------------------------------------------------------------------ deadlines

/// Pending call deadlines of one event loop, earliest first (see `core::DeadlineQueue`).
#[pyclass(module = "agentkit_tools._core")]
pub struct DeadlineQueue {
    inner: core::DeadlineQueue<Py<PyAny>>,
}

#[pymethods]
impl DeadlineQueue {
    #[new]
    fn new() -> Self {
        Self { inner: core::DeadlineQueue::default() }
    }

    /// Add `item` due at `when` (the loop's clock, seconds); returns its id.
    fn push(&mut self, when: f64, item: Py<PyAny>) -> u64 {
        self.inner.push(when, item)
    }

    /// Forget the item `id` (its call ended); True when it was still pending.
    fn remove(&mut self, id: u64) -> bool {
        self.inner.remove(id).is_some()
    }

    /// The pending items due at or before `now`, earliest first, removed from the queue.
    fn pop_expired(&mut self, now: f64) -> Vec<Py<PyAny>> {
        self.inner.pop_expired(now)
    }

    /// The earliest pending deadline, or None.
    fn next_deadline(&mut self) -> Option<f64> {
        self.inner.next_deadline()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

