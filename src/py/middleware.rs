//! Binding of the Invoker's middleware core (`crate::middleware`): the per-Invoker state
//! (repeat counts, idempotency cache, circuit breakers), argument hashing, retry decisions,
//! the egress check, the refusal envelopes, and the worker pool that runs sync tool bodies off
//! the event loop and completes an asyncio future. Conversions only: the rules live in the core.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use pyo3::exceptions::{PyConnectionError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use serde_json::Value;

use crate::middleware::{
    self as core, CircuitBreaker, Claim, EgressDenial, FailureKind, HostAllowList, IdempotencyCache, RepeatCounter,
};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MiddlewareState>()?;
    m.add_class::<Completions>()?;
    m.add_class::<RetryPolicy>()?;
    m.add_class::<EgressPolicy>()?;
    m.add_class::<DeadlineQueue>()?;
    m.add_function(wrap_pyfunction!(canonical_args, m)?)?;
    m.add_function(wrap_pyfunction!(args_hash, m)?)?;
    m.add_function(wrap_pyfunction!(idempotency_store_key, m)?)?;
    m.add_function(wrap_pyfunction!(approval_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(url_host, m)?)?;
    m.add_function(wrap_pyfunction!(submit_sync, m)?)?;
    m.add_function(wrap_pyfunction!(pool_size, m)?)?;
    m.add_function(wrap_pyfunction!(drain_pool, m)?)?;
    Ok(())
}

// ------------------------------------------------------------------ envelopes

fn refusal<'py>(
    py: Python<'py>,
    code: &str,
    message: &str,
    extra: &[(&str, Bound<'py, PyAny>)],
) -> PyResult<Bound<'py, PyDict>> {
    let error = PyDict::new(py);
    error.set_item("code", code)?;
    error.set_item("message", message)?;
    for (k, v) in extra {
        error.set_item(*k, v)?;
    }
    let env = PyDict::new(py);
    env.set_item("ok", false)?;
    env.set_item("error", error)?;
    Ok(env)
}

/// The `approval_required` envelope: `{"ok": False, "error": {"code": "approval_required",
/// "message", "tool"}}`; the message names the tool and its arguments and tells the model to
/// ask the user.
#[pyfunction]
fn approval_envelope<'py>(py: Python<'py>, tool: &str, canonical: &str) -> PyResult<Bound<'py, PyDict>> {
    let msg = core::approval_required_message(tool, canonical);
    refusal(py, "approval_required", &msg, &[("tool", PyString::new(py, tool).into_any())])
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
        let mut out = String::with_capacity(128);
        match write_canonical_py(args, &mut out, 0) {
            Ok(()) => out,
            Err(_) => args.repr()?.extract()?,
        }
    };
    let hash = core::args_hash(&canonical);
    Ok((canonical, hash))
}

/// The canonical JSON of a Python value, written directly (no intermediate `Value`): the same
/// text `core::canonical_json` gives for the equivalent JSON (keys sorted by code point, floats
/// as serde_json prints them). Only dict/list/tuple/str/int/float/bool/None; anything else errs.
fn write_canonical_py(obj: &Bound<'_, PyAny>, out: &mut String, depth: usize) -> PyResult<()> {
    use pyo3::types::{PyBool, PyFloat, PyInt, PyList};
    if depth > 256 {
        return Err(PyValueError::new_err("arguments nested too deeply"));
    }
    if obj.is_none() {
        out.push_str("null");
    } else if let Ok(s) = obj.cast::<PyString>() {
        core::write_string(s.to_str()?, out);
    } else if let Ok(b) = obj.cast::<PyBool>() {
        out.push_str(if b.is_true() { "true" } else { "false" });
    } else if let Ok(i) = obj.cast::<PyInt>() {
        match i.extract::<i64>() {
            Ok(v) => out.push_str(&v.to_string()),
            Err(_) => out.push_str(i.str()?.to_str()?),
        }
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        let v = serde_json::Number::from_f64(f.value()).ok_or_else(|| PyValueError::new_err("not a finite number"))?;
        out.push_str(&v.to_string());
    } else if let Ok(d) = obj.cast::<PyDict>() {
        let mut entries: Vec<(Bound<'_, PyString>, Bound<'_, PyAny>)> = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let k = k.cast_into::<PyString>().map_err(|_| PyValueError::new_err("object keys must be strings"))?;
            entries.push((k, v));
        }
        let mut items: Vec<(&str, &Bound<'_, PyAny>)> = Vec::with_capacity(entries.len());
        for (k, v) in &entries {
            items.push((k.to_str()?, v));
        }
        items.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out.push('{');
        for (i, (k, v)) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            core::write_string(k, out);
            out.push(':');
            write_canonical_py(v, out, depth + 1)?;
        }
        out.push('}');
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        out.push('[');
        for (i, item) in obj.try_iter()?.enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_canonical_py(&item?, out, depth + 1)?;
        }
        out.push(']');
    } else {
        return Err(PyValueError::new_err("not a JSON value"));
    }
    Ok(())
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

