//! A replica's dependency graph (Janus §4.1, §4.4): the transactions it knows with their
//! status and dependencies, the per-key conflict table that pre-accept reads its answers
//! from, which of its shard's transactions it executed, and the order in which committed
//! transactions become executable (strongly connected components in topological order,
//! members by id). Pure state, no effects: `replica.rs` persists, sends and executes.
//!
//! Execution is found incrementally (the paper leaves it open; a full walk over every
//! committed transaction after each message batch grew with the graph and dominated the
//! CPU at load). A pass starts only from *candidates*: transactions committed since the
//! last pass and ones woken because what blocked them changed. A blocked component is
//! *parked*: each member with a blocker of its own waits on it (the first dependency that
//! is not committed here, or a parked transaction it leads to), and the members are woken
//! together. A walk that meets a parked transaction treats it as blocked without entering
//! it. Waking cascades to everything parked behind the woken (a component that the
//! short-cut split must be walked whole again), so "parked" always implies "blocked":
//! a pass finds exactly what the definition does (`tests.rs` checks this against a
//! reachability search on random event sequences).
//!
//! A transaction with a blocker of its own is parked alone, its edges not walked: nothing
//! it reaches can make it executable, and no executable component contains it. At a hot
//! key under overload (Tiga Fig. 9, Zipf 0.99) every transaction depends on every live
//! one, and re-walking those dense components at each wake-up made the passes quadratic
//! in the key's backlog. The search for the blocker resumes where the last one stopped.
//! A transaction found blocked during the walk (it reaches a parked one) stops walking
//! too, and its parent with it: the edges it skips could only merge it into a component
//! that reaches it, which is blocked as well. Executable components still walk every
//! edge, so what a pass releases does not depend on this (only the order of components
//! that do not reach each other does, which is free).

use super::wire::{Ballot, Body, Dep, Deps, ExecutedSlots, Known, Tag};
use meridian_core::txn::Key;
use meridian_core::{NodeId, ShardId, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// Where a transaction stands at this replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Status {
    PreAccepted,
    Accepted,
    Committed,
    /// Executed here (its pieces of this shard applied; a no-op for another shard's
    /// transaction, whose place in the order is all this replica needed).
    Executed,
}

/// A transaction this replica knows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Vertex {
    pub body: Arc<Body>,
    pub status: Status,
    pub promised: Ballot,
    pub accepted: Ballot,
    /// Pre-accepted: this replica's own answer; accepted: the accepted union; committed:
    /// the final dependencies.
    pub deps: Deps,
    /// Local time of the last message about it (a recovery starts after a long silence).
    #[serde(skip)]
    pub touched_ns: u64,
}

/// What pre-accept reports for one key, as tags (an id alone could not be reported once
/// the transaction's body is forgotten): every transaction touching the key that this
/// replica knows and has not executed (`live`, with whether it writes), and of the executed
/// ones the last writer and the readers executed after it. Nothing live is ever dropped
/// when a newer access arrives: a transaction learned late (a slow pre-accept, an accept or
/// commit of one never pre-accepted here) may be older than what is recorded, so "the last
/// writer" is only known once executed, in the graph's order.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeyEntry {
    done_writer: Option<Tag>,
    done_readers: Vec<Tag>,
    live: Vec<(Tag, bool)>,
}

/// Slots of one coordinator incarnation executed here: all below `below`, and `above`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SlotSet {
    below: u64,
    above: BTreeSet<u64>,
}

impl SlotSet {
    fn contains(&self, slot: u64) -> bool {
        slot < self.below || self.above.contains(&slot)
    }

    fn insert(&mut self, slot: u64) {
        if slot >= self.below {
            self.above.insert(slot);
        }
        while self.above.remove(&self.below) {
            self.below += 1;
        }
    }

    /// Whether every slot here is also in `other`.
    fn is_subset(&self, other: &SlotSet) -> bool {
        let gap = self.below.saturating_sub(other.below);
        // The slots in [other.below, self.below) must all be in other.above.
        let gap_covered = gap == 0
            || (gap <= other.above.len() as u64
                && (other.below..self.below).all(|s| other.above.contains(&s)));
        gap_covered && self.above.iter().all(|&s| other.contains(s))
    }
}

