//! Simulator tests with a toy protocol: a coordinator forwards each piece to its shard's
//! initial leader, which executes it on a map and answers. No concurrency control — the toy
//! exists to exercise the driver (network, clocks, faults, clients, determinism).

use meridian_check::HistOp;
use meridian_core::node::{Ctx, Setup};
use meridian_core::time::{NS_PER_MS, NS_PER_S};
use meridian_core::txn::{
    execute_piece, ClientRequest, ClientResponse, KvAccess, Op, Outcome, Piece, PieceResult, Step,
    Txn, Value,
};
use meridian_core::value::encode_int;
use meridian_core::SmallBytes;
use meridian_core::{
    AbortReason, CommitPath, Key, Node, NodeId, NodeRng, Operand, Procedures, Protocol,
    ProtocolConfig, RequestId, ShardId, Topology, TxnId,
};
use meridian_sim::{run, setup, FaultKinds, FaultPlan, SimOptions};
use meridian_workload::{InteractiveOp, TxnPlan, Workload};
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Msg {
    Exec {
        request: u64,
        piece: Piece,
        index: usize,
    },
    Done {
        request: u64,
        index: usize,
        result: PieceResult,
        local_now_ns: u64,
    },
}

type Map = FxHashMap<Key, Value>;

struct Toy {
    setup: Setup<ToyProtocol>,
    store: Map,
    pending: FxHashMap<u64, (RequestId, Vec<Option<PieceResult>>)>,
    next: u64,
}

#[derive(Clone, Debug)]
struct Tick;

impl Node for Toy {
    type Msg = Msg;
    type Timer = Tick;
    type Record = ();

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        ctx.count("toy.starts", 1);
        ctx.set_timer(50 * NS_PER_MS, Tick);
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        ctx.count("toy.messages", 1);
        match msg {
            Msg::Exec {
                request,
                piece,
                index,
            } => {
                let result =
                    execute_piece(&piece, &[], &Procedures::new(), &mut self.store).unwrap();
                let local_now_ns = ctx.now_ns();
                ctx.send(
                    from,
                    Msg::Done {
                        request,
                        index,
                        result,
                        local_now_ns,
                    },
                );
            }
            Msg::Done {
                request,
                index,
                result,
                local_now_ns,
            } => {
                // One machine, one clock: a colocated reply's reading is at most the queueing
                // delay behind ours (the test steps one node's clock by 10 s).
                if self.setup.cluster.colocated(from, ctx.id()) {
                    ctx.count("toy.colocated_replies", 1);
                    if ctx.now_ns().abs_diff(local_now_ns) > NS_PER_S {
                        ctx.count("toy.colocated_clock_mismatches", 1);
                    }
                }
                let Some((client_request, results)) = self.pending.get_mut(&request) else {
                    return;
                };
                results[index] = Some(result);
                if results.iter().all(Option::is_some) {
                    let client_request = *client_request;
                    let (_, results) = self.pending.remove(&request).unwrap();
                    let results = results.into_iter().map(Option::unwrap).collect();
                    ctx.respond(
                        client_request,
                        ClientResponse::Outcome(Outcome::Committed {
                            results,
                            commit_ts: None,
                            path: CommitPath::Local,
                        }),
                    );
                }
            }
        }
    }

    /// A toy invariant: a coordinator never holds more than 1000 transactions open.
    fn check_invariants(&self) -> Result<(), String> {
        match self.pending.len() {
            n if n > 1000 => Err(format!("{n} transactions pending")),
            _ => Ok(()),
        }
    }

    fn on_batch_end(&mut self, ctx: &mut Ctx<'_, Self>) {
        ctx.count("toy.batch_ends", 1);
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, _timer: Tick) {
        // Randomness from the node's seeded RNG must feed the trace: draw and re-arm.
        let jitter = ctx.rng().gen_range(0..NS_PER_MS);
        ctx.set_timer(50 * NS_PER_MS + jitter, Tick);
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        let txn = match req {
            ClientRequest::OneShot(txn) => txn,
            ClientRequest::Interactive(step) => return self.interactive(ctx, request, step),
        };
        self.next += 1;
        self.pending
            .insert(self.next, (request, vec![None; txn.pieces.len()]));
        for (index, piece) in txn.pieces.into_iter().enumerate() {
            let leader = self.setup.cluster.initial_leader(piece.shard);
            ctx.send(
                leader,
                Msg::Exec {
                    request: self.next,
                    piece,
                    index,
                },
            );
        }
    }
}

