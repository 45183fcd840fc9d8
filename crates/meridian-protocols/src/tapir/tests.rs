//! Scenario tests of `tapir` on the test driver: the fast and slow paths, RETRY with a new
//! timestamp, and a restarted replica that keeps the PREPARE-OK it gave.

use super::{Msg, Tapir, TapirNode};
use crate::testkit::{three_regions, MsgKind, MS};
use meridian_core::txn::{CommitPath, Op, Operand, Outcome, Piece, Procedures, Txn};
use meridian_core::value::encode_int;
use meridian_core::{Key, NodeId, ShardId};

type Driver = crate::testkit::Driver<TapirNode>;

impl MsgKind for Msg {
    fn kind(&self) -> &'static str {
        match self {
            Msg::Read { .. } => "read",
            Msg::ReadReply { .. } => "read-reply",
            Msg::Prepare { .. } => "prepare",
            Msg::PrepareReply { .. } => "prepare-reply",
            Msg::Finalize { .. } => "finalize",
            Msg::Confirm { .. } => "confirm",
            Msg::Commit { .. } => "commit",
            Msg::CommitAck { .. } => "commit-ack",
            Msg::Abort { .. } => "abort",
            Msg::Query { .. } => "query",
            Msg::DoViewChange { .. } => "do-view-change",
            Msg::StartView { .. } => "start-view",
        }
    }
}

/// Regions A, B, C; coordinators in A (the driver delivers every message in 1 ms, the
/// round trips only scale the default timeouts).
fn driver(options: &str) -> Driver {
    let topology = three_regions("tapir-test", 40.0, 60.0, 80.0);
    Driver::on_topology::<Tapir>(&topology, options, Procedures::new(), 1, 0)
}

fn one_piece(shard: u32, ops: Vec<Op>) -> Txn {
    Txn {
        pieces: vec![Piece::ops(ShardId(shard), ops)],
    }
}

fn run(d: &mut Driver, coordinator: usize, txn: Txn) -> Outcome {
    let request = d.submit(coordinator, txn);
    assert!(d.run_until_answered(&[request], 10_000 * MS));
    d.outcome(request).cloned().expect("answered")
}

fn path(outcome: &Outcome) -> CommitPath {
    match outcome {
        Outcome::Committed { path, .. } => *path,
        other => panic!("not committed: {other:?}"),
    }
}

fn replica(d: &Driver, node: NodeId) -> &super::Replica {
    match d.node(node) {
        Some(TapirNode::Replica(r)) => r,
        other => panic!("{node} is {other:?}"),
    }
}

#[test]
fn all_replicas_agreeing_is_the_fast_path_and_a_crashed_one_forces_the_slow_path() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let add = |k: &Key| one_piece(0, vec![Op::Add(k.clone(), Operand::Literal(encode_int(1)))]);
    let start = d.now;
    assert_eq!(path(&run(&mut d, 0, add(&x))), CommitPath::Fast);
    // The test driver delivers every message in 1 ms: a read round, then a PREPARE round.
    let took = d.now - start;
    assert!((3 * MS..=6 * MS).contains(&took), "took {took} ns");
    assert_eq!(d.sent.get("finalize"), None);
    let c = d.cluster.replicas(ShardId(0))[2];
    d.crash(c);
    assert_eq!(path(&run(&mut d, 0, add(&x))), CommitPath::Slow);
    assert!(d.sent["finalize"] > 0);
}

#[test]
fn a_write_below_a_later_read_retries_at_a_later_timestamp() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    // Coordinator 1's clock runs a second behind coordinator 0's.
    let late = d.coordinator_node(1);
    d.offsets[late.index()] = -1_000 * MS as i64;
    let read = run(&mut d, 0, one_piece(0, vec![Op::Get(x.clone())]));
    let Outcome::Committed {
        commit_ts: Some(read_ts),
        ..
    } = read
    else {
        panic!("{read:?}")
    };
    let write = run(
        &mut d,
        1,
        one_piece(0, vec![Op::Put(x.clone(), Operand::Literal(encode_int(7)))]),
    );
    let Outcome::Committed {
        commit_ts: Some(write_ts),
        ..
    } = write
    else {
        panic!("{write:?}")
    };
    assert!(
        write_ts > read_ts,
        "the write is ordered after the read it would invalidate"
    );
    assert!(d.counters["tapir_prepare_retry"] > 0);
    // With a single attempt allowed, the same write aborts instead.
    let mut d = driver("max_attempts=1");
    d.offsets[late.index()] = -1_000 * MS as i64;
    run(&mut d, 0, one_piece(0, vec![Op::Get(x.clone())]));
    let write = run(
        &mut d,
        1,
        one_piece(0, vec![Op::Put(x, Operand::Literal(encode_int(7)))]),
    );
    assert!(matches!(write, Outcome::Aborted { .. }), "{write:?}");
}

