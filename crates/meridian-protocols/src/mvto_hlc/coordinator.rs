//! The transaction coordinator (CockroachDB's `TxnCoordSender`), co-located with a data
//! node: takes an HLC timestamp at the start, sends each piece to its shard's primary,
//! pipelines writes (an interactive `Put`/`Modify` is answered before its intent is
//! acknowledged), moves the timestamp when a primary asks (uncertainty restart, pushed
//! write) after a read refresh, and commits in parallel: the STAGING record goes out
//! while the last writes are still in flight, and the client hears "committed" once the
//! record and every write are acknowledged at or below the staged timestamp.
//!
//! The coordinator is a loop over its state (`advance`): every event updates the state,
//! then `advance` does what the state allows next — a refresh first, then sends, then the
//! commit. Timeouts count timer ticks.

use super::options::Options;
use super::wire::{Eval, EvalOutcome, Msg, Record, StagedWrite, Timer, TxnMeta, TxnRef};
use super::MvtoNode;
use crate::kit::hlc::{Hlc, HlcTs};
use meridian_core::node::Ctx;
use meridian_core::txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Key, Op, Operand, Outcome, Piece,
    PieceResult, Step, Txn,
};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, Timestamp, TxnId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// What an outstanding or deferred piece is for.
#[derive(Clone, Debug)]
enum Kind {
    /// Piece `i` of a one-shot transaction.
    Piece(usize),
    /// An interactive read; the client waits.
    Get(RequestId),
    /// An interactive (pipelined) write.
    Write,
}

#[derive(Clone, Debug)]
struct Pend {
    piece: Piece,
    inputs: Vec<(u16, PieceResult)>,
    kind: Kind,
    /// The read and write timestamps it was sent with: a resend carries the same, so
    /// every copy of a step gets the same answer (a step answered `Retry` at one
    /// timestamp and evaluated at another would run twice under two steps).
    sent_ts: (HlcTs, HlcTs),
}

impl Pend {
    fn writes(&self) -> bool {
        !self.piece.is_read_only()
    }

    fn keys(&self) -> BTreeSet<Key> {
        let mut keys = BTreeSet::new();
        self.piece.for_each_key(|k, _| {
            keys.insert(k.clone());
        });
        keys
    }
}

#[derive(Clone, Debug)]
enum Body {
    OneShot {
        txn: Txn,
        results: Vec<Option<PieceResult>>,
        sent: Vec<bool>,
    },
    Session,
}

#[derive(Clone, Debug)]
struct Refresh {
    id: u32,
    to: HlcTs,
    awaiting: BTreeSet<ShardId>,
}

#[derive(Clone, Debug)]
struct CTxn {
    id: TxnRef,
    orig: HlcTs,
    limit: HlcTs,
    read_ts: HlcTs,
    write_ts: HlcTs,
    anchor: Option<NodeId>,
    /// Refresh spans: the keys read, by shard.
    reads: BTreeMap<ShardId, BTreeSet<Key>>,
    /// Every key written (or being written): its shard and the step writing it last.
    writes: BTreeMap<Key, (ShardId, u32)>,
    pending: BTreeMap<u32, Pend>,
    /// Pieces to send once the refresh in progress (or a write on a key they touch) is done.
    deferred: VecDeque<Pend>,
    /// A timestamp the transaction must move to (refresh first).
    bump: Option<HlcTs>,
    refresh: Option<Refresh>,
    moves: u32,
    body: Body,
    /// The client request answered by the outcome (one-shot, Commit, Abort).
    request: Option<RequestId>,
    committing: bool,
    /// The staged timestamp, and whether the anchor acknowledged it.
    stage: Option<(HlcTs, bool)>,
    /// Waiting for the anchor's decision after an abort of a staged transaction.
    aborting: Option<AbortReason>,
    failed: Option<AbortReason>,
    ticks: u64,
    /// ClosedTS: a read-only one-shot transaction read at the nearest copies at `limit`.
    follower: bool,
}

