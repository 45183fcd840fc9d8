//! What Clock-SI / conventional-SI nodes say to each other (messages), to themselves
//! (timers) and to their durable logs (records).

use crate::raft_group::{RaftMsg, RaftRecord};
use meridian_core::node::Context;
use meridian_core::txn::{AbortReason, Key, Value};
use meridian_core::{NodeId, Timestamp, TxnId};
use meridian_store::Version;
use serde::{Deserialize, Serialize};

/// The context every handler of this module receives.
pub(crate) type Cx<'a> = Context<'a, Msg, Timer, Record>;

/// Why a coordinator asks the oracle for a timestamp (conventional SI only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TsPurpose {
    Snapshot,
    Commit,
}

/// A message. Coordinator ↔ server, server → coordinator, coordinator ↔ oracle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Algorithm 1 `ReadDataItem` at the partition holding `key`; `op` matches the reply.
    Read {
        txn: TxnId,
        op: u64,
        key: Key,
        snapshot: Timestamp,
    },
    /// Algorithm 2 `LocalCommit`: certify and commit at this (only updated) partition.
    CommitLocal {
        txn: TxnId,
        snapshot: Timestamp,
        writes: Vec<(Key, Value)>,
    },
    /// Algorithm 2 line 14: certify, log and prepare.
    Prepare {
        txn: TxnId,
        snapshot: Timestamp,
        writes: Vec<(Key, Value)>,
    },
    /// Algorithm 2 line 22 (also the answer to a `Query` for a committed transaction).
    Commit {
        txn: TxnId,
        commit_ts: Timestamp,
    },
    /// The abort decision (also the presumed-abort answer to a `Query`).
    Abort {
        txn: TxnId,
    },
    ReadReply {
        txn: TxnId,
        op: u64,
        result: Result<Option<Value>, AbortReason>,
        /// How long the partition held the read back (Algorithm 1's delays), local ns.
        waited_ns: u64,
        /// The partition's clock when the read arrived (§V-F's t₂; `delta_ms=measured`
        /// turns it into a one-way-delay-plus-skew sample).
        arrived_ns: u64,
    },
    LocalDone {
        txn: TxnId,
        result: Result<Timestamp, AbortReason>,
    },
    /// Algorithm 2 line 28: `Ok(prepare timestamp)`, or why the partition refused.
    Vote {
        txn: TxnId,
        result: Result<Timestamp, AbortReason>,
    },
    CommitAck {
        txn: TxnId,
    },
    /// Server → coordinator: what became of `txn`? (a prepared transaction blocks a read,
    /// Algorithm 1 lines 14–15, or a recovered prepared transaction, §III-E).
    Query {
        txn: TxnId,
    },
    /// Coordinator → oracle (conventional SI).
    TsRequest {
        txn: TxnId,
        purpose: TsPurpose,
    },
    TsReply {
        txn: TxnId,
        purpose: TsPurpose,
        ts: Timestamp,
    },
    /// Replicated mode: between the members of a partition's Raft group.
    Raft(RaftMsg),
    /// Replicated mode: a member that does not lead got a request for `txn`; `leader` is
    /// the member it believes leads, if any.
    NotLeader {
        txn: TxnId,
        leader: Option<NodeId>,
    },
}

impl Msg {
    /// A short name of the message kind, for traces and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Read { .. } => "read",
            Msg::CommitLocal { .. } => "commit-local",
            Msg::Prepare { .. } => "prepare",
            Msg::Commit { .. } => "commit",
            Msg::Abort { .. } => "abort",
            Msg::ReadReply { .. } => "read-reply",
            Msg::LocalDone { .. } => "local-done",
            Msg::Vote { .. } => "vote",
            Msg::CommitAck { .. } => "commit-ack",
            Msg::Query { .. } => "query",
            Msg::TsRequest { .. } => "ts-request",
            Msg::TsReply { .. } => "ts-reply",
            Msg::Raft(_) => "raft",
            Msg::NotLeader { .. } => "not-leader",
        }
    }

    /// The transaction of a request a coordinator sends to a partition.
    pub fn partition_request_txn(&self) -> Option<TxnId> {
        match self {
            Msg::Read { txn, .. }
            | Msg::CommitLocal { txn, .. }
            | Msg::Prepare { txn, .. }
            | Msg::Commit { txn, .. }
            | Msg::Abort { txn } => Some(*txn),
            _ => None,
        }
    }
}

