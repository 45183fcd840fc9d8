//! The server's failure half (§4; report Algorithms 5–6 and Appendix B): heartbeats to the
//! view manager, the view change (steps ②–⑤), rejoin by state transfer, and the leader
//! acting as recovery coordinator for a transaction whose coordinator vanished mid-multicast.

use super::truncate::PosList;
use super::{execute, keys_on, mark_decided, reply_hash, Entry, Footprint, Server, State};
use crate::tiga::queue::KeyMaps;
use crate::tiga::view::{Status, View, VIEW_MANAGER};
use crate::tiga::wire::{Checkpoint, FastReply, Msg, TxnBody, ViewChangeReport};
use crate::tiga::TigaNode;
use meridian_core::node::Ctx;
use meridian_core::txn::AbortReason;
use meridian_core::{NodeId, ShardId, Timestamp, TxnId};
use meridian_store::{entry_hash, footprint, LogSnapshot, MvStore, OrderedLog};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Progress of the view change (or rejoin) this server is in.
#[derive(Debug, Default)]
pub(crate) struct ViewChangeState {
    /// This server's report for the current g-view, resent until the new log arrives.
    report: Option<ViewChangeReport>,
    /// When the report, verifications or a state-transfer request were last sent.
    sent_ns: u64,
    /// New leader: the reports of this shard's servers, by replica index.
    reports: BTreeMap<u32, ViewChangeReport>,
    /// New leader: the log rebuilt from f + 1 reports (step ③), awaiting step ④; its
    /// first `part_a` entries are part (a).
    rebuilt: Option<Vec<TxnBody>>,
    part_a: usize,
    /// New leader: the largest checkpoint among the reports of the latest view; the rebuilt
    /// log starts there.
    base: Option<Checkpoint>,
    /// New leader: the log after step ④'s first round, awaiting the second.
    verified: Option<Vec<TxnBody>>,
    /// New leader, per round of step ④: what it told every other shard's leader (kept to
    /// answer a late one), and what every other shard's leader told it.
    verify_out: [BTreeMap<ShardId, Vec<TxnBody>>; 2],
    verify_in: [BTreeMap<ShardId, Vec<TxnBody>>; 2],
    /// Round 0: per shard, which of its entries are in its part (a).
    agreed_in: BTreeMap<ShardId, Vec<bool>>,
}

impl Server {
    // ---- talking to the view manager ----------------------------------------------------

    pub(super) fn heartbeat(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let now = ctx.now_ns();
        if self.heartbeat_ns != 0 && now.saturating_sub(self.heartbeat_ns) < self.opts.heartbeat_ns
        {
            return;
        }
        self.heartbeat_ns = now.max(1);
        let msg = Msg::Heartbeat {
            g_view: self.view.g_view,
            status: self.status,
        };
        ctx.multicast(self.cluster.services(VIEW_MANAGER), &msg);
    }

    /// Asks the view manager for its view, at most once per `retry_ms`.
    pub(super) fn inquire(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        self.inquirer
            .inquire(ctx, &self.cluster, self.opts.retry_ns);
    }

    /// Retransmissions while not NORMAL.
    pub(super) fn tick_view_change(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let now = ctx.now_ns();
        if now.saturating_sub(self.view_change.sent_ns) < self.opts.retry_ns {
            return;
        }
        self.view_change.sent_ns = now;
        match self.status {
            Status::Recovering | Status::Restarted => {
                self.inquire(ctx);
                self.request_transfer(ctx);
            }
            Status::ViewChange => {
                if let Some(report) = &self.view_change.report {
                    if !self.is_leader {
                        let msg = Msg::ViewChangeReport(Box::new(report.clone()));
                        ctx.send(self.leader, msg);
                    }
                }
                for round in 0..2u8 {
                    let vc = &self.view_change;
                    let missing: Vec<ShardId> = vc.verify_out[usize::from(round)]
                        .keys()
                        .filter(|s| !vc.verify_in[usize::from(round)].contains_key(s))
                        .copied()
                        .collect();
                    for shard in missing {
                        self.send_verify(ctx, shard, round, false);
                    }
                }
            }
            Status::Normal => {}
        }
    }