impl Toy {
    /// Interactive steps run against the coordinator's own map (enough to drive sessions).
    fn interactive(&mut self, ctx: &mut Ctx<'_, Self>, request: RequestId, step: Step) {
        let response = match step {
            Step::Begin { .. } => {
                self.next += 1;
                ClientResponse::Began(TxnId::new(ctx.id(), 0, self.next))
            }
            Step::Get { key, .. } => ClientResponse::Read(self.store.get(&key).cloned()),
            Step::Put { key, value, .. } => {
                self.store.put(key, value);
                ClientResponse::Written
            }
            Step::Modify { key, rmw, .. } => {
                let new = rmw.apply(self.store.get(&key));
                self.store.put(key, new);
                ClientResponse::Written
            }
            Step::Commit { .. } => ClientResponse::Outcome(Outcome::Committed {
                results: vec![],
                commit_ts: None,
                path: CommitPath::Local,
            }),
            Step::Abort { .. } => ClientResponse::Outcome(Outcome::Aborted {
                reason: AbortReason::User,
            }),
        };
        ctx.respond(request, response);
    }
}

struct ToyProtocol;
impl Protocol for ToyProtocol {
    type Node = Toy;
    type Options = ();
    const NAME: &'static str = "toy";
    const GUARANTEE: &'static str = "none";
    const REPLICA_KINDS: &'static [meridian_core::ReplicaKind] = &[
        meridian_core::ReplicaKind::Voter,
        meridian_core::ReplicaKind::Backup,
    ];
    const OPTIONS: &'static [&'static str] = &[];
    fn parse_options(
        raw: &ProtocolConfig,
        _cluster: &meridian_core::Cluster,
    ) -> Result<(), String> {
        raw.check_known(Self::OPTIONS)
    }
    fn build(_node: NodeId, setup: &Setup<Self>, _recovered: &[()]) -> Toy {
        Toy {
            setup: setup.clone(),
            store: Map::default(),
            pending: FxHashMap::default(),
            next: 0,
        }
    }
    fn bound_ms(cluster: &meridian_core::Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .map(|s| cluster.rtt_ms(coordinator, cluster.initial_leader(*s)))
            .fold(0.0, f64::max)
    }
}

/// Increments a key on a random shard, or on `shards` chosen shards.
struct Increments {
    shards: u32,
    per_txn: u32,
}
impl Workload for Increments {
    fn name(&self) -> &str {
        "increments"
    }
    fn next(
        &mut self,
        _client: &meridian_workload::ClientInfo,
        rng: &mut NodeRng,
    ) -> meridian_workload::Planned {
        let first = rng.gen_range(0..self.shards);
        let pieces = (0..self.per_txn)
            .map(|i| {
                let shard = ShardId((first + i) % self.shards);
                let key = SmallBytes::from(format!("k{}", rng.gen_range(0..10)));
                Piece::ops(shard, vec![Op::Add(key, Operand::Literal(encode_int(1)))])
            })
            .collect();
        meridian_workload::Planned::from(TxnPlan::OneShot(Txn { pieces }))
    }
    fn history_ops(
        &self,
        _plan: &TxnPlan,
        outcome: &Outcome,
        _reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        match outcome {
            Outcome::Committed { results, .. } => vec![HistOp::Write {
                key: "n".into(),
                value: results.len() as i64,
            }],
            _ => vec![],
        }
    }
}

fn run_toy(topology: &str, options: &SimOptions, per_txn: u32) -> meridian_sim::SimReport {
    run_toy_on(Topology::load(topology).unwrap(), options, per_txn)
}

