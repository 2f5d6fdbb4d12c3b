//! The worker pool that runs sync tool bodies, for Python: `WorkerPool` owns its jobs, its
//! threads' accounting (`crate::pool`), its hand-off (`crate::handoff`: waiting workers spin
//! briefly then park; a caller waits for a one-shot result slot) and the waits of its callers and
//! workers, every wait with the interpreter lock released.
//!
//! Its threads are Python daemon threads (a body still running never keeps the interpreter from
//! exiting) whose loop is the core's [`WorkerPool::next_job`]: it hands the previous outcome over
//! and waits for the next job; the thread then calls the body from Python (`_runner._work`), so
//! no frame of the core is under a body. A body that blocks while the interpreter finalizes is
//! stopped there like any daemon thread; under a frame of the core that would abort the process
//! (before Python 3.14 a thread re-taking the interpreter lock then is unwound by `pthread_exit`).
//!
//! A thread still waiting here when the interpreter finalizes never runs Python again: pyo3
//! re-attaches through `PyEval_RestoreThread`, which during finalization leaves the thread
//! hanging (as Python 3.14 does) instead of unwinding it through Rust frames; between its waits
//! it counts itself in at the exit gate (`super::shutdown`).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::awaiting::{Input, Stepped};
use super::coroutine::{coroutine_methods, running, Coroutine};
use super::deadline::{self, timeout, Entered};
use super::pipeline::helpers;
use super::shutdown::{inside, Inside};
use crate::handoff::{self, Mailbox, Slot, SPIN_MAX};
use crate::pool::{self, Accounts, JobState, Reserve};

type Outcome = (bool, Py<PyAny>);

fn until(timeout: Option<f64>) -> Option<Instant> {
    crate::deadline::instant_after(Instant::now(), timeout)
}

/// What a body's exception becomes on the loop: a future refuses `StopIteration` (Python 3.12+
/// converts it the same way), so it arrives as a `RuntimeError` caused by it.
fn raisable<'py>(py: Python<'py>, exc: Bound<'py, PyAny>) -> PyErr {
    if !exc.is_instance_of::<PyStopIteration>() {
        return PyErr::from_value(exc);
    }
    let err =
        PyRuntimeError::new_err("StopIteration interacts badly with generators and cannot be raised into a Future");
    err.set_cause(py, Some(PyErr::from_value(exc)));
    err
}

/// One call for the pool: `fn(a, b)` in `context` (a copy of the caller's), its deadline, where
/// it is (see `crate::pool`), the slot its outcome is stored in, and, for a caller on an event
/// loop, the future that gets the outcome when nobody waits on the slot.
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct Job {
    /// `[context, fn, a, b]`, taken out by the worker that runs the job: nothing of the call
    /// (its body, arguments, context) outlives its run in the worker, which keeps the job until
    /// it has handed the outcome over.
    call: Mutex<Option<[Py<PyAny>; 4]>>,
    deadline: Option<Instant>,
    /// The deadline on `time.monotonic` (None: none).
    end: Option<f64>,
    state: JobState,
    slot: Slot<Outcome>,
    /// `(loop.call_soon_threadsafe, future)`: an outcome nobody waits for on the slot goes to
    /// that future.
    later: Option<(Py<PyAny>, Py<PyAny>)>,
}

#[pymethods]
impl Job {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(call) = self.call.try_lock() {
            for o in call.iter().flatten() {
                visit.call(o)?;
            }
        }
        if let Some((c, f)) = &self.later {
            visit.call(c)?;
            visit.call(f)?;
        }
        self.slot.peek(|(_, v)| visit.call(v)).unwrap_or(Ok(()))
    }
}

