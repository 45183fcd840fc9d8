//! rMap/wMap (§3.2): the timestamps of released (leader: sealed) transactions per key, used
//! both for conflict detection at arrival and, per queue scan, to find conflicting
//! transactions ahead in the priority queue.

use meridian_core::txn::Key;
use meridian_core::Timestamp;
use rustc_hash::FxHashMap;

/// Per-key largest read and write timestamps.
#[derive(Debug, Default)]
pub struct KeyMaps {
    r: FxHashMap<Key, Timestamp>,
    w: FxHashMap<Key, Timestamp>,
}

impl KeyMaps {
    /// Algorithm 2 lines 15–16 (keeping the maximum: a follower may learn a larger
    /// timestamp from log sync after its own release).
    pub fn record(&mut self, reads: &[Key], writes: &[Key], ts: Timestamp) {
        for (map, keys) in [(&mut self.r, reads), (&mut self.w, writes)] {
            for k in keys {
                let slot = map.entry(k.clone()).or_insert(ts);
                *slot = (*slot).max(ts);
            }
        }
    }

    /// The largest recorded conflicting timestamp, if it is at or above `ts` (then a
    /// transaction at `ts` is not acceptable: conflict detection fails).
    pub fn conflict_floor(
        &self,
        reads: &[Key],
        writes: &[Key],
        ts: Timestamp,
    ) -> Option<Timestamp> {
        let mut worst: Option<Timestamp> = None;
        let mut see = |t: Option<&Timestamp>| {
            if let Some(&t) = t {
                worst = Some(worst.map_or(t, |w| w.max(t)));
            }
        };
        for k in writes {
            see(self.r.get(k));
            see(self.w.get(k));
        }
        for k in reads {
            see(self.w.get(k));
        }
        worst.filter(|&w| w >= ts)
    }

    /// Whether a transaction with these keys conflicts with anything recorded
    /// (read-write or write-write).
    pub fn blocks(&self, reads: &[Key], writes: &[Key]) -> bool {
        writes
            .iter()
            .any(|k| self.r.contains_key(k) || self.w.contains_key(k))
            || reads.iter().any(|k| self.w.contains_key(k))
    }
}

/// Tiga's conflict relation between two transactions' key sets.
pub fn conflicts(a_reads: &[Key], a_writes: &[Key], b_reads: &[Key], b_writes: &[Key]) -> bool {
    let hits = |xs: &[Key], ys: &[Key]| xs.iter().any(|x| ys.contains(x));
    hits(a_writes, b_writes) || hits(a_writes, b_reads) || hits(a_reads, b_writes)
}
