//! Model-based test: `MvStore` against a naive `BTreeMap<(Key, Timestamp), ...>` model
//! under random operations, comparing every answer and the whole visible state after every
//! step. Also: checkpoint/restore answers every read like the original.

use meridian_core::txn::{execute_piece, Op, Operand, Piece, Procedures};
use meridian_core::SmallBytes;
use meridian_core::{Key, NodeId, ShardId, Timestamp, TxnId, Value};
use meridian_store::{MvStore, StoreCheckpoint, StoreError, Version, VersionStatus, Visibility};
use proptest::prelude::*;
use std::collections::BTreeMap;

const KEYS: u8 = 3;
const MAX_TS: u64 = 30;
const TXNS: u64 = 5;

fn key(i: u8) -> Key {
    SmallBytes::from(vec![b'k', i])
}
fn t(n: u64) -> Timestamp {
    Timestamp::new(n, 0)
}
fn txn(n: u64) -> TxnId {
    TxnId::new(NodeId(1), 0, n)
}
fn val(v: Option<u8>) -> Option<Value> {
    v.map(|b| SmallBytes::from(vec![b]))
}

#[derive(Clone, Debug)]
enum PieceOp {
    Get(u8),
    Put(u8, u8),
}

#[derive(Clone, Debug)]
enum Action {
    Write(u8, u64, u64, Option<u8>),
    Install(u8, u64, u64, Option<u8>),
    Commit(u64),
    CommitAt(u64, u64),
    Revoke(u64),
    RevokeAll(u64),
    Read(u8, u64),
    ReadTracked(u8, u64),
    ReadCommitted(u8, u64),
    Gc(u64),
    Piece {
        txn: u64,
        ts: u64,
        own_only: bool,
        track: bool,
        ops: Vec<PieceOp>,
    },
}

fn action() -> impl Strategy<Value = Action> {
    let k = 0..KEYS;
    let ts = 0..=MAX_TS;
    let tx = 0..TXNS;
    let piece_op = prop_oneof![
        (0..KEYS).prop_map(PieceOp::Get),
        (0..KEYS, any::<u8>()).prop_map(|(k, v)| PieceOp::Put(k, v)),
    ];
    prop_oneof![
        6 => (k.clone(), ts.clone(), tx.clone(), proptest::option::weighted(0.8, any::<u8>()))
            .prop_map(|(k, ts, tx, v)| Action::Write(k, ts, tx, v)),
        2 => (k.clone(), ts.clone(), tx.clone(), proptest::option::weighted(0.8, any::<u8>()))
            .prop_map(|(k, ts, tx, v)| Action::Install(k, ts, tx, v)),
        3 => tx.clone().prop_map(Action::Commit),
        2 => (tx.clone(), ts.clone()).prop_map(|(tx, ts)| Action::CommitAt(tx, ts)),
        2 => tx.clone().prop_map(Action::Revoke),
        1 => tx.clone().prop_map(Action::RevokeAll),
        3 => (k.clone(), ts.clone()).prop_map(|(k, ts)| Action::Read(k, ts)),
        3 => (k.clone(), ts.clone()).prop_map(|(k, ts)| Action::ReadTracked(k, ts)),
        2 => (k, ts.clone()).prop_map(|(k, ts)| Action::ReadCommitted(k, ts)),
        1 => (0..=MAX_TS / 2).prop_map(Action::Gc),
        3 => (tx, ts, any::<bool>(), any::<bool>(), proptest::collection::vec(piece_op, 1..5))
            .prop_map(|(txn, ts, own_only, track, ops)| Action::Piece { txn, ts, own_only, track, ops }),
    ]
}

/// The naive model: every version in one ordered map, read-ts floors in another.
#[derive(Clone, Debug, Default)]
struct Model {
    versions: BTreeMap<(Key, Timestamp), Version>,
    floors: BTreeMap<Key, Timestamp>,
    watermark: Timestamp,
}

fn below(ts: Timestamp, watermark: Timestamp) -> Result<(), StoreError> {
    if ts < watermark {
        Err(StoreError::BelowWatermark { ts, watermark })
    } else {
        Ok(())
    }
}

