//! Every protocol's conformance tests ([`meridian_sim::conformance`]): a seeded
//! random-fault swarm checked at the promised level and by the end-of-run audit, replay of
//! a seed, golden trace hashes, and a broken variant the checker must catch. Each protocol
//! is one `conformance_tests!` line; its spec says what it runs.

use meridian_sim::{Broken, Conformance};

mod two_pl_2pc {
    use super::*;
    const SPEC: Conformance = Conformance {
        golden: &[(5, "8cbec5cc1a47295e"), (6, "facf1e053d6179e5")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_early_release=true",
            workload: "bank",
            workload_opts: "",
        },
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::two_pl::TwoPlTwoPc, SPEC);
}

mod two_pl_raft {
    use super::*;
    const SPEC: Conformance = Conformance {
        seconds: 20,
        min_committed: 10,
        golden: &[(5, "3422ac08052980ae"), (6, "a53e17ea6bc91c2b")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_early_release=true",
            workload: "bank",
            workload_opts: "",
        },
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::raft_2pc::TwoPlRaft, SPEC);
}

mod occ_raft {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        seconds: 20,
        min_committed: 10,
        golden: &[(5, "6065402d832155a2"), (6, "26975f396396840a")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_validation=true",
            workload: "bank",
            workload_opts: "",
        },
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::raft_2pc::OccRaft, SPEC);
}

// Tiga's line lives in `tiga_inversion.rs`, beside the Fig. 5 scenario its broken variant
// replays (random runs almost never reach that inversion).

