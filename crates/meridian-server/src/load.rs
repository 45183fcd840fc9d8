//! An open-loop load generator against live coordinators (in-process or over TCP).
//!
//! Each coordinator gets transactions at `rate / coordinators` per second (or as fast as
//! the cap allows when no rate is given), with at most `max_outstanding` in flight: when
//! the cap is reached, arrivals wait, so an overloaded cluster is measured at its capacity
//! instead of growing an unbounded backlog. Each in-flight slot is a history `process`, so a
//! process never has two transactions open at once, as the checker expects.
//!
//! Latency histograms are HDR histograms (bounded memory whatever the run's length); the
//! history, when recorded, holds one entry per transaction.

use hdrhistogram::Histogram;
use meridian_check::{Entry, EntryType};
use meridian_client::{ClientError, Submit};
use meridian_core::txn::{ClientRequest, ClientResponse, Outcome};
use meridian_core::{ClientId, NodeRng, ShardId};
use meridian_workload::{TxnPlan, Workload};
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The protocol's physical bound, ms, for a transaction touching these shards.
pub type BoundFn = Arc<dyn Fn(&[ShardId]) -> f64 + Send + Sync>;

/// One coordinator the load drives.
pub struct Target {
    pub region: String,
    pub submit: Arc<dyn Submit>,
    pub bound_ms: BoundFn,
}

/// How the load runs.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// How long the load runs after the warm-up.
    pub duration: Duration,
    /// A first stretch whose transactions (by start time) count only in the live
    /// intervals and the history, not in the totals: a steady-state measurement leaves out
    /// the start, when stores, logs and queues are still filling and nothing is old enough
    /// to be collected yet.
    pub warmup: Duration,
    /// Total arrivals per second over all coordinators; None: as fast as the cap allows.
    pub rate_per_s: Option<f64>,
    pub max_outstanding: usize,
    pub record_history: bool,
    pub seed: u64,
}

/// Latency and outcomes of one coordinator region.
#[derive(Clone, Debug)]
pub struct RegionLoad {
    pub region: String,
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Committed latencies, µs.
    pub latency_us: Histogram<u64>,
    /// Bound of each committed transaction, µs → count.
    pub bounds_us: BTreeMap<u64, u64>,
    /// Commit paths (fast, slow, …) → count.
    pub paths: BTreeMap<&'static str, u64>,
}

impl RegionLoad {
    fn new(region: &str) -> RegionLoad {
        RegionLoad {
            region: region.to_string(),
            committed: 0,
            aborted: 0,
            unknown: 0,
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
            bounds_us: BTreeMap::new(),
            paths: BTreeMap::new(),
        }
    }

    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        (self.committed > 0).then(|| self.latency_us.value_at_percentile(p) as f64 / 1e3)
    }

    /// The median bound of the committed transactions, ms.
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

    fn clear(&mut self) {
        *self = RegionLoad::new(&self.region);
    }
}

/// Totals and per-region figures, since the start or since the last interval.
#[derive(Clone, Debug, Default)]
pub struct LoadStats {
    pub regions: Vec<RegionLoad>,
    pub abort_reasons: BTreeMap<String, u64>,
}

impl LoadStats {
    pub fn committed(&self) -> u64 {
        self.regions.iter().map(|r| r.committed).sum()
    }
    pub fn finished(&self) -> u64 {
        self.regions
            .iter()
            .map(|r| r.committed + r.aborted + r.unknown)
            .sum()
    }
}

struct Shared {
    workload: Mutex<Box<dyn Workload>>,
    total: Mutex<LoadStats>,
    interval: Mutex<LoadStats>,
    history: Mutex<Vec<Entry>>,
    start: Instant,
    /// Transactions started before this much time has passed are not in `total`.
    warmup: Duration,
    record_history: bool,
}

impl Shared {
    /// The time since the warm-up ended.
    fn measured_elapsed(&self) -> Duration {
        self.start.elapsed().saturating_sub(self.warmup)
    }
}

/// A running load; [`Load::interval`] takes the figures since the last call.
pub struct Load {
    shared: Arc<Shared>,
    /// Ends when every driver has; yields the load's duration (end of the warm-up to the
    /// last answer).
    done: tokio::task::JoinHandle<Duration>,
}

/// What a finished load measured.
pub struct LoadReport {
    pub stats: LoadStats,
    /// The workload's own invariant over the history (e.g. the bank's total).
    pub invariant: Result<(), String>,
    pub history: Vec<Entry>,
    pub elapsed: Duration,
}

