//! Tiga's server (§3.2–§3.8; Algorithms 1–2): priority queue, conflict detection,
//! timestamp update, optimistic execution, timestamp agreement, log synchronization.
//! The failure half (§4; Algorithms 5–6: view change, rejoin, recovery coordinator) is in
//! [`view_change`].

mod durable;
mod gc;
mod truncate;
mod view_change;

pub use truncate::{REJOINS_RESTORED, RESTORED, TRUNCATED};

use super::options::{Options, SlowReplies};
use super::queue::{KeyMaps, PriorityQueue};
use super::view::{Status, View};
use super::wire::{
    send_grouped, FastReply, Msg, Notice, Record, ShardResult, Timer, TxnBody,
    FAST_REPLIES_BATCH_MAX, NOTES_BATCH_MAX, SUBMITS_BATCH_MAX,
};
use super::TigaNode;
use crate::kit::clock_gate::{ClockGate, WakeTimer};
use meridian_core::node::Ctx;
use meridian_core::txn::{execute_piece, AbortReason, Key, KeyList, PieceResult, Procedures};
use meridian_core::{Cluster, NodeId, NodeRole, ShardId, Timestamp, TxnId};
use meridian_store::{
    entry_hash, footprint, key_state_hash, Hash160, LogPayload, MvStore, OrderedLog,
};
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Counters of a leader's time per transaction (µs, summed; divide by [`SEALS`] or
/// [`RELEASES`]): from its timestamp's expiry to its seal (waiting behind conflicting
/// transactions ahead in the queue), and from its seal to its release (agreement and,
/// pipelined, the release of conflicting predecessors).
pub const SEAL_WAIT_US: &str = "tiga.leader_seal_wait_us";
pub const SEALED_HOLD_US: &str = "tiga.leader_sealed_hold_us";
pub const SEALS: &str = "tiga.leader_seals";
pub const RELEASES: &str = "tiga.leader_releases";
/// Executions a rollback cascade repeated (`reexecute_behind`).
pub const CASCADED: &str = "tiga.leader_cascaded_reexecutions";

/// Bound on a follower's outstanding slow-reply inquiries (Appendix E).
const SLOW_WANTED_MAX: usize = 1 << 16;
/// Most release-stream entries one `LogSync` carries (a flush or a resend to a lagging
/// follower sends several messages beyond that).
const LOG_SYNC_BATCH_MAX: u64 = 512;

/// A log entry's payload: the keys of Appendix D's per-key hash.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Footprint(pub KeyList);

impl LogPayload for Footprint {
    fn hash_keys(&self) -> Cow<'_, [Key]> {
        Cow::Borrowed(&self.0)
    }
}

/// Where a transaction is on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// In the priority queue, waiting for its timestamp and for conflicting predecessors.
    Queued,
    /// Follower only: arrived too late to be accepted; waits for the leader's log sync.
    Held,
    /// Leader only: at the head of the queue, recorded in rMap/wMap, (detective: executed),
    /// its timestamp notified to the other leaders; waiting for agreement. Stays in `pq`.
    Sealed,
    /// Out of the queue and in the log (leader: agreed; follower: fast release).
    Released,
    /// Follower only: in the log at the leader's timestamp (sync-point passed it).
    Synced,
}

#[derive(Debug)]
struct Entry {
    body: TxnBody,
    reads: KeyList,
    writes: KeyList,
    state: State,
    /// Leader: the current execution's results, if executed.
    result: Option<ShardResult>,
    /// Leader: this shard's abort vote from the current execution (kept after GC drops
    /// `result`, to answer late notifications).
    own_abort: bool,
    executions: u32,
    /// Leader: the execution (count) its last fast reply carried, 0 if none.
    replied: u32,
    /// Leader: when it was last sealed (local clock).
    sealed_ns: u64,
    /// Shared with the reply sent (and, for a leader, the coordinator's copy); GC drops it.
    last_fast: Option<Arc<FastReply>>,
    /// Durable server: the snapshot epoch (`Server::durable_epoch`) in which a
    /// `Record::Held` carried this body, 0 if none did: its `Synced` record then need
    /// not carry the body again.
    held_epoch: u64,
    notified_ns: u64,
    /// When this server first got it (local clock): a leader acts as recovery coordinator
    /// for multi-shard transactions stuck since long ago.
    arrived_ns: u64,
    /// When it was released (leader) or synced (follower), else when it arrived: GC slims
    /// it `gc_lag` later.
    released_ns: u64,
}

/// The keys `shard`'s pieces of `body` read and write, sorted and deduplicated.
pub(crate) fn keys_on(body: &TxnBody, shard: ShardId) -> (KeyList, KeyList) {
    let mut reads = KeyList::new();
    let mut writes = KeyList::new();
    for (_, p) in body.pieces_on(shard) {
        p.for_each_key(|key, write| {
            if write {
                writes.push(key.clone());
            } else {
                reads.push(key.clone());
            }
        });
    }
    for v in [&mut reads, &mut writes] {
        v.sort_unstable();
        v.dedup();
    }
    (reads, writes)
}

impl Entry {
    fn new(body: TxnBody, shard: ShardId, now_ns: u64) -> Entry {
        let (reads, writes) = keys_on(&body, shard);
        Entry {
            body,
            reads,
            writes,
            state: State::Queued,
            result: None,
            own_abort: false,
            executions: 0,
            replied: 0,
            sealed_ns: 0,
            last_fast: None,
            held_epoch: 0,
            notified_ns: 0,
            arrived_ns: now_ns,
            released_ns: now_ns,
        }
    }
}

/// Another leader's (or this leader's own) latest timestamp notification for a
/// transaction (§3.5/§3.6) with the abort vote a sealed one carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Note {
    ts: Timestamp,
    sealed: bool,
    abort: bool,
}

/// The notes on one transaction, by shard: at most one per involved shard, a handful, so a
/// small vector (one allocation) rather than a tree.
#[derive(Debug, Default)]
struct ShardNotes(Vec<(ShardId, Note)>);

impl ShardNotes {
    fn get(&self, shard: &ShardId) -> Option<&Note> {
        self.0.iter().find(|(s, _)| s == shard).map(|(_, n)| n)
    }

