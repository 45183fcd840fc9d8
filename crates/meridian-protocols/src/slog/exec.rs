//! Deterministic execution at one shard replica (SLOG §3, Calvin's scheduler): the
//! region's log, in order, through the lock manager; a transaction's pieces on this shard
//! run once it holds all their locks and has the remote inputs they consume; its locks go
//! once those pieces finish (DAST §6's "release once its pieces finish").

use super::locks::LockTable;
use super::wire::{Entry, Msg, PieceOutcome, TxnKey};
use super::SlogNode;
use meridian_core::node::Ctx;
use meridian_core::txn::{execute_piece, Key, KvAccess, PieceResult, Procedures, Value};
use meridian_core::{Cluster, NodeId, ShardId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// How many of the latest finished transactions' outcomes a snapshot keeps (a restarted
/// node answers peers' queries about older ones no more; the shard's other replicas do).
const SNAPSHOT_FINISHED: usize = 4096;

/// A transaction with pieces on this shard, from its place in the log to its last piece.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Running {
    entry: Entry,
    /// Its locks on this shard, sorted (`true` = exclusive).
    keys: Vec<(Key, bool)>,
    /// Its pieces on this shard, in piece order, and how many have run.
    mine: Vec<u16>,
    next: usize,
    granted: bool,
    /// The pieces' writes, applied to the store only if none of them fails.
    writes: FxHashMap<Key, Value>,
    outcomes: Vec<(u16, PieceOutcome)>,
    /// Since when the next piece has waited for a remote input, or (once `done`) the
    /// locks for the other shards to finish (0: not waiting).
    waiting_since_ns: u64,
    /// All its pieces here ran (their writes are in the store, the coordinator told).
    done: bool,
    /// The transaction's other shards, and those known to have run their pieces.
    others: Vec<ShardId>,
    heard: BTreeSet<ShardId>,
}

/// The executor of one edge node: its shard's store and lock manager.
#[derive(Debug)]
pub struct Executor {
    shard: ShardId,
    cluster: Arc<Cluster>,
    procedures: Arc<Procedures>,
    store: FxHashMap<Key, Value>,
    locks: LockTable,
    next_seq: u64,
    running: BTreeMap<u64, Running>,
    seq_of: FxHashMap<TxnKey, u64>,
    /// Remote inputs received, until their consumer finishes.
    inputs: FxHashMap<(TxnKey, u16), PieceOutcome>,
    /// Finished transactions' outcomes here (answers to peers' queries), the oldest first
    /// out once `kept` are held.
    finished: FxHashMap<TxnKey, Vec<(u16, PieceOutcome)>>,
    finished_order: VecDeque<TxnKey>,
    kept: usize,
    /// Locks go when this shard's pieces finish (DAST §6), not when every shard's have.
    release_on_pieces: bool,
    /// Shards that finished a transaction not yet scheduled here.
    early: FxHashMap<TxnKey, BTreeSet<ShardId>>,
}

/// An executor's state in a snapshot of its node (`edge.rs`): what it holds after applying
/// the region's log up to one command. The lock table is not in it: it is the running
/// transactions' requests in log order, rebuilt from them.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExecState {
    store: Vec<(Key, Value)>,
    next_seq: u64,
    running: Vec<(u64, Running)>,
    inputs: Vec<((TxnKey, u16), PieceOutcome)>,
    finished: Vec<(TxnKey, Vec<(u16, PieceOutcome)>)>,
    early: Vec<(TxnKey, BTreeSet<ShardId>)>,
}

/// A piece's view of the store: reads see the transaction's own earlier writes.
struct Overlay<'a> {
    base: &'a FxHashMap<Key, Value>,
    writes: &'a mut FxHashMap<Key, Value>,
}

