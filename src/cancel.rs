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

    /// A request deferred during the step that just suspended the body cancelled the future it
    /// now waits on: delivered.
    pub fn deferred_reached_waiter(&mut self) {
        self.must_cancel = false;
        self.waiter_cancelled = true;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_deferred_request_is_delivered_at_the_next_step() {
        let mut r = Requests::default();
        r.request();
        r.cancelled_waiter();
        assert!(r.waiter_cancelled());
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
