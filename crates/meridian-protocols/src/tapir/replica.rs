//! An IR replica running TAPIR's replica side (TAPIR §3.2.1 and §5.2): versioned reads,
//! Prepare as an IR consensus operation (TAPIR-OCC-CHECK), Finalize, and Commit / Abort as
//! inconsistent operations, with the IR record made durable (see the module doc).

use super::occ::OccState;
use super::options::Options;
use super::wire::{Cx, Msg, Record, RecordEntry, ReplicaSnapshot, ShardTxn, Timer, Vote};
use crate::kit::log::latest_checkpoint;
use meridian_core::{NodeId, Timestamp, TxnId};
use std::collections::{BTreeMap, VecDeque};

/// How many finished transactions a replica remembers (to ignore late PREPAREs of them).
const FINISHED_KEPT: usize = 1 << 16;

/// One replica of one shard.
#[derive(Debug)]
pub struct Replica {
    id: NodeId,
    opts: Options,
    occ: OccState,
    /// The IR record's undecided entries, by transaction.
    entries: BTreeMap<TxnId, RecordEntry>,
    /// Finished transactions (committed?), oldest first, bounded by [`FINISHED_KEPT`].
    finished: VecDeque<(TxnId, bool)>,
    finished_set: rustc_hash::FxHashMap<TxnId, bool>,
    /// Local time an entry was last touched, for QUERY (not durable: restarts reset it).
    touched_ns: BTreeMap<TxnId, u64>,
    since_checkpoint: usize,
}

impl Replica {
    /// Rebuilds the replica from its records: the latest checkpoint, then every record after.
    pub(crate) fn restore(id: NodeId, opts: Options, records: &[Record]) -> Replica {
        let mut replica = Replica {
            id,
            opts,
            occ: OccState::default(),
            entries: BTreeMap::new(),
            finished: VecDeque::new(),
            finished_set: Default::default(),
            touched_ns: BTreeMap::new(),
            since_checkpoint: 0,
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
        self.occ = snapshot.occ.clone();
        for e in &snapshot.entries {
            self.entries.insert(e.txn, e.clone());
        }
        for &(txn, committed) in &snapshot.finished {
            self.finish(txn, committed);
        }
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
            other => panic!("log of replica {} holds {other:?}", self.id),
        }
    }

    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        for txn in self.entries.keys() {
            self.touched_ns.insert(*txn, now);
        }
        ctx.set_timer(self.opts.query_ns, Timer::QueryStale);
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
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
            } => self.on_prepare(ctx, from, txn, attempt, ts, part),
            Msg::Finalize { txn, attempt, vote } => self.on_finalize(ctx, from, txn, attempt, vote),
            Msg::Commit { txn, ts, part } => {
                if !self.finished_set.contains_key(&txn) {
                    self.persist(
                        ctx,
                        Record::Committed {
                            txn,
                            ts,
                            part: part.clone(),
                        },
                    );
                    self.apply_commit(txn, ts, &part);
                }
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
        self.settle(ctx);
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
            ctx.send(from, Msg::PrepareReply { txn, attempt, vote });
            return;
        }
        if let Some(e) = self.entries.get(&txn) {
            if e.attempt > attempt {
                return;
            }
            if e.attempt == attempt {
                let vote = e.finalized.unwrap_or(e.vote);
                ctx.send(from, Msg::PrepareReply { txn, attempt, vote });
                return;
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
        ctx.send(from, Msg::PrepareReply { txn, attempt, vote });
    }

    /// IR slow path: the coordinator's decided result goes into the record. The OCC state is
    /// left as the replica's own check made it (see the module doc).
    fn on_finalize(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        attempt: u32,
        vote: Vote,
    ) {
        let Some(e) = self.entries.get_mut(&txn) else {
            if self.finished_set.contains_key(&txn) {
                ctx.send(from, Msg::Confirm { txn, attempt });
            }
            return;
        };
        if e.attempt != attempt {
            return;
        }
        if e.finalized.is_none() {
            e.finalized = Some(vote);
            self.persist(ctx, Record::Finalized { txn, attempt, vote });
        }
        ctx.send(from, Msg::Confirm { txn, attempt });
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        let Timer::QueryStale = timer else {
            panic!("replica {} got timer {timer:?}", self.id);
        };
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
        ctx.set_timer(self.opts.query_ns, Timer::QueryStale);
    }

    fn apply_commit(&mut self, txn: TxnId, ts: Timestamp, part: &ShardTxn) {
        self.occ.commit(txn, ts, part, self.opts.versions_kept);
        self.entries.remove(&txn);
        self.touched_ns.remove(&txn);
        self.finish(txn, true);
    }

    fn apply_abort(&mut self, txn: TxnId) {
        self.occ.remove(txn);
        self.entries.remove(&txn);
        self.touched_ns.remove(&txn);
        self.finish(txn, false);
    }

    fn finish(&mut self, txn: TxnId, committed: bool) {
        if self.finished_set.insert(txn, committed).is_none() {
            self.finished.push_back((txn, committed));
        }
        while self.finished.len() > FINISHED_KEPT {
            if let Some((old, _)) = self.finished.pop_front() {
                self.finished_set.remove(&old);
            }
        }
    }

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
    }

    /// Ends every handler: once enough records piled up, one checkpoint replaces them.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if self.since_checkpoint < self.opts.checkpoint_every {
            return;
        }
        let entries = self.entries.values().cloned().collect();
        let snapshot = ReplicaSnapshot {
            occ: self.occ.clone(),
            entries,
            finished: self.finished.iter().copied().collect(),
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
}
