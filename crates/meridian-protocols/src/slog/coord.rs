//! The coordinator side of an edge node (SLOG §3.1): a client's transaction goes to the
//! sequencer of its home region if it is single-home, to the global orderer if it is
//! multi-home; the order is resent until the transaction is logged; the client's answer
//! waits for every piece's outcome from the shards that execute it.

use super::options::Options;
use super::wire::{Entry, Msg, PieceOutcome, TxnKey};
use super::{region_edges, shard_region, SlogNode, ORDERER};
use meridian_core::node::Ctx;
use meridian_core::txn::{AbortReason, CommitPath, Outcome, Txn};
use meridian_core::{Cluster, NodeId, NodeRole, RegionId, RequestId};
use rand::Rng;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a transaction is ordered.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Home {
    /// Single-home: by this region's sequencer.
    Region(RegionId),
    /// Multi-home: by the global orderer (these are its regions).
    Global(Vec<RegionId>),
}

#[derive(Debug)]
struct Inflight {
    port: NodeId,
    request: RequestId,
    entry: Entry,
    home: Home,
    logged: bool,
    started_ns: u64,
    sent_ns: u64,
    tries: u64,
    outcomes: Vec<Option<PieceOutcome>>,
}

#[derive(Debug, Default)]
pub struct Coordinator {
    boot: u64,
    seq: u64,
    inflight: BTreeMap<TxnKey, Inflight>,
    /// The leader last heard from: per region (its sequencer), and the orderers'.
    hints: FxHashMap<RegionId, NodeId>,
    orderer_hint: Option<NodeId>,
}

impl Coordinator {
    /// A fresh incarnation: keys drawn from here never repeat an earlier incarnation's.
    pub fn boot(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        self.boot = ctx.rng().gen();
    }

    pub fn submit(
        &mut self,
        ctx: &mut Ctx<'_, SlogNode>,
        cluster: &Cluster,
        opts: &Options,
        port: NodeId,
        request: RequestId,
        txn: Txn,
    ) {
        if let Err(e) = txn.validate(cluster.shard_count()) {
            let outcome = Outcome::Aborted {
                reason: AbortReason::Invalid(e.to_string()),
            };
            ctx.send(port, Msg::Done { request, outcome });
            return;
        }
        if self.inflight.len() >= opts.max_inflight {
            let outcome = Outcome::Aborted {
                reason: AbortReason::Timeout,
            };
            ctx.send(port, Msg::Done { request, outcome });
            return;
        }
        let mut regions: Vec<RegionId> = txn
            .shards()
            .iter()
            .map(|&s| shard_region(cluster, s))
            .collect();
        regions.sort_unstable();
        regions.dedup();
        let home = match regions.as_slice() {
            [one] => Home::Region(*one),
            _ => Home::Global(regions),
        };
        self.seq += 1;
        let key = TxnKey {
            coordinator: ctx.id(),
            boot: self.boot,
            seq: self.seq,
        };
        let now = ctx.now_ns();
        let flight = Inflight {
            port,
            request,
            outcomes: vec![None; txn.pieces.len()],
            entry: Entry {
                key,
                txn: Arc::new(txn),
                floor: key.seq,
            },
            home,
            logged: false,
            started_ns: now,
            sent_ns: now,
            tries: 0,
        };
        self.send_order(ctx, cluster, opts, &flight);
        self.inflight.insert(key, flight);
    }

    /// Sends the order to the leader last heard from, or the next member in turn.
    fn send_order(
        &self,
        ctx: &mut Ctx<'_, SlogNode>,
        cluster: &Cluster,
        opts: &Options,
        flight: &Inflight,
    ) {
        let mut entry = flight.entry.clone();
        entry.floor = self.floor().min(entry.key.seq);
        let msg = Msg::Order {
            entry,
            forwarded: false,
        };
        let pick = |members: Vec<NodeId>, hint: Option<NodeId>| match hint {
            Some(h) if flight.tries.is_multiple_of(2) => Some(h),
            _ if members.is_empty() => None,
            _ => Some(members[(flight.tries as usize) % members.len()]),
        };
        let targets: Vec<NodeId> = match &flight.home {
            Home::Region(r) => pick(region_edges(cluster, *r), self.hints.get(r).copied())
                .into_iter()
                .collect(),
            Home::Global(regions) if opts.unsafe_skip_global_order => regions
                .iter()
                .filter_map(|r| pick(region_edges(cluster, *r), self.hints.get(r).copied()))
                .collect(),
            Home::Global(_) => pick(cluster.services(ORDERER), self.orderer_hint)
                .into_iter()
                .collect(),
        };
        ctx.multicast(targets, &msg);
    }

