//! IR's view change (IR §3.2.2, TAPIR TR §3.2.2 and §5.2.2) with TAPIR's Merge and Sync.
//!
//! A replica that restarts, or whose view change stalls, or that learns it missed a view,
//! starts view v + 1: it logs the view, stops processing requests, and sends DO-VIEW-CHANGE
//! to its shard, its record to the leader of the view (v mod n, as in UWSysLab/tapir's
//! `replication/ir/replica.cc`). The leader, once it holds the records of f other replicas
//! besides its own, keeps those with the largest latest normal view and, once it has applied
//! every commit they name (see `try_merge`), merges them
//! (IR-MERGE-RECORDS): finalized results stand (R, applied first as TAPIR-SYNC); of the
//! tentative Prepare results, those that ⌈f/2⌉ + 1 records share form d, the rest u; TAPIR's
//! Merge re-runs TAPIR-OCC-CHECK at the leader for d's PREPARE-OK results and for all of u, and
//! keeps d's other majority results. The master record goes to every replica in START-VIEW;
//! each adopts it (TAPIR-SYNC: its prepared list becomes the master's PREPARE-OK entries, plus
//! the PREPARE-OKs it holds of transactions the master names committed whose COMMIT it has not
//! applied yet), logs it as a checkpoint, and returns to normal in the new view.

use super::replica::{Replica, FINISHED_SHIPPED};
use super::wire::{Cx, IrRecord, Msg, Record, RecordEntry, Timer, Vote};
use meridian_core::{NodeId, TxnId};
use std::collections::{BTreeMap, BTreeSet};

/// A replica's IR status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Status {
    #[default]
    Normal,
    /// In a view change it did not start from a restart.
    ViewChange,
    /// Restarted; rejoins when a view change completes.
    Recovering,
}

/// A replica's view state.
#[derive(Debug, Default)]
pub struct ViewChange {
    pub view: u64,
    pub latest_normal_view: u64,
    pub status: Status,
    /// The leader's DO-VIEW-CHANGE records for `view`: sender → (latest normal view, record).
    records: BTreeMap<NodeId, (u64, IrRecord)>,
    /// Set once a restarted replica rejoined (its later votes are counted).
    pub recovered: bool,
    /// Set once this replica adopted `view`'s START-VIEW while it lacks commits the master
    /// record names by id only (older than its window of commit operations): it returns to
    /// normal when their COMMITs (resent by the coordinators) have all arrived.
    awaiting: Option<BTreeSet<TxnId>>,
}

impl Replica {
    fn leader(&self, view: u64) -> NodeId {
        self.peers[(view % self.peers.len() as u64) as usize]
    }

    pub(super) fn persist_view(&mut self, ctx: &mut Cx<'_>) {
        let record = Record::View {
            view: self.vc.view,
            latest_normal_view: self.vc.latest_normal_view,
        };
        self.persist(ctx, record);
    }

    /// Enters `view`'s view change (a recovering replica stays recovering) and tells the
    /// shard: its record to the leader, the view number to the rest.
    pub(super) fn start_view_change(&mut self, ctx: &mut Cx<'_>, view: u64, status: Status) {
        self.vc.view = view;
        if self.vc.status != Status::Recovering {
            self.vc.status = status;
        }
        self.vc.records.clear();
        self.vc.awaiting = None;
        self.persist_view(ctx);
        ctx.count("tapir_view_change_started", 1);
        let leader = self.leader(view);
        let latest_normal_view = self.vc.latest_normal_view;
        for &peer in self.peers.iter().filter(|p| **p != self.id) {
            let record = (peer == leader).then(|| Box::new(self.own_record()));
            let msg = Msg::DoViewChange {
                view,
                latest_normal_view,
                record,
            };
            ctx.send(peer, msg);
        }
        ctx.set_timer(self.opts.view_change_ns, Timer::ViewChange { view });
        if leader == self.id {
            self.try_merge(ctx);
        }
    }

    fn own_record(&self) -> IrRecord {
        IrRecord {
            entries: self.entries.values().cloned().collect(),
            finished: self.shipped_finished().collect(),
            commits: self.commits.iter().cloned().collect(),
        }
    }

