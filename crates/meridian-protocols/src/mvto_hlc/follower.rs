//! ClosedTS at a read replica (K2 §6.1, §7.4; CockroachDB's follower reads): replays
//! its primary's committed versions and intents as of each closing (`closed.rs`) and
//! serves follower reads under the closed timestamp.
//!
//! A replica keeps nothing durable: after a restart it pulls a full snapshot. Its closed
//! timestamp never moves back (a restarted primary starts closing from its clock again,
//! below what it closed before; its recovered timestamp-cache floor still keeps every new
//! write above the old closing, so the replica's view below it stays complete).

use super::closed::{ClosedCopy, FollowerRead};
use super::options::Options;
use super::store::Store;
use super::wire::{Msg, RepVersion, Timer};
use super::MvtoNode;
use crate::delay_counters;
use crate::kit::hlc::HlcTs;
use crate::kit::replica_reads::{DelayCounters, HeldReads, Puller, Visibility};
use meridian_core::node::Ctx;
use meridian_core::txn::{Key, Procedures};
use meridian_core::NodeId;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// ClosedTS's visibility-delay counters (`mvto_hlc.visible_versions`, …).
static DELAY: DelayCounters = delay_counters!("mvto_hlc");

/// Versions waiting for the closed timestamp to be measured (beyond: not measured).
const MAX_UNMEASURED: usize = 1 << 16;

/// A read replica of one shard.
#[derive(Debug)]
pub struct Follower {
    primary: NodeId,
    opts: Options,
    procedures: Arc<Procedures>,
    store: Store,
    /// The primary's intents as of the last replication.
    intents: FxHashMap<Key, HlcTs>,
    closed: HlcTs,
    /// The primary's stream and the last entry of it replayed here.
    stream: u64,
    position: u64,
    reads: HeldReads<FollowerRead>,
    puller: Puller,
    visibility: Visibility<HlcTs>,
}

impl Follower {
    pub fn new(primary: NodeId, opts: Options, procedures: Arc<Procedures>) -> Follower {
        Follower {
            primary,
            reads: HeldReads::new(opts.max_waiting_per_node),
            opts,
            procedures,
            store: Store::default(),
            intents: FxHashMap::default(),
            closed: HlcTs::default(),
            stream: 0,
            position: 0,
            puller: Puller::default(),
            visibility: Visibility::new(&DELAY, MAX_UNMEASURED),
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        if self.opts.closed_ts() {
            self.pull(ctx);
            ctx.set_timer(self.opts.retry_ns, Timer::FollowerTick);
        }
    }

    fn pull(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        self.puller.pulled(ctx.now_ns());
        let msg = Msg::Pull {
            stream: self.stream,
            after: self.position,
        };
        ctx.send(self.primary, msg);
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, MvtoNode>, timer: Timer) {
        if !matches!(timer, Timer::FollowerTick) {
            return;
        }
        ctx.set_timer(self.opts.retry_ns, Timer::FollowerTick);
        let due_ns = self.opts.retry_ns + self.opts.closed_ts_interval_ns;
        if self.puller.due(ctx.now_ns(), due_ns) {
            self.pull(ctx);
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, MvtoNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Replicate {
                stream,
                after,
                upto,
                full,
                versions,
                intents,
                closed,
            } => {
                let next = stream == self.stream && after == self.position;
                if !full && !next {
                    return; // a reply to an older pull
                }
                if full {
                    self.store = Store::default();
                    self.visibility.clear();
                }
                self.replay(ctx, full, versions, intents, closed);
                (self.stream, self.position) = (stream, upto);
                self.release(ctx);
                self.pull(ctx);
            }
            Msg::RepRead {
                txn,
                step,
                ts,
                piece,
                inputs,
            } => {
                let read = FollowerRead {
                    from,
                    txn,
                    step,
                    ts,
                    piece,
                    inputs,
                };
                let intents = &self.intents;
                let intent = |k: &Key| intents.get(k).copied();
                let copy = ClosedCopy {
                    store: &self.store,
                    closed: self.closed,
                    intent: &intent,
                    unsafe_serve_above_closed: self.opts.unsafe_serve_above_closed,
                };
                copy.offer(ctx, &mut self.reads, read, &self.procedures);
            }
            _ => {}
        }
    }

    /// Applies one replication: versions, the intents now, the closed timestamp (which
    /// never moves back here).
    fn replay(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        full: bool,
        versions: Vec<RepVersion>,
        intents: Vec<(Key, HlcTs)>,
        closed: HlcTs,
    ) {
        self.closed = self.closed.max(closed);
        // A replica catching up from nothing sees old versions, not delays.
        let measured = !full;
        for v in versions {
            if measured && v.committed_ns > 0 {
                let closed = self.closed;
                self.visibility.replayed(ctx, closed, v.ts, v.committed_ns);
            }
            let max = self.opts.max_versions_per_key;
            self.store
                .key_mut(&v.key)
                .insert_version(v.ts, v.value, max);
        }
        self.intents = intents.into_iter().collect();
        self.visibility.advanced(ctx, self.closed);
        ctx.count("mvto_hlc.replications_replayed", 1);
    }

    fn release(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        let intents = &self.intents;
        let intent = |k: &Key| intents.get(k).copied();
        let copy = ClosedCopy {
            store: &self.store,
            closed: self.closed,
            intent: &intent,
            unsafe_serve_above_closed: self.opts.unsafe_serve_above_closed,
        };
        copy.release(ctx, &mut self.reads, &self.procedures);
    }
}
