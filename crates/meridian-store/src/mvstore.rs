//! The multi-version store: per key, a timestamp-ordered list of versions, each pending or
//! committed, each with the largest timestamp that has read it. See the crate docs for the
//! guarantees and the choices made where the papers are silent.

use crate::access::{TxnAccess, Visibility};
use meridian_core::SmallBytes;
use meridian_core::{Key, NodeId, Timestamp, TxnId, Value};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::cmp::max;

/// Whether a version's writer has committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VersionStatus {
    /// Written but not committed: Tiga's optimistic execution before timestamp agreement,
    /// Clock-SI's prepared (or committing) write, Aurogon's installed write.
    Pending,
    /// Committed; visible to every reader at or above its timestamp.
    Committed,
}

/// One version of one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Version {
    /// The version's timestamp (its write timestamp, `wts`).
    pub ts: Timestamp,
    /// The value, or `None` for a tombstone (a delete).
    pub value: Option<Value>,
    /// The transaction that wrote it.
    pub writer: TxnId,
    pub status: VersionStatus,
    /// The largest timestamp that has read this version through a *tracked* read
    /// (Aurogon's `rts`, MVTO's read timestamp). Starts at `ts` (never below it), so a
    /// write at `w` conflicts with the reads of the version it would follow iff
    /// `w < max_read_ts`.
    pub max_read_ts: Timestamp,
}

impl Version {
    fn pending(ts: Timestamp, writer: TxnId, value: Option<Value>) -> Version {
        Version {
            ts,
            value,
            writer,
            status: VersionStatus::Pending,
            max_read_ts: ts,
        }
    }

    pub fn is_committed(&self) -> bool {
        self.status == VersionStatus::Committed
    }

    pub fn is_pending(&self) -> bool {
        self.status == VersionStatus::Pending
    }

    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

/// Why the store refused an operation. Every variant is something a correct protocol can
/// run into (late messages, timestamp collisions), so none of them panics.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Reads, writes and checkpoints below the GC watermark are refused: the versions they
    /// need may be gone (the snapshot is too old).
    #[error("timestamp {ts} is below the garbage-collection watermark {watermark}")]
    BelowWatermark { ts: Timestamp, watermark: Timestamp },
    /// Another transaction (or this one, already committed) owns a version of the key at
    /// exactly this timestamp.
    #[error("key {key:?} already has a version at {ts} written by {writer}")]
    TimestampTaken {
        key: Key,
        ts: Timestamp,
        writer: TxnId,
    },
    /// The transaction already has a pending version of the key at another timestamp: a
    /// transaction has at most one pending version per key (revoke it first, or commit it
    /// to a new timestamp with [`MvStore::commit_at`]).
    #[error("{txn} already has a pending version of key {key:?} at {existing}")]
    PendingElsewhere {
        key: Key,
        txn: TxnId,
        existing: Timestamp,
    },
    /// A checkpoint handed to [`MvStore::restore`] is malformed.
    #[error("invalid checkpoint: {0}")]
    BadCheckpoint(String),
}

/// The versions of one key, strictly increasing by timestamp, plus the read timestamp of
/// the implicit "absent" version below the first one.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyVersions {
    /// Inline for one version, the common case (a key written once, or collected back to
    /// its latest version), so materializing a key allocates nothing beyond its map slot.
    pub(crate) versions: SmallVec<[Version; 1]>,
    /// The largest tracked read that found no version (read the key as absent).
    pub(crate) floor_read_ts: Timestamp,
}

impl KeyVersions {
    fn find(&self, ts: Timestamp) -> Result<usize, usize> {
        self.versions.binary_search_by(|v| v.ts.cmp(&ts))
    }

    /// The latest version with `v.ts <= ts`.
    fn index_le(&self, ts: Timestamp) -> Option<usize> {
        self.versions.partition_point(|v| v.ts <= ts).checked_sub(1)
    }

    /// The latest version with `v.ts < ts`.
    fn index_lt(&self, ts: Timestamp) -> Option<usize> {
        self.versions.partition_point(|v| v.ts < ts).checked_sub(1)
    }

