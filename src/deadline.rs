//! Call deadlines, with no event loop in sight: the arithmetic of a call's end on the monotonic
//! clock, the timer of one event loop ([`Timers`]: every pending deadline behind one armed
//! timer), what leaving a deadline means for the await that entered it ([`left`]), and the
//! bound of an abort's wait ([`ABORT_WAIT_S`]).
//!
//! Times are seconds on the clock every call's deadline is on (Python's `time.monotonic`); the
//! binding reads the clock and performs what [`Timers`] asks for (arm a timer, cancel a task).
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use hashbrown::HashMap;

/// Nanoseconds on the monotonic clock as the seconds `time.monotonic()` answers for them:
/// CPython converts its nanosecond reading so (a whole number of seconds by an integer division,
/// else the nanoseconds divided by 1e9), and the same reading gives the same float here.
#[inline]
pub fn seconds_of_ns(ns: i64) -> f64 {
    const NS: i64 = 1_000_000_000;
    if ns % NS == 0 {
        (ns / NS) as f64
    } else {
        ns as f64 / 1e9
    }
}

/// The end of a call of `limit` seconds (None: no deadline) that starts at `now`: the one place
/// a call's end is computed.
#[inline]
pub fn end_of(now: f64, limit: Option<f64>) -> Option<f64> {
    limit.map(|l| now + l)
}

/// [`end_of`] a call that started `elapsed_s` seconds before `now`.
#[inline]
pub fn end_since(now: f64, elapsed_s: f64, limit: Option<f64>) -> Option<f64> {
    limit.map(|l| now - elapsed_s + l)
}

/// Whether `end` (None: no deadline) has passed at `now`: nothing past the deadline is a success.
#[inline]
pub fn passed(now: f64, end: Option<f64>) -> bool {
    end.is_some_and(|end| now > end)
}

/// Whether a body that took `elapsed_s` seconds (read only when there is a limit) overran its
/// `limit`: nothing past the deadline is a success.
#[inline]
pub fn overran(limit: Option<f64>, elapsed_s: impl FnOnce() -> f64) -> bool {
    limit.is_some_and(|l| elapsed_s() > l)
}

/// Whether a body that returned is past its deadline `end` (None: none): with its `limit` known,
/// by the time it took (`elapsed_s`: no clock read, see [`overran`]); else by the clock (`now`,
/// read only then, see [`passed`]).
#[inline]
pub fn returned_past<E>(
    end: Option<f64>,
    limit: Option<f64>,
    elapsed_s: impl FnOnce() -> f64,
    now: impl FnOnce() -> Result<f64, E>,
) -> Result<bool, E> {
    Ok(match (end, limit) {
        (None, _) => false,
        (Some(_), Some(_)) => overran(limit, elapsed_s),
        (end, None) => passed(now()?, end),
    })
}

/// Whether an outcome the caller takes is a timeout because the deadline passed before it took
/// it (`past`, asked only for a success): a success is, as nothing past the deadline is a
/// success; what the body raised stands (its own answer, as for every body: an exception is
/// carried past the deadline, see [`left`]). The one rule for every way a caller takes a body's
/// outcome: from the worker pool at once or awaited on its loop, and from a body awaited in the
/// caller's own task (`body::ending`).
#[inline]
pub fn taken_timed_out<E>(ok: bool, past: impl FnOnce() -> Result<bool, E>) -> Result<bool, E> {
    Ok(ok && past()?)
}

/// A call whose limit is not above 0 never starts: it is past its deadline already.
#[inline]
pub fn never_starts(limit: Option<f64>) -> bool {
    limit.is_some_and(|l| l <= 0.0)
}

/// The instant `timeout` seconds after `now` (None: no timeout). A NaN or negative wait is no
/// wait; one too long for the clock is no deadline.
pub fn instant_after(now: Instant, timeout: Option<f64>) -> Option<Instant> {
    let t = timeout?;
    let t = if t > 0.0 { t } else { 0.0 };
    now.checked_add(Duration::try_from_secs_f64(t).ok()?)
}

/// How long a caller waits for the release and record steps of what it aborts (seconds), from
/// when its abort starts: one bound for every segment of a call and for every call of a turn
/// ([`abort_bound`]). An awaitable a store or an audit sink returns that is not done by then goes
/// on without the caller (logged); a sync callback that blocks cannot be cut short and holds the
/// caller as long as it blocks.
pub const ABORT_WAIT_S: f64 = 1.0;

/// When the caller of an abort starting at `now` stops waiting for its steps.
#[inline]
pub fn abort_until(now: Instant) -> Instant {
    now + Duration::from_secs_f64(ABORT_WAIT_S)
}

