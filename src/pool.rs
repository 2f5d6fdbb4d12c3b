//! The accounting of the pool of worker threads that run sync tool bodies: how many threads
//! there are, how many are held by a call that overran its deadline, and where each job is.
//!
//! - At most `max_workers` threads run calls within their deadline (more calls queue). A
//!   thread whose call overran its deadline (its caller gave up: [`Accounts::give_up`]) stops
//!   counting against that limit, up to `max_stuck` such threads on top; when every thread is
//!   held by an overrun call and no other may start, a call is refused
//!   ([`Reserve::Saturated`]) instead of waiting for a timeout.
//! - A job is queued, then running (a worker took it within its deadline and its caller still
//!   waits), abandoned (its caller gave up while it runs: the thread is stuck until the body
//!   returns) or done. A job its caller gave up on before a worker took it, or whose deadline
//!   passed while it was queued, never starts.
//!
//! The waiting (workers for jobs, callers for results) is [`crate::handoff`]; nothing here knows
//! about Python or threads: the binding starts the threads and runs the bodies.
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Threads whose call overran its deadline tolerated on top of the workers limit.
pub const MAX_STUCK: usize = 256;

/// Threads that run calls within their deadline for a machine of `cpus` CPUs (tool bodies block
/// on I/O, so more than the CPU count): 8 per CPU, at least 32, at most 256. A machine whose CPU
/// count cannot be read (None) counts as [`CPUS_UNKNOWN`].
pub fn max_workers(cpus: Option<usize>) -> usize {
    (cpus.unwrap_or(CPUS_UNKNOWN) * 8).clamp(32, 256)
}

/// The CPUs a machine that does not tell its count is taken to have.
pub const CPUS_UNKNOWN: usize = 4;

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const ABANDONED: u8 = 2;
const DONE: u8 = 3;

/// Where a job is; changed only under its pool's lock (an atomic so that a job can be shared
/// between threads without a lock of its own).
#[derive(Debug, Default)]
pub struct JobState(AtomicU8);

impl JobState {
    pub fn new() -> Self {
        JobState(AtomicU8::new(QUEUED))
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, s: u8) {
        self.0.store(s, Ordering::Relaxed);
    }
}

/// What a caller must do when no idle worker could be promised its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserve {
    /// Queue it: every thread allowed is busy with calls within their deadline.
    Queue,
    /// Start a thread for it (counted already; [`Accounts::spawn_failed`] if it cannot start),
    /// then queue it.
    Spawn,
    /// Refuse it: all this many threads are held by calls that overran their deadline.
    Saturated(usize),
}

#[derive(Debug, Default)]
struct Counts {
    /// Threads alive (started, or about to be).
    threads: usize,
    /// Threads running a call whose caller gave up at its deadline.
    stuck: usize,
}

/// The pool's counts and its jobs' states (see the module).
#[derive(Debug)]
pub struct Accounts {
    counts: Mutex<Counts>,
    max_workers: usize,
    max_stuck: usize,
}

impl Accounts {
    pub fn new(max_workers: usize, max_stuck: usize) -> Self {
        Accounts {
            counts: Mutex::new(Counts::default()),
            max_workers,
            max_stuck,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        // Nothing panics while holding it; a poisoned one still holds consistent counts.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No idle worker could be promised the next job: start a thread, queue, or refuse.
    pub fn reserve(&self) -> Reserve {
        let mut c = self.lock();
        if c.threads - c.stuck >= self.max_workers {
            return Reserve::Queue;
        }
        if c.threads >= self.max_workers + self.max_stuck {
            if c.threads == c.stuck {
                return Reserve::Saturated(c.stuck);
            }
            return Reserve::Queue;
        }
        c.threads += 1;
        Reserve::Spawn
    }

    /// The thread [`Reserve::Spawn`] counted could not start.
    pub fn spawn_failed(&self) {
        self.lock().threads -= 1;
    }

    /// A worker took `job`: true when it runs it (now running); false when its caller gave up
    /// already or it is `expired` (its deadline passed while queued): it never starts.
    pub fn start(&self, job: &JobState, expired: bool) -> bool {
        let _c = self.lock();
        let run = job.get() == QUEUED && !expired;
        job.set(if run { RUNNING } else { DONE });
        run
    }

    /// The worker finished `job`: true when its caller still waits for the outcome; false when
    /// it gave up (the thread is no longer stuck).
    pub fn finish(&self, job: &JobState) -> bool {
        let mut c = self.lock();
        let abandoned = job.get() == ABANDONED;
        if abandoned {
            c.stuck -= 1;
        }
        job.set(DONE);
        !abandoned
    }

    /// The caller stopped waiting for `job` (its deadline, its own cancellation): a queued job
    /// never starts; a running one stops counting against the workers limit.
    pub fn give_up(&self, job: &JobState) {
        let mut c = self.lock();
        match job.get() {
            QUEUED => job.set(DONE),
            RUNNING => {
                job.set(ABANDONED);
                c.stuck += 1;
            }
            _ => {}
        }
    }

    /// `(threads, stuck)`.
    pub fn sizes(&self) -> (usize, usize) {
        let c = self.lock();
        (c.threads, c.stuck)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_limit_from_the_cpu_count() {
        assert_eq!([1, 4, 5, 32, 64].map(|n| max_workers(Some(n))), [32, 32, 40, 256, 256]);
        assert_eq!(CPUS_UNKNOWN, 4);
        assert_eq!(max_workers(None), 32);
    }

    #[test]
    fn threads_start_up_to_the_limit_then_calls_queue() {
        let a = Accounts::new(2, 1);
        assert_eq!(
            [a.reserve(), a.reserve(), a.reserve()],
            [Reserve::Spawn, Reserve::Spawn, Reserve::Queue]
        );
        a.spawn_failed();
        assert_eq!(a.sizes(), (1, 0));
        assert_eq!(a.reserve(), Reserve::Spawn);
    }

    #[test]
    fn stuck_threads_make_room_up_to_their_cap_then_calls_are_refused() {
        let a = Accounts::new(1, 1);
        let jobs = [JobState::new(), JobState::new()];
        assert_eq!(a.reserve(), Reserve::Spawn);
        assert!(a.start(&jobs[0], false));
        a.give_up(&jobs[0]); // its caller timed out: the thread is stuck
        assert_eq!(a.sizes(), (1, 1));
        assert_eq!(a.reserve(), Reserve::Spawn); // one more thread, beyond the workers limit
        assert!(a.start(&jobs[1], false));
        a.give_up(&jobs[1]);
        assert_eq!(a.sizes(), (2, 2));
        assert_eq!(a.reserve(), Reserve::Saturated(2));
        assert!(!a.finish(&jobs[0])); // its body returned at last: nobody waits for it
        assert_eq!(a.sizes(), (2, 1));
        assert_eq!(a.reserve(), Reserve::Queue); // the freed thread takes the next job
    }

    #[test]
    fn a_job_given_up_or_expired_while_queued_never_starts() {
        let a = Accounts::new(4, 4);
        let (given_up, expired, fine) = (JobState::new(), JobState::new(), JobState::new());
        a.give_up(&given_up);
        assert!(!a.start(&given_up, false));
        assert!(!a.start(&expired, true));
        assert!(a.start(&fine, false));
        assert!(a.finish(&fine));
        a.give_up(&fine); // after it finished: nothing changes
        assert_eq!(a.sizes(), (0, 0));
    }
}
