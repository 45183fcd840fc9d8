//! The event loop: one binary heap of events ordered by (virtual time, sequence number).

use crate::clock::ClockModel;
use crate::codec;
use crate::faults::{ms_to_ns, Fault, FaultPlan};
use crate::network::{Fate, Network};
use crate::queue::Queue;
use crate::report::{ClockErrorSampler, Finished, SimReport, TimelineBuilder};
use meridian_bench::driver::{entry_type, LoadCore, Next};
use meridian_bench::Results;
use meridian_core::host::{Action, BrokenInvariant, Handled, MemoryLog, NodeAction, NodeHost};
use meridian_core::node::Setup;
use meridian_core::time::NS_PER_S;
use meridian_core::topology::NodeRole;
use meridian_core::txn::{ClientRequest, ClientResponse, Outcome};
use meridian_core::{
    ClientId, Cluster, MachineId, Node, NodeId, NodeRng, Procedures, Protocol, ProtocolConfig,
    RequestId, TimerId, Topology,
};
use meridian_workload::Workload;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::{FxHashMap, FxHasher};
use std::collections::VecDeque;
use std::hash::Hasher;

/// Local clocks read `EPOCH_NS + true time + error`: a realistic wall-clock value, far
/// enough from zero that no clock error makes a reading negative.
pub const EPOCH_NS: u64 = 1_700_000_000 * NS_PER_S;

/// The hop between a client and its coordinator, each way. Clients live beside their
/// coordinator (a function call, not a network link), but a zero hop would let a protocol
/// that answers at once spin a closed-loop client forever at one instant of virtual time.
const CLIENT_HOP_NS: u64 = 1_000;

/// How long a client waits before retrying a submission to a coordinator that is down.
const COORDINATOR_DOWN_RETRY_NS: u64 = 100_000_000;

/// How a run is shaped.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub seed: u64,
    /// Virtual time during which clients submit transactions.
    pub duration_ns: u64,
    /// Virtual time after `duration_ns` for in-flight transactions to finish; faults are
    /// healed and crashed nodes restarted at its start.
    pub drain_ns: u64,
    pub clients_per_coordinator: u32,
    /// A client reports `unknown` for a request unanswered this long.
    pub client_timeout_ns: u64,
    /// Per-node processing time of each event (0: infinitely fast nodes).
    pub service_time_ns: u64,
    /// With a service time: each node's worker threads, each with its own FIFO backlog. An
    /// event joins the backlog of a worker drawn at random (a request lands on the queue of
    /// the thread its connection is bound to, not on the least busy one), so with more than
    /// one worker, events can run out of their arrival order. 1, the default: one queue.
    pub workers: u32,
    /// The machine's nodes share its `workers` (one pool per machine, not per node): the
    /// testbed's threads each serve every role the machine hosts (Aurogon §6.1: 8 threads
    /// per server, each coordinator, primary and backup), so a role's work takes CPU from
    /// its mates. `false`, the default: every node has its own `workers`.
    pub machine_workers: bool,
    pub faults: FaultPlan,
    pub record_history: bool,
    /// Open-loop load (Tiga §5.1) instead of closed-loop clients: each coordinator gets
    /// transactions at a rate, up to a cap of outstanding ones.
    pub open_loop: Option<OpenLoop>,
    /// Bucket length of [`SimReport::timeline`] (0: no timeline), default 1 s.
    pub timeline_bucket_ns: u64,
    /// Batching as the runtime does it: a node's events due at one instant, and those that
    /// queued in its backlog while it was busy (a service time), run as one batch of at
    /// most this many before `Node::on_batch_end` (the runtime's inbox batch is 64).
    /// 1, the default, ends a batch after every event.
    pub batch_max: u32,
    /// Timers fire at the next multiple of this (0: exactly), as the runtime's
    /// millisecond timer wheel does; a race between a timer and a message that only the
    /// runtime's coarse timers lose shows up in the simulator with 1 ms here.
    pub timer_granularity_ns: u64,
    /// Steady-state measurement: with `Some(w)`, the results (per-region latency and
    /// throughput, [`SimReport::regions`]) count only the transactions that *finish*
    /// between `w` and the end of the load (`duration_ns`). Neither the ramp-up before `w`
    /// nor the backlog finished in the drain is measured — at saturation an open loop
    /// holds its cap of outstanding transactions, which the drain would otherwise add to
    /// the throughput (8 coordinators × a cap of 8,000 over 1 s of load: +64 K txns/s).
    /// Outcome counts, the history and the timeline still see every transaction.
    /// `None` (default): every transaction is measured.
    pub steady_from_ns: Option<u64>,
    /// Closed-loop clients send an aborted transaction again until it commits (see
    /// [`meridian_bench::LoadCore::retry_next`]) instead of drawing a new one.
    pub retry_aborted: bool,
    /// With `retry_aborted`: how long an aborted transaction waits in its client's retry
    /// queue while the client runs fresh ones (0, the default: it is the next one). The
    /// Aurogon artifact's harness waits 500 µs.
    pub retry_interval_ns: u64,
}

/// Open-loop load: "each coordinator submits transactions at a given rate; the coordinator
/// maintains a cap on the outstanding transactions and stops submitting new transactions
/// once this cap is reached" (Tiga §5.1). Arrivals are Poisson at `rate_tps` per
/// coordinator; an arrival that finds `max_outstanding` transactions in flight is not
/// submitted (counted in [`SimReport::throttled`]). `clients_per_coordinator` is ignored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenLoop {
    pub rate_tps: f64,
    pub max_outstanding: u32,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            seed: 1,
            duration_ns: 10 * NS_PER_S,
            drain_ns: 10 * NS_PER_S,
            clients_per_coordinator: 2,
            client_timeout_ns: 5 * NS_PER_S,
            service_time_ns: 0,
            workers: 1,
            machine_workers: false,
            faults: FaultPlan::default(),
            record_history: true,
            open_loop: None,
            timeline_bucket_ns: NS_PER_S,
            batch_max: 1,
            timer_granularity_ns: 0,
            steady_from_ns: None,
            retry_aborted: false,
            retry_interval_ns: 0,
        }
    }
}

