//! `BodyAwait`: an `async` tool body awaited in the caller's own task (no task of its own), on
//! every path but the first attempt of an `invoke_many` turn's body (a task of its own, see
//! `super::relay`). The caller awaits it (`await BodyAwait(coro, limit_s, name)`, or the awaitable
//! of a `STEP_AWAIT` the core made after taking the body's first step itself); the coroutine
//! machinery drives it (`send`/`throw`/`close`), so nothing here is a call the caller makes.
//!
//! Each step of the body runs in one copy of the caller's `contextvars` and as the body's own
//! stand-in task (`BodyTask` below, `asyncio.current_task()` meanwhile): what the body enters
//! that remembers its task (`asyncio.timeout`, a task group, an anyio cancel scope) cancels the
//! body, never the caller. What the body yields goes to the task untouched, except a task or a
//! gathering future, which the task waits on through a plain future completed with it
//! (cancelling the caller then never waits for that task's own clean-up); what the task sends or
//! throws goes to the body.
//!
//! The deadline (an entry of the loop's deadline timer, `super::deadline`) is entered when the caller first awaits, and left on
//! every way the await ends (also a failure inside the core, or the await dropped unclosed).
//! A cancellation of the caller's task reaches the body as a cancellation of the body's task; a
//! `CancelledError` the body's own scopes caused is the body's. At the deadline, if the body's clean-up suspends,
//! it goes on in a task of its own (a `BodyAwait` in clean-up mode, held by
//! `_runner.hold_clean_up`, its outcome dropped) and the caller gets `ToolTimeoutError` at
//! once; the caller's own cancellation is the body's to act on (it propagates when the body
//! lets it through). A result past the deadline is never a success. Whatever the body raises
//! reaches the caller as it is, but a `BaseException` that is not an `Exception`: wrapped in
//! `_runner.BodyFailed` (the caller's own cancellation, `KeyboardInterrupt`/`SystemExit`
//! excepted). A clean-up's task, cancelled when `asyncio.run` ends or the loop shuts down,
//! closes a body that swallows that cancellation too: it never keeps the loop from ending.
use pyo3::exceptions::{PyException, PyGeneratorExit, PyKeyboardInterrupt, PyStopIteration, PySystemExit};
use pyo3::intern;
use pyo3::prelude::*;
use std::sync::{Mutex, PoisonError};

use pyo3::types::{PySet, PyTuple, PyWeakrefMethods, PyWeakrefReference};
use pyo3::{PyTraverseError, PyTypeInfo, PyVisit};

use super::coroutine::{coroutine_methods, running, Coroutine};
use super::deadline::{self, cancels_delivered, timeout, Entered};
use super::pipeline::{helpers, swap_task, Helpers};
use crate::body::{self, Await, CallersCancel, Closing, Ending, Entry, Resume, Thrown, ThrownIn};
use crate::cancel::{self, Cancel, Requests};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BodyAwait>()?;
    m.add_class::<BodyTask>()
}

/// What `exc` is, by class, as the core reads it (`crate::body::Thrown`; the class of a
/// cancellation that cannot be read counts as one).
pub(super) fn thrown(exc: &Bound<'_, PyAny>) -> Thrown {
    let py = exc.py();
    Thrown {
        exception: exc.is_instance_of::<PyException>(),
        stop_iteration: exc.is_instance_of::<PyStopIteration>(),
        stop: exc.is_instance_of::<PyKeyboardInterrupt>() || exc.is_instance_of::<PySystemExit>(),
        generator_exit: exc.is_instance_of::<PyGeneratorExit>(),
        cancelled: helpers(py).map_or(true, |h| exc.is_instance(h.cancelled_error.bind(py)).unwrap_or(false)),
    }
}

/// `thrown` of a raised error.
pub(super) fn thrown_err(py: Python<'_>, e: &PyErr) -> Thrown {
    thrown(e.value(py).as_any())
}

/// Closing or cancelling a body ended with `out`: what propagates of it (see
/// `body::close_propagates`), else nothing.
fn close_outcome<T>(py: Python<'_>, out: PyResult<T>, no_loop: bool) -> PyResult<()> {
    match out {
        Err(e) if body::close_propagates(Some(thrown_err(py, &e)), no_loop) => Err(e),
        _ => Ok(()),
    }
}

/// What a body's `BaseException` that is not an `Exception` becomes on its way to the caller
/// (`_runner._carried`, see `body::wrapped`): `KeyboardInterrupt`/`SystemExit` as they are,
/// anything else wrapped in `BodyFailed`.
fn carried(py: Python<'_>, h: &Helpers, e: PyErr) -> PyErr {
    if !body::wrapped(thrown_err(py, &e)) {
        return e;
    }
    match h.body_failed.bind(py).call1((e.value(py),)) {
        Ok(w) => {
            let _ = w.setattr(intern!(py, "__suppress_context__"), true);
            PyErr::from_value(w)
        }
        Err(e) => e,
    }
}

/// The done callbacks of a body's task: `(fn, context)` each.
type Callbacks = Vec<(Py<PyAny>, Option<Py<PyAny>>)>;

/// The task an `async` body runs as: `asyncio.current_task()` during each of its steps,
/// whichever task drives them (the caller's, or a clean-up's task past the deadline). It does
/// what `asyncio.timeout`, `asyncio.TaskGroup` and anyio's cancel scopes ask of a task, with a
/// task's semantics: `cancel()` cancels the future the body waits on (else the body gets
/// `CancelledError` at its next step), and counts, as do `cancelling()` / `uncancel()`. So a
/// scope the body entered cancels the body, never the task driving it.
#[pyclass(module = "agentkit_tools._core", weakref)]
pub struct BodyTask {
    lp: Py<PyAny>,
    coro: Py<PyAny>,
    /// The future the body waits on (None while a step runs).
    waiter: Option<Py<PyAny>>,
    /// Its cancellation requests (`crate::cancel::Requests`); a deferred one is thrown with
    /// `message`.
    requests: Requests,
    message: Option<Py<PyAny>>,
    cancelled: bool,
    /// What to call when the body ends; None once it has ended.
    callbacks: Option<Callbacks>,
    name: Option<String>,
}

