//! Bindings for tool definition, argument validation, the classification of a raised exception
//! and the envelopes of the failure ladder. Conversions and exception mapping only: the rules
//! live in the core modules (`schema`, `validate`, `errors`, `envelope`, `render`).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use serde_json::Value;

use super::envelope::{self, PyFailure as Failure};
use super::gil::GilCell;
use crate::envelope::{Code, Described, ShapeErrors, Success};
use crate::errors::{self, Describe, ErrorClass, Raised, TransientBuiltin};
use crate::render;
use crate::schema::{self, ParamSpec};
use crate::validate::{self, ArgumentValidator, Rejection};

/// The registry binding lives in `super::registry`; named here too for callers that knew it here.
#[allow(unused_imports)]
pub(crate) use super::registry::CoreRegistry;

/// The Python exception classes of `agentkit_tools.errors`, imported once.
pub(crate) struct Errors {
    pub(crate) definition: Py<PyAny>,
    pub(crate) argument: Py<PyAny>,
    pub(crate) tool_error: Py<PyAny>,
    pub(crate) timeout: Py<PyAny>,
    pub(crate) shape: Py<PyAny>,
}

static ERRORS: PyOnceLock<Errors> = PyOnceLock::new();

pub(crate) fn errors(py: Python<'_>) -> PyResult<&Errors> {
    ERRORS.get_or_try_init(py, || {
        let m = py.import("agentkit_tools.errors")?;
        Ok(Errors {
            definition: m.getattr("ToolDefinitionError")?.unbind(),
            argument: m.getattr("ToolArgumentError")?.unbind(),
            tool_error: m.getattr("ToolError")?.unbind(),
            timeout: m.getattr("ToolTimeoutError")?.unbind(),
            shape: m.getattr("ToolShapeError")?.unbind(),
        })
    })
}

/// The one mapping of a raised exception to what the rules see (`crate::errors::Raised`), by
/// class, never by message: the exception is tested against the classes in the core's order
/// (`ErrorClass::ORDER`), a `ToolError`'s `retriable` read defensively; an exception of none of
/// them is tested against the core's transient built-in classes and `transient`.
pub(crate) fn classify(
    py: Python<'_>,
    exc: &Bound<'_, PyAny>,
    transient: Option<&Bound<'_, PyTuple>>,
) -> PyResult<Raised> {
    let c = errors(py)?;
    for class in ErrorClass::ORDER {
        let ty = match class {
            ErrorClass::Arguments => &c.argument,
            ErrorClass::Deadline => &c.timeout,
            ErrorClass::Tool => &c.tool_error,
            ErrorClass::Shape => &c.shape,
        };
        if exc.is_instance(ty.bind(py))? {
            let retriable = match class {
                ErrorClass::Tool => exc.getattr("retriable").and_then(|r| r.is_truthy()).ok(),
                _ => None,
            };
            return Ok(Raised::of(Some(class), retriable, false));
        }
    }
    let builtin = errors::TRANSIENT_BUILTINS.iter().any(|b| match b {
        TransientBuiltin::ConnectionError => exc.is_instance_of::<pyo3::exceptions::PyConnectionError>(),
        TransientBuiltin::TimeoutError => exc.is_instance_of::<pyo3::exceptions::PyTimeoutError>(),
    });
    let transient = builtin
        || match transient {
            Some(t) if !t.is_empty() => exc.is_instance(t.as_any())?,
            _ => false,
        };
    Ok(Raised::of(None, None, transient))
}

thread_local! {
    /// What the last [`json_value`] on this thread met that JSON text would not give: integers
    /// beyond 64 bits (carried as floats of the same magnitude for validation), and containers
    /// other than `dict`/`list` (tuples, sets, mappings, dataclasses).
    static MET: std::cell::Cell<Met> = const { std::cell::Cell::new(Met { big_ints: false, other_containers: false, containers_at: None }) };
}

/// See [`MET`].
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Met {
    pub(crate) big_ints: bool,
    pub(crate) other_containers: bool,
    /// The value was an exact `dict` of at most 64 entries, converted by the fast path: bit `i`
    /// is set when the entry at position `i` of its order (as `PyDict_Next` counts them) holds
    /// a `dict`, `list` or `tuple` (see `frozen::freeze_values_at`).
    pub(crate) containers_at: Option<u64>,
}

fn note(f: impl FnOnce(&mut Met)) {
    MET.with(|m| {
        let mut v = m.get();
        f(&mut v);
        m.set(v);
    });
}

