//! The memory tree and its compare-and-set loop. Pure Rust: no pyo3.
//!
//! - [`path`]: lexical normalisation and confinement of paths under the root.
//! - [`tree`]: the tree document (path → text) and its JSON form.
//! - [`args`]: per-command argument checks producing a [`Command`].
//! - [`command`]: `apply(tree, command)`, the pure command engine with the size limits.
//! - [`cas`]: the compare-and-set loop as a sans-IO state machine.
//! - [`engine`]: that loop as a driver steps it, and read-only answers from a cached parse.
pub mod args;
pub mod cas;
pub mod command;
pub mod engine;
pub mod error;
pub mod path;
pub mod tree;

pub use args::CommandArgs;
pub use cas::DEFAULT_MAX_ATTEMPTS;
pub use cas::{CasConfig, CasDone, CasLoop, Step};
pub use command::{apply, number_lines, Command, Limits, Outcome, DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES};
pub use engine::{CasRun, ReadCache};
pub use error::{ErrorKind, LimitInfo, MemoryError};
pub use path::{Root, DEFAULT_ROOT};
pub use tree::Tree;

#[cfg(test)]
mod tests;
