//! `meridian-protocols`: one module per transaction protocol, each a set of sans-IO state
//! machines implementing [`meridian_core::Protocol`].
//!
//! * [`two_pl`] — `2pl-2pc`, the reference: strict two-phase locking with two-phase commit,
//!   single copy, strict serializability. It exercises the harness; the papers' protocols
//!   are judged by the same simulator and checker.

pub mod clock_si;
pub mod raft_group;
pub mod tiga;
pub mod two_pl;

pub use two_pl::TwoPlTwoPc;
