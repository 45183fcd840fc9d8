//! The driver core every driver shares (DESIGN §1): one node's life between its events.
//!
//! A [`NodeHost`] owns what a driver keeps *around* a protocol's [`Node`]: the live state
//! machine (none while crashed), its incarnation, its RNG and timer ids, the set of timers
//! still armed, and its open batch. A driver hands it one event at a time with the node's
//! local clock reading; the host builds the [`Context`], runs the handler, ends the batch
//! when due, checks the node's invariants (debug builds), and turns the handler's
//! [`Effect`]s into [`Action`]s: what only the driver can do (put a message on its
//! network, arm a timer on its clock, answer a client, write a record to its medium).
//!
//! The rules every driver must keep therefore live here, once:
//! * **Timers.** A cancelled timer never fires, nor does one armed by an earlier
//!   incarnation ([`NodeHost::take_timer`]); cancelling one that already fired does nothing.
//! * **Write-ahead.** A [`Action::Sync`] comes between a [`Action::Persist`] and the first
//!   send or response after it, and at the end of the event if records are still unsynced:
//!   no message leaves ahead of the state it depends on.
//! * **Batches.** [`Node::on_batch_end`] runs after every `batch_max` events, or when the
//!   driver calls [`NodeHost::end_batch`] (it has nothing more queued for the node).
//! * **Crash and restart.** [`NodeHost::crash`] drops the node's memory and its timers and
//!   bumps the incarnation; [`NodeHost::start`] installs a node the driver built from its
//!   durable records ([`MemoryLog`] keeps them for the in-memory drivers).
//!
//! The simulator, the runtime's node loop and the protocols' unit-test driver all wrap it;
//! they differ only in how they carry out actions (a virtual-time queue, tokio, a test queue).

use crate::ids::{NodeId, RequestId};
use crate::node::{Context, Ctx, Effect, Node, NodeRng, TimerId};
use crate::txn::ClientResponse;
use rustc_hash::FxHashSet;

/// What a driver carries out for its node, in order.
#[derive(Clone, Debug)]
pub enum Action<M, T, R> {
    /// Deliver `msg` to node `to`.
    Send { to: NodeId, msg: M },
    /// Arm a timer for `after_ns` of local time; when it expires, hand it back through
    /// [`NodeHost::take_timer`] with `incarnation` (a stale one is refused there).
    ArmTimer {
        id: TimerId,
        incarnation: u32,
        after_ns: u64,
        timer: T,
    },
    /// A live timer was cancelled: the driver may drop it from its queue (not required:
    /// [`NodeHost::take_timer`] refuses it anyway).
    DisarmTimer { id: TimerId },
    /// Answer client request `request`.
    Respond {
        request: RequestId,
        response: ClientResponse,
    },
    /// Write `record` to the node's durable log; a checkpoint replaces every earlier record.
    Persist { record: R, checkpoint: bool },
    /// Make every record written so far durable before carrying out what follows.
    Sync,
    /// Add `by` to the run-wide counter `name`.
    Count { name: &'static str, by: u64 },
}

/// The action type of node type `N`.
pub type NodeAction<N> = Action<<N as Node>::Msg, <N as Node>::Timer, <N as Node>::Record>;

/// What [`NodeHost::handle`] reports about the event it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The node is down: the event is lost, as it would be on a crashed machine.
    NodeDown,
    /// The handler ran and the batch ended with it.
    BatchEnded,
    /// The handler ran and the node's batch is still open: the driver must call
    /// [`NodeHost::end_batch`] once it has no more events queued for the node.
    BatchOpen,
}

/// A node's invariant check failed: a bug (see [`Node::check_invariants`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokenInvariant {
    pub node: NodeId,
    pub message: String,
}

impl std::fmt::Display for BrokenInvariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} broke an invariant: {}", self.node, self.message)
    }
}

/// One node and everything a driver keeps for it across events and crashes.
pub struct NodeHost<N: Node> {
    id: NodeId,
    node: Option<N>,
    incarnation: u32,
    rng: NodeRng,
    next_timer: u64,
    live_timers: FxHashSet<TimerId>,
    batch_max: u32,
    batch_open: u32,
    effects: Vec<Effect<N::Msg, N::Timer, N::Record>>,
    /// The true time of the next event, when the driver knows it (instrumentation only).
    true_ns: Option<u64>,
}

