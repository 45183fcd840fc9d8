//! # The protocol kit: mechanisms several protocols share, each written once
//!
//! Every piece is sans-IO and deterministic (no clock, thread, socket or global RNG): it
//! holds state and says what to do; the protocol owns its messages, timers and records.
//!
//! | piece | what it is | used by |
//! |---|---|---|
//! | [`two_pc`] | two-phase commit's coordinator side with recovery: the decision log, COMMIT resent until acknowledged (with back-off), presumed-abort answers to inquiries, rebuild under a new incarnation | `2pl-2pc`, `clock-si` / `conventional-si` |
//! | [`quorum`] | replies of a known member set counted toward all / a majority / a super quorum of matching replies (one per member, strangers ignored); `majority`, `super_quorum` sizes | 2PC votes of `2pl-2pc` and `clock-si`; Tiga's super-quorum size (fast path, headroom planning) |
//! | [`clock_gate`] | clock-gated release: items held until the local clock passes their time (`ClockGate`), and the one tracked wake-up timer for the earliest (`WakeTimer`) | Tiga's servers (§3.2 queue wake-up, §6 T.t + ε deferral); Clock-SI partitions (Algorithm 1 lines 19–22: requests held until the clock passes their snapshot) |
//! | [`owd`] | one-way-delay estimator: per-peer sliding windows of clock-stamped forward (delay + clock offset) and back samples, percentile estimates with the topology as prior | Tiga's coordinators (headroom, §3.1); DAST's managers (anticipation, §4.3); Clock-SI coordinators with `delta_ms=measured` (§III-C's snapshot age from §V-F's t₂ − t₁ samples) |
//! | [`log`] | a restarted node's log split at its latest checkpoint (`latest_checkpoint`); the incarnation it takes (`next_incarnation`) | `tapir`'s replicas and coordinators; `2pl-2pc`'s and Clock-SI's servers and coordinators; `mvto-hlc`'s primaries; `k2`'s and `mvto-hlc`'s coordinators (incarnations) |
//! | [`options`] | option checks (`positive_ms`, `at_least_one`) and `ms_to_ns`, one wording for every protocol | every protocol's options |
//! | [`placement`] | an edge deployment's places: a region's replicas, a shard's region, the replica a client port hands requests to | `dast`, `slog` |
//! | [`replicated`] | a partition server run unchanged on its shard's Raft group leader: records proposed, sends held until what they depend on commits (the protocol's release policy), a new leader rebuilding the server from committed records, `NotLeader` hints; coordinators' routing (`Leaders`) | `clock-si` / `conventional-si` (`replicated=true`), `2pl-raft`, `occ-raft` |
//! | [`ttc`] | the TTC Oracle's answer (`T_high = now + ε`, strictly increasing), oracles nearest first, the check that oracle clocks promise ε, `with_drift` | `k2` (K2-TB), `p2pl-ttc` (commit timestamps) |
//! | [`hlc`] | a hybrid logical clock (`Hlc`, `HlcTs`): monotonic over a stepped clock, dominating received timestamps, refusing ones beyond the maximum offset | `mvto-hlc` (K2 §7.3's CockroachDB-like baseline): start timestamps, versions |
//! | [`promotion`] | a backup promoted by a small consensus of the coordinators (Aurogon §4.5): a coordinator grants each epoch of a shard to the first candidate (`Grants`), a majority of grants makes it primary (`Candidacy`) | `aurogon`, [`primary_backup`] |
//! | [`primary_backup`] | a partition server run unchanged on its shard's primary: records replicated synchronously to every backup, sends held until every backup acknowledged what they depend on, a promoted backup rebuilding the server from its records | `2pl-pb`, `occ-pb` |
//! | [`replica_reads`] | reads at asynchronous read replicas under a watermark: held reads (`HeldReads`), pulled replication's retry (`Puller`) and the primary's log of versions answering held pulls (`RepLog`), a read-only piece run at a copy (`run_read_only`), the visibility delay counted one way (`Visibility`, `delay_counters!`), the nearest copy of a shard (`nearest_copy`) | `k2` (K2-VCR), `p2pl-ttc` (`replica_reads=safets`), `mvto-hlc` (`replica_reads=closedts`) |
//! | [`recent`] | a bounded memory of recently seen ids (`Recent`): a set forgetting its oldest past a capacity | `dast` (duplicate hand-offs) |
//! | [`raft_group`] | a Raft group (the `raft` crate's `RawNode`/`Ready`) with log compaction behind the applied index and snapshots for lagging or restarted members | Tiga's view manager, replicated Clock-SI partitions (which compact) |
//!
//! Why a kit: K2, DAST and Aurogon need the same commit, consensus and clock mechanisms;
//! copying them per protocol is how 2PL and Clock-SI came to hold two 2PC implementations.

pub mod clock_gate;
pub mod hlc;
pub mod log;
pub mod options;
pub mod owd;
pub mod placement;
pub mod primary_backup;
pub mod promotion;
pub mod quorum;
pub mod raft_group;
pub mod recent;
pub mod replica_reads;
pub mod replicated;
pub mod ttc;
pub mod two_pc;
