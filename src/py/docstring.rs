//! Binding for `crate::docstring`: conversion and error mapping only.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::docstring;

/// `(description, [(name, text), ...], returns)` as handed to Python.
type Parsed = (String, Vec<(String, String)>, Option<String>);

/// Parse a raw ``__doc__`` string into ``(description, [(name, text), ...], returns)``.
///
/// Raises ``ValueError`` when a model-visible line starts with TODO, FIXME, XXX or HACK.
#[pyfunction]
fn parse_docstring(py: Python<'_>, doc: &str) -> PyResult<Parsed> {
    let _in = super::shutdown::inside(py);
    let parsed = docstring::parse(doc).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((parsed.description, parsed.params, parsed.returns))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_docstring, m)?)
}
