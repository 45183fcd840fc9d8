//! The per-region metrics of DESIGN §10, from a run's samples. Percentiles come from an HDR
//! histogram (3 significant digits, 1 µs to 1 h), so memory does not grow with the run.

use crate::results::Stats;
use crate::RunOutput;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The name of the all-regions row.
pub const ALL: &str = "all";

/// What one region (or all of them) measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub region: String,
    /// The transaction class the row is about; `None`: every transaction of the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Committed transactions per second of load.
    pub throughput_tps: f64,
    /// Committed / finished.
    pub commit_rate: Option<f64>,
    pub abort_ratio: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The physical bound (median over the region's transactions), ms.
    pub bound_ms: Option<f64>,
    /// Median latency in units of the bound (1.0 = optimal, e.g. 1 WRTT).
    pub p50_wrtt: Option<f64>,
    pub fast_path_ratio: Option<f64>,
    pub slow_path_ratio: Option<f64>,
    pub reexecuted_ratio: Option<f64>,
}

/// Every metric name a plot or CSV may name, with its axis label (unit included).
pub const METRICS: [(&str, &str); 13] = [
    ("committed", "committed transactions"),
    ("aborted", "aborted transactions"),
    ("throughput_tps", "throughput (committed txns/s)"),
    ("commit_rate", "commit rate (fraction of finished txns)"),
    ("abort_ratio", "abort rate (fraction of finished txns)"),
    ("p50_ms", "median commit latency (ms)"),
    ("p90_ms", "p90 commit latency (ms)"),
    ("p99_ms", "p99 commit latency (ms)"),
    ("bound_ms", "physical latency bound (ms)"),
    ("p50_wrtt", "median latency / physical bound (WRTT units)"),
    ("fast_path_ratio", "fast-path commits (fraction)"),
    ("slow_path_ratio", "slow-path commits (fraction)"),
    ("reexecuted_ratio", "re-executed commits (fraction)"),
];

impl Metrics {
    /// The named metric (see [`METRICS`]); `None` if absent or unknown.
    pub fn get(&self, name: &str) -> Option<f64> {
        match name {
            "committed" => Some(self.committed as f64),
            "aborted" => Some(self.aborted as f64),
            "throughput_tps" => Some(self.throughput_tps),
            "commit_rate" => self.commit_rate,
            "abort_ratio" => self.abort_ratio,
            "p50_ms" => self.p50_ms,
            "p90_ms" => self.p90_ms,
            "p99_ms" => self.p99_ms,
            "bound_ms" => self.bound_ms,
            "p50_wrtt" => self.p50_wrtt,
            "fast_path_ratio" => self.fast_path_ratio,
            "slow_path_ratio" => self.slow_path_ratio,
            "reexecuted_ratio" => self.reexecuted_ratio,
            _ => None,
        }
    }
}

/// A latency histogram in ns of `latencies_ns`: 1 µs to 1 h at 3 significant digits.
pub fn histogram(latencies_ns: &[u64]) -> Histogram<u64> {
    let mut h = crate::results::latency_histogram();
    for &ns in latencies_ns {
        h.saturating_record(ns.max(1_000));
    }
    h
}

pub(crate) fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[(values.len() - 1) / 2])
}

/// The metrics of one group of transactions (a region, or all of them).
pub fn of_stats(region: &str, s: &Stats, load_s: f64) -> Metrics {
    let finished = s.finished();
    let ratio = |part: u64| (finished > 0).then(|| part as f64 / finished as f64);
    Metrics {
        region: region.to_string(),
        class: None,
        committed: s.committed,
        aborted: s.aborted,
        unknown: s.unknown,
        throughput_tps: if load_s > 0.0 {
            s.committed as f64 / load_s
        } else {
            0.0
        },
        commit_rate: ratio(s.committed),
        abort_ratio: ratio(s.aborted),
        p50_ms: s.percentile_ms(50.0),
        p90_ms: s.percentile_ms(90.0),
        p99_ms: s.percentile_ms(99.0),
        bound_ms: s.bound_ms(),
        p50_wrtt: s.p50_wrtt(),
        fast_path_ratio: s.path_ratio("fast"),
        slow_path_ratio: s.path_ratio("slow"),
        reexecuted_ratio: s.path_ratio("re-executed"),
    }
}

/// The metrics of one run: one row per region, then the all-regions row, then a row per
/// region (all regions last) and transaction class.
pub fn of_run(run: &RunOutput) -> Vec<Metrics> {
    let all = run.results.all_regions();
    let regions: Vec<&crate::RegionResults> = run.results.regions.iter().chain([&all]).collect();
    let mut rows: Vec<Metrics> = regions
        .iter()
        .map(|r| of_stats(&r.region, r, run.load_s))
        .collect();
    for r in regions {
        for (class, stats) in &r.classes {
            rows.push(Metrics {
                class: Some(class.clone()),
                ..of_stats(&r.region, stats, run.load_s)
            });
        }
    }
    rows
}

/// The row of `region` (or [`ALL`]) and `class` (`None`: every transaction).
pub fn find<'a>(rows: &'a [Metrics], region: &str, class: Option<&str>) -> Option<&'a Metrics> {
    rows.iter()
        .find(|m| m.region == region && m.class.as_deref() == class)
}