    /// The latest version `<= ts` that `visibility` lets `txn` see.
    pub(crate) fn visible_index(
        &self,
        ts: Timestamp,
        txn: TxnId,
        visibility: Visibility,
    ) -> Option<usize> {
        let end = self.versions.partition_point(|v| v.ts <= ts);
        match visibility {
            Visibility::All => end.checked_sub(1),
            Visibility::CommittedAndOwn => self.versions[..end]
                .iter()
                .rposition(|v| v.is_committed() || v.writer == txn),
        }
    }

    /// The latest committed version `<= ts`.
    pub(crate) fn committed_index_le(&self, ts: Timestamp) -> Option<usize> {
        let end = self.versions.partition_point(|v| v.ts <= ts);
        self.versions[..end].iter().rposition(Version::is_committed)
    }

    /// Raises the read timestamp of version `index` (or of the absent floor) to `ts`.
    pub(crate) fn raise_read_ts(&mut self, index: Option<usize>, ts: Timestamp) {
        let slot = match index {
            Some(i) => &mut self.versions[i].max_read_ts,
            None => &mut self.floor_read_ts,
        };
        *slot = max(*slot, ts);
    }

    /// Removes version `i`; the reads it served now land on its predecessor.
    fn remove_version(&mut self, i: usize) -> Version {
        let v = self.versions.remove(i);
        if v.max_read_ts > v.ts {
            self.raise_read_ts(i.checked_sub(1), v.max_read_ts);
        }
        v
    }

    /// Moves version `i` to timestamp `to` (which no version holds). Tracked reads of the
    /// version below `to` now land on some version between its old predecessor and its new
    /// one; all of those absorb them (conservative: it can only cause extra conflicts).
    fn move_version(&mut self, i: usize, to: Timestamp) {
        let mut v = self.versions.remove(i);
        let (from, read) = (v.ts, v.max_read_ts);
        v.ts = to;
        v.max_read_ts = max(read, to);
        let j = self
            .find(to)
            .expect_err("move_version: target timestamp is taken");
        if to > from && read > from {
            let fold = read.min(to);
            if i == 0 {
                self.floor_read_ts = max(self.floor_read_ts, fold);
            }
            for w in &mut self.versions[i.saturating_sub(1)..j] {
                w.max_read_ts = max(w.max_read_ts, fold);
            }
        }
        self.versions.insert(j, v);
    }

    /// The key holds nothing worth keeping.
    fn is_vacant(&self) -> bool {
        self.versions.is_empty() && self.floor_read_ts == Timestamp::ZERO
    }

    /// A watermark below which `gc` cannot shrink this key: pruning needs a committed
    /// version at or below the watermark after the first one (or, to forget the floor of
    /// reads below the first version, the first), and a key with two or more versions is not
    /// dead. Zero (always look) for one version or none.
    fn gc_ready_at(&self) -> Timestamp {
        match self.versions.as_slice() {
            [] | [_] => Timestamp::ZERO,
            [first, ..] if self.floor_read_ts > Timestamp::ZERO => first.ts,
            [_, second, ..] => second.ts,
        }
    }

    /// Whether a later `gc` may still shrink this key. A lone version with a value never
    /// needs it, pending or committed: `gc` keeps pending versions, committing one leaves
    /// a lone committed value, and revoking it empties the key, which goes at once. So a
    /// key's first write does not make it a candidate (the common case in a large key
    /// space, where most writes land on fresh keys).
    fn wants_gc(&self) -> bool {
        self.floor_read_ts > Timestamp::ZERO
            || !matches!(self.versions.as_slice(), [v] if v.value.is_some())
    }

    /// Drops committed versions older than the newest committed version `<= watermark`
    /// (pending ones stay until their writer commits or is revoked). Returns what went.
    fn prune(&mut self, watermark: Timestamp, dropped: &mut Vec<(Timestamp, TxnId)>) {
        let Some(anchor) = self
            .versions
            .iter()
            .rposition(|v| v.ts <= watermark && v.is_committed())
        else {
            return;
        };
        // Reads and writes below `watermark` are refused from now on, so the floor (reads
        // of the key as absent, below the first version) can never matter again.
        self.floor_read_ts = Timestamp::ZERO;
        let mut index = 0;
        self.versions.retain(|v| {
            let keep = index >= anchor || v.is_pending();
            index += 1;
            if !keep {
                dropped.push((v.ts, v.writer));
            }
            keep
        });
    }

