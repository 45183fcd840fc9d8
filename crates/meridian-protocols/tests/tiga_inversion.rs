//! Tiga §3.6 / Fig. 5, scripted in the simulator: without the second round of timestamp
//! agreement a case-2 leader releases early and strict serializability breaks; the checker
//! must see it. Random swarms do not hit this schedule, so delays, clocks and submission
//! times are fixed (`tiga-inversion.toml`: no jitter; clock steps at time 0 put L2 and
//! coord1 500 ms behind; zero headroom so timestamps are the coordinators' sending times).
//!
//! The same schedule breaks §6's coordination-free mode when the real clock error (500 ms)
//! exceeds the configured ε: it trusts ε instead of the second round.
//!
//! Tiga's conformance tests ([`meridian_sim::conformance`]) are declared here, one line per
//! approach, because their broken variant is this scenario.
//!
//! True-time schedule (ms). Clients 0 and 2 use coord0 (region A, with L1), clients 1
//! and 3 coord1 (region B, with L2, clock −500 ms):
//! * 1000 T0 appends x (shard 0): released by L1 at ≈1000.
//! * 1100 T1 reads and appends x and y, T1.t = 600. L1 (at 1110) finds T0 released above
//!   it and updates T1.t to its clock, 1110; L2 (at 1100) seals it at 600. L2's note
//!   reaches L1 at 1110: agreed = 1110 = L1's own, case 2. L1's note reaches L2 at 1120:
//!   case 3, T1 is repositioned at 1110, which L2's clock reaches only at true 1610.
//! * 1115 T2 reads and appends x. Skipping the second round, L1 has released T1, so T2
//!   commits at once after T1 — it reads T1's append.
//! * 1130 T3 reads and appends y, T3.t = 630 < 1110: L2 executes it before T1, so T1
//!   reads T3's append. T2 completed before T3 began, yet T3 → T1 → T2: a real-time cycle.
//!
//! With the second round, L1 keeps T1 sealed until L2 re-seals it at 1110 (true 1610), so
//! T2 waits behind it and completes after T3 began: no anomaly.

use meridian_check::HistOp;
use meridian_check::{check, AnomalyKind, Model};
use meridian_core::time::{NS_PER_MS, NS_PER_S};
use meridian_core::txn::Value;
use meridian_core::txn::{Op, Operand, Piece, Txn};
use meridian_core::value::encode_int;
use meridian_core::{
    ClientId, ClockProfile, Cluster, NodeRng, Outcome, Procedures, ProtocolConfig, ShardId,
    Topology,
};
use meridian_protocols::tiga::Tiga;
use meridian_sim::{run, setup, Fault, FaultPlan, SimOptions, SimReport, Workload};
use meridian_workload::{ListAppend, TxnPlan, WorkloadOptions};

/// Each client's transactions with their submission times (true ms).
struct Script {
    list: ListAppend,
    plans: Vec<Vec<(u64, Txn)>>,
    next: Vec<usize>,
}

impl Script {
    fn new(cluster: &Cluster) -> Script {
        let list = ListAppend::new(cluster, &WorkloadOptions::default()).unwrap();
        let (x, y) = (list.key(0), list.key(1));
        let rw = |key: &meridian_core::txn::Key, value: i64| {
            vec![
                Op::Get(key.clone()),
                Op::Append(key.clone(), Operand::Literal(encode_int(value))),
            ]
        };
        let one = |shard: u32, ops: Vec<Op>| Txn {
            pieces: vec![Piece::ops(ShardId(shard), ops)],
        };
        let t0 = one(0, rw(&x, 1));
        let t1 = Txn {
            pieces: vec![
                Piece::ops(ShardId(0), rw(&x, 2)),
                Piece::ops(ShardId(1), rw(&y, 1)),
            ],
        };
        let t2 = one(0, rw(&x, 3));
        let t3 = one(1, rw(&y, 2));
        Script {
            list,
            plans: vec![
                vec![(1000, t0)],
                vec![(1100, t1)],
                vec![(1115, t2)],
                vec![(1130, t3)],
            ],
            next: vec![0; 4],
        }
    }
}

impl Workload for Script {
    fn name(&self) -> &str {
        "fig5-script"
    }

    fn next(
        &mut self,
        client: &meridian_workload::ClientInfo,
        _rng: &mut NodeRng,
    ) -> meridian_workload::Planned {
        let client = client.id;
        let c = client.0 as usize;
        let (_, txn) = self.plans[c][self.next[c]].clone();
        self.next[c] += 1;
        meridian_workload::Planned::from(TxnPlan::OneShot(txn))
    }

    fn think_ns(&mut self, client: ClientId, now_ns: u64) -> u64 {
        let c = client.0 as usize;
        match self.plans[c].get(self.next[c]) {
            Some((at_ms, _)) => (at_ms * NS_PER_MS).saturating_sub(now_ns),
            None => u64::MAX,
        }
    }

    fn history_ops(
        &self,
        plan: &TxnPlan,
        outcome: &Outcome,
        reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        self.list.history_ops(plan, outcome, reads)
    }
}

