//! The runtime's load driver against live coordinators (in-process or over TCP), over the
//! sans-IO core the simulator runs too ([`LoadCore`]): the same clients (placed by
//! [`place_clients`], so a history's `process` is the same client at the same coordinator
//! under either driver), the same stepping of interactive sessions, the same results model
//! ([`Results`]: per region and per transaction class).
//!
//! With a rate, each coordinator gets Poisson arrivals at `rate / coordinators` per second
//! (the simulator's open loop, Tiga §5.1) served by `max_outstanding` clients of its own:
//! an arrival that finds all of them busy is not submitted but counted as throttled, so an
//! overloaded cluster is measured at its capacity instead of growing an unbounded backlog.
//! Without a rate the clients are closed-loop: each submits its next transaction when the
//! last one ends. A client never has two transactions open at once, as the checker expects
//! of a `process`.
//!
//! Latency histograms are HDR histograms (bounded memory whatever the run's length); the
//! history, when recorded, holds one entry per transaction.

use meridian_bench::driver::{interarrival_ns, LoadCore, Next};
use meridian_bench::Results;
use meridian_check::Entry;
use meridian_client::{ClientError, Submit};
use meridian_core::txn::Outcome;
use meridian_core::{Cluster, NodeRng, ShardId};
use meridian_workload::{place_clients, Workload};
use rand::SeedableRng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The protocol's physical bound, ms, for a transaction touching these shards.
pub type BoundFn = Arc<dyn Fn(&[ShardId]) -> f64 + Send + Sync>;

/// One coordinator the load drives.
pub struct Target {
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
    /// Total arrivals per second over all coordinators (open loop); None: closed-loop
    /// clients.
    pub rate_per_s: Option<f64>,
    /// Clients per coordinator: its cap of transactions in flight.
    pub max_outstanding: usize,
    pub record_history: bool,
    pub seed: u64,
}

/// The load core and the workload it draws from, under one lock: a step is short.
struct Driving {
    core: LoadCore,
    workload: Box<dyn Workload>,
}

struct Shared {
    driving: Mutex<Driving>,
    total: Mutex<Results>,
    interval: Mutex<Results>,
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

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Counts an open-loop arrival turned away at the cap.
    fn throttled(&self) {
        if self.start.elapsed() >= self.warmup {
            self.total.lock().expect("stats lock").throttled += 1;
        }
        self.interval.lock().expect("stats lock").throttled += 1;
    }

    fn driving(&self) -> std::sync::MutexGuard<'_, Driving> {
        self.driving.lock().expect("load core lock")
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
    pub results: Results,
    /// The workload's own invariant over the history (e.g. the bank's total).
    pub invariant: Result<(), String>,
    pub history: Vec<Entry>,
    pub elapsed: Duration,
}

impl Load {
    /// Starts the load on `cluster`, whose `coordinators[k]` is reached through
    /// `targets[k]`; it stops after `options.duration` or when `stop` is cancelled, and
    /// then waits for the transactions in flight. `Err` if the targets do not match the
    /// coordinators.
    pub fn start(
        cluster: &Cluster,
        workload: Box<dyn Workload>,
        targets: Vec<Target>,
        options: LoadOptions,
        stop: CancellationToken,
    ) -> Result<Load, String> {
        if targets.len() != cluster.coordinators.len() {
            return Err(format!(
                "{} load targets for {} coordinators",
                targets.len(),
                cluster.coordinators.len()
            ));
        }
        let per_coordinator = u32::try_from(options.max_outstanding)
            .map_err(|_| format!("{} clients per coordinator", options.max_outstanding))?;
        let clients = place_clients(cluster, per_coordinator);
        let core = LoadCore::new(cluster, clients, |i| {
            NodeRng::seed_from_u64(options.seed ^ ((i as u64) << 20))
        });
        let empty = Results::for_cluster(cluster);
        let shared = Arc::new(Shared {
            driving: Mutex::new(Driving { core, workload }),
            total: Mutex::new(empty.clone()),
            interval: Mutex::new(empty),
            history: Mutex::new(Vec::new()),
            start: Instant::now(),
            warmup: options.warmup,
            record_history: options.record_history,
        });
        let per_coordinator_rate = options
            .rate_per_s
            .map(|rate| rate.max(f64::MIN_POSITIVE) / targets.len().max(1) as f64);
        let deadline = Instant::now() + options.warmup + options.duration;
        let coordinators = targets.len();
        let mut drivers = tokio::task::JoinSet::new();
        for (k, target) in targets.into_iter().enumerate() {
            let driver = Driver {
                shared: shared.clone(),
                target: Arc::new(target),
                clients: (k..coordinators * options.max_outstanding)
                    .step_by(coordinators)
                    .map(|c| c as u32)
                    .collect(),
                rate_tps: per_coordinator_rate,
                arrivals: NodeRng::seed_from_u64(options.seed ^ 0xA771 ^ ((k as u64) << 32)),
            };
            drivers.spawn(driver.run(deadline, stop.clone()));
        }
        let measured = shared.clone();
        let done = tokio::spawn(async move {
            while drivers.join_next().await.is_some() {}
            measured.measured_elapsed()
        });
        Ok(Load { shared, done })
    }

