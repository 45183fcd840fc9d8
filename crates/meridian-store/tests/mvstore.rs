//! Edge cases of every `MvStore` operation.

use meridian_core::txn::{execute_piece, KvAccess, Op, Operand, Piece, Procedures};
use meridian_core::value::{decode_int, decode_list, encode_int};
use meridian_core::SmallBytes;
use meridian_core::{Key, NodeId, ShardId, Timestamp, TxnId};
use meridian_store::{MvStore, StoreError, Version, Visibility};

fn k(s: &str) -> Key {
    SmallBytes::copy_from_slice(s.as_bytes())
}
fn v(s: &str) -> Option<SmallBytes> {
    Some(SmallBytes::copy_from_slice(s.as_bytes()))
}
fn t(n: u64) -> Timestamp {
    Timestamp::new(n, 0)
}
fn txn(n: u64) -> TxnId {
    TxnId::new(NodeId(1), 0, n)
}
fn value_at(store: &MvStore, key: &str, ts: u64) -> Option<SmallBytes> {
    store
        .read_at(key.as_bytes(), t(ts))
        .unwrap()
        .and_then(|v| v.value.clone())
}
/// A store with committed versions of `x` at 10, 20, 30 ("a", "b", "c") by txns 10, 20, 30.
fn three_versions() -> MvStore {
    let mut store = MvStore::new();
    for (ts, val) in [(10, "a"), (20, "b"), (30, "c")] {
        store
            .install_committed(k("x"), t(ts), txn(ts), v(val))
            .unwrap();
    }
    store
}

#[test]
fn reads_between_versions_see_the_latest_at_or_below() {
    let store = three_versions();
    assert_eq!(store.read_at(b"x", t(5)).unwrap(), None);
    assert_eq!(value_at(&store, "x", 10), v("a"));
    assert_eq!(value_at(&store, "x", 15), v("a"));
    assert_eq!(value_at(&store, "x", 20), v("b"));
    assert_eq!(value_at(&store, "x", 29), v("b"));
    assert_eq!(value_at(&store, "x", 1000), v("c"));
    let found = store.read_at(b"x", t(25)).unwrap().unwrap();
    assert_eq!((found.ts, found.writer), (t(20), txn(20)));
    assert!(found.is_committed());
    assert_eq!(store.versions_after(b"x", t(15)).len(), 2);
    assert_eq!(store.versions_after(b"x", t(30)).len(), 0);
    // Timestamps order by tiebreak inside one nanosecond.
    assert_eq!(
        store
            .read_at(b"x", Timestamp::new(19, u32::MAX))
            .unwrap()
            .unwrap()
            .ts,
        t(10)
    );
    store.check_invariants();
}

#[test]
fn untouched_keys_cost_nothing() {
    let mut store = MvStore::new();
    for i in 0..1_000_000u32 {
        assert_eq!(store.read_at(&i.to_be_bytes(), t(5)).unwrap(), None);
    }
    assert_eq!(store.latest_committed(b"nope"), None);
    assert!(store.versions(b"nope").is_empty());
    assert_eq!(store.covering_read_ts(b"nope", t(5)), Timestamp::ZERO);
    assert_eq!((store.key_count(), store.version_count()), (0, 0));
    // Revoking or committing what does not exist is a no-op, not an error.
    assert_eq!(store.commit(txn(1)), 0);
    assert_eq!(store.revoke(txn(1)), 0);
    assert_eq!(store.commit_at(txn(1), t(3)), Ok(0));
    // A tracked read of an absent key materializes it to hold the read timestamp.
    assert_eq!(store.read_at_tracked(&k("y"), t(7)).unwrap(), None);
    assert_eq!(store.key_count(), 1);
    assert_eq!(store.covering_read_ts(b"y", t(5)), t(7));
    store.check_invariants();
}

