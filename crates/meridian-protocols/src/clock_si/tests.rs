//! Unit tests under the shared test driver (`crate::testkit`): messages take 1 ms, each
//! node's clock is virtual time plus a per-node offset, tests may drop messages matching a
//! filter, crash and restart nodes (rebuilt from their records), and inspect node state and
//! the protocol's counters.

use super::*;
use meridian_core::txn::{AbortReason, ClientResponse, CommitPath, Outcome, Step, Txn};
use meridian_core::{ShardId, Timestamp, Topology};

const MS: u64 = crate::testkit::MS;
const MS_I: i64 = MS as i64;
/// Clocks read a realistic wall time (virtual time is small).
const EPOCH: u64 = 1_700_000_000_000_000_000;

type Driver = crate::testkit::Driver<SiNode>;

impl Driver {
    /// Clock-SI, or conventional SI (with its oracle n6).
    fn si(conventional: bool, options: &str) -> Driver {
        let procedures = Default::default();
        if conventional {
            Driver::with_clock_base::<ConventionalSi>(options, procedures, 0, EPOCH)
        } else {
            Driver::with_clock_base::<ClockSi>(options, procedures, 0, EPOCH)
        }
    }

    fn coord(&self, i: usize) -> NodeId {
        self.coordinator_node(i)
    }

    fn server(&self, shard: u32) -> &Server {
        match self.node(self.server_node(shard)) {
            Some(SiNode::Server(s)) => s,
            other => panic!("shard {shard}'s node is {other:?}"),
        }
    }

    fn coordinator(&self, i: usize) -> &Coordinator {
        match self.node(self.coord(i)) {
            Some(SiNode::Coordinator(c)) => c,
            other => panic!("coordinator {i} is {other:?}"),
        }
    }
}

fn committed_ts(o: &Outcome) -> (Timestamp, CommitPath) {
    match o {
        Outcome::Committed {
            commit_ts: Some(ts),
            path,
            ..
        } => (*ts, *path),
        other => panic!("not committed: {other:?}"),
    }
}

fn read_value(r: &ClientResponse) -> Option<String> {
    match r {
        ClientResponse::Read(v) => v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        other => panic!("not a read: {other:?}"),
    }
}

// ---- options --------------------------------------------------------------------------

#[test]
fn options_parse_refuse_unknown_and_auto_delta_follows_section_iii_c() {
    let parse = |s: &str| Options::parse(&ProtocolConfig::parse(s).unwrap(), 100.0);
    assert_eq!(parse("").unwrap().delta, Delta::Fixed(0));
    assert_eq!(parse("delta_ms=5").unwrap().delta, Delta::Fixed(5 * MS));
    assert_eq!(parse("delta_ms=auto").unwrap().delta, Delta::Auto);
    assert_eq!(parse("delta_ms=measured").unwrap().delta, Delta::Measured);
    assert!(parse("delta_ms=-1").is_err());
    assert!(parse("delta_ms=soon").is_err());
    assert!(parse("retry_ms=0").is_err());
    assert!(parse("bogus=1").unwrap_err().contains("bogus"));
    // gcp-tiga, HK coordinator: CW = the largest round trip to a partition (all data in
    // SC: 201 ms) dominates SK_max − RRD/2 for huygens clocks.
    let topology = Topology::load("gcp-tiga").unwrap();
    let cluster = Cluster::new(topology, &[]).unwrap();
    let hk = *cluster.coordinators.last().unwrap();
    let auto = parse("delta_ms=auto").unwrap();
    assert_eq!(auto.delta_for(&cluster, hk), 201 * MS);
    let sc = cluster.coordinators[0];
    assert_eq!(auto.delta_for(&cluster, sc), MS / 2);
}

#[test]
fn delta_makes_snapshots_older_by_delta() {
    let mut d = Driver::si(false, "delta_ms=40");
    assert_eq!(d.coordinator(0).delta_ns(), 40 * MS);
    d.run_for(100 * MS);
    let t = d.begin(0, None);
    let before = d.clock(d.coord(0));
    let o = d.commit(0, t);
    let (snapshot, path) = committed_ts(&o);
    assert_eq!(path, CommitPath::ReadOnly);
    assert!(snapshot.time_ns <= before - 40 * MS && snapshot.time_ns >= before - 41 * MS);
}