impl CTxn {
    fn meta(&self) -> TxnMeta {
        TxnMeta {
            id: self.id,
            orig: self.orig,
            anchor: self.anchor.expect("a writer has an anchor"),
        }
    }

    fn participants(&self) -> Vec<ShardId> {
        let shards: BTreeSet<ShardId> = self.writes.values().map(|(s, _)| *s).collect();
        shards.into_iter().collect()
    }
}

/// Where step `step` of `t` goes, and the message: an `Eval` to its shard's primary, or
/// (ClosedTS) a follower read to the nearest copy, the next nearest on each resend.
fn eval_msg(cluster: &Cluster, me: NodeId, t: &CTxn, step: u32, p: &Pend) -> (NodeId, Msg) {
    let shard = p.piece.shard;
    if t.follower {
        let to = crate::kit::replica_reads::nearest_copy(cluster, me, shard, t.ticks);
        let msg = Msg::RepRead {
            txn: t.id,
            step,
            ts: p.sent_ts.0,
            piece: p.piece.clone(),
            inputs: p.inputs.clone(),
        };
        return (to, msg);
    }
    let eval = Eval {
        txn: TxnMeta {
            id: t.id,
            orig: t.orig,
            anchor: t.anchor.unwrap_or(me),
        },
        step,
        piece: p.piece.clone(),
        inputs: p.inputs.clone(),
        read_ts: p.sent_ts.0,
        write_ts: p.sent_ts.1,
        limit: t.limit,
    };
    (cluster.initial_leader(shard), Msg::Eval(Box::new(eval)))
}

fn ts_of(ts: HlcTs) -> Timestamp {
    Timestamp::new(ts.wall_ns, ts.logical)
}

#[derive(Debug)]
pub struct Coordinator {
    id: NodeId,
    incarnation: u32,
    opts: Options,
    cluster: Arc<Cluster>,
    hlc: Hlc,
    txns: BTreeMap<u64, CTxn>,
    next_seq: u64,
    next_step: u32,
}