impl BodyTask {
    fn new(lp: Bound<'_, PyAny>, coro: &Bound<'_, PyAny>) -> Self {
        BodyTask {
            lp: lp.unbind(),
            coro: coro.clone().unbind(),
            waiter: None,
            requests: Requests::default(),
            message: None,
            cancelled: false,
            callbacks: Some(Vec::new()),
            name: None,
        }
    }

    fn is_done(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.coro.bind(py).getattr(intern!(py, "cr_frame"))?.is_none())
    }

    /// The body ended by `exc` (`StopIteration` when it returned): its done callbacks are
    /// scheduled.
    fn ended(slf: &Bound<'_, Self>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let (callbacks, lp) = {
            let mut t = slf.try_borrow_mut()?;
            t.cancelled = !exc.is_none() && exc.is_instance(helpers(py)?.cancelled_error.bind(py))?;
            (t.callbacks.take(), t.lp.clone_ref(py))
        };
        for (f, context) in callbacks.unwrap_or_default() {
            let kw = pyo3::types::PyDict::new(py);
            kw.set_item(intern!(py, "context"), context)?;
            // The loop is closed: nobody is left to call.
            drop(lp.bind(py).call_method(intern!(py, "call_soon"), (f, slf), Some(&kw)));
        }
        Ok(())
    }
}

#[pymethods]
impl BodyTask {
    fn get_loop(&self, py: Python<'_>) -> Py<PyAny> {
        let _in = super::shutdown::inside(py);
        self.lp.clone_ref(py)
    }

    fn get_coro(&self, py: Python<'_>) -> Py<PyAny> {
        let _in = super::shutdown::inside(py);
        self.coro.clone_ref(py)
    }

    fn get_name(&self, py: Python<'_>) -> PyResult<String> {
        let _in = super::shutdown::inside(py);
        if let Some(n) = &self.name {
            return Ok(n.clone());
        }
        let q = helpers(py)?
            .getattr
            .bind(py)
            .call1((self.coro.bind(py), intern!(py, "__qualname__"), "?"))?;
        Ok(format!("tool body {}", q.str()?))
    }

    fn set_name(slf: &Bound<'_, Self>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let _in = super::shutdown::inside(slf.py());
        // `str(value)` is host code: no borrow of the task is held while it runs.
        let name = value.str()?.to_string();
        slf.try_borrow_mut()?.name = Some(name);
        Ok(())
    }

    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        let _in = super::shutdown::inside(py);
        self.is_done(py)
    }

    fn cancelled(&self) -> bool {
        self.cancelled
    }

    fn cancelling(&self) -> isize {
        self.requests.count()
    }

    fn uncancel(&mut self) -> isize {
        self.requests.uncancel()
    }

    #[pyo3(signature = (msg=None))]
    fn cancel(slf: &Bound<'_, Self>, msg: Option<Bound<'_, PyAny>>) -> PyResult<bool> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let (then, waiter) = {
            let mut t = slf.try_borrow_mut()?;
            let (done, waiting) = (t.is_done(py)?, t.waiter.is_some());
            let then = t.requests.cancel(done, waiting);
            (then, t.waiter.as_ref().map(|w| w.clone_ref(py)))
        };
        let deferred = match (then, waiter) {
            (Cancel::Ended, _) => return Ok(false),
            (Cancel::CancelWaiter, Some(w)) => {
                let w = w.bind(py);
                let cancelled = helpers(py)?.isfuture.bind(py).call1((w,))?.is_truthy()?
                    && w.call_method1(intern!(py, "cancel"), (&msg,))?.is_truthy()?;
                slf.try_borrow_mut()?.requests.waiter_answered(cancelled)
            }
            _ => true,
        };
        if deferred {
            slf.try_borrow_mut()?.message = msg.map(Bound::unbind);
        }
        Ok(true)
    }

    #[pyo3(signature = (f, *, context=None))]
    fn add_done_callback(
        slf: &Bound<'_, Self>,
        f: Bound<'_, PyAny>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let lp = {
            let mut t = slf.try_borrow_mut()?;
            if !t.is_done(py)? {
                if let Some(cbs) = t.callbacks.as_mut() {
                    cbs.push((f.unbind(), context.map(Bound::unbind)));
                    return Ok(());
                }
            }
            t.lp.clone_ref(py)
        };
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item(intern!(py, "context"), context)?;
        lp.bind(py).call_method(intern!(py, "call_soon"), (f, slf), Some(&kw))?;
        Ok(())
    }

    /// Remove every pending callback equal to `f`; returns how many. The comparisons are host
    /// code (`!=`): they run on a copy of the list with no borrow of the task held, and one
    /// that raises leaves every callback pending, as for an asyncio task.
    fn remove_done_callback(slf: &Bound<'_, Self>, f: Bound<'_, PyAny>) -> PyResult<usize> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let pending: Vec<Py<PyAny>> = match &slf.try_borrow()?.callbacks {
            Some(cbs) => cbs.iter().map(|(g, _)| g.clone_ref(py)).collect(),
            None => return Ok(0),
        };
        let mut equal = Vec::new();
        for g in &pending {
            if !g.bind(py).ne(&f)? {
                equal.push(g.as_ptr());
            }
        }
        if equal.is_empty() {
            return Ok(0);
        }
        let mut t = slf.try_borrow_mut()?;
        let Some(cbs) = t.callbacks.as_mut() else { return Ok(0) };
        let before = cbs.len();
        cbs.retain(|(g, _)| !equal.contains(&g.as_ptr()));
        Ok(before - cbs.len())
    }

    /// The future the body waits on (None while a step runs), as asyncio's tasks name it.
    #[getter(_fut_waiter)]
    fn fut_waiter(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let _in = super::shutdown::inside(py);
        self.waiter.as_ref().map(|w| w.clone_ref(py))
    }

    /// A cancellation requested while the body was not waiting: its next step throws it.
    #[getter(_must_cancel)]
    fn pending_cancel(&self) -> bool {
        self.requests.pending()
    }

    #[getter(_callbacks)]
    fn pending_callbacks(&self, py: Python<'_>) -> Option<Callbacks> {
        let _in = super::shutdown::inside(py);
        self.callbacks.as_ref().map(|c| {
            c.iter()
                .map(|(f, x)| (f.clone_ref(py), x.as_ref().map(|x| x.clone_ref(py))))
                .collect()
        })
    }

    /// Awaited by its own body (during one of the body's steps, where it is the current task):
    /// asyncio's `RuntimeError` for a task that awaits itself, at once, as a turn's body gets it
    /// (`body::awaits_itself`). It is no future: any other await of it is a `TypeError`, as for
    /// any object that cannot be awaited.
    fn __await__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        let py = slf.py();
        let h = helpers(py)?;
        if body::awaits_itself(false, || Ok::<_, PyErr>(slf.is(&h.current_task.bind(py).call0()?)))? {
            let msg = format!("{}{}", body::AWAITS_ITSELF, slf.repr()?);
            return Err(pyo3::exceptions::PyRuntimeError::new_err(msg));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(
            "object agentkit_tools._core.BodyTask can't be used in 'await' expression",
        ))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let _in = super::shutdown::inside(py);
        Ok(format!(
            "<BodyTask {} {}>",
            self.get_name(py)?,
            if self.is_done(py)? { "done" } else { "pending" }
        ))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lp)?;
        visit.call(&self.coro)?;
        if let Some(w) = &self.waiter {
            visit.call(w)?;
        }
        if let Some(m) = &self.message {
            visit.call(m)?;
        }
        for (f, c) in self.callbacks.iter().flatten() {
            visit.call(f)?;
            if let Some(c) = c {
                visit.call(c)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.waiter = None;
        self.message = None;
        self.callbacks = None;
    }
}