    /// The note of `shard`, inserted as `note` if there is none.
    fn slot(&mut self, shard: ShardId, note: Note) -> &mut Note {
        let at = match self.0.iter().position(|(s, _)| *s == shard) {
            Some(at) => at,
            None => {
                self.0.push((shard, note));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    fn insert(&mut self, shard: ShardId, note: Note) {
        *self.slot(shard, note) = note;
    }

    fn values(&self) -> impl Iterator<Item = &Note> + '_ {
        self.0.iter().map(|(_, n)| n)
    }
}

/// A replica of one shard: its shard's leader or a follower.
#[derive(Debug)]
pub struct Server {
    id: NodeId,
    shard: ShardId,
    replica: u32,
    cluster: Arc<Cluster>,
    // ---- view (§4): everything below `view` is derived from it ----
    view: View,
    status: Status,
    /// The last g-view in which this server was NORMAL (Algorithm 5 `last-normal-view`).
    last_normal_view: u64,
    leader: NodeId,
    is_leader: bool,
    /// The leader of every shard in this view.
    leaders: Vec<NodeId>,
    followers: Vec<NodeId>,
    f: usize,
    preventive: bool,
    opts: Options,
    procedures: Arc<Procedures>,
    txns: FxHashMap<TxnId, Entry>,
    pq: PriorityQueue,
    maps: KeyMaps,
    log: OrderedLog<Footprint>,
    /// Per key, the XOR of [`decision_mark`]s of the decided entries on it whose decision
    /// matters ([`TxnBody::decision_matters`]); part of every fast-reply hash.
    marks: FxHashMap<Key, Hash160>,
    store: MvStore,
    last_assigned_ns: u64,
    /// The one tracked wake-up: its instant and timer (cancelled when an earlier one is
    /// needed, so a server has at most one pending): the kit's [`WakeTimer`].
    wake: WakeTimer,
    // ---- leader ----
    /// Timestamp notifications per transaction: the largest per shard, whether that
    /// leader is sealed at it, and (sealed) its abort vote there.
    notes: FxHashMap<TxnId, ShardNotes>,
    /// Notifications to other leaders (to, g-view, notice), sent at the end of the batch.
    notices: Vec<(NodeId, u64, Notice)>,
    /// Fast replies to coordinators, sent at the end of the batch.
    replies_out: Vec<(NodeId, Arc<FastReply>)>,
    sealed: BTreeSet<TxnId>,
    /// Coordination-free mode (§6): agreed transactions waiting for the clock to pass
    /// T.t + ε, by that time.
    deferred: ClockGate<TxnId>,
    /// The release stream: the log entries in the order this leader released them (from
    /// the latest cut on).
    stream: truncate::PosList,
    /// Release-stream positions below this one have been multicast to the followers; the
    /// rest go out together at the end of the batch of events that released them
    /// (`on_batch_end`).
    sync_sent: u64,
    follower_sync: FxHashMap<NodeId, u64>,
    follower_resent_ns: FxHashMap<NodeId, u64>,
    commit_point: u64,
    commit_sent: u64,
    // ---- follower ----
    sync_point: u64,
    /// Log-sync entries not applied yet: position → (id, leader's timestamp, aborted).
    sync_buffer: BTreeMap<u64, (TxnId, Timestamp, bool)>,
    synced: truncate::PosList,
    executed_upto: u64,
    reported: u64,
    reported_ns: u64,
    fetching: FxHashSet<TxnId>,
    /// `slow_replies=pull` (Appendix E): entries coordinators asked a slow reply for that
    /// are not synced yet; answered when they are (at most [`SLOW_WANTED_MAX`], then
    /// cleared; the coordinator asks again every `inquiry_ms`).
    slow_wanted: FxHashSet<TxnId>,
    // ---- §4 ----
    heartbeat_ns: u64,
    inquirer: super::view::Inquirer,
    view_change: view_change::ViewChangeState,
    gc: gc::GcState,
    trunc: truncate::TruncState,
    // ---- durability ----
    /// A durable server restarted: its log list from its records, which it reports in
    /// the next view change (until a new log is installed).
    recovered: Option<durable::Recovered>,
    /// When the last durable snapshot was written (local clock).
    durable_snapshot_ns: u64,
    /// Counts durable snapshots, from 1: records written since the last one are the
    /// durable log's tail (see `Entry::held_epoch`).
    durable_epoch: u64,
    /// Records written since the last durable snapshot, and the entries that snapshot
    /// held (checkpointed versions plus log-list entries): a snapshot rewrites the whole
    /// store, so one is due only once the records since outnumber it (see
    /// `snapshot_at_cut`).
    durable_records_since_snapshot: u64,
    durable_snapshot_entries: u64,
}

impl Server {
    /// Server `id` built from its durable `records`: none, a fresh server in view 0; a
    /// diskless one that finds its boot record starts RECOVERING, with no state, until a
    /// state transfer (Algorithm 6); a durable one starts RESTARTED with the log list and
    /// view its records hold (see `server/durable.rs`).
    pub fn new(
        id: NodeId,
        cluster: Arc<Cluster>,
        opts: Options,
        procedures: Arc<Procedures>,
        records: &[Record],
    ) -> Server {
        let NodeRole::Replica { shard, replica } = cluster.node(id).role else {
            panic!("node {id} is not a replica");
        };
        let restarted = durable::restarted(records);
        let recovered = (restarted && opts.durable)
            .then(|| durable::Recovered::from_records(records, View::initial(&cluster, &opts)));
        let view = recovered
            .as_ref()
            .map_or_else(|| View::initial(&cluster, &opts), |r| r.view.clone());
        let mut server = Server {
            id,
            shard,
            replica: replica.0,
            f: cluster.f(shard),
            status: match (&recovered, restarted) {
                (Some(_), _) => Status::Restarted,
                (None, true) => Status::Recovering,
                (None, false) => Status::Normal,
            },
            last_normal_view: recovered.as_ref().map_or(0, |r| r.last_normal_view),
            leader: id,
            is_leader: false,
            leaders: Vec::new(),
            followers: Vec::new(),
            preventive: view.preventive,
            view,
            cluster,
            opts,
            procedures,
            txns: FxHashMap::default(),
            pq: PriorityQueue::default(),
            maps: KeyMaps::default(),
            log: OrderedLog::new(),
            marks: FxHashMap::default(),
            store: MvStore::new(),
            last_assigned_ns: 0,
            wake: WakeTimer::default(),
            notes: FxHashMap::default(),
            notices: Vec::new(),
            replies_out: Vec::new(),
            sealed: BTreeSet::new(),
            deferred: ClockGate::default(),
            stream: Default::default(),
            sync_sent: 0,
            follower_sync: FxHashMap::default(),
            follower_resent_ns: FxHashMap::default(),
            commit_point: 0,
            commit_sent: 0,
            sync_point: 0,
            sync_buffer: BTreeMap::new(),
            synced: Default::default(),
            executed_upto: 0,
            reported: 0,
            reported_ns: 0,
            fetching: FxHashSet::default(),
            slow_wanted: FxHashSet::default(),
            heartbeat_ns: 0,
            inquirer: Default::default(),
            view_change: Default::default(),
            gc: Default::default(),
            trunc: Default::default(),
            recovered,
            durable_snapshot_ns: 0,
            durable_epoch: 1,
            durable_records_since_snapshot: 0,
            durable_snapshot_entries: 0,
        };
        server.adopt_view(server.view.clone());
        server
    }

    /// The leader of this server's shard in the view it follows.
    pub fn leader(&self) -> NodeId {
        self.leader
    }

    /// Takes `view`'s leaders and approach (no state changes beyond that).
    fn adopt_view(&mut self, view: View) {
        self.leaders = view.leaders(&self.cluster);
        self.leader = self.leaders[self.shard.index()];
        self.is_leader = self.leader == self.id;
        self.followers = self
            .cluster
            .replicas(self.shard)
            .iter()
            .copied()
            .filter(|&r| r != self.leader)
            .collect();
        self.preventive = view.preventive;
        self.view = view;
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        ctx.persist(Record::ServerStarted);
        ctx.set_timer(self.opts.tick_ns, Timer::Tick);
        if matches!(self.status, Status::Recovering | Status::Restarted) {
            self.inquire(ctx);
        }
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, TigaNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Probe {
                sent_ns,
                finished_below,
            } => {
                self.gc.note_finished(from, finished_below);
                ctx.send(
                    from,
                    Msg::ProbeReply {
                        sent_ns,
                        server_ns: ctx.now_ns(),
                    },
                )
            }
            Msg::NewView(view) => self.on_new_view(ctx, view),
            Msg::ViewChangeReport(report) => self.on_report(ctx, from, *report),
            Msg::Verify {
                g_view,
                shard,
                round,
                entries,
                agreed,
                answer,
            } => self.on_verify(ctx, from, (g_view, shard, round, answer), (entries, agreed)),
            Msg::StartView {
                g_view,
                checkpoint,
                log,
            } => self.on_start_view(ctx, from, g_view, (*checkpoint, log)),
            Msg::StateTransferReq { g_view } => self.on_state_transfer_req(ctx, from, g_view),
            Msg::StateTransfer {
                g_view,
                checkpoint,
                hashes,
                log,
                pending,
                commit_point,
            } => {
                let state = (*checkpoint, *hashes, log, pending);
                self.on_state_transfer(ctx, from, g_view, state, commit_point)
            }
            msg if self.status == Status::Normal => self.on_normal_message(ctx, from, msg),
            _ => {}
        }
    }

    /// The messages of normal processing (§3), accepted in NORMAL status only and, between
    /// servers and from servers, only in this server's g-view (§4).
    fn on_normal_message(&mut self, ctx: &mut Ctx<'_, TigaNode>, from: NodeId, msg: Msg) {
        if let Some(g_view) = msg.g_view() {
            if g_view != self.view.g_view {
                if g_view > self.view.g_view {
                    self.inquire(ctx);
                }
                return;
            }
        }
        match msg {
            Msg::Submit(body) => self.on_submit(ctx, *body),
            Msg::Submits(bodies) if bodies.len() <= SUBMITS_BATCH_MAX => {
                for body in bodies {
                    self.on_submit(ctx, body);
                }
            }
            Msg::Notify {
                txn,
                shard,
                ts,
                sealed,
                echo,
                abort,
                ..
            } if self.is_leader => {
                let notice = Notice {
                    txn,
                    ts,
                    sealed,
                    echo,
                    abort,
                };
                self.on_notify(ctx, from, shard, notice)
            }
            Msg::Notes { shard, notes, .. } if self.is_leader && notes.len() <= NOTES_BATCH_MAX => {
                for notice in notes {
                    self.on_notify(ctx, from, shard, notice);
                }
            }
            Msg::LogSync {
                from: pos,
                entries,
                aborted,
                commit_point,
                gc_floor,
                cut,
                ..
            } if !self.is_leader && from == self.leader => {
                // Release fast first what the clock already allows: a wake-up that a real
                // timer delivers late must not lose the race against the leader's sync,
                // which would leave the coordinator without this replica's fast reply.
                self.process(ctx);
                self.gc.leader_floor = self.gc.leader_floor.max(gc_floor);
                self.trunc.announced = self.trunc.announced.max(cut);
                for (i, (id, ts)) in entries.into_iter().enumerate() {
                    let p = pos + i as u64;
                    if p >= self.sync_point {
                        self.sync_buffer.insert(p, (id, ts, aborted.contains(&id)));
                    }
                }
                self.commit_point = self.commit_point.max(commit_point);
                self.apply_sync(ctx);
            }
            Msg::SyncReport { sync_point, .. } if self.is_leader => {
                let known = self.follower_sync.entry(from).or_insert(0);
                *known = (*known).max(sync_point.min(self.stream.end()));
                self.advance_commit_point();
            }
            Msg::Fetch { txn, .. } if self.is_leader => {
                if let Some(e) = self.txns.get(&txn) {
                    let mut body = e.body.clone();
                    body.ts = self.log.ts_of(txn).unwrap_or(body.ts);
                    ctx.send(from, Msg::FetchReply(Box::new(body)));
                }
            }
            Msg::SlowInquiry { shard, txns } if !self.is_leader && shard == self.shard => {
                self.on_slow_inquiry(ctx, txns);
            }
            Msg::Floor { shard, floor, .. } if self.is_leader => self.on_floor(shard, floor),
            Msg::FetchReply(body) if !self.is_leader && from == self.leader => {
                self.fetching.remove(&body.id);
                if !self.txns.contains_key(&body.id) {
                    let mut e = Entry::new(*body, self.shard, ctx.now_ns());
                    e.state = State::Held;
                    self.txns.insert(e.body.id, e);
                }
                self.apply_sync(ctx);
            }
            _ => {}
        }
        self.process(ctx);
    }

    /// The end of a batch of events: one log sync per follower for everything the batch
    /// released.
    pub fn on_batch_end(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        self.flush_log_sync(ctx);
        self.flush_notices(ctx);
        self.flush_fast_replies(ctx);
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, TigaNode>, timer: Timer) {
        match timer {
            Timer::Wake { at_ns } => {
                self.wake.fired(at_ns);
                self.release_deferred(ctx);
                self.process(ctx);
            }
            Timer::Tick => {
                self.heartbeat(ctx);
                match self.status {
                    Status::Normal => self.tick(ctx),
                    Status::ViewChange | Status::Recovering | Status::Restarted => {
                        self.tick_view_change(ctx)
                    }
                }
                ctx.set_timer(self.opts.tick_ns, Timer::Tick);
            }
            _ => {}
        }
    }

    // ---- arrival: conflict detection and timestamp update (§3.2, Algorithm 2 lines 1–6) --

    fn on_submit(&mut self, ctx: &mut Ctx<'_, TigaNode>, body: TxnBody) {
        if !body.involves(self.shard) || body.pieces_on(self.shard).next().is_none() {
            return;
        }
        if let Some(e) = self.txns.get(&body.id) {
            // A retransmission: repeat what we said.
            if let Some(reply) = &e.last_fast {
                ctx.send(body.id.coordinator, Msg::FastReply(reply.clone()));
            }
            if e.state == State::Synced {
                let ts = self.log.ts_of(body.id).unwrap_or(body.ts);
                self.send_slow(ctx, body.id, ts);
            }
            return;
        }
        if self.trunc.is_truncated(body.id) {
            // A late retransmission of a truncated transaction: its coordinator is done.
            return;
        }
        let mut e = Entry::new(body, self.shard, ctx.now_ns());
        let id = e.body.id;
        if let Some(floor) = self.arrival_floor(&e) {
            if self.is_leader {
                // Only leaders update T.t (line 5): the local clock, kept above every
                // released conflicting timestamp even if the clock stepped back.
                let t = ctx
                    .now_ns()
                    .max(floor.time_ns + 1)
                    .max(self.last_assigned_ns + 1);
                self.last_assigned_ns = t;
                e.body.ts = Timestamp::new(t, self.id.0);
            } else {
                e.state = State::Held;
                self.txns.insert(id, e);
                return;
            }
        }
        if self.is_leader {
            // Another leader's note is a lower bound on the agreed timestamp.
            if let Some(notes) = self.notes.get(&id) {
                let max = notes.values().map(|n| n.ts).max().expect("non-empty");
                e.body.ts = e.body.ts.max(max);
            }
        }
        self.pq.insert(e.body.ts, id, &e.reads, &e.writes);
        self.txns.insert(id, e);
        if self.is_leader {
            self.note_own(ctx, id, false);
        }
    }

    /// Records this leader's timestamp for `id` and notifies the other involved leaders;
    /// a sealed notification carries this shard's abort vote (sealed implies executed).
    fn note_own(&mut self, ctx: &mut Ctx<'_, TigaNode>, id: TxnId, sealed: bool) {
        let e = self.txns.get_mut(&id).expect("present");
        let ts = e.body.ts;
        let abort = sealed && e.own_abort;
        debug_assert!(
            !sealed || e.result.is_some(),
            "a sealed leader has executed"
        );
        e.notified_ns = ctx.now_ns();
        self.notes
            .entry(id)
            .or_default()
            .insert(self.shard, Note { ts, sealed, abort });
        let notice = Notice {
            txn: id,
            ts,
            sealed,
            echo: false,
            abort,
        };
        for &s in &e.body.shards {
            if s != self.shard {
                let to = self.leaders[s.index()];
                self.notices.push((to, self.view.g_view, notice));
            }
        }
    }

    /// Sends the batch's notifications, one message per other leader (module doc of
    /// [`Msg::Notes`]); those of an earlier view are dropped, as if lost.
    fn flush_notices(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        if self.notices.is_empty() {
            return;
        }
        let (shard, g_view) = (self.shard, self.view.g_view);
        let normal = self.status == Status::Normal;
        let mut out: Vec<(NodeId, Notice)> = self
            .notices
            .drain(..)
            .filter(|&(_, view, _)| normal && view == g_view)
            .map(|(to, _, n)| (to, n))
            .collect();
        send_grouped(
            ctx,
            &mut out,
            NOTES_BATCH_MAX,
            |n| Msg::Notify {
                txn: n.txn,
                shard,
                ts: n.ts,
                sealed: n.sealed,
                echo: n.echo,
                abort: n.abort,
                g_view,
            },
            |notes| Msg::Notes {
                shard,
                notes,
                g_view,
            },
        );
    }

    // ---- the queue (§3.3, Algorithm 2 lines 7–32) ----------------------------------------

    /// Releases (followers) or seals/executes (leaders) every expired transaction that has
    /// no conflicting transaction ahead of it, then arms the wake-up timer.
    ///
    /// Rounds as Algorithm 1's scan: each round finds every transaction ready at its start
    /// (expired, not sealed, nothing conflicting ahead), handles them in queue order, and
    /// the next round reconsiders what that unblocked. Only candidates are examined (see
    /// [`PriorityQueue`]): a transaction found blocked waits until one ahead of it on a
    /// shared key leaves or moves.
    fn process(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        loop {
            let now = ctx.now_ns();
            let (mut ready, mut woken) = (Vec::new(), Vec::new());
            for (ts, id) in self.pq.take_expired_candidates(now) {
                let e = &self.txns[&id];
                let blocked = if e.state == State::Sealed {
                    // Detective or pipelined: a sealed one whose predecessor left may be
                    // final now.
                    if !self.preventive || self.opts.pipeline {
                        woken.push(id);
                    }
                    continue;
                } else if self.pipelines(e) {
                    self.pq.blocked_unsealed(ts, id, &e.reads, &e.writes)
                } else {
                    self.pq.blocked(ts, id, &e.reads, &e.writes)
                };
                if !blocked {
                    ready.push(id);
                }
            }
            if ready.is_empty() && woken.is_empty() {
                break;
            }
            for id in woken {
                self.on_clear(ctx, id);
            }
            for id in ready {
                if self.is_leader {
                    self.seal(ctx, id);
                } else {
                    self.follower_release(id);
                    // Before its fast reply leaves (at the end of the batch).
                    self.persist_held(ctx, id);
                }
            }
        }
        // Arm the wake-up for the first unexpired queued transaction.
        let now = ctx.now_ns();
        let next = self
            .pq
            .after(now)
            .find(|(_, id)| self.txns[id].state != State::Sealed)
            .map(|(ts, _)| ts.time_ns);
        if let Some(at) = next {
            if self.wake.needs(at) {
                if let Some(superseded) = self.wake.take() {
                    ctx.cancel_timer(superseded);
                }
                let id = ctx.set_timer(at - now, Timer::Wake { at_ns: at });
                self.wake.arm(at, id);
            }
        }
    }

    fn follower_release(&mut self, id: TxnId) {
        let e = self.txns.get_mut(&id).expect("queued");
        let ts = e.body.ts;
        self.pq.remove(ts, id, &e.reads, &e.writes);
        self.maps.record(&e.reads, &e.writes, ts);
        let own = entry_hash(id, ts);
        let hash = reply_hash((&self.log, &self.marks), &e.reads, &e.writes, id, own);
        self.log
            .insert_hashed(id, ts, Footprint(footprint(&e.reads, &e.writes)), own)
            .expect("a follower releases a transaction once");
        e.state = State::Released;
        let reply = Arc::new(FastReply {
            txn: id,
            shard: self.shard,
            replica: self.replica,
            ts,
            hash,
            result: None,
            g_view: self.view.g_view,
            reexecuted: false,
        });
        e.last_fast = Some(reply.clone());
        self.replies_out.push((id.coordinator, reply));
    }

    /// Whether this leader seals `e` while sealed, unagreed conflicting transactions are
    /// ahead of it, executing on their versions (module doc, "Pipelined execution"), in
    /// either approach — unless its abort vote may change by design when a predecessor's
    /// rollback makes it execute again.
    fn pipelines(&self, e: &Entry) -> bool {
        self.is_leader && self.opts.pipeline && !e.body.decision_matters()
    }

    /// The leader takes `id` at the head of its queue: records it in rMap/wMap (so no later
    /// conflicting arrival can be ordered before it), executes it, replies fast in the
    /// detective approach once the execution is final, and notifies the other leaders of
    /// its timestamp and abort vote (§3.5, first or second round). The preventive approach
    /// executes here too — the vote needs the execution — but replies only at release,
    /// after agreement, when every conflicting predecessor is released and the execution
    /// is final.
    fn seal(&mut self, ctx: &mut Ctx<'_, TigaNode>, id: TxnId) {
        let e = self.txns.get_mut(&id).expect("queued");
        let ts = e.body.ts;
        self.maps.record(&e.reads, &e.writes, ts);
        e.state = State::Sealed;
        e.sealed_ns = ctx.now_ns();
        ctx.count(SEALS, 1);
        ctx.count(SEAL_WAIT_US, e.sealed_ns.saturating_sub(ts.time_ns) / 1_000);
        self.pq.seal(ts, id, &e.reads, &e.writes);
        // Before the sealed notification (and, detective, the fast reply) leaves.
        self.persist_held(ctx, id);
        self.execute_sealed(id);
        self.reexecute_behind(ctx, ts, id);
        self.reply_if_final(id);
        self.note_own(ctx, id, true);
        self.sealed.insert(id);
        self.check_agreement(ctx, id);
    }

    /// Pipelined: a sealed transaction whose conflicting predecessor left the queue. Once
    /// none is ahead its execution is final: it replies (detective), and may be released.
    fn on_clear(&mut self, ctx: &mut Ctx<'_, TigaNode>, id: TxnId) {
        if self.txns.get(&id).is_some_and(|e| e.state == State::Sealed) {
            self.reply_if_final(id);
            self.check_agreement(ctx, id);
        }
    }

    /// Detective approach: the fast reply of a sealed transaction's current execution,
    /// once no conflicting transaction is ahead of it — before that, a predecessor may
    /// still be revoked (case 3, or aborted) and this execution with it (§3.5).
    fn reply_if_final(&mut self, id: TxnId) {
        let e = &self.txns[&id];
        if self.preventive
            || e.replied == e.executions
            || self.pq.blocked(e.body.ts, id, &e.reads, &e.writes)
        {
            return;
        }
        let _ = self.send_fast_reply(id);
    }

    /// Pipelined: `id`'s writes at `ts` changed (first executed, revoked, or released
    /// aborted), so every sealed transaction queued behind it that read or overwrote those
    /// keys is revoked and executes again, in queue order, and so on for what those write
    /// — §3.5's revoke and re-execute, cascaded. None of them has replied (a conflicting
    /// transaction is ahead of each). A re-execution whose abort vote differs (only a type
    /// error can, see `pipelines`) notifies the new vote. A preventive leader that does
    /// not pipeline seals nothing conflicting behind an unreleased transaction.
    fn reexecute_behind(&mut self, ctx: &mut Ctx<'_, TigaNode>, ts: Timestamp, id: TxnId) {
        if self.preventive && !self.opts.pipeline {
            return;
        }
        let mut todo: BTreeSet<(Timestamp, TxnId)> = self
            .pq
            .sealed_behind(ts, id, &self.txns[&id].writes)
            .into_iter()
            .collect();
        while let Some((t, x)) = todo.pop_first() {
            let vote = self.txns[&x].own_abort;
            self.store.revoke(x);
            self.execute_sealed(x);
            ctx.count(CASCADED, 1);
            let e = &self.txns[&x];
            todo.extend(self.pq.sealed_behind(t, x, &e.writes));
            if e.own_abort != vote {
                self.note_own(ctx, x, true);
            }
        }
    }

    fn on_notify(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        from: NodeId,
        shard: ShardId,
        notice: Notice,
    ) {
        let Notice {
            txn,
            ts,
            sealed,
            echo,
            abort,
        } = notice;
        let note = Note { ts, sealed, abort };
        if self.trunc.is_truncated(txn) {
            // Cut below every shard's floor: released and synced on every involved shard,
            // so no leader still waits for this note (module doc, "Log truncation"); its
            // vote is gone with the entry, so nothing is said rather than a guess.
            return;
        }
        if let Some(e) = self.txns.get(&txn).filter(|e| e.state == State::Released) {
            if !echo {
                // The sender may have missed our final notification: repeat it.
                let notice = Notice {
                    txn,
                    ts: self.log.ts_of(txn).unwrap_or(ts),
                    sealed: true,
                    echo: true,
                    abort: e.own_abort,
                };
                self.notices.push((from, self.view.g_view, notice));
            }
            return;
        }
        let slot = self.notes.entry(txn).or_default().slot(shard, note);
        if ts > slot.ts || (ts == slot.ts && note.sealed) {
            // A sealed note's vote is the execution at its timestamp: it never changes.
            *slot = note;
        }
        match self.txns.get(&txn).map(|e| (e.state, e.body.ts)) {
            Some((State::Sealed, _)) => self.check_agreement(ctx, txn),
            Some((State::Queued, own)) if ts > own => {
                // Raise a queued transaction to the bound early: executing it below would
                // only be revoked (case 3).
                self.reposition(txn, ts);
                self.persist_held(ctx, txn);
                self.note_own(ctx, txn, false);
            }
            _ => {}
        }
    }

    fn reposition(&mut self, id: TxnId, ts: Timestamp) {
        let e = self.txns.get_mut(&id).expect("present");
        self.pq.remove(e.body.ts, id, &e.reads, &e.writes);
        e.body.ts = ts;
        e.state = State::Queued;
        e.own_abort = false;
        self.pq.insert(ts, id, &e.reads, &e.writes);
        self.sealed.remove(&id);
    }

    /// §3.5's three cases. Timestamps only grow, so any note above this leader's sealed
    /// timestamp already proves case 3; release needs every involved leader sealed.
    fn check_agreement(&mut self, ctx: &mut Ctx<'_, TigaNode>, id: TxnId) {
        let e = &self.txns[&id];
        if e.state != State::Sealed {
            return;
        }
        let own = e.body.ts;
        let Some(notes) = self.notes.get(&id) else {
            return;
        };
        let agreed = notes
            .values()
            .map(|n| n.ts)
            .max()
            .expect("own note")
            .max(own);
        if own < agreed {
            // Case 3: revoke the (invalid) execution, take the larger timestamp and go back
            // into the queue; the next sealed notification goes out when it reaches the
            // head again (and, detective, is re-executed).
            self.store.revoke(id);
            self.txns.get_mut(&id).expect("present").result = None;
            self.reposition(id, agreed);
            self.persist_held(ctx, id);
            self.reexecute_behind(ctx, own, id);
            self.note_own(ctx, id, false);
            return;
        }
        let complete = e
            .body
            .shards
            .iter()
            .all(|s| notes.get(s).is_some_and(|n| n.sealed));
        if !complete {
            return;
        }
        if self.pq.blocked(own, id, &e.reads, &e.writes) {
            // Pipelined: a conflicting transaction ahead is not released yet;
            // release follows it (the stream orders conflicting entries by timestamp).
            return;
        }
        let all_agree = notes.values().all(|n| n.ts == agreed);
        let skip = self.opts.epsilon_ns.is_some() || self.opts.unsafe_skip_second_round;
        // Skipping the second round leaves a vote cast below `agreed`, which counts only if
        // no piece can abort (then every vote is commit).
        if !(all_agree || (skip && !e.body.may_abort())) {
            // Case 2: wait for the second round (the others re-sealed at `agreed`).
            return;
        }
        if let Some(epsilon) = self.opts.epsilon_ns {
            // §6: once this clock passes T.t + ε every clock has passed T.t, so nothing
            // submitted after T's release can get a smaller timestamp: no second round.
            let at = own.time_ns + epsilon;
            let now = ctx.now_ns();
            if now <= at {
                self.deferred.hold(at, id);
                ctx.set_timer(at + 1 - now, Timer::Wake { at_ns: at + 1 });
                return;
            }
        }
        self.leader_release(ctx, id);
    }

    /// Coordination-free mode: re-checks the transactions whose T.t + ε has passed (one
    /// repositioned or released meanwhile is no longer sealed and is skipped); nothing is
    /// released outside the NORMAL status.
    fn release_deferred(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        if self.status != Status::Normal {
            // A view change rebuilds the log; whatever is sealed again in the new view is
            // deferred again by `check_agreement`.
            self.deferred.clear();
            return;
        }
        let now = ctx.now_ns();
        while let Some(id) = self.deferred.pop_due(now) {
            // A view change may have dropped or replaced it meanwhile.
            if self.txns.contains_key(&id) {
                self.check_agreement(ctx, id);
            }
        }
    }

    /// Releases an agreed transaction: committed, or — if any involved leader voted abort
    /// at the agreed timestamp — aborted on this shard too, its writes revoked (as case 3
    /// revokes) while its entry stays in the log and the release stream (the log sync
    /// carries the decision). The decision enters later fast-reply hashes through its
    /// decision mark only if it matters ([`TxnBody::decision_matters`]).
    fn leader_release(&mut self, ctx: &mut Ctx<'_, TigaNode>, id: TxnId) {
        let own = self.preventive.then(|| self.send_fast_reply(id));
        // Agreement is over: the notes matter no more (a late notification is answered
        // from the log).
        let notes = self.notes.remove(&id).unwrap_or_default();
        let e = self.txns.get_mut(&id).expect("present");
        let aborted = e.own_abort || notes.values().any(|n| n.abort);
        let ts = e.body.ts;
        self.pq.remove(ts, id, &e.reads, &e.writes);
        self.sealed.remove(&id);
        e.state = State::Released;
        e.released_ns = ctx.now_ns();
        ctx.count(RELEASES, 1);
        ctx.count(
            SEALED_HOLD_US,
            e.released_ns.saturating_sub(e.sealed_ns) / 1_000,
        );
        e.body.aborted = aborted;
        e.body.decided = true;
        mark_decided(&mut self.marks, e);
        if aborted {
            self.store.revoke(id);
        } else {
            self.store.commit_final(id);
        }
        let own = own.unwrap_or_else(|| entry_hash(id, ts));
        self.log
            .insert_hashed(id, ts, Footprint(footprint(&e.reads, &e.writes)), own)
            .expect("a leader releases a transaction once");
        let pos = self.stream.end();
        self.stream.push((id, ts));
        // Before the log sync (and, preventive, the fast reply) leaves.
        self.persist_synced(ctx, pos, id, ts);
        self.advance_commit_point();
        if aborted {
            self.reexecute_behind(ctx, ts, id);
        }
    }

    /// Multicasts the release-stream entries released since the last flush, at most
    /// [`LOG_SYNC_BATCH_MAX`] per message. Called once per batch of events (`on_batch_end`):
    /// one message for every transaction the batch released, instead of one each. The
    /// followers' fast replies do not wait for it; slow replies and the commit-point do,
    /// and only until the end of the batch.
    fn flush_log_sync(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        if !self.is_leader || self.status != Status::Normal {
            return;
        }
        let end = self.stream.end();
        while self.sync_sent < end {
            let upto = end.min(self.sync_sent + LOG_SYNC_BATCH_MAX);
            let msg = self.log_sync_msg(self.sync_sent, upto);
            ctx.multicast(self.followers.clone(), &msg);
            self.sync_sent = upto;
        }
    }

    /// A `LogSync` of release-stream positions `from..upto`, naming the aborted ones.
    fn log_sync_msg(&self, from: u64, upto: u64) -> Msg {
        let entries = self.stream.range(from, upto);
        let aborted = entries
            .iter()
            .filter(|(id, _)| self.txns.get(id).is_some_and(|e| e.body.aborted))
            .map(|&(id, _)| id)
            .collect();
        Msg::LogSync {
            shard: self.shard,
            from,
            entries,
            aborted,
            commit_point: self.commit_point,
            gc_floor: self.gc.leader_floor,
            cut: (self.trunc.pos, self.trunc.ts),
            g_view: self.view.g_view,
        }
    }

    /// Executes a sealed transaction's pieces at its timestamp (pending versions) and
    /// records this shard's abort vote.
    fn execute_sealed(&mut self, id: TxnId) {
        let e = self.txns.get_mut(&id).expect("present");
        let result = execute(
            &mut self.store,
            &self.procedures,
            &e.body,
            self.shard,
            e.body.ts,
        );
        e.executions += 1;
        e.own_abort = result.is_err();
        e.result = Some(result);
    }

    /// Returns the entry's hash at its timestamp (for the log insertion that follows).
    fn send_fast_reply(&mut self, id: TxnId) -> Hash160 {
        let e = self.txns.get_mut(&id).expect("present");
        let ts = e.body.ts;
        let own = entry_hash(id, ts);
        let reply = Arc::new(FastReply {
            txn: id,
            shard: self.shard,
            replica: self.replica,
            ts,
            hash: reply_hash((&self.log, &self.marks), &e.reads, &e.writes, id, own),
            result: Some(e.result.clone().expect("executed when sealed")),
            g_view: self.view.g_view,
            reexecuted: e.executions > 1,
        });
        e.replied = e.executions;
        e.last_fast = Some(reply.clone());
        self.replies_out.push((id.coordinator, reply));
        own
    }

    /// Sends the batch's fast replies, one message per coordinator.
    fn flush_fast_replies(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        send_grouped(
            ctx,
            &mut self.replies_out,
            FAST_REPLIES_BATCH_MAX,
            Msg::FastReply,
            Msg::FastReplies,
        );
    }

    /// A follower's sync-point as last reported (at least the latest cut: every replica
    /// synced that far, or got it as a checkpoint).
    fn follower_synced(&self, follower: NodeId) -> u64 {
        let known = self.follower_sync.get(&follower).copied().unwrap_or(0);
        known.max(self.stream.base())
    }

    fn advance_commit_point(&mut self) {
        let mut points: SmallVec<[u64; 8]> = self
            .followers
            .iter()
            .map(|&f| self.follower_synced(f))
            .collect();
        points.push(self.stream.end());
        points.sort_unstable_by(|a, b| b.cmp(a));
        // The entries below the (f + 1)-th largest sync-point are on f + 1 servers.
        self.commit_point = self.commit_point.max(points[self.f.min(points.len() - 1)]);
    }

    // ---- followers: log synchronization (§3.7) -----------------------------------------

    fn apply_sync(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        while let Some(&(id, ts, aborted)) = self.sync_buffer.get(&self.sync_point) {
            let Some(e) = self.txns.get_mut(&id) else {
                if self.fetching.insert(id) {
                    let g_view = self.view.g_view;
                    ctx.send(self.leader, Msg::Fetch { txn: id, g_view });
                }
                break;
            };
            // Released fast at the leader's timestamp: rMap/wMap hold it already (they keep
            // maxima, and what pruning dropped is at or below the floor, where an entry
            // decides nothing), so the second recording is skipped.
            let recorded = e.state == State::Released && e.body.ts == ts;
            match e.state {
                State::Released => {
                    if self.log.ts_of(id).is_some_and(|l| l != ts) {
                        self.log.set_timestamp(id, ts).expect("entry present");
                    }
                }
                State::Queued | State::Held => {
                    self.pq.remove(e.body.ts, id, &e.reads, &e.writes);
                    self.log
                        .insert(id, ts, Footprint(footprint(&e.reads, &e.writes)))
                        .expect("not yet in the log");
                }
                State::Synced | State::Sealed => {}
            }
            e.body.ts = ts;
            e.body.aborted = aborted;
            e.body.decided = true;
            mark_decided(&mut self.marks, e);
            e.state = State::Synced;
            e.released_ns = ctx.now_ns();
            if !recorded {
                self.maps.record(&e.reads, &e.writes, ts);
            }
            self.sync_buffer.remove(&self.sync_point);
            self.synced.push((id, ts));
            // Before the slow reply or sync-point report that vouches for it leaves.
            self.persist_synced(ctx, self.sync_point, id, ts);
            self.sync_point += 1;
            if self.opts.slow_replies == SlowReplies::Push || self.slow_wanted.remove(&id) {
                self.send_slow(ctx, id, ts);
            }
        }
        self.execute_committed();
    }

    /// Appendix E: a coordinator asks for slow replies; synced entries answer now, the
    /// others when they are synced.
    fn on_slow_inquiry(&mut self, ctx: &mut Ctx<'_, TigaNode>, txns: Vec<TxnId>) {
        for txn in txns {
            match self.txns.get(&txn) {
                Some(e) if e.state == State::Synced => self.send_slow(ctx, txn, e.body.ts),
                _ => {
                    // Requests for entries this follower never syncs (collected, or lost
                    // in a view change) would pile up: start over when full — the
                    // coordinators repeat theirs every `inquiry_ms`.
                    if self.slow_wanted.len() >= SLOW_WANTED_MAX {
                        self.slow_wanted.clear();
                    }
                    self.slow_wanted.insert(txn);
                }
            }
        }
    }

    fn send_slow(&self, ctx: &mut Ctx<'_, TigaNode>, txn: TxnId, ts: Timestamp) {
        ctx.send(
            txn.coordinator,
            Msg::SlowReply {
                txn,
                shard: self.shard,
                replica: self.replica,
                ts,
                g_view: self.view.g_view,
            },
        );
    }

    /// Followers execute the synced entries up to the commit-point, in the leader's release
    /// order (which orders conflicting entries by timestamp, as the leader executed them).
    fn execute_committed(&mut self) {
        let upto = self.commit_point.min(self.sync_point);
        while self.executed_upto < upto {
            let (id, ts) = self.synced.get(self.executed_upto);
            self.executed_upto += 1;
            let e = &self.txns[&id];
            if e.body.aborted {
                // Decided aborted by the leaders (some shard's pieces aborted): no writes.
                continue;
            }
            let _ = execute(&mut self.store, &self.procedures, &e.body, self.shard, ts);
            self.store.commit_final(id);
        }
    }

    // ---- housekeeping -------------------------------------------------------------------

    fn tick(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let now = ctx.now_ns();
        if self.is_leader {
            // Retransmit notifications of queued and sealed multi-shard transactions.
            let stale: Vec<(TxnId, bool)> = self
                .pq
                .iter()
                .map(|(_, id)| (*id, &self.txns[id]))
                .filter(|(_, e)| {
                    e.body.shards.len() > 1
                        && now.saturating_sub(e.notified_ns) >= self.opts.retry_ns
                })
                .map(|(id, e)| (id, e.state == State::Sealed))
                .collect();
            for (id, sealed) in stale {
                self.note_own(ctx, id, sealed);
            }
            // Retransmit log syncs to lagging followers; propagate the commit-point.
            let end = self.stream.end();
            for &f in &self.followers {
                let synced = self.follower_synced(f);
                let last = self.follower_resent_ns.get(&f).copied().unwrap_or(0);
                if synced < end && now.saturating_sub(last) >= self.opts.retry_ns {
                    self.follower_resent_ns.insert(f, now);
                    let upto = end.min(synced + LOG_SYNC_BATCH_MAX);
                    ctx.send(f, self.log_sync_msg(synced, upto));
                } else if self.commit_point > self.commit_sent
                    || self.gc.leader_floor > self.gc.floor_sent
                {
                    ctx.send(
                        f,
                        Msg::LogSync {
                            shard: self.shard,
                            from: end,
                            entries: Vec::new(),
                            aborted: Vec::new(),
                            commit_point: self.commit_point,
                            gc_floor: self.gc.leader_floor,
                            cut: (self.trunc.pos, self.trunc.ts),
                            g_view: self.view.g_view,
                        },
                    );
                }
            }
            self.commit_sent = self.commit_point;
            self.gc.floor_sent = self.gc.leader_floor;
            self.recover_stuck(ctx);
        } else {
            if self.sync_point != self.reported
                || now.saturating_sub(self.reported_ns) >= self.opts.retry_ns
            {
                self.reported = self.sync_point;
                self.reported_ns = now;
                ctx.send(
                    self.leader,
                    Msg::SyncReport {
                        shard: self.shard,
                        sync_point: self.sync_point,
                        g_view: self.view.g_view,
                    },
                );
            }
            // A fetch may have been lost.
            if now.saturating_sub(self.reported_ns) == 0 {
                self.fetching.clear();
            }
            self.apply_sync(ctx);
        }
        self.collect_garbage(ctx);
        self.process(ctx);
    }

    // ---- test accessors -------------------------------------------------------------------

    #[cfg(test)]
    pub(crate) fn state_of(&self, txn: TxnId) -> Option<(State, Timestamp)> {
        self.txns.get(&txn).map(|e| (e.state, e.body.ts))
    }

    #[cfg(test)]
    pub(crate) fn log(&self) -> &OrderedLog<Footprint> {
        &self.log
    }

    #[cfg(test)]
    pub(crate) fn store(&self) -> &MvStore {
        &self.store
    }

    /// What GC bounds: (notes held, rMap/wMap keys, transactions still holding a fast
    /// reply or key lists, the GC floor).
    #[cfg(test)]
    pub(crate) fn gc_counts(&self) -> (usize, usize, usize, Timestamp) {
        let unslimmed = self
            .txns
            .values()
            .filter(|e| e.last_fast.is_some() || !e.reads.is_empty() || !e.writes.is_empty())
            .count();
        (self.notes.len(), self.maps.len(), unslimmed, self.gc.floor)
    }

    /// What truncation bounds: (transactions known, log entries, stream or synced-prefix
    /// entries kept, cuts taken).
    #[cfg(test)]
    pub(crate) fn trunc_counts(&self) -> (usize, usize, usize, u64) {
        let kept = self.stream.iter().count() + self.synced.iter().count();
        (self.txns.len(), self.log.len(), kept, self.trunc.cuts)
    }
}

/// What a decided entry adds to its keys' hashes: the decision itself, so a follower's
/// fast reply matches its leader's only if it knows the decisions of the earlier entries
/// on the same keys whose decision matters (it learns them with the log sync).
pub(crate) fn decision_mark(body: &TxnBody) -> Hash160 {
    let what: &[u8] = if body.aborted {
        b"aborted"
    } else {
        b"committed"
    };
    key_state_hash(what, entry_hash(body.id, body.ts))
}

/// Adds a just-decided entry's [`decision_mark`] to its keys (if its decision matters).
fn mark_decided(marks: &mut FxHashMap<Key, Hash160>, e: &Entry) {
    if !e.body.decision_matters() {
        return;
    }
    let mark = decision_mark(&e.body);
    for key in footprint(&e.reads, &e.writes) {
        *marks.entry(key).or_insert(Hash160::ZERO) ^= mark;
    }
}

/// Appendix D: the per-key hash over the transaction's keys, with the transaction's own
/// entry (`own_hash`, its `entry_hash` at its timestamp) included, so a leader that
/// executes before appending and a follower that appends on release compute the same
/// value. Every caller replies before the entry goes into the log, so its own entry is
/// added here (checked in debug builds: the lookup cost a cache miss per reply).
pub(crate) fn reply_hash(
    (log, marks): (&OrderedLog<Footprint>, &FxHashMap<Key, Hash160>),
    reads: &[Key],
    writes: &[Key],
    id: TxnId,
    own_hash: Hash160,
) -> Hash160 {
    // The transaction's own entry counts on every key of its footprint, which is all of
    // its keys when it writes and none when it is read-only (`footprint`).
    debug_assert_eq!(log.ts_of(id), None, "replies precede the log entry");
    let own_counts = !writes.is_empty();
    sorted_union(reads, writes).fold(Hash160::ZERO, |acc, key| {
        let mut h = log.key_hash(key) ^ marks.get(key).copied().unwrap_or(Hash160::ZERO);
        if own_counts {
            h ^= own_hash;
        }
        acc ^ key_state_hash(key, h)
    })
}

/// The distinct keys of two sorted, deduplicated key lists, in order, without allocating.
fn sorted_union<'k>(a: &'k [Key], b: &'k [Key]) -> impl Iterator<Item = &'k Key> + 'k {
    debug_assert!(a.windows(2).all(|w| w[0] < w[1]) && b.windows(2).all(|w| w[0] < w[1]));
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || match (a.get(i), b.get(j)) {
        (Some(x), Some(y)) if x == y => {
            (i, j) = (i + 1, j + 1);
            Some(x)
        }
        (Some(x), Some(y)) if x < y => {
            i += 1;
            Some(x)
        }
        (_, Some(y)) => {
            j += 1;
            Some(y)
        }
        (Some(x), None) => {
            i += 1;
            Some(x)
        }
        (None, None) => None,
    })
}