#[test]
fn pending_versions_are_visible_with_status_and_committed_reads_skip_them() {
    let mut store = three_versions();
    store.write(k("x"), t(25), txn(1), v("p")).unwrap();
    let seen = store.read_at(b"x", t(27)).unwrap().unwrap();
    assert!(seen.is_pending());
    assert_eq!((seen.writer, seen.value.clone()), (txn(1), v("p")));
    let committed = store.read_committed_at(b"x", t(27)).unwrap().unwrap();
    assert_eq!(committed.ts, t(20));
    assert_eq!(store.latest_committed(b"x").unwrap().ts, t(30));
    assert_eq!(store.pending_count(), 1);

    assert_eq!(store.commit(txn(1)), 1);
    assert_eq!(store.commit(txn(1)), 0, "a repeated commit changes nothing");
    assert!(store
        .read_committed_at(b"x", t(27))
        .unwrap()
        .unwrap()
        .is_committed());
    assert_eq!(
        store.read_committed_at(b"x", t(27)).unwrap().unwrap().ts,
        t(25)
    );
    assert_eq!(store.pending_count(), 0);
    store.check_invariants();
}

#[test]
fn tombstones_are_versions_without_a_value() {
    let mut store = three_versions();
    store
        .install_committed(k("x"), t(40), txn(40), None)
        .unwrap();
    let tomb = store.read_at(b"x", t(45)).unwrap().unwrap();
    assert!(tomb.is_tombstone());
    assert_eq!(value_at(&store, "x", 45), None);
    assert_eq!(value_at(&store, "x", 35), v("c"));
}

#[test]
fn write_errors_are_results() {
    let mut store = three_versions();
    assert_eq!(
        store.write(k("x"), t(20), txn(1), v("z")),
        Err(StoreError::TimestampTaken {
            key: k("x"),
            ts: t(20),
            writer: txn(20)
        })
    );
    // Own committed version: also taken.
    assert!(matches!(
        store.write(k("x"), t(20), txn(20), v("z")),
        Err(StoreError::TimestampTaken { .. })
    ));
    store.write(k("x"), t(25), txn(1), v("p")).unwrap();
    // Same (key, ts, txn): the pending value is replaced.
    store.write(k("x"), t(25), txn(1), v("q")).unwrap();
    assert_eq!(value_at(&store, "x", 25), v("q"));
    assert_eq!(store.version_count(), 4);
    // One pending version per (key, txn).
    assert_eq!(
        store.write(k("x"), t(26), txn(1), v("r")),
        Err(StoreError::PendingElsewhere {
            key: k("x"),
            txn: txn(1),
            existing: t(25)
        })
    );
    // Another key is fine.
    store.write(k("y"), t(26), txn(1), v("r")).unwrap();
    store.gc(t(22));
    assert_eq!(
        store.write(k("z"), t(21), txn(2), v("s")),
        Err(StoreError::BelowWatermark {
            ts: t(21),
            watermark: t(22)
        })
    );
    assert!(store.read_at(b"x", t(21)).is_err());
    assert!(store.read_at_tracked(&k("x"), t(21)).is_err());
    assert!(store.read_committed_at(b"x", t(21)).is_err());
    assert!(store.access(txn(3), t(21)).is_err());
    store.check_invariants();
}

#[test]
fn revoking_a_middle_version_exposes_the_one_below() {
    let mut store = three_versions();
    store.write(k("x"), t(25), txn(1), v("p")).unwrap();
    store.write(k("y"), t(25), txn(1), v("p")).unwrap();
    assert_eq!(store.revoke(txn(1)), 2);
    assert_eq!(value_at(&store, "x", 27), v("b"));
    assert_eq!(store.versions(b"x").len(), 3);
    assert_eq!(store.key_count(), 1, "y had nothing else and is gone");
    assert_eq!(store.txn_count(), 3);

    // revoke() leaves committed versions; revoke_all() removes them.
    assert_eq!(store.revoke(txn(20)), 0);
    assert_eq!(value_at(&store, "x", 25), v("b"));
    assert_eq!(store.revoke_all(txn(20)), 1);
    assert_eq!(value_at(&store, "x", 25), v("a"));
    assert_eq!(store.written_by(txn(20)).count(), 0);
    store.check_invariants();
}

