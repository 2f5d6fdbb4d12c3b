//! A tool body the binding calls on the caller's thread or awaits in the caller's task: what
//! becomes of each way it, or the code around it, ends. The binding reads what was raised by
//! its class ([`Thrown`]) and the state of the await, asks here, and performs the answer (raise,
//! fail the attempt, wait, step, close or abandon the body, time the call out).

use crate::cancel::Raised;

/// What was raised, by class (each an `isinstance` the binding read): the one classification
/// of what Python raised the core's decisions take ([`Thrown::raised`] is its coarse view, for
/// the decisions about host callbacks, a call's drive and a turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Thrown {
    /// An `Exception`.
    pub exception: bool,
    /// A `StopIteration` (an `Exception` too).
    pub stop_iteration: bool,
    /// A `KeyboardInterrupt` or a `SystemExit`: a request to stop the process.
    pub stop: bool,
    /// A `GeneratorExit`: what awaits the body is being closed.
    pub generator_exit: bool,
    /// An `asyncio.CancelledError`; also what the binding could not classify (the class of a
    /// cancellation could not be read): never swallowed for want of knowing, its caller is asked.
    pub cancelled: bool,
}

impl Thrown {
    /// The view of the decisions that tell only a stop, a cancellation and anything else apart
    /// (see [`Raised`]): a stop first (a class that is both is a stop), then a cancellation.
    #[inline]
    pub fn raised(self) -> Raised {
        if self.stop {
            Raised::Stop
        } else if self.cancelled {
            Raised::Cancelled
        } else {
            Raised::Other
        }
    }
}

/// The message of the `RuntimeError` a `StopIteration` becomes when it would leave a body or a
/// coroutine (whoever awaits it would read it as the value it returned).
pub const STOP_ITERATION_MESSAGE: &str = "coroutine raised StopIteration";

/// What the await of a body that has ended raises when it is stepped again with a value.
pub const REUSED_MESSAGE: &str = "cannot reuse already awaited body";

/// Where a body the core runs itself raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Calling a non-blocking sync body on the caller's thread.
    SyncBody,
    /// Calling an `async` body's function, or taking its first step.
    AsyncBody,
    /// The code around a body: its deadline's error, its output check, the start of its await.
    Around,
}

/// What becomes of what was raised there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The attempt failed with it.
    Fails,
    /// The attempt failed with a `RuntimeError` ([`STOP_ITERATION_MESSAGE`]) caused by it.
    FailsAsRuntimeError,
    /// The driver raises it: the call does not go on.
    Raised,
}

/// What becomes of `t`, raised at `stage`: a request to stop the process is raised; a body's
/// own `BaseException` is the body's failure, but around the body only an `Exception` is a
/// failure of the attempt; a sync body's `StopIteration` fails it as a `RuntimeError`.
pub fn disposition(stage: Stage, t: Thrown) -> Disposition {
    match stage {
        Stage::SyncBody if t.stop_iteration => Disposition::FailsAsRuntimeError,
        Stage::SyncBody | Stage::AsyncBody if t.stop => Disposition::Raised,
        Stage::SyncBody | Stage::AsyncBody => Disposition::Fails,
        Stage::Around if t.exception => Disposition::Fails,
        Stage::Around => Disposition::Raised,
    }
}

/// What a body's exception becomes on its way to the caller of its await: an `Exception`, or
/// a request to stop the process, as it is (false); any other `BaseException` wrapped (true:
/// `_runner.BodyFailed`), so that it is never read as the caller's own.
pub fn wrapped(t: Thrown) -> bool {
    !(t.exception || t.stop)
}

/// What leaves a coroutine of the core when `t` is raised inside it: a `StopIteration` that is
/// not its own return becomes a `RuntimeError` ([`STOP_ITERATION_MESSAGE`]) caused by it (true).
pub fn raised_inside(t: Thrown) -> bool {
    t.stop_iteration
}

/// How the await of a body ends once a step of the body ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// With the value the body returned.
    Value,
    /// With `ToolTimeoutError`: a value past the deadline is never a success.
    TimedOut,
    /// With what the body raised, as it is (the caller's own cancellation).
    AsRaised,
    /// With what the body raised, carried (see [`wrapped`]).
    Carried,
}

