//! Unit tests of the dependency graph and the recovery choice.

use super::graph::{Graph, Status};
use super::replica::{choose, Choice};
use super::wire::{Ballot, Body, Dep, Deps, Known, Tag};
use meridian_core::txn::{Key, Op, Operand, Piece};
use meridian_core::{NodeId, ShardId, TxnId};
use std::sync::Arc;

const SHARD: ShardId = ShardId(0);

fn tag(n: u64) -> Tag {
    Tag {
        id: TxnId::new(NodeId(9), 0, n),
        slots: [(SHARD, n)].into_iter().collect(),
    }
}

fn key(s: &str) -> Key {
    Key::copy_from_slice(s.as_bytes())
}

fn body(n: u64, reads: &[&str], writes: &[&str]) -> Arc<Body> {
    let mut ops: Vec<Op> = reads.iter().map(|k| Op::Get(key(k))).collect();
    ops.extend(
        writes
            .iter()
            .map(|k| Op::Put(key(k), Operand::Literal(key("v")))),
    );
    Arc::new(Body {
        tag: tag(n),
        pieces: vec![Piece::ops(SHARD, ops)],
        coordinator: NodeId(9),
    })
}

fn deps(ns: &[u64]) -> Deps {
    ns.iter().map(|&n| Dep { tag: tag(n) }).collect()
}

fn ids(order: &[TxnId]) -> Vec<u64> {
    order.iter().map(|id| id.seq).collect()
}

#[test]
fn pre_accept_answers_conflicting_accesses_live_or_last_executed() {
    let mut g = Graph::new(SHARD);
    assert!(g.conflicts(&body(0, &[], &["x"])).is_empty());
    let reader = g.conflicts(&body(1, &["x"], &[]));
    assert_eq!(
        ids(&reader.iter().map(|d| d.tag.id).collect::<Vec<_>>()),
        [0]
    );
    let reader2 = g.conflicts(&body(2, &["x"], &[]));
    assert_eq!(reader2.len(), 1, "readers do not conflict with each other");
    let writer = g.conflicts(&body(3, &[], &["x"]));
    assert_eq!(
        ids(&writer.iter().map(|d| d.tag.id).collect::<Vec<_>>()),
        [0, 1, 2]
    );
    // Another key: no conflict.
    assert!(g.conflicts(&body(4, &["y"], &[])).is_empty());
    // Once executed, only the last executed writer (and readers after it) are reported.
    let accesses: [(&[&str], &[&str]); 4] =
        [(&[], &["x"]), (&["x"], &[]), (&["x"], &[]), (&[], &["x"])];
    for (n, (reads, writes)) in accesses.into_iter().enumerate() {
        g.commit(&body(n as u64, reads, writes), deps(&[]), 0);
        g.mark_executed(tag(n as u64).id, 0);
    }
    let later = g.conflicts(&body(5, &[], &["x"]));
    assert_eq!(
        ids(&later.iter().map(|d| d.tag.id).collect::<Vec<_>>()),
        [3]
    );
}

#[test]
fn components_execute_in_topological_order_members_by_id() {
    let mut g = Graph::new(SHARD);
    // 2 ⇄ 1 form a cycle; 3 depends on 1; 0 is independent.
    g.insert(body(2, &[], &["x"]), Status::Committed, deps(&[1]), 0);
    g.insert(body(1, &[], &["x"]), Status::Committed, deps(&[2]), 0);
    g.insert(body(3, &[], &["x"]), Status::Committed, deps(&[1]), 0);
    g.insert(body(0, &[], &["y"]), Status::Committed, deps(&[]), 0);
    let pass = g.executable();
    assert!(pass.missing.is_empty());
    let order = ids(&pass.order);
    let pos = |n| order.iter().position(|&x| x == n).unwrap();
    assert_eq!(order.len(), 4);
    assert_eq!(pos(2), pos(1) + 1, "one component, ordered by id");
    assert!(pos(3) > pos(2), "the dependent component after");
}