/// Coordinator 0's clock runs 50 ms ahead of both partitions'; a read of shard 0, then a
/// later transaction's read of shard 1 (whose floor is still low): how long the second
/// waited, and how many reads waited for the clock.
fn second_read_wait(options: &str) -> (u64, u64) {
    let mut d = Driver::si(false, options);
    let c = d.coord(0);
    d.offsets[c.index()] = 50 * MS_I;
    let t = d.begin(0, None);
    d.get(0, t, &d.key_on(0, "k"));
    d.commit(0, t);
    let t2 = d.begin(0, None);
    let start = d.now;
    d.get(0, t2, &d.key_on(1, "j"));
    (d.now - start, d.counters[counters::READS_DELAYED_BY_CLOCK])
}

#[test]
fn a_measured_delta_learns_the_skew_and_spares_later_reads_the_clock_wait() {
    // §III-C: Δ = max(CW, SK − RRD/2); with Δ = 0 both reads wait about 49 ms.
    let (waited, delayed) = second_read_wait("");
    assert!(waited >= 48 * MS, "Δ = 0: waited {} ms", waited / MS);
    assert_eq!(delayed, 2);
    // Measured: the first read's sample (t₂ − t₁ = 1 ms − 50 ms) makes Δ ≈ 49 ms.
    let (waited, delayed) = second_read_wait("delta_ms=measured");
    assert!(waited < 5 * MS, "measured Δ: waited {} ms", waited / MS);
    assert_eq!(delayed, 1, "only the read before any sample waited");
}

// ---- Algorithm 1 ----------------------------------------------------------------------

#[test]
fn a_read_waits_until_the_partition_clock_passes_the_snapshot() {
    let mut d = Driver::si(false, "");
    // The coordinator's clock runs 50 ms ahead of the partition's.
    let c = d.coord(0);
    d.offsets[c.index()] = 50 * MS_I;
    let k = d.key_on(0, "k");
    let t = d.begin(0, None);
    let start = d.now;
    let r = d.get(0, t, &k);
    assert_eq!(read_value(&r), None);
    assert!(
        d.now - start >= 49 * MS,
        "answered after {} ms",
        (d.now - start) / MS
    );
    assert_eq!(d.counters[counters::READS_DELAYED_BY_CLOCK], 1);
    assert_eq!(d.counters[counters::TXNS_DELAYED], 1);
    // The coordinator learned how long the partition held the read back.
    assert!(d.counters[counters::TXN_DELAY_NS] >= 48 * MS);
    // A second read with the same snapshot is below the partition's floor now: no wait.
    let start = d.now;
    d.get(0, t, &d.key_on(0, "j"));
    assert!(d.now - start < 5 * MS);
    assert_eq!(d.counters[counters::READS_DELAYED], 1);
    assert_eq!(d.counters[counters::READS], 2);
}

#[test]
fn an_update_waits_for_the_clock_too_so_its_commit_ts_is_above_the_snapshot() {
    let mut d = Driver::si(false, "");
    let c = d.coord(0);
    d.offsets[c.index()] = 30 * MS_I;
    let k = d.key_on(0, "k");
    let t = d.begin(0, None);
    d.put(0, t, &k, "v");
    let snapshot_floor = d.clock(c);
    let (ts, path) = committed_ts(&d.commit(0, t));
    assert_eq!(path, CommitPath::Local);
    assert!(
        ts.time_ns >= snapshot_floor - MS,
        "commit ts {ts} not above the snapshot"
    );
    assert!(d.counters[counters::UPDATES_DELAYED_BY_CLOCK] >= 1);
}

