//! Tiga's coordinator (§3.1, §3.4, §3.7; Algorithm 3): OWD probes, future timestamps,
//! multicast, and the fast/slow quorum checks; with §4, it counts only replies of the view
//! it holds and resubmits everything in flight when a new view arrives. Interactive
//! transactions are decomposed into one-shot ones in [`session`].

mod session;

use super::headroom::{Estimator, Planned};
use super::options::{Options, SlowReplies};
use super::view::{self, View};
use super::wire::{
    send_grouped, FastReply, Msg, Record, ShardResult, Timer, TxnBody, FAST_REPLIES_BATCH_MAX,
    SUBMITS_BATCH_MAX,
};
use super::{super_quorum, TigaNode};
use meridian_core::node::Ctx;
use meridian_core::txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Outcome, PieceResult, Txn,
};
use meridian_core::{Cluster, Key, NodeId, RequestId, ShardId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use session::Session;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Replies of one shard for one transaction.
#[derive(Debug, Default)]
struct ShardReplies {
    /// The leader's fast reply with the largest timestamp (a leader's timestamp only grows).
    leader: Option<Arc<FastReply>>,
    /// Fast replies by replica index: (timestamp, hash).
    fast: ByReplica<(Timestamp, meridian_store::Hash160)>,
    /// Slow replies by replica index: timestamp.
    slow: ByReplica<Timestamp>,
}

/// One value per replica index of a shard, the latest kept: a short vector, inline for
/// three replicas (a tree map allocated a node per shard per transaction).
#[derive(Debug)]
struct ByReplica<V>(SmallVec<[(u32, V); 3]>);

impl<V> Default for ByReplica<V> {
    fn default() -> Self {
        ByReplica(SmallVec::new())
    }
}

impl<V> ByReplica<V> {
    fn insert(&mut self, replica: u32, value: V) {
        match self.0.iter_mut().find(|(r, _)| *r == replica) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((replica, value)),
        }
    }

    fn get(&self, replica: u32) -> Option<&V> {
        self.0.iter().find(|(r, _)| *r == replica).map(|(_, v)| v)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
}

/// Whom a transaction's outcome goes to.
#[derive(Clone, Debug)]
enum Purpose {
    /// The client's one-shot transaction.
    OneShot,
    /// An interactive session's read of `keys` (the first is the `Get` being answered, the
    /// rest its `then` hint), in the order of the read transaction's ops.
    Read { session: TxnId, keys: Vec<Key> },
    /// An interactive session's commit (validation and writes).
    Commit { session: TxnId },
}

#[derive(Debug)]
struct Inflight {
    request: RequestId,
    purpose: Purpose,
    body: TxnBody,
    /// Per involved shard, in `body.shards` order.
    replies: Vec<ShardReplies>,
    started_ns: u64,
    last_sent_ns: u64,
    /// `slow_replies=pull`: from when slow replies are asked for on every shard (the fast
    /// quorum is overdue, or the transaction was planned for the slow path).
    pull_at_ns: u64,
    /// When every fast reply should be in (`Plan::fast_done_ns` + `inquiry_ms`), whether
    /// or not slow replies are pulled earlier.
    fast_due_ns: u64,
}

impl Inflight {
    /// Appendix E: whether to ask shard `i`'s followers for slow replies — the fast quorum
    /// is overdue, or a follower's fast reply differs from the leader's.
    fn wants_slow(&self, i: usize, now: u64) -> bool {
        now >= self.pull_at_ns || self.fast_mismatch(i)
    }

    /// A follower's fast reply on shard `i` differs from the leader's: no fast quorum.
    fn fast_mismatch(&self, i: usize) -> bool {
        let replies = &self.replies[i];
        replies.leader.as_ref().is_some_and(|leader| {
            replies
                .fast
                .values()
                .any(|&(ts, hash)| (ts, hash) != (leader.ts, leader.hash))
        })
    }
}

/// The coordinator state machine.
#[derive(Debug)]
pub struct Coordinator {
    id: NodeId,
    cluster: Arc<Cluster>,
    opts: Options,
    incarnation: u32,
    counter: u64,
    last_ts: u64,
    /// Recent OWD samples and the headroom plans drawn from them.
    estimator: Estimator,
    inflight: FxHashMap<TxnId, Inflight>,
    /// The view whose replies count (§4); from the view manager.
    view: View,
    inquirer: view::Inquirer,
    /// `slow_replies=pull`, per shard: until when slow replies are asked for from the
    /// start, because a replica stayed silent through a slow commit (it is likely down,
    /// so waiting for an overdue fast quorum would only add latency).
    pull_early_until_ns: Vec<u64>,
    /// Open interactive transactions (decomposition), by the id `Begin` answered.
    sessions: FxHashMap<TxnId, Session>,
    /// Submissions (to, transaction), sent at the end of the batch of events.
    submits_out: Vec<(NodeId, TxnBody)>,
}

impl Coordinator {
    pub fn restore(
        id: NodeId,
        opts: Options,
        cluster: Arc<Cluster>,
        recovered: &[Record],
    ) -> Coordinator {
        let incarnation = recovered
            .iter()
            .filter(|r| matches!(r, Record::CoordinatorStarted))
            .count() as u32;
        let cluster_shards = cluster.shard_count() as usize;
        Coordinator {
            id,
            estimator: Estimator::new(id, cluster.nodes.len()),
            view: View::initial(&cluster, &opts),
            inquirer: view::Inquirer::default(),
            cluster,
            opts,
            incarnation,
            counter: 0,
            last_ts: 0,
            inflight: FxHashMap::default(),
            pull_early_until_ns: vec![0; cluster_shards],
            sessions: FxHashMap::default(),
            submits_out: Vec::new(),
        }
    }

    pub fn on_start(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        ctx.persist(Record::CoordinatorStarted);
        // A restarted coordinator may have missed view changes (Appendix B).
        self.inquire(ctx);
        self.probe(ctx);
        let tick = (self.opts.retry_ns / 4).max(1);
        ctx.set_timer(tick, Timer::CoordTick);
        if self.opts.slow_replies == SlowReplies::Pull {
            ctx.set_timer(self.opts.inquiry_ns, Timer::SlowInquiry);
        }
    }

    /// Appendix E's periodic inquiry: one batched request per follower for the entries
    /// whose slow replies are wanted and missing.
    fn inquire_slow(&mut self, ctx: &mut Ctx<'_, TigaNode>, only: Option<TxnId>) {
        let now = ctx.now_ns();
        let leaders = self.view.leaders(&self.cluster);
        let mut wanted: BTreeMap<(NodeId, ShardId), Vec<TxnId>> = BTreeMap::new();
        let chosen: Vec<(&TxnId, &Inflight)> = match only {
            Some(txn) => self.inflight.get_key_value(&txn).into_iter().collect(),
            None => self.inflight.iter().collect(),
        };
        for (&txn, inf) in chosen {
            for (i, &shard) in inf.body.shards.iter().enumerate() {
                if !inf.wants_slow(i, now) {
                    continue;
                }
                let replicas = self.cluster.replicas(shard);
                for (r, &node) in replicas.iter().enumerate() {
                    let answered = inf.replies[i].slow.get(r as u32).is_some();
                    if node != leaders[shard.index()] && !answered {
                        wanted.entry((node, shard)).or_default().push(txn);
                    }
                }
            }
        }
        for ((node, shard), mut txns) in wanted {
            txns.sort_unstable();
            ctx.send(node, Msg::SlowInquiry { shard, txns });
        }
    }

    fn probe(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let msg = Msg::Probe {
            sent_ns: ctx.now_ns(),
            finished_below: self.finished_below(),
        };
        let servers: Vec<NodeId> = self.cluster.shards.iter().flatten().copied().collect();
        ctx.multicast(servers, &msg);
        ctx.set_timer(self.opts.probe_ns, Timer::Probe);
    }

    /// The finished watermark the probes carry ([`Msg::Probe`]): the smallest `seq` of a
    /// transaction in flight, or the next one's if none is. Every id this coordinator
    /// ever used below it has its outcome (ids only grow, across incarnations too).
    fn finished_below(&self) -> u64 {
        let next = TxnId::new(self.id, self.incarnation, self.counter + 1).seq;
        self.inflight.keys().map(|id| id.seq).fold(next, u64::min)
    }

    /// The OWD estimate to `server` in ns, at the paper's `probe_percentile`.
    pub fn owd_ns(&self, server: NodeId) -> u64 {
        self.estimator
            .forward_ns(&self.cluster, server, self.opts.probe_percentile)
    }

    /// §3.1 (and §6's choice of quorum): the headroom for a transaction on `shards`.
    pub fn headroom_ns(&self, shards: &[ShardId]) -> u64 {
        let leaders = self.view.leaders(&self.cluster);
        self.estimator
            .plan(&self.cluster, shards, &leaders, &self.opts)
            .headroom_ns
    }

    /// The end of a batch of events: each server gets one message with every transaction
    /// the batch submitted to it.
    pub fn on_batch_end(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        send_grouped(
            ctx,
            &mut self.submits_out,
            SUBMITS_BATCH_MAX,
            |body| Msg::Submit(Box::new(body)),
            Msg::Submits,
        );
    }

    /// A fast reply (§3.4): counted toward its shard's super quorum if of this view.
    fn on_fast_reply(&mut self, ctx: &mut Ctx<'_, TigaNode>, reply: Arc<FastReply>) {
        if !self.in_view(ctx, reply.g_view) {
            return;
        }
        let txn = reply.txn;
        let Some(inf) = self.inflight.get_mut(&txn) else {
            return;
        };
        let Some(i) = inf.body.shards.iter().position(|&s| s == reply.shard) else {
            return;
        };
        let shard = &mut inf.replies[i];
        let leader_idx = self.view.leader_replica(&self.cluster, reply.shard);
        if reply.replica == leader_idx {
            if shard.leader.as_ref().is_none_or(|l| l.ts <= reply.ts) {
                shard.fast.insert(reply.replica, (reply.ts, reply.hash));
                shard.leader = Some(reply);
            }
        } else {
            shard.fast.insert(reply.replica, (reply.ts, reply.hash));
        }
        let pull = self.opts.slow_replies == SlowReplies::Pull;
        let mismatch = pull && inf.fast_mismatch(i);
        self.try_commit(ctx, txn);
        if mismatch {
            self.inquire_slow(ctx, Some(txn));
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, TigaNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::ProbeReply { sent_ns, server_ns } => self.estimator.record(
                from,
                (sent_ns, server_ns, ctx.now_ns()),
                self.opts.probe_window,
            ),
            Msg::NewView(view) => self.on_new_view(ctx, view),
            Msg::FastReply(reply) => self.on_fast_reply(ctx, reply),
            // A longer batch is malformed: dropped.
            Msg::FastReplies(replies) if replies.len() <= FAST_REPLIES_BATCH_MAX => {
                for reply in replies {
                    self.on_fast_reply(ctx, reply);
                }
            }
            Msg::SlowReply {
                txn,
                shard,
                replica,
                ts,
                g_view,
            } => {
                if !self.in_view(ctx, g_view) {
                    return;
                }
                let Some(inf) = self.inflight.get_mut(&txn) else {
                    return;
                };
                let Some(i) = inf.body.shards.iter().position(|&s| s == shard) else {
                    return;
                };
                inf.replies[i].slow.insert(replica, ts);
                self.try_commit(ctx, txn);
            }
            _ => {}
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, TigaNode>, timer: Timer) {
        match timer {
            Timer::Probe => self.probe(ctx),
            Timer::SlowInquiry => {
                self.inquire_slow(ctx, None);
                ctx.set_timer(self.opts.inquiry_ns, Timer::SlowInquiry);
            }
            Timer::CoordTick => {
                let now = ctx.now_ns();
                let mut expired = Vec::new();
                for (&txn, inf) in self.inflight.iter_mut() {
                    if now.saturating_sub(inf.started_ns) >= self.opts.commit_timeout_ns {
                        expired.push(txn);
                    } else if now.saturating_sub(inf.last_sent_ns) >= self.opts.retry_ns {
                        inf.last_sent_ns = now;
                        submit(&mut self.submits_out, &self.cluster, &inf.body);
                    }
                }
                expired.sort_unstable();
                for txn in expired {
                    let inf = self.inflight.remove(&txn).expect("listed");
                    let unknown = Outcome::Unknown {
                        reason: format!("{txn} not committed in time"),
                    };
                    self.conclude_step(ctx, inf.request, inf.purpose, unknown);
                }
                self.expire_sessions(now);
                let tick = (self.opts.retry_ns / 4).max(1);
                ctx.set_timer(tick, Timer::CoordTick);
            }
            _ => {}
        }
    }

    pub fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        request: RequestId,
        req: ClientRequest,
    ) {
        let abort = |ctx: &mut Ctx<'_, TigaNode>, reason: AbortReason| {
            ctx.respond(
                request,
                ClientResponse::Outcome(Outcome::Aborted { reason }),
            );
        };
        let txn = match req {
            ClientRequest::OneShot(txn) => txn,
            ClientRequest::Interactive(step) => return self.on_step(ctx, request, step),
        };
        if let Err(e) = txn.validate(self.cluster.shard_count()) {
            return abort(ctx, AbortReason::Invalid(e.to_string()));
        }
        for piece in &txn.pieces {
            for d in piece.dependencies() {
                if txn.pieces[usize::from(d)].shard != piece.shard {
                    return abort(
                        ctx,
                        AbortReason::Unsupported("tiga: value dependencies across shards".into()),
                    );
                }
            }
        }
        self.start(ctx, request, txn, Purpose::OneShot);
    }

    /// A fresh transaction (or session) id.
    fn next_id(&mut self) -> TxnId {
        self.counter += 1;
        TxnId::new(self.id, self.incarnation, self.counter)
    }

    /// §3.1: timestamps a valid one-shot transaction and multicasts it.
    fn start(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        request: RequestId,
        txn: Txn,
        purpose: Purpose,
    ) {
        let shards = txn.shards();
        let id = self.next_id();
        let now = ctx.now_ns();
        let leaders = self.view.leaders(&self.cluster);
        let plan = self
            .estimator
            .plan(&self.cluster, &shards, &leaders, &self.opts);
        let suspect = shards
            .iter()
            .any(|s| self.pull_early_until_ns[s.index()] > now);
        let fast_due_ns = now + plan.fast_done_ns + self.opts.inquiry_ns;
        let pieces: Vec<(u16, meridian_core::txn::Piece)> = txn
            .pieces
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i as u16, p))
            .collect();
        let body = TxnBody {
            id,
            ts: Timestamp::ZERO,
            shards,
            pieces: Arc::new(pieces),
            aborted: false,
            decided: false,
        };
        // A transaction whose decision matters commits or aborts on the slow path only.
        let slow_only = body.decision_matters();
        let pull_at_ns = match plan.planned {
            Planned::Slow => now,
            Planned::Fast if suspect || slow_only => now,
            Planned::Fast => fast_due_ns,
        };
        let mut t = now + plan.headroom_ns;
        if t <= self.last_ts {
            t = self.last_ts + 1;
        }
        self.last_ts = t;
        let body = TxnBody {
            ts: Timestamp::new(t, self.id.0),
            ..body
        };
        submit(&mut self.submits_out, &self.cluster, &body);
        self.inflight.insert(
            id,
            Inflight {
                request,
                purpose,
                replies: (0..body.shards.len())
                    .map(|_| ShardReplies::default())
                    .collect(),
                body,
                started_ns: now,
                last_sent_ns: now,
                pull_at_ns,
                fast_due_ns,
            },
        );
    }

    /// Whether a reply of `g_view` counts; a newer view makes us ask for it.
    fn in_view(&mut self, ctx: &mut Ctx<'_, TigaNode>, g_view: u64) -> bool {
        if g_view > self.view.g_view {
            self.inquire(ctx);
        }
        g_view == self.view.g_view
    }

    fn inquire(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        self.inquirer
            .inquire(ctx, &self.cluster, self.opts.retry_ns);
    }

    /// §4: replies of the old view no longer count; retry everything in flight (same id and
    /// timestamp: servers deduplicate, and recovered entries answer from the new log).
    fn on_new_view(&mut self, ctx: &mut Ctx<'_, TigaNode>, view: View) {
        if view.g_view <= self.view.g_view {
            return;
        }
        self.view = view;
        let now = ctx.now_ns();
        let mut ids: Vec<TxnId> = self.inflight.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let inf = self.inflight.get_mut(&id).expect("listed");
            inf.replies
                .iter_mut()
                .for_each(|r| *r = ShardReplies::default());
            inf.last_sent_ns = now;
            submit(&mut self.submits_out, &self.cluster, &inf.body);
        }
    }

    /// Algorithm 3 lines 8–34.
    fn try_commit(&mut self, ctx: &mut Ctx<'_, TigaNode>, txn: TxnId) {
        let inf = &self.inflight[&txn];
        // Its decision must be on f + 1 replicas of every shard before it is reported
        // (a view change aborts an entry no server knew decided).
        let slow_only = inf.body.decision_matters();
        let mut all_fast = true;
        let mut reexecuted = false;
        let mut leader_ts = None;
        for (&shard, replies) in inf.body.shards.iter().zip(&inf.replies) {
            let Some(leader) = &replies.leader else {
                return;
            };
            let f = self.cluster.f(shard);
            let n = self.cluster.replicas(shard).len() as u32;
            let (mut fast_q, mut slow_q, mut pure_fast) = (0, 0, 0);
            for r in 0..n {
                let matches_fast = replies.fast.get(r) == Some(&(leader.ts, leader.hash));
                if matches_fast {
                    pure_fast += 1;
                }
                if replies.slow.get(r) == Some(&leader.ts) {
                    slow_q += 1;
                    fast_q += 1;
                } else if matches_fast {
                    fast_q += 1;
                }
            }
            let fast = fast_q >= super_quorum(f) && !slow_only;
            if !fast && slow_q < f {
                return;
            }
            all_fast &= pure_fast >= super_quorum(f);
            reexecuted |= leader.reexecuted;
            match leader_ts {
                None => leader_ts = Some(leader.ts),
                Some(t) if t != leader.ts => return,
                _ => {}
            }
        }
        let inf = self.inflight.remove(&txn).expect("present");
        if !all_fast {
            self.note_silent_replicas(&inf, ctx.now_ns());
        }
        let results: Vec<&ShardResult> = inf
            .replies
            .iter()
            .map(|r| {
                r.leader
                    .as_ref()
                    .and_then(|l| l.result.as_ref())
                    .expect("leader result")
            })
            .collect();
        // Every leader's result is its vote at the one agreed timestamp; the leaders release
        // T aborted everywhere if any voted abort (cross-shard abort, see the module doc).
        let failed = results.iter().find_map(|r| r.as_ref().err());
        let outcome = if let Some(reason) = failed {
            Outcome::Aborted {
                reason: reason.clone(),
            }
        } else {
            let mut out = vec![PieceResult::default(); inf.body.pieces.len()];
            for r in results.into_iter().flatten() {
                for (i, res) in r {
                    out[usize::from(*i)] = res.clone();
                }
            }
            let path = if reexecuted {
                CommitPath::ReExecuted
            } else if all_fast {
                CommitPath::Fast
            } else {
                CommitPath::Slow
            };
            Outcome::Committed {
                results: out,
                commit_ts: leader_ts,
                path,
            }
        };
        self.conclude_step(ctx, inf.request, inf.purpose, outcome);
    }
}

impl Coordinator {
    /// After a slow commit past the time every fast reply was due: a shard with a replica
    /// that sent none is pulled from the start for the next `retry_ms`. (A commit before
    /// that time proves nothing: the far replica's reply may still be on its way, and
    /// counting it would keep a healthy shard on the slow path for good.)
    fn note_silent_replicas(&mut self, inf: &Inflight, now: u64) {
        if now < inf.fast_due_ns {
            return;
        }
        for (&shard, replies) in inf.body.shards.iter().zip(&inf.replies) {
            let n = self.cluster.replicas(shard).len();
            if replies.fast.len() < n {
                self.pull_early_until_ns[shard.index()] = now + self.opts.retry_ns;
            }
        }
    }
}

/// Queues `body` for every replica of every involved shard (§3.1); the batch's end sends it.
fn submit(out: &mut Vec<(NodeId, TxnBody)>, cluster: &Cluster, body: &TxnBody) {
    for &s in &body.shards {
        for &r in cluster.replicas(s) {
            out.push((r, body.clone()));
        }
    }
}