/// A coordinator incarnation: the key of the executed-slot table.
fn incarnation(id: TxnId) -> (NodeId, u64) {
    (id.coordinator, id.seq >> TxnId::INCARNATION_SHIFT)
}

/// What a replica checkpoints (the durable form of [`Graph`] without its store).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GraphSnapshot {
    pub vertices: Vec<(TxnId, Vertex)>,
    pub keys: Vec<(Key, KeyEntry)>,
    pub executed: ExecutedSlots,
    pub store: Vec<(Key, meridian_core::txn::Value)>,
}

/// The dependency graph of one replica of `shard`.
#[derive(Debug)]
pub struct Graph {
    shard: ShardId,
    pub vertices: FxHashMap<TxnId, Vertex>,
    keys: FxHashMap<Key, KeyEntry>,
    executed: FxHashMap<(NodeId, u64), SlotSet>,
    /// Other shards' transactions known executed (answers to inquiries), bounded FIFO.
    foreign_done: FxHashSet<TxnId>,
    foreign_order: VecDeque<TxnId>,
    /// Executed vertices in execution order with the local time, for forgetting them.
    forget_queue: VecDeque<(u64, TxnId)>,
    /// What each peer of this shard last reported executed (`Msg::ExecutedSlots`).
    peer_executed: FxHashMap<NodeId, FxHashMap<(NodeId, u64), SlotSet>>,
    /// Set when something changed that may let a committed transaction execute.
    pub dirty: bool,
    /// Committed transactions the next pass starts from (see the module doc).
    candidates: BTreeSet<TxnId>,
    /// Parked transactions to wake when the keyed one changes (commits, executes, becomes
    /// known or known executed elsewhere, or is woken itself).
    waiters: FxHashMap<TxnId, Vec<TxnId>>,
    /// A parked transaction and the root of the blocked component it was parked with.
    parked: FxHashMap<TxnId, TxnId>,
    /// The members of each parked component, by root (woken together).
    groups: FxHashMap<TxnId, Vec<TxnId>>,
    /// Dependencies of committed transactions not known here (inquired until resolved).
    unknown: FxHashMap<TxnId, Tag>,
    /// How far each committed transaction's dependencies are known settled (see [`Scan`]).
    scans: FxHashMap<TxnId, Scan>,
    /// The last pass's order: the caller executes all of it before the next pass.
    handed_out: Vec<TxnId>,
}

/// A committed transaction's dependencies already found settled here: `deps[..settled]`
/// are committed or executed (neither ever reverts, short of a restore, which resets
/// this), so the search for a blocker resumes where the last one stopped. `inquired`: its
/// unknown dependencies were recorded once (they stay recorded until learned).
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    settled: usize,
    inquired: bool,
}

/// What one pass of [`Graph::executable`] found.
#[derive(Debug, Default)]
pub struct Pass {
    /// Transactions to execute now, in order.
    pub order: Vec<TxnId>,
    /// Dependencies that are not known here (to inquire about).
    pub missing: Vec<Tag>,
}

impl Graph {
    pub fn new(shard: ShardId) -> Graph {
        Graph {
            shard,
            vertices: FxHashMap::default(),
            keys: FxHashMap::default(),
            executed: FxHashMap::default(),
            foreign_done: FxHashSet::default(),
            foreign_order: VecDeque::new(),
            forget_queue: VecDeque::new(),
            peer_executed: FxHashMap::default(),
            dirty: false,
            candidates: BTreeSet::new(),
            waiters: FxHashMap::default(),
            parked: FxHashMap::default(),
            groups: FxHashMap::default(),
            unknown: FxHashMap::default(),
            scans: FxHashMap::default(),
            handed_out: Vec::new(),
        }
    }

    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// Whether `tag` touches this replica's shard.
    pub fn is_local(&self, tag: &Tag) -> bool {
        tag.slot(self.shard).is_some()
    }

    /// Whether this replica executed `tag` (for another shard's transaction: placed it).
    pub fn is_done(&self, tag: &Tag) -> bool {
        if let Some(v) = self.vertices.get(&tag.id) {
            return v.status == Status::Executed;
        }
        match tag.slot(self.shard) {
            Some(slot) => self
                .executed
                .get(&incarnation(tag.id))
                .is_some_and(|s| s.contains(slot)),
            None => self.foreign_done.contains(&tag.id),
        }
    }

