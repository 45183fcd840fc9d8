//! Behaviour of `k2` under the in-crate driver. Each test names a feature and fails if that
//! feature were missing.

use super::write_stream::KeyState;
use super::*;
use crate::testkit::{MsgKind, MS};
use meridian_core::txn::{
    AbortReason, ClientResponse, CommitPath, Key, Op, Operand, Outcome, Piece, PieceResult,
    Procedures, Txn,
};
use meridian_core::value::{decode_list, encode_int};
use meridian_core::{NodeId, ShardId};

type Driver = crate::testkit::Driver<K2Node>;

impl MsgKind for Msg {
    fn kind(&self) -> &'static str {
        match self {
            Msg::GetTs { .. } => "get-ts",
            Msg::OracleTs { .. } => "oracle-ts",
            Msg::Execute(_) => "execute",
            Msg::Executed { .. } => "executed",
            Msg::Commit { .. } => "commit",
            Msg::Abort { .. } => "abort",
            Msg::Decision { .. } => "decision",
            Msg::Push { .. } => "push",
            Msg::Resolve { .. } => "resolve",
            Msg::Finalized { .. } => "finalized",
            Msg::AllFinalized { .. } => "all-finalized",
            Msg::RepRead { .. } => "rep-read",
            Msg::Pull { .. } => "pull",
            Msg::Replicate { .. } => "replicate",
            Msg::Validate { .. } => "validate",
            Msg::Validated { .. } => "validated",
        }
    }
}

impl Driver {
    fn primary(&self, shard: u32) -> &DataNode {
        match self.node(self.server_node(shard)) {
            Some(K2Node::Primary(p)) => p,
            other => panic!("shard {shard}'s primary is {other:?}"),
        }
    }

    fn key_state(&self, shard: u32, k: &Key) -> KeyState {
        self.primary(shard)
            .store()
            .key(k)
            .cloned()
            .unwrap_or_default()
    }
}

fn driver(options: &str) -> Driver {
    Driver::new::<K2>(options, Procedures::new(), 7)
}

fn append(d: &Driver, shard: u32, name: &str, v: i64) -> Piece {
    let k = d.key_on(shard, name);
    Piece::ops(
        ShardId(shard),
        vec![Op::Append(k, Operand::Literal(encode_int(v)))],
    )
}

fn read(d: &Driver, shard: u32, name: &str) -> Piece {
    Piece::ops(ShardId(shard), vec![Op::Get(d.key_on(shard, name))])
}

fn txn(pieces: Vec<Piece>) -> Txn {
    Txn { pieces }
}

fn list(result: &PieceResult) -> Vec<i64> {
    result.outputs[0]
        .as_ref()
        .map(|v| decode_list(v).unwrap())
        .unwrap_or_default()
}

fn committed(d: &Driver, r: meridian_core::RequestId) -> (Vec<PieceResult>, CommitPath) {
    match d.outcome(r) {
        Some(Outcome::Committed { results, path, .. }) => (results.clone(), *path),
        other => panic!("not committed: {other:?}"),
    }
}

fn aborted(d: &Driver, r: meridian_core::RequestId) -> AbortReason {
    match d.outcome(r) {
        Some(Outcome::Aborted { reason }) => reason.clone(),
        other => panic!("not aborted: {other:?}"),
    }
}

fn is_commit(msg: &Msg) -> bool {
    matches!(msg, Msg::Commit { .. })
}

#[test]
fn a_single_shard_writer_commits_and_its_intent_becomes_a_version() {
    let mut d = driver("");
    let r = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
    assert!(d.run_until_answered(&[r], 100 * MS));
    assert_eq!(committed(&d, r).1, CommitPath::Local);
    d.run_for(10 * MS);
    let state = d.key_state(0, &d.key_on(0, "k"));
    assert!(state.intents.is_empty(), "finalized asynchronously");
    assert_eq!(state.versions.len(), 1);
    let r = d.submit(1, txn(vec![read(&d, 0, "k")]));
    assert!(d.run_until_answered(&[r], 100 * MS));
    let (results, path) = committed(&d, r);
    assert_eq!((list(&results[0]), path), (vec![1], CommitPath::ReadOnly));
}