impl Model {
    fn key_versions(&self, key: &Key) -> Vec<Version> {
        self.versions
            .range((key.clone(), Timestamp::ZERO)..=(key.clone(), Timestamp::MAX))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self.versions.keys().map(|(k, _)| k.clone()).collect();
        keys.extend(self.floors.keys().cloned());
        keys.sort();
        keys.dedup();
        keys
    }

    fn write(
        &mut self,
        key: &Key,
        ts: Timestamp,
        txn: TxnId,
        value: Option<Value>,
    ) -> Result<(), StoreError> {
        below(ts, self.watermark)?;
        if let Some(v) = self.versions.get_mut(&(key.clone(), ts)) {
            if v.writer == txn && v.status == VersionStatus::Pending {
                v.value = value;
                return Ok(());
            }
            return Err(StoreError::TimestampTaken {
                key: key.clone(),
                ts,
                writer: v.writer,
            });
        }
        if let Some(v) = self
            .key_versions(key)
            .into_iter()
            .find(|v| v.writer == txn && v.status == VersionStatus::Pending)
        {
            return Err(StoreError::PendingElsewhere {
                key: key.clone(),
                txn,
                existing: v.ts,
            });
        }
        self.versions.insert(
            (key.clone(), ts),
            Version {
                ts,
                value,
                writer: txn,
                status: VersionStatus::Pending,
                max_read_ts: ts,
            },
        );
        Ok(())
    }