#[test]
fn a_restarted_replica_still_holds_the_prepare_ok_it_gave() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    // COMMITs are held: the transaction stays prepared at every replica.
    d.hold(|_, _, m| matches!(m, Msg::Commit { .. }));
    let append = one_piece(
        0,
        vec![Op::Append(x.clone(), Operand::Literal(encode_int(1)))],
    );
    assert!(matches!(run(&mut d, 0, append), Outcome::Committed { .. }));
    let txn = d.txn_id(0, 0, 0);
    let b = d.cluster.replicas(ShardId(0))[1];
    assert!(replica(&d, b).is_prepared(txn));
    d.crash(b);
    d.restart(b);
    assert!(
        replica(&d, b).is_prepared(txn),
        "the durable record keeps the vote"
    );
    // A conflicting read of the old version cannot gather a majority meanwhile.
    let read = run(&mut d, 1, one_piece(0, vec![Op::Get(x.clone())]));
    assert!(matches!(read, Outcome::Aborted { .. }), "{read:?}");
    d.release_held();
    d.run_for(1_000 * MS);
    assert!(!replica(&d, b).is_prepared(txn));
    let read = run(&mut d, 1, one_piece(0, vec![Op::Get(x)]));
    assert!(matches!(read, Outcome::Committed { .. }), "{read:?}");
}

#[test]
fn an_interactive_session_reads_its_writes_and_is_validated_at_commit() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let y = d.key_on(1, "y");
    let t1 = d.begin(0, None);
    assert!(matches!(
        d.get(0, t1, &x),
        meridian_core::txn::ClientResponse::Read(None)
    ));
    d.put(0, t1, &y, "1");
    let read = d.get(0, t1, &y);
    assert!(
        matches!(read, meridian_core::txn::ClientResponse::Read(Some(_))),
        "{read:?}"
    );
    // A second session overwrites x after t1 read it: t1's read is stale at commit.
    let t2 = d.begin(1, None);
    d.put(1, t2, &x, "2");
    assert!(matches!(d.commit(1, t2), Outcome::Committed { .. }));
    d.run_for(100 * MS);
    assert!(matches!(d.commit(0, t1), Outcome::Aborted { .. }));
    // Unknown sessions are refused, not committed.
    assert!(matches!(d.commit(0, t1), Outcome::Aborted { .. }));
}

#[test]
fn a_replica_restarted_from_checkpoints_serves_what_was_committed() {
    // A checkpoint after every record; the driver round-trips each through JSON.
    let mut d = driver("checkpoint_every=1");
    let x = d.key_on(0, "x");
    let add = one_piece(0, vec![Op::Add(x.clone(), Operand::Literal(encode_int(5)))]);
    assert!(matches!(run(&mut d, 0, add), Outcome::Committed { .. }));
    d.run_for(1_000 * MS);
    let a = d.cluster.replicas(ShardId(0))[0];
    d.crash(a);
    d.restart(a);
    let read = run(&mut d, 0, one_piece(0, vec![Op::Get(x)]));
    let Outcome::Committed { results, .. } = read else {
        panic!("{read:?}")
    };
    assert_eq!(results[0].outputs[0], Some(encode_int(5)));
}