#[test]
fn an_uncommitted_or_unknown_dependency_blocks_its_dependents() {
    let mut g = Graph::new(SHARD);
    g.insert(body(1, &[], &["x"]), Status::PreAccepted, deps(&[]), 0);
    g.insert(body(2, &[], &["x"]), Status::Committed, deps(&[1]), 0);
    g.insert(body(3, &[], &["x"]), Status::Committed, deps(&[2]), 0);
    g.insert(body(4, &[], &["z"]), Status::Committed, deps(&[7]), 0);
    let pass = g.executable();
    assert!(pass.order.is_empty(), "{:?}", pass.order);
    assert_eq!(
        ids(&pass.missing.iter().map(|t| t.id).collect::<Vec<_>>()),
        [7]
    );
    g.commit(&body(1, &[], &["x"]), deps(&[]), 0);
    assert_eq!(ids(&g.executable().order), [1, 2, 3]);
}

#[test]
fn executed_transactions_are_forgotten_but_stay_known_as_executed() {
    let mut g = Graph::new(SHARD);
    g.insert(body(0, &[], &["x"]), Status::Committed, deps(&[]), 0);
    g.insert(body(1, &[], &["x"]), Status::Committed, deps(&[]), 0);
    for id in g.executable().order {
        g.mark_executed(id, 10);
    }
    g.forget(15, 10, 10, &[]);
    assert_eq!(g.vertices.len(), 2, "kept for keep_ns");
    g.forget(20, 10, 10, &[]);
    assert!(g.vertices.is_empty());
    assert!(g.forgotten(&tag(0)) && g.forgotten(&tag(1)));
    assert!(!g.is_done(&tag(2)), "slot 2 was never executed");
    // A transaction naming a forgotten one executes without waiting for it.
    g.insert(body(2, &[], &["x"]), Status::Committed, deps(&[1]), 0);
    assert_eq!(ids(&g.executable().order), [2]);
}

/// Issue 18, seed 142: two replicas that each executed and forgot a transaction the other
/// lacked could neither inquire it nor take each other's state. A transaction of this
/// shard is now kept until every peer reported it executed, or `keep_max` at most.
#[test]
fn executed_transactions_are_kept_until_every_peer_executed_them_or_keep_max() {
    let (peer_a, peer_b) = (NodeId(1), NodeId(2));
    let peers = [peer_a, peer_b];
    let mut g = Graph::new(SHARD);
    for n in 0..2 {
        g.insert(body(n, &[], &["x"]), Status::Committed, deps(&[]), 0);
    }
    for id in g.executable().order {
        g.mark_executed(id, 10);
    }
    assert_eq!(g.forget(100, 10, 1_000, &peers), 0);
    assert_eq!(g.vertices.len(), 2, "no peer reported either executed");
    // Peer A executed both, peer B only slot 0: only transaction 0 goes.
    let mut both = Graph::new(SHARD);
    let mut first = Graph::new(SHARD);
    for n in 0..2 {
        both.insert(body(n, &[], &["x"]), Status::Committed, deps(&[]), 0);
        both.mark_executed(tag(n).id, 0);
    }
    first.insert(body(0, &[], &["x"]), Status::Committed, deps(&[]), 0);
    first.mark_executed(tag(0).id, 0);
    g.note_peer_executed(peer_a, &both.executed_slots());
    g.note_peer_executed(peer_b, &first.executed_slots());
    assert_eq!(g.forget(200, 10, 1_000, &peers), 0);
    assert!(g.forgotten(&tag(0)));
    assert!(g.vertices.contains_key(&tag(1).id), "peer B lacks it");
    // Past keep_max it goes anyway, counted.
    assert_eq!(g.forget(1_010, 10, 1_000, &peers), 1);
    assert!(g.forgotten(&tag(1)));
}

