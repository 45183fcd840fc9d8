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
//! costs nothing. With [`SimOptions::workers`] > 1 a node has that many worker threads,
//! each with its own backlog, and an event joins a worker drawn at random (a request
//! lands on the queue of the thread its connection is bound to, as with one RDMA queue
//! pair per thread in Aurogon's testbed): events may then run out of their arrival order. No per-key, per-byte or per-send cost: MicroBench transactions all touch
//! three keys, one per shard, so a per-key term would only rescale the per-event one.
//!
//! **The calibration** (issue 17 item 3), done once, on Tiga alone, against the paper's
//! Table 1 (Tiga 157.3 K txns/s over 8 coordinators; its sweep goes to 25 K txns/s per
//! coordinator): MicroBench, skew 0.5, on `gcp-tiga`, open loop, cap 8,000 per
//! coordinator, 400 ms of warm-up and 500 ms measured (`experiments/tiga-table1.toml`'s
//! setup). Tiga's busiest nodes are the three co-located shard leaders in SC, each handling
//! every transaction, so its saturation throughput falls roughly as 1 / cost.
//! Measured at 1.7 µs per event (release build; `meridian experiment run` on that file
//! restricted to `protocol = ["tiga"]`, `rate = [15000, 20000, 25000]`):
//!
//! | offered per coordinator | committed txns/s | p50 ms |
//! |---|---|---|
//! | 15 K | 119,592 | 184.2 (183.9 at 1 K without a service time) |
//! | 20 K | 155,126 | 195.8 |
//! | 25 K | 170,114 | 258.5 |
//!
//! so Tiga saturates near 170 K at 1.7 µs. At 1.85 µs (`rate = [25000, 20000]`) it
//! plateaus at ≈ 151 K: 150,964 txns/s at 25 K per coordinator (p50 274.2 ms), 150,354 at
//! 20 K (p50 219.5 ms). Between the two, **1.8 µs per event** (`rate = [25000]`): 157,988
//! txns/s at 25 K per coordinator (p50 269.7 ms), the paper's 157.3 K within 0.5 %, with
//! the latency bend near 20 K per coordinator (157.3 K ÷ 8 = 19.7 K). The Tiga figure
//! experiments (`experiments/tiga-fig7.toml`, `-fig8`, `-fig9`, `-fig11`, `-fig12`,
//! `-fig13`, `-table1`, `-table2`) run at the paper's loads and set
//! `service_time = "1.8us"` for every protocol; the baselines are never tuned separately.
//!
//! One seeded RNG for the network, one per node (re-seeded per incarnation), one per clock
//! and one per client: the same seed gives the same event trace, bit for bit, which
//! [`SimReport::trace_hash`] summarizes.

pub mod clock;
pub mod codec;
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
