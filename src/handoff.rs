//! Hand-off between threads that submit work and the worker threads that run it, with as few
//! kernel wake-ups as possible.
//!
//! Waking a thread that sleeps in the kernel (a futex, a pipe) costs tens to hundreds of
//! microseconds on a loaded machine, far more than the work handed over. So a thread that waits
//! here first spins for a short, bounded time — the next item usually arrives within
//! microseconds when calls follow each other — and only then parks:
//!
//! - [`Mailbox`]: a FIFO of jobs for a pool of worker threads. Of the workers waiting for a job,
//!   at most one spins (the others park on a condition variable, woken one per job that the
//!   spinner cannot take); it also keeps the count of idle workers that the submitter uses to
//!   decide whether a new worker is needed ([`Mailbox::claim`]).
//! - [`Slot`]: a one-shot result cell. The producer stores the value ([`Slot::store`]) and makes
//!   it visible when it chooses ([`Slot::publish`]: after it has stopped needing any shared
//!   resource, so the waiter wakes to find nothing held); the waiter spins, then parks
//!   ([`Mailbox::wait_result`]); a waiter that stops waiting marks the slot ([`Slot::abandon`])
//!   so the producer knows nobody will read a value it publishes.
//! - [`Inbox`]: jobs for an event loop's own thread, which looks for them in its selector: while
//!   the loop has nothing else to do it spins there for the next job (bounded), so a submitter
//!   wakes it through the loop (its self-pipe) only when it is not spinning.
//! - [`Spin`]: the adaptive spin bound. Each wait is timed; the bound is [`SPIN_MAX`] while recent
//!   waits were shorter than that (spinning pays off) and shrinks to [`SPIN_MIN`] while they were
//!   longer (spinning would only burn CPU before parking anyway).
//!
//! Nothing here knows about Python; the binding layer releases the interpreter lock around these
//! waits.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest a waiting thread spins before it parks.
pub const SPIN_MAX: Duration = Duration::from_micros(50);
/// The spin bound while recent waits were longer than [`SPIN_MAX`].
pub const SPIN_MIN: Duration = Duration::from_micros(2);

/// A caller parked for a result with no event loop wakes at least this often, so that a signal
/// (Ctrl-C on the main thread) is handled while a long body runs.
pub const WAKE_SLICE: Duration = Duration::from_millis(50);

/// When a parked caller wakes next, at `now`, with `left` of its deadline (None: none): after
/// [`WAKE_SLICE`], or at its deadline if that comes first.
pub fn next_wake(now: Instant, left: Option<Duration>) -> Instant {
    now + left.map_or(WAKE_SLICE, |l| l.min(WAKE_SLICE))
}

/// Whether a deadline (None: none) is reached at `now`: a job still queued then never starts.
pub fn reached(now: Instant, deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| now >= d)
}

/// Whether a synchronous caller waiting for its coroutine's outcome on the loop's thread gives
/// up at `now`: a signal's exception is pending (`signalled`), or its deadline (None: none) is
/// reached ([`reached`]); the coroutine is then cancelled, or never starts.
#[inline]
pub fn gives_up(signalled: bool, now: Instant, deadline: Option<Instant>) -> bool {
    signalled || reached(now, deadline)
}

/// Whether the loop's thread, in its selector before it polls with `timeout` seconds (None:
/// until something happens), only answers whether calls are queued: nothing to publish
/// (`nothing_finished`) and no time to spin (`timeout` not above 0).
#[inline]
pub fn idle_at_once(nothing_finished: bool, timeout: Option<f64>) -> bool {
    nothing_finished && timeout.is_some_and(|t| t <= 0.0)
}

/// Whether an event loop has nothing to do within `bound` seconds: no callback ready, and its
/// next timer (when it has one, at `next_timer` on the loop's clock, now `now`) due later than
/// that. Its caller may then wait for a result briefly instead of suspending.
pub fn loop_idle(ready: bool, next_timer: Option<f64>, now: f64, bound: f64) -> bool {
    !ready && next_timer.is_none_or(|when| when > now + bound)
}

