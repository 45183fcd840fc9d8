//! What `tapir` nodes say to each other (messages), to themselves (timers) and to their
//! durable log (records).

use super::occ::OccState;
use meridian_core::node::Context;
use meridian_core::txn::{Key, Value};
use meridian_core::{ShardId, Timestamp, TxnId};
use serde::{Deserialize, Serialize};

/// The context every handler of this protocol receives.
pub(crate) type Cx<'a> = Context<'a, Msg, Timer, Record>;

/// A replica's answer to PREPARE: the result of TAPIR-OCC-CHECK (TAPIR §5.2),
/// and the result of an IR consensus operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Vote {
    /// PREPARE-OK: validated at the proposed timestamp and now in the prepared list.
    Ok,
    /// ABORT: a read is stale (a newer version committed).
    Abort,
    /// ABSTAIN: conflicts with a transaction prepared here whose outcome is unknown.
    Abstain,
    /// RETRY: would validate at a later timestamp; the replica proposes this one.
    Retry(Timestamp),
}

/// A transaction's part on one shard: its read set (key, version read) and write set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardTxn {
    pub reads: Vec<(Key, Timestamp)>,
    pub writes: Vec<(Key, Value)>,
}

/// A commit decision as the coordinator logs and resends it: the commit timestamp and each
/// participant shard's part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitDecision {
    pub ts: Timestamp,
    pub shards: Vec<(ShardId, ShardTxn)>,
}

/// A message of `tapir`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → closest replica: the latest committed versions of `keys` (TAPIR
    /// §5.2, versioned reads; unreplicated, any one replica answers).
    Read { txn: TxnId, keys: Vec<Key> },
    /// Replica → coordinator: (key, value, version); an absent key has version zero.
    ReadReply {
        txn: TxnId,
        values: Vec<(Key, Option<Value>, Timestamp)>,
    },
    /// Coordinator → every replica of a participant: IR consensus operation
    /// Prepare(txn, timestamp). `attempt` counts the timestamps tried (a RETRY starts the
    /// next attempt), so a late PREPARE of an earlier attempt is ignored.
    /// `view` is the latest view the coordinator heard of from this shard: a normal replica
    /// in an earlier view missed a view change and starts one (IR §3.2.2).
    Prepare {
        txn: TxnId,
        attempt: u32,
        ts: Timestamp,
        part: ShardTxn,
        view: u64,
    },
    /// Replica → coordinator: the result of the consensus operation in the replica's
    /// `view` (IR counts only replies of one view together); `finalized` when the record
    /// holds it as decided (by a FINALIZE or a view change's merge): then it is final.
    PrepareReply {
        txn: TxnId,
        attempt: u32,
        vote: Vote,
        view: u64,
        finalized: bool,
    },
    /// Coordinator → replicas, IR slow path: the result decided from replies of `view`.
    Finalize {
        txn: TxnId,
        attempt: u32,
        vote: Vote,
        view: u64,
    },
    /// Replica → coordinator: the decided result is in its record, in `view` (a view other
    /// than the FINALIZE's means the replica moved on: the coordinator asks again).
    Confirm { txn: TxnId, attempt: u32, view: u64 },
    /// Coordinator → replicas, IR inconsistent operation: commit at `ts` (carries the part
    /// so that a replica which never prepared still applies it).
    Commit {
        txn: TxnId,
        ts: Timestamp,
        part: ShardTxn,
    },
    /// Replica → coordinator: the commit is applied (the coordinator resends until then).
    CommitAck { txn: TxnId },
    /// Coordinator → replicas, IR inconsistent operation: abort (drop from the prepared list).
    Abort { txn: TxnId },
    /// Replica → coordinator: what became of a transaction still in its record after
    /// `query_ms` (the coordinator answers COMMIT, ABORT, or nothing while undecided).
    Query { txn: TxnId },
    /// Replica → replicas of its shard, IR view change (§3.2.2): `view` starts; the leader
    /// of `view` (`view` mod n) gets the sender's record, the others only the view number.
    DoViewChange {
        view: u64,
        latest_normal_view: u64,
        record: Option<Box<IrRecord>>,
    },
    /// Leader → replicas of its shard: the master record of `view`; each replica adopts it
    /// (TAPIR's Sync) and returns to normal.
    StartView { view: u64, record: Box<IrRecord> },
}

