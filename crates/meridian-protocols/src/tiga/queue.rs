//! rMap/wMap (§3.2): the timestamps of released (leader: sealed) transactions per key, used
//! both for conflict detection at arrival and, per queue scan, to find conflicting
//! transactions ahead in the priority queue.

use meridian_core::txn::Key;
use meridian_core::{NodeId, Timestamp, TxnId};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use std::collections::VecDeque;

/// Per-key largest read and write timestamps, in one map (one lookup per key serves
/// both).
#[derive(Debug, Default)]
pub struct KeyMaps(FxHashMap<Key, Recorded>);

/// rMap's and wMap's entries for one key.
#[derive(Clone, Copy, Debug, Default)]
struct Recorded {
    read: Option<Timestamp>,
    write: Option<Timestamp>,
}

impl KeyMaps {
    /// Algorithm 2 lines 15–16 (keeping the maximum: a follower may learn a larger
    /// timestamp from log sync after its own release).
    pub fn record(&mut self, reads: &[Key], writes: &[Key], ts: Timestamp) {
        let raise = |slot: &mut Option<Timestamp>| *slot = Some(slot.map_or(ts, |t| t.max(ts)));
        for (keys, write) in [(reads, false), (writes, true)] {
            for k in keys {
                // No key clone (an atomic refcount shared across nodes) when present.
                let entry = match self.0.get_mut(k) {
                    Some(entry) => entry,
                    None => self.0.entry(k.clone()).or_default(),
                };
                raise(if write {
                    &mut entry.write
                } else {
                    &mut entry.read
                });
            }
        }
    }

    /// The largest recorded conflicting timestamp, if it is at or above `ts` (then a
    /// transaction at `ts` is not acceptable: conflict detection fails).
    pub fn conflict_floor(
        &self,
        reads: &[Key],
        writes: &[Key],
        ts: Timestamp,
    ) -> Option<Timestamp> {
        let on = |k: &Key| self.0.get(k).copied().unwrap_or_default();
        let written = writes.iter().map(on).flat_map(|e| [e.read, e.write]);
        let read = reads.iter().map(on).map(|e| e.write);
        written.chain(read).flatten().max().filter(|&w| w >= ts)
    }

    /// Forgets every timestamp at or below `floor` (GC: an arrival at or below the floor
    /// is treated as conflicting anyway, so those entries decide nothing).
    pub fn prune(&mut self, floor: Timestamp) {
        self.0.retain(|_, e| {
            e.read = e.read.filter(|&t| t > floor);
            e.write = e.write.filter(|&t| t > floor);
            e.read.is_some() || e.write.is_some()
        });
    }

