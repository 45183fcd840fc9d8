//! Clock-SI and conventional SI end to end: simulator + interactive workloads + checker.
//!
//! * A fixed swarm of faulty seeds (crashes and restarts of partitions and coordinators,
//!   partitions, loss, duplication, clock steps; clock profiles up to `bad`) on `gcp-tiga`
//!   with interactive list-append must give snapshot-isolation histories with commits.
//! * The same swarms in replicated mode (each partition a Raft group of SC, FI, BR), where
//!   the crashes hit leaders and followers alike.
//! * Write skew: two transactions that read x and y and write one each both commit;
//!   the checker accepts the history as snapshot isolation and rejects it as serializable.
//! * Latency: a read-only transaction of Clock-SI avoids conventional SI's round trip to
//!   the oracle (in SC), so the medians differ by about the coordinator–SC round trip.

use meridian_check::{check, Entry, HistOp, Model, ReadValue};
use meridian_core::time::NS_PER_S;
use meridian_core::txn::{Outcome, Value};
use meridian_core::value::{decode_int, decode_list, encode_int};
use meridian_core::{ClockProfile, NodeRng, Procedures, Protocol, ProtocolConfig, Topology};
use meridian_protocols::clock_si::{ClockSi, ConventionalSi};
use meridian_sim::{run, setup, FaultKinds, FaultPlan, SimOptions, SimReport};
use meridian_workload::{InteractiveOp, TxnPlan, Workload, WorkloadOptions};
use rand::SeedableRng;
use std::collections::BTreeMap;

/// The clock profile a swarm seed runs with: every third seed `bad` (≈ 60 ms error, steps),
/// every third `ntpd`, the rest the topology's `huygens`.
fn clock_for(seed: u64) -> Option<&'static str> {
    match seed % 3 {
        0 => Some("bad"),
        1 => Some("ntpd"),
        _ => None,
    }
}

fn simulate<P: Protocol>(
    seed: u64,
    clock: Option<&str>,
    faults: bool,
    workload: &str,
    workload_opts: WorkloadOptions,
    duration_s: u64,
) -> SimReport {
    let config = ProtocolConfig::default();
    simulate_with::<P>(
        config,
        seed,
        clock,
        faults,
        workload,
        workload_opts,
        duration_s,
    )
}

fn simulate_with<P: Protocol>(
    config: ProtocolConfig,
    seed: u64,
    clock: Option<&str>,
    faults: bool,
    workload: &str,
    workload_opts: WorkloadOptions,
    duration_s: u64,
) -> SimReport {
    let mut topology = Topology::load("gcp-tiga").unwrap();
    if let Some(profile) = clock {
        topology.set_all_clocks(ClockProfile::builtin(profile).unwrap());
    }
    let setup = setup::<P>(topology, config, Procedures::new()).unwrap();
    let mut options = SimOptions {
        seed,
        duration_ns: duration_s * NS_PER_S,
        ..SimOptions::default()
    };
    if faults {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xC10C_5107);
        options.faults = FaultPlan::random(
            &setup.cluster,
            &P::fault_model(&setup.cluster),
            options.duration_ns,
            &mut rng,
            FaultKinds::ALL,
        );
    }
    let mut workload = meridian_workload::build(workload, &setup.cluster, &workload_opts).unwrap();
    run::<P>(&setup, workload.as_mut(), &options, &mut |_| {})
}

fn interactive() -> WorkloadOptions {
    WorkloadOptions::default().with("interactive", "true")
}

fn swarm<P: Protocol>() {
    swarm_with::<P>(ProtocolConfig::default(), 21, 500, 100);
}

