//! The edge node's side of §4.4: views, removal of suspected nodes (Alg. 3) and adding a
//! replica back from a checkpoint (Alg. 4). The manager's side is in `manager.rs`.
//!
//! A member acknowledges a prep only if it extends the view the member installed
//! (`base`) and carries a larger view id than any it acknowledged before; it installs a
//! commit only for the prep it acknowledged last. Every member of the new view must
//! acknowledge, so a member that missed a commit is at most one view behind: its peers
//! forward the commit they installed when its heartbeat shows the older view id.

use super::coord::managers_of;
use super::node::{participants, Edge};
use super::pct::Peers;
use super::wire::{
    Change, Checkpoint, Kind, Msg, NoticeState, Record, Status, TxnInfo, View, ViewCommit,
};
use super::DastNode;
use meridian_core::node::Ctx;
use meridian_core::txn::Outcome;
use meridian_core::{NodeId, Timestamp, TxnId};

/// The id of the placeholder an addition holds in the waitQ (Alg. 4 line 15): no real
/// coordinator has this node id.
pub fn hold_id(vid: u64) -> TxnId {
    TxnId {
        coordinator: NodeId(u32::MAX),
        seq: vid,
    }
}

impl Edge {
    /// The installed view (set at restore: the initial one is every edge node of the
    /// region, id 0).
    pub(super) fn view(&self) -> View {
        self.membership
            .view
            .clone()
            .expect("a view is installed at restore")
    }

    pub(super) fn vid(&self) -> u64 {
        self.membership.view.as_ref().map_or(0, |v| v.vid)
    }

    pub(super) fn is_member(&self, node: NodeId) -> bool {
        self.membership
            .view
            .as_ref()
            .is_some_and(|v| v.members.binary_search(&node).is_ok())
    }

    /// Whether messages from `peer`, an edge node of this region, are refused: it is not
    /// in the installed view, or a removal this node acknowledged takes it out (Alg. 3:
    /// "these nodes discard subsequent messages from n").
    pub(super) fn excluded(&self, peer: NodeId) -> bool {
        if peer == self.me || self.cluster.region_of(peer) != self.region {
            return false;
        }
        if !self.is_member(peer) {
            return true;
        }
        matches!(&self.membership.prepared, Some((_, Change::Remove { nodes })) if nodes.contains(&peer))
    }

    /// Whether to drop `msg` from `from` before handling it (see the module doc of `mod.rs`:
    /// a removed coordinator's IRTs are decided by the removal; its CRTs' decisions, durable
    /// at the coordinator, are accepted whatever the view).
    pub(super) fn refuses(&self, from: NodeId, msg: &Msg) -> bool {
        if self.membership.out {
            return matches!(
                msg,
                Msg::Beat(_)
                    | Msg::Prepare { .. }
                    | Msg::PrepCrt { .. }
                    | Msg::Commit { .. }
                    | Msg::Committed { .. }
                    | Msg::Abort { .. }
                    | Msg::Output { .. }
                    | Msg::InputQuery { .. }
                    | Msg::TransferCkpt { .. }
            );
        }
        if !self.excluded(from) {
            return false;
        }
        match msg {
            Msg::Beat(_) | Msg::Prepare { .. } | Msg::PrepAck { .. } | Msg::Executed { .. } => true,
            Msg::Commit { info, .. } => info.kind == Kind::Irt && info.coord == from,
            Msg::Abort { id } | Msg::Committed { id, .. } => {
                id.coordinator == from && self.entry_kind(*id) != Some(Kind::Crt)
            }
            _ => false,
        }
    }

    fn entry_kind(&self, id: TxnId) -> Option<Kind> {
        self.entries.get(&id).map(|e| e.rec.info.kind)
    }

    fn persist_membership(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let m = self.membership.clone();
        self.persist(ctx, Record::Membership(Box::new(m)));
    }

