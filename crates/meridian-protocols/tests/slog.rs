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
