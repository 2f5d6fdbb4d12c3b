//! The decisions of an `Invoker.invoke_many` turn, sans-IO: the [`TurnMachine`] keeps what the
//! turn knows of its calls (how many are unanswered, whether the caller's cancellation or a stop
//! reached it, the one bound of its aborts) and says what each event means: what each phase of
//! the turn does with a step of the caller's `await` ([`TurnMachine::on`]) or a close
//! ([`TurnMachine::closing`]), how each admitted call starts ([`TurnMachine::admitted`]), what a
//! cancelled turn does next ([`TurnMachine::cancelling`], [`TurnMachine::aborting`]); the binding
//! (`src/py/turn.rs`, `src/py/relay.rs`) classifies what Python raised (`crate::cancel::Raised`,
//! [`Out`]), asks, and performs the step (answer a call, abort it, cancel the tasks, wait, raise).
//!
//! The rules: a call whose body or drive stops the process (`KeyboardInterrupt`/`SystemExit`)
//! is aborted within the turn's abort bound and its stop reaches the caller's `await` (the first
//! one, over the caller's cancellation); a call ended by the caller's cancellation of the turn is
//! left to the turn, which aborts every call still unanswered once all its tasks have ended;
//! anything else a call raises is that call's failure, answered with its envelope. The caller's
//! cancellation during the aborts does not interrupt them: the first one propagates once they
//! are done.

use std::time::Instant;

use crate::body;
use crate::cancel::Raised;

/// How a step of the turn's own (a drive's, an abort's, the wait on the tasks) ended, as the
/// binding classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Out {
    /// It returned.
    Returned,
    /// It raised a `KeyboardInterrupt`/`SystemExit`.
    Stop,
    /// It raised a cancellation.
    Cancelled,
    /// It raised an `Exception`.
    Failed,
    /// It raised another `BaseException` (`GeneratorExit` and the like).
    Other,
}

impl Out {
    /// What a step that raised is, `raised` being how [`crate::cancel::Raised`] classifies it;
    /// `exception`: whether it is an `Exception`, asked only of one that is neither a request to
    /// stop nor a cancellation.
    pub fn of_raised(raised: Raised, exception: impl FnOnce() -> bool) -> Out {
        match raised {
            Raised::Stop => Out::Stop,
            Raised::Cancelled => Out::Cancelled,
            Raised::Other if exception() => Out::Failed,
            Raised::Other => Out::Other,
        }
    }

    /// The classification of what a step raised, for the decisions that take a
    /// [`crate::cancel::Raised`].
    pub fn raised(self) -> Raised {
        match self {
            Out::Stop => Raised::Stop,
            Out::Cancelled => Raised::Cancelled,
            Out::Returned | Out::Failed | Out::Other => Raised::Other,
        }
    }
}

/// What to do with a call whose body raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyRaised {
    /// Abort the call by it (a stop: within the turn's abort bound).
    Abort,
    /// Nothing: the caller's cancellation ended it, the turn aborts it.
    Left,
    /// Feed it to the call's state as the body's failure (the call goes on: retry, answer).
    Feed,
}

/// What to do once a call's drive ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriveEnded {
    /// Answer the call with what the drive returned.
    Answer,
    /// Answer the call with the fault envelope of what the drive raised.
    Fault,
    /// The call stopped the process: the caller's `await` raises its stop.
    Stopped,
    /// The caller's cancellation ended it: the call is left to the turn.
    Left,
    /// The drive was closed (it aborted its call as cancelled): the call is let go, answered
    /// with the fault envelope of the close when `answer` (the turn goes on), and the close
    /// propagates.
    Closed { answer: bool },
}

/// How a call's drive ended, for [`TurnMachine::drive_ended`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driven {
    Returned,
    /// Closed by its relay (a `GeneratorExit` of the drive's own close).
    Closed,
    Raised(Raised),
}

/// What to do once the abort of one call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortEnded {
    /// The call ends by the exception it was aborted by.
    ByItsException,
    /// The call ends by the stop a store or a sink raised during the abort.
    ByTheStop,
    /// What the abort raised propagates.
    Propagate,
}

/// What to do with a call ended by the exception it was aborted by (or the stop met meanwhile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aborted {
    /// Answer it with the fault envelope.
    Fault,
    /// The caller's `await` raises the stop.
    Stopped,
}

/// What to do with a call whose relay was closed before the call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayClosed {
    /// Nothing: the turn, cancelled or closed, aborts it (or the call is not the relay's any
    /// more).
    Nothing,
    /// Nothing can be awaited any more (its loop is closed): abort it as cancelled without
    /// awaiting.
    CloseUnawaited,
    /// Abort it by what closed it (a stop), in a task of its own.
    Abort,
    /// Feed what closed it to the call's state as its body's failure; its later steps go on in a
    /// task of their own.
    Feed,
}

/// What to do once one abort of a cancelled turn's call ended: the calls left are aborted one
/// after the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortsStep {
    /// Abort the next call.
    Next,
    /// Log the failure, then abort the next call.
    LogNext,
    /// Keep the stop (the first one only), then abort the next call.
    KeepStopNext,
    /// What the abort raised propagates.
    Propagate,
}

