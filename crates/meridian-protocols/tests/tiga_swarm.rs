//! Tiga's normal processing end to end: simulator + workload + checker.
//!
//! * Fixed seeds with message loss, duplication and clock steps (no crashes or partitions:
//!   §4 is not implemented yet) under the huygens/chrony/ntpd/bad clock profiles, in the
//!   preventive approach (`gcp-tiga`, leaders co-located in SC) and in the detective one
//!   (`tiga-separated.toml`, the three leaders in three regions): strict serializable.
//! * MicroBench latency against `bound_ms` and the fast-path ratio.

use meridian_check::{check, Model};
use meridian_core::time::NS_PER_S;
use meridian_core::{ClockProfile, Procedures, ProtocolConfig, Topology};
use meridian_protocols::tiga::Tiga;
use meridian_sim::{run, setup, FaultKinds, FaultPlan, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;
use rand::SeedableRng;

const PROFILES: [&str; 4] = ["huygens", "chrony", "ntpd", "bad"];

const NO_CRASHES: FaultKinds = FaultKinds {
    crashes: false,
    partitions: false,
    loss: true,
    duplication: true,
    clock_steps: true,
};

fn topology(detective: bool) -> Topology {
    if detective {
        Topology::parse("tiga-separated", include_str!("tiga-separated.toml")).unwrap()
    } else {
        Topology::load("gcp-tiga").unwrap()
    }
}

struct Run<'a> {
    detective: bool,
    clock: &'a str,
    config: &'a str,
    workload: &'a str,
    workload_opts: &'a [&'a str],
    faults: bool,
    seconds: u64,
}

impl Run<'_> {
    /// Random faults without clock steps: those break a clock's guaranteed error bound.
    fn kinds(&self) -> FaultKinds {
        if self.config.contains("coordination=free") {
            FaultKinds {
                clock_steps: false,
                ..NO_CRASHES
            }
        } else {
            NO_CRASHES
        }
    }
}

fn simulate(seed: u64, r: &Run) -> SimReport {
    let mut topology = topology(r.detective);
    topology.set_all_clocks(ClockProfile::builtin(r.clock).unwrap());
    let setup = setup::<Tiga>(
        topology,
        ProtocolConfig::parse(r.config).unwrap(),
        Procedures::new(),
    )
    .unwrap();
    let mut options = SimOptions {
        seed,
        duration_ns: r.seconds * NS_PER_S,
        ..SimOptions::default()
    };
    if r.faults {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x7194);
        options.faults =
            FaultPlan::random(&setup.cluster, options.duration_ns, &mut rng, r.kinds());
    }
    let opts = WorkloadOptions::parse(r.workload_opts.iter().copied()).unwrap();
    let mut workload = meridian_workload::build(r.workload, &setup.cluster, &opts).unwrap();
    run::<Tiga>(&setup, workload.as_mut(), &options, &mut |_| {})
}

fn swarm(detective: bool) {
    let (mut committed, mut slow_or_re) = (0, 0);
    for seed in 1..=24u64 {
        let clock = PROFILES[(seed % 4) as usize];
        // The headroom and the planned quorum change performance only, never correctness.
        let config = ["", "path=auto", "headroom=paper", "path=slow"][(seed / 4 % 4) as usize];
        let report = simulate(
            seed,
            &Run {
                detective,
                clock,
                config,
                workload: "list-append",
                workload_opts: &[],
                faults: true,
                seconds: 10,
            },
        );
        let verdict = check(&report.history, Model::StrictSerializable);
        assert!(verdict.valid, "seed {seed} ({clock}, {config}): {verdict}");
        assert!(
            report.committed > 100,
            "seed {seed} ({clock}): only {} committed",
            report.committed
        );
        committed += report.committed;
        slow_or_re += report
            .regions
            .iter()
            .flat_map(|r| r.paths.iter())
            .filter(|(p, _)| p.as_str() != "fast")
            .map(|(_, n)| *n)
            .sum::<u64>();
    }
    assert!(committed > 24 * 300, "committed {committed}");
    // Loss and clock steps must push some transactions off the fast path.
    assert!(slow_or_re > 0, "no transaction left the fast path");
}

#[test]
fn preventive_swarm_with_loss_duplication_and_clock_steps_is_strict_serializable() {
    swarm(false);
}

#[test]
fn detective_swarm_with_loss_duplication_and_clock_steps_is_strict_serializable() {
    swarm(true);
}

/// §6's coordination-free mode with clocks that keep their guaranteed bound (huygens:
/// ±0.05 ms, so two clocks differ by at most ε = 0.1 ms): strict serializable with loss
/// and duplication, in both approaches, with multi-shard contention.
#[test]
fn coordination_free_swarm_within_epsilon_is_strict_serializable() {
    for detective in [false, true] {
        for seed in 1..=6u64 {
            let report = simulate(
                seed,
                &Run {
                    detective,
                    clock: "huygens",
                    config: "coordination=free,epsilon_ms=0.1",
                    workload: "list-append",
                    workload_opts: &["keys=8"],
                    faults: true,
                    seconds: 10,
                },
            );
            let verdict = check(&report.history, Model::StrictSerializable);
            assert!(
                verdict.valid,
                "seed {seed} detective {detective}: {verdict}"
            );
            assert!(report.committed > 100, "seed {seed}: {}", report.committed);
        }
    }
}

fn microbench(zipf: &str) -> SimReport {
    let opt = format!("zipf={zipf}");
    simulate(
        7,
        &Run {
            detective: false,
            clock: "huygens",
            config: "",
            workload: "microbench",
            workload_opts: &[opt.as_str()],
            faults: false,
            seconds: 20,
        },
    )
}

#[test]
fn microbench_latency_is_within_ten_percent_of_the_bound() {
    for zipf in ["0.5", "0.99"] {
        let report = microbench(zipf);
        assert_eq!(report.unknown, 0, "zipf {zipf}");
        assert!(check(&report.history, Model::StrictSerializable).valid);
        for region in &report.regions {
            let p50 = region.percentile_ms(50.0).unwrap();
            let bound = region.bound_ms().unwrap();
            let fast = region.fast_path_ratio().unwrap_or(0.0);
            eprintln!(
                "zipf {zipf} {}: p50 {p50:.1} ms, bound {bound:.1} ms, ratio {:.3}, fast {:.1}%",
                region.region,
                p50 / bound,
                fast * 100.0
            );
            assert!(
                p50 <= 1.10 * bound,
                "zipf {zipf} {}: p50 {p50} above 1.10 x bound {bound}",
                region.region
            );
            // SC and HK commit on the fast path. FI and BR commit on the slow path, which
            // is faster there (§6): the leaders' fast replies and the slow reply of the
            // follower next to the coordinator arrive ~29 ms before BR's (FI's) fast reply.
            let expect_fast = matches!(region.region.as_str(), "SC" | "HK");
            assert_eq!(
                fast >= 0.9,
                expect_fast,
                "zipf {zipf} {}: fast-path ratio {fast}",
                region.region
            );
        }
    }
}