    /// Whether this replica executed `tag` of its own shard and forgot it.
    pub fn forgotten(&self, tag: &Tag) -> bool {
        !self.vertices.contains_key(&tag.id) && self.is_local(tag) && self.is_done(tag)
    }

    /// Pre-accept (§4.1): the conflicting transactions seen so far on this shard's keys
    /// (see [`KeyEntry`]), then records `body` among the keys' live accesses.
    pub fn conflicts(&mut self, body: &Body) -> Deps {
        // Collected, then sorted once: a hot key's live list holds thousands at overload,
        // and inserting each into a sorted list was quadratic in it.
        let mut deps: Vec<Dep> = Vec::new();
        let mut push = |tag: &Tag| {
            if tag.id != body.tag.id {
                deps.push(Dep { tag: tag.clone() });
            }
        };
        for piece in body.pieces.iter().filter(|p| p.shard == self.shard) {
            piece.for_each_key(|key, write| {
                let Some(entry) = self.keys.get(key) else {
                    return;
                };
                entry.done_writer.iter().for_each(&mut push);
                if write {
                    entry.done_readers.iter().for_each(&mut push);
                }
                for (tag, writes) in &entry.live {
                    if write || *writes {
                        push(tag);
                    }
                }
            });
        }
        deps.sort_unstable_by_key(|d| d.tag.id);
        deps.dedup_by_key(|d| d.tag.id);
        self.note_keys(body);
        deps.into()
    }

    /// Records `body` among its keys' live accesses (also for an accept or commit of a
    /// transaction this replica never pre-accepted: later pre-accepts must still see it).
    pub fn note_keys(&mut self, body: &Body) {
        for piece in body.pieces.iter().filter(|p| p.shard == self.shard) {
            piece.for_each_key(|key, write| {
                let live = &mut self.keys.entry(key.clone()).or_default().live;
                match live.iter_mut().find(|(t, _)| t.id == body.tag.id) {
                    Some((_, w)) => *w |= write,
                    None => live.push((body.tag.clone(), write)),
                }
            });
        }
    }

    /// Moves an executed transaction's accesses from live to executed.
    fn note_executed(&mut self, body: &Body) {
        let id = body.tag.id;
        for piece in body.pieces.iter().filter(|p| p.shard == self.shard) {
            piece.for_each_key(|key, write| {
                let entry = self.keys.entry(key.clone()).or_default();
                entry.live.retain(|(t, _)| t.id != id);
                if write {
                    entry.done_writer = Some(body.tag.clone());
                    entry.done_readers.clear();
                } else if !entry.done_readers.iter().any(|r| r.id == id) {
                    entry.done_readers.push(body.tag.clone());
                }
            });
        }
    }

    /// Inserts a transaction first heard of now (pre-accept, prepare, accept or commit).
    pub fn insert(&mut self, body: Arc<Body>, status: Status, deps: Deps, now_ns: u64) {
        let id = body.tag.id;
        let vertex = Vertex {
            body,
            status,
            promised: Ballot::ZERO,
            accepted: Ballot::ZERO,
            deps,
            touched_ns: now_ns,
        };
        self.vertices.insert(id, vertex);
        self.unknown.remove(&id);
        if status == Status::Committed {
            self.candidates.insert(id);
            self.wake(id);
            self.dirty = true;
        }
    }

    /// Commits a known or new transaction with its final dependencies.
    pub fn commit(&mut self, body: &Arc<Body>, deps: Deps, now_ns: u64) {
        match self.vertices.get_mut(&body.tag.id) {
            Some(v) if v.status >= Status::Committed => {}
            Some(v) => {
                v.status = Status::Committed;
                v.deps = deps;
                v.touched_ns = now_ns;
                self.candidates.insert(body.tag.id);
                self.wake(body.tag.id);
            }
            None => {
                if self.is_local(&body.tag) {
                    self.note_keys(body);
                }
                self.insert(body.clone(), Status::Committed, deps, now_ns);
            }
        }
        self.dirty = true;
    }