    // ---- step ②: a new view arrives ------------------------------------------------------

    pub(super) fn on_new_view(&mut self, ctx: &mut Ctx<'_, TigaNode>, view: View) {
        if view.g_view <= self.view.g_view {
            return;
        }
        if self.status == Status::Recovering {
            // Algorithm 5 line 4: a recovering server takes no part in the view change; it
            // asks the new leader for its state instead (Algorithm 6).
            self.adopt_view(view);
            self.view_change = ViewChangeState::default();
            self.request_transfer(ctx);
            return;
        }
        // Algorithm 5 lines 6–15: stop processing, put the queue into the log list (the
        // report lists it), send the log list to the new leader. A durable server restarted
        // from its records (RESTARTED) takes part with the log list they hold.
        let report = self.make_report(view.g_view);
        self.adopt_view(view);
        self.persist_report(ctx, &report);
        self.status = Status::ViewChange;
        self.pq.clear();
        self.wake.reset();
        self.view_change = ViewChangeState {
            report: Some(report.clone()),
            sent_ns: ctx.now_ns(),
            ..ViewChangeState::default()
        };
        if self.is_leader {
            self.on_report(ctx, self.id, report);
        } else {
            ctx.send(self.leader, Msg::ViewChangeReport(Box::new(report)));
        }
    }

    /// This server's log list: entries consistent with its leader (a leader's whole release
    /// stream; a follower's synced prefix), then its other entries — released fast, queued,
    /// sealed — at the timestamps it holds. Held (late, never accepted) ones are not in it.
    pub(super) fn make_report(&self, g_view: u64) -> ViewChangeReport {
        if let Some(recovered) = &self.recovered {
            return recovered.report(self, g_view);
        }
        // The state belongs to the role this server had when it was installed.
        let prefix = if self.stream.is_empty() {
            &self.synced
        } else {
            &self.stream
        };
        let synced: Vec<TxnBody> = prefix
            .iter()
            .map(|&(id, ts)| self.body_at(id, ts))
            .collect();
        let checkpoint = self.checkpoint();
        assert_eq!(
            checkpoint.pos,
            prefix.base(),
            "the list starts at the latest cut"
        );
        let in_prefix: FxHashSet<TxnId> = prefix.iter().map(|&(id, _)| id).collect();
        let mut others: Vec<TxnBody> = self
            .txns
            .iter()
            .filter(|(id, e)| {
                !in_prefix.contains(id)
                    && matches!(e.state, State::Released | State::Queued | State::Sealed)
            })
            .map(|(_, e)| e.body.clone())
            .collect();
        others.sort_unstable_by_key(|b| (b.ts, b.id));
        ViewChangeReport {
            g_view,
            shard: self.shard,
            replica: self.replica,
            last_normal_view: self.last_normal_view,
            checkpoint,
            synced,
            others,
        }
    }

    pub(super) fn body_at(&self, id: TxnId, ts: Timestamp) -> TxnBody {
        let mut body = self.txns[&id].body.clone();
        body.ts = ts;
        body
    }

    // ---- step ③: the new leader rebuilds the log -------------------------------------------

