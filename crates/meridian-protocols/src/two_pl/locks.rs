//! The lock table of one server: shared/exclusive locks per key, a FIFO queue of waiters per
//! key, and deadlock prevention by age, the table's [`Policy`]:
//!
//! * WAIT-DIE (`2pl-2pc`): a requester that conflicts waits only if it is *older* than every
//!   transaction it would wait for (conflicting holders, and conflicting waiters ahead of it
//!   in the queue); otherwise it dies. Every wait edge points from an older to a younger
//!   transaction, so the waits-for graph has no cycle and no deadlock can form.
//! * WOUND-WAIT (`2pl-raft`, as the Tiga authors ran 2PL, Tiga §5.1): a requester that
//!   conflicts always queues, and *wounds* every younger transaction it would wait for; the
//!   server aborts the wounded ones unless they are prepared (2PC forbids a participant to
//!   take back its yes vote; they finish soon, holding every lock they need). Every wait
//!   edge then points from a younger transaction to an older one, or to a prepared one,
//!   which waits for nothing: no cycle. An old transaction is never aborted by a young one.
//!
//! Fairness: a request that is compatible with the holders still queues behind earlier
//! waiters (no barging), so a stream of readers cannot starve a writer. The one exception is
//! an upgrade (shared → exclusive by a holder): it goes to the head of the queue, because
//! everyone queued is already waiting for the upgrader's shared lock anyway.

use super::wire::Age;
use meridian_core::{Key, TxnId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A lock mode. `Exclusive > Shared`, so `max` gives the stronger one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum LockMode {
    Shared,
    Exclusive,
}

impl LockMode {
    fn compatible(self, other: LockMode) -> bool {
        self == LockMode::Shared && other == LockMode::Shared
    }
}

/// How conflicts are kept from deadlocking (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    WaitDie,
    WoundWait,
}

/// The answer to a lock request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquire {
    Granted,
    /// Queued; [`LockTable::release`] reports the grant later. Under WOUND-WAIT, the
    /// younger transactions it waits for are in [`LockTable::take_wounded`].
    Waiting,
    /// WAIT-DIE says the requester is too young to wait: abort it.
    Die,
    /// The key's queue is at its cap (`max_waiters_per_key`): abort rather than grow.
    QueueFull,
}

#[derive(Clone, Debug)]
struct Holder {
    age: Age,
    mode: LockMode,
}

#[derive(Clone, Debug)]
struct Waiter {
    age: Age,
    mode: LockMode,
    /// The waiter already holds the key in shared mode and wants it exclusive.
    upgrade: bool,
}

#[derive(Clone, Debug, Default)]
struct KeyLock {
    holders: Vec<Holder>,
    waiters: VecDeque<Waiter>,
}

