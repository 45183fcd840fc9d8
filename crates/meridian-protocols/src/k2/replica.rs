//! K2-VCR at a read replica (§6.2, §6.4): replays the committed versions of its shard's
//! primary epoch by epoch, and serves read-only pieces in the read view of an epoch once
//! that epoch is complete here.
//!
//! Replication is pulled and held: the replica sends `Pull { after }` (its last complete
//! epoch); the primary answers as soon as it has completed a later epoch with every
//! version committed in between, so a version travels once it is final, and a lost
//! message, a restarted primary or a restarted replica (which keeps nothing durable and
//! pulls from zero) only costs a retry. Versions arrive epoch-complete, so a replica
//! never holds an undetermined write and never pushes (the paper ships intents and lets
//! replica readers PUSHWS them; here a primary does not complete an epoch while an
//! intent it holds may still commit in it, see `DataNode::complete_epoch`).
//!
//! The read view of epoch `X` is every version whose commit epoch is at most `X`, the
//! newest by timestamp per key (§6.4's view, without its timestamp filter: a writer
//! whose timestamp is above the reader's but whose epoch is not is in the view, which
//! keeps every view closed under the order in which a key's writers read each other).

use super::options::Options;
use super::wire::{Msg, Timer, TxnTs};
use super::write_stream::{KeyState, Version};
use super::K2Node;
use crate::kit::replica_reads::{
    record_delay, run_read_only, DelayCounters, HeldReads, Offered, Puller,
};
use meridian_core::node::Ctx;
use meridian_core::txn::{AbortReason, Key, KvAccess, Piece, PieceResult, Procedures, Value};
use meridian_core::{NodeId, Timestamp};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A read-only piece waiting for its epoch.
#[derive(Clone, Debug)]
pub struct RepRead {
    pub from: NodeId,
    pub txn: TxnTs,
    pub step: u16,
    pub epoch: u64,
    pub piece: Piece,
    pub inputs: Vec<(u16, PieceResult)>,
}

/// Replica reads held until their epoch is complete (bounded: `max_waiting_per_node`).
#[derive(Debug)]
pub struct ReadQueue {
    held: HeldReads<RepRead>,
}

impl ReadQueue {
    pub fn new(opts: &Options) -> ReadQueue {
        ReadQueue {
            held: HeldReads::new(opts.max_waiting_per_node),
        }
    }

    /// Serves `read` now if `complete` covers it, else holds it.
    pub fn offer(&mut self, ctx: &mut Ctx<'_, K2Node>, view: &ReadView<'_>, read: RepRead) {
        let complete = view.complete;
        let same = |a: &RepRead, b: &RepRead| a.txn == b.txn && a.step == b.step;
        match self.held.offer(read, |r| r.epoch <= complete, same) {
            Offered::Serve(read) => serve(ctx, view, read),
            Offered::Held | Offered::Duplicate => {}
            Offered::Overflow(read) => {
                ctx.count("k2.replica_read_overflow", 1);
                let outcome = Err(AbortReason::Conflict);
                let (txn, step) = (read.txn, read.step);
                let epoch = 0;
                let msg = Msg::Executed {
                    txn,
                    step,
                    outcome,
                    epoch,
                };
                ctx.send(read.from, msg);
            }
        }
    }

    /// Serves what `view.complete` now covers.
    pub fn release(&mut self, ctx: &mut Ctx<'_, K2Node>, view: &ReadView<'_>) {
        for read in self.held.release(|r| r.epoch <= view.complete) {
            serve(ctx, view, read);
        }
    }
}

/// What a replica read runs against: a store and its last complete epoch.
pub struct ReadView<'a> {
    pub keys: &'a FxHashMap<Key, KeyState>,
    pub complete: u64,
    pub procedures: &'a Procedures,
}

fn serve(ctx: &mut Ctx<'_, K2Node>, view: &ReadView<'_>, read: RepRead) {
    ctx.count("k2.replica_reads", 1);
    let outcome = run_read(view, &read);
    let (txn, step) = (read.txn, read.step);
    ctx.send(
        read.from,
        Msg::Executed {
            txn,
            step,
            outcome,
            epoch: 0,
        },
    );
}