#[test]
fn recovery_takes_the_commit_then_the_highest_accepted_then_the_union() {
    let b = |round| Ballot { round, node: 1 };
    let pre = |ns: &[u64]| Known::PreAccepted(deps(ns));
    let union = choose(&[(NodeId(0), pre(&[1])), (NodeId(1), pre(&[2]))]);
    assert_eq!(union, Choice::Accept(deps(&[1, 2])));
    let accepted = choose(&[
        (NodeId(0), Known::Accepted(b(1), deps(&[1]))),
        (NodeId(1), Known::Accepted(b(2), deps(&[3]))),
        (NodeId(2), pre(&[4])),
    ]);
    assert_eq!(accepted, Choice::Accept(deps(&[3])));
    let committed = choose(&[
        (NodeId(0), Known::Accepted(b(5), deps(&[1]))),
        (NodeId(1), Known::Committed(deps(&[2]))),
    ]);
    assert_eq!(committed, Choice::Commit(deps(&[2])));
}

/// Random graphs: every executed transaction's dependencies are executed before it or in
/// its own component (mutually reachable), none waits on an unexecuted one, and everything
/// whose reachable set is committed executes.
#[test]
fn random_graphs_execute_in_a_valid_order() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for _ in 0..300 {
        let n = rng.gen_range(1..14u64);
        let mut g = Graph::new(SHARD);
        let mut all: Vec<(u64, Vec<u64>, bool)> = Vec::new();
        for t in 0..n {
            let ds: Vec<u64> = (0..n).filter(|&d| d != t && rng.gen_bool(0.2)).collect();
            let committed = rng.gen_bool(0.85);
            let status = if committed {
                Status::Committed
            } else {
                Status::PreAccepted
            };
            g.insert(body(t, &[], &[]), status, deps(&ds), 0);
            all.push((t, ds, committed));
        }
        let order = ids(&g.executable().order);
        let reach = |from: u64| {
            let mut seen = vec![from];
            let mut i = 0;
            while i < seen.len() {
                for &d in &all[seen[i] as usize].1 {
                    if !seen.contains(&d) {
                        seen.push(d);
                    }
                }
                i += 1;
            }
            seen
        };
        for (t, ds, committed) in &all {
            let ready = reach(*t).iter().all(|&x| all[x as usize].2);
            assert_eq!(
                order.contains(t),
                *committed && ready,
                "txn {t} in {all:?}: {order:?}"
            );
            let Some(pt) = order.iter().position(|x| x == t) else {
                continue;
            };
            for d in ds {
                let pd = order
                    .iter()
                    .position(|x| x == d)
                    .expect("dependency executed");
                assert!(
                    pd < pt || reach(*d).contains(t),
                    "{d} after {t}: {all:?} {order:?}"
                );
            }
        }
    }
}

// ---- state transfer (scenarios on the test driver) --------------------------------------

mod state_transfer {
    use super::super::replica::{STATE_FETCHES, STATE_TRANSFERS};
    use super::super::{Janus, JanusNode, Msg};
    use crate::testkit::{three_regions, MsgKind, MS};
    use meridian_core::txn::{CommitPath, Op, Operand, Outcome, Piece, Procedures, Txn};
    use meridian_core::{Key, NodeId, ShardId};

    type Driver = crate::testkit::Driver<JanusNode>;

