//! Tiga's messages, timers and durable records.

use meridian_core::txn::{AbortReason, Piece, PieceResult};
use meridian_core::{ShardId, Timestamp, TxnId};
use meridian_store::Hash160;
use serde::{Deserialize, Serialize};

/// A transaction as one shard sees it: the pieces for that shard (with their index in the
/// client's transaction), every involved shard (for timestamp agreement), and its current
/// timestamp.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TxnBody {
    pub id: TxnId,
    pub ts: Timestamp,
    pub shards: Vec<ShardId>,
    pub pieces: Vec<(u16, Piece)>,
}

/// What a leader's optimistic execution of a shard's pieces produced.
pub type ShardResult = Result<Vec<(u16, PieceResult)>, AbortReason>;

/// A fast reply (§3.4; Algorithm 2 `send-fast-reply`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FastReply {
    pub txn: TxnId,
    pub shard: ShardId,
    pub replica: u32,
    pub ts: Timestamp,
    /// Appendix D's per-key hash of the log over the transaction's keys, the transaction
    /// itself included at `ts`.
    pub hash: Hash160,
    /// The leader's execution results; `None` from followers.
    pub result: Option<ShardResult>,
    /// The leader revoked an earlier execution and executed again (§3.5 case 3).
    pub reexecuted: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → server OWD probe, stamped with the coordinator's local clock.
    Probe {
        sent_ns: u64,
    },
    /// Server → coordinator: the probe's stamp and the server's local clock at receipt.
    ProbeReply {
        sent_ns: u64,
        server_ns: u64,
    },
    /// Coordinator → every replica of every involved shard (§3.1).
    Submit(Box<TxnBody>),
    FastReply(Box<FastReply>),
    /// Follower → coordinator: the entry is consistent with the leader's log (§3.7).
    SlowReply {
        txn: TxnId,
        shard: ShardId,
        replica: u32,
        ts: Timestamp,
    },
    /// Leader → leaders: the timestamp this leader holds for `txn` (§3.5/§3.6), and
    /// whether it is sealed at it (at the head of the queue, recorded in rMap/wMap and, in
    /// the detective approach, executed). Unsealed notes are early lower bounds.
    Notify {
        txn: TxnId,
        shard: ShardId,
        ts: Timestamp,
        sealed: bool,
        /// An answer from a leader that already released `txn` (never answered again).
        echo: bool,
    },
    /// Leader → follower: entries of the leader's release stream from position `from`,
    /// and the leader's commit-point (§3.7).
    LogSync {
        shard: ShardId,
        from: u64,
        entries: Vec<(TxnId, Timestamp)>,
        commit_point: u64,
    },
    /// Follower → leader: periodic sync-point report (§3.7).
    SyncReport {
        shard: ShardId,
        sync_point: u64,
    },
    /// Follower → leader: the body of an entry this follower never received (§3.7 (2)).
    Fetch {
        txn: TxnId,
    },
    /// Leader → follower: the fetched body.
    FetchReply(Box<TxnBody>),
}

#[derive(Clone, Debug)]
pub enum Timer {
    /// Coordinator: send probes.
    Probe,
    /// Coordinator: retransmissions and timeouts.
    CoordTick,
    /// Server: the earliest queued timestamp may have expired.
    Wake,
    /// Server: housekeeping.
    Tick,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    /// A coordinator booted: the number of these records is its incarnation, so its
    /// transaction ids never repeat after a restart.
    CoordinatorStarted,
}
