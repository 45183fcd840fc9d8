//! Transaction recorders (§5.2, §5.3): the one place a transaction's status is decided and
//! persisted. A recorder lives on the primary that received the transaction's first write
//! (the coordinator names it in every piece), so coordinators stay stateless.
//!
//! * `Commit` / `Abort` from the coordinator decide, unless already decided (the first
//!   decision wins; a commit of a transaction older than `max_txn_age` is refused, so a
//!   forgotten abort can never turn into a commit).
//! * `Push` (PUSHWS) from a primary that met an undetermined intent is held until the
//!   status is determined; a transaction nobody decides within `max_txn_age` of its
//!   timestamp is aborted (its coordinator is presumed failed, §5.3).
//! * After a decision the recorder finalizes the participants asynchronously and keeps a
//!   committed decision until every participant acknowledged; an aborted one is kept
//!   `2·max_txn_age` more (a push for a forgotten transaction re-derives the abort).
//!
//! Decisions are persisted before anyone hears them (persist-then-send in one handler).

use super::wire::{DecisionRecord, Msg, Record, Timer, TxnTs};
use super::K2Node;
use meridian_core::node::Ctx;
use meridian_core::{Cluster, NodeId, ShardId};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
enum Entry {
    Open {
        pushers: BTreeSet<NodeId>,
    },
    Decided {
        committed: bool,
        /// The commit epoch (§6.3).
        epoch: u64,
        unacked: BTreeSet<ShardId>,
        /// Told once every participant finalized (`async_finalize=false`).
        waiting_coordinator: Option<NodeId>,
    },
}

/// A recorder's table.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    entries: BTreeMap<TxnTs, Entry>,
}

/// What the recorder needs from its host.
pub struct Env<'a> {
    pub cluster: &'a Cluster,
    pub max_txn_age_ns: u64,
    pub async_finalize: bool,
}

impl Recorder {
    /// Rebuilds the decided entries from durable records.
    pub fn restore(decisions: &[DecisionRecord]) -> Recorder {
        let mut recorder = Recorder::default();
        decisions.iter().for_each(|d| recorder.apply_decided(d));
        recorder
    }

    /// Replays a decision record.
    pub fn apply_decided(&mut self, d: &DecisionRecord) {
        self.entries.insert(
            d.txn,
            Entry::Decided {
                committed: d.committed,
                epoch: d.epoch,
                unacked: d.unacked.iter().copied().collect(),
                waiting_coordinator: None,
            },
        );
    }

    /// Replays an acknowledgement: a committed decision every participant finalized is
    /// dropped, as it was before the crash.
    pub fn apply_ack(&mut self, txn: TxnTs, shard: ShardId) {
        if let Some(Entry::Decided {
            unacked, committed, ..
        }) = self.entries.get_mut(&txn)
        {
            unacked.remove(&shard);
            if *committed && unacked.is_empty() {
                self.entries.remove(&txn);
            }
        }
    }

    /// The decisions a checkpoint keeps.
    pub fn decisions(&self) -> Vec<DecisionRecord> {
        self.entries
            .iter()
            .filter_map(|(txn, e)| match e {
                Entry::Decided {
                    committed,
                    epoch,
                    unacked,
                    ..
                } => Some(DecisionRecord {
                    txn: *txn,
                    committed: *committed,
                    epoch: *epoch,
                    unacked: unacked.iter().copied().collect(),
                }),
                Entry::Open { .. } => None,
            })
            .collect()
    }

    /// The transaction's first write reached this recorder: open its record.
    pub fn open(&mut self, ctx: &mut Ctx<'_, K2Node>, env: &Env<'_>, txn: TxnTs) {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.entries.entry(txn) {
            slot.insert(Entry::Open {
                pushers: BTreeSet::new(),
            });
            arm_deadline(ctx, env, txn);
        }
    }

    /// The deadline of an open record passed (`Timer::RecorderDeadline`).
    pub fn on_deadline(&mut self, ctx: &mut Ctx<'_, K2Node>, env: &Env<'_>, txn: TxnTs) {
        if !matches!(self.entries.get(&txn), Some(Entry::Open { .. })) {
            return;
        }
        if ctx.now_ns().saturating_sub(txn.time_ns) <= env.max_txn_age_ns {
            return arm_deadline(ctx, env, txn);
        }
        ctx.count("k2.recorder_timeouts", 1);
        self.decide(ctx, env, txn, false, Vec::new(), 0);
    }

    /// The decision (committed?, commit epoch), if made.
    pub fn decision(&self, txn: TxnTs) -> Option<(bool, u64)> {
        match self.entries.get(&txn) {
            Some(Entry::Decided {
                committed, epoch, ..
            }) => Some((*committed, *epoch)),
            _ => None,
        }
    }

