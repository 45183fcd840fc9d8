//! `2pl-raft` and `occ-raft` against the test driver: Raft-replicated 2PC with interactive
//! transactions, a leader's crash, wound-wait, and OCC's validation.

use super::*;
use crate::kit::replicated::PARTITION_TAKEOVERS;
use crate::testkit::{committed, read_value, Driver, MS};
use meridian_core::txn::{AbortReason, CommitPath, Outcome};

/// Three regions (10 ms apart); two shards replicated in all three, placed leaders in A;
/// two coordinators in A.
fn driver<P: Protocol<Node = RaftNode>>(options: &str) -> Driver<RaftNode> {
    let topology = crate::testkit::three_regions("raft-2pc-test", 10.0, 10.0, 10.0);
    let mut d = Driver::on_topology::<P>(&topology, options, Default::default(), 0, 0);
    d.run_for(500 * MS);
    d
}

fn member(d: &Driver<RaftNode>, node: NodeId) -> &Member {
    match d.node(node) {
        Some(RaftNode::Member(m)) => m,
        other => panic!("{node} is {other:?}"),
    }
}

fn aborted(o: &Outcome) -> &AbortReason {
    match o {
        Outcome::Aborted { reason } => reason,
        other => panic!("not aborted: {other:?}"),
    }
}

/// An interactive transaction commits through 2PC over Raft; the shard's leader crashes
/// for good, a follower takes over with the committed write, and the coordinator finds it.
fn survives_a_leader_crash<P: Protocol<Node = RaftNode>>() {
    let mut d = driver::<P>("");
    assert_eq!(d.counters[PARTITION_TAKEOVERS], 2);
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let t = d.begin(0, None);
    d.put(0, t, &x, "x1");
    d.put(0, t, &y, "y1");
    assert_eq!(committed(&d.commit(0, t)), CommitPath::TwoPhase);
    d.run_for(100 * MS);
    let old = d.server_node(0);
    d.crash(old);
    d.run_for(2_000 * MS);
    assert_eq!(d.counters[PARTITION_TAKEOVERS], 3, "a new leader");
    assert!(d.cluster.replicas(ShardId(0))[1..]
        .iter()
        .any(|&r| member(&d, r).leads()));
    let t2 = d.begin(1, None);
    assert_eq!(read_value(&d.get(1, t2, &x)).as_deref(), Some("x1"));
    d.put(1, t2, &x, "x2");
    assert_eq!(committed(&d.commit(1, t2)), CommitPath::TwoPhase);
    let t3 = d.begin(0, None);
    assert_eq!(read_value(&d.get(0, t3, &x)).as_deref(), Some("x2"));
    assert_eq!(read_value(&d.get(0, t3, &y)).as_deref(), Some("y1"));
}

#[test]
fn two_pl_raft_survives_a_leader_crash() {
    survives_a_leader_crash::<TwoPlRaft>();
}

#[test]
fn occ_raft_survives_a_leader_crash() {
    survives_a_leader_crash::<OccRaft>();
}

/// An older transaction that needs a younger one's lock wounds it (WAIT-DIE would make
/// the older one wait and let the younger commit).
#[test]
fn wound_wait_aborts_the_younger_holder() {
    let mut d = driver::<TwoPlRaft>("");
    let x = d.key_on(0, "x");
    let old = d.begin(0, None);
    d.run_for(MS);
    let young = d.begin(1, None);
    d.put(1, young, &x, "young");
    d.run_for(50 * MS);
    d.put(0, old, &x, "old");
    d.run_for(50 * MS);
    assert_eq!(aborted(&d.commit(1, young)), &AbortReason::Conflict);
    assert_eq!(committed(&d.commit(0, old)), CommitPath::TwoPhase);
    // The wound is what K2 Fig. 17d counts as a deadlock broken.
    assert_eq!(d.counters.get("deadlock_aborts"), Some(&1));
    let t = d.begin(0, None);
    assert_eq!(read_value(&d.get(0, t, &x)).as_deref(), Some("old"));
}

/// OCC reads take no lock: a writer commits under an open reader, whose validation then
/// fails. 2PL would have made the writer wait; skipping validation commits a stale read.
fn stale_read_outcome(options: &str) -> Outcome {
    let mut d = driver::<OccRaft>(options);
    let (x, y) = (d.key_on(0, "x"), d.key_on(1, "y"));
    let reader = d.begin(0, None);
    assert_eq!(read_value(&d.get(0, reader, &x)), None);
    let writer = d.begin(1, None);
    d.put(1, writer, &x, "w");
    assert_eq!(committed(&d.commit(1, writer)), CommitPath::TwoPhase);
    d.put(0, reader, &y, "from a stale read");
    d.commit(0, reader)
}

#[test]
fn occ_validation_aborts_a_stale_read() {
    assert_eq!(aborted(&stale_read_outcome("")), &AbortReason::Validation);
    assert_eq!(
        committed(&stale_read_outcome("unsafe_skip_validation=true")),
        CommitPath::TwoPhase
    );
}

