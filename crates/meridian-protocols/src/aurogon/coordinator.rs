//! The coordinator (Algorithm 1's `Coordinate`): a timestamp from the local clock, reads
//! sent with their pre-attached dependent writes (§4.3), the transaction's logic run on
//! what the reads returned, updates replicated to the backups, then committed (§4.5).
//! Coordinators also grant epochs to backups that campaign to become primary (§4.5's
//! small consensus).

use super::causes::Cause;
use super::options::{ClockMode, Options};
use super::wire::{Config, Cx, Failure, Msg, Record, Timer};
use crate::kit::promotion::Grants;
use meridian_core::txn::{
    execute_piece, AbortReason, ClientRequest, ClientResponse, CommitPath, Key, KvAccess, Op,
    Operand, Outcome, PieceBody, PieceResult, Procedures, Txn, Value,
};
use meridian_core::{Cluster, NodeId, RequestId, ShardId, ShardList, TimerId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Retransmissions of REPLICATE and COMMIT before the coordinator leaves the transaction
/// to the replicas' recovery (the client then hears `unknown` if it has heard nothing).
const MAX_DECISION_RETRIES: u32 = 50;

/// One shard's part of a transaction.
#[derive(Debug)]
struct Part {
    shard: ShardId,
    reads: Vec<Key>,
    /// Installed with the reads (independent writes, and with pre-attaching every write).
    early: Vec<Key>,
    /// Installed in a second round, after the reads returned (no pre-attaching).
    late: Vec<Key>,
    /// The primary that executed the part, and its epoch.
    primary: Option<(NodeId, u64)>,
    values: Vec<Option<Value>>,
    round_done: [bool; 2],
    writes: Vec<(Key, Value)>,
}

impl Part {
    fn writes_anything(&self) -> bool {
        !self.early.is_empty() || !self.late.is_empty()
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Executing {
        round: u8,
    },
    /// Waiting for every backup of every write shard to hold the updates.
    Replicating,
    /// Decided: COMMIT out, acknowledgements collected.
    Committing,
}

#[derive(Debug)]
struct CoordTxn {
    request: Option<RequestId>,
    txn: Txn,
    ts: Timestamp,
    /// Instrumentation: the true time `ts` was taken (abort causes).
    issued_true_ns: Option<u64>,
    parts: Vec<Part>,
    write_shards: ShardList,
    phase: Phase,
    results: Vec<PieceResult>,
    /// (shard, node, acknowledged) of REPLICATE or COMMIT in the current phase.
    acks: Vec<(ShardId, NodeId, bool)>,
    deadline_ns: u64,
    retries: u32,
    timer: TimerId,
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
    last_ts_ns: u64,
    /// With `clock=dst`: how far ahead of the local clock timestamps are taken.
    chase_ns: u64,
    /// Each shard's configuration as this coordinator knows it.
    configs: Vec<Config>,
    /// Each shard's highest granted epoch and its candidate.
    grants: Grants,
    txns: FxHashMap<TxnId, CoordTxn>,
}

impl Coordinator {
    pub(crate) fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        procedures: Arc<Procedures>,
        records: &[Record],
    ) -> Coordinator {
        let shards = cluster.shard_count() as usize;
        let configs = (0..shards)
            .map(|s| Config {
                epoch: 0,
                primary: cluster.initial_leader(ShardId(s as u32)),
            })
            .collect();
        let mut grants = Grants::new(shards);
        let mut incarnation = 0;
        for record in records {
            match record {
                Record::Started { incarnation: i } => incarnation = i + 1,
                Record::Granted {
                    shard,
                    epoch,
                    candidate,
                } => grants.replay(*shard, *epoch, *candidate),
                other => panic!("coordinator {id} logged {other:?}"),
            }
        }
        Coordinator {
            id,
            opts,
            cluster,
            procedures,
            incarnation,
            next_counter: 0,
            last_ts_ns: 0,
            chase_ns: 0,
            configs,
            grants,
            txns: FxHashMap::default(),
        }
    }

    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        let incarnation = self.incarnation;
        ctx.persist(Record::Started { incarnation });
    }

    pub(crate) fn on_client_request(
        &mut self,
        ctx: &mut Cx<'_>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match req {
            ClientRequest::OneShot(txn) => self.submit(ctx, request, txn),
            ClientRequest::Interactive(_) => {
                let why = "aurogon runs one-shot transactions; interactive sessions are not \
                           implemented"
                    .to_string();
                ctx.respond_aborted(request, AbortReason::Unsupported(why));
            }
        }
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Executed {
                txn,
                round,
                shard,
                epoch,
                values,
                seen_ns,
            } => {
                if self.opts.clock == ClockMode::Dst {
                    // §2.2's chasing clocks: a lagging clock catches up with the largest
                    // timestamp the data returned (without the one-way delay, as DST).
                    let behind = seen_ns.saturating_sub(ctx.now_ns());
                    self.chase_ns = self.chase_ns.max(behind);
                }
                self.on_executed(ctx, from, txn, round, shard, epoch, values)
            }
            Msg::Failed {
                txn,
                round,
                failure,
            } => self.on_failed(ctx, txn, round, failure),
            Msg::Redirect { shard, config } | Msg::NewConfig { shard, config } => {
                self.learn(shard, config)
            }
            Msg::ReplicateAck { txn, shard, ok } => {
                self.on_replicate_ack(ctx, from, txn, shard, ok)
            }
            Msg::CommitAck { txn, shard } => self.on_commit_ack(ctx, from, txn, shard),
            Msg::RequestGrant { shard, epoch } => self.on_request_grant(ctx, from, shard, epoch),
            _ => {}
        }
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        if let Timer::Txn(txn) = timer {
            self.tick(ctx, txn);
        }
    }

    fn learn(&mut self, shard: ShardId, config: Config) {
        let known = &mut self.configs[shard.index()];
        if config.epoch > known.epoch {
            *known = config;
        }
    }

    /// §4.5's small consensus: an epoch of a shard goes to the first candidate that asks
    /// for it (logged before the answer); a majority of grants makes the candidate primary.
    fn on_request_grant(&mut self, ctx: &mut Cx<'_>, from: NodeId, shard: ShardId, epoch: u64) {
        let Some(grant) = self.grants.request(shard, epoch, from) else {
            return;
        };
        if grant.newly {
            ctx.persist(Record::Granted {
                shard,
                epoch,
                candidate: from,
            });
        }
        let granted = grant.granted;
        ctx.send(
            from,
            Msg::Grant {
                shard,
                epoch,
                granted,
            },
        );
    }

    // ---- execution --------------------------------------------------------------------

    fn submit(&mut self, ctx: &mut Cx<'_>, request: RequestId, txn: Txn) {
        if let Err(e) = txn.validate(self.cluster.shard_count()) {
            return ctx.respond_aborted(request, AbortReason::Invalid(e.to_string()));
        }
        if self.txns.len() >= self.opts.max_inflight {
            let why = format!(
                "overloaded: {} transactions in flight at this coordinator (max_inflight)",
                self.txns.len()
            );
            return ctx.respond_aborted(request, AbortReason::Unsupported(why));
        }
        let id = TxnId::new(self.id, self.incarnation, self.next_counter);
        self.next_counter += 1;
        // Attempts started: the denominator of the abort-cause shares (`causes.rs`).
        ctx.count("aurogon.txns", 1);
        // Algorithm 1 line 3; unique by coordinator and incarnation, increasing here.
        let time_ns = (ctx.now_ns() + self.chase_ns).max(self.last_ts_ns + 1);
        self.last_ts_ns = time_ns;
        let ts = Timestamp::with_frac(time_ns, self.id.0, self.incarnation);
        let parts = plan(&txn, self.opts.pre_attach);
        let write_shards = parts
            .iter()
            .filter(|p| p.writes_anything())
            .map(|p| p.shard)
            .collect();
        let now = ctx.now_ns();
        let t = CoordTxn {
            request: Some(request),
            txn,
            ts,
            issued_true_ns: ctx.true_now_ns(),
            parts,
            write_shards,
            phase: Phase::Executing { round: 0 },
            results: Vec::new(),
            acks: Vec::new(),
            deadline_ns: now.saturating_add(self.opts.exec_timeout_ns),
            retries: 0,
            timer: ctx.set_timer(self.opts.retry_ns, Timer::Txn(id)),
        };
        self.txns.insert(id, t);
        self.start_round(ctx, id, 0);
    }

    /// Sends round `round` of every part that has something in it.
    fn start_round(&mut self, ctx: &mut Cx<'_>, id: TxnId, round: u8) {
        let t = self.txns.get_mut(&id).expect("live");
        t.phase = Phase::Executing { round };
        for p in &mut t.parts {
            let empty = match round {
                0 => p.reads.is_empty() && p.early.is_empty(),
                _ => p.late.is_empty(),
            };
            p.round_done[usize::from(round)] = empty;
        }
        if round == 1 {
            ctx.count("aurogon.second_rounds", 1);
        }
        self.send_round(ctx, id);
        self.after_part(ctx, id);
    }

    fn send_round(&self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        let Phase::Executing { round } = t.phase else {
            return;
        };
        for p in t.parts.iter().filter(|p| !p.round_done[usize::from(round)]) {
            let config = self.configs[p.shard.index()];
            let (reads, installs) = match round {
                0 => (p.reads.clone(), p.early.clone()),
                _ => (Vec::new(), p.late.clone()),
            };
            let msg = Msg::Execute {
                txn: id,
                ts: t.ts,
                round,
                config,
                reads,
                installs,
                write_shards: t.write_shards.clone(),
                issued_true_ns: t.issued_true_ns,
            };
            ctx.send(config.primary, msg);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_executed(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        id: TxnId,
        round: u8,
        shard: ShardId,
        epoch: u64,
        values: Vec<Option<Value>>,
    ) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        if t.phase != (Phase::Executing { round }) {
            return;
        }
        let Some(p) = t.parts.iter_mut().find(|p| p.shard == shard) else {
            return;
        };
        if p.round_done[usize::from(round)] {
            return;
        }
        match p.primary {
            Some(primary) if primary != (from, epoch) => {
                // The shard changed primary between rounds: the first round's pending
                // versions are not where the second round went.
                return self.abort(ctx, id, AbortReason::Failure);
            }
            _ => p.primary = Some((from, epoch)),
        }
        if round == 0 {
            if values.len() != p.reads.len() {
                return;
            }
            p.values = values;
        }
        p.round_done[usize::from(round)] = true;
        self.after_part(ctx, id);
    }

    /// Moves on once every part finished the current round.
    fn after_part(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        let Phase::Executing { round } = t.phase else {
            return;
        };
        if !t.parts.iter().all(|p| p.round_done[usize::from(round)]) {
            return;
        }
        if round == 0 {
            if let Err(reason) = self.run_logic(id) {
                return self.abort(ctx, id, reason);
            }
            if self.txns[&id].parts.iter().any(|p| !p.late.is_empty()) {
                return self.start_round(ctx, id, 1);
            }
        }
        self.start_replication(ctx, id);
    }

    /// Runs the transaction's pieces on the values read at its timestamp (the reads saw
    /// exactly the versions below it, so this is the execution at the timestamp); the
    /// writes become each shard's update.
    fn run_logic(&mut self, id: TxnId) -> Result<(), AbortReason> {
        let t = self.txns.get_mut(&id).expect("live");
        let mut view = View {
            values: FxHashMap::default(),
            shard: ShardId(0),
            writes: Vec::new(),
        };
        for p in &t.parts {
            for (key, value) in p.reads.iter().zip(&p.values) {
                view.values.insert(key.clone(), value.clone());
            }
        }
        let mut results: Vec<PieceResult> = Vec::with_capacity(t.txn.pieces.len());
        for piece in &t.txn.pieces {
            view.shard = piece.shard;
            let inputs: Vec<Option<&PieceResult>> = results.iter().map(Some).collect();
            let result = execute_piece(piece, &inputs, &self.procedures, &mut view)?;
            results.push(result);
        }
        for (shard, key, value) in view.writes {
            if let Some(p) = t.parts.iter_mut().find(|p| p.shard == shard) {
                match p.writes.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = value,
                    None => p.writes.push((key, value)),
                }
            }
        }
        t.results = results;
        Ok(())
    }

    fn on_failed(&mut self, ctx: &mut Cx<'_>, id: TxnId, round: u8, failure: Failure) {
        let Some(t) = self.txns.get(&id) else {
            return;
        };
        if t.phase != (Phase::Executing { round }) {
            return;
        }
        let cause = match failure {
            Failure::Refused(_, cause) => {
                ctx.count("aurogon.aborts.refused", 1);
                cause
            }
            Failure::Finished => {
                ctx.count("aurogon.aborts.finished", 1);
                None
            }
        };
        self.abort_for(ctx, id, AbortReason::Conflict, cause);
    }

    // ---- replication and commit (§4.5) ------------------------------------------------

    fn start_replication(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self.txns.get_mut(&id).expect("live");
        if t.write_shards.is_empty() {
            // Reads are committed once executed (§4.1).
            let t = self.txns.remove(&id).expect("live");
            ctx.cancel_timer(t.timer);
            let outcome = Outcome::Committed {
                results: t.results,
                commit_ts: Some(t.ts),
                path: CommitPath::ReadOnly,
            };
            if let Some(request) = t.request {
                ctx.respond(request, ClientResponse::Outcome(outcome));
            }
            return;
        }
        t.phase = Phase::Replicating;
        t.retries = 0;
        t.acks.clear();
        for p in t.parts.iter().filter(|p| p.writes_anything()) {
            let (primary, _) = p.primary.expect("executed");
            for &n in self.cluster.replicas(p.shard) {
                if n != primary {
                    t.acks.push((p.shard, n, false));
                }
            }
        }
        self.send_replicates(ctx, id);
        self.replicated(ctx, id);
    }

    fn send_replicates(&self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        for &(shard, node, acked) in &t.acks {
            if acked {
                continue;
            }
            let p = t.parts.iter().find(|p| p.shard == shard).expect("part");
            let msg = Msg::Replicate {
                txn: id,
                ts: t.ts,
                shard,
                epoch: p.primary.expect("executed").1,
                writes: p.writes.clone(),
                write_shards: t.write_shards.clone(),
            };
            ctx.send(node, msg);
        }
    }

    fn on_replicate_ack(
        &mut self,
        ctx: &mut Cx<'_>,
        from: NodeId,
        id: TxnId,
        shard: ShardId,
        ok: bool,
    ) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        if t.phase != Phase::Replicating {
            return;
        }
        if !ok {
            // The backup refused, and promised never to hold it: no recovery can commit it.
            ctx.count("aurogon.aborts.replication_refused", 1);
            return self.abort(ctx, id, AbortReason::Failure);
        }
        if let Some(slot) = t
            .acks
            .iter_mut()
            .find(|(s, n, _)| *s == shard && *n == from)
        {
            slot.2 = true;
        }
        self.replicated(ctx, id);
    }

    /// Commits once every backup holds the updates (§4.5: commit iff every backup holds).
    fn replicated(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self.txns.get_mut(&id).expect("live");
        if !t.acks.iter().all(|(_, _, acked)| *acked) {
            return;
        }
        t.phase = Phase::Committing;
        t.retries = 0;
        t.acks = t
            .write_shards
            .iter()
            .flat_map(|&s| self.cluster.replicas(s).iter().map(move |&n| (s, n, false)))
            .collect();
        self.send_commits(ctx, id);
        if !self.opts.strong_partition() {
            self.respond_committed(ctx, id);
        }
    }

    fn send_commits(&self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = &self.txns[&id];
        for &(shard, node, acked) in &t.acks {
            if acked {
                continue;
            }
            let p = t.parts.iter().find(|p| p.shard == shard).expect("part");
            let msg = Msg::Commit {
                txn: id,
                ts: t.ts,
                shard,
                writes: p.writes.clone(),
            };
            ctx.send(node, msg);
        }
    }

    fn on_commit_ack(&mut self, ctx: &mut Cx<'_>, from: NodeId, id: TxnId, shard: ShardId) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        if t.phase != Phase::Committing {
            return;
        }
        if let Some(slot) = t
            .acks
            .iter_mut()
            .find(|(s, n, _)| *s == shard && *n == from)
        {
            slot.2 = true;
        }
        // Strong partition serializability: the client hears "committed" only once every
        // replica of every write shard has made the updates COMMITTED (§4.4: "until
        // receiving all of its commit acknowledgement messages"). Waiting for the primaries
        // alone is not enough: a backup promoted before its COMMIT arrived would still hold
        // the version PENDING, and a later transaction would read around it.
        let all_acked = t.acks.iter().all(|(_, _, acked)| *acked);
        if all_acked && t.request.is_some() {
            self.respond_committed(ctx, id);
        }
        let t = &self.txns[&id];
        if t.acks.iter().all(|(_, _, acked)| *acked) {
            let t = self.txns.remove(&id).expect("live");
            ctx.cancel_timer(t.timer);
        }
    }

    fn respond_committed(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let t = self.txns.get_mut(&id).expect("live");
        let Some(request) = t.request.take() else {
            return;
        };
        let outcome = Outcome::Committed {
            results: std::mem::take(&mut t.results),
            commit_ts: Some(t.ts),
            path: CommitPath::TwoPhase,
        };
        ctx.respond(request, ClientResponse::Outcome(outcome));
    }

    /// Aborts before any backup holds the updates (or after one refused): every replica of
    /// the write shards drops the pending versions.
    fn abort(&mut self, ctx: &mut Cx<'_>, id: TxnId, reason: AbortReason) {
        self.abort_for(ctx, id, reason, None);
    }

    /// [`Coordinator::abort`], counting the abort under its cause (§2.2, `causes.rs`).
    fn abort_for(
        &mut self,
        ctx: &mut Cx<'_>,
        id: TxnId,
        reason: AbortReason,
        cause: Option<Cause>,
    ) {
        ctx.count(Cause::counter(cause), 1);
        let t = self.txns.remove(&id).expect("live");
        ctx.cancel_timer(t.timer);
        for &s in &t.write_shards {
            ctx.multicast(self.cluster.replicas(s).to_vec(), &Msg::Abort { txn: id });
        }
        if let Some(request) = t.request {
            ctx.respond_aborted(request, reason);
        }
    }

    fn tick(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        let Some(t) = self.txns.get_mut(&id) else {
            return;
        };
        t.retries += 1;
        match t.phase {
            Phase::Executing { .. } if ctx.now_ns() >= t.deadline_ns => {
                ctx.count("aurogon.aborts.timeout", 1);
                return self.abort(ctx, id, AbortReason::Timeout);
            }
            Phase::Executing { .. } => self.send_round(ctx, id),
            _ if t.retries > MAX_DECISION_RETRIES => return self.give_up(ctx, id),
            Phase::Replicating => self.send_replicates(ctx, id),
            Phase::Committing => self.send_commits(ctx, id),
        }
        let timer = ctx.set_timer(self.opts.retry_ns, Timer::Txn(id));
        self.txns.get_mut(&id).expect("live").timer = timer;
    }

    /// Leaves a replicating or committing transaction to the replicas' recovery.
    fn give_up(&mut self, ctx: &mut Cx<'_>, id: TxnId) {
        ctx.count("aurogon.coordinator_gave_up", 1);
        let t = self.txns.remove(&id).expect("live");
        if let Some(request) = t.request {
            let reason = "left to the replicas' recovery; the transaction may have committed";
            let outcome = Outcome::Unknown {
                reason: reason.to_string(),
            };
            ctx.respond(request, ClientResponse::Outcome(outcome));
        }
    }
}

