//! `Drive`: the driver of one call through a pipeline segment (`Pipeline.begin` /
//! `Pipeline.begin_call`; see `super::pipeline`). The pipeline decides, the drive performs each
//! step it asks for until the envelope: it runs the body (`_runner.run_inline`, an `async` body
//! as a `BodyAwait` stepped here, a sync one on the worker pool, its outcome awaited as a
//! `JobAwait` stepped here, `_runner.run_body` for any other tool, a `Later` settled), asks
//! the approver, sleeps before a retry, waits for an identical call, reads and writes the shared
//! idempotency store, opens the tracing span and emits the audit record.
//!
//! It implements the coroutine protocol (`__await__`, `__next__`, `send`, `throw`, `close`), so a
//! task steps it as it steps a coroutine, with no Python frame of ours in between: what it awaits
//! (the body, a host callback's coroutine, a future) is stepped with `yield from` semantics, what
//! that yields goes to the task untouched and what the task sends or throws goes to it.
//!
//! An async audit sink is awaited in the caller's task, but the caller's cancellation never
//! reaches it: the task waits on a plain future in place of each future the sink waits on, and
//! once that cancellation is thrown in, the sink goes on in a task of its own, which the call's
//! abort waits for (see `step_sink`).
//!
//! Host callbacks: only the boolean `True` approves, an approver that fails refuses the call
//! (logged); a store that fails is logged and the call goes on without sharing. Any other
//! exception while driving aborts the call (`Call.abort`: its shared claim released and its record
//! emitted, each in a task of its own that the caller's cancellation does not reach, the caller
//! waiting for them until the abort's bound, see `crate::deadline::ABORT_WAIT_S`; without
//! awaiting when the drive is being closed), then propagates. A drive made by `Invoker.invoke`
//! (`call` given) answers it with the fault envelope instead (logged), unless it is
//! `KeyboardInterrupt`/`SystemExit` or the cancellation of the awaiting task. A `GeneratorExit`
//! thrown in closes the drive; one a callback raised itself is that callback's own failure,
//! answered as any other.
//!
//! What it makes of each outcome is the core's (`crate::drive`, `crate::cancel`): the drive
//! classifies what Python answered or raised, asks, and performs the answer.
use pyo3::exceptions::{PyException, PyGeneratorExit, PyRuntimeError, PyStopIteration, PyTypeError};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::awaiting::{raised_inside, thrown, thrown_err, BodyAwait, Input, Stepped};
use super::coroutine::{coroutine_methods, running, Coroutine};
use super::handoff::{JobAwait, WorkerPool};
use super::observe;
use super::pipeline::{
    helpers, Call, Pipeline, EV_APPROVED, EV_CAS, EV_GOT, EV_OPENED, EV_RECORDED, EV_SET, EV_SLEPT, EV_STORE_FAILED,
    EV_WOKEN, STEP_APPROVE, STEP_AWAIT, STEP_CAS, STEP_DONE, STEP_FAILING, STEP_GET, STEP_OPEN, STEP_RAISE,
    STEP_RECORD, STEP_RECORDING, STEP_RUN, STEP_SET, STEP_SETTLE, STEP_SLEEP, STEP_WAIT,
};
use super::registry::CoreRegistry;
use crate::cancel::{Current, Raised};
use crate::drive::{
    after_abort_step, approval, body_end, ending, sink_thrown, sink_waits_through_plain_future, AfterAbortStep, Answer,
    Approval, BodyEnd, Closed, Ending, LeftBehind, Segment, SinkThrown, Step as DriveStep, StoreAsked, Waited,
};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Drive>()?;
    m.add_function(wrap_pyfunction!(drive, m)?)?;
    m.add_function(wrap_pyfunction!(call_fault, m)?)?;
    m.add("APPROVER_FAILED", crate::drive::APPROVER_FAILED)
}

/// The Python helpers the drive calls (imported once, on the first call driven).
pub(super) struct Helpers {
    /// `agentkit_tools._runner`, whose `_POOL` is the worker pool (`_pool()`: a new one in a forked child).
    runner: Py<PyAny>,
    run_inline: Py<PyAny>,
    start_async: Py<PyAny>,
    run_body: Py<PyAny>,
    later: Py<PyAny>,
    sleep: Py<PyAny>,
    shield: Py<PyAny>,
    ensure_future: Py<PyAny>,
    wait: Py<PyAny>,
    pub(super) isawaitable: Py<PyAny>,
    generator: Py<PyAny>,
    invoker_log: Py<PyAny>,
    pub(super) middleware_log: Py<PyAny>,
}

static HELPERS: PyOnceLock<Helpers> = PyOnceLock::new();

pub(super) fn own(py: Python<'_>) -> PyResult<&Helpers> {
    HELPERS.get_or_try_init(py, || {
        let runner = py.import("agentkit_tools._runner")?;
        let asyncio = py.import("asyncio")?;
        let logging = py.import("logging")?;
        Ok(Helpers {
            runner: runner.clone().into_any().unbind(),
            run_inline: runner.getattr("run_inline")?.unbind(),
            start_async: runner.getattr("start_async")?.unbind(),
            run_body: runner.getattr("run_body")?.unbind(),
            later: runner.getattr("Later")?.unbind(),
            sleep: asyncio.getattr("sleep")?.unbind(),
            shield: asyncio.getattr("shield")?.unbind(),
            ensure_future: asyncio.getattr("ensure_future")?.unbind(),
            wait: asyncio.getattr("wait")?.unbind(),
            isawaitable: py.import("inspect")?.getattr("isawaitable")?.unbind(),
            generator: py.import("types")?.getattr("GeneratorType")?.unbind(),
            invoker_log: logging.call_method1("getLogger", ("agentkit_tools.invoker",))?.unbind(),
            middleware_log: logging
                .call_method1("getLogger", ("agentkit_tools.middleware",))?
                .unbind(),
        })
    })
}

fn value_of<'py>(py: Python<'py>, e: &PyErr) -> Bound<'py, PyAny> {
    e.value(py).clone().into_any()
}

/// The task running now, as the core's `cancel::caller_cancelled` asks.
fn current(py: Python<'_>) -> Current {
    let Ok(h) = helpers(py) else { return Current::Unknown };
    let Ok(task) = h.current_task.bind(py).call0() else {
        return Current::NoLoop;
    };
    if task.is_none() {
        return Current::NoTask;
    }
    if !super::deadline::counts_cancels(py, h, &task) {
        return Current::Uncounted;
    }
    match task
        .call_method0(intern!(py, "cancelling"))
        .and_then(|n| n.extract::<isize>())
    {
        Ok(n) => Current::Counting(n),
        Err(_) => Current::Unknown,
    }
}

/// Whether the task running now was asked to cancel (see `crate::cancel::caller_cancelled`).
fn caller_cancelled(py: Python<'_>) -> bool {
    crate::cancel::caller_cancelled(current(py))
}

/// What `e` is to the core's decisions: a stop, a cancellation or anything else (the core's
/// one classification, `crate::body::Thrown::raised`).
pub(super) fn raised(py: Python<'_>, e: &PyErr) -> Raised {
    thrown_err(py, e).raised()
}

/// Whether `e`, raised by a host callback or at the `await` of it, propagates (see
/// `crate::cancel::Raised::propagates`). (A `GeneratorExit` thrown in closes the drive and never
/// reaches here: one seen here is the callback's own failure.)
pub(super) fn propagates(py: Python<'_>, e: &PyErr) -> bool {
    raised(py, e).propagates(|| caller_cancelled(py))
}

/// The envelope of call `call` whose driver raised `exc` (a fault around the tool, not in it),
/// logged; `KeyboardInterrupt`/`SystemExit` and, when `caller_cancelled`, a `CancelledError` are
/// raised again instead. (A `GeneratorExit` that closes a drive never reaches here: one seen here
/// is a callback's own failure.)
#[pyfunction]
pub(super) fn call_fault<'py>(
    py: Python<'py>,
    exc: Bound<'py, PyAny>,
    call: Bound<'py, PyAny>,
    caller_cancelled: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let _in = super::shutdown::inside(py);
    let err = PyErr::from_value(exc);
    if raised(py, &err).propagates(|| caller_cancelled) {
        return Err(err);
    }
    fault_envelope(py, err, call)
}

/// The fault envelope of call `call` whose driver raised `err`, logged.
fn fault_envelope<'py>(py: Python<'py>, err: PyErr, call: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let name = super::calls::call_parts(py, &call)?.get_item(1)?;
    log(
        py,
        &own(py)?.invoker_log,
        "error",
        crate::drive::INVOKER_FAILED,
        vec![name],
        Some(&err),
    );
    super::tools::fault_envelope(py, err.value(py).as_any())
}

