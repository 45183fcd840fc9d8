//! The global ordering service (SLOG §3.2): a Raft group of `orderer` nodes that orders
//! multi-home transactions in batches (every `batch_ms`) and sends each ordered batch `g`
//! to every region, reduced to that region's lock-only pieces (an empty batch to a region
//! with none: a region must see every `g` to know it misses none, DAST §2). The leader
//! resends a region's batches from the last it acknowledged until it acknowledges them.

use super::edge::encode;
use super::logged::Logged;
use super::options::Options;
use super::wire::{Entry, GlobalCommand, Msg, Record, Timer, TxnKey};
use super::{election_ticks, persist, region_edges, shard_region, SlogNode, ORDERER};
use crate::raft_group::{RaftGroup, RaftTiming};
use meridian_core::node::Ctx;
use meridian_core::{Cluster, NodeId, NodeRole, RegionId};
use rustc_hash::FxHashSet;
use std::sync::Arc;

/// What the leader knows of one region's copy of the global log.
#[derive(Debug, Default, Clone)]
struct RegionLink {
    /// Batches the region acknowledged (all up to this `g`), and sent up to.
    acked: u64,
    sent_upto: u64,
    /// When the oldest unacknowledged batch was (re)sent.
    sent_ns: u64,
    tries: u64,
    leader_hint: Option<NodeId>,
}

#[derive(Debug)]
pub struct Orderer {
    id: NodeId,
    cluster: Arc<Cluster>,
    opts: Options,
    raft: RaftGroup,
    /// The ordered log as applied: transactions ordered, and batch `g` at index `g - 1`.
    ordered: Logged,
    batches: Vec<Arc<Vec<Entry>>>,
    /// Leader: the batch being filled.
    pending: Vec<Entry>,
    pending_keys: FxHashSet<TxnKey>,
    regions: Vec<RegionId>,
    links: Vec<RegionLink>,
    was_leader: bool,
}

