//! The coordinator, in TAPIR's client-library role (TAPIR §5.2, and the IR client
//! of §3.2.1): versioned reads at the closest replica, local execution against buffered
//! writes, Prepare as an IR consensus operation per participant shard (fast path on a super
//! quorum of matching results, else the slow path: decide, FINALIZE, f + 1 confirmations),
//! RETRY with a fresh timestamp (bounded), then Commit or Abort as inconsistent operations.

use super::options::Options;
use super::wire::{CommitDecision, Cx, Msg, Record, ShardTxn, Timer, Vote};
use crate::kit::log::latest_checkpoint;
use crate::kit::quorum::{majority, super_quorum, Votes};
use crate::kit::two_pc::{Decisions, Inquiry, Logged, Resend};
use meridian_core::txn::{execute_piece, AbortReason, ClientRequest, ClientResponse, CommitPath};
use meridian_core::txn::{
    Key, KvAccess, Outcome, PieceBody, PieceResult, Procedures, Rmw, Step, Txn, Value,
};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, TimerId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A replica's tentative result and the view it was given in (IR matches both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reply {
    view: u64,
    vote: Vote,
}

/// One participant shard's Prepare, as the IR client tracks it.
#[derive(Debug)]
struct ShardOp {
    /// Replies by replica; `reached` needs a super quorum of matching ones in one view.
    votes: Votes<Reply>,
    state: OpState,
}

impl ShardOp {
    fn waiting(replicas: &[NodeId], need: usize) -> ShardOp {
        ShardOp {
            votes: Votes::new(replicas.iter().copied(), need),
            state: OpState::Waiting {
                fast_armed: false,
                fast_over: false,
            },
        }
    }
}

#[derive(Debug)]
enum OpState {
    /// Collecting replies; `fast_over` once the fast-path wait after a majority ended.
    Waiting { fast_armed: bool, fast_over: bool },
    /// Slow path: the result decided from (or found finalized in) `view` is being
    /// finalized at f + 1 replicas of that view.
    Finalizing {
        vote: Vote,
        view: u64,
        confirms: Votes<()>,
    },
    /// The shard's result is final.
    Done { vote: Vote, fast: bool },
}

#[derive(Debug)]
enum Phase {
    /// Versioned reads outstanding, per shard.
    Reading {
        waiting: BTreeMap<ShardId, Vec<Key>>,
    },
    /// An interactive session between steps, or waiting for one key's versioned read.
    Session { reading: Option<(ShardId, Key)> },
    Preparing {
        attempt: u32,
        ts: Timestamp,
        shards: BTreeMap<ShardId, ShardOp>,
    },
}

/// One shard's read set (the first version read of each key) and buffered writes.
type Part = (BTreeMap<Key, Timestamp>, BTreeMap<Key, Value>);

/// An undecided transaction.
#[derive(Debug)]
struct Active {
    request: RequestId,
    txn: Txn,
    /// Versions read: key → (value, version).
    cache: FxHashMap<Key, (Option<Value>, Timestamp)>,
    /// Per shard: the read set (first version read of each key) and the buffered writes.
    parts: BTreeMap<ShardId, Part>,
    results: Vec<PieceResult>,
    phase: Phase,
    deadline_ns: u64,
    /// Retransmission rounds so far in this phase (reads rotate to farther replicas).
    rounds: u32,
    timer: TimerId,
    /// The read-modify-write of a `Modify` step whose read is outstanding: the value
    /// read (validated at prepare like any read) is modified into the buffered writes.
    modify: Option<Rmw>,
}

impl Active {
    /// The answer to a session read of `key` on `shard` that returned `value`: the value
    /// for a `Get`; for a `Modify`, the modified value is buffered and the answer is
    /// `Written`.
    fn read_done(
        &mut self,
        shard: ShardId,
        key: Key,
        value: Option<Value>,
        rmw: Option<Rmw>,
    ) -> ClientResponse {
        match rmw {
            None => ClientResponse::Read(value),
            Some(rmw) => {
                let new = rmw.apply(value.as_ref());
                self.parts.entry(shard).or_default().1.insert(key, new);
                ClientResponse::Written
            }
        }
    }
}