/// `Invoker.invoke` through a chain of built-in rules only: `call` admitted and begun in `pipe`
/// (`Pipeline.begin(registry, call, ctx, here=True)`). Returns its envelope when the pipeline
/// answered it at once (a refusal, a body the core ran itself), else its `Drive` to await. A
/// fault answers it with the fault envelope (see `call_fault`).
#[pyfunction]
fn drive<'py>(
    py: Python<'py>,
    pipe: &Bound<'py, Pipeline>,
    registry: &Bound<'py, CoreRegistry>,
    call: Bound<'py, PyAny>,
    ctx: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let _in = super::shutdown::inside(py);
    match Pipeline::begin(pipe, registry, &call, &ctx, true) {
        Ok(env) if env.is_instance_of::<PyDict>() => Ok(env),
        Ok(begun) => {
            let (m, mut step, mut arg): (Py<Call>, u8, Bound<'py, PyAny>) = begun.extract()?;
            let mut d = Drive::new(None, ctx.clone().unbind());
            d.call = Some(call.unbind());
            // A record its sink takes at once is emitted here: a call then answered needs no
            // drive. A fault is the drive's first step (see `STEP_RAISE`).
            while step == STEP_RECORD {
                match d.record_here(py, &m, &arg) {
                    Ok(Some((s, a))) => (step, arg) = (s, a),
                    Ok(None) => return Ok(Bound::new(py, d)?.into_any()), // it awaits the sink
                    Err(e) => (step, arg) = (STEP_RAISE, value_of(py, &e)),
                }
            }
            if step == STEP_DONE {
                return Ok(arg);
            }
            d.begin = Some(Begin::From(m, step, arg.unbind()));
            Ok(Bound::new(py, d)?.into_any())
        }
        Err(e) if propagates(py, &e) => Err(e),
        Err(e) => fault_envelope(py, e, call).map(Bound::into_any),
    }
}

/// `logger.<level>(msg, *args, exc_info=exc)` (no `exc_info` when `exc` is None). Logging never
/// changes what a call does: a logger, filter or handler that raises (anything, a
/// `KeyboardInterrupt` included) is reported to `sys.unraisablehook` and dropped.
pub(super) fn log<'py>(
    py: Python<'py>,
    logger: &Py<PyAny>,
    level: &str,
    msg: &str,
    args: Vec<Bound<'py, PyAny>>,
    exc: Option<&PyErr>,
) {
    let logged = (|| -> PyResult<()> {
        let kw = PyDict::new(py);
        if let Some(exc) = exc {
            kw.set_item(intern!(py, "exc_info"), exc.value(py))?;
        }
        let mut all = vec![pyo3::types::PyString::new(py, msg).into_any()];
        all.extend(args);
        logger.bind(py).call_method(level, PyTuple::new(py, all)?, Some(&kw))?;
        Ok(())
    })();
    if let Err(e) = logged {
        e.write_unraisable(py, Some(logger.bind(py)));
    }
}

/// When the caller of an abort starting now stops waiting for its steps (see
/// `crate::deadline::abort_until`).
pub(super) fn abort_deadline() -> std::time::Instant {
    crate::deadline::abort_until(std::time::Instant::now())
}

/// The bound of one caller's abort (see `crate::deadline::ABORT_WAIT_S`), as a call's `ToolCall` carries it
/// (`_abort`: `(exception, AbortBound)`) from the segment that aborts first to the segments
/// around it, which abort by the same exception once it reaches them.
#[pyclass(frozen, module = "agentkit_tools._core")]
pub(super) struct AbortBound(std::time::Instant);

/// What a drive awaits now (or a relay goes on with): a `BodyAwait` (stepped here directly) or
/// the iterator of any other awaitable, stepped with `yield from` semantics.
pub(super) enum Awaited {
    Body(Py<BodyAwait>),
    /// A worker's outcome (`JobAwait`), stepped here directly.
    Job(Py<JobAwait>),
    Iter(Py<PyAny>),
}

/// How a step of what is awaited ended.
pub(super) enum Out<'py> {
    Yield(Bound<'py, PyAny>),
    Return(Bound<'py, PyAny>),
    Raise(PyErr),
}

impl Awaited {
    /// `await obj`: a `BodyAwait` as it is, a coroutine (a generator-based one included) as it
    /// is, else what its `__await__` gives (an iterator that is no coroutine, as `await` asks).
    pub(super) fn of(py: Python<'_>, obj: Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(b) = obj.cast::<BodyAwait>() {
            return Ok(Awaited::Body(b.clone().unbind()));
        }
        if let Ok(j) = obj.cast::<JobAwait>() {
            return Ok(Awaited::Job(j.clone().unbind()));
        }
        if is_coroutine(py, &obj)? {
            return Ok(Awaited::Iter(obj.unbind()));
        }
        let Some(method) = obj.get_type().getattr_opt(intern!(py, "__await__"))? else {
            let name = obj.get_type().qualname()?;
            return Err(PyTypeError::new_err(format!("'{name}' object can't be awaited")));
        };
        let it = method.call1((&obj,))?;
        if unsafe { ffi::PyIter_Check(it.as_ptr()) } == 0 {
            let name = it.get_type().qualname()?;
            return Err(PyTypeError::new_err(format!(
                "__await__() returned non-iterator of type '{name}'"
            )));
        }
        if is_coroutine(py, &it)? {
            return Err(PyTypeError::new_err("__await__() returned a coroutine"));
        }
        Ok(Awaited::Iter(it.unbind()))
    }

    pub(super) fn step<'py>(&self, py: Python<'py>, input: Input<'py>) -> Out<'py> {
        let done = |out: Stepped<'py>| match out {
            Ok(y) => Out::Yield(y),
            Err(e) if e.is_instance_of::<PyStopIteration>(py) => match e.value(py).getattr(intern!(py, "value")) {
                Ok(v) => Out::Return(v),
                Err(e) => Out::Raise(e),
            },
            Err(e) => Out::Raise(e),
        };
        match self {
            Awaited::Body(b) => done(BodyAwait::step(b.bind(py), input)),
            Awaited::Job(j) => done(JobAwait::step(j.bind(py), input)),
            Awaited::Iter(it) => match input {
                Input::Send(v) => {
                    let mut result: *mut ffi::PyObject = std::ptr::null_mut();
                    let r = unsafe { ffi::PyIter_Send(it.as_ptr(), v.as_ptr(), &mut result) };
                    match r {
                        ffi::PySendResult::PYGEN_NEXT => Out::Yield(unsafe { Bound::from_owned_ptr(py, result) }),
                        ffi::PySendResult::PYGEN_RETURN => Out::Return(unsafe { Bound::from_owned_ptr(py, result) }),
                        ffi::PySendResult::PYGEN_ERROR => Out::Raise(PyErr::fetch(py)),
                    }
                }
                Input::Throw(exc) => match it.bind(py).getattr_opt(intern!(py, "throw")) {
                    Ok(Some(throw)) => done(throw.call1((exc,))),
                    Ok(None) => Out::Raise(PyErr::from_value(exc)),
                    Err(e) => Out::Raise(e),
                },
            },
        }
    }

    /// Close what is awaited (a `yield from` being closed); raises what its close raised.
    pub(super) fn close(&self, py: Python<'_>) -> PyResult<()> {
        match self {
            Awaited::Body(b) => BodyAwait::close_from_core(b.bind(py)),
            Awaited::Job(j) => JobAwait::close_from_core(j.bind(py)),
            Awaited::Iter(it) => match it.bind(py).getattr_opt(intern!(py, "close"))? {
                Some(close) => close.call0().map(drop),
                None => Ok(()),
            },
        }
    }

    /// What is awaited (its `cr_frame` and names are a task's coroutine's, through a relay).
    pub(super) fn object<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Awaited::Body(b) => b.bind(py).clone().into_any(),
            Awaited::Job(j) => j.bind(py).clone().into_any(),
            Awaited::Iter(it) => it.bind(py).clone(),
        }
    }

    pub(super) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            Awaited::Body(b) => visit.call(b),
            Awaited::Job(j) => visit.call(j),
            Awaited::Iter(it) => visit.call(it),
        }
    }
}

/// Whether `obj` is a coroutine: a native one, or a generator-based one (`types.coroutine`: its
/// code flagged `CO_ITERABLE_COROUTINE`), which `await` accepts as it is.
fn is_coroutine(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    const CO_ITERABLE_COROUTINE: u32 = 0x100;
    let kind = obj.get_type();
    if kind.is(helpers(py)?.coroutine.bind(py)) {
        return Ok(true);
    }
    if !kind.is(own(py)?.generator.bind(py)) {
        return Ok(false);
    }
    let flags: u32 = obj
        .getattr(intern!(py, "gi_code"))?
        .getattr(intern!(py, "co_flags"))?
        .extract()?;
    Ok(flags & CO_ITERABLE_COROUTINE != 0)
}

/// The store's answer to step `event` when it is what the store port promises (see
/// `crate::drive::StoreAsked::promised`), else the `TypeError` of a failing store.
fn promised(event: u8, answer: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    let asked = match event {
        EV_GOT => StoreAsked::Get,
        EV_CAS => StoreAsked::CompareAndSet,
        _ => return Ok(answer),
    };
    let kind = if answer.is_none() {
        Answer::None
    } else if answer.is_instance_of::<pyo3::types::PyString>() {
        Answer::Str
    } else if answer.is_instance_of::<pyo3::types::PyBool>() {
        Answer::Bool
    } else {
        Answer::Other
    };
    if asked.promised(kind) {
        return Ok(answer);
    }
    let got = answer.get_type().qualname()?;
    Err(PyTypeError::new_err(asked.broken_message(got.to_str()?)))
}

/// What a user middleware answered, when it is an envelope (a dict); else the `TypeError` of a
/// fault of that middleware, not of the tool.
fn envelope_of(env: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    if env.is_instance_of::<PyDict>() {
        return Ok(env);
    }
    let got = env.get_type().qualname()?;
    Err(PyTypeError::new_err(crate::drive::not_an_envelope_message(
        got.to_str()?,
    )))
}

