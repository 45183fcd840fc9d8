//! SLOG's messages, timers, log commands and durable records.

use crate::raft_group::{RaftMsg, RaftRecord};
use meridian_core::txn::{AbortReason, Outcome, PieceResult, Txn};
use meridian_core::{NodeId, RequestId, ShardId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A transaction's identity: its coordinating edge node, that node's incarnation (a random
/// nonce drawn at boot, so a restarted coordinator never reuses a key) and a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TxnKey {
    pub coordinator: NodeId,
    pub boot: u64,
    pub seq: u64,
}

/// A transaction as logs carry it. Its coordinator (who gets the results) is `key.coordinator`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: TxnKey,
    pub txn: Arc<Txn>,
    /// The coordinator's floor when it sent this order: every transaction of its
    /// incarnation with a lower `seq` is answered, so never ordered again (`logged.rs`).
    pub floor: u64,
}

/// What a piece came to: its outputs, or why it failed (a stored procedure's abort, or a
/// failed input).
pub type PieceOutcome = Result<PieceResult, AbortReason>;

/// A command of a region's log (a Raft entry of the region's edge nodes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A batch of the region's single-home transactions, closed by its sequencer.
    Batch(Vec<Entry>),
    /// Global batch `g` of the global orderer: the lock-only pieces, for this region, of
    /// the multi-home transactions it ordered (possibly none). Applied in `g` order.
    Global { g: u64, entries: Vec<Entry> },
    /// The sequencer's call to compact (`edge.rs`): every member keeps a snapshot of its
    /// state right after this command, and compacts its log behind the snapshot it kept
    /// at the previous one if that is at or below `safe` (every member holds the log up
    /// to `safe`).
    Compact { safe: u64 },
}

/// A command of the global orderer's log: a batch of multi-home transactions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalCommand(pub Vec<Entry>);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Port → its edge node: a client's transaction.
    Submit { request: RequestId, txn: Txn },
    /// Edge node → port: the outcome for the client.
    Done {
        request: RequestId,
        outcome: Outcome,
    },
    /// Coordinator → a sequencer (single-home) or the global orderer (multi-home): log
    /// this. A member that does not lead forwards it once to the leader it knows.
    Order { entry: Entry, forwarded: bool },
    /// Sequencer or orderer leader → coordinator: the transaction is in the log.
    Logged { key: TxnKey },
    /// Between members of one Raft group (a region's edge nodes, or the orderers).
    Raft(RaftMsg),
    /// Orderer leader → a region's member: global batch `g` (only the region's pieces).
    GlobalBatch {
        g: u64,
        entries: Vec<Entry>,
        forwarded: bool,
    },
    /// A region's leader → orderer: every global batch up to `g` is in the region's log.
    GlobalAck { g: u64 },
    /// Edge node → the replicas of a shard whose pieces consume this piece's outputs (a
    /// remote read, the value dependency of a multi-home transaction).
    Input {
        key: TxnKey,
        piece: u16,
        outcome: PieceOutcome,
    },
    /// Edge node → a shard's replicas: an input it waited for too long (lost, or sent
    /// while it was down).
    InputQuery { key: TxnKey, piece: u16 },
    /// Edge node → the replicas of the transaction's other shards: its pieces on `shard`
    /// ran (a shard keeps the transaction's locks until every shard's have).
    Finished { key: TxnKey, shard: ShardId },
    /// Edge node → a shard's replicas: did you run your pieces of `key`?
    FinishedQuery { key: TxnKey },
    /// Edge node → coordinator: the outcomes of the transaction's pieces on its shard.
    Results {
        key: TxnKey,
        pieces: Vec<(u16, PieceOutcome)>,
    },
}

#[derive(Clone, Debug)]
pub enum Timer {
    /// A Raft tick, retransmissions and timeouts.
    Tick,
    /// A sequencer closes its batch (every `batch_ms`).
    Batch,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// The node's Raft log (its region's log, or the global orderer's).
    Raft(RaftRecord),
    /// A remote input received: a restarted node replays its log with it instead of
    /// asking again.
    Input {
        key: TxnKey,
        piece: u16,
        outcome: PieceOutcome,
    },
}