    /// The latest finished transactions, as many as a record names.
    fn shipped_finished(&self) -> impl Iterator<Item = (TxnId, bool)> + '_ {
        let skip = self.finished.len().saturating_sub(FINISHED_SHIPPED);
        self.finished.iter().skip(skip).copied()
    }

    /// IR's Sync of the inconsistent operation Commit: applies (and logs) every commit
    /// `record` carries with its arguments that this replica has not applied.
    fn apply_record_commits(&mut self, ctx: &mut Cx<'_>, record: &IrRecord) {
        let mut applied = 0;
        for op in &record.commits {
            if !self.finished_set.contains_key(&op.txn) && self.commit_once(ctx, op.clone()) {
                applied += 1;
            }
        }
        if applied > 0 {
            ctx.count("tapir_commits_applied_from_records", applied);
        }
    }

    /// The commits `record` names that this replica has not applied (after
    /// `apply_record_commits`, those older than the sender's window of commit operations).
    fn missing_commits(&self, record: &IrRecord) -> BTreeSet<TxnId> {
        record
            .finished
            .iter()
            .filter(|&&(txn, committed)| committed && self.finished_set.get(&txn) != Some(&true))
            .map(|&(txn, _)| txn)
            .collect()
    }

    /// A COMMIT applied during a view change: the leader may now merge, and a replica that
    /// adopted START-VIEW but waited for this commit may return to normal.
    pub(super) fn on_commit_in_view_change(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        match &mut self.vc.awaiting {
            Some(missing) => {
                missing.remove(&txn);
                if missing.is_empty() {
                    self.become_normal(ctx);
                }
            }
            None => self.try_merge(ctx),
        }
    }

    pub(super) fn on_do_view_change(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        view: u64,
        latest_normal_view: u64,
        record: Option<Box<IrRecord>>,
    ) {
        let done = view == self.vc.view && self.vc.status == Status::Normal;
        if view < self.vc.view || done || !self.peers.contains(&from) {
            return;
        }
        if view > self.vc.view {
            self.start_view_change(ctx, view, Status::ViewChange);
        }
        if self.leader(view) != self.id || self.vc.status == Status::Normal {
            return;
        }
        if let Some(record) = record {
            self.vc.records.insert(from, (latest_normal_view, *record));
            self.try_merge(ctx);
        }
    }

    /// The leader with f records besides its own: merge, adopt, and start the view.
    ///
    /// The merge re-validates results against the leader's store, so the leader first needs
    /// every commit the records name (IR's Sync before Merge applies the records'
    /// inconsistent operations): it applies those the records carry with their arguments,
    /// and one that missed an older commit (named by id only) waits: COMMITs are applied
    /// during a view change and each one retries the merge, and the view-change timer moves
    /// on to the next leader meanwhile. Commits are facts whatever view a record is from.
    pub(super) fn try_merge(&mut self, ctx: &mut Cx<'_>) {
        let f = (self.peers.len() - 1) / 2;
        let leading = self.vc.status != Status::Normal && self.leader(self.vc.view) == self.id;
        if !leading || self.vc.records.len() < f {
            return;
        }
        let received = std::mem::take(&mut self.vc.records);
        for (_, record) in received.values() {
            self.apply_record_commits(ctx, record);
        }
        self.vc.records = received;
        let newest = self
            .vc
            .records
            .values()
            .map(|(v, _)| *v)
            .fold(self.vc.latest_normal_view, u64::max);
        let behind = self
            .vc
            .records
            .values()
            .any(|(_, r)| !self.missing_commits(r).is_empty());
        if behind {
            ctx.count("tapir_merge_waits_for_commits", 1);
            return;
        }
        let received = std::mem::take(&mut self.vc.records);
        let mut records: Vec<IrRecord> = received
            .into_values()
            .filter(|(v, _)| *v == newest)
            .map(|(_, r)| r)
            .collect();
        if self.vc.latest_normal_view == newest {
            records.push(self.own_record());
        }
        let mut master = self.merge(&records, f, ctx.now_ns());
        master.commits = self.commits.iter().cloned().collect();
        let view = self.vc.view;
        self.become_normal(ctx);
        ctx.count("tapir_view_changes", 1);
        for &peer in self.peers.iter().filter(|p| **p != self.id) {
            let record = Box::new(master.clone());
            ctx.send(peer, Msg::StartView { view, record });
        }
    }

    /// IR-MERGE-RECORDS with TAPIR's Merge over `records`, at this (the leader's) state;
    /// returns the master record (every entry finalized).
    pub(super) fn merge(&mut self, records: &[IrRecord], f: usize, now_ns: u64) -> IrRecord {
        // Commit and Abort are facts whichever view they were applied in. The master record
        // names those the merged records name, and the leader's own latest.
        let mut named: BTreeMap<TxnId, bool> = self.shipped_finished().collect();
        for r in records {
            named.extend(r.finished.iter().copied());
        }
        let mut finished: BTreeMap<TxnId, bool> = self.finished.iter().copied().collect();
        finished.extend(named.iter().map(|(&t, &c)| (t, c)));
        let (synced, d, u) = classify(records, &finished, f);
        self.sync(&synced, &finished, now_ns);
        let mut merged = synced;
        let (d_ok, d_other): (Vec<_>, Vec<_>) = d.into_iter().partition(|(_, v)| *v == Vote::Ok);
        // TAPIR-MERGE: d's PREPARE-OK results are validated again first, then u's; d's
        // other majority results stand. d's PREPARE-OK may be a fast-path commit, so its
        // check must pass whatever committed *after* it in timestamp order: the strict check
        // would call a read stale once a later blind write (which validates above a prepared
        // read) committed, drop a committed transaction from the prepared lists and let its
        // writes be overtaken (the serializable check fails only on conflicts at or below
        // its timestamp, which a fast-path PREPARE-OK excludes). u's results could not have
        // committed, so they get the variant's own check.
        for (e, _) in d_ok {
            let vote = self.occ.prepare(e.txn, e.ts, &e.part, false);
            merged.push(self.adopt_entry(e, vote, now_ns));
        }
        for e in u {
            let vote = self.occ.prepare(e.txn, e.ts, &e.part, self.opts.strict);
            merged.push(self.adopt_entry(e, vote, now_ns));
        }
        for (e, vote) in d_other {
            merged.push(self.adopt_entry(e, vote, now_ns));
        }
        merged.sort_by_key(|e| e.txn);
        IrRecord {
            entries: merged,
            finished: named.into_iter().collect(),
            commits: Vec::new(),
        }
    }

    /// Records `e` as finalized with `vote` (already in or out of the prepared list).
    fn adopt_entry(&mut self, mut e: RecordEntry, vote: Vote, now_ns: u64) -> RecordEntry {
        e.vote = vote;
        e.finalized = Some(vote);
        self.touched_ns.insert(e.txn, now_ns);
        self.entries.insert(e.txn, e.clone());
        e
    }

    /// TAPIR-SYNC: applies the master record's aborts, and makes the record and the prepared
    /// list exactly the master's entries (PREPARE-OK ones prepared), except for
    /// transactions already finished here, and for those the master record names committed
    /// that this replica holds PREPARE-OK without having applied the commit yet: they stay
    /// prepared until their COMMIT arrives (the coordinator resends it until every replica
    /// acknowledged). Dropping them would let a conflicting transaction validate here.
    pub(super) fn sync(
        &mut self,
        entries: &[RecordEntry],
        finished: &BTreeMap<TxnId, bool>,
        now_ns: u64,
    ) {
        for (&txn, &committed) in finished {
            if !committed && !self.finished_set.contains_key(&txn) {
                self.apply_abort(txn);
            }
        }
        let committing: Vec<RecordEntry> = self
            .entries
            .values()
            .filter(|e| finished.get(&e.txn) == Some(&true) && self.occ.is_prepared(e.txn))
            .cloned()
            .collect();
        self.entries.clear();
        self.occ.clear_prepared();
        self.touched_ns.clear();
        for e in entries {
            if self.finished_set.contains_key(&e.txn) {
                continue;
            }
            let vote = e.finalized.unwrap_or(e.vote);
            if vote == Vote::Ok {
                self.occ.force_prepare(e.txn, e.ts, &e.part);
            }
            self.adopt_entry(e.clone(), vote, now_ns);
        }
        for e in committing {
            if !self.entries.contains_key(&e.txn) {
                self.occ.force_prepare(e.txn, e.ts, &e.part);
                self.adopt_entry(e, Vote::Ok, now_ns);
            }
        }
    }

    pub(super) fn on_start_view(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        view: u64,
        record: IrRecord,
    ) {
        let done = view == self.vc.view && self.vc.status == Status::Normal;
        if view < self.vc.view || done || from != self.leader(view) {
            return;
        }
        self.vc.view = view;
        self.apply_record_commits(ctx, &record);
        let finished = record.finished.iter().copied().collect();
        self.sync(&record.entries, &finished, ctx.now_ns());
        let missing = self.missing_commits(&record);
        if missing.is_empty() {
            return self.become_normal(ctx);
        }
        // Normal with a store that lacks a commit, this replica would validate reads it
        // overwrote (and could lead a later view on that store): it waits for the COMMITs.
        ctx.count("tapir_start_view_waits_for_commits", 1);
        self.vc.awaiting = Some(missing);
    }

    /// The view change is over here: normal in the view, logged as one checkpoint (the record
    /// was replaced, so earlier records of the log no longer describe it).
    fn become_normal(&mut self, ctx: &mut Cx<'_>) {
        if self.vc.status == Status::Recovering {
            self.vc.recovered = true;
            ctx.count("tapir_recoveries", 1);
        }
        self.vc.status = Status::Normal;
        self.vc.latest_normal_view = self.vc.view;
        self.vc.records.clear();
        self.vc.awaiting = None;
        self.checkpoint(ctx);
    }

    /// A view change that has not finished starts the next view, except at a replica that
    /// adopted the view's START-VIEW and only waits for COMMITs (a new view would take the
    /// whole shard out of service for what the coordinators' resends deliver to this one).
    pub(super) fn on_view_change_timeout(&mut self, ctx: &mut Cx<'_>, view: u64) {
        let adopted = self.vc.awaiting.is_some();
        if self.vc.view == view && self.vc.status != Status::Normal && !adopted {
            let status = self.vc.status;
            self.start_view_change(ctx, view + 1, status);
        }
    }
}