    /// After pruning: the key is a lone committed tombstone (or nothing) at or below the
    /// watermark that no read above the watermark has seen, so dropping the key changes no
    /// answer a read at or above the watermark can get (except that it reports "no version"
    /// instead of the tombstone).
    fn is_dead(&self, watermark: Timestamp) -> bool {
        self.floor_read_ts <= watermark
            && match self.versions.as_slice() {
                [] => true,
                [v] => v.is_committed() && v.is_tombstone() && v.max_read_ts <= watermark,
                _ => false,
            }
    }

    /// Invariants only a bug can break.
    pub(crate) fn check(&self, key: &[u8]) {
        for pair in self.versions.windows(2) {
            assert!(
                pair[0].ts < pair[1].ts,
                "versions of {key:?} are not strictly ordered: {} then {}",
                pair[0].ts,
                pair[1].ts
            );
        }
        for (i, v) in self.versions.iter().enumerate() {
            assert!(
                v.max_read_ts >= v.ts,
                "version {} of {key:?} has read ts {} below it",
                v.ts,
                v.max_read_ts
            );
            if v.is_pending() {
                assert!(
                    !self.versions[i + 1..]
                        .iter()
                        .any(|w| w.is_pending() && w.writer == v.writer),
                    "{} has two pending versions of {key:?}",
                    v.writer
                );
            }
        }
    }
}

/// A multi-version key-value store for one shard (or one replica of it).
///
/// Keys materialize lazily: an untouched key costs nothing. Every version is indexed by its
/// writer, so committing and revoking a transaction costs O(its writes).
#[derive(Clone, Debug, Default)]
pub struct MvStore {
    pub(crate) keys: FxHashMap<Key, KeyVersions>,
    /// Every version by writer, `(key, version ts)`, except the committed ones whose
    /// writer [`MvStore::commit_final`] forgot (counted in `forgotten`).
    pub(crate) by_txn: FxHashMap<TxnId, Written>,
    /// Keys that changed since the last `gc` (or that `gc` could not finish with), each with
    /// a watermark below which `gc` cannot shrink it (a lower bound, see
    /// [`KeyVersions::gc_ready_at`]): `gc` passes over the others without looking them up.
    gc_candidates: FxHashMap<Key, Timestamp>,
    pub(crate) watermark: Timestamp,
    version_count: usize,
    pending_count: usize,
    /// Committed versions whose writer's index [`MvStore::commit_final`] dropped.
    forgotten: usize,
}

/// A writer's versions as `(key, version ts)`: inline for one, the common case (a
/// transaction writes a key or two per shard).
pub(crate) type Written = SmallVec<[(Key, Timestamp); 1]>;

/// What [`MvStore::gc`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Versions dropped (including lone tombstones of dropped keys).
    pub versions: usize,
    /// Keys dropped entirely.
    pub keys: usize,
}

/// Makes room for one more element, growing a short vector by exactly one: most keys
/// keep one or two versions and most transactions write a few keys per shard, where the
/// default growth (straight to four) would mostly hold empty slots (a store of a million
/// keys per replica spent most of its memory on them). Longer vectors grow as usual.
fn reserve_small<A: smallvec::Array>(v: &mut SmallVec<A>) {
    const SMALL: usize = 4;
    if v.len() < SMALL {
        v.reserve_exact(1);
    } else {
        v.reserve(1);
    }
}

impl MvStore {
    pub fn new() -> MvStore {
        MvStore::default()
    }

    // ---- counts -------------------------------------------------------------------------

    /// Materialized keys (keys with a version, or with a tracked read of their absence).
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Versions held, pending and committed.
    pub fn version_count(&self) -> usize {
        self.version_count
    }

    /// Pending versions held.
    pub fn pending_count(&self) -> usize {
        self.pending_count
    }

