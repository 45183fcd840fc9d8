//! §4.1's multi-version store: each record a list of versions with an active range
//! `[wts, rts]` and a status (PENDING or COMMITTED), and the rules of Algorithm 1's
//! `Tx_read`, `Tx_write` (install) and `Tx_commit`, plus §4.4's stale-read and
//! immortal-write rules for strong partition serializability.
//!
//! Versions are kept in ascending `wts` (the paper's list is descending; the search is the
//! same). A record that was never written has an implicit initial version `wts = 0`
//! holding no value, made explicit on first touch so that its `rts` is tracked like any
//! other.

use meridian_core::txn::{Key, Value};
use meridian_core::{Timestamp, TxnId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// A version's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    Committed(Option<Value>),
    /// Installed by `txn`, not yet decided. `value` is unknown (None) for a pre-attached
    /// write on a primary until the commit carries it (§4.3); `held`: this copy is a
    /// backup's replica of the update (§4.5), which recovery counts.
    Pending {
        txn: TxnId,
        value: Option<Value>,
        held: bool,
    },
}

/// One version of a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub wts: Timestamp,
    /// The largest timestamp of a read that returned this version (volatile: a restart
    /// resets it to `wts`, and the replica's write floor stands in for what was lost).
    pub rts: Timestamp,
    /// The largest timestamp of a read that was *answered* with this version (`rts` also
    /// counts reads still blocked on it). Volatile like `rts`, and never sent or logged.
    #[serde(skip)]
    pub served: Timestamp,
    /// Instrumentation (abort causes, `causes.rs`): the true time at which the
    /// transaction whose read set `rts` took its timestamp, where the driver knows it.
    #[serde(skip)]
    pub rts_issued_true_ns: Option<u64>,
    pub status: Status,
}

/// What a read found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    Value(Option<Value>),
    /// The version to return is PENDING: wait for `txn`'s decision (Algorithm 1 line 34).
    Blocked(TxnId),
    /// A refusal: a stale read under strong partition serializability (§4.4), or a version
    /// already collected.
    Failed(Refusal),
}

/// Why a request on a record fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// A read with a larger timestamp already returned the version this write would
    /// follow (`v.wts <= W.ts < v.rts`).
    LateWrite,
    /// Below the replica's write floor (reads served before a restart or failover).
    BelowFloor,
    /// §4.4: a committed version newer than the one the read would return exists.
    StaleRead,
    /// §4.4: a committed version newer than the write exists.
    ImmortalWrite,
    /// Strong partition serializability, beyond §4.4: the version was already returned to
    /// a read with a larger timestamp (see [`Rules::late_read`]).
    LateRead,
    /// The timestamp is older than the oldest version still kept.
    Collected,
}

/// The rules §4.4 adds for strong partition serializability (off in serializable mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub stale_read: bool,
    pub immortal_write: bool,
    /// Not in the paper: a read may not return a version already returned to a read with
    /// a larger timestamp. §4.4's two rules order a transaction after every finished one
    /// that *wrote* a record it touches; two readers of one record are ordered by nothing,
    /// so a reader whose clock lags (a clock step) could be serialized before a reader that
    /// finished before it started, and close a real-time cycle through other records
    /// (found by the checker: random-fault seeds 40 and 46, a −43 ms clock step).
    pub late_read: bool,
}

/// The versions of every record of one shard.
#[derive(Clone, Debug, Default)]
pub struct Mvcc {
    records: FxHashMap<Key, Vec<Version>>,
    /// Committed versions kept per record beyond the newest (older ones are collected).
    keep: usize,
}

impl Mvcc {
    pub fn new(keep: usize) -> Mvcc {
        Mvcc {
            records: FxHashMap::default(),
            keep: keep.max(1),
        }
    }

    fn record(&mut self, key: &Key) -> &mut Vec<Version> {
        self.records.entry(key.clone()).or_insert_with(|| {
            vec![Version {
                wts: Timestamp::ZERO,
                rts: Timestamp::ZERO,
                served: Timestamp::ZERO,
                rts_issued_true_ns: None,
                status: Status::Committed(None),
            }]
        })
    }

