//! DAST in the simulator: the stretchable clock keeps IRTs from waiting behind CRTs that
//! wait for cross-region inputs (§4.3, R1), measured with it and without it.

use meridian_check::HistOp;
use meridian_core::time::{NS_PER_MS, NS_PER_S};
use meridian_core::txn::{Op, Operand, Outcome, Piece, Txn, Value};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, ProtocolConfig, RegionId, ShardId, Topology};
use meridian_protocols::dast::Dast;
use meridian_sim::{run, setup, SimOptions, SimReport};
use meridian_workload::{ClientInfo, Planned, TxnPlan, Workload, CRT, IRT};
use rand::Rng;

/// Mostly IRTs (an increment on a shard of the client's region); a `crt_ratio` of CRTs
/// whose home piece consumes a value read in another region (TPC-C Payment's shape: the
/// remote region's output is the home piece's input, §4.1).
struct EdgeDependencies {
    shards_by_region: Vec<Vec<ShardId>>,
    crt_ratio: f64,
}

impl EdgeDependencies {
    fn new(cluster: &Cluster, crt_ratio: f64) -> EdgeDependencies {
        let mut shards_by_region = vec![Vec::new(); cluster.topology.regions.len()];
        for s in 0..cluster.shard_count() {
            let shard = ShardId(s);
            let region = cluster.region_of(cluster.replicas(shard)[0]);
            shards_by_region[region.index()].push(shard);
        }
        EdgeDependencies {
            shards_by_region,
            crt_ratio,
        }
    }

    fn pick(&self, region: RegionId, rng: &mut NodeRng) -> ShardId {
        let shards = &self.shards_by_region[region.index()];
        shards[rng.gen_range(0..shards.len())]
    }
}

fn key(name: String) -> Value {
    Value::from(name)
}

impl Workload for EdgeDependencies {
    fn name(&self) -> &str {
        "edge-dependencies"
    }

    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let home = self.pick(client.region, rng);
        let one = Operand::Literal(encode_int(1));
        let local = Op::Add(key(format!("n{}", rng.gen_range(0..8))), one);
        if !rng.gen_bool(self.crt_ratio) {
            let txn = Txn {
                pieces: vec![Piece::ops(home, vec![local])],
            };
            return Planned::from(TxnPlan::OneShot(txn)).class(IRT);
        }
        let regions = self.shards_by_region.len() as u16;
        let other = RegionId((client.region.0 + rng.gen_range(1..regions)) % regions);
        let remote = self.pick(other, rng);
        let input = Operand::Input {
            piece: 0,
            output: 0,
        };
        let txn = Txn {
            pieces: vec![
                Piece::ops(
                    remote,
                    vec![Op::Get(key(format!("r{}", rng.gen_range(0..8))))],
                ),
                Piece::ops(home, vec![Op::Put(key("copy".into()), input), local]),
            ],
        };
        Planned::from(TxnPlan::OneShot(txn)).class(CRT)
    }

    fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
        Vec::new()
    }
}

fn run_edge(protocol_opts: &str) -> SimReport {
    let config = ProtocolConfig::parse(protocol_opts).expect("options");
    let topology = Topology::load("edge-regions").expect("topology");
    let setup = setup::<Dast>(topology, config, meridian_workload::procedures()).expect("setup");
    let mut workload = EdgeDependencies::new(&setup.cluster, 0.1);
    let options = SimOptions {
        seed: 7,
        duration_ns: 8 * NS_PER_S,
        ..SimOptions::default()
    };
    run::<Dast>(&setup, &mut workload, &options, &mut |_| {})
}

fn p99_ms(report: &SimReport, class: &str) -> f64 {
    report.all_regions().classes[class]
        .percentile_ms(99.0)
        .expect("committed transactions of the class")
}

/// R1 (§4.3, §4.6): with the stretchable clock, an IRT takes about its intra-region round
/// trips even while CRTs on its nodes wait ~half a cross-region round trip for their
/// inputs; without it, IRTs ordered after such a CRT wait for the input too, and the IRT
/// tail grows to the cross-region scale.
#[test]
fn without_the_stretchable_clock_irts_wait_behind_crts_waiting_for_inputs() {
    let stretched = run_edge("");
    let frozen = run_edge("stretch=false");
    for r in [&stretched, &frozen] {
        assert!(r.committed > 1_000, "{} committed", r.committed);
        assert!(r.all_regions().classes[CRT].finished() > 50);
    }
    let (with, without) = (p99_ms(&stretched, IRT), p99_ms(&frozen, IRT));
    eprintln!("IRT p99: {with:.1} ms stretching, {without:.1} ms without");
    assert!(
        stretched
            .counters
            .get("dast.stretched_ts")
            .copied()
            .unwrap_or(0)
            > 0,
        "the clock stretched"
    );
    // edge-regions: 5 ms round trips inside a region, 100 ms across.
    assert!(
        with < 30.0,
        "IRT p99 with the stretchable clock: {with:.1} ms"
    );
    assert!(
        without > 2.0 * with && without > 40.0,
        "IRT p99 without the stretchable clock: {without:.1} ms (with: {with:.1} ms)"
    );
}