    /// What a prepare reports about a known transaction.
    pub fn known(&self, id: TxnId) -> Option<Known> {
        let v = self.vertices.get(&id)?;
        Some(match v.status {
            Status::PreAccepted => Known::PreAccepted(v.deps.clone()),
            Status::Accepted => Known::Accepted(v.accepted, v.deps.clone()),
            Status::Committed | Status::Executed => Known::Committed(v.deps.clone()),
        })
    }

    /// An inquiry answer: another shard's transaction this replica may stop waiting for.
    pub fn note_foreign_done(&mut self, id: TxnId, capacity: usize) {
        if self.foreign_done.insert(id) {
            self.foreign_order.push_back(id);
            if self.foreign_order.len() > capacity {
                if let Some(old) = self.foreign_order.pop_front() {
                    self.foreign_done.remove(&old);
                }
            }
            self.unknown.remove(&id);
            self.wake(id);
            self.dirty = true;
        }
    }

    /// Marks `id` executed (its shard's effects already applied by the caller).
    pub fn mark_executed(&mut self, id: TxnId, now_ns: u64) {
        let Some(v) = self.vertices.get_mut(&id) else {
            return;
        };
        v.status = Status::Executed;
        let body = v.body.clone();
        if let Some(slot) = body.tag.slot(self.shard) {
            self.note_executed(&body);
            self.executed
                .entry(incarnation(id))
                .or_default()
                .insert(slot);
        }
        self.forget_queue.push_back((now_ns, id));
        self.candidates.remove(&id);
        self.scans.remove(&id);
        self.wake(id);
        self.dirty = true;
    }

    /// Wakes what waits on `id` (and `id` itself if parked), cascading to everything parked
    /// behind the woken: they become candidates of the next pass.
    fn wake(&mut self, id: TxnId) {
        let mut work = vec![id];
        while let Some(x) = work.pop() {
            if let Some(root) = self.parked.remove(&x) {
                for member in self.groups.remove(&root).unwrap_or_default() {
                    self.parked.remove(&member);
                    self.candidates.insert(member);
                    work.push(member);
                }
            }
            if let Some(waiting) = self.waiters.remove(&x) {
                work.extend(waiting);
            }
        }
    }

    /// Every committed transaction becomes a candidate again (after a state transfer or a
    /// restore, which change the graph wholesale).
    fn reset_passes(&mut self) {
        self.waiters.clear();
        self.parked.clear();
        self.groups.clear();
        self.unknown.clear();
        self.scans.clear();
        self.handed_out.clear();
        self.candidates = self
            .vertices
            .iter()
            .filter(|(_, v)| v.status == Status::Committed)
            .map(|(&id, _)| id)
            .collect();
    }

    /// Dependencies of committed transactions that are still not known here (what the
    /// periodic tick inquires about again).
    pub fn unknown_dependencies(&mut self) -> Vec<Tag> {
        let resolved: Vec<TxnId> = self
            .unknown
            .iter()
            .filter(|(id, tag)| self.vertices.contains_key(id) || self.is_done(tag))
            .map(|(&id, _)| id)
            .collect();
        for id in resolved {
            self.unknown.remove(&id);
        }
        let mut tags: Vec<Tag> = self.unknown.values().cloned().collect();
        tags.sort_by_key(|t| t.id);
        tags
    }

    /// Forgets executed transactions older than `keep_ns` (garbage collection: the graph
    /// holds only live transactions and recently executed ones, kept to answer inquiries
    /// from lagging replicas). One of this shard's transactions is kept until every replica
    /// in `peers` reported it executed — a peer that lacks it can then still learn it, which
    /// it could not once every replica that had it forgot it — but no longer than
    /// `keep_max_ns` (a peer down that long catches up by state transfer). Returns how many
    /// were forgotten unacknowledged at that bound. Key-table entries of forgotten readers
    /// are dropped too.
    pub fn forget(&mut self, now_ns: u64, keep_ns: u64, keep_max_ns: u64, peers: &[NodeId]) -> u64 {
        let mut unacknowledged = 0;
        while let Some(&(at, id)) = self.forget_queue.front() {
            let age_ns = now_ns.saturating_sub(at);
            if age_ns < keep_ns {
                break;
            }
            let everywhere = self.executed_by(id, peers);
            if !everywhere && age_ns < keep_max_ns {
                // In execution order: what follows waits too (it is younger).
                break;
            }
            unacknowledged += u64::from(!everywhere);
            self.forget_queue.pop_front();
            self.remove_executed(id);
        }
        unacknowledged
    }

