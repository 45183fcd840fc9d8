//! Behaviour of `2pl-2pc` under the in-crate driver. Each test names a feature and fails if
//! that feature were missing.

use super::*;
use crate::testkit::{Faults, MS};
use meridian_core::txn::{
    AbortReason, CommitPath, KvAccess, Op, Operand, Outcome, Piece, PieceBody, PieceResult,
    ProcedureCall, Procedures, Step, Txn, Value,
};
use meridian_core::value::{decode_int, decode_list, encode_int};
use meridian_core::SmallBytes;
use meridian_core::{NodeId, Topology};
use std::sync::Arc;

// ---- helpers ---------------------------------------------------------------------------

type Driver = crate::testkit::Driver<TwoPlNode>;

impl Driver {
    fn server(&self, shard: u32) -> &Server {
        match self.node(self.server_node(shard)) {
            Some(TwoPlNode::Server(s)) => s,
            other => panic!("shard {shard}'s data node is {other:?}"),
        }
    }

    fn coordinator(&self, index: usize) -> &Coordinator {
        match self.node(self.coordinator_node(index)) {
            Some(TwoPlNode::Coordinator(c)) => c,
            other => panic!("coordinator {index} is {other:?}"),
        }
    }
}

fn key(s: &str) -> SmallBytes {
    SmallBytes::copy_from_slice(s.as_bytes())
}

fn int(v: i64) -> Operand {
    Operand::Literal(encode_int(v))
}

fn piece(shard: u32, ops: Vec<Op>) -> Piece {
    Piece::ops(ShardId(shard), ops)
}

fn txn(pieces: Vec<Piece>) -> Txn {
    Txn { pieces }
}

fn append(shard: u32, k: &str, v: i64) -> Piece {
    piece(shard, vec![Op::Append(key(k), int(v))])
}

fn add(shard: u32, k: &str, v: i64) -> Piece {
    piece(shard, vec![Op::Add(key(k), int(v))])
}

fn driver(options: &str) -> Driver {
    Driver::new::<TwoPlTwoPc>(options, Procedures::new(), 7)
}

fn committed(d: &Driver, r: RequestId) -> (Vec<PieceResult>, CommitPath) {
    match d.outcome(r) {
        Some(Outcome::Committed { results, path, .. }) => (results.clone(), *path),
        other => panic!("{r} did not commit: {other:?}"),
    }
}

fn abort_reason(d: &Driver, r: RequestId) -> AbortReason {
    match d.outcome(r) {
        Some(Outcome::Aborted { reason }) => reason.clone(),
        other => panic!("{r} did not abort: {other:?}"),
    }
}

fn out_int(result: &PieceResult, i: usize) -> Option<i64> {
    result.outputs[i].as_ref().and_then(|v| decode_int(v))
}

fn int_at(d: &Driver, shard: u32, k: &str) -> Option<i64> {
    d.server(shard)
        .value(k.as_bytes())
        .and_then(|v| decode_int(v))
}

fn list_at(d: &Driver, shard: u32, k: &str) -> Vec<i64> {
    d.server(shard)
        .value(k.as_bytes())
        .map_or_else(Vec::new, |v| decode_list(v).expect("a list"))
}

/// Submits, runs until answered, then a little longer: a 2PC client hears the decision
/// before the participants apply it and unlock.
fn run(d: &mut Driver, coordinator: usize, t: Txn) -> RequestId {
    let r = d.submit(coordinator, t);
    assert!(d.run_until_answered(&[r], 60_000 * MS), "{r} unanswered");
    d.run_for(20 * MS);
    r
}

// ---- commit paths ----------------------------------------------------------------------

#[test]
fn single_shard_transaction_commits_in_one_round() {
    let mut d = driver("");
    let ops = vec![
        Op::Put(key("x"), int(5)),
        Op::Get(key("x")),
        Op::Add(key("x"), int(2)),
    ];
    let r = run(&mut d, 0, txn(vec![piece(0, ops)]));
    let (results, path) = committed(&d, r);
    assert_eq!(path, CommitPath::Local);
    // The piece reads its own buffered write.
    assert_eq!(out_int(&results[0], 1), Some(5));
    assert_eq!(out_int(&results[0], 2), Some(7));
    assert_eq!(int_at(&d, 0, "x"), Some(7));
    // One round: one EXECUTE, no PREPARE, and the locks are gone.
    assert_eq!(d.sent["execute"], 1);
    assert_eq!(d.sent.get("prepare"), None);
    assert!(d.server(0).idle());
    // The next transaction reads the committed value.
    let r = run(&mut d, 1, txn(vec![add(0, "x", 1)]));
    assert_eq!(out_int(&committed(&d, r).0[0], 0), Some(8));
}

