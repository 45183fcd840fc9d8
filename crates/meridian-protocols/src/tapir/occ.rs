//! TAPIR's versioned store and OCC validation at one replica (TAPIR §5.2,
//! TAPIR-OCC-CHECK; the strict variant the public implementation calls `linearizable`, and
//! the serializable one).
//!
//! The store keeps, per key, its committed versions in timestamp order, each with the
//! largest timestamp of a committed transaction that read it; the prepared list keeps the
//! read and write sets of transactions this replica voted PREPARE-OK for, indexed by key.

use super::wire::{ShardTxn, Vote};
use meridian_core::txn::{Key, Value};
use meridian_core::{Timestamp, TxnId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One committed version of a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Version {
    ts: Timestamp,
    value: Option<Value>,
    /// The largest commit timestamp of a transaction that read this version.
    last_read: Timestamp,
}

/// A key's retained versions (ascending), the largest read timestamp ever committed on it,
/// and whether older versions were pruned (then a read or write below them cannot be
/// validated and is refused conservatively).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct KeyVersions {
    versions: Vec<Version>,
    max_read: Timestamp,
    pruned: bool,
}

impl KeyVersions {
    fn latest_ts(&self) -> Timestamp {
        self.versions.last().map_or(Timestamp::ZERO, |v| v.ts)
    }

    /// The index of the version with timestamp `ts`; None if pruned (the implicit initial
    /// version, timestamp zero, is present unless pruned).
    fn find(&self, ts: Timestamp) -> Result<Option<usize>, ()> {
        match self.versions.binary_search_by_key(&ts, |v| v.ts) {
            Ok(i) => Ok(Some(i)),
            Err(_) if ts == Timestamp::ZERO && !self.pruned => Ok(None),
            Err(_) => Err(()),
        }
    }

    /// The timestamp of the first version after `ts`, if any.
    fn next_after(&self, ts: Timestamp) -> Option<Timestamp> {
        let i = self.versions.partition_point(|v| v.ts <= ts);
        self.versions.get(i).map(|v| v.ts)
    }

    /// The last read of the version valid at `ts` (the newest version below it).
    fn last_read_below(&self, ts: Timestamp) -> Result<Timestamp, ()> {
        match self.versions.partition_point(|v| v.ts < ts) {
            0 if self.pruned => Err(()),
            0 => Ok(Timestamp::ZERO),
            i => Ok(self.versions[i - 1].last_read),
        }
    }
}

/// The replica's committed store and prepared list. A checkpoint holds it as lists of
/// pairs (`OccSnapshot`): maps keyed by bytes or ids are not every format's map keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "OccSnapshot", from = "OccSnapshot")]
pub struct OccState {
    keys: BTreeMap<Key, KeyVersions>,
    prepared: BTreeMap<TxnId, (Timestamp, ShardTxn)>,
    /// Per key: (timestamp, txn, writes) of every prepared access; rebuilt on restore.
    index: FxHashMap<Key, Vec<(Timestamp, TxnId, bool)>>,
}

/// `OccState` as a checkpoint stores it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OccSnapshot {
    keys: Vec<(Key, KeyVersions)>,
    prepared: Vec<(TxnId, Timestamp, ShardTxn)>,
}

impl From<OccState> for OccSnapshot {
    fn from(state: OccState) -> OccSnapshot {
        OccSnapshot {
            keys: state.keys.into_iter().collect(),
            prepared: state
                .prepared
                .into_iter()
                .map(|(t, (ts, p))| (t, ts, p))
                .collect(),
        }
    }
}

impl From<OccSnapshot> for OccState {
    fn from(snapshot: OccSnapshot) -> OccState {
        let mut state = OccState {
            keys: snapshot.keys.into_iter().collect(),
            prepared: snapshot
                .prepared
                .into_iter()
                .map(|(t, ts, p)| (t, (ts, p)))
                .collect(),
            index: FxHashMap::default(),
        };
        state.reindex();
        state
    }
}