    pub(super) fn on_report(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        from: NodeId,
        report: ViewChangeReport,
    ) {
        if report.shard != self.shard || report.g_view != self.view.g_view {
            if report.g_view > self.view.g_view {
                self.inquire(ctx);
            }
            return;
        }
        if !self.is_leader {
            return;
        }
        match self.status {
            Status::Normal => {
                // The sender missed our start-view: send our log list as it is now.
                let log = self.stream_bodies();
                let g_view = self.view.g_view;
                let checkpoint = Box::new(self.checkpoint());
                ctx.send(
                    from,
                    Msg::StartView {
                        g_view,
                        checkpoint,
                        log,
                    },
                );
            }
            Status::ViewChange => {
                self.view_change.reports.insert(report.replica, report);
                let enough = self.view_change.reports.len() > self.f;
                if enough && self.view_change.rebuilt.is_none() {
                    let (base, log, part_a) = self.rebuild_log();
                    self.view_change.rebuilt = Some(log);
                    self.view_change.part_a = part_a;
                    self.view_change.base = Some(base);
                    self.verify_all(ctx, 0);
                    self.advance_verification(ctx);
                }
            }
            Status::Recovering | Status::Restarted => {}
        }
    }

    /// Algorithm 5 `rebuild-log`: (a) the synced prefix of the report with the largest
    /// last-normal-view and, among those, the largest sync-point; (b) every other entry that
    /// ⌈f/2⌉ + 1 reports hold (line 58: presence, whatever timestamp each holds), at the
    /// largest timestamp any of them holds, in timestamp order — one that conflicts with an
    /// (a) entry of a larger timestamp is raised above it (see the module doc: such an entry
    /// cannot have committed, and placing it before the (a) entry would change that entry's
    /// committed result).
    ///
    /// With truncation: the base is the largest checkpoint among the reports of the largest
    /// last-normal-view (positions of one view's stream; another view numbers differently),
    /// part (a) skips the positions it covers, and part (b) drops entries at or below its
    /// timestamp — such an entry is in the checkpoint or was never agreed at a timestamp
    /// that low (see the module doc, "Log truncation").
    fn rebuild_log(&self) -> (Checkpoint, Vec<TxnBody>, usize) {
        let reports: Vec<&ViewChangeReport> = self.view_change.reports.values().collect();
        let lnv = reports
            .iter()
            .map(|r| r.last_normal_view)
            .max()
            .expect("f + 1 reports");
        let latest = || reports.iter().filter(|r| r.last_normal_view == lnv);
        let end = |r: &ViewChangeReport| r.checkpoint.pos + r.synced.len() as u64;
        let best = latest()
            .max_by_key(|r| (end(r), std::cmp::Reverse(r.replica)))
            .expect("a report with the largest last-normal-view");
        let base = latest()
            .map(|r| &r.checkpoint)
            .max_by_key(|c| c.pos)
            .expect("a report with the largest last-normal-view")
            .clone();
        assert!(
            best.checkpoint.pos <= base.pos && base.pos <= end(best),
            "one view's checkpoints are prefixes of its longest synced list"
        );
        let skip = (base.pos - best.checkpoint.pos) as usize;
        let mut log = best.synced[skip..].to_vec();
        let part_a = log.len();
        let in_a: FxHashSet<TxnId> = log.iter().map(|b| b.id).collect();
        let a_maps = self.part_a_maps(&log);
        // Part (b): by transaction, how many reports hold it and the largest timestamp any
        // of them holds (a leader's updated timestamp is above its followers' original one).
        let mut seen: FxHashMap<TxnId, (usize, TxnBody)> = FxHashMap::default();
        for r in &reports {
            let mut listed = FxHashSet::default();
            for b in r.synced.iter().chain(&r.others) {
                if !in_a.contains(&b.id) && listed.insert(b.id) {
                    let slot = seen.entry(b.id).or_insert((0, b.clone()));
                    slot.0 += 1;
                    // A decision any server knew stands.
                    let (aborted, decided) =
                        (slot.1.aborted || b.aborted, slot.1.decided || b.decided);
                    if b.ts > slot.1.ts {
                        slot.1 = b.clone();
                    }
                    (slot.1.aborted, slot.1.decided) = (aborted, decided);
                }
            }
        }
        let threshold = self.f.div_ceil(2) + 1;
        let mut part_b: Vec<TxnBody> = seen
            .into_values()
            .filter(|(count, body)| *count >= threshold && body.ts > base.ts())
            .map(|(_, body)| body)
            .collect();
        self.raise_above_part_a((&a_maps, &log), base.ts(), &mut part_b);
        log.extend(part_b);
        (base, log, part_a)
    }

