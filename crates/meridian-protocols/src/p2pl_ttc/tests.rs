//! Behaviour of `p2pl-ttc` under the in-crate driver (test topology: shard 0's primary
//! n0, shard 1's n2, coordinators n4 and n5 in region A, oracles n6 in A and n7 in B;
//! messages take 1 ms). Each test names a feature and fails if that feature were missing.

use super::*;
use crate::testkit::MS;
use meridian_core::node::Setup;
use meridian_core::txn::{CommitPath, Op, Operand, Outcome, Piece, Procedures, Txn};
use meridian_core::value::encode_int;
use meridian_core::{ProtocolConfig, RequestId, Timestamp, Topology};

type Driver = crate::testkit::Driver<TwoPlNode>;

fn driver(options: &str) -> Driver {
    Driver::new::<P2plTtc>(options, Procedures::new(), 7)
}

fn append(d: &Driver, shard: u32, name: &str, v: i64) -> Piece {
    let k = d.key_on(shard, name);
    Piece::ops(
        ShardId(shard),
        vec![Op::Append(k, Operand::Literal(encode_int(v)))],
    )
}

/// Appends to a key on each shard: a two-participant transaction.
fn two_shard(d: &Driver, v: i64) -> Txn {
    Txn {
        pieces: vec![append(d, 0, "x", v), append(d, 1, "y", v)],
    }
}

fn commit_ts(d: &Driver, r: RequestId) -> Timestamp {
    match d.outcome(r) {
        Some(Outcome::Committed {
            commit_ts: Some(ts),
            path: CommitPath::TwoPhase,
            ..
        }) => *ts,
        other => panic!("not committed through 2PC with a timestamp: {other:?}"),
    }
}

/// ε = 20 ms: a commit wait of 40 ms dwarfs the 1 ms hops.
const WIDE_EPSILON: &str = "epsilon_us=20000";

#[test]
fn with_commit_wait_true_time_has_passed_the_timestamp_when_the_client_hears() {
    let mut d = driver(WIDE_EPSILON);
    let r = d.submit(0, two_shard(&d, 1));
    // Execute, prepare and the oracle take ~6 ms; the 40 ms wait follows.
    d.run_for(30 * MS);
    assert!(d.outcome(r).is_none(), "still in its commit wait at 30 ms");
    assert!(d.run_until_answered(&[r], 100 * MS));
    // The driver's clocks read true time: the oracle's T_high is now + ε.
    assert!(
        commit_ts(&d, r).time_ns < d.now,
        "answered after its timestamp"
    );
}

#[test]
fn without_commit_wait_the_client_hears_before_true_time_reaches_the_timestamp() {
    let mut d = driver(&format!("{WIDE_EPSILON},commit_wait=false"));
    let r = d.submit(0, two_shard(&d, 1));
    assert!(d.run_until_answered(&[r], 100 * MS));
    assert!(
        commit_ts(&d, r).time_ns > d.now,
        "answered while its timestamp is still in the future"
    );
}

#[test]
fn locks_are_held_through_the_wait_so_a_conflicting_successor_gets_a_later_timestamp() {
    let mut d = driver(WIDE_EPSILON);
    let first = d.submit(0, two_shard(&d, 1));
    d.run_for(10 * MS);
    // Submitted while `first` waits; its timestamp is taken once it holds the locks.
    let second = d.submit(1, two_shard(&d, 2));
    assert!(d.run_until_answered(&[first, second], 300 * MS));
    assert!(commit_ts(&d, first) < commit_ts(&d, second));
    // The successor could only lock after `first` committed, i.e. after its wait: its own
    // timestamp is at least ε above true time then.
    assert!(commit_ts(&d, second).time_ns > commit_ts(&d, first).time_ns + 20 * MS);
}

#[test]
fn a_single_shard_transaction_also_commits_through_the_oracle() {
    let mut d = driver("");
    let r = d.submit(
        0,
        Txn {
            pieces: vec![append(&d, 0, "x", 1)],
        },
    );
    assert!(d.run_until_answered(&[r], 100 * MS));
    commit_ts(&d, r);
    assert_eq!(d.counters.get("p2pl.oracle_requests"), Some(&1));
}

#[test]
fn an_unanswering_oracle_is_skipped_for_the_next_nearest() {
    let mut d = driver("");
    let near = d.cluster.services(ORACLE_SERVICE)[0];
    d.crash(near);
    let r = d.submit(0, two_shard(&d, 1));
    assert!(d.run_until_answered(&[r], 2_000 * MS));
    assert_eq!(commit_ts(&d, r).tiebreak, 1, "the far oracle's timestamp");
}

