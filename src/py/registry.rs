//! Binding of the core's registry (`crate::registry`) and its tool-name rule: the stored handle
//! is the Python tool with its compiled core; lookups read the Python call dict through the
//! core's call-shape rule. Conversions and exception mapping only.

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use super::args::Checked;
use super::calls::{type_error, PyCall};
use super::envelope;
use super::tools::{definition_error, json_to_body_args, json_to_frozen, CoreTool};
use crate::arguments::Source;
use crate::calls::CallError;
use crate::envelope::Code;
use crate::errors::ErrorCode;
use crate::registry::{self, Registry, RegistryError};
use serde_json::Value;

/// What the registry stores per tool.
pub(crate) struct Entry {
    pub(crate) tool: Py<PyAny>,
    pub(crate) core: Py<CoreTool>,
}

/// `ToolDefinitionError` for a name the rule refuses, quoted as Python's `repr`.
fn bad_name(name: &Bound<'_, PyAny>) -> PyErr {
    let shown = name
        .repr()
        .map_or_else(|_| registry::UNPRINTABLE_NAME.to_owned(), |r| r.to_string());
    definition_error(name.py(), registry::tool_name_message(&shown))
}

fn registry_error(py: Python<'_>, e: RegistryError) -> PyErr {
    match e {
        RegistryError::BadName(n) => bad_name(PyString::new(py, &n).as_any()),
        RegistryError::Taken(_) => PyValueError::new_err(e.to_string()),
        RegistryError::NotFound(_) => PyKeyError::new_err(e.to_string()),
    }
}

/// Apply the one tool-name rule: 1-64 characters from a-z, A-Z, 0-9, '_' and '-', the whole
/// name (a trailing newline included). Raises `ToolDefinitionError` naming it.
#[pyfunction]
fn check_tool_name(name: &Bound<'_, PyAny>) -> PyResult<()> {
    let _in = super::shutdown::inside(name.py());
    let ok = name
        .cast::<PyString>()
        .ok()
        .and_then(|s| s.to_str().ok())
        .is_some_and(registry::valid_tool_name);
    if ok {
        Ok(())
    } else {
        Err(bad_name(name))
    }
}

/// Whether `name` passes the tool-name rule.
#[pyfunction]
fn valid_tool_name(name: &str) -> bool {
    registry::valid_tool_name(name)
}

/// `name` with every character the rule refuses replaced by `_` (same length).
#[pyfunction]
fn sanitized_tool_name(name: &str) -> String {
    registry::sanitized_tool_name(name)
}

/// The tools of a `ToolRegistry`: the core's registry over (tool, compiled core) pairs, and the
/// lookup + validation of a call in one step.
#[pyclass(module = "agentkit_tools._core")]
pub struct CoreRegistry {
    inner: Registry<Entry>,
}

#[pymethods]
impl CoreRegistry {
    #[new]
    fn new() -> Self {
        Self {
            inner: Registry::default(),
        }
    }

