//! What the driver of a call decides about the steps it performs for the pipeline
//! (`crate::pipeline`), with no Python in sight: what a body's outcome is fed as ([`body_end`]),
//! what an approver's answer means ([`approval`]), which answers a store keeps its promise with
//! ([`StoreAsked::promised`]), who counts a call's attempts ([`Segment`]), how an abort goes on
//! after each of its steps ([`after_abort_step`]) and how a drive ends ([`ending`]); and the
//! words it logs.
//!
//! The binding classifies what Python raised into a [`Raised`] (see `crate::cancel`) and what a
//! callback answered into the plain facts each decision takes, asks here, then performs.
use crate::cancel::Raised;

/// What a body's outcome is fed to the call as (`V`: a value, `E`: what was raised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyEnd<V, E> {
    /// The value, checked against the output schema here first (an `async` body's, a worker's).
    Check(V),
    /// The awaitable value, settled first within what is left of the deadline.
    Settle(V),
    /// The value as it is (checked already).
    Ok(V),
    /// A failure of the body: it raised an `Exception` (a `BaseException` the body raised itself
    /// comes wrapped in one).
    Failed(E),
    /// A fault of the call, not of the tool (anything else: a stop, the caller's cancellation):
    /// the call is aborted.
    Fault(E),
}

/// What the outcome `out` of a body's step is fed as. `check`: a value it returns is checked
/// here (an `async` body's, a worker's), else it was checked already (an inline body's, a
/// settled `Later`'s), and only such a value may be awaitable (`awaitable`, asked only then);
/// `exception`: whether what it raised is an `Exception`.
#[inline]
pub fn body_end<V, E>(
    out: Result<V, E>,
    check: bool,
    awaitable: impl FnOnce(&V) -> bool,
    exception: impl FnOnce(&E) -> bool,
) -> BodyEnd<V, E> {
    match out {
        Ok(v) if check => BodyEnd::Check(v),
        Ok(v) if awaitable(&v) => BodyEnd::Settle(v),
        Ok(v) => BodyEnd::Ok(v),
        Err(e) if exception(&e) => BodyEnd::Failed(e),
        Err(e) => BodyEnd::Fault(e),
    }
}

/// What an approver's answer means for the call (`E`: what it raised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval<E> {
    Approved,
    Refused,
    /// The approver failed: the call is refused and the failure logged ([`APPROVER_FAILED`]).
    Failed(E),
    /// What the approver raised propagates (see [`Raised::propagates`]).
    Propagates(E),
}

impl<E> Approval<E> {
    /// Whether the call goes on approved (a failed approver refuses it).
    pub fn approved(&self) -> bool {
        matches!(self, Approval::Approved)
    }
}

/// Whether an answer approves (an approver's, or the `"approved"` key of a call): only the
/// boolean `True` itself (`answer`: the answer when it is a `bool`, None when it is anything
/// else). A truthy "no" (`1`, `"yes"`, a non-empty object) must not fail open.
#[inline]
pub fn approves(answer: Option<bool>) -> bool {
    answer == Some(true)
}

/// What the approver answered: what it returned (as a `bool` when it is one, see [`approves`]),
/// else what it raised, classified; `callers`: whether a cancellation it raised is the caller's
/// (asked only then).
#[inline]
pub fn approval<E>(answer: Result<Option<bool>, (Raised, E)>, callers: impl FnOnce() -> bool) -> Approval<E> {
    match answer {
        Ok(a) if approves(a) => Approval::Approved,
        Ok(_) => Approval::Refused,
        Err((raised, e)) if raised.propagates(callers) => Approval::Propagates(e),
        Err((_, e)) => Approval::Failed(e),
    }
}

/// A store call whose answer the call goes on with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreAsked {
    Get,
    CompareAndSet,
}

/// A store's answer, as the binding sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    None,
    Str,
    Bool,
    Other,
}

