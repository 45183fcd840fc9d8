//! What `janus` nodes say to each other (messages), to themselves (timers) and to their
//! durable log (records).

use super::graph::{GraphSnapshot, SlotSet};
use meridian_core::node::Context;
use meridian_core::txn::{AbortReason, Piece, PieceResult};
use meridian_core::{Cluster, NodeId, ShardId, TxnId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The context every handler of this protocol receives.
pub(crate) type Cx<'a> = Context<'a, Msg, Timer, Record>;

/// A Paxos ballot (§5): the original coordinator uses `Ballot::ZERO`; a recovery coordinator
/// takes a round above every ballot it has seen, its node id breaking ties.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ballot {
    pub round: u32,
    pub node: u32,
}

impl Ballot {
    pub const ZERO: Ballot = Ballot { round: 0, node: 0 };
}

/// A transaction's identity and placement: its id and, per shard it touches, its *slot* —
/// the coordinator's per-shard sequence number within one incarnation. Slots are dense
/// (a coordinator assigns one only when it sends the pre-accept), so a replica remembers
/// which of its shard's transactions it executed as a watermark per coordinator
/// incarnation (see `graph.rs` `SlotSet`) and can forget executed transactions' bodies.
///
/// A tag is copied into every dependency list that names its transaction — at a hot key
/// thousands of lists each — so its slots are shared, not copied: 32 bytes per copy.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tag {
    pub id: TxnId,
    pub slots: Arc<[(ShardId, u64)]>,
}

impl Tag {
    /// This transaction's slot on `shard`, if it touches it.
    pub fn slot(&self, shard: ShardId) -> Option<u64> {
        self.slots
            .iter()
            .find(|(s, _)| *s == shard)
            .map(|&(_, n)| n)
    }

    pub fn shards(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.slots.iter().map(|&(s, _)| s)
    }

    /// Whether `nodes` hold a majority of every shard this transaction touches.
    pub fn majority_each(&self, cluster: &Cluster, nodes: &[NodeId]) -> bool {
        self.shards().all(|s| {
            let replicas = cluster.replicas(s);
            let n = nodes.iter().filter(|n| replicas.contains(n)).count();
            n >= crate::kit::quorum::majority(replicas.len())
        })
    }
}

/// One dependency as a replica reports it: the conflicting transaction's tag (its id and
/// shards, so a replica that does not know it can inquire where it lives).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dep {
    pub tag: Tag,
}

/// A replica's executed slots per coordinator incarnation (coordinator, incarnation),
/// sorted by incarnation.
pub type ExecutedSlots = Vec<((NodeId, u64), SlotSet)>;

/// A dependency list, sorted by id, one entry per id. Immutable and shared: at a hot key
/// every transaction depends on every live one there (thousands under overload, Tiga
/// Fig. 9), and one list is held by the vertex, its log record and every copy of the
/// message that carries it — as copies, that grew the simulator past 22 GB.
pub type Deps = Arc<[Dep]>;

/// The sorted set union of dependency lists (the stable sort finds each list's sorted run
/// and merges them in linear time; a peer's list that is not sorted is still merged right).
pub fn union<'a>(lists: impl IntoIterator<Item = &'a [Dep]>) -> Deps {
    let mut all: Vec<Dep> = Vec::new();
    for more in lists {
        all.extend_from_slice(more);
        all.sort_by_key(|d| d.tag.id);
        all.dedup_by_key(|d| d.tag.id);
    }
    all.into()
}

/// Whether two dependency lists name the same transactions (the fast-path test, §4.2).
pub fn same_ids(a: &[Dep], b: &[Dep]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.tag.id == y.tag.id)
}

/// A transaction as every replica of every shard it touches receives it: all its pieces (so
/// any replica can become its recovery coordinator, §5) and where results go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    pub tag: Tag,
    pub pieces: Vec<Piece>,
    pub coordinator: NodeId,
}

