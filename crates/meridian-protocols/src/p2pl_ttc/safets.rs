//! SafeTS replica reads (`replica_reads=safets`; K2 §6.1, §7.4; Spanner §4.1.3): a copy
//! of a shard serves a read at timestamp `t` once `t ≤ t_safe`.
//!
//! * [`SafePrimary`] (at a shard's primary) keeps `t_safe = min(T_earliest, min prepare
//!   lower bound) − 1`: `T_earliest` is the latest `TT.now().earliest` its region's
//!   oracle gave it (true time was at least that then), and a prepared transaction's
//!   lower bound is the `T_earliest` held when it prepared. Every transaction commits at
//!   `T_high` of an oracle asked after every participant prepared, and `T_high` is at
//!   least true time then, so a transaction not yet prepared here commits above
//!   `T_earliest` and a prepared one above its lower bound: nothing can commit at or below
//!   `t_safe` any more, and everything that did is applied here.
//! * [`RepLog`] ships the committed versions with their commit timestamps, and `t_safe`,
//!   to the read replicas ([`SafeReplica`]), answering their pulls after each oracle reply.
//! * [`SafeCopy`] (primary and replicas alike) holds the versions and serves reads under
//!   its `t_safe`, holding the others ([`HeldReads`]).
//! * [`SafeReader`] (at a coordinator) runs a read-only one-shot transaction at
//!   `t = T_high` of its nearest oracle (TTC now), each piece at the nearest copy of its
//!   shard.

use crate::delay_counters;
use crate::kit::replica_reads::{
    nearest_copy, run_read_only, DelayCounters, HeldReads, Offered, Puller, RepLog, Visibility,
};
use crate::kit::ttc::OracleCursor;
use crate::two_pl::{Cx, Msg, Timer};
use meridian_core::txn::{
    AbortReason, ClientResponse, CommitPath, Key, KvAccess, Outcome, Piece, PieceResult,
    Procedures, Txn, Value,
};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, TimerId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// SafeTS's visibility-delay counters (`p2pl.visible_versions`, …).
static DELAY: DelayCounters = delay_counters!("p2pl");

/// Committed versions a primary keeps for its replicas; one further behind gets a full
/// snapshot.
const MAX_LOG: usize = 1 << 16;

/// Versions waiting for `t_safe` to be measured (beyond: not measured).
const MAX_UNMEASURED: usize = 1 << 16;

/// SafeTS's options (`replica_reads=safets`).
#[derive(Clone, Debug, PartialEq)]
pub struct SafeTs {
    /// How often a primary asks its oracle for `T_earliest` and answers its replicas'
    /// pulls (`safe_ts_interval_ms`; 10).
    pub interval_ns: u64,
    /// Versions kept per key at a copy (`max_versions_per_key`; 64); a read below the
    /// oldest kept aborts.
    pub max_versions_per_key: usize,
    /// Reads held at a copy (`max_held_reads`; 4096); more are refused (`Conflict`).
    pub max_held_reads: usize,
    /// Resend interval of pulls, oracle requests and reads (2PL's `retry_ms`).
    pub retry_ns: u64,
    /// A read-only transaction not answered in this long aborts (2PL's `exec_timeout_ms`).
    pub timeout_ns: u64,
    /// TEST-ONLY, deliberately broken (`unsafe_serve_above_safe`): copies serve reads at
    /// once, whatever `t_safe`.
    pub unsafe_serve_above_safe: bool,
}

/// A committed version, as shipped to replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SafeVersion {
    pub key: Key,
    pub ts: Timestamp,
    pub value: Value,
    /// The primary's clock when it applied the commit (0: not measured).
    pub committed_ns: u64,
}

/// SafeTS's messages (inside `Msg::Safe`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SafeMsg {
    /// Primary → oracle: `TT.now().earliest`, please.
    GetEarliest,
    /// Oracle → primary.
    Earliest { earliest_ns: u64 },
    /// Coordinator → oracle: `T_high` for a read-only transaction's timestamp.
    GetReadTs { request: RequestId },
    /// Oracle → coordinator.
    ReadTs {
        request: RequestId,
        high_ns: u64,
        oracle: u32,
    },
    /// Replica → primary: send what follows entry `after` of `stream`.
    Pull { stream: u64, after: u64 },
    /// Primary → replica: entries `after+1 ..= upto` (or, `full`, the newest version of
    /// every key) and `t_safe`.
    Replicate {
        stream: u64,
        after: u64,
        upto: u64,
        full: bool,
        versions: Vec<SafeVersion>,
        safe: Timestamp,
    },
    /// Coordinator → copy: run piece `index` at `ts`.
    Read {
        request: RequestId,
        index: u16,
        ts: Timestamp,
        piece: Piece,
        inputs: Vec<(u16, PieceResult)>,
    },
    /// Copy → coordinator.
    ReadDone {
        request: RequestId,
        index: u16,
        outcome: Result<PieceResult, AbortReason>,
    },
}

