//! A call's arguments between Python and the validator: read (JSON text or a mapping), checked,
//! and turned into the body's keyword arguments. The rules are the core's (`validate`: which
//! reader a JSON text needs, the checks); this module keeps what only the Python side can hold
//! exactly: integers beyond 64 bits, which JSON allows and Python ints carry, reach the body as
//! the integers that were sent.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyFloat, PyFrozenSet, PyInt, PyList, PyMapping, PySet, PyString, PyTuple};
use pyo3::PyTypeInfo;
use serde_json::{Map, Value};

use crate::arguments::Found;
use crate::flat::{Atom, Kind};
use crate::validate::{self, ArgumentValidator, ArgumentsText, Rejection};

/// Arguments larger than this (bytes of JSON text, or top-level keys of a mapping) are parsed
/// and checked with the GIL released, so one hostile call does not stall the other threads.
const DETACH_TEXT_BYTES: usize = 64 * 1024;
const DETACH_KEYS: usize = 1024;

/// A checked call.
pub(crate) struct Checked {
    /// The arguments as JSON, as validated (injected keys dropped, integral floats made
    /// integers where the schema wants one).
    pub(crate) value: Value,
    /// What checking found (`crate::arguments::Found`): it decides how the body's arguments
    /// are made.
    pub(crate) found: Found,
    /// With integers beyond 64 bits (`found.exact`): the Python object the body's dict is built
    /// from (the caller's mapping, or the text read by Python's `json`), never from `value`.
    exact: Option<Py<PyAny>>,
}

fn empty() -> Value {
    Value::Object(Map::new())
}

static JSON_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn json_loads<'py>(text: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    let py = text.py();
    let loads = JSON_LOADS.get_or_try_init(py, || {
        py.import("json").and_then(|m| m.getattr("loads")).map(Bound::unbind)
    })?;
    loads.bind(py).call1((text,))
}

/// What reading the arguments raised (`e`): a stop (`KeyboardInterrupt`, `SystemExit`, see
/// `drive::propagates`) propagates; anything else is the rejection `refuse` makes of it.
fn unreadable(py: Python<'_>, e: PyErr, refuse: impl FnOnce(&PyErr) -> Rejection) -> Refused {
    if super::drive::propagates(py, &e) {
        return Refused {
            rejection: Rejection::NotJson(String::new()),
            raw: None,
            stop: Some(e),
        };
    }
    refuse(&e).into()
}

/// [`unreadable`] of what converting a Python value to JSON failed with, `refuse` given its
/// words (for a string that cannot be encoded, the lone surrogate it holds: see
/// [`lone_surrogate`]).
fn unconvertible(py: Python<'_>, e: pythonize::PythonizeError, refuse: impl FnOnce(String) -> Rejection) -> Refused {
    let message = e.to_string();
    let e = PyErr::from(e);
    let message = lone_surrogate(py, &e).unwrap_or(message);
    unreadable(py, e, |_| refuse(message))
}

/// The rejection of arguments text that cannot be read as UTF-8 (`e`: what reading it raised).
#[cold]
#[inline(never)]
fn not_text(py: Python<'_>, e: PyErr) -> Rejection {
    Rejection::NotJson(lone_surrogate(py, &e).unwrap_or_else(|| e.to_string()))
}

/// The words of `validate::lone_surrogate_message` when `e` is a string's failure to encode
/// (`UnicodeEncodeError`: in UTF-8 only a surrogate fails), naming the one it failed on.
#[cold]
#[inline(never)]
fn lone_surrogate(py: Python<'_>, e: &PyErr) -> Option<String> {
    let e = e.value(py).cast::<pyo3::exceptions::PyUnicodeEncodeError>().ok()?;
    let at = e.getattr(intern!(py, "start")).ok()?;
    let ch = e.getattr(intern!(py, "object")).ok()?.get_item(at).ok()?;
    let code = py.import("builtins").ok()?.getattr("ord").ok()?.call1((ch,)).ok()?;
    Some(validate::lone_surrogate_message(code.extract().ok()?))
}