    /// rMap/wMap of part (a) entries (this shard's keys).
    fn part_a_maps(&self, part_a: &[TxnBody]) -> KeyMaps {
        let mut maps = KeyMaps::default();
        for b in part_a {
            let (reads, writes) = keys_on(b, self.shard);
            maps.record(&reads, &writes, b.ts);
        }
        maps
    }

    /// An entry outside part (a) that conflicts with an (a) entry of a larger timestamp
    /// cannot have been agreed at its timestamp (this shard's leader released that (a)
    /// entry without it), so it has not committed: raise it above every such entry, as a
    /// leader raises a late arrival. An entry at or below the checkpoint's timestamp
    /// `base` counts as conflicting with it (its keys are gone; as the GC floor does).
    /// Leaves `entries` sorted by timestamp.
    ///
    /// A raised timestamp is one no entry of the log holds: the store keeps one version per
    /// key and timestamp, and an earlier pass (part (b), then step ④) or a bump under this
    /// leader's id may hold `floor + 1` already. Two transactions at one timestamp made a
    /// replica refuse the second one's writes and vote it aborted after it had committed
    /// elsewhere (seed 89, detective, chrony: a G1a).
    fn raise_above_part_a(
        &self,
        (a_maps, part_a): (&KeyMaps, &[TxnBody]),
        base: Timestamp,
        entries: &mut [TxnBody],
    ) {
        entries.sort_unstable_by_key(|b| (b.ts, b.id));
        let mut taken: FxHashSet<Timestamp> =
            part_a.iter().chain(entries.iter()).map(|b| b.ts).collect();
        let mut raised_ns = 0;
        for b in entries.iter_mut() {
            let (reads, writes) = keys_on(b, self.shard);
            let conflict = a_maps.conflict_floor(&reads, &writes, b.ts);
            if let Some(floor) = super::gc::floor_or_conflict(conflict, b.ts, base) {
                let mut ts = Timestamp::new(raised_ns.max(floor.time_ns) + 1, self.id.0);
                while taken.contains(&ts) {
                    ts.time_ns += 1;
                }
                taken.insert(ts);
                raised_ns = ts.time_ns;
                b.ts = ts;
            }
        }
        entries.sort_unstable_by_key(|b| (b.ts, b.id));
    }

    // ---- step ④: timestamp verification across shards ------------------------------------
    //
    // Two rounds. Round 0 is Algorithm 5's: every entry takes the largest timestamp any
    // involved shard holds, and an entry another shard recovered but this one did not is
    // added (its coordinator may have committed it there, with readers). A taken or added
    // timestamp may sit below a conflicting part-(a) entry of this shard — the transaction
    // then cannot have committed anywhere (see `raise_above_part_a`) — so it is raised
    // above it; round 1 exchanges the results and every entry takes the largest again.

    /// Sends this leader's round-`round` list to every other shard's leader.
    fn verify_all(&mut self, ctx: &mut Ctx<'_, TigaNode>, round: u8) {
        for s in 0..self.cluster.shard_count() {
            if ShardId(s) != self.shard {
                self.send_verify(ctx, ShardId(s), round, false);
            }
        }
    }

    fn send_verify(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        shard: ShardId,
        round: u8,
        answer: bool,
    ) {
        let vc = &self.view_change;
        let list = if round == 0 {
            &vc.rebuilt
        } else {
            &vc.verified
        };
        let Some(log) = list else {
            return;
        };
        let part_a = if round == 0 { vc.part_a } else { 0 };
        let (entries, agreed): (Vec<TxnBody>, Vec<bool>) = log
            .iter()
            .enumerate()
            .filter(|(_, b)| b.involves(shard))
            .map(|(i, b)| (b.clone(), i < part_a))
            .unzip();
        self.view_change.verify_out[usize::from(round)].insert(shard, entries.clone());
        let msg = Msg::Verify {
            g_view: self.view.g_view,
            shard: self.shard,
            round,
            entries,
            agreed,
            answer,
        };
        ctx.send(self.leaders[shard.index()], msg);
    }

