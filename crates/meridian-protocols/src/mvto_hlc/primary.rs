//! A partition's primary (CockroachDB's leaseholder): evaluates pieces against its
//! multi-version store at the transaction's timestamps, lays write intents, keeps the
//! timestamp cache, serves read refreshes and status-recovery queries, resolves intents,
//! and hosts the transaction records anchored here (`anchor.rs`).
//!
//! A request meeting another transaction's intent waits: a reader for intents at or below
//! its uncertainty limit, a writer for any. It pushes the intent's anchor, wounding the
//! holder if the request's transaction is older (wound-wait on start timestamps), and
//! gives up after `lock_wait` (a STAGING holder cannot be wounded).

use super::anchor::Anchor;
use super::closed::{ClosedCopy, Closer, FollowerRead};
use super::options::Options;
use super::store::{Intent, Store, View};
use super::wire::{
    Eval, EvalOutcome, IntentRecord, KeySnapshot, LiveSnapshot, Msg, Record, Snapshot, Timer,
    TxnMeta, TxnRef,
};
use super::MvtoNode;
use crate::kit::hlc::{Hlc, HlcTs};
use meridian_core::node::Ctx;
use meridian_core::txn::{execute_piece, AbortReason, Key, PieceResult, Procedures};
use meridian_core::{Cluster, NodeId, ShardId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What this primary holds of a live (undecided) transaction.
#[derive(Clone, Debug)]
pub(super) struct Live {
    pub txn: TxnMeta,
    /// Step → result, write timestamp and keys written (a resent step gets the same
    /// answer).
    pub results: BTreeMap<u32, Answer>,
    pub keys: BTreeSet<Key>,
    /// Local time of the last sweep push about it.
    pub swept_ns: u64,
}

/// A writing step's answer: result, write timestamp, keys written.
pub(super) type Answer = (PieceResult, HlcTs, Vec<Key>);

/// A request parked behind intents.
#[derive(Clone, Debug)]
struct Waiting {
    from: NodeId,
    eval: Eval,
    blockers: BTreeSet<TxnRef>,
    since_ns: u64,
}

enum Attempt {
    Done(EvalOutcome),
    Blocked(Vec<TxnMeta>),
}

/// How a decided transaction ended here (kept `2 × max_txn_age` so late duplicates of
/// its requests cannot re-create intents).
#[derive(Clone, Copy, Debug)]
pub(super) struct Finished {
    pub committed: bool,
    pub ts: HlcTs,
    pub orig_wall_ns: u64,
}

#[derive(Debug)]
pub struct Primary {
    pub(super) id: NodeId,
    pub(super) shard: ShardId,
    pub(super) opts: Options,
    pub(super) cluster: Arc<Cluster>,
    procedures: Arc<Procedures>,
    pub(super) hlc: Hlc,
    pub(super) store: Store,
    pub(super) live: BTreeMap<TxnRef, Live>,
    pub(super) finished: BTreeMap<TxnRef, Finished>,
    waiting: Vec<Waiting>,
    /// Pushes in flight: the pushee → (its meta, whether wounding, local time sent).
    pushes: BTreeMap<TxnRef, (TxnMeta, bool, u64)>,
    pub(super) anchor: Anchor,
    /// The timestamp-cache floor reserved in the log.
    floor_reserved: HlcTs,
    records: usize,
    /// ClosedTS (`replica_reads=closedts`): the closed timestamp, the replication log,
    /// held pulls and follower reads.
    closer: Option<Closer>,
}

impl Primary {
    pub fn restore(
        id: NodeId,
        shard: ShardId,
        opts: Options,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        recovered: &[Record],
    ) -> Primary {
        let closer = opts.closed_ts().then(|| {
            let replicas = cluster.replicas(shard).iter().copied();
            Closer::new(&opts, replicas.filter(|r| *r != id))
        });
        let mut node = Primary {
            closer,
            id,
            shard,
            hlc: Hlc::new(opts.max_offset_ns),
            opts,
            cluster,
            procedures,
            store: Store::default(),
            live: BTreeMap::new(),
            finished: BTreeMap::new(),
            waiting: Vec::new(),
            pushes: BTreeMap::new(),
            anchor: Anchor::default(),
            floor_reserved: HlcTs::default(),
            records: 0,
        };
        let (checkpoint, tail) =
            crate::kit::log::latest_checkpoint(recovered, |r| matches!(r, Record::Checkpoint(_)));
        for record in checkpoint.into_iter().chain(tail) {
            node.replay(record);
        }
        node.store.floor = node.floor_reserved;
        node
    }

    fn replay(&mut self, record: &Record) {
        match record {
            Record::Checkpoint(s) => self.load(s),
            Record::Intents(r) => self.lay(r, 0),
            Record::Finalized {
                txn,
                committed,
                ts,
                orig_wall_ns,
            } => self.finalize(*txn, *committed, *ts, *orig_wall_ns),
            Record::Floor(ts) => self.floor_reserved = self.floor_reserved.max(*ts),
            Record::TxnRecord(r) => self.anchor.apply(r),
            Record::Acked { txn, shard } => self.anchor.apply_ack(*txn, *shard),
            Record::Started { .. } => {}
        }
    }

    fn load(&mut self, s: &Snapshot) {
        for k in &s.keys {
            let state = self.store.key_mut(&k.key);
            state.pruned_below = k.pruned_below;
            state.versions = k.versions.clone();
        }
        for l in &s.live {
            for (key, value, ts, step) in &l.intents {
                self.store.key_mut(key).intent = Some(Intent {
                    txn: l.txn,
                    value: value.clone(),
                    ts: *ts,
                    step: *step,
                });
            }
            let live = Live {
                txn: l.txn,
                results: l
                    .results
                    .iter()
                    .map(|(s, r, w, k)| (*s, (r.clone(), *w, k.clone())))
                    .collect(),
                keys: l.intents.iter().map(|(k, ..)| k.clone()).collect(),
                swept_ns: 0,
            };
            self.live.insert(l.txn.id, live);
        }
        self.finished = s
            .finished
            .iter()
            .map(|(t, committed, ts, orig_wall_ns)| {
                let f = Finished {
                    committed: *committed,
                    ts: *ts,
                    orig_wall_ns: *orig_wall_ns,
                };
                (*t, f)
            })
            .collect();
        for r in &s.records {
            self.anchor.apply(r);
        }
        self.floor_reserved = s.floor;
    }

    fn snapshot(&self) -> Snapshot {
        let keys = self
            .store
            .keys
            .iter()
            .filter(|(_, s)| !s.versions.is_empty())
            .map(|(k, s)| KeySnapshot {
                key: k.clone(),
                pruned_below: s.pruned_below,
                versions: s.versions.clone(),
            })
            .collect();
        let live = self
            .live
            .values()
            .map(|l| LiveSnapshot {
                txn: l.txn,
                results: l
                    .results
                    .iter()
                    .map(|(s, (r, w, k))| (*s, r.clone(), *w, k.clone()))
                    .collect(),
                intents: l
                    .keys
                    .iter()
                    .filter_map(|k| {
                        let i = self.store.key(k)?.own_intent(l.txn.id)?;
                        Some((k.clone(), i.value.clone(), i.ts, i.step))
                    })
                    .collect(),
            })
            .collect();
        Snapshot {
            keys,
            live,
            finished: self
                .finished
                .iter()
                .map(|(t, f)| (*t, f.committed, f.ts, f.orig_wall_ns))
                .collect(),
            records: self.anchor.snapshot(),
            floor: self.floor_reserved,
        }
    }

    pub(super) fn persist(&mut self, ctx: &mut Ctx<'_, MvtoNode>, record: Record) {
        ctx.persist(record);
        self.records += 1;
        if self.records >= self.opts.checkpoint_every {
            self.records = 0;
            ctx.checkpoint(Record::Checkpoint(Box::new(self.snapshot())));
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        ctx.set_timer(self.opts.retry_ns, Timer::PrimaryTick);
        if let Some(closer) = &mut self.closer {
            closer.start(ctx, &self.opts);
        }
    }

    /// Takes a received timestamp into the HLC (one too far ahead is counted, not taken).
    fn observe(&mut self, ctx: &mut Ctx<'_, MvtoNode>, ts: HlcTs) {
        if self.hlc.update(ctx.now_ns(), ts).is_err() {
            ctx.count("mvto_hlc.hlc_too_far_ahead", 1);
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, MvtoNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Eval(eval) => self.on_eval(ctx, from, *eval),
            Msg::Refresh {
                txn,
                id,
                keys,
                from: lo,
                to,
            } => self.on_refresh(ctx, from, txn, id, keys, lo, to),
            Msg::Resolve {
                txn,
                committed,
                ts,
                ack,
            } => self.on_resolve(ctx, from, txn, committed, ts, ack),
            Msg::QueryIntents { txn, ts, writes } => {
                self.on_query_intents(ctx, from, txn, ts, writes)
            }
            Msg::Pull { stream, after } => {
                if let Some(closer) = &mut self.closer {
                    closer.on_pull(from, stream, after);
                }
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
                self.on_follower_read(ctx, read);
            }
            other => self.on_anchor_message(ctx, from, other),
        }
    }

    // ---- evaluation -----------------------------------------------------------------

    fn reply(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        to: NodeId,
        txn: TxnRef,
        step: u32,
        outcome: EvalOutcome,
    ) {
        let now = self.hlc.now(ctx.now_ns());
        ctx.send(
            to,
            Msg::Evaluated {
                txn,
                step,
                outcome,
                now,
            },
        );
    }

    fn on_eval(&mut self, ctx: &mut Ctx<'_, MvtoNode>, from: NodeId, eval: Eval) {
        self.observe(ctx, eval.write_ts);
        let (txn, step) = (eval.txn.id, eval.step);
        if self.finished.contains_key(&txn) {
            return self.reply(
                ctx,
                from,
                txn,
                step,
                EvalOutcome::Failed(AbortReason::Failure),
            );
        }
        if let Some((result, ts, keys)) = self.live.get(&txn).and_then(|l| l.results.get(&step)) {
            let outcome = EvalOutcome::Done {
                result: result.clone(),
                write_ts: Some(*ts),
                written: keys.clone(),
            };
            return self.reply(ctx, from, txn, step, outcome);
        }
        if self
            .waiting
            .iter()
            .any(|w| w.eval.txn.id == txn && w.eval.step == step)
        {
            return;
        }
        if eval
            .txn
            .orig
            .wall_ns
            .saturating_add(self.opts.max_txn_age_ns())
            < ctx.now_ns()
        {
            ctx.count("mvto_hlc.eval_too_old", 1);
            let outcome = EvalOutcome::Failed(AbortReason::Timeout);
            return self.reply(ctx, from, txn, step, outcome);
        }
        self.run(ctx, from, eval, ctx.now_ns());
    }

    fn run(&mut self, ctx: &mut Ctx<'_, MvtoNode>, from: NodeId, eval: Eval, since_ns: u64) {
        let (txn, step) = (eval.txn.id, eval.step);
        if self.finished.contains_key(&txn) {
            // Decided (wounded, or recovered) while it waited.
            return self.reply(
                ctx,
                from,
                txn,
                step,
                EvalOutcome::Failed(AbortReason::Failure),
            );
        }
        match self.attempt(ctx, &eval) {
            Attempt::Done(outcome) => self.reply(ctx, from, txn, step, outcome),
            Attempt::Blocked(holders) => {
                if self.waiting.len() >= self.opts.max_waiting_per_node {
                    ctx.count("mvto_hlc.waiting_overflow", 1);
                    let outcome = EvalOutcome::Failed(AbortReason::Conflict);
                    return self.reply(ctx, from, txn, step, outcome);
                }
                ctx.count("mvto_hlc.intent_waits", 1);
                let orig = eval.txn.orig;
                let blockers = holders.iter().map(|h| h.id).collect();
                // Parked before pushing: a push to an anchor on this node may decide (and
                // wake it) at once.
                self.waiting.push(Waiting {
                    from,
                    eval,
                    blockers,
                    since_ns,
                });
                for h in &holders {
                    self.push(ctx, *h, (orig, txn) < (h.orig, h.id));
                }
            }
        }
    }

    fn push(&mut self, ctx: &mut Ctx<'_, MvtoNode>, holder: TxnMeta, abort: bool) {
        let entry = self.pushes.entry(holder.id).or_insert((holder, false, 0));
        if entry.2 != 0 && (entry.1 || !abort) {
            return;
        }
        entry.1 |= abort;
        entry.2 = ctx.now_ns().max(1);
        let msg = Msg::Push { txn: holder, abort };
        self.send_to_anchor(ctx, holder.anchor, msg);
    }

    /// Checks a piece's keys, then evaluates it. Own intents never block and need no
    /// uncertainty check (the key is locked by this transaction).
    fn attempt(&mut self, ctx: &mut Ctx<'_, MvtoNode>, eval: &Eval) -> Attempt {
        let txn = eval.txn.id;
        let reads = eval.piece.read_keys();
        let writes = eval.piece.write_keys();
        // A late copy of a step this transaction has since superseded on a key (a resend
        // after a timestamp move): the coordinator no longer waits for it.
        let superseded = reads.iter().chain(&writes).any(|k| {
            let own = self.store.key(k).and_then(|s| s.own_intent(txn));
            own.is_some_and(|i| i.step > eval.step)
        });
        if superseded {
            return Attempt::Done(EvalOutcome::Failed(AbortReason::Failure));
        }
        let mut holders: Vec<TxnMeta> = Vec::new();
        let mut retry_at: Option<HlcTs> = None;
        for key in reads.iter().chain(&writes) {
            let Some(state) = self.store.key(key) else {
                continue;
            };
            let is_write = writes.contains(key);
            if let Some(i) = state.foreign_intent(txn) {
                if (is_write || i.ts <= eval.limit) && !holders.iter().any(|h| h.id == i.txn.id) {
                    holders.push(i.txn);
                }
                continue;
            }
            if state.own_intent(txn).is_some() || !reads.contains(key) {
                continue;
            }
            if eval.read_ts < state.pruned_below {
                ctx.count("mvto_hlc.read_below_gc", 1);
                return Attempt::Done(EvalOutcome::Failed(AbortReason::Conflict));
            }
            // A read-modify-write must see the newest version; a read, any version in
            // its uncertainty interval.
            let ceiling = if is_write {
                HlcTs {
                    wall_ns: u64::MAX,
                    logical: u32::MAX,
                }
            } else {
                eval.limit
            };
            if let Some(ts) = state.newest_in(eval.read_ts, ceiling) {
                retry_at = retry_at.max(Some(ts));
            }
        }
        if !holders.is_empty() {
            return Attempt::Blocked(holders);
        }
        if let Some(at) = retry_at {
            ctx.count("mvto_hlc.uncertainty_or_too_old_retries", 1);
            return Attempt::Done(EvalOutcome::Retry { at });
        }
        for key in &reads {
            self.store.key_mut(key).mark_read(eval.read_ts, Some(txn));
        }
        if !reads.is_empty() {
            self.reserve_floor(ctx, eval.read_ts);
        }
        Attempt::Done(self.evaluate(ctx, eval))
    }

    fn evaluate(&mut self, ctx: &mut Ctx<'_, MvtoNode>, eval: &Eval) -> EvalOutcome {
        let mut inputs: Vec<Option<&PieceResult>> = Vec::new();
        for (index, result) in &eval.inputs {
            let i = usize::from(*index);
            if inputs.len() <= i {
                inputs.resize(i + 1, None);
            }
            inputs[i] = Some(result);
        }
        let txn = eval.txn.id;
        let mut view = View {
            store: &self.store,
            txn,
            ts: eval.read_ts,
            writes: Vec::new(),
        };
        let result = match execute_piece(&eval.piece, &inputs, &self.procedures, &mut view) {
            Ok(result) => result,
            Err(reason) => return EvalOutcome::Failed(reason),
        };
        let writes = view.writes;
        if writes.is_empty() {
            return EvalOutcome::Done {
                result,
                write_ts: None,
                written: Vec::new(),
            };
        }
        let floor = self.store.floor;
        let ts = writes
            .iter()
            .map(|(k, _)| match self.store.key(k) {
                Some(s) => s.write_floor(txn, eval.write_ts, floor),
                None if floor >= eval.write_ts => floor.next(),
                None => eval.write_ts,
            })
            .max()
            .expect("writes");
        if ts > eval.write_ts {
            ctx.count("mvto_hlc.writes_pushed", 1);
        }
        let written = writes.iter().map(|(k, _)| k.clone()).collect();
        let record = IntentRecord {
            txn: eval.txn,
            step: eval.step,
            ts,
            writes,
            result: result.clone(),
        };
        self.lay(&record, ctx.now_ns());
        self.persist(ctx, Record::Intents(Box::new(record)));
        EvalOutcome::Done {
            result,
            write_ts: Some(ts),
            written,
        }
    }

    fn lay(&mut self, record: &IntentRecord, now_ns: u64) {
        let live = self.live.entry(record.txn.id).or_insert_with(|| Live {
            txn: record.txn,
            results: BTreeMap::new(),
            keys: BTreeSet::new(),
            swept_ns: now_ns,
        });
        let written = record.writes.iter().map(|(k, _)| k.clone()).collect();
        live.results
            .insert(record.step, (record.result.clone(), record.ts, written));
        for (key, value) in &record.writes {
            live.keys.insert(key.clone());
            self.store.key_mut(key).intent = Some(Intent {
                txn: record.txn,
                value: value.clone(),
                ts: record.ts,
                step: record.step,
            });
        }
    }

    /// Persists a cache floor ahead of `ts` before a read (or prevention) at `ts` is
    /// answered, so that after a crash no write lands at or below it.
    pub(super) fn reserve_floor(&mut self, ctx: &mut Ctx<'_, MvtoNode>, ts: HlcTs) {
        if ts <= self.floor_reserved {
            return;
        }
        let floor = HlcTs {
            wall_ns: ts.wall_ns.saturating_add(self.opts.read_floor_ns),
            logical: 0,
        };
        self.floor_reserved = floor;
        self.persist(ctx, Record::Floor(floor));
    }

    // ---- read refresh ---------------------------------------------------------------

    /// Succeeds iff no other transaction wrote (or holds an intent on) `keys` in
    /// `(from, to]`; then marks them read at `to` so that nobody can.
    #[allow(clippy::too_many_arguments)]
    fn on_refresh(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        from_node: NodeId,
        txn: TxnRef,
        id: u32,
        keys: Vec<Key>,
        from: HlcTs,
        to: HlcTs,
    ) {
        self.observe(ctx, to);
        let fails = |state: &super::store::KeyState| {
            from < state.pruned_below
                || state.newest_in(from, to).is_some()
                || state.foreign_intent(txn).is_some_and(|i| i.ts <= to)
        };
        let ok = !self.finished.contains_key(&txn)
            && keys
                .iter()
                .all(|k| self.store.key(k).is_none_or(|s| !fails(s)));
        if ok {
            for key in &keys {
                self.store.key_mut(key).mark_read(to, Some(txn));
            }
            self.reserve_floor(ctx, to);
        } else {
            ctx.count("mvto_hlc.refresh_failed", 1);
        }
        let shard = self.shard;
        ctx.send(from_node, Msg::Refreshed { txn, id, shard, ok });
    }

    // ---- status recovery (participant side) ------------------------------------------

    /// Whether each write is present at or below `ts`; one that is not is prevented: the
    /// key's cache moves to `ts`, so the write, if it ever arrives, lands above it.
    fn on_query_intents(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        from: NodeId,
        txn: TxnRef,
        ts: HlcTs,
        writes: Vec<(Key, u32)>,
    ) {
        let found = match self.finished.get(&txn) {
            Some(f) => f.committed,
            None => {
                let mut all = true;
                for (key, step) in &writes {
                    let present = self
                        .store
                        .key(key)
                        .and_then(|s| s.own_intent(txn))
                        .is_some_and(|i| i.step >= *step && i.ts <= ts);
                    if !present {
                        all = false;
                        self.store.key_mut(key).mark_read(ts, None);
                    }
                }
                if !all {
                    self.reserve_floor(ctx, ts);
                }
                all
            }
        };
        let shard = self.shard;
        let msg = Msg::IntentsQueried {
            txn,
            ts,
            shard,
            found,
        };
        self.send_to_anchor(ctx, from, msg);
    }

    // ---- resolution ---------------------------------------------------------------------

    pub(super) fn on_resolve(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        from: NodeId,
        txn: TxnRef,
        committed: bool,
        ts: HlcTs,
        ack: bool,
    ) {
        if let Some(live) = self.live.get(&txn) {
            let orig_wall_ns = live.txn.orig.wall_ns;
            if committed {
                self.replicate_commit(ctx, txn, ts);
            }
            self.finalize(txn, committed, ts, orig_wall_ns);
            self.persist(
                ctx,
                Record::Finalized {
                    txn,
                    committed,
                    ts,
                    orig_wall_ns,
                },
            );
        } else if !self.finished.contains_key(&txn) {
            // Nothing here: remember the decision so a late request cannot lay intents
            // (its age is unknown here; the pushes table knows it when we pushed).
            let orig_wall_ns = self
                .pushes
                .get(&txn)
                .map_or(ctx.now_ns(), |(m, ..)| m.orig.wall_ns);
            let f = Finished {
                committed,
                ts,
                orig_wall_ns,
            };
            self.finished.insert(txn, f);
            self.persist(
                ctx,
                Record::Finalized {
                    txn,
                    committed,
                    ts,
                    orig_wall_ns,
                },
            );
        }
        self.pushes.remove(&txn);
        if ack {
            let shard = self.shard;
            if from == self.id {
                self.on_resolved(ctx, txn, shard);
            } else {
                ctx.send(from, Msg::Resolved { txn, shard });
            }
        }
        self.wake(ctx, txn);
        self.release_follower_reads(ctx);
    }

    // ---- ClosedTS (closed.rs) ---------------------------------------------------------

    /// Logs the versions `txn` is about to commit here at `ts`, for the replicas.
    fn replicate_commit(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef, ts: HlcTs) {
        let (Some(closer), Some(live)) = (&mut self.closer, self.live.get(&txn)) else {
            return;
        };
        for key in &live.keys {
            if let Some(i) = self.store.key(key).and_then(|s| s.own_intent(txn)) {
                closer.committed(key.clone(), ts, i.value.clone(), ctx.now_ns());
            }
        }
    }

    /// `Timer::CloseTick`: closes `HLC.now − lag` (the floor reserved in the log first,
    /// then raised so every later write lands above it), answers the held pulls, serves
    /// the follower reads it now covers.
    fn close(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        let Some(closed) = self.closer.as_ref().map(|c| c.closed) else {
            return;
        };
        ctx.set_timer(self.opts.closed_ts_interval_ns, Timer::CloseTick);
        let now = self.hlc.now(ctx.now_ns());
        let target = HlcTs {
            wall_ns: now.wall_ns.saturating_sub(self.opts.closed_ts_lag_ns),
            logical: 0,
        };
        if target > closed {
            self.reserve_floor(ctx, target);
            self.store.floor = self.store.floor.max(target);
            self.closer.as_mut().expect("checked").closed = target;
            ctx.count("mvto_hlc.closings", 1);
        }
        let closer = self.closer.as_mut().expect("checked");
        closer.answer_pulls(ctx, &self.store);
        self.release_follower_reads(ctx);
    }

    fn on_follower_read(&mut self, ctx: &mut Ctx<'_, MvtoNode>, read: FollowerRead) {
        let Some(closer) = &mut self.closer else {
            let why = "follower reads need replica_reads=closedts".to_string();
            let outcome = EvalOutcome::Failed(AbortReason::Invalid(why));
            return self.reply(ctx, read.from, read.txn, read.step, outcome);
        };
        let store = &self.store;
        let intent = |k: &Key| store.key(k).and_then(|s| s.intent.as_ref()).map(|i| i.ts);
        let copy = ClosedCopy {
            store,
            closed: closer.closed,
            intent: &intent,
            unsafe_serve_above_closed: self.opts.unsafe_serve_above_closed,
        };
        copy.offer(ctx, &mut closer.reads, read, &self.procedures);
    }

    fn release_follower_reads(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        let Some(closer) = &mut self.closer else {
            return;
        };
        if closer.reads.is_empty() {
            return;
        }
        let store = &self.store;
        let intent = |k: &Key| store.key(k).and_then(|s| s.intent.as_ref()).map(|i| i.ts);
        let copy = ClosedCopy {
            store,
            closed: closer.closed,
            intent: &intent,
            unsafe_serve_above_closed: self.opts.unsafe_serve_above_closed,
        };
        copy.release(ctx, &mut closer.reads, &self.procedures);
    }

    fn finalize(&mut self, txn: TxnRef, committed: bool, ts: HlcTs, orig_wall_ns: u64) {
        if let Some(live) = self.live.remove(&txn) {
            let commit_ts = committed.then_some(ts);
            for key in &live.keys {
                let max = self.opts.max_versions_per_key;
                self.store.key_mut(key).resolve(txn, commit_ts, max);
            }
        }
        let f = Finished {
            committed,
            ts,
            orig_wall_ns,
        };
        self.finished.insert(txn, f);
    }

    fn wake(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef) {
        let mut ready = Vec::new();
        self.waiting.retain_mut(|w| {
            w.blockers.remove(&txn);
            if w.blockers.is_empty() {
                ready.push((w.from, w.eval.clone(), w.since_ns));
                false
            } else {
                true
            }
        });
        for (from, eval, since_ns) in ready {
            self.run(ctx, from, eval, since_ns);
        }
    }

    // ---- housekeeping ---------------------------------------------------------------

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, MvtoNode>, timer: Timer) {
        if matches!(timer, Timer::CloseTick) {
            return self.close(ctx);
        }
        if !matches!(timer, Timer::PrimaryTick) {
            return;
        }
        ctx.set_timer(self.opts.retry_ns, Timer::PrimaryTick);
        let now = ctx.now_ns();
        let retry = self.opts.retry_ns;
        // Requests that waited too long give up (what breaks the remaining deadlocks).
        let lock_wait = self.opts.lock_wait_ns;
        let mut expired = Vec::new();
        self.waiting.retain(|w| {
            let keep = now.saturating_sub(w.since_ns) < lock_wait;
            if !keep {
                expired.push((w.from, w.eval.txn.id, w.eval.step));
            }
            keep
        });
        for (from, txn, step) in expired {
            ctx.count("mvto_hlc.lock_wait_timeouts", 1);
            self.reply(
                ctx,
                from,
                txn,
                step,
                EvalOutcome::Failed(AbortReason::Conflict),
            );
        }
        // Pushes still unanswered, and pushes nobody waits for any more.
        let wanted: BTreeSet<TxnRef> = self
            .waiting
            .iter()
            .flat_map(|w| w.blockers.iter().copied())
            .collect();
        self.pushes.retain(|t, _| wanted.contains(t));
        let resend: Vec<(TxnMeta, bool)> = self
            .pushes
            .values_mut()
            .filter(|(_, _, sent)| now.saturating_sub(*sent) >= retry || now < *sent)
            .map(|(m, abort, sent)| {
                *sent = now.max(1);
                (*m, *abort)
            })
            .collect();
        for (holder, abort) in resend {
            self.send_to_anchor(ctx, holder.anchor, Msg::Push { txn: holder, abort });
        }
        self.sweep_stale(ctx, now);
        let max_age = self.opts.max_txn_age_ns();
        self.finished
            .retain(|_, f| now.saturating_sub(f.orig_wall_ns) <= 2 * max_age);
        self.anchor_tick(ctx);
    }

    /// Intents left behind (a coordinator that failed, a lost resolution) are pushed
    /// (wounding) once their transaction is older than the maximum age.
    fn sweep_stale(&mut self, ctx: &mut Ctx<'_, MvtoNode>, now: u64) {
        let max_age = self.opts.max_txn_age_ns();
        let retry = self.opts.retry_ns;
        let stale: Vec<TxnMeta> = self
            .live
            .values_mut()
            .filter(|l| {
                now.saturating_sub(l.txn.orig.wall_ns) > max_age
                    && now.saturating_sub(l.swept_ns) >= retry
            })
            .map(|l| {
                l.swept_ns = now;
                l.txn
            })
            .collect();
        for txn in stale {
            ctx.count("mvto_hlc.stale_intent_pushes", 1);
            self.send_to_anchor(ctx, txn.anchor, Msg::Push { txn, abort: true });
        }
    }

    /// Sends `msg` to the anchor `to`, handling it here when this node is the anchor.
    pub(super) fn send_to_anchor(&mut self, ctx: &mut Ctx<'_, MvtoNode>, to: NodeId, msg: Msg) {
        if to == self.id {
            let me = self.id;
            self.on_anchor_message(ctx, me, msg);
        } else {
            ctx.send(to, msg);
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        self.store.check()?;
        for (txn, live) in &self.live {
            if self.finished.contains_key(txn) {
                return Err(format!("{txn:?} is both live and finished"));
            }
            for key in &live.keys {
                if self
                    .store
                    .key(key)
                    .and_then(|s| s.own_intent(*txn))
                    .is_none()
                {
                    return Err(format!("{txn:?} lost its intent on {key:?}"));
                }
            }
        }
        Ok(())
    }
}
