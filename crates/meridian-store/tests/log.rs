//! Edge cases of `OrderedLog`: order, positions, truncation, hashes, snapshots.

use meridian_core::SmallBytes;
use meridian_core::{Key, NodeId, Timestamp, TxnId};
use meridian_store::{
    entry_hash, footprint, key_state_hash, Hash160, LogError, LogPayload, LogSnapshot, OrderedLog,
};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

fn k(s: &str) -> Key {
    SmallBytes::copy_from_slice(s.as_bytes())
}
fn t(n: u64) -> Timestamp {
    Timestamp::new(n, 0)
}
fn txn(n: u64) -> TxnId {
    TxnId::new(NodeId(1), 0, n)
}

/// A payload with read and write sets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Rw {
    reads: Vec<Key>,
    writes: Vec<Key>,
}
impl LogPayload for Rw {
    fn hash_keys(&self) -> Cow<'_, [Key]> {
        Cow::Owned(footprint(&self.reads, &self.writes).into_vec())
    }
}
fn rw(reads: &[&str], writes: &[&str]) -> Rw {
    Rw {
        reads: reads.iter().map(|s| k(s)).collect(),
        writes: writes.iter().map(|s| k(s)).collect(),
    }
}

fn txns(log: &OrderedLog<Rw>) -> Vec<u64> {
    log.iter().map(|(_, e)| e.txn.seq).collect()
}

#[test]
fn append_keeps_timestamp_order_and_refuses_going_back() {
    let mut log = OrderedLog::new();
    assert_eq!(log.append(txn(1), t(10), Rw::default()), Ok(0));
    assert_eq!(log.append(txn(2), t(20), Rw::default()), Ok(1));
    // Equal timestamps are ordered by txn id.
    assert_eq!(log.append(txn(3), t(20), Rw::default()), Ok(2));
    assert_eq!(
        log.append(txn(0), t(20), Rw::default()),
        Err(LogError::OutOfOrder {
            txn: txn(0),
            ts: t(20),
            last_txn: txn(3),
            last_ts: t(20)
        })
    );
    assert_eq!(
        log.append(txn(2), t(30), Rw::default()),
        Err(LogError::DuplicateTxn(txn(2)))
    );
    assert_eq!((log.len(), log.first_pos(), log.end_pos()), (3, 0, 3));
    log.check_invariants();
}

#[test]
fn insert_remove_and_retimestamp_keep_order_and_positions() {
    let mut log = OrderedLog::new();
    for (n, ts) in [(1, 10), (2, 20), (3, 30)] {
        log.append(txn(n), t(ts), Rw::default()).unwrap();
    }
    assert_eq!(log.insert(txn(4), t(15), Rw::default()), Ok(1));
    assert_eq!(txns(&log), vec![1, 4, 2, 3]);
    assert_eq!(log.position(txn(2)), Some(2));
    assert_eq!(log.at(2).unwrap().txn, txn(2));
    assert_eq!(log.at(4), None);

    // Tiga §3.5 case 3 / §3.7 (3): the agreed timestamp moves the entry.
    assert_eq!(log.set_timestamp(txn(4), t(35)), Ok(3));
    assert_eq!(txns(&log), vec![1, 2, 3, 4]);
    assert_eq!(log.get(txn(4)).unwrap().ts, t(35));
    assert_eq!(
        log.set_timestamp(txn(9), t(1)),
        Err(LogError::UnknownTxn(txn(9)))
    );

    let (pos, entry) = log.remove(txn(2)).unwrap();
    assert_eq!((pos, entry.txn), (1, txn(2)));
    assert_eq!(log.remove(txn(2)), None);
    assert_eq!(txns(&log), vec![1, 3, 4]);
    assert_eq!(log.position(txn(4)), Some(2));
    assert_eq!(log.first_pos_after(t(30)), 2);
    assert_eq!(log.first_pos_after(t(5)), 0);
    assert_eq!(log.position_for(t(30), txn(0)), 1);
    log.check_invariants();
}

#[test]
fn ranges_clamp_to_what_the_log_holds() {
    let mut log = OrderedLog::new();
    for n in 0..10 {
        log.append(txn(n), t(n), ()).unwrap();
    }
    log.truncate_prefix(3).unwrap();
    let positions = |r: Vec<(u64, _)>| r.into_iter().map(|(p, _)| p).collect::<Vec<u64>>();
    assert_eq!(positions(log.range(5..7).collect()), vec![5, 6]);
    assert_eq!(positions(log.range(..4).collect()), vec![3]);
    assert_eq!(positions(log.range(8..).collect()), vec![8, 9]);
    assert_eq!(positions(log.range(8..=100).collect()), vec![8, 9]);
    assert!(log.range(20..30).next().is_none());
    assert!(log.range(0..2).next().is_none());
    assert_eq!(log.range(..).next_back().unwrap().0, 9);
    assert_eq!(log.iter().next().unwrap().1.txn, txn(3));
}