/// A coordinator node.
#[derive(Debug)]
pub struct Coordinator {
    id: NodeId,
    opts: Options,
    cluster: Arc<Cluster>,
    procedures: Arc<Procedures>,
    incarnation: u32,
    next_counter: u64,
    txns: FxHashMap<TxnId, Active>,
    /// Logged commit decisions not yet acknowledged by every replica.
    commits: Decisions<CommitDecision>,
    /// Each shard's replicas, closest first (reads go to the first that answers).
    by_distance: Vec<Vec<NodeId>>,
    /// Per shard, the latest IR view a replica replied in (sent along with PREPARE, so that
    /// a replica that missed a view change learns of it).
    views: Vec<u64>,
    since_checkpoint: usize,
}

impl Coordinator {
    /// Builds the coordinator from its log: a fresh incarnation, and every commit decision
    /// not known to be acknowledged.
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        records: &[Record],
    ) -> Coordinator {
        let (checkpoint, tail) =
            latest_checkpoint(records, |r| matches!(r, Record::CoordCheckpoint { .. }));
        let checkpoint = match checkpoint {
            Some(Record::CoordCheckpoint {
                incarnation,
                pending,
            }) => Some((*incarnation, pending.clone())),
            _ => None,
        };
        let logged = tail.iter().map(|record| match record {
            Record::Started { incarnation } => Logged::Started(*incarnation),
            Record::Decided {
                txn,
                decision,
                replicas,
            } => Logged::Decided(*txn, decision.clone(), replicas.clone()),
            Record::Acked { txn } => Logged::Acked(*txn),
            other => panic!("log of coordinator {id} holds {other:?}"),
        });
        let (commits, incarnation) = Decisions::recover(checkpoint, logged);
        let by_distance: Vec<Vec<NodeId>> = (0..cluster.shard_count())
            .map(|s| {
                let mut replicas = cluster.replicas(ShardId(s)).to_vec();
                replicas.sort_by(|a, b| {
                    cluster
                        .rtt_ms(id, *a)
                        .total_cmp(&cluster.rtt_ms(id, *b))
                        .then(a.cmp(b))
                });
                replicas
            })
            .collect();
        Coordinator {
            id,
            opts,
            cluster,
            procedures,
            incarnation,
            next_counter: 0,
            txns: FxHashMap::default(),
            commits,
            views: vec![0; by_distance.len()],
            by_distance,
            since_checkpoint: tail.len(),
        }
    }

    /// Logs the new incarnation before any of its ids is used, and re-drives restored commits.
    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let incarnation = self.incarnation;
        self.persist(ctx, Record::Started { incarnation });
        for txn in self.commits.txns() {
            self.send_commit(ctx, txn);
        }
    }

    pub(crate) fn on_client_request(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        req: ClientRequest,
    ) {
        let txn = match req {
            ClientRequest::OneShot(txn) => txn,
            ClientRequest::Interactive(step) => return self.step(ctx, request, step),
        };
        if let Err(e) = txn.validate(self.cluster.shard_count()) {
            return ctx.respond_aborted(request, AbortReason::Invalid(e.to_string()));
        }
        let waiting = read_keys_by_shard(&txn);
        let Some(id) = self.open(ctx, request, txn, Phase::Reading { waiting }) else {
            return;
        };
        self.send_reads(ctx, id);
        self.advance(ctx, id);
    }

    /// A new transaction (refused when `max_inflight` are undecided).
    fn open(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        txn: Txn,
        phase: Phase,
    ) -> Option<TxnId> {
        if self.txns.len() >= self.opts.max_inflight {
            let why = format!("overloaded: {} transactions in flight", self.txns.len());
            ctx.respond_aborted(request, AbortReason::Unsupported(why));
            return None;
        }
        let id = TxnId::new(self.id, self.incarnation, self.next_counter);
        self.next_counter += 1;
        let timer = ctx.set_timer(self.opts.retry_ns, Timer::Tick { txn: id });
        let active = Active {
            request,
            txn,
            cache: FxHashMap::default(),
            parts: BTreeMap::new(),
            results: Vec::new(),
            phase,
            deadline_ns: ctx.now_ns() + self.opts.exec_timeout_ns,
            rounds: 0,
            timer,
            modify: None,
        };
        self.txns.insert(id, active);
        Some(id)
    }

    /// One step of an interactive transaction (TAPIR's client is interactive: Begin, Read
    /// at the closest replica, buffered Write, Commit = Prepare then Commit).
    fn step(&mut self, ctx: &mut Cx<'_>, request: RequestId, step: Step) {
        let id = match &step {
            Step::Begin { .. } => {
                let session = Phase::Session { reading: None };
                if let Some(id) = self.open(ctx, request, Txn { pieces: Vec::new() }, session) {
                    ctx.respond(request, ClientResponse::Began(id));
                }
                return;
            }
            Step::Get { txn, .. }
            | Step::Put { txn, .. }
            | Step::Modify { txn, .. }
            | Step::Commit { txn }
            | Step::Abort { txn } => *txn,
        };
        let idle = matches!(
            self.txns.get(&id).map(|a| &a.phase),
            Some(Phase::Session { reading: None })
        );
        if !idle {
            // Unknown here (never begun, timed out, or begun before a restart: nothing of it
            // was prepared under a decision), or a step sent while one is running.
            return ctx.respond_aborted(request, AbortReason::Failure);
        }
        let now = ctx.now_ns();
        let active = self.txns.get_mut(&id).expect("idle session");
        active.request = request;
        active.deadline_ns = now + self.opts.exec_timeout_ns;
        match step {
            Step::Begin { .. } => unreachable!("handled above"),
            Step::Get { key, .. } => self.read_step(ctx, id, key, None),
            Step::Modify { key, rmw, .. } => self.read_step(ctx, id, key, Some(rmw)),
            Step::Put { key, value, .. } => {
                let shard = self.cluster.partitioner.shard_of(&key);
                active.parts.entry(shard).or_default().1.insert(key, value);
                ctx.respond(request, ClientResponse::Written);
            }
            Step::Commit { .. } => {
                active
                    .parts
                    .retain(|_, (r, w)| !r.is_empty() || !w.is_empty());
                active.phase = Phase::Reading {
                    waiting: BTreeMap::new(),
                };
                self.advance_executed(ctx, id);
            }
            Step::Abort { .. } => {
                let active = self.txns.remove(&id).expect("idle session");
                ctx.cancel_timer(active.timer);
                ctx.respond_aborted(request, AbortReason::User);
            }
        }
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::ReadReply { txn, values } => self.on_read_reply(ctx, txn, values),
            Msg::PrepareReply {
                txn,
                attempt,
                vote,
                view,
                finalized,
            } => {
                let reply = Reply { view, vote };
                self.on_prepare_reply(ctx, from, txn, attempt, reply, finalized)
            }
            Msg::Confirm { txn, attempt, view } => self.on_confirm(ctx, from, txn, attempt, view),
            Msg::CommitAck { txn } => {
                if let Some(timer) = self.commits.acknowledge(txn, from) {
                    if let Some(timer) = timer {
                        ctx.cancel_timer(timer);
                    }
                    self.persist(ctx, Record::Acked { txn });
                }
            }
            Msg::Query { txn } => self.on_query(ctx, from, txn),
            other => panic!("coordinator {} received {other:?}", self.id),
        }
        self.settle(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::Tick { txn } => self.on_tick(ctx, txn),
            Timer::FastPath {
                txn,
                attempt,
                shard,
            } => {
                if let Some(op) = self.shard_op(txn, attempt, shard) {
                    if let OpState::Waiting { fast_over, .. } = &mut op.state {
                        *fast_over = true;
                    }
                    self.evaluate(ctx, txn, shard);
                }
            }
            Timer::ResendCommit { txn } => {
                if self.commits.retry(txn) {
                    self.send_commit(ctx, txn);
                }
            }
            Timer::QueryStale | Timer::ViewChange { .. } => {
                panic!("coordinator {} got a replica's timer", self.id)
            }
        }
        self.settle(ctx);
    }

    /// A `Get`, or the read of a `Modify` (`rmw`): from the buffered writes or the versions
    /// already read, else from the closest replica.
    fn read_step(&mut self, ctx: &mut Cx<'_>, id: TxnId, key: Key, rmw: Option<Rmw>) {
        let active = self.txns.get_mut(&id).expect("idle session");
        let shard = self.cluster.partitioner.shard_of(&key);
        let (reads, writes) = active.parts.entry(shard).or_default();
        let known = match (writes.get(&key), active.cache.get(&key)) {
            (Some(value), _) => Some(Some(value.clone())),
            (None, Some((value, version))) => {
                reads.entry(key.clone()).or_insert(*version);
                Some(value.clone())
            }
            (None, None) => None,
        };
        if let Some(value) = known {
            let response = active.read_done(shard, key, value, rmw);
            return ctx.respond(active.request, response);
        }
        active.modify = rmw;
        active.phase = Phase::Session {
            reading: Some((shard, key)),
        };
        active.rounds = 0;
        self.send_reads(ctx, id);
    }

    fn on_read_reply(
        &mut self,
        ctx: &mut Cx<'_>,
        txn: TxnId,
        values: Vec<(Key, Option<Value>, Timestamp)>,
    ) {
        let Some(active) = self.txns.get_mut(&txn) else {
            return;
        };
        if let Phase::Session {
            reading: Some((shard, key)),
        } = &active.phase
        {
            let Some((_, value, version)) = values.into_iter().find(|(k, _, _)| k == key) else {
                return;
            };
            let (shard, key) = (*shard, key.clone());
            active
                .parts
                .entry(shard)
                .or_default()
                .0
                .entry(key.clone())
                .or_insert(version);
            active.cache.insert(key.clone(), (value.clone(), version));
            active.phase = Phase::Session { reading: None };
            let rmw = active.modify.take();
            let response = active.read_done(shard, key, value, rmw);
            return ctx.respond(active.request, response);
        }
        let Phase::Reading { waiting } = &mut active.phase else {
            return;
        };
        for (key, value, version) in values {
            let wanted = waiting.values_mut().any(|keys| {
                let before = keys.len();
                keys.retain(|k| *k != key);
                keys.len() < before
            });
            if wanted {
                active.cache.insert(key, (value, version));
            }
        }
        waiting.retain(|_, keys| !keys.is_empty());
        self.advance(ctx, txn);
    }

    /// Reads done: execute every piece locally, then prepare (or end at once).
    fn advance(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(active) = self.txns.get_mut(&id) else {
            return;
        };
        if !matches!(&active.phase, Phase::Reading { waiting } if waiting.is_empty()) {
            return;
        }
        if let Err(reason) = execute(active, &self.procedures) {
            return self.abort(ctx, id, reason);
        }
        self.advance_executed(ctx, id);
    }

    /// The read and write sets are complete: prepare at a timestamp above every version
    /// read (or end at once when there is nothing to validate or write).
    fn advance_executed(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let active = &self.txns[&id];
        if active.parts.is_empty() {
            // Nothing to validate or write (every piece touched no key).
            return self.finish(ctx, id, None, CommitPath::Fast);
        }
        let max_read = active
            .parts
            .values()
            .flat_map(|(r, _)| r.values())
            .max()
            .copied();
        let floor = max_read.map_or(0, |t| t.time_ns + 1);
        let ts = Timestamp::new(ctx.now_ns().max(floor), self.id.0);
        self.start_attempt(ctx, id, 0, ts);
    }

    fn start_attempt(&mut self, ctx: &mut Cx<'_>, id: TxnId, attempt: u32, ts: Timestamp) {
        let shards = self.txns[&id]
            .parts
            .keys()
            .map(|&s| (s, self.shard_op_start(s)))
            .collect();
        let active = self.txns.get_mut(&id).expect("active transaction");
        active.phase = Phase::Preparing {
            attempt,
            ts,
            shards,
        };
        active.rounds = 0;
        ctx.count("tapir_attempts", 1);
        self.send_prepares(ctx, id, false);
    }

    /// A shard's Prepare, waiting for a super quorum of its replicas.
    fn shard_op_start(&self, shard: ShardId) -> ShardOp {
        let replicas = self.cluster.replicas(shard);
        let need = super_quorum(self.cluster.f(shard)).min(replicas.len());
        ShardOp::waiting(replicas, need)
    }

    fn on_prepare_reply(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        attempt: u32,
        reply: Reply,
        finalized: bool,
    ) {
        let Some(shard) = self.cluster.shard_of_node(from) else {
            return;
        };
        let known = &mut self.views[shard.0 as usize];
        *known = (*known).max(reply.view);
        let f = self.cluster.f(shard);
        let Some(op) = self.shard_op(txn, attempt, shard) else {
            return;
        };
        if !matches!(op.state, OpState::Waiting { .. }) {
            return;
        }
        if finalized {
            // Decided already (a FINALIZE or a view change's merge): finalize it in that view.
            let Reply { view, vote } = reply;
            let replicas: Vec<NodeId> = op.votes.members().collect();
            op.state = OpState::Finalizing {
                vote,
                view,
                confirms: Votes::new(replicas.iter().copied(), f + 1),
            };
            let msg = Msg::Finalize {
                txn,
                attempt,
                vote,
                view,
            };
            return ctx.multicast(replicas, &msg);
        }
        op.votes.record(from, reply);
        self.evaluate(ctx, txn, shard);
    }

    fn on_confirm(&mut self, ctx: &mut Cx<'_>, from: NodeId, txn: TxnId, attempt: u32, view: u64) {
        let Some(shard) = self.cluster.shard_of_node(from) else {
            return;
        };
        let restart = self.shard_op_start(shard);
        let Some(op) = self.shard_op(txn, attempt, shard) else {
            return;
        };
        if let OpState::Finalizing {
            vote,
            view: decided_in,
            confirms,
        } = &mut op.state
        {
            if view != *decided_in {
                // The replica moved to another view, where the merge may have decided
                // otherwise: ask the shard again (IR's client retries on mismatched views).
                *op = restart;
                return self.send_prepares(ctx, txn, false);
            }
            confirms.record(from, ());
            if confirms.complete() {
                op.state = OpState::Done {
                    vote: *vote,
                    fast: false,
                };
                self.conclude(ctx, txn);
            }
        }
    }

    fn shard_op(&mut self, txn: TxnId, attempt: u32, shard: ShardId) -> Option<&mut ShardOp> {
        match &mut self.txns.get_mut(&txn)?.phase {
            Phase::Preparing {
                attempt: a, shards, ..
            } if *a == attempt => shards.get_mut(&shard),
            _ => None,
        }
    }

    /// The IR client's rule for one consensus operation: a super quorum of matching results
    /// is final (fast path); otherwise, once a majority replied and either everyone replied
    /// or the fast-path wait is over, decide and finalize (slow path).
    fn evaluate(&mut self, ctx: &mut Cx<'_>, txn: TxnId, shard: ShardId) {
        let f = self.cluster.f(shard);
        let skip_validation = self.opts.unsafe_skip_slow_path_validation;
        let wait = self.opts.fast_path_wait_ns;
        let Some(Phase::Preparing {
            attempt, shards, ..
        }) = self.txns.get_mut(&txn).map(|a| &mut a.phase)
        else {
            return;
        };
        let attempt = *attempt;
        let op = shards.get_mut(&shard).expect("a participant's op");
        let OpState::Waiting {
            fast_armed,
            fast_over,
        } = &mut op.state
        else {
            return;
        };
        let replies: Vec<Reply> = op.votes.replies().copied().collect();
        if let Some(reply) = replies.iter().find(|r| op.votes.reached(r)) {
            op.state = OpState::Done {
                vote: reply.vote,
                fast: true,
            };
            if reply.view > 0 {
                ctx.count("tapir_fast_quorum_after_view_change", 1);
            }
            return self.conclude(ctx, txn);
        }
        // The slow path decides from replies of one view: the latest.
        let view = replies.iter().map(|r| r.view).max().unwrap_or(0);
        let replies: Vec<Vote> = replies
            .iter()
            .filter(|r| r.view == view)
            .map(|r| r.vote)
            .collect();
        let n = op.votes.members().count();
        if replies.len() < majority(n) {
            return;
        }
        if replies.len() < n && !*fast_over {
            if !*fast_armed {
                *fast_armed = true;
                ctx.set_timer(
                    wait,
                    Timer::FastPath {
                        txn,
                        attempt,
                        shard,
                    },
                );
            }
            return;
        }
        let vote = if skip_validation {
            Vote::Ok
        } else {
            decide(&replies, f)
        };
        let replicas: Vec<NodeId> = op.votes.members().collect();
        op.state = OpState::Finalizing {
            vote,
            view,
            confirms: Votes::new(replicas.iter().copied(), f + 1),
        };
        ctx.count("tapir_slow_path", 1);
        let msg = Msg::Finalize {
            txn,
            attempt,
            vote,
            view,
        };
        ctx.multicast(replicas, &msg);
    }

    /// Every participant's result is final: commit, abort, or retry at a later timestamp.
    fn conclude(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(Phase::Preparing {
            attempt,
            ts,
            shards,
        }) = self.txns.get(&id).map(|a| &a.phase)
        else {
            return;
        };
        let mut results = Vec::with_capacity(shards.len());
        for op in shards.values() {
            match op.state {
                OpState::Done { vote, fast } => results.push((vote, fast)),
                _ => return,
            }
        }
        let (attempt, ts) = (*attempt, *ts);
        if results
            .iter()
            .any(|(v, _)| matches!(v, Vote::Abort | Vote::Abstain))
        {
            return self.abort(ctx, id, AbortReason::Conflict);
        }
        let retry = results.iter().filter_map(|(v, _)| match v {
            Vote::Retry(t) => Some(*t),
            _ => None,
        });
        if let Some(proposed) = retry.max() {
            if attempt + 1 >= self.opts.max_attempts {
                return self.abort(ctx, id, AbortReason::Conflict);
            }
            let time_ns = ctx.now_ns().max(proposed.time_ns + 1).max(ts.time_ns + 1);
            return self.start_attempt(ctx, id, attempt + 1, Timestamp::new(time_ns, self.id.0));
        }
        let path = if results.iter().all(|(_, fast)| *fast) {
            CommitPath::Fast
        } else {
            CommitPath::Slow
        };
        self.finish(ctx, id, Some(ts), path);
    }

    /// Commits `id` at `ts`: logs the decision (the commit point), answers the client and
    /// sends COMMIT to every replica of every participant. With `ts` None nothing is
    /// written anywhere.
    fn finish(&mut self, ctx: &mut Cx<'_>, id: TxnId, ts: Option<Timestamp>, path: CommitPath) {
        let active = self.txns.remove(&id).expect("active transaction");
        ctx.cancel_timer(active.timer);
        if let Some(ts) = ts {
            let shards: Vec<(ShardId, ShardTxn)> = active
                .parts
                .into_iter()
                .map(|(s, (reads, writes))| {
                    let part = ShardTxn {
                        reads: reads.into_iter().collect(),
                        writes: writes.into_iter().collect(),
                    };
                    (s, part)
                })
                .collect();
            let replicas: Vec<NodeId> = shards
                .iter()
                .flat_map(|(s, _)| self.cluster.replicas(*s).iter().copied())
                .collect();
            let decision = CommitDecision { ts, shards };
            self.persist(
                ctx,
                Record::Decided {
                    txn: id,
                    decision: decision.clone(),
                    replicas: replicas.clone(),
                },
            );
            self.commits.decide(id, decision, replicas);
            self.send_commit(ctx, id);
        }
        let outcome = Outcome::Committed {
            results: active.results,
            commit_ts: ts,
            path,
        };
        ctx.respond(active.request, ClientResponse::Outcome(outcome));
    }

    /// Aborts an undecided transaction: ABORT to every participant (best effort; a replica
    /// that misses it asks, and hears presumed abort), and the client is told.
    fn abort(&mut self, ctx: &mut Cx<'_>, id: TxnId, reason: AbortReason) {
        let active = self.txns.remove(&id).expect("active transaction");
        ctx.cancel_timer(active.timer);
        if matches!(active.phase, Phase::Preparing { .. }) {
            for shard in active.parts.keys() {
                ctx.multicast(
                    self.cluster.replicas(*shard).to_vec(),
                    &Msg::Abort { txn: id },
                );
            }
        }
        ctx.respond_aborted(active.request, reason);
    }

    fn on_tick(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(active) = self.txns.get_mut(&id) else {
            return;
        };
        if ctx.now_ns() >= active.deadline_ns {
            if matches!(active.phase, Phase::Session { reading: None }) {
                // An idle session's client went quiet: forget it (its last step was
                // answered; a later step hears `Failure`). Nothing of it was prepared.
                self.txns.remove(&id);
                return;
            }
            return self.abort(ctx, id, AbortReason::Timeout);
        }
        active.rounds += 1;
        active.timer = ctx.set_timer(self.opts.retry_ns, Timer::Tick { txn: id });
        match active.phase {
            Phase::Reading { .. } | Phase::Session { .. } => self.send_reads(ctx, id),
            Phase::Preparing { .. } => self.send_prepares(ctx, id, true),
        }
    }

    /// Reads go to the closest replica; each retransmission round tries the next one.
    fn send_reads(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let active = &self.txns[&id];
        let closest = |shard: ShardId| {
            let replicas = &self.by_distance[shard.0 as usize];
            replicas[active.rounds as usize % replicas.len()]
        };
        match &active.phase {
            Phase::Reading { waiting } => {
                for (shard, keys) in waiting {
                    ctx.send(
                        closest(*shard),
                        Msg::Read {
                            txn: id,
                            keys: keys.clone(),
                        },
                    );
                }
            }
            Phase::Session {
                reading: Some((shard, key)),
            } => {
                ctx.send(
                    closest(*shard),
                    Msg::Read {
                        txn: id,
                        keys: vec![key.clone()],
                    },
                );
            }
            _ => {}
        }
    }

    /// PREPARE to the replicas that have not replied (all of them on the first round), and
    /// FINALIZE again to those that have not confirmed.
    fn send_prepares(&mut self, ctx: &mut Cx<'_>, id: TxnId, resend: bool) {
        let active = &self.txns[&id];
        let Phase::Preparing {
            attempt,
            ts,
            shards,
        } = &active.phase
        else {
            return;
        };
        for (shard, op) in shards {
            match &op.state {
                OpState::Waiting { .. } => {
                    let (reads, writes) = &active.parts[shard];
                    let part = ShardTxn {
                        reads: reads.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                        writes: writes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    };
                    let msg = Msg::Prepare {
                        txn: id,
                        attempt: *attempt,
                        ts: *ts,
                        part,
                        view: self.views[shard.0 as usize],
                    };
                    // The replicas that have not replied, and those that replied in a view
                    // older than another's (their reply cannot join a quorum).
                    let latest = op.votes.replies().map(|r| r.view).max().unwrap_or(0);
                    let stale = op
                        .votes
                        .replies_by()
                        .filter(|(_, r)| r.view < latest)
                        .map(|(m, _)| m);
                    let to: Vec<NodeId> = op.votes.missing().chain(stale).collect();
                    ctx.multicast(to, &msg);
                }
                OpState::Finalizing {
                    vote,
                    view,
                    confirms,
                } if resend => {
                    let msg = Msg::Finalize {
                        txn: id,
                        attempt: *attempt,
                        vote: *vote,
                        view: *view,
                    };
                    ctx.multicast(confirms.missing().collect::<Vec<_>>(), &msg);
                }
                _ => {}
            }
        }
    }

    /// COMMIT of a logged decision to every replica that has not acknowledged, and the
    /// timer that resends it.
    fn send_commit(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let Some(decision) = self.commits.decision(txn) else {
            return;
        };
        for &replica in self.commits.waiting(txn) {
            if let Some(msg) = commit_msg(&self.cluster, txn, decision, replica) {
                ctx.send(replica, msg);
            }
        }
        let resend = Resend {
            retry_ns: self.opts.retry_ns,
            max_retries: self.opts.max_retries,
            slow_ns: self.opts.exec_timeout_ns,
        };
        let after = self.commits.resend_after(txn, resend);
        let timer = ctx.set_timer(after, Timer::ResendCommit { txn });
        self.commits.armed(txn, timer);
    }

    fn on_query(&mut self, ctx: &mut Cx<'_>, from: NodeId, txn: TxnId) {
        if txn.coordinator != self.id {
            return;
        }
        let undecided = self.txns.contains_key(&txn);
        match self.commits.inquiry(txn, undecided) {
            Inquiry::Commit(decision) => {
                if let Some(msg) = commit_msg(&self.cluster, txn, decision, from) {
                    ctx.send(from, msg);
                }
            }
            Inquiry::Undecided => {}
            Inquiry::PresumedAbort => ctx.send(from, Msg::Abort { txn }),
        }
    }

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
    }

    /// Ends message and timer handlers: a due checkpoint replaces the log.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if self.since_checkpoint < self.opts.checkpoint_every {
            return;
        }
        let incarnation = self.incarnation;
        let pending = self.commits.checkpoint();
        ctx.checkpoint(Record::CoordCheckpoint {
            incarnation,
            pending,
        });
        self.since_checkpoint = 0;
    }
}