impl Orderer {
    pub fn restore(
        id: NodeId,
        cluster: Arc<Cluster>,
        opts: Options,
        recovered: &[Record],
    ) -> Orderer {
        let members = cluster.services(ORDERER);
        let position = members.iter().position(|&m| m == id).unwrap_or(0);
        let timing = RaftTiming {
            election_ticks: election_ticks(position),
            heartbeat_ticks: 2,
        };
        let records: Vec<_> = recovered
            .iter()
            .filter_map(|r| match r {
                Record::Raft(r) => Some(r.clone()),
                Record::Input { .. } => None,
            })
            .collect();
        let raft = RaftGroup::new(id, members, timing, &records)
            .unwrap_or_else(|e| panic!("slog orderer {id}: {e}"));
        let regions = edge_regions(&cluster);
        Orderer {
            id,
            links: vec![RegionLink::default(); regions.len()],
            regions,
            cluster,
            opts,
            raft,
            ordered: Logged::default(),
            batches: Vec::new(),
            pending: Vec::new(),
            pending_keys: FxHashSet::default(),
            was_leader: false,
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        ctx.set_timer(self.opts.tick_ns, Timer::Tick);
        ctx.set_timer(self.opts.batch_ns, Timer::Batch);
        self.drain(ctx);
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, SlogNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Order { entry, forwarded } => self.order(ctx, entry, forwarded),
            Msg::Raft(m) => {
                let _ = self.raft.step(from, &m);
                self.drain(ctx);
            }
            Msg::GlobalAck { g } => self.ack(ctx, from, g),
            _ => {}
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, SlogNode>, timer: Timer) {
        match timer {
            Timer::Tick => {
                self.raft.tick();
                if self.raft.is_leader() {
                    self.distribute(ctx);
                }
                ctx.set_timer(self.opts.tick_ns, Timer::Tick);
            }
            Timer::Batch => {
                if !self.pending.is_empty() {
                    self.pending_keys.clear();
                    let batch = std::mem::take(&mut self.pending);
                    if self.raft.is_leader() {
                        self.raft.propose(encode(&GlobalCommand(batch)));
                    }
                }
                ctx.set_timer(self.opts.batch_ns, Timer::Batch);
            }
        }
        self.drain(ctx);
    }

    fn order(&mut self, ctx: &mut Ctx<'_, SlogNode>, entry: Entry, forwarded: bool) {
        if !self.raft.is_leader() {
            if let (false, Some(leader)) = (forwarded, self.raft.leader()) {
                if leader != self.id {
                    let msg = Msg::Order {
                        entry,
                        forwarded: true,
                    };
                    ctx.send(leader, msg);
                }
            }
            return;
        }
        if self.ordered.settled(&entry.key) {
            ctx.send(entry.key.coordinator, Msg::Logged { key: entry.key });
        } else if self.pending_keys.insert(entry.key) {
            self.pending.push(entry);
        }
    }

    fn ack(&mut self, ctx: &mut Ctx<'_, SlogNode>, from: NodeId, g: u64) {
        let region = self.cluster.region_of(from);
        let Some(i) = self.regions.iter().position(|&r| r == region) else {
            return;
        };
        let link = &mut self.links[i];
        link.leader_hint = Some(from);
        if g > link.acked {
            link.acked = g.min(self.batches.len() as u64);
            link.sent_upto = link.sent_upto.max(link.acked);
            link.sent_ns = ctx.now_ns();
        }
        if self.raft.is_leader() {
            self.distribute(ctx);
        }
    }

    /// Leader: sends each region the batches after its acknowledged one, at most `window`
    /// ahead, and resends from there once `retry_ms` passes without progress.
    fn distribute(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        let now = ctx.now_ns();
        for i in 0..self.regions.len() {
            let link = &mut self.links[i];
            if link.acked < link.sent_upto && now.saturating_sub(link.sent_ns) >= self.opts.retry_ns
            {
                link.tries += 1;
                link.sent_upto = link.acked;
            }
            if link.acked == link.sent_upto {
                link.sent_ns = now;
            }
            let members = region_edges(&self.cluster, self.regions[i]);
            let target = match link.leader_hint {
                Some(h) if link.tries.is_multiple_of(2) => h,
                _ => members[(link.tries as usize) % members.len()],
            };
            let last = (self.batches.len() as u64).min(link.acked + self.opts.window);
            while link.sent_upto < last {
                let g = link.sent_upto + 1;
                let entries = for_region(
                    &self.cluster,
                    &self.batches[(g - 1) as usize],
                    self.regions[i],
                );
                let msg = Msg::GlobalBatch {
                    g,
                    entries,
                    forwarded: false,
                };
                ctx.send(target, msg);
                link.sent_upto = g;
            }
        }
    }

    fn drain(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        let out = self.raft.drain();
        for record in out.records {
            persist(ctx, record);
        }
        for (to, m) in out.messages {
            ctx.send(to, Msg::Raft(m));
        }
        let leader = self.raft.is_leader();
        for bytes in out.committed {
            let Ok(GlobalCommand(entries)) = serde_json::from_slice::<GlobalCommand>(&bytes) else {
                continue;
            };
            let fresh: Vec<Entry> = entries
                .into_iter()
                .filter(|e| self.ordered.admit(e))
                .collect();
            if leader {
                for e in &fresh {
                    ctx.send(e.key.coordinator, Msg::Logged { key: e.key });
                }
            }
            if !fresh.is_empty() {
                self.batches.push(Arc::new(fresh));
            }
        }
        if leader && !self.was_leader {
            // A new leader resends from what each region acknowledged to it (nothing, if
            // it never led): a region answers a batch it has with its frontier.
            for link in &mut self.links {
                link.sent_upto = link.acked;
            }
        }
        self.was_leader = leader;
        if leader {
            self.distribute(ctx);
        }
    }
}

/// The regions holding shards: every one gets every global batch.
pub(super) fn edge_regions(cluster: &Cluster) -> Vec<RegionId> {
    let mut regions: Vec<RegionId> = cluster
        .nodes
        .iter()
        .filter(|n| matches!(n.role, NodeRole::Replica { .. }))
        .map(|n| n.region)
        .collect();
    regions.sort_unstable();
    regions.dedup();
    regions
}

/// The entries with a piece in `region`.
fn for_region(cluster: &Cluster, batch: &[Entry], region: RegionId) -> Vec<Entry> {
    batch
        .iter()
        .filter(|e| {
            e.txn
                .shards()
                .iter()
                .any(|&s| shard_region(cluster, s) == region)
        })
        .cloned()
        .collect()
}