    /// Transactions that own at least one version.
    pub fn txn_count(&self) -> usize {
        self.by_txn.len()
    }

    /// The GC watermark: reads, writes and checkpoints below it are refused.
    pub fn watermark(&self) -> Timestamp {
        self.watermark
    }

    fn check_watermark(&self, ts: Timestamp) -> Result<(), StoreError> {
        if ts < self.watermark {
            return Err(StoreError::BelowWatermark {
                ts,
                watermark: self.watermark,
            });
        }
        Ok(())
    }

    // ---- writes -------------------------------------------------------------------------

    /// Writes a pending version of `key` at `ts` for `txn` (`None` = a tombstone).
    ///
    /// Writing again at the same `(key, ts)` while the version is still pending replaces
    /// its value (a piece that writes a key twice). Errors: `ts` below the watermark;
    /// another version at exactly `ts`; `txn` already holds a pending version of `key` at
    /// another timestamp.
    pub fn write(
        &mut self,
        key: Key,
        ts: Timestamp,
        txn: TxnId,
        value: Option<Value>,
    ) -> Result<(), StoreError> {
        self.put_version(key, ts, txn, value, VersionStatus::Pending)
    }

    /// Writes a committed version directly: initial data, or a follower applying entries
    /// that are already committed. Same errors as [`MvStore::write`]; an existing pending
    /// version of `txn` at `(key, ts)` is overwritten and committed.
    pub fn install_committed(
        &mut self,
        key: Key,
        ts: Timestamp,
        txn: TxnId,
        value: Option<Value>,
    ) -> Result<(), StoreError> {
        self.put_version(key, ts, txn, value, VersionStatus::Committed)
    }

    fn put_version(
        &mut self,
        key: Key,
        ts: Timestamp,
        txn: TxnId,
        value: Option<Value>,
        status: VersionStatus,
    ) -> Result<(), StoreError> {
        self.check_watermark(ts)?;
        let kv = match self.keys.get_mut(&key) {
            Some(kv) => kv,
            None => self.keys.entry(key.clone()).or_default(),
        };
        match kv.find(ts) {
            Ok(i) => {
                let v = &mut kv.versions[i];
                if v.writer != txn || v.is_committed() {
                    return Err(StoreError::TimestampTaken {
                        key,
                        ts,
                        writer: v.writer,
                    });
                }
                v.value = value;
                v.status = status;
                if status == VersionStatus::Committed {
                    self.pending_count -= 1;
                }
            }
            Err(i) => {
                if let Some(v) = kv
                    .versions
                    .iter()
                    .find(|v| v.writer == txn && v.is_pending())
                {
                    return Err(StoreError::PendingElsewhere {
                        key,
                        txn,
                        existing: v.ts,
                    });
                }
                let mut version = Version::pending(ts, txn, value);
                version.status = status;
                reserve_small(&mut kv.versions);
                kv.versions.insert(i, version);
                let written = self.by_txn.entry(txn).or_default();
                reserve_small(written);
                written.push((key.clone(), ts));
                self.version_count += 1;
                if status == VersionStatus::Pending {
                    self.pending_count += 1;
                }
            }
        }
        if cfg!(debug_assertions) {
            kv.check(&key);
        }
        if kv.wants_gc() {
            mark_candidate(&mut self.gc_candidates, key, kv.gc_ready_at());
        }
        Ok(())
    }

    /// Commits every pending version of `txn` at its own timestamp. Returns how many
    /// versions it committed (0 for an unknown transaction or a repeated commit).
    pub fn commit(&mut self, txn: TxnId) -> usize {
        let MvStore {
            keys,
            by_txn,
            pending_count,
            ..
        } = self;
        let Some(list) = by_txn.get(&txn) else {
            return 0;
        };
        let mut committed = 0;
        for (key, ts) in list {
            let v = version_mut(keys, key, *ts, txn);
            if v.is_pending() {
                // The key held a pending version, so it is a gc candidate already.
                v.status = VersionStatus::Committed;
                committed += 1;
            }
        }
        *pending_count -= committed;
        committed
    }

