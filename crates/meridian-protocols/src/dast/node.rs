//! The edge node (§3.1): a replica of one shard that also coordinates its clients'
//! transactions. This file holds its participant side — the readyQ and waitQ (§4.2),
//! per-region clock tracking (PCT: `maxTs`, notifications, `notifiedTs`), execution in
//! timestamp order, value dependencies pushed between shards (§4.1) — and its durable
//! state. The coordinator side is in `coord.rs`.

use super::coord::Coord;
use super::dclock::{Created, Dclock};
use super::options::Options;
use super::pct::Peers;
use super::wire::{
    Checkpoint, Decision, EntryRecord, Header, Kind, Membership, Msg, Notice, NoticeState, Record,
    Snapshot, Status, Timer, TxnInfo,
};
use super::DastNode;
use meridian_core::node::Ctx;
use meridian_core::time::NS_PER_MS;
use meridian_core::txn::{
    execute_piece, AbortReason, Key, KvAccess, PieceResult, Procedures, Value,
};
use meridian_core::{Cluster, NodeId, NodeRole, RegionId, ShardId, Timestamp, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// How many finished transaction ids (and their outputs) a node remembers, to recognise
/// late duplicates and answer input queries.
const DONE_MEMORY: usize = 1 << 16;
/// Outputs buffered for transactions not known yet.
const EARLY_OUTPUTS_MAX: usize = 1 << 14;
/// How many aborted transaction ids a node remembers (a removal asks for the removed
/// coordinators', §4.4), and how many settled commits a coordinator remembers (late
/// queries from a replica re-added from a checkpoint).
const ABORTED_MEMORY: usize = 1 << 12;
const SETTLED_MEMORY: usize = 1 << 14;
/// How many executed IRTs a node remembers per other coordinator of its region (a removal
/// commits them at the members that never heard of them, §4.4).
const EXECUTED_IRT_MEMORY: usize = 256;
/// How far ahead of the clock the persisted ceiling is set.
const CEILING_AHEAD_NS: u64 = 100 * NS_PER_MS;
/// How many fractions ahead of the clock the persisted floor near a held CRT is set.
const FLOOR_AHEAD_FRACS: u32 = 1 << 16;

/// A readyQ key: timestamp, then id (timestamps of different transactions may tie: a
/// participant's anticipation is not handed out by its clock).
pub type QKey = (Timestamp, TxnId);

/// A piece's outputs (or its failure), by piece index.
type PieceOutput = (u16, Result<PieceResult, AbortReason>);

/// A transaction this node participates in.
#[derive(Clone, Debug)]
pub struct Entry {
    pub rec: EntryRecord,
    /// Local time of the last progress (for queries).
    pub since_ns: u64,
    /// Outputs of the transaction's pieces known here, by piece.
    pub outputs: Vec<Option<Result<PieceResult, AbortReason>>>,
}

impl Entry {
    fn new(rec: EntryRecord, now_ns: u64) -> Entry {
        let pieces = rec.info.txn.pieces.len();
        Entry {
            rec,
            since_ns: now_ns,
            outputs: vec![None; pieces],
        }
    }
}

/// A DAST edge node.
#[derive(Debug)]
pub struct Edge {
    pub(super) me: NodeId,
    pub(super) shard: ShardId,
    pub(super) region: RegionId,
    pub(super) cluster: Arc<Cluster>,
    pub(super) opts: Options,
    procedures: Arc<Procedures>,
    pub(super) clock: Dclock,
    ceiling_ns: u64,
    /// Durable: above every timestamp handed out within a nanosecond of the waitQ's head
    /// (a restarted clock resumes just below that head, see [`Dclock::restore`]).
    clock_floor: Timestamp,
    pub(super) incarnation: u32,
    pub(super) next_seq: u64,
    /// The other edge nodes of the region (PCT tracks exactly these, §3.2): `maxTs` and
    /// their pause points.
    pub(super) peers: Peers,
    store: FxHashMap<Key, Value>,
    pub(super) entries: FxHashMap<TxnId, Entry>,
    /// readyQ: IRTs and CRTs in timestamp order (prepared CRTs at their lower bound, so
    /// nothing above it runs before they are decided).
    ready: BTreeSet<QKey>,
    /// waitQ: this node's anticipations of prepared CRTs, and committed CRTs waiting for
    /// inputs, at their commit timestamps (§4.3). The clock stretches below its head.
    pub(super) wait: BTreeSet<QKey>,
    /// The last transaction executed.
    pub(super) frontier: Option<QKey>,
    done: FxHashSet<TxnId>,
    done_order: VecDeque<TxnId>,
    /// This node's outputs of recently executed transactions (answers to input queries).
    recent_outputs: FxHashMap<TxnId, Vec<PieceOutput>>,
    early_outputs: FxHashMap<TxnId, Vec<PieceOutput>>,
    /// Notifications not yet known delivered, per peer, in timestamp order (`myTxns` less
    /// what `notifiedTs` covers).
    outbox: FxHashMap<NodeId, BTreeMap<QKey, Notice>>,
    pub(super) coord: Coord,
    pub(super) decisions: BTreeMap<TxnId, (Decision, BTreeSet<NodeId>)>,
    records: usize,
    /// A broken invariant, reported by `check_invariants`.
    violation: Option<String>,
    /// The view state (§4.4, `view.rs`).
    pub(super) membership: Membership,
    /// Recently aborted transactions, oldest first.
    pub(super) aborted: VecDeque<TxnId>,
    /// Recently settled commits this node coordinated.
    settled: FxHashMap<TxnId, Timestamp>,
    settled_order: VecDeque<TxnId>,
    /// A joining replica this node owes a checkpoint (Alg. 4 line 10).
    pub(super) transfer: Option<NodeId>,
    /// When a commit was last forwarded to each lagging member.
    pub(super) forwarded: FxHashMap<NodeId, u64>,
    /// Added back from a checkpoint in this incarnation (for the counters).
    pub(super) rejoined: bool,
    /// Recently executed IRTs of the region's other coordinators, by coordinator.
    pub(super) executed_irts: FxHashMap<NodeId, VecDeque<(TxnInfo, Timestamp)>>,
}

impl Edge {
    /// Builds edge node `me`, fresh or from its durable records.
    pub fn restore(
        me: NodeId,
        cluster: Arc<Cluster>,
        opts: Options,
        procedures: Arc<Procedures>,
        recovered: &[Record],
    ) -> Edge {
        let NodeRole::Replica { shard, .. } = cluster.node(me).role else {
            panic!("dast edge node {me} is not a replica");
        };
        let region = cluster.region_of(me);
        let peers = Peers::new(
            region_edges(&cluster, region)
                .into_iter()
                .filter(|&n| n != me)
                .collect(),
        );
        let mut edge = Edge {
            me,
            shard,
            region,
            clock: Dclock::new(me.0, opts.stretch),
            cluster,
            opts,
            procedures,
            ceiling_ns: 0,
            clock_floor: Timestamp::ZERO,
            incarnation: 0,
            next_seq: 0,
            peers,
            store: FxHashMap::default(),
            entries: FxHashMap::default(),
            ready: BTreeSet::new(),
            wait: BTreeSet::new(),
            frontier: None,
            done: FxHashSet::default(),
            done_order: VecDeque::new(),
            recent_outputs: FxHashMap::default(),
            early_outputs: FxHashMap::default(),
            outbox: FxHashMap::default(),
            coord: Coord::default(),
            decisions: BTreeMap::new(),
            records: 0,
            violation: None,
            membership: Membership::default(),
            aborted: VecDeque::new(),
            settled: FxHashMap::default(),
            settled_order: VecDeque::new(),
            transfer: None,
            forwarded: FxHashMap::default(),
            executed_irts: FxHashMap::default(),
            rejoined: false,
        };
        for record in recovered {
            edge.replay(record);
        }
        edge.rebuild_queues();
        edge.restore_membership();
        edge
    }

    /// After replay: `maxTs` tracks the installed view's members, an addition's hold is
    /// back in the waitQ, and a removed node keeps no participant state.
    fn restore_membership(&mut self) {
        if self.membership.view.is_none() {
            let mut members = region_edges(&self.cluster, self.region);
            members.sort_unstable();
            self.membership.view = Some(super::wire::View { vid: 0, members });
        }
        let view = self.view();
        let others = view.members.into_iter().filter(|&n| n != self.me).collect();
        self.peers = Peers::new(others);
        if let Some(h) = self.membership.hold {
            self.wait
                .insert((h, super::view::hold_id(self.membership.promised)));
        }
        if self.membership.out {
            self.clear_participant_state();
        }
    }

    /// Drops everything this node holds as a participant (a removed node's state is
    /// replaced by a checkpoint before it serves again).
    pub(super) fn clear_participant_state(&mut self) {
        self.entries.clear();
        self.ready.clear();
        self.wait.clear();
        self.outbox.clear();
        self.early_outputs.clear();
        self.transfer = None;
        self.membership.hold = None;
    }

    /// Installs a live replica's checkpoint (Alg. 4): its store, executed frontier and the
    /// transactions it holds (undecided ones are resolved by their coordinators).
    pub(super) fn load_checkpoint(&mut self, ckpt: Checkpoint) {
        self.clear_participant_state();
        self.store = ckpt.store.into_iter().collect();
        self.frontier = ckpt.frontier;
        self.done.clear();
        self.done_order.clear();
        self.recent_outputs.clear();
        for rec in ckpt.entries {
            self.ready.insert((rec.key, rec.info.id));
            self.entries.insert(rec.info.id, Entry::new(rec, 0));
        }
    }

    pub(super) fn sorted_store(&self) -> Vec<(Key, Value)> {
        crate::kit::log::sorted_entries(&self.store)
    }

    fn remember_executed_irt(&mut self, info: &TxnInfo, key: Timestamp) {
        if info.kind != Kind::Irt || info.coord == self.me {
            return;
        }
        let log = self.executed_irts.entry(info.coord).or_default();
        log.push_back((info.clone(), key));
        if log.len() > EXECUTED_IRT_MEMORY {
            log.pop_front();
        }
    }

    fn remember_aborted(&mut self, id: TxnId) {
        self.aborted.push_back(id);
        while self.aborted.len() > ABORTED_MEMORY {
            self.aborted.pop_front();
        }
    }

    pub(super) fn remember_settled(&mut self, id: TxnId, ts: Timestamp) {
        if self.settled.insert(id, ts).is_none() {
            self.settled_order.push_back(id);
        }
        while self.settled_order.len() > SETTLED_MEMORY {
            let old = self.settled_order.pop_front().expect("non-empty");
            self.settled.remove(&old);
        }
    }

    pub(super) fn settled_ts(&self, id: TxnId) -> Option<Timestamp> {
        self.settled.get(&id).copied()
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        self.incarnation += 1;
        self.persist(
            ctx,
            Record::Started {
                incarnation: self.incarnation,
            },
        );
        let held = self.wait.first().map(|k| k.0);
        self.clock.restore(self.ceiling_ns, held, self.clock_floor);
        ctx.set_timer(self.opts.heartbeat_ns, Timer::Heartbeat);
        ctx.set_timer(self.opts.retry_ns / 4, Timer::Tick);
    }

    // ---- durable state -------------------------------------------------------------

    fn replay(&mut self, record: &Record) {
        match record {
            Record::Snapshot(s) => self.load_snapshot(s),
            Record::Started { incarnation } => self.incarnation = *incarnation,
            Record::Ceiling { time_ns } => self.ceiling_ns = self.ceiling_ns.max(*time_ns),
            Record::ClockFloor { ts } => self.clock_floor = self.clock_floor.max(*ts),
            Record::HandedIn { id } => {
                self.coord.first_handoff(*id);
            }
            Record::Entry(rec) => {
                let entry = Entry::new(rec.clone(), 0);
                self.entries.insert(rec.info.id, entry);
            }
            Record::Dropped { id, aborted } => {
                self.entries.remove(id);
                self.remember_done(*id);
                if *aborted {
                    self.remember_aborted(*id);
                }
            }
            Record::Membership(m) => self.membership = (**m).clone(),
            Record::Executed { id, key, writes } => {
                for (k, v) in writes {
                    self.store.insert(k.clone(), v.clone());
                }
                self.entries.remove(id);
                self.frontier = Some((*key, *id));
                self.remember_done(*id);
            }
            Record::Decided(d) => {
                let participants = participants(&self.cluster, &d.info);
                self.decisions.insert(d.info.id, (d.clone(), participants));
            }
            Record::Settled { id, ts } => {
                self.decisions.remove(id);
                self.remember_settled(*id, *ts);
            }
        }
    }

    fn load_snapshot(&mut self, s: &Snapshot) {
        self.incarnation = s.incarnation;
        self.ceiling_ns = s.ceiling_ns;
        self.clock_floor = s.clock_floor;
        for id in &s.handed_in {
            self.coord.first_handoff(*id);
        }
        self.frontier = s.frontier;
        self.store = s.store.iter().cloned().collect();
        self.entries = s
            .entries
            .iter()
            .map(|r| (r.info.id, Entry::new(r.clone(), 0)))
            .collect();
        self.decisions = s
            .decisions
            .iter()
            .map(|d| {
                let participants = participants(&self.cluster, &d.info);
                (d.info.id, (d.clone(), participants))
            })
            .collect();
        self.outbox.clear();
        for (peer, notice) in &s.outbox {
            self.notify(*peer, notice.clone());
        }
        self.membership = s.membership.clone();
        self.aborted = s.aborted.iter().copied().collect();
        self.settled.clear();
        self.settled_order.clear();
        for &(id, ts) in &s.settled {
            self.remember_settled(id, ts);
        }
    }

    /// After replay: the queues from the entries, and every notification this node might
    /// owe its peers again (delivery acknowledgements are not durable; duplicates are
    /// harmless).
    fn rebuild_queues(&mut self) {
        let entries: Vec<EntryRecord> = self.entries.values().map(|e| e.rec.clone()).collect();
        for rec in entries {
            let id = rec.info.id;
            self.ready.insert((rec.key, id));
            if let Some(p) = rec.proposal {
                if rec.status == Status::Prepared {
                    self.wait.insert((p, id));
                }
            }
            if rec.info.kind == Kind::Crt {
                let state = match rec.status {
                    Status::Prepared => NoticeState::Prepared(rec.key),
                    Status::Committed => NoticeState::Committed(rec.key),
                };
                self.notify_relevant(&rec.info, state);
            }
        }
        let decided: Vec<Decision> = self.decisions.values().map(|(d, _)| d.clone()).collect();
        for d in decided {
            if d.info.kind == Kind::Irt {
                self.notify_relevant(&d.info, NoticeState::Committed(d.ts));
            }
        }
    }

    pub(super) fn persist(&mut self, ctx: &mut Ctx<'_, DastNode>, record: Record) {
        self.records += 1;
        ctx.persist(record);
    }

    /// Every `checkpoint_every` records, a snapshot — taken between events, never inside
    /// a handler, whose state may not yet reflect the record it just wrote (a snapshot
    /// replaces every earlier record).
    pub fn on_batch_end(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        if self.records >= self.opts.checkpoint_every {
            self.records = 0;
            ctx.checkpoint(Record::Snapshot(Box::new(self.snapshot())));
        }
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        let store = self.sorted_store();
        let mut entries: Vec<EntryRecord> = self.entries.values().map(|e| e.rec.clone()).collect();
        entries.sort_by_key(|r| r.info.id);
        let mut outbox = Vec::new();
        let mut peers: Vec<&NodeId> = self.outbox.keys().collect();
        peers.sort();
        for peer in peers {
            for notice in self.outbox[peer].values() {
                outbox.push((*peer, notice.clone()));
            }
        }
        Snapshot {
            incarnation: self.incarnation,
            ceiling_ns: self.ceiling_ns,
            clock_floor: self.clock_floor,
            frontier: self.frontier,
            store,
            entries,
            decisions: self.decisions.values().map(|(d, _)| d.clone()).collect(),
            outbox,
            membership: self.membership.clone(),
            aborted: self.aborted.iter().copied().collect(),
            settled: self
                .settled_order
                .iter()
                .map(|id| (*id, self.settled[id]))
                .collect(),
            handed_in: self.coord.handed_in(),
        }
    }

    fn remember_done(&mut self, id: TxnId) {
        if self.done.insert(id) {
            self.done_order.push_back(id);
        }
        while self.done_order.len() > DONE_MEMORY {
            let old = self.done_order.pop_front().expect("non-empty");
            self.done.remove(&old);
            self.recent_outputs.remove(&old);
        }
    }

    // ---- the dclock ----------------------------------------------------------------

    /// The bound the clock stretches below: the waitQ's head, and any peer's pause point
    /// the clock has not passed yet (§4.3: nodes not accessed by a CRT are notified of it
    /// so they stretch too; a pause already passed is no reason to freeze).
    fn stretch_bound(&self) -> Option<Timestamp> {
        let last = self.clock.last();
        let own = self.wait.first().map(|k| k.0);
        let peers = self.peers.lowest_pause_above(last);
        match (own, peers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `CreateTs()` (Alg. 1 lines 4-9), keeping the durable ceiling above it.
    pub(super) fn create_ts(&mut self, ctx: &mut Ctx<'_, DastNode>) -> Timestamp {
        let (ts, how) = self.clock.create_ts(ctx.now_ns(), self.stretch_bound());
        if how == Created::Stretched {
            ctx.count("dast.stretched_ts", 1);
        }
        self.keep_clock_bounds(ctx);
        ts
    }

    /// Keeps the durable ceiling above the clock (a restarted clock starts at it), and,
    /// while the clock is within a nanosecond of the waitQ's head, the durable floor above
    /// it: a restarted stretching clock resumes at the head's `time − 1`, below the
    /// fractions it may have handed out there (anticipations leave that nanosecond free
    /// of everything handed out before them, [`Dclock::above`]).
    fn keep_clock_bounds(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let last = self.clock.last();
        if last.time_ns >= self.ceiling_ns {
            self.ceiling_ns = last.time_ns + CEILING_AHEAD_NS;
            let time_ns = self.ceiling_ns;
            self.persist(ctx, Record::Ceiling { time_ns });
        }
        let Some(&(head, _)) = self.wait.first() else {
            return;
        };
        if last.time_ns.saturating_add(1) < head.time_ns || last < self.clock_floor {
            return;
        }
        // Below the head: a floor some fractions ahead, so that a record covers many
        // stretched timestamps. At or past it (the clock no longer stretches below it): the
        // ceiling, so that the clock's `time` running on writes no record per timestamp.
        self.clock_floor = if last < head {
            let frac = last.frac.saturating_add(FLOOR_AHEAD_FRACS);
            Timestamp::with_frac(last.time_ns, last.tiebreak, frac)
        } else {
            Timestamp::with_frac(self.ceiling_ns, last.tiebreak, 0)
        };
        let ts = self.clock_floor;
        ctx.count("dast.clock_floor_records", 1);
        self.persist(ctx, Record::ClockFloor { ts });
    }

    /// Moves the clock past what the region must pass next, below the stretch bound: the
    /// highest promise a peer announced (§4.2's calibration, which a stretched clock's
    /// frozen `time` otherwise ignores) and this node's readyQ head once it is committed
    /// with its inputs in (it runs as soon as every node of the region passed it). See
    /// "Frozen clocks" in `mod.rs`.
    fn catch_up(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        let head = self.ready.first().copied();
        let ready = head.filter(|&(_, id)| {
            self.entries.get(&id).map(|e| e.rec.status) == Some(Status::Committed)
                && self.inputs_ready(id)
        });
        let targets = [Some(self.peers.highest()), ready.map(|(key, _)| key)];
        for ts in targets.into_iter().flatten() {
            let bound = self.stretch_bound();
            if self.clock.pass(ts, bound) {
                ctx.count("dast.clock_passed", 1);
                self.keep_clock_bounds(ctx);
            }
        }
    }

    /// What this node promises its peers: no transaction it will notify them of is at or
    /// below this, beyond those notified. The clock, held below this node's own waitQ
    /// (without stretching, the clock runs past a pending CRT but the promise may not).
    fn announce(&self) -> Timestamp {
        let last = self.clock.last();
        match self.wait.first() {
            Some(&(head, _)) if head <= last => {
                // Just below the head: the largest timestamp smaller than it.
                below(head)
            }
            _ => last,
        }
    }

    /// This node's promise to its peers (reported to a manager removing a node, §4.4).
    pub(super) fn promise(&self) -> Timestamp {
        self.announce()
    }

    /// Every node of the region (this one included) has promised past `ts`.
    fn horizon(&mut self) -> Timestamp {
        self.announce().min(self.peers.floor())
    }

    /// Whether every transaction this node will ever execute at or below `bound` is
    /// executed: it executed one past `bound`, or the region's horizon passed `bound` (no
    /// peer will notify anything at or below it, the rule execution itself relies on)
    /// and nothing at or below it waits in the readyQ. The frontier alone is not enough:
    /// a replica of a shard no transaction touches never executes anything, so a
    /// checkpoint that waited for its frontier would never leave. (Nor would it with the
    /// region's clocks frozen below the bound: see "Frozen clocks" in `mod.rs`.)
    pub(super) fn executed_through(&mut self, bound: Timestamp) -> bool {
        if self.frontier.is_some_and(|f| f.0 >= bound) {
            return true;
        }
        self.ready.first().is_none_or(|k| k.0 > bound) && self.horizon() > bound
    }

    // ---- intra-region messages -----------------------------------------------------

    /// The header for `peer`: notifications up to `max_notices`, the promise stopping
    /// below the first one left out.
    pub(super) fn header(&self, peer: NodeId) -> Header {
        let mut clock = self.announce();
        let mut notices = Vec::new();
        if let Some(out) = self.outbox.get(&peer) {
            for (i, (key, notice)) in out.iter().enumerate() {
                if i == self.opts.max_notices {
                    clock = clock.min(below(key.0));
                    break;
                }
                notices.push(notice.clone());
            }
        }
        Header {
            vid: self.vid(),
            clock,
            pause: self.wait.first().map(|k| k.0),
            delivered: self.peers.max_ts(peer),
            notices,
        }
    }

    pub(super) fn notify(&mut self, peer: NodeId, notice: Notice) {
        let key = match notice.state {
            NoticeState::Irt(ts) | NoticeState::Prepared(ts) | NoticeState::Committed(ts) => ts,
        };
        let out = self.outbox.entry(peer).or_default();
        out.retain(|k, _| k.1 != notice.info.id);
        out.insert((key, notice.info.id), notice);
    }

    /// Notifies the region's other replicas of the transaction's shards.
    pub(super) fn notify_relevant(&mut self, info: &TxnInfo, state: NoticeState) {
        for peer in self.relevant_peers(info) {
            let notice = Notice {
                info: info.clone(),
                state: state.clone(),
            };
            self.notify(peer, notice);
        }
    }

    fn relevant_peers(&self, info: &TxnInfo) -> Vec<NodeId> {
        let mut out = Vec::new();
        for shard in info.txn.shards() {
            for &r in self.cluster.replicas(shard) {
                if r != self.me && self.cluster.region_of(r) == self.region {
                    out.push(r);
                }
            }
        }
        out
    }

    pub fn on_heartbeat(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        ctx.set_timer(self.opts.heartbeat_ns, Timer::Heartbeat);
        if self.membership.out {
            return;
        }
        self.create_ts(ctx);
        self.catch_up(ctx);
        for i in 0..self.peers.ids().len() {
            let peer = self.peers.ids()[i];
            let header = self.header(peer);
            ctx.send(peer, Msg::Beat(header));
        }
        self.try_execute(ctx);
    }

    pub fn on_beat(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, h: Header) {
        let Some(slot) = self.peers.slot(from) else {
            return;
        };
        self.forward_commit(ctx, from, h.vid);
        self.clock.calibrate(ctx.now_ns(), h.clock);
        if let Some(out) = self.outbox.get_mut(&from) {
            while let Some((&key, _)) = out.first_key_value() {
                if key.0 >= h.delivered {
                    break;
                }
                out.pop_first();
            }
        }
        for notice in h.notices {
            self.on_notice(ctx, notice);
        }
        self.peers.announce(slot, h.clock, h.pause);
        self.try_execute(ctx);
    }

    fn on_notice(&mut self, ctx: &mut Ctx<'_, DastNode>, n: Notice) {
        let id = n.info.id;
        if self.done.contains(&id) {
            return;
        }
        match n.state {
            NoticeState::Irt(ts) => {
                if !self.entries.contains_key(&id) && !self.below_frontier((ts, id)) {
                    self.insert(ctx, n.info, Status::Prepared, ts, None);
                }
            }
            NoticeState::Prepared(lb) => {
                // Below the frontier it was decided before this node executed past it
                // (it held the readyQ at `lb` until then): a stale notice.
                if !self.entries.contains_key(&id) && !self.below_frontier((lb, id)) {
                    self.insert(ctx, n.info, Status::Prepared, lb, None);
                }
            }
            NoticeState::Committed(ts) => self.commit(ctx, n.info, ts, false),
        }
    }

    fn below_frontier(&self, key: QKey) -> bool {
        self.frontier.is_some_and(|f| key <= f)
    }

    fn insert(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        info: TxnInfo,
        status: Status,
        key: Timestamp,
        proposal: Option<Timestamp>,
    ) {
        let id = info.id;
        let rec = EntryRecord {
            info,
            status,
            key,
            proposal,
        };
        self.persist(ctx, Record::Entry(rec.clone()));
        self.ready.insert((key, id));
        if let (Some(p), Status::Prepared) = (proposal, status) {
            self.wait.insert((p, id));
        }
        let mut entry = Entry::new(rec, ctx.now_ns());
        if let Some(early) = self.early_outputs.remove(&id) {
            for (piece, result) in early {
                if let Some(slot) = entry.outputs.get_mut(usize::from(piece)) {
                    slot.get_or_insert(result);
                }
            }
        }
        self.entries.insert(id, entry);
    }

    // ---- prepare, commit, abort ------------------------------------------------------

    /// An IRT's prepare (Alg. 1 line 15), from its coordinator or this node itself.
    pub fn on_prepare(&mut self, ctx: &mut Ctx<'_, DastNode>, info: TxnInfo, ts: Timestamp) {
        let id = info.id;
        let coord = info.coord;
        if !self.entries.contains_key(&id) {
            if self.done.contains(&id) || self.below_frontier((ts, id)) {
                return;
            }
            self.insert(ctx, info, Status::Prepared, ts, None);
        }
        self.reply(ctx, coord, Msg::PrepAck { id, proposal: ts });
    }

    /// A CRT dispatched by the region's manager (Alg. 2 lines 17-20): held in the waitQ at
    /// this node's anticipation — the manager's, raised above this node's clock if the
    /// clock has passed it — and acknowledged to the coordinator with it.
    pub fn on_prep_crt(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        info: TxnInfo,
        anticipated: Timestamp,
    ) {
        let id = info.id;
        let coord = info.coord;
        if self.done.contains(&id) {
            return;
        }
        let existing = self
            .entries
            .get(&id)
            .map(|e| (e.rec.status, e.rec.proposal));
        let proposal = match existing {
            Some((Status::Committed, _)) => return,
            Some((_, Some(p))) => p,
            _ => {
                let proposal = if self.opts.unsafe_skip_anticipation {
                    anticipated
                } else {
                    self.clock.above(anticipated)
                };
                if proposal > anticipated {
                    ctx.count("dast.anticipation_raised", 1);
                }
                let held = (!self.opts.unsafe_skip_anticipation).then_some(proposal);
                match self.entries.get_mut(&id) {
                    // Known from a peer's notification: now this node anticipates too.
                    Some(e) => {
                        e.rec.proposal = held;
                        let rec = e.rec.clone();
                        if let Some(p) = held {
                            self.wait.insert((p, id));
                        }
                        self.persist(ctx, Record::Entry(rec));
                    }
                    None => {
                        self.insert(ctx, info.clone(), Status::Prepared, anticipated, held);
                        self.notify_relevant(&info, NoticeState::Prepared(anticipated));
                    }
                }
                proposal
            }
        };
        self.reply(ctx, coord, Msg::PrepAck { id, proposal });
    }

    /// A commit (Alg. 1 line 20 / Alg. 2 lines 21-26), from the coordinator (`ack`) or a
    /// peer's notification. The coordinator's commit is acknowledged only once the
    /// committed entry is in the log: the ack lets the coordinator stop resending and,
    /// after `SETTLED_MEMORY` later decisions, forget the transaction, so an ack sent
    /// before the record could, after a crash that loses unsynced records, leave a
    /// prepared entry whose query the coordinator answers with presumed abort.
    pub fn commit(&mut self, ctx: &mut Ctx<'_, DastNode>, info: TxnInfo, ts: Timestamp, ack: bool) {
        let (id, coord) = (info.id, info.coord);
        self.commit_entry(ctx, info, ts);
        if ack {
            self.reply(ctx, coord, Msg::CommitAck { id });
        }
    }

    /// Records and queues a commit; every return leaves it durable (persisted here, or
    /// executed or dropped before).
    fn commit_entry(&mut self, ctx: &mut Ctx<'_, DastNode>, info: TxnInfo, ts: Timestamp) {
        let id = info.id;
        if self.done.contains(&id) {
            return;
        }
        let known = match self.entries.get(&id) {
            Some(e) if e.rec.status == Status::Committed => return,
            Some(e) => Some((e.rec.key, e.rec.proposal)),
            None => None,
        };
        if self.below_frontier((ts, id)) && !self.opts.unsafe_skip_anticipation {
            // Executed and forgotten (Lemma 1: nothing commits below what a node has
            // executed), known again only from a stale notification: drop it.
            ctx.count("dast.stale_commit", 1);
            if let Some((key, proposal)) = known {
                self.entries.remove(&id);
                self.ready.remove(&(key, id));
                if let Some(p) = proposal {
                    self.wait.remove(&(p, id));
                }
                let aborted = false;
                self.persist(ctx, Record::Dropped { id, aborted });
            }
            self.remember_done(id);
            return;
        }
        if self.below_frontier((ts, id)) {
            ctx.count("dast.executed_late", 1);
        }
        if let Some((key, proposal)) = known {
            self.ready.remove(&(key, id));
            if let Some(p) = proposal {
                self.wait.remove(&(p, id));
            }
        }
        let rec = EntryRecord {
            info: info.clone(),
            status: Status::Committed,
            key: ts,
            proposal: None,
        };
        self.persist(ctx, Record::Entry(rec.clone()));
        self.ready.insert((ts, id));
        let entry = self
            .entries
            .entry(id)
            .or_insert_with(|| Entry::new(rec.clone(), 0));
        entry.rec = rec;
        entry.since_ns = ctx.now_ns();
        if let Some(early) = self.early_outputs.remove(&id) {
            let entry = self.entries.get_mut(&id).expect("inserted");
            for (piece, result) in early {
                if let Some(slot) = entry.outputs.get_mut(usize::from(piece)) {
                    slot.get_or_insert(result);
                }
            }
        }
        if info.kind == Kind::Crt {
            if !self.inputs_ready(id) && ts > self.clock.last() {
                // Alg. 2 line 25: hold the clock below the CRT while its inputs travel
                // (a clock already past it, at a participant outside the quorum, has
                // nothing left to hold).
                self.wait.insert((ts, id));
                // A head within a nanosecond of the clock: cover what it handed out.
                self.keep_clock_bounds(ctx);
            }
            self.notify_relevant(&info, NoticeState::Committed(ts));
        }
        self.try_execute(ctx);
    }

    pub fn abort(&mut self, ctx: &mut Ctx<'_, DastNode>, id: TxnId) {
        let Some(e) = self.entries.remove(&id) else {
            return;
        };
        if e.rec.status == Status::Committed {
            self.violation = Some(format!("{}: abort of committed {id}", self.me));
            self.entries.insert(id, e);
            return;
        }
        self.ready.remove(&(e.rec.key, id));
        if let Some(p) = e.rec.proposal {
            self.wait.remove(&(p, id));
        }
        self.persist(ctx, Record::Dropped { id, aborted: true });
        self.remember_done(id);
        self.remember_aborted(id);
        for out in self.outbox.values_mut() {
            out.retain(|k, _| k.1 != id);
        }
        self.try_execute(ctx);
    }

    pub(super) fn reply(&mut self, ctx: &mut Ctx<'_, DastNode>, to: NodeId, msg: Msg) {
        if to == self.me {
            self.on_local(ctx, msg);
        } else {
            ctx.send(to, msg);
        }
    }

    /// A message this node sends itself (it participates in what it coordinates).
    fn on_local(&mut self, ctx: &mut Ctx<'_, DastNode>, msg: Msg) {
        let me = self.me;
        self.on_message(ctx, me, msg);
    }

    // ---- value dependencies and execution -------------------------------------------

    /// Whether every input this node's pieces need from other shards has arrived.
    fn inputs_ready(&self, id: TxnId) -> bool {
        let Some(e) = self.entries.get(&id) else {
            return false;
        };
        let pieces = &e.rec.info.txn.pieces;
        pieces.iter().filter(|p| p.shard == self.shard).all(|p| {
            p.dependencies().iter().all(|&d| {
                let d = usize::from(d);
                pieces[d].shard == self.shard || e.outputs[d].is_some()
            })
        })
    }

    pub fn on_output(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        id: TxnId,
        piece: u16,
        result: Result<PieceResult, AbortReason>,
    ) {
        if self.done.contains(&id) {
            return;
        }
        let Some(e) = self.entries.get_mut(&id) else {
            if self.early_outputs.len() < EARLY_OUTPUTS_MAX {
                self.early_outputs
                    .entry(id)
                    .or_default()
                    .push((piece, result));
            }
            return;
        };
        if let Some(slot) = e.outputs.get_mut(usize::from(piece)) {
            slot.get_or_insert(result);
        }
        let (status, key) = (e.rec.status, e.rec.key);
        if status == Status::Committed && self.inputs_ready(id) && self.wait.remove(&(key, id)) {
            ctx.count("dast.inputs_arrived_late", 1);
        }
        self.try_execute(ctx);
    }

    /// Another shard's replica asks for this node's outputs of `id`.
    pub fn on_input_query(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, id: TxnId) {
        if let Some(outputs) = self.recent_outputs.get(&id) {
            for (piece, result) in outputs.clone() {
                ctx.send(from, Msg::Output { id, piece, result });
            }
        }
    }

    /// Alg. 1 lines 21-27: executes committed transactions at the head of the readyQ once
    /// every node of the region has promised past them and their inputs are in.
    pub fn try_execute(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        while let Some(&(key, id)) = self.ready.first() {
            let status = self.entries.get(&id).map(|e| e.rec.status);
            // The cheap checks first: most calls (one per announcement) find the head
            // still undecided.
            if status != Some(Status::Committed) || !self.inputs_ready(id) {
                break;
            }
            if key >= self.horizon() {
                break;
            }
            self.execute(ctx, key, id);
        }
    }

    fn execute(&mut self, ctx: &mut Ctx<'_, DastNode>, key: Timestamp, id: TxnId) {
        let e = self.entries.remove(&id).expect("entry in readyQ");
        self.ready.remove(&(key, id));
        self.wait.remove(&(key, id));
        if self.below_frontier((key, id)) && !self.opts.unsafe_skip_anticipation {
            self.violation = Some(format!(
                "{}: executing {id} at {key} below the frontier {:?}",
                self.me, self.frontier
            ));
        }
        let txn = e.rec.info.txn.clone();
        let mut outputs = e.outputs;
        let mut overlay = Overlay {
            base: &self.store,
            writes: Vec::new(),
            map: FxHashMap::default(),
        };
        let mut mine = Vec::new();
        let mut failed = None;
        for (i, piece) in txn.pieces.iter().enumerate() {
            if piece.shard != self.shard {
                continue;
            }
            let inputs: Vec<Option<&PieceResult>> = outputs
                .iter()
                .map(|o| o.as_ref().and_then(|r| r.as_ref().ok()))
                .collect();
            let upstream_failure = piece.dependencies().iter().find_map(|&d| {
                outputs[usize::from(d)]
                    .as_ref()
                    .and_then(|r| r.clone().err())
            });
            let result = match upstream_failure {
                Some(reason) => Err(reason),
                None => execute_piece(piece, &inputs, &self.procedures, &mut overlay),
            };
            if let Err(reason) = &result {
                failed.get_or_insert(reason.clone());
            }
            outputs[i] = Some(result.clone());
            mine.push((i as u16, result));
        }
        let writes = if failed.is_some() {
            Vec::new()
        } else {
            overlay.writes
        };
        for (k, v) in &writes {
            self.store.insert(k.clone(), v.clone());
        }
        self.persist(ctx, Record::Executed { id, key, writes });
        self.frontier = Some((key, id));
        self.remember_done(id);
        ctx.count("dast.executed", 1);
        if self.rejoined {
            ctx.count("dast.executed_after_rejoin", 1);
        }
        self.push_outputs(ctx, &e.rec.info, &mine);
        let results = match failed {
            Some(reason) => Err(reason),
            None => Ok(mine
                .iter()
                .map(|(i, r)| (*i, r.clone().expect("no failure")))
                .collect()),
        };
        let shard = self.shard.0;
        self.remember_outputs(&e.rec.info, id, mine);
        self.remember_executed_irt(&e.rec.info, key);
        let coord = e.rec.info.coord;
        self.reply(ctx, coord, Msg::Executed { id, shard, results });
    }

    /// Keeps the outputs another shard's piece consumes, for its replicas' input queries
    /// (an output nobody consumes is never asked for).
    fn remember_outputs(&mut self, info: &TxnInfo, id: TxnId, mut mine: Vec<PieceOutput>) {
        let pieces = &info.txn.pieces;
        mine.retain(|(i, _)| {
            pieces
                .iter()
                .any(|p| p.shard != self.shard && p.dependencies().contains(i))
        });
        if !mine.is_empty() {
            self.recent_outputs.insert(id, mine);
        }
    }

    /// §4.1's push: this node's outputs go to the replicas of every other shard with a
    /// piece that consumes them.
    fn push_outputs(&mut self, ctx: &mut Ctx<'_, DastNode>, info: &TxnInfo, mine: &[PieceOutput]) {
        let pieces = &info.txn.pieces;
        for (i, result) in mine {
            let mut targets: Vec<ShardId> = pieces
                .iter()
                .filter(|p| p.shard != self.shard && p.dependencies().contains(i))
                .map(|p| p.shard)
                .collect();
            targets.sort_unstable();
            targets.dedup();
            for shard in targets {
                for &r in self.cluster.replicas(shard) {
                    let msg = Msg::Output {
                        id: info.id,
                        piece: *i,
                        result: result.clone(),
                    };
                    ctx.send(r, msg);
                }
            }
        }
    }

    // ---- periodic work ---------------------------------------------------------------

    /// Participants ask about transactions undecided too long, and for inputs that do
    /// not come.
    pub fn participant_tick(&mut self, ctx: &mut Ctx<'_, DastNode>) {
        if self.membership.out {
            return;
        }
        let now = ctx.now_ns();
        let mut stale: Vec<(TxnId, Status)> = self
            .entries
            .iter()
            .filter(|(_, e)| now.saturating_sub(e.since_ns) >= self.opts.query_ns)
            .map(|(id, e)| (*id, e.rec.status))
            .collect();
        stale.sort_by_key(|(id, _)| *id);
        for (id, status) in stale {
            let e = self.entries.get_mut(&id).expect("listed");
            e.since_ns = now;
            match status {
                Status::Prepared => {
                    let coord = e.rec.info.coord;
                    ctx.count("dast.queries", 1);
                    self.reply(ctx, coord, Msg::Query { id });
                }
                Status::Committed => {
                    let sources = self.missing_sources(id);
                    for shard in sources {
                        for &r in self.cluster.replicas(shard) {
                            ctx.send(r, Msg::InputQuery { id });
                        }
                    }
                }
            }
        }
    }

    fn missing_sources(&self, id: TxnId) -> Vec<ShardId> {
        let e = &self.entries[&id];
        let pieces = &e.rec.info.txn.pieces;
        let mut out: Vec<ShardId> = pieces
            .iter()
            .filter(|p| p.shard == self.shard)
            .flat_map(|p| p.dependencies())
            .filter(|&d| e.outputs[usize::from(d)].is_none())
            .map(|d| pieces[usize::from(d)].shard)
            .filter(|&s| s != self.shard)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(v) = &self.violation {
            return Err(v.clone());
        }
        if self.opts.stretch {
            if let Some(&(head, _)) = self.wait.first() {
                // The stretchable clock never hands out a timestamp at or above a CRT
                // this node holds (Alg. 1 lines 6-8).
                if self.clock.last() >= head && !self.opts.unsafe_skip_anticipation {
                    return Err(format!(
                        "{}: clock {} passed its waitQ head {head}",
                        self.me,
                        self.clock.last()
                    ));
                }
            }
        }
        if self.ready.len() != self.entries.len() {
            return Err(format!(
                "{}: readyQ holds {} keys for {} entries",
                self.me,
                self.ready.len(),
                self.entries.len()
            ));
        }
        Ok(())
    }

    pub fn shard_leader(&self) -> Option<NodeId> {
        None
    }
}

/// The largest timestamp below `ts` (for promises that must stop short of it).
pub(super) fn below(ts: Timestamp) -> Timestamp {
    if ts.frac > 0 {
        Timestamp::with_frac(ts.time_ns, ts.tiebreak, ts.frac - 1)
    } else if ts.tiebreak > 0 {
        Timestamp::with_frac(ts.time_ns, ts.tiebreak - 1, u32::MAX)
    } else {
        Timestamp::with_frac(ts.time_ns.saturating_sub(1), u32::MAX, u32::MAX)
    }
}

/// The edge nodes (replicas) of `region`.
pub fn region_edges(cluster: &Cluster, region: RegionId) -> Vec<NodeId> {
    crate::kit::placement::region_replicas(cluster, region)
}

/// Every replica of every shard the transaction touches.
pub fn participants(cluster: &Cluster, info: &TxnInfo) -> BTreeSet<NodeId> {
    info.txn
        .shards()
        .iter()
        .flat_map(|&s| cluster.replicas(s).iter().copied())
        .collect()
}

/// The store as a piece sees it while it runs: reads through its own writes.
struct Overlay<'a> {
    base: &'a FxHashMap<Key, Value>,
    writes: Vec<(Key, Value)>,
    map: FxHashMap<Key, Value>,
}

impl KvAccess for Overlay<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        self.map.get(key).or_else(|| self.base.get(key)).cloned()
    }
    fn put(&mut self, key: Key, value: Value) {
        self.map.insert(key.clone(), value.clone());
        self.writes.push((key, value));
    }
}
