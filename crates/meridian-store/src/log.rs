//! [`OrderedLog`]: Tiga's log list (Figure 4, §3.7) with the incremental XOR hash of §3.4
//! and the per-key hash table of Appendix D.

use crate::hash::{entry_hash, key_state_hash, Hash160};
use meridian_core::{Key, KeyList, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

/// A position in a log: 0 is the first entry ever appended; positions stay meaningful
/// after a prefix is truncated (the in-memory entries then start at
/// [`OrderedLog::first_pos`]). Inserting or removing an entry shifts the positions of the
/// entries after it.
pub type LogPos = u64;

/// What a log entry's payload tells the log: the keys whose per-key hash the entry
/// contributes to (Appendix D).
pub trait LogPayload {
    /// The entry's read ∪ write set on this shard, or nothing for a read-only entry
    /// (Appendix D leaves read-only transactions out of the hash). Duplicates are allowed.
    /// Must be a pure function of the payload: the log calls it on insertion and again on
    /// removal (it keeps no copy of the keys beside the payload). Borrowed when the
    /// payload holds them, so the log copies nothing.
    fn hash_keys(&self) -> Cow<'_, [Key]>;
}

/// A payload without keys: only the whole-log hash is maintained.
impl LogPayload for () {
    fn hash_keys(&self) -> Cow<'_, [Key]> {
        Cow::Borrowed(&[])
    }
}

/// The per-key footprint of Appendix D for a transaction with these read and write sets:
/// the sorted, deduplicated union, or nothing if the transaction writes nothing.
pub fn footprint(read_keys: &[Key], write_keys: &[Key]) -> KeyList {
    if write_keys.is_empty() {
        return KeyList::new();
    }
    let mut keys: KeyList = read_keys.iter().chain(write_keys).cloned().collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// One log entry. `txn` is unique in the log; entries are ordered by `(ts, txn)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry<E> {
    pub txn: TxnId,
    pub ts: Timestamp,
    pub payload: E,
    hash: Hash160,
}

impl<E> LogEntry<E> {
    /// `SHA1(txn, ts)`, the entry's contribution to the hashes.
    pub fn hash(&self) -> Hash160 {
        self.hash
    }

    fn order(&self) -> (Timestamp, TxnId) {
        (self.ts, self.txn)
    }
}

impl<E: LogPayload> LogEntry<E> {
    /// The payload's keys, sorted and deduplicated (borrowed if the payload's already
    /// are, as [`footprint`]'s).
    pub fn hash_keys(&self) -> Cow<'_, [Key]> {
        let keys = self.payload.hash_keys();
        if keys.windows(2).all(|w| w[0] < w[1]) {
            return keys;
        }
        let mut keys = keys.into_owned();
        keys.sort_unstable();
        keys.dedup();
        Cow::Owned(keys)
    }
}

/// Why the log refused an operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    #[error("{0} is already in the log")]
    DuplicateTxn(TxnId),
    #[error("{0} is not in the log")]
    UnknownTxn(TxnId),
    /// [`OrderedLog::append`] below the last entry (use [`OrderedLog::insert`]).
    #[error("append of {txn} at {ts} is below the last entry ({last_txn} at {last_ts})")]
    OutOfOrder {
        txn: TxnId,
        ts: Timestamp,
        last_txn: TxnId,
        last_ts: Timestamp,
    },
    /// The entry would land inside the truncated (checkpointed) prefix.
    #[error("{txn} at {ts} would land in the truncated prefix (ends at {floor})")]
    BelowTruncated {
        txn: TxnId,
        ts: Timestamp,
        floor: Timestamp,
    },
    #[error("position {pos} is outside the log's positions {first}..={end}")]
    PositionOutOfRange {
        pos: LogPos,
        first: LogPos,
        end: LogPos,
    },
    #[error("invalid log snapshot: {0}")]
    BadSnapshot(String),
}