#[test]
fn cross_shard_transaction_commits_through_2pc_and_applies_only_on_commit() {
    let mut d = driver("");
    let t = d.txn_id(0, 0, 0);
    d.hold(|_, _, m| m.kind() == "commit");
    let y_ops = vec![Op::Add(key("y"), int(4)), Op::Get(key("y"))];
    let r = run(&mut d, 0, txn(vec![add(0, "x", 3), piece(1, y_ops)]));
    let (results, path) = committed(&d, r);
    assert_eq!(path, CommitPath::TwoPhase);
    assert_eq!(out_int(&results[0], 0), Some(3));
    assert_eq!(out_int(&results[1], 1), Some(4));
    // The decision is logged before the client hears; the servers are prepared, with the
    // writes buffered (not applied) and the locks held.
    let c0 = d.coordinator_node(0);
    assert!(d.records[c0.index()]
        .iter()
        .any(|rec| matches!(rec, Record::Decided { txn, .. } if *txn == t)));
    for shard in 0..2 {
        assert!(d.server(shard).is_prepared(t));
        let node = d.server_node(shard);
        assert!(d.records[node.index()]
            .iter()
            .any(|rec| matches!(rec, Record::Prepared(p) if p.age.txn == t)));
    }
    assert_eq!(int_at(&d, 0, "x"), None);
    assert_eq!(d.server(0).lock_mode(b"x", t), Some(LockMode::Exclusive));
    d.release_held();
    d.run_for(100 * MS);
    assert_eq!(int_at(&d, 0, "x"), Some(3));
    assert_eq!(int_at(&d, 1, "y"), Some(4));
    assert!(d.server(0).idle() && d.server(1).idle());
    assert_eq!(d.coordinator(0).pending_commits(), 0);
    // Replicas that are not their shard's initial leader take no part.
    for shard in 0..2u32 {
        for &replica in &d.cluster.shards[shard as usize][1..] {
            assert_eq!(d.delivered[replica.index()], 0);
        }
    }
}

#[test]
fn value_dependencies_flow_across_shards_as_soon_as_inputs_exist() {
    let mut d = driver("");
    run(
        &mut d,
        0,
        txn(vec![piece(0, vec![Op::Put(key("src"), int(9))])]),
    );
    d.sent.clear();
    let from = |piece| Operand::Input { piece, output: 0 };
    let t = txn(vec![
        piece(0, vec![Op::Get(key("src"))]),
        // Independent: travels with piece 0.
        piece(1, vec![Op::Put(key("w"), int(1))]),
        piece(1, vec![Op::Add(key("dst"), from(0))]),
        piece(0, vec![Op::Put(key("copy"), from(2))]),
    ]);
    let r = run(&mut d, 0, t);
    let (results, _) = committed(&d, r);
    assert_eq!(out_int(&results[2], 0), Some(9));
    assert_eq!(int_at(&d, 1, "dst"), Some(9));
    assert_eq!(int_at(&d, 0, "copy"), Some(9));
    assert_eq!(int_at(&d, 1, "w"), Some(1));
    // Pieces 0 and 1 together, then 2 once 0's output exists, then 3 once 2's does.
    assert_eq!(d.sent["execute"], 4);
}

#[test]
fn dependencies_within_one_shard_resolve_on_the_server() {
    let mut d = driver("");
    let t = txn(vec![
        add(0, "a", 5),
        piece(
            0,
            vec![Op::Put(
                key("b"),
                Operand::Input {
                    piece: 0,
                    output: 0,
                },
            )],
        ),
    ]);
    let r = run(&mut d, 0, t);
    assert_eq!(committed(&d, r).1, CommitPath::Local);
    assert_eq!(int_at(&d, 0, "b"), Some(5));
    assert_eq!(d.sent["execute"], 1);
}

// ---- locking -----------------------------------------------------------------------------

#[test]
fn wait_die_kills_a_younger_requester() {
    let mut d = driver("");
    let old = d.txn_id(0, 0, 0);
    let s1 = d.server_node(1);
    // The old transaction locks x on shard 0 but cannot finish (shard 1 does not hear it).
    d.hold(move |_, to, m| m.txn() == Some(old) && to == s1);
    let r_old = d.submit(0, txn(vec![add(0, "x", 1), add(1, "y", 1)]));
    d.run_for(10 * MS);
    assert_eq!(d.server(0).lock_mode(b"x", old), Some(LockMode::Exclusive));
    let r_young = run(&mut d, 1, txn(vec![add(0, "x", 10)]));
    assert_eq!(abort_reason(&d, r_young), AbortReason::Conflict);
    assert_eq!(d.counters.get("deadlock_aborts"), Some(&1));
    d.release_held();
    assert!(d.run_until_answered(&[r_old], 1_000 * MS));
    committed(&d, r_old);
    d.run_for(20 * MS);
    assert_eq!(int_at(&d, 0, "x"), Some(1));
}