impl Load {
    /// Starts the load; it stops after `options.duration` or when `stop` is cancelled, and
    /// then waits for the transactions in flight.
    pub fn start(
        workload: Box<dyn Workload>,
        targets: Vec<Target>,
        options: LoadOptions,
        stop: CancellationToken,
    ) -> Load {
        let mut regions: Vec<String> = targets.iter().map(|t| t.region.clone()).collect();
        regions.dedup();
        let mut unique = Vec::new();
        for r in regions {
            if !unique.contains(&r) {
                unique.push(r);
            }
        }
        let empty = LoadStats {
            regions: unique.iter().map(|r| RegionLoad::new(r)).collect(),
            abort_reasons: BTreeMap::new(),
        };
        let shared = Arc::new(Shared {
            workload: Mutex::new(workload),
            total: Mutex::new(empty.clone()),
            interval: Mutex::new(empty),
            history: Mutex::new(Vec::new()),
            start: Instant::now(),
            warmup: options.warmup,
            record_history: options.record_history,
        });
        let per_target_interval = options.rate_per_s.map(|rate| {
            Duration::from_secs_f64(targets.len() as f64 / rate.max(f64::MIN_POSITIVE))
        });
        let deadline = Instant::now() + options.warmup + options.duration;
        let mut drivers = tokio::task::JoinSet::new();
        for (index, target) in targets.into_iter().enumerate() {
            let region = unique
                .iter()
                .position(|r| *r == target.region)
                .expect("region listed");
            let driver = Driver {
                shared: shared.clone(),
                target: Arc::new(target),
                region,
                first_process: (index * options.max_outstanding) as u32,
                slots: options.max_outstanding,
                interval: per_target_interval,
                rng: NodeRng::seed_from_u64(options.seed ^ ((index as u64) << 20)),
            };
            drivers.spawn(driver.run(deadline, stop.clone()));
        }
        let measured = shared.clone();
        let done = tokio::spawn(async move {
            while drivers.join_next().await.is_some() {}
            measured.measured_elapsed()
        });
        Load { shared, done }
    }

    /// The figures since the previous call (or the start).
    pub fn interval(&self) -> LoadStats {
        let mut interval = self.shared.interval.lock().expect("stats lock");
        let taken = interval.clone();
        interval.regions.iter_mut().for_each(RegionLoad::clear);
        interval.abort_reasons.clear();
        taken
    }

    pub fn is_finished(&self) -> bool {
        self.done.is_finished()
    }

    /// Waits for the end and returns the totals and the history.
    pub async fn finish(self) -> LoadReport {
        let elapsed = self
            .done
            .await
            .unwrap_or_else(|_| self.shared.measured_elapsed());
        let stats = self.shared.total.lock().expect("stats lock").clone();
        let mut history = std::mem::take(&mut *self.shared.history.lock().expect("history lock"));
        history.sort_by_key(|e| e.invoke_ns);
        for (i, e) in history.iter_mut().enumerate() {
            e.index = i as u64;
        }
        let invariant = if self.shared.record_history {
            let workload = self.shared.workload.lock().expect("workload lock");
            workload.check_history(&history)
        } else {
            Ok(())
        };
        LoadReport {
            stats,
            invariant,
            history,
            elapsed,
        }
    }
}

struct Driver {
    shared: Arc<Shared>,
    target: Arc<Target>,
    region: usize,
    first_process: u32,
    slots: usize,
    interval: Option<Duration>,
    rng: NodeRng,
}

impl Driver {
    async fn run(mut self, deadline: Instant, stop: CancellationToken) {
        let (free_tx, mut free) = mpsc::channel::<u32>(self.slots);
        for slot in 0..self.slots as u32 {
            free_tx
                .try_send(self.first_process + slot)
                .expect("room for every slot");
        }
        let mut next_arrival = Instant::now();
        let mut in_flight = tokio::task::JoinSet::new();
        loop {
            if let Some(interval) = self.interval {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep_until(next_arrival) => {}
                }
                next_arrival += interval;
            }
            let process = tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep_until(deadline) => break,
                p = free.recv() => p.expect("the driver holds a sender"),
            };
            if Instant::now() >= deadline {
                break;
            }
            let plan = {
                let mut workload = self.shared.workload.lock().expect("workload lock");
                workload.next(ClientId(process), &mut self.rng)
            };
            let (shared, target, free_tx) =
                (self.shared.clone(), self.target.clone(), free_tx.clone());
            let region = self.region;
            in_flight.spawn(async move {
                run_one(&shared, &target, region, process, plan).await;
                let _ = free_tx.send(process).await;
            });
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
    }
}