    pub(super) fn on_verify(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        from: NodeId,
        (g_view, shard, round, answer): (u64, ShardId, u8, bool),
        (entries, agreed): (Vec<TxnBody>, Vec<bool>),
    ) {
        if g_view != self.view.g_view {
            if g_view > self.view.g_view {
                self.inquire(ctx);
            }
            return;
        }
        let valid = shard != self.shard
            && shard.index() < self.leaders.len()
            && from == self.leaders[shard.index()]
            && round < 2;
        if !self.is_leader || !valid {
            return;
        }
        match self.status {
            // A leader still waiting for ours (it resends until it has it): answer once,
            // never an answer — whether we finished or wait for its next round.
            Status::Normal if !answer => self.send_verify(ctx, shard, round, true),
            Status::ViewChange => {
                if !answer {
                    self.send_verify(ctx, shard, round, true);
                }
                self.view_change.verify_in[usize::from(round)].insert(shard, entries);
                if round == 0 {
                    self.view_change.agreed_in.insert(shard, agreed);
                }
                self.advance_verification(ctx);
            }
            _ => {}
        }
    }

    /// Moves step ④ on: round 0 complete → the verified log and round 1; round 1 complete
    /// → step ⑤.
    fn advance_verification(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let others = self.cluster.shard_count() as usize - 1;
        let vc = &self.view_change;
        let Some(rebuilt) = &vc.rebuilt else {
            return;
        };
        if vc.verified.is_none() && vc.verify_in[0].len() == others {
            let base = vc.base.as_ref().expect("rebuilt").ts();
            let received = self.untruncated(base);
            let mut log = merge_largest(rebuilt, &received, self.shard, true);
            let (part_a, rest) = log.split_at_mut(vc.part_a.min(rebuilt.len()));
            let a_maps = self.part_a_maps(part_a);
            self.raise_above_part_a((&a_maps, part_a), base, rest);
            self.view_change.verified = Some(log);
            self.verify_all(ctx, 1);
        }
        let vc = &self.view_change;
        if let Some(verified) = &vc.verified {
            if vc.verify_in[1].len() == others {
                let log = merge_largest(verified, &vc.verify_in[1], self.shard, false);
                self.finish_view_change(ctx, log);
            }
        }
    }

    /// Round 0's lists from the other shards without the entries they hold in part (a)
    /// at or below this shard's checkpoint `base`: agreed that low, such an entry was
    /// released here before the cut, so the checkpoint holds it (module doc, "Log
    /// truncation"). Their other entries that low were never agreed that low: they are
    /// added, then raised above `base`.
    fn untruncated(&self, base: Timestamp) -> BTreeMap<ShardId, Vec<TxnBody>> {
        let vc = &self.view_change;
        vc.verify_in[0]
            .iter()
            .map(|(&shard, entries)| {
                let agreed = vc.agreed_in.get(&shard).map_or(&[][..], Vec::as_slice);
                let kept = entries
                    .iter()
                    .enumerate()
                    .filter(|&(i, b)| b.ts > base || !agreed.get(i).copied().unwrap_or(false))
                    .map(|(_, b)| b.clone())
                    .collect();
                (shard, kept)
            })
            .collect()
    }

