//! Interactive transactions by decomposition (Tiga §2 and the report's Appendix F, after
//! Thomson and Abadi [70]; DESIGN §6): a session at the coordinator turns each `Get` into a
//! read-only Tiga transaction (strictly serializable on its own), buffers `Put`s and the
//! read-modify-writes of `Modify` steps, and commits with one one-shot Tiga transaction that
//! re-validates every value the client read ([`Op::Check`]: the shard aborts it with
//! `Validation` if the value changed), applies the buffered puts and runs the
//! read-modify-writes ([`Op::Add`], [`Op::Append`]) at the servers — atomically across
//! shards, since a piece that aborts on one shard aborts the transaction on all (cross-shard
//! abort, see the module doc). The session is then equivalent to running all of it at the
//! commit transaction's agreed timestamp. Only reads the client saw are validated: a
//! read-modify-write reads nothing the client sees, so it cannot go stale (Appendix F's
//! point: what must be validated is what decided the write set, e.g. a lookup, not the
//! counters a transaction increments).
//!
//! A `Get` whose `then` hint names the keys the client reads next (a multi-key read step,
//! e.g. TPC-C's Order-Status) reads them all in one read-only transaction, and the session
//! answers their `Get`s from it. A session whose every read came from one read transaction
//! and that wrote nothing is serialized at that transaction's agreed timestamp, so its
//! commit validates nothing: Appendix F's decomposition with no key dependency is one
//! one-shot read.

use super::{Coordinator, Purpose};
use crate::tiga::TigaNode;
use meridian_core::node::Ctx;
use meridian_core::txn::{
    AbortReason, ClientResponse, CommitPath, Op, Operand, Outcome, Piece, PieceResult, Rmw, Step,
    Txn,
};
use meridian_core::{Key, RequestId, ShardId, Timestamp, TxnId, Value};
use std::collections::BTreeMap;

/// The most keys one read transaction reads: a longer `then` hint is cut (the keys past it
/// are read by their own `Get`s).
const READ_KEYS_MAX: usize = 64;

/// A read-only transaction of `keys`: one piece per shard, in shard order, each key's `Get`
/// in the order of `keys` — the order [`read_values`] expects the outputs in.
fn read_txn(partitioner: &meridian_core::Partitioner, keys: &[Key]) -> Txn {
    let mut by_shard: BTreeMap<ShardId, Vec<Op>> = BTreeMap::new();
    for key in keys {
        let shard = partitioner.shard_of(key);
        by_shard
            .entry(shard)
            .or_default()
            .push(Op::Get(key.clone()));
    }
    Txn {
        pieces: by_shard
            .into_iter()
            .map(|(shard, ops)| Piece::ops(shard, ops))
            .collect(),
    }
}

/// The value of every key of [`read_txn`]`(keys)` from its committed results.
fn read_values(
    partitioner: &meridian_core::Partitioner,
    keys: &[Key],
    results: &[PieceResult],
) -> Vec<(Key, Option<Value>)> {
    let mut shards: Vec<ShardId> = keys.iter().map(|k| partitioner.shard_of(k)).collect();
    shards.sort_unstable();
    shards.dedup();
    let mut next = vec![0usize; shards.len()];
    keys.iter()
        .map(|key| {
            let piece = shards
                .binary_search(&partitioner.shard_of(key))
                .expect("every key's shard has a piece");
            let value = results
                .get(piece)
                .and_then(|r| r.outputs.get(next[piece]))
                .cloned()
                .flatten();
            next[piece] += 1;
            (key.clone(), value)
        })
        .collect()
}

impl Session {
    /// The value the session already knows for `key`: its own write, or an earlier read.
    fn known(&self, key: &Key) -> Option<Option<Value>> {
        match self.writes.get(key) {
            Some(v) => Some(Some(v.clone())),
            None => self.reads.get(key).cloned(),
        }
    }