#[test]
fn revoke_keeps_the_committed_versions_of_a_partly_committed_txn() {
    let mut store = MvStore::new();
    store
        .install_committed(k("a"), t(5), txn(1), v("1"))
        .unwrap();
    store.write(k("b"), t(6), txn(1), v("2")).unwrap();
    assert_eq!(store.revoke(txn(1)), 1);
    let written: Vec<_> = store
        .written_by(txn(1))
        .map(|(k, ts)| (k.clone(), ts))
        .collect();
    assert_eq!(written, vec![(k("a"), t(5))]);
    store.check_invariants();
}

#[test]
fn commit_at_moves_pending_versions_to_the_commit_timestamp() {
    // Clock-SI: prepared at 25 on this partition, committed at max(prepare ts) = 40.
    let mut store = three_versions();
    store.write(k("x"), t(25), txn(1), v("p")).unwrap();
    store.write(k("y"), t(25), txn(1), v("q")).unwrap();
    assert_eq!(store.commit_at(txn(1), t(40)), Ok(2));
    assert_eq!(value_at(&store, "x", 35), v("c"));
    assert_eq!(value_at(&store, "x", 27), v("b"));
    let moved = store.read_at(b"x", t(40)).unwrap().unwrap();
    assert_eq!(
        (moved.ts, moved.writer, moved.is_committed()),
        (t(40), txn(1), true)
    );
    assert_eq!(value_at(&store, "y", 39), None);
    assert_eq!(value_at(&store, "y", 40), v("q"));
    let mut written: Vec<_> = store
        .written_by(txn(1))
        .map(|(k, ts)| (k.clone(), ts))
        .collect();
    written.sort();
    assert_eq!(written, vec![(k("x"), t(40)), (k("y"), t(40))]);
    store.check_invariants();
}

#[test]
fn commit_at_is_all_or_nothing() {
    let mut store = three_versions();
    store.write(k("y"), t(25), txn(1), v("q")).unwrap();
    store.write(k("x"), t(25), txn(1), v("p")).unwrap();
    assert_eq!(
        store.commit_at(txn(1), t(30)),
        Err(StoreError::TimestampTaken {
            key: k("x"),
            ts: t(30),
            writer: txn(30)
        })
    );
    assert!(store.read_at(b"y", t(25)).unwrap().unwrap().is_pending());
    assert_eq!(store.read_at(b"y", t(30)).unwrap().unwrap().ts, t(25));
    assert_eq!(store.pending_count(), 2);
    assert!(store.commit_at(txn(1), t(31)).is_ok());
    store.check_invariants();
}

#[test]
fn tracked_reads_raise_max_read_ts_and_guard_writes() {
    let mut store = MvStore::new();
    store
        .install_committed(k("x"), t(10), txn(10), v("a"))
        .unwrap();
    store
        .install_committed(k("x"), t(30), txn(30), v("c"))
        .unwrap();
    assert_eq!(
        store.read_at(b"x", t(10)).unwrap().unwrap().max_read_ts,
        t(10)
    );
    let read = store.read_at_tracked(&k("x"), t(25)).unwrap().unwrap();
    assert_eq!((read.ts, read.max_read_ts), (t(10), t(25)));
    // A lower tracked read does not lower it.
    store.read_at_tracked(&k("x"), t(12)).unwrap();
    assert_eq!(store.versions(b"x")[0].max_read_ts, t(25));
    // A write at 20 would change what the read at 25 saw: covered.
    assert_eq!(store.covering_read_ts(b"x", t(20)), t(25));
    // At 27 (above the read) it is fine; at 35 the version at 30 covers only itself.
    assert!(store.covering_read_ts(b"x", t(27)) <= t(27));
    assert_eq!(store.covering_read_ts(b"x", t(35)), t(30));
    // Untracked reads record nothing.
    store.read_at(b"x", t(100)).unwrap();
    assert_eq!(store.covering_read_ts(b"x", t(35)), t(30));
    // Reads below the first version are recorded on the key's floor.
    store.read_at_tracked(&k("x"), t(5)).unwrap();
    assert_eq!(store.covering_read_ts(b"x", t(3)), t(5));
    assert_eq!(store.covering_read_ts(b"x", t(10)), t(5));
    store.check_invariants();
}

