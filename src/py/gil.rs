//! [`GilCell`]: state of the binding that is only ever used with the interpreter lock held,
//! guarded by that lock instead of a lock of its own: no atomic operation per use (an
//! uncontended `Mutex` costs two, a handful of nanoseconds each, at every call).
use std::cell::{Cell, UnsafeCell};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// A value reached only through [`GilCell::with`], which takes the interpreter lock's token.
///
/// Sound because the thread holding a `Python` token holds the interpreter lock, which no other
/// thread holds meanwhile (the module is built for the stable ABI, which a free-threaded
/// interpreter does not load), and handing the lock over orders what the threads did. A use in
/// progress marks the cell busy: a reentrant use, or one by another thread while the first has
/// released the lock (Python code it ran let it go), finds it busy and is refused, so there is
/// never a second `&mut T` at once.
pub(crate) struct GilCell<T> {
    busy: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: see the type: the value and the flag are only touched with the interpreter lock held.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        GilCell {
            busy: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// `f` on the value; None while it is in use (see the type).
    #[inline]
    pub(crate) fn with<R>(&self, _py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.busy.replace(true) {
            return None;
        }
        struct Free<'a>(&'a Cell<bool>);
        impl Drop for Free<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _free = Free(&self.busy);
        // SAFETY: the interpreter lock is held and the cell was free: this is the only reference.
        Some(f(unsafe { &mut *self.value.get() }))
    }

    /// [`GilCell::with`] for a use that runs no Python code (so it cannot find the cell busy but
    /// through a bug): busy is a `RuntimeError`.
    #[inline]
    pub(crate) fn with_pure<R>(&self, py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> PyResult<R> {
        self.with(py, f)
            .ok_or_else(|| PyRuntimeError::new_err("the call pipeline's state is in use"))
    }
}