/// What a step of a body gave: what it yielded, or what it returned.
pub(super) enum Sent<'py> {
    Yielded(Bound<'py, PyAny>),
    Returned(Bound<'py, PyAny>),
}

static SEND_IN: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// `coro.send(value)` through `PyIter_Send`, called in the body's context (`Context.run`):
/// `(returned, value)`, what it yielded or returned; what it raised propagates.
#[pyfunction]
fn send_in<'py>(
    py: Python<'py>,
    coro: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
) -> PyResult<(bool, Bound<'py, PyAny>)> {
    let _in = super::shutdown::inside(py);
    send_now(py, coro, value)
}

/// `send_in`'s step: `coro` (a coroutine) sent `value`; `(returned, what it returned or yielded)`.
fn send_now<'py>(
    py: Python<'py>,
    coro: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
) -> PyResult<(bool, Bound<'py, PyAny>)> {
    let mut out: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: both objects are alive; `out` receives a new reference unless an error is set.
    let status = unsafe { pyo3::ffi::PyIter_Send(coro.as_ptr(), value.as_ptr(), &mut out) };
    match status {
        pyo3::ffi::PySendResult::PYGEN_RETURN => Ok((true, unsafe { Bound::from_owned_ptr(py, out) })),
        pyo3::ffi::PySendResult::PYGEN_NEXT => Ok((false, unsafe { Bound::from_owned_ptr(py, out) })),
        _ => Err(PyErr::fetch(py)),
    }
}

/// `f(*args)` run in `context` (a `contextvars.Context`): entered directly where the interpreter
/// allows (see `super::context`), else through `Context.run`; what `f` raises propagates.
pub(super) fn call_in<'py>(
    py: Python<'py>,
    h: &Helpers,
    context: &Bound<'py, PyAny>,
    f: &Bound<'py, PyAny>,
    args: &[&Bound<'py, PyAny>],
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(out) = super::context::within(py, context, || f.call1(PyTuple::new(py, args)?)) {
        return out;
    }
    let all = PyTuple::new(
        py,
        [context, f].into_iter().chain(args.iter().copied()).collect::<Vec<_>>(),
    )?;
    h.context_run.bind(py).call1(all)
}

/// The body: its coroutine, its stand-in task, its context copy (each step runs in it through
/// `Context.run`), its loop. `send`/`throw`: for an exact coroutine the unbound
/// `CoroutineType.send`/`throw` (`unbound`: the coroutine is passed to them; no bound method is
/// made per call), else the awaitable's own bound methods.
pub(super) struct Body {
    task: Py<BodyTask>,
    coro: Py<PyAny>,
    send: Py<PyAny>,
    throw: Py<PyAny>,
    context: Py<PyAny>,
    lp: Py<PyAny>,
    unbound: bool,
}