/// How the await ends when the body returned (`raised` None) or raised: a return past the
/// deadline (`past`, asked only then) is a timeout, by the rule of
/// [`crate::deadline::taken_timed_out`]; a cancellation the caller's (`callers`, asked only for
/// a cancellation) propagates as it is; anything else the body raised is carried.
pub fn ending<E>(
    raised: Option<Thrown>,
    past: impl FnOnce() -> Result<bool, E>,
    callers: impl FnOnce() -> Result<bool, E>,
) -> Result<Ending, E> {
    Ok(match raised {
        None if crate::deadline::taken_timed_out(true, past)? => Ending::TimedOut,
        None => Ending::Value,
        Some(t) if t.cancelled && callers()? => Ending::AsRaised,
        Some(_) => Ending::Carried,
    })
}

/// What the await does when the body yielded: it waits on it, unless the body is a clean-up's
/// (`clean_up`, driven in a task of its own past the deadline) that swallowed its task's
/// cancellation just thrown into it (`callers`): it is closed then (true).
pub fn closes_after_yield(clean_up: bool, callers: bool) -> bool {
    clean_up && callers
}

/// How the await of a body ends with `raised` (None: its value), once it left its deadline: a
/// clean-up's outcome is dropped (true), but a request to stop the process or the close of
/// what awaits it, which propagate.
pub fn dropped(clean_up: bool, raised: Option<Thrown>) -> bool {
    clean_up && !raised.is_some_and(|t| t.stop || t.generator_exit)
}

/// What the call's outcome is when a body thrown its deadline's cancellation (a turn's call, in
/// a task of its own) raised `t` there: the deadline's (true), but a request to stop the
/// process, which propagates.
#[inline]
pub fn deadline_outcome(t: Thrown) -> bool {
    !t.stop
}

/// What closing (or cancelling) a body raised (None: nothing) that propagates: a request to stop
/// the process; anything else its clean-up raised is dropped. A body abandoned with no loop
/// left to run its clean-up on is closed instead (`no_loop`): then any `BaseException` that is
/// not an `Exception` propagates.
pub fn close_propagates(raised: Option<Thrown>, no_loop: bool) -> bool {
    match raised {
        Some(t) if no_loop => !t.exception,
        Some(t) => t.stop,
        None => false,
    }
}

/// What the await does with a cancellation of the caller's task thrown into it (see
/// `cancel::thrown_is_callers`) while the body waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallersCancel {
    /// Cancel the future the body waits on (as a task does) and wait on it again: the body sees
    /// the cancellation once that future has ended.
    CancelAndWait,
    /// The deadline expired: abandon the body (cancel the future it waits on first,
    /// `cancel_wait`), and end the await with the cancellation.
    Abandon { cancel_wait: bool },
    /// Throw the cancellation into the body now.
    Throw,
}

impl CallersCancel {
    /// Whether the future the body waits on is cancelled first (as a task does with the future
    /// it awaits).
    #[inline]
    pub fn cancels_wait(self) -> bool {
        matches!(
            self,
            CallersCancel::CancelAndWait | CallersCancel::Abandon { cancel_wait: true }
        )
    }
}

/// [`CallersCancel`] of a body whose task waits on a plain future in its place (`wrapped`: it
/// waits on another task or a gathering future) that has not ended (`pending`, asked only
/// then), the deadline `expired` or not.
pub fn callers_cancel<E>(
    wrapped: bool,
    pending: impl FnOnce() -> Result<bool, E>,
    expired: bool,
) -> Result<CallersCancel, E> {
    let cancel_wait = wrapped && pending()?;
    Ok(if expired {
        CallersCancel::Abandon { cancel_wait }
    } else if cancel_wait {
        CallersCancel::CancelAndWait
    } else {
        CallersCancel::Throw
    })
}

/// What the await of a suspended body does with what is thrown into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrownIn {
    /// A `GeneratorExit`: what awaits it is being closed; the await is closed (see
    /// [`Await::close`]), then that is raised.
    Close,
    /// A cancellation: the caller's own, or one the body caused (see
    /// `cancel::thrown_is_callers`), then [`callers_cancel`].
    Cancellation,
    /// Anything else: thrown into the body.
    Throw,
}

/// [`ThrownIn`] of what was thrown: a `GeneratorExit` (`generator_exit`), or a cancellation
/// (`cancelled`, asked only otherwise), or anything else.
#[inline]
pub fn thrown_in<E>(generator_exit: bool, cancelled: impl FnOnce() -> Result<bool, E>) -> Result<ThrownIn, E> {
    Ok(if generator_exit {
        ThrownIn::Close
    } else if cancelled()? {
        ThrownIn::Cancellation
    } else {
        ThrownIn::Throw
    })
}

/// Where the await of a body is, as a step of it reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Await {
    /// Not started: the body's first step is taken when the caller first awaits.
    Fresh,
    /// The body suspended: `entered`, the caller awaited it already; `clean_up`, a task of its
    /// own drives an abandoned body's clean-up (its outcome dropped).
    Waiting { entered: bool, clean_up: bool },
    /// It has ended.
    Done,
}