/// `Modify` is a read then a buffered write: repeated modifies add up and read back, and a
/// modify whose read another session overwrote fails validation (no lost update).
#[test]
fn a_modify_reads_then_buffers_and_its_read_is_validated() {
    use meridian_core::txn::{ClientResponse, Rmw};
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let t = d.begin(0, None);
    d.modify(0, t, &x, Rmw::Add(2));
    d.modify(0, t, &x, Rmw::Add(3));
    assert_eq!(d.get(0, t, &x), ClientResponse::Read(Some(encode_int(5))));
    assert!(matches!(d.commit(0, t), Outcome::Committed { .. }));
    d.run_for(100 * MS);
    let (u, v) = (d.begin(0, None), d.begin(1, None));
    d.modify(0, u, &x, Rmw::Add(1));
    d.modify(1, v, &x, Rmw::Add(1));
    assert!(matches!(d.commit(1, v), Outcome::Committed { .. }));
    d.run_for(100 * MS);
    assert!(matches!(d.commit(0, u), Outcome::Aborted { .. }));
    let w = d.begin(0, None);
    assert_eq!(d.get(0, w, &x), ClientResponse::Read(Some(encode_int(6))));
}

/// A restarted replica refuses requests until a view change brings it back (never voting
/// from its log alone); after it, it is in fast quorums again.
#[test]
fn a_restarted_replica_rejoins_by_a_view_change_then_joins_fast_quorums() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let add = |k: &Key| one_piece(0, vec![Op::Add(k.clone(), Operand::Literal(encode_int(1)))]);
    assert_eq!(path(&run(&mut d, 0, add(&x))), CommitPath::Fast);
    let c = d.cluster.replicas(ShardId(0))[2];
    d.crash(c);
    assert_eq!(path(&run(&mut d, 0, add(&x))), CommitPath::Slow);
    // Its view change is held up: it stays out, and transactions commit without it.
    d.hold(|_, _, m| matches!(m, Msg::DoViewChange { .. }));
    d.restart(c);
    assert_eq!(path(&run(&mut d, 0, add(&x))), CommitPath::Slow);
    assert!(
        !replica(&d, c).is_normal(),
        "recovering until the view change"
    );
    assert_eq!(d.counters.get("tapir_votes_after_recovery"), None);
    d.release_held();
    d.run_for(3_000 * MS);
    assert!(replica(&d, c).is_normal());
    assert_eq!(d.counters["tapir_recoveries"], 1);
    assert!(d.counters["tapir_view_changes"] >= 1);
    let fast_before = d
        .counters
        .get("tapir_fast_quorum_after_view_change")
        .copied();
    assert_eq!(path(&run(&mut d, 0, add(&x))), CommitPath::Fast);
    assert!(d.counters["tapir_votes_after_recovery"] > 0);
    assert!(d.counters["tapir_fast_quorum_after_view_change"] > fast_before.unwrap_or(0));
    let read = run(&mut d, 1, one_piece(0, vec![Op::Get(x)]));
    let Outcome::Committed { results, .. } = read else {
        panic!("{read:?}")
    };
    assert_eq!(results[0].outputs[0], Some(encode_int(4)));
}

/// Issue 18, seed 20 of the serializable swarm: a replica that was down while a transaction
/// committed restarts and leads the view change. Its store lacked that commit, so the merge
/// re-validated a stale read of a second transaction (which only one record held, voted
/// ABORT) as PREPARE-OK, and the second transaction committed over the first one's append.
/// The leader must first apply every commit the records name: from the records (which carry
/// the latest commits' arguments), or, past that window (`commits_in_record=0`), by waiting
/// for the COMMIT.
#[test]
fn a_leader_that_missed_a_commit_does_not_revalidate_against_its_stale_store() {
    for (options, counter) in [
        ("", "tapir_commits_applied_from_records"),
        ("commits_in_record=0", "tapir_merge_waits_for_commits"),
    ] {
        leader_missed_a_commit(options, counter);
    }
}

