//! # `2pl-pb` and `occ-pb`: Aurogon's R2PL and ROCC baselines
//!
//! **Guarantee: strict serializability**, for both (checked at that level by the
//! conformance swarms). Aurogon §6.1 compares against "an RDMA version of 2PL and OCC,
//! called R2PL and ROCC", built on the implementation it cites (its ref. 45) and replicated like
//! Aurogon itself (§4.5: primary-backup, f + 1 copies, a backup promoted when its primary
//! fails). Here they are this repository's 2PL server and its OCC mode (`two_pl/`), run
//! unchanged on each shard's primary by the primary-backup kit, with 2PC among the
//! primaries — as `2pl-raft` and `occ-raft` run the same server over Raft.
//!
//! * **`2pl-pb`** ([`TwoPlPb`]): strict two-phase locking with **WAIT-DIE**. The paper does
//!   not name R2PL's deadlock policy; the implementation it cites for R2PL/ROCC and
//!   RSundial-CC, Sundial's open-source code (our reading of ref. 45: the reference list is
//!   not in our copy of the paper), offers WAIT_DIE and NO_WAIT; WAIT-DIE is the one our
//!   lock table has (`2pl-2pc`'s), NO_WAIT is not implemented.
//! * **`occ-pb`** ([`OccPb`]): OCC — pieces run without locks noting versions; PREPARE
//!   takes the locks without waiting and validates (`two_pl/occ.rs`).
//!
//! ## Map from Aurogon §6.1 / §4.5 to the files
//! | paper | file |
//! |---|---|
//! | §6.1 R2PL: 2PL over primary-backup | `two_pl/locks.rs` (WAIT-DIE), `two_pl/server.rs`, this file |
//! | §6.1 ROCC: OCC over primary-backup | `two_pl/occ.rs`, `two_pl/server.rs` (`validate`) |
//! | 2PC among partitions, coordinators on every server | `two_pl/coordinator.rs` |
//! | §4.5 replication to every backup before anything depends on it | `kit/primary_backup.rs` (`Member::run`, `on_ack`), release policy `raft_2pc::TwoPcRelease` |
//! | §4.5 backup promoted by a small consensus of coordinators | `kit/promotion.rs` (shared with `aurogon`), `kit/primary_backup.rs` (`tick`, `take_over`, `Granter`) |
//!
//! ## Choices the paper leaves open
//! * **What waits for the backups** is `2pl-raft`'s release policy, unchanged
//!   ([`crate::raft_2pc::TwoPcRelease`]): a vote, a one-round outcome and a commit acknowledgement wait
//!   until every backup acknowledged their record; a piece's results only for the
//!   primary's `Started` record and one-round commits of the keys it touched. Unprepared
//!   state (locks, OCC's noted versions) is not replicated: a promoted primary has a new
//!   incarnation and votes no on what executed under the old one.
//! * **Timing**: primaries heartbeat every max(2.5 × the largest RTT, 1 ms) (Aurogon's
//!   `heartbeat_ms` default); a backup campaigns after 10 heartbeats of silence
//!   (Aurogon's `failover_ms`). Not options: `2pl-2pc`'s option set is shared.
//! * **Coordinators** are not replicated (as in Aurogon §4.5 and `2pl-raft`): 2PC blocks
//!   a prepared participant until its coordinator returns. They also grant epochs.
//! * **Interactive transactions** are supported as in `2pl-raft` (same coordinator).
//!
//! ## Options
//! `2pl-2pc`'s ([`Options`]), with the test-only broken variants `unsafe_early_release`
//! (2PL) and `unsafe_skip_validation` (OCC), and this module's own
//! `unsafe_release_before_backup_ack=true`: the primary's sends go out without waiting for
//! the backups (a promoted backup then lacks what a client already saw); the conformance
//! test shows the checker catching it under crashes.

use crate::kit::primary_backup::{self, Backed, Granter, PbMsg, PbRecord, PbTiming};
use crate::two_pl::{Concurrency, Coordinator, Msg, Options, Policy, Record, Server, OPTIONS};
use meridian_core::fault_model::FaultModel;
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::{Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RequestId};
use meridian_core::{ReplicaKind, ShardId};

#[cfg(test)]
mod tests;

/// One replica of a shard: its primary or a backup.
pub type Member = primary_backup::Member<Server>;

/// `2pl-pb`. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TwoPlPb;

/// `occ-pb`. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct OccPb;

/// A node of `2pl-pb` or `occ-pb`.
#[derive(Debug)]
pub enum PbNode {
    Member(Box<Member>),
    Coordinator(Box<Coordinator>, Granter),
    /// A service: does nothing.
    Inert,
}

/// Every option of both: `2pl-2pc`'s and this module's broken variant.
pub const PB_OPTIONS: [&str; 11] = [
    OPTIONS[0],
    OPTIONS[1],
    OPTIONS[2],
    OPTIONS[3],
    OPTIONS[4],
    OPTIONS[5],
    OPTIONS[6],
    OPTIONS[7],
    OPTIONS[8],
    OPTIONS[9],
    UNSAFE_RELEASE,
];

/// TEST-ONLY, deliberately broken: a primary's sends go out before its backups hold
/// what they depend on.
const UNSAFE_RELEASE: &str = "unsafe_release_before_backup_ack";

/// The options of both.
#[derive(Clone, Debug)]
pub struct PbOptions {
    /// `2pl-2pc`'s, with the concurrency control and deadlock policy fixed.
    pub two_pl: Options,
    pub timing: PbTiming,
}