    /// Every tick: the installed view to the region's managers (their failure detector),
    /// and, while removed, a request to be added back.
    pub(super) fn membership_tick(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let view = self.view();
        for m in managers_of(&self.cluster, self.region) {
            ctx.send(m, Msg::Alive { view: view.clone() });
            if self.membership.out {
                ctx.send(m, Msg::Join);
            }
        }
        self.try_transfer(ctx);
    }

    /// The manager says what the view is: a node no longer in it stops serving (its
    /// participant state will come from a checkpoint, Alg. 4).
    pub(super) fn on_view_is(&mut self, ctx: &mut Ctx<'_, DastNode>, view: View) {
        if view.vid > self.vid() && !view.members.contains(&self.me) && !self.membership.out {
            self.go_out(ctx);
        }
    }

    fn go_out(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        ctx.count("dast.removed_self", 1);
        self.membership.out = true;
        self.membership.prepared = None;
        self.persist_membership(ctx);
        self.clear_participant_state();
        self.answer_irts_unknown(ctx);
    }

    /// A removed coordinator's undecided IRTs are decided by the removal (committed if any
    /// member holds them): their clients hear `unknown`.
    fn answer_irts_unknown(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let mut ids: Vec<TxnId> = self.coord_irts();
        ids.sort_unstable();
        for id in ids {
            self.drop_inflight_unknown(ctx, id, "dast: coordinator removed from its region's view");
        }
        self.decisions.retain(|_, (d, _)| d.info.kind == Kind::Crt);
    }

    /// A prep from a manager (Alg. 3 lines 20-22, Alg. 4 lines 14-16).
    pub(super) fn on_view_prep(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        from: NodeId,
        view: View,
        change: Change,
        base: u64,
    ) {
        let joining = matches!(change, Change::Add { node, .. } if node == self.me);
        let same = self.membership.promised == view.vid
            && self.membership.prepared.as_ref() == Some(&(view.clone(), change.clone()));
        let fits = joining || base == self.vid();
        if !same && (!fits || view.vid <= self.membership.promised.max(self.vid())) {
            let msg = Msg::ViewNack {
                view: self.view(),
                promised: self.membership.promised,
            };
            ctx.send(from, msg);
            return;
        }
        let vid = view.vid;
        let (pending, aborted, promise) = match &change {
            Change::Remove { nodes } => self.removal_report(nodes),
            Change::Add { .. } if joining => (Vec::new(), Vec::new(), Timestamp::ZERO),
            Change::Add { .. } => (Vec::new(), Vec::new(), self.hold_for_addition(vid)),
        };
        if !same {
            self.membership.promised = vid;
            self.membership.prepared = Some((view, change));
            self.persist_membership(ctx);
        }
        let msg = Msg::ViewAck {
            vid,
            pending,
            aborted,
            promise,
        };
        ctx.send(from, msg);
    }

    /// Alg. 3 line 21: the removed coordinators' IRTs held here, those aborted here, and
    /// this node's promise (everything the removed nodes acknowledged from it is below).
    fn removal_report(
        &self,
        nodes: &[NodeId],
    ) -> (Vec<(TxnInfo, Timestamp)>, Vec<TxnId>, Timestamp) {
        let mut pending: Vec<(TxnInfo, Timestamp)> = self
            .entries
            .values()
            .filter(|e| e.rec.info.kind == Kind::Irt && nodes.contains(&e.rec.info.coord))
            .map(|e| (e.rec.info.clone(), e.rec.key))
            .collect();
        // A removed coordinator's IRT executed here may never have reached another
        // participant (it ran once every peer promised past it, whatever the removed node
        // told the others): the removal commits it there too.
        for n in nodes {
            if let Some(log) = self.executed_irts.get(n) {
                pending.extend(log.iter().cloned());
            }
        }
        pending.sort_by_key(|(i, _)| i.id);
        let aborted = self
            .aborted
            .iter()
            .copied()
            .filter(|id| nodes.contains(&id.coordinator))
            .collect();
        (pending, aborted, self.promise())
    }

