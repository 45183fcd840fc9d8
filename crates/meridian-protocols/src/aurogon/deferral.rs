//! §4.2's adaptive request deferral: per-record statistics of the requests of the last
//! 10 ms (counted by request timestamp), a record is hot once they reach a threshold, and
//! reads on a hot record wait a per-record window that grows while the record's writes
//! keep failing (late arrivals) and shrinks while they do not, within bounds.

use meridian_core::time::NS_PER_MS;
use meridian_core::txn::Key;
use rustc_hash::FxHashMap;

/// §4.2: "counts the number of receiving requests for each record individually in last
/// 10 milliseconds".
const WINDOW_NS: u64 = 10 * NS_PER_MS;

/// What the mechanism is tuned by (from the protocol options).
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    pub hot_threshold: u32,
    pub step_ns: u64,
    pub max_ns: u64,
    pub fail_rate_high: f64,
}

#[derive(Clone, Debug, Default)]
struct RecordStats {
    /// The window (timestamp / 10 ms) being counted, its requests, and the previous one's.
    window: u64,
    requests: u32,
    previous: u32,
    writes: u32,
    write_failures: u32,
    /// The record's current deferral.
    defer_ns: u64,
}

/// Every record's statistics on one primary.
#[derive(Clone, Debug)]
pub struct Deferral {
    tuning: Tuning,
    records: FxHashMap<Key, RecordStats>,
}

impl Deferral {
    pub fn new(tuning: Tuning) -> Deferral {
        Deferral {
            tuning,
            records: FxHashMap::default(),
        }
    }

    fn stats(&mut self, key: &Key, ts_ns: u64) -> &mut RecordStats {
        let tuning = self.tuning;
        let s = self.records.entry(key.clone()).or_default();
        let window = ts_ns / WINDOW_NS;
        if window > s.window {
            // The window closes: adapt the deferral to its failure rate.
            let rate = if s.writes == 0 {
                0.0
            } else {
                f64::from(s.write_failures) / f64::from(s.writes)
            };
            if rate > tuning.fail_rate_high {
                s.defer_ns = (s.defer_ns + tuning.step_ns).min(tuning.max_ns);
            } else if rate < tuning.fail_rate_high / 4.0 {
                s.defer_ns = s.defer_ns.saturating_sub(tuning.step_ns);
            }
            s.previous = if window == s.window + 1 {
                s.requests
            } else {
                0
            };
            s.window = window;
            s.requests = 0;
            s.writes = 0;
            s.write_failures = 0;
        }
        s
    }

    /// A request with timestamp `ts_ns` reached `key`.
    pub fn note_request(&mut self, key: &Key, ts_ns: u64) {
        let s = self.stats(key, ts_ns);
        s.requests = s.requests.saturating_add(1);
    }

    /// A write on `key` was installed, or failed because it arrived late.
    pub fn note_write(&mut self, key: &Key, ts_ns: u64, failed: bool) {
        let s = self.stats(key, ts_ns);
        s.writes = s.writes.saturating_add(1);
        if failed {
            s.write_failures = s.write_failures.saturating_add(1);
        }
    }

    /// How long a read on `key` waits: zero unless the record is hot; a hot record's
    /// window starts at one step.
    pub fn defer_ns(&mut self, key: &Key) -> u64 {
        let tuning = self.tuning;
        let Some(s) = self.records.get_mut(key) else {
            return 0;
        };
        if s.requests.max(s.previous) < tuning.hot_threshold {
            return 0;
        }
        if s.defer_ns == 0 {
            s.defer_ns = tuning.step_ns.min(tuning.max_ns);
        }
        s.defer_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hot_records_defer_and_windows_adapt_within_bounds() {
        let tuning = Tuning {
            hot_threshold: 3,
            step_ns: 5_000,
            max_ns: 12_000,
            fail_rate_high: 0.1,
        };
        let mut d = Deferral::new(tuning);
        let hot = Key::from_static(b"hot");
        let cold = Key::from_static(b"cold");
        d.note_request(&cold, 1);
        assert_eq!(d.defer_ns(&cold), 0);
        for i in 0..3 {
            d.note_request(&hot, i);
        }
        assert_eq!(d.defer_ns(&hot), 5_000);
        // Every write fails in the next windows: the deferral grows, capped at the max.
        for w in 1..5 {
            d.note_write(&hot, w * WINDOW_NS, true);
            for i in 0..3 {
                d.note_request(&hot, w * WINDOW_NS + i);
            }
        }
        assert_eq!(d.defer_ns(&hot), 12_000);
        // No failures: it shrinks again.
        d.note_write(&hot, 9 * WINDOW_NS, false);
        d.note_write(&hot, 10 * WINDOW_NS, false);
        for i in 0..3 {
            d.note_request(&hot, 10 * WINDOW_NS + i);
        }
        assert!(d.defer_ns(&hot) < 12_000);
    }
}