/// `await` of the outcome of a job a caller on an event loop handed to the pool (what
/// `WorkerPool.start` answers when the outcome was not there at once): the job's future awaited
/// within the call's deadline, an entry of the loop's deadline timer entered for the awaiting
/// task at the first step and left on every way the await ends (at the deadline:
/// `ToolTimeoutError`; the task's own cancellation propagates). Ended otherwise than by the
/// outcome (the deadline, a cancellation, closed or dropped), the job is given up: queued, it
/// never starts; running, it stops counting against the workers limit. The drive of a call steps
/// it directly (no entry from Python).
#[pyclass(module = "agentkit_tools._core")]
pub struct JobAwait {
    pool: Py<WorkerPool>,
    job: Py<Job>,
    /// The future's iterator (`fut.__await__()`) once the await started.
    it: Option<Py<PyAny>>,
    entered: Entered,
    limit: Option<f64>,
    /// The tool's name, for `ToolTimeoutError`.
    name: Py<PyAny>,
    done: bool,
}

impl JobAwait {
    /// A step of the await: `input` sent or thrown into the job's future.
    pub(super) fn step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        let py = slf.py();
        let mut this = running(slf)?;
        if this.done {
            return match input {
                Input::Send(_) => Err(PyRuntimeError::new_err("cannot reuse already awaited coroutine")),
                Input::Throw(exc) => Err(PyErr::from_value(exc)),
            };
        }
        let it = match &this.it {
            Some(it) => it.bind(py).clone(),
            None => {
                if let Input::Throw(exc) = input {
                    return this.finish(py, Err(PyErr::from_value(exc)));
                }
                let started = (|| -> PyResult<Bound<'py, PyAny>> {
                    let job = this.job.get();
                    let fut = job
                        .later
                        .as_ref()
                        .map(|(_, f)| f.bind(py).clone())
                        .ok_or_else(|| PyRuntimeError::new_err("the job has no future"))?;
                    let it = fut.call_method0(intern!(py, "__await__"))?;
                    if let Some(end) = job.end {
                        this.entered = deadline::enter(py, helpers(py)?, end, this.limit, this.name.bind(py))?;
                    }
                    Ok(it)
                })();
                match started {
                    Ok(it) => {
                        this.it = Some(it.clone().unbind());
                        it
                    }
                    Err(e) => return this.finish(py, Err(e)),
                }
            }
        };
        let out = match input {
            Input::Send(v) => {
                let mut result: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
                match unsafe { pyo3::ffi::PyIter_Send(it.as_ptr(), v.as_ptr(), &mut result) } {
                    pyo3::ffi::PySendResult::PYGEN_NEXT => return Ok(unsafe { Bound::from_owned_ptr(py, result) }),
                    pyo3::ffi::PySendResult::PYGEN_RETURN => Ok(unsafe { Bound::from_owned_ptr(py, result) }),
                    pyo3::ffi::PySendResult::PYGEN_ERROR => Err(PyErr::fetch(py)),
                }
            }
            Input::Throw(exc) => match it.call_method1(intern!(py, "throw"), (exc,)) {
                Ok(y) => return Ok(y),
                Err(e) if e.is_instance_of::<PyStopIteration>(py) => e.value(py).getattr(intern!(py, "value")),
                Err(e) => Err(e),
            },
        };
        this.finish(py, out)
    }

    /// The await ended by `out`: the deadline left (at it, `ToolTimeoutError`; a value taken
    /// past it too), the job given up unless its outcome came; returns the outcome as a
    /// coroutine's step does.
    fn finish<'py>(&mut self, py: Python<'py>, out: PyResult<Bound<'py, PyAny>>) -> Stepped<'py> {
        self.done = true;
        self.it = None;
        let mut entered = std::mem::replace(&mut self.entered, Entered::none());
        let exc = out.as_ref().err().map(|e| e.value(py).clone().into_any());
        let out = match entered.leave(py, exc.as_ref()) {
            // An outcome taken past the end (the loop resumed this await late, before its
            // deadline's timer ran): see `taken_timed_out`.
            Ok(()) => match crate::deadline::taken_timed_out(out.is_ok(), || self.past_end(py)) {
                Ok(false) => out,
                Ok(true) => Err(timeout(py, helpers(py)?, self.name.bind(py), self.limit)),
                Err(e) => Err(e),
            },
            Err(t) => Err(t),
        };
        match out {
            Ok(v) => Err(PyStopIteration::new_err((v.unbind(),))),
            Err(e) => {
                self.pool.get().accounts.give_up(&self.job.get().state);
                Err(e)
            }
        }
    }

    /// Whether the job's end (if it has one) has passed.
    fn past_end(&self, py: Python<'_>) -> PyResult<bool> {
        deadline::passed(py, helpers(py)?, self.job.get().end)
    }

    /// Close the await (a `yield from` being closed): the future's iterator closed, the
    /// deadline left, the job given up.
    pub(super) fn close_from_core(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let mut this = running(slf)?;
        if this.done {
            return Ok(());
        }
        let closed = match this.it.take() {
            Some(it) => it.bind(py).call_method0(intern!(py, "close")).map(drop),
            None => Ok(()),
        };
        this.done = true;
        this.entered = Entered::none();
        this.pool.get().accounts.give_up(&this.job.get().state);
        closed
    }
}