/// The arguments as the validator reads them (a mapping through `keys()` and `values()`, a
/// sequence through its length and items, a set through iteration; containers deeper than the
/// validator reads are left as they are), as exact dicts, lists, tuples and sets: read once, so
/// what the body gets from it is what was validated, however a container of the caller's
/// answers a second read.
fn snapshot<'py>(obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    if depth > validate::MAX_NESTING
        || obj.is_none()
        || obj.is_instance_of::<pyo3::types::PyBool>()
        || obj.is_instance_of::<PyInt>()
        || obj.is_instance_of::<PyString>()
        || obj.is_instance_of::<PyFloat>()
    {
        return Ok(obj.clone());
    }
    let is_tuple = obj.is_instance_of::<PyTuple>();
    if obj.is_instance_of::<PyList>() || is_tuple {
        let seq = obj.cast::<pyo3::types::PySequence>()?;
        let items = (0..obj.len()?)
            .map(|i| snapshot(&seq.get_item(i)?, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(if is_tuple {
            PyTuple::new(py, items)?.into_any()
        } else {
            PyList::new(py, items)?.into_any()
        });
    }
    let is_frozen = obj.is_instance_of::<PyFrozenSet>();
    if is_frozen || obj.is_instance_of::<PySet>() {
        let items = obj
            .try_iter()?
            .map(|item| snapshot(&item?, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(if is_frozen {
            PyFrozenSet::new(py, &items)?.into_any()
        } else {
            PySet::new(py, &items)?.into_any()
        });
    }
    if let Ok(map) = obj.cast::<PyMapping>() {
        let (keys, values) = (map.keys()?, map.values()?);
        if keys.len() != values.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "the mapping's keys() and values() differ in length",
            ));
        }
        let d = PyDict::new(py);
        for (k, v) in keys.iter().zip(values.iter()) {
            d.set_item(k, snapshot(&v, depth + 1)?)?;
        }
        return Ok(d.into_any());
    }
    Ok(obj.clone())
}

/// The rejection of a JSON text holding a number too large for this reader (beyond a float's
/// range, or an integer longer than Python's `sys.get_int_max_str_digits()`), if it has one.
fn oversized(py: Python<'_>, text: &str) -> Option<Rejection> {
    let max_digits = py
        .import("sys")
        .and_then(|m| m.getattr("get_int_max_str_digits"))
        .and_then(|f| f.call0())
        .and_then(|n| n.extract::<usize>())
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or(usize::MAX);
    validate::oversized_number(text, max_digits).map(|problem| Rejection::invalid(vec![problem]))
}

/// A call whose arguments were rejected; `raw`: the arguments as read, when they are exactly
/// what was sent (JSON text read by `serde_json`, or a mapping of plain JSON values with nothing
/// dropped), so their canonical text is the raw arguments' own.
pub(crate) struct Refused {
    pub(crate) rejection: Rejection,
    pub(crate) raw: Option<Value>,
    /// A stop raised while the arguments were read: raised, not answered.
    stop: Option<PyErr>,
}

impl From<Rejection> for Refused {
    fn from(rejection: Rejection) -> Self {
        Refused {
            rejection,
            raw: None,
            stop: None,
        }
    }
}

/// Parse (JSON text) or convert (a mapping) the arguments and check them. No arguments, in any
/// form (None, empty or blank text, JSON `null`), is the empty call `{}`.
/// A stop (`KeyboardInterrupt`, `SystemExit`) raised while the arguments are read is raised.
pub(crate) fn check(validator: &ArgumentValidator, args: &Bound<'_, PyAny>) -> PyResult<Result<Checked, Rejection>> {
    Ok(check_call(validator, args)?.map_err(|r| r.rejection))
}

/// `check`, keeping the arguments as read when they are rejected (see [`Refused`]).
pub(crate) fn check_call(validator: &ArgumentValidator, args: &Bound<'_, PyAny>) -> PyResult<Result<Checked, Refused>> {
    match checked_call(validator, args) {
        Err(Refused { stop: Some(e), .. }) => Err(e),
        other => Ok(other),
    }
}