#[test]
fn revoking_a_read_pending_version_moves_its_reads_down() {
    let mut store = MvStore::new();
    store
        .install_committed(k("x"), t(10), txn(10), v("a"))
        .unwrap();
    store.write(k("x"), t(20), txn(1), v("p")).unwrap();
    // Aurogon: a reader at 25 records on the pending version, then waits.
    assert!(store
        .read_at_tracked(&k("x"), t(25))
        .unwrap()
        .unwrap()
        .is_pending());
    store.revoke(txn(1));
    // The reader will now see the version at 10, so a write at 15 must conflict.
    assert_eq!(store.versions(b"x")[0].max_read_ts, t(25));
    assert_eq!(store.covering_read_ts(b"x", t(15)), t(25));
    // Revoking the first version moves its reads to the floor.
    store.revoke_all(txn(10));
    assert_eq!(store.key_count(), 1, "the floor keeps the key");
    assert_eq!(store.covering_read_ts(b"x", t(15)), t(25));
    store.check_invariants();
}

#[test]
fn commit_at_moves_reads_it_no_longer_serves() {
    let mut store = MvStore::new();
    store
        .install_committed(k("x"), t(10), txn(10), v("a"))
        .unwrap();
    store.write(k("x"), t(20), txn(1), v("p")).unwrap();
    store
        .install_committed(k("x"), t(30), txn(30), v("c"))
        .unwrap();
    store.read_at_tracked(&k("x"), t(25)).unwrap();
    store.commit_at(txn(1), t(40)).unwrap();
    // The reader at 25 now sees the version at 10: writes in (10, 25) must conflict.
    assert_eq!(store.covering_read_ts(b"x", t(15)), t(25));
    assert_eq!(
        store.read_at(b"x", t(40)).unwrap().unwrap().max_read_ts,
        t(40)
    );
    store.check_invariants();
}

#[test]
fn commit_at_moves_reads_onto_versions_it_jumps_over() {
    let mut store = MvStore::new();
    store.write(k("x"), t(20), txn(1), v("p")).unwrap();
    store.read_at_tracked(&k("x"), t(27)).unwrap();
    // Written after the read (a protocol without MVTO checks may do this).
    store
        .install_committed(k("x"), t(25), txn(25), v("b"))
        .unwrap();
    store.commit_at(txn(1), t(40)).unwrap();
    // A read at 27 now sees the version at 25, and one below it the floor.
    assert_eq!(store.covering_read_ts(b"x", t(26)), t(27));
    assert_eq!(store.covering_read_ts(b"x", t(10)), t(27));
    store.check_invariants();
}

#[test]
fn gc_keeps_the_version_a_snapshot_at_the_watermark_needs() {
    let mut store = three_versions();
    let report = store.gc(t(25));
    assert_eq!((report.versions, report.keys), (1, 0));
    assert_eq!(store.watermark(), t(25));
    assert_eq!(value_at(&store, "x", 25), v("b"));
    assert_eq!(value_at(&store, "x", 30), v("c"));
    assert_eq!(store.version_count(), 2);
    assert_eq!(store.txn_count(), 2);
    // A lower watermark does not lower it.
    store.gc(t(5));
    assert_eq!(store.watermark(), t(25));
    assert!(matches!(
        store.read_at(b"x", t(24)),
        Err(StoreError::BelowWatermark { .. })
    ));
    // Exactly at a version's timestamp: the older ones go.
    store.gc(t(30));
    assert_eq!(store.version_count(), 1);
    assert_eq!(value_at(&store, "x", 30), v("c"));
    store.check_invariants();
}