impl Body {
    /// The body `coro` about to take its first step on the running loop, in a copy of the
    /// caller's context: `within`, the one its function was called in (a sync prelude before
    /// the coroutine is the body's too), else a fresh one.
    pub(super) fn new<'py>(
        py: Python<'py>,
        h: &Helpers,
        coro: &Bound<'py, PyAny>,
        within: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let lp = super::running::running_loop(py)?;
        let context = match within {
            Some(w) => w.clone(),
            None => h.copy_context.bind(py).call0()?,
        };
        let task = Bound::new(py, BodyTask::new(lp.clone(), coro))?;
        let unbound = coro.get_type().is(h.coroutine.bind(py));
        let (send, throw) = if unbound {
            (h.coro_send.clone_ref(py), h.coro_throw.clone_ref(py))
        } else {
            (
                coro.getattr(intern!(py, "send"))?.unbind(),
                coro.getattr(intern!(py, "throw"))?.unbind(),
            )
        };
        Ok(Body {
            task: task.unbind(),
            send,
            throw,
            coro: coro.clone().unbind(),
            context: context.unbind(),
            lp: lp.unbind(),
            unbound,
        })
    }

    fn clone_ref(&self, py: Python<'_>) -> Self {
        Body {
            task: self.task.clone_ref(py),
            coro: self.coro.clone_ref(py),
            send: self.send.clone_ref(py),
            throw: self.throw.clone_ref(py),
            context: self.context.clone_ref(py),
            lp: self.lp.clone_ref(py),
            unbound: self.unbound,
        }
    }

    /// One step of the body (`throw`: `arg` is raised in it, else sent) in its context, as its
    /// own task. Returns what it yielded; raises what it raised (`StopIteration` when it
    /// returned), its task ended then.
    pub(super) fn step<'py>(
        &self,
        py: Python<'py>,
        h: &Helpers,
        throw: bool,
        arg: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.step_sent(py, h, throw, arg)? {
            Sent::Yielded(y) => Ok(y),
            Sent::Returned(v) => Err(PyStopIteration::new_err((v.unbind(),))),
        }
    }

    /// `step`, a body that returned answered as `Sent::Returned` (an exact coroutine sent a
    /// value is stepped through `PyIter_Send`: no `StopIteration` made and caught).
    pub(super) fn step_sent<'py>(
        &self,
        py: Python<'py>,
        h: &Helpers,
        throw: bool,
        arg: Bound<'py, PyAny>,
    ) -> PyResult<Sent<'py>> {
        let t = self.task.bind(py);
        let (mut throw, mut arg) = (throw, arg);
        {
            let mut b = t.try_borrow_mut()?;
            let cancelled = h.cancelled_error.bind(py);
            if b.requests.step_delivers(|| arg.is_instance(cancelled))? {
                // A cancellation it has not seen yet: delivered now, as a task does.
                throw = true;
                arg = cancelled.call1((b.message.as_ref().map(|m| m.bind(py)),))?;
            }
            b.waiter = None;
        }
        let lp = self.lp.bind(py);
        let prev = swap_task(py, h, lp, t.as_any())?;
        let run = h.context_run.bind(py);
        let out = if self.unbound && !throw {
            // In its context entered directly where the interpreter allows (see
            // `super::context`), else through `Context.run`.
            let coro = self.coro.bind(py);
            let sent = match super::context::within(py, self.context.bind(py), || send_now(py, coro, &arg)) {
                Some(sent) => sent,
                None => SEND_IN
                    .get_or_try_init(py, || wrap_pyfunction!(send_in, py).map(|f| f.into_any().unbind()))
                    .and_then(|send| run.call1((self.context.bind(py), send.bind(py), coro, &arg)))
                    .and_then(|r| r.extract::<(bool, Bound<'py, PyAny>)>()),
            };
            sent.map(|(returned, v)| if returned { Sent::Returned(v) } else { Sent::Yielded(v) })
        } else {
            let f = if throw { &self.throw } else { &self.send };
            let out = if self.unbound {
                call_in(py, h, self.context.bind(py), f.bind(py), &[self.coro.bind(py), &arg])
            } else {
                call_in(py, h, self.context.bind(py), f.bind(py), &[&arg])
            };
            match out {
                Ok(y) => Ok(Sent::Yielded(y)),
                Err(e) if e.is_instance_of::<PyStopIteration>(py) => {
                    // Returned (a `StopIteration` it raised itself is a `RuntimeError` by then).
                    Ok(Sent::Returned(e.value(py).getattr(intern!(py, "value"))?))
                }
                Err(e) => Err(e),
            }
        };
        swap_task(py, h, lp, &prev)?;
        match out {
            Err(e) => {
                BodyTask::ended(t, e.value(py).as_any())?;
                Err(e)
            }
            Ok(Sent::Returned(v)) => {
                BodyTask::ended(t, py.None().bind(py))?;
                Ok(Sent::Returned(v))
            }
            Ok(Sent::Yielded(y)) => {
                let message = {
                    let mut b = t.try_borrow_mut()?;
                    b.waiter = Some(y.clone().unbind());
                    b.requests
                        .pending()
                        .then(|| b.message.as_ref().map(|m| m.clone_ref(py)))
                };
                if let Some(message) = message {
                    if h.isfuture.bind(py).call1((&y,))?.is_truthy()?
                        && y.call_method1(intern!(py, "cancel"), (message,))?.is_truthy()?
                    {
                        // it cancelled itself during this step
                        t.try_borrow_mut()?.requests.deferred_reached_waiter();
                    }
                }
                Ok(Sent::Yielded(y))
            }
        }
    }

    /// Whether a `cancel()` of the body's task cancelled the future it waits on.
    fn waiter_cancelled(&self, py: Python<'_>) -> bool {
        self.task.borrow(py).requests.waiter_cancelled()
    }

    /// Close the body (its `finally` blocks run as its own task).
    fn close(&self, py: Python<'_>, h: &Helpers) -> PyResult<()> {
        let t = self.task.bind(py);
        let lp = self.lp.bind(py);
        let prev = swap_task(py, h, lp, t.as_any())?;
        let out = self
            .coro
            .bind(py)
            .getattr(intern!(py, "close"))
            .and_then(|c| call_in(py, h, self.context.bind(py), &c, &[]));
        let swapped = swap_task(py, h, lp, &prev);
        let ended = BodyTask::ended(t, &new_exception::<PyGeneratorExit>(py, ()));
        out?;
        swapped?;
        ended.map(drop)
    }

    fn requested(&self, py: Python<'_>) -> PyResult<()> {
        self.task.bind(py).try_borrow_mut()?.requests.request();
        Ok(())
    }

    /// Cancel the suspended body at once: `exc` (a `CancelledError`) is thrown into it
    /// (`counted`: its task's cancellation was counted already); if its clean-up suspends, a
    /// task of its own drives it to its end, the outcome dropped. Scopes the body entered, and
    /// deadlines of calls it made, belong to the body: they go on cancelling it, never the
    /// caller.
    fn abandon<'py>(&self, py: Python<'py>, h: &Helpers, exc: Bound<'py, PyAny>, counted: bool) -> PyResult<()> {
        if !counted {
            self.requested(py)?;
        }
        let y = match self.step(py, h, true, exc) {
            Ok(y) => y,
            Err(e) => return close_outcome(py, Err::<(), _>(e), false), // it ended at once
        };
        let Ok(lp) = super::running::running_loop(py) else {
            // No loop left to run its clean-up on: it is closed instead.
            return close_outcome(py, self.close(py, h), true);
        };
        let w = Waiting::new(self.clone_ref(py), y, None, None, py.None().into_bound(py), true);
        let clean_up = Bound::new(
            py,
            BodyAwait {
                state: State::Waiting(Box::new(w)),
            },
        )?;
        let task = lp.call_method1(intern!(py, "create_task"), (clean_up,))?;
        h.hold_clean_up.bind(py).call1((task,))?;
        Ok(())
    }
}

