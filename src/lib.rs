//! agentkit-tools core.
//!
//! The pure-Rust modules (`docstring`, `schema`, `validate`, `arguments`, `errors`, `envelope`,
//! `calls`, `registry`, `middleware`, `pipeline`, `flags`, `body`, `drive`, `observe`, `render`,
//! `memory`, `handoff`, `pool`, `deadline`, `cancel`, `shutdown`) hold all the logic and know
//! nothing of Python; `py` is the thin binding layer that converts values and maps errors. It is
//! compiled only with the `python` feature (maturin turns it on), so the core builds and runs its
//! tests with pyo3 absent.
pub mod arguments;
pub mod body;
pub mod calls;
pub mod cancel;
pub mod deadline;
pub mod docstring;
pub mod drive;
pub mod envelope;
pub mod errors;
pub mod flags;
pub mod flat;
pub mod handoff;
pub mod memory;
pub mod middleware;
pub mod observe;
pub mod pipeline;
pub mod pool;
pub mod providers;
#[cfg(feature = "python")]
mod py;
pub mod registry;
pub mod render;
pub mod schema;
pub mod shutdown;
pub mod stored;
pub mod turn;
pub mod validate;

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _core(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    py::register(m)
}
