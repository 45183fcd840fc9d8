//! # `2pl-raft`: strict two-phase locking (wound-wait) with two-phase commit over Raft groups
//!
//! **Guarantee: strict serializability**, as `2pl-2pc`'s: every transaction holds shared
//! locks on what it read and exclusive locks on what it wrote until its decision is applied,
//! and the client hears "committed" only once the decision is durable. What changes is
//! durability: each shard is a Raft group of its three replicas, so a shard survives the
//! loss of one of them (a region on `gcp-tiga`).
//!
//! This is the fault-tolerant 2PL baseline the Tiga paper compares against (Tiga §5.1:
//! "2PL+Raft ... uses wound-wait to prevent deadlocks", run on the Janus framework), also
//! used by DAST's evaluation. It is not a protocol of its own paper; its pieces are.
//!
//! ## Where each piece lives
//! * Strict 2PL with **wound-wait** (Tiga §5.1): `two_pl/locks.rs` ([`Policy::WoundWait`];
//!   `2pl-2pc` keeps WAIT-DIE), wounds carried out in `two_pl/server.rs` (`wound`).
//! * Execution, 2PC participant, records, recovery: the unchanged `two_pl/server.rs`.
//! * 2PC coordinator, one-shot and **interactive** transactions (`ClientRequest::Interactive`:
//!   each `Get`/`Put` a piece, `Commit` starts 2PC), routing to shard leaders with
//!   `NotLeader` hints: `two_pl/coordinator.rs`.
//! * The shard as a Raft group (server on the leader, records proposed, sends held until
//!   durable, takeover by a new leader): `kit/replicated.rs`, shared with Clock-SI's
//!   replicated mode and `occ-raft`; this file holds only 2PL's release policy.
//!
//! ## Choices the papers leave open
//! * **Leaders** are where the topology puts them (`gcp-tiga`: every shard's in SC); the
//!   placed leader campaigns first. Coordinators are not replicated (a coordinator shares
//!   its clients' fate; 2PC blocks prepared participants until it returns), as in Janus.
//! * **What waits for Raft.** Every record a server writes (prepare, commit, abort,
//!   checkpoint, its start) is proposed; a vote, a one-round outcome and a commit
//!   acknowledgement wait until their record (and every earlier one) has committed. A
//!   piece's results (`Executed`) wait only for what they may have seen: the leader's
//!   `Started` record (so an incarnation is never reused by a later leader) and the
//!   one-round commits of the keys the piece touched (a value no later leader could lose).
//!   Values installed by a 2PC commit need not wait: a new leader revives the prepared
//!   transaction and the coordinator's decision installs the same writes. Unprepared locks
//!   are not replicated: a new leader has a new incarnation and votes no on transactions
//!   that executed under the old one.
//! * **Wound-wait ages** are the coordinator's clock at submission (or `Begin`) and the
//!   transaction id; a prepared transaction is never wounded (the requester waits).
//! * **Interactive writes** are sent when the client writes them (lock taken then) and
//!   answered `Written` at once; a failure surfaces at the next step or at commit.
//!   Every interactive commit runs 2PC, even on one shard (its shard set is only known at
//!   commit); one-shot single-shard transactions commit in one round as in `2pl-2pc`.
//! * **Raft log** compaction past 1,024 entries (Clock-SI's replicated default); timing as
//!   in [`crate::kit::replicated`].
//!
//! ## Options
//! `2pl-2pc`'s (see [`crate::two_pl::Options`]), including the test-only
//! `unsafe_early_release`, whose lost updates the conformance test shows the checker
//! catching here too.

use crate::kit::replicated::{self, Inbound, MemberTimer, Partition, PartitionCx, Release};
use crate::raft_group::{RaftMsg, RaftRecord};
use crate::two_pl::{
    Coordinator, Msg, Options, Policy, Record, Server, Timer, ToCoord, ToServer, OPTIONS,
};
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::{ClientRequest, Key, Procedures};
use meridian_core::{Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RequestId};
use meridian_core::{ShardId, TxnId};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// The Raft log of a shard is compacted past this many entries.
const RAFT_LOG_LIMIT: u64 = 1024;

