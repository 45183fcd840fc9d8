//! Views and the view manager (§4; report Appendix A, Algorithm 4).
//!
//! A [`View`] is the report's `<g-view, g-vec, g-mode>`: a global view-id, every shard's
//! local view-id (its leader is replica `l-view mod n`), and the approach of §3.8. The
//! [`ViewManager`] is a replicated service of three nodes (`vm0..vm2`) whose state machine
//! is the current view, kept consistent with Raft ([`RaftGroup`], the `raft` crate) where
//! the paper uses Viewstamped Replication; a view is installed when its Raft entry commits.
//! The Raft leader detects failed shard leaders from the servers' heartbeats and proposes
//! the next view; it then broadcasts the view to every server and coordinator, and keeps
//! re-broadcasting it (lost messages, restarted nodes). Anyone may ask a replica for the
//! view it has installed ([`Msg::ViewInquiry`]); nodes only ever move to higher views.

use super::options::{Approach, Options};
use super::wire::{Msg, Record, Timer};
use super::TigaNode;
use crate::raft_group::{RaftGroup, RaftTiming};
use meridian_core::node::Ctx;
use meridian_core::{Cluster, NodeId, NodeRole, RegionId, ShardId};
use rand::Rng;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The service name of the view manager's replicas (`vm0`, `vm1`, `vm2`).
pub const VIEW_MANAGER: &str = "vm";

/// A server's status (Algorithm 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Normal,
    ViewChange,
    /// Restarted without state; waits for a state transfer (Algorithm 6).
    Recovering,
    /// A durable server restarted with the log list its records hold: it takes part in
    /// the next view change with it (a leader asks the view manager for one), or a
    /// follower rejoins by state transfer as RECOVERING does.
    Restarted,
}

/// `<g-view, g-vec, g-mode>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub g_view: u64,
    /// Per shard, the local view-id; the leader is replica `l_views[s] mod n`.
    pub l_views: Vec<u64>,
    /// The approach of §3.8 in this view.
    pub preventive: bool,
}

impl View {
    /// View 0: the topology's initial leaders; the approach from their one-way delays.
    pub fn initial(cluster: &Cluster, opts: &Options) -> View {
        let l_views: Vec<u64> = (0..cluster.shard_count())
            .map(|s| u64::from(cluster.topology.shards[s as usize].leader.0))
            .collect();
        let leaders: Vec<NodeId> = (0..cluster.shard_count())
            .map(|s| cluster.initial_leader(ShardId(s)))
            .collect();
        View {
            g_view: 0,
            l_views,
            preventive: choose_preventive(cluster, opts, &leaders),
        }
    }

    /// The replica index of `shard`'s leader.
    pub fn leader_replica(&self, cluster: &Cluster, shard: ShardId) -> u32 {
        let n = cluster.replicas(shard).len() as u64;
        (self.l_views[shard.index()] % n) as u32
    }

    pub fn leader(&self, cluster: &Cluster, shard: ShardId) -> NodeId {
        cluster.replicas(shard)[self.leader_replica(cluster, shard) as usize]
    }

    pub fn leaders(&self, cluster: &Cluster) -> Vec<NodeId> {
        (0..cluster.shard_count())
            .map(|s| self.leader(cluster, ShardId(s)))
            .collect()
    }