    /// [`MvStore::commit`], and forgets `txn`'s index: for a protocol that never takes a
    /// commit back (Tiga), so `by_txn` holds only writers with something pending, a small
    /// table that stays in cache, and gc does not unindex what it drops. `txn`'s versions
    /// are then no longer listed by [`MvStore::written_by`] nor removed by
    /// [`MvStore::revoke_all`].
    pub fn commit_final(&mut self, txn: TxnId) -> usize {
        let committed = self.commit(txn);
        if let Some(list) = self.by_txn.remove(&txn) {
            self.forgotten += list.len();
        }
        committed
    }

    /// Commits every pending version of `txn` at `commit_ts`, moving it there first
    /// (Clock-SI: the commit timestamp is the maximum of the prepare timestamps). All or
    /// nothing: if some key already has another version at `commit_ts`, nothing changes.
    ///
    /// Tracked reads that a moved version served below `commit_ts` are folded into the
    /// versions they now fall on (see the crate docs).
    pub fn commit_at(&mut self, txn: TxnId, commit_ts: Timestamp) -> Result<usize, StoreError> {
        self.check_watermark(commit_ts)?;
        let MvStore {
            keys,
            by_txn,
            gc_candidates,
            pending_count,
            ..
        } = self;
        let Some(list) = by_txn.get_mut(&txn) else {
            return Ok(0);
        };
        for (key, ts) in list.iter() {
            let kv = &keys[key];
            let v = &kv.versions[kv.find(*ts).expect("index: version exists")];
            if v.is_pending() && *ts != commit_ts {
                if let Ok(j) = kv.find(commit_ts) {
                    return Err(StoreError::TimestampTaken {
                        key: key.clone(),
                        ts: commit_ts,
                        writer: kv.versions[j].writer,
                    });
                }
            }
        }
        let mut committed = 0;
        for (key, ts) in list.iter_mut() {
            let kv = keys.get_mut(key).expect("index: key exists");
            let mut i = kv.find(*ts).expect("index: version exists");
            if kv.versions[i].is_committed() {
                continue;
            }
            if *ts != commit_ts {
                kv.move_version(i, commit_ts);
                *ts = commit_ts;
                i = kv.find(commit_ts).expect("just moved");
                // An earlier timestamp may make the key collectable earlier.
                mark_candidate(gc_candidates, key.clone(), kv.gc_ready_at());
            }
            kv.versions[i].status = VersionStatus::Committed;
            if cfg!(debug_assertions) {
                kv.check(key);
            }
            committed += 1;
            debug_assert!(
                !kv.wants_gc() || gc_candidates.contains_key(key),
                "keys gc may shrink are candidates"
            );
        }
        *pending_count -= committed;
        Ok(committed)
    }

    /// Removes every *pending* version of `txn` (Tiga §3.5 case 3: revoke an invalid
    /// optimistic execution; an aborted Clock-SI/Aurogon write). Committed versions stay.
    /// Returns how many versions it removed.
    pub fn revoke(&mut self, txn: TxnId) -> usize {
        self.revoke_where(txn, false)
    }

    /// Removes every version of `txn`, committed ones included: for a protocol that learns
    /// that what it committed locally was not the agreed history (e.g. a Tiga replica whose
    /// log the view change rewrote). Returns how many versions it removed.
    pub fn revoke_all(&mut self, txn: TxnId) -> usize {
        self.revoke_where(txn, true)
    }

    fn revoke_where(&mut self, txn: TxnId, committed_too: bool) -> usize {
        let MvStore {
            keys,
            by_txn,
            gc_candidates,
            version_count,
            pending_count,
            ..
        } = self;
        let Some(list) = by_txn.get_mut(&txn) else {
            return 0;
        };
        let mut removed = 0;
        list.retain(|(key, ts)| {
            let kv = keys.get_mut(key).expect("index: key exists");
            let i = kv.find(*ts).expect("index: version exists");
            let v = &kv.versions[i];
            debug_assert_eq!(v.writer, txn);
            if v.is_committed() && !committed_too {
                return true;
            }
            let v = kv.remove_version(i);
            removed += 1;
            *version_count -= 1;
            if v.is_pending() {
                *pending_count -= 1;
            }
            if kv.is_vacant() {
                keys.remove(key);
                gc_candidates.remove(key);
            } else if kv.wants_gc() {
                mark_candidate(gc_candidates, key.clone(), kv.gc_ready_at());
            }
            false
        });
        if list.is_empty() {
            by_txn.remove(&txn);
        }
        removed
    }

