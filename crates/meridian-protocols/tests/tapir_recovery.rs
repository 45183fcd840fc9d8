//! TAPIR's IR view change in a whole simulated run (issue 18): a replica of shard 0 crashes
//! mid-run and restarts; it rejoins through a view change (never voting from its log
//! alone), and afterwards it is part of fast quorums again. The history stays strictly
//! serializable.

use meridian_check::{check, Model};
use meridian_core::time::NS_PER_S;
use meridian_core::{ProtocolConfig, Topology};
use meridian_protocols::tapir::Tapir;
use meridian_sim::{run, setup, FaultPlan, SimOptions};
use meridian_workload::WorkloadOptions;

#[test]
fn a_crashed_replica_recovers_by_a_view_change_and_is_in_fast_quorums_again() {
    let setup = setup::<Tapir>(
        Topology::load("gcp-tiga").unwrap(),
        ProtocolConfig::default(),
        meridian_workload::procedures(),
    )
    .unwrap();
    let faults = "crash:shard0/replica2@3s,restart:shard0/replica2@6s";
    let options = SimOptions {
        seed: 7,
        duration_ns: 12 * NS_PER_S,
        faults: FaultPlan::parse(faults, &setup.cluster).unwrap(),
        ..SimOptions::default()
    };
    let opts = WorkloadOptions::parse("".split(',').filter(|s| !s.is_empty())).unwrap();
    let mut workload = meridian_workload::build("list-append", &setup.cluster, &opts).unwrap();
    let report = run::<Tapir>(&setup, workload.as_mut(), &options, &mut |_| {});
    assert_eq!(report.invariant, Ok(()));
    let verdict = check(&report.history, Model::StrictSerializable);
    assert!(verdict.valid, "{verdict}");
    let counter = |name: &str| report.counters.get(name).copied().unwrap_or(0);
    assert_eq!(counter("tapir_recoveries"), 1, "{:?}", report.counters);
    // Only shard 0 changed views, and a fast quorum of n = 3 is every replica: a fast
    // quorum in a later view includes the recovered replica's vote.
    assert!(
        counter("tapir_fast_quorum_after_view_change") > 0,
        "{:?}",
        report.counters
    );
    assert!(counter("tapir_votes_after_recovery") > 0);
}
