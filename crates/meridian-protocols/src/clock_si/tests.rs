//! Unit tests with a small deterministic driver: messages take 1 ms, each node's clock is
//! virtual time plus a per-node offset, tests may drop messages matching a filter, crash and
//! restart nodes (rebuilt from their records), and inspect node state. Every message and
//! record is round-tripped through JSON.

use super::*;
use crate::clock_si::wire::Cx;
use meridian_core::node::{Context, Effect};
use meridian_core::txn::{AbortReason, ClientResponse, CommitPath, Outcome, Step, Txn};
use meridian_core::{NodeRng, ShardId, TimerId, Timestamp, Topology, TxnId};
use rand::SeedableRng;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const MS: u64 = 1_000_000;
const MS_I: i64 = 1_000_000;
const EPOCH: u64 = 1_700_000_000_000_000_000;

/// Two regions; two shards (data nodes n0 and n2, in A); two coordinators (n4, n5) in A;
/// conventional SI adds the oracle n6 in A.
const TOPOLOGY: &str = r#"
name = "clock-si-test"
regions = ["A", "B"]
intra_region_rtt_ms = 1.0
[[rtt]]
between = ["A", "B"]
ms = 100.0
[[shards]]
count = 2
replicas = ["A", "B"]
leader = "A"
[[coordinators]]
region = "A"
count = 2
"#;

type Filter = Box<dyn FnMut(NodeId, NodeId, &Msg) -> bool>;

enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        msg: Msg,
    },
    Fire {
        node: NodeId,
        epoch: u32,
        id: TimerId,
        timer: Timer,
    },
}

struct Driver {
    setup: Setup,
    conventional: bool,
    nodes: Vec<Option<SiNode>>,
    records: Vec<Vec<Record>>,
    epochs: Vec<u32>,
    next_timer: Vec<u64>,
    rngs: Vec<NodeRng>,
    cancelled: BTreeSet<(NodeId, TimerId)>,
    events: BTreeMap<(u64, u64), Event>,
    seq: u64,
    now: u64,
    /// Per-node clock offset (ns, may be negative).
    offsets: Vec<i64>,
    drop: Option<Filter>,
    responses: BTreeMap<RequestId, ClientResponse>,
    next_request: u64,
    sent: BTreeMap<&'static str, usize>,
}

fn roundtrip<T: Serialize + DeserializeOwned>(value: T) -> T {
    serde_json::from_str(&serde_json::to_string(&value).expect("serializes")).expect("deserializes")
}

fn key(s: &str) -> meridian_core::Key {
    meridian_core::Key::from(s.to_string())
}

impl Driver {
    fn new(conventional: bool, options: &str) -> Driver {
        let topology = Topology::parse("test", TOPOLOGY).expect("test topology");
        let services = if conventional {
            ConventionalSi::services(&Cluster::new(topology.clone(), &[]).unwrap())
        } else {
            Vec::new()
        };
        let cluster = Arc::new(Cluster::new(topology, &services).expect("test cluster"));
        let config = ProtocolConfig::parse(options).expect("options parse");
        ClockSi::check_config(&config).expect("valid options");
        let setup = Setup {
            cluster,
            config,
            procedures: Arc::new(Default::default()),
        };
        let n = setup.cluster.nodes.len();
        let mut d = Driver {
            setup,
            conventional,
            nodes: (0..n).map(|_| None).collect(),
            records: vec![Vec::new(); n],
            epochs: vec![0; n],
            next_timer: vec![0; n],
            rngs: (0..n as u64).map(NodeRng::seed_from_u64).collect(),
            cancelled: BTreeSet::new(),
            events: BTreeMap::new(),
            seq: 0,
            now: 0,
            offsets: vec![0; n],
            drop: None,
            responses: BTreeMap::new(),
            next_request: 0,
            sent: BTreeMap::new(),
        };
        for node in 0..n {
            d.restart(NodeId(node as u32));
        }
        d
    }

    fn coord(&self, i: usize) -> NodeId {
        self.setup.cluster.coordinators[i]
    }

    fn server_node(&self, shard: u32) -> NodeId {
        self.setup.cluster.initial_leader(ShardId(shard))
    }

    fn server(&self, shard: u32) -> &Server {
        match &self.nodes[self.server_node(shard).index()] {
            Some(SiNode::Server(s)) => s,
            other => panic!("shard {shard}'s node is {other:?}"),
        }
    }

    fn coordinator(&self, i: usize) -> &Coordinator {
        match &self.nodes[self.coord(i).index()] {
            Some(SiNode::Coordinator(c)) => c,
            other => panic!("coordinator {i} is {other:?}"),
        }
    }

    /// A key stored on `shard` (the partitioner decides; we search names).
    fn key_on(&self, shard: u32, name: &str) -> meridian_core::Key {
        (0..)
            .map(|i| key(&format!("{name}{i}")))
            .find(|k| self.setup.cluster.partitioner.shard_of(k) == ShardId(shard))
            .expect("some key lands on every shard")
    }

