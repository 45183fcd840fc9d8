//! # `janus`: Janus (Mu, Nelson, Lloyd, Li, OSDI '16, "Consolidating Concurrency Control
//! and Consensus for Commits under Conflicts")
//!
//! **Guarantee: strict serializability** for one-shot transactions, under message loss,
//! duplication and reordering, crashes of a minority of each shard's replicas (with
//! restart from durable records) and of coordinators.
//!
//! ## Paper → code
//! | paper | code |
//! |---|---|
//! | §4.1 pre-accept: a replica adds T to its dependency graph and answers T's conflicting transactions | `graph.rs` [`Graph::conflicts`](graph::Graph::conflicts) (per-key last writer and readers since); `replica.rs` `on_pre_accept` |
//! | §4.2 fast path: identical dependencies from a fast quorum of every shard | `coordinator.rs` `advance` (`fast_ok`) |
//! | §4.2 slow path: accept the union of a majority's answers under ballot 0 | `coordinator.rs` `advance`, `on_accept_reply`; `replica.rs` `on_accept` |
//! | §4.3 commit with the final dependencies | `coordinator.rs` `commit`; `replica.rs` `on_commit`, [`Graph::commit`](graph::Graph::commit) |
//! | §4.4 execution: wait until every reachable transaction is committed (inquire the unknown), strongly connected components in topological order, members by id, only this shard's pieces | `graph.rs` [`Graph::executable`](graph::Graph::executable) (iterative Tarjan, incremental: from newly committed and woken transactions only; blocked components parked until what blocks them changes), `replica.rs` `execute_ready`, `run_pieces`, `inquire`, `on_inquire` |
//! | §5 coordinator failure: a replica waiting too long becomes recovery coordinator with a higher ballot (prepare, accept, commit) | `replica.rs` `recover_stuck`, `on_prepare`, `on_prepare_reply`, `choose`, `on_accept_reply` |
//! | replica crash and restart (not in the paper's protocol text) | [`Record`]: `replica.rs` `log` (every state change before its answer, every execution's writes), `Replica::restore`/`replay`; snapshots every `checkpoint_every` records (at least the state's size apart) |
//! | garbage collection (not in the paper) | `graph.rs` [`Graph::forget`](graph::Graph::forget), `SlotSet`, [`Graph::note_peer_executed`](graph::Graph::note_peer_executed); [`Tag`] slots; `replica.rs` `tick` (`Msg::ExecutedSlots`) |
//! | state transfer of a lagging replica (not in the paper) | `replica.rs` `fetch_state`, `on_fetch_state`, `on_state`, `on_executed`, `recovered_executed`; [`Graph::adopt`](graph::Graph::adopt) |
//! | coordinator admission (not in the paper) | `coordinator.rs` `on_client_request`, `start_queued` |
//!
//! ## Choices the paper leaves open
//! * **Fast quorum**: the kit's super quorum f + ⌈f/2⌉ + 1 per shard — with three replicas
//!   (f = 1) every replica, as Janus requires for n = 3. The coordinator waits for it
//!   `fast_wait_ms` after a majority of every shard answered with identical dependencies,
//!   then takes the slow path; differing answers take the slow path at once.
//! * **Dependencies** ([`graph::KeyEntry`]): per key, every conflicting access this replica
//!   knows and has not executed, plus the last executed writer and the readers executed
//!   after it (earlier executed ones are reachable from those). A replica records T in its
//!   key table whenever it first learns of it (pre-accept, prepare, accept or commit) and
//!   never lets a newer access supersede an unexecuted one — one learned late may be the
//!   older — so any majority's answers include every conflicting committed transaction
//!   (quorum intersection). The price: answers are larger than "last writer", so they
//!   differ between replicas (hence the slow path) more often under contention.
//! * **Recovery** (§5): a replica recovers an uncommitted transaction after `recovery_ms`
//!   of silence about it (plus a random delay up to the same, against duelling recoverers),
//!   with ballot (highest round seen + 1, its node id). Prepare goes to every replica of
//!   every shard and carries the transaction, so a replica that never saw it pre-accepts
//!   it (and then refuses the original pre-accept at ballot 0). With a majority of every
//!   shard: committed anywhere → that; else the highest accepted ballot's dependencies;
//!   else the union of the pre-accepted answers. The union is safe for a transaction that
//!   may have committed on the fast path because the fast quorum is every replica: each
//!   replica of the majority then holds the same answer.
//! * **Results**: every replica of a shard executes and sends its results to the original
//!   coordinator, which answers the client with the first per shard. A recovered
//!   transaction's results reach its coordinator the same way; a coordinator that loses
//!   its race to a recovery (a nacked pre-accept or accept) waits for them.
//! * **Execution knowledge and garbage collection**: a coordinator gives each transaction
//!   a *slot* per shard (its per-shard sequence number in this incarnation, assigned only
//!   when the pre-accept is sent, so dense). A replica records its shard's executed slots
//!   as a watermark per coordinator incarnation ([`graph::SlotSet`]), and can therefore
//!   forget an executed transaction and still tell "executed and forgotten" from "not yet
//!   seen" when a later transaction names it. It forgets one of its shard's transactions
//!   after `keep_ms` *and* once every other replica of the shard reported it executed
//!   (each replica sends its executed slots to its peers every tick,
//!   `Msg::ExecutedSlots`): until then a peer that lacks it can still learn it by inquiry.
//!   A peer silent for longer than `keep_ms_max` stops holding that memory: the rest is
//!   forgotten anyway (counted, `janus.forgotten_unacknowledged`) and the peer catches up
//!   by state transfer. Executions need not follow one order across replicas
//!   (transactions that do not conflict are unordered), so without this two replicas
//!   could each execute and forget a transaction the other lacked (issue 18's seed 142,
//!   below). Another shard's
//!   transaction in a dependency list is chased (inquired, its own dependencies followed)
//!   until this replica has placed it: orderings between this shard's transactions may run
//!   through it (skipping those its reporter had executed lost such orderings — the swarm
//!   caught it). One its replicas executed and forgot counts as placed (tracked up to
//!   `window`); that is sound unless this replica lags more than `keep_ms` (see Limits).
//! * **State transfer**: a replica that missed what its shard committed (down, or cut
//!   off) learns those transactions only as dependencies of later ones, one inquiry round
//!   trip per link of a chain, and a link its peers executed and forgot (after `keep_ms`)
//!   cannot be learned at all. So a replica asks a peer of its shard for its whole state
//!   (store, executed slots, key table, committed transactions) when it restarts, when an
//!   inquiry about a transaction of its own shard is answered "executed and forgotten",
//!   and when a recovery finds one so. It installs the state only if the peer executed
//!   everything it did and more: every replica executes its shard's transactions in one
//!   order, so the peer's store is its own further along. It keeps its own pre-accept
//!   answers, promises and accepts of what the peer has not executed (quorum
//!   intersection rests on them), takes the peer's key table plus its own unexecuted
//!   accesses, and checkpoints the result before it answers anything else.
//! * **Admission**: a coordinator runs at most `max_inflight` transactions and queues
//!   the rest (at most `max_queued`, then refuses them `Unsupported("overloaded …")`,
//!   counted as `janus.refused_overloaded`): an overloaded Janus slows down rather than
//!   abort. Janus itself never aborts for conflicts; it orders them. Before, the bound
//!   was 1,024 and the excess was refused: issue 18's 81 % "aborts" at 25 K txns/s per
//!   coordinator were these refusals (a shortened run of the Table 1 point, 100 ms of
//!   load, on a binary built before this change: 11,861 aborts, 59 %, every one
//!   "unsupported: overloaded: # transactions in flight").
//! * **Hot keys** (Tiga Fig. 9 at Zipf 0.99, 8 K txns/s per coordinator): every
//!   transaction on a hot key depends on every live one there, so dependency lists hold
//!   thousands and there are thousands of them. A list ([`Deps`]) is immutable and shared
//!   (`Arc<[Dep]>`) by the vertex, its log record and every copy of its message, and a
//!   tag shares its slots; a blocked transaction stops walking its edges, which it reads
//!   from the shared list as it goes (`graph.rs`). Measured on that point alone
//!   (`/usr/bin/time -v meridian experiment run` of `tiga-fig9.toml` restricted to Janus
//!   at 0.99, release builds, user CPU and peak resident memory): copied lists reached
//!   22.0 GB after 128 s and were killed; shared lists ran 1,105 s without finishing
//!   (3.7 GB, killed); with the early stop the point finished in 246 s (5.3 GB); with
//!   edges read lazily too, 140 s (5.1 GB). It commits 5,112 txns/s of the 64 K offered
//!   (Zipf 0.5: 58,942), with no aborts.
//! * **Inquiries** go first to the nearest replica of each of the dependency's shards (on
//!   `gcp-tiga` a replica of every shard shares each region), then to all every tick.
//! * **Durability** (`Effect::Persist`): a replica persists every pre-accept (with its
//!   answer), promise, accept and commit before answering, every execution (its writes),
//!   and a snapshot (store, graph, key table, executed slots) every `checkpoint_every`
//!   records — or every state's size of records once the store and graph hold more
//!   entries, so a snapshot's copy stays amortized O(1) per record — which bounds the log. A restarted replica that forgot what it answered could
//!   break quorum intersection (a later answer missing a transaction it had reported).
//!   Executions are logged rather than re-derived from the commits on replay: by then the
//!   other shards' transactions that closed a cycle may be forgotten everywhere, and the
//!   replayed order differed (the swarm caught it). Coordinators persist only their
//!   incarnation.
//!
//! ## Differences from the Janus framework (NYU-NEWS/janus, `src/deptran/janus`)
//! * The framework ships the relevant part of the dependency graph in its messages; here
//!   messages carry direct dependencies and a replica inquires about what it lacks.
//! * Garbage collection, the slot watermarks and state transfer are this
//!   implementation's. The framework does not recover from failures (`OnAccept` in
//!   `src/deptran/janus/scheduler.cc` at 58b9146: `verify(0); // do not support failure
//!   recovery so far.`).
//! * Cross-shard value dependencies (pieces whose inputs are other shards' outputs) and
//!   validation ops (`Op::Check`, an abort decided by one shard's data) are refused
//!   `Unsupported`: execution here is per shard, and Janus has no round in which one
//!   shard's verdict could reach the others. Intra-shard input dependencies run (a shard
//!   executes its pieces in order, each seeing its predecessors' outputs), as in the
//!   framework's TPC-C.
//! * Stored procedures run at every replica in the committed order. Janus's transactions
//!   do not abort; a procedure's *user* abort is allowed when every participant shard
//!   decides it from the transaction's inputs alone, so deterministic execution aborts
//!   every shard alike with no extra round (TPC-C's NewOrder: every piece checks the
//!   order's item numbers, see below). Shards that disagree (an abort from data, a type
//!   error) leave some writes applied: the client hears `Unknown`, and the coordinator
//!   counts it ([`SPLIT_OUTCOMES`]).
//!
//! ## TPC-C as the framework ran it (`src/bench/tpcc`), and here
//! * The framework's TPC-C is all one-shot: each profile is a set of pieces, some fed by
//!   an earlier piece *on the same shard* (Payment by last name: piece 3 finds `C_ID` at
//!   the customer's warehouse, piece 4 updates that customer). The Tiga paper's Janus ran
//!   that code, so its Janus ran Payment and Order-Status one-shot, not multi-shot. Here
//!   Janus runs the workload's one-shot TPC-C (`--workload-opts interactive=false`):
//!   Payment and Order-Status as one piece per shard, the last-name lookup on the
//!   client's immutable name index (the same customer the framework's lookup piece
//!   finds; no piece needs another's output). They cannot be multi-shot: Janus orders a
//!   transaction's whole key set before any of it executes, and an interactive
//!   transaction's later keys are unknown when it begins, so interactive requests are
//!   refused `Unsupported`.
//! * NewOrder's 1 % rollback (an unused item number, TPC-C §2.4.2.3): the framework never
//!   generates it (`GetNewOrderTxnReq` draws valid item ids only). Here it is kept: the
//!   home piece and every supply shard's stock piece check the order's item numbers, so
//!   all shards roll back together (`tests/tpcc_baselines.rs` runs it with half the order
//!   lines remote and asserts no split outcome).
//! * Measured: `meridian sim --protocol janus --topology gcp-tiga --workload tpcc
//!   --workload-opts warehouses=6,interactive=false --check strict-serializable --seed 1
//!   --duration 20s`: 1,248 committed, 5 aborted (NewOrder rollbacks), 0 unknown, the TPC-C
//!   conditions hold; p50 SC 125.4, FI 183.4, BR 183.2, HK 505.4 ms.
//! * **Liveness under faults (issue 18)**: the same under `sim swarm --seeds 200
//!   --first-seed 1 --jobs 1 --faults random --duration 20s` passed 193 seeds before state
//!   transfer; on 7 (36, 62, 90, 110, 139, 142, 166) the end-of-run audit read never got
//!   every shard's results. The cause found: replicas back from a crash (up to 4 s) or a
//!   partition learned what they missed only as dependencies, one inquiry round trip per
//!   link, and a recovery started `recovery_ms` (plus jitter) after the restart; links
//!   their peers had by then executed and forgotten (`keep_ms`, ≈ 6 s here) were answered
//!   "executed" (ignored for a transaction of the replica's own shard) or ended the
//!   recovery with nothing committed, so those replicas stayed stuck and, on these seeds,
//!   every replica of some shard was. With state transfer, 6 of the 7 pass (debug build,
//!   one run each, `meridian sim --protocol janus --topology gcp-tiga --workload tpcc
//!   --faults random --seed N --duration 20s --workload-opts
//!   warehouses=6,interactive=false --check strict-serializable`: 4–6 state transfers
//!   each). Seed 142 still failed (351 state requests, 3 installed): transactions that
//!   do not conflict execute in different orders at different replicas, and two replicas
//!   of a shard had each executed and forgotten one the other lacked, so neither could
//!   inquire it nor install the other's state (a state is installed only from a peer that
//!   executed everything the replica did). With `keep_ms=60000` (nothing forgotten within
//!   the run) it passed. Now a replica forgets its shard's transactions only once every
//!   peer reported them executed (see *Execution knowledge* above): seed 142 passes with
//!   4 state requests, 3 installed (release build, the command above with `--seed 142`),
//!   and `sim swarm --seeds 50 --first-seed K --jobs 1 --faults random --duration 20s
//!   --workload tpcc --workload-opts warehouses=6,interactive=false` for K = 1, 51, 101,
//!   151 failed 0 of 200 (165,927 committed, 720 aborted, 1,144 unknown).
//!
//! ## Limits
//! * A type error (`add` on a non-integer) aborts the failing shard's pieces only; the
//!   other shards apply theirs (the client hears `Unknown`, [`SPLIT_OUTCOMES`] counts it).
//!   Workloads never do this.
//! * A replica away longer than `keep_ms_max` catches up by state transfer, and only from
//!   a peer that executed everything it did (see the TPC-C note above). Meanwhile its
//!   peers keep its shard's executed transactions in memory. A
//!   transaction of this shard that only other shards' replicas executed and forgot
//!   before any replica of this shard learned its decision cannot be recovered here
//!   (counted: `janus.decisions_lost`).
//!
//! ## Measured (simulator, this build)
//! MicroBench, Zipf 0.5, open load 1,000 txns/s per coordinator (200 outstanding), 3 s +
//! 3 s drain, seed 1 (Tiga Fig. 7's setup with `protocol = ["janus"]`, `rate = [1000]`;
//! `meridian experiment run`): p50 per coordinator region — SC 125.6 ms (bound 122, 1.03
//! WRTT), FI 183.6 ms (180, 1.02), BR 183.6 ms (180, 1.02), HK 543.2 ms (302, 1.80); 99 %
//! fast path. HK has no replica: after the one-WRTT pre-accept to all three regions it
//! still needs the commit-and-results round trip to the nearest replica (SC, 238 ms); the
//! other regions' results come from a replica in their own region. HK's coordinators hit
//! the 200-outstanding cap (2,388 commits against ~5,900 elsewhere).
//!
//! ## Options (`ProtocolConfig`)
//! See [`Options`]; the **test-only** `unsafe_no_dep_union=true` makes the slow path accept
//! one answer per shard instead of the union, which the conformance test shows caught.