/// Each shard's reads and writes; with `pre_attach` every write goes with the reads,
/// without it only independent writes do (a `put` of a constant to a key the transaction
/// does not read) and the others wait for the reads (§4.3, Fig. 5 left).
fn plan(txn: &Txn, pre_attach: bool) -> Vec<Part> {
    let mut parts: Vec<Part> = Vec::new();
    for piece in &txn.pieces {
        if !parts.iter().any(|p| p.shard == piece.shard) {
            parts.push(Part {
                shard: piece.shard,
                reads: Vec::new(),
                early: Vec::new(),
                late: Vec::new(),
                primary: None,
                values: Vec::new(),
                round_done: [false; 2],
                writes: Vec::new(),
            });
        }
        let part = parts
            .iter_mut()
            .find(|p| p.shard == piece.shard)
            .expect("part");
        piece.for_each_key(|key, write| {
            let list = if write {
                &mut part.late
            } else {
                &mut part.reads
            };
            if !list.contains(key) {
                list.push(key.clone());
            }
        });
    }
    let independent = |key: &Key| {
        txn.pieces.iter().all(|piece| match &piece.body {
            PieceBody::Ops(ops) => ops.iter().all(|op| match op {
                Op::Put(_, Operand::Literal(_)) => true,
                other => other.key() != key || !other.writes(),
            }),
            PieceBody::Procedure(call) => !call.write_keys.contains(key),
        })
    };
    for part in &mut parts {
        let late = std::mem::take(&mut part.late);
        for key in late {
            if pre_attach || (!part.reads.contains(&key) && independent(&key)) {
                part.early.push(key);
            } else {
                part.late.push(key);
            }
        }
    }
    parts.sort_unstable_by_key(|p| p.shard);
    parts
}

/// The store a transaction's logic runs against at the coordinator: the values its reads
/// returned, then its own writes (each tagged with the shard of the piece that made it).
struct View {
    values: FxHashMap<Key, Option<Value>>,
    shard: ShardId,
    writes: Vec<(ShardId, Key, Value)>,
}

impl KvAccess for View {
    fn get(&mut self, key: &Key) -> Option<Value> {
        self.values.get(key).cloned().flatten()
    }

    fn put(&mut self, key: Key, value: Value) {
        self.values.insert(key.clone(), Some(value.clone()));
        self.writes.push((self.shard, key, value));
    }
}