    /// The lowest counter this incarnation may still order (`logged.rs`): that of its
    /// oldest transaction not known to be logged (one known logged is never ordered
    /// again), or the next counter if there is none.
    fn floor(&self) -> u64 {
        self.inflight
            .values()
            .filter(|f| !f.logged)
            .map(|f| f.entry.key.seq)
            .min()
            .unwrap_or(self.seq + 1)
    }

    /// A sequencer or the orderer logged `key`: stop resending (the broken variant, whose
    /// multi-home orders go to several sequencers, resends until the results are in).
    pub fn logged(&mut self, cluster: &Cluster, from: NodeId, key: TxnKey) {
        match &cluster.node(from).role {
            NodeRole::Service { .. } => self.orderer_hint = Some(from),
            _ => {
                self.hints.insert(cluster.region_of(from), from);
            }
        }
        if let Some(f) = self.inflight.get_mut(&key) {
            f.logged = match f.home {
                Home::Region(_) => true,
                Home::Global(_) => matches!(cluster.node(from).role, NodeRole::Service { .. }),
            };
        }
    }

    /// Outcomes of pieces from a shard replica (the first per piece counts: replicas
    /// execute the same log deterministically, so they agree).
    pub fn results(
        &mut self,
        ctx: &mut Ctx<'_, SlogNode>,
        key: TxnKey,
        pieces: Vec<(u16, PieceOutcome)>,
    ) {
        let Some(f) = self.inflight.get_mut(&key) else {
            return;
        };
        for (p, outcome) in pieces {
            if let Some(slot @ None) = f.outcomes.get_mut(usize::from(p)) {
                *slot = Some(outcome);
            }
        }
        if f.outcomes.iter().any(Option::is_none) {
            return;
        }
        let Some(f) = self.inflight.remove(&key) else {
            return;
        };
        let path = match f.home {
            Home::Region(_) => CommitPath::Local,
            Home::Global(_) => CommitPath::Slow,
        };
        let outcomes: Vec<PieceOutcome> = f.outcomes.into_iter().flatten().collect();
        let outcome = match outcomes.iter().find_map(|o| o.as_ref().err()) {
            Some(reason) => Outcome::Aborted {
                reason: reason.clone(),
            },
            None => Outcome::Committed {
                results: outcomes.into_iter().flatten().collect(),
                commit_ts: None,
                path,
            },
        };
        ctx.send(
            f.port,
            Msg::Done {
                request: f.request,
                outcome,
            },
        );
    }

    /// Resends orders not yet logged; answers `unknown` for what took too long.
    pub fn tick(&mut self, ctx: &mut Ctx<'_, SlogNode>, cluster: &Cluster, opts: &Options) {
        let now = ctx.now_ns();
        let expired: Vec<TxnKey> = self
            .inflight
            .iter()
            .filter(|(_, f)| now.saturating_sub(f.started_ns) >= opts.result_timeout_ns)
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            if let Some(f) = self.inflight.remove(&key) {
                let outcome = Outcome::Unknown {
                    reason: "slog: results not all in before result_timeout_ms".into(),
                };
                ctx.send(
                    f.port,
                    Msg::Done {
                        request: f.request,
                        outcome,
                    },
                );
            }
        }
        let mut resend = Vec::new();
        for f in self.inflight.values_mut() {
            if !f.logged && now.saturating_sub(f.sent_ns) >= opts.retry_ns {
                f.tries += 1;
                f.sent_ns = now;
                resend.push(f.entry.key);
            }
        }
        for key in resend {
            if let Some(f) = self.inflight.get(&key) {
                self.send_order(ctx, cluster, opts, f);
            }
        }
    }
}
