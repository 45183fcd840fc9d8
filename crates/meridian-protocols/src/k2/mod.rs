//! # `k2`: K2 — TTC Oracle, K2-TB timestamps, K2-MVTO (paper: `shared/papers/k2.md`)
//!
//! **Guarantee: strict serializability** of the transactions run at the primaries
//! (read-write and read-only). Every transaction takes one start timestamp from K2-TB;
//! the timestamp lies within the transaction's lifetime (Property 4.1: above the true time
//! of its start by construction of the batch, below the true time of its end by the commit
//! wait), and K2-MVTO serializes transactions in timestamp order (Invariant 5.1); together,
//! the serial order respects real time.
//!
//! **Replica reads (K2-VCR, §6) are off by default** (`replica_reads=off`: §7.1 runs every
//! transaction at the primaries unless stated otherwise). With `replica_reads=linearizable`
//! the guarantee covers the replica reads too; with `replica_reads=snapshot` they are
//! serializable (see "K2-VCR: what is checked"). The default stays `off` although the
//! paper's K2 can read at replicas: its evaluation runs every transaction at the
//! primaries unless a figure says otherwise (§7.1, only §7.4 uses replicas), and so do
//! the figures this repository reproduces.
//!
//! ## Map from the paper to the files
//! | paper | file |
//! |---|---|
//! | §2.2 TTC Oracle (PTP servers within ε of true time) | `oracle.rs`; the clock is the `ttc` profile of `topologies/k2-five-regions.toml` (`truetime = true` in the simulator's clock model: drift 200 ppm, calibration every 1/16 s, ε = 100 µs) |
//! | §4.2 strawman, §4.3-4.4 K2-TB (Figs. 5-6), commit wait | `batch.rs` (`TsSource`), `coordinator.rs` (`acquire_ts`, `Timer::CommitWait`), `options.rs` (`commit_wait_ns`) |
//! | §5.1-5.2 K2-MVTO: RT, write streams (Figs. 8, 10) | `write_stream.rs`, `data_node.rs` |
//! | §5.2 recorders, PUSHWS, asynchronous finalization | `recorder.rs`, `data_node.rs` (`push`, `on_resolve`) |
//! | Fig. 9 coordinator (one-shot and interactive) | `coordinator.rs` |
//! | §5.3 fault tolerance and recovery | `data_node.rs` (`restore`), `recorder.rs` |
//! | Fig. 19's optimizations | `options.rs`: `mv_reads`, `mv_writes`, `async_finalize` |
//! | §6.3 epoch cuts on TTC (Fig. 12, Property 6.1) | `epoch.rs` |
//! | §6.3 collaborative epoch assignment (Fig. 13; Fig. 10 lines 10, 16, 18-19), and the epoch order it needs (below) | `data_node.rs` (`proposal_after_reads`, `write_proposal`, `on_validate`), `coordinator.rs` (`epoch` of `CoordTxn`, `finish_execution`), `recorder.rs` (`on_end`) |
//! | §6.2 asynchronous replication, replay in epoch order | `data_node.rs` (`complete_epoch`, `replicate`), `replica.rs` |
//! | §6.4 linearizable and snapshot reads at replicas (Fig. 9 lines 8-21, Fig. 10 lines 23-28) | `coordinator.rs` (`read_view`, `Route`), `replica.rs` (`ReadQueue`, `run_read`) |
//!
//! ## Roles and deployment
//! * **Oracles**: the `oracle` service, placed by the topology (`[[services]] name = "oracle"`,
//!   two per region on `k2-five-regions`) or, by default, one per region. A coordinator
//!   asks the nearest and moves on to the next nearest when a request goes unanswered.
//! * **Primaries** (a shard's initial leader, a `voter`) run K2-MVTO and host a recorder.
//! * **Read replicas** replay their shard's epochs and serve read-only pieces (K2-VCR);
//!   with `replica_reads=off` they stay idle.
//! * **Coordinators** (co-located with data nodes on `k2-five-regions`).
//!
//! ## Message flow
//! ```text
//! coordinator ─GetTs→ oracle ─OracleTs(T_high)→   (only when the batch has expired)
//! coordinator ─Execute(piece, ts, recorder)→ primary: RT ← max(RT, ts) for reads;
//!     other intents below ts on a read key → Push → recorder (held until decided) → Resolve;
//!     a write below RT → Executed(Err Conflict); else run, add intents, persist → Executed
//! coordinator ─Commit(participants)→ recorder: persist Decided → Decision → client (after
//!     the commit wait); recorder ─Resolve(ack)→ participants ─Finalized→ recorder (async)
//! ```
//!
//! ## Choices the paper left open
//! * **Timestamps are unique** as `⟨time, oracle id, coordinator tag⟩` (tag = node id and
//!   incarnation) and strictly increase per coordinator: batches from one oracle may
//!   overlap (§4.3 only pairs timestamps with the oracle id), and a start timestamp is the
//!   transaction's identity and version here.
//! * **TTL expiry** is checked both on the local clock (elapsed reading within
//!   `TTL·(1−D)`) and by a TTL timer; a transaction that arrived while a request was within
//!   its TTL may take from its reply even if the reply arrives later (the proof of §4.4
//!   only needs the start before `T_batch_start + TTL`).
//! * **Commit wait** starts when the timestamp is taken and is a timer (timers measure true
//!   durations; a stepped clock cannot shorten it). Read-only transactions wait too
//!   (Property 4.1 is for every transaction).
//! * **Read tracking before the push**: a read raises RT when it arrives, before waiting on
//!   undetermined intents, so no writer can slip below a waiting reader; a piece is run
//!   whole once nothing below it is undetermined on its read keys.
//! * **Recorder placement**: the primary of the first shard a transaction writes (one-shot:
//!   its first writing piece; interactive: its first `Put`). Read-only transactions have
//!   none. In-progress status is volatile; decisions are persisted before anyone hears
//!   them. A transaction with no decision `txn_timeout` after its timestamp is aborted
//!   (its coordinator gives up then too: §5.3's failed coordinator), and a commit of one
//!   that old is refused, which lets aborted decisions be forgotten after `2 × txn_timeout`.
//! * **Durability** (§5.1's shared storage): each primary's log holds its intents (on
//!   creation), finalizations, recorder decisions and acknowledgements, and a *read floor*
//!   reserved `read_floor_ms` ahead of the reads it serves; after a crash every key's RT
//!   starts at that floor (RT itself is not logged per read). Checkpoints every
//!   `checkpoint_every` records keep the log bounded.
//! * **Split brain**: the simulator restarts a crashed node in place (its shared storage is
//!   its durable log), so there is never a second live copy of a data node or recorder and
//!   no lease is needed; §5.3's lease would guard a fail-over to a new node, which this
//!   deployment does not do. A primary is unavailable while it is down.
//! * **Version garbage collection**: `max_versions_per_key` newest versions are kept; a
//!   read below the oldest kept one aborts.
//! * **Stale intents** (a failed coordinator, a lost finalization) are pushed by their
//!   primary once older than `txn_timeout`, without waiting for a reader.
//! * **Which oracle**: the nearest; after a request goes unanswered (`4 × RTT`, ≥ 1 ms),
//!   the next nearest; after a farther oracle answered, the nearest again
//!   (`kit::ttc::OracleCursor`). A cursor that only moved forward left coordinators asking
//!   another region's oracle for good after two late replies (exponential jitter makes a
//!   1 ms round trip about one request in 300 on `k2-five-regions`), which is where Table
//!   2's 2.2 ms mean get-ts came from.
//! * **TTL** defaults to 100 µs (§7.2) or four of the topology's intra-region round trips
//!   if more: 800 µs on `k2-five-regions`, whose oracle round trip is 0.2 ms plus jitter
//!   (the paper's: 18 µs, §4.3). The larger TTL is a workaround for that round trip: §4.3
//!   asks for a TTL above the latency of getting a timestamp, and with 100 µs every batch
//!   has expired when its reply arrives, so it serves only the transactions that waited
//!   for it (correct, but K2-TB then serves nothing locally). It costs a longer commit
//!   wait: `2(TTL+ε)(1+D)` = 1.8 ms instead of 0.4 ms.
//! * **Fig. 19's multi-version writes change nothing on this TPC-C**, and the counter
//!   `k2.intents_beside_another` (intents that joined another transaction's in their key's
//!   write stream, the only case `mv_writes` decides) shows why: it stays 0. Every write
//!   two TPC-C transactions can make to one key is a read-modify-write (`D_NEXT_O_ID`,
//!   `W_YTD`, `D_YTD`, the customer and stock rows; inserted rows have keys of their own),
//!   and a read at `ts` already waits for every older intent on its key (PUSHWS) and, by
//!   raising the read tracker, makes every older writer abort. So with `mv_writes=false`
//!   the run is the same event for event (`tests/k2_tpcc.rs` compares the trace hashes);
//!   only blind writes reach the switch (`k2::tests`, two `Put`s of one key).
//!
//! ## K2-VCR: choices the paper left open
//! * **Epoch `k` ends at true time `k · epoch_ms`** (default 100 ms, §7.1). Primaries cut;
//!   a cut asks the region's oracle (`epoch.rs`), so Property 6.1 holds by the TTC bound.
//!   Coordinators do not cut: the participants' proposals and the timestamp's ceiling
//!   epoch suffice.
//! * **Epoch order (not in the paper; §6.3's maximum alone is not enough).** A replica's
//!   view of epoch `X` shows exactly the transactions committed in epochs `≤ X`, so it is
//!   a consistent snapshot only if commit epochs never decrease along a dependency: for
//!   T1 → T2 (T2 read T1's write, overwrote it, or overwrote what T1 read; K2-MVTO orders
//!   all three by timestamp) `epoch(T1) ≤ epoch(T2)`. §6.3's maximum of proposals gives
//!   that for write-read dependencies (with the reads' proposals below) but not for
//!   read-write anti-dependencies nor for an older writer arriving after a younger one:
//!   T1 reads `k`, T2 (younger) overwrites `k` and commits in epoch 5, T1's late write on
//!   another shard puts it in epoch 6, and the view of epoch 5 shows T2 without T1 (the
//!   checker found exactly these cycles, `R →rw T1 →rw T2 →wr R`, on every seed). So:
//!   1. *Ceiling.* A transaction's commit epoch is at least the ceiling epoch of its
//!      timestamp (the coordinator starts its maximum there). Epochs then follow
//!      timestamps, hence every dependency, *unless* a proposal raised a transaction above
//!      its ceiling ("bumped": a write reached a primary that had cut past it, or it read
//!      a bumped version).
//!   2. *Validation of bumped transactions.* Before committing (or, read-only at the
//!      primaries, answering), a bumped transaction sends `Validate(epoch)` with the keys
//!      it ran on to each primary it ran on. A primary refuses if a younger transaction on
//!      those keys committed in an earlier epoch, holds an intent proposed below it, or
//!      was pruned away; the coordinator then aborts. Otherwise the primary raises each
//!      key's *epoch floor* to the epoch (every later writer proposes at least it) and its
//!      read tracker to the timestamp (a later writer is younger), persisted before the
//!      answer. Unbumped transactions (most: with `epoch_ms=100` a bump needs a write to
//!      arrive after its primary cut past the timestamp's epoch) commit as before.
//!   3. *Proposals.* A piece that writes proposes its primary's current epoch raised to
//!      the floors of its keys; every piece also proposes the commit epoch of each
//!      version it read; a piece that only reads proposes nothing of its primary's own
//!      (it decides no write's epoch there). The recorder commits in exactly the epoch
//!      the coordinator proposed and validated (it adds no proposal of its own: the
//!      participants' proposals already keep every write out of completed epochs, and
//!      the ceiling gives real time).
//!
//!   Why it is enough: every dependency then goes up in (epoch, timestamp), a view of `X`
//!   is closed under dependencies and serializes after every transaction of epoch `≤ X`;
//!   each component of a commit epoch is a cut taken, or a ceiling of a timestamp taken,
//!   before the transaction ended, so a transaction that ended before a linearizable
//!   read began is in its view (Invariant 6.1, and the same between two read-write
//!   transactions), and one that began after the read ended has a ceiling above it.
//! * **Replication ships final versions, pulled per epoch.** A primary's epoch `k` is
//!   *complete* once it is cut and no intent it holds was proposed an epoch `≤ k`; a
//!   replica holds a pull (`Pull { after }`) that the primary answers with every version
//!   of epochs `after+1 ..= complete`. Replicas therefore never hold undetermined writes
//!   and never PUSHWS (the paper ships intents and lets replica readers push): a slow
//!   transaction delays its shard's later epochs at the replicas, as a safe timestamp
//!   would (§6.1's Limitation 1), instead of only the readers of its keys.
//! * **Read view** = every version of commit epoch `≤ X`, the newest by timestamp per key;
//!   the read's timestamp only picks `X` (its ceiling epoch for a linearizable read, that
//!   of a timestamp `snapshot_staleness_ms` older for a snapshot read). Read-only one-shot
//!   transactions are the ones routed (interactive ones cannot be told read-only up
//!   front); every piece goes to the nearest copy of its shard, the primary included
//!   (which serves it from the same epoch view), and a resend tries the next copy.
//! * **Visibility delay** is counted per replayed version, from its finalization at the
//!   primary to its replay at a replica (two nodes' clocks: ordinary clocks' skew is in
//!   it): `k2.visibility_delay_us_sum / k2.visible_versions` is the mean, and
//!   `k2.visibility_delay_le_*ms` a histogram (`kit::replica_reads`, which `mvto-hlc`'s
//!   ClosedTS counts with too). A replica catching up from nothing does not count.
//! * **Restarts**: a primary proposes nothing until its first cut after a restart (the
//!   cut is not logged; a piece arriving before it aborts); a replica keeps nothing
//!   durable and pulls from epoch 0.
//!
//! ## K2-VCR: what is checked
//! Linearizable replica reads are checked strict serializable together with the
//! primaries' history (§6.5's Invariant 6.1 and Property 6.2); snapshot replica reads
//! (a view epochs behind) are checked serializable, the level the paper claims for them
//! (a consistent snapshot that keeps the real-time order between read-write
//! transactions, but may miss what committed just before it). The conformance suite runs
//! both (`k2_vcr` in `tests/conformance.rs`), and shows the checker catching the broken
//! variant `unsafe_no_collab_epoch=true`: a transaction's writes land in different
//! epochs, and a replica read sees one of them without the other.
//!
//! ## Not implemented (yet)
//! Replica PUSHWS (replicas hold final versions only, see above). (The baselines are
//! their own modules: `p2pl_ttc`, `mvto_hlc`.)
//!
//! ## Options
//! See [`Options`]; the test-only `unsafe_skip_read_tracking=true` removes the read
//! version tracker (Fig. 10 line 4), which the conformance suite shows the checker
//! catching; the test-only `unsafe_no_collab_epoch=true` lets each participant finalize
//! in its own epoch (§6.3 removed), which a unit test shows splitting a transaction's
//! writes across epochs and the conformance suite shows the checker catching.