/// An integer beyond 64 bits as the float of the same magnitude (the largest finite float past
/// that): exact enough for the validator's type and bound checks; the body gets the integer.
fn big_int_value(obj: &Bound<'_, PyAny>) -> Value {
    note(|m| m.big_ints = true);
    let f = validate::big_int_stand_in(obj.extract::<f64>().ok(), || obj.lt(0i64).unwrap_or(false));
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

pub(crate) fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    json_value(obj).map_err(|e| PyValueError::new_err(validate::not_json_message(&e.to_string())))
}

/// Convert a Python value into JSON the way `json.loads` would have produced it, refusing what
/// JSON cannot carry instead of guessing: NaN and the infinities, integers beyond 64 bits, byte
/// strings, non-string object keys, and nesting deeper than [`validate::MAX_NESTING`] (the
/// limit `serde_json` applies to JSON text; deeper Python values would overflow the stack).
/// Containers are what `pythonize` accepts: lists, tuples, sets, dicts, other sequences and
/// mappings, dataclasses.
fn json_value(obj: &Bound<'_, PyAny>) -> Result<Value, pythonize::PythonizeError> {
    use serde::de::DeserializeSeed;
    MET.with(|m| m.set(Met::default()));
    if let Some(value) = top_json(obj) {
        return Ok(value);
    }
    MET.with(|m| {
        m.set(Met {
            big_ints: false,
            other_containers: true,
            containers_at: None,
        })
    });
    JsonSeed { depth: 0 }.deserialize(&mut pythonize::Depythonizer::from_object(obj))
}

/// What the last [`json_value`] call on this thread met (see [`MET`]).
pub(crate) fn last_met() -> Met {
    MET.with(std::cell::Cell::get)
}

/// [`plain_json`] of a call's arguments; an exact `dict` of at most 64 entries is walked by
/// position, noting where its containers are ([`Met::containers_at`]).
fn top_json(obj: &Bound<'_, PyAny>) -> Option<Value> {
    let Ok(d) = obj.cast_exact::<PyDict>() else {
        return plain_json(obj, 0);
    };
    if d.len() > 64 {
        return plain_json(obj, 0);
    }
    let py = obj.py();
    let mut map = serde_json::Map::with_capacity(d.len());
    let mut at: u64 = 0;
    let mut pos: pyo3::ffi::Py_ssize_t = 0;
    loop {
        let here = pos;
        let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a live dict; `k` and `v` are borrowed while it is not changed (no Python code
        // runs in this loop: only exact built-in types are read) and taken as new references.
        if unsafe { pyo3::ffi::PyDict_Next(d.as_ptr(), &mut pos, &mut k, &mut v) } == 0 {
            break;
        }
        let (k, v) = unsafe { (Bound::from_borrowed_ptr(py, k), Bound::from_borrowed_ptr(py, v)) };
        if !k.is_exact_instance_of::<PyString>() {
            return None;
        }
        let key = k.cast::<PyString>().ok()?.to_str().ok()?.to_owned();
        if here < 64 && (v.is_instance_of::<PyDict>() || v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>())
        {
            at |= 1u64 << here;
        }
        map.insert(key, plain_json(&v, 1)?);
    }
    if pos <= 64 {
        note(|m| m.containers_at = Some(at));
    }
    Some(Value::Object(map))
}

/// The fast path of [`json_value`] for the values a decoded tool call is made of: exact `dict`
/// (string keys), `list`, `tuple`, `str`, `bool`, `int` (64-bit), finite `float` and `None`.
/// Returns None as soon as anything else (or anything [`json_value`] refuses, or nesting past
/// the limit) is met; the general path then converts or refuses the whole value with its
/// message. `depth` counts the arrays and objects around `obj`.
fn plain_json(obj: &Bound<'_, PyAny>, depth: usize) -> Option<Value> {
    if obj.is_none() {
        return Some(Value::Null);
    }
    if obj.is_exact_instance_of::<PyString>() {
        return obj
            .cast::<PyString>()
            .ok()?
            .to_str()
            .ok()
            .map(|s| Value::String(s.to_owned()));
    }
    if obj.is_exact_instance_of::<PyBool>() {
        return Some(Value::Bool(obj.is_truthy().ok()?));
    }
    if obj.is_exact_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Some(Value::from(i));
        }
        return Some(obj.extract::<u64>().map_or_else(|_| big_int_value(obj), Value::from));
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        let f = obj.cast::<PyFloat>().ok()?.value();
        return serde_json::Number::from_f64(f).map(Value::Number);
    }
    let inner = depth + 1;
    if obj.is_exact_instance_of::<PyDict>() {
        if inner > validate::MAX_NESTING {
            return None;
        }
        let d = obj.cast::<PyDict>().ok()?;
        let mut map = serde_json::Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            if !k.is_exact_instance_of::<PyString>() {
                return None;
            }
            let key = k.cast::<PyString>().ok()?.to_str().ok()?.to_owned();
            map.insert(key, plain_json(&v, inner)?);
        }
        return Some(Value::Object(map));
    }
    if obj.is_exact_instance_of::<PyList>() {
        if inner > validate::MAX_NESTING {
            return None;
        }
        let l = obj.cast::<PyList>().ok()?;
        let mut items = Vec::with_capacity(l.len());
        for v in l.iter() {
            items.push(plain_json(&v, inner)?);
        }
        return Some(Value::Array(items));
    }
    if obj.is_exact_instance_of::<PyTuple>() {
        if inner > validate::MAX_NESTING {
            return None;
        }
        let t = obj.cast::<PyTuple>().ok()?;
        note(|m| m.other_containers = true);
        let mut items = Vec::with_capacity(t.len());
        for v in t.iter() {
            items.push(plain_json(&v, inner)?);
        }
        return Some(Value::Array(items));
    }
    None
}

