//! `Relay`: the coroutine of each task of an `Invoker.invoke_many` turn (`super::turn`): it steps
//! a call's `async` body, or the call's `Drive`, or the aborts of a cancelled turn's calls; and
//! the driver of a body's clean-up past its deadline. It implements the coroutine protocol (`__await__`, `__next__`, `send`,
//! `throw`, `close`), so `loop.create_task` takes it as it takes a coroutine, and the task steps
//! it with no Python frame of ours in between.
//!
//! A call's relay starts the body in the task's first step, within the call's deadline
//! (an entry of the loop's deadline timer, `super::deadline`, entered as the task's): each step of the body runs in one copy of the
//! task's `contextvars` (the body's changes reach neither the caller nor the call's later
//! steps), what the body yields goes to the task untouched and what the task sends or throws
//! goes to the body. At the deadline (its entry cancels the task) the cancellation is thrown
//! into the body and, if the body's clean-up suspends, that clean-up goes on in a task of its
//! own (a relay in clean-up mode, held by `_runner.hold_clean_up`, its outcome dropped) while
//! this call ends with `timeout` at once; a result produced after the deadline is never a
//! success. When the body has ended, a value it returned is checked and fed to the call's state
//! here (`Call::returned`) and the turn answers the call (or says how it goes on: retry, audit
//! record); what it raised goes to the turn; either way the task may go on with the call's
//! `Drive`, stepped as a `Drive` steps what it awaits (`super::drive::Awaited`: `yield from`),
//! and its end handed to the turn (`After`).
use pyo3::exceptions::{PyGeneratorExit, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use super::awaiting::{call_in, thrown_err, Input, Sent, Stepped};
use super::coroutine::{coroutine_methods, running, Coroutine};
use super::deadline::{self, Entered};
use super::drive::{Awaited, Drive, Out};
use super::pipeline::{helpers, Call, STEP_DONE};
use super::turn::{abort_failed, out_of_err, Mine, Owed};
use crate::body::{self, BodyStep, CallersCancel, RelayStep, RelayStepEnd, Resume};
use crate::turn::{self as core, AbortEnded, AbortsStep, CleanUp, CleanUpStep, Then, TurnMachine};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Relay>()
}

/// The body a relay starts (its tool and limit in seconds; its arguments are the call's own,
/// sealed when the body needs it: `Call::start_body`), the call's
/// context, and the call it owes the turn an end for (its state held here while the body
/// runs). `within`: the copy of the caller's `contextvars` the task was made with (see
/// `Relay::body`), else None.
struct Start {
    tool: Py<PyAny>,
    limit: Option<f64>,
    ctx: Py<PyAny>,
    mine: Mine,
    within: Option<Py<PyAny>>,
}

/// What the end of what a relay awaits (a `Drive`) is for.
pub(super) enum After {
    /// The call's drive: its envelope answers the call.
    Drive(Owed),
    /// The call aborted by the exception: then answered with the fault envelope (or the stop
    /// raised at the caller's `await`).
    Abort(Owed, Py<PyAny>),
    /// One abort of a cancelled turn's call by `exc`; the calls left are aborted next, one after
    /// the other (a failure logged, the next one aborted all the same). `stop`: the first request
    /// to stop a store or a sink raised meanwhile, the relay's value once all are aborted (the
    /// turn then raises it).
    Aborts {
        calls: std::vec::IntoIter<Py<Call>>,
        exc: Py<PyAny>,
        ctx: Py<PyAny>,
        until: std::time::Instant,
        stop: Option<Py<PyAny>>,
    },
}

impl After {
    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            After::Drive(o) => o.visit(visit),
            After::Abort(o, e) => {
                o.visit(visit)?;
                visit.call(e)
            }
            After::Aborts {
                calls, exc, ctx, stop, ..
            } => {
                for m in calls.as_slice() {
                    visit.call(m)?;
                }
                visit.call(exc)?;
                visit.call(stop)?;
                visit.call(ctx)
            }
        }
    }
}

/// A call's body being stepped. `send`/`throw`: for an exact coroutine the unbound
/// `CoroutineType.send`/`throw` (`unbound`: the coroutine is passed to them), else the
/// awaitable's own bound methods; each step runs in `within`, the body's copy of the task's
/// context (`Context.run`, unbound): no bound method is made per call.
struct Body {
    coro: Py<PyAny>,
    send: Py<PyAny>,
    throw: Py<PyAny>,
    unbound: bool,
    within: Py<PyAny>,
    /// `within` is the task's own context: each step runs in it already.
    entered: bool,
    /// The entered deadline (none: the call has none), its end on `time.monotonic`, and when
    /// the body started (on the clock `time.monotonic` reads, without a call into Python).
    deadline: Entered,
    end: Option<f64>,
    started: std::time::Instant,
    /// What the body's last step yielded, and what the task waits on for it (a task or a
    /// gathering future through a plain future: see `awaiting::waited`).
    y: Option<(Py<PyAny>, Py<PyAny>)>,
}

