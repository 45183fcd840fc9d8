//! A replica of one shard: the primary participant (Algorithm 1's `Tx_read`, `Tx_write`,
//! `Tx_commit`, §4.2's deferral) or a backup participant (§4.5), and what every replica
//! does for failures: read leases, recovery of undecided transactions, promotion.

use super::causes::{Cause, CleanReads};
use super::deferral::{Deferral, Tuning};
use super::mvcc::{Mvcc, ReadResult, Refusal, Rules, Status};
use super::options::Options;
use super::wire::{Answer, Config, Cx, Failure, Installed, Msg, Record, Snapshot, Timer};
use crate::kit::clock_gate::{ClockGate, WakeTimer};
use crate::kit::promotion::Candidacy;
use meridian_core::txn::{Key, Value};
use meridian_core::{Cluster, NodeId, ShardId, ShardList, Timestamp, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::sync::Arc;

/// Decided transactions remembered (to answer duplicates and inquiries); older ones are
/// forgotten first. A recovery that asks about a transaction decided this many decisions
/// ago would be answered wrongly, which no run of the simulator comes near.
const FINISHED_MAX: usize = 1 << 16;

/// A transaction with versions here and no decision yet.
#[derive(Clone, Debug)]
struct Undecided {
    ts: Timestamp,
    /// Keys with this transaction's pending versions and, for a hold, their values.
    writes: Vec<(Key, Option<Value>)>,
    held: bool,
    write_shards: ShardList,
    since_ns: u64,
    recovery: Option<Recovery>,
}

/// An inquiry in progress (§4.5, failures of coordinators).
#[derive(Clone, Debug, Default)]
struct Recovery {
    sent_ns: u64,
    answers: Vec<(ShardId, NodeId, Answer)>,
}

/// A request's reads in progress.
#[derive(Clone, Debug)]
struct Exec {
    txn: TxnId,
    ts: Timestamp,
    round: u8,
    coordinator: NodeId,
    reads: Vec<Key>,
    values: Vec<Option<Option<Value>>>,
    /// Instrumentation: the true time the transaction took `ts` (abort causes).
    issued_true_ns: Option<u64>,
}

/// A decided transaction.
#[derive(Clone, Debug)]
enum Decision {
    Committed(Vec<(Key, Value)>),
    Aborted,
}

/// A replica node.
#[derive(Debug)]
pub struct Replica {
    id: NodeId,
    shard: ShardId,
    opts: Options,
    cluster: Arc<Cluster>,
    config: Config,
    store: Mvcc,
    undecided: FxHashMap<TxnId, Undecided>,
    finished: FxHashMap<TxnId, Decision>,
    finished_order: VecDeque<TxnId>,
    /// Transactions this replica promised never to hold (answered NotHeld).
    refused: FxHashSet<TxnId>,
    execs: FxHashMap<u64, Exec>,
    next_exec: u64,
    /// Executions blocked on a pending version of a transaction.
    waiters: FxHashMap<TxnId, Vec<u64>>,
    /// Executions waiting for a read lease.
    lease_waiting: Vec<u64>,
    gate: ClockGate<u64>,
    wake: WakeTimer,
    deferral: Deferral,
    /// Instrumentation: reads a dependent write may follow (abort causes).
    clean_reads: CleanReads,
    /// The largest lease this replica persisted (requested as primary or acknowledged as
    /// backup): an upper bound on every read timestamp any primary served.
    lease_max_ns: u64,
    /// Writes below this are refused: reads served before a restart or by a former
    /// primary reached up to here, and their rts are not known.
    floor_ns: u64,
    /// As primary: the lease sent, and each backup's acknowledged lease.
    lease_sent_ns: u64,
    lease_acks: Vec<(NodeId, u64)>,
    last_heard_ns: u64,
    highest_epoch_seen: u64,
    campaign: Candidacy,
    since_checkpoint: usize,
}

impl Replica {
    /// Builds the replica from its log (empty at boot).
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        records: &[Record],
    ) -> Replica {
        let shard = cluster.shard_of_node(id).expect("a replica");
        let tuning = Tuning {
            hot_threshold: opts.hot_threshold,
            step_ns: opts.defer_ns_step,
            max_ns: opts.defer_ns_max,
            fail_rate_high: opts.fail_rate_high,
        };
        let config = Config {
            epoch: 0,
            primary: cluster.initial_leader(shard),
        };
        let mut r = Replica {
            id,
            shard,
            store: Mvcc::new(opts.versions_kept),
            deferral: Deferral::new(tuning),
            clean_reads: CleanReads::default(),
            opts,
            cluster,
            config,
            undecided: FxHashMap::default(),
            finished: FxHashMap::default(),
            finished_order: VecDeque::new(),
            refused: FxHashSet::default(),
            execs: FxHashMap::default(),
            next_exec: 0,
            waiters: FxHashMap::default(),
            lease_waiting: Vec::new(),
            gate: ClockGate::default(),
            wake: WakeTimer::default(),
            lease_max_ns: 0,
            floor_ns: 0,
            lease_sent_ns: 0,
            lease_acks: Vec::new(),
            last_heard_ns: 0,
            highest_epoch_seen: 0,
            campaign: Candidacy::default(),
            since_checkpoint: 0,
        };
        let start = records
            .iter()
            .rposition(|r| matches!(r, Record::Checkpoint(_)))
            .unwrap_or(0);
        for record in &records[start..] {
            r.replay(record);
        }
        r.since_checkpoint = records.len() - start;
        // Every read served before the crash was below a persisted lease.
        r.floor_ns = r.lease_max_ns;
        r.highest_epoch_seen = r.config.epoch;
        r.reset_lease_acks();
        r
    }

    fn replay(&mut self, record: &Record) {
        match record {
            Record::Installed(i) => self.place(i, 0),
            Record::Decided {
                txn,
                ts,
                commit,
                writes,
            } => self.apply(*txn, *ts, *commit, writes.clone()),
            Record::Config(c) => self.config = *c,
            Record::Lease(ns) => self.lease_max_ns = self.lease_max_ns.max(*ns),
            Record::Refused(txn) => {
                self.refused.insert(*txn);
            }
            Record::Checkpoint(s) => self.load(s),
            other => panic!("replica {} logged {other:?}", self.id),
        }
    }

    fn load(&mut self, s: &Snapshot) {
        self.config = s.config;
        self.lease_max_ns = s.lease_ns;
        for (key, versions) in &s.records {
            self.store.restore(key.clone(), versions.clone());
        }
        for i in &s.undecided {
            self.place(i, 0);
        }
        for (txn, writes) in &s.finished {
            let decision = match writes {
                Some(w) => Decision::Committed(w.clone()),
                None => Decision::Aborted,
            };
            self.remember(*txn, decision);
        }
        self.refused = s.refused.iter().copied().collect();
    }

    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        self.last_heard_ns = ctx.now_ns();
        ctx.set_timer(self.opts.heartbeat_ns, Timer::Tick);
    }

    fn is_primary(&self) -> bool {
        self.config.primary == self.id
    }

    fn backups(&self) -> impl Iterator<Item = NodeId> + '_ {
        let primary = self.config.primary;
        self.cluster
            .replicas(self.shard)
            .iter()
            .copied()
            .filter(move |n| *n != primary)
    }

    fn rules(&self) -> Rules {
        let sps = self.opts.strong_partition();
        Rules {
            stale_read: sps && !self.opts.unsafe_no_stale_read_rule,
            immortal_write: sps,
            late_read: sps && !self.opts.unsafe_no_stale_read_rule,
        }
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Execute {
                txn,
                ts,
                round,
                config,
                reads,
                installs,
                write_shards,
                issued_true_ns,
            } => {
                self.learn(ctx, config);
                let exec = Exec {
                    txn,
                    ts,
                    round,
                    coordinator: from,
                    values: vec![None; reads.len()],
                    reads,
                    issued_true_ns,
                };
                self.on_execute(ctx, exec, installs, write_shards);
            }
            Msg::Replicate {
                txn,
                ts,
                epoch,
                writes,
                write_shards,
                ..
            } => self.on_replicate(ctx, from, txn, ts, epoch, writes, write_shards),
            Msg::Commit {
                txn, ts, writes, ..
            } => {
                self.decide(ctx, txn, ts, true, writes);
                let shard = self.shard;
                ctx.send(from, Msg::CommitAck { txn, shard });
            }
            Msg::Abort { txn } => {
                let ts = self.undecided.get(&txn).map_or(Timestamp::ZERO, |u| u.ts);
                self.decide(ctx, txn, ts, false, Vec::new());
            }
            Msg::Inquire { txn, shard } => {
                let answer = self.answer(ctx, txn);
                ctx.send(from, Msg::Answer { txn, shard, answer });
            }
            Msg::Answer { txn, shard, answer } => self.on_answer(ctx, from, txn, shard, answer),
            Msg::Lease { config, until_ns } => self.on_lease(ctx, from, config, until_ns),
            Msg::LeaseAck {
                config,
                until_ns,
                ok,
            } => self.on_lease_ack(ctx, from, config, until_ns, ok),
            Msg::Grant { epoch, granted, .. } => self.on_grant(ctx, from, epoch, granted),
            Msg::NewConfig { config, .. } | Msg::Redirect { config, .. } => self.learn(ctx, config),
            Msg::Executed { .. }
            | Msg::Failed { .. }
            | Msg::ReplicateAck { .. }
            | Msg::CommitAck { .. }
            | Msg::RequestGrant { .. } => {}
        }
        self.settle(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::Tick => {
                self.tick(ctx);
                ctx.set_timer(self.opts.heartbeat_ns, Timer::Tick);
            }
            Timer::Wake(at) => {
                self.wake.fired(at);
                self.release_deferred(ctx);
            }
            Timer::Txn(_) => {}
        }
        self.settle(ctx);
    }

    // ---- configurations --------------------------------------------------------------

    /// Adopts a newer configuration of this shard.
    fn learn(&mut self, ctx: &mut Cx<'_>, config: Config) {
        self.highest_epoch_seen = self.highest_epoch_seen.max(config.epoch);
        if config.epoch <= self.config.epoch {
            return;
        }
        let was_primary = self.is_primary();
        self.config = config;
        self.persist(ctx, Record::Config(config));
        self.campaign.stop();
        self.last_heard_ns = ctx.now_ns();
        if was_primary && !self.is_primary() {
            self.step_down(ctx);
        }
        if self.is_primary() {
            self.take_over(ctx);
        }
    }

    /// A deposed primary sends its waiting requests to the new one.
    fn step_down(&mut self, ctx: &mut Cx<'_>) {
        ctx.count("aurogon.deposed", 1);
        let shard = self.shard;
        let config = self.config;
        let mut coordinators: Vec<NodeId> = self.execs.values().map(|e| e.coordinator).collect();
        coordinators.sort_unstable();
        coordinators.dedup();
        for c in coordinators {
            ctx.send(c, Msg::Redirect { shard, config });
        }
        self.execs.clear();
        self.waiters.clear();
        self.lease_waiting.clear();
        self.gate.clear();
        self.wake.reset();
    }

    /// Becomes primary: writes below every lease any primary may have served reads under
    /// are refused, and leases start over with this epoch's backups.
    fn take_over(&mut self, ctx: &mut Cx<'_>) {
        ctx.count("aurogon.promotions", 1);
        self.floor_ns = self.floor_ns.max(self.lease_max_ns);
        self.lease_sent_ns = 0;
        self.reset_lease_acks();
        self.campaign.stop();
        let shard = self.shard;
        let config = self.config;
        let others: Vec<NodeId> = self
            .cluster
            .coordinators
            .iter()
            .copied()
            .chain(self.backups())
            .collect();
        ctx.multicast(others, &Msg::NewConfig { shard, config });
        self.send_lease(ctx, ctx.now_ns().saturating_add(self.opts.lease_ns));
    }

    fn reset_lease_acks(&mut self) {
        self.lease_acks = self.backups().map(|b| (b, 0)).collect();
    }

    // ---- read leases (the primary's heartbeat) ---------------------------------------

    /// Reads below this may be served: every backup has acknowledged it.
    fn lease_ns(&self) -> u64 {
        self.lease_acks
            .iter()
            .map(|(_, ns)| *ns)
            .min()
            .unwrap_or(u64::MAX)
    }

    fn send_lease(&mut self, ctx: &mut Cx<'_>, until_ns: u64) {
        let until_ns = until_ns.max(self.lease_sent_ns);
        self.lease_sent_ns = until_ns;
        self.persist_lease(ctx, until_ns);
        let config = self.config;
        let backups: Vec<NodeId> = self.backups().collect();
        ctx.multicast(backups, &Msg::Lease { config, until_ns });
    }

    /// Persists a lease bound before it is used; in steps of several leases, so that the
    /// log does not grow by a record per heartbeat.
    fn persist_lease(&mut self, ctx: &mut Cx<'_>, until_ns: u64) {
        if until_ns > self.lease_max_ns {
            let bound = until_ns.saturating_add(4 * self.opts.lease_ns);
            self.lease_max_ns = bound;
            self.persist(ctx, Record::Lease(bound));
        }
    }

    fn on_lease(&mut self, ctx: &mut Cx<'_>, from: NodeId, config: Config, until_ns: u64) {
        self.learn(ctx, config);
        let current = config.epoch == self.config.epoch && config.primary == from;
        if !current || self.is_primary() {
            let config = self.config;
            ctx.send(
                from,
                Msg::LeaseAck {
                    config,
                    until_ns,
                    ok: false,
                },
            );
            return;
        }
        self.last_heard_ns = ctx.now_ns();
        self.campaign.stop();
        self.persist_lease(ctx, until_ns);
        ctx.send(
            from,
            Msg::LeaseAck {
                config,
                until_ns,
                ok: true,
            },
        );
    }

    fn on_lease_ack(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        config: Config,
        until: u64,
        ok: bool,
    ) {
        if !ok {
            return self.learn(ctx, config);
        }
        if config != self.config || !self.is_primary() {
            return;
        }
        if let Some((_, acked)) = self.lease_acks.iter_mut().find(|(b, _)| *b == from) {
            *acked = (*acked).max(until);
        }
        let lease = self.lease_ns();
        let (ready, waiting): (Vec<u64>, Vec<u64>) = std::mem::take(&mut self.lease_waiting)
            .into_iter()
            .partition(|id| self.execs.get(id).is_some_and(|e| e.ts.time_ns < lease));
        self.lease_waiting = waiting;
        for id in ready {
            self.run_exec(ctx, id);
        }
    }

    // ---- execution (Algorithm 1) -----------------------------------------------------

    /// A request from a coordinator: its installs first (pre-attached and independent
    /// writes), then its reads, deferred on hot records (§4.2).
    fn on_execute(
        &mut self,
        ctx: &mut Cx<'_>,
        exec: Exec,
        installs: Vec<Key>,
        write_shards: ShardList,
    ) {
        let (from, txn, round) = (exec.coordinator, exec.txn, exec.round);
        if !self.is_primary() {
            let (shard, config) = (self.shard, self.config);
            return ctx.send(from, Msg::Redirect { shard, config });
        }
        if let Some(decision) = self.finished.get(&txn) {
            if matches!(decision, Decision::Aborted) {
                let failure = Failure::Finished;
                ctx.send(
                    from,
                    Msg::Failed {
                        txn,
                        round,
                        failure,
                    },
                );
            }
            return;
        }
        if self
            .execs
            .values()
            .any(|e| e.txn == txn && e.round == round)
        {
            return; // a duplicate of a request still in progress
        }
        if !installs.is_empty() {
            if let Err(failure) = self.install(ctx, &exec, &installs, write_shards) {
                // Aborted here at once: its coordinator will abort it (nothing was
                // replicated yet: replication follows execution).
                self.decide(ctx, txn, Timestamp::ZERO, false, Vec::new());
                return ctx.send(
                    from,
                    Msg::Failed {
                        txn,
                        round,
                        failure,
                    },
                );
            }
        }
        for key in &exec.reads {
            self.deferral.note_request(key, exec.ts.time_ns);
        }
        let id = self.next_exec;
        self.next_exec += 1;
        self.execs.insert(id, exec);
        let defer = self.defer_ns(id);
        if defer > 0 {
            ctx.count("aurogon.deferred_reads", 1);
            let at = ctx.now_ns().saturating_add(defer);
            self.gate.hold(at, id);
            self.arm_wake(ctx);
        } else {
            self.run_exec(ctx, id);
        }
    }

    /// Installs `txn`'s pending versions (Tx_write, and §4.3's pre-attached writes);
    /// logged before the reply.
    fn install(
        &mut self,
        ctx: &mut Cx<'_>,
        exec: &Exec,
        keys: &[Key],
        write_shards: ShardList,
    ) -> Result<(), Failure> {
        let (txn, ts) = (exec.txn, exec.ts);
        let rules = self.rules();
        for (i, key) in keys.iter().enumerate() {
            self.deferral.note_request(key, ts.time_ns);
            let result = self.store.install(key, ts, txn, self.floor_ns, rules);
            self.deferral.note_write(key, ts.time_ns, result.is_err());
            if let Err(refusal) = result {
                ctx.count(refusal_counter(refusal), 1);
                let cause = (refusal == Refusal::LateWrite).then(|| {
                    Cause::of_late_write(
                        exec.issued_true_ns,
                        self.store.conflict_issued_true_ns(key, ts),
                        exec.round == 1 && self.clean_reads.contains(txn, key),
                    )
                });
                // The versions of this request installed so far are dropped with the
                // transaction (no backup holds it yet: replication follows execution).
                let partial = Installed {
                    txn,
                    ts,
                    writes: keys[..i].iter().map(|k| (k.clone(), None)).collect(),
                    held: false,
                    write_shards,
                };
                self.place(&partial, ctx.now_ns());
                return Err(Failure::Refused(refusal, cause));
            }
        }
        let installed = Installed {
            txn,
            ts,
            writes: keys.iter().map(|k| (k.clone(), None)).collect(),
            held: false,
            write_shards,
        };
        self.place(&installed, ctx.now_ns());
        self.persist(ctx, Record::Installed(installed));
        Ok(())
    }

    /// The deferral of a request's reads: the longest of its hot records' windows.
    fn defer_ns(&mut self, id: u64) -> u64 {
        if !self.opts.deferral {
            return 0;
        }
        let keys = self.execs[&id].reads.clone();
        keys.iter()
            .map(|k| self.deferral.defer_ns(k))
            .max()
            .unwrap_or(0)
    }

    fn arm_wake(&mut self, ctx: &mut Cx<'_>) {
        let Some(at) = self.gate.next_ns() else {
            return;
        };
        if self.wake.needs(at) {
            if let Some(old) = self.wake.take() {
                ctx.cancel_timer(old);
            }
            let after = at.saturating_sub(ctx.now_ns()).saturating_add(1);
            let timer = ctx.set_timer(after, Timer::Wake(at));
            self.wake.arm(at, timer);
        }
    }

    fn release_deferred(&mut self, ctx: &mut Cx<'_>) {
        while let Some(id) = self.gate.pop_due(ctx.now_ns()) {
            if self.execs.contains_key(&id) {
                self.run_exec(ctx, id);
            }
        }
        self.arm_wake(ctx);
    }

    /// Runs a request's outstanding reads; replies once every one has a value.
    fn run_exec(&mut self, ctx: &mut Cx<'_>, id: u64) {
        let Some(exec) = self.execs.get(&id) else {
            return;
        };
        if exec.ts.time_ns >= self.lease_ns() {
            // Not under the lease yet: extend it and wait for the backups.
            let until = exec.ts.time_ns.saturating_add(self.opts.lease_ns);
            self.lease_waiting.push(id);
            if until > self.lease_sent_ns {
                self.send_lease(ctx, until.max(ctx.now_ns() + self.opts.lease_ns));
            }
            return;
        }
        let rules = self.rules();
        let exec = self.execs.get_mut(&id).expect("present");
        // Which versions earlier reads were answered with died with the old primary's
        // memory; below the floor (every lease it was given) any might have been.
        let below_floor = rules.late_read && exec.ts.time_ns < self.floor_ns;
        for i in 0..exec.reads.len() {
            if exec.values[i].is_some() {
                continue;
            }
            let read = if below_floor {
                ReadResult::Failed(Refusal::BelowFloor)
            } else {
                let key = &exec.reads[i];
                let (read, clean) = self.store.read_as(key, exec.ts, rules, exec.issued_true_ns);
                if clean && !self.opts.pre_attach {
                    // A dependent write on this record may follow in a second round.
                    self.clean_reads.note(exec.txn, key);
                }
                read
            };
            match read {
                ReadResult::Value(v) => exec.values[i] = Some(v),
                ReadResult::Blocked(on) => {
                    ctx.count("aurogon.blocked_reads", 1);
                    self.waiters.entry(on).or_default().push(id);
                    return;
                }
                ReadResult::Failed(refusal) => {
                    ctx.count(refusal_counter(refusal), 1);
                    // Only reported: this may be a late duplicate of a request whose first
                    // copy succeeded and whose transaction is committing; the coordinator
                    // decides.
                    let e = self.execs.remove(&id).expect("present");
                    let failure = Failure::Refused(refusal, None);
                    let (txn, round) = (e.txn, e.round);
                    return ctx.send(
                        e.coordinator,
                        Msg::Failed {
                            txn,
                            round,
                            failure,
                        },
                    );
                }
            }
        }
        let e = self.execs.remove(&id).expect("present");
        let seen_ns = e
            .reads
            .iter()
            .map(|k| self.store.latest_ns(k))
            .max()
            .unwrap_or(0);
        let values = e.values.into_iter().map(|v| v.expect("read")).collect();
        let msg = Msg::Executed {
            txn: e.txn,
            round: e.round,
            shard: self.shard,
            epoch: self.config.epoch,
            values,
            seen_ns,
        };
        ctx.send(e.coordinator, msg);
    }

    // ---- replication and decisions (§4.5) --------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn on_replicate(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        ts: Timestamp,
        epoch: u64,
        writes: Vec<(Key, Value)>,
        write_shards: ShardList,
    ) {
        let shard = self.shard;
        let ok = match self.finished.get(&txn) {
            Some(Decision::Committed(_)) => true,
            Some(Decision::Aborted) => false,
            None if self.refused.contains(&txn) => false,
            // Already held (a retransmission): holding and refusing are exclusive, since
            // recovery counts this replica as a holder from now on.
            None if self.undecided.get(&txn).is_some_and(|u| u.held) => true,
            None if epoch != self.config.epoch || self.is_primary() => {
                // A refusal is final: the coordinator aborts on it, so this replica must
                // never hold the update later (a duplicate after an epoch change).
                self.refused.insert(txn);
                self.persist(ctx, Record::Refused(txn));
                false
            }
            None => {
                let held = Installed {
                    txn,
                    ts,
                    writes: writes.into_iter().map(|(k, v)| (k, Some(v))).collect(),
                    held: true,
                    write_shards,
                };
                self.place(&held, ctx.now_ns());
                self.persist(ctx, Record::Installed(held));
                true
            }
        };
        ctx.send(from, Msg::ReplicateAck { txn, shard, ok });
    }

    /// Places an installed or held update's pending versions (no validation).
    fn place(&mut self, i: &Installed, now_ns: u64) {
        if self.finished.contains_key(&i.txn) {
            return;
        }
        for (key, value) in &i.writes {
            self.store.place(key, i.ts, i.txn, value.clone(), i.held);
        }
        let u = self.undecided.entry(i.txn).or_insert_with(|| Undecided {
            ts: i.ts,
            writes: Vec::new(),
            held: false,
            write_shards: i.write_shards.clone(),
            since_ns: now_ns,
            recovery: None,
        });
        u.held |= i.held;
        for (key, value) in &i.writes {
            match u.writes.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => {
                    if value.is_some() {
                        *v = value.clone();
                    }
                }
                None => u.writes.push((key.clone(), value.clone())),
            }
        }
    }

    /// Applies a decision (once), logged first; wakes the reads it blocked.
    fn decide(
        &mut self,
        ctx: &mut Cx<'_>,
        txn: TxnId,
        ts: Timestamp,
        commit: bool,
        writes: Vec<(Key, Value)>,
    ) {
        if self.finished.contains_key(&txn) {
            return;
        }
        let ts = self.undecided.get(&txn).map_or(ts, |u| u.ts);
        self.persist(
            ctx,
            Record::Decided {
                txn,
                ts,
                commit,
                writes: writes.clone(),
            },
        );
        self.apply(txn, ts, commit, writes);
        self.execs.retain(|_, e| e.txn != txn || commit);
        if let Some(blocked) = self.waiters.remove(&txn) {
            for id in blocked {
                self.run_exec(ctx, id);
            }
        }
    }

    fn apply(&mut self, txn: TxnId, ts: Timestamp, commit: bool, writes: Vec<(Key, Value)>) {
        if self.finished.contains_key(&txn) {
            return;
        }
        let undecided = self.undecided.remove(&txn);
        if commit {
            for (key, value) in &writes {
                self.store.commit(key, ts, txn, value.clone());
            }
        }
        for (key, _) in undecided.map(|u| u.writes).unwrap_or_default() {
            if !commit || !writes.iter().any(|(k, _)| *k == key) {
                self.store.drop_pending(&key, ts, txn);
            }
        }
        let decision = if commit {
            Decision::Committed(writes)
        } else {
            Decision::Aborted
        };
        self.remember(txn, decision);
    }

    fn remember(&mut self, txn: TxnId, decision: Decision) {
        if self.finished.insert(txn, decision).is_none() {
            self.finished_order.push_back(txn);
        }
        while self.finished_order.len() > FINISHED_MAX {
            let old = self.finished_order.pop_front().expect("non-empty");
            self.finished.remove(&old);
        }
    }

    // ---- recovery (§4.5, failures of coordinators) ------------------------------------

    /// What this replica knows of `txn`; answering NotHeld is a promise never to hold it.
    fn answer(&mut self, ctx: &mut Cx<'_>, txn: TxnId) -> Answer {
        if let Some(decision) = self.finished.get(&txn) {
            return match decision {
                Decision::Committed(writes) => Answer::Committed(writes.clone()),
                Decision::Aborted => Answer::Aborted,
            };
        }
        if let Some(u) = self.undecided.get(&txn).filter(|u| u.held) {
            let writes = u
                .writes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().expect("a held update carries values")))
                .collect();
            return Answer::Held(writes);
        }
        if self.refused.insert(txn) {
            self.persist(ctx, Record::Refused(txn));
        }
        Answer::NotHeld
    }

    fn on_answer(&mut self, ctx: &mut Cx<'_>, from: NodeId, txn: TxnId, shard: ShardId, a: Answer) {
        let Some(recovery) = self
            .undecided
            .get_mut(&txn)
            .and_then(|u| u.recovery.as_mut())
        else {
            return;
        };
        match recovery
            .answers
            .iter_mut()
            .find(|(s, n, _)| *s == shard && *n == from)
        {
            Some(slot) => slot.2 = a,
            None => recovery.answers.push((shard, from, a)),
        }
        self.conclude(ctx, txn);
    }

    /// Decides a recovered transaction once the answers allow (§4.5: committed iff every
    /// backup of every write shard holds the update; see [`shard_verdict`]); aborted at
    /// once if any replica aborted it.
    fn conclude(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let u = &self.undecided[&txn];
        let answers = &u.recovery.as_ref().expect("recovering").answers;
        if answers.iter().any(|(_, _, a)| *a == Answer::Aborted) {
            ctx.count("aurogon.recovered_aborts", 1);
            return self.decide(ctx, txn, u.ts, false, Vec::new());
        }
        let mut all_held = true;
        for &s in &u.write_shards {
            let of_shard: Vec<(NodeId, &Answer)> = answers
                .iter()
                .filter(|(sh, _, _)| *sh == s)
                .map(|(_, n, a)| (*n, a))
                .collect();
            match shard_verdict(self.cluster.replicas(s), &of_shard) {
                Some(false) => {
                    ctx.count("aurogon.recovered_aborts", 1);
                    return self.decide(ctx, txn, u.ts, false, Vec::new());
                }
                Some(true) => {}
                None => all_held = false,
            }
        }
        if !all_held {
            return;
        }
        let mine = answers.iter().find_map(|(s, _, a)| match a {
            Answer::Held(w) | Answer::Committed(w) if *s == self.shard => Some(w.clone()),
            _ => None,
        });
        let writes = mine.expect("this shard is a write shard and is held");
        ctx.count("aurogon.recovered_commits", 1);
        self.decide(ctx, txn, u.ts, true, writes);
    }

    /// Starts or repeats the inquiries of transactions undecided for too long.
    fn recover(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        let due: Vec<TxnId> = self
            .undecided
            .iter()
            .filter(|(_, u)| match &u.recovery {
                None => now.saturating_sub(u.since_ns) >= self.opts.recovery_ns,
                Some(r) => now.saturating_sub(r.sent_ns) >= self.opts.retry_ns,
            })
            .map(|(t, _)| *t)
            .collect();
        for txn in due {
            let u = self.undecided.get_mut(&txn).expect("due");
            let r = u.recovery.get_or_insert_with(Recovery::default);
            if r.answers.is_empty() {
                ctx.count("aurogon.recoveries", 1);
            }
            r.sent_ns = now;
            let shards = u.write_shards.clone();
            for s in shards {
                for n in self.cluster.replicas(s).to_vec() {
                    let answered = self.undecided[&txn]
                        .recovery
                        .as_ref()
                        .is_some_and(|r| r.answers.iter().any(|(sh, m, _)| *sh == s && *m == n));
                    if answered {
                        continue;
                    }
                    if n == self.id {
                        let a = self.answer(ctx, txn);
                        let r = self
                            .undecided
                            .get_mut(&txn)
                            .and_then(|u| u.recovery.as_mut());
                        r.expect("recovering").answers.push((s, n, a));
                    } else {
                        ctx.send(n, Msg::Inquire { txn, shard: s });
                    }
                }
            }
            if self.undecided.contains_key(&txn) {
                self.conclude(ctx, txn);
            }
        }
    }

    // ---- failure detection and promotion (§4.5, failures of participants) ------------

    fn tick(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        if self.is_primary() {
            self.send_lease(ctx, now.saturating_add(self.opts.lease_ns));
        } else if now.saturating_sub(self.last_heard_ns) >= self.opts.failover_ns {
            self.campaign(ctx);
        }
        self.recover(ctx);
    }

    /// Asks the coordinators for the next epoch with this replica as primary.
    fn campaign(&mut self, ctx: &mut Cx<'_>) {
        let highest = self.highest_epoch_seen.max(self.config.epoch);
        let Some(ask) = self.campaign.ask(
            ctx.now_ns(),
            self.opts.failover_ns,
            highest,
            &self.cluster.coordinators,
        ) else {
            return;
        };
        if ask.fresh {
            ctx.count("aurogon.campaigns", 1);
        }
        let (shard, epoch) = (self.shard, ask.epoch);
        ctx.multicast(ask.to, &Msg::RequestGrant { shard, epoch });
    }

    fn on_grant(&mut self, ctx: &mut Cx<'_>, from: NodeId, epoch: u64, granted: bool) {
        match self.campaign.on_grant(from, epoch, granted) {
            Some(false) => self.highest_epoch_seen = self.highest_epoch_seen.max(epoch),
            Some(true) if epoch > self.config.epoch => {
                let config = Config {
                    epoch,
                    primary: self.id,
                };
                self.learn(ctx, config);
            }
            _ => {}
        }
    }

    // ---- log -------------------------------------------------------------------------

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
    }

    /// Ends every handler: writes a checkpoint when enough records accumulated.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if self.since_checkpoint < self.opts.checkpoint_every {
            return;
        }
        let snapshot = Snapshot {
            config: self.config,
            lease_ns: self.lease_max_ns,
            records: self
                .store
                .versions()
                .map(|(k, v)| (k.clone(), committed_only(v)))
                .collect(),
            undecided: self
                .undecided
                .iter()
                .map(|(txn, u)| Installed {
                    txn: *txn,
                    ts: u.ts,
                    writes: u.writes.clone(),
                    held: u.held,
                    write_shards: u.write_shards.clone(),
                })
                .collect(),
            finished: self
                .finished_order
                .iter()
                .map(|t| {
                    let w = match &self.finished[t] {
                        Decision::Committed(w) => Some(w.clone()),
                        Decision::Aborted => None,
                    };
                    (*t, w)
                })
                .collect(),
            refused: self.refused.iter().copied().collect(),
        };
        ctx.checkpoint(Record::Checkpoint(Box::new(snapshot)));
        self.since_checkpoint = 0;
    }

    /// Ascending versions; every undecided transaction's versions are pending.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        self.store.check()?;
        if let Some(t) = self
            .undecided
            .keys()
            .find(|t| self.finished.contains_key(t))
        {
            return Err(format!("{t} both undecided and finished"));
        }
        Ok(())
    }

    pub(crate) fn config(&self) -> Config {
        self.config
    }
}