    /// Algorithm 1 lines 29–36: the version with the largest `wts < ts`, its `rts`
    /// extended to `ts`; blocked while it is PENDING (of another transaction).
    #[cfg(test)]
    pub fn read(&mut self, key: &Key, ts: Timestamp, rules: Rules) -> ReadResult {
        self.read_as(key, ts, rules, None).0
    }

    /// [`Mvcc::read`] by a transaction that took its timestamp at `issued_true_ns` (true
    /// time, for the abort-cause counters); also says whether the read was *clean*: no
    /// read with a larger timestamp had returned the version before it.
    pub fn read_as(
        &mut self,
        key: &Key,
        ts: Timestamp,
        rules: Rules,
        issued_true_ns: Option<u64>,
    ) -> (ReadResult, bool) {
        let versions = self.record(key);
        let at = versions.partition_point(|v| v.wts < ts);
        if at == 0 {
            return (ReadResult::Failed(Refusal::Collected), false);
        }
        if rules.stale_read
            && versions[at..]
                .iter()
                .any(|v| matches!(v.status, Status::Committed(_)))
        {
            return (ReadResult::Failed(Refusal::StaleRead), false);
        }
        let v = &mut versions[at - 1];
        if rules.late_read && v.served > ts {
            return (ReadResult::Failed(Refusal::LateRead), false);
        }
        let clean = v.rts <= ts;
        if ts > v.rts {
            v.rts = ts;
            v.rts_issued_true_ns = issued_true_ns;
        }
        let result = match &v.status {
            Status::Committed(value) => {
                v.served = v.served.max(ts);
                ReadResult::Value(value.clone())
            }
            Status::Pending { txn, .. } => ReadResult::Blocked(*txn),
        };
        (result, clean)
    }

    /// After a write at `ts` on `key` was refused as late ([`Refusal::LateWrite`]): when
    /// the transaction whose read holds the conflicting `rts` took its timestamp (true
    /// time), if known.
    pub fn conflict_issued_true_ns(&self, key: &Key, ts: Timestamp) -> Option<u64> {
        let versions = self.records.get(key)?;
        let at = versions.partition_point(|v| v.wts <= ts);
        versions.get(at.checked_sub(1)?)?.rts_issued_true_ns
    }

    /// Algorithm 1's `install` (Tx_write): validates that no version `v` has
    /// `v.wts <= ts < v.rts` (only the first version at or below `ts` can), then inserts a
    /// PENDING version `[ts, ts]` of `txn`. Idempotent for the same transaction.
    pub fn install(
        &mut self,
        key: &Key,
        ts: Timestamp,
        txn: TxnId,
        floor_ns: u64,
        rules: Rules,
    ) -> Result<(), Refusal> {
        let versions = self.record(key);
        let at = versions.partition_point(|v| v.wts <= ts);
        if at == 0 {
            return Err(Refusal::Collected);
        }
        let prior = &versions[at - 1];
        if prior.wts == ts {
            return match &prior.status {
                Status::Pending { txn: t, .. } if *t == txn => Ok(()),
                _ => Err(Refusal::LateWrite),
            };
        }
        if ts.time_ns < floor_ns {
            return Err(Refusal::BelowFloor);
        }
        if prior.rts > ts {
            return Err(Refusal::LateWrite);
        }
        if rules.immortal_write
            && versions[at..]
                .iter()
                .any(|v| matches!(v.status, Status::Committed(_)))
        {
            return Err(Refusal::ImmortalWrite);
        }
        versions.insert(at, pending(ts, txn, None, false));
        Ok(())
    }

    /// Inserts (or updates) `txn`'s PENDING version without validation: a backup's copy of
    /// an update its primary validated, or a version restored from the log.
    pub fn place(
        &mut self,
        key: &Key,
        ts: Timestamp,
        txn: TxnId,
        value: Option<Value>,
        held: bool,
    ) {
        let versions = self.record(key);
        let at = versions.partition_point(|v| v.wts < ts);
        match versions.get_mut(at) {
            Some(v) if v.wts == ts => {
                if let Status::Pending {
                    txn: t,
                    value: old,
                    held: h,
                } = &mut v.status
                {
                    assert_eq!(*t, txn, "two transactions at {ts}");
                    if value.is_some() {
                        *old = value;
                    }
                    *h |= held;
                }
            }
            _ => versions.insert(at, pending(ts, txn, value, held)),
        }
    }