impl KvAccess for Overlay<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        // Not `self.writes.get`: on a `&mut` map that would be `KvAccess::get`.
        let writes: &FxHashMap<Key, Value> = self.writes;
        writes.get(key).or_else(|| self.base.get(key)).cloned()
    }
    fn put(&mut self, key: Key, value: Value) {
        self.writes.insert(key, value);
    }
}

impl Executor {
    pub fn new(
        shard: ShardId,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        kept: usize,
        release_on_pieces: bool,
    ) -> Executor {
        Executor {
            shard,
            cluster,
            procedures,
            store: FxHashMap::default(),
            locks: LockTable::default(),
            next_seq: 0,
            running: BTreeMap::new(),
            seq_of: FxHashMap::default(),
            inputs: FxHashMap::default(),
            finished: FxHashMap::default(),
            finished_order: VecDeque::new(),
            kept,
            release_on_pieces,
            early: FxHashMap::default(),
        }
    }

    /// The next transaction of the log: requests its locks here (if it has pieces here).
    pub fn schedule(&mut self, ctx: &mut Ctx<'_, SlogNode>, entry: Entry) {
        let mine: Vec<u16> = (0..entry.txn.pieces.len() as u16)
            .filter(|&p| entry.txn.pieces[usize::from(p)].shard == self.shard)
            .collect();
        if mine.is_empty()
            || self.seq_of.contains_key(&entry.key)
            || self.finished.contains_key(&entry.key)
        {
            return;
        }
        let mut locks: BTreeMap<Key, bool> = BTreeMap::new();
        for &p in &mine {
            entry.txn.pieces[usize::from(p)].for_each_key(|k, write| {
                *locks.entry(k.clone()).or_default() |= write;
            });
        }
        let keys: Vec<(Key, bool)> = locks.into_iter().collect();
        self.next_seq += 1;
        let seq = self.next_seq;
        let granted = self.locks.acquire(seq, &keys);
        self.seq_of.insert(entry.key, seq);
        let others: Vec<ShardId> = entry
            .txn
            .shards()
            .into_iter()
            .filter(|&s| s != self.shard)
            .collect();
        let heard = self.early.remove(&entry.key).unwrap_or_default();
        self.running.insert(
            seq,
            Running {
                entry,
                keys,
                mine,
                next: 0,
                granted,
                writes: FxHashMap::default(),
                outcomes: Vec::new(),
                waiting_since_ns: 0,
                done: false,
                others,
                heard,
            },
        );
        if granted {
            self.pump(ctx, vec![seq]);
        }
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// This executor's state, for a snapshot (the store, inputs and early news sorted).
    pub fn state(&self) -> ExecState {
        let store = crate::kit::log::sorted_entries(&self.store);
        let running = self
            .running
            .iter()
            .map(|(seq, r)| (*seq, r.clone()))
            .collect();
        let mut inputs: Vec<_> = self.inputs.iter().map(|(k, o)| (*k, o.clone())).collect();
        inputs.sort_by_key(|(k, _)| *k);
        let skip = self.finished_order.len().saturating_sub(SNAPSHOT_FINISHED);
        let finished = self
            .finished_order
            .iter()
            .skip(skip)
            .filter_map(|k| self.finished.get(k).map(|o| (*k, o.clone())))
            .collect();
        let mut early: Vec<_> = self.early.iter().map(|(k, s)| (*k, s.clone())).collect();
        early.sort_by_key(|(k, _)| *k);
        ExecState {
            store,
            next_seq: self.next_seq,
            running,
            inputs,
            finished,
            early,
        }
    }

    /// Becomes `s` (a snapshot of this node's own executor): the lock table is rebuilt
    /// from the running transactions' requests, in log order.
    pub fn load(&mut self, s: ExecState) {
        self.store = s.store.into_iter().collect();
        self.next_seq = s.next_seq;
        self.locks = LockTable::default();
        self.running = BTreeMap::new();
        self.seq_of = FxHashMap::default();
        for (seq, mut r) in s.running {
            self.locks.acquire(seq, &r.keys);
            r.granted = self.locks.granted(seq, &r.keys);
            self.seq_of.insert(r.entry.key, seq);
            self.running.insert(seq, r);
        }
        self.inputs = s.inputs.into_iter().collect();
        self.finished = FxHashMap::default();
        self.finished_order = VecDeque::new();
        for (key, outcomes) in s.finished {
            self.finished.insert(key, outcomes);
            self.finished_order.push_back(key);
        }
        self.early = s.early.into_iter().collect();
    }

    /// After a snapshot is loaded and the inputs received since are back: runs whatever
    /// can run.
    pub fn resume(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        let granted: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.granted)
            .map(|(seq, _)| *seq)
            .rev()
            .collect();
        self.pump(ctx, granted);
    }

