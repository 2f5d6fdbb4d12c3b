//! The coroutine protocol of the core's awaitables (`BodyAwait`, `Relay`, `Drive`, `JobAwait`,
//! `Turn`), written once: each implements [`Coroutine`] (what one step and a close do) and gets
//! `__await__`, `__iter__`, `__next__`, `send`, `throw` and `close` from [`coroutine_methods!`],
//! which also counts each entry (see [`protocol_entries`]).
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::PyClass;

use super::awaiting::{Input, Stepped};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(protocol_entries, m)?)
}

/// An awaitable of the core that the event loop steps as a coroutine.
pub(super) trait Coroutine: PyClass {
    /// Whether `__await__` and `__iter__` borrow the awaitable: during a step of its own they
    /// then raise the `RuntimeError` of that borrow.
    const BORROWED_TO_AWAIT: bool = false;

    /// What `__await__` checks once counted (an error: the awaitable cannot be awaited now).
    #[inline]
    fn awaited(_slf: &Bound<'_, Self>) -> PyResult<()> {
        Ok(())
    }

    /// One step: `input` sent (`__next__`: None) or thrown in; what is yielded, or what is raised
    /// (`StopIteration` with the value when it returned).
    fn protocol_step<'py>(slf: &Bound<'py, Self>, input: Input<'py>) -> Stepped<'py>;

    /// `close()`.
    fn protocol_close(slf: &Bound<'_, Self>) -> PyResult<()>;

    /// `__next__`: a step with None sent; Ok(None) when the awaitable returned None (no
    /// `StopIteration` is made: the slot returns no object and sets no error).
    #[inline]
    fn protocol_next<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, pyo3::PyAny>>> {
        Self::protocol_step(slf, Input::Send(slf.py().None().into_bound(slf.py()))).map(Some)
    }
}

/// `slf` borrowed for a step; during a step of its own (a body stepping what its caller awaits,
/// or the coroutine of the task running it) the `ValueError` a running coroutine raises.
pub(super) fn running<'py, T: PyClass<Frozen = pyo3::pyclass::boolean_struct::False>>(
    slf: &Bound<'py, T>,
) -> PyResult<PyRefMut<'py, T>> {
    slf.try_borrow_mut()
        .map_err(|_| pyo3::exceptions::PyValueError::new_err("coroutine already executing"))
}

/// `slf` borrowed for a moment, if it is [`Coroutine::BORROWED_TO_AWAIT`]: the `RuntimeError`
/// of that borrow during a step of its own.
#[doc(hidden)]
#[inline]
pub(super) fn borrowed_to_await<T: Coroutine>(slf: &Bound<'_, T>) -> PyResult<()> {
    if T::BORROWED_TO_AWAIT {
        slf.try_borrow().map(drop)?;
    }
    Ok(())
}

/// The exception `throw(exc, value, tb)` raises in a coroutine (the three-argument form of
/// older callers included).
pub(super) fn thrown<'py>(exc: Bound<'py, PyAny>, value: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Some(v) if exc.is_instance_of::<PyType>() && !v.is_none() => {
            if v.is_instance(&exc)? {
                v
            } else {
                exc.call1((v,))?
            }
        }
        _ if exc.is_instance_of::<PyType>() => exc.call0()?,
        _ => exc,
    })
}

/// The classes that implement [`Coroutine`] and the protocol slots counted for each: the event
/// loop resuming a body (a task steps its coroutine, a coroutine its `await`) calls these slots
/// from C, which no profile hook sees (no `c_call` event).
const CLASSES: [&str; 5] = ["BodyAwait", "Relay", "Drive", "JobAwait", "Turn"];
const SLOTS: [&str; 5] = ["__await__", "__next__", "send", "throw", "close"];

