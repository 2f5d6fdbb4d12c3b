//! The core's envelopes (`crate::envelope`) as Python dicts, key for key, and the error codes as
//! `_core.codes`. Conversion only.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyModule};

use crate::envelope::{Failure, Success};
use crate::errors::ErrorCode;

/// A failure whose details (a tool's own `ToolError` details) are a Python dict.
pub(crate) type PyFailure<'a, 'py> = Failure<'a, Bound<'py, PyDict>>;

/// `{"ok": False, "error": {...}}` for `f`.
pub(crate) fn failure<'py>(py: Python<'py>, f: &PyFailure<'_, 'py>) -> PyResult<Bound<'py, PyDict>> {
    failure_with_schema(py, f, None)
}

/// `failure`, with `f.schema` given as a plain Python tree built once (`schema`): the envelope
/// gets a copy of its dicts and lists, the strings and numbers shared.
pub(crate) fn failure_with_schema<'py>(
    py: Python<'py>,
    f: &PyFailure<'_, 'py>,
    schema: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let error = PyDict::new(py);
    if let Some(details) = &f.details {
        error.update(details.as_mapping())?;
    }
    error.set_item(intern!(py, "code"), f.code.as_str())?;
    error.set_item(intern!(py, "message"), &f.message)?;
    if let Some(t) = &f.tool {
        error.set_item(intern!(py, "tool"), t)?;
    }
    if let Some(c) = f.count {
        error.set_item(intern!(py, "count"), c)?;
    }
    if let Some(h) = &f.host {
        error.set_item(intern!(py, "host"), h)?;
    }
    if let Some(a) = &f.allowed {
        error.set_item(intern!(py, "allowed"), a)?;
    }
    if let Some(a) = &f.available {
        error.set_item(intern!(py, "available"), a)?;
    }
    if let Some(d) = &f.did_you_mean {
        error.set_item(intern!(py, "did_you_mean"), d)?;
    }
    if let Some(problems) = &f.problems {
        let items = PyList::empty(py);
        let (path, reason) = (intern!(py, "path"), intern!(py, "reason"));
        for p in problems {
            let d = PyDict::new(py);
            d.set_item(path, &p.path)?;
            d.set_item(reason, &p.reason)?;
            items.append(d)?;
        }
        error.set_item(intern!(py, "errors"), items)?;
    }
    if let Some(s) = f.schema {
        // Plain dicts and lists, a fresh copy per envelope so a host that edits it changes
        // nothing here.
        let copy = match schema {
            Some(tree) => super::frozen::copy_plain(tree)?,
            None => super::tools::to_py(py, s)?,
        };
        error.set_item(intern!(py, "schema"), copy)?;
    }
    if let Some(r) = f.retriable {
        error.set_item(intern!(py, "retriable"), r)?;
    }
    let env = PyDict::new(py);
    env.set_item(intern!(py, "ok"), false)?;
    env.set_item(intern!(py, "error"), error)?;
    Ok(env)
}

/// `{"ok": True, "value": ..., "elapsed_ms": ...}` (and `"deduplicated": True` when set).
pub(crate) fn success<'py>(py: Python<'py>, s: Success<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
    // A copy of a private template (its keys in order, copied at once), then the two values set
    // in place of its placeholders.
    static TEMPLATE: pyo3::sync::PyOnceLock<Py<PyDict>> = pyo3::sync::PyOnceLock::new();
    let template = TEMPLATE.get_or_try_init(py, || -> PyResult<_> {
        let t = PyDict::new(py);
        t.set_item(intern!(py, "ok"), true)?;
        t.set_item(intern!(py, "value"), py.None())?;
        t.set_item(intern!(py, "elapsed_ms"), py.None())?;
        Ok(t.unbind())
    })?;
    let env = template.bind(py).copy()?;
    env.set_item(intern!(py, "value"), s.value)?;
    env.set_item(intern!(py, "elapsed_ms"), s.elapsed_ms)?;
    if s.deduplicated {
        env.set_item(intern!(py, "deduplicated"), true)?;
    }
    Ok(env)
}

/// `_core.codes`: each code under its upper-case name (`codes.UNKNOWN_TOOL == "unknown_tool"`),
/// `codes.ALL` (every code, in documentation order) and `codes.RETRIABLE` (the codes whose call
/// may succeed if sent again unchanged).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let codes = PyModule::new(py, "codes")?;
    for c in ErrorCode::ALL {
        codes.add(c.py_name(), c.as_str())?;
    }
    let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    codes.add("ALL", pyo3::types::PyTuple::new(py, &all)?)?;
    let retriable: Vec<&str> = ErrorCode::ALL
        .iter()
        .filter(|c| c.retriable())
        .map(|c| c.as_str())
        .collect();
    codes.add("RETRIABLE", pyo3::types::PyFrozenSet::new(py, &retriable)?)?;
    m.add("codes", codes)?;
    Ok(())
}
