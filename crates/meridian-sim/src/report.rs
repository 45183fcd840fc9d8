//! What a simulated run measured: outcome counts, per-coordinator-region and per-class
//! latency against the protocol's physical bound (the results model of `meridian-bench`,
//! which the runtime feeds too), event counts and the trace hash that proves determinism.

use meridian_bench::RegionResults;
use meridian_check::Entry;
use meridian_core::time::{NS_PER_MS, NS_PER_S};
use serde::Serialize;
use std::collections::BTreeMap;

/// The `p`-th percentile (0–100) of ascending latencies in ns, as ms, nearest-rank.
fn percentile_ms(sorted_ns: &[u64], p: f64) -> Option<f64> {
    if sorted_ns.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted_ns.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted_ns.len()) - 1;
    Some(sorted_ns[index] as f64 / NS_PER_MS as f64)
}

/// Outcomes over virtual time, for fault experiments (a leader crash, a partition): the
/// run cut into buckets of equal length, each transaction counted in the bucket in which
/// it *finished* (its commit, abort or unknown answer reached the client). A transaction
/// stalled by a failure therefore shows up, with its long latency, in the bucket where it
/// finally commits; a bucket with nothing finishing has zero throughput.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    /// Bucket length, ms (0: no timeline was kept).
    pub bucket_ms: f64,
    /// From time 0 to the end of the drain, every bucket present (empty ones too).
    pub buckets: Vec<TimeBucket>,
}

/// What finished during one bucket of a [`Timeline`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TimeBucket {
    /// Virtual time at the bucket's start, ms.
    pub start_ms: f64,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Committed transactions per second of this bucket.
    pub throughput_tps: f64,
    /// Commit latency of the transactions committed in this bucket, ms.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Accumulates a [`Timeline`] during a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct TimelineBuilder {
    bucket_ns: u64,
    /// The end of the run: what finishes at it (the run's end answers in-flight
    /// transactions `unknown`) counts in the last bucket.
    end_ns: u64,
    /// Per bucket: (committed latencies in ns, aborted, unknown).
    buckets: Vec<(Vec<u64>, u64, u64)>,
}

/// How a transaction ended, for the timeline.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Finished {
    Committed { latency_ns: u64 },
    Aborted,
    Unknown,
}

impl TimelineBuilder {
    /// A builder with buckets of `bucket_ns` (0: keep nothing) for a run ending at `end_ns`.
    pub(crate) fn new(bucket_ns: u64, end_ns: u64) -> Self {
        TimelineBuilder {
            bucket_ns,
            end_ns,
            buckets: Vec::new(),
        }
    }

    fn bucket(&mut self, at_ns: u64) -> &mut (Vec<u64>, u64, u64) {
        let index = (at_ns.min(self.end_ns.saturating_sub(1)) / self.bucket_ns) as usize;
        if self.buckets.len() <= index {
            self.buckets.resize_with(index + 1, Default::default);
        }
        &mut self.buckets[index]
    }

    pub(crate) fn record(&mut self, at_ns: u64, finished: Finished) {
        if self.bucket_ns == 0 {
            return;
        }
        let bucket = self.bucket(at_ns);
        match finished {
            Finished::Committed { latency_ns } => bucket.0.push(latency_ns),
            Finished::Aborted => bucket.1 += 1,
            Finished::Unknown => bucket.2 += 1,
        }
    }

    /// The timeline: every bucket that starts before the end of the run.
    pub(crate) fn finish(mut self) -> Timeline {
        if self.bucket_ns == 0 {
            return Timeline::default();
        }
        let count = self.end_ns.div_ceil(self.bucket_ns) as usize;
        if self.buckets.len() < count {
            self.buckets.resize_with(count, Default::default);
        }
        let bucket_s = self.bucket_ns as f64 / NS_PER_S as f64;
        let buckets = self
            .buckets
            .into_iter()
            .enumerate()
            .map(|(i, (mut latencies, aborted, unknown))| {
                latencies.sort_unstable();
                TimeBucket {
                    start_ms: (i as u64 * self.bucket_ns) as f64 / NS_PER_MS as f64,
                    committed: latencies.len() as u64,
                    aborted,
                    unknown,
                    throughput_tps: latencies.len() as f64 / bucket_s,
                    p50_ms: percentile_ms(&latencies, 50.0),
                    p99_ms: percentile_ms(&latencies, 99.0),
                }
            })
            .collect();
        Timeline {
            bucket_ms: self.bucket_ns as f64 / NS_PER_MS as f64,
            buckets,
        }
    }
}