    /// Alg. 4 line 15: hold the clock below a timestamp above everything this node handed
    /// out (the manager takes the largest of these as `ts_ins`).
    fn hold_for_addition(&mut self, vid: u64) -> Timestamp {
        if let Some(h) = self.membership.hold {
            return h;
        }
        let hold = self.clock.above(Timestamp::ZERO);
        self.wait.insert((hold, hold_id(vid)));
        self.membership.hold = Some(hold);
        hold
    }

    /// A member that missed the last commit is one view behind: forward it.
    pub(super) fn forward_commit(&mut self, ctx: &mut Ctx<'_, DastNode>, to: NodeId, vid: u64) {
        let Some(last) = &self.membership.last else {
            return;
        };
        let now = ctx.now_ns();
        let due = self
            .forwarded
            .get(&to)
            .is_none_or(|&at| now.saturating_sub(at) >= self.opts.retry_ns / 4);
        if vid < last.view.vid && due {
            self.forwarded.insert(to, now);
            ctx.send(to, Msg::ViewCommit(Box::new(last.clone())));
        }
    }

    /// remove-commit / add-commit (Alg. 3 lines 23-26, Alg. 4 lines 17-21).
    pub(super) fn on_view_commit(&mut self, ctx: &mut Ctx<'_, DastNode>, c: ViewCommit) {
        let joining = matches!(c.change, Change::Add { node, .. } if node == self.me);
        let installed = self.vid();
        if c.view.vid <= installed || c.view.vid != self.membership.promised {
            return;
        }
        if !joining && c.base != installed {
            return;
        }
        match &c.change {
            Change::Remove { nodes } => self.commit_removal(ctx, &c, nodes),
            Change::Add { node, .. } if joining => self.commit_joined(ctx, &c, *node),
            Change::Add { node, .. } => self.commit_addition(ctx, &c, *node),
        }
        ctx.count("dast.views_installed", 1);
        self.membership.view = Some(c.view.clone());
        self.membership.prepared = None;
        self.membership.last = Some(c);
        self.persist_membership(ctx);
        self.try_execute(ctx);
    }

    /// The removed coordinators' IRTs: aborted where a member aborted them, else committed
    /// at their timestamps — before the removed nodes leave `maxTs`, so nothing above them
    /// runs first.
    fn commit_removal(&mut self, ctx: &mut Ctx<'_, DastNode>, c: &ViewCommit, nodes: &[NodeId]) {
        for id in &c.aborted {
            if self
                .entries
                .get(id)
                .is_some_and(|e| e.rec.status == Status::Prepared)
            {
                self.abort(ctx, *id);
            }
        }
        for (info, ts) in &c.pending {
            if !c.aborted.contains(&info.id) && participants(&self.cluster, info).contains(&self.me)
            {
                ctx.count("dast.removal_commits", 1);
                self.commit(ctx, info.clone(), *ts, false);
            }
        }
        for &n in nodes {
            self.membership.bounds.retain(|(b, _)| *b != n);
            self.membership.bounds.push((n, c.bound));
        }
        self.peers = self.peers.rebuild(self.others(&c.view), &[]);
    }

    /// Alg. 4 lines 18-21: the placeholder goes, the new node's `maxTs` starts at `ts_ins`,
    /// and it is notified again of everything held here (`notifiedTs[n] ← ts_ckpt`).
    fn commit_addition(&mut self, ctx: &mut Ctx<'_, DastNode>, c: &ViewCommit, node: NodeId) {
        self.release_hold();
        self.peers = self.peers.rebuild(self.others(&c.view), &[(node, c.bound)]);
        self.membership.bounds.retain(|(b, _)| *b != node);
        let held: Vec<(TxnInfo, Status, Timestamp)> = self
            .entries
            .values()
            .map(|e| (e.rec.info.clone(), e.rec.status, e.rec.key))
            .collect();
        for (info, status, key) in held {
            if !participants(&self.cluster, &info).contains(&node) {
                continue;
            }
            let state = match (info.kind, status) {
                (_, Status::Committed) => NoticeState::Committed(key),
                (Kind::Irt, Status::Prepared) => NoticeState::Irt(key),
                (Kind::Crt, Status::Prepared) => NoticeState::Prepared(key),
            };
            self.notify(node, super::wire::Notice { info, state });
        }
        let decided: Vec<(TxnInfo, Timestamp)> = self
            .decisions
            .values()
            .map(|(d, _)| (d.info.clone(), d.ts))
            .collect();
        for (info, ts) in decided {
            if participants(&self.cluster, &info).contains(&node) {
                let state = NoticeState::Committed(ts);
                self.notify(node, super::wire::Notice { info, state });
            }
        }
        ctx.count("dast.replicas_added", 1);
    }