mod clock_si {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        seconds: 20,
        golden: &[(5, "de5954787822fd85"), (6, "33d129383eb3d871")],
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
        golden: &[(5, "aa8dd43865b2524f"), (6, "96a14c85e544ddf4")],
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
        golden: &[(5, "703f6cc85346bc27"), (6, "6ff9cb7e68b85593")],
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
        golden: &[(5, "0e5a9ca93cb6d2cf"), (6, "b60939a9ad36ab53")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_anticipation=true",
            workload: "list-append",
            workload_opts: "crt_ratio=0.5,keys=12",
        },
        ..Conformance::new("edge-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::dast::Dast, SPEC);
}

// Aurogon on §6.1's five servers (RTT 5 µs): a 20 µs service time per event keeps closed
// loops at a rate the simulator can replay. Serializable by default; the strong-partition
// mode is checked at its own level, and its broken variant (no stale-read rule, §4.4) is
// caught there: random clock steps let a later transaction read around an earlier one.

mod aurogon {
    use super::*;
    const SPEC: Conformance = Conformance {
        service_time_ns: 20_000,
        golden: &[(5, "59cf3d6fb0e623c6")],
        broken: Broken::Swarm {
            protocol_opts: "isolation=strong-partition,unsafe_no_stale_read_rule=true",
            workload: "list-append",
            workload_opts: "keys=8",
        },
        model: Some("strong-partition-serializable"),
        ..Conformance::new("rdma-cluster", "list-append")
    };
    // The default mode's swarm, replay and golden traces are checked at serializability.
    const SERIALIZABLE: Conformance = Conformance {
        model: None,
        ..SPEC
    };
    #[test]
    fn swarm() {
        SERIALIZABLE.swarm::<meridian_protocols::aurogon::Aurogon>();
    }
    #[test]
    fn replay() {
        SERIALIZABLE.replay::<meridian_protocols::aurogon::Aurogon>();
    }
    #[test]
    fn golden() {
        SERIALIZABLE.golden::<meridian_protocols::aurogon::Aurogon>();
    }
    #[test]
    fn broken_variant_is_caught() {
        SPEC.broken::<meridian_protocols::aurogon::Aurogon>();
    }
}

mod aurogon_strong_partition {
    use super::*;
    const SPEC: Conformance = Conformance {
        protocol_opts: "isolation=strong-partition",
        service_time_ns: 20_000,
        golden: &[(5, "dc45d583b2c7e0b0")],
        broken: Broken::Swarm {
            protocol_opts: "isolation=strong-partition,unsafe_no_stale_read_rule=true",
            workload: "list-append",
            workload_opts: "keys=8",
        },
        model: Some("strong-partition-serializable"),
        ..Conformance::new("rdma-cluster", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::aurogon::Aurogon, SPEC);
}

// TAPIR on Tiga's deployment. Its broken variant finalizes PREPARE-OK on the IR slow path
// without the replicas' validation (a majority is enough, whatever it voted): conflicting
// read-modify-writes then both commit, and list-append shows it within a few seeds.

mod tapir {
    use super::*;
    const SPEC: Conformance = Conformance {
        golden: &[(5, "0b0fceeeac31d97d"), (6, "e208081452f422d1")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_slow_path_validation=true",
            workload: "list-append",
            workload_opts: "",
        },
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::tapir::Tapir, SPEC);
}

// The non-strict variant DAST evaluated promises serializability only, and is checked there.
mod tapir_serializable {
    use super::*;
    const SPEC: Conformance = Conformance {
        protocol_opts: "strict=false",
        golden: &[(5, "691a80f1e2de5324")],
        broken: Broken::Swarm {
            protocol_opts: "strict=false,unsafe_skip_slow_path_validation=true",
            workload: "list-append",
            workload_opts: "",
        },
        model: Some("serializable"),
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::tapir::Tapir, SPEC);
}

// Janus on Tiga's deployment. Its broken variant accepts, on the slow path, one replica's
// answer per shard instead of the union (§4.2): conflicting transactions then miss each
// other and replicas order them differently.

mod janus {
    use super::*;
    const SPEC: Conformance = Conformance {
        golden: &[(5, "cc27e2262951ab1c"), (6, "258bfb74b45ec0e4")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_no_dep_union=true",
            workload: "list-append",
            workload_opts: "keys=4",
        },
        ..Conformance::new("gcp-tiga", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::janus::Janus, SPEC);
}

// K2's Spanner-like baseline on K2's deployment, interactive sessions. Its broken variant
// releases locks at the vote (2PL's early release): commit wait cannot be shown broken by a
// history check, since 2PL alone orders the histories (see `p2pl_ttc::tests` for that).

mod p2pl_ttc {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        golden: &[(5, "03aec9730102a0a1"), (6, "bec15be4a58cac89")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_early_release=true",
            workload: "bank",
            workload_opts: "",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::p2pl_ttc::P2plTtc, SPEC);
}

// SLOG on DAST's edge deployment (DAST §6). Its broken variant is DAST §6's own
// configuration, `release=pieces`: a shard releases a transaction's locks once its own
// pieces ran, so a multi-region transaction's pieces run at different times and a chain
// of them closes against real time (serializable, not strict).

mod slog {
    use super::*;
    const SPEC: Conformance = Conformance {
        golden: &[(5, "9a8cd02552022208")],
        broken: Broken::Swarm {
            protocol_opts: "release=pieces",
            workload: "list-append",
            workload_opts: "",
        },
        ..Conformance::new("edge-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::slog::Slog, SPEC);
}

// Aurogon's R2PL and ROCC baselines (§6.1): 2PL and OCC over the same primary-backup
// replication, on its five servers with Aurogon's 20 µs service time. The broken variant
// releases a primary's sends before its backup holds their records: a promoted backup
// then lacks commits clients already saw (lost writes under primary crashes).

mod two_pl_pb {
    use super::*;
    const SPEC: Conformance = Conformance {
        service_time_ns: 20_000,
        golden: &[(5, "1f2a9b4a06bbea1b")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_release_before_backup_ack=true",
            workload: "list-append",
            workload_opts: "keys=8",
        },
        ..Conformance::new("rdma-cluster", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::pb_2pc::TwoPlPb, SPEC);
}

mod occ_pb {
    use super::*;
    const SPEC: Conformance = Conformance {
        service_time_ns: 20_000,
        golden: &[(5, "e2ea3db1dcd1e464")],
        // OCC's own safety step, skipped. (Releasing before the backup acks, 2pl-pb's broken
        // variant, trips the server's commit assertion here on the current traces before the
        // checker sees a history.)
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_validation=true",
            workload: "list-append",
            workload_opts: "keys=8",
        },
        ..Conformance::new("rdma-cluster", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::pb_2pc::OccPb, SPEC);
}

// K2's CockroachDB-like baseline on K2's deployment, interactive sessions, checked at its
// promise (strong partition serializability: not strict, see the module doc). Its broken
// variant moves a transaction's timestamp without refreshing its reads.

mod mvto_hlc {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "interactive=true",
        golden: &[(5, "5255290d1960de45")],
        broken: Broken::Swarm {
            protocol_opts: "unsafe_skip_read_refresh=true",
            workload: "list-append",
            workload_opts: "interactive=true,keys=4",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::mvto_hlc::MvtoHlc, SPEC);
}

// K2-VCR (§6): read-only one-shot transactions are served at the nearest copy of each
// shard in the view of an epoch. Linearizable replica reads are checked strict
// serializable together with the primaries' history; the broken variant drops §6.3's
// collaborative epoch assignment (each participant finalizes in its own epoch), so a
// transaction's writes become visible at a replica in different epochs.
mod k2_vcr {
    use super::*;
    const SPEC: Conformance = Conformance {
        protocol_opts: "replica_reads=linearizable",
        seeds: 1..11,
        golden: &[(5, "271d93b7f24c2df6")],
        broken: Broken::Swarm {
            protocol_opts: "replica_reads=linearizable,unsafe_no_collab_epoch=true",
            workload: "list-append",
            workload_opts: "",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::k2::K2, SPEC);
}

// K2-VCR's snapshot replica reads (a view epochs behind) at the level the paper claims,
// serializable. The broken variant skips the epoch
// validation of transactions bumped above their timestamp's epoch, so a read-write
// anti-dependency goes down in epochs and a view shows the younger writer without the
// older reader.
mod k2_vcr_snapshot {
    use super::*;
    const SPEC: Conformance = Conformance {
        protocol_opts: "replica_reads=snapshot",
        seeds: 1..11,
        model: Some("serializable"),
        golden: &[(6, "7ee2773e7adc4e29")],
        broken: Broken::Swarm {
            protocol_opts: "replica_reads=snapshot,unsafe_skip_epoch_validation=true",
            workload: "list-append",
            workload_opts: "",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::k2::K2, SPEC);
}

// ClosedTS (K2 §6.1, §7.4) on MVTO-HLC: read-only one-shot transactions are follower reads
// at the nearest copy of each shard, at the top of their uncertainty interval, served once
// the copy's closed timestamp covers it and no intent at or below it is on a key read.
// Checked at the protocol's promise (strong partition serializability) together with the
// primaries' history. The broken variant serves follower reads at once, above the closed
// timestamp: a replica behind its primary answers with a stale value.
mod mvto_hlc_closedts {
    use super::*;
    const SPEC: Conformance = Conformance {
        protocol_opts: "replica_reads=closedts",
        seeds: 1..11,
        golden: &[(5, "144beaa1c72e7e79")],
        broken: Broken::Swarm {
            protocol_opts: "replica_reads=closedts,unsafe_serve_above_closed=true",
            workload: "list-append",
            workload_opts: "",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::mvto_hlc::MvtoHlc, SPEC);
}

// SafeTS (K2 §6.1, §7.4; Spanner's safe time) on p2PL-TTC: read-only one-shot
// transactions read at TTC now (`T_high` of the nearest oracle) at the nearest copy of each
// shard, served once the copy's `t_safe` covers them. Checked strict serializable together
// with the primaries' history. The broken variant serves them at once, above `t_safe`: a
// copy behind its primary answers stale.
mod p2pl_ttc_safets {
    use super::*;
    const SPEC: Conformance = Conformance {
        protocol_opts: "replica_reads=safets",
        seeds: 1..11,
        golden: &[(5, "536024eb09a0a6eb")],
        broken: Broken::Swarm {
            protocol_opts: "replica_reads=safets,unsafe_serve_above_safe=true",
            workload: "list-append",
            workload_opts: "",
        },
        ..Conformance::new("k2-five-regions", "list-append")
    };
    meridian_sim::conformance_tests!(meridian_protocols::p2pl_ttc::P2plTtc, SPEC);
}

// DAST with declared out-of-band dependencies (§4.5): three in ten transactions declare
// that they follow the last committed one (`oob_ratio`), and the client adds §4.5's read
// of that transaction's region when it shares none; the swarm is checked at
// declared-strict-serializable (strong partition serializability plus real-time order
// along every declared dependency). The broken variant declares the dependencies without
// the read (`oob_read=false`): a transaction of another region is then serialized before
// one it declared it follows (Fig. 4). Swarm and broken variant only: replay and golden
// traces are the `dast` module's.
mod dast_declared {
    use super::*;
    const SPEC: Conformance = Conformance {
        workload_opts: "crt_ratio=0.2,keys=40,oob_ratio=0.3",
        seeds: 1..7,
        broken: Broken::Swarm {
            protocol_opts: "",
            workload: "list-append",
            workload_opts: "crt_ratio=0.5,keys=12,oob_ratio=0.5,oob_read=false",
        },
        model: Some("declared-strict-serializable"),
        ..Conformance::new("edge-regions", "list-append")
    };
    #[test]
    fn swarm() {
        SPEC.swarm::<meridian_protocols::dast::Dast>();
    }
    #[test]
    fn broken_variant_is_caught() {
        SPEC.broken::<meridian_protocols::dast::Dast>();
    }
}