impl OccState {
    /// Rebuilds the prepared-access index from the prepared list.
    fn reindex(&mut self) {
        self.index.clear();
        let prepared = std::mem::take(&mut self.prepared);
        for (txn, (ts, part)) in &prepared {
            self.index_part(*txn, *ts, part);
        }
        self.prepared = prepared;
    }

    /// The latest committed version of `key`: (value, version timestamp).
    pub fn read(&self, key: &Key) -> (Option<Value>, Timestamp) {
        match self.keys.get(key).and_then(|k| k.versions.last()) {
            Some(v) => (v.value.clone(), v.ts),
            None => (None, Timestamp::ZERO),
        }
    }

    pub fn is_prepared(&self, txn: TxnId) -> bool {
        self.prepared.contains_key(&txn)
    }

    pub fn prepared_len(&self) -> usize {
        self.prepared.len()
    }

    /// TAPIR-OCC-CHECK of `txn` at `ts`; on PREPARE-OK the transaction joins the prepared
    /// list. An earlier attempt of `txn` is dropped first (a retry re-validates).
    pub fn prepare(&mut self, txn: TxnId, ts: Timestamp, part: &ShardTxn, strict: bool) -> Vote {
        self.remove(txn);
        let vote = self.check(txn, ts, part, strict);
        if vote == Vote::Ok {
            self.index_part(txn, ts, part);
            self.prepared.insert(txn, (ts, part.clone()));
        }
        vote
    }

    /// Puts `txn` in the prepared list without a check (TAPIR-SYNC adopting a master
    /// record's PREPARE-OK).
    pub fn force_prepare(&mut self, txn: TxnId, ts: Timestamp, part: &ShardTxn) {
        self.remove(txn);
        self.index_part(txn, ts, part);
        self.prepared.insert(txn, (ts, part.clone()));
    }

    /// Empties the prepared list (a view change's Sync rebuilds it from the master record).
    pub fn clear_prepared(&mut self) {
        self.prepared.clear();
        self.index.clear();
    }

    fn check(&self, txn: TxnId, ts: Timestamp, part: &ShardTxn, strict: bool) -> Vote {
        for (key, version) in &part.reads {
            let vote = self.check_read(txn, key, *version, ts, strict);
            if vote != Vote::Ok {
                return vote;
            }
        }
        for (key, _) in &part.writes {
            let vote = self.check_write(txn, key, ts, strict);
            if vote != Vote::Ok {
                return vote;
            }
        }
        Vote::Ok
    }

    /// A read of `version` validates at `ts` if the version is still valid there: strict,
    /// it is the latest (and no write to the key is prepared); serializable, no committed
    /// version lies in (version, ts] (and no prepared write does).
    fn check_read(
        &self,
        txn: TxnId,
        key: &Key,
        version: Timestamp,
        ts: Timestamp,
        strict: bool,
    ) -> Vote {
        let empty = KeyVersions::default();
        let k = self.keys.get(key).unwrap_or(&empty);
        if k.find(version).is_err() {
            return Vote::Abort;
        }
        let stale = match k.next_after(version) {
            Some(next) => strict || next <= ts,
            None => false,
        };
        if stale {
            return Vote::Abort;
        }
        let conflicting_write = self
            .prepared_on(key, txn)
            .any(|(w, writes)| writes && (strict || (version < w && w < ts)));
        if conflicting_write {
            Vote::Abstain
        } else {
            Vote::Ok
        }
    }