/// Where the relay is (`body::Relay`): the body being stepped; a `Drive` not stepped yet (a task
/// that starts with it) and the call goes on in a `Drive` (or is aborted), its end for `After`;
/// a body's clean-up past its deadline (it yielded the value held until the first step).
type State = body::Relay<Body, (Py<PyAny>, After), (Awaited, After), (Py<PyAny>, Option<Py<PyAny>>)>;

/// The coroutine of a task of a turn (see the module).
#[pyclass(module = "agentkit_tools._core")]
pub struct Relay {
    state: State,
    /// The body's call, until it is handed to the turn (exactly once, whichever way the relay
    /// ends); after that an `After` owes it.
    call: Option<Start>,
}

/// `coro.send(value)` through `PyIter_Send` (`coro` an exact coroutine): what it yielded or
/// returned; what it raised propagates.
fn send<'py>(py: Python<'py>, coro: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> PyResult<Sent<'py>> {
    let mut out: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: both objects are alive; `out` receives a new reference unless an error is set.
    match unsafe { pyo3::ffi::PyIter_Send(coro.as_ptr(), value.as_ptr(), &mut out) } {
        pyo3::ffi::PySendResult::PYGEN_RETURN => Ok(Sent::Returned(unsafe { Bound::from_owned_ptr(py, out) })),
        pyo3::ffi::PySendResult::PYGEN_NEXT => Ok(Sent::Yielded(unsafe { Bound::from_owned_ptr(py, out) })),
        _ => Err(PyErr::fetch(py)),
    }
}

/// The relay returned (None): a `StopIteration` made once, never raised (see `stopped`).
static DONE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

fn done(py: Python<'_>) -> &Py<PyAny> {
    DONE.get_or_init(py, || PyStopIteration::new_err(()).into_value(py).into_any())
}

/// The relay's step returned: a marker `__next__` answers with no object and no error set (the
/// task's step reads that as a return of None, no exception made), and `send`/`throw` as a
/// fresh `StopIteration` (see `Coroutine for Relay`).
fn stopped(py: Python<'_>) -> PyErr {
    PyErr::from_value(done(py).bind(py).clone())
}

fn is_stopped(py: Python<'_>, e: &PyErr) -> bool {
    e.value(py).is(done(py).bind(py))
}

/// Attribute `name` of the coroutine `slf` steps now (see `Relay::cr_frame`); None when there is
/// none, it has no such attribute, or the relay is in one of its own steps.
fn inner_attr<'py>(slf: &Bound<'py, Relay>, name: &Bound<'py, pyo3::types::PyString>) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let Ok(relay) = slf.try_borrow() else {
        return Ok(py.None().into_bound(py));
    };
    let inner = match &relay.state {
        State::Body(b) => b.coro.bind(py).clone(),
        State::Then((c, _)) => c.object(py),
        State::CleanUp((c, _)) => c.bind(py).clone(),
        State::Start | State::Pending(_) | State::Done => return Ok(py.None().into_bound(py)),
    };
    drop(relay);
    match inner.getattr(name) {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => Ok(py.None().into_bound(py)),
        Err(e) => Err(e),
    }
}

/// `inner_attr`, an `AttributeError` instead of None (a name is a string or absent).
fn named<'py>(slf: &Bound<'py, Relay>, name: &Bound<'py, pyo3::types::PyString>) -> PyResult<Bound<'py, PyAny>> {
    let value = inner_attr(slf, name)?;
    if value.is_none() {
        return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
            "this Relay steps no coroutine now: no {name}"
        )));
    }
    Ok(value)
}

impl Relay {
    /// The relay of a call whose first step is its `async` body (`tool`, `limit`: see `Start`).
    /// `within`: the copy of the caller's context the relay's task is made with (Python 3.11+,
    /// see `super::turn`): the body runs in it as the task's own context, and the call's later
    /// steps, if any, go on in a task of their own (in a fresh copy of the caller's); None: the
    /// body gets a copy of the task's context, each of its steps entering it, and the later steps
    /// go on in this task.
    pub(super) fn body(
        tool: Py<PyAny>,
        limit: Option<f64>,
        ctx: Py<PyAny>,
        mine: Mine,
        within: Option<Py<PyAny>>,
    ) -> Self {
        Relay {
            state: State::Start,
            call: Some(Start {
                tool,
                limit,
                ctx,
                mine,
                within,
            }),
        }
    }

