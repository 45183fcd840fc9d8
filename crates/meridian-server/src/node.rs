//! One node's event loop: the runtime's driver around the node's [`NodeHost`], the core it
//! shares with the simulator and the unit-test driver. The host runs one handler per event
//! (an inbox message or request, a timer, a message to itself), keeps the node's timers,
//! batch and invariants, and hands back the [`Action`]s this loop carries out in order.
//!
//! * **Clock.** `now_ns` is the system clock (ns since the Unix epoch) plus the node's
//!   configured offset, the runtime's stand-in for the simulator's clock models.
//! * **Timers** live in a `DelayQueue`, keyed by the protocol's `TimerId`, so a cancel is O(1).
//! * **Write-ahead, with group commit.** Persisted records are buffered. At each
//!   [`Action::Sync`] (which the host puts before the first send or response that follows
//!   them) the loop does not write yet: it *holds* every later message and response of the
//!   batch, and at the end of the batch writes the records out with one `write` (and, with
//!   `fsync`, one `fsync`) for the whole batch, then lets the held messages go in order.
//!   No message leaves ahead of the state it depends on, and a batch of handlers costs one
//!   disk sync, not one each. Bounded: the loop syncs early once it holds
//!   [`HELD_MESSAGES_MAX`] messages, [`UNSYNCED_BYTES_MAX`] bytes of records or has held
//!   one for [`HOLD_MAX`]. Messages to self are not held (they die with the process).
//!   Without `fsync` the group is the same and its sync one `write` into the OS's page
//!   cache (which survives a crash of the process): one system call per batch, not one
//!   per handler that wrote records.
//! * **Messages to self** go through a local queue (never the inbox, which the loop itself
//!   drains and which may be full), with no delay, as in the simulator.
//! * **Batches.** After each wake-up's events (at most `INBOX_BATCH_MAX` from the inbox,
//!   or a timer) and the messages to self they caused, the node's `on_batch_end` runs
//!   once, before the loop waits again: a protocol can send one message for the batch.

use crate::metrics::NodeMetrics;
use crate::storage::Wal;
use crate::transport::{Held, Inbound, Reply};
use meridian_core::host::{Action, NodeAction, NodeHost};
use meridian_core::txn::{ClientResponse, Outcome};
use meridian_core::{Node, NodeId, NodeRng, RequestId, TimerId};
use prometheus_client::metrics::counter::Counter;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{delay_queue, DelayQueue};

/// Most inbound events one wake-up of a node handles before it looks at its timers and
/// the stop signal again.
const INBOX_BATCH_MAX: usize = 64;

/// Group commit bounds: a batch syncs its records early once it holds this many messages
/// and responses waiting for the sync…
pub const HELD_MESSAGES_MAX: usize = 4096;
/// …or this many bytes of records are written but not synced…
pub const UNSYNCED_BYTES_MAX: u64 = 4 << 20;
/// …or its oldest held message has waited this long.
pub const HOLD_MAX: Duration = Duration::from_millis(2);

/// When a group commit syncs before its batch ends (the defaults are the constants above;
/// tests set their own, so that a batch's size does not depend on the machine's speed).
#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    pub held_messages_max: usize,
    pub unsynced_bytes_max: u64,
    pub hold_max: Duration,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            held_messages_max: HELD_MESSAGES_MAX,
            unsynced_bytes_max: UNSYNCED_BYTES_MAX,
            hold_max: HOLD_MAX,
        }
    }
}

/// A message or response waiting for its batch's records to be synced.
enum HeldOut<M> {
    Send {
        to: NodeId,
        msg: M,
    },
    Respond {
        request: RequestId,
        response: ClientResponse,
    },
}

/// How a node reaches one other node.
pub enum Route<M> {
    /// An in-process node with no emulated delay: straight into its inbox.
    Direct(mpsc::Sender<Inbound<M>>),
    /// A link task (delayed, or over TCP); `one_way_ns` and `jitter_mean_ns` are the
    /// emulated delay, already scaled.
    Link {
        queue: mpsc::Sender<Held<M>>,
        one_way_ns: u64,
        jitter_mean_ns: f64,
    },
    /// The node itself.
    Own,
}

