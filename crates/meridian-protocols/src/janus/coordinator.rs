//! A Janus coordinator (§4): pre-accept to every replica of every shard touched, the fast
//! path on a fast quorum of identical answers per shard, else accept with the union of a
//! majority's answers, then commit; the client's answer once every shard's results arrived.

use super::options::Options;
use super::wire::{same_ids, union, Ballot, Body, Cx, Deps, Msg, Record, Tag, Timer};
use crate::kit::quorum::{majority, super_quorum};
use meridian_core::txn::{
    AbortReason, ClientRequest, CommitPath, Op, Outcome, PieceBody, PieceResult, Txn,
};
use meridian_core::{ClientResponse, Cluster, NodeId, RequestId, ShardId, TxnId};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug, PartialEq)]
enum Phase {
    PreAccept,
    Accept,
    /// Committed (or taken over by a recovery): waiting for results.
    Commit,
}

#[derive(Debug)]
struct Inflight {
    request: RequestId,
    body: Arc<Body>,
    started_ns: u64,
    phase: Phase,
    /// Pre-accept answers (replica, its shard, deps), in arrival order, one per replica.
    answers: Vec<(NodeId, ShardId, Deps)>,
    fast_waiting: bool,
    fast_expired: bool,
    /// The dependencies this coordinator committed (or is accepting); `decided` once committed.
    deps: Deps,
    decided: bool,
    acks: Vec<NodeId>,
    path: CommitPath,
    results: Vec<Option<PieceResult>>,
    shards_done: Vec<ShardId>,
    /// Shards whose pieces ran to the end and applied their writes.
    shards_applied: usize,
    failure: Option<AbortReason>,
}

/// Counter: transactions some of whose shards aborted their pieces while others applied
/// theirs (answered `Unknown`). Zero when every abort is decided from the inputs.
pub const SPLIT_OUTCOMES: &str = "janus.split_outcomes";

/// Counter: requests that waited for an in-flight slot (`max_inflight` were unfinished).
pub const QUEUED: &str = "janus.queued";

/// Counter: requests refused because `max_inflight` were unfinished and `max_queued`
/// more were waiting (the only load-related refusal; answered `Aborted(Unsupported)`).
pub const REFUSED_OVERLOADED: &str = "janus.refused_overloaded";

/// Counter: transactions answered `Unknown` after `commit_timeout_ms` without every
/// shard's results.
pub const TIMED_OUT: &str = "janus.timed_out";

/// One coordinator.
#[derive(Debug)]
pub struct Coordinator {
    me: NodeId,
    opts: Options,
    cluster: Arc<Cluster>,
    incarnation: u32,
    counter: u64,
    /// Next slot per shard in this incarnation (dense: assigned only when sent).
    slots: Vec<u64>,
    inflight: FxHashMap<TxnId, Inflight>,
    /// Admitted requests waiting for an in-flight slot, oldest first (at most
    /// `max_queued`): an overloaded coordinator queues and slows down rather than abort.
    queued: VecDeque<(RequestId, Txn)>,
}

impl Coordinator {
    pub fn restore(me: NodeId, opts: Options, cluster: Arc<Cluster>, recovered: &[Record]) -> Self {
        let last = recovered
            .iter()
            .filter_map(|r| match r {
                Record::Started { incarnation } => Some(*incarnation),
                _ => None,
            })
            .max();
        let shards = cluster.shard_count() as usize;
        Coordinator {
            me,
            opts,
            cluster,
            incarnation: last.map_or(0, |i| i + 1),
            counter: 0,
            slots: vec![0; shards],
            inflight: FxHashMap::default(),
            queued: VecDeque::new(),
        }
    }

    pub fn on_start(&mut self, ctx: &mut Cx<'_>) {
        ctx.checkpoint(Record::Started {
            incarnation: self.incarnation,
        });
    }

