//! The deterministic driver the protocols' unit tests share (the real one is
//! `meridian-sim`; this one lets a test reach into nodes and steer single messages).
//!
//! Events (deliveries and timers) sit in one queue ordered by virtual time; a message takes
//! 1 ms plus optional seeded jitter (which reorders), and may be dropped or duplicated per a
//! seeded RNG. Each node's clock is virtual time plus a base and a per-node offset (so a
//! test can put clocks out of step). A test can lose messages matching a filter, or park
//! them and release them later; crash and restart nodes (a restart rebuilds the node from
//! its records); drive one-shot or interactive client requests; and inspect node state and
//! the protocol's counters. Every message and record is round-tripped through JSON, and
//! every client request must be answered at most once.

use meridian_core::host::{Action, MemoryLog, NodeAction, NodeHost};
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::{ClientRequest, ClientResponse, Outcome, Procedures, Rmw, Step, Txn};
use meridian_core::{
    Cluster, Key, Node, NodeId, NodeRng, Protocol, ProtocolConfig, RequestId, ShardId, TimerId,
    Timestamp, Topology, TxnId, Value,
};
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) const MS: u64 = 1_000_000;

/// The value an interactive `Get` returned, as text.
pub(crate) fn read_value(r: &ClientResponse) -> Option<String> {
    match r {
        ClientResponse::Read(v) => v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        other => panic!("not a read: {other:?}"),
    }
}

/// The commit path of a committed outcome.
pub(crate) fn committed(o: &Outcome) -> meridian_core::txn::CommitPath {
    match o {
        Outcome::Committed { path, .. } => *path,
        other => panic!("not committed: {other:?}"),
    }
}

/// Three regions A, B, C with the given round trips (ms) between them; two shards with a
/// replica in each region (f = 1), initial leaders in A; two coordinators in A.
pub(crate) fn three_regions(name: &str, rtt_ab_ms: f64, rtt_ac_ms: f64, rtt_bc_ms: f64) -> String {
    let rtt = |pair: &str, ms: f64| format!("[[rtt]]\nbetween = [{pair}]\nms = {ms:?}\n");
    format!(
        "name = \"{name}\"\nregions = [\"A\", \"B\", \"C\"]\nintra_region_rtt_ms = 1.0\n{}{}{}\
         [[shards]]\ncount = 2\nreplicas = [\"A\", \"B\", \"C\"]\nleader = \"A\"\n\
         [[coordinators]]\nregion = \"A\"\ncount = 2\n",
        rtt("\"A\", \"B\"", rtt_ab_ms),
        rtt("\"A\", \"C\"", rtt_ac_ms),
        rtt("\"B\", \"C\"", rtt_bc_ms),
    )
}

/// Two regions; two shards with two replicas each (the second replica of each is inert
/// under single-copy protocols); two coordinators. Shard 0's data node is n0, shard 1's is
/// n2; coordinators are n4, n5; services (an oracle, say) follow from n6.
pub(crate) const TOPOLOGY: &str = r#"
name = "protocol-test"
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

/// A message's short name, for the per-kind send counts.
pub(crate) trait MsgKind {
    fn kind(&self) -> &'static str;
}

/// Decides whether a message (from, to, msg) is lost or parked instead of sent.
pub(crate) type Filter<M> = Box<dyn FnMut(NodeId, NodeId, &M) -> bool>;

/// Random network faults, drawn from the driver's seeded RNG.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    pub jitter_ns: u64,
}

enum Event<M, T> {
    Deliver {
        from: NodeId,
        to: NodeId,
        msg: M,
    },
    Fire {
        node: NodeId,
        incarnation: u32,
        id: TimerId,
        timer: T,
    },
}

/// Builds a node from its records, with the protocol's setup (and parsed options) inside.
type Build<N> = Box<dyn Fn(NodeId, &[<N as Node>::Record]) -> N>;

/// The test driver of a protocol whose nodes are `N`.
pub(crate) struct Driver<N: Node> {
    pub cluster: Arc<Cluster>,
    pub procedures: Arc<Procedures>,
    build: Build<N>,
    /// Each node's host (the drivers' shared core: state machine, timers, incarnation).
    hosts: Vec<NodeHost<N>>,
    pub records: Vec<MemoryLog<N::Record>>,
    seed: u64,
    events: BTreeMap<(u64, u64), Event<N::Msg, N::Timer>>,
    seq: u64,
    /// Virtual time, ns.
    pub now: u64,
    /// Every clock reads `clock_base_ns + now + offsets[node]`.
    clock_base_ns: u64,
    /// Per-node clock offset (ns, may be negative).
    pub offsets: Vec<i64>,
    pub faults: Faults,
    rng: NodeRng,
    /// Messages matching this filter are lost (after being counted as sent).
    pub drop: Option<Filter<N::Msg>>,
    hold: Option<Filter<N::Msg>>,
    held: Vec<(NodeId, NodeId, N::Msg)>,
    responses: BTreeMap<RequestId, ClientResponse>,
    next_request: u64,
    /// Messages sent, by kind.
    pub sent: BTreeMap<&'static str, usize>,
    /// Messages delivered, per destination node.
    pub delivered: Vec<usize>,
    /// The protocol's counters (`Context::count`), summed over nodes.
    pub counters: BTreeMap<&'static str, u64>,
}

