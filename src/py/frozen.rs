//! Recursive container copies on hot paths: `deep_freeze` (see `agentkit_tools.frozen`), the
//! copy into `FrozenDict` / `FrozenList` that the Invoker applies to every call's arguments and
//! the definition layer to every schema (same semantics as the Python reference), and
//! `copy_json`, the `copy.deepcopy` of a cached provider rendering handed to a caller.

use pyo3::exceptions::PyRecursionError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use crate::arguments::{COPY_TOO_DEEP, FREEZE_TOO_DEEP, MAX_COPY_DEPTH as MAX_DEPTH};

pub(crate) fn freeze<'py>(
    value: &Bound<'py, PyAny>,
    fdict: &Bound<'py, PyType>,
    flist: &Bound<'py, PyType>,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(PyRecursionError::new_err(FREEZE_TOO_DEEP));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        // An exact dict cannot be a frozen one (the instance check is the slow part).
        let exact = value.is_exact_instance_of::<PyDict>();
        if !exact && value.is_instance(fdict)? {
            return Ok(value.clone());
        }
        let target = new_empty(fdict)?.cast_into::<PyDict>()?;
        // The stores of the dict itself, below FrozenDict's refusing __setitem__.
        if exact {
            // All entries at once (the C merge of two dicts), then the containers among the
            // values replaced by their frozen copies.
            // SAFETY: both are live dicts; the interpreter lock is held.
            if unsafe { pyo3::ffi::PyDict_Merge(target.as_ptr(), d.as_ptr(), 1) } != 0 {
                return Err(PyErr::fetch(value.py()));
            }
            for (k, v) in d.iter() {
                if is_container(&v) {
                    target.set_item(k, freeze(&v, fdict, flist, depth + 1)?)?;
                }
            }
        } else {
            for (k, v) in d.iter() {
                target.set_item(k, freeze(&v, fdict, flist, depth + 1)?)?;
            }
        }
        return Ok(target.into_any());
    }
    if let Ok(l) = value.cast::<PyList>() {
        if !value.is_exact_instance_of::<PyList>() && value.is_instance(flist)? {
            return Ok(value.clone());
        }
        let target = new_empty(flist)?.cast_into::<PyList>()?;
        for v in l.iter() {
            target.append(freeze(&v, fdict, flist, depth + 1)?)?;
        }
        return Ok(target.into_any());
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        if value.hasattr("_fields")? {
            return Ok(value.clone()); // a named tuple keeps its class and items
        }
        let items = t
            .iter()
            .map(|v| freeze(&v, fdict, flist, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(PyTuple::new(value.py(), items)?.into_any());
    }
    Ok(value.clone())
}

/// The entries of dict `d` in a new plain `dict`, each container among the values frozen (as
/// `freeze` does): the body's arguments for a wrapper that only unpacks or copies the mapping
/// (the top level needs no freezing), made a `FrozenDict` by [`seal`] when anything else gets it.
pub(crate) fn freeze_values<'py>(
    d: &Bound<'py, PyDict>,
    fdict: &Bound<'py, PyType>,
    flist: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyDict>> {
    let target = if d.is_exact_instance_of::<PyDict>() {
        d.copy()?
    } else {
        let t = PyDict::new(d.py());
        for (k, v) in d.iter() {
            t.set_item(k, v)?;
        }
        t
    };
    for (k, v) in d.iter() {
        if is_container(&v) {
            target.set_item(k, freeze(&v, fdict, flist, 1)?)?;
        }
    }
    Ok(target)
}

/// `freeze_values` of an exact dict `d` whose containers are at the positions of its order set
/// in `at` (bit `i`: the entry `PyDict_Next` gives at position `i`), as reading it found them
/// with no Python code run since: the entries there are frozen, the others are copied as they
/// are, without looking at each again.
pub(crate) fn freeze_values_at<'py>(
    d: &Bound<'py, PyDict>,
    mut at: u64,
    fdict: &Bound<'py, PyType>,
    flist: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyDict>> {
    let py = d.py();
    let target = d.copy()?;
    while at != 0 {
        let i = at.trailing_zeros();
        at &= at - 1;
        let mut pos: pyo3::ffi::Py_ssize_t = i as pyo3::ffi::Py_ssize_t;
        let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a live dict; `k` and `v` are borrowed and taken as new references at once.
        if unsafe { pyo3::ffi::PyDict_Next(d.as_ptr(), &mut pos, &mut k, &mut v) } == 0 {
            break;
        }
        let (k, v) = unsafe { (Bound::from_borrowed_ptr(py, k), Bound::from_borrowed_ptr(py, v)) };
        if is_container(&v) {
            target.set_item(k, freeze(&v, fdict, flist, 1)?)?;
        }
    }
    Ok(target)
}

/// `plain` (a dict whose nested containers are frozen already) as a `fdict` instance.
pub(crate) fn seal<'py>(plain: &Bound<'py, PyDict>, fdict: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let target = new_empty(fdict)?.cast_into::<PyDict>()?;
    // SAFETY: both are live dicts; the interpreter lock is held.
    if unsafe { pyo3::ffi::PyDict_Merge(target.as_ptr(), plain.as_ptr(), 1) } != 0 {
        return Err(PyErr::fetch(plain.py()));
    }
    Ok(target.into_any())
}

