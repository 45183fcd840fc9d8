//! Tiga's messages, timers and durable records.

use super::server::Footprint;
use super::view::{Status, View};
use super::TigaNode;
use crate::raft_group::{RaftMsg, RaftRecord};
use meridian_core::node::Ctx;
use meridian_core::txn::{AbortReason, Op, Operand, Piece, PieceBody, PieceResult};
use meridian_core::{NodeId, ShardId, ShardList, Timestamp, TxnId};
use meridian_store::{Hash160, LogSnapshot, StoreCheckpoint};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A transaction with its current timestamp: every piece of the client's transaction (with
/// its index), shared, and every involved shard. Every shard gets the whole transaction so
/// that a leader can complete a multicast its coordinator did not (§4 coordinator failure,
/// Appendix B) and a view change can add a transaction a shard lost (§4 step ④).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TxnBody {
    pub id: TxnId,
    pub ts: Timestamp,
    pub shards: ShardList,
    pub pieces: Arc<Vec<(u16, Piece)>>,
    /// Decided aborted: some involved shard's pieces aborted at the agreed timestamp, so
    /// no shard keeps its writes (a server sets it when the decision is known; it travels
    /// with the entry through log syncs, reports, verification and state transfers).
    #[serde(default)]
    pub aborted: bool,
    /// The commit/abort decision is known here (released by a leader, synced by a
    /// follower). A view change aborts a recovered entry that [`TxnBody::may_abort`] and
    /// that no server knew decided: nothing depended on its decision (see the module doc).
    #[serde(default)]
    pub decided: bool,
}

impl TxnBody {
    /// The pieces `shard` executes, in order.
    pub fn pieces_on(&self, shard: ShardId) -> impl Iterator<Item = &(u16, Piece)> {
        self.pieces.iter().filter(move |(_, p)| p.shard == shard)
    }

    pub fn involves(&self, shard: ShardId) -> bool {
        self.shards.contains(&shard)
    }

    /// Whether some piece may abort on its shard (a stored procedure, `add`'s type check,
    /// a validation op, a value dependency): only then can the shards' votes differ.
    pub fn may_abort(&self) -> bool {
        self.pieces.iter().any(|(_, p)| match &p.body {
            PieceBody::Procedure(_) => true,
            PieceBody::Ops(ops) => ops.iter().any(|op| match op {
                Op::Add(..) | Op::Check(..) => true,
                Op::Put(_, o) | Op::Append(_, o) => matches!(o, Operand::Input { .. }),
                Op::Get(_) => false,
            }),
        })
    }

    /// Whether the commit/abort decision changes the store and may go either way by
    /// design: it writes, and a piece is a stored procedure (a user abort) or validates
    /// (a decomposed commit). Such a transaction's outcome is reported only once the
    /// decision is on f + 1 replicas of every shard (slow path), and its decision is part
    /// of later fast-reply hashes, so a view change never loses a decision anything
    /// depended on. Type errors (`add` on a non-integer, a bad value dependency) are left
    /// out: they keep the fast path (see the module doc's limits).
    pub fn decision_matters(&self) -> bool {
        let by_design = self.pieces.iter().any(|(_, p)| match &p.body {
            PieceBody::Procedure(_) => true,
            PieceBody::Ops(ops) => ops.iter().any(|op| matches!(op, Op::Check(..))),
        });
        by_design && self.pieces.iter().any(|(_, p)| !p.is_read_only())
    }
}

/// A cut of a release stream (§4 checkpoints): the store state after executing exactly
/// its first `pos` entries, every one of them at or below `store.at`, every later entry
/// above it (see the module doc, "Log truncation").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub pos: u64,
    pub store: StoreCheckpoint,
}

impl Checkpoint {
    /// The empty stream's checkpoint: position 0, an empty store.
    pub fn empty() -> Checkpoint {
        Checkpoint {
            pos: 0,
            store: StoreCheckpoint {
                at: Timestamp::ZERO,
                versions: Vec::new(),
            },
        }
    }

