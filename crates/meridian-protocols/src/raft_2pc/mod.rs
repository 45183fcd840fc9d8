//! # `2pl-raft` and `occ-raft`: two-phase commit over Raft groups, with 2PL or OCC
//!
//! **Guarantee: strict serializability**, for both. They are the fault-tolerant baselines
//! the Tiga paper compares against (Tiga §5.1, run by its authors on the Janus framework;
//! DAST's evaluation uses them too): each shard is a Raft group of its three replicas, so a
//! shard survives the loss of one (a region on `gcp-tiga`), and transactions commit by
//! two-phase commit among the shards' leaders. One module, two [`Protocol`] types, because
//! they differ only in the server's concurrency control:
//!
//! * **`2pl-raft`** ([`TwoPlRaft`]): strict two-phase locking with **wound-wait** (Tiga
//!   §5.1: "2PL+Raft ... uses wound-wait"). Shared locks on what a transaction reads,
//!   exclusive on what it writes, taken as its pieces run and held until the decision is
//!   applied; the client hears "committed" once the decision is durable.
//! * **`occ-raft`** ([`OccRaft`]): optimistic concurrency control. Pieces run without
//!   locks, noting the version of every key they touch; PREPARE takes the locks without
//!   waiting and validates the versions (Tiga §5.1: "OCC+Raft"); the locks are held until
//!   the decision. Its serialization point is the prepare of its last participant, inside
//!   every participant's locked interval.
//!
//! ## Where each piece lives
//! * Lock table, **wound-wait** as a [`Policy`] (`2pl-2pc` keeps WAIT-DIE):
//!   `two_pl/locks.rs`; wounds carried out in `two_pl/server.rs` (`wound`).
//! * OCC's versions and validation: `two_pl/occ.rs`, used by `two_pl/server.rs`
//!   (`advance`, `validate`) when the server's [`Concurrency`] is `Optimistic`. The OCC
//!   server is the 2PL server with lock-free execution and validation at PREPARE: its
//!   execution, 2PC participant, horizons, records and recovery are the same code, not a
//!   copy.
//! * 2PC coordinator, one-shot and **interactive** transactions (`ClientRequest::Interactive`:
//!   each `Get`/`Put` a piece, `Commit` starts 2PC), routing to shard leaders with
//!   `NotLeader` hints: `two_pl/coordinator.rs`, shared by all three.
//! * The shard as a Raft group (server on the leader, records proposed, sends held until
//!   durable, takeover by a new leader): `kit/replicated.rs`, shared with Clock-SI's
//!   replicated mode; this file holds only the release policy and the wiring.
//!
//! ## Choices the papers leave open
//! * **Leaders** are where the topology puts them (`gcp-tiga`: every shard's in SC); the
//!   placed leader campaigns first. Coordinators are not replicated (a coordinator shares
//!   its clients' fate; 2PC blocks prepared participants until it returns).
//! * **What waits for Raft.** Every record a server writes (prepare, commit, abort,
//!   checkpoint, its start) is proposed; a vote, a one-round outcome and a commit
//!   acknowledgement wait until their record (and every earlier one) has committed. A
//!   piece's results (`Executed`) wait only for what they may have seen: the leader's
//!   `Started` record (so an incarnation is never reused by a later leader) and the
//!   one-round commits of the keys the piece touched (a value no later leader could lose).
//!   Values installed by a 2PC commit need not wait: a new leader revives the prepared
//!   transaction and the coordinator's decision installs the same writes. Unprepared state
//!   (2PL's locks, OCC's noted versions) is not replicated: a new leader has a new
//!   incarnation and votes no on transactions that executed under the old one.
//! * **Wound-wait ages** are the coordinator's clock at submission (or `Begin`) and the
//!   transaction id; a prepared transaction is never wounded (the requester waits).
//! * **OCC** validates every touched key, blind writes included (a few more aborts, never
//!   fewer); a conflict with a prepared transaction's lock is a no (no waiting), and the
//!   coordinator hears the reason (`Conflict` or `Validation`). A one-shot single-shard
//!   transaction commits in one round on both: under OCC it takes its locks without
//!   waiting as it runs (the execution and commit are one handler, so this is validation).
//! * **Interactive writes** are sent when the client writes them and answered `Written` at
//!   once (2PL takes the lock then); a failure surfaces at the next step or at commit.
//!   Every interactive commit runs 2PC, even on one shard (its shard set is only known at
//!   commit). Each step has `exec_timeout_ms` to complete; a transaction left idle longer
//!   than that between steps is aborted (`Timeout`), its next step told so.
//! * **Routing.** A coordinator turns from the replica it believes leads a shard (to the
//!   next replica) only once that replica has not answered for a retry period (`retry_ms`),
//!   not on every retry tick: a slow transaction is no lost leader. Turning on every tick
//!   made HK's transactions on `gcp-tiga`, which come close to one period, send the next
//!   transaction to followers and pay `NotLeader` round trips, so it outlived its period too.
//! * **Boot.** A fresh group starts with its placed leader already elected in term 1
//!   (`RaftGroup::bootstrap`, as raft-rs's examples bootstrap a first leader: every fresh
//!   member records a term-1 vote for it), so the leader serves once its barrier reaches
//!   its nearest follower, one round trip (SC–BR, 117 ms on `gcp-tiga`). Until then it
//!   holds the requests that reach it (at most `kit::replicated::WAITING_MAX`). It used to
//!   campaign at boot (pre-vote, vote, barrier: three round trips), and before that to
//!   answer `NotLeader` with no hint, which cost coordinators a whole retry period
//!   (2.5 × 302 ms ≈ 755 ms).
//! * **In flight.** A coordinator refuses (aborts) a transaction beyond `max_inflight`
//!   undecided ones; the default here is 16,384, above the experiments' open-loop cap on
//!   outstanding transactions, so the cap, not a refusal, limits what is submitted (Tiga
//!   §5.1's method).
//! * **Raft log** compaction past 1,024 entries (Clock-SI's replicated default); timing as
//!   in [`crate::kit::replicated`].
//!
//! ## Measured: `occ-raft` at 5,000 txns/s per coordinator (issue 18)
//! Tiga Fig. 7's point (`experiments/tiga-fig7.toml` restricted to `occ-raft`, rate 5000,
//! `meridian experiment run FILE --repeats 1`, release build, seed 1): HK committed 0 (562
//! aborted) and 18.0 % aborted overall. Not a protocol failure: the point measures what
//! finishes between 0.4 s and 0.9 s of a run whose load starts at 0, and an HK
//! transaction needs at least an HK–SC round trip to execute, another to prepare and the
//! SC leader's Raft round trip (≈ 520 ms) plus the boot backlog, so HK's first commits
//! finished after 0.9 s; the window held only HK's earliest-ending transactions, aborts.
//! With `warmup = "1500ms"` (the rest unchanged) HK committed
//! 5,548 (p50 590 ms) and 11.3 % aborted overall (1,581 `conflict`: a prepared
//! transaction held the lock at PREPARE; 722 `validation failed`); with `duration =
//! "2500ms"` 19,786 and 11.5 %. The aborts are OCC's: its locks are held from PREPARE
//! through the Raft round trips to the decision, longest for HK.
//!
//! ## Options
//! `2pl-2pc`'s (see [`crate::two_pl::Options`]), with the test-only broken variants
//! `unsafe_early_release` (2PL: locks released at the vote) and `unsafe_skip_validation`
//! (OCC: versions not checked at PREPARE), whose anomalies the conformance tests show the
//! checker catching.

