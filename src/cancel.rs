//! Whose cancellation is it. An `async` tool body awaited in its caller's task runs as a
//! stand-in task of its own, so that what the body enters (a timeout scope, a task group) cancels
//! the body, never the caller: [`Requests`] is that task's count of cancellation requests, with
//! a task's semantics. [`thrown_is_callers`] and [`ended_by_callers`] tell the caller's own
//! cancellation from one the body caused itself. No event loop here: the binding reads the
//! counts and performs the cancellations.

/// The cancellation requests of a body's stand-in task (`cancel()`, `cancelling()`,
/// `uncancel()` as asyncio's tasks count them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    requested: isize,
    /// A request with nothing to cancel: the body's next step throws it.
    must_cancel: bool,
    /// A request cancelled the future the body waits on.
    waiter_cancelled: bool,
}

impl Requests {
    /// `cancelling()`: requests counted and not withdrawn.
    pub fn count(&self) -> isize {
        self.requested
    }

    /// A request waits for the body's next step.
    pub fn pending(&self) -> bool {
        self.must_cancel
    }

    /// A request cancelled the future the body waits on (since its last step).
    pub fn waiter_cancelled(&self) -> bool {
        self.waiter_cancelled
    }

    /// A request is counted (`cancel()` of a task not done, or the caller's cancellation passed
    /// on to the body).
    pub fn request(&mut self) {
        self.requested += 1;
    }

    /// `cancel()` of the body's task: `done`, the body has ended; `waiting`, it waits on a
    /// future. Counts the request unless the body has ended.
    #[inline]
    pub fn cancel(&mut self, done: bool, waiting: bool) -> Cancel {
        if done {
            return Cancel::Ended;
        }
        self.request();
        if waiting {
            Cancel::CancelWaiter
        } else {
            self.defer();
            Cancel::Deferred
        }
    }

    /// [`Cancel::CancelWaiter`] done: whether the future the body waits on `cancelled` (it is a
    /// future and its `cancel()` answered true). Returns whether the request is deferred instead
    /// (the body's next step throws it, with the message of that `cancel()`).
    #[inline]
    pub fn waiter_answered(&mut self, cancelled: bool) -> bool {
        if cancelled {
            self.cancelled_waiter();
        } else {
            self.defer();
        }
        !cancelled
    }

    /// The request just counted cancelled the future the body waits on.
    pub fn cancelled_waiter(&mut self) {
        self.waiter_cancelled = true;
    }

    /// The request just counted had nothing to cancel: the body's next step throws it.
    pub fn defer(&mut self) {
        self.must_cancel = true;
    }

    /// `uncancel()`: one request withdrawn (none below 0); once none is left, a deferred one is
    /// dropped too. Returns the requests left.
    pub fn uncancel(&mut self) -> isize {
        if self.requested > 0 {
            self.requested -= 1;
            if self.requested == 0 {
                self.must_cancel = false;
            }
        }
        self.requested
    }

    /// A step of the body begins: whether a deferred request is delivered now (thrown into the
    /// body, unless what the step throws is a cancellation already).
    pub fn step(&mut self) -> bool {
        let deliver = self.must_cancel;
        self.must_cancel = false;
        self.waiter_cancelled = false;
        deliver
    }

    /// [`Requests::step`] of a step that throws `arg` (`throw`) or sends it: whether the step
    /// throws a cancellation of the task in its place (`arg_cancels`: `arg` is a cancellation,
    /// asked only for a deferred request, which a step throwing a cancellation already delivers).
    pub fn step_delivers<E>(&mut self, arg_cancels: impl FnOnce() -> Result<bool, E>) -> Result<bool, E> {
        Ok(self.step() && !arg_cancels()?)
    }

    /// A request deferred during the step that just suspended the body cancelled the future it
    /// now waits on: delivered.
    pub fn deferred_reached_waiter(&mut self) {
        self.must_cancel = false;
        self.waiter_cancelled = true;
    }
}

/// What a `cancel()` of a body's stand-in task does (see [`Requests::cancel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The body has ended: nothing; `cancel()` answers false.
    Ended,
    /// Cancel the future the body waits on (if it is a future), then
    /// [`Requests::waiter_answered`]; `cancel()` answers true.
    CancelWaiter,
    /// Nothing to cancel: the body's next step throws it, with the message of that `cancel()`;
    /// `cancel()` answers true.
    Deferred,
}