#[test]
fn each_protocol_refuses_the_other_ones_broken_variant() {
    let topology = crate::testkit::three_regions("raft-2pc-test", 10.0, 10.0, 10.0);
    let topology = meridian_core::Topology::parse("test", &topology).expect("topology");
    let cluster = Cluster::new(topology, &[]).expect("cluster");
    let raw = ProtocolConfig::parse("unsafe_skip_validation=true").expect("parses");
    let err = TwoPlRaft::parse_options(&raw, &cluster).unwrap_err();
    assert!(err.contains("unsafe_skip_validation"), "{err}");
    let raw = ProtocolConfig::parse("unsafe_early_release=true").expect("parses");
    let err = OccRaft::parse_options(&raw, &cluster).unwrap_err();
    assert!(err.contains("unsafe_early_release"), "{err}");
}

/// A coordinator's retry tick must not turn it from a leader that answered within the last
/// retry period (a slow transaction, not a lost leader); one silent for a period it leaves.
#[test]
fn leaders_turn_from_a_leader_only_after_it_was_silent() {
    use crate::kit::replicated::Leaders;
    let topology = crate::testkit::three_regions("raft-2pc-test", 10.0, 10.0, 10.0);
    let topology = meridian_core::Topology::parse("test", &topology).expect("topology");
    let cluster = Cluster::new(topology, &[]).expect("cluster");
    let shard = ShardId(0);
    let mut leaders = Leaders::new(&cluster);
    let placed = leaders.of_shard(shard);
    let period_ns = 100 * MS;
    leaders.heard(&cluster, placed, 1_000 * MS);
    assert!(!leaders.rotate_if_silent(&cluster, placed, 1_050 * MS, period_ns));
    assert_eq!(leaders.of_shard(shard), placed, "it answered 50 ms ago");
    assert!(leaders.rotate_if_silent(&cluster, placed, 1_100 * MS, period_ns));
    let next = leaders.of_shard(shard);
    assert_ne!(next, placed, "silent for a whole period");
    assert!(
        !leaders.rotate_if_silent(&cluster, placed, 1_150 * MS, period_ns),
        "the new belief gets its own period"
    );
    assert_eq!(leaders.of_shard(shard), next);
}

/// A transaction submitted at boot, while the placed leaders campaign, is held by them and
/// served once they take over: it commits well within one retry period (25 ms here). With
/// `NotLeader` and no hint, the coordinator waited the whole period before resending.
#[test]
fn a_transaction_at_boot_waits_for_the_election_not_for_a_retry_period() {
    let topology = crate::testkit::three_regions("raft-2pc-test", 10.0, 10.0, 10.0);
    let mut d = Driver::on_topology::<TwoPlRaft>(&topology, "", Default::default(), 0, 0);
    let x = d.key_on(0, "x");
    let txn = meridian_core::txn::Txn {
        pieces: vec![meridian_core::txn::Piece::ops(
            ShardId(0),
            vec![meridian_core::txn::Op::Put(
                x,
                meridian_core::txn::Operand::Literal(meridian_core::value::encode_int(1)),
            )],
        )],
    };
    let start = d.now;
    let request = d.submit(0, txn);
    assert!(d.run_until_answered(&[request], 1_000 * MS));
    assert!(matches!(
        d.outcome(request),
        Some(Outcome::Committed { .. })
    ));
    let took = d.now - start;
    assert!(took < 25 * MS, "took {} ms", took / MS);
}

/// A fresh group's placed leader serves after one round trip to its followers (10 ms
/// here): it starts elected (`RaftGroup::bootstrap`) and only its barrier must reach a
/// majority. Campaigning at boot (pre-vote, vote, barrier) took three.
#[test]
fn placed_leaders_serve_after_one_round_trip() {
    let topology = crate::testkit::three_regions("raft-2pc-test", 10.0, 10.0, 10.0);
    let mut d = Driver::on_topology::<TwoPlRaft>(&topology, "", Default::default(), 0, 0);
    d.run_for(15 * MS);
    assert_eq!(d.counters.get(PARTITION_TAKEOVERS).copied(), Some(2));
    for s in 0..2 {
        assert!(member(&d, d.cluster.initial_leader(ShardId(s))).leads());
    }
}

/// The bound on `gcp-tiga` (leaders in SC): the coordinator's round trip to SC plus SC's
/// to its nearest follower (BR, 117 ms), not the LAN round trip a single copy needs.
#[test]
fn the_bound_counts_the_leaders_majority_round_trip() {
    let cluster = Cluster::new(meridian_core::Topology::load("gcp-tiga").unwrap(), &[]).unwrap();
    let shards = [ShardId(0), ShardId(1), ShardId(2)];
    let sc = cluster.coordinators[0];
    let hk = *cluster.coordinators.last().unwrap();
    assert_eq!(TwoPlRaft::bound_ms(&cluster, sc, &shards), 0.5 + 117.0);
    assert_eq!(OccRaft::bound_ms(&cluster, hk, &shards), 201.0 + 117.0);
}