/// A log of entries kept in `(timestamp, txn id)` order, with positions, lookup by
/// transaction, and Tiga's incremental hashes:
///
/// * [`OrderedLog::hash`]: the XOR of [`entry_hash`] over every entry of the log, the
///   truncated prefix included (§3.4). O(1) per append/remove/timestamp change.
/// * [`OrderedLog::key_hash`]: per key, the XOR of the entry hashes of the entries whose
///   [`LogPayload::hash_keys`] contain the key (Appendix D); [`OrderedLog::keys_hash`]
///   combines them into a transaction's hash. O(keys of the entry) per change.
///
/// Both hashes are functions of the *set* of `(txn, ts)` entries (and their keys): two
/// replicas holding the same entries have the same hashes however they got there,
/// including when they truncated different prefixes.
#[derive(Clone, Debug)]
pub struct OrderedLog<E> {
    entries: VecDeque<LogEntry<E>>,
    /// Position of `entries[0]`.
    base: LogPos,
    by_txn: FxHashMap<TxnId, Timestamp>,
    hash: Hash160,
    key_hashes: FxHashMap<Key, Hash160>,
    /// XOR of the truncated entries' hashes.
    prefix_hash: Hash160,
    /// Order key of the last truncated entry: nothing may be placed at or below it.
    floor: Option<(Timestamp, TxnId)>,
}

impl<E> Default for OrderedLog<E> {
    fn default() -> Self {
        OrderedLog {
            entries: VecDeque::new(),
            base: 0,
            by_txn: FxHashMap::default(),
            hash: Hash160::ZERO,
            key_hashes: FxHashMap::default(),
            prefix_hash: Hash160::ZERO,
            floor: None,
        }
    }
}

impl<E: LogPayload> OrderedLog<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an entry at the end. Contract: `(ts, txn)` must be above the last entry's
    /// (the leader appends in agreed-timestamp order); otherwise `OutOfOrder` and nothing
    /// changes. Returns the entry's position.
    pub fn append(&mut self, txn: TxnId, ts: Timestamp, payload: E) -> Result<LogPos, LogError> {
        self.check_new(txn, ts)?;
        if let Some(last) = self.entries.back() {
            if (ts, txn) < last.order() {
                return Err(LogError::OutOfOrder {
                    txn,
                    ts,
                    last_txn: last.txn,
                    last_ts: last.ts,
                });
            }
        }
        let entry = self.make_entry(txn, ts, payload, entry_hash(txn, ts));
        self.entries.push_back(entry);
        Ok(self.end_pos() - 1)
    }

    /// Inserts an entry where its timestamp puts it (a follower's log sync, a view change
    /// rebuilding a log). Returns its position.
    pub fn insert(&mut self, txn: TxnId, ts: Timestamp, payload: E) -> Result<LogPos, LogError> {
        self.insert_hashed(txn, ts, payload, entry_hash(txn, ts))
    }

    /// [`OrderedLog::insert`] with the entry's hash, `entry_hash(txn, ts)`, already
    /// computed (a Tiga server hashes the entry for its fast reply just before): one SHA-1
    /// less per insertion. Checked in debug builds.
    pub fn insert_hashed(
        &mut self,
        txn: TxnId,
        ts: Timestamp,
        payload: E,
        hash: Hash160,
    ) -> Result<LogPos, LogError> {
        debug_assert_eq!(hash, entry_hash(txn, ts), "insert_hashed: wrong entry hash");
        self.check_new(txn, ts)?;
        let index = self.lower_bound((ts, txn));
        let entry = self.make_entry(txn, ts, payload, hash);
        self.entries.insert(index, entry);
        Ok(self.base + index as LogPos)
    }

    fn check_new(&self, txn: TxnId, ts: Timestamp) -> Result<(), LogError> {
        if self.by_txn.contains_key(&txn) {
            return Err(LogError::DuplicateTxn(txn));
        }
        self.check_above_floor(txn, ts)
    }

    fn make_entry(&mut self, txn: TxnId, ts: Timestamp, payload: E, hash: Hash160) -> LogEntry<E> {
        let entry = LogEntry {
            txn,
            ts,
            payload,
            hash,
        };
        self.by_txn.insert(txn, ts);
        self.toggle(&entry.hash_keys(), entry.hash);
        entry
    }
}