impl StoreAsked {
    /// Whether `answer` is what the store port promises: `get`, a str or None; `compare_and_set`,
    /// a bool. Anything else is a failing store (logged, the call goes on without sharing): a
    /// `None` read as "not written" would claim again forever.
    #[inline]
    pub fn promised(self, answer: Answer) -> bool {
        match self {
            StoreAsked::Get => matches!(answer, Answer::None | Answer::Str),
            StoreAsked::CompareAndSet => answer == Answer::Bool,
        }
    }

    /// Why the store's answer, a `got`, cannot be used.
    pub fn broken_message(self, got: &str) -> String {
        match self {
            StoreAsked::Get => {
                format!("store.get returned {got}, expected str or None; fix the StorePort implementation")
            }
            StoreAsked::CompareAndSet => crate::memory::engine::cas_not_bool_message(got),
        }
    }
}

/// Where a drive sits in a chain of `Invoker` with user middleware between pipeline segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// The whole pipeline, no user middleware (`Invoker.invoke` of built-in rules, a turn's call).
    Whole,
    /// The segment a user middleware passed the call's `ToolCall` on to, the body next: it counts
    /// each attempt of the body on the `ToolCall`, and an attempt with no limit of its own has
    /// the `ToolCall`'s `timeout_s` (a user middleware may have set it).
    Last,
    /// A segment a user middleware follows: its body step calls that middleware; the call's
    /// attempts are what the `ToolCall` counts.
    Before,
}

impl Segment {
    /// The segment of a drive given a `ToolCall` (`tool_call`) and a handler after it (`next`).
    #[inline]
    pub fn of(tool_call: bool, next: bool) -> Segment {
        match (tool_call, next) {
            (true, true) => Segment::Before,
            (true, false) => Segment::Last,
            (false, _) => Segment::Whole,
        }
    }

    /// Whether each attempt of the body is counted here (see [`Segment::Last`]).
    #[inline]
    pub fn counts_attempts(self) -> bool {
        self == Segment::Last
    }

    /// Whether the call's attempts are the `ToolCall`'s count (see [`Segment::Before`]; else the
    /// pipeline counts them itself).
    #[inline]
    pub fn reads_attempts(self) -> bool {
        self == Segment::Before
    }

    /// The `ToolCall`'s attempts once the body is run again (`attempts`: so far).
    #[inline]
    pub fn next_attempt(attempts: u32) -> u32 {
        attempts.saturating_add(1)
    }

    /// The limit of an attempt: the pipeline's (`own`), else, in the last segment, the
    /// `ToolCall`'s `timeout_s` (`tool_calls`, read only then).
    #[inline]
    pub fn attempt_limit<E>(
        self,
        own: Option<f64>,
        tool_calls: impl FnOnce() -> Result<Option<f64>, E>,
    ) -> Result<Option<f64>, E> {
        match own {
            None if self == Segment::Last => tool_calls(),
            own => Ok(own),
        }
    }
}

/// How the caller's wait for an abort's step (a task of its own) ended (`S`: a stop, `E`: what
/// was raised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited<S, E> {
    /// The step is done: with the stop its store or sink raised (the step's value), or None.
    Done(Option<S>),
    /// The abort's bound passed first.
    BoundPassed,
    /// The caller was cancelled again while it waited (`E`: that cancellation).
    Cancelled(E),
    /// The wait itself failed.
    Failed(E),
}

