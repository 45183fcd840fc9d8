//! The runtime's load driver and the simulator place the same clients at the same
//! coordinators, and hand the workload each client's place.

mod common;
use common::free_addresses;
use meridian_check::HistOp;
use meridian_client::Submit;
use meridian_core::node::Setup;
use meridian_core::txn::{Op, Outcome, Piece, Txn, Value};
use meridian_core::{NodeId, NodeRng, Procedures, ProtocolConfig, ShardId, Topology};
use meridian_protocols::tiga::Tiga;
use meridian_server::{Host, HostConfig, Load, LoadOptions, Target};
use meridian_workload::{place_clients, ClientInfo, Planned, TxnPlan, Workload};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Seen = Arc<Mutex<BTreeSet<(u32, NodeId, u16)>>>;

/// Reads one key, and notes which client (id, coordinator, region) it planned for.
struct Where {
    seen: Seen,
}

impl Workload for Where {
    fn name(&self) -> &str {
        "where"
    }

    fn next(&mut self, client: &ClientInfo, _rng: &mut NodeRng) -> Planned {
        self.seen
            .lock()
            .unwrap()
            .insert((client.id.0, client.coordinator, client.region.0));
        let read = Op::Get(format!("k{}", client.id.0).into());
        TxnPlan::OneShot(Txn {
            pieces: vec![Piece::ops(ShardId(0), vec![read])],
        })
        .into()
    }

    fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
        Vec::new()
    }
}

fn setup() -> Setup<Tiga> {
    let topology = Topology::load("gcp-tiga").unwrap();
    meridian_sim::setup::<Tiga>(topology, ProtocolConfig::default(), Procedures::new()).unwrap()
}

/// What the simulator's clients were, as the workload saw them.
fn seen_by_the_simulator(
    setup: &Setup<Tiga>,
    per_coordinator: u32,
) -> BTreeSet<(u32, NodeId, u16)> {
    let seen = Seen::default();
    let mut workload = Where { seen: seen.clone() };
    let options = meridian_sim::SimOptions {
        clients_per_coordinator: per_coordinator,
        duration_ns: 1_000_000_000,
        drain_ns: 1_000_000_000,
        record_history: false,
        ..meridian_sim::SimOptions::default()
    };
    let report = meridian_sim::run::<Tiga>(setup, &mut workload, &options, &mut |_| {});
    assert!(report.committed > 0);
    let set = seen.lock().unwrap().clone();
    set
}

/// What the runtime's clients were, as the workload saw them, and the history's processes.
async fn seen_by_the_runtime(
    setup: &Setup<Tiga>,
    per_coordinator: usize,
) -> (BTreeSet<(u32, NodeId, u16)>, BTreeSet<u64>) {
    let options = LoadOptions {
        duration: Duration::from_millis(500),
        warmup: Duration::ZERO,
        rate_per_s: None,
        max_outstanding: per_coordinator,
        record_history: true,
        seed: 1,
    };
    let (seen, report) = run_on_the_runtime(setup, options).await;
    let processes = report.history.iter().map(|e| e.process).collect();
    (seen, processes)
}

/// Runs the `Where` workload on every node of `setup` in this process.
async fn run_on_the_runtime(
    setup: &Setup<Tiga>,
    options: LoadOptions,
) -> (BTreeSet<(u32, NodeId, u16)>, meridian_server::LoadReport) {
    let mut config = HostConfig::new(
        free_addresses(setup.cluster.nodes.len()),
        meridian_server::Security::InsecurePlaintext,
    );
    config.wan_scale = 0.0;
    config.serve_metrics = false;
    config.listen = false;
    let all: Vec<NodeId> = setup.cluster.nodes.iter().map(|n| n.id).collect();
    let host = Host::<Tiga>::start(setup.clone(), &all, config)
        .await
        .unwrap();
    let targets = setup
        .cluster
        .coordinators
        .iter()
        .map(|&c| Target {
            submit: Arc::new(host.local_client(c).unwrap()) as Arc<dyn Submit>,
            bound_ms: Arc::new(|_: &[ShardId]| 0.0),
        })
        .collect();
    let seen = Seen::default();
    let load = Load::start(
        &setup.cluster,
        Box::new(Where { seen: seen.clone() }),
        targets,
        options,
        tokio_util::sync::CancellationToken::new(),
    )
    .unwrap();
    let report = load.finish().await;
    host.shutdown().await;
    assert!(report.results.committed() > 0);
    let set = seen.lock().unwrap().clone();
    (set, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_drivers_place_the_same_clients_and_show_the_workload_their_region() {
    let setup = setup();
    let expected: BTreeSet<(u32, NodeId, u16)> = place_clients(&setup.cluster, 2)
        .iter()
        .map(|c| (c.id.0, c.coordinator, c.region.0))
        .collect();
    for &(_, coordinator, region) in &expected {
        assert_eq!(setup.cluster.region_of(coordinator).0, region);
    }
    let regions: BTreeSet<u16> = expected.iter().map(|e| e.2).collect();
    assert!(regions.len() > 1, "clients in several regions");
    let sim = seen_by_the_simulator(&setup, 2);
    assert_eq!(sim, expected, "the simulator's clients");
    let (runtime, processes) = seen_by_the_runtime(&setup, 2).await;
    assert_eq!(runtime, expected, "the runtime's clients");
    let ids: BTreeSet<u64> = expected.iter().map(|e| u64::from(e.0)).collect();
    assert!(processes.is_subset(&ids) && !processes.is_empty());
}

/// Open loop on the runtime as in the simulator: an arrival that finds every client of its
/// coordinator busy is counted as throttled, not queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_arrivals_beyond_the_cap_are_throttled() {
    let setup = setup();
    let options = LoadOptions {
        duration: Duration::from_millis(400),
        warmup: Duration::ZERO,
        rate_per_s: Some(40_000.0),
        max_outstanding: 1,
        record_history: true,
        seed: 2,
    };
    let (seen, report) = run_on_the_runtime(&setup, options).await;
    assert_eq!(
        seen.len(),
        setup.cluster.coordinators.len(),
        "one client each"
    );
    assert!(
        report.results.throttled > 0,
        "{:?}",
        report.results.throttled
    );
    // One client per coordinator: its history entries never overlap.
    let mut by_process: std::collections::BTreeMap<u64, Vec<(u64, u64)>> = Default::default();
    for e in &report.history {
        by_process
            .entry(e.process)
            .or_default()
            .push((e.invoke_ns, e.complete_ns));
    }
    for spans in by_process.values_mut() {
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
    }
}