impl Drop for JobAwait {
    fn drop(&mut self) {
        if !self.done {
            // Dropped before its end (never awaited, or collected suspended): nobody takes the
            // outcome. (The deadline's guard leaves it.)
            self.pool.get().accounts.give_up(&self.job.get().state);
        }
    }
}

impl Coroutine for JobAwait {
    const BORROWED_TO_AWAIT: bool = true;

    #[inline]
    fn protocol_step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py> {
        Self::step(slf, input)
    }

    /// What awaits this is closed: the job is given up.
    fn protocol_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        Self::close_from_core(slf)
    }
}

coroutine_methods! {
#[pymethods]
impl JobAwait {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.pool)?;
        visit.call(&self.job)?;
        visit.call(&self.it)?;
        visit.call(&self.name)?;
        self.entered.traverse(&visit)
    }
}
}

/// The pool of worker threads that run sync tool bodies (see the module); one per process
/// (`_runner` makes a new one in a forked child).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct WorkerPool {
    mailbox: Mailbox<Py<Job>>,
    accounts: Accounts,
    /// `start(pool, n)`: start worker thread `n` running `_runner._work(pool)`.
    start_worker: Py<PyAny>,
    /// `saturated(name, stuck)`: the error refusing a call of tool `name` when all `stuck`
    /// threads are held by calls that overran their deadline.
    saturated: Py<PyAny>,
    /// Calls of `start` whose outcome was there at the end of its brief wait, and the others
    /// (awaited through the job's future).
    at_once: AtomicU64,
    later: AtomicU64,
    /// [`FORKS`] when it was made.
    forks: u64,
}

/// Forks this process came from since the module was loaded: counted in the child of each by
/// the C library (`shutdown::in_fork_child`), also of a fork that runs none of Python's fork
/// hooks (a C extension's, or `ctypes.PyDLL(None).fork()`).
static FORKS: AtomicU64 = AtomicU64::new(0);

/// How many forks this process came from since the module was loaded (see [`FORKS`]): what a
/// process-wide object made before a fork is told apart by.
#[pyfunction]
pub(super) fn forks() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// In the child of a fork: one more (one atomic add: nothing else is safe in that handler).
#[cfg(unix)]
extern "C" fn count_fork() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Threads that run calls within their deadline on this machine.
fn max_workers() -> usize {
    pool::max_workers(std::thread::available_parallelism().ok().map(|n| n.get()))
}