impl<S, E> Waited<S, E> {
    /// How the wait for an abort's step (a task of its own) ended: the wait returned (`out` Ok)
    /// with the step done (`done`, asked only then) or not (the bound passed), or raised (a
    /// cancellation, `cancellation`, or anything else). A step done is done with the stop it
    /// returned (`result`: None, none; what reading it raised, a failed wait), but a step its own
    /// cancellation ended (`cancelled`, asked only when done), which is done with no stop (its
    /// failure, which it logged itself). What asking `done` or `cancelled` raised is returned.
    #[inline]
    pub fn of(
        out: Result<(), E>,
        done: impl FnOnce() -> Result<bool, E>,
        cancelled: impl FnOnce() -> Result<bool, E>,
        result: impl FnOnce() -> Result<Option<S>, E>,
        cancellation: impl FnOnce(&E) -> bool,
    ) -> Result<Self, E> {
        Ok(match out {
            Ok(()) if done()? => {
                if cancelled()? {
                    Waited::Done(None)
                } else {
                    match result() {
                        Ok(stop) => Waited::Done(stop),
                        Err(e) => Waited::Failed(e),
                    }
                }
            }
            Ok(()) => Waited::BoundPassed,
            Err(e) if cancellation(&e) => Waited::Cancelled(e),
            Err(e) => Waited::Failed(e),
        })
    }
}

/// What the caller's task waits on for what a call's audit sink yielded (`none`: a bare yield),
/// the sink's awaitable being awaited in the caller's task: a plain future completed with it for
/// any future (`is_future`, asked only then), so that the caller's cancellation, which cancels the
/// future its task waits on, never cancels what the sink waits on (see [`sink_thrown`]); a bare
/// yield as it is. A step of an abort (`step_of_abort`) is a task of its own already: what its
/// sink yields goes to its task as it is.
#[inline]
pub fn sink_waits_through_plain_future<E>(
    step_of_abort: bool,
    none: bool,
    is_future: impl FnOnce() -> Result<bool, E>,
) -> Result<bool, E> {
    Ok(!step_of_abort && !none && is_future()?)
}

/// What a cancellation thrown into a call's drive while its audit sink writes the record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkThrown {
    /// The caller's cancellation (only the caller's task cancels the plain future it waits on in
    /// the sink's place): it does not reach the sink, which goes on in a task of its own (its
    /// first step waits on what the sink waits on); the call is aborted by the cancellation, and
    /// its abort waits for that task within its bound (see
    /// `crate::pipeline::CallMachine::recording`).
    OwnTask,
    /// Thrown into the sink (anything else, and anything in a step of an abort, a task of its
    /// own already).
    Into,
}

/// What `cancelled` (a cancellation or not) thrown into a drive awaiting its call's audit sink
/// does (see [`SinkThrown`]); `step_of_abort`: the drive is a step of an abort.
#[inline]
pub fn sink_thrown(step_of_abort: bool, cancelled: bool) -> SinkThrown {
    if cancelled && !step_of_abort {
        SinkThrown::OwnTask
    } else {
        SinkThrown::Into
    }
}

/// How an abort goes on after the wait for one of its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterAbortStep<S, E> {
    /// The next step, by what the call is aborted with.
    Next,
    /// The next step, the abort now going on by the stop the step raised: that propagates in
    /// place of what aborted the call, and the segments around this one keep the bound.
    NextByStop(S),
    /// The caller stops waiting (the step left behind, logged): the rest of the abort goes on
    /// in a task of its own, and the drive ends with what aborted the call.
    LeaveBehind,
    /// The rest of the abort goes on in a task of its own and the drive ends: with the new
    /// cancellation, or (None) with what aborted the call: a stop propagates alone.
    Detach(Option<E>),
    /// The drive ends with what the wait raised.
    Fail(E),
}

/// How an abort by a stop (`by_stop`) or by anything else goes on once the wait for a step
/// ended.
#[inline]
pub fn after_abort_step<S, E>(waited: Waited<S, E>, by_stop: bool) -> AfterAbortStep<S, E> {
    match waited {
        Waited::Done(Some(stop)) if !by_stop => AfterAbortStep::NextByStop(stop),
        Waited::Done(_) => AfterAbortStep::Next,
        Waited::BoundPassed => AfterAbortStep::LeaveBehind,
        Waited::Cancelled(_) if by_stop => AfterAbortStep::Detach(None),
        Waited::Cancelled(e) => AfterAbortStep::Detach(Some(e)),
        Waited::Failed(e) => AfterAbortStep::Fail(e),
    }
}

