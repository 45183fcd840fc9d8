//! `meridian-bench`: the benchmark driver of DESIGN §10.
//!
//! * A [`Point`] is one configuration to measure: protocol, topology, workload and their
//!   options, the load shape ([`Load`]: open loop with a cap on outstanding transactions
//!   per coordinator, Tiga §5.1; or closed-loop clients, K2/DAST), duration and seed.
//! * [`results`] is the one results model both drivers feed: per coordinator region and
//!   per transaction class (an open set of labels), outcome counts, HDR latency
//!   histograms, commit paths and abort reasons.
//! * [`driver`] is the sans-IO core of the load driver both the simulator and the runtime
//!   run: the clients (placed by `meridian_workload::place_clients`), their transactions
//!   in flight, interactive sessions stepped from answer to answer.
//! * A [`Target`] runs a point and returns its [`Results`]. The simulator is one target
//!   (in `meridian-cli`, where the protocol registry lives); the tokio runtime plugs in the
//!   same way. Nothing here knows a protocol.
//! * [`metrics`] turns samples into the per-region metrics of DESIGN §10 (throughput,
//!   commit rate, p50/p90/p99 in ms and in WRTT units against the physical bound, path
//!   ratios, abort ratio and reasons), percentiles from HDR histograms.
//! * [`experiment`] reads `experiments/*.toml`, expands the sweep, runs every point and
//!   repeat, and writes JSON, CSV and [`plot`]s (SVG and PNG): metric against metric or
//!   swept parameter, latency CDFs, and timelines (outcomes per bucket of time, with the
//!   injected faults marked) for fault experiments. A plot may also name the protocol's
//!   counters (`counters.K`, ratios `counters.A / counters.B`) and a target's model values
//!   (`model.K`).

pub mod driver;
pub mod experiment;
pub mod metrics;
pub mod plot;
pub mod report;
pub mod reproduce;
pub mod results;

pub use driver::{InFlight, LoadCore, Next};
pub use results::{path_name, Finished, RegionResults, Results, Stats};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How load is offered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Load {
    /// `clients` closed-loop clients per coordinator, each with one transaction in flight.
    Closed { clients: u32 },
    /// Poisson arrivals at `rate_tps` per coordinator, at most `max_outstanding` in flight
    /// per coordinator; arrivals beyond the cap are not submitted (Tiga §5.1).
    Open { rate_tps: f64, max_outstanding: u32 },
}

/// One configuration to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub protocol: String,
    pub topology: String,
    pub workload: String,
    pub workload_opts: BTreeMap<String, String>,
    pub protocol_opts: BTreeMap<String, String>,
    pub load: Load,
    /// Override of every node's clock profile (`perfect`, `huygens`, `chrony`, `ntpd`, `bad`).
    pub clock: Option<String>,
    pub duration_ms: u64,
    pub drain_ms: u64,
    /// Processing time of every event at a node, ns (0: infinitely fast nodes). With it,
    /// throughput saturates as on real servers (the calibrated cost: `meridian_sim`'s
    /// module doc, "Service time").
    pub service_time_ns: u64,
    /// Simulator: worker threads per node, each with its own queue (1: one queue).
    #[serde(default = "one_worker")]
    pub workers: u32,
    /// Simulator: a machine's nodes share its `workers` instead of each having its own
    /// (the testbed's threads serve every role of their server).
    #[serde(default)]
    pub machine_workers: bool,
    pub seed: u64,
    /// Scheduled faults in the simulator's syntax (`crash:shard0/replica0@10s,…`), or `none`.
    pub faults: String,
    /// Bucket length of the run's timeline, ms.
    pub timeline_bucket_ms: u64,
    /// Runtime target: multiplies the topology's one-way delays (1: the real WAN).
    pub wan_scale: f64,
    /// Runtime target: how long the load runs before `duration_ms` is measured (the
    /// estimators, queues and GC reach their steady state), ms.
    #[serde(default)]
    pub warmup_ms: u64,
    /// Simulator, closed load: an aborted transaction is sent again until it commits (the
    /// papers' harnesses retry; [`LoadCore::retry_next`]).
    #[serde(default)]
    pub retry_aborted: bool,
    /// With `retry_aborted`: how long an aborted transaction waits while its client runs
    /// fresh ones, ns (0: it is the next one; the Aurogon artifact waits 500 µs).
    #[serde(default)]
    pub retry_interval_ns: u64,
}