mod batch;
mod coordinator;
mod data_node;
mod epoch;
mod options;
mod oracle;
mod recorder;
mod replica;
mod wire;
mod write_stream;

#[cfg(test)]
mod tests;

pub use batch::{Take, TsBatch, TsSource};
pub use coordinator::Coordinator;
pub use data_node::DataNode;
pub use options::{Options, ReplicaReads, Timestamps, OPTIONS};
pub use oracle::Oracle;
pub use replica::Replica;
pub use wire::{Execute, Msg, Record, Timer, TxnTs};

use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RegionId, ReplicaKind, RequestId,
    ShardId,
};

/// The name of the oracle service (topology `[[services]] name`).
pub use crate::kit::ttc::ORACLE_SERVICE;

/// K2. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct K2;

/// A node of `k2`.
#[derive(Debug)]
pub enum K2Node {
    Oracle(Oracle),
    Primary(Box<DataNode>),
    Coordinator(Box<Coordinator>, u32),
    /// A read replica (K2-VCR, §6).
    Replica(Box<Replica>),
    /// A service K2 does not run.
    Inert,
}

impl Protocol for K2 {
    type Node = K2Node;
    type Options = Options;

    const NAME: &'static str = "k2";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;
    const REPLICA_KINDS: &'static [ReplicaKind] = &[ReplicaKind::Voter, ReplicaKind::ReadReplica];

