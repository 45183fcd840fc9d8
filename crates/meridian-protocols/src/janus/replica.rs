//! A Janus replica (server): pre-accept, accept, commit (§4.1–4.3), execution in the order of
//! the dependency graph's strongly connected components (§4.4), inquiries for unknown
//! dependencies, and the recovery coordinator it becomes for a transaction it has waited
//! on too long (§5). Every state change is persisted before it is answered.

use super::graph::{Graph, GraphSnapshot, Status};
use super::options::Options;
use super::wire::{union, Ballot, Body, Cx, Dep, Deps, Known, Msg, Record, Tag, Timer};
use meridian_core::txn::{
    execute_piece, AbortReason, Key, KvAccess, PieceResult, Procedures, Value,
};
use meridian_core::{Cluster, NodeId, ShardId, TxnId};
use rand::Rng;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Counter: state requests sent (after a restart, or on meeting a transaction of this
/// shard that a peer executed and forgot).
pub const STATE_FETCHES: &str = "janus.state_fetches";

/// Counter: recoveries that found a transaction of this shard executed and forgotten only
/// by other shards' replicas (its decision cannot reach this shard any more).
pub const DECISIONS_LOST: &str = "janus.decisions_lost";

/// Counter: peer states installed (the peer had executed more, and all this replica had).
pub const STATE_TRANSFERS: &str = "janus.state_transfers";

/// Counter: executed transactions of this shard forgotten after `keep_ms_max` although
/// some peer had not reported them executed (that peer was away: it catches up by state
/// transfer). Zero when every replica keeps up.
pub const FORGOTTEN_UNACKNOWLEDGED: &str = "janus.forgotten_unacknowledged";

/// What a shard's pieces of one transaction produced.
type PieceOutcome = Result<Vec<(u16, PieceResult)>, AbortReason>;

/// A recovery this replica coordinates (§5).
#[derive(Debug)]
struct Recovery {
    body: Arc<Body>,
    ballot: Ballot,
    /// Prepare replies, or accept acknowledgements once `accepting` holds the chosen deps.
    replies: Vec<(NodeId, Known)>,
    accepting: Option<Deps>,
    acks: Vec<NodeId>,
    started_ns: u64,
}

/// One replica of one shard.
#[derive(Debug)]
pub struct Replica {
    me: NodeId,
    shard: ShardId,
    opts: Options,
    cluster: Arc<Cluster>,
    procedures: Arc<Procedures>,
    graph: Graph,
    store: FxHashMap<Key, Value>,
    recoveries: FxHashMap<TxnId, Recovery>,
    /// When each missing dependency was last inquired about (bounded: cleared each pass).
    inquired: FxHashMap<TxnId, u64>,
    records: usize,
    /// Rebuilt from durable records: it missed what its shard committed while it was down.
    restarted: bool,
    /// The peer last asked for its state, and when (one request per `retry_ms`).
    fetching: Option<(NodeId, u64)>,
    /// The other replicas of this shard.
    peers: Vec<NodeId>,
}

/// A write buffer over the store: a shard's pieces of one transaction apply all or nothing.
struct Overlay<'a> {
    base: &'a FxHashMap<Key, Value>,
    writes: FxHashMap<Key, Value>,
}

impl KvAccess for Overlay<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        self.writes.get(key).or_else(|| self.base.get(key)).cloned()
    }
    fn put(&mut self, key: Key, value: Value) {
        self.writes.insert(key, value);
    }
}

impl Replica {
    /// A replica rebuilt from its durable records (empty: a fresh one).
    pub fn restore(
        me: NodeId,
        shard: ShardId,
        opts: Options,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        recovered: &[Record],
    ) -> Replica {
        let peers = cluster
            .replicas(shard)
            .iter()
            .copied()
            .filter(|&r| r != me)
            .collect();
        let mut replica = Replica {
            me,
            peers,
            shard,
            opts,
            cluster,
            procedures,
            graph: Graph::new(shard),
            store: FxHashMap::default(),
            recoveries: FxHashMap::default(),
            inquired: FxHashMap::default(),
            records: 0,
            restarted: !recovered.is_empty(),
            fetching: None,
        };
        for record in recovered {
            replica.replay(record);
        }
        replica
    }