fn key(scope: &str, name: &str, canonical: &str) -> core::CallKey {
    (scope.to_owned(), name.to_owned(), canonical.to_owned())
}

/// The state the Invoker's middleware share across calls: repeat counts and the idempotency
/// cache per (scope, tool name, canonical arguments), and a circuit breaker per tool name.
/// Used from the event loop's thread only.
#[pyclass(module = "agentkit_tools._core")]
pub struct MiddlewareState {
    repeats: RepeatCounter,
    results: IdempotencyCache<Py<PyAny>>,
    breakers: HashMap<String, CircuitBreaker>,
}

#[pymethods]
impl MiddlewareState {
    #[new]
    fn new() -> Self {
        Self { repeats: RepeatCounter::default(), results: IdempotencyCache::default(), breakers: HashMap::new() }
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
        let count = self.repeats.observe(key(scope, name, canonical));
        if !core::is_repeat(count, limit) {
            return Ok(None);
        }
        let msg = core::repeated_call_message(name, count);
        let extra = [("tool", PyString::new(py, name).into_any()), ("count", count.into_pyobject(py)?.into_any())];
        refusal(py, "repeated_call", &msg, &extra).map(Some)
    }

    /// Look a side-effecting call up: `(0, None)` claimed (run it, then `idem_complete` or
    /// `idem_release`), `(1, value)` a cached success, `(2, waiter)` an identical call in flight.
    fn idem_claim(
        &mut self,
        py: Python<'_>,
        scope: &str,
        name: &str,
        canonical: &str,
        waiter: Py<PyAny>,
    ) -> (u8, Py<PyAny>) {
        match self.results.claim(key(scope, name, canonical), waiter) {
            Claim::Claimed => (0, py.None()),
            Claim::Hit(v) => (1, v.clone_ref(py)),
            Claim::Pending(w) => (2, w.clone_ref(py)),
        }
    }

    /// Cache the successful `value`; returns the waiter of the claim (or None).
    fn idem_complete(&mut self, py: Python<'_>, scope: &str, name: &str, canonical: &str, value: Py<PyAny>) -> Py<PyAny> {
        self.results.complete(key(scope, name, canonical), value).unwrap_or_else(|| py.None())
    }

    /// Drop a claim (the call failed, or its result lives in a shared store); returns the waiter.
    fn idem_release(&mut self, py: Python<'_>, scope: &str, name: &str, canonical: &str) -> Py<PyAny> {
        self.results.release(&key(scope, name, canonical)).unwrap_or_else(|| py.None())
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
                let msg = core::circuit_open_message(name, breaker.consecutive_failures(), wait);
                let extra = [
                    ("tool", PyString::new(py, name).into_any()),
                    ("retriable", pyo3::types::PyBool::new(py, false).to_owned().into_any()),
                ];
                refusal(py, "circuit_open", &msg, &extra).map(Some)
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
        self.repeats.forget_scope(scope);
        self.results.forget_scope(scope);
    }

    /// `(repeat keys, idempotency keys, breakers)`: sizes, for tests and monitoring.
    fn sizes(&self) -> (usize, usize, usize) {
        (self.repeats.len(), self.results.len(), self.breakers.len())
    }
}

// ------------------------------------------------------------------ retry

/// Retry settings and the classification of failures by exception type (SPEC §7, §11).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct RetryPolicy {
    policy: core::RetryPolicy,
    transient: Py<PyTuple>,
}

