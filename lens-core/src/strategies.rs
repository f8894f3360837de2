//! Placeholder, filled by the foundation work.
