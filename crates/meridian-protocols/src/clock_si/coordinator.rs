//! The coordinator: hosts the client's interactive session (the paper's "originating
//! partition" role for timestamps, §II-A), assigns the snapshot timestamp (Algorithm 1
//! lines 1–3, §III-C's Δ, §III-E's session consistency), buffers writes, routes reads, and
//! runs Algorithm 2's commit: no round for read-only transactions, a local commit at the
//! one updated partition, or two-phase commit with commit timestamp = max(prepare ts).
//! Conventional SI takes both timestamps from the oracle instead.

use super::counters;
use super::options::Delta;
use super::options::Options;
use super::wire::{Cx, Msg, Record, Timer, TsPurpose};
use crate::kit::owd::OwdEstimator;
use crate::kit::quorum::Votes;
use crate::kit::replicated::{self, Leaders};
use crate::kit::two_pc::{Decisions, Inquiry, Logged, Resend};
use meridian_core::txn::{execute_piece, KvAccess, PieceResult, Procedures, Txn};
use meridian_core::txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Key, Outcome, Rmw, Step, Value,
};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, TimerId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug)]
enum State {
    /// Conventional SI: waiting for the oracle's snapshot timestamp.
    Starting,
    /// Waiting for the client's next step.
    Idle,
    Reading {
        op: u64,
        key: Key,
        node: NodeId,
        /// A `Modify` step's read-modify-write: the value read is modified into the
        /// workspace (first-committer-wins then judges the write) instead of returned.
        rmw: Option<Rmw>,
    },
    /// A one-shot transaction: reading every key its pieces read, at the snapshot.
    Prefetching {
        pending: BTreeMap<u64, (Key, NodeId)>,
    },
    /// Algorithm 2 lines 5–10 at the one updated partition.
    CommittingLocal { node: NodeId },
    /// Algorithm 2 lines 12–15: `Some(prepare ts)` per participant once it voted yes.
    Preparing { votes: Votes<Timestamp> },
    /// Conventional SI: every participant prepared; waiting for the oracle's commit ts.
    AwaitingCommitTs { participants: Vec<NodeId> },
}

#[derive(Debug)]
struct Session {
    /// The client request waiting for an answer, if any.
    request: Option<RequestId>,
    snapshot: Timestamp,
    /// The write set (buffered, §III-B "modifies items in its workspace"), by key.
    writes: BTreeMap<Key, Value>,
    state: State,
    next_op: u64,
    retries: u32,
    timer: Option<TimerId>,
    /// A one-shot transaction run as a session: its pieces, the values read, and (once
    /// executed) one result per piece.
    one_shot: Option<OneShot>,
    /// How long partitions held this transaction's reads back so far (Algorithm 1).
    delay_ns: u64,
}

impl Session {
    /// The answer to a read of `key` that returned `value`: the value for a `Get`; for a
    /// `Modify`, the modified value goes into the workspace and the answer is `Written`.
    fn read_done(&mut self, key: Key, value: Option<Value>, rmw: Option<Rmw>) -> ClientResponse {
        match rmw {
            None => ClientResponse::Read(value),
            Some(rmw) => {
                self.writes.insert(key, rmw.apply(value.as_ref()));
                ClientResponse::Written
            }
        }
    }

    /// The transaction waited `ns` more for a read: counted as one delayed transaction
    /// (the first time) and `ns` of transaction delay (§IV's delay probability, duration).
    fn delayed(&mut self, ctx: &mut Cx<'_>, ns: u64) {
        if ns == 0 {
            return;
        }
        if self.delay_ns == 0 {
            ctx.count(counters::TXNS_DELAYED, 1);
        }
        self.delay_ns += ns;
        ctx.count(counters::TXN_DELAY_NS, ns);
    }
}

#[derive(Debug)]
struct OneShot {
    txn: Txn,
    values: BTreeMap<Key, Option<Value>>,
    results: Vec<PieceResult>,
}

/// A one-shot transaction's view while its pieces run: its own writes over the values it
/// read at the snapshot.
struct Overlay<'a> {
    values: &'a BTreeMap<Key, Option<Value>>,
    writes: &'a mut BTreeMap<Key, Value>,
    /// A key read without being declared (a stored procedure that misdeclared its keys).
    undeclared: Option<Key>,
}