/// A `serde_json::Value` built with the limits of [`json_value`]; `depth` counts the arrays and
/// objects around the value being read.
#[derive(Clone, Copy)]
struct JsonSeed {
    depth: usize,
}

impl JsonSeed {
    fn enter<E: serde::de::Error>(self) -> Result<Self, E> {
        let depth = self.depth + 1;
        if depth > validate::MAX_NESTING {
            return Err(E::custom(validate::too_deep_message()));
        }
        Ok(Self { depth })
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for JsonSeed {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for JsonSeed {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(i64::try_from(v).map(Value::from).unwrap_or_else(|_| {
            note(|m| m.big_ints = true);
            serde_json::Number::from_f64(v as f64).map_or(Value::Null, Value::Number)
        }))
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(u64::try_from(v).map(Value::from).unwrap_or_else(|_| {
            note(|m| m.big_ints = true);
            serde_json::Number::from_f64(v as f64).map_or(Value::Null, Value::Number)
        }))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(validate::not_a_number_message(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Value, E> {
        Err(E::custom(validate::BYTES_NOT_JSON))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.enter()?;
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.enter()?;
        let mut obj = serde_json::Map::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(inner)?;
            obj.insert(key, value);
        }
        Ok(Value::Object(obj))
    }
}

/// An object key: a string, nothing else (as in JSON).
struct KeySeed;

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeySeed {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string object key (JSON object keys are strings)")
    }
    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_string<E>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}

pub(crate) fn json_value_of(obj: &Bound<'_, PyAny>) -> Result<Value, pythonize::PythonizeError> {
    json_value(obj)
}

pub(crate) fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A compiled JSON Schema (draft 2020-12, formats asserted).
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct SchemaValidator {
    inner: validate::SchemaValidator,
}

#[pymethods]
impl SchemaValidator {
    #[new]
    fn new(schema: &Bound<'_, PyAny>) -> PyResult<Self> {
        let _in = super::shutdown::inside(schema.py());
        let inner = validate::SchemaValidator::new(to_value(schema)?).map_err(PyValueError::new_err)?;
        Ok(Self { inner })
    }

    /// True when `instance` (a JSON-compatible Python value) is valid.
    fn is_valid(&self, instance: &Bound<'_, PyAny>) -> bool {
        let _in = super::shutdown::inside(instance.py());
        to_value(instance).is_ok_and(|v| self.inner.is_valid(&v))
    }

    /// Every problem as `(path, reason)` pairs; `[]` when valid.
    fn problems(&self, instance: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
        let _in = super::shutdown::inside(instance.py());
        match json_value(instance) {
            Ok(v) => Ok(self.inner.problems(&v)),
            Err(e) => Ok(validate::not_json_problems(&e.to_string())),
        }
    }
}

/// The per-tool state the core keeps: the compiled input schema and the definition.
#[pyclass(frozen, module = "agentkit_tools._core")]
pub struct CoreTool {
    name: String,
    description: String,
    documented: Vec<String>,
    validator: ArgumentValidator,
    /// The input schema as a Python dict, built once.
    parameters: Py<PyAny>,
    /// The input schema as plain Python dicts and lists, built on the first rejected call: each
    /// `invalid_arguments` envelope gets a copy of its containers (strings and numbers shared).
    envelope_schema: PyOnceLock<Py<PyAny>>,
    /// What the pipeline found out about the tool's `fn` the last time it looked (see
    /// [`BodyPlan`]), for the same `fn` object.
    body_plan: GilCell<Option<BodyPlan>>,
    /// What the call pipeline last read of the tool's flags (see `pipeline::ToolFlags`, kept
    /// while `getattr` on the tool still answers the same objects).
    pub(crate) flags: GilCell<super::pipeline::Kept>,
}

/// What the call pipeline learns about a tool's body callable `fn` from its code and closure:
/// read once per `fn` object instead of at every call. Held by weak references (a function the
/// tool no longer uses, and its closure, are never kept alive by this).
pub(crate) struct BodyPlan {
    /// The `fn` object described (a dead reference, or another object: not this plan's).
    body: Py<pyo3::types::PyWeakrefReference>,
    /// `fn` is one of the wrappers `tools.from_callable` makes that only unpack or copy the
    /// mapping (`tools._ARGS_UNPACKED`).
    pub(crate) unpacks: bool,
    /// `fn` is the `invoke_plain` wrapper (`func(**args)`) around this Python function.
    plain: Option<Py<pyo3::types::PyWeakrefReference>>,
}

impl BodyPlan {
    /// `unpacks` and `plain` of `body`, or None when `body` cannot be referred to weakly (it is
    /// then read at every call).
    pub(crate) fn new(body: &Bound<'_, PyAny>, unpacks: bool, plain: Option<&Bound<'_, PyAny>>) -> Option<Self> {
        use pyo3::types::PyWeakrefReference;
        let weak = PyWeakrefReference::new(body).ok()?.unbind();
        let plain = match plain {
            Some(f) => Some(PyWeakrefReference::new(f).ok()?.unbind()),
            None => None,
        };
        Some(BodyPlan {
            body: weak,
            unpacks,
            plain,
        })
    }

    /// The plain function, alive (see `plain`).
    pub(crate) fn plain<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        use pyo3::types::PyWeakrefMethods;
        self.plain.as_ref().and_then(|w| w.bind(py).upgrade())
    }
}

impl CoreTool {
    /// The plan found for `body` before, if `body` is the object it describes: `(unpacks,
    /// plain function)`.
    pub(crate) fn cached_plan<'py>(&self, body: &Bound<'py, PyAny>) -> Option<(bool, Option<Bound<'py, PyAny>>)> {
        use pyo3::types::PyWeakrefMethods;
        let py = body.py();
        self.body_plan
            .with(py, |slot| {
                let plan = slot.as_ref()?;
                if !plan.body.bind(py).upgrade().is_some_and(|b| b.is(body)) {
                    return None;
                }
                let plain = plan.plain(py);
                if plan.plain.is_some() && plain.is_none() {
                    return None;
                }
                Some((plan.unpacks, plain))
            })
            .flatten()
    }

    /// Keep `plan` (replacing the one held).
    pub(crate) fn keep_plan(&self, py: Python<'_>, plan: BodyPlan) {
        // The plan it replaces is let go after the cell (its weak references are dropped then).
        drop(self.body_plan.with(py, |slot| slot.replace(plan)));
    }

    fn build(
        py: Python<'_>,
        name: String,
        description: String,
        documented: Vec<String>,
        parameters: Value,
        dropped: Vec<String>,
    ) -> PyResult<Self> {
        let py_params = to_py(py, &parameters)?.unbind();
        let validator = ArgumentValidator::new(parameters, dropped).map_err(|error| schema_error(py, &name, error))?;
        Ok(Self {
            name,
            description,
            documented,
            validator,
            parameters: py_params,
            envelope_schema: PyOnceLock::new(),
            body_plan: GilCell::new(None),
            flags: GilCell::new(super::pipeline::Kept::Nothing),
        })
    }

    /// Parse (JSON text) or convert (a mapping) the arguments and check them (see
    /// [`super::args::check`]).
    pub(crate) fn check(&self, args: &Bound<'_, PyAny>) -> PyResult<Result<super::args::Checked, Rejection>> {
        super::args::check(&self.validator, args)
    }

    /// `check`, keeping the arguments as read when they are rejected.
    pub(crate) fn check_call(
        &self,
        args: &Bound<'_, PyAny>,
    ) -> PyResult<Result<super::args::Checked, super::args::Refused>> {
        super::args::check_call(&self.validator, args)
    }

    /// A plain call's arguments accepted by the flat schema in one walk (see
    /// `args::plain_call`), None when the full check is needed.
    pub(crate) fn plain_call<'py>(
        &self,
        args: &Bound<'py, PyAny>,
        frozen_dict: &Bound<'py, PyType>,
        frozen_list: &Bound<'py, PyType>,
        sealed: bool,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Vec<u8>)>> {
        super::args::plain_call(&self.validator, args, frozen_dict, frozen_list, sealed)
    }

