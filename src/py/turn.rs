//! `Turn`: the calls of one `Invoker.invoke_many` turn of an Invoker whose chain is built-in
//! rules only, as the one awaitable the caller awaits (it implements the coroutine protocol, so
//! the caller's coroutine steps it with `yield from` semantics and no Python frame of ours).
//!
//! Every call is admitted (`Pipeline.begin`) in call order before any body runs. A call the
//! pipeline answers at once is answered; every other call gets one task of its own whose
//! coroutine is a `Relay` (`super::relay`): a call whose first step is to await an `async` body
//! runs just that body in it (no driver, no stand-in task around it), any other call goes
//! through the core's `Drive` in it; whatever a call asks for after its body (a retry, an audit
//! record) goes on through a `Drive` in that same task (in one of its own when the body
//! cancelled its own task and returned). The relay hands its call back here exactly once:
//! answered, stopped, or closed (`Owed`).
//!
//! The caller's cancellation reaches every task still running; once they have all ended, the
//! calls still unanswered are aborted (records `cancelled`, shared claims released) one after
//! the other in a task of their own that further cancellations of the caller do not interrupt,
//! then it propagates. As for a single call, a body is the one to act on it: one that ends by the
//! cancellation is aborted, one that swallows it and answers is settled as it answered.
//! `KeyboardInterrupt`/`SystemExit` from a call aborts it and reaches the caller's `await` the
//! same way. Closed pending (its loop was closed with the turn pending, or it was collected
//! pending), nothing can be awaited any more: each task left has its coroutine closed (its
//! body's `finally` blocks run; its drive aborts its call as cancelled without awaiting), as the
//! collector closes a coroutine dropped pending, and is cancelled if its loop still runs; each
//! call left is aborted as cancelled without awaiting (`Drive.closed`).
use pyo3::exceptions::{PyGeneratorExit, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use pyo3::{PyTraverseError, PyVisit};

use super::awaiting::{raised_inside, Input, Stepped};
use super::coroutine::{coroutine_methods, Coroutine};
use super::deadline::LoopDeadlines;
use super::drive::{call_fault, raised, Awaited, Drive, Out};
use super::pipeline::{helpers, Begun, Call, Pipeline, STEP_DONE};
use super::registry::CoreRegistry;
use super::relay::{After, Relay};
use crate::cancel::Raised;
use crate::turn::{
    self as core, Aborted, Aborting, Admission, Awaitable, BodyRaised, Cancelling, Closing, DriveEnded, Driven, Ending,
    RelayClosed, Start, Step, TaskClosed, Tasks, Then, TurnMachine, WaitEnded, Waiting,
};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Turn>()
}

/// `asyncio.wait`, `asyncio.shield`, the Invoker's logger, `asyncio.Task`, and on Python 3.11+
/// (whose tasks take the context they run in) `asyncio.BaseEventLoop.create_task` (imported
/// once).
struct Helpers {
    wait: Py<PyAny>,
    shield: Py<PyAny>,
    log: Py<PyAny>,
    task: Py<PyAny>,
    create_task: Option<Py<PyAny>>,
}

static HELPERS: PyOnceLock<Helpers> = PyOnceLock::new();

fn own(py: Python<'_>) -> PyResult<&Helpers> {
    HELPERS.get_or_try_init(py, || {
        let asyncio = py.import("asyncio")?;
        Ok(Helpers {
            wait: asyncio.getattr("wait")?.unbind(),
            shield: asyncio.getattr("shield")?.unbind(),
            log: py
                .import("logging")?
                .call_method1("getLogger", ("agentkit_tools.invoker",))?
                .unbind(),
            task: asyncio.getattr("Task")?.unbind(),
            create_task: if py.version_info() >= (3, 11) {
                Some(asyncio.getattr("BaseEventLoop")?.getattr("create_task")?.unbind())
            } else {
                None
            },
        })
    })
}

/// What a step of the turn's own ended with, for the core's decisions (`crate::turn::Out`).
pub(super) fn out_of(py: Python<'_>, out: &Out) -> core::Out {
    match out {
        Out::Yield(_) | Out::Return(_) => core::Out::Returned,
        Out::Raise(e) => out_of_err(py, e),
    }
}

/// What `e` is to the core's decisions (`crate::turn::Out::of_raised`).
pub(super) fn out_of_err(py: Python<'_>, e: &PyErr) -> core::Out {
    core::Out::of_raised(raised(py, e), || e.is_instance_of::<pyo3::exceptions::PyException>(py))
}

/// What the exception object `exc` is to the core's decisions.
pub(super) fn raised_value(py: Python<'_>, exc: &Bound<'_, PyAny>) -> Raised {
    raised(py, &PyErr::from_value(exc.clone()))
}

fn value_of<'py>(py: Python<'py>, e: PyErr) -> Bound<'py, PyAny> {
    e.into_value(py).into_bound(py).into_any()
}

/// How the turn makes the tasks of its calls where the core says they are made directly
/// (`crate::turn::Tasks::Direct`: the loop's `create_task` is asyncio's own): `asyncio.Task(relay,
/// loop=lp, name=..., context=...)` as that method does, each task given its context: a call
/// whose first step is its `async` body gets the copy of the caller's context its body runs in
/// (one copy per call, as `asyncio.gather` makes), any later task a fresh copy of `base`, the
/// caller's context when the turn started. `kw`: the keyword arguments, `loop` set (`name` and
/// `context` set per task).
struct Direct {
    kw: Py<PyDict>,
    base: Py<PyAny>,
}

