//! Inference of version orders and dependencies (DESIGN §7, Elle's list-append model).
//!
//! * **Internal consistency.** Within a committed transaction, a read must equal what its own
//!   earlier read and appends imply (or, with no earlier read, end with its own appends), a
//!   register read must equal its own earlier read or write, and no read may contain a value
//!   the transaction only appends later.
//! * **Version order of a list key** = its longest committed read; every other read must be a
//!   prefix of it (else *incompatible order*). Committed appends that no read shows come
//!   after it, in an unknown order.
//! * **Read checks.** Each element read must have a writer (else *garbage read*), not a
//!   `fail` one (*G1a*); an `info` writer whose element is read counts as committed. A read
//!   ending in an element its writer followed with another append to the same key is *G1b*.
//! * **Edges** (between committed transactions, never from a transaction to itself):
//!   ww between the writers of consecutive elements of the order (and from the writer of the
//!   last element to every unread appender); wr from the writer of the last element of an
//!   external read to the reader; rw from the reader to the writer of the first element after
//!   what it read (to every unread appender if it read the whole order).
//! * **Registers** (`w`/`r` of integers, unique per key) get wr edges from the unique writer
//!   only: unique values say who wrote what was read but not in which order versions were
//!   installed, and inferring that (Elle's "writes follow reads" and similar options) would
//!   assume properties of the system under test. So registers make no ww or rw edges; use
//!   list-append keys for full checking.

use crate::anomaly::AnomalyKind;
use crate::explain::{around, list};
use crate::graph::{KeyId, Node, RawEdge, Why};
use crate::history::{EntryType, HistOp, ReadValue};
use crate::index::{Facts, KeyType, ReadRef, Writer, NONE};
use rustc_hash::{FxHashMap, FxHashSet};

/// What a transaction's own earlier ops imply about its next read of a key.
enum Expect<'h> {
    /// Exactly `base ++ own` if it read `base`; otherwise a list ending with `own`.
    List {
        base: Option<&'h [i64]>,
        own: Vec<i64>,
    },
    Register(Option<i64>),
}

fn show(v: Option<i64>) -> String {
    v.map_or_else(|| "null".to_string(), |x| x.to_string())
}

fn is_prefix(v: &[i64], order: &[i64]) -> bool {
    v.len() <= order.len() && order[..v.len()] == *v
}

fn len32(v: &[i64]) -> u32 {
    u32::try_from(v.len()).unwrap_or(u32::MAX)
}

impl<'h> Facts<'h> {
    /// Flags committed transactions whose reads disagree with their own earlier ops.
    pub fn check_internal(&mut self) {
        let mut state: FxHashMap<KeyId, Expect<'h>> = FxHashMap::default();
        let mut problems = Vec::new();
        for t in 0..self.history.len() as Node {
            // With one op per key there is nothing to be inconsistent with.
            if self.status(t) != EntryType::Ok || !self.repeats_a_key(t) {
                continue;
            }
            if state.capacity() > 64 {
                state = FxHashMap::default(); // clear() would cost the old capacity every time
            }
            state.clear();
            self.internal_problems(t, &mut state, &mut problems);
            for why in problems.drain(..) {
                self.report(AnomalyKind::Internal, &[t], why);
            }
        }
    }

