//! Durable servers (`durability=durable`, the default; see the module doc of
//! [`crate::tiga`], "Durability"): what a server writes to its log so that, after a crash of
//! every replica at once, it can still send the view-change report (Algorithm 5) its
//! messages vouched for, and how it rebuilds that report at restart.
//!
//! The durable state is a server's *log list* — the report's checkpoint, synced list and
//! other entries — and its view. A [`Record::ServerSnapshot`] holds all of it and replaces
//! every earlier record; [`Record::Held`] and [`Record::Synced`] add to it. Each is written
//! in the handler that changes the state, so (the driver syncs records before a message
//! leaves) a fast reply, sealed notification, log sync, slow reply or sync-point report
//! never leaves ahead of the state it vouches for: a restarted server reports at least
//! what it said, exactly as a server that was partitioned since would.

use super::{Server, State};
use crate::tiga::view::{Status, View};
use crate::tiga::wire::{Checkpoint, Record, TxnBody, ViewChangeReport};
use crate::tiga::TigaNode;
use meridian_core::node::Ctx;
use meridian_core::{Timestamp, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};

/// A durable server's log list and view as its records left them.
#[derive(Clone, Debug)]
pub(crate) struct Recovered {
    pub(crate) view: View,
    pub(crate) last_normal_view: u64,
    checkpoint: Checkpoint,
    synced: Vec<TxnBody>,
    others: FxHashMap<TxnId, TxnBody>,
}

impl Recovered {
    /// Folds a durable server's records (oldest first) into its log list; `initial` is
    /// the view before any snapshot.
    pub(crate) fn from_records(records: &[Record], initial: View) -> Recovered {
        let mut state = Recovered {
            view: initial,
            last_normal_view: 0,
            checkpoint: Checkpoint::empty(),
            synced: Vec::new(),
            others: FxHashMap::default(),
        };
        for record in records {
            match record {
                Record::ServerSnapshot { view, report } => {
                    state.view = view.clone();
                    state.last_normal_view = report.last_normal_view;
                    state.checkpoint = report.checkpoint.clone();
                    state.synced = report.synced.clone();
                    state.others = report.others.iter().map(|b| (b.id, b.clone())).collect();
                }
                Record::Held(body) => {
                    state.others.insert(body.id, (**body).clone());
                }
                Record::Synced { pos, body } => {
                    if *pos == state.synced_end() {
                        state.others.remove(&body.id);
                        state.synced.push((**body).clone());
                    }
                }
                &Record::SyncedHeld {
                    pos,
                    id,
                    ts,
                    aborted,
                } => {
                    // Its `Held` record came after the snapshot, so `others` has the body
                    // unless a torn log lost it — then so is this record's.
                    if pos == state.synced_end() {
                        if let Some(mut body) = state.others.remove(&id) {
                            body.ts = ts;
                            body.aborted = aborted;
                            body.decided = true;
                            state.synced.push(body);
                        }
                    }
                }
                Record::ServerStarted | Record::CoordinatorStarted | Record::Raft(_) => {}
            }
        }
        state
    }

    /// The position after the synced list. Positions follow each other within one
    /// snapshot's list; one below the list's end was written again (a resend), one beyond
    /// it cannot be.
    fn synced_end(&self) -> u64 {
        self.checkpoint.pos + self.synced.len() as u64
    }

    /// The report this log list makes in view `g_view` (Algorithm 5 `send-view-change`).
    pub(crate) fn report(&self, server: &Server, g_view: u64) -> ViewChangeReport {
        let in_synced: FxHashSet<TxnId> = self.synced.iter().map(|b| b.id).collect();
        let mut others: Vec<TxnBody> = self
            .others
            .values()
            .filter(|b| !in_synced.contains(&b.id))
            .cloned()
            .collect();
        others.sort_unstable_by_key(|b| (b.ts, b.id));
        ViewChangeReport {
            g_view,
            shard: server.shard,
            replica: server.replica,
            last_normal_view: self.last_normal_view,
            checkpoint: self.checkpoint.clone(),
            synced: self.synced.clone(),
            others,
        }
    }
}

/// Whether a server built from `records` restarted (any record: a boot marker or, once a
/// durable snapshot replaced it, its log).
pub(crate) fn restarted(records: &[Record]) -> bool {
    records
        .iter()
        .any(|r| !matches!(r, Record::CoordinatorStarted | Record::Raft(_)))
}

impl Server {
    /// Makes `id`'s current body and timestamp durable as held outside the synced list.
    pub(super) fn persist_held(&mut self, ctx: &mut Ctx<'_, TigaNode>, id: TxnId) {
        if !self.opts.durable {
            return;
        }
        let e = self.txns.get_mut(&id).expect("held entry");
        debug_assert!(matches!(
            e.state,
            State::Released | State::Sealed | State::Queued
        ));
        e.held_epoch = self.durable_epoch;
        ctx.persist(Record::Held(Box::new(e.body.clone())));
        self.durable_records_since_snapshot += 1;
    }

    /// Makes position `pos` of the synced list (`id` at `ts`, decided) durable: without
    /// the body when a `Held` record since the last snapshot carries it.
    pub(super) fn persist_synced(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        pos: u64,
        id: TxnId,
        ts: Timestamp,
    ) {
        if !self.opts.durable {
            return;
        }
        self.durable_records_since_snapshot += 1;
        let e = &self.txns[&id];
        debug_assert!(e.body.decided);
        if e.held_epoch == self.durable_epoch {
            ctx.persist(Record::SyncedHeld {
                pos,
                id,
                ts,
                aborted: e.body.aborted,
            });
            return;
        }
        ctx.persist(Record::Synced {
            pos,
            body: Box::new(self.body_at(id, ts)),
        });
    }