/// What a step of the caller's `await` while the turn waits for its calls does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Every call is answered (or one stopped): end with the waiter's outcome.
    Finish,
    /// Woken with the waiter pending: the waiter is yielded again.
    Wait,
    /// Stepped again before its task took the waiter: a misuse; the turn is cancelled by it.
    Misuse,
}

/// What to do once a wait of the turn's own (on the tasks being cancelled, on the shielded
/// aborts) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitEnded {
    /// Look again (a cancellation of the caller's: the tasks are cancelled again, as `gather`
    /// does; the aborts go on).
    Again,
    /// What the wait raised propagates.
    Propagate,
}

/// How the turn ends after its aborts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// By the stop a call raised meanwhile (its `__cause__` cleared).
    Stop,
    /// By the exception that cancelled it.
    Cancelled,
}

/// How a call goes on after its body, once the call's state was fed what the body did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// The call is answered (its state's step is done).
    Answer,
    /// Its later steps go on in a task of their own: the body cancelled its own task and
    /// returned (that cancellation was the body's, as for a call alone).
    OwnTask,
    /// Its drive goes on in the relay's task.
    Drive,
}

/// What a step of a body's clean-up past its deadline (its outcome dropped) leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanUp {
    /// Hand on what the body yielded; the clean-up goes on.
    Yield,
    /// Close the body (it swallowed the cancellation of its task, or was cancelled before its
    /// first step); the clean-up ends.
    Close,
    /// What the body raised propagates (its loop was closed, or the process is being stopped).
    Propagate,
    /// The clean-up ended; nobody reads its outcome.
    Done,
}

/// How a step of a body's clean-up ended, as the binding classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanUpStep {
    /// It yielded.
    Yielded,
    /// It raised a `KeyboardInterrupt`/`SystemExit` or a `GeneratorExit`.
    Stopped,
    /// It returned, or raised anything else.
    Ended,
}

/// Where the turn is, as the binding's awaitable holds it (with the Python objects of each
/// phase).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not started: the first step admits every call.
    Begin,
    /// Waiting for the last call to be answered.
    Waiting,
    /// Cancelled: waiting for the tasks still running to end.
    Cancelling,
    /// The calls left are aborted in a task of their own, awaited shielded.
    Aborting,
    /// Ended (or closed).
    Done,
}

/// What a step of the caller's `await` hands the turn (the coroutine protocol's `send`/`throw`;
/// `__next__` sends None).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A value sent (`none`: it is None).
    Send { none: bool },
    /// An exception thrown in (`exit`: a `GeneratorExit`).
    Throw { exit: bool },
}

/// What the turn does with a step of the caller's `await` ([`TurnMachine::on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Close the turn ([`TurnMachine::closing`]), then raise what was thrown (a
    /// `GeneratorExit`).
    Close,
    /// Admit every call in call order and start each ([`TurnMachine::admitted`]).
    Start,
    /// A value other than None sent to a turn not started: a `TypeError`; the turn stays not
    /// started.
    NotNone,
    /// Woken while waiting: look at the waiter ([`TurnMachine::waiting`]).
    Wake,
    /// The caller's cancellation (or what else was thrown in while waiting): the turn is
    /// cancelled by it.
    Cancel,
    /// Hand the input to the wait on the tasks being cancelled ([`TurnMachine::wait_ended`]
    /// once it ends).
    StepWait,
    /// Hand the input to the shielded wait on the aborts (the aborts go on whatever it is).
    StepShield,
    /// Raise what was thrown as it is (the turn never started, or it ended): the turn ends.
    Raise,
    /// A value sent once the turn ended: a `RuntimeError`.
    Reused,
}

/// Whether the turn may be awaited now ([`TurnMachine::awaitable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Awaitable {
    Yes,
    /// It ended: a `RuntimeError`, as for a coroutine awaited again.
    Reused,
    /// It started: one caller awaits it.
    Awaited,
}

/// What the pipeline made of a call at its admission, for [`TurnMachine::admitted`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Its first step is to await its `async` body.
    Body,
    /// Its first step is another (`done`: the pipeline answered it at once).
    Step { done: bool },
    /// Its admission raised.
    Raised(Raised),
}

/// How the turn starts a call once admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A task of its own runs just its body (a relay whose first step is the body).
    Body,
    /// A task of its own drives the call from its first step.
    Drive,
    /// Answered at once with what the pipeline answered (no task, no state kept).
    Answer,
    /// Answered at once with the fault envelope of what its admission raised.
    Fault,
    /// The process is being stopped: the turn is cancelled by the stop (no later call is
    /// admitted).
    Cancel,
}

/// What closing the turn (`close()`, or a `GeneratorExit` thrown in) does in its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    /// Nothing: it never started, or it ended.
    Nothing,
    /// Its calls are closed: each task left has its coroutine closed (and is cancelled if its
    /// loop still runs), then each call left is aborted as cancelled without awaiting. `wait`:
    /// the wait on the tasks being cancelled is closed first.
    Calls { wait: bool },
    /// The shielded wait on the aborts is closed; the aborts go on by themselves while their loop
    /// runs, else (`task`) their task is closed as a call's is.
    Aborts { task: bool },
}