/// Runs a read-only piece in the view of `read.epoch`.
pub fn run_read(view: &ReadView<'_>, read: &RepRead) -> Result<PieceResult, AbortReason> {
    if read.piece.is_read_only() {
        for key in read.piece.read_keys() {
            let Some(state) = view.keys.get(&key) else {
                continue;
            };
            let pruned = state.pruned_below > Timestamp::ZERO;
            if pruned && state.value_in_epoch(read.epoch).is_none() {
                return Err(AbortReason::Conflict);
            }
        }
    }
    let mut access = EpochAccess {
        keys: view.keys,
        epoch: read.epoch,
    };
    run_read_only(&read.piece, &read.inputs, view.procedures, &mut access)
}

struct EpochAccess<'a> {
    keys: &'a FxHashMap<Key, KeyState>,
    epoch: u64,
}

impl KvAccess for EpochAccess<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        let state = self.keys.get(key)?;
        state.value_in_epoch(self.epoch).map(|v| v.value.clone())
    }

    fn put(&mut self, _key: Key, _value: Value) {
        // `run_read` refuses pieces that write.
    }
}

/// K2-VCR's visibility-delay counters (`k2.visible_versions`, …).
static DELAY: DelayCounters = crate::delay_counters!("k2");

/// A read replica.
#[derive(Debug)]
pub struct Replica {
    primary: NodeId,
    opts: Options,
    procedures: Arc<Procedures>,
    keys: FxHashMap<Key, KeyState>,
    /// Every epoch up to this one is replayed here.
    complete: u64,
    reads: ReadQueue,
    /// A pull unanswered for `retry` is sent again.
    puller: Puller,
}

impl Replica {
    pub fn new(primary: NodeId, opts: Options, procedures: Arc<Procedures>) -> Replica {
        Replica {
            primary,
            reads: ReadQueue::new(&opts),
            opts,
            procedures,
            keys: FxHashMap::default(),
            complete: 0,
            puller: Puller::default(),
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        if self.opts.epochs_on() {
            self.pull(ctx);
            ctx.set_timer(self.opts.retry_ns, Timer::ReplicaTick);
        }
    }

    fn pull(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        self.puller.pulled(ctx.now_ns());
        ctx.send(
            self.primary,
            Msg::Pull {
                after: self.complete,
            },
        );
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, K2Node>, timer: Timer) {
        if !matches!(timer, Timer::ReplicaTick) {
            return;
        }
        ctx.set_timer(self.opts.retry_ns, Timer::ReplicaTick);
        if self.puller.due(ctx.now_ns(), self.opts.retry_ns) {
            self.pull(ctx);
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, K2Node>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Replicate {
                after,
                complete,
                versions,
            } => self.on_replicate(ctx, after, complete, versions),
            Msg::RepRead {
                txn,
                step,
                epoch,
                piece,
                inputs,
            } => {
                let read = RepRead {
                    from,
                    txn,
                    step,
                    epoch,
                    piece,
                    inputs,
                };
                let view = ReadView {
                    keys: &self.keys,
                    complete: self.complete,
                    procedures: &self.procedures,
                };
                self.reads.offer(ctx, &view, read);
            }
            _ => {}
        }
    }

    /// Replays epochs `after+1 ..= complete` (only on top of what is here: a reply to an
    /// older pull is dropped).
    fn on_replicate(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        after: u64,
        complete: u64,
        versions: Vec<(Key, Version)>,
    ) {
        if after != self.complete || complete <= self.complete {
            return;
        }
        let now = ctx.now_ns();
        // A replica catching up from nothing (just started) sees old versions, not delays;
        // a version a restarted primary finalized from its log has no finalization time.
        let measured = self.complete > 0;
        for (key, version) in versions {
            if measured && version.finalized_ns > 0 {
                record_delay(ctx, &DELAY, now.saturating_sub(version.finalized_ns));
            }
            let max = self.opts.max_versions_per_key;
            self.keys
                .entry(key)
                .or_default()
                .insert_version(version, max);
        }
        self.complete = complete;
        ctx.count("k2.replica_epochs_replayed", 1);
        let view = ReadView {
            keys: &self.keys,
            complete: self.complete,
            procedures: &self.procedures,
        };
        self.reads.release(ctx, &view);
        self.pull(ctx);
    }

    /// The last complete epoch (tests).
    #[cfg(test)]
    pub(crate) fn complete(&self) -> u64 {
        self.complete
    }
}
