//! Binding of the memory core (`crate::memory`): argument conversion, exception mapping, the
//! in-process `MemoryTree`, and `MemoryStoreEngine`, which hands out one `MemoryCasLoop` per
//! command: the sans-IO compare-and-set loop (`crate::memory::CasLoop`), stepped by a short
//! Python driver that awaits the store on the caller's own event loop. No decisions are made
//! here and no Python coroutine is ever awaited from a Rust thread.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyFileNotFoundError, PyPermissionError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyTuple};

use crate::memory::args::{self as margs, ArgType, ArgValue, IntRead};
use crate::memory::engine::{self, answer_once};
use crate::memory::{
    apply, CasConfig, CasLoop, CasRun, Command, CommandArgs, ErrorKind, Limits, MemoryError, ReadCache, Root, Tree,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, DEFAULT_ROOT,
};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MEMORY_DEFAULT_ROOT", DEFAULT_ROOT)?;
    m.add("MEMORY_DEFAULT_MAX_BYTES", DEFAULT_MAX_BYTES)?;
    m.add("MEMORY_DEFAULT_MAX_FILES", DEFAULT_MAX_FILES)?;
    m.add("MEMORY_DEFAULT_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)?;
    m.add("MEMORY_MAX_PATH_BYTES", crate::memory::path::MAX_PATH_BYTES)?;
    m.add_class::<PyMemoryTree>()?;
    m.add_class::<PyMemoryCommand>()?;
    m.add_class::<PyMemoryStoreEngine>()?;
    m.add_class::<PyMemoryCasLoop>()?;
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
        kwargs.set_item("code", e.code.as_str())?;
        if let Some(l) = &e.limit {
            kwargs.set_item("limit", l.limit)?;
            kwargs.set_item("maximum", l.maximum)?;
            kwargs.set_item("used", l.used)?;
            kwargs.set_item("requested", l.requested)?;
        }
        let exc = module.getattr(class)?.call((e.message.as_str(),), Some(&kwargs))?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|_| match e.kind {
        ErrorKind::PermissionDenied => PyPermissionError::new_err(e.message),
        ErrorKind::NotFound => PyFileNotFoundError::new_err(e.message),
        ErrorKind::AlreadyExists | ErrorKind::InvalidArgument | ErrorKind::Limit => PyValueError::new_err(e.message),
        ErrorKind::Conflict | ErrorKind::Corrupt => PyRuntimeError::new_err(e.message),
    })
}

fn bad_type(py: Python<'_>, name: &str, expected: &str, v: &Bound<'_, PyAny>) -> PyErr {
    to_py_err(py, margs::bad_type(name, expected, &got(v)))
}

/// The type of `v`, as an argument error names it.
fn got(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

// ------------------------------------------------------------------ argument conversion

/// Argument `name`'s value `v` as its schema type `ty` (None: absent).
fn arg_value(name: &str, ty: ArgType, v: &Bound<'_, PyAny>) -> PyResult<Option<ArgValue>> {
    if v.is_none() {
        return Ok(None);
    }
    let py = v.py();
    let bad = |expected: &str| bad_type(py, name, expected, v);
    Ok(Some(match ty {
        ArgType::Str => {
            let s = v.cast::<PyString>().map_err(|_| bad(ty.expected()))?;
            ArgValue::Str(s.to_str().map_err(|_| bad(margs::EXPECTED_UNICODE))?.to_owned())
        }
        ArgType::Bool => {
            if !v.is_instance_of::<PyBool>() {
                return Err(bad(ty.expected()));
            }
            ArgValue::Bool(v.is_truthy()?)
        }
        ArgType::Int => margs::int_arg(name, int_read(v), || got(v)).map_err(|e| to_py_err(py, e))?,
        ArgType::Range => {
            // A string is iterable, but no sequence of items here.
            let items: Option<Vec<IntRead>> = match v.try_iter() {
                Ok(it) if !v.is_instance_of::<PyString>() => {
                    Some(it.map(|i| i.map(|i| int_read(&i))).collect::<PyResult<_>>()?)
                }
                _ => None,
            };
            margs::range_arg(name, items.as_deref(), || got(v)).map_err(|e| to_py_err(py, e))?
        }
    }))
}

/// What a Python value is to an integer argument (a `bool` is read as one, not as an `int`).
fn int_read(v: &Bound<'_, PyAny>) -> IntRead {
    if v.is_instance_of::<PyBool>() {
        IntRead::Bool
    } else if !v.is_instance_of::<PyInt>() {
        IntRead::Other
    } else {
        v.extract::<i64>().map_or(IntRead::Big, IntRead::Int)
    }
}

/// Builds a [`Command`] from a command name and keyword items (None values count as absent).
fn parse_command<'py>(
    py: Python<'py>,
    command: Option<String>,
    items: impl Iterator<Item = (Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    numbered: bool,
) -> PyResult<Command> {
    let mut a = CommandArgs {
        command,
        ..Default::default()
    };
    for (k, v) in items {
        let Ok(key) = k.cast::<PyString>() else {
            a.unknown
                .push(k.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".into()));
            continue;
        };
        let key = key.to_str()?;
        let value = match ArgType::of(key) {
            Some(ty) => arg_value(key, ty, &v)?,
            None => None,
        };
        a.set(key, value);
    }
    a.into_command_numbered(numbered).map_err(|e| to_py_err(py, e))
}

fn kwargs_items<'py>(kwargs: Option<&Bound<'py, PyDict>>) -> Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    kwargs.map(|d| d.iter().collect()).unwrap_or_default()
}

