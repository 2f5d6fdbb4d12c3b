//! The exit gate (`crate::shutdown`) for Python: each per-call entry point of the binding counts
//! itself in with [`inside`]; when the interpreter starts exiting (an `atexit` hook, which runs
//! before finalization, after the non-daemon threads were joined) the gate closes, the exiting
//! thread waits with the interpreter lock released until no other thread is inside (at most
//! [`EXIT_WAIT`]), and a thread that enters afterwards parks for good with the lock released.
//! So no thread runs Python code under the core's frames while the interpreter finalizes: before
//! Python 3.14 such a thread, waiting to re-take the lock, is unwound by `pthread_exit` through
//! those frames, which aborts the process or crashes it. (A thread waiting in the core with the
//! lock released re-takes it through pyo3, which parks it instead during finalization.)
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::shutdown::{park_forever, Entry, ExitGate};

static GATE: ExitGate = ExitGate::new();

/// How long the exiting thread waits for the threads inside the core to leave it.
const EXIT_WAIT: Duration = Duration::from_secs(2);

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

/// The `atexit` hook: close the gate, then wait (lock released) for the threads inside to leave.
#[pyfunction]
fn _close_exit_gate(py: Python<'_>) -> bool {
    GATE.close();
    py.detach(|| GATE.wait_empty(Instant::now() + EXIT_WAIT))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let close = wrap_pyfunction!(_close_exit_gate, m)?;
    m.py().import("atexit")?.call_method1("register", (close,))?;
    Ok(())
}