/// What a step of the await does, sent a value or thrown an exception (the binding performs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Take the body's first step (the caller's first await).
    Start,
    /// Close the body, never started, and raise what was thrown in (see [`raised_inside`]).
    CloseUnstarted,
    /// A clean-up's task was cancelled before its first step: close the body (what propagates
    /// of that: [`close_propagates`], a loop running); the clean-up ends.
    CloseCleanUp,
    /// The caller's first await: enter (see [`entry`]), then wait on what the body's first step
    /// yielded.
    EnterAndWait,
    /// The caller's first await, thrown into: enter, then step the body as at a later step.
    EnterAndStep,
    /// Step the body with what was sent or thrown.
    Step,
    /// Ended and sent a value: a `RuntimeError` ([`REUSED_MESSAGE`]).
    Reused,
    /// Ended and thrown into: raise it (see [`raised_inside`]).
    Raise,
}

impl Await {
    /// What a step does in this state, `throw`n into or sent a value.
    #[inline]
    pub fn resume(self, throw: bool) -> Resume {
        match (self, throw) {
            (Await::Fresh, false) => Resume::Start,
            (Await::Fresh, true) => Resume::CloseUnstarted,
            (
                Await::Waiting {
                    entered: false,
                    clean_up: true,
                },
                true,
            ) => Resume::CloseCleanUp,
            (Await::Waiting { entered: false, .. }, false) => Resume::EnterAndWait,
            (Await::Waiting { entered: false, .. }, true) => Resume::EnterAndStep,
            (Await::Waiting { .. }, _) => Resume::Step,
            (Await::Done, false) => Resume::Reused,
            (Await::Done, true) => Resume::Raise,
        }
    }
}

/// What the caller's first await of a suspended body enters, once it read its task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Entry {
    /// Nothing more: a clean-up's task (no deadline; its loop's holder does not watch it).
    Counted,
    /// Watched by its loop's holder (a loop closed with the await pending abandons the body);
    /// no deadline.
    Watched,
    /// Watched, and the deadline `end` entered for the awaiting task, if there is one.
    Deadline(f64),
    /// Watched, but the body's first step (taken before the caller first awaits) blocked up to or
    /// past its deadline: the future it waits on is cancelled, the body abandoned, and the call
    /// times out at once.
    BlockedPast,
}

/// [`Entry`] of a `clean_up`'s await or a call's, its deadline `end` (None: none), the clock
/// read (`now`) only for a call's with a deadline.
#[inline]
pub fn entry<E>(clean_up: bool, end: Option<f64>, now: impl FnOnce() -> Result<f64, E>) -> Result<Entry, E> {
    Ok(match end {
        _ if clean_up => Entry::Counted,
        None => Entry::Watched,
        Some(end) if now()? >= end => Entry::BlockedPast,
        Some(end) => Entry::Deadline(end),
    })
}

/// What a task waits on for what a body yielded: a plain future in its place (true) only for
/// a future (`is_future`) that is not exactly an `asyncio.Future`: another task or a gathering
/// future (cancelling the caller then never waits for that task's own clean-up). A clean-up's
/// task (`clean_up`: no caller waits on it, its outcome is dropped) waits on what was yielded as
/// it is.
#[inline]
pub fn waits_through_plain_future<E>(
    clean_up: bool,
    is_none: bool,
    exact_future: bool,
    is_future: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    Ok(!clean_up && !is_none && !exact_future && is_future()?)
}

/// What becomes of the value a body the core runs returned: past its deadline (`limit`,
/// `elapsed_s` read only under one) a timeout, whatever it returned; else its result is checked
/// ([`check`]), with the end of its deadline (`end`) for a result that may still be awaitable
/// under a limit (`plain`, asked only then: a plain value never is), which settles within what is
/// left of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returned {
    /// The attempt failed with `ToolTimeoutError`.
    TimedOut,
    /// The result is checked; `end`: the deadline's end is read for it.
    Checked { end: bool },
}

/// See [`Returned`].
#[inline]
pub fn returned(limit: Option<f64>, elapsed_s: impl FnOnce() -> f64, plain: impl FnOnce() -> bool) -> Returned {
    if crate::deadline::overran(limit, elapsed_s) {
        return Returned::TimedOut;
    }
    Returned::Checked {
        end: limit.is_some() && !plain(),
    }
}