/// A replica's IR record as a view change ships it: the undecided consensus operations
/// (Prepare entries), the inconsistent ones applied recently (Commit, Abort) as
/// (transaction, committed), and the most recent Commits with their arguments, so that a
/// replica that missed one applies it from the record (IR's Sync).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrRecord {
    pub entries: Vec<RecordEntry>,
    /// The latest finished transactions, oldest first (at most `FINISHED_SHIPPED`).
    pub finished: Vec<(TxnId, bool)>,
    /// The latest commits applied, oldest first (at most the `commits_in_record` option).
    pub commits: Vec<CommitOp>,
}

/// IR's inconsistent operation Commit with its arguments: the transaction, its commit
/// timestamp and its part on this shard (the reads matter too: a committed read bars a
/// later write below it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitOp {
    pub txn: TxnId,
    pub ts: Timestamp,
    pub part: ShardTxn,
}

/// What a timer carries back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Coordinator: retransmit what `txn` still waits for, or give up at its deadline.
    Tick { txn: TxnId },
    /// Coordinator: the fast-path wait of `txn`'s attempt on `shard` is over.
    FastPath {
        txn: TxnId,
        attempt: u32,
        shard: ShardId,
    },
    /// Coordinator: resend a logged commit decision to the replicas that have not acked.
    ResendCommit { txn: TxnId },
    /// Replica: ask coordinators about transactions that stayed undecided too long.
    QueryStale,
    /// Replica: the view change to `view` did not finish in time; start the next one.
    ViewChange { view: u64 },
}

/// A durable record. Replicas log every record entry before replying (so a restarted
/// replica never contradicts a result it gave); coordinators log commit decisions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Replica: the result of Prepare for `attempt` (and, if OK, the prepared part).
    Prepared {
        txn: TxnId,
        attempt: u32,
        ts: Timestamp,
        part: ShardTxn,
        vote: Vote,
    },
    /// Replica: the finalized result of a consensus operation.
    Finalized {
        txn: TxnId,
        attempt: u32,
        vote: Vote,
    },
    /// Replica: a commit applied.
    Committed {
        txn: TxnId,
        ts: Timestamp,
        part: ShardTxn,
    },
    /// Replica: an abort applied.
    Aborted { txn: TxnId },
    /// Replica: its view, and the latest view in which it was normal (IR's persisted view
    /// information; logged before it says anything in the view).
    View { view: u64, latest_normal_view: u64 },
    /// Replica: everything before it, as state.
    ReplicaCheckpoint(Box<ReplicaSnapshot>),
    /// Coordinator: an incarnation started (logged before any of its ids is used).
    Started { incarnation: u32 },
    /// Coordinator: the commit point, with every replica that must acknowledge.
    Decided {
        txn: TxnId,
        decision: CommitDecision,
        replicas: Vec<meridian_core::NodeId>,
    },
    /// Coordinator: every replica acknowledged `txn`'s commit.
    Acked { txn: TxnId },
    /// Coordinator: everything before it.
    CoordCheckpoint {
        incarnation: u32,
        pending: Vec<(TxnId, CommitDecision, Vec<meridian_core::NodeId>)>,
    },
}

/// A replica's whole state, as a checkpoint holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSnapshot {
    pub view: u64,
    pub latest_normal_view: u64,
    pub occ: OccState,
    /// Undecided record entries.
    pub entries: Vec<RecordEntry>,
    /// Recently finished transactions (txn, committed), oldest first.
    pub finished: Vec<(TxnId, bool)>,
    /// The latest commits applied, with their arguments, oldest first.
    pub commits: Vec<CommitOp>,
}

/// One undecided transaction in a replica's IR record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordEntry {
    pub txn: TxnId,
    pub attempt: u32,
    pub ts: Timestamp,
    pub part: ShardTxn,
    pub vote: Vote,
    pub finalized: Option<Vote>,
}