    /// Applies one durable record (the same state changes the handlers made).
    fn replay(&mut self, record: &Record) {
        match record {
            Record::Snapshot(snap) => {
                self.graph = Graph::new(self.shard);
                self.graph.restore(snap, 0);
                self.store = snap.store.iter().cloned().collect();
            }
            Record::PreAccepted { body, deps, ballot } => {
                if !self.graph.vertices.contains_key(&body.tag.id) {
                    self.graph.note_keys(body);
                    self.graph
                        .insert(body.clone(), Status::PreAccepted, deps.clone(), 0);
                }
                self.promise(body.tag.id, *ballot);
            }
            Record::Promised { id, ballot } => self.promise(*id, *ballot),
            Record::Accepted { body, ballot, deps } => self.accept(body, *ballot, deps, 0),
            Record::Committed { body, deps } => self.graph.commit(body, deps.clone(), 0),
            Record::Executed { id, writes } => {
                self.store.extend(writes.iter().cloned());
                self.graph.mark_executed(*id, 0);
            }
            Record::Started { .. } => {}
        }
    }

    fn promise(&mut self, id: TxnId, ballot: Ballot) {
        if let Some(v) = self.graph.vertices.get_mut(&id) {
            v.promised = v.promised.max(ballot);
        }
    }

    fn accept(&mut self, body: &Arc<Body>, ballot: Ballot, deps: &Deps, now_ns: u64) {
        if !self.graph.vertices.contains_key(&body.tag.id) {
            self.graph.note_keys(body);
            self.graph
                .insert(body.clone(), Status::Accepted, deps.clone(), now_ns);
        }
        let v = self.graph.vertices.get_mut(&body.tag.id).expect("inserted");
        if v.status < Status::Committed {
            v.status = Status::Accepted;
            v.accepted = ballot;
            v.promised = v.promised.max(ballot);
            v.deps = deps.clone();
        }
    }

    /// Persists `record`, checkpointing every `checkpoint_every` records, or every state's
    /// size of records once the store and graph are larger (`kit::log::checkpoint_due`).
    fn log(&mut self, ctx: &mut Cx<'_>, record: Record) {
        self.records += 1;
        let state_entries = self.store.len() + self.graph.vertices.len();
        if crate::kit::log::checkpoint_due(self.records, self.opts.checkpoint_every, state_entries)
        {
            self.checkpoint(ctx);
        } else {
            ctx.persist(record);
        }
    }

    /// Everything this replica knows, store included.
    fn snapshot(&self) -> GraphSnapshot {
        self.graph
            .snapshot(crate::kit::log::sorted_entries(&self.store))
    }

    /// A snapshot record, which subsumes every earlier one.
    fn checkpoint(&mut self, ctx: &mut Cx<'_>) {
        self.records = 0;
        ctx.checkpoint(Record::Snapshot(Box::new(self.snapshot())));
    }