/// The bound of a caller's abort, and whether this segment leaves it for the segments around it
/// (true: it started it). `held`: the bound a segment around this one left (a user middleware
/// between segments passes the exception on), and whether it was left for this very exception
/// (`Some((true, _))`): that bound then; else a new one from `now`, which this segment leaves.
/// So the caller of a chain of segments waits no longer than for one.
#[inline]
pub fn abort_bound(held: Option<(bool, Instant)>, now: Instant) -> (Instant, bool) {
    match held {
        Some((true, bound)) => (bound, false),
        _ => (abort_until(now), true),
    }
}

/// What is left at `now` of a wait until `until` (seconds; 0 once it passed).
#[inline]
pub fn left_until(until: Instant, now: Instant) -> f64 {
    until.saturating_duration_since(now).as_secs_f64()
}

/// A task's cancellation requests that were delivered: `cancelling` (what the task counts) less
/// a request not thrown into it yet (`pending`: it arrives at the task's next suspension, and is
/// the task's own, not a body's).
#[inline]
pub fn delivered(cancelling: isize, pending: bool) -> isize {
    cancelling - isize::from(pending)
}

/// How the await that entered a deadline ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// With a value.
    Success,
    /// By a cancellation.
    Cancelled,
    /// By any other exception.
    Raised,
}

/// What becomes of an await's outcome when it leaves a deadline that expired (its timer
/// cancelled the task).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// The outcome stands (an exception other than a cancellation, or the caller's own
    /// cancellation, which then propagates).
    AsIs,
    /// `ToolTimeoutError`: past the deadline, neither a success nor the deadline's cancellation
    /// is reported.
    Timeout,
}

/// What leaving an expired deadline makes of the outcome `ended`. `remaining`: the task's
/// cancellation count once the deadline's own request was withdrawn (`uncancel()`; None for a
/// task that does not count them, Python 3.10's), `entered_with`: its delivered requests when
/// the deadline was entered; `by_caller`: for a task that does not count, the caller knows it
/// cancelled the task itself. A cancellation of the task by its own caller too wins: it
/// propagates.
pub fn left(remaining: Option<isize>, entered_with: isize, by_caller: bool, ended: Ended) -> Left {
    let callers = match remaining {
        Some(n) => n > entered_with,
        None => by_caller,
    };
    if callers || ended == Ended::Raised {
        Left::AsIs
    } else {
        Left::Timeout
    }
}

#[derive(Clone, Copy, PartialEq)]
struct When(f64);

impl Eq for When {}

impl PartialOrd for When {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for When {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A deadline entered and not left: the task it cancels, and whether it did.
struct Pending<T> {
    task: T,
    expired: bool,
}

/// The deadlines of one event loop behind one timer: a heap of `(end, entry)`; entries of awaits
/// that ended are dropped lazily (all at once when none is pending); one timer is armed, for the
/// earliest end. `T` is the task an entry cancels.
pub struct Timers<T> {
    heap: BinaryHeap<Reverse<(When, u64)>>,
    /// Entries not left yet (expired ones too, until left).
    entries: HashMap<u64, Pending<T>>,
    /// Entries neither left nor expired.
    live: usize,
    seq: u64,
    /// When the armed timer fires (None: none armed).
    armed_at: Option<f64>,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Timers<T> {
    pub fn new() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            entries: HashMap::new(),
            live: 0,
            seq: 0,
            armed_at: None,
        }
    }

    /// Add the deadline at `when` of `task`: its entry, and whether the timer must be armed for
    /// `when` now (nothing armed, or armed later).
    pub fn add(&mut self, when: f64, task: T) -> (u64, bool) {
        self.seq += 1;
        let seq = self.seq;
        self.heap.push(Reverse((When(when), seq)));
        self.entries.insert(seq, Pending { task, expired: false });
        self.live += 1;
        (seq, self.armed_at.is_none_or(|at| when < at))
    }

    /// The timer is armed for `when` (None: it is not armed, e.g. its loop is gone or arming
    /// failed).
    pub fn set_armed(&mut self, when: Option<f64>) {
        self.armed_at = when;
    }

    /// Entry `seq` is left: whether it had expired. Dropped from the heap when it reaches the
    /// top (all at once when it was the last one pending).
    pub fn remove(&mut self, seq: u64) -> bool {
        let Some(p) = self.entries.remove(&seq) else {
            return false;
        };
        if !p.expired {
            self.live -= 1;
            if self.live == 0 {
                self.heap.clear();
            }
        }
        p.expired
    }

    /// Whether entry `seq` expired (its task was cancelled by it).
    pub fn expired(&self, seq: u64) -> bool {
        self.entries.get(&seq).is_some_and(|p| p.expired)
    }

    /// Entries neither left nor expired.
    pub fn live(&self) -> usize {
        self.live
    }