/// What the outcome of the awaited is for.
enum For {
    /// The body (`check`: a value it returned is checked here, an async body's; else it was
    /// checked already: a worker's, a settled `Later`).
    Body {
        limit: Option<f64>,
        end: Option<f64>,
        check: bool,
    },
    Approve {
        approver: Py<PyAny>,
        tool: Py<PyAny>,
    },
    Slept,
    Woken,
    /// The audit sink's awaitable (`sink` returned it): then the rest of record `rec` (`attrs`:
    /// its span attributes when a span is open, see `observe::span_attributes`). `waiting`: the
    /// future the sink waits on, when the caller's task waits on a plain future completed with it
    /// in its place (see `step_sink`).
    Recorded {
        rec: Py<PyAny>,
        sink: Py<PyAny>,
        attrs: Option<Py<PyAny>>,
        waiting: Option<Py<PyAny>>,
    },
    /// The release of an aborted call's shared claim on `key` (a drive of the release alone).
    Released(Py<PyAny>),
    Store(u8, Py<PyAny>),
    /// The next handler after this segment (a user middleware) answers with the envelope.
    Passed,
    /// `Invoker.invoke` through a chain with user middleware: its envelope.
    Chained,
    /// The call is aborted by `exc`: the release and record steps left, the span attributes of
    /// the record emitted (see `observe::span_attributes`);
    /// `step`: the task of the step in progress, `doing` that step (awaited with `asyncio.wait`:
    /// the caller's cancellation does not reach it, and the caller waits for it at most until
    /// the abort's bound, see `ABORT_WAIT_S`).
    Aborting {
        exc: Py<PyAny>,
        steps: std::vec::IntoIter<(u8, Py<PyTuple>)>,
        attrs: Option<Py<PyAny>>,
        step: Py<PyAny>,
        doing: (u8, Py<PyTuple>),
    },
}

impl For {
    fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            For::Approve { approver, tool } => {
                visit.call(approver)?;
                visit.call(tool)
            }
            For::Recorded {
                rec,
                sink,
                attrs,
                waiting,
            } => {
                visit.call(rec)?;
                visit.call(sink)?;
                visit.call(attrs)?;
                visit.call(waiting)
            }
            For::Released(r) | For::Store(_, r) => visit.call(r),
            For::Aborting {
                exc,
                steps,
                attrs,
                step,
                doing,
            } => {
                visit.call(exc)?;
                visit.call(step)?;
                visit.call(&doing.1)?;
                for (_, s) in steps.as_slice() {
                    visit.call(s)?;
                }
                visit.call(attrs)
            }
            For::Body { .. } | For::Slept | For::Woken | For::Passed | For::Chained => Ok(()),
        }
    }
}

/// How a drive starts, at its first step.
enum Begin {
    /// `Pipeline.begin_call(tc)`.
    Segment(Py<Pipeline>),
    /// Await `start(call, ctx)`: the envelope of a chain with user middleware.
    Chain(Py<PyAny>),
    /// A call already begun, at `(step, arg)`.
    From(Py<Call>, u8, Py<PyAny>),
    /// Abort a call by `exc` (its end: None).
    Abort(Py<Call>, Py<PyAny>),
    /// An aborted call's step, in a task of its own (its end: None): emit the record
    /// `rec` of the audit rule `cfg`, or release the shared claim (`(store, key, expected,
    /// value)`; a failing store logged).
    Record(Py<PyAny>, Py<PyAny>),
    Release(Py<PyTuple>),
    /// A call's record, in a task of its own once the caller's cancellation reached its audit
    /// sink (its end: None): the rest of `.0`, what the sink `.3` returned for record `.2`, whose
    /// first step waits on `.1` (what the sink waits on; None: it is sent None), then the record
    /// goes to `ctx.trace`.
    Sunk(Awaited, Option<Py<PyAny>>, Py<PyAny>, Py<PyAny>),
}

