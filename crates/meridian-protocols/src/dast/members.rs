//! The manager's side of §4.4: failure detection, removal of suspected edge nodes
//! (Alg. 3), adding a removed node back from a checkpoint (Alg. 4), and which of a
//! region's managers acts.
//!
//! * **Which manager acts.** Managers beat each other every tick; a manager acts once it
//!   has been up for `suspect_ms` and has heard no lower-id manager of its region for
//!   `suspect_ms` (the paper elects one by SMR). Its view state is not replicated: the
//!   members hold the installed view durably and report it every tick, and a new acting
//!   manager adopts the largest it hears (a change half done by its predecessor is either
//!   installed at some member, whose peers forward it, or abandoned).
//! * **Suspicion.** A member the acting manager has not heard from for `suspect_ms` is
//!   removed, one node per view change, and only while every shard of the region keeps a
//!   majority of its replicas in the view.

use super::manager::Manager;
use super::node::region_edges;
use super::wire::{Change, Msg, Timer, TxnInfo, View, ViewCommit};
use super::DastNode;
use crate::kit::quorum::majority;
use meridian_core::node::Ctx;
use meridian_core::{Cluster, NodeId, NodeRole, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// One member's acknowledgement: pending IRTs, aborted ids, promise.
type Ack = (Vec<(TxnInfo, Timestamp)>, Vec<TxnId>, Timestamp);

/// A view change in progress (the 2PC of Algs. 3-4).
#[derive(Debug)]
struct Round {
    view: View,
    base: u64,
    change: Change,
    acks: BTreeMap<NodeId, Ack>,
    started_ns: u64,
    sent_ns: u64,
}

/// A removed node being added back.
#[derive(Debug)]
struct Joiner {
    node: NodeId,
    started_ns: u64,
    sent_ns: u64,
    tries: usize,
}

/// The manager's membership state.
#[derive(Debug)]
pub struct Members {
    view: View,
    /// The largest view id proposed or promised anywhere that this manager has seen.
    promised_seen: u64,
    alive: FxHashMap<NodeId, u64>,
    started_ns: u64,
    lower_heard_ns: Option<u64>,
    acting_since: Option<u64>,
    round: Option<Round>,
    joiner: Option<Joiner>,
    last_commit: Option<ViewCommit>,
}

impl Members {
    pub fn new(cluster: &Cluster, me: NodeId) -> Members {
        let mut members = region_edges(cluster, cluster.region_of(me));
        members.sort_unstable();
        Members {
            view: View { vid: 0, members },
            promised_seen: 0,
            alive: FxHashMap::default(),
            started_ns: 0,
            lower_heard_ns: None,
            acting_since: None,
            round: None,
            joiner: None,
            last_commit: None,
        }
    }
}

impl Manager {
    pub fn on_start(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        self.members.started_ns = ctx.now_ns();
        ctx.set_timer(self.opts.retry_ns / 4, Timer::Tick);
    }

    fn peers(&self) -> Vec<NodeId> {
        super::coord::managers_of(&self.cluster, self.region)
            .into_iter()
            .filter(|&m| m != self.me)
            .collect()
    }

    pub fn on_tick(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        ctx.set_timer(self.opts.retry_ns / 4, Timer::Tick);
        for m in self.peers() {
            ctx.send(m, Msg::ManagerBeat);
        }
        let now = ctx.now_ns();
        let quiet = |t: u64| now.saturating_sub(t) >= self.opts.suspect_ns;
        let acting =
            quiet(self.members.started_ns) && self.members.lower_heard_ns.is_none_or(quiet);
        if !acting {
            self.members.acting_since = None;
            self.members.round = None;
            self.members.joiner = None;
            return;
        }
        if self.members.acting_since.is_none() {
            ctx.count("dast.manager_takeovers", 1);
            self.members.acting_since = Some(now);
        }
        self.drive(ctx);
    }

    fn drive(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let now = ctx.now_ns();
        if let Some(r) = &mut self.members.round {
            if now.saturating_sub(r.started_ns) >= 4 * self.opts.retry_ns {
                ctx.count("dast.view_rounds_abandoned", 1);
                self.members.round = None;
            } else if now.saturating_sub(r.sent_ns) >= self.opts.retry_ns {
                r.sent_ns = now;
                self.send_preps(ctx);
            }
            return;
        }
        if let Some(n) = self.suspect(now) {
            let nodes = vec![n];
            let mut view = self.members.view.clone();
            view.members.retain(|m| *m != n);
            ctx.count("dast.removals_started", 1);
            self.start_round(ctx, view, Change::Remove { nodes });
            return;
        }
        self.drive_joiner(ctx, now);
    }

    /// A member not heard from for `suspect_ms` (counted from when this manager began to
    /// act), whose removal leaves every shard a majority of its replicas.
    fn suspect(&self, now: u64) -> Option<NodeId> {
        let since = self.members.acting_since.unwrap_or(now);
        self.members.view.members.iter().copied().find(|n| {
            let heard = self
                .members
                .alive
                .get(n)
                .copied()
                .unwrap_or(since)
                .max(since);
            now.saturating_sub(heard) >= self.opts.suspect_ns && self.removable(*n)
        })
    }

    fn removable(&self, node: NodeId) -> bool {
        let members = &self.members.view.members;
        let NodeRole::Replica { shard, .. } = self.cluster.node(node).role else {
            return false;
        };
        let replicas = self.cluster.replicas(shard);
        let kept = replicas
            .iter()
            .filter(|r| **r != node && members.contains(r))
            .count();
        kept >= majority(replicas.len())
    }

    fn start_round(&mut self, ctx: &mut Ctx<'_, DastNode>, mut view: View, change: Change) {
        let vid = self.members.view.vid.max(self.members.promised_seen) + 1;
        self.members.promised_seen = vid;
        view.vid = vid;
        let now = ctx.now_ns();
        self.members.round = Some(Round {
            view,
            base: self.members.view.vid,
            change,
            acks: BTreeMap::new(),
            started_ns: now,
            sent_ns: now,
        });
        self.send_preps(ctx);
    }

    fn send_preps(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let Some(r) = &self.members.round else {
            return;
        };
        for &m in &r.view.members {
            if !r.acks.contains_key(&m) {
                let msg = Msg::ViewPrep {
                    view: r.view.clone(),
                    change: r.change.clone(),
                    base: r.base,
                };
                ctx.send(m, msg);
            }
        }
    }

    /// Alg. 4 lines 2-3: a live member replica of the joining node's shard sends it a
    /// checkpoint (another one on each retry).
    fn drive_joiner(&mut self, ctx: &mut Ctx<'_, DastNode>, now: u64) {
        let Some(j) = &mut self.members.joiner else {
            return;
        };
        if now.saturating_sub(j.started_ns) >= 10 * self.opts.retry_ns {
            self.members.joiner = None;
            return;
        }
        if j.tries > 0 && now.saturating_sub(j.sent_ns) < self.opts.retry_ns {
            return;
        }
        let node = j.node;
        let NodeRole::Replica { shard, .. } = self.cluster.node(node).role else {
            self.members.joiner = None;
            return;
        };
        let sources: Vec<NodeId> = self
            .cluster
            .replicas(shard)
            .iter()
            .copied()
            .filter(|r| *r != node && self.members.view.members.contains(r))
            .collect();
        if sources.is_empty() {
            return;
        }
        let j = self.members.joiner.as_mut().expect("joiner");
        let source = sources[j.tries % sources.len()];
        j.tries += 1;
        j.sent_ns = now;
        ctx.send(source, Msg::TransferCkpt { to: node });
    }

    pub(super) fn on_membership(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::ManagerBeat if from < self.me => {
                self.members.lower_heard_ns = Some(ctx.now_ns());
            }
            Msg::Alive { view } => self.on_alive(ctx, from, view),
            Msg::ViewAck {
                vid,
                pending,
                aborted,
                promise,
            } => self.on_view_ack(ctx, from, vid, (pending, aborted, promise)),
            Msg::ViewNack { view, promised } => {
                self.members.promised_seen = self.members.promised_seen.max(promised);
                self.adopt(view);
                self.members.round = None;
            }
            Msg::Join => self.on_join(ctx, from),
            Msg::InstallOk { ts_ckpt } => self.on_install_ok(ctx, from, ts_ckpt),
            _ => {}
        }
    }

    fn adopt(&mut self, view: View) {
        if view.vid > self.members.view.vid {
            self.members.promised_seen = self.members.promised_seen.max(view.vid);
            self.members.view = view;
            self.members.last_commit = None;
        }
    }

    /// A member's heartbeat: alive, and its installed view (a removed node is told; a
    /// member that missed the last commit gets it again).
    fn on_alive(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, view: View) {
        self.members.alive.insert(from, ctx.now_ns());
        let vid = view.vid;
        self.adopt(view);
        if self.members.acting_since.is_none() {
            return;
        }
        if !self.members.view.members.contains(&from) {
            let view = self.members.view.clone();
            ctx.send(from, Msg::ViewIs { view });
        } else if vid < self.members.view.vid {
            if let Some(c) = &self.members.last_commit {
                ctx.send(from, Msg::ViewCommit(Box::new(c.clone())));
            }
        }
    }

    fn on_view_ack(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, vid: u64, ack: Ack) {
        let Some(r) = &mut self.members.round else {
            return;
        };
        if r.view.vid != vid || !r.view.members.contains(&from) {
            return;
        }
        r.acks.insert(from, ack);
        if r.acks.len() == r.view.members.len() {
            self.commit_round(ctx);
        }
    }

    /// Alg. 3 lines 14-17 / Alg. 4 line 9: every member acknowledged.
    fn commit_round(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let r = self.members.round.take().expect("round");
        let mut aborted: Vec<TxnId> = r.acks.values().flat_map(|a| a.1.iter().copied()).collect();
        aborted.sort_unstable();
        aborted.dedup();
        let mut pending: BTreeMap<TxnId, (TxnInfo, Timestamp)> = BTreeMap::new();
        for (info, ts) in r.acks.values().flat_map(|a| a.0.iter()) {
            if aborted.binary_search(&info.id).is_err() {
                pending.insert(info.id, (info.clone(), *ts));
            }
        }
        let bound = r
            .acks
            .values()
            .map(|a| a.2)
            .max()
            .unwrap_or(Timestamp::ZERO);
        if let Change::Add { node, .. } = r.change {
            if self.members.joiner.as_ref().is_some_and(|j| j.node == node) {
                self.members.joiner = None;
            }
        }
        let commit = ViewCommit {
            view: r.view.clone(),
            base: r.base,
            change: r.change,
            pending: pending.into_values().collect(),
            aborted,
            bound,
        };
        for &m in &r.view.members {
            ctx.send(m, Msg::ViewCommit(Box::new(commit.clone())));
        }
        ctx.count("dast.views_committed", 1);
        self.members.view = r.view;
        self.members.last_commit = Some(commit);
    }

    /// Alg. 4: a removed node asks back; one addition at a time.
    fn on_join(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId) {
        let m = &self.members;
        if m.acting_since.is_none()
            || m.round.is_some()
            || m.joiner.is_some()
            || m.view.members.contains(&from)
        {
            return;
        }
        self.members.joiner = Some(Joiner {
            node: from,
            started_ns: ctx.now_ns(),
            sent_ns: 0,
            tries: 0,
        });
        let now = ctx.now_ns();
        self.drive_joiner(ctx, now);
    }

    /// Alg. 4 lines 3-7: installed; the members now hold their clocks below a `ts_ins` of
    /// their own and the largest becomes the view's.
    fn on_install_ok(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, ts_ckpt: Timestamp) {
        if self.members.round.is_some()
            || self.members.joiner.as_ref().is_none_or(|j| j.node != from)
        {
            return;
        }
        let mut view = self.members.view.clone();
        view.members.push(from);
        view.members.sort_unstable();
        ctx.count("dast.additions_started", 1);
        self.start_round(
            ctx,
            view,
            Change::Add {
                node: from,
                ts_ckpt,
            },
        );
    }
}
