//! Clock-SI's analytical model (§IV) as code: the delay probability and duration of a
//! transaction behind pending commits (§IV-B) and behind clock skew (§IV-C), and the abort
//! probability of an update transaction with a Δ-old snapshot (§IV-D).
//!
//! Pure functions of [`Params`], in the paper's vocabulary. The formulas are the paper's,
//! with two things it leaves implicit made explicit:
//! * The committing window of §IV-B is `CW = S + RRD` (every update transaction is assumed
//!   to update several partitions), and a Δ-old snapshot shortens it to `max(CW − Δ, 0)`
//!   ("if Δ > CW, CW − Δ effectively becomes zero").
//! * The formulas estimate an expected number of conflicts; read as a probability they are
//!   capped at 1.
//!
//! `examples/clock_si_model.rs` runs the simulator over database size and Δ and prints
//! these curves beside the measured ones (Figs. 9–12).

use meridian_core::node::RunSummary;
use meridian_core::ShardId;
use std::collections::BTreeMap;

/// The model's inputs (§IV-A). Times in ms, rates per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// `DBSize`: items in the store.
    pub db_size: f64,
    /// `R`: items a read transaction reads.
    pub reads: f64,
    /// `W`: items an update transaction updates.
    pub writes: f64,
    /// `TPS_u`: update transactions processed per second.
    pub tps_u: f64,
    /// `L_r`: how long a read transaction takes.
    pub read_txn_ms: f64,
    /// `L_u`: how long an update transaction takes.
    pub update_txn_ms: f64,
    /// `RRD`: the request-reply delay (a round trip plus transfer and processing).
    pub rrd_ms: f64,
    /// `S`: the time to commit an update transaction to stable storage synchronously.
    pub sync_commit_ms: f64,
    /// `Δ`: the snapshot age.
    pub delta_ms: f64,
}

impl Params {
    /// `CW = S + RRD`: the committing window of a distributed update transaction (§IV-B).
    pub fn committing_window_ms(&self) -> f64 {
        self.sync_commit_ms + self.rrd_ms
    }

    /// `CW − Δ`, at least 0: the part of the window a Δ-old snapshot still runs into.
    fn open_window_ms(&self) -> f64 {
        (self.committing_window_ms() - self.delta_ms).max(0.0)
    }

    /// `TPS_u` per ms.
    fn tps_u_per_ms(&self) -> f64 {
        self.tps_u / 1000.0
    }

    /// §IV-B: the probability that a read transaction is delayed by a pending commit.
    /// Short reads (`CW − Δ ≥ L_r`): `(CW − Δ)·TPS_u·W·R / DBSize`; long reads: only the
    /// first `R·(CW − Δ)/L_r` reads can be delayed, `(CW − Δ)²·TPS_u·W·R / (DBSize·L_r)`.
    pub fn pending_commit_delay_probability(&self) -> f64 {
        let window = self.open_window_ms();
        let per_read = window * self.tps_u_per_ms() * self.writes / self.db_size;
        let reads_at_risk = if window >= self.read_txn_ms {
            self.reads
        } else {
            self.reads * window / self.read_txn_ms
        };
        (per_read * reads_at_risk).min(1.0)
    }

    /// §IV-B: the expected delay of a delayed read transaction, `0.5·(CW − Δ)` ms.
    pub fn pending_commit_delay_ms(&self) -> f64 {
        0.5 * self.open_window_ms()
    }

    /// §IV-C: the probability that a request to a remote partition waits for its clock,
    /// `P(SK > RRD/2 + Δ) = 1 − Φ((RRD/2 + Δ − μ)/δ)` for a skew `SK ~ N(μ, δ²)` (ms).
    pub fn skew_delay_probability(&self, skew_mean_ms: f64, skew_sd_ms: f64) -> f64 {
        let alpha = (self.skew_threshold_ms() - skew_mean_ms) / skew_sd_ms;
        1.0 - normal_cdf(alpha)
    }

    /// §IV-C: the expected wait of a request that does wait for the clock: the mean of the
    /// skew beyond the threshold `a = RRD/2 + Δ`, minus `a` — the paper's ratio of
    /// integrals, in closed form `μ + δ·φ(α)/(1 − Φ(α)) − a` with `α = (a − μ)/δ`.
    pub fn skew_delay_ms(&self, skew_mean_ms: f64, skew_sd_ms: f64) -> f64 {
        let a = self.skew_threshold_ms();
        let alpha = (a - skew_mean_ms) / skew_sd_ms;
        let tail = 1.0 - normal_cdf(alpha);
        if tail <= 0.0 {
            return 0.0;
        }
        skew_mean_ms + skew_sd_ms * normal_pdf(alpha) / tail - a
    }

