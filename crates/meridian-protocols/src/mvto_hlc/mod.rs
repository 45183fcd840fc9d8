//! # `mvto-hlc`: K2's CockroachDB-like baseline (K2 §7.3; CockroachDB, SIGMOD '20)
//!
//! K2 §7.3 re-implements CockroachDB's transaction protocol in its own codebase as
//! "MVTO-HLC": the MVTO workflow with HLC timestamps taken at the start, read refresh to
//! move them, commit timestamps as versions, write pipelining and parallel commits. This
//! module is that baseline on K2's deployment (`topologies/k2-five-regions.toml`): each
//! shard's primary holds the data; coordinators are co-located with the data nodes.
//!
//! **Guarantee: serializability**, plus real-time order between transactions that touch
//! a common key (CockroachDB's "no stale reads", single-key linearizability): checked as
//! `strong-partition-serializable`. It is **not** strict serializability: two transactions
//! on disjoint keys may be ordered against real time when the later one's clock is
//! behind (K2 §2.1: "CockroachDB does not guarantee that the ordering of transactions
//! touching disjoint key sets will match their ordering in real-time"). The real-time
//! part holds only while every clock stays within `max_offset_ms` of every other, as in
//! CockroachDB; the simulator's random clock steps (±1-50 ms, accumulating) stay far
//! below the 500 ms default.
//!
//! Why it holds. Serializability: each transaction commits at one timestamp `C`; every
//! read was at, or refreshed to, `C` (a refresh checks that no other transaction wrote the
//! key in between and marks the timestamp cache at `C`); every write is an intent at or
//! below `C` that keeps other writers off the key until resolved at `C`; the timestamp
//! cache pushes every later write above every read. So the commit-timestamp order is a
//! serial order. Real time on a common key: a timestamp is never more than the maximum
//! offset above true time, so a transaction that starts after another committed either
//! has a larger timestamp or finds the other's value (or intent) in its uncertainty
//! interval and moves above it; a writer after a reader is pushed above the reader's
//! cached read.
//!
//! ## Map from the papers to the files
//! | concept | file |
//! |---|---|
//! | HLC (K2 §2.1; CockroachDB) | `kit/hlc.rs`; coordinators take the start timestamp, every node takes received ones (`observe`) |
//! | multi-version storage, write intents, timestamp cache (CockroachDB) | `store.rs` |
//! | evaluation at a primary: reads at the read timestamp, intents at the write timestamp pushed above cached reads and newer versions (CockroachDB) | `primary.rs` (`attempt`, `evaluate`) |
//! | uncertainty interval `[ts, ts + max_offset]`, restart above an uncertain value (CockroachDB) | `primary.rs` (`attempt`: `EvalOutcome::Retry`), `coordinator.rs` (`bump`) |
//! | a request meeting an intent waits and pushes the intent's transaction (CockroachDB) | `primary.rs` (`run`, `push`), `anchor.rs` (`on_push`) |
//! | read refresh (K2 §6.1 and §7.3; CockroachDB) | `coordinator.rs` (`start_refresh`, `on_refreshed`), `primary.rs` (`on_refresh`) |
//! | write pipelining (K2 §7.3; CockroachDB) | `coordinator.rs` (`on_step`: a write is answered when sent; `dispatch` chains a later read or write of the same key behind it) |
//! | parallel commits: STAGING record, implicit commit, asynchronous resolution, status recovery (K2 §7.3; CockroachDB) | `coordinator.rs` (`try_commit`), `anchor.rs` |
//! | transaction records and intent resolution | `anchor.rs` (`decide`, `resolve_participants`), `primary.rs` (`on_resolve`) |
//!
//! ## Message flow
//! ```text
//! client ─Begin→ coordinator: orig = HLC.now(); read_ts = write_ts = orig
//! ─Eval(piece, read_ts, write_ts, limit)→ primary: wait/push on foreign intents;
//!     Retry{at} on a value in (read_ts, limit] (or newer than read_ts on a key it writes);
//!     mark reads in the timestamp cache; lay intents at max(write_ts, cache+, newest+)
//!   ─Evaluated{result, write_ts}→ (writes: the client heard "written" when it was sent)
//! commit: C = max write ts; C > read_ts ⇒ Refresh(reads, read_ts → C) at every read shard
//!   ─Stage(C, every write)→ anchor (in parallel with the last writes)
//!   Staged(C) + every write acked ≤ C ⇒ client hears Committed(C)
//!   ─Commit(C)→ anchor: COMMITTED ─Resolve→ participants (intents → versions at C)
//! ```
//!
//! ## Choices the papers left open
//! * **Deployment**: K2 §7.3 keeps its own replication for both baselines; here, as for
//!   `k2` and `p2pl-ttc`, a shard's data lives on its primary (a `voter` in its home
//!   region); the asynchronous read replicas are idle unless `replica_reads=closedts`
//!   (below). A crashed primary restarts in place from
//!   its log (intents, resolutions, records and the timestamp-cache floor are persisted
//!   before anything depending on them is sent), like `k2`'s.
//! * **Conflicts between writers**: wound-wait on start timestamps (CockroachDB uses
//!   priorities and a distributed deadlock detector). A request meeting an intent pushes
//!   its transaction's anchor: an older pusher aborts a holder that has no record yet; a
//!   STAGING holder cannot be aborted and is waited for (recovered when it stays
//!   staging). Any wait ends after `lock_wait_ms`, which breaks what wound-wait leaves
//!   (a staging transaction's last write waiting behind an older one).
//! * **Readers meeting intents** wait for intents at or below their uncertainty limit
//!   (CockroachDB's readers may instead push the writer's timestamp; not done here).
//! * **Timestamp moves**: a `Retry` (uncertain value, or a newer version under a
//!   read-modify-write, CockroachDB's `WriteTooOld`) moves both timestamps to the
//!   value's after a refresh of the reads so far, then resends the piece; a pushed write
//!   only moves the write timestamp, and the reads are refreshed once, at commit. A
//!   refresh waits for the transaction's reads in flight so it covers them. At most
//!   `max_refreshes` moves, then the transaction aborts.
//! * **Read-modify-writes** (`add`, `append`, interactive `Modify`) read the newest
//!   version and need no refresh of their own key: their intent has kept the key since.
//! * **Anchor** (the transaction record's home): the primary of the first written shard;
//!   read-only transactions have none and commit at their read timestamp.
//! * **Records of transactions that never staged** are not written until decided: an
//!   anchor aborts such a transaction when wounded or when it is older than
//!   `2 × txn_timeout` (its coordinator gave up by then), and refuses to stage one that
//!   old, so records can be forgotten after twice that age without a late STAGING
//!   reviving one. CockroachDB uses heartbeats instead; see "Transaction heartbeats".
//! * **Status recovery** starts when a record has been STAGING for `recovery_after_ms`
//!   (or at once when the coordinator itself aborts after staging: only recovery knows
//!   whether the transaction is implicitly committed). A participant that does not hold a
//!   staged write at or below the staged timestamp (with the staged step) prevents it by
//!   moving the key's timestamp cache there, as CockroachDB's `QueryIntent`.
//! * **Timestamp-cache recovery**: the cache is not logged per read; a primary reserves a
//!   floor `read_floor_ms` ahead in its log, and after a restart every key's cache starts
//!   at that floor (K2's read floor, same reason).
//! * **HLC**: every received timestamp further ahead than `max_offset_ms` is counted
//!   (`mvto_hlc.hlc_too_far_ahead`) and not taken; CockroachDB would stop the node.
//!
//! ## Transaction heartbeats (CockroachDB) — not sent; the age bound stands in for them
//! CockroachDB's coordinator heartbeats its transaction record (every 1 s) and a pusher
//! aborts a PENDING transaction whose last heartbeat is older than the liveness threshold
//! (5 s): that is how a dead coordinator's intents are cleared while a live, long
//! transaction keeps them. Here a transaction's life is bounded instead: its coordinator
//! gives up `txn_timeout` (2 s by default on `k2-five-regions`) after the start, and an
//! anchor refuses to stage a transaction older than `2 × txn_timeout`. So the anchor can
//! tell liveness from the start timestamp alone: a pusher (`anchor.rs`, `on_push`) aborts
//! a record-less transaction older than `2 × txn_timeout` (`too_old`), which is exactly
//! "its heartbeat expired" for a heartbeat that a live coordinator would keep sending
//! until `txn_timeout` and that expires `txn_timeout` later. The margin covers the start
//! timestamp's clock (the coordinator's HLC against the anchor's clock): it errs by at
//! most `max_offset` (500 ms), below `txn_timeout`. Compared with CockroachDB's defaults:
//! * **Safety is the same**: both abort only a transaction that has no STAGING record
//!   (a staged one goes through status recovery in both), and the coordinator of an
//!   aborted one learns it at its next write or at staging (refused); no live coordinator
//!   is aborted by age, since it gave up before it.
//! * **A dead coordinator's intents clear no later**: CockroachDB aborts at the last
//!   heartbeat + 5 s, i.e. at least 5 s after the start; here at the start +
//!   `2 × txn_timeout` = 4 s, even with no pusher: each primary pushes (wounding) the
//!   intents it holds of transactions past that age (`primary.rs`, `sweep_stale`). An
//!   older pusher wounds at once in both.
//! * **What is given up**: transactions longer than `txn_timeout`, which CockroachDB's
//!   heartbeats would let live, and a shorter clearing time than the age bound (a
//!   heartbeat expiry under a second). Neither is exercised by the K2 workloads (a
//!   transaction is a few WAN round trips), and no heartbeat traffic is spent.
//!
//! ## ClosedTS replica reads (`replica_reads=closedts`; K2 §6.1, §7.4)
//! K2 §7.4's "ClosedTS" baseline, CockroachDB's closed timestamps and follower reads:
//! `closed.rs` (a primary closes, replicates, serves), `follower.rs` (a read replica),
//! `coordinator.rs` (`eval_msg`: where a follower read goes).
//! * **Closing**: every `closed_ts_interval_ms` (100, K2-VCR's default epoch: §7.4 sets
//!   the interval to the epoch length) a primary closes `HLC.now − closed_ts_lag_ms`
//!   (lag 0: §6.1's closed timestamp advances to the present at each interval;
//!   CockroachDB targets 3 s). It raises its timestamp-cache floor there (reserved in the
//!   log first), so every later write lands above the closed timestamp: pushed, refreshed
//!   at commit, aborted when the refresh fails (`mvto_hlc.refresh_failed`) — §6.1's
//!   Limitation, the abort rate of Fig. 23b.
//! * **Replication**: a replica pulls; the primary answers at its next closing with the
//!   versions committed since, every intent it holds (key and timestamp) and the closed
//!   timestamp. Intents ship as markers, not values: a follower read meeting one at or
//!   below its timestamp waits for the resolution (§6.1: an undetermined key blocks only
//!   its readers), which arrives with a later closing.
//! * **Follower reads**: read-only one-shot transactions (interactive ones cannot be told
//!   read-only up front) read every piece at the nearest copy of its shard, the primary
//!   included, at the top of their uncertainty interval (`HLC.now + max_offset`); a copy
//!   serves once its closed timestamp covers that and no intent at or below it is on a
//!   key read. A resend goes to the next nearest copy.
//! * **What they promise**: the protocol's own level, strong partition serializability,
//!   together with the primaries' history (checked so by `mvto_hlc_closedts` in the
//!   conformance suite). A transaction that committed before the read began has a commit
//!   timestamp at most `max_offset` above the reader's clock, so below the read; one that
//!   commits on a key the read touched after the read was served lands above the closed
//!   timestamp, so above the read. Not strict serializability, as for the primaries.
//! * **Visibility delay** (K2 §7.4): per replayed version, from the intent's resolution
//!   at the primary to the moment the replica's closed timestamp covers it (two nodes'
//!   clocks): `mvto_hlc.visibility_delay_us_sum / mvto_hlc.visible_versions` is the mean,
//!   `mvto_hlc.visibility_delay_le_*ms` the histogram (`kit::replica_reads`, counted as
//!   K2-VCR counts). A replica's catch-up from a full snapshot is not counted.
//! * **Restarts**: a replica keeps nothing and pulls a full snapshot; a restarted primary
//!   starts a new stream (its replicas take a full snapshot) and closes from its clock
//!   again; a replica's closed timestamp never moves back, which is safe because the
//!   recovered floor keeps every new write above what was closed before.
//!
//! ## Options
//! See [`Options`]. The test-only `unsafe_skip_read_refresh=true` moves a transaction's
//! timestamp without refreshing its reads, which the conformance suite shows the checker
//! catching. The test-only `unsafe_serve_above_closed=true` serves follower reads at once,
//! whatever the closed timestamp, which the conformance suite shows the checker catching
//! (a replica behind its primary answers stale).