impl<E: LogPayload> OrderedLog<E> {
    fn check_above_floor(&self, txn: TxnId, ts: Timestamp) -> Result<(), LogError> {
        match self.floor {
            Some(floor) if (ts, txn) <= floor => Err(LogError::BelowTruncated {
                txn,
                ts,
                floor: floor.0,
            }),
            _ => Ok(()),
        }
    }

    /// XORs `h` into the log hash and into the hash of every key in `keys`.
    fn toggle(&mut self, keys: &[Key], h: Hash160) {
        self.hash ^= h;
        for key in keys {
            match self.key_hashes.get_mut(key) {
                Some(slot) => {
                    *slot ^= h;
                    if slot.is_zero() {
                        self.key_hashes.remove(key);
                    }
                }
                None => {
                    self.key_hashes.insert(key.clone(), h);
                }
            }
        }
    }

    /// The first index whose entry is not before `order`. Inserts and lookups are nearly
    /// always close to the end (timestamps grow), so it gallops back from the end, and a
    /// long log costs a few cache misses, not a binary search's worth.
    fn lower_bound(&self, order: (Timestamp, TxnId)) -> usize {
        let len = self.entries.len();
        let before = |i: usize| self.entries[i].order() < order;
        // Invariant: every entry at or after `hi` is not before `order`.
        let (mut hi, mut step) = (len, 1);
        while hi > 0 {
            let probe = hi.saturating_sub(step);
            if before(probe) {
                // The answer is in (probe, hi]: binary search there.
                let (mut lo, mut hi) = (probe + 1, hi);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if before(mid) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                return lo;
            }
            hi = probe;
            step *= 2;
        }
        0
    }

    fn index_of(&self, txn: TxnId) -> Option<usize> {
        let ts = *self.by_txn.get(&txn)?;
        let index = self.lower_bound((ts, txn));
        assert!(
            self.entries.get(index).is_some_and(|e| e.txn == txn),
            "log index names {txn} at {ts}, but the entry is not there"
        );
        Some(index)
    }

    /// Removes `txn`'s entry (a follower dropping what the leader's log lacks, §3.7).
    /// Returns the entry and the position it had.
    pub fn remove(&mut self, txn: TxnId) -> Option<(LogPos, LogEntry<E>)> {
        let index = self.index_of(txn)?;
        let entry = self.entries.remove(index).expect("index_of found it");
        self.by_txn.remove(&txn);
        self.toggle(&entry.hash_keys(), entry.hash);
        Some((self.base + index as LogPos, entry))
    }

    /// Changes `txn`'s timestamp (and so its place in the log and its hash). Returns its
    /// new position. Refused, with nothing changed, if the entry is unknown or the new
    /// timestamp would put it in the truncated prefix.
    pub fn set_timestamp(&mut self, txn: TxnId, ts: Timestamp) -> Result<LogPos, LogError> {
        let index = self.index_of(txn).ok_or(LogError::UnknownTxn(txn))?;
        self.check_above_floor(txn, ts)?;
        let mut entry = self.entries.remove(index).expect("index_of found it");
        let new_hash = entry_hash(txn, ts);
        self.toggle(&entry.hash_keys(), entry.hash ^ new_hash);
        entry.ts = ts;
        entry.hash = new_hash;
        self.by_txn.insert(txn, ts);
        let index = self.lower_bound((ts, txn));
        self.entries.insert(index, entry);
        Ok(self.base + index as LogPos)
    }