/// A cancellation thrown into the await of a suspended body: whether it is a fresh cancellation
/// of the caller's task (passed on to the body) rather than one the body caused itself.
/// `count`: the awaiting task's `cancelling()` now (None: a task that does not count, Python
/// 3.10's), `seen`: its count at the last cancellation seen (updated here). Without a count, any
/// cancellation is the caller's unless the body waits on its own future directly
/// (`waits_directly`) and a request of its own task cancelled that future.
pub fn thrown_is_callers(count: Option<isize>, seen: &mut isize, waits_directly: bool, waiter_cancelled: bool) -> bool {
    match count {
        Some(n) => {
            let fresh = n > *seen;
            *seen = n;
            fresh
        }
        None => !waits_directly || !waiter_cancelled,
    }
}

/// The body ended by a cancellation: whether it is the caller's (it propagates as it is) rather
/// than the body's own (a failure of the body). `delivered`: a cancellation of the caller
/// reached the body; `count` reads the awaiting task's `cancelling()` (None: a task that does not
/// count), asked only then; `before`: the count when the await began.
pub fn ended_by_callers<E>(
    delivered: bool,
    count: impl FnOnce() -> Result<Option<isize>, E>,
    before: isize,
) -> Result<bool, E> {
    if !delivered {
        return Ok(false);
    }
    Ok(count()?.is_none_or(|n| n > before))
}

/// What a host callback (an approver, a store, an audit sink), a body or the await of one raised,
/// as the binding classifies it for the decisions below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raised {
    /// `KeyboardInterrupt` / `SystemExit`: the process is being stopped.
    Stop,
    /// A cancellation (`asyncio.CancelledError`): the caller's, or one of the callback's own.
    Cancelled,
    /// Anything else.
    Other,
}

impl Raised {
    /// Whether it propagates rather than being the failure of what raised it: a stop always, a
    /// cancellation when it is the caller's (`callers`, asked only for a cancellation: see
    /// [`caller_cancelled`]). The same rule ends a call that faulted: what propagates is raised,
    /// anything else answers the call with the fault envelope.
    #[inline]
    pub fn propagates(self, callers: impl FnOnce() -> bool) -> bool {
        match self {
            Raised::Stop => true,
            Raised::Cancelled => callers(),
            Raised::Other => false,
        }
    }

    /// Whether a call it aborts is aborted as cancelled (its record's outcome `cancelled`) rather
    /// than as a fault (`internal_error`): a cancellation, or a stop (the process being stopped
    /// ends the call as its caller's cancellation does).
    #[inline]
    pub fn aborts_as_cancelled(self) -> bool {
        !matches!(self, Raised::Other)
    }
}

/// The task running now, as the binding reads it to ask [`caller_cancelled`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Current {
    /// No event loop runs.
    NoLoop,
    /// A loop runs, outside any task.
    NoTask,
    /// A task that does not count its cancellation requests (one of Python 3.10's).
    Uncounted,
    /// A task that counts them: its `cancelling()`.
    Counting(isize),
    /// What runs now could not be read.
    Unknown,
}