    // The garbage collector sees the tools a registry holds: a tool whose body refers to its
    // own registry (registry -> tool -> fn -> registry) is collected.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for e in self.inner.in_order() {
            visit.call(&e.tool)?;
            visit.call(&e.core)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.inner = Registry::default();
    }

    /// Add a tool; `ValueError` on a name collision unless `replace`, `ToolDefinitionError` for
    /// a name the tool-name rule refuses.
    #[pyo3(signature = (name, tool, core, replace=false))]
    fn add(&mut self, py: Python<'_>, name: &str, tool: Py<PyAny>, core: Py<CoreTool>, replace: bool) -> PyResult<()> {
        let _in = super::shutdown::inside(py);
        self.inner
            .add(name, Entry { tool, core }, replace)
            .map_err(|e| registry_error(py, e))
    }

    /// Remove a tool by name (`KeyError` when absent).
    fn remove(&mut self, py: Python<'_>, name: &str) -> PyResult<()> {
        let _in = super::shutdown::inside(py);
        self.inner.remove(name).map(drop).map_err(|e| registry_error(py, e))
    }

    fn get(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        self.inner
            .get(name)
            .map(|e| e.tool.clone_ref(py))
            .map_err(|e| registry_error(py, e))
    }

    fn core(&self, py: Python<'_>, name: &str) -> PyResult<Py<CoreTool>> {
        self.inner
            .get(name)
            .map(|e| e.core.clone_ref(py))
            .map_err(|e| registry_error(py, e))
    }

    /// Names, sorted (byte order).
    fn names(&self, py: Python<'_>) -> Vec<&str> {
        let _in = super::shutdown::inside(py);
        self.inner.names().collect()
    }

    /// Tools, sorted by name.
    fn sorted_tools(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let _in = super::shutdown::inside(py);
        self.inner.sorted().map(|e| e.tool.clone_ref(py)).collect()
    }

    /// Tools in insertion order.
    fn tools(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        let _in = super::shutdown::inside(py);
        self.inner.in_order().map(|e| e.tool.clone_ref(py)).collect()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.inner.contains(name)
    }

    /// Look a call up and validate its arguments, in one step.
    ///
    /// `call` is `{"id", "name", "input"}` (Anthropic) or `{"id", "function": {"name",
    /// "arguments"}}` (OpenAI Chat) or `{"call_id", "name", "arguments"}` (OpenAI Responses);
    /// arguments are a mapping or JSON text. Returns `(True, tool, kwargs, core)` for a valid
    /// call or `(False, envelope, None, None)` with the `unknown_tool` / `invalid_call` /
    /// `invalid_arguments` envelope. Raises `TypeError` when the call is not a dict or its name
    /// is not a string.
    fn prepare<'py>(&self, py: Python<'py>, call: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let _in = super::shutdown::inside(py);
        let none = || py.None().into_bound(py);
        match self.admit_call(py, call)? {
            Admission::Tool { entry, args, checked } => {
                let kwargs = entry.core.get().kwargs(py, &args, &checked)?;
                let items = [
                    PyBool::new(py, true).to_owned().into_any(),
                    entry.tool.bind(py).clone(),
                    kwargs.into_any(),
                    entry.core.bind(py).clone().into_any(),
                ];
                PyTuple::new(py, items)
            }
            Admission::Refused { env, .. } => PyTuple::new(
                py,
                [
                    PyBool::new(py, false).to_owned().into_any(),
                    env.into_any(),
                    none(),
                    none(),
                ],
            ),
        }
    }

    /// `prepare` for the Invoker: `(True, tool, args, core, canonical)` with the arguments
    /// deep-frozen (dicts as `frozen_dict`, lists as `frozen_list`) and `canonical` their
    /// canonical JSON text (what `canonical_args(args)[0]` gives), or `(False, envelope, None,
    /// None, None)`. One crossing instead of three (prepare, deep_freeze, canonical_args).
    /// Raises `TypeError` as `prepare` does.
    fn admit<'py>(
        &self,
        py: Python<'py>,
        call: &Bound<'py, PyAny>,
        frozen_dict: &Bound<'py, PyType>,
        frozen_list: &Bound<'py, PyType>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _in = super::shutdown::inside(py);
        let none = || py.None().into_bound(py);
        match self.admit_call(py, call)? {
            Admission::Tool { entry, args, checked } => {
                let frozen = frozen_args(py, entry, &args, &checked, frozen_dict, frozen_list, true)?;
                let canonical = crate::middleware::canonical_json(&checked.value);
                let items = [
                    PyBool::new(py, true).to_owned().into_any(),
                    entry.tool.bind(py).clone(),
                    frozen,
                    entry.core.bind(py).clone().into_any(),
                    PyString::new(py, &canonical).into_any(),
                ];
                PyTuple::new(py, items)
            }
            Admission::Refused { env, .. } => PyTuple::new(
                py,
                [
                    PyBool::new(py, false).to_owned().into_any(),
                    env.into_any(),
                    none(),
                    none(),
                    none(),
                ],
            ),
        }
    }

    /// The `unknown_tool` envelope for `name`.
    fn unknown_tool<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let _in = super::shutdown::inside(py);
        envelope::failure(py, &self.inner.unknown_tool(name))
    }
}

/// A call the registry admitted (a registered tool, arguments that pass its schema), or the
/// `unknown_tool` / `invalid_call` / `invalid_arguments` envelope refusing it.
pub(crate) enum Admission<'a, 'py> {
    Tool {
        entry: &'a Entry,
        args: Bound<'py, PyAny>,
        checked: Checked,
    },

    /// The envelope, its error code, and the arguments as read when they are exactly what was
    /// sent (their canonical text is the raw arguments').
    Refused {
        env: Bound<'py, PyDict>,
        code: Code,
        raw: Option<Value>,
    },
}

/// What `CoreRegistry::admit_frozen` made of a call.
pub(crate) enum Frozen<'a, 'py> {
    /// A plain call of a flat schema: the body's arguments, frozen already, and their key
    /// (`crate::middleware::args_key`).
    Plain {
        entry: &'a Entry,
        args: Bound<'py, PyAny>,
        key: Vec<u8>,
    },
    Other(Admission<'a, 'py>),
}

