//! A partition (the data node of one shard): Algorithm 1's read side (the clock-skew delay
//! of lines 19–22 and the prepared-version delay of lines 6–17), Algorithm 2's local commit
//! (lines 5–10) and participant side (lines 23–31), first-committer-wins certification,
//! and §III-E's write-ahead log and recovery.

use super::counters;
use super::options::Options;
use super::wire::{Cx, Finished, Msg, PreparedTxn, Record, ServerSnapshot, Timer};
use crate::kit::clock_gate::{ClockGate, WakeTimer};
use meridian_core::time::NS_PER_S;
use meridian_core::txn::{AbortReason, Key, Value};
use meridian_core::{NodeId, Timestamp, TxnId};
use meridian_store::MvStore;
use rustc_hash::FxHashMap;

/// A prepared transaction and when the partition last asked its coordinator about it.
#[derive(Debug)]
struct Prep {
    txn: PreparedTxn,
    /// Local time of the prepare (or of the restart that recovered it).
    since_ns: u64,
    last_query_ns: Option<u64>,
}

/// A read parked behind a prepared writer (Algorithm 1 lines 11–17).
#[derive(Debug, Clone)]
struct BlockedRead {
    from: NodeId,
    txn: TxnId,
    op: u64,
    key: Key,
    snapshot: Timestamp,
    since_ns: u64,
}

/// The data node of one shard.
#[derive(Debug)]
pub struct Server {
    id: NodeId,
    opts: Options,
    /// Clock-SI: requests wait until the local clock passes their snapshot, and prepare and
    /// commit timestamps come from the local clock. Conventional SI: timestamps come from
    /// the oracle; no clock waits.
    clock_si: bool,
    /// This partition's tie-breaker in timestamps (§III-D: "ties are resolved based on
    /// partition ids"); never 0, which snapshots use.
    tiebreak: u32,
    store: MvStore,
    /// No timestamp at or below `floor_ns` will ever be issued here, and every snapshot
    /// this partition served is at or below it. Makes the partition's timestamps monotone
    /// even when its clock steps back or it restarts (the paper assumes forward clocks).
    floor_ns: u64,
    /// The durable upper bound of `floor_ns` (see [`Record::ClockLease`]).
    lease_ns: u64,
    prepared: FxHashMap<TxnId, Prep>,
    /// Recently finished transactions (outcome, local time), for idempotent answers.
    finished: FxHashMap<TxnId, (Finished, u64)>,
    blocked: FxHashMap<TxnId, Vec<BlockedRead>>,
    /// Reads (transaction, op) delayed and not yet answered: how long each waited is
    /// reported to the coordinator and counted (§IV's delay probability and duration).
    waiting: FxHashMap<(TxnId, u64), Wait>,
    since_checkpoint: usize,
    /// Requests waiting for the local clock to pass their snapshot (Algorithm 1 lines
    /// 19–22), by arrival number, and the one wake-up for the earliest: the kit's clock
    /// gate, as Tiga's servers use it.
    gate: ClockGate<u64>,
    gated: FxHashMap<u64, (NodeId, Msg)>,
    arrivals: u64,
    wake: WakeTimer,
}

/// A read that had to wait (Algorithm 1): since when (local time) and why.
#[derive(Debug, Clone, Copy)]
struct Wait {
    since_ns: u64,
    by_clock: bool,
    by_pending_commit: bool,
}

impl Server {
    /// Builds the partition from its records: the latest checkpoint, then later records.
    pub(crate) fn restore(id: NodeId, opts: Options, clock_si: bool, records: &[Record]) -> Server {
        let mut s = Server {
            id,
            opts,
            clock_si,
            tiebreak: id.0 + 1,
            store: MvStore::new(),
            floor_ns: 0,
            lease_ns: 0,
            prepared: FxHashMap::default(),
            finished: FxHashMap::default(),
            blocked: FxHashMap::default(),
            waiting: FxHashMap::default(),
            since_checkpoint: 0,
            gate: ClockGate::default(),
            gated: FxHashMap::default(),
            arrivals: 0,
            wake: WakeTimer::default(),
        };
        let (checkpoint_record, tail) = crate::kit::log::latest_checkpoint(records, |r| {
            matches!(r, Record::ServerCheckpoint(_))
        });
        let mut watermark = Timestamp::ZERO;
        if let Some(Record::ServerCheckpoint(snap)) = checkpoint_record {
            s.floor_ns = snap.clock_floor_ns;
            watermark = snap.watermark;
            for (key, v) in &snap.versions {
                s.store
                    .install_committed(key.clone(), v.ts, v.writer, v.value.clone())
                    .expect("checkpointed versions are consistent");
            }
            for p in &snap.prepared {
                s.install_prepared(p.clone());
            }
            for (txn, f) in &snap.finished {
                s.finished.insert(*txn, (f.clone(), 0));
            }
        }
        s.since_checkpoint = tail.len();
        for record in tail {
            s.replay(record);
        }
        s.store.gc(watermark);
        // Nothing above the floor was durably promised: the next timestamp is above the
        // lease, and the first one issued renews it.
        s.lease_ns = s.floor_ns;
        s
    }

