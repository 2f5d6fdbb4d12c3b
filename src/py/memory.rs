//! Binding of the memory core (`crate::memory`): argument conversion, exception mapping, the
//! in-process `MemoryTree` and `MemoryStoreEngine`, whose `apply` drives the compare-and-set loop
//! from Rust by awaiting the Python store's coroutines (pyo3-async-runtimes on a tokio runtime).
//! No decisions are made here: the loop (`crate::memory::CasLoop`) says what to call next.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{
    PyFileNotFoundError, PyPermissionError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString};

use crate::memory::{
    apply, CasConfig, CasLoop, Command, CommandArgs, ErrorKind, Limits, MemoryError, Root, Step,
    Tree,
};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMemoryTree>()?;
    m.add_class::<PyMemoryStoreEngine>()?;
    m.add_function(wrap_pyfunction!(memory_parse_call, m)?)?;
    Ok(())
}

// ------------------------------------------------------------------ errors

/// Maps a core error to the Python class defined in `agentkit_tools.memory` (falling back to
/// the builtin base class if that module cannot be imported).
fn to_py_err(py: Python<'_>, e: MemoryError) -> PyErr {
    let class = match e.kind {
        ErrorKind::PermissionDenied => "MemoryPermissionError",
        ErrorKind::NotFound => "MemoryNotFoundError",
        ErrorKind::AlreadyExists => "MemoryExistsError",
        ErrorKind::InvalidArgument => "MemoryCommandError",
        ErrorKind::Limit => "MemoryLimitError",
        ErrorKind::Conflict => "StoreConflictError",
        ErrorKind::Corrupt => "MemoryCorruptError",
    };
    let build = || -> PyResult<PyErr> {
        let module = py.import("agentkit_tools.memory")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("code", e.code)?;
        if let Some(l) = &e.limit {
            kwargs.set_item("limit", l.limit)?;
            kwargs.set_item("maximum", l.maximum)?;
            kwargs.set_item("used", l.used)?;
            kwargs.set_item("requested", l.requested)?;
        }
        let exc = module
            .getattr(class)?
            .call((e.message.as_str(),), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|_| match e.kind {
        ErrorKind::PermissionDenied => PyPermissionError::new_err(e.message),
        ErrorKind::NotFound => PyFileNotFoundError::new_err(e.message),
        ErrorKind::AlreadyExists | ErrorKind::InvalidArgument | ErrorKind::Limit => {
            PyValueError::new_err(e.message)
        }
        ErrorKind::Conflict | ErrorKind::Corrupt => PyRuntimeError::new_err(e.message),
    })
}

fn bad_type(py: Python<'_>, name: &str, expected: &str, v: &Bound<'_, PyAny>) -> PyErr {
    let ty = v
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    to_py_err(
        py,
        MemoryError::invalid(
            "invalid_argument",
            format!(
                "{name} must be {expected}, got {ty}; send {name} as {expected} and call again"
            ),
        ),
    )
}

// ------------------------------------------------------------------ argument conversion

fn opt_str(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if v.is_none() {
        return Ok(None);
    }
    let s = v
        .cast::<PyString>()
        .map_err(|_| bad_type(v.py(), name, "a string", v))?;
    match s.to_str() {
        Ok(s) => Ok(Some(s.to_owned())),
        Err(_) => Err(bad_type(
            v.py(),
            name,
            "valid Unicode text (no lone surrogates)",
            v,
        )),
    }
}

fn opt_int(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        return Ok(None);
    }
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(bad_type(v.py(), name, "an integer", v));
    }
    v.extract::<i64>()
        .map(Some)
        .map_err(|_| bad_type(v.py(), name, "an integer within 64 bits", v))
}

fn opt_bool(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    if v.is_none() {
        return Ok(None);
    }
    if !v.is_instance_of::<PyBool>() {
        return Err(bad_type(v.py(), name, "a boolean (true or false)", v));
    }
    Ok(Some(v.is_truthy()?))
}