/// The body's arguments deep-frozen (dicts as `frozen_dict`, lists as `frozen_list`): the
/// caller's own objects when validation kept them, else the validated value. `sealed` false: the
/// top level is a plain new `dict` (only what it holds is frozen; see `frozen::seal`).
pub(crate) fn frozen_args<'py>(
    py: Python<'py>,
    entry: &Entry,
    args: &Bound<'py, PyAny>,
    checked: &Checked,
    frozen_dict: &Bound<'py, PyType>,
    frozen_list: &Bound<'py, PyType>,
    sealed: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let freeze = |d: &Bound<'py, PyDict>| {
        if sealed {
            super::frozen::freeze(d.as_any(), frozen_dict, frozen_list, 0)
        } else {
            super::frozen::freeze_values(d, frozen_dict, frozen_list).map(Bound::into_any)
        }
    };
    let callers = args.cast::<PyDict>().ok();
    match (checked.found.source(callers.is_some(), sealed), callers) {
        // Only the entries validation found containers in are looked at again.
        (Source::CallersAt(at), Some(d)) => {
            super::frozen::freeze_values_at(d, at, frozen_dict, frozen_list).map(Bound::into_any)
        }
        (Source::Callers, Some(d)) => freeze(d),
        (Source::Python, _) => freeze(&entry.core.get().kwargs(py, args, checked)?),
        _ if sealed => json_to_frozen(py, &checked.value, (frozen_dict, frozen_list)),
        _ => json_to_body_args(py, &checked.value, (frozen_dict, frozen_list)),
    }
}

impl CoreRegistry {
    /// Look `call` up and check its arguments (see `prepare`). Raises `TypeError` for a call
    /// that is not a dict or whose name is not a string (the text is the `invalid_call` problem).
    pub(crate) fn admit_call<'a, 'py>(
        &'a self,
        py: Python<'py>,
        call: &Bound<'py, PyAny>,
    ) -> PyResult<Admission<'a, 'py>> {
        match self.lookup_call(py, call)? {
            Ok((entry, args)) => Self::check(py, entry, args),
            Err(refused) => Ok(refused),
        }
    }

    /// `admit_call`, where a plain call of a tool whose schema is flat is admitted in one walk
    /// of its arguments, frozen as `frozen_dict`/`frozen_list` (a `frozen_dict` when `sealed`;
    /// see `args::plain_call`).
    pub(crate) fn admit_frozen<'a, 'py>(
        &'a self,
        py: Python<'py>,
        call: &Bound<'py, PyAny>,
        frozen_dict: &Bound<'py, PyType>,
        frozen_list: &Bound<'py, PyType>,
        sealed: bool,
    ) -> PyResult<Frozen<'a, 'py>> {
        let (entry, args) = match self.lookup_call(py, call)? {
            Ok(found) => found,
            Err(refused) => return Ok(Frozen::Other(refused)),
        };
        if let Some((args, key)) = entry.core.get().plain_call(&args, frozen_dict, frozen_list, sealed)? {
            return Ok(Frozen::Plain { entry, args, key });
        }
        Self::check(py, entry, args).map(Frozen::Other)
    }

    /// The tool `call` names and its arguments, or the envelope refusing the call.
    #[allow(clippy::type_complexity)]
    fn lookup_call<'a, 'py>(
        &'a self,
        py: Python<'py>,
        call: &Bound<'py, PyAny>,
    ) -> PyResult<Result<(&'a Entry, Bound<'py, PyAny>), Admission<'a, 'py>>> {
        let Ok(d) = call.cast::<PyDict>() else {
            return Err(type_error(&CallError::NotAMapping(super::calls::type_name(call))));
        };
        Ok(match self.inner.lookup(&PyCall(d.clone()))? {
            registry::Lookup::Found(entry, args) => Ok((entry, args.unwrap_or_else(|| py.None().into_bound(py)))),
            registry::Lookup::Refused(f) => Err(Admission::Refused {
                env: envelope::failure(py, &f)?,
                code: f.code,
                raw: None,
            }),
            registry::Lookup::Malformed(e) => return Err(type_error(&e)),
        })
    }

    /// Check the arguments of a call of `entry`.
    fn check<'a, 'py>(py: Python<'py>, entry: &'a Entry, args: Bound<'py, PyAny>) -> PyResult<Admission<'a, 'py>> {
        let core = entry.core.get();
        Ok(match core.check_call(&args)? {
            Ok(checked) => Admission::Tool { entry, args, checked },
            Err(refused) => Admission::Refused {
                env: core.rejection_envelope(py, &refused.rejection)?,
                code: Code::Known(ErrorCode::InvalidArguments),
                raw: refused.raw,
            },
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CoreRegistry>()?;
    m.add_function(wrap_pyfunction!(check_tool_name, m)?)?;
    m.add_function(wrap_pyfunction!(valid_tool_name, m)?)?;
    m.add_function(wrap_pyfunction!(sanitized_tool_name, m)?)?;
    Ok(())
}