static ENTRIES: [AtomicU64; CLASSES.len() * SLOTS.len()] = [const { AtomicU64::new(0) }; CLASSES.len() * SLOTS.len()];

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn position(names: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        if same(names[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("a coroutine class or slot that is not counted: add it to CLASSES/SLOTS");
}

/// The counter of slot `slot` of class `class` (evaluated at compile time by the macro).
#[doc(hidden)]
pub(super) const fn counter(class: &str, slot: &str) -> usize {
    position(&CLASSES, class) * SLOTS.len() + position(&SLOTS, slot)
}

/// Count one entry (a relaxed atomic increment: nothing waits on it).
#[doc(hidden)]
#[inline]
pub(super) fn entered(counter: usize) {
    ENTRIES[counter].fetch_add(1, Ordering::Relaxed);
}

/// How many times each coroutine-protocol slot of `BodyAwait`, `Relay`, `Drive`, `JobAwait` and `Turn` was entered since the
/// module was loaded, all threads together: `{"BodyAwait.__next__": n, ...}`.
#[pyfunction]
fn protocol_entries(py: Python<'_>) -> std::collections::HashMap<String, u64> {
    let _in = super::shutdown::inside(py);
    let names = CLASSES
        .iter()
        .flat_map(|c| SLOTS.iter().map(move |s| format!("{c}.{s}")));
    names
        .zip(&ENTRIES)
        .map(|(n, c)| (n, c.load(Ordering::Relaxed)))
        .collect()
}

/// The `#[pymethods]` block of a [`Coroutine`] class, the protocol added to the methods given:
/// `coroutine_methods! { #[pymethods] impl Drive { ...its other methods... } }` (one block, as
/// pyo3 takes one per class).
macro_rules! coroutine_methods {
    (#[pymethods] impl $ty:ident { $($items:tt)* }) => {
        #[::pyo3::pymethods]
        impl $ty {
            $($items)*

            fn __await__(slf: ::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<::pyo3::Bound<'_, Self>> {
                let _in = super::shutdown::inside(slf.py());
                $crate::py::coroutine::entered(const { $crate::py::coroutine::counter(stringify!($ty), "__await__") });
                $crate::py::coroutine::borrowed_to_await(&slf)?;
                <Self as $crate::py::coroutine::Coroutine>::awaited(&slf)?;
                Ok(slf)
            }

            fn __iter__(slf: ::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<::pyo3::Bound<'_, Self>> {
                let _in = super::shutdown::inside(slf.py());
                $crate::py::coroutine::borrowed_to_await(&slf)?;
                Ok(slf)
            }

            fn __next__<'py>(slf: &::pyo3::Bound<'py, Self>) -> ::pyo3::PyResult<Option<::pyo3::Bound<'py, ::pyo3::PyAny>>> {
                let _in = super::shutdown::inside(slf.py());
                $crate::py::coroutine::entered(const { $crate::py::coroutine::counter(stringify!($ty), "__next__") });
                <Self as $crate::py::coroutine::Coroutine>::protocol_next(slf)
            }

            /// Take the next step, what is awaited getting `value`.
            fn send<'py>(slf: &::pyo3::Bound<'py, Self>, value: ::pyo3::Bound<'py, ::pyo3::PyAny>) -> $crate::py::awaiting::Stepped<'py> {
                let _in = super::shutdown::inside(slf.py());
                $crate::py::coroutine::entered(const { $crate::py::coroutine::counter(stringify!($ty), "send") });
                <Self as $crate::py::coroutine::Coroutine>::protocol_step(slf, $crate::py::awaiting::Input::Send(value))
            }

            /// Take the next step, what is awaited getting `exc` raised.
            #[pyo3(signature = (exc, value=None, tb=None))]
            fn throw<'py>(
                slf: &::pyo3::Bound<'py, Self>,
                exc: ::pyo3::Bound<'py, ::pyo3::PyAny>,
                value: Option<::pyo3::Bound<'py, ::pyo3::PyAny>>,
                tb: Option<::pyo3::Bound<'py, ::pyo3::PyAny>>,
            ) -> $crate::py::awaiting::Stepped<'py> {
                let _in = super::shutdown::inside(slf.py());
                $crate::py::coroutine::entered(const { $crate::py::coroutine::counter(stringify!($ty), "throw") });
                let _ = tb;
                let exc = $crate::py::coroutine::thrown(exc, value)?;
                <Self as $crate::py::coroutine::Coroutine>::protocol_step(slf, $crate::py::awaiting::Input::Throw(exc))
            }

            /// Close what is awaited (see the class).
            fn close(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<()> {
                let _in = super::shutdown::inside(slf.py());
                $crate::py::coroutine::entered(const { $crate::py::coroutine::counter(stringify!($ty), "close") });
                <Self as $crate::py::coroutine::Coroutine>::protocol_close(slf)
            }
        }
    };
}
pub(super) use coroutine_methods;
