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
    fn drop(&mut self) {
        GATE.leave();
    }
}

/// Enter the core from Python; once the interpreter is exiting, any thread but the exiting one
/// parks here for good, with the interpreter lock released.
#[inline]
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let close = wrap_pyfunction!(_close_exit_gate, m)?;
    py.import("atexit")?.call_method1("register", (close,))?;
    #[cfg(unix)]
    {
        extern "C" {
            fn pthread_atfork(
                prepare: Option<extern "C" fn()>,
                parent: Option<extern "C" fn()>,
                child: Option<extern "C" fn()>,
            ) -> std::ffi::c_int;
        }
        // SAFETY: registers a handler that touches only the gate's atomics and this thread's
        // counter (once per process: the module is initialized once).
        if unsafe { pthread_atfork(None, None, Some(gate_after_fork)) } != 0 {
            return Err(pyo3::exceptions::PyOSError::new_err(
                "could not register the exit gate's fork handler",
            ));
        }
    }
    Ok(())
}