impl Direct {
    /// Where the loop `lp`'s tasks are made so (the core's `TurnMachine::tasks`).
    fn of(py: Python<'_>, lp: &Bound<'_, PyAny>) -> PyResult<Option<Self>> {
        let create_task = own(py)?.create_task.as_ref();
        let tasks = TurnMachine::tasks(
            create_task.is_some(),
            || match create_task {
                Some(own) => Ok(lp.get_type().getattr(intern!(py, "create_task"))?.is(own.bind(py))),
                None => Ok(false),
            },
            || Ok::<_, PyErr>(lp.call_method0(intern!(py, "get_task_factory"))?.is_none()),
            || lp.call_method0(intern!(py, "get_debug"))?.is_truthy(),
        )?;
        if tasks == Tasks::CreateTask {
            return Ok(None);
        }
        let kw = PyDict::new(py);
        kw.set_item(intern!(py, "loop"), lp)?;
        Ok(Some(Direct {
            kw: kw.unbind(),
            base: helpers(py)?.copy_context.bind(py).call0()?.unbind(),
        }))
    }

    /// A task whose coroutine is `relay`, run in `context`, named `name` (None: asyncio names
    /// it; see `spawn`). (`kw` keeps the last task's context and name until the next task is
    /// made or the turn is gone.)
    fn spawn<'py>(
        &self,
        py: Python<'py>,
        relay: Relay,
        context: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kw = self.kw.bind(py);
        kw.set_item(intern!(py, "context"), context)?;
        kw.set_item(intern!(py, "name"), name)?;
        let task = own(py)?.task.bind(py).call((Bound::new(py, relay)?,), Some(kw))?;
        task.setattr(intern!(py, "_log_destroy_pending"), false)?;
        Ok(task)
    }

    /// A task of the turn's for a call's later steps (in a fresh copy of `base`).
    fn spawn_later<'py>(&self, py: Python<'py>, relay: Relay) -> PyResult<Bound<'py, PyAny>> {
        let context = self.base.bind(py).call_method0(intern!(py, "copy"))?;
        self.spawn(py, relay, &context, None)
    }

    fn clone_ref(&self, py: Python<'_>) -> Self {
        Direct {
            kw: self.kw.clone_ref(py),
            base: self.base.clone_ref(py),
        }
    }

    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.kw)?;
        visit.call(&self.base)
    }
}

/// Where the turn is.
enum Phase {
    /// Not started: the first step admits every call.
    Begin,
    /// Waiting on `waiter` for the last call to be answered.
    Waiting,
    /// Cancelled by `exc`: waiting (`asyncio.wait`) for the tasks still running to end.
    Cancelling {
        exc: Py<PyAny>,
        running: Vec<Py<PyAny>>,
        wait: Awaited,
    },
    /// The calls left are aborted in task `aborts`, awaited shielded.
    Aborting {
        exc: Py<PyAny>,
        aborts: Py<PyAny>,
        shield: Awaited,
    },
    Done,
}

impl Phase {
    /// The phase, to the core's decisions.
    fn kind(&self) -> core::Phase {
        match self {
            Phase::Begin => core::Phase::Begin,
            Phase::Waiting => core::Phase::Waiting,
            Phase::Cancelling { .. } => core::Phase::Cancelling,
            Phase::Aborting { .. } => core::Phase::Aborting,
            Phase::Done => core::Phase::Done,
        }
    }
}

/// The calls of one turn (see the module).
#[pyclass(module = "agentkit_tools._core")]
pub struct Turn {
    pipe: Py<Pipeline>,
    registry: Py<CoreRegistry>,
    calls: Vec<Py<PyAny>>,
    ctx: Py<PyAny>,
    /// The running loop and the future the turn waits on (from the first step on).
    lp: Option<Py<PyAny>>,
    /// The deadline timer of that loop, found when the first body enters its deadline.
    timer: Option<Py<LoopDeadlines>>,
    direct: Option<Direct>,
    waiter: Option<Py<PyAny>>,
    envs: Vec<Option<Py<PyAny>>>,
    /// The task of each call not answered yet, and the state of each call neither answered nor
    /// aborted (none while a call's relay runs its body and holds its state: `Mine`).
    tasks: Vec<Option<Py<PyAny>>>,
    machines: Vec<Option<Py<Call>>>,
    /// The core's decisions: the calls unanswered, whether the turn was cancelled, whether a
    /// call's stop was kept, the one bound of its aborts, whether a step runs
    /// (`crate::turn::TurnMachine`).
    machine: TurnMachine,
    /// The first `KeyboardInterrupt`/`SystemExit` of a call (the one `machine` kept).
    stop: Option<Py<PyAny>>,
    phase: Phase,
}

/// Call `i` of `turn` is answered with `env`: its task and state are let go.
fn answer_at(turn: &Bound<'_, Turn>, i: usize, env: Bound<'_, PyAny>) -> PyResult<()> {
    let py = turn.py();
    let (waiter, _task, _m) = {
        let mut t = turn.try_borrow_mut()?;
        t.envs[i] = Some(env.unbind());
        let dropped = (t.tasks[i].take(), t.machines[i].take());
        (
            if t.machine.answered() {
                t.waiter.as_ref().map(|w| w.clone_ref(py))
            } else {
                None
            },
            dropped.0,
            dropped.1,
        )
    };
    if let Some(w) = waiter {
        let w = w.bind(py);
        if !w.call_method0(intern!(py, "done"))?.is_truthy()? {
            w.call_method1(intern!(py, "set_result"), (py.None(),))?;
        }
    }
    Ok(())
}

/// The call `i` of `turn` whose first step is its `async` body, its state `call` held by the
/// relay that runs the body (one object less per call while the body runs): the turn has no
/// state of it meanwhile. Whichever way the relay ends, the state is handed on exactly once:
/// the call answered, or the state made an object of its own that the turn keeps (`Mine::owed`:
/// a call that goes on past its body, or that the turn aborts).
pub(super) struct Mine {
    pub(super) turn: Py<Turn>,
    pub(super) i: usize,
    pub(super) call: Call,
}