    /// Every entry it covers is at or below this timestamp; every later one above.
    pub fn ts(&self) -> Timestamp {
        self.store.at
    }
}

/// A server's log list at a view change (Algorithm 5 `send-view-change`): the entries
/// consistent with its leader (`synced`, in the leader's release order; for a leader, its
/// whole release stream) and its other entries — fast-released ones and its emptied queue —
/// each with the timestamp it holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ViewChangeReport {
    pub g_view: u64,
    pub shard: ShardId,
    pub replica: u32,
    /// The last g-view in which this server was NORMAL.
    pub last_normal_view: u64,
    /// The sender's latest checkpoint; `synced` starts at its position.
    pub checkpoint: Checkpoint,
    pub synced: Vec<TxnBody>,
    pub others: Vec<TxnBody>,
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
    /// The sender's g-view: a coordinator counts replies of its own view only.
    pub g_view: u64,
    /// The leader revoked an earlier execution and executed again (§3.5 case 3).
    pub reexecuted: bool,
}

/// One notification of [`Msg::Notes`]: the fields of a [`Msg::Notify`] that differ per
/// transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub txn: TxnId,
    pub ts: Timestamp,
    pub sealed: bool,
    pub echo: bool,
    pub abort: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → server OWD probe, stamped with the coordinator's local clock. It
    /// also carries the coordinator's *finished watermark*: every transaction of this
    /// coordinator whose id's `seq` is below `finished_below` has its outcome (committed,
    /// aborted or unknown), so the coordinator will not retransmit it or ask for its
    /// replies again, and a server may drop what it kept only to answer it (GC, `slim`).
    Probe {
        sent_ns: u64,
        #[serde(default)]
        finished_below: u64,
    },
    /// Server → coordinator: the probe's stamp and the server's local clock at receipt.
    ProbeReply { sent_ns: u64, server_ns: u64 },
    /// Coordinator → every replica of every involved shard (§3.1).
    Submit(Box<TxnBody>),
    /// Several transactions from one coordinator to one server: what one batch of the
    /// coordinator's events submitted (a single one goes as [`Msg::Submit`]).
    Submits(Vec<TxnBody>),
    /// Shared (an `Arc`): the server keeps the reply it sent to repeat it on a
    /// retransmission, and the coordinator keeps the leader's, so in process one reply is
    /// built once and never deep-copied; on the wire it is the plain struct.
    FastReply(Arc<FastReply>),
    /// Several fast replies from one server to one coordinator: what one batch of the
    /// server's events produced for it (a single one goes as [`Msg::FastReply`]). Each
    /// carries its own g-view.
    FastReplies(Vec<Arc<FastReply>>),
    /// Follower → coordinator: the entry is consistent with the leader's log (§3.7).
    SlowReply {
        txn: TxnId,
        shard: ShardId,
        replica: u32,
        ts: Timestamp,
        g_view: u64,
    },
    /// Coordinator → follower (Appendix E, `slow_replies=pull`): send a slow reply for each
    /// of `txns` once it is synced (now if it already is).
    SlowInquiry { shard: ShardId, txns: Vec<TxnId> },
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
        /// With `sealed`: this shard's pieces aborted when executed at `ts` (its vote; a
        /// leader releases `txn` aborted if any involved leader's vote at the agreed
        /// timestamp is abort).
        abort: bool,
        g_view: u64,
    },
    /// Leader → leader: several notifications at once, all from `shard` in `g_view` (a
    /// leader sends what one batch of its events produced to each other leader together;
    /// a single one goes as [`Msg::Notify`]).
    Notes {
        shard: ShardId,
        notes: Vec<Notice>,
        g_view: u64,
    },
    /// Leader → follower: entries of the leader's release stream from position `from`,
    /// and the leader's commit-point (§3.7).
    LogSync {
        shard: ShardId,
        from: u64,
        entries: Vec<(TxnId, Timestamp)>,
        /// The ids among `entries` that were released aborted (followers skip them).
        aborted: Vec<TxnId>,
        commit_point: u64,
        /// The leader's GC floor: nothing it will ever send is at or below it.
        gc_floor: Timestamp,
        /// The leader's latest cut (position, timestamp): a follower checkpoints and
        /// truncates there once it has executed that far.
        cut: (u64, Timestamp),
        g_view: u64,
    },
    /// Leader → the other leaders, twice a second: its GC floor. A leader truncates only
    /// below every shard's floor (see the module doc, "Log truncation").
    Floor {
        shard: ShardId,
        floor: Timestamp,
        g_view: u64,
    },
    /// Follower → leader: periodic sync-point report (§3.7).
    SyncReport {
        shard: ShardId,
        sync_point: u64,
        g_view: u64,
    },
    /// Follower → leader: the body of an entry this follower never received (§3.7 (2)).
    Fetch { txn: TxnId, g_view: u64 },
    /// Leader → follower: the fetched body.
    FetchReply(Box<TxnBody>),

    // ---- §4: view manager, view change, rejoin ----
    /// View manager replica ↔ replica.
    Raft(RaftMsg),
    /// Server → view manager, every `heartbeat_ms`.
    Heartbeat { g_view: u64, status: Status },
    /// Anyone → a view manager replica: which view is installed?
    ViewInquiry,
    /// View manager → servers and coordinators (Algorithm 4 `view-change-req`), and the
    /// answer to an inquiry.
    NewView(View),
    /// Server → its shard's new leader (Algorithm 5 `view-change`).
    ViewChangeReport(Box<ViewChangeReport>),
    /// New leader → the other new leaders (Algorithm 5 `timestamp-verification`): every
    /// entry of the sender's rebuilt log (round 0) or of its verified log (round 1, see
    /// `server/view_change.rs`) that involves the receiver's shard.
    Verify {
        g_view: u64,
        shard: ShardId,
        round: u8,
        entries: Vec<TxnBody>,
        /// Per entry: it is in the sender's part (a) (released by a leader at that
        /// timestamp, so agreed). Round 0 only; empty in round 1.
        agreed: Vec<bool>,
        /// Sent in answer to a leader that had finished: never answered again.
        answer: bool,
    },
    /// New leader → followers (Algorithm 5 `start-view`): the new log list in order.
    StartView {
        g_view: u64,
        /// The store state below `log`; `log` starts at its position.
        checkpoint: Box<Checkpoint>,
        log: Vec<TxnBody>,
    },
    /// Rejoining server → its leader (Algorithm 6 `state-transfer-req`).
    StateTransferReq { g_view: u64 },
    /// Leader → rejoining server: the release stream, the commit-point, and the entries the
    /// leader holds but has not released yet (which it may have answered fast).
    StateTransfer {
        g_view: u64,
        /// The leader's latest checkpoint; `log` starts at its position.
        checkpoint: Box<Checkpoint>,
        /// The leader's ordered log above the checkpoint's timestamp (`log`'s entries)
        /// with what the truncated entries contributed to its hashes, so the joiner's
        /// fast-reply hashes (Appendix D) agree with the leader's.
        hashes: Box<LogSnapshot<Footprint>>,
        log: Vec<TxnBody>,
        pending: Vec<TxnBody>,
        commit_point: u64,
    },
}