impl Coordinator {
    pub fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        recovered: &[Record],
    ) -> Coordinator {
        let incarnation = crate::kit::log::next_incarnation(recovered, |r| match r {
            Record::Started { incarnation } => Some(*incarnation),
            _ => None,
        });
        Coordinator {
            id,
            incarnation,
            hlc: Hlc::new(opts.max_offset_ns),
            opts,
            cluster,
            txns: BTreeMap::new(),
            // Client-visible ids carry the incarnation (`TxnId::new`), so a step of a
            // session from before a restart never reaches a new transaction.
            next_seq: TxnId::new(id, incarnation, 1).seq,
            next_step: 1,
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        ctx.checkpoint(Record::Started {
            incarnation: self.incarnation,
        });
        ctx.set_timer(self.opts.retry_ns, Timer::CoordinatorTick);
    }

    fn observe(&mut self, ctx: &mut Ctx<'_, MvtoNode>, ts: HlcTs) {
        if self.hlc.update(ctx.now_ns(), ts).is_err() {
            ctx.count("mvto_hlc.hlc_too_far_ahead", 1);
        }
    }

    // ---- client requests ------------------------------------------------------------

    pub fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match req {
            ClientRequest::OneShot(txn) => {
                if let Err(e) = txn.validate(self.cluster.shard_count()) {
                    return ctx.respond_aborted(request, AbortReason::Invalid(e.to_string()));
                }
                let n = txn.pieces.len();
                let anchor = txn
                    .pieces
                    .iter()
                    .find(|p| !p.is_read_only())
                    .map(|p| self.cluster.initial_leader(p.shard));
                let body = Body::OneShot {
                    txn,
                    results: vec![None; n],
                    sent: vec![false; n],
                };
                let follower = self.opts.closed_ts() && anchor.is_none();
                if let Some(seq) = self.admit(ctx, request, body) {
                    let t = self.txns.get_mut(&seq).expect("admitted");
                    if follower {
                        // ClosedTS: read at the top of the uncertainty interval, so that
                        // whatever committed before the start is below (every clock is
                        // within max_offset of this one); the copies wait until it is
                        // closed, so whatever commits after is above.
                        (t.follower, t.read_ts, t.write_ts) = (true, t.limit, t.limit);
                    }
                    t.anchor = anchor;
                    t.request = Some(request);
                    self.advance(ctx, seq);
                }
            }
            ClientRequest::Interactive(step) => self.on_step(ctx, request, step),
        }
    }

    fn admit(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        request: RequestId,
        body: Body,
    ) -> Option<u64> {
        if self.txns.len() >= self.opts.max_inflight {
            let why = format!("overloaded: {} transactions in flight", self.txns.len());
            ctx.respond_aborted(request, AbortReason::Unsupported(why));
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        // CockroachDB: the transaction's timestamp is taken from the gateway's HLC at
        // the start; its uncertainty interval reaches max_offset above it.
        let orig = self.hlc.now(ctx.now_ns());
        let limit = HlcTs {
            wall_ns: orig.wall_ns.saturating_add(self.opts.max_offset_ns),
            logical: u32::MAX,
        };
        let id = TxnRef {
            coordinator: self.id,
            incarnation: self.incarnation,
            seq,
        };
        let txn = CTxn {
            id,
            orig,
            limit,
            read_ts: orig,
            write_ts: orig,
            anchor: None,
            reads: BTreeMap::new(),
            writes: BTreeMap::new(),
            pending: BTreeMap::new(),
            deferred: VecDeque::new(),
            bump: None,
            refresh: None,
            moves: 0,
            body,
            request: None,
            committing: false,
            stage: None,
            aborting: None,
            failed: None,
            ticks: 0,
            follower: false,
        };
        self.txns.insert(seq, txn);
        Some(seq)
    }

    fn on_step(&mut self, ctx: &mut Ctx<'_, MvtoNode>, request: RequestId, step: Step) {
        let id = match &step {
            Step::Begin { .. } => {
                if let Some(seq) = self.admit(ctx, request, Body::Session) {
                    let id = TxnId {
                        coordinator: self.id,
                        seq,
                    };
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
        let seq = id.seq;
        let live = id.coordinator == self.id
            && self.txns.get(&seq).is_some_and(|t| {
                matches!(t.body, Body::Session)
                    && t.request.is_none()
                    && !t.committing
                    && !t
                        .pending
                        .values()
                        .chain(&t.deferred)
                        .any(|p| matches!(p.kind, Kind::Get(_)))
            });
        if !live {
            return ctx.respond_aborted(request, AbortReason::Failure);
        }
        let t = self.txns.get_mut(&seq).expect("live");
        if let Some(reason) = t.failed.clone() {
            t.request = Some(request);
            return self.abort(ctx, seq, reason);
        }
        let shard_of = |key: &Key| self.cluster.partitioner.shard_of(key);
        let (piece, kind) = match step {
            Step::Get { key, .. } => {
                let shard = shard_of(&key);
                (Piece::ops(shard, vec![Op::Get(key)]), Kind::Get(request))
            }
            Step::Put { key, value, .. } => {
                let shard = shard_of(&key);
                let op = Op::Put(key, Operand::Literal(value));
                (Piece::ops(shard, vec![op]), Kind::Write)
            }
            Step::Modify { key, rmw, .. } => {
                let shard = shard_of(&key);
                (Piece::ops(shard, vec![rmw.op(key)]), Kind::Write)
            }
            Step::Commit { .. } => {
                t.request = Some(request);
                t.committing = true;
                return self.advance(ctx, seq);
            }
            Step::Abort { .. } => {
                t.request = Some(request);
                return self.abort(ctx, seq, AbortReason::User);
            }
            Step::Begin { .. } => unreachable!("handled above"),
        };
        if matches!(kind, Kind::Write) {
            if t.anchor.is_none() {
                t.anchor = Some(self.cluster.initial_leader(piece.shard));
            }
            // Write pipelining: the client hears now; the write is proven at commit.
            ctx.respond(request, ClientResponse::Written);
        }
        t.deferred.push_back(Pend {
            piece,
            inputs: Vec::new(),
            kind,
            sent_ts: Default::default(),
        });
        self.advance(ctx, seq);
    }

    // ---- the loop ------------------------------------------------------------------

    fn advance(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let Some(t) = self.txns.get(&seq) else {
            return;
        };
        if t.aborting.is_some() || t.refresh.is_some() {
            return;
        }
        if let Some(reason) = t.failed.clone() {
            return self.abort(ctx, seq, reason);
        }
        if t.bump.is_some_and(|b| b > t.read_ts) {
            // Reads in flight were sent at the current read timestamp: refresh once they
            // are back, so that the refresh covers them. (A pipelined write's read of its
            // own key needs none: its intent has kept the key since.)
            if t.pending.values().any(|p| !matches!(p.kind, Kind::Write)) {
                return;
            }
            let to = t.bump.expect("checked");
            if self.start_refresh(ctx, seq, to) {
                return;
            }
        }
        self.dispatch(ctx, seq);
        self.send_ready(ctx, seq);
        self.try_commit(ctx, seq);
    }

    /// Sends the deferred pieces that may go: none while refreshing; none touching a key
    /// with a write of this transaction in flight (a read must see it, a second write
    /// must follow it) or an earlier deferred piece.
    fn dispatch(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        let mut blocked: BTreeSet<Key> = t
            .pending
            .values()
            .filter(|p| p.writes())
            .flat_map(Pend::keys)
            .collect();
        let mut keep = VecDeque::new();
        let mut go = Vec::new();
        while let Some(p) = t.deferred.pop_front() {
            let keys = p.keys();
            if keys.iter().any(|k| blocked.contains(k)) {
                blocked.extend(keys);
                keep.push_back(p);
            } else {
                if p.writes() {
                    blocked.extend(keys);
                }
                go.push(p);
            }
        }
        t.deferred = keep;
        for p in go {
            self.send_eval(ctx, seq, p);
        }
    }

    fn send_eval(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64, p: Pend) {
        let step = self.next_step;
        self.next_step = self.next_step.wrapping_add(1);
        let t = self.txns.get_mut(&seq).expect("live");
        if matches!(p.kind, Kind::Write) {
            for key in p.piece.write_keys() {
                t.writes.insert(key, (p.piece.shard, step));
            }
        }
        let mut p = p;
        p.sent_ts = (t.read_ts, t.write_ts.max(t.read_ts));
        let (to, msg) = eval_msg(&self.cluster, self.id, t, step, &p);
        t.pending.insert(step, p);
        ctx.send(to, msg);
    }

    /// One-shot: queues every piece whose inputs are known and whose earlier pieces on
    /// the same shard have answered.
    fn send_ready(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        let Body::OneShot { txn, results, sent } = &mut t.body else {
            return;
        };
        let mut go = Vec::new();
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
            let inputs = deps
                .iter()
                .map(|d| (*d, results[usize::from(*d)].clone().expect("resolved")))
                .collect();
            go.push(Pend {
                piece: piece.clone(),
                inputs,
                kind: Kind::Piece(i),
                sent_ts: Default::default(),
            });
        }
        for p in go {
            self.send_eval(ctx, seq, p);
        }
    }

    /// Moves the transaction to `to`: refreshes its reads first, unless it read nothing
    /// (or the broken variant skips it). Returns whether a refresh is now in flight.
    fn start_refresh(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64, to: HlcTs) -> bool {
        let skip = self.opts.unsafe_skip_read_refresh;
        let step = self.next_step;
        let t = self.txns.get_mut(&seq).expect("live");
        if t.reads.is_empty() || skip {
            t.read_ts = to;
            t.write_ts = t.write_ts.max(to);
            t.bump = None;
            return false;
        }
        self.next_step = self.next_step.wrapping_add(1);
        ctx.count("mvto_hlc.read_refreshes", 1);
        t.refresh = Some(Refresh {
            id: step,
            to,
            awaiting: t.reads.keys().copied().collect(),
        });
        self.send_refresh(ctx, seq);
        true
    }

    fn send_refresh(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let t = &self.txns[&seq];
        let Some(r) = &t.refresh else {
            return;
        };
        for shard in &r.awaiting {
            let msg = Msg::Refresh {
                txn: t.id,
                id: r.id,
                keys: t.reads[shard].iter().cloned().collect(),
                from: t.read_ts,
                to: r.to,
            };
            ctx.send(self.cluster.initial_leader(*shard), msg);
        }
    }

    // ---- commit ----------------------------------------------------------------------

    fn try_commit(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let t = self.txns.get_mut(&seq).expect("live");
        if let Body::OneShot { results, .. } = &t.body {
            t.committing = results.iter().all(Option::is_some);
        }
        let only_writes_pending = t.pending.values().all(|p| matches!(p.kind, Kind::Write));
        if !t.committing || !t.deferred.is_empty() || !only_writes_pending {
            return;
        }
        if t.writes.is_empty() {
            let outcome = Outcome::Committed {
                results: self.results(seq),
                commit_ts: Some(ts_of(self.txns[&seq].read_ts)),
                path: CommitPath::ReadOnly,
            };
            return self.answer(ctx, seq, outcome);
        }
        // Parallel commits: stage at the current write timestamp (reads refreshed up to
        // it first), in parallel with the writes still in flight.
        let commit_ts = t.write_ts.max(t.read_ts);
        if commit_ts > t.read_ts {
            t.bump = Some(commit_ts);
            return self.advance(ctx, seq);
        }
        match t.stage {
            Some((ts, _)) if ts == commit_ts => {}
            _ => {
                t.stage = Some((commit_ts, false));
                self.send_stage(ctx, seq);
                return;
            }
        }
        let t = &self.txns[&seq];
        if t.stage == Some((commit_ts, true)) && t.pending.is_empty() {
            // Implicitly committed: the record is STAGING at commit_ts and every write
            // is an intent at or below it. Make it explicit; resolution is asynchronous.
            ctx.send(
                t.anchor.expect("writer"),
                Msg::Commit {
                    txn: t.id,
                    ts: commit_ts,
                },
            );
            let path = if t.participants().len() == 1 {
                CommitPath::Local
            } else {
                CommitPath::TwoPhase
            };
            let outcome = Outcome::Committed {
                results: self.results(seq),
                commit_ts: Some(ts_of(commit_ts)),
                path,
            };
            self.answer(ctx, seq, outcome);
        }
    }

    fn send_stage(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let t = &self.txns[&seq];
        let Some((ts, false)) = t.stage else {
            return;
        };
        let writes = t
            .writes
            .iter()
            .map(|(key, (shard, step))| StagedWrite {
                shard: *shard,
                key: key.clone(),
                step: *step,
            })
            .collect();
        let msg = Msg::Stage {
            txn: t.meta(),
            ts,
            writes,
        };
        ctx.send(t.anchor.expect("writer"), msg);
    }

    fn results(&self, seq: u64) -> Vec<PieceResult> {
        match &self.txns[&seq].body {
            Body::OneShot { results, .. } => results
                .iter()
                .map(|r| r.clone().unwrap_or_default())
                .collect(),
            Body::Session => Vec::new(),
        }
    }

    /// Aborts. Before anything was staged the anchor cannot commit (a late STAGING is
    /// refused once the record is aborted): tell it and answer. After, the transaction
    /// may be implicitly committed: ask the anchor to decide (it recovers) and wait.
    fn abort(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64, reason: AbortReason) {
        let t = self.txns.get_mut(&seq).expect("live");
        if t.aborting.is_some() {
            return;
        }
        // Pieces sent once may have laid intents even if their answer said otherwise.
        let sent = t.pending.values().chain(&t.deferred);
        let writing = sent.filter(|p| p.writes()).map(|p| p.piece.shard);
        let mut participants: BTreeSet<ShardId> = writing.collect();
        participants.extend(t.participants());
        if let Some(anchor) = t.anchor.filter(|_| !participants.is_empty()) {
            let msg = Msg::Abort {
                txn: t.meta(),
                participants: participants.into_iter().collect(),
            };
            ctx.send(anchor, msg);
        }
        if t.stage.is_some() {
            t.aborting = Some(reason);
            return;
        }
        ctx.count("mvto_hlc.aborts", 1);
        self.answer(ctx, seq, Outcome::Aborted { reason });
    }

    fn answer(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64, outcome: Outcome) {
        let t = self.txns.remove(&seq).expect("live");
        let gets = t
            .pending
            .values()
            .chain(&t.deferred)
            .filter_map(|p| match p.kind {
                Kind::Get(r) => Some(r),
                _ => None,
            });
        for request in gets {
            ctx.respond(request, ClientResponse::Outcome(outcome.clone()));
        }
        if let Some(request) = t.request {
            ctx.respond(request, ClientResponse::Outcome(outcome));
        }
    }

    // ---- replies -------------------------------------------------------------------

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, MvtoNode>, msg: Msg) {
        match msg {
            Msg::Evaluated {
                txn,
                step,
                outcome,
                now,
            } => {
                self.observe(ctx, now);
                self.on_evaluated(ctx, txn, step, outcome);
            }
            Msg::Refreshed { txn, id, shard, ok } => self.on_refreshed(ctx, txn, id, shard, ok),
            Msg::Staged { txn, ts, ok } => self.on_staged(ctx, txn, ts, ok),
            Msg::Decided { txn, committed, ts } => self.on_decided(ctx, txn, committed, ts),
            _ => {}
        }
    }

    fn live(&self, txn: TxnRef) -> Option<u64> {
        let ours = txn.coordinator == self.id && txn.incarnation == self.incarnation;
        ours.then_some(txn.seq)
            .filter(|s| self.txns.contains_key(s))
    }

    fn on_evaluated(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        txn: TxnRef,
        step: u32,
        outcome: EvalOutcome,
    ) {
        let Some(seq) = self.live(txn) else {
            return;
        };
        let max_moves = self.opts.max_refreshes;
        let t = self.txns.get_mut(&seq).expect("live");
        let Some(p) = t.pending.remove(&step) else {
            return;
        };
        match outcome {
            EvalOutcome::Done {
                result,
                write_ts,
                written,
            } => {
                if let Some(w) = write_ts {
                    t.write_ts = t.write_ts.max(w);
                    for key in written {
                        t.writes.insert(key, (p.piece.shard, step));
                    }
                }
                let reads = p.piece.read_keys();
                if !reads.is_empty() {
                    t.reads.entry(p.piece.shard).or_default().extend(reads);
                }
                match (p.kind, &mut t.body) {
                    (Kind::Piece(i), Body::OneShot { results, .. }) => results[i] = Some(result),
                    (Kind::Get(request), _) => {
                        let value = result.outputs.into_iter().next().flatten();
                        ctx.respond(request, ClientResponse::Read(value));
                    }
                    _ => {}
                }
            }
            EvalOutcome::Retry { at } => {
                t.moves += 1;
                if t.moves > max_moves {
                    ctx.count("mvto_hlc.too_many_moves", 1);
                    t.failed.get_or_insert(AbortReason::Conflict);
                }
                t.bump = t.bump.max(Some(at));
                t.deferred.push_front(p);
            }
            EvalOutcome::Failed(reason) => {
                t.deferred.push_front(p);
                t.failed.get_or_insert(reason);
            }
        }
        self.advance(ctx, seq);
    }

    fn on_refreshed(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        txn: TxnRef,
        id: u32,
        shard: ShardId,
        ok: bool,
    ) {
        let Some(seq) = self.live(txn) else {
            return;
        };
        let t = self.txns.get_mut(&seq).expect("live");
        let Some(r) = t.refresh.as_mut().filter(|r| r.id == id) else {
            return;
        };
        if !ok {
            ctx.count("mvto_hlc.aborts_refresh_failed", 1);
            t.refresh = None;
            t.failed.get_or_insert(AbortReason::Conflict);
            return self.advance(ctx, seq);
        }
        r.awaiting.remove(&shard);
        if r.awaiting.is_empty() {
            let to = r.to;
            t.refresh = None;
            t.read_ts = to;
            t.write_ts = t.write_ts.max(to);
            if t.bump.is_some_and(|b| b <= to) {
                t.bump = None;
            }
        }
        self.advance(ctx, seq);
    }

    fn on_staged(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef, ts: HlcTs, ok: bool) {
        let Some(seq) = self.live(txn) else {
            return;
        };
        let t = self.txns.get_mut(&seq).expect("live");
        if !ok {
            // The anchor aborted the record (wounded, or too old): final.
            if t.aborting.is_none() {
                ctx.count("mvto_hlc.aborts_stage_refused", 1);
                let msg = Msg::Abort {
                    txn: t.meta(),
                    participants: t.participants(),
                };
                ctx.send(t.anchor.expect("staged"), msg);
                self.answer(
                    ctx,
                    seq,
                    Outcome::Aborted {
                        reason: AbortReason::Conflict,
                    },
                );
            }
            return;
        }
        if t.stage == Some((ts, false)) {
            t.stage = Some((ts, true));
            self.advance(ctx, seq);
        }
    }

    fn on_decided(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef, committed: bool, ts: HlcTs) {
        let Some(seq) = self.live(txn) else {
            return;
        };
        let Some(reason) = self.txns[&seq].aborting.clone() else {
            return;
        };
        let outcome = if committed {
            ctx.count("mvto_hlc.abort_found_committed", 1);
            Outcome::Committed {
                results: self.results(seq),
                commit_ts: Some(ts_of(ts)),
                path: CommitPath::TwoPhase,
            }
        } else {
            ctx.count("mvto_hlc.aborts", 1);
            Outcome::Aborted { reason }
        };
        self.answer(ctx, seq, outcome);
    }

    // ---- timers --------------------------------------------------------------------

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, MvtoNode>, timer: Timer) {
        if !matches!(timer, Timer::CoordinatorTick) {
            return;
        }
        ctx.set_timer(self.opts.retry_ns, Timer::CoordinatorTick);
        let limit = self.opts.txn_timeout_ns.div_ceil(self.opts.retry_ns);
        let seqs: Vec<u64> = self.txns.keys().copied().collect();
        for seq in seqs {
            let t = self.txns.get_mut(&seq).expect("live");
            t.ticks += 1;
            if t.ticks >= limit {
                if t.stage.is_some() {
                    let reason = "no decision in time".to_string();
                    self.answer(ctx, seq, Outcome::Unknown { reason });
                } else {
                    self.abort(ctx, seq, AbortReason::Timeout);
                }
                continue;
            }
            self.resend(ctx, seq);
        }
    }

    /// Re-sends whatever is unanswered (a lost message, a crashed primary).
    fn resend(&mut self, ctx: &mut Ctx<'_, MvtoNode>, seq: u64) {
        let t = &self.txns[&seq];
        if t.aborting.is_some() {
            let msg = Msg::Abort {
                txn: t.meta(),
                participants: t.participants(),
            };
            return ctx.send(t.anchor.expect("staged"), msg);
        }
        for (step, p) in &t.pending {
            let (to, msg) = eval_msg(&self.cluster, self.id, t, *step, p);
            ctx.send(to, msg);
        }
        self.send_refresh(ctx, seq);
        self.send_stage(ctx, seq);
    }

    pub fn inflight(&self) -> usize {
        self.txns.len()
    }
}