impl<N: Node> NodeHost<N> {
    /// A host for node `id`, down until [`NodeHost::start`]. `batch_max` events make a
    /// batch at most (1: every event is its own batch, as in the simulator by default).
    pub fn new(id: NodeId, rng: NodeRng, batch_max: u32) -> Self {
        NodeHost {
            id,
            node: None,
            incarnation: 0,
            rng,
            next_timer: 0,
            live_timers: FxHashSet::default(),
            batch_max: batch_max.max(1),
            batch_open: 0,
            effects: Vec::new(),
            true_ns: None,
        }
    }

    /// The simulator sets the true time of the event it is about to hand the node (read
    /// by [`Context::true_now_ns`], for counters only).
    pub fn set_true_ns(&mut self, true_ns: Option<u64>) {
        self.true_ns = true_ns;
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The live node, or None while it is down.
    pub fn node(&self) -> Option<&N> {
        self.node.as_ref()
    }

    pub fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// How many times the node has crashed (0 for the first run).
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Installs `node` (built by the driver from the durable records) with a fresh RNG. The
    /// driver then runs its `on_start` through [`NodeHost::handle`].
    pub fn start(&mut self, node: N, rng: NodeRng) {
        assert!(self.node.is_none(), "{} started twice", self.id);
        self.node = Some(node);
        self.rng = rng;
        self.live_timers.clear();
        self.batch_open = 0;
    }

    /// The node loses its memory, its timers and its open batch. Returns false if it was
    /// already down.
    pub fn crash(&mut self) -> bool {
        if self.node.take().is_none() {
            return false;
        }
        self.incarnation += 1;
        self.live_timers.clear();
        self.batch_open = 0;
        true
    }

    /// Whether timer `id` armed by `incarnation` is still armed (neither fired, cancelled,
    /// nor lost in a crash).
    pub fn timer_is_live(&self, incarnation: u32, id: TimerId) -> bool {
        incarnation == self.incarnation && self.live_timers.contains(&id)
    }

    /// A timer expired: true (and the timer is spent) if it is live, so its handler runs.
    pub fn take_timer(&mut self, incarnation: u32, id: TimerId) -> bool {
        incarnation == self.incarnation && self.live_timers.remove(&id)
    }

    /// Runs `handler` on the node at local time `now_ns` and appends the resulting actions
    /// to `out`. Does nothing if the node is down.
    pub fn handle(
        &mut self,
        now_ns: u64,
        handler: impl FnOnce(&mut N, &mut Ctx<'_, N>),
        out: &mut Vec<NodeAction<N>>,
    ) -> Result<Handled, BrokenInvariant> {
        if self.node.is_none() {
            return Ok(Handled::NodeDown);
        }
        let batch_ends = self.batch_open + 1 >= self.batch_max;
        self.batch_open = if batch_ends { 0 } else { self.batch_open + 1 };
        self.run(now_ns, out, |node, ctx| {
            handler(node, ctx);
            if batch_ends {
                node.on_batch_end(ctx);
            }
        })?;
        Ok(if batch_ends {
            Handled::BatchEnded
        } else {
            Handled::BatchOpen
        })
    }

    /// Ends the node's open batch, if any (runs [`Node::on_batch_end`]).
    pub fn end_batch(
        &mut self,
        now_ns: u64,
        out: &mut Vec<NodeAction<N>>,
    ) -> Result<(), BrokenInvariant> {
        if self.node.is_none() || self.batch_open == 0 {
            return Ok(());
        }
        self.batch_open = 0;
        self.run(now_ns, out, |node, ctx| node.on_batch_end(ctx))
    }

    /// Runs `f` on the live node with a fresh context, then finishes the event.
    fn run(
        &mut self,
        now_ns: u64,
        out: &mut Vec<NodeAction<N>>,
        f: impl FnOnce(&mut N, &mut Ctx<'_, N>),
    ) -> Result<(), BrokenInvariant> {
        let node = self
            .node
            .as_mut()
            .expect("the caller checked the node is up");
        let mut effects = std::mem::take(&mut self.effects);
        let mut ctx = Context::new(
            self.id,
            now_ns,
            &mut self.rng,
            &mut effects,
            &mut self.next_timer,
        )
        .with_true_ns(self.true_ns);
        f(node, &mut ctx);
        self.finish_event(effects, out)
    }

    /// Whether a batch is open (events handled since the last `on_batch_end`).
    pub fn batch_is_open(&self) -> bool {
        self.batch_open > 0
    }

    /// Checks the node's invariants (debug builds), then turns `effects` into actions.
    fn finish_event(
        &mut self,
        mut effects: Vec<Effect<N::Msg, N::Timer, N::Record>>,
        out: &mut Vec<NodeAction<N>>,
    ) -> Result<(), BrokenInvariant> {
        #[cfg(debug_assertions)]
        if let Some(node) = &self.node {
            node.check_invariants().map_err(|message| BrokenInvariant {
                node: self.id,
                message,
            })?;
        }
        let mut unsynced = false;
        for effect in effects.drain(..) {
            self.translate(effect, &mut unsynced, out);
        }
        if unsynced {
            out.push(Action::Sync);
        }
        self.effects = effects;
        Ok(())
    }

    fn translate(
        &mut self,
        effect: Effect<N::Msg, N::Timer, N::Record>,
        unsynced: &mut bool,
        out: &mut Vec<NodeAction<N>>,
    ) {
        let leaves = matches!(effect, Effect::Send { .. } | Effect::Respond { .. });
        if leaves && std::mem::take(unsynced) {
            out.push(Action::Sync);
        }
        out.push(match effect {
            Effect::Send { to, msg } => Action::Send { to, msg },
            Effect::SetTimer {
                id,
                after_ns,
                timer,
            } => {
                let fresh = self.live_timers.insert(id);
                assert!(fresh, "{} armed timer {id:?} twice", self.id);
                Action::ArmTimer {
                    id,
                    incarnation: self.incarnation,
                    after_ns,
                    timer,
                }
            }
            Effect::CancelTimer { id } => {
                if !self.live_timers.remove(&id) {
                    return; // already fired or cancelled: nothing to do
                }
                Action::DisarmTimer { id }
            }
            Effect::Respond { request, response } => Action::Respond { request, response },
            Effect::Persist { record } => {
                *unsynced = true;
                Action::Persist {
                    record,
                    checkpoint: false,
                }
            }
            Effect::Checkpoint { record } => {
                *unsynced = true;
                Action::Persist {
                    record,
                    checkpoint: true,
                }
            }
            Effect::Count { name, by } => Action::Count { name, by },
        });
    }
}

/// A durable log kept in memory (the simulator's and the unit tests' disk): records in
/// order, a checkpoint replacing everything before it.
///
/// With storage faults ([`MemoryLog::with_storage_faults`]) it also remembers what was
/// written since the last [`MemoryLog::sync`], so that [`MemoryLog::crash`] can lose a
/// suffix of it — a checkpoint among the lost writes then did not replace anything.
#[derive(Clone, Debug)]
pub struct MemoryLog<R> {
    records: Vec<R>,
    faults: bool,
    /// Writes since the last sync, in order (kept only with storage faults).
    unsynced: Vec<(R, bool)>,
    /// The records as of the last sync, once an unsynced checkpoint replaced them.
    synced_base: Option<Vec<R>>,
}

impl<R> Default for MemoryLog<R> {
    fn default() -> Self {
        MemoryLog {
            records: Vec::new(),
            faults: false,
            unsynced: Vec::new(),
            synced_base: None,
        }
    }
}

impl<R: Clone> MemoryLog<R> {
    /// A log whose unsynced writes a crash may lose.
    pub fn with_storage_faults() -> Self {
        MemoryLog {
            faults: true,
            ..MemoryLog::default()
        }
    }

    pub fn write(&mut self, record: R, checkpoint: bool) {
        if self.faults {
            if checkpoint && self.synced_base.is_none() {
                let synced = self.records.len() - self.unsynced.len();
                self.synced_base = Some(self.records[..synced].to_vec());
            }
            self.unsynced.push((record.clone(), checkpoint));
        }
        if checkpoint {
            self.records.clear();
        }
        self.records.push(record);
    }

    /// Every write so far is durable.
    pub fn sync(&mut self) {
        self.unsynced.clear();
        self.synced_base = None;
    }

    /// The node crashed: of the writes since the last sync, only the first
    /// `keep(count)` survive (clamped to the count). Returns how many were lost.
    pub fn crash(&mut self, keep: impl FnOnce(usize) -> usize) -> usize {
        let count = self.unsynced.len();
        if count == 0 {
            return 0;
        }
        let kept = keep(count).min(count);
        let unsynced = std::mem::take(&mut self.unsynced);
        if kept < count {
            self.records = match self.synced_base.take() {
                Some(base) => base,
                None => {
                    let synced = self.records.len() - count;
                    self.records.truncate(synced);
                    std::mem::take(&mut self.records)
                }
            };
            for (record, checkpoint) in unsynced.into_iter().take(kept) {
                if checkpoint {
                    self.records.clear();
                }
                self.records.push(record);
            }
        }
        self.synced_base = None;
        count - kept
    }
}

impl<R> MemoryLog<R> {
    /// What a restarted node is built from.
    pub fn records(&self) -> &[R] {
        &self.records
    }
}

/// Read as the slice of its records (`len`, `iter`, indexing).
impl<R> std::ops::Deref for MemoryLog<R> {
    type Target = [R];
    fn deref(&self) -> &[R] {
        &self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::ClientRequest;
    use rand::SeedableRng;

    /// A node that does what its messages say, to drive the host through its rules.
    #[derive(Default)]
    struct Scripted {
        batch_ends: u32,
        broken: bool,
    }

    #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
    enum Do {
        Arm(u64),
        Cancel(u64),
        PersistThenSend,
        Break,
    }

    impl Node for Scripted {
        type Msg = Do;
        type Timer = ();
        type Record = u32;
        fn on_start(&mut self, _ctx: &mut Ctx<'_, Self>) {}
        fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, _from: NodeId, msg: Do) {
            match msg {
                Do::Arm(after_ns) => {
                    ctx.set_timer(after_ns, ());
                }
                Do::Cancel(id) => ctx.cancel_timer(TimerId(id)),
                Do::PersistThenSend => {
                    ctx.count("sent", 1);
                    ctx.persist(7);
                    ctx.send(NodeId(1), Do::Break);
                    ctx.checkpoint(8);
                }
                Do::Break => self.broken = true,
            }
        }
        fn on_timer(&mut self, _ctx: &mut Ctx<'_, Self>, _timer: ()) {}
        fn on_client_request(&mut self, _: &mut Ctx<'_, Self>, _: RequestId, _: ClientRequest) {}
        fn on_batch_end(&mut self, _ctx: &mut Ctx<'_, Self>) {
            self.batch_ends += 1;
        }
        fn check_invariants(&self) -> Result<(), String> {
            if self.broken {
                Err("told to break".into())
            } else {
                Ok(())
            }
        }
    }

    fn host(batch_max: u32) -> NodeHost<Scripted> {
        let mut host = NodeHost::new(NodeId(0), NodeRng::seed_from_u64(1), batch_max);
        host.start(Scripted::default(), NodeRng::seed_from_u64(2));
        host
    }

    fn deliver(host: &mut NodeHost<Scripted>, msg: Do) -> (Handled, Vec<NodeAction<Scripted>>) {
        let mut out = Vec::new();
        let handled = host
            .handle(0, |n, ctx| n.on_message(ctx, NodeId(1), msg), &mut out)
            .expect("no invariant broken");
        (handled, out)
    }

    #[test]
    fn cancelled_and_stale_timers_never_fire() {
        let mut host = host(1);
        let (_, out) = deliver(&mut host, Do::Arm(5));
        let Action::ArmTimer {
            id, incarnation, ..
        } = out[0]
        else {
            panic!("expected an armed timer, got {out:?}");
        };
        let (_, out) = deliver(&mut host, Do::Cancel(id.0));
        assert!(matches!(out[..], [Action::DisarmTimer { .. }]));
        assert!(!host.take_timer(incarnation, id), "a cancelled timer fired");
        // Cancelling again is a no-op, not a second disarm.
        let (_, out) = deliver(&mut host, Do::Cancel(id.0));
        assert!(out.is_empty());

        let (_, out) = deliver(&mut host, Do::Arm(5));
        let Action::ArmTimer {
            id, incarnation, ..
        } = out[0]
        else {
            panic!("expected an armed timer");
        };
        assert!(host.crash());
        host.start(Scripted::default(), NodeRng::seed_from_u64(3));
        assert!(
            !host.take_timer(incarnation, id),
            "a timer outlived a crash"
        );
        assert_eq!(host.incarnation(), 1);
    }

    #[test]
    fn records_are_synced_before_anything_leaves_and_at_the_end() {
        let mut host = host(1);
        let (_, out) = deliver(&mut host, Do::PersistThenSend);
        let shape: Vec<&str> = out
            .iter()
            .map(|a| match a {
                Action::Count { .. } => "count",
                Action::Persist {
                    checkpoint: false, ..
                } => "persist",
                Action::Persist {
                    checkpoint: true, ..
                } => "checkpoint",
                Action::Sync => "sync",
                Action::Send { .. } => "send",
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            shape,
            ["count", "persist", "sync", "send", "checkpoint", "sync"]
        );
    }

    #[test]
    fn batches_end_every_batch_max_events_or_when_the_driver_says() {
        let mut host = host(3);
        assert_eq!(deliver(&mut host, Do::Cancel(99)).0, Handled::BatchOpen);
        assert_eq!(deliver(&mut host, Do::Cancel(99)).0, Handled::BatchOpen);
        assert_eq!(deliver(&mut host, Do::Cancel(99)).0, Handled::BatchEnded);
        assert_eq!(host.node().unwrap().batch_ends, 1);
        assert_eq!(deliver(&mut host, Do::Cancel(99)).0, Handled::BatchOpen);
        host.end_batch(0, &mut Vec::new()).unwrap();
        host.end_batch(0, &mut Vec::new()).unwrap(); // nothing open: no second call
        assert_eq!(host.node().unwrap().batch_ends, 2);
    }

    #[test]
    fn a_down_node_loses_its_events_and_a_broken_invariant_is_reported() {
        let mut host = host(1);
        assert!(host.crash());
        assert!(!host.crash());
        assert_eq!(deliver(&mut host, Do::Arm(1)).0, Handled::NodeDown);
        host.start(Scripted::default(), NodeRng::seed_from_u64(4));
        let mut out = Vec::new();
        let broken = host.handle(
            0,
            |n, ctx| n.on_message(ctx, NodeId(1), Do::Break),
            &mut out,
        );
        if cfg!(debug_assertions) {
            assert_eq!(broken.unwrap_err().message, "told to break");
        }
    }

    #[test]
    fn a_crash_loses_only_unsynced_writes_and_an_unsynced_checkpoint_replaces_nothing() {
        let mut log = MemoryLog::with_storage_faults();
        log.write(1, false);
        log.write(2, false);
        log.sync();
        log.write(3, true);
        log.write(4, false);
        assert_eq!(log.records(), &[3, 4]);
        assert_eq!(log.crash(|n| n - 1), 1);
        assert_eq!(log.records(), &[3]);
        log.write(5, false);
        assert_eq!(log.crash(|_| 0), 1);
        assert_eq!(log.records(), &[3], "the kept checkpoint became durable");

        let mut log = MemoryLog::with_storage_faults();
        log.write(1, false);
        log.sync();
        log.write(2, true);
        log.write(3, false);
        assert_eq!(log.crash(|_| 0), 2);
        assert_eq!(log.records(), &[1], "the lost checkpoint replaced nothing");
        log.write(4, false);
        log.sync();
        assert_eq!(log.crash(|_| 0), 0);
        assert_eq!(log.records(), &[1, 4]);
    }

    #[test]
    fn a_checkpoint_replaces_the_log() {
        let mut log = MemoryLog::default();
        log.write(1, false);
        log.write(2, false);
        log.write(3, true);
        log.write(4, false);
        assert_eq!(log.records(), &[3, 4]);
    }
}