/// The last loop a body was awaited on, its holder (`_runner._CleanUps`) and that holder's set of
/// weak references to the bodies awaited on it (asked of `_runner.bodies_of` only when the loop
/// or its holder changed).
struct Watched {
    lp: Py<PyWeakrefReference>,
    holder: Py<PyWeakrefReference>,
    set: Py<PySet>,
}

static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);

fn bodies_of<'py>(py: Python<'py>, h: &Helpers, lp: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PySet>> {
    let last = {
        let g = WATCHED.lock().unwrap_or_else(PoisonError::into_inner);
        g.as_ref()
            .map(|w| (w.lp.clone_ref(py), w.holder.clone_ref(py), w.set.clone_ref(py)))
    };
    if let Some((l, holder, set)) = last {
        if l.bind(py).upgrade().is_some_and(|l| l.is(lp)) && holder.bind(py).upgrade().is_some() {
            return Ok(set.into_bound(py));
        }
    }
    let (holder, set): (Bound<'py, PyAny>, Bound<'py, PySet>) = h.bodies_of.bind(py).call1((lp,))?.extract()?;
    let w = Watched {
        lp: PyWeakrefReference::new(lp)?.unbind(),
        holder: PyWeakrefReference::new(&holder)?.unbind(),
        set: set.clone().unbind(),
    };
    *WATCHED.lock().unwrap_or_else(PoisonError::into_inner) = Some(w);
    Ok(set)
}

/// The weak reference a loop's holder watches an awaited body by, in the holder's set: taken
/// out when the await ends, also when it ends by a failure inside the core or is dropped
/// unclosed (else every such call would leave a dead reference there until the loop closes).
struct HolderEntry(Option<(Py<PySet>, Py<PyAny>)>);

impl HolderEntry {
    fn unwatch(&mut self, py: Python<'_>) {
        if let Some((set, held)) = self.0.take() {
            drop(set.bind(py).discard(held));
        }
    }
}

impl Drop for HolderEntry {
    fn drop(&mut self) {
        if self.0.is_none() {
            return;
        }
        super::shutdown::when_dropped(|py| self.unwatch(py));
    }
}

/// A body that suspended, and how it is awaited.
struct Waiting {
    body: Body,
    /// What the body's last step yielded, and what was yielded to the task for it.
    y: Py<PyAny>,
    wait: Py<PyAny>,
    /// The deadline on `time.monotonic` and its length (None: none), and the tool's name (or the
    /// tool, whose `name` is read when it is needed).
    end: Option<f64>,
    limit: Option<f64>,
    name: Py<PyAny>,
    /// Driving an abandoned body's clean-up in a task of its own, its outcome dropped.
    clean_up: bool,
    /// Set when the caller first awaits: the entered deadline (none without a limit), the
    /// awaiting task where it counts its cancellations (`deadline::counts_cancels`), its count then and at
    /// the last cancellation seen, and whether a cancellation of it reached the body.
    entered: bool,
    deadline: Entered,
    /// The set of its loop's holder this is watched in, and its weak reference there (taken
    /// out when it is no longer watched; see `HolderEntry`).
    held: HolderEntry,
    task: Option<Py<PyAny>>,
    before: isize,
    seen: isize,
    delivered: bool,
}

enum State {
    /// Not started: the body's first step is taken when the caller first awaits.
    Fresh {
        coro: Py<PyAny>,
        limit: Option<f64>,
        name: Py<PyAny>,
        end: Option<f64>,
        within: Option<Py<PyAny>>,
    },
    Waiting(Box<Waiting>),
    Done,
}