/// How many transactions' touched keys a leader tracks (see [`TwoPlRelease::request`]).
const MAX_TOUCHING: usize = 1 << 16;

/// One replica of a `2pl-raft` shard.
pub type Member = replicated::Member<Server>;

/// `2pl-raft`. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TwoPlRaft;

/// A node of `2pl-raft`.
#[derive(Debug)]
pub enum TwoPlRaftNode {
    /// A replica of a shard: a member of its Raft group.
    Member(Box<Member>),
    Coordinator(Box<Coordinator>),
    /// A service: does nothing.
    Inert,
}

impl Protocol for TwoPlRaft {
    type Node = TwoPlRaftNode;
    type Options = Options;

    const NAME: &'static str = "2pl-raft";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        let mut opts = Options::for_cluster(raw, cluster)?;
        opts.deadlock = Policy::WoundWait;
        opts.replicated = true;
        opts.interactive = true;
        Ok(opts)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> TwoPlRaftNode {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        match cluster.node(node).role {
            NodeRole::Replica { shard, .. } => {
                let partition = (opts, setup.procedures.clone());
                TwoPlRaftNode::Member(Box::new(Member::restore(
                    node,
                    shard,
                    cluster,
                    partition,
                    Some(RAFT_LOG_LIMIT),
                    recovered,
                )))
            }
            NodeRole::Coordinator { .. } => TwoPlRaftNode::Coordinator(Box::new(
                Coordinator::restore(node, opts, cluster.clone(), recovered),
            )),
            _ => TwoPlRaftNode::Inert,
        }
    }

    /// The largest round trip from the coordinator to an involved shard's placed leader:
    /// no transaction commits faster (replication only adds to it).
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .map(|&s| cluster.rtt_ms(coordinator, cluster.initial_leader(s)))
            .fold(0.0, f64::max)
    }
}

impl Node for TwoPlRaftNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            TwoPlRaftNode::Member(m) => m.on_start(ctx),
            TwoPlRaftNode::Coordinator(c) => c.on_start(ctx),
            TwoPlRaftNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            TwoPlRaftNode::Member(m) => m.on_message(ctx, from, msg),
            TwoPlRaftNode::Coordinator(c) => c.on_message(ctx, from, msg),
            TwoPlRaftNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            TwoPlRaftNode::Member(m) => m.on_timer(ctx, timer),
            TwoPlRaftNode::Coordinator(c) => c.on_timer(ctx, timer),
            TwoPlRaftNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            TwoPlRaftNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            TwoPlRaftNode::Member(m) => m.server().map_or(Ok(()), Server::check_invariants),
            _ => Ok(()),
        }
    }
}

impl Partition for Server {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;
    type Setup = (Options, Arc<Procedures>);
    type Release = TwoPlRelease;

    fn restore(id: NodeId, setup: &Self::Setup, records: &[Record]) -> Server {
        Server::restore(id, setup.0.clone(), setup.1.clone(), records)
    }

    fn on_start(&mut self, cx: &mut PartitionCx<'_, Self>) {
        Server::on_start(self, cx);
    }

    fn on_message(&mut self, cx: &mut PartitionCx<'_, Self>, _from: NodeId, msg: Msg) {
        Server::on_message(self, cx, msg);
    }

    fn on_timer(&mut self, cx: &mut PartitionCx<'_, Self>, timer: Timer) {
        Server::on_timer(self, cx, timer);
    }

    fn is_checkpoint(record: &Record) -> bool {
        matches!(record, Record::ServerCheckpoint(_))
    }

    fn release(&self) -> TwoPlRelease {
        TwoPlRelease::default()
    }

    fn raft_msg(msg: RaftMsg) -> Msg {
        Msg::Raft(msg)
    }

