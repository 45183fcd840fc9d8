//! The coordinator: drives a one-shot transaction through the execution phase (pieces sent
//! as their value dependencies resolve) and two-phase commit, and answers its client. An
//! interactive transaction (`2pl-raft`) is the same transaction growing one piece per step:
//! a `Get` is a piece answered when its result arrives, a `Put` a piece sent at once and
//! answered `Written` at once (its lock and result arrive before the commit starts), and
//! `Commit` starts 2PC once every piece has a result.
//!
//! Partitions are named by their shard's initial leader (the partition id); in replicated
//! mode ([`Options::replicated`]) messages go to the replica believed to lead
//! ([`Leaders`]), and `NotLeader` hints and silence move that belief.

use super::options::Options;
use super::vecmap::VecMap;
use super::wire::{Cx, LocalOutcome, Msg, PieceRun, Record, Timer, ToCoord, ToServer};
use crate::kit::quorum::Votes;
use crate::kit::replicated::{self, Leaders};
use crate::kit::ttc::OracleCursor;
use crate::kit::two_pc::{Decisions, Inquiry, Logged, Resend};
use crate::p2pl_ttc::safets::SafeReader;
use meridian_core::txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Key, Outcome, Step,
};
use meridian_core::txn::{Op, Operand, Piece, PieceBody, PieceResult, Txn};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, TimerId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug)]
enum Phase {
    /// Pieces go out as their inputs arrive.
    Executing,
    /// Every piece has a result; collecting votes.
    Preparing { yes: Votes<()> },
    /// A one-round transaction timed out: asking its server whether it committed.
    Resolving,
    /// `p2pl-ttc`: every participant voted yes; asking a TTC oracle for the commit
    /// timestamp (the next nearest on each retry).
    Timestamping,
    /// `p2pl-ttc`: the commit timestamp is known; waiting until true time has passed it
    /// before deciding (Spanner's commit wait). Participants keep their locks meanwhile.
    CommitWaiting { commit_ts: Timestamp },
}

/// Calls `f` with every piece `piece` depends on (`Piece::dependencies`, unsorted and with
/// repeats, without collecting them).
fn for_each_dependency(piece: &Piece, mut f: impl FnMut(u16)) {
    let mut visit = |operand: &Operand| {
        if let Operand::Input { piece, .. } = operand {
            f(*piece);
        }
    };
    match &piece.body {
        PieceBody::Ops(ops) => {
            for op in ops {
                match op {
                    Op::Get(_) | Op::Check(..) => {}
                    Op::Put(_, o) | Op::Add(_, o) | Op::Append(_, o) => visit(o),
                }
            }
        }
        PieceBody::Procedure(call) => call.args.iter().for_each(visit),
    }
}

/// Whether `pred` holds for every piece `piece` depends on.
fn all_dependencies(piece: &Piece, mut pred: impl FnMut(u16) -> bool) -> bool {
    let mut all = true;
    for_each_dependency(piece, |d| all = all && pred(d));
    all
}

/// What an interactive transaction's client is waiting for.
#[derive(Debug, Default)]
struct Session {
    /// A `Get`, answered by piece `.1`'s result.
    reading: Option<(RequestId, u16)>,
    /// The client asked to commit (the request is [`CoordTxn::request`]).
    committing: bool,
}

/// An undecided transaction.
#[derive(Debug)]
struct CoordTxn {
    /// Who hears the outcome: the one-shot request, or an interactive `Commit`.
    request: Option<RequestId>,
    /// `Some` for an interactive transaction.
    session: Option<Session>,
    txn: Txn,
    age_ns: u64,
    /// Single shard: the server executes and commits in one round (`CommitPath::Local`).
    one_round: bool,
    /// Each participant (a shard's data node) with the indices of its pieces, in order.
    participants: VecMap<NodeId, Vec<u16>>,
    /// The incarnation each participant executed in; all its results must share one.
    incarnations: VecMap<NodeId, u32>,
    phase: Phase,
    results: Vec<Option<PieceResult>>,
    sent: Vec<bool>,
    deadline_ns: u64,
    retries: u32,
    timer: TimerId,
}

/// What a retransmission tick does.
enum TickStep {
    Abort,
    StartResolving,
    Retransmit,
    Reprepare,
    Resolve,
    GiveUp,
    AskOracle,
    Decide(Timestamp),
}