/// How the turn makes the tasks of its calls on the running loop ([`TurnMachine::tasks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tasks {
    /// `asyncio.Task(relay, loop=..., name=..., context=...)`, as asyncio's own
    /// `BaseEventLoop.create_task` makes it, each task given its context.
    Direct,
    /// Through the loop's `create_task`.
    CreateTask,
}

/// What a cancelled turn does once it looked at the tasks it cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelling {
    /// Every task has ended: the calls left are aborted.
    Abort,
    /// The tasks still running are cancelled (again) and waited for.
    Wait,
}

/// What a cancelled turn does once its tasks have all ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aborting {
    /// No call is left to abort (or the turn never started): it ends ([`TurnMachine::ending`]).
    End,
    /// The calls left are aborted, one after the other, in a task of their own that the turn
    /// awaits shielded.
    Abort,
}

/// What follows once the coroutine of a task of a closed turn was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskClosed {
    /// Cancel the task: its loop still runs, the task ends at its next step.
    Cancel,
    /// Nothing more: its loop is closed.
    Leave,
    /// What the close raised propagates.
    Propagate,
}

/// The name of the task a turn makes for a call whose first step is its `async` body, the
/// `__qualname__` of the tool's function being `qualname` (as `asyncio.Task.get_name()` shows
/// it; the body of a call alone is named so too).
pub fn body_task_name(qualname: &str) -> String {
    format!("tool body {qualname}")
}

/// The state of one turn's decisions (see the module).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnMachine {
    pending: usize,
    cancelled: bool,
    stop: bool,
    abort_until: Option<Instant>,
    /// During one of the turn's own steps.
    busy: bool,
}

impl TurnMachine {
    /// A turn of `calls` calls, none answered.
    pub fn new(calls: usize) -> Self {
        TurnMachine {
            pending: calls,
            cancelled: false,
            stop: false,
            abort_until: None,
            busy: false,
        }
    }

    /// A step of the caller's `await` begins: false when one is running already (a
    /// `ValueError`, as a running coroutine raises).
    pub fn enter(&mut self) -> bool {
        !std::mem::replace(&mut self.busy, true)
    }

    /// The step that [`TurnMachine::enter`] began ended.
    pub fn leave(&mut self) {
        self.busy = false;
    }

    /// What the turn does with `input` in `phase` (a `GeneratorExit` thrown in closes it in
    /// any phase).
    pub fn on(phase: Phase, input: Input) -> Step {
        match (phase, input) {
            (_, Input::Throw { exit: true }) => Step::Close,
            (Phase::Begin, Input::Send { none: true }) => Step::Start,
            (Phase::Begin, Input::Send { none: false }) => Step::NotNone,
            (Phase::Waiting, Input::Send { .. }) => Step::Wake,
            (Phase::Waiting, Input::Throw { .. }) => Step::Cancel,
            (Phase::Cancelling, _) => Step::StepWait,
            (Phase::Aborting, _) => Step::StepShield,
            (Phase::Begin | Phase::Done, Input::Throw { .. }) => Step::Raise,
            (Phase::Done, Input::Send { .. }) => Step::Reused,
        }
    }

    /// Whether the turn in `phase` may be awaited (`__await__`).
    pub fn awaitable(phase: Phase) -> Awaitable {
        match phase {
            Phase::Begin => Awaitable::Yes,
            Phase::Done => Awaitable::Reused,
            Phase::Waiting | Phase::Cancelling | Phase::Aborting => Awaitable::Awaited,
        }
    }

    /// How the turn makes its tasks on the running loop: directly where what the loop's
    /// `create_task` does is known, that is where tasks take the context they run in (Python
    /// 3.11+: `takes_context`), the loop's `create_task` is asyncio's own
    /// (`asyncios_create_task`), it has no task factory (`no_factory`) and is not in debug mode
    /// (`debug`: its tasks then keep where they were made); else through `create_task`. Each
    /// fact is asked only when those before it hold; what asking one raised propagates.
    pub fn tasks<E>(
        takes_context: bool,
        asyncios_create_task: impl FnOnce() -> Result<bool, E>,
        no_factory: impl FnOnce() -> Result<bool, E>,
        debug: impl FnOnce() -> Result<bool, E>,
    ) -> Result<Tasks, E> {
        Ok(
            if takes_context && asyncios_create_task()? && no_factory()? && !debug()? {
                Tasks::Direct
            } else {
                Tasks::CreateTask
            },
        )
    }

    /// How a call the pipeline admitted as `admission` starts.
    pub fn admitted(admission: Admission) -> Start {
        match admission {
            Admission::Body => Start::Body,
            Admission::Step { done: true } => Start::Answer,
            Admission::Step { done: false } => Start::Drive,
            Admission::Raised(Raised::Stop) => Start::Cancel,
            Admission::Raised(_) => Start::Fault,
        }
    }