    fn pending_of(&self, txn: TxnId) -> Vec<(Key, Timestamp)> {
        self.versions
            .iter()
            .filter(|(_, v)| v.writer == txn && v.status == VersionStatus::Pending)
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn commit(&mut self, txn: TxnId) -> usize {
        let pending = self.pending_of(txn);
        for at in &pending {
            self.versions.get_mut(at).unwrap().status = VersionStatus::Committed;
        }
        pending.len()
    }

    /// Raises the read ts of the latest version of `key` strictly below `ts`, or the floor.
    fn raise_below(&mut self, key: &Key, ts: Timestamp, read: Timestamp) {
        match self
            .versions
            .range_mut((key.clone(), Timestamp::ZERO)..(key.clone(), ts))
            .next_back()
        {
            Some((_, v)) => v.max_read_ts = v.max_read_ts.max(read),
            None => {
                let floor = self.floors.entry(key.clone()).or_insert(Timestamp::ZERO);
                *floor = (*floor).max(read);
            }
        }
    }

    fn commit_at(&mut self, txn: TxnId, c: Timestamp) -> Result<usize, StoreError> {
        below(c, self.watermark)?;
        let pending = self.pending_of(txn);
        for (key, p) in &pending {
            if *p != c {
                if let Some(v) = self.versions.get(&(key.clone(), c)) {
                    return Err(StoreError::TimestampTaken {
                        key: key.clone(),
                        ts: c,
                        writer: v.writer,
                    });
                }
            }
        }
        for (key, p) in &pending {
            let mut v = self.versions.remove(&(key.clone(), *p)).unwrap();
            let read = v.max_read_ts;
            if c > *p && read > *p {
                let fold = read.min(c);
                // The old predecessor, and every version between the old and new places.
                self.raise_below(key, *p, fold);
                for (_, w) in self.versions.range_mut((key.clone(), *p)..(key.clone(), c)) {
                    w.max_read_ts = w.max_read_ts.max(fold);
                }
            }
            v.ts = c;
            v.max_read_ts = read.max(c);
            v.status = VersionStatus::Committed;
            self.versions.insert((key.clone(), c), v);
        }
        Ok(pending.len())
    }

    fn revoke(&mut self, txn: TxnId, all: bool) -> usize {
        let doomed: Vec<(Key, Timestamp)> = self
            .versions
            .iter()
            .filter(|(_, v)| v.writer == txn && (all || v.status == VersionStatus::Pending))
            .map(|(k, _)| k.clone())
            .collect();
        for (key, ts) in &doomed {
            let v = self.versions.remove(&(key.clone(), *ts)).unwrap();
            if v.max_read_ts > v.ts {
                self.raise_below(key, *ts, v.max_read_ts);
            }
            self.drop_vacant(key);
        }
        doomed.len()
    }

    fn drop_vacant(&mut self, key: &Key) {
        if self.key_versions(key).is_empty() && self.floors.get(key) == Some(&Timestamp::ZERO) {
            self.floors.remove(key);
        }
    }

    fn latest_le(
        &self,
        key: &Key,
        ts: Timestamp,
        keep: impl Fn(&Version) -> bool,
    ) -> Option<Version> {
        self.versions
            .range((key.clone(), Timestamp::ZERO)..=(key.clone(), ts))
            .rev()
            .map(|(_, v)| v)
            .find(|v| keep(v))
            .cloned()
    }

    fn read_tracked(
        &mut self,
        key: &Key,
        ts: Timestamp,
        keep: impl Fn(&Version) -> bool,
    ) -> Option<Version> {
        let found = self.latest_le(key, ts, keep);
        match &found {
            Some(v) => {
                let slot = self.versions.get_mut(&(key.clone(), v.ts)).unwrap();
                slot.max_read_ts = slot.max_read_ts.max(ts);
            }
            None if ts > Timestamp::ZERO => {
                let floor = self.floors.entry(key.clone()).or_insert(Timestamp::ZERO);
                *floor = (*floor).max(ts);
            }
            None => {}
        }
        found.map(|v| self.versions[&(key.clone(), v.ts)].clone())
    }

    fn gc(&mut self, watermark: Timestamp) -> usize {
        self.watermark = self.watermark.max(watermark);
        let w = self.watermark;
        let mut dropped = 0;
        for key in self.keys() {
            let versions = self.key_versions(&key);
            if let Some(anchor) = versions
                .iter()
                .rev()
                .find(|v| v.ts <= w && v.status == VersionStatus::Committed)
            {
                self.floors.remove(&key);
                for v in &versions {
                    if v.ts < anchor.ts && v.status == VersionStatus::Committed {
                        self.versions.remove(&(key.clone(), v.ts));
                        dropped += 1;
                    }
                }
            }
            let versions = self.key_versions(&key);
            let floor_ok = self.floors.get(&key).is_none_or(|f| *f <= w);
            let dead = floor_ok
                && match versions.as_slice() {
                    [] => true,
                    [v] => {
                        v.status == VersionStatus::Committed
                            && v.value.is_none()
                            && v.max_read_ts <= w
                    }
                    _ => false,
                };
            if dead {
                for v in versions {
                    self.versions.remove(&(key.clone(), v.ts));
                    dropped += 1;
                }
                self.floors.remove(&key);
            }
        }
        dropped
    }

    fn covering_read_ts(&self, key: &Key, ts: Timestamp) -> Timestamp {
        match self
            .versions
            .range((key.clone(), Timestamp::ZERO)..(key.clone(), ts))
            .next_back()
        {
            Some((_, v)) => v.max_read_ts,
            None => self.floors.get(key).copied().unwrap_or(Timestamp::ZERO),
        }
    }
}

/// Same variant (and timestamp) — which key a multi-key error names depends on the
/// store's internal order.
fn same_error<T: std::fmt::Debug + PartialEq>(
    a: &Result<T, StoreError>,
    b: &Result<T, StoreError>,
) -> bool {
    match (a, b) {
        (Ok(x), Ok(y)) => x == y,
        (
            Err(StoreError::TimestampTaken { ts: x, .. }),
            Err(StoreError::TimestampTaken { ts: y, .. }),
        ) => x == y,
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

fn apply(store: &mut MvStore, model: &mut Model, action: &Action) -> Result<(), TestCaseError> {
    match action.clone() {
        Action::Write(k, ts, tx, v) => {
            let got = store.write(key(k), t(ts), txn(tx), val(v));
            let want = model.write(&key(k), t(ts), txn(tx), val(v));
            prop_assert_eq!(got, want);
        }
        Action::Install(k, ts, tx, v) => {
            let got = store.install_committed(key(k), t(ts), txn(tx), val(v));
            let want = model.write(&key(k), t(ts), txn(tx), val(v));
            if want.is_ok() {
                model.versions.get_mut(&(key(k), t(ts))).unwrap().status = VersionStatus::Committed;
            }
            prop_assert_eq!(got, want);
        }
        Action::Commit(tx) => prop_assert_eq!(store.commit(txn(tx)), model.commit(txn(tx))),
        Action::CommitAt(tx, ts) => {
            let got = store.commit_at(txn(tx), t(ts));
            let want = model.commit_at(txn(tx), t(ts));
            prop_assert!(same_error(&got, &want), "commit_at: {got:?} vs {want:?}");
        }
        Action::Revoke(tx) => prop_assert_eq!(store.revoke(txn(tx)), model.revoke(txn(tx), false)),
        Action::RevokeAll(tx) => {
            prop_assert_eq!(store.revoke_all(txn(tx)), model.revoke(txn(tx), true))
        }
        Action::Read(k, ts) => {
            let got = store.read_at(&key(k), t(ts)).map(|v| v.cloned());
            let want =
                below(t(ts), model.watermark).map(|()| model.latest_le(&key(k), t(ts), |_| true));
            prop_assert_eq!(got, want);
        }
        Action::ReadCommitted(k, ts) => {
            let got = store.read_committed_at(&key(k), t(ts)).map(|v| v.cloned());
            let want = below(t(ts), model.watermark).map(|()| {
                model.latest_le(&key(k), t(ts), |v| v.status == VersionStatus::Committed)
            });
            prop_assert_eq!(got, want);
        }
        Action::ReadTracked(k, ts) => {
            let got = store.read_at_tracked(&key(k), t(ts)).map(|v| v.cloned());
            let want = below(t(ts), model.watermark)
                .map(|()| model.read_tracked(&key(k), t(ts), |_| true));
            prop_assert_eq!(got, want);
        }
        Action::Gc(w) => {
            let report = store.gc(t(w));
            prop_assert_eq!(report.versions, model.gc(t(w)));
        }
        Action::Piece {
            txn: tx,
            ts,
            own_only,
            track,
            ops,
        } => run_piece(store, model, tx, ts, own_only, track, &ops)?,
    }
    Ok(())
}

fn run_piece(
    store: &mut MvStore,
    model: &mut Model,
    tx: u64,
    ts: u64,
    own_only: bool,
    track: bool,
    ops: &[PieceOp],
) -> Result<(), TestCaseError> {
    let (me, at) = (txn(tx), t(ts));
    let piece = Piece::ops(
        ShardId(0),
        ops.iter()
            .map(|op| match op {
                PieceOp::Get(k) => Op::Get(key(*k)),
                PieceOp::Put(k, v) => {
                    Op::Put(key(*k), Operand::Literal(SmallBytes::from(vec![*v])))
                }
            })
            .collect(),
    );
    let access = match store.access(me, at) {
        Ok(access) => access,
        Err(e) => {
            prop_assert_eq!(Err::<(), _>(e), below(at, model.watermark));
            return Ok(());
        }
    };
    let visibility = if own_only {
        Visibility::CommittedAndOwn
    } else {
        Visibility::All
    };
    let mut access = access.visibility(visibility).track_reads(track);
    let result = execute_piece(&piece, &[], &Procedures::new(), &mut access).unwrap();
    let finished = access.finish();

    let keep =
        move |v: &Version| !own_only || v.status == VersionStatus::Committed || v.writer == me;
    let mut outputs = Vec::new();
    let mut error = None;
    let mut writes = 0;
    for op in ops {
        match op {
            PieceOp::Get(k) => {
                let found = if track {
                    model.read_tracked(&key(*k), at, keep)
                } else {
                    model.latest_le(&key(*k), at, keep)
                };
                outputs.push(found.and_then(|v| v.value));
            }
            PieceOp::Put(k, v) => {
                outputs.push(None);
                if error.is_none() {
                    match model.write(&key(*k), at, me, val(Some(*v))) {
                        Ok(()) => writes += 1,
                        Err(e) => error = Some(e),
                    }
                }
            }
        }
    }
    prop_assert_eq!(result.outputs, outputs);
    prop_assert_eq!(finished, error.map_or(Ok(writes), Err));
    Ok(())
}

/// Everything observable must agree: every key's versions, counts, write checks.
fn compare(store: &MvStore, model: &Model) -> Result<(), TestCaseError> {
    store.check_invariants();
    prop_assert_eq!(store.watermark(), model.watermark);
    for k in 0..KEYS {
        let key = key(k);
        let expected = model.key_versions(&key);
        prop_assert_eq!(store.versions(&key), expected.as_slice());
        for ts in model.watermark.time_ns..=MAX_TS + 1 {
            prop_assert_eq!(
                store.covering_read_ts(&key, t(ts)),
                model.covering_read_ts(&key, t(ts)),
                "covering_read_ts({:?}, {})",
                key,
                ts
            );
        }
        prop_assert_eq!(
            store.latest_committed(&key).cloned(),
            model.latest_le(&key, Timestamp::MAX, |v| v.status
                == VersionStatus::Committed)
        );
    }
    prop_assert_eq!(store.key_count(), model.keys().len());
    prop_assert_eq!(store.version_count(), model.versions.len());
    prop_assert_eq!(
        store.pending_count(),
        model
            .versions
            .values()
            .filter(|v| v.status == VersionStatus::Pending)
            .count()
    );
    for tx in 0..TXNS {
        let mut ours: Vec<(Key, Timestamp)> = store
            .written_by(txn(tx))
            .map(|(k, ts)| (k.clone(), ts))
            .collect();
        ours.sort();
        let theirs: Vec<(Key, Timestamp)> = model
            .versions
            .iter()
            .filter(|(_, v)| v.writer == txn(tx))
            .map(|(k, _)| k.clone())
            .collect();
        prop_assert_eq!(ours, theirs);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn mvstore_matches_the_naive_model(actions in proptest::collection::vec(action(), 1..60)) {
        let mut store = MvStore::new();
        let mut model = Model::default();
        for action in &actions {
            apply(&mut store, &mut model, action)?;
            compare(&store, &model)?;
        }
    }

    /// A restored checkpoint answers every read at or above its timestamp like the
    /// original's committed state there (and exactly like the original when nothing
    /// newer or pending exists).
    #[test]
    fn restored_checkpoints_answer_reads_like_the_original(
        actions in proptest::collection::vec(action(), 1..60),
        at in 0..=MAX_TS,
    ) {
        let mut store = MvStore::new();
        let mut model = Model::default();
        for action in &actions {
            apply(&mut store, &mut model, action)?;
        }
        let checkpoint = match store.checkpoint(t(at)) {
            Ok(c) => c,
            Err(e) => {
                prop_assert_eq!(Err::<(), _>(e), below(t(at), store.watermark()));
                return Ok(());
            }
        };
        let json = serde_json::to_string(&checkpoint).unwrap();
        let decoded: StoreCheckpoint = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(&decoded, &checkpoint);
        let restored = MvStore::restore(&decoded).unwrap();
        restored.check_invariants();
        prop_assert_eq!(restored.watermark(), t(at));
        prop_assert!(restored.read_at(&key(0), Timestamp::new(at, 0)).is_ok());
        if at > 0 {
            prop_assert!(restored.read_at(&key(0), t(at - 1)).is_err());
        }
        // Only the committed state at `at` survives.
        let nothing_newer = (0..KEYS).all(|k| {
            store.versions(&key(k)).iter().all(|v| v.ts <= t(at) && v.is_committed())
        });
        for k in 0..KEYS {
            let want = store.read_committed_at(&key(k), t(at)).unwrap().cloned();
            for ts in at..=MAX_TS + 1 {
                let got = restored.read_at(&key(k), t(ts)).unwrap().cloned();
                prop_assert_eq!(&got, &want);
                if nothing_newer {
                    prop_assert_eq!(&got, &store.read_at(&key(k), t(ts)).unwrap().cloned());
                }
            }
        }
        // A checkpoint of the restored store is the same checkpoint.
        prop_assert_eq!(restored.checkpoint(t(at)).unwrap(), checkpoint);
    }
}

#[test]
fn malformed_checkpoints_are_refused() {
    let mut store = MvStore::new();
    store
        .install_committed(key(0), t(5), txn(1), val(Some(1)))
        .unwrap();
    store
        .install_committed(key(1), t(6), txn(1), val(Some(2)))
        .unwrap();
    let good = store.checkpoint(t(10)).unwrap();
    assert_eq!(good.len(), 2);
    let mut unsorted = good.clone();
    unsorted.versions.reverse();
    assert!(matches!(
        MvStore::restore(&unsorted),
        Err(StoreError::BadCheckpoint(_))
    ));
    let mut too_new = good.clone();
    too_new.at = t(5);
    assert!(MvStore::restore(&too_new).is_err());
    let mut pending = good.clone();
    pending.versions[0].1.status = VersionStatus::Pending;
    assert!(MvStore::restore(&pending).is_err());
    let mut bad_read = good;
    bad_read.versions[0].1.max_read_ts = t(1);
    assert!(MvStore::restore(&bad_read).is_err());
}
