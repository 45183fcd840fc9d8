//! The coordinator (Fig. 9), co-located with a data node: takes a start timestamp from
//! K2-TB (§4), runs the transaction's pieces on the primaries in parallel, commits through
//! the recorder in one round trip, and answers the client once the decision is durable
//! and the commit wait (§4.4) has passed.
//!
//! One-shot transactions send every piece whose inputs are known and whose earlier
//! pieces on the same shard have answered (so a primary runs one transaction's pieces in
//! order); interactive ones send each `Get`/`Put` as a one-op piece. The recorder is the
//! primary of the first shard the transaction writes (§5.2: "a transaction record is
//! created when the first write of a transaction occurs"). Read-only transactions need no
//! recorder and commit after their reads and the commit wait.
//!
//! Timeouts count timer ticks (true durations), not clock readings, so a stepped clock
//! cannot cut a commit wait short.

use super::batch::{Take, TsSource};
use super::options::{Options, ReplicaReads, Timestamps};
use super::wire::{Execute, Msg, Record, Timer, TxnTs};
use super::K2Node;
use crate::kit::ttc::OracleCursor;
use meridian_core::node::Ctx;
use meridian_core::txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Key, Op, Operand, Outcome, Piece,
    PieceResult, Step, Txn,
};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, TxnId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// A transaction waiting for a timestamp.
#[derive(Clone, Debug)]
struct TsWaiter {
    seq: u64,
    /// Replies to requests with this id or more were asked for after it arrived.
    first_req: u64,
    /// Earlier requests in flight whose TTL had not run out when it arrived.
    eligible: Vec<u64>,
}

