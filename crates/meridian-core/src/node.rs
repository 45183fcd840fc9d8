//! The sans-IO node contract (DESIGN §1, §3).
//!
//! A [`Node`] is a deterministic state machine. A driver (the simulator, or the tokio runtime)
//! calls one handler per event and hands it a [`Context`]: the node's identity, its **local**
//! clock reading, a seeded RNG, and a buffer into which the handler pushes [`Effect`]s
//! (send, timers, respond to a client, persist a record). The driver then carries the effects
//! out. A node never touches a socket, a thread, a real clock or a global RNG, so the same
//! code runs bit-for-bit the same under the simulator and in a real process.
//!
//! Crash and restart: a crashed node loses its memory. What it must keep it hands to the
//! driver as [`Effect::Persist`] records (its write-ahead log) and, to keep that log bounded,
//! [`Effect::Checkpoint`] records that replace everything before them; on restart the driver
//! builds a new node with [`Protocol::build`] from those records, then calls [`Node::on_start`].
//!
//! Timers measure durations on the node's local clock; a driver may let them fire a little
//! early or late relative to the clock reading (drift, steps), so a handler that waits for
//! "local clock ≥ t" re-reads [`Context::now_ns`] when the timer fires and re-arms if needed.

use crate::fault_model::FaultModel;
use crate::ids::{NodeId, RegionId, RequestId, ShardId};
use crate::topology::{Cluster, ReplicaKind, Topology};
use crate::txn::{AbortReason, ClientRequest, ClientResponse, Outcome, Procedures};
use rand_chacha::ChaCha8Rng;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::str::FromStr;
use std::sync::Arc;

/// The RNG a node draws from: seeded by the driver, reproducible on every platform.
pub type NodeRng = ChaCha8Rng;

/// Identifies a pending timer of one node, for cancellation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u64);

/// What a handler asks its driver to do.
#[derive(Clone, Debug)]
pub enum Effect<M, T, R> {
    /// Deliver `msg` to node `to` (the network may delay, drop or duplicate it).
    Send { to: NodeId, msg: M },
    /// Call [`Node::on_timer`] with `timer` after `after_ns` of local time.
    SetTimer {
        id: TimerId,
        after_ns: u64,
        timer: T,
    },
    /// Forget a pending timer (no effect if it already fired).
    CancelTimer { id: TimerId },
    /// Answer the client request `request`.
    Respond {
        request: RequestId,
        response: ClientResponse,
    },
    /// Append a record to this node's durable log; it survives a crash.
    Persist { record: R },
    /// Append a record that subsumes every earlier one (a checkpoint): the driver may drop
    /// the records before it, which keeps the durable log bounded.
    Checkpoint { record: R },
    /// Add `by` to the run-wide counter `name` (what the protocol did: delays, waits,
    /// certification failures…). Drivers sum counters over all nodes; they survive crashes
    /// because the driver, not the node, keeps them. No effect on behaviour.
    Count { name: &'static str, by: u64 },
}

/// The handle through which a handler acts. Built by drivers with [`Context::new`].
pub struct Context<'a, M, T, R> {
    node: NodeId,
    now_ns: u64,
    rng: &'a mut NodeRng,
    effects: &'a mut Vec<Effect<M, T, R>>,
    next_timer: &'a mut u64,
    true_ns: Option<u64>,
}

/// The effect type of node type `N`.
pub type NodeEffect<N> = Effect<<N as Node>::Msg, <N as Node>::Timer, <N as Node>::Record>;

/// The context type of node type `N`.
pub type Ctx<'a, N> = Context<'a, <N as Node>::Msg, <N as Node>::Timer, <N as Node>::Record>;

impl<'a, M: Clone, T, R> Context<'a, M, T, R> {
    /// For drivers: a context for one event of `node` at local time `now_ns`.
    pub fn new(
        node: NodeId,
        now_ns: u64,
        rng: &'a mut NodeRng,
        effects: &'a mut Vec<Effect<M, T, R>>,
        next_timer: &'a mut u64,
    ) -> Self {
        Context {
            node,
            now_ns,
            rng,
            effects,
            next_timer,
            true_ns: None,
        }
    }

    /// For the simulator: the true time of this event, on the scale of local readings
    /// (see [`Context::true_now_ns`]).
    pub fn with_true_ns(mut self, true_ns: Option<u64>) -> Self {
        self.true_ns = true_ns;
        self
    }