#[test]
fn a_reader_above_an_undetermined_write_pushes_and_waits_for_its_decision() {
    let mut d = driver("");
    d.hold(|_, _, m| is_commit(m));
    let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1), append(&d, 1, "j", 1)]));
    d.run_for(20 * MS);
    assert!(d.outcome(writer).is_none(), "its commit is held");
    let reader = d.submit(1, txn(vec![read(&d, 0, "k")]));
    d.run_for(50 * MS);
    assert!(d.outcome(reader).is_none(), "PUSHWS holds the reader");
    assert!(d.counters.get("k2.pushws").is_some_and(|n| *n >= 1));
    d.release_held();
    assert!(d.run_until_answered(&[writer, reader], 100 * MS));
    assert_eq!(committed(&d, writer).1, CommitPath::TwoPhase);
    assert_eq!(
        list(&committed(&d, reader).0[0]),
        vec![1],
        "it reads the write"
    );
}

#[test]
fn a_reader_below_a_newer_version_reads_the_older_one_unless_multi_version_reads_are_off() {
    for (options, reads_old) in [("", true), ("mv_reads=false", false)] {
        let mut d = driver(options);
        // The reader takes its timestamp first, but its read arrives after the writer's.
        d.hold(|_, _, m| matches!(m, Msg::Execute(e) if e.piece.is_read_only()));
        let reader = d.submit(1, txn(vec![read(&d, 0, "k")]));
        d.run_for(5 * MS);
        let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
        assert!(d.run_until_answered(&[writer], 100 * MS));
        d.run_for(10 * MS);
        d.release_held();
        assert!(d.run_until_answered(&[reader], 100 * MS));
        if reads_old {
            assert_eq!(
                list(&committed(&d, reader).0[0]),
                Vec::<i64>::new(),
                "{options}"
            );
        } else {
            assert_eq!(aborted(&d, reader), AbortReason::Conflict, "{options}");
        }
    }
}

#[test]
fn a_write_below_a_read_of_a_younger_transaction_aborts() {
    let mut d = driver("");
    d.hold(|_, _, m| matches!(m, Msg::Execute(e) if !e.piece.is_read_only()));
    let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
    d.run_for(5 * MS);
    let reader = d.submit(1, txn(vec![read(&d, 0, "k")]));
    assert!(d.run_until_answered(&[reader], 100 * MS));
    d.release_held();
    assert!(d.run_until_answered(&[writer], 100 * MS));
    assert_eq!(aborted(&d, writer), AbortReason::Conflict);
    assert_eq!(d.counters.get("k2.abort_write_below_read"), Some(&1));
}

#[test]
fn write_streams_hold_several_intents_per_key_and_without_them_writers_wait_or_abort() {
    // Multi-version writes: two undetermined blind writes of one key coexist.
    let mut d = driver("");
    d.hold(|_, _, m| is_commit(m));
    let put = |d: &Driver, v: i64| {
        let k = d.key_on(0, "k");
        txn(vec![Piece::ops(
            ShardId(0),
            vec![Op::Put(k, Operand::Literal(encode_int(v)))],
        )])
    };
    let older = d.submit(0, put(&d, 1));
    d.run_for(5 * MS);
    let younger = d.submit(1, put(&d, 2));
    d.run_for(20 * MS);
    assert_eq!(d.key_state(0, &d.key_on(0, "k")).intents.len(), 2);
    assert_eq!(d.counters.get("k2.intents_beside_another"), Some(&1));
    d.release_held();
    assert!(d.run_until_answered(&[older, younger], 100 * MS));
    committed(&d, older);
    committed(&d, younger);

    // Without them: a younger writer waits for the older intent; an older one aborts.
    let mut d = driver("mv_writes=false");
    d.hold(|_, _, m| is_commit(m));
    let older = d.submit(0, put(&d, 1));
    d.run_for(5 * MS);
    let younger = d.submit(1, put(&d, 2));
    d.run_for(20 * MS);
    assert_eq!(
        d.key_state(0, &d.key_on(0, "k")).intents.len(),
        1,
        "the younger waits"
    );
    d.release_held();
    assert!(d.run_until_answered(&[older, younger], 100 * MS));
    assert_eq!(d.counters.get("k2.intents_beside_another"), None);
    committed(&d, older);
    committed(&d, younger);

    let mut d = driver("mv_writes=false");
    d.hold(|_, _, m| is_commit(m) || matches!(m, Msg::Execute(e) if e.txn.frac >> 12 == 5));
    let older = d.submit(1, put(&d, 1)); // coordinator 1 is node 5: its Execute is held
    d.run_for(5 * MS);
    let younger = d.submit(0, put(&d, 2));
    d.run_for(20 * MS);
    d.release_held();
    assert!(d.run_until_answered(&[older, younger], 100 * MS));
    assert_eq!(
        aborted(&d, older),
        AbortReason::Conflict,
        "older than an intent"
    );
    committed(&d, younger);
}