/// What to do next in a drive's loop.
enum Next<'py> {
    Step(u8, Bound<'py, PyAny>),
    Await(Bound<'py, PyAny>, For),
    Outcome(For, PyResult<Bound<'py, PyAny>>),
    /// The call faulted: abort it, then end with the fault.
    Fail(PyErr),
    /// End with the fault (aborted, or nothing to abort).
    End(PyErr),
    /// Yield this to the task (what is awaited is set).
    Yield(Bound<'py, PyAny>),
}

/// The driver of one call (see the module).
#[pyclass(module = "agentkit_tools._core")]
pub struct Drive {
    begin: Option<Begin>,
    m: Option<Py<Call>>,
    ctx: Py<PyAny>,
    /// The handler after this segment (a user middleware) and the `ToolCall` it gets.
    nxt: Option<Py<PyAny>>,
    tc: Option<Py<PyAny>>,
    /// `Invoker.invoke`'s call: a fault ends it with the fault envelope.
    call: Option<Py<PyAny>>,
    /// The call's span and the token of the context it was made current in.
    span: Option<Py<PyTuple>>,
    awaiting: Option<(Awaited, For)>,
    /// The exception an abort-only drive aborts the call with (it then ends with None).
    aborting: Option<Py<PyAny>>,
    /// When the caller stops waiting for the abort's steps (see `ABORT_WAIT_S`); None: no
    /// caller waits (the rest of an abort, in a task of its own).
    abort_until: Option<std::time::Instant>,
    /// A step of an abort (a release or a record, in a task of its own): a request to stop that
    /// its store or sink raises is the value it ends with, for the abort awaiting it to go on
    /// with and then propagate (raised in its task, asyncio would raise it out of the loop at
    /// once, the abort's other steps and its caller left hanging).
    step_of_abort: bool,
    /// Closed (`close()`, or a `GeneratorExit` thrown in) before it ended.
    closed: bool,
    /// The task of its own the call's audit sink goes on writing the record in, once the caller's
    /// cancellation reached it (see `step_sink`): the call's abort waits for it (`STEP_RECORDING`).
    recording: Option<Py<PyAny>>,
}

fn stop_with<'py>(value: Bound<'py, PyAny>) -> Stepped<'py> {
    Err(PyStopIteration::new_err((value.unbind(),)))
}

impl Drive {
    /// `Drive.abort`, its caller waiting for the steps at most until `until` (a turn aborting its
    /// calls one after another: one bound for them all).
    pub(super) fn abort_within(
        py: Python<'_>,
        m: Py<Call>,
        exc: Py<PyAny>,
        ctx: Py<PyAny>,
        until: std::time::Instant,
    ) -> Self {
        let mut d = Drive::abort(py, m, exc, ctx);
        d.abort_until = Some(until);
        d
    }

    /// The drive ends before it started (thrown into or closed first; its task cancelled before
    /// its first step): the step of its call it was to take first was never performed, and what
    /// that step was to emit (a record) is the call's abort's.
    pub(super) fn unstarted(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(Begin::From(m, _, _)) = &self.begin {
            m.bind(py).try_borrow_mut()?.unperformed();
        }
        Ok(())
    }

    fn new(begin: Option<Begin>, ctx: Py<PyAny>) -> Self {
        Drive {
            begin,
            m: None,
            ctx,
            nxt: None,
            tc: None,
            call: None,
            span: None,
            awaiting: None,
            aborting: None,
            abort_until: None,
            step_of_abort: false,
            closed: false,
            recording: None,
        }
    }

    /// A step as the core says for where the drive is (`drive::step`).
    fn resume<'py>(&mut self, py: Python<'py>, input: Input<'py>) -> Stepped<'py> {
        let throw = matches!(input, Input::Throw(_));
        if throw {
            self.unstarted(py)?;
        }
        let sent_none = || matches!(&input, Input::Send(v) if v.is_none());
        let next = match crate::drive::step(self.begin.take(), || self.awaiting.take(), throw, sent_none) {
            DriveStep::Begin(begin) => self.start(py, begin),
            DriveStep::RefuseValue(begin) => {
                self.begin = Some(begin);
                return Err(PyTypeError::new_err(crate::drive::NOT_NONE_MESSAGE));
            }
            DriveStep::Await((aw, then)) => match self.step(py, aw, then, input) {
                Ok(next) => next,
                Err(y) => return Ok(y),
            },
            DriveStep::Raise | DriveStep::Reused => {
                return match input {
                    Input::Throw(exc) => Err(raised_inside(py, PyErr::from_value(exc))),
                    Input::Send(_) => Err(PyRuntimeError::new_err(crate::drive::REUSED_MESSAGE)),
                }
            }
        };
        self.run(py, next)
    }

    /// A step of what is awaited (`aw`, for `then`): what it ended with, or (`Err`) what it
    /// yielded, the drive then awaiting it.
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        aw: Awaited,
        then: For,
        input: Input<'py>,
    ) -> Result<Next<'py>, Bound<'py, PyAny>> {
        let then = match then {
            For::Recorded {
                rec,
                sink,
                attrs,
                waiting,
            } if !self.step_of_abort => return self.step_sink(py, aw, (rec, sink, attrs), waiting, input),
            then => then,
        };
        match aw.step(py, input) {
            Out::Yield(y) => {
                self.awaiting = Some((aw, then));
                Err(y)
            }
            Out::Return(v) => Ok(Next::Outcome(then, Ok(v))),
            Out::Raise(e) => Ok(Next::Outcome(then, Err(e))),
        }
    }

    /// A step of the call's audit sink (`aw`, what `sink` returned for record `rec`, `attrs`: its
    /// span attributes), awaited in the caller's task: the task waits on a plain future completed
    /// with what the sink waits on (`waiting`, see `drive::sink_waits_through_plain_future`), so
    /// the caller's cancellation never cancels it; that cancellation thrown in does not reach the
    /// sink, which goes on in a task of its own (`drive::sink_thrown`), and aborts the call.
    fn step_sink<'py>(
        &mut self,
        py: Python<'py>,
        aw: Awaited,
        (rec, sink, attrs): (Py<PyAny>, Py<PyAny>, Option<Py<PyAny>>),
        waiting: Option<Py<PyAny>>,
        input: Input<'py>,
    ) -> Result<Next<'py>, Bound<'py, PyAny>> {
        if let Input::Throw(exc) = &input {
            if sink_thrown(self.step_of_abort, thrown(exc).cancelled) == SinkThrown::OwnTask {
                let exc = PyErr::from_value(exc.clone());
                return Ok(match self.sink_to_task(py, aw, waiting, rec, sink) {
                    Ok(()) => Next::Fail(exc),
                    Err(e) => Next::Fail(e),
                });
            }
        }
        let then = |waiting| For::Recorded {
            rec,
            sink,
            attrs,
            waiting,
        };
        match aw.step(py, input) {
            Out::Yield(y) => match self.through_plain_future(py, &y) {
                Ok(Some(wait)) => {
                    self.awaiting = Some((aw, then(Some(y.unbind()))));
                    Err(wait)
                }
                // A bare yield, or what cannot be waited on through a plain future: as it is.
                _ => {
                    self.awaiting = Some((aw, then(None)));
                    Err(y)
                }
            },
            Out::Return(v) => Ok(Next::Outcome(then(None), Ok(v))),
            Out::Raise(e) => Ok(Next::Outcome(then(None), Err(e))),
        }
    }

    /// The plain future the caller's task waits on in place of `y`, what the call's audit sink
    /// yielded, when it waits on one (see `drive::sink_waits_through_plain_future`).
    fn through_plain_future<'py>(&self, py: Python<'py>, y: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let is_future = || helpers(py)?.isfuture.bind(py).call1((y,))?.is_truthy();
        if !sink_waits_through_plain_future(self.step_of_abort, y.is_none(), is_future)? {
            return Ok(None);
        }
        let wait = super::awaiting::completed_with(py, y)?;
        y.setattr(intern!(py, "_asyncio_future_blocking"), false)?;
        wait.setattr(intern!(py, "_asyncio_future_blocking"), true)?;
        Ok(Some(wait))
    }

    /// The caller's cancellation reached the call's audit sink (`aw`, what `sink` returned for
    /// record `rec`, waiting on `waiting`): the sink goes on in a task of its own (a drive of the
    /// record alone, held as a clean-up is), which the call's abort waits for
    /// (`Call::recording`, `STEP_RECORDING`).
    fn sink_to_task(
        &mut self,
        py: Python<'_>,
        aw: Awaited,
        waiting: Option<Py<PyAny>>,
        rec: Py<PyAny>,
        sink: Py<PyAny>,
    ) -> PyResult<()> {
        let mut d = Drive::new(Some(Begin::Sunk(aw, waiting, rec, sink)), self.ctx.clone_ref(py));
        // A stop its sink raises is its value, for the abort awaiting it to go on with (see `end`).
        d.step_of_abort = true;
        let lp = super::running::running_loop(py)?;
        let task = lp.call_method1(intern!(py, "create_task"), (Bound::new(py, d)?,))?;
        // Held as a clean-up is: a loop closed first drops it without asyncio's report (its loss
        // is logged by the drive awaiting it, see `close_now`).
        helpers(py)?.hold_clean_up.bind(py).call1((&task,))?;
        self.call(py)?.recording();
        self.recording = Some(task.unbind());
        Ok(())
    }

    /// The `ToolCall` a user middleware passed on to this segment (None: no middleware before).
    fn tc<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.tc
            .as_ref()
            .map_or_else(|| py.None().into_bound(py), |t| t.bind(py).clone())
    }

    fn start<'py>(&mut self, py: Python<'py>, begin: Begin) -> Next<'py> {
        let ctx = self.ctx.bind(py).clone();
        let begun = match begin {
            Begin::Segment(pipe) => {
                let tc = self.tc(py);
                Pipeline::begin_call(pipe.bind(py), &tc).and_then(|(m, step, arg)| {
                    self.m = Some(Py::new(py, m)?);
                    Ok((step, arg))
                })
            }
            Begin::Chain(start) => {
                let call = self
                    .call
                    .as_ref()
                    .map_or_else(|| py.None().into_bound(py), |c| c.bind(py).clone());
                return match start.bind(py).call1((call, ctx)) {
                    Ok(aw) => Next::Await(aw, For::Chained),
                    Err(e) => Next::End(e),
                };
            }
            Begin::From(m, step, arg) => {
                self.m = Some(m);
                Ok((step, arg.into_bound(py)))
            }
            Begin::Abort(m, exc) => {
                self.m = Some(m);
                self.aborting = Some(exc.clone_ref(py));
                return Next::Fail(PyErr::from_value(exc.into_bound(py)));
            }
            Begin::Record(cfg, rec) => {
                return self
                    .record(py, cfg.bind(py), rec.into_bound(py))
                    .unwrap_or_else(Next::End)
            }
            Begin::Sunk(aw, waiting, rec, sink) => {
                let then = For::Recorded {
                    rec,
                    sink,
                    attrs: None,
                    waiting: None,
                };
                return match waiting {
                    Some(waiting) => {
                        // Its task waits on it now (the caller's task waited on a plain future).
                        let waiting = waiting.into_bound(py);
                        if let Err(e) = waiting.setattr(intern!(py, "_asyncio_future_blocking"), true) {
                            return Next::Outcome(then, Err(e));
                        }
                        self.awaiting = Some((aw, then));
                        Next::Yield(waiting)
                    }
                    None => match self.step(py, aw, then, Input::Send(py.None().into_bound(py))) {
                        Ok(next) => next,
                        Err(y) => Next::Yield(y),
                    },
                };
            }
            Begin::Release(arg) => {
                let arg = arg.into_bound(py);
                let released = (|| -> PyResult<(Bound<'py, PyAny>, PyResult<Bound<'py, PyAny>>)> {
                    let key = arg.get_item(1)?;
                    Ok((
                        key.clone(),
                        arg.get_item(0)?.call_method1(
                            intern!(py, "compare_and_set"),
                            (key, arg.get_item(2)?, arg.get_item(3)?),
                        ),
                    ))
                })();
                return match released {
                    Ok((key, Ok(aw))) => Next::Await(aw, For::Released(key.unbind())),
                    Ok((key, Err(e))) => Next::Outcome(For::Released(key.unbind()), Err(e)),
                    Err(e) => Next::End(e),
                };
            }
        };
        match begun {
            Ok((step, arg)) => Next::Step(step, arg),
            Err(e) => Next::End(e),
        }
    }

    fn call<'py>(&self, py: Python<'py>) -> PyResult<PyRefMut<'py, Call>> {
        match &self.m {
            Some(m) => Ok(m.bind(py).try_borrow_mut()?),
            None => Err(PyRuntimeError::new_err("the drive has no call")),
        }
    }

    /// The drive's loop: perform steps until something suspends (yielded to the task) or the
    /// drive ends.
    fn run<'py>(&mut self, py: Python<'py>, mut next: Next<'py>) -> Stepped<'py> {
        loop {
            next = match next {
                Next::Step(STEP_DONE, env) => {
                    self.m = None;
                    return stop_with(env);
                }
                Next::Step(step, arg) => match self.perform(py, step, arg) {
                    Ok(next) => next,
                    Err(e) => Next::Fail(e),
                },
                Next::Await(obj, then) => match Awaited::of(py, obj) {
                    Ok(aw) => match self.step(py, aw, then, Input::Send(py.None().into_bound(py))) {
                        Ok(next) => next,
                        Err(y) => return Ok(y),
                    },
                    Err(e) => Next::Outcome(then, Err(e)),
                },
                Next::Outcome(then, out) => self.outcome(py, then, out),
                Next::Fail(e) => self.fail(py, e),
                Next::End(e) => return self.end(py, e),
                Next::Yield(y) => return Ok(y),
            };
        }
    }

    /// Perform step `step` (payload `arg`) of the call.
    fn perform<'py>(&mut self, py: Python<'py>, step: u8, arg: Bound<'py, PyAny>) -> PyResult<Next<'py>> {
        let ctx = self.ctx.bind(py).clone();
        let o = own(py)?;
        Ok(match step {
            STEP_RUN if self.place() == Segment::Before => {
                let tc = self.tc(py);
                let limit = arg.get_item(2)?;
                if !limit.is_none() {
                    tc.setattr(intern!(py, "timeout_s"), limit)?;
                }
                tc.setattr(intern!(py, "exc"), py.None())?;
                let nxt = self
                    .nxt
                    .as_ref()
                    .map(|n| n.bind(py).clone())
                    .unwrap_or_else(|| py.None().into_bound(py));
                Next::Await(nxt.call1((tc,))?, For::Passed)
            }
            STEP_RUN => {
                let (tool, args, limit, kind) = (
                    arg.get_item(0)?,
                    arg.get_item(1)?,
                    arg.get_item(2)?,
                    arg.get_item(3)?.extract::<u8>()?,
                );
                let mut limit: Option<f64> = limit.extract()?;
                let segment = self.place();
                if segment.counts_attempts() {
                    let tc = self.tc(py);
                    let n: u32 = tc.getattr(intern!(py, "attempts"))?.extract()?;
                    tc.setattr(intern!(py, "attempts"), Segment::next_attempt(n))?;
                    limit = segment.attempt_limit(limit, || tc.getattr(intern!(py, "timeout_s"))?.extract())?;
                }
                // The attempt's end, computed once for all it does. A non-blocking sync body is
                // called, an async one awaited, a sync one handed to the worker pool and its
                // outcome awaited, right here.
                let end = super::deadline::end_of(py, helpers(py)?, limit)?;
                if kind == crate::pipeline::BodyKind::Inline as u8 {
                    let body = For::Body {
                        limit,
                        end,
                        check: false,
                    };
                    match o.run_inline.bind(py).call1((&tool, &args, &ctx, limit, end)) {
                        Ok(v) => Next::Outcome(body, Ok(v)),
                        Err(e) => Next::Outcome(body, Err(e)),
                    }
                } else if kind == crate::pipeline::BodyKind::Worker as u8 {
                    let then = For::Body {
                        limit,
                        end,
                        check: true,
                    };
                    let started = (|| -> PyResult<(bool, Bound<'py, PyAny>)> {
                        let runner = o.runner.bind(py);
                        let mut pool = runner.getattr(intern!(py, "_POOL"))?.cast_into::<WorkerPool>()?;
                        if pool.get().forked() {
                            pool = runner.call_method0(intern!(py, "_pool"))?.cast_into::<WorkerPool>()?;
                        }
                        let (func, name) = (tool.getattr(intern!(py, "fn"))?, tool.getattr(intern!(py, "name"))?);
                        WorkerPool::start_job(&pool, func, args.clone(), ctx.clone(), limit, end, name, None)
                    })();
                    match started {
                        Ok((true, v)) => Next::Outcome(then, Ok(v)),
                        Ok((false, awaiting)) => Next::Await(awaiting, then),
                        Err(e) => Next::Outcome(then, Err(e)),
                    }
                } else if kind == crate::pipeline::BodyKind::Async as u8 {
                    let then = For::Body {
                        limit,
                        end,
                        check: true,
                    };
                    match o.start_async.bind(py).call1((&tool, &args, &ctx, limit)) {
                        Ok(started) => {
                            let (coro, within) = (started.get_item(0)?, started.get_item(1)?);
                            let name = tool.getattr(intern!(py, "name"))?;
                            let b = Bound::new(py, BodyAwait::fresh(py, coro, limit, name, end, Some(within))?)?;
                            Next::Await(b.into_any(), then)
                        }
                        Err(e) => Next::Outcome(then, Err(e)),
                    }
                } else {
                    let body = For::Body {
                        limit,
                        end,
                        check: false,
                    };
                    Next::Await(o.run_body.bind(py).call1((&tool, &args, &ctx, limit, kind, end))?, body)
                }
            }
            STEP_AWAIT => {
                // An async body the core started and that suspended: await the rest.
                let (awaiting, end, limit) = (
                    arg.get_item(1)?,
                    arg.get_item(2)?.extract()?,
                    arg.get_item(3)?.extract()?,
                );
                Next::Await(
                    awaiting,
                    For::Body {
                        limit,
                        end,
                        check: true,
                    },
                )
            }
            STEP_SETTLE => match arg.call_method0(intern!(py, "settle")) {
                Ok(aw) => Next::Await(
                    aw,
                    For::Body {
                        limit: None,
                        end: None,
                        check: false,
                    },
                ),
                Err(e) => Next::Outcome(
                    For::Body {
                        limit: None,
                        end: None,
                        check: false,
                    },
                    Err(e),
                ),
            },
            STEP_RAISE => Next::Fail(PyErr::from_value(arg)),
            STEP_APPROVE => {
                let (approver, tool, args) = (arg.get_item(0)?, arg.get_item(1)?, arg.get_item(2)?);
                let then = For::Approve {
                    approver: approver.clone().unbind(),
                    tool: tool.clone().unbind(),
                };
                match approver.call1((&tool, args, &ctx)) {
                    Ok(answer) if o.isawaitable.bind(py).call1((&answer,))?.is_truthy()? => Next::Await(answer, then),
                    out => Next::Outcome(then, out),
                }
            }
            STEP_SLEEP => {
                let (sleep, delay) = (arg.get_item(0)?, arg.get_item(1)?);
                let sleep = if sleep.is_none() {
                    o.sleep.bind(py).clone()
                } else {
                    sleep
                };
                Next::Await(sleep.call1((delay,))?, For::Slept)
            }
            STEP_WAIT => Next::Await(o.shield.bind(py).call1((arg,))?, For::Woken), // an identical call runs: wait, then look again
            STEP_RECORD => self.record(py, &arg.get_item(0)?, arg.get_item(1)?)?,
            STEP_OPEN => {
                self.span = observe::open_span(py, &arg.get_item(1)?, &arg.get_item(2)?)?;
                Next::fed(self.call(py)?.feed(py, EV_OPENED, None)?)
            }
            STEP_GET | STEP_SET | STEP_CAS => {
                let (store, key) = (arg.get_item(0)?, arg.get_item(1)?);
                let (event, called) = match step {
                    STEP_GET => (EV_GOT, store.call_method1(intern!(py, "get"), (&key,))),
                    STEP_SET => (EV_SET, store.call_method1(intern!(py, "set"), (&key, arg.get_item(2)?))),
                    _ => (
                        EV_CAS,
                        store.call_method1(
                            intern!(py, "compare_and_set"),
                            (&key, arg.get_item(2)?, arg.get_item(3)?),
                        ),
                    ),
                };
                let then = For::Store(event, key.unbind());
                match called {
                    Ok(aw) => Next::Await(aw, then),
                    Err(e) => Next::Outcome(then, Err(e)),
                }
            }
            STEP_FAILING => {
                // The machine holds the store failing though it raised nothing: logged as a store
                // that raised would be.
                let why = PyRuntimeError::new_err(arg.get_item(1)?.extract::<String>()?);
                self.store_failed(py, arg.get_item(0)?, &why)?
            }
            other => return Err(PyRuntimeError::new_err(format!("unknown pipeline step {other}"))),
        })
    }

    /// The shared store failed on `key` (`e`: how): logged, and fed to the call, which goes on
    /// without sharing.
    fn store_failed<'py>(&mut self, py: Python<'py>, key: Bound<'py, PyAny>, e: &PyErr) -> PyResult<Next<'py>> {
        log(
            py,
            &own(py)?.middleware_log,
            "warning",
            crate::drive::STORE_FAILED,
            vec![key],
            Some(e),
        );
        Ok(Next::fed(self.call(py)?.feed(py, EV_STORE_FAILED, None)?))
    }

    /// What the awaited ended with, fed to the call.
    fn outcome<'py>(&mut self, py: Python<'py>, then: For, out: PyResult<Bound<'py, PyAny>>) -> Next<'py> {
        let fed = (|| -> PyResult<Next<'py>> {
            Ok(match then {
                For::Body { limit, end, check } => {
                    // An awaitable result (a `Later`) is settled first.
                    let later = own(py)?.later.bind(py);
                    let awaitable = |v: &Bound<'py, PyAny>| v.get_type().is(later);
                    match body_end(out, check, awaitable, |e| e.is_instance_of::<PyException>(py)) {
                        BodyEnd::Check(v) => {
                            let ctx = self.ctx.bind(py).clone();
                            Next::fed(self.call(py)?.returned(py, v, &ctx, limit, end)?)
                        }
                        BodyEnd::Settle(v) => Next::Step(STEP_SETTLE, v),
                        BodyEnd::Ok(v) => Next::fed(self.call(py)?.ok(py, v)?),
                        BodyEnd::Failed(e) => {
                            let mut exc = value_of(py, &e);
                            if exc.get_type().is(helpers(py)?.body_failed.bind(py)) {
                                exc = exc.getattr(intern!(py, "exc"))?;
                            }
                            Next::fed(self.call(py)?.failed(py, exc)?)
                        }
                        BodyEnd::Fault(e) => return Err(e),
                    }
                }
                For::Approve { approver, tool } => {
                    let answer = match out {
                        Ok(answer) => Ok(super::pipeline::bool_of(&answer)),
                        Err(e) => Err((raised(py, &e), e)),
                    };
                    let approved = match approval(answer, || caller_cancelled(py)) {
                        Approval::Propagates(e) => return Err(e),
                        Approval::Failed(e) => {
                            let name = tool.bind(py).getattr(intern!(py, "name"))?;
                            log(
                                py,
                                &own(py)?.middleware_log,
                                "error",
                                crate::drive::APPROVER_FAILED,
                                vec![approver.into_bound(py), name],
                                Some(&e),
                            );
                            false
                        }
                        answered => answered.approved(),
                    };
                    Next::fed(self.call(py)?.feed(
                        py,
                        EV_APPROVED,
                        Some(pyo3::types::PyBool::new(py, approved).to_owned().into_any()),
                    )?)
                }
                For::Slept => {
                    out?;
                    Next::fed(self.call(py)?.feed(py, EV_SLEPT, None)?)
                }
                For::Woken => {
                    out?;
                    Next::fed(self.call(py)?.feed(py, EV_WOKEN, None)?)
                }
                For::Recorded { rec, sink, attrs, .. } => {
                    if let Err(e) = out {
                        observe::sink_failed(py, sink.bind(py), e)?;
                    }
                    self.recorded(py, rec.into_bound(py), attrs)?
                }
                For::Released(key) => match out {
                    Err(e) if propagates(py, &e) => return Err(e),
                    Err(e) => {
                        log(
                            py,
                            &own(py)?.middleware_log,
                            "warning",
                            crate::drive::RELEASE_FAILED,
                            vec![key.into_bound(py)],
                            Some(&e),
                        );
                        Next::Step(STEP_DONE, py.None().into_bound(py))
                    }
                    Ok(_) => Next::Step(STEP_DONE, py.None().into_bound(py)),
                },
                For::Store(event, key) => match out.and_then(|answer| promised(event, answer)) {
                    Ok(answer) => Next::fed(self.call(py)?.feed(py, event, Some(answer))?),
                    Err(e) if propagates(py, &e) => return Err(e),
                    Err(e) => self.store_failed(py, key.into_bound(py), &e)?,
                },
                For::Passed => {
                    let env = envelope_of(out?)?;
                    let tc = self.tc(py);
                    let exc = tc.getattr(intern!(py, "exc"))?;
                    let attempts: u32 = tc.getattr(intern!(py, "attempts"))?.extract()?;
                    Next::fed(
                        self.call(py)?
                            .passed(py, env, (!exc.is_none()).then_some(exc), attempts)?,
                    )
                }
                For::Chained => match out.and_then(envelope_of) {
                    Ok(env) => Next::Step(STEP_DONE, env),
                    Err(e) => Next::End(e),
                },
                For::Aborting {
                    exc,
                    steps,
                    attrs,
                    step,
                    doing,
                } => {
                    let waited = waited_for(py, step.bind(py), out)?;
                    let by_stop = thrown(exc.bind(py)).raised() == Raised::Stop;
                    match after_abort_step(waited, by_stop) {
                        AfterAbortStep::Next => self.abort_next(py, exc.into_bound(py), steps, attrs),
                        AfterAbortStep::NextByStop(stop) => {
                            self.stopped_by(py, &stop);
                            self.abort_next(py, stop, steps, attrs)
                        }
                        // The caller's abort ends now (logged), the rest of it (the step in
                        // progress, the steps left, the span) goes on in a task of its own.
                        AfterAbortStep::LeaveBehind => {
                            self.left_behind(py, &doing, true)?;
                            self.abort_later(py, exc.clone_ref(py), steps, attrs, step, doing)?;
                            Next::End(PyErr::from_value(exc.into_bound(py)))
                        }
                        AfterAbortStep::Detach(again) => {
                            self.abort_later(py, exc.clone_ref(py), steps, attrs, step, doing)?;
                            Next::End(again.unwrap_or_else(|| PyErr::from_value(exc.into_bound(py))))
                        }
                        AfterAbortStep::Fail(e) => Next::End(e),
                    }
                }
            })
        })();
        fed.unwrap_or_else(Next::Fail)
    }

    /// Where the drive sits in a chain with user middleware.
    fn place(&self) -> Segment {
        Segment::of(self.tc.is_some(), self.nxt.is_some())
    }

    /// The call's attempts so far, when the `ToolCall` counts them (see `Segment::reads_attempts`).
    fn attempts(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        match &self.tc {
            Some(tc) if self.place().reads_attempts() => tc.bind(py).getattr(intern!(py, "attempts"))?.extract(),
            _ => Ok(None),
        }
    }

    /// The call faulted (`e`): abort it in the pipeline, its shared claim released and its record
    /// emitted (a request to stop, `KeyboardInterrupt`/`SystemExit`, aborts it as cancelled, as
    /// the caller's cancellation does), each step in a task of its own that the caller's
    /// cancellation does not reach; then end with `e` once they are done or the abort's bound
    /// has passed (see `bound_of`), the rest going on without the caller (see `abort_later`:
    /// after a stop it runs only if the loop still runs).
    fn fail<'py>(&mut self, py: Python<'py>, e: PyErr) -> Next<'py> {
        let Some(m) = self.m.take() else { return Next::End(e) };
        let steps = (|| -> PyResult<Vec<(u8, Py<PyTuple>)>> {
            let cancelled = raised(py, &e).aborts_as_cancelled();
            let attempts = self.attempts(py)?;
            let steps = m.bind(py).try_borrow_mut()?.abort(py, cancelled, attempts)?;
            Ok(steps.into_iter().map(|(s, a)| (s, a.unbind())).collect())
        })();
        match steps {
            Ok(steps) => {
                let until = match self.abort_until {
                    Some(until) => until,
                    None => self.bound_of(py, &e),
                };
                self.abort_until = Some(until);
                self.abort_next(py, value_of(py, &e), steps.into_iter(), None)
            }
            Err(fault) => Next::End(fault),
        }
    }

    /// The bound of the caller's abort by `e`: one for every segment of the call it goes
    /// through (a user middleware between two segments passes the same exception on), so a
    /// chain of them holds the caller no longer than one segment does. The first segment to
    /// abort starts it and leaves it on the call's `ToolCall`, where the segments around it find
    /// it; a drive without one (or a `ToolCall` that cannot take it) starts its own.
    fn bound_of(&self, py: Python<'_>, e: &PyErr) -> std::time::Instant {
        let Some(tc) = &self.tc else { return abort_deadline() };
        let (tc, exc) = (tc.bind(py), e.value(py));
        // (the bound left on it, and whether it was left for this exception)
        let held = match tc.getattr_opt(intern!(py, "_abort")) {
            Ok(Some(held)) => match held.extract::<(Bound<'_, PyAny>, Bound<'_, AbortBound>)>() {
                Ok((by, bound)) => Some((by.is(exc), bound.get().0)),
                _ => None,
            },
            _ => None,
        };
        let (until, leaves) = crate::deadline::abort_bound(held, std::time::Instant::now());
        if leaves {
            if let Ok(bound) = Bound::new(py, AbortBound(until)) {
                drop(tc.setattr(intern!(py, "_abort"), (exc, bound)));
            }
        }
        until
    }

    /// The abort goes on by `stop`, which a store or a sink raised: the segments around this one,
    /// which `stop` reaches next, keep its bound (see `bound_of`).
    fn stopped_by(&self, py: Python<'_>, stop: &Bound<'_, PyAny>) {
        let (Some(tc), Some(until)) = (&self.tc, self.abort_until) else {
            return;
        };
        if let Ok(bound) = Bound::new(py, AbortBound(until)) {
            drop(tc.bind(py).setattr(intern!(py, "_abort"), (stop, bound)));
        }
    }

    /// The next release or record step of an abort by `exc`, in a task of its own awaited with
    /// `asyncio.wait` (until the abort's bound, if any); when none is left, the span is closed and
    /// the drive ends with `exc`.
    fn abort_next<'py>(
        &mut self,
        py: Python<'py>,
        exc: Bound<'py, PyAny>,
        mut steps: std::vec::IntoIter<(u8, Py<PyTuple>)>,
        mut attrs: Option<Py<PyAny>>,
    ) -> Next<'py> {
        // (what the task waits on, the step's task, the step)
        type Started<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, (u8, Py<PyTuple>));
        let started = (|| -> PyResult<Option<Started<'py>>> {
            loop {
                let Some((step, arg)) = steps.next() else {
                    return Ok(None);
                };
                let task = if step == STEP_RECORDING {
                    // The call's own record, in its task already: waited for unless done.
                    if self.span.is_some() {
                        let record = arg.bind(py).get_item(1)?;
                        attrs = Some(observe::span_attributes(py, &record)?.into_any().unbind());
                    }
                    match self.recording.take() {
                        Some(task) if !task.bind(py).call_method0(intern!(py, "done"))?.is_truthy()? => {
                            task.into_bound(py)
                        }
                        _ => continue,
                    }
                } else {
                    let coro = self.abort_step(py, step, arg.bind(py), &mut attrs)?;
                    let task = own(py)?.ensure_future.bind(py).call1((coro,))?;
                    // Held as a clean-up is: a loop closed first drops it without asyncio's
                    // report (its loss is logged by the drive awaiting it, see `close_now`).
                    helpers(py)?.hold_clean_up.bind(py).call1((&task,))?;
                    task
                };
                return Ok(Some((self.wait_for_step(py, &task)?, task, (step, arg))));
            }
        })();
        match started {
            Ok(Some((aw, step, doing))) => Next::Await(
                aw,
                For::Aborting {
                    exc: exc.unbind(),
                    steps,
                    attrs,
                    step: step.unbind(),
                    doing,
                },
            ),
            Ok(None) => match self.close_span(py, attrs, &exc) {
                Ok(()) => Next::End(PyErr::from_value(exc)),
                Err(e) => Next::End(e),
            },
            Err(e) => Next::End(e),
        }
    }

    /// The rest of an abort by `exc` cancelled again or past its bound (its step in progress
    /// `step`, the steps left, the span) goes on without the caller: a drive of its own in a task
    /// of its own, held until it ends (its outcome dropped), each step awaited as here but with
    /// no bound.
    fn abort_later(
        &mut self,
        py: Python<'_>,
        exc: Py<PyAny>,
        steps: std::vec::IntoIter<(u8, Py<PyTuple>)>,
        attrs: Option<Py<PyAny>>,
        step: Py<PyAny>,
        doing: (u8, Py<PyTuple>),
    ) -> PyResult<()> {
        let h = helpers(py)?;
        let mut rest = Drive::new(None, self.ctx.clone_ref(py));
        // The span's context is restored here, in the caller's task; the rest ends the span.
        rest.span = match self.span.take() {
            Some(span) => Some(observe::restore_context(py, span.bind(py))?.unbind()),
            None => None,
        };
        rest.aborting = Some(exc.clone_ref(py));
        rest.recording = self.recording.take();
        let aw = rest.wait_for_step(py, step.bind(py))?;
        rest.awaiting = Some((
            Awaited::of(py, aw)?,
            For::Aborting {
                exc,
                steps,
                attrs,
                step,
                doing,
            },
        ));
        let lp = super::running::running_loop(py)?;
        let task = lp.call_method1(intern!(py, "create_task"), (Bound::new(py, rest)?,))?;
        h.hold_clean_up.bind(py).call1((task,))?;
        Ok(())
    }

    /// The abort's step task `step` awaited at most until the abort's bound (none: until it
    /// ends): `asyncio.wait((step,), timeout=left)`, which cancels the step neither at the bound
    /// nor with the awaiting task.
    fn wait_for_step<'py>(&self, py: Python<'py>, step: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let left = self
            .abort_until
            .map(|until| crate::deadline::left_until(until, std::time::Instant::now()));
        let kw = [("timeout", left)].into_py_dict(py)?;
        own(py)?.wait.bind(py).call((PyTuple::new(py, [step])?,), Some(&kw))
    }

    /// The abort's step `doing` is left behind, logged naming it: the caller stops waiting for
    /// it (`going_on`: its bound passed), or it cannot go on (its event loop is closed).
    fn left_behind(&self, py: Python<'_>, doing: &(u8, Py<PyTuple>), going_on: bool) -> PyResult<()> {
        let (step, arg) = (doing.0, doing.1.bind(py));
        if step != STEP_CAS {
            return self.logged_left_behind(
                py,
                LeftBehind::Record,
                arg.get_item(0)?.getattr(intern!(py, "sink"))?,
                going_on,
            );
        }
        self.logged_left_behind(py, LeftBehind::Release, arg.get_item(1)?, going_on)
    }

    /// What is left behind (`left`: a release, the record of an audit sink), logged naming
    /// `what` (the key, the sink), as `left_behind` says.
    fn logged_left_behind<'py>(
        &self,
        py: Python<'py>,
        left: LeftBehind,
        what: Bound<'py, PyAny>,
        going_on: bool,
    ) -> PyResult<()> {
        let mut args = vec![what];
        if going_on {
            args.push(pyo3::types::PyFloat::new(py, crate::deadline::ABORT_WAIT_S).into_any());
        }
        log(
            py,
            &own(py)?.middleware_log,
            "warning",
            left.message(going_on),
            args,
            None,
        );
        Ok(())
    }

    /// The drive of an abort's step (a coroutine): release the shared claim, or emit the record
    /// (its span attributes, when a span is open, to `attrs`: see `observe::span_attributes`).
    fn abort_step<'py>(
        &self,
        py: Python<'py>,
        step: u8,
        arg: &Bound<'py, PyTuple>,
        attrs: &mut Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ctx = self.ctx.clone_ref(py);
        let begin = if step == STEP_CAS {
            Begin::Release(arg.clone().unbind())
        } else {
            let (cfg, record) = (arg.get_item(0)?, arg.get_item(1)?);
            if self.span.is_some() {
                *attrs = Some(observe::span_attributes(py, &record)?.into_any().unbind());
            }
            Begin::Record(cfg.unbind(), record.unbind())
        };
        let mut d = Drive::new(Some(begin), ctx);
        d.step_of_abort = true;
        Ok(Bound::new(py, d)?.into_any())
    }

    /// Emit record `rec` of the audit rule `cfg`: the log and the sink now, `ctx.trace` once the
    /// sink is done (it may return an awaitable).
    fn record<'py>(&mut self, py: Python<'py>, cfg: &Bound<'py, PyAny>, rec: Bound<'py, PyAny>) -> PyResult<Next<'py>> {
        let attrs = match (&self.span, &self.m) {
            (Some(_), Some(_)) => Some(observe::span_attributes(py, &rec)?.into_any().unbind()),
            _ => None,
        };
        match observe::record(py, cfg, &rec)? {
            Some((aw, sink)) => Ok(Next::Await(
                aw,
                For::Recorded {
                    rec: rec.unbind(),
                    sink: sink.unbind(),
                    attrs,
                    waiting: None,
                },
            )),
            None => self.recorded(py, rec, attrs),
        }
    }

    /// Step `(STEP_RECORD, arg)` of call `m` before the drive starts (no span is open: a drive
    /// opens it): the call's next step once the record is emitted, or None when the drive is to
    /// await the sink's awaitable first (it then holds the call).
    fn record_here<'py>(
        &mut self,
        py: Python<'py>,
        m: &Py<Call>,
        arg: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(u8, Bound<'py, PyAny>)>> {
        let (cfg, rec) = (arg.get_item(0)?, arg.get_item(1)?);
        if let Some((aw, sink)) = observe::record(py, &cfg, &rec)? {
            match Awaited::of(py, aw) {
                Ok(aw) => {
                    self.m = Some(m.clone_ref(py));
                    self.awaiting = Some((
                        aw,
                        For::Recorded {
                            rec: rec.unbind(),
                            sink: sink.unbind(),
                            attrs: None,
                            waiting: None,
                        },
                    ));
                    return Ok(None);
                }
                Err(e) => observe::sink_failed(py, &sink, e)?,
            }
        }
        observe::traced(py, &rec, self.ctx.bind(py))?;
        m.bind(py).try_borrow_mut()?.feed(py, EV_RECORDED, None).map(Some)
    }

    /// The sink has record `rec`: it goes to `ctx.trace`, then the span is closed (with `attrs`,
    /// the record's span attributes) and the call goes on (a drive of the record alone, an
    /// abort's, has no call: it ends).
    fn recorded<'py>(
        &mut self,
        py: Python<'py>,
        rec: Bound<'py, PyAny>,
        attrs: Option<Py<PyAny>>,
    ) -> PyResult<Next<'py>> {
        observe::traced(py, &rec, self.ctx.bind(py))?;
        if self.m.is_none() {
            return Ok(Next::Step(STEP_DONE, py.None().into_bound(py)));
        }
        if let Some(span) = self.span.take() {
            observe::close_span(py, span.bind(py), attrs.as_ref().map(|a| a.bind(py)), None)?;
        }
        Ok(Next::fed(self.call(py)?.feed(py, EV_RECORDED, None)?))
    }

    fn close_span(&mut self, py: Python<'_>, attrs: Option<Py<PyAny>>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        match self.span.take() {
            Some(span) => observe::close_span(py, span.bind(py), attrs.as_ref().map(|r| r.bind(py)), Some(exc)),
            None => Ok(()),
        }
    }

    /// The drive ends by `e`: an abort-only drive with None once its call is aborted; the
    /// drive of `Invoker.invoke` with the fault envelope (see `call_fault`); else `e` is raised.
    /// A `StopIteration` (a callback's, never the drive's own return) ends it as it ends a
    /// coroutine: `RuntimeError("coroutine raised StopIteration")`.
    fn end<'py>(&mut self, py: Python<'py>, e: PyErr) -> Stepped<'py> {
        self.m = None;
        let its_abort = self.aborting.take().is_some_and(|exc| e.value(py).is(exc.bind(py)));
        let how = ending(
            raised(py, &e),
            self.step_of_abort,
            its_abort,
            self.call.is_some(),
            || caller_cancelled(py),
        );
        match (how, self.call.take()) {
            (Ending::StopAsValue, _) => stop_with(value_of(py, &e)),
            (Ending::Aborted, _) => stop_with(py.None().into_bound(py)),
            (Ending::Envelope, Some(call)) => match fault_envelope(py, raised_inside(py, e), call.into_bound(py)) {
                Ok(env) => stop_with(env.into_any()),
                Err(e) => Err(e),
            },
            _ => Err(raised_inside(py, e)),
        }
    }

    /// The call ends by `exc` without awaiting (the drive is being closed): aborted as
    /// cancelled, its release and record going as far as they get without suspending (a sync
    /// audit sink gets the record; a store that awaits keeps the claim until its lease runs out,
    /// an async sink loses the record: each logged). A stop raised by the close (`exc`) is no
    /// reason to skip them: they cost no wait, and a stop raised while awaiting gets them too
    /// (see `fail`).
    fn abort_closing(&mut self, py: Python<'_>, exc: &Bound<'_, PyAny>) -> PyResult<()> {
        let Some(m) = self.m.take() else { return Ok(()) };
        let attempts = self.attempts(py)?;
        let steps = m.bind(py).try_borrow_mut()?.abort(py, true, attempts)?;
        let mut attrs = None;
        for (step, arg) in steps {
            if step == STEP_RECORDING {
                continue; // the call's own record, in a task of its own (held): it goes on there
            }
            if !without_loop(py, self.abort_step(py, step, &arg, &mut attrs)?) {
                self.left_behind(py, &(step, arg.unbind()), false)?;
            }
        }
        self.close_span(py, attrs, exc)
    }

    /// `close()`: what is awaited is closed, then the call is aborted without awaiting; raises
    /// what its close raised (`GeneratorExit` ends it quietly).
    fn close_now(&mut self, py: Python<'_>) -> PyResult<()> {
        self.unstarted(py)?;
        self.begin = None;
        self.closed = true;
        let Some((aw, then)) = self.awaiting.take() else {
            return Ok(());
        };
        let exc = match aw.close(py) {
            Ok(()) => PyErr::from_value(super::awaiting::new_exception::<PyGeneratorExit>(py, ())),
            Err(e) => e,
        };
        let close = match &then {
            For::Aborting { .. } => Closed::AbortStep,
            For::Recorded { .. } if !self.step_of_abort => Closed::Recording,
            For::Chained => Closed::Chained,
            _ => Closed::CallStep,
        }
        .close();
        if let For::Recorded {
            sink,
            waiting: Some(waiting),
            ..
        } = &then
        {
            // The call's sink, closed with the record: lost if its loop is closed (logged).
            let waiting = waiting.bind(py);
            let loop_closed = || {
                waiting
                    .call_method0(intern!(py, "get_loop"))?
                    .call_method0(intern!(py, "is_closed"))?
                    .is_truthy()
            };
            if close.lost(loop_closed, || Ok::<_, PyErr>(false)) {
                drop(self.logged_left_behind(py, LeftBehind::Record, sink.bind(py).clone(), false));
            }
        }
        if let For::Aborting { step, doing, steps, .. } = &then {
            // The rest of an abort dropped with its closed loop: what it had left is lost, logged
            // (`drive::Close::lost`).
            let step = step.bind(py);
            let loop_closed = || {
                step.call_method0(intern!(py, "get_loop"))?
                    .call_method0(intern!(py, "is_closed"))?
                    .is_truthy()
            };
            let done = || step.call_method0(intern!(py, "done"))?.is_truthy();
            if close.lost(loop_closed, done) {
                for (s, arg) in std::iter::once(doing).chain(steps.as_slice()) {
                    drop(self.left_behind(py, &(*s, arg.clone_ref(py)), false));
                }
            }
        }
        if close.aborts_call {
            self.abort_closing(py, &value_of(py, &exc))?;
        }
        self.m = None;
        if exc.is_instance_of::<PyGeneratorExit>(py) {
            return Ok(());
        }
        match self.end(py, exc) {
            Err(e) if !e.is_instance_of::<PyStopIteration>(py) => Err(e),
            _ => Ok(()),
        }
    }
}

