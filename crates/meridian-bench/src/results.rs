//! The one results model of a run, fed by both drivers (the simulator and the runtime):
//! per coordinator region, and within a region per transaction class (the open label set of
//! [`Classes`]: `read-only`/`read-write` plus a workload's own labels), the outcome counts,
//! an HDR latency histogram (bounded memory however long the run), the physical bound of
//! the committed transactions, the commit paths and the abort reasons.
//!
//! A transaction with several labels counts once in its region's totals and once under
//! each of its labels, so class rows may add up to more than the region.

use hdrhistogram::Histogram;
use meridian_core::txn::Outcome;
use meridian_core::{Cluster, CommitPath};
use meridian_workload::Classes;
use std::collections::BTreeMap;

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

/// A latency histogram in ns: 1 µs to 1 h at 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1_000, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Outcomes and latency of one group of transactions (a region, or a class within it).
#[derive(Clone, Debug)]
pub struct Stats {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Commit latencies (invoke to answer) of committed transactions, ns.
    pub latency_ns: Histogram<u64>,
    /// The protocol's physical bound of each committed transaction, µs → count.
    pub bounds_us: BTreeMap<u64, u64>,
    /// Committed transactions by commit path (`fast`, `slow`, `re-executed`, …).
    pub paths: BTreeMap<String, u64>,
    /// Aborted transactions by reason (numbers masked, at most [`MAX_REASONS`] kept).
    pub abort_reasons: BTreeMap<String, u64>,
    /// Unknown outcomes by reason (as `abort_reasons`).
    pub unknown_reasons: BTreeMap<String, u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            committed: 0,
            aborted: 0,
            unknown: 0,
            latency_ns: latency_histogram(),
            bounds_us: BTreeMap::new(),
            paths: BTreeMap::new(),
            abort_reasons: BTreeMap::new(),
            unknown_reasons: BTreeMap::new(),
        }
    }
}

impl Stats {
    /// Transactions that ended, whatever the outcome.
    pub fn finished(&self) -> u64 {
        self.committed + self.aborted + self.unknown
    }

    /// Counts one finished transaction.
    pub fn record(&mut self, outcome: &Outcome, latency_ns: u64, bound_ms: Option<f64>) {
        match outcome {
            Outcome::Committed { path, .. } => {
                self.committed += 1;
                self.latency_ns.saturating_record(latency_ns.max(1_000));
                let bound_us = (bound_ms.unwrap_or(0.0) * 1e3).round() as u64;
                *self.bounds_us.entry(bound_us).or_default() += 1;
                *self.paths.entry(path_name(*path).to_string()).or_default() += 1;
            }
            Outcome::Aborted { reason } => {
                self.aborted += 1;
                count_reason(&mut self.abort_reasons, &reason.to_string(), 1);
            }
            Outcome::Unknown { reason } => {
                self.unknown += 1;
                count_reason(&mut self.unknown_reasons, reason, 1);
            }
        }
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &Stats) {
        self.committed += other.committed;
        self.aborted += other.aborted;
        self.unknown += other.unknown;
        self.latency_ns
            .add(&other.latency_ns)
            .expect("histograms of equal bounds");
        for (bound, n) in &other.bounds_us {
            *self.bounds_us.entry(*bound).or_default() += n;
        }
        for (path, n) in &other.paths {
            *self.paths.entry(path.clone()).or_default() += n;
        }
        for (reason, n) in &other.abort_reasons {
            count_reason(&mut self.abort_reasons, reason, *n);
        }
        for (reason, n) in &other.unknown_reasons {
            count_reason(&mut self.unknown_reasons, reason, *n);
        }
    }

