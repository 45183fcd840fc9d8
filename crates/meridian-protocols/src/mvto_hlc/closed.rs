//! ClosedTS (K2 §6.1, §7.4; CockroachDB's closed timestamps and follower reads), the
//! primary's side and the read both kinds of copy serve.
//!
//! Every `closed_ts_interval` a primary *closes* `HLC.now − closed_ts_lag`: it promises
//! that no intent will ever be laid at or below it. The promise is kept the way
//! CockroachDB keeps it, as a timestamp-cache floor: the store's floor moves up to the
//! closed timestamp (reserved in the log first, so a restart keeps it), so a later write
//! lands above it — pushed, which costs its transaction a read refresh at commit, and an
//! abort when the refresh fails (§6.1's Limitation: short intervals raise aborts).
//!
//! Intents laid before the closing may still commit at or below it. A copy therefore
//! serves a read at `ts` once `ts ≤ closed` *and* no intent at or below `ts` is on a key
//! the read touches (§6.1: "the slow commit transaction may block replica readers who
//! want to access the undetermined keys but will not affect others"); the intent's
//! resolution arrives with a later replication and frees the read.
//!
//! Replication is pulled: a replica holds one pull (`Pull { stream, after }`) that the
//! primary answers at its next closing with the versions committed since, every intent
//! it holds and the closed timestamp — one consistent cut of the primary's state. The
//! log of committed versions is volatile and bounded; a restarted primary starts a new
//! stream, and a replica on an unknown stream, or behind what the log still holds, gets a
//! full snapshot.

use super::options::Options;
use super::store::Store;
use super::wire::{EvalOutcome, Msg, RepVersion, Timer, TxnRef};
use super::MvtoNode;
use crate::kit::hlc::HlcTs;
use crate::kit::replica_reads::{run_read_only, HeldReads, Offered, RepLog};
use meridian_core::node::Ctx;
use meridian_core::txn::{AbortReason, Key, KvAccess, Piece, PieceResult, Procedures, Value};
use meridian_core::NodeId;

/// Committed versions a primary keeps for its replicas; a replica further behind gets a
/// full snapshot.
const MAX_LOG: usize = 1 << 16;

/// A follower read waiting at a copy.
#[derive(Clone, Debug)]
pub struct FollowerRead {
    pub from: NodeId,
    pub txn: TxnRef,
    pub step: u32,
    pub ts: HlcTs,
    pub piece: Piece,
    pub inputs: Vec<(u16, PieceResult)>,
}

/// What a copy knows when it decides about a follower read.
pub struct ClosedCopy<'a> {
    pub store: &'a Store,
    pub closed: HlcTs,
    /// The timestamp of the intent on a key, if one is held.
    pub intent: &'a dyn Fn(&Key) -> Option<HlcTs>,
    pub unsafe_serve_above_closed: bool,
}

impl ClosedCopy<'_> {
    /// Whether `read` may be served now: its timestamp closed, no undetermined write at
    /// or below it on its keys.
    pub fn ready(&self, read: &FollowerRead) -> bool {
        if self.unsafe_serve_above_closed {
            // THE DELIBERATE BUG (test-only): serve whatever is here now.
            return true;
        }
        read.ts <= self.closed
            && read
                .piece
                .read_keys()
                .iter()
                .all(|k| (self.intent)(k).is_none_or(|ts| ts > read.ts))
    }

    /// Runs `read` (ready) against the committed versions at its timestamp.
    pub fn run(&self, read: &FollowerRead, procedures: &Procedures) -> EvalOutcome {
        let below_gc = read
            .piece
            .read_keys()
            .iter()
            .any(|k| self.store.key(k).is_some_and(|s| read.ts < s.pruned_below));
        if below_gc && read.piece.is_read_only() {
            return EvalOutcome::Failed(AbortReason::Conflict);
        }
        let mut access = AtTs {
            store: self.store,
            ts: read.ts,
        };
        match run_read_only(&read.piece, &read.inputs, procedures, &mut access) {
            Ok(result) => EvalOutcome::Done {
                result,
                write_ts: None,
                written: Vec::new(),
            },
            Err(reason) => EvalOutcome::Failed(reason),
        }
    }

    /// Offers `read` to `held`: served now if ready, else held (bounded).
    pub fn offer(
        &self,
        ctx: &mut Ctx<'_, MvtoNode>,
        held: &mut HeldReads<FollowerRead>,
        read: FollowerRead,
        procedures: &Procedures,
    ) {
        let same = |a: &FollowerRead, b: &FollowerRead| a.txn == b.txn && a.step == b.step;
        match held.offer(read, |r| self.ready(r), same) {
            Offered::Serve(read) => self.answer(ctx, &read, procedures),
            Offered::Held | Offered::Duplicate => {}
            Offered::Overflow(read) => {
                ctx.count("mvto_hlc.follower_read_overflow", 1);
                let outcome = EvalOutcome::Failed(AbortReason::Conflict);
                answer(ctx, &read, outcome);
            }
        }
    }

    /// Serves every held read that is now ready.
    pub fn release(
        &self,
        ctx: &mut Ctx<'_, MvtoNode>,
        held: &mut HeldReads<FollowerRead>,
        procedures: &Procedures,
    ) {
        for read in held.release(|r| self.ready(r)) {
            self.answer(ctx, &read, procedures);
        }
    }

    fn answer(&self, ctx: &mut Ctx<'_, MvtoNode>, read: &FollowerRead, procedures: &Procedures) {
        ctx.count("mvto_hlc.follower_reads", 1);
        let outcome = self.run(read, procedures);
        answer(ctx, read, outcome);
    }
}