fn run_toy_on(topology: Topology, options: &SimOptions, per_txn: u32) -> meridian_sim::SimReport {
    let setup =
        setup::<ToyProtocol>(topology, ProtocolConfig::default(), Procedures::new()).unwrap();
    let mut workload = Increments {
        shards: setup.cluster.shard_count(),
        per_txn,
    };
    run::<ToyProtocol>(&setup, &mut workload, options, &mut |_| {})
}

/// Transactions that committed having started after `from_ns` and finished before `to_ns`.
fn committed_within(report: &meridian_sim::SimReport, from_ns: u64, to_ns: u64) -> usize {
    report
        .history
        .iter()
        .filter(|e| {
            e.kind == meridian_check::EntryType::Ok
                && e.invoke_ns > from_ns
                && e.complete_ns < to_ns
        })
        .count()
}

fn options(seed: u64) -> SimOptions {
    SimOptions {
        seed,
        duration_ns: 5 * NS_PER_S,
        drain_ns: 2 * NS_PER_S,
        ..SimOptions::default()
    }
}

#[test]
fn the_same_seed_replays_bit_for_bit_and_another_seed_does_not() {
    let mut faulty = options(42);
    let cluster = setup::<ToyProtocol>(
        Topology::load("gcp-tiga").unwrap(),
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap()
    .cluster;
    faulty.faults = FaultPlan::random(
        &cluster,
        &meridian_core::FaultModel::minorities(&cluster),
        faulty.duration_ns,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(42),
        FaultKinds::ALL,
    );
    let a = run_toy("gcp-tiga", &faulty, 2);
    let b = run_toy("gcp-tiga", &faulty, 2);
    assert!(a.committed > 100, "committed {}", a.committed);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.history, b.history);
    assert_eq!(
        (a.events, a.messages_dropped),
        (b.events, b.messages_dropped)
    );
    let mut other = faulty.clone();
    other.seed = 43;
    let c = run_toy("gcp-tiga", &other, 2);
    assert_ne!(a.trace_hash, c.trace_hash);
}

#[test]
fn latency_follows_the_topology_round_trips() {
    // Single-shard increments: every commit takes one round trip coordinator -> SC leader.
    let mut o = options(7);
    o.faults = FaultPlan::default();
    let report = run_toy("gcp-tiga", &o, 1);
    let by_region: FxHashMap<&str, f64> = report
        .regions
        .iter()
        .map(|r| (r.region.as_str(), r.percentile_ms(50.0).unwrap()))
        .collect();
    // One-way delays are RTT/2 plus exponential jitter of mean 0.5 ms each way.
    for (region, rtt) in [("SC", 0.5), ("FI", 122.0), ("BR", 117.0), ("HK", 201.0)] {
        let p50 = by_region[region];
        assert!(
            p50 >= rtt && p50 < rtt + 3.0,
            "{region}: p50 {p50} for rtt {rtt}"
        );
    }
    assert_eq!(report.unknown, 0);
}

#[test]
fn a_crashed_node_answers_nothing_until_it_restarts() {
    let topology = Topology::load("local").unwrap();
    let setup =
        setup::<ToyProtocol>(topology, ProtocolConfig::default(), Procedures::new()).unwrap();
    let leaders: Vec<String> = (0..3)
        .map(|s| {
            setup
                .cluster
                .node(setup.cluster.initial_leader(ShardId(s)))
                .name
                .clone()
        })
        .collect();
    let spec = leaders
        .iter()
        .map(|l| format!("crash:{l}@1s,restart:{l}@3s"))
        .collect::<Vec<_>>()
        .join(",");
    let mut o = options(3);
    o.client_timeout_ns = 500 * NS_PER_MS;
    o.faults = FaultPlan::parse(&spec, &setup.cluster).unwrap();
    let report = run_toy("local", &o, 1);
    assert!(
        report.unknown > 0,
        "requests to crashed leaders must time out"
    );
    let during = committed_within(&report, 1_100 * NS_PER_MS, 2_900 * NS_PER_MS);
    assert_eq!(during, 0, "nothing commits while every leader is down");
    let after = report
        .history
        .iter()
        .filter(|e| e.kind == meridian_check::EntryType::Ok && e.invoke_ns > 3 * NS_PER_S)
        .count();
    assert!(after > 100, "service resumes after the restart ({after})");
}