    /// How far a remote clock may lag before a request waits: `RRD/2 + Δ`.
    fn skew_threshold_ms(&self) -> f64 {
        0.5 * self.rrd_ms + self.delta_ms
    }

    /// §IV-D: the abort probability of an update transaction,
    /// `W²·TPS_u·(L_u + Δ) / DBSize` (an upper bound: Δ lengthens the transaction only
    /// logically).
    pub fn abort_probability(&self) -> f64 {
        let concurrent_ms = self.update_txn_ms + self.delta_ms;
        (self.writes * self.writes * self.tps_u_per_ms() * concurrent_ms / self.db_size).min(1.0)
    }
}

/// The standard normal density φ.
fn normal_pdf(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// The standard normal distribution function Φ, via erf.
fn normal_cdf(x: f64) -> f64 {
    0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// The error function, Abramowitz & Stegun 7.1.26 (absolute error ≤ 1.5e-7), which is
/// far below what the model's inputs can tell apart; std has no erf.
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-x * x).exp();
    y.copysign(x)
}

/// The model's inputs measured on a MicroBench run (as in `examples/clock_si_model.rs`):
/// DBSize = shards × keys per shard, R = W = the keys a MicroBench transaction touches (one
/// per shard, up to 3), TPS_u = committed per second of load, L_r = L_u = their mean
/// latency, RRD = the round trip from the first coordinator to shard 0's leader, S = 0 (the
/// simulator's log write is instantaneous). None for other workloads or an idle run.
pub fn microbench_params(run: &RunSummary<'_>, delta_ms: f64) -> Option<Params> {
    if run.workload != "microbench" || run.committed == 0 {
        return None;
    }
    let keys_per_shard: f64 = run
        .workload_options
        .get("keys_per_shard")
        .and_then(|k| k.parse().ok())
        .unwrap_or(1_000_000.0);
    let cluster = run.cluster;
    let shards = f64::from(cluster.shard_count());
    Some(Params {
        db_size: shards * keys_per_shard,
        reads: shards.min(3.0),
        writes: shards.min(3.0),
        tps_u: run.committed as f64 / run.load_s,
        read_txn_ms: run.mean_latency_ms,
        update_txn_ms: run.mean_latency_ms,
        rrd_ms: cluster.rtt_ms(cluster.coordinators[0], cluster.initial_leader(ShardId(0))),
        sync_commit_ms: 0.0,
        delta_ms,
    })
}

