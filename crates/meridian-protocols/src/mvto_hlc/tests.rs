//! Behaviour of `mvto-hlc` under the in-crate driver (test topology: shard 0's primary
//! n0, shard 1's n2, coordinators n4 and n5; messages take 1 ms). Each test names a
//! mechanism and fails if that mechanism were missing.

use super::wire::Status;
use super::*;
use crate::testkit::{MsgKind, MS};
use meridian_core::txn::{ClientResponse, Op, Operand, Outcome, Piece, Procedures, Rmw, Txn};
use meridian_core::value::{decode_list, encode_int};
use meridian_core::{Key, ProtocolConfig, Timestamp, Topology};

type Driver = crate::testkit::Driver<MvtoNode>;

impl MsgKind for Msg {
    fn kind(&self) -> &'static str {
        match self {
            Msg::Eval(_) => "eval",
            Msg::Evaluated { .. } => "evaluated",
            Msg::Refresh { .. } => "refresh",
            Msg::Refreshed { .. } => "refreshed",
            Msg::Stage { .. } => "stage",
            Msg::Staged { .. } => "staged",
            Msg::Commit { .. } => "commit",
            Msg::Abort { .. } => "abort",
            Msg::Decided { .. } => "decided",
            Msg::Push { .. } => "push",
            Msg::Resolve { .. } => "resolve",
            Msg::Resolved { .. } => "resolved",
            Msg::QueryIntents { .. } => "query-intents",
            Msg::IntentsQueried { .. } => "intents-queried",
            Msg::Pull { .. } => "pull",
            Msg::Replicate { .. } => "replicate",
            Msg::RepRead { .. } => "rep-read",
        }
    }
}

fn driver(options: &str) -> Driver {
    Driver::new::<MvtoHlc>(options, Procedures::new(), 7)
}

impl Driver {
    fn primary(&self, shard: u32) -> &Primary {
        match self.node(self.server_node(shard)) {
            Some(MvtoNode::Primary(p)) => p,
            other => panic!("shard {shard}'s primary is {other:?}"),
        }
    }

    /// The committed value of `key` (as a list) read by a fresh one-shot transaction.
    fn read_list(&mut self, coordinator: usize, key: &Key, shard: u32) -> Vec<i64> {
        let piece = Piece::ops(ShardId(shard), vec![Op::Get(key.clone())]);
        let r = self.submit(
            coordinator,
            Txn {
                pieces: vec![piece],
            },
        );
        assert!(self.run_until_answered(&[r], 5_000 * MS));
        match self.outcome(r) {
            Some(Outcome::Committed { results, .. }) => results[0].outputs[0]
                .as_ref()
                .map(|v| decode_list(v).expect("a list"))
                .unwrap_or_default(),
            other => panic!("read not committed: {other:?}"),
        }
    }
}

fn append(key: &Key, v: i64) -> Rmw {
    let _ = key;
    Rmw::Append(encode_int(v))
}

fn commit_ts(o: &Outcome) -> Timestamp {
    match o {
        Outcome::Committed {
            commit_ts: Some(ts),
            ..
        } => *ts,
        other => panic!("not committed: {other:?}"),
    }
}

fn get(d: &mut Driver, c: usize, txn: meridian_core::TxnId, key: &Key) -> Option<Vec<i64>> {
    match d.get(c, txn, key) {
        ClientResponse::Read(v) => v.map(|v| decode_list(&v).expect("a list")),
        other => panic!("not a read: {other:?}"),
    }
}

#[test]
fn a_write_below_another_transactions_read_is_pushed_above_it() {
    let mut d = driver("");
    // Coordinator 1's clock is 50 ms behind: its timestamp is below coordinator 0's.
    let c1 = d.coordinator_node(1);
    d.offsets[c1.index()] = -50 * MS as i64;
    let x = d.key_on(0, "x");
    let reader = d.begin(0, None);
    assert_eq!(get(&mut d, 0, reader, &x), None);
    let read_ts = commit_ts(&d.commit(0, reader));
    let writer = d.begin(1, None);
    d.modify(1, writer, &x, append(&x, 1));
    let write_ts = commit_ts(&d.commit(1, writer));
    assert!(d.counters.get("mvto_hlc.writes_pushed") >= Some(&1));
    assert!(
        write_ts > read_ts,
        "{write_ts:?} not above the read at {read_ts:?}"
    );
}

