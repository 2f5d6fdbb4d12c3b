//! The binding layer: conversions, exception mapping and #[pyclass] wrappers. No logic lives here.
use pyo3::prelude::*;

mod args;
mod awaiting;
mod calls;
mod context;
mod coroutine;
mod deadline;
mod docstring;
mod drive;
mod envelope;
mod frozen;
mod gil;
mod handoff;
mod inbox;
mod memory;
mod observe;
mod pipeline;
mod providers;
mod registry;
mod relay;
mod running;
mod shutdown;
mod tools;
mod turn;
mod watch;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    awaiting::register(m)?;
    calls::register(m)?;
    coroutine::register(m)?;
    deadline::register(m)?;
    docstring::register(m)?;
    drive::register(m)?;
    envelope::register(m)?;
    frozen::register(m)?;
    handoff::register(m)?;
    inbox::register(m)?;
    memory::register(m)?;
    pipeline::register(m)?;
    providers::register(m)?;
    registry::register(m)?;
    relay::register(m)?;
    shutdown::register(m)?;
    tools::register(m)?;
    turn::register(m)?;
    Ok(())
}
