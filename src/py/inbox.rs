//! The hand-off between synchronous callers (`dispatch`) and the process's long-lived event loop
//! kept for them (`_runner.background_loop`): `LoopInbox` queues a coroutine for the loop's own
//! thread and the caller waits for its outcome with the interpreter lock released. Both sides
//! spin briefly before they park (`crate::handoff::Inbox` and `Slot`): the loop's thread, when it
//! has nothing else to do, spins for the next call in its selector (`_runner._InboxSelector`
//! asks `idle` before it polls) and publishes the outcomes it stored only once it has released
//! the interpreter lock there; so calls that follow each other pass with no kernel wake-up on
//! either side. A call queued while the loop's thread is not spinning wakes it through the loop
//! (`loop.call_soon_threadsafe`).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use super::shutdown::{inside, Inside};
use crate::handoff::{self, lock, Inbox, Slot, Spin};

/// One coroutine run on the loop for a synchronous caller: the coroutine (and a copy of its
/// caller's context, its task's) until the loop's thread starts it, its task while it runs, the
/// slot its outcome is handed over in.
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct LoopJob {
    coro: Mutex<Option<(Py<PyAny>, Py<PyAny>)>>,
    task: Mutex<Option<Py<PyAny>>>,
    /// Its caller gave up (a timeout, a signal): it is not started, or its task is cancelled.
    cancelled: AtomicBool,
    slot: Slot<(bool, Py<PyAny>)>,
}

/// The inbox of one event loop for synchronous callers (see the module).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct LoopInbox {
    jobs: Inbox<Py<LoopJob>>,
    /// Jobs started and their tasks, looked at by `idle` (on the loop's thread).
    running: Mutex<Vec<(Py<LoopJob>, Py<PyAny>)>>,
    /// Jobs whose outcome is stored, published at the loop thread's next `idle`.
    finished: Mutex<Vec<Py<LoopJob>>>,
    results: Spin,
    lp: Py<PyAny>,
}

/// `loop.call_soon_threadsafe(*args)`.
fn soon<'py>(lp: &Bound<'py, PyAny>, args: impl pyo3::call::PyCallArgs<'py>) -> PyResult<()> {
    lp.call_method1(intern!(lp.py(), "call_soon_threadsafe"), args)
        .map(drop)
}

/// `contextvars.copy_context`.
static COPY_CONTEXT: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// `_start_queued`, made once.
static START: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

impl LoopJob {
    /// On the loop's thread: start the job (a task of the loop: returned), or close its coroutine
    /// when its caller gave up before it started.
    fn start<'py>(slf: &Bound<'py, Self>, lp: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = slf.py();
        let j = slf.get();
        let Some((coro, context)) = lock(&j.coro).take() else {
            return Ok(None);
        };
        let coro = coro.into_bound(py);
        if j.cancelled.load(Ordering::Relaxed) {
            return coro.call_method0(intern!(py, "close")).map(|_| None);
        }
        // Made in the caller's context: the task runs in a copy of it.
        let create = lp.getattr(intern!(py, "create_task"))?;
        let task = context.bind(py).call_method1(intern!(py, "run"), (create, coro))?;
        *lock(&j.task) = Some(task.clone().unbind());
        Ok(Some(task))
    }
}

/// The outcome of a task that is done: `(True, result)`, `(False, exception)`; cancelled (by its
/// caller giving up): `CancelledError`.
fn outcome(py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<(bool, Py<PyAny>)> {
    if task.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
        let cancelled = py.import("concurrent.futures")?.getattr("CancelledError")?.call0()?;
        return Ok((false, cancelled.unbind()));
    }
    Ok(match task.call_method0(intern!(py, "exception"))? {
        e if e.is_none() => (true, task.call_method0(intern!(py, "result"))?.unbind()),
        e => (false, e.unbind()),
    })
}

