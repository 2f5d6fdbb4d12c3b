//! The error type of the memory core: a kind (which the binding maps to a Python class), a
//! stable machine-readable code, and a message that says what went wrong and what to do next.
use crate::errors::ErrorCode;
use std::fmt;

/// What kind of failure a memory command hit. The binding maps each kind to one Python class
/// (see `python/agentkit_tools/memory.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A path escapes the root, names another root, contains a backslash or a NUL byte, or the
    /// command would delete/rename the root itself. Python: `PermissionError`.
    PermissionDenied,
    /// The file or directory does not exist. Python: `FileNotFoundError`.
    NotFound,
    /// The target already exists (create without overwrite, rename onto an existing path).
    /// Python: `ValueError`.
    AlreadyExists,
    /// A missing, ill-typed or out-of-range argument, or text that does not match exactly once.
    /// Python: `ValueError`.
    InvalidArgument,
    /// The command would push the tree over `max_bytes` or `max_files`. Python:
    /// `MemoryLimitError(ValueError)`.
    Limit,
    /// The compare-and-set loop lost every race it was allowed. Python:
    /// `StoreConflictError(RuntimeError)`.
    Conflict,
    /// The stored document is not a memory tree this version can read. Python: `RuntimeError`.
    Corrupt,
}

/// Which limit a [`ErrorKind::Limit`] error names, with the numbers the message quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitInfo {
    /// `"max_bytes"` or `"max_files"`.
    pub limit: &'static str,
    /// The configured maximum (bytes or files).
    pub maximum: u64,
    /// The tree's use before the command.
    pub used: u64,
    /// The use the command asked for (what the tree would reach).
    pub requested: u64,
}

/// A failed memory command. Nothing was written when this is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryError {
    pub kind: ErrorKind,
    /// A short stable code for the tool-result envelope, e.g. `ambiguous_match`.
    pub code: ErrorCode,
    pub message: String,
    /// Present for [`ErrorKind::Limit`] only.
    pub limit: Option<LimitInfo>,
}

impl MemoryError {
    pub fn new(kind: ErrorKind, code: ErrorCode, message: impl Into<String>) -> Self {
        MemoryError {
            kind,
            code,
            message: message.into(),
            limit: None,
        }
    }
    pub fn permission(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::PermissionDenied, ErrorCode::PermissionDenied, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, ErrorCode::NotFound, message)
    }
    pub fn exists(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::AlreadyExists, ErrorCode::AlreadyExists, message)
    }
    pub fn invalid(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, code, message)
    }
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, ErrorCode::CorruptTree, message)
    }
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for MemoryError {}