    /// Whether every replica in `peers` reported `id` executed (true for another shard's
    /// transaction: this shard's peers learn it from its own shard, not from here).
    fn executed_by(&self, id: TxnId, peers: &[NodeId]) -> bool {
        let Some(slot) = self
            .vertices
            .get(&id)
            .and_then(|v| v.body.tag.slot(self.shard))
        else {
            return true;
        };
        peers.iter().all(|peer| {
            self.peer_executed
                .get(peer)
                .and_then(|slots| slots.get(&incarnation(id)))
                .is_some_and(|s| s.contains(slot))
        })
    }

    fn remove_executed(&mut self, id: TxnId) {
        let Some(v) = self.vertices.remove(&id) else {
            return;
        };
        let shard = self.shard;
        for piece in v.body.pieces.iter().filter(|p| p.shard == shard) {
            piece.for_each_key(|key, _| {
                // The last executed writer stays (a later pre-accept still reports it):
                // what a lagging replica must order after.
                if let Some(e) = self.keys.get_mut(key) {
                    e.done_readers.retain(|r| r.id != id);
                }
            });
        }
    }

    /// This replica's executed slots, as a peer's `forget` needs them.
    pub fn executed_slots(&self) -> ExecutedSlots {
        let mut executed: ExecutedSlots =
            self.executed.iter().map(|(&k, s)| (k, s.clone())).collect();
        executed.sort_by_key(|(k, _)| *k);
        executed
    }

    /// A peer's report of what it executed (a later report replaces an earlier one: the
    /// sets only grow, so a reordered older one only delays forgetting).
    pub fn note_peer_executed(&mut self, peer: NodeId, executed: &ExecutedSlots) {
        let slots = executed.iter().cloned().collect();
        self.peer_executed.insert(peer, slots);
    }

    /// One pass (iterative Tarjan from the candidates, see the module doc): every strongly
    /// connected component all of whose reachable components are executed or executable,
    /// in topological order (dependencies first), members by id. A dependency that is not
    /// committed here blocks its dependents; an unknown one is also reported as missing.
    /// The caller executes the whole order (`mark_executed`) before the next pass.
    pub fn executable(&mut self) -> Pass {
        for id in std::mem::take(&mut self.handed_out) {
            assert!(
                self.vertices
                    .get(&id)
                    .is_none_or(|v| v.status == Status::Executed),
                "a pass's order was not executed before the next pass"
            );
        }
        let mut tarjan = Tarjan::default();
        let mut pass = Pass::default();
        // Woken after this pass walked them (a stale wait list naming them): next pass.
        let mut again = Vec::new();
        while let Some(root) = self.candidates.pop_first() {
            let committed = self
                .vertices
                .get(&root)
                .is_some_and(|v| v.status == Status::Committed);
            if !committed || self.parked.contains_key(&root) {
                continue;
            }
            if !tarjan.index.contains_key(&root) {
                tarjan.run(self, root, &mut pass);
            } else if !tarjan.released.contains(&root) {
                again.push(root);
            }
        }
        if !again.is_empty() {
            self.candidates.extend(again);
            self.dirty = true;
        }
        self.handed_out.clone_from(&pass.order);
        pass
    }

    /// What a pass must agree with, by definition and without passes: the committed
    /// transactions from which no dependency path (through committed ones) reaches one
    /// that is not committed here. Unordered.
    #[cfg(test)]
    pub fn executable_full(&self) -> Vec<TxnId> {
        let blocked_from = |start: TxnId| {
            let mut seen: FxHashSet<TxnId> = [start].into_iter().collect();
            let mut todo = vec![start];
            while let Some(u) = todo.pop() {
                for dep in self.vertices[&u].deps.iter() {
                    match self.vertices.get(&dep.tag.id).map(|v| v.status) {
                        Some(Status::Executed) => {}
                        Some(Status::Committed) => {
                            if seen.insert(dep.tag.id) {
                                todo.push(dep.tag.id);
                            }
                        }
                        Some(_) => return true,
                        None if self.is_done(&dep.tag) => {}
                        None => return true,
                    }
                }
            }
            false
        };
        self.vertices
            .iter()
            .filter(|(&id, v)| v.status == Status::Committed && !blocked_from(id))
            .map(|(&id, _)| id)
            .collect()
    }

