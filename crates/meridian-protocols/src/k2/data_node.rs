//! A primary data node (§5.2, Fig. 10): runs pieces at their transaction's start
//! timestamp against its multi-version store, holds write intents in write streams,
//! resolves undetermined writes with PUSHWS, finalizes asynchronously, and hosts a
//! recorder (`recorder.rs`).
//!
//! A piece is run whole: it records its reads in the read trackers (Fig. 10 line 4, done
//! on arrival so that no writer can slip below a reader that is waiting), waits until no
//! other transaction's intent below its timestamp remains on a key it reads (PUSHWS,
//! lines 1-2 and 11-15), refuses a write below a read (lines 6-7), then executes and
//! turns its writes into intents (line 9), persisted before the reply. Waits only ever go
//! from a larger timestamp to a smaller one, so they cannot form a cycle (§5.2's deadlock
//! freedom; with `mv_writes=false` a writer likewise waits only for older intents and
//! aborts rather than wait for younger ones).

use super::epoch::EpochClock;
use super::options::Options;
use super::recorder::{Env, Recorder};
use super::replica::{ReadQueue, ReadView, RepRead};
use super::wire::{
    Execute, Finished, IntentRecord, KeySnapshot, Msg, Record, Snapshot, Timer, TxnSnapshot, TxnTs,
};
use super::write_stream::{Intent, Store, Version, View};
use super::K2Node;
use meridian_core::node::Ctx;
use meridian_core::txn::{execute_piece, AbortReason, Key, PieceResult, Procedures, Value};
use meridian_core::{Cluster, NodeId, ShardId, Timestamp};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What this primary holds of a live transaction.
#[derive(Clone, Debug)]
struct LiveTxn {
    recorder: NodeId,
    /// The lowest epoch this primary proposed for it: until it is finalized, no epoch
    /// from this one on is complete here.
    epoch: u64,
    results: BTreeMap<u16, PieceResult>,
    writes: BTreeMap<Key, Value>,
    /// Local time of the last push about it from the stale-intent sweep.
    swept_local_ns: u64,
}

/// A piece waiting for undetermined intents below it.
#[derive(Clone, Debug)]
struct Waiting {
    from: NodeId,
    exec: Execute,
    blockers: BTreeSet<TxnTs>,
}

/// Why a piece cannot run now.
enum Attempt {
    Done(Result<PieceResult, AbortReason>),
    Blocked(BTreeSet<TxnTs>, Vec<(TxnTs, NodeId)>),
}

/// A primary data node.
#[derive(Debug)]
pub struct DataNode {
    id: NodeId,
    shard: ShardId,
    opts: Options,
    cluster: Arc<Cluster>,
    procedures: Arc<Procedures>,
    store: Store,
    live: BTreeMap<TxnTs, LiveTxn>,
    /// Transactions finalized here (committed?), kept `2·max_txn_age` by timestamp so a
    /// late duplicate cannot re-create their intents.
    finished: BTreeMap<TxnTs, Finished>,
    waiting: Vec<Waiting>,
    /// Pushes in flight: the transaction → (its recorder, local time sent).
    pushes: BTreeMap<TxnTs, (NodeId, u64)>,
    recorder: Recorder,
    /// The read floor reserved in the log: reads up to it may be served.
    read_reserved: Timestamp,
    records: usize,
    /// K2-VCR (§6): this primary's epoch cuts.
    epochs: EpochClock,
    /// Committed versions by commit epoch, from epoch `indexed_from` on (what a replica's
    /// pull needs without scanning the store).
    by_epoch: BTreeMap<u64, Vec<(Key, TxnTs)>>,
    indexed_from: u64,
    /// Replicas waiting for an epoch after the one they have (held pulls).
    pullers: BTreeMap<NodeId, u64>,
    /// Replica reads served here (the nearest copy of this shard is its primary).
    rep_reads: ReadQueue,
    /// Per key, the least epoch a later writer proposes: the largest epoch validated on
    /// it (`on_validate`). Entries at or below the current proposal are dropped.
    epoch_floors: BTreeMap<Key, u64>,
}

