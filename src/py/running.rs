//! The running event loop of this thread, as `asyncio.get_running_loop()` answers it, without
//! the system call that function makes at every use on Python 3.10 and 3.11 (`getpid()`: a few
//! hundred nanoseconds on a virtual machine, as much as the rest of an `async` tool call's own
//! stand-in task).
//!
//! There `asyncio` keeps the running loop in the thread state's dict, under
//! `__asyncio_running_event_loop__`: a holder object made each time a loop starts or stops
//! running in the thread, holding the loop (or None) and the process id it was set in, and
//! `get_running_loop()` answers its loop when that process id is this process's. The same is done
//! here, reading the holder's two fields, with the process id read once per process (again in a
//! forked child: a handler the C library runs in the child of every `fork()`, Python's `os.fork`
//! or a raw one that runs none of Python's fork hooks, forgets it). Only once a first reading
//! matched what `get_running_loop()` answered (the holder's size, its loop and its process id as
//! expected): else, and on other Pythons (3.12 keeps the loop itself there and makes no system
//! call), `get_running_loop()` is asked each time.
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use super::gil::GilCell;
use super::pipeline::helpers;

/// What is known of the holders on this Python.
enum Layout {
    /// Not looked at yet (no loop was running when asked).
    Unknown,
    /// Holders are objects of this type, laid out as expected.
    Holder(Py<PyType>),
    /// Not a Python whose holders can be read.
    Off,
}

static LAYOUT: GilCell<Layout> = GilCell::new(Layout::Unknown);

/// This process's id (0: not read yet in this process, see `forget_pid`).
static PID: AtomicU32 = AtomicU32::new(0);

/// `PyRunningLoopHolder` (3.10, 3.11): the object header, the loop, then the process id.
const LOOP_AT: usize = std::mem::size_of::<ffi::PyObject>();
const PID_AT: usize = LOOP_AT + std::mem::size_of::<*mut ffi::PyObject>();
const HOLDER_SIZE: usize = PID_AT + std::mem::size_of::<u64>(); // the id (a C int) padded

/// `asyncio.get_running_loop()` (its `RuntimeError` when no loop runs in this thread).
pub(crate) fn running_loop(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let entry = entry(py)?;
    if let Some(entry) = &entry {
        let kind = LAYOUT
            .with(py, |l| match l {
                Layout::Holder(t) => Some(Some(t.clone_ref(py))),
                Layout::Unknown => Some(None),
                Layout::Off => None,
            })
            .flatten();
        match kind {
            Some(Some(holder)) if entry.get_type().is(&holder) => {
                // SAFETY: a live holder (the thread state's dict holds it), laid out as checked.
                let (lp, pid) = unsafe { read(entry) };
                if pid == pid_now() && !lp.is_null() {
                    // SAFETY: the holder holds a reference to its loop for as long as it lives.
                    let lp = unsafe { Bound::from_borrowed_ptr(py, lp) };
                    if !lp.is_none() {
                        return Ok(lp);
                    }
                }
            }
            Some(None) => return look(py, entry),
            _ => {}
        }
    }
    helpers(py)?.get_running_loop.bind(py).call0()
}

/// The entry of the thread state's dict (None: no dict, or no entry).
fn entry(py: Python<'_>) -> PyResult<Option<Bound<'_, PyAny>>> {
    // SAFETY: the interpreter lock is held; a borrowed reference, or NULL (no error set) when the
    // thread state has no dict.
    let dict = unsafe { ffi::PyThreadState_GetDict() };
    if dict.is_null() {
        return Ok(None);
    }
    // SAFETY: a live object, held by the thread state.
    let dict = unsafe { Bound::from_borrowed_ptr(py, dict) };
    match dict.cast_into::<PyDict>() {
        Ok(d) => d.get_item(intern!(py, "__asyncio_running_event_loop__")),
        Err(_) => Ok(None),
    }
}

/// The holder's loop and process id.
///
/// # Safety
/// `holder` is a `PyRunningLoopHolder` (its type checked against the one `look` confirmed).
unsafe fn read(holder: &Bound<'_, PyAny>) -> (*mut ffi::PyObject, u32) {
    let p = holder.as_ptr().cast::<u8>();
    (
        p.add(LOOP_AT).cast::<*mut ffi::PyObject>().read(),
        p.add(PID_AT).cast::<i32>().read() as u32,
    )
}

fn pid_now() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            let pid = std::process::id();
            if watch_forks() {
                PID.store(pid, Ordering::Relaxed);
            }
            pid
        }
        pid => pid,
    }
}

/// The first look, under a running loop: `get_running_loop()`'s answer, and whether holders can
/// be read on this Python from now on (this one read as expected).
fn look<'py>(py: Python<'py>, entry: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let lp = helpers(py)?.get_running_loop.bind(py).call0()?;
    let version: (u32, u32) = py
        .import("sys")?
        .getattr("version_info")?
        .cast_into::<PyTuple>()
        .map_err(PyErr::from)?
        .get_slice(0, 2)
        .extract()?;
    let kind = entry.get_type();
    let readable = (version == (3, 10) || version == (3, 11))
        && kind.name()?.to_cow()? == "_RunningLoopHolder"
        && kind.getattr("__basicsize__")?.extract::<usize>()? == HOLDER_SIZE;
    let layout = if !readable {
        Layout::Off
    } else {
        // SAFETY: an object of at least `HOLDER_SIZE` bytes (its type's size).
        let (at, pid) = unsafe { read(entry) };
        if at == lp.as_ptr() && pid == pid_now() {
            Layout::Holder(kind.unbind())
        } else {
            Layout::Off
        }
    };
    let old = LAYOUT.with(py, |l| std::mem::replace(l, layout));
    drop(old);
    Ok(lp)
}

/// In the child of a fork, run by the C library before `fork()` returns there: the process id
/// is read again (one atomic store: nothing else is safe in that handler).
extern "C" fn forget_pid() {
    PID.store(0, Ordering::Relaxed);
}

/// Have the C library run [`forget_pid`] in the child of every fork of this process (registered
/// once): `os.fork`, and a fork that runs none of Python's fork hooks (a C extension's, or
/// `ctypes.PyDLL(None).fork()`). False when it could not be registered: the id is then read at
/// every use, never kept.
fn watch_forks() -> bool {
    // 0: not registered yet, 1: registered, 2: could not be (no lock: a fork from another thread
    // could leave one held in the child; registering twice only stores twice).
    static WATCHING: AtomicU8 = AtomicU8::new(0);
    match WATCHING.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            #[cfg(unix)]
            let registered = super::shutdown::in_fork_child(forget_pid); // it only stores to an atomic
            #[cfg(not(unix))]
            let registered = true; // no fork
            WATCHING.store(if registered { 1 } else { 2 }, Ordering::Relaxed);
            registered
        }
    }
}