/// One key's versions at a copy.
#[derive(Debug, Default)]
struct KeyVersions {
    versions: BTreeMap<Timestamp, Value>,
    /// The copy knows nothing of this key below this timestamp (pruned, or a snapshot
    /// that carried only newer versions): a read below aborts.
    floor: Timestamp,
}

/// A read held at a copy.
#[derive(Clone, Debug)]
pub struct SafeRead {
    from: NodeId,
    request: RequestId,
    index: u16,
    ts: Timestamp,
    piece: Piece,
    inputs: Vec<(u16, PieceResult)>,
}

/// A multi-version copy of a shard serving reads under its `t_safe`.
#[derive(Debug)]
pub struct SafeCopy {
    keys: FxHashMap<Key, KeyVersions>,
    safe: Timestamp,
    reads: HeldReads<SafeRead>,
    max_versions: usize,
    unsafe_serve: bool,
    procedures: Arc<Procedures>,
}

impl SafeCopy {
    pub fn new(opts: &SafeTs, procedures: Arc<Procedures>) -> SafeCopy {
        SafeCopy {
            keys: FxHashMap::default(),
            safe: Timestamp::ZERO,
            reads: HeldReads::new(opts.max_held_reads),
            max_versions: opts.max_versions_per_key.max(1),
            unsafe_serve: opts.unsafe_serve_above_safe,
            procedures,
        }
    }

    /// A committed version; `complete_below` is false when the versions of the key just
    /// below `ts` may be missing here (a snapshot's newest version above `t_safe`).
    pub fn insert(&mut self, key: Key, ts: Timestamp, value: Value, complete_below: bool) {
        let max = self.max_versions;
        let k = self.keys.entry(key).or_default();
        if !complete_below {
            k.floor = k.floor.max(ts);
        }
        if ts < k.floor {
            return;
        }
        k.versions.insert(ts, value);
        while k.versions.len() > max {
            k.versions.pop_first();
            // A read below the oldest kept version would miss the one just dropped.
            let oldest = *k.versions.keys().next().expect("more than max");
            k.floor = k.floor.max(oldest);
        }
    }

    /// A snapshot's newest version of a key: complete below only if `t_safe` covers it
    /// (this copy had every version up to `t_safe`).
    pub fn merge(&mut self, v: SafeVersion) {
        let complete_below = v.ts <= self.safe;
        self.insert(v.key, v.ts, v.value, complete_below);
    }

    /// The newest version of every key (a full snapshot; not measured).
    pub fn newest(&self) -> Vec<SafeVersion> {
        let mut out = Vec::with_capacity(self.keys.len());
        for (key, k) in &self.keys {
            if let Some((ts, value)) = k.versions.last_key_value() {
                out.push(SafeVersion {
                    key: key.clone(),
                    ts: *ts,
                    value: value.clone(),
                    committed_ns: 0,
                });
            }
        }
        out
    }

    pub fn safe(&self) -> Timestamp {
        self.safe
    }

    /// Whether a read may be served now.
    fn ready(&self) -> impl Fn(&SafeRead) -> bool {
        let (safe, unsafe_serve) = (self.safe, self.unsafe_serve);
        // THE DELIBERATE BUG (test-only) when `unsafe_serve`: serve whatever is here now.
        move |read| unsafe_serve || read.ts <= safe
    }

    /// A read arrives: served now if `t_safe` covers it, else held (bounded).
    pub fn offer(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: SafeMsg) {
        let SafeMsg::Read {
            request,
            index,
            ts,
            piece,
            inputs,
        } = msg
        else {
            return;
        };
        let read = SafeRead {
            from,
            request,
            index,
            ts,
            piece,
            inputs,
        };
        let same = |a: &SafeRead, b: &SafeRead| a.request == b.request && a.index == b.index;
        match self.reads.offer(read, self.ready(), same) {
            Offered::Serve(read) => self.serve(ctx, &read),
            Offered::Held | Offered::Duplicate => {}
            Offered::Overflow(read) => {
                ctx.count("p2pl.safe_read_overflow", 1);
                answer(ctx, &read, Err(AbortReason::Conflict));
            }
        }
    }

