//! The edge node's coordinator side: IRTs (§4.2, Alg. 1 `CoordIRT`) and CRTs through
//! two-phase decentralized anticipation (§4.3, Alg. 2 `CoordCRT`), with the decision made
//! durable before it leaves, resent until every participant has it, and presumed abort for
//! transactions a coordinator no longer knows.

use super::node::{participants, Edge};
use super::wire::{Decision, Kind, Msg, NoticeState, Record, TxnInfo};
use super::DastNode;
use crate::kit::quorum::{majority, Votes};
use crate::kit::recent::Recent;
use meridian_core::node::Ctx;
use meridian_core::txn::{AbortReason, CommitPath, Outcome, PieceResult, Txn};
use meridian_core::{NodeId, RegionId, RequestId, ShardId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::sync::Arc;

/// One transaction this node coordinates, until its client is answered.
#[derive(Debug)]
pub struct Inflight {
    info: TxnInfo,
    port: NodeId,
    request: RequestId,
    /// Per shard: a majority of its replicas holding the transaction (their anticipations).
    votes: Vec<(ShardId, Votes<Timestamp>)>,
    /// An IRT's timestamp; a CRT's `srcTs`.
    ts: Timestamp,
    decided: Option<Timestamp>,
    results: Vec<Option<PieceResult>>,
    shards_done: BTreeSet<ShardId>,
    failure: Option<AbortReason>,
    started_ns: u64,
    sent_ns: u64,
    /// Which of a region's managers the next prep-remote goes to (failover, §4.4).
    manager_try: usize,
    /// When a CRT passed its phases (Tables 3-4's breakdown).
    phases: Phases,
}

/// When (node clock, ns) a CRT passed each phase boundary, for the latency breakdown of
/// DAST's Tables 3-4: every other region's shards prepared ("remote prepare"), every shard
/// prepared and the commit timestamp chosen ("local prepare": what the coordinator's own
/// region adds after the remote anticipations), the coordinator's region's shards executed
/// (the paper's "wait exe." and "wait input" together: a participant executes once the
/// readyQ and the inputs allow), every shard executed ("wait output").
#[derive(Debug, Default)]
struct Phases {
    remote_prepared_ns: Option<u64>,
    decided_ns: Option<u64>,
    home_executed_ns: Option<u64>,
}

/// The coordinator's state.
#[derive(Debug, Default)]
pub struct Coord {
    inflight: FxHashMap<TxnId, Inflight>,
    /// Requests a removed node could not hand off, refused at the next tick (port,
    /// request): never at once, so the clients' resubmissions are paced.
    refused: Vec<(NodeId, RequestId)>,
    /// Hand-offs so far (the next one goes to the next replica, spreading the clients).
    handoffs: usize,
    /// Hand-offs received lately, by id, oldest first: a hand-off crosses machines, so
    /// the network may deliver it twice, and each copy would otherwise be coordinated as
    /// a transaction of its own (seed 6 of the random swarm: one list append applied
    /// twice). The id, not (port, request): a restarted runtime port numbers its
    /// requests from 1 again.
    handed_in: HandedIn,
}

/// How many received hand-offs a coordinator remembers to drop their duplicates (a
/// duplicate trails its original by a network delay, far fewer hand-offs than this).
const HANDOFF_MEMORY: usize = 1 << 12;

/// The received hand-offs' ids, the last `HANDOFF_MEMORY`.
#[derive(Debug)]
struct HandedIn(Recent<TxnId>);

impl Default for HandedIn {
    fn default() -> HandedIn {
        HandedIn(Recent::new(HANDOFF_MEMORY))
    }
}

impl Coord {
    /// Records a received hand-off; false if it was received before (a duplicate).
    pub(super) fn first_handoff(&mut self, id: TxnId) -> bool {
        self.handed_in.0.insert(id)
    }

    /// The received hand-offs remembered, oldest first (for a snapshot).
    pub(super) fn handed_in(&self) -> Vec<TxnId> {
        self.handed_in.0.iter().copied().collect()
    }
}

impl Edge {
    /// A client's transaction, handed on by the machine's port (`handed`: the hand-off's
    /// id, when a removed replica of this node's shard handed it on instead, see
    /// `hand_off`; a copy of a hand-off already received is dropped).
    pub fn on_submit(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        port: NodeId,
        request: RequestId,
        txn: Txn,
        handed: Option<TxnId>,
    ) {
        if let Some(id) = handed {
            if !self.coord.first_handoff(id) {
                ctx.count("dast.duplicate_handoffs", 1);
                return;
            }
            // Durable, so that a copy arriving after a restart is dropped as well.
            self.persist(ctx, Record::HandedIn { id });
        }
        let handed = handed.is_some();
        if self.membership.out {
            self.hand_off(ctx, port, request, txn, handed);
            return;
        }
        if let Err(reason) = self.admit(&txn) {
            ctx.send(port, done(request, Outcome::Aborted { reason }));
            return;
        }
        self.next_seq += 1;
        let id = TxnId::new(self.me, self.incarnation, self.next_seq);
        let shards = txn.shards();
        let local = shards.iter().all(|&s| self.shard_region(s) == self.region);
        let kind = if local { Kind::Irt } else { Kind::Crt };
        let info = TxnInfo {
            id,
            kind,
            coord: self.me,
            txn: Arc::new(txn),
        };
        let ts = self.create_ts(ctx);
        let votes = shards
            .iter()
            .map(|&s| {
                let replicas = self.cluster.replicas(s);
                (
                    s,
                    Votes::new(replicas.iter().copied(), majority(replicas.len())),
                )
            })
            .collect();
        let pieces = info.txn.pieces.len();
        let now = ctx.now_ns();
        self.coord.inflight.insert(
            id,
            Inflight {
                info: info.clone(),
                port,
                request,
                votes,
                ts,
                decided: None,
                results: vec![None; pieces],
                shards_done: BTreeSet::new(),
                failure: None,
                started_ns: now,
                sent_ns: now,
                manager_try: 0,
                phases: Phases::default(),
            },
        );
        match kind {
            Kind::Irt => {
                ctx.count("dast.irt", 1);
                // Alg. 1 lines 13-15: the notification travels with the prepare.
                self.notify_relevant(&info, NoticeState::Irt(ts));
                self.send_prepares(ctx, id);
            }
            Kind::Crt => {
                ctx.count("dast.crt", 1);
                self.send_prep_remotes(ctx, id, None);
            }
        }
    }

    /// A removed node does not coordinate (its participant state is gone until a
    /// checkpoint brings it back, Alg. 4), so its clients go to another replica of their
    /// home shard (§3.1: clients send to a nearby replica of it): the next one in the
    /// view this node last installed, in turn. One hop only: a handed-off request that
    /// meets a removed node again (or a shard with no other replica) is refused at the
    /// next tick, never at once, so a client cannot spin on refusals.
    fn hand_off(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        port: NodeId,
        request: RequestId,
        txn: Txn,
        handed: bool,
    ) {
        let targets: Vec<NodeId> = self
            .cluster
            .replicas(self.shard)
            .iter()
            .copied()
            .filter(|&r| r != self.me && self.is_member(r))
            .collect();
        if !handed && !targets.is_empty() {
            let to = targets[self.coord.handoffs % targets.len()];
            self.coord.handoffs += 1;
            ctx.count("dast.handoffs", 1);
            let id = TxnId::new(self.me, self.incarnation, self.coord.handoffs as u64);
            let msg = Msg::Handoff {
                id,
                port,
                request,
                txn,
            };
            ctx.send(to, msg);
        } else if self.coord.refused.len() < self.opts.max_inflight {
            self.coord.refused.push((port, request));
        } else {
            self.refuse_removed(ctx, port, request);
        }
    }

    fn refuse_removed(&self, ctx: &mut Ctx<'_, DastNode>, port: NodeId, request: RequestId) {
        ctx.count("dast.refused_removed", 1);
        let reason = AbortReason::Unsupported(format!(
            "{} was removed from its region's view and is being added back (§4.4)",
            self.me
        ));
        ctx.send(port, done(request, Outcome::Aborted { reason }));
    }

    fn admit(&self, txn: &Txn) -> Result<(), AbortReason> {
        txn.validate(self.cluster.shard_count())
            .map_err(|e| AbortReason::Invalid(e.to_string()))?;
        if self.coord.inflight.len() >= self.opts.max_inflight {
            return Err(AbortReason::Unsupported(format!(
                "overloaded: {} transactions in flight at {}",
                self.coord.inflight.len(),
                self.me
            )));
        }
        if shard_cycle(txn) {
            return Err(AbortReason::Invalid(
                "dast: value dependencies between shards must be acyclic (§4.1)".into(),
            ));
        }
        Ok(())
    }

    fn shard_region(&self, shard: ShardId) -> RegionId {
        self.cluster.region_of(self.cluster.replicas(shard)[0])
    }

    fn send_prepares(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId) {
        let t = &self.coord.inflight[&id];
        let (info, ts) = (t.info.clone(), t.ts);
        let missing: Vec<NodeId> = t.votes.iter().flat_map(|(_, v)| v.missing()).collect();
        for node in missing {
            if node == self.me {
                self.on_prepare(ctx, info.clone(), ts);
            } else {
                let header = self.header(node);
                ctx.send(node, Msg::Beat(header));
                let msg = Msg::Prepare {
                    info: info.clone(),
                    ts,
                };
                ctx.send(node, msg);
            }
        }
    }

    /// Alg. 2 lines 4-5: prep-remote to the manager of every region still short of a
    /// majority of some shard (`only_missing`), or of every participating region.
    fn send_prep_remotes(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId, retry: Option<()>) {
        let t = self.coord.inflight.get_mut(&id).expect("inflight");
        if retry.is_some() {
            t.manager_try += 1;
        }
        let mut regions: Vec<RegionId> = t
            .votes
            .iter()
            .filter(|(_, v)| retry.is_none() || !v.complete())
            .map(|(s, _)| self.cluster.region_of(self.cluster.replicas(*s)[0]))
            .collect();
        regions.sort_unstable();
        regions.dedup();
        let (info, src_ts, attempt) = (t.info.clone(), t.ts, t.manager_try);
        let sent_ns = self.clock.physical_ns(ctx.now_ns());
        for region in regions {
            let managers = managers_of(&self.cluster, region);
            if managers.is_empty() {
                continue;
            }
            let manager = managers[attempt % managers.len()];
            let msg = Msg::PrepRemote {
                info: info.clone(),
                src_ts,
                sent_ns,
            };
            ctx.send(manager, msg);
        }
    }

    pub fn on_prep_ack(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        from: NodeId,
        id: TxnId,
        proposal: Timestamp,
    ) {
        let Some(t) = self.coord.inflight.get_mut(&id) else {
            return;
        };
        if t.decided.is_some() {
            return;
        }
        for (_, votes) in t.votes.iter_mut() {
            votes.record(from, proposal);
        }
        let region = self.region;
        let home = |s: &ShardId| self.cluster.region_of(self.cluster.replicas(*s)[0]) == region;
        let remote_prepared = t.votes.iter().all(|(s, v)| home(s) || v.complete());
        if remote_prepared && t.phases.remote_prepared_ns.is_none() {
            t.phases.remote_prepared_ns = Some(ctx.now_ns());
        }
        if !t.votes.iter().all(|(_, v)| v.complete()) {
            return;
        }
        let commit_ts = match t.info.kind {
            Kind::Irt => t.ts,
            // The broken variant: the coordinator's own timestamp, anticipations ignored.
            Kind::Crt if self.opts.unsafe_skip_anticipation => t.ts,
            Kind::Crt => {
                // Alg. 2 line 7: the largest anticipation, and above the coordinator's clock.
                let largest = t
                    .votes
                    .iter()
                    .flat_map(|(_, v)| v.replies().copied())
                    .max()
                    .expect("a majority replied");
                let now = self.create_ts(ctx);
                largest.max(now)
            }
        };
        self.decide(ctx, id, commit_ts);
    }

    fn decide(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId, ts: Timestamp) {
        let t = self.coord.inflight.get_mut(&id).expect("inflight");
        t.decided = Some(ts);
        t.sent_ns = ctx.now_ns();
        t.phases.decided_ns = Some(ctx.now_ns());
        let decision = Decision {
            info: t.info.clone(),
            ts,
        };
        self.persist(ctx, Record::Decided(decision.clone()));
        let all = participants(&self.cluster, &decision.info);
        self.decisions.insert(id, (decision, all));
        self.send_commits(ctx, id);
    }

    fn send_commits(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId) {
        let Some((d, unacked)) = self.decisions.get(&id) else {
            return;
        };
        let (info, ts) = (d.info.clone(), d.ts);
        let to: Vec<NodeId> = unacked.iter().copied().collect();
        for node in to {
            if node == self.me {
                self.on_commit_ack(ctx, node, id);
                self.commit(ctx, info.clone(), ts, false);
            } else {
                let msg = Msg::Commit {
                    info: info.clone(),
                    ts,
                };
                ctx.send(node, msg);
            }
        }
    }

    pub fn on_commit_ack(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, id: TxnId) {
        let Some((d, unacked)) = self.decisions.get_mut(&id) else {
            return;
        };
        unacked.remove(&from);
        if unacked.is_empty() {
            let ts = d.ts;
            self.decisions.remove(&id);
            self.persist(ctx, Record::Settled { id, ts });
            self.remember_settled(id, ts);
        }
    }

    /// A participant asks about an undecided transaction: the decision if there is one,
    /// nothing while deciding, else abort (presumed: decisions are durable).
    pub fn on_query(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, id: TxnId) {
        if let Some((d, _)) = self.decisions.get(&id) {
            let msg = Msg::Commit {
                info: d.info.clone(),
                ts: d.ts,
            };
            ctx.send(from, msg);
        } else if let Some(ts) = self.settled_ts(id) {
            // Settled: every participant acknowledged the commit once, but a replica
            // re-added from a checkpoint may hold it undecided again.
            ctx.send(from, Msg::Committed { id, ts });
        } else if !self.coord.inflight.contains_key(&id) {
            ctx.send(from, Msg::Abort { id });
        }
    }

    /// A settled commit, answered to this participant's query.
    fn on_committed(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId, ts: Timestamp) {
        if let Some(e) = self.entries.get(&id) {
            let info = e.rec.info.clone();
            self.commit(ctx, info, ts, false);
        }
    }

    /// The IRTs this node coordinates that are not decided yet.
    pub(super) fn coord_irts(&self) -> Vec<TxnId> {
        self.coord
            .inflight
            .iter()
            .filter(|(_, t)| t.info.kind == Kind::Irt && t.decided.is_none())
            .map(|(id, _)| *id)
            .collect()
    }

    pub(super) fn drop_inflight_unknown(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        id: TxnId,
        reason: &str,
    ) {
        if let Some(t) = self.coord.inflight.remove(&id) {
            ctx.send(t.port, done(t.request, super::view::unknown(reason)));
        }
    }

    pub fn on_executed(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        id: TxnId,
        shard: u32,
        results: Result<Vec<(u16, PieceResult)>, AbortReason>,
    ) {
        let Some(t) = self.coord.inflight.get_mut(&id) else {
            return;
        };
        if !t.shards_done.insert(ShardId(shard)) {
            return;
        }
        match results {
            Ok(rs) => {
                for (i, r) in rs {
                    if let Some(slot) = t.results.get_mut(usize::from(i)) {
                        *slot = Some(r);
                    }
                }
            }
            Err(reason) => {
                t.failure.get_or_insert(reason);
            }
        }
        let region = self.region;
        let home = |s: &ShardId| self.cluster.region_of(self.cluster.replicas(*s)[0]) == region;
        let home_done = t.votes.iter().any(|(s, _)| home(s))
            && t.votes
                .iter()
                .all(|(s, _)| !home(s) || t.shards_done.contains(s));
        if home_done && t.phases.home_executed_ns.is_none() {
            t.phases.home_executed_ns = Some(ctx.now_ns());
        }
        if t.shards_done.len() < t.votes.len() {
            return;
        }
        let t = self.coord.inflight.remove(&id).expect("inflight");
        if t.info.kind == Kind::Crt && t.failure.is_none() {
            count_phases(ctx, &t);
        }
        let outcome = match t.failure {
            Some(reason) => Outcome::Aborted { reason },
            None => Outcome::Committed {
                results: t
                    .results
                    .into_iter()
                    .map(Option::unwrap_or_default)
                    .collect(),
                commit_ts: t.decided,
                path: match t.info.kind {
                    Kind::Irt => CommitPath::Local,
                    Kind::Crt => CommitPath::TwoPhase,
                },
            },
        };
        ctx.send(t.port, done(t.request, outcome));
    }

    /// Retransmissions and timeouts of what this node coordinates.
    pub fn coord_tick(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        for (port, request) in std::mem::take(&mut self.coord.refused) {
            self.refuse_removed(ctx, port, request);
        }
        let now = ctx.now_ns();
        let mut ids: Vec<TxnId> = self.coord.inflight.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let t = &self.coord.inflight[&id];
            let age = now.saturating_sub(t.started_ns);
            let quiet = now.saturating_sub(t.sent_ns) >= self.opts.retry_ns;
            let kind = t.info.kind;
            match t.decided {
                None if age >= self.opts.prepare_timeout_ns => self.give_up(ctx, id),
                None if quiet => {
                    self.coord.inflight.get_mut(&id).expect("listed").sent_ns = now;
                    match kind {
                        Kind::Irt => self.send_prepares(ctx, id),
                        Kind::Crt => self.send_prep_remotes(ctx, id, Some(())),
                    }
                }
                Some(_) if age >= self.opts.result_timeout_ns => {
                    let t = self.coord.inflight.remove(&id).expect("listed");
                    let reason = "dast: results not all in before the result timeout".to_string();
                    ctx.send(t.port, done(t.request, Outcome::Unknown { reason }));
                }
                _ => {}
            }
        }
        let mut decided: Vec<TxnId> = self.decisions.keys().copied().collect();
        decided.sort_unstable();
        for id in decided {
            self.send_commits(ctx, id);
        }
    }

    /// Not prepared in time: abort (nothing was decided, so presumed abort agrees).
    fn give_up(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId) {
        let t = self.coord.inflight.remove(&id).expect("inflight");
        ctx.count("dast.prepare_timeouts", 1);
        for node in participants(&self.cluster, &t.info) {
            if node == self.me {
                self.abort(ctx, id);
            } else {
                ctx.send(node, Msg::Abort { id });
            }
        }
        // An IRT some participant holds may still be committed by a removal of this
        // node (Alg. 3 commits them): its client hears `unknown`.
        let outcome = match t.info.kind {
            Kind::Irt => super::view::unknown("dast: IRT not prepared before the timeout"),
            Kind::Crt => Outcome::Aborted {
                reason: AbortReason::Timeout,
            },
        };
        ctx.send(t.port, done(t.request, outcome));
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, msg: Msg) {
        if self.refuses(from, &msg) {
            ctx.count("dast.refused_view", 1);
            return;
        }
        match msg {
            Msg::Submit { request, txn } => self.on_submit(ctx, from, request, txn, None),
            Msg::Handoff {
                id,
                port,
                request,
                txn,
            } => self.on_submit(ctx, port, request, txn, Some(id)),
            Msg::Beat(h) => self.on_beat(ctx, from, h),
            Msg::Prepare { info, ts } => self.on_prepare(ctx, info, ts),
            Msg::PrepAck { id, proposal } => self.on_prep_ack(ctx, from, id, proposal),
            Msg::PrepCrt { info, anticipated } => self.on_prep_crt(ctx, info, anticipated),
            Msg::Commit { info, ts } => self.commit(ctx, info, ts, true),
            Msg::CommitAck { id } => self.on_commit_ack(ctx, from, id),
            Msg::Abort { id } => self.abort(ctx, id),
            Msg::Query { id } => self.on_query(ctx, from, id),
            Msg::Output { id, piece, result } => self.on_output(ctx, id, piece, result),
            Msg::InputQuery { id } => self.on_input_query(ctx, from, id),
            Msg::Executed { id, shard, results } => self.on_executed(ctx, id, shard, results),
            Msg::Committed { id, ts } => self.on_committed(ctx, id, ts),
            Msg::ViewIs { view } => self.on_view_is(ctx, view),
            Msg::ViewPrep { view, change, base } => {
                self.on_view_prep(ctx, from, view, change, base)
            }
            Msg::ViewCommit(c) => self.on_view_commit(ctx, *c),
            Msg::TransferCkpt { to } => self.on_transfer_ckpt(ctx, to),
            Msg::Install(ckpt) => self.on_install(ctx, *ckpt),
            Msg::Done { .. }
            | Msg::PrepRemote { .. }
            | Msg::Alive { .. }
            | Msg::ManagerBeat
            | Msg::ViewAck { .. }
            | Msg::ViewNack { .. }
            | Msg::Join
            | Msg::InstallOk { .. } => {}
        }
    }
}