#[test]
fn the_client_hears_a_commit_only_after_the_commit_wait() {
    // ε = 20 ms makes the commit wait (2(TTL+ε)(1+D) ≈ 40 ms) longer than the work.
    let mut d = driver("epsilon_us=20000,ttl_us=100");
    let start = d.now;
    let r = d.submit(0, txn(vec![read(&d, 0, "k")]));
    assert!(d.run_until_answered(&[r], 200 * MS));
    let mut d2 = driver("epsilon_us=20000,ttl_us=100");
    let r2 = d2.submit(0, txn(vec![read(&d2, 0, "k")]));
    d2.run_for(40 * MS);
    assert!(d2.outcome(r2).is_none(), "still waiting at 40 ms");
    d2.run_for(5 * MS);
    assert!(d2.outcome(r2).is_some(), "answered once the wait is over");
    assert!(d.now - start >= 40 * MS);
}

#[test]
fn a_committed_writer_counts_its_phases_for_the_latency_breakdown() {
    // ε = 20 ms: the commit wait (≈ 40 ms from the timestamp) outlasts the commit.
    let mut d = driver("epsilon_us=20000,ttl_us=100");
    let start = d.now;
    let reader = d.submit(0, txn(vec![read(&d, 0, "k")]));
    let writer = d.submit(0, txn(vec![append(&d, 1, "k", 1)]));
    assert!(d.run_until_answered(&[reader, writer], 200 * MS));
    committed(&d, writer);
    let elapsed_us = (d.now - start) / 1_000;
    // Only the read-write transaction is in the breakdown (Table 2: NewOrder).
    assert_eq!(d.counters.get("k2.breakdown_txns"), Some(&1));
    let phase = |name| d.counters.get(name).copied().unwrap_or(0);
    let total = phase("k2.breakdown_get_ts_us")
        + phase("k2.breakdown_execute_us")
        + phase("k2.breakdown_commit_us")
        + phase("k2.breakdown_commit_wait_us");
    assert!(
        phase("k2.breakdown_commit_wait_us") >= 30_000,
        "the commit wait after the decision"
    );
    assert!(
        (1..30_000).contains(&phase("k2.breakdown_commit_us")),
        "a round trip to the recorder, without the wait"
    );
    assert!(
        phase("k2.breakdown_execute_us") > 0,
        "a round trip to the primary"
    );
    assert!(
        total <= elapsed_us,
        "{total} µs of phases in {elapsed_us} µs"
    );
}

#[test]
fn a_batch_serves_a_burst_from_one_oracle_request_and_the_strawman_asks_for_each() {
    for (options, requests) in [("", 1u64), ("timestamps=oracle", 20)] {
        let mut d = driver(options);
        let rs: Vec<_> = (0..20)
            .map(|i| d.submit(0, txn(vec![read(&d, i % 2, "k")])))
            .collect();
        assert!(d.run_until_answered(&rs, 200 * MS));
        assert_eq!(
            d.counters.get("k2.ts_requests"),
            Some(&requests),
            "{options}"
        );
        // Fig. 16 divides by every timestamp handed out; the strawman serves none locally.
        assert_eq!(d.counters.get("k2.timestamps"), Some(&20), "{options}");
        if requests == 20 {
            assert_eq!(d.counters.get("k2.ts_from_batch"), None);
        }
        for r in rs {
            committed(&d, r);
        }
    }
}