    pub fn on_client_request(&mut self, ctx: &mut Cx<'_>, request: RequestId, req: ClientRequest) {
        let txn = match req {
            ClientRequest::OneShot(txn) => txn,
            ClientRequest::Interactive(_) => {
                let why = "janus runs one-shot transactions only".to_string();
                return ctx.respond_aborted(request, AbortReason::Unsupported(why));
            }
        };
        if let Err(reason) = self.admit(&txn) {
            return ctx.respond_aborted(request, reason);
        }
        if self.inflight.len() < self.opts.max_inflight {
            return self.start(ctx, request, txn);
        }
        if self.queued.len() >= self.opts.max_queued {
            ctx.count(REFUSED_OVERLOADED, 1);
            let why = format!(
                "overloaded: {} transactions in flight (max_inflight) and {} waiting (max_queued)",
                self.inflight.len(),
                self.queued.len()
            );
            return ctx.respond_aborted(request, AbortReason::Unsupported(why));
        }
        ctx.count(QUEUED, 1);
        self.queued.push_back((request, txn));
    }

    /// Starts waiting requests while in-flight slots are free (after one finished).
    fn start_queued(&mut self, ctx: &mut Cx<'_>) {
        while self.inflight.len() < self.opts.max_inflight {
            let Some((request, txn)) = self.queued.pop_front() else {
                return;
            };
            self.start(ctx, request, txn);
        }
    }

    /// Pre-accepts an admitted transaction (§4.1): its id, a slot on each shard, the
    /// multicast to every replica of every shard it touches.
    fn start(&mut self, ctx: &mut Cx<'_>, request: RequestId, txn: Txn) {
        let id = TxnId::new(self.me, self.incarnation, self.counter);
        self.counter += 1;
        let slots = txn
            .shards()
            .into_iter()
            .map(|s| {
                let slot = self.slots[s.index()];
                self.slots[s.index()] += 1;
                (s, slot)
            })
            .collect();
        let pieces = txn.pieces.len();
        let body = Arc::new(Body {
            tag: Tag { id, slots },
            pieces: txn.pieces,
            coordinator: self.me,
        });
        ctx.multicast(
            self.participants(&body),
            &Msg::PreAccept { body: body.clone() },
        );
        ctx.set_timer(self.opts.retry_ns, Timer::Retry(id));
        self.inflight.insert(
            id,
            Inflight {
                request,
                body,
                started_ns: ctx.now_ns(),
                phase: Phase::PreAccept,
                answers: Vec::new(),
                fast_waiting: false,
                fast_expired: false,
                deps: Deps::default(),
                decided: false,
                acks: Vec::new(),
                path: CommitPath::Fast,
                results: vec![None; pieces],
                shards_done: Vec::new(),
                shards_applied: 0,
                failure: None,
            },
        );
    }

    /// Refuses what this implementation cannot run: invalid transactions, value dependencies
    /// across shards, and validation ops (`Op::Check`: an abort decided by one shard's data
    /// would have to reach the others, and Janus has no round for it). Stored procedures
    /// run; their user aborts must be decided from the transaction's inputs by every shard
    /// alike (TPC-C's invalid item), see the module doc.
    fn admit(&self, txn: &Txn) -> Result<(), AbortReason> {
        txn.validate(self.cluster.shard_count())
            .map_err(|e| AbortReason::Invalid(e.to_string()))?;
        for piece in &txn.pieces {
            let cross = piece
                .dependencies()
                .iter()
                .any(|&d| txn.pieces[usize::from(d)].shard != piece.shard);
            if cross {
                let why = "janus: value dependencies across shards".to_string();
                return Err(AbortReason::Unsupported(why));
            }
            let validates = match &piece.body {
                PieceBody::Procedure(_) => false,
                PieceBody::Ops(ops) => ops.iter().any(|o| matches!(o, Op::Check(..))),
            };
            if validates {
                let why = "janus: validation ops (an abort decided on one shard)".to_string();
                return Err(AbortReason::Unsupported(why));
            }
        }
        Ok(())
    }

    fn participants(&self, body: &Body) -> Vec<NodeId> {
        body.tag
            .shards()
            .flat_map(|s| self.cluster.replicas(s).iter().copied())
            .collect()
    }