/// The predictions a report shows beside the measured figures, by name.
pub fn predictions(params: &Params) -> BTreeMap<String, f64> {
    BTreeMap::from([
        (
            "delay_probability".to_string(),
            params.pending_commit_delay_probability(),
        ),
        ("delay_ms".to_string(), params.pending_commit_delay_ms()),
        ("abort_rate".to_string(), params.abort_probability()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// §IV-E's numerical example: DBSize = 10⁷, R = W = 10, TPS_u = 10,000, RRD = 0.2 ms,
    /// S = 8 ms, L_u = 32 ms (L_r short).
    fn example(delta_ms: f64) -> Params {
        Params {
            db_size: 1e7,
            reads: 10.0,
            writes: 10.0,
            tps_u: 10_000.0,
            read_txn_ms: 1.0,
            update_txn_ms: 32.0,
            rrd_ms: 0.2,
            sync_commit_ms: 8.0,
            delta_ms,
        }
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn the_papers_example_gives_its_numbers() {
        let p = example(0.0);
        // CW = 8.2 ms; 8.2 ms · 10 /ms · 10 · 10 / 10⁷ = 8.2e-4 ("0.08%").
        assert!(close(p.committing_window_ms(), 8.2, 1e-12));
        assert!(close(p.pending_commit_delay_probability(), 8.2e-4, 1e-12));
        // 0.5 · 8.2 ms ("4.1 ms"); 8.2e-4 · 4.1 ms ≈ 3.4 µs per transaction ("3.2 µs").
        assert!(close(p.pending_commit_delay_ms(), 4.1, 1e-12));
        // 10² · 10 /ms · 32 ms / 10⁷ = 0.0032.
        assert!(close(p.abort_probability(), 0.0032, 1e-12));
        // Δ = 8.2 ms: no delay at all, and the abort rate grows to 100·10·40.2/10⁷ ≈ 0.004.
        let old = example(8.2);
        assert_eq!(old.pending_commit_delay_probability(), 0.0);
        assert_eq!(old.pending_commit_delay_ms(), 0.0);
        assert!(close(old.abort_probability(), 0.00402, 1e-12));
    }

    #[test]
    fn long_reads_are_exposed_only_over_their_first_reads() {
        // CW − Δ = 2 ms < L_r = 8 ms: (2 ms)² · 1 /ms · 4 · 4 / (1000 · 8 ms) = 0.008,
        // a quarter of the short-read value 2 · 1 · 16 / 1000 = 0.032.
        let p = Params {
            db_size: 1000.0,
            reads: 4.0,
            writes: 4.0,
            tps_u: 1000.0,
            read_txn_ms: 8.0,
            update_txn_ms: 8.0,
            rrd_ms: 2.0,
            sync_commit_ms: 0.0,
            delta_ms: 0.0,
        };
        assert!(close(p.pending_commit_delay_probability(), 0.008, 1e-12));
        let short = Params {
            read_txn_ms: 2.0,
            ..p
        };
        assert!(close(
            short.pending_commit_delay_probability(),
            0.032,
            1e-12
        ));
        // Δ = 1 ms halves the window: (1 ms)² · 16 / 8000 = 0.002; the delay is 0.5 ms.
        let older = Params { delta_ms: 1.0, ..p };
        assert!(close(
            older.pending_commit_delay_probability(),
            0.002,
            1e-12
        ));
        assert!(close(older.pending_commit_delay_ms(), 0.5, 1e-12));
        // A tiny store saturates: a probability never exceeds 1.
        let tiny = Params { db_size: 1.0, ..p };
        assert_eq!(tiny.pending_commit_delay_probability(), 1.0);
        assert_eq!(tiny.abort_probability(), 1.0);
    }

    #[test]
    fn skew_delays_follow_the_normal_tail() {
        let p = Params {
            rrd_ms: 0.0,
            delta_ms: 0.0,
            ..example(0.0)
        };
        // Threshold 0 at the mean: half the requests wait, on average 2·φ(0) = 0.7979 ms.
        assert!(close(p.skew_delay_probability(0.0, 1.0), 0.5, 1e-7));
        assert!(close(p.skew_delay_ms(0.0, 1.0), 0.797_884_56, 1e-6));
        // RRD = 2 ms: threshold 1 ms = one δ: 1 − Φ(1) = 0.158655.
        let p = Params { rrd_ms: 2.0, ..p };
        assert!(close(
            p.skew_delay_probability(0.0, 1.0),
            0.158_655_25,
            1e-6
        ));
        // Δ pushes the threshold out: fewer and shorter waits.
        let older = Params { delta_ms: 1.0, ..p };
        assert!(older.skew_delay_probability(0.0, 1.0) < p.skew_delay_probability(0.0, 1.0));
        assert!(older.skew_delay_ms(0.0, 1.0) < p.skew_delay_ms(0.0, 1.0));
    }

    #[test]
    fn the_closed_form_skew_delay_is_the_papers_ratio_of_integrals() {
        let p = Params {
            rrd_ms: 1.0,
            delta_ms: 0.3,
            ..example(0.0)
        };
        let (mu, sd) = (0.4, 0.7);
        let a = 0.5 * p.rrd_ms + p.delta_ms;
        // ∫ₐ^∞ x·e^{−(x−μ)²/2δ²} dx / ∫ₐ^∞ e^{−(x−μ)²/2δ²} dx − a, by the midpoint rule.
        let (mut num, mut den) = (0.0, 0.0);
        let dx = 1e-4;
        let mut x = a + dx / 2.0;
        while x < a + 20.0 * sd {
            let g = (-(x - mu) * (x - mu) / (2.0 * sd * sd)).exp();
            num += x * g * dx;
            den += g * dx;
            x += dx;
        }
        assert!(close(p.skew_delay_ms(mu, sd), num / den - a, 1e-5));
    }

    #[test]
    fn erf_matches_known_values() {
        assert!(close(erf(0.0), 0.0, 1e-9));
        assert!(close(erf(0.5), 0.520_499_877_8, 2e-7));
        assert!(close(erf(1.0), 0.842_700_792_9, 2e-7));
        assert!(close(erf(-2.0), -0.995_322_265_0, 2e-7));
    }
}
