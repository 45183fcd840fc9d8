//! What `2pl-2pc` nodes say to each other (messages), to themselves (timers) and to their
//! durable log (records).

use super::locks::LockMode;
use crate::kit::primary_backup::{PbMsg, PbRecord};
use crate::p2pl_ttc::safets::SafeMsg;
use crate::raft_group::{RaftMsg, RaftRecord};
use meridian_core::node::Context;
use meridian_core::txn::{AbortReason, Key, Piece, PieceResult, Value};
use meridian_core::{NodeId, RequestId, Timestamp, TxnId};
use serde::{Deserialize, Serialize};

/// The context every handler of this protocol receives.
pub(crate) type Cx<'a> = Context<'a, Msg, Timer, Record>;

/// A transaction's age for WAIT-DIE: the coordinator's local clock when the client submitted
/// it, then its id as a unique tie-break. Smaller is older. Clock error only makes the order
/// less fair, never inconsistent: every server compares the same pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Age {
    pub time_ns: u64,
    pub txn: TxnId,
}

/// One piece to execute, with the outputs of the pieces it depends on that the coordinator
/// already holds. Dependencies on pieces of the same batch are resolved by the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceRun {
    pub index: u16,
    pub piece: Piece,
    pub inputs: Vec<(u16, PieceResult)>,
}

/// A message of `2pl-2pc`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → server. `horizon`: every transaction of the sending coordinator (it is
    /// `horizon.coordinator`) with a smaller id is decided, so a server may drop what it
    /// remembers of them and ignore stale messages about them.
    ToServer { horizon: TxnId, body: ToServer },
    /// Server → coordinator (the coordinator is `txn.coordinator`).
    ToCoord(ToCoord),
    /// `2pl-raft`: between the members of a shard's Raft group.
    Raft(RaftMsg),
    /// `p2pl-ttc`: coordinator → TTC oracle, for `txn`'s commit timestamp.
    GetTs { txn: TxnId },
    /// `p2pl-ttc`: the oracle's uncertainty upper bound `T_high` and its id.
    OracleTs {
        txn: TxnId,
        high_ns: u64,
        oracle: u32,
    },
    /// `2pl-pb`: replication and promotion between a shard's replicas and coordinators.
    Pb(PbMsg),
    /// `p2pl-ttc` with `replica_reads=safets`: replication, `T_earliest`, replica reads.
    Safe(SafeMsg),
}

/// What a coordinator asks of a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToServer {
    /// Lock and execute these pieces (in order) against the transaction's buffered view.
    /// `one_round`: the server holds every piece of the transaction; commit locally.
    Execute {
        txn: TxnId,
        age_ns: u64,
        one_round: bool,
        pieces: Vec<PieceRun>,
    },
    /// Phase one of 2PC: vote yes iff you still hold the locks and results of exactly
    /// `pieces`, produced in `incarnation` (the one your EXECUTED replies named).
    Prepare {
        txn: TxnId,
        incarnation: u32,
        pieces: Vec<u16>,
    },
    /// The decision: commit (also the answer to a `Query`); `p2pl-ttc` names the commit
    /// timestamp (SafeTS versions the writes by it).
    Commit {
        txn: TxnId,
        commit_ts: Option<Timestamp>,
    },
    /// The decision: abort (also the presumed-abort answer to a `Query`).
    Abort { txn: TxnId },
    /// A single-shard transaction timed out at its coordinator: abort it unless it already
    /// committed, and say which.
    Resolve { txn: TxnId },
}

/// The end of a single-shard (one-round) transaction at its server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalOutcome {
    Committed(Vec<PieceResult>),
    Aborted(AbortReason),
}