#[test]
fn wait_die_makes_an_older_requester_wait_then_serializes_it() {
    let mut d = driver("");
    let old = d.txn_id(0, 0, 0);
    let young = d.txn_id(1, 0, 0);
    let s1 = d.server_node(1);
    d.hold(move |_, to, m| {
        (m.txn() == Some(old) && m.kind() == "execute") || (m.txn() == Some(young) && to == s1)
    });
    let r_old = d.submit(0, txn(vec![append(0, "x", 1)]));
    d.run_for(MS);
    let r_young = d.submit(1, txn(vec![append(0, "x", 2), append(1, "y", 2)]));
    d.run_for(10 * MS);
    assert_eq!(
        d.server(0).lock_mode(b"x", young),
        Some(LockMode::Exclusive)
    );
    // Now the older transaction reaches shard 0: it queues behind the younger holder.
    d.hold(move |_, to, m| m.txn() == Some(young) && to == s1);
    d.release(move |_, _, m| m.txn() == Some(old));
    d.run_for(10 * MS);
    assert_eq!(d.server(0).waiters(b"x"), 1);
    assert!(d.outcome(r_old).is_none());
    d.release_held();
    assert!(d.run_until_answered(&[r_old, r_young], 1_000 * MS));
    committed(&d, r_old);
    committed(&d, r_young);
    assert_eq!(list_at(&d, 0, "x"), vec![2, 1]);
    assert_eq!(list_at(&d, 1, "y"), vec![2]);
}

// ---- faults ------------------------------------------------------------------------------

#[test]
fn duplicated_and_reordered_messages_are_harmless() {
    let mut d = driver("");
    d.faults = Faults {
        drop: 0.0,
        duplicate: 1.0,
        jitter_ns: 5 * MS,
    };
    let mut cross = Vec::new();
    for i in 0..24 {
        let t = if i % 3 == 0 {
            txn(vec![append(0, "x", i)])
        } else {
            cross.push(i);
            txn(vec![append(0, "x", i), append(1, "y", i)])
        };
        let r = run(&mut d, (i % 2) as usize, t);
        committed(&d, r);
    }
    // Late duplicates keep arriving; none may apply anything twice.
    d.run_for(10_000 * MS);
    assert_eq!(list_at(&d, 0, "x"), (0..24).collect::<Vec<_>>());
    assert_eq!(list_at(&d, 1, "y"), cross);
    assert!(d.server(0).idle() && d.server(1).idle());
}

/// Random loss, duplication and reordering, concurrent conflicting transactions: every
/// committed append appears exactly once, no aborted one appears, and cross-shard
/// transactions are ordered the same way on both shards.
#[test]
fn lossy_network_keeps_outcomes_atomic_and_consistent() {
    let options = "retry_ms=20,exec_timeout_ms=160,idle_timeout_ms=400,query_ms=40";
    for seed in 0..50 {
        let mut d = Driver::new::<TwoPlTwoPc>(options, Procedures::new(), seed);
        d.faults = Faults {
            drop: 0.15,
            duplicate: 0.1,
            jitter_ns: 3 * MS,
        };
        let mut requests = Vec::new();
        for i in 0..40i64 {
            let t = match i % 3 {
                0 => txn(vec![append(0, "x", i)]),
                1 => txn(vec![append(1, "y", i)]),
                _ => txn(vec![append(0, "x", i), append(1, "y", i)]),
            };
            requests.push((i, d.submit((i % 2) as usize, t)));
            d.run_for(10 * MS);
        }
        let all: Vec<RequestId> = requests.iter().map(|(_, r)| *r).collect();
        assert!(d.run_until_answered(&all, 120_000 * MS), "seed {seed}");
        d.run_for(120_000 * MS);
        let (x, y) = (list_at(&d, 0, "x"), list_at(&d, 1, "y"));
        for (i, r) in &requests {
            let in_x = x.iter().filter(|v| *v == i).count();
            let in_y = y.iter().filter(|v| *v == i).count();
            let expected = match d.outcome(*r).expect("answered") {
                Outcome::Committed { .. } => 1,
                Outcome::Aborted { .. } => 0,
                Outcome::Unknown { .. } => {
                    assert_ne!(i % 3, 2, "seed {seed}: 2PC never leaves the client unsure");
                    in_x + in_y
                }
            };
            match i % 3 {
                0 => assert_eq!((in_x, in_y), (expected, 0), "seed {seed} txn {i}"),
                1 => assert_eq!((in_x, in_y), (0, expected), "seed {seed} txn {i}"),
                _ => assert_eq!((in_x, in_y), (expected, expected), "seed {seed} txn {i}"),
            }
        }
        let cross = |list: &[i64]| {
            list.iter()
                .filter(|v| *v % 3 == 2)
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cross(&x),
            cross(&y),
            "seed {seed}: shards disagree on the order"
        );
        assert!(d.server(0).idle() && d.server(1).idle(), "seed {seed}");
        for c in 0..2 {
            assert_eq!(d.coordinator(c).in_flight(), 0, "seed {seed}");
            assert_eq!(d.coordinator(c).pending_commits(), 0, "seed {seed}");
        }
    }
}