/// How the caller's wait for `task` (an abort's step, in a task of its own) ended with `out` (see
/// `crate::drive::Waited::of`).
fn waited_for<'py>(
    py: Python<'py>,
    task: &Bound<'py, PyAny>,
    out: PyResult<Bound<'py, PyAny>>,
) -> PyResult<Waited<Bound<'py, PyAny>, PyErr>> {
    let cancelled_error = helpers(py)?.cancelled_error.bind(py);
    Waited::of(
        out.map(drop),
        || task.call_method0(intern!(py, "done"))?.is_truthy(),
        || task.call_method0(intern!(py, "cancelled"))?.is_truthy(),
        || {
            let stop = task.call_method0(intern!(py, "result"))?;
            Ok((!stop.is_none()).then_some(stop))
        },
        |e| e.is_instance(py, cancelled_error),
    )
}

impl<'py> Next<'py> {
    fn fed((step, arg): (u8, Bound<'py, PyAny>)) -> Self {
        Next::Step(step, arg)
    }
}

/// Run `coro` as far as it goes without suspending; where it would suspend it is closed.
/// Whether it ended (each step logs its own failures); false: closed where it would suspend.
fn without_loop(py: Python<'_>, coro: Bound<'_, PyAny>) -> bool {
    let mut result: *mut ffi::PyObject = std::ptr::null_mut();
    match unsafe { ffi::PyIter_Send(coro.as_ptr(), py.None().as_ptr(), &mut result) } {
        ffi::PySendResult::PYGEN_NEXT => {
            drop(unsafe { Bound::from_owned_ptr(py, result) });
            drop(coro.call_method0(intern!(py, "close")));
            false
        }
        ffi::PySendResult::PYGEN_RETURN => {
            drop(unsafe { Bound::from_owned_ptr(py, result) });
            true
        }
        ffi::PySendResult::PYGEN_ERROR => {
            drop(PyErr::fetch(py));
            true
        }
    }
}

impl Drop for Drive {
    fn drop(&mut self) {
        if self.awaiting.is_none() {
            return;
        }
        // Dropped while suspended, never closed: closed now, as a coroutine is when collected.
        super::shutdown::when_dropped(|py| drop(self.close_now(py)));
    }
}

impl Coroutine for Drive {
    /// A step; a `GeneratorExit` thrown in closes the drive (see `protocol_close`), then is raised.
    #[inline]
    fn protocol_step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        let py = slf.py();
        let mut this = running(slf)?;
        match input {
            Input::Throw(exc) if exc.is_instance_of::<PyGeneratorExit>() => {
                this.close_now(py)?;
                Err(PyErr::from_value(exc))
            }
            input => this.resume(py, input),
        }
    }

