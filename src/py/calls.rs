//! A Python call dict read through the core's call-shape rule (`crate::calls`). Conversion only.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::envelope::{self, PyFailure as Failure};
use crate::calls::{self, keys, CallError, CallMap};

/// A call dict (or its `function` dict), read without copying.
pub(crate) struct PyCall<'py>(pub(crate) Bound<'py, PyDict>);

impl<'py> CallMap for PyCall<'py> {
    type Value = Bound<'py, PyAny>;
    type Error = PyErr;

    #[inline(always)]
    fn get(&self, key: &'static str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = self.0.py();
        let key = match key {
            keys::ID => intern!(py, "id"),
            keys::CALL_ID => intern!(py, "call_id"),
            keys::FUNCTION => intern!(py, "function"),
            keys::NAME => intern!(py, "name"),
            keys::INPUT => intern!(py, "input"),
            keys::ARGUMENTS => intern!(py, "arguments"),
            other => return self.0.get_item(other),
        };
        self.0.get_item(key)
    }

    fn mapping(value: &Bound<'py, PyAny>) -> Option<Self> {
        value.cast::<PyDict>().ok().map(|d| PyCall(d.clone()))
    }

    fn is_null(value: &Bound<'py, PyAny>) -> bool {
        value.is_none()
    }

    fn text<'v>(value: &'v Bound<'py, PyAny>) -> Result<&'v str, String> {
        match value.cast::<PyString>() {
            // Text that is not valid Unicode (a lone surrogate) is not a usable name either.
            Ok(s) => s.to_str().map_err(|_| type_name(value)),
            Err(_) => Err(type_name(value)),
        }
    }
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "another type".to_owned(), |t| t.to_string())
}

/// A malformed call as the `TypeError` the registry's `prepare`/`admit` raise (its text is the
/// problem; `invalid_call_envelope(str(exc))` is the envelope).
pub(crate) fn type_error(e: &CallError) -> PyErr {
    PyTypeError::new_err(e.problem())
}

/// The `invalid_call` envelope for `problem` (what is wrong with the call, e.g. the text of the
/// `TypeError` `prepare`/`admit` raised), or for a call with no tool name when `problem` is None.
#[pyfunction]
#[pyo3(signature = (problem=None))]
fn invalid_call_envelope<'py>(py: Python<'py>, problem: Option<&str>) -> PyResult<Bound<'py, PyDict>> {
    let _in = super::shutdown::inside(py);
    let f = match problem {
        Some(p) => Failure::invalid_call(p),
        None => Failure::no_tool_name(),
    };
    envelope::failure(py, &f)
}

/// `(id, name, arguments)` of a call in any accepted shape, each None when absent; the name
/// only when it is a string. Never raises for a malformed call (a non-dict gives three Nones).
#[pyfunction]
pub(super) fn call_parts<'py>(py: Python<'py>, call: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
    let _in = super::shutdown::inside(py);
    let none = || py.None().into_bound(py);
    let Ok(d) = call.cast::<PyDict>() else {
        return PyTuple::new(py, [none(), none(), none()]);
    };
    let parts = calls::all_parts(&PyCall(d.clone()))?;
    let name = parts.name.filter(|n| n.is_instance_of::<PyString>());
    PyTuple::new(
        py,
        [
            parts.id.unwrap_or_else(none),
            name.unwrap_or_else(none),
            parts.args.unwrap_or_else(none),
        ],
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(invalid_call_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(call_parts, m)?)?;
    Ok(())
}
