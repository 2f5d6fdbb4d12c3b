//! Letting a process end while other threads are inside the library.
//!
//! A host interpreter that ends its process stops its remaining threads where they stand (before
//! Python 3.14, a thread that waits to run Python again at that point is unwound by
//! `pthread_exit`, whatever native frames it is in). A thread inside the library may be running
//! the host's code (a callback, a property, a finaliser) and so may be waiting to run again at
//! any moment; unwound through the library's frames, it takes the process down.
//!
//! [`ExitGate`] prevents that: every entry into the library from the host counts itself in
//! ([`ExitGate::enter`], leaving with [`ExitGate::leave`]). When the host starts ending the
//! process it closes the gate ([`ExitGate::close`]) and waits until no thread is inside
//! ([`ExitGate::wait_empty`]), letting those threads run meanwhile; from then on any other thread
//! that enters is told to park for good ([`Entry::Park`]) instead of running. The thread that
//! closed the gate (the one ending the process) still passes. An entry from a thread already
//! inside (the host's code called back into the library) counts once per thread; parked there, the
//! thread stops counting (it never runs again).
//!
//! Nothing here knows about Python; the binding layer enters at each of its entry points and
//! closes the gate when the interpreter starts exiting.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

thread_local! {
    /// Entries of this thread not yet left (nested ones included).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// What a thread entering the gate must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Go on (and call [`ExitGate::leave`] when done).
    Go,
    /// The process is ending: never run again (see [`park_forever`]); do not call `leave`.
    Park,
}

/// Counts the threads inside the library; once closed, turns every other thread away.
#[derive(Debug, Default)]
pub struct ExitGate {
    /// Threads with at least one entry not yet left.
    inside: AtomicUsize,
    closed: AtomicBool,
    closer: OnceLock<ThreadId>,
}

impl ExitGate {
    pub const fn new() -> Self {
        ExitGate {
            inside: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            closer: OnceLock::new(),
        }
    }

    /// Enter from the host. [`Entry::Park`] when the gate is closed and this is not the thread
    /// that closed it.
    #[inline]
    pub fn enter(&self) -> Entry {
        let depth = DEPTH.get();
        DEPTH.set(depth + 1);
        if depth == 0 {
            self.inside.fetch_add(1, Ordering::SeqCst);
        }
        if self.closed.load(Ordering::SeqCst) && self.closer.get() != Some(&std::thread::current().id()) {
            // Parked for good: this thread no longer counts (its entries are never left).
            self.inside.fetch_sub(1, Ordering::SeqCst);
            return Entry::Park;
        }
        Entry::Go
    }

    /// Leave after an [`Entry::Go`].
    #[inline]
    pub fn leave(&self) {
        let depth = DEPTH.get().saturating_sub(1);
        DEPTH.set(depth);
        if depth == 0 {
            self.inside.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The process is ending: from now on only the calling thread passes.
    pub fn close(&self) {
        let _ = self.closer.set(std::thread::current().id());
        self.closed.store(true, Ordering::SeqCst);
    }

    /// In a child process just forked: only the forking thread exists there, so only it can be
    /// inside (the other threads' entries were copied but will never be left).
    pub fn after_fork(&self) {
        self.inside.store(usize::from(DEPTH.get() > 0), Ordering::SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Threads inside now (the closing thread's own entries included).
    pub fn inside(&self) -> usize {
        self.inside.load(Ordering::SeqCst)
    }

    /// Wait until no thread is inside, or until `until`; true when none is. The caller must let
    /// the threads inside run meanwhile (for Python: wait with the interpreter lock released).
    pub fn wait_empty(&self, until: Instant) -> bool {
        // The closing thread waits from outside the gate (its own entry does not count then).
        loop {
            if self.inside() == 0 {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// How long the exiting thread waits for the threads inside the core to leave it (a thread
/// still inside then, a callback of the host that blocks, is not waited for).
pub const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Never return: the calling thread sleeps until the process ends.
pub fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn entries_count_once_per_thread_and_leave_in_pairs() {
        let g = ExitGate::new();
        assert_eq!(g.enter(), Entry::Go);
        assert_eq!(g.enter(), Entry::Go); // a callback re-entered
        assert_eq!(g.inside(), 1);
        g.leave();
        assert_eq!(g.inside(), 1);
        g.leave();
        assert_eq!(g.inside(), 0);
    }

    #[test]
    fn a_closed_gate_parks_other_threads_and_lets_the_closer_pass() {
        let g = Arc::new(ExitGate::new());
        g.close();
        assert!(g.is_closed());
        assert_eq!(g.enter(), Entry::Go);
        g.leave();
        let other = Arc::clone(&g);
        let seen = std::thread::spawn(move || (other.enter(), other.inside()))
            .join()
            .unwrap();
        assert_eq!(seen, (Entry::Park, 0));
        assert_eq!(g.inside(), 0);
    }

    #[test]
    fn a_thread_parked_on_re_entry_stops_counting() {
        let g = Arc::new(ExitGate::new());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (closed_tx, closed_rx) = std::sync::mpsc::channel::<()>();
        let inner = Arc::clone(&g);
        let t = std::thread::spawn(move || {
            assert_eq!(inner.enter(), Entry::Go);
            entered_tx.send(()).unwrap();
            closed_rx.recv().unwrap();
            inner.enter() // a callback calls back in after the gate closed
        });
        entered_rx.recv().unwrap();
        assert_eq!(g.inside(), 1);
        g.close();
        closed_tx.send(()).unwrap();
        assert_eq!(t.join().unwrap(), Entry::Park);
        assert_eq!(g.inside(), 0);
    }

    #[test]
    fn after_a_fork_only_the_forking_thread_counts() {
        let g = Arc::new(ExitGate::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = Arc::clone(&g);
        let t = std::thread::spawn(move || {
            assert_eq!(other.enter(), Entry::Go);
            tx.send(()).unwrap();
            done_rx.recv().unwrap();
            other.leave();
        });
        rx.recv().unwrap();
        assert_eq!(g.enter(), Entry::Go);
        assert_eq!(g.inside(), 2);
        g.after_fork(); // as the child of a fork made by this thread, inside the gate
        assert_eq!(g.inside(), 1);
        g.leave();
        assert_eq!(g.inside(), 0);
        g.after_fork();
        assert_eq!(g.inside(), 0);
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn wait_empty_returns_when_the_last_thread_leaves_or_at_the_deadline() {
        let g = Arc::new(ExitGate::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let inner = Arc::clone(&g);
        let t = std::thread::spawn(move || {
            assert_eq!(inner.enter(), Entry::Go);
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            inner.leave();
        });
        rx.recv().unwrap();
        g.close();
        assert!(!g.wait_empty(Instant::now() + Duration::from_millis(1)));
        assert!(g.wait_empty(Instant::now() + Duration::from_secs(10)));
        t.join().unwrap();
    }
}
