//! Synchronized clocks of Aurogon §5 and §6.5: 2LClock, a FaRMv2-style clock, DST.
//!
//! A clock's error (local − true) is a sum of parts, each a function of true time that
//! does not depend on when the clock is read:
//!
//! - the **reference**: the root clock's own error. The first root is machine 0 and
//!   defines true time; a root that takes over free-runs from its last mapping, so its
//!   error grows at a residual rate (`drift_ppm`) from then on;
//! - the **NIC–NIC level** (`farmv2`: the one level): one fitted point per `resync_ms`
//!   timeslice in ±`error_ms`, joined by straight lines — §5.1's anticipated points,
//!   which keep the mapping continuous and so monotonic. The root has none;
//! - the **CPU–NIC level** (`2lclock` only): one point per `cpu_sync_ms` in
//!   ±`cpu_error_ms`, joined the same way;
//! - **interference** (Table 2): a fraction `interference_rate` of CPU probes is delayed by
//!   up to `interference_ms`, misplacing its point by up to half the delay. 2LClock filters
//!   those probes (§5.2.1); the FaRMv2-style clock, whose one level reads CPU clocks, takes
//!   them in;
//! - **failover** (§5.3, Fig. 13): when the root crashes, every other clock free-runs on
//!   its last mapping at a residual rate in ±`drift_ppm` (the *virtual* phase, 1–1.5 ×
//!   `virtual_ms`), then adopts the new root and fades the correction value linearly over
//!   `smoothing_ms` (the *smoothing* phase).
//!
//! `dst` is an offset in ±`error_ms` plus an uncorrected drift in ±`drift_ppm`.
//!
//! Each level draws from a stream of its own, so the interleaving of reads never changes
//! a draw. Every part is continuous with a slope far below 1, so readings never go
//! backwards (the unit tests check it); only scheduled steps (a fault) can move a clock back.

use meridian_core::time::NS_PER_MS;
use meridian_core::topology::{ClockKind, ClockParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The root clock's error relative to true time: `error_ns + rate·(t − anchor_ns)`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reference {
    pub anchor_ns: u64,
    pub error_ns: f64,
    /// Dimensionless (1e-6 per ppm).
    pub rate: f64,
}

impl Reference {
    fn at(&self, t_ns: u64) -> f64 {
        self.error_ns + self.rate * (t_ns as f64 - self.anchor_ns as f64)
    }
}

/// One synchronization level: a point per timeslice, straight lines between them.
#[derive(Clone, Debug)]
struct SyncLevel {
    rng: ChaCha8Rng,
    interval_ns: u64,
    error_ns: f64,
    /// (probability, largest delay) of an interference spike entering a point.
    interference: Option<(f64, f64)>,
    prev: (u64, f64),
    next: (u64, f64),
}

impl SyncLevel {
    fn new(seed: u64, interval_ms: f64, error_ms: f64, interference: Option<(f64, f64)>) -> Self {
        let mut level = SyncLevel {
            rng: ChaCha8Rng::seed_from_u64(seed),
            interval_ns: ((interval_ms * NS_PER_MS as f64) as u64).max(1),
            error_ns: error_ms * NS_PER_MS as f64,
            interference,
            prev: (0, 0.0),
            next: (0, 0.0),
        };
        let first = level.draw();
        level.prev = (0, first);
        level.next = (level.interval_ns, level.draw());
        level
    }

    fn draw(&mut self) -> f64 {
        let mut error = if self.error_ns > 0.0 {
            self.rng.gen_range(-self.error_ns..=self.error_ns)
        } else {
            0.0
        };
        if let Some((rate, delay_ns)) = self.interference {
            // Drawn for every point, hit or not, so the stream does not depend on the rate.
            let hit: f64 = self.rng.gen_range(0.0..1.0);
            let delay = self.rng.gen_range(0.0..=delay_ns);
            let sign = if self.rng.gen_bool(0.5) { 1.0 } else { -1.0 };
            if hit < rate {
                // An asymmetric delay of d misplaces the midpoint estimate by d/2.
                error += sign * delay / 2.0;
            }
        }
        error
    }

    fn at(&mut self, t_ns: u64) -> f64 {
        while self.next.0 <= t_ns {
            self.prev = self.next;
            self.next = (self.next.0 + self.interval_ns, self.draw());
        }
        let (t0, e0) = self.prev;
        let (t1, e1) = self.next;
        e0 + (e1 - e0) * (t_ns - t0) as f64 / (t1 - t0) as f64
    }
}

/// Where a non-root clock is in a root failover.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Normal,
    /// Free-running on the old mapping: `error_ns + rate·(t − anchor_ns)` until `until_ns`.
    Virtual {
        anchor_ns: u64,
        error_ns: f64,
        rate: f64,
        until_ns: u64,
    },
    /// On the new root, plus a correction fading from `correction_ns` at `from_ns` to 0.
    Smoothing {
        from_ns: u64,
        correction_ns: f64,
    },
}

/// A 2LClock, FaRMv2-style or DST clock.
#[derive(Clone, Debug)]
pub struct SyncedClock {
    kind: ClockKind,
    drift_ppm: f64,
    virtual_ns: f64,
    smoothing_ns: u64,
    /// `dst`: the fixed offset and rate.
    dst: Reference,
    reference: Reference,
    is_root: bool,
    phase: Phase,
    /// NIC–NIC (`2lclock`) or the one level (`farmv2`).
    nic: Option<SyncLevel>,
    cpu: Option<SyncLevel>,
    failover_rng: ChaCha8Rng,
}