/// Everything a node's loop owns.
pub struct NodeLoop<N: Node> {
    pub id: NodeId,
    host: NodeHost<N>,
    pub delay_rng: ChaCha8Rng,
    pub routes: Vec<Route<N::Msg>>,
    pub wal: Option<Wal<N::Record>>,
    pub clock_offset_ns: i64,
    pub metrics: Arc<NodeMetrics>,
    actions: Vec<NodeAction<N>>,
    timers: DelayQueue<(TimerId, N::Timer)>,
    timer_keys: FxHashMap<TimerId, delay_queue::Key>,
    to_self: VecDeque<N::Msg>,
    /// Requests awaiting an answer, with when they arrived (for the latency histogram).
    pending: FxHashMap<RequestId, (Reply, Instant)>,
    next_request: u64,
    /// The protocol's counts since they were last published to `metrics` (at a batch's
    /// end), and each count's counter there.
    protocol_counts: FxHashMap<&'static str, u64>,
    protocol_counters: FxHashMap<&'static str, Counter>,
    /// Group commit: when a batch syncs early; messages and responses waiting for the
    /// batch's sync, and since when (None: nothing is held, sends go out at once).
    group_limits: GroupLimits,
    held: Vec<HeldOut<N::Msg>>,
    holding_since: Option<Instant>,
    /// Bytes of records written since the last sync.
    unsynced_bytes: u64,
    /// The log's `write`s already published to `metrics.wal_syncs`, and the handlers that
    /// wrote records since the last publication.
    writes_published: u64,
    handlers_persisted: u64,
}

