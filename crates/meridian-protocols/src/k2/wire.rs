//! Messages, timers and durable records of `k2`.

use super::write_stream::Version;
use meridian_core::txn::{AbortReason, Key, Piece, PieceResult, Value};
use meridian_core::{NodeId, ShardId, Timestamp};
use serde::{Deserialize, Serialize};

/// How a transaction ended on a primary: committed in which epoch, or aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    pub committed: bool,
    pub epoch: u64,
}

/// A transaction's start timestamp: its identity, its place in the serial order and the
/// version of everything it writes (§5.1).
pub type TxnTs = Timestamp;

/// A piece a coordinator asks a primary to run at the transaction's timestamp (Fig. 10's
/// Read and Write, for every key of the piece).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Execute {
    pub txn: TxnTs,
    /// The primary whose recorder holds the transaction's status (§5.2).
    pub recorder: NodeId,
    /// The piece's index (one-shot) or the step's number (interactive).
    pub step: u16,
    pub piece: Piece,
    /// Results of the pieces this one depends on.
    pub inputs: Vec<(u16, PieceResult)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → oracle: a timestamp, please (§4.2).
    GetTs { req: u64 },
    /// Oracle → coordinator: its uncertainty upper bound `T_high` (and its id).
    OracleTs { req: u64, high_ns: u64, oracle: u32 },
    /// Coordinator → primary.
    Execute(Box<Execute>),
    /// Primary → coordinator: the piece's result, or why the transaction must abort, and
    /// the epoch the primary proposes for it (§6.3, Fig. 10 line 10; 0 with K2-VCR off).
    Executed {
        txn: TxnTs,
        step: u16,
        outcome: Result<PieceResult, AbortReason>,
        epoch: u64,
    },
    /// Coordinator → recorder: commit (Fig. 9 line 7); `participants` are the shards
    /// holding the transaction's write intents; `epoch` the largest epoch they proposed.
    Commit {
        txn: TxnTs,
        participants: Vec<ShardId>,
        epoch: u64,
    },
    /// Coordinator → recorder: abort.
    Abort {
        txn: TxnTs,
        participants: Vec<ShardId>,
    },
    /// Recorder → coordinator: the durable decision.
    Decision { txn: TxnTs, committed: bool },
    /// Primary → recorder: PUSHWS (Fig. 10 lines 11-14), held until the status is determined.
    Push { txn: TxnTs },
    /// Recorder → primary: the determined status of a pushed or finalized transaction.
    /// `ack` asks for a `Finalized` (asynchronous finalization, Fig. 10 lines 16-17).
    Resolve {
        txn: TxnTs,
        committed: bool,
        ack: bool,
        /// The commit epoch (§6.3; 0 for an abort or with K2-VCR off).
        epoch: u64,
    },
    /// Primary → recorder: the transaction's intents on `shard` are finalized.
    Finalized { txn: TxnTs, shard: ShardId },
    /// Recorder → coordinator (only with `async_finalize=false`): every participant finalized.
    AllFinalized { txn: TxnTs },
    /// Coordinator → a copy of `piece.shard` (replica or primary): run a read-only piece
    /// in the read view of every epoch up to `epoch` (§6.4), once that epoch is complete.
    RepRead {
        txn: TxnTs,
        step: u16,
        epoch: u64,
        piece: Piece,
        inputs: Vec<(u16, PieceResult)>,
    },
    /// Replica → primary: the committed versions of epochs after `after` (§6.2's
    /// asynchronous replication, pulled so that a lost message or a restarted replica
    /// only costs a retry).
    Pull { after: u64 },
    /// Coordinator → primary: a transaction whose commit epoch `epoch` exceeds the ceiling
    /// epoch of its timestamp asks the primaries it read or wrote on to confirm that no
    /// younger transaction on `keys` may commit in an earlier epoch, and to hold every
    /// later writer of `keys` at `epoch` or more (see the module doc, "epoch order").
    Validate {
        txn: TxnTs,
        epoch: u64,
        keys: Vec<Key>,
    },
    /// Primary → coordinator: the answer to `Validate`.
    Validated {
        txn: TxnTs,
        shard: ShardId,
        ok: bool,
    },
    /// Primary → replica: every version committed in epochs `after+1 ..= complete`, and
    /// `complete`, the last epoch no later transaction can write in here.
    Replicate {
        after: u64,
        complete: u64,
        versions: Vec<(Key, Version)>,
    },
}

