//! `meridian-sim`: the deterministic simulator (DESIGN §3, §4, §8).
//!
//! A discrete-event loop over virtual time drives any [`Protocol`]'s nodes through the
//! sans-IO contract of `meridian-core`:
//!
//! * **Network** ([`network`]): one-way delay per region pair from the topology, plus an
//!   exponential jitter of mean `jitter_ms` (reordering emerges from it), loss, duplication and
//!   partitions. A message to oneself is delivered at once.
//! * **Machines**: the nodes of one machine (topology `[machines]`) talk at no cost, crash
//!   and restart together and read one clock.
//! * **Clocks** ([`clock`]): every machine reads its own local clock, modelled per profile.
//! * **Faults** ([`faults`]): crash and restart (a restarted node is rebuilt from its durable
//!   records), partitions, loss, duplication, clock steps — scheduled or seeded-random.
//! * **Clients**: closed-loop clients (or open-loop arrivals with a cap per coordinator)
//!   placed by `meridian_workload::place_clients` draw transactions from a [`Workload`],
//!   which sees each client's coordinator and region; one-shot plans are one request,
//!   interactive plans a session of steps, stepped by the load driver's core that the
//!   runtime shares (`meridian_bench::LoadCore`). Each finished transaction becomes a
//!   history entry (true virtual times) and a count in the results model
//!   (`meridian_bench::Results`: per region and per class label).
//! * **Service time**: optionally each node is busy for a fixed time per event, so queueing
//!   shows; with `batch_max` what queued meanwhile is one batch, as in the runtime. See
//!   "Service time" below for the calibrated cost.
//! * **Steady-state window** ([`SimOptions::steady_from_ns`]): the results may count only
//!   what finishes between a warm-up and the end of the load, so a saturated open loop's
//!   backlog, finished in the drain, does not inflate the throughput.
//! * **Conformance** ([`conformance`]): the swarm, replay, golden-trace and broken-variant
//!   tests every protocol declares with one line.
//!
//! ## Service time
//!
//! The model: every node (server, coordinator, service) handles one event at a time and is
//! busy `service_time_ns` per event it handles (a message delivered, a live timer, a client
//! request); what arrives meanwhile waits in the node's FIFO backlog. A cancelled timer
//! costs nothing. No per-key, per-byte or per-send cost: MicroBench transactions all touch
//! three keys, one per shard, so a per-key term would only rescale the per-event one.
//!
//! **The calibration** (issue 17 item 3), done once, on Tiga alone: 1.7 µs per event puts
//! Tiga's saturation on `gcp-tiga` (MicroBench, skew 0.5, 8 coordinators) near the paper's
//! Table 1, 157.3 K txns/s. Tiga's busiest nodes are the three co-located shard leaders in
//! SC, each handling every transaction (a submit, the other leaders' notifications, its
//! timers); at 1 µs Tiga commits the 160 K txns/s offered at 20 K per coordinator with no
//! queueing (p50 unchanged), at 1.2 µs it still commits ≈ 200 K txns/s with 40 K
//! transactions kept in flight. The experiments (`experiments/tiga-fig7.toml`, …,
//! `tiga-table1.toml`) set `service_time = "1.7us"` for every protocol; the baselines are
//! never tuned separately. Measured numbers and commands: `docs/REPRODUCTION.md` (Table 1)
//! and the calibration commit's message.
//!
//! One seeded RNG for the network, one per node (re-seeded per incarnation), one per clock
//! and one per client: the same seed gives the same event trace, bit for bit, which
//! [`SimReport::trace_hash`] summarizes.

pub mod clock;
pub mod conformance;
mod driver;
pub mod faults;
pub mod network;
mod queue;
pub mod report;

pub use conformance::{Broken, Conformance};
pub use driver::{run, setup, OpenLoop, Progress, SimOptions};
pub use faults::{Fault, FaultKinds, FaultPlan};
pub use meridian_bench::{path_name, RegionResults, Stats};
pub use report::{ClockErrorBucket, ClockErrorReport, SimReport, TimeBucket, Timeline};

pub use meridian_core::Protocol;
pub use meridian_workload::Workload;