    /// The dependencies of committed `id` to walk (the committed ones among them are its
    /// edges; the walk skips the rest), or its blocker: a dependency not committed here. A
    /// transaction with a blocker of its own cannot execute whatever else it reaches, so
    /// its edges are not walked (at a hot key every transaction depends on every live one:
    /// walking them again at each wake-up was quadratic). Unknown dependencies are
    /// recorded in `missing` the first time.
    fn edges(&mut self, id: TxnId, missing: &mut Vec<Tag>) -> (Deps, Option<TxnId>) {
        let mut scan = self.scans.get(&id).copied().unwrap_or_default();
        let deps = self.vertices[&id].deps.clone();
        if !scan.inquired {
            scan.inquired = true;
            for dep in deps.iter() {
                if !self.vertices.contains_key(&dep.tag.id) && !self.is_done(&dep.tag) {
                    missing.push(dep.tag.clone());
                    self.unknown.insert(dep.tag.id, dep.tag.clone());
                }
            }
        }
        let blocker = deps[scan.settled..].iter().find(|dep| {
            let settled = match self.vertices.get(&dep.tag.id) {
                Some(v) => v.status >= Status::Committed,
                // Executed here (placed, for another shard's transaction). One executed
                // only at its reporter must still be chased: orderings between this
                // shard's transactions may run through it.
                None => self.is_done(&dep.tag),
            };
            scan.settled += usize::from(settled);
            !settled
        });
        let blocker = blocker.map(|dep| {
            // Unknown now though known at the first scan: another shard's transaction
            // executed here and forgotten since. Its shard tells it done.
            let id = dep.tag.id;
            if !self.vertices.contains_key(&id) && !self.unknown.contains_key(&id) {
                missing.push(dep.tag.clone());
                self.unknown.insert(id, dep.tag.clone());
            }
            id
        });
        self.scans.insert(id, scan);
        match blocker {
            Some(_) => (Deps::default(), blocker),
            None => (deps, None),
        }
    }

    /// Whether `id` is committed and not executed here (an edge a walk follows).
    fn is_committed(&self, id: TxnId) -> bool {
        self.vertices
            .get(&id)
            .is_some_and(|v| v.status == Status::Committed)
    }

    /// Parks a blocked component: members with a blocker wait on it; all wake together.
    fn park(&mut self, root: TxnId, members: &[(TxnId, Option<TxnId>)]) {
        for &(member, blocker) in members {
            self.parked.insert(member, root);
            if let Some(blocker) = blocker {
                self.waiters.entry(blocker).or_default().push(member);
            }
        }
        self.groups
            .insert(root, members.iter().map(|&(m, _)| m).collect());
    }

    /// An executable component: what waits on its members is woken (a parked transaction
    /// behind it may now be executable in this same pass).
    fn release(&mut self, members: &[TxnId]) {
        for &member in members {
            self.wake(member);
        }
    }

    pub fn snapshot(&self, store: Vec<(Key, meridian_core::txn::Value)>) -> GraphSnapshot {
        let mut vertices: Vec<_> = self.vertices.iter().map(|(&k, v)| (k, v.clone())).collect();
        vertices.sort_by_key(|(k, _)| *k);
        let mut keys: Vec<_> = self
            .keys
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        GraphSnapshot {
            vertices,
            keys,
            executed: self.executed_slots(),
            store,
        }
    }

    /// Whether `peer` (a snapshot's executed slots) executed everything this replica did:
    /// only then is its store this replica's state advanced along the shard's one order.
    pub fn executed_within(&self, peer: &[((NodeId, u64), SlotSet)]) -> bool {
        let peer: FxHashMap<_, _> = peer.iter().map(|(k, s)| (*k, s)).collect();
        self.executed.iter().all(|(k, mine)| {
            (mine.below == 0 && mine.above.is_empty())
                || peer.get(k).is_some_and(|theirs| mine.is_subset(theirs))
        })
    }