    pub fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::PreAcceptReply { id, ok, deps } => {
                self.on_pre_accept_reply(ctx, from, id, ok, deps)
            }
            Msg::AcceptReply { id, ballot, ok } if ballot == Ballot::ZERO => {
                self.on_accept_reply(ctx, from, id, ok)
            }
            Msg::Result { id, shard, outcome } => self.on_result(ctx, id, shard, outcome),
            _ => {}
        }
    }

    fn on_pre_accept_reply(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        id: TxnId,
        ok: bool,
        deps: Deps,
    ) {
        let Some(shard) = self.cluster.shard_of_node(from) else {
            return;
        };
        let Some(t) = self.inflight.get_mut(&id) else {
            return;
        };
        if t.phase != Phase::PreAccept {
            return;
        }
        if !ok {
            // A recovery coordinator took over: its commit will reach the replicas, whose
            // results reach us.
            t.phase = Phase::Commit;
            return;
        }
        if !t.answers.iter().any(|(n, _, _)| *n == from) {
            t.answers.push((from, shard, deps));
        }
        self.advance(ctx, id);
    }

    /// The fast/slow decision once enough answers are in (§4.2).
    fn advance(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let cluster = self.cluster.clone();
        let t = self.inflight.get_mut(&id).expect("inflight");
        let mut fast_ok = true;
        let mut fast_possible = true;
        let mut majority_each = true;
        for shard in t.body.tag.shards() {
            let answers: Vec<&Deps> = t
                .answers
                .iter()
                .filter(|(_, s, _)| *s == shard)
                .map(|(_, _, d)| d)
                .collect();
            let n = cluster.replicas(shard).len();
            let fast_need = super_quorum(cluster.f(shard)).min(n);
            let identical = answers.windows(2).all(|w| same_ids(w[0], w[1]));
            fast_possible &= identical;
            fast_ok &= identical && answers.len() >= fast_need;
            majority_each &= answers.len() >= majority(n);
        }
        if fast_ok {
            let deps = union(t.answers.iter().map(|(_, _, d)| &d[..]));
            t.path = CommitPath::Fast;
            ctx.count("janus.fast", 1);
            return self.commit(ctx, id, deps);
        }
        if !majority_each {
            return;
        }
        if fast_possible && !t.fast_expired {
            if !t.fast_waiting {
                t.fast_waiting = true;
                ctx.set_timer(self.opts.fast_wait_ns, Timer::FastWait(id));
            }
            return;
        }
        let mut seen: Vec<ShardId> = Vec::new();
        let unsafe_no_dep_union = self.opts.unsafe_no_dep_union;
        let deps = union(t.answers.iter().filter_map(|(_, shard, d)| {
            if unsafe_no_dep_union {
                // Broken on purpose: one answer per shard, not the union.
                if seen.contains(shard) {
                    return None;
                }
                seen.push(*shard);
            }
            Some(&d[..])
        }));
        t.phase = Phase::Accept;
        t.path = CommitPath::Slow;
        t.deps = deps.clone();
        ctx.count("janus.slow", 1);
        let msg = Msg::Accept {
            body: t.body.clone(),
            ballot: Ballot::ZERO,
            deps,
        };
        let to = self.participants(&self.inflight[&id].body);
        ctx.multicast(to, &msg);
    }

    fn on_accept_reply(&mut self, ctx: &mut Cx<'_>, from: NodeId, id: TxnId, ok: bool) {
        let Some(t) = self.inflight.get_mut(&id) else {
            return;
        };
        if t.phase != Phase::Accept {
            return;
        }
        if !ok {
            t.phase = Phase::Commit;
            return;
        }
        if !t.acks.contains(&from) {
            t.acks.push(from);
        }
        let done = t.body.tag.majority_each(&self.cluster, &t.acks);
        if done {
            let deps = t.deps.clone();
            self.commit(ctx, id, deps);
        }
    }

    fn commit(&mut self, ctx: &mut Cx<'_>, id: TxnId, deps: Deps) {
        let t = self.inflight.get_mut(&id).expect("inflight");
        t.phase = Phase::Commit;
        t.decided = true;
        t.deps = deps.clone();
        let msg = Msg::Commit {
            body: t.body.clone(),
            deps,
        };
        let to = self.participants(&self.inflight[&id].body);
        ctx.multicast(to, &msg);
    }

    fn on_result(
        &mut self,
        ctx: &mut Cx<'_>,
        id: TxnId,
        shard: ShardId,
        outcome: Result<Vec<(u16, PieceResult)>, AbortReason>,
    ) {
        let Some(t) = self.inflight.get_mut(&id) else {
            return;
        };
        if t.shards_done.contains(&shard) {
            return;
        }
        t.shards_done.push(shard);
        match outcome {
            Ok(results) => {
                t.shards_applied += 1;
                for (i, r) in results {
                    if let Some(slot) = t.results.get_mut(usize::from(i)) {
                        *slot = Some(r);
                    }
                }
            }
            Err(reason) => {
                t.failure.get_or_insert(reason);
            }
        }
        if t.body.tag.shards().all(|s| t.shards_done.contains(&s)) {
            let t = self.inflight.remove(&id).expect("inflight");
            let outcome = match t.failure {
                Some(reason) if t.shards_applied > 0 => {
                    // Shards disagreed (an abort not decided from the inputs alone): some
                    // applied their writes, so "aborted" would be a lie.
                    ctx.count(SPLIT_OUTCOMES, 1);
                    let reason = format!("janus: shards disagreed ({reason} on one)");
                    Outcome::Unknown { reason }
                }
                Some(reason) => Outcome::Aborted { reason },
                None => Outcome::Committed {
                    results: t
                        .results
                        .into_iter()
                        .map(Option::unwrap_or_default)
                        .collect(),
                    commit_ts: None,
                    path: t.path,
                },
            };
            ctx.respond(t.request, ClientResponse::Outcome(outcome));
            self.start_queued(ctx);
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::FastWait(id) => {
                if let Some(t) = self.inflight.get_mut(&id) {
                    t.fast_expired = true;
                    if t.phase == Phase::PreAccept {
                        self.advance(ctx, id);
                    }
                }
            }
            Timer::Retry(id) => self.retry(ctx, id),
            Timer::Tick => {}
        }
    }

    /// Resends the current phase to the replicas that have not answered it; gives up with
    /// `Unknown` after `commit_timeout_ms` (a recovery may still commit it).
    fn retry(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(t) = self.inflight.get(&id) else {
            return;
        };
        if ctx.now_ns().saturating_sub(t.started_ns) >= self.opts.commit_timeout_ns {
            let t = self.inflight.remove(&id).expect("inflight");
            let reason = "janus: no results before commit_timeout_ms".to_string();
            ctx.count(TIMED_OUT, 1);
            ctx.respond(
                t.request,
                ClientResponse::Outcome(Outcome::Unknown { reason }),
            );
            self.start_queued(ctx);
            return;
        }
        let body = t.body.clone();
        let (msg, to): (Msg, Vec<NodeId>) = match t.phase {
            Phase::PreAccept => (
                Msg::PreAccept { body: body.clone() },
                self.participants(&body)
                    .into_iter()
                    .filter(|n| !t.answers.iter().any(|(a, _, _)| a == n))
                    .collect(),
            ),
            Phase::Accept => (
                Msg::Accept {
                    body: body.clone(),
                    ballot: Ballot::ZERO,
                    deps: t.deps.clone(),
                },
                self.participants(&body)
                    .into_iter()
                    .filter(|n| !t.acks.contains(n))
                    .collect(),
            ),
            // Taken over by a recovery: only its decision may be sent; wait for results.
            Phase::Commit if !t.decided => {
                ctx.set_timer(self.opts.retry_ns, Timer::Retry(id));
                return;
            }
            Phase::Commit => (
                Msg::Commit {
                    body: body.clone(),
                    deps: t.deps.clone(),
                },
                body.tag
                    .shards()
                    .filter(|s| !t.shards_done.contains(s))
                    .flat_map(|s| self.cluster.replicas(s).iter().copied())
                    .collect(),
            ),
        };
        ctx.multicast(to, &msg);
        ctx.set_timer(self.opts.retry_ns, Timer::Retry(id));
    }
}