    impl MsgKind for Msg {
        fn kind(&self) -> &'static str {
            match self {
                Msg::PreAccept { .. } => "pre-accept",
                Msg::PreAcceptReply { .. } => "pre-accept-reply",
                Msg::Accept { .. } => "accept",
                Msg::AcceptReply { .. } => "accept-reply",
                Msg::Commit { .. } => "commit",
                Msg::Prepare { .. } => "prepare",
                Msg::PrepareReply { .. } => "prepare-reply",
                Msg::Inquire { .. } => "inquire",
                Msg::Executed { .. } => "executed",
                Msg::FetchState => "fetch-state",
                Msg::State { .. } => "state",
                Msg::ExecutedSlots { .. } => "executed-slots",
                Msg::Result { .. } => "result",
            }
        }
    }

    /// Regions A, B, C, two shards of three replicas; executed transactions are kept only
    /// 100 ms, so a replica away for a second lags beyond what its peers remember.
    fn driver() -> Driver {
        let topology = three_regions("janus-test", 40.0, 60.0, 80.0);
        Driver::on_topology::<Janus>(&topology, "keep_ms=100", Procedures::new(), 1, 0)
    }

    /// Reads `key` and writes `value` to it (one piece on shard 0).
    fn write(key: &Key, value: &str) -> Txn {
        let ops = vec![
            Op::Get(key.clone()),
            Op::Put(key.clone(), Operand::Literal(Key::from(value.to_string()))),
        ];
        Txn {
            pieces: vec![Piece::ops(ShardId(0), ops)],
        }
    }

    fn run(d: &mut Driver, txn: Txn) -> Outcome {
        let request = d.submit(0, txn);
        assert!(d.run_until_answered(&[request], 10_000 * MS));
        d.outcome(request).cloned().expect("answered")
    }

    fn stored(d: &Driver, node: NodeId, key: &Key) -> Option<String> {
        match d.node(node) {
            Some(JanusNode::Replica(r)) => r
                .stored(key)
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            other => panic!("{node} is {other:?}"),
        }
    }

    /// Commits `n` writes of `key` while the last replica of shard 0 hears nothing, then
    /// lets the peers forget them; returns that replica.
    fn commit_while_away(
        d: &mut Driver,
        key: &Key,
        n: usize,
        away: impl FnOnce(&mut Driver, NodeId),
    ) -> NodeId {
        let lagging = d.cluster.replicas(ShardId(0))[2];
        away(d, lagging);
        for i in 0..n {
            let outcome = run(d, write(key, &format!("v{i}")));
            assert!(matches!(outcome, Outcome::Committed { .. }), "{outcome:?}");
        }
        d.run_for(1_000 * MS);
        lagging
    }

    fn path(outcome: &Outcome) -> CommitPath {
        match outcome {
            Outcome::Committed { path, .. } => *path,
            other => panic!("not committed: {other:?}"),
        }
    }

    /// A replica down while 20 writes committed (and were forgotten by its peers) fetches
    /// a peer's state when it restarts, and then answers like its peers: the next write
    /// commits on the fast path, which needs its identical answer.
    #[test]
    fn a_restarted_replica_takes_a_peers_state_and_serves_the_fast_quorum() {
        let mut d = driver();
        let key = d.key_on(0, "x");
        assert_eq!(path(&run(&mut d, write(&key, "v-first"))), CommitPath::Fast);
        let lagging = commit_while_away(&mut d, &key, 20, |d, n| d.crash(n));
        d.restart(lagging);
        d.run_for(100 * MS);
        assert_eq!(stored(&d, lagging, &key).as_deref(), Some("v19"));
        assert_eq!(d.counters.get(STATE_TRANSFERS), Some(&1));
        let next = run(&mut d, write(&key, "v-next"));
        assert_eq!(path(&next), CommitPath::Fast, "{next:?}");
        d.run_for(100 * MS);
        assert_eq!(stored(&d, lagging, &key).as_deref(), Some("v-next"));
    }

    /// A replica cut off (not crashed) while its peers executed and forgot 20 writes meets
    /// the first forgotten one as a dependency: the peer's `Executed` answer makes it fetch
    /// the peer's state, after which it executes the new write too.
    #[test]
    fn a_replica_that_meets_a_forgotten_transaction_of_its_shard_fetches_a_peers_state() {
        let mut d = driver();
        let key = d.key_on(0, "x");
        run(&mut d, write(&key, "v-first"));
        let lagging = commit_while_away(&mut d, &key, 20, |d, n| {
            d.drop = Some(Box::new(move |_, to, _| to == n));
        });
        d.drop = None;
        assert_eq!(stored(&d, lagging, &key).as_deref(), Some("v-first"));
        assert_eq!(d.counters.get(STATE_FETCHES), None);
        run(&mut d, write(&key, "v-next"));
        d.run_for(1_000 * MS);
        assert!(d.counters.get(STATE_TRANSFERS).is_some_and(|&n| n >= 1));
        assert_eq!(stored(&d, lagging, &key).as_deref(), Some("v-next"));
    }
}

/// Another shard's transaction `n` (placed here, never executed here).
fn foreign_tag(n: u64) -> Tag {
    Tag {
        id: TxnId::new(NodeId(9), 0, n),
        slots: [(ShardId(1), n)].into_iter().collect(),
    }
}

