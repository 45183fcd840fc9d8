//! What a simulated run measured: outcome counts, per-coordinator-region latency against the
//! protocol's physical bound, event counts and the trace hash that proves determinism.

use meridian_check::Entry;
use meridian_core::time::NS_PER_MS;
use meridian_core::CommitPath;
use serde::Serialize;
use std::collections::BTreeMap;

/// Latency and outcomes of the coordinators of one region.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RegionStats {
    pub region: String,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Commit latencies (true time, invoke to complete), sorted ascending.
    #[serde(skip)]
    pub latencies_ns: Vec<u64>,
    /// The protocol's physical bound of each committed transaction, in ms.
    #[serde(skip)]
    pub bounds_ms: Vec<f64>,
    pub paths: BTreeMap<String, u64>,
}

impl RegionStats {
    /// The `p`-th percentile (0–100) of commit latency in ms, nearest-rank; `None` if empty.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        if self.latencies_ns.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * self.latencies_ns.len() as f64).ceil() as usize;
        let index = rank.clamp(1, self.latencies_ns.len()) - 1;
        Some(self.latencies_ns[index] as f64 / NS_PER_MS as f64)
    }

    /// The median of the committed transactions' physical bounds, in ms.
    pub fn bound_ms(&self) -> Option<f64> {
        if self.bounds_ms.is_empty() {
            return None;
        }
        let mut sorted = self.bounds_ms.clone();
        sorted.sort_by(f64::total_cmp);
        Some(sorted[(sorted.len() - 1) / 2])
    }

    /// The share of committed transactions that took the fast path.
    pub fn fast_path_ratio(&self) -> Option<f64> {
        (self.committed > 0).then(|| {
            *self.paths.get(path_name(CommitPath::Fast)).unwrap_or(&0) as f64
                / self.committed as f64
        })
    }
}

/// The report's name for a commit path.
pub fn path_name(path: CommitPath) -> &'static str {
    match path {
        CommitPath::Fast => "fast",
        CommitPath::Slow => "slow",
        CommitPath::ReExecuted => "re-executed",
        CommitPath::Local => "local",
        CommitPath::TwoPhase => "two-phase",
        CommitPath::ReadOnly => "read-only",
    }
}

/// Everything a run measured.
#[derive(Clone, Debug)]
pub struct SimReport {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    pub abort_reasons: BTreeMap<String, u64>,
    /// One entry per region that hosts coordinators, in topology order.
    pub regions: Vec<RegionStats>,
    /// Events processed (deliveries, timers, client events, faults).
    pub events: u64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    pub messages_dropped: u64,
    /// Virtual time simulated, ns.
    pub virtual_ns: u64,
    /// A hash of every processed event and every outcome: equal for equal seeds.
    pub trace_hash: u64,
    /// The recorded history (empty unless recording was asked for).
    pub history: Vec<Entry>,
    /// The workload's own invariant over the history, and its conditions over the final
    /// state read by the end-of-run audit.
    pub invariant: Result<(), String>,
    /// The protocol's own counters ([`meridian_core::node::Effect::Count`]), summed over
    /// every node of the run.
    pub counters: BTreeMap<&'static str, u64>,
    /// Open-loop arrivals not submitted because the coordinator's cap was reached.
    pub throttled: u64,
    /// Keys the end-of-run audit read (0: the workload has no final-state conditions).
    pub audited_keys: u64,
}

impl Default for SimReport {
    fn default() -> Self {
        SimReport {
            committed: 0,
            aborted: 0,
            unknown: 0,
            abort_reasons: BTreeMap::new(),
            regions: Vec::new(),
            events: 0,
            messages_sent: 0,
            messages_delivered: 0,
            messages_dropped: 0,
            virtual_ns: 0,
            trace_hash: 0,
            history: Vec::new(),
            invariant: Ok(()),
            counters: BTreeMap::new(),
            audited_keys: 0,
            throttled: 0,
        }
    }
}
