//! A primary's multi-version store: per key, committed versions indexed by their commit
//! timestamps, at most one write intent (CockroachDB's lock), and the timestamp cache
//! (the highest timestamp that read the key, and who).

use super::wire::{TxnMeta, TxnRef};
use crate::kit::hlc::HlcTs;
use meridian_core::txn::{Key, KvAccess, Value};
use rustc_hash::FxHashMap;

/// A provisional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub txn: TxnMeta,
    pub value: Value,
    /// Where it was laid; it commits at its transaction's commit timestamp (≥ this).
    pub ts: HlcTs,
    /// The step that laid it (status recovery asks for the latest one).
    pub step: u32,
}

/// The timestamp cache entry of a key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadMark {
    pub ts: HlcTs,
    /// The only transaction that read at `ts`, if one did (its own writes need no push);
    /// None after a tie or a prevention.
    pub reader: Option<TxnRef>,
}

#[derive(Clone, Debug, Default)]
pub struct KeyState {
    /// Committed versions, oldest first.
    pub versions: Vec<(HlcTs, Value)>,
    /// Versions below this were discarded.
    pub pruned_below: HlcTs,
    pub intent: Option<Intent>,
    pub read: ReadMark,
}

impl KeyState {
    /// The newest committed version's timestamp.
    pub fn newest(&self) -> Option<HlcTs> {
        self.versions.last().map(|(ts, _)| *ts)
    }

    /// The newest version at or below `ts`.
    pub fn value_at(&self, ts: HlcTs) -> Option<Value> {
        let newer = self.versions.partition_point(|(v, _)| *v <= ts);
        newer.checked_sub(1).map(|i| self.versions[i].1.clone())
    }

    /// The newest version in `(from, to]`, if any.
    pub fn newest_in(&self, from: HlcTs, to: HlcTs) -> Option<HlcTs> {
        self.versions
            .iter()
            .rev()
            .map(|(ts, _)| *ts)
            .find(|ts| *ts > from && *ts <= to)
    }

    /// Another transaction's intent (what `txn` must wait for or push).
    pub fn foreign_intent(&self, txn: TxnRef) -> Option<&Intent> {
        self.intent.as_ref().filter(|i| i.txn.id != txn)
    }

    pub fn own_intent(&self, txn: TxnRef) -> Option<&Intent> {
        self.intent.as_ref().filter(|i| i.txn.id == txn)
    }

    /// Records a read at `ts` by `reader` (`None`: a prevention, which pushes everyone).
    pub fn mark_read(&mut self, ts: HlcTs, reader: Option<TxnRef>) {
        if ts > self.read.ts {
            self.read = ReadMark { ts, reader };
        } else if ts == self.read.ts && self.read.reader != reader {
            self.read.reader = None;
        }
    }

    /// The lowest timestamp `txn` may write at, given `floor` (the recovered cache) and
    /// `write_ts`: above every other reader and every committed version.
    pub fn write_floor(&self, txn: TxnRef, write_ts: HlcTs, floor: HlcTs) -> HlcTs {
        let mut ts = write_ts;
        if self.read.ts >= ts && self.read.reader != Some(txn) {
            ts = self.read.ts.next();
        }
        if floor >= ts {
            ts = floor.next();
        }
        if let Some(newest) = self.newest().filter(|v| *v >= ts) {
            ts = newest.next();
        }
        ts
    }

    /// Resolves the intent of `txn`: committed at `ts`, a version; else dropped.
    pub fn resolve(&mut self, txn: TxnRef, commit_ts: Option<HlcTs>, max_versions: usize) {
        if self.own_intent(txn).is_none() {
            return;
        }
        let intent = self.intent.take().expect("checked");
        if let Some(ts) = commit_ts {
            self.insert_version(ts, intent.value, max_versions);
        }
    }

    pub fn insert_version(&mut self, ts: HlcTs, value: Value, max_versions: usize) {
        let at = self.versions.partition_point(|(v, _)| *v < ts);
        if self.versions.get(at).is_some_and(|(v, _)| *v == ts) {
            return;
        }
        self.versions.insert(at, (ts, value));
        if self.versions.len() > max_versions {
            let drop = self.versions.len() - max_versions;
            self.versions.drain(..drop);
            self.pruned_below = self.versions[0].0;
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Store {
    pub keys: FxHashMap<Key, KeyState>,
    /// The timestamp cache of every key after a recovery (the log's floor).
    pub floor: HlcTs,
}

impl Store {
    pub fn key(&self, key: &Key) -> Option<&KeyState> {
        self.keys.get(key)
    }

    pub fn key_mut(&mut self, key: &Key) -> &mut KeyState {
        self.keys.entry(key.clone()).or_default()
    }

    pub fn check(&self) -> Result<(), String> {
        for (key, state) in &self.keys {
            if !state.versions.windows(2).all(|w| w[0].0 < w[1].0) {
                return Err(format!("versions of {key:?} out of order"));
            }
        }
        Ok(())
    }
}

/// What a piece evaluates against: the snapshot at its read timestamp, its own intents
/// first, with its writes collected rather than applied.
pub struct View<'a> {
    pub store: &'a Store,
    pub txn: TxnRef,
    pub ts: HlcTs,
    pub writes: Vec<(Key, Value)>,
}

impl KvAccess for View<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        if let Some((_, v)) = self.writes.iter().rev().find(|(k, _)| k == key) {
            return Some(v.clone());
        }
        let state = self.store.key(key)?;
        match state.own_intent(self.txn) {
            Some(own) => Some(own.value.clone()),
            None => state.value_at(self.ts),
        }
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
    use meridian_core::NodeId;

    fn ts(wall_ns: u64) -> HlcTs {
        HlcTs {
            wall_ns,
            logical: 0,
        }
    }

    fn txn(seq: u64) -> TxnRef {
        TxnRef {
            coordinator: NodeId(9),
            incarnation: 0,
            seq,
        }
    }

    #[test]
    fn a_write_lands_above_other_readers_and_committed_versions_but_not_its_own_read() {
        let mut s = KeyState::default();
        s.mark_read(ts(50), Some(txn(1)));
        assert_eq!(
            s.write_floor(txn(2), ts(40), HlcTs::default()),
            ts(50).next()
        );
        assert_eq!(s.write_floor(txn(1), ts(40), HlcTs::default()), ts(40));
        s.insert_version(ts(70), Value::copy_from_slice(b"v"), 8);
        assert_eq!(
            s.write_floor(txn(1), ts(40), HlcTs::default()),
            ts(70).next()
        );
        assert_eq!(s.write_floor(txn(1), ts(90), ts(100)), ts(100).next());
    }

    #[test]
    fn a_tie_or_a_prevention_forgets_the_reader() {
        let mut s = KeyState::default();
        s.mark_read(ts(50), Some(txn(1)));
        s.mark_read(ts(50), Some(txn(2)));
        assert_eq!(s.read.reader, None);
        let mut s = KeyState::default();
        s.mark_read(ts(50), Some(txn(1)));
        s.mark_read(ts(60), None);
        assert_eq!(
            s.write_floor(txn(1), ts(55), HlcTs::default()),
            ts(60).next()
        );
    }

    #[test]
    fn versions_in_a_window() {
        let mut s = KeyState::default();
        for t in [10, 20, 30] {
            s.insert_version(ts(t), Value::copy_from_slice(b"v"), 8);
        }
        assert_eq!(s.newest_in(ts(10), ts(25)), Some(ts(20)));
        assert_eq!(s.newest_in(ts(30), ts(99)), None);
        assert_eq!(s.value_at(ts(5)), None);
    }
}