fn fig5(config: &str, behind_ms: f64) -> SimReport {
    let topology = Topology::parse("tiga-inversion", include_str!("tiga-inversion.toml")).unwrap();
    let config = format!("headroom=zero,{config}");
    let setup = setup::<Tiga>(
        topology,
        ProtocolConfig::parse(&config).unwrap(),
        Procedures::new(),
    )
    .unwrap();
    let cluster = &setup.cluster;
    let step = |node| {
        let fault = Fault::ClockStep {
            node,
            step_ms: -behind_ms,
        };
        (0, fault)
    };
    let options = SimOptions {
        duration_ns: 2 * NS_PER_S,
        drain_ns: 3 * NS_PER_S,
        faults: FaultPlan {
            faults: vec![step(cluster.shards[1][0]), step(cluster.coordinators[1])],
            storage: false,
        },
        ..SimOptions::default()
    };
    let mut script = Script::new(&setup.cluster);
    let report = run::<Tiga>(&setup, &mut script, &options, &mut |_| {});
    assert_eq!(
        report.committed, 4,
        "{config}: every scripted transaction commits"
    );
    report
}

#[test]
fn without_the_second_round_the_checker_catches_the_timestamp_inversion_of_fig_5() {
    for approach in ["preventive", "detective"] {
        let broken = fig5(
            &format!("approach={approach},unsafe_skip_second_round=true"),
            500.0,
        );
        let verdict = check(&broken.history, Model::StrictSerializable);
        assert!(!verdict.valid, "{approach}: the inversion went unnoticed");
        assert!(
            verdict.kinds().contains(&AnomalyKind::RealTime),
            "{approach}: expected a real-time cycle, got {verdict}"
        );
        // The same history is serializable: only real-time order is broken.
        assert!(
            check(&broken.history, Model::Serializable).valid,
            "{approach}"
        );

        let sound = fig5(&format!("approach={approach}"), 500.0);
        let verdict = check(&sound.history, Model::StrictSerializable);
        assert!(verdict.valid, "{approach}: {verdict}");
    }
}

#[test]
fn coordination_free_mode_is_caught_when_the_clock_error_exceeds_epsilon() {
    for approach in ["preventive", "detective"] {
        let free = format!("approach={approach},coordination=free,epsilon_ms=0.1");
        // Clocks within ε: the ε wait orders T3 after T2 (T3.t > T2.t > T1.t).
        let within = fig5(&free, 0.0);
        let verdict = check(&within.history, Model::StrictSerializable);
        assert!(verdict.valid, "{approach}: {verdict}");
        // L2 and coord1 500 ms behind, far beyond ε = 0.1 ms: Fig. 5's inversion.
        let beyond = fig5(&free, 500.0);
        let verdict = check(&beyond.history, Model::StrictSerializable);
        assert!(
            verdict.kinds().contains(&AnomalyKind::RealTime),
            "{approach}: expected a real-time cycle, got {verdict}"
        );
    }
}

#[test]
fn coordination_free_mode_is_refused_without_a_guaranteed_clock_bound() {
    let free = ProtocolConfig::parse("coordination=free,epsilon_ms=0.1").unwrap();
    let with = |profile: &str| {
        let mut topology = Topology::load("gcp-tiga").unwrap();
        topology.set_all_clocks(ClockProfile::builtin(profile).unwrap());
        setup::<Tiga>(topology, free.clone(), Procedures::new())
    };
    assert!(with("huygens").is_ok());
    let err = with("chrony").unwrap_err();
    assert!(err.contains("no") && err.contains("chrony"), "{err}");
    let mut topology = Topology::load("gcp-tiga").unwrap();
    topology.set_all_clocks(ClockProfile::builtin("huygens").unwrap());
    let tight = ProtocolConfig::parse("coordination=free,epsilon_ms=0.05").unwrap();
    let err = setup::<Tiga>(topology, tight, Procedures::new()).unwrap_err();
    assert!(err.contains("epsilon_ms"), "{err}");
    let missing = ProtocolConfig::parse("coordination=free").unwrap();
    let err = setup::<Tiga>(
        Topology::load("gcp-tiga").unwrap(),
        missing,
        Procedures::new(),
    )
    .unwrap_err();
    assert!(err.contains("needs `epsilon_ms`"), "{err}");
}

/// The scripted broken variant of Tiga's conformance tests: without the second round, the
/// checker catches Fig. 5's inversion in both approaches.
fn fig5_inversion_is_caught() {
    without_the_second_round_the_checker_catches_the_timestamp_inversion_of_fig_5();
}

mod preventive_conformance {
    use meridian_sim::{Broken, Conformance};
    const SPEC: Conformance = Conformance {
        golden: &[(5, "bef20561ba65abd9"), (6, "61eaeae81213047a")],
        broken: Broken::Scripted(super::fig5_inversion_is_caught),
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::tiga::Tiga, SPEC);
}

mod detective_conformance {
    use meridian_sim::{Broken, Conformance};
    const SPEC: Conformance = Conformance {
        protocol_opts: "approach=detective",
        golden: &[(5, "ebf72cbb02d13338"), (6, "d6216331336f7fc8")],
        broken: Broken::Scripted(super::fig5_inversion_is_caught),
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::tiga::Tiga, SPEC);
}