    /// Every call admitted and started: the turn ends at once when every call was answered,
    /// else it waits for the last one.
    pub fn started(&self) -> Waiting {
        if self.pending == 0 {
            Waiting::Finish
        } else {
            Waiting::Wait
        }
    }

    /// The turn in `phase` is closed: what that does (closing its calls cancels the turn;
    /// `aborts_loop_closed`: whether the loop of its aborts is closed, asked only while they run).
    pub fn closing(&mut self, phase: Phase, aborts_loop_closed: impl FnOnce() -> bool) -> Closing {
        match phase {
            Phase::Begin | Phase::Done => Closing::Nothing,
            Phase::Waiting | Phase::Cancelling => {
                self.cancelled = true;
                Closing::Calls {
                    wait: phase == Phase::Cancelling,
                }
            }
            Phase::Aborting => Closing::Aborts {
                task: aborts_loop_closed(),
            },
        }
    }

    /// A cancelled turn looked at its tasks: `running` of them have not ended.
    pub fn cancelling(running: usize) -> Cancelling {
        if running == 0 {
            Cancelling::Abort
        } else {
            Cancelling::Wait
        }
    }

    /// A cancelled turn's tasks have all ended: `left` calls are unanswered (`started`: the turn
    /// has a loop to abort them on).
    pub fn aborting(left: usize, started: bool) -> Aborting {
        if left == 0 || !started {
            Aborting::End
        } else {
            Aborting::Abort
        }
    }

    /// A cancelled turn's aborts are done (`stopped`: a store or a sink stopped the process
    /// during them): whether that stop is kept (the first one; the turn then ends by it).
    pub fn aborts_done(&mut self, stopped: bool) -> bool {
        stopped && self.stopped()
    }

    /// Calls neither answered nor stopped.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Whether the caller's cancellation (or a stop) reached the turn, or it was closed: the
    /// task of every call still running was cancelled.
    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    /// The caller's cancellation (or a stop) reached the turn at `now`, or it was closed. The bound
    /// of the turn's aborts starts (see [`TurnMachine::abort_bound`]) unless a call's stop started
    /// it: one bound from the cancellation, for the calls its own drive aborts meanwhile (a record
    /// being written when the cancellation reaches its task, awaited until that bound) as for the
    /// calls aborted once all the turn's tasks have ended.
    pub fn cancel(&mut self, now: Instant) {
        self.cancelled = true;
        self.abort_bound(now);
    }

    /// A call was answered: whether it was the last (the waiter is woken).
    pub fn answered(&mut self) -> bool {
        self.pending = self.pending.saturating_sub(1);
        self.pending == 0
    }

    /// A call stopped the process: whether its stop is the first (the one the turn raises). The
    /// waiter is woken with it either way.
    pub fn stopped(&mut self) -> bool {
        !std::mem::replace(&mut self.stop, true)
    }

    /// Whether a call's stop was kept.
    pub fn has_stop(&self) -> bool {
        self.stop
    }

    /// The bound of the turn's aborts at `now`: one for them all, started by the first abort
    /// that asks (a call's stop, else the caller's cancellation).
    pub fn abort_bound(&mut self, now: Instant) -> Instant {
        *self
            .abort_until
            .get_or_insert_with(|| crate::deadline::abort_until(now))
    }

    /// Whether the abort of a call by `raised` runs within the turn's bound (a stop: the turn's
    /// cancellation follows once this call is aborted) rather than one of its own.
    pub fn aborts_within_turn(raised: Raised) -> bool {
        raised == Raised::Stop
    }

    /// A call's body raised `raised`.
    pub fn body_raised(&self, raised: Raised) -> BodyRaised {
        match raised {
            Raised::Stop => BodyRaised::Abort,
            Raised::Cancelled if self.cancelled => BodyRaised::Left,
            _ => BodyRaised::Feed,
        }
    }

    /// A call's drive ended (`loop_closed`: whether the turn's loop is closed, asked only for a
    /// closed drive).
    pub fn drive_ended(&self, driven: Driven, loop_closed: impl FnOnce() -> bool) -> DriveEnded {
        match driven {
            Driven::Returned => DriveEnded::Answer,
            Driven::Closed => DriveEnded::Closed {
                answer: !self.cancelled && !loop_closed(),
            },
            Driven::Raised(Raised::Stop) => DriveEnded::Stopped,
            Driven::Raised(Raised::Cancelled) if self.cancelled => DriveEnded::Left,
            Driven::Raised(_) => DriveEnded::Fault,
        }
    }

    /// The abort of a call ended with `out`.
    pub fn abort_ended(out: Out) -> AbortEnded {
        match out {
            Out::Returned => AbortEnded::ByItsException,
            Out::Stop => AbortEnded::ByTheStop,
            Out::Cancelled | Out::Failed | Out::Other => AbortEnded::Propagate,
        }
    }

    /// A call ends by the exception it was aborted by (`raised`).
    pub fn aborted(raised: Raised) -> Aborted {
        if raised == Raised::Stop {
            Aborted::Stopped
        } else {
            Aborted::Fault
        }
    }