    /// Whether `peer` executed something this replica has not.
    pub fn executed_beyond(&self, peer: &[((NodeId, u64), SlotSet)]) -> bool {
        peer.iter().any(|(k, theirs)| match self.executed.get(k) {
            Some(mine) => !theirs.is_subset(mine),
            None => theirs.below > 0 || !theirs.above.is_empty(),
        })
    }

    /// State transfer: takes a peer's executed slots and key table (its store replaces
    /// the caller's), and its committed and executed transactions, keeping what this
    /// replica knows that the peer has not executed — its own pre-accept answers, promises
    /// and accepts above all (quorum intersection rests on them). The caller checked
    /// [`Graph::executed_within`].
    pub fn adopt(&mut self, snap: &GraphSnapshot, now_ns: u64) {
        self.executed = snap.executed.iter().cloned().collect();
        let mut keys: FxHashMap<Key, KeyEntry> = snap.keys.iter().cloned().collect();
        for (key, entry) in std::mem::take(&mut self.keys) {
            for (tag, write) in entry.live {
                if self.executed_slot(&tag) {
                    continue;
                }
                let live = &mut keys.entry(key.clone()).or_default().live;
                match live.iter_mut().find(|(t, _)| t.id == tag.id) {
                    Some((_, w)) => *w |= write,
                    None => live.push((tag, write)),
                }
            }
        }
        self.keys = keys;
        for (id, theirs) in &snap.vertices {
            if theirs.status < Status::Committed {
                continue;
            }
            let executed = theirs.status == Status::Executed;
            match self.vertices.get_mut(id) {
                Some(v) if v.status >= theirs.status => continue,
                Some(v) => {
                    v.status = theirs.status;
                    v.deps = theirs.deps.clone();
                    v.touched_ns = now_ns;
                }
                None => {
                    let mut v = theirs.clone();
                    v.touched_ns = now_ns;
                    self.vertices.insert(*id, v);
                }
            }
            if executed {
                self.forget_queue.push_back((now_ns, *id));
            }
        }
        // This replica's own transactions the peer executed (and perhaps forgot).
        let mut caught_up: Vec<TxnId> = Vec::new();
        for (id, v) in &self.vertices {
            if v.status < Status::Executed && self.executed_slot(&v.body.tag) {
                caught_up.push(*id);
            }
        }
        caught_up.sort_unstable();
        for id in caught_up {
            if let Some(v) = self.vertices.get_mut(&id) {
                v.status = Status::Executed;
            }
            self.forget_queue.push_back((now_ns, id));
        }
        self.reset_passes();
        self.dirty = true;
    }

    /// Whether `tag` touches this shard and its slot is executed here.
    fn executed_slot(&self, tag: &Tag) -> bool {
        tag.slot(self.shard).is_some_and(|slot| {
            self.executed
                .get(&incarnation(tag.id))
                .is_some_and(|s| s.contains(slot))
        })
    }

    /// After a restart: executed transactions replayed from the log are kept `keep_ns`
    /// from now (to answer lagging peers), not from the epoch.
    pub fn restamp_forget(&mut self, now_ns: u64) {
        for entry in &mut self.forget_queue {
            entry.0 = entry.0.max(now_ns);
        }
    }

    /// Rebuilds from a snapshot (executed vertices are forgotten from `now_ns` on).
    pub fn restore(&mut self, snap: &GraphSnapshot, now_ns: u64) {
        self.vertices = snap.vertices.iter().cloned().collect();
        self.keys = snap.keys.iter().cloned().collect();
        self.executed = snap.executed.iter().cloned().collect();
        let mut executed: Vec<TxnId> = self
            .vertices
            .iter()
            .filter(|(_, v)| v.status == Status::Executed)
            .map(|(&id, _)| id)
            .collect();
        executed.sort_unstable();
        self.forget_queue = executed.into_iter().map(|id| (now_ns, id)).collect();
        self.reset_passes();
        self.dirty = true;
    }
}