#[derive(Clone, Debug)]
pub enum Timer {
    /// Coordinator: retransmit what is outstanding, time out what is too old.
    CoordinatorTick,
    /// Coordinator: the TTL of oracle request `req` has passed.
    BatchTtl { req: u64 },
    /// Coordinator: oracle request `req` went unanswered; ask the next oracle.
    OracleRetry { req: u64 },
    /// Primary: time to ask the oracle whether the next epoch can be cut (Fig. 12).
    EpochCut { gen: u64 },
    /// Replica: pull from the primary.
    ReplicaTick,
    /// Coordinator: the commit wait of this transaction has passed (§4.4).
    CommitWait { txn: TxnTs },
    /// Primary: re-push, re-finalize, sweep stale intents, expire recorder entries.
    DataNodeTick,
    /// Recorder: `txn` reaches `max_txn_age`; abort it unless decided.
    RecorderDeadline { txn: TxnTs },
}

/// A write intent as persisted when it is created (§5.3: "all data and temporary write
/// streams are persisted upon creation").
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntentRecord {
    pub txn: TxnTs,
    pub recorder: NodeId,
    pub step: u16,
    pub writes: Vec<(Key, Value)>,
    pub result: PieceResult,
    /// The epoch this primary proposed when the intents were created (§6.3).
    pub epoch: u64,
}

/// A recorder's durable decision.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub txn: TxnTs,
    pub committed: bool,
    /// The commit epoch (§6.3).
    pub epoch: u64,
    /// Participants still to acknowledge finalization (committed decisions only; the
    /// recorder keeps them until every one has).
    pub unacked: Vec<ShardId>,
}

/// A live transaction's intents and step results on a primary, in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TxnSnapshot {
    pub txn: TxnTs,
    pub recorder: NodeId,
    /// The lowest epoch this primary proposed for it.
    pub epoch: u64,
    pub results: Vec<(u16, PieceResult)>,
    pub writes: Vec<(Key, Value)>,
}

/// One key's committed versions in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeySnapshot {
    pub key: Key,
    /// Versions below this were discarded.
    pub pruned_below: Timestamp,
    /// Oldest first.
    pub versions: Vec<Version>,
}

/// A primary's state as of a checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub keys: Vec<KeySnapshot>,
    pub txns: Vec<TxnSnapshot>,
    pub finished: Vec<(TxnTs, Finished)>,
    pub decisions: Vec<DecisionRecord>,
    pub read_floor: Timestamp,
    /// Per key, the least epoch a later writer proposes (validated transactions' epochs).
    #[serde(default)]
    pub epoch_floors: Vec<(Key, u64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    /// Coordinator: booted (its incarnation tags its timestamps).
    Started {
        incarnation: u32,
    },
    /// Primary: intents created by one step.
    Intents(Box<IntentRecord>),
    /// Primary: the transaction's intents were finalized (applied or dropped).
    Finalized {
        txn: TxnTs,
        committed: bool,
        epoch: u64,
    },
    /// Primary: reads up to this timestamp may have been served (§5.3 recovery of the read
    /// version tracker).
    ReadFloor(Timestamp),
    /// Primary: a transaction validated `epoch` on `keys`; later writers of them propose
    /// `epoch` or more.
    Validated {
        epoch: u64,
        keys: Vec<Key>,
    },
    /// Recorder: a decision, and later its finalization acknowledged.
    Decided(DecisionRecord),
    Acked {
        txn: TxnTs,
        shard: ShardId,
    },
    /// Primary: everything up to here.
    Checkpoint(Box<Snapshot>),
}
