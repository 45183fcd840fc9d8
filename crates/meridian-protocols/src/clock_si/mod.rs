//! # `clock-si` and `conventional-si`: snapshot isolation for partitioned stores
//!
//! **Guarantee: snapshot isolation** (checker model `snapshot-isolation`). Every
//! transaction reads the consistent snapshot named by its snapshot timestamp; update
//! transactions commit in the total order of their commit timestamps; of two concurrent
//! transactions that write a common key, at most one commits (first committer wins). Write
//! skew is allowed, as SI allows it. Both protocols also give §III-E's session consistency:
//! a client's next snapshot is at or above the last commit (or snapshot) timestamp it saw.
//!
//! `clock-si` is Clock-SI (Du, Elnikety, Zwaenepoel, SRDS 2013; `papers/clock-si.md`):
//! timestamps come from loosely synchronized local clocks. `conventional-si` is the baseline
//! the paper measures against: the same store, certification, 2PC and code, except that
//! the snapshot and commit timestamps come from one centralized timestamp oracle.
//!
//! ## Files and the paper
//! * `coordinator.rs` — Algorithm 1 lines 1–3 (snapshot = clock − Δ, §III-C), §III-E's
//!   session consistency (LatestTime), Algorithm 1 line 5 (read your own buffered
//!   writes), Algorithm 2 lines 1–4 and 11–22 (commit: read-only without a round, local
//!   commit, 2PC coordinator with commit ts = max prepare ts), answering partitions' queries
//!   for a prepared transaction's commit timestamp (Algorithm 1 lines 14–15) and recovery
//!   queries (§III-E, presumed abort).
//! * `server.rs` — Algorithm 1 lines 4–22 (the prepared-version delay and the clock-skew
//!   delay, also applied to updates), Algorithm 2 lines 5–10 (local commit) and 23–31
//!   (participant), first-committer-wins certification (§II-B), §III-E's write-ahead log
//!   (prepare records with the coordinator id, commit records with the write set for local
//!   commits), checkpoints and recovery.
//! * `oracle.rs` — conventional SI's timestamp authority (§I, §V-A).
//! * `replicated.rs` — not in the paper: a partition as a Raft group (see below).
//! * `model.rs` — §IV's analytical model; `counters.rs` — what the protocol counts.
//! * `options.rs` — `delta_ms` (Δ, with §III-C's `auto` and `measured` rules) and the timeouts.
//! * `wire.rs` — messages, timers, records.
//!
//! ## Roles and placement (faithful mode)
//! One server per partition (§II-A): a shard's data lives on its *initial leader*; its
//! other replicas are inert (see *Replicated mode* for the alternative). Coordinators host
//! clients' interactive sessions. The oracle of `conventional-si` is a service node
//! (`ts-oracle0`) in the topology's **first region** (`Protocol::services` is given the
//! cluster but not the options, so the region is not an option; on `gcp-tiga` that is SC,
//! beside every shard's data).
//!
//! ## Choices the paper leaves open
//! * **Whose clock is the "originating partition's"?** The paper's client talks to one
//!   partition that executes its operations and reads its snapshot time from its clock.
//!   Here the client talks to a coordinator in its own region, and the coordinator plays
//!   that role: **the snapshot timestamp is read from the coordinator's local clock**.
//!   Forwarding Begin to a partition would cost a wide-area round trip for clients in a
//!   region without data (HK on `gcp-tiga`), which is exactly the round trip Clock-SI
//!   exists to save, and correctness does not depend on which clock is used: every
//!   partition delays a request until its own clock passes the snapshot (lines 19–22), and
//!   commit timestamps come from the partitions' clocks. The coordinator also runs the 2PC
//!   (the paper's "coordinator runs at the originating partition").
//! * **Session consistency without blocking.** §III-E blocks Begin until the clock passes
//!   LatestTime; we instead take snapshot = max(clock − Δ, LatestTime + 1 ns). The
//!   partitions' clock-skew delay then makes the snapshot available, as it does for any
//!   snapshot from a clock that is ahead. A read-only transaction's commit timestamp (in
//!   the outcome) is its snapshot timestamp, so LatestTime never goes down.
//! * **Timestamps.** `Timestamp { time_ns, tiebreak }`: snapshots use tiebreak 0, prepare
//!   and local-commit timestamps the partition's node id + 1 (§III-D: ties broken by
//!   partition id), so a snapshot never equals a version's timestamp, and a version at
//!   commit ts `c` is visible to snapshot `s` iff `c < s`.
//! * **Monotone partition clocks.** The paper assumes clocks never go back; the simulator's
//!   clocks step (both ways) and restart. Each partition keeps a *floor*: every timestamp
//!   it issues is above it and every snapshot it served is at or below it, so a served
//!   snapshot can never be invalidated by a later commit below it. The floor survives a
//!   crash through `ClockLease` records (one per second of timestamps). A snapshot at or
//!   below the floor needs no clock wait. The oracle keeps the same kind of lease.
//! * **Committing state.** A local commit (Algorithm 2 lines 7–10) happens inside one
//!   handler — the record is appended and the versions installed atomically — so no read
//!   ever observes the *committing* state of lines 6–10; a distributed transaction's
//!   committing window is its prepared (pending) version, which readers with a snapshot at
//!   or above the prepare timestamp wait for (lines 11–17). Versions are created at the
//!   prepare timestamp and moved to the commit timestamp (footnote 1, `MvStore::commit_at`).
//! * **Asking for the commit timestamp** (line 15): a partition holding a read behind a
//!   prepared version sends `Query` to that transaction's coordinator; the answer is the
//!   `Commit` (or `Abort`) message itself, which resolves the version there and wakes the
//!   read. So the read learns the commit timestamp and the version is visible at once.
//! * **Certification** is first-committer-wins at each updated partition: a written key
//!   with a committed version newer than the snapshot, or with another transaction's
//!   prepared version, makes the partition refuse (`AbortReason::Conflict`). Refusing on a
//!   prepared version is conservative (it might abort), never unsafe.
//! * **Which transactions are local.** "Updates a single partition" is judged on the write
//!   set; reads may have gone to several partitions (they leave no state). A read-only
//!   transaction sends nothing at commit.
//! * **Conventional SI's commit** always prepares first, even on one partition, then asks
//!   the oracle for the commit timestamp (Percolator-style): a reader whose snapshot the
//!   oracle issued after that commit timestamp must find the prepared version and wait. A
//!   pending version sits just above its transaction's snapshot (its commit ts, drawn
//!   later, is larger), and conventional partitions never wait for clocks.
//! * **Failures.** Every request is retransmitted every `retry_ms`, at most `max_retries`
//!   times; then the session aborts (`Timeout`) — or, for a local commit whose answer never
//!   came, reports `Unknown`. A decided commit is retransmitted until acknowledged (it is
//!   logged first; a restarted coordinator re-sends it). A prepared partition asks the
//!   coordinator every `query_ms`; presumed abort answers for any transaction the
//!   coordinator has neither decided nor is still preparing (e.g. lost in its crash). A
//!   restarted coordinator takes a new incarnation (new transaction ids) and answers steps
//!   of sessions it no longer knows with `Aborted{Failure}` — they never committed. Finished
//!   transactions are remembered at partitions for ≥ 30 s to answer duplicates; a duplicate
//!   arriving later is refused by certification (its own committed version is newer than
//!   its snapshot). An ABORT that overtakes its PREPARE pins the abort.
//! * **GC and checkpoints.** Partitions garbage-collect versions older than their clock
//!   minus `gc_lag_ms`, but never past a prepared transaction's prepare timestamp (its
//!   coordinator may be cut off for longer); a read with an older snapshot aborts
//!   (`Failure`). Every
//!   `checkpoint_every` records a node checkpoints its whole state (committed versions,
//!   prepared transactions, finished outcomes, clock floor), which bounds its log.
//! * **One-shot requests** (`ClientRequest::OneShot`) run as a session at the
//!   coordinator: a snapshot as for Begin, one parallel round of reads of every key the
//!   pieces declare they read (all at the snapshot, so it is the same as reading them one
//!   by one), the pieces executed at the coordinator on those values with
//!   `execute_piece` (value dependencies and stored procedures included), then the write
//!   set commits exactly like an interactive transaction's. A piece's abort aborts the
//!   transaction; a procedure reading an undeclared key aborts it as `Invalid`.
//! * The WAN setup of §V is the bundled topology `clock-si-wan`; its replicated variant is
//!   `topologies/clock-si-wan-replicated.toml`.
//!
//! ## Replicated mode (`replicated=true`; not in the paper)
//! The paper has one server per partition (the faithful mode, the default). With
//! `replicated=true` every replica of a shard is a member of the partition's Raft group
//! (`crate::raft_group`, the `raft` crate) and the partition survives the loss of a
//! minority of its replicas — a whole region, when they sit in three. `replicated.rs`: the
//! unchanged [`Server`] runs on the leader; its write-ahead records become Raft commands;
//! what it sends after a record waits until the record is committed in the group (a read
//! reply waits only for the clock lease covering its snapshot and a local commit of its
//! key); a new leader rebuilds the server from the committed records after its barrier
//! command is applied, exactly as a restarted partition does, and asks coordinators about
//! prepared transactions. Clock leases are records, so timestamps stay monotone across
//! leaders; in this mode a lease reaches `clock_lease_ns` = 8 × the largest RTT ahead and is
//! renewed half-way, so renewals are durable before reads need them. Non-leaders answer
//! `NotLeader` with a hint; coordinators route by shard, follow hints and, when the
//! replica believed to lead a partition has answered nothing for a retry period, try its
//! next replica (not on every retry tick: a step that merely outlives one retry period
//! must not turn a coordinator away from a leader that is answering). Coordinators and the oracle are
//! not replicated (a coordinator shares its client's fate; the oracle is the baseline's
//! single authority). Raft ticks are a quarter of the group's largest RTT; the placed
//! leader campaigns after 8 ticks, the others after 16 + 4 × their position.
//!
//! **What it costs** (`clock-si-wan` faithful vs `clock-si-wan-replicated` with
//! `replicated=true`, `list-append` interactive, 20 s, seed 1, p50 per client region
//! USW / USE / EU in ms): read-only transactions (1 get) cost nothing: 63.0 / 62.9 / 76.7
//! faithful, 62.9 / 62.9 / 76.8 replicated. Update transactions pay one round trip from
//! the partition leader to its nearest follower for the prepare (or local commit) record:
//! 1 append 125.9 / 125.8 / 153.8 → 188.9 / 188.8 / 217.0 (+63 ms); 4 mixed ops
//! 254.4 / 154.4 / 281.6 → 318.0 / 216.3 / 321.1. Prepared versions also stay pending one
//! replication longer, so readers behind them wait longer. In return, with US West cut off
//! from 5 s on, US East and Europe clients commit 633 transactions in the run (one
//! takeover per lost leader), against 255 in faithful mode, whose partition in US West is
//! simply gone. On `gcp-tiga` (every placed leader in SC) with SC cut off from 3 s,
//! clients outside SC commit 381 transactions replicated against 46 faithful (test
//! `replicated_partitions_survive_a_region_failure`). Transactions whose coordinator is in
//! the lost region stay prepared until it returns (2PC blocks; coordinators are not
//! replicated), and readers and writers of their keys wait or abort meanwhile.
//!
//! ## The analytical model (§IV) and what the protocol counts
//! `model.rs` is §IV as pure functions (delay probability and duration behind pending
//! commits and behind clock skew, abort probability with a Δ-old snapshot). The protocol
//! counts what it does through `Context::count` (names in `counters.rs`): partitions count
//! reads held back and for how long, by cause; coordinators count transactions with a
//! held-back read and how long they waited (a read reply carries the partition's wait).
//! `cargo run --release -p meridian-protocols --example clock_si_model` prints Figs. 9–12
//! with both. Measured with `--seeds 3 --duration-s 2` (LAN, RTT 1 ms, R = W = 3, 64
//! clients, perfect clocks; see the example's doc) the shapes are the paper's: the delay
//! probability falls as 1/DBSize (4.9% at 3,000 items, 0.056% at 300,000; model 3.1% and
//! 0.036%); Δ shrinks delay probability and duration to zero once Δ ≥ CW = RRD (S = 0 in
//! the simulator): at DBSize 6,000, 2.56% / 0.31 ms at Δ = 0, 0.53% / 0.09 ms at 0.5 ms,
//! none from 1 ms (model 1.66% / 0.5 ms, 0.41% / 0.25 ms, 0); the abort rate grows
//! linearly with Δ, 6.6% → 11.7% from Δ = 0 to 1.5 ms (model 9.0% → 14.0%, its upper
//! bound). The model is within a factor of two on the delay probability for Δ < 0.75 ms
//! and overestimates durations 1.6–3×: it measures the window from the snapshot, while a
//! read reaches its partition RRD/2 later (shorter waits), and it ignores that 2PC waits for
//! the slowest vote (longer windows, more delays).
//!
//! ## Options (`ProtocolConfig`)
//! `delta_ms` (a number, default 0, `auto`, or `measured`: §III-C's rule with its terms
//! measured by the kit's one-way-delay estimator from the coordinator's reads),
//! `replicated` (false), `raft_log_limit` (1024 entries; replicated mode compacts each
//! partition's Raft log behind a snapshot past it, 0 = never), `retry_ms`, `max_retries`,
//! `query_ms`, `session_idle_ms`, `gc_lag_ms`, `checkpoint_every` (see [`Options`]).
//! Two-phase commit's coordinator side and the vote count are the kit's
//! ([`crate::kit::two_pc`], [`crate::kit::quorum`]), shared with `2pl-2pc`.