    /// A call's relay was closed before the call ended, by `raised` (`mine`: the call is still
    /// the relay's; `loop_closed` asked only when it matters).
    pub fn relay_closed(&self, mine: bool, loop_closed: impl FnOnce() -> bool, raised: Raised) -> RelayClosed {
        if self.cancelled || !mine {
            RelayClosed::Nothing
        } else if loop_closed() {
            RelayClosed::CloseUnawaited
        } else if raised == Raised::Stop {
            RelayClosed::Abort
        } else {
            RelayClosed::Feed
        }
    }

    /// One abort of a cancelled turn's call ended with `out`.
    pub fn aborts_step(out: Out) -> AbortsStep {
        match out {
            Out::Returned => AbortsStep::Next,
            Out::Failed => AbortsStep::LogNext,
            Out::Stop => AbortsStep::KeepStopNext,
            Out::Cancelled | Out::Other => AbortsStep::Propagate,
        }
    }

    /// A step of the caller's `await` while the turn waits (`done`: the waiter is done;
    /// `blocking`: its task has not taken it yet since it was last yielded).
    pub fn waiting(done: bool, blocking: bool) -> Waiting {
        if done {
            Waiting::Finish
        } else if blocking {
            Waiting::Misuse
        } else {
            Waiting::Wait
        }
    }

    /// A wait of the turn's own ended with `out` (returned: look again too).
    pub fn wait_ended(out: Out) -> WaitEnded {
        match out {
            Out::Returned | Out::Cancelled => WaitEnded::Again,
            Out::Stop | Out::Failed | Out::Other => WaitEnded::Propagate,
        }
    }

    /// How a call goes on from its state's next step after its body (`done`: that step answers
    /// it; `own_task_cancelled`: the body cancelled its own task and returned).
    pub fn then(done: bool, own_task_cancelled: bool) -> Then {
        if done {
            Then::Answer
        } else if own_task_cancelled {
            Then::OwnTask
        } else {
            Then::Drive
        }
    }

    /// Where a call's later steps go on that its relay goes on with after the body
    /// (`in_body_context`: the relay's task runs in the body's context, on Python 3.11+): in a
    /// task of their own then (in a fresh copy of the caller's context: what the body set must
    /// not reach them), else in the relay's task.
    #[inline]
    pub fn later_steps(in_body_context: bool) -> Then {
        if in_body_context {
            Then::OwnTask
        } else {
            Then::Drive
        }
    }

    /// How a call goes on once what closed its relay was fed to its state (`done`: that step
    /// answers it): its later steps go on in a task of their own, the relay being closed.
    pub fn after_relay_closed(done: bool) -> Then {
        if done {
            Then::Answer
        } else {
            Then::OwnTask
        }
    }

    /// The coroutine of a task left of a closed turn was closed with `out` (its body's `finally`
    /// blocks ran, its drive aborted its call as cancelled without awaiting): an `Exception` the
    /// close raised is dropped (its call is aborted all the same), anything else propagates;
    /// `loop_closed`: whether the task's loop is closed, asked only then.
    pub fn task_closed(out: Out, loop_closed: impl FnOnce() -> bool) -> TaskClosed {
        match out {
            Out::Returned | Out::Failed => {
                if loop_closed() {
                    TaskClosed::Leave
                } else {
                    TaskClosed::Cancel
                }
            }
            Out::Stop | Out::Cancelled | Out::Other => TaskClosed::Propagate,
        }
    }

    /// A step of a body's clean-up past its deadline ended with `step` (`cancelled`: a
    /// cancellation of its task was thrown into it): what a yield does is the rule of any
    /// clean-up's await (`body::closes_after_yield`: one that swallowed its task's cancellation
    /// is closed).
    pub fn clean_up(step: CleanUpStep, cancelled: bool) -> CleanUp {
        match step {
            CleanUpStep::Yielded if body::closes_after_yield(true, cancelled) => CleanUp::Close,
            CleanUpStep::Yielded => CleanUp::Yield,
            CleanUpStep::Stopped => CleanUp::Propagate,
            CleanUpStep::Ended => CleanUp::Done,
        }
    }

