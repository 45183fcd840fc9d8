//! The conformance suite: what every protocol must pass, given by one line.
//!
//! ```ignore
//! meridian_sim::conformance_tests!(meridian_protocols::tiga::Tiga, Conformance {
//!     golden: &[(5, "…")],
//!     broken: Broken::Scripted(fig5_inversion_is_caught),
//!     ..Conformance::new("gcp-tiga", "list-append")
//! });
//! ```
//!
//! expands to four tests:
//! - **swarm**: seeded random-fault runs drawn inside the protocol's
//!   [`FaultModel`](meridian_core::FaultModel), each checked at the protocol's promised
//!   level ([`Protocol::GUARANTEE`]) *and* by the end-of-run audit (`SimReport::invariant`:
//!   a lost committed write that no later read shows fails it), with a commit floor so a
//!   swarm that stalls does not pass by committing nothing;
//! - **replay**: one faulty seed twice, bit for bit (trace hash and history);
//! - **golden**: named seeds reproduce recorded trace hashes, so a behaviour change shows
//!   up in review (update the hash in the same commit, and say why);
//! - **broken variant**: a test-only option that removes a safety step; some seed of a
//!   small swarm (or a scripted scenario, [`Broken`]) must produce a history the checker
//!   rejects (a checker that cannot catch it would make the swarm meaningless).
//!
//! Runs use runtime-like batching (`batch_max` 64, 1 ms timers) on odd seeds, so the
//! protocols' deferred `on_batch_end` work and coarse timers are faulted too.

use crate::driver::{run, setup, SimOptions};
use crate::faults::FaultPlan;
use crate::SimReport;
use meridian_check::{check, Model};
use meridian_core::time::{NS_PER_MS, NS_PER_S};
use meridian_core::{Protocol, ProtocolConfig, Topology};
use meridian_workload::WorkloadOptions;
use std::ops::Range;

/// What a protocol's conformance tests run (see the module doc).
#[derive(Clone, Debug)]
pub struct Conformance {
    pub topology: &'static str,
    pub workload: &'static str,
    /// `key=value,…`
    pub workload_opts: &'static str,
    /// `key=value,…`
    pub protocol_opts: &'static str,
    /// Virtual seconds of load per run (a drain of 10 s follows).
    pub seconds: u64,
    /// The swarm's seeds.
    pub seeds: Range<u64>,
    /// Every swarm run commits more than this.
    pub min_committed: u64,
    /// Fault-free seeds and the trace hashes they must reproduce (hex, as reports print).
    pub golden: &'static [(u64, &'static str)],
    /// The broken variant the checker must catch.
    pub broken: Broken,
    /// Seeds the broken variant may take to be caught.
    pub broken_seeds: Range<u64>,
    /// Per-node service time of every event (0: none). A microsecond-RTT deployment needs
    /// one, or closed-loop clients commit millions of transactions per virtual second.
    pub service_time_ns: u64,
    /// The model the swarm and the broken variant are checked at, when not the protocol's
    /// `GUARANTEE` (a mode option promising more, e.g. Aurogon's strong partition
    /// serializability).
    pub model: Option<&'static str>,
}

impl Conformance {
    /// Defaults: 20 seeds of 10 s, at least 50 commits each, no golden traces, no broken
    /// variant.
    pub const fn new(topology: &'static str, workload: &'static str) -> Conformance {
        Conformance {
            topology,
            workload,
            workload_opts: "",
            protocol_opts: "",
            seconds: 10,
            seeds: 1..21,
            min_committed: 50,
            golden: &[],
            broken: Broken::None,
            broken_seeds: 1..11,
            service_time_ns: 0,
            model: None,
        }
    }

    /// One run of `P` on `seed`: random faults if `faults`, runtime-like batching on odd
    /// seeds.
    pub fn run<P: Protocol>(
        &self,
        protocol_opts: &str,
        workload: &str,
        workload_opts: &str,
        seed: u64,
        faults: bool,
    ) -> SimReport {
        let config = ProtocolConfig::parse(protocol_opts).expect("protocol options");
        let topology = Topology::load(self.topology).expect("topology");
        let setup = setup::<P>(topology, config, meridian_workload::procedures())
            .unwrap_or_else(|e| panic!("{}: {e}", P::NAME));
        let mut options = SimOptions {
            seed,
            duration_ns: self.seconds * NS_PER_S,
            service_time_ns: self.service_time_ns,
            ..SimOptions::default()
        };
        if seed % 2 == 1 {
            options.batch_max = 64;
            options.timer_granularity_ns = NS_PER_MS;
        }
        if faults {
            let model = P::fault_model(&setup.cluster);
            options.faults =
                FaultPlan::random_for_seed(&setup.cluster, &model, options.duration_ns, seed);
        }
        let opts = WorkloadOptions::parse(workload_opts.split(',').filter(|s| !s.is_empty()))
            .expect("workload options");
        let mut workload =
            meridian_workload::build(workload, &setup.cluster, &opts).expect("workload");
        run::<P>(&setup, workload.as_mut(), &options, &mut |_| {})
    }

    fn model<P: Protocol>(&self) -> Model {
        let name = self.model.unwrap_or(P::GUARANTEE);
        name.parse()
            .unwrap_or_else(|_| panic!("{}: `{name}` is no model", P::NAME))
    }

