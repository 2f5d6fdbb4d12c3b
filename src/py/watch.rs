//! Whether a dict changed since it was last looked at, without reading it.
//!
//! CPython 3.10 to 3.12 give every dict a version (`ma_version_tag`, PEP 509): a dict gets a new
//! one when it is made and at every change (an item set, replaced or deleted, `clear`,
//! `update`, an attribute of an instance or a class stored in its `__dict__`, however written),
//! drawn from one counter of the process, so no two states of any dicts share a version. A dict
//! at the same address with the same version is the same dict, unchanged. Other Pythons (3.13,
//! where an instance's attributes may be stored without its dict seeing it, and later ones, where
//! the version is gone) answer `on() == false`, and the callers read what they need instead.
//! Checked once when first asked: the field is where it is expected and every change above makes
//! a new version, else off.
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

static ON: PyOnceLock<bool> = PyOnceLock::new();

/// `PyDictObject`: the object header, `ma_used`, then `ma_version_tag`.
const USED_AT: usize = std::mem::size_of::<ffi::PyObject>();
const VERSION_AT: usize = USED_AT + std::mem::size_of::<ffi::Py_ssize_t>();

/// Dict versions can be read on this Python.
pub(crate) fn on(py: Python<'_>) -> bool {
    *ON.get_or_init(py, || works(py).unwrap_or(false))
}

fn raw(d: &Bound<'_, PyDict>) -> (isize, u64) {
    // SAFETY: only called once `works` found a `PyDictObject` laid out as above (a dict is at
    // least that large: its header, `ma_used`, `ma_version_tag`, `ma_keys`, `ma_values`).
    unsafe {
        let p = d.as_ptr().cast::<u8>();
        (
            p.add(USED_AT).cast::<isize>().read(),
            p.add(VERSION_AT).cast::<u64>().read(),
        )
    }
}

fn works(py: Python<'_>) -> PyResult<bool> {
    let sys = py.import("sys")?;
    if sys.getattr("implementation")?.getattr("name")?.extract::<String>()? != "cpython" {
        return Ok(false);
    }
    let (major, minor): (u32, u32) = sys
        .getattr("version_info")?
        .cast_into::<PyTuple>()
        .map_err(PyErr::from)?
        .get_slice(0, 2)
        .extract()?;
    if major != 3 || !(10..=12).contains(&minor) {
        return Ok(false);
    }
    let d = PyDict::new(py);
    let other = PyDict::new(py);
    let mut ok = raw(&d).0 == 0;
    let mut seen = vec![raw(&d).1, raw(&other).1];
    let mut step = |d: &Bound<'_, PyDict>, used: usize| {
        let (n, v) = raw(d);
        seen.push(v);
        n == used as isize && d.len() == used
    };
    d.set_item("a", 1)?;
    ok &= step(&d, 1);
    d.set_item("a", 2)?;
    ok &= step(&d, 1);
    d.set_item("b", 3)?;
    ok &= step(&d, 2);
    d.del_item("a")?;
    ok &= step(&d, 1);
    let extra = PyDict::new(py);
    extra.set_item("c", 4)?;
    d.call_method1("update", (extra,))?;
    ok &= step(&d, 2);
    d.clear();
    ok &= step(&d, 0);
    other.set_item("a", 1)?;
    ok &= step(&other, 1);
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(ok && sorted.len() == seen.len())
}

/// A dict as it was (its address and version): `holds` while it is that dict, unchanged. Only
/// made when `on()`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    at: usize,
    version: u64,
}

impl Seen {
    pub(crate) fn of(d: &Bound<'_, PyDict>) -> Self {
        Seen {
            at: d.as_ptr() as usize,
            version: raw(d).1,
        }
    }

    #[inline]
    pub(crate) fn holds(&self, d: &Bound<'_, PyDict>) -> bool {
        d.as_ptr() as usize == self.at && raw(d).1 == self.version
    }
}