    fn inbound(msg: Msg) -> Inbound<Msg> {
        match msg {
            Msg::Raft(m) => Inbound::Raft(m),
            msg @ Msg::ToServer { .. } => Inbound::Request {
                txn: msg.txn(),
                msg,
            },
            msg => Inbound::Request { txn: None, msg },
        }
    }

    fn not_leader(txn: TxnId, leader: Option<NodeId>) -> Msg {
        Msg::ToCoord(ToCoord::NotLeader { txn, leader })
    }

    fn raft_tick() -> Timer {
        Timer::RaftTick
    }

    fn led_timer(epoch: u64, timer: Timer) -> Timer {
        Timer::Led {
            epoch,
            timer: Box::new(timer),
        }
    }

    fn member_timer(timer: Timer) -> MemberTimer<Timer> {
        match timer {
            Timer::RaftTick => MemberTimer::RaftTick,
            Timer::Led { epoch, timer } => MemberTimer::Led {
                epoch,
                timer: *timer,
            },
            other => panic!("a 2pl-raft replica fired {other:?}"),
        }
    }

    fn raft_record(record: RaftRecord) -> Record {
        Record::Raft(record)
    }

    fn as_raft_record(record: &Record) -> Option<&RaftRecord> {
        match record {
            Record::Raft(r) => Some(r),
            _ => None,
        }
    }
}

/// 2PL's release policy (see the module doc, *What waits for Raft*).
#[derive(Debug)]
pub struct TwoPlRelease {
    /// The proposal holding this leadership's `Started` record (its first: the takeover's
    /// `on_start` writes it).
    started_seq: u64,
    /// Per key, the latest proposal holding a one-round commit of it.
    local_commit_seq: FxHashMap<Key, u64>,
    /// The keys each transaction's EXECUTE requests named, until its results go out.
    touching: FxHashMap<TxnId, Vec<Key>>,
}

impl Default for TwoPlRelease {
    fn default() -> TwoPlRelease {
        TwoPlRelease {
            started_seq: 1,
            local_commit_seq: FxHashMap::default(),
            touching: FxHashMap::default(),
        }
    }
}

impl Release<Server> for TwoPlRelease {
    /// Notes the keys an EXECUTE's pieces declare. Requests never answered leave entries:
    /// they are bounded, and results whose entry is gone wait for every earlier record.
    fn request(&mut self, msg: &Msg) {
        let Msg::ToServer {
            body: ToServer::Execute { txn, pieces, .. },
            ..
        } = msg
        else {
            return;
        };
        if self.touching.len() >= MAX_TOUCHING {
            self.touching.clear();
        }
        let keys = self.touching.entry(*txn).or_default();
        for run in pieces {
            keys.extend(run.piece.read_keys());
            keys.extend(run.piece.write_keys());
        }
    }

    fn note(&mut self, seq: u64, record: &Record) {
        match record {
            Record::Started { .. } => self.started_seq = seq,
            Record::Committed {
                local: Some(local), ..
            } => {
                for (key, _) in &local.writes {
                    self.local_commit_seq.insert(key.clone(), seq);
                }
            }
            _ => {}
        }
    }

    fn wait_for(&mut self, msg: &Msg, proposed: u64, handler_records: bool) -> u64 {
        let all = proposed + u64::from(handler_records);
        match msg {
            Msg::ToCoord(ToCoord::Executed { txn, .. }) => match self.touching.remove(txn) {
                Some(keys) => keys
                    .iter()
                    .filter_map(|k| self.local_commit_seq.get(k).copied())
                    .fold(self.started_seq, u64::max),
                None => all,
            },
            // An unprepared transaction's abort and a question need nothing durable.
            Msg::ToCoord(ToCoord::Failed { .. } | ToCoord::Query { .. }) => 0,
            _ => all,
        }
    }

    fn committed(&mut self, committed: u64) {
        self.local_commit_seq.retain(|_, s| *s > committed);
    }
}
