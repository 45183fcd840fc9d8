//! `meridian-protocols`: one module per transaction protocol, each a set of sans-IO state
//! machines implementing [`meridian_core::Protocol`].
//!
//! * [`two_pl`] — `2pl-2pc`, the reference: strict two-phase locking with two-phase commit,
//!   single copy, strict serializability. It exercises the harness; the papers' protocols
//!   are judged by the same simulator and checker.
//! * [`raft_2pc`] — `2pl-raft` (strict 2PL, wound-wait) and `occ-raft` (OCC validated at
//!   prepare): 2PC with each shard a Raft group, Tiga §5.1's fault-tolerant baselines.
//! * [`clock_si`] — Clock-SI (SRDS '13) and its oracle baseline `conventional-si`.
//! * [`tiga`] — Tiga, the flagship: one-WRTT commits ordered by synchronized clocks.
//! * [`k2`] — K2 (TTC oracle, K2-TB timestamp batches, K2-MVTO at the primaries).
//! * [`dast`] — DAST (EuroSys '21): edge regions, IRTs that never wait for CRTs,
//!   anticipation through region managers and the stretchable clock.
//! * [`tapir`] — TAPIR (SOSP '15): OCC at every replica over inconsistent replication,
//!   fast path on a super quorum, slow path, RETRY; strict or (`strict=false`) serializable.
//! * [`janus`] — Janus (OSDI '16): dependency graphs, fast path on identical answers,
//!   execution by strongly connected components.
//! * [`p2pl_ttc`] — `p2pl-ttc`, K2 §7.3's Spanner-like baseline: 2PL (wound-wait), 2PC,
//!   commit timestamps from the TTC Oracle, commit wait switchable.
//! * [`slog`] — SLOG (VLDB '19) on DAST's edge deployment: regional logs, a Raft global
//!   orderer for multi-home transactions, deterministic locking in log order.
//! * [`mvto_hlc`] — `mvto-hlc`, K2 §7.3's CockroachDB-like baseline: HLC timestamps at
//!   the start, read refresh, write pipelining, parallel commits.
//! * [`kit`] — mechanisms the protocols share (two-phase commit, the Raft group, …).

pub mod aurogon;
pub mod clock_si;
pub mod dast;
pub mod janus;
pub mod k2;
pub mod kit;
pub mod mvto_hlc;
pub mod p2pl_ttc;
pub mod pb_2pc;
pub mod raft_2pc;
pub mod slog;
pub mod tapir;
pub mod tiga;
pub mod two_pl;

#[cfg(test)]
mod testkit;

/// The Raft group lives in the kit; this path is kept for the protocols that name it.
pub use kit::raft_group;
pub use raft_2pc::{OccRaft, TwoPlRaft};
pub use two_pl::TwoPlTwoPc;