#[test]
fn a_pushed_writer_refreshes_its_reads_and_commits_when_nothing_changed() {
    let mut d = driver("");
    let c1 = d.coordinator_node(1);
    d.offsets[c1.index()] = -50 * MS as i64;
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let writer = d.begin(1, None);
    assert_eq!(get(&mut d, 1, writer, &y), None);
    // A younger reader of x makes the writer's write of x land above its timestamp.
    let reader = d.begin(0, None);
    get(&mut d, 0, reader, &x);
    d.commit(0, reader);
    d.modify(1, writer, &x, append(&x, 1));
    assert!(d.commit(1, writer).is_committed());
    assert_eq!(d.counters.get("mvto_hlc.read_refreshes"), Some(&1));
    assert_eq!(d.counters.get("mvto_hlc.refresh_failed"), None);
}

#[test]
fn a_refresh_that_finds_a_newer_write_aborts() {
    let mut d = driver("");
    let c1 = d.coordinator_node(1);
    d.offsets[c1.index()] = -50 * MS as i64;
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let writer = d.begin(1, None);
    assert_eq!(get(&mut d, 1, writer, &y), None);
    // Coordinator 0 (later clock) reads x and writes y, committing above the writer's
    // read of y: the writer's read of y is stale at any timestamp above x's read.
    let other = d.begin(0, None);
    get(&mut d, 0, other, &x);
    d.modify(0, other, &y, append(&y, 7));
    assert!(d.commit(0, other).is_committed());
    d.modify(1, writer, &x, append(&x, 1));
    assert!(matches!(d.commit(1, writer), Outcome::Aborted { .. }));
    assert_eq!(d.counters.get("mvto_hlc.refresh_failed"), Some(&1));
    // Without the refresh the writer commits on a stale read (the broken variant).
    let mut d = driver("unsafe_skip_read_refresh=true");
    d.offsets[c1.index()] = -50 * MS as i64;
    let writer = d.begin(1, None);
    assert_eq!(get(&mut d, 1, writer, &y), None);
    let other = d.begin(0, None);
    get(&mut d, 0, other, &x);
    d.modify(0, other, &y, append(&y, 7));
    assert!(d.commit(0, other).is_committed());
    d.modify(1, writer, &x, append(&x, 1));
    assert!(d.commit(1, writer).is_committed());
}

#[test]
fn a_value_in_the_uncertainty_interval_restarts_the_read_above_it() {
    let mut d = driver("");
    let c0 = d.coordinator_node(0);
    d.offsets[c0.index()] = 30 * MS as i64;
    let x = d.key_on(0, "x");
    let writer = d.begin(0, None);
    d.modify(0, writer, &x, append(&x, 5));
    let written = commit_ts(&d.commit(0, writer));
    // Coordinator 1's clock is 30 ms behind the writer's: a transaction it starts after
    // the commit has a lower timestamp, yet must see the write (no stale read).
    let reader = d.begin(1, None);
    assert_eq!(get(&mut d, 1, reader, &x), Some(vec![5]));
    assert!(commit_ts(&d.commit(1, reader)) >= written);
    assert!(d.counters.get("mvto_hlc.uncertainty_or_too_old_retries") >= Some(&1));
    // With a 10 ms maximum offset the same read is stale: the interval is what saves it.
    let mut d = driver("max_offset_ms=10");
    d.offsets[c0.index()] = 30 * MS as i64;
    let writer = d.begin(0, None);
    d.modify(0, writer, &x, append(&x, 5));
    d.commit(0, writer);
    let reader = d.begin(1, None);
    assert_eq!(get(&mut d, 1, reader, &x), None);
}