/// What a server tells a coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToCoord {
    /// Results of executed pieces, produced in the server's `incarnation`. A restart loses
    /// unprepared state; a late duplicate EXECUTE may then re-run a piece against a changed
    /// store, so PREPARE names the incarnation whose results the coordinator holds.
    Executed {
        txn: TxnId,
        incarnation: u32,
        results: Vec<(u16, PieceResult)>,
    },
    /// The server aborted the transaction (WAIT-DIE, a piece's abort, a timeout).
    Failed {
        txn: TxnId,
        reason: AbortReason,
    },
    /// A one-round transaction's outcome.
    Done {
        txn: TxnId,
        outcome: LocalOutcome,
    },
    Vote {
        txn: TxnId,
        yes: bool,
    },
    CommitAck {
        txn: TxnId,
    },
    /// A prepared server asks for the decision.
    Query {
        txn: TxnId,
    },
    /// `2pl-raft`: a member that does not lead got a request for `txn`; `leader` is the
    /// member it believes leads, if any.
    NotLeader {
        txn: TxnId,
        leader: Option<NodeId>,
    },
}

impl Msg {
    /// The transaction the message is about (none for a Raft message).
    pub fn txn(&self) -> Option<TxnId> {
        let txn = match self {
            Msg::ToServer { body, .. } => match body {
                ToServer::Execute { txn, .. }
                | ToServer::Prepare { txn, .. }
                | ToServer::Commit { txn, .. }
                | ToServer::Abort { txn }
                | ToServer::Resolve { txn } => *txn,
            },
            Msg::ToCoord(body) => match body {
                ToCoord::Executed { txn, .. }
                | ToCoord::Failed { txn, .. }
                | ToCoord::Done { txn, .. }
                | ToCoord::Vote { txn, .. }
                | ToCoord::CommitAck { txn }
                | ToCoord::Query { txn }
                | ToCoord::NotLeader { txn, .. } => *txn,
            },
            Msg::GetTs { txn } | Msg::OracleTs { txn, .. } => *txn,
            Msg::Raft(_) | Msg::Pb(_) | Msg::Safe(_) => return None,
        };
        Some(txn)
    }

    /// A short name of the message kind, for traces and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::ToServer { body, .. } => match body {
                ToServer::Execute { .. } => "execute",
                ToServer::Prepare { .. } => "prepare",
                ToServer::Commit { .. } => "commit",
                ToServer::Abort { .. } => "abort",
                ToServer::Resolve { .. } => "resolve",
            },
            Msg::ToCoord(body) => match body {
                ToCoord::Executed { .. } => "executed",
                ToCoord::Failed { .. } => "failed",
                ToCoord::Done { .. } => "done",
                ToCoord::Vote { .. } => "vote",
                ToCoord::CommitAck { .. } => "commit-ack",
                ToCoord::Query { .. } => "query",
                ToCoord::NotLeader { .. } => "not-leader",
            },
            Msg::Raft(_) => "raft",
            Msg::GetTs { .. } => "get-ts",
            Msg::OracleTs { .. } => "oracle-ts",
            Msg::Pb(_) => "pb",
            Msg::Safe(_) => "safe",
        }
    }
}

/// A timer of `2pl-2pc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Coordinator: retransmit or time out an undecided transaction.
    Txn(TxnId),
    /// Coordinator: retransmit COMMIT to participants that have not acknowledged.
    Commit(TxnId),
    /// Server: abort a silent unprepared transaction, or ask for a prepared one's decision.
    Server(TxnId),
    /// `2pl-raft`: the Raft group's clock.
    RaftTick,
    /// `2pl-raft`: a timer the server set during leadership `epoch` of its member.
    Led { epoch: u64, timer: Box<Timer> },
    /// SafeTS: a primary asks its oracle and answers pulls; a replica checks its pull.
    SafeTick,
    /// SafeTS: a coordinator resends or times out a read-only transaction.
    SafeRead(RequestId),
}

/// A transaction a server has prepared: everything it needs to commit after a crash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedTxn {
    pub age: Age,
    /// The locks it holds (re-taken on restart: strict 2PL holds them until the decision).
    pub locks: Vec<(Key, LockMode)>,
    /// Its buffered writes, applied on COMMIT.
    pub writes: Vec<(Key, Value)>,
}

/// The writes and results of a one-round commit (no Prepared record precedes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalCommit {
    pub writes: Vec<(Key, Value)>,
    pub results: Vec<PieceResult>,
}