    /// Drops the entries before position `upto` (they are checkpointed: Tiga's
    /// commit-point, §4) and returns them. The hashes do not change: they keep covering the
    /// whole log. Nothing may later be placed at or below the last dropped entry.
    /// The entries are drained in place: a caller that drops the iterator drops them
    /// without copying them out.
    pub fn truncate_prefix(
        &mut self,
        upto: LogPos,
    ) -> Result<std::collections::vec_deque::Drain<'_, LogEntry<E>>, LogError> {
        if upto < self.base || upto > self.end_pos() {
            return Err(self.out_of_range(upto));
        }
        let count = (upto - self.base) as usize;
        for entry in self.entries.range(..count) {
            self.by_txn.remove(&entry.txn);
            self.prefix_hash ^= entry.hash;
        }
        if let Some(last) = count.checked_sub(1).map(|i| &self.entries[i]) {
            self.floor = Some(last.order());
        }
        self.base = upto;
        Ok(self.entries.drain(..count))
    }

    fn out_of_range(&self, pos: LogPos) -> LogError {
        LogError::PositionOutOfRange {
            pos,
            first: self.base,
            end: self.end_pos(),
        }
    }

    // ---- lookups ------------------------------------------------------------------------

    pub fn get(&self, txn: TxnId) -> Option<&LogEntry<E>> {
        self.index_of(txn).map(|i| &self.entries[i])
    }

    pub fn contains(&self, txn: TxnId) -> bool {
        self.by_txn.contains_key(&txn)
    }

    /// `txn`'s timestamp in the log, in O(1) (no search for the entry).
    pub fn ts_of(&self, txn: TxnId) -> Option<Timestamp> {
        self.by_txn.get(&txn).copied()
    }

    /// `txn`'s current position.
    pub fn position(&self, txn: TxnId) -> Option<LogPos> {
        self.index_of(txn).map(|i| self.base + i as LogPos)
    }

    /// The entry at position `pos`, if it is in memory.
    pub fn at(&self, pos: LogPos) -> Option<&LogEntry<E>> {
        let index = usize::try_from(pos.checked_sub(self.base)?).ok()?;
        self.entries.get(index)
    }

    /// Mutable access to a payload. The keys were captured at insertion: changing what the
    /// payload's `hash_keys` would return does not change the hashes.
    pub fn payload_mut(&mut self, txn: TxnId) -> Option<&mut E> {
        let index = self.index_of(txn)?;
        Some(&mut self.entries[index].payload)
    }

    pub fn first(&self) -> Option<&LogEntry<E>> {
        self.entries.front()
    }

    pub fn last(&self) -> Option<&LogEntry<E>> {
        self.entries.back()
    }

    /// Position of the first in-memory entry (everything before it was truncated).
    pub fn first_pos(&self) -> LogPos {
        self.base
    }

    /// One past the last position: where the next append lands.
    pub fn end_pos(&self) -> LogPos {
        self.base + self.entries.len() as LogPos
    }

    /// Entries in memory.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The position an entry `(ts, txn)` would take: the number of entries ordered below
    /// it. With `TxnId` at its minimum this is "the first entry at or above `ts`".
    pub fn position_for(&self, ts: Timestamp, txn: TxnId) -> LogPos {
        self.base + self.lower_bound((ts, txn)) as LogPos
    }

    /// The position of the first entry with a timestamp strictly above `ts`.
    pub fn first_pos_after(&self, ts: Timestamp) -> LogPos {
        self.base + self.entries.partition_point(|e| e.ts <= ts) as LogPos
    }

    /// All in-memory entries with their positions, in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (LogPos, &LogEntry<E>)> + '_ {
        let base = self.base;
        self.entries
            .iter()
            .enumerate()
            .map(move |(i, e)| (base + i as LogPos, e))
    }

    /// The in-memory entries whose positions fall in `range` (clamped to what is held).
    pub fn range(
        &self,
        range: impl RangeBounds<LogPos>,
    ) -> impl DoubleEndedIterator<Item = (LogPos, &LogEntry<E>)> + '_ {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .clamp(self.base, self.end_pos());
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => LogPos::MAX,
        }
        .clamp(start, self.end_pos());
        let (i, j) = ((start - self.base) as usize, (end - self.base) as usize);
        self.entries
            .range(i..j)
            .enumerate()
            .map(move |(k, e)| (start + k as LogPos, e))
    }

    // ---- hashes -------------------------------------------------------------------------

    /// The log hash (§3.4): XOR of the entry hashes of every entry, truncated ones included.
    pub fn hash(&self) -> Hash160 {
        self.hash
    }

    /// The per-key hash of `key` (Appendix D): XOR of the hashes of the entries touching it.
    pub fn key_hash(&self, key: &[u8]) -> Hash160 {
        self.key_hashes.get(key).copied().unwrap_or(Hash160::ZERO)
    }

    /// Appendix D's hash for a transaction touching `keys`: the XOR over the distinct keys
    /// of `SHA1(<key, key_hash(key)>)`. Pass the transaction's read ∪ write set (its
    /// [`LogEntry::hash_keys`], or for a read-only transaction its read set).
    pub fn keys_hash<'k>(&self, keys: impl IntoIterator<Item = &'k Key>) -> Hash160 {
        let mut keys: Vec<&Key> = keys.into_iter().collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter().fold(Hash160::ZERO, |acc, key| {
            acc ^ key_state_hash(key, self.key_hash(key))
        })
    }

    /// [`OrderedLog::keys_hash`] over `txn`'s captured keys.
    pub fn txn_keys_hash(&self, txn: TxnId) -> Option<Hash160> {
        self.get(txn).map(|e| self.keys_hash(e.hash_keys().iter()))
    }

    /// Number of keys with a non-zero per-key hash (memory accounting).
    pub fn key_hash_count(&self) -> usize {
        self.key_hashes.len()
    }

    /// The log hash recomputed from scratch: the truncated prefix's hash XOR a fresh SHA-1
    /// of every in-memory entry.
    pub fn recompute_hash(&self) -> Hash160 {
        self.entries
            .iter()
            .fold(self.prefix_hash, |acc, e| acc ^ entry_hash(e.txn, e.ts))
    }

    /// What the entries before in-memory index `split` contribute: the log hash and the
    /// per-key table (sorted by key) of the log cut there. O(key table + entries after).
    fn hashes_before(&self, split: usize) -> (Hash160, Vec<(Key, Hash160)>) {
        let mut hash = self.hash;
        let mut table = self.key_hashes.clone();
        for e in self.entries.range(split..) {
            hash ^= e.hash;
            for key in e.hash_keys().iter() {
                *table.entry(key.clone()).or_default() ^= e.hash;
            }
        }
        let mut table: Vec<(Key, Hash160)> =
            table.into_iter().filter(|(_, h)| !h.is_zero()).collect();
        table.sort_unstable();
        (hash, table)
    }

    /// The per-key table recomputed from scratch from the in-memory entries (fresh
    /// SHA-1s) and the truncated prefix's table.
    pub fn recompute_key_hashes(&self) -> FxHashMap<Key, Hash160> {
        let mut table: FxHashMap<Key, Hash160> = self.hashes_before(0).1.into_iter().collect();
        for e in &self.entries {
            let h = entry_hash(e.txn, e.ts);
            for key in e.hash_keys().iter() {
                *table.entry(key.clone()).or_default() ^= h;
            }
        }
        table.retain(|_, h| !h.is_zero());
        table
    }

    /// The live per-key table (for comparisons in tests).
    pub fn key_hashes(&self) -> &FxHashMap<Key, Hash160> {
        &self.key_hashes
    }

    /// Checks every invariant (O(size)); for tests. Panics only on a bug in this crate.
    pub fn check_invariants(&self) {
        let mut previous = self.floor;
        for e in &self.entries {
            assert!(
                previous < Some(e.order()),
                "log entries out of order at {}",
                e.txn
            );
            previous = Some(e.order());
            assert_eq!(self.by_txn.get(&e.txn), Some(&e.ts), "log index stale");
            assert_eq!(e.hash, entry_hash(e.txn, e.ts), "stale entry hash");
        }
        assert_eq!(self.by_txn.len(), self.entries.len(), "log index size");
        assert_eq!(
            self.hash,
            self.recompute_hash(),
            "incremental log hash drifted"
        );
        assert!(self.key_hashes.values().all(|h| !h.is_zero()));
    }
}