/// Splits the records' Prepare entries (of each transaction's latest attempt) into finalized
/// results (R; a committed transaction counts as PREPARE-OK, an aborted one is left out),
/// d (a result ⌈f/2⌉ + 1 records share, with it) and u.
#[allow(clippy::type_complexity)]
fn classify(
    records: &[IrRecord],
    finished: &BTreeMap<TxnId, bool>,
    f: usize,
) -> (Vec<RecordEntry>, Vec<(RecordEntry, Vote)>, Vec<RecordEntry>) {
    let mut latest: BTreeMap<TxnId, Vec<&RecordEntry>> = BTreeMap::new();
    for e in records.iter().flat_map(|r| &r.entries) {
        let list = latest.entry(e.txn).or_default();
        match list.first().map(|first| first.attempt) {
            Some(a) if a > e.attempt => {}
            Some(a) if a < e.attempt => *list = vec![e],
            _ => list.push(e),
        }
    }
    let (mut synced, mut d, mut u) = (Vec::new(), Vec::new(), Vec::new());
    for (txn, list) in latest {
        let mut e = list[0].clone();
        let decided = match finished.get(&txn) {
            Some(false) => continue,
            Some(true) => Some(Vote::Ok),
            None => list.iter().find_map(|e| e.finalized),
        };
        if let Some(vote) = decided {
            e.finalized = Some(vote);
            synced.push(e);
            continue;
        }
        let mut counts: Vec<(Vote, usize)> = Vec::new();
        for v in list.iter().map(|e| e.vote) {
            match counts.iter_mut().find(|(w, _)| *w == v) {
                Some((_, n)) => *n += 1,
                None => counts.push((v, 1)),
            }
        }
        match counts.into_iter().find(|(_, n)| *n > f.div_ceil(2)) {
            Some((vote, _)) => d.push((e, vote)),
            None => u.push(e),
        }
    }
    (synced, d, u)
}