    /// The `p`-th percentile (0–100) of commit latency, ms; `None` with no commit.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        (!self.latency_ns.is_empty())
            .then(|| self.latency_ns.value_at_quantile(p / 100.0) as f64 / 1e6)
    }

    /// The mean commit latency, ms; `None` with no commit.
    pub fn mean_ms(&self) -> Option<f64> {
        (!self.latency_ns.is_empty()).then(|| self.latency_ns.mean() / 1e6)
    }

    /// The median physical bound of the committed transactions, ms.
    pub fn bound_ms(&self) -> Option<f64> {
        let total: u64 = self.bounds_us.values().sum();
        let mut seen = 0;
        for (bound, count) in &self.bounds_us {
            seen += count;
            if seen * 2 >= total {
                return Some(*bound as f64 / 1e3);
            }
        }
        None
    }

    /// Median latency in units of the bound (1.0 = optimal, e.g. 1 WRTT).
    pub fn p50_wrtt(&self) -> Option<f64> {
        match (self.percentile_ms(50.0), self.bound_ms()) {
            (Some(p), Some(b)) if b > 0.0 => Some(p / b),
            _ => None,
        }
    }

    /// The share of committed transactions that took commit path `path` (`fast`, …).
    pub fn path_ratio(&self, path: &str) -> Option<f64> {
        (self.committed > 0)
            .then(|| *self.paths.get(path).unwrap_or(&0) as f64 / self.committed as f64)
    }

    /// The share of committed transactions that took the fast path.
    pub fn fast_path_ratio(&self) -> Option<f64> {
        self.path_ratio(path_name(CommitPath::Fast))
    }
}

/// The transactions of the coordinators of one region: their totals (which the region
/// reads as, through `Deref`) and the same figures per class label.
#[derive(Clone, Debug, Default)]
pub struct RegionResults {
    pub region: String,
    pub totals: Stats,
    /// Per class label, in label order.
    pub classes: BTreeMap<String, Stats>,
}

impl std::ops::Deref for RegionResults {
    type Target = Stats;

    fn deref(&self) -> &Stats {
        &self.totals
    }
}

impl RegionResults {
    /// An empty region.
    pub fn new(region: &str) -> RegionResults {
        RegionResults {
            region: region.to_string(),
            ..RegionResults::default()
        }
    }

    fn record(&mut self, done: &Finished) {
        self.totals
            .record(done.outcome, done.latency_ns, done.bound_ms);
        for class in done.classes.iter() {
            if !self.classes.contains_key(class) {
                self.classes.insert(class.to_string(), Stats::default());
            }
            let stats = self.classes.get_mut(class).expect("inserted");
            stats.record(done.outcome, done.latency_ns, done.bound_ms);
        }
    }

    fn merge(&mut self, other: &RegionResults) {
        self.totals.merge(&other.totals);
        for (class, stats) in &other.classes {
            self.classes.entry(class.clone()).or_default().merge(stats);
        }
    }
}

/// One finished transaction, as a driver reports it.
#[derive(Clone, Copy, Debug)]
pub struct Finished<'a> {
    /// The index of the client's region in [`Results::regions`].
    pub region: usize,
    pub classes: &'a Classes,
    pub outcome: &'a Outcome,
    /// Invoke to answer, ns.
    pub latency_ns: u64,
    /// The protocol's physical bound for the transaction, ms (committed ones only).
    pub bound_ms: Option<f64>,
}

/// What one run (or one interval of it) measured.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// One entry per region hosting coordinators, in the order of the cluster's
    /// coordinators ([`Results::for_cluster`]).
    pub regions: Vec<RegionResults>,
    /// Open-loop arrivals not submitted because the coordinator's cap was reached.
    pub throttled: u64,
}

impl Results {
    /// Empty results with one entry per region of `cluster` that hosts a coordinator, in the
    /// order of first appearance among `cluster.coordinators`.
    pub fn for_cluster(cluster: &Cluster) -> Results {
        let mut regions: Vec<RegionResults> = Vec::new();
        for &c in &cluster.coordinators {
            let name = cluster.topology.region_name(cluster.region_of(c));
            if !regions.iter().any(|r| r.region == name) {
                regions.push(RegionResults::new(name));
            }
        }
        Results {
            regions,
            throttled: 0,
        }
    }

    /// The index in [`Results::regions`] of the region named `name`.
    pub fn region_index(&self, name: &str) -> Option<usize> {
        self.regions.iter().position(|r| r.region == name)
    }

    /// Counts one finished transaction.
    pub fn record(&mut self, done: &Finished) {
        self.regions[done.region].record(done);
    }

    /// Adds `other`'s figures (regions matched by name; new ones appended).
    pub fn merge(&mut self, other: &Results) {
        for region in &other.regions {
            match self.region_index(&region.region) {
                Some(i) => self.regions[i].merge(region),
                None => self.regions.push(region.clone()),
            }
        }
        self.throttled += other.throttled;
    }

    /// The same regions with nothing counted.
    pub fn cleared(&self) -> Results {
        Results {
            regions: self
                .regions
                .iter()
                .map(|r| RegionResults::new(&r.region))
                .collect(),
            throttled: 0,
        }
    }