impl RetryPolicy {
    fn classify(&self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<FailureKind> {
        let c = crate::py::tools::errors(py)?;
        if exc.is_instance(c.timeout.bind(py))? {
            return Ok(FailureKind::Deadline);
        }
        if exc.is_instance(c.argument.bind(py))? || exc.is_instance(c.shape.bind(py))? {
            return Ok(FailureKind::Permanent);
        }
        if exc.is_instance(c.tool_error.bind(py))? {
            let retriable = exc.getattr("retriable").and_then(|r| r.is_truthy()).unwrap_or(false);
            return Ok(if retriable { FailureKind::Transient } else { FailureKind::Permanent });
        }
        if exc.is_instance_of::<PyConnectionError>()
            || exc.is_instance_of::<PyTimeoutError>()
            || (!self.transient.bind(py).is_empty() && exc.is_instance(self.transient.bind(py).as_any())?)
        {
            return Ok(FailureKind::Transient);
        }
        Ok(FailureKind::Permanent)
    }
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
        let kind = self.classify(py, exc)?;
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
        let allowed = self.allow.entries();
        let msg = core::egress_denied_message(tool, url_arg, &denial, &allowed);
        let mut extra = vec![("tool", PyString::new(py, tool).into_any())];
        if let EgressDenial::HostNotAllowed(h) = &denial {
            extra.push(("host", PyString::new(py, h).into_any()));
        }
        extra.push(("allowed", allowed.into_pyobject(py)?.into_any()));
        refusal(py, "egress_denied", &msg, &extra).map(Some)
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

// ------------------------------------------------------------------ the worker pool

/// One sync tool body to run: `run(func, a, b)` in a worker thread (`run` is a
/// `contextvars.Context.run`); its outcome goes to `done` for the future `fut`.
struct Job {
    run: Py<PyAny>,
    func: Py<PyAny>,
    a: Py<PyAny>,
    b: Py<PyAny>,
    fut: Py<PyAny>,
    done: Arc<Handback>,
    /// An idle worker was promised to this job when it was submitted (`Pool::idle` already
    /// counts it as taken).
    reserved: bool,
}

/// A sync body's outcome for its future: `(future, ok, result or exception)`.
type Outcome = (Py<PyAny>, bool, Py<PyAny>);

/// The outcomes of one event loop's sync bodies, on their way back to it: `(future, ok, result
/// or exception)`. A worker queues its outcome and, with the GIL already released, writes one
/// byte to a socket the loop watches (`loop.add_reader(fileno, drain)`). Completing through
/// `loop.call_soon_threadsafe` instead would need the GIL again after its socket send, which
/// the loop's thread holds by then: one more thread hand-off per call.
struct Handback {
    outcomes: Mutex<Vec<Outcome>>,
    /// A wake-up byte is on its way and not yet read: later outcomes need no other.
    signaled: AtomicBool,
    reader: UnixStream,
    writer: UnixStream,
}

impl Handback {
    fn push(&self, outcome: Outcome) {
        // A poisoned lock only means a worker panicked while pushing: the queue is still whole.
        self.outcomes.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(outcome);
    }

    fn wake(&self) {
        if !self.signaled.swap(true, Ordering::AcqRel) {
            // Non-blocking; a full socket buffer already holds a wake-up.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// Where the sync bodies run for one event loop hand their outcomes back (see `Handback`).
#[pyclass(frozen, module = "agentkit_tools._core")]
struct Completions {
    inner: Arc<Handback>,
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        let inner = Handback { outcomes: Mutex::new(Vec::new()), signaled: AtomicBool::new(false), reader, writer };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The file descriptor the event loop watches for readability.
    fn fileno(&self) -> i32 {
        self.inner.reader.as_raw_fd()
    }

    /// Read the wake-up bytes, then call `resolve(fut, ok, value)` for every outcome queued so
    /// far, in completion order (the loop's reader callback). An error from `resolve` is raised
    /// after every outcome has been handed over.
    fn drain(&self, resolve: &Bound<'_, PyAny>) -> PyResult<()> {
        let inner = &self.inner;
        let mut buf = [0u8; 64];
        while let Ok(n) = (&inner.reader).read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        // After the read and before taking the queue: a worker that queues later writes again.
        inner.signaled.store(false, Ordering::Release);
        let outcomes = std::mem::take(&mut *inner.outcomes.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let mut first_error = None;
        for (fut, ok, value) in outcomes {
            if let Err(e) = resolve.call1((fut, ok, value)) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

struct Pool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Workers waiting for a job and not yet promised to one.
    idle: AtomicUsize,
    total: AtomicUsize,
    /// Jobs submitted and not yet finished.
    in_flight: AtomicUsize,
    max: usize,
}

/// The most worker threads (tool bodies block on I/O, so more than the CPU count).
fn max_workers() -> usize {
    std::thread::available_parallelism().map_or(8, |n| n.get()).saturating_mul(8).clamp(32, 256)
}

static POOL: OnceLock<Pool> = OnceLock::new();

fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        Pool { tx, rx, idle: AtomicUsize::new(0), total: AtomicUsize::new(0), in_flight: AtomicUsize::new(0), max: max_workers() }
    })
}

/// A worker keeps its Python thread state for its whole life and releases the GIL only while
/// it waits for a job: attaching per job would create and destroy a thread state each time.
fn worker(rx: Receiver<Job>) {
    let p = pool();
    Python::attach(|py| {
        let mut next = py.detach(|| {
            p.idle.fetch_add(1, Ordering::AcqRel);
            rx.recv().ok()
        });
        while let Some(Job { run, func, a, b, fut, done, reserved }) = next {
            if !reserved {
                // Nobody took this worker off the idle count for this job: it does so itself.
                let _ = p.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            }
            let (ok, value) = match run.bind(py).call1((func, a, b)) {
                Ok(v) => (true, v.unbind()),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            done.push((fut, ok, value));
            drop(run);
            // From here to the next job without the GIL: the loop's thread, woken, takes it at
            // once instead of waiting for this worker to hand it back.
            next = py.detach(|| {
                done.wake();
                p.idle.fetch_add(1, Ordering::AcqRel);
                p.in_flight.fetch_sub(1, Ordering::AcqRel);
                rx.recv().ok()
            });
        }
    });
}

/// Wait, with the GIL released, until every submitted job has finished (registered with
/// `atexit` by `agentkit_tools.invoker`). Before Python 3.14, a thread that touches Python
/// while the interpreter finalizes is ended with `pthread_exit`, which aborts the process when
/// it unwinds through Rust frames; so, as with `asyncio.to_thread`'s executor, interpreter exit
/// waits for sync tool bodies that are still running.
#[pyfunction]
fn drain_pool(py: Python<'_>) {
    let Some(p) = POOL.get() else { return };
    py.detach(|| {
        while p.in_flight.load(Ordering::Acquire) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}

/// Run `run(func, a, b)` on a worker thread of the core's pool and hand `(fut, ok, value)`
/// back through `done` (`ok` False: `value` is the exception raised), whose `drain` completes
/// the future on its loop. The pool grows on demand (an idle worker is reused, else a new
/// thread starts, up to 8 per CPU, at least 32) and its threads live for the process; a body
/// that never returns keeps its thread.
#[pyfunction]
fn submit_sync(
    run: Py<PyAny>,
    func: Py<PyAny>,
    a: Py<PyAny>,
    b: Py<PyAny>,
    done: &Bound<'_, Completions>,
    fut: Py<PyAny>,
) -> PyResult<()> {
    let p = pool();
    let reserved = p.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
    if !reserved && p.total.load(Ordering::Acquire) < p.max {
        let n = p.total.fetch_add(1, Ordering::AcqRel);
        let rx = p.rx.clone();
        let spawned = std::thread::Builder::new().name(format!("agentkit-tool-{n}")).spawn(move || worker(rx));
        if let Err(e) = spawned {
            p.total.fetch_sub(1, Ordering::AcqRel);
            if n == 0 {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start a worker thread: {e}")));
            }
        }
    }
    p.in_flight.fetch_add(1, Ordering::AcqRel);
    let done = done.get().inner.clone();
    p.tx.send(Job { run, func, a, b, fut, done, reserved }).map_err(|e| {
        p.in_flight.fetch_sub(1, Ordering::AcqRel);
        pyo3::exceptions::PyRuntimeError::new_err(format!("worker pool closed: {e}"))
    })
}

/// `(threads started, threads idle)` of the worker pool.
#[pyfunction]
fn pool_size() -> (usize, usize) {
    POOL.get().map_or((0, 0), |p| (p.total.load(Ordering::Acquire), p.idle.load(Ordering::Acquire)))
}