    // ---- reads --------------------------------------------------------------------------

    /// The latest version of `key` with timestamp `<= ts`, pending or committed, so a
    /// Clock-SI or Aurogon reader can see a prepared/pending version and wait for it.
    /// `Ok(None)`: no version at or below `ts` (the key is absent there).
    pub fn read_at(&self, key: &[u8], ts: Timestamp) -> Result<Option<&Version>, StoreError> {
        self.check_watermark(ts)?;
        Ok(self
            .keys
            .get(key)
            .and_then(|kv| kv.index_le(ts).map(|i| &kv.versions[i])))
    }

    /// Like [`MvStore::read_at`], and records the read: the returned version's
    /// `max_read_ts` (or, if there is none, the key's absent-floor) rises to `ts`
    /// (Aurogon Algorithm 1 line 32, MVTO). Records on pending versions too; if such a
    /// version is later revoked or moved, the record moves to the versions the read would
    /// now see. A tracked read of an absent key materializes the key to hold the record.
    pub fn read_at_tracked(
        &mut self,
        key: &Key,
        ts: Timestamp,
    ) -> Result<Option<&Version>, StoreError> {
        self.check_watermark(ts)?;
        // `Visibility::All` ignores the reader, so any id will do.
        let anyone = TxnId::new(NodeId(0), 0, 0);
        let found = self.tracked_index(key, ts, anyone, Visibility::All);
        Ok(found.map(|i| &self.keys[key].versions[i]))
    }

    /// The visible version for a tracked read, with the read recorded. Materializes an
    /// absent key to hold the record; a key whose floor rises becomes a gc candidate.
    fn tracked_index(
        &mut self,
        key: &Key,
        ts: Timestamp,
        txn: TxnId,
        visibility: Visibility,
    ) -> Option<usize> {
        if ts == Timestamp::ZERO && !self.keys.contains_key(key) {
            return None; // Nothing to record: every read timestamp is at least ZERO.
        }
        let kv = self.keys.entry(key.clone()).or_default();
        let index = kv.visible_index(ts, txn, visibility);
        kv.raise_read_ts(index, ts);
        if index.is_none() && ts > Timestamp::ZERO {
            let ready = kv.gc_ready_at();
            mark_candidate(&mut self.gc_candidates, key.clone(), ready);
        }
        index
    }

    /// A read for [`TxnAccess`]: the value of the visible version, recorded if `track`.
    pub(crate) fn access_read(
        &mut self,
        key: &Key,
        ts: Timestamp,
        txn: TxnId,
        visibility: Visibility,
        track: bool,
    ) -> Option<Value> {
        let index = if track {
            self.tracked_index(key, ts, txn, visibility)
        } else {
            let kv = self.keys.get(key)?;
            kv.visible_index(ts, txn, visibility)
        };
        index.and_then(|i| self.keys[key].versions[i].value.clone())
    }

    /// The latest *committed* version of `key` with timestamp `<= ts`, skipping pending
    /// ones (a snapshot read that must not wait).
    pub fn read_committed_at(
        &self,
        key: &[u8],
        ts: Timestamp,
    ) -> Result<Option<&Version>, StoreError> {
        self.check_watermark(ts)?;
        Ok(self
            .keys
            .get(key)
            .and_then(|kv| kv.committed_index_le(ts).map(|i| &kv.versions[i])))
    }

    /// The latest committed version of `key` (any timestamp).
    pub fn latest_committed(&self, key: &[u8]) -> Option<&Version> {
        self.keys
            .get(key)
            .and_then(|kv| kv.versions.iter().rev().find(|v| v.is_committed()))
    }