    /// The keyword arguments for the body: a fresh dict (the caller's mapping is never shared).
    pub(crate) fn kwargs<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyAny>,
        checked: &super::args::Checked,
    ) -> PyResult<Bound<'py, PyDict>> {
        super::args::body_kwargs(py, &self.validator, args, checked)
    }

    fn argument_error(&self, py: Python<'_>, rejection: &Rejection) -> PyErr {
        let build = || -> PyResult<PyErr> {
            let validate::ArgumentProblems {
                unexpected,
                missing,
                invalid,
            } = rejection.to_problems();
            let kwargs = PyDict::new(py);
            kwargs.set_item("unexpected", PyTuple::new(py, unexpected)?)?;
            kwargs.set_item("missing", PyTuple::new(py, missing)?)?;
            kwargs.set_item("accepted", PyTuple::new(py, self.validator.accepted())?)?;
            kwargs.set_item("invalid", PyTuple::new(py, invalid)?)?;
            let exc = errors(py)?.argument.bind(py).call((&self.name,), Some(&kwargs))?;
            Ok(PyErr::from_value(exc))
        };
        build().unwrap_or_else(|e| e)
    }

    /// The `invalid_arguments` envelope for a rejection.
    pub(crate) fn rejection_envelope<'py>(
        &self,
        py: Python<'py>,
        rejection: &Rejection,
    ) -> PyResult<Bound<'py, PyDict>> {
        Ok(self.rejection_failure(py, rejection)?.1)
    }

    /// `rejection_envelope` with its code.
    fn rejection_failure<'py>(&self, py: Python<'py>, rejection: &Rejection) -> PyResult<(Code, Bound<'py, PyDict>)> {
        let f = Failure::invalid_arguments(
            &self.name,
            rejection,
            self.validator.accepted_repr(),
            self.validator.schema(),
        );
        let schema = self
            .envelope_schema
            .get_or_try_init(py, || to_py(py, self.validator.schema()).map(Bound::unbind))?;
        Ok((
            f.code.clone(),
            envelope::failure_with_schema(py, &f, Some(schema.bind(py)))?,
        ))
    }

    /// `argument_error_envelope` with its code.
    fn argument_error_failure<'py>(
        &self,
        py: Python<'py>,
        exc: &Bound<'py, PyAny>,
    ) -> PyResult<(Code, Bound<'py, PyDict>)> {
        let tuple_of = |attr: &str| -> PyResult<Vec<String>> { exc.getattr(attr)?.extract() };
        let problems = validate::ArgumentProblems {
            unexpected: tuple_of("unexpected")?,
            missing: tuple_of("missing")?,
            invalid: exc.getattr("invalid")?.extract()?,
        };
        self.rejection_failure(py, &Rejection::Problems(problems))
    }
}