// (a refusal, large, is made at most once per call)
#[allow(clippy::result_large_err)]
fn checked_call(validator: &ArgumentValidator, args: &Bound<'_, PyAny>) -> Result<Checked, Refused> {
    let py = args.py();
    let mut as_sent = false;
    let mut exact = None;
    let mut other_containers = false;
    let mut source_text: Option<&str> = None;
    let mut containers_at = None;
    let mut value = if let Ok(text) = args.cast::<PyString>() {
        let s = text.to_str().map_err(|e| not_text(py, e))?;
        // A number this reader cannot hold is named with its place, not called invalid JSON.
        let not_json = |msg: String| oversized(py, s).unwrap_or(Rejection::NotJson(msg));
        source_text = Some(s);
        match validate::arguments_text(s) {
            ArgumentsText::Empty => empty(),
            ArgumentsText::ExactIntegers => {
                // Python's json keeps every integer exact.
                let obj = json_loads(text).map_err(|e| {
                    unreadable(py, e, |e| {
                        not_json(e.value(py).str().map(|s| s.to_string()).unwrap_or_default())
                    })
                })?;
                let value = super::tools::json_value_of(&obj).map_err(|e| unconvertible(py, e, not_json))?;
                if super::tools::last_met().big_ints {
                    exact = Some(obj.unbind());
                }
                value
            }
            ArgumentsText::Plain if s.len() > DETACH_TEXT_BYTES => {
                as_sent = true;
                py.detach(|| serde_json::from_str::<Value>(s))
                    .map_err(|e| not_json(validate::text_not_json(s, e.to_string())))?
            }
            ArgumentsText::Plain => {
                as_sent = true;
                serde_json::from_str(s).map_err(|e| not_json(validate::text_not_json(s, e.to_string())))?
            }
        }
    } else if args.is_none() {
        empty()
    } else {
        #[allow(clippy::result_large_err)]
        let read = |args: &Bound<'_, PyAny>| {
            super::tools::json_value_of(args).map_err(|e| unconvertible(py, e, Rejection::NotJson))
        };
        let mut value = read(args)?;
        let mut met = super::tools::last_met();
        if met.big_ints {
            // The body's arguments are made from the Python values (its integers kept exact):
            // from one read of the caller's containers, the one validated.
            let snap = snapshot(args, 0).map_err(|e| unreadable(py, e, |e| Rejection::NotJson(e.to_string())))?;
            value = read(&snap)?;
            met = super::tools::last_met();
            met.other_containers = true;
            exact = Some(snap.unbind());
        }
        other_containers = met.other_containers;
        containers_at = met.containers_at;
        as_sent = !met.other_containers && !met.big_ints;
        value
    };
    let dropped = validator.drop_injected(&mut value);
    let large = value.as_object().is_some_and(|m| m.len() > DETACH_KEYS);
    let checked = if large {
        py.detach(|| validator.check(&value))
    } else {
        validator.check(&value)
    };
    if let Err(rejection) = checked {
        return Err(Refused {
            rejection,
            raw: (as_sent && !dropped).then_some(value),
            stop: None,
        });
    }
    let fix = if large {
        py.detach(|| validate::integral_floats_to_ints(validator.schema(), &mut value))
    } else {
        validate::integral_floats_to_ints(validator.schema(), &mut value)
    };
    if let Some(text) = source_text {
        let invalid = validate::check_integer_literals(text, &fix.places);
        if !invalid.is_empty() {
            return Err(Refused {
                rejection: Rejection::invalid(invalid),
                raw: None,
                stop: None,
            });
        }
    }
    let found = Found::of(
        dropped,
        fix.changed,
        fix.beyond_64_bits,
        other_containers,
        exact.is_some(),
        containers_at,
    );
    Ok(Checked { value, found, exact })
}