impl Mine {
    pub(super) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.turn)?;
        self.call.__traverse__(*visit)
    }

    /// The call's state as an object of its own, kept by the turn (until the call is answered or
    /// aborted): what the call owes the turn from here on.
    pub(super) fn owed(self, py: Python<'_>) -> PyResult<Owed> {
        let m = Py::new(py, self.call)?;
        let old = self.turn.bind(py).try_borrow_mut()?.machines[self.i].replace(m.clone_ref(py));
        drop(old);
        Ok(Owed {
            turn: self.turn,
            i: self.i,
            m,
        })
    }

    /// The call is answered with `env`.
    pub(super) fn answer(self, py: Python<'_>, env: Bound<'_, PyAny>) -> PyResult<()> {
        answer_at(self.turn.bind(py), self.i, env)
    }

    /// See `Owed::cancelled`.
    pub(super) fn cancelled(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.turn.bind(py).try_borrow()?.machine.cancelled())
    }

    /// The call's task and the deadline timer of the turn's loop (found once per turn), once the
    /// turn has started.
    pub(super) fn task_and_timer<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, LoopDeadlines>)>> {
        let turn = self.turn.bind(py);
        let (task, lp, timer) = {
            let t = turn.try_borrow()?;
            match (&t.tasks[self.i], &t.lp) {
                (Some(task), Some(lp)) => (
                    task.bind(py).clone(),
                    lp.bind(py).clone(),
                    t.timer.as_ref().map(|d| d.bind(py).clone()),
                ),
                _ => return Ok(None),
            }
        };
        let timer = match timer {
            Some(timer) => timer,
            None => {
                let timer = super::deadline::timer_of(py, &lp)?;
                turn.try_borrow_mut()?.timer = Some(timer.clone().unbind());
                timer
            }
        };
        Ok(Some((task, timer)))
    }
}

/// The call `i` of `turn` (its state `m`) a relay owes the turn an end for.
pub(super) struct Owed {
    pub(super) turn: Py<Turn>,
    pub(super) i: usize,
    pub(super) m: Py<Call>,
}

impl Owed {
    fn clone_ref(&self, py: Python<'_>) -> Owed {
        Owed {
            turn: self.turn.clone_ref(py),
            i: self.i,
            m: self.m.clone_ref(py),
        }
    }