#[pymethods]
impl CoreTool {
    /// Compile the input schema of a tool that already has one (a hand-built tool).
    #[staticmethod]
    #[pyo3(signature = (name, parameters, dropped=Vec::new(), description=String::new()))]
    fn from_schema(
        py: Python<'_>,
        name: String,
        parameters: &Bound<'_, PyAny>,
        dropped: Vec<String>,
        description: String,
    ) -> PyResult<Self> {
        let _in = super::shutdown::inside(py);
        Self::build(py, name, description, Vec::new(), to_value(parameters)?, dropped)
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    #[getter]
    fn description(&self) -> &str {
        &self.description
    }

    #[getter]
    fn parameters(&self, py: Python<'_>) -> Py<PyAny> {
        self.parameters.clone_ref(py)
    }

    #[getter]
    fn documented(&self, py: Python<'_>) -> Vec<String> {
        let _in = super::shutdown::inside(py);
        self.documented.clone()
    }

    #[getter]
    fn accepted(&self, py: Python<'_>) -> Vec<String> {
        let _in = super::shutdown::inside(py);
        self.validator.accepted().to_vec()
    }

    /// Validate a call's arguments (a mapping or JSON text) and return a fresh dict of them.
    /// Raises `ToolArgumentError` with every problem.
    fn validate<'py>(&self, py: Python<'py>, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let _in = super::shutdown::inside(py);
        match self.check(args)? {
            Ok(checked) => self.kwargs(py, args, &checked),
            Err(rejection) => Err(self.argument_error(py, &rejection)),
        }
    }

    /// The `invalid_arguments` envelope for a `ToolArgumentError` raised elsewhere.
    fn argument_error_envelope<'py>(&self, py: Python<'py>, exc: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let _in = super::shutdown::inside(py);
        Ok(self.argument_error_failure(py, exc)?.1)
    }
}

