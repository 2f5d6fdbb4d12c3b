//! `deep_freeze` (see `agentkit_tools.frozen`): the recursive copy into `FrozenDict` /
//! `FrozenList` that the Invoker applies to every call's arguments and the definition layer to
//! every schema. Same semantics as the Python reference; done here because it sits on the hot
//! path of each call.

use pyo3::exceptions::PyRecursionError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyType};

/// Nesting deeper than this raises `RecursionError`, as Python's default recursion limit would
/// (and a native stack is never exhausted).
const MAX_DEPTH: usize = 1000;

fn freeze<'py>(
    value: &Bound<'py, PyAny>,
    fdict: &Bound<'py, PyType>,
    flist: &Bound<'py, PyType>,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(PyRecursionError::new_err("maximum recursion depth exceeded while freezing a value"));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        if value.is_instance(fdict)? {
            return Ok(value.clone());
        }
        let out = fdict.call0()?;
        let target = out.cast::<PyDict>()?;
        // PyDict_SetItem: the store of the dict itself, below FrozenDict's refusing __setitem__.
        for (k, v) in d.iter() {
            target.set_item(k, freeze(&v, fdict, flist, depth + 1)?)?;
        }
        return Ok(out);
    }
    if let Ok(l) = value.cast::<PyList>() {
        if value.is_instance(flist)? {
            return Ok(value.clone());
        }
        let out = flist.call0()?;
        let target = out.cast::<PyList>()?;
        for v in l.iter() {
            target.append(freeze(&v, fdict, flist, depth + 1)?)?;
        }
        return Ok(out);
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        if value.hasattr("_fields")? {
            return Ok(value.clone()); // a named tuple keeps its class and items
        }
        let items = t.iter().map(|v| freeze(&v, fdict, flist, depth + 1)).collect::<PyResult<Vec<_>>>()?;
        return Ok(PyTuple::new(value.py(), items)?.into_any());
    }
    Ok(value.clone())
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
    freeze(value, frozen_dict, frozen_list, 0)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(deep_freeze, m)?)?;
    Ok(())
}