/// How a drive ends by an exception.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A step of an abort (a release or a record in a task of its own) ends with the stop its
    /// store or sink raised as its value, for the abort awaiting it to go on with and then
    /// propagate (raised in its task, asyncio would raise it out of the loop at once).
    StopAsValue,
    /// An abort-only drive ends with None once its call is aborted by what it was given.
    Aborted,
    /// The exception is raised.
    Raise,
    /// The call of `Invoker.invoke` is answered with the fault envelope (logged).
    Envelope,
}

/// How a drive ends by `raised`. `step_of_abort`: the drive is a step of an abort; `its_abort`:
/// `raised` is what an abort-only drive was given; `invoked`: the drive answers a call of
/// `Invoker.invoke`; `callers`: whether a cancellation is the caller's (asked only then).
#[inline]
pub fn ending(
    raised: Raised,
    step_of_abort: bool,
    its_abort: bool,
    invoked: bool,
    callers: impl FnOnce() -> bool,
) -> Ending {
    if step_of_abort && raised == Raised::Stop {
        Ending::StopAsValue
    } else if its_abort {
        Ending::Aborted
    } else if !invoked || raised.propagates(callers) {
        Ending::Raise
    } else {
        Ending::Envelope
    }
}

/// What a step of a drive does (`B`: how it begins, not begun yet; `A`: what it awaits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<B, A> {
    /// Begin, with None sent (the first step).
    Begin(B),
    /// Not begun and sent a value that is not None: refused ([`NOT_NONE_MESSAGE`], a
    /// `TypeError`), the drive still not begun.
    RefuseValue(B),
    /// Step what it awaits with what was sent or thrown.
    Await(A),
    /// Raise what was thrown in (see `body::raised_inside`): a drive thrown into before it began
    /// never begins; one that has ended raises it.
    Raise,
    /// Ended and sent a value: a `RuntimeError` ([`REUSED_MESSAGE`]).
    Reused,
}

/// What a drive sent a value that is not None before it began raises (as a coroutine does).
pub const NOT_NONE_MESSAGE: &str = "can't send non-None value to a just-started coroutine";

/// What a drive that has ended raises when it is sent a value (as a coroutine does).
pub const REUSED_MESSAGE: &str = "cannot reuse already awaited coroutine";

/// What a step of a drive does: not begun (`begin`), or awaiting (`awaiting`, taken only when it
/// has begun), else ended; `throw`n into or sent a value (`sent_none`: None, asked only before it
/// began).
#[inline]
pub fn step<B, A>(
    begin: Option<B>,
    awaiting: impl FnOnce() -> Option<A>,
    throw: bool,
    sent_none: impl FnOnce() -> bool,
) -> Step<B, A> {
    match begin {
        Some(_) if throw => Step::Raise,
        Some(b) if sent_none() => Step::Begin(b),
        Some(b) => Step::RefuseValue(b),
        None => match awaiting() {
            Some(a) => Step::Await(a),
            None if throw => Step::Raise,
            None => Step::Reused,
        },
    }
}

/// What a drive being closed awaited, by what for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// A step of its call (the body, the approver, a store, a sink, a sleep).
    CallStep,
    /// The drive of the next handler of a chain (a user middleware's): that drive aborts its own
    /// call when it is closed.
    Chained,
    /// A step of its call's abort, in a task of its own (the abort goes on there).
    AbortStep,
    /// Its call's audit sink writing the record (in the drive's task, or in a task of its own
    /// once the caller's cancellation reached it, see [`SinkThrown::OwnTask`]): the call is
    /// aborted, and that record is lost (logged) if its loop is closed with the sink not done.
    Recording,
}

/// What closing a drive does once what it awaited is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    /// The abort's step in progress and the steps left are logged as lost ([`LeftBehind`], not
    /// going on) if the step's loop is closed with the step not done.
    pub logs_lost: bool,
    /// The call is aborted as cancelled without awaiting (its release and record as far as they
    /// go without suspending).
    pub aborts_call: bool,
}