impl KeyLock {
    fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty()
    }

    /// Whether a holder other than `txn` blocks a request in `mode`.
    fn blocked_by_holders(&self, txn: TxnId, mode: LockMode) -> bool {
        self.holders
            .iter()
            .any(|h| h.age.txn != txn && !h.mode.compatible(mode))
    }

    fn acquire(
        &mut self,
        age: Age,
        mode: LockMode,
        max_waiters: usize,
        policy: Policy,
        wounded: &mut Vec<TxnId>,
    ) -> Acquire {
        let txn = age.txn;
        assert!(
            self.waiters.iter().all(|w| w.age.txn != txn),
            "{txn} requested a lock it is already queued for"
        );
        let held = self.holders.iter().position(|h| h.age.txn == txn);
        if held.is_some_and(|i| self.holders[i].mode >= mode) {
            return Acquire::Granted;
        }
        let upgrade = held.is_some();
        if !self.blocked_by_holders(txn, mode) && (upgrade || self.waiters.is_empty()) {
            match held {
                Some(i) => self.holders[i].mode = mode,
                None => self.holders.push(Holder { age, mode }),
            }
            self.check();
            return Acquire::Granted;
        }
        if policy == Policy::WaitDie && !self.older_than_blockers(age, mode, upgrade) {
            return Acquire::Die;
        }
        if self.waiters.len() >= max_waiters {
            return Acquire::QueueFull;
        }
        if policy == Policy::WoundWait {
            self.wound_younger_blockers(age, mode, upgrade, wounded);
        }
        let waiter = Waiter { age, mode, upgrade };
        if upgrade {
            // Two upgraders both hold the key shared; WAIT-DIE lets only the older one wait,
            // WOUND-WAIT has just wounded the younger one (a waiter is never prepared).
            assert!(
                !matches!(self.waiters.front(), Some(w) if w.upgrade && w.age < age),
                "two upgrade waiters on one key"
            );
            self.waiters.push_front(waiter);
        } else {
            self.waiters.push_back(waiter);
        }
        Acquire::Waiting
    }

    /// Whether the requester is older than everyone it would wait for: the conflicting
    /// holders and, unless it upgrades (an upgrade jumps the queue), the conflicting waiters.
    fn older_than_blockers(&self, age: Age, mode: LockMode, upgrade: bool) -> bool {
        let older_than_holders = self
            .holders
            .iter()
            .filter(|h| h.age.txn != age.txn && !h.mode.compatible(mode))
            .all(|h| age < h.age);
        let older_than_waiters = upgrade
            || self
                .waiters
                .iter()
                .filter(|w| !w.mode.compatible(mode))
                .all(|w| age < w.age);
        older_than_holders && older_than_waiters
    }

    /// WOUND-WAIT: adds to `wounded` every younger transaction the requester would wait for
    /// (conflicting holders; conflicting waiters, or, for an upgrade, the upgrade waiter it
    /// goes in front of).
    fn wound_younger_blockers(
        &self,
        age: Age,
        mode: LockMode,
        upgrade: bool,
        wounded: &mut Vec<TxnId>,
    ) {
        let holders = self
            .holders
            .iter()
            .filter(|h| h.age.txn != age.txn && !h.mode.compatible(mode))
            .map(|h| h.age);
        let waiters = self
            .waiters
            .iter()
            .filter(|w| {
                if upgrade {
                    w.upgrade
                } else {
                    !w.mode.compatible(mode)
                }
            })
            .map(|w| w.age);
        for blocker in holders.chain(waiters) {
            if age < blocker && !wounded.contains(&blocker.txn) {
                wounded.push(blocker.txn);
            }
        }
    }

    /// Grants queued requests in FIFO order while they fit; appends the new holders to
    /// `granted`.
    fn grant(&mut self, granted: &mut impl Extend<TxnId>) {
        while let Some(front) = self.waiters.front() {
            if self.blocked_by_holders(front.age.txn, front.mode) {
                break;
            }
            let w = self.waiters.pop_front().expect("front exists");
            if w.upgrade {
                let holder = self
                    .holders
                    .iter_mut()
                    .find(|h| h.age.txn == w.age.txn)
                    .expect("an upgrade waiter holds the key in shared mode");
                holder.mode = w.mode;
            } else {
                self.holders.push(Holder {
                    age: w.age,
                    mode: w.mode,
                });
            }
            granted.extend(Some(w.age.txn));
        }
        self.check();
    }

    /// Holders are compatible: any number of shared, or one exclusive.
    fn check(&self) {
        let exclusive = self.holders.iter().any(|h| h.mode == LockMode::Exclusive);
        assert!(
            !exclusive || self.holders.len() == 1,
            "lock held exclusively together with others: {:?}",
            self.holders
        );
    }
}

/// All locks of one server. Keys appear when first locked and vanish when idle.
#[derive(Clone, Debug)]
pub(crate) struct LockTable {
    keys: FxHashMap<Key, KeyLock>,
    max_waiters: usize,
    policy: Policy,
    /// WOUND-WAIT: transactions wounded by requests since the last `take_wounded`.
    wounded: Vec<TxnId>,
    /// Idle entries kept for reuse, so that locking a fresh key does not allocate.
    spare: Vec<KeyLock>,
}

/// At most this many idle entries are kept for reuse.
const SPARE_LOCKS: usize = 64;