#[test]
fn after_one_lost_oracle_request_the_next_commit_timestamp_comes_from_the_nearest_again() {
    // A cursor that only moved forward kept asking the oracle 100 ms away after one loss.
    let mut d = driver("");
    let near = d.cluster.services(ORACLE_SERVICE)[0];
    let mut lost = false;
    d.drop = Some(Box::new(move |_, to, m| {
        let lose = !lost && to == near && matches!(m, Msg::GetTs { .. });
        lost |= lose;
        lose
    }));
    let first = d.submit(0, two_shard(&d, 1));
    assert!(d.run_until_answered(&[first], 2_000 * MS));
    assert_eq!(
        commit_ts(&d, first).tiebreak,
        1,
        "the far oracle's timestamp"
    );
    let second = d.submit(0, two_shard(&d, 2));
    assert!(d.run_until_answered(&[second], 2_000 * MS));
    assert_eq!(commit_ts(&d, second).tiebreak, 0, "the near oracle's again");
}

#[test]
fn a_coordinator_crash_during_the_wait_aborts_and_releases_the_locks() {
    let mut d = driver(WIDE_EPSILON);
    let r = d.submit(0, two_shard(&d, 1));
    d.run_for(15 * MS);
    let coordinator = d.coordinator_node(0);
    d.crash(coordinator);
    d.restart(coordinator);
    // Nothing was decided: presumed abort answers the prepared servers' queries, and a new
    // transaction on the same keys commits.
    let next = d.submit(1, two_shard(&d, 2));
    assert!(d.run_until_answered(&[next], 5_000 * MS));
    commit_ts(&d, next);
    assert!(
        d.outcome(r).is_none(),
        "the crashed coordinator's client never hears"
    );
}

#[test]
fn options_are_checked() {
    let cluster = |opts: &str| {
        let topology = Topology::parse("test", crate::testkit::TOPOLOGY).unwrap();
        let config = ProtocolConfig::parse(opts).unwrap();
        Setup::<P2plTtc>::new(topology, &config, Procedures::new()).map(|_| ())
    };
    assert!(cluster("").is_ok());
    assert!(cluster("commit_wait=false").is_ok());
    assert!(cluster("epsilon_us=0").unwrap_err().contains("epsilon_us"));
    assert!(cluster("unsafe_skip_validation=true").is_err());
    assert!(cluster("nonsense=1").unwrap_err().contains("nonsense"));
}

// ---- SafeTS replica reads (`replica_reads=safets`) ------------------------------------

const SAFETS: &str = "replica_reads=safets";

/// A read-only one-shot transaction: `Get` of `name` on `shard`.
fn read(d: &Driver, shard: u32, name: &str) -> Txn {
    let k = d.key_on(shard, name);
    Txn {
        pieces: vec![Piece::ops(ShardId(shard), vec![Op::Get(k)])],
    }
}

/// The value a committed read-only transaction read, and its timestamp.
fn read_outcome(d: &Driver, r: RequestId) -> (Option<Vec<u8>>, Timestamp) {
    match d.outcome(r) {
        Some(Outcome::Committed {
            results,
            commit_ts: Some(ts),
            path: CommitPath::ReadOnly,
        }) => (results[0].outputs[0].as_ref().map(|v| v.to_vec()), *ts),
        other => panic!("not a SafeTS read: {other:?}"),
    }
}

fn is_safe_read_to(to: NodeId, target: NodeId, msg: &Msg) -> bool {
    to == target && matches!(msg, Msg::Safe(safets::SafeMsg::Read { .. }))
}

#[test]
fn a_replica_read_sees_what_committed_before_it_began() {
    let mut d = driver(SAFETS);
    let w = d.submit(0, two_shard(&d, 1));
    assert!(d.run_until_answered(&[w], 100 * MS));
    // Reads at the primary n0 are lost: the resend goes to the replica n1.
    let primary = d.server_node(0);
    d.hold(move |_, to, msg| is_safe_read_to(to, primary, msg));
    let r = d.submit(1, read(&d, 0, "x"));
    assert!(d.run_until_answered(&[r], 2_000 * MS));
    let (value, ts) = read_outcome(&d, r);
    assert_eq!(value, Some(encode_int(1).to_vec()));
    assert!(ts > commit_ts(&d, w), "read above the write it saw");
    assert!(d.counters.get("p2pl.safe_reads").is_some_and(|n| *n >= 1));
}

