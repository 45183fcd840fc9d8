//! Behaviour of `aurogon`: the MVCC rules of §4.1 and §4.4 on one record, and, in the
//! simulator on §6.1's cluster, each mechanism against a run without it (same seed).

use super::mvcc::{Mvcc, ReadResult, Refusal, Rules};
use super::wire::Answer;
use super::*;
use meridian_core::time::{NS_PER_MS, NS_PER_S};
use meridian_core::topology::{ClockKind, ClockParams, ClockProfile};
use meridian_core::txn::Key;
use meridian_core::value::encode_int;
use meridian_core::{NodeId, Timestamp, Topology, TxnId};
use meridian_sim::{run, setup, FaultPlan, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;

fn ts(t: u64) -> Timestamp {
    Timestamp::new(t, 0)
}

fn txn(n: u64) -> TxnId {
    TxnId::new(NodeId(9), 0, n)
}

const SER: Rules = Rules {
    stale_read: false,
    immortal_write: false,
    late_read: false,
};
const SPS: Rules = Rules {
    stale_read: true,
    immortal_write: true,
    late_read: true,
};

#[test]
fn a_write_below_a_served_read_fails_and_reads_wait_for_pending_versions() {
    let mut m = Mvcc::new(4);
    let x = Key::from_static(b"x");
    // A read at 20 returns the initial version and extends its rts to 20.
    assert_eq!(m.read(&x, ts(20), SER), ReadResult::Value(None));
    // Fig. 2: a write at 10 arriving late conflicts with it (wts 0 <= 10 < rts 20).
    assert_eq!(
        m.install(&x, ts(10), txn(1), 0, SER),
        Err(Refusal::LateWrite)
    );
    // A write above the read installs PENDING; a read above it blocks, one below not.
    m.install(&x, ts(30), txn(2), 0, SER).unwrap();
    assert_eq!(m.read(&x, ts(40), SER), ReadResult::Blocked(txn(2)));
    assert_eq!(m.read(&x, ts(25), SER), ReadResult::Value(None));
    // The read at 40 extended the pending version's rts: a write at 35 now fails.
    assert_eq!(
        m.install(&x, ts(35), txn(3), 0, SER),
        Err(Refusal::LateWrite)
    );
    m.commit(&x, ts(30), txn(2), encode_int(7));
    assert_eq!(
        m.read(&x, ts(40), SER),
        ReadResult::Value(Some(encode_int(7)))
    );
    // Idempotent re-install by the same transaction; the floor refuses older writes.
    m.install(&x, ts(50), txn(4), 0, SER).unwrap();
    m.install(&x, ts(50), txn(4), 0, SER).unwrap();
    assert_eq!(
        m.install(&x, ts(60), txn(5), 61, SER),
        Err(Refusal::BelowFloor)
    );
    m.check().unwrap();
}

#[test]
fn strong_partition_refuses_stale_reads_and_immortal_writes() {
    let mut m = Mvcc::new(4);
    let x = Key::from_static(b"x");
    m.install(&x, ts(30), txn(1), 0, SPS).unwrap();
    m.commit(&x, ts(30), txn(1), encode_int(1));
    // A read at 20 would return the version before the committed one at 30.
    assert_eq!(m.read(&x, ts(20), SER), ReadResult::Value(None));
    assert_eq!(
        m.read(&x, ts(20), SPS),
        ReadResult::Failed(Refusal::StaleRead)
    );
    // A write at 25 would be overwritten forever by the committed one at 30.
    assert_eq!(
        m.install(&x, ts(25), txn(2), 0, SPS),
        Err(Refusal::ImmortalWrite)
    );
    assert_eq!(m.install(&x, ts(25), txn(2), 0, SER), Ok(()));
}

#[test]
fn strong_partition_refuses_a_read_below_one_already_answered() {
    let mut m = Mvcc::new(4);
    let x = Key::from_static(b"x");
    // T1 reads x at 30 and may have finished; T2, whose clock lags, reads it at 20.
    assert_eq!(m.read(&x, ts(30), SPS), ReadResult::Value(None));
    assert_eq!(m.read(&x, ts(20), SER), ReadResult::Value(None));
    assert_eq!(
        m.read(&x, ts(20), SPS),
        ReadResult::Failed(Refusal::LateRead)
    );
    // Readers still blocked on a pending version do not count: once it commits, the
    // lower one is answered too (it may be answered first).
    m.install(&x, ts(40), txn(1), 0, SPS).unwrap();
    assert_eq!(m.read(&x, ts(60), SPS), ReadResult::Blocked(txn(1)));
    assert_eq!(m.read(&x, ts(50), SPS), ReadResult::Blocked(txn(1)));
    m.commit(&x, ts(40), txn(1), encode_int(1));
    assert_eq!(
        m.read(&x, ts(50), SPS),
        ReadResult::Value(Some(encode_int(1)))
    );
    assert_eq!(
        m.read(&x, ts(60), SPS),
        ReadResult::Value(Some(encode_int(1)))
    );
    assert_eq!(
        m.read(&x, ts(55), SPS),
        ReadResult::Failed(Refusal::LateRead)
    );
}

/// One simulator run of Aurogon on `rdma-cluster`.
fn sim(opts: &str, workload: &str, workload_opts: &str, seed: u64, ms: u64) -> SimReport {
    sim_clocked(None, opts, workload, workload_opts, seed, ms)
}

/// [`sim`] with every machine's clock replaced by `clock`.
fn sim_clocked(
    clock: Option<ClockParams>,
    opts: &str,
    workload: &str,
    workload_opts: &str,
    seed: u64,
    ms: u64,
) -> SimReport {
    let config = meridian_core::ProtocolConfig::parse(opts).unwrap();
    let mut topology = Topology::load("rdma-cluster").unwrap();
    if let Some(params) = clock {
        let name = "test".to_string();
        topology.set_all_clocks(ClockProfile { name, params });
    }
    let setup = setup::<Aurogon>(topology, config, meridian_workload::procedures()).unwrap();
    let options = SimOptions {
        seed,
        duration_ns: ms * NS_PER_MS,
        drain_ns: 20 * NS_PER_MS,
        clients_per_coordinator: 4,
        service_time_ns: 2_000,
        faults: FaultPlan::default(),
        ..SimOptions::default()
    };
    let wopts = WorkloadOptions::parse(workload_opts.split(',').filter(|s| !s.is_empty())).unwrap();
    let mut w = meridian_workload::build(workload, &setup.cluster, &wopts).unwrap();
    run::<Aurogon>(&setup, w.as_mut(), &options, &mut |_| {})
}

fn counter(report: &SimReport, name: &str) -> u64 {
    report.counters.get(name).copied().unwrap_or(0)
}

fn abort_rate(r: &SimReport) -> f64 {
    r.aborted as f64 / (r.committed + r.aborted).max(1) as f64
}

const HOT_YCSB: &str = "ops=8,rmw_ratio=0.5,zipf=0.99,records=1000";

#[test]
fn deferral_on_hot_records_cuts_late_write_aborts() {
    let on = sim("deferral=true", "ycsb-t", HOT_YCSB, 3, 30);
    let off = sim("deferral=false", "ycsb-t", HOT_YCSB, 3, 30);
    assert!(counter(&on, "aurogon.deferred_reads") > 0);
    assert_eq!(counter(&off, "aurogon.deferred_reads"), 0);
    assert!(
        abort_rate(&on) * 4.0 < abort_rate(&off),
        "deferral on: {:.4}, off: {:.4}",
        abort_rate(&on),
        abort_rate(&off)
    );
}

#[test]
fn pre_attaching_saves_the_second_round_of_dependent_writes() {
    let on = sim("pre_attach=true", "ycsb-t", HOT_YCSB, 4, 10);
    let off = sim("pre_attach=false", "ycsb-t", HOT_YCSB, 4, 10);
    assert_eq!(counter(&on, "aurogon.second_rounds"), 0);
    assert!(counter(&off, "aurogon.second_rounds") > 100);
    // Fig. 5: without pre-attaching, a dependent write arrives a round after its read and
    // finds the record read above it (the vulnerable interval); same seed, same load.
    assert!(
        abort_rate(&on) * 4.0 < abort_rate(&off),
        "pre-attached: {:.4}, not: {:.4}",
        abort_rate(&on),
        abort_rate(&off)
    );
    assert!(
        on.committed > 2 * off.committed,
        "{} vs {}",
        on.committed,
        off.committed
    );
}

/// The abort-cause counters (`causes.rs`) of a run, and their sum.
fn causes(r: &SimReport) -> ([u64; 4], u64) {
    let c = [
        counter(r, "aurogon.abort_cause.clock_error"),
        counter(r, "aurogon.abort_cause.access_latency"),
        counter(r, "aurogon.abort_cause.dependency"),
        counter(r, "aurogon.abort_cause.other"),
    ];
    (c, c.iter().sum())
}

/// Fig. 2a: with clocks that only err by a fixed offset per machine (±50 µs, ten times
/// the round trip) and nothing else reordering on purpose (pre-attaching on, so no
/// dependent write waits; deferral off), the late writes are the clocks' doing; with
/// perfect clocks, none is.
#[test]
fn a_pure_clock_skew_makes_clock_error_aborts() {
    let skewed = ClockParams {
        model: ClockKind::Dst,
        error_ms: 0.05,
        ..ClockParams::default()
    };
    let opts = "pre_attach=true,deferral=false";
    let skew = sim_clocked(Some(skewed), opts, "ycsb-t", HOT_YCSB, 5, 20);
    let perfect = sim_clocked(
        Some(ClockParams::default()),
        opts,
        "ycsb-t",
        HOT_YCSB,
        5,
        20,
    );
    let ([clock, latency, dependency, _], sum) = causes(&skew);
    assert_eq!(sum, skew.aborted, "one cause per abort");
    assert_eq!(
        dependency, 0,
        "pre-attached writes never wait for their reads"
    );
    assert!(
        clock > 10 && clock > 4 * latency,
        "clock error {clock}, access latency {latency}"
    );
    let ([clock, latency, ..], sum) = causes(&perfect);
    assert_eq!(sum, perfect.aborted);
    assert_eq!(clock, 0, "perfect clocks never misorder timestamps");
    assert!(
        latency > 0,
        "the local primary still answers first (Fig. 2b)"
    );
}

/// Fig. 2c: without pre-attaching, a dependent write goes a round after its read, and the
/// reads that come in between make most of the aborts.
#[test]
fn without_pre_attaching_dependent_writes_make_dependency_aborts() {
    let r = sim_clocked(
        Some(ClockParams::default()),
        "pre_attach=false,deferral=false",
        "ycsb-t",
        HOT_YCSB,
        6,
        10,
    );
    let ([clock, latency, dependency, _], sum) = causes(&r);
    assert_eq!(sum, r.aborted);
    assert_eq!(clock, 0);
    assert!(
        dependency > latency,
        "dependency {dependency}, access latency {latency}"
    );
}

#[test]
fn a_crashed_primary_is_replaced_by_its_backup_and_commits_continue() {
    let config = meridian_core::ProtocolConfig::parse("").unwrap();
    let topology = Topology::load("rdma-cluster").unwrap();
    let setup = setup::<Aurogon>(topology, config, meridian_workload::procedures()).unwrap();
    let plan = FaultPlan::parse("crash:shard0/replica0@200ms", &setup.cluster).unwrap();
    let options = SimOptions {
        seed: 2,
        duration_ns: NS_PER_S,
        drain_ns: 100 * NS_PER_MS,
        service_time_ns: 20_000,
        faults: plan,
        ..SimOptions::default()
    };
    let mut w =
        meridian_workload::build("list-append", &setup.cluster, &WorkloadOptions::default())
            .unwrap();
    let report = run::<Aurogon>(&setup, w.as_mut(), &options, &mut |_| {});
    assert!(counter(&report, "aurogon.promotions") >= 1);
    let verdict = meridian_check::check(&report.history, meridian_check::Model::Serializable);
    assert!(verdict.valid, "{verdict}");
    // The machine stays down to the end of the load: commits after the crash went through
    // shard 0's promoted backup (and its former primary's restart at the drain).
    assert!(report.committed > 1000, "{} committed", report.committed);
}

#[test]
fn bad_options_are_refused_by_name() {
    let cluster =
        meridian_core::Cluster::without_services(&Topology::load("rdma-cluster").unwrap()).unwrap();
    for (raw, name) in [
        ("isolation=snapshot", "isolation"),
        ("failover_ms=0.5,heartbeat_ms=1", "failover_ms"),
        ("hot_threshold=0", "hot_threshold"),
        ("nope=1", "nope"),
    ] {
        let config = meridian_core::ProtocolConfig::parse(raw).unwrap();
        let err = Options::for_cluster(&config, &cluster).unwrap_err();
        assert!(err.contains(name), "{raw}: {err}");
    }
}

#[test]
fn dst_to_runs_chasing_clocks_without_the_techniques() {
    let cluster =
        meridian_core::Cluster::without_services(&Topology::load("rdma-cluster").unwrap()).unwrap();
    let raw = meridian_core::ProtocolConfig::parse("").unwrap();
    let o = <DstTo as meridian_core::Protocol>::parse_options(&raw, &cluster).unwrap();
    assert_eq!(
        (o.clock, o.pre_attach, o.deferral),
        (ClockMode::Dst, false, false)
    );
    let raw = meridian_core::ProtocolConfig::parse("pre_attach=true").unwrap();
    let o = <DstTo as meridian_core::Protocol>::parse_options(&raw, &cluster).unwrap();
    assert!(o.pre_attach, "an explicit option wins");
    let o = Options::for_cluster(&meridian_core::ProtocolConfig::default(), &cluster).unwrap();
    assert_eq!(o.clock, ClockMode::Synchronized);
}

/// Issue 21, random-fault seed 5 on `gcp-tiga`: a backup answered a recovery's inquiry
/// NotHeld before the coordinator's REPLICATE reached it across the WAN, then refused that
/// REPLICATE, so the coordinator answered "aborted"; meanwhile the primary's recovery saw
/// the other backup hold the update and committed it (one holder was enough). Recovery now
/// commits only when every backup holds, as the coordinator does, and the aborted append
/// stays out of the final list.
#[test]
fn an_answered_abort_is_final_under_wan_recovery() {
    let config = meridian_core::ProtocolConfig::parse("").unwrap();
    let topology = Topology::load("gcp-tiga").unwrap();
    let setup = setup::<Aurogon>(topology, config, meridian_workload::procedures()).unwrap();
    let mut options = SimOptions {
        seed: 5,
        ..SimOptions::default()
    };
    let model = <Aurogon as meridian_core::Protocol>::fault_model(&setup.cluster);
    options.faults = FaultPlan::random_for_seed(&setup.cluster, &model, options.duration_ns, 5);
    let mut w =
        meridian_workload::build("list-append", &setup.cluster, &WorkloadOptions::default())
            .unwrap();
    let report = run::<Aurogon>(&setup, w.as_mut(), &options, &mut |_| {});
    assert!(report.audited_keys > 0, "the final state was audited");
    assert!(report.invariant.is_ok(), "{:?}", report.invariant);
    let verdict = meridian_check::check(&report.history, meridian_check::Model::Serializable);
    assert!(verdict.valid, "{verdict}");
}

/// The answers seed 5's recovery saw on shard 1 (n3 the primary that executed, n4 and n5
/// its backups): one backup holding is not every backup holding, and two promises not to
/// hold rule the commit out for good.
#[test]
fn recovery_commits_only_when_every_backup_holds() {
    let (p, b1, b2) = (NodeId(3), NodeId(4), NodeId(5));
    let replicas = [p, b1, b2];
    let held = Answer::Held(Vec::new());
    let not_held = Answer::NotHeld;
    let verdict = |answers: &[(NodeId, &Answer)]| super::server::shard_verdict(&replicas, answers);
    assert_eq!(
        verdict(&[(p, &not_held), (b2, &not_held), (b1, &held)]),
        Some(false)
    );
    assert_eq!(verdict(&[(p, &not_held), (b1, &held)]), None);
    assert_eq!(verdict(&[(b1, &held), (b2, &held)]), Some(true));
    assert_eq!(
        verdict(&[(p, &not_held), (b1, &held), (b2, &held)]),
        Some(true)
    );
    // A shard without backups has no holder to recover from.
    let alone = super::server::shard_verdict(&[p], &[(p, &not_held)]);
    assert_eq!(alone, Some(false));
    // Answers from nodes outside the shard do not count.
    assert_eq!(verdict(&[(b1, &held), (NodeId(9), &held)]), None);
}