/// The results of `shard`'s pieces so far as `execute_piece`'s inputs (indexed by piece).
/// Empty (no allocation) for a shard's first piece, the common case.
fn earlier_results(done: &[(u16, PieceResult)]) -> Vec<Option<&PieceResult>> {
    let width = done.iter().map(|(i, _)| usize::from(*i) + 1).max();
    let mut inputs = vec![None; width.unwrap_or(0)];
    for (i, r) in done {
        inputs[usize::from(*i)] = Some(r);
    }
    inputs
}

/// Executes `shard`'s pieces at `ts` on the store (pending versions); an aborted piece
/// revokes what the transaction wrote.
pub(crate) fn execute(
    store: &mut MvStore,
    procedures: &Procedures,
    body: &TxnBody,
    shard: ShardId,
    ts: Timestamp,
) -> ShardResult {
    let id = body.id;
    let run = |store: &mut MvStore| -> ShardResult {
        let mut access = store
            .access(id, ts)
            .map_err(|e| AbortReason::Invalid(format!("store: {e}")))?;
        let mut out = Vec::with_capacity(1);
        for (i, piece) in body.pieces_on(shard) {
            let r = execute_piece(piece, &earlier_results(&out), procedures, &mut access)?;
            out.push((*i, r));
        }
        access
            .finish()
            .map_err(|e| AbortReason::Invalid(format!("store: {e}")))?;
        Ok(out)
    };
    let result = run(store);
    if result.is_err() {
        store.revoke(id);
    }
    result
}
