//! # `mvto-hlc`: K2's CockroachDB-like baseline (K2 §7.3; CockroachDB, SIGMOD '20)
//!
//! DOC-PLACEHOLDER

mod anchor;
mod coordinator;
mod options;
mod primary;
mod store;
mod wire;

#[cfg(test)]
mod tests;

pub use coordinator::Coordinator;
pub use options::{Options, OPTIONS};
pub use primary::Primary;
pub use wire::{Msg, Record, Timer, TxnRef};

use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, ReplicaKind, RequestId, ShardId,
};

/// K2's MVTO-HLC baseline. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MvtoHlc;

/// A node of `mvto-hlc`.
#[derive(Debug)]
pub enum MvtoNode {
    Primary(Box<Primary>),
    Coordinator(Box<Coordinator>),
    /// Read replicas (no ClosedTS reads yet) and services this protocol does not run.
    Inert,
}

impl Protocol for MvtoHlc {
    type Node = MvtoNode;
    type Options = Options;

    const NAME: &'static str = "mvto-hlc";
    const GUARANTEE: &'static str = "strong-partition-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;
    const REPLICA_KINDS: &'static [ReplicaKind] = &[ReplicaKind::Voter, ReplicaKind::ReadReplica];

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::for_cluster(raw, cluster)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> MvtoNode {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        match &cluster.node(node).role {
            NodeRole::Replica { shard, .. } if cluster.initial_leader(*shard) == node => {
                MvtoNode::Primary(Box::new(Primary::restore(
                    node,
                    *shard,
                    opts,
                    cluster.clone(),
                    setup.procedures.clone(),
                    recovered,
                )))
            }
            NodeRole::Coordinator { .. } => MvtoNode::Coordinator(Box::new(Coordinator::restore(
                node,
                opts,
                cluster.clone(),
                recovered,
            ))),
            _ => MvtoNode::Inert,
        }
    }

    /// The largest round trip from the coordinator to an involved primary: a transaction
    /// needs one per piece, and parallel commits add none when the writes are pipelined.
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .map(|&s| cluster.rtt_ms(coordinator, cluster.initial_leader(s)))
            .fold(0.0, f64::max)
    }
}

impl Node for MvtoNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            MvtoNode::Primary(p) => p.on_start(ctx),
            MvtoNode::Coordinator(c) => c.on_start(ctx),
            MvtoNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            MvtoNode::Primary(p) => p.on_message(ctx, from, msg),
            MvtoNode::Coordinator(c) => c.on_message(ctx, msg),
            MvtoNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            MvtoNode::Primary(p) => p.on_timer(ctx, timer),
            MvtoNode::Coordinator(c) => c.on_timer(ctx, timer),
            MvtoNode::Inert => {}
        }
    }

    fn on_client_request(&mut self, ctx: &mut Ctx<'_, Self>, request: RequestId, req: ClientRequest) {
        match self {
            MvtoNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            MvtoNode::Primary(p) => p.check_invariants(),
            _ => Ok(()),
        }
    }
}