/// The keyword arguments for the body: a fresh dict (the caller's mapping is never shared).
pub(crate) fn body_kwargs<'py>(
    py: Python<'py>,
    validator: &ArgumentValidator,
    args: &Bound<'py, PyAny>,
    checked: &Checked,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = if let Some(source) = &checked.exact {
        // Exact integers: the Python object, minus the dropped keys, conformed below.
        let d = PyDict::new(py);
        d.update(source.bind(py).cast::<PyMapping>()?)?;
        for k in validator.dropped() {
            if d.contains(k)? {
                d.del_item(k)?;
            }
        }
        d
    } else {
        match args.cast::<PyDict>() {
            Ok(d) if !checked.found.rebuild => d.copy()?,
            _ => super::tools::to_py(py, &checked.value)?.cast_into::<PyDict>()?,
        }
    };
    if !checked.found.needs_python() {
        return Ok(dict);
    }
    match conform(py, validator.schema(), dict.as_any())? {
        Some(new) => Ok(new.cast_into::<PyDict>()?),
        None => Ok(dict),
    }
}

/// The Python value `obj` made to match what the schema promised the body (`None` when it
/// already does): integral floats where an integer is wanted become ints (exactly, whatever
/// their size), tuples and sets become lists. Containers are copied, never changed in place.
fn conform<'py>(py: Python<'py>, schema: &Value, obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Value::Object(s) = schema else { return Ok(None) };
    if let Ok(f) = obj.cast::<PyFloat>() {
        if validate::wants_integer(s, f.value()) {
            return Ok(Some(PyInt::type_object(py).call1((obj,))?));
        }
        return branches(py, s, obj);
    }
    if obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyString>() || obj.is_none() {
        return Ok(None);
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let subs = validate::PropertySchemas::of(s);
        let mut out: Option<Bound<'py, PyDict>> = None;
        for (k, v) in d.iter() {
            // (a key that is not text has no property of its own)
            let sub = match k.cast::<PyString>().ok().and_then(|k| k.to_str().ok()) {
                Some(k) => subs.get(k),
                None => subs.others(),
            };
            if let Some(sub) = sub {
                if let Some(new) = conform(py, sub, &v)? {
                    let target = match &out {
                        Some(o) => o.clone(),
                        None => {
                            let o = d.copy()?;
                            out = Some(o.clone());
                            o
                        }
                    };
                    target.set_item(k, new)?;
                }
            }
        }
        return match out {
            Some(o) => Ok(Some(o.into_any())),
            None => branches(py, s, obj),
        };
    }
    let is_list = obj.is_instance_of::<PyList>();
    if is_list
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<PySet>()
        || obj.is_instance_of::<PyFrozenSet>()
    {
        let subs = validate::ItemSchemas::of(s);
        let mut changed = !is_list;
        let items = PyList::empty(py);
        for (i, item) in obj.try_iter()?.enumerate() {
            let item = item?;
            let new = match subs.get(i) {
                Some(sub) => conform(py, sub, &item)?,
                None => None,
            };
            changed |= new.is_some();
            items.append(new.unwrap_or(item))?;
        }
        if changed {
            return Ok(Some(items.into_any()));
        }
        return branches(py, s, obj);
    }
    Ok(None)
}

/// The first `anyOf`/`oneOf` branch that changes the value decides (as the core's own pass).
fn branches<'py>(
    py: Python<'py>,
    s: &Map<String, Value>,
    obj: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    for b in validate::branch_schemas(s) {
        if let Some(new) = conform(py, b, obj)? {
            return Ok(Some(new));
        }
    }
    Ok(None)
}

// ------------------------------------------------------------------ canonical text

impl From<crate::middleware::CanonicalError> for PyErr {
    fn from(e: crate::middleware::CanonicalError) -> PyErr {
        pyo3::exceptions::PyValueError::new_err(e.to_string())
    }
}

/// The canonical JSON text of a Python value (`crate::middleware::canonical_json` for the
/// equivalent JSON, written by the same writer straight from the Python objects, integers of any
/// size exact). Only dict/list/tuple (and subclasses), str, int, float, bool and None; anything
/// else, a non-string key, NaN or nesting past the core's limit is a `ValueError`.
pub(crate) fn canonical_text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    let mut w = crate::middleware::Canonical::bounded();
    write_canonical(&mut w, obj)?;
    Ok(w.finish())
}

