//! `meridian-store`: the storage substrate every protocol shares — a multi-version store,
//! Tiga's ordered log with its incremental hashes, and checkpoints.
//!
//! # [`MvStore`] — multi-version store (Tiga §3.5, Clock-SI §III, Aurogon §4.1)
//!
//! Per key, a list of [`Version`]s strictly ordered by [`Timestamp`](meridian_core::Timestamp); each holds a value or
//! a tombstone (`None`), its writer [`TxnId`](meridian_core::TxnId), a [`VersionStatus`] (`Pending` or
//! `Committed`) and `max_read_ts`, the largest timestamp a *tracked* read served from it.
//!
//! * **Lazy keys.** A key costs nothing until something writes it (or a tracked read
//!   records its absence); a million-key shard is an empty map until touched.
//! * **Writes** ([`MvStore::write`]) create a pending version of a transaction at a
//!   timestamp. A transaction has at most one pending version per key; two versions of a
//!   key never share a timestamp. Violations are [`StoreError`]s, not panics: timestamp
//!   collisions and stale messages happen in correct protocols.
//! * **Commit** ([`MvStore::commit`]) marks a transaction's pending versions committed in
//!   place; [`MvStore::commit_at`] first moves them to a new timestamp (Clock-SI commits at
//!   the maximum prepare timestamp, Algorithm 2 line 18) — all keys or none.
//! * **Revoke** ([`MvStore::revoke`]) erases a transaction's pending versions: Tiga's
//!   rollback of an invalid optimistic execution (§3.5 case 3), an aborted Clock-SI or
//!   Aurogon write. [`MvStore::revoke_all`] also erases committed ones, for a protocol that
//!   explicitly learns its local commit was not the agreed history.
//! * **Reads.** [`MvStore::read_at`] returns the latest version `<= ts` *with* its status
//!   and writer, pending included, so Clock-SI (Algorithm 1 lines 6–17) and Aurogon
//!   (Algorithm 1 lines 29–34) can see a prepared/pending version and wait for it.
//!   [`MvStore::read_at_tracked`] also records the read timestamp (Aurogon line 32);
//!   [`MvStore::covering_read_ts`] answers Aurogon's/MVTO's write check.
//!   [`MvStore::read_committed_at`] skips pending versions; [`MvStore::latest_committed`]
//!   ignores timestamps.
//! * **Execution.** [`MvStore::access`] returns a [`TxnAccess`], a
//!   [`KvAccess`](meridian_core::txn::KvAccess) that runs a piece "at `ts` as `txn`", so a
//!   protocol calls [`meridian_core::txn::execute_piece`] directly on the store.
//! * **GC** ([`MvStore::gc`]) drops committed versions older than the newest committed
//!   version at or below the watermark, in O(keys changed since the last gc).
//!
//! # [`OrderedLog`] — Tiga's log (§3.2–§3.7, §4, Appendix D)
//!
//! Entries `(txn, ts, payload)` kept in `(ts, txn)` order with positions; append (which
//! must not go below the last entry), insert by timestamp, remove by transaction,
//! timestamp change (re-sorts), lookup by transaction and by position, ranges, prefix
//! truncation at a commit-point, and snapshots of a suffix. It maintains in O(1) per change
//! the **log hash** of §3.4 (XOR of `SHA1(txn, ts)` over all entries) and, in O(keys of
//! the entry), the **per-key hashes** of Appendix D (see [`LogPayload`]).
//!
//! # Checkpoints (Tiga §4)
//!
//! [`MvStore::checkpoint`] serializes (serde) the committed state at a timestamp;
//! [`MvStore::restore`] rebuilds a store that answers every read at or above it the same.
//! [`OrderedLog::snapshot_from`] / [`OrderedLog::from_snapshot`] do the same for the log
//! suffix after a commit-point, hashes included.
//!
//! # Choices made where the papers are silent
//!
//! * **Reads are inclusive**: `read_at(key, ts)` sees a version at exactly `ts`. Clock-SI
//!   says "created before the snapshot time" and Aurogon uses `wts < ts`; with unique
//!   timestamps the only version at exactly `ts` is the reader's own, which a transaction
//!   must see (read-your-writes in a piece).
//! * **`max_read_ts` starts at the version's own timestamp** (Aurogon: `v'.wts = v'.rts`),
//!   so a write at `w` is valid iff `covering_read_ts(key, w) <= w`. Reads that found no
//!   version are recorded on a per-key *floor*. Tracked reads are recorded on pending
//!   versions too (Aurogon records before waiting). When a version is revoked its
//!   `max_read_ts` moves to its predecessor; when `commit_at` moves a version up, the reads
//!   it served below its new timestamp move to every version they could now land on. Both
//!   are conservative: they can cause extra MVTO conflicts, never missed ones.
//! * **GC watermark.** `gc(w)` raises a watermark that never goes down; reads, writes,
//!   `commit_at` and checkpoints below it return [`StoreError::BelowWatermark`] (a snapshot
//!   too old), because the versions they need may be gone. Pending versions are never
//!   collected, even below the watermark. A key reduced to a lone committed tombstone at or
//!   below the watermark (with no tracked read above it) is removed: reads then return
//!   `None` (no version) instead of the tombstone. Read-ts floors below the watermark are
//!   forgotten.
//! * **Visibility in [`TxnAccess`]**: by default reads see every version `<= ts`, other
//!   transactions' pending ones included (a Tiga leader executes in timestamp order on top
//!   of earlier executions); [`Visibility::CommittedAndOwn`] skips others' pending versions.
//!   A piece that aborts half-way leaves its pending writes: revoke the transaction.
//! * **Log order is `(ts, txn)`**, so two entries with equal timestamps still have one
//!   order on every replica.
//! * **Log hashes cover the truncated prefix.** Truncating a checkpointed prefix does not
//!   change the hashes, so replicas that truncated at different points still agree; the
//!   cost is one 20-byte hash per key ever written through the log (keys whose hash XORs
//!   back to zero are dropped). Nothing may be inserted at or below a truncated entry, and
//!   a truncated transaction's id is forgotten (deduplicating a late retransmission of a
//!   truncated transaction is the protocol's job).
//! * **The whole-log hash covers every entry, read-only ones included** (§3.4); the per-key
//!   hashes leave read-only entries out (Appendix D) — a payload says so by returning no
//!   keys from [`LogPayload::hash_keys`] ([`footprint`] does this for you).
//! * **Hash encodings** (Appendix D leaves them open): an entry hashes
//!   `SHA1(coordinator u32 ‖ seq u64 ‖ time_ns u64 ‖ tiebreak u32)`, big-endian; a key's
//!   contribution to a transaction's hash is `SHA1(len u64 ‖ key ‖ key_hash)`. Whether a
//!   fast-reply carries the hash before or after appending the entry is the protocol's
//!   choice: XOR [`entry_hash`] in or out.
//! * **Checkpoints are canonical**: sorted by key, so equal states serialize equally.
//!
//! Invariants only a bug can break (versions strictly ordered, one pending version per
//! key and transaction, the writer index matching the versions, the incremental hash
//! matching a recomputation) are asserted; `check_invariants` on both types checks them all
//! for tests.

mod access;
mod checkpoint;
mod hash;
mod log;
mod mvstore;

pub use access::{TxnAccess, Visibility};
pub use checkpoint::StoreCheckpoint;
pub use hash::{entry_hash, key_state_hash, Hash160};
pub use log::{footprint, LogEntry, LogError, LogPayload, LogPos, LogSnapshot, OrderedLog};
pub use mvstore::{GcReport, MvStore, StoreError, Version, VersionStatus};