async fn run_one(shared: &Shared, target: &Target, region: usize, process: u32, plan: TxnPlan) {
    let invoke = shared.start.elapsed();
    // The plan is kept (a copy of the transaction) only for the history.
    let kept = shared.record_history.then(|| plan.clone());
    let (request, shards) = match plan {
        TxnPlan::OneShot(txn) => {
            let shards = txn.shards();
            (ClientRequest::OneShot(txn), shards)
        }
        TxnPlan::Interactive(_) => {
            tracing::error!("the runtime load generator runs one-shot plans only; use the workload's one-shot mode");
            return;
        }
    };
    let outcome = match target.submit.submit(request).await {
        Ok(ClientResponse::Outcome(outcome)) => outcome,
        Ok(other) => Outcome::Unknown {
            reason: format!("unexpected answer {other:?}"),
        },
        Err(ClientError::Unreachable { last_error, .. }) => {
            // Nothing was sent: the transaction certainly did not run.
            tracing::debug!(error = %last_error, "coordinator unreachable");
            Outcome::Aborted {
                reason: meridian_core::AbortReason::Failure,
            }
        }
        Err(e) => Outcome::Unknown {
            reason: e.to_string(),
        },
    };
    let complete = shared.start.elapsed();
    let latency = complete - invoke;
    let bound_ms = outcome.is_committed().then(|| (target.bound_ms)(&shards));
    let measured = invoke >= shared.warmup;
    for (stats, counts) in [(&shared.total, measured), (&shared.interval, true)] {
        if counts {
            let mut stats = stats.lock().expect("stats lock");
            record(&mut stats, region, &outcome, latency, bound_ms);
        }
    }
    if let Some(plan) = kept {
        let kind = match &outcome {
            Outcome::Committed { .. } => EntryType::Ok,
            Outcome::Aborted { .. } => EntryType::Fail,
            Outcome::Unknown { .. } => EntryType::Info,
        };
        let ops = shared
            .workload
            .lock()
            .expect("workload lock")
            .history_ops(&plan, &outcome, &[]);
        shared.history.lock().expect("history lock").push(Entry {
            index: 0,
            process: u64::from(process),
            kind,
            invoke_ns: invoke.as_nanos() as u64,
            complete_ns: complete.as_nanos() as u64,
            ops,
        });
    }
}

fn record(
    stats: &mut LoadStats,
    region: usize,
    outcome: &Outcome,
    latency: Duration,
    bound_ms: Option<f64>,
) {
    let r = &mut stats.regions[region];
    match outcome {
        Outcome::Committed { path, .. } => {
            r.committed += 1;
            *r.paths.entry(meridian_sim::path_name(*path)).or_default() += 1;
            let us = (latency.as_micros() as u64).max(1);
            let _ = r.latency_us.record(us.min(r.latency_us.high()));
            let bound = (bound_ms.unwrap_or(0.0) * 1e3).round() as u64;
            *r.bounds_us.entry(bound).or_default() += 1;
        }
        Outcome::Aborted { reason } => {
            r.aborted += 1;
            count_reason(&mut stats.abort_reasons, &reason.to_string());
        }
        Outcome::Unknown { reason } => {
            r.unknown += 1;
            count_reason(&mut stats.abort_reasons, &format!("unknown: {reason}"));
        }
    }
}

/// Distinct reasons kept at most; the rest are counted under one key.
const MAX_REASONS: usize = 32;

/// Counts `reason` with the words that carry numbers (transaction ids, durations) masked,
/// so a long run's table stays bounded however many transactions fail.
fn count_reason(reasons: &mut BTreeMap<String, u64>, reason: &str) {
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
    *reasons.entry(key).or_default() += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_stay_bounded_whatever_their_ids() {
        let mut reasons = BTreeMap::new();
        for i in 0..1000 {
            count_reason(
                &mut reasons,
                &format!("unknown: T9.{i} not committed in time"),
            );
            count_reason(
                &mut reasons,
                &format!("distinct {}", char::from(b'a' + (i % 26) as u8)),
            );
            count_reason(
                &mut reasons,
                &format!("more {}", char::from(b'A' + (i % 26) as u8)),
            );
        }
        assert_eq!(reasons["unknown: # not committed in time"], 1000);
        assert!(reasons.len() <= MAX_REASONS);
        assert!(reasons["other"] > 0);
    }
}