fn write_canonical(w: &mut crate::middleware::Canonical, obj: &Bound<'_, PyAny>) -> PyResult<()> {
    use pyo3::types::PyBool;
    if obj.is_none() {
        w.null();
    } else if let Ok(s) = obj.cast::<PyString>() {
        w.string(s.to_str()?);
    } else if let Ok(b) = obj.cast::<PyBool>() {
        w.boolean(b.is_true());
    } else if let Ok(i) = obj.cast::<PyInt>() {
        match i.extract::<i64>() {
            Ok(v) => w.integer(&v.to_string()),
            Err(_) => w.integer(i.str()?.to_str()?),
        }
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        w.float(f.value())?;
    } else if let Ok(d) = obj.cast::<PyDict>() {
        let mut keyed: Vec<(Bound<'_, PyString>, Bound<'_, PyAny>)> = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let k = k
                .cast_into::<PyString>()
                .map_err(|_| pyo3::exceptions::PyValueError::new_err("object keys must be strings"))?;
            keyed.push((k, v));
        }
        let mut entries: Vec<(&str, &Bound<'_, PyAny>)> = Vec::with_capacity(keyed.len());
        for (k, v) in &keyed {
            entries.push((k.to_str()?, v));
        }
        w.object(&mut entries, write_canonical)?;
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj.try_iter()?.collect::<PyResult<Vec<_>>>()?;
        w.array(items.iter(), write_canonical)?;
    } else {
        return Err(pyo3::exceptions::PyValueError::new_err("not a JSON value"));
    }
    Ok(())
}

// ------------------------------------------------------------------ plain calls of a flat schema

/// `obj`, a new container of the arguments holding atoms only (a frozen list of atoms, or the
/// arguments' dict of atoms and such lists), is untracked by the cycle collector, as CPython
/// untracks a tuple of atoms: it can be in no reference cycle, and each call's arguments then
/// cost the collector nothing (a dict given a value that may be in a cycle is tracked again by
/// CPython itself; the frozen lists refuse changes).
fn left_to_refcount(obj: &Bound<'_, PyAny>) {
    // SAFETY: a live object of a type the collector may track (untracking one it does not track
    // does nothing); the interpreter lock is held.
    unsafe { pyo3::ffi::PyObject_GC_UnTrack(obj.as_ptr().cast()) };
}

/// `obj` as an atom of `crate::flat`, when it is one (exact built-in types only: nothing of the
/// caller's runs while reading it).
fn atom_of<'a>(obj: &'a Bound<'_, PyAny>) -> Option<Atom<'a>> {
    use pyo3::types::PyBool;
    if obj.is_none() {
        return Some(Atom::Null);
    }
    if obj.is_exact_instance_of::<PyString>() {
        return obj.cast::<PyString>().ok()?.to_str().ok().map(Atom::Str);
    }
    if obj.is_exact_instance_of::<PyBool>() {
        return Some(Atom::Bool(obj.is_truthy().ok()?));
    }
    if obj.is_exact_instance_of::<PyInt>() {
        return obj.extract::<i64>().ok().map(Atom::Int);
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        let f = obj.cast::<PyFloat>().ok()?.value();
        return f.is_finite().then_some(Atom::Float(f));
    }
    None
}