impl<N: Node> NodeLoop<N> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: NodeId,
        node: N,
        rng: NodeRng,
        delay_rng: ChaCha8Rng,
        routes: Vec<Route<N::Msg>>,
        wal: Option<Wal<N::Record>>,
        clock_offset_ns: i64,
        metrics: Arc<NodeMetrics>,
    ) -> Self {
        // The loop ends each batch itself, when its inbox is drained (see the module doc).
        let mut host = NodeHost::new(id, rng.clone(), u32::MAX);
        host.start(node, rng);
        NodeLoop {
            id,
            host,
            delay_rng,
            routes,
            wal,
            clock_offset_ns,
            metrics,
            actions: Vec::new(),
            timers: DelayQueue::new(),
            timer_keys: FxHashMap::default(),
            to_self: VecDeque::new(),
            pending: FxHashMap::default(),
            next_request: 0,
            protocol_counts: FxHashMap::default(),
            protocol_counters: FxHashMap::default(),
            group_limits: GroupLimits::default(),
            held: Vec::new(),
            holding_since: None,
            unsynced_bytes: 0,
            writes_published: 0,
            handlers_persisted: 0,
        }
    }

    /// The same loop with other group commit bounds.
    pub fn with_group_limits(mut self, limits: GroupLimits) -> Self {
        self.group_limits = limits;
        self
    }

    /// The node's local clock: system time plus its configured offset.
    fn now_ns(&self) -> u64 {
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("system clock after 1970")
            .as_nanos() as i128;
        u64::try_from(system + i128::from(self.clock_offset_ns)).unwrap_or(0)
    }

    /// Runs the loop until `stop` or until every inbox sender is gone.
    pub async fn run(mut self, inbox: mpsc::Receiver<Inbound<N::Msg>>, stop: CancellationToken) {
        self.serve(inbox, stop).await;
    }

    /// The loop itself, on a loop the caller keeps (tests read its log afterwards).
    async fn serve(&mut self, mut inbox: mpsc::Receiver<Inbound<N::Msg>>, stop: CancellationToken) {
        self.metrics.up.store(true, Ordering::Relaxed);
        self.handle(|n, ctx| n.on_start(ctx));
        loop {
            while let Some(msg) = self.to_self.pop_front() {
                let id = self.id;
                self.handle(|n, ctx| n.on_message(ctx, id, msg));
            }
            // Everything queued so far is handled: the batch ends before the loop waits.
            self.end_batch();
            if !self.to_self.is_empty() {
                continue;
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                Some(expired) = std::future::poll_fn(|cx| self.timers.poll_expired(cx)) => {
                    let (id, timer) = expired.into_inner();
                    self.timer_keys.remove(&id);
                    let incarnation = self.host.incarnation();
                    if self.host.take_timer(incarnation, id) {
                        NodeMetrics::add(&self.metrics.timers_fired, 1);
                        self.handle(|n, ctx| n.on_timer(ctx, timer));
                    }
                }
                event = inbox.recv() => match event {
                    Some(event) => {
                        self.on_inbound(event);
                        // Whatever else is already queued is handled now, without a trip
                        // through the select (bounded, so timers and stop stay timely).
                        for _ in 1..INBOX_BATCH_MAX {
                            let Ok(event) = inbox.try_recv() else { break };
                            self.on_inbound(event);
                        }
                    }
                    None => break,
                },
            }
        }
        if let Some(wal) = self.wal.as_mut() {
            if let Err(e) = wal.sync() {
                tracing::error!(node = %self.id, error = %e, "durable log write failed at shutdown");
            }
        }
        self.held.clear();
        self.publish_metrics();
        self.metrics.up.store(false, Ordering::Relaxed);
    }

    fn on_inbound(&mut self, event: Inbound<N::Msg>) {
        match event {
            Inbound::Message { from, msg } => {
                NodeMetrics::add(&self.metrics.messages_received, 1);
                self.handle(|n, ctx| n.on_message(ctx, from, msg));
            }
            Inbound::Request { request, reply } => {
                NodeMetrics::add(&self.metrics.client_requests, 1);
                self.next_request += 1;
                let id = RequestId(self.next_request);
                self.pending.insert(id, (reply, Instant::now()));
                self.handle(|n, ctx| n.on_client_request(ctx, id, request));
            }
        }
    }

    /// Runs `handler` through the host, then carries out its actions in order.
    fn handle(&mut self, handler: impl FnOnce(&mut N, &mut meridian_core::node::Ctx<'_, N>)) {
        let now = self.now_ns();
        let mut actions = std::mem::take(&mut self.actions);
        if let Err(broken) = self.host.handle(now, handler, &mut actions) {
            panic!("{broken}");
        }
        self.carry_out(actions);
    }

    fn end_batch(&mut self) {
        let now = self.now_ns();
        let mut actions = std::mem::take(&mut self.actions);
        if let Err(broken) = self.host.end_batch(now, &mut actions) {
            panic!("{broken}");
        }
        self.carry_out(actions);
        // Group commit: one sync for the whole batch, then what it held goes out.
        self.commit_group();
        self.publish_metrics();
    }

    /// Carries out one handler's actions, counting it if it wrote records.
    fn carry_out(&mut self, mut actions: Vec<NodeAction<N>>) {
        let records_before = self.wal.as_ref().map_or(0, |w| w.records_written);
        for action in actions.drain(..) {
            self.apply(action);
        }
        self.actions = actions;
        if self.wal.as_ref().map_or(0, |w| w.records_written) > records_before {
            self.handlers_persisted += 1;
        }
    }

    /// Publishes the batch's protocol counts and the leader this node believes in: once
    /// per batch, not per handler (a handler's worth of work is a few microseconds).
    fn publish_metrics(&mut self) {
        self.metrics
            .add_protocol_counters(&mut self.protocol_counts, &mut self.protocol_counters);
        // The log's own count of its writes, so that the metric counts every write,
        // wherever it was made.
        let writes = self.wal.as_ref().map_or(0, |w| w.writes);
        NodeMetrics::add(&self.metrics.wal_syncs, writes - self.writes_published);
        self.writes_published = writes;
        let handlers = std::mem::take(&mut self.handlers_persisted);
        NodeMetrics::add(&self.metrics.handlers_persisted, handlers);
        let leader = self
            .host
            .node()
            .and_then(|n| n.shard_leader())
            .map_or(crate::metrics::NO_LEADER, |l| u64::from(l.0));
        self.metrics.shard_leader.store(leader, Ordering::Relaxed);
    }

    fn apply(&mut self, action: NodeAction<N>) {
        match action {
            Action::Send { to, msg } if self.must_hold(to) => {
                self.held.push(HeldOut::Send { to, msg });
                self.commit_if_full();
            }
            Action::Send { to, msg } => self.send(to, msg),
            Action::ArmTimer {
                id,
                after_ns,
                timer,
                ..
            } => {
                let key = self
                    .timers
                    .insert((id, timer), Duration::from_nanos(after_ns));
                self.timer_keys.insert(id, key);
            }
            Action::DisarmTimer { id } => {
                if let Some(key) = self.timer_keys.remove(&id) {
                    self.timers.remove(&key);
                }
            }
            Action::Respond { request, response } if self.holding_since.is_some() => {
                self.held.push(HeldOut::Respond { request, response });
                self.commit_if_full();
            }
            Action::Respond { request, response } => self.respond(request, response),
            Action::Persist { record, checkpoint } => self.persist(&record, checkpoint),
            Action::Sync => self.hold_until_synced(),
            Action::Count { name, by } => *self.protocol_counts.entry(name).or_default() += by,
        }
    }

    fn send(&mut self, to: NodeId, msg: N::Msg) {
        NodeMetrics::add(&self.metrics.messages_sent, 1);
        let delivered = match &self.routes[to.index()] {
            Route::Own => {
                self.to_self.push_back(msg);
                true
            }
            Route::Direct(inbox) => inbox
                .try_send(Inbound::Message { from: self.id, msg })
                .is_ok(),
            Route::Link {
                queue,
                one_way_ns,
                jitter_mean_ns,
            } => {
                let jitter = if *jitter_mean_ns > 0.0 {
                    let u: f64 = self.delay_rng.gen_range(f64::EPSILON..1.0);
                    (-u.ln() * jitter_mean_ns) as u64
                } else {
                    0
                };
                let due = Instant::now() + Duration::from_nanos(one_way_ns + jitter);
                queue.try_send((due, msg)).is_ok()
            }
        };
        if !delivered {
            NodeMetrics::add(&self.metrics.messages_dropped, 1);
        }
    }

    fn respond(&mut self, request: RequestId, response: ClientResponse) {
        let Some((reply, arrived)) = self.pending.remove(&request) else {
            panic!("{} answered {request} twice or never received it", self.id);
        };
        if let ClientResponse::Outcome(outcome) = &response {
            let outcome = match outcome {
                Outcome::Committed { .. } => "committed",
                Outcome::Aborted { .. } => "aborted",
                Outcome::Unknown { .. } => "unknown",
            };
            self.metrics.observe_outcome(outcome, arrived.elapsed());
        }
        if !reply.send(response) {
            NodeMetrics::add(&self.metrics.responses_dropped, 1);
        }
    }

    fn persist(&mut self, record: &N::Record, checkpoint: bool) {
        let Some(wal) = self.wal.as_mut() else {
            return;
        };
        let before = wal.bytes_written;
        let result = if checkpoint {
            wal.checkpoint(record)
        } else {
            wal.append(record)
        };
        if let Err(e) = result {
            // A node that cannot keep its log must not go on acting as if it had.
            panic!("{}: durable log write failed: {e}", self.id);
        }
        NodeMetrics::add(&self.metrics.records_persisted, 1);
        NodeMetrics::add(&self.metrics.bytes_persisted, wal.bytes_written - before);
        self.unsynced_bytes += wal.bytes_written - before;
    }

    /// [`Action::Sync`]: what follows waits for the batch's sync (if records are unsynced).
    ///
    /// With or without `fsync`: without, the sync is one `write` into the OS's page cache,
    /// and one per batch instead of one per handler that wrote records is most of what
    /// durability costs the CPU (a batch's handlers run in microseconds, so holding their
    /// messages to its end costs a hop little latency).
    fn hold_until_synced(&mut self) {
        if self.holding_since.is_none() && self.wal.as_ref().is_some_and(|w| w.is_dirty()) {
            self.holding_since = Some(Instant::now());
        }
    }

    /// Whether a message to `to` must wait for the sync (to self it need not: it dies
    /// with the process, as the records would).
    fn must_hold(&self, to: NodeId) -> bool {
        self.holding_since.is_some() && !matches!(self.routes[to.index()], Route::Own)
    }

    /// Syncs early when the group holds too much or has waited too long.
    fn commit_if_full(&mut self) {
        let limits = self.group_limits;
        let full = self.held.len() >= limits.held_messages_max
            || self.unsynced_bytes >= limits.unsynced_bytes_max
            || self
                .holding_since
                .is_some_and(|t| t.elapsed() >= limits.hold_max);
        if full {
            self.commit_group();
        }
    }

    /// Writes (and with `fsync` forces) every record of the group once, then sends what
    /// it held, in order.
    fn commit_group(&mut self) {
        if let Some(wal) = self.wal.as_mut().filter(|w| w.is_dirty()) {
            if let Err(e) = wal.sync() {
                panic!("{}: durable log write failed: {e}", self.id);
            }
        }
        self.unsynced_bytes = 0;
        if self.holding_since.take().is_none() {
            return;
        }
        for out in std::mem::take(&mut self.held) {
            match out {
                HeldOut::Send { to, msg } => self.send(to, msg),
                HeldOut::Respond { request, response } => self.respond(request, response),
            }
        }
    }
}

#[cfg(test)]
mod tests;
