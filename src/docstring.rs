//! Docstring parsing (placeholder).