    /// A write at `ts` validates if no committed or prepared transaction read the version
    /// it would supersede at a later timestamp (strict: no read or write of the key at a
    /// later timestamp at all, so versions are installed in timestamp order).
    fn check_write(&self, txn: TxnId, key: &Key, ts: Timestamp, strict: bool) -> Vote {
        let empty = KeyVersions::default();
        let k = self.keys.get(key).unwrap_or(&empty);
        if strict {
            let later = k.latest_ts().max(k.max_read);
            if later > ts {
                return Vote::Retry(later);
            }
            let later_write = self
                .prepared_on(key, txn)
                .filter(|(w, writes)| *writes && *w > ts)
                .map(|(w, _)| w)
                .max();
            if let Some(w) = later_write {
                return Vote::Retry(w);
            }
        } else {
            match k.last_read_below(ts) {
                Ok(read) if read > ts => return Vote::Retry(read),
                Ok(_) => {}
                Err(()) => return Vote::Retry(k.latest_ts()),
            }
        }
        if self
            .prepared_on(key, txn)
            .any(|(r, writes)| !writes && r > ts)
        {
            return Vote::Abstain;
        }
        Vote::Ok
    }

    /// Prepared accesses of `key` by transactions other than `txn`: (timestamp, writes).
    fn prepared_on<'a>(
        &'a self,
        key: &Key,
        txn: TxnId,
    ) -> impl Iterator<Item = (Timestamp, bool)> + 'a {
        self.index
            .get(key)
            .into_iter()
            .flatten()
            .filter(move |(_, t, _)| *t != txn)
            .map(|(ts, _, w)| (*ts, *w))
    }

    fn index_part(&mut self, txn: TxnId, ts: Timestamp, part: &ShardTxn) {
        let reads = part.reads.iter().map(|(k, _)| (k, false));
        let writes = part.writes.iter().map(|(k, _)| (k, true));
        for (key, write) in reads.chain(writes) {
            self.index
                .entry(key.clone())
                .or_default()
                .push((ts, txn, write));
        }
    }

    /// Drops `txn` from the prepared list (abort, or before a commit or a new attempt).
    pub fn remove(&mut self, txn: TxnId) {
        let Some((_, part)) = self.prepared.remove(&txn) else {
            return;
        };
        let keys = part
            .reads
            .iter()
            .map(|(k, _)| k)
            .chain(part.writes.iter().map(|(k, _)| k));
        for key in keys {
            if let Some(list) = self.index.get_mut(key) {
                list.retain(|(_, t, _)| *t != txn);
                if list.is_empty() {
                    self.index.remove(key);
                }
            }
        }
    }

    /// Applies a commit at `ts`: reads mark their versions read at `ts`, writes install
    /// versions (idempotent). Keeps at most `versions_kept` versions per key.
    pub fn commit(&mut self, txn: TxnId, ts: Timestamp, part: &ShardTxn, versions_kept: usize) {
        self.remove(txn);
        for (key, version) in &part.reads {
            let k = self.keys.entry(key.clone()).or_default();
            k.max_read = k.max_read.max(ts);
            if let Ok(Some(i)) = k.find(*version) {
                k.versions[i].last_read = k.versions[i].last_read.max(ts);
            } else if *version == Timestamp::ZERO && !k.pruned {
                // The implicit initial version: materialise it to carry its last read.
                k.versions.insert(
                    0,
                    Version {
                        ts: Timestamp::ZERO,
                        value: None,
                        last_read: ts,
                    },
                );
            }
        }
        for (key, value) in &part.writes {
            let k = self.keys.entry(key.clone()).or_default();
            let i = k.versions.partition_point(|v| v.ts < ts);
            if k.versions.get(i).is_none_or(|v| v.ts != ts) {
                let version = Version {
                    ts,
                    value: Some(value.clone()),
                    last_read: Timestamp::ZERO,
                };
                k.versions.insert(i, version);
            }
            if k.versions.len() > versions_kept {
                let excess = k.versions.len() - versions_kept;
                k.versions.drain(..excess);
                k.pruned = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::NodeId;

    fn key(s: &str) -> Key {
        Key::copy_from_slice(s.as_bytes())
    }
    fn ts(t: u64) -> Timestamp {
        Timestamp::new(t, 0)
    }
    fn txn(n: u64) -> TxnId {
        TxnId::new(NodeId(1), 0, n)
    }
    fn part(reads: &[(&str, u64)], writes: &[&str]) -> ShardTxn {
        ShardTxn {
            reads: reads.iter().map(|(k, v)| (key(k), ts(*v))).collect(),
            writes: writes
                .iter()
                .map(|k| (key(k), Key::copy_from_slice(b"v")))
                .collect(),
        }
    }

    #[test]
    fn a_stale_read_aborts_and_a_prepared_write_makes_readers_abstain() {
        for strict in [true, false] {
            let mut occ = OccState::default();
            occ.commit(txn(1), ts(10), &part(&[], &["x"]), 8);
            assert_eq!(occ.read(&key("x")).1, ts(10));
            assert_eq!(
                occ.prepare(txn(2), ts(20), &part(&[("x", 0)], &[]), strict),
                Vote::Abort
            );
            assert_eq!(
                occ.prepare(txn(3), ts(30), &part(&[("x", 10)], &["x"]), strict),
                Vote::Ok
            );
            assert_eq!(
                occ.prepare(txn(4), ts(40), &part(&[("x", 10)], &[]), strict),
                Vote::Abstain
            );
            occ.remove(txn(3));
            assert_eq!(
                occ.prepare(txn(4), ts(40), &part(&[("x", 10)], &[]), strict),
                Vote::Ok
            );
        }
    }

    #[test]
    fn a_write_below_a_later_read_is_asked_to_retry() {
        for strict in [true, false] {
            let mut occ = OccState::default();
            occ.commit(txn(1), ts(50), &part(&[("x", 0)], &[]), 8);
            assert_eq!(
                occ.prepare(txn(2), ts(20), &part(&[], &["x"]), strict),
                Vote::Retry(ts(50))
            );
            assert_eq!(
                occ.prepare(txn(2), ts(60), &part(&[], &["x"]), strict),
                Vote::Ok
            );
            // A prepared read at a later timestamp makes a write abstain.
            assert_eq!(
                occ.prepare(txn(3), ts(90), &part(&[("y", 0)], &[]), strict),
                Vote::Ok
            );
            assert_eq!(
                occ.prepare(txn(4), ts(70), &part(&[], &["y"]), strict),
                Vote::Abstain
            );
        }
    }

    #[test]
    fn only_the_serializable_variant_installs_a_write_below_the_latest_version() {
        let mut occ = OccState::default();
        occ.commit(txn(1), ts(50), &part(&[], &["x"]), 8);
        let strict = occ.prepare(txn(2), ts(20), &part(&[], &["x"]), true);
        assert_eq!(strict, Vote::Retry(ts(50)));
        assert_eq!(
            occ.prepare(txn(2), ts(20), &part(&[], &["x"]), false),
            Vote::Ok
        );
        occ.commit(txn(2), ts(20), &part(&[], &["x"]), 8);
        assert_eq!(
            occ.read(&key("x")).1,
            ts(50),
            "the latest version stays the latest"
        );
        // A read of version 20 is valid at 30 (serializable), not at 60, never when strict.
        assert_eq!(
            occ.prepare(txn(3), ts(30), &part(&[("x", 20)], &[]), false),
            Vote::Ok
        );
        assert_eq!(
            occ.prepare(txn(4), ts(60), &part(&[("x", 20)], &[]), false),
            Vote::Abort
        );
        assert_eq!(
            occ.prepare(txn(5), ts(30), &part(&[("x", 20)], &[]), true),
            Vote::Abort
        );
    }

    #[test]
    fn a_checkpoint_round_trip_restores_the_store_and_the_prepared_index() {
        let mut occ = OccState::default();
        occ.commit(txn(1), ts(5), &part(&[("y", 0)], &["y"]), 8);
        occ.prepare(txn(2), ts(10), &part(&[], &["x"]), true);
        let text = serde_json::to_string(&occ).expect("serializes");
        let mut copy: OccState = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(copy, occ);
        assert_eq!(copy.read(&key("y")).1, ts(5));
        let vote = copy.prepare(txn(3), ts(20), &part(&[("x", 0)], &[]), true);
        assert_eq!(vote, Vote::Abstain);
    }
}
