//! The data server of one shard: the only copy of the shard's store, its lock table
//! (strict 2PL, WAIT-DIE or WOUND-WAIT; or OCC, `occ.rs`), buffered execution of pieces,
//! and the participant side of 2PC.

use super::locks::{Acquire, LockMode, LockTable};
use super::occ::{Concurrency, Versions};
use super::options::Options;
use super::vecmap::VecMap;
use super::wire::{
    Age, Cx, Finished, LocalCommit, LocalOutcome, Msg, PieceRun, PreparedTxn, Record,
    ServerSnapshot, Timer, ToCoord, ToServer,
};
use crate::p2pl_ttc::safets::{SafeMsg, SafePrimary};
use meridian_core::txn::{
    execute_piece, AbortReason, KvAccess, PieceBody, PieceResult, Procedures,
};
use meridian_core::{Key, NodeId, TimerId, Timestamp, TxnId, Value};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;

/// A server's state for one live (unfinished) transaction.
#[derive(Debug)]
struct ServerTxn {
    age: Age,
    one_round: bool,
    prepared: bool,
    /// Locks held, with the strongest mode, in key order. Strict 2PL: kept until the decision.
    held: VecMap<Key, LockMode>,
    /// Buffered writes, in key order; the store sees them only on commit.
    writes: VecMap<Key, Value>,
    /// Results of the pieces executed here, in piece order.
    results: VecMap<u16, PieceResult>,
    /// OCC: the version of each key when the transaction first touched it.
    seen: VecMap<Key, u64>,
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
    /// The keys before `next` have moved to [`ServerTxn::held`] (an empty key is left).
    needs: Vec<(Key, LockMode)>,
    next: usize,
}

/// What a server tracks per coordinator (by node index).
#[derive(Clone, Debug, Default)]
struct PerCoordinator {
    /// The latest horizon heard from the coordinator (see [`Msg::ToServer`]).
    horizon: Option<TxnId>,
    /// Nothing below `horizon` is remembered as finished, and no transaction below it is live
    /// and unprepared. False after a restart, until the coordinator's next message: the
    /// records replayed since the checkpoint may have brought back forgotten transactions.
    swept: bool,
    /// The `seq` of every entry of [`Server::finished`] for this coordinator, smallest
    /// first (possibly repeated), so the horizon forgets them in order.
    finished: BinaryHeap<Reverse<u64>>,
    /// The `seq` of every transaction of this coordinator that went live unprepared,
    /// smallest first. Entries that have since prepared or finished are skipped when popped.
    unprepared: BinaryHeap<Reverse<u64>>,
}

/// A finished transaction's buffers, kept for the next one (they keep their capacity).
#[derive(Debug, Default)]
struct Spare {
    held: VecMap<Key, LockMode>,
    writes: VecMap<Key, Value>,
    results: VecMap<u16, PieceResult>,
}

/// At most this many spare buffer sets are kept.
const SPARES: usize = 64;

/// The data node of one shard.
#[derive(Debug)]
pub struct Server {
    id: NodeId,
    /// Restarts so far: tags executions (see [`ToCoord::Executed`]).
    incarnation: u32,
    opts: Options,
    procedures: Arc<Procedures>,
    store: FxHashMap<Key, Value>,
    /// OCC: every key's version (empty under locking).
    versions: Versions,
    locks: LockTable,
    txns: FxHashMap<TxnId, ServerTxn>,
    /// Recently finished transactions, for idempotent answers to duplicates. Entries below
    /// their coordinator's horizon are dropped: no message about them can matter any more.
    finished: FxHashMap<TxnId, Finished>,
    /// Horizons and the order in which to forget, by coordinator node index.
    coords: Vec<PerCoordinator>,
    /// Scratch list of transaction ids (reused to avoid allocating per message).
    scratch: Vec<TxnId>,
    /// Buffers of finished transactions and batches, for the next ones.
    spares: Vec<Spare>,
    spare_needs: Vec<Vec<(Key, LockMode)>>,
    /// Transactions granted a lock they were waiting for, to resume before the handler ends.
    wakeups: VecDeque<TxnId>,
    since_checkpoint: usize,
    /// The bytes of the records written since the last checkpoint, and of the store, as
    /// `kit::log::checkpoint_due_by_size` weighs them: a checkpoint is also due once the
    /// log outweighs the store (records may carry values much larger than the store's
    /// average entry).
    logged_bytes: u64,
    store_bytes: u64,
    checkpoint_due: bool,
    /// `p2pl-ttc` with `replica_reads=safets`: the versions, `t_safe` and replication.
    safe: Option<Box<SafePrimary>>,
}

