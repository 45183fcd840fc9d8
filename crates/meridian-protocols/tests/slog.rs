//! SLOG in the simulator: the global orderer survives its leader's crash, and it is what
//! keeps multi-home transactions in one order across regions.

use meridian_check::{check, EntryType, Model};
use meridian_core::time::NS_PER_S;
use meridian_core::{ProtocolConfig, Topology};
use meridian_protocols::slog::{Slog, ORDERER};
use meridian_sim::faults::{Fault, FaultPlan};
use meridian_sim::{run, setup, Conformance, SimOptions};
use meridian_workload::WorkloadOptions;

/// The orderer that campaigns first (the leader at boot) crashes at 3 s and stays down
/// until 8 s: multi-home transactions (most of list-append's on `edge-regions`) invoked
/// while it is down still commit, through the new leader, and the history stays strictly
/// serializable.
#[test]
fn global_orderer_survives_its_leader_crash() {
    let topology = Topology::load("edge-regions").unwrap();
    let setup = setup::<Slog>(
        topology,
        ProtocolConfig::default(),
        meridian_workload::procedures(),
    )
    .unwrap();
    let leader = setup.cluster.services(ORDERER)[0];
    let mut options = SimOptions {
        seed: 7,
        duration_ns: 10 * NS_PER_S,
        ..SimOptions::default()
    };
    options.faults = FaultPlan {
        faults: vec![
            (3 * NS_PER_S, Fault::Crash(leader)),
            (8 * NS_PER_S, Fault::Restart(leader)),
        ],
        storage: false,
    };
    let opts = WorkloadOptions::parse(std::iter::empty::<&str>()).unwrap();
    let mut workload = meridian_workload::build("list-append", &setup.cluster, &opts).unwrap();
    let report = run::<Slog>(&setup, workload.as_mut(), &options, &mut |_| {});
    let verdict = check(&report.history, Model::StrictSerializable);
    assert!(verdict.valid, "{verdict}");
    let while_down = report
        .history
        .iter()
        .filter(|e| e.kind == EntryType::Ok)
        .filter(|e| e.invoke_ns > 4 * NS_PER_S && e.complete_ns < 8 * NS_PER_S)
        .count();
    assert!(
        while_down > 100,
        "only {while_down} commits while the orderer leader was down"
    );
}

/// With DAST §6's lock release (serializable, not strict), the same seeds pass the
/// serializability check with the global orderer and fail it without: regions that log
/// multi-home transactions as they arrive order two of them oppositely.
#[test]
fn skipping_the_global_orderer_breaks_serializability() {
    let spec = Conformance::new("edge-regions", "list-append");
    let caught = |opts: &str| {
        (1..6).any(|seed| {
            let report = spec.run::<Slog>(opts, "list-append", "keys=4", seed, false);
            !check(&report.history, Model::Serializable).valid
        })
    };
    assert!(!caught("release=pieces"));
    assert!(caught("release=pieces,unsafe_skip_global_order=true"));
}

/// Every edge node holds its whole region's log (a Raft group of the region's edge nodes).
/// Without compaction each node's copy held every entry of the run (its memory, and its
/// durable log, grew with the run); with it, the log an edge node holds stays within a
/// few `log_limit`s, including across a member's crash and restart, which replays from
/// its own snapshot — and the history stays strictly serializable.
#[test]
fn region_logs_are_compacted_behind_each_members_own_snapshot() {
    let topology = Topology::load("edge-regions").unwrap();
    let run_with = |protocol_opts: &str| {
        let config = ProtocolConfig::parse(protocol_opts).unwrap();
        let setup =
            setup::<Slog>(topology.clone(), config, meridian_workload::procedures()).unwrap();
        let node = setup.cluster.node_by_name("shard0/replica1").unwrap();
        let mut options = SimOptions {
            seed: 3,
            duration_ns: 5 * NS_PER_S,
            ..SimOptions::default()
        };
        options.faults = FaultPlan {
            faults: vec![
                (2 * NS_PER_S, Fault::Crash(node)),
                (5 * NS_PER_S / 2, Fault::Restart(node)),
            ],
            storage: false,
        };
        let opts = WorkloadOptions::parse(std::iter::empty::<&str>()).unwrap();
        let mut workload = meridian_workload::build("list-append", &setup.cluster, &opts).unwrap();
        let report = run::<Slog>(&setup, workload.as_mut(), &options, &mut |_| {});
        let edges = setup.cluster.shard_count() as u64 * 3;
        let counter = |name: &str| report.counters.get(name).copied().unwrap_or(0);
        let peak = counter("slog.log_peak_entries") as f64 / edges as f64;
        let compactions = counter("slog.compactions");
        let logged = counter("slog.logged_peak_keys") as f64 / edges as f64;
        (report, peak, compactions, logged, edges)
    };
    let (compacted, peak, compactions, logged, edges) = run_with("log_limit=16");
    let (whole, peak_whole, none, _, _) = run_with("log_limit=1000000");
    eprintln!(
        "committed: {} compacted, {} not",
        compacted.committed, whole.committed
    );
    eprintln!("log entries held per edge node at most: {peak:.1} compacted, {peak_whole:.1} not");
    eprintln!("transaction keys remembered per edge node at most: {logged:.1}");
    let verdict = check(&compacted.history, Model::StrictSerializable);
    assert!(verdict.valid, "{verdict}");
    assert!(
        compacted.committed > 300,
        "{} committed",
        compacted.committed
    );
    assert!(
        compactions > 0 && none == 0,
        "{compactions} compactions, {none} unlimited"
    );
    assert!(peak <= 8.0 * 16.0, "{peak:.1} entries per edge node");
    assert!(peak_whole > 4.0 * peak, "{peak_whole:.1} vs {peak:.1}");
    // The keys a log remembers to skip resent orders follow the coordinators' floors
    // (`logged.rs`), not the run (before, every edge node kept every key its region
    // logged): about the orders in flight, each coordinator's 2 closed-loop clients.
    let edges_per_region = edges as f64 / topology.regions.len() as f64;
    let in_flight = 2.0 * edges_per_region;
    assert!(
        logged <= 2.0 * in_flight,
        "{logged:.1} keys, {in_flight:.1} clients per region"
    );
}