/// The incremental passes (candidates, parked components, wake-ups) against a full walk
/// over every committed transaction, on random event sequences: transactions learned in
/// any order, pre-accepted then committed with other dependencies, dependencies unknown
/// until learned or reported executed elsewhere. After every event both find the same
/// transactions executable, and the pass's order puts dependencies first (or in the same
/// component). Fails if a wake-up is missed (a stuck transaction), a parked component
/// hides a cycle, or a transaction parked on a blocker of its own is released early.
#[test]
fn incremental_passes_find_what_a_full_walk_finds() {
    use rand::{Rng, SeedableRng};
    for seed in 0..400u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n = rng.gen_range(2..24u64);
        let foreign = |t: u64| t % 5 == 4;
        let tag_of = |t: u64| if foreign(t) { foreign_tag(t) } else { tag(t) };
        let body_of = |t: u64| {
            let mut b = (*body(t, &[], &["x"])).clone();
            if foreign(t) {
                b.tag = foreign_tag(t);
                b.pieces = vec![Piece::ops(ShardId(1), vec![Op::Get(key("x"))])];
            }
            Arc::new(b)
        };
        let random_deps = |rng: &mut rand_chacha::ChaCha8Rng, t: u64| -> Deps {
            (0..n)
                .filter(|&d| d != t && rng.gen_bool(0.25))
                .map(|d| Dep { tag: tag_of(d) })
                .collect()
        };
        let mut g = Graph::new(SHARD);
        for _ in 0..(4 * n) {
            let t = rng.gen_range(0..n);
            let known = g.vertices.get(&tag_of(t).id).map(|v| v.status);
            match (known, rng.gen_range(0..4)) {
                (None, 0) if foreign(t) => g.note_foreign_done(tag_of(t).id, 1_000),
                // Another shard's transaction is learned committed (an inquiry's answer),
                // never pre-accepted here.
                (None, 0 | 1) if !foreign(t) => {
                    let ds = random_deps(&mut rng, t);
                    g.insert(body_of(t), Status::PreAccepted, ds, 0);
                }
                (None | Some(Status::PreAccepted | Status::Accepted), _) => {
                    let ds = random_deps(&mut rng, t);
                    g.commit(&body_of(t), ds, 0);
                }
                _ => continue,
            }
            let mut full = ids(&g.executable_full());
            let pass = g.executable();
            let order = ids(&pass.order);
            full.sort_unstable();
            let mut found = order.clone();
            found.sort_unstable();
            assert_eq!(found, full, "seed {seed}: incremental vs full walk");
            for (pos, id) in pass.order.iter().enumerate() {
                for dep in g.vertices[id].deps.iter() {
                    if let Some(later) = pass.order[pos..].iter().position(|x| *x == dep.tag.id) {
                        // Later in the order only within one component (members by id).
                        assert!(later == 0 || dep.tag.id > *id, "seed {seed}: {order:?}");
                    }
                }
            }
            for id in pass.order {
                g.mark_executed(id, 0);
            }
        }
    }
}

/// The union of dependency lists against a set union, on random lists (sorted, as
/// `Graph::conflicts` answers, and unsorted with repeats, as a faulty peer might send):
/// the result is the union, sorted by id, without repeats.
#[test]
fn union_is_the_sorted_set_union() {
    use super::wire::union;
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for _ in 0..500 {
        let mut lists: Vec<Deps> = Vec::new();
        let mut expected = std::collections::BTreeSet::new();
        for _ in 0..rng.gen_range(0..5) {
            let mut ns: Vec<u64> = (0..rng.gen_range(0..12))
                .map(|_| rng.gen_range(0..20))
                .collect();
            if rng.gen_bool(0.7) {
                ns.sort_unstable();
                ns.dedup();
            }
            expected.extend(ns.iter().copied());
            lists.push(deps(&ns));
        }
        let merged = union(lists.iter().map(|d| &d[..]));
        let got: Vec<u64> = merged.iter().map(|d| d.tag.id.seq).collect();
        assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
    }
}