/// A serializable copy of a log from some position on, carrying what the entries before
/// it contributed to the hashes, so the restored log hashes like the original.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSnapshot<E> {
    /// Position of the first entry in `entries`.
    pub base: LogPos,
    /// Order key of the last entry before `base`, if any.
    pub floor: Option<(Timestamp, TxnId)>,
    /// XOR of the hashes of the entries before `base`.
    pub prefix_hash: Hash160,
    /// Per-key hashes of the entries before `base`, sorted by key.
    pub prefix_key_hashes: Vec<(Key, Hash160)>,
    /// The entries from `base` on, in log order.
    pub entries: Vec<(TxnId, Timestamp, E)>,
}

impl<E: LogPayload + Clone> OrderedLog<E> {
    /// A snapshot of the log from position `from` on (`from` in
    /// `first_pos()..=end_pos()`): e.g. the suffix after a checkpoint's commit-point, for a
    /// replica that restores the checkpoint and then this log. O(log size + key table).
    pub fn snapshot_from(&self, from: LogPos) -> Result<LogSnapshot<E>, LogError> {
        if from < self.base || from > self.end_pos() {
            return Err(self.out_of_range(from));
        }
        let split = (from - self.base) as usize;
        let (prefix_hash, prefix_key_hashes) = self.hashes_before(split);
        let floor = match split {
            0 => self.floor,
            _ => Some(self.entries[split - 1].order()),
        };
        Ok(LogSnapshot {
            base: from,
            floor,
            prefix_hash,
            prefix_key_hashes,
            entries: self
                .entries
                .range(split..)
                .map(|e| (e.txn, e.ts, e.payload.clone()))
                .collect(),
        })
    }