#[test]
fn a_read_behind_a_prepared_version_waits_and_asks_the_coordinator_for_the_commit_ts() {
    let mut d = Driver::si(false, "");
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let s0 = d.server_node(0);
    // The first COMMIT to shard 0 is lost: its version stays prepared there.
    let mut lost = false;
    d.drop = Some(Box::new(move |_, to, msg| {
        let hit = !lost && to == s0 && matches!(msg, Msg::Commit { .. });
        lost |= hit;
        hit
    }));
    let t1 = d.begin(0, None);
    d.put(0, t1, &x, "x1");
    d.put(0, t1, &y, "y1");
    let (c1, path) = committed_ts(&d.commit(0, t1));
    assert_eq!(path, CommitPath::TwoPhase);
    assert_eq!(d.server(0).prepared_count(), 1);
    d.run_for(2 * MS);
    // T2's snapshot is above T1's commit ts: it must see x1, after learning T1's fate.
    let queries = d.sent.get("query").copied().unwrap_or(0);
    let t2 = d.begin(1, Some(c1));
    assert_eq!(read_value(&d.get(1, t2, &x)).as_deref(), Some("x1"));
    assert_eq!(d.counters[counters::READS_DELAYED_BY_PENDING_COMMIT], 1);
    assert_eq!(d.counters[counters::TXNS_DELAYED], 1);
    assert!(
        d.sent["query"] > queries,
        "the partition asked for the commit ts"
    );
    assert_eq!(d.server(0).prepared_count(), 0);
    assert_eq!(read_value(&d.get(1, t2, &y)).as_deref(), Some("y1"));
}

#[test]
fn session_consistency_starts_the_snapshot_above_latest_seen() {
    let mut d = Driver::si(false, "delta_ms=20");
    let seen = Timestamp::new(d.clock(d.coord(0)) + 70 * MS, 3);
    let t = d.begin(0, Some(seen));
    let (snapshot, _) = committed_ts(&d.commit(0, t));
    assert!(
        snapshot > seen,
        "snapshot {snapshot} not above LatestTime {seen}"
    );
}

// ---- Algorithm 2 ----------------------------------------------------------------------

#[test]
fn read_only_transactions_commit_without_messages_at_their_snapshot() {
    let mut d = Driver::si(false, "");
    let k = d.key_on(1, "k");
    let t = d.begin(0, None);
    d.get(0, t, &k);
    let sent: usize = d.sent.values().sum();
    let (ts, path) = committed_ts(&d.commit(0, t));
    assert_eq!(path, CommitPath::ReadOnly);
    assert_eq!(
        d.sent.values().sum::<usize>(),
        sent,
        "a read-only commit sends nothing"
    );
    assert!(ts.time_ns > 0);
}

#[test]
fn first_committer_wins_and_the_loser_aborts_with_conflict() {
    let mut d = Driver::si(false, "");
    let k = d.key_on(0, "k");
    let t1 = d.begin(0, None);
    let t2 = d.begin(1, None);
    d.put(0, t1, &k, "one");
    d.put(1, t2, &k, "two");
    assert_eq!(committed_ts(&d.commit(0, t1)).1, CommitPath::Local);
    assert_eq!(
        d.commit(1, t2),
        Outcome::Aborted {
            reason: AbortReason::Conflict
        }
    );
    // Same across partitions (2PC): the conflict is found by the partition's certification.
    let other = d.key_on(1, "o");
    let t3 = d.begin(0, None);
    let t4 = d.begin(1, None);
    d.put(0, t3, &k, "three");
    d.put(0, t3, &other, "three");
    d.put(1, t4, &k, "four");
    d.put(1, t4, &d.key_on(1, "p"), "four");
    assert_eq!(committed_ts(&d.commit(1, t4)).1, CommitPath::TwoPhase);
    assert_eq!(
        d.commit(0, t3),
        Outcome::Aborted {
            reason: AbortReason::Conflict
        }
    );
    // Disjoint writes of concurrent transactions both commit; reads see own writes.
    let t5 = d.begin(0, None);
    let t6 = d.begin(1, None);
    d.put(0, t5, &d.key_on(0, "a"), "a");
    d.put(1, t6, &d.key_on(0, "b"), "b");
    assert_eq!(
        read_value(&d.get(0, t5, &d.key_on(0, "a"))).as_deref(),
        Some("a")
    );
    committed_ts(&d.commit(0, t5));
    committed_ts(&d.commit(1, t6));
}

#[test]
fn distributed_commit_ts_is_the_max_of_the_prepare_timestamps() {
    let mut d = Driver::si(false, "");
    // Shard 1's clock is 30 ms ahead: its prepare timestamp is the larger one.
    let s1 = d.server_node(1);
    d.offsets[s1.index()] = 30 * MS_I;
    let t = d.begin(0, None);
    d.put(0, t, &d.key_on(0, "x"), "x");
    d.put(0, t, &d.key_on(1, "y"), "y");
    let before = d.clock(s1);
    let (c, _) = committed_ts(&d.commit(0, t));
    assert_eq!(c.tiebreak, s1.0 + 1, "the max prepare ts came from shard 1");
    assert!(c.time_ns >= before);
    d.run_for(5 * MS);
    // Shard 0 committed at c, above its own clock; its later timestamps stay above c.
    let t2 = d.begin(0, Some(c));
    d.put(0, t2, &d.key_on(0, "z"), "z");
    let (c2, _) = committed_ts(&d.commit(0, t2));
    assert!(c2 > c);
}