#[cfg(test)]
mod tests {
    use super::super::options::Options;
    use super::super::wire::ShardTxn;
    use super::*;
    use meridian_core::txn::Key;
    use meridian_core::{ProtocolConfig, Timestamp};

    fn key(s: &str) -> Key {
        Key::copy_from_slice(s.as_bytes())
    }
    fn txn(n: u64) -> TxnId {
        TxnId::new(NodeId(9), 0, n)
    }
    /// Transaction `n`'s entry: reads `reads` at version zero, writes `writes`, at ts 10·n.
    fn entry(n: u64, attempt: u32, reads: &[&str], writes: &[&str], vote: Vote) -> RecordEntry {
        RecordEntry {
            txn: txn(n),
            attempt,
            ts: Timestamp::new(10 * n, 0),
            part: ShardTxn {
                reads: reads.iter().map(|k| (key(k), Timestamp::ZERO)).collect(),
                writes: writes.iter().map(|k| (key(k), key("v"))).collect(),
            },
            vote,
            finalized: None,
        }
    }
    fn finalized(mut e: RecordEntry, vote: Vote) -> RecordEntry {
        e.finalized = Some(vote);
        e
    }

    /// The leader (f = 1) merges its own record with one other: what each rule decides, and
    /// that its prepared list ends up as exactly the master record's PREPARE-OK entries.
    #[test]
    fn merge_keeps_finalized_and_majority_results_and_revalidates_the_rest() {
        let opts = Options::parse(&ProtocolConfig::default(), 100.0).unwrap();
        let peers = vec![NodeId(0), NodeId(1), NodeId(2)];
        let mut leader = Replica::restore(NodeId(0), opts, peers, &[]);
        let ok = Vote::Ok;
        let retry = Vote::Retry(Timestamp::new(99, 0));
        let mine = IrRecord {
            entries: vec![
                // 1: finalized PREPARE-OK (a write of x) at one replica: final.
                finalized(entry(1, 0, &[], &["x"], ok), ok),
                // 2: PREPARE-OK at both, nothing conflicts: re-validated, stays OK.
                entry(2, 0, &["a"], &["a"], ok),
                // 3: PREPARE-OK at both but reads x, which 1 (finalized) writes: the leader's
                // re-validation abstains (it could not have committed on the fast path).
                entry(3, 0, &["x"], &[], ok),
                // 4: ABSTAIN at both: the majority result stands, though it would pass now.
                entry(4, 0, &["y"], &[], Vote::Abstain),
                // 5: OK here, ABORT there: no majority, re-validated (passes).
                entry(5, 0, &["z"], &[], ok),
                // 6: committed at the other replica: PREPARE-OK whatever this one said.
                entry(6, 0, &["w"], &["w"], Vote::Abstain),
                // 7: aborted at the other replica: gone.
                entry(7, 0, &["u"], &["u"], ok),
                // 8: an older attempt here; only the latest attempt counts.
                entry(8, 0, &[], &["t"], retry),
            ],
            finished: vec![],
            commits: vec![],
        };
        let other = IrRecord {
            entries: vec![
                entry(1, 0, &[], &["x"], ok),
                entry(2, 0, &["a"], &["a"], ok),
                entry(3, 0, &["x"], &[], ok),
                entry(4, 0, &["y"], &[], Vote::Abstain),
                entry(5, 0, &["z"], &[], Vote::Abort),
                entry(8, 1, &[], &["t"], ok),
            ],
            finished: vec![(txn(6), true), (txn(7), false)],
            commits: vec![],
        };
        let master = leader.merge(&[mine, other], 1, 0);
        let decided: Vec<(TxnId, u32, Option<Vote>)> = master
            .entries
            .iter()
            .map(|e| (e.txn, e.attempt, e.finalized))
            .collect();
        let want: Vec<(TxnId, u32, Option<Vote>)> = [
            (1, 0, ok),
            (2, 0, ok),
            (3, 0, Vote::Abstain),
            (4, 0, Vote::Abstain),
            (5, 0, ok),
            (6, 0, ok),
            (8, 1, ok),
        ]
        .into_iter()
        .map(|(n, attempt, vote)| (txn(n), attempt, Some(vote)))
        .collect();
        assert_eq!(decided, want);
        assert!(master.finished.contains(&(txn(7), false)));
        for (n, prepared) in [(1, true), (2, true), (3, false), (4, false), (5, true)] {
            assert_eq!(leader.is_prepared(txn(n)), prepared, "txn {n}");
        }
        assert!(leader.is_prepared(txn(6)) && leader.is_prepared(txn(8)));
        assert!(!leader.is_prepared(txn(7)));
        assert_eq!(leader.check_invariants(), Ok(()));
    }

