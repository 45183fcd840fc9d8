//! # `slog`: SLOG (Ren, Li, Abadi, VLDB '19) on DAST's edge deployment (DAST §6)
//!
//! **Guarantee: strict serializability**, checked as `strict-serializable`, with the
//! default `release=txn`. Every transaction is logged before it runs; every shard replica
//! executes its region's log in order through a deterministic lock manager; a shard keeps
//! a transaction's locks until *every* shard of the transaction ran its pieces (strong
//! strict 2PL: the transaction holds all its locks at one instant, its lock point, which
//! lies between its invocation and the client's answer). With `release=pieces`, DAST §6's
//! configuration ("a shard releasing locks once its pieces of a transaction finish"), a
//! multi-shard transaction's pieces run at different times at different shards, and the
//! checker finds real-time cycles: that mode is serializable only (the conformance suite's
//! broken variant; `tests/slog.rs` checks it serializable).
//!
//! ## Deployment (DAST §6)
//! `edge-regions`: every shard lives (3 replicas) in its home region, which is the home of
//! all its keys (SLOG's mastership, fixed here: no remastering). A region's log is a Raft
//! group of the region's edge nodes (its leader is the region's *sequencer*); the global
//! ordering service is a Raft group of 3 `orderer` service nodes (SLOG §3.2 suggests
//! Raft/Paxos with 3 replicas, as DAST §6 ran it), placed in the first region holding
//! shards (`E0` on `edge-regions`; DAST does not say where it put them). A machine's
//! coordinator node is a *port* handing its clients' transactions to the edge node on its
//! machine, which coordinates them, as in `dast`.
//!
//! ## Map: paper → files
//! | SLOG | file |
//! |---|---|
//! | single-home / multi-home classification, routing to the home region's sequencer or the global orderer, results back to the client (§3.1, §3.2) | `coord.rs` |
//! | a region's local log: batches of single-home transactions every `batch_ms`, the lock-only pieces of global batches inserted in global order (§3.1, §3.2) | `edge.rs` |
//! | the global ordering service, its batches sent to every region (§3.2) | `orderer.rs` |
//! | deterministic execution: locks in log order, remote reads between shards, release once the shard's pieces finish (§3.3, Calvin; DAST §6) | `exec.rs`, `locks.rs` |
//! | messages, log commands, records | `wire.rs` |
//!
//! ## Choices the paper left open (or where this differs)
//! * **Partial replication.** SLOG replicates every region's data to every region and
//!   ships each region's log to all of them (the 5 ms "log exchange"). In DAST's
//!   deployment a shard's replicas are all in its home region, so a region's log is needed
//!   only inside it; what crosses regions every `batch_ms` is the global orderer's batches
//!   (to every region, empty where it has no piece) and the remote reads. A region's log is
//!   replicated by Raft among its edge nodes, which is the in-region replication SLOG asks
//!   of a region.
//! * **Lock release.** `release=txn` (default): a shard that ran its pieces tells the
//!   replicas of the transaction's other shards (`Finished`, asked again after
//!   `retry_ms`) and releases once it heard from every one; the client's answer does not
//!   wait for this. Multi-home transactions hold their locks about one cross-region
//!   one-way delay longer than their pieces need, which is what strictness costs here.
//!   `release=pieces` is DAST §6's release.
//! * **Multi-home order.** The global orderer's batch `g` reaches every region; a region
//!   puts batch `g` into its log only after `g - 1` (a buffer of `window` batches ahead),
//!   so all regions log multi-home transactions in the same relative order (SLOG §3.2's
//!   deadlock-freedom and serializability argument). The orderer resends a region's
//!   batches from its last acknowledgement every `retry_ms`; a new orderer leader starts
//!   from the acknowledgements it heard (nothing if it never led), and a region answers a
//!   batch it already has with its frontier.
//! * **Duplicates.** A coordinator resends an order until the sequencer or orderer says it
//!   is logged; the logs skip a transaction already in them, so each runs once. Every
//!   order carries its coordinator's *floor* (its oldest transaction not known to be
//!   logged): a log forgets the keys below it and skips an order below it, a duplicate or
//!   one its coordinator gave up on (`logged.rs`), so what a log remembers follows what is
//!   in flight, not the run (before, every edge node kept every key its region logged).
//! * **Conditional aborts** (a stored procedure's user abort): as in `dast`, a failed
//!   piece discards its shard's writes and its failure reaches the pieces that consume its
//!   outputs; a shard with independent pieces applies them. A workload must make writing
//!   pieces depend on the piece that may abort (TPC-C's new-order does).
//! * **Crashes.** Edge nodes and orderers recover from their Raft logs; a restarted edge
//!   node loads its own latest snapshot (below) and replays its region's log after it,
//!   with the remote inputs it persisted when they arrived, and asks a shard's replicas
//!   for an input it waited on for `retry_ms`. A coordinator's in-flight transactions die
//!   with it (the client hears nothing; the transactions may still run).
//! * **Compaction.** Every edge node holds its whole region's log (a Raft group of the
//!   region's edge nodes), which without compaction grew with the run in memory and on
//!   disk at every node (the growth the `dast-fig2` SLOG point ran out of memory on).
//!   The members of one log replicate *different* shards, so a snapshot serves only the
//!   node that took it (and its shard's other replicas): none is ever sent to another
//!   member (Raft's `MsgSnapshot`). So the sequencer,
//!   once the log holds more than `log_limit` entries, proposes `Compact { safe }` with
//!   `safe` the index every member has persisted and the group committed
//!   (`RaftGroup::durable_everywhere`); each member applying it compacts behind the
//!   snapshot of its own state it took at the previous `Compact` if that is at or below
//!   `safe`, then takes one at this command. A member that is down or behind holds
//!   `safe` back and so stops compaction (the log grows while it is out) rather than
//!   needing another node's state (a member sent one anyway, say after losing its
//!   records, loads it only if it is of its own shard, and reports an invariant violation
//!   otherwise). A snapshot holds the log's bookkeeping and the executor: store, running
//!   transactions (the lock table is rebuilt from them in log order), inputs, and the
//!   latest 4096 finished outcomes.
//! * **Bounds.** The regions' logs are compacted (above) and their duplicate keys follow
//!   the coordinators' floors; what still grows with the run: the global orderer's log and
//!   batches (three nodes, multi-home transactions only), and one small entry per
//!   coordinator incarnation in each log's duplicate keys (a restart is a new one).
//! * **Interactive transactions** are refused (`Unsupported`): SLOG runs one-shot
//!   transactions whose read and write sets are known.
//!
//! ## Options
//! See [`Options`]: `batch_ms`, `tick_ms`, `retry_ms`, `result_timeout_ms`, `window`,
//! `max_inflight`, `outputs_kept`, `log_limit`, `release`, and the **test-only**
//! `unsafe_skip_global_order=true`: multi-home transactions skip the global orderer and go
//! to each of their regions' sequencers, which may then log two of them in opposite
//! orders. With `release=pieces` the checker catches it (`tests/slog.rs`); with
//! `release=txn` two such transactions deadlock instead (each holds the locks the other
//! waits for), which is SLOG's other reason for the global order.