    /// The Raft command installing this view: fixed little-endian fields.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + 8 * self.l_views.len());
        out.extend_from_slice(&self.g_view.to_le_bytes());
        out.push(u8::from(self.preventive));
        for l in &self.l_views {
            out.extend_from_slice(&l.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8], shards: usize) -> Option<View> {
        if bytes.len() != 9 + 8 * shards || bytes[8] > 1 {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(View {
            g_view: word(0),
            preventive: bytes[8] == 1,
            l_views: (0..shards).map(|s| word(9 + 8 * s)).collect(),
        })
    }
}

/// §3.8: preventive iff the leaders are co-located (every pair's mean one-way delay from the
/// topology at most the threshold), unless the approach is forced.
fn choose_preventive(cluster: &Cluster, opts: &Options, leaders: &[NodeId]) -> bool {
    match opts.approach {
        Approach::Preventive => true,
        Approach::Detective => false,
        Approach::Auto => colocated(cluster, leaders, opts.colocation_threshold_ms),
    }
}

/// Whether every pair of `leaders` is at most `threshold_ms` apart (mean one-way delay).
pub fn colocated(cluster: &Cluster, leaders: &[NodeId], threshold_ms: f64) -> bool {
    leaders.iter().all(|&a| {
        leaders
            .iter()
            .all(|&b| a == b || cluster.one_way_ms(a, b) <= threshold_ms)
    })
}

/// Where the view manager's three replicas run: the regions of shard 0's replicas (one per
/// region while there are distinct ones), so the service survives a region failure as the
/// shards do.
pub fn placement(cluster: &Cluster) -> Vec<(String, RegionId)> {
    let mut regions: Vec<RegionId> = Vec::new();
    for &r in cluster.replicas(ShardId(0)) {
        let region = cluster.region_of(r);
        if !regions.contains(&region) {
            regions.push(region);
        }
    }
    (0..3)
        .map(|i| (VIEW_MANAGER.to_string(), regions[i % regions.len()]))
        .collect()
}

/// What the view manager last heard from a server.
#[derive(Clone, Copy, Debug)]
struct Heard {
    at_ns: u64,
    status: Status,
    /// The g-view the server was in.
    g_view: u64,
}

/// One replica of the view manager.
#[derive(Debug)]
pub struct ViewManager {
    cluster: Arc<Cluster>,
    opts: Options,
    raft: RaftGroup,
    view: View,
    heard: FxHashMap<NodeId, Heard>,
    /// When this replica last became the Raft leader (local clock).
    leading_since_ns: Option<u64>,
    /// The view this replica proposed and when, until it is installed or times out.
    proposed: Option<(u64, u64)>,
    broadcast_ns: u64,
}

impl ViewManager {
    pub fn new(
        id: NodeId,
        cluster: Arc<Cluster>,
        opts: Options,
        election_ticks: usize,
        recovered: &[Record],
    ) -> ViewManager {
        let records: Vec<_> = recovered
            .iter()
            .filter_map(|r| match r {
                Record::Raft(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        let timing = RaftTiming {
            election_ticks,
            heartbeat_ticks: 2,
        };
        let members = cluster.services(VIEW_MANAGER);
        let raft = RaftGroup::new(id, members, timing, &records)
            .expect("a view manager node is a member of its group")
            .with_log_limit(opts.vm_log_limit);
        ViewManager {
            view: View::initial(&cluster, &opts),
            cluster,
            opts,
            raft,
            heard: FxHashMap::default(),
            leading_since_ns: None,
            proposed: None,
            broadcast_ns: 0,
        }
    }

    /// Election timeouts between 10 and 20 ticks, drawn from the node's seeded RNG.
    pub fn election_ticks(rng: &mut impl Rng) -> usize {
        rng.gen_range(10..20)
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        ctx.set_timer(self.opts.vm_tick_ns, Timer::VmTick);
        self.drain(ctx);
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, TigaNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Raft(m) => {
                // A frame that does not decode or comes from a non-member is dropped.
                let _ = self.raft.step(from, &m);
                self.drain(ctx);
            }
            Msg::Heartbeat { status, g_view } => {
                let at_ns = ctx.now_ns();
                self.heard.insert(
                    from,
                    Heard {
                        at_ns,
                        status,
                        g_view,
                    },
                );
            }
            Msg::ViewInquiry => ctx.send(from, Msg::NewView(self.view.clone())),
            _ => {}
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, TigaNode>, timer: Timer) {
        if !matches!(timer, Timer::VmTick) {
            return;
        }
        self.raft.tick();
        let now = ctx.now_ns();
        if self.raft.is_leader() {
            let since = *self.leading_since_ns.get_or_insert(now);
            // Judge a silence only after a full timeout of heartbeats as leader; a leader
            // that says it is RECOVERING (restarted without state, so it can never run the
            // view change, Algorithm 5 line 4) is failed at once.
            if now.saturating_sub(since) >= self.opts.failure_timeout_ns
                || self.leader_recovering(now)
            {
                self.detect_failures(now);
            }
            if now.saturating_sub(self.broadcast_ns) >= self.opts.retry_ns {
                self.broadcast(ctx);
            }
        } else {
            self.leading_since_ns = None;
        }
        self.drain(ctx);
        ctx.set_timer(self.opts.vm_tick_ns, Timer::VmTick);
    }

    /// Every leader of the installed view was heard within the failure timeout, and one
    /// of them says RECOVERING: positive evidence of its failure, unlike a silence (which a
    /// replica that just became the Raft leader may only seem to observe), so it needs no
    /// full timeout as leader.
    fn leader_recovering(&self, now: u64) -> bool {
        let heard: Vec<Option<&Heard>> = self
            .view
            .leaders(&self.cluster)
            .iter()
            .map(|l| {
                self.heard
                    .get(l)
                    .filter(|h| now.saturating_sub(h.at_ns) < self.opts.failure_timeout_ns)
            })
            .collect();
        heard.iter().all(Option::is_some)
            && heard
                .iter()
                .flatten()
                .any(|h| h.status == Status::Recovering || self.restarted_here(h))
    }

    /// A durable server restarted in the installed view: alive, but it runs nothing until
    /// a view change installs a log, so a leader saying so needs a new view (possibly with
    /// the same leaders). An older view's heartbeat is stale.
    fn restarted_here(&self, h: &Heard) -> bool {
        h.status == Status::Restarted && h.g_view >= self.view.g_view
    }

    /// Some leader of the installed view said RESTARTED within the failure timeout.
    fn leader_restarted(&self, now: u64) -> bool {
        self.view.leaders(&self.cluster).iter().any(|l| {
            self.heard.get(l).is_some_and(|h| {
                self.restarted_here(h) && now.saturating_sub(h.at_ns) < self.opts.failure_timeout_ns
            })
        })
    }

    fn alive(&self, node: NodeId, now: u64) -> bool {
        self.heard.get(&node).is_some_and(|h| {
            h.status != Status::Recovering
                && now.saturating_sub(h.at_ns) < self.opts.failure_timeout_ns
        })
    }

    /// Algorithm 4 line 1: a leader missed its heartbeats (or restarted): propose a view
    /// with new leaders.
    fn detect_failures(&mut self, now: u64) {
        if let Some((g_view, at)) = self.proposed {
            let pending = g_view > self.view.g_view;
            if pending && now.saturating_sub(at) < self.opts.failure_timeout_ns {
                return;
            }
        }
        let leaders = self.view.leaders(&self.cluster);
        let restarted = self.leader_restarted(now);
        if !restarted && leaders.iter().all(|&l| self.alive(l, now)) {
            return;
        }
        let chosen = self.find_new_leaders(now);
        let next = self.next_view(&chosen);
        if next.l_views == self.view.l_views && !restarted {
            return; // no alive replacement: nothing a view change could fix
        }
        if self.raft.propose(next.encode()) {
            self.proposed = Some((next.g_view, now));
        }
    }

    /// Algorithm 4 `find-new-leaders`, by region (the report's replica-id r stands for a
    /// region): keep every leader in one region if some region has an alive replica of
    /// every shard — the current leaders' region first — else the region with the most alive
    /// replicas, each remaining shard led by an alive replica (its current leader if alive).
    fn find_new_leaders(&self, now: u64) -> Vec<NodeId> {
        let c = &self.cluster;
        let shards: Vec<ShardId> = (0..c.shard_count()).map(ShardId).collect();
        let current = self.view.leaders(c);
        let alive_in = |s: ShardId, region: RegionId| {
            c.replicas(s)
                .iter()
                .copied()
                .find(|&r| c.region_of(r) == region && self.alive(r, now))
        };
        let mut regions: Vec<RegionId> = vec![c.region_of(current[0])];
        for s in &shards {
            for &r in c.replicas(*s) {
                if !regions.contains(&c.region_of(r)) {
                    regions.push(c.region_of(r));
                }
            }
        }
        if let Some(&region) = regions
            .iter()
            .find(|&&g| shards.iter().all(|&s| alive_in(s, g).is_some()))
        {
            return shards
                .iter()
                .map(|&s| alive_in(s, region).expect("checked"))
                .collect();
        }
        let count = |g: RegionId| shards.iter().filter(|&&s| alive_in(s, g).is_some()).count();
        let best = regions
            .iter()
            .copied()
            .max_by_key(|&g| (count(g), std::cmp::Reverse(g.0)))
            .expect("regions");
        shards
            .iter()
            .map(|&s| {
                alive_in(s, best)
                    .or_else(|| {
                        self.alive(current[s.index()], now)
                            .then_some(current[s.index()])
                    })
                    .or_else(|| c.replicas(s).iter().copied().find(|&r| self.alive(r, now)))
                    .unwrap_or(current[s.index()])
            })
            .collect()
    }

    /// Algorithm 4 lines 2–8: g-view + 1; a shard's l-view grows by the distance from the
    /// old leader's replica index to the new one's (unchanged if the leader stays).
    fn next_view(&self, leaders: &[NodeId]) -> View {
        let c = &self.cluster;
        let l_views = (0..c.shard_count())
            .map(|s| {
                let shard = ShardId(s);
                let n = c.replicas(shard).len() as u64;
                let old = u64::from(self.view.leader_replica(c, shard));
                let new = c
                    .replicas(shard)
                    .iter()
                    .position(|&r| r == leaders[s as usize])
                    .expect("a replica of the shard") as u64;
                self.view.l_views[s as usize] + (new + n - old) % n
            })
            .collect();
        View {
            g_view: self.view.g_view + 1,
            l_views,
            preventive: choose_preventive(c, &self.opts, leaders),
        }
    }

    fn drain(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let out = self.raft.drain();
        for record in out.records {
            persist(ctx, record);
        }
        for (to, m) in out.messages {
            ctx.send(to, Msg::Raft(m));
        }
        let shards = self.cluster.shard_count() as usize;
        let mut installed = false;
        // A snapshot (recovered at restart, or sent by a leader that compacted past this
        // member) is the view as of its index: the commands after it follow on.
        if let Some(view) = out.snapshot.and_then(|data| View::decode(&data, shards)) {
            ctx.count(VM_SNAPSHOT_INSTALLS, 1);
            if view.g_view > self.view.g_view {
                self.view = view;
                installed = true;
            }
        }
        for command in out.committed {
            let Some(view) = View::decode(&command, shards) else {
                continue; // only this service proposes; an undecodable entry is skipped
            };
            // Racing proposals for the same g-view: the first to commit wins.
            if view.g_view == self.view.g_view + 1 {
                self.view = view;
                installed = true;
            }
        }
        if installed && self.raft.is_leader() {
            self.broadcast(ctx);
        }
        if self.raft.wants_snapshot() {
            // Everything drained is applied: the view is the state machine at that index.
            match self.raft.compact(self.view.encode()) {
                Ok(record) => {
                    ctx.count(VM_COMPACTIONS, 1);
                    persist(ctx, record);
                }
                Err(e) => panic!("view manager: {e}"),
            }
        }
    }

    /// Algorithm 4 `send-view-change-req`, to every server and coordinator.
    fn broadcast(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        self.broadcast_ns = ctx.now_ns();
        let targets: Vec<NodeId> = self
            .cluster
            .nodes
            .iter()
            .filter(|n| !matches!(n.role, NodeRole::Service { .. }))
            .map(|n| n.id)
            .collect();
        ctx.multicast(targets, &Msg::NewView(self.view.clone()));
    }
}

/// The view manager's Raft log compactions (one per `vm_log_limit` view changes or so).
pub const VM_COMPACTIONS: &str = "tiga.vm_log_compactions";
/// Views a view-manager replica took from a snapshot (its own at restart, or a leader's).
pub const VM_SNAPSHOT_INSTALLS: &str = "tiga.vm_snapshot_installs";

/// Persists a Raft record, a snapshot as a checkpoint (it subsumes every earlier record
/// of this node, which persists nothing else).
fn persist(ctx: &mut Ctx<'_, TigaNode>, record: crate::raft_group::RaftRecord) {
    if record.is_checkpoint() {
        ctx.checkpoint(Record::Raft(record));
    } else {
        ctx.persist(Record::Raft(record));
    }
}

/// Asks the view manager for its view, at most once per `retry_ns`, each time the next
/// replica in turn (a crashed one is skipped on the next try).
#[derive(Debug, Default)]
pub struct Inquirer {
    sent: u64,
    last_ns: u64,
}

impl Inquirer {
    pub fn inquire(&mut self, ctx: &mut Ctx<'_, TigaNode>, cluster: &Cluster, retry_ns: u64) {
        let now = ctx.now_ns();
        if self.sent > 0 && now.saturating_sub(self.last_ns) < retry_ns {
            return;
        }
        let vms = cluster.services(VIEW_MANAGER);
        if vms.is_empty() {
            return;
        }
        self.last_ns = now;
        ctx.send(
            vms[(self.sent % vms.len() as u64) as usize],
            Msg::ViewInquiry,
        );
        self.sent += 1;
    }
}