mod coordinator;
pub mod graph;
mod options;
pub mod replica;
mod wire;

#[cfg(test)]
mod tests;

pub use coordinator::{Coordinator, QUEUED, REFUSED_OVERLOADED, SPLIT_OUTCOMES, TIMED_OUT};
pub use options::{Options, OPTIONS};
pub use replica::Replica;
pub use wire::{Ballot, Body, Dep, Deps, Known, Msg, Record, Tag, Timer};

use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RequestId, ShardId,
};

/// Janus. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Janus;

/// A node of `janus`.
#[derive(Debug)]
pub enum JanusNode {
    Replica(Box<Replica>),
    Coordinator(Box<Coordinator>),
    Inert,
}

impl Protocol for Janus {
    type Node = JanusNode;
    type Options = Options;

    const NAME: &'static str = "janus";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::for_cluster(raw, cluster)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> JanusNode {
        let cluster = setup.cluster.clone();
        let opts = setup.options.clone();
        match cluster.node(node).role {
            NodeRole::Replica { shard, .. } => JanusNode::Replica(Box::new(Replica::restore(
                node,
                shard,
                opts,
                cluster,
                setup.procedures.clone(),
                recovered,
            ))),
            NodeRole::Coordinator { .. } => JanusNode::Coordinator(Box::new(Coordinator::restore(
                node, opts, cluster, recovered,
            ))),
            _ => JanusNode::Inert,
        }
    }

    /// One wide-area round trip to the farthest member of each shard's closest fast quorum
    /// (the fast path; the results then come from the nearest replica).
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        crate::kit::quorum::super_quorum_round_trip_ms(cluster, coordinator, shards)
    }
}

impl Node for JanusNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            JanusNode::Replica(r) => r.on_start(ctx),
            JanusNode::Coordinator(c) => c.on_start(ctx),
            JanusNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            JanusNode::Replica(r) => r.on_message(ctx, from, msg),
            JanusNode::Coordinator(c) => c.on_message(ctx, from, msg),
            JanusNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            JanusNode::Replica(r) => r.on_timer(ctx, timer),
            JanusNode::Coordinator(c) => c.on_timer(ctx, timer),
            JanusNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            JanusNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn on_batch_end(&mut self, ctx: &mut Ctx<'_, Self>) {
        if let JanusNode::Replica(r) = self {
            r.on_batch_end(ctx);
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            JanusNode::Replica(r) => r.check_invariants(),
            _ => Ok(()),
        }
    }
}