/// `seeds` faulty seeds must each give a snapshot-isolation history with at least
/// `min_per_seed` commits, and commit `per_seed` transactions a seed on average.
fn swarm_with<P: Protocol>(config: ProtocolConfig, seeds: u64, per_seed: u64, min_per_seed: u64) {
    let (mut committed, mut unknown, mut bad_seeds) = (0, 0, 0);
    for seed in 1..=seeds {
        let clock = clock_for(seed);
        let (workload, opts) = ("list-append", interactive());
        let report = simulate_with::<P>(config.clone(), seed, clock, true, workload, opts, 20);
        let verdict = check(&report.history, Model::SnapshotIsolation);
        assert!(
            verdict.valid,
            "{} seed {seed} clock {clock:?}: {verdict}",
            P::NAME
        );
        assert!(
            report.invariant.is_ok(),
            "seed {seed}: {:?}",
            report.invariant
        );
        assert!(
            report.committed > min_per_seed,
            "{} seed {seed}: only {} committed",
            P::NAME,
            report.committed
        );
        committed += report.committed;
        unknown += report.unknown;
        bad_seeds += u64::from(clock == Some("bad"));
    }
    assert_eq!(bad_seeds, seeds / 3);
    // Faults must actually bite somewhere in the swarm.
    assert!(
        unknown > 0,
        "{}: random faults produced no unknown outcome",
        P::NAME
    );
    eprintln!(
        "{}: {seeds} seeds, {committed} committed, {unknown} unknown",
        P::NAME
    );
    assert!(
        committed > seeds * per_seed,
        "{}: committed {committed}",
        P::NAME
    );
}

#[test]
fn clock_si_swarm_of_21_faulty_seeds_is_snapshot_isolation() {
    swarm::<ClockSi>();
}

#[test]
fn conventional_si_swarm_of_21_faulty_seeds_is_snapshot_isolation() {
    swarm::<ConventionalSi>();
}

/// Replicated mode: every partition a Raft group of its shard's three replicas (SC, FI,
/// BR); the random faults crash and restart replicas (leaders included), cut links, lose
/// and duplicate messages, step clocks.
#[test]
fn replicated_clock_si_swarm_of_12_faulty_seeds_is_snapshot_isolation() {
    // Every commit waits for a WAN round trip to a follower: fewer transactions a run, and
    // the random faults overlap (a crash inside a partition stalls a Raft group until both
    // end), so a seed may commit half of a calm one.
    swarm_with::<ClockSi>(
        ProtocolConfig::parse("replicated=true").unwrap(),
        12,
        200,
        50,
    );
}

#[test]
fn replicated_conventional_si_swarm_of_9_faulty_seeds_is_snapshot_isolation() {
    // The oracle is crashed by the random faults too: nothing begins while it is down.
    swarm_with::<ConventionalSi>(
        ProtocolConfig::parse("replicated=true").unwrap(),
        9,
        100,
        50,
    );
}

/// Commits by clients outside SC when SC (every partition's placed leader, two
/// coordinators) is cut off from 3 s to the end of the load.
fn commits_outside_sc_with_sc_cut_off(config: &str) -> u64 {
    let topology = Topology::load("gcp-tiga").unwrap();
    let config = ProtocolConfig::parse(config).unwrap();
    let setup = setup::<ClockSi>(topology, config, Procedures::new()).unwrap();
    let options = SimOptions {
        seed: 3,
        duration_ns: 20 * NS_PER_S,
        drain_ns: 5 * NS_PER_S,
        faults: FaultPlan::parse("isolate:SC@3s", &setup.cluster).unwrap(),
        ..SimOptions::default()
    };
    let opts = interactive().with("keys", "1000");
    let mut workload = meridian_workload::build("list-append", &setup.cluster, &opts).unwrap();
    let report = run::<ClockSi>(&setup, workload.as_mut(), &options, &mut |_| {});
    let verdict = check(&report.history, Model::SnapshotIsolation);
    assert!(verdict.valid, "{verdict}");
    report
        .regions
        .iter()
        .filter(|r| r.region != "SC")
        .map(|r| r.committed)
        .sum()
}

/// Faithful, every partition lives in SC and the other regions' transactions stall; with
/// replicated partitions, FI and BR replicas take over and they keep committing.
#[test]
fn replicated_partitions_survive_a_region_failure() {
    let faithful = commits_outside_sc_with_sc_cut_off("");
    let replicated = commits_outside_sc_with_sc_cut_off("replicated=true");
    eprintln!("commits outside SC: faithful {faithful}, replicated {replicated}");
    assert!(
        replicated > 3 * faithful.max(20),
        "faithful {faithful}, replicated {replicated}"
    );
}

#[test]
fn one_shot_list_append_runs_as_sessions_under_faults() {
    for seed in 1..=5 {
        for conventional in [false, true] {
            let clock = clock_for(seed);
            let opts = WorkloadOptions::default();
            let report = if conventional {
                simulate::<ConventionalSi>(seed, clock, true, "list-append", opts, 10)
            } else {
                simulate::<ClockSi>(seed, clock, true, "list-append", opts, 10)
            };
            let verdict = check(&report.history, Model::SnapshotIsolation);
            assert!(
                verdict.valid,
                "seed {seed} conventional {conventional}: {verdict}"
            );
            assert!(
                report.committed > 100,
                "seed {seed}: {} committed",
                report.committed
            );
        }
    }
}