mod coordinator;
mod options;
mod oracle;
mod replicated;
mod server;
mod wire;

#[cfg(test)]
mod tests;

pub mod counters;
pub mod model;

pub use coordinator::Coordinator;
pub use options::{Delta, Options, OPTIONS};
pub use oracle::Oracle;
pub use replicated::Member;
pub use server::Server;
pub use wire::{Finished, Msg, PreparedTxn, Record, ServerSnapshot, Timer, TsPurpose};

use meridian_core::node::{Ctx, RunSummary, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RegionId, RequestId, ShardId,
};
use std::collections::BTreeMap;

/// The service name of conventional SI's timestamp oracle.
pub const ORACLE_SERVICE: &str = "ts-oracle";

/// Clock-SI. Implements [`Protocol`] as `clock-si`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockSi;

/// Conventional SI with a centralized timestamp oracle. Implements [`Protocol`] as
/// `conventional-si`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConventionalSi;

/// A node of `clock-si` or `conventional-si`.
#[derive(Debug)]
pub enum SiNode {
    Server(Box<Server>),
    Coordinator(Box<Coordinator>),
    Oracle(Oracle),
    /// Replicated mode: a member of a partition's Raft group.
    Member(Box<Member>),
    /// Faithful mode: a replica that is not its shard's initial leader.
    Inert,
}