    /// Persists every input held again: a compaction's checkpoint replaces the records of
    /// those received since the snapshot it holds was taken.
    pub fn persist_inputs(&self, ctx: &mut Ctx<'_, SlogNode>) {
        let mut inputs: Vec<_> = self.inputs.iter().collect();
        inputs.sort_by_key(|(k, _)| **k);
        for (&(key, piece), outcome) in inputs {
            let outcome = outcome.clone();
            ctx.persist(super::wire::Record::Input {
                key,
                piece,
                outcome,
            });
        }
    }

    /// A remote input; returns whether it was new (the caller persists it then).
    pub fn on_input(
        &mut self,
        ctx: &mut Ctx<'_, SlogNode>,
        key: TxnKey,
        piece: u16,
        outcome: PieceOutcome,
    ) -> bool {
        if self.finished.contains_key(&key) || self.inputs.contains_key(&(key, piece)) {
            return false;
        }
        self.inputs.insert((key, piece), outcome);
        if let Some(&seq) = self.seq_of.get(&key) {
            self.pump(ctx, vec![seq]);
        }
        true
    }

    /// A restarted node's inputs, from its records, before its log replays.
    pub fn restore_input(&mut self, key: TxnKey, piece: u16, outcome: PieceOutcome) {
        self.inputs.insert((key, piece), outcome);
    }

    /// A peer asks for a piece's outcome it missed: answered if this node still has it.
    pub fn on_query(&self, ctx: &mut Ctx<'_, SlogNode>, from: NodeId, key: TxnKey, piece: u16) {
        let found = self
            .finished
            .get(&key)
            .and_then(|o| o.iter().find(|(p, _)| *p == piece))
            .or_else(|| {
                let seq = self.seq_of.get(&key)?;
                let r = self.running.get(seq)?;
                r.outcomes.iter().find(|(p, _)| *p == piece)
            });
        if let Some((_, outcome)) = found {
            let outcome = outcome.clone();
            ctx.send(
                from,
                Msg::Input {
                    key,
                    piece,
                    outcome,
                },
            );
        }
    }

    /// Asks again for inputs waited on for `retry_ns` (lost, or sent while this node was down).
    pub fn tick(&mut self, ctx: &mut Ctx<'_, SlogNode>, retry_ns: u64) {
        let now = ctx.now_ns();
        let mut queries = Vec::new();
        let mut finish_queries = Vec::new();
        for r in self.running.values_mut() {
            if r.waiting_since_ns == 0 || now.saturating_sub(r.waiting_since_ns) < retry_ns {
                continue;
            }
            r.waiting_since_ns = now;
            if r.done {
                let missing = r.others.iter().filter(|s| !r.heard.contains(s));
                finish_queries.extend(missing.map(|&s| (s, r.entry.key)));
                continue;
            }
            let p = r.mine[r.next];
            for d in r.entry.txn.pieces[usize::from(p)].dependencies() {
                let source = r.entry.txn.pieces[usize::from(d)].shard;
                if source != self.shard && !self.inputs.contains_key(&(r.entry.key, d)) {
                    queries.push((source, r.entry.key, d));
                }
            }
        }
        for (source, key, piece) in queries {
            let replicas = self.cluster.replicas(source).to_vec();
            ctx.multicast(replicas, &Msg::InputQuery { key, piece });
        }
        for (shard, key) in finish_queries {
            let replicas = self.cluster.replicas(shard).to_vec();
            ctx.multicast(replicas, &Msg::FinishedQuery { key });
        }
    }