#[test]
fn a_primary_recovers_intents_decisions_and_its_read_floor_from_its_log() {
    let mut d = driver("");
    d.hold(|_, _, m| matches!(m, Msg::Resolve { .. }));
    let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
    assert!(d.run_until_answered(&[writer], 100 * MS));
    committed(&d, writer);
    // The decision is durable but the intent not yet finalized; the primary crashes.
    let primary = d.server_node(0);
    d.crash(primary);
    d.drop_held();
    d.restart(primary);
    assert_eq!(
        d.key_state(0, &d.key_on(0, "k")).intents.len(),
        1,
        "intent recovered"
    );
    let reader = d.submit(1, txn(vec![read(&d, 0, "k")]));
    assert!(d.run_until_answered(&[reader], 200 * MS));
    assert_eq!(list(&committed(&d, reader).0[0]), vec![1]);

    // A write below a read served before a crash still aborts after it.
    d.hold(|_, _, m| matches!(m, Msg::Execute(e) if !e.piece.is_read_only()));
    let late = d.submit(0, txn(vec![append(&d, 0, "k", 2)]));
    d.run_for(5 * MS);
    let reader = d.submit(1, txn(vec![read(&d, 0, "k")]));
    assert!(d.run_until_answered(&[reader], 100 * MS));
    d.crash(primary);
    d.restart(primary);
    d.release_held();
    assert!(d.run_until_answered(&[late], 100 * MS));
    assert_eq!(aborted(&d, late), AbortReason::Conflict);
}

#[test]
fn a_recorder_aborts_a_transaction_whose_coordinator_vanished_and_releases_its_readers() {
    let mut d = driver("txn_timeout_ms=400,retry_ms=100");
    d.hold(|_, _, m| is_commit(m));
    let _writer = d.submit(0, txn(vec![append(&d, 0, "k", 1), append(&d, 1, "j", 1)]));
    d.run_for(20 * MS);
    let coordinator = d.coordinator_node(0);
    d.crash(coordinator);
    d.drop_held();
    d.run_for(150 * MS);
    let reader = d.submit(1, txn(vec![read(&d, 0, "k"), read(&d, 1, "j")]));
    d.run_for(100 * MS);
    assert!(
        d.outcome(reader).is_none(),
        "undetermined: the reader waits"
    );
    assert!(d.run_until_answered(&[reader], 2_000 * MS));
    let (results, _) = committed(&d, reader);
    assert_eq!((list(&results[0]), list(&results[1])), (vec![], vec![]));
    assert!(d
        .counters
        .get("k2.recorder_timeouts")
        .is_some_and(|n| *n >= 1));
}

#[test]
fn interactive_transactions_read_their_own_writes_and_commit_through_the_recorder() {
    let mut d = driver("");
    let k = d.key_on(1, "k");
    let t = d.begin(0, None);
    assert_eq!(d.get(0, t, &k), ClientResponse::Read(None));
    d.put(0, t, &k, "v");
    assert_eq!(
        d.get(0, t, &k),
        ClientResponse::Read(Some("v".to_string().into()))
    );
    assert!(d.commit(0, t).is_committed());
    let t = d.begin(1, None);
    assert_eq!(
        d.get(1, t, &k),
        ClientResponse::Read(Some("v".to_string().into()))
    );
    assert!(d.commit(1, t).is_committed());
}

#[test]
fn without_asynchronous_finalization_the_client_waits_for_every_participant() {
    let mut d = driver("async_finalize=false");
    d.hold(|_, _, m| matches!(m, Msg::Finalized { .. }));
    let r = d.submit(0, txn(vec![append(&d, 0, "k", 1), append(&d, 1, "j", 1)]));
    d.run_for(100 * MS);
    assert!(d.outcome(r).is_none(), "finalizations are held");
    d.release_held();
    assert!(d.run_until_answered(&[r], 500 * MS));
    committed(&d, r);
}

#[test]
fn options_are_checked_by_name() {
    let topology = meridian_core::Topology::parse("test", crate::testkit::TOPOLOGY).unwrap();
    let cluster = meridian_core::Cluster::new(topology, &[]).unwrap();
    for (raw, needle) in [
        ("timestamps=sometimes", "timestamps"),
        ("ttl_us=0", "ttl_us"),
        ("step_ns=20000000", "step_ns"),
        ("bogus=1", "bogus"),
        ("txn_timeout_ms=1,retry_ms=10", "txn_timeout_ms"),
    ] {
        let config = meridian_core::ProtocolConfig::parse(raw).unwrap();
        let err = K2::parse_options(&config, &cluster).unwrap_err();
        assert!(err.contains(needle), "{raw}: {err}");
    }
}