/// Epochs of the replication index kept behind the complete epoch; a replica further
/// behind gets a scan of the store.
const INDEX_EPOCHS: u64 = 256;

/// Versions per `Replicate` (whole epochs are never split).
const MAX_REPLICATE_VERSIONS: usize = 4096;

impl DataNode {
    /// Builds the primary of `shard`, fresh or from its records.
    pub fn restore(
        id: NodeId,
        shard: ShardId,
        opts: Options,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        recovered: &[Record],
    ) -> DataNode {
        let oracle = crate::kit::ttc::OracleCursor::new(&cluster, id);
        let mut node = DataNode {
            id,
            shard,
            rep_reads: ReadQueue::new(&opts),
            opts,
            epochs: EpochClock::new(oracle),
            by_epoch: BTreeMap::new(),
            indexed_from: 0,
            pullers: BTreeMap::new(),
            epoch_floors: BTreeMap::new(),
            cluster,
            procedures,
            store: Store::default(),
            live: BTreeMap::new(),
            finished: BTreeMap::new(),
            waiting: Vec::new(),
            pushes: BTreeMap::new(),
            recorder: Recorder::default(),
            read_reserved: Timestamp::ZERO,
            records: 0,
        };
        let start = recovered
            .iter()
            .rposition(|r| matches!(r, Record::Checkpoint(_)))
            .unwrap_or(0);
        for record in &recovered[start..] {
            node.replay(record);
        }
        node.store.read_floor = node.read_reserved;
        // What was finalized before the crash is not indexed: pulls from before it scan.
        node.indexed_from = node.by_epoch.keys().next_back().map_or(0, |e| e + 1);
        node.by_epoch.clear();
        node
    }

    fn replay(&mut self, record: &Record) {
        match record {
            Record::Checkpoint(snapshot) => self.load(snapshot),
            Record::Intents(intents) => {
                self.add_intents(intents, 0);
            }
            Record::Finalized {
                txn,
                committed,
                epoch,
            } => self.finalize(*txn, *committed, *epoch, 0),
            Record::ReadFloor(ts) => self.read_reserved = self.read_reserved.max(*ts),
            Record::Validated { epoch, keys } => self.raise_floors(keys, *epoch),
            Record::Decided(d) => self.recorder.apply_decided(d),
            Record::Acked { txn, shard } => self.recorder.apply_ack(*txn, *shard),
            Record::Started { .. } => {}
        }
    }