#[pymethods]
impl LoopJob {
    /// On the loop's thread: its caller gave up; its task is cancelled, or it never starts.
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        let _in = super::shutdown::inside(py);
        self.cancelled.store(true, Ordering::Relaxed);
        let task = lock(&self.task).take();
        match task {
            Some(task) => task.bind(py).call_method0(intern!(py, "cancel")).map(drop),
            None => Ok(()),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(c) = self.coro.try_lock() {
            if let Some((coro, context)) = c.as_ref() {
                visit.call(coro)?;
                visit.call(context)?;
            }
        }
        if let Ok(t) = self.task.try_lock() {
            visit.call(t.as_ref())?;
        }
        match self.slot.peek(|(_, v)| visit.call(v)) {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

#[pymethods]
impl LoopInbox {
    #[new]
    fn new(py: Python<'_>, event_loop: Py<PyAny>) -> Self {
        let _in = super::shutdown::inside(py);
        LoopInbox {
            jobs: Inbox::new(),
            running: Mutex::new(Vec::new()),
            finished: Mutex::new(Vec::new()),
            results: Spin::default(),
            lp: event_loop,
        }
    }

    /// Run `coro` on the loop (its task in a copy of this thread's context) and wait for its
    /// outcome (this thread holds no interpreter lock meanwhile, and handles signals every 50 ms),
    /// at most `timeout_s` seconds (None: as long as it takes). Returns `(True, value)`, raises
    /// what it raised; `(False, None)` once the wait is over, the coroutine then cancelled (or
    /// never started), as it is when a signal's exception is raised here.
    #[pyo3(signature = (coro, timeout_s))]
    fn call<'py>(
        slf: &Bound<'py, Self>,
        coro: Py<PyAny>,
        timeout_s: Option<f64>,
    ) -> PyResult<(bool, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(slf.py());
        let mut gate: Option<Inside> = Some(_in);
        let py = slf.py();
        let me = slf.get();
        let copy = COPY_CONTEXT.get_or_try_init(py, || {
            py.import("contextvars")
                .and_then(|m| m.getattr("copy_context"))
                .map(Bound::unbind)
        })?;
        let context = copy.bind(py).call0()?.unbind();
        let job = Py::new(
            py,
            LoopJob {
                coro: Mutex::new(Some((coro, context))),
                task: Mutex::new(None),
                cancelled: AtomicBool::new(false),
                slot: Slot::new(),
            },
        )?;
        let until = crate::deadline::instant_after(Instant::now(), timeout_s);
        let left = || until.map(|d| d.saturating_duration_since(Instant::now()));
        let queued = job.clone_ref(py);
        drop(gate.take());
        let wake = py.detach(|| me.jobs.put(queued));
        gate = Some(inside(py));
        if wake {
            let start = START.get_or_try_init(py, || {
                wrap_pyfunction!(_start_queued, py).map(|f| f.into_any().unbind())
            })?;
            soon(me.lp.bind(py), (start.bind(py), slf))?;
        }
        let j = job.get();
        let mut spin = true;
        loop {
            drop(gate.take());
            let published = py.detach(|| {
                let wake_at = handoff::next_wake(Instant::now(), left());
                me.results.wait_result(&j.slot, Some(wake_at), spin, true)
            });
            gate = Some(inside(py));
            spin = false;
            if published {
                break;
            }
            let signalled = py.check_signals();
            if handoff::gives_up(signalled.is_err(), Instant::now(), until) {
                if !j.slot.abandon() {
                    break; // published meanwhile
                }
                let cancel = job.bind(py).getattr(intern!(py, "cancel"))?;
                soon(me.lp.bind(py), (cancel,)).or_else(|e| {
                    // The loop is closed: nothing of it runs again.
                    e.write_unraisable(py, Some(slf.as_any()));
                    Ok::<_, PyErr>(())
                })?;
                signalled?;
                return Ok((false, py.None().into_bound(py)));
            }
        }
        drop(gate);
        match j.slot.take() {
            Some((true, value)) => Ok((true, value.into_bound(py))),
            Some((false, exc)) => Err(PyErr::from_value(exc.into_bound(py))),
            None => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "the loop handed over no outcome",
            )),
        }
    }

    /// On the loop's thread, in its selector before it polls with `timeout` (seconds; None: until
    /// something happens): the outcomes of the tasks done since are stored and published (with
    /// the interpreter lock released: a task's outcome is read here, not by a done callback,
    /// which would take the loop one more pass), then, when the loop has nothing else to do, this
    /// thread spins briefly for the next call. True when calls are queued: `start` them.
    fn idle(&self, py: Python<'_>, timeout: Option<f64>) -> bool {
        let _in = super::shutdown::inside(py);
        let mut finished = std::mem::take(&mut *lock(&self.finished));
        let mut running = std::mem::take(&mut *lock(&self.running));
        running.retain(|(job, task)| {
            let task = task.bind(py);
            match task.call_method0(intern!(py, "done")).and_then(|d| d.is_truthy()) {
                Ok(false) => return true,
                Ok(true) => {
                    let out = outcome(py, task).unwrap_or_else(|e| (false, e.into_value(py).into_any()));
                    job.get().slot.store(out);
                }
                Err(e) => job.get().slot.store((false, e.into_value(py).into_any())),
            }
            lock(&job.get().task).take();
            finished.push(job.clone_ref(py));
            false
        });
        lock(&self.running).extend(running);
        if handoff::idle_at_once(finished.is_empty(), timeout) {
            return self.jobs.has_jobs(); // nothing to publish, no time to spin
        }
        let timeout =
            timeout.map(|t| std::time::Duration::try_from_secs_f64(t.max(0.0)).unwrap_or(std::time::Duration::MAX));
        drop(_in);
        let queued = py.detach(|| {
            for j in &finished {
                j.get().slot.publish();
            }
            self.jobs.idle(timeout)
        });
        let _in = super::shutdown::inside(py);
        drop(finished);
        queued
    }

    /// On the loop's thread: start the calls queued (each a task of the loop).
    fn start(slf: &Bound<'_, Self>) -> PyResult<()> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let me = slf.get();
        let lp = me.lp.bind(py);
        for job in me.jobs.drain() {
            let job = job.into_bound(py);
            match LoopJob::start(&job, lp) {
                Ok(Some(task)) => lock(&me.running).push((job.unbind(), task.unbind())),
                Ok(None) => {}
                Err(e) => {
                    // Its caller gets what failed.
                    job.get().slot.store((false, e.into_value(py).into_any()));
                    lock(&me.finished).push(job.unbind());
                }
            }
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(f) = self.finished.try_lock() {
            for j in f.iter() {
                visit.call(j)?;
            }
        }
        if let Ok(r) = self.running.try_lock() {
            for (j, t) in r.iter() {
                visit.call(j)?;
                visit.call(t)?;
            }
        }
        visit.call(&self.lp)
    }
}

/// `inbox.start()`, as the loop's callback that a caller's wake-up schedules.
#[pyfunction]
fn _start_queued(inbox: &Bound<'_, LoopInbox>) -> PyResult<()> {
    let _in = super::shutdown::inside(inbox.py());
    LoopInbox::start(inbox)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LoopInbox>()?;
    m.add_class::<LoopJob>()
}
