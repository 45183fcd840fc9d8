//! Two-phase commit's coordinator side with recovery (Gray & Lamport's presumed-abort 2PC
//! as 2PL and Clock-SI run it): the decision log, COMMIT resent until every participant
//! acknowledges, the answer to a participant's inquiry, and the rebuild after a restart
//! under a new incarnation (ids are `TxnId::new(coordinator, incarnation, counter)`, so a
//! restarted coordinator never reuses an id it may have handed out before).
//!
//! Sans-IO: [`Decisions`] holds state and says what to do; the protocol sends its own
//! COMMIT messages (2PL's carry nothing more, Clock-SI's the commit timestamp, its
//! decision `D`), arms its own timers and writes its own records.

use meridian_core::{NodeId, TimerId, TxnId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// How COMMIT is resent: every `retry_ns` for `max_retries` times, then every `slow_ns`
/// (a participant that never answers costs one message per `slow_ns`, not a storm; the
/// decision must be kept until it acknowledges anyway, since it may still ask).
#[derive(Clone, Copy, Debug)]
pub struct Resend {
    pub retry_ns: u64,
    pub max_retries: u32,
    pub slow_ns: u64,
}

/// A logged commit decision not yet acknowledged by every participant.
#[derive(Debug)]
struct Pending<D> {
    decision: D,
    /// In the order the protocol gave them (COMMIT goes out in this order).
    waiting: Vec<NodeId>,
    retries: u32,
    timer: Option<TimerId>,
}

/// What a coordinator answers a participant that asks about a prepared transaction.
#[derive(Debug, PartialEq, Eq)]
pub enum Inquiry<'a, D> {
    /// Committed: resend COMMIT with this decision.
    Commit(&'a D),
    /// Still undecided here: say nothing, the participant asks again.
    Undecided,
    /// No commit decision and not undecided: presumed abort (this also covers every
    /// transaction of an earlier incarnation that was lost in a crash).
    PresumedAbort,
}

/// A pending decision as a checkpoint holds it: the transaction, its decision, and the
/// participants that have not acknowledged.
pub type PendingDecision<D> = (TxnId, D, Vec<NodeId>);

/// What a coordinator's log says about its commit decisions, in order.
#[derive(Debug)]
pub enum Logged<D> {
    /// An incarnation started (logged before any of its ids is used).
    Started(u32),
    /// A commit decision (the commit point) and its participants.
    Decided(TxnId, D, Vec<NodeId>),
    /// Every participant acknowledged (Clock-SI logs it; 2PL relies on checkpoints).
    Acked(TxnId),
}

/// The commit decisions a coordinator must still deliver.
#[derive(Debug)]
pub struct Decisions<D> {
    pending: FxHashMap<TxnId, Pending<D>>,
}

impl<D> Default for Decisions<D> {
    fn default() -> Self {
        Decisions {
            pending: FxHashMap::default(),
        }
    }
}

impl<D: Clone> Decisions<D> {
    /// Rebuilds the decisions from a checkpoint's `(incarnation, pending)` and the records
    /// after it; returns them with the incarnation to run as (one past the last logged).
    pub fn recover(
        checkpoint: Option<(u32, Vec<PendingDecision<D>>)>,
        tail: impl IntoIterator<Item = Logged<D>>,
    ) -> (Decisions<D>, u32) {
        let mut last_incarnation = None;
        let mut pending: BTreeMap<TxnId, (D, Vec<NodeId>)> = BTreeMap::new();
        if let Some((incarnation, p)) = checkpoint {
            last_incarnation = Some(incarnation);
            pending.extend(p.into_iter().map(|(txn, d, nodes)| (txn, (d, nodes))));
        }
        for logged in tail {
            match logged {
                Logged::Started(incarnation) => last_incarnation = Some(incarnation),
                Logged::Decided(txn, d, participants) => {
                    pending.insert(txn, (d, participants));
                }
                Logged::Acked(txn) => {
                    pending.remove(&txn);
                }
            }
        }
        let mut decisions = Decisions::default();
        for (txn, (d, participants)) in pending {
            decisions.decide(txn, d, participants);
        }
        (decisions, last_incarnation.map_or(0, |i| i + 1))
    }

    /// The decisions still pending, by id (what a checkpoint records).
    pub fn checkpoint(&self) -> Vec<PendingDecision<D>> {
        let mut pending: Vec<_> = self
            .pending
            .iter()
            .map(|(txn, p)| (*txn, p.decision.clone(), p.waiting.clone()))
            .collect();
        pending.sort_unstable_by_key(|(txn, _, _)| *txn);
        pending
    }
}

impl<D> Decisions<D> {
    /// Records a logged commit decision: COMMIT is owed to every participant.
    pub fn decide(&mut self, txn: TxnId, decision: D, participants: Vec<NodeId>) {
        let pending = Pending {
            decision,
            waiting: participants,
            retries: 0,
            timer: None,
        };
        self.pending.insert(txn, pending);
    }

    /// The pending decisions' ids, in order (a restarted coordinator resends them all).
    pub fn txns(&self) -> Vec<TxnId> {
        let mut txns: Vec<TxnId> = self.pending.keys().copied().collect();
        txns.sort_unstable();
        txns
    }

    pub fn decision(&self, txn: TxnId) -> Option<&D> {
        self.pending.get(&txn).map(|p| &p.decision)
    }

    /// The participants that have not acknowledged `txn` (none if it is not pending).
    pub fn waiting(&self, txn: TxnId) -> &[NodeId] {
        self.pending.get(&txn).map_or(&[], |p| &p.waiting)
    }

    /// How long until the next resend of `txn`'s COMMIT.
    pub fn resend_after(&self, txn: TxnId, resend: Resend) -> u64 {
        match self.pending.get(&txn) {
            Some(p) if p.retries >= resend.max_retries => resend.slow_ns,
            _ => resend.retry_ns,
        }
    }

    /// Notes the timer that will resend `txn`'s COMMIT.
    pub fn armed(&mut self, txn: TxnId, timer: TimerId) {
        if let Some(p) = self.pending.get_mut(&txn) {
            p.timer = Some(timer);
        }
    }

    /// Takes `txn`'s resend timer, for a protocol that resends at once (Clock-SI, when a
    /// participant's new leader becomes known) and re-arms.
    pub fn disarm(&mut self, txn: TxnId) -> Option<TimerId> {
        self.pending.get_mut(&txn).and_then(|p| p.timer.take())
    }

    /// The resend timer fired: counts a retry; false if `txn` is no longer pending.
    pub fn retry(&mut self, txn: TxnId) -> bool {
        let Some(p) = self.pending.get_mut(&txn) else {
            return false;
        };
        p.retries = p.retries.saturating_add(1);
        true
    }

    /// `from` acknowledged `txn`'s COMMIT. Once every participant has, the decision is
    /// forgotten and its resend timer returned for cancelling: `Some(timer)`.
    pub fn acknowledge(&mut self, txn: TxnId, from: NodeId) -> Option<Option<TimerId>> {
        let p = self.pending.get_mut(&txn)?;
        p.waiting.retain(|n| *n != from);
        if !p.waiting.is_empty() {
            return None;
        }
        self.pending.remove(&txn).map(|p| p.timer)
    }

    /// The answer to a participant asking about `txn`, given whether the coordinator is
    /// still deciding it.
    pub fn inquiry(&self, txn: TxnId, undecided: bool) -> Inquiry<'_, D> {
        match self.pending.get(&txn) {
            Some(p) => Inquiry::Commit(&p.decision),
            None if undecided => Inquiry::Undecided,
            None => Inquiry::PresumedAbort,
        }
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(counter: u64) -> TxnId {
        TxnId::new(NodeId(9), 0, counter)
    }

    const RESEND: Resend = Resend {
        retry_ns: 10,
        max_retries: 2,
        slow_ns: 100,
    };

    #[test]
    fn a_decision_is_kept_until_every_participant_acknowledges() {
        let mut d = Decisions::default();
        d.decide(id(1), 'c', vec![NodeId(0), NodeId(2)]);
        d.armed(id(1), TimerId(7));
        assert_eq!(d.acknowledge(id(1), NodeId(2)), None);
        assert_eq!(d.waiting(id(1)), &[NodeId(0)]);
        assert_eq!(d.inquiry(id(1), false), Inquiry::Commit(&'c'));
        assert_eq!(d.acknowledge(id(1), NodeId(0)), Some(Some(TimerId(7))));
        assert!(d.is_empty());
        // Duplicate acknowledgements are harmless.
        assert_eq!(d.acknowledge(id(1), NodeId(0)), None);
    }

    #[test]
    fn resends_back_off_after_max_retries() {
        let mut d = Decisions::default();
        d.decide(id(1), (), vec![NodeId(0)]);
        let mut intervals = Vec::new();
        for _ in 0..4 {
            intervals.push(d.resend_after(id(1), RESEND));
            assert!(d.retry(id(1)));
        }
        assert_eq!(intervals, vec![10, 10, 100, 100]);
        assert!(!d.retry(id(2)));
    }

    #[test]
    fn presumed_abort_without_a_decision_and_silence_while_undecided() {
        let d: Decisions<()> = Decisions::default();
        assert_eq!(d.inquiry(id(3), true), Inquiry::Undecided);
        assert_eq!(d.inquiry(id(3), false), Inquiry::PresumedAbort);
    }

    #[test]
    fn recovery_keeps_unacknowledged_decisions_and_moves_to_a_new_incarnation() {
        let checkpoint = Some((2, vec![(id(1), 'a', vec![NodeId(0)])]));
        let tail = vec![
            Logged::Started(3),
            Logged::Decided(id(5), 'b', vec![NodeId(1), NodeId(0)]),
            Logged::Decided(id(6), 'c', vec![NodeId(1)]),
            Logged::Acked(id(6)),
        ];
        let (d, incarnation) = Decisions::recover(checkpoint, tail);
        assert_eq!(incarnation, 4);
        assert_eq!(d.txns(), vec![id(1), id(5)]);
        assert_eq!(d.waiting(id(5)), &[NodeId(1), NodeId(0)]);
        assert_eq!(
            d.checkpoint(),
            vec![
                (id(1), 'a', vec![NodeId(0)]),
                (id(5), 'b', vec![NodeId(1), NodeId(0)])
            ]
        );
        let (_, first) = Decisions::<()>::recover(None, Vec::new());
        assert_eq!(first, 0);
    }
}