    fn load(&mut self, s: &Snapshot) {
        for k in &s.keys {
            let state = self.store.key_mut(&k.key);
            state.pruned_below = k.pruned_below;
            state.versions = k.versions.clone();
            for v in &k.versions {
                self.by_epoch
                    .entry(v.epoch)
                    .or_default()
                    .push((k.key.clone(), v.ts));
            }
        }
        for t in &s.txns {
            for (key, value) in &t.writes {
                let intent = Intent {
                    value: value.clone(),
                    recorder: t.recorder,
                };
                self.store.key_mut(key).intents.insert(t.txn, intent);
            }
            let live = LiveTxn {
                recorder: t.recorder,
                epoch: t.epoch,
                results: t.results.iter().cloned().collect(),
                writes: t.writes.iter().cloned().collect(),
                swept_local_ns: 0,
            };
            self.live.insert(t.txn, live);
        }
        self.finished = s.finished.iter().copied().collect();
        self.recorder = Recorder::restore(&s.decisions);
        self.read_reserved = s.read_floor;
        self.epoch_floors = s.epoch_floors.iter().cloned().collect();
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
        let txns = self
            .live
            .iter()
            .map(|(txn, l)| TxnSnapshot {
                txn: *txn,
                recorder: l.recorder,
                epoch: l.epoch,
                results: l.results.iter().map(|(s, r)| (*s, r.clone())).collect(),
                writes: l
                    .writes
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
            .collect();
        Snapshot {
            keys,
            txns,
            finished: self.finished.iter().map(|(t, c)| (*t, *c)).collect(),
            decisions: self.recorder.decisions(),
            read_floor: self.read_reserved,
            epoch_floors: self
                .epoch_floors
                .iter()
                .map(|(k, e)| (k.clone(), *e))
                .collect(),
        }
    }

    fn persist(&mut self, ctx: &mut Ctx<'_, K2Node>, record: Record) {
        ctx.persist(record);
        self.records += 1;
        if self.records >= self.opts.checkpoint_every {
            self.records = 0;
            ctx.checkpoint(Record::Checkpoint(Box::new(self.snapshot())));
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        ctx.set_timer(self.opts.retry_ns, Timer::DataNodeTick);
        self.epochs.start(ctx, &self.opts);
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, K2Node>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Execute(exec) => self.on_execute(ctx, from, *exec),
            Msg::Resolve {
                txn,
                committed,
                ack,
                epoch,
            } => self.on_resolve(ctx, from, txn, committed, ack, epoch),
            Msg::Commit {
                txn,
                participants,
                epoch,
            } => {
                let env = env(&self.cluster, &self.opts);
                self.recorder
                    .on_end(ctx, &env, from, txn, true, participants, epoch);
            }
            Msg::Abort { txn, participants } => {
                let env = env(&self.cluster, &self.opts);
                self.recorder
                    .on_end(ctx, &env, from, txn, false, participants, 0);
            }
            Msg::Push { txn } => {
                let env = env(&self.cluster, &self.opts);
                self.recorder.on_push(ctx, &env, from, txn);
            }
            Msg::Finalized { txn, shard } => self.recorder.on_finalized(ctx, txn, shard),
            Msg::OracleTs { req, high_ns, .. } => {
                self.epochs.on_oracle_ts(ctx, &self.opts, req, high_ns);
            }
            Msg::Validate { txn, epoch, keys } => self.on_validate(ctx, from, txn, epoch, keys),
            Msg::Pull { after } => {
                self.pullers.insert(from, after);
            }
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
                    keys: &self.store.keys,
                    complete: self.complete_epoch(),
                    procedures: &self.procedures,
                };
                self.rep_reads.offer(ctx, &view, read);
            }
            _ => {}
        }
        self.resolve_local(ctx);
        self.replicate(ctx);
    }

    // ---- K2-VCR (§6) ------------------------------------------------------------------

    /// The epoch this primary proposes for a transaction now (0 with K2-VCR off), or
    /// `None` while it has not cut since it started.
    fn proposal(&self) -> Option<u64> {
        if self.opts.epochs_on() {
            self.epochs.current()
        } else {
            Some(0)
        }
    }

    /// The last epoch complete here: cut, and no intent that may still commit in it.
    /// Every version of a commit epoch up to it is final here (an intent's commit epoch
    /// is at least what this primary proposed for it, and intents created later propose
    /// more than the cut).
    fn complete_epoch(&self) -> u64 {
        let open = self.live.values().map(|l| l.epoch).min();
        let cut = self.epochs.cut();
        open.map_or(cut, |e| cut.min(e.saturating_sub(1)))
    }

    /// Answers the held pulls the complete epoch now covers, and the replica reads.
    fn replicate(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        if !self.opts.epochs_on() {
            return;
        }
        let complete = self.complete_epoch();
        let ready: Vec<(NodeId, u64)> = self
            .pullers
            .iter()
            .filter(|(_, after)| **after < complete)
            .map(|(n, a)| (*n, *a))
            .collect();
        for (replica, after) in ready {
            self.pullers.remove(&replica);
            let (complete, versions) = self.versions_between(after, complete);
            let msg = Msg::Replicate {
                after,
                complete,
                versions,
            };
            ctx.send(replica, msg);
        }
        let view = ReadView {
            keys: &self.store.keys,
            complete,
            procedures: &self.procedures,
        };
        self.rep_reads.release(ctx, &view);
    }