#[test]
fn a_coordinator_whose_oracle_crashed_asks_the_next_nearest() {
    let mut d = driver("");
    let oracles = d.cluster.services(ORACLE_SERVICE);
    assert_eq!(oracles.len(), 2, "one per region by default");
    let near = *oracles
        .iter()
        .find(|o| d.cluster.region_of(**o) == d.cluster.region_of(d.coordinator_node(0)))
        .expect("an oracle in the coordinator's region");
    d.crash(near);
    let r = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
    assert!(d.run_until_answered(&[r], 500 * MS));
    committed(&d, r);
    assert!(d
        .counters
        .get("k2.ts_request_retries")
        .is_some_and(|n| *n >= 1));
}

#[test]
fn after_one_lost_oracle_request_the_next_batch_comes_from_the_nearest_oracle_again() {
    // Table 2's 2.2 ms mean get-ts: a coordinator whose request went unanswered asked the
    // next oracle for good (on `k2-five-regions` the third nearest is in another region).
    // The driver delivers every message in 1 ms, so count where the requests went.
    let mut d = driver("");
    let coordinator = d.coordinator_node(0);
    let near = *d
        .cluster
        .services(ORACLE_SERVICE)
        .iter()
        .find(|o| d.cluster.region_of(**o) == d.cluster.region_of(coordinator))
        .expect("an oracle in the coordinator's region");
    // Requests to (the near oracle, the others): the first to the near one is lost.
    let asked = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let count = asked.clone();
    d.drop = Some(Box::new(move |from, to, m| {
        if from != coordinator || !matches!(m, Msg::GetTs { .. }) {
            return false;
        }
        let (n, f) = count.get();
        count.set((n + u32::from(to == near), f + u32::from(to != near)));
        to == near && n == 0
    }));
    let first = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
    assert!(d.run_until_answered(&[first], 500 * MS));
    committed(&d, first);
    assert_eq!(d.counters.get("k2.ts_request_retries"), Some(&1));
    assert_eq!(
        asked.get(),
        (1, 1),
        "lost at the near oracle, answered by the next"
    );
    d.run_for(50 * MS); // the batch has expired
    let second = d.submit(0, txn(vec![append(&d, 0, "k", 2)]));
    assert!(d.run_until_answered(&[second], 500 * MS));
    committed(&d, second);
    assert_eq!(asked.get(), (2, 1), "the second batch from the near oracle");
}

#[test]
fn random_loss_duplication_and_reordering_keep_appends_atomic_and_exactly_once() {
    let mut d = driver("");
    d.faults = crate::testkit::Faults {
        drop: 0.05,
        duplicate: 0.1,
        jitter_ns: 3 * MS,
    };
    let mut requests = Vec::new();
    for i in 0..40 {
        let t = txn(vec![append(&d, 0, "k", i), append(&d, 1, "j", i)]);
        requests.push((i, d.submit((i % 2) as usize, t)));
        d.run_for(7 * MS);
    }
    d.faults = crate::testkit::Faults::default();
    let ids: Vec<_> = requests.iter().map(|(_, r)| *r).collect();
    assert!(d.run_until_answered(&ids, 20_000 * MS));
    d.run_for(2_000 * MS);
    let r = d.submit(0, txn(vec![read(&d, 0, "k"), read(&d, 1, "j")]));
    assert!(d.run_until_answered(&[r], 1_000 * MS));
    let (results, _) = committed(&d, r);
    let (k, j) = (list(&results[0]), list(&results[1]));
    assert_eq!(k, j, "both appends of a transaction or neither");
    let mut seen = k.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), k.len(), "no append applied twice");
    for (i, req) in requests {
        let present = k.contains(&i);
        match d.outcome(req) {
            Some(Outcome::Committed { .. }) => assert!(present, "committed {i} is missing"),
            Some(Outcome::Aborted { .. }) => assert!(!present, "aborted {i} is present"),
            _ => {}
        }
    }
}

// ---- K2-VCR (§6) ----------------------------------------------------------------------