    /// The relay of a task that awaits `drive` (a `Drive`), its end for `after`.
    pub(super) fn driving(drive: Bound<'_, PyAny>, after: After) -> Self {
        Relay {
            state: State::Pending((drive.unbind(), after)),
            call: None,
        }
    }

    /// A step of the task. Whichever way the relay ends, its call is handed to the turn: a fault
    /// of the relay's own (nothing the body did) ends the call as a failure of its body would.
    fn resume<'py>(&mut self, py: Python<'py>, input: Input<'py>) -> Stepped<'py> {
        let out = self.resume_inner(py, input);
        match out {
            Err(e) if self.call.is_some() => {
                self.state = State::Done;
                self.ended(py, None, None, Some(e.into_value(py).into_bound(py).into_any()))
            }
            out => out,
        }
    }

    /// A step as the core says for the relay's state (`body::Relay::resume`).
    fn resume_inner<'py>(&mut self, py: Python<'py>, input: Input<'py>) -> Stepped<'py> {
        let throw = matches!(input, Input::Throw(_));
        let reused = || pyo3::exceptions::PyRuntimeError::new_err(body::RELAY_REUSED_MESSAGE);
        if let (true, State::Pending((drive, _))) = (throw, &self.state) {
            unstarted(py, drive)?; // the call left to the turn, its drive never stepped
        }
        match std::mem::replace(&mut self.state, State::Done).resume(throw) {
            RelayStep::Start => self.start(py),
            RelayStep::Body(body) => self.step(py, body, input),
            RelayStep::FirstDrive((drive, after)) => {
                self.then(py, Awaited::of(py, drive.into_bound(py))?, after, input)
            }
            RelayStep::Drive((then, after)) => self.then(py, then, after, input),
            RelayStep::CleanUp((coro, first)) => self.clean_up(py, coro, first, input),
            // (these two `resume` answers only to a throw)
            RelayStep::EndsAsRaised => match input {
                Input::Throw(exc) => self.ended(py, None, None, Some(exc)),
                Input::Send(_) => Err(reused()),
            },
            RelayStep::RaiseAsIs => match input {
                Input::Throw(exc) => Err(super::awaiting::raised_inside(py, PyErr::from_value(exc))),
                Input::Send(_) => Err(reused()),
            },
            RelayStep::Reused => Err(reused()),
        }
    }