fn opt_range(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<(i64, i64)>> {
    if v.is_none() {
        return Ok(None);
    }
    let expected = "an array of two integers [start, end]";
    if v.is_instance_of::<PyString>() {
        return Err(bad_type(v.py(), name, expected, v));
    }
    let items: Vec<Bound<'_, PyAny>> = match v.try_iter() {
        Ok(it) => it.collect::<PyResult<_>>()?,
        Err(_) => return Err(bad_type(v.py(), name, expected, v)),
    };
    if items.len() != 2 {
        return Err(bad_type(v.py(), name, expected, v));
    }
    let a = opt_int(name, &items[0]).map_err(|_| bad_type(v.py(), name, expected, v))?;
    let b = opt_int(name, &items[1]).map_err(|_| bad_type(v.py(), name, expected, v))?;
    match (a, b) {
        (Some(a), Some(b)) => Ok(Some((a, b))),
        _ => Err(bad_type(v.py(), name, expected, v)),
    }
}

/// Builds a [`Command`] from a command name and keyword items (None values count as absent).
fn parse_command<'py>(
    py: Python<'py>,
    command: Option<String>,
    items: impl Iterator<Item = (Bound<'py, PyAny>, Bound<'py, PyAny>)>,
) -> PyResult<Command> {
    let mut a = CommandArgs {
        command,
        ..Default::default()
    };
    for (k, v) in items {
        let key: String = match k.cast::<PyString>() {
            Ok(s) => s.to_str()?.to_owned(),
            Err(_) => {
                a.unknown.push(
                    k.repr()
                        .map(|r| r.to_string())
                        .unwrap_or_else(|_| "?".into()),
                );
                continue;
            }
        };
        match key.as_str() {
            "command" => {
                if let Some(c) = opt_str("command", &v)? {
                    a.command = Some(c);
                }
            }
            "path" => a.path = opt_str("path", &v)?,
            "file_text" => a.file_text = opt_str("file_text", &v)?,
            "overwrite" => a.overwrite = opt_bool("overwrite", &v)?,
            "old_str" => a.old_str = opt_str("old_str", &v)?,
            "new_str" => a.new_str = opt_str("new_str", &v)?,
            "insert_line" => a.insert_line = opt_int("insert_line", &v)?,
            "insert_text" => a.insert_text = opt_str("insert_text", &v)?,
            "view_range" => a.view_range = opt_range("view_range", &v)?,
            "old_path" => a.old_path = opt_str("old_path", &v)?,
            "new_path" => a.new_path = opt_str("new_path", &v)?,
            _ => a.unknown.push(key),
        }
    }
    a.into_command().map_err(|e| to_py_err(py, e))
}

fn kwargs_items<'py>(
    kwargs: Option<&Bound<'py, PyDict>>,
) -> Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    kwargs.map(|d| d.iter().collect()).unwrap_or_default()
}

/// Checks one call's arguments (a mapping of the `memory` tool's schema) and returns the
/// backend method to call and its keyword arguments, e.g. `("rename", {"old_path": ..., "new_path": ...})`.
///
/// Raises `MemoryCommandError` (a `ValueError` and a `ToolError`) naming every missing,
/// misplaced or ill-typed argument.
#[pyfunction]
fn memory_parse_call<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyAny>,
) -> PyResult<(String, Bound<'py, PyDict>)> {
    let d = args.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(
            "memory tool arguments must be a dict (a JSON object); pass them as one",
        )
    })?;
    let cmd = parse_command(py, None, d.iter())?;
    let kw = PyDict::new(py);
    let name = cmd.name().to_string();
    match cmd {
        Command::View { path, view_range } => {
            kw.set_item("path", path)?;
            kw.set_item("view_range", view_range)?;
        }
        Command::Create {
            path,
            file_text,
            overwrite,
        } => {
            kw.set_item("path", path)?;
            kw.set_item("file_text", file_text)?;
            kw.set_item("overwrite", overwrite)?;
        }
        Command::StrReplace {
            path,
            old_str,
            new_str,
        } => {
            kw.set_item("path", path)?;
            kw.set_item("old_str", old_str)?;
            kw.set_item("new_str", new_str)?;
        }
        Command::Insert {
            path,
            insert_line,
            insert_text,
        } => {
            kw.set_item("path", path)?;
            kw.set_item("insert_line", insert_line)?;
            kw.set_item("insert_text", insert_text)?;
        }
        Command::Delete { path } => kw.set_item("path", path)?,
        Command::Rename { old_path, new_path } => {
            kw.set_item("old_path", old_path)?;
            kw.set_item("new_path", new_path)?;
        }
    }
    Ok((name, kw))
}