/// How far the clocks were from true time (Tiga Table 3's last row, Aurogon Figs. 12 and
/// 13): every machine's |local − true| sampled every [`CLOCK_SAMPLE_NS`] of virtual time
/// from 0 to the end of the drain, down machines included (their clocks run on).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClockErrorReport {
    /// Machine readings sampled.
    pub samples: u64,
    pub mean_ms: f64,
    /// Nearest-rank 99th percentile of |local − true| over all samples.
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The largest spread (fastest − slowest clock) at one sampling instant: what orders
    /// timestamps wrongly.
    pub spread_max_ms: f64,
    /// Per bucket of the run's timeline (same length): the largest |local − true|, its
    /// percentiles and the largest spread sampled in it, ms.
    pub buckets: Vec<ClockErrorBucket>,
}

/// One timeline bucket of a [`ClockErrorReport`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClockErrorBucket {
    pub start_ms: f64,
    pub max_ms: f64,
    pub spread_ms: f64,
    /// Nearest-rank percentiles of every machine's |local − true| sampled in the bucket
    /// (K2 Fig. 15 plots ε's 90th, 99th and 99.9th over time).
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

/// Virtual time between two samples of every clock.
pub const CLOCK_SAMPLE_NS: u64 = 10 * NS_PER_MS;

/// Accumulates a [`ClockErrorReport`].
#[derive(Clone, Debug, Default)]
pub(crate) struct ClockErrorSampler {
    pub(crate) next_ns: u64,
    abs_ns: Vec<f64>,
    spread_max_ns: f64,
    bucket_ns: u64,
    /// Per timeline bucket: (max |error|, max spread), ns.
    buckets: Vec<(f64, f64)>,
    /// Per timeline bucket: every |error| sampled in it, ns (for its percentiles).
    bucket_abs_ns: Vec<Vec<f64>>,
}

impl ClockErrorSampler {
    pub(crate) fn new(bucket_ns: u64) -> Self {
        ClockErrorSampler {
            bucket_ns,
            ..ClockErrorSampler::default()
        }
    }

    /// One sampling instant: every machine's error (local − true), ns.
    pub(crate) fn record(&mut self, errors_ns: &[f64]) {
        let at_ns = self.next_ns;
        self.next_ns += CLOCK_SAMPLE_NS;
        if errors_ns.is_empty() {
            return;
        }
        let (low, high) = errors_ns
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &e| (l.min(e), h.max(e)));
        let spread = high - low;
        let worst = errors_ns.iter().fold(0.0f64, |m, e| m.max(e.abs()));
        self.abs_ns.extend(errors_ns.iter().map(|e| e.abs()));
        self.spread_max_ns = self.spread_max_ns.max(spread);
        if let Some(index) = at_ns.checked_div(self.bucket_ns) {
            let index = index as usize;
            if self.buckets.len() <= index {
                self.buckets.resize(index + 1, (0.0, 0.0));
                self.bucket_abs_ns.resize(index + 1, Vec::new());
            }
            let bucket = &mut self.buckets[index];
            *bucket = (bucket.0.max(worst), bucket.1.max(spread));
            self.bucket_abs_ns[index].extend(errors_ns.iter().map(|e| e.abs()));
        }
    }

    pub(crate) fn finish(mut self) -> ClockErrorReport {
        let ms = |ns: f64| ns / NS_PER_MS as f64;
        self.abs_ns.sort_unstable_by(f64::total_cmp);
        let n = self.abs_ns.len();
        for samples in &mut self.bucket_abs_ns {
            samples.sort_unstable_by(f64::total_cmp);
        }
        let bucket_abs_ns = std::mem::take(&mut self.bucket_abs_ns);
        ClockErrorReport {
            samples: n as u64,
            mean_ms: ms(self.abs_ns.iter().sum::<f64>() / n.max(1) as f64),
            p99_ms: ms(nearest_rank(&self.abs_ns, 0.99)),
            max_ms: ms(self.abs_ns.last().copied().unwrap_or(0.0)),
            spread_max_ms: ms(self.spread_max_ns),
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(i, &(worst, spread))| {
                    let sorted = &bucket_abs_ns[i];
                    ClockErrorBucket {
                        start_ms: ms((i as u64 * self.bucket_ns) as f64),
                        max_ms: ms(worst),
                        spread_ms: ms(spread),
                        p90_ms: ms(nearest_rank(sorted, 0.90)),
                        p99_ms: ms(nearest_rank(sorted, 0.99)),
                        p999_ms: ms(nearest_rank(sorted, 0.999)),
                    }
                })
                .collect(),
        }
    }
}

/// The nearest-rank `q` quantile of `sorted` (ascending); 0 when empty.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1]
}