    /// The task's first step: start the body within its deadline and take its first step.
    fn start<'py>(&mut self, py: Python<'py>) -> Stepped<'py> {
        let h = helpers(py)?;
        let Some(start) = &mut self.call else {
            return Err(stopped(py));
        };
        let ctx = start.ctx.bind(py).clone();
        let (tool, limit) = (start.tool.bind(py).clone(), start.limit);
        if let (true, Some(l)) = (crate::deadline::never_starts(limit), limit) {
            // A call never starts after its deadline.
            let name = tool.getattr(intern!(py, "name"))?;
            let exc = h.timeout_error.bind(py).call1((name, l))?;
            return self.ended(py, None, None, Some(exc));
        }
        let end = deadline::end_of(py, h, limit)?;
        let started = std::time::Instant::now();
        // The body (a sync prelude before its coroutine included) runs in one copy of the
        // task's context: what it sets reaches neither the caller nor the call's later steps.
        let (within, entered) = match &start.within {
            Some(w) => (w.bind(py).clone(), true),
            None => (h.copy_context.bind(py).call0()?, false),
        };
        let called = start.mine.call.start_body(py, &ctx, (!entered).then_some(&within));
        let coro = match called {
            // An awaitable that is no coroutine (or something that is not awaitable) is awaited
            // as a call alone awaits it (`_runner._as_coro`: `await` refuses a non-awaitable).
            Ok(c) if !c.get_type().is(h.coroutine.bind(py)) => h.as_coro.bind(py).call1((c,))?,
            Ok(c) => c,
            Err(e) => return self.ended(py, None, None, Some(e.into_value(py).into_bound(py).into_any())),
        };
        let unbound = coro.get_type().is(h.coroutine.bind(py));
        let (send, throw) = if unbound {
            (h.coro_send.clone_ref(py), h.coro_throw.clone_ref(py))
        } else {
            (
                coro.getattr(intern!(py, "send"))?.unbind(),
                coro.getattr(intern!(py, "throw"))?.unbind(),
            )
        };
        let deadline = match end {
            // Entered as the task's, in its first step: no cancellation of it was delivered yet
            // (one requested before would have been thrown in instead of this step; one the
            // body's sync prelude requested is not delivered yet).
            Some(end) => match start.mine.task_and_timer(py)? {
                // (the relay of a call's body is the coroutine of the call's task)
                Some((task, timer)) => deadline::enter_in(&timer, &task, 0, end, limit, &tool)?,
                None => match h.current_task.bind(py).call0()? {
                    task if task.is_none() => Entered::none(),
                    task => deadline::enter_for(&super::running::running_loop(py)?, &task, 0, end, limit, &tool)?,
                },
            },
            None => Entered::none(),
        };
        let body = Body {
            coro: coro.unbind(),
            send,
            throw,
            unbound,
            within: within.unbind(),
            entered,
            deadline,
            end,
            started,
            y: None,
        };
        self.step(py, body, Input::Send(py.None().into_bound(py)))
    }

    /// One step of the body in its context.
    fn step<'py>(&mut self, py: Python<'py>, mut body: Body, input: Input<'py>) -> Stepped<'py> {
        if let (Input::Throw(exc), Some((y, wait))) = (&input, body.y.take()) {
            // The task was cancelled while the body awaits another task (through a plain
            // future): that task is cancelled, as a task does with what it awaits. At the deadline
            // the body gets the cancellation at once; else once that task has ended.
            // (Every cancellation of this task is the caller's: the turn's, or the deadline's.)
            let (y, wait) = (y.into_bound(py), wait.into_bound(py));
            let h = helpers(py)?;
            if exc.is_instance(h.cancelled_error.bind(py))? {
                let pending = || Ok::<_, PyErr>(!y.call_method0(intern!(py, "done"))?.is_truthy()?);
                let then = body::callers_cancel(!wait.is(&y), pending, body.deadline.expired(py))?;
                if then.cancels_wait() {
                    y.call_method0(intern!(py, "cancel"))?;
                }
                if then == CallersCancel::CancelAndWait {
                    let wait = super::awaiting::waited(py, h, y.clone(), false)?;
                    body.y = Some((y.unbind(), wait.clone().unbind()));
                    self.state = State::Body(body);
                    return Ok(wait);
                }
            }
        }
        let (h, within, coro) = (helpers(py)?, body.within.bind(py), body.coro.bind(py));
        let (f, v, thrown) = match input {
            Input::Send(v) => (body.send.bind(py), v, None),
            Input::Throw(e) => (body.throw.bind(py), e.clone(), Some(e)),
        };
        let out = match (body.entered, body.unbound) {
            // an exact coroutine sent to in its own context: what it returns comes back as is,
            // no StopIteration made and caught
            (true, true) if thrown.is_none() => send(py, coro, &v),
            (true, true) => f.call1((coro, v)).map(Sent::Yielded),
            (true, false) => f.call1((v,)).map(Sent::Yielded),
            // (in the body's copy of the task's context, entered for the step: see `call_in`)
            (false, true) if thrown.is_none() => super::context::within(py, within, || send(py, coro, &v))
                .unwrap_or_else(|| call_in(py, h, within, f, &[coro, &v]).map(Sent::Yielded)),
            (false, true) => call_in(py, h, within, f, &[coro, &v]).map(Sent::Yielded),
            (false, false) => call_in(py, h, within, f, &[&v]).map(Sent::Yielded),
        };
        // Cancelled at its deadline: whatever the body does but stop the process, the call's
        // outcome is the deadline's (`timeout`), as for a call alone (`body::relay_step`).
        let at_deadline = body::at_deadline(
            thrown.is_some(),
            || body.deadline.expired(py),
            || match &thrown {
                Some(exc) => exc.is_instance(helpers(py)?.cancelled_error.bind(py)),
                None => Ok(false),
            },
        );
        let at_deadline = match at_deadline {
            Ok(a) => a,
            Err(e) => {
                drop(out);
                return self.finish(py, body, None, Some(e.into_value(py).into_bound(py).into_any()));
            }
        };
        let out = match out {
            Ok(Sent::Returned(value)) => BodyStep::Returned(value),
            Ok(Sent::Yielded(y)) => BodyStep::Yielded(y),
            Err(e) if e.is_instance_of::<PyStopIteration>(py) => {
                BodyStep::Returned(e.value(py).getattr(intern!(py, "value"))?)
            }
            Err(e) => BodyStep::Raised(e),
        };
        match body::relay_step(out, at_deadline, |e| thrown_err(py, e)) {
            RelayStepEnd::Value(value) => self.finish(py, body, Some(value), None),
            RelayStepEnd::CleanUpApart(y) => {
                // Its clean-up suspended: that goes on in a task of its own (in the body's
                // context) while this call ends at once with the deadline's cancellation.
                let held = (|| -> PyResult<()> {
                    let h = helpers(py)?;
                    let lp = super::running::running_loop(py)?;
                    let clean_up = Bound::new(
                        py,
                        Relay {
                            state: State::CleanUp((body.coro.clone_ref(py), Some(y.unbind()))),
                            call: None,
                        },
                    )?;
                    let create_task = lp.getattr(intern!(py, "create_task"))?;
                    // (made here, in the body's context, it gets a copy of that)
                    let task = if body.entered {
                        create_task.call1((clean_up,))?
                    } else {
                        call_in(py, h, within, &create_task, &[clean_up.as_any()])?
                    };
                    h.hold_clean_up.bind(py).call1((task,))?;
                    Ok(())
                })();
                let exc = match held {
                    Ok(()) => thrown,
                    Err(e) => Some(e.into_value(py).into_bound(py).into_any()),
                };
                self.finish(py, body, None, exc)
            }
            RelayStepEnd::Wait(y) => {
                let h = helpers(py)?;
                if body::awaits_itself(y.is_none() || y.get_type().is(h.future.bind(py)), || {
                    Ok::<_, PyErr>(y.is(&h.current_task.bind(py).call0()?))
                })? {
                    // As asyncio answers a task that awaits itself, thrown into the body at once.
                    let exc =
                        pyo3::exceptions::PyRuntimeError::new_err(format!("{}{}", body::AWAITS_ITSELF, y.repr()?));
                    return self.step(py, body, Input::Throw(exc.into_value(py).into_bound(py).into_any()));
                }
                let wait = super::awaiting::waited(py, h, y.clone(), false)?;
                body.y = Some((y.unbind(), wait.clone().unbind()));
                self.state = State::Body(body);
                Ok(wait)
            }
            RelayStepEnd::DeadlineOutcome => self.finish(py, body, None, thrown),
            RelayStepEnd::AsRaised(e) => {
                let exc = e.into_value(py).into_bound(py).into_any();
                self.finish(py, body, None, Some(exc))
            }
        }
    }

    /// The body ended (`value` returned, or `exc` raised): leave its deadline, then the call.
    fn finish<'py>(
        &mut self,
        py: Python<'py>,
        mut body: Body,
        mut value: Option<Bound<'py, PyAny>>,
        mut exc: Option<Bound<'py, PyAny>>,
    ) -> Stepped<'py> {
        // The turn cancels its calls' tasks: when it was cancelled, so was this task.
        let by_turn = match &self.call {
            Some(start) => start.mine.cancelled(py)?,
            None => false,
        };
        if let Err(e) = body.deadline.leave_cancelled(py, exc.as_ref(), by_turn) {
            exc = Some(e.into_value(py).into_bound(py).into_any());
            value = None;
        } else if exc.is_none() {
            let h = helpers(py)?;
            let limit = self.call.as_ref().and_then(|s| s.limit);
            let elapsed = || body.started.elapsed().as_secs_f64();
            let passed = crate::deadline::returned_past(body.end, limit, elapsed, || deadline::now(py, h))?;
            if passed {
                // Nothing past the deadline is a success.
                let (tool, limit) = match &self.call {
                    Some(start) => (start.tool.bind(py).clone(), start.limit),
                    None => (py.None().into_bound(py), None),
                };
                exc = Some(
                    deadline::timeout(py, h, &tool, limit)
                        .into_value(py)
                        .into_bound(py)
                        .into_any(),
                );
                value = None;
            }
        }
        self.ended(py, value, body.end, exc)
    }

    /// Finish the call: a value the body returned is checked and fed in here (the turn answers
    /// the call, or says how it goes on: `Owed::then`; an awaitable value is settled within
    /// what is left of the deadline, `end` on `time.monotonic`); what it raised goes to
    /// `Owed::failed`. The task goes on with the call's drive the turn returns, if any.
    fn ended<'py>(
        &mut self,
        py: Python<'py>,
        value: Option<Bound<'py, PyAny>>,
        end: Option<f64>,
        exc: Option<Bound<'py, PyAny>>,
    ) -> Stepped<'py> {
        let Some(Start {
            limit,
            ctx,
            mut mine,
            within,
            ..
        }) = self.call.take()
        else {
            return Err(stopped(py));
        };
        let then = match (exc, value) {
            (Some(exc), _) => mine.owed(py)?.failed(py, exc)?,
            (None, value) => {
                let value = value.unwrap_or_else(|| py.None().into_bound(py));
                let fed = mine.call.returned(py, value, ctx.bind(py), limit, end);
                match fed {
                    Ok((STEP_DONE, env)) => {
                        mine.answer(py, env)?;
                        return Err(stopped(py));
                    }
                    Ok((step, arg)) => mine.owed(py)?.then(py, step, arg)?,
                    // A fault of the pipeline, not of the body.
                    Err(e) => Some(mine.owed(py)?.fault(py, e.into_value(py).into_bound(py).into_any())?),
                }
            }
        };
        let Some((drive, after)) = then else {
            return Err(stopped(py));
        };
        match TurnMachine::later_steps(within.is_some()) {
            Then::Drive => self.then(
                py,
                Awaited::of(py, drive)?,
                after,
                Input::Send(py.None().into_bound(py)),
            ),
            _ => {
                Owed::respawn(py, drive, after)?;
                Err(stopped(py))
            }
        }
    }

    /// A step of the call's drive (`then`); when it ends, its end goes to `after` (the next
    /// abort of a cancelled turn is taken at once).
    fn then<'py>(
        &mut self,
        py: Python<'py>,
        mut then: Awaited,
        mut after: After,
        mut input: Input<'py>,
    ) -> Stepped<'py> {
        loop {
            let out = match then.step(py, input) {
                Out::Yield(y) => {
                    self.state = State::Then((then, after));
                    return Ok(y);
                }
                Out::Return(v) => Ok(v),
                Out::Raise(e) => Err(e),
            };
            match after {
                After::Drive(owed) => {
                    let drive = then.object(py);
                    owed.driven(py, out, &drive)?;
                    return Err(stopped(py));
                }
                After::Abort(owed, exc) => {
                    // (a store or a sink that stopped the process during the abort: that stop
                    // is the call's end)
                    let ended = match &out {
                        Ok(_) => TurnMachine::abort_ended(core::Out::Returned),
                        Err(e) => TurnMachine::abort_ended(out_of_err(py, e)),
                    };
                    let exc = match (ended, out) {
                        (AbortEnded::ByTheStop, Err(e)) => e.into_value(py).into_bound(py).into_any(),
                        (AbortEnded::Propagate, Err(e)) => return Err(super::awaiting::raised_inside(py, e)),
                        _ => exc.into_bound(py),
                    };
                    owed.aborted(py, exc)?;
                    return Err(stopped(py));
                }
                After::Aborts {
                    mut calls,
                    exc,
                    ctx,
                    until,
                    mut stop,
                } => {
                    let step = match &out {
                        Ok(_) => TurnMachine::aborts_step(core::Out::Returned),
                        Err(e) => TurnMachine::aborts_step(out_of_err(py, e)),
                    };
                    match (step, out) {
                        (AbortsStep::LogNext, Err(e)) => abort_failed(py, &e),
                        (AbortsStep::KeepStopNext, Err(e)) => {
                            stop.get_or_insert_with(|| e.into_value(py).into_any());
                        }
                        (AbortsStep::Propagate, Err(e)) => return Err(super::awaiting::raised_inside(py, e)),
                        _ => {}
                    }
                    let Some(m) = calls.next() else {
                        return Err(PyStopIteration::new_err((stop,)));
                    };
                    let drive = Drive::abort_within(py, m, exc.clone_ref(py), ctx.clone_ref(py), until);
                    then = Awaited::of(py, Bound::new(py, drive)?.into_any())?;
                    after = After::Aborts {
                        calls,
                        exc,
                        ctx,
                        until,
                        stop,
                    };
                    input = Input::Send(py.None().into_bound(py));
                }
            }
        }
    }

    /// `close()` (see there), the relay borrowed.
    fn close_now(&mut self, py: Python<'_>) -> PyResult<()> {
        let generator_exit = || super::awaiting::new_exception::<PyGeneratorExit>(py, ());
        let mut raised = None;
        match std::mem::replace(&mut self.state, State::Done) {
            State::Body(mut body) => {
                // The task's coroutine is closed (its loop was closed, or something closed it): so
                // is the body (what that raises: `body::relay_closed_raises`).
                let closed = body
                    .coro
                    .bind(py)
                    .getattr(intern!(py, "close"))
                    .and_then(|c| call_in(py, helpers(py)?, body.within.bind(py), &c, &[]));
                let left = body.deadline.leave(py, Some(&generator_exit()));
                let runtime_error = |e: &PyErr| e.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py);
                raised = body::relay_closed_raises(left, closed.map(drop), runtime_error);
            }
            State::Then((c, after)) => {
                // The drive is closed (it aborts its call as cancelled without awaiting).
                let out = match c.close(py) {
                    Ok(()) => PyErr::from_value(super::awaiting::new_exception::<PyGeneratorExit>(py, ())),
                    Err(e) => e,
                };
                return match after {
                    After::Drive(owed) => match owed.driven(py, Err(out), &c.object(py)) {
                        Err(e) if e.is_instance_of::<PyGeneratorExit>(py) => Ok(()),
                        other => other,
                    },
                    After::Abort(..) if out.is_instance_of::<PyGeneratorExit>(py) => Ok(()),
                    After::Abort(..) => Err(out),
                    After::Aborts { calls, ctx, .. } => {
                        // Nothing can be awaited any more: the calls left are aborted as cancelled
                        // without awaiting.
                        for m in calls {
                            Drive::closed(py, m, ctx.clone_ref(py))?;
                        }
                        if out.is_instance_of::<PyGeneratorExit>(py) {
                            Ok(())
                        } else {
                            Err(out)
                        }
                    }
                };
            }
            // (what propagates of a clean-up's close, as for a call alone's)
            State::CleanUp((c, _)) => match c.bind(py).call_method0(intern!(py, "close")) {
                Err(e) if body::close_propagates(Some(thrown_err(py, &e)), false) => raised = Some(e),
                _ => {}
            },
            State::Pending((drive, _)) => unstarted(py, &drive)?,
            State::Start | State::Done => {}
        }
        if let Some(start) = self.call.take() {
            let exc = raised
                .as_ref()
                .map_or_else(generator_exit, |e| e.value(py).clone().into_any());
            start.mine.owed(py)?.closed(py, exc)?;
        }
        raised.map_or(Ok(()), Err)
    }

    /// One step of a body's clean-up past its deadline, its outcome dropped: a cancellation of
    /// this task (its loop shutting down) that the body swallows closes the body.
    fn clean_up<'py>(
        &mut self,
        py: Python<'py>,
        coro: Py<PyAny>,
        first: Option<Py<PyAny>>,
        input: Input<'py>,
    ) -> Stepped<'py> {
        let c = coro.bind(py);
        let state = body::Await::Waiting {
            entered: first.is_none(),
            clean_up: true,
        };
        match (state.resume(matches!(input, Input::Throw(_))), first) {
            // (its task's first step: nothing to enter)
            (Resume::EnterAndWait, Some(y)) => {
                let y = y.into_bound(py);
                self.state = State::CleanUp((coro, None));
                return Ok(y);
            }
            (Resume::CloseCleanUp, _) => {
                return match c.call_method0(intern!(py, "close")) {
                    Err(e) if body::close_propagates(Some(thrown_err(py, &e)), false) => Err(e),
                    _ => Err(stopped(py)),
                };
            }
            _ => {} // a later step
        }
        let (out, cancelled) = match input {
            Input::Send(v) => (c.call_method1(intern!(py, "send"), (v,)), false),
            Input::Throw(e) => {
                let cancelled = e.is_instance(helpers(py)?.cancelled_error.bind(py))?;
                (c.call_method1(intern!(py, "throw"), (e,)), cancelled)
            }
        };
        let step = |out: &PyResult<Bound<'py, PyAny>>| match out {
            Ok(_) => CleanUpStep::Yielded,
            // (what propagates of a clean-up's outcome, as for a call alone's)
            Err(e) if !body::dropped(true, Some(thrown_err(py, e))) => CleanUpStep::Stopped,
            Err(_) => CleanUpStep::Ended,
        };
        match (TurnMachine::clean_up(step(&out), cancelled), out) {
            (CleanUp::Yield, Ok(y)) => {
                self.state = State::CleanUp((coro, None));
                Ok(y)
            }
            (CleanUp::Close, _) => {
                let closed = c.call_method0(intern!(py, "close"));
                match (TurnMachine::clean_up(step(&closed), false), closed) {
                    (CleanUp::Propagate, Err(e)) => Err(e),
                    _ => Err(stopped(py)),
                }
            }
            // Closed (its loop was closed), or the process is being stopped: that propagates.
            (CleanUp::Propagate, Err(e)) => Err(e),
            _ => Err(stopped(py)), // the outcome of a call past its deadline: nobody reads it
        }
    }
}