fn build<P: Protocol<Options = Options>>(
    node: NodeId,
    setup: &Setup<P>,
    recovered: &[Record],
    conventional: bool,
) -> SiNode {
    let cluster = &setup.cluster;
    let opts = setup.options.clone();
    match &cluster.node(node).role {
        NodeRole::Replica { shard, .. } if opts.replicated => {
            let limit = opts.raft_log_limit;
            let setup = (opts, !conventional);
            SiNode::Member(Box::new(Member::restore(
                node, *shard, cluster, setup, limit, recovered,
            )))
        }
        NodeRole::Replica { shard, .. } if cluster.initial_leader(*shard) == node => {
            SiNode::Server(Box::new(Server::restore(
                node,
                opts,
                !conventional,
                recovered,
            )))
        }
        NodeRole::Coordinator { .. } => {
            let oracle = conventional.then(|| {
                *cluster
                    .services(ORACLE_SERVICE)
                    .first()
                    .expect("conventional-si places an oracle")
            });
            SiNode::Coordinator(Box::new(Coordinator::restore(
                node,
                opts,
                cluster.clone(),
                setup.procedures.clone(),
                oracle,
                recovered,
            )))
        }
        NodeRole::Service { name, .. } if name == ORACLE_SERVICE => {
            SiNode::Oracle(Oracle::restore(recovered))
        }
        _ => SiNode::Inert,
    }
}