impl WorkerPool {
    /// Make sure a worker will take the next job: true when an idle one was promised to it,
    /// false when it will queue (a thread is started when the limits allow). Raises the
    /// saturation error when nothing could ever run it soon.
    fn reserve(slf: &Bound<'_, Self>, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = slf.py();
        let pool = slf.get();
        if pool.mailbox.claim() {
            return Ok(true);
        }
        match pool.accounts.reserve() {
            Reserve::Queue => {}
            Reserve::Saturated(stuck) => return Err(PyErr::from_value(pool.saturated.bind(py).call1((name, stuck))?)),
            Reserve::Spawn => {
                let n = pool.accounts.sizes().0;
                if let Err(e) = pool.start_worker.bind(py).call1((slf, n)) {
                    pool.accounts.spawn_failed();
                    // Cannot start a thread (interpreter shutting down, limits): it queues.
                    if !e.is_instance_of::<PyRuntimeError>(py) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(false)
    }

    fn job<'py>(
        py: Python<'py>,
        func: Bound<'py, PyAny>,
        a: Bound<'py, PyAny>,
        b: Bound<'py, PyAny>,
        limit: Option<f64>,
        end: Option<f64>,
        later: Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    ) -> PyResult<Bound<'py, Job>> {
        let context = helpers(py)?.copy_context.bind(py).call0()?;
        let job = Job {
            call: Mutex::new(Some([context.unbind(), func.unbind(), a.unbind(), b.unbind()])),
            deadline: until(limit),
            end,
            state: JobState::new(),
            slot: Slot::new(),
            later: later.map(|(c, f)| (c.unbind(), f.unbind())),
        };
        Bound::new(py, job)
    }

    /// `start` (see there) with the call's deadline `end` (on `time.monotonic`) computed by the
    /// caller; `gate`: the caller's count at the exit gate, released while this thread waits
    /// (None: the caller holds its own through the brief wait).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_job<'py>(
        slf: &Bound<'py, Self>,
        func: Bound<'py, PyAny>,
        a: Bound<'py, PyAny>,
        b: Bound<'py, PyAny>,
        limit_s: Option<f64>,
        end: Option<f64>,
        name: Bound<'py, PyAny>,
        gate: Option<Inside>,
    ) -> PyResult<(bool, Bound<'py, PyAny>)> {
        let held = gate.is_some();
        let mut gate = gate;
        let py = slf.py();
        let h = helpers(py)?;
        if crate::deadline::never_starts(limit_s) {
            return Err(timeout(py, h, &name, limit_s)); // a call never starts after its deadline
        }
        let lp = super::running::running_loop(py)?;
        let fut = lp.call_method0(intern!(py, "create_future"))?;
        let call_soon = lp.getattr(intern!(py, "call_soon_threadsafe"))?;
        let claimed = Self::reserve(slf, &name)?;
        let job = Self::job(py, func, a, b, limit_s, end, Some((call_soon, fut)))?;
        let pool = slf.get();
        let j = job.get();
        if claimed && loop_idle(py, &lp, SPIN_MAX.as_secs_f64())? {
            // Queued once this thread has released the interpreter lock: a worker that takes it
            // at once finds the lock free.
            let queued = job.clone().unbind();
            drop(gate.take());
            let published = py.detach(|| {
                pool.mailbox.put(queued, true);
                pool.mailbox.wait_result(&j.slot, until(limit_s), true, false)
            });
            if held {
                gate = Some(inside(py));
            }
            if published || !j.slot.abandon() {
                pool.at_once.fetch_add(1, Ordering::Relaxed);
                let (ok, value) = Self::taken(j)?;
                if crate::deadline::taken_timed_out(ok, || deadline::passed(py, h, end))? {
                    return Err(timeout(py, h, &name, limit_s));
                }
                if ok {
                    return Ok((true, value.into_bound(py)));
                }
                return Err(raisable(py, value.into_bound(py)));
            }
            // Abandoned: the worker hands the outcome to the future.
        } else {
            j.slot.abandon(); // nobody waits on the slot: the outcome goes to the future
            pool.mailbox.put(job.clone().unbind(), claimed);
        }
        pool.later.fetch_add(1, Ordering::Relaxed);
        drop(gate);
        let awaiting = JobAwait {
            pool: slf.clone().unbind(),
            job: job.unbind(),
            it: None,
            entered: Entered::none(),
            limit: limit_s,
            name: name.unbind(),
            done: false,
        };
        Ok((false, Bound::new(py, awaiting)?.into_any()))
    }