    /// Timestamps recorded (a key read and written counts twice).
    pub fn len(&self) -> usize {
        let count = |e: &Recorded| usize::from(e.read.is_some()) + usize::from(e.write.is_some());
        self.0.values().map(count).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a transaction with these keys conflicts with anything recorded
    /// (read-write or write-write).
    pub fn blocks(&self, reads: &[Key], writes: &[Key]) -> bool {
        writes.iter().any(|k| self.0.contains_key(k))
            || reads
                .iter()
                .any(|k| self.0.get(k).is_some_and(|e| e.write.is_some()))
    }
}

/// Tiga's conflict relation between two transactions' key sets.
pub fn conflicts(a_reads: &[Key], a_writes: &[Key], b_reads: &[Key], b_writes: &[Key]) -> bool {
    let hits = |xs: &[Key], ys: &[Key]| xs.iter().any(|x| ys.contains(x));
    hits(a_writes, b_writes) || hits(a_writes, b_reads) || hits(a_reads, b_writes)
}

/// A queued transaction's place: priority-queue order.
type Slot = (Timestamp, TxnId);

/// The queued transactions touching one key, in queue order, each with how it accesses
/// the key. A sorted vector, inline for one entry: a key rarely has more than a few
/// queued transactions, most often one, which then allocates nothing.
#[derive(Debug, Default)]
struct KeyQueue(SmallVec<[(Slot, Access); 1]>);

/// How a queued transaction accesses one key, and whether it is sealed (a leader's
/// executed, unagreed transaction: see [`PriorityQueue::seal`]).
#[derive(Clone, Copy, Debug, Default)]
struct Access {
    read: bool,
    write: bool,
    sealed: bool,
}

impl KeyQueue {
    /// Adds `slot`'s read (or write) of the key.
    fn add(&mut self, slot: Slot, write: bool) {
        let i = match self.0.binary_search_by(|(s, _)| s.cmp(&slot)) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (slot, Access::default()));
                i
            }
        };
        let access = &mut self.0[i].1;
        access.read |= !write;
        access.write |= write;
    }

    /// Takes `slot` out; how it accessed the key, if it was here.
    fn take(&mut self, slot: Slot) -> Option<Access> {
        let i = self.0.binary_search_by(|(s, _)| s.cmp(&slot)).ok()?;
        Some(self.0.remove(i).1)
    }

    /// The entries queued ahead of `slot`.
    fn ahead_of(&self, slot: Slot) -> &[(Slot, Access)] {
        &self.0[..self.0.partition_point(|(s, _)| *s < slot)]
    }

    /// `slot`'s access, if it is here.
    fn get_mut(&mut self, slot: Slot) -> Option<&mut Access> {
        let i = self.0.binary_search_by(|(s, _)| s.cmp(&slot)).ok()?;
        Some(&mut self.0[i].1)
    }

    /// The entries queued behind `slot`.
    fn behind(&self, slot: Slot) -> &[(Slot, Access)] {
        &self.0[self.0.partition_point(|(s, _)| *s <= slot)..]
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The priority queue of §3.3 (Algorithm 2 `pq`) with what makes Algorithm 1's scan
/// incremental. Algorithm 1 releases a transaction T once its timestamp has passed and no
/// transaction ahead of it in the queue conflicts with it; the scan re-derives that from
/// the head on every event. Here every key keeps its queued readers and writers in order,
/// so "is some conflicting transaction ahead of T" is a look at the first entry per key
/// of T, and a set of *candidates* holds every queued transaction whose answer may have
/// changed: one just queued (or moved), and the transactions behind one that left or
/// moved on a shared key. Invariant: a queued transaction that is not a candidate has a
/// conflicting transaction ahead of it (so the scan would not release it either).
#[derive(Debug, Default)]
pub struct PriorityQueue {
    order: SortedSlots,
    by_key: FxHashMap<Key, KeyQueue>,
    candidates: SortedSlots,
}

/// A set of slots kept as a sorted deque: the queue holds a few hundred transactions,
/// arrivals land near the back (timestamps grow) and releases leave near the front, so a
/// binary search over contiguous memory and a short shift beat a tree's node hops.
#[derive(Debug, Default)]
struct SortedSlots(VecDeque<Slot>);

impl SortedSlots {
    /// Adds `slot`; false if it was there.
    fn insert(&mut self, slot: Slot) -> bool {
        match self.0.binary_search(&slot) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, slot);
                true
            }
        }
    }

    /// Removes `slot`; false if it was not there.
    fn remove(&mut self, slot: &Slot) -> bool {
        match self.0.binary_search(slot) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    fn first(&self) -> Option<&Slot> {
        self.0.front()
    }

    fn pop_first(&mut self) -> Option<Slot> {
        self.0.pop_front()
    }

    /// The slots from `from` on, in order.
    fn from(&self, from: &Slot) -> impl Iterator<Item = &Slot> + '_ {
        let start = self.0.partition_point(|s| s < from);
        self.0.range(start..)
    }

    fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.0.iter()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl PriorityQueue {
    /// Queues `id` at `ts`; it is a candidate until examined.
    pub fn insert(&mut self, ts: Timestamp, id: TxnId, reads: &[Key], writes: &[Key]) {
        let slot = (ts, id);
        if !self.order.insert(slot) {
            return;
        }
        for (keys, write) in [(reads, false), (writes, true)] {
            for k in keys {
                match self.by_key.get_mut(k) {
                    Some(q) => q.add(slot, write),
                    None => {
                        let mut q = KeyQueue::default();
                        q.add(slot, write);
                        self.by_key.insert(k.clone(), q);
                    }
                }
            }
        }
        self.candidates.insert(slot);
    }

    /// Takes `id` out of the queue; the transactions behind it that it may have been
    /// blocking become candidates.
    pub fn remove(&mut self, ts: Timestamp, id: TxnId, reads: &[Key], writes: &[Key]) {
        let slot = (ts, id);
        if !self.order.remove(&slot) {
            return;
        }
        self.candidates.remove(&slot);
        let mut wake = Vec::new();
        // A key both read and written is taken (and its successors woken) once.
        for k in reads.iter().chain(writes) {
            let Some(q) = self.by_key.get_mut(k) else {
                continue;
            };
            let Some(access) = q.take(slot) else {
                continue;
            };
            successors(q, slot, access, &mut wake);
            if q.is_empty() {
                self.by_key.remove(k);
            }
        }
        for slot in wake {
            self.candidates.insert(slot);
        }
    }

    /// Algorithm 1's test: whether a transaction queued ahead of `(ts, id)` conflicts with
    /// it (writes it reads, or reads or writes what it writes).
    pub fn blocked(&self, ts: Timestamp, id: TxnId, reads: &[Key], writes: &[Key]) -> bool {
        let slot = (ts, id);
        let on = |k: &Key| self.by_key.get(k);
        writes
            .iter()
            .filter_map(on)
            .any(|q| !q.ahead_of(slot).is_empty())
            || reads
                .iter()
                .filter_map(on)
                .any(|q| q.ahead_of(slot).iter().any(|(_, a)| a.write))
    }

    /// Whether an *unsealed* transaction queued ahead of `(ts, id)` conflicts with it: the
    /// test of a leader that executes on top of sealed, unagreed predecessors (module doc,
    /// "Pipelined execution"). Scans from the nearest entry back, so it stops at the first
    /// unsealed conflicting one.
    pub fn blocked_unsealed(
        &self,
        ts: Timestamp,
        id: TxnId,
        reads: &[Key],
        writes: &[Key],
    ) -> bool {
        let slot = (ts, id);
        let on = |k: &Key| self.by_key.get(k);
        let unsealed = |ahead: &[(Slot, Access)], writers_only: bool| {
            ahead
                .iter()
                .rev()
                .any(|(_, a)| !a.sealed && (a.write || !writers_only))
        };
        writes
            .iter()
            .filter_map(on)
            .any(|q| unsealed(q.ahead_of(slot), false))
            || reads
                .iter()
                .filter_map(on)
                .any(|q| unsealed(q.ahead_of(slot), true))
    }

    /// Marks queued `(ts, id)` sealed. The transactions behind it that only it (unsealed)
    /// held back under [`PriorityQueue::blocked_unsealed`] become candidates: on each of
    /// its keys, past sealed entries, the readers up to the next unsealed writer and that
    /// writer if it writes the key, else that writer only.
    pub fn seal(&mut self, ts: Timestamp, id: TxnId, reads: &[Key], writes: &[Key]) {
        let slot = (ts, id);
        let mut wake = Vec::new();
        for k in reads.iter().chain(writes) {
            let Some(q) = self.by_key.get_mut(k) else {
                continue;
            };
            let Some(access) = q.get_mut(slot) else {
                continue;
            };
            if access.sealed {
                continue; // a key both read and written: done once
            }
            access.sealed = true;
            let write = access.write;
            for &(behind, a) in q.behind(slot) {
                if a.sealed {
                    continue;
                }
                if a.write {
                    wake.push(behind);
                    break;
                }
                if write {
                    wake.push(behind);
                }
            }
        }
        for slot in wake {
            self.candidates.insert(slot);
        }
    }

    /// The sealed transactions queued behind `(ts, id)` on any of `keys`, in queue order:
    /// those whose executions read or overwrote versions `keys` had below them.
    pub fn sealed_behind(&self, ts: Timestamp, id: TxnId, keys: &[Key]) -> Vec<(Timestamp, TxnId)> {
        let slot = (ts, id);
        let mut out: Vec<Slot> = keys
            .iter()
            .filter_map(|k| self.by_key.get(k))
            .flat_map(|q| {
                q.behind(slot)
                    .iter()
                    .filter(|(_, a)| a.sealed)
                    .map(|(s, _)| *s)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Makes `(ts, id)` a candidate again (a sealed transaction to re-examine).
    pub fn touch(&mut self, ts: Timestamp, id: TxnId) {
        if self.order.0.binary_search(&(ts, id)).is_ok() {
            self.candidates.insert((ts, id));
        }
    }

    /// Removes and returns, in queue order, the candidates whose timestamp has passed
    /// `now_ns` (the others stay candidates until then).
    pub fn take_expired_candidates(&mut self, now_ns: u64) -> Vec<(Timestamp, TxnId)> {
        let bound = first_after(now_ns);
        let mut expired = Vec::new();
        while self.candidates.first().is_some_and(|&slot| slot < bound) {
            expired.push(self.candidates.pop_first().expect("a first slot"));
        }
        expired
    }

    /// Every queued transaction whose timestamp is after `now_ns`, in order.
    pub fn after(&self, now_ns: u64) -> impl Iterator<Item = &(Timestamp, TxnId)> + '_ {
        self.order.from(&first_after(now_ns))
    }

    pub fn iter(&self) -> impl Iterator<Item = &(Timestamp, TxnId)> + '_ {
        self.order.iter()
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn clear(&mut self) {
        self.order.clear();
        self.by_key.clear();
        self.candidates.clear();
    }

    /// Keys with queued transactions (bounded by the queue: a key leaves with its last
    /// transaction).
    pub fn key_count(&self) -> usize {
        self.by_key.len()
    }
}

/// The smallest slot whose timestamp is after `now_ns`.
fn first_after(now_ns: u64) -> Slot {
    let min_id = TxnId {
        coordinator: NodeId(0),
        seq: 0,
    };
    (Timestamp::new(now_ns.saturating_add(1), 0), min_id)
}

/// The transactions on key queue `q` behind `slot` that a transaction at `slot` (accessing
/// the key as `gone`) may have been the reason to block: a writer blocked every reader up
/// to the next writer and that writer; a reader blocked only the next writer. An unsealed
/// one also held back, past sealed writers, what [`PriorityQueue::blocked_unsealed`]
/// would now let through, so the scan goes on past sealed writers.
fn successors(q: &KeyQueue, slot: Slot, gone: Access, out: &mut Vec<Slot>) {
    for &(behind, access) in q.behind(slot) {
        if access.write {
            out.push(behind);
            if gone.sealed || !access.sealed {
                return;
            }
        } else if gone.write {
            out.push(behind);
        }
    }
}
