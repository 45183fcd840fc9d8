//! An IR replica running TAPIR's replica side (TAPIR §3.2.1 and §5.2): versioned reads,
//! Prepare as an IR consensus operation (TAPIR-OCC-CHECK), Finalize, and Commit / Abort as
//! inconsistent operations, with the IR record made durable (see the module doc). The view
//! change is in `view_change.rs`.

use super::occ::OccState;
use super::options::Options;
use super::view_change::{Status, ViewChange};
use super::wire::{CommitOp, Cx, Msg, Record, RecordEntry, ReplicaSnapshot, ShardTxn, Timer, Vote};
use crate::kit::log::latest_checkpoint;
use meridian_core::{NodeId, Timestamp, TxnId};
use std::collections::{BTreeMap, VecDeque};

/// How many finished transactions a replica remembers (to ignore late PREPAREs of them, and
/// to tell which commits a view change's records name that it has not applied).
const FINISHED_KEPT: usize = 1 << 16;

/// How many of the latest finished transactions an IR record names. A quarter of what a
/// replica remembers, so that a commit some record names and a replica no longer remembers
/// would take it 48 Ki more finished transactions than the record's sender: one it applied
/// long ago is never taken for one it missed.
pub(super) const FINISHED_SHIPPED: usize = FINISHED_KEPT / 4;

/// One replica of one shard.
#[derive(Debug)]
pub struct Replica {
    pub(super) id: NodeId,
    pub(super) opts: Options,
    pub(super) occ: OccState,
    /// The IR record's undecided entries, by transaction.
    pub(super) entries: BTreeMap<TxnId, RecordEntry>,
    /// Finished transactions (committed?), oldest first, bounded by [`FINISHED_KEPT`].
    pub(super) finished: VecDeque<(TxnId, bool)>,
    pub(super) finished_set: rustc_hash::FxHashMap<TxnId, bool>,
    /// The latest commits applied, with their arguments, oldest first; at most
    /// `commits_in_record` (the IR record's Commit operations a view change ships).
    pub(super) commits: VecDeque<CommitOp>,
    /// Local time an entry was last touched, for QUERY (not durable: restarts reset it).
    pub(super) touched_ns: BTreeMap<TxnId, u64>,
    pub(super) since_checkpoint: usize,
    /// IR's view state: view, latest normal view, status, the leader's collected records.
    pub(super) vc: ViewChange,
    /// Whether the log held anything at start (then the replica recovers by a view change).
    pub(super) restarted: bool,
    /// The replicas of this shard, in the cluster's order (the leader of view v is v mod n).
    pub(super) peers: Vec<NodeId>,
}