/// The largest round trip from the coordinator to the data node of an involved shard: a
/// transaction that reads a shard needs at least that.
fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
    shards
        .iter()
        .map(|&s| cluster.rtt_ms(coordinator, cluster.initial_leader(s)))
        .fold(0.0, f64::max)
}

impl Protocol for ClockSi {
    type Node = SiNode;
    type Options = Options;

    const NAME: &'static str = "clock-si";
    const GUARANTEE: &'static str = "snapshot-isolation";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::for_cluster(raw, cluster)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> SiNode {
        build(node, setup, recovered, false)
    }

    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        bound_ms(cluster, coordinator, shards)
    }

    /// The §IV model ([`model`]) for a MicroBench run, its Δ the one the first
    /// coordinator's transactions used.
    fn predict(run: &RunSummary<'_>, options: &Options) -> BTreeMap<String, f64> {
        let delta_ns = options.delta_for(run.cluster, run.cluster.coordinators[0]);
        model::microbench_params(run, delta_ns as f64 / 1e6)
            .map(|params| model::predictions(&params))
            .unwrap_or_default()
    }
}

impl Protocol for ConventionalSi {
    type Node = SiNode;
    type Options = Options;

    const NAME: &'static str = "conventional-si";
    const GUARANTEE: &'static str = "snapshot-isolation";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    /// One timestamp oracle, in the first region.
    fn services(_cluster: &Cluster) -> Vec<(String, RegionId)> {
        vec![(ORACLE_SERVICE.to_string(), RegionId(0))]
    }

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::for_cluster(raw, cluster)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> SiNode {
        build(node, setup, recovered, true)
    }

    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        bound_ms(cluster, coordinator, shards)
    }
}

impl Node for SiNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            SiNode::Server(s) => s.on_start(ctx),
            SiNode::Coordinator(c) => c.on_start(ctx),
            SiNode::Member(m) => m.on_start(ctx),
            SiNode::Oracle(_) | SiNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            SiNode::Server(s) => s.on_message(ctx, from, msg),
            SiNode::Coordinator(c) => c.on_message(ctx, from, msg),
            SiNode::Oracle(o) => o.on_message(ctx, from, msg),
            SiNode::Member(m) => m.on_message(ctx, from, msg),
            SiNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            SiNode::Server(s) => s.on_timer(ctx, timer),
            SiNode::Coordinator(c) => c.on_timer(ctx, timer),
            SiNode::Member(m) => m.on_timer(ctx, timer),
            SiNode::Oracle(_) | SiNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            SiNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }
}