/// The IR decide function for Prepare (TAPIR §5.2, TAPIR-DECIDE), over at least f + 1
/// results: any ABORT aborts; f + 1 PREPARE-OK prepare; f + 1 ABSTAIN abort; else a RETRY
/// proposes the largest timestamp; else abort.
pub(crate) fn decide(replies: &[Vote], f: usize) -> Vote {
    let count = |want: Vote| replies.iter().filter(|v| **v == want).count();
    if replies.contains(&Vote::Abort) {
        return Vote::Abort;
    }
    if count(Vote::Ok) > f {
        return Vote::Ok;
    }
    if count(Vote::Abstain) > f {
        return Vote::Abort;
    }
    let retry = replies.iter().filter_map(|v| match v {
        Vote::Retry(t) => Some(*t),
        _ => None,
    });
    retry.max().map_or(Vote::Abort, Vote::Retry)
}

/// The COMMIT `replica` needs for `decision` (its shard's part), if it is a participant.
fn commit_msg(
    cluster: &Cluster,
    txn: TxnId,
    decision: &CommitDecision,
    replica: NodeId,
) -> Option<Msg> {
    let shard = cluster.shard_of_node(replica)?;
    let (_, part) = decision.shards.iter().find(|(s, _)| *s == shard)?;
    Some(Msg::Commit {
        txn,
        ts: decision.ts,
        part: part.clone(),
    })
}