fn leader_missed_a_commit(options: &str, counter: &str) {
    use meridian_core::txn::{ClientRequest, ClientResponse, Rmw, Step};
    let mut d = driver(options);
    let x = d.key_on(0, "x");
    let b = d.cluster.replicas(ShardId(0))[1];
    // The second transaction reads x (version zero) first.
    let t2 = d.begin(1, None);
    d.modify(1, t2, &x, Rmw::Add(10));
    // B, which leads view 1, is down while the first transaction commits at A and C.
    d.crash(b);
    let add = one_piece(0, vec![Op::Add(x.clone(), Operand::Literal(encode_int(1)))]);
    assert_eq!(path(&run(&mut d, 0, add)), CommitPath::Slow);
    d.run_for(100 * MS);
    // The second one's PREPAREs reach A and C (both vote ABORT: a stale read); the replies
    // are lost, so the coordinator asks again after the view change.
    d.hold(|_, _, m| matches!(m, Msg::PrepareReply { .. }));
    let commit = d.request(1, ClientRequest::Interactive(Step::Commit { txn: t2 }));
    d.run_for(20 * MS);
    assert_eq!(d.drop_held(), 2);
    d.restart(b);
    assert!(d.run_until_answered(&[commit], 20_000 * MS));
    assert!(replica(&d, b).is_normal());
    assert!(
        d.counters.get(counter).copied().unwrap_or(0) > 0,
        "{options}"
    );
    let outcome = d.outcome(commit).cloned();
    assert!(
        matches!(outcome, Some(Outcome::Aborted { .. })),
        "{options}: {outcome:?}"
    );
    let read = d.begin(0, None);
    let value = d.get(0, read, &x);
    assert_eq!(
        value,
        ClientResponse::Read(Some(encode_int(1))),
        "{options}"
    );
}

/// C is down while an append to `x` commits at A and B, and every COMMIT to C is held; then C
/// restarts and rejoins through view 1 (led by B). Returns the driver and C.
fn restart_after_a_missed_commit(options: &str) -> (Driver, NodeId, Key) {
    let mut d = driver(options);
    let x = d.key_on(0, "x");
    let c = d.cluster.replicas(ShardId(0))[2];
    d.hold(move |_, to, m| to == c && matches!(m, Msg::Commit { .. }));
    d.crash(c);
    let append = one_piece(
        0,
        vec![Op::Append(x.clone(), Operand::Literal(encode_int(1)))],
    );
    assert_eq!(path(&run(&mut d, 0, append)), CommitPath::Slow);
    d.run_for(100 * MS);
    d.restart(c);
    d.run_for(3_000 * MS);
    (d, c, x)
}

/// Issue 18, seed 155 of the serializable swarm: a replica down while a transaction committed
/// rejoined through a view change whose master record named that commit by id only, so it
/// returned to normal with a stale store (and later, leading a view on that store alone,
/// re-validated another transaction's stale read as PREPARE-OK). The records carry the
/// commits with their arguments (IR's Sync): C applies the one it missed from the master
/// record, with no COMMIT reaching it.
#[test]
fn a_replica_that_missed_a_commit_applies_it_from_the_view_change_records() {
    let (d, c, x) = restart_after_a_missed_commit("");
    let rejoined = replica(&d, c);
    assert!(rejoined.is_normal());
    assert_ne!(
        rejoined.occ.read(&x).1,
        meridian_core::Timestamp::ZERO,
        "normal again, C's store holds the append it missed"
    );
    assert!(d.counters["tapir_commits_applied_from_records"] > 0);
}

/// Past the window of commits a record carries (here none), a record names a commit by id
/// only: C adopts the START-VIEW but stays out of service until the COMMIT itself arrives.
#[test]
fn a_commit_named_by_id_only_keeps_the_replica_out_until_its_commit_arrives() {
    let (mut d, c, x) = restart_after_a_missed_commit("commits_in_record=0");
    assert!(!replica(&d, c).is_normal(), "stale store: not normal");
    assert_eq!(
        replica(&d, c).occ.read(&x).1,
        meridian_core::Timestamp::ZERO
    );
    assert!(d.counters["tapir_start_view_waits_for_commits"] > 0);
    // It waits without starting view after view (the others stay in view 1).
    assert_eq!(d.counters["tapir_view_changes"], 1);
    d.release_held();
    d.run_for(1_000 * MS);
    assert!(replica(&d, c).is_normal());
    assert_ne!(
        replica(&d, c).occ.read(&x).1,
        meridian_core::Timestamp::ZERO
    );
}