    /// Seed 180's check (strict): a transaction PREPARE-OK at both merged records may have
    /// committed on the fast path; a blind write at a later timestamp validated above its
    /// prepared read and committed first. The merge must keep it PREPARE-OK (the strict read
    /// check alone would call its read stale and drop it from the prepared lists).
    #[test]
    fn merge_keeps_a_majority_prepare_ok_that_a_later_blind_write_overtook() {
        let opts = Options::parse(&ProtocolConfig::default(), 100.0).unwrap();
        assert!(opts.strict);
        let peers = vec![NodeId(0), NodeId(1), NodeId(2)];
        let mut leader = Replica::restore(NodeId(0), opts, peers, &[]);
        // Transaction 1 reads r (version zero) and writes s at ts 10; 2 writes r at ts 20.
        let read = entry(1, 0, &["r"], &["s"], Vote::Ok);
        let blind = ShardTxn {
            reads: vec![],
            writes: vec![(key("r"), key("w"))],
        };
        leader.occ.commit(txn(2), Timestamp::new(20, 0), &blind, 8);
        let record = IrRecord {
            entries: vec![read.clone()],
            ..IrRecord::default()
        };
        let master = leader.merge(&[record.clone(), record], 1, 0);
        assert_eq!(master.entries[0].finalized, Some(Vote::Ok));
        assert!(leader.is_prepared(txn(1)), "its write of s stays protected");
    }
}