#[test]
fn truncation_keeps_hashes_and_fences_off_the_prefix() {
    let mut log = OrderedLog::new();
    let mut twin = OrderedLog::new();
    for n in 1..=5 {
        log.append(txn(n), t(n * 10), rw(&["r"], &[&format!("w{n}")]))
            .unwrap();
        twin.append(txn(n), t(n * 10), rw(&["r"], &[&format!("w{n}")]))
            .unwrap();
    }
    let dropped: Vec<TxnId> = log.truncate_prefix(2).unwrap().map(|e| e.txn).collect();
    assert_eq!(dropped, vec![txn(1), txn(2)]);
    assert_eq!((log.first_pos(), log.end_pos(), log.len()), (2, 5, 3));
    assert_eq!(log.position(txn(3)), Some(2));
    assert_eq!(log.at(1), None);
    assert_eq!(log.hash(), twin.hash());
    assert_eq!(log.key_hashes(), twin.key_hashes());
    assert_eq!(log.recompute_hash(), log.hash());
    assert_eq!(&log.recompute_key_hashes(), twin.key_hashes());
    // Nothing may land in the truncated prefix.
    assert!(matches!(
        log.insert(txn(9), t(15), Rw::default()),
        Err(LogError::BelowTruncated { .. })
    ));
    assert!(matches!(
        log.set_timestamp(txn(4), t(19)),
        Err(LogError::BelowTruncated { .. })
    ));
    assert_eq!(log.insert(txn(9), t(25), Rw::default()), Ok(2));
    assert!(matches!(
        log.truncate_prefix(1),
        Err(LogError::PositionOutOfRange { .. })
    ));
    assert!(log.truncate_prefix(7).is_err());
    assert_eq!(log.truncate_prefix(6).unwrap().len(), 4);
    assert!(log.is_empty());
    assert_eq!(log.end_pos(), 6);
    assert_eq!(log.append(txn(10), t(60), Rw::default()), Ok(6));
    log.check_invariants();
}

#[test]
fn the_log_hash_is_the_xor_of_entry_hashes() {
    let mut log: OrderedLog<()> = OrderedLog::new();
    assert_eq!(log.hash(), Hash160::ZERO);
    log.append(txn(1), t(10), ()).unwrap();
    log.append(txn(2), t(20), ()).unwrap();
    let expected = entry_hash(txn(1), t(10)) ^ entry_hash(txn(2), t(20));
    assert_eq!(log.hash(), expected);
    // The hash "including T" before T is appended, for a fast-reply.
    assert_eq!(log.hash() ^ entry_hash(txn(3), t(30)), {
        let mut with = log.clone();
        with.append(txn(3), t(30), ()).unwrap();
        with.hash()
    });
    log.set_timestamp(txn(1), t(15)).unwrap();
    assert_eq!(
        log.hash(),
        entry_hash(txn(1), t(15)) ^ entry_hash(txn(2), t(20))
    );
    log.set_timestamp(txn(1), t(10)).unwrap();
    assert_eq!(log.hash(), expected);
    log.remove(txn(1)).unwrap();
    log.remove(txn(2)).unwrap();
    assert_eq!(log.hash(), Hash160::ZERO);
}

