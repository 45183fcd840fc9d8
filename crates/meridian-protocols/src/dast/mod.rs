//! # `dast`: Decentralized Anticipate and Stretch (EuroSys '21)
//!
//! **Guarantee: strong partition serializability** (§4.5): one-copy serializability, and
//! real-time order between transactions that share a region (Proposition 2) — the checker's
//! `strong-partition-serializable` (serializable, plus the real-time edges between
//! transactions touching a common key). Transactions in disjoint regions may be reordered
//! against an out-of-band causality (Fig. 4), as the paper allows.
//!
//! **With declared out-of-band dependencies (§4.5): strict serializability over them.** The
//! paper's remedy is the developer's: a transaction that causally follows another it saw
//! finish adds a read in that transaction's region. That is a client option every workload
//! takes, not a protocol option (the protocol needs nothing new): `oob_ratio=p` makes a
//! share `p` of one-shot transactions declare that they follow the last committed
//! transaction of the run, and the driver adds the read (a `get` of a reserved key on the
//! dependency's first shard) unless the transaction already touches one of the
//! dependency's regions (`meridian_workload::out_of_band`, carried out by
//! `meridian_bench::driver::LoadCore` for the simulator and the runtime). Why it suffices
//! (Proposition 2 at region granularity): the dependency finished only after it executed
//! in each of its regions, which needs every node of the region to have promised past its
//! timestamp; the dependent transaction, invoked later, gets its timestamp from a node of
//! that region (an IRT) or above the anticipation acks of that region's nodes (a CRT: "A
//! late prep-crt" below), so it is ordered after. The checker's
//! `declared-strict-serializable` checks exactly: every anomaly `serializable` rejects,
//! plus any cycle through a real-time edge between two committed transactions that touch
//! a common key, or along a declared dependency (the history entry's `after`: `T1 → T2`
//! when T2's client declared it follows T1, which completed before T2 was invoked; a
//! declaration that cannot hold is reported malformed). Real-time order between
//! transactions that share no key and declare nothing is not checked (DAST does not
//! promise it). The test-only `oob_read=false` declares without reading; the conformance
//! suite's `dast_declared` shows the checker catching it.
//!
//! ## Deployment (§3.1)
//! Regions of edge nodes; each edge node is a replica of one shard, and every shard is
//! replicated (2f + 1) only inside its host region — a topology whose shard spans regions
//! is refused. The machine's coordinator node is a *port*: it hands its clients'
//! transactions to the edge node on its machine, which coordinates them (the machine is one
//! edge server; the hop between the two nodes is free). Each region runs a `manager`
//! service (`per_region = 3` in `edge-regions`: a manager and two backups).
//!
//! ## Map: paper → files
//! | paper | file |
//! |---|---|
//! | dclock `⟨time, nid, frac⟩`, `CreateTs` and its fallback, calibration (§3.2, §4.2, Alg. 1 lines 4-9) | `dclock.rs` |
//! | readyQ, waitQ, PCT (`maxTs`, notifications, `notifiedTs`), execution in timestamp order (Alg. 1 lines 21-27), prep-crt / commit-remote at a participant (Alg. 2 lines 17-26), value dependencies pushed (§4.1, §5) | `node.rs` |
//! | `CoordIRT` (Alg. 1 lines 10-20), `CoordCRT` (Alg. 2 lines 1-9) | `coord.rs` |
//! | the manager: `GetAnticipateTs`, prep-remote → prep-crt (Alg. 2 lines 10-16) | `manager.rs` |
//! | views, remove-prep/commit and add-prep/commit at an edge node, the checkpoint source and the joining node (§4.4, Alg. 3 lines 20-26, Alg. 4 lines 10-21) | `view.rs` |
//! | the manager's failure detection, `RemoveNodes` and `AddReplica` (Alg. 3 lines 4-19, Alg. 4 lines 1-9), which manager acts | `members.rs` |
//! | messages, records | `wire.rs` |
//! | PCT's `maxTs` and the peers' pause points (§4.2, §4.3) | `pct.rs` |
//!
//! ## Choices the paper left open (or where this differs)
//! * **Notifications are state, not events.** Every intra-region message carries a header:
//!   the sender's *promise* (its dclock, held just below its waitQ head — so with the
//!   stretchable clock off the promise, not the clock, stops at a pending CRT), the
//!   notifications not yet acknowledged (`myTxns` above `notifiedTs`, at most `max_notices`;
//!   the promise stops below the first left out), the sender's waitQ head (its *pause*:
//!   peers stretch below it too, which is how §4.3 has nodes not accessed by a CRT learn to
//!   stretch), and the largest promise received from the receiver (the delivery
//!   acknowledgement, Alg. 1 line 17). Edge nodes exchange headers every `heartbeat_ms`.
//! * **A late prep-crt.** Alg. 2 line 18 assumes the participant's clock has not passed the
//!   manager's anticipation. If it has (a slow link, a clock step), the participant acks
//!   with its own anticipation just above its clock, and the coordinator's "largest
//!   anticipation" rule then still yields a commit timestamp above everything the quorum
//!   promised before it prepared. With that rule, safety does not depend on the manager, so
//!   the manager does not hold an entry in `maxTs`: a crashed manager delays CRTs, never IRTs.
//! * **Prepared CRTs block the readyQ at their lower bound.** A participant that learns of
//!   a prepared CRT (from the manager, or a peer's notification) holds it in the readyQ at
//!   the manager's anticipation, below which its commit timestamp cannot fall, until the
//!   commit arrives (the paper puts only committed CRTs there; this is the same order,
//!   spelled out).
//! * **Frozen clocks (differs from Alg. 1 lines 6-8).** The paper's `CreateTs` freezes
//!   `time` at `lastTs` once the system clock passes the waitQ head and then counts only
//!   `frac`; PCT executes a transaction once every node of the region announced a clock
//!   above it. A committed CRT `Y` whose timestamp lies between a region's frozen clocks
//!   and the CRT they stretch below (the region froze under `Y`'s own anticipation, then
//!   `Y` committed higher, at another region's) can then never run there: no frozen clock
//!   passes it. If another region waits for `Y`'s output there while holding the CRT the
//!   first region waits on, the two wait on each other for the rest of the run — found on
//!   `edge-regions` (`tests/dast.rs`, the idle-shard run, seed 5): from 0.16-0.18 s on,
//!   region 7's clocks stayed at 0.1578-0.1642 s below a CRT at 0.1773 s waiting for an
//!   input, while its readyQ head, a committed CRT at 0.1661 s with its inputs in, never
//!   ran; region 8 waited for that CRT's output (its CRT at 0.1698 s), region 1 froze at
//!   0.1788 s below one at 0.1808 s, and so on: every region's clocks froze for the run
//!   and the removed replica's checkpoint, which waits for its region to pass the
//!   removal's bound, never left. Here, every heartbeat, a node moves its clock past the
//!   highest clock a peer announced (§4.2's calibration, which a frozen `time` otherwise
//!   ignores) and past its readyQ head once that is committed with its inputs in, in both
//!   cases only while it stays below the stretch bound (`Dclock::pass`). The head's
//!   holder passes it, its peers pass the holder, and the region executes it. Measured
//!   with it (and the hand-off fix below): the idle-shard run's replica is added back,
//!   and the four tests of `tests/dast.rs` (the IRT tail among them; the hand-off test
//!   with a 0.3 s client timeout) and the dast conformance suite (20-seed swarm,
//!   goldens) pass. The duplicated append the swarm found with it (seed 6) was not the
//!   clock: a duplicated hand-off (see "A removed node's clients"), which the clock's
//!   change of trace exposed. Not shown: that no region's clocks stay held for long
//!   under faults — in seed 6 a region's IRTs got timestamps of 2.33 s at 3.79 s: its
//!   clocks stayed below `ts_ins` (2.331 s) of `n20`'s re-addition (Alg. 4's hold)
//!   until the add-commit at 3.98 s, `n20` having been partitioned until 3.73 s (not
//!   diagnosed further). Moving the frozen clock to just below its bound instead (branch
//!   dast23) also ended the cycle but put the region's clocks on one `time`, where the
//!   node id orders an IRT above every lower-id peer's frozen clock (IRT p99 363 ms in
//!   `without_the_stretchable_clock_irts_wait_behind_crts_waiting_for_inputs`).
//! * **Durability and crashes.** Participants persist every entry and every execution's
//!   writes; a coordinator persists its decision before sending it and resends it until
//!   every participant has it, then remembers it (`SETTLED_MEMORY` ids) for late queries;
//!   a participant asks the coordinator about a transaction undecided for `query_ms`, and
//!   a coordinator that does not know it answers abort (presumed abort); the dclock
//!   persists a ceiling so it never repeats a timestamp; a restarted node re-sends every
//!   notification it might still owe.
//! * **A restarted clock below a CRT.** So that a restart does not end stretching, a
//!   restarted clock resumes below the waitQ's head, at its `time − 1`, not at the
//!   ceiling (`Dclock::restore`). A clock stretched in that nanosecond (its `time` frozen
//!   one below the head's) had handed out fractions there, and resuming at `frac` 0 would
//!   hand them out again, below what it announced (found by reading the code; no swarm
//!   had hit it). So anticipations leave a nanosecond free (`Dclock::above` is two past
//!   `lastTs`'s `time`), and while the clock is within a nanosecond of the head the node
//!   persists a floor 2^16 fractions above it (`Record::ClockFloor`, counter
//!   `dast.clock_floor_records`), where the restarted clock resumes. A node that restarts before the manager suspects it
//!   simply resumes from its log.
//! * **Views and removal (Alg. 3).** A region's view (id, member edge nodes) is held
//!   durably by its members; `maxTs` tracks exactly the view's other members. The acting
//!   manager suspects a member silent for `suspect_ms` (edge nodes report to their
//!   region's managers every tick) and removes it by 2PC with every remaining member,
//!   one node per view change, and only while every shard keeps a majority of its replicas
//!   in the view (a further removal could lose a CRT's prepared quorum, Lemma 1). A member
//!   acknowledging remove-prep stops accepting the removed node's heartbeats, prepares,
//!   acks, results and IRT decisions, and reports the removed coordinators' IRTs it holds
//!   *or executed recently* (`EXECUTED_IRT_MEMORY` per coordinator: an IRT runs once every
//!   peer promised past it, so one participant may have run it while another never heard
//!   of it), those it aborted, and its promise. The commit aborts the reported-aborted ones
//!   everywhere and commits the rest (the paper: "committing all IRTs received by at least
//!   one node") before the removed node leaves `maxTs`: a member that never heard of such
//!   an IRT has not executed past it, since the removed node's promise to it stayed below.
//!   **Differs from the paper:** the removed node's *CRTs* are not aborted: their decisions
//!   are durable at the coordinator and accepted from it whatever the view (the paper
//!   aborts them, which needs the decision replicated inside the region before
//!   commit-remote, not implemented here). A coordinator's IRT not prepared in time
//!   answers its client `unknown` (a removal may still commit it), and a removed
//!   coordinator answers its undecided IRTs `unknown` when it learns it was removed.
//! * **Adding a replica back (Alg. 4).** A removed node (told so by the manager) drops its
//!   participant state and asks to join. The manager has a live member replica of its
//!   shard send a checkpoint — its store, executed frontier (`ts_ckpt`) and every
//!   transaction it holds — once that replica has executed everything at or below every
//!   promise reported at the removal (so whatever the removed node acknowledged before is
//!   in it): it executed past that bound, or its region's horizon passed it with nothing
//!   at or below it in the readyQ (a replica of a shard no transaction touches executes
//!   nothing, so waiting for an execution alone would keep such a node out). The node
//!   installs it durably and says so; then add-prep: each member holds its clock below a
//!   timestamp above everything it handed out (a placeholder in its waitQ, Alg. 4 line 15)
//!   and answers with it; `ts_ins` is the largest (the paper has the manager anticipate
//!   one; a member's own bound cannot be passed already). add-commit: members drop the
//!   placeholder, start the node's `maxTs` at `ts_ins` and notify it again of everything
//!   they hold (`notifiedTs[n] ← ts_ckpt`; notifications to a removed node are kept
//!   meanwhile), and the node starts its clock above `ts_ins`.
//! * **A removed node's clients** (the paper: clients send to a nearby replica of their
//!   home shard, §3.1; silent on what a client of a removed replica does). A removed node
//!   does not coordinate: it hands each client transaction to another replica of its shard
//!   in the last view it installed, in turn (`Msg::Handoff`), which coordinates it and
//!   answers the client's port directly; one hop only. A handed-off transaction that meets
//!   a removed node again, or a shard with no other replica, is refused at the removed
//!   node's next tick (`retry_ms / 4`), never at once: a refused closed-loop client
//!   resubmits at once, and refusing at once let each client spin (seed 3 of the random
//!   swarm: 54,183 refusals that all landed in the history). Refusals waiting for the
//!   tick are bounded by `max_inflight`, beyond which they are answered at once. A
//!   hand-off crosses machines, so the network may deliver it twice: it carries an id
//!   (sender, incarnation, count) and the receiver drops a copy of one it received
//!   lately (`HANDOFF_MEMORY` ids, not durable). Before, each copy was coordinated as a
//!   transaction of its own: seed 6 of the random swarm (with the frozen-clock change
//!   above) had removed `n20` hand request 3471 of port `n80` to `n18`, which received it
//!   twice 77 µs apart at 3.787 s and ran it as two IRTs (seq 64 and 65, one `frac`
//!   apart), so every replica of shard 6 appended 123 to `k6` twice.
//! * **View agreement.** A member acknowledges a prep only if it extends the member's
//!   installed view and has a larger id than any it acknowledged, and installs a commit
//!   only for the prep it acknowledged last; a member one view behind gets the commit
//!   forwarded by a peer that sees its older view id in a heartbeat. This is not
//!   consensus among managers: two managers acting at once (a partition between managers
//!   only, which the nemesis does not draw) could have members install different views.
//! * **Snapshots** (every `checkpoint_every` records) are taken between events
//!   (`on_batch_end`), never inside a handler whose state may not yet reflect the record
//!   it just wrote. A commit that arrives below a node's executed frontier can only be a
//!   stale duplicate of something executed and forgotten (Lemma 1), and is dropped.
//! * **Latency.** An IRT answers after prepare → acks → commit → execution → results, about
//!   two intra-region round trips (11.3 ms p50 on `edge-regions`), not the one round trip
//!   the paper counts to commit; execution also waits for every peer's heartbeat promise.
//! * **Scale.** Every edge node announces its promise to every other node of its region
//!   every `heartbeat_ms`: PCT executes a transaction only once every node of the region
//!   has passed it (`maxTs`), so each node needs each other's clock, n(n − 1) messages per
//!   heartbeat per region (870 at the paper's 30 nodes) — linear in the number of regions,
//!   quadratic in a region's size. A node keeps `maxTs` in slots with its minimum cached
//!   (`pct.rs`), so one announcement costs the same whatever the region's size. A longer
//!   heartbeat halves the announcements but lengthens the IRT tail (2 regions of 30 nodes,
//!   TPC-C: `heartbeat_ms=5` cut the messages per region from 656k to 348k per virtual
//!   second and moved the IRT p99 from 14.0 to 19.8 ms), so the default stays half the
//!   intra-region round trip. The simulator's cost per virtual second: the
//!   `dast_scale` example (`examples/dast_scale.rs`); on TPC-C (`home_region`, 2 clients
//!   per edge node, 1 s of load) it measured 370k messages per region per virtual second
//!   at both 10 and 100 regions, and 4.75 s (10 regions) and 116 s (100 regions, 6300
//!   nodes) of CPU per virtual second.
//! * **Manager failover.** For CRTs, the coordinator's: a prep-remote not answered within
//!   `retry_ms` goes to the region's next manager. For membership, managers beat each
//!   other every tick and a manager acts once it is up and has heard no lower-id manager
//!   of its region for `suspect_ms` (the paper elects one by SMR); it adopts the largest
//!   view the members report. The paper's new manager raises its dclock above its
//!   predecessors' anticipations; here safety does not rest on the manager's anticipation
//!   (see "A late prep-crt"), so it does not.
//! * **The coordinator's region** counts as a participating region like any other: its
//!   manager anticipates for it.
//! * **Anticipation** = the manager's dclock + twice the 90th percentile of the
//!   coordinator's recent forward delays (kit `owd`, clock offset included) +
//!   `anticipation_margin_ms`. Cross-region clock calibration (§4.3's last paragraph) is not
//!   implemented.
//! * **Conditional aborts** (§4.1): a piece that fails (a stored procedure's user abort)
//!   discards its shard's writes and its failure reaches the pieces that depend on it; as
//!   in the paper, a workload must make every writing piece depend on a piece that may
//!   abort, or independent shards apply their writes.
//! * **Interactive transactions** are refused (`Unsupported`): DAST runs stored procedures.
//! * **CRT latency breakdown** (Tables 3-4), measured at the coordinator for committed CRTs
//!   with a piece in its region, as counters (`dast.crt_phase.*_ns` sums over
//!   `dast.crt_phased` CRTs): *remote prepare* (start until every other region's shards
//!   hold a majority of anticipations), *local prepare* (then until the commit timestamp is
//!   chosen), *execute home* (then until the coordinator's region's shards executed: the
//!   paper's "wait exe." and "wait input" together, which the coordinator cannot tell
//!   apart) and *wait output* (then until every shard executed). They add up to the
//!   coordinator's latency.
//!
//! ## Options
//! See [`Options`]: `heartbeat_ms`, `suspect_ms`, `retry_ms`, `prepare_timeout_ms`, `result_timeout_ms`,
//! `query_ms`, `anticipation_margin_ms`, `max_inflight`, `max_notices`,
//! `checkpoint_every`, `stretch` (the ablation), and the **test-only**
//! `unsafe_skip_anticipation=true`, which breaks the anticipation rule (a coordinator
//! commits a CRT at its own start timestamp instead of the largest anticipation, and
//! participants do not hold their clocks below prepared CRTs), so CRTs commit below
//! executed transactions and are executed late; the conformance suite shows the checker
//! catching it.