/// The keys each shard's pieces read (a procedure may read what it declares it writes).
fn read_keys_by_shard(txn: &Txn) -> BTreeMap<ShardId, Vec<Key>> {
    let mut by_shard: BTreeMap<ShardId, Vec<Key>> = BTreeMap::new();
    for piece in &txn.pieces {
        let keys = by_shard.entry(piece.shard).or_default();
        match &piece.body {
            PieceBody::Ops(_) => keys.extend(piece.read_keys()),
            PieceBody::Procedure(call) => {
                keys.extend(call.read_keys.iter().chain(&call.write_keys).cloned())
            }
        }
    }
    for keys in by_shard.values_mut() {
        keys.sort_unstable();
        keys.dedup();
    }
    by_shard.retain(|_, keys| !keys.is_empty());
    by_shard
}

/// Runs every piece in order against the versions read and the buffered writes, recording
/// the read set (TAPIR executes at the client; replicas see only reads, then Prepare).
fn execute(active: &mut Active, procedures: &Procedures) -> Result<(), AbortReason> {
    let mut results: Vec<Option<PieceResult>> = vec![None; active.txn.pieces.len()];
    for (i, piece) in active.txn.pieces.iter().enumerate() {
        let (reads, writes) = active.parts.entry(piece.shard).or_default();
        let mut view = View {
            cache: &active.cache,
            reads,
            writes,
        };
        let inputs: Vec<Option<&PieceResult>> = results.iter().map(Option::as_ref).collect();
        let result = execute_piece(piece, &inputs, procedures, &mut view)?;
        results[i] = Some(result);
    }
    active
        .parts
        .retain(|_, (r, w)| !r.is_empty() || !w.is_empty());
    active.results = results.into_iter().map(Option::unwrap_or_default).collect();
    Ok(())
}