fn parse(raw: &ProtocolConfig, cluster: &Cluster, cc: Concurrency) -> Result<PbOptions, String> {
    let mut raw = raw.clone();
    let unsafe_release: bool = raw.take(UNSAFE_RELEASE, false)?;
    let two_pl = crate::raft_2pc::parse_replicated(&raw, cluster, cc, Policy::WaitDie)?;
    let mut timing = timing(cluster);
    timing.unsafe_release_before_ack = unsafe_release;
    Ok(PbOptions { two_pl, timing })
}

/// Heartbeat max(2.5 × the largest RTT, 1 ms); failover after 10 heartbeats.
fn timing(cluster: &Cluster) -> PbTiming {
    let heartbeat_ms = (2.5 * cluster.topology.max_rtt_ms()).max(1.0);
    let heartbeat_ns = crate::kit::options::ms_to_ns(heartbeat_ms);
    PbTiming {
        heartbeat_ns,
        failover_ns: 10 * heartbeat_ns,
        unsafe_release_before_ack: false,
    }
}

fn build<P: Protocol<Options = PbOptions>>(
    node: NodeId,
    setup: &Setup<P>,
    recovered: &[Record],
) -> PbNode {
    let cluster = &setup.cluster;
    let opts = setup.options.two_pl.clone();
    match cluster.node(node).role {
        NodeRole::Replica { shard, .. } => {
            let partition = (opts, setup.procedures.clone());
            PbNode::Member(Box::new(Member::restore(
                node,
                shard,
                cluster,
                partition,
                setup.options.timing,
                recovered,
            )))
        }
        NodeRole::Coordinator { .. } => {
            let (granter, rest) = Granter::restore::<Server>(cluster, recovered);
            let coordinator = Coordinator::restore(node, opts, cluster.clone(), &rest);
            PbNode::Coordinator(Box::new(coordinator), granter)
        }
        _ => PbNode::Inert,
    }
}

/// Two round trips to the farthest replica involved: execution, then the prepare's
/// replication (a one-round commit replicates too).
fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
    crate::aurogon::Aurogon::bound_ms(cluster, coordinator, shards)
}

impl Protocol for TwoPlPb {
    type Node = PbNode;
    type Options = PbOptions;

    const NAME: &'static str = "2pl-pb";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &PB_OPTIONS;
    const REPLICA_KINDS: &'static [ReplicaKind] = &[ReplicaKind::Voter, ReplicaKind::Backup];

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<PbOptions, String> {
        parse(raw, cluster, Concurrency::Locking)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> PbNode {
        build(node, setup, recovered)
    }

    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        bound_ms(cluster, coordinator, shards)
    }

    fn fault_model(cluster: &Cluster) -> FaultModel {
        crate::kit::promotion::fault_model(cluster)
    }
}

impl Protocol for OccPb {
    type Node = PbNode;
    type Options = PbOptions;

    const NAME: &'static str = "occ-pb";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &PB_OPTIONS;
    const REPLICA_KINDS: &'static [ReplicaKind] = TwoPlPb::REPLICA_KINDS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<PbOptions, String> {
        parse(raw, cluster, Concurrency::Optimistic)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> PbNode {
        build(node, setup, recovered)
    }

    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        bound_ms(cluster, coordinator, shards)
    }

    fn fault_model(cluster: &Cluster) -> FaultModel {
        crate::kit::promotion::fault_model(cluster)
    }
}

impl Node for PbNode {
    type Msg = Msg;
    type Timer = crate::two_pl::Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            PbNode::Member(m) => m.on_start(ctx),
            PbNode::Coordinator(c, g) => g.around::<Server>(ctx, |cx| c.on_start(cx)),
            PbNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            PbNode::Member(m) => m.on_message(ctx, from, msg),
            PbNode::Coordinator(c, g) => match msg {
                Msg::Pb(PbMsg::RequestGrant { shard, epoch }) => {
                    g.on_request::<Server>(ctx, from, shard, epoch);
                }
                Msg::Pb(_) => {}
                msg => g.around::<Server>(ctx, |cx| c.on_message(cx, from, msg)),
            },
            PbNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: crate::two_pl::Timer) {
        match self {
            PbNode::Member(m) => m.on_timer(ctx, timer),
            PbNode::Coordinator(c, g) => g.around::<Server>(ctx, |cx| c.on_timer(cx, timer)),
            PbNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            PbNode::Coordinator(c, g) => {
                g.around::<Server>(ctx, |cx| c.on_client_request(cx, request, req));
            }
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            PbNode::Member(m) => m.server().map_or(Ok(()), Server::check_invariants),
            _ => Ok(()),
        }
    }

    fn shard_leader(&self) -> Option<NodeId> {
        match self {
            PbNode::Member(m) => Some(m.config().primary),
            _ => None,
        }
    }
}

impl Backed for Server {
    fn pb_msg(msg: PbMsg) -> Msg {
        Msg::Pb(msg)
    }

    fn as_pb_msg(msg: Msg) -> Result<PbMsg, Msg> {
        match msg {
            Msg::Pb(m) => Ok(m),
            other => Err(other),
        }
    }

    fn pb_record(record: PbRecord) -> Record {
        Record::Pb(record)
    }

    fn as_pb_record(record: &Record) -> Option<&PbRecord> {
        match record {
            Record::Pb(r) => Some(r),
            _ => None,
        }
    }
}