/// A timer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Coordinator: retransmit or time out the session's current step.
    Session(TxnId),
    /// Coordinator: retransmit COMMIT to participants that have not acknowledged.
    Commit(TxnId),
    /// Server: the local clock should have passed `at_ns`: the requests held for it
    /// (Algorithm 1 lines 19–22, the kit's clock gate) are handled again.
    ClockPassed { at_ns: u64 },
    /// Server: periodic housekeeping (queries for prepared transactions, GC, forgetting).
    Tick,
    /// Replicated mode: the Raft group's clock.
    RaftTick,
    /// Replicated mode: a timer the server set during leadership `epoch` of its member.
    Led { epoch: u64, timer: Box<Timer> },
}

/// A transaction a partition prepared: everything it needs to commit after a crash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedTxn {
    /// The coordinator is `txn.coordinator` (Algorithm 2 line 25: "T's coordinator ID").
    pub txn: TxnId,
    pub snapshot: Timestamp,
    pub prepare_ts: Timestamp,
    pub writes: Vec<(Key, Value)>,
}

/// How a transaction ended at a partition (kept a while, to answer duplicates).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finished {
    Committed(Timestamp),
    Aborted(AbortReason),
}

/// A partition's whole durable state at one point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSnapshot {
    /// No timestamp at or below it was ever issued or served here.
    pub clock_floor_ns: u64,
    /// The store's GC watermark.
    pub watermark: Timestamp,
    /// Every committed version (the store keeps only those at or above the watermark's
    /// anchor), sorted by key then timestamp.
    pub versions: Vec<(Key, Version)>,
    pub prepared: Vec<PreparedTxn>,
    pub finished: Vec<(TxnId, Finished)>,
}

/// A durable record (§III-E: update records, prepare records with the coordinator id,
/// commit records, checkpoints).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Server: timestamps up to `until_ns` may have been issued or served; a restarted
    /// partition never issues one at or below it (its clock may have stepped back).
    ClockLease {
        until_ns: u64,
    },
    /// Server: Algorithm 2 line 25, written before voting yes.
    Prepared(PreparedTxn),
    /// Server: Algorithm 2 lines 9 and 30. `writes` for a local commit (no `Prepared`
    /// precedes it), `None` for a prepared transaction.
    Committed {
        txn: TxnId,
        commit_ts: Timestamp,
        writes: Option<Vec<(Key, Value)>>,
    },
    /// Server: a prepared transaction aborted.
    Aborted {
        txn: TxnId,
    },
    ServerCheckpoint(Box<ServerSnapshot>),
    /// Coordinator (and oracle): the node (re)started; transaction ids use the incarnation.
    Started {
        incarnation: u32,
    },
    /// Coordinator: Algorithm 2 line 19, the commit decision, before any COMMIT is sent.
    Decided {
        txn: TxnId,
        commit_ts: Timestamp,
        participants: Vec<NodeId>,
    },
    /// Coordinator: every decided transaction has been acknowledged by all participants.
    Acked {
        txn: TxnId,
    },
    /// Coordinator: its incarnation and the commits not yet acknowledged.
    CoordCheckpoint {
        incarnation: u32,
        pending: Vec<(TxnId, Timestamp, Vec<NodeId>)>,
    },
    /// Oracle: timestamps up to `until_ns` may have been issued.
    OracleLease {
        until_ns: u64,
    },
    /// Replicated mode: a replica's Raft log and hard state (the server's records travel
    /// inside its entries).
    Raft(RaftRecord),
}