/// Iterative Tarjan over committed vertices (an explicit call stack: a long dependency
/// chain must not overflow the thread stack). Blocked-ness propagates: a component with an
/// edge into a blocked (parked) one is blocked.
#[derive(Default)]
struct Tarjan {
    index: FxHashMap<TxnId, u32>,
    low: FxHashMap<TxnId, u32>,
    on_stack: FxHashSet<TxnId>,
    stack: Vec<TxnId>,
    /// Members of the components still on the stack that have a blocker of their own.
    member_blocker: FxHashMap<TxnId, TxnId>,
    /// Transactions found executable in this pass.
    released: FxHashSet<TxnId>,
    next: u32,
}

struct Frame {
    id: TxnId,
    /// Its dependencies; the committed ones are its edges (statuses do not change during
    /// a pass, so they are told apart as the walk reaches them).
    edges: Deps,
    at: usize,
    /// The first thing found to block this transaction.
    blocker: Option<TxnId>,
}

impl Tarjan {
    fn open(&mut self, graph: &mut Graph, id: TxnId, pass: &mut Pass) -> Frame {
        self.index.insert(id, self.next);
        self.low.insert(id, self.next);
        self.next += 1;
        self.stack.push(id);
        self.on_stack.insert(id);
        let (edges, blocker) = graph.edges(id, &mut pass.missing);
        Frame {
            id,
            edges,
            at: 0,
            blocker,
        }
    }

    fn run(&mut self, graph: &mut Graph, root: TxnId, pass: &mut Pass) {
        let mut calls = vec![self.open(graph, root, pass)];
        while let Some(frame) = calls.last_mut() {
            // A transaction found blocked stops walking: it cannot execute this pass, and
            // an edge it skips could only merge it into a component that reaches it, which
            // is blocked too. Executable components walk every edge, so what a pass
            // releases is unchanged (a dense hot-key component is no longer walked whole
            // at each wake-up).
            if frame.at < frame.edges.len() && frame.blocker.is_none() {
                let w = frame.edges[frame.at].tag.id;
                frame.at += 1;
                if !graph.is_committed(w) {
                    continue;
                }
                let v = frame.id;
                let closed_blocked = self.index.contains_key(&w)
                    && !self.on_stack.contains(&w)
                    && !self.released.contains(&w);
                if graph.parked.contains_key(&w) || closed_blocked {
                    // Blocked: parked earlier, or closed blocked in this pass (and perhaps
                    // woken since by a stale wait list: it is walked again next pass, and
                    // what waits on it is woken with it).
                    frame.blocker = frame.blocker.or(Some(w));
                } else if !self.index.contains_key(&w) {
                    let child = self.open(graph, w, pass);
                    calls.push(child);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[&v].min(self.index[&w]);
                    self.low.insert(v, low);
                }
                continue;
            }
            let frame = calls.pop().expect("a frame");
            if let Some(blocker) = frame.blocker {
                self.member_blocker.insert(frame.id, blocker);
            }
            if let Some(parent) = calls.last_mut() {
                let low = self.low[&parent.id].min(self.low[&frame.id]);
                self.low.insert(parent.id, low);
                // The parent reaches what blocks the child: blocked too (it waits on the
                // same thing; woken with its component either way).
                parent.blocker = parent.blocker.or(frame.blocker);
            }
            if self.low[&frame.id] == self.index[&frame.id] {
                self.close(graph, frame.id, pass);
                if let Some(parent) = calls.last_mut() {
                    if graph.parked.contains_key(&frame.id) {
                        parent.blocker = parent.blocker.or(Some(frame.id));
                    }
                }
            }
        }
    }

    /// Pops the component rooted at `root`: parked if a member is blocked, else executable.
    fn close(&mut self, graph: &mut Graph, root: TxnId, pass: &mut Pass) {
        let mut members = Vec::new();
        loop {
            let w = self.stack.pop().expect("tarjan stack");
            self.on_stack.remove(&w);
            members.push(w);
            if w == root {
                break;
            }
        }
        let blockers: Vec<(TxnId, Option<TxnId>)> = members
            .iter()
            .map(|m| (*m, self.member_blocker.remove(m)))
            .collect();
        if blockers.iter().any(|(_, b)| b.is_some()) {
            graph.park(root, &blockers);
        } else {
            members.sort_unstable();
            pass.order.extend_from_slice(&members);
            self.released.extend(members.iter().copied());
            graph.release(&members);
        }
    }
}