/// How a body's result is checked, as `_runner.checked` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// An awaitable result: the driver settles it (a `_runner.Later`), within what is left of
    /// the deadline, and the settled value is checked then.
    Settle,
    /// No check to make (no output schema, the output check the tool's class's own): the value
    /// as it is, dated when the body returned (nothing but the core's own work ran since).
    AsIs,
    /// Checked against the output schema (the tool's output check): the value it answers, dated
    /// when that check returned.
    Checked,
}

/// How a result is checked: one that is no plain value (`plain` false) and is awaitable
/// (`awaitable`, asked only then) is settled; else it is taken as it is when the tool's output
/// check would return it as it is (`as_is`), checked otherwise. What asking raises fails the
/// attempt as raised around the body ([`Stage::Around`]).
#[inline]
pub fn check<E>(
    plain: bool,
    awaitable: impl FnOnce() -> Result<bool, E>,
    as_is: impl FnOnce() -> Result<bool, E>,
) -> Result<Check, E> {
    if !plain && awaitable()? {
        return Ok(Check::Settle);
    }
    Ok(if as_is()? { Check::AsIs } else { Check::Checked })
}

/// What closing the await of a body does, by where the await is ([`Await::close`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    /// Never started: the body is closed (what that raises propagates).
    CloseUnstarted,
    /// A clean-up's await: the body is closed, what that raised propagating as
    /// [`close_propagates`] says (a loop running).
    CloseCleanUp,
    /// A call's await: the body is abandoned (cancelled; its clean-up goes on in a task of its
    /// own, or it is closed when no loop is left), then its deadline left.
    Abandon,
    /// It has ended: nothing to close.
    Nothing,
}

impl Await {
    /// What closing the await (what awaits it is closed) does in this state.
    #[inline]
    pub fn close(self) -> Closing {
        match self {
            Await::Fresh => Closing::CloseUnstarted,
            Await::Waiting { clean_up: true, .. } => Closing::CloseCleanUp,
            Await::Waiting { clean_up: false, .. } => Closing::Abandon,
            Await::Done => Closing::Nothing,
        }
    }
}

/// The relay of a turn's call (the coroutine of the call's task): where it is, with what the
/// binding holds in each state (`B`: the body being stepped; `D`: a drive not stepped yet; `T`:
/// a drive being stepped; `C`: a body's clean-up past its deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relay<B, D, T, C> {
    /// The body has not started yet.
    Start,
    Body(B),
    /// A drive not stepped yet (a task that starts with it).
    Pending(D),
    /// The call goes on in its drive (or is aborted).
    Then(T),
    /// A body's clean-up past its deadline, its outcome dropped.
    CleanUp(C),
    Done,
}

/// What a step of a relay does ([`Relay::resume`]), the state it steps handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayStep<B, D, T, C> {
    /// Start the body within its deadline and take its first step.
    Start,
    /// Cancelled (or thrown into) before the body started: the call ends as a body that raised
    /// what was thrown in at once.
    EndsAsRaised,
    /// Step the body with what was sent or thrown.
    Body(B),
    /// The drive's first step, with what was sent.
    FirstDrive(D),
    /// Step the drive with what was sent or thrown.
    Drive(T),
    /// Step the clean-up with what was sent or thrown.
    CleanUp(C),
    /// Raise what was thrown in as it is (see [`raised_inside`]): a drive thrown into before its
    /// first step (the call left to the turn), or a relay that has ended.
    RaiseAsIs,
    /// Ended and sent a value: a `RuntimeError` ([`RELAY_REUSED_MESSAGE`]).
    Reused,
}

/// What a task that awaits itself is thrown (`RuntimeError`, the task's repr after it), as
/// asyncio words it.
pub const AWAITS_ITSELF: &str = "Task cannot await on itself: ";

/// Whether what a relay's body yielded is the task the relay runs as (`itself`, asked only for
/// what is neither None nor a plain future: `plain`): the body then gets [`AWAITS_ITSELF`] at
/// once, as asyncio's task gives it, instead of waiting for itself until its deadline.
#[inline]
pub fn awaits_itself<E>(plain: bool, itself: impl FnOnce() -> Result<bool, E>) -> Result<bool, E> {
    Ok(!plain && itself()?)
}

/// What a relay that has ended raises when it is stepped again with a value.
pub const RELAY_REUSED_MESSAGE: &str = "cannot reuse already awaited relay";

