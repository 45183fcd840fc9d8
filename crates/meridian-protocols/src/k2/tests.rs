//! Unit tests of `k2`.