    /// Close what is awaited, then abort the call as cancelled without awaiting.
    fn protocol_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        running(slf)?.close_now(slf.py())
    }
}

coroutine_methods! {
#[pymethods]
impl Drive {
    /// The drive of `Invoker.invoke` through a chain with user middleware: awaits
    /// `start(call, ctx)` (the chain's envelope); a fault ends it with the fault envelope.
    #[staticmethod]
    fn chain(py: Python<'_>, start: Py<PyAny>, call: Py<PyAny>, ctx: Py<PyAny>) -> Self {
        let _in = super::shutdown::inside(py);
        let mut d = Drive::new(Some(Begin::Chain(start)), ctx);
        d.call = Some(call);
        d
    }

    /// The drive of a pipeline segment a user middleware passed the `ToolCall` `tc` on to;
    /// `nxt`: the handler after this segment (None: the tool body). Faults raise.
    #[staticmethod]
    #[pyo3(signature = (pipe, tc, nxt=None))]
    fn segment(py: Python<'_>, pipe: Py<Pipeline>, tc: Bound<'_, PyAny>, nxt: Option<Py<PyAny>>) -> PyResult<Self> {
        let _in = super::shutdown::inside(py);
        let ctx = tc.getattr(intern!(py, "ctx"))?.unbind();
        let mut d = Drive::new(Some(Begin::Segment(pipe)), ctx);
        d.tc = Some(tc.unbind());
        d.nxt = nxt;
        Ok(d)
    }

    /// The drive of call `m` from its step `(step, arg)` on (a turn's call after its body).
    /// Faults raise.
    #[staticmethod]
    pub(super) fn go(py: Python<'_>, m: Py<Call>, step: u8, arg: Py<PyAny>, ctx: Py<PyAny>) -> Self {
        let _in = super::shutdown::inside(py);
        Drive::new(Some(Begin::From(m, step, arg)), ctx)
    }

    /// Abort call `m` ended by `exc` (the caller's cancellation, a fault outside the pipeline):
    /// its shared claim released and its record emitted, as `fail` does; ends with None (raises
    /// what interrupted it).
    #[staticmethod]
    pub(super) fn abort(py: Python<'_>, m: Py<Call>, exc: Py<PyAny>, ctx: Py<PyAny>) -> Self {
        let _in = super::shutdown::inside(py);
        Drive::new(Some(Begin::Abort(m, exc)), ctx)
    }

    /// Abort call `m` as cancelled without awaiting (its coroutine is being closed: see
    /// `close`).
    #[staticmethod]
    pub(super) fn closed(py: Python<'_>, m: Py<Call>, ctx: Py<PyAny>) -> PyResult<()> {
        let _in = super::shutdown::inside(py);
        let mut d = Drive::new(None, ctx);
        d.m = Some(m);
        let exc = super::awaiting::new_exception::<PyGeneratorExit>(py, ());
        d.abort_closing(py, &exc)
    }

    /// Whether the drive was closed (`close()`, or a `GeneratorExit` thrown in) while it awaited:
    /// a `GeneratorExit` it then raises is that close, any other is a callback's own failure.
    #[getter]
    fn was_closed(&self, py: Python<'_>) -> bool {
        let _in = super::shutdown::inside(py);
        self.closed
    }

    /// What asyncio's task repr and `Task.get_stack()` read of a task's coroutine: None (the
    /// drive has no frame of its own).
    #[getter]
    fn cr_frame(&self, py: Python<'_>) -> Py<PyAny> {
        let _in = super::shutdown::inside(py);
        py.None()
    }

    #[getter]
    fn cr_running(slf: &Bound<'_, Self>) -> bool {
        let _in = super::shutdown::inside(slf.py());
        slf.try_borrow().is_err()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        match &self.begin {
            Some(Begin::Segment(p)) => visit.call(p)?,
            Some(Begin::Chain(s)) => visit.call(s)?,
            Some(Begin::From(m, _, a)) => {
                visit.call(m)?;
                visit.call(a)?;
            }
            Some(Begin::Abort(m, e)) => {
                visit.call(m)?;
                visit.call(e)?;
            }
            Some(Begin::Record(c, r)) => {
                visit.call(c)?;
                visit.call(r)?;
            }
            Some(Begin::Release(a)) => visit.call(a)?,
            Some(Begin::Sunk(a, w, r, s)) => {
                a.visit(&visit)?;
                visit.call(w)?;
                visit.call(r)?;
                visit.call(s)?;
            }
            None => {}
        }
        visit.call(&self.recording)?;
        visit.call(&self.m)?;
        visit.call(&self.ctx)?;
        visit.call(&self.nxt)?;
        visit.call(&self.tc)?;
        visit.call(&self.call)?;
        visit.call(&self.span)?;
        visit.call(&self.aborting)?;
        if let Some((aw, then)) = &self.awaiting {
            aw.visit(&visit)?;
            then.visit(&visit)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        // Collected in a cycle (a task dropped with it pending): closed first, as a coroutine is
        // finalized before it is cleared.
        if self.awaiting.is_some() {
            super::shutdown::when_dropped(|py| drop(self.close_now(py)));
        }
        self.begin = None;
        self.awaiting = None;
        self.m = None;
        self.nxt = None;
        self.tc = None;
        self.call = None;
        self.span = None;
        self.aborting = None;
        self.recording = None;
    }
}
}
