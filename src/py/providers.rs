//! Binding for `crate::providers`: conversion and error mapping only.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::tools::{to_py, to_value};
use crate::providers::{self, Provider, ToolSpec};

/// A finding as handed to Python: `(provider, path, message)`.
type PyFinding = (String, String, String);

/// Render one tool for `provider` (see `crate::providers::Provider::parse` for the names).
/// `flags` is `(side_effecting, idempotent, declared, destructive)` when known (it sets the MCP
/// annotations; `declared` None counts as True, `destructive` None is MCP's default).
///
/// Returns `(rendering, [(provider, path, message), ...])`: the provider's tool entry as a dict
/// and what it had to weaken. Raises `ValueError` for an unknown provider or a schema that is not
/// JSON.
#[pyfunction]
#[pyo3(signature = (provider, name, description, parameters, output_schema=None, flags=None))]
fn render_tool<'py>(
    py: Python<'py>,
    provider: &str,
    name: &str,
    description: &str,
    parameters: &Bound<'py, PyAny>,
    output_schema: Option<&Bound<'py, PyAny>>,
    flags: Option<(bool, bool, Option<bool>, Option<bool>)>,
) -> PyResult<(Bound<'py, PyAny>, Vec<PyFinding>)> {
    let _in = super::shutdown::inside(py);
    let which = Provider::parse(provider)
        .ok_or_else(|| PyValueError::new_err(providers::unknown_provider_message(provider)))?;
    let input = to_value(parameters)?;
    let output = match output_schema {
        Some(o) if !o.is_none() => Some(to_value(o)?),
        _ => None,
    };
    let spec = ToolSpec {
        name,
        description,
        input_schema: &input,
        output_schema: output.as_ref(),
        flags: flags.map(|(side_effecting, idempotent, declared, destructive)| {
            crate::providers::Effects::of(side_effecting, idempotent, declared, destructive)
        }),
    };
    let r = py.detach(|| providers::render(which, &spec));
    let findings = r
        .findings
        .into_iter()
        .map(|f| (f.provider.to_owned(), f.path, f.message))
        .collect();
    Ok((to_py(py, &r.value)?, findings))
}

/// `args` (a mapping) with strict mode's `null`-for-absent keys removed where `parameters` (the
/// tool's input schema) neither requires the property nor admits `null`.
#[pyfunction]
fn strip_strict_nulls<'py>(
    py: Python<'py>,
    parameters: &Bound<'py, PyAny>,
    args: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let _in = super::shutdown::inside(py);
    let schema = to_value(parameters)?;
    let mut value = to_value(args)?;
    providers::strip_strict_nulls(&schema, &mut value);
    to_py(py, &value)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(render_tool, m)?)?;
    m.add_function(wrap_pyfunction!(strip_strict_nulls, m)?)?;
    m.add("PROVIDERS", providers::PROVIDER_NAMES.to_vec())?;
    Ok(())
}
