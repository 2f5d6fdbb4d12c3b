//! A step of a body in its `contextvars.Context` without a call through `Context.run`: the
//! context entered and left around it with `PyContext_Enter` / `PyContext_Exit`, what
//! `Context.run` itself does around the function it calls (the same errors: a context entered
//! already cannot be entered, one that is not the current one cannot be left). Those two are
//! CPython's C API but not its stable ABI, which this module is built for: they are looked up in
//! the running interpreter once — only in the image (libpython or the executable) that holds the
//! C API this module calls, never in another copy of CPython loaded in the same process — and
//! where it does not export them the caller goes through `Context.run` as before.
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use pyo3::ffi;
use pyo3::prelude::*;

type Switch = unsafe extern "C" fn(*mut ffi::PyObject) -> c_int;

/// `Dl_info`, as `dladdr` fills it in (the same layout on Linux and macOS).
#[cfg(any(target_os = "linux", target_os = "macos"))]
#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn dlopen(path: *const c_char, flags: c_int) -> *mut c_void;
    fn dlclose(handle: *mut c_void) -> c_int;
}

#[cfg(target_os = "linux")]
const RTLD_LAZY_NOLOAD: c_int = 0x1 | 0x4;
#[cfg(target_os = "macos")]
const RTLD_LAZY_NOLOAD: c_int = 0x1 | 0x10;

/// The image (shared library or executable) `addr` is in: its base address and file name.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn image_of(addr: *const c_void) -> Option<(*mut c_void, *const c_char)> {
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a `Dl_info` to fill in; `addr` is only looked up.
    if addr.is_null() || unsafe { dladdr(addr, &mut info) } == 0 || info.fbase.is_null() {
        return None;
    }
    Some((info.fbase, info.fname))
}

/// `PyContext_Enter` and `PyContext_Exit` of the interpreter this module runs in: looked up
/// through `handle`, and taken only when both are in the image of `interpreter` (the base address
/// of the image that holds the C API the module calls), never another copy of CPython loaded in
/// the process (a second libpython, a library that defines the same names).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn switches_in(handle: *mut c_void, interpreter: *mut c_void) -> Option<(Switch, Switch)> {
    // SAFETY: looking symbols up by their NUL-terminated names.
    let (enter, exit) = unsafe {
        (
            dlsym(handle, c"PyContext_Enter".as_ptr()),
            dlsym(handle, c"PyContext_Exit".as_ptr()),
        )
    };
    let ours = |f: *mut c_void| image_of(f).is_some_and(|(base, _)| base == interpreter);
    if !ours(enter) || !ours(exit) {
        return None;
    }
    // SAFETY: CPython's `int PyContext_Enter(PyObject *)` and `int PyContext_Exit(PyObject *)`.
    Some(unsafe {
        (
            std::mem::transmute::<*mut c_void, Switch>(enter),
            std::mem::transmute::<*mut c_void, Switch>(exit),
        )
    })
}

/// `PyContext_Enter` and `PyContext_Exit`, when the interpreter exports them.
fn switches() -> Option<(Switch, Switch)> {
    static SWITCHES: OnceLock<Option<(Switch, Switch)>> = OnceLock::new();
    *SWITCHES.get_or_init(|| {
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        return None;
        #[cfg(any(target_os = "linux", target_os = "macos"))]
        {
            // The image of a function of the C API this module links (resolved by the dynamic
            // linker as every call the module makes is): the interpreter that runs it.
            let (interpreter, file) = image_of(ffi::PyObject_GetAttr as *const c_void)?;
            // `RTLD_DEFAULT`: the process's global symbols (the interpreter's among them, first
            // unless something loaded earlier defines the same names).
            #[cfg(target_os = "linux")]
            let everywhere: *mut c_void = std::ptr::null_mut();
            #[cfg(target_os = "macos")]
            let everywhere: *mut c_void = -2isize as *mut c_void;
            if let Some(found) = switches_in(everywhere, interpreter) {
                return Some(found);
            }
            // Else in the interpreter's own image, already loaded (nothing is loaded here).
            if file.is_null() {
                return None;
            }
            // SAFETY: a NUL-terminated path `dladdr` answered; `RTLD_NOLOAD` only finds an image
            // loaded already, whose reference taken here is given back at once (the interpreter
            // keeps it loaded).
            let handle = unsafe { dlopen(file, RTLD_LAZY_NOLOAD) };
            if handle.is_null() {
                return None;
            }
            let found = switches_in(handle, interpreter);
            // SAFETY: the reference `dlopen` just took.
            unsafe { dlclose(handle) };
            found
        }
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
