//! The data server of one shard: the only copy of the shard's store, its lock table
//! (strict 2PL, WAIT-DIE), buffered execution of pieces, and the participant side of 2PC.

use super::locks::{Acquire, LockMode, LockTable};
use super::options::Options;
use super::wire::{
    Age, Cx, Finished, LocalCommit, LocalOutcome, Msg, PieceRun, PreparedTxn, Record,
    ServerSnapshot, Timer, ToCoord, ToServer,
};
use meridian_core::txn::{execute_piece, AbortReason, KvAccess, PieceResult, Procedures};
use meridian_core::{Key, NodeId, TimerId, TxnId, Value};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// A server's state for one live (unfinished) transaction.
#[derive(Debug)]
struct ServerTxn {
    age: Age,
    one_round: bool,
    prepared: bool,
    /// Locks held, with the strongest mode. Strict 2PL: kept until the decision.
    held: BTreeMap<Key, LockMode>,
    /// Buffered writes; the store sees them only on commit.
    writes: BTreeMap<Key, Value>,
    /// Results of the pieces executed here.
    results: BTreeMap<u16, PieceResult>,
    /// Pieces being executed: locks are taken one by one, then the pieces run.
    batch: Option<Batch>,
    /// Local clock when the coordinator last spoke about this transaction.
    last_heard_ns: u64,
    timer: Option<TimerId>,
}

#[derive(Debug)]
struct Batch {
    runs: Vec<PieceRun>,
    /// Every lock the batch needs, sorted by key; `needs[next]` is the one being acquired.
    needs: Vec<(Key, LockMode)>,
    next: usize,
}

/// The data node of one shard.
#[derive(Debug)]
pub struct Server {
    id: NodeId,
    /// Restarts so far: tags executions (see [`ToCoord::Executed`]).
    incarnation: u32,
    opts: Options,
    procedures: Arc<Procedures>,
    store: FxHashMap<Key, Value>,
    locks: LockTable,
    txns: BTreeMap<TxnId, ServerTxn>,
    /// Recently finished transactions, for idempotent answers to duplicates. Entries below
    /// their coordinator's horizon are dropped: no message about them can matter any more.
    finished: BTreeMap<TxnId, Finished>,
    /// The latest horizon of each coordinator (see [`Msg::ToServer`]).
    horizons: BTreeMap<NodeId, TxnId>,
    /// Transactions granted a lock they were waiting for, to resume before the handler ends.
    wakeups: VecDeque<TxnId>,
    since_checkpoint: usize,
    checkpoint_due: bool,
}

/// The transaction's view while a piece runs: its own buffered writes over the committed
/// store, restricted to the keys it has locked.
struct View<'a> {
    store: &'a FxHashMap<Key, Value>,
    writes: &'a mut BTreeMap<Key, Value>,
    held: &'a BTreeMap<Key, LockMode>,
    /// The first key touched without the lock it needs (a procedure that misdeclared keys).
    undeclared: Option<Key>,
}

impl KvAccess for View<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        if !self.held.contains_key(key) {
            self.undeclared.get_or_insert_with(|| key.clone());
        }
        self.writes
            .get(key)
            .or_else(|| self.store.get(key))
            .cloned()
    }

    fn put(&mut self, key: Key, value: Value) {
        if self.held.get(&key) == Some(&LockMode::Exclusive) {
            self.writes.insert(key, value);
        } else {
            self.undeclared.get_or_insert(key);
        }
    }
}

/// The locks a batch needs: shared for read keys, exclusive for written ones.
fn lock_needs(runs: &[PieceRun]) -> Vec<(Key, LockMode)> {
    let mut needs: BTreeMap<Key, LockMode> = BTreeMap::new();
    for run in runs {
        for key in run.piece.read_keys() {
            needs.entry(key).or_insert(LockMode::Shared);
        }
        for key in run.piece.write_keys() {
            needs.insert(key, LockMode::Exclusive);
        }
    }
    needs.into_iter().collect()
}