#[test]
fn one_shot_transactions_run_as_sessions_with_value_dependencies() {
    use meridian_core::txn::{Op, Operand, Piece};
    use meridian_core::value::{decode_int, encode_int};
    for conventional in [false, true] {
        let mut d = Driver::si(conventional, "");
        let (a, b) = (d.key_on(0, "a"), d.key_on(1, "b"));
        let txn = Txn {
            pieces: vec![
                Piece::ops(
                    ShardId(0),
                    vec![
                        Op::Add(a.clone(), Operand::Literal(encode_int(5))),
                        Op::Get(a.clone()),
                    ],
                ),
                Piece::ops(
                    ShardId(1),
                    vec![Op::Put(
                        b.clone(),
                        Operand::Input {
                            piece: 0,
                            output: 1,
                        },
                    )],
                ),
            ],
        };
        let r = d.request(0, ClientRequest::OneShot(txn.clone()));
        d.run_for(50 * MS);
        let Some(ClientResponse::Outcome(Outcome::Committed { results, path, .. })) =
            d.response(r).cloned()
        else {
            panic!("one-shot answered {:?}", d.response(r));
        };
        assert_eq!(path, CommitPath::TwoPhase);
        assert_eq!(results.len(), 2);
        assert_eq!(decode_int(results[0].outputs[0].as_ref().unwrap()), Some(5));
        // Again: the add reads the committed 5.
        let r = d.request(1, ClientRequest::OneShot(txn));
        d.run_for(50 * MS);
        assert!(matches!(d.response(r), Some(ClientResponse::Outcome(o)) if o.is_committed()));
        let t = d.begin(0, None);
        let ClientResponse::Read(Some(v)) = d.get(0, t, &b) else {
            panic!("b unwritten")
        };
        assert_eq!(decode_int(&v), Some(10));
        let bad = d.request(0, ClientRequest::OneShot(Txn { pieces: vec![] }));
        assert!(matches!(
            d.response(bad),
            Some(ClientResponse::Outcome(Outcome::Aborted {
                reason: AbortReason::Invalid(_)
            }))
        ));
    }
}

// ---- recovery (§III-E) ----------------------------------------------------------------

#[test]
fn a_restarted_partition_resolves_its_prepared_transaction_with_the_coordinator() {
    let mut d = Driver::si(false, "");
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let s0 = d.server_node(0);
    d.drop = Some(Box::new(move |_, to, msg| {
        to == s0 && matches!(msg, Msg::Commit { .. })
    }));
    let t = d.begin(0, None);
    d.put(0, t, &x, "x1");
    d.put(0, t, &y, "y1");
    committed_ts(&d.commit(0, t));
    d.crash(s0);
    d.run_for(10 * MS);
    d.drop = None;
    d.restart(s0);
    assert_eq!(
        d.server(0).prepared_count(),
        1,
        "the prepare record brought it back"
    );
    d.run_for(10 * MS);
    assert_eq!(d.server(0).prepared_count(), 0);
    let t2 = d.begin(1, None);
    assert_eq!(read_value(&d.get(1, t2, &x)).as_deref(), Some("x1"));
}

#[test]
fn presumed_abort_when_the_coordinator_lost_the_transaction() {
    let mut d = Driver::si(false, "query_ms=50");
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    // Votes never reach the coordinator, which then crashes (forgetting the session).
    d.drop = Some(Box::new(|_, _, msg| matches!(msg, Msg::Vote { .. })));
    let t = d.begin(0, None);
    d.put(0, t, &x, "x1");
    d.put(0, t, &y, "y1");
    let r = d.request(0, ClientRequest::Interactive(Step::Commit { txn: t }));
    d.run_for(5 * MS);
    assert_eq!(d.server(0).prepared_count(), 1);
    let c = d.coord(0);
    d.crash(c);
    d.drop = None;
    d.restart(c);
    d.run_for(200 * MS);
    assert!(
        d.response(r).is_none(),
        "the crashed coordinator never answered"
    );
    assert_eq!(d.server(0).prepared_count(), 0);
    assert_eq!(d.server(1).prepared_count(), 0);
    // The new incarnation does not know the old session.
    let o = d.commit(0, t);
    assert_eq!(
        o,
        Outcome::Aborted {
            reason: AbortReason::Failure
        }
    );
    let t2 = d.begin(1, None);
    assert_eq!(read_value(&d.get(1, t2, &x)), None);
    assert!(d.server(0).store().pending_count() == 0);
}