// ---- write skew -----------------------------------------------------------------------

/// The classic write-skew shape, kept to this test: clients pair up (clients 2j and 2j+1,
/// which sit on coordinators of the same region and so run in lockstep); the k-th
/// transaction of each client of pair j reads `x{j}.{k}` and `y{j}.{k}` and appends to one
/// of them — the even client to x, the odd one to y. The keys are list-append keys (the
/// checker infers anti-dependency edges only for lists: a read of `[]` followed by
/// another transaction's append is an rw edge). Each key gets one append, of a unique value.
struct WriteSkewWorkload {
    rounds: BTreeMap<u32, u64>,
}

impl WriteSkewWorkload {
    fn keys(client: u32, round: u64) -> (Value, Value) {
        let pair = client / 2;
        (
            Value::from(format!("x{pair}.{round}")),
            Value::from(format!("y{pair}.{round}")),
        )
    }
}

impl Workload for WriteSkewWorkload {
    fn name(&self) -> &str {
        "write-skew"
    }

    fn next(
        &mut self,
        client: &meridian_workload::ClientInfo,
        _rng: &mut NodeRng,
    ) -> meridian_workload::Planned {
        let client = client.id;
        let round = self.rounds.entry(client.0).or_default();
        let (x, y) = Self::keys(client.0, *round);
        *round += 1;
        let mine = if client.0.is_multiple_of(2) {
            x.clone()
        } else {
            y.clone()
        };
        meridian_workload::Planned::from(TxnPlan::Interactive(vec![
            InteractiveOp::Get(x),
            InteractiveOp::Get(y),
            InteractiveOp::Append(mine, encode_int(i64::from(client.0) + 1)),
        ]))
    }

    fn history_ops(
        &self,
        plan: &TxnPlan,
        outcome: &Outcome,
        reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        let TxnPlan::Interactive(ops) = plan else {
            unreachable!("interactive only")
        };
        let name = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
        let mut hist = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                InteractiveOp::Get(k) => {
                    // The two gets come first: reads[0] and reads[1].
                    let value = match (outcome.is_committed(), reads.get(i)) {
                        (true, Some(v)) => ReadValue::List(
                            v.as_ref()
                                .map_or_else(Vec::new, |b| decode_list(b).expect("a list")),
                        ),
                        _ => ReadValue::Null,
                    };
                    hist.push(HistOp::Read {
                        key: name(k),
                        value,
                    });
                }
                InteractiveOp::Append(k, v) => hist.push(HistOp::Append {
                    key: name(k),
                    value: decode_int(v).expect("an int"),
                }),
                InteractiveOp::GetMany(_) | InteractiveOp::Put(..) | InteractiveOp::Add(..) => {
                    unreachable!("not planned")
                }
            }
        }
        hist
    }
}

fn write_skew_history<P: Protocol>() -> Vec<Entry> {
    let topology = Topology::load("gcp-tiga").unwrap();
    let setup = setup::<P>(topology, ProtocolConfig::default(), Procedures::new()).unwrap();
    let options = SimOptions {
        seed: 7,
        duration_ns: NS_PER_S,
        clients_per_coordinator: 1,
        ..SimOptions::default()
    };
    let mut workload = WriteSkewWorkload {
        rounds: BTreeMap::new(),
    };
    let report = run::<P>(&setup, &mut workload, &options, &mut |_| {});
    assert_eq!(report.aborted, 0, "disjoint write sets never conflict");
    assert!(report.committed > 100, "committed {}", report.committed);
    report.history
}

#[test]
fn write_skew_is_snapshot_isolation_but_not_serializable() {
    for history in [
        write_skew_history::<ClockSi>(),
        write_skew_history::<ConventionalSi>(),
    ] {
        let si = check(&history, Model::SnapshotIsolation);
        assert!(si.valid, "SI permits write skew: {si}");
        let ser = check(&history, Model::Serializable);
        assert!(!ser.valid, "write skew must be caught as not serializable");
        // Both transactions of a skewed pair read the other's key as never written.
        let skewed = history
            .iter()
            .filter(|e| e.ops.iter().take(2).all(|op| matches!(op, HistOp::Read { value: ReadValue::List(l), .. } if l.is_empty())))
            .count();
        assert!(skewed >= 2, "no transaction read both keys unwritten");
    }
}