    /// This node is back: its clock starts above `ts_ins`, so it hands out nothing below
    /// what any member executed (Alg. 4 line 21).
    fn commit_joined(&mut self, ctx: &mut Ctx<'_, DastNode>, c: &ViewCommit, _node: NodeId) {
        self.membership.out = false;
        self.peers = Peers::new(self.others(&c.view));
        self.clock
            .restore(c.bound.time_ns.saturating_add(1), None, Timestamp::ZERO);
        self.create_ts(ctx);
        self.rejoined = true;
        ctx.count("dast.rejoined", 1);
    }

    fn release_hold(&mut self) {
        if let Some(h) = self.membership.hold.take() {
            self.wait
                .retain(|&(ts, id)| !(ts == h && id.coordinator == NodeId(u32::MAX)));
        }
    }

    fn others(&self, view: &View) -> Vec<NodeId> {
        view.members
            .iter()
            .copied()
            .filter(|&n| n != self.me)
            .collect()
    }

    /// Alg. 4 line 10: the manager asks this replica for a checkpoint for `to`.
    pub(super) fn on_transfer_ckpt(&mut self, ctx: &mut Ctx<'_, DastNode>, to: NodeId) {
        self.transfer = Some(to);
        self.try_transfer(ctx);
    }

    /// The checkpoint leaves once this node has executed everything at or below what the
    /// joining node acknowledged before it was removed (the removal's bound): whatever it
    /// knew of is then in the checkpoint, executed or held.
    fn try_transfer(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let Some(to) = self.transfer else {
            return;
        };
        let bound = self
            .membership
            .bounds
            .iter()
            .find(|(n, _)| *n == to)
            .map_or(Timestamp::ZERO, |(_, b)| *b);
        if !self.executed_through(bound) {
            return;
        }
        self.transfer = None;
        let mut entries: Vec<_> = self.entries.values().map(|e| e.rec.clone()).collect();
        entries.sort_by_key(|r| r.info.id);
        for r in &mut entries {
            r.proposal = None;
        }
        let ckpt = Checkpoint {
            frontier: self.frontier,
            store: self.sorted_store(),
            entries,
        };
        ctx.count("dast.checkpoints_sent", 1);
        ctx.send(to, Msg::Install(Box::new(ckpt)));
    }

    /// Alg. 4 line 12: a removed node installs a live replica's checkpoint, makes it
    /// durable, and tells the managers (the message leaving after the snapshot makes it
    /// durable under the weakest disk the simulator models).
    pub(super) fn on_install(&mut self, ctx: &mut Ctx<'_, DastNode>, ckpt: Checkpoint) {
        if !self.membership.out {
            return;
        }
        self.load_checkpoint(ckpt);
        ctx.checkpoint(Record::Snapshot(Box::new(self.snapshot())));
        let ts_ckpt = self.frontier.map_or(Timestamp::ZERO, |f| f.0);
        ctx.count("dast.checkpoints_installed", 1);
        for m in managers_of(&self.cluster, self.region) {
            ctx.send(m, Msg::InstallOk { ts_ckpt });
        }
    }
}

/// A coordinator's undecided IRT, answered `unknown` (see `answer_irts_unknown`).
pub(super) fn unknown(reason: &str) -> Outcome {
    Outcome::Unknown {
        reason: reason.to_string(),
    }
}