/// Define a tool from what introspection read: parse the docstring, apply the description
/// rules, assemble and compile the input schema. Raises `ToolDefinitionError`.
///
/// `params`: `(name, schema fragment, required, JSON default, Annotated description or None,
/// has a JSON default)` per advertised parameter, in signature order. `defs`: `$defs` for
/// recursive types, placed at the root of the input schema.
#[pyfunction]
#[pyo3(signature = (name, description, doc, params, allow_extra, dropped, defs=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn define_tool(
    py: Python<'_>,
    name: String,
    description: Option<String>,
    doc: Option<String>,
    params: Vec<(String, Bound<'_, PyAny>, bool, Bound<'_, PyAny>, Option<String>, bool)>,
    allow_extra: bool,
    dropped: Vec<String>,
    defs: Option<Bound<'_, PyAny>>,
) -> PyResult<CoreTool> {
    let _in = super::shutdown::inside(py);
    let params = params
        .into_iter()
        .map(|(n, fragment, required, default, desc, has_default)| {
            (n, fragment, required, Some(default), has_default, desc)
        });
    let def = assemble(py, &name, description, doc, params, allow_extra, defs)?;
    CoreTool::build(py, name, def.description, def.documented, def.parameters, dropped)
}

/// The input schema of a tool defined from introspected parameters `(name, schema fragment,
/// required, default (None: none), whether JSON can carry that default as introspection found,
/// Annotated description)`, the description rules applied (which defaults are advertised:
/// `schema::advertised_default`), and `defs` (for recursive types) placed at its root as `$defs`.
fn assemble<'py>(
    py: Python<'py>,
    name: &str,
    description: Option<String>,
    doc: Option<String>,
    params: impl ExactSizeIterator<
        Item = (
            String,
            Bound<'py, PyAny>,
            bool,
            Option<Bound<'py, PyAny>>,
            bool,
            Option<String>,
        ),
    >,
    allow_extra: bool,
    defs: Option<Bound<'py, PyAny>>,
) -> PyResult<schema::Definition> {
    let mut specs = Vec::with_capacity(params.len());
    for (pname, fragment, required, default, carried, pdesc) in params {
        specs.push(ParamSpec {
            schema: to_value(&fragment)?,
            required,
            default: schema::advertised_default(required, default, carried, |d| to_value(&d)),
            description: pdesc,
            name: pname,
        });
    }
    let mut def = schema::define(name, description.as_deref(), doc.as_deref(), specs, allow_extra)
        .map_err(|e| definition_error(py, e.to_string()))?;
    if let Some(defs) = defs {
        def.set_defs(to_value(&defs)?);
    }
    Ok(def)
}

/// A JSON value as deep-frozen Python objects, built directly (no serde round trip): objects
/// as `frozen.0` instances (a `dict` subclass, filled through the C-level store), arrays as
/// `frozen.1` instances (a `list` subclass), numbers as `int`/`float`, the rest as
/// `str`/`bool`/None — the values `pythonize` gives for a `serde_json::Value`, frozen.
pub(crate) fn json_to_frozen<'py>(
    py: Python<'py>,
    value: &Value,
    frozen: (&Bound<'py, PyType>, &Bound<'py, PyType>),
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => py_str(py, s).into_any(),
        Value::Array(items) => {
            let list = super::frozen::new_empty(frozen.1)?.cast_into::<PyList>()?;
            for item in items {
                list.append(json_to_frozen(py, item, frozen)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = super::frozen::new_empty(frozen.0)?.cast_into::<PyDict>()?;
            for (k, v) in map {
                dict.set_item(py_str(py, k), json_to_frozen(py, v, frozen)?)?;
            }
            dict.into_any()
        }
    })
}

/// `json_to_frozen` with a plain `dict` at the top (the body's arguments; see
/// `registry::frozen_args`).
pub(crate) fn json_to_body_args<'py>(
    py: Python<'py>,
    value: &Value,
    frozen: (&Bound<'py, PyType>, &Bound<'py, PyType>),
) -> PyResult<Bound<'py, PyAny>> {
    let Value::Object(map) = value else {
        return json_to_frozen(py, value, frozen);
    };
    let dict = PyDict::new(py);
    for (k, v) in map {
        dict.set_item(py_str(py, k), json_to_frozen(py, v, frozen)?)?;
    }
    Ok(dict.into_any())
}

/// `s` as a Python string: the interned one for the keywords and type names every input schema
/// is made of (no allocation, hash already known, shared by all schemas), a new one otherwise.
fn py_str<'py>(py: Python<'py>, s: &str) -> Bound<'py, PyString> {
    let word = match s {
        "type" => intern!(py, "type"),
        "description" => intern!(py, "description"),
        "properties" => intern!(py, "properties"),
        "required" => intern!(py, "required"),
        "additionalProperties" => intern!(py, "additionalProperties"),
        "items" => intern!(py, "items"),
        "enum" => intern!(py, "enum"),
        "default" => intern!(py, "default"),
        "anyOf" => intern!(py, "anyOf"),
        "format" => intern!(py, "format"),
        "string" => intern!(py, "string"),
        "integer" => intern!(py, "integer"),
        "number" => intern!(py, "number"),
        "boolean" => intern!(py, "boolean"),
        "array" => intern!(py, "array"),
        "object" => intern!(py, "object"),
        "null" => intern!(py, "null"),
        _ => return PyString::new(py, s),
    };
    word.clone()
}