    pub(super) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.turn)?;
        visit.call(&self.m)
    }

    /// The call is answered with `env`.
    pub(super) fn answer(self, py: Python<'_>, env: Bound<'_, PyAny>) -> PyResult<()> {
        answer_at(self.turn.bind(py), self.i, env)
    }

    /// The call raised `KeyboardInterrupt`/`SystemExit` (it was aborted): the caller's `await`
    /// raises it.
    fn stopped(self, py: Python<'_>, exc: Bound<'_, PyAny>) -> PyResult<()> {
        let turn = self.turn.bind(py);
        let (waiter, _m) = {
            let mut t = turn.try_borrow_mut()?;
            let m = t.machines[self.i].take();
            if t.machine.stopped() {
                t.stop = Some(exc.clone().unbind());
            }
            (t.waiter.as_ref().map(|w| w.clone_ref(py)), m)
        };
        if let Some(w) = waiter {
            let w = w.bind(py);
            if !w.call_method0(intern!(py, "done"))?.is_truthy()? {
                w.call_method1(intern!(py, "set_exception"), (exc,))?;
            }
        }
        Ok(())
    }

    fn forget(&self, py: Python<'_>) -> PyResult<()> {
        let m = self.turn.bind(py).try_borrow_mut()?.machines[self.i].take();
        drop(m);
        Ok(())
    }

    fn machine(&self, py: Python<'_>) -> PyResult<TurnMachine> {
        Ok(self.turn.bind(py).try_borrow()?.machine.clone())
    }

    fn ctx<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.turn.bind(py).try_borrow()?.ctx.bind(py).clone())
    }

    fn call<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.turn.bind(py).try_borrow()?.calls[self.i].bind(py).clone())
    }

    fn loop_closed(&self, py: Python<'_>) -> PyResult<bool> {
        let lp = self.turn.bind(py).try_borrow()?.lp.as_ref().map(|l| l.clone_ref(py));
        match lp {
            Some(lp) => lp.bind(py).call_method0(intern!(py, "is_closed"))?.is_truthy(),
            None => Ok(true),
        }
    }

    /// The drive of the call from `(step, arg)` on, and what its end is for.
    fn drive<'py>(self, py: Python<'py>, step: u8, arg: Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, After)> {
        let drive = Drive::go(py, self.m.clone_ref(py), step, arg.unbind(), self.ctx(py)?.unbind());
        Ok((Bound::new(py, drive)?.into_any(), After::Drive(self)))
    }

    /// Abort the call by `exc`, then answer it (or stop).
    fn abort<'py>(self, py: Python<'py>, exc: Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, After)> {
        let (m, ctx) = (self.m.clone_ref(py), self.ctx(py)?.unbind());
        let drive = if TurnMachine::aborts_within_turn(raised_value(py, &exc)) {
            // The turn's cancellation follows once this call is aborted: one bound for both.
            let until = self
                .turn
                .bind(py)
                .try_borrow_mut()?
                .machine
                .abort_bound(std::time::Instant::now());
            Drive::abort_within(py, m, exc.clone().unbind(), ctx, until)
        } else {
            Drive::abort(py, m, exc.clone().unbind(), ctx)
        };
        Ok((Bound::new(py, drive)?.into_any(), After::Abort(self, exc.unbind())))
    }

    /// A task of the turn's own for the call's relay; replaces the call's task.
    fn spawn<'py>(&self, py: Python<'py>, what: (Bound<'py, PyAny>, After)) -> PyResult<()> {
        let turn = self.turn.bind(py);
        let (lp, direct) = {
            let t = turn.try_borrow()?;
            let direct = t.direct.as_ref().map(|d| d.clone_ref(py));
            (t.lp.as_ref().map(|l| l.clone_ref(py)), direct)
        };
        let lp = lp.ok_or_else(|| PyRuntimeError::new_err("the turn has not started"))?;
        let relay = Relay::driving(what.0, what.1);
        let task = match direct {
            Some(d) => d.spawn_later(py, relay)?,
            None => spawn(py, &lp.bind(py).getattr(intern!(py, "create_task"))?, relay)?,
        };
        let old = turn.try_borrow_mut()?.tasks[self.i].replace(task.unbind());
        drop(old);
        Ok(())
    }

    /// The call's later steps (`drive`, its end for `after`) go on in a task of their own: its
    /// relay ran the body in the body's context.
    pub(super) fn respawn<'py>(py: Python<'py>, drive: Bound<'py, PyAny>, after: After) -> PyResult<()> {
        let me = match &after {
            After::Drive(o) | After::Abort(o, _) => o.clone_ref(py),
            After::Aborts { .. } => {
                return Err(PyRuntimeError::new_err(
                    "the aborts of a turn go on in a task of their own",
                ))
            }
        };
        me.spawn(py, (drive, after))
    }

    /// The call's body raised `exc` in its relay (its deadline's `ToolTimeoutError` included):
    /// None when the call is settled, else what the relay goes on with.
    pub(super) fn failed<'py>(
        self,
        py: Python<'py>,
        exc: Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, After)>> {
        match self.machine(py)?.body_raised(raised_value(py, &exc)) {
            BodyRaised::Abort => return self.abort(py, exc).map(Some),
            BodyRaised::Left => return Ok(None), // ended by the caller's cancellation: the turn aborts it
            // an exception of the body's, a BaseException of its own too
            BodyRaised::Feed => {}
        }
        let fed = self
            .m
            .bind(py)
            .try_borrow_mut()
            .map_err(PyErr::from)
            .and_then(|mut c| c.failed(py, exc));
        match fed {
            Ok((step, arg)) => self.then(py, step, arg),
            Err(e) => self.abort(py, value_of(py, e)).map(Some),
        }
    }

    /// The call goes on from `(step, arg)` after its body: answered at once, else the drive the
    /// relay goes on with (returned), or a task of its own.
    pub(super) fn then<'py>(
        self,
        py: Python<'py>,
        step: u8,
        arg: Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, After)>> {
        let own_task_cancelled = || -> PyResult<bool> {
            let task = helpers(py)?.current_task.bind(py).call0()?;
            Ok(!task.is_none() && task.getattr(intern!(py, "_must_cancel"))?.is_truthy()?)
        };
        let done = step == STEP_DONE;
        match TurnMachine::then(done, !done && own_task_cancelled()?) {
            Then::Answer => {
                self.answer(py, arg)?;
                Ok(None)
            }
            Then::OwnTask => {
                // The body cancelled its own task and returned: as for a call alone, that
                // cancellation was the body's; the call's later steps (settling an awaitable it
                // returned included) go on in a task of their own.
                self.clone_ref(py).spawn(py, self.drive(py, step, arg)?)?;
                Ok(None)
            }
            Then::Drive => self.drive(py, step, arg).map(Some),
        }
    }

    /// A fault of the pipeline feeding in what the body returned: abort the call.
    pub(super) fn fault<'py>(self, py: Python<'py>, exc: Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, After)> {
        self.abort(py, exc)
    }

    /// The call's drive ended with `out` (`drive`: it).
    pub(super) fn driven(
        self,
        py: Python<'_>,
        out: PyResult<Bound<'_, PyAny>>,
        drive: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let machine = self.machine(py)?;
        let driven = match &out {
            Ok(_) => Driven::Returned,
            // Closed: the drive aborted the call as cancelled. (A GeneratorExit a callback raised
            // itself is its own failure, answered below as any other.)
            Err(e)
                if e.is_instance_of::<PyGeneratorExit>(py)
                    && drive.getattr(intern!(py, "was_closed"))?.is_truthy()? =>
            {
                Driven::Closed
            }
            Err(e) => Driven::Raised(raised(py, e)),
        };
        let loop_closed = || self.loop_closed(py).unwrap_or(true);
        match (machine.drive_ended(driven, loop_closed), out) {
            (DriveEnded::Answer, Ok(env)) => self.answer(py, env),
            (DriveEnded::Closed { answer }, Err(e)) => {
                self.forget(py)?;
                if answer {
                    let env = super::tools::fault_envelope(py, e.value(py).as_any())?;
                    self.answer(py, env.into_any())?; // something closed it: the turn goes on
                }
                Err(e)
            }
            (DriveEnded::Stopped, Err(e)) => self.stopped(py, value_of(py, e)),
            (DriveEnded::Left, _) => self.forget(py),
            (_, out) => {
                let exc = match out {
                    Ok(v) => v,
                    Err(e) => value_of(py, e),
                };
                let env = call_fault(py, exc, self.call(py)?, false)?;
                self.answer(py, env.into_any())
            }
        }
    }

    /// The call was aborted by `exc`: answered with the fault envelope, or the stop raised at
    /// the caller's `await`.
    pub(super) fn aborted(self, py: Python<'_>, exc: Bound<'_, PyAny>) -> PyResult<()> {
        match TurnMachine::aborted(raised_value(py, &exc)) {
            Aborted::Stopped => self.stopped(py, exc),
            Aborted::Fault => {
                let env = call_fault(py, exc, self.call(py)?, false)?;
                self.answer(py, env.into_any())
            }
        }
    }

    /// The call's relay was closed before the call ended: its body, if it had started, ended by
    /// `exc` (`GeneratorExit`, or what its `finally` raised). A turn being cancelled or closed
    /// aborts the call itself; with its loop closed, the call is aborted as cancelled without
    /// awaiting; else it ends as a call whose body raised `exc` (its later steps in a task of
    /// their own).
    pub(super) fn closed(self, py: Python<'_>, exc: Bound<'_, PyAny>) -> PyResult<()> {
        let (machine, mine) = {
            let t = self.turn.bind(py).try_borrow()?;
            (
                t.machine.clone(),
                t.machines[self.i].as_ref().is_some_and(|m| m.is(&self.m)),
            )
        };
        let loop_closed = || self.loop_closed(py).unwrap_or(true);
        let fed = match machine.relay_closed(mine, loop_closed, raised_value(py, &exc)) {
            RelayClosed::Nothing => return Ok(()),
            RelayClosed::CloseUnawaited => {
                self.forget(py)?;
                return Drive::closed(py, self.m.clone_ref(py), self.ctx(py)?.unbind());
            }
            RelayClosed::Abort => Err(PyErr::from_value(exc)),
            RelayClosed::Feed => self
                .m
                .bind(py)
                .try_borrow_mut()
                .map_err(PyErr::from)
                .and_then(|mut c| c.failed(py, exc)),
        };
        let me = self.clone_ref(py);
        match fed {
            Ok((step, arg)) => match TurnMachine::after_relay_closed(step == STEP_DONE) {
                Then::Answer => self.answer(py, arg),
                _ => me.spawn(py, self.drive(py, step, arg)?),
            },
            Err(e) => me.spawn(py, self.abort(py, value_of(py, e))?),
        }
    }
}