mod anchor;
mod closed;
mod coordinator;
mod follower;
mod options;
mod primary;
mod store;
mod wire;

#[cfg(test)]
mod tests;

pub use coordinator::Coordinator;
pub use follower::Follower;
pub use options::{Options, ReplicaReads, OPTIONS};
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
    /// A read replica serving ClosedTS follower reads (`replica_reads=closedts`).
    Follower(Box<Follower>),
    /// Read replicas without ClosedTS, and services this protocol does not run.
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
            NodeRole::Replica { shard, .. } if opts.closed_ts() => {
                let primary = cluster.initial_leader(*shard);
                let procedures = setup.procedures.clone();
                MvtoNode::Follower(Box::new(Follower::new(primary, opts, procedures)))
            }
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
            MvtoNode::Follower(f) => f.on_start(ctx),
            MvtoNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            MvtoNode::Primary(p) => p.on_message(ctx, from, msg),
            MvtoNode::Coordinator(c) => c.on_message(ctx, msg),
            MvtoNode::Follower(f) => f.on_message(ctx, from, msg),
            MvtoNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            MvtoNode::Primary(p) => p.on_timer(ctx, timer),
            MvtoNode::Coordinator(c) => c.on_timer(ctx, timer),
            MvtoNode::Follower(f) => f.on_timer(ctx, timer),
            MvtoNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
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