    /// The true time of this event where a driver knows it (the simulator), `None`
    /// elsewhere (the runtime). **Instrumentation only**: for experiment counters that say
    /// *why* something happened (Aurogon's abort causes: did a clock misorder two
    /// timestamps?), never for a decision — a protocol behaves on [`Context::now_ns`].
    pub fn true_now_ns(&self) -> Option<u64> {
        self.true_ns
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.node
    }

    /// This node's local clock reading, in nanoseconds (not true time: clocks err).
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The node's seeded RNG.
    pub fn rng(&mut self) -> &mut NodeRng {
        self.rng
    }

    pub fn send(&mut self, to: NodeId, msg: M) {
        self.effects.push(Effect::Send { to, msg });
    }

    /// Sends a copy of `msg` to each of `to`.
    pub fn multicast(&mut self, to: impl IntoIterator<Item = NodeId>, msg: &M) {
        for node in to {
            self.send(node, msg.clone());
        }
    }

    /// Arms a timer `after_ns` of local time from now.
    pub fn set_timer(&mut self, after_ns: u64, timer: T) -> TimerId {
        *self.next_timer += 1;
        let id = TimerId(*self.next_timer);
        self.effects.push(Effect::SetTimer {
            id,
            after_ns,
            timer,
        });
        id
    }

    pub fn cancel_timer(&mut self, id: TimerId) {
        self.effects.push(Effect::CancelTimer { id });
    }

    pub fn respond(&mut self, request: RequestId, response: ClientResponse) {
        self.effects.push(Effect::Respond { request, response });
    }

    /// Answers `request` as aborted for `reason` (a refusal or a failed transaction).
    pub fn respond_aborted(&mut self, request: RequestId, reason: AbortReason) {
        self.respond(
            request,
            ClientResponse::Outcome(Outcome::Aborted { reason }),
        );
    }

    /// Refuses a client request that reached a node which is not a coordinator.
    pub fn refuse_not_coordinator(&mut self, request: RequestId) {
        let reason = AbortReason::Unsupported(format!("node {} is not a coordinator", self.node));
        self.respond_aborted(request, reason);
    }

    pub fn persist(&mut self, record: R) {
        self.effects.push(Effect::Persist { record });
    }

    /// Persists a record that makes every earlier record of this node redundant.
    pub fn checkpoint(&mut self, record: R) {
        self.effects.push(Effect::Checkpoint { record });
    }

    /// Adds `by` to the run-wide counter `name` (see [`Effect::Count`]).
    pub fn count(&mut self, name: &'static str, by: u64) {
        self.effects.push(Effect::Count { name, by });
    }

    /// Runs `f` with a context of this node (same clock reading, RNG and timer ids) whose
    /// effects are returned instead of carried out: a node that wraps another state
    /// machine (a replicated partition around its server, say) inspects and rewrites them,
    /// then hands on what it keeps with [`Context::emit`].
    pub fn capture(&mut self, f: impl FnOnce(&mut Context<'_, M, T, R>)) -> Vec<Effect<M, T, R>> {
        let mut effects = Vec::new();
        let mut inner = Context {
            node: self.node,
            now_ns: self.now_ns,
            rng: &mut *self.rng,
            effects: &mut effects,
            next_timer: &mut *self.next_timer,
            true_ns: self.true_ns,
        };
        f(&mut inner);
        effects
    }

    /// Carries out an effect as is (one returned by [`Context::capture`]).
    pub fn emit(&mut self, effect: Effect<M, T, R>) {
        self.effects.push(effect);
    }
}

/// A deterministic protocol state machine.
pub trait Node: Sized + 'static {
    /// The protocol's wire message.
    type Msg: Clone + Debug + Send + Serialize + DeserializeOwned + 'static;
    /// What a timer carries back to the node.
    type Timer: Clone + Debug + Send + 'static;
    /// A durable (write-ahead) record.
    type Record: Clone + Debug + Send + Serialize + DeserializeOwned + 'static;

    /// Called once after the node is built (at boot, and after every restart).
    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>);

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Self::Msg);

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Self::Timer);

    /// A client hands this node (a coordinator) a request; answer it with
    /// [`Context::respond`] exactly once.
    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    );

    /// The end of a batch of events: the simulator calls it after every event, the runtime
    /// after each run of queued events it handles together (at most its inbox batch) and
    /// before it waits for more. A protocol may leave messages that several events add to
    /// (a log sync to followers) for here, so that one message carries them all. Deferring
    /// must be safe as message delay is: the driver never waits long to call it.
    fn on_batch_end(&mut self, _ctx: &mut Ctx<'_, Self>) {}

    /// Checks what only a bug can break in this node's state (a log's order, a queue's
    /// frontier). The simulator calls it after every event in debug builds and stops the
    /// run at the first violation, naming the node, the time and the seed, so a bug is
    /// caught where it happens rather than when a history finally shows it. Keep it cheap
    /// (it runs per event); an expensive check can sample itself.
    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }

    /// The leader of this node's shard as this node currently believes, for operators
    /// (`meridian cluster status` shows it after view changes); None if the protocol has
    /// no leaders or does not say. Drivers only read it; protocol logic never relies on it.
    fn shard_leader(&self) -> Option<NodeId> {
        None
    }
}