impl KvAccess for Overlay<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        if let Some(v) = self.writes.get(key) {
            return Some(v.clone());
        }
        match self.values.get(key) {
            Some(v) => v.clone(),
            None => {
                self.undeclared.get_or_insert_with(|| key.clone());
                None
            }
        }
    }

    fn put(&mut self, key: Key, value: Value) {
        self.writes.insert(key, value);
    }
}

/// A coordinator node.
#[derive(Debug)]
pub struct Coordinator {
    id: NodeId,
    opts: Options,
    cluster: Arc<Cluster>,
    procedures: Arc<Procedures>,
    /// Conventional SI: the timestamp oracle. Clock-SI: `None`.
    oracle: Option<NodeId>,
    /// Δ of Algorithm 1 line 2 for transactions starting here (`delta_ms=measured`: the
    /// starting point, until reads have measured it).
    delta_ns: u64,
    /// `delta_ms=measured`: §V-F's samples per partition, from this coordinator's reads,
    /// and when each outstanding read was sent (bounded, see [`MAX_TIMED_READS`]).
    owd: Option<TimedReads>,
    incarnation: u32,
    next_counter: u64,
    sessions: FxHashMap<TxnId, Session>,
    /// Decided commits (their commit timestamps) not yet acknowledged by every participant.
    commits: Decisions<Timestamp>,
    since_checkpoint: usize,
    /// Per shard, the replica believed to lead it (replicated mode; else the only one).
    leaders: Leaders,
}

/// `delta_ms=measured`: the samples, and when each outstanding read (txn, op) was sent.
type TimedReads = (OwdEstimator, FxHashMap<(TxnId, u64), u64>);

/// Samples per partition the measured Δ is drawn from.
const OWD_WINDOW: usize = 256;
/// Outstanding timed reads a coordinator remembers; past it (replies lost with their
/// sessions) it forgets them all, losing a few samples.
const MAX_TIMED_READS: usize = 1 << 14;

/// Notes when a read is (re)sent, for `delta_ms=measured`; a retransmission restarts it.
fn time_read(owd: &mut Option<TimedReads>, ctx: &Cx<'_>, read: (TxnId, u64)) {
    if let Some((_, sent)) = owd {
        if sent.len() >= MAX_TIMED_READS {
            sent.clear();
        }
        sent.insert(read, ctx.now_ns());
    }
}

fn respond(ctx: &mut Cx<'_>, request: Option<RequestId>, response: ClientResponse) {
    if let Some(request) = request {
        ctx.respond(request, response);
    }
}

fn aborted(reason: AbortReason) -> ClientResponse {
    ClientResponse::Outcome(Outcome::Aborted { reason })
}