use crate::kit::replicated::{self, Inbound, MemberTimer, Partition, PartitionCx, Release};
use crate::raft_group::{RaftMsg, RaftRecord};
use crate::two_pl::{
    Concurrency, Coordinator, Msg, Options, Policy, Record, Server, Timer, ToCoord, ToServer,
    OPTIONS,
};
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::{ClientRequest, Key, Procedures};
use meridian_core::{Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RequestId};
use meridian_core::{ShardId, TxnId};
use rustc_hash::FxHashMap;
use std::sync::Arc;

#[cfg(test)]
mod tests;

/// The Raft log of a shard is compacted past this many entries.
const RAFT_LOG_LIMIT: u64 = 1024;

/// How many transactions' touched keys a leader tracks (see [`TwoPcRelease::request`]).
const MAX_TOUCHING: usize = 1 << 16;

/// The default `max_inflight` of both (`2pl-2pc`'s is 1,024). A coordinator refuses a
/// transaction beyond it as an abort; the papers' open loop instead caps what is
/// outstanding and stops submitting (Tiga §5.1, the experiments' `outstanding`, up to
/// 8,000). At 5 K txns/s an HK coordinator, ≥ 1 HK–SC round trip (201 ms) per
/// transaction, has more than 1,024 in flight whatever the protocol does, so 1,024 turned
/// load into "aborts" that are the harness's cap, not 2PL's or OCC's.
const MAX_INFLIGHT: usize = 1 << 14;

/// One replica of a shard: a member of its Raft group, the server on its leader.
pub type Member = replicated::Member<Server>;

/// `2pl-raft`. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TwoPlRaft;

/// `occ-raft`. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct OccRaft;

/// A node of `2pl-raft` or `occ-raft`.
#[derive(Debug)]
pub enum RaftNode {
    /// A replica of a shard: a member of its Raft group.
    Member(Box<Member>),
    Coordinator(Box<Coordinator>),
    /// A service: does nothing.
    Inert,
}

