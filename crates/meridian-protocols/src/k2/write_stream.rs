//! A primary's multi-version store (§5.1): per key, the committed versions indexed by
//! their writers' start timestamps, the write stream (WS: the undetermined write intents,
//! several per key) and the read version tracker (RT: the highest timestamp that read it).

use super::wire::TxnTs;
use meridian_core::txn::{Key, KvAccess, Value};
use meridian_core::{NodeId, Timestamp};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An undetermined write (a write intent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub value: Value,
    /// Where its transaction's status is recorded.
    pub recorder: NodeId,
}

/// A committed version (§5.1: indexed by its writer's start timestamp), with the epoch
/// K2-VCR assigned its writer (§6.3) and the local time it was finalized here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub ts: TxnTs,
    pub value: Value,
    /// The commit epoch (0 with K2-VCR off).
    pub epoch: u64,
    /// When the primary finalized it (its local clock): the start of the visibility delay.
    pub finalized_ns: u64,
}

/// One key's versions, write stream and read tracker.
#[derive(Clone, Debug, Default)]
pub struct KeyState {
    /// Committed versions, oldest first.
    pub versions: Vec<Version>,
    /// Versions below this were discarded: a read below it cannot be answered.
    pub pruned_below: Timestamp,
    /// The write stream.
    pub intents: BTreeMap<TxnTs, Intent>,
    /// RT: the highest timestamp that read this key.
    pub read_ts: Timestamp,
}

impl KeyState {
    /// The value a reader at `ts` sees, its own intent first (ignores other intents:
    /// callers resolve those first).
    pub fn value_at(&self, ts: TxnTs) -> Option<Value> {
        if let Some(own) = self.intents.get(&ts) {
            return Some(own.value.clone());
        }
        let newer = self.versions.partition_point(|v| v.ts <= ts);
        newer.checked_sub(1).map(|i| self.versions[i].value.clone())
    }

    /// The newest version in a replica read view (every epoch up to `epoch`, §6.4).
    pub fn value_in_epoch(&self, epoch: u64) -> Option<&Version> {
        self.versions.iter().rev().find(|v| v.epoch <= epoch)
    }

    /// Other transactions' intents below `ts` (Fig. 10 line 1: what a reader must push).
    pub fn undetermined_below(&self, ts: TxnTs) -> impl Iterator<Item = (TxnTs, NodeId)> + '_ {
        self.intents
            .range(..ts)
            .map(|(t, intent)| (*t, intent.recorder))
    }

    /// Whether anything newer than `ts` was written (a single-version reader at `ts`
    /// cannot read this key: Fig. 19 without multi-version reads).
    pub fn newer_than(&self, ts: TxnTs) -> bool {
        self.versions.last().is_some_and(|v| v.ts > ts)
            || self.intents.range(ts..).any(|(t, _)| *t != ts)
    }

    /// Finalizes `txn`'s intent: a committed one becomes a version (§5.2 Phase 3) of
    /// commit epoch `epoch`. Keeps at most `max_versions` versions.
    pub fn finalize(&mut self, txn: TxnTs, committed: Option<(u64, u64)>, max_versions: usize) {
        let Some(intent) = self.intents.remove(&txn) else {
            return;
        };
        let Some((epoch, finalized_ns)) = committed else {
            return;
        };
        let version = Version {
            ts: txn,
            value: intent.value,
            epoch,
            finalized_ns,
        };
        self.insert_version(version, max_versions);
    }

    /// Inserts a committed version in timestamp order; keeps at most `max_versions`.
    pub fn insert_version(&mut self, version: Version, max_versions: usize) {
        let at = self.versions.partition_point(|v| v.ts < version.ts);
        if self.versions.get(at).is_some_and(|v| v.ts == version.ts) {
            return;
        }
        self.versions.insert(at, version);
        if self.versions.len() > max_versions {
            let drop = self.versions.len() - max_versions;
            self.versions.drain(..drop);
            self.pruned_below = self.versions[0].ts;
        }
    }
}

/// The store of one primary.
#[derive(Clone, Debug, Default)]
pub struct Store {
    pub keys: FxHashMap<Key, KeyState>,
    /// RT for every key after a recovery: reads up to it may have been served before the
    /// crash (the log's read floor, §5.3).
    pub read_floor: Timestamp,
}