#[test]
fn a_prepared_transaction_holds_safe_time_for_every_key_of_its_shard() {
    let mut d = driver(SAFETS);
    // Unblocked, a read at TTC now waits only for the next `T_earliest` (10 ms).
    let quick = d.submit(1, read(&d, 0, "z"));
    assert!(d.run_until_answered(&[quick], 40 * MS));
    // A writer prepared at n0 whose COMMIT does not arrive holds n0's `t_safe`.
    let primary = d.server_node(0);
    d.hold(move |_, to, msg| {
        to == primary
            && matches!(
                msg,
                Msg::ToServer {
                    body: crate::two_pl::ToServer::Commit { .. },
                    ..
                }
            )
    });
    let w = d.submit(0, two_shard(&d, 1));
    assert!(d.run_until_answered(&[w], 100 * MS));
    // Another key of the same shard: blocked although nothing of it is undetermined.
    let r = d.submit(1, read(&d, 0, "z"));
    d.run_for(150 * MS);
    assert!(d.outcome(r).is_none(), "held behind the prepared writer");
    d.release_held();
    assert!(d.run_until_answered(&[r], 100 * MS));
    assert_eq!(read_outcome(&d, r).0, None);
}

#[test]
fn a_restarted_primary_still_serves_the_versions_it_committed() {
    let mut d = driver(SAFETS);
    let w = d.submit(0, two_shard(&d, 7));
    assert!(d.run_until_answered(&[w], 100 * MS));
    let primary = d.server_node(0);
    d.crash(primary);
    d.restart(primary);
    let r = d.submit(1, read(&d, 0, "x"));
    assert!(d.run_until_answered(&[r], 1_000 * MS));
    assert_eq!(read_outcome(&d, r).0, Some(encode_int(7).to_vec()));
}

#[test]
fn replicas_count_the_visibility_delay_of_each_version() {
    let mut d = driver(SAFETS);
    let w = d.submit(0, two_shard(&d, 1));
    assert!(d.run_until_answered(&[w], 100 * MS));
    d.run_for(200 * MS);
    // One version on each shard, each measured at its one replica.
    assert_eq!(d.counters.get("p2pl.visible_versions"), Some(&2));
    assert!(d
        .counters
        .get("p2pl.visibility_delay_us_sum")
        .is_some_and(|us| *us > 0));
}

#[test]
fn safets_options_are_checked() {
    let cluster = |opts: &str| {
        let topology = Topology::parse("test", crate::testkit::TOPOLOGY).unwrap();
        let config = ProtocolConfig::parse(opts).unwrap();
        Setup::<P2plTtc>::new(topology, &config, Procedures::new()).map(|_| ())
    };
    assert!(cluster(SAFETS).is_ok());
    assert!(cluster("replica_reads=safets,safe_ts_interval_ms=5").is_ok());
    let no_wait = cluster("replica_reads=safets,commit_wait=false").unwrap_err();
    assert!(no_wait.contains("commit_wait"));
    let stray = cluster("safe_ts_interval_ms=5").unwrap_err();
    assert!(stray.contains("replica_reads=safets"));
    assert!(cluster("replica_reads=closedts").is_err());
    assert!(cluster("replica_reads=safets,max_versions_per_key=0").is_err());
}

#[test]
fn a_primary_asks_its_nearest_oracle_again_after_one_lost_request() {
    // A cursor that only moved forward kept asking for `T_earliest` 100 ms away, which
    // held every replica's `t_safe` a WAN round trip behind.
    let mut d = driver(SAFETS);
    let oracles = d.cluster.services(ORACLE_SERVICE);
    let (near, far) = (oracles[0], oracles[1]);
    let primary = d.server_node(0);
    // Requests to (near, far): the first to the near oracle is lost.
    let asked = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let count = asked.clone();
    d.drop = Some(Box::new(move |from, to, m| {
        if from != primary || !matches!(m, Msg::Safe(SafeMsg::GetEarliest)) {
            return false;
        }
        let (n, f) = count.get();
        count.set((n + u32::from(to == near), f + u32::from(to == far)));
        to == near && n == 0
    }));
    d.run_for(2_000 * MS);
    let (asked_near, asked_far) = asked.get();
    assert!(asked_near > 10, "{asked_near} requests to the near oracle");
    assert_eq!(
        asked_far, 1,
        "one request to the far oracle, then the near one"
    );
}
