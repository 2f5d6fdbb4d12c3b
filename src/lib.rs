//! agentkit-tools core.
//!
//! The pure-Rust modules (`docstring`, `schema`, `validate`, `dispatch`, `render`, `memory`)
//! hold all the logic and know nothing of Python; `py` is the thin binding layer that converts
//! values and maps errors.
pub mod dispatch;
pub mod docstring;
pub mod memory;
pub mod middleware;
pub mod providers;
pub mod render;
pub mod schema;
pub mod validate;
mod py;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    py::register(m)
}