impl Store {
    pub fn key(&self, key: &Key) -> Option<&KeyState> {
        self.keys.get(key)
    }

    pub fn key_mut(&mut self, key: &Key) -> &mut KeyState {
        self.keys.entry(key.clone()).or_default()
    }

    /// Fig. 10 line 4: record a read at `ts`.
    pub fn record_read(&mut self, key: &Key, ts: TxnTs) {
        let state = self.key_mut(key);
        state.read_ts = state.read_ts.max(ts);
    }

    /// Fig. 10 line 6: a write at `ts` below a read of another transaction must abort.
    pub fn write_refused(&self, key: &Key, ts: TxnTs) -> bool {
        self.read_floor > ts || self.key(key).is_some_and(|s| s.read_ts > ts)
    }

    /// Checks the invariants a bug could break.
    pub fn check(&self) -> Result<(), String> {
        for (key, state) in &self.keys {
            if !state.versions.windows(2).all(|w| w[0].ts < w[1].ts) {
                return Err(format!("versions of {key:?} out of order"));
            }
            if state
                .versions
                .first()
                .is_some_and(|v| v.ts < state.pruned_below)
            {
                return Err(format!("{key:?} keeps a version below its pruning point"));
            }
        }
        Ok(())
    }
}

/// What a piece executes against: the snapshot at its transaction's timestamp, its own
/// intents included, with its writes collected rather than applied.
pub struct View<'a> {
    pub store: &'a Store,
    pub ts: TxnTs,
    pub writes: Vec<(Key, Value)>,
}

impl KvAccess for View<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        if let Some((_, v)) = self.writes.iter().rev().find(|(k, _)| k == key) {
            return Some(v.clone());
        }
        self.store.key(key).and_then(|s| s.value_at(self.ts))
    }

    fn put(&mut self, key: Key, value: Value) {
        match self.writes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.writes.push((key, value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(t: u64) -> TxnTs {
        Timestamp::new(t, 0)
    }

    fn key() -> Key {
        Key::copy_from_slice(b"k")
    }

    fn val(v: u8) -> Value {
        Value::copy_from_slice(&[v])
    }

    fn intent(v: u8) -> Intent {
        Intent {
            value: val(v),
            recorder: NodeId(0),
        }
    }

    #[test]
    fn readers_see_the_latest_committed_version_at_or_below_their_timestamp() {
        let mut s = KeyState::default();
        s.intents.insert(ts(10), intent(1));
        s.intents.insert(ts(20), intent(2));
        s.finalize(ts(20), Some((1, 0)), 8);
        s.finalize(ts(10), Some((1, 0)), 8);
        assert_eq!(s.value_at(ts(5)), None);
        assert_eq!(s.value_at(ts(15)), Some(val(1)));
        assert_eq!(s.value_at(ts(25)), Some(val(2)));
    }

    #[test]
    fn a_write_stream_holds_several_intents_and_readers_push_only_those_below_them() {
        let mut s = KeyState::default();
        s.intents.insert(ts(10), intent(1));
        s.intents.insert(ts(30), intent(3));
        let below: Vec<_> = s.undetermined_below(ts(20)).map(|(t, _)| t).collect();
        assert_eq!(below, vec![ts(10)]);
        s.finalize(ts(10), None, 8);
        assert_eq!(s.undetermined_below(ts(20)).count(), 0);
        assert_eq!(s.value_at(ts(20)), None, "an aborted intent leaves nothing");
        assert_eq!(
            s.value_at(ts(30)),
            Some(val(3)),
            "a writer reads its own intent"
        );
    }

    #[test]
    fn pruning_keeps_the_newest_versions_and_remembers_where_it_cut() {
        let mut s = KeyState::default();
        for t in 1..=5u8 {
            s.intents.insert(ts(t.into()), intent(t));
            s.finalize(ts(t.into()), Some((1, 0)), 3);
        }
        assert_eq!(s.versions.len(), 3);
        assert_eq!(s.pruned_below, ts(3));
    }

    #[test]
    fn a_write_below_a_read_or_the_recovered_floor_is_refused() {
        let mut store = Store::default();
        store.record_read(&key(), ts(10));
        assert!(store.write_refused(&key(), ts(9)));
        assert!(!store.write_refused(&key(), ts(10)), "its own read");
        store.read_floor = ts(50);
        assert!(store.write_refused(&Key::copy_from_slice(b"other"), ts(49)));
    }
}
