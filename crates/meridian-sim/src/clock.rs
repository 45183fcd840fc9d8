//! Clock models (DESIGN §3): map virtual true time to a node's local clock reading.
//!
//! A node's error is `offset + drift·(t − last_resync) + steps`. The offset is drawn
//! uniformly in ±`error_ms` at boot and re-drawn at every resync (a synchronization daemon
//! correcting the clock); drift accumulates between resyncs; random steps (`steps_per_minute`,
//! a time server restarting) and scheduled steps (topology, fault plan) add to `steps`.
//! A profile with `error_bound_ms` clips the random part to ±bound (the TrueTime-style ε a
//! protocol may rely on); scheduled steps are applied unclipped on purpose, so a test can
//! break the bound and watch a protocol that trusts ε fail.
//!
//! Everything is drawn from the clock's own RNG in resync order, so the readings do not
//! depend on when, or how often, the node reads its clock.
//!
//! That is the `offset` kind, the default. A profile's `model` may instead name one of
//! Aurogon's synchronized clocks (`2lclock`, `farmv2`, `dst`: see [`synced`]), which keep
//! readings monotonic and fail over when the root clock's machine crashes.

pub mod synced;

pub use synced::Reference;
use synced::SyncedClock;

use meridian_core::time::NS_PER_MS;
use meridian_core::topology::{ClockKind, ClockParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One node's clock.
#[derive(Clone, Debug)]
pub struct ClockModel {
    params: ClockParams,
    rng: ChaCha8Rng,
    offset_ns: f64,
    last_resync_ns: u64,
    next_resync_ns: u64,
    next_random_step_ns: u64,
    steps_ns: f64,
    /// A synchronized kind (`model` other than `offset`) reads this instead.
    synced: Option<SyncedClock>,
}

impl ClockModel {
    pub fn new(params: &ClockParams, seed: u64) -> ClockModel {
        ClockModel::with_root(params, seed, false)
    }

    /// A clock that is (`is_root`) or is not the first root of a kind that has one.
    pub fn with_root(params: &ClockParams, seed: u64, is_root: bool) -> ClockModel {
        let synced =
            (params.model != ClockKind::Offset).then(|| SyncedClock::new(params, seed, is_root));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let offset_ns = draw_offset(params, &mut rng);
        let next_random_step_ns = draw_step_gap(params, &mut rng, 0);
        ClockModel {
            params: params.clone(),
            rng,
            offset_ns,
            last_resync_ns: 0,
            next_resync_ns: (params.resync_ms * NS_PER_MS as f64) as u64,
            next_random_step_ns,
            steps_ns: 0.0,
            synced,
        }
    }

    /// The local reading at true time `true_ns` (relative to the run's epoch). Calls must not
    /// go backwards in true time (the simulator's clock only moves forward).
    pub fn read(&mut self, true_ns: u64) -> i128 {
        if let Some(synced) = &mut self.synced {
            let error = synced.error_ns(true_ns) + self.steps_ns;
            return true_ns as i128 + error.round() as i128;
        }
        self.advance(true_ns);
        let drift = self.params.drift_ppm * 1e-6 * (true_ns - self.last_resync_ns) as f64;
        let mut error = self.offset_ns + drift;
        if let Some(bound_ms) = self.params.error_bound_ms {
            let bound = bound_ms * NS_PER_MS as f64;
            error = error.clamp(-bound, bound);
        }
        true_ns as i128 + (error + self.steps_ns).round() as i128
    }

    /// The error (local − true) at `true_ns`, in ns, for the run's report, without
    /// touching an `offset` clock's state: its scheduled steps are applied lazily against
    /// its resyncs, and an extra read would reorder the two (and move golden hashes).
    pub fn sample_error_ns(&mut self, true_ns: u64) -> f64 {
        let reading = if self.synced.is_some() {
            self.read(true_ns)
        } else {
            self.clone().read(true_ns)
        };
        (reading - true_ns as i128) as f64
    }

    /// Current error (local − true) at `true_ns`, in ms.
    pub fn error_ms(&mut self, true_ns: u64) -> f64 {
        (self.read(true_ns) - true_ns as i128) as f64 / NS_PER_MS as f64
    }

    /// Applies a scheduled step (positive: the clock jumps ahead). A TrueTime clock
    /// (`truetime`, K2 §2.2) is not stepped: its hardware keeps the bound.
    pub fn step(&mut self, step_ns: f64) {
        if self.params.truetime {
            return;
        }
        self.steps_ns += step_ns;
    }

    /// Whether this clock follows a root clock (and fails over when it crashes).
    pub fn has_root(&self) -> bool {
        self.synced.as_ref().is_some_and(SyncedClock::has_root)
    }

    /// Root failover (Aurogon §5.3): this clock becomes the root at `at_ns`; returns the
    /// reference the others adopt (`None` for kinds without a root).
    pub fn take_root(&mut self, at_ns: u64) -> Option<Reference> {
        self.synced.as_mut()?.take_root(at_ns)
    }

    /// Root failover: the root crashed at `at_ns`; go through the virtual and smoothing
    /// phases onto `reference`.
    pub fn follow_root(&mut self, at_ns: u64, reference: Reference) {
        if let Some(synced) = &mut self.synced {
            synced.follow_root(at_ns, reference);
        }
    }

    fn advance(&mut self, true_ns: u64) {
        while self.next_resync_ns <= true_ns {
            self.last_resync_ns = self.next_resync_ns;
            self.offset_ns = draw_offset(&self.params, &mut self.rng);
            // A resync also undoes earlier random steps: the daemon found the right time again.
            if self.params.steps_per_minute > 0.0 {
                self.steps_ns = 0.0;
            }
            self.next_resync_ns += (self.params.resync_ms * NS_PER_MS as f64).max(1.0) as u64;
        }
        while self.next_random_step_ns <= true_ns {
            let size = self.params.error_ms * NS_PER_MS as f64;
            self.steps_ns += self.rng.gen_range(-size..=size);
            self.next_random_step_ns =
                draw_step_gap(&self.params, &mut self.rng, self.next_random_step_ns);
        }
    }
}

fn draw_offset(params: &ClockParams, rng: &mut ChaCha8Rng) -> f64 {
    let error = params.error_ms * NS_PER_MS as f64;
    if error == 0.0 {
        0.0
    } else {
        rng.gen_range(-error..=error)
    }
}

fn draw_step_gap(params: &ClockParams, rng: &mut ChaCha8Rng, now_ns: u64) -> u64 {
    if params.steps_per_minute <= 0.0 {
        return u64::MAX;
    }
    let mean_ns = 60e9 / params.steps_per_minute;
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    now_ns.saturating_add((-u.ln() * mean_ns) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::topology::ClockProfile;

    fn mean_abs_error_ms(profile: &str, nodes: u64) -> f64 {
        let params = ClockProfile::builtin(profile).unwrap().params;
        let mut total = 0.0;
        let mut samples = 0.0;
        for node in 0..nodes {
            let mut clock = ClockModel::new(&params, node);
            for t in (0..60_000u64).step_by(250) {
                total += clock.error_ms(t * NS_PER_MS).abs();
                samples += 1.0;
            }
        }
        total / samples
    }

    #[test]
    fn profiles_err_as_tiga_table_3_measured() {
        assert_eq!(mean_abs_error_ms("perfect", 4), 0.0);
        // Table 3's clock errors, ms.
        for (profile, table_3_ms) in [
            ("huygens", 0.012),
            ("chrony", 4.54),
            ("ntpd", 16.45),
            ("bad", 62.55),
        ] {
            let measured = mean_abs_error_ms(profile, 64);
            assert!(
                (measured / table_3_ms - 1.0).abs() < 0.08,
                "{profile}: mean |error| {measured} ms, Table 3 {table_3_ms} ms"
            );
        }
    }

    #[test]
    fn bounded_profiles_stay_within_their_bound_until_stepped() {
        let params = ClockProfile::builtin("huygens").unwrap().params;
        let bound = params.error_bound_ms.unwrap();
        let mut clock = ClockModel::new(&params, 7);
        for t in (0..30_000u64).step_by(10) {
            assert!(clock.error_ms(t * NS_PER_MS).abs() <= bound + 1e-6);
        }
        clock.step(5.0 * NS_PER_MS as f64);
        assert!(clock.error_ms(30_001 * NS_PER_MS) > bound);
    }

    #[test]
    fn readings_do_not_depend_on_how_often_the_clock_is_read() {
        let params = ClockProfile::builtin("bad").unwrap().params;
        let mut often = ClockModel::new(&params, 3);
        let mut rarely = ClockModel::new(&params, 3);
        for t in 0..10_000u64 {
            often.read(t * NS_PER_MS);
        }
        assert_eq!(
            often.read(10_000 * NS_PER_MS),
            rarely.read(10_000 * NS_PER_MS)
        );
    }

    #[test]
    fn a_truetime_clock_keeps_its_bound_through_scheduled_steps() {
        // K2's TTC oracles (topologies/k2-five-regions.toml): 200 ppm, calibrated every
        // 62.5 ms, ε = 100 us.
        let params = ClockParams {
            error_ms: 0.005,
            drift_ppm: 200.0,
            resync_ms: 62.5,
            steps_per_minute: 0.0,
            error_bound_ms: Some(0.1),
            truetime: true,
            ..ClockParams::default()
        };
        let mut clock = ClockModel::new(&params, 11);
        let mut worst: f64 = 0.0;
        for t in (0..10_000u64).step_by(1) {
            if t == 5_000 {
                clock.step(-40.0 * NS_PER_MS as f64);
            }
            worst = worst.max(clock.error_ms(t * NS_PER_MS).abs());
        }
        // Drift between calibrations (12.5 us) plus the calibration error (5 us).
        assert!(
            worst > 0.0 && worst <= 0.0175 + 1e-6,
            "worst |error| {worst} ms"
        );
        let ordinary = ClockParams {
            truetime: false,
            ..params
        };
        let mut clock = ClockModel::new(&ordinary, 11);
        clock.step(-40.0 * NS_PER_MS as f64);
        assert!(
            clock.error_ms(NS_PER_MS) < -39.0,
            "an ordinary clock is stepped"
        );
    }

    /// A profile of `topologies/rdma-cluster.toml` (Aurogon's clocks).
    fn rdma_profile(name: &str) -> ClockParams {
        meridian_core::Topology::load("rdma-cluster")
            .unwrap()
            .clock_profile(name)
            .unwrap()
            .params
    }

    /// Five machines' errors (ns) every `every_us` for `seconds`, machine 0 the root; calls
    /// `at` before each instant (to schedule a failover).
    fn errors_over(
        params: &ClockParams,
        seconds: u64,
        every_us: u64,
        mut at: impl FnMut(u64, &mut [ClockModel]),
    ) -> Vec<Vec<f64>> {
        let mut clocks: Vec<ClockModel> = (0..5)
            .map(|m| ClockModel::with_root(params, 40 + m, m == 0))
            .collect();
        let mut out = vec![Vec::new(); 5];
        let mut last = [i128::MIN; 5];
        for t in (0..seconds * 1_000_000).step_by(every_us as usize) {
            let t_ns = t * 1_000;
            at(t_ns, &mut clocks);
            for (m, clock) in clocks.iter_mut().enumerate() {
                let reading = clock.read(t_ns);
                assert!(reading >= last[m], "machine {m} went back at {t_ns} ns");
                last[m] = reading;
                out[m].push((reading - t_ns as i128) as f64);
            }
        }
        out
    }

    #[test]
    fn a_2lclock_stays_within_its_bound_and_never_goes_back_despite_interference() {
        let params = rdma_profile("2lclock");
        assert_eq!(params.model, ClockKind::TwoLClock);
        assert!(params.interference_rate > 0.0);
        let bound_ns = (params.error_ms + params.cpu_error_ms) * NS_PER_MS as f64;
        let errors = errors_over(&params, 10, 50, |_, _| {});
        let worst = errors.iter().flatten().fold(0.0f64, |m, e| m.max(e.abs()));
        let mean = errors.iter().flatten().map(|e| e.abs()).sum::<f64>()
            / errors.iter().map(Vec::len).sum::<usize>() as f64;
        assert!(worst <= bound_ns + 1.0, "worst {worst} ns > {bound_ns}");
        // Not trivially zero: both levels err, the way §6.5 measures (tens of ns).
        assert!((5.0..60.0).contains(&mean), "mean |error| {mean} ns");
        // The root's clock only has its CPU–NIC level.
        let root_worst = errors[0].iter().fold(0.0f64, |m, e| m.max(e.abs()));
        assert!(root_worst <= params.cpu_error_ms * NS_PER_MS as f64 + 1.0);
    }

    #[test]
    fn a_farmv2_clock_takes_interference_in_and_errs_more_than_2lclock() {
        let farm = rdma_profile("farmv2");
        let quiet = ClockParams {
            interference_rate: 0.0,
            ..farm.clone()
        };
        let p99 = |params: &ClockParams| {
            let mut all: Vec<f64> = errors_over(params, 5, 100, |_, _| {})
                .into_iter()
                .flatten()
                .map(f64::abs)
                .collect();
            all.sort_by(f64::total_cmp);
            all[all.len() * 99 / 100]
        };
        let (noisy, calm) = (p99(&farm), p99(&quiet));
        let two_l = p99(&rdma_profile("2lclock"));
        assert!(
            noisy > calm + 100.0,
            "interference: p99 {noisy} vs {calm} ns"
        );
        assert!(
            noisy > 3.0 * two_l,
            "farmv2 p99 {noisy} vs 2lclock {two_l} ns"
        );
    }

    #[test]
    fn a_dst_clock_drifts_uncorrected() {
        let params = rdma_profile("dst");
        let errors = errors_over(&params, 10, 1000, |_, _| {});
        let start = errors.iter().map(|e| e[0].abs()).fold(0.0, f64::max);
        let end = errors
            .iter()
            .map(|e| e.last().unwrap().abs())
            .fold(0.0, f64::max);
        assert!(start <= params.error_ms * NS_PER_MS as f64 + 1.0);
        // 10 s at up to 5 ppm: tens of us, far beyond the initial offset.
        assert!(
            end > 5.0 * start.max(1000.0),
            "start {start} ns, end {end} ns"
        );
    }

    #[test]
    fn root_failover_keeps_clocks_monotonic_and_converges_after_smoothing() {
        let params = rdma_profile("2lclock");
        let crash_ns = 5 * NS_PER_MS * 1000;
        let switch_done_ns =
            crash_ns + ((1.5 * params.virtual_ms + params.smoothing_ms) * NS_PER_MS as f64) as u64;
        // Machine 0 (the root) crashes at 5 s; machine 1 takes over.
        let errors = errors_over(&params, 15, 100, |t_ns, clocks| {
            if t_ns == crash_ns {
                let reference = clocks[1].take_root(t_ns).unwrap();
                for (m, clock) in clocks.iter_mut().enumerate() {
                    if m != 1 {
                        clock.follow_root(t_ns, reference);
                    }
                }
            }
        });
        let index = |t_ns: u64| (t_ns / 100_000) as usize;
        let spread = |i: usize| {
            let v: Vec<f64> = (1..5).map(|m| errors[m][i]).collect();
            v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min)
        };
        let bound_ns = (params.error_ms + params.cpu_error_ms) * NS_PER_MS as f64;
        // After the switch the survivors agree within the 2LClock bound again (each is
        // within it of the new root)...
        for i in index(switch_done_ns) + 1..errors[1].len() {
            assert!(
                spread(i) <= 2.0 * bound_ns + 1.0,
                "spread {} at {i}",
                spread(i)
            );
        }
        // ...while during the failover they drifted apart by more (the residual rates),
        // which shows the virtual phase ran free and the smoothing undid it gradually.
        let widest = (index(crash_ns)..index(switch_done_ns))
            .map(spread)
            .fold(0.0, f64::max);
        assert!(widest > 2.0 * bound_ns, "widest spread {widest} ns");
        // Smoothing is gradual: no clock moved by more than 1 % faster than true time.
        for (m, series) in errors.iter().enumerate() {
            for w in series.windows(2) {
                assert!(
                    (w[1] - w[0]).abs() <= 1_000.0,
                    "machine {m}: jump {}",
                    w[1] - w[0]
                );
            }
        }
    }

    #[test]
    fn synced_readings_do_not_depend_on_how_often_the_clock_is_read() {
        for name in ["2lclock", "farmv2", "dst"] {
            let params = rdma_profile(name);
            let mut often = ClockModel::with_root(&params, 3, false);
            let mut rarely = ClockModel::with_root(&params, 3, false);
            for t in 0..100_000u64 {
                often.read(t * 13_000);
            }
            let end = 2 * NS_PER_MS * 1000;
            assert_eq!(often.read(end), rarely.read(end), "{name}");
        }
    }
}