    /// Another shard ran its pieces of `key`.
    pub fn on_finished(&mut self, ctx: &mut Ctx<'_, SlogNode>, key: TxnKey, shard: ShardId) {
        match self.seq_of.get(&key) {
            Some(&seq) => {
                if let Some(r) = self.running.get_mut(&seq) {
                    r.heard.insert(shard);
                }
                self.pump(ctx, vec![seq]);
            }
            None if self.finished.contains_key(&key) => {}
            None => {
                self.early.entry(key).or_default().insert(shard);
            }
        }
    }

    /// A peer asks whether this shard ran its pieces of `key`.
    pub fn on_finished_query(&self, ctx: &mut Ctx<'_, SlogNode>, from: NodeId, key: TxnKey) {
        let running_done = self
            .seq_of
            .get(&key)
            .and_then(|seq| self.running.get(seq))
            .is_some_and(|r| r.done);
        if running_done || self.finished.contains_key(&key) {
            let shard = self.shard;
            ctx.send(from, Msg::Finished { key, shard });
        }
    }

    /// Runs what can run, starting from `work`, and whatever the locks it frees let run.
    fn pump(&mut self, ctx: &mut Ctx<'_, SlogNode>, mut work: Vec<u64>) {
        while let Some(seq) = work.pop() {
            if !self.advance(ctx, seq) {
                continue;
            }
            if !self.running.get(&seq).is_some_and(|r| r.done) {
                self.complete(ctx, seq);
            }
            if !self.releasable(seq) {
                continue;
            }
            let Some(r) = self.running.remove(&seq) else {
                continue;
            };
            self.seq_of.remove(&r.entry.key);
            for next in self.locks.release(seq, &r.keys).into_iter().rev() {
                let Some(n) = self.running.get_mut(&next) else {
                    continue;
                };
                if !n.granted && self.locks.granted(next, &n.keys) {
                    n.granted = true;
                    work.push(next);
                }
            }
        }
    }

    /// Runs `seq`'s next pieces while their inputs are in; true once all have run.
    fn advance(&mut self, ctx: &mut Ctx<'_, SlogNode>, seq: u64) -> bool {
        let shard = self.shard;
        let Some(r) = self.running.get_mut(&seq) else {
            return false;
        };
        if !r.granted {
            return false;
        }
        if r.done {
            return true;
        }
        while r.next < r.mine.len() {
            let p = r.mine[r.next];
            let piece = &r.entry.txn.pieces[usize::from(p)];
            let Some(inputs) = gather(r, &self.inputs, shard, p) else {
                if r.waiting_since_ns == 0 {
                    r.waiting_since_ns = ctx.now_ns().max(1);
                }
                return false;
            };
            r.waiting_since_ns = 0;
            let failed_input = inputs.iter().flatten().find_map(|o| o.as_ref().err());
            let outcome = match failed_input {
                Some(reason) => Err(reason.clone()),
                // After a failure here, this shard's writes are discarded anyway.
                None if r.outcomes.iter().any(|(_, o)| o.is_err()) => Err(r
                    .outcomes
                    .iter()
                    .find_map(|(_, o)| o.clone().err())
                    .unwrap()),
                None => {
                    let refs: Vec<Option<&PieceResult>> = inputs
                        .iter()
                        .map(|o| o.as_ref().and_then(|o| o.as_ref().ok()))
                        .collect();
                    let mut overlay = Overlay {
                        base: &self.store,
                        writes: &mut r.writes,
                    };
                    execute_piece(piece, &refs, &self.procedures, &mut overlay)
                }
            };
            send_to_dependents(ctx, &self.cluster, &r.entry, shard, p, &outcome);
            r.outcomes.push((p, outcome));
            r.next += 1;
        }
        true
    }