mod coord;
mod edge;
mod exec;
mod locks;
mod logged;
mod options;
mod orderer;
mod wire;

pub use edge::Edge;
pub use options::{Options, Release, OPTIONS};
pub use orderer::Orderer;
pub use wire::{Msg, Record, Timer};

pub(crate) use crate::kit::placement::{region_replicas as region_edges, shard_region};
use crate::raft_group::RaftRecord;
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::{AbortReason, ClientRequest, ClientResponse};
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RegionId, RequestId, ShardId,
};

/// The name of the global ordering service.
pub const ORDERER: &str = "orderer";
/// Members of the global ordering service's Raft group (SLOG §3.2, DAST §6: three).
pub const ORDERERS: usize = 3;

/// SLOG. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Slog;

/// A node of `slog`.
#[derive(Debug)]
pub enum SlogNode {
    Edge(Box<Edge>),
    /// A machine's client-facing coordinator node: hands requests to its edge node.
    Port {
        edge: NodeId,
    },
    Orderer(Box<Orderer>),
    Inert,
}

impl Protocol for Slog {
    type Node = SlogNode;
    type Options = Options;

    const NAME: &'static str = "slog";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    /// Three orderers in the first region that holds shards.
    fn services(cluster: &Cluster) -> Vec<(String, RegionId)> {
        orderer::edge_regions(cluster)
            .first()
            .map(|&r| vec![(ORDERER.to_string(), r); ORDERERS])
            .unwrap_or_default()
    }

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        let options = Options::for_cluster(raw, cluster)?;
        check_regions(cluster)?;
        Ok(options)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> SlogNode {
        let cluster = setup.cluster.clone();
        let opts = setup.options.clone();
        match &cluster.node(node).role {
            NodeRole::Replica { .. } => SlogNode::Edge(Box::new(Edge::restore(
                node,
                cluster.clone(),
                opts,
                setup.procedures.clone(),
                recovered,
            ))),
            NodeRole::Coordinator { .. } => SlogNode::Port {
                edge: crate::kit::placement::port_replica(&cluster, node),
            },
            NodeRole::Service { name, .. } if name == ORDERER => SlogNode::Orderer(Box::new(
                Orderer::restore(node, cluster.clone(), opts, recovered),
            )),
            NodeRole::Service { .. } => SlogNode::Inert,
        }
    }

