//! An edge node: a replica of one shard, a member of its region's log (a Raft group of the
//! region's edge nodes, whose leader is the region's sequencer), the executor of that log
//! for its shard, and the coordinator of its machine's clients.

use super::coord::Coordinator;
use super::exec::{ExecState, Executor};
use super::logged::Logged;
use super::options::{Options, Release};
use super::wire::{Command, Entry, Msg, PieceOutcome, Record, Timer, TxnKey};
use super::{election_ticks, persist, region_edges, SlogNode, ORDERER};
use crate::raft_group::{RaftGroup, RaftTiming};
use meridian_core::node::Ctx;
use meridian_core::{Cluster, NodeId, NodeRole, Procedures, RegionId, RequestId, ShardId};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A member's snapshot: its own state machine right after one `Compact` command — the
/// log's bookkeeping and its shard's executor. Members of one region's log are replicas
/// of different shards, so a snapshot serves only the member that took it (and replicas
/// of its shard); compaction stays at or below what every member holds, so no member is
/// ever sent another's (`RaftGroup::durable_everywhere`).
#[derive(Debug, Serialize, Deserialize)]
struct EdgeState {
    shard: ShardId,
    logged: Logged,
    next_g: u64,
    future: Vec<(u64, Vec<Entry>)>,
    exec: ExecState,
}

/// The compaction state of an edge node (the module doc of `mod.rs`, "Compaction").
#[derive(Debug, Default)]
struct Compaction {
    /// The snapshot taken at the last `Compact` applied: its index and bytes.
    pending: Option<(u64, Vec<u8>)>,
    /// The index of the last `Compact` applied.
    last_index: u64,
    /// Leader: when it last proposed one.
    proposed_ns: Option<u64>,
    /// Inputs from the records, applied after the snapshot (if any) at the first drain.
    recovered_inputs: Vec<(TxnKey, u16, PieceOutcome)>,
    /// A snapshot this node cannot use (another shard's), reported by `check_invariants`.
    violation: Option<String>,
    /// The largest log this node held (entries), and the most transaction keys it
    /// remembered to skip resent orders (at a `Compact`), for the counters.
    peak_entries: u64,
    peak_logged: u64,
}

#[derive(Debug)]
pub struct Edge {
    pub id: NodeId,
    pub(super) cluster: Arc<Cluster>,
    pub(super) opts: Options,
    raft: RaftGroup,
    /// The region's log as applied: transactions logged (duplicates of a resent order
    /// are skipped, `logged.rs`), the next global batch, and those that came ahead of it.
    logged: Logged,
    next_g: u64,
    future: BTreeMap<u64, Vec<Entry>>,
    /// Sequencer (while leading): the batch being filled, global batches proposed (when).
    pending: Vec<Entry>,
    pending_keys: FxHashSet<TxnKey>,
    proposed_g: BTreeMap<u64, u64>,
    orderer_hint: Option<NodeId>,
    pub(super) exec: Executor,
    pub(super) coord: Coordinator,
    compaction: Compaction,
}