impl Msg {
    /// The g-view a server-to-server or server-to-coordinator message was sent in.
    pub fn g_view(&self) -> Option<u64> {
        match self {
            Msg::FastReply(r) => Some(r.g_view),
            Msg::SlowReply { g_view, .. }
            | Msg::Notify { g_view, .. }
            | Msg::Notes { g_view, .. }
            | Msg::LogSync { g_view, .. }
            | Msg::SyncReport { g_view, .. }
            | Msg::Fetch { g_view, .. }
            | Msg::Floor { g_view, .. } => Some(*g_view),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Timer {
    /// Coordinator: send probes.
    Probe,
    /// Coordinator: retransmissions and timeouts.
    CoordTick,
    /// Coordinator: slow-reply inquiries (Appendix E).
    SlowInquiry,
    /// Server: the earliest queued timestamp may have expired. `at_ns` is the local-clock
    /// instant it was set for: only the server's tracked wake-up clears the tracking, so a
    /// superseded or deferred one cannot start a second chain of wake-ups.
    Wake { at_ns: u64 },
    /// Server: housekeeping.
    Tick,
    /// View manager: a Raft tick and failure detection.
    VmTick,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    /// A coordinator booted: the number of these records is its incarnation, so its
    /// transaction ids never repeat after a restart.
    CoordinatorStarted,
    /// A server booted. With `durability=diskless` a server that finds one at build time
    /// restarted, lost its state (as in the report's diskless design) and rejoins through
    /// a state transfer (Algorithm 6); durable servers rebuild their log list from the
    /// records below.
    ServerStarted,
    /// A view manager replica's Raft state.
    Raft(RaftRecord),
    /// Durable server, written as a checkpoint (it replaces every earlier record): its view
    /// and its whole log list as a view-change report would carry it (the report's
    /// `g_view` is the view's). Written when it sends its report, when it becomes NORMAL
    /// in a view (start-view, state transfer) and at a cut.
    ServerSnapshot {
        view: View,
        report: Box<ViewChangeReport>,
    },
    /// Durable server: it holds `body` at `body.ts` outside its synced list (a follower's
    /// fast release, a leader's sealed entry, or its new timestamp when moved); a later
    /// record of the same id supersedes it. Written before the fast reply or sealed
    /// notification it vouches for leaves.
    Held(Box<TxnBody>),
    /// Durable server: position `pos` of its synced list (a leader's release stream, a
    /// follower's synced prefix), with its timestamp and decision. Written before the log
    /// sync, slow reply or sync-point report that depends on it.
    Synced { pos: u64, body: Box<TxnBody> },
    /// Durable server: position `pos` of its synced list is `id`, whose body a [`Record::Held`]
    /// since the last [`Record::ServerSnapshot`] already carries, now at `ts` and decided
    /// (`aborted` or committed). The same as [`Record::Synced`] without writing the body a
    /// second time, which is what the record costs (its pieces' keys and values). Last in
    /// the enum so that earlier records keep their encoding.
    SyncedHeld {
        pos: u64,
        id: TxnId,
        ts: Timestamp,
        aborted: bool,
    },
}

/// Most transactions in one [`Msg::Submits`], notifications in one [`Msg::Notes`] and
/// replies in one [`Msg::FastReplies`]: [`send_grouped`] splits longer runs, and a
/// receiver drops a longer batch as malformed.
pub(crate) const SUBMITS_BATCH_MAX: usize = 512;
pub(crate) const NOTES_BATCH_MAX: usize = 512;
pub(crate) const FAST_REPLIES_BATCH_MAX: usize = 512;

/// Sends `out`'s items, one message per destination and run of at most `max` items (in the
/// order queued per destination): `one` builds the message of a single item, `many` of
/// several. Empties `out`, keeping its allocation. This is how a node batches what one
/// batch of its events produced (`on_batch_end`).
pub(crate) fn send_grouped<T>(
    ctx: &mut Ctx<'_, TigaNode>,
    out: &mut Vec<(NodeId, T)>,
    max: usize,
    one: impl Fn(T) -> Msg,
    many: impl Fn(Vec<T>) -> Msg,
) {
    assert!(max >= 1);
    out.sort_by_key(|(to, _)| *to); // stable: each destination's items stay in order
    let mut rest = out.drain(..).peekable();
    while let Some((to, first)) = rest.next() {
        if rest.peek().is_none_or(|(next, _)| *next != to) {
            ctx.send(to, one(first)); // no batch vector for a lone item, the common case
            continue;
        }
        let mut batch = vec![first];
        while batch.len() < max {
            match rest.next_if(|(next, _)| *next == to) {
                Some((_, item)) => batch.push(item),
                None => break,
            }
        }
        let msg = if batch.len() == 1 {
            one(batch.pop().expect("one item"))
        } else {
            many(batch)
        };
        ctx.send(to, msg);
    }
}