/// `define_tool` for a tool built from a Python function, in one call: the input schema is
/// built deep-frozen (dicts as `frozen_dict`, lists as `frozen_list` instances) and returned
/// with the core for the tool's `ToolSchema` (it is also the core's `parameters`), so no copy is
/// made in Python. Raises `ToolDefinitionError`.
///
/// `params`: `(name, schema fragment, required, JSON default or None, Annotated description or
/// None)` per advertised parameter, in signature order; `non_json`: names of parameters whose
/// default JSON cannot carry (not advertised). `defs`: `$defs` for recursive types, placed at the
/// root of the input schema.
#[pyfunction]
#[pyo3(signature = (name, description, doc, params, non_json, allow_extra, dropped, defs, frozen_dict, frozen_list))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn define_function_tool<'py>(
    py: Python<'py>,
    name: String,
    description: Option<String>,
    doc: Option<String>,
    params: Vec<(String, Bound<'py, PyAny>, bool, Bound<'py, PyAny>, Option<String>)>,
    non_json: Vec<String>,
    allow_extra: bool,
    dropped: Vec<String>,
    defs: Option<Bound<'py, PyAny>>,
    frozen_dict: Bound<'py, PyType>,
    frozen_list: Bound<'py, PyType>,
) -> PyResult<(CoreTool, Bound<'py, PyAny>)> {
    let _in = super::shutdown::inside(py);
    let params = params.into_iter().map(|(n, fragment, required, default, desc)| {
        let carried = !non_json.contains(&n);
        (n, fragment, required, Some(default), carried, desc)
    });
    let def = assemble(py, &name, description, doc, params, allow_extra, defs)?;
    let validator = ArgumentValidator::new(def.parameters, dropped).map_err(|error| schema_error(py, &name, error))?;
    // One Python copy of the schema, frozen: the `ToolSchema`'s and the core's (`parameters`,
    // documented read-only; error envelopes show it).
    let frozen = json_to_frozen(py, validator.schema(), (&frozen_dict, &frozen_list))?;
    let py_params = frozen.clone().unbind();
    let core = CoreTool {
        name,
        description: def.description,
        documented: def.documented,
        validator,
        parameters: py_params,
        envelope_schema: PyOnceLock::new(),
        body_plan: GilCell::new(None),
        flags: GilCell::new(super::pipeline::Kept::Nothing),
    };
    Ok((core, frozen))
}

/// The `ToolDefinitionError` of tool `name` whose input schema does not compile (`error`).
fn schema_error(py: Python<'_>, name: &str, error: String) -> PyErr {
    definition_error(
        py,
        schema::DefinitionError::Schema {
            tool: name.to_owned(),
            error,
        }
        .to_string(),
    )
}