    /// The replay command a failing seed prints.
    fn replay_line<P: Protocol>(&self, opts: &str, workload: &str, seed: u64) -> String {
        let batching = if seed % 2 == 1 {
            " --batch-max 64 --timer-granularity 1ms"
        } else {
            ""
        };
        let service = if self.service_time_ns > 0 {
            format!(" --service-time {}ns", self.service_time_ns)
        } else {
            String::new()
        };
        let check = self
            .model
            .map(|m| format!(" --check {m}"))
            .unwrap_or_default();
        format!(
            "meridian sim --protocol {} --protocol-opts '{opts}' --topology {} --workload {workload} \
             --workload-opts '{}' --faults random --seed {seed} --duration {}s{batching}{service}{check}",
            P::NAME,
            self.topology,
            self.workload_opts,
            self.seconds
        )
    }

    /// Every seed's history passes the promised model and the audit, with commits.
    pub fn swarm<P: Protocol>(&self) {
        let model = self.model::<P>();
        for seed in self.seeds.clone() {
            let report = self.run::<P>(
                self.protocol_opts,
                self.workload,
                self.workload_opts,
                seed,
                true,
            );
            let replay = self.replay_line::<P>(self.protocol_opts, self.workload, seed);
            let verdict = check(&report.history, model);
            assert!(verdict.valid, "{verdict}\nreplay: {replay}");
            assert_eq!(report.invariant, Ok(()), "audit failed; replay: {replay}");
            assert!(
                report.committed > self.min_committed,
                "only {} committed; replay: {replay}",
                report.committed
            );
        }
    }

    /// A faulty seed replays bit for bit.
    pub fn replay<P: Protocol>(&self) {
        let seed = self.seeds.start;
        let once = |s| {
            self.run::<P>(
                self.protocol_opts,
                self.workload,
                self.workload_opts,
                s,
                true,
            )
        };
        let (a, b) = (once(seed), once(seed));
        assert_eq!(
            a.trace_hash,
            b.trace_hash,
            "{}: seed {seed} diverged",
            P::NAME
        );
        assert_eq!(a.history, b.history);
        assert!(a.committed > 0);
        assert_ne!(
            a.trace_hash,
            once(seed + 1).trace_hash,
            "another seed, another run"
        );
    }

    /// Golden seeds reproduce their recorded trace hashes (fault-free runs).
    pub fn golden<P: Protocol>(&self) {
        assert!(
            !self.golden.is_empty(),
            "{}: no golden traces recorded",
            P::NAME
        );
        // Every seed runs before the verdict, so one run shows every hash that moved, written
        // as the `golden` list to paste once the change is known to be intended.
        let found: Vec<(u64, String)> = self
            .golden
            .iter()
            .map(|&(seed, _)| {
                let report = self.run::<P>(
                    self.protocol_opts,
                    self.workload,
                    self.workload_opts,
                    seed,
                    false,
                );
                (seed, format!("{:016x}", report.trace_hash))
            })
            .collect();
        let expected: Vec<(u64, String)> = self
            .golden
            .iter()
            .map(|&(seed, hash)| (seed, hash.to_string()))
            .collect();
        assert_eq!(
            found,
            expected,
            "{}: golden traces changed; if the change is intended, record the new hashes and \
             say why in the commit",
            P::NAME
        );
    }

    /// The broken variant is caught by the checker.
    pub fn broken<P: Protocol>(&self) {
        let (opts, workload, workload_opts) = match self.broken {
            Broken::None => panic!("{}: no broken variant declared", P::NAME),
            Broken::Scripted(scenario) => return scenario(),
            Broken::Swarm {
                protocol_opts,
                workload,
                workload_opts,
            } => (protocol_opts, workload, workload_opts),
        };
        let model = self.model::<P>();
        let caught = self.broken_seeds.clone().find(|&seed| {
            let report = self.run::<P>(opts, workload, workload_opts, seed, true);
            !check(&report.history, model).valid || report.invariant.is_err()
        });
        assert!(
            caught.is_some(),
            "{} with `{opts}`: no seed in {:?} was caught",
            P::NAME,
            self.broken_seeds
        );
    }
}

/// A variant of a protocol with a safety step removed (a test-only option), and how it is
/// shown to be caught.
#[derive(Clone, Copy, Debug)]
pub enum Broken {
    /// None declared: the `broken_variant_is_caught` test fails until one is.
    None,
    /// Some seed of a random-fault swarm (`broken_seeds`) with these options must give a
    /// history the checker rejects.
    Swarm {
        protocol_opts: &'static str,
        workload: &'static str,
        workload_opts: &'static str,
    },
    /// A scripted scenario that panics unless the checker catches the variant: for bugs a
    /// random run rarely reaches (Tiga's Fig. 5 inversion needs a clock step between two
    /// particular transactions).
    Scripted(fn()),
}

/// Declares a protocol's conformance tests (see the module doc): `swarm`, `replay`,
/// `golden` and `broken_variant_is_caught`, each a `#[test]` in the calling module.
#[macro_export]
macro_rules! conformance_tests {
    ($protocol:ty, $spec:expr) => {
        #[test]
        fn swarm() {
            $spec.swarm::<$protocol>();
        }
        #[test]
        fn replay() {
            $spec.replay::<$protocol>();
        }
        #[test]
        fn golden() {
            $spec.golden::<$protocol>();
        }
        #[test]
        fn broken_variant_is_caught() {
            $spec.broken::<$protocol>();
        }
    };
}
