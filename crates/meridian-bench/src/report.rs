//! How `meridian sim` and `meridian bench` print a run's [`Results`](crate::Results): one JSON shape and
//! one table, a row per region and under it a row per transaction class.

use crate::metrics::{of_stats, Metrics, ALL};
use crate::results::{RegionResults, Stats};
use serde::Serialize;
use std::collections::BTreeMap;

/// The figures of one group of transactions: the metrics of DESIGN §10 and the commit
/// paths they are computed from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsJson {
    #[serde(flatten)]
    pub metrics: Metrics,
    pub paths: BTreeMap<String, u64>,
}

/// One region: its totals, then the same per class label.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RegionJson {
    #[serde(flatten)]
    pub totals: StatsJson,
    pub classes: BTreeMap<String, StatsJson>,
}

/// The figures of `s`, a group of `region`'s transactions, over `load_s` seconds of load.
pub fn stats_json(region: &str, s: &Stats, load_s: f64) -> StatsJson {
    StatsJson {
        metrics: of_stats(region, s, load_s),
        paths: s.paths.clone(),
    }
}

/// The figures of one region over `load_s` seconds of load, classes included.
pub fn region_json(r: &RegionResults, load_s: f64) -> RegionJson {
    RegionJson {
        totals: stats_json(&r.region, &r.totals, load_s),
        classes: r
            .classes
            .iter()
            .map(|(c, s)| (c.clone(), stats_json(&r.region, s, load_s)))
            .collect(),
    }
}

/// Every region.
pub fn regions_json(regions: &[RegionResults], load_s: f64) -> Vec<RegionJson> {
    regions.iter().map(|r| region_json(r, load_s)).collect()
}

/// All regions together (the `all` row).
pub fn all_json(regions: &[RegionResults], load_s: f64) -> RegionJson {
    region_json(&crate::results::all_regions(regions), load_s)
}

/// Milliseconds with a tenth's precision, or three decimals (microseconds) below 1 ms so
/// datacenter and RDMA topologies do not print as 0.0.
fn ms(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| match x {
        x if x < 1.0 => format!("{x:.3}"),
        x => format!("{x:.1}"),
    })
}

fn row(region: &str, class: &str, s: &StatsJson) -> String {
    let s = &s.metrics;
    format!(
        "{:<8} {:<14} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6}",
        region,
        class,
        s.committed,
        s.aborted,
        s.unknown,
        ms(s.p50_ms),
        ms(s.p90_ms),
        ms(s.p99_ms),
        ms(s.bound_ms),
        s.p50_wrtt.map_or("-".into(), |x| format!("{x:.3}")),
        s.fast_path_ratio
            .map_or("-".into(), |x| format!("{:.0}%", x * 100.0)),
    )
}

/// The table: per region its totals (class `all`), its classes, and its commit paths; the
/// all-regions rows (`all`) last when there is more than one region.
pub fn table(regions: &[RegionJson], all: &RegionJson) -> String {
    let mut out = format!(
        "{:<8} {:<14} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6}\n",
        "region",
        "class",
        "committed",
        "aborted",
        "unknown",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "bound ms",
        "p50/WRTT",
        "fast"
    );
    let rows = regions.iter().chain((regions.len() > 1).then_some(all));
    for r in rows {
        let region = &r.totals.metrics.region;
        out.push_str(&row(region, ALL, &r.totals));
        out.push('\n');
        for (class, s) in &r.classes {
            out.push_str(&row("", class, s));
            out.push('\n');
        }
        let paths: Vec<String> = r
            .totals
            .paths
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        if !paths.is_empty() {
            out.push_str(&format!("{:<8} paths: {}\n", "", paths.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_millisecond_latencies_print_in_microseconds() {
        assert_eq!(ms(Some(0.0123)), "0.012");
        assert_eq!(ms(Some(126.34)), "126.3");
        assert_eq!(ms(None), "-");
    }
    use crate::results::Finished;
    use meridian_core::txn::Outcome;
    use meridian_core::CommitPath;
    use meridian_workload::{Planned, TxnPlan};

    #[test]
    fn the_table_and_json_break_each_region_down_by_class() {
        let mut results = crate::Results {
            regions: vec![RegionResults::new("A"), RegionResults::new("B")],
            throttled: 0,
        };
        let read = Planned::from(TxnPlan::Interactive(vec![
            meridian_workload::InteractiveOp::Get("k".into()),
        ]))
        .class("order-status");
        let ok = Outcome::Committed {
            results: Vec::new(),
            commit_ts: None,
            path: CommitPath::Fast,
        };
        for region in [0, 1] {
            results.record(&Finished {
                region,
                classes: &read.classes,
                outcome: &ok,
                latency_ns: 7_000_000,
                bound_ms: Some(7.0),
            });
        }
        let rows = regions_json(&results.regions, 2.0);
        let all = all_json(&results.regions, 2.0);
        assert_eq!(rows.len(), 2);
        assert_eq!(all.totals.metrics.region, ALL);
        let all_status = &all.classes["order-status"].metrics;
        assert_eq!((all_status.committed, all_status.throughput_tps), (2, 1.0));
        let read_only = &rows[0].classes["read-only"].metrics;
        assert!((read_only.p50_wrtt.unwrap() - 1.0).abs() < 0.01);
        let text = table(&rows, &all);
        assert!(text.contains("order-status"), "{text}");
        assert_eq!(text.matches("order-status").count(), 3, "{text}");
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["committed"], 1);
        assert_eq!(json["classes"]["order-status"]["committed"], 1);
    }
}