    /// A snapshot of everything in memory.
    pub fn snapshot(&self) -> LogSnapshot<E> {
        self.snapshot_from(self.base)
            .expect("first_pos is in range")
    }
}

impl<E: LogPayload> OrderedLog<E> {
    /// Rebuilds a log from a snapshot (possibly received from another replica). Refuses a
    /// malformed snapshot: entries out of order or at/below `floor`, duplicate
    /// transactions, unsorted or zero prefix key hashes.
    pub fn from_snapshot(snapshot: LogSnapshot<E>) -> Result<Self, LogError> {
        let bad = |why: String| Err(LogError::BadSnapshot(why));
        let keys = &snapshot.prefix_key_hashes;
        if keys.windows(2).any(|w| w[0].0 >= w[1].0) {
            return bad("prefix key hashes are not sorted and distinct".into());
        }
        if keys.iter().any(|(_, h)| h.is_zero()) {
            return bad("prefix key hash table holds a zero hash".into());
        }
        let mut log = OrderedLog {
            base: snapshot.base,
            hash: snapshot.prefix_hash,
            prefix_hash: snapshot.prefix_hash,
            key_hashes: snapshot.prefix_key_hashes.into_iter().collect(),
            floor: snapshot.floor,
            ..OrderedLog::default()
        };
        for (txn, ts, payload) in snapshot.entries {
            if let Err(error) = log.append(txn, ts, payload) {
                return bad(error.to_string());
            }
        }
        Ok(log)
    }
}