    /// Tx_commit: `txn`'s version at `ts` becomes COMMITTED with `value` (inserted if this
    /// copy never had it). Returns true if something changed.
    pub fn commit(&mut self, key: &Key, ts: Timestamp, txn: TxnId, value: Value) -> bool {
        let keep = self.keep;
        let versions = self.record(key);
        let at = versions.partition_point(|v| v.wts < ts);
        let changed = match versions.get_mut(at) {
            Some(v) if v.wts == ts => match &v.status {
                Status::Pending { txn: t, .. } => {
                    assert_eq!(*t, txn, "{txn} commits over another transaction at {ts}");
                    v.status = Status::Committed(Some(value));
                    true
                }
                Status::Committed(_) => false,
            },
            _ => {
                let version = Version {
                    wts: ts,
                    rts: ts,
                    served: Timestamp::ZERO,
                    rts_issued_true_ns: None,
                    status: Status::Committed(Some(value)),
                };
                versions.insert(at, version);
                true
            }
        };
        collect(versions, keep);
        changed
    }

    /// Removes `txn`'s PENDING version at `ts` (an abort, or a declared write the
    /// transaction did not make). Committed versions are never removed.
    pub fn drop_pending(&mut self, key: &Key, ts: Timestamp, txn: TxnId) -> bool {
        let Some(versions) = self.records.get_mut(key) else {
            return false;
        };
        let at = versions.partition_point(|v| v.wts < ts);
        match versions.get(at) {
            Some(v)
                if v.wts == ts
                    && matches!(&v.status, Status::Pending { txn: t, .. } if *t == txn) =>
            {
                versions.remove(at);
                true
            }
            _ => false,
        }
    }

    /// The largest timestamp recorded on `key` (a version's wts or rts), in ns.
    pub fn latest_ns(&self, key: &Key) -> u64 {
        self.records
            .get(key)
            .and_then(|v| v.iter().map(|v| v.rts.max(v.wts).time_ns).max())
            .unwrap_or(0)
    }

    /// Every record's versions, for checkpoints (rts is not kept).
    pub fn versions(&self) -> impl Iterator<Item = (&Key, &Vec<Version>)> {
        self.records.iter()
    }

    /// Restores a record from a checkpoint.
    pub fn restore(&mut self, key: Key, versions: Vec<Version>) {
        self.records.insert(key, versions);
    }

    /// Ascending, unique `wts`; `rts >= wts`.
    pub fn check(&self) -> Result<(), String> {
        for (key, versions) in &self.records {
            for pair in versions.windows(2) {
                if pair[0].wts >= pair[1].wts {
                    return Err(format!("record {key:?}: versions out of order"));
                }
            }
            if let Some(v) = versions.iter().find(|v| v.rts < v.wts) {
                return Err(format!("record {key:?}: rts below wts at {}", v.wts));
            }
        }
        Ok(())
    }
}

fn pending(ts: Timestamp, txn: TxnId, value: Option<Value>, held: bool) -> Version {
    Version {
        wts: ts,
        rts: ts,
        served: Timestamp::ZERO,
        rts_issued_true_ns: None,
        status: Status::Pending { txn, value, held },
    }
}

/// Drops the oldest committed versions while more than `keep` committed versions lie
/// above them; the oldest kept version then answers for everything before it, and
/// requests older than it are refused ([`Refusal::Collected`]).
fn collect(versions: &mut Vec<Version>, keep: usize) {
    let committed = versions
        .iter()
        .filter(|v| matches!(v.status, Status::Committed(_)))
        .count();
    let mut excess = committed.saturating_sub(keep + 1);
    while excess > 0 && matches!(versions[0].status, Status::Committed(_)) {
        if !matches!(
            versions.get(1).map(|v| &v.status),
            Some(Status::Committed(_))
        ) {
            break;
        }
        versions.remove(0);
        excess -= 1;
    }
}