/// Loss, duplication, reordering, and servers and coordinators crashing and restarting at
/// random: every transaction is all-or-nothing across its shards, committed ones are in,
/// aborted ones are out, and once every node is back up everything is resolved.
#[test]
fn random_crashes_and_restarts_keep_transactions_atomic() {
    use rand::{Rng, SeedableRng};
    let options = "retry_ms=20,exec_timeout_ms=160,idle_timeout_ms=400,query_ms=40,\
                   checkpoint_every=5";
    // [aborted, unsure, committed] over all seeds, and crashes: the run must exercise them.
    let (mut stats, mut crashes) = ([0; 3], 0);
    for seed in 0..50 {
        let mut d = Driver::new::<TwoPlTwoPc>(options, Procedures::new(), seed);
        d.faults = Faults {
            drop: 0.05,
            duplicate: 0.05,
            jitter_ns: 3 * MS,
        };
        let mut rng = meridian_core::NodeRng::seed_from_u64(seed);
        let victims = [
            d.server_node(0),
            d.server_node(1),
            d.coordinator_node(0),
            d.coordinator_node(1),
        ];
        let mut down: Vec<(NodeId, u64)> = Vec::new();
        let mut requests = Vec::new();
        for i in 0..60i64 {
            let t = match i % 3 {
                0 => txn(vec![append(0, "x", i)]),
                1 => txn(vec![append(1, "y", i)]),
                _ => txn(vec![append(0, "x", i), append(1, "y", i)]),
            };
            requests.push((i, d.submit((i % 2) as usize, t)));
            d.run_for(10 * MS);
            if rng.gen_bool(0.08) {
                let victim = victims[rng.gen_range(0..victims.len())];
                if down.iter().all(|(n, _)| *n != victim) {
                    d.crash(victim);
                    crashes += 1;
                    down.push((victim, d.now + rng.gen_range(5..300) * MS));
                }
            }
            let now = d.now;
            for (node, _) in down.iter().filter(|(_, at)| *at <= now) {
                d.restart(*node);
            }
            down.retain(|(_, at)| *at > now);
        }
        for (node, _) in std::mem::take(&mut down) {
            d.restart(node);
        }
        d.run_for(60_000 * MS);
        let (x, y) = (list_at(&d, 0, "x"), list_at(&d, 1, "y"));
        for (i, r) in &requests {
            let in_x = x.iter().filter(|v| *v == i).count();
            let in_y = y.iter().filter(|v| *v == i).count();
            let (lo, hi) = match d.outcome(*r) {
                Some(Outcome::Committed { .. }) => (1, 1),
                Some(Outcome::Aborted { .. }) => (0, 0),
                // Unknown, or never answered (its coordinator crashed).
                Some(Outcome::Unknown { .. }) | None => (0, 1),
            };
            let copies = match i % 3 {
                0 | 1 => in_x + in_y,
                _ => {
                    assert_eq!(in_x, in_y, "seed {seed} txn {i}: half applied");
                    in_x
                }
            };
            assert!(
                (lo..=hi).contains(&copies),
                "seed {seed} txn {i}: {copies} copies, outcome {:?}",
                d.outcome(*r)
            );
            stats[lo + hi] += 1;
        }
        let cross = |list: &[i64]| {
            list.iter()
                .filter(|v| *v % 3 == 2)
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            cross(&x),
            cross(&y),
            "seed {seed}: shards disagree on the order"
        );
        assert!(d.server(0).idle() && d.server(1).idle(), "seed {seed}");
        for c in 0..2 {
            assert_eq!(d.coordinator(c).in_flight(), 0, "seed {seed}");
            assert_eq!(d.coordinator(c).pending_commits(), 0, "seed {seed}");
        }
    }
    assert!(
        crashes >= 50 && stats.iter().all(|n| *n > 20),
        "{stats:?} {crashes}"
    );
}