    fn internal_problems(
        &self,
        t: Node,
        state: &mut FxHashMap<KeyId, Expect<'h>>,
        out: &mut Vec<String>,
    ) {
        // Where each of `t`'s appends happens, to catch a read of an append that comes later.
        let appended: FxHashMap<(KeyId, i64), usize> = self
            .ops(t)
            .filter_map(|(i, op, k)| match op {
                HistOp::Append { value, .. } if self.key_type[k as usize] == KeyType::List => {
                    Some(((k, *value), i))
                }
                _ => None,
            })
            .collect();
        for (i, op, k) in self.ops(t) {
            match (op, self.key_type[k as usize]) {
                (HistOp::Append { value, .. }, KeyType::List) => {
                    if let Expect::List { own, .. } = state.entry(k).or_insert(Expect::List {
                        base: None,
                        own: Vec::new(),
                    }) {
                        own.push(*value);
                    }
                }
                (HistOp::Write { value, .. }, KeyType::Register) => {
                    state.insert(k, Expect::Register(Some(*value)));
                }
                (
                    HistOp::Read {
                        value: ReadValue::List(_) | ReadValue::Null,
                        ..
                    },
                    KeyType::List,
                ) => {
                    let v = self.list_read(ReadRef {
                        txn: t,
                        op: i as u32,
                        external: false,
                        prefix: false,
                    });
                    let later = |x: &&i64| appended.get(&(k, **x)).is_some_and(|&j| j > i);
                    if let Some(a) = v.iter().find(later) {
                        out.push(format!(
                            "{} read {} = {} containing {a}, which it appends only later",
                            self.name(t),
                            self.key(k),
                            list(v)
                        ));
                    }
                    out.extend(self.list_mismatch(t, k, v, state.get(&k)));
                    state.insert(
                        k,
                        Expect::List {
                            base: Some(v),
                            own: Vec::new(),
                        },
                    );
                }
                (HistOp::Read { value, .. }, KeyType::Register) => {
                    let x = match value {
                        ReadValue::Int(x) => Some(*x),
                        _ => None,
                    };
                    if let Some(Expect::Register(y)) = state.insert(k, Expect::Register(x)) {
                        if x != y {
                            let (n, key) = (self.name(t), self.key(k));
                            out.push(format!("{n} read {key} = {}, but its own earlier read or write of {key} implies {}", show(x), show(y)));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn list_mismatch(
        &self,
        t: Node,
        k: KeyId,
        v: &[i64],
        expect: Option<&Expect<'h>>,
    ) -> Option<String> {
        let (n, key) = (|| self.name(t), self.key(k));
        match expect? {
            Expect::List { base: Some(b), own } => {
                let ok = v.len() == b.len() + own.len() && v.starts_with(b) && v.ends_with(own);
                (!ok).then(|| {
                    let implied: Vec<i64> = b.iter().chain(own).copied().collect();
                    format!(
                        "{} read {key} = {}, but its own earlier read and appends imply {}",
                        n(),
                        list(v),
                        list(&implied)
                    )
                })
            }
            Expect::List { base: None, own } => (!v.ends_with(own)).then(|| {
                format!(
                    "{} read {key} = {}, which does not end with its own earlier appends {}",
                    n(),
                    list(v),
                    list(own)
                )
            }),
            Expect::Register(_) => None,
        }
    }

    /// Infers the version order of every list key (its longest committed read) and checks
    /// every committed read against it. Marks observed `info` writers as committed.
    pub fn list_orders(&mut self) -> Vec<&'h [i64]> {
        let mut orders: Vec<&'h [i64]> = vec![&[]; self.keys.len()];
        for k in 0..self.keys.len() as KeyId {
            if self.key_type[k as usize] != KeyType::List {
                continue;
            }
            let mut reads = std::mem::take(&mut self.reads[k as usize]);
            let longest = reads
                .iter()
                .copied()
                .fold(None, |best: Option<ReadRef>, r| match best {
                    Some(b) if self.list_read(b).len() >= self.list_read(r).len() => Some(b),
                    _ => Some(r),
                });
            if let Some(longest) = longest {
                orders[k as usize] = self.list_read(longest);
                self.place_elements(k, longest, &reads);
                let mut garbage = FxHashSet::default();
                for r in &mut reads {
                    r.prefix = is_prefix(self.list_read(*r), orders[k as usize]);
                    self.check_list_read(k, *r, longest, &mut garbage);
                }
            }
            self.reads[k as usize] = reads;
        }
        orders
    }

    /// Gives each element of the order its position, and checks its writer once for all the
    /// reads that contain it (they are prefixes of the order, or checked separately).
    fn place_elements(&mut self, k: KeyId, longest: ReadRef, reads: &[ReadRef]) {
        let order = self.list_read(longest);
        let mut duplicate = None;
        let mut first_readers = Vec::new(); // built on the first anomaly only
        let mut placed = Vec::with_capacity(order.len());
        for (p, &x) in order.iter().enumerate() {
            let w = match self.writers.get_mut(&(k, x)) {
                Some(w) if w.pos != NONE => {
                    duplicate = duplicate.or(Some(x));
                    placed.push(None);
                    continue;
                }
                Some(w) => {
                    w.pos = p as u32;
                    Some(*w)
                }
                None => None,
            };
            placed.push(w);
            if let Some(a) = w.and_then(|w| self.appends[k as usize].get_mut(w.slot as usize)) {
                a.placed = true;
            }
            if w.is_some_and(|w| self.status(w.txn) == EntryType::Ok) {
                continue;
            }
            if first_readers.is_empty() {
                first_readers = self.first_readers(reads, longest);
            }
            match w {
                None => self.garbage(k, first_readers[p], x),
                Some(w) => self.check_writer(k, first_readers[p], x, w),
            }
        }
        self.placed[k as usize] = placed;
        if let Some(x) = duplicate {
            let why = format!(
                "{} read {} = {}, which contains {x} more than once",
                self.name(longest.txn),
                self.key(k),
                list(order)
            );
            self.report(AnomalyKind::DuplicateElements, &[longest.txn], why);
        }
    }

    /// For each position of the order, the first read (in history order) that shows it.
    fn first_readers(&self, reads: &[ReadRef], longest: ReadRef) -> Vec<ReadRef> {
        let order = self.list_read(longest);
        let mut first = vec![longest; order.len()];
        let mut covered = 0; // positions below `covered` already have their first reader
        for &r in reads {
            let v = self.list_read(r);
            if v.len() > covered && is_prefix(v, order) {
                first[covered..v.len()].fill(r);
                covered = v.len();
            }
        }
        first
    }

    /// G1a for a `fail` writer; an observed `info` writer counts as committed.
    fn check_writer(&mut self, k: KeyId, r: ReadRef, x: i64, w: Writer) {
        match self.status(w.txn) {
            EntryType::Fail => {
                let v = self.list_read(r);
                let (rn, wn) = (self.name(r.txn), self.name(w.txn));
                let why = format!(
                    "{rn} read {} = {} including {x}, which {wn} appended, but {wn} failed",
                    self.key(k),
                    around(Some(x), len32(v), v.last() == Some(&x))
                );
                self.report(AnomalyKind::G1a, &[r.txn, w.txn], why);
            }
            EntryType::Info => self.included[w.txn as usize] = true,
            EntryType::Ok => {}
        }
    }

    fn garbage(&mut self, k: KeyId, r: ReadRef, x: i64) {
        let v = self.list_read(r);
        let why = format!(
            "{} read {} = {} but no transaction appended {x} to it",
            self.name(r.txn),
            self.key(k),
            around(Some(x), len32(v), v.last() == Some(&x))
        );
        self.report(AnomalyKind::GarbageRead, &[r.txn], why);
    }

    fn check_list_read(
        &mut self,
        k: KeyId,
        r: ReadRef,
        longest: ReadRef,
        garbage: &mut FxHashSet<i64>,
    ) {
        let (v, order) = (self.list_read(r), self.list_read(longest));
        if !r.prefix {
            let (a, b, key) = (self.name(longest.txn), self.name(r.txn), self.key(k));
            let why = format!(
                "{a} read {key} = {} and {b} read {key} = {}; neither is a prefix of the other",
                list(order),
                list(v)
            );
            self.report(AnomalyKind::IncompatibleOrder, &[longest.txn, r.txn], why);
            self.check_unordered_elements(k, r, garbage);
        }
        let Some(&x) = v.last() else { return };
        let w = if r.prefix {
            self.placed[k as usize][v.len() - 1]
        } else {
            self.writers.get(&(k, x)).copied()
        };
        let Some(w) = w else { return };
        if w.txn != r.txn && !w.last_in_txn && self.status(w.txn) != EntryType::Fail {
            let (rn, wn) = (self.name(r.txn), self.name(w.txn));
            let why = format!("{rn} read {} = {}, but {wn} appended more to {} after {x}: {rn} saw {wn}'s intermediate state", self.key(k), around(Some(x), len32(v), true), self.key(k));
            self.report(AnomalyKind::G1b, &[r.txn, w.txn], why);
        }
    }

    /// The elements of a read that is not a prefix of the order and so were not checked with it.
    fn check_unordered_elements(&mut self, k: KeyId, r: ReadRef, garbage: &mut FxHashSet<i64>) {
        let v = self.list_read(r);
        let mut seen = FxHashSet::default();
        let mut duplicate = false;
        for &x in v {
            duplicate |= !seen.insert(x);
            match self.writers.get(&(k, x)).copied() {
                None if garbage.insert(x) => self.garbage(k, r, x),
                Some(w) if w.pos == NONE => self.check_writer(k, r, x, w),
                _ => {}
            }
        }
        if duplicate {
            let why = format!(
                "{} read {} = {}, which contains an element more than once",
                self.name(r.txn),
                self.key(k),
                list(v)
            );
            self.report(AnomalyKind::DuplicateElements, &[r.txn], why);
        }
    }

    /// Checks committed register reads against their unique writers.
    pub fn register_reads(&mut self) {
        for k in 0..self.keys.len() as KeyId {
            if self.key_type[k as usize] != KeyType::Register {
                continue;
            }
            let reads = std::mem::take(&mut self.reads[k as usize]);
            for &r in &reads {
                if let ReadValue::Int(x) = self.read_value(r) {
                    self.check_register_read(k, r, *x);
                }
            }
            self.reads[k as usize] = reads;
        }
    }

    fn check_register_read(&mut self, k: KeyId, r: ReadRef, x: i64) {
        let (rn, key) = (self.name(r.txn), self.key(k));
        let Some(&w) = self.writers.get(&(k, x)) else {
            return self.report(
                AnomalyKind::GarbageRead,
                &[r.txn],
                format!("{rn} read {key} = {x} but no transaction wrote {x} to it"),
            );
        };
        let wn = self.name(w.txn);
        if w.txn == r.txn {
            if w.op > r.op {
                self.report(
                    AnomalyKind::Internal,
                    &[r.txn],
                    format!("{rn} read {key} = {x}, which it writes only later"),
                );
            }
            return;
        }
        match self.status(w.txn) {
            EntryType::Fail => self.report(
                AnomalyKind::G1a,
                &[r.txn, w.txn],
                format!("{rn} read {key} = {x}, which {wn} wrote, but {wn} failed"),
            ),
            EntryType::Info => self.included[w.txn as usize] = true,
            EntryType::Ok => {}
        }
        if !w.last_in_txn && self.status(w.txn) != EntryType::Fail {
            let why = format!("{rn} read {key} = {x}, but {wn} wrote {key} again after {x}: {rn} saw {wn}'s intermediate state");
            self.report(AnomalyKind::G1b, &[r.txn, w.txn], why);
        }
    }
}

/// The ww, wr and rw edges of every key, given the list version orders.
pub(crate) fn data_edges(facts: &Facts<'_>, orders: &[&[i64]]) -> Vec<RawEdge> {
    let mut edges = Vec::new();
    for k in 0..facts.keys.len() as KeyId {
        match facts.key_type[k as usize] {
            KeyType::List => ListEdges::new(facts, k, orders[k as usize], &mut edges).all(),
            KeyType::Register => register_edges(facts, k, &mut edges),
            KeyType::Untyped => {}
        }
    }
    edges
}

fn register_edges(facts: &Facts<'_>, k: KeyId, edges: &mut Vec<RawEdge>) {
    for &r in facts.reads[k as usize].iter().filter(|r| r.external) {
        let ReadValue::Int(x) = facts.read_value(r) else {
            continue;
        };
        let Some(w) = facts.writers.get(&(k, *x)) else {
            continue;
        };
        if facts.included[w.txn as usize] && w.txn != r.txn {
            edges.push(RawEdge {
                from: w.txn,
                to: r.txn,
                why: Why::ReadRegister { key: k, value: *x },
            });
        }
    }
}

/// The edges of one list key.
struct ListEdges<'a, 'h> {
    facts: &'a Facts<'h>,
    key: KeyId,
    order: &'h [i64],
    placed: &'a [Option<Writer>],
    edges: &'a mut Vec<RawEdge>,
    /// The committed appends no read shows: one (writer, value) per writer.
    unread: Vec<(Node, i64)>,
}

impl<'a, 'h> ListEdges<'a, 'h> {
    fn new(
        facts: &'a Facts<'h>,
        key: KeyId,
        order: &'h [i64],
        edges: &'a mut Vec<RawEdge>,
    ) -> Self {
        let placed = &facts.placed[key as usize];
        ListEdges {
            facts,
            key,
            order,
            placed,
            edges,
            unread: Vec::new(),
        }
    }

    fn all(mut self) {
        let last = self.version_edges();
        self.unread_edges(last);
        for &r in self.facts.reads[self.key as usize]
            .iter()
            .filter(|r| r.external)
        {
            self.read_edges(r);
        }
    }

    /// The committed writer of position `p` of the order (`None` for a garbage, aborted
    /// or repeated element).
    fn committed(&self, p: usize) -> Option<Node> {
        let w = self.placed.get(p).copied().flatten()?;
        self.facts.included[w.txn as usize].then_some(w.txn)
    }

    fn push(&mut self, from: Node, to: Node, why: Why) {
        if from != to {
            self.edges.push(RawEdge { from, to, why });
        }
    }

    /// ww edges along the order; returns the last committed (writer, element).
    fn version_edges(&mut self) -> Option<(Node, i64)> {
        let mut prev: Option<(Node, i64)> = None;
        for (p, &x) in self.order.iter().enumerate() {
            let Some(w) = self.committed(p) else { continue };
            if let Some((pw, px)) = prev {
                self.push(
                    pw,
                    w,
                    Why::NextAppend {
                        key: self.key,
                        prev: px,
                        next: x,
                    },
                );
            }
            prev = Some((w, x));
        }
        prev
    }

    fn unread_edges(&mut self, last: Option<(Node, i64)>) {
        for a in &self.facts.appends[self.key as usize] {
            // A transaction's appends to a key are contiguous in `appends`, so comparing
            // with the last unread one keeps one per writer.
            if a.placed
                || !self.facts.included[a.txn as usize]
                || self.unread.last().is_some_and(|u| u.0 == a.txn)
            {
                continue;
            }
            self.unread.push((a.txn, a.value));
            if let Some((lw, lx)) = last {
                if lw != a.txn {
                    self.edges.push(RawEdge {
                        from: lw,
                        to: a.txn,
                        why: Why::UnreadAppend {
                            key: self.key,
                            prev: lx,
                            next: a.value,
                        },
                    });
                }
            }
        }
    }

    fn read_edges(&mut self, r: ReadRef) {
        let v = self.facts.list_read(r);
        // wr from the last element with a committed writer (the ones after it are already
        // reported as garbage or aborted reads).
        let found = if r.prefix {
            (0..v.len())
                .rev()
                .find_map(|p| Some((p, v[p], self.committed(p)?)))
        } else {
            v.iter().enumerate().rev().find_map(|(i, &x)| {
                let w = self.facts.writers.get(&(self.key, x))?;
                self.facts.included[w.txn as usize].then_some((i, x, w.txn))
            })
        };
        if let Some((i, x, w)) = found {
            let why = Why::ReadList {
                key: self.key,
                value: x,
                read_len: len32(v),
                last: i + 1 == v.len(),
            };
            self.push(w, r.txn, why);
        }
        if r.prefix {
            self.anti_dependencies(r, v);
        }
    }

    /// rw from a reader to the writer of the next element it did not see. The writer of the
    /// read's own last element is skipped: seeing part of its appends is G1b, reported apart.
    fn anti_dependencies(&mut self, r: ReadRef, v: &[i64]) {
        let writer_of_last = v
            .len()
            .checked_sub(1)
            .and_then(|p| self.placed[p])
            .map(|w| w.txn);
        let (key, last, read_len) = (self.key, v.last().copied(), len32(v));
        let why = move |next| Why::MissedAppend {
            key,
            last,
            read_len,
            next,
        };
        for p in v.len()..self.order.len() {
            match self.committed(p) {
                Some(w) if Some(w) != writer_of_last => {
                    return self.push(r.txn, w, why(self.order[p]))
                }
                _ => {}
            }
        }
        for i in 0..self.unread.len() {
            let (w, a) = self.unread[i];
            if Some(w) != writer_of_last {
                self.push(r.txn, w, why(a));
            }
        }
    }
}