/// Parses `key=value,key=value` (the shape of protocol and workload options); a repeated
/// key or a pair without `=` is an error naming it.
pub fn parse_key_values(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut options = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("option `{pair}` is not key=value"))?;
        if options
            .insert(key.trim().to_string(), value.trim().to_string())
            .is_some()
        {
            return Err(format!("option `{}` is given twice", key.trim()));
        }
    }
    Ok(options)
}

/// Protocol options as given (`key=value` pairs from the CLI or an experiment file): the raw
/// carrier a protocol's [`Protocol::parse_options`] reads, with typed getters that turn a
/// malformed value into an error naming the key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtocolConfig {
    options: BTreeMap<String, String>,
}

impl ProtocolConfig {
    /// Parses `key=value,key=value`.
    pub fn parse(text: &str) -> Result<ProtocolConfig, String> {
        let mut options = BTreeMap::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("protocol option `{pair}` is not key=value"))?;
            options.insert(key.trim().to_string(), value.trim().to_string());
        }
        Ok(ProtocolConfig { options })
    }

    pub fn set(&mut self, key: &str, value: impl ToString) {
        self.options.insert(key.to_string(), value.to_string());
    }

    /// Takes `key` out, parsed as `V` (`default` when absent): for a protocol that reads
    /// its own options before handing the rest to another's parser.
    pub fn take<V: FromStr>(&mut self, key: &str, default: V) -> Result<V, String> {
        let value = self.get(key, default)?;
        self.options.remove(key);
        Ok(value)
    }

    /// The value of `key` parsed as `V`, or `default` when absent.
    pub fn get<V: FromStr>(&self, key: &str, default: V) -> Result<V, String> {
        match self.options.get(key) {
            None => Ok(default),
            Some(text) => text
                .parse()
                .map_err(|_| format!("protocol option `{key}` has bad value `{text}`")),
        }
    }

    /// Fails on any option not in `known`, so a typo is not silently ignored.
    pub fn check_known(&self, known: &[&str]) -> Result<(), String> {
        match self.options.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(format!(
                "unknown protocol option `{k}` (known: {})",
                known.join(", ")
            )),
            None => Ok(()),
        }
    }
}

/// What every node of protocol `P` is built from: the cluster (with the protocol's
/// services placed), the stored procedures, and the protocol's options, parsed once by
/// [`Setup::new`] so that no node build can meet an option it cannot read.
pub struct Setup<P: Protocol> {
    pub cluster: Arc<Cluster>,
    pub options: P::Options,
    pub procedures: Arc<Procedures>,
}

// Derived impls would demand `P: Clone + Debug` of the protocol's unit type; only the
// fields need them.
impl<P: Protocol> Clone for Setup<P> {
    fn clone(&self) -> Self {
        Setup {
            cluster: self.cluster.clone(),
            options: self.options.clone(),
            procedures: self.procedures.clone(),
        }
    }
}

impl<P: Protocol> Debug for Setup<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("protocol", &P::NAME)
            .field("cluster", &self.cluster.topology.name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<P: Protocol> Setup<P> {
    /// Places the protocol's services on `topology` and parses `raw` into `P::Options`:
    /// the one place options are read, so a bad or unknown one is refused here, by name.
    pub fn new(
        topology: Topology,
        raw: &ProtocolConfig,
        procedures: Procedures,
    ) -> Result<Setup<P>, String> {
        let plain = Cluster::without_services(&topology).map_err(|e| e.to_string())?;
        let services = P::services(&plain);
        let cluster = Cluster::new(topology, &services).map_err(|e| e.to_string())?;
        check_deployment::<P>(&cluster)?;
        let options = P::parse_options(raw, &cluster)?;
        Ok(Setup {
            cluster: Arc::new(cluster),
            options,
            procedures: Arc::new(procedures),
        })
    }
}

/// What a finished run measured, for a protocol's analytical model
/// ([`Protocol::predict`]); drivers fill it without knowing which protocol uses what.
#[derive(Clone, Copy, Debug)]
pub struct RunSummary<'a> {
    pub cluster: &'a Cluster,
    /// The workload's name (`microbench`, `tpcc`…) and its options.
    pub workload: &'a str,
    pub workload_options: &'a BTreeMap<String, String>,
    /// Transactions committed while the load ran, and how long it ran.
    pub committed: u64,
    pub load_s: f64,
    /// The mean latency of the committed transactions, in ms.
    pub mean_latency_ms: f64,
}