#[test]
fn per_key_hashes_follow_appendix_d() {
    let mut log = OrderedLog::new();
    log.append(txn(1), t(10), rw(&["x"], &["y"])).unwrap();
    // Read-only entries are left out of the per-key table, not out of the log hash.
    log.append(txn(2), t(20), rw(&["x", "z"], &[])).unwrap();
    log.append(txn(3), t(30), rw(&["y"], &["y", "w"])).unwrap();
    let (h1, h3) = (entry_hash(txn(1), t(10)), entry_hash(txn(3), t(30)));
    assert_eq!(log.key_hash(b"x"), h1);
    assert_eq!(log.key_hash(b"y"), h1 ^ h3);
    assert_eq!(log.key_hash(b"w"), h3);
    assert_eq!(log.key_hash(b"z"), Hash160::ZERO);
    assert_eq!(log.key_hash_count(), 3);
    assert_eq!(log.hash(), h1 ^ entry_hash(txn(2), t(20)) ^ h3);
    assert!(log.get(txn(2)).unwrap().hash_keys().is_empty());
    assert_eq!(&*log.get(txn(3)).unwrap().hash_keys(), &[k("w"), k("y")]);

    // h_T = XOR over T's keys of SHA1(<key, hash_key>); duplicates count once.
    let expected =
        key_state_hash(b"w", log.key_hash(b"w")) ^ key_state_hash(b"y", log.key_hash(b"y"));
    assert_eq!(log.txn_keys_hash(txn(3)), Some(expected));
    assert_eq!(log.keys_hash(&[k("y"), k("w"), k("y")]), expected);
    assert_eq!(log.txn_keys_hash(txn(9)), None);
    // A read-only transaction's reply can still encode the keys it read.
    assert_ne!(log.keys_hash(&[k("x")]), Hash160::ZERO);

    // Removing every entry that touched a key drops it from the table.
    log.remove(txn(3)).unwrap();
    assert_eq!(log.key_hash(b"w"), Hash160::ZERO);
    assert_eq!(log.key_hash_count(), 2);
    log.remove(txn(1)).unwrap();
    assert_eq!(log.key_hash_count(), 0);
}

#[test]
fn per_key_hashes_commute_with_unrelated_entries() {
    // Two logs that differ only in an entry touching other keys agree on x's hash.
    let mut a = OrderedLog::new();
    let mut b = OrderedLog::new();
    a.append(txn(1), t(10), rw(&[], &["x"])).unwrap();
    b.append(txn(1), t(10), rw(&[], &["x"])).unwrap();
    a.append(txn(2), t(20), rw(&[], &["y"])).unwrap();
    assert_ne!(a.hash(), b.hash());
    assert_eq!(a.keys_hash(&[k("x")]), b.keys_hash(&[k("x")]));
    assert_ne!(a.keys_hash(&[k("y")]), b.keys_hash(&[k("y")]));
}

#[test]
fn snapshots_round_trip_with_their_hashes() {
    let mut log = OrderedLog::new();
    for n in 1..=6 {
        log.append(txn(n), t(n * 10), rw(&["r"], &[&format!("w{}", n % 3)]))
            .unwrap();
    }
    log.truncate_prefix(1).unwrap();
    for from in 1..=6 {
        let snapshot = log.snapshot_from(from).unwrap();
        let json = serde_json::to_string(&snapshot).unwrap();
        let back: LogSnapshot<Rw> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snapshot);
        let restored = OrderedLog::from_snapshot(back).unwrap();
        restored.check_invariants();
        assert_eq!(restored.hash(), log.hash());
        assert_eq!(restored.key_hashes(), log.key_hashes());
        assert_eq!(restored.first_pos(), from);
        assert_eq!(restored.end_pos(), log.end_pos());
        let ours: Vec<_> = log.range(from..).map(|(p, e)| (p, e.txn, e.ts)).collect();
        let theirs: Vec<_> = restored.iter().map(|(p, e)| (p, e.txn, e.ts)).collect();
        assert_eq!(ours, theirs);
        // The restored log refuses what the original refuses.
        assert!(OrderedLog::from_snapshot(log.snapshot_from(from).unwrap())
            .unwrap()
            .insert(txn(99), t(from * 10 - 5), Rw::default())
            .is_err());
    }
    assert!(log.snapshot_from(0).is_err());
    assert!(log.snapshot_from(7).is_err());
    assert_eq!(log.snapshot().base, 1);

    let mut bad = log.snapshot();
    bad.entries.swap(0, 1);
    assert!(matches!(
        OrderedLog::from_snapshot(bad),
        Err(LogError::BadSnapshot(_))
    ));
    let mut bad = log.snapshot();
    bad.prefix_key_hashes.reverse();
    assert!(OrderedLog::from_snapshot(bad).is_err());
}

#[test]
fn payloads_are_reachable_by_txn() {
    let mut log = OrderedLog::new();
    log.append(txn(1), t(10), rw(&["x"], &["y"])).unwrap();
    let before = log.hash();
    log.payload_mut(txn(1)).unwrap().writes.push(k("z"));
    assert_eq!(log.get(txn(1)).unwrap().payload.writes.len(), 2);
    assert_eq!(log.hash(), before);
    assert_eq!(
        log.key_hash(b"z"),
        Hash160::ZERO,
        "keys were captured at insertion"
    );
    assert!(log.contains(txn(1)));
    assert_eq!(log.first().unwrap().txn, log.last().unwrap().txn);
}