    fn crash(&mut self, node: NodeId) {
        self.nodes[node.index()] = None;
        self.epochs[node.index()] += 1;
    }

    fn restart(&mut self, node: NodeId) {
        let built = if self.conventional {
            ConventionalSi::build(node, &self.setup, &self.records[node.index()])
        } else {
            ClockSi::build(node, &self.setup, &self.records[node.index()])
        };
        self.nodes[node.index()] = Some(built);
        self.with_node(node, |n, ctx| n.on_start(ctx));
    }

    fn request(&mut self, coordinator: usize, req: ClientRequest) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        let node = self.coord(coordinator);
        self.with_node(node, |n, ctx| n.on_client_request(ctx, request, req));
        request
    }

    /// Sends one step and runs until it is answered (at most 10 s).
    fn step(&mut self, coordinator: usize, step: Step) -> ClientResponse {
        let request = self.request(coordinator, ClientRequest::Interactive(step));
        let end = self.now + 10_000 * MS;
        while self.now < end && !self.responses.contains_key(&request) {
            self.run_for(MS / 10);
        }
        self.responses
            .get(&request)
            .cloned()
            .expect("answered within 10 s")
    }

    fn begin(&mut self, coordinator: usize, latest_seen: Option<Timestamp>) -> TxnId {
        match self.step(coordinator, Step::Begin { latest_seen }) {
            ClientResponse::Began(txn) => txn,
            other => panic!("begin answered {other:?}"),
        }
    }

    fn get(&mut self, coordinator: usize, txn: TxnId, k: &meridian_core::Key) -> ClientResponse {
        self.step(
            coordinator,
            Step::Get {
                txn,
                key: k.clone(),
            },
        )
    }

    fn put(&mut self, coordinator: usize, txn: TxnId, k: &meridian_core::Key, v: &str) {
        let value = meridian_core::Value::from(v.to_string());
        let r = self.step(
            coordinator,
            Step::Put {
                txn,
                key: k.clone(),
                value,
            },
        );
        assert_eq!(r, ClientResponse::Written);
    }

    fn commit(&mut self, coordinator: usize, txn: TxnId) -> Outcome {
        match self.step(coordinator, Step::Commit { txn }) {
            ClientResponse::Outcome(o) => o,
            other => panic!("commit answered {other:?}"),
        }
    }

    fn run_for(&mut self, ns: u64) {
        let end = self.now + ns;
        while let Some((&(at, seq), _)) = self.events.first_key_value() {
            if at > end {
                break;
            }
            let event = self.events.remove(&(at, seq)).expect("present");
            self.now = self.now.max(at);
            match event {
                Event::Deliver { from, to, msg } => {
                    self.with_node(to, |n, ctx| n.on_message(ctx, from, msg))
                }
                Event::Fire {
                    node,
                    epoch,
                    id,
                    timer,
                } => {
                    if epoch == self.epochs[node.index()] && !self.cancelled.remove(&(node, id)) {
                        self.with_node(node, |n, ctx| n.on_timer(ctx, timer));
                    }
                }
            }
        }
        self.now = end;
    }

    fn clock(&self, node: NodeId) -> u64 {
        (EPOCH as i64 + self.now as i64 + self.offsets[node.index()]) as u64
    }

    fn with_node(&mut self, node: NodeId, handler: impl FnOnce(&mut SiNode, &mut Cx<'_>)) {
        let now = self.clock(node);
        let Some(state) = self.nodes[node.index()].as_mut() else {
            return;
        };
        let mut effects = Vec::new();
        let mut ctx = Context::new(
            node,
            now,
            &mut self.rngs[node.index()],
            &mut effects,
            &mut self.next_timer[node.index()],
        );
        handler(state, &mut ctx);
        for effect in effects {
            match effect {
                Effect::Send { to, msg } => {
                    let msg = roundtrip(msg);
                    *self.sent.entry(msg.kind()).or_default() += 1;
                    if self.drop.as_mut().is_some_and(|f| f(node, to, &msg)) {
                        continue;
                    }
                    self.schedule(
                        self.now + MS,
                        Event::Deliver {
                            from: node,
                            to,
                            msg,
                        },
                    );
                }
                Effect::SetTimer {
                    id,
                    after_ns,
                    timer,
                } => {
                    let epoch = self.epochs[node.index()];
                    self.schedule(
                        self.now + after_ns,
                        Event::Fire {
                            node,
                            epoch,
                            id,
                            timer,
                        },
                    );
                }
                Effect::CancelTimer { id } => {
                    self.cancelled.insert((node, id));
                }
                Effect::Respond { request, response } => {
                    assert!(
                        self.responses.insert(request, response).is_none(),
                        "{request} answered twice"
                    );
                }
                Effect::Persist { record } => self.records[node.index()].push(roundtrip(record)),
                Effect::Checkpoint { record } => {
                    self.records[node.index()].clear();
                    self.records[node.index()].push(roundtrip(record));
                }
            }
        }
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
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
    assert!(parse("delta_ms=-1").is_err());
    assert!(parse("delta_ms=soon").is_err());
    assert!(parse("retry_ms=0").is_err());
    assert!(parse("bogus=1").unwrap_err().contains("bogus"));
    // gcp-tiga, HK coordinator: CW = the largest round trip to a partition (all data in
    // SC: 238 ms) dominates SK_max − RRD/2 for huygens clocks.
    let topology = Topology::load("gcp-tiga").unwrap();
    let cluster = Cluster::new(topology, &[]).unwrap();
    let hk = *cluster.coordinators.last().unwrap();
    let auto = parse("delta_ms=auto").unwrap();
    assert_eq!(auto.delta_for(&cluster, hk), 238 * MS);
    let sc = cluster.coordinators[0];
    assert_eq!(auto.delta_for(&cluster, sc), MS / 2);
}

#[test]
fn delta_makes_snapshots_older_by_delta() {
    let mut d = Driver::new(false, "delta_ms=40");
    assert_eq!(d.coordinator(0).delta_ns(), 40 * MS);
    d.run_for(100 * MS);
    let t = d.begin(0, None);
    let before = d.clock(d.coord(0));
    let o = d.commit(0, t);
    let (snapshot, path) = committed_ts(&o);
    assert_eq!(path, CommitPath::ReadOnly);
    assert!(snapshot.time_ns <= before - 40 * MS && snapshot.time_ns >= before - 41 * MS);
}

// ---- Algorithm 1 ----------------------------------------------------------------------

#[test]
fn a_read_waits_until_the_partition_clock_passes_the_snapshot() {
    let mut d = Driver::new(false, "");
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
    assert!(d.server(0).stats.clock_delays >= 1);
    // A second read with the same snapshot is below the partition's floor now: no wait.
    let start = d.now;
    d.get(0, t, &d.key_on(0, "j"));
    assert!(d.now - start < 5 * MS);
}

#[test]
fn an_update_waits_for_the_clock_too_so_its_commit_ts_is_above_the_snapshot() {
    let mut d = Driver::new(false, "");
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
    assert!(d.server(0).stats.clock_delays >= 1);
}

#[test]
fn a_read_behind_a_prepared_version_waits_and_asks_the_coordinator_for_the_commit_ts() {
    let mut d = Driver::new(false, "");
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
    assert!(d.server(0).stats.prepared_delays >= 1);
    assert!(
        d.sent["query"] > queries,
        "the partition asked for the commit ts"
    );
    assert_eq!(d.server(0).prepared_count(), 0);
    assert_eq!(read_value(&d.get(1, t2, &y)).as_deref(), Some("y1"));
}

#[test]
fn session_consistency_starts_the_snapshot_above_latest_seen() {
    let mut d = Driver::new(false, "delta_ms=20");
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
    let mut d = Driver::new(false, "");
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
    let mut d = Driver::new(false, "");
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
    let mut d = Driver::new(false, "");
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
        let mut d = Driver::new(conventional, "");
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
            d.responses.get(&r).cloned()
        else {
            panic!("one-shot answered {:?}", d.responses.get(&r));
        };
        assert_eq!(path, CommitPath::TwoPhase);
        assert_eq!(results.len(), 2);
        assert_eq!(decode_int(results[0].outputs[0].as_ref().unwrap()), Some(5));
        // Again: the add reads the committed 5.
        let r = d.request(1, ClientRequest::OneShot(txn));
        d.run_for(50 * MS);
        assert!(
            matches!(d.responses.get(&r), Some(ClientResponse::Outcome(o)) if o.is_committed())
        );
        let t = d.begin(0, None);
        let ClientResponse::Read(Some(v)) = d.get(0, t, &b) else {
            panic!("b unwritten")
        };
        assert_eq!(decode_int(&v), Some(10));
        let bad = d.request(0, ClientRequest::OneShot(Txn { pieces: vec![] }));
        assert!(matches!(
            d.responses.get(&bad),
            Some(ClientResponse::Outcome(Outcome::Aborted {
                reason: AbortReason::Invalid(_)
            }))
        ));
    }
}

// ---- recovery (§III-E) ----------------------------------------------------------------

#[test]
fn a_restarted_partition_resolves_its_prepared_transaction_with_the_coordinator() {
    let mut d = Driver::new(false, "");
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
    let mut d = Driver::new(false, "query_ms=50");
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
        !d.responses.contains_key(&r),
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
    let mut d = Driver::new(false, "");
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
    let mut d = Driver::new(false, "checkpoint_every=4");
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
    let mut d = Driver::new(true, "");
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
    let oracle = d.setup.cluster.services(ORACLE_SERVICE)[0];
    d.crash(oracle);
    d.offsets[oracle.index()] = -1_000 * MS_I;
    d.restart(oracle);
    let t2 = d.begin(1, None);
    let (s2, _) = committed_ts(&d.commit(1, t2));
    assert!(s2 > c);
    let t3 = d.begin(1, None);
    assert_eq!(read_value(&d.get(1, t3, &k)).as_deref(), Some("v"));
    assert_eq!(d.server(0).stats.clock_delays, 0);
}