/// Adds a committed CRT's phase times to the counters `dast.crt_phase.*_ns` (sums) and
/// `dast.crt_phased` (CRTs), so a report divides one by the other for the mean. Only CRTs
/// with a piece in the coordinator's region count (TPC-C's: the home warehouse); the
/// phases add up to the coordinator's latency.
fn count_phases(ctx: &mut Ctx<'_, DastNode>, t: &Inflight) {
    let (Some(remote), Some(home), Some(decided)) = (
        t.phases.remote_prepared_ns,
        t.phases.home_executed_ns,
        t.phases.decided_ns,
    ) else {
        return;
    };
    let now = ctx.now_ns();
    let remote = remote.max(t.started_ns);
    ctx.count("dast.crt_phased", 1);
    ctx.count("dast.crt_phase.remote_prepare_ns", remote - t.started_ns);
    ctx.count(
        "dast.crt_phase.local_prepare_ns",
        decided.saturating_sub(remote),
    );
    ctx.count(
        "dast.crt_phase.execute_home_ns",
        home.saturating_sub(decided),
    );
    ctx.count(
        "dast.crt_phase.wait_output_ns",
        now.saturating_sub(home.max(decided)),
    );
}

fn done(request: RequestId, outcome: Outcome) -> Msg {
    Msg::Done { request, outcome }
}