    /// Coordinator's Commit or Abort; `proposed` is the largest epoch the participants
    /// proposed (§6.3).
    #[allow(clippy::too_many_arguments)]
    pub fn on_end(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        env: &Env<'_>,
        coordinator: NodeId,
        txn: TxnTs,
        commit: bool,
        participants: Vec<ShardId>,
        proposed: u64,
    ) {
        if let Some(Entry::Decided {
            committed,
            unacked,
            waiting_coordinator,
            ..
        }) = self.entries.get_mut(&txn)
        {
            let committed = *committed;
            ctx.send(coordinator, Msg::Decision { txn, committed });
            if committed && !env.async_finalize {
                *waiting_coordinator = Some(coordinator);
                if unacked.is_empty() {
                    ctx.send(coordinator, Msg::AllFinalized { txn });
                }
            }
            return;
        }
        let too_old = txn.time_ns.saturating_add(env.max_txn_age_ns) < ctx.now_ns();
        if commit && too_old {
            ctx.count("k2.recorder_refused_old", 1);
        }
        let committed = commit && !too_old;
        // Fig. 10 lines 18-19: the commit epoch is the largest proposed. The coordinator
        // validated exactly this epoch (module doc, "epoch order"), so the recorder does
        // not raise it with a proposal of its own.
        let epoch = if committed { proposed } else { 0 };
        self.decide(ctx, env, txn, committed, participants, epoch);
        ctx.send(coordinator, Msg::Decision { txn, committed });
        if committed && !env.async_finalize {
            if let Some(Entry::Decided {
                waiting_coordinator,
                ..
            }) = self.entries.get_mut(&txn)
            {
                *waiting_coordinator = Some(coordinator);
            }
        }
    }

    /// PUSHWS from a primary.
    pub fn on_push(&mut self, ctx: &mut Ctx<'_, K2Node>, env: &Env<'_>, from: NodeId, txn: TxnTs) {
        self.open(ctx, env, txn);
        match self.entries.get_mut(&txn).expect("opened") {
            Entry::Open { pushers } => {
                pushers.insert(from);
            }
            Entry::Decided {
                committed, epoch, ..
            } => {
                let (committed, epoch) = (*committed, *epoch);
                ctx.send(
                    from,
                    Msg::Resolve {
                        txn,
                        committed,
                        ack: false,
                        epoch,
                    },
                );
            }
        }
    }

    /// A participant finalized.
    pub fn on_finalized(&mut self, ctx: &mut Ctx<'_, K2Node>, txn: TxnTs, shard: ShardId) {
        let Some(Entry::Decided {
            unacked,
            committed,
            waiting_coordinator,
            ..
        }) = self.entries.get_mut(&txn)
        else {
            return;
        };
        if !unacked.remove(&shard) {
            return;
        }
        ctx.persist(Record::Acked { txn, shard });
        if unacked.is_empty() {
            if let Some(coordinator) = waiting_coordinator.take() {
                ctx.send(coordinator, Msg::AllFinalized { txn });
            }
            if *committed {
                self.entries.remove(&txn);
            }
        }
    }

    fn decide(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        env: &Env<'_>,
        txn: TxnTs,
        committed: bool,
        participants: Vec<ShardId>,
        epoch: u64,
    ) {
        let unacked: BTreeSet<ShardId> = participants.into_iter().collect();
        ctx.persist(Record::Decided(DecisionRecord {
            txn,
            committed,
            epoch,
            unacked: unacked.iter().copied().collect(),
        }));
        ctx.count(
            if committed {
                "k2.decided_commit"
            } else {
                "k2.decided_abort"
            },
            1,
        );
        let previous = self.entries.insert(
            txn,
            Entry::Decided {
                committed,
                epoch,
                unacked: unacked.clone(),
                waiting_coordinator: None,
            },
        );
        if let Some(Entry::Open { pushers }) = previous {
            for pusher in pushers {
                ctx.send(
                    pusher,
                    Msg::Resolve {
                        txn,
                        committed,
                        ack: false,
                        epoch,
                    },
                );
            }
        }
        for shard in unacked {
            let ack = true;
            ctx.send(
                env.cluster.initial_leader(shard),
                Msg::Resolve {
                    txn,
                    committed,
                    ack,
                    epoch,
                },
            );
        }
    }

    /// Periodic work: abort transactions nobody decided in time, re-send finalizations,
    /// forget old aborts.
    pub fn tick(&mut self, ctx: &mut Ctx<'_, K2Node>, env: &Env<'_>) {
        let now = ctx.now_ns();
        let age = |txn: &TxnTs| now.saturating_sub(txn.time_ns);
        let stale: Vec<TxnTs> = self
            .entries
            .iter()
            .filter(|(t, e)| matches!(e, Entry::Open { .. }) && age(t) > env.max_txn_age_ns)
            .map(|(t, _)| *t)
            .collect();
        for txn in stale {
            ctx.count("k2.recorder_timeouts", 1);
            self.decide(ctx, env, txn, false, Vec::new(), 0);
        }
        self.entries.retain(|t, e| match e {
            Entry::Decided {
                committed: false,
                unacked,
                ..
            } => !unacked.is_empty() || age(t) <= 2 * env.max_txn_age_ns,
            _ => true,
        });
        for (txn, entry) in &self.entries {
            if let Entry::Decided {
                committed,
                epoch,
                unacked,
                ..
            } = entry
            {
                for shard in unacked {
                    let msg = Msg::Resolve {
                        txn: *txn,
                        committed: *committed,
                        ack: true,
                        epoch: *epoch,
                    };
                    ctx.send(env.cluster.initial_leader(*shard), msg);
                }
            }
        }
    }
}

/// Wakes the recorder when `txn` reaches `max_txn_age` (by its timestamp, on this clock).
fn arm_deadline(ctx: &mut Ctx<'_, K2Node>, env: &Env<'_>, txn: TxnTs) {
    let deadline = txn.time_ns.saturating_add(env.max_txn_age_ns);
    let after_ns = deadline.saturating_sub(ctx.now_ns()).max(1_000_000);
    ctx.set_timer(after_ns, Timer::RecorderDeadline { txn });
}
