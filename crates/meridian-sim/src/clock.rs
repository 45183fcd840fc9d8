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

use meridian_core::time::NS_PER_MS;
use meridian_core::topology::ClockParams;
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
}

impl ClockModel {
    pub fn new(params: &ClockParams, seed: u64) -> ClockModel {
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
        }
    }

    /// The local reading at true time `true_ns` (relative to the run's epoch). Calls must not
    /// go backwards in true time (the simulator's clock only moves forward).
    pub fn read(&mut self, true_ns: u64) -> i128 {
        self.advance(true_ns);
        let drift = self.params.drift_ppm * 1e-6 * (true_ns - self.last_resync_ns) as f64;
        let mut error = self.offset_ns + drift;
        if let Some(bound_ms) = self.params.error_bound_ms {
            let bound = bound_ms * NS_PER_MS as f64;
            error = error.clamp(-bound, bound);
        }
        true_ns as i128 + (error + self.steps_ns).round() as i128
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
    fn profiles_err_in_the_order_of_tiga_table_3() {
        let perfect = mean_abs_error_ms("perfect", 4);
        let huygens = mean_abs_error_ms("huygens", 16);
        let chrony = mean_abs_error_ms("chrony", 16);
        let ntpd = mean_abs_error_ms("ntpd", 16);
        let bad = mean_abs_error_ms("bad", 16);
        assert_eq!(perfect, 0.0);
        assert!(huygens < 0.05, "huygens {huygens}");
        assert!((1.0..10.0).contains(&chrony), "chrony {chrony}");
        assert!(chrony < ntpd && ntpd < bad, "{chrony} {ntpd} {bad}");
        assert!(bad > 25.0, "bad {bad}");
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
}