#[test]
fn timestamps_stay_monotone_across_a_restart_with_a_clock_that_stepped_back() {
    let mut d = Driver::si(false, "");
    let k = d.key_on(0, "k");
    let t = d.begin(0, None);
    d.put(0, t, &k, "one");
    let (c1, _) = committed_ts(&d.commit(0, t));
    let s0 = d.server_node(0);
    d.crash(s0);
    d.offsets[s0.index()] = -50 * MS_I;
    d.restart(s0);
    let t2 = d.begin(0, Some(c1));
    d.put(0, t2, &k, "two");
    let (c2, _) = committed_ts(&d.commit(0, t2));
    assert!(c2 > c1, "{c2} after {c1}");
    let t3 = d.begin(1, Some(c2));
    assert_eq!(read_value(&d.get(1, t3, &k)).as_deref(), Some("two"));
}

#[test]
fn checkpoints_bound_the_log_and_restore_the_store() {
    let mut d = Driver::si(false, "checkpoint_every=4");
    let mut keys = Vec::new();
    for i in 0..12 {
        let k = d.key_on(0, &format!("k{i}_"));
        let t = d.begin(0, None);
        d.put(0, t, &k, &format!("v{i}"));
        committed_ts(&d.commit(0, t));
        keys.push(k);
    }
    let s0 = d.server_node(0);
    assert!(
        d.records[s0.index()].len() <= 5,
        "log of {} records",
        d.records[s0.index()].len()
    );
    assert!(matches!(
        d.records[s0.index()][0],
        Record::ServerCheckpoint(_)
    ));
    d.crash(s0);
    d.restart(s0);
    let t = d.begin(1, None);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(read_value(&d.get(1, t, k)), Some(format!("v{i}")));
    }
}

// ---- conventional SI ------------------------------------------------------------------

#[test]
fn conventional_si_takes_both_timestamps_from_the_oracle() {
    let mut d = Driver::si(true, "");
    // Clocks do not matter: even a partition far behind answers at once.
    let s0 = d.server_node(0);
    d.offsets[s0.index()] = -200 * MS_I;
    let k = d.key_on(0, "k");
    let t = d.begin(0, None);
    assert_eq!(d.sent["ts-request"], 1, "one oracle round for the snapshot");
    let start = d.now;
    d.get(0, t, &k);
    assert!(d.now - start < 5 * MS);
    d.put(0, t, &k, "v");
    let (c, path) = committed_ts(&d.commit(0, t));
    assert_eq!(path, CommitPath::TwoPhase);
    assert_eq!(
        d.sent["ts-request"], 2,
        "a second oracle round for the commit"
    );
    assert_eq!(c.tiebreak, 0, "an oracle timestamp");
    d.run_for(5 * MS);
    // The oracle restarts and keeps going up.
    let oracle = d.cluster.services(ORACLE_SERVICE)[0];
    d.crash(oracle);
    d.offsets[oracle.index()] = -1_000 * MS_I;
    d.restart(oracle);
    let t2 = d.begin(1, None);
    let (s2, _) = committed_ts(&d.commit(1, t2));
    assert!(s2 > c);
    let t3 = d.begin(1, None);
    assert_eq!(read_value(&d.get(1, t3, &k)).as_deref(), Some("v"));
    assert!(!d.counters.contains_key(counters::READS_DELAYED_BY_CLOCK));
    assert!(!d.counters.contains_key(counters::UPDATES_DELAYED_BY_CLOCK));
}

// ---- replicated mode ------------------------------------------------------------------