/// Checks one call's arguments (a mapping of the `memory` tool's schema) and resolves its paths
/// under `root`; returns the backend method and its positional arguments, e.g.
/// `("rename", ("/memories/a.md", "/memories/b.md"))` or `("view", ("/memories/a.md", None))`.
///
/// Raises `MemoryCommandError` (a `ValueError` and a `ToolError`) naming every missing,
/// misplaced or ill-typed argument, and `MemoryPermissionError` for a path outside the root.
#[pyfunction]
#[pyo3(signature = (args, root = None))]
fn memory_parse_call<'py>(
    py: Python<'py>,
    args: &Bound<'py, PyAny>,
    root: Option<&str>,
) -> PyResult<(String, Bound<'py, PyTuple>)> {
    let _in = super::shutdown::inside(py);
    let d = args
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(margs::NOT_A_MAPPING))?;
    let root = self::root(root)?;
    let cmd = parse_command(py, None, d.iter(), false)?
        .resolved(&root)
        .map_err(|e| to_py_err(py, e))?;
    let name = cmd.name().to_string();
    let params = match cmd {
        Command::View { path, view_range, .. } => (path, view_range).into_pyobject(py)?,
        Command::Create {
            path,
            file_text,
            overwrite,
        } => (path, file_text, overwrite).into_pyobject(py)?,
        Command::StrReplace { path, old_str, new_str } => (path, old_str, new_str).into_pyobject(py)?,
        Command::Insert {
            path,
            insert_line,
            insert_text,
        } => (path, insert_line, insert_text).into_pyobject(py)?,
        Command::Delete { path } => (path,).into_pyobject(py)?,
        Command::Rename { old_path, new_path } => (old_path, new_path).into_pyobject(py)?,
    };
    Ok((name, params))
}

/// The limits given (None: the core's default).
fn limits(max_bytes: Option<i64>, max_files: Option<i64>) -> PyResult<Limits> {
    Limits::of(max_bytes, max_files).map_err(|e| PyValueError::new_err(e.message))
}