impl Replica {
    /// Rebuilds the replica from its records: the latest checkpoint, then every record after.
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        peers: Vec<NodeId>,
        records: &[Record],
    ) -> Replica {
        let mut replica = Replica {
            id,
            opts,
            occ: OccState::default(),
            entries: BTreeMap::new(),
            finished: VecDeque::new(),
            finished_set: Default::default(),
            commits: VecDeque::new(),
            touched_ns: BTreeMap::new(),
            since_checkpoint: 0,
            vc: ViewChange::default(),
            restarted: !records.is_empty(),
            peers,
        };
        let (checkpoint, tail) =
            latest_checkpoint(records, |r| matches!(r, Record::ReplicaCheckpoint(_)));
        if let Some(Record::ReplicaCheckpoint(snapshot)) = checkpoint {
            replica.load(snapshot);
        }
        for record in tail {
            replica.replay(record);
        }
        replica.since_checkpoint = tail.len();
        replica
    }

    fn load(&mut self, snapshot: &ReplicaSnapshot) {
        self.vc.view = snapshot.view;
        self.vc.latest_normal_view = snapshot.latest_normal_view;
        self.occ = snapshot.occ.clone();
        for e in &snapshot.entries {
            self.entries.insert(e.txn, e.clone());
        }
        for &(txn, committed) in &snapshot.finished {
            self.finish(txn, committed);
        }
        self.commits = snapshot.commits.iter().cloned().collect();
    }

    fn replay(&mut self, record: &Record) {
        match record {
            Record::Prepared {
                txn,
                attempt,
                ts,
                part,
                vote,
            } => {
                // Re-running the check would see the same state and give the same vote;
                // applying the logged vote avoids depending on that.
                self.occ.remove(*txn);
                if *vote == Vote::Ok {
                    let again = self.occ.prepare(*txn, *ts, part, self.opts.strict);
                    debug_assert_eq!(again, Vote::Ok);
                }
                let entry = RecordEntry {
                    txn: *txn,
                    attempt: *attempt,
                    ts: *ts,
                    part: part.clone(),
                    vote: *vote,
                    finalized: None,
                };
                self.entries.insert(*txn, entry);
            }
            Record::Finalized { txn, attempt, vote } => {
                if let Some(e) = self.entries.get_mut(txn).filter(|e| e.attempt == *attempt) {
                    e.finalized = Some(*vote);
                }
            }
            Record::Committed { txn, ts, part } => self.apply_commit(*txn, *ts, part),
            Record::Aborted { txn } => self.apply_abort(*txn),
            Record::View {
                view,
                latest_normal_view,
            } => {
                self.vc.view = *view;
                self.vc.latest_normal_view = *latest_normal_view;
            }
            other => panic!("log of replica {} holds {other:?}", self.id),
        }
    }

    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        for txn in self.entries.keys() {
            self.touched_ns.insert(*txn, now);
        }
        ctx.set_timer(self.opts.query_ns, Timer::QueryStale);
        if self.restarted {
            // Never vote again from the log alone: rejoin through a view change.
            self.start_view_change(ctx, self.vc.view + 1, Status::Recovering);
        } else {
            self.persist_view(ctx);
        }
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::DoViewChange {
                view,
                latest_normal_view,
                record,
            } => self.on_do_view_change(ctx, from, view, latest_normal_view, record),
            Msg::StartView { view, record } => self.on_start_view(ctx, from, view, *record),
            // Commit and Abort are decisions already taken: applied in any status, so that a
            // replica catches up on the commits a view change's leader must have applied
            // (`view_change.rs`, `try_merge`).
            msg @ (Msg::Commit { txn, .. } | Msg::Abort { txn }) => {
                self.on_request(ctx, from, msg);
                if self.vc.status != Status::Normal {
                    self.on_commit_in_view_change(ctx, txn);
                }
            }
            // IR: a replica in a view change (or recovering) processes no other request; the
            // coordinators retransmit.
            _ if self.vc.status != Status::Normal => {}
            msg => self.on_request(ctx, from, msg),
        }
        self.settle(ctx);
    }

    fn on_request(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Read { txn, keys } => {
                let values = keys
                    .into_iter()
                    .map(|k| {
                        let (value, version) = self.occ.read(&k);
                        (k, value, version)
                    })
                    .collect();
                ctx.send(from, Msg::ReadReply { txn, values });
            }
            Msg::Prepare {
                txn,
                attempt,
                ts,
                part,
                view,
            } => {
                if view > self.vc.view {
                    // A coordinator heard from this shard in a later view: this replica
                    // missed a view change and catches up with a new one.
                    return self.start_view_change(ctx, view + 1, Status::ViewChange);
                }
                self.on_prepare(ctx, from, txn, attempt, ts, part)
            }
            Msg::Finalize {
                txn,
                attempt,
                vote,
                view,
            } => self.on_finalize(ctx, from, txn, attempt, vote, view),
            Msg::Commit { txn, ts, part } => {
                self.commit_once(ctx, CommitOp { txn, ts, part });
                ctx.send(from, Msg::CommitAck { txn });
            }
            Msg::Abort { txn } => {
                if !self.finished_set.contains_key(&txn) {
                    self.persist(ctx, Record::Aborted { txn });
                    self.apply_abort(txn);
                }
            }
            other => panic!("replica {} received {other:?}", self.id),
        }
    }

    /// IR consensus operation Prepare: a duplicate of the current attempt gets the recorded
    /// (or finalized) result again; a new attempt runs TAPIR-OCC-CHECK.
    fn on_prepare(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        attempt: u32,
        ts: Timestamp,
        part: ShardTxn,
    ) {
        if let Some(&committed) = self.finished_set.get(&txn) {
            let vote = if committed { Vote::Ok } else { Vote::Abort };
            return self.reply(ctx, from, txn, attempt, vote, true);
        }
        if let Some(e) = self.entries.get(&txn) {
            if e.attempt > attempt {
                return;
            }
            if e.attempt == attempt {
                let (vote, finalized) = (e.finalized.unwrap_or(e.vote), e.finalized.is_some());
                return self.reply(ctx, from, txn, attempt, vote, finalized);
            }
        }
        let vote = self.occ.prepare(txn, ts, &part, self.opts.strict);
        ctx.count(vote_counter(vote), 1);
        self.persist(
            ctx,
            Record::Prepared {
                txn,
                attempt,
                ts,
                part: part.clone(),
                vote,
            },
        );
        let entry = RecordEntry {
            txn,
            attempt,
            ts,
            part,
            vote,
            finalized: None,
        };
        self.entries.insert(txn, entry);
        self.touched_ns.insert(txn, ctx.now_ns());
        if self.vc.recovered {
            ctx.count("tapir_votes_after_recovery", 1);
        }
        self.reply(ctx, from, txn, attempt, vote, false);
    }

    fn reply(
        &self,
        ctx: &mut Cx<'_>,
        to: NodeId,
        txn: TxnId,
        attempt: u32,
        vote: Vote,
        finalized: bool,
    ) {
        let view = self.vc.view;
        let msg = Msg::PrepareReply {
            txn,
            attempt,
            vote,
            view,
            finalized,
        };
        ctx.send(to, msg);
    }

    /// IR slow path: the coordinator's decided result goes into the record. The OCC state is
    /// left as the replica's own check made it (see the module doc). A result decided from
    /// replies of another view is not recorded: the CONFIRM then names this replica's view,
    /// and the coordinator asks again (the reference client's mismatched-views retry).
    fn on_finalize(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        attempt: u32,
        vote: Vote,
        view: u64,
    ) {
        let confirm = Msg::Confirm {
            txn,
            attempt,
            view: self.vc.view,
        };
        let Some(e) = self.entries.get_mut(&txn) else {
            if self.finished_set.contains_key(&txn) || view != self.vc.view {
                ctx.send(from, confirm);
            }
            return;
        };
        if e.attempt != attempt {
            return;
        }
        if e.finalized.is_none() && view == self.vc.view {
            e.finalized = Some(vote);
            self.persist(ctx, Record::Finalized { txn, attempt, vote });
        }
        ctx.send(from, confirm);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::QueryStale => self.query_stale(ctx),
            Timer::ViewChange { view } => self.on_view_change_timeout(ctx, view),
            other => panic!("replica {} got timer {other:?}", self.id),
        }
        self.settle(ctx);
    }

    fn query_stale(&mut self, ctx: &mut Cx<'_>) {
        ctx.set_timer(self.opts.query_ns, Timer::QueryStale);
        if self.vc.status != Status::Normal {
            return;
        }
        let now = ctx.now_ns();
        let stale: Vec<TxnId> = self
            .touched_ns
            .iter()
            .filter(|(_, t)| now.saturating_sub(**t) >= self.opts.query_ns)
            .map(|(txn, _)| *txn)
            .collect();
        for txn in stale {
            ctx.send(txn.coordinator, Msg::Query { txn });
            self.touched_ns.insert(txn, now);
        }
    }

    /// IR's inconsistent operation Commit, from a COMMIT or a view change's records: logged
    /// and applied unless `txn` already finished here. Whether it was new.
    pub(super) fn commit_once(&mut self, ctx: &mut Cx<'_>, op: CommitOp) -> bool {
        if self.finished_set.contains_key(&op.txn) {
            return false;
        }
        let (txn, ts) = (op.txn, op.ts);
        self.apply_commit(txn, ts, &op.part);
        let part = op.part;
        self.persist(ctx, Record::Committed { txn, ts, part });
        true
    }

    pub(super) fn apply_commit(&mut self, txn: TxnId, ts: Timestamp, part: &ShardTxn) {
        self.occ.commit(txn, ts, part, self.opts.versions_kept);
        self.entries.remove(&txn);
        self.touched_ns.remove(&txn);
        self.finish(txn, true);
        if self.opts.commits_in_record > 0 {
            let op = CommitOp {
                txn,
                ts,
                part: part.clone(),
            };
            self.commits.push_back(op);
        }
        while self.commits.len() > self.opts.commits_in_record {
            self.commits.pop_front();
        }
    }

    pub(super) fn apply_abort(&mut self, txn: TxnId) {
        self.occ.remove(txn);
        self.entries.remove(&txn);
        self.touched_ns.remove(&txn);
        self.finish(txn, false);
    }

    pub(super) fn finish(&mut self, txn: TxnId, committed: bool) {
        if self.finished_set.insert(txn, committed).is_none() {
            self.finished.push_back((txn, committed));
        }
        while self.finished.len() > FINISHED_KEPT {
            if let Some((old, _)) = self.finished.pop_front() {
                self.finished_set.remove(&old);
            }
        }
    }

    pub(super) fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
    }

    /// Ends every handler: once enough records piled up, one checkpoint replaces them.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if self.since_checkpoint >= self.opts.checkpoint_every {
            self.checkpoint(ctx);
        }
    }

    /// Writes the whole state as one checkpoint (also after a view change replaced the record).
    pub(super) fn checkpoint(&mut self, ctx: &mut Cx<'_>) {
        let entries = self.entries.values().cloned().collect();
        let snapshot = ReplicaSnapshot {
            view: self.vc.view,
            latest_normal_view: self.vc.latest_normal_view,
            occ: self.occ.clone(),
            entries,
            finished: self.finished.iter().copied().collect(),
            commits: self.commits.iter().cloned().collect(),
        };
        ctx.checkpoint(Record::ReplicaCheckpoint(Box::new(snapshot)));
        self.since_checkpoint = 0;
    }

    /// What only a bug breaks: every PREPARE-OK entry of the record is in the prepared list.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let prepared_ok = self.entries.values().filter(|e| e.vote == Vote::Ok).count();
        if prepared_ok != self.occ.prepared_len() {
            return Err(format!(
                "replica {}: {prepared_ok} PREPARE-OK entries but {} prepared",
                self.id,
                self.occ.prepared_len()
            ));
        }
        Ok(())
    }
}

fn vote_counter(vote: Vote) -> &'static str {
    match vote {
        Vote::Ok => "tapir_prepare_ok",
        Vote::Abort => "tapir_prepare_abort",
        Vote::Abstain => "tapir_prepare_abstain",
        Vote::Retry(_) => "tapir_prepare_retry",
    }
}

impl Replica {
    /// Whether `txn` is in this replica's prepared list.
    pub fn is_prepared(&self, txn: TxnId) -> bool {
        self.occ.is_prepared(txn)
    }

    /// Whether the replica is in IR's normal status (not in a view change or recovering).
    pub fn is_normal(&self) -> bool {
        self.vc.status == Status::Normal
    }
}
