//! A small deterministic driver for this module's tests (the real one is `meridian-sim`).
//!
//! Events (deliveries and timers) sit in one queue ordered by virtual time; a message takes
//! 1 ms plus optional seeded jitter (which reorders), and may be dropped or duplicated per a
//! seeded RNG. A test can park messages matching a filter and release them later, crash and
//! restart nodes (a restart rebuilds from the node's records), and inspect node state. Every
//! message and record is round-tripped through JSON, and every client request must be
//! answered at most once.

use super::{Coordinator, Msg, Record, Server, Timer, TwoPlNode, TwoPlTwoPc};
use meridian_core::node::{Context, Effect, Setup};
use meridian_core::txn::{ClientRequest, ClientResponse, Outcome, Procedures, Txn};
use meridian_core::{
    Cluster, Node, NodeId, NodeRng, Protocol, ProtocolConfig, RequestId, ShardId, TimerId,
    Topology, TxnId,
};
use rand::{Rng, SeedableRng};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(crate) const MS: u64 = 1_000_000;

/// Two regions; two shards with two replicas each (the second replica of each is inert);
/// two coordinators. Shard 0's data node is n0, shard 1's is n2; coordinators are n4, n5.
pub(crate) const TOPOLOGY: &str = r#"
name = "two-pl-test"
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

/// Decides whether a message (from, to, msg) is parked instead of sent.
pub(crate) type Filter = Box<dyn FnMut(NodeId, NodeId, &Msg) -> bool>;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    pub jitter_ns: u64,
}

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

pub(crate) struct Driver {
    pub setup: Setup,
    nodes: Vec<Option<TwoPlNode>>,
    pub records: Vec<Vec<Record>>,
    epochs: Vec<u32>,
    next_timer: Vec<u64>,
    rngs: Vec<NodeRng>,
    cancelled: BTreeSet<(NodeId, TimerId)>,
    events: BTreeMap<(u64, u64), Event>,
    seq: u64,
    pub now: u64,
    pub faults: Faults,
    rng: NodeRng,
    hold: Option<Filter>,
    held: Vec<(NodeId, NodeId, Msg)>,
    responses: BTreeMap<RequestId, ClientResponse>,
    next_request: u64,
    /// Messages sent, by kind.
    pub sent: BTreeMap<&'static str, usize>,
    /// Messages delivered, per destination node.
    pub delivered: Vec<usize>,
}

fn roundtrip<T: Serialize + DeserializeOwned>(value: T) -> T {
    let text = serde_json::to_string(&value).expect("serializes");
    serde_json::from_str(&text).expect("deserializes")
}

impl Driver {
    pub(crate) fn new(options: &str, procedures: Procedures, seed: u64) -> Driver {
        let topology = Topology::parse("test", TOPOLOGY).expect("test topology");
        let cluster = Arc::new(Cluster::new(topology, &[]).expect("test cluster"));
        let config = ProtocolConfig::parse(options).expect("options parse");
        TwoPlTwoPc::check_config(&config).expect("valid options");
        let setup = Setup {
            cluster,
            config,
            procedures: Arc::new(procedures),
        };
        let n = setup.cluster.nodes.len();
        let mut driver = Driver {
            setup,
            nodes: (0..n).map(|_| None).collect(),
            records: vec![Vec::new(); n],
            epochs: vec![0; n],
            next_timer: vec![0; n],
            rngs: (0..n as u64)
                .map(|i| NodeRng::seed_from_u64(seed ^ i))
                .collect(),
            cancelled: BTreeSet::new(),
            events: BTreeMap::new(),
            seq: 0,
            now: 1_000 * MS,
            faults: Faults::default(),
            rng: NodeRng::seed_from_u64(seed),
            hold: None,
            held: Vec::new(),
            responses: BTreeMap::new(),
            next_request: 0,
            sent: BTreeMap::new(),
            delivered: vec![0; n],
        };
        for node in 0..n {
            driver.restart(NodeId(node as u32));
        }
        driver
    }

    pub(crate) fn coordinator_node(&self, index: usize) -> NodeId {
        self.setup.cluster.coordinators[index]
    }

    pub(crate) fn server_node(&self, shard: u32) -> NodeId {
        self.setup.cluster.initial_leader(ShardId(shard))
    }

    /// The id coordinator `index` gives its `counter`-th transaction of incarnation `inc`.
    pub(crate) fn txn_id(&self, index: usize, inc: u32, counter: u64) -> TxnId {
        TxnId::new(self.coordinator_node(index), inc, counter)
    }