impl Coordinator {
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        oracle: Option<NodeId>,
        records: &[Record],
    ) -> Coordinator {
        let (checkpoint_record, tail) = crate::kit::log::latest_checkpoint(records, |r| {
            matches!(r, Record::CoordCheckpoint { .. })
        });
        let checkpoint = match checkpoint_record {
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
                commit_ts,
                participants,
            } => Logged::Decided(*txn, *commit_ts, participants.clone()),
            Record::Acked { txn } => Logged::Acked(*txn),
            other => panic!("log of coordinator {id} holds {other:?}"),
        });
        let (commits, incarnation) = Decisions::recover(checkpoint, logged);
        let delta_ns = opts.delta_for(&cluster, id);
        let owd = (opts.delta == Delta::Measured).then(|| {
            (
                OwdEstimator::new(id, cluster.nodes.len()),
                FxHashMap::default(),
            )
        });
        Coordinator {
            id,
            opts,
            procedures,
            oracle,
            delta_ns,
            owd,
            incarnation,
            next_counter: 0,
            sessions: FxHashMap::default(),
            commits,
            since_checkpoint: tail.len(),
            leaders: Leaders::new(&cluster),
            cluster,
        }
    }

    /// Logs the new incarnation before any of its ids is used, and re-sends the decided
    /// commits that were not acknowledged before the crash.
    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let incarnation = self.incarnation;
        self.persist(ctx, Record::Started { incarnation });
        for txn in self.commits.txns() {
            self.send_commits(ctx, txn);
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
            ClientRequest::OneShot(txn) => self.one_shot(ctx, request, txn),
            ClientRequest::Interactive(step) => self.step(ctx, request, step),
        }
        self.settle(ctx);
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, sender: NodeId, msg: Msg) {
        // Partitions are known by their shard's initial leader (the partition id), whichever
        // replica leads it now (replicated mode); `sender` is who to answer.
        let from = self.partition_of(sender);
        if !matches!(msg, Msg::NotLeader { .. }) {
            self.leaders.heard(&self.cluster, sender, ctx.now_ns());
        }
        match msg {
            Msg::ReadReply {
                txn,
                op,
                result,
                waited_ns,
                arrived_ns,
            } => {
                self.sample(ctx, from, (txn, op), arrived_ns);
                self.on_read_reply(ctx, txn, op, result, waited_ns)
            }
            Msg::LocalDone { txn, result } => self.on_local_done(ctx, from, txn, result),
            Msg::Vote { txn, result } => self.on_vote(ctx, from, txn, result),
            Msg::CommitAck { txn } => self.on_commit_ack(ctx, from, txn),
            Msg::Query { txn } => self.on_query(ctx, sender, txn),
            Msg::NotLeader { txn, leader } => self.on_not_leader(ctx, from, txn, leader),
            Msg::TsReply { txn, purpose, ts } => self.on_ts(ctx, txn, purpose, ts),
            _ => {}
        }
        self.settle(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::Session(txn) => self.session_tick(ctx, txn),
            Timer::Commit(txn) => self.commit_tick(ctx, txn),
            other => panic!("coordinator {} fired {other:?}", self.id),
        }
        self.settle(ctx);
    }

    // ---- the session --------------------------------------------------------------------

    fn step(&mut self, ctx: &mut Cx<'_>, request: RequestId, step: Step) {
        let txn = match (&step, step.txn()) {
            (Step::Begin { latest_seen }, _) => return self.begin(ctx, request, *latest_seen),
            (_, txn) => txn.expect("only Begin has no session"),
        };
        let Some(s) = self.sessions.get_mut(&txn) else {
            // Never begun here, forgotten after idling, or begun before a restart. None of
            // its writes reached a partition outside a decided commit, so it did not commit.
            let reason = AbortReason::Failure;
            return ctx.respond(request, aborted(reason));
        };
        if !matches!(s.state, State::Idle) {
            let why = format!("{txn}: a step arrived while the previous one is running");
            return ctx.respond(request, aborted(AbortReason::Invalid(why)));
        }
        if let Some(timer) = s.timer.take() {
            ctx.cancel_timer(timer);
        }
        s.request = Some(request);
        s.retries = 0;
        match step {
            Step::Begin { .. } => unreachable!("handled above"),
            Step::Get { key, .. } => self.read_step(ctx, txn, key, None),
            Step::Modify { key, rmw, .. } => self.read_step(ctx, txn, key, Some(rmw)),
            Step::Put { key, value, .. } => {
                s.writes.insert(key, value);
                s.request = None;
                ctx.respond(request, ClientResponse::Written);
                self.arm_idle(ctx, txn);
            }
            Step::Commit { .. } => self.commit(ctx, txn),
            Step::Abort { .. } => {
                self.sessions.remove(&txn);
                ctx.respond(request, aborted(AbortReason::User));
            }
        }
    }

    /// A `Get`, or the read of a `Modify` (`rmw`): from the workspace if the session wrote
    /// the key (Algorithm 1 line 5: read your own writes), else at the snapshot.
    fn read_step(&mut self, ctx: &mut Cx<'_>, txn: TxnId, key: Key, rmw: Option<Rmw>) {
        let s = self.sessions.get_mut(&txn).expect("checked by step");
        if let Some(value) = s.writes.get(&key) {
            let value = Some(value.clone());
            let response = s.read_done(key, value, rmw);
            respond(ctx, s.request.take(), response);
            return self.arm_idle(ctx, txn);
        }
        let op = s.next_op;
        s.next_op += 1;
        let node = self
            .cluster
            .initial_leader(self.cluster.partitioner.shard_of(&key));
        s.state = State::Reading { op, key, node, rmw };
        self.send_step(ctx, txn);
    }

    /// Algorithm 1 lines 1–3 at the coordinator (see the module doc for why its clock).
    fn begin(&mut self, ctx: &mut Cx<'_>, request: RequestId, latest_seen: Option<Timestamp>) {
        self.open(ctx, request, latest_seen, None);
    }

    /// A one-shot transaction runs as a session (see the module doc): a snapshot, a
    /// parallel read of every key its pieces read, the pieces executed here on those
    /// values, then the commit of the write set like an interactive transaction's.
    fn one_shot(&mut self, ctx: &mut Cx<'_>, request: RequestId, txn: Txn) {
        if let Err(e) = txn.validate(self.cluster.shard_count()) {
            return ctx.respond(request, aborted(AbortReason::Invalid(e.to_string())));
        }
        let run = OneShot {
            txn,
            values: BTreeMap::new(),
            results: Vec::new(),
        };
        self.open(ctx, request, None, Some(run));
    }

    /// Algorithm 1 lines 1–3 at the coordinator (see the module doc for why its clock).
    fn open(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        latest_seen: Option<Timestamp>,
        one_shot: Option<OneShot>,
    ) {
        let txn = TxnId::new(self.id, self.incarnation, self.next_counter);
        self.next_counter += 1;
        let mut s = Session {
            request: Some(request),
            snapshot: Timestamp::ZERO,
            writes: BTreeMap::new(),
            state: State::Starting,
            next_op: 0,
            retries: 0,
            timer: None,
            one_shot,
            delay_ns: 0,
        };
        ctx.count(counters::TXNS, 1);
        if self.oracle.is_some() {
            // Conventional SI: one round trip to the oracle (its timestamps only grow, so
            // the snapshot is above every commit timestamp the client has seen).
            self.sessions.insert(txn, s);
            return self.send_step(ctx, txn);
        }
        // Clock-SI: local clock − Δ, and at least just above the session's LatestTime
        // (§III-E). The paper blocks Begin until the clock passes LatestTime; here every
        // partition already delays a request until its own clock passes the snapshot
        // (Algorithm 1 lines 19–22), which gives the same guarantee without blocking.
        let clock = ctx.now_ns().saturating_sub(self.snapshot_age_ns());
        let after_seen = latest_seen.map_or(0, |t| t.time_ns + 1);
        s.snapshot = Timestamp::new(clock.max(after_seen), 0);
        self.sessions.insert(txn, s);
        self.started(ctx, txn);
    }

    /// The snapshot is known: an interactive session waits for its first step, a one-shot
    /// transaction starts reading.
    fn started(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let s = self.sessions.get_mut(&txn).expect("live session");
        if let Some(timer) = s.timer.take() {
            ctx.cancel_timer(timer);
        }
        s.retries = 0;
        let Some(run) = &s.one_shot else {
            let request = s.request.take();
            respond(ctx, request, ClientResponse::Began(txn));
            return self.arm_idle(ctx, txn);
        };
        let mut keys: Vec<Key> = run.txn.pieces.iter().flat_map(|p| p.read_keys()).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return self.execute(ctx, txn);
        }
        let mut pending = BTreeMap::new();
        for key in keys {
            let node = self
                .cluster
                .initial_leader(self.cluster.partitioner.shard_of(&key));
            pending.insert(s.next_op, (key, node));
            s.next_op += 1;
        }
        s.state = State::Prefetching { pending };
        self.send_step(ctx, txn);
    }

    /// Runs a one-shot transaction's pieces on the values read, then commits.
    fn execute(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let s = self.sessions.get_mut(&txn).expect("live session");
        let run = s.one_shot.as_mut().expect("a one-shot session");
        let mut overlay = Overlay {
            values: &run.values,
            writes: &mut s.writes,
            undeclared: None,
        };
        let mut results: Vec<PieceResult> = Vec::with_capacity(run.txn.pieces.len());
        let mut failure = None;
        for (i, piece) in run.txn.pieces.iter().enumerate() {
            let inputs: Vec<Option<&PieceResult>> = results.iter().map(Some).collect();
            debug_assert_eq!(inputs.len(), i);
            match execute_piece(piece, &inputs, &self.procedures, &mut overlay) {
                Ok(result) => results.push(result),
                Err(reason) => {
                    failure = Some(reason);
                    break;
                }
            }
            if let Some(key) = overlay.undeclared.take() {
                let why = format!("piece {i} read key {key:?} without declaring it");
                failure = Some(AbortReason::Invalid(why));
                break;
            }
        }
        run.results = results;
        if let Some(reason) = failure {
            return self.abort(ctx, txn, reason);
        }
        self.commit(ctx, txn);
    }

    fn commit(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let s = self.sessions.get_mut(&txn).expect("live session");
        if s.writes.is_empty() {
            // §III-B: a read-only transaction commits without further checks or messages.
            // Its commit timestamp is its snapshot (§III-E: the client's LatestTime).
            let outcome = Outcome::Committed {
                results: s.one_shot.take().map(|o| o.results).unwrap_or_default(),
                commit_ts: Some(s.snapshot),
                path: CommitPath::ReadOnly,
            };
            let request = s.request.take();
            self.sessions.remove(&txn);
            return respond(ctx, request, ClientResponse::Outcome(outcome));
        }
        let mut nodes: Vec<NodeId> = s
            .writes
            .keys()
            .map(|k| {
                self.cluster
                    .initial_leader(self.cluster.partitioner.shard_of(k))
            })
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        // Algorithm 2 lines 2–4. Conventional SI always prepares first: the oracle's commit
        // timestamp must be drawn after the versions are in place (see the module doc).
        s.state = if nodes.len() == 1 && self.oracle.is_none() {
            State::CommittingLocal { node: nodes[0] }
        } else {
            State::Preparing {
                votes: Votes::all(nodes),
            }
        };
        self.send_step(ctx, txn);
    }

    /// The writes of `txn` that live on partition `node`.
    fn writes_for(&self, s: &Session, node: NodeId) -> Vec<(Key, Value)> {
        s.writes
            .iter()
            .filter(|(k, _)| {
                self.cluster
                    .initial_leader(self.cluster.partitioner.shard_of(k))
                    == node
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// (Re)sends what the session's state waits for and arms the retry timer.
    fn send_step(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let s = &self.sessions[&txn];
        let snapshot = s.snapshot;
        match &s.state {
            State::Starting => {
                let oracle = self
                    .oracle
                    .expect("only conventional SI starts at the oracle");
                ctx.send(
                    oracle,
                    Msg::TsRequest {
                        txn,
                        purpose: TsPurpose::Snapshot,
                    },
                );
            }
            State::Idle => return,
            State::Prefetching { pending } => {
                for (op, (key, node)) in pending {
                    time_read(&mut self.owd, ctx, (txn, *op));
                    let msg = Msg::Read {
                        txn,
                        op: *op,
                        key: key.clone(),
                        snapshot,
                    };
                    ctx.send(self.route(*node), msg);
                }
            }
            State::Reading { op, key, node, .. } => {
                time_read(&mut self.owd, ctx, (txn, *op));
                let msg = Msg::Read {
                    txn,
                    op: *op,
                    key: key.clone(),
                    snapshot,
                };
                ctx.send(self.route(*node), msg);
            }
            State::CommittingLocal { node } => {
                let writes = self.writes_for(s, *node);
                ctx.send(
                    self.route(*node),
                    Msg::CommitLocal {
                        txn,
                        snapshot,
                        writes,
                    },
                );
            }
            State::Preparing { votes } => {
                for node in votes.missing() {
                    let writes = self.writes_for(s, node);
                    ctx.send(
                        self.route(node),
                        Msg::Prepare {
                            txn,
                            snapshot,
                            writes,
                        },
                    );
                }
            }
            State::AwaitingCommitTs { .. } => {
                let oracle = self
                    .oracle
                    .expect("only conventional SI asks for a commit ts");
                ctx.send(
                    oracle,
                    Msg::TsRequest {
                        txn,
                        purpose: TsPurpose::Commit,
                    },
                );
            }
        }
        let timer = ctx.set_timer(self.opts.retry_ns, Timer::Session(txn));
        self.sessions.get_mut(&txn).expect("live").timer = Some(timer);
    }

    /// Waits for the client's next step; a session idle too long is forgotten.
    fn arm_idle(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let timer = ctx.set_timer(self.opts.session_idle_ns, Timer::Session(txn));
        let s = self.sessions.get_mut(&txn).expect("live");
        s.state = State::Idle;
        s.timer = Some(timer);
    }

    fn session_tick(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let Some(s) = self.sessions.get_mut(&txn) else {
            return;
        };
        s.timer = None;
        if matches!(s.state, State::Idle) {
            self.sessions.remove(&txn);
            return;
        }
        if s.retries < self.opts.max_retries {
            s.retries += 1;
            // A partition that does not answer may have lost its leader: try another replica.
            for partition in self.awaited(txn) {
                self.rotate(ctx, partition);
            }
            return self.send_step(ctx, txn);
        }
        match s.state {
            State::CommittingLocal { .. } => {
                // The partition may have committed: the client cannot be told either way.
                let request = s.request.take();
                self.sessions.remove(&txn);
                let reason = "the partition did not answer the local commit".to_string();
                respond(
                    ctx,
                    request,
                    ClientResponse::Outcome(Outcome::Unknown { reason }),
                );
            }
            _ => self.abort(ctx, txn, AbortReason::Timeout),
        }
    }

    /// Ends an undecided session with an abort (nothing to log: presumed abort) and tells
    /// every partition that may have prepared it.
    fn abort(&mut self, ctx: &mut Cx<'_>, txn: TxnId, reason: AbortReason) {
        let Some(mut s) = self.sessions.remove(&txn) else {
            return;
        };
        if let Some(timer) = s.timer.take() {
            ctx.cancel_timer(timer);
        }
        let participants: Vec<NodeId> = match &s.state {
            State::Preparing { votes } => votes.members().collect(),
            State::AwaitingCommitTs { participants } => participants.clone(),
            _ => Vec::new(),
        };
        for node in participants {
            ctx.send(self.route(node), Msg::Abort { txn });
        }
        respond(ctx, s.request.take(), aborted(reason));
    }

    // ---- snapshot age (§III-C) ----------------------------------------------------------

    /// Δ for a transaction starting now: fixed, or (`delta_ms=measured`) §III-C's
    /// max(CW, SK_max − RRD/2) over the partitions with measured terms: CW = RRD (S = 0
    /// in this substrate: no synchronous disk write), RRD = the median forward plus back
    /// delay (the clock offset cancels), SK − RRD/2 = the negated low tail (1st
    /// percentile) of t₂ − t₁. Before a partition's first sample, the topology's figures.
    fn snapshot_age_ns(&self) -> u64 {
        let Some((owd, _)) = &self.owd else {
            return self.delta_ns;
        };
        let c = &self.cluster;
        (0..c.shard_count())
            .map(|s| c.initial_leader(ShardId(s)))
            .map(|p| {
                let rrd = owd.forward_ns(c, p, 50.0) + owd.back_ns(c, p, 50.0);
                let skew = owd
                    .forward_signed_ns(p, 1.0)
                    .map_or(0, |f| (-f).max(0) as u64);
                rrd.max(skew)
            })
            .max()
            .unwrap_or(0)
    }

    /// A read reply from `partition`: one t₂ − t₁ sample (and one back sample) if the
    /// read was timed.
    fn sample(&mut self, ctx: &Cx<'_>, partition: NodeId, read: (TxnId, u64), arrived_ns: u64) {
        if let Some((owd, sent)) = &mut self.owd {
            if let Some(sent_ns) = sent.remove(&read) {
                owd.record(partition, (sent_ns, arrived_ns, ctx.now_ns()), OWD_WINDOW);
            }
        }
    }

    // ---- replies ------------------------------------------------------------------------

    fn on_read_reply(
        &mut self,
        ctx: &mut Cx<'_>,
        txn: TxnId,
        op: u64,
        result: Result<Option<Value>, AbortReason>,
        waited_ns: u64,
    ) {
        let Some(s) = self.sessions.get_mut(&txn) else {
            return;
        };
        if let State::Prefetching { pending } = &mut s.state {
            let Some((key, _)) = pending.remove(&op) else {
                return;
            };
            let value = match result {
                Ok(value) => value,
                Err(reason) => return self.abort(ctx, txn, reason),
            };
            let done = pending.is_empty();
            // The reads run in parallel: the transaction waited as long as the longest.
            s.delayed(ctx, waited_ns.saturating_sub(s.delay_ns));
            let run = s.one_shot.as_mut().expect("prefetching is one-shot");
            run.values.insert(key, value);
            if done {
                if let Some(timer) = s.timer.take() {
                    ctx.cancel_timer(timer);
                }
                s.retries = 0;
                self.execute(ctx, txn);
            }
            return;
        }
        if !matches!(&s.state, State::Reading { op: o, .. } if *o == op) {
            return;
        }
        if let Some(timer) = s.timer.take() {
            ctx.cancel_timer(timer);
        }
        s.delayed(ctx, waited_ns);
        match result {
            Ok(value) => {
                let State::Reading { key, rmw, .. } = std::mem::replace(&mut s.state, State::Idle)
                else {
                    unreachable!("matched above");
                };
                let response = s.read_done(key, value, rmw);
                respond(ctx, s.request.take(), response);
                self.arm_idle(ctx, txn);
            }
            Err(reason) => self.abort(ctx, txn, reason),
        }
    }

    fn on_local_done(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        result: Result<Timestamp, AbortReason>,
    ) {
        let Some(s) = self.sessions.get_mut(&txn) else {
            return;
        };
        if !matches!(s.state, State::CommittingLocal { node } if node == from) {
            return;
        }
        if let Some(timer) = s.timer.take() {
            ctx.cancel_timer(timer);
        }
        let request = s.request.take();
        let results = s.one_shot.take().map(|o| o.results).unwrap_or_default();
        self.sessions.remove(&txn);
        let response = match result {
            Ok(commit_ts) => ClientResponse::Outcome(Outcome::Committed {
                results,
                commit_ts: Some(commit_ts),
                path: CommitPath::Local,
            }),
            Err(reason) => aborted(reason),
        };
        respond(ctx, request, response);
    }

    fn on_vote(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        txn: TxnId,
        result: Result<Timestamp, AbortReason>,
    ) {
        let Some(s) = self.sessions.get_mut(&txn) else {
            return;
        };
        let State::Preparing { votes } = &mut s.state else {
            return;
        };
        if !votes.is_member(from) {
            return;
        }
        let prepare_ts = match result {
            Ok(ts) => ts,
            Err(reason) => return self.abort(ctx, txn, reason),
        };
        votes.record(from, prepare_ts);
        if !votes.complete() {
            return;
        }
        // Line 18: the commit timestamp is the largest prepare timestamp.
        let max_prepare = votes.replies().copied().max().expect("participants");
        let participants: Vec<NodeId> = votes.members().collect();
        if self.oracle.is_some() {
            if let Some(timer) = s.timer.take() {
                ctx.cancel_timer(timer);
            }
            s.retries = 0;
            s.state = State::AwaitingCommitTs { participants };
            return self.send_step(ctx, txn);
        }
        self.decide(ctx, txn, max_prepare, participants);
    }

    fn on_ts(&mut self, ctx: &mut Cx<'_>, txn: TxnId, purpose: TsPurpose, ts: Timestamp) {
        let Some(s) = self.sessions.get_mut(&txn) else {
            return;
        };
        match (&s.state, purpose) {
            (State::Starting, TsPurpose::Snapshot) => {
                if let Some(timer) = s.timer.take() {
                    ctx.cancel_timer(timer);
                }
                s.snapshot = ts;
                self.started(ctx, txn);
            }
            (State::AwaitingCommitTs { participants }, TsPurpose::Commit) => {
                debug_assert!(ts > s.snapshot, "the oracle's timestamps grow");
                let participants = participants.clone();
                self.decide(ctx, txn, ts, participants);
            }
            _ => {}
        }
    }

    /// Algorithm 2 lines 16–22: log the decision, answer the client, send COMMIT.
    fn decide(
        &mut self,
        ctx: &mut Cx<'_>,
        txn: TxnId,
        commit_ts: Timestamp,
        participants: Vec<NodeId>,
    ) {
        let mut s = self.sessions.remove(&txn).expect("live session");
        if let Some(timer) = s.timer.take() {
            ctx.cancel_timer(timer);
        }
        self.persist(
            ctx,
            Record::Decided {
                txn,
                commit_ts,
                participants: participants.clone(),
            },
        );
        self.commits.decide(txn, commit_ts, participants);
        self.send_commits(ctx, txn);
        let outcome = Outcome::Committed {
            results: s.one_shot.take().map(|o| o.results).unwrap_or_default(),
            commit_ts: Some(commit_ts),
            path: CommitPath::TwoPhase,
        };
        respond(ctx, s.request.take(), ClientResponse::Outcome(outcome));
    }

    fn send_commits(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        let Some(&commit_ts) = self.commits.decision(txn) else {
            return;
        };
        for &node in self.commits.waiting(txn) {
            ctx.send(self.route(node), Msg::Commit { txn, commit_ts });
        }
        let resend = Resend {
            retry_ns: self.opts.retry_ns,
            max_retries: self.opts.max_retries,
            slow_ns: self.opts.retry_ns.saturating_mul(4),
        };
        let timer = ctx.set_timer(self.commits.resend_after(txn, resend), Timer::Commit(txn));
        self.commits.armed(txn, timer);
    }

    fn commit_tick(&mut self, ctx: &mut Cx<'_>, txn: TxnId) {
        if self.commits.retry(txn) {
            for partition in self.commits.waiting(txn).to_vec() {
                self.rotate(ctx, partition);
            }
            self.send_commits(ctx, txn);
        }
    }

    fn on_commit_ack(&mut self, ctx: &mut Cx<'_>, from: NodeId, txn: TxnId) {
        if let Some(timer) = self.commits.acknowledge(txn, from) {
            if let Some(timer) = timer {
                ctx.cancel_timer(timer);
            }
            self.persist(ctx, Record::Acked { txn });
        }
    }

    /// A partition asks about a prepared transaction (a blocked read, or recovery): the
    /// commit timestamp if decided, nothing while undecided, else presumed abort.
    fn on_query(&mut self, ctx: &mut Cx<'_>, from: NodeId, txn: TxnId) {
        let undecided = self.sessions.get(&txn).is_some_and(|s| {
            matches!(
                s.state,
                State::Preparing { .. } | State::AwaitingCommitTs { .. }
            )
        });
        match self.commits.inquiry(txn, undecided) {
            Inquiry::Commit(&commit_ts) => ctx.send(from, Msg::Commit { txn, commit_ts }),
            Inquiry::PresumedAbort => ctx.send(from, Msg::Abort { txn }),
            Inquiry::Undecided => {}
        }
    }

    // ---- routing (replicated mode) -------------------------------------------------------

    /// The node that serves `partition` now.
    fn route(&self, partition: NodeId) -> NodeId {
        self.leaders.route(&self.cluster, partition)
    }

    /// The partition id (its shard's initial leader) of a replica; other nodes are themselves.
    fn partition_of(&self, node: NodeId) -> NodeId {
        replicated::partition_of(&self.cluster, node)
    }

    /// The partitions whose answer the session's current step waits for.
    fn awaited(&self, txn: TxnId) -> Vec<NodeId> {
        match &self.sessions[&txn].state {
            State::Reading { node, .. } | State::CommittingLocal { node } => vec![*node],
            State::Prefetching { pending } => pending.values().map(|(_, n)| *n).collect(),
            State::Preparing { votes } => votes.missing().collect(),
            _ => Vec::new(),
        }
    }

    /// Replicated mode: believe the next replica of `partition`'s shard leads it, but only
    /// if the one believed now has been silent for a retry period. Rotating on every retry
    /// tick turned coordinators away from leaders that were answering (a session whose
    /// step outlives one retry period, HK's over SC's groups), so later sessions paid
    /// `NotLeader` round trips too; the same fix as 2PL-Raft's ([`Leaders::rotate_if_silent`]).
    fn rotate(&mut self, ctx: &Cx<'_>, partition: NodeId) {
        if self.opts.replicated {
            let (now_ns, silent_ns) = (ctx.now_ns(), self.opts.retry_ns);
            self.leaders
                .rotate_if_silent(&self.cluster, partition, now_ns, silent_ns);
        }
    }

    /// A replica that does not lead `partition` got our request for `txn`: follow its hint
    /// and, if it names a new leader, resend at once.
    fn on_not_leader(
        &mut self,
        ctx: &mut Cx<'_>,
        partition: NodeId,
        txn: TxnId,
        leader: Option<NodeId>,
    ) {
        if !self.leaders.follow(&self.cluster, partition, leader) {
            return;
        }
        if let Some(s) = self.sessions.get_mut(&txn) {
            if matches!(s.state, State::Idle) {
                return;
            }
            if let Some(timer) = s.timer.take() {
                ctx.cancel_timer(timer);
            }
            return self.send_step(ctx, txn);
        }
        if let Some(timer) = self.commits.disarm(txn) {
            ctx.cancel_timer(timer);
            self.send_commits(ctx, txn);
        }
    }

    // ---- log ----------------------------------------------------------------------------

    fn persist(&mut self, ctx: &mut Cx<'_>, record: Record) {
        ctx.persist(record);
        self.since_checkpoint += 1;
    }

    fn settle(&mut self, ctx: &mut Cx<'_>) {
        if self.since_checkpoint < self.opts.checkpoint_every {
            return;
        }
        let pending = self.commits.checkpoint();
        let incarnation = self.incarnation;
        ctx.checkpoint(Record::CoordCheckpoint {
            incarnation,
            pending,
        });
        self.since_checkpoint = 0;
    }
}

#[cfg(test)]
impl Coordinator {
    pub(crate) fn delta_ns(&self) -> u64 {
        self.delta_ns
    }
}