/// Three regions; two shards replicated in all three (initial leaders in A, n0 and n3);
/// two coordinators in A (n6, n7). The test driver's messages take 1 ms whatever the RTT;
/// the RTTs set the Raft tick (10 ms / 4).
fn replicated(options: &str) -> Driver {
    let options = format!("replicated=true,{options}");
    let topology = crate::testkit::three_regions("clock-si-replicated-test", 10.0, 10.0, 10.0);
    Driver::on_topology::<ClockSi>(&topology, &options, Default::default(), 0, EPOCH)
}

fn member(d: &Driver, node: NodeId) -> &Member {
    match d.node(node) {
        Some(SiNode::Member(m)) => m,
        other => panic!("{node} is {other:?}"),
    }
}

#[test]
fn replicated_partitions_elect_the_placed_leader_and_commit_through_raft() {
    let mut d = replicated("");
    d.run_for(500 * MS);
    assert_eq!(d.counters[counters::PARTITION_TAKEOVERS], 2);
    for shard in 0..2 {
        let leader = d.server_node(shard);
        assert!(member(&d, leader).leads(), "{leader} leads shard {shard}");
    }
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let t = d.begin(0, None);
    d.put(0, t, &x, "x1");
    d.put(0, t, &y, "y1");
    let start = d.now;
    let (c, path) = committed_ts(&d.commit(0, t));
    assert_eq!(path, CommitPath::TwoPhase);
    // A vote leaves a partition only once its prepare record is on a majority: the test
    // driver's hops take 1 ms each, so prepare + append + ack + vote = 4 ms (2 unreplicated).
    assert!(d.now - start >= 4 * MS, "{} ms", (d.now - start) / MS);
    d.run_for(50 * MS);
    // Every member of shard 0 holds the prepare and commit records.
    for &replica in d.cluster.replicas(ShardId(0)) {
        assert!(member(&d, replica).committed_records() >= 2, "{replica}");
    }
    // A local commit, then a read at a snapshot above both.
    let t2 = d.begin(1, Some(c));
    d.put(1, t2, &x, "x2");
    let (c2, path) = committed_ts(&d.commit(1, t2));
    assert_eq!(path, CommitPath::Local);
    let t3 = d.begin(0, Some(c2));
    assert_eq!(read_value(&d.get(0, t3, &x)).as_deref(), Some("x2"));
    assert_eq!(read_value(&d.get(0, t3, &y)).as_deref(), Some("y1"));
}

#[test]
fn a_replicated_partition_survives_its_leaders_crash() {
    let mut d = replicated("");
    d.run_for(500 * MS);
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let t = d.begin(0, None);
    d.put(0, t, &x, "x1");
    d.put(0, t, &y, "y1");
    let (c, _) = committed_ts(&d.commit(0, t));
    d.run_for(50 * MS);
    // Shard 0's leader (and with it the only copy in faithful mode) goes down for good.
    let old = d.server_node(0);
    d.crash(old);
    d.run_for(1_000 * MS);
    assert_eq!(d.counters[counters::PARTITION_TAKEOVERS], 3, "a new leader");
    let leader = d.cluster.replicas(ShardId(0))[1..]
        .iter()
        .copied()
        .find(|&r| member(&d, r).leads())
        .expect("a follower took over");
    assert_ne!(leader, old);
    // The committed write is there; the coordinator finds the new leader and writes again.
    let t2 = d.begin(1, Some(c));
    assert_eq!(read_value(&d.get(1, t2, &x)).as_deref(), Some("x1"));
    d.put(1, t2, &x, "x2");
    let (c2, _) = committed_ts(&d.commit(1, t2));
    assert!(c2 > c, "timestamps stay monotone across leaders");
    // The old leader comes back as a follower and catches up from the group.
    d.restart(old);
    d.run_for(500 * MS);
    assert!(!member(&d, old).leads());
    let t3 = d.begin(0, Some(c2));
    assert_eq!(read_value(&d.get(0, t3, &x)).as_deref(), Some("x2"));
}

/// Commits `n` single-key transactions on shard 0 through coordinator 0.
fn commit_many(d: &mut Driver, n: usize) -> Timestamp {
    let x = d.key_on(0, "x");
    let mut last = None;
    for i in 0..n {
        let t = d.begin(0, last);
        d.put(0, t, &x, &format!("x{i}"));
        last = Some(committed_ts(&d.commit(0, t)).0);
    }
    d.run_for(50 * MS);
    last.expect("n > 0")
}

