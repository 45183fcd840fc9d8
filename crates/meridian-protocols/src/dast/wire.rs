//! DAST's messages, timers and durable records.

use meridian_core::txn::{AbortReason, Key, Outcome, PieceResult, Txn, Value};
use meridian_core::{NodeId, RequestId, Timestamp, TxnId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Whether a transaction stays in its coordinator's region (§4.2) or crosses regions (§4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Irt,
    Crt,
}

/// A transaction as the edge nodes pass it around.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnInfo {
    pub id: TxnId,
    pub kind: Kind,
    /// The edge node coordinating it.
    pub coord: NodeId,
    pub txn: Arc<Txn>,
}

/// What a notification (§4.2's PCT) tells an intra-region node about a relevant
/// transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoticeState {
    /// An IRT at its timestamp, not yet known committed (Alg. 1 line 15).
    Irt(Timestamp),
    /// A prepared CRT: its commit timestamp will be at least this anticipation (Alg. 2
    /// line 19).
    Prepared(Timestamp),
    /// A committed transaction and its commit timestamp (Alg. 2 line 26, or an IRT whose
    /// coordinator restarted after deciding).
    Committed(Timestamp),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub info: TxnInfo,
    pub state: NoticeState,
}

/// The header every intra-region message carries (§4.2): the sender's dclock as a promise
/// (every transaction relevant to the receiver that the sender will ever notify has a larger
/// timestamp, unless it is in `notices` or was delivered before), the notifications, the
/// sender's pause point (the head of its waitQ, so peers stretch their clocks below it,
/// §4.3), and the largest clock the sender has received from the receiver (the TCP-like
/// delivery acknowledgement of Alg. 1 line 17).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The sender's installed view (§4.4): a receiver at a later view refuses it.
    pub vid: u64,
    pub clock: Timestamp,
    pub pause: Option<Timestamp>,
    pub delivered: Timestamp,
    pub notices: Vec<Notice>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Port (the machine's client-facing coordinator node) → its edge node.
    Submit {
        request: RequestId,
        txn: Txn,
    },
    /// A removed edge node → another replica of its shard in the view: a client's
    /// transaction, to coordinate and answer to `port` (§3.1: a client goes to another
    /// nearby replica of its home shard; one hop, see `coord.rs`). `id` names this
    /// hand-off (the sender, its incarnation, a count) so a duplicate is recognised.
    Handoff {
        id: TxnId,
        port: NodeId,
        request: RequestId,
        txn: Txn,
    },
    /// Edge node → port: the answer to a submitted request.
    Done {
        request: RequestId,
        outcome: Outcome,
    },
    /// Intra-region clock and notification exchange (also sent as heartbeats).
    Beat(Header),
    /// IRT prepare to a participant (Alg. 1 line 15); the header carries the notice.
    Prepare {
        info: TxnInfo,
        ts: Timestamp,
    },
    /// A participant has the transaction durably: an IRT at `proposal` = its timestamp, a
    /// CRT with the participant's anticipated timestamp (Alg. 2 line 20).
    PrepAck {
        id: TxnId,
        proposal: Timestamp,
    },
    /// Coordinator → the manager of a participating region (Alg. 2 line 5). `sent_ns`:
    /// the coordinator's clock when this copy left (a retransmission's delay sample must
    /// not include the wait before it).
    PrepRemote {
        info: TxnInfo,
        src_ts: Timestamp,
        sent_ns: u64,
    },
    /// Manager → the participating nodes of its region (Alg. 2 line 15).
    PrepCrt {
        info: TxnInfo,
        anticipated: Timestamp,
    },
    /// The decision (Alg. 1 line 20, Alg. 2 line 9), resent until acknowledged.
    Commit {
        info: TxnInfo,
        ts: Timestamp,
    },
    CommitAck {
        id: TxnId,
    },
    Abort {
        id: TxnId,
    },
    /// A participant holding an undecided transaction asks its coordinator.
    Query {
        id: TxnId,
    },
    /// A piece's outputs pushed to the replicas of the shards that consume them (§4.1).
    Output {
        id: TxnId,
        piece: u16,
        result: Result<PieceResult, AbortReason>,
    },
    /// A replica waiting for inputs asks the replicas of the shard that produces them.
    InputQuery {
        id: TxnId,
    },
    /// A replica's results for its shard's pieces, to the coordinator.
    Executed {
        id: TxnId,
        shard: u32,
        results: Result<Vec<(u16, PieceResult)>, AbortReason>,
    },
    /// A coordinator that remembers a settled commit answers a participant's query.
    Committed {
        id: TxnId,
        ts: Timestamp,
    },
    /// Edge node → its region's managers, every tick: its installed view (failure
    /// detection, §4.4; a manager learns the current view from these).
    Alive {
        view: View,
    },
    /// Manager → an edge node whose view is stale or that is no longer a member.
    ViewIs {
        view: View,
    },
    /// Manager ↔ manager: the sender acts as the region's manager (backups take over when
    /// these stop, §4.4).
    ManagerBeat,
    /// remove-prep / add-prep (Alg. 3 line 9, Alg. 4 line 7).
    ViewPrep {
        view: View,
        change: Change,
        /// The view id it extends (a member refuses a prep that does not extend its own).
        base: u64,
    },
    /// remove-ack / add-ack (Alg. 3 line 22, Alg. 4 line 16): for a removal, the pending
    /// IRTs of the removed coordinators, the ones aborted here, and this node's promise; for
    /// an addition, this node's lower bound for `ts_ins` (its clock is held below it).
    ViewAck {
        vid: u64,
        pending: Vec<(TxnInfo, Timestamp)>,
        aborted: Vec<TxnId>,
        promise: Timestamp,
    },
    /// A prep refused: the member's installed view and the largest view id it promised.
    ViewNack {
        view: View,
        promised: u64,
    },
    /// remove-commit / add-commit (Alg. 3 line 15, Alg. 4 line 9).
    ViewCommit(Box<ViewCommit>),
    /// A removed node asks to be added back (Alg. 4).
    Join,
    /// Manager → a member replica of the joining node's shard (Alg. 4 line 2).
    TransferCkpt {
        to: NodeId,
    },
    /// Replica → joining node: the checkpoint (Alg. 4 line 12).
    Install(Box<Checkpoint>),
    /// Joining node → manager (Alg. 4 line 13): installed, at `ts_ckpt`.
    InstallOk {
        ts_ckpt: Timestamp,
    },
}