/// Where a run is, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub virtual_ns: u64,
    pub end_ns: u64,
    pub events: u64,
    pub committed: u64,
}

/// Builds the protocol's cluster (with its services) from a topology and parses its options.
pub fn setup<P: Protocol>(
    topology: Topology,
    config: ProtocolConfig,
    procedures: Procedures,
) -> Result<Setup<P>, String> {
    Setup::new(topology, &config, procedures)
}

enum Event<M, T> {
    Deliver {
        from: NodeId,
        to: NodeId,
        msg: M,
    },
    Timer {
        node: NodeId,
        incarnation: u32,
        id: TimerId,
        timer: T,
    },
    Request {
        to: NodeId,
        request: RequestId,
        req: ClientRequest,
    },
    Response {
        request: RequestId,
        response: ClientResponse,
    },
    ClientNext {
        client: u32,
    },
    /// An open-loop arrival at coordinator `coordinator` (an index into the coordinators).
    Arrival {
        coordinator: u32,
    },
    ClientTimeout {
        client: u32,
        request: RequestId,
    },
    Fault(Fault),
    EndOfLoad,
    /// A busy worker of a node is free again: it takes the next event of its backlog.
    /// Stale once the node has crashed since (another incarnation).
    Serve {
        node: NodeId,
        incarnation: u32,
        worker: u32,
    },
    /// With `batch_max > 1`: the node's open batch ends (queued behind every event due at
    /// the same instant). Stale for another incarnation.
    BatchEnd {
        node: NodeId,
        incarnation: u32,
    },
}

type EventOf<P> =
    Event<<<P as Protocol>::Node as Node>::Msg, <<P as Protocol>::Node as Node>::Timer>;

/// A node slot: the node's host (the driver core: the live state machine, its timers,
/// incarnation and batch), its durable log, and the simulator's model of its CPU.
struct Slot<N: Node> {
    host: NodeHost<N>,
    durable: MemoryLog<N::Record>,
    /// The node's worker threads ([`SimOptions::workers`]; one by default). With
    /// [`SimOptions::machine_workers`] only the machine's first node's are used, by all
    /// its nodes ([`Sim::pool_of`]).
    workers: Vec<Worker<Event<N::Msg, N::Timer>>>,
    /// An [`Event::BatchEnd`] for this incarnation is queued.
    batch_end_queued: bool,
}

/// One worker thread of a node's CPU (with a service time).
struct Worker<E> {
    /// The worker is busy with an event until then.
    busy_until_ns: u64,
    /// Events that reached the worker while it was busy, served in arrival order, one
    /// [`Event::Serve`] at a time (re-queuing them all at every free instant would cost
    /// O(backlog²) events).
    backlog: VecDeque<E>,
    /// An [`Event::Serve`] for this worker and incarnation is queued.
    serve_queued: bool,
}

impl<E> Worker<E> {
    fn idle() -> Self {
        Worker {
            busy_until_ns: 0,
            backlog: VecDeque::new(),
            serve_queued: false,
        }
    }
}

struct Sim<'w, P: Protocol> {
    setup: Setup<P>,
    options: SimOptions,
    now_ns: u64,
    seq: u64,
    queue: Queue<EventOf<P>>,
    /// Cancelled timers still in the queue (an upper bound; reset by compaction).
    dead_timers: usize,
    slots: Vec<Slot<P::Node>>,
    /// One clock per machine (`Cluster::machines`): colocated nodes read the same clock.
    clocks: Vec<ClockModel>,
    /// The machine whose clock is the reference, for kinds that have one (Aurogon §5.3).
    clock_root: Option<MachineId>,
    clock_errors: ClockErrorSampler,
    network: Network,
    net_rng: ChaCha8Rng,
    /// The clients and their transactions in flight (the load driver's core, shared with
    /// the runtime).
    load: LoadCore,
    /// Each client's request in flight, if any.
    client_requests: Vec<Option<RequestId>>,
    requests: FxHashMap<RequestId, u32>,
    next_request: u64,
    workload: &'w mut dyn Workload,
    loading: bool,
    trace: FxHasher,
    report: SimReport,
    results: Results,
    actions: Vec<NodeAction<P::Node>>,
    /// The time of the last event popped and put back (the queue refuses earlier ones).
    resume_ns: u64,
    /// Open-loop arrival times.
    arrival_rng: ChaCha8Rng,
    /// Storage faults: how many unsynced records survive a crash (a stream of its own, so
    /// the other streams replay the same with or without them).
    storage_rng: ChaCha8Rng,
    /// Which worker an event joins ([`SimOptions::workers`]); drawn only with several.
    worker_rng: ChaCha8Rng,
    timeline: TimelineBuilder,
}