/// Commits `n` single-key transactions on shard 0, each on a key of its own.
fn commit_distinct(d: &mut Driver, n: usize) {
    let mut last = None;
    for i in 0..n {
        let key = d.key_on(0, &format!("k{i}"));
        let t = d.begin(0, last);
        d.put(0, t, &key, "v");
        last = Some(committed_ts(&d.commit(0, t)).0);
    }
    d.run_for(50 * MS);
}

#[test]
fn raft_logs_stay_under_the_limit_and_grow_without_it() {
    const LIMIT: u64 = 16;
    let peak = |d: &Driver| {
        d.cluster
            .replicas(ShardId(0))
            .iter()
            .map(|&r| member(d, r).raft_log().1.entries)
            .max()
            .unwrap()
    };
    // The server checkpoints often, so its state (one key, a few records) stays smaller
    // than the limit's worth of log and the limit alone decides when to compact.
    let mut d = replicated(&format!("raft_log_limit={LIMIT},checkpoint_every=4"));
    d.run_for(500 * MS);
    commit_many(&mut d, 200);
    // Between two drains a member appends a handful of entries (a proposal, a clock lease).
    assert!(peak(&d) <= LIMIT + 8, "peak {} entries", peak(&d));
    let compactions = d.counters[counters::RAFT_COMPACTIONS];
    assert!(compactions >= 200 / LIMIT, "{compactions} compactions");
    let mut d = replicated("raft_log_limit=0,checkpoint_every=4");
    d.run_for(500 * MS);
    commit_many(&mut d, 200);
    assert!(peak(&d) >= 200, "peak {} entries without a limit", peak(&d));
    assert_eq!(d.counters.get(counters::RAFT_COMPACTIONS), None);
}

/// A store that grows (every transaction writes a new key, no server checkpoint yet) makes
/// each snapshot larger than the last: compaction waits until the log holds as many bytes
/// as the last snapshot, so snapshots never write more than twice what the log committed.
/// Compacting at every limit's worth of entries instead would re-encode the whole store
/// each time, quadratic in the run (this test fails then: about 6× the bound).
#[test]
fn raft_snapshots_of_a_growing_store_are_amortized_over_the_log() {
    const LIMIT: u64 = 16;
    let mut d = replicated(&format!("raft_log_limit={LIMIT}"));
    d.run_for(500 * MS);
    commit_distinct(&mut d, 300);
    let snapshot_bytes = d.counters[counters::RAFT_SNAPSHOT_BYTES];
    let applied_bytes = d.counters[counters::RAFT_APPLIED_BYTES];
    assert!(d.counters[counters::RAFT_COMPACTIONS] >= 3);
    assert!(
        snapshot_bytes <= 2 * applied_bytes,
        "snapshots wrote {snapshot_bytes} bytes for {applied_bytes} applied"
    );
    // The log is bounded by the state it compacts into, not by the limit alone.
    let leader = member(&d, d.server_node(0));
    let state_bytes = leader.committed_log().len() as u64;
    let (_, peak) = leader.raft_log();
    assert!(
        peak.bytes <= 2 * state_bytes,
        "{peak:?} for {state_bytes} bytes of state"
    );
}

#[test]
fn a_follower_that_missed_compacted_entries_catches_up_from_a_snapshot() {
    let mut d = replicated("raft_log_limit=16");
    d.run_for(500 * MS);
    let x = d.key_on(0, "x");
    let follower = d.cluster.replicas(ShardId(0))[1];
    d.crash(follower);
    let c = commit_many(&mut d, 100);
    d.restart(follower);
    d.run_for(500 * MS);
    assert!(d.counters[counters::RAFT_SNAPSHOTS_SENT] >= 1);
    assert!(d.counters[counters::RAFT_SNAPSHOTS_RESTORED] >= 1);
    let leader = d.server_node(0);
    assert_eq!(
        member(&d, follower).committed_log(),
        member(&d, leader).committed_log(),
        "the follower holds the leader's committed records"
    );
    // With the old leader gone for good, the caught-up follower and the third member
    // serve the latest write.
    d.crash(leader);
    d.run_for(1_000 * MS);
    let t = d.begin(1, Some(c));
    assert_eq!(read_value(&d.get(1, t, &x)).as_deref(), Some("x99"));
}