/// One run's raw result.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// Outcomes and latency per coordinator region and per transaction class.
    pub results: Results,
    /// The time during which load was offered, s (throughput's denominator).
    pub load_s: f64,
    /// The workload's invariant and final-state conditions: `Err` names the violation.
    pub invariant: Result<(), String>,
    /// Outcomes over time (empty if the target keeps no timeline).
    pub timeline: Vec<TimeBucket>,
    /// Moments worth marking on a timeline, `(s, label)`: the faults injected.
    pub marks: Vec<(f64, String)>,
    /// The protocol's own counters (`Context::count`), summed over its nodes.
    pub counters: BTreeMap<String, u64>,
    /// Values the target derives for the run, such as an analytical model's prediction
    /// from the measured inputs (`delay_probability`); plots name them `model.K`.
    pub model: BTreeMap<String, f64>,
}

/// What finished in one bucket of time: each transaction counts in the bucket where its
/// answer reached the client.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBucket {
    /// The bucket's start, s from the start of the load.
    pub start_s: f64,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Committed transactions per second of the bucket.
    pub throughput_tps: f64,
    /// Latency of the transactions committed in the bucket, ms.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Simulator: the largest spread between two machines' clocks (fastest − slowest)
    /// sampled in the bucket, ns (Aurogon Fig. 13).
    #[serde(default)]
    pub clock_spread_ns: Option<f64>,
    /// Simulator: percentiles (90th, 99th, 99.9th) of every machine's |local − true|
    /// sampled in the bucket, ns (K2 Fig. 15: ε over time).
    #[serde(default)]
    pub clock_error_p90_ns: Option<f64>,
    #[serde(default)]
    pub clock_error_p99_ns: Option<f64>,
    #[serde(default)]
    pub clock_error_p999_ns: Option<f64>,
}

impl TimeBucket {
    /// Every field a timeline plot may show, with its axis label.
    pub const FIELDS: [(&'static str, &'static str); 10] = [
        ("throughput_tps", "throughput (committed txns/s)"),
        ("p50_ms", "median commit latency (ms)"),
        ("p99_ms", "p99 commit latency (ms)"),
        ("committed", "committed transactions per bucket"),
        ("aborted", "aborted transactions per bucket"),
        ("unknown", "unknown outcomes per bucket"),
        (
            "clock_spread_ns",
            "largest clock spread between machines (ns)",
        ),
        (
            "clock_error_p90_ns",
            "90th percentile of |clock error| (ns)",
        ),
        (
            "clock_error_p99_ns",
            "99th percentile of |clock error| (ns)",
        ),
        (
            "clock_error_p999_ns",
            "99.9th percentile of |clock error| (ns)",
        ),
    ];

    /// The named field (see [`TimeBucket::FIELDS`]).
    pub fn get(&self, name: &str) -> Option<f64> {
        match name {
            "throughput_tps" => Some(self.throughput_tps),
            "p50_ms" => self.p50_ms,
            "p99_ms" => self.p99_ms,
            "committed" => Some(self.committed as f64),
            "aborted" => Some(self.aborted as f64),
            "unknown" => Some(self.unknown as f64),
            "clock_spread_ns" => self.clock_spread_ns,
            "clock_error_p90_ns" => self.clock_error_p90_ns,
            "clock_error_p99_ns" => self.clock_error_p99_ns,
            "clock_error_p999_ns" => self.clock_error_p999_ns,
            _ => None,
        }
    }
}

/// Something that runs a point: the simulator, or a real cluster.
pub trait Target {
    /// A short name for reports (`sim`, `runtime`).
    fn name(&self) -> &str;

    /// Runs `point` to the end. `progress` receives the fraction done (0–1). An `Err` is a
    /// point that could not run (bad protocol name, bad option): the message names it.
    fn run(&mut self, point: &Point, progress: &mut dyn FnMut(f64)) -> Result<RunOutput, String>;
}

impl Default for RunOutput {
    fn default() -> Self {
        RunOutput {
            results: Results::default(),
            load_s: 0.0,
            invariant: Ok(()),
            timeline: Vec::new(),
            marks: Vec::new(),
            counters: BTreeMap::new(),
            model: BTreeMap::new(),
        }
    }
}

fn one_worker() -> u32 {
    1
}