    /// How the turn ends once its aborts are done (`stop_is_exc`: the stop kept is the exception
    /// that cancelled the turn).
    pub fn ending(&self, stop_is_exc: bool) -> Ending {
        if self.stop && !stop_is_exc {
            Ending::Stop
        } else {
            Ending::Cancelled
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_body_task_is_named_after_its_function() {
        assert_eq!(body_task_name("search_docs"), "tool body search_docs");
        assert_eq!(body_task_name("Docs.search"), "tool body Docs.search");
    }

    #[test]
    fn the_last_answer_wakes_the_waiter() {
        let mut t = TurnMachine::new(3);
        assert_eq!((t.answered(), t.answered(), t.pending()), (false, false, 1));
        assert!(t.answered());
        assert_eq!(t.pending(), 0);
        assert!(t.answered()); // never below zero
        assert!(TurnMachine::new(0).answered());
    }

    #[test]
    fn the_first_stop_is_the_one_kept() {
        let mut t = TurnMachine::new(2);
        assert!(!t.has_stop());
        assert!(t.stopped());
        assert!(!t.stopped());
        assert!(t.has_stop());
        assert_eq!(t.ending(false), Ending::Stop);
        assert_eq!(t.ending(true), Ending::Cancelled);
        assert_eq!(TurnMachine::new(1).ending(false), Ending::Cancelled);
    }

    #[test]
    fn the_turns_aborts_share_one_bound() {
        let mut t = TurnMachine::new(2);
        let now = Instant::now();
        let first = t.abort_bound(now);
        assert_eq!(first, now + Duration::from_secs_f64(crate::deadline::ABORT_WAIT_S));
        assert_eq!(t.abort_bound(now + Duration::from_secs(5)), first);
        t.cancel(now + Duration::from_secs(6));
        assert_eq!(t.abort_bound(now + Duration::from_secs(7)), first);
        // The caller's cancellation starts it: the aborts after the tasks have ended keep it.
        let mut t = TurnMachine::new(2);
        t.cancel(now);
        assert_eq!(t.abort_bound(now + Duration::from_secs(5)), first);
        assert!(TurnMachine::aborts_within_turn(Raised::Stop));
        assert!(!TurnMachine::aborts_within_turn(Raised::Cancelled));
        assert!(!TurnMachine::aborts_within_turn(Raised::Other));
    }

    #[test]
    fn a_body_raising_is_aborted_left_or_fed() {
        let mut t = TurnMachine::new(1);
        assert_eq!(t.body_raised(Raised::Stop), BodyRaised::Abort);
        assert_eq!(t.body_raised(Raised::Cancelled), BodyRaised::Feed);
        assert_eq!(t.body_raised(Raised::Other), BodyRaised::Feed);
        t.cancel(Instant::now());
        assert!(t.cancelled());
        assert_eq!(t.body_raised(Raised::Stop), BodyRaised::Abort);
        assert_eq!(t.body_raised(Raised::Cancelled), BodyRaised::Left);
        assert_eq!(t.body_raised(Raised::Other), BodyRaised::Feed);
    }

    #[test]
    fn a_drive_that_ended() {
        let mut t = TurnMachine::new(1);
        let never = || -> bool { panic!("not asked") };
        assert_eq!(t.drive_ended(Driven::Returned, never), DriveEnded::Answer);
        assert_eq!(t.drive_ended(Driven::Raised(Raised::Stop), never), DriveEnded::Stopped);
        assert_eq!(
            t.drive_ended(Driven::Raised(Raised::Cancelled), never),
            DriveEnded::Fault
        );
        assert_eq!(t.drive_ended(Driven::Raised(Raised::Other), never), DriveEnded::Fault);
        assert_eq!(
            t.drive_ended(Driven::Closed, || false),
            DriveEnded::Closed { answer: true }
        );
        assert_eq!(
            t.drive_ended(Driven::Closed, || true),
            DriveEnded::Closed { answer: false }
        );
        t.cancel(Instant::now());
        assert_eq!(
            t.drive_ended(Driven::Raised(Raised::Cancelled), never),
            DriveEnded::Left
        );
        assert_eq!(
            t.drive_ended(Driven::Closed, never),
            DriveEnded::Closed { answer: false }
        );
    }

    #[test]
    fn an_abort_that_ended() {
        assert_eq!(TurnMachine::abort_ended(Out::Returned), AbortEnded::ByItsException);
        assert_eq!(TurnMachine::abort_ended(Out::Stop), AbortEnded::ByTheStop);
        for out in [Out::Cancelled, Out::Failed, Out::Other] {
            assert_eq!(TurnMachine::abort_ended(out), AbortEnded::Propagate);
        }
        assert_eq!(TurnMachine::aborted(Raised::Stop), Aborted::Stopped);
        assert_eq!(TurnMachine::aborted(Raised::Cancelled), Aborted::Fault);
        assert_eq!(TurnMachine::aborted(Raised::Other), Aborted::Fault);
    }

    #[test]
    fn a_closed_relay() {
        let mut t = TurnMachine::new(1);
        let never = || -> bool { panic!("not asked") };
        assert_eq!(t.relay_closed(false, never, Raised::Other), RelayClosed::Nothing);
        assert_eq!(t.relay_closed(true, || true, Raised::Stop), RelayClosed::CloseUnawaited);
        assert_eq!(t.relay_closed(true, || false, Raised::Stop), RelayClosed::Abort);
        assert_eq!(t.relay_closed(true, || false, Raised::Other), RelayClosed::Feed);
        assert_eq!(t.relay_closed(true, || false, Raised::Cancelled), RelayClosed::Feed);
        t.cancel(Instant::now());
        assert_eq!(t.relay_closed(true, never, Raised::Other), RelayClosed::Nothing);
    }

    #[test]
    fn the_aborts_go_on_one_after_the_other() {
        assert_eq!(TurnMachine::aborts_step(Out::Returned), AbortsStep::Next);
        assert_eq!(TurnMachine::aborts_step(Out::Failed), AbortsStep::LogNext);
        assert_eq!(TurnMachine::aborts_step(Out::Stop), AbortsStep::KeepStopNext);
        assert_eq!(TurnMachine::aborts_step(Out::Cancelled), AbortsStep::Propagate);
        assert_eq!(TurnMachine::aborts_step(Out::Other), AbortsStep::Propagate);
    }

    #[test]
    fn after_a_body() {
        assert_eq!(TurnMachine::then(true, true), Then::Answer);
        assert_eq!(TurnMachine::then(true, false), Then::Answer);
        assert_eq!(TurnMachine::then(false, true), Then::OwnTask);
        assert_eq!(TurnMachine::then(false, false), Then::Drive);
    }

    #[test]
    fn a_clean_up_past_the_deadline() {
        assert_eq!(TurnMachine::clean_up(CleanUpStep::Yielded, false), CleanUp::Yield);
        assert_eq!(TurnMachine::clean_up(CleanUpStep::Yielded, true), CleanUp::Close);
        assert_eq!(TurnMachine::clean_up(CleanUpStep::Stopped, false), CleanUp::Propagate);
        assert_eq!(TurnMachine::clean_up(CleanUpStep::Stopped, true), CleanUp::Propagate);
        assert_eq!(TurnMachine::clean_up(CleanUpStep::Ended, false), CleanUp::Done);
        assert_eq!(TurnMachine::clean_up(CleanUpStep::Ended, true), CleanUp::Done);
    }

    #[test]
    fn waiting_and_the_waits_of_the_turns_own() {
        assert_eq!(TurnMachine::waiting(true, true), Waiting::Finish);
        assert_eq!(TurnMachine::waiting(true, false), Waiting::Finish);
        assert_eq!(TurnMachine::waiting(false, true), Waiting::Misuse);
        assert_eq!(TurnMachine::waiting(false, false), Waiting::Wait);
        assert_eq!(TurnMachine::wait_ended(Out::Returned), WaitEnded::Again);
        assert_eq!(TurnMachine::wait_ended(Out::Cancelled), WaitEnded::Again);
        for out in [Out::Stop, Out::Failed, Out::Other] {
            assert_eq!(TurnMachine::wait_ended(out), WaitEnded::Propagate);
        }
        assert_eq!(Out::Stop.raised(), Raised::Stop);
        let never = || -> bool { panic!("not asked") };
        assert_eq!(Out::of_raised(Raised::Stop, never), Out::Stop);
        assert_eq!(Out::of_raised(Raised::Cancelled, never), Out::Cancelled);
        assert_eq!(Out::of_raised(Raised::Other, || true), Out::Failed);
        assert_eq!(Out::of_raised(Raised::Other, || false), Out::Other);
        for out in [Out::Stop, Out::Cancelled, Out::Failed, Out::Other] {
            assert_eq!(Out::of_raised(out.raised(), || out == Out::Failed), out);
        }
        assert_eq!(Out::Cancelled.raised(), Raised::Cancelled);
        assert_eq!(Out::Failed.raised(), Raised::Other);
    }

    #[test]
    fn each_phase_handles_each_input() {
        use Input::{Send, Throw};
        let none = Send { none: true };
        let value = Send { none: false };
        let thrown = Throw { exit: false };
        let exit = Throw { exit: true };
        let expected = [
            (Phase::Begin, [Step::Start, Step::NotNone, Step::Raise, Step::Close]),
            (Phase::Waiting, [Step::Wake, Step::Wake, Step::Cancel, Step::Close]),
            (
                Phase::Cancelling,
                [Step::StepWait, Step::StepWait, Step::StepWait, Step::Close],
            ),
            (
                Phase::Aborting,
                [Step::StepShield, Step::StepShield, Step::StepShield, Step::Close],
            ),
            (Phase::Done, [Step::Reused, Step::Reused, Step::Raise, Step::Close]),
        ];
        for (phase, steps) in expected {
            let got = [none, value, thrown, exit].map(|input| TurnMachine::on(phase, input));
            assert_eq!(got, steps, "{phase:?}");
        }
    }

    #[test]
    fn one_step_at_a_time() {
        let mut t = TurnMachine::new(1);
        assert!(t.enter());
        assert!(!t.enter());
        t.leave();
        assert!(t.enter());
    }

    #[test]
    fn awaited_once() {
        assert_eq!(TurnMachine::awaitable(Phase::Begin), Awaitable::Yes);
        assert_eq!(TurnMachine::awaitable(Phase::Done), Awaitable::Reused);
        for phase in [Phase::Waiting, Phase::Cancelling, Phase::Aborting] {
            assert_eq!(TurnMachine::awaitable(phase), Awaitable::Awaited);
        }
    }

    #[test]
    fn tasks_are_made_directly_only_where_the_loops_create_task_is_asyncios_own() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        let (yes, no) = (|| Ok::<bool, ()>(true), || Ok::<bool, ()>(false));
        assert_eq!(TurnMachine::tasks(true, yes, yes, no), Ok(Tasks::Direct));
        assert_eq!(TurnMachine::tasks(false, never, never, never), Ok(Tasks::CreateTask));
        assert_eq!(TurnMachine::tasks(true, no, never, never), Ok(Tasks::CreateTask));
        assert_eq!(TurnMachine::tasks(true, yes, no, never), Ok(Tasks::CreateTask));
        assert_eq!(TurnMachine::tasks(true, yes, yes, yes), Ok(Tasks::CreateTask));
        assert_eq!(TurnMachine::tasks(true, || Err(()), never, never), Err(()));
    }

    #[test]
    fn how_an_admitted_call_starts() {
        assert_eq!(TurnMachine::admitted(Admission::Body), Start::Body);
        assert_eq!(TurnMachine::admitted(Admission::Step { done: false }), Start::Drive);
        assert_eq!(TurnMachine::admitted(Admission::Step { done: true }), Start::Answer);
        assert_eq!(TurnMachine::admitted(Admission::Raised(Raised::Stop)), Start::Cancel);
        assert_eq!(
            TurnMachine::admitted(Admission::Raised(Raised::Cancelled)),
            Start::Fault
        );
        assert_eq!(TurnMachine::admitted(Admission::Raised(Raised::Other)), Start::Fault);
    }

    #[test]
    fn a_turn_answered_at_once_ends_at_once() {
        let mut t = TurnMachine::new(2);
        assert_eq!(t.started(), Waiting::Wait);
        t.answered();
        assert_eq!(t.started(), Waiting::Wait);
        t.answered();
        assert_eq!(t.started(), Waiting::Finish);
        assert_eq!(TurnMachine::new(0).started(), Waiting::Finish);
    }

    #[test]
    fn closing_in_each_phase() {
        let never = || -> bool { panic!("not asked") };
        for phase in [Phase::Begin, Phase::Done] {
            let mut t = TurnMachine::new(1);
            assert_eq!(t.closing(phase, never), Closing::Nothing);
            assert!(!t.cancelled());
        }
        let mut t = TurnMachine::new(1);
        assert_eq!(t.closing(Phase::Waiting, never), Closing::Calls { wait: false });
        assert!(t.cancelled());
        let mut t = TurnMachine::new(1);
        assert_eq!(t.closing(Phase::Cancelling, never), Closing::Calls { wait: true });
        assert!(t.cancelled());
        let mut t = TurnMachine::new(1);
        assert_eq!(t.closing(Phase::Aborting, || false), Closing::Aborts { task: false });
        assert_eq!(t.closing(Phase::Aborting, || true), Closing::Aborts { task: true });
        assert!(!t.cancelled()); // cancelled already when it aborts; closing changes nothing
    }

    #[test]
    fn a_cancelled_turn_waits_for_its_tasks_then_aborts_its_calls() {
        assert_eq!(TurnMachine::cancelling(0), Cancelling::Abort);
        assert_eq!(TurnMachine::cancelling(1), Cancelling::Wait);
        assert_eq!(TurnMachine::cancelling(1000), Cancelling::Wait);
        assert_eq!(TurnMachine::aborting(0, true), Aborting::End);
        assert_eq!(TurnMachine::aborting(2, false), Aborting::End);
        assert_eq!(TurnMachine::aborting(0, false), Aborting::End);
        assert_eq!(TurnMachine::aborting(2, true), Aborting::Abort);
    }

    #[test]
    fn a_stop_during_the_aborts_ends_the_turn() {
        let mut t = TurnMachine::new(2);
        t.cancel(Instant::now());
        assert!(!t.aborts_done(false));
        assert!(!t.has_stop());
        assert_eq!(t.ending(false), Ending::Cancelled);
        assert!(t.aborts_done(true));
        assert_eq!(t.ending(false), Ending::Stop);
        // a call's stop came first: it is the one kept
        let mut t = TurnMachine::new(2);
        assert!(t.stopped());
        assert!(!t.aborts_done(true));
        assert_eq!(t.ending(false), Ending::Stop);
    }

    #[test]
    fn later_steps_leave_a_relay_that_runs_in_the_bodys_context() {
        assert_eq!(TurnMachine::later_steps(true), Then::OwnTask);
        assert_eq!(TurnMachine::later_steps(false), Then::Drive);
    }

    #[test]
    fn a_call_fed_after_its_relay_closed_goes_on_in_a_task_of_its_own() {
        assert_eq!(TurnMachine::after_relay_closed(true), Then::Answer);
        assert_eq!(TurnMachine::after_relay_closed(false), Then::OwnTask);
    }

    #[test]
    fn a_task_of_a_closed_turn() {
        let never = || -> bool { panic!("not asked") };
        assert_eq!(TurnMachine::task_closed(Out::Returned, || false), TaskClosed::Cancel);
        assert_eq!(TurnMachine::task_closed(Out::Returned, || true), TaskClosed::Leave);
        assert_eq!(TurnMachine::task_closed(Out::Failed, || false), TaskClosed::Cancel);
        assert_eq!(TurnMachine::task_closed(Out::Failed, || true), TaskClosed::Leave);
        for out in [Out::Stop, Out::Cancelled, Out::Other] {
            assert_eq!(TurnMachine::task_closed(out, never), TaskClosed::Propagate);
        }
    }
}