fn limits(max_bytes: i64, max_files: i64) -> PyResult<Limits> {
    if max_bytes < 0 || max_files < 0 {
        return Err(PyValueError::new_err(format!(
            "max_bytes and max_files must be >= 0, got max_bytes={max_bytes}, max_files={max_files}"
        )));
    }
    Ok(Limits {
        max_bytes: max_bytes as u64,
        max_files: max_files as u64,
    })
}

fn root(root: &str) -> PyResult<Root> {
    Root::new(root).map_err(|e| PyValueError::new_err(e.message))
}

// ------------------------------------------------------------------ MemoryTree

/// One in-process memory tree (the engine of `InMemoryFiles`). Thread-safe: every command runs
/// under a lock and either applies completely or changes nothing.
#[pyclass(module = "agentkit_tools._core", name = "MemoryTree", frozen)]
struct PyMemoryTree {
    tree: Mutex<Tree>,
    limits: Limits,
}

#[pymethods]
impl PyMemoryTree {
    #[new]
    #[pyo3(signature = (root = "/memories", *, max_bytes = 8_388_608, max_files = 4096))]
    fn new(root: &str, max_bytes: i64, max_files: i64) -> PyResult<Self> {
        let r = self::root(root)?;
        Ok(PyMemoryTree {
            tree: Mutex::new(Tree::empty(r)),
            limits: limits(max_bytes, max_files)?,
        })
    }

    /// Applies one command (`view`, `create`, `str_replace`, `insert`, `delete`, `rename`) with
    /// its keyword arguments; returns the result text.
    #[pyo3(signature = (command, **kwargs))]
    fn apply(
        &self,
        py: Python<'_>,
        command: &str,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<String> {
        let cmd = parse_command(
            py,
            Some(command.to_string()),
            kwargs_items(kwargs).into_iter(),
        )?;
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        apply(&mut tree, &cmd, &self.limits)
            .map(|o| o.text)
            .map_err(|e| to_py_err(py, e))
    }

    /// The tree document (JSON text, format version 1).
    fn to_json(&self) -> String {
        self.tree
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .to_json()
    }

    /// A copy of the files: `{path: text}` sorted by path.
    fn files(&self) -> BTreeMap<String, String> {
        self.tree
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .files()
            .clone()
    }

    /// Total UTF-8 bytes of all file texts.
    #[getter]
    fn bytes(&self) -> u64 {
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).bytes()
    }

    /// Number of files.
    #[getter]
    fn file_count(&self) -> u64 {
        self.tree
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .file_count()
    }

    /// The normalised root.
    #[getter]
    fn root(&self) -> String {
        self.tree
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .root()
            .as_str()
            .to_string()
    }
}

// ------------------------------------------------------------------ MemoryStoreEngine

static SEED: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

fn next_seed() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = SEED.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    t ^ n.rotate_left(17) ^ u64::from(std::process::id())
}

/// The compare-and-set engine of `StoreFiles`: one tree document at `key` of a StorePort.
#[pyclass(module = "agentkit_tools._core", name = "MemoryStoreEngine", frozen)]
struct PyMemoryStoreEngine {
    store: Py<PyAny>,
    key: String,
    root: Root,
    limits: Limits,
    config: CasConfig,
}