#[test]
fn writes_are_pipelined_and_the_commit_is_staged_in_parallel_with_them() {
    let mut d = driver("");
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let c0 = d.coordinator_node(0);
    // Hold every reply to the coordinator: the writes are answered anyway.
    d.hold(move |_, to, m| to == c0 && matches!(m, Msg::Evaluated { .. }));
    let txn = d.begin(0, None);
    d.modify(0, txn, &x, append(&x, 1));
    d.modify(0, txn, &y, append(&y, 2));
    let r = d.request(
        0,
        meridian_core::txn::ClientRequest::Interactive(meridian_core::txn::Step::Commit { txn }),
    );
    d.run_for(20 * MS);
    assert!(d.outcome(r).is_none(), "no write acknowledged yet");
    assert_eq!(
        d.sent.get("stage"),
        Some(&1),
        "staged before the writes were proven"
    );
    d.release_held();
    assert!(d.run_until_answered(&[r], 100 * MS));
    assert!(d.outcome(r).expect("answered").is_committed());
}

#[test]
fn the_client_hears_before_the_commit_is_explicit_and_recovery_finds_it_committed() {
    let mut d = driver("");
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    // The explicit commit never arrives (the coordinator "fails" right after answering).
    d.drop = Some(Box::new(|_, _, m| matches!(m, Msg::Commit { .. })));
    let txn = d.begin(0, None);
    d.modify(0, txn, &x, append(&x, 1));
    d.modify(0, txn, &y, append(&y, 2));
    assert!(d.commit(0, txn).is_committed());
    let anchor = d.primary(0);
    let id = TxnRef {
        coordinator: d.coordinator_node(0),
        incarnation: 0,
        seq: txn.seq,
    };
    assert!(matches!(
        anchor.anchor.status(id),
        Some(Status::Staging { .. })
    ));
    // The record stays STAGING until the anchor recovers it: every write is there.
    d.run_for(1_500 * MS);
    assert_eq!(d.read_list(1, &y, 1), vec![2]);
    assert_eq!(d.read_list(1, &x, 0), vec![1]);
    assert_eq!(d.counters.get("mvto_hlc.recovered_committed"), Some(&1));
    assert!(matches!(
        d.primary(0).anchor.status(id),
        Some(Status::Committed { .. })
    ));
}

#[test]
fn recovery_prevents_a_write_that_never_arrived_and_aborts() {
    let mut d = driver("");
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let p1 = d.server_node(1);
    // The write of y is held in the network; the coordinator stages, then crashes.
    d.hold(move |_, to, m| to == p1 && matches!(m, Msg::Eval(_)));
    let txn = d.begin(0, None);
    d.modify(0, txn, &x, append(&x, 1));
    d.modify(0, txn, &y, append(&y, 2));
    let r = d.request(
        0,
        meridian_core::txn::ClientRequest::Interactive(meridian_core::txn::Step::Commit { txn }),
    );
    d.run_for(20 * MS);
    assert!(d.outcome(r).is_none());
    let c0 = d.coordinator_node(0);
    d.crash(c0);
    d.run_for(2_000 * MS);
    assert_eq!(d.counters.get("mvto_hlc.recovered_aborted"), Some(&1));
    // The late write lands above the staged timestamp (prevented) or is refused: either
    // way nobody sees it, nor the write of x.
    d.release_held();
    d.run_for(100 * MS);
    assert_eq!(d.read_list(1, &x, 0), Vec::<i64>::new());
    assert_eq!(d.read_list(1, &y, 1), Vec::<i64>::new());
}

#[test]
fn an_older_writer_wounds_a_younger_intent_holder() {
    let mut d = driver("");
    let c0 = d.coordinator_node(0);
    d.offsets[c0.index()] = -50 * MS as i64;
    let x = d.key_on(0, "x");
    let young = d.begin(1, None);
    d.modify(1, young, &x, append(&x, 1));
    d.run_for(10 * MS);
    // Coordinator 0's transaction is older (earlier timestamp): it wounds the holder.
    let old = d.begin(0, None);
    d.modify(0, old, &x, append(&x, 2));
    assert!(d.commit(0, old).is_committed());
    assert!(matches!(d.commit(1, young), Outcome::Aborted { .. }));
    assert_eq!(d.counters.get("mvto_hlc.pending_aborted_by_push"), Some(&1));
    assert_eq!(d.counters.get("deadlock_aborts"), Some(&1));
    assert_eq!(d.read_list(1, &x, 0), vec![2]);
}