thread_local! {
    /// The buffer `plain_call` writes each entry's part of the key into, kept between calls.
    static PARTS: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The largest buffer `PARTS` keeps (a larger one, for a call of long values, is let go).
const PARTS_KEPT: usize = 4096;

/// The arguments of a call whose tool's schema is flat (`crate::flat`), accepted in one walk of
/// the caller's exact `dict`: the body's arguments (a new dict with the caller's entries, its
/// lists frozen as `frozen_list`; a `frozen_dict` when `sealed`, else a plain `dict`, as
/// `frozen::freeze_values` makes it) and their key (`crate::middleware::args_key` of the same
/// arguments). None when the flat schema does not accept them as they are: the full check
/// (`check_call`) decides then.
pub(crate) fn plain_call<'py>(
    validator: &ArgumentValidator,
    args: &Bound<'py, PyAny>,
    frozen_dict: &Bound<'py, pyo3::types::PyType>,
    frozen_list: &Bound<'py, pyo3::types::PyType>,
    sealed: bool,
) -> PyResult<Option<(Bound<'py, PyAny>, Vec<u8>)>> {
    let Some(flat) = validator.flat() else {
        return Ok(None);
    };
    let Ok(d) = args.cast_exact::<PyDict>() else {
        return Ok(None);
    };
    if d.len() > crate::flat::MAX_PROPERTIES {
        return Ok(None);
    }
    let py = args.py();
    let mut present = 0u64;
    // Each entry's part of the key (its name and value), at `spans[i]` of `parts` for property
    // `i`, joined in the key's order once all are read; the lists, held for freezing.
    let mut parts = PARTS.with(std::cell::Cell::take);
    parts.clear();
    let mut spans = [(0u32, 0u32); crate::flat::MAX_PROPERTIES];
    let mut lists = 0u64;
    for (at, (k, v)) in d.iter().enumerate() {
        let Some(i) = k
            .cast::<PyString>()
            .ok()
            .filter(|_| k.is_exact_instance_of::<PyString>())
            .and_then(|s| s.to_str().ok())
            .and_then(|name| flat.find_at(at, name))
        else {
            return Ok(None);
        };
        let kind = flat.kind(i);
        let start = parts.len();
        crate::middleware::key_entry_name(&mut parts, flat.name(i));
        let ok = match atom_of(&v) {
            Some(a) => {
                a.key(&mut parts);
                kind.accepts(a)
            }
            None => match v.cast_exact::<PyList>() {
                Ok(l) => {
                    crate::middleware::key_array(&mut parts, l.len());
                    let ok = match kind {
                        // One walk of the items: each checked and keyed.
                        Kind::Array(item) => l.iter().all(|x| match atom_of(&x) {
                            Some(a) if item.accepts(a) => {
                                a.key(&mut parts);
                                true
                            }
                            _ => false,
                        }),
                        _ => {
                            let ok = kind.accepts_list(&mut |item| {
                                l.iter().all(|x| atom_of(&x).is_some_and(|a| item.accepts(a)))
                            });
                            for x in l.iter() {
                                if let Some(a) = atom_of(&x) {
                                    a.key(&mut parts);
                                }
                            }
                            ok
                        }
                    };
                    lists |= 1 << i;
                    ok
                }
                Err(_) => false,
            },
        };
        if !ok {
            return Ok(None);
        }
        present |= 1 << i;
        spans[i] = (start as u32, parts.len() as u32);
    }
    if !flat.has_required(present) {
        return Ok(None);
    }
    let mut key = Vec::with_capacity(parts.len() + 4);
    crate::middleware::key_object(&mut key, present.count_ones() as usize);
    for i in flat.key_order(present) {
        let (a, b) = spans[i];
        key.extend_from_slice(&parts[a as usize..b as usize]);
    }
    if parts.capacity() <= PARTS_KEPT {
        PARTS.with(|p| p.set(parts));
    }
    let target = if sealed {
        let target = super::frozen::new_empty(frozen_dict)?.cast_into::<PyDict>()?;
        // SAFETY: both are live dicts; the interpreter lock is held.
        if unsafe { pyo3::ffi::PyDict_Merge(target.as_ptr(), d.as_ptr(), 1) } != 0 {
            return Err(PyErr::fetch(py));
        }
        target
    } else {
        d.copy()?
    };
    // The lists, frozen: found again in the new dict, which nobody else holds (replacing a
    // value changes neither its size nor its order). Every list there is one the walk checked.
    let mut pos: pyo3::ffi::Py_ssize_t = 0;
    while lists != 0 {
        let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a live dict; `k` and `v` are borrowed and taken as new references at once.
        if unsafe { pyo3::ffi::PyDict_Next(target.as_ptr(), &mut pos, &mut k, &mut v) } == 0 {
            break;
        }
        let (k, v) = unsafe { (Bound::from_borrowed_ptr(py, k), Bound::from_borrowed_ptr(py, v)) };
        if v.is_exact_instance_of::<PyList>() {
            lists &= lists - 1;
            let frozen = super::frozen::freeze(&v, frozen_dict, frozen_list, 1)?;
            left_to_refcount(&frozen);
            target.set_item(&k, frozen)?;
        }
    }
    left_to_refcount(&target);
    Ok(Some((target.into_any(), key)))
}