/// What the task hands in at a step of a coroutine of the core's (`BodyAwait`, `Relay`, `Drive`).
pub(super) enum Input<'py> {
    Send(Bound<'py, PyAny>),
    Throw(Bound<'py, PyAny>),
}

/// A new `T(*args)` exception instance, made by calling the type. (An error made with `new_err`
/// and read as a value later is normalized by releasing and re-taking the interpreter lock,
/// which panics once the interpreter is finalizing: a call closed by the collector at exit.)
pub(super) fn new_exception<'py, T: PyTypeInfo>(
    py: Python<'py>,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> Bound<'py, PyAny> {
    py.get_type::<T>()
        .call1(args)
        .unwrap_or_else(|e| e.into_value(py).into_bound(py).into_any())
}

/// What leaves a coroutine of ours when `e` is raised inside it: as CPython does for a
/// coroutine, a `StopIteration` that is not its own return becomes
/// `RuntimeError("coroutine raised StopIteration")` caused by it (else whoever awaits it reads
/// that exception as the value it returned); anything else leaves as it is.
pub(super) fn raised_inside(py: Python<'_>, e: PyErr) -> PyErr {
    if !body::raised_inside(thrown_err(py, &e)) {
        return e;
    }
    let err = new_exception::<pyo3::exceptions::PyRuntimeError>(py, (body::STOP_ITERATION_MESSAGE,));
    drop(err.setattr(intern!(py, "__context__"), e.value(py)));
    let err = PyErr::from_value(err);
    err.set_cause(py, Some(e));
    err
}

/// How a step ended: what was yielded (the task gets it), or what is raised (`StopIteration`
/// with the value when it returned).
pub(super) type Stepped<'py> = PyResult<Bound<'py, PyAny>>;

impl Waiting {
    fn new<'py>(
        body: Body,
        y: Bound<'py, PyAny>,
        end: Option<f64>,
        limit: Option<f64>,
        name: Bound<'py, PyAny>,
        clean_up: bool,
    ) -> Self {
        Waiting {
            body,
            wait: y.clone().unbind(),
            y: y.unbind(),
            end,
            limit,
            name: name.unbind(),
            clean_up,
            entered: false,
            deadline: Entered::none(),
            held: HolderEntry(None),
            task: None,
            before: 0,
            seen: 0,
            delivered: false,
        }
    }

    /// The caller awaits for the first time: its task, and the deadline's timer armed now (a
    /// body that finished at once needed none). A first step that blocked past the deadline
    /// abandons the body: `ToolTimeoutError`.
    fn enter(&mut self, py: Python<'_>, h: &Helpers, me: &Bound<'_, PyAny>) -> PyResult<()> {
        self.entered = true;
        let task = Some(h.current_task.bind(py).call0()?).filter(|t| !t.is_none());
        if let Some(task) = task.as_ref().filter(|t| deadline::counts_cancels(py, h, t)) {
            self.before = cancels_delivered(py, h, task)?;
            self.seen = self.before;
            self.task = Some(task.clone().unbind());
        }
        let entry = body::entry(self.clean_up, self.end, || deadline::now(py, h))?;
        if entry == Entry::Counted {
            return Ok(());
        }
        // A loop closed with this pending abandons the body then (`_runner._CleanUps`).
        let set = bodies_of(py, h, self.body.lp.bind(py))?;
        let held = PyWeakrefReference::new(me)?.into_any();
        set.add(&held)?;
        self.held = HolderEntry(Some((set.unbind(), held.unbind())));
        match (entry, task) {
            (Entry::BlockedPast, _) => {
                let y = self.y.bind(py);
                if h.isfuture.bind(py).call1((y,))?.is_truthy()? {
                    y.call_method0(intern!(py, "cancel"))?;
                }
                self.body.abandon(py, h, h.cancelled_error.bind(py).call0()?, false)?;
                Err(timeout(py, h, self.name.bind(py), self.limit))
            }
            (Entry::Deadline(end), Some(task)) => {
                self.deadline = deadline::enter_for(
                    self.body.lp.bind(py),
                    &task,
                    self.before,
                    end,
                    self.limit,
                    self.name.bind(py),
                )?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Where the await is, as the core reads it.
    #[inline]
    fn at(&self) -> Await {
        Await::Waiting {
            entered: self.entered,
            clean_up: self.clean_up,
        }
    }

    /// It has ended: its loop's holder watches it no more.
    fn unwatch(&mut self, py: Python<'_>) {
        self.held.unwatch(py);
    }

    fn expired(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.deadline.expired(py))
    }

    /// What the task waits on for `y` (see `waited`).
    fn wrap<'py>(&self, py: Python<'py>, h: &Helpers, y: Bound<'py, PyAny>) -> Stepped<'py> {
        waited(py, h, y, self.clean_up)
    }

    /// The await ends (`out`: the body's value, or what is raised): leave the deadline (at the
    /// deadline it turns the outcome into `ToolTimeoutError`, unless the caller was cancelled
    /// too). In clean-up mode the outcome is dropped.
    fn finish<'py>(&mut self, py: Python<'py>, out: PyResult<Bound<'py, PyAny>>) -> Stepped<'py> {
        self.unwatch(py);
        if self.clean_up {
            let raised = out.as_ref().err().map(|e| thrown_err(py, e));
            return match out {
                Err(e) if !body::dropped(true, raised) => Err(e),
                _ => Err(PyStopIteration::new_err(())),
            };
        }
        self.deadline
            .leave(py, out.as_ref().err().map(|e| e.value(py).as_any()))?;
        match out {
            Ok(v) => Err(PyStopIteration::new_err((v.unbind(),))),
            Err(e) => Err(e),
        }
    }
}

/// What a task waits on for `y`, a body yielded (`clean_up`: the task drives an abandoned
/// body's clean-up): a task or a gathering future through a plain future completed with it
/// (cancelling the task then cancels that plain future at once, never waiting for the other
/// task's own clean-up), anything else as it is (see `body::waits_through_plain_future`).
pub(super) fn waited<'py>(
    py: Python<'py>,
    h: &Helpers,
    y: Bound<'py, PyAny>,
    clean_up: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let is_future = || h.isfuture.bind(py).call1((&y,))?.is_truthy();
    let exact = y.get_type().is(h.future.bind(py));
    if !body::waits_through_plain_future(clean_up, y.is_none(), exact, is_future)? {
        return Ok(y);
    }
    let wait = completed_with(py, &y)?;
    y.setattr(intern!(py, "_asyncio_future_blocking"), false)?;
    wait.setattr(intern!(py, "_asyncio_future_blocking"), true)?;
    Ok(wait)
}

/// A plain future of the loop of `fut` (a task or a gathering future) completed once `fut` has
/// ended: cancelling a task that waits on it cancels that plain future only, never `fut`.
pub(super) fn completed_with<'py>(py: Python<'py>, fut: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // Its loop as an asyncio task finds it (`asyncio.futures._get_loop`): `get_loop()`, else
    // `_loop` (a future-like object of an older library).
    let lp = match fut.getattr_opt(intern!(py, "get_loop"))? {
        Some(get_loop) => get_loop.call0()?,
        None => fut.getattr(intern!(py, "_loop"))?,
    };
    let wait = lp.call_method0(intern!(py, "create_future"))?;
    let woken = Bound::new(
        py,
        Woken {
            wait: wait.clone().unbind(),
        },
    )?;
    fut.call_method1(intern!(py, "add_done_callback"), (woken,))?;
    Ok(wait)
}

/// Completes `wait` once the task or gathering future the body awaits has ended. Its outcome
/// counts as read, as when a task wakes from it: a body abandoned at its deadline never reads
/// it, and asyncio would log it as never retrieved.
#[pyclass(module = "agentkit_tools._core")]
struct Woken {
    wait: Py<PyAny>,
}

#[pymethods]
impl Woken {
    fn __call__(&self, py: Python<'_>, fut: Bound<'_, PyAny>) -> PyResult<()> {
        let _in = super::shutdown::inside(py);
        if !fut.call_method0(intern!(py, "cancelled"))?.is_truthy()? {
            fut.call_method0(intern!(py, "exception"))?;
        }
        let wait = self.wait.bind(py);
        if !wait.call_method0(intern!(py, "done"))?.is_truthy()? {
            wait.call_method1(intern!(py, "set_result"), (py.None(),))?;
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.wait)
    }
}

/// An `async` tool body awaited in the caller's own task (see the module).
#[pyclass(module = "agentkit_tools._core", weakref)]
pub struct BodyAwait {
    state: State,
}