impl<B, D, T, C> Relay<B, D, T, C> {
    /// What a step does in this state, `throw`n into or sent a value.
    #[inline(always)]
    pub fn resume(self, throw: bool) -> RelayStep<B, D, T, C> {
        match (self, throw) {
            (Relay::Start, false) => RelayStep::Start,
            (Relay::Start, true) => RelayStep::EndsAsRaised,
            (Relay::Body(b), _) => RelayStep::Body(b),
            (Relay::Pending(d), false) => RelayStep::FirstDrive(d),
            (Relay::Pending(_), true) => RelayStep::RaiseAsIs,
            (Relay::Then(t), _) => RelayStep::Drive(t),
            (Relay::CleanUp(c), _) => RelayStep::CleanUp(c),
            (Relay::Done, false) => RelayStep::Reused,
            (Relay::Done, true) => RelayStep::RaiseAsIs,
        }
    }
}

/// How a relay's step of a body came out (see [`relay_step`]; `V`: a value, `E`: what it raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyStep<V, E> {
    /// It returned (a `StopIteration` it raised at the step is its return).
    Returned(V),
    /// It yielded.
    Yielded(V),
    /// It raised something else.
    Raised(E),
}

/// What a relay does once a step of its body came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayStepEnd<V, E> {
    /// The body ended with its value (checked for its deadline when the call finishes).
    Value(V),
    /// Wait on what it yielded.
    Wait(V),
    /// Cancelled at its deadline and its clean-up suspended (it yielded this): that clean-up goes
    /// on in a task of its own (its outcome dropped) and the call ends at once with the
    /// deadline's cancellation.
    CleanUpApart(V),
    /// The call ends with the deadline's cancellation (`timeout`), whatever the body raised.
    DeadlineOutcome,
    /// The call ends with what the body raised.
    AsRaised(E),
}

/// [`RelayStepEnd`] of a step that came out as `out`: `at_deadline`, the step threw the
/// deadline's cancellation (see [`at_deadline`]); `raised` classifies what it raised (asked only
/// when that decides: at the deadline, only a request to stop the process is not the deadline's
/// outcome, [`deadline_outcome`]).
#[inline]
pub fn relay_step<V, E>(
    out: BodyStep<V, E>,
    at_deadline: bool,
    raised: impl FnOnce(&E) -> Thrown,
) -> RelayStepEnd<V, E> {
    match out {
        BodyStep::Returned(v) => RelayStepEnd::Value(v),
        BodyStep::Yielded(y) if at_deadline => RelayStepEnd::CleanUpApart(y),
        BodyStep::Yielded(y) => RelayStepEnd::Wait(y),
        BodyStep::Raised(e) if at_deadline && deadline_outcome(raised(&e)) => RelayStepEnd::DeadlineOutcome,
        BodyStep::Raised(e) => RelayStepEnd::AsRaised(e),
    }
}

/// Whether a relay's step threw its body the deadline's cancellation: something was thrown
/// (`thrown`), the deadline has expired (`expired`, asked only then) and what was thrown is a
/// cancellation (`cancelled`, asked only then).
#[inline]
pub fn at_deadline<E>(
    thrown: bool,
    expired: impl FnOnce() -> bool,
    cancelled: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    Ok(thrown && expired() && cancelled()?)
}

