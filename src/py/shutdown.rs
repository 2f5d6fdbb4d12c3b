//! The exit gate (`crate::shutdown`) for Python: each entry point of the binding, per call or at
//! definition time, counts itself in with [`inside`] as its first statement (the exceptions, and
//! why, are listed in `tests/test_exit_gate_entries.py`, which checks this). When the
//! interpreter starts exiting (an `atexit` hook, which runs before finalization, after the
//! non-daemon threads were joined) the gate closes, the exiting
//! thread waits with the interpreter lock released until no other thread is inside (at most
//! [`EXIT_WAIT`]), and a thread that enters afterwards parks for good with the lock released.
//! So no thread runs Python code under the core's frames while the interpreter finalizes: before
//! Python 3.14 such a thread, waiting to re-take the lock, is unwound by `pthread_exit` through
//! those frames, which aborts the process or crashes it. (A thread waiting in the core with the
//! lock released re-takes it through pyo3, which parks it instead during finalization.) A thread
//! still inside when the wait ends (a callback of the host that blocks) is not waited for.
use std::time::Instant;

use pyo3::prelude::*;

use crate::shutdown::{park_forever, Entry, ExitGate, EXIT_WAIT};

static GATE: ExitGate = ExitGate::new();

/// One thread's entry into the core (leaves when dropped).
pub(crate) struct Inside(());

impl Drop for Inside {
    #[inline(always)]
    fn drop(&mut self) {
        GATE.leave();
    }
}

/// Enter the core from Python; once the interpreter is exiting, any thread but the exiting one
/// parks here for good, with the interpreter lock released.
#[inline(always)]
pub(crate) fn inside(py: Python<'_>) -> Inside {
    if GATE.enter() == Entry::Park {
        py.detach(|| -> () { park_forever() });
    }
    Inside(())
}

/// Whether the interpreter is exiting (the gate is closed): what only a running loop would
/// use is not worth entering the core for then (a drop that would park instead).
pub(crate) fn exiting() -> bool {
    GATE.is_closed()
}

/// Run `f` for a guard dropped with work left for Python (leave a deadline, unwatch a body):
/// with the interpreter lock, through the gate, and not at all once the interpreter is exiting
/// (no loop will run what it would undo).
pub(crate) fn when_dropped(f: impl FnOnce(Python<'_>)) {
    Python::attach(|py| {
        if exiting() {
            return;
        }
        let _in = inside(py);
        f(py);
    });
}

/// The `atexit` hook: close the gate, then wait (lock released) for the threads inside to leave.
#[pyfunction]
fn _close_exit_gate(py: Python<'_>) -> bool {
    GATE.close();
    py.detach(|| GATE.wait_empty(Instant::now() + EXIT_WAIT))
}

/// In the child of a fork, run by the C library before `fork()` returns there (for `os.fork`
/// and for a fork that runs none of Python's fork hooks alike): the parent's other threads do
/// not exist there. Only atomics and this thread's own counter are touched.
#[cfg(unix)]
extern "C" fn gate_after_fork() {
    GATE.after_fork();
}

/// Have the C library run `handler` in the child of every fork of this process, before `fork()`
/// returns there: `os.fork`, and a fork that runs none of Python's fork hooks (a C extension's,
/// or `ctypes.PyDLL(None).fork()`). False when it could not be registered. The handler runs in a
/// process with one thread, possibly while another thread of the parent held a lock: it may
/// only touch atomics and its own thread's state.
#[cfg(unix)]
pub(crate) fn in_fork_child(handler: extern "C" fn()) -> bool {
    extern "C" {
        fn pthread_atfork(
            prepare: Option<extern "C" fn()>,
            parent: Option<extern "C" fn()>,
            child: Option<extern "C" fn()>,
        ) -> std::ffi::c_int;
    }
    // SAFETY: registers a function pointer; what the handler may do is the caller's promise above.
    unsafe { pthread_atfork(None, None, Some(handler)) == 0 }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let close = wrap_pyfunction!(_close_exit_gate, m)?;
    py.import("atexit")?.call_method1("register", (close,))?;
    // The gate's handler touches only its atomics and this thread's counter (registered once per
    // process: the module is initialized once).
    #[cfg(unix)]
    if !in_fork_child(gate_after_fork) {
        return Err(pyo3::exceptions::PyOSError::new_err(
            "could not register the exit gate's fork handler",
        ));
    }
    Ok(())
}