    fn install_prepared(&mut self, p: PreparedTxn) {
        self.floor_ns = self.floor_ns.max(p.prepare_ts.time_ns);
        for (key, value) in &p.writes {
            self.store
                .write(key.clone(), p.prepare_ts, p.txn, Some(value.clone()))
                .expect("a logged prepare replays");
        }
        self.prepared.insert(
            p.txn,
            Prep {
                txn: p,
                since_ns: 0,
                last_query_ns: None,
            },
        );
    }

    fn replay(&mut self, record: &Record) {
        match record {
            Record::ClockLease { until_ns } => self.floor_ns = self.floor_ns.max(*until_ns),
            Record::Prepared(p) => self.install_prepared(p.clone()),
            Record::Committed {
                txn,
                commit_ts,
                writes,
            } => {
                self.floor_ns = self.floor_ns.max(commit_ts.time_ns);
                match writes {
                    Some(writes) => {
                        for (key, value) in writes {
                            self.store
                                .install_committed(
                                    key.clone(),
                                    *commit_ts,
                                    *txn,
                                    Some(value.clone()),
                                )
                                .expect("a logged local commit replays");
                        }
                    }
                    None => {
                        self.prepared.remove(txn);
                        self.store
                            .commit_at(*txn, *commit_ts)
                            .expect("a logged commit replays");
                    }
                }
                self.finished
                    .insert(*txn, (Finished::Committed(*commit_ts), 0));
            }
            Record::Aborted { txn } => {
                self.prepared.remove(txn);
                self.store.revoke(*txn);
                self.finished
                    .insert(*txn, (Finished::Aborted(AbortReason::Failure), 0));
            }
            other => panic!("log of partition {} holds {other:?}", self.id),
        }
    }