/// A `ToolDefinitionError(message)` (or the error met while building it).
pub(crate) fn definition_error(py: Python<'_>, message: String) -> PyErr {
    match errors(py) {
        Ok(errs) => match errs.definition.bind(py).call1((message,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// The envelope for an exception raised by a tool (or by our own deadline).
///
/// `ToolArgumentError` → `invalid_arguments` (needs `core`), `ToolTimeoutError` → `timeout`,
/// `ToolError` → its own code with `retriable` and details, `ToolShapeError` →
/// `output_mismatch`, anything else → `internal_error`.
#[pyfunction]
#[pyo3(signature = (tool_name, exc, core=None))]
pub(crate) fn error_envelope<'py>(
    py: Python<'py>,
    tool_name: &str,
    exc: &Bound<'py, PyAny>,
    core: Option<&Bound<'py, CoreTool>>,
) -> PyResult<Bound<'py, PyDict>> {
    let _in = super::shutdown::inside(py);
    Ok(error_failure(py, tool_name, exc, core)?.1)
}

/// `error_envelope` with its failure's code.
pub(crate) fn error_failure<'py>(
    py: Python<'py>,
    tool_name: &str,
    exc: &Bound<'py, PyAny>,
    core: Option<&Bound<'py, CoreTool>>,
) -> PyResult<(Code, Bound<'py, PyDict>)> {
    // A tool's own exception is read defensively (a code that is not a str, a broken
    // `__str__`) so that describing the failure can never fail.
    let text =
        |o: PyResult<Bound<'py, PyAny>>| -> Option<String> { o.and_then(|v| v.str()).and_then(|v| v.extract()).ok() };
    let raised = classify(py, exc, None)?;
    let described = match (raised.describe(core.is_some()), core) {
        (Describe::InvalidArguments, Some(core)) => return core.get().argument_error_failure(py, exc),
        (Describe::Deadline, _) => Described::deadline(exc.getattr("timeout_s").and_then(|t| t.extract()).ok()),
        (Describe::Tool, _) => Described::Tool {
            code: text(exc.getattr("code")),
            message: exc.str().and_then(|s| s.extract()).unwrap_or_default(),
            retriable: matches!(raised, Raised::Tool { retriable: true }),
            details: exc.getattr("details").ok().and_then(|d| d.cast_into::<PyDict>().ok()),
        },
        (Describe::Shape, _) => Described::Shape {
            expected: text(exc.getattr("expected")).unwrap_or_default(),
            // `errors`: a list of strings (as the reference's ToolShapeError), else its text.
            errors: match exc.getattr("errors") {
                Ok(e) if !e.is_none() => match e.extract::<Vec<String>>() {
                    Ok(list) => ShapeErrors::List(list),
                    Err(_) => ShapeErrors::Text(text(Ok(e)).unwrap_or_default()),
                },
                _ => ShapeErrors::None,
            },
        },
        // (`InvalidArguments` is only said when the tool is known)
        (Describe::InvalidArguments | Describe::Other, _) => Described::Other {
            exc_type: exc.get_type().qualname()?.extract()?,
            text: exc.str().and_then(|s| s.extract()).unwrap_or_default(),
        },
    };
    let f = Failure::of_described(tool_name, described);
    Ok((f.code.clone(), envelope::failure(py, &f)?))
}

/// The `internal_error` envelope for a fault of the tooling around a tool (a middleware
/// raised `exc`): it names the exception and tells the model not to retry.
#[pyfunction]
pub(super) fn fault_envelope<'py>(py: Python<'py>, exc: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let _in = super::shutdown::inside(py);
    let exc_type: String = exc.get_type().qualname().and_then(|q| q.extract()).unwrap_or_default();
    let text: String = exc.str().and_then(|s| s.extract()).unwrap_or_default();
    envelope::failure(py, &Failure::tooling_fault(&exc_type, &text))
}

/// The message of a `backend_saturated` failure: `tool` was not run, all `stuck` worker threads
/// being held by calls that overran their deadline.
#[pyfunction]
fn backend_saturated_message(tool: &str, stuck: usize) -> String {
    errors::backend_saturated_message(tool, stuck)
}

/// `{"ok": True, "value": value, "elapsed_ms": elapsed_ms}` (`elapsed_ms` rounded to 3
/// decimals), with `"deduplicated": True` when `deduplicated`.
#[pyfunction]
#[pyo3(signature = (value, elapsed_ms, deduplicated=false))]
pub(crate) fn ok_envelope<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    elapsed_ms: f64,
    deduplicated: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let _in = super::shutdown::inside(py);
    let mut s = Success::new(value.clone(), elapsed_ms);
    s.deduplicated = deduplicated;
    envelope::success(py, s)
}

/// Cut `text` to at most `max_chars` characters with the truncation notice (the notice counts toward the limit).
#[pyfunction]
#[pyo3(signature = (text, max_chars=render::DEFAULT_MAX_CHARS))]
fn truncate(text: &str, max_chars: usize) -> String {
    render::truncate(text, max_chars)
}

/// An error message cut to at most `max_chars` characters, its start and end kept around a marker.
#[pyfunction]
fn cut_message(text: &str, max_chars: usize) -> String {
    render::cut_message(text, max_chars)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let patterns = PyDict::new(m.py());
    for (name, pattern, _) in validate::FORMAT_PATTERNS {
        patterns.set_item(name, pattern)?;
    }
    m.add("FORMAT_PATTERNS", patterns)?;
    m.add_class::<SchemaValidator>()?;
    m.add_class::<CoreTool>()?;
    m.add_function(wrap_pyfunction!(define_tool, m)?)?;
    m.add_function(wrap_pyfunction!(define_function_tool, m)?)?;
    m.add_function(wrap_pyfunction!(error_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(ok_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(fault_envelope, m)?)?;
    m.add_function(wrap_pyfunction!(backend_saturated_message, m)?)?;
    m.add_function(wrap_pyfunction!(truncate, m)?)?;
    m.add_function(wrap_pyfunction!(cut_message, m)?)?;
    m.add("MIN_DESCRIPTION_CHARS", schema::MIN_DESCRIPTION_CHARS)?;
    m.add("MAX_SPELLED_OUT", errors::MAX_SPELLED_OUT)?;
    Ok(())
}
