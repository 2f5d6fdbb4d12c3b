//! The decisions of an `Invoker.invoke_many` turn, sans-IO: the [`TurnMachine`] keeps what the
//! turn knows of its calls (how many are unanswered, whether the caller's cancellation or a stop
//! reached it, the one bound of its aborts) and says what each event means; the binding
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

/// The state of one turn's decisions (see the module).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnMachine {
    pending: usize,
    cancelled: bool,
    stop: bool,
    abort_until: Option<Instant>,
}

impl TurnMachine {
    /// A turn of `calls` calls, none answered.
    pub fn new(calls: usize) -> Self {
        TurnMachine {
            pending: calls,
            cancelled: false,
            stop: false,
            abort_until: None,
        }
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

    /// The caller's cancellation (or a stop) reached the turn, or it was closed.
    pub fn cancel(&mut self) {
        self.cancelled = true;
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

    /// A step of a body's clean-up past its deadline ended with `step` (`cancelled`: a
    /// cancellation of its task was thrown into it).
    pub fn clean_up(step: CleanUpStep, cancelled: bool) -> CleanUp {
        match step {
            CleanUpStep::Yielded if cancelled => CleanUp::Close,
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
        t.cancel();
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
        t.cancel();
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
        t.cancel();
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
        assert_eq!(Out::Cancelled.raised(), Raised::Cancelled);
        assert_eq!(Out::Failed.raised(), Raised::Other);
    }
}
