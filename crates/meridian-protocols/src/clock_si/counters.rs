//! The names of what `clock-si` and `conventional-si` count through
//! [`Context::count`](meridian_core::node::Context::count) (the simulator reports them as
//! `SimReport::counters`). They are what §IV's model predicts and §V-E measures: how many
//! transactions Algorithm 1 delayed, for how long, and how many certifications failed.

/// Coordinator: transactions begun (interactive or one-shot).
pub const TXNS: &str = "txns";
/// Coordinator: transactions with at least one read held back by a partition.
pub const TXNS_DELAYED: &str = "txns_delayed";
/// Coordinator: total time transactions waited for held-back reads, ns (parallel reads of a
/// one-shot transaction count once, as the longest of them).
pub const TXN_DELAY_NS: &str = "txn_delay_ns";
/// Partition: reads answered.
pub const READS: &str = "reads";
/// Partition: reads answered after waiting (for either reason below, or both).
pub const READS_DELAYED: &str = "reads_delayed";
/// Partition: total wait of the delayed reads, ns of the partition's clock.
pub const READ_DELAY_NS: &str = "read_delay_ns";
/// Partition: reads that waited for the local clock to pass their snapshot (lines 19–22).
pub const READS_DELAYED_BY_CLOCK: &str = "reads_delayed_by_clock";
/// Partition: reads that waited for a prepared transaction to be decided (lines 6–17).
pub const READS_DELAYED_BY_PENDING_COMMIT: &str = "reads_delayed_by_pending_commit";
/// Partition: prepares and local commits that waited for the local clock (§III-A).
pub const UPDATES_DELAYED_BY_CLOCK: &str = "updates_delayed_by_clock";
/// Partition: prepares and local commits refused by first-committer-wins certification.
pub const CERTIFICATION_ABORTS: &str = "certification_aborts";
/// Replicated mode: what the kit's Raft members count (`partition_takeovers`,
/// `raft_members`, `raft_log_peak_entries`, `raft_log_peak_bytes`, `raft_compactions`,
/// `raft_snapshot_bytes`, `raft_applied_bytes`, `raft_snapshots_sent`, `raft_snapshots_restored`; see [`crate::kit::replicated`]).
pub use crate::kit::replicated::{
    PARTITION_TAKEOVERS, RAFT_APPLIED_BYTES, RAFT_COMPACTIONS, RAFT_LOG_PEAK_BYTES,
    RAFT_LOG_PEAK_ENTRIES, RAFT_MEMBERS, RAFT_SNAPSHOTS_RESTORED, RAFT_SNAPSHOTS_SENT,
    RAFT_SNAPSHOT_BYTES,
};