    pub fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        for v in self.graph.vertices.values_mut() {
            v.touched_ns = now;
        }
        self.graph.restamp_forget(now);
        self.graph.dirty = true;
        if self.restarted {
            // What the shard committed while this replica was down reaches it only as
            // dependencies of later transactions, one inquiry round trip per link of a
            // chain; a peer's state brings all of it at once.
            if let Some(peer) = self.nearest_peer() {
                self.fetch_state(ctx, peer);
            }
        }
        self.tick(ctx);
    }

    pub fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        if timer == Timer::Tick {
            self.tick(ctx);
        }
    }

    pub fn on_batch_end(&mut self, ctx: &mut Cx<'_>) {
        if self.graph.dirty {
            self.graph.dirty = false;
            self.execute_ready(ctx);
        }
    }

    pub fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::PreAccept { body } => self.on_pre_accept(ctx, from, body),
            Msg::Accept { body, ballot, deps } => self.on_accept(ctx, from, body, ballot, deps),
            Msg::Commit { body, deps } => self.on_commit(ctx, body, deps),
            Msg::Prepare { body, ballot } => self.on_prepare(ctx, from, body, ballot),
            Msg::PrepareReply {
                id,
                ballot,
                ok,
                known,
            } => self.on_prepare_reply(ctx, from, id, ballot, ok, known),
            Msg::AcceptReply { id, ballot, ok } => self.on_accept_reply(ctx, from, id, ballot, ok),
            Msg::Inquire { tag } => self.on_inquire(ctx, from, tag),
            Msg::Executed { tag } => self.on_executed(ctx, from, tag),
            Msg::FetchState => self.on_fetch_state(ctx, from),
            Msg::State { snapshot } => self.on_state(ctx, from, &snapshot),
            Msg::ExecutedSlots { executed } => {
                if self.peers.contains(&from) {
                    self.graph.note_peer_executed(from, &executed);
                }
            }
            Msg::PreAcceptReply { .. } | Msg::Result { .. } => {}
        }
    }

    fn touch(&mut self, id: TxnId, now_ns: u64) {
        if let Some(v) = self.graph.vertices.get_mut(&id) {
            v.touched_ns = now_ns;
        }
    }

    fn on_pre_accept(&mut self, ctx: &mut Cx<'_>, from: NodeId, body: Arc<Body>) {
        let id = body.tag.id;
        if self.graph.forgotten(&body.tag) {
            return;
        }
        self.touch(id, ctx.now_ns());
        let reply = match self.graph.vertices.get(&id) {
            Some(v) if v.status == Status::PreAccepted && v.promised == Ballot::ZERO => {
                Msg::PreAcceptReply {
                    id,
                    ok: true,
                    deps: v.deps.clone(),
                }
            }
            Some(_) => Msg::PreAcceptReply {
                id,
                ok: false,
                deps: Deps::default(),
            },
            None => {
                let deps = self.graph.conflicts(&body);
                let now = ctx.now_ns();
                self.graph
                    .insert(body.clone(), Status::PreAccepted, deps.clone(), now);
                self.log(
                    ctx,
                    Record::PreAccepted {
                        body,
                        deps: deps.clone(),
                        ballot: Ballot::ZERO,
                    },
                );
                Msg::PreAcceptReply { id, ok: true, deps }
            }
        };
        ctx.send(from, reply);
    }

    fn on_accept(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        body: Arc<Body>,
        ballot: Ballot,
        deps: Deps,
    ) {
        let id = body.tag.id;
        if self.graph.forgotten(&body.tag) {
            ctx.send(
                from,
                Msg::AcceptReply {
                    id,
                    ballot,
                    ok: true,
                },
            );
            return;
        }
        self.touch(id, ctx.now_ns());
        let promised = self
            .graph
            .vertices
            .get(&id)
            .map_or(Ballot::ZERO, |v| v.promised);
        let ok = ballot >= promised;
        if ok {
            self.accept(&body, ballot, &deps, ctx.now_ns());
            self.log(ctx, Record::Accepted { body, ballot, deps });
        }
        ctx.send(from, Msg::AcceptReply { id, ballot, ok });
    }

    fn on_commit(&mut self, ctx: &mut Cx<'_>, body: Arc<Body>, deps: Deps) {
        let id = body.tag.id;
        if self.graph.is_done(&body.tag)
            || self
                .graph
                .vertices
                .get(&id)
                .is_some_and(|v| v.status >= Status::Committed)
        {
            return;
        }
        self.graph.commit(&body, deps.clone(), ctx.now_ns());
        self.recoveries.remove(&id);
        self.inquired.remove(&id);
        // Another shard's transaction learned by inquiry need not survive a crash.
        if self.graph.is_local(&body.tag) {
            self.log(ctx, Record::Committed { body, deps });
        }
    }

    fn on_prepare(&mut self, ctx: &mut Cx<'_>, from: NodeId, body: Arc<Body>, ballot: Ballot) {
        let id = body.tag.id;
        if self.graph.forgotten(&body.tag) {
            let known = Known::Executed;
            ctx.send(
                from,
                Msg::PrepareReply {
                    id,
                    ballot,
                    ok: true,
                    known,
                },
            );
            return;
        }
        if !self.graph.vertices.contains_key(&id) {
            let deps = self.graph.conflicts(&body);
            let now = ctx.now_ns();
            self.graph
                .insert(body.clone(), Status::PreAccepted, deps.clone(), now);
            self.promise(id, ballot);
            self.log(ctx, Record::PreAccepted { body, deps, ballot });
        } else {
            let promised = self.graph.vertices[&id].promised;
            // The same ballot again is its recoverer's retransmission.
            if ballot < promised {
                let known = Known::Executed;
                ctx.send(
                    from,
                    Msg::PrepareReply {
                        id,
                        ballot: promised,
                        ok: false,
                        known,
                    },
                );
                return;
            }
            self.promise(id, ballot);
            self.log(ctx, Record::Promised { id, ballot });
        }
        self.touch(id, ctx.now_ns());
        let known = self.graph.known(id).expect("known");
        ctx.send(
            from,
            Msg::PrepareReply {
                id,
                ballot,
                ok: true,
                known,
            },
        );
    }

    fn on_inquire(&mut self, ctx: &mut Cx<'_>, from: NodeId, tag: Tag) {
        match self.graph.vertices.get(&tag.id) {
            Some(v) if v.status >= Status::Committed => {
                let msg = Msg::Commit {
                    body: v.body.clone(),
                    deps: v.deps.clone(),
                };
                ctx.send(from, msg);
            }
            None if self.graph.forgotten(&tag) => ctx.send(from, Msg::Executed { tag }),
            _ => {}
        }
    }

    /// A peer executed and forgot `tag`: another shard's transaction is then placed; one
    /// of this shard that this replica has not executed means it lags beyond what its
    /// peers keep, and only their state can bring it up to date.
    fn on_executed(&mut self, ctx: &mut Cx<'_>, from: NodeId, tag: Tag) {
        if !self.graph.is_local(&tag) {
            let capacity = self.opts.window;
            self.graph.note_foreign_done(tag.id, capacity);
        } else if !self.graph.is_done(&tag) && self.cluster.shard_of_node(from) == Some(self.shard)
        {
            self.fetch_state(ctx, from);
        }
    }

    // ---- state transfer -----------------------------------------------------------------

    /// The closest other replica of this shard.
    fn nearest_peer(&self) -> Option<NodeId> {
        self.peers.iter().copied().min_by(|&a, &b| {
            let (da, db) = (
                self.cluster.rtt_ms(self.me, a),
                self.cluster.rtt_ms(self.me, b),
            );
            da.total_cmp(&db).then(a.cmp(&b))
        })
    }

    /// Asks `peer` for its state, at most once per `retry_ms`.
    fn fetch_state(&mut self, ctx: &mut Cx<'_>, peer: NodeId) {
        let now = ctx.now_ns();
        if self
            .fetching
            .is_some_and(|(_, at)| now.saturating_sub(at) < self.opts.retry_ns)
        {
            return;
        }
        self.fetching = Some((peer, now));
        ctx.count(STATE_FETCHES, 1);
        ctx.send(peer, Msg::FetchState);
    }

    fn on_fetch_state(&mut self, ctx: &mut Cx<'_>, from: NodeId) {
        if self.cluster.shard_of_node(from) == Some(self.shard) {
            let snapshot = Arc::new(self.snapshot());
            ctx.send(from, Msg::State { snapshot });
        }
    }

    /// Installs a peer's state if it executed everything this replica did and more (every
    /// replica executes its shard's transactions in one order, so the peer's store is this
    /// replica's, further along), then persists it before anything else is answered.
    fn on_state(&mut self, ctx: &mut Cx<'_>, from: NodeId, snap: &GraphSnapshot) {
        if self.fetching.map(|(peer, _)| peer) != Some(from) {
            return;
        }
        self.fetching = None;
        if !self.graph.executed_within(&snap.executed)
            || !self.graph.executed_beyond(&snap.executed)
        {
            return;
        }
        self.graph.adopt(snap, ctx.now_ns());
        self.store = snap.store.iter().cloned().collect();
        let graph = &self.graph;
        self.recoveries.retain(|id, _| {
            graph
                .vertices
                .get(id)
                .is_some_and(|v| v.status < Status::Committed)
        });
        self.checkpoint(ctx);
        ctx.count(STATE_TRANSFERS, 1);
    }

    // ---- execution (§4.4) ---------------------------------------------------------------

    fn execute_ready(&mut self, ctx: &mut Cx<'_>) {
        let pass = self.graph.executable();
        let now = ctx.now_ns();
        for id in pass.order {
            let body = self.graph.vertices[&id].body.clone();
            if self.graph.is_local(&body.tag) {
                let (outcome, writes) = self.run_pieces(&body);
                self.store.extend(writes.iter().cloned());
                self.graph.mark_executed(id, now);
                // The execution itself is durable: replaying commits later could meet a
                // graph whose other-shard parts were forgotten, and order differently.
                self.log(ctx, Record::Executed { id, writes });
                ctx.count("janus.executed", 1);
                ctx.send(
                    body.coordinator,
                    Msg::Result {
                        id,
                        shard: self.shard,
                        outcome,
                    },
                );
            } else {
                self.graph.mark_executed(id, now);
            }
        }
        for tag in pass.missing {
            self.inquire(ctx, tag, false);
        }
    }

    /// Runs this shard's pieces of `body` in piece order, all or nothing: the results and
    /// the writes to apply.
    fn run_pieces(&self, body: &Body) -> (PieceOutcome, Vec<(Key, Value)>) {
        let mut overlay = Overlay {
            base: &self.store,
            writes: FxHashMap::default(),
        };
        let mut results: Vec<Option<PieceResult>> = vec![None; body.pieces.len()];
        let mut out = Vec::new();
        for (i, piece) in body.pieces.iter().enumerate() {
            if piece.shard != self.shard {
                continue;
            }
            let inputs: Vec<Option<&PieceResult>> = results.iter().map(Option::as_ref).collect();
            match execute_piece(piece, &inputs, &self.procedures, &mut overlay) {
                Ok(result) => {
                    out.push((i as u16, result.clone()));
                    results[i] = Some(result);
                }
                Err(reason) => return (Err(reason), Vec::new()),
            }
        }
        let mut writes: Vec<(Key, Value)> = overlay.writes.into_iter().collect();
        writes.sort_by(|a, b| a.0.cmp(&b.0));
        (Ok(out), writes)
    }

    /// Asks for a committed dependency's decision: first the nearest replica of each of its
    /// shards, on repeats every replica.
    fn inquire(&mut self, ctx: &mut Cx<'_>, tag: Tag, force: bool) {
        let now = ctx.now_ns();
        let last = self.inquired.get(&tag.id).copied();
        if !force && last.is_some() {
            return;
        }
        if last.is_some_and(|t| now.saturating_sub(t) < self.opts.retry_ns) {
            return;
        }
        if self.inquired.len() >= self.opts.window && last.is_none() {
            return;
        }
        self.inquired.insert(tag.id, now);
        ctx.count("janus.inquiries", 1);
        for shard in tag.shards() {
            let replicas = self.cluster.replicas(shard);
            let targets: Vec<NodeId> = if last.is_none() {
                let nearest =
                    replicas
                        .iter()
                        .copied()
                        .filter(|&r| r != self.me)
                        .min_by(|&a, &b| {
                            let (da, db) = (
                                self.cluster.rtt_ms(self.me, a),
                                self.cluster.rtt_ms(self.me, b),
                            );
                            da.total_cmp(&db).then(a.cmp(&b))
                        });
                nearest.into_iter().collect()
            } else {
                replicas.iter().copied().filter(|&r| r != self.me).collect()
            };
            ctx.multicast(targets, &Msg::Inquire { tag: tag.clone() });
        }
    }

    // ---- periodic duties ----------------------------------------------------------------

    fn tick(&mut self, ctx: &mut Cx<'_>) {
        let now = ctx.now_ns();
        let (keep, keep_max) = (self.opts.keep_ns, self.opts.keep_max_ns);
        let unacknowledged = self.graph.forget(now, keep, keep_max, &self.peers);
        if unacknowledged > 0 {
            ctx.count(FORGOTTEN_UNACKNOWLEDGED, unacknowledged);
        }
        let executed = Arc::new(self.graph.executed_slots());
        ctx.multicast(self.peers.clone(), &Msg::ExecutedSlots { executed });
        // Inquiries still unanswered are repeated to every replica.
        let missing = self.graph.unknown_dependencies();
        self.inquired
            .retain(|id, _| missing.iter().any(|t| t.id == *id));
        for tag in missing {
            self.inquire(ctx, tag, true);
        }
        self.recover_stuck(ctx, now);
        ctx.set_timer(self.opts.tick_ns, Timer::Tick);
    }

    /// §5: a transaction not committed after `recovery_ms` of silence is recovered by this
    /// replica with a higher ballot (a random extra delay spreads competing recoverers).
    fn recover_stuck(&mut self, ctx: &mut Cx<'_>, now: u64) {
        let mut stuck: Vec<TxnId> = self
            .graph
            .vertices
            .iter()
            .filter(|(_, v)| v.status < Status::Committed)
            .filter(|(_, v)| now.saturating_sub(v.touched_ns) >= self.opts.recovery_ns)
            .map(|(&id, _)| id)
            .collect();
        stuck.sort_unstable();
        for id in stuck {
            let running = self
                .recoveries
                .get(&id)
                .is_some_and(|r| now.saturating_sub(r.started_ns) < self.opts.recovery_ns);
            if running {
                self.resend_recovery(ctx, id);
                continue;
            }
            let jitter = ctx.rng().gen_range(0..self.opts.recovery_ns.max(1));
            let v = self.graph.vertices.get_mut(&id).expect("stuck vertex");
            v.touched_ns = now + jitter;
            let round = v.promised.round.max(v.accepted.round) + 1;
            let ballot = Ballot {
                round,
                node: self.me.0,
            };
            let body = v.body.clone();
            ctx.count("janus.recoveries", 1);
            self.recoveries.insert(
                id,
                Recovery {
                    body,
                    ballot,
                    replies: Vec::new(),
                    accepting: None,
                    acks: Vec::new(),
                    started_ns: now,
                },
            );
            self.resend_recovery(ctx, id);
        }
    }

    fn participants(&self, body: &Body) -> Vec<NodeId> {
        body.tag
            .shards()
            .flat_map(|s| self.cluster.replicas(s).iter().copied())
            .collect()
    }

    fn resend_recovery(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(r) = self.recoveries.get(&id) else {
            return;
        };
        let body = r.body.clone();
        let msg = match &r.accepting {
            None => Msg::Prepare {
                body: body.clone(),
                ballot: r.ballot,
            },
            Some(deps) => Msg::Accept {
                body: body.clone(),
                ballot: r.ballot,
                deps: deps.clone(),
            },
        };
        ctx.multicast(self.participants(&body), &msg);
    }

    /// Whether `nodes` hold a majority of every shard `body` touches.
    fn majority_each(&self, body: &Body, nodes: &[NodeId]) -> bool {
        body.tag.majority_each(&self.cluster, nodes)
    }

    fn on_prepare_reply(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        id: TxnId,
        ballot: Ballot,
        ok: bool,
        known: Known,
    ) {
        let Some(r) = self.recoveries.get_mut(&id) else {
            return;
        };
        if r.accepting.is_some() || (ok && ballot != r.ballot) {
            return;
        }
        if !ok {
            // A higher ballot: give way; the next tick may start over above it.
            if let Some(v) = self.graph.vertices.get_mut(&id) {
                v.promised = v.promised.max(ballot);
            }
            self.recoveries.remove(&id);
            return;
        }
        if !r.replies.iter().any(|(n, _)| *n == from) {
            r.replies.push((from, known));
        }
        let nodes: Vec<NodeId> = r.replies.iter().map(|(n, _)| *n).collect();
        let body = r.body.clone();
        if !self.majority_each(&body, &nodes) {
            return;
        }
        let r = self.recoveries.get_mut(&id).expect("recovery");
        let decision = choose(&r.replies);
        match decision {
            Choice::Done(executed_at) => {
                self.recoveries.remove(&id);
                self.recovered_executed(ctx, &body.tag, &executed_at);
            }
            Choice::Commit(deps) => {
                self.recoveries.remove(&id);
                ctx.multicast(self.participants(&body), &Msg::Commit { body, deps });
            }
            Choice::Accept(deps) => {
                r.accepting = Some(deps);
                self.resend_recovery(ctx, id);
            }
        }
    }

    fn on_accept_reply(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        id: TxnId,
        ballot: Ballot,
        ok: bool,
    ) {
        let Some(r) = self.recoveries.get_mut(&id) else {
            return;
        };
        if r.accepting.is_none() || ballot != r.ballot {
            return;
        }
        if !ok {
            self.recoveries.remove(&id);
            return;
        }
        if !r.acks.contains(&from) {
            r.acks.push(from);
        }
        let (body, acks) = (r.body.clone(), r.acks.clone());
        if self.majority_each(&body, &acks) {
            let deps = self
                .recoveries
                .remove(&id)
                .and_then(|r| r.accepting)
                .expect("deps");
            ctx.multicast(self.participants(&body), &Msg::Commit { body, deps });
        }
    }

    /// A recovery found `tag` executed and forgotten at `executed_at`: committed, with its
    /// decision gone there. A peer of this shard among them has its effects (fetch its
    /// state); if only other shards' replicas executed it, its decision is lost to this
    /// shard (counted: `keep_ms` was too short for how long this shard was unreachable).
    fn recovered_executed(&mut self, ctx: &mut Cx<'_>, tag: &Tag, executed_at: &[NodeId]) {
        if !self.graph.is_local(tag) || self.graph.is_done(tag) {
            return;
        }
        let peer = executed_at
            .iter()
            .copied()
            .find(|&n| self.cluster.shard_of_node(n) == Some(self.shard));
        match peer {
            Some(peer) => self.fetch_state(ctx, peer),
            None => ctx.count(DECISIONS_LOST, 1),
        }
    }

    /// The value this replica's store holds for `key` (tests).
    #[cfg(test)]
    pub(crate) fn stored(&self, key: &Key) -> Option<&Value> {
        self.store.get(key)
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

/// What a recovery coordinator does with a majority of every shard's prepare replies (§5).
#[derive(Debug, PartialEq)]
pub(crate) enum Choice {
    /// These replicas executed and forgot it: it was committed; nothing to recover (a
    /// replica of the recoverer's shard among them can send its state).
    Done(Vec<NodeId>),
    Commit(Deps),
    Accept(Deps),
}

/// Committed anywhere → that decision; else the value accepted at the highest ballot; else
/// the union of the pre-accepted answers. The union is also the fast path's value when the
/// original coordinator may have committed on it: a fast quorum is every replica, so every
/// replica in a majority holds the same answer.
pub(crate) fn choose(replies: &[(NodeId, Known)]) -> Choice {
    if let Some(deps) = replies.iter().find_map(|(_, k)| match k {
        Known::Committed(deps) => Some(deps),
        _ => None,
    }) {
        return Choice::Commit(deps.clone());
    }
    let executed_at: Vec<NodeId> = replies
        .iter()
        .filter(|(_, k)| *k == Known::Executed)
        .map(|(n, _)| *n)
        .collect();
    if !executed_at.is_empty() {
        return Choice::Done(executed_at);
    }
    let mut accepted: Option<(Ballot, &Deps)> = None;
    let mut pre_accepted: Vec<&[Dep]> = Vec::new();
    for (_, known) in replies {
        match known {
            Known::Executed => {}
            Known::Committed(_) => {}
            Known::Accepted(b, deps) => {
                if accepted.is_none_or(|(best, _)| *b > best) {
                    accepted = Some((*b, deps));
                }
            }
            Known::PreAccepted(deps) => pre_accepted.push(deps),
        }
    }
    match accepted {
        Some((_, deps)) => Choice::Accept(deps.clone()),
        None => Choice::Accept(union(pre_accepted)),
    }
}