/// The transaction's view while a piece runs: its own buffered writes over the committed
/// store, restricted to the keys it has locked.
struct View<'a> {
    store: &'a FxHashMap<Key, Value>,
    writes: &'a mut VecMap<Key, Value>,
    held: &'a VecMap<Key, LockMode>,
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

/// The locks a batch needs, sorted by key: shared for read keys, exclusive for written ones
/// (`Piece::read_keys` and `Piece::write_keys`, without collecting them), into `needs`
/// (empty).
fn lock_needs(runs: &[PieceRun], mut needs: Vec<(Key, LockMode)>) -> Vec<(Key, LockMode)> {
    debug_assert!(needs.is_empty());
    for run in runs {
        match &run.piece.body {
            PieceBody::Ops(ops) => {
                needs.reserve(ops.len());
                for op in ops {
                    // `Op::writes` implies exclusive; a read-only op takes it shared.
                    let mode = if op.writes() {
                        LockMode::Exclusive
                    } else if op.reads() {
                        LockMode::Shared
                    } else {
                        continue;
                    };
                    needs.push((op.key().clone(), mode));
                }
            }
            PieceBody::Procedure(call) => {
                needs.extend(call.read_keys.iter().map(|k| (k.clone(), LockMode::Shared)));
                needs.extend(
                    call.write_keys
                        .iter()
                        .map(|k| (k.clone(), LockMode::Exclusive)),
                );
            }
        }
    }
    if needs.len() > 1 {
        needs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // One entry per key, in the strongest mode asked.
        needs.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.max(later.1);
            }
            same
        });
    }
    needs
}

/// Pieces with at most this many predecessors gather their inputs on the stack.
const STACK_INPUTS: usize = 16;

/// Runs a batch's pieces in order against the transaction's view, recording their results
/// in `t.results` and, if asked, in `out`.
fn run_batch(
    store: &FxHashMap<Key, Value>,
    procedures: &Procedures,
    t: &mut ServerTxn,
    runs: &[PieceRun],
    mut out: Option<&mut Vec<(u16, PieceResult)>>,
) -> Result<(), AbortReason> {
    for run in runs {
        let n = usize::from(run.index);
        let mut on_stack: [Option<&PieceResult>; STACK_INPUTS] = [None; STACK_INPUTS];
        let mut on_heap: Vec<Option<&PieceResult>>;
        let inputs: &mut [Option<&PieceResult>] = if n <= STACK_INPUTS {
            &mut on_stack[..n]
        } else {
            on_heap = vec![None; n];
            &mut on_heap
        };
        // The coordinator's inputs, overridden by results produced here.
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
        let result = execute_piece(&run.piece, inputs, procedures, &mut view);
        if let Some(key) = view.undeclared {
            return Err(AbortReason::Invalid(format!(
                "piece {} touched key {key:?} without declaring it",
                run.index
            )));
        }
        let result = result?;
        if let Some(out) = out.as_deref_mut() {
            out.push((run.index, result.clone()));
        }
        t.results.insert(run.index, result);
    }
    Ok(())
}

fn below(coords: &[PerCoordinator], txn: TxnId) -> bool {
    coords
        .get(txn.coordinator.index())
        .and_then(|c| c.horizon)
        .is_some_and(|h| txn < h)
}

/// The entry of `coordinator` in `coords`, created if needed.
fn per_coordinator(coords: &mut Vec<PerCoordinator>, coordinator: NodeId) -> &mut PerCoordinator {
    let i = coordinator.index();
    if coords.len() <= i {
        coords.resize_with(i + 1, PerCoordinator::default);
    }
    &mut coords[i]
}