/// Whether the task running now was asked to cancel, so that a cancellation raised now is its
/// caller's: a task that counts the requests, by its count; one that does not, any cancellation
/// counts as the caller's; outside a task too, and when what runs could not be read (a
/// cancellation is never swallowed for want of knowing); with no loop running, none is.
#[inline]
pub fn caller_cancelled(current: Current) -> bool {
    match current {
        Current::NoLoop => false,
        Current::NoTask | Current::Uncounted | Current::Unknown => true,
        Current::Counting(n) => n > 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_propagates_a_cancellation_when_the_callers() {
        let never = || -> bool { panic!("not asked") };
        assert!(Raised::Stop.propagates(never));
        assert!(!Raised::Other.propagates(never));
        assert!(Raised::Cancelled.propagates(|| true));
        assert!(!Raised::Cancelled.propagates(|| false));
        assert!(Raised::Stop.aborts_as_cancelled());
        assert!(Raised::Cancelled.aborts_as_cancelled());
        assert!(!Raised::Other.aborts_as_cancelled());
    }

    #[test]
    fn whose_cancellation_by_the_task_running_now() {
        assert!(!caller_cancelled(Current::NoLoop));
        assert!(caller_cancelled(Current::NoTask));
        assert!(caller_cancelled(Current::Uncounted));
        assert!(caller_cancelled(Current::Unknown));
        assert!(caller_cancelled(Current::Counting(1)));
        assert!(caller_cancelled(Current::Counting(2)));
        assert!(!caller_cancelled(Current::Counting(0)));
    }

    #[test]
    fn requests_count_as_a_task_does() {
        let mut r = Requests::default();
        assert_eq!(r.uncancel(), 0); // never below 0
        r.request();
        r.defer();
        assert_eq!((r.count(), r.pending()), (1, true));
        r.request();
        assert_eq!(r.uncancel(), 1);
        assert!(r.pending()); // a request is left: the deferred one stays
        assert_eq!(r.uncancel(), 0);
        assert!(!r.pending()); // none left: dropped
    }

    #[test]
    fn cancel_of_the_task_cancels_the_waiter_or_defers() {
        let mut r = Requests::default();
        assert_eq!(r.cancel(true, true), Cancel::Ended);
        assert_eq!(r, Requests::default()); // an ended body counts nothing
        assert_eq!(r.cancel(false, false), Cancel::Deferred);
        assert_eq!((r.count(), r.pending(), r.waiter_cancelled()), (1, true, false));
        let mut w = Requests::default();
        assert_eq!(w.cancel(false, true), Cancel::CancelWaiter);
        assert_eq!((w.count(), w.pending()), (1, false));
        assert!(!w.waiter_answered(true));
        assert_eq!((w.count(), w.pending(), w.waiter_cancelled()), (1, false, true));
        assert_eq!(w.cancel(false, true), Cancel::CancelWaiter);
        assert!(w.waiter_answered(false)); // not a future, or it would not cancel: deferred
        assert_eq!((w.count(), w.pending()), (2, true));
    }

    #[test]
    fn a_deferred_request_is_delivered_at_the_next_step() {
        let mut r = Requests::default();
        r.request();
        r.cancelled_waiter();
        assert!(r.waiter_cancelled());
        let never = || -> Result<bool, ()> { panic!("not asked") };
        let mut d = Requests::default();
        assert_eq!(d.step_delivers(never), Ok(false)); // nothing deferred
        d.request();
        d.defer();
        assert_eq!(d.clone().step_delivers(|| Ok::<_, ()>(false)), Ok(true));
        assert_eq!(d.step_delivers(|| Ok::<_, ()>(true)), Ok(false)); // the step throws one already
        assert!(!d.pending());
        assert!(!r.step()); // nothing deferred; the step forgets the waiter's cancellation
        assert!(!r.waiter_cancelled());
        r.request();
        r.defer();
        assert!(r.step());
        assert!(!r.pending());
        assert!(!r.step());
        r.defer();
        r.deferred_reached_waiter();
        assert_eq!((r.pending(), r.waiter_cancelled()), (false, true));
        assert_eq!(r.count(), 2);
    }

    #[test]
    fn a_thrown_cancellation_is_the_callers_when_fresh() {
        let mut seen = 1;
        assert!(!thrown_is_callers(Some(1), &mut seen, true, false));
        assert!(thrown_is_callers(Some(2), &mut seen, true, false));
        assert_eq!(seen, 2);
        assert!(!thrown_is_callers(Some(2), &mut seen, false, false));
        // A task that does not count.
        assert!(thrown_is_callers(None, &mut seen, false, true));
        assert!(thrown_is_callers(None, &mut seen, true, false));
        assert!(!thrown_is_callers(None, &mut seen, true, true));
        assert_eq!(seen, 2);
    }

    #[test]
    fn an_ending_cancellation_is_the_callers_when_delivered_and_counted() {
        let never = || -> Result<Option<isize>, ()> { panic!("not asked") };
        assert_eq!(ended_by_callers(false, never, 0), Ok(false));
        assert_eq!(ended_by_callers(true, || Ok::<_, ()>(Some(1)), 0), Ok(true));
        assert_eq!(ended_by_callers(true, || Ok::<_, ()>(Some(1)), 1), Ok(false));
        assert_eq!(ended_by_callers(true, || Ok::<_, ()>(None), 5), Ok(true));
        assert_eq!(
            ended_by_callers(true, || Err::<Option<isize>, _>("raised"), 0),
            Err("raised")
        );
    }
}