    /// Arms housekeeping and asks the coordinators of recovered prepared transactions for
    /// their outcome (§III-E: "determines the outcome of prepared but not terminated
    /// transactions from their coordinators").
    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        for (f, at) in self.finished.values_mut() {
            let _ = f;
            *at = now;
        }
        let mut txns: Vec<TxnId> = self.prepared.keys().copied().collect();
        txns.sort_unstable();
        for txn in txns {
            let p = self.prepared.get_mut(&txn).expect("present");
            p.since_ns = now;
            p.last_query_ns = Some(now);
            ctx.send(txn.coordinator, Msg::Query { txn });
        }
        ctx.set_timer(self.opts.query_ns, Timer::Tick);
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Read {
                txn,
                op,
                key,
                snapshot,
            } => self.read(ctx, from, txn, op, key, snapshot),
            Msg::CommitLocal {
                txn,
                snapshot,
                writes,
            } => self.local_commit(ctx, from, txn, snapshot, writes),
            Msg::Prepare {
                txn,
                snapshot,
                writes,
            } => self.prepare(ctx, from, txn, snapshot, writes),
            Msg::Commit { txn, commit_ts } => self.commit(ctx, from, txn, commit_ts),
            Msg::Abort { txn } => self.abort(ctx, txn),
            _ => {}
        }
        self.settle(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::ClockPassed { at_ns } => return self.clock_passed(ctx, at_ns),
            Timer::Tick => self.tick(ctx),
            other => panic!("partition {} fired {other:?}", self.id),
        }
        self.settle(ctx);
    }

    // ---- time ---------------------------------------------------------------------------

    /// Algorithm 1 lines 19–22 (and the same delay for updates, §III-A last paragraph):
    /// if this partition's clock has not passed `snapshot`, how long to wait. A snapshot at
    /// or below the floor is available at once: nothing at or below the floor will be
    /// issued any more.
    fn clock_wait(&self, ctx: &Cx<'_>, snapshot: Timestamp) -> Option<u64> {
        let now = ctx.now_ns();
        if !self.clock_si || snapshot.time_ns <= self.floor_ns || snapshot.time_ns < now {
            None
        } else {
            Some(snapshot.time_ns - now + 1)
        }
    }

    /// Handles `msg` again once the local clock has passed `snapshot`; true if it waits.
    fn delay(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        snapshot: Timestamp,
        msg: impl FnOnce() -> Msg,
    ) -> bool {
        match self.clock_wait(ctx, snapshot) {
            Some(_) => {
                self.arrivals += 1;
                self.gate.hold(snapshot.time_ns, self.arrivals);
                self.gated.insert(self.arrivals, (from, msg()));
                self.arm_wake(ctx);
                true
            }
            None => {
                if self.clock_si {
                    self.observe(ctx, snapshot.time_ns);
                }
                false
            }
        }
    }

    /// Arms the wake-up for the earliest held request: once the clock has passed it.
    fn arm_wake(&mut self, ctx: &mut Cx<'_>) {
        let Some(at) = self.gate.next_ns().map(|t| t + 1) else {
            return;
        };
        if self.wake.needs(at) {
            if let Some(superseded) = self.wake.take() {
                ctx.cancel_timer(superseded);
            }
            let wait = at.saturating_sub(ctx.now_ns()).max(1);
            let id = ctx.set_timer(wait, Timer::ClockPassed { at_ns: at });
            self.wake.arm(at, id);
        }
    }

    /// The wake-up for `at_ns`: handles again every held request the clock has passed
    /// (a timer may fire early: the rest wait for the re-armed one).
    fn clock_passed(&mut self, ctx: &mut Cx<'_>, at_ns: u64) {
        self.wake.fired(at_ns);
        while let Some(arrival) = self.gate.pop_due(ctx.now_ns()) {
            if let Some((from, msg)) = self.gated.remove(&arrival) {
                self.on_message(ctx, from, msg);
            }
        }
        self.arm_wake(ctx);
    }

    /// Raises the floor to `t_ns`, renewing the durable lease when the floor reaches it —
    /// replicated, half a step earlier, so that a renewal is usually durable (replicated)
    /// before the floor gets there and reads need not wait for it.
    fn observe(&mut self, ctx: &mut Cx<'_>, t_ns: u64) {
        self.floor_ns = self.floor_ns.max(t_ns);
        let step = self.opts.clock_lease_ns;
        let early = if self.opts.replicated { step / 2 } else { 0 };
        if self.floor_ns + early >= self.lease_ns {
            self.lease_ns = self.floor_ns + step;
            let until_ns = self.lease_ns;
            self.persist(ctx, Record::ClockLease { until_ns });
        }
    }

    /// `GetClockTime()` for a prepare or local-commit timestamp: the local clock, kept
    /// strictly above everything issued or served before.
    fn next_ts(&mut self, ctx: &mut Cx<'_>) -> Timestamp {
        let t = ctx.now_ns().max(self.floor_ns + 1);
        self.observe(ctx, t);
        Timestamp::new(t, self.tiebreak)
    }

    // ---- Algorithm 1: reads -------------------------------------------------------------

    fn read(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        op: u64,
        key: Key,
        snapshot: Timestamp,
    ) {
        if self.delay(ctx, from, snapshot, || Msg::Read {
            txn,
            op,
            key: key.clone(),
            snapshot,
        }) {
            return self.note_wait(ctx, txn, op, |w| w.by_clock = true);
        }
        // Lines 6–17: a version of another transaction that is prepared (pending) at or
        // below the snapshot may commit below it: wait until it is decided. A pending
        // version above the snapshot commits above it (commit ts ≥ prepare ts) and is
        // invisible anyway — the "T'.CommitTime < T.SnapshotTime" test of line 16.
        let versions = match self.opts.unsafe_skip_pending_wait {
            true => &[][..],
            false => self.store.versions(&key),
        };
        let blocker = versions
            .iter()
            .take_while(|v| v.ts <= snapshot)
            .filter(|v| v.is_pending() && v.writer != txn)
            .map(|v| v.writer)
            .last();
        if let Some(writer) = blocker {
            self.note_wait(ctx, txn, op, |w| w.by_pending_commit = true);
            let now = ctx.now_ns();
            let parked = self.blocked.entry(writer).or_default();
            if !parked
                .iter()
                .any(|b| b.from == from && b.txn == txn && b.op == op)
            {
                parked.push(BlockedRead {
                    from,
                    txn,
                    op,
                    key,
                    snapshot,
                    since_ns: now,
                });
            }
            // Lines 14–15: ask the writer's coordinator for its commit timestamp; the
            // answer (COMMIT or ABORT) resolves the version here and wakes the read.
            if let Some(p) = self.prepared.get_mut(&writer) {
                if p.last_query_ns
                    .is_none_or(|t| now.saturating_sub(t) >= self.opts.retry_ns / 4)
                {
                    p.last_query_ns = Some(now);
                    ctx.send(writer.coordinator, Msg::Query { txn: writer });
                }
            }
            return;
        }
        let result = match self.store.read_committed_at(&key, snapshot) {
            Ok(v) => Ok(v.and_then(|v| v.value.clone())),
            // The snapshot is older than the GC horizon: its versions may be gone.
            Err(_) => Err(AbortReason::Failure),
        };
        let waited_ns = self.served(ctx, txn, op);
        let arrived_ns = ctx.now_ns().saturating_sub(waited_ns);
        ctx.send(
            from,
            Msg::ReadReply {
                txn,
                op,
                result,
                waited_ns,
                arrived_ns,
            },
        );
    }

    /// Remembers that read `op` of `txn` waits (from now, unless it already waited).
    fn note_wait(&mut self, ctx: &Cx<'_>, txn: TxnId, op: u64, why: impl FnOnce(&mut Wait)) {
        let since_ns = ctx.now_ns();
        why(self.waiting.entry((txn, op)).or_insert(Wait {
            since_ns,
            by_clock: false,
            by_pending_commit: false,
        }));
    }

    /// Counts a read served, and how long it waited (0 if it did not).
    fn served(&mut self, ctx: &mut Cx<'_>, txn: TxnId, op: u64) -> u64 {
        ctx.count(counters::READS, 1);
        let Some(wait) = self.waiting.remove(&(txn, op)) else {
            return 0;
        };
        let waited_ns = ctx.now_ns().saturating_sub(wait.since_ns);
        ctx.count(counters::READS_DELAYED, 1);
        ctx.count(counters::READ_DELAY_NS, waited_ns);
        if wait.by_clock {
            ctx.count(counters::READS_DELAYED_BY_CLOCK, 1);
        }
        if wait.by_pending_commit {
            ctx.count(counters::READS_DELAYED_BY_PENDING_COMMIT, 1);
        }
        waited_ns
    }

    /// Re-runs the reads parked behind `writer` (it committed or aborted here).
    fn wake(&mut self, ctx: &mut Cx<'_>, writer: TxnId) {
        for b in self.blocked.remove(&writer).unwrap_or_default() {
            self.read(ctx, b.from, b.txn, b.op, b.key, b.snapshot);
        }
    }

    // ---- certification ------------------------------------------------------------------

    /// First-committer-wins (§II-B property 3, Algorithm 2 lines 6 and 24): refuse if any
    /// written key has a committed version newer than the snapshot (a concurrent committed
    /// writer) or another transaction's prepared version (a concurrent writer that may
    /// commit; refusing it is conservative). Its own committed version newer than its
    /// snapshot means this is a late duplicate of a request already carried out: refuse.
    fn certify(&self, txn: TxnId, snapshot: Timestamp, writes: &[(Key, Value)]) -> bool {
        writes.iter().all(|(key, _)| {
            self.store.versions(key).iter().all(|v| {
                if v.writer == txn && v.is_pending() {
                    return true;
                }
                !(v.is_pending() || v.ts > snapshot)
            })
        })
    }

    // ---- Algorithm 2: local commit -------------------------------------------------------

    fn local_commit(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        snapshot: Timestamp,
        writes: Vec<(Key, Value)>,
    ) {
        if let Some((f, _)) = self.finished.get(&txn) {
            let result = match f {
                Finished::Committed(ts) => Ok(*ts),
                Finished::Aborted(r) => Err(r.clone()),
            };
            return ctx.send(from, Msg::LocalDone { txn, result });
        }
        if self.prepared.contains_key(&txn) {
            return; // not a local transaction; a confused duplicate
        }
        if self.delay(ctx, from, snapshot, || Msg::CommitLocal {
            txn,
            snapshot,
            writes: writes.clone(),
        }) {
            return ctx.count(counters::UPDATES_DELAYED_BY_CLOCK, 1);
        }
        if !self.certify(txn, snapshot, &writes) {
            ctx.count(counters::CERTIFICATION_ABORTS, 1);
            self.finish(ctx, txn, Finished::Aborted(AbortReason::Conflict));
            let result = Err(AbortReason::Conflict);
            return ctx.send(from, Msg::LocalDone { txn, result });
        }
        // Lines 7–10: committing → commit time from the local clock → log → committed.
        // The handler is atomic, so no reader sees the committing state.
        let commit_ts = self.next_ts(ctx);
        self.persist(
            ctx,
            Record::Committed {
                txn,
                commit_ts,
                writes: Some(writes.clone()),
            },
        );
        for (key, value) in writes {
            self.store
                .install_committed(key, commit_ts, txn, Some(value))
                .expect("a fresh timestamp above every version");
        }
        self.finish(ctx, txn, Finished::Committed(commit_ts));
        ctx.send(
            from,
            Msg::LocalDone {
                txn,
                result: Ok(commit_ts),
            },
        );
    }

    // ---- Algorithm 2: participant of 2PC -------------------------------------------------

    fn prepare(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        snapshot: Timestamp,
        writes: Vec<(Key, Value)>,
    ) {
        if let Some(p) = self.prepared.get(&txn) {
            let result = Ok(p.txn.prepare_ts);
            return ctx.send(from, Msg::Vote { txn, result });
        }
        if let Some((f, _)) = self.finished.get(&txn) {
            if let Finished::Aborted(r) = f {
                let result = Err(r.clone());
                ctx.send(from, Msg::Vote { txn, result });
            }
            return;
        }
        if self.delay(ctx, from, snapshot, || Msg::Prepare {
            txn,
            snapshot,
            writes: writes.clone(),
        }) {
            return ctx.count(counters::UPDATES_DELAYED_BY_CLOCK, 1);
        }
        if !self.certify(txn, snapshot, &writes) {
            ctx.count(counters::CERTIFICATION_ABORTS, 1);
            self.finish(ctx, txn, Finished::Aborted(AbortReason::Conflict));
            let result = Err(AbortReason::Conflict);
            return ctx.send(from, Msg::Vote { txn, result });
        }
        // Clock-SI: line 27, the prepare time from the local clock. Conventional SI: the
        // version waits just above the snapshot (its commit timestamp, from the oracle, comes
        // later and is larger), so every reader that may need it waits for it.
        let prepare_ts = if self.clock_si {
            self.next_ts(ctx)
        } else {
            Timestamp::new(snapshot.time_ns, self.tiebreak)
        };
        for (key, value) in &writes {
            if self
                .store
                .write(key.clone(), prepare_ts, txn, Some(value.clone()))
                .is_err()
            {
                self.store.revoke(txn);
                self.finish(ctx, txn, Finished::Aborted(AbortReason::Failure));
                let result = Err(AbortReason::Failure);
                return ctx.send(from, Msg::Vote { txn, result });
            }
        }
        let p = PreparedTxn {
            txn,
            snapshot,
            prepare_ts,
            writes,
        };
        self.persist(ctx, Record::Prepared(p.clone()));
        let now = ctx.now_ns();
        self.prepared.insert(
            txn,
            Prep {
                txn: p,
                since_ns: now,
                last_query_ns: None,
            },
        );
        ctx.send(
            from,
            Msg::Vote {
                txn,
                result: Ok(prepare_ts),
            },
        );
    }

    fn commit(&mut self, ctx: &mut Cx<'_>, from: NodeId, txn: TxnId, commit_ts: Timestamp) {
        if self.prepared.remove(&txn).is_some() {
            // Lines 29–31. A commit timestamp above the local clock is fine (§III-B): the
            // floor rises so later local timestamps stay above it.
            self.persist(
                ctx,
                Record::Committed {
                    txn,
                    commit_ts,
                    writes: None,
                },
            );
            self.store
                .commit_at(txn, commit_ts)
                .expect("commit timestamps are unique per partition and key");
            if self.clock_si {
                self.observe(ctx, commit_ts.time_ns);
            }
            self.finish(ctx, txn, Finished::Committed(commit_ts));
            self.wake(ctx, txn);
        }
        ctx.send(from, Msg::CommitAck { txn });
    }

    fn abort(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        if self.prepared.remove(&txn).is_some() {
            self.persist(ctx, Record::Aborted { txn });
            self.store.revoke(txn);
            self.finish(ctx, txn, Finished::Aborted(AbortReason::Failure));
            self.wake(ctx, txn);
        } else if !self.finished.contains_key(&txn) {
            // An ABORT that overtook its PREPARE: the late PREPARE must not prepare.
            self.finish(ctx, txn, Finished::Aborted(AbortReason::Failure));
        }
    }

    fn finish(&mut self, ctx: &Cx<'_>, txn: TxnId, f: Finished) {
        self.finished.insert(txn, (f, ctx.now_ns()));
    }

    // ---- housekeeping -------------------------------------------------------------------

    fn tick(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        // Prepared transactions whose decision is overdue: ask (presumed abort answers for
        // a coordinator that lost them).
        let mut overdue: Vec<TxnId> = self
            .prepared
            .iter()
            .filter(|(_, p)| {
                now.saturating_sub(p.last_query_ns.unwrap_or(p.since_ns)) >= self.opts.query_ns
            })
            .map(|(t, _)| *t)
            .collect();
        overdue.sort_unstable();
        for txn in overdue {
            self.prepared.get_mut(&txn).expect("present").last_query_ns = Some(now);
            ctx.send(txn.coordinator, Msg::Query { txn });
        }
        // Parked reads are retransmitted by their coordinators; forget stale copies.
        let stale = self
            .opts
            .retry_ns
            .saturating_mul(u64::from(self.opts.max_retries) + 2);
        self.blocked.retain(|_, reads| {
            reads.retain(|b| now.saturating_sub(b.since_ns) < stale);
            !reads.is_empty()
        });
        self.waiting
            .retain(|_, w| now.saturating_sub(w.since_ns) < stale);
        // Finished transactions are remembered long after any retransmission can arrive.
        let forget = stale.saturating_mul(4).max(30 * NS_PER_S);
        self.finished
            .retain(|_, (_, at)| now.saturating_sub(*at) < forget);
        self.store.gc(self.gc_horizon(now));
        ctx.set_timer(self.opts.query_ns, Timer::Tick);
    }

    /// Versions older than the clock minus `gc_lag` go — but never past a prepared
    /// transaction: its commit timestamp (≥ its prepare timestamp here) must stay above the
    /// store's watermark however long its coordinator takes to decide (a coordinator cut
    /// off for longer than `gc_lag`).
    fn gc_horizon(&self, now: u64) -> Timestamp {
        let horizon = now.saturating_sub(self.opts.gc_lag_ns);
        let oldest_prepared = self
            .prepared
            .values()
            .map(|p| p.txn.prepare_ts.time_ns)
            .min();
        Timestamp::new(oldest_prepared.map_or(horizon, |p| horizon.min(p)), 0)
    }

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
    }

    /// Ends every handler: writes a checkpoint once enough records accumulated (§III-E:
    /// "taking a checkpoint is the same as reading a full snapshot of the partition").
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if self.since_checkpoint < self.opts.checkpoint_every {
            return;
        }
        let latest = self
            .store
            .checkpoint(Timestamp::MAX)
            .expect("MAX is above every watermark");
        let mut versions = Vec::new();
        for (key, _) in latest.versions {
            for v in self.store.versions(&key) {
                if v.is_committed() {
                    versions.push((key.clone(), v.clone()));
                }
            }
        }
        let mut prepared: Vec<PreparedTxn> =
            self.prepared.values().map(|p| p.txn.clone()).collect();
        prepared.sort_unstable_by_key(|p| p.txn);
        let mut finished: Vec<(TxnId, Finished)> = self
            .finished
            .iter()
            .map(|(t, (f, _))| (*t, f.clone()))
            .collect();
        finished.sort_unstable_by_key(|(t, _)| *t);
        // The lease is what a restart must stay above.
        let snapshot = ServerSnapshot {
            clock_floor_ns: self.lease_ns.max(self.floor_ns),
            watermark: self.store.watermark(),
            versions,
            prepared,
            finished,
        };
        ctx.checkpoint(Record::ServerCheckpoint(Box::new(snapshot)));
        self.since_checkpoint = 0;
    }
}

impl Server {
    /// Clock-SI (true) or conventional SI (false).
    pub(crate) fn clock_si(&self) -> bool {
        self.clock_si
    }

    /// No timestamp at or below this is issued here any more.
    pub(crate) fn floor_ns(&self) -> u64 {
        self.floor_ns
    }
}

#[cfg(test)]
impl Server {
    pub(crate) fn store(&self) -> &MvStore {
        &self.store
    }

    pub(crate) fn prepared_count(&self) -> usize {
        self.prepared.len()
    }
}