#[test]
fn gc_never_drops_pending_versions_and_finishes_later() {
    let mut store = three_versions();
    store.write(k("x"), t(15), txn(1), v("p")).unwrap();
    store.gc(t(35));
    assert_eq!(
        store.version_count(),
        2,
        "the pending version and the anchor at 30"
    );
    assert_eq!(store.pending_count(), 1);
    store.commit(txn(1));
    store.gc(t(35));
    assert_eq!(store.version_count(), 1);
    assert_eq!(value_at(&store, "x", 35), v("c"));
    store.check_invariants();
}

#[test]
fn gc_removes_dead_tombstones_unless_a_later_read_saw_them() {
    let mut store = three_versions();
    store
        .install_committed(k("x"), t(40), txn(40), None)
        .unwrap();
    store
        .install_committed(k("y"), t(40), txn(41), None)
        .unwrap();
    store.read_at_tracked(&k("y"), t(60)).unwrap();
    let report = store.gc(t(50));
    assert_eq!(report.keys, 1);
    assert_eq!(store.read_at(b"x", t(50)).unwrap(), None);
    assert_eq!(store.key_count(), 1);
    // y's tombstone was read at 60: a write at 55 must still see that read.
    assert_eq!(store.covering_read_ts(b"y", t(55)), t(60));
    store.gc(t(60));
    assert_eq!(store.key_count(), 0);
    assert_eq!((store.version_count(), store.txn_count()), (0, 0));
    // Floors of absent-key reads go once the watermark passes them.
    store.read_at_tracked(&k("z"), t(70)).unwrap();
    store.gc(t(69));
    assert_eq!(store.key_count(), 1);
    store.gc(t(70));
    assert_eq!(store.key_count(), 0);
    store.check_invariants();
}

#[test]
fn gc_only_visits_changed_keys_but_misses_nothing() {
    let mut store = MvStore::new();
    for i in 0..100u32 {
        let key = SmallBytes::copy_from_slice(&i.to_be_bytes());
        store
            .install_committed(key.clone(), t(1), txn(1), v("a"))
            .unwrap();
        store.install_committed(key, t(2), txn(2), v("b")).unwrap();
    }
    store.gc(t(1));
    assert_eq!(store.version_count(), 200);
    store.gc(t(2));
    assert_eq!(store.version_count(), 100);
    store.gc(t(3));
    assert_eq!(store.version_count(), 100);
    store.check_invariants();
}

fn lit(v: i64) -> Operand {
    Operand::Literal(encode_int(v))
}

#[test]
fn pieces_execute_on_the_store_at_a_timestamp_as_a_txn() {
    let mut store = MvStore::new();
    store
        .install_committed(k("n"), t(10), txn(9), Some(encode_int(5)))
        .unwrap();
    store
        .install_committed(k("n"), t(50), txn(49), Some(encode_int(100)))
        .unwrap();
    let piece = Piece::ops(
        ShardId(0),
        vec![
            Op::Add(k("n"), lit(2)),
            Op::Get(k("n")),
            Op::Append(k("l"), lit(7)),
            Op::Append(k("l"), lit(8)),
            Op::Get(k("l")),
        ],
    );
    let mut access = store.access(txn(1), t(20)).unwrap();
    let result = execute_piece(&piece, &[], &Procedures::new(), &mut access).unwrap();
    assert_eq!(access.finish(), Ok(3));
    // Reads saw the version at 10 (not the one at 50) and then the piece's own writes.
    assert_eq!(decode_int(result.outputs[0].as_ref().unwrap()), Some(7));
    assert_eq!(decode_int(result.outputs[1].as_ref().unwrap()), Some(7));
    assert_eq!(
        decode_list(result.outputs[4].as_ref().unwrap()),
        Some(vec![7, 8])
    );
    // The writes are pending versions of txn 1 at 20, one per key.
    let n = store.read_at(b"n", t(20)).unwrap().unwrap();
    assert_eq!((n.ts, n.writer, n.is_pending()), (t(20), txn(1), true));
    assert_eq!(store.pending_count(), 2);
    assert_eq!(store.commit(txn(1)), 2);
    store.check_invariants();
}