/// A piece's view of the store at the client: its own buffered writes, else the version read.
struct View<'a> {
    cache: &'a FxHashMap<Key, (Option<Value>, Timestamp)>,
    reads: &'a mut BTreeMap<Key, Timestamp>,
    writes: &'a mut BTreeMap<Key, Value>,
}

impl KvAccess for View<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        if let Some(v) = self.writes.get(key) {
            return Some(v.clone());
        }
        // Every read key was fetched before execution; an undeclared one reads as absent at
        // version zero, which validation then checks like any other read.
        let (value, version) = self
            .cache
            .get(key)
            .cloned()
            .unwrap_or((None, Timestamp::ZERO));
        self.reads.entry(key.clone()).or_insert(version);
        value
    }

    fn put(&mut self, key: Key, value: Value) {
        self.writes.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decide_follows_tapir_decide() {
        let t = |n| Vote::Retry(Timestamp::new(n, 0));
        assert_eq!(decide(&[Vote::Ok, Vote::Ok], 1), Vote::Ok);
        assert_eq!(decide(&[Vote::Ok, Vote::Ok, Vote::Abort], 1), Vote::Abort);
        assert_eq!(decide(&[Vote::Ok, Vote::Abstain], 1), Vote::Abort);
        assert_eq!(
            decide(&[Vote::Abstain, Vote::Abstain, Vote::Ok], 1),
            Vote::Abort
        );
        assert_eq!(decide(&[Vote::Ok, t(5), t(9)], 1), t(9));
        assert_eq!(decide(&[Vote::Ok, Vote::Ok, t(9)], 1), Vote::Ok);
    }
}
