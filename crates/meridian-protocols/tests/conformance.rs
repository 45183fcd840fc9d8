//! Every protocol's conformance tests ([`meridian_sim::conformance`]): a seeded
//! random-fault swarm checked at the promised level and by the end-of-run audit, replay of
//! a seed, golden trace hashes, and a broken variant the checker must catch. Each protocol
//! is one `conformance_tests!` line; its spec says what it runs.

use meridian_sim::{Broken, Conformance};

mod two_pl_2pc {
    use super::*;
    const SPEC: Conformance = Conformance {
        golden: &[(5, "1b83ae2f83033f02"), (6, "ef3a8747e83a0fb8")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_early_release=true",
            workload: "bank",
            workload_opts: "",
        },
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::two_pl::TwoPlTwoPc, SPEC);
}

// Tiga's line lives in `tiga_inversion.rs`, beside the Fig. 5 scenario its broken variant
// replays (random runs almost never reach that inversion).

mod clock_si {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        seconds: 20,
        golden: &[(5, "b909a33e4d0c415d"), (6, "1ef5649229e1c8e1")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_pending_wait=true",
            workload: "list-append",
            workload_opts: "interactive=true,keys=4",
        },
        ..Conformance::new("clock-si-wan", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::clock_si::ClockSi, SPEC);
}

mod conventional_si {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        seconds: 20,
        golden: &[(5, "eb356749654f58d9"), (6, "7881d9a1acefaa57")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_pending_wait=true",
            workload: "list-append",
            workload_opts: "interactive=true,keys=4",
        },
        ..Conformance::new("clock-si-wan", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::clock_si::ConventionalSi, SPEC);
}

mod k2 {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        seconds: 20,
        golden: &[(5, "cbc823e3b604b565"), (6, "47eb018ff0729fb6")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_read_tracking=true",
            workload: "bank",
            workload_opts: "",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::k2::K2, SPEC);
}

mod dast {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "crt_ratio=0.2,keys=40",
        golden: &[(5, "4cc54ef65625911f"), (6, "07b197637e1be04f")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_anticipation=true",
            workload: "list-append",
            workload_opts: "crt_ratio=0.5,keys=12",
        },
        ..Conformance::new("edge-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::dast::Dast, SPEC);
}