    /// The keys one read transaction reads for a `Get` of `key` with the `then` hint:
    /// `key`, then the hinted keys the session does not know yet, each once, at most
    /// [`READ_KEYS_MAX`].
    fn to_read(&self, key: Key, then: Vec<Key>) -> Vec<Key> {
        let mut keys = vec![key];
        for k in then {
            if keys.len() >= READ_KEYS_MAX {
                break;
            }
            if self.known(&k).is_none() && !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys
    }

    /// Keeps a value read from the store (validated at commit). A key the session
    /// modified before reading it: the read is validated at commit, so its read-modify-writes
    /// become a put of the value the client sees.
    fn record_read(&mut self, key: Key, value: Option<Value>) {
        self.reads.insert(key.clone(), value.clone());
        if let Some(rmws) = self.rmws.remove(&key) {
            let new = rmws
                .iter()
                .fold(value, |v, rmw| Some(rmw.apply(v.as_ref())));
            let new = new.expect("a read-modify-write yields a value");
            self.writes.insert(key, new);
        }
    }

    /// A `Modify` step: applied to the value the session knows (a buffered put, or a read
    /// that commit validates), else kept for the commit to run at the servers.
    fn modify(&mut self, key: Key, rmw: Rmw) {
        let known = match self.writes.get(&key) {
            Some(v) => Some(Some(v)),
            None => self.reads.get(&key).map(Option::as_ref),
        };
        match known {
            Some(old) => {
                let new = rmw.apply(old);
                self.writes.insert(key, new);
            }
            None => self.rmws.entry(key).or_default().push(rmw),
        }
    }
}

/// One open interactive transaction.
#[derive(Debug, Default)]
pub(super) struct Session {
    /// A step is being answered (a read transaction or the commit is in flight).
    busy: bool,
    /// Every key read from the store, with the value read: validated at commit, and
    /// served again to a repeated read.
    reads: BTreeMap<Key, Option<Value>>,
    /// The agreed timestamp of the last read transaction: a session whose reads all came
    /// from one read transaction and that wrote nothing is serialized there and needs no
    /// validation.
    read_ts: Option<Timestamp>,
    /// How many read transactions returned the values in `reads`.
    read_txns: u32,
    /// Buffered writes, read back by the session's own later reads.
    writes: BTreeMap<Key, Value>,
    /// Read-modify-writes of keys the session neither read nor wrote, in step order: run
    /// at the servers by the commit, never read, so never validated. (A key the session
    /// knows the value of takes a modification into `writes` instead.)
    rmws: BTreeMap<Key, Vec<Rmw>>,
    /// When the last step was answered (local clock), for the idle timeout.
    idle_since_ns: u64,
}

fn outcome(ctx: &mut Ctx<'_, TigaNode>, request: RequestId, outcome: Outcome) {
    ctx.respond(request, ClientResponse::Outcome(outcome));
}

fn aborted(ctx: &mut Ctx<'_, TigaNode>, request: RequestId, reason: AbortReason) {
    outcome(ctx, request, Outcome::Aborted { reason });
}

impl Coordinator {
    /// One step of an interactive transaction.
    pub(super) fn on_step(&mut self, ctx: &mut Ctx<'_, TigaNode>, request: RequestId, step: Step) {
        let Some(txn) = step.txn() else {
            return self.begin(ctx, request);
        };
        let Some(session) = self.sessions.get_mut(&txn) else {
            // Never begun here, dropped after idling, or begun before a restart: it wrote
            // nothing (writes are only buffered here), so it did not commit.
            return aborted(ctx, request, AbortReason::Failure);
        };
        if session.busy {
            let why = format!("{txn}: a step arrived while the previous one is running");
            return aborted(ctx, request, AbortReason::Invalid(why));
        }
        session.idle_since_ns = ctx.now_ns();
        match step {
            Step::Begin { .. } => unreachable!("handled above"),
            Step::Get { key, then, .. } => {
                // Read your writes, and repeated reads (a multi-key read's later keys among
                // them), from the session.
                if let Some(value) = session.known(&key) {
                    return ctx.respond(request, ClientResponse::Read(value));
                }
                session.busy = true;
                let keys = session.to_read(key, then);
                let read = read_txn(&self.cluster.partitioner, &keys);
                self.start(ctx, request, read, Purpose::Read { session: txn, keys });
            }
            Step::Put { key, value, .. } => {
                session.rmws.remove(&key);
                session.writes.insert(key, value);
                ctx.respond(request, ClientResponse::Written);
            }
            Step::Modify { key, rmw, .. } => {
                session.modify(key, rmw);
                ctx.respond(request, ClientResponse::Written);
            }
            Step::Commit { .. } => self.commit_session(ctx, request, txn),
            Step::Abort { .. } => {
                self.sessions.remove(&txn);
                aborted(ctx, request, AbortReason::User);
            }
        }
    }