    /// The versions of epochs `after+1 ..= complete` (fewer whole epochs if too many).
    fn versions_between(&self, after: u64, complete: u64) -> (u64, Vec<(Key, Version)>) {
        let mut found: Vec<(Key, Version)> = Vec::new();
        if after + 1 < self.indexed_from {
            for (key, state) in &self.store.keys {
                for v in &state.versions {
                    if v.epoch > after && v.epoch <= complete {
                        found.push((key.clone(), v.clone()));
                    }
                }
            }
        } else {
            for (_, entries) in self.by_epoch.range(after + 1..=complete) {
                for (key, ts) in entries {
                    let state = self.store.key(key);
                    let version = state.and_then(|s| s.versions.iter().find(|v| v.ts == *ts));
                    if let Some(v) = version {
                        found.push((key.clone(), v.clone()));
                    }
                }
            }
        }
        found.sort_by_key(|(_, v)| v.epoch);
        if found.len() <= MAX_REPLICATE_VERSIONS {
            return (complete, found);
        }
        // Keep whole epochs: up to the last one that starts within the limit.
        let last = found[MAX_REPLICATE_VERSIONS].1.epoch;
        let cut = found.partition_point(|(_, v)| v.epoch <= last);
        found.truncate(cut);
        (last, found)
    }

    /// A decision the local recorder made settles this node's own intents at once.
    fn resolve_local(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        let decided: Vec<(TxnTs, (bool, u64))> = self
            .pushes
            .keys()
            .filter_map(|t| self.recorder.decision(*t).map(|c| (*t, c)))
            .collect();
        for (txn, (committed, epoch)) in decided {
            self.on_resolve(ctx, self.id, txn, committed, false, epoch);
        }
    }