    /// `t_safe` moved to `safe` (it never moves back): serves what it now covers.
    pub fn advance(&mut self, ctx: &mut Cx<'_>, safe: Timestamp) {
        self.safe = self.safe.max(safe);
        let ready = self.ready();
        for read in self.reads.release(ready) {
            self.serve(ctx, &read);
        }
    }

    fn serve(&self, ctx: &mut Cx<'_>, read: &SafeRead) {
        ctx.count("p2pl.safe_reads", 1);
        let below_floor = read
            .piece
            .read_keys()
            .iter()
            .any(|k| self.keys.get(k).is_some_and(|s| read.ts < s.floor));
        let outcome = if below_floor {
            Err(AbortReason::Conflict)
        } else {
            let mut access = AtTs {
                keys: &self.keys,
                ts: read.ts,
            };
            run_read_only(&read.piece, &read.inputs, &self.procedures, &mut access)
        };
        answer(ctx, read, outcome);
    }
}

fn answer(ctx: &mut Cx<'_>, read: &SafeRead, outcome: Result<PieceResult, AbortReason>) {
    let msg = SafeMsg::ReadDone {
        request: read.request,
        index: read.index,
        outcome,
    };
    ctx.send(read.from, Msg::Safe(msg));
}

/// The versions at or below a timestamp.
struct AtTs<'a> {
    keys: &'a FxHashMap<Key, KeyVersions>,
    ts: Timestamp,
}

impl KvAccess for AtTs<'_> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        let k = self.keys.get(key)?;
        k.versions
            .range(..=self.ts)
            .next_back()
            .map(|(_, v)| v.clone())
    }

    fn put(&mut self, _key: Key, _value: Value) {
        // `run_read_only` refuses pieces that write.
    }
}

/// `t_safe` for a lower bound `bound_ns` of every future commit's timestamp: everything
/// strictly below it (0: nothing known yet).
fn below(bound_ns: u64) -> Timestamp {
    match bound_ns {
        0 => Timestamp::ZERO,
        ns => Timestamp {
            time_ns: ns - 1,
            tiebreak: u32::MAX,
            frac: u32::MAX,
        },
    }
}

/// A shard primary's SafeTS state (inside 2PL's server).
#[derive(Debug)]
pub struct SafePrimary {
    opts: SafeTs,
    pub copy: SafeCopy,
    /// The latest `TT.now().earliest` heard from an oracle since the start (0: none).
    earliest_ns: u64,
    /// Prepared, undecided transactions → `earliest_ns` when they prepared (0 for those
    /// revived after a restart: their bound is lost, so they hold `t_safe` until decided).
    prepared: BTreeMap<TxnId, u64>,
    log: RepLog<SafeVersion>,
    /// The oracle asked (the nearest, unless it went silent).
    oracle: OracleCursor,
    /// The local time of the unanswered oracle request, if one is out.
    asked_ns: Option<u64>,
}

impl SafePrimary {
    pub fn new(
        opts: SafeTs,
        cluster: &Cluster,
        me: NodeId,
        shard: ShardId,
        procedures: Arc<Procedures>,
    ) -> SafePrimary {
        let replicas = cluster.replicas(shard).iter().copied().filter(|&r| r != me);
        SafePrimary {
            copy: SafeCopy::new(&opts, procedures),
            earliest_ns: 0,
            prepared: BTreeMap::new(),
            log: RepLog::new(replicas, MAX_LOG),
            oracle: OracleCursor::new(cluster, me),
            asked_ns: None,
            opts,
        }
    }

    /// A version recovered from the log (`complete_below`: replayed in commit order from
    /// the start, not a checkpoint's newest one).
    pub fn recovered(&mut self, key: Key, ts: Timestamp, value: Value, complete_below: bool) {
        self.copy.insert(key, ts, value, complete_below);
    }

    /// A prepared transaction revived after a restart.
    pub fn revived(&mut self, txn: TxnId) {
        self.prepared.insert(txn, 0);
    }

    pub fn on_start(&mut self, ctx: &mut Cx<'_>) {
        self.log.start(ctx.now_ns());
        self.ask(ctx);
        ctx.set_timer(self.opts.interval_ns, Timer::SafeTick);
    }