/// What closing a relay's body raises when the relay itself is closed (its task's loop was
/// closed, or something closed it): what the body's close raised (`closed`), but the
/// `RuntimeError` (`runtime_error`) of a body that awaited while closed, which is dropped;
/// else what leaving its deadline raised (`left`); else nothing.
#[inline]
pub fn relay_closed_raises<E>(
    left: Result<(), E>,
    closed: Result<(), E>,
    runtime_error: impl FnOnce(&E) -> bool,
) -> Option<E> {
    match closed {
        Err(e) if !runtime_error(&e) => Some(e),
        _ => left.err(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXC: Thrown = Thrown {
        exception: true,
        stop_iteration: false,
        stop: false,
        generator_exit: false,
        cancelled: false,
    };
    const STOP_ITER: Thrown = Thrown {
        stop_iteration: true,
        ..EXC
    };
    const STOP: Thrown = Thrown {
        exception: false,
        stop: true,
        ..EXC
    };
    const CANCELLED: Thrown = Thrown {
        exception: false,
        cancelled: true,
        ..EXC
    };
    const EXIT: Thrown = Thrown {
        exception: false,
        generator_exit: true,
        ..EXC
    };
    const BASE: Thrown = Thrown {
        exception: false,
        ..EXC
    };

    #[test]
    fn one_classification_its_coarse_view_for_callbacks_drives_and_turns() {
        use Raised::*;
        assert_eq!(
            [EXC, STOP_ITER, STOP, CANCELLED, EXIT, BASE].map(Thrown::raised),
            [Other, Other, Stop, Cancelled, Other, Other]
        );
        // a stop that is a cancellation too is a stop
        assert_eq!(
            Thrown {
                cancelled: true,
                ..STOP
            }
            .raised(),
            Stop
        );
        // the same classification, read by the body's decisions and by a drive's
        assert!(CANCELLED.raised().propagates(|| true));
        assert_eq!(
            ending(Some(CANCELLED), || Ok::<_, ()>(false), || Ok(true)),
            Ok(Ending::AsRaised)
        );
        assert!(!BASE.raised().propagates(|| true));
        assert!(wrapped(BASE));
    }

    #[test]
    fn what_a_body_the_core_runs_raised_fails_the_attempt_or_is_raised() {
        use Disposition::*;
        let all = [EXC, STOP_ITER, STOP, CANCELLED, EXIT, BASE];
        let of = |stage| all.map(|t| disposition(stage, t));
        assert_eq!(
            of(Stage::SyncBody),
            [Fails, FailsAsRuntimeError, Raised, Fails, Fails, Fails]
        );
        assert_eq!(of(Stage::AsyncBody), [Fails, Fails, Raised, Fails, Fails, Fails]);
        assert_eq!(of(Stage::Around), [Fails, Fails, Raised, Raised, Raised, Raised]);
    }

    #[test]
    fn only_a_bodys_own_base_exception_is_wrapped() {
        assert_eq!(
            [EXC, STOP_ITER, STOP, CANCELLED, EXIT, BASE].map(wrapped),
            [false, false, false, true, true, true]
        );
        assert!(raised_inside(STOP_ITER));
        assert!(!raised_inside(EXC));
    }

    #[test]
    fn an_await_ends_with_the_value_a_timeout_or_what_was_raised() {
        let yes = || Ok::<_, ()>(true);
        let no = || Ok::<_, ()>(false);
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(ending(None, no, never), Ok(Ending::Value));
        assert_eq!(ending(None, yes, never), Ok(Ending::TimedOut));
        assert_eq!(ending(Some(CANCELLED), never, yes), Ok(Ending::AsRaised));
        assert_eq!(ending(Some(CANCELLED), never, no), Ok(Ending::Carried));
        assert_eq!(ending(Some(EXC), never, never), Ok(Ending::Carried));
        assert_eq!(ending(None, || Err(()), never), Err(()));
    }

    #[test]
    fn a_clean_up_drops_its_outcome_but_a_stop() {
        assert!(!dropped(false, None));
        assert!(!dropped(false, Some(EXC)));
        assert!(dropped(true, None));
        assert!(dropped(true, Some(EXC)));
        assert!(dropped(true, Some(CANCELLED)));
        assert!(!dropped(true, Some(STOP)));
        assert!(!dropped(true, Some(EXIT)));
        assert!(closes_after_yield(true, true));
        assert!(!closes_after_yield(true, false));
        assert!(!closes_after_yield(false, true));
    }

    #[test]
    fn at_its_deadline_what_a_body_raised_is_the_deadlines_outcome_but_a_stop() {
        assert_eq!(
            [EXC, STOP_ITER, STOP, CANCELLED, EXIT, BASE].map(deadline_outcome),
            [true, true, false, true, true, true]
        );
    }

    #[test]
    fn closing_a_body_lets_only_a_stop_through() {
        assert!(!close_propagates(None, false));
        assert!(close_propagates(Some(STOP), false));
        assert!(!close_propagates(Some(BASE), false));
        assert!(!close_propagates(Some(EXC), false));
        // closed in place of an abandon: any BaseException that is not an Exception
        assert!(close_propagates(Some(BASE), true));
        assert!(!close_propagates(Some(EXC), true));
    }

    #[test]
    fn the_callers_cancellation_waits_for_the_wrapped_future_unless_the_deadline_expired() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(callers_cancel(false, never, false), Ok(CallersCancel::Throw));
        assert_eq!(
            callers_cancel(false, never, true),
            Ok(CallersCancel::Abandon { cancel_wait: false })
        );
        assert_eq!(
            callers_cancel(true, || Ok::<_, ()>(true), false),
            Ok(CallersCancel::CancelAndWait)
        );
        assert_eq!(
            callers_cancel(true, || Ok::<_, ()>(true), true),
            Ok(CallersCancel::Abandon { cancel_wait: true })
        );
        assert_eq!(
            callers_cancel(true, || Ok::<_, ()>(false), false),
            Ok(CallersCancel::Throw)
        );
        use CallersCancel::*;
        assert_eq!(
            [
                CancelAndWait,
                Abandon { cancel_wait: true },
                Abandon { cancel_wait: false },
                Throw
            ]
            .map(CallersCancel::cancels_wait),
            [true, true, false, false]
        );
    }

    #[test]
    fn a_step_of_the_await_by_its_state() {
        use Resume::*;
        let waiting = |entered, clean_up| Await::Waiting { entered, clean_up };
        let both = |a: Await| [a.resume(false), a.resume(true)];
        assert_eq!(both(Await::Fresh), [Start, CloseUnstarted]);
        assert_eq!(both(waiting(false, false)), [EnterAndWait, EnterAndStep]);
        assert_eq!(both(waiting(false, true)), [EnterAndWait, CloseCleanUp]);
        assert_eq!(both(waiting(true, false)), [Step, Step]);
        assert_eq!(both(waiting(true, true)), [Step, Step]);
        assert_eq!(both(Await::Done), [Reused, Raise]);
    }

    #[test]
    fn the_first_await_enters_the_deadline_unless_blocked_up_to_its_end() {
        let never = || -> Result<f64, ()> { panic!("not asked") };
        let at = |t: f64| move || Ok::<_, ()>(t);
        assert_eq!(entry(true, Some(10.0), never), Ok(Entry::Counted));
        assert_eq!(entry(true, None, never), Ok(Entry::Counted));
        assert_eq!(entry(false, None, never), Ok(Entry::Watched));
        assert_eq!(entry(false, Some(10.0), at(9.5)), Ok(Entry::Deadline(10.0)));
        assert_eq!(entry(false, Some(10.0), at(10.0)), Ok(Entry::BlockedPast));
        assert_eq!(entry(false, Some(10.0), at(10.5)), Ok(Entry::BlockedPast));
        assert_eq!(entry(false, Some(10.0), || Err(())), Err(()));
    }

    #[test]
    fn a_value_past_its_deadline_times_out_and_only_a_value_that_may_be_awaitable_reads_its_end() {
        let never = || -> f64 { panic!("not asked") };
        let never_plain = || -> bool { panic!("not asked") };
        assert_eq!(returned(None, never, never_plain), Returned::Checked { end: false });
        assert_eq!(returned(Some(1.0), || 1.5, never_plain), Returned::TimedOut);
        assert_eq!(returned(Some(1.0), || 1.0, || true), Returned::Checked { end: false });
        assert_eq!(returned(Some(1.0), || 0.5, || false), Returned::Checked { end: true });
    }

    #[test]
    fn a_result_is_settled_taken_as_it_is_or_checked() {
        let yes = || Ok::<_, &str>(true);
        let no = || Ok::<_, &str>(false);
        let never = || -> Result<bool, &str> { panic!("not asked") };
        assert_eq!(check(false, yes, never), Ok(Check::Settle));
        assert_eq!(check(false, no, yes), Ok(Check::AsIs));
        assert_eq!(check(false, no, no), Ok(Check::Checked));
        // A plain value is never awaitable: not asked.
        assert_eq!(check(true, never, yes), Ok(Check::AsIs));
        assert_eq!(check(true, never, no), Ok(Check::Checked));
        assert_eq!(check(false, || Err("isawaitable"), never), Err("isawaitable"));
        assert_eq!(check(true, never, || Err("_output")), Err("_output"));
    }

    #[test]
    fn only_another_tasks_future_is_waited_through_a_plain_one_and_never_by_a_clean_up() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(waits_through_plain_future(false, true, false, never), Ok(false));
        assert_eq!(waits_through_plain_future(false, false, true, never), Ok(false));
        assert_eq!(
            waits_through_plain_future(false, false, false, || Ok::<_, ()>(true)),
            Ok(true)
        );
        assert_eq!(
            waits_through_plain_future(false, false, false, || Ok::<_, ()>(false)),
            Ok(false)
        );
        assert_eq!(waits_through_plain_future(true, false, false, never), Ok(false));
        assert_eq!(waits_through_plain_future(false, false, false, || Err(())), Err(()));
    }

    #[test]
    fn what_is_thrown_into_a_suspended_await_closes_it_is_a_cancellation_or_goes_to_the_body() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(thrown_in(true, never), Ok(ThrownIn::Close));
        assert_eq!(thrown_in(false, || Ok::<_, ()>(true)), Ok(ThrownIn::Cancellation));
        assert_eq!(thrown_in(false, || Ok::<_, ()>(false)), Ok(ThrownIn::Throw));
        assert_eq!(thrown_in(false, || Err("isinstance")), Err("isinstance"));
    }

    #[test]
    fn closing_an_await_closes_a_fresh_body_or_a_clean_up_and_abandons_a_calls() {
        let waiting = |entered, clean_up| Await::Waiting { entered, clean_up };
        assert_eq!(Await::Fresh.close(), Closing::CloseUnstarted);
        assert_eq!(waiting(false, true).close(), Closing::CloseCleanUp);
        assert_eq!(waiting(true, true).close(), Closing::CloseCleanUp);
        assert_eq!(waiting(false, false).close(), Closing::Abandon);
        assert_eq!(waiting(true, false).close(), Closing::Abandon);
        assert_eq!(Await::Done.close(), Closing::Nothing);
    }

    #[test]
    fn a_step_of_a_relay_by_its_state() {
        type R = Relay<u8, u16, u32, u64>;
        use RelayStep as S;
        let both = |r: fn() -> R| [r().resume(false), r().resume(true)];
        assert_eq!(both(|| R::Start), [S::Start, S::EndsAsRaised]);
        assert_eq!(both(|| R::Body(1)), [S::Body(1), S::Body(1)]);
        assert_eq!(both(|| R::Pending(2)), [S::FirstDrive(2), S::RaiseAsIs]);
        assert_eq!(both(|| R::Then(3)), [S::Drive(3), S::Drive(3)]);
        assert_eq!(both(|| R::CleanUp(4)), [S::CleanUp(4), S::CleanUp(4)]);
        assert_eq!(both(|| R::Done), [S::Reused, S::RaiseAsIs]);
    }

    #[test]
    fn a_relays_body_step_at_its_deadline_ends_with_the_deadline_but_a_stop() {
        use RelayStepEnd::*;
        type Step = BodyStep<u8, Thrown>;
        let never = |_: &Thrown| -> Thrown { panic!("not asked") };
        assert_eq!(relay_step(Step::Returned(1), false, never), Value(1));
        // a value past the deadline: the call's finish times it out
        assert_eq!(relay_step(Step::Returned(1), true, never), Value(1));
        assert_eq!(relay_step(Step::Yielded(2), false, never), Wait(2));
        assert_eq!(relay_step(Step::Yielded(2), true, never), CleanUpApart(2));
        assert_eq!(relay_step(Step::Raised(EXC), false, never), AsRaised(EXC));
        assert_eq!(
            [EXC, STOP_ITER, STOP, CANCELLED, EXIT, BASE].map(|t| relay_step(Step::Raised(t), true, |t| *t)),
            [
                DeadlineOutcome,
                DeadlineOutcome,
                AsRaised(STOP),
                DeadlineOutcome,
                DeadlineOutcome,
                DeadlineOutcome
            ]
        );
    }

    #[test]
    fn only_a_cancellation_thrown_past_the_deadline_is_the_deadlines() {
        let never_b = || -> bool { panic!("not asked") };
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(at_deadline(false, never_b, never), Ok(false));
        assert_eq!(at_deadline(true, || false, never), Ok(false));
        assert_eq!(at_deadline(true, || true, || Ok::<_, ()>(false)), Ok(false));
        assert_eq!(at_deadline(true, || true, || Ok::<_, ()>(true)), Ok(true));
        assert_eq!(
            at_deadline(true, || true, || Err::<bool, _>("isinstance")),
            Err("isinstance")
        );
    }

    #[test]
    fn a_closed_relays_body_raises_what_its_close_raised_but_a_runtime_error() {
        let rt = |e: &&str| *e == "RuntimeError";
        assert_eq!(relay_closed_raises::<&str>(Ok(()), Ok(()), rt), None);
        assert_eq!(relay_closed_raises(Ok(()), Err("ValueError"), rt), Some("ValueError"));
        assert_eq!(relay_closed_raises(Ok(()), Err("RuntimeError"), rt), None);
        assert_eq!(relay_closed_raises(Err("leave"), Ok(()), rt), Some("leave"));
        assert_eq!(
            relay_closed_raises(Err("leave"), Err("RuntimeError"), rt),
            Some("leave")
        );
        // what the close raised wins over what leaving the deadline raised
        assert_eq!(
            relay_closed_raises(Err("leave"), Err("KeyboardInterrupt"), rt),
            Some("KeyboardInterrupt")
        );
    }

    #[test]
    fn a_body_that_awaits_its_own_task_is_told_so_and_a_plain_future_is_never_asked_about() {
        assert_eq!(
            awaits_itself(true, || -> Result<bool, ()> { panic!("asked") }),
            Ok(false)
        );
        assert_eq!(awaits_itself(false, || Ok::<_, ()>(true)), Ok(true));
        assert_eq!(awaits_itself(false, || Ok::<_, ()>(false)), Ok(false));
        assert_eq!(
            awaits_itself(false, || Err::<bool, _>("current_task")),
            Err("current_task")
        );
        assert_eq!(AWAITS_ITSELF, "Task cannot await on itself: ");
    }
}