/// The median of each metric over repeats, region by region (regions matched by name).
pub fn median_of(repeats: &[Vec<Metrics>]) -> Vec<Metrics> {
    let Some(first) = repeats.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|row| {
            let same: Vec<&Metrics> = repeats
                .iter()
                .filter_map(|r| find(r, &row.region, row.class.as_deref()))
                .collect();
            let med = |f: &dyn Fn(&Metrics) -> Option<f64>| {
                median(&mut same.iter().filter_map(|m| f(m)).collect::<Vec<_>>())
            };
            let count = |f: &dyn Fn(&Metrics) -> u64| {
                med(&|m| Some(f(m) as f64)).map_or(0, |v| v.round() as u64)
            };
            Metrics {
                region: row.region.clone(),
                class: row.class.clone(),
                committed: count(&|m| m.committed),
                aborted: count(&|m| m.aborted),
                unknown: count(&|m| m.unknown),
                throughput_tps: med(&|m| Some(m.throughput_tps)).unwrap_or(0.0),
                commit_rate: med(&|m| m.commit_rate),
                abort_ratio: med(&|m| m.abort_ratio),
                p50_ms: med(&|m| m.p50_ms),
                p90_ms: med(&|m| m.p90_ms),
                p99_ms: med(&|m| m.p99_ms),
                bound_ms: med(&|m| m.bound_ms),
                p50_wrtt: med(&|m| m.p50_wrtt),
                fast_path_ratio: med(&|m| m.fast_path_ratio),
                slow_path_ratio: med(&|m| m.slow_path_ratio),
                reexecuted_ratio: med(&|m| m.reexecuted_ratio),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str, latencies_ms: &[u64], bound: f64) -> crate::RegionResults {
        use meridian_core::txn::{AbortReason, Outcome};
        use meridian_core::CommitPath;
        let mut r = crate::RegionResults::new(name);
        for (i, ms) in latencies_ms.iter().enumerate() {
            let path = if i == 0 {
                CommitPath::Slow
            } else {
                CommitPath::Fast
            };
            let outcome = Outcome::Committed {
                results: Vec::new(),
                commit_ts: None,
                path,
            };
            r.totals.record(&outcome, ms * 1_000_000, Some(bound));
        }
        let aborted = Outcome::Aborted {
            reason: AbortReason::Conflict,
        };
        r.totals.record(&aborted, 0, None);
        r
    }

    #[test]
    fn per_region_and_all_regions_rows() {
        let run = RunOutput {
            results: crate::Results {
                regions: vec![
                    region("A", &(1..=100).collect::<Vec<_>>(), 50.0),
                    region("B", &[200; 100], 100.0),
                ],
                throttled: 0,
            },
            load_s: 10.0,
            ..RunOutput::default()
        };
        let rows = of_run(&run);
        assert_eq!(rows.len(), 3);
        let a = &rows[0];
        assert_eq!(a.throughput_tps, 10.0);
        assert!((a.p50_ms.unwrap() - 50.0).abs() < 0.1, "{a:?}");
        assert!((a.p99_ms.unwrap() - 99.0).abs() < 0.1, "{a:?}");
        assert!((a.p50_wrtt.unwrap() - 1.0).abs() < 0.01);
        assert!((a.fast_path_ratio.unwrap() - 0.99).abs() < 1e-9);
        assert!((a.abort_ratio.unwrap() - 1.0 / 101.0).abs() < 1e-9);
        let all = &rows[2];
        assert_eq!(all.region, ALL);
        assert_eq!(all.committed, 200);
        assert!((all.p90_ms.unwrap() - 200.0).abs() < 0.2, "{all:?}");
        assert_eq!(all.get("throughput_tps"), Some(20.0));
        assert_eq!(all.get("nonsense"), None);
    }

    #[test]
    fn class_rows_follow_the_region_rows() {
        let mut a = region("A", &[10, 20, 30], 5.0);
        a.classes.insert("payment".into(), a.totals.clone());
        let run = RunOutput {
            results: crate::Results {
                regions: vec![a],
                throttled: 0,
            },
            load_s: 1.0,
            ..RunOutput::default()
        };
        let rows = of_run(&run);
        let names: Vec<(&str, Option<&str>)> = rows
            .iter()
            .map(|m| (m.region.as_str(), m.class.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("A", None),
                (ALL, None),
                ("A", Some("payment")),
                (ALL, Some("payment"))
            ]
        );
        let payment = find(&rows, ALL, Some("payment")).unwrap();
        assert_eq!(payment.committed, 3);
        assert!((payment.p50_ms.unwrap() - 20.0).abs() < 0.1);
        let median = median_of(&[rows.clone(), rows]);
        assert_eq!(find(&median, "A", Some("payment")).unwrap().committed, 3);
    }

    #[test]
    fn medians_over_repeats() {
        let runs: Vec<Vec<Metrics>> = [10.0, 30.0, 20.0]
            .iter()
            .map(|&p| {
                vec![Metrics {
                    region: ALL.into(),
                    p50_ms: Some(p),
                    committed: p as u64,
                    ..Metrics::default()
                }]
            })
            .collect();
        let m = median_of(&runs);
        assert_eq!(m[0].p50_ms, Some(20.0));
        assert_eq!(m[0].committed, 20);
    }
}