impl TsWaiter {
    fn eligible_for(&self, req: u64) -> bool {
        req >= self.first_req || self.eligible.contains(&req)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum StepKind {
    Get,
    Put,
}

#[derive(Clone, Debug)]
struct PendingStep {
    step: u16,
    piece: Piece,
    kind: StepKind,
    request: RequestId,
}

#[derive(Clone, Debug)]
enum Body {
    OneShot {
        txn: Txn,
        results: Vec<Option<PieceResult>>,
        sent: Vec<bool>,
    },
    Session {
        pending: Option<PendingStep>,
        steps: u16,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    AwaitTs,
    Executing,
    /// Executed, with a commit epoch above its timestamp's ceiling epoch: waiting for
    /// these shards' primaries to validate it (module doc, "epoch order").
    Validating {
        pending: BTreeSet<ShardId>,
    },
    /// Read-only and read: done once the commit wait has passed.
    ReadDone,
    Committing {
        decided: Option<bool>,
        finalized: bool,
    },
}

#[derive(Clone, Debug)]
struct CoordTxn {
    ts: Option<TxnTs>,
    /// The client request to answer next (one-shot, Begin, Commit, Abort).
    request: Option<RequestId>,
    body: Body,
    recorder: Option<NodeId>,
    /// Shards that were sent a writing piece.
    participants: BTreeSet<ShardId>,
    phase: Phase,
    cwt_done: bool,
    ticks: u64,
    /// The largest epoch proposed (§6.3): the ceiling epoch of the timestamp and every
    /// piece's proposal.
    epoch: u64,
    /// The keys each shard's primary ran pieces on (what a validation names).
    accessed: BTreeMap<ShardId, BTreeSet<Key>>,
    /// A read-only one-shot transaction served at the nearest copies in the view of
    /// this epoch (§6.4), or `None` at the primaries.
    read_view: Option<u64>,
    /// When its phases began (Table 2's latency breakdown).
    marks: PhaseMarks,
}

/// Local clock readings at the start of each phase, ns: the `k2.breakdown_*` counters
/// sum them over committed read-write transactions (K2 Table 2, as means).
#[derive(Clone, Copy, Debug, Default)]
struct PhaseMarks {
    admitted_ns: u64,
    ts_ns: u64,
    executed_ns: u64,
    /// The decision was in (with `async_finalize=false`: and every finalization); what
    /// follows is the rest of the commit wait.
    decided_ns: u64,
}

impl PhaseMarks {
    /// Adds a committed read-write transaction's get-ts, execution, commit (to the
    /// recorder's decision: Table 2's commit phase) and commit-wait times.
    fn count(&self, ctx: &mut Ctx<'_, K2Node>) {
        let us = |from: u64, to: u64| to.saturating_sub(from) / 1_000;
        let now = ctx.now_ns();
        ctx.count("k2.breakdown_txns", 1);
        ctx.count("k2.breakdown_get_ts_us", us(self.admitted_ns, self.ts_ns));
        ctx.count("k2.breakdown_execute_us", us(self.ts_ns, self.executed_ns));
        ctx.count(
            "k2.breakdown_commit_us",
            us(self.executed_ns, self.decided_ns),
        );
        ctx.count("k2.breakdown_commit_wait_us", us(self.decided_ns, now));
    }
}

/// A coordinator node.
#[derive(Debug)]
pub struct Coordinator {
    id: NodeId,
    opts: Options,
    cluster: Arc<Cluster>,
    source: TsSource,
    /// The oracle asked for a batch (the nearest, unless it went silent).
    oracle: OracleCursor,
    waiters: VecDeque<TsWaiter>,
    txns: BTreeMap<u64, CoordTxn>,
    by_ts: BTreeMap<TxnTs, u64>,
    next_seq: u64,
}

impl Coordinator {
    pub fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        recovered: &[Record],
    ) -> (Coordinator, u32) {
        let incarnation = crate::kit::log::next_incarnation(recovered, |r| match r {
            Record::Started { incarnation } => Some(*incarnation),
            _ => None,
        });
        // Node id and incarnation tell this coordinator's timestamps apart (batch.rs).
        let tag = (id.0 << 12) | (incarnation & 0xfff);
        let batching = opts.timestamps == Timestamps::Batch;
        let source = TsSource::new(
            batching,
            opts.ttl_ns,
            opts.within_drift(opts.ttl_ns),
            opts.step_ns,
            tag,
        );
        let oracle = OracleCursor::new(&cluster, id);
        let coordinator = Coordinator {
            id,
            opts,
            cluster,
            source,
            oracle,
            waiters: VecDeque::new(),
            txns: BTreeMap::new(),
            by_ts: BTreeMap::new(),
            next_seq: 1,
        };
        (coordinator, incarnation)
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, K2Node>, incarnation: u32) {
        ctx.checkpoint(Record::Started { incarnation });
        ctx.set_timer(self.opts.retry_ns, Timer::CoordinatorTick);
    }

    // ---- client requests ------------------------------------------------------------

    pub fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match req {
            ClientRequest::OneShot(txn) => self.begin_one_shot(ctx, request, txn),
            ClientRequest::Interactive(step) => self.on_step(ctx, request, step),
        }
    }

    fn admit(&mut self, ctx: &mut Ctx<'_, K2Node>, request: RequestId, body: Body) {
        if self.oracle.is_empty() {
            let why = "k2 needs an `oracle` service (topology [[services]])".to_string();
            return ctx.respond_aborted(request, AbortReason::Unsupported(why));
        }
        if self.txns.len() >= self.opts.max_inflight {
            let why = format!("overloaded: {} transactions in flight", self.txns.len());
            return ctx.respond_aborted(request, AbortReason::Unsupported(why));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let txn = CoordTxn {
            ts: None,
            request: Some(request),
            body,
            recorder: None,
            participants: BTreeSet::new(),
            phase: Phase::AwaitTs,
            cwt_done: false,
            ticks: 0,
            epoch: 0,
            accessed: BTreeMap::new(),
            read_view: None,
            marks: PhaseMarks {
                admitted_ns: ctx.now_ns(),
                ..PhaseMarks::default()
            },
        };
        self.txns.insert(seq, txn);
        self.acquire_ts(ctx, seq);
    }

    fn begin_one_shot(&mut self, ctx: &mut Ctx<'_, K2Node>, request: RequestId, txn: Txn) {
        if let Err(e) = txn.validate(self.cluster.shard_count()) {
            return ctx.respond_aborted(request, AbortReason::Invalid(e.to_string()));
        }
        let n = txn.pieces.len();
        let body = Body::OneShot {
            txn,
            results: vec![None; n],
            sent: vec![false; n],
        };
        self.admit(ctx, request, body);
    }

    fn on_step(&mut self, ctx: &mut Ctx<'_, K2Node>, request: RequestId, step: Step) {
        let id = match &step {
            Step::Begin { .. } => {
                let body = Body::Session {
                    pending: None,
                    steps: 0,
                };
                return self.admit(ctx, request, body);
            }
            Step::Get { txn, .. }
            | Step::Put { txn, .. }
            | Step::Modify { txn, .. }
            | Step::Commit { txn }
            | Step::Abort { txn } => *txn,
        };
        let live = id.coordinator == self.id
            && self.txns.get(&id.seq).is_some_and(|t| {
                t.phase == Phase::Executing
                    && matches!(&t.body, Body::Session { pending: None, .. })
                    && t.request.is_none()
            });
        if !live {
            let why = AbortReason::Failure;
            return ctx.respond(
                request,
                ClientResponse::Outcome(Outcome::Aborted { reason: why }),
            );
        }
        let seq = id.seq;
        match step {
            Step::Get { key, .. } => {
                let shard = self.cluster.partitioner.shard_of(&key);
                let piece = Piece::ops(shard, vec![Op::Get(key)]);
                self.send_step(ctx, seq, request, piece, StepKind::Get);
            }
            Step::Put { key, value, .. } => {
                let shard = self.cluster.partitioner.shard_of(&key);
                let piece = Piece::ops(shard, vec![Op::Put(key, Operand::Literal(value))]);
                self.send_step(ctx, seq, request, piece, StepKind::Put);
            }
            // Executed at the server like a put, on the version it writes over.
            Step::Modify { key, rmw, .. } => {
                let shard = self.cluster.partitioner.shard_of(&key);
                let piece = Piece::ops(shard, vec![rmw.op(key)]);
                self.send_step(ctx, seq, request, piece, StepKind::Put);
            }
            Step::Commit { .. } => {
                let t = self.txns.get_mut(&seq).expect("live");
                t.request = Some(request);
                self.finish_execution(ctx, seq);
            }
            Step::Abort { .. } => {
                self.txns.get_mut(&seq).expect("live").request = Some(request);
                self.abort(ctx, seq, AbortReason::User);
            }
            Step::Begin { .. } => unreachable!("handled above"),
        }
    }

    fn send_step(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        seq: u64,
        request: RequestId,
        piece: Piece,
        kind: StepKind,
    ) {
        let t = self.txns.get_mut(&seq).expect("live");
        let Body::Session { pending, steps } = &mut t.body else {
            unreachable!("a session")
        };
        let step = *steps;
        *steps = steps.saturating_add(1);
        note_access(&mut t.accessed, &piece);
        if kind == StepKind::Put {
            let primary = self.cluster.initial_leader(piece.shard);
            t.recorder.get_or_insert(primary);
            t.participants.insert(piece.shard);
        }
        *pending = Some(PendingStep {
            step,
            piece,
            kind,
            request,
        });
        self.send_pending(ctx, seq);
    }

    // ---- timestamps (K2-TB) ---------------------------------------------------------

    fn acquire_ts(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        if let Take::Local(ts) = self.source.take(ctx.now_ns()) {
            ctx.count("k2.ts_from_batch", 1);
            return self.got_ts(ctx, seq, ts);
        }
        let waiter = TsWaiter {
            seq,
            first_req: self.source.next_req(),
            eligible: self.source.eligible_reqs(ctx.now_ns()),
        };
        self.waiters.push_back(waiter);
        let batching = self.opts.timestamps == Timestamps::Batch;
        if !batching || !self.source.requesting() {
            self.request_ts(ctx);
        }
    }

    fn request_ts(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        let req = self.source.request(ctx.now_ns());
        let oracle = self
            .oracle
            .current()
            .expect("admit refuses without oracles");
        ctx.count("k2.ts_requests", 1);
        ctx.send(oracle, Msg::GetTs { req });
        if self.opts.timestamps == Timestamps::Batch {
            ctx.set_timer(self.opts.ttl_ns, Timer::BatchTtl { req });
        }
        // A lost request or a crashed oracle: ask the next one after a few round trips.
        let rtt_ns = (self.oracle.current_rtt_ms() * 1e6) as u64;
        let retry_ns = (4 * rtt_ns).max(1_000_000);
        ctx.set_timer(retry_ns, Timer::OracleRetry { req });
    }

    fn on_oracle_ts(&mut self, ctx: &mut Ctx<'_, K2Node>, req: u64, high_ns: u64, oracle: u32) {
        self.oracle.answered();
        match self.source.on_reply(req, high_ns, oracle) {
            Some(ts) => {
                // Strawman: one timestamp, for the first transaction that asked before `req`.
                if let Some(i) = self.waiters.iter().position(|w| w.eligible_for(req)) {
                    let waiter = self.waiters.remove(i).expect("present");
                    self.got_ts(ctx, waiter.seq, ts);
                }
            }
            None if self.source.batch_req() == Some(req) => {
                let mut rest = VecDeque::new();
                while let Some(w) = self.waiters.pop_front() {
                    let ts = if w.eligible_for(req) {
                        self.source.take_arrived_in_time()
                    } else {
                        None
                    };
                    match ts {
                        Some(ts) => self.got_ts(ctx, w.seq, ts),
                        None => rest.push_back(w),
                    }
                }
                self.waiters = rest;
            }
            None => {}
        }
        // Whoever is still waiting arrived before the next request is sent.
        let waiting = self.waiters.len();
        let batching = self.opts.timestamps == Timestamps::Batch;
        let missing = if batching {
            usize::from(waiting > 0 && !self.source.requesting())
        } else {
            waiting.saturating_sub(self.source.outstanding())
        };
        for _ in 0..missing {
            self.request_ts(ctx);
        }
    }

    fn on_oracle_retry(&mut self, ctx: &mut Ctx<'_, K2Node>, req: u64) {
        if !self.source.outstanding_reqs().contains(&req) {
            return;
        }
        ctx.count("k2.ts_request_retries", 1);
        self.source.abandon(req);
        self.oracle.skip();
        self.request_ts(ctx);
    }

    fn got_ts(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64, ts: TxnTs) {
        // Every timestamp handed out; `k2.ts_from_batch` of them were served at once from
        // a live batch (Fig. 16's share served locally).
        ctx.count("k2.timestamps", 1);
        let Some(t) = self.txns.get_mut(&seq) else {
            return;
        };
        t.ts = Some(ts);
        t.marks.ts_ns = ctx.now_ns();
        t.phase = Phase::Executing;
        if self.opts.epochs_on() {
            // No transaction commits in an epoch before its timestamp's ceiling epoch: that
            // orders epochs by real time (module doc, "epoch order").
            t.epoch = self.opts.epoch_of(ts.time_ns);
        }
        self.by_ts.insert(ts, seq);
        ctx.set_timer(self.opts.commit_wait_ns(), Timer::CommitWait { txn: ts });
        match &t.body {
            Body::OneShot { txn, .. } => {
                let first_write = txn.pieces.iter().find(|p| !p.is_read_only());
                t.recorder = first_write.map(|p| self.cluster.initial_leader(p.shard));
                t.read_view = match self.opts.replica_reads {
                    _ if first_write.is_some() => None,
                    ReplicaReads::Off => None,
                    // §6.4: the ceiling epoch of the read timestamp.
                    ReplicaReads::Linearizable => Some(self.opts.epoch_of(ts.time_ns)),
                    ReplicaReads::Snapshot => {
                        let stale = ts.time_ns.saturating_sub(self.opts.snapshot_staleness_ns);
                        Some(self.opts.epoch_of(stale))
                    }
                };
                self.send_ready(ctx, seq);
            }
            Body::Session { .. } => {
                let request = t.request.take().expect("Begin waits");
                let id = TxnId {
                    coordinator: self.id,
                    seq,
                };
                ctx.respond(request, ClientResponse::Began(id));
            }
        }
    }

    // ---- execution ----------------------------------------------------------------

    /// One-shot: sends every piece that may go now.
    fn send_ready(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        let route = Route::of(t, self.id);
        let Body::OneShot { txn, results, sent } = &mut t.body else {
            return;
        };
        for (i, piece) in txn.pieces.iter().enumerate() {
            let earlier_pending = txn.pieces[..i]
                .iter()
                .zip(results.iter())
                .any(|(p, r)| p.shard == piece.shard && r.is_none());
            let deps = piece.dependencies();
            if sent[i] || earlier_pending || deps.iter().any(|d| results[usize::from(*d)].is_none())
            {
                continue;
            }
            sent[i] = true;
            if !piece.is_read_only() {
                t.participants.insert(piece.shard);
            }
            if t.read_view.is_none() {
                note_access(&mut t.accessed, piece);
            }
            let inputs = deps
                .iter()
                .map(|d| (*d, results[usize::from(*d)].clone().expect("resolved")))
                .collect();
            let (to, msg) = route.piece_msg(&self.cluster, self.id, i, piece, inputs);
            ctx.send(to, msg);
        }
    }

    /// Re-sends the pieces still unanswered (a lost message or a crashed primary).
    fn resend(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = self.txns.get(&seq).expect("live");
        let route = Route::of(t, self.id);
        if let Body::OneShot { txn, results, sent } = &t.body {
            for (i, piece) in txn.pieces.iter().enumerate() {
                if !sent[i] || results[i].is_some() {
                    continue;
                }
                let inputs = piece
                    .dependencies()
                    .iter()
                    .map(|d| (*d, results[usize::from(*d)].clone().expect("resolved")))
                    .collect();
                let (to, msg) = route.piece_msg(&self.cluster, self.id, i, piece, inputs);
                ctx.send(to, msg);
            }
        } else {
            self.send_pending(ctx, seq);
        }
    }

    fn send_pending(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = self.txns.get(&seq).expect("live");
        let Body::Session {
            pending: Some(p), ..
        } = &t.body
        else {
            return;
        };
        let exec = Execute {
            txn: t.ts.expect("began"),
            recorder: t.recorder.unwrap_or(self.id),
            step: p.step,
            piece: p.piece.clone(),
            inputs: Vec::new(),
        };
        let primary = self.cluster.initial_leader(p.piece.shard);
        ctx.send(primary, Msg::Execute(Box::new(exec)));
    }

    fn on_executed(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        txn: TxnTs,
        step: u16,
        outcome: Result<PieceResult, AbortReason>,
        epoch: u64,
    ) {
        let Some(&seq) = self.by_ts.get(&txn) else {
            return;
        };
        let t = self.txns.get_mut(&seq).expect("indexed");
        if t.phase != Phase::Executing {
            return;
        }
        t.epoch = t.epoch.max(epoch);
        let result = match outcome {
            Ok(result) => result,
            Err(reason) => {
                let expected = match &t.body {
                    Body::OneShot { results, .. } => {
                        results.get(usize::from(step)).is_some_and(Option::is_none)
                    }
                    Body::Session { pending, .. } => {
                        pending.as_ref().is_some_and(|p| p.step == step)
                    }
                };
                if expected {
                    self.abort(ctx, seq, reason);
                }
                return;
            }
        };
        match &mut t.body {
            Body::OneShot { results, .. } => {
                let Some(slot) = results.get_mut(usize::from(step)).filter(|r| r.is_none()) else {
                    return;
                };
                *slot = Some(result);
                if results.iter().all(Option::is_some) {
                    self.finish_execution(ctx, seq);
                } else {
                    self.send_ready(ctx, seq);
                }
            }
            Body::Session { pending, .. } => {
                if pending.as_ref().is_none_or(|p| p.step != step) {
                    return;
                }
                let p = pending.take().expect("checked");
                let response = match p.kind {
                    StepKind::Get => {
                        ClientResponse::Read(result.outputs.into_iter().next().flatten())
                    }
                    StepKind::Put => ClientResponse::Written,
                };
                ctx.respond(p.request, response);
            }
        }
    }

    // ---- commit (Fig. 9 lines 6-7) ---------------------------------------------------

    fn finish_execution(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        t.marks.executed_ns = ctx.now_ns();
        let ceiling = self.opts.epoch_of(t.ts.expect("executed").time_ns);
        let validate = self.opts.epochs_on() && !self.opts.unsafe_skip_epoch_validation;
        if validate && t.epoch > ceiling && !t.accessed.is_empty() {
            ctx.count("k2.validations", 1);
            let pending = t.accessed.keys().copied().collect();
            t.phase = Phase::Validating { pending };
            return self.send_validations(ctx, seq);
        }
        self.commit_or_done(ctx, seq);
    }

    fn send_validations(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = &self.txns[&seq];
        let Phase::Validating { pending } = &t.phase else {
            return;
        };
        for shard in pending {
            let msg = Msg::Validate {
                txn: t.ts.expect("executed"),
                epoch: t.epoch,
                keys: t.accessed[shard].iter().cloned().collect(),
            };
            ctx.send(self.cluster.initial_leader(*shard), msg);
        }
    }

    fn on_validated(&mut self, ctx: &mut Ctx<'_, K2Node>, txn: TxnTs, shard: ShardId, ok: bool) {
        let Some(&seq) = self.by_ts.get(&txn) else {
            return;
        };
        let t = self.txns.get_mut(&seq).expect("indexed");
        let Phase::Validating { pending } = &mut t.phase else {
            return;
        };
        if !ok {
            ctx.count("k2.validation_aborts", 1);
            return self.abort(ctx, seq, AbortReason::Conflict);
        }
        pending.remove(&shard);
        if pending.is_empty() {
            self.commit_or_done(ctx, seq);
        }
    }

    fn commit_or_done(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        if t.participants.is_empty() {
            t.phase = Phase::ReadDone;
        } else {
            t.phase = Phase::Committing {
                decided: None,
                finalized: false,
            };
            self.send_commit(ctx, seq);
        }
        self.maybe_answer(ctx, seq);
    }

    fn send_commit(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = &self.txns[&seq];
        let msg = Msg::Commit {
            txn: t.ts.expect("executed"),
            participants: t.participants.iter().copied().collect(),
            epoch: t.epoch,
        };
        ctx.send(t.recorder.expect("a writer has a recorder"), msg);
    }

    fn on_decision(&mut self, ctx: &mut Ctx<'_, K2Node>, txn: TxnTs, committed: bool) {
        let Some(&seq) = self.by_ts.get(&txn) else {
            return;
        };
        let t = self.txns.get_mut(&seq).expect("indexed");
        if let Phase::Committing { decided, .. } = &mut t.phase {
            if decided.is_none() {
                *decided = Some(committed);
            }
        }
        self.maybe_answer(ctx, seq);
    }

    fn on_all_finalized(&mut self, ctx: &mut Ctx<'_, K2Node>, txn: TxnTs) {
        let Some(&seq) = self.by_ts.get(&txn) else {
            return;
        };
        let t = self.txns.get_mut(&seq).expect("indexed");
        if let Phase::Committing { finalized, .. } = &mut t.phase {
            *finalized = true;
        }
        self.maybe_answer(ctx, seq);
    }

    /// Answers the client once everything the answer needs has happened.
    fn maybe_answer(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        let path = match t.phase {
            Phase::ReadDone => CommitPath::ReadOnly,
            Phase::Committing {
                decided: Some(false),
                ..
            } => {
                ctx.count("k2.recorder_aborted", 1);
                return self.answer(
                    ctx,
                    seq,
                    Outcome::Aborted {
                        reason: AbortReason::Failure,
                    },
                );
            }
            Phase::Committing {
                decided: Some(true),
                finalized,
            } if finalized || self.opts.async_finalize => {
                if t.participants.len() == 1 {
                    CommitPath::Local
                } else {
                    CommitPath::TwoPhase
                }
            }
            _ => return,
        };
        if t.marks.decided_ns == 0 {
            t.marks.decided_ns = ctx.now_ns();
        }
        if !t.cwt_done {
            return;
        }
        let results = match &t.body {
            Body::OneShot { results, .. } => {
                results.iter().map(|r| r.clone().expect("all")).collect()
            }
            Body::Session { .. } => Vec::new(),
        };
        if path != CommitPath::ReadOnly {
            t.marks.count(ctx);
        }
        let outcome = Outcome::Committed {
            results,
            commit_ts: t.ts,
            path,
        };
        self.answer(ctx, seq, outcome);
    }

    fn answer(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64, outcome: Outcome) {
        let t = self.txns.remove(&seq).expect("live");
        if let Some(ts) = t.ts {
            self.by_ts.remove(&ts);
        }
        if let Body::Session {
            pending: Some(p), ..
        } = &t.body
        {
            ctx.respond(p.request, ClientResponse::Outcome(outcome.clone()));
        }
        if let Some(request) = t.request {
            ctx.respond(request, ClientResponse::Outcome(outcome));
        }
        self.waiters.retain(|w| w.seq != seq);
    }

    /// Aborts before the commit: tells the recorder (which finalizes the participants)
    /// and answers the client.
    fn abort(&mut self, ctx: &mut Ctx<'_, K2Node>, seq: u64, reason: AbortReason) {
        let t = &self.txns[&seq];
        if let (Some(ts), Some(recorder)) = (t.ts, t.recorder) {
            if !t.participants.is_empty() {
                let participants = t.participants.iter().copied().collect();
                ctx.send(
                    recorder,
                    Msg::Abort {
                        txn: ts,
                        participants,
                    },
                );
            }
        }
        ctx.count("k2.aborts", 1);
        self.answer(ctx, seq, Outcome::Aborted { reason });
    }

    // ---- events -------------------------------------------------------------------

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, K2Node>, msg: Msg) {
        match msg {
            Msg::OracleTs {
                req,
                high_ns,
                oracle,
            } => self.on_oracle_ts(ctx, req, high_ns, oracle),
            Msg::Executed {
                txn,
                step,
                outcome,
                epoch,
            } => self.on_executed(ctx, txn, step, outcome, epoch),
            Msg::Decision { txn, committed } => self.on_decision(ctx, txn, committed),
            Msg::AllFinalized { txn } => self.on_all_finalized(ctx, txn),
            Msg::Validated { txn, shard, ok } => self.on_validated(ctx, txn, shard, ok),
            _ => {}
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, K2Node>, timer: Timer) {
        match timer {
            Timer::CoordinatorTick => self.tick(ctx),
            Timer::BatchTtl { req } => self.source.ttl_expired(req),
            Timer::OracleRetry { req } => self.on_oracle_retry(ctx, req),
            Timer::CommitWait { txn } => {
                if let Some(&seq) = self.by_ts.get(&txn) {
                    self.txns.get_mut(&seq).expect("indexed").cwt_done = true;
                    self.maybe_answer(ctx, seq);
                }
            }
            Timer::DataNodeTick
            | Timer::RecorderDeadline { .. }
            | Timer::EpochCut { .. }
            | Timer::ReplicaTick => {}
        }
    }

    fn tick(&mut self, ctx: &mut Ctx<'_, K2Node>) {
        ctx.set_timer(self.opts.retry_ns, Timer::CoordinatorTick);
        let limit = self.opts.txn_timeout_ns.div_ceil(self.opts.retry_ns);
        let seqs: Vec<u64> = self.txns.keys().copied().collect();
        for seq in seqs {
            let t = self.txns.get_mut(&seq).expect("live");
            t.ticks += 1;
            let expired = t.ticks >= limit;
            match t.phase {
                Phase::AwaitTs | Phase::Executing | Phase::Validating { .. } if expired => {
                    self.abort(ctx, seq, AbortReason::Timeout);
                }
                Phase::Validating { .. } => self.send_validations(ctx, seq),
                Phase::Executing => self.resend(ctx, seq),
                Phase::Committing { decided: None, .. } if expired => {
                    let reason = "no decision from the recorder in time".to_string();
                    self.answer(ctx, seq, Outcome::Unknown { reason });
                }
                Phase::Committing {
                    decided: Some(true),
                    finalized: false,
                } if expired => {
                    // The decision is durable; finalization will follow.
                    let t = self.txns.get_mut(&seq).expect("live");
                    t.phase = Phase::Committing {
                        decided: Some(true),
                        finalized: true,
                    };
                    self.maybe_answer(ctx, seq);
                }
                Phase::Committing { .. } => self.send_commit(ctx, seq),
                Phase::AwaitTs | Phase::ReadDone => {}
            }
        }
    }

    pub fn inflight(&self) -> usize {
        self.txns.len()
    }
}

/// Notes the keys of a piece run at its shard's primary.
fn note_access(accessed: &mut BTreeMap<ShardId, BTreeSet<Key>>, piece: &Piece) {
    let keys = accessed.entry(piece.shard).or_default();
    piece.for_each_key(|k, _| {
        keys.insert(k.clone());
    });
}

/// What sending a one-shot transaction's pieces needs to know about it.
struct Route {
    txn: TxnTs,
    recorder: NodeId,
    /// A read-only transaction's replica read view (§6.4).
    read_view: Option<u64>,
    ticks: u64,
}

impl Route {
    fn of(t: &CoordTxn, me: NodeId) -> Route {
        Route {
            txn: t.ts.expect("executing"),
            recorder: t.recorder.unwrap_or(me),
            read_view: t.read_view,
            ticks: t.ticks,
        }
    }

    /// Where piece `i` goes, and how: a read in the replica read view to the nearest
    /// copy of its shard (a resend tries the next nearest, so a crashed replica costs a
    /// retry), or an `Execute` to its primary.
    fn piece_msg(
        &self,
        cluster: &Cluster,
        me: NodeId,
        i: usize,
        piece: &Piece,
        inputs: Vec<(u16, PieceResult)>,
    ) -> (NodeId, Msg) {
        let (txn, step) = (self.txn, i as u16);
        let Some(epoch) = self.read_view else {
            let exec = Execute {
                txn,
                recorder: self.recorder,
                step,
                piece: piece.clone(),
                inputs,
            };
            let primary = cluster.initial_leader(piece.shard);
            return (primary, Msg::Execute(Box::new(exec)));
        };
        let to = crate::kit::replica_reads::nearest_copy(cluster, me, piece.shard, self.ticks);
        let msg = Msg::RepRead {
            txn,
            step,
            epoch,
            piece: piece.clone(),
            inputs,
        };
        (to, msg)
    }
}