#[test]
fn a_server_crashed_after_prepare_recovers_and_applies_the_commit() {
    let mut d = driver("");
    let t = d.txn_id(0, 0, 0);
    let s0 = d.server_node(0);
    d.hold(move |_, to, m| m.kind() == "commit" && to == s0);
    let r = run(&mut d, 0, txn(vec![append(0, "x", 1), append(1, "y", 1)]));
    committed(&d, r);
    assert!(d.server(0).is_prepared(t));
    d.crash(s0);
    d.run_for(100 * MS);
    d.restart(s0);
    // Rebuilt from its records: still prepared, still holding the lock, writes not applied.
    assert!(d.server(0).is_prepared(t));
    assert_eq!(d.server(0).lock_mode(b"x", t), Some(LockMode::Exclusive));
    assert_eq!(int_at(&d, 0, "x"), None);
    let r2 = run(&mut d, 1, txn(vec![append(0, "x", 2)]));
    assert_eq!(abort_reason(&d, r2), AbortReason::Conflict);
    d.release_held();
    d.run_for(2_000 * MS);
    assert_eq!(list_at(&d, 0, "x"), vec![1]);
    assert_eq!(list_at(&d, 1, "y"), vec![1]);
    assert!(d.server(0).idle());
}

/// A server restarts after executing a piece and before PREPARE; meanwhile another
/// transaction changes the key; then a late duplicate of the EXECUTE re-runs the piece
/// against the new value. The coordinator holds the first run's result, so the server must
/// not vote yes for the second run (its writes would not match what the client was told).
#[test]
fn a_restart_between_execution_and_prepare_aborts_the_transaction() {
    let mut d = driver("");
    let t = d.txn_id(0, 0, 0);
    let (s0, c0) = (d.server_node(0), d.coordinator_node(0));
    d.hold(|_, _, m| m.kind() == "prepare");
    let r = d.submit(0, txn(vec![add(0, "x", 1), add(1, "y", 1)]));
    d.run_for(20 * MS);
    assert_eq!(d.sent["prepare"], 2, "both pieces executed");
    d.crash(s0);
    d.restart(s0);
    let u = run(&mut d, 1, txn(vec![add(0, "x", 10)]));
    committed(&d, u);
    let late = Msg::ToServer {
        horizon: t,
        body: ToServer::Execute {
            txn: t,
            age_ns: 0,
            one_round: false,
            pieces: vec![PieceRun {
                index: 0,
                piece: add(0, "x", 1),
                inputs: vec![],
            }],
        },
    };
    d.inject(c0, s0, late);
    d.run_for(10 * MS);
    d.release_held();
    assert!(d.run_until_answered(&[r], 1_000 * MS));
    assert_eq!(abort_reason(&d, r), AbortReason::Failure);
    d.run_for(100 * MS);
    assert_eq!(int_at(&d, 0, "x"), Some(10));
    assert_eq!(int_at(&d, 1, "y"), None);
    assert!(d.server(0).idle() && d.server(1).idle());
}

#[test]
fn a_crashed_coordinator_blocks_prepared_servers_until_it_restarts_and_presumes_abort() {
    let mut d = driver("");
    let t = d.txn_id(0, 0, 0);
    let c0 = d.coordinator_node(0);
    d.hold(move |_, to, m| m.kind() == "vote" && to == c0);
    let r = d.submit(0, txn(vec![append(0, "x", 1), append(1, "y", 1)]));
    d.run_for(50 * MS);
    assert!(d.server(0).is_prepared(t) && d.server(1).is_prepared(t));
    d.crash(c0);
    d.drop_held();
    d.run_for(30_000 * MS);
    // 2PC blocks: prepared servers keep asking and keep their locks.
    assert!(d.server(0).is_prepared(t) && d.server(1).is_prepared(t));
    assert!(d.sent["query"] >= 2 * 30);
    assert_eq!(int_at(&d, 0, "x"), None);
    let r2 = run(&mut d, 1, txn(vec![append(0, "x", 2)]));
    assert_eq!(abort_reason(&d, r2), AbortReason::Conflict);
    // The restarted coordinator has no decision for it: presumed abort.
    d.restart(c0);
    d.run_for(2_000 * MS);
    assert!(d.server(0).idle() && d.server(1).idle());
    assert_eq!(int_at(&d, 0, "x"), None);
    let r3 = run(&mut d, 1, txn(vec![append(0, "x", 3)]));
    committed(&d, r3);
    assert_eq!(list_at(&d, 0, "x"), vec![3]);
    assert!(
        d.outcome(r).is_none(),
        "the crashed coordinator's client is never answered"
    );
}

#[test]
fn a_restarted_coordinator_answers_from_its_logged_decision() {
    let mut d = driver("");
    let c0 = d.coordinator_node(0);
    d.hold(|_, _, m| m.kind() == "commit");
    let r = run(&mut d, 0, txn(vec![append(0, "x", 1), append(1, "y", 1)]));
    committed(&d, r);
    d.crash(c0);
    assert!(d.drop_held() >= 2);
    d.restart(c0);
    d.run_for(2_000 * MS);
    assert_eq!(list_at(&d, 0, "x"), vec![1]);
    assert_eq!(list_at(&d, 1, "y"), vec![1]);
    assert!(d.server(0).idle() && d.server(1).idle());
    assert_eq!(d.coordinator(0).pending_commits(), 0);
    // The new incarnation's ids do not collide with the old ones.
    assert!(d.records[c0.index()].contains(&Record::Started { incarnation: 1 }));
    let r2 = run(&mut d, 0, txn(vec![append(0, "x", 2), append(1, "y", 2)]));
    committed(&d, r2);
    assert_eq!(list_at(&d, 0, "x"), vec![1, 2]);
}