    pub(crate) fn server(&self, shard: u32) -> &Server {
        match &self.nodes[self.server_node(shard).index()] {
            Some(TwoPlNode::Server(s)) => s,
            other => panic!("shard {shard}'s data node is {other:?}"),
        }
    }

    pub(crate) fn coordinator(&self, index: usize) -> &Coordinator {
        match &self.nodes[self.coordinator_node(index).index()] {
            Some(TwoPlNode::Coordinator(c)) => c,
            other => panic!("coordinator {index} is {other:?}"),
        }
    }

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

    pub(crate) fn outcome(&self, request: RequestId) -> Option<&Outcome> {
        match self.responses.get(&request)? {
            ClientResponse::Outcome(o) => Some(o),
            other => panic!("one-shot request answered {other:?}"),
        }
    }

    /// Parks every later message matching `filter` (until released).
    pub(crate) fn hold(&mut self, filter: impl FnMut(NodeId, NodeId, &Msg) -> bool + 'static) {
        self.hold = Some(Box::new(filter));
    }

    /// Stops parking and delivers what was parked (each copy once, 1 ms from now).
    pub(crate) fn release_held(&mut self) {
        self.hold = None;
        for (from, to, msg) in std::mem::take(&mut self.held) {
            self.schedule(self.now + MS, Event::Deliver { from, to, msg });
        }
    }

    /// Delivers the parked messages matching `filter` (1 ms from now); keeps parking.
    pub(crate) fn release(&mut self, mut filter: impl FnMut(NodeId, NodeId, &Msg) -> bool) {
        let (go, stay) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(from, to, msg)| filter(*from, *to, msg));
        self.held = stay;
        for (from, to, msg) in go {
            self.schedule(self.now + MS, Event::Deliver { from, to, msg });
        }
    }

    /// Delivers `msg` from `from` to `to`, 1 ms from now (a late duplicate, say).
    pub(crate) fn inject(&mut self, from: NodeId, to: NodeId, msg: Msg) {
        self.schedule(self.now + MS, Event::Deliver { from, to, msg });
    }

    /// Stops parking and loses what was parked.
    pub(crate) fn drop_held(&mut self) -> usize {
        self.hold = None;
        std::mem::take(&mut self.held).len()
    }

    /// The node loses its memory and its pending timers; messages to it are lost while down.
    pub(crate) fn crash(&mut self, node: NodeId) {
        self.nodes[node.index()] = None;
        self.epochs[node.index()] += 1;
    }

    /// Rebuilds the node from its records and runs `on_start`.
    pub(crate) fn restart(&mut self, node: NodeId) {
        let built = TwoPlTwoPc::build(node, &self.setup, &self.records[node.index()]);
        self.nodes[node.index()] = Some(built);
        self.with_node(node, |n, ctx| n.on_start(ctx));
    }

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

    fn deliver(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, msg } => {
                if self.nodes[to.index()].is_some() {
                    self.delivered[to.index()] += 1;
                }
                self.with_node(to, |n, ctx| n.on_message(ctx, from, msg));
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

    fn with_node(
        &mut self,
        node: NodeId,
        handler: impl FnOnce(&mut TwoPlNode, &mut Context<'_, Msg, Timer, Record>),
    ) {
        let Some(state) = self.nodes[node.index()].as_mut() else {
            return;
        };
        let mut effects = Vec::new();
        let mut ctx = Context::new(
            node,
            self.now,
            &mut self.rngs[node.index()],
            &mut effects,
            &mut self.next_timer[node.index()],
        );
        handler(state, &mut ctx);
        self.apply(node, effects);
    }

    fn apply(&mut self, node: NodeId, effects: Vec<Effect<Msg, Timer, Record>>) {
        for effect in effects {
            match effect {
                Effect::Send { to, msg } => self.send(node, to, roundtrip(msg)),
                Effect::SetTimer {
                    id,
                    after_ns,
                    timer,
                } => {
                    let epoch = self.epochs[node.index()];
                    let fire = Event::Fire {
                        node,
                        epoch,
                        id,
                        timer,
                    };
                    self.schedule(self.now + after_ns, fire);
                }
                Effect::CancelTimer { id } => {
                    self.cancelled.insert((node, id));
                }
                Effect::Respond { request, response } => {
                    let previous = self.responses.insert(request, response);
                    assert!(previous.is_none(), "{request} answered twice");
                }
                Effect::Persist { record } => self.records[node.index()].push(roundtrip(record)),
                Effect::Checkpoint { record } => {
                    self.records[node.index()].clear();
                    self.records[node.index()].push(roundtrip(record));
                }
            }
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: Msg) {
        *self.sent.entry(msg.kind()).or_default() += 1;
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

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), event);
    }
}