impl Coroutine for Relay {
    /// The relay is borrowed only for the step it takes: a step asked for during one (by the
    /// body, on the coroutine of the task running it) gets what a coroutine gives then.
    #[inline]
    fn protocol_step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        let py = slf.py();
        match running(slf)?.resume(py, input) {
            Err(e) if is_stopped(py, &e) => Err(PyStopIteration::new_err(())),
            out => out,
        }
    }

    /// `__next__` (how its task steps it): a return answered without a `StopIteration`.
    #[inline]
    fn protocol_next<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = slf.py();
        match running(slf)?.resume(py, Input::Send(py.None().into_bound(py))) {
            Ok(y) => Ok(Some(y)),
            Err(e) if is_stopped(py, &e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Close what is being stepped (the body's `finally` blocks run; a drive aborts its call as
    /// cancelled without awaiting); raises what the body's close raised. A call not ended yet is
    /// handed to the turn (`Owed::closed`), whose body ended by `GeneratorExit` or by what its
    /// close raised.
    fn protocol_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        running(slf)?.close_now(slf.py())
    }
}

coroutine_methods! {
#[pymethods]
impl Relay {
    // What asyncio's task repr, `Task.get_stack()` / `print_stack()` and debuggers read of a
    // task's coroutine, delegated to the coroutine the relay steps now (the body; the driver's
    // coroutine after it; a clean-up's body): None before the body started and once done;
    // during one of the relay's own steps only `cr_running` (True) is known.

    /// The frame of the coroutine being stepped (None: none, or during a step of this relay).
    #[getter]
    fn cr_frame<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        inner_attr(slf, intern!(slf.py(), "cr_frame"))
    }

    /// The code object of the coroutine being stepped (None as for `cr_frame`).
    #[getter]
    fn cr_code<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        inner_attr(slf, intern!(slf.py(), "cr_code"))
    }

    /// What the coroutine being stepped awaits (None as for `cr_frame`).
    #[getter]
    fn cr_await<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        inner_attr(slf, intern!(slf.py(), "cr_await"))
    }

    /// True during a step of this relay.
    #[getter]
    fn cr_running(slf: &Bound<'_, Self>) -> bool {
        let _in = super::shutdown::inside(slf.py());
        slf.try_borrow().is_err()
    }

    /// The name of the coroutine being stepped (`AttributeError` when there is none, as for
    /// `cr_frame`).
    #[getter]
    fn __name__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        named(slf, intern!(slf.py(), "__name__"))
    }

    /// The qualified name of the coroutine being stepped (as `__name__`).
    #[getter]
    fn __qualname__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        named(slf, intern!(slf.py(), "__qualname__"))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        let start = |s: &Start, visit: &PyVisit<'_>| -> Result<(), PyTraverseError> {
            visit.call(&s.tool)?;
            visit.call(&s.ctx)?;
            s.mine.visit(visit)
        };
        if let Some(s) = &self.call {
            start(s, &visit)?;
            if let Some(w) = &s.within {
                visit.call(w)?;
            }
        }
        match &self.state {
            State::Start => {}
            State::Body(b) => {
                visit.call(&b.coro)?;
                visit.call(&b.send)?;
                visit.call(&b.throw)?;
                visit.call(&b.within)?;
                b.deadline.traverse(&visit)?;
                if let Some((y, wait)) = &b.y {
                    visit.call(y)?;
                    visit.call(wait)?;
                }
            }
            State::Pending((d, after)) => {
                visit.call(d)?;
                after.visit(&visit)?;
            }
            State::Then((c, after)) => {
                c.visit(&visit)?;
                after.visit(&visit)?;
            }
            State::CleanUp((c, y)) => {
                visit.call(c)?;
                if let Some(y) = y {
                    visit.call(y)?;
                }
            }
            State::Done => {}
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.state = State::Done;
        self.call = None;
    }
}
}

/// A relay's drive that never stepped (see `Drive::unstarted`).
fn unstarted(py: Python<'_>, drive: &Py<PyAny>) -> PyResult<()> {
    match drive.bind(py).cast::<Drive>() {
        Ok(d) => d.try_borrow()?.unstarted(py),
        Err(_) => Ok(()),
    }
}