/// A coordinator node.
#[derive(Debug)]
pub struct Coordinator {
    id: NodeId,
    opts: Options,
    cluster: Arc<Cluster>,
    incarnation: u32,
    next_counter: u64,
    /// Undecided transactions. The smallest id is the horizon sent to servers.
    txns: FxHashMap<TxnId, CoordTxn>,
    /// Whether each id from `oldest` on is still undecided (ids are handed out in order; the
    /// front is popped as soon as it is decided, so the front, if any, is the smallest
    /// undecided id).
    undecided: VecDeque<bool>,
    /// The counter of `undecided`'s front (or `next_counter` when it is empty).
    oldest: u64,
    /// Committed transactions not yet acknowledged by every participant (and restored from
    /// the log after a restart): the decisions a server may still ask for.
    commits: Decisions<Option<Timestamp>>,
    since_checkpoint: usize,
    checkpoint_due: bool,
    /// Replicated mode: which replica of each shard is believed to lead.
    leaders: Leaders,
    /// Interactive transactions that ended between two steps of their client, and why: the
    /// next step hears it. Bounded by `max_inflight` (oldest forgotten first; a step of a
    /// forgotten one hears `Failure`).
    ended: VecDeque<(TxnId, AbortReason)>,
    /// `p2pl-ttc`: the oracle asked for commit timestamps (the nearest, unless it went
    /// silent; empty without TTC).
    oracle: OracleCursor,
    /// `p2pl-ttc` with `replica_reads=safets`: read-only transactions at the replicas.
    reader: Option<SafeReader>,
}