#[test]
fn a_silent_unprepared_server_aborts_and_releases_its_locks() {
    let mut d = driver("");
    let t = d.txn_id(0, 0, 0);
    let s1 = d.server_node(1);
    d.hold(move |_, to, _| to == s1);
    d.submit(0, txn(vec![append(0, "x", 1), append(1, "y", 1)]));
    d.run_for(20 * MS);
    assert_eq!(d.server(0).lock_mode(b"x", t), Some(LockMode::Exclusive));
    // Its coordinator dies: nobody will ever tell shard 0 about the transaction again.
    d.crash(d.coordinator_node(0));
    d.drop_held();
    let idle = Options::for_cluster(&ProtocolConfig::default(), &d.cluster)
        .unwrap()
        .idle_timeout_ns;
    d.run_for(idle - 100 * MS);
    assert_eq!(d.server(0).lock_mode(b"x", t), Some(LockMode::Exclusive));
    d.run_for(200 * MS);
    assert!(d.server(0).idle());
    let r = run(&mut d, 1, txn(vec![append(0, "x", 2)]));
    committed(&d, r);
    assert_eq!(list_at(&d, 0, "x"), vec![2]);
}

#[test]
fn a_piece_abort_releases_locks_on_every_shard() {
    fn refuse(_: &mut dyn KvAccess, _: &[Value]) -> Result<Vec<Option<Value>>, AbortReason> {
        Err(AbortReason::User)
    }
    fn sneak(store: &mut dyn KvAccess, _: &[Value]) -> Result<Vec<Option<Value>>, AbortReason> {
        Ok(vec![store.get(&key("undeclared"))])
    }
    let mut procedures = Procedures::new();
    procedures.register("refuse", refuse);
    procedures.register("sneak", sneak);
    let mut d = Driver::new::<TwoPlTwoPc>("", procedures, 3);
    let call = |name: &str| Piece {
        shard: ShardId(1),
        body: PieceBody::Procedure(ProcedureCall {
            name: Arc::from(name),
            args: vec![],
            read_keys: vec![key("z")],
            write_keys: vec![key("z")],
        }),
    };
    let r = run(&mut d, 0, txn(vec![append(0, "x", 1), call("refuse")]));
    assert_eq!(abort_reason(&d, r), AbortReason::User);
    d.run_for(50 * MS);
    assert!(d.server(0).idle() && d.server(1).idle());
    assert_eq!(int_at(&d, 0, "x"), None);
    // A procedure touching a key it did not declare (hence did not lock) is refused.
    let r = run(&mut d, 0, txn(vec![call("sneak")]));
    assert!(matches!(abort_reason(&d, r), AbortReason::Invalid(_)));
}

// ---- the deliberately broken variant -----------------------------------------------------

/// T1 (x on shard 0, y on shard 1) is prepared but its COMMIT to shard 0 is delayed; T2 then
/// adds to x. Returns T2's outcome and x at the end.
fn early_release_scenario(options: &str) -> (Outcome, Option<i64>) {
    let mut d = driver(options);
    let s0 = d.server_node(0);
    d.hold(move |_, to, m| m.kind() == "commit" && to == s0);
    let r1 = run(&mut d, 0, txn(vec![add(0, "x", 1), add(1, "y", 1)]));
    committed(&d, r1);
    let r2 = run(&mut d, 1, txn(vec![add(0, "x", 10)]));
    d.release_held();
    d.run_for(1_000 * MS);
    (
        d.outcome(r2).cloned().expect("answered"),
        int_at(&d, 0, "x"),
    )
}

#[test]
fn unsafe_early_release_loses_updates_that_strict_locking_prevents() {
    let (t2, x) = early_release_scenario("");
    assert_eq!(
        t2,
        Outcome::Aborted {
            reason: AbortReason::Conflict
        }
    );
    assert_eq!(x, Some(1));
    let (t2, x) = early_release_scenario("unsafe_early_release=true");
    // T2 got the lock T1 should still hold, read x = 0 and committed 10 …
    assert!(t2.is_committed(), "{t2:?}");
    // … then T1's delayed commit installed x = 1 over it: a committed update is lost.
    assert_eq!(x, Some(1));
}

// ---- recovery from checkpoints -----------------------------------------------------------