mod coord;
mod dclock;
mod manager;
mod members;
mod node;
mod options;
mod pct;
mod view;
mod wire;

#[cfg(test)]
mod tests;

pub use dclock::{Created, Dclock};
pub use manager::Manager;
pub use node::Edge;
pub use options::{Options, OPTIONS};
pub use wire::{Msg, Record, Timer};

use meridian_core::fault_model::{FailureGroup, FaultModel};
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::{AbortReason, ClientRequest, ClientResponse};
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RegionId, RequestId, ShardId,
};

/// The name of the region-manager service.
pub const MANAGER: &str = "manager";
/// Managers per region when the topology does not place them: a manager and two backups.
pub const MANAGERS_PER_REGION: usize = 3;

/// DAST. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Dast;

/// A node of `dast`.
#[derive(Debug)]
pub enum DastNode {
    Edge(Box<Edge>),
    /// A machine's client-facing coordinator node: hands requests to its edge node.
    Port {
        edge: NodeId,
    },
    Manager(Box<Manager>),
    Inert,
}

impl Protocol for Dast {
    type Node = DastNode;
    type Options = Options;

    const NAME: &'static str = "dast";
    const GUARANTEE: &'static str = "strong-partition-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn services(cluster: &Cluster) -> Vec<(String, RegionId)> {
        let mut regions: Vec<RegionId> = cluster
            .nodes
            .iter()
            .filter(|n| matches!(n.role, NodeRole::Replica { .. }))
            .map(|n| n.region)
            .collect();
        regions.sort_unstable();
        regions.dedup();
        regions
            .into_iter()
            .flat_map(|r| std::iter::repeat_n((MANAGER.to_string(), r), MANAGERS_PER_REGION))
            .collect()
    }

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        // The options first, so a bad one is named whatever the topology.
        let options = Options::for_cluster(raw, cluster)?;
        check_regions(cluster)?;
        Ok(options)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> DastNode {
        let cluster = setup.cluster.clone();
        let opts = setup.options.clone();
        match &cluster.node(node).role {
            NodeRole::Replica { .. } => DastNode::Edge(Box::new(Edge::restore(
                node,
                cluster.clone(),
                opts,
                setup.procedures.clone(),
                recovered,
            ))),
            NodeRole::Coordinator { .. } => DastNode::Port {
                edge: crate::kit::placement::port_replica(&cluster, node),
            },
            NodeRole::Service { name, .. } if name == MANAGER => {
                DastNode::Manager(Box::new(Manager::new(node, cluster.clone(), opts)))
            }
            NodeRole::Service { .. } => DastNode::Inert,
        }
    }

    /// An IRT: the round trip to its farthest participant; a CRT: that plus nothing less
    /// than the largest round trip to a participating region.
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .flat_map(|&s| cluster.replicas(s).iter())
            .map(|&r| cluster.rtt_ms(coordinator, r))
            .fold(0.0, f64::max)
    }

    /// A minority of each shard's replicas, and at most one of each region's managers.
    fn fault_model(cluster: &Cluster) -> FaultModel {
        let mut model = FaultModel::minorities(cluster);
        let service = format!("service {MANAGER}");
        model.groups.retain(|g| g.name != service);
        let mut regions: Vec<RegionId> = cluster
            .services(MANAGER)
            .into_iter()
            .map(|m| cluster.region_of(m))
            .collect();
        regions.sort_unstable();
        regions.dedup();
        for region in regions {
            let mut machines: Vec<_> = coord::managers_of(cluster, region)
                .into_iter()
                .map(|m| cluster.machine_of(m))
                .collect();
            machines.sort_unstable();
            machines.dedup();
            let max_down = ((machines.len().max(1) - 1) / 2).max(1);
            model.groups.push(FailureGroup {
                name: format!("{service} {}", cluster.topology.region_name(region)),
                machines,
                max_down,
            });
        }
        model
    }
}