    /// `Begin`: a new session, unless this coordinator already holds `max_sessions`.
    fn begin(&mut self, ctx: &mut Ctx<'_, TigaNode>, request: RequestId) {
        if self.sessions.len() >= self.opts.max_sessions {
            let why = format!(
                "tiga: more than max_sessions = {} open interactive transactions",
                self.opts.max_sessions
            );
            return aborted(ctx, request, AbortReason::Unsupported(why));
        }
        let id = self.next_id();
        let session = Session {
            idle_since_ns: ctx.now_ns(),
            ..Session::default()
        };
        self.sessions.insert(id, session);
        ctx.respond(request, ClientResponse::Began(id));
    }

    /// `Commit`: one one-shot transaction validating every read and applying every write;
    /// a session that read at most one key and wrote nothing is already serialized at its
    /// read.
    fn commit_session(&mut self, ctx: &mut Ctx<'_, TigaNode>, request: RequestId, txn: TxnId) {
        let session = self.sessions.get_mut(&txn).expect("checked by on_step");
        if session.writes.is_empty() && session.rmws.is_empty() && session.read_txns <= 1 {
            let commit_ts = session.read_ts;
            self.sessions.remove(&txn);
            let committed = Outcome::Committed {
                results: Vec::new(),
                commit_ts,
                path: CommitPath::ReadOnly,
            };
            return outcome(ctx, request, committed);
        }
        session.busy = true;
        let mut by_shard: BTreeMap<ShardId, Vec<Op>> = BTreeMap::new();
        for (key, value) in &session.reads {
            let shard = self.cluster.partitioner.shard_of(key);
            by_shard
                .entry(shard)
                .or_default()
                .push(Op::Check(key.clone(), value.clone()));
        }
        // Checks first: a key read and then written is validated against its old value.
        for (key, value) in &session.writes {
            let shard = self.cluster.partitioner.shard_of(key);
            let put = Op::Put(key.clone(), Operand::Literal(value.clone()));
            by_shard.entry(shard).or_default().push(put);
        }
        for (key, rmws) in &session.rmws {
            let shard = self.cluster.partitioner.shard_of(key);
            let ops = rmws.iter().map(|rmw| rmw.op(key.clone()));
            by_shard.entry(shard).or_default().extend(ops);
        }
        let pieces = by_shard
            .into_iter()
            .map(|(shard, ops)| Piece::ops(shard, ops))
            .collect();
        self.start(
            ctx,
            request,
            Txn { pieces },
            Purpose::Commit { session: txn },
        );
    }

    /// A session's read or commit transaction ended with `result`.
    pub(super) fn conclude_step(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        request: RequestId,
        purpose: Purpose,
        result: Outcome,
    ) {
        match purpose {
            Purpose::OneShot => outcome(ctx, request, result),
            Purpose::Read { session, keys } => {
                self.conclude_read(ctx, request, session, keys, result)
            }
            Purpose::Commit { session } => {
                self.sessions.remove(&session);
                let result = match result {
                    // Per-piece results mean nothing to an interactive client.
                    Outcome::Committed {
                        commit_ts, path, ..
                    } => Outcome::Committed {
                        results: Vec::new(),
                        commit_ts,
                        path,
                    },
                    other => other,
                };
                outcome(ctx, request, result);
            }
        }
    }

    fn conclude_read(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        request: RequestId,
        txn: TxnId,
        keys: Vec<Key>,
        result: Outcome,
    ) {
        let Some(session) = self.sessions.get_mut(&txn) else {
            // Dropped meanwhile (cannot happen while busy; answer anyway).
            return aborted(ctx, request, AbortReason::Failure);
        };
        match result {
            Outcome::Committed {
                results, commit_ts, ..
            } => {
                session.busy = false;
                session.idle_since_ns = ctx.now_ns();
                session.read_ts = commit_ts;
                session.read_txns += 1;
                for (key, value) in read_values(&self.cluster.partitioner, &keys, &results) {
                    session.record_read(key, value);
                }
                let value = session.known(&keys[0]).flatten();
                ctx.respond(request, ClientResponse::Read(value));
            }
            // A read transaction writes nothing, so a failed or unknown one leaves the
            // session without effects: it ends aborted.
            Outcome::Aborted { reason } => {
                self.sessions.remove(&txn);
                aborted(ctx, request, reason);
            }
            Outcome::Unknown { .. } => {
                self.sessions.remove(&txn);
                aborted(ctx, request, AbortReason::Timeout);
            }
        }
    }

    /// Drops sessions idle for `session_timeout_ms` (their clients are gone).
    pub(super) fn expire_sessions(&mut self, now_ns: u64) {
        let timeout = self.opts.session_timeout_ns;
        self.sessions
            .retain(|_, s| s.busy || now_ns.saturating_sub(s.idle_since_ns) < timeout);
    }
}