impl SyncedClock {
    pub fn new(params: &ClockParams, seed: u64, is_root: bool) -> SyncedClock {
        let mut failover_rng = ChaCha8Rng::seed_from_u64(seed ^ 0xFA11_0BE5);
        let spike = (
            params.interference_rate,
            params.interference_ms * NS_PER_MS as f64,
        );
        let (nic, cpu) = match params.model {
            ClockKind::TwoLClock => (
                Some(SyncLevel::new(
                    seed ^ 0x2C,
                    params.resync_ms,
                    params.error_ms,
                    None,
                )),
                Some(SyncLevel::new(
                    seed ^ 0xC9,
                    params.cpu_sync_ms,
                    params.cpu_error_ms,
                    None,
                )),
            ),
            ClockKind::FarmV2 => (
                Some(SyncLevel::new(
                    seed ^ 0xFA,
                    params.resync_ms,
                    params.error_ms,
                    Some(spike),
                )),
                None,
            ),
            ClockKind::Dst | ClockKind::Offset => (None, None),
        };
        let dst = Reference {
            anchor_ns: 0,
            error_ns: symmetric(&mut failover_rng, params.error_ms * NS_PER_MS as f64),
            rate: symmetric(&mut failover_rng, params.drift_ppm * 1e-6),
        };
        SyncedClock {
            kind: params.model,
            drift_ppm: params.drift_ppm,
            virtual_ns: params.virtual_ms * NS_PER_MS as f64,
            smoothing_ns: (params.smoothing_ms * NS_PER_MS as f64) as u64,
            dst,
            reference: Reference::default(),
            is_root,
            phase: Phase::Normal,
            nic,
            cpu,
            failover_rng,
        }
    }

    /// Error (local − true) in ns at `t_ns`; calls must not go backwards in time.
    pub fn error_ns(&mut self, t_ns: u64) -> f64 {
        if self.kind == ClockKind::Dst {
            return self.dst.at(t_ns);
        }
        let cpu = self.cpu.as_mut().map_or(0.0, |level| level.at(t_ns));
        self.mapped_ns(t_ns) + cpu
    }

    /// The error of the NIC's mapping to the reference (F2; `farmv2`: the whole clock).
    fn mapped_ns(&mut self, t_ns: u64) -> f64 {
        if let Phase::Virtual {
            anchor_ns,
            error_ns,
            rate,
            until_ns,
        } = self.phase
        {
            if t_ns < until_ns {
                return error_ns + rate * (t_ns - anchor_ns) as f64;
            }
            let old = error_ns + rate * (until_ns - anchor_ns) as f64;
            let correction_ns = old - self.on_reference_ns(until_ns);
            self.phase = Phase::Smoothing {
                from_ns: until_ns,
                correction_ns,
            };
        }
        let on_reference = self.on_reference_ns(t_ns);
        match self.phase {
            Phase::Smoothing {
                from_ns,
                correction_ns,
            } => {
                let elapsed = t_ns - from_ns;
                if elapsed >= self.smoothing_ns {
                    self.phase = Phase::Normal;
                    on_reference
                } else {
                    let left = 1.0 - elapsed as f64 / self.smoothing_ns as f64;
                    on_reference + correction_ns * left
                }
            }
            _ => on_reference,
        }
    }

    /// The error of a warm mapping to the current reference.
    fn on_reference_ns(&mut self, t_ns: u64) -> f64 {
        let link = match (&mut self.nic, self.is_root) {
            (Some(level), false) => level.at(t_ns),
            _ => 0.0,
        };
        self.reference.at(t_ns) + link
    }

    /// This clock becomes the root at `at_ns` (the old one crashed): its NIC free-runs
    /// from its last mapping at a residual rate, and that is everyone's new reference.
    pub fn take_root(&mut self, at_ns: u64) -> Option<Reference> {
        if !self.kind.has_root() {
            return None;
        }
        let residual = symmetric(&mut self.failover_rng, self.drift_ppm * 1e-6);
        let reference = Reference {
            anchor_ns: at_ns,
            error_ns: self.mapped_ns(at_ns),
            rate: self.current_rate() + residual,
        };
        self.reference = reference;
        self.is_root = true;
        self.phase = Phase::Normal;
        Some(reference)
    }

    /// The root crashed at `at_ns` and `reference` took over: free-run on the last mapping
    /// (virtual phase), then smooth onto the new root.
    pub fn follow_root(&mut self, at_ns: u64, reference: Reference) {
        if !self.kind.has_root() {
            return;
        }
        let error_ns = self.mapped_ns(at_ns);
        let residual = symmetric(&mut self.failover_rng, self.drift_ppm * 1e-6);
        let stretch: f64 = self.failover_rng.gen_range(1.0..=1.5);
        self.phase = Phase::Virtual {
            anchor_ns: at_ns,
            error_ns,
            rate: self.current_rate() + residual,
            until_ns: at_ns + (self.virtual_ns * stretch) as u64,
        };
        self.reference = reference;
        self.is_root = false;
    }

    /// The rate a free-running mapping extrapolates: the reference's (the per-slice slopes
    /// of the levels average out).
    fn current_rate(&self) -> f64 {
        self.reference.rate
    }

    pub fn has_root(&self) -> bool {
        self.kind.has_root()
    }
}

fn symmetric(rng: &mut ChaCha8Rng, bound: f64) -> f64 {
    if bound > 0.0 {
        rng.gen_range(-bound..=bound)
    } else {
        0.0
    }
}
