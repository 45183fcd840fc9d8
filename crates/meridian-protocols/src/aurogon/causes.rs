//! Why a transaction aborted (§2.2, Fig. 2): the three causes of request reordering, as
//! experiment counters. Instrumentation only — no decision reads any of this.
//!
//! A timestamp-ordering abort is a write `W` refused as late: a read `R` with
//! `R.ts > W.ts` already returned the version `W` would follow (`v.wts ≤ W.ts < v.rts`).
//! `R` below is the read whose timestamp is that `rts` (the largest that read the
//! version). The abort is charged to exactly one cause, checked in this order:
//!
//! 1. **Clock error** (Fig. 2a): `R`'s transaction took its timestamp *before* `W`'s in
//!    true time, yet got the larger timestamp — with perfect clocks `R.ts < W.ts` and
//!    there is no conflict. Needs the true time of each timestamp, which only the
//!    simulator knows ([`meridian_core::node::Context::true_now_ns`]); on the runtime
//!    this cause is never charged.
//! 2. **Dependency** (Fig. 2c): `W` is a dependent write sent in a second round after its
//!    own read of the record returned (no pre-attaching, §4.3), that read was *clean* (no
//!    read with a larger timestamp had returned the version yet), and `R` came in the
//!    vulnerable interval between the two.
//! 3. **Access latency** (Fig. 2b): the rest — clocks ordered the two correctly, and `W`'s
//!    first request on the record (its pre-attached or independent write, or the read a
//!    dependent write follows) reached the primary after `R` did: the network, a queue or
//!    a busier coordinator delayed it.
//!
//! Every other abort (a refusal of another kind, a timeout, a primary change, a backup's
//! refusal) is counted as `other`, so the four counters sum to the coordinators' aborts.

use serde::{Deserialize, Serialize};

/// The cause of a late-write abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cause {
    ClockError,
    AccessLatency,
    Dependency,
}

impl Cause {
    /// The counter an abort of this cause adds to (`None`: not a late write).
    pub fn counter(cause: Option<Cause>) -> &'static str {
        match cause {
            Some(Cause::ClockError) => "aurogon.abort_cause.clock_error",
            Some(Cause::AccessLatency) => "aurogon.abort_cause.access_latency",
            Some(Cause::Dependency) => "aurogon.abort_cause.dependency",
            None => "aurogon.abort_cause.other",
        }
    }

    /// Classifies a late write by a transaction that took its timestamp at
    /// `write_issued_ns`, refused because of a read by one that took its at
    /// `read_issued_ns` (both true time, `None` where unknown); `after_clean_read`: the
    /// write is a second-round dependent write whose own read of the record was clean.
    pub fn of_late_write(
        write_issued_ns: Option<u64>,
        read_issued_ns: Option<u64>,
        after_clean_read: bool,
    ) -> Cause {
        match (write_issued_ns, read_issued_ns) {
            (Some(w), Some(r)) if r < w => Cause::ClockError,
            _ if after_clean_read => Cause::Dependency,
            _ => Cause::AccessLatency,
        }
    }
}

/// The (transaction, record) pairs whose reads were clean, remembered only where a
/// dependent write may follow (no pre-attaching), the oldest forgotten first.
#[derive(Clone, Debug, Default)]
pub struct CleanReads {
    set: rustc_hash::FxHashSet<(meridian_core::TxnId, meridian_core::txn::Key)>,
    order: std::collections::VecDeque<(meridian_core::TxnId, meridian_core::txn::Key)>,
}

/// Far more than the reads of the transactions in flight on one primary.
const CLEAN_READS_MAX: usize = 1 << 14;

impl CleanReads {
    pub fn note(&mut self, txn: meridian_core::TxnId, key: &meridian_core::txn::Key) {
        let entry = (txn, key.clone());
        if self.set.insert(entry.clone()) {
            self.order.push_back(entry);
            if self.order.len() > CLEAN_READS_MAX {
                let old = self.order.pop_front().expect("non-empty");
                self.set.remove(&old);
            }
        }
    }

    pub fn contains(&self, txn: meridian_core::TxnId, key: &meridian_core::txn::Key) -> bool {
        self.set.contains(&(txn, key.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_error_first_then_dependency_then_access_latency() {
        // The reader took its timestamp first but got the larger one: the clocks.
        assert_eq!(
            Cause::of_late_write(Some(20), Some(10), true),
            Cause::ClockError
        );
        // Clocks right; the write followed a clean read: the vulnerable interval.
        assert_eq!(
            Cause::of_late_write(Some(10), Some(20), true),
            Cause::Dependency
        );
        assert_eq!(
            Cause::of_late_write(Some(10), Some(20), false),
            Cause::AccessLatency
        );
        // Without true time (the runtime) the clocks are never blamed.
        assert_eq!(
            Cause::of_late_write(None, Some(5), false),
            Cause::AccessLatency
        );
    }
}
