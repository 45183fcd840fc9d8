//! Property tests of `OrderedLog`'s incremental hashes (Tiga §3.4, Appendix D):
//! * after any sequence of appends, inserts, removes, timestamp changes and truncations, the
//!   incremental log hash and per-key table equal those recomputed from scratch, and the
//!   log holds exactly the model's entries in `(ts, txn)` order;
//! * two logs with the same entry set, however built, have equal hashes;
//! * logs with different entry sets have different hashes.

use meridian_core::SmallBytes;
use meridian_core::{Key, NodeId, Timestamp, TxnId};
use meridian_store::{entry_hash, Hash160, LogError, LogPayload, OrderedLog};
use proptest::prelude::*;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Keys(Vec<Key>);
impl LogPayload for Keys {
    fn hash_keys(&self) -> Cow<'_, [Key]> {
        Cow::Borrowed(&self.0)
    }
}

fn key(i: u8) -> Key {
    SmallBytes::from(vec![b'k', i])
}
fn t(n: u64) -> Timestamp {
    Timestamp::new(n / 2, (n % 2) as u32)
}
fn txn(n: u64) -> TxnId {
    TxnId::new(NodeId((n % 3) as u32), 0, n)
}

/// Keys of an entry: empty (read-only) about a third of the time, duplicates allowed.
fn keys() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(vec![]),
        2 => proptest::collection::vec(0..6u8, 1..4),
    ]
}

#[derive(Clone, Debug)]
enum LogOp {
    Append(u64, u64, Vec<u8>),
    Insert(u64, u64, Vec<u8>),
    Remove(u64),
    SetTs(u64, u64),
    Truncate(u64),
}

fn log_op() -> impl Strategy<Value = LogOp> {
    let tx = 0..12u64;
    let ts = 0..40u64;
    prop_oneof![
        3 => (tx.clone(), ts.clone(), keys()).prop_map(|(a, b, c)| LogOp::Append(a, b, c)),
        4 => (tx.clone(), ts.clone(), keys()).prop_map(|(a, b, c)| LogOp::Insert(a, b, c)),
        2 => tx.clone().prop_map(LogOp::Remove),
        2 => (tx, ts).prop_map(|(a, b)| LogOp::SetTs(a, b)),
        1 => (0..4u64).prop_map(LogOp::Truncate),
    ]
}

fn payload(keys: &[u8]) -> Keys {
    Keys(keys.iter().map(|&k| key(k)).collect())
}

/// The model: every entry ever added and not removed (truncated ones included, since the
/// hashes keep covering them), plus which ones are truncated.
#[derive(Default)]
struct Model {
    live: BTreeMap<(Timestamp, TxnId), Vec<u8>>,
    truncated: BTreeMap<(Timestamp, TxnId), Vec<u8>>,
}

impl Model {
    fn hash(&self) -> Hash160 {
        self.live
            .keys()
            .chain(self.truncated.keys())
            .fold(Hash160::ZERO, |h, (ts, txn)| h ^ entry_hash(*txn, *ts))
    }

    fn key_hashes(&self) -> BTreeMap<Key, Hash160> {
        let mut table: BTreeMap<Key, Hash160> = BTreeMap::new();
        for ((ts, txn), keys) in self.live.iter().chain(&self.truncated) {
            let keys: BTreeSet<u8> = keys.iter().copied().collect();
            for k in keys {
                *table.entry(key(k)).or_default() ^= entry_hash(*txn, *ts);
            }
        }
        table.retain(|_, h| !h.is_zero());
        table
    }

    fn find(&self, n: u64) -> Option<(Timestamp, TxnId)> {
        self.live.keys().find(|(_, x)| *x == txn(n)).copied()
    }

    fn floor(&self) -> Option<(Timestamp, TxnId)> {
        self.truncated.keys().next_back().copied()
    }

    fn known(&self, n: u64) -> bool {
        self.find(n).is_some()
    }
}

fn apply(log: &mut OrderedLog<Keys>, model: &mut Model, op: &LogOp) -> Result<(), TestCaseError> {
    let above_floor = |model: &Model, at: (Timestamp, TxnId)| model.floor().is_none_or(|f| at > f);
    match op {
        LogOp::Append(n, ts, keys) => {
            let at = (t(*ts), txn(*n));
            let got = log.append(txn(*n), t(*ts), payload(keys));
            let last_ok = model.live.keys().next_back().is_none_or(|l| at > *l);
            let ok = !model.known(*n) && above_floor(model, at) && last_ok;
            prop_assert_eq!(got.is_ok(), ok, "append {:?}: {:?}", at, got);
            if ok {
                model.live.insert(at, keys.clone());
                prop_assert_eq!(got.unwrap(), log.end_pos() - 1);
            }
        }
        LogOp::Insert(n, ts, keys) => {
            let at = (t(*ts), txn(*n));
            let got = log.insert(txn(*n), t(*ts), payload(keys));
            let ok = !model.known(*n) && above_floor(model, at);
            prop_assert_eq!(got.is_ok(), ok, "insert {:?}: {:?}", at, got);
            if ok {
                model.live.insert(at, keys.clone());
                let expected = model.truncated.len() + model.live.range(..at).count();
                prop_assert_eq!(got.unwrap(), expected as u64);
            }
        }
        LogOp::Remove(n) => {
            let got = log.remove(txn(*n)).map(|(pos, e)| (pos, e.ts, e.txn));
            let want = model.find(*n).map(|at| {
                let pos = model.truncated.len() + model.live.range(..at).count();
                model.live.remove(&at);
                (pos as u64, at.0, at.1)
            });
            prop_assert_eq!(got, want);
        }
        LogOp::SetTs(n, ts) => {
            let got = log.set_timestamp(txn(*n), t(*ts));
            match model.find(*n) {
                None => prop_assert_eq!(got, Err(LogError::UnknownTxn(txn(*n)))),
                Some(old) => {
                    let at = (t(*ts), txn(*n));
                    if above_floor(model, at) {
                        let keys = model.live.remove(&old).unwrap();
                        model.live.insert(at, keys);
                        let pos = model.truncated.len() + model.live.range(..at).count();
                        prop_assert_eq!(got, Ok(pos as u64));
                    } else {
                        let is_below = matches!(got, Err(LogError::BelowTruncated { .. }));
                        prop_assert!(is_below);
                    }
                }
            }
        }
        LogOp::Truncate(count) => {
            let upto = log.first_pos() + (*count).min(log.len() as u64);
            let dropped = log.truncate_prefix(upto).unwrap();
            for e in dropped {
                let keys = model.live.remove(&(e.ts, e.txn)).unwrap();
                model.truncated.insert((e.ts, e.txn), keys);
            }
        }
    }
    Ok(())
}