/// A dict or list that `freeze` copies (a tuple too: its items may be).
fn is_container(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyDict>() || v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()
}

/// A new empty instance of `ty` (a subclass of dict or list without an `__init__` of its own,
/// as `FrozenDict`/`FrozenList`): its `tp_new` alone, as `ty()` would do before an `__init__`
/// that has nothing to add. Any other class is called.
pub(crate) fn new_empty<'py>(ty: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyAny>> {
    let py = ty.py();
    static PLAIN: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();
    let (dict_init, list_init) = PLAIN.get_or_try_init(py, || -> PyResult<_> {
        Ok((
            py.get_type::<PyDict>().getattr("__init__")?.unbind(),
            py.get_type::<PyList>().getattr("__init__")?.unbind(),
        ))
    })?;
    let plain = |t: &Bound<'py, PyType>| -> PyResult<bool> {
        let init = t.getattr(pyo3::intern!(py, "__init__"))?;
        Ok(init.is(dict_init.bind(py)) || init.is(list_init.bind(py)))
    };
    // `FrozenDict` and `FrozenList` (slotted, never given an `__init__`) are looked at once.
    static OURS: PyOnceLock<[(Py<PyType>, bool); 2]> = PyOnceLock::new();
    let ours = OURS.get_or_try_init(py, || -> PyResult<_> {
        let m = py.import("agentkit_tools.frozen")?;
        let d = m.getattr("FrozenDict")?.cast_into::<PyType>()?;
        let l = m.getattr("FrozenList")?.cast_into::<PyType>()?;
        Ok([(d.clone().unbind(), plain(&d)?), (l.clone().unbind(), plain(&l)?)])
    })?;
    let known = ours.iter().find(|(t, _)| t.bind(py).is(ty)).map(|(_, p)| *p);
    if !known.map_or_else(|| plain(ty), Ok)? {
        return ty.call0();
    }
    // SAFETY: a heap type's slot read (limited API); `tp_new` of dict/list accepts empty args.
    unsafe {
        let slot = pyo3::ffi::PyType_GetSlot(ty.as_ptr().cast(), pyo3::ffi::Py_tp_new);
        if slot.is_null() {
            return ty.call0();
        }
        let new: pyo3::ffi::newfunc = std::mem::transmute(slot);
        let args = PyTuple::empty(py);
        Bound::from_owned_ptr_or_err(py, new(ty.as_ptr().cast(), args.as_ptr(), std::ptr::null_mut()))
    }
}

/// `value` with every dict, list and tuple inside it frozen: dicts become `frozen_dict`
/// instances, lists `frozen_list` instances, tuples (except named tuples) tuples of frozen
/// items; instances of the frozen classes and all other values are returned as they are.
/// Raises `RecursionError` past 1000 levels of nesting.
#[pyfunction]
fn deep_freeze<'py>(
    value: &Bound<'py, PyAny>,
    frozen_dict: &Bound<'py, PyType>,
    frozen_list: &Bound<'py, PyType>,
) -> PyResult<Bound<'py, PyAny>> {
    let _in = super::shutdown::inside(value.py());
    freeze(value, frozen_dict, frozen_list, 0)
}

static DEEPCOPY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn is_atom(value: &Bound<'_, PyAny>) -> bool {
    value.is_none()
        || value.is_exact_instance_of::<PyString>()
        || value.is_exact_instance_of::<PyInt>()
        || value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyBool>()
}

fn copy_tree<'py>(
    value: &Bound<'py, PyAny>,
    deepcopy: &Bound<'py, PyAny>,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(PyRecursionError::new_err(COPY_TOO_DEEP));
    }
    if is_atom(value) {
        return Ok(value.clone());
    }
    let py = value.py();
    if value.is_exact_instance_of::<PyDict>() {
        let out = PyDict::new(py);
        for (k, v) in value.cast::<PyDict>()?.iter() {
            let key = if is_atom(&k) { k } else { deepcopy.call1((k,))? };
            out.set_item(key, copy_tree(&v, deepcopy, depth + 1)?)?;
        }
        return Ok(out.into_any());
    }
    if value.is_exact_instance_of::<PyList>() {
        let out = PyList::empty(py);
        for v in value.cast::<PyList>()?.iter() {
            out.append(copy_tree(&v, deepcopy, depth + 1)?)?;
        }
        return Ok(out.into_any());
    }
    deepcopy.call1((value,))
}

/// `copy.deepcopy(value)` for JSON-shaped trees: exact dicts and lists are copied here, strings,
/// numbers, booleans and None shared (as `deepcopy` shares them); anything else is handed to
/// `copy.deepcopy`. Raises `RecursionError` past 1000 levels of nesting.
#[pyfunction]
fn copy_json<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let _in = super::shutdown::inside(value.py());
    let py = value.py();
    let deepcopy = DEEPCOPY.get_or_try_init(py, || py.import("copy")?.getattr("deepcopy").map(Bound::unbind))?;
    copy_tree(value, deepcopy.bind(py), 0)
}

/// A copy of a tree of exact dicts and lists (see `copy_json`).
pub(crate) fn copy_plain<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    copy_json(value)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(deep_freeze, m)?)?;
    m.add_function(wrap_pyfunction!(copy_json, m)?)?;
    Ok(())
}