/// A task whose coroutine is `relay` (`create_task`: the loop's). As `asyncio.gather` does for
/// the tasks it creates: the turn's caller cannot reach them, so a loop closed with them pending
/// drops them without a report (the caller's own task is reported, if it asks for that).
fn spawn<'py>(py: Python<'py>, create_task: &Bound<'py, PyAny>, relay: Relay) -> PyResult<Bound<'py, PyAny>> {
    spawn_with(py, create_task, relay, None)
}

/// `spawn`, `create_task` given the keyword arguments `kw`.
fn spawn_with<'py>(
    py: Python<'py>,
    create_task: &Bound<'py, PyAny>,
    relay: Relay,
    kw: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let task = create_task.call((Bound::new(py, relay)?,), kw)?;
    task.setattr(intern!(py, "_log_destroy_pending"), false)?;
    Ok(task)
}

/// The names of the tasks a turn makes for its calls' bodies, made once per tool and turn: as
/// the body of a call alone is named (`core::body_task_name` of the `__qualname__` of the
/// tool's function, `tool.__wrapped__`; `?` when it has none). None when that cannot be read:
/// asyncio names the task.
#[derive(Default)]
struct BodyNames<'py> {
    made: Vec<(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>)>,
}

impl<'py> BodyNames<'py> {
    fn of(&mut self, tool: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
        if let Some((_, name)) = self.made.iter().find(|(t, _)| t.is(tool)) {
            return name.clone();
        }
        let py = tool.py();
        let qualname = tool.getattr(intern!(py, "__wrapped__")).and_then(|f| {
            Ok(match f.getattr_opt(intern!(py, "__qualname__"))? {
                Some(q) => q.str()?.to_string_lossy().into_owned(),
                None => "?".to_owned(),
            })
        });
        let name = qualname
            .ok()
            .map(|q| pyo3::types::PyString::new(py, &core::body_task_name(&q)).into_any());
        self.made.push((tool.clone(), name.clone()));
        name
    }
}

/// The aborts of a cancelled turn's calls failed on `e`: logged (the next call is aborted).
pub(super) fn abort_failed(py: Python<'_>, e: &PyErr) {
    if let Ok(h) = own(py) {
        super::drive::log(
            py,
            &h.log,
            "error",
            "Invoker failed to abort a call of a cancelled turn",
            Vec::new(),
            Some(e),
        );
    }
}

/// A wait of the turn's own ended with `out` (not a yield): Ok to look again, else what it
/// raised (`crate::turn::TurnMachine::wait_ended`).
fn again(py: Python<'_>, out: Out) -> PyResult<()> {
    match (TurnMachine::wait_ended(out_of(py, &out)), out) {
        (WaitEnded::Propagate, Out::Raise(e)) => Err(e),
        _ => Ok(()),
    }
}

/// The turn, borrowed for a short while (never across a call into Python that may step a
/// relay of its).
fn state<'py>(slf: &Bound<'py, Turn>) -> PyResult<PyRefMut<'py, Turn>> {
    Ok(slf.try_borrow_mut()?)
}