/// §4.4: an edge node that crashes long enough is suspected by its region's manager and
/// removed (Alg. 3); when it comes back it is told, installs a live replica's checkpoint
/// and joins a new view (Alg. 4), and then executes transactions again — their results
/// reach coordinators like any replica's — while the history stays strong partition
/// serializable.
#[test]
fn a_removed_node_is_added_back_from_a_checkpoint_and_serves_again() {
    use meridian_check::{check, Model};
    use meridian_sim::faults::{Fault, FaultPlan};
    use meridian_workload::WorkloadOptions;
    let topology = Topology::load("edge-regions").expect("topology");
    let setup = setup::<Dast>(
        topology,
        ProtocolConfig::default(),
        meridian_workload::procedures(),
    )
    .expect("setup");
    let node = setup.cluster.node_by_name("shard0/replica1").expect("node");
    let mut options = SimOptions {
        seed: 3,
        duration_ns: 8 * NS_PER_S,
        ..SimOptions::default()
    };
    options.faults = FaultPlan {
        faults: vec![
            (2 * NS_PER_S, Fault::Crash(node)),
            (4 * NS_PER_S, Fault::Restart(node)),
        ],
        storage: false,
    };
    let opts = WorkloadOptions::parse(["crt_ratio=0.2", "keys=40"]).expect("options");
    let mut workload =
        meridian_workload::build("list-append", &setup.cluster, &opts).expect("workload");
    let report = run::<Dast>(&setup, workload.as_mut(), &options, &mut |_| {});
    let verdict = check(&report.history, Model::StrongPartitionSerializable);
    assert!(verdict.valid, "{verdict}");
    let count = |name: &str| report.counters.get(name).copied().unwrap_or(0);
    for name in [
        "dast.removals_started",
        "dast.removed_self",
        "dast.checkpoints_installed",
        "dast.additions_started",
        "dast.rejoined",
    ] {
        assert!(count(name) >= 1, "{name}: {:?}", report.counters);
    }
    assert!(
        count("dast.executed_after_rejoin") > 100,
        "the re-added replica executed {} transactions",
        count("dast.executed_after_rejoin")
    );
    assert!(report.committed > 1_000, "{} committed", report.committed);
}

/// The run of the two tests below: `shard0/replica1`, a replica of a shard no
/// transaction touches, crashes at 1 s and restarts at 2 s; 6 s of load, 2 s of drain;
/// clients give up on a request after `client_timeout_ns` (if given).
fn run_idle_shard_removal(client_timeout_ns: Option<u64>) -> SimReport {
    use meridian_sim::faults::{Fault, FaultPlan};
    let topology = Topology::load("edge-regions").expect("topology");
    let setup = setup::<Dast>(
        topology,
        ProtocolConfig::default(),
        meridian_workload::procedures(),
    )
    .expect("setup");
    let node = setup.cluster.node_by_name("shard0/replica1").expect("node");
    let mut workload = EdgeDependencies::new(&setup.cluster, 0.1);
    for shards in &mut workload.shards_by_region {
        shards.retain(|&s| s != ShardId(0));
    }
    let mut options = SimOptions {
        seed: 5,
        duration_ns: 6 * NS_PER_S,
        drain_ns: 2 * NS_PER_S,
        ..SimOptions::default()
    };
    if let Some(timeout_ns) = client_timeout_ns {
        options.client_timeout_ns = timeout_ns;
    }
    options.faults = FaultPlan {
        faults: vec![
            (NS_PER_S, Fault::Crash(node)),
            (2 * NS_PER_S, Fault::Restart(node)),
        ],
        storage: false,
    };
    run::<Dast>(&setup, &mut workload, &options, &mut |_| {})
}

/// §3.1, §4.4: while an edge node is out of its region's view, its clients go to another
/// replica of their home shard (a hand-off) instead of being refused (before: refused at
/// once, and each closed-loop client resubmitted at once). The removed node is added back
/// soon after its restart, so its clients (whose requests died with it at 1 s) give up
/// after 0.3 s instead of the default 5 s and resubmit while it is out.
#[test]
fn a_removed_nodes_clients_are_handed_off_to_another_replica() {
    let report = run_idle_shard_removal(Some(300 * NS_PER_MS));
    let count = |name: &str| report.counters.get(name).copied().unwrap_or(0);
    assert!(count("dast.removed_self") >= 1, "{:?}", report.counters);
    assert!(count("dast.handoffs") > 0, "{:?}", report.counters);
    let refused: u64 = report
        .abort_reasons
        .iter()
        .filter(|(reason, _)| reason.contains("removed"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(refused, 0, "refusals: {:?}", report.abort_reasons);
    assert!(report.committed > 1_000, "{} committed", report.committed);
}

/// Alg. 4: the removed replica of the idle shard is added back within the run (restarted
/// at 2 s; 4 s of load and 2 s of drain left). Before the frozen-clock fix (`mod.rs`,
/// "Frozen clocks") it stayed out: committed CRTs waiting for inputs froze every region's
/// clocks from about 0.17 s to the end, so the region never passed the removal's bound
/// (seed 5: no checkpoint sent, 1,234 IRTs and 135 CRTs started in 6 s).
#[test]
fn a_removed_replica_of_an_idle_shard_is_added_back() {
    let report = run_idle_shard_removal(None);
    let count = |name: &str| report.counters.get(name).copied().unwrap_or(0);
    for name in [
        "dast.checkpoints_sent",
        "dast.checkpoints_installed",
        "dast.additions_started",
        "dast.rejoined",
    ] {
        assert!(count(name) >= 1, "{name}: {:?}", report.counters);
    }
    // The CRTs that froze the clocks: all but those still in flight finish.
    let crts = &report.all_regions().classes[CRT];
    assert!(
        crts.finished() * 10 >= count("dast.crt") * 9,
        "{} of {} CRTs finished",
        crts.finished(),
        count("dast.crt")
    );
}