// ---- latency --------------------------------------------------------------------------

/// Medians per coordinator region of read-only, one-read interactive transactions.
fn read_only_medians<P: Protocol>() -> BTreeMap<String, f64> {
    let opts = interactive().with("read_ratio", "1.0").with("ops_max", "1");
    let report = simulate::<P>(11, None, false, "list-append", opts, 10);
    assert_eq!(report.unknown, 0);
    assert_eq!(
        report.aborted, 0,
        "read-only transactions never abort under SI"
    );
    assert!(check(&report.history, Model::SnapshotIsolation).valid);
    report
        .regions
        .iter()
        .map(|r| (r.region.clone(), r.percentile_ms(50.0).unwrap()))
        .collect()
}

#[test]
fn read_only_transactions_avoid_the_oracle_round_trip() {
    let clock_si = read_only_medians::<ClockSi>();
    let conventional = read_only_medians::<ConventionalSi>();
    let topology = Topology::load("gcp-tiga").unwrap();
    let sc = topology.region_id("SC").unwrap();
    for (region, csi) in &clock_si {
        let conv = conventional[region];
        let rtt = topology.rtt_ms(topology.region_id(region).unwrap(), sc);
        let saving = conv - csi;
        eprintln!("{region}: clock-si p50 {csi:.1} ms, conventional-si p50 {conv:.1} ms, saving {saving:.1} ms (RTT to the oracle {rtt:.1} ms)");
        // Clock-SI: one round trip to the data (all shards' data is in SC); conventional
        // SI adds the round trip to the oracle (also in SC) for the snapshot.
        assert!(
            (saving - rtt).abs() <= 0.1 * rtt + 2.0,
            "{region}: saving {saving:.1} ms, expected about {rtt:.1} ms"
        );
        assert!(
            (csi - rtt).abs() <= 0.1 * rtt + 2.0,
            "{region}: clock-si p50 {csi:.1} ms"
        );
    }
}

/// Replicated partitions with a small Raft log limit, under random faults (crashes of
/// leaders and followers, partitions, loss): compaction keeps every member's log far
/// shorter than without it (the per-member peaks, summed, under half of the unbounded
/// run's), the snapshots written stay within twice the bytes the members applied (the
/// amortization of `Member::compact`: list-append's store grows as the run goes on),
/// members that fell behind catch up from snapshots, and the history is still snapshot
/// isolation.
#[test]
fn replicated_raft_logs_stay_bounded_under_faults_and_laggards_catch_up_by_snapshot() {
    const LIMIT: u64 = 32;
    let run = |limit: u64| {
        let config =
            ProtocolConfig::parse(&format!("replicated=true,raft_log_limit={limit}")).unwrap();
        simulate_with::<ClockSi>(config, 7, None, true, "list-append", interactive(), 60)
    };
    let report = run(LIMIT);
    let verdict = check(&report.history, Model::SnapshotIsolation);
    assert!(verdict.valid, "{verdict}");
    assert!(report.invariant.is_ok(), "{:?}", report.invariant);
    let counter = |r: &SimReport, name: &str| r.counters.get(name).copied().unwrap_or(0);
    let members = counter(&report, "raft_members");
    let peak = counter(&report, "raft_log_peak_entries");
    eprintln!("{:?}", report.counters);
    assert!(members >= 9, "{members} member incarnations");
    assert!(counter(&report, "raft_compactions") > 0);
    let snapshot_bytes = counter(&report, "raft_snapshot_bytes");
    let applied_bytes = counter(&report, "raft_applied_bytes");
    assert!(
        snapshot_bytes <= 2 * applied_bytes,
        "snapshots wrote {snapshot_bytes} bytes for {applied_bytes} applied"
    );
    assert!(counter(&report, "raft_snapshots_sent") > 0);
    assert!(counter(&report, "raft_snapshots_restored") > 0);
    let unbounded = run(0);
    let unbounded_peak = counter(&unbounded, "raft_log_peak_entries");
    assert!(
        2 * peak < unbounded_peak,
        "peaks sum to {peak} with the limit, {unbounded_peak} without"
    );
}