impl Turn {
    /// A step of the caller's `await`.
    fn resume<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        if !state(slf)?.machine.enter() {
            return Err(PyValueError::new_err("coroutine already executing"));
        }
        let out = Self::step(slf, input);
        if let Ok(mut t) = slf.try_borrow_mut() {
            t.machine.leave();
        }
        out
    }

    /// The step the core's `TurnMachine::on` says the turn's phase takes for `input`.
    fn step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        let py = slf.py();
        let given = match &input {
            Input::Send(v) => core::Input::Send { none: v.is_none() },
            Input::Throw(exc) => core::Input::Throw {
                exit: exc.is_instance_of::<PyGeneratorExit>(),
            },
        };
        let step = TurnMachine::on(state(slf)?.phase.kind(), given);
        match (step, input) {
            (Step::Close, Input::Throw(exc)) => {
                Self::close_now(slf)?;
                Err(PyErr::from_value(exc))
            }
            (Step::NotNone, _) => Err(PyTypeError::new_err(
                "can't send non-None value to a just-started coroutine",
            )),
            (step, input) => {
                let phase = std::mem::replace(&mut state(slf)?.phase, Phase::Done);
                match (step, phase, input) {
                    (Step::Start, _, _) => Self::start(slf),
                    (Step::Wake, _, _) => Self::wake(slf),
                    (Step::Cancel, _, Input::Throw(exc)) => Self::cancel(slf, exc),
                    (Step::StepWait, Phase::Cancelling { exc, running, wait }, input) => match wait.step(py, input) {
                        Out::Yield(y) => {
                            state(slf)?.phase = Phase::Cancelling { exc, running, wait };
                            Ok(y)
                        }
                        // cancelled again: they are cancelled again (as gather does)
                        out => {
                            again(py, out)?;
                            Self::cancelling(slf, exc.into_bound(py), running)
                        }
                    },
                    (Step::StepShield, Phase::Aborting { exc, aborts, shield }, input) => {
                        match shield.step(py, input) {
                            Out::Yield(y) => {
                                state(slf)?.phase = Phase::Aborting { exc, aborts, shield };
                                Ok(y)
                            }
                            // cancelled again: the aborts go on; the first cancellation propagates
                            out => {
                                again(py, out)?;
                                Self::shielding(slf, exc.into_bound(py), aborts.into_bound(py))
                            }
                        }
                    }
                    (Step::Raise, _, Input::Throw(exc)) => Err(raised_inside(py, PyErr::from_value(exc))),
                    (Step::Reused, _, _) => Err(PyRuntimeError::new_err("cannot reuse already awaited coroutine")),
                    _ => Err(PyRuntimeError::new_err("the turn's step does not match its phase")),
                }
            }
        }
    }

    /// Woken while waiting: as an asyncio future's await does, the waiter is yielded again once
    /// its task took it; stepped again before that, it is a misuse.
    fn wake<'py>(slf: &Bound<'py, Self>) -> Stepped<'py> {
        let py = slf.py();
        let waiter = state(slf)?.waiter.as_ref().map(|w| w.clone_ref(py));
        let waiter = waiter
            .ok_or_else(|| PyRuntimeError::new_err("the turn has not started"))?
            .into_bound(py);
        let blocking = intern!(py, "_asyncio_future_blocking");
        let done = waiter.call_method0(intern!(py, "done"))?.is_truthy()?;
        let not_taken = !done && waiter.getattr(blocking)?.is_truthy()?;
        match TurnMachine::waiting(done, not_taken) {
            Waiting::Misuse => {
                let misuse = py
                    .get_type::<PyRuntimeError>()
                    .call1(("await wasn't used with future",))?;
                Self::cancel(slf, misuse)
            }
            Waiting::Wait => {
                waiter.setattr(blocking, true)?;
                state(slf)?.phase = Phase::Waiting;
                Ok(waiter)
            }
            Waiting::Finish => match waiter.call_method0(intern!(py, "result")) {
                Ok(_) => Self::finished(slf),
                Err(e) => Self::cancel(slf, value_of(py, e)),
            },
        }
    }

    /// The first step: admit and start every call in call order, then wait for them.
    fn start<'py>(slf: &Bound<'py, Self>) -> Stepped<'py> {
        let py = slf.py();
        let lp = super::running::running_loop(py)?;
        let waiter = lp.call_method0(intern!(py, "create_future"))?;
        let (pipe, registry, calls, ctx) = {
            let mut t = state(slf)?;
            t.lp = Some(lp.clone().unbind());
            t.waiter = Some(waiter.clone().unbind());
            let calls: Vec<Py<PyAny>> = t.calls.iter().map(|c| c.clone_ref(py)).collect();
            (
                t.pipe.clone_ref(py),
                t.registry.clone_ref(py),
                calls,
                t.ctx.clone_ref(py),
            )
        };
        let (pipe, registry, ctx) = (pipe.bind(py), registry.bind(py), ctx.bind(py));
        let turn = slf.clone().unbind();
        let create_task = lp.getattr(intern!(py, "create_task"))?;
        let direct = Direct::of(py, &lp)?;
        state(slf)?.direct = direct.as_ref().map(|d| d.clone_ref(py));
        let copy_context = helpers(py)?.copy_context.bind(py);
        // What every call of the turn reads of the context and the rules, read once.
        let shared = Pipeline::shared(pipe, ctx);
        let mut names = BodyNames::default();
        for (i, call) in calls.iter().enumerate() {
            let call = call.bind(py);
            let begun = Pipeline::admit_unsealed(pipe, registry, call, ctx, &shared);
            let start = TurnMachine::admitted(match &begun {
                Ok(Begun::Body(..)) => Admission::Body,
                Ok(Begun::Step(_, step, _)) => Admission::Step {
                    done: *step == STEP_DONE,
                },
                Err(e) => Admission::Raised(raised(py, e)),
            });
            let task = match (start, begun) {
                (Start::Body, Ok(Begun::Body(m, limit))) => {
                    let tool = m.tool_object(py);
                    let name = names.of(&tool);
                    let mine = Mine {
                        turn: turn.clone_ref(py),
                        i,
                        call: m,
                    };
                    let tool = tool.unbind();
                    match &direct {
                        Some(d) => {
                            let within = copy_context.call0()?;
                            d.spawn(
                                py,
                                Relay::body(tool, limit, ctx.clone().unbind(), mine, Some(within.clone().unbind())),
                                &within,
                                name.as_ref(),
                            )?
                        }
                        None => {
                            let kw = PyDict::new(py);
                            kw.set_item(intern!(py, "name"), name)?;
                            spawn_with(
                                py,
                                &create_task,
                                Relay::body(tool, limit, ctx.clone().unbind(), mine, None),
                                Some(&kw),
                            )?
                        }
                    }
                }
                (Start::Answer, Ok(Begun::Step(m, _, env))) => {
                    drop(m); // a call answered already needs no state on the Python side
                    answer_at(slf, i, env)?;
                    continue;
                }
                (Start::Drive, Ok(Begun::Step(m, step, arg))) => {
                    let m = Py::new(py, m)?;
                    state(slf)?.machines[i] = Some(m.clone_ref(py));
                    let owed = Owed {
                        turn: turn.clone_ref(py),
                        i,
                        m: m.clone_ref(py),
                    };
                    let (drive, after) = owed.drive(py, step, arg)?;
                    spawn(py, &create_task, Relay::driving(drive, after))?
                }
                (Start::Cancel, Err(e)) => return Self::cancel(slf, value_of(py, e)),
                (Start::Fault, Err(e)) => {
                    let env = call_fault(py, value_of(py, e), call.clone(), false)?;
                    answer_at(slf, i, env.into_any())?;
                    continue;
                }
                _ => return Err(PyRuntimeError::new_err("a call's start does not match its admission")),
            };
            let old = state(slf)?.tasks[i].replace(task.unbind());
            drop(old);
        }
        let started = state(slf)?.machine.started();
        match started {
            Waiting::Wait => {
                state(slf)?.phase = Phase::Waiting;
                waiter.setattr(intern!(py, "_asyncio_future_blocking"), true)?;
                Ok(waiter)
            }
            _ => Self::finished(slf),
        }
    }

    /// Every call is answered: the envelopes in call order.
    fn finished<'py>(slf: &Bound<'py, Self>) -> Stepped<'py> {
        let py = slf.py();
        let envs = std::mem::take(&mut state(slf)?.envs);
        let envs = PyList::new(py, envs.into_iter().map(|e| e.unwrap_or_else(|| py.None())))?;
        Err(pyo3::exceptions::PyStopIteration::new_err((envs.unbind(),)))
    }

    /// The caller's cancellation, or a request to stop (`exc`): every task still running is
    /// cancelled; once all have ended, the calls left are aborted; then `exc` propagates.
    fn cancel<'py>(slf: &Bound<'py, Self>, exc: Bound<'py, PyAny>) -> Stepped<'py> {
        let py = slf.py();
        let running = {
            let mut t = state(slf)?;
            t.machine.cancel(std::time::Instant::now());
            t.tasks.iter().flatten().map(|t| t.clone_ref(py)).collect()
        };
        Self::cancelling(slf, exc, running)
    }

    fn cancelling<'py>(slf: &Bound<'py, Self>, exc: Bound<'py, PyAny>, running: Vec<Py<PyAny>>) -> Stepped<'py> {
        let py = slf.py();
        let mut running = running;
        loop {
            let mut left = Vec::with_capacity(running.len());
            for t in running {
                if !t.bind(py).call_method0(intern!(py, "done"))?.is_truthy()? {
                    left.push(t);
                }
            }
            if TurnMachine::cancelling(left.len()) == Cancelling::Abort {
                return Self::aborting(slf, exc);
            }
            for t in &left {
                t.bind(py).call_method0(intern!(py, "cancel"))?;
            }
            let wait = Awaited::of(py, own(py)?.wait.bind(py).call1((PyList::new(py, &left)?,))?)?;
            match wait.step(py, Input::Send(py.None().into_bound(py))) {
                Out::Yield(y) => {
                    state(slf)?.phase = Phase::Cancelling {
                        exc: exc.unbind(),
                        running: left,
                        wait,
                    };
                    return Ok(y);
                }
                out => again(py, out)?,
            }
            running = left;
        }
    }

    /// The calls still unanswered are aborted in a task of their own, awaited shielded.
    fn aborting<'py>(slf: &Bound<'py, Self>, exc: Bound<'py, PyAny>) -> Stepped<'py> {
        let py = slf.py();
        let (rest, ctx, lp, until) = {
            let mut t = state(slf)?;
            let rest: Vec<Py<Call>> = t.machines.iter_mut().filter_map(Option::take).collect();
            let until = t.machine.abort_bound(std::time::Instant::now()); // one bound for all the calls' aborts
            (rest, t.ctx.clone_ref(py), t.lp.as_ref().map(|l| l.clone_ref(py)), until)
        };
        let (Aborting::Abort, Some(lp)) = (TurnMachine::aborting(rest.len(), lp.is_some()), lp) else {
            return Self::raise(slf, exc);
        };
        let mut rest = rest.into_iter();
        let Some(first) = rest.next() else {
            return Self::raise(slf, exc);
        };
        let drive = Bound::new(
            py,
            Drive::abort_within(py, first, exc.clone().unbind(), ctx.clone_ref(py), until),
        )?
        .into_any();
        let aborts = spawn(
            py,
            &lp.bind(py).getattr(intern!(py, "create_task"))?,
            Relay::driving(
                drive,
                After::Aborts {
                    calls: rest,
                    exc: exc.clone().unbind(),
                    ctx,
                    until,
                    stop: None,
                },
            ),
        )?;
        Self::shielding(slf, exc, aborts)
    }

    fn shielding<'py>(slf: &Bound<'py, Self>, exc: Bound<'py, PyAny>, aborts: Bound<'py, PyAny>) -> Stepped<'py> {
        let py = slf.py();
        while !aborts.call_method0(intern!(py, "done"))?.is_truthy()? {
            let shield = Awaited::of(py, own(py)?.shield.bind(py).call1((&aborts,))?)?;
            match shield.step(py, Input::Send(py.None().into_bound(py))) {
                Out::Yield(y) => {
                    state(slf)?.phase = Phase::Aborting {
                        exc: exc.unbind(),
                        aborts: aborts.unbind(),
                        shield,
                    };
                    return Ok(y);
                }
                out => again(py, out)?,
            }
        }
        // A store or a sink stopped the process during the aborts (their task's value): the
        // turn ends by that stop once they are done.
        if let Ok(stop) = aborts.call_method0(intern!(py, "result")) {
            let mut t = state(slf)?;
            if t.machine.aborts_done(!stop.is_none()) {
                t.stop = Some(stop.unbind());
            }
        }
        Self::raise(slf, exc)
    }

    /// The turn ends by `exc`, or by the stop a call raised meanwhile.
    fn raise<'py>(slf: &Bound<'py, Self>, exc: Bound<'py, PyAny>) -> Stepped<'py> {
        let py = slf.py();
        let (ending, stop) = {
            let t = state(slf)?;
            let stop = t.stop.as_ref().map(|s| s.clone_ref(py));
            (t.machine.ending(stop.as_ref().is_some_and(|s| s.is(&exc))), stop)
        };
        match (ending, stop) {
            (Ending::Stop, Some(stop)) => {
                // a call stopped the process while the turn was cancelled
                let stop = stop.into_bound(py);
                stop.setattr(intern!(py, "__cause__"), py.None())?;
                Err(PyErr::from_value(stop))
            }
            _ => Err(PyErr::from_value(exc)),
        }
    }

    /// `close()`: what the core's `TurnMachine::closing` says the turn's phase does (see
    /// `close_task` for how a task left is closed; each call left is aborted as cancelled
    /// without awaiting).
    fn close_now(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut phase = std::mem::replace(&mut state(slf)?.phase, Phase::Done);
        // Asked only while the aborts run (and not with the turn borrowed).
        let aborts_loop_closed = match &phase {
            Phase::Aborting { aborts, .. } => aborts
                .bind(py)
                .call_method0(intern!(py, "get_loop"))?
                .call_method0(intern!(py, "is_closed"))?
                .is_truthy()?,
            _ => false,
        };
        let closing = state(slf)?.machine.closing(phase.kind(), || aborts_loop_closed);
        match (closing, &mut phase) {
            (Closing::Nothing, _) => Ok(()),
            (Closing::Aborts { task }, Phase::Aborting { shield, aborts, .. }) => {
                drop(shield.close(py));
                if task {
                    close_task(py, aborts.bind(py))
                } else {
                    Ok(())
                }
            }
            (Closing::Calls { wait }, phase) => {
                if let (true, Phase::Cancelling { wait, .. }) = (wait, phase) {
                    drop(wait.close(py));
                }
                let tasks: Vec<Py<PyAny>> = state(slf)?.tasks.iter().flatten().map(|t| t.clone_ref(py)).collect();
                for task in tasks {
                    close_task(py, task.bind(py))?;
                }
                let (machines, ctx) = {
                    let mut t = state(slf)?;
                    let machines: Vec<Py<Call>> = t.machines.iter_mut().filter_map(Option::take).collect();
                    (machines, t.ctx.clone_ref(py))
                };
                for m in machines {
                    Drive::closed(py, m, ctx.clone_ref(py))?;
                }
                Ok(())
            }
            _ => Err(PyRuntimeError::new_err("the turn's close does not match its phase")),
        }
    }
}

