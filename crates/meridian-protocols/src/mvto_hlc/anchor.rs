//! Transaction records (CockroachDB's, kept by the anchor: the primary of a transaction's
//! first written shard) and parallel commits' status recovery.
//!
//! A record is STAGING at a timestamp with the list of the transaction's writes, then
//! COMMITTED or ABORTED. A transaction is committed as soon as it is *implicitly*
//! committed: its record STAGING at `ts` and every listed write present as an intent at or
//! below `ts`. Its coordinator knows that from the acknowledgements and answers the client
//! before the record says so; it then makes the commit explicit (`Commit`), and the anchor
//! resolves the intents asynchronously. A record that stays STAGING (its coordinator
//! failed) is recovered: each participant says whether the write is there, and prevents
//! it if not, so the outcome found is final. A transaction with no record is aborted when
//! an older transaction wounds it or when it grows older than the maximum age, and a
//! record that late is refused, so a forgotten abort stays an abort.

use super::primary::Primary;
use super::wire::{Msg, StagedWrite, Status, TxnMeta, TxnRecord, TxnRef};
use super::MvtoNode;
use crate::kit::hlc::HlcTs;
use meridian_core::node::Ctx;
use meridian_core::{NodeId, ShardId};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
struct Recovery {
    ts: HlcTs,
    awaiting: BTreeSet<ShardId>,
    all_found: bool,
    sent_ns: u64,
}

#[derive(Clone, Debug)]
struct Rec {
    txn: TxnMeta,
    status: Status,
    unacked: BTreeSet<ShardId>,
    /// Coordinators waiting for the decision (an `Abort` of a STAGING record).
    waiters: BTreeSet<NodeId>,
    /// Local time the record was staged or last resolved to its participants.
    touched_ns: u64,
    recovery: Option<Recovery>,
}

/// The records anchored at one primary.
#[derive(Debug, Default)]
pub struct Anchor {
    records: BTreeMap<TxnRef, Rec>,
}

impl Anchor {
    /// Replays a persisted record.
    pub fn apply(&mut self, r: &TxnRecord) {
        let rec = Rec {
            txn: r.txn,
            status: r.status.clone(),
            unacked: r.unacked.iter().copied().collect(),
            waiters: BTreeSet::new(),
            touched_ns: 0,
            recovery: None,
        };
        self.records.insert(r.txn.id, rec);
    }

    pub fn apply_ack(&mut self, txn: TxnRef, shard: ShardId) {
        if let Some(rec) = self.records.get_mut(&txn) {
            rec.unacked.remove(&shard);
        }
    }

    pub fn snapshot(&self) -> Vec<TxnRecord> {
        self.records
            .values()
            .map(|r| TxnRecord {
                txn: r.txn,
                status: r.status.clone(),
                unacked: r.unacked.iter().copied().collect(),
            })
            .collect()
    }

    /// The record's status (tests).
    #[cfg(test)]
    pub(crate) fn status(&self, txn: TxnRef) -> Option<&Status> {
        self.records.get(&txn).map(|r| &r.status)
    }
}

fn shards_of(writes: &[StagedWrite]) -> BTreeSet<ShardId> {
    writes.iter().map(|w| w.shard).collect()
}

impl Primary {
    pub(super) fn on_anchor_message(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        from: NodeId,
        msg: Msg,
    ) {
        match msg {
            Msg::Stage { txn, ts, writes } => self.on_stage(ctx, from, txn, ts, writes),
            Msg::Commit { txn, ts } => self.on_commit(ctx, txn, ts),
            Msg::Abort { txn, participants } => self.on_abort(ctx, from, txn, participants),
            Msg::Push { txn, abort } => self.on_push(ctx, from, txn, abort),
            Msg::Resolved { txn, shard } => self.on_resolved(ctx, txn, shard),
            Msg::IntentsQueried {
                txn,
                ts,
                shard,
                found,
            } => self.on_intents_queried(ctx, txn, ts, shard, found),
            _ => {}
        }
    }

    fn too_old(&self, ctx: &Ctx<'_, MvtoNode>, txn: &TxnMeta) -> bool {
        txn.orig.wall_ns.saturating_add(self.opts.max_txn_age_ns()) < ctx.now_ns()
    }