impl Server {
    /// What only a bug breaks, checked by the simulator after every event in debug builds:
    /// every lock grant is resumed before the handler ends (a wake-up left behind is a
    /// transaction that holds a lock and never runs), and no transaction is both live and
    /// finished (a duplicate would then be answered from two states).
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(txn) = self.wakeups.front() {
            return Err(format!("{txn} was granted a lock but not resumed"));
        }
        match self.txns.keys().find(|t| self.finished.contains_key(*t)) {
            Some(txn) => Err(format!("{txn} is both live and finished")),
            None => Ok(()),
        }
    }

    /// Builds the server from its durable records: the latest checkpoint, then later records.
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        procedures: Arc<Procedures>,
        records: &[Record],
    ) -> Server {
        Server::restore_with(id, opts, procedures, records, None)
    }

    /// [`Server::restore`], with `p2pl-ttc`'s SafeTS state rebuilt from the records too.
    pub(crate) fn restore_with(
        id: NodeId,
        opts: Options,
        procedures: Arc<Procedures>,
        records: &[Record],
        safe: Option<SafePrimary>,
    ) -> Server {
        let mut server = Server {
            id,
            incarnation: 0,
            // OCC never waits for a lock: a conflict at PREPARE is a no.
            locks: match opts.concurrency {
                Concurrency::Locking => LockTable::new(opts.max_waiters_per_key, opts.deadlock),
                Concurrency::Optimistic => LockTable::new(0, opts.deadlock),
            },
            versions: Versions::new(opts.concurrency),
            opts,
            procedures,
            store: FxHashMap::default(),
            txns: FxHashMap::default(),
            finished: FxHashMap::default(),
            coords: Vec::new(),
            scratch: Vec::new(),
            spares: Vec::new(),
            spare_needs: Vec::new(),
            wakeups: VecDeque::new(),
            since_checkpoint: 0,
            logged_bytes: 0,
            store_bytes: 0,
            checkpoint_due: false,
            safe: safe.map(Box::new),
        };
        let (checkpoint_record, tail) = crate::kit::log::latest_checkpoint(records, |r| {
            matches!(r, Record::ServerCheckpoint(_))
        });
        let mut prepared = BTreeMap::new();
        if let Some(Record::ServerCheckpoint(snapshot)) = checkpoint_record {
            server.load(snapshot, &mut prepared);
        }
        server.since_checkpoint = tail.len();
        server.logged_bytes = tail.iter().map(Record::logged_bytes).sum();
        let rebooted = !records.is_empty();
        for record in tail {
            server.replay(record, &mut prepared);
        }
        if rebooted {
            server.incarnation += 1;
        }
        for p in prepared.into_values() {
            if let Some(safe) = &mut server.safe {
                safe.revived(p.age.txn);
            }
            server.revive(p);
        }
        server
    }

    fn load(&mut self, snapshot: &ServerSnapshot, prepared: &mut BTreeMap<TxnId, PreparedTxn>) {
        self.store = FxHashMap::default();
        self.store_bytes = 0;
        self.install(snapshot.store.iter().cloned());
        self.versions.load(&snapshot.versions);
        if let Some(safe) = &mut self.safe {
            // Only each key's newest version survives a checkpoint.
            for (key, ts) in &snapshot.stamps {
                if let Some(value) = self.store.get(key) {
                    safe.recovered(key.clone(), *ts, value.clone(), false);
                }
            }
        }
        for (txn, f) in &snapshot.finished {
            self.insert_finished(*txn, f.clone());
        }
        for h in &snapshot.horizons {
            let c = per_coordinator(&mut self.coords, h.coordinator);
            c.horizon = Some(*h);
            // The replayed records may bring back what the horizon had let go.
            c.swept = false;
        }
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
                ..
            } => {
                self.install(local.writes.iter().cloned());
                self.versions.bump(&local.writes);
                let results = Some(local.results.clone());
                self.insert_finished(*txn, Finished::Committed { results });
            }
            Record::Committed {
                txn,
                local: None,
                commit_ts,
            } => {
                let p = prepared
                    .remove(txn)
                    .unwrap_or_else(|| panic!("log of {}: {txn} committed unprepared", self.id));
                if let (Some(safe), Some(ts)) = (&mut self.safe, commit_ts) {
                    for (key, value) in &p.writes {
                        safe.recovered(key.clone(), *ts, value.clone(), true);
                    }
                }
                self.versions.bump(&p.writes);
                self.install(p.writes);
                self.insert_finished(*txn, Finished::Committed { results: None });
            }
            Record::Aborted { txn, reason } => {
                prepared.remove(txn);
                let reason = reason.clone();
                self.insert_finished(*txn, Finished::Aborted { reason });
            }
            Record::Started { incarnation } => self.incarnation = *incarnation,
            other => panic!("log of server {} holds {other:?}", self.id),
        }
    }

    /// Re-installs a prepared transaction after a restart, with its locks.
    fn revive(&mut self, p: PreparedTxn) {
        let mut held = VecMap::new();
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
            results: VecMap::new(),
            seen: VecMap::new(),
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
        if let Some(safe) = &mut self.safe {
            safe.on_start(ctx);
        }
        let mut prepared: Vec<TxnId> = self.txns.keys().copied().collect();
        prepared.sort_unstable();
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
            ToServer::Commit { txn, commit_ts } => self.on_commit(ctx, txn, commit_ts),
            ToServer::Abort { txn } => self.on_abort(ctx, txn),
            ToServer::Resolve { txn } => self.on_resolve(ctx, txn),
        }
        self.settle(ctx);
    }

    /// SafeTS: `T_earliest`, pulls and replica reads (see `crate::p2pl_ttc::safets`).
    pub(crate) fn on_safe(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: SafeMsg) {
        if let Some(safe) = &mut self.safe {
            safe.on_message(ctx, from, msg);
        }
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        if let (Timer::SafeTick, Some(safe)) = (&timer, &mut self.safe) {
            return safe.on_tick(ctx);
        }
        let Timer::Server(txn) = timer else {
            panic!("server {} fired a coordinator timer {timer:?}", self.id);
        };
        self.tick(ctx, txn);
        self.settle(ctx);
    }

    // ---- horizon and idempotence -------------------------------------------------------

    fn below_horizon(&self, txn: TxnId) -> bool {
        below(&self.coords, txn)
    }

    /// Learns that everything of `horizon.coordinator` below `horizon` is decided: forgets
    /// those finished transactions and aborts those still unprepared here (they can no
    /// longer commit: the coordinator decided without this server's yes vote).
    ///
    /// Once swept, nothing below a coordinator's horizon is remembered or live and
    /// unprepared (`remember` and `on_execute` refuse what is below it), so there is nothing
    /// to do until the horizon moves; then the per-coordinator heaps yield exactly the
    /// transactions it passed, smallest first.
    fn advance_horizon(&mut self, ctx: &mut Cx<'_>, horizon: TxnId) {
        let coordinator = horizon.coordinator;
        let c = per_coordinator(&mut self.coords, coordinator);
        match c.horizon {
            Some(current) if horizon <= current => {
                if c.swept {
                    return;
                }
            }
            _ => c.horizon = Some(horizon),
        }
        c.swept = true;
        let below = c.horizon.expect("just set").seq;
        while let Some(&Reverse(seq)) = c.finished.peek() {
            if seq >= below {
                break;
            }
            c.finished.pop();
            self.finished.remove(&TxnId { coordinator, seq });
        }
        let mut doomed = std::mem::take(&mut self.scratch);
        while let Some(&Reverse(seq)) = c.unprepared.peek() {
            if seq >= below {
                break;
            }
            c.unprepared.pop();
            let txn = TxnId { coordinator, seq };
            if self.txns.get(&txn).is_some_and(|t| !t.prepared) && doomed.last() != Some(&txn) {
                doomed.push(txn);
            }
        }
        for txn in doomed.drain(..) {
            self.abort_txn(ctx, txn, AbortReason::Failure, false);
        }
        self.scratch = doomed;
    }

    /// Records a finished transaction (replacing what was known of it).
    fn insert_finished(&mut self, txn: TxnId, finished: Finished) {
        if self.finished.insert(txn, finished).is_none() {
            let c = per_coordinator(&mut self.coords, txn.coordinator);
            c.finished.push(Reverse(txn.seq));
        }
    }

    fn remember(&mut self, txn: TxnId, finished: Finished) {
        if !self.below_horizon(txn) {
            self.insert_finished(txn, finished);
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
        let t = match self.txns.entry(txn) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                if below(&self.coords, txn) {
                    return; // a stale duplicate of a decided transaction
                }
                let timer = ctx.set_timer(self.opts.idle_timeout_ns, Timer::Server(txn));
                per_coordinator(&mut self.coords, txn.coordinator)
                    .unprepared
                    .push(Reverse(txn.seq));
                let spare = self.spares.pop().unwrap_or_default();
                e.insert(ServerTxn {
                    age,
                    one_round,
                    prepared: false,
                    held: spare.held,
                    writes: spare.writes,
                    results: spare.results,
                    seen: VecMap::new(),
                    batch: None,
                    last_heard_ns: ctx.now_ns(),
                    timer: Some(timer),
                })
            }
        };
        t.last_heard_ns = ctx.now_ns();
        if t.prepared || t.batch.is_some() {
            return; // a retransmission of what is already under way
        }
        let todo = if pieces.iter().all(|run| !t.results.contains_key(&run.index)) {
            pieces
        } else {
            let (done, todo): (Vec<PieceRun>, Vec<PieceRun>) = pieces
                .into_iter()
                .partition(|run| t.results.contains_key(&run.index));
            if todo.is_empty() {
                // The reply was lost: send the results again.
                let results = done
                    .iter()
                    .map(|run| (run.index, t.results.get(&run.index).expect("done").clone()))
                    .collect();
                return self.reply_executed(ctx, txn, results);
            }
            todo
        };
        if todo.is_empty() {
            // Nothing to run (and nothing that ran): an empty EXECUTED.
            return self.reply_executed(ctx, txn, Vec::new());
        }
        let needs = lock_needs(&todo, self.spare_needs.pop().unwrap_or_default());
        t.batch = Some(Batch {
            runs: todo,
            needs,
            next: 0,
        });
        self.advance(ctx, txn);
    }

    /// Takes the batch's remaining locks in order; runs the batch once it has them all.
    fn advance(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self
            .txns
            .get_mut(&txn)
            .expect("advancing a live transaction");
        let batch = t.batch.as_mut().expect("advancing needs a batch");
        if self.opts.concurrency == Concurrency::Optimistic && !t.one_round {
            // OCC: no lock now; note what the pieces may touch and its version.
            self.versions
                .note(batch.needs.iter().map(|(k, _)| k), &mut t.seen);
            for (key, mode) in batch.needs.drain(..) {
                let held = t.held.get_or_insert_with(key, || mode);
                *held = (*held).max(mode);
            }
            return self.execute_batch(ctx, txn);
        }
        while let Some((key, mode)) = batch.needs.get(batch.next) {
            let mode = *mode;
            match self.locks.acquire(key, t.age, mode) {
                Acquire::Granted => {
                    let key = std::mem::take(&mut batch.needs[batch.next].0);
                    batch.next += 1;
                    let held = t.held.get_or_insert_with(key, || mode);
                    *held = (*held).max(mode);
                }
                Acquire::Waiting => return self.wound(ctx),
                Acquire::Die => {
                    // WAIT-DIE's deadlock prevention (K2 Fig. 17d counts these).
                    ctx.count("deadlock_aborts", 1);
                    return self.abort_txn(ctx, txn, AbortReason::Conflict, true);
                }
                Acquire::QueueFull => {
                    return self.abort_txn(ctx, txn, AbortReason::Conflict, true);
                }
            }
        }
        self.execute_batch(ctx, txn);
    }

    /// WOUND-WAIT: aborts the transactions the last request wounded, except prepared ones
    /// (a yes vote cannot be taken back; the requester waits for their decision). Their
    /// locks go to the waiters, resumed when the handler settles.
    fn wound(&mut self, ctx: &mut Cx<'_>) {
        for txn in self.locks.take_wounded() {
            if self.txns.get(&txn).is_some_and(|t| !t.prepared) {
                // WOUND-WAIT's deadlock prevention (K2 Fig. 17d counts these).
                ctx.count("deadlock_aborts", 1);
                self.abort_txn(ctx, txn, AbortReason::Conflict, true);
            }
        }
    }

    /// A lock `txn` waited for was granted: record it and keep going.
    fn on_granted(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        // WOUND-WAIT may abort a waiter after a release granted it, in the same handler.
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        let batch = t.batch.as_mut().expect("a granted waiter has a batch");
        let (key, mode) = &mut batch.needs[batch.next];
        let mode = *mode;
        assert!(
            self.locks.mode(key, txn) >= Some(mode),
            "{txn} was woken without its lock on {key:?}"
        );
        let key = std::mem::take(key);
        batch.next += 1;
        let held = t.held.get_or_insert_with(key, || mode);
        *held = (*held).max(mode);
        self.advance(ctx, txn);
    }

    fn execute_batch(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self
            .txns
            .get_mut(&txn)
            .expect("executing a live transaction");
        let batch = t.batch.take().expect("executing a batch");
        // A one-round transaction answers with all its results at commit, not per batch.
        let mut out = (!t.one_round).then(|| Vec::with_capacity(batch.runs.len()));
        let ran = run_batch(&self.store, &self.procedures, t, &batch.runs, out.as_mut());
        self.recycle_needs(batch.needs);
        match ran {
            Err(reason) => self.abort_txn(ctx, txn, reason, true),
            Ok(()) => match out {
                None => self.commit_local(ctx, txn),
                Some(results) => self.reply_executed(ctx, txn, results),
            },
        }
    }

    /// One-round commit of a single-shard transaction: apply, log, release, answer.
    fn commit_local(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let mut t = self
            .txns
            .remove(&txn)
            .expect("committing a live transaction");
        assert!(
            t.results.keys().copied().eq(0..t.results.len() as u16),
            "{txn}: a one-round commit without every piece's result"
        );
        let results: Vec<PieceResult> = t.results.drain().map(|(_, r)| r).collect();
        let writes: Vec<(Key, Value)> = t.writes.drain().collect();
        self.install(writes.iter().cloned());
        self.versions.bump(&writes);
        let local = LocalCommit {
            writes,
            results: results.clone(),
        };
        self.persist(
            ctx,
            Record::Committed {
                txn,
                local: Some(local),
                commit_ts: None,
            },
        );
        self.release_all(txn, t.held.keys());
        if let Some(timer) = t.timer {
            ctx.cancel_timer(timer);
        }
        if !self.below_horizon(txn) {
            let finished = Finished::Committed {
                results: Some(results.clone()),
            };
            self.insert_finished(txn, finished);
        }
        self.recycle(t);
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
                if !complete {
                    self.abort_txn(ctx, txn, AbortReason::Failure, false);
                    false
                } else if let Err(reason) = self.validate(txn) {
                    // OCC: the coordinator hears why (FAILED), not just a no.
                    return self.abort_txn(ctx, txn, reason, true);
                } else {
                    self.prepare(ctx, txn);
                    true
                }
            }
            None => matches!(self.finished.get(&txn), Some(Finished::Committed { .. })),
        };
        self.reply(ctx, txn, ToCoord::Vote { txn, yes });
    }

    /// OCC's validation (`occ.rs`): every lock without waiting, then every noted version
    /// still current. Under locking there is nothing to check: the locks are held.
    fn validate(&mut self, txn: TxnId) -> Result<(), AbortReason> {
        if self.opts.concurrency == Concurrency::Locking {
            return Ok(());
        }
        let t = self.txns.get(&txn).expect("validating a live transaction");
        for (key, mode) in t.held.iter() {
            if self.locks.acquire(key, t.age, *mode) != Acquire::Granted {
                return Err(AbortReason::Conflict);
            }
        }
        if self.opts.unsafe_skip_validation || self.versions.unchanged(&t.seen) {
            Ok(())
        } else {
            Err(AbortReason::Validation)
        }
    }

    fn prepare(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let t = self
            .txns
            .get_mut(&txn)
            .expect("preparing a live transaction");
        let record = Record::Prepared(PreparedTxn {
            age: t.age,
            locks: t.held.as_slice().to_vec(),
            writes: t.writes.as_slice().to_vec(),
        });
        let bytes = record.logged_bytes();
        // Write-ahead: the vote promises to commit even after a crash.
        ctx.persist(record);
        t.prepared = true;
        if let Some(safe) = &mut self.safe {
            safe.prepared(txn);
        }
        if let Some(timer) = t.timer.take() {
            ctx.cancel_timer(timer);
        }
        t.timer = Some(ctx.set_timer(self.opts.query_ns, Timer::Server(txn)));
        let held = if self.opts.unsafe_early_release {
            // THE DELIBERATE BUG (test-only): give up the locks at the vote, before the
            // decision installs the writes.
            Some(std::mem::take(&mut t.held))
        } else {
            None
        };
        self.persisted(bytes);
        if let Some(held) = held {
            self.release_all(txn, held.keys());
        }
    }

    fn on_commit(&mut self, ctx: &mut Cx<'_>, txn: TxnId, commit_ts: Option<Timestamp>) {
        match self.txns.get(&txn) {
            Some(t) => {
                assert!(
                    t.prepared,
                    "COMMIT of {txn}, which {} never prepared",
                    self.id
                );
                self.commit_prepared(ctx, txn, commit_ts);
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

    fn commit_prepared(&mut self, ctx: &mut Cx<'_>, txn: TxnId, commit_ts: Option<Timestamp>) {
        let mut t = self
            .txns
            .remove(&txn)
            .expect("committing a live transaction");
        self.versions.bump(t.writes.as_slice());
        if let Some(safe) = &mut self.safe {
            let ts = commit_ts.expect("p2pl-ttc commits name their timestamp");
            safe.committed(ctx, txn, ts, t.writes.as_slice());
        }
        self.install(t.writes.drain());
        let record = Record::Committed {
            txn,
            local: None,
            commit_ts,
        };
        self.persist(ctx, record);
        self.release_all(txn, t.held.keys());
        if let Some(timer) = t.timer {
            ctx.cancel_timer(timer);
        }
        self.remember(txn, Finished::Committed { results: None });
        self.recycle(t);
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
        let waiting = t.batch.as_ref().and_then(|b| b.needs.get(b.next));
        self.release_all(txn, t.held.keys().chain(waiting.map(|(key, _)| key)));
        if let Some(timer) = t.timer {
            ctx.cancel_timer(timer);
        }
        // A prepared abort must survive a restart (else the restart would revive it); a
        // one-round abort too, since its coordinator reports it to the client as final.
        if let Some(safe) = &mut self.safe {
            safe.decided(txn);
        }
        if t.prepared || (t.one_round && !self.below_horizon(txn)) {
            let reason = reason.clone();
            self.persist(ctx, Record::Aborted { txn, reason });
        }
        if !self.below_horizon(txn) {
            let reason = reason.clone();
            self.insert_finished(txn, Finished::Aborted { reason });
        }
        let one_round = t.one_round;
        self.recycle(t);
        if notify {
            let body = if one_round {
                let outcome = LocalOutcome::Aborted(reason);
                ToCoord::Done { txn, outcome }
            } else {
                ToCoord::Failed { txn, reason }
            };
            self.reply(ctx, txn, body);
        }
    }

    fn recycle_needs(&mut self, mut needs: Vec<(Key, LockMode)>) {
        if self.spare_needs.len() < SPARES {
            needs.clear();
            self.spare_needs.push(needs);
        }
    }

    /// Keeps a finished transaction's buffers for the next one.
    fn recycle(&mut self, t: ServerTxn) {
        if let Some(batch) = t.batch {
            self.recycle_needs(batch.needs);
        }
        if self.spares.len() < SPARES {
            let ServerTxn {
                mut held,
                mut writes,
                mut results,
                ..
            } = t;
            held.clear();
            writes.clear();
            results.clear();
            self.spares.push(Spare {
                held,
                writes,
                results,
            });
        }
    }

    fn release_all<'k>(&mut self, txn: TxnId, keys: impl IntoIterator<Item = &'k Key>) {
        for key in keys {
            self.locks.release_into(key, txn, &mut self.wakeups);
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
        let bytes = record.logged_bytes();
        ctx.persist(record);
        self.persisted(bytes);
    }

    /// Counts a record just written (`bytes` by `Record::logged_bytes`) towards the next
    /// checkpoint: due after `checkpoint_every` records and as many as the store has keys,
    /// or once the records since the last one outweigh the store.
    fn persisted(&mut self, bytes: u64) {
        use crate::kit::log::{checkpoint_due, checkpoint_due_by_size};
        self.since_checkpoint += 1;
        self.logged_bytes += bytes;
        if checkpoint_due(
            self.since_checkpoint,
            self.opts.checkpoint_every,
            self.store.len(),
        ) || checkpoint_due_by_size(self.logged_bytes, self.store_bytes)
        {
            self.checkpoint_due = true;
        }
    }

    /// Applies committed writes to the store, keeping `store_bytes` up to date.
    fn install(&mut self, writes: impl IntoIterator<Item = (Key, Value)>) {
        use crate::kit::log::entry_bytes;
        use std::collections::hash_map::Entry;
        for (key, value) in writes {
            self.store_bytes += entry_bytes(&key, &value);
            // One lookup per write: this is every commit's path.
            match self.store.entry(key) {
                Entry::Occupied(mut old) => {
                    self.store_bytes -= entry_bytes(old.key(), old.get());
                    old.insert(value);
                }
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
            }
        }
    }

    /// `store_bytes` is what `install` should have kept it at (checked at each
    /// checkpoint, which walks the store anyway).
    pub(crate) fn store_bytes_consistent(&self) -> bool {
        let bytes: u64 = self
            .store
            .iter()
            .map(|(k, v)| crate::kit::log::entry_bytes(k, v))
            .sum();
        bytes == self.store_bytes
    }

    /// Ends every handler: resumes woken waiters, then writes a due checkpoint — only now,
    /// when the state is consistent with every record written so far.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        while let Some(txn) = self.wakeups.pop_front() {
            self.on_granted(ctx, txn);
        }
        if self.checkpoint_due {
            // A checkpoint walks the whole store anyway: check the byte count kept for it.
            debug_assert!(self.store_bytes_consistent(), "store_bytes drifted");
            ctx.checkpoint(Record::ServerCheckpoint(Box::new(self.snapshot())));
            self.since_checkpoint = 0;
            self.logged_bytes = 0;
            self.checkpoint_due = false;
        }
    }

    /// The server's durable state. The store is copied in the hash map's order: restore
    /// reads it back into a hash map, so sorting it would only cost time. (The order is
    /// still deterministic: the same run builds the same map.)
    fn snapshot(&self) -> ServerSnapshot {
        let store: Vec<(Key, Value)> = self
            .store
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut prepared: Vec<(TxnId, &ServerTxn)> = self
            .txns
            .iter()
            .filter(|(_, t)| t.prepared)
            .map(|(txn, t)| (*txn, t))
            .collect();
        prepared.sort_unstable_by_key(|(txn, _)| *txn);
        let prepared = prepared
            .into_iter()
            .map(|(_, t)| PreparedTxn {
                age: t.age,
                locks: t.held.as_slice().to_vec(),
                writes: t.writes.as_slice().to_vec(),
            })
            .collect();
        let mut finished: Vec<(TxnId, Finished)> =
            self.finished.iter().map(|(t, f)| (*t, f.clone())).collect();
        finished.sort_unstable_by_key(|(txn, _)| *txn);
        ServerSnapshot {
            store,
            prepared,
            finished,
            horizons: self.coords.iter().filter_map(|c| c.horizon).collect(),
            incarnation: self.incarnation,
            versions: self.versions.snapshot(),
            stamps: self.safe.as_ref().map_or_else(Vec::new, |s| s.stamps()),
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

    /// The committed store as a checkpoint holds it, sorted by key (canonical).
    pub(crate) fn store_snapshot(&self) -> Vec<(Key, Value)> {
        let mut store = self.snapshot().store;
        store.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        store
    }
}