/// `m` locked, a poisoned lock too: nothing panics while holding the crate's locks, so a
/// poisoned one still holds consistent state (the one such helper of the crate).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An adaptive spin bound: a moving average of the waits recorded on it decides how long the
/// next waiter spins.
#[derive(Debug)]
pub struct Spin {
    /// Exponentially weighted moving average of recent waits, in nanoseconds (weight 1/8 for
    /// the newest wait, each wait capped at 8 × [`SPIN_MAX`] so one long idle period does not
    /// stop spinning for long).
    avg_ns: AtomicU64,
}

impl Default for Spin {
    fn default() -> Self {
        Spin {
            avg_ns: AtomicU64::new(0),
        }
    }
}

impl Spin {
    /// How long the next waiter spins before it parks.
    pub fn bound(&self) -> Duration {
        if self.avg_ns.load(Ordering::Relaxed) <= SPIN_MAX.as_nanos() as u64 {
            SPIN_MAX
        } else {
            SPIN_MIN
        }
    }

    /// Record how long a wait lasted (spinning and parked).
    pub fn record(&self, waited: Duration) {
        let cap = 8 * SPIN_MAX.as_nanos() as u64;
        let w = (waited.as_nanos() as u64).min(cap);
        let old = self.avg_ns.load(Ordering::Relaxed);
        // Races between recorders lose an update at worst: the average stays an estimate.
        self.avg_ns.store(old - old / 8 + w / 8, Ordering::Relaxed);
    }

    /// Wait for `slot` to be published, until `until` (None: for ever): spin first (at most
    /// this bound) when `spin`, then park when `park`. True when published, false when `until`
    /// passed, the spin ended without `park`, or the slot was abandoned.
    pub fn wait_result<V>(&self, slot: &Slot<V>, until: Option<Instant>, spin: bool, park: bool) -> bool {
        let started = Instant::now();
        if spin {
            let mut stop = started + self.bound();
            if let Some(u) = until {
                stop = stop.min(u);
            }
            if spin_until(stop, || slot.state.load(Ordering::Acquire) != EMPTY) {
                self.record(started.elapsed());
                return slot.state.load(Ordering::Acquire) == READY;
            }
            if !park {
                // Not known how long it would have taken: count it as a wait past the bound.
                self.record(started.elapsed() * 2);
                return false;
            }
        }
        let done = slot.park(until);
        self.record(started.elapsed());
        done
    }
}

/// Spin until `ready()` or `until`; true when ready. Between checks the thread yields its CPU
/// (`sched_yield`): on a machine with more runnable threads than cores, the thread that will
/// make `ready()` true may be waiting for this very core (measured on a loaded 2-core machine:
/// without the yield most spins ran out unanswered; with it nearly all were answered).
fn spin_until(until: Instant, ready: impl Fn() -> bool) -> bool {
    loop {
        for _ in 0..32 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        std::thread::yield_now();
        if Instant::now() >= until {
            return ready();
        }
    }
}

struct Queue<T> {
    items: VecDeque<(T, bool)>,
    /// Workers inside [`Mailbox::take`].
    waiting: usize,
    /// Claims ([`Mailbox::claim`]) whose job no worker has taken yet.
    promised: usize,
    /// Queued jobs put without a claim (each will take one worker too).
    unclaimed: usize,
    /// Workers parked on the condition variable.
    parked: usize,
    /// A worker is spinning for the next job.
    spinning: bool,
}