    /// Replaces the durable log with `report` (this server's log list) and the view.
    pub(super) fn persist_report(
        &mut self,
        ctx: &mut Ctx<'_, TigaNode>,
        report: &ViewChangeReport,
    ) {
        if !self.opts.durable {
            return;
        }
        // Records before the snapshot are gone: bodies held earlier must be written again.
        self.durable_epoch += 1;
        self.durable_records_since_snapshot = 0;
        self.durable_snapshot_entries = (report.checkpoint.store.versions.len()
            + report.synced.len()
            + report.others.len()) as u64;
        ctx.checkpoint(Record::ServerSnapshot {
            view: self.view.clone(),
            report: Box::new(report.clone()),
        });
    }

    /// Replaces the durable log with the current log list (NORMAL status).
    pub(super) fn persist_snapshot(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        if !self.opts.durable {
            return;
        }
        debug_assert_eq!(self.status, Status::Normal);
        let report = self.make_report(self.view.g_view);
        self.persist_report(ctx, &report);
        self.durable_snapshot_ns = ctx.now_ns();
    }

    /// At a cut: a new snapshot if the last one is `durable_checkpoint_ms` old *and* the
    /// records written since outnumber the entries it held, which bounds the durable log
    /// (the snapshot starts at the cut's checkpoint). A snapshot rewrites the whole
    /// store, so a fixed period alone would cost O(store) per period however little
    /// changed — at a million keys a shard, more than the records themselves; the count
    /// makes its cost at most one entry per record written (as Raft's rule of compacting
    /// once the log outgrows the snapshot), and the log at most the snapshot's size.
    pub(super) fn snapshot_at_cut(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let due = snapshot_due(
            ctx.now_ns(),
            self.durable_snapshot_ns + self.opts.durable_checkpoint_ns,
            self.durable_records_since_snapshot,
            self.durable_snapshot_entries,
        );
        if self.opts.durable && due {
            self.persist_snapshot(ctx);
        }
    }
}

/// Whether a new durable snapshot is due at `now_ns`: its period is over (`not_before_ns`)
/// and the records written since the last one number at least the entries it held.
fn snapshot_due(now_ns: u64, not_before_ns: u64, records_since: u64, entries: u64) -> bool {
    now_ns >= not_before_ns && records_since >= entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::{NodeId, ShardId, ShardList};
    use std::sync::Arc;

    fn body(seq: u64, time_ns: u64) -> TxnBody {
        TxnBody {
            id: TxnId {
                coordinator: NodeId(0),
                seq,
            },
            ts: Timestamp::new(time_ns, 0),
            shards: ShardList::from_slice(&[ShardId(0)]),
            pieces: Arc::new(Vec::new()),
            aborted: false,
            decided: false,
        }
    }

    fn view() -> View {
        View {
            g_view: 0,
            l_views: vec![0],
            preventive: false,
        }
    }

    fn synced_held(pos: u64, b: &TxnBody, time_ns: u64, aborted: bool) -> Record {
        Record::SyncedHeld {
            pos,
            id: b.id,
            ts: Timestamp::new(time_ns, 0),
            aborted,
        }
    }

    /// A `SyncedHeld` record moves the body its `Held` record wrote into the synced list,
    /// at the synced timestamp and decision: the same list a full `Synced` record makes.
    #[test]
    fn a_synced_held_record_takes_its_body_from_the_held_record() {
        let (a, b) = (body(1, 10), body(2, 20));
        let records = [
            Record::Held(Box::new(a.clone())),
            Record::Held(Box::new(b.clone())),
            synced_held(0, &a, 15, true),
        ];
        let compact = Recovered::from_records(&records, view());
        let mut decided = a.clone();
        decided.ts = Timestamp::new(15, 0);
        decided.aborted = true;
        decided.decided = true;
        let full = Recovered::from_records(
            &[
                Record::Held(Box::new(a)),
                Record::Held(Box::new(b.clone())),
                Record::Synced {
                    pos: 0,
                    body: Box::new(decided.clone()),
                },
            ],
            view(),
        );
        for state in [&compact, &full] {
            assert_eq!(state.synced.len(), 1);
            assert_eq!(state.synced[0].id, decided.id);
            assert_eq!(state.synced[0].ts, decided.ts);
            assert!(state.synced[0].aborted && state.synced[0].decided);
            assert_eq!(state.others.keys().collect::<Vec<_>>(), vec![&b.id]);
        }
    }

    /// Without its body (a `Held` record lost), a `SyncedHeld` record adds nothing and the
    /// list ends there: a later position does not follow on from it.
    #[test]
    fn a_synced_held_record_without_its_body_ends_the_list() {
        let (a, b) = (body(1, 10), body(2, 20));
        let records = [
            Record::Held(Box::new(b.clone())),
            synced_held(0, &a, 10, false),
            synced_held(1, &b, 20, false),
        ];
        let state = Recovered::from_records(&records, view());
        assert!(state.synced.is_empty());
        assert_eq!(state.others.len(), 1);
    }

    /// A snapshot waits for its period, and then for the log to outgrow it: a store of a
    /// million entries is not rewritten after a handful of records.
    #[test]
    fn a_snapshot_waits_for_its_period_and_for_the_log_to_outgrow_it() {
        assert!(!snapshot_due(1_999, 2_000, 10, 0), "period not over");
        assert!(
            snapshot_due(2_000, 2_000, 10, 0),
            "small store, period over"
        );
        assert!(
            !snapshot_due(9_000, 2_000, 10, 1_000_000),
            "log far smaller"
        );
        assert!(
            snapshot_due(9_000, 2_000, 1_000_000, 1_000_000),
            "log as large"
        );
    }
}