/// Runs `workload` against protocol `P` on `setup` and returns what happened.
pub fn run<P: Protocol>(
    setup: &Setup<P>,
    workload: &mut dyn Workload,
    options: &SimOptions,
    progress: &mut dyn FnMut(Progress),
) -> SimReport {
    let mut sim = Sim::<P>::new(setup.clone(), workload, options.clone());
    sim.boot();
    let end_ns = options.duration_ns + options.drain_ns;
    while let Some((at_ns, event)) = sim.queue.pop() {
        if at_ns > end_ns {
            // Kept for the audit, which goes on from here.
            sim.push(at_ns, event);
            sim.resume_ns = at_ns;
            break;
        }
        sim.sample_clocks_until(at_ns);
        sim.now_ns = at_ns;
        sim.dispatch(event);
        sim.report.events += 1;
        if sim.report.events.is_multiple_of(65_536) {
            progress(Progress {
                virtual_ns: sim.now_ns,
                end_ns,
                events: sim.report.events,
                committed: sim.report.committed,
            });
        }
    }
    sim.sample_clocks_until(end_ns);
    sim.now_ns = end_ns;
    sim.finish()
}

/// The first wait between failed audit attempts (doubling, at most 8×).
const AUDIT_BACKOFF_NS: u64 = NS_PER_S;

/// Virtual time one audit transaction may take before it counts as not committed.
const AUDIT_TXN_LIMIT_NS: u64 = 30 * NS_PER_S;