/// A FIFO of jobs for a pool of worker threads: waiting workers spin (one at a time), then park.
pub struct Mailbox<T> {
    queue: Mutex<Queue<T>>,
    wake: Condvar,
    /// `items.len()`, read by the spinning worker without the lock.
    queued: AtomicUsize,
    workers: Spin,
    results: Spin,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                waiting: 0,
                promised: 0,
                unclaimed: 0,
                parked: 0,
                spinning: false,
            }),
            wake: Condvar::new(),
            queued: AtomicUsize::new(0),
            workers: Spin::default(),
            results: Spin::default(),
        }
    }
}

impl<T> Mailbox<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Promise the next job to an idle worker: true when one was idle (it no longer counts as
    /// idle; pass `claimed = true` to [`Mailbox::put`]); false when every worker is busy (the
    /// caller may start another).
    pub fn claim(&self) -> bool {
        let mut q = lock(&self.queue);
        if q.waiting > q.promised + q.unclaimed {
            q.promised += 1;
            true
        } else {
            false
        }
    }

    /// Workers waiting for a job that no job has been promised to.
    pub fn idle(&self) -> usize {
        let q = lock(&self.queue);
        q.waiting.saturating_sub(q.promised + q.unclaimed)
    }

    /// Queue a job (`claimed`: an idle worker was promised to it by [`Mailbox::claim`]) and wake
    /// a parked worker unless the spinning one will take it.
    pub fn put(&self, job: T, claimed: bool) {
        let mut q = lock(&self.queue);
        q.items.push_back((job, claimed));
        if !claimed {
            q.unclaimed += 1;
        }
        self.queued.store(q.items.len(), Ordering::Release);
        let covered = usize::from(q.spinning);
        if q.parked > 0 && q.items.len() > covered {
            // A worker woken but not yet running still counts as parked: a second job may then
            // notify nobody, but only when no worker is really waiting (every woken worker takes
            // a job or parks again after checking the queue under this lock).
            self.wake.notify_one();
        }
    }

    /// The next job, waiting as long as it takes: the first waiting worker spins (bounded), the
    /// others park. Idle workers: those waiting here, less the jobs that will take one of
    /// them (claims whose job is not taken yet, queued jobs put without a claim); whichever
    /// worker takes which job, the count stays exact.
    pub fn take(&self) -> T {
        let mut q = lock(&self.queue);
        q.waiting += 1;
        let started = Instant::now();
        loop {
            if let Some((job, claimed)) = q.items.pop_front() {
                self.queued.store(q.items.len(), Ordering::Release);
                q.waiting -= 1;
                if claimed {
                    q.promised -= 1;
                } else {
                    q.unclaimed -= 1;
                }
                if !q.items.is_empty() && q.parked > 0 && !q.spinning {
                    self.wake.notify_one();
                }
                drop(q);
                self.workers.record(started.elapsed());
                return job;
            }
            if !q.spinning {
                q.spinning = true;
                drop(q);
                let until = Instant::now() + self.workers.bound();
                spin_until(until, || self.queued.load(Ordering::Acquire) > 0);
                q = lock(&self.queue);
                q.spinning = false;
                if !q.items.is_empty() {
                    continue;
                }
            }
            q.parked += 1;
            q = self.wake.wait(q).unwrap_or_else(|e| e.into_inner());
            q.parked -= 1;
        }
    }

    /// Wait for `slot` to be published (see [`Spin::wait_result`], with the bound of this
    /// mailbox's results).
    pub fn wait_result<V>(&self, slot: &Slot<V>, until: Option<Instant>, spin: bool, park: bool) -> bool {
        self.results.wait_result(slot, until, spin, park)
    }
}

struct Inboxed<T> {
    items: VecDeque<T>,
    /// The loop's thread is spinning for a job ([`Inbox::idle`]).
    spinning: bool,
    /// A wake-up through the loop is on its way (a submitter was told to wake it).
    woken: bool,
}

/// Jobs for an event loop's own thread (see the module): submitters [`Inbox::put`] them, the
/// loop's thread looks for them in its selector ([`Inbox::idle`]) and takes them all
/// ([`Inbox::drain`]).
pub struct Inbox<T> {
    state: Mutex<Inboxed<T>>,
    /// `items.len()`, read by the spinning thread without the lock.
    queued: AtomicUsize,
    spin: Spin,
}