/// §4.5's rule for one write shard, from its replicas' answers: `Some(true)` once every
/// backup holds the update, `Some(false)` once that can no longer happen, `None` until
/// then. The coordinator sends REPLICATE to every replica but the primary that executed
/// the transaction, commits once all of them hold it and aborts when one refuses; so
/// recovery must not commit on fewer holders than the coordinator waits for. Which replica
/// executed is not recorded here, but it never holds (REPLICATE never goes to it, and a
/// backup refuses REPLICATE of an older epoch), so "every backup holds" is "all replicas
/// but one hold", and a refusal (NotHeld, a durable promise) by two replicas rules it out.
/// A committed replica counts as a holder: it committed on such a quorum.
pub(super) fn shard_verdict(replicas: &[NodeId], answers: &[(NodeId, &Answer)]) -> Option<bool> {
    let count = |held: bool| {
        replicas
            .iter()
            .filter(|&&n| {
                answers.iter().any(|(m, a)| {
                    *m == n
                        && match a {
                            Answer::Held(_) | Answer::Committed(_) => held,
                            Answer::NotHeld => !held,
                            Answer::Aborted => false,
                        }
                })
            })
            .count()
    };
    // A shard without backups has no holder to recover from: it is never committed here.
    let needed = replicas.len().saturating_sub(1).max(1);
    if count(true) >= needed {
        Some(true)
    } else if count(false) > replicas.len() - needed {
        Some(false)
    } else {
        None
    }
}

/// A record's committed versions (pending ones are restored from the undecided list).
fn committed_only(versions: &[super::mvcc::Version]) -> Vec<super::mvcc::Version> {
    versions
        .iter()
        .filter(|v| matches!(v.status, Status::Committed(_)))
        .map(|v| super::mvcc::Version {
            rts: v.wts,
            served: Timestamp::ZERO,
            ..v.clone()
        })
        .collect()
}

fn refusal_counter(refusal: Refusal) -> &'static str {
    match refusal {
        Refusal::LateWrite => "aurogon.refused.late_write",
        Refusal::BelowFloor => "aurogon.refused.below_floor",
        Refusal::StaleRead => "aurogon.refused.stale_read",
        Refusal::ImmortalWrite => "aurogon.refused.immortal_write",
        Refusal::LateRead => "aurogon.refused.late_read",
        Refusal::Collected => "aurogon.refused.collected",
    }
}
