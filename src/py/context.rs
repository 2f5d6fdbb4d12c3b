//! A step of a body in its `contextvars.Context` without a call through `Context.run`: the
//! context entered and left around it with `PyContext_Enter` / `PyContext_Exit`, what
//! `Context.run` itself does around the function it calls (the same errors: a context entered
//! already cannot be entered, one that is not the current one cannot be left). Those two are
//! CPython's C API but not its stable ABI, which this module is built for: they are looked up in
//! the running interpreter once, and where it does not export them the caller goes through
//! `Context.run` as before.
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;

type Switch = unsafe extern "C" fn(*mut ffi::PyObject) -> c_int;

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `PyContext_Enter` and `PyContext_Exit`, when the interpreter exports them.
fn switches() -> Option<(Switch, Switch)> {
    static SWITCHES: OnceLock<Option<(Switch, Switch)>> = OnceLock::new();
    *SWITCHES.get_or_init(|| {
        // `RTLD_DEFAULT`: the process's global symbols (the interpreter's among them).
        #[cfg(target_os = "linux")]
        let everywhere: *mut c_void = std::ptr::null_mut();
        #[cfg(target_os = "macos")]
        let everywhere: *mut c_void = -2isize as *mut c_void;
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        return None;
        // SAFETY: looking symbols up by their NUL-terminated names.
        let (enter, exit) = unsafe {
            (
                dlsym(everywhere, c"PyContext_Enter".as_ptr()),
                dlsym(everywhere, c"PyContext_Exit".as_ptr()),
            )
        };
        if enter.is_null() || exit.is_null() {
            return None;
        }
        // SAFETY: CPython's `int PyContext_Enter(PyObject *)` and `int PyContext_Exit(PyObject *)`.
        Some(unsafe {
            (
                std::mem::transmute::<*mut c_void, Switch>(enter),
                std::mem::transmute::<*mut c_void, Switch>(exit),
            )
        })
    })
}

/// `context.run(f)` for `f` in Rust: `f` run with `context` (a `contextvars.Context`) entered,
/// left after it whatever `f` answered; None (`f` not run) where the interpreter does not export
/// the two functions.
#[inline]
pub(crate) fn within<'py, R>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    f: impl FnOnce() -> PyResult<R>,
) -> Option<PyResult<R>> {
    let (enter, exit) = switches()?;
    // SAFETY: the interpreter lock is held and `context` is alive (a `Context`: the caller's
    // copy, made by `contextvars.copy_context`); each returns -1 with an error set when it fails.
    if unsafe { enter(context.as_ptr()) } < 0 {
        return Some(Err(PyErr::fetch(py)));
    }
    let out = f();
    // SAFETY: as above.
    if unsafe { exit(context.as_ptr()) } < 0 {
        return Some(Err(PyErr::fetch(py))); // as `Context.run`: this error, not `f`'s answer
    }
    Some(out)
}