impl<T> Default for Inbox<T> {
    fn default() -> Self {
        Inbox {
            state: Mutex::new(Inboxed {
                items: VecDeque::new(),
                spinning: false,
                woken: false,
            }),
            queued: AtomicUsize::new(0),
            spin: Spin::default(),
        }
    }
}

impl<T> Inbox<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue a job: true when the submitter must wake the loop's thread through the loop (it is
    /// not spinning for a job, and no wake-up is on its way already); it then takes the job by
    /// [`Inbox::drain`].
    pub fn put(&self, job: T) -> bool {
        let mut st = lock(&self.state);
        st.items.push_back(job);
        self.queued.store(st.items.len(), Ordering::Release);
        if st.spinning || st.woken {
            return false;
        }
        st.woken = true;
        true
    }

    /// The loop's thread has nothing else to do for `timeout` (None: until something happens):
    /// it spins for a job, at most the adaptive bound and never past `timeout`. True when jobs
    /// are queued (take them with [`Inbox::drain`]); a job put while it spun needs no wake-up.
    pub fn idle(&self, timeout: Option<Duration>) -> bool {
        let started = Instant::now();
        {
            let mut st = lock(&self.state);
            if !st.items.is_empty() {
                return true;
            }
            if timeout.is_some_and(|t| t.is_zero()) {
                return false;
            }
            st.spinning = true;
        }
        let bound = timeout.map_or(self.spin.bound(), |t| t.min(self.spin.bound()));
        let came = spin_until(started + bound, || self.queued.load(Ordering::Acquire) > 0);
        let mut st = lock(&self.state);
        st.spinning = false;
        // One that ran out: not known how long a job would have taken, a wait past the bound.
        self.spin
            .record(if came { started.elapsed() } else { started.elapsed() * 2 });
        !st.items.is_empty()
    }

    /// Whether a job is queued (a glance, without the lock).
    pub fn has_jobs(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0
    }

    /// Every job queued, in order; a wake-up through the loop that was on its way is done.
    pub fn drain(&self) -> VecDeque<T> {
        let mut st = lock(&self.state);
        st.woken = false;
        self.queued.store(0, Ordering::Release);
        std::mem::take(&mut st.items)
    }
}

const EMPTY: u8 = 0;
const READY: u8 = 1;
const GONE: u8 = 2;

/// A one-shot result cell between one producer and one waiter.
pub struct Slot<V> {
    state: AtomicU8,
    value: Mutex<Option<V>>,
    parked: AtomicBool,
    wake: Condvar,
}

impl<V> Default for Slot<V> {
    fn default() -> Self {
        Slot {
            state: AtomicU8::new(EMPTY),
            value: Mutex::new(None),
            parked: AtomicBool::new(false),
            wake: Condvar::new(),
        }
    }
}