    /// Asks an oracle for `T_earliest` unless a request is out: the nearest, or the next
    /// one once a request went unanswered for a retry interval.
    fn ask(&mut self, ctx: &mut Cx<'_>) {
        let now_ns = ctx.now_ns();
        if let Some(at) = self.asked_ns {
            if now_ns.saturating_sub(at) < self.opts.retry_ns && now_ns >= at {
                return;
            }
            self.oracle.skip();
        }
        let Some(oracle) = self.oracle.current() else {
            return;
        };
        self.asked_ns = Some(now_ns);
        ctx.send(oracle, Msg::Safe(SafeMsg::GetEarliest));
    }

    pub fn on_tick(&mut self, ctx: &mut Cx<'_>) {
        ctx.set_timer(self.opts.interval_ns, Timer::SafeTick);
        self.ask(ctx);
    }

    /// `txn` prepared here: it commits above the `T_earliest` held now.
    pub fn prepared(&mut self, txn: TxnId) {
        self.prepared.insert(txn, self.earliest_ns);
    }

    /// `txn` aborted here.
    pub fn decided(&mut self, txn: TxnId) {
        self.prepared.remove(&txn);
    }

    /// `txn` committed here at `ts` with `writes`.
    pub fn committed(
        &mut self,
        ctx: &mut Cx<'_>,
        txn: TxnId,
        ts: Timestamp,
        writes: &[(Key, Value)],
    ) {
        self.prepared.remove(&txn);
        for (key, value) in writes {
            self.copy.insert(key.clone(), ts, value.clone(), true);
            self.log.push(SafeVersion {
                key: key.clone(),
                ts,
                value: value.clone(),
                committed_ns: ctx.now_ns(),
            });
        }
    }

    /// `t_safe` now: below `T_earliest` and every prepared transaction's bound.
    fn safe(&self) -> Timestamp {
        let prepared = self.prepared.values().copied().min();
        below(prepared.map_or(self.earliest_ns, |p| p.min(self.earliest_ns)))
    }

    pub fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: SafeMsg) {
        match msg {
            SafeMsg::Earliest { earliest_ns } => {
                self.asked_ns = None;
                self.oracle.answered();
                self.earliest_ns = self.earliest_ns.max(earliest_ns);
                let safe = self.safe();
                self.copy.advance(ctx, safe);
                self.answer_pulls(ctx);
            }
            SafeMsg::Pull { stream, after } => self.log.on_pull(from, stream, after),
            read @ SafeMsg::Read { .. } => self.copy.offer(ctx, from, read),
            _ => {}
        }
    }

    fn answer_pulls(&mut self, ctx: &mut Cx<'_>) {
        if !self.log.has_pulls() {
            return;
        }
        let safe = self.copy.safe();
        for a in self.log.answers(|| self.copy.newest()) {
            let msg = SafeMsg::Replicate {
                stream: a.stream,
                after: a.after,
                upto: a.upto,
                full: a.full,
                versions: a.versions,
                safe,
            };
            ctx.send(a.replica, Msg::Safe(msg));
        }
    }

    /// The newest version of every key with its timestamp (for a checkpoint).
    pub fn stamps(&self) -> Vec<(Key, Timestamp)> {
        self.copy
            .newest()
            .into_iter()
            .map(|v| (v.key, v.ts))
            .collect()
    }
}

/// A read replica of one shard under SafeTS.
#[derive(Debug)]
pub struct SafeReplica {
    primary: NodeId,
    opts: SafeTs,
    copy: SafeCopy,
    stream: u64,
    position: u64,
    puller: Puller,
    visibility: Visibility<Timestamp>,
}

impl SafeReplica {
    pub fn new(primary: NodeId, opts: SafeTs, procedures: Arc<Procedures>) -> SafeReplica {
        SafeReplica {
            primary,
            copy: SafeCopy::new(&opts, procedures),
            opts,
            stream: 0,
            position: 0,
            puller: Puller::default(),
            visibility: Visibility::new(&DELAY, MAX_UNMEASURED),
        }
    }

    pub fn on_start(&mut self, ctx: &mut Cx<'_>) {
        self.pull(ctx);
        ctx.set_timer(self.opts.retry_ns, Timer::SafeTick);
    }

    fn pull(&mut self, ctx: &mut Cx<'_>) {
        self.puller.pulled(ctx.now_ns());
        let msg = SafeMsg::Pull {
            stream: self.stream,
            after: self.position,
        };
        ctx.send(self.primary, Msg::Safe(msg));
    }