impl LockTable {
    pub(crate) fn new(max_waiters: usize, policy: Policy) -> LockTable {
        LockTable {
            keys: FxHashMap::default(),
            max_waiters,
            policy,
            wounded: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Requests `key` in `mode` for the transaction `age.txn`.
    pub(crate) fn acquire(&mut self, key: &Key, age: Age, mode: LockMode) -> Acquire {
        let (max_waiters, policy) = (self.max_waiters, self.policy);
        let wounded = &mut self.wounded;
        if let Some(lock) = self.keys.get_mut(key) {
            let outcome = lock.acquire(age, mode, max_waiters, policy, wounded);
            if lock.is_idle() {
                let lock = self.keys.remove(key).expect("present");
                self.recycle(lock);
            }
            return outcome;
        }
        let mut lock = self.spare.pop().unwrap_or_default();
        let outcome = lock.acquire(age, mode, max_waiters, policy, wounded);
        if lock.is_idle() {
            self.recycle(lock);
        } else {
            self.keys.insert(key.clone(), lock);
        }
        outcome
    }

    /// WOUND-WAIT: the transactions wounded since the last call, to be aborted by the
    /// server unless they are prepared.
    pub(crate) fn take_wounded(&mut self) -> Vec<TxnId> {
        std::mem::take(&mut self.wounded)
    }

    fn recycle(&mut self, lock: KeyLock) {
        debug_assert!(lock.is_idle());
        if self.spare.len() < SPARE_LOCKS {
            self.spare.push(lock);
        }
    }

    /// Re-takes a lock a prepared transaction held before a crash. Prepared transactions held
    /// their locks together, so the request cannot conflict.
    pub(crate) fn restore(&mut self, key: &Key, age: Age, mode: LockMode) {
        let outcome = self.acquire(key, age, mode);
        assert_eq!(
            outcome,
            Acquire::Granted,
            "restored prepared transactions conflict on {key:?}"
        );
    }

    /// Drops `txn`'s hold on `key` and its place in the key's queue (either may be absent).
    /// Returns the transactions granted as a result.
    #[cfg(test)]
    pub(crate) fn release(&mut self, key: &Key, txn: TxnId) -> Vec<TxnId> {
        let mut granted = Vec::new();
        self.release_into(key, txn, &mut granted);
        granted
    }

    /// [`LockTable::release`], appending the transactions granted to `granted`.
    pub(crate) fn release_into(&mut self, key: &Key, txn: TxnId, granted: &mut impl Extend<TxnId>) {
        let Some(lock) = self.keys.get_mut(key) else {
            return;
        };
        lock.holders.retain(|h| h.age.txn != txn);
        lock.waiters.retain(|w| w.age.txn != txn);
        lock.grant(granted);
        if lock.is_idle() {
            let lock = self.keys.remove(key).expect("present");
            self.recycle(lock);
        }
    }

    /// The mode in which `txn` holds `key`, if it does.
    pub(crate) fn mode(&self, key: &Key, txn: TxnId) -> Option<LockMode> {
        self.keys
            .get(key)?
            .holders
            .iter()
            .find(|h| h.age.txn == txn)
            .map(|h| h.mode)
    }

    /// Whether no key is locked or awaited.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn waiters(&self, key: &Key) -> usize {
        self.keys.get(key).map_or(0, |l| l.waiters.len())
    }

    #[cfg(test)]
    pub(crate) fn holders(&self, key: &Key) -> usize {
        self.keys.get(key).map_or(0, |l| l.holders.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::NodeId;
    use meridian_core::SmallBytes;
    use LockMode::{Exclusive, Shared};

    /// Transaction `n`, with age `n` (smaller is older).
    fn age(n: u64) -> Age {
        Age {
            time_ns: n,
            txn: TxnId::new(NodeId(9), 0, n),
        }
    }

    fn key() -> Key {
        SmallBytes::from_static(b"k")
    }

    #[test]
    fn older_requester_waits_and_younger_dies() {
        let mut t = LockTable::new(8, Policy::WaitDie);
        assert_eq!(t.acquire(&key(), age(5), Exclusive), Acquire::Granted);
        // Older than the holder: waits.
        assert_eq!(t.acquire(&key(), age(3), Shared), Acquire::Waiting);
        // Younger than the conflicting holder: dies.
        assert_eq!(t.acquire(&key(), age(7), Shared), Acquire::Die);
        assert_eq!(t.release(&key(), age(5).txn), vec![age(3).txn]);
        assert_eq!(t.mode(&key(), age(3).txn), Some(Shared));
    }

    #[test]
    fn compatible_requests_queue_behind_waiters_in_fifo_order() {
        let mut t = LockTable::new(8, Policy::WaitDie);
        assert_eq!(t.acquire(&key(), age(5), Shared), Acquire::Granted);
        assert_eq!(t.acquire(&key(), age(4), Exclusive), Acquire::Waiting);
        // Compatible with the shared holder, but must not overtake the queued writer; it is
        // older than the writer, so it waits behind it.
        assert_eq!(t.acquire(&key(), age(2), Shared), Acquire::Waiting);
        // A reader younger than the queued writer dies instead of barging.
        assert_eq!(t.acquire(&key(), age(6), Shared), Acquire::Die);
        assert_eq!(t.release(&key(), age(5).txn), vec![age(4).txn]);
        assert_eq!(t.release(&key(), age(4).txn), vec![age(2).txn]);
        assert_eq!(t.release(&key(), age(2).txn), vec![]);
        assert!(t.is_empty());
    }

    #[test]
    fn shared_waiters_are_granted_together() {
        let mut t = LockTable::new(8, Policy::WaitDie);
        assert_eq!(t.acquire(&key(), age(9), Exclusive), Acquire::Granted);
        assert_eq!(t.acquire(&key(), age(3), Shared), Acquire::Waiting);
        assert_eq!(t.acquire(&key(), age(2), Shared), Acquire::Waiting);
        assert_eq!(t.release(&key(), age(9).txn), vec![age(3).txn, age(2).txn]);
        assert_eq!(t.holders(&key()), 2);
    }

    #[test]
    fn upgrades_wait_for_younger_readers_only() {
        let mut t = LockTable::new(8, Policy::WaitDie);
        assert_eq!(t.acquire(&key(), age(1), Shared), Acquire::Granted);
        assert_eq!(t.acquire(&key(), age(2), Shared), Acquire::Granted);
        // Sole-holder upgrade is immediate; here 1 must wait for the younger reader 2.
        assert_eq!(t.acquire(&key(), age(1), Exclusive), Acquire::Waiting);
        // 2 upgrading too would deadlock with 1: it is younger, so it dies.
        assert_eq!(t.acquire(&key(), age(2), Exclusive), Acquire::Die);
        assert_eq!(t.release(&key(), age(2).txn), vec![age(1).txn]);
        assert_eq!(t.mode(&key(), age(1).txn), Some(Exclusive));
        assert_eq!(t.holders(&key()), 1);
    }

    #[test]
    fn queues_are_bounded() {
        let mut t = LockTable::new(1, Policy::WaitDie);
        assert_eq!(t.acquire(&key(), age(9), Exclusive), Acquire::Granted);
        assert_eq!(t.acquire(&key(), age(5), Exclusive), Acquire::Waiting);
        assert_eq!(t.acquire(&key(), age(1), Exclusive), Acquire::QueueFull);
        assert_eq!(t.waiters(&key()), 1);
    }

    #[test]
    fn releasing_a_waiter_unblocks_compatible_requests_behind_it() {
        let mut t = LockTable::new(8, Policy::WaitDie);
        assert_eq!(t.acquire(&key(), age(9), Shared), Acquire::Granted);
        assert_eq!(t.acquire(&key(), age(5), Exclusive), Acquire::Waiting);
        assert_eq!(t.acquire(&key(), age(3), Shared), Acquire::Waiting);
        // The queued writer gives up (its transaction aborted elsewhere): the reader behind
        // it is compatible with the shared holder and goes ahead.
        assert_eq!(t.release(&key(), age(5).txn), vec![age(3).txn]);
    }

    #[test]
    fn wound_wait_older_requester_wounds_younger_holder_and_waits() {
        let mut t = LockTable::new(8, Policy::WoundWait);
        assert_eq!(t.acquire(&key(), age(5), Exclusive), Acquire::Granted);
        // Older than the holder: it wounds it and queues.
        assert_eq!(t.acquire(&key(), age(3), Exclusive), Acquire::Waiting);
        assert_eq!(t.take_wounded(), vec![age(5).txn]);
        // Younger than every blocker: it waits and wounds no one.
        assert_eq!(t.acquire(&key(), age(7), Shared), Acquire::Waiting);
        assert_eq!(t.take_wounded(), vec![]);
        // The server aborts the wounded holder: the older waiter gets the lock.
        assert_eq!(t.release(&key(), age(5).txn), vec![age(3).txn]);
        assert_eq!(t.mode(&key(), age(3).txn), Some(Exclusive));
    }

    #[test]
    fn wound_wait_wounds_younger_waiters_ahead_and_younger_upgraders() {
        let mut t = LockTable::new(8, Policy::WoundWait);
        assert_eq!(t.acquire(&key(), age(1), Shared), Acquire::Granted);
        assert_eq!(t.acquire(&key(), age(6), Shared), Acquire::Granted);
        // 6 upgrades first and waits for the older reader 1.
        assert_eq!(t.acquire(&key(), age(6), Exclusive), Acquire::Waiting);
        assert_eq!(t.take_wounded(), vec![]);
        // 1 upgrades: it wounds 6 (holder and upgrade waiter) instead of deadlocking.
        assert_eq!(t.acquire(&key(), age(1), Exclusive), Acquire::Waiting);
        assert_eq!(t.take_wounded(), vec![age(6).txn]);
        assert_eq!(t.release(&key(), age(6).txn), vec![age(1).txn]);
        assert_eq!(t.mode(&key(), age(1).txn), Some(Exclusive));
        // A younger writer queued behind an exclusive holder is wounded by an older writer.
        assert_eq!(t.acquire(&key(), age(8), Exclusive), Acquire::Waiting);
        assert_eq!(t.acquire(&key(), age(4), Exclusive), Acquire::Waiting);
        assert_eq!(t.take_wounded(), vec![age(8).txn]);
    }
}