impl<V> Slot<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Put the value in, not yet visible to the waiter (see [`Slot::publish`]).
    pub fn store(&self, v: V) {
        *lock(&self.value) = Some(v);
    }

    /// Make the stored value visible and wake the waiter if it parked. False when the waiter
    /// abandoned the slot first: the value stays in the slot for the producer ([`Slot::take`]).
    pub fn publish(&self) -> bool {
        if self
            .state
            .compare_exchange(EMPTY, READY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        if self.parked.load(Ordering::Acquire) {
            let _g = lock(&self.value);
            self.wake.notify_all();
        }
        true
    }

    /// The waiter stops waiting: true when the slot was not yet published (a value published
    /// later stays with its producer), false when it was (take it).
    pub fn abandon(&self) -> bool {
        self.state
            .compare_exchange(EMPTY, GONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Published (and not yet taken)?
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// Look at the stored value without waiting (nothing when there is none or the cell is
    /// locked right now): for a garbage collector's traversal.
    pub fn peek<R>(&self, f: impl FnOnce(&V) -> R) -> Option<R> {
        match self.value.try_lock() {
            Ok(g) => g.as_ref().map(f),
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner().as_ref().map(f),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Take the stored value out (None when there is none).
    pub fn take(&self) -> Option<V> {
        lock(&self.value).take()
    }

    fn park(&self, until: Option<Instant>) -> bool {
        let mut g = lock(&self.value);
        self.parked.store(true, Ordering::SeqCst);
        loop {
            match self.state.load(Ordering::SeqCst) {
                READY => return true,
                GONE => return false,
                _ => {}
            }
            match until {
                None => g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(u) => {
                    let now = Instant::now();
                    if now >= u {
                        return false;
                    }
                    g = self.wake.wait_timeout(g, u - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_caller_gives_up_on_a_signal_or_at_its_deadline() {
        let now = Instant::now();
        let later = now + Duration::from_millis(5);
        assert!(!gives_up(false, now, None));
        assert!(gives_up(true, now, None));
        assert!(!gives_up(false, now, Some(later)));
        assert!(gives_up(false, later, Some(later)));
        assert!(gives_up(false, later + Duration::from_millis(1), Some(later)));
        assert!(gives_up(true, now, Some(later)));
    }

    #[test]
    fn the_loop_thread_answers_at_once_only_with_nothing_to_publish_and_no_time_to_spin() {
        assert!(idle_at_once(true, Some(0.0)));
        assert!(idle_at_once(true, Some(-1.0)));
        assert!(!idle_at_once(true, Some(0.001)));
        assert!(!idle_at_once(true, None));
        assert!(!idle_at_once(false, Some(0.0)));
    }
    use std::sync::Arc;
    use std::thread;

    #[test]
    fn an_inbox_asks_for_one_wake_up_until_drained_and_none_while_spinning() {
        let b: Inbox<u32> = Inbox::new();
        assert!(!b.idle(Some(Duration::ZERO))); // nothing queued, no time to spin
        assert!(!b.has_jobs());
        assert!(b.put(1)); // not spinning: wake it
        assert!(!b.put(2)); // a wake-up is on its way
        assert!(b.has_jobs());
        assert!(b.idle(Some(Duration::from_secs(5)))); // queued: at once
        assert_eq!(b.drain(), [1, 2]);
        assert!(b.drain().is_empty());
        assert!(b.put(3)); // drained: the next needs a wake-up again
        assert_eq!(b.drain(), [3]);

        let t = Instant::now();
        assert!(!b.idle(Some(Duration::from_micros(20)))); // spins until the timeout at most
        assert!(t.elapsed() >= Duration::from_micros(20));
        let t = Instant::now();
        assert!(!b.idle(Some(Duration::from_secs(5)))); // and at most the spin bound
        assert!(t.elapsed() < Duration::from_secs(1));

        // A job put while the loop's thread spins needs no wake-up: the spin takes it.
        lock(&b.state).spinning = true;
        assert!(!b.put(4));
        lock(&b.state).spinning = false;
        assert!(b.idle(None));
        assert_eq!(b.drain(), [4]);

        // Across threads: the spinner sees a job put by another thread.
        let b: Arc<Inbox<u32>> = Arc::new(Inbox::new());
        let b2 = b.clone();
        let h = thread::spawn(move || b2.put(5));
        let t = Instant::now();
        while !b.idle(Some(Duration::from_millis(1))) {
            assert!(t.elapsed() < Duration::from_secs(5));
        }
        h.join().unwrap();
        assert_eq!(b.drain(), [5]);
    }

    #[test]
    fn slot_hands_over_once_and_abandon_keeps_a_late_value_with_its_producer() {
        let s: Slot<u32> = Slot::new();
        s.store(7);
        assert!(!s.is_ready());
        assert!(s.publish());
        assert!(!s.abandon());
        assert_eq!(s.take(), Some(7));
        assert_eq!(s.take(), None);

        let s: Slot<u32> = Slot::new();
        assert!(s.abandon());
        s.store(9);
        assert!(!s.publish());
        assert_eq!(s.take(), Some(9));
    }

    #[test]
    fn a_waiter_times_out_then_a_later_result_is_not_seen_as_published() {
        let m: Mailbox<u32> = Mailbox::new();
        let s: Slot<u32> = Slot::new();
        let t = Instant::now();
        assert!(!m.wait_result(&s, Some(t + Duration::from_millis(20)), true, true));
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert!(s.abandon());
        s.store(1);
        assert!(!s.publish());
    }

    #[test]
    fn a_parked_waiter_is_woken_by_publish() {
        let m: Arc<Mailbox<u32>> = Arc::new(Mailbox::new());
        let s: Arc<Slot<u32>> = Arc::new(Slot::new());
        let (m2, s2) = (m.clone(), s.clone());
        let h = thread::spawn(move || m2.wait_result(&s2, None, false, true));
        thread::sleep(Duration::from_millis(30));
        s.store(5);
        assert!(s.publish());
        assert!(h.join().unwrap());
        assert_eq!(s.take(), Some(5));
    }

    #[test]
    fn claims_count_idle_workers_exactly() {
        let m: Arc<Mailbox<u32>> = Arc::new(Mailbox::new());
        assert!(!m.claim());
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || m.take())
            })
            .collect();
        while m.idle() < 3 {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(m.claim());
        assert!(m.claim());
        assert_eq!(m.idle(), 1);
        m.put(1, true);
        m.put(2, true);
        m.put(3, false);
        let mut got: Vec<u32> = workers.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(m.idle(), 0);
    }

    /// Many producers and many workers, jobs pushed in bursts while workers spin and park:
    /// every job is taken exactly once and no worker sleeps through a job (the test would hang).
    #[test]
    fn every_job_is_taken_exactly_once_under_contention() {
        const WORKERS: usize = 6;
        const PRODUCERS: usize = 4;
        const PER: u64 = 5_000;
        let m: Arc<Mailbox<u64>> = Arc::new(Mailbox::new());
        let done: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
        let workers: Vec<_> = (0..WORKERS)
            .map(|_| {
                let (m, done) = (m.clone(), done.clone());
                thread::spawn(move || loop {
                    let j = m.take();
                    if j == u64::MAX {
                        return;
                    }
                    lock(&done).push(j);
                })
            })
            .collect();
        let producers: Vec<_> = (0..PRODUCERS as u64)
            .map(|p| {
                let m = m.clone();
                thread::spawn(move || {
                    for i in 0..PER {
                        let claimed = m.claim();
                        m.put(p * PER + i, claimed);
                        if i % 97 == 0 {
                            thread::sleep(Duration::from_micros(200)); // let workers park
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let total = PRODUCERS as u64 * PER;
        let t = Instant::now();
        while (lock(&done).len() as u64) < total {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "jobs stranded: {} of {total}",
                lock(&done).len()
            );
            thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..WORKERS {
            m.put(u64::MAX, false);
        }
        for w in workers {
            w.join().unwrap();
        }
        let mut got = lock(&done).clone();
        got.sort_unstable();
        assert_eq!(got, (0..total).collect::<Vec<_>>());
    }

    /// A result slot per job, the producer publishing from a worker while the waiter spins,
    /// parks or gives up at a tiny deadline: each value reaches exactly one side (the waiter,
    /// or its producer after an abandon).
    #[test]
    fn each_result_reaches_exactly_one_side() {
        let m: Arc<Mailbox<Arc<Slot<u64>>>> = Arc::new(Mailbox::new());
        let back = Arc::new(AtomicU64::new(0));
        let worker = {
            let (m, back) = (m.clone(), back.clone());
            thread::spawn(move || loop {
                let s = m.take();
                if s.take().is_some() {
                    return; // the stop marker: a slot that came with a value
                }
                s.store(1);
                if !s.publish() {
                    back.fetch_add(s.take().unwrap(), Ordering::Relaxed);
                }
            })
        };
        let mut seen = 0u64;
        const N: u64 = 20_000;
        for i in 0..N {
            let s: Arc<Slot<u64>> = Arc::new(Slot::new());
            m.put(s.clone(), false);
            let until = Instant::now() + Duration::from_nanos(i % 5 * 700);
            if m.wait_result(&s, Some(until), i % 3 != 0, i % 7 != 0) || !s.abandon() {
                seen += s.take().unwrap();
            }
        }
        let stop: Arc<Slot<u64>> = Arc::new(Slot::new());
        stop.store(0);
        m.put(stop, false);
        worker.join().unwrap();
        assert_eq!(seen + back.load(Ordering::Relaxed), N);
        assert!(seen > 0);
    }

    /// Waiters with no deadline, half of them parking at once: a lost wake-up hangs the test.
    #[test]
    fn no_wake_up_is_lost_by_waiters_without_a_deadline() {
        let m: Arc<Mailbox<Arc<Slot<u64>>>> = Arc::new(Mailbox::new());
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || loop {
                    let s = m.take();
                    if s.take().is_some() {
                        return;
                    }
                    s.store(1);
                    assert!(s.publish());
                })
            })
            .collect();
        let mut seen = 0;
        for i in 0..20_000u64 {
            let s: Arc<Slot<u64>> = Arc::new(Slot::new());
            m.put(s.clone(), m.claim());
            assert!(m.wait_result(&s, None, i % 2 == 0, true));
            seen += s.take().unwrap();
        }
        for _ in 0..3 {
            let stop: Arc<Slot<u64>> = Arc::new(Slot::new());
            stop.store(0);
            m.put(stop, false);
        }
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(seen, 20_000);
    }

    /// A worker takes an earlier, unclaimed job while a claim counted on it: the idle count
    /// never exceeds the workers waiting (it once did, and grew by one per such race).
    #[test]
    fn idle_never_exceeds_the_workers_waiting() {
        let m: Arc<Mailbox<u32>> = Arc::new(Mailbox::new());
        m.put(1, false); // queued before any worker
        let w = {
            let m = m.clone();
            thread::spawn(move || (m.take(), m.take()))
        };
        // While job 1 is queued the waiting worker is its: no idle worker to promise to job 2
        // (once job 1 is taken and the worker waits again, there is).
        let claimed = m.claim();
        m.put(2, claimed);
        assert_eq!(w.join().unwrap(), (1, 2));
        assert_eq!(m.idle(), 0);
        let w = {
            let m = m.clone();
            thread::spawn(move || m.take())
        };
        while m.idle() < 1 {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(m.idle(), 1);
        m.put(3, m.claim());
        assert_eq!(w.join().unwrap(), 3);
        assert_eq!(m.idle(), 0);
    }

    #[test]
    fn waking_and_deadlines() {
        let now = Instant::now();
        assert_eq!(next_wake(now, None), now + WAKE_SLICE);
        assert_eq!(
            next_wake(now, Some(Duration::from_millis(5))),
            now + Duration::from_millis(5)
        );
        assert_eq!(next_wake(now, Some(Duration::from_secs(5))), now + WAKE_SLICE);
        assert!(!reached(now, None));
        assert!(reached(now, Some(now)));
        assert!(!reached(now, Some(now + Duration::from_millis(1))));
        assert!(loop_idle(false, None, 10.0, 0.00005));
        assert!(!loop_idle(true, None, 10.0, 0.00005));
        assert!(loop_idle(false, Some(10.001), 10.0, 0.00005));
        assert!(!loop_idle(false, Some(10.00004), 10.0, 0.00005));
    }
}
