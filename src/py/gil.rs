//! [`GilCell`]: state of the binding that is only ever used with the interpreter lock held,
//! guarded by that lock instead of a lock of its own: no atomic operation per use (an
//! uncontended `Mutex` costs two, a handful of nanoseconds each, at every call).
use std::cell::{Cell, UnsafeCell};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU32, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// How many [`GilCell::with_pure`] uses are in progress (changed only with the interpreter lock
/// held; an atomic so that a thread without it can read it), and [`PENDING`]: objects were let
/// go meanwhile ([`Held`]), to be released when none is in progress.
static USES: AtomicU32 = AtomicU32::new(0);
const PENDING: u32 = 1 << 31;

struct LetGo(UnsafeCell<Vec<Py<PyAny>>>);

// SAFETY: only touched with the interpreter lock held.
unsafe impl Sync for LetGo {}

static LET_GO: LetGo = LetGo(UnsafeCell::new(Vec::new()));

/// A Python object held by state in a [`GilCell`] used only through [`GilCell::with_pure`] (a
/// result the call pipeline keeps for deduplication). Let go inside such a use (a conversation
/// forgotten, an entry evicted), its reference is released only once no use is in progress:
/// releasing it may run Python code (its `__del__`, a weak reference's callback), which may call
/// into the core again or let the interpreter lock go to a thread that does, and inside the use
/// that call would find the state busy.
pub(crate) struct Held(ManuallyDrop<Py<PyAny>>);

impl Held {
    pub(crate) fn new(obj: Py<PyAny>) -> Self {
        Held(ManuallyDrop::new(obj))
    }
}

impl std::ops::Deref for Held {
    type Target = Py<PyAny>;

    #[inline]
    fn deref(&self) -> &Py<PyAny> {
        &self.0
    }
}

impl Drop for Held {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used again.
        let obj = unsafe { ManuallyDrop::take(&mut self.0) };
        if USES.load(Ordering::Relaxed) & !PENDING == 0 {
            return drop(obj);
        }
        let_go_later(obj);
    }
}

#[cold]
#[inline(never)]
fn let_go_later(obj: Py<PyAny>) {
    Python::attach(|_py| {
        let uses = USES.load(Ordering::Relaxed);
        if uses & !PENDING == 0 {
            return drop(obj);
        }
        // SAFETY: the interpreter lock is held; no other reference to the list is live (it is
        // taken whole, below, before its objects are released).
        unsafe { (*LET_GO.0.get()).push(obj) };
        USES.store(uses | PENDING, Ordering::Relaxed);
    });
}

/// One use (`with_pure`) ends: with none left in progress, the objects let go meanwhile are
/// released.
#[inline]
fn pure_use_ends() {
    let left = USES.load(Ordering::Relaxed) - 1;
    USES.store(left, Ordering::Relaxed);
    if left == PENDING {
        release_let_go();
    }
}

#[cold]
#[inline(never)]
fn release_let_go() {
    USES.store(0, Ordering::Relaxed);
    // SAFETY: the interpreter lock is held; taken whole, so releasing them (Python code that may
    // use a cell, and let objects go again) finds an empty list of its own.
    let objs = std::mem::take(unsafe { &mut *LET_GO.0.get() });
    drop(objs);
}

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
    /// through a bug): busy is a `RuntimeError`. What `f` lets go of that is [`Held`] is released
    /// after the use (see there).
    #[inline]
    pub(crate) fn with_pure<R>(&self, py: Python<'_>, f: impl FnOnce(&mut T) -> R) -> PyResult<R> {
        USES.store(USES.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // (`f` does not unwind: the core's state machines do not panic)
        let out = self.with(py, f);
        pure_use_ends();
        out.ok_or_else(|| PyRuntimeError::new_err("the call pipeline's state is in use"))
    }
}
