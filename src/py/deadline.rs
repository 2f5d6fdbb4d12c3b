//! Call deadlines on an event loop: every pending deadline of one loop behind a single timer of
//! that loop (one asyncio timer per call would cost more than the rest of the call).
//!
//! A call's deadline is entered for the task that awaits the call ([`enter`]): at its end (on
//! `time.monotonic`, computed in one place, [`end_of`]) that task is cancelled at its `await`.
//! Leaving it ([`Entered::leave`]) tells the deadline's cancellation from the task's own: at the
//! deadline a success or a cancellation becomes `ToolTimeoutError`, but when the task was
//! cancelled by its own caller too (a task that counts the requests, `cancelling()`: every
//! task on Python 3.11+), that
//! cancellation propagates. A deadline is left exactly once, on every way the await ends (the
//! guard leaves it when dropped), so an armed one never cancels the task later.
//!
//! The loop's timer ([`LoopDeadlines`]) keeps a heap of `(end, entry)`; entries of calls that
//! ended are dropped lazily (all at once when none is pending); one `loop.call_later` is armed
//! for the earliest. The loop holds it through that armed timer only: with nothing pending it
//! may go, the next call makes a new one; nothing here keeps a loop alive.
use std::sync::{Mutex, PoisonError};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyWeakrefMethods, PyWeakrefReference};
use pyo3::{PyTraverseError, PyVisit};

use super::pipeline::{helpers, Helpers};
use crate::deadline::{self as core, Ended, Left, Timers};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LoopDeadlines>()?;
    m.add_function(wrap_pyfunction!(deadline_end, m)?)?;
    m.add_function(wrap_pyfunction!(pending_deadlines, m)?)
}

/// `time.monotonic()`, the clock every call's deadline is on (as `ToolContext.deadline`): on
/// 64-bit Linux read here, without a call into Python (see [`monotonic`]), elsewhere through
/// `time.monotonic`.
pub(super) fn now(py: Python<'_>, h: &Helpers) -> PyResult<f64> {
    if let Some(t) = monotonic() {
        return Ok(t);
    }
    h.monotonic.bind(py).call0()?.extract()
}

/// What `time.monotonic()` answers now, read as CPython reads it on Linux:
/// `clock_gettime(CLOCK_MONOTONIC)` (also the event loop's `time()`), its nanoseconds converted
/// by `crate::deadline::seconds_of_ns`. None where the clock cannot be read so.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[inline]
pub(super) fn monotonic() -> Option<f64> {
    use std::ffi::c_int;
    /// `struct timespec` on 64-bit Linux (`time_t` and `long` are 64-bit there).
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: c_int, tp: *mut Timespec) -> c_int;
    }
    const CLOCK_MONOTONIC: c_int = 1;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a `struct timespec` for the call to fill in.
    if unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) } != 0 {
        return None;
    }
    let ns = ts.tv_sec.checked_mul(1_000_000_000)?.checked_add(ts.tv_nsec)?;
    Some(core::seconds_of_ns(ns))
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
#[inline]
pub(super) fn monotonic() -> Option<f64> {
    None
}

/// The end of a call of `limit` seconds (None: no deadline) starting now, on `time.monotonic`:
/// the one place a call's end is computed (see [`end_since`]).
pub(super) fn end_of(py: Python<'_>, h: &Helpers, limit: Option<f64>) -> PyResult<Option<f64>> {
    match limit {
        Some(_) => Ok(core::end_of(now(py, h)?, limit)),
        None => Ok(None),
    }
}

/// [`end_of`] a call that started at `started` (`Instant` reads the clock `time.monotonic`
/// reads, without a call into Python): for a body the core stepped itself, whose end is only
/// needed when it did not finish in that step.
pub(super) fn end_since(
    py: Python<'_>,
    h: &Helpers,
    limit: Option<f64>,
    started: std::time::Instant,
) -> PyResult<Option<f64>> {
    match limit {
        Some(_) => Ok(core::end_since(now(py, h)?, started.elapsed().as_secs_f64(), limit)),
        None => Ok(None),
    }
}

/// The end on `time.monotonic` of a call of `limit_s` seconds starting now (None: no deadline),
/// for a caller of the core that starts a call's clock itself (see [`end_of`]).
#[pyfunction]
fn deadline_end(py: Python<'_>, limit_s: Option<f64>) -> PyResult<Option<f64>> {
    let _in = super::shutdown::inside(py);
    end_of(py, helpers(py)?, limit_s)
}