#[test]
fn checkpoints_restore_the_same_state() {
    let mut d = driver("checkpoint_every=3");
    for i in 0..12 {
        let t = if i % 2 == 0 {
            txn(vec![append(0, "x", i)])
        } else {
            txn(vec![append(0, "x", i), append(1, "y", i)])
        };
        let r = run(&mut d, 0, t);
        committed(&d, r);
    }
    d.run_for(1_000 * MS);
    let s0 = d.server_node(0);
    let before = d.server(0).store_snapshot();
    let records = d.records[s0.index()].clone();
    let last = records
        .iter()
        .rposition(|r| matches!(r, Record::ServerCheckpoint(_)))
        .expect("checkpoints were written");
    // The suffix from the latest checkpoint alone rebuilds the same store.
    let opts = Options::for_cluster(&ProtocolConfig::default(), &d.cluster).unwrap();
    let rebuilt = Server::restore(s0, opts, d.procedures.clone(), &records[last..]);
    assert_eq!(rebuilt.store_snapshot(), before);
    d.crash(s0);
    d.restart(s0);
    assert_eq!(d.server(0).store_snapshot(), before);
    let c0 = d.coordinator_node(0);
    assert!(d.records[c0.index()]
        .iter()
        .any(|r| matches!(r, Record::CoordCheckpoint { .. })));
    let r = run(&mut d, 1, txn(vec![append(0, "x", 99)]));
    committed(&d, r);
    let mut expected: Vec<i64> = (0..12).collect();
    expected.push(99);
    assert_eq!(list_at(&d, 0, "x"), expected);
}

/// A value that only grows (TPC-C's NEW-ORDER list of a district when no Delivery runs, as
/// in Aurogon's TPC-C/N) is written whole by every record, so the log since the last
/// checkpoint must be bounded by bytes, not by records: with the record count alone, these
/// 300 commits (under `checkpoint_every` and the store's one key) all stayed in the log,
/// about 9 MB for a store of 60 KB, the quadratic growth that took Fig. 8's `2pl-pb` and
/// `occ-pb` points past 20 GB.
#[test]
fn a_growing_value_does_not_grow_the_log_past_the_store() {
    use crate::kit::log::LOG_BYTES_FLOOR;
    let mut d = driver("");
    let chunk = Operand::Literal(Value::from(vec![7u8; 200]));
    for _ in 0..300 {
        let t = txn(vec![piece(0, vec![Op::Append(key("x"), chunk.clone())])]);
        let r = run(&mut d, 0, t);
        committed(&d, r);
    }
    let s0 = d.server_node(0);
    let records = d.records[s0.index()].records().to_vec();
    let largest = records.iter().map(Record::logged_bytes).max().unwrap_or(0);
    let last = records
        .iter()
        .rposition(|r| matches!(r, Record::ServerCheckpoint(_)))
        .expect("the size rule wrote checkpoints");
    let logged: u64 = records[last + 1..].iter().map(Record::logged_bytes).sum();
    assert!(
        logged <= LOG_BYTES_FLOOR + largest,
        "{logged} bytes logged since the last checkpoint"
    );
    assert!(d.server(0).store_bytes_consistent());
    // The checkpoints lost nothing: the log rebuilds the store, and its byte count.
    let opts = Options::for_cluster(&ProtocolConfig::default(), &d.cluster).unwrap();
    let rebuilt = Server::restore(s0, opts, d.procedures.clone(), &records);
    assert_eq!(rebuilt.store_snapshot(), d.server(0).store_snapshot());
    assert!(rebuilt.store_bytes_consistent());
    assert_eq!(d.server(0).value(b"x").map(|v| v.len()), Some(300 * 200));
}

// ---- refusals, limits, configuration ---------------------------------------------------

#[test]
fn unsupported_invalid_and_excess_requests_are_refused() {
    let mut d = driver("max_inflight=1");
    let r = d.request(
        0,
        ClientRequest::Interactive(Step::Begin { latest_seen: None }),
    );
    assert!(matches!(abort_reason(&d, r), AbortReason::Unsupported(_)));
    let r = d.submit(0, txn(vec![append(7, "x", 1)]));
    assert!(matches!(abort_reason(&d, r), AbortReason::Invalid(_)));
    let r = d.submit(0, txn(vec![]));
    assert!(matches!(abort_reason(&d, r), AbortReason::Invalid(_)));
    // One transaction in flight (its EXECUTE parked): the next is refused, not queued.
    d.hold(|_, _, m| m.kind() == "execute");
    let first = d.submit(0, txn(vec![append(0, "x", 1)]));
    let second = d.submit(0, txn(vec![append(0, "x", 2)]));
    match abort_reason(&d, second) {
        AbortReason::Unsupported(why) => assert!(why.contains("overloaded"), "{why}"),
        other => panic!("{other:?}"),
    }
    d.release_held();
    assert!(d.run_until_answered(&[first], 1_000 * MS));
    committed(&d, first);
}