impl BodyAwait {
    /// The rest of a body whose first step the core took (it yielded `y`; `end`: its deadline
    /// on `time.monotonic`, None: none; `tool`: whose `name` a timeout names).
    pub(super) fn suspended<'py>(
        body: Body,
        y: Bound<'py, PyAny>,
        end: Option<f64>,
        limit: Option<f64>,
        tool: Bound<'py, PyAny>,
    ) -> PyResult<Self> {
        Ok(BodyAwait {
            state: State::Waiting(Box::new(Waiting::new(body, y, end, limit, tool, false))),
        })
    }

    /// A body not started yet (an awaitable that is no coroutine is awaited through its
    /// `__await__`, by `_runner._as_coro`).
    pub(super) fn fresh<'py>(
        py: Python<'py>,
        coro: Bound<'py, PyAny>,
        limit: Option<f64>,
        name: Bound<'py, PyAny>,
        end: Option<f64>,
        within: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        let h = helpers(py)?;
        let coro = if coro.get_type().is(h.coroutine.bind(py)) {
            coro
        } else {
            h.as_coro.bind(py).call1((coro,))?
        };
        Ok(BodyAwait {
            state: State::Fresh {
                coro: coro.unbind(),
                limit,
                name: name.unbind(),
                end,
                within: within.map(Bound::unbind),
            },
        })
    }

    fn resume<'py>(&mut self, py: Python<'py>, me: &Bound<'py, PyAny>, input: Input<'py>) -> Stepped<'py> {
        let h = helpers(py)?;
        let throw = matches!(input, Input::Throw(_));
        match std::mem::replace(&mut self.state, State::Done) {
            State::Fresh {
                coro,
                limit,
                name,
                end,
                within,
            } => match (Await::Fresh.resume(throw), input) {
                (Resume::CloseUnstarted, Input::Throw(exc)) => {
                    drop(coro.bind(py).call_method0(intern!(py, "close")));
                    Err(raised_inside(py, PyErr::from_value(exc)))
                }
                _ => {
                    let within = within.map(|w| w.into_bound(py));
                    self.start(
                        py,
                        h,
                        me,
                        coro.into_bound(py),
                        limit,
                        name.into_bound(py),
                        end,
                        within.as_ref(),
                    )
                }
            },
            State::Waiting(w) => self.go_on(py, h, me, w, input),
            State::Done => match (Await::Done.resume(throw), input) {
                (Resume::Raise, Input::Throw(exc)) => Err(raised_inside(py, PyErr::from_value(exc))),
                _ => Err(pyo3::exceptions::PyRuntimeError::new_err(body::REUSED_MESSAGE)),
            },
        }
    }

    /// The caller's first await of a body not started: its first step, in a copy of the
    /// caller's context; a body that finishes at once needs no deadline timer.
    #[allow(clippy::too_many_arguments)]
    fn start<'py>(
        &mut self,
        py: Python<'py>,
        h: &Helpers,
        me: &Bound<'py, PyAny>,
        coro: Bound<'py, PyAny>,
        limit: Option<f64>,
        name: Bound<'py, PyAny>,
        end: Option<f64>,
        within: Option<&Bound<'py, PyAny>>,
    ) -> Stepped<'py> {
        let end = match end {
            Some(end) => Some(end),
            None => deadline::end_of(py, h, limit)?,
        };
        let body = Body::new(py, h, &coro, within)?;
        match body.step_sent(py, h, false, py.None().into_bound(py)) {
            Ok(Sent::Yielded(y)) => {
                let w = Waiting::new(body, y, end, limit, name, false);
                self.go_on(py, h, me, Box::new(w), Input::Send(py.None().into_bound(py)))
            }
            Ok(Sent::Returned(v)) => match body::ending(None, || deadline::passed(py, h, end), || Ok(false))? {
                Ending::TimedOut => Err(timeout(py, h, &name, limit)),
                _ => Err(PyStopIteration::new_err((v.unbind(),))),
            },
            Err(e) => Err(carried(py, h, e)),
        }
    }

    /// A step of the suspended body.
    fn go_on<'py>(
        &mut self,
        py: Python<'py>,
        h: &Helpers,
        me: &Bound<'py, PyAny>,
        mut w: Box<Waiting>,
        input: Input<'py>,
    ) -> Stepped<'py> {
        match w.at().resume(matches!(input, Input::Throw(_))) {
            Resume::CloseCleanUp => {
                close_outcome(py, w.body.close(py, h), false)?;
                return Err(PyStopIteration::new_err(()));
            }
            Resume::EnterAndWait => {
                w.enter(py, h, me)?;
                let wait = w.wrap(py, h, w.y.bind(py).clone())?;
                w.wait = wait.clone().unbind();
                self.state = State::Waiting(w);
                return Ok(wait);
            }
            Resume::EnterAndStep => w.enter(py, h, me)?,
            _ => {} // a later step
        }
        let mut callers = false;
        let (throw, arg) = match input {
            Input::Send(v) => (false, v),
            Input::Throw(exc) => {
                let cancelled = || exc.is_instance(h.cancelled_error.bind(py));
                match body::thrown_in(exc.is_instance_of::<PyGeneratorExit>(), cancelled)? {
                    ThrownIn::Close => {
                        let out = self.closed(py, h, w, &exc);
                        return Err(out.err().unwrap_or_else(|| PyErr::from_value(exc)));
                    }
                    ThrownIn::Cancellation => {
                        let (y, wait) = (w.y.bind(py).clone(), w.wait.bind(py).clone());
                        let count = match &w.task {
                            Some(task) => Some(
                                task.bind(py)
                                    .call_method0(intern!(py, "cancelling"))?
                                    .extract::<isize>()?,
                            ),
                            None => None, // a task that does not count (Python 3.10's)
                        };
                        callers =
                            cancel::thrown_is_callers(count, &mut w.seen, wait.is(&y), w.body.waiter_cancelled(py));
                        if callers {
                            w.delivered = true;
                            w.body.requested(py)?; // the body's task is cancelled with this one
                            let expired = w.expired(py)?;
                            let pending = || Ok::<_, PyErr>(!y.call_method0(intern!(py, "done"))?.is_truthy()?);
                            let then = body::callers_cancel(!wait.is(&y), pending, expired)?;
                            if then.cancels_wait() {
                                y.call_method0(intern!(py, "cancel"))?; // as a task does with the future it awaits
                            }
                            match then {
                                CallersCancel::CancelAndWait => {
                                    // The body sees the cancellation once that future has ended.
                                    let wait = w.wrap(py, h, y)?;
                                    w.wait = wait.clone().unbind();
                                    self.state = State::Waiting(w);
                                    return Ok(wait);
                                }
                                CallersCancel::Abandon { .. } => {
                                    if let Err(e) = w.body.abandon(py, h, exc.clone(), true) {
                                        return w.finish(py, Err(e));
                                    }
                                    return w.finish(py, Err(PyErr::from_value(exc)));
                                }
                                CallersCancel::Throw => {}
                            }
                        }
                        (true, exc)
                    }
                    ThrownIn::Throw => (true, exc),
                }
            }
        };
        match w.body.step(py, h, throw, arg) {
            Ok(y) => {
                if body::closes_after_yield(w.clean_up, callers) {
                    // A clean-up that swallowed its task's cancellation: closed.
                    let closed = w.body.close(py, h);
                    return w.finish(py, closed.map(|()| py.None().into_bound(py)));
                }
                let wait = w.wrap(py, h, y.clone())?;
                w.y = y.unbind();
                w.wait = wait.clone().unbind();
                self.state = State::Waiting(w);
                Ok(wait)
            }
            Err(e) => {
                // It returned (`StopIteration`, its value), or raised.
                let returned = e.is_instance_of::<PyStopIteration>(py);
                let raised = (!returned).then(|| thrown_err(py, &e));
                let count = || -> PyResult<Option<isize>> {
                    w.task
                        .as_ref()
                        .map(|task| {
                            task.bind(py)
                                .call_method0(intern!(py, "cancelling"))?
                                .extract::<isize>()
                        })
                        .transpose()
                };
                let ending = body::ending(
                    raised,
                    || deadline::passed(py, h, w.end),
                    || cancel::ended_by_callers(w.delivered, count, w.before),
                )?;
                let out = match ending {
                    Ending::Value => Ok(e.value(py).getattr(intern!(py, "value"))?),
                    Ending::TimedOut => Err(timeout(py, h, w.name.bind(py), w.limit)),
                    Ending::AsRaised => Err(e), // the caller's cancellation
                    Ending::Carried => Err(carried(py, h, e)),
                };
                w.finish(py, out)
            }
        }
    }

    /// What is awaiting this is closed (`exc`: the `GeneratorExit`): as the core says for the
    /// await's state (`body::Await::close`), a clean-up's body is closed, a call's body is
    /// abandoned (its clean-up goes on in a task of its own if its loop still runs, else it is
    /// closed).
    fn closed<'py>(
        &mut self,
        py: Python<'py>,
        h: &Helpers,
        mut w: Box<Waiting>,
        exc: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        self.state = State::Done;
        w.unwatch(py);
        match w.at().close() {
            Closing::CloseCleanUp => close_outcome(py, w.body.close(py, h), false),
            Closing::Abandon => {
                let abandoned = h
                    .cancelled_error
                    .bind(py)
                    .call0()
                    .and_then(|c| w.body.abandon(py, h, c, false));
                w.deadline.leave(py, Some(exc))?;
                abandoned
            }
            // (a waiting await is neither fresh nor done)
            Closing::CloseUnstarted | Closing::Nothing => Ok(()),
        }
    }
}