/// The options of both: 2PL's, with the concurrency control and deadlock policy fixed
/// (also those of `2pl-pb` / `occ-pb`, with theirs).
pub(crate) fn parse_replicated(
    raw: &ProtocolConfig,
    cluster: &Cluster,
    cc: Concurrency,
    deadlock: Policy,
) -> Result<Options, String> {
    let mut opts = Options::for_cluster(raw, cluster)?;
    let unsafe_opt = match cc {
        Concurrency::Locking => opts
            .unsafe_skip_validation
            .then_some("unsafe_skip_validation"),
        Concurrency::Optimistic => opts.unsafe_early_release.then_some("unsafe_early_release"),
    };
    if let Some(name) = unsafe_opt {
        return Err(format!(
            "protocol option `{name}` is not one of this protocol's"
        ));
    }
    opts.concurrency = cc;
    opts.deadlock = deadlock;
    opts.replicated = true;
    opts.interactive = true;
    Ok(opts)
}

/// `2pl-raft`'s and `occ-raft`'s options: [`parse_replicated`]'s, with their own default
/// `max_inflight` ([`MAX_INFLIGHT`]).
fn parse_raft(raw: &ProtocolConfig, cluster: &Cluster, cc: Concurrency) -> Result<Options, String> {
    let mut opts = parse_replicated(raw, cluster, cc, Policy::WoundWait)?;
    opts.max_inflight = raw.get("max_inflight", MAX_INFLIGHT)?;
    if opts.max_inflight == 0 {
        return Err("protocol option `max_inflight` must be at least 1".to_string());
    }
    Ok(opts)
}

fn build<P: Protocol<Options = Options>>(
    node: NodeId,
    setup: &Setup<P>,
    recovered: &[Record],
) -> RaftNode {
    let cluster = &setup.cluster;
    let opts = setup.options.clone();
    match cluster.node(node).role {
        NodeRole::Replica { shard, .. } => {
            let partition = (opts, setup.procedures.clone());
            RaftNode::Member(Box::new(Member::restore(
                node,
                shard,
                cluster,
                partition,
                Some(RAFT_LOG_LIMIT),
                recovered,
            )))
        }
        NodeRole::Coordinator { .. } => RaftNode::Coordinator(Box::new(Coordinator::restore(
            node,
            opts,
            cluster.clone(),
            recovered,
        ))),
        _ => RaftNode::Inert,
    }
}

/// A single-shard transaction's one round: the coordinator's round trip to the shard's
/// placed leader, plus the leader's to a majority of its group (its commit record must be
/// durable before the answer). It used to be the first term alone, as if single-copy: a
/// WRTT count of ≈ 680 for an SC coordinator on `gcp-tiga`, whose bound is SC–BR.
fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
    crate::kit::quorum::leader_majority_round_trip_ms(cluster, coordinator, shards)
}

impl Protocol for TwoPlRaft {
    type Node = RaftNode;
    type Options = Options;

    const NAME: &'static str = "2pl-raft";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        parse_raft(raw, cluster, Concurrency::Locking)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> RaftNode {
        build(node, setup, recovered)
    }

    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        bound_ms(cluster, coordinator, shards)
    }
}

impl Protocol for OccRaft {
    type Node = RaftNode;
    type Options = Options;

    const NAME: &'static str = "occ-raft";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        parse_raft(raw, cluster, Concurrency::Optimistic)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> RaftNode {
        build(node, setup, recovered)
    }

    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        bound_ms(cluster, coordinator, shards)
    }
}

impl Node for RaftNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            RaftNode::Member(m) => m.on_start(ctx),
            RaftNode::Coordinator(c) => c.on_start(ctx),
            RaftNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            RaftNode::Member(m) => m.on_message(ctx, from, msg),
            RaftNode::Coordinator(c) => c.on_message(ctx, from, msg),
            RaftNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            RaftNode::Member(m) => m.on_timer(ctx, timer),
            RaftNode::Coordinator(c) => c.on_timer(ctx, timer),
            RaftNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            RaftNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            RaftNode::Member(m) => m.server().map_or(Ok(()), Server::check_invariants),
            _ => Ok(()),
        }
    }
}

impl Partition for Server {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;
    type Setup = (Options, Arc<Procedures>);
    type Release = TwoPcRelease;

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

    fn release(&self) -> TwoPcRelease {
        TwoPcRelease::default()
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

/// The release policy of both (see the module doc, *What waits for Raft*).
#[derive(Debug)]
pub struct TwoPcRelease {
    /// The proposal holding this leadership's `Started` record (its first: the takeover's
    /// `on_start` writes it).
    started_seq: u64,
    /// Per key, the latest proposal holding a one-round commit of it.
    local_commit_seq: FxHashMap<Key, u64>,
    /// The keys each transaction's EXECUTE requests named, until its results go out.
    touching: FxHashMap<TxnId, Vec<Key>>,
}

impl Default for TwoPcRelease {
    fn default() -> TwoPcRelease {
        TwoPcRelease {
            started_seq: 1,
            local_commit_seq: FxHashMap::default(),
            touching: FxHashMap::default(),
        }
    }
}

impl Release<Server> for TwoPcRelease {
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