/// Node `index`'s RNG for `incarnation` (the first is `seed ^ index`, as it always was).
fn node_rng(seed: u64, index: u64, incarnation: u32) -> NodeRng {
    NodeRng::seed_from_u64(seed ^ index ^ (u64::from(incarnation) << 48))
}

fn roundtrip<T: Serialize + DeserializeOwned>(value: T) -> T {
    let text = serde_json::to_string(&value).expect("serializes");
    serde_json::from_str(&text).expect("deserializes")
}

impl<N: Node> Driver<N>
where
    N::Msg: MsgKind,
{
    /// Protocol `P` on [`TOPOLOGY`] with `options`, clocks reading virtual time (which starts
    /// at 1 s), RNGs seeded from `seed`.
    pub(crate) fn new<P: Protocol<Node = N>>(
        options: &str,
        procedures: Procedures,
        seed: u64,
    ) -> Self {
        Self::with_clock_base::<P>(options, procedures, seed, 0)
    }

    /// As [`Driver::new`], with every clock `clock_base_ns` ahead of virtual time.
    pub(crate) fn with_clock_base<P: Protocol<Node = N>>(
        options: &str,
        procedures: Procedures,
        seed: u64,
        clock_base_ns: u64,
    ) -> Self {
        Self::on_topology::<P>(TOPOLOGY, options, procedures, seed, clock_base_ns)
    }

    /// As [`Driver::with_clock_base`], on another topology (TOML text).
    pub(crate) fn on_topology<P: Protocol<Node = N>>(
        topology: &str,
        options: &str,
        procedures: Procedures,
        seed: u64,
        clock_base_ns: u64,
    ) -> Self {
        let topology = Topology::parse("test", topology).expect("test topology");
        let config = ProtocolConfig::parse(options).expect("options parse");
        let setup = Setup::<P>::new(topology, &config, procedures).expect("valid options");
        let n = setup.cluster.nodes.len();
        let mut driver = Driver {
            cluster: setup.cluster.clone(),
            procedures: setup.procedures.clone(),
            build: Box::new(move |node, records| P::build(node, &setup, records)),
            // As the simulator by default: every event is a batch of its own.
            hosts: (0..n as u64)
                .map(|i| NodeHost::new(NodeId(i as u32), node_rng(seed, i, 0), 1))
                .collect(),
            records: (0..n).map(|_| MemoryLog::default()).collect(),
            seed,
            events: BTreeMap::new(),
            seq: 0,
            now: 1_000 * MS,
            clock_base_ns,
            offsets: vec![0; n],
            faults: Faults::default(),
            rng: NodeRng::seed_from_u64(seed),
            drop: None,
            hold: None,
            held: Vec::new(),
            responses: BTreeMap::new(),
            next_request: 0,
            sent: BTreeMap::new(),
            delivered: vec![0; n],
            counters: BTreeMap::new(),
        };
        for node in 0..n {
            driver.restart(NodeId(node as u32));
        }
        driver
    }

    // ---- the cluster --------------------------------------------------------------------

    pub(crate) fn coordinator_node(&self, index: usize) -> NodeId {
        self.cluster.coordinators[index]
    }

    pub(crate) fn server_node(&self, shard: u32) -> NodeId {
        self.cluster.initial_leader(ShardId(shard))
    }

    /// The node's state (`None` while crashed).
    pub(crate) fn node(&self, node: NodeId) -> Option<&N> {
        self.hosts[node.index()].node()
    }

    /// The id coordinator `index` gives its `counter`-th transaction of incarnation `inc`.
    pub(crate) fn txn_id(&self, index: usize, inc: u32, counter: u64) -> TxnId {
        TxnId::new(self.coordinator_node(index), inc, counter)
    }

    /// A key stored on `shard` (the partitioner decides; we search names `{name}{i}`).
    pub(crate) fn key_on(&self, shard: u32, name: &str) -> Key {
        (0..)
            .map(|i| Key::from(format!("{name}{i}")))
            .find(|k| self.cluster.partitioner.shard_of(k) == ShardId(shard))
            .expect("some key lands on every shard")
    }

    /// The node's clock reading now.
    pub(crate) fn clock(&self, node: NodeId) -> u64 {
        let base = self.clock_base_ns as i64 + self.now as i64;
        (base + self.offsets[node.index()]) as u64
    }

    // ---- clients ------------------------------------------------------------------------

    pub(crate) fn submit(&mut self, coordinator: usize, txn: Txn) -> RequestId {
        self.request(coordinator, ClientRequest::OneShot(txn))
    }

    pub(crate) fn request(&mut self, coordinator: usize, req: ClientRequest) -> RequestId {
        let request = RequestId(self.next_request);
        self.next_request += 1;
        let node = self.coordinator_node(coordinator);
        self.with_node(node, |n, ctx| n.on_client_request(ctx, request, req));
        request
    }

    pub(crate) fn response(&self, request: RequestId) -> Option<&ClientResponse> {
        self.responses.get(&request)
    }

    /// The outcome of a one-shot or commit request, if answered.
    pub(crate) fn outcome(&self, request: RequestId) -> Option<&Outcome> {
        match self.responses.get(&request)? {
            ClientResponse::Outcome(o) => Some(o),
            other => panic!("request answered {other:?}, not an outcome"),
        }
    }

    /// Sends one interactive step and runs until it is answered (at most 10 s).
    pub(crate) fn step(&mut self, coordinator: usize, step: Step) -> ClientResponse {
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

    pub(crate) fn begin(&mut self, coordinator: usize, latest_seen: Option<Timestamp>) -> TxnId {
        match self.step(coordinator, Step::Begin { latest_seen }) {
            ClientResponse::Began(txn) => txn,
            other => panic!("begin answered {other:?}"),
        }
    }

    pub(crate) fn get(&mut self, coordinator: usize, txn: TxnId, key: &Key) -> ClientResponse {
        let key = key.clone();
        self.step(
            coordinator,
            Step::Get {
                txn,
                key,
                then: Vec::new(),
            },
        )
    }

    pub(crate) fn put(&mut self, coordinator: usize, txn: TxnId, key: &Key, value: &str) {
        let step = Step::Put {
            txn,
            key: key.clone(),
            value: Value::from(value.to_string()),
        };
        let response = self.step(coordinator, step);
        assert_eq!(response, ClientResponse::Written);
    }

    pub(crate) fn modify(&mut self, coordinator: usize, txn: TxnId, key: &Key, rmw: Rmw) {
        let key = key.clone();
        let response = self.step(coordinator, Step::Modify { txn, key, rmw });
        assert_eq!(response, ClientResponse::Written);
    }

    pub(crate) fn commit(&mut self, coordinator: usize, txn: TxnId) -> Outcome {
        match self.step(coordinator, Step::Commit { txn }) {
            ClientResponse::Outcome(o) => o,
            other => panic!("commit answered {other:?}"),
        }
    }

    // ---- the network --------------------------------------------------------------------

    /// Parks every later message matching `filter` (until released).
    pub(crate) fn hold(&mut self, filter: impl FnMut(NodeId, NodeId, &N::Msg) -> bool + 'static) {
        self.hold = Some(Box::new(filter));
    }

    /// Stops parking and delivers what was parked (each copy once, 1 ms from now).
    pub(crate) fn release_held(&mut self) {
        self.hold = None;
        self.release(|_, _, _| true);
    }

    /// Delivers the parked messages matching `filter` (1 ms from now); keeps parking.
    pub(crate) fn release(&mut self, mut filter: impl FnMut(NodeId, NodeId, &N::Msg) -> bool) {
        let (go, stay) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(from, to, msg)| filter(*from, *to, msg));
        self.held = stay;
        for (from, to, msg) in go {
            self.inject(from, to, msg);
        }
    }

    /// Delivers `msg` from `from` to `to`, 1 ms from now (a late duplicate, say).
    pub(crate) fn inject(&mut self, from: NodeId, to: NodeId, msg: N::Msg) {
        self.schedule(self.now + MS, Event::Deliver { from, to, msg });
    }

    /// Stops parking and loses what was parked.
    pub(crate) fn drop_held(&mut self) -> usize {
        self.hold = None;
        std::mem::take(&mut self.held).len()
    }

    // ---- nodes --------------------------------------------------------------------------

    /// The node loses its memory and its pending timers; messages to it are lost while down.
    pub(crate) fn crash(&mut self, node: NodeId) {
        self.hosts[node.index()].crash();
    }

    /// Rebuilds the node from its records and runs `on_start`.
    pub(crate) fn restart(&mut self, node: NodeId) {
        let built = (self.build)(node, self.records[node.index()].records());
        let host = &mut self.hosts[node.index()];
        let rng = node_rng(self.seed, node.index() as u64, host.incarnation());
        host.start(built, rng);
        self.with_node(node, |n, ctx| n.on_start(ctx));
    }

    // ---- time ---------------------------------------------------------------------------

    /// Processes every event up to `now + ns`.
    pub(crate) fn run_for(&mut self, ns: u64) {
        let end = self.now + ns;
        while let Some((&(at, seq), _)) = self.events.first_key_value() {
            if at > end {
                break;
            }
            let event = self.events.remove(&(at, seq)).expect("present");
            self.now = self.now.max(at);
            self.deliver(event);
        }
        self.now = end;
    }

    /// Runs until every request in `requests` is answered (or `max_ns` passes).
    pub(crate) fn run_until_answered(&mut self, requests: &[RequestId], max_ns: u64) -> bool {
        let end = self.now + max_ns;
        while self.now < end {
            if requests.iter().all(|r| self.responses.contains_key(r)) {
                return true;
            }
            self.run_for(MS);
        }
        requests.iter().all(|r| self.responses.contains_key(r))
    }

    fn deliver(&mut self, event: Event<N::Msg, N::Timer>) {
        match event {
            Event::Deliver { from, to, msg } => {
                if self.hosts[to.index()].is_up() {
                    self.delivered[to.index()] += 1;
                }
                self.with_node(to, |n, ctx| n.on_message(ctx, from, msg));
            }
            Event::Fire {
                node,
                incarnation,
                id,
                timer,
            } => {
                if self.hosts[node.index()].take_timer(incarnation, id) {
                    self.with_node(node, |n, ctx| n.on_timer(ctx, timer));
                }
            }
        }
    }

    fn with_node(&mut self, node: NodeId, handler: impl FnOnce(&mut N, &mut Ctx<'_, N>)) {
        let now = self.clock(node);
        let mut actions = Vec::new();
        let host = &mut self.hosts[node.index()];
        if let Err(broken) = host.handle(now, handler, &mut actions) {
            panic!("{broken}");
        }
        for action in actions {
            self.apply(node, action);
        }
    }

    fn apply(&mut self, node: NodeId, action: NodeAction<N>) {
        match action {
            Action::Send { to, msg } => self.send(node, to, roundtrip(msg)),
            Action::ArmTimer {
                id,
                incarnation,
                after_ns,
                timer,
            } => {
                let fire = Event::Fire {
                    node,
                    incarnation,
                    id,
                    timer,
                };
                self.schedule(self.now + after_ns, fire);
            }
            // The host refuses a cancelled timer when it fires.
            Action::DisarmTimer { .. } | Action::Sync => {}
            Action::Respond { request, response } => {
                let previous = self.responses.insert(request, response);
                assert!(previous.is_none(), "{request} answered twice");
            }
            Action::Persist { record, checkpoint } => {
                self.records[node.index()].write(roundtrip(record), checkpoint)
            }
            Action::Count { name, by } => *self.counters.entry(name).or_default() += by,
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: N::Msg) {
        *self.sent.entry(msg.kind()).or_default() += 1;
        if self.drop.as_mut().is_some_and(|f| f(from, to, &msg)) {
            return;
        }
        if let Some(filter) = self.hold.as_mut() {
            if filter(from, to, &msg) {
                self.held.push((from, to, msg));
                return;
            }
        }
        if self.faults.drop > 0.0 && self.rng.gen_bool(self.faults.drop) {
            return;
        }
        let copies = if self.faults.duplicate > 0.0 && self.rng.gen_bool(self.faults.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = if self.faults.jitter_ns > 0 {
                self.rng.gen_range(0..=self.faults.jitter_ns)
            } else {
                0
            };
            let event = Event::Deliver {
                from,
                to,
                msg: msg.clone(),
            };
            self.schedule(self.now + MS + jitter, event);
        }
    }

    fn schedule(&mut self, at: u64, event: Event<N::Msg, N::Timer>) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }
}

impl MsgKind for crate::two_pl::Msg {
    fn kind(&self) -> &'static str {
        crate::two_pl::Msg::kind(self)
    }
}

impl MsgKind for crate::clock_si::Msg {
    fn kind(&self) -> &'static str {
        crate::clock_si::Msg::kind(self)
    }
}

impl MsgKind for crate::tiga::Msg {
    fn kind(&self) -> &'static str {
        use crate::tiga::Msg as M;
        match self {
            M::Submit(_) => "submit",
            M::FastReply(_) => "fast-reply",
            M::SlowReply { .. } => "slow-reply",
            M::Notify { .. } => "notify",
            M::LogSync { .. } => "log-sync",
            _ => "other",
        }
    }
}