fn first_version_epoch(d: &Driver, shard: u32, name: &str) -> u64 {
    let state = d.key_state(shard, &d.key_on(shard, name));
    assert_eq!(state.versions.len(), 1, "one committed version of {name}");
    state.versions[0].epoch
}

/// §6.3: every write of a transaction gets the one commit epoch the recorder assigned,
/// even when one participant finalizes epochs later; the broken variant
/// (`unsafe_no_collab_epoch`) lets that participant use its own epoch, so a replica would
/// show one write of the transaction epochs before the other.
#[test]
fn collaborative_assignment_puts_a_transactions_writes_in_one_epoch_and_the_broken_variant_does_not(
) {
    let base = "replica_reads=linearizable,epoch_ms=5";
    for (options, same_epoch) in [
        (base.to_string(), true),
        (format!("{base},unsafe_no_collab_epoch=true"), false),
    ] {
        let mut d = driver(&options);
        d.run_for(20 * MS);
        let late = d.server_node(1);
        d.hold(move |_, to, m| to == late && matches!(m, Msg::Resolve { ack: true, .. }));
        let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1), append(&d, 1, "j", 1)]));
        assert!(d.run_until_answered(&[writer], 100 * MS));
        assert_eq!(committed(&d, writer).1, CommitPath::TwoPhase);
        d.run_for(30 * MS);
        d.release_held();
        d.run_for(20 * MS);
        let (on_k, on_j) = (
            first_version_epoch(&d, 0, "k"),
            first_version_epoch(&d, 1, "j"),
        );
        assert!(on_k > 0, "{options}: epochs are cut");
        assert_eq!(
            on_k == on_j,
            same_epoch,
            "{options}: epochs {on_k} and {on_j}"
        );
    }
}

/// Coordinators in region B, where each shard has a read replica: read-only transactions
/// go to the replicas.
fn replica_driver(options: &str) -> Driver {
    let topology =
        crate::testkit::TOPOLOGY.replace("region = \"A\"\ncount = 2", "region = \"B\"\ncount = 2");
    Driver::on_topology::<K2>(&topology, options, Procedures::new(), 7, 0)
}

#[test]
fn a_linearizable_replica_read_waits_for_its_epoch_and_sees_what_committed_before_it() {
    let mut d = replica_driver("replica_reads=linearizable,epoch_ms=5");
    d.run_for(20 * MS);
    let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1), append(&d, 1, "j", 2)]));
    assert!(d.run_until_answered(&[writer], 1000 * MS));
    committed(&d, writer);
    let reader = d.submit(1, txn(vec![read(&d, 0, "k"), read(&d, 1, "j")]));
    assert!(d.run_until_answered(&[reader], 1000 * MS));
    let (results, path) = committed(&d, reader);
    assert_eq!(path, CommitPath::ReadOnly);
    assert_eq!((list(&results[0]), list(&results[1])), (vec![1], vec![2]));
    assert!(d.counters.get("k2.replica_reads").is_some_and(|n| *n >= 2));
    let replica = match d.node(NodeId(1)) {
        Some(K2Node::Replica(r)) => r,
        other => panic!("n1 is {other:?}"),
    };
    assert!(replica.complete() > 0, "the replica replayed epochs");
    assert!(d
        .counters
        .get("k2.visible_versions")
        .is_some_and(|n| *n >= 1));
}

#[test]
fn with_replica_reads_off_no_epochs_are_cut_and_replicas_stay_idle() {
    let mut d = replica_driver("");
    d.run_for(20 * MS);
    let writer = d.submit(0, txn(vec![append(&d, 0, "k", 1)]));
    assert!(d.run_until_answered(&[writer], 1000 * MS));
    let reader = d.submit(1, txn(vec![read(&d, 0, "k")]));
    assert!(d.run_until_answered(&[reader], 1000 * MS));
    assert_eq!(list(&committed(&d, reader).0[0]), vec![1]);
    assert!(!d.counters.contains_key("k2.epoch_cuts"));
    assert!(!d.counters.contains_key("k2.replica_reads"));
}