#[test]
fn options_are_checked() {
    let topology = Topology::parse("t", crate::testkit::TOPOLOGY).unwrap();
    let cluster = Cluster::new(topology, &[]).unwrap();
    let check =
        |text: &str| TwoPlTwoPc::parse_options(&ProtocolConfig::parse(text).unwrap(), &cluster);
    assert!(check("").is_ok());
    assert!(check("unsafe_early_release=true,retry_ms=5,max_waiters_per_key=0").is_ok());
    assert!(check("unsafe_skip_validation=true")
        .unwrap_err()
        .contains("occ-raft"));
    assert!(check("retry_ms=5,exec_timeout_ms=50,idle_timeout_ms=100,query_ms=20").is_ok());
    assert!(check("unsafe_early_relase=true")
        .unwrap_err()
        .contains("unknown"));
    assert!(check("unsafe_early_release=maybe")
        .unwrap_err()
        .contains("bad value"));
    assert!(check("retry_ms=-1").is_err());
    assert!(check("max_inflight=0").is_err());
    assert!(check("exec_timeout_ms=100,idle_timeout_ms=50").is_err());
    let opts = Options::parse(&ProtocolConfig::default(), 100.0).unwrap();
    assert!(!opts.unsafe_early_release);
    assert_eq!(opts.retry_ns, 250 * MS);
}

#[test]
fn bound_is_the_largest_round_trip_to_the_involved_data_nodes() {
    let topology = Topology::parse(
        "b",
        r#"
name = "b"
regions = ["A", "B", "C"]
intra_region_rtt_ms = 1.0
[[rtt]]
between = ["A", "B"]
ms = 100.0
[[rtt]]
between = ["A", "C"]
ms = 40.0
[[rtt]]
between = ["B", "C"]
ms = 70.0
[[shards]]
replicas = ["A", "B"]
leader = "B"
[[shards]]
replicas = ["C", "A"]
[[coordinators]]
region = "A"
"#,
    )
    .unwrap();
    let cluster = Cluster::new(topology, &[]).unwrap();
    let coordinator = cluster.coordinators[0];
    let bound = |shards: &[u32]| {
        let shards: Vec<ShardId> = shards.iter().map(|&s| ShardId(s)).collect();
        TwoPlTwoPc::bound_ms(&cluster, coordinator, &shards)
    };
    assert_eq!(bound(&[0]), 100.0);
    assert_eq!(bound(&[1]), 40.0);
    assert_eq!(bound(&[0, 1]), 100.0);
    assert_eq!(TwoPlTwoPc::NAME, "2pl-2pc");
    assert_eq!(TwoPlTwoPc::GUARANTEE, "strict-serializable");
}

#[test]
fn non_coordinators_refuse_client_requests() {
    let topology = Topology::parse("t", crate::testkit::TOPOLOGY).unwrap();
    let setup =
        Setup::<TwoPlTwoPc>::new(topology, &ProtocolConfig::default(), Procedures::new()).unwrap();
    // Node 1 is shard 0's second replica: inert.
    let mut node = TwoPlTwoPc::build(NodeId(1), &setup, &[]);
    assert!(matches!(node, TwoPlNode::Inert));
    let mut rng = <meridian_core::NodeRng as rand::SeedableRng>::seed_from_u64(0);
    let (mut effects, mut next_timer) = (Vec::new(), 0);
    let mut ctx =
        meridian_core::Context::new(NodeId(1), 0, &mut rng, &mut effects, &mut next_timer);
    node.on_client_request(&mut ctx, RequestId(0), ClientRequest::OneShot(txn(vec![])));
    assert!(matches!(
        effects.as_slice(),
        [meridian_core::Effect::Respond { .. }]
    ));
}

/// Durable records read back through the runtime's codec (postcard, not self-describing):
/// a field skipped when empty or `None` would shift the fields after it. Once that lost
/// every 2pl-2pc record across a restart.
#[test]
fn records_read_back_through_the_runtimes_codec() {
    use super::wire::{Record, ServerSnapshot};
    use meridian_core::txn::{Key, Value};
    let txn = meridian_core::TxnId {
        coordinator: NodeId(3),
        seq: 7,
    };
    let snapshot = ServerSnapshot {
        store: vec![(Key::from("x"), Value::from("1"))],
        prepared: Vec::new(),
        finished: Vec::new(),
        horizons: vec![txn],
        incarnation: 2,
        versions: Vec::new(),
        stamps: Vec::new(),
    };
    let records = [
        Record::Committed {
            txn,
            local: None,
            commit_ts: None,
        },
        Record::ServerCheckpoint(Box::new(snapshot)),
        Record::Started { incarnation: 4 },
    ];
    let bytes = postcard::to_allocvec(&records[..]).unwrap();
    let back: Vec<Record> = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back, records);
}
