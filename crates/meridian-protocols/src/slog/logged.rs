//! What a log (a region's, or the global orderer's) remembers of the transactions it
//! logged, to skip a coordinator's resent order: bounded by what coordinators still have
//! in flight, not by the run.
//!
//! A coordinator resends an order until it hears the transaction is logged, and gives up
//! on it (answering its client `unknown`) after `result_timeout_ms`. Every order carries
//! the coordinator's *floor* ([`Entry::floor`]): every transaction of that incarnation
//! with a lower counter is answered, so never ordered again by it. A log applying an entry
//! raises its coordinator's floor, forgets the keys below it and skips an entry below it:
//! such an entry is a resent duplicate of one logged already, or one its coordinator gave
//! up on, which may then not run at all (its client heard `unknown`). All of this happens
//! as the log is applied, so every member of the log skips the same entries.

use super::wire::{Entry, TxnKey};
use meridian_core::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One coordinator incarnation's part: its floor and the counters logged at or above it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Incarnation {
    floor: u64,
    seqs: BTreeSet<u64>,
}

/// The transactions a log holds, by coordinator incarnation (`TxnKey`'s coordinator and
/// boot nonce).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Logged {
    by_incarnation: BTreeMap<(NodeId, u64), Incarnation>,
}

impl Logged {
    /// Applies a logged entry: true if it is new (to run), false if it is a duplicate or
    /// below its coordinator's floor.
    pub fn admit(&mut self, entry: &Entry) -> bool {
        let key = entry.key;
        let inc = self
            .by_incarnation
            .entry((key.coordinator, key.boot))
            .or_default();
        if entry.floor > inc.floor {
            inc.floor = entry.floor;
            inc.seqs = inc.seqs.split_off(&entry.floor);
        }
        key.seq >= inc.floor && inc.seqs.insert(key.seq)
    }

    /// True if an order for `key` needs no logging: it is logged, or its coordinator
    /// moved past it.
    pub fn settled(&self, key: &TxnKey) -> bool {
        self.by_incarnation
            .get(&(key.coordinator, key.boot))
            .is_some_and(|inc| key.seq < inc.floor || inc.seqs.contains(&key.seq))
    }

    /// Keys remembered (for the counters and tests: it follows what is in flight).
    pub fn len(&self) -> usize {
        self.by_incarnation.values().map(|i| i.seqs.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::txn::Txn;
    use std::sync::Arc;

    fn entry(seq: u64, floor: u64) -> Entry {
        Entry {
            key: TxnKey {
                coordinator: NodeId(4),
                boot: 9,
                seq,
            },
            txn: Arc::new(Txn { pieces: Vec::new() }),
            floor,
        }
    }

    /// A resent order is skipped; one below its coordinator's floor too (a duplicate of
    /// one logged, or one given up on), so every member skips the same entries.
    #[test]
    fn duplicates_and_orders_below_the_floor_are_skipped() {
        let mut logged = Logged::default();
        assert!(logged.admit(&entry(3, 3)));
        assert!(!logged.admit(&entry(3, 3)), "a resent order");
        assert!(logged.admit(&entry(5, 3)));
        assert!(logged.settled(&entry(5, 3).key));
        assert!(!logged.settled(&entry(4, 3).key));
        assert!(logged.admit(&entry(7, 6)));
        assert!(!logged.admit(&entry(4, 3)), "below the floor 6");
        assert!(logged.settled(&entry(4, 3).key));
        assert!(!logged.admit(&entry(5, 3)), "a duplicate below the floor");
    }

    /// Without the floor the keys of every transaction logged stayed for the run; with it
    /// what is remembered follows what the coordinator has in flight (here 8 at a time).
    #[test]
    fn what_is_remembered_follows_the_floor_not_the_run() {
        let mut logged = Logged::default();
        for seq in 1..10_000u64 {
            assert!(logged.admit(&entry(seq, seq.saturating_sub(7).max(1))));
            assert!(logged.len() <= 8, "{} keys at {seq}", logged.len());
        }
    }
}