/// The managers of `region`, primary first.
pub fn managers_of(cluster: &meridian_core::Cluster, region: RegionId) -> Vec<NodeId> {
    let mut out: Vec<NodeId> = cluster
        .services(super::MANAGER)
        .into_iter()
        .filter(|&m| cluster.region_of(m) == region)
        .collect();
    out.sort_unstable();
    out
}

/// Whether the pieces' value dependencies form a cycle between shards (DAST requires them
/// acyclic between regions, §4.1; a shard executes its pieces at once, so they must be
/// acyclic between shards here).
pub fn shard_cycle(txn: &Txn) -> bool {
    let shards: Vec<ShardId> = txn.shards().to_vec();
    let index = |s: ShardId| shards.iter().position(|&x| x == s).expect("own shard");
    let n = shards.len();
    let mut edges = vec![Vec::new(); n];
    for piece in &txn.pieces {
        for d in piece.dependencies() {
            let from = index(txn.pieces[usize::from(d)].shard);
            let to = index(piece.shard);
            if from != to {
                edges[from].push(to);
            }
        }
    }
    // Kahn's algorithm: a cycle leaves nodes with incoming edges.
    let mut indegree = vec![0usize; n];
    for e in &edges {
        for &t in e {
            indegree[t] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = ready.pop() {
        seen += 1;
        for &t in &edges[i] {
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.push(t);
            }
        }
    }
    seen < n
}
