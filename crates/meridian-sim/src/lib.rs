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
//!   shows; with `batch_max` what queued meanwhile is one batch, as in the runtime.
//! * **Conformance** ([`conformance`]): the swarm, replay, golden-trace and broken-variant
//!   tests every protocol declares with one line.
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