#[pymethods]
impl PyMemoryStoreEngine {
    #[new]
    #[pyo3(signature = (store, key, *, root = "/memories", max_bytes = 8_388_608, max_files = 4096, max_attempts = 32))]
    fn new(
        store: Py<PyAny>,
        key: String,
        root: &str,
        max_bytes: i64,
        max_files: i64,
        max_attempts: i64,
    ) -> PyResult<Self> {
        if !(1..=100_000).contains(&max_attempts) {
            return Err(PyValueError::new_err(format!(
                "max_attempts must be between 1 and 100000, got {max_attempts}"
            )));
        }
        let config = CasConfig {
            max_attempts: max_attempts as u32,
            ..CasConfig::default()
        };
        Ok(PyMemoryStoreEngine {
            store,
            key,
            root: self::root(root)?,
            limits: limits(max_bytes, max_files)?,
            config,
        })
    }

    /// Applies one command through the store's compare-and-set loop. Returns an awaitable of
    /// `(result_text, attempts)`; `attempts - 1` is the number of lost races retried.
    #[pyo3(signature = (command, **kwargs))]
    fn apply<'py>(
        &self,
        py: Python<'py>,
        command: &str,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cmd = parse_command(
            py,
            Some(command.to_string()),
            kwargs_items(kwargs).into_iter(),
        )?;
        let machine = CasLoop::new(
            self.root.clone(),
            cmd,
            self.limits,
            self.config,
            next_seed(),
        );
        let store = self.store.clone_ref(py);
        let key = self.key.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, drive(store, key, machine))
    }

    /// The store key of the tree document.
    #[getter]
    fn key(&self) -> String {
        self.key.clone()
    }
}

/// Performs the store calls the loop asks for, awaiting the Python coroutines from Rust.
async fn drive(store: Py<PyAny>, key: String, mut m: CasLoop) -> PyResult<(String, u32)> {
    let mut step = m.start();
    loop {
        step = match step {
            Step::Get => {
                let fut = Python::attach(|py| {
                    pyo3_async_runtimes::tokio::into_future(
                        store.bind(py).call_method1("get", (key.as_str(),))?,
                    )
                })?;
                let value = fut.await?;
                let doc = Python::attach(|py| -> PyResult<Option<String>> {
                    let v = value.bind(py);
                    if v.is_none() {
                        return Ok(None);
                    }
                    match v.cast::<PyString>() {
                        Ok(s) => Ok(Some(s.to_str()?.to_owned())),
                        Err(_) => Err(PyTypeError::new_err(format!(
                            "store.get({key:?}) returned {}, expected str or None; fix the StorePort implementation",
                            v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                        ))),
                    }
                })?;
                m.on_get(doc)
            }
            Step::CompareAndSet { expected, value } => {
                let fut = Python::attach(|py| {
                    pyo3_async_runtimes::tokio::into_future(
                        store
                            .bind(py)
                            .call_method1("compare_and_set", (key.as_str(), expected, value))?,
                    )
                })?;
                let result = fut.await?;
                let won = Python::attach(|py| -> PyResult<bool> {
                    let v = result.bind(py);
                    if !v.is_instance_of::<PyBool>() {
                        return Err(PyTypeError::new_err(format!(
                            "store.compare_and_set({key:?}, ...) returned {}, expected bool; fix the StorePort implementation",
                            v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                        )));
                    }
                    v.is_truthy()
                })?;
                m.on_cas(won)
            }
            Step::Sleep(d) => {
                tokio::time::sleep(d).await;
                m.on_slept()
            }
            Step::Done(done) => return Ok((done.text, done.attempts)),
            Step::Failed(e) => return Err(Python::attach(|py| to_py_err(py, e))),
        }
    }
}