impl BodyAwait {
    /// A step of `slf` taken by another coroutine of the core that awaits it (`super::drive`):
    /// no entry from Python.
    pub(super) fn step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        running(slf)?.resume(slf.py(), slf.as_any(), input)
    }

    /// Close `slf` for the coroutine of the core that awaits it.
    pub(super) fn close_from_core(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut this = running(slf)?;
        match std::mem::replace(&mut this.state, State::Done) {
            // (`body::Await::close`: a body never started is closed, what that raises propagating)
            State::Fresh { coro, .. } => coro.bind(py).call_method0(intern!(py, "close")).map(drop),
            State::Waiting(w) => {
                let h = helpers(py)?;
                let exc = new_exception::<PyGeneratorExit>(py, ());
                this.closed(py, h, w, &exc)
            }
            State::Done => Ok(()),
        }
    }
}

impl Coroutine for BodyAwait {
    const BORROWED_TO_AWAIT: bool = true;

    #[inline]
    fn protocol_step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        Self::step(slf, input)
    }

    /// What awaits this is closed: the body is abandoned (see the module), or closed.
    fn protocol_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::close_from_core(slf)
    }
}

coroutine_methods! {
#[pymethods]
impl BodyAwait {
    /// Await the body `coro` (an awaitable that is no coroutine: through its `__await__`)
    /// within `limit_s` seconds (None: none; `end`: that deadline on `time.monotonic` when it
    /// started earlier); `name`: the tool's, for `ToolTimeoutError`; `context`: the copy of the
    /// caller's context the body's function was called in (its steps run there; None: a fresh
    /// copy).
    #[new]
    #[pyo3(signature = (coro, limit_s, name, end=None, context=None))]
    fn new(py: Python<'_>, coro: Bound<'_, PyAny>, limit_s: Option<f64>, name: Bound<'_, PyAny>, end: Option<f64>, context: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let _in = super::shutdown::inside(py);
        Self::fresh(py, coro, limit_s, name, end, context)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        match &self.state {
            State::Fresh { coro, name, within, .. } => {
                visit.call(coro)?;
                visit.call(name)?;
                if let Some(w) = within {
                    visit.call(w)?;
                }
            }
            State::Waiting(w) => {
                let b = &w.body;
                visit.call(&b.task)?;
                for o in [&b.coro, &b.send, &b.throw, &b.context, &b.lp, &w.y, &w.wait, &w.name] {
                    visit.call(o)?;
                }
                w.deadline.traverse(&visit)?;
                if let Some(t) = &w.task {
                    visit.call(t)?;
                }
                if let Some((set, held)) = &w.held.0 {
                    visit.call(set)?;
                    visit.call(held)?;
                }
            }
            State::Done => {}
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.state = State::Done;
    }
}
}