    /// Every region taken together (its class breakdown included).
    pub fn all_regions(&self) -> RegionResults {
        all_regions(&self.regions)
    }

    pub fn committed(&self) -> u64 {
        self.regions.iter().map(|r| r.committed).sum()
    }

    pub fn aborted(&self) -> u64 {
        self.regions.iter().map(|r| r.aborted).sum()
    }

    pub fn unknown(&self) -> u64 {
        self.regions.iter().map(|r| r.unknown).sum()
    }

    pub fn finished(&self) -> u64 {
        self.regions.iter().map(|r| r.finished()).sum()
    }

    /// Abort reasons over every region.
    pub fn abort_reasons(&self) -> BTreeMap<String, u64> {
        self.all_regions().totals.abort_reasons
    }
}

/// `regions` taken together as the `all` region (class breakdown included).
pub fn all_regions(regions: &[RegionResults]) -> RegionResults {
    let mut all = RegionResults::new(crate::metrics::ALL);
    for region in regions {
        all.merge(region);
    }
    all
}

/// Distinct reasons kept at most per group; the rest are counted under `other`.
pub const MAX_REASONS: usize = 32;

/// Counts `reason` `n` times with the words that carry numbers (transaction ids, durations)
/// masked, so a long run's table stays bounded however many transactions fail.
fn count_reason(reasons: &mut BTreeMap<String, u64>, reason: &str, n: u64) {
    let masked: Vec<&str> = reason
        .split_whitespace()
        .map(|w| {
            if w.contains(|c: char| c.is_ascii_digit()) {
                "#"
            } else {
                w
            }
        })
        .collect();
    let mut key = masked.join(" ");
    // One place stays free for "other".
    if !reasons.contains_key(&key) && reasons.len() >= MAX_REASONS - 1 {
        key = "other".to_string();
    }
    *reasons.entry(key).or_default() += n;
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::txn::AbortReason;
    use meridian_workload::{Planned, TxnPlan, READ_WRITE};

    fn committed() -> Outcome {
        Outcome::Committed {
            results: Vec::new(),
            commit_ts: None,
            path: CommitPath::Fast,
        }
    }

    #[test]
    fn reasons_stay_bounded_whatever_their_ids() {
        let mut reasons = BTreeMap::new();
        for i in 0..1000 {
            count_reason(&mut reasons, &format!("T9.{i} not committed in time"), 1);
            count_reason(
                &mut reasons,
                &format!("distinct {}", char::from(b'a' + (i % 26) as u8)),
                1,
            );
            count_reason(
                &mut reasons,
                &format!("more {}", char::from(b'A' + (i % 26) as u8)),
                1,
            );
        }
        assert_eq!(reasons["# not committed in time"], 1000);
        assert!(reasons.len() <= MAX_REASONS);
        assert!(reasons["other"] > 0);
    }

    #[test]
    fn latency_splits_by_region_and_by_every_class_label() {
        let mut results = Results {
            regions: vec![RegionResults::new("A"), RegionResults::new("B")],
            throttled: 0,
        };
        let write = TxnPlan::Interactive(vec![meridian_workload::InteractiveOp::Put(
            "k".into(),
            "v".into(),
        )]);
        let payment = Planned::from(write).class("payment");
        let ok = committed();
        for ms in 1..=100u64 {
            results.record(&Finished {
                region: 0,
                classes: &payment.classes,
                outcome: &ok,
                latency_ns: ms * 1_000_000,
                bound_ms: Some(50.0),
            });
        }
        let aborted = Outcome::Aborted {
            reason: AbortReason::Conflict,
        };
        results.record(&Finished {
            region: 1,
            classes: &payment.classes,
            outcome: &aborted,
            latency_ns: 0,
            bound_ms: None,
        });
        let a = &results.regions[0];
        assert_eq!(a.committed, 100);
        assert_eq!(a.classes["payment"].committed, 100);
        assert_eq!(a.classes[READ_WRITE].committed, 100);
        assert!((a.classes["payment"].percentile_ms(50.0).unwrap() - 50.0).abs() < 0.1);
        assert_eq!(a.bound_ms(), Some(50.0));
        assert_eq!(a.fast_path_ratio(), Some(1.0));
        assert_eq!(results.regions[1].classes["payment"].aborted, 1);
        let all = results.all_regions();
        assert_eq!(all.finished(), 101);
        assert_eq!(all.classes["payment"].finished(), 101);
        assert_eq!(results.abort_reasons().values().sum::<u64>(), 1);
    }
}