    /// Step ⑤: the verified log, sorted by timestamp, is executed on the checkpoint and
    /// sent to the followers with it.
    fn finish_view_change(&mut self, ctx: &mut Ctx<'_, TigaNode>, mut log: Vec<TxnBody>) {
        log.sort_unstable_by_key(|b| (b.ts, b.id));
        // One transaction per timestamp (the store refuses a second version at one).
        if let Some(w) = log.windows(2).find(|w| w[0].ts == w[1].ts) {
            panic!(
                "{}: the rebuilt log holds {} and {} at one timestamp {}",
                self.id, w[0].id, w[1].id, w[0].ts
            );
        }
        for b in &mut log {
            // A decision taken before the view change stands. An entry whose decision
            // matters and that no server knew decided is aborted: every shard holds the same decided
            // flags after step ④, and nothing depended on its decision (its outcome waits
            // for the slow path; later fast replies hash the decisions they follow).
            if !b.decided && b.decision_matters() {
                b.aborted = true;
            }
            b.decided = true;
        }
        let g_view = self.view.g_view;
        let base = self.view_change.base.take().expect("rebuilt");
        self.install_log(ctx, (&base, None), log.clone(), true);
        self.status = Status::Normal;
        self.last_normal_view = g_view;
        self.view_change.report = None;
        self.persist_snapshot(ctx);
        let msg = Msg::StartView {
            g_view,
            checkpoint: Box::new(base),
            log,
        };
        ctx.multicast(self.followers.clone(), &msg);
    }

    /// Replaces this server's state with `log` (in order): a leader executes it and makes it
    /// its release stream; a follower makes it its synced prefix and executes it as the
    /// commit-point advances.
    fn install_log(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        (base, hashes): (&Checkpoint, Option<LogSnapshot<Footprint>>),
        log: Vec<TxnBody>,
        as_leader: bool,
    ) {
        self.reset_state(base);
        let rejoin = hashes.is_some();
        if let Some(snapshot) = hashes {
            self.log = OrderedLog::from_snapshot(snapshot).expect("a leader's log snapshot");
        }
        if base.pos > 0 {
            ctx.count(super::truncate::RESTORED, 1);
            if rejoin {
                ctx.count(super::truncate::REJOINS_RESTORED, 1);
            }
        }
        let now = ctx.now_ns();
        for body in log {
            let (id, ts) = (body.id, body.ts);
            assert!(
                ts > base.ts(),
                "a log above a checkpoint is above its timestamp"
            );
            let mut e = Entry::new(body, self.shard, now);
            self.maps.record(&e.reads, &e.writes, ts);
            if as_leader {
                let mut result =
                    execute(&mut self.store, &self.procedures, &e.body, self.shard, ts);
                e.own_abort = result.is_err();
                // Decided with the other shards' knowledge (see `finish_view_change`): a
                // decided-committed entry whose decision matters was executed on this
                // prefix before, so its own pieces cannot abort now. (A read-only one, or
                // a type error, may: harmless, resp. the limit the module doc names.)
                debug_assert!(!e.own_abort || e.body.aborted || !e.body.decision_matters());
                e.body.aborted |= e.own_abort;
                if e.body.aborted {
                    self.store.revoke(id);
                    // The coordinator (resubmitting) must hear the abort from this leader
                    // even if its own pieces ran fine.
                    result = result.and(Err(AbortReason::Failure));
                } else {
                    self.store.commit_final(id);
                }
                e.last_fast = Some(Arc::new(FastReply {
                    txn: id,
                    shard: self.shard,
                    replica: self.replica,
                    ts,
                    hash: reply_hash(
                        (&self.log, &self.marks),
                        &e.reads,
                        &e.writes,
                        id,
                        entry_hash(id, ts),
                    ),
                    result: Some(result.clone()),
                    g_view: self.view.g_view,
                    reexecuted: false,
                }));
                e.result = Some(result);
                e.state = State::Released;
                self.stream.push((id, ts));
            } else {
                e.state = State::Synced;
                self.synced.push((id, ts));
            }
            if self.log.ts_of(id) != Some(ts) {
                self.log
                    .insert(id, ts, Footprint(footprint(&e.reads, &e.writes)))
                    .expect("a rebuilt log holds each transaction once");
            }
            debug_assert!(e.body.decided, "a leader's log holds decided entries");
            mark_decided(&mut self.marks, &e);
            self.txns.insert(id, e);
            self.last_assigned_ns = self.last_assigned_ns.max(ts.time_ns);
        }
        self.sync_point = self.synced.end();
        // A new leader's followers get the whole log in `start-view`.
        self.sync_sent = self.stream.end();
    }