impl Closed {
    /// What closing a drive that awaited this does.
    #[inline]
    pub fn close(self) -> Close {
        Close {
            logs_lost: matches!(self, Closed::AbortStep | Closed::Recording),
            aborts_call: matches!(self, Closed::CallStep | Closed::Recording),
        }
    }
}

impl Close {
    /// Whether the abort's step in progress and the steps left are lost (logged): only when the
    /// close [`Close::logs_lost`], the step's loop is closed (`loop_closed`, asked only then)
    /// and the step is not done (`done`, asked only then); a question that fails counts as no
    /// (nothing is logged).
    #[inline]
    pub fn lost<E>(
        self,
        loop_closed: impl FnOnce() -> Result<bool, E>,
        done: impl FnOnce() -> Result<bool, E>,
    ) -> bool {
        self.logs_lost && matches!(loop_closed(), Ok(true)) && matches!(done(), Ok(false))
    }
}

/// A step of an abort left behind by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftBehind {
    /// The release of the call's shared claim (the log names its key).
    Release,
    /// The audit record (the log names the sink).
    Record,
}

impl LeftBehind {
    /// The log line (`%`-format) of a step left behind: `going_on`, the caller stops waiting at
    /// the abort's bound (its second argument: [`crate::deadline::ABORT_WAIT_S`]), and the step
    /// goes on by itself; else it cannot go on (its event loop is closed).
    pub fn message(self, going_on: bool) -> &'static str {
        match (self, going_on) {
            (LeftBehind::Release, true) => "idempotency store has not released the claim on %s of an aborted call when the abort's wait ended (at most %.1f s from the caller's cancellation or stop, for all the releases and records it waits for); the caller goes on without it and the release goes on by itself (the claim's lease bounds it)",
            (LeftBehind::Record, true) => "audit sink %r has not taken the record of an aborted call when the abort's wait ended (at most %.1f s from the caller's cancellation or stop, for all the releases and records it waits for); the caller goes on without it and the sink gets the record when it is done (it is lost if its event loop is closed first)",
            (LeftBehind::Release, false) => "idempotency store could not release the claim on %s of an aborted call: its event loop is closed (the claim's lease bounds it)",
            (LeftBehind::Record, false) => "audit sink %r could not take the record of an aborted call: its event loop is closed (the record is lost)",
        }
    }
}

/// The log line of an approver that failed (arguments: the approver, the tool's name).
pub const APPROVER_FAILED: &str = "approver %r failed: the call of %s is refused";
/// The log line of a shared store that failed (argument: the key); the call goes on.
pub const STORE_FAILED: &str = "idempotency store failed on %s; going on without it";
/// The log line of a store that failed to release an aborted call's claim (argument: the key).
pub const RELEASE_FAILED: &str =
    "idempotency store failed to release the claim on %s; it is held until its lease runs out";
/// The log line of a call of `Invoker.invoke` answered with the fault envelope (argument: the
/// tool's name).
pub const INVOKER_FAILED: &str = "Invoker failed on a call of %r";