    pub fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        if !matches!(timer, Timer::SafeTick) {
            return;
        }
        ctx.set_timer(self.opts.retry_ns, Timer::SafeTick);
        if self
            .puller
            .due(ctx.now_ns(), self.opts.retry_ns + self.opts.interval_ns)
        {
            self.pull(ctx);
        }
    }

    pub fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: SafeMsg) {
        match msg {
            SafeMsg::Replicate {
                stream,
                after,
                upto,
                full,
                versions,
                safe,
            } => {
                let next = stream == self.stream && after == self.position;
                if !full && !next {
                    return; // a reply to an older pull
                }
                self.replay(ctx, full, versions, safe);
                (self.stream, self.position) = (stream, upto);
                self.pull(ctx);
            }
            read @ SafeMsg::Read { .. } => self.copy.offer(ctx, from, read),
            _ => {}
        }
    }

    /// Applies one replication, then moves `t_safe` (never back).
    fn replay(
        &mut self,
        ctx: &mut Cx<'_>,
        full: bool,
        versions: Vec<SafeVersion>,
        safe: Timestamp,
    ) {
        if full {
            // Merged under the old `t_safe`: versions above it may have gaps below them.
            for v in versions {
                self.copy.merge(v);
            }
            self.visibility.clear();
        } else {
            let safe_after = self.copy.safe().max(safe);
            for v in versions {
                if v.committed_ns > 0 {
                    self.visibility
                        .replayed(ctx, safe_after, v.ts, v.committed_ns);
                }
                self.copy.insert(v.key, v.ts, v.value, true);
            }
        }
        self.copy.advance(ctx, safe);
        let safe = self.copy.safe();
        self.visibility.advanced(ctx, safe);
        ctx.count("p2pl.replications_replayed", 1);
    }
}

/// A read-only transaction at a coordinator.
#[derive(Debug)]
struct ReadTxn {
    txn: Txn,
    ts: Option<Timestamp>,
    results: Vec<Option<PieceResult>>,
    sent: Vec<bool>,
    /// Resends so far: each goes to the next nearest oracle or copy.
    ticks: u64,
    deadline_ns: u64,
    timer: TimerId,
}

/// A coordinator's SafeTS read-only transactions (one-shot ones whose every piece reads
/// only), by client request.
#[derive(Debug)]
pub struct SafeReader {
    opts: SafeTs,
    me: NodeId,
    cluster: Arc<Cluster>,
    oracles: Vec<NodeId>,
    reads: FxHashMap<RequestId, ReadTxn>,
    max_inflight: usize,
}

impl SafeReader {
    pub fn new(opts: SafeTs, me: NodeId, cluster: Arc<Cluster>, max_inflight: usize) -> Self {
        SafeReader {
            oracles: crate::kit::ttc::oracles_nearest_first(&cluster, me),
            opts,
            me,
            cluster,
            reads: FxHashMap::default(),
            max_inflight,
        }
    }

    /// Whether `txn` is one this reader runs.
    pub fn takes(txn: &Txn) -> bool {
        !txn.pieces.is_empty() && txn.is_read_only()
    }

    /// Starts `txn` (validated): asks the nearest oracle for its timestamp.
    pub fn submit(&mut self, ctx: &mut Cx<'_>, request: RequestId, txn: Txn) {
        if self.reads.len() >= self.max_inflight || self.oracles.is_empty() {
            let why = format!(
                "overloaded: {} read-only transactions already in flight (max_inflight)",
                self.reads.len()
            );
            return respond(ctx, request, Err(AbortReason::Unsupported(why)));
        }
        let n = txn.pieces.len();
        let t = ReadTxn {
            txn,
            ts: None,
            results: vec![None; n],
            sent: vec![false; n],
            ticks: 0,
            deadline_ns: ctx.now_ns().saturating_add(self.opts.timeout_ns),
            timer: ctx.set_timer(self.opts.retry_ns, Timer::SafeRead(request)),
        };
        self.reads.insert(request, t);
        self.ask_oracle(ctx, request, 0);
        ctx.count("p2pl.oracle_requests", 1);
    }

    fn ask_oracle(&self, ctx: &mut Cx<'_>, request: RequestId, attempt: u64) {
        let oracle = self.oracles[(attempt % self.oracles.len() as u64) as usize];
        ctx.send(oracle, Msg::Safe(SafeMsg::GetReadTs { request }));
    }