    fn write_record(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef) {
        let Some(rec) = self.anchor.records.get(&txn) else {
            return;
        };
        let record = TxnRecord {
            txn: rec.txn,
            status: rec.status.clone(),
            unacked: rec.unacked.iter().copied().collect(),
        };
        self.persist(ctx, super::wire::Record::TxnRecord(Box::new(record)));
    }

    fn on_stage(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        from: NodeId,
        txn: TxnMeta,
        ts: HlcTs,
        writes: Vec<StagedWrite>,
    ) {
        let now = ctx.now_ns();
        if !self.anchor.records.contains_key(&txn.id) {
            if self.too_old(ctx, &txn) {
                ctx.count("mvto_hlc.stage_too_old", 1);
                self.decide(ctx, txn, false, HlcTs::default(), BTreeSet::new(), None);
                return ctx.send(
                    from,
                    Msg::Staged {
                        txn: txn.id,
                        ts,
                        ok: false,
                    },
                );
            }
            let rec = Rec {
                txn,
                status: Status::Staging { ts, writes },
                unacked: BTreeSet::new(),
                waiters: BTreeSet::new(),
                touched_ns: now,
                recovery: None,
            };
            self.anchor.records.insert(txn.id, rec);
            self.write_record(ctx, txn.id);
            return ctx.send(
                from,
                Msg::Staged {
                    txn: txn.id,
                    ts,
                    ok: true,
                },
            );
        }
        let rec = self.anchor.records.get_mut(&txn.id).expect("present");
        let reply = match &rec.status {
            Status::Aborted => Msg::Staged {
                txn: txn.id,
                ts,
                ok: false,
            },
            Status::Committed { ts: at } => Msg::Staged {
                txn: txn.id,
                ts: *at,
                ok: true,
            },
            Status::Staging { ts: at, .. } if *at >= ts => {
                // A duplicate, or a late copy of an earlier staging: never move back.
                Msg::Staged {
                    txn: txn.id,
                    ts: *at,
                    ok: true,
                }
            }
            Status::Staging { .. } => {
                // Re-staged higher after a write was pushed; a recovery at the old
                // timestamp is moot.
                rec.status = Status::Staging { ts, writes };
                rec.touched_ns = now;
                rec.recovery = None;
                self.write_record(ctx, txn.id);
                Msg::Staged {
                    txn: txn.id,
                    ts,
                    ok: true,
                }
            }
        };
        ctx.send(from, reply);
    }

    fn on_commit(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef, ts: HlcTs) {
        let Some(rec) = self.anchor.records.get(&txn) else {
            ctx.count("mvto_hlc.commit_without_record", 1);
            return;
        };
        match &rec.status {
            Status::Staging { ts: at, writes } => {
                if *at != ts {
                    ctx.count("mvto_hlc.commit_ts_mismatch", 1);
                    return;
                }
                let shards = shards_of(writes);
                let meta = rec.txn;
                self.decide(ctx, meta, true, ts, shards, None);
            }
            Status::Committed { .. } => {}
            Status::Aborted => ctx.count("mvto_hlc.commit_after_abort", 1),
        }
    }

    fn on_abort(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        from: NodeId,
        txn: TxnMeta,
        participants: Vec<ShardId>,
    ) {
        let participants: BTreeSet<ShardId> = participants.into_iter().collect();
        let Some(rec) = self.anchor.records.get_mut(&txn.id) else {
            return self.decide(ctx, txn, false, HlcTs::default(), participants, Some(from));
        };
        match rec.status.clone() {
            Status::Staging { .. } => {
                // Possibly implicitly committed: only recovery can tell.
                rec.waiters.insert(from);
                self.start_recovery(ctx, txn.id);
            }
            Status::Committed { ts } => {
                ctx.send(
                    from,
                    Msg::Decided {
                        txn: txn.id,
                        committed: true,
                        ts,
                    },
                );
            }
            Status::Aborted => {
                let fresh: Vec<ShardId> = participants.difference(&rec.unacked).copied().collect();
                rec.unacked.extend(fresh.iter().copied());
                self.resolve_participants(ctx, txn.id);
                let ts = HlcTs::default();
                ctx.send(
                    from,
                    Msg::Decided {
                        txn: txn.id,
                        committed: false,
                        ts,
                    },
                );
            }
        }
    }