/// Why what a user middleware answered (a `got`) is no envelope: a fault of that middleware,
/// not of the tool.
pub fn not_an_envelope_message(got: &str) -> String {
    format!("a middleware returned {got}, not an envelope dict")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_a_drive_aborts_its_call_or_logs_its_aborts_lost_steps() {
        assert_eq!(
            Closed::CallStep.close(),
            Close {
                logs_lost: false,
                aborts_call: true
            }
        );
        assert_eq!(
            Closed::Chained.close(),
            Close {
                logs_lost: false,
                aborts_call: false
            }
        );
        assert_eq!(
            Closed::AbortStep.close(),
            Close {
                logs_lost: true,
                aborts_call: false
            }
        );
        assert_eq!(
            Closed::Recording.close(),
            Close {
                logs_lost: true,
                aborts_call: true
            }
        );
    }

    #[test]
    fn a_calls_sink_waits_through_a_plain_future_and_goes_to_a_task_of_its_own_when_cancelled() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(
            sink_waits_through_plain_future(false, false, || Ok::<_, ()>(true)),
            Ok(true)
        );
        assert_eq!(
            sink_waits_through_plain_future(false, false, || Ok::<_, ()>(false)),
            Ok(false)
        );
        assert_eq!(sink_waits_through_plain_future(false, true, never), Ok(false));
        assert_eq!(sink_waits_through_plain_future(true, false, never), Ok(false));
        assert_eq!(
            sink_waits_through_plain_future(false, false, || Err("isfuture")),
            Err("isfuture")
        );
        assert_eq!(sink_thrown(false, true), SinkThrown::OwnTask);
        assert_eq!(sink_thrown(false, false), SinkThrown::Into);
        assert_eq!(sink_thrown(true, true), SinkThrown::Into);
        assert_eq!(sink_thrown(true, false), SinkThrown::Into);
    }

    #[test]
    fn a_step_of_a_drive_begins_it_steps_what_it_awaits_or_refuses_as_a_coroutine_does() {
        let never_a = || -> Option<u16> { panic!("not asked") };
        let never_b = || -> bool { panic!("not asked") };
        assert_eq!(step(Some(1u8), never_a, false, || true), Step::Begin(1));
        assert_eq!(step(Some(1u8), never_a, false, || false), Step::RefuseValue(1));
        assert_eq!(step(Some(1u8), never_a, true, never_b), Step::Raise);
        for throw in [false, true] {
            assert_eq!(step(None::<u8>, || Some(2u16), throw, never_b), Step::Await(2));
        }
        assert_eq!(step(None::<u8>, || None::<u16>, false, never_b), Step::Reused);
        assert_eq!(step(None::<u8>, || None::<u16>, true, never_b), Step::Raise);
    }

    #[test]
    fn the_wait_for_an_aborts_step_ends_done_with_its_stop_past_the_bound_cancelled_or_failed() {
        type W = Waited<&'static str, &'static str>;
        let (yes, no) = (|| Ok::<_, &str>(true), || Ok::<_, &str>(false));
        let never_b = || -> Result<bool, &'static str> { panic!("not asked") };
        let never_r = || -> Result<Option<&'static str>, &'static str> { panic!("not asked") };
        let never_c = |_: &&str| -> bool { panic!("not asked") };
        let is_cancel = |e: &&str| *e == "CancelledError";
        assert_eq!(
            W::of(Ok(()), yes, no, || Ok(Some("stop")), never_c),
            Ok(Waited::Done(Some("stop")))
        );
        assert_eq!(W::of(Ok(()), yes, no, || Ok(None), never_c), Ok(Waited::Done(None)));
        assert_eq!(
            W::of(Ok(()), yes, no, || Err("result"), never_c),
            Ok(Waited::Failed("result"))
        );
        // its own cancellation ended it: done, no stop (a failure it logged itself)
        assert_eq!(W::of(Ok(()), yes, yes, never_r, never_c), Ok(Waited::Done(None)));
        assert_eq!(W::of(Ok(()), no, never_b, never_r, never_c), Ok(Waited::BoundPassed));
        assert_eq!(
            W::of(Err("CancelledError"), never_b, never_b, never_r, is_cancel),
            Ok(Waited::Cancelled("CancelledError"))
        );
        assert_eq!(
            W::of(Err("OSError"), never_b, never_b, never_r, is_cancel),
            Ok(Waited::Failed("OSError"))
        );
        // what asking raised is returned
        assert_eq!(W::of(Ok(()), || Err("done"), never_b, never_r, never_c), Err("done"));
        assert_eq!(
            W::of(Ok(()), yes, || Err("cancelled"), never_r, never_c),
            Err("cancelled")
        );
    }

    #[test]
    fn an_aborts_steps_are_lost_only_when_its_loop_closed_with_the_step_not_done() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        let (yes, no) = (|| Ok::<_, ()>(true), || Ok::<_, ()>(false));
        let (call, chained) = (Closed::CallStep.close(), Closed::Chained.close());
        assert!(!call.lost(never, never));
        assert!(!chained.lost(never, never));
        for abort in [Closed::AbortStep.close(), Closed::Recording.close()] {
            assert!(!abort.lost(no, never));
            assert!(abort.lost(yes, no));
            assert!(!abort.lost(yes, yes));
        }
        let abort = Closed::AbortStep.close();
        // a question that fails: not lost
        assert!(!abort.lost(|| Err(()), never));
        assert!(!abort.lost(yes, || Err(())));
    }

    fn never() -> bool {
        panic!("not asked")
    }

    #[test]
    fn a_body_value_is_checked_settled_or_taken() {
        let unasked = |_: &u8| -> bool { panic!("not asked") };
        let exception = |e: &&str| *e == "ValueError";
        assert_eq!(body_end(Ok::<u8, &str>(1), true, unasked, exception), BodyEnd::Check(1));
        assert_eq!(
            body_end(Ok::<u8, &str>(1), false, |_| true, exception),
            BodyEnd::Settle(1)
        );
        assert_eq!(body_end(Ok::<u8, &str>(1), false, |_| false, exception), BodyEnd::Ok(1));
        for check in [true, false] {
            let failed = body_end(Err::<u8, _>("ValueError"), check, unasked, exception);
            assert_eq!(failed, BodyEnd::Failed("ValueError"));
            let fault = body_end(Err::<u8, _>("KeyboardInterrupt"), check, unasked, exception);
            assert_eq!(fault, BodyEnd::Fault("KeyboardInterrupt"));
        }
    }

    #[test]
    fn only_true_approves_a_failing_approver_refuses() {
        assert_eq!(approval::<u8>(Ok(Some(true)), never), Approval::Approved);
        assert_eq!(approval::<u8>(Ok(Some(false)), never), Approval::Refused);
        assert_eq!(approval::<u8>(Ok(None), never), Approval::Refused); // `1`, `"yes"`
        assert_eq!(
            [approves(Some(true)), approves(Some(false)), approves(None)],
            [true, false, false]
        );
        assert_eq!(approval(Err((Raised::Other, 1)), never), Approval::Failed(1));
        assert_eq!(approval(Err((Raised::Stop, 2)), never), Approval::Propagates(2));
        assert_eq!(approval(Err((Raised::Cancelled, 3)), || true), Approval::Propagates(3));
        assert_eq!(approval(Err((Raised::Cancelled, 4)), || false), Approval::Failed(4));
        let approved = [
            Approval::Approved,
            Approval::Refused,
            Approval::Failed(0),
            Approval::Propagates(0),
        ];
        assert_eq!(approved.map(|a| a.approved()), [true, false, false, false]);
    }

    #[test]
    fn a_store_keeps_its_promise_or_is_failing() {
        use Answer::*;
        let get = [None, Str, Bool, Other].map(|a| StoreAsked::Get.promised(a));
        assert_eq!(get, [true, true, false, false]);
        let cas = [None, Str, Bool, Other].map(|a| StoreAsked::CompareAndSet.promised(a));
        assert_eq!(cas, [false, false, true, false]);
        assert_eq!(
            StoreAsked::Get.broken_message("int"),
            "store.get returned int, expected str or None; fix the StorePort implementation"
        );
        assert_eq!(
            StoreAsked::CompareAndSet.broken_message("NoneType"),
            "store.compare_and_set returned NoneType, expected bool; fix the StorePort implementation"
        );
    }

    #[test]
    fn the_last_segment_counts_attempts_the_one_before_middleware_reads_them() {
        assert_eq!(Segment::of(false, false), Segment::Whole);
        assert_eq!(Segment::of(false, true), Segment::Whole);
        assert_eq!(Segment::of(true, false), Segment::Last);
        assert_eq!(Segment::of(true, true), Segment::Before);
        let counts =
            [Segment::Whole, Segment::Last, Segment::Before].map(|s| (s.counts_attempts(), s.reads_attempts()));
        assert_eq!(counts, [(false, false), (true, false), (false, true)]);
        assert_eq!(Segment::next_attempt(2), 3);
        assert_eq!(Segment::next_attempt(u32::MAX), u32::MAX);
        let unread = || -> Result<Option<f64>, ()> { panic!("not read") };
        assert_eq!(Segment::Last.attempt_limit(Some(2.0), unread), Ok(Some(2.0)));
        assert_eq!(
            Segment::Last.attempt_limit(None, || Ok::<_, ()>(Some(5.0))),
            Ok(Some(5.0))
        );
        assert_eq!(
            Segment::Last.attempt_limit(None, || Err::<Option<f64>, _>("bad")),
            Err("bad")
        );
        assert_eq!(Segment::Whole.attempt_limit(None, unread), Ok(None));
        assert_eq!(Segment::Before.attempt_limit(None, unread), Ok(None));
    }

    #[test]
    fn an_abort_goes_on_by_a_stop_its_step_raised_unless_stopping_already() {
        use AfterAbortStep::*;
        type W = Waited<&'static str, &'static str>;
        assert_eq!(after_abort_step(W::Done(None), false), Next);
        assert_eq!(
            after_abort_step(W::Done(Some("SystemExit")), false),
            NextByStop("SystemExit")
        );
        assert_eq!(after_abort_step(W::Done(Some("SystemExit")), true), Next);
        assert_eq!(after_abort_step(W::Done(None), true), Next);
        assert_eq!(after_abort_step(W::Cancelled("again"), false), Detach(Some("again")));
        assert_eq!(after_abort_step(W::Cancelled("again"), true), Detach(None));
        for by_stop in [false, true] {
            assert_eq!(after_abort_step(W::BoundPassed, by_stop), LeaveBehind);
            assert_eq!(after_abort_step(W::Failed("wait"), by_stop), Fail("wait"));
        }
    }

    #[test]
    fn a_drive_ends_by_raising_unless_an_envelope_answers_it() {
        use Ending::*;
        use Raised::*;
        assert_eq!(ending(Stop, true, true, true, never), StopAsValue);
        assert_eq!(ending(Cancelled, true, true, true, never), Aborted);
        assert_eq!(ending(Stop, false, true, true, never), Aborted);
        assert_eq!(ending(Other, false, false, false, never), Raise);
        assert_eq!(ending(Other, false, false, true, never), Envelope);
        assert_eq!(ending(Stop, false, false, true, never), Raise);
        assert_eq!(ending(Cancelled, false, false, true, || true), Raise);
        assert_eq!(ending(Cancelled, false, false, true, || false), Envelope);
        assert_eq!(ending(Other, true, false, true, never), Envelope);
    }

    #[test]
    fn the_words_of_the_driver() {
        assert_eq!(
            LeftBehind::Release.message(false),
            "idempotency store could not release the claim on %s of an aborted call: its event loop is closed (the claim's lease bounds it)"
        );
        assert_eq!(
            LeftBehind::Record.message(false),
            "audit sink %r could not take the record of an aborted call: its event loop is closed (the record is lost)"
        );
        let going_on = [LeftBehind::Release, LeftBehind::Record].map(|l| l.message(true));
        assert!(going_on[0].starts_with("idempotency store has not released the claim on %s of an aborted call when the abort's wait ended (at most %.1f s from"));
        assert!(going_on[1].starts_with("audit sink %r has not taken the record of an aborted call when the abort's wait ended (at most %.1f s from"));
        assert_eq!(
            not_an_envelope_message("int"),
            "a middleware returned int, not an envelope dict"
        );
    }
}