    /// Empties this server's state down to `base`: the store restored from it, every
    /// position below it truncated, the GC floor at its timestamp.
    fn reset_state(&mut self, base: &Checkpoint) {
        self.recovered = None;
        self.txns.clear();
        self.pq.clear();
        self.maps = KeyMaps::default();
        self.log = OrderedLog::new();
        self.marks.clear();
        self.store = MvStore::restore(&base.store).expect("checkpoints are cut by replicas");
        self.wake.reset();
        self.notes.clear();
        self.sealed.clear();
        self.stream = PosList::starting_at(base.pos);
        self.sync_sent = base.pos;
        self.follower_sync.clear();
        self.follower_resent_ns.clear();
        self.commit_point = base.pos;
        self.commit_sent = base.pos;
        self.sync_point = base.pos;
        self.sync_buffer.clear();
        self.synced = PosList::starting_at(base.pos);
        self.executed_upto = base.pos;
        self.reported = 0;
        self.reported_ns = 0;
        self.fetching.clear();
        self.slow_wanted.clear();
        // The new store starts at the checkpoint (watermark its timestamp): so does the
        // floor — an arrival at or below it conflicts with the checkpoint's entries.
        self.gc.reset_to(base.ts());
        self.trunc.reset_to(base.pos, base.ts());
    }

    fn stream_bodies(&self) -> Vec<TxnBody> {
        self.stream
            .iter()
            .map(|&(id, ts)| self.body_at(id, ts))
            .collect()
    }

    /// Step ⑤ at a follower: the new leader's log list replaces its own.
    pub(super) fn on_start_view(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        from: NodeId,
        g_view: u64,
        (base, log): (Checkpoint, Vec<TxnBody>),
    ) {
        let current = g_view == self.view.g_view && from == self.leader && !self.is_leader;
        if self.status != Status::ViewChange || !current {
            return;
        }
        self.install_log(ctx, (&base, None), log, false);
        self.status = Status::Normal;
        self.last_normal_view = g_view;
        self.view_change = ViewChangeState::default();
        self.persist_snapshot(ctx);
    }

    // ---- rejoin (Algorithm 6) ---------------------------------------------------------------

    fn request_transfer(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let recovering = matches!(self.status, Status::Recovering | Status::Restarted);
        if recovering && !self.is_leader {
            let g_view = self.view.g_view;
            ctx.send(self.leader, Msg::StateTransferReq { g_view });
            self.view_change.sent_ns = ctx.now_ns();
        }
        // A recovering server that is its view's leader waits: its heartbeats say
        // RECOVERING, so the view manager replaces it.
    }

    pub(super) fn on_state_transfer_req(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        from: NodeId,
        g_view: u64,
    ) {
        let mine = self.cluster.replicas(self.shard).contains(&from);
        if self.status != Status::Normal || !self.is_leader || g_view != self.view.g_view || !mine {
            return;
        }
        // What this leader released, and what it holds sealed (it may have answered those
        // fast, and so may the rejoining server before it crashed).
        let pending: Vec<TxnBody> = self
            .pq
            .iter()
            .filter(|(_, id)| self.txns[id].state == State::Sealed)
            .map(|&(ts, id)| self.body_at(id, ts))
            .collect();
        let above = self.log.first_pos_after(self.trunc.ts);
        let hashes = self
            .log
            .snapshot_from(above)
            .expect("a position in the log");
        let msg = Msg::StateTransfer {
            g_view,
            checkpoint: Box::new(self.checkpoint()),
            hashes: Box::new(hashes),
            log: self.stream_bodies(),
            pending,
            commit_point: self.commit_point,
        };
        ctx.send(from, msg);
    }

