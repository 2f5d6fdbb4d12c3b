//! The memory tree and its compare-and-set loop (see SPEC §10).
