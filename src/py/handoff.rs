//! The worker pool's hand-off (`crate::handoff`) for Python: `WorkQueue`, a job queue whose
//! waiting workers spin briefly then park, and `ResultSlot`, a one-shot result cell; every wait
//! runs with the interpreter lock released. Conversions only.
//!
//! A thread still waiting here when the interpreter finalizes never runs Python again: pyo3
//! re-attaches through `PyEval_RestoreThread`, which during finalization leaves the thread
//! hanging (as Python 3.14 does) instead of unwinding it through Rust frames.
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::handoff::{Mailbox, Slot, SPIN_MAX};

type Outcome = (bool, Py<PyAny>);

fn until(timeout: Option<f64>) -> Option<Instant> {
    // NaN and negative waits are no wait; an absurdly long one is no deadline.
    timeout
        .map(|t| if t > 0.0 { t } else { 0.0 })
        .and_then(|t| Instant::now().checked_add(Duration::try_from_secs_f64(t).ok()?))
}

/// A one-shot cell for a call's outcome `(ok, value)` between the worker that runs it and the
/// caller that waits for it; `done`: the caller's other way back, for an outcome published
/// after it abandoned the slot.
#[pyclass(frozen, module = "agentkit_tools._core", name = "ResultSlot")]
pub struct PyResultSlot {
    inner: Slot<Outcome>,
    #[pyo3(get)]
    done: Option<Py<PyAny>>,
}

#[pymethods]
impl PyResultSlot {
    // The garbage collector sees `done` and a stored outcome: a failed call's exception, whose
    // traceback holds the waiter's frame and so this slot, is collected with its cycle.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.done)?;
        self.inner.peek(|(_, v)| visit.call(v)).unwrap_or(Ok(()))
    }

    #[new]
    #[pyo3(signature = (done=None))]
    fn new(done: Option<Py<PyAny>>) -> Self {
        PyResultSlot {
            inner: Slot::new(),
            done,
        }
    }

    /// Store the outcome; the waiter sees it once published (`WorkQueue.take(slot)`).
    fn set(&self, ok: bool, value: Py<PyAny>) {
        self.inner.store((ok, value));
    }

    /// Take the stored outcome out: `(ok, value)`. RuntimeError when there is none.
    fn result(&self) -> PyResult<Outcome> {
        self.inner
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the result slot holds no outcome"))
    }

    /// The waiter stops waiting: True when nothing was published yet (an outcome published
    /// later stays with the worker), False when it was (take it with `result()`).
    fn abandon(&self) -> bool {
        self.inner.abandon()
    }
}

/// The FIFO of jobs of the worker pool, and the waits of its workers and callers.
#[pyclass(frozen, module = "agentkit_tools._core", name = "WorkQueue")]
pub struct PyWorkQueue {
    inner: Mailbox<Py<PyAny>>,
}

#[pymethods]
impl PyWorkQueue {
    #[new]
    fn new() -> Self {
        PyWorkQueue { inner: Mailbox::new() }
    }

    /// Promise the next job to an idle worker: True when one was idle, False when all are busy.
    fn claim(&self) -> bool {
        self.inner.claim()
    }

    /// Workers waiting for a job that no job was promised to.
    fn idle(&self) -> usize {
        self.inner.idle()
    }

    /// Queue `job` (`claimed`: the value `claim()` returned for it).
    fn put(&self, job: Py<PyAny>, claimed: bool) {
        self.inner.put(job, claimed);
    }

    /// The next job (waits as long as it takes). With `publish`, first make that slot's stored
    /// outcome visible to its waiter — once the interpreter lock is released, so the waiter
    /// wakes to a free lock; returns None instead of a job when that waiter had abandoned the
    /// slot (the outcome is still in it, for its other way back).
    #[pyo3(signature = (publish=None))]
    fn take(&self, py: Python<'_>, publish: Option<PyRef<'_, PyResultSlot>>) -> Option<Py<PyAny>> {
        let slot = publish.as_deref().map(|s| &s.inner);
        py.detach(|| {
            if let Some(s) = slot {
                if !s.publish() {
                    return None;
                }
            }
            Some(self.inner.take())
        })
    }

    /// Queue `job` once the interpreter lock is released (a worker that takes it at once finds
    /// the lock free), then wait for `slot` up to `timeout` seconds (None: no limit): spinning
    /// first (at most `HANDOFF_SPIN_S`, less while recent results took longer), then, with `park`,
    /// parked. Returns the outcome `(ok, value)`, taken out of the slot, or None when it was not
    /// published in time.
    #[pyo3(signature = (job, claimed, slot, timeout, park=true))]
    fn run(
        &self,
        py: Python<'_>,
        job: Py<PyAny>,
        claimed: bool,
        slot: PyRef<'_, PyResultSlot>,
        timeout: Option<f64>,
        park: bool,
    ) -> Option<Outcome> {
        let (cell, until) = (&slot.inner, until(timeout));
        let published = py.detach(|| {
            self.inner.put(job, claimed);
            self.inner.wait_result(cell, until, true, park)
        });
        if published {
            cell.take()
        } else {
            None
        }
    }

    /// Wait for `slot` up to `timeout` seconds (None: no limit), parked. Returns the outcome
    /// `(ok, value)`, taken out of the slot, or None when it was not published in time.
    #[pyo3(signature = (slot, timeout))]
    fn wait(&self, py: Python<'_>, slot: PyRef<'_, PyResultSlot>, timeout: Option<f64>) -> Option<Outcome> {
        let (cell, until) = (&slot.inner, until(timeout));
        if py.detach(|| self.inner.wait_result(cell, until, false, true)) {
            cell.take()
        } else {
            None
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyResultSlot>()?;
    m.add_class::<PyWorkQueue>()?;
    m.add("HANDOFF_SPIN_S", SPIN_MAX.as_secs_f64())?;
    Ok(())
}