    pub(super) fn on_state_transfer(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        from: NodeId,
        g_view: u64,
        (base, hashes, log, pending): (
            Checkpoint,
            LogSnapshot<Footprint>,
            Vec<TxnBody>,
            Vec<TxnBody>,
        ),
        commit_point: u64,
    ) {
        let current = g_view == self.view.g_view && from == self.leader && !self.is_leader;
        let recovering = matches!(self.status, Status::Recovering | Status::Restarted);
        if !recovering || !current {
            return;
        }
        self.install_log(ctx, (&base, Some(hashes)), log, false);
        let now = ctx.now_ns();
        for body in pending {
            if self.txns.contains_key(&body.id) {
                continue;
            }
            let (id, ts) = (body.id, body.ts);
            let mut e = Entry::new(body, self.shard, now);
            e.state = State::Released;
            self.maps.record(&e.reads, &e.writes, ts);
            self.log
                .insert(id, ts, Footprint(footprint(&e.reads, &e.writes)))
                .expect("pending entries are not in the stream");
            self.txns.insert(id, e);
        }
        self.commit_point = commit_point.min(self.sync_point).max(base.pos);
        self.status = Status::Normal;
        self.last_normal_view = g_view;
        self.view_change = ViewChangeState::default();
        self.execute_committed();
        self.persist_snapshot(ctx);
    }

    // ---- coordinator failure (§4, Appendix B) ---------------------------------------------

    /// A leader holding a multi-shard transaction for `recovery_ms` without agreement acts
    /// as its recovery coordinator: it multicasts the transaction to every replica of every
    /// involved shard, so a multicast cut short by a coordinator crash completes (replicas
    /// deduplicate by id).
    pub(super) fn recover_stuck(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let now = ctx.now_ns();
        let stuck: Vec<TxnId> = self
            .pq
            .iter()
            .map(|&(_, id)| id)
            .filter(|id| {
                let e = &self.txns[id];
                e.body.shards.len() > 1 && now.saturating_sub(e.arrived_ns) >= self.opts.recovery_ns
            })
            .collect();
        for id in stuck {
            let e = self.txns.get_mut(&id).expect("queued");
            e.arrived_ns = now;
            let msg = Msg::Submit(Box::new(e.body.clone()));
            let targets: Vec<NodeId> = e
                .body
                .shards
                .iter()
                .flat_map(|&s| self.cluster.replicas(s).iter().copied())
                .filter(|&n| n != self.id)
                .collect();
            ctx.multicast(targets, &msg);
        }
    }
}

/// `own` with every entry at the largest timestamp any shard's list in `others` holds for
/// it; with `add`, entries of `others` that involve `shard` and are missing from `own` are
/// appended (Algorithm 5 lines 72–77).
fn merge_largest(
    own: &[TxnBody],
    others: &BTreeMap<ShardId, Vec<TxnBody>>,
    shard: ShardId,
    add: bool,
) -> Vec<TxnBody> {
    let mut log = own.to_vec();
    let mut index: FxHashMap<TxnId, usize> =
        log.iter().enumerate().map(|(i, b)| (b.id, i)).collect();
    for entries in others.values() {
        for b in entries.iter().filter(|b| b.involves(shard)) {
            match index.get(&b.id) {
                Some(&i) => {
                    log[i].ts = log[i].ts.max(b.ts);
                    // A decision any shard knew stands.
                    log[i].aborted |= b.aborted;
                    log[i].decided |= b.decided;
                }
                None if add => {
                    index.insert(b.id, log.len());
                    log.push(b.clone());
                }
                None => {}
            }
        }
    }
    log
}