/// Runs a batch's pieces in order against the transaction's view.
fn run_batch(
    store: &FxHashMap<Key, Value>,
    procedures: &Procedures,
    t: &mut ServerTxn,
    runs: &[PieceRun],
) -> Result<Vec<(u16, PieceResult)>, AbortReason> {
    let mut out = Vec::with_capacity(runs.len());
    for run in runs {
        let mut inputs: Vec<Option<&PieceResult>> = vec![None; usize::from(run.index)];
        for (piece, result) in run
            .inputs
            .iter()
            .map(|(i, r)| (*i, r))
            .chain(t.results.iter().map(|(i, r)| (*i, r)))
        {
            if let Some(slot) = inputs.get_mut(usize::from(piece)) {
                *slot = Some(result);
            }
        }
        let mut view = View {
            store,
            writes: &mut t.writes,
            held: &t.held,
            undeclared: None,
        };
        let result = execute_piece(&run.piece, &inputs, procedures, &mut view);
        if let Some(key) = view.undeclared {
            return Err(AbortReason::Invalid(format!(
                "piece {} touched key {key:?} without declaring it",
                run.index
            )));
        }
        let result = result?;
        t.results.insert(run.index, result.clone());
        out.push((run.index, result));
    }
    Ok(out)
}

impl Server {
    /// Builds the server from its durable records: the latest checkpoint, then later records.
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        procedures: Arc<Procedures>,
        records: &[Record],
    ) -> Server {
        let mut server = Server {
            id,
            incarnation: 0,
            locks: LockTable::new(opts.max_waiters_per_key),
            opts,
            procedures,
            store: FxHashMap::default(),
            txns: BTreeMap::new(),
            finished: BTreeMap::new(),
            horizons: BTreeMap::new(),
            wakeups: VecDeque::new(),
            since_checkpoint: 0,
            checkpoint_due: false,
        };
        let start = records
            .iter()
            .rposition(|r| matches!(r, Record::ServerCheckpoint(_)));
        let mut prepared = BTreeMap::new();
        if let Some(Record::ServerCheckpoint(snapshot)) = start.map(|i| &records[i]) {
            server.load(snapshot, &mut prepared);
        }
        let tail = &records[start.map_or(0, |i| i + 1)..];
        server.since_checkpoint = tail.len();
        let rebooted = !records.is_empty();
        for record in tail {
            server.replay(record, &mut prepared);
        }
        if rebooted {
            server.incarnation += 1;
        }
        for p in prepared.into_values() {
            server.revive(p);
        }
        server
    }

    fn load(&mut self, snapshot: &ServerSnapshot, prepared: &mut BTreeMap<TxnId, PreparedTxn>) {
        self.store = snapshot.store.iter().cloned().collect();
        self.finished = snapshot.finished.iter().cloned().collect();
        self.horizons = snapshot
            .horizons
            .iter()
            .map(|h| (h.coordinator, *h))
            .collect();
        for p in &snapshot.prepared {
            prepared.insert(p.age.txn, p.clone());
        }
        self.incarnation = snapshot.incarnation;
    }

    fn replay(&mut self, record: &Record, prepared: &mut BTreeMap<TxnId, PreparedTxn>) {
        match record {
            Record::Prepared(p) => {
                prepared.insert(p.age.txn, p.clone());
            }
            Record::Committed {
                txn,
                local: Some(local),
            } => {
                self.store.extend(local.writes.iter().cloned());
                let results = Some(local.results.clone());
                self.finished.insert(*txn, Finished::Committed { results });
            }
            Record::Committed { txn, local: None } => {
                let p = prepared
                    .remove(txn)
                    .unwrap_or_else(|| panic!("log of {}: {txn} committed unprepared", self.id));
                self.store.extend(p.writes);
                self.finished
                    .insert(*txn, Finished::Committed { results: None });
            }
            Record::Aborted { txn, reason } => {
                prepared.remove(txn);
                let reason = reason.clone();
                self.finished.insert(*txn, Finished::Aborted { reason });
            }
            Record::Started { incarnation } => self.incarnation = *incarnation,
            other => panic!("log of server {} holds {other:?}", self.id),
        }
    }

    /// Re-installs a prepared transaction after a restart, with its locks.
    fn revive(&mut self, p: PreparedTxn) {
        let mut held = BTreeMap::new();
        // The unsafe variant released them when it voted; it does not hold them now either.
        if !self.opts.unsafe_early_release {
            for (key, mode) in &p.locks {
                self.locks.restore(key, p.age, *mode);
                held.insert(key.clone(), *mode);
            }
        }
        let txn = ServerTxn {
            age: p.age,
            one_round: false,
            prepared: true,
            held,
            writes: p.writes.into_iter().collect(),
            results: BTreeMap::new(),
            batch: None,
            last_heard_ns: 0,
            timer: None,
        };
        self.txns.insert(p.age.txn, txn);
    }

    /// Logs the incarnation; after a restart, prepared transactions ask for their decision
    /// at once.
    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let incarnation = self.incarnation;
        self.persist(ctx, Record::Started { incarnation });
        let prepared: Vec<TxnId> = self.txns.keys().copied().collect();
        for txn in prepared {
            self.tick(ctx, txn);
        }
        self.settle(ctx);
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, msg: Msg) {
        let Msg::ToServer { horizon, body } = msg else {
            panic!(
                "server {} received a coordinator's message {msg:?}",
                self.id
            );
        };
        self.advance_horizon(ctx, horizon);
        match body {
            ToServer::Execute {
                txn,
                age_ns,
                one_round,
                pieces,
            } => {
                let age = Age {
                    time_ns: age_ns,
                    txn,
                };
                self.on_execute(ctx, age, one_round, pieces);
            }
            ToServer::Prepare {
                txn,
                incarnation,
                pieces,
            } => self.on_prepare(ctx, txn, incarnation, &pieces),
            ToServer::Commit { txn } => self.on_commit(ctx, txn),
            ToServer::Abort { txn } => self.on_abort(ctx, txn),
            ToServer::Resolve { txn } => self.on_resolve(ctx, txn),
        }
        self.settle(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        let Timer::Server(txn) = timer else {
            panic!("server {} fired a coordinator timer {timer:?}", self.id);
        };
        self.tick(ctx, txn);
        self.settle(ctx);
    }

    // ---- horizon and idempotence -------------------------------------------------------

    fn below_horizon(&self, txn: TxnId) -> bool {
        self.horizons
            .get(&txn.coordinator)
            .is_some_and(|h| txn < *h)
    }

    /// Learns that everything of `horizon.coordinator` below `horizon` is decided: forgets
    /// those finished transactions and aborts those still unprepared here (they can no
    /// longer commit: the coordinator decided without this server's yes vote).
    fn advance_horizon(&mut self, ctx: &mut Cx<'_>, horizon: TxnId) {
        let coordinator = horizon.coordinator;
        let current = self.horizons.entry(coordinator).or_insert(horizon);
        if horizon > *current {
            *current = horizon;
        }
        let range = TxnId {
            coordinator,
            seq: 0,
        }..*current;
        let forgotten: Vec<TxnId> = self
            .finished
            .range(range.clone())
            .map(|(t, _)| *t)
            .collect();
        for txn in forgotten {
            self.finished.remove(&txn);
        }
        let doomed: Vec<TxnId> = self
            .txns
            .range(range)
            .filter(|(_, t)| !t.prepared)
            .map(|(txn, _)| *txn)
            .collect();
        for txn in doomed {
            self.abort_txn(ctx, txn, AbortReason::Failure, false);
        }
    }

    fn remember(&mut self, txn: TxnId, finished: Finished) {
        if !self.below_horizon(txn) {
            self.finished.insert(txn, finished);
        }
    }

    fn reply(&self, ctx: &mut Cx<'_>, txn: TxnId, body: ToCoord) {
        ctx.send(txn.coordinator, Msg::ToCoord(body));
    }

    /// Answers a retransmitted EXECUTE of a finished transaction.
    fn reply_finished(&self, ctx: &mut Cx<'_>, txn: TxnId, one_round: bool, f: Finished) {
        let body = match (one_round, f) {
            (true, Finished::Committed { results: Some(r) }) => ToCoord::Done {
                txn,
                outcome: LocalOutcome::Committed(r),
            },
            (true, Finished::Aborted { reason }) => ToCoord::Done {
                txn,
                outcome: LocalOutcome::Aborted(reason),
            },
            (false, Finished::Aborted { reason }) => ToCoord::Failed { txn, reason },
            // A committed 2PC transaction: the EXECUTE is stale, its coordinator is past it.
            _ => return,
        };
        self.reply(ctx, txn, body);
    }

    fn reply_executed(&self, ctx: &mut Cx<'_>, txn: TxnId, results: Vec<(u16, PieceResult)>) {
        let incarnation = self.incarnation;
        let body = ToCoord::Executed {
            txn,
            incarnation,
            results,
        };
        self.reply(ctx, txn, body);
    }

    // ---- execution ---------------------------------------------------------------------

    fn on_execute(&mut self, ctx: &mut Cx<'_>, age: Age, one_round: bool, pieces: Vec<PieceRun>) {
        let txn = age.txn;
        if let Some(f) = self.finished.get(&txn) {
            return self.reply_finished(ctx, txn, one_round, f.clone());
        }
        if !self.txns.contains_key(&txn) {
            if self.below_horizon(txn) {
                return; // a stale duplicate of a decided transaction
            }
            let timer = ctx.set_timer(self.opts.idle_timeout_ns, Timer::Server(txn));
            self.txns.insert(
                txn,
                ServerTxn {
                    age,
                    one_round,
                    prepared: false,
                    held: BTreeMap::new(),
                    writes: BTreeMap::new(),
                    results: BTreeMap::new(),
                    batch: None,
                    last_heard_ns: ctx.now_ns(),
                    timer: Some(timer),
                },
            );
        }
        let t = self.txns.get_mut(&txn).expect("just ensured");
        t.last_heard_ns = ctx.now_ns();
        if t.prepared || t.batch.is_some() {
            return; // a retransmission of what is already under way
        }
        let (done, todo): (Vec<PieceRun>, Vec<PieceRun>) = pieces
            .into_iter()
            .partition(|run| t.results.contains_key(&run.index));
        if todo.is_empty() {
            // The reply was lost: send the results again.
            let results = done
                .iter()
                .map(|run| (run.index, t.results[&run.index].clone()))
                .collect();
            return self.reply_executed(ctx, txn, results);
        }
        let needs = lock_needs(&todo);
        t.batch = Some(Batch {
            runs: todo,
            needs,
            next: 0,
        });
        self.advance(ctx, txn);
    }

    /// Takes the batch's remaining locks in order; runs the batch once it has them all.
    fn advance(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        loop {
            let t = self
                .txns
                .get_mut(&txn)
                .expect("advancing a live transaction");
            let batch = t.batch.as_mut().expect("advancing needs a batch");
            let Some((key, mode)) = batch.needs.get(batch.next).cloned() else {
                break;
            };
            match self.locks.acquire(&key, t.age, mode) {
                Acquire::Granted => {
                    batch.next += 1;
                    let held = t.held.entry(key).or_insert(mode);
                    *held = (*held).max(mode);
                }
                Acquire::Waiting => return,
                Acquire::Die | Acquire::QueueFull => {
                    return self.abort_txn(ctx, txn, AbortReason::Conflict, true);
                }
            }
        }
        self.execute_batch(ctx, txn);
    }

    /// A lock `txn` waited for was granted: record it and keep going.
    fn on_granted(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self.txns.get_mut(&txn).expect("a granted waiter is live");
        let batch = t.batch.as_mut().expect("a granted waiter has a batch");
        let (key, mode) = batch.needs[batch.next].clone();
        assert!(
            self.locks.mode(&key, txn) >= Some(mode),
            "{txn} was woken without its lock on {key:?}"
        );
        batch.next += 1;
        let held = t.held.entry(key).or_insert(mode);
        *held = (*held).max(mode);
        self.advance(ctx, txn);
    }

    fn execute_batch(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self
            .txns
            .get_mut(&txn)
            .expect("executing a live transaction");
        let batch = t.batch.take().expect("executing a batch");
        match run_batch(&self.store, &self.procedures, t, &batch.runs) {
            Err(reason) => self.abort_txn(ctx, txn, reason, true),
            Ok(_) if t.one_round => self.commit_local(ctx, txn),
            Ok(results) => self.reply_executed(ctx, txn, results),
        }
    }

    /// One-round commit of a single-shard transaction: apply, log, release, answer.
    fn commit_local(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self
            .txns
            .remove(&txn)
            .expect("committing a live transaction");
        assert!(
            t.results.keys().copied().eq(0..t.results.len() as u16),
            "{txn}: a one-round commit without every piece's result"
        );
        let results: Vec<PieceResult> = t.results.into_values().collect();
        let writes: Vec<(Key, Value)> = t.writes.into_iter().collect();
        self.store.extend(writes.iter().cloned());
        let local = LocalCommit {
            writes,
            results: results.clone(),
        };
        self.persist(
            ctx,
            Record::Committed {
                txn,
                local: Some(local),
            },
        );
        self.release_all(txn, t.held.keys());
        if let Some(timer) = t.timer {
            ctx.cancel_timer(timer);
        }
        let finished = Finished::Committed {
            results: Some(results.clone()),
        };
        self.remember(txn, finished);
        let outcome = LocalOutcome::Committed(results);
        self.reply(ctx, txn, ToCoord::Done { txn, outcome });
    }

    // ---- two-phase commit --------------------------------------------------------------

    fn on_prepare(&mut self, ctx: &mut Cx<'_>, txn: TxnId, incarnation: u32, pieces: &[u16]) {
        let yes = match self.txns.get_mut(&txn) {
            Some(t) if t.prepared => true,
            Some(t) => {
                t.last_heard_ns = ctx.now_ns();
                // Yes only with the locks and results of exactly the pieces the coordinator
                // holds, from the same execution: a restart may have cost some of them, or
                // a late duplicate EXECUTE may have re-run them against a changed store.
                let complete = incarnation == self.incarnation
                    && !t.one_round
                    && t.batch.is_none()
                    && t.results.keys().copied().eq(pieces.iter().copied());
                if complete {
                    self.prepare(ctx, txn);
                } else {
                    self.abort_txn(ctx, txn, AbortReason::Failure, false);
                }
                complete
            }
            None => matches!(self.finished.get(&txn), Some(Finished::Committed { .. })),
        };
        self.reply(ctx, txn, ToCoord::Vote { txn, yes });
    }

    fn prepare(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = &self.txns[&txn];
        let record = PreparedTxn {
            age: t.age,
            locks: t.held.iter().map(|(k, m)| (k.clone(), *m)).collect(),
            writes: t
                .writes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        // Write-ahead: the vote promises to commit even after a crash.
        self.persist(ctx, Record::Prepared(record));
        let t = self
            .txns
            .get_mut(&txn)
            .expect("preparing a live transaction");
        t.prepared = true;
        if let Some(timer) = t.timer.take() {
            ctx.cancel_timer(timer);
        }
        t.timer = Some(ctx.set_timer(self.opts.query_ns, Timer::Server(txn)));
        if self.opts.unsafe_early_release {
            // THE DELIBERATE BUG (test-only): give up the locks at the vote, before the
            // decision installs the writes.
            let held = std::mem::take(&mut t.held);
            self.release_all(txn, held.keys());
        }
    }

    fn on_commit(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        match self.txns.get(&txn) {
            Some(t) => {
                assert!(
                    t.prepared,
                    "COMMIT of {txn}, which {} never prepared",
                    self.id
                );
                self.commit_prepared(ctx, txn);
            }
            None => assert!(
                matches!(self.finished.get(&txn), Some(Finished::Committed { .. }))
                    || (!self.finished.contains_key(&txn) && self.below_horizon(txn)),
                "COMMIT of {txn}, which {} did not commit",
                self.id
            ),
        }
        self.reply(ctx, txn, ToCoord::CommitAck { txn });
    }

    fn commit_prepared(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self
            .txns
            .remove(&txn)
            .expect("committing a live transaction");
        self.store.extend(t.writes);
        self.persist(ctx, Record::Committed { txn, local: None });
        self.release_all(txn, t.held.keys());
        if let Some(timer) = t.timer {
            ctx.cancel_timer(timer);
        }
        self.remember(txn, Finished::Committed { results: None });
    }

    fn on_abort(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        if self.txns.contains_key(&txn) {
            self.abort_txn(ctx, txn, AbortReason::Failure, false);
        } else if !self.finished.contains_key(&txn) {
            // Remembered so that a late EXECUTE does not start it again.
            let reason = AbortReason::Failure;
            self.remember(txn, Finished::Aborted { reason });
        }
    }

    fn on_resolve(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        if let Some(f) = self.finished.get(&txn) {
            return self.reply_finished(ctx, txn, true, f.clone());
        }
        if self.txns.contains_key(&txn) {
            return self.abort_txn(ctx, txn, AbortReason::Timeout, true);
        }
        // Never seen: pin the abort so that a late EXECUTE cannot commit it.
        let reason = AbortReason::Timeout;
        self.persist(
            ctx,
            Record::Aborted {
                txn,
                reason: reason.clone(),
            },
        );
        self.remember(
            txn,
            Finished::Aborted {
                reason: reason.clone(),
            },
        );
        let outcome = LocalOutcome::Aborted(reason);
        self.reply(ctx, txn, ToCoord::Done { txn, outcome });
    }

    /// Aborts a live transaction here: drops its buffered writes, releases its locks (and
    /// its place in a queue), and tells the coordinator if `notify`.
    fn abort_txn(&mut self, ctx: &mut Cx<'_>, txn: TxnId, reason: AbortReason, notify: bool) {
        let Some(t) = self.txns.remove(&txn) else {
            return;
        };
        let mut keys: Vec<&Key> = t.held.keys().collect();
        if let Some((waiting, _)) = t.batch.as_ref().and_then(|b| b.needs.get(b.next)) {
            keys.push(waiting);
        }
        self.release_all(txn, keys);
        if let Some(timer) = t.timer {
            ctx.cancel_timer(timer);
        }
        // A prepared abort must survive a restart (else the restart would revive it); a
        // one-round abort too, since its coordinator reports it to the client as final.
        if t.prepared || (t.one_round && !self.below_horizon(txn)) {
            let reason = reason.clone();
            self.persist(ctx, Record::Aborted { txn, reason });
        }
        self.remember(
            txn,
            Finished::Aborted {
                reason: reason.clone(),
            },
        );
        if notify {
            let body = if t.one_round {
                let outcome = LocalOutcome::Aborted(reason);
                ToCoord::Done { txn, outcome }
            } else {
                ToCoord::Failed { txn, reason }
            };
            self.reply(ctx, txn, body);
        }
    }

    fn release_all<'k>(&mut self, txn: TxnId, keys: impl IntoIterator<Item = &'k Key>) {
        for key in keys {
            let granted = self.locks.release(key, txn);
            self.wakeups.extend(granted);
        }
    }

    // ---- timers, log, checkpoints ------------------------------------------------------

    /// A prepared transaction asks for the decision (2PC blocks until it hears one); an
    /// unprepared one that has heard nothing for `idle_timeout` gives up.
    fn tick(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        if t.prepared {
            t.timer = Some(ctx.set_timer(self.opts.query_ns, Timer::Server(txn)));
            return self.reply(ctx, txn, ToCoord::Query { txn });
        }
        let idle = ctx.now_ns().saturating_sub(t.last_heard_ns);
        if idle >= self.opts.idle_timeout_ns {
            return self.abort_txn(ctx, txn, AbortReason::Timeout, true);
        }
        let left = self.opts.idle_timeout_ns - idle;
        t.timer = Some(ctx.set_timer(left, Timer::Server(txn)));
    }

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
        // A checkpoint copies the whole store; spacing them at least a store's size apart
        // keeps their cost amortized O(1) per record however large the store grows.
        if self.since_checkpoint >= self.opts.checkpoint_every.max(self.store.len()) {
            self.checkpoint_due = true;
        }
    }

    /// Ends every handler: resumes woken waiters, then writes a due checkpoint — only now,
    /// when the state is consistent with every record written so far.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        while let Some(txn) = self.wakeups.pop_front() {
            self.on_granted(ctx, txn);
        }
        if self.checkpoint_due {
            ctx.checkpoint(Record::ServerCheckpoint(Box::new(self.snapshot())));
            self.since_checkpoint = 0;
            self.checkpoint_due = false;
        }
    }

    fn snapshot(&self) -> ServerSnapshot {
        let mut store: Vec<(Key, Value)> = self
            .store
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        store.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let prepared = self
            .txns
            .values()
            .filter(|t| t.prepared)
            .map(|t| PreparedTxn {
                age: t.age,
                locks: t.held.iter().map(|(k, m)| (k.clone(), *m)).collect(),
                writes: t
                    .writes
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
            .collect();
        ServerSnapshot {
            store,
            prepared,
            finished: self.finished.iter().map(|(t, f)| (*t, f.clone())).collect(),
            horizons: self.horizons.values().copied().collect(),
            incarnation: self.incarnation,
        }
    }
}

#[cfg(test)]
impl Server {
    pub(crate) fn value(&self, key: &[u8]) -> Option<&Value> {
        self.store.get(key)
    }

    pub(crate) fn is_prepared(&self, txn: TxnId) -> bool {
        self.txns.get(&txn).is_some_and(|t| t.prepared)
    }

    pub(crate) fn idle(&self) -> bool {
        self.txns.is_empty() && self.locks.is_empty()
    }

    pub(crate) fn lock_mode(&self, key: &[u8], txn: TxnId) -> Option<LockMode> {
        self.locks.mode(&Key::copy_from_slice(key), txn)
    }

    pub(crate) fn waiters(&self, key: &[u8]) -> usize {
        self.locks.waiters(&Key::copy_from_slice(key))
    }

    pub(crate) fn store_snapshot(&self) -> Vec<(Key, Value)> {
        self.snapshot().store
    }
}