impl Edge {
    /// Edge node `id`, fresh or rebuilt from its records: the Raft log (replayed through
    /// the executor once it commits again) and the remote inputs it had received.
    pub fn restore(
        id: NodeId,
        cluster: Arc<Cluster>,
        opts: Options,
        procedures: Arc<Procedures>,
        recovered: &[Record],
    ) -> Edge {
        let region = cluster.region_of(id);
        let members = region_edges(&cluster, region);
        let position = members.iter().position(|&m| m == id).unwrap_or(0);
        let timing = RaftTiming {
            election_ticks: election_ticks(position),
            heartbeat_ticks: 2,
        };
        let shard = cluster
            .shard_of_node(id)
            .expect("an edge node is a replica of a shard");
        let release_on_pieces = opts.release == Release::Pieces;
        let exec = Executor::new(
            shard,
            cluster.clone(),
            procedures,
            opts.outputs_kept,
            release_on_pieces,
        );
        let mut raft_records = Vec::new();
        let mut compaction = Compaction::default();
        for record in recovered {
            match record {
                Record::Raft(r) => raft_records.push(r.clone()),
                Record::Input {
                    key,
                    piece,
                    outcome,
                } => compaction
                    .recovered_inputs
                    .push((*key, *piece, outcome.clone())),
            }
        }
        let raft = RaftGroup::new(id, members, timing, &raft_records)
            .unwrap_or_else(|e| panic!("slog edge node {id}: {e}"));
        Edge {
            id,
            coord: Coordinator::default(),
            cluster,
            opts,
            raft,
            logged: Logged::default(),
            next_g: 1,
            future: BTreeMap::new(),
            pending: Vec::new(),
            pending_keys: FxHashSet::default(),
            proposed_g: BTreeMap::new(),
            orderer_hint: None,
            exec,
            compaction,
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        self.coord.boot(ctx);
        ctx.set_timer(self.opts.tick_ns, Timer::Tick);
        ctx.set_timer(self.opts.batch_ns, Timer::Batch);
        self.drain(ctx);
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, SlogNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Submit { request, txn } => self.submit(ctx, from, request, txn),
            Msg::Order { entry, forwarded } => self.order(ctx, entry, forwarded),
            Msg::Logged { key } => self.logged(from, key),
            Msg::Raft(m) => {
                // A frame that does not decode or comes from a non-member is dropped.
                let _ = self.raft.step(from, &m);
                self.drain(ctx);
            }
            Msg::GlobalBatch {
                g,
                entries,
                forwarded,
            } => self.global_batch(ctx, from, g, entries, forwarded),
            Msg::Input {
                key,
                piece,
                outcome,
            } => {
                if self.exec.on_input(ctx, key, piece, outcome.clone()) {
                    ctx.persist(Record::Input {
                        key,
                        piece,
                        outcome,
                    });
                }
            }
            Msg::InputQuery { key, piece } => self.exec.on_query(ctx, from, key, piece),
            Msg::Finished { key, shard } => self.exec.on_finished(ctx, key, shard),
            Msg::FinishedQuery { key } => self.exec.on_finished_query(ctx, from, key),
            Msg::Results { key, pieces } => self.results(ctx, key, pieces),
            Msg::Done { .. } | Msg::GlobalAck { .. } => {}
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, SlogNode>, timer: Timer) {
        match timer {
            Timer::Tick => {
                self.raft.tick();
                self.coord_tick(ctx);
                self.exec.tick(ctx, self.opts.retry_ns);
                ctx.set_timer(self.opts.tick_ns, Timer::Tick);
            }
            Timer::Batch => {
                self.close_batch();
                self.propose_compaction(ctx.now_ns());
                ctx.set_timer(self.opts.batch_ns, Timer::Batch);
            }
        }
        self.drain(ctx);
    }

    /// The sequencer closes its batch into the region's log (SLOG §3.1, every `batch_ms`).
    fn close_batch(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.pending_keys.clear();
        let batch = std::mem::take(&mut self.pending);
        if self.raft.is_leader() {
            // A batch lost with a leadership change is ordered again by its coordinators.
            self.raft.propose(encode(&Command::Batch(batch)));
        }
    }

    /// An order of a single-home transaction (or, in the broken variant, of a
    /// multi-home one's piece for this region).
    fn order(&mut self, ctx: &mut Ctx<'_, SlogNode>, entry: Entry, forwarded: bool) {
        if !self.raft.is_leader() {
            self.forward(
                ctx,
                Msg::Order {
                    entry,
                    forwarded: true,
                },
                forwarded,
            );
            return;
        }
        if self.logged.settled(&entry.key) {
            ctx.send(entry.key.coordinator, Msg::Logged { key: entry.key });
        } else if self.pending_keys.insert(entry.key) {
            self.pending.push(entry);
        }
    }

    /// A non-leader hands a message on to the leader it knows, once.
    fn forward(&self, ctx: &mut Ctx<'_, SlogNode>, msg: Msg, forwarded: bool) {
        if let (false, Some(leader)) = (forwarded, self.raft.leader()) {
            if leader != self.id {
                ctx.send(leader, msg);
            }
        }
    }

    /// A global batch from the orderer: the leader puts it into the region's log.
    fn global_batch(
        &mut self,
        ctx: &mut Ctx<'_, SlogNode>,
        from: NodeId,
        g: u64,
        entries: Vec<Entry>,
        forwarded: bool,
    ) {
        if matches!(&self.cluster.node(from).role, NodeRole::Service { name, .. } if name == ORDERER)
        {
            self.orderer_hint = Some(from);
        }
        if !self.raft.is_leader() {
            let msg = Msg::GlobalBatch {
                g,
                entries,
                forwarded: true,
            };
            self.forward(ctx, msg, forwarded);
            return;
        }
        if g < self.next_g {
            self.ack_global(ctx);
            return;
        }
        let now = ctx.now_ns();
        let recent = self
            .proposed_g
            .get(&g)
            .is_some_and(|&at| now.saturating_sub(at) < self.opts.retry_ns);
        if g < self.next_g + self.opts.window && !recent {
            self.proposed_g.insert(g, now);
            self.raft.propose(encode(&Command::Global { g, entries }));
            self.drain(ctx);
        }
    }

    fn ack_global(&self, ctx: &mut Ctx<'_, SlogNode>) {
        let msg = Msg::GlobalAck { g: self.next_g - 1 };
        match self.orderer_hint {
            Some(o) => ctx.send(o, msg),
            None => ctx.multicast(self.cluster.services(ORDERER), &msg),
        }
    }

    /// Persists and sends what Raft asks, then applies the commands that committed.
    fn drain(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        let out = self.raft.drain();
        for record in out.records {
            persist(ctx, record);
        }
        for (to, m) in out.messages {
            ctx.send(to, Msg::Raft(m));
        }
        let restored = out.snapshot.is_some() || !self.compaction.recovered_inputs.is_empty();
        if let Some(data) = out.snapshot {
            self.load_snapshot(&data);
        }
        for (key, piece, outcome) in std::mem::take(&mut self.compaction.recovered_inputs) {
            self.exec.restore_input(key, piece, outcome);
        }
        if restored {
            self.exec.resume(ctx);
        }
        for (bytes, index) in out.committed.into_iter().zip(out.indices) {
            // Only edge nodes of this region propose; an undecodable entry is skipped.
            if let Ok(command) = serde_json::from_slice::<Command>(&bytes) {
                self.apply(ctx, command, index);
            }
        }
        let entries = self.raft.log_size().entries;
        if entries > self.compaction.peak_entries {
            ctx.count(
                "slog.log_peak_entries",
                entries - self.compaction.peak_entries,
            );
            self.compaction.peak_entries = entries;
        }
    }

    /// The sequencer asks for a compaction once the log is over `log_limit`, and only when
    /// every member holds the log past the last `Compact` (whose snapshot the new one lets
    /// members compact behind): a member that is down or behind stops compaction instead
    /// of being sent a snapshot of another shard.
    fn propose_compaction(&mut self, now_ns: u64) {
        if self.raft.log_size().entries <= self.opts.log_limit {
            return;
        }
        let recent = self
            .compaction
            .proposed_ns
            .is_some_and(|at| now_ns.saturating_sub(at) < self.opts.retry_ns);
        let Some(safe) = self.raft.durable_everywhere() else {
            return;
        };
        if recent || safe < self.compaction.last_index || safe <= self.raft.snapshot_index() {
            return;
        }
        if self.raft.propose(encode(&Command::Compact { safe })) {
            self.compaction.proposed_ns = Some(now_ns);
        }
    }

    /// `Compact` at `index`: compacts behind the snapshot kept at the previous one if every
    /// member holds the log past it, then keeps one of the state now.
    fn compact(&mut self, ctx: &mut Ctx<'_, SlogNode>, safe: u64, index: u64) {
        self.compaction.last_index = index;
        self.compaction.proposed_ns = None;
        if let Some((at, data)) = self.compaction.pending.take() {
            if at <= safe && at > self.raft.snapshot_index() {
                match self.raft.compact_to(at, data) {
                    Ok(record) => {
                        persist(ctx, record);
                        self.exec.persist_inputs(ctx);
                        ctx.count("slog.compactions", 1);
                    }
                    Err(e) => {
                        self.compaction.violation = Some(format!("slog edge {}: {e}", self.id))
                    }
                }
            }
        }
        let logged = self.logged.len() as u64;
        if logged > self.compaction.peak_logged {
            ctx.count(
                "slog.logged_peak_keys",
                logged - self.compaction.peak_logged,
            );
            self.compaction.peak_logged = logged;
        }
        let state = EdgeState {
            shard: self.exec.shard(),
            logged: self.logged.clone(),
            next_g: self.next_g,
            future: self.future.iter().map(|(g, b)| (*g, b.clone())).collect(),
            exec: self.exec.state(),
        };
        let bytes = postcard::to_stdvec(&state).expect("an edge state always encodes");
        self.compaction.pending = Some((index, bytes));
    }

    /// A snapshot from this node's records at restart (its own), or, never by design,
    /// from the leader: one of another shard is refused and reported.
    fn load_snapshot(&mut self, data: &[u8]) {
        let state: EdgeState = match postcard::from_bytes(data) {
            Ok(s) => s,
            Err(e) => {
                self.compaction.violation = Some(format!("slog edge {}: snapshot: {e}", self.id));
                return;
            }
        };
        if state.shard != self.exec.shard() {
            self.compaction.violation = Some(format!(
                "slog edge {}: a snapshot of shard {} (it replicates {})",
                self.id,
                state.shard,
                self.exec.shard()
            ));
            return;
        }
        self.logged = state.logged;
        self.next_g = state.next_g;
        self.future = state.future.into_iter().collect();
        self.exec.load(state.exec);
    }

    /// The region's log, applied in order at every member: this is what makes replicas
    /// of a shard execute the same transactions in the same order.
    fn apply(&mut self, ctx: &mut Ctx<'_, SlogNode>, command: Command, index: u64) {
        let leader = self.raft.is_leader();
        match command {
            Command::Batch(entries) => {
                for entry in entries {
                    if leader {
                        ctx.send(entry.key.coordinator, Msg::Logged { key: entry.key });
                    }
                    if self.logged.admit(&entry) {
                        self.exec.schedule(ctx, entry);
                    }
                }
            }
            Command::Global { g, entries } => {
                if g >= self.next_g && g < self.next_g + self.opts.window {
                    self.future.insert(g, entries);
                }
                while let Some(batch) = self.future.remove(&self.next_g) {
                    self.next_g += 1;
                    for entry in batch {
                        self.exec.schedule(ctx, entry);
                    }
                }
                self.proposed_g = self.proposed_g.split_off(&self.next_g);
                if leader {
                    self.ack_global(ctx);
                }
            }
            Command::Compact { safe } => self.compact(ctx, safe, index),
        }
    }

    /// The port of this machine hands a client's transaction to this node, its coordinator.
    fn submit(
        &mut self,
        ctx: &mut Ctx<'_, SlogNode>,
        port: NodeId,
        request: RequestId,
        txn: meridian_core::txn::Txn,
    ) {
        let (cluster, opts) = (self.cluster.clone(), self.opts.clone());
        self.coord.submit(ctx, &cluster, &opts, port, request, txn);
    }

    fn logged(&mut self, from: NodeId, key: TxnKey) {
        self.coord.logged(&self.cluster, from, key);
    }

    fn results(
        &mut self,
        ctx: &mut Ctx<'_, SlogNode>,
        key: TxnKey,
        pieces: Vec<(u16, super::wire::PieceOutcome)>,
    ) {
        self.coord.results(ctx, key, pieces);
    }

    fn coord_tick(&mut self, ctx: &mut Ctx<'_, SlogNode>) {
        let (cluster, opts) = (self.cluster.clone(), self.opts.clone());
        self.coord.tick(ctx, &cluster, &opts);
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(v) = &self.compaction.violation {
            return Err(v.clone());
        }
        if self.future.keys().any(|&g| g < self.next_g) {
            return Err(format!(
                "slog edge {}: a global batch below next {} is buffered",
                self.id, self.next_g
            ));
        }
        self.exec.check_invariants()
    }

    pub fn region(&self) -> RegionId {
        self.cluster.region_of(self.id)
    }
}

/// A log command's bytes (JSON: the commands are serde types, as Clock-SI's replicated
/// records are).
pub(super) fn encode<T: serde::Serialize>(command: &T) -> Vec<u8> {
    serde_json::to_vec(command).expect("a log command always encodes")
}