fn answer(ctx: &mut Ctx<'_, MvtoNode>, read: &FollowerRead, outcome: EvalOutcome) {
    // `now` only feeds the coordinator's HLC: the copy's clock reading.
    let now = HlcTs {
        wall_ns: ctx.now_ns(),
        logical: 0,
    };
    let (txn, step) = (read.txn, read.step);
    let msg = Msg::Evaluated {
        txn,
        step,
        outcome,
        now,
    };
    ctx.send(read.from, msg);
}

/// Committed versions at or below a timestamp (no intents: `ready` waited them out).
struct AtTs<'a> {
    store: &'a Store,
    ts: HlcTs,
}

impl KvAccess for AtTs<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        self.store.key(key)?.value_at(self.ts)
    }

    fn put(&mut self, _key: Key, _value: Value) {
        // `run` refuses pieces that write.
    }
}

/// A primary's closed timestamp, replication log and held pulls and reads.
#[derive(Debug)]
pub struct Closer {
    pub closed: HlcTs,
    /// Committed versions since this run's start, and the replicas' held pulls.
    log: RepLog<RepVersion>,
    pub reads: HeldReads<FollowerRead>,
}

impl Closer {
    pub fn new(opts: &Options, replicas: impl IntoIterator<Item = NodeId>) -> Closer {
        Closer {
            closed: HlcTs::default(),
            log: RepLog::new(replicas, MAX_LOG),
            reads: HeldReads::new(opts.max_waiting_per_node),
        }
    }

    pub fn start(&mut self, ctx: &mut Ctx<'_, MvtoNode>, opts: &Options) {
        self.log.start(ctx.now_ns());
        ctx.set_timer(opts.closed_ts_interval_ns, Timer::CloseTick);
    }

    /// A version just committed here.
    pub fn committed(&mut self, key: Key, ts: HlcTs, value: Value, committed_ns: u64) {
        self.log.push(RepVersion {
            key,
            ts,
            value,
            committed_ns,
        });
    }

    /// A replica's pull: held until the next closing.
    pub fn on_pull(&mut self, from: NodeId, stream: u64, after: u64) {
        self.log.on_pull(from, stream, after);
    }

    /// Answers every held pull with the state now (after a closing).
    pub fn answer_pulls(&mut self, ctx: &mut Ctx<'_, MvtoNode>, store: &Store) {
        if !self.log.has_pulls() {
            return;
        }
        let intents: Vec<(Key, HlcTs)> = store
            .keys
            .iter()
            .filter_map(|(k, s)| s.intent.as_ref().map(|i| (k.clone(), i.ts)))
            .collect();
        for a in self.log.answers(|| full_snapshot(store)) {
            let msg = Msg::Replicate {
                stream: a.stream,
                after: a.after,
                upto: a.upto,
                full: a.full,
                versions: a.versions,
                intents: intents.clone(),
                closed: self.closed,
            };
            ctx.send(a.replica, msg);
        }
    }
}

/// Every committed version of `store` (not measured: `committed_ns` 0).
fn full_snapshot(store: &Store) -> Vec<RepVersion> {
    let mut versions = Vec::new();
    for (key, state) in &store.keys {
        for (ts, value) in &state.versions {
            versions.push(RepVersion {
                key: key.clone(),
                ts: *ts,
                value: value.clone(),
                committed_ns: 0,
            });
        }
    }
    versions
}