    pub fn on_message(&mut self, ctx: &mut Cx<'_>, msg: SafeMsg) {
        match msg {
            SafeMsg::ReadTs {
                request,
                high_ns,
                oracle,
            } => {
                let Some(t) = self.reads.get_mut(&request) else {
                    return;
                };
                if t.ts.is_none() {
                    t.ts = Some(Timestamp::new(high_ns, oracle));
                    self.dispatch(ctx, request);
                }
            }
            SafeMsg::ReadDone {
                request,
                index,
                outcome,
            } => self.on_read_done(ctx, request, index, outcome),
            _ => {}
        }
    }

    fn on_read_done(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        index: u16,
        outcome: Result<PieceResult, AbortReason>,
    ) {
        let Some(t) = self.reads.get_mut(&request) else {
            return;
        };
        let Some(slot) = t.results.get_mut(usize::from(index)) else {
            return;
        };
        match outcome {
            Ok(result) => {
                if slot.is_none() {
                    *slot = Some(result);
                }
                if t.results.iter().all(Option::is_some) {
                    return self.finish(ctx, request, Ok(()));
                }
                self.dispatch(ctx, request);
            }
            Err(reason) => self.finish(ctx, request, Err(reason)),
        }
    }

    /// Sends every piece whose inputs are known and that was not sent yet.
    fn dispatch(&mut self, ctx: &mut Cx<'_>, request: RequestId) {
        let t = self.reads.get_mut(&request).expect("live read");
        for i in 0..t.txn.pieces.len() {
            let ready = t.txn.pieces[i]
                .dependencies()
                .iter()
                .all(|&d| t.results.get(usize::from(d)).is_some_and(Option::is_some));
            if !t.sent[i] && ready {
                t.sent[i] = true;
                send_read(ctx, &self.cluster, self.me, request, t, i);
            }
        }
    }

    /// A resend tick: the next oracle, or every unanswered piece to the next copy; the
    /// transaction aborts at its deadline.
    pub fn on_timer(&mut self, ctx: &mut Cx<'_>, request: RequestId) {
        let Some(t) = self.reads.get_mut(&request) else {
            return;
        };
        if ctx.now_ns() >= t.deadline_ns {
            return self.finish(ctx, request, Err(AbortReason::Timeout));
        }
        t.ticks += 1;
        t.timer = ctx.set_timer(self.opts.retry_ns, Timer::SafeRead(request));
        if t.ts.is_none() {
            let attempt = t.ticks;
            return self.ask_oracle(ctx, request, attempt);
        }
        for i in 0..t.txn.pieces.len() {
            if t.sent[i] && t.results[i].is_none() {
                send_read(ctx, &self.cluster, self.me, request, t, i);
            }
        }
    }

    fn finish(&mut self, ctx: &mut Cx<'_>, request: RequestId, end: Result<(), AbortReason>) {
        let t = self.reads.remove(&request).expect("live read");
        ctx.cancel_timer(t.timer);
        let outcome = end.map(|()| {
            let results = t.results.into_iter().map(|r| r.expect("all")).collect();
            (results, t.ts.expect("read at a timestamp"))
        });
        respond(ctx, request, outcome);
    }
}

fn send_read(
    ctx: &mut Cx<'_>,
    cluster: &Cluster,
    me: NodeId,
    request: RequestId,
    t: &ReadTxn,
    i: usize,
) {
    let piece = t.txn.pieces[i].clone();
    let inputs = piece
        .dependencies()
        .into_iter()
        .filter_map(|d| Some((d, t.results.get(usize::from(d))?.clone()?)))
        .collect();
    let to = nearest_copy(cluster, me, piece.shard, t.ticks);
    let msg = SafeMsg::Read {
        request,
        index: i as u16,
        ts: t.ts.expect("dispatched after the timestamp"),
        piece,
        inputs,
    };
    ctx.send(to, Msg::Safe(msg));
}

fn respond(
    ctx: &mut Cx<'_>,
    request: RequestId,
    outcome: Result<(Vec<PieceResult>, Timestamp), AbortReason>,
) {
    let outcome = match outcome {
        Ok((results, ts)) => Outcome::Committed {
            results,
            commit_ts: Some(ts),
            path: CommitPath::ReadOnly,
        },
        Err(reason) => Outcome::Aborted { reason },
    };
    ctx.respond(request, ClientResponse::Outcome(outcome));
}