    /// The timer fired at `now`: every entry due by `now` plus the clock's `resolution` (a timer
    /// fires up to that early) expires. Returns their tasks, to cancel (each as `take` gives
    /// it), and when to arm the timer next (None: nothing is left). The timer counts as not armed
    /// until armed again.
    pub fn fire<U>(&mut self, now: f64, resolution: f64, mut take: impl FnMut(&T) -> U) -> (Vec<U>, Option<f64>) {
        let until = now + resolution;
        self.armed_at = None;
        let mut due = Vec::new();
        while let Some(&Reverse((When(when), seq))) = self.heap.peek() {
            let pending = self.entries.get(&seq).is_some_and(|p| !p.expired);
            if pending && when > until {
                break;
            }
            self.heap.pop();
            if pending {
                if let Some(p) = self.entries.get_mut(&seq) {
                    p.expired = true;
                    self.live -= 1;
                    due.push(take(&p.task));
                }
            }
        }
        (due, self.heap.peek().map(|Reverse((When(w), _))| *w))
    }

    /// The tasks of the entries not left yet.
    pub fn tasks(&self) -> impl Iterator<Item = &T> {
        self.entries.values().map(|p| &p.task)
    }

    /// Forget every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.heap.clear();
        self.live = 0;
    }
}

/// The delay before a timer for `when` fires, armed at `now`: none for a time already past.
pub fn timer_delay(when: f64, now: f64) -> f64 {
    (when - now).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanoseconds_become_the_seconds_time_monotonic_answers() {
        assert_eq!(seconds_of_ns(0), 0.0);
        assert_eq!(seconds_of_ns(3_000_000_000), 3.0);
        assert_eq!(seconds_of_ns(1_500_000_000), 1.5);
        // not a whole second: the nanoseconds as a float, divided by 1e9
        assert_eq!(seconds_of_ns(86_400_123_456_789), 86_400_123_456_789_f64 / 1e9);
        assert_eq!(seconds_of_ns(123_456_789).to_bits(), (0.123456789_f64).to_bits());
    }

    #[test]
    fn a_returned_body_is_past_its_end_by_the_time_it_took_or_the_clock() {
        let never_f = || -> f64 { panic!("not asked") };
        let never = || -> Result<f64, ()> { panic!("not asked") };
        assert_eq!(returned_past(None, Some(1.0), never_f, never), Ok(false));
        assert_eq!(returned_past(Some(5.0), Some(1.0), || 1.5, never), Ok(true));
        assert_eq!(returned_past(Some(5.0), Some(1.0), || 1.0, never), Ok(false));
        assert_eq!(returned_past(Some(5.0), None, never_f, || Ok::<_, ()>(5.5)), Ok(true));
        assert_eq!(returned_past(Some(5.0), None, never_f, || Ok::<_, ()>(5.0)), Ok(false));
        assert_eq!(returned_past(Some(5.0), None, never_f, || Err(())), Err(()));
    }

    #[test]
    fn only_a_success_taken_past_the_deadline_is_a_timeout() {
        let never = || -> Result<bool, ()> { panic!("not asked") };
        assert_eq!(taken_timed_out(true, || Ok::<_, ()>(true)), Ok(true));
        assert_eq!(taken_timed_out(true, || Ok::<_, ()>(false)), Ok(false));
        // what the body raised stands, past the deadline too: the clock is not even read
        assert_eq!(taken_timed_out(false, never), Ok(false));
        assert_eq!(taken_timed_out(true, || Err(())), Err(()));
    }

    #[test]
    fn an_abort_waits_one_bound_shared_by_its_segments() {
        let now = Instant::now();
        let until = abort_until(now);
        assert_eq!(until - now, Duration::from_secs(1));
        assert_eq!(abort_bound(None, now), (until, true));
        let held = now + Duration::from_millis(300);
        assert_eq!(
            abort_bound(Some((true, held)), now + Duration::from_millis(900)),
            (held, false)
        );
        // a bound left for another exception is not this abort's: a new one, left in its place
        assert_eq!(abort_bound(Some((false, held)), now), (until, true));
        assert_eq!(left_until(until, now + Duration::from_millis(250)), 0.75);
        assert_eq!(left_until(until, until + Duration::from_millis(1)), 0.0);
    }

    #[test]
    fn end_arithmetic() {
        assert_eq!(end_of(10.0, Some(2.5)), Some(12.5));
        assert_eq!(end_of(10.0, None), None);
        assert_eq!(end_since(10.0, 1.0, Some(2.5)), Some(11.5));
        assert_eq!(end_since(10.0, 1.0, None), None);
        assert!(!passed(12.5, Some(12.5)));
        assert!(passed(12.6, Some(12.5)));
        assert!(!passed(1e9, None));
        assert!(never_starts(Some(0.0)));
        assert!(never_starts(Some(-1.0)));
        assert!(!never_starts(Some(0.001)));
        assert!(!never_starts(None));
        assert_eq!(delivered(3, true), 2);
        assert_eq!(delivered(3, false), 3);
        assert!(overran(Some(1.0), || 1.5));
        assert!(!overran(Some(1.0), || 1.0));
        assert!(!overran(None, || panic!("no limit: not read")));
    }

    #[test]
    fn instant_after_clamps() {
        let now = Instant::now();
        assert_eq!(instant_after(now, None), None);
        assert_eq!(instant_after(now, Some(f64::NAN)), Some(now));
        assert_eq!(instant_after(now, Some(-3.0)), Some(now));
        assert_eq!(instant_after(now, Some(1.5)), Some(now + Duration::from_millis(1500)));
        assert_eq!(instant_after(now, Some(f64::INFINITY)), None);
        assert_eq!(instant_after(now, Some(1e300)), None);
    }

    #[test]
    fn leaving_an_expired_deadline() {
        // A counting task: its count after withdrawing the deadline's request, against entry.
        assert_eq!(left(Some(0), 0, false, Ended::Success), Left::Timeout);
        assert_eq!(left(Some(0), 0, false, Ended::Cancelled), Left::Timeout);
        assert_eq!(left(Some(0), 0, false, Ended::Raised), Left::AsIs);
        assert_eq!(left(Some(1), 0, false, Ended::Cancelled), Left::AsIs);
        assert_eq!(left(Some(1), 1, false, Ended::Cancelled), Left::Timeout);
        // (a counting task ignores `by_caller`)
        assert_eq!(left(Some(0), 0, true, Ended::Cancelled), Left::Timeout);
        // A task that does not count: the caller says.
        assert_eq!(left(None, 0, true, Ended::Cancelled), Left::AsIs);
        assert_eq!(left(None, 0, false, Ended::Cancelled), Left::Timeout);
        assert_eq!(left(None, 0, false, Ended::Success), Left::Timeout);
        assert_eq!(left(None, 0, false, Ended::Raised), Left::AsIs);
    }

    #[test]
    fn timers_arm_for_the_earliest() {
        let mut t: Timers<&str> = Timers::new();
        let (a, arm) = t.add(5.0, "a");
        assert!(arm);
        t.set_armed(Some(5.0));
        let (_, arm) = t.add(7.0, "b");
        assert!(!arm);
        let (c, arm) = t.add(3.0, "c");
        assert!(arm);
        t.set_armed(Some(3.0));
        assert_eq!(t.live(), 3);
        // Fired at 3.0 (resolution 0.001): only c is due; next is a at 5.0.
        let (due, next) = t.fire(3.0, 0.001, |t| *t);
        assert_eq!(due, vec!["c"]);
        assert_eq!(next, Some(5.0));
        assert!(t.expired(c));
        assert!(!t.expired(a));
        assert_eq!(t.live(), 2);
        // Leaving: c had expired, a had not.
        assert!(t.remove(c));
        assert!(!t.remove(a));
        assert!(!t.remove(a)); // left once
        assert_eq!(t.live(), 1);
        // a's heap entry is dropped lazily: firing at 10 expires b only.
        let (due, next) = t.fire(10.0, 0.0, |t| *t);
        assert_eq!(due, vec!["b"]);
        assert_eq!(next, None);
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn a_timer_fires_up_to_the_resolution_early_and_is_armed_no_earlier_than_now() {
        let mut t: Timers<u8> = Timers::new();
        t.add(2.0, 1);
        t.add(2.002, 2);
        // Fired at 1.9995 with a 1 ms resolution: the entry at 2.0 is due, the one at 2.002 not.
        assert_eq!(t.fire(1.9995, 0.001, |t| *t), (vec![1], Some(2.002)));
        assert_eq!(timer_delay(2.5, 2.0), 0.5);
        assert_eq!(timer_delay(1.0, 2.0), 0.0);
    }

    #[test]
    fn timers_forget_everything_when_none_is_pending() {
        let mut t: Timers<u8> = Timers::new();
        let (a, _) = t.add(1.0, 1);
        let (b, _) = t.add(2.0, 2);
        t.set_armed(Some(1.0));
        assert!(!t.remove(a));
        assert!(!t.remove(b));
        assert_eq!(t.live(), 0);
        assert_eq!(t.fire(100.0, 0.0, |t| *t), (vec![], None));
        assert_eq!(t.tasks().count(), 0);
        // An entry later than the armed timer does not re-arm it; one with nothing armed does.
        let (_, arm) = t.add(5.0, 3);
        assert!(arm);
        t.set_armed(Some(5.0));
        let (_, arm) = t.add(5.0, 4);
        assert!(!arm);
        assert_eq!(t.tasks().count(), 2);
        t.clear();
        assert_eq!(t.live(), 0);
        assert_eq!(t.tasks().count(), 0);
    }
}
