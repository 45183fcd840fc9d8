//! `meridian-protocols`: one module per transaction protocol, each a set of sans-IO state
//! machines implementing [`meridian_core::Protocol`].
//!
//! * [`two_pl`] — `2pl-2pc`, the reference: strict two-phase locking with two-phase commit,
//!   single copy, strict serializability. It exercises the harness; the papers' protocols
//!   are judged by the same simulator and checker.
//! * [`kit`] — mechanisms the protocols share (two-phase commit, the Raft group, …).

pub mod aurogon;
pub mod clock_si;
pub mod kit;
pub mod tiga;
pub mod two_pl;

#[cfg(test)]
mod testkit;

/// The Raft group lives in the kit; this path is kept for the protocols that name it.
pub use kit::raft_group;
pub use two_pl::TwoPlTwoPc;