/// What a server remembers of a finished transaction, to answer duplicates idempotently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finished {
    /// `results` for one-round transactions (a retransmitted EXECUTE gets them again).
    Committed {
        results: Option<Vec<PieceResult>>,
    },
    Aborted {
        reason: AbortReason,
    },
}

/// A server's whole durable state at one point: restore starts from the latest one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSnapshot {
    /// The committed store, in no particular order (the server's hash-map order, which is
    /// deterministic for a given run). Restore reads it back into a hash map.
    pub store: Vec<(Key, Value)>,
    pub prepared: Vec<PreparedTxn>,
    pub finished: Vec<(TxnId, Finished)>,
    /// The latest horizon heard from each coordinator.
    pub horizons: Vec<TxnId>,
    /// The server's incarnation when the snapshot was taken.
    pub incarnation: u32,
    /// OCC: every key's version (empty under locking). Never skipped when empty: the
    /// runtime stores records with postcard, which is not self-describing, so a skipped
    /// field would shift every field after it when the record is read back.
    pub versions: Vec<(Key, u64)>,
    /// SafeTS: the commit timestamp of every key's value (empty otherwise).
    pub stamps: Vec<(Key, Timestamp)>,
}

/// A durable record. Servers write `Prepared`, `Committed`, `Aborted`, `ServerCheckpoint` and
/// `Started`; coordinators `Started`, `Decided` and `CoordCheckpoint`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Written before voting yes.
    Prepared(PreparedTxn),
    /// Written before acknowledging a commit (or answering a one-round one).
    Committed {
        txn: TxnId,
        local: Option<LocalCommit>,
        /// `p2pl-ttc`: the commit timestamp (SafeTS rebuilds its versions from it).
        /// Always written (postcard: see [`ServerSnapshot::versions`]).
        commit_ts: Option<Timestamp>,
    },
    /// Un-prepares a prepared transaction, or pins a one-round abort (so a late duplicate of
    /// its EXECUTE cannot commit it after a restart).
    Aborted {
        txn: TxnId,
        reason: AbortReason,
    },
    ServerCheckpoint(Box<ServerSnapshot>),
    /// The node (re)started. A coordinator's transaction ids use its incarnation; a server
    /// tags its executions with it.
    Started {
        incarnation: u32,
    },
    /// The commit decision, written before any COMMIT is sent. No record means abort.
    Decided {
        txn: TxnId,
        participants: Vec<NodeId>,
        /// `p2pl-ttc`: the commit timestamp, resent with COMMIT. Always written (postcard).
        commit_ts: Option<Timestamp>,
    },
    /// A coordinator's state at one point: its incarnation and the commits still
    /// unacknowledged (with their commit timestamps, `p2pl-ttc`).
    CoordCheckpoint {
        incarnation: u32,
        pending: Vec<(TxnId, Option<Timestamp>, Vec<NodeId>)>,
    },
    /// `2pl-raft`: a replica's Raft log and hard state (the server's records travel inside
    /// its entries).
    Raft(RaftRecord),
    /// `2pl-pb`: a replica's configuration and log, or a coordinator's grant.
    Pb(PbRecord),
}

impl Record {
    /// A server record's weight for [`crate::kit::log::checkpoint_due_by_size`]: the keys and
    /// values it carries (writes, locked keys, one-round results).
    pub(crate) fn logged_bytes(&self) -> u64 {
        use crate::kit::log::{entry_bytes, ENTRY_OVERHEAD_BYTES};
        let writes = |w: &[(Key, Value)]| w.iter().map(|(k, v)| entry_bytes(k, v)).sum::<u64>();
        match self {
            Record::Prepared(p) => {
                let locks: u64 = p.locks.iter().map(|(k, _)| entry_bytes(k, &[])).sum();
                writes(&p.writes) + locks
            }
            Record::Committed {
                local: Some(local), ..
            } => {
                let outputs = local
                    .results
                    .iter()
                    .flat_map(|r| r.outputs.iter().flatten());
                writes(&local.writes) + outputs.map(|v| entry_bytes(&[], v)).sum::<u64>()
            }
            _ => ENTRY_OVERHEAD_BYTES,
        }
    }
}