    fn on_execute(&mut self, ctx: &mut Ctx<'_, K2Node>, from: NodeId, exec: Execute) {
        let (txn, step) = (exec.txn, exec.step);
        let Some(epoch) = self.proposal() else {
            // Restarted and not cut yet: it cannot say which epoch a write would be in.
            ctx.count("k2.execute_before_first_cut", 1);
            let outcome = Err(AbortReason::Failure);
            return ctx.send(
                from,
                Msg::Executed {
                    txn,
                    step,
                    outcome,
                    epoch: 0,
                },
            );
        };
        let reply = |ctx: &mut Ctx<'_, K2Node>, outcome| {
            ctx.send(
                from,
                Msg::Executed {
                    txn,
                    step,
                    outcome,
                    epoch,
                },
            );
        };
        if self.finished.contains_key(&txn) {
            return reply(ctx, Err(AbortReason::Failure));
        }
        if let Some(result) = self.live.get(&txn).and_then(|l| l.results.get(&step)) {
            return reply(ctx, Ok(result.clone()));
        }
        if self
            .waiting
            .iter()
            .any(|w| w.exec.txn == txn && w.exec.step == step)
        {
            return;
        }
        if txn.time_ns.saturating_add(self.opts.max_txn_age_ns()) < ctx.now_ns() {
            ctx.count("k2.execute_too_old", 1);
            return reply(ctx, Err(AbortReason::Timeout));
        }
        self.run(ctx, from, exec);
    }

    /// Attempts a piece; replies, or parks it behind the intents it must push.
    fn run(&mut self, ctx: &mut Ctx<'_, K2Node>, from: NodeId, exec: Execute) {
        if self.finished.contains_key(&exec.txn) {
            // Decided (aborted by its recorder) while this piece waited.
            let (txn, step) = (exec.txn, exec.step);
            let outcome = Err(AbortReason::Failure);
            ctx.send(
                from,
                Msg::Executed {
                    txn,
                    step,
                    outcome,
                    epoch: 0,
                },
            );
            return;
        }
        match self.attempt(ctx, &exec) {
            Attempt::Done(outcome) => {
                let (txn, step) = (exec.txn, exec.step);
                let epoch = self.proposal_after_reads(&exec);
                ctx.send(
                    from,
                    Msg::Executed {
                        txn,
                        step,
                        outcome,
                        epoch,
                    },
                );
            }
            Attempt::Blocked(blockers, push) => {
                if self.waiting.len() >= self.opts.max_waiting_per_node {
                    ctx.count("k2.waiting_overflow", 1);
                    let (txn, step) = (exec.txn, exec.step);
                    let outcome = Err(AbortReason::Conflict);
                    ctx.send(
                        from,
                        Msg::Executed {
                            txn,
                            step,
                            outcome,
                            epoch: 0,
                        },
                    );
                    return;
                }
                ctx.count("k2.pushws", 1);
                for (txn, recorder) in push {
                    self.push(ctx, txn, recorder);
                }
                self.waiting.push(Waiting {
                    from,
                    exec,
                    blockers,
                });
            }
        }
    }

    /// The epoch a piece proposes once run: the commit epoch of every version it read (a
    /// reader of `T`'s write must not land in an epoch before `T`'s) and, if it writes,
    /// the write proposal (`write_proposal`). A piece that only reads proposes nothing of
    /// this primary's own: its epoch does not decide where a write lands here.
    fn proposal_after_reads(&self, exec: &Execute) -> u64 {
        let own = if exec.piece.is_read_only() {
            0
        } else {
            self.write_proposal(&exec.piece.write_keys())
        };
        let read = exec.piece.read_keys().into_iter().filter_map(|key| {
            let state = self.store.key(&key)?;
            let newer = state.versions.partition_point(|v| v.ts <= exec.txn);
            newer.checked_sub(1).map(|i| state.versions[i].epoch)
        });
        read.fold(own, u64::max)
    }

    /// What a write on `keys` proposes (§6.3, Fig. 10 line 10): this primary's current
    /// epoch, raised to the epoch floor of each key (a validated earlier reader or writer
    /// of it must not be serialized in an epoch after this writer's).
    fn write_proposal(&self, keys: &[Key]) -> u64 {
        let own = self.proposal().unwrap_or(0);
        keys.iter()
            .filter_map(|k| self.epoch_floors.get(k))
            .fold(own, |e, f| e.max(*f))
    }

    /// `Validate`: `txn` (timestamp `ts`) will commit in `epoch`, above its timestamp's
    /// ceiling epoch. It may, unless a younger transaction on `keys` committed, or may
    /// still commit, in an earlier epoch: a younger version of an earlier epoch, a younger
    /// intent proposed below `epoch` here, or younger versions pruned away. If it may,
    /// this primary holds every later writer of `keys` at `epoch` or more, and refuses
    /// writers below `ts` on them (as if `txn` had read them), so those later writers are
    /// all younger. The floors and the read floor are persisted before the answer.
    fn on_validate(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        from: NodeId,
        txn: TxnTs,
        epoch: u64,
        keys: Vec<Key>,
    ) {
        let ok = keys.iter().all(|k| self.no_younger_below(k, txn, epoch));
        if ok {
            for key in &keys {
                self.store.record_read(key, txn);
            }
            self.reserve_read_floor(ctx, txn);
            self.raise_floors(&keys, epoch);
            self.persist(ctx, Record::Validated { epoch, keys });
        } else {
            ctx.count("k2.validation_refused", 1);
        }
        let shard = self.shard;
        ctx.send(from, Msg::Validated { txn, shard, ok });
    }

    /// Whether nothing younger than `txn` on `key` has, or may get, an epoch below `epoch`.
    fn no_younger_below(&self, key: &Key, txn: TxnTs, epoch: u64) -> bool {
        let Some(state) = self.store.key(key) else {
            return true;
        };
        let versions_ok = state.pruned_below <= txn
            && state
                .versions
                .iter()
                .all(|v| v.ts <= txn || v.epoch >= epoch);
        let intents_ok = state
            .intents
            .range(txn..)
            .filter(|(t, _)| **t != txn)
            .all(|(t, _)| self.live.get(t).is_some_and(|l| l.epoch >= epoch));
        versions_ok && intents_ok
    }

    fn raise_floors(&mut self, keys: &[Key], epoch: u64) {
        for key in keys {
            let floor = self.epoch_floors.entry(key.clone()).or_insert(0);
            *floor = (*floor).max(epoch);
        }
    }

    fn push(&mut self, ctx: &mut Ctx<'_, K2Node>, txn: TxnTs, recorder: NodeId) {
        if self.pushes.contains_key(&txn) {
            return;
        }
        self.pushes.insert(txn, (recorder, ctx.now_ns()));
        if recorder == self.id {
            // The local recorder: hold the push there, resolved when it decides.
            let env = env(&self.cluster, &self.opts);
            self.recorder.on_push(ctx, &env, self.id, txn);
        } else {
            ctx.send(recorder, Msg::Push { txn });
        }
    }

    fn attempt(&mut self, ctx: &mut Ctx<'_, K2Node>, exec: &Execute) -> Attempt {
        let ts = exec.txn;
        let reads = exec.piece.read_keys();
        let writes = exec.piece.write_keys();
        if !self.opts.unsafe_skip_read_tracking {
            for key in &reads {
                self.store.record_read(key, ts);
            }
            self.reserve_read_floor(ctx, ts);
        }
        let mut blockers = BTreeSet::new();
        let mut push = Vec::new();
        for key in &reads {
            let Some(state) = self.store.key(key) else {
                continue;
            };
            if ts < state.pruned_below || (!self.opts.mv_reads && state.newer_than(ts)) {
                ctx.count("k2.abort_read_too_old", 1);
                return Attempt::Done(Err(AbortReason::Conflict));
            }
            for (other, recorder) in state.undetermined_below(ts) {
                if blockers.insert(other) {
                    push.push((other, recorder));
                }
            }
        }
        for key in &writes {
            if self.store.write_refused(key, ts) {
                ctx.count("k2.abort_write_below_read", 1);
                return Attempt::Done(Err(AbortReason::Conflict));
            }
            if self.opts.mv_writes {
                continue;
            }
            let Some(state) = self.store.key(key) else {
                continue;
            };
            if state.intents.keys().any(|t| *t > ts) {
                ctx.count("k2.abort_younger_intent", 1);
                return Attempt::Done(Err(AbortReason::Conflict));
            }
            for (other, recorder) in state.undetermined_below(ts) {
                if blockers.insert(other) {
                    push.push((other, recorder));
                }
            }
        }
        if !blockers.is_empty() {
            return Attempt::Blocked(blockers, push);
        }
        Attempt::Done(self.execute(ctx, exec))
    }

    fn execute(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        exec: &Execute,
    ) -> Result<PieceResult, AbortReason> {
        let mut inputs: Vec<Option<&PieceResult>> = Vec::new();
        for (index, result) in &exec.inputs {
            let i = usize::from(*index);
            if inputs.len() <= i {
                inputs.resize(i + 1, None);
            }
            inputs[i] = Some(result);
        }
        let mut view = View {
            store: &self.store,
            ts: exec.txn,
            writes: Vec::new(),
        };
        let result = execute_piece(&exec.piece, &inputs, &self.procedures, &mut view)?;
        let writes = view.writes;
        if writes.is_empty() {
            return Ok(result);
        }
        let keys: Vec<Key> = writes.iter().map(|(k, _)| k.clone()).collect();
        let record = IntentRecord {
            txn: exec.txn,
            recorder: exec.recorder,
            step: exec.step,
            writes,
            result: result.clone(),
            epoch: self.write_proposal(&keys),
        };
        let shared = self.add_intents(&record, ctx.now_ns());
        if shared > 0 {
            // Fig. 19's multi-version writes act only here (module doc, "Fig. 19").
            ctx.count("k2.intents_beside_another", shared);
        }
        if exec.recorder == self.id {
            let env = env(&self.cluster, &self.opts);
            self.recorder.open(ctx, &env, exec.txn);
        }
        self.persist(ctx, Record::Intents(Box::new(record)));
        Ok(result)
    }

    /// Adds `record`'s intents; returns how many joined another transaction's intent in
    /// their key's write stream.
    fn add_intents(&mut self, record: &IntentRecord, now_ns: u64) -> u64 {
        let live = self.live.entry(record.txn).or_insert_with(|| LiveTxn {
            recorder: record.recorder,
            epoch: record.epoch,
            results: BTreeMap::new(),
            writes: BTreeMap::new(),
            swept_local_ns: now_ns,
        });
        live.epoch = live.epoch.min(record.epoch);
        live.results.insert(record.step, record.result.clone());
        let mut shared = 0;
        for (key, value) in &record.writes {
            live.writes.insert(key.clone(), value.clone());
            let intent = Intent {
                value: value.clone(),
                recorder: record.recorder,
            };
            let stream = &mut self.store.key_mut(key).intents;
            shared += u64::from(stream.keys().any(|t| *t != record.txn));
            stream.insert(record.txn, intent);
        }
        shared
    }

    /// Persists a read floor ahead of `ts` before a read at `ts` is answered.
    fn reserve_read_floor(&mut self, ctx: &mut Ctx<'_, K2Node>, ts: TxnTs) {
        if ts <= self.read_reserved {
            return;
        }
        let floor = Timestamp::new(ts.time_ns.saturating_add(self.opts.read_floor_ns), 0);
        self.read_reserved = floor;
        self.persist(ctx, Record::ReadFloor(floor));
    }

    /// The decision about `txn` (a push answered, or the recorder finalizing).
    fn on_resolve(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        from: NodeId,
        txn: TxnTs,
        committed: bool,
        ack: bool,
        epoch: u64,
    ) {
        let epoch = if self.opts.unsafe_no_collab_epoch && committed {
            // The broken variant: this participant's own epoch, not the assigned one.
            self.epochs.cut() + 1
        } else {
            epoch
        };
        if self.live.contains_key(&txn) {
            self.finalize(txn, committed, epoch, ctx.now_ns());
            self.persist(
                ctx,
                Record::Finalized {
                    txn,
                    committed,
                    epoch,
                },
            );
        } else {
            self.finished
                .entry(txn)
                .or_insert(Finished { committed, epoch });
        }
        self.pushes.remove(&txn);
        if ack {
            let shard = self.shard;
            if from == self.id {
                self.recorder.on_finalized(ctx, txn, shard);
            } else {
                ctx.send(from, Msg::Finalized { txn, shard });
            }
        }
        self.wake(ctx, txn);
    }

    /// Fig. 10 lines 16-17: the intents become versions of commit epoch `epoch`, or
    /// vanish.
    fn finalize(&mut self, txn: TxnTs, committed: bool, epoch: u64, now_ns: u64) {
        if let Some(live) = self.live.remove(&txn) {
            let version = committed.then_some((epoch, now_ns));
            for key in live.writes.keys() {
                let max = self.opts.max_versions_per_key;
                self.store.key_mut(key).finalize(txn, version, max);
                if committed {
                    self.by_epoch
                        .entry(epoch)
                        .or_default()
                        .push((key.clone(), txn));
                }
            }
        }
        self.finished.insert(txn, Finished { committed, epoch });
    }

    fn wake(&mut self, ctx: &mut Ctx<'_, K2Node>, txn: TxnTs) {
        let mut ready = Vec::new();
        self.waiting.retain_mut(|w| {
            w.blockers.remove(&txn);
            if w.blockers.is_empty() {
                ready.push((w.from, w.exec.clone()));
                false
            } else {
                true
            }
        });
        for (from, exec) in ready {
            self.run(ctx, from, exec);
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, K2Node>, timer: Timer) {
        if let Timer::RecorderDeadline { txn } = timer {
            let env = env(&self.cluster, &self.opts);
            self.recorder.on_deadline(ctx, &env, txn);
            self.resolve_local(ctx);
            return self.replicate(ctx);
        }
        if let Timer::EpochCut { gen } = timer {
            self.epochs.on_timer(ctx, &self.opts, gen);
            return self.replicate(ctx);
        }
        if !matches!(timer, Timer::DataNodeTick) {
            return;
        }
        ctx.set_timer(self.opts.retry_ns, Timer::DataNodeTick);
        let now = ctx.now_ns();
        let retry = self.opts.retry_ns;
        // Re-push what is still undetermined.
        for (txn, (recorder, sent)) in self.pushes.iter_mut() {
            if now.saturating_sub(*sent) >= retry || now < *sent {
                *sent = now;
                if *recorder != self.id {
                    ctx.send(*recorder, Msg::Push { txn: *txn });
                }
            }
        }
        // Intents left behind (a coordinator that failed, a lost finalization) are pushed
        // too: §5.3's asynchronous cleanup, without waiting for a reader.
        let max_age = self.opts.max_txn_age_ns();
        let stale: Vec<(TxnTs, NodeId)> = self
            .live
            .iter_mut()
            .filter(|(t, l)| {
                now.saturating_sub(t.time_ns) > max_age
                    && now.saturating_sub(l.swept_local_ns) >= retry
            })
            .map(|(t, l)| {
                l.swept_local_ns = now;
                (*t, l.recorder)
            })
            .collect();
        for (txn, recorder) in stale {
            ctx.count("k2.stale_intent_push", 1);
            self.push(ctx, txn, recorder);
        }
        self.finished
            .retain(|t, _| now.saturating_sub(t.time_ns) <= 2 * max_age);
        let env = env(&self.cluster, &self.opts);
        self.recorder.tick(ctx, &env);
        self.resolve_local(ctx);
        self.prune_index();
        self.replicate(ctx);
    }

    fn prune_index(&mut self) {
        // A floor no higher than what this primary proposes anyway holds nobody back.
        let own = self.epochs.cut() + 1;
        self.epoch_floors.retain(|_, floor| *floor > own);
        let keep_from = self.complete_epoch().saturating_sub(INDEX_EPOCHS);
        if keep_from > self.indexed_from {
            self.by_epoch = self.by_epoch.split_off(&keep_from);
            self.indexed_from = keep_from;
        }
    }

    /// The epoch floor of `key` (tests).
    #[cfg(test)]
    pub(crate) fn epoch_floor(&self, key: &Key) -> Option<u64> {
        self.epoch_floors.get(key).copied()
    }

    /// The last epoch cut here (tests).
    #[cfg(test)]
    pub(crate) fn epoch_cut(&self) -> u64 {
        self.epochs.cut()
    }

    /// The store (tests).
    #[cfg(test)]
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        self.store.check()?;
        for w in &self.waiting {
            if w.blockers.iter().any(|b| *b >= w.exec.txn) {
                return Err(format!(
                    "{} waits for a transaction not older than itself",
                    w.exec.txn
                ));
            }
        }
        for (txn, live) in &self.live {
            if self.finished.contains_key(txn) {
                return Err(format!("{txn} is both live and finished"));
            }
            for key in live.writes.keys() {
                if !self
                    .store
                    .key(key)
                    .is_some_and(|s| s.intents.contains_key(txn))
                {
                    return Err(format!("{txn} lost its intent on {key:?}"));
                }
            }
        }
        Ok(())
    }
}

/// What the recorder needs from its host.
fn env<'a>(cluster: &'a Cluster, opts: &Options) -> Env<'a> {
    Env {
        cluster,
        max_txn_age_ns: opts.max_txn_age_ns(),
        async_finalize: opts.async_finalize,
    }
}