#[test]
fn the_timeline_shows_a_leader_crash_as_a_dip_and_adds_up_to_the_run() {
    let setup = setup::<ToyProtocol>(
        Topology::load("local").unwrap(),
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap();
    let leader = &setup
        .cluster
        .node(setup.cluster.initial_leader(ShardId(0)))
        .name;
    let mut o = options(5);
    o.client_timeout_ns = 500 * NS_PER_MS;
    o.timeline_bucket_ns = 250 * NS_PER_MS;
    o.faults = FaultPlan::parse(
        &format!("crash:{leader}@2s,restart:{leader}@4s"),
        &setup.cluster,
    )
    .unwrap();
    let report = run_toy("local", &o, 1);
    let t = &report.timeline;
    assert_eq!(t.bucket_ms, 250.0);
    assert_eq!(t.buckets.len(), 28, "7 s of run in 250 ms buckets");
    let total = |f: fn(&meridian_sim::TimeBucket) -> u64| t.buckets.iter().map(f).sum::<u64>();
    assert_eq!(total(|b| b.committed), report.committed);
    assert_eq!(total(|b| b.aborted), report.aborted);
    assert_eq!(total(|b| b.unknown), report.unknown);
    let mean = |from_s: f64, to_s: f64| {
        let inside: Vec<f64> = t
            .buckets
            .iter()
            .filter(|b| b.start_ms >= from_s * 1e3 && b.start_ms + t.bucket_ms <= to_s * 1e3)
            .map(|b| b.throughput_tps)
            .collect();
        inside.iter().sum::<f64>() / inside.len() as f64
    };
    let (before, during, after) = (mean(0.5, 2.0), mean(2.25, 4.0), mean(4.5, 5.0));
    // Every client soon waits on a transaction stuck at the dead shard-0 leader.
    assert!(during < before / 3.0, "before {before}, during {during}");
    assert!(after > before / 2.0, "before {before}, after {after}");
    let p99 = |at_ms: f64| {
        t.buckets
            .iter()
            .find(|b| b.start_ms == at_ms)
            .and_then(|b| b.p99_ms)
    };
    assert!(p99(1000.0).unwrap() < 5.0, "a LAN commit takes about 1 ms");
    // No commit at the dead leader's shard: the buckets hold no latency near the timeout.
    assert!(t
        .buckets
        .iter()
        .all(|b| b.p50_ms.is_none() == (b.committed == 0)));
    assert!(report.unknown > 0, "timeouts during the crash");
}

#[test]
fn partitions_and_loss_drop_messages_and_heal() {
    let topology = Topology::load("gcp-tiga").unwrap();
    let setup =
        setup::<ToyProtocol>(topology, ProtocolConfig::default(), Procedures::new()).unwrap();
    let mut o = options(5);
    o.client_timeout_ns = NS_PER_S;
    o.faults = FaultPlan::parse(
        "isolate:HK@1s,heal@3s,loss:0.2@3s,loss:0@4s",
        &setup.cluster,
    )
    .unwrap();
    let report = run_toy("gcp-tiga", &o, 1);
    let hk = report.regions.iter().find(|r| r.region == "HK").unwrap();
    assert!(hk.unknown >= 2, "HK is cut off for 2 s: {hk:?}");
    assert!(report.messages_dropped > 0);
    assert!(hk.committed > 5);
}

#[test]
fn service_time_makes_queueing_visible() {
    let mut fast = options(9);
    fast.clients_per_coordinator = 8;
    let mut slow = fast.clone();
    slow.service_time_ns = 2 * NS_PER_MS;
    let a = run_toy("local", &fast, 1);
    let b = run_toy("local", &slow, 1);
    let p50 = |r: &meridian_sim::SimReport| r.regions[0].percentile_ms(50.0).unwrap();
    assert!(p50(&b) > p50(&a) + 2.0, "{} vs {}", p50(&a), p50(&b));
    assert!(b.committed < a.committed);
}

/// Several workers per node serve a saturated node's events in parallel (more commits, a
/// shorter queue) and replay bit for bit; one worker is the default single queue.
#[test]
fn workers_serve_a_busy_node_in_parallel_and_replay() {
    let mut one = options(9);
    one.clients_per_coordinator = 8;
    one.service_time_ns = 2 * NS_PER_MS;
    let mut four = one.clone();
    four.workers = 4;
    let a = run_toy("local", &one, 1);
    let b = run_toy("local", &four, 1);
    let p50 = |r: &meridian_sim::SimReport| r.regions[0].percentile_ms(50.0).unwrap();
    assert!(
        b.committed as f64 > 1.5 * a.committed as f64,
        "{} vs {}",
        a.committed,
        b.committed
    );
    assert!(p50(&b) < p50(&a), "{} vs {}", p50(&a), p50(&b));
    let again = run_toy("local", &four, 1);
    assert_eq!(b.trace_hash, again.trace_hash);
    assert_ne!(a.trace_hash, b.trace_hash);
}

/// With `machine_workers` a machine's nodes share its workers (Aurogon's testbed: each
/// server's threads serve its coordinator, primary and backup roles): on `rdma-cluster`
/// every machine hosts a coordinator and a shard's primary, so sharing one pool of two
/// workers between them commits clearly less than two each; a crash of a machine empties
/// its shared queues and the run still replays bit for bit.
#[test]
fn machine_workers_share_a_servers_cpu_among_its_roles() {
    let mut own = options(9);
    own.clients_per_coordinator = 8;
    own.service_time_ns = 2 * NS_PER_MS;
    own.workers = 2;
    let mut shared = own.clone();
    shared.machine_workers = true;
    let a = run_toy("rdma-cluster", &own, 1);
    let b = run_toy("rdma-cluster", &shared, 1);
    assert!(
        (b.committed as f64) < 0.8 * a.committed as f64,
        "per node {} vs per machine {}",
        a.committed,
        b.committed
    );
    let topology = Topology::load("rdma-cluster").unwrap();
    let cluster = setup::<ToyProtocol>(topology, ProtocolConfig::default(), Procedures::new())
        .unwrap()
        .cluster;
    let leader = &cluster.node(cluster.initial_leader(ShardId(0))).name;
    // The toy has no recovery: a client waits out its timeout on a request the crash lost.
    shared.client_timeout_ns = 500 * NS_PER_MS;
    shared.faults =
        FaultPlan::parse(&format!("crash:{leader}@2s,restart:{leader}@3s"), &cluster).unwrap();
    let c = run_toy("rdma-cluster", &shared, 1);
    let again = run_toy("rdma-cluster", &shared, 1);
    assert_eq!(c.trace_hash, again.trace_hash);
    assert!(committed_within(&c, 3500 * NS_PER_MS, 5 * NS_PER_S) > 0);
}

/// A saturated node queues its events once each: the simulator's work stays linear in the
/// events served (re-queuing every waiting event at each free instant cost ≈ 33 simulator
/// events per delivered message on Tiga's Table 1 setup).
#[test]
fn a_busy_nodes_backlog_costs_linear_work() {
    let mut o = options(9);
    o.clients_per_coordinator = 64;
    o.service_time_ns = 2 * NS_PER_MS; // far past what 64 clients per coordinator need
    let r = run_toy("local", &o, 1);
    assert!(r.committed > 0);
    let served = r.messages_delivered + r.committed + r.unknown + r.aborted;
    assert!(
        r.events < 4 * served,
        "{} simulator events for {} messages and {} outcomes",
        r.events,
        r.messages_delivered,
        r.committed + r.unknown + r.aborted
    );
}

/// Each client reads its own list and appends the next integer, interactively.
struct Appends {
    next: FxHashMap<u32, i64>,
}
impl Workload for Appends {
    fn name(&self) -> &str {
        "appends"
    }
    fn next(
        &mut self,
        client: &meridian_workload::ClientInfo,
        _rng: &mut NodeRng,
    ) -> meridian_workload::Planned {
        let client = client.id;
        let n = self.next.entry(client.0).or_insert(0);
        *n += 1;
        let key = SmallBytes::from(format!("list{}", client.0));
        meridian_workload::Planned::from(TxnPlan::Interactive(vec![
            InteractiveOp::Get(key.clone()),
            InteractiveOp::Append(key, encode_int(*n)),
        ]))
    }
    fn history_ops(
        &self,
        _plan: &TxnPlan,
        _outcome: &Outcome,
        reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        let list = |v: &Option<Value>| {
            meridian_check::ReadValue::List(
                v.as_ref()
                    .map(|b| meridian_core::value::decode_list(b).unwrap())
                    .unwrap_or_default(),
            )
        };
        reads
            .iter()
            .map(|r| HistOp::Read {
                key: "own".into(),
                value: list(r),
            })
            .collect()
    }
}

#[test]
fn interactive_sessions_run_step_by_step_and_append_is_a_modify() {
    let setup = setup::<ToyProtocol>(
        Topology::load("local").unwrap(),
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap();
    let mut workload = Appends {
        next: FxHashMap::default(),
    };
    let o = SimOptions {
        clients_per_coordinator: 1,
        duration_ns: 20 * NS_PER_MS,
        ..options(11)
    };
    let report = run::<ToyProtocol>(&setup, &mut workload, &o, &mut |_| {});
    assert!(
        report.committed > 100,
        "committed {}, aborted {}",
        report.committed,
        report.aborted
    );
    for client in 0..4u64 {
        let entries: Vec<_> = report
            .history
            .iter()
            .filter(|e| e.process == client && e.kind == meridian_check::EntryType::Ok)
            .collect();
        for (i, entry) in entries.iter().enumerate() {
            // One read per transaction, the plan's Get: the Append is a `Modify` step the
            // client never reads, and every earlier one landed.
            let expected = meridian_check::ReadValue::List((1..=i as i64).collect());
            assert_eq!(
                entry.ops,
                [HistOp::Read {
                    key: "own".into(),
                    value: expected
                }]
            );
        }
    }
}

#[test]
fn open_loop_submits_at_the_rate_and_throttles_at_the_cap() {
    let setup = setup::<ToyProtocol>(
        Topology::load("gcp-tiga").unwrap(),
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap();
    let coordinators = setup.cluster.coordinators.len() as f64;
    let run_at = |rate_tps: f64, max_outstanding: u32| {
        let o = SimOptions {
            open_loop: Some(meridian_sim::OpenLoop {
                rate_tps,
                max_outstanding,
            }),
            duration_ns: 2 * NS_PER_S,
            ..options(3)
        };
        let mut workload = Appends {
            next: FxHashMap::default(),
        };
        run::<ToyProtocol>(&setup, &mut workload, &o, &mut |_| {})
    };
    let light = run_at(50.0, 1000);
    let submitted = (light.committed + light.aborted + light.unknown) as f64;
    let expected = 50.0 * 2.0 * coordinators;
    assert!(
        (submitted - expected).abs() < 0.15 * expected,
        "{submitted} submitted, {expected} expected"
    );
    assert_eq!(light.throttled, 0);
    // A cap of one outstanding transaction per coordinator turns arrivals away; every
    // arrival is either submitted or throttled.
    let capped = run_at(2000.0, 1);
    assert!(capped.throttled > 100, "{}", capped.throttled);
    let arrivals = (capped.committed + capped.aborted + capped.unknown + capped.throttled) as f64;
    let expected = 2000.0 * 2.0 * coordinators;
    assert!(
        (arrivals - expected).abs() < 0.05 * expected,
        "{arrivals} arrivals"
    );
}

/// One machine holding a shard's only replica and a coordinator (`colocated`), or the two
/// on machines of their own, 10 ms apart; bad clocks so separate clocks would disagree.
fn one_machine(colocated: bool) -> Topology {
    let text = format!(
        "name = \"pair\"\nregions = [\"A\"]\nintra_region_rtt_ms = 10.0\n[machines]\nA = 1\n\
         [[shards]]\nreplicas = [\"A\"]\n[[coordinators]]\nregion = \"A\"\ncolocated = {colocated}\n\
         [clocks]\nprofile = \"bad\"\n"
    );
    Topology::parse("pair", &text).unwrap()
}

/// Roles of one machine talk for free and read one clock: a coordinator on its shard's
/// machine commits a single-shard transaction in the client hop alone, not a 10 ms trip.
#[test]
fn colocated_roles_talk_for_free_and_share_a_clock() {
    let mut o = options(11);
    // A service time keeps a free loop from committing millions of transactions.
    o.service_time_ns = 50_000;
    let pair = setup::<ToyProtocol>(
        one_machine(true),
        ProtocolConfig::default(),
        Procedures::new(),
    );
    o.faults = FaultPlan::parse("clock-step:coord0:10000@500ms", &pair.unwrap().cluster).unwrap();
    let together = run_toy_on(one_machine(true), &o, 1);
    let apart = run_toy_on(one_machine(false), &o, 1);
    let p50 = |r: &meridian_sim::SimReport| r.regions[0].percentile_ms(50.0).unwrap();
    assert!(p50(&together) < 0.5, "colocated p50 {}", p50(&together));
    assert!(p50(&apart) >= 10.0, "separate machines p50 {}", p50(&apart));
    let replies = together.counters.get("toy.colocated_replies").copied();
    assert!(replies.unwrap_or(0) > 100, "{:?}", together.counters);
    // Only replies in flight across the step (one per client) straddle it; with a clock
    // per node every reply after the step would differ by 10 s.
    let mismatches = together.counters.get("toy.colocated_clock_mismatches");
    assert!(mismatches.copied().unwrap_or(0) <= 2, "{mismatches:?}");
    assert_eq!(apart.counters.get("toy.colocated_replies"), None);
}

/// A machine fails as a whole: crashing the replica restarts the coordinator beside it.
#[test]
fn a_crash_takes_down_every_role_of_the_machine() {
    let mut o = options(12);
    o.service_time_ns = 50_000;
    let topology = one_machine(true);
    let cluster = setup::<ToyProtocol>(
        topology.clone(),
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap()
    .cluster;
    o.faults = FaultPlan::parse(
        "crash:shard0/replica0@1s,restart:shard0/replica0@2s",
        &cluster,
    )
    .unwrap();
    let report = run_toy_on(topology, &o, 1);
    // Two nodes boot, and both restart.
    assert_eq!(
        report.counters.get("toy.starts"),
        Some(&4),
        "{:?}",
        report.counters
    );
    let applied = &report.faults_applied;
    assert_eq!(applied.get("crash replica"), Some(&1), "{applied:?}");
    assert_eq!(applied.get("crash coordinator"), Some(&1), "{applied:?}");
    let during = committed_within(&report, 1_100 * NS_PER_MS, 1_900 * NS_PER_MS);
    assert_eq!(during, 0, "the coordinator was down with its machine");
}

/// Microsecond links (Aurogon's RDMA cluster): latency is measured in microseconds, not
/// rounded to milliseconds anywhere on the way.
#[test]
fn microsecond_links_give_microsecond_latencies() {
    let mut o = options(13);
    o.duration_ns = 100 * NS_PER_MS;
    o.drain_ns = 10 * NS_PER_MS;
    let report = run_toy("rdma-cluster", &o, 1);
    let p50_ms = report.regions[0].percentile_ms(50.0).unwrap();
    // Client hops (2 us) plus at most one 5 us round trip with sub-microsecond jitter.
    assert!(p50_ms > 0.001 && p50_ms < 0.02, "p50 {p50_ms} ms");
    assert!(report.committed > 10_000, "committed {}", report.committed);
}

/// With `batch_max`, what queued while a node was busy is one batch, as in the runtime:
/// far fewer batch ends than events; without it, one per event. Timers snap to the
/// granularity.
#[test]
fn batches_span_a_busy_nodes_backlog_and_timers_snap_to_the_granularity() {
    let mut o = options(14);
    o.clients_per_coordinator = 16;
    o.service_time_ns = 200_000;
    let single = run_toy("local", &o, 1);
    o.batch_max = 64;
    o.timer_granularity_ns = NS_PER_MS;
    let batched = run_toy("local", &o, 1);
    let count =
        |r: &meridian_sim::SimReport, name: &str| r.counters.get(name).copied().unwrap_or(0);
    assert!(count(&single, "toy.batch_ends") >= count(&single, "toy.messages"));
    assert!(
        count(&batched, "toy.batch_ends") * 2 < count(&batched, "toy.messages"),
        "{:?}",
        batched.counters
    );
    assert!(batched.committed > 1000);
    assert_ne!(single.trace_hash, batched.trace_hash);
}

/// In debug builds the simulator checks each node's invariants after every event and
/// stops at the first violation: 1100 open transactions (a coordinator whose leader never
/// answers) break the toy's bound of 1000.
#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "broke an invariant")]
fn a_broken_invariant_stops_the_run_where_it_happens() {
    let mut o = options(15);
    o.open_loop = Some(meridian_sim::OpenLoop {
        rate_tps: 2_000.0,
        max_outstanding: 1_100,
    });
    let topology = Topology::load("local").unwrap();
    let cluster = setup::<ToyProtocol>(topology, ProtocolConfig::default(), Procedures::new())
        .unwrap()
        .cluster;
    let leaders: Vec<String> = (0..3)
        .map(|s| {
            cluster
                .node(cluster.initial_leader(ShardId(s)))
                .name
                .clone()
        })
        .collect();
    let spec: Vec<String> = leaders.iter().map(|l| format!("crash:{l}@0s")).collect();
    o.faults = FaultPlan::parse(&spec.join(","), &cluster).unwrap();
    run_toy("local", &o, 1);
}

/// The steady-state window measures a saturated open loop at the nodes' capacity: without
/// it, the backlog the cap holds at the end of the load finishes in the drain and counts
/// as throughput of the load.
#[test]
fn the_steady_window_leaves_out_the_drained_backlog() {
    let setup = setup::<ToyProtocol>(
        Topology::load("local").unwrap(),
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap();
    let run_with = |steady_from_ns: Option<u64>| {
        let o = SimOptions {
            open_loop: Some(meridian_sim::OpenLoop {
                rate_tps: 5_000.0,
                max_outstanding: 400,
            }),
            // 5 ms per event: each node serves 200 events/s, far below the offer.
            service_time_ns: 5 * NS_PER_MS,
            duration_ns: 2 * NS_PER_S,
            drain_ns: 10 * NS_PER_S,
            steady_from_ns,
            ..options(5)
        };
        let mut workload = Increments {
            shards: setup.cluster.shard_count(),
            per_txn: 1,
        };
        run::<ToyProtocol>(&setup, &mut workload, &o, &mut |_| {})
    };
    let measured =
        |r: &meridian_sim::SimReport| -> u64 { r.regions.iter().map(|g| g.committed).sum() };
    let all = run_with(None);
    let steady = run_with(Some(NS_PER_S));
    // Same run (the window changes what is measured, not what happens).
    assert_eq!(all.trace_hash, steady.trace_hash);
    assert_eq!(all.committed, steady.committed);
    assert_eq!(measured(&all), all.committed);
    // Without the window the backlog the cap held at the end of the load, finished in the
    // drain, counts as load throughput; the window's rate is what the saturated nodes
    // served (both over the 2 s and the 1 s they measure).
    let naive_tps = measured(&all) as f64 / 2.0;
    let steady_tps = measured(&steady) as f64 / 1.0;
    assert!(
        steady_tps * 1.15 < naive_tps,
        "steady {steady_tps} txns/s vs naive {naive_tps} txns/s"
    );
    assert!(measured(&steady) > 0);
}