    /// One oracle per region unless the topology places them.
    fn services(cluster: &Cluster) -> Vec<(String, RegionId)> {
        crate::kit::ttc::one_oracle_per_region(cluster)
    }

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::for_cluster(raw, cluster)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> K2Node {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        match &cluster.node(node).role {
            NodeRole::Replica { shard, .. } if cluster.initial_leader(*shard) == node => {
                K2Node::Primary(Box::new(DataNode::restore(
                    node,
                    *shard,
                    opts,
                    cluster.clone(),
                    setup.procedures.clone(),
                    recovered,
                )))
            }
            NodeRole::Replica { shard, .. } => K2Node::Replica(Box::new(Replica::new(
                cluster.initial_leader(*shard),
                opts,
                setup.procedures.clone(),
            ))),
            NodeRole::Coordinator { .. } => {
                let (c, incarnation) = Coordinator::restore(node, opts, cluster.clone(), recovered);
                K2Node::Coordinator(Box::new(c), incarnation)
            }
            NodeRole::Service { name, index } if name == ORACLE_SERVICE => {
                K2Node::Oracle(Oracle::new(*index, opts.epsilon_ns))
            }
            _ => K2Node::Inert,
        }
    }

    /// The largest round trip from the coordinator to an involved primary: K2 commits in
    /// one round trip to the recorder after one to the primaries.
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .map(|&s| cluster.rtt_ms(coordinator, cluster.initial_leader(s)))
            .fold(0.0, f64::max)
    }
}

impl Node for K2Node {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            K2Node::Primary(p) => p.on_start(ctx),
            K2Node::Coordinator(c, incarnation) => c.on_start(ctx, *incarnation),
            K2Node::Replica(r) => r.on_start(ctx),
            K2Node::Oracle(_) | K2Node::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            K2Node::Oracle(o) => o.on_message(ctx, from, msg),
            K2Node::Primary(p) => p.on_message(ctx, from, msg),
            K2Node::Coordinator(c, _) => c.on_message(ctx, msg),
            K2Node::Replica(r) => r.on_message(ctx, from, msg),
            K2Node::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            K2Node::Primary(p) => p.on_timer(ctx, timer),
            K2Node::Coordinator(c, _) => c.on_timer(ctx, timer),
            K2Node::Replica(r) => r.on_timer(ctx, timer),
            K2Node::Oracle(_) | K2Node::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            K2Node::Coordinator(c, _) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            K2Node::Primary(p) => p.check_invariants(),
            _ => Ok(()),
        }
    }
}