/// A replica's knowledge of a transaction, as a recovery coordinator's prepare collects it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Known {
    PreAccepted(Deps),
    Accepted(Ballot, Deps),
    Committed(Deps),
    /// Executed here and forgotten: committed, its dependencies no longer known here.
    Executed,
}

/// A message of `janus`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → every replica of every shard touched (§4.1).
    PreAccept {
        body: Arc<Body>,
    },
    /// `deps`: the transactions conflicting with it that the replica has seen. `ok` false:
    /// the replica promised a higher ballot (a recovery is under way).
    PreAcceptReply {
        id: TxnId,
        ok: bool,
        deps: Deps,
    },
    /// The slow path (§4.2): accept `deps` at `ballot`.
    Accept {
        body: Arc<Body>,
        ballot: Ballot,
        deps: Deps,
    },
    AcceptReply {
        id: TxnId,
        ballot: Ballot,
        ok: bool,
    },
    /// The decision (§4.3): the final dependencies. Also the answer to an `Inquire`.
    Commit {
        body: Arc<Body>,
        deps: Deps,
    },
    /// Recovery (§5): promise `ballot` and say what you know of the transaction (a replica
    /// that never saw it pre-accepts it first).
    Prepare {
        body: Arc<Body>,
        ballot: Ballot,
    },
    PrepareReply {
        id: TxnId,
        ballot: Ballot,
        ok: bool,
        known: Known,
    },
    /// Execution needs a committed transaction's dependencies: send `Commit` if you know
    /// them, `Executed` if you executed it and forgot them.
    Inquire {
        tag: Tag,
    },
    /// The answer to an `Inquire` about a transaction the answerer executed and forgot.
    /// To a replica of the same shard that has not executed it: you lag, fetch my state.
    Executed {
        tag: Tag,
    },
    /// State transfer: a replica that lags (restarted, or met a transaction of its shard
    /// its peers executed and forgot) asks a peer of its shard for its whole state.
    FetchState,
    /// The peer's state: store, executed slots, key table, committed transactions.
    State {
        snapshot: Arc<GraphSnapshot>,
    },
    /// Replica → the other replicas of its shard, every tick: the slots it executed, per
    /// coordinator incarnation. A replica forgets one of its shard's transactions only once
    /// every peer reported it executed, so a peer that lacks it can still learn it by
    /// inquiry (see `Options::keep_max_ns` for the bound).
    ExecutedSlots {
        executed: Arc<ExecutedSlots>,
    },
    /// Replica → coordinator: the results of the transaction's pieces on `shard`.
    Result {
        id: TxnId,
        shard: ShardId,
        outcome: Result<Vec<(u16, PieceResult)>, AbortReason>,
    },
}

/// What a timer carries back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// A replica's periodic duties: recovery of stuck transactions, inquiries, forgetting.
    Tick,
    /// A coordinator's retransmission of `id`'s current phase.
    Retry(TxnId),
    /// A coordinator stops waiting for the fast quorum of `id`.
    FastWait(TxnId),
}

/// A durable record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    /// A coordinator's boot: its incarnation (transaction ids and slots never repeat).
    Started {
        incarnation: u32,
    },
    /// A replica pre-accepted a transaction with these dependencies (promising `ballot`).
    PreAccepted {
        body: Arc<Body>,
        deps: Deps,
        ballot: Ballot,
    },
    Promised {
        id: TxnId,
        ballot: Ballot,
    },
    Accepted {
        body: Arc<Body>,
        ballot: Ballot,
        deps: Deps,
    },
    Committed {
        body: Arc<Body>,
        deps: Deps,
    },
    /// A replica executed its shard's pieces of `id`, writing `writes`.
    Executed {
        id: TxnId,
        writes: Vec<(meridian_core::txn::Key, meridian_core::txn::Value)>,
    },
    /// Everything a replica knows, subsuming every earlier record.
    Snapshot(Box<GraphSnapshot>),
}