impl<'w, P: Protocol> Sim<'w, P> {
    fn new(setup: Setup<P>, workload: &'w mut dyn Workload, options: SimOptions) -> Self {
        let cluster = setup.cluster.clone();
        let slots = cluster
            .nodes
            .iter()
            .map(|info| Slot {
                host: NodeHost::new(
                    info.id,
                    node_rng(options.seed, info.id, 0),
                    options.batch_max,
                ),
                durable: if options.faults.storage {
                    MemoryLog::with_storage_faults()
                } else {
                    MemoryLog::default()
                },
                workers: (0..options.workers.max(1))
                    .map(|_| Worker::idle())
                    .collect(),
                batch_end_queued: false,
            })
            .collect();
        // Seeded by the machine's first node, so a machine per node keeps each node's clock.
        // The first machine holds the first root clock (Aurogon §5.2.2 picks one at random;
        // a fixed pick lets a fault plan name it: `crash:` any of machine 0's nodes).
        let clocks: Vec<ClockModel> = cluster
            .machines
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let first = m.nodes[0];
                ClockModel::with_root(
                    &cluster.node(first).clock.params,
                    mix(options.seed, 0xC10C, u64::from(first.0)),
                    i == 0,
                )
            })
            .collect();
        let clock_root = clocks
            .first()
            .is_some_and(ClockModel::has_root)
            .then_some(MachineId(0));
        let slots_per_coordinator = match options.open_loop {
            Some(open) => open.max_outstanding,
            None => options.clients_per_coordinator,
        };
        let clients = meridian_workload::place_clients(&cluster, slots_per_coordinator);
        let load = LoadCore::new(&cluster, clients, |i| {
            ChaCha8Rng::seed_from_u64(mix(options.seed, 0xC11E, i as u64))
        });
        let report = SimReport {
            invariant: Ok(()),
            ..SimReport::default()
        };
        Sim {
            timeline: TimelineBuilder::new(
                options.timeline_bucket_ns,
                options.duration_ns + options.drain_ns,
            ),
            clock_errors: ClockErrorSampler::new(options.timeline_bucket_ns),
            arrival_rng: ChaCha8Rng::seed_from_u64(mix(options.seed, 0xA771, 0)),
            storage_rng: ChaCha8Rng::seed_from_u64(mix(options.seed, 0x5707, 0)),
            worker_rng: ChaCha8Rng::seed_from_u64(mix(options.seed, 0x3047, 0)),
            network: Network::new(&cluster),
            net_rng: ChaCha8Rng::seed_from_u64(mix(options.seed, 0x4E7, 0)),
            setup,
            options,
            now_ns: 0,
            seq: 0,
            queue: Queue::new(),
            dead_timers: 0,
            slots,
            clocks,
            clock_root,
            client_requests: vec![None; load.len()],
            load,
            results: Results::for_cluster(&cluster),
            requests: FxHashMap::default(),
            next_request: 0,
            workload,
            loading: true,
            trace: FxHasher::default(),
            report,
            actions: Vec::new(),
            resume_ns: 0,
        }
    }

    fn cluster(&self) -> &Cluster {
        &self.setup.cluster
    }

    fn push(&mut self, at_ns: u64, event: EventOf<P>) {
        self.seq += 1;
        self.queue.push(at_ns, self.seq, event);
    }

    fn boot(&mut self) {
        for i in 0..self.slots.len() {
            self.start_node(NodeId(i as u32));
        }
        for (at, fault) in self.options.faults.faults.clone() {
            self.push(at, Event::Fault(fault));
        }
        for step in self.cluster().clock_steps.clone() {
            let at = (step.at_ms * 1e6) as u64;
            self.push(
                at,
                Event::Fault(Fault::ClockStep {
                    node: step.node,
                    step_ms: step.step_ms,
                }),
            );
        }
        if self.options.open_loop.is_some() {
            for coordinator in 0..self.cluster().coordinators.len() as u32 {
                let at = self.interarrival_ns();
                self.push(at, Event::Arrival { coordinator });
            }
        } else {
            for client in 0..self.load.len() as u32 {
                self.schedule_client(client);
            }
        }
        self.push(self.options.duration_ns, Event::EndOfLoad);
    }

    /// Samples every clock at each sampling instant up to `at_ns` (never before a reading
    /// already taken: the previous event was at or before the next instant).
    fn sample_clocks_until(&mut self, at_ns: u64) {
        let end_ns = self.options.duration_ns + self.options.drain_ns;
        if self.clock_errors.next_ns > at_ns.min(end_ns) {
            return; // the common case: no allocation per event
        }
        let mut errors = Vec::with_capacity(self.clocks.len());
        while self.clock_errors.next_ns <= at_ns.min(end_ns) {
            let t = self.clock_errors.next_ns;
            errors.clear();
            errors.extend(self.clocks.iter_mut().map(|c| c.sample_error_ns(t)));
            self.clock_errors.record(&errors);
        }
    }

    /// The root clock's machine crashed: the next machine up (in index order) whose clock
    /// can be a root takes over and every other clock fails over to it (Aurogon §5.3).
    fn fail_over_clock_root(&mut self, crashed: MachineId) {
        if self.clock_root != Some(crashed) {
            return;
        }
        let machines = self.clocks.len();
        let candidate = (1..machines)
            .map(|k| MachineId(((crashed.index() + k) % machines) as u32))
            .find(|m| {
                let first = self.setup.cluster.machines[m.index()].nodes[0];
                self.slots[first.index()].host.is_up() && self.clocks[m.index()].has_root()
            });
        let Some(new_root) = candidate else {
            return; // Nobody left to follow: the clocks free-run on their last mapping.
        };
        let Some(reference) = self.clocks[new_root.index()].take_root(self.now_ns) else {
            return;
        };
        for (i, clock) in self.clocks.iter_mut().enumerate() {
            if i != new_root.index() {
                clock.follow_root(self.now_ns, reference);
            }
        }
        self.clock_root = Some(new_root);
        self.count_fault("clock root failover");
    }

    fn local_now(&mut self, node: NodeId) -> u64 {
        let machine = self.setup.cluster.machine_of(node);
        let reading = self.clocks[machine.index()].read(self.now_ns) + i128::from(EPOCH_NS);
        u64::try_from(reading).expect("clock reading below the epoch: error larger than 1.7e9 s")
    }

    /// Runs `handler` on `node` through its host, then carries out the actions.
    fn with_node(
        &mut self,
        node: NodeId,
        handler: impl FnOnce(&mut P::Node, &mut meridian_core::node::Ctx<'_, P::Node>),
    ) {
        let now_local = self.local_now(node);
        let mut actions = std::mem::take(&mut self.actions);
        let slot = &mut self.slots[node.index()];
        slot.host.set_true_ns(Some(self.now_ns + EPOCH_NS));
        let handled = slot.host.handle(now_local, handler, &mut actions);
        match handled.unwrap_or_else(|broken| self.invariant_broken(broken)) {
            Handled::NodeDown | Handled::BatchEnded => {}
            Handled::BatchOpen => {
                let slot = &mut self.slots[node.index()];
                if !slot.batch_end_queued {
                    slot.batch_end_queued = true;
                    let incarnation = slot.host.incarnation();
                    self.push(self.now_ns, Event::BatchEnd { node, incarnation });
                }
            }
        }
        self.carry_out(node, actions);
    }

    fn invariant_broken(&self, broken: BrokenInvariant) -> ! {
        panic!(
            "{} ({}) broke an invariant at {} ns of virtual time: {} (seed {})",
            broken.node,
            self.setup.cluster.node(broken.node).name,
            self.now_ns,
            broken.message,
            self.options.seed
        );
    }

    /// Carries out `actions` in order and keeps the buffer for the next event.
    fn carry_out(&mut self, node: NodeId, mut actions: Vec<NodeAction<P::Node>>) {
        for action in actions.drain(..) {
            self.apply(node, action);
        }
        self.actions = actions;
    }

    fn apply(&mut self, node: NodeId, action: NodeAction<P::Node>) {
        match action {
            Action::Send { to, msg } => {
                // A message leaves: the node's records before it are durable (the host put
                // a sync before it; see the storage-fault model in `faults`).
                self.slots[node.index()].durable.sync();
                self.send(node, to, msg)
            }
            Action::ArmTimer {
                id,
                incarnation,
                after_ns,
                timer,
            } => {
                let at_ns = round_up(self.now_ns + after_ns, self.options.timer_granularity_ns);
                let timer = Event::Timer {
                    node,
                    incarnation,
                    id,
                    timer,
                };
                self.push(at_ns, timer);
            }
            Action::DisarmTimer { .. } => {
                self.dead_timers += 1;
                self.compact_if_mostly_dead();
            }
            Action::Respond { request, response } => {
                self.slots[node.index()].durable.sync();
                self.push(self.now_ns, Event::Response { request, response })
            }
            Action::Persist { record, checkpoint } => {
                self.slots[node.index()].durable.write(record, checkpoint)
            }
            // Syncs take effect when a message leaves (above): records no message followed
            // are what a storage fault may lose at a crash.
            Action::Sync => {}
            Action::Count { name, by } => *self.report.counters.entry(name).or_default() += by,
        }
    }

    /// Cancelled timers stay queued until their time; when they make up most of a large
    /// queue, drop them so the heap stays small and cache-friendly.
    fn compact_if_mostly_dead(&mut self) {
        if self.dead_timers < 4096 || self.dead_timers * 2 < self.queue.len() {
            return;
        }
        let slots = &self.slots;
        self.queue.retain(|event| match event {
            Event::Timer {
                node,
                incarnation,
                id,
                ..
            } => slots[node.index()].host.timer_is_live(*incarnation, *id),
            _ => true,
        });
        self.dead_timers = 0;
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: <P::Node as Node>::Msg) {
        assert!(
            to.index() < self.slots.len(),
            "{from} sent to unknown node {to}"
        );
        self.report.messages_sent += 1;
        let msg = if codec::sampled(self.report.messages_sent) {
            codec::round_trip(&msg)
        } else {
            msg
        };
        match self
            .network
            .fate(&mut self.net_rng, &self.setup.cluster, from, to)
        {
            Fate::Dropped => self.report.messages_dropped += 1,
            Fate::Delivered(first, second) => {
                if let Some(second) = second {
                    self.push(
                        self.now_ns + second,
                        Event::Deliver {
                            from,
                            to,
                            msg: msg.clone(),
                        },
                    );
                }
                self.push(self.now_ns + first, Event::Deliver { from, to, msg });
            }
        }
    }

    /// Takes a service slot of the node for an event arriving now: `Ok` if the event runs
    /// at once, or `Err(worker)` when the worker it landed on is busy or others wait there
    /// before it (the event then joins that worker's backlog).
    fn take_service_slot(&mut self, node: NodeId) -> Result<(), u32> {
        let service_ns = self.options.service_time_ns;
        if service_ns == 0 {
            return Ok(());
        }
        let node = self.pool_of(node);
        let count = self.slots[node.index()].workers.len();
        let w = if count > 1 {
            self.worker_rng.gen_range(0..count)
        } else {
            0
        };
        let worker = &mut self.slots[node.index()].workers[w];
        if worker.busy_until_ns > self.now_ns || !worker.backlog.is_empty() {
            return Err(w as u32);
        }
        worker.busy_until_ns = self.now_ns + service_ns;
        Ok(())
    }

    /// The node whose workers serve `node`'s events: itself, or with
    /// [`SimOptions::machine_workers`] its machine's first node. Machine mates crash and
    /// restart together, so that node's incarnation also dates its mates' queued events.
    fn pool_of(&self, node: NodeId) -> NodeId {
        if !self.options.machine_workers {
            return node;
        }
        let cluster = &self.setup.cluster;
        cluster.machines[cluster.machine_of(node).index()].nodes[0]
    }

    /// Queues the [`Event::Serve`] that takes the worker's next backlog event when it is
    /// free.
    fn queue_serve(&mut self, node: NodeId, w: u32) {
        let slot = &mut self.slots[node.index()];
        let incarnation = slot.host.incarnation();
        let worker = &mut slot.workers[w as usize];
        if worker.serve_queued || worker.backlog.is_empty() {
            return;
        }
        worker.serve_queued = true;
        let at_ns = worker.busy_until_ns.max(self.now_ns);
        self.push(
            at_ns,
            Event::Serve {
                node,
                incarnation,
                worker: w,
            },
        );
    }

    /// The worker is free: it serves the oldest event of its backlog.
    fn serve(&mut self, node: NodeId, incarnation: u32, w: u32) {
        let service_ns = self.options.service_time_ns;
        let slot = &mut self.slots[node.index()];
        if slot.host.incarnation() != incarnation {
            return;
        }
        let worker = &mut slot.workers[w as usize];
        assert!(
            worker.busy_until_ns <= self.now_ns,
            "{node} served while busy"
        );
        worker.serve_queued = false;
        let Some(event) = worker.backlog.pop_front() else {
            return;
        };
        worker.busy_until_ns = self.now_ns + service_ns;
        self.queue_serve(node, w);
        self.handle(event);
    }

    /// A timer cancelled since it was set, or set by an earlier incarnation.
    fn timer_is_dead(&self, node: NodeId, incarnation: u32, id: TimerId) -> bool {
        !self.slots[node.index()].host.timer_is_live(incarnation, id)
    }

    fn dispatch(&mut self, event: EventOf<P>) {
        let target = match &event {
            Event::Deliver { to, .. } | Event::Request { to, .. } => Some(*to),
            Event::Timer {
                node,
                incarnation,
                id,
                ..
            } => {
                if self.timer_is_dead(*node, *incarnation, *id) {
                    return; // costs the node no service time
                }
                Some(*node)
            }
            _ => None,
        };
        if let Some(node) = target {
            if !self.slots[node.index()].host.is_up() {
                return;
            }
            if let Err(w) = self.take_service_slot(node) {
                let pool = self.pool_of(node);
                self.slots[pool.index()].workers[w as usize]
                    .backlog
                    .push_back(event);
                self.queue_serve(pool, w);
                return;
            }
        }
        self.handle(event);
    }

    /// Carries out one event whose node (if any) is up and free.
    fn handle(&mut self, event: EventOf<P>) {
        self.trace_event(&event);
        match event {
            Event::Deliver { from, to, msg } => {
                self.report.messages_delivered += 1;
                self.with_node(to, |n, ctx| n.on_message(ctx, from, msg));
            }
            Event::Timer {
                node,
                incarnation,
                id,
                timer,
            } => {
                if self.slots[node.index()].host.take_timer(incarnation, id) {
                    self.with_node(node, |n, ctx| n.on_timer(ctx, timer));
                }
            }
            Event::Request { to, request, req } => {
                self.with_node(to, |n, ctx| n.on_client_request(ctx, request, req))
            }
            Event::Response { request, response } => self.on_response(request, response),
            Event::ClientNext { client } => self.client_next(client),
            Event::Arrival { coordinator } => self.arrival(coordinator),
            Event::ClientTimeout { client, request } => self.on_timeout(client, request),
            Event::Fault(fault) => self.apply_fault(fault),
            Event::EndOfLoad => self.end_of_load(),
            Event::Serve {
                node,
                incarnation,
                worker,
            } => self.serve(node, incarnation, worker),
            Event::BatchEnd { node, incarnation } => self.end_batch(node, incarnation),
        }
    }

    /// Closes `node`'s open batch (see [`SimOptions::batch_max`]).
    fn end_batch(&mut self, node: NodeId, incarnation: u32) {
        let slot = &mut self.slots[node.index()];
        if slot.host.incarnation() != incarnation {
            return;
        }
        slot.batch_end_queued = false;
        // Events that queued while the node was busy are the runtime's full inbox: they
        // join the batch (the next one handled queues this end again).
        let pool = &self.slots[self.pool_of(node).index()];
        if pool.workers.iter().any(|w| !w.backlog.is_empty()) {
            return;
        }
        let now_local = self.local_now(node);
        let mut actions = std::mem::take(&mut self.actions);
        let host = &mut self.slots[node.index()].host;
        host.set_true_ns(Some(self.now_ns + EPOCH_NS));
        let ended = host.end_batch(now_local, &mut actions);
        ended.unwrap_or_else(|broken| self.invariant_broken(broken));
        self.carry_out(node, actions);
    }

    fn trace_event(&mut self, event: &EventOf<P>) {
        let (kind, a, b) = match event {
            Event::Deliver { from, to, .. } => (1, from.0 as u64, to.0 as u64),
            Event::Timer { node, id, .. } => (2, node.0 as u64, id.0),
            Event::Request { to, request, .. } => (3, to.0 as u64, request.0),
            Event::Response { request, .. } => (4, request.0, 0),
            Event::ClientNext { client } => (5, u64::from(*client), 0),
            Event::Arrival { coordinator } => (9, u64::from(*coordinator), 0),
            Event::ClientTimeout { client, request } => (6, u64::from(*client), request.0),
            Event::Fault(_) => (7, 0, 0),
            Event::EndOfLoad => (8, 0, 0),
            Event::Serve { node, worker, .. } => (10, node.0 as u64, u64::from(*worker)),
            Event::BatchEnd { node, .. } => (11, node.0 as u64, 0),
        };
        self.trace.write_u64(self.now_ns);
        self.trace.write_u64(kind);
        self.trace.write_u64(a);
        self.trace.write_u64(b);
    }

    // ---- nodes and faults -------------------------------------------------------------

    fn start_node(&mut self, node: NodeId) {
        let slot = &mut self.slots[node.index()];
        // Rebuilt from what the runtime would read back from its log (see `codec`).
        let records: Vec<_> = slot
            .durable
            .records()
            .iter()
            .map(codec::round_trip)
            .collect();
        let built = P::build(node, &self.setup, &records);
        let rng = node_rng(self.options.seed, node, slot.host.incarnation());
        slot.host.start(built, rng);
        self.with_node(node, |n, ctx| n.on_start(ctx));
    }

    fn apply_fault(&mut self, fault: Fault) {
        match fault {
            // A machine fails as a whole: every role it hosts crashes and restarts with it.
            Fault::Crash(node) => {
                for mate in self.setup.cluster.clone().machine_mates(node) {
                    if self.slots[mate.index()].host.is_up() {
                        let kind = match &self.setup.cluster.node(*mate).role {
                            NodeRole::Replica { .. } => "crash replica".to_string(),
                            NodeRole::Coordinator { .. } => "crash coordinator".to_string(),
                            NodeRole::Service { name, .. } => format!("crash service {name}"),
                        };
                        *self.report.faults_applied.entry(kind).or_default() += 1;
                    }
                    self.crash_node(*mate);
                }
                self.fail_over_clock_root(self.setup.cluster.machine_of(node));
            }
            Fault::Restart(node) => {
                for mate in self.setup.cluster.clone().machine_mates(node) {
                    if !self.slots[mate.index()].host.is_up() {
                        self.start_node(*mate);
                    }
                }
            }
            Fault::Partition { a, b } => {
                self.count_fault("partition");
                self.network.partition(&a, &b)
            }
            Fault::Heal => self.network.heal(),
            Fault::Loss(p) => {
                if p > 0.0 {
                    self.count_fault("loss");
                }
                self.network.loss = p
            }
            Fault::Duplicate(p) => {
                if p > 0.0 {
                    self.count_fault("duplication");
                }
                self.network.duplicate = p
            }
            Fault::ClockStep { node, step_ms } => {
                self.count_fault("clock step");
                let machine = self.setup.cluster.machine_of(node);
                self.clocks[machine.index()].step(ms_to_ns(step_ms))
            }
        }
    }

    fn count_fault(&mut self, kind: &str) {
        *self
            .report
            .faults_applied
            .entry(kind.to_string())
            .or_default() += 1;
    }

    fn crash_node(&mut self, node: NodeId) {
        let slot = &mut self.slots[node.index()];
        if slot.host.crash() {
            let rng = &mut self.storage_rng;
            let lost = slot.durable.crash(|count| rng.gen_range(0..=count));
            if lost > 0 {
                *self
                    .report
                    .faults_applied
                    .entry("storage: unsynced records lost".to_string())
                    .or_default() += 1;
            }
            // What waited for the node dies with it, as its inbox would.
            for worker in &mut slot.workers {
                *worker = Worker::idle();
            }
            slot.batch_end_queued = false;
        }
    }

    /// Stops new submissions, heals the network and restarts every crashed node so that
    /// in-flight transactions can finish during the drain.
    fn end_of_load(&mut self) {
        self.loading = false;
        self.network.heal();
        self.network.loss = 0.0;
        self.network.duplicate = 0.0;
        for i in 0..self.slots.len() {
            if !self.slots[i].host.is_up() {
                self.start_node(NodeId(i as u32));
            }
        }
    }

    // ---- clients ------------------------------------------------------------------------

    fn client_next(&mut self, client: u32) {
        if !self.loading || !self.load.is_idle(client) {
            return;
        }
        let coordinator = self.load.info(client).coordinator;
        if !self.slots[coordinator.index()].host.is_up() {
            self.push(
                self.now_ns + COORDINATOR_DOWN_RETRY_NS,
                Event::ClientNext { client },
            );
            return;
        }
        let req = self.load.begin(client, &mut *self.workload, self.now_ns);
        let request = self.fresh_request(client);
        self.submit(client, request, req);
    }

    /// An open-loop arrival: the first idle client slot of the coordinator takes it, or it
    /// is throttled (the cap is reached); then the next arrival is scheduled.
    fn arrival(&mut self, coordinator: u32) {
        if !self.loading {
            return;
        }
        match self.load.idle_client_at(coordinator as usize) {
            Some(client) => self.client_next(client),
            None => self.results.throttled += 1,
        }
        let at = self.now_ns + self.interarrival_ns();
        self.push(at, Event::Arrival { coordinator });
    }

    /// An exponential interarrival time at the open-loop rate (at least 1 ns).
    fn interarrival_ns(&mut self) -> u64 {
        let rate = self.options.open_loop.expect("open loop").rate_tps;
        meridian_bench::driver::interarrival_ns(&mut self.arrival_rng, rate)
    }

    fn fresh_request(&mut self, client: u32) -> RequestId {
        self.next_request += 1;
        let request = RequestId(self.next_request);
        self.requests.insert(request, client);
        self.client_requests[client as usize] = Some(request);
        request
    }

    fn submit(&mut self, client: u32, request: RequestId, req: ClientRequest) {
        let to = self.load.info(client).coordinator;
        self.push(
            self.now_ns + CLIENT_HOP_NS,
            Event::Request { to, request, req },
        );
        self.push(
            self.now_ns + self.options.client_timeout_ns,
            Event::ClientTimeout { client, request },
        );
    }

    fn on_timeout(&mut self, client: u32, request: RequestId) {
        if self.requests.remove(&request).is_none() {
            return;
        }
        let outcome = Outcome::Unknown {
            reason: "client timeout".to_string(),
        };
        self.finish_txn(client, outcome);
    }

    fn on_response(&mut self, request: RequestId, response: ClientResponse) {
        let Some(client) = self.requests.remove(&request) else {
            return; // late answer to a request that already timed out
        };
        match self.load.on_answer(client, response) {
            Ok(Next::Done(outcome)) => self.finish_txn(client, outcome),
            Ok(Next::Send(req)) => {
                let request = self.fresh_request(client);
                self.submit(client, request, req);
            }
            Err(broken) => panic!("the protocol broke the client contract: {broken}"),
        }
    }

    fn finish_txn(&mut self, client: u32, outcome: Outcome) {
        let flight = self
            .load
            .finish(client, &outcome)
            .expect("finish of an idle client");
        if let Some(request) = self.client_requests[client as usize].take() {
            self.requests.remove(&request);
        }
        let kind = entry_type(&outcome);
        self.count_outcome(client, &flight, &outcome);
        self.trace.write_u8(kind as u8);
        if self.options.record_history {
            // Numbered by the load core in the order transactions end: the history's order.
            let entry =
                flight.history_entry(&*self.workload, u64::from(client), &outcome, self.now_ns);
            debug_assert_eq!(entry.index, self.report.history.len() as u64);
            self.report.history.push(entry);
        }
        if self.options.retry_aborted && self.options.open_loop.is_none() {
            let interval_ns = self.options.retry_interval_ns;
            self.load
                .retry_next(client, &flight, &outcome, self.now_ns, interval_ns);
        }
        if self.loading && self.options.open_loop.is_none() {
            self.schedule_client(client);
        }
    }

    /// The client's next submission, after the workload's think time (none past the load).
    fn schedule_client(&mut self, client: u32) {
        let think = self.workload.think_ns(ClientId(client), self.now_ns);
        let at = self.now_ns.saturating_add(think);
        if at < self.options.duration_ns {
            self.push(at, Event::ClientNext { client });
        }
    }

    fn count_outcome(&mut self, client: u32, flight: &meridian_bench::InFlight, outcome: &Outcome) {
        let coordinator = self.load.info(client).coordinator;
        let bound = outcome
            .is_committed()
            .then(|| P::bound_ms(self.cluster(), coordinator, &flight.shards));
        let done = flight.finished(self.load.region(client), outcome, self.now_ns, bound);
        if self.is_measured(self.now_ns) {
            self.results.record(&done);
        }
        let finished = match outcome {
            Outcome::Committed { .. } => Finished::Committed {
                latency_ns: done.latency_ns,
            },
            Outcome::Aborted { .. } => Finished::Aborted,
            Outcome::Unknown { .. } => Finished::Unknown,
        };
        self.timeline.record(self.now_ns, finished);
        match outcome {
            Outcome::Committed { .. } => self.report.committed += 1,
            Outcome::Aborted { .. } => self.report.aborted += 1,
            Outcome::Unknown { .. } => self.report.unknown += 1,
        }
    }

    /// Whether a transaction finishing at `at_ns` is in the results (see
    /// [`SimOptions::steady_from_ns`]).
    fn is_measured(&self, at_ns: u64) -> bool {
        match self.options.steady_from_ns {
            None => true,
            Some(from_ns) => from_ns <= at_ns && at_ns <= self.options.duration_ns,
        }
    }

    fn finish(mut self) -> SimReport {
        for client in 0..self.load.len() as u32 {
            if !self.load.is_idle(client) {
                self.finish_txn(
                    client,
                    Outcome::Unknown {
                        reason: "run ended".to_string(),
                    },
                );
            }
        }
        self.report.abort_reasons = self.results.abort_reasons();
        self.report.throttled = self.results.throttled;
        self.report.regions = std::mem::take(&mut self.results.regions);
        let timeline = std::mem::take(&mut self.timeline);
        self.report.timeline = timeline.finish();
        self.report.clock_error = std::mem::take(&mut self.clock_errors).finish();
        self.report.virtual_ns = self.now_ns;
        self.report.trace_hash = self.trace.finish();
        self.report.leaders_at_end = self.leader_beliefs();
        self.report.invariant = self.workload.check_history(&self.report.history);
        let keys = self.workload.audit_keys();
        if self.report.invariant.is_ok() && !keys.is_empty() {
            let partitioner = self.cluster().partitioner;
            let mut backoff_ns = 0;
            let state = meridian_workload::audit::run(&partitioner, &keys, |txn| {
                let outcome = self.execute_alone(txn, backoff_ns);
                // A failed attempt waits longer before the next: what holds it up (a
                // lock orphaned by a crashed coordinator, a view change) clears on the
                // protocol's own timeouts, which immediate retries would all hit.
                backoff_ns = match outcome.is_committed() {
                    true => 0,
                    false => (backoff_ns * 2).clamp(AUDIT_BACKOFF_NS, 8 * AUDIT_BACKOFF_NS),
                };
                outcome
            });
            self.report.invariant = meridian_workload::audit::verdict(
                &*self.workload,
                &keys,
                &state,
                &self.report.history,
            );
            self.report.audited_keys = keys.len() as u64;
        }
        self.report
    }

    /// Each shard's replicas' beliefs of its leader, for protocols that name one.
    fn leader_beliefs(&self) -> std::collections::BTreeMap<String, String> {
        let cluster = self.cluster();
        let mut out = std::collections::BTreeMap::new();
        for (s, replicas) in cluster.shards.iter().enumerate() {
            let beliefs: Vec<Option<NodeId>> = replicas
                .iter()
                .map(|r| {
                    self.slots[r.index()]
                        .host
                        .node()
                        .and_then(|n| n.shard_leader())
                })
                .collect();
            if beliefs.iter().any(Option::is_some) {
                let text: Vec<String> = beliefs
                    .iter()
                    .map(|b| b.map_or("-".to_string(), |n| n.to_string()))
                    .collect();
                out.insert(format!("shard{s}"), text.join(" "));
            }
        }
        out
    }

    /// Lets the protocol run (timers, messages; no client acts) until `until_ns`, or until
    /// the answer to `awaited` arrives, which it returns.
    fn run_quietly(&mut self, until_ns: u64, awaited: Option<RequestId>) -> Option<ClientResponse> {
        while let Some((at_ns, event)) = self.queue.pop() {
            if at_ns > until_ns {
                self.push(at_ns, event);
                self.resume_ns = at_ns;
                break;
            }
            self.now_ns = at_ns;
            match event {
                Event::Response { request, response } if Some(request) == awaited => {
                    return Some(response)
                }
                // Leftover client events of the load: no client acts any more.
                Event::Response { .. }
                | Event::ClientNext { .. }
                | Event::Arrival { .. }
                | Event::ClientTimeout { .. }
                | Event::EndOfLoad => {}
                event => self.dispatch(event),
            }
        }
        self.now_ns = self.now_ns.max(until_ns);
        None
    }

    /// Runs one audit transaction to its outcome with nothing else submitted, after
    /// letting the protocol run `backoff_ns` alone: the event loop goes on (timers,
    /// messages) until the answer or [`AUDIT_TXN_LIMIT_NS`]. Audit transactions are in
    /// neither the statistics nor the history.
    fn execute_alone(&mut self, txn: &meridian_core::txn::Txn, backoff_ns: u64) -> Outcome {
        // The queue's clock may be past `now_ns` (an event was popped and put back).
        self.now_ns = self.now_ns.max(self.resume_ns);
        if backoff_ns > 0 {
            self.run_quietly(self.now_ns + backoff_ns, None);
            self.now_ns = self.now_ns.max(self.resume_ns);
        }
        let to = self.cluster().coordinators[0];
        self.next_request += 1;
        let request = RequestId(self.next_request);
        self.push(
            self.now_ns + CLIENT_HOP_NS,
            Event::Request {
                to,
                request,
                req: ClientRequest::OneShot(txn.clone()),
            },
        );
        let deadline_ns = self.now_ns + AUDIT_TXN_LIMIT_NS;
        match self.run_quietly(deadline_ns, Some(request)) {
            Some(ClientResponse::Outcome(outcome)) => outcome,
            Some(other) => panic!("a one-shot audit read was answered with {other:?}"),
            None => Outcome::Unknown {
                reason: "audit read unanswered".to_string(),
            },
        }
    }
}

/// `t` rounded up to a multiple of `granularity` (unchanged for 0).
fn round_up(t: u64, granularity: u64) -> u64 {
    if granularity == 0 {
        return t;
    }
    t.div_ceil(granularity) * granularity
}

/// Seeds derived from the run's seed: independent streams per purpose and index.
fn mix(seed: u64, purpose: u64, index: u64) -> u64 {
    let mut h = FxHasher::default();
    h.write_u64(seed);
    h.write_u64(purpose);
    h.write_u64(index);
    // FxHash mixes weakly in its low bits; a SplitMix64 finalizer spreads them.
    let mut z = h.finish().wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn node_rng(seed: u64, node: NodeId, incarnation: u32) -> NodeRng {
    NodeRng::seed_from_u64(mix(seed, u64::from(node.0), u64::from(incarnation)))
}