/// The root given (None: the core's default).
fn root(root: Option<&str>) -> PyResult<Root> {
    Root::of(root).map_err(|e| PyValueError::new_err(e.message))
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
    #[pyo3(signature = (root = None, *, max_bytes = None, max_files = None))]
    fn new(root: Option<&str>, max_bytes: Option<i64>, max_files: Option<i64>) -> PyResult<Self> {
        let r = self::root(root)?;
        Ok(PyMemoryTree {
            tree: Mutex::new(Tree::empty(r)),
            limits: limits(max_bytes, max_files)?,
        })
    }

    /// Applies one command (`view`, `create`, `str_replace`, `insert`, `delete`, `rename`) with
    /// its arguments (a dict); returns the result text. `numbered=True`: a view answers as the
    /// `memory` tool shows it to the model (line numbers; an empty directory or file says so).
    #[pyo3(signature = (command, kwargs = None, numbered = false))]
    fn apply(
        &self,
        py: Python<'_>,
        command: &str,
        kwargs: Option<&Bound<'_, PyDict>>,
        numbered: bool,
    ) -> PyResult<String> {
        let _in = super::shutdown::inside(py);
        let cmd = parse_command(
            py,
            Some(command.to_string()),
            kwargs_items(kwargs).into_iter(),
            numbered,
        )?;
        let mut tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        apply(&mut tree, &cmd, &self.limits)
            .map(|o| o.text)
            .map_err(|e| to_py_err(py, e))
    }

    /// The tree document (JSON text, format version 1).
    fn to_json(&self) -> String {
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).to_json()
    }

    /// A copy of the files: `{path: text}` sorted by path.
    fn files(&self, py: Python<'_>) -> BTreeMap<String, String> {
        let _in = super::shutdown::inside(py);
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).files().clone()
    }

    /// Total UTF-8 bytes of all file paths and texts (what `max_bytes` bounds).
    #[getter]
    fn bytes(&self) -> u64 {
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).bytes()
    }

    /// Number of files.
    #[getter]
    fn file_count(&self) -> u64 {
        self.tree.lock().unwrap_or_else(|p| p.into_inner()).file_count()
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

/// A seed from this process's entropy (the time, its id, and a count: never twice the same).
pub(super) fn next_seed() -> u64 {
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
    key: String,
    root: Root,
    limits: Limits,
    config: CasConfig,
    /// The document `read` last parsed (see `crate::memory::ReadCache`).
    last_read: Mutex<ReadCache>,
}

#[pymethods]
impl PyMemoryStoreEngine {
    /// `key`: the store key of the tree document; `max_attempts`: read-apply cycles before
    /// `StoreConflictError` (1 to 100000).
    #[new]
    #[pyo3(signature = (key, *, root = None, max_bytes = None, max_files = None, max_attempts = None))]
    fn new(
        key: String,
        root: Option<&str>,
        max_bytes: Option<i64>,
        max_files: Option<i64>,
        max_attempts: Option<i64>,
    ) -> PyResult<Self> {
        let config = CasConfig::of(max_attempts).map_err(|e| PyValueError::new_err(e.message))?;
        Ok(PyMemoryStoreEngine {
            key,
            root: self::root(root)?,
            limits: limits(max_bytes, max_files)?,
            config,
            last_read: Mutex::new(ReadCache::default()),
        })
    }

    /// Checks one command's arguments (a dict; `numbered` as for `MemoryTree.apply`) and
    /// returns it ready for `begin`. Raises `MemoryCommandError` for missing, misplaced or
    /// ill-typed arguments.
    #[pyo3(signature = (command, kwargs = None, numbered = false))]
    fn command(
        &self,
        py: Python<'_>,
        command: &str,
        kwargs: Option<&Bound<'_, PyDict>>,
        numbered: bool,
    ) -> PyResult<PyMemoryCommand> {
        let _in = super::shutdown::inside(py);
        let cmd = parse_command(
            py,
            Some(command.to_string()),
            kwargs_items(kwargs).into_iter(),
            numbered,
        )?;
        Ok(PyMemoryCommand { cmd })
    }

    /// Answers a command that never writes (`view`) from the document `store.get` returned
    /// (as `MemoryCasLoop.on_get` takes it): no compare-and-set loop is needed. Raises the
    /// command's error, `MemoryCorruptError` for a document that is not a memory tree,
    /// `TypeError` for a document of another type and `ValueError` for a command that writes.
    #[pyo3(signature = (command, kwargs, doc, numbered = false))]
    fn read(
        &self,
        py: Python<'_>,
        command: &str,
        kwargs: Option<&Bound<'_, PyDict>>,
        doc: &Bound<'_, PyAny>,
        numbered: bool,
    ) -> PyResult<String> {
        let _in = super::shutdown::inside(py);
        let cmd = parse_command(
            py,
            Some(command.to_string()),
            kwargs_items(kwargs).into_iter(),
            numbered,
        )?;
        engine::readable(&cmd).map_err(PyValueError::new_err)?;
        let Ok(s) = doc.cast::<PyString>() else {
            let text = doc_text(doc, "store.get")?;
            return answer_once(&self.root, text.as_deref(), &cmd, &self.limits).map_err(|e| to_py_err(py, e));
        };
        let s = s.to_str()?;
        let mut cache = self.last_read.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .answer(&self.root, s, &cmd, &self.limits)
            .map_err(|e| to_py_err(py, e))
    }

    /// Starts the compare-and-set loop of a batch of commands (from `command`), applied in
    /// order and written together. The caller drives it: `get` the document, `on_get(doc)`,
    /// and while that asks for a write, `compare_and_set` and `on_cas(won)`; then `outcomes()`.
    fn begin(&self, py: Python<'_>, commands: Vec<PyRef<'_, PyMemoryCommand>>) -> PyResult<PyMemoryCasLoop> {
        let _in = super::shutdown::inside(py);
        let cmds = commands.iter().map(|c| c.cmd.clone()).collect();
        let machine = CasLoop::batch(self.root.clone(), cmds, self.limits, self.config, next_seed());
        CasRun::begin(machine)
            .map(|run| PyMemoryCasLoop { run })
            .map_err(PyRuntimeError::new_err)
    }

    /// The store key of the tree document.
    #[getter]
    fn key(&self) -> String {
        self.key.clone()
    }
}

/// One checked memory command (see `MemoryStoreEngine.command`).
#[pyclass(module = "agentkit_tools._core", name = "MemoryCommand", frozen)]
struct PyMemoryCommand {
    cmd: Command,
}

#[pymethods]
impl PyMemoryCommand {
    /// True for a command that never writes (`view`).
    #[getter]
    fn read_only(&self) -> bool {
        self.cmd.is_read_only()
    }
}

/// A batch's compare-and-set loop, stepped from Python (see `MemoryStoreEngine.begin`).
#[pyclass(module = "agentkit_tools._core", name = "MemoryCasLoop")]
struct PyMemoryCasLoop {
    run: CasRun,
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

/// The tree document a store handed back: `None` (absent), its JSON text, or a decoded object.
/// `source` names where it came from in the error message.
fn doc_text(doc: &Bound<'_, PyAny>, source: &str) -> PyResult<Option<String>> {
    if doc.is_none() {
        Ok(None)
    } else if let Ok(s) = doc.cast::<PyString>() {
        Ok(Some(s.to_str()?.to_owned()))
    } else if doc.is_instance_of::<PyDict>() {
        let v: serde_json::Value = pythonize::depythonize(doc)
            .map_err(|e| PyTypeError::new_err(engine::mapping_not_json_message(&e.to_string())))?;
        Ok(Some(v.to_string()))
    } else {
        Err(PyTypeError::new_err(engine::not_a_document_message(
            source,
            &type_name(doc),
        )))
    }
}

#[pymethods]
impl PyMemoryCasLoop {
    /// Feeds the value `store.get(key)` returned: `None` (absent), the document's JSON text, or
    /// the document as a decoded JSON object. Returns `None` when the batch is finished (see
    /// `outcomes`; nothing to write), or the new document text to write with
    /// `store.compare_and_set(key, doc, value)` (pass back exactly the `doc` that was read).
    /// Raises `TypeError` when the store returned something else.
    fn on_get(&mut self, doc: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let _in = super::shutdown::inside(doc.py());
        let text = doc_text(doc, "store.get")?;
        self.run.on_get(text).map_err(PyRuntimeError::new_err)
    }

    /// Offers a recent copy of the document that may be stale (as `on_get` takes it) instead of
    /// a read, whenever a read is due (at the start, or after `on_cas` returned a delay).
    /// Returns the new document text to write with `compare_and_set(key, doc, value)` when the
    /// batch changes that copy, or `None`: read the document and call `on_get` (views, no-ops
    /// and errors are only answered from a fresh read; a won write proves the copy current).
    fn on_cached(&mut self, doc: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let _in = super::shutdown::inside(doc.py());
        let Ok(text) = doc_text(doc, "the cached copy") else {
            return Ok(None);
        };
        self.run.on_cached(text).map_err(PyRuntimeError::new_err)
    }

    /// Feeds the result of `store.compare_and_set` (a bool). Returns `None` when the batch is
    /// finished (see `outcomes`), or the seconds to wait (0.0: none) before reading the
    /// document again. Raises `TypeError` for a result that is not a bool.
    fn on_cas(&mut self, won: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        let _in = super::shutdown::inside(won.py());
        if !won.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(engine::cas_not_bool_message(&type_name(won))));
        }
        // Seconds, as Python's `asyncio.sleep` takes them.
        Ok(self
            .run
            .on_cas(won.is_truthy()?)
            .map_err(PyRuntimeError::new_err)?
            .map(|d| d.as_secs_f64()))
    }

    /// Once finished, one outcome per command in order: the answer text, or the exception
    /// (not raised) of this module's classes — `StoreConflictError` when every attempt was
    /// lost, `MemoryCorruptError` for a document that is not a memory tree. `None` before.
    fn outcomes<'py>(&self, py: Python<'py>) -> Option<Vec<Bound<'py, PyAny>>> {
        let _in = super::shutdown::inside(py);
        let outcomes = self.run.outcomes()?;
        Some(
            outcomes
                .iter()
                .map(|o| match o {
                    Ok(text) => PyString::new(py, text).into_any(),
                    Err(e) => to_py_err(py, e.clone()).into_value(py).into_bound(py).into_any(),
                })
                .collect(),
        )
    }

    /// Read-apply cycles used so far (1 = no lost race).
    #[getter]
    fn attempts(&self) -> u32 {
        self.run.attempts()
    }

    /// True once the batch's document was written (its compare-and-set won).
    #[getter]
    fn written(&self) -> bool {
        self.run.written()
    }
}