/// A task of a turn being closed: its coroutine is closed (its body's `finally` blocks run, its
/// drive aborts its call as cancelled without awaiting), as the collector closes a coroutine
/// dropped with it; then what the core's `TurnMachine::task_closed` says.
fn close_task(py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
    if task.call_method0(intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    let closed = task
        .call_method0(intern!(py, "get_coro"))
        .and_then(|c| c.call_method0(intern!(py, "close")));
    let out = match &closed {
        Ok(_) => core::Out::Returned,
        Err(e) => out_of_err(py, e),
    };
    let mut asked = Ok(false);
    let loop_closed = || {
        asked = task
            .call_method0(intern!(py, "get_loop"))
            .and_then(|l| l.call_method0(intern!(py, "is_closed")))
            .and_then(|c| c.is_truthy());
        *asked.as_ref().unwrap_or(&true)
    };
    match TurnMachine::task_closed(out, loop_closed) {
        TaskClosed::Propagate => closed.map(drop),
        TaskClosed::Leave => asked.map(drop),
        TaskClosed::Cancel => task.call_method0(intern!(py, "cancel")).map(drop),
    }
}

impl Coroutine for Turn {
    /// `RuntimeError` once the turn has started: one caller awaits it, as one awaits a coroutine.
    fn awaited(slf: &Bound<'_, Self>) -> PyResult<()> {
        match TurnMachine::awaitable(state(slf)?.phase.kind()) {
            Awaitable::Yes => Ok(()),
            Awaitable::Reused => Err(PyRuntimeError::new_err("cannot reuse already awaited coroutine")),
            Awaitable::Awaited => Err(PyRuntimeError::new_err("coroutine is being awaited already")),
        }
    }

    /// A step; a `GeneratorExit` thrown in closes the turn, then is raised.
    #[inline]
    fn protocol_step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        Self::resume(slf, input)
    }

    /// Close the turn: each task left is closed (and cancelled if its loop still runs), each
    /// call left aborted as cancelled without awaiting.
    fn protocol_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::close_now(slf)
    }
}