    /// The outcome taken out of `job`'s slot (published to this waiter).
    fn taken(job: &Job) -> PyResult<Outcome> {
        job.slot
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("the result slot holds no outcome"))
    }
}

/// True when `lp` has nothing to run now nor a timer due within `bound` seconds: no ready
/// callback, no timer due. Known only for asyncio's own loops (any other loop: false).
fn loop_idle(py: Python<'_>, lp: &Bound<'_, PyAny>, bound: f64) -> PyResult<bool> {
    let Some(ready) = lp.getattr_opt(intern!(py, "_ready"))? else {
        return Ok(false);
    };
    if ready.is_none() || ready.is_truthy()? {
        return Ok(false);
    }
    let scheduled = lp.getattr(intern!(py, "_scheduled"))?;
    if !scheduled.is_truthy()? {
        return Ok(handoff::loop_idle(false, None, 0.0, bound));
    }
    let when: f64 = scheduled.get_item(0)?.call_method0(intern!(py, "when"))?.extract()?;
    let now: f64 = lp.call_method0(intern!(py, "time"))?.extract()?;
    Ok(handoff::loop_idle(false, Some(when), now, bound))
}

/// Complete `fut` with the outcome `(ok, value)` (nothing when it is done already: its caller
/// gave up).
#[pyfunction]
fn _resolve_future(fut: &Bound<'_, PyAny>, ok: bool, value: Bound<'_, PyAny>) -> PyResult<()> {
    let _in = super::shutdown::inside(fut.py());
    let py = fut.py();
    if fut.call_method0(intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    if ok {
        fut.call_method1(intern!(py, "set_result"), (value,))?;
    } else {
        fut.call_method1(intern!(py, "set_exception"), (raisable(py, value).into_value(py),))?;
    }
    Ok(())
}

/// Hand `job`'s outcome, published to nobody, to its future through its loop (nothing when its
/// loop is gone).
fn deliver_later(py: Python<'_>, job: &Job) {
    let (Some((call_soon, fut)), Some((ok, value))) = (&job.later, job.slot.take()) else {
        return;
    };
    static RESOLVE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let Ok(resolve) = RESOLVE.get_or_try_init(py, || {
        wrap_pyfunction!(_resolve_future, py).map(|f| f.into_any().unbind())
    }) else {
        return;
    };
    // The caller's loop is closed: nobody waits for it.
    drop(call_soon.bind(py).call1((resolve, fut, ok, value)));
}

#[pymethods]
impl WorkerPool {
    /// A pool whose threads `start_worker(pool, n)` starts, refusing calls with
    /// `saturated(name, stuck)` when saturated.
    #[new]
    fn new(py: Python<'_>, start_worker: Py<PyAny>, saturated: Py<PyAny>) -> Self {
        let _in = super::shutdown::inside(py);
        WorkerPool {
            mailbox: Mailbox::new(),
            accounts: Accounts::new(max_workers(), pool::MAX_STUCK),
            start_worker,
            saturated,
            at_once: AtomicU64::new(0),
            later: AtomicU64::new(0),
            forks: FORKS.load(Ordering::Relaxed),
        }
    }

    /// Whether this process was forked since the pool was made: its threads and their accounts
    /// are the parent's (none of its threads is here; a lock one held may stay held).
    pub(super) fn forked(&self) -> bool {
        self.forks != FORKS.load(Ordering::Relaxed)
    }

    /// `fn(a, b)` on a worker thread, for a caller on the running event loop, within `limit_s`
    /// seconds (None: no deadline); `name`: the tool's, for the errors. Returns `(True, value)`
    /// when the outcome is here already, else `(False, awaiting)`: `await awaiting` (a
    /// `JobAwait`) for the outcome within the deadline. Raises what the body raised (a
    /// `StopIteration` as a `RuntimeError` caused by it; also when taken past the deadline),
    /// `ToolTimeoutError` at the deadline and for a value taken past it (at once when `limit_s`
    /// is not above 0: it never starts), the saturation error when no worker can take it.
    ///
    /// When a worker is idle and the loop has nothing else to run (no ready callback, no timer
    /// due; asyncio's own loops only), this thread first waits for the outcome with the
    /// interpreter lock released, spinning for at most the result spin bound (50 µs while
    /// recent calls finished within it, 2 µs otherwise) and never past the deadline: a short
    /// body then completes with no wake-up through the event loop at all. Otherwise, or when the
    /// outcome is not there by then, the worker completes the job's future with
    /// `loop.call_soon_threadsafe`.
    #[pyo3(signature = (func, a, b, limit_s, name))]
    fn start<'py>(
        slf: &Bound<'py, Self>,
        func: Bound<'py, PyAny>,
        a: Bound<'py, PyAny>,
        b: Bound<'py, PyAny>,
        limit_s: Option<f64>,
        name: Bound<'py, PyAny>,
    ) -> PyResult<(bool, Bound<'py, PyAny>)> {
        let _in = super::shutdown::inside(slf.py());
        let end = deadline::end_of(slf.py(), helpers(slf.py())?, limit_s)?;
        Self::start_job(slf, func, a, b, limit_s, end, name, Some(_in))
    }

    /// `fn(a, b)` on a worker thread, waited for by this thread (no event loop) within `limit_s`
    /// seconds (None: no deadline); returns its value, raises what it raised,
    /// `ToolTimeoutError(name, limit_s)` at the deadline (an outcome handed over after that is
    /// discarded), the saturation error when no worker can take it. The job is queued once this
    /// thread has released the interpreter lock; this thread waits spinning first (at most the
    /// result spin bound, 50 µs), then parked, waking every 50 ms so that a signal is handled.
    #[pyo3(signature = (func, a, b, limit_s, name))]
    fn run<'py>(
        slf: &Bound<'py, Self>,
        func: Bound<'py, PyAny>,
        a: Bound<'py, PyAny>,
        b: Bound<'py, PyAny>,
        limit_s: Option<f64>,
        name: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _in = super::shutdown::inside(slf.py());
        let mut gate: Option<Inside> = Some(_in);
        let py = slf.py();
        let h = helpers(py)?;
        if crate::deadline::never_starts(limit_s) {
            return Err(timeout(py, h, &name, limit_s)); // a call never starts after its deadline
        }
        let claimed = Self::reserve(slf, &name)?;
        let job = Self::job(py, func, a, b, limit_s, None, None)?;
        let pool = slf.get();
        let j = job.get();
        let queued = job.clone().unbind();
        let slice = |left: Option<Duration>| Some(handoff::next_wake(Instant::now(), left));
        let left = || j.deadline.map(|d| d.saturating_duration_since(Instant::now()));
        drop(gate.take());
        let mut published = py.detach(|| {
            pool.mailbox.put(queued, claimed);
            pool.mailbox.wait_result(&j.slot, slice(left()), true, true)
        });
        gate = Some(inside(py));
        while !published {
            if left().is_some_and(|l| l.is_zero()) {
                break;
            }
            if let Err(e) = py.check_signals() {
                pool.accounts.give_up(&j.state);
                return Err(e);
            }
            drop(gate.take());
            published = py.detach(|| pool.mailbox.wait_result(&j.slot, slice(left()), false, true));
            gate = Some(inside(py));
        }
        drop(gate);
        if !published {
            // An outcome handed over after this point is discarded: it is late.
            pool.accounts.give_up(&j.state);
            j.slot.abandon();
            return Err(timeout(py, h, &name, limit_s));
        }
        let (ok, value) = Self::taken(j)?;
        if ok {
            Ok(value.into_bound(py))
        } else {
            Err(PyErr::from_value(value.into_bound(py)))
        }
    }

    /// A worker thread's step: `held` is `[job, ok, value]`, the job it ran last (None at first)
    /// and its outcome, which are taken out of it and handed over (to the caller waiting on the
    /// job's slot, which sees it once this thread has released the interpreter lock, else to
    /// the job's future; dropped when its caller gave up). Then waits for the next job to run
    /// (one whose caller gave up or whose deadline passed while queued is skipped), puts it in
    /// `held[0]` and returns `(context, fn, a, b)`: the thread runs `context.run(fn, a, b)`.
    fn next_job<'py>(slf: &Bound<'py, Self>, held: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyTuple>> {
        let _in = super::shutdown::inside(slf.py());
        let mut gate: Option<Inside> = Some(_in);
        let py = slf.py();
        let pool = slf.get();
        let (last, ok, value) = (held.get_item(0)?, held.get_item(1)?.is_truthy()?, held.get_item(2)?);
        held.set_item(0, py.None())?;
        held.set_item(2, py.None())?;
        let mut publish: Option<Py<Job>> = None;
        if let Ok(last) = last.cast_into::<Job>() {
            let j = last.get();
            if pool.accounts.finish(&j.state) {
                j.slot.store((ok, value.unbind()));
                publish = Some(last.unbind());
            }
            // else its caller gave up: the outcome is dropped here
        }
        loop {
            drop(gate.take());
            let pending = publish.take();
            let (next, unread) = py.detach(move || {
                if let Some(p) = pending {
                    if !p.get().slot.publish() {
                        return (None, Some(p)); // its waiter abandoned the slot first
                    }
                    // Published: the job is let go before this thread waits for its next one (it
                    // holds its caller's loop through the loop's future for its outcome); its
                    // reference is dropped at the core's next entry, without the interpreter lock
                    // here.
                    drop(p);
                }
                let next = pool.mailbox.take();
                let j = next.get();
                let expired = handoff::reached(Instant::now(), j.deadline);
                let run = pool.accounts.start(&j.state, expired);
                (Some((next, run)), None)
            });
            gate = Some(inside(py));
            if let Some(p) = unread {
                deliver_later(py, p.get());
                continue;
            }
            let Some((next, run)) = next else { continue };
            if !run {
                continue;
            }
            let taken = next.get().call.lock().unwrap_or_else(|e| e.into_inner()).take();
            // A job leaves the mailbox once, to one worker: what it runs is always still there.
            let Some(call) = taken else { continue };
            let parts = PyTuple::new(py, call)?;
            held.set_item(0, next)?;
            drop(gate);
            return Ok(parts);
        }
    }

    /// `(at_once, later)`: calls of `start` whose outcome was there by the end of its brief wait
    /// (no suspension), and the others (awaited through the job's future), since the pool was
    /// made.
    fn starts(&self, py: Python<'_>) -> (u64, u64) {
        let _in = super::shutdown::inside(py);
        (self.at_once.load(Ordering::Relaxed), self.later.load(Ordering::Relaxed))
    }

    /// `(threads, idle, stuck)`: threads alive, waiting for a job with none promised to them,
    /// and held by a call that overran its deadline.
    fn sizes(&self, py: Python<'_>) -> (usize, usize, usize) {
        let _in = super::shutdown::inside(py);
        let (threads, stuck) = self.accounts.sizes();
        (threads, self.mailbox.idle(), stuck)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.start_worker)?;
        visit.call(&self.saturated)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<WorkerPool>()?;
    m.add_class::<Job>()?;
    m.add_class::<JobAwait>()?;
    m.add_function(wrap_pyfunction!(forks, m)?)?;
    m.add("HANDOFF_SPIN_S", SPIN_MAX.as_secs_f64())?;
    m.add("POOL_MAX_WORKERS", max_workers())?;
    m.add("POOL_MAX_STUCK", pool::MAX_STUCK)?;
    // (registered once per process: the module is initialized once)
    #[cfg(unix)]
    if !super::shutdown::in_fork_child(count_fork) {
        return Err(pyo3::exceptions::PyOSError::new_err(
            "could not register the worker pool's fork handler",
        ));
    }
    Ok(())
}