impl Coordinator {
    /// Builds the coordinator from its log: a fresh incarnation, and every commit decision
    /// not known to be acknowledged.
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        records: &[Record],
    ) -> Coordinator {
        let (checkpoint_record, tail) = crate::kit::log::latest_checkpoint(records, |r| {
            matches!(r, Record::CoordCheckpoint { .. })
        });
        let checkpoint = match checkpoint_record {
            Some(Record::CoordCheckpoint {
                incarnation,
                pending,
            }) => {
                let pending = pending
                    .iter()
                    .map(|(t, ts, p)| (*t, *ts, p.clone()))
                    .collect();
                Some((*incarnation, pending))
            }
            _ => None,
        };
        let logged = tail.iter().map(|record| match record {
            Record::Started { incarnation } => Logged::Started(*incarnation),
            Record::Decided {
                txn,
                participants,
                commit_ts,
            } => Logged::Decided(*txn, *commit_ts, participants.clone()),
            other => panic!("log of coordinator {id} holds {other:?}"),
        });
        let (commits, incarnation) = Decisions::recover(checkpoint, logged);
        let oracle = match opts.ttc {
            Some(_) => OracleCursor::new(&cluster, id),
            None => OracleCursor::default(),
        };
        let reader = opts
            .ttc
            .as_ref()
            .and_then(|ttc| ttc.safe.clone())
            .map(|safe| SafeReader::new(safe, id, cluster.clone(), opts.max_inflight));
        Coordinator {
            reader,
            id,
            opts,
            incarnation,
            next_counter: 0,
            txns: FxHashMap::default(),
            undecided: VecDeque::new(),
            oldest: 0,
            commits,
            since_checkpoint: tail.len(),
            checkpoint_due: false,
            leaders: Leaders::new(&cluster),
            ended: VecDeque::new(),
            oracle,
            cluster,
        }
    }

    /// Logs the new incarnation before any of its ids is used, and re-drives restored commits.
    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let incarnation = self.incarnation;
        self.persist(ctx, Record::Started { incarnation });
        for txn in self.commits.txns() {
            self.send_commits(ctx, txn, self.opts.retry_ns);
        }
        self.settle(ctx);
    }

    pub(crate) fn on_client_request(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match req {
            // p2pl-ttc's SafeTS: read-only one-shot transactions read at the replicas.
            ClientRequest::OneShot(txn) if self.reader.is_some() && SafeReader::takes(&txn) => {
                if self.validate(ctx, request, &txn) {
                    let reader = self.reader.as_mut().expect("checked");
                    reader.submit(ctx, request, txn);
                }
            }
            ClientRequest::OneShot(txn) => self.submit(ctx, request, txn),
            ClientRequest::Interactive(_) if !self.opts.interactive => {
                let reason = AbortReason::Unsupported(
                    "2pl-2pc runs one-shot transactions only; interactive sessions are \
                     2pl-raft's"
                        .to_string(),
                );
                ctx.respond(request, aborted(reason));
            }
            ClientRequest::Interactive(step) => self.step(ctx, request, step),
        }
        self.settle(ctx);
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, sender: NodeId, msg: Msg) {
        // Partitions are known by their partition id, whichever replica leads them now.
        let from = replicated::partition_of(&self.cluster, sender);
        if let Msg::OracleTs {
            txn,
            high_ns,
            oracle,
        } = msg
        {
            self.oracle.answered();
            self.on_oracle_ts(ctx, txn, Timestamp::new(high_ns, oracle));
            return self.settle(ctx);
        }
        if let Msg::Safe(msg) = msg {
            if let Some(reader) = &mut self.reader {
                reader.on_message(ctx, msg);
            }
            return;
        }
        let Msg::ToCoord(body) = msg else {
            panic!(
                "coordinator {} received a server's message {msg:?}",
                self.id
            );
        };
        if !matches!(body, ToCoord::NotLeader { .. }) {
            self.leaders.heard(&self.cluster, sender, ctx.now_ns());
        }
        match body {
            ToCoord::Executed {
                txn,
                incarnation,
                results,
            } => self.on_executed(ctx, from, txn, incarnation, results),
            ToCoord::Failed { txn, reason } => self.on_failed(ctx, txn, reason),
            ToCoord::Done { txn, outcome } => self.on_done(ctx, txn, outcome),
            ToCoord::Vote { txn, yes } => self.on_vote(ctx, from, txn, yes),
            ToCoord::CommitAck { txn } => self.on_commit_ack(ctx, from, txn),
            ToCoord::Query { txn } => self.on_query(ctx, sender, txn),
            ToCoord::NotLeader { txn, leader } => self.on_not_leader(ctx, from, txn, leader),
        }
        self.settle(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::Txn(txn) => self.tick(ctx, txn),
            Timer::Commit(txn) => self.commit_tick(ctx, txn),
            Timer::SafeRead(request) => {
                if let Some(reader) = &mut self.reader {
                    reader.on_timer(ctx, request);
                }
            }
            other => panic!("coordinator {} fired a server timer {other:?}", self.id),
        }
        self.settle(ctx);
    }

    // ---- submission and the execution phase --------------------------------------------

    /// Refuses (answering the client) a malformed transaction.
    fn validate(&self, ctx: &mut Cx<'_>, request: RequestId, txn: &Txn) -> bool {
        if let Err(e) = txn.validate(self.cluster.shard_count()) {
            ctx.respond(request, aborted(AbortReason::Invalid(e.to_string())));
            return false;
        }
        if txn.pieces.len() > usize::from(u16::MAX) {
            let why = format!("{} pieces (at most {})", txn.pieces.len(), u16::MAX);
            ctx.respond(request, aborted(AbortReason::Invalid(why)));
            return false;
        }
        true
    }

    fn submit(&mut self, ctx: &mut Cx<'_>, request: RequestId, txn: Txn) {
        if !self.validate(ctx, request, &txn) {
            return;
        }
        if let Some(id) = self.open(ctx, request, txn, None) {
            self.dispatch(ctx, id);
        }
    }

    /// Starts a transaction (refusing it if `max_inflight` are undecided already).
    fn open(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        txn: Txn,
        session: Option<Session>,
    ) -> Option<TxnId> {
        if self.txns.len() >= self.opts.max_inflight {
            let why = format!(
                "overloaded: {} transactions already in flight at this coordinator \
                 (max_inflight)",
                self.txns.len()
            );
            ctx.respond(request, aborted(AbortReason::Unsupported(why)));
            return None;
        }
        let id = TxnId::new(self.id, self.incarnation, self.next_counter);
        self.next_counter += 1;
        let mut participants: VecMap<NodeId, Vec<u16>> = VecMap::new();
        for (i, piece) in txn.pieces.iter().enumerate() {
            let node = self.cluster.initial_leader(piece.shard);
            participants
                .get_or_insert_with(node, Vec::new)
                .push(i as u16);
        }
        let n = txn.pieces.len();
        let now = ctx.now_ns();
        let t = CoordTxn {
            request: session.is_none().then_some(request),
            age_ns: now,
            // p2pl-ttc: every commit takes a timestamp from the oracle, through 2PC.
            one_round: session.is_none() && participants.len() == 1 && self.opts.ttc.is_none(),
            session,
            participants,
            incarnations: VecMap::new(),
            txn,
            phase: Phase::Executing,
            results: vec![None; n],
            sent: vec![false; n],
            deadline_ns: now.saturating_add(self.opts.exec_timeout_ns),
            retries: 0,
            timer: ctx.set_timer(self.opts.retry_ns, Timer::Txn(id)),
        };
        self.txns.insert(id, t);
        self.undecided.push_back(true);
        Some(id)
    }

    // ---- interactive transactions ------------------------------------------------------

    fn step(&mut self, ctx: &mut Cx<'_>, request: RequestId, step: Step) {
        match step {
            Step::Begin { .. } => {
                let txn = Txn { pieces: Vec::new() };
                if let Some(id) = self.open(ctx, request, txn, Some(Session::default())) {
                    ctx.respond(request, ClientResponse::Began(id));
                }
            }
            Step::Get { txn, key, .. } => self.add_op(ctx, request, txn, key.clone(), Op::Get(key)),
            Step::Put { txn, key, value } => {
                let op = Op::Put(key.clone(), Operand::Literal(value));
                self.add_op(ctx, request, txn, key, op);
            }
            // The server runs the read-modify-write under its exclusive lock.
            Step::Modify { txn, key, rmw } => {
                let op = rmw.op(key.clone());
                self.add_op(ctx, request, txn, key, op);
            }
            Step::Commit { txn } => self.commit_step(ctx, request, txn),
            Step::Abort { txn } => {
                if self.ready_for_step(ctx, request, txn) {
                    self.txns.get_mut(&txn).expect("live").request = Some(request);
                    self.abort(ctx, txn, AbortReason::User);
                }
            }
        }
    }

    /// Whether `txn` is a live interactive transaction idle between steps; if not, the
    /// request is answered (with how the transaction ended, if it did).
    fn ready_for_step(&mut self, ctx: &mut Cx<'_>, request: RequestId, txn: TxnId) -> bool {
        let busy = match self.txns.get(&txn) {
            Some(t) => match &t.session {
                Some(s) => s.reading.is_some() || s.committing,
                None => true,
            },
            None => {
                let reason = match self.ended.iter().position(|(id, _)| *id == txn) {
                    Some(i) => self.ended.remove(i).expect("present").1,
                    None => AbortReason::Failure,
                };
                ctx.respond(request, aborted(reason));
                return false;
            }
        };
        if busy {
            let why = format!("{txn} is not an interactive transaction awaiting a step");
            ctx.respond(request, aborted(AbortReason::Invalid(why)));
        }
        !busy
    }

    /// A `Get`, `Put` or `Modify`: one more piece, sent as soon as the shard's earlier
    /// pieces have results. A `Get` is answered with its result, the others at once.
    fn add_op(&mut self, ctx: &mut Cx<'_>, request: RequestId, id: TxnId, key: Key, op: Op) {
        if !self.ready_for_step(ctx, request, id) {
            return;
        }
        let shard = self.cluster.partitioner.shard_of(&key);
        let partition = self.cluster.initial_leader(shard);
        let t = self.txns.get_mut(&id).expect("live");
        let Ok(index) = u16::try_from(t.txn.pieces.len()) else {
            let why = format!("more than {} operations", u16::MAX);
            self.abort(ctx, id, AbortReason::Invalid(why.clone()));
            return ctx.respond(request, aborted(AbortReason::Invalid(why)));
        };
        let read = matches!(op, Op::Get(_));
        // Each step has `exec_timeout_ms` to finish: the client's think time is its own.
        t.deadline_ns = ctx.now_ns().saturating_add(self.opts.exec_timeout_ns);
        t.txn.pieces.push(Piece::ops(shard, vec![op]));
        t.results.push(None);
        t.sent.push(false);
        t.participants
            .get_or_insert_with(partition, Vec::new)
            .push(index);
        let session = t.session.as_mut().expect("interactive");
        if read {
            session.reading = Some((request, index));
        } else {
            ctx.respond(request, ClientResponse::Written);
        }
        self.dispatch(ctx, id);
    }

    fn commit_step(&mut self, ctx: &mut Cx<'_>, request: RequestId, id: TxnId) {
        if !self.ready_for_step(ctx, request, id) {
            return;
        }
        let t = self.txns.get_mut(&id).expect("live");
        t.deadline_ns = ctx.now_ns().saturating_add(self.opts.exec_timeout_ns);
        t.request = Some(request);
        t.session.as_mut().expect("interactive").committing = true;
        if t.txn.pieces.is_empty() {
            // Nothing read or written: nothing to commit anywhere.
            let t = self.remove_txn(id);
            ctx.cancel_timer(t.timer);
            let outcome = Outcome::Committed {
                results: Vec::new(),
                commit_ts: None,
                path: CommitPath::ReadOnly,
            };
            return ctx.respond(request, ClientResponse::Outcome(outcome));
        }
        if t.results.iter().all(Option::is_some) {
            self.start_prepare(ctx, id);
        }
    }

    /// New results of an interactive transaction: answers a waiting `Get`; starts the
    /// commit if the client asked for it and every piece has a result.
    fn session_progress(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self.txns.get_mut(&id).expect("live");
        let session = t.session.as_mut().expect("interactive");
        if let Some((request, index)) = session.reading {
            if let Some(result) = &t.results[usize::from(index)] {
                session.reading = None;
                let value = result.outputs.first().cloned().flatten();
                ctx.respond(request, ClientResponse::Read(value));
            }
        }
        let session = t.session.as_ref().expect("interactive");
        if session.committing && t.results.iter().all(Option::is_some) {
            self.start_prepare(ctx, id);
        }
    }

    /// How an ended transaction's client hears it: the waiting request (a `Get`, the
    /// commit, a one-shot), or, between two steps of an interactive client, its next step.
    fn tell_abort(&mut self, ctx: &mut Cx<'_>, id: TxnId, t: &CoordTxn, reason: AbortReason) {
        let waiting = t
            .request
            .or_else(|| t.session.as_ref()?.reading.map(|(r, _)| r));
        match waiting {
            Some(request) => ctx.respond(request, aborted(reason)),
            None => {
                if self.ended.len() >= self.opts.max_inflight {
                    self.ended.pop_front();
                }
                self.ended.push_back((id, reason));
            }
        }
    }

    /// Removes a transaction once decided (or given up).
    fn remove_txn(&mut self, id: TxnId) -> CoordTxn {
        let t = self.txns.remove(&id).expect("removing a live transaction");
        let counter = id.seq & ((1 << TxnId::INCARNATION_SHIFT) - 1);
        let slot = usize::try_from(counter - self.oldest).expect("a live id");
        self.undecided[slot] = false;
        while self.undecided.front() == Some(&false) {
            self.undecided.pop_front();
            self.oldest += 1;
        }
        t
    }

    /// The smallest undecided id: every transaction of this coordinator below it is decided.
    fn horizon(&self) -> TxnId {
        let counter = if self.undecided.is_empty() {
            self.next_counter
        } else {
            self.oldest
        };
        TxnId::new(self.id, self.incarnation, counter)
    }

    /// Sends to the replica believed to lead `partition` (in single-copy mode, itself).
    fn send_server(&self, ctx: &mut Cx<'_>, partition: NodeId, body: ToServer) {
        let horizon = self.horizon();
        let to = self.leaders.route(&self.cluster, partition);
        ctx.send(to, Msg::ToServer { horizon, body });
    }

    /// Sends every piece that can run now, batched per shard. A piece can run when each piece
    /// it depends on has a result (or runs earlier in the same batch), and every earlier
    /// piece on its shard has a result or runs in the same batch: a server executes a
    /// transaction's pieces in piece order, whatever the network does.
    fn dispatch(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self
            .txns
            .get_mut(&id)
            .expect("dispatching a live transaction");
        let mut batches: Batches = Vec::new();
        let mut blocked: Vec<ShardId> = Vec::new();
        for (i, piece) in t.txn.pieces.iter().enumerate() {
            if t.results[i].is_some() {
                continue;
            }
            let shard = piece.shard;
            let batch = batches.iter().position(|(s, _)| *s == shard);
            let ready = !t.sent[i]
                && !blocked.contains(&shard)
                && all_dependencies(piece, |d| {
                    t.results[usize::from(d)].is_some()
                        || batch.is_some_and(|b| batches[b].1.iter().any(|r| r.index == d))
                });
            if ready {
                let run = piece_run(&t.txn, &t.results, i);
                match batch {
                    Some(b) => batches[b].1.push(run),
                    None => batches.push((shard, vec![run])),
                }
                t.sent[i] = true;
            } else if !blocked.contains(&shard) {
                blocked.push(shard);
            }
        }
        self.send_batches(ctx, id, batches);
    }

    /// Resends the pieces that went out but have no result yet.
    fn retransmit(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        let mut batches: Batches = Vec::new();
        for (i, piece) in t.txn.pieces.iter().enumerate() {
            if t.sent[i] && t.results[i].is_none() {
                let run = piece_run(&t.txn, &t.results, i);
                match batches.iter_mut().find(|(s, _)| *s == piece.shard) {
                    Some((_, runs)) => runs.push(run),
                    None => batches.push((piece.shard, vec![run])),
                }
            }
        }
        self.send_batches(ctx, id, batches);
    }

    /// Sends one EXECUTE per shard, in shard order.
    fn send_batches(&self, ctx: &mut Cx<'_>, id: TxnId, mut batches: Batches) {
        let t = &self.txns[&id];
        batches.sort_unstable_by_key(|(shard, _)| *shard);
        for (shard, pieces) in batches {
            let body = ToServer::Execute {
                txn: id,
                age_ns: t.age_ns,
                one_round: t.one_round,
                pieces,
            };
            let partition = self.cluster.initial_leader(shard);
            self.send_server(ctx, partition, body);
        }
    }

    fn on_executed(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        id: TxnId,
        incarnation: u32,
        results: Vec<(u16, PieceResult)>,
    ) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        if t.one_round || !matches!(t.phase, Phase::Executing) {
            return;
        }
        if *t.incarnations.get_or_insert_with(from, || incarnation) != incarnation {
            // The participant restarted mid-transaction: its earlier results are gone.
            return self.abort(ctx, id, AbortReason::Failure);
        }
        for (i, result) in results {
            let i = usize::from(i);
            if i < t.sent.len() && t.sent[i] && t.results[i].is_none() {
                t.results[i] = Some(result);
            }
        }
        if t.session.is_some() {
            self.dispatch(ctx, id);
            self.session_progress(ctx, id);
        } else if t.results.iter().all(Option::is_some) {
            self.start_prepare(ctx, id);
        } else {
            self.dispatch(ctx, id);
        }
    }

    fn on_failed(&mut self, ctx: &mut Cx<'_>, id: TxnId, reason: AbortReason) {
        let Some(t) = self.txns.get(&id) else {
            return;
        };
        // A one-round transaction's failure comes as `Done`; this is a stale duplicate.
        if !t.one_round {
            self.abort(ctx, id, reason);
        }
    }

    fn on_done(&mut self, ctx: &mut Cx<'_>, id: TxnId, outcome: LocalOutcome) {
        if !self.txns.get(&id).is_some_and(|t| t.one_round) {
            return;
        }
        let t = self.remove_txn(id);
        ctx.cancel_timer(t.timer);
        let request = t.request.expect("a one-shot transaction has its request");
        let response = match outcome {
            LocalOutcome::Committed(results) => {
                assert_eq!(results.len(), t.txn.pieces.len(), "{id}: results per piece");
                ClientResponse::Outcome(Outcome::Committed {
                    results,
                    commit_ts: None,
                    path: CommitPath::Local,
                })
            }
            LocalOutcome::Aborted(reason) => aborted(reason),
        };
        ctx.respond(request, response);
    }

    // ---- two-phase commit --------------------------------------------------------------

    fn start_prepare(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self
            .txns
            .get_mut(&id)
            .expect("preparing a live transaction");
        t.phase = Phase::Preparing {
            yes: Votes::all(t.participants.keys().copied()),
        };
        t.retries = 0;
        self.send_prepares(ctx, id);
    }

    /// Sends PREPARE to every participant that has not voted yes.
    fn send_prepares(&self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        let Phase::Preparing { yes } = &t.phase else {
            panic!("{id}: PREPARE outside the prepare phase");
        };
        for (node, pieces) in t.participants.iter() {
            if !yes.replied(*node) {
                let body = ToServer::Prepare {
                    txn: id,
                    incarnation: *t
                        .incarnations
                        .get(node)
                        .expect("a participant's incarnation"),
                    pieces: pieces.clone(),
                };
                self.send_server(ctx, *node, body);
            }
        }
    }

    fn on_vote(&mut self, ctx: &mut Cx<'_>, from: NodeId, id: TxnId, yes: bool) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        let participant = t.participants.contains_key(&from);
        let Phase::Preparing { yes: votes } = &mut t.phase else {
            return;
        };
        if !participant {
            return;
        }
        if !yes {
            // The participant lost the transaction's locks (restart, timeout).
            return self.abort(ctx, id, AbortReason::Failure);
        }
        votes.record(from, ());
        if !votes.complete() {
            return;
        }
        if self.opts.ttc.is_some() {
            let t = self.txns.get_mut(&id).expect("live");
            t.phase = Phase::Timestamping;
            t.retries = 0;
            self.ask_oracle(ctx, id);
        } else {
            self.decide_commit(ctx, id, None);
        }
    }

    // ---- p2pl-ttc: commit timestamps from the TTC oracle, commit wait ----------------

    /// Asks the oracle under the cursor for `id`'s commit timestamp. Every participant holds
    /// its locks already, so the timestamp is taken inside the lock point.
    fn ask_oracle(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(oracle) = self.oracle.current() else {
            return self.abort(ctx, id, AbortReason::Failure);
        };
        ctx.count("p2pl.oracle_requests", 1);
        ctx.send(oracle, Msg::GetTs { txn: id });
    }

    /// The oracle's `T_high` becomes the commit timestamp; with commit wait the decision
    /// waits until true time has passed it, else it is taken at once.
    fn on_oracle_ts(&mut self, ctx: &mut Cx<'_>, id: TxnId, commit_ts: Timestamp) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        if !matches!(t.phase, Phase::Timestamping) {
            return;
        }
        let ttc = self.opts.ttc.as_ref().expect("p2pl-ttc asks oracles");
        if !ttc.commit_wait {
            return self.decide_commit(ctx, id, Some(commit_ts));
        }
        t.phase = Phase::CommitWaiting { commit_ts };
        ctx.cancel_timer(t.timer);
        t.timer = ctx.set_timer(ttc.commit_wait_ns(), Timer::Txn(id));
    }

    /// Commit point: the decision is logged before anyone hears it, then the client learns
    /// it. Servers keep their locks until COMMIT arrives, so nothing can observe the
    /// transaction half-applied.
    fn decide_commit(&mut self, ctx: &mut Cx<'_>, id: TxnId, commit_ts: Option<Timestamp>) {
        let t = self.remove_txn(id);
        ctx.cancel_timer(t.timer);
        let participants: Vec<NodeId> = t.participants.keys().copied().collect();
        self.persist(
            ctx,
            Record::Decided {
                txn: id,
                participants: participants.clone(),
                commit_ts,
            },
        );
        self.commits.decide(id, commit_ts, participants);
        self.send_commits(ctx, id, self.opts.retry_ns);
        // An interactive client had its reads one by one; a one-shot one gets them all.
        let results = match t.session {
            Some(_) => Vec::new(),
            None => t
                .results
                .into_iter()
                .map(|r| r.expect("every piece has a result at commit"))
                .collect(),
        };
        let outcome = Outcome::Committed {
            results,
            commit_ts,
            path: CommitPath::TwoPhase,
        };
        let request = t.request.expect("a committing transaction has its request");
        ctx.respond(request, ClientResponse::Outcome(outcome));
    }

    /// Sends COMMIT to the participants that have not acknowledged and arms the retry.
    fn send_commits(&mut self, ctx: &mut Cx<'_>, id: TxnId, retry_after_ns: u64) {
        let horizon = self.horizon();
        let commit_ts = self.commits.decision(id).copied().flatten();
        for &node in self.commits.waiting(id) {
            let body = ToServer::Commit { txn: id, commit_ts };
            let to = self.leaders.route(&self.cluster, node);
            ctx.send(to, Msg::ToServer { horizon, body });
        }
        let timer = ctx.set_timer(retry_after_ns, Timer::Commit(id));
        self.commits.armed(id, timer);
    }

    fn on_commit_ack(&mut self, ctx: &mut Cx<'_>, from: NodeId, id: TxnId) {
        if let Some(Some(timer)) = self.commits.acknowledge(id, from) {
            ctx.cancel_timer(timer);
        }
    }

    /// A prepared server asks for the decision. Presumed abort: with no commit decision
    /// (and the transaction not undecided here), the answer is abort — this covers
    /// transactions of earlier incarnations that were lost in a crash.
    fn on_query(&mut self, ctx: &mut Cx<'_>, from: NodeId, id: TxnId) {
        match self.commits.inquiry(id, self.txns.contains_key(&id)) {
            Inquiry::Commit(&commit_ts) => {
                self.send_server(ctx, from, ToServer::Commit { txn: id, commit_ts })
            }
            Inquiry::PresumedAbort => self.send_server(ctx, from, ToServer::Abort { txn: id }),
            Inquiry::Undecided => {}
        }
    }

    /// Decides abort (nothing to log: no record means abort) and tells every participant
    /// that may hold locks.
    fn abort(&mut self, ctx: &mut Cx<'_>, id: TxnId, reason: AbortReason) {
        let t = self.remove_txn(id);
        assert!(
            !t.one_round,
            "{id}: a one-round transaction is resolved, not aborted: its server may have \
             committed it"
        );
        ctx.cancel_timer(t.timer);
        for (node, pieces) in t.participants.iter() {
            if pieces.iter().any(|&i| t.sent[usize::from(i)]) {
                self.send_server(ctx, *node, ToServer::Abort { txn: id });
            }
        }
        self.tell_abort(ctx, id, &t, reason);
    }

    // ---- timers ------------------------------------------------------------------------

    fn tick(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(t) = self.txns.get(&id) else {
            return;
        };
        let exhausted = t.retries >= self.opts.max_retries;
        let step = match t.phase {
            Phase::Executing if ctx.now_ns() < t.deadline_ns => TickStep::Retransmit,
            Phase::Executing if t.one_round => TickStep::StartResolving,
            Phase::Executing => TickStep::Abort,
            Phase::Preparing { .. } if exhausted => TickStep::Abort,
            Phase::Preparing { .. } => TickStep::Reprepare,
            Phase::Resolving if exhausted => TickStep::GiveUp,
            Phase::Resolving => TickStep::Resolve,
            Phase::Timestamping if exhausted => TickStep::Abort,
            Phase::Timestamping => TickStep::AskOracle,
            Phase::CommitWaiting { commit_ts } => TickStep::Decide(commit_ts),
        };
        if self.opts.replicated && !matches!(step, TickStep::Abort | TickStep::GiveUp) {
            // A partition that does not answer may have lost its leader: try another replica,
            // unless its leader answered lately (this transaction is just slow).
            for partition in self.awaited(id) {
                self.rotate_if_silent(ctx, partition);
            }
        }
        match step {
            TickStep::Abort => return self.abort(ctx, id, AbortReason::Timeout),
            TickStep::GiveUp => return self.give_up(ctx, id),
            TickStep::Decide(commit_ts) => return self.decide_commit(ctx, id, Some(commit_ts)),
            TickStep::AskOracle => {
                // A lost request or a crashed oracle: ask the next nearest.
                self.txns.get_mut(&id).expect("live").retries += 1;
                self.oracle.skip();
                self.ask_oracle(ctx, id);
            }
            TickStep::Retransmit => self.retransmit(ctx, id),
            TickStep::StartResolving => {
                let t = self.txns.get_mut(&id).expect("live");
                t.phase = Phase::Resolving;
                t.retries = 0;
                self.send_resolve(ctx, id);
            }
            TickStep::Reprepare => {
                self.txns.get_mut(&id).expect("live").retries += 1;
                self.send_prepares(ctx, id);
            }
            TickStep::Resolve => {
                self.txns.get_mut(&id).expect("live").retries += 1;
                self.send_resolve(ctx, id);
            }
        }
        let timer = ctx.set_timer(self.opts.retry_ns, Timer::Txn(id));
        self.txns.get_mut(&id).expect("live").timer = timer;
    }

    fn send_resolve(&self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        for node in t.participants.keys() {
            self.send_server(ctx, *node, ToServer::Resolve { txn: id });
        }
    }

    /// A one-round transaction whose server never answered: the client cannot be told
    /// either way.
    fn give_up(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self.remove_txn(id);
        ctx.cancel_timer(t.timer);
        let reason = "the shard's server did not answer; the transaction may have committed";
        let outcome = Outcome::Unknown {
            reason: reason.to_string(),
        };
        let request = t.request.expect("a one-round transaction has its request");
        ctx.respond(request, ClientResponse::Outcome(outcome));
    }

    /// Retransmits COMMIT until every participant acknowledges: `max_retries` times every
    /// `retry_ms`, then once per `idle_timeout_ms`. The decision must be remembered until
    /// then anyway (a prepared participant may still ask), so this costs no extra memory, and
    /// it lets the entry go once an acknowledgement finally gets through.
    fn commit_tick(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        if !self.commits.retry(id) {
            return;
        }
        let resend = Resend {
            retry_ns: self.opts.retry_ns,
            max_retries: self.opts.max_retries,
            slow_ns: self.opts.idle_timeout_ns,
        };
        let after = self.commits.resend_after(id, resend);
        if self.opts.replicated {
            for partition in self.commits.waiting(id).to_vec() {
                self.rotate_if_silent(ctx, partition);
            }
        }
        self.send_commits(ctx, id, after);
    }

    // ---- routing (replicated mode) -----------------------------------------------------

    /// Moves the belief about who leads `partition` if its leader has been silent for a
    /// retry period.
    fn rotate_if_silent(&mut self, ctx: &mut Cx<'_>, partition: NodeId) {
        let (now_ns, silent_ns) = (ctx.now_ns(), self.opts.retry_ns);
        self.leaders
            .rotate_if_silent(&self.cluster, partition, now_ns, silent_ns);
    }

    /// The partitions whose answer the transaction's current phase waits for.
    fn awaited(&self, id: TxnId) -> Vec<NodeId> {
        let t = &self.txns[&id];
        let waiting = |pieces: &Vec<u16>| {
            pieces.iter().any(|&i| {
                let i = usize::from(i);
                t.sent[i] && t.results[i].is_none()
            })
        };
        t.participants
            .iter()
            .filter(|(node, pieces)| match &t.phase {
                Phase::Executing => waiting(pieces),
                Phase::Preparing { yes } => !yes.replied(**node),
                Phase::Resolving => true,
                Phase::Timestamping | Phase::CommitWaiting { .. } => false,
            })
            .map(|(node, _)| *node)
            .collect()
    }

    /// A replica that does not lead `partition` got our request for `id`: follow its hint
    /// and, if it names a new leader, resend at once what the transaction waits for.
    fn on_not_leader(
        &mut self,
        ctx: &mut Cx<'_>,
        partition: NodeId,
        id: TxnId,
        leader: Option<NodeId>,
    ) {
        if !self.leaders.follow(&self.cluster, partition, leader) {
            return;
        }
        if let Some(t) = self.txns.get(&id) {
            match t.phase {
                Phase::Executing => self.retransmit(ctx, id),
                Phase::Preparing { .. } => self.send_prepares(ctx, id),
                Phase::Resolving => self.send_resolve(ctx, id),
                Phase::Timestamping | Phase::CommitWaiting { .. } => {}
            }
        } else if let Some(timer) = self.commits.disarm(id) {
            ctx.cancel_timer(timer);
            self.send_commits(ctx, id, self.opts.retry_ns);
        }
    }

    // ---- log ---------------------------------------------------------------------------

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
        if self.since_checkpoint >= self.opts.checkpoint_every {
            self.checkpoint_due = true;
        }
    }

    /// Ends every handler: writes a due checkpoint once the state matches the log.
    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if !self.checkpoint_due {
            return;
        }
        let pending = self.commits.checkpoint();
        let incarnation = self.incarnation;
        ctx.checkpoint(Record::CoordCheckpoint {
            incarnation,
            pending,
        });
        self.since_checkpoint = 0;
        self.checkpoint_due = false;
    }
}

/// EXECUTE batches being assembled: the pieces for each shard.
type Batches = Vec<(ShardId, Vec<PieceRun>)>;

/// Piece `i` of `txn` with the results it depends on that are already known.
fn piece_run(txn: &Txn, results: &[Option<PieceResult>], i: usize) -> PieceRun {
    let piece = txn.pieces[i].clone();
    let mut inputs: Vec<(u16, PieceResult)> = Vec::new();
    for_each_dependency(&piece, |d| {
        if let Some(result) = &results[usize::from(d)] {
            inputs.push((d, result.clone()));
        }
    });
    if inputs.len() > 1 {
        // `Piece::dependencies` order: sorted, each once.
        inputs.sort_by_key(|(d, _)| *d);
        inputs.dedup_by_key(|(d, _)| *d);
    }
    PieceRun {
        index: i as u16,
        piece,
        inputs,
    }
}

fn aborted(reason: AbortReason) -> ClientResponse {
    ClientResponse::Outcome(Outcome::Aborted { reason })
}

#[cfg(test)]
impl Coordinator {
    pub(crate) fn in_flight(&self) -> usize {
        self.txns.len()
    }

    pub(crate) fn pending_commits(&self) -> usize {
        self.commits.len()
    }
}