#[test]
fn access_visibility_and_read_tracking() {
    let mut store = MvStore::new();
    store
        .install_committed(k("x"), t(10), txn(9), v("old"))
        .unwrap();
    store.write(k("x"), t(15), txn(2), v("other")).unwrap();
    {
        let mut all = store.access(txn(1), t(20)).unwrap();
        assert_eq!(all.get(&k("x")), v("other"));
        assert_eq!(all.finish(), Ok(0));
    }
    {
        let mut own = store
            .access(txn(1), t(20))
            .unwrap()
            .visibility(Visibility::CommittedAndOwn)
            .track_reads(true);
        assert_eq!(own.get(&k("x")), v("old"));
        assert_eq!(own.get(&k("absent")), None);
        own.put(k("x"), SmallBytes::from_static(b"mine"));
        assert_eq!(own.get(&k("x")), v("mine"));
        assert_eq!(own.finish(), Ok(1));
    }
    assert_eq!(store.versions(b"x")[0].max_read_ts, t(20));
    assert_eq!(store.covering_read_ts(b"absent", t(19)), t(20));
    store.check_invariants();
}

#[test]
fn access_reports_the_first_failed_write() {
    let mut store = MvStore::new();
    store
        .install_committed(k("x"), t(20), txn(9), v("taken"))
        .unwrap();
    let mut access = store.access(txn(1), t(20)).unwrap();
    access.put(k("y"), SmallBytes::from_static(b"1"));
    access.put(k("x"), SmallBytes::from_static(b"2"));
    access.put(k("z"), SmallBytes::from_static(b"3"));
    assert!(matches!(
        access.finish(),
        Err(StoreError::TimestampTaken { writer, .. }) if writer == txn(9)
    ));
    // The piece is half-applied: the protocol revokes the transaction.
    assert_eq!(store.revoke(txn(1)), 1);
    assert_eq!(store.read_at(b"z", t(20)).unwrap(), None);
    store.check_invariants();
}

#[test]
fn versions_expose_everything() {
    let store = three_versions();
    let all: Vec<&Version> = store.versions(b"x").iter().collect();
    assert_eq!(all.len(), 3);
    assert!(all.windows(2).all(|w| w[0].ts < w[1].ts));
}

#[test]
fn commit_final_forgets_the_index_and_gc_still_collects() {
    let mut store = MvStore::new();
    store.write(k("x"), t(10), txn(1), v("a")).unwrap();
    store.write(k("y"), t(10), txn(1), v("b")).unwrap();
    assert_eq!(store.commit_final(txn(1)), 2);
    assert_eq!(store.txn_count(), 0, "the writer's index is gone");
    assert_eq!(store.written_by(txn(1)).count(), 0);
    assert_eq!(
        store.revoke_all(txn(1)),
        0,
        "a final commit is not taken back"
    );
    assert_eq!(value_at(&store, "x", 10), v("a"));
    store.check_invariants();

    // A later version of x makes the forgotten one collectable; gc drops it without an
    // index entry, and the accounting stays exact.
    store.write(k("x"), t(20), txn(2), v("c")).unwrap();
    assert_eq!(store.commit_final(txn(2)), 1);
    assert_eq!(store.version_count(), 3);
    let report = store.gc(t(25));
    assert_eq!(report.versions, 1);
    assert_eq!(store.versions(b"x").len(), 1);
    assert_eq!(value_at(&store, "x", 30), v("c"));
    store.check_invariants();

    // A pending version is still indexed (and revocable) next to forgotten ones.
    store.write(k("y"), t(30), txn(3), v("d")).unwrap();
    assert_eq!(store.revoke(txn(3)), 1);
    assert_eq!(value_at(&store, "y", 35), v("b"));
    store.check_invariants();
}