    /// The round trip to the farthest replica the transaction touches (a multi-home
    /// transaction also crosses to the orderer and back, which this does not count).
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .flat_map(|&s| cluster.replicas(s).iter())
            .map(|&r| cluster.rtt_ms(coordinator, r))
            .fold(0.0, f64::max)
    }
}

/// A shard lives in one region (its home), which is what makes a transaction single-home.
fn check_regions(cluster: &Cluster) -> Result<(), String> {
    for s in 0..cluster.shard_count() {
        let replicas = cluster.replicas(ShardId(s));
        let region = cluster.region_of(replicas[0]);
        if replicas.iter().any(|&r| cluster.region_of(r) != region) {
            return Err(format!(
                "protocol slog runs on DAST's deployment, each shard replicated inside its \
                 home region, but shard {s} of topology {} has replicas in several regions",
                cluster.topology.name
            ));
        }
    }
    Ok(())
}

/// Raft election timeouts by member position: the first member campaigns first, the
/// others each a different, later time (no split votes; `build` has no RNG).
fn election_ticks(position: usize) -> usize {
    if position == 0 {
        8
    } else {
        16 + 4 * position
    }
}

/// Persists a Raft record (a snapshot as a checkpoint: edge nodes compact, `edge.rs`).
fn persist(ctx: &mut Ctx<'_, SlogNode>, record: RaftRecord) {
    if record.is_checkpoint() {
        ctx.checkpoint(Record::Raft(record));
    } else {
        ctx.persist(Record::Raft(record));
    }
}

impl Node for SlogNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            SlogNode::Edge(e) => e.on_start(ctx),
            SlogNode::Orderer(o) => o.on_start(ctx),
            _ => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            SlogNode::Edge(e) => e.on_message(ctx, from, msg),
            SlogNode::Orderer(o) => o.on_message(ctx, from, msg),
            SlogNode::Port { .. } => {
                if let Msg::Done { request, outcome } = msg {
                    ctx.respond(request, ClientResponse::Outcome(outcome));
                }
            }
            SlogNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            SlogNode::Edge(e) => e.on_timer(ctx, timer),
            SlogNode::Orderer(o) => o.on_timer(ctx, timer),
            _ => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match (self, req) {
            (SlogNode::Port { edge }, ClientRequest::OneShot(txn)) => {
                ctx.send(*edge, Msg::Submit { request, txn });
            }
            (SlogNode::Port { .. }, ClientRequest::Interactive(_)) => {
                let reason = AbortReason::Unsupported(
                    "slog runs one-shot transactions with known read and write sets, not \
                     interactive ones"
                        .into(),
                );
                ctx.respond_aborted(request, reason);
            }
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            SlogNode::Edge(e) => e.check_invariants(),
            _ => Ok(()),
        }
    }
}