/// A transaction whose write on shard 1 is held past two epoch cuts, after it read `k` on
/// shard 0; a younger writer of `k` commits meanwhile, in an earlier epoch than the held
/// transaction's write can get.
fn late_reader_against_a_younger_writer(
    options: &str,
) -> (Driver, meridian_core::RequestId, meridian_core::RequestId) {
    let mut d = driver(options);
    d.run_for(20 * MS);
    let late = d.server_node(1);
    d.hold(move |_, to, m| to == late && matches!(m, Msg::Execute(_)));
    let older = d.submit(0, txn(vec![read(&d, 0, "k"), append(&d, 1, "j", 1)]));
    d.run_for(MS);
    let younger = d.submit(0, txn(vec![append(&d, 0, "k", 2)]));
    assert!(d.run_until_answered(&[younger], 100 * MS));
    committed(&d, younger);
    d.run_for(20 * MS);
    d.release_held();
    assert!(d.run_until_answered(&[older], 200 * MS));
    (d, older, younger)
}

/// Epoch order (module doc): the older transaction read `k` before the younger one
/// overwrote it, so it must not commit in a later epoch than the younger one, or the view
/// of the younger one's epoch would show its write without the older one's. Its late write
/// puts it above its timestamp's epoch, so it validates at shard 0, which refuses: it
/// aborts. Without the validation it commits in the later epoch, out of order.
#[test]
fn a_transaction_bumped_past_a_younger_writer_of_what_it_read_fails_validation() {
    let (d, older, _) =
        late_reader_against_a_younger_writer("replica_reads=linearizable,epoch_ms=5");
    assert_eq!(aborted(&d, older), AbortReason::Conflict);
    assert_eq!(d.counters.get("k2.validation_refused"), Some(&1));
    assert!(d.key_state(1, &d.key_on(1, "j")).versions.is_empty());

    let broken = "replica_reads=linearizable,epoch_ms=5,unsafe_skip_epoch_validation=true";
    let (d, older, _) = late_reader_against_a_younger_writer(broken);
    committed(&d, older);
    let (on_j, on_k) = (
        first_version_epoch(&d, 1, "j"),
        first_version_epoch(&d, 0, "k"),
    );
    assert!(
        on_j > on_k,
        "the older transaction's epoch {on_j} is above the younger's {on_k}"
    );
}

/// A bumped transaction that validates raises the epoch floor of the keys it ran on: a
/// writer of such a key that is younger but started before the bump commits in that
/// epoch or a later one, although its timestamp's ceiling epoch and its primary's epoch
/// (its cuts held back here) propose less.
#[test]
fn a_validated_epoch_holds_later_writers_of_its_keys_at_or_above_it() {
    let mut d = driver("replica_reads=linearizable,epoch_ms=5");
    d.run_for(20 * MS);
    let (p0, p1) = (d.server_node(0), d.server_node(1));
    // Shard 1 gets no piece and shard 0 no writing piece and no cut until released.
    d.hold(move |_, to, m| match m {
        Msg::Execute(e) => to == p1 || (to == p0 && !e.piece.is_read_only()),
        Msg::OracleTs { .. } => to == p0,
        _ => false,
    });
    let bumped = d.submit(0, txn(vec![read(&d, 0, "k"), append(&d, 1, "j", 1)]));
    d.run_for(MS);
    let writer = d.submit(0, txn(vec![append(&d, 0, "k", 2)]));
    d.run_for(20 * MS);
    d.release(move |_, to, m| to == p1 && matches!(m, Msg::Execute(_)));
    assert!(d.run_until_answered(&[bumped], 200 * MS));
    committed(&d, bumped);
    let validated = first_version_epoch(&d, 1, "j");
    let k = d.key_on(0, "k");
    assert_eq!(d.primary(0).epoch_floor(&k), Some(validated));
    let stale_proposal = d.primary(0).epoch_cut() + 1;
    d.release(move |_, to, m| to == p0 && matches!(m, Msg::Execute(_)));
    assert!(d.run_until_answered(&[writer], 200 * MS));
    let ts = match d.outcome(writer) {
        Some(Outcome::Committed { commit_ts, .. }) => commit_ts.expect("a timestamp"),
        other => panic!("not committed: {other:?}"),
    };
    let ceiling = ts.time_ns.div_ceil(5 * MS);
    assert!(ceiling < validated && stale_proposal < validated);
    assert!(first_version_epoch(&d, 0, "k") >= validated);
}