coroutine_methods! {
#[pymethods]
impl Turn {
    /// The turn of `calls` (a list) through pipeline `pipe` (built-in rules only) against
    /// `registry`, each with context `ctx`.
    #[new]
    fn new(py: Python<'_>, pipe: Py<Pipeline>, registry: Py<CoreRegistry>, calls: Vec<Py<PyAny>>, ctx: Py<PyAny>) -> Self {
        let _in = super::shutdown::inside(py);
        let n = calls.len();
        Turn {
            pipe,
            registry,
            calls,
            ctx,
            lp: None,
            timer: None,
            direct: None,
            waiter: None,
            envs: (0..n).map(|_| None).collect(),
            tasks: (0..n).map(|_| None).collect(),
            machines: (0..n).map(|_| None).collect(),
            machine: TurnMachine::new(n),
            stop: None,
            phase: Phase::Begin,
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.pipe)?;
        visit.call(&self.registry)?;
        for c in &self.calls {
            visit.call(c)?;
        }
        visit.call(&self.ctx)?;
        visit.call(&self.lp)?;
        visit.call(&self.timer)?;
        if let Some(d) = &self.direct {
            d.visit(&visit)?;
        }
        visit.call(&self.waiter)?;
        for v in self.envs.iter().chain(&self.tasks) {
            visit.call(v)?;
        }
        for m in &self.machines {
            visit.call(m)?;
        }
        visit.call(&self.stop)?;
        match &self.phase {
            Phase::Cancelling { exc, running, wait } => {
                visit.call(exc)?;
                for t in running {
                    visit.call(t)?;
                }
                wait.visit(&visit)?;
            }
            Phase::Aborting { exc, aborts, shield } => {
                visit.call(exc)?;
                visit.call(aborts)?;
                shield.visit(&visit)?;
            }
            Phase::Begin | Phase::Waiting | Phase::Done => {}
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        // Its relays may still hand calls in: the slots stay, emptied.
        self.phase = Phase::Done;
        self.machine.cancel(std::time::Instant::now());
        self.lp = None;
        self.timer = None;
        self.direct = None;
        self.waiter = None;
        self.envs.iter_mut().chain(self.tasks.iter_mut()).for_each(|v| *v = None);
        self.machines.iter_mut().for_each(|m| *m = None);
        self.stop = None;
    }
}
}
