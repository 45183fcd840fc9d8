//! Messages, timers and durable records of `mvto-hlc`.

use crate::kit::hlc::HlcTs;
use meridian_core::txn::{AbortReason, Key, Piece, PieceResult, Value};
use meridian_core::{NodeId, ShardId};
use serde::{Deserialize, Serialize};

/// A transaction's identity: its coordinator, that coordinator's incarnation and a
/// sequence number. Unlike K2, the timestamp is not the identity: it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnRef {
    pub coordinator: NodeId,
    pub incarnation: u32,
    pub seq: u64,
}

/// What every request about a transaction carries: who it is, when it started (its
/// priority for wound-wait and its age) and where its record lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMeta {
    pub id: TxnRef,
    /// The HLC timestamp taken at the start (CockroachDB's original timestamp).
    pub orig: HlcTs,
    /// The primary holding the transaction record (the first written shard's).
    pub anchor: NodeId,
}

/// A piece evaluated at a primary: reads at `read_ts`, intents at `write_ts` or above.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Eval {
    pub txn: TxnMeta,
    /// Unique per attempt: a piece resent after a timestamp move gets a new one.
    pub step: u32,
    pub piece: Piece,
    pub inputs: Vec<(u16, PieceResult)>,
    pub read_ts: HlcTs,
    pub write_ts: HlcTs,
    /// The upper end of the uncertainty interval (`orig + max_offset`).
    pub limit: HlcTs,
}

/// How a primary answered an `Eval`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum EvalOutcome {
    /// Evaluated; `write_ts` is where its intents were laid (None: it wrote nothing).
    Done {
        result: PieceResult,
        write_ts: Option<HlcTs>,
        /// The keys it wrote.
        written: Vec<Key>,
    },
    /// Not evaluated: a value in the uncertainty interval, or newer than the read
    /// timestamp on a key it read and writes. Move to `at`, refresh, resend.
    Retry {
        at: HlcTs,
    },
    Failed(AbortReason),
}

/// A written key as staged: its shard and the step that last wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedWrite {
    pub shard: ShardId,
    pub key: Key,
    pub step: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → primary.
    Eval(Box<Eval>),
    /// Primary → coordinator; `now` is the primary's HLC.
    Evaluated {
        txn: TxnRef,
        step: u32,
        outcome: EvalOutcome,
        now: HlcTs,
    },
    /// Coordinator → primary: read refresh of `keys` from `from` to `to`.
    Refresh {
        txn: TxnRef,
        id: u32,
        keys: Vec<Key>,
        from: HlcTs,
        to: HlcTs,
    },
    /// Primary → coordinator.
    Refreshed {
        txn: TxnRef,
        id: u32,
        shard: ShardId,
        ok: bool,
    },
    /// Coordinator → anchor: parallel commit's STAGING record at `ts` with every write.
    Stage {
        txn: TxnMeta,
        ts: HlcTs,
        writes: Vec<StagedWrite>,
    },
    /// Anchor → coordinator: the record is STAGING at `ts` (ok), COMMITTED at `ts` (ok),
    /// or ABORTED (not ok).
    Staged { txn: TxnRef, ts: HlcTs, ok: bool },
    /// Coordinator → anchor: the transaction is implicitly committed at `ts`; make it
    /// explicit and resolve its intents.
    Commit { txn: TxnRef, ts: HlcTs },
    /// Coordinator → anchor: abort (a STAGING record is recovered instead).
    Abort {
        txn: TxnMeta,
        participants: Vec<ShardId>,
    },
    /// Anchor → coordinator: the decision (answer to `Abort`).
    Decided {
        txn: TxnRef,
        committed: bool,
        ts: HlcTs,
    },
    /// Primary → anchor: a request waits on `txn`'s intent; `abort` wounds it (the
    /// pusher is older).
    Push { txn: TxnMeta, abort: bool },
    /// Anchor → primary: `txn` is decided; `ack` asks for `Resolved`.
    Resolve {
        txn: TxnRef,
        committed: bool,
        ts: HlcTs,
        ack: bool,
    },
    /// Primary → anchor.
    Resolved { txn: TxnRef, shard: ShardId },
    /// Anchor → primary (status recovery): are these writes present at or below `ts`?
    /// Any that is not is prevented from ever being.
    QueryIntents {
        txn: TxnRef,
        ts: HlcTs,
        writes: Vec<(Key, u32)>,
    },
    /// Primary → anchor.
    IntentsQueried {
        txn: TxnRef,
        ts: HlcTs,
        shard: ShardId,
        found: bool,
    },
    /// ClosedTS, replica → primary: send what follows entry `after` of `stream` (a
    /// stream the primary does not hold, or has trimmed past, gets a full snapshot).
    Pull { stream: u64, after: u64 },
    /// ClosedTS, primary → replica at its next closing: the versions committed after
    /// entry `after` up to `upto` (everything, if `full`), every intent it holds now (key
    /// and timestamp), and its closed timestamp now.
    Replicate {
        stream: u64,
        after: u64,
        upto: u64,
        full: bool,
        versions: Vec<RepVersion>,
        intents: Vec<(Key, HlcTs)>,
        closed: HlcTs,
    },
    /// ClosedTS, coordinator → the nearest copy of a shard: a read-only piece at `ts`,
    /// served once the copy's closed timestamp covers `ts` and no intent at or below it
    /// is on a key it reads. Answered with `Evaluated`.
    RepRead {
        txn: TxnRef,
        step: u32,
        ts: HlcTs,
        piece: Piece,
        inputs: Vec<(u16, PieceResult)>,
    },
}