/// §3.1: a shard lives in one region (its host region).
fn check_regions(cluster: &Cluster) -> Result<(), String> {
    for s in 0..cluster.shard_count() {
        let replicas = cluster.replicas(ShardId(s));
        let region = cluster.region_of(replicas[0]);
        if replicas.iter().any(|&r| cluster.region_of(r) != region) {
            return Err(format!(
                "protocol dast replicates a shard only inside its host region (§3.1), but \
                 shard {s} of topology {} has replicas in several regions",
                cluster.topology.name
            ));
        }
    }
    Ok(())
}

impl Node for DastNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            DastNode::Edge(e) => e.on_start(ctx),
            DastNode::Manager(m) => m.on_start(ctx),
            _ => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            DastNode::Edge(e) => e.on_message(ctx, from, msg),
            DastNode::Manager(m) => m.on_message(ctx, from, msg),
            DastNode::Port { .. } => {
                if let Msg::Done { request, outcome } = msg {
                    ctx.respond(request, ClientResponse::Outcome(outcome));
                }
            }
            DastNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            DastNode::Edge(e) => match timer {
                Timer::Heartbeat => e.on_heartbeat(ctx),
                Timer::Tick => {
                    e.coord_tick(ctx);
                    e.participant_tick(ctx);
                    e.membership_tick(ctx);
                    ctx.set_timer(e.opts.retry_ns / 4, Timer::Tick);
                }
            },
            DastNode::Manager(m) => m.on_tick(ctx),
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
            (DastNode::Port { edge }, ClientRequest::OneShot(txn)) => {
                ctx.send(*edge, Msg::Submit { request, txn });
            }
            (DastNode::Port { .. }, ClientRequest::Interactive(_)) => {
                let reason = AbortReason::Unsupported(
                    "dast runs one-shot stored procedures, not interactive transactions (§4.1)"
                        .into(),
                );
                ctx.respond_aborted(request, reason);
            }
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn on_batch_end(&mut self, ctx: &mut Ctx<'_, Self>) {
        if let DastNode::Edge(e) = self {
            e.on_batch_end(ctx);
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            DastNode::Edge(e) => e.check_invariants(),
            _ => Ok(()),
        }
    }
}