/// Whether `end` (None: no deadline) has passed: nothing past the deadline is a success.
pub(super) fn passed(py: Python<'_>, h: &Helpers, end: Option<f64>) -> PyResult<bool> {
    match end {
        Some(_) => Ok(core::passed(now(py, h)?, end)),
        None => Ok(false),
    }
}

/// `ToolTimeoutError(name, limit)`; `name` is the tool's name, or the tool (its `name` read).
pub(super) fn timeout(py: Python<'_>, h: &Helpers, name: &Bound<'_, PyAny>, limit: Option<f64>) -> PyErr {
    let name = if name.is_instance_of::<PyString>() || name.is_none() {
        Ok(name.clone())
    } else {
        name.getattr(intern!(py, "name"))
    };
    match name.and_then(|n| h.timeout_error.bind(py).call1((n, limit))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// Whether `task` counts its cancellation requests (`cancelling()` / `uncancel()`): every
/// asyncio task on Python 3.11+; on 3.10 a task of a class that adds the count (the 3.11 task a
/// backport's runner makes, as pytest-asyncio's does there), none of the interpreter's own.
pub(super) fn counts_cancels(py: Python<'_>, h: &Helpers, task: &Bound<'_, PyAny>) -> bool {
    h.counts_cancels || task.hasattr(intern!(py, "uncancel")).unwrap_or(false)
}

/// `task.cancelling()` less a cancellation requested but not thrown into the task yet (it
/// arrives at the task's next suspension, and is the task's own, not a body's); 0 for a task
/// that does not count (see [`counts_cancels`]).
pub(super) fn cancels_delivered(py: Python<'_>, h: &Helpers, task: &Bound<'_, PyAny>) -> PyResult<isize> {
    if !counts_cancels(py, h, task) {
        return Ok(0);
    }
    let n: isize = task.call_method0(intern!(py, "cancelling"))?.extract()?;
    let pending = h
        .getattr
        .bind(py)
        .call1((task, intern!(py, "_must_cancel"), false))?
        .is_truthy()?;
    Ok(core::delivered(n, pending))
}

/// The deadlines of one event loop behind one timer (`crate::deadline::Timers`, see the module);
/// calling it is the timer firing.
#[pyclass(module = "agentkit_tools._core", weakref)]
pub struct LoopDeadlines {
    lp: Py<PyWeakrefReference>,
    timers: Timers<Py<PyAny>>,
    /// The armed timer (weakly: the loop holds it).
    handle: Option<Py<PyWeakrefReference>>,
    /// `time.get_clock_info("monotonic").resolution`: a timer fires up to that early.
    resolution: f64,
}

/// Each loop's timer, weakly (the loop holds its timer while one is armed): `(loop, timer)`.
static LOOPS: Mutex<Vec<(Py<PyWeakrefReference>, Py<PyWeakrefReference>)>> = Mutex::new(Vec::new());

/// The timer of loop `lp`, if it has one now.
fn find<'py>(py: Python<'py>, lp: &Bound<'py, PyAny>) -> Option<Bound<'py, LoopDeadlines>> {
    let g = LOOPS.lock().unwrap_or_else(PoisonError::into_inner);
    for (l, t) in g.iter().rev() {
        if l.bind(py).upgrade().is_some_and(|l| l.is(lp)) {
            return t.bind(py).upgrade().and_then(|t| t.cast_into::<LoopDeadlines>().ok());
        }
    }
    None
}

/// The timer of loop `lp`, made if it has none. (While a caller holds it, it stays the loop's.)
pub(super) fn timer_of<'py>(py: Python<'py>, lp: &Bound<'py, PyAny>) -> PyResult<Bound<'py, LoopDeadlines>> {
    if let Some(t) = find(py, lp) {
        return Ok(t);
    }
    let resolution: f64 = py
        .import("time")?
        .call_method1("get_clock_info", ("monotonic",))?
        .getattr("resolution")?
        .extract()?;
    let t = Bound::new(
        py,
        LoopDeadlines {
            lp: PyWeakrefReference::new(lp)?.unbind(),
            timers: Timers::new(),
            handle: None,
            resolution,
        },
    )?;
    let entry = (
        PyWeakrefReference::new(lp)?.unbind(),
        PyWeakrefReference::new(&t)?.unbind(),
    );
    let mut g = LOOPS.lock().unwrap_or_else(PoisonError::into_inner);
    // Loops gone, or whose timer is gone, are forgotten (the latter replaced by this one).
    g.retain(|(l, t)| t.bind(py).upgrade().is_some() && l.bind(py).upgrade().is_some_and(|l| !l.is(lp)));
    g.push(entry);
    Ok(t)
}

impl LoopDeadlines {
    /// Arm the timer for `when` (its previous one cancelled). Called with no borrow held.
    fn arm(slf: &Bound<'_, Self>, when: f64) -> PyResult<()> {
        let py = slf.py();
        let (lp, old) = {
            let mut t = slf.try_borrow_mut()?;
            t.timers.set_armed(Some(when));
            (t.lp.bind(py).upgrade(), t.handle.take())
        };
        if let Some(old) = old.and_then(|o| o.bind(py).upgrade()) {
            old.call_method0(intern!(py, "cancel"))?;
        }
        let Some(lp) = lp else {
            slf.try_borrow_mut()?.timers.set_armed(None);
            return Ok(()); // its loop is gone: nothing is left to cancel
        };
        let delay = core::timer_delay(when, now(py, helpers(py)?)?);
        let armed = lp.call_method1(intern!(py, "call_later"), (delay, slf));
        let mut t = slf.try_borrow_mut()?;
        match armed {
            Ok(handle) => {
                t.handle = Some(PyWeakrefReference::new(&handle)?.unbind());
                Ok(())
            }
            Err(e) => {
                t.timers.set_armed(None);
                Err(e)
            }
        }
    }

    /// Add the deadline at `when` of `task`; returns its entry.
    fn add(slf: &Bound<'_, Self>, when: f64, task: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (seq, arm) = slf.try_borrow_mut()?.timers.add(when, task.clone().unbind());
        if arm {
            if let Err(e) = Self::arm(slf, when) {
                slf.try_borrow_mut()?.timers.remove(seq);
                return Err(e);
            }
        }
        Ok(seq)
    }
}

#[pymethods]
impl LoopDeadlines {
    /// The timer fired: every deadline due is expired (its task cancelled), and the timer is
    /// armed for the next one.
    fn __call__(slf: &Bound<'_, Self>) -> PyResult<()> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let h = helpers(py)?;
        let (due, next) = {
            let mut t = slf.try_borrow_mut()?;
            t.handle = None;
            let resolution = t.resolution;
            t.timers.fire(now(py, h)?, resolution, |task| task.clone_ref(py))
        };
        let mut out = Ok(());
        if let Some(next) = next {
            out = Self::arm(slf, next);
        }
        for task in due {
            if let Err(e) = task.bind(py).call_method0(intern!(py, "cancel")) {
                if out.is_ok() {
                    out = Err(e);
                }
            }
        }
        out
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lp)?;
        for task in self.timers.tasks() {
            visit.call(task)?;
        }
        if let Some(h) = &self.handle {
            visit.call(h)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.timers.clear();
        self.handle = None;
    }
}

/// Deadlines pending on loop `lp` (entered, neither left nor expired).
#[pyfunction]
fn pending_deadlines(lp: &Bound<'_, PyAny>) -> PyResult<usize> {
    let _in = super::shutdown::inside(lp.py());
    let py = lp.py();
    match find(py, lp) {
        Some(t) => Ok(t.try_borrow()?.timers.live()),
        None => Ok(0),
    }
}

/// An entered deadline.
struct Held {
    timer: Py<LoopDeadlines>,
    seq: u64,
    task: Py<PyAny>,
    /// The task's delivered cancellations when entered (see [`cancels_delivered`]).
    cancelling: isize,
    /// Whether the task counts its cancellation requests ([`counts_cancels`]).
    counts: bool,
    limit: Option<f64>,
    /// The tool's name, or the tool (its `name` read when a timeout names it).
    name: Py<PyAny>,
}

/// A call's entered deadline (none without a limit or a task), left exactly once: by
/// [`Entered::leave`] when the await ends, else when it is dropped (a step that failed inside
/// the core, an await dropped or collected while suspended, never closed). A deadline never left
/// would cancel the task later, long after the call ended.
pub(super) struct Entered(Option<Held>);

/// Enter the deadline `end` (on `time.monotonic`; `limit`: its length, `name`: the tool's name,
/// or the tool, for `ToolTimeoutError`) for `task` on loop `lp`; `cancelling`: the task's
/// delivered cancellations now ([`cancels_delivered`]).
pub(super) fn enter_for(
    lp: &Bound<'_, PyAny>,
    task: &Bound<'_, PyAny>,
    cancelling: isize,
    end: f64,
    limit: Option<f64>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Entered> {
    enter_in(&timer_of(lp.py(), lp)?, task, cancelling, end, limit, name)
}

/// [`enter_for`] where the caller holds the timer of the task's loop (`timer_of`).
pub(super) fn enter_in(
    timer: &Bound<'_, LoopDeadlines>,
    task: &Bound<'_, PyAny>,
    cancelling: isize,
    end: f64,
    limit: Option<f64>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Entered> {
    let py = timer.py();
    let seq = LoopDeadlines::add(timer, end, task)?;
    let counts = counts_cancels(py, helpers(py)?, task);
    Ok(Entered(Some(Held {
        timer: timer.clone().unbind(),
        seq,
        task: task.clone().unbind(),
        cancelling,
        counts,
        limit,
        name: name.clone().unbind(),
    })))
}

/// Enter the deadline `end` for the current task of the running loop (see [`enter_for`]); none
/// when there is no current task.
pub(super) fn enter(
    py: Python<'_>,
    h: &Helpers,
    end: f64,
    limit: Option<f64>,
    name: &Bound<'_, PyAny>,
) -> PyResult<Entered> {
    let task = h.current_task.bind(py).call0()?;
    if task.is_none() {
        return Ok(Entered::none());
    }
    let lp = task.call_method0(intern!(py, "get_loop"))?;
    let cancelling = cancels_delivered(py, h, &task)?;
    enter_for(&lp, &task, cancelling, end, limit, name)
}

impl Entered {
    pub(super) const fn none() -> Self {
        Entered(None)
    }

    /// Whether it expired (its task was cancelled by it).
    pub(super) fn expired(&self, py: Python<'_>) -> bool {
        self.0
            .as_ref()
            .is_some_and(|d| d.timer.borrow(py).timers.expired(d.seq))
    }

    /// Leave it, the await ending by `exc` (None: a success). At the deadline this raises
    /// `ToolTimeoutError` for a success or a cancellation, unless the task was cancelled by its
    /// own caller too (that cancellation then propagates).
    pub(super) fn leave(&mut self, py: Python<'_>, exc: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.leave_cancelled(py, exc, false)
    }

    /// [`Entered::leave`] where the caller knows whether it cancelled the task itself
    /// (`cancelled_by_caller`: a turn cancels the tasks of its calls). That tells a task that
    /// does not count its cancellation requests (Python 3.10's) what a counting task's count
    /// tells: the caller's cancellation reached it, delivered before the deadline and swallowed
    /// by the body, or requested in the same pass; it is still pending and propagates.
    pub(super) fn leave_cancelled(
        &mut self,
        py: Python<'_>,
        exc: Option<&Bound<'_, PyAny>>,
        cancelled_by_caller: bool,
    ) -> PyResult<()> {
        let Some(d) = self.0.take() else { return Ok(()) };
        if !d.timer.bind(py).try_borrow_mut()?.timers.remove(d.seq) {
            return Ok(());
        }
        let h = helpers(py)?;
        let remaining = if d.counts {
            Some(
                d.task
                    .bind(py)
                    .call_method0(intern!(py, "uncancel"))?
                    .extract::<isize>()?,
            )
        } else {
            None
        };
        let ended = match exc {
            None => Ended::Success,
            Some(e) if e.is_instance(h.cancelled_error.bind(py))? => Ended::Cancelled,
            Some(_) => Ended::Raised,
        };
        match core::left(remaining, d.cancelling, cancelled_by_caller, ended) {
            Left::Timeout => Err(timeout(py, h, d.name.bind(py), d.limit)),
            Left::AsIs => Ok(()),
        }
    }

    pub(super) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(d) = &self.0 {
            visit.call(&d.timer)?;
            visit.call(&d.task)?;
            visit.call(&d.name)?;
        }
        Ok(())
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.is_none() {
            return;
        }
        // Left with no outcome to tell: what it would raise has nobody to reach.
        super::shutdown::when_dropped(|py| drop(self.leave(py, None)));
    }
}