    fn on_push(&mut self, ctx: &mut Ctx<'_, MvtoNode>, from: NodeId, txn: TxnMeta, abort: bool) {
        let answer = |ctx: &mut Ctx<'_, MvtoNode>, me: &mut Primary, committed, ts| {
            let msg = Msg::Resolve {
                txn: txn.id,
                committed,
                ts,
                ack: false,
            };
            if from == me.id {
                let id = me.id;
                me.on_resolve(ctx, id, txn.id, committed, ts, false);
            } else {
                ctx.send(from, msg);
            }
        };
        let Some(rec) = self.anchor.records.get(&txn.id) else {
            if abort || self.too_old(ctx, &txn) {
                ctx.count("mvto_hlc.pending_aborted_by_push", 1);
                if abort {
                    // Wound-wait broke a wait on a younger holder (K2 Fig. 17d's count).
                    ctx.count("deadlock_aborts", 1);
                }
                self.decide(ctx, txn, false, HlcTs::default(), BTreeSet::new(), None);
                answer(ctx, self, false, HlcTs::default());
            }
            return;
        };
        let (status, touched_ns, idle) =
            (rec.status.clone(), rec.touched_ns, rec.recovery.is_none());
        match status {
            Status::Committed { ts } => answer(ctx, self, true, ts),
            Status::Aborted => answer(ctx, self, false, HlcTs::default()),
            Status::Staging { .. } => {
                let age = ctx.now_ns().saturating_sub(touched_ns);
                if age >= self.opts.recovery_after_ns && idle {
                    self.start_recovery(ctx, txn.id);
                }
            }
        }
    }

    /// Records the decision, resolves `participants` and answers whoever waits.
    fn decide(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        txn: TxnMeta,
        committed: bool,
        ts: HlcTs,
        participants: BTreeSet<ShardId>,
        coordinator: Option<NodeId>,
    ) {
        let status = if committed {
            Status::Committed { ts }
        } else {
            Status::Aborted
        };
        let rec = self.anchor.records.entry(txn.id).or_insert_with(|| Rec {
            txn,
            status: status.clone(),
            unacked: BTreeSet::new(),
            waiters: BTreeSet::new(),
            touched_ns: 0,
            recovery: None,
        });
        rec.status = status;
        rec.unacked.extend(participants);
        rec.recovery = None;
        rec.waiters.extend(coordinator);
        let waiters = std::mem::take(&mut rec.waiters);
        self.write_record(ctx, txn.id);
        for w in waiters {
            ctx.send(
                w,
                Msg::Decided {
                    txn: txn.id,
                    committed,
                    ts,
                },
            );
        }
        self.resolve_participants(ctx, txn.id);
    }

    fn resolve_participants(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef) {
        let Some(rec) = self.anchor.records.get_mut(&txn) else {
            return;
        };
        rec.touched_ns = ctx.now_ns();
        let (committed, ts) = match rec.status {
            Status::Committed { ts } => (true, ts),
            Status::Aborted => (false, HlcTs::default()),
            Status::Staging { .. } => return,
        };
        let shards: Vec<ShardId> = rec.unacked.iter().copied().collect();
        for shard in shards {
            let to = self.cluster.initial_leader(shard);
            if to == self.id {
                let me = self.id;
                self.on_resolve(ctx, me, txn, committed, ts, true);
            } else {
                ctx.send(
                    to,
                    Msg::Resolve {
                        txn,
                        committed,
                        ts,
                        ack: true,
                    },
                );
            }
        }
    }

    pub(super) fn on_resolved(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef, shard: ShardId) {
        let Some(rec) = self.anchor.records.get_mut(&txn) else {
            return;
        };
        if rec.unacked.remove(&shard) {
            self.persist(ctx, super::wire::Record::Acked { txn, shard });
        }
    }

    fn start_recovery(&mut self, ctx: &mut Ctx<'_, MvtoNode>, txn: TxnRef) {
        let Some(rec) = self.anchor.records.get_mut(&txn) else {
            return;
        };
        let Status::Staging { ts, writes } = &rec.status else {
            return;
        };
        ctx.count("mvto_hlc.recoveries", 1);
        let (ts, writes) = (*ts, writes.clone());
        rec.recovery = Some(Recovery {
            ts,
            awaiting: shards_of(&writes),
            all_found: true,
            sent_ns: ctx.now_ns(),
        });
        self.send_queries(ctx, txn, ts, &writes, &shards_of(&writes));
    }

    fn send_queries(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        txn: TxnRef,
        ts: HlcTs,
        writes: &[StagedWrite],
        shards: &BTreeSet<ShardId>,
    ) {
        for shard in shards {
            let keys = writes
                .iter()
                .filter(|w| w.shard == *shard)
                .map(|w| (w.key.clone(), w.step))
                .collect();
            let to = self.cluster.initial_leader(*shard);
            let msg = Msg::QueryIntents {
                txn,
                ts,
                writes: keys,
            };
            if to == self.id {
                let me = self.id;
                self.on_message(ctx, me, msg);
            } else {
                ctx.send(to, msg);
            }
        }
    }

    fn on_intents_queried(
        &mut self,
        ctx: &mut Ctx<'_, MvtoNode>,
        txn: TxnRef,
        ts: HlcTs,
        shard: ShardId,
        found: bool,
    ) {
        let Some(rec) = self.anchor.records.get_mut(&txn) else {
            return;
        };
        let staged_at = match &rec.status {
            Status::Staging { ts, .. } => *ts,
            _ => return,
        };
        let Some(r) = rec
            .recovery
            .as_mut()
            .filter(|r| r.ts == ts && staged_at == ts)
        else {
            return;
        };
        if !r.awaiting.remove(&shard) {
            return;
        }
        r.all_found &= found;
        if !r.awaiting.is_empty() {
            return;
        }
        let committed = r.all_found;
        let Status::Staging { writes, .. } = &rec.status else {
            unreachable!("checked")
        };
        let shards = shards_of(writes);
        let meta = rec.txn;
        ctx.count(
            if committed {
                "mvto_hlc.recovered_committed"
            } else {
                "mvto_hlc.recovered_aborted"
            },
            1,
        );
        self.decide(ctx, meta, committed, ts, shards, None);
    }

    /// Recovers records left STAGING, re-sends what is unacknowledged, forgets records
    /// nobody can ask about any more.
    pub(super) fn anchor_tick(&mut self, ctx: &mut Ctx<'_, MvtoNode>) {
        let now = ctx.now_ns();
        let (retry, after) = (self.opts.retry_ns, self.opts.recovery_after_ns);
        let mut recover = Vec::new();
        let mut requery = Vec::new();
        let mut resolve = Vec::new();
        for (txn, rec) in self.anchor.records.iter_mut() {
            match (&rec.status, &mut rec.recovery) {
                (Status::Staging { .. }, None) if now.saturating_sub(rec.touched_ns) >= after => {
                    recover.push(*txn)
                }
                (Status::Staging { ts, writes }, Some(r))
                    if now.saturating_sub(r.sent_ns) >= retry =>
                {
                    r.sent_ns = now;
                    requery.push((*txn, *ts, writes.clone(), r.awaiting.clone()));
                }
                (Status::Committed { .. } | Status::Aborted, _)
                    if !rec.unacked.is_empty() && now.saturating_sub(rec.touched_ns) >= retry =>
                {
                    resolve.push(*txn)
                }
                _ => {}
            }
        }
        for txn in recover {
            self.start_recovery(ctx, txn);
        }
        for (txn, ts, writes, shards) in requery {
            self.send_queries(ctx, txn, ts, &writes, &shards);
        }
        for txn in resolve {
            self.resolve_participants(ctx, txn);
        }
        let forget_after = 2 * self.opts.max_txn_age_ns();
        self.anchor.records.retain(|_, rec| {
            matches!(rec.status, Status::Staging { .. })
                || !rec.unacked.is_empty()
                || now.saturating_sub(rec.txn.orig.wall_ns) <= forget_after
        });
    }
}