    /// The figures since the previous call (or the start).
    pub fn interval(&self) -> Results {
        let mut interval = self.shared.interval.lock().expect("stats lock");
        let cleared = interval.cleared();
        std::mem::replace(&mut *interval, cleared)
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
        let results = self.shared.total.lock().expect("stats lock").clone();
        let mut history = std::mem::take(&mut *self.shared.history.lock().expect("history lock"));
        history.sort_by_key(|e| e.invoke_ns);
        // Entries arrive numbered in the order they ended; declared dependencies name
        // those numbers, so they follow the renumbering.
        let renumbered: std::collections::HashMap<u64, u64> = history
            .iter()
            .enumerate()
            .map(|(i, e)| (e.index, i as u64))
            .collect();
        for (i, e) in history.iter_mut().enumerate() {
            e.index = i as u64;
            for dep in &mut e.after {
                *dep = renumbered.get(dep).copied().unwrap_or(u64::MAX);
            }
        }
        let invariant = if self.shared.record_history {
            self.shared.driving().workload.check_history(&history)
        } else {
            Ok(())
        };
        LoadReport {
            results,
            invariant,
            history,
            elapsed,
        }
    }
}

/// The arrivals at one coordinator, handed to its idle clients.
struct Driver {
    shared: Arc<Shared>,
    target: Arc<Target>,
    /// The coordinator's clients (ids of the load core).
    clients: Vec<u32>,
    /// Open-loop arrivals per second at this coordinator; None: closed loop.
    rate_tps: Option<f64>,
    arrivals: NodeRng,
}

impl Driver {
    async fn run(mut self, deadline: Instant, stop: CancellationToken) {
        let (free_tx, mut free) = mpsc::channel::<u32>(self.clients.len());
        for &client in &self.clients {
            free_tx.try_send(client).expect("room for every client");
        }
        let mut next_arrival = Instant::now();
        let mut in_flight = tokio::task::JoinSet::new();
        loop {
            let client = match self.rate_tps {
                Some(rate) => {
                    let gap = interarrival_ns(&mut self.arrivals, rate);
                    next_arrival += Duration::from_nanos(gap);
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep_until(next_arrival.min(deadline)) => {}
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                    match free.try_recv() {
                        Ok(client) => client,
                        Err(_) => {
                            self.shared.throttled();
                            continue;
                        }
                    }
                }
                None => tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep_until(deadline) => break,
                    c = free.recv() => c.expect("the driver holds a sender"),
                },
            };
            if Instant::now() >= deadline {
                break;
            }
            let (shared, target, free_tx) =
                (self.shared.clone(), self.target.clone(), free_tx.clone());
            in_flight.spawn(async move {
                run_one(&shared, &target, client).await;
                let _ = free_tx.send(client).await;
            });
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
    }
}

/// Runs one transaction of `client` to its end: one request for a one-shot plan, every
/// step of a session for an interactive one.
async fn run_one(shared: &Shared, target: &Target, client: u32) {
    let mut request = {
        let mut driving = shared.driving();
        let Driving { core, workload } = &mut *driving;
        core.begin(client, workload.as_mut(), shared.now_ns())
    };
    let outcome = loop {
        let answer = match target.submit.submit(request).await {
            Ok(answer) => answer,
            Err(e) => break failed(e),
        };
        match shared.driving().core.on_answer(client, answer) {
            Ok(Next::Send(next)) => request = next,
            Ok(Next::Done(outcome)) => break outcome,
            Err(broken) => {
                break Outcome::Unknown {
                    reason: format!("unexpected answer: {broken}"),
                }
            }
        }
    };
    finish(shared, target, client, outcome);
}

/// The outcome of a request the client could not complete.
fn failed(error: ClientError) -> Outcome {
    match error {
        ClientError::Unreachable { last_error, .. } => {
            // Nothing was sent: this step (and so the commit) certainly did not run.
            tracing::debug!(error = %last_error, "coordinator unreachable");
            Outcome::Aborted {
                reason: meridian_core::AbortReason::Failure,
            }
        }
        e => Outcome::Unknown {
            reason: e.to_string(),
        },
    }
}

/// Counts `client`'s finished transaction and writes its history entry.
fn finish(shared: &Shared, target: &Target, client: u32, outcome: Outcome) {
    let complete_ns = shared.now_ns();
    let mut driving = shared.driving();
    let region = driving.core.region(client);
    let Some(flight) = driving.core.finish(client, &outcome) else {
        return;
    };
    let bound_ms = outcome
        .is_committed()
        .then(|| (target.bound_ms)(&flight.shards));
    let done = flight.finished(region, &outcome, complete_ns, bound_ms);
    let measured = flight.invoke_ns >= shared.warmup.as_nanos() as u64;
    if measured {
        shared.total.lock().expect("stats lock").record(&done);
    }
    shared.interval.lock().expect("stats lock").record(&done);
    if shared.record_history {
        let entry =
            flight.history_entry(&*driving.workload, u64::from(client), &outcome, complete_ns);
        drop(driving);
        shared.history.lock().expect("history lock").push(entry);
    }
}