/// A region's membership (§4.4): the edge nodes PCT tracks, at a view id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub vid: u64,
    /// Sorted.
    pub members: Vec<NodeId>,
}

/// What a view change does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    Remove { nodes: Vec<NodeId> },
    Add { node: NodeId, ts_ckpt: Timestamp },
}

/// A committed view change, as members keep it (and forward it to a member that missed it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewCommit {
    pub view: View,
    /// The view id it extends.
    pub base: u64,
    pub change: Change,
    /// Removal: the removed coordinators' IRTs to commit (Alg. 3 line 26).
    pub pending: Vec<(TxnInfo, Timestamp)>,
    /// Removal: their IRTs some member had already aborted (aborted everywhere).
    pub aborted: Vec<TxnId>,
    /// Removal: every promise a member had made (a checkpoint for the removed node's return
    /// is taken only once the source has executed past it). Addition: `ts_ins`.
    pub bound: Timestamp,
}

/// A replica's state for a joining replica of its shard (Alg. 4 line 11).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub frontier: Option<(Timestamp, TxnId)>,
    pub store: Vec<(Key, Value)>,
    pub entries: Vec<EntryRecord>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Advance and announce the dclock to intra-region nodes.
    Heartbeat,
    /// Retransmissions, queries and timeouts.
    Tick,
}

/// Where a participant holds a transaction (see `node.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Undecided; its commit timestamp will be at least `key`.
    Prepared,
    Committed,
}

/// A participant's entry, as persisted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryRecord {
    pub info: TxnInfo,
    pub status: Status,
    /// The readyQ key: an IRT's timestamp, a prepared CRT's anticipated lower bound, a
    /// committed transaction's commit timestamp.
    pub key: Timestamp,
    /// A CRT this node prepared itself: its own anticipation, held in the waitQ.
    pub proposal: Option<Timestamp>,
}

/// A coordinator's decision, kept until every participant acknowledged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub info: TxnInfo,
    pub ts: Timestamp,
}

/// Everything an edge node keeps across a crash (a snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub incarnation: u32,
    pub ceiling_ns: u64,
    pub clock_floor: Timestamp,
    pub frontier: Option<(Timestamp, TxnId)>,
    pub store: Vec<(Key, Value)>,
    pub entries: Vec<EntryRecord>,
    pub decisions: Vec<Decision>,
    /// Notifications not known delivered when the snapshot was taken: (peer, notice).
    pub outbox: Vec<(NodeId, Notice)>,
    pub membership: Membership,
    /// Recently aborted transactions (a removal asks for the removed coordinators').
    pub aborted: Vec<TxnId>,
    /// Recently settled commits this node coordinated (answers to late queries).
    pub settled: Vec<(TxnId, Timestamp)>,
    /// Recently received hand-offs, oldest first (their copies are dropped).
    pub handed_in: Vec<TxnId>,
}

/// An edge node's durable view state (§4.4).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The installed view; `None` until the first change (the initial view: every edge node
    /// of the region, id 0).
    pub view: Option<View>,
    /// The largest view id this node acknowledged a prep for.
    pub promised: u64,
    /// The prep acknowledged at `promised`, not yet committed.
    pub prepared: Option<(View, Change)>,
    /// The last committed change (forwarded to members that missed it).
    pub last: Option<ViewCommit>,
    /// Per removed node, the bound its checkpoint must pass.
    pub bounds: Vec<(NodeId, Timestamp)>,
    /// Removed from the region and not yet added back.
    pub out: bool,
    /// The timestamp this node holds its clock below for an addition (Alg. 4 line 15).
    pub hold: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A new incarnation began (transaction ids never repeat).
    Started {
        incarnation: u32,
    },
    /// No timestamp at or above this was handed out (the dclock survives restarts).
    Ceiling {
        time_ns: u64,
    },
    /// No timestamp at or above this was handed out within a nanosecond of the waitQ's
    /// head (a restarted clock resumes below that head, at least here).
    ClockFloor {
        ts: Timestamp,
    },
    /// An entry entered or changed (prepare, commit).
    Entry(EntryRecord),
    /// An entry was dropped: aborted, or a stale duplicate of an executed one.
    Dropped {
        id: TxnId,
        aborted: bool,
    },
    /// The view state changed (§4.4); boxed, as it is far larger than the other records.
    Membership(Box<Membership>),

    /// A hand-off was received (its copies are dropped, after a restart too).
    HandedIn {
        id: TxnId,
    },
    /// An entry was executed: its writes, in order.
    Executed {
        id: TxnId,
        key: Timestamp,
        writes: Vec<(Key, Value)>,
    },
    /// A coordinator decided to commit (written before the COMMIT messages leave).
    Decided(Decision),
    /// Every participant acknowledged a decision (its timestamp is remembered for late
    /// queries: a replica re-added from a checkpoint may hold it still undecided).
    Settled {
        id: TxnId,
        ts: Timestamp,
    },
    Snapshot(Box<Snapshot>),
}