#[derive(Clone, Debug)]
pub enum Timer {
    CoordinatorTick,
    PrimaryTick,
    /// ClosedTS: a primary closes a timestamp and answers its replicas' pulls.
    CloseTick,
    /// ClosedTS: a replica's pull is sent again if unanswered.
    FollowerTick,
}

/// ClosedTS: a committed version as replicated (`committed_ns`: the primary's clock when
/// it resolved the intent; 0 in a full snapshot, which is not measured).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepVersion {
    pub key: Key,
    pub ts: HlcTs,
    pub value: Value,
    pub committed_ns: u64,
}

/// Intents laid by one evaluation, persisted before the reply.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntentRecord {
    pub txn: TxnMeta,
    pub step: u32,
    pub ts: HlcTs,
    pub writes: Vec<(Key, Value)>,
    pub result: PieceResult,
}

/// A transaction record's durable state at its anchor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Staging { ts: HlcTs, writes: Vec<StagedWrite> },
    Committed { ts: HlcTs },
    Aborted,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TxnRecord {
    pub txn: TxnMeta,
    pub status: Status,
    /// Shards still to acknowledge the resolution of a decided record.
    pub unacked: Vec<ShardId>,
}

/// A live transaction's intents and results on a primary, in a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveSnapshot {
    pub txn: TxnMeta,
    /// Step, result, write timestamp, keys written.
    pub results: Vec<(u32, PieceResult, HlcTs, Vec<Key>)>,
    /// Key, value, intent timestamp, step.
    pub intents: Vec<(Key, Value, HlcTs, u32)>,
}

/// One key's committed versions in a checkpoint (oldest first).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeySnapshot {
    pub key: Key,
    pub pruned_below: HlcTs,
    pub versions: Vec<(HlcTs, Value)>,
}

/// A primary's state as of a checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Snapshot {
    pub keys: Vec<KeySnapshot>,
    pub live: Vec<LiveSnapshot>,
    pub finished: Vec<(TxnRef, bool, HlcTs, u64)>,
    pub records: Vec<TxnRecord>,
    pub floor: HlcTs,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Record {
    /// Coordinator: booted (its incarnation tags its transactions).
    Started { incarnation: u32 },
    /// Primary: intents laid.
    Intents(Box<IntentRecord>),
    /// Primary: a transaction's intents resolved (committed at `ts`, or dropped).
    Finalized {
        txn: TxnRef,
        committed: bool,
        ts: HlcTs,
        orig_wall_ns: u64,
    },
    /// Primary: reads (and preventions) up to this timestamp may have been served.
    Floor(HlcTs),
    /// Anchor: a transaction record written or changed.
    TxnRecord(Box<TxnRecord>),
    /// Anchor: `shard` resolved `txn`.
    Acked { txn: TxnRef, shard: ShardId },
    /// Primary: everything up to here.
    Checkpoint(Box<Snapshot>),
}