    /// All versions of `key`, oldest first (empty for an untouched key). For checks the
    /// other methods do not cover, e.g. Clock-SI's certification (is there a committed
    /// version newer than my snapshot, or another transaction's pending one?).
    pub fn versions(&self, key: &[u8]) -> &[Version] {
        self.keys.get(key).map_or(&[], |kv| kv.versions.as_slice())
    }

    /// The versions of `key` with timestamp `> ts`, oldest first.
    pub fn versions_after(&self, key: &[u8], ts: Timestamp) -> &[Version] {
        let versions = self.versions(key);
        &versions[versions.partition_point(|v| v.ts <= ts)..]
    }

    /// The read timestamp a write at `ts` must not fall below: the `max_read_ts` of the
    /// latest version strictly below `ts` (or the key's absent-floor). Under MVTO/Aurogon a
    /// write at `ts` is valid iff `covering_read_ts(key, ts) <= ts`.
    pub fn covering_read_ts(&self, key: &[u8], ts: Timestamp) -> Timestamp {
        self.keys
            .get(key)
            .map_or(Timestamp::ZERO, |kv| match kv.index_lt(ts) {
                Some(i) => kv.versions[i].max_read_ts,
                None => kv.floor_read_ts,
            })
    }

    /// The versions `txn` owns (pending and committed), as `(key, ts)`, in no particular
    /// order.
    pub fn written_by(&self, txn: TxnId) -> impl Iterator<Item = (&Key, Timestamp)> + '_ {
        self.by_txn
            .get(&txn)
            .into_iter()
            .flatten()
            .map(|(key, ts)| (key, *ts))
    }

    /// A [`meridian_core::txn::KvAccess`] that executes a piece at `ts` as `txn`, for
    /// [`meridian_core::txn::execute_piece`]. Refused below the watermark.
    pub fn access(&mut self, txn: TxnId, ts: Timestamp) -> Result<TxnAccess<'_>, StoreError> {
        self.check_watermark(ts)?;
        Ok(TxnAccess::new(self, txn, ts))
    }

    // ---- garbage collection -------------------------------------------------------------

    /// Raises the watermark to `watermark` (it never goes down) and drops every committed
    /// version older than the newest committed version at or below it: a read at or above
    /// the watermark never needs them. Pending versions are never dropped. A key left as a
    /// lone committed tombstone at or below the watermark, with no tracked read above the
    /// watermark, disappears. Costs O(keys changed since the last gc).
    pub fn gc(&mut self, watermark: Timestamp) -> GcReport {
        self.watermark = max(self.watermark, watermark);
        let watermark = self.watermark;
        let MvStore {
            keys,
            by_txn,
            gc_candidates,
            version_count,
            forgotten,
            ..
        } = self;
        let mut report = GcReport::default();
        let mut dropped = Vec::new();
        gc_candidates.retain(|key, ready_at| {
            if *ready_at > watermark {
                return true; // nothing to collect yet
            }
            let Some(kv) = keys.get_mut(key) else {
                return false;
            };
            kv.prune(watermark, &mut dropped);
            let keep = if kv.is_dead(watermark) {
                let kv = keys.remove(key).expect("present");
                dropped.extend(kv.versions.iter().map(|v| (v.ts, v.writer)));
                report.keys += 1;
                false
            } else if kv.wants_gc() {
                *ready_at = kv.gc_ready_at();
                true
            } else {
                false
            };
            report.versions += dropped.len();
            *version_count -= dropped.len();
            for (ts, writer) in dropped.drain(..) {
                unindex((by_txn, forgotten), writer, key, ts);
            }
            keep
        });
        report
    }

    // ---- invariants ---------------------------------------------------------------------

    /// Checks every invariant (O(size)); for tests. Panics on a violation, which only a bug
    /// in this crate can cause.
    pub fn check_invariants(&self) {
        let (mut versions, mut pending) = (0, 0);
        for (key, kv) in &self.keys {
            kv.check(key);
            assert!(!kv.is_vacant(), "vacant key {key:?} kept");
            assert!(
                !kv.wants_gc()
                    || self
                        .gc_candidates
                        .get(key)
                        .is_some_and(|&ready| ready <= kv.gc_ready_at()),
                "{key:?} needs gc but is no candidate, or one marked too late"
            );
            for v in &kv.versions {
                versions += 1;
                pending += usize::from(v.is_pending());
                let indexed = self
                    .by_txn
                    .get(&v.writer)
                    .is_some_and(|l| l.iter().any(|(k, t)| k == key && *t == v.ts));
                // Only commit_final forgets an index, and only of committed versions.
                assert!(
                    indexed || v.is_committed(),
                    "pending version {key:?}@{} not indexed",
                    v.ts
                );
            }
        }
        for (writer, list) in &self.by_txn {
            for (key, ts) in list {
                let v = self
                    .keys
                    .get(key)
                    .and_then(|kv| kv.find(*ts).ok().map(|i| &kv.versions[i]));
                assert!(
                    v.is_some_and(|v| v.writer == *writer),
                    "index names {key:?}@{ts} of {writer}, which is not there"
                );
            }
        }
        let indexed: usize = self.by_txn.values().map(SmallVec::len).sum();
        assert_eq!(
            indexed + self.forgotten,
            versions,
            "index and versions disagree"
        );
        assert!(self.by_txn.values().all(|l| !l.is_empty()));
        assert_eq!(self.version_count, versions);
        assert_eq!(self.pending_count, pending);
    }

    /// Rebuilds a store from versions (used by restore). Callers validated them.
    pub(crate) fn from_parts(watermark: Timestamp, keys: FxHashMap<Key, KeyVersions>) -> MvStore {
        let mut store = MvStore {
            watermark,
            ..MvStore::default()
        };
        for (key, kv) in &keys {
            for v in &kv.versions {
                store
                    .by_txn
                    .entry(v.writer)
                    .or_default()
                    .push((key.clone(), v.ts));
                store.version_count += 1;
                store.pending_count += usize::from(v.is_pending());
            }
            if kv.wants_gc() {
                mark_candidate(&mut store.gc_candidates, key.clone(), kv.gc_ready_at());
            }
        }
        store.keys = keys;
        store
    }
}