/// Everything a run measured.
#[derive(Clone, Debug)]
pub struct SimReport {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    pub abort_reasons: BTreeMap<String, u64>,
    /// One entry per region that hosts coordinators, in the order of the cluster's
    /// coordinators; each splits its figures by transaction class.
    pub regions: Vec<RegionResults>,
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
    /// The faults the run applied, by kind: `crash replica`, `crash coordinator`,
    /// `crash service NAME` (a crash counts each role of the machine it took down),
    /// `partition`, `loss`, `duplication`, `clock step`.
    pub faults_applied: BTreeMap<String, u64>,
    /// At the end of the run (before the audit), each live replica's belief of its shard's
    /// leader (`Node::shard_leader`), by shard: `shard1: n4 n4 -` (one entry per replica,
    /// `-` for none or down). Shows a shard that never settled.
    pub leaders_at_end: BTreeMap<String, String>,
    /// Open-loop arrivals not submitted because the coordinator's cap was reached.
    pub throttled: u64,
    /// Keys the end-of-run audit read (0: the workload has no final-state conditions).
    pub audited_keys: u64,
    /// Outcomes per bucket of virtual time ([`SimOptions::timeline_bucket_ns`](crate::SimOptions)).
    pub timeline: Timeline,
    /// The clocks' measured error over the run.
    pub clock_error: ClockErrorReport,
}

impl SimReport {
    /// Every region taken together (the `all` row), class breakdown included.
    pub fn all_regions(&self) -> RegionResults {
        meridian_bench::results::all_regions(&self.regions)
    }
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
            faults_applied: BTreeMap::new(),
            leaders_at_end: BTreeMap::new(),
            audited_keys: 0,
            throttled: 0,
            timeline: Timeline::default(),
            clock_error: ClockErrorReport::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_counts_each_outcome_in_the_bucket_where_it_finished() {
        let mut b = TimelineBuilder::new(100 * NS_PER_MS, 450 * NS_PER_MS);
        for latency_ms in [10, 20, 30, 40] {
            b.record(
                50 * NS_PER_MS,
                Finished::Committed {
                    latency_ns: latency_ms * NS_PER_MS,
                },
            );
        }
        b.record(250 * NS_PER_MS, Finished::Aborted);
        // The run's end answers in-flight transactions: they land in the last bucket.
        b.record(450 * NS_PER_MS, Finished::Unknown);
        let t = b.finish();
        assert_eq!(t.bucket_ms, 100.0);
        let starts: Vec<f64> = t.buckets.iter().map(|b| b.start_ms).collect();
        assert_eq!(starts, [0.0, 100.0, 200.0, 300.0, 400.0]);
        let first = &t.buckets[0];
        assert_eq!(first.committed, 4);
        assert_eq!(first.throughput_tps, 40.0);
        assert_eq!((first.p50_ms, first.p99_ms), (Some(20.0), Some(40.0)));
        assert_eq!(
            t.buckets[1],
            TimeBucket {
                start_ms: 100.0,
                ..TimeBucket::default()
            }
        );
        assert_eq!(t.buckets[2].aborted, 1);
        assert_eq!(t.buckets[4].unknown, 1);
        assert!(TimelineBuilder::new(0, NS_PER_S)
            .finish()
            .buckets
            .is_empty());
    }

    #[test]
    fn clock_error_reports_mean_p99_max_spread_and_per_bucket_worst() {
        // Buckets of 20 ms: instants 0 and 10 ms fall in the first, 20 ms in the second.
        let mut sampler = ClockErrorSampler::new(20 * NS_PER_MS);
        sampler.record(&[100.0, -300.0]);
        sampler.record(&[50.0, 50.0]);
        sampler.record(&[-1000.0, 200.0]);
        let r = sampler.finish();
        let ms = |ns: f64| ns / NS_PER_MS as f64;
        assert_eq!(r.samples, 6);
        assert!((r.mean_ms - ms(1700.0 / 6.0)).abs() < 1e-12);
        assert_eq!((r.p99_ms, r.max_ms), (ms(1000.0), ms(1000.0)));
        assert_eq!(r.spread_max_ms, ms(1200.0));
        assert_eq!(r.buckets.len(), 2);
        assert_eq!(
            (r.buckets[0].max_ms, r.buckets[0].spread_ms),
            (ms(300.0), ms(400.0))
        );
        assert_eq!(r.buckets[1].start_ms, 20.0);
        // Bucket 0 holds |errors| 50, 50, 100, 300: p90 = p99 = p99.9 = 300 (4 samples).
        assert_eq!(
            (r.buckets[0].p90_ms, r.buckets[0].p999_ms),
            (ms(300.0), ms(300.0))
        );
        assert_eq!(r.buckets[1].p90_ms, ms(1000.0));
    }

    #[test]
    fn clock_error_bucket_percentiles_rank_the_bucket_samples() {
        let mut sampler = ClockErrorSampler::new(NS_PER_MS * 10_000);
        // 1000 instants 10 ms apart × 1 machine: |errors| 1..=1000 ns, all in one 10 s bucket.
        for e in 1..=1000 {
            sampler.record(&[-(e as f64)]);
        }
        let b = &sampler.finish().buckets[0];
        let ms = |ns: f64| ns / NS_PER_MS as f64;
        assert_eq!(
            (b.p90_ms, b.p99_ms, b.p999_ms),
            (ms(900.0), ms(990.0), ms(999.0))
        );
    }
}