    /// Whether `seq`'s locks may go: its pieces here ran, and (unless locks go with the
    /// pieces) every other shard's ran too, so the transaction held all its locks at once
    /// (strong strict 2PL's lock point, which strict serializability needs).
    fn releasable(&self, seq: u64) -> bool {
        self.running.get(&seq).is_some_and(|r| {
            r.done && (self.release_on_pieces || r.others.iter().all(|s| r.heard.contains(s)))
        })
    }

    /// `seq` ran all its pieces here: its writes go to the store (unless one failed), its
    /// results to the coordinator, the news to its other shards.
    fn complete(&mut self, ctx: &mut Ctx<'_, SlogNode>, seq: u64) {
        let Some(r) = self.running.get_mut(&seq) else {
            return;
        };
        r.done = true;
        r.waiting_since_ns = ctx.now_ns().max(1);
        if r.outcomes.iter().all(|(_, o)| o.is_ok()) {
            self.store.extend(r.writes.drain());
        }
        for &p in &r.mine {
            for d in r.entry.txn.pieces[usize::from(p)].dependencies() {
                self.inputs.remove(&(r.entry.key, d));
            }
        }
        let key = r.entry.key;
        ctx.send(
            key.coordinator,
            Msg::Results {
                key,
                pieces: r.outcomes.clone(),
            },
        );
        if !self.release_on_pieces {
            let msg = Msg::Finished {
                key,
                shard: self.shard,
            };
            for &s in &r.others {
                ctx.multicast(self.cluster.replicas(s).iter().copied(), &msg);
            }
        }
        self.finished.insert(key, r.outcomes.clone());
        self.finished_order.push_back(key);
        while self.finished_order.len() > self.kept {
            if let Some(old) = self.finished_order.pop_front() {
                self.finished.remove(&old);
            }
        }
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        if self.seq_of.len() != self.running.len() {
            return Err(format!(
                "slog executor: {} keys for {} running transactions",
                self.seq_of.len(),
                self.running.len()
            ));
        }
        Ok(())
    }
}

/// The outcomes of the pieces `p` consumes, indexed by piece (None where it consumes
/// nothing), or None while a remote one is missing.
fn gather(
    r: &Running,
    inputs: &FxHashMap<(TxnKey, u16), PieceOutcome>,
    shard: ShardId,
    p: u16,
) -> Option<Vec<Option<PieceOutcome>>> {
    let mut all: Vec<Option<PieceOutcome>> = vec![None; usize::from(p)];
    for d in r.entry.txn.pieces[usize::from(p)].dependencies() {
        let outcome = if r.entry.txn.pieces[usize::from(d)].shard == shard {
            r.outcomes.iter().find(|(q, _)| *q == d).map(|(_, o)| o)
        } else {
            inputs.get(&(r.entry.key, d))
        };
        all[usize::from(d)] = Some(outcome?.clone());
    }
    Some(all)
}

/// Sends piece `p`'s outcome to the replicas of every other shard with a piece consuming it.
fn send_to_dependents(
    ctx: &mut Ctx<'_, SlogNode>,
    cluster: &Cluster,
    entry: &Entry,
    shard: ShardId,
    p: u16,
    outcome: &PieceOutcome,
) {
    let mut shards: Vec<ShardId> = entry
        .txn
        .pieces
        .iter()
        .filter(|q| q.shard != shard && q.dependencies().contains(&p))
        .map(|q| q.shard)
        .collect();
    shards.sort_unstable();
    shards.dedup();
    for s in shards {
        let msg = Msg::Input {
            key: entry.key,
            piece: p,
            outcome: outcome.clone(),
        };
        ctx.multicast(cluster.replicas(s).iter().copied(), &msg);
    }
}