fn version_mut<'a>(
    keys: &'a mut FxHashMap<Key, KeyVersions>,
    key: &SmallBytes,
    ts: Timestamp,
    writer: TxnId,
) -> &'a mut Version {
    let kv = keys.get_mut(key).expect("index: key exists");
    let i = kv.find(ts).expect("index: version exists");
    let v = &mut kv.versions[i];
    assert_eq!(v.writer, writer, "index names the wrong writer");
    v
}

/// Marks `key` as a gc candidate from `ready_at` on (or earlier, if it already was).
fn mark_candidate(candidates: &mut FxHashMap<Key, Timestamp>, key: Key, ready_at: Timestamp) {
    candidates
        .entry(key)
        .and_modify(|r| *r = (*r).min(ready_at))
        .or_insert(ready_at);
}

/// Drops a collected committed version from its writer's index, or from the count of
/// versions whose index `commit_final` forgot.
fn unindex(
    (by_txn, forgotten): (&mut FxHashMap<TxnId, Written>, &mut usize),
    writer: TxnId,
    key: &Key,
    ts: Timestamp,
) {
    let list = by_txn.get_mut(&writer);
    let at = list
        .as_ref()
        .and_then(|l| l.iter().position(|(k, t)| *t == ts && k == key));
    match (list, at) {
        (Some(list), Some(at)) => {
            list.swap_remove(at);
            if list.is_empty() {
                by_txn.remove(&writer);
            }
        }
        _ => {
            assert!(*forgotten > 0, "index: {key:?}@{ts} of {writer} is nowhere");
            *forgotten -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_loaded_keys_are_not_gc_candidates() {
        let mut store = MvStore::new();
        let writer = TxnId::new(NodeId(0), 0, 0);
        for i in 0..1000u32 {
            let key = SmallBytes::copy_from_slice(&i.to_be_bytes());
            store
                .install_committed(key, Timestamp::new(1, 0), writer, Some(SmallBytes::new()))
                .unwrap();
        }
        assert!(store.gc_candidates.is_empty());
        store.check_invariants();
    }
}