/// A protocol: a name, the isolation level it promises, its options, and how to build its
/// nodes.
pub trait Protocol: Sized + 'static {
    type Node: Node;
    /// The protocol's options, typed: parsed once by [`Protocol::parse_options`] and handed
    /// to every [`Protocol::build`] through [`Setup::options`].
    type Options: Clone + Debug + Send + Sync + 'static;

    /// The name used by `--protocol`.
    const NAME: &'static str;
    /// The checker model the protocol promises (`strict-serializable`, `snapshot-isolation`…).
    const GUARANTEE: &'static str;
    /// Every option key [`Protocol::parse_options`] accepts, as `--protocol help` lists them.
    const OPTIONS: &'static [&'static str];

    /// Extra service nodes the protocol needs (name, region), e.g. a view manager or an
    /// oracle. They are placed after the replicas and coordinators.
    fn services(_cluster_without_services: &Cluster) -> Vec<(String, RegionId)> {
        Vec::new()
    }

    /// Parses `key=value` options for `cluster` (defaults may scale with its round trips;
    /// a mode may need its clocks' guaranteed error bound). An unknown key or a bad value
    /// is an error naming it.
    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Self::Options, String>;

    /// Builds node `node`, fresh (`recovered` empty) or after a crash from its durable records.
    fn build(
        node: NodeId,
        setup: &Setup<Self>,
        recovered: &[<Self::Node as Node>::Record],
    ) -> Self::Node;

    /// The physical latency bound, in ms, for a transaction from `coordinator` touching
    /// `shards`: what the report's `bound_ms` and `p50_wrtt` are measured against.
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64;

    /// An optional hook: the protocol's analytical model of a finished run (named
    /// predictions, e.g. Clock-SI's §IV delay and abort rates), reported beside what was
    /// measured. Empty when the protocol has no model or the run is outside it.
    fn predict(_run: &RunSummary<'_>, _options: &Self::Options) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }

    /// The replica kinds the protocol runs (topology `kinds`); a topology with any other
    /// is refused at setup ([`check_deployment`]) rather than silently mis-modelled.
    const REPLICA_KINDS: &'static [ReplicaKind] = &[ReplicaKind::Voter];

    /// Which machines may crash and how many at once (see [`FaultModel`]); `--faults
    /// random` draws inside it.
    fn fault_model(cluster: &Cluster) -> FaultModel {
        FaultModel::minorities(cluster)
    }
}

/// Refuses a cluster whose replica kinds protocol `P` does not run.
pub fn check_deployment<P: Protocol>(cluster: &Cluster) -> Result<(), String> {
    match cluster
        .replica_kinds()
        .into_iter()
        .find(|k| !P::REPLICA_KINDS.contains(k))
    {
        Some(kind) => Err(format!(
            "protocol {} does not run {} replicas (topology {}: `kinds`); it runs: {}",
            P::NAME,
            kind.name(),
            cluster.topology.name,
            P::REPLICA_KINDS
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn capture_returns_the_inner_effects_and_shares_timer_ids_and_clock() {
        let mut rng = NodeRng::seed_from_u64(1);
        let mut effects: Vec<Effect<u8, u8, u8>> = Vec::new();
        let mut next_timer = 0;
        let mut ctx = Context::new(NodeId(3), 42, &mut rng, &mut effects, &mut next_timer);
        let first = ctx.set_timer(5, 1);
        let inner = ctx.capture(|cx| {
            assert_eq!((cx.id(), cx.now_ns()), (NodeId(3), 42));
            cx.persist(7);
            cx.set_timer(5, 2);
        });
        // Captured effects are not carried out; the inner timer id continues the sequence.
        assert!(matches!(inner[0], Effect::Persist { record: 7 }));
        assert!(matches!(inner[1], Effect::SetTimer { id, .. } if id.0 == first.0 + 1));
        ctx.emit(inner[1].clone());
        ctx.count("n", 2);
        assert_eq!(effects.len(), 3);
        assert!(matches!(effects[2], Effect::Count { name: "n", by: 2 }));
    }
}