fn compare(log: &OrderedLog<Keys>, model: &Model) -> Result<(), TestCaseError> {
    log.check_invariants();
    prop_assert_eq!(log.hash(), model.hash());
    prop_assert_eq!(log.recompute_hash(), model.hash());
    let table: BTreeMap<Key, Hash160> = log
        .key_hashes()
        .iter()
        .map(|(k, h)| (k.clone(), *h))
        .collect();
    prop_assert_eq!(&table, &model.key_hashes());
    let recomputed: BTreeMap<Key, Hash160> = log.recompute_key_hashes().into_iter().collect();
    prop_assert_eq!(&recomputed, &table);
    let entries: Vec<(Timestamp, TxnId)> = log.iter().map(|(_, e)| (e.ts, e.txn)).collect();
    let expected: Vec<(Timestamp, TxnId)> = model.live.keys().copied().collect();
    prop_assert_eq!(entries, expected);
    prop_assert_eq!(log.first_pos(), model.truncated.len() as u64);
    for (pos, e) in log.iter() {
        prop_assert_eq!(log.position(e.txn), Some(pos));
        prop_assert_eq!(log.at(pos).map(|x| x.txn), Some(e.txn));
    }
    Ok(())
}

/// Distinct transactions with timestamps and keys.
fn entry_set() -> impl Strategy<Value = Vec<(u64, u64, Vec<u8>)>> {
    proptest::collection::btree_map(0..30u64, (0..40u64, keys()), 0..12)
        .prop_map(|m| m.into_iter().map(|(n, (ts, k))| (n, ts, k)).collect())
}

fn build(entries: &[(u64, u64, Vec<u8>)], detours: &[bool]) -> OrderedLog<Keys> {
    let mut log = OrderedLog::new();
    for (i, (n, ts, keys)) in entries.iter().enumerate() {
        if detours.get(i).copied().unwrap_or(false) {
            // Arrive with another timestamp, get corrected later; and a stray entry that a
            // log sync removes.
            log.insert(txn(*n), t(ts + 7), payload(keys)).unwrap();
            log.insert(txn(1000 + *n), t(*ts), payload(&[1, 2]))
                .unwrap();
            log.set_timestamp(txn(*n), t(*ts)).unwrap();
            log.remove(txn(1000 + *n)).unwrap();
        } else {
            log.insert(txn(*n), t(*ts), payload(keys)).unwrap();
        }
    }
    log
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn incremental_hashes_equal_hashes_from_scratch(ops in proptest::collection::vec(log_op(), 1..80)) {
        let mut log = OrderedLog::new();
        let mut model = Model::default();
        for op in &ops {
            apply(&mut log, &mut model, op)?;
            compare(&log, &model)?;
        }
        // A snapshot of any suffix restores to a log that hashes the same.
        for from in log.first_pos()..=log.end_pos() {
            let restored = OrderedLog::from_snapshot(log.snapshot_from(from).unwrap()).unwrap();
            prop_assert_eq!(restored.hash(), log.hash());
            prop_assert_eq!(restored.key_hashes(), log.key_hashes());
            prop_assert_eq!(restored.end_pos(), log.end_pos());
        }
    }

    #[test]
    fn same_entry_set_in_any_order_hashes_the_same(
        (entries, shuffled) in entry_set().prop_flat_map(|e| (Just(e.clone()), Just(e).prop_shuffle())),
        detours in proptest::collection::vec(any::<bool>(), 12),
    ) {
        let a = build(&entries, &[]);
        let b = build(&shuffled, &detours);
        prop_assert_eq!(a.hash(), b.hash());
        prop_assert_eq!(a.key_hashes(), b.key_hashes());
        for (_, e) in a.iter() {
            prop_assert_eq!(a.txn_keys_hash(e.txn), b.txn_keys_hash(e.txn));
            prop_assert_eq!(a.position(e.txn), b.position(e.txn));
        }
    }

    #[test]
    fn different_entry_sets_hash_differently(a in entry_set(), b in entry_set()) {
        let set = |e: &[(u64, u64, Vec<u8>)]| e.iter().map(|(n, ts, _)| (*n, *ts)).collect::<BTreeSet<_>>();
        let (la, lb) = (build(&a, &[]), build(&b, &[]));
        prop_assert_eq!(set(&a) == set(&b), la.hash() == lb.hash());
    }
}