#[test]
fn options_are_checked() {
    let cluster = |opts: &str| {
        let topology = Topology::parse("test", crate::testkit::TOPOLOGY).unwrap();
        let config = ProtocolConfig::parse(opts).unwrap();
        meridian_core::node::Setup::<MvtoHlc>::new(topology, &config, Procedures::new()).map(|_| ())
    };
    assert!(cluster("").is_ok());
    assert!(cluster("max_offset_ms=0")
        .unwrap_err()
        .contains("max_offset_ms"));
    assert!(cluster("retry_ms=100,txn_timeout_ms=150")
        .unwrap_err()
        .contains("txn_timeout_ms"));
    assert!(cluster("nonsense=1").unwrap_err().contains("nonsense"));
    let _ = Operand::Literal(encode_int(0));
}

// ---- ClosedTS (replica_reads=closedts) ------------------------------------------------

/// The test topology with both coordinators in region B, where the read replicas n1 and
/// n3 are (the primaries n0 and n2 are in A, 100 ms away).
fn follower_driver(options: &str) -> Driver {
    let topology =
        crate::testkit::TOPOLOGY.replace("region = \"A\"\ncount = 2", "region = \"B\"\ncount = 2");
    Driver::on_topology::<MvtoHlc>(&topology, options, Procedures::new(), 7, 0)
}

fn one_shot(pieces: Vec<Piece>) -> Txn {
    Txn { pieces }
}

#[test]
fn a_follower_read_is_served_at_the_replica_once_closed_and_sees_what_committed_before() {
    let opts = "replica_reads=closedts,closed_ts_interval_ms=5,max_offset_ms=10";
    let mut d = follower_driver(opts);
    d.run_for(20 * MS);
    let (k, j) = (d.key_on(0, "k"), d.key_on(1, "j"));
    let write = |key: &Key, v: i64, shard: u32| {
        let op = Op::Append(key.clone(), Operand::Literal(encode_int(v)));
        Piece::ops(ShardId(shard), vec![op])
    };
    let writer = d.submit(0, one_shot(vec![write(&k, 1, 0), write(&j, 2, 1)]));
    assert!(d.run_until_answered(&[writer], 2_000 * MS));
    assert!(matches!(d.outcome(writer), Some(Outcome::Committed { .. })));
    let reads = vec![
        Piece::ops(ShardId(0), vec![Op::Get(k.clone())]),
        Piece::ops(ShardId(1), vec![Op::Get(j.clone())]),
    ];
    let reader = d.submit(1, one_shot(reads));
    assert!(d.run_until_answered(&[reader], 2_000 * MS));
    let Some(Outcome::Committed { results, .. }) = d.outcome(reader) else {
        panic!("reader: {:?}", d.outcome(reader));
    };
    let list = |r: &meridian_core::txn::PieceResult| {
        decode_list(r.outputs[0].as_ref().expect("a value")).expect("a list")
    };
    assert_eq!((list(&results[0]), list(&results[1])), (vec![1], vec![2]));
    assert!(d.counters.get("mvto_hlc.follower_reads") >= Some(&2));
    assert_eq!(
        d.sent.get("eval").copied().unwrap_or(0),
        2,
        "only the writer's pieces reached the primaries"
    );
    assert!(d.counters.get("mvto_hlc.visible_versions") >= Some(&1));
}

#[test]
fn a_write_arriving_after_a_closing_is_pushed_above_the_closed_timestamp() {
    let pushed = |opts: &str| {
        let mut d = driver(opts);
        d.run_for(20 * MS);
        let x = d.key_on(0, "x");
        let txn = d.begin(0, None);
        // The transaction's timestamp is now older than the closings that follow.
        d.run_for(30 * MS);
        d.modify(0, txn, &x, append(&x, 1));
        assert!(d.commit(0, txn).is_committed());
        d.counters
            .get("mvto_hlc.writes_pushed")
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(pushed(""), 0, "without closings nothing pushes the write");
    assert!(pushed("replica_reads=closedts,closed_ts_interval_ms=5") >= 1);
}
