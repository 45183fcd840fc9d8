//! The facts the inference works from, gathered in two passes over the history: interned
//! keys and their types, who wrote each (key, value), and every read by a committed
//! transaction. Keys are interned once (`&str` borrowed from the history, never cloned) and
//! everything downstream uses integer transaction and key ids.

use crate::anomaly::{Anomaly, AnomalyKind, TxnRef};
use crate::graph::{KeyId, Node};
use crate::history::{Entry, EntryType, HistOp, ReadValue};
use rustc_hash::FxHashMap;

pub(crate) const NONE: u32 = u32::MAX;

/// How a key is used. Set by the first op that says (a null read says nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyType {
    Untyped,
    List,
    Register,
}

fn op_type(op: &HistOp) -> KeyType {
    match op {
        HistOp::Append { .. }
        | HistOp::Read {
            value: ReadValue::List(_),
            ..
        } => KeyType::List,
        HistOp::Write { .. }
        | HistOp::Read {
            value: ReadValue::Int(_),
            ..
        } => KeyType::Register,
        HistOp::Read {
            value: ReadValue::Null,
            ..
        } => KeyType::Untyped,
    }
}

/// The writer of one (key, value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Writer {
    pub txn: Node,
    /// The op's position in the transaction.
    pub op: u32,
    /// Whether this is the transaction's final append/write to the key.
    pub last_in_txn: bool,
    /// Position in the key's version order, `NONE` if no read shows it.
    pub pos: u32,
    /// Index in the key's `appends` (`NONE` for register writes).
    pub slot: u32,
}

/// One append to a list key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Appended {
    pub value: i64,
    pub txn: Node,
    /// Whether the value appears in the key's version order.
    pub placed: bool,
}

/// A read by a committed (`ok`) transaction, of the key's own type or null.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadRef {
    pub txn: Node,
    pub op: u32,
    /// The transaction's first op on the key (Elle's "external read"): it shows the state
    /// other transactions produced. Only these make wr/rw edges; later reads of the key are
    /// checked against the transaction's own ops instead.
    pub external: bool,
    /// For list reads: whether the read is a prefix of the key's version order (set when
    /// the order is inferred).
    pub prefix: bool,
}

/// Everything the inference needs, indexed.
pub(crate) struct Facts<'h> {
    pub history: &'h [Entry],
    pub keys: Vec<&'h str>,
    pub key_type: Vec<KeyType>,
    op_start: Vec<u32>,
    op_keys: Vec<KeyId>,
    pub writers: FxHashMap<(KeyId, i64), Writer>,
    /// Per list key, the appends, in history order (first writer of each value only).
    pub appends: Vec<Vec<Appended>>,
    /// Per list key, the writer of each position of its version order (`NONE` for a value
    /// nobody wrote or one repeated earlier in the order).
    pub placed: Vec<Vec<Option<Writer>>>,
    /// Per key, the reads by committed transactions, in history order.
    pub reads: Vec<Vec<ReadRef>>,
    /// `ok`, or `info` with a write some committed read observed.
    pub included: Vec<bool>,
    pub anomalies: Vec<Anomaly>,
}

impl<'h> Facts<'h> {
    pub fn new(history: &'h [Entry]) -> Facts<'h> {
        let mut facts = Facts {
            history,
            keys: Vec::new(),
            key_type: Vec::new(),
            op_start: Vec::with_capacity(history.len() + 1),
            op_keys: Vec::new(),
            writers: FxHashMap::default(),
            appends: Vec::new(),
            placed: Vec::new(),
            reads: Vec::new(),
            included: history.iter().map(|e| e.kind == EntryType::Ok).collect(),
            anomalies: Vec::new(),
        };
        facts.intern();
        facts.index_ops();
        facts
    }

    /// Pass 1: key ids, key types (a key used both ways is malformed), bad intervals.
    fn intern(&mut self) {
        let mut ids: FxHashMap<&'h str, KeyId> = FxHashMap::default();
        let mut witness: Vec<Node> = Vec::new();
        let mut mixed: Vec<bool> = Vec::new();
        let history = self.history;
        for (t, entry) in history.iter().enumerate() {
            self.op_start.push(self.op_keys.len() as u32);
            for op in &entry.ops {
                let next = self.keys.len() as KeyId;
                let k = *ids.entry(op.key()).or_insert(next);
                if k == next {
                    self.keys.push(op.key());
                    self.key_type.push(KeyType::Untyped);
                    witness.push(NONE);
                    mixed.push(false);
                }
                self.op_keys.push(k);
                let (ku, ty) = (k as usize, op_type(op));
                if ty == KeyType::Untyped || ty == self.key_type[ku] {
                    continue;
                }
                if self.key_type[ku] == KeyType::Untyped {
                    (self.key_type[ku], witness[ku]) = (ty, t as Node);
                } else if !mixed[ku] {
                    mixed[ku] = true;
                    self.mixed_key(k, witness[ku], t as Node);
                }
            }
            if entry.complete_ns < entry.invoke_ns {
                let why = format!(
                    "{} completed at {} ns, before it was invoked at {} ns",
                    self.name(t as Node),
                    entry.complete_ns,
                    entry.invoke_ns
                );
                self.report(AnomalyKind::Malformed, &[t as Node], why);
            }
        }
        self.op_start.push(self.op_keys.len() as u32);
        let writes = history
            .iter()
            .flat_map(|e| &e.ops)
            .filter(|op| !matches!(op, HistOp::Read { .. }))
            .count();
        self.writers.reserve(writes);
        self.appends = vec![Vec::new(); self.keys.len()];
        self.placed = vec![Vec::new(); self.keys.len()];
        self.reads = vec![Vec::new(); self.keys.len()];
    }

    fn mixed_key(&mut self, k: KeyId, first: Node, other: Node) {
        let ty = self.key_type[k as usize];
        let (as_, other_as) = if ty == KeyType::List {
            ("a list", "a register")
        } else {
            ("a register", "a list")
        };
        let why = format!(
            "key {} is used as {as_} by {} and as {other_as} by {}; ops of the second kind are ignored",
            self.keys[k as usize],
            self.name(first),
            self.name(other)
        );
        self.report(AnomalyKind::Malformed, &[first, other], why);
    }

    /// Pass 2: writers (a value written twice is malformed), appends and committed reads.
    fn index_ops(&mut self) {
        // Per key, the last transaction that touched it / was seen writing it from the end:
        // stamps instead of per-transaction sets.
        let mut touched = vec![NONE; self.keys.len()];
        let mut seen_last = vec![NONE; self.keys.len()];
        let mut last_write = Vec::new();
        let history = self.history;
        for t in 0..history.len() as Node {
            let ok = history[t as usize].kind == EntryType::Ok;
            self.last_writes(t, &mut seen_last, &mut last_write);
            for (i, op) in history[t as usize].ops.iter().enumerate() {
                let k = self.op_key(t, i);
                if let Some(value) = self.write_value(op, k) {
                    self.add_writer(
                        t,
                        i,
                        k,
                        value,
                        last_write[i],
                        matches!(op, HistOp::Append { .. }),
                    );
                } else if ok && self.is_typed_read(op, k) {
                    let external = touched[k as usize] != t;
                    self.reads[k as usize].push(ReadRef {
                        txn: t,
                        op: i as u32,
                        external,
                        prefix: true,
                    });
                }
                touched[k as usize] = t;
            }
        }
    }

    /// Sets `last[i]` iff op `i` of `t` is its final append/write to that key.
    fn last_writes(&self, t: Node, seen_last: &mut [u32], last: &mut Vec<bool>) {
        let ops = &self.history[t as usize].ops;
        last.clear();
        last.resize(ops.len(), false);
        for i in (0..ops.len()).rev() {
            let k = self.op_key(t, i);
            if self.write_value(&ops[i], k).is_some() && seen_last[k as usize] != t {
                seen_last[k as usize] = t;
                last[i] = true;
            }
        }
    }

    fn add_writer(
        &mut self,
        t: Node,
        i: usize,
        k: KeyId,
        value: i64,
        last_in_txn: bool,
        append: bool,
    ) {
        let slot = if append {
            self.appends[k as usize].len() as u32
        } else {
            NONE
        };
        let writer = Writer {
            txn: t,
            op: i as u32,
            last_in_txn,
            pos: NONE,
            slot,
        };
        let first = *self.writers.entry((k, value)).or_insert(writer);
        if first.txn != t || first.op != i as u32 {
            let why = format!(
                "{} and {} both write {value} to {}; values must be unique per key, the first writer is kept",
                self.name(first.txn),
                self.name(t),
                self.keys[k as usize]
            );
            self.report(AnomalyKind::Malformed, &[first.txn, t], why);
        } else if append {
            self.appends[k as usize].push(Appended {
                value,
                txn: t,
                placed: false,
            });
        }
    }

    /// The value an append/write installs, if its kind matches the key's type.
    fn write_value(&self, op: &HistOp, k: KeyId) -> Option<i64> {
        match op {
            HistOp::Append { value, .. } | HistOp::Write { value, .. }
                if op_type(op) == self.key_type[k as usize] =>
            {
                Some(*value)
            }
            _ => None,
        }
    }

    fn is_typed_read(&self, op: &HistOp, k: KeyId) -> bool {
        let ty = self.key_type[k as usize];
        match op {
            HistOp::Read {
                value: ReadValue::Null,
                ..
            } => ty != KeyType::Untyped,
            HistOp::Read { .. } => op_type(op) == ty,
            _ => false,
        }
    }

    pub fn op_key(&self, t: Node, i: usize) -> KeyId {
        self.op_keys[self.op_start[t as usize] as usize + i]
    }

    /// Whether `t` has two ops on the same key.
    pub fn repeats_a_key(&self, t: Node) -> bool {
        let keys = &self.op_keys
            [self.op_start[t as usize] as usize..self.op_start[t as usize + 1] as usize];
        if keys.len() <= 16 {
            return (1..keys.len()).any(|i| keys[..i].contains(&keys[i]));
        }
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        sorted.windows(2).any(|w| w[0] == w[1])
    }

    /// The ops of `t` with their position and key id.
    pub fn ops(&self, t: Node) -> impl Iterator<Item = (usize, &'h HistOp, KeyId)> + '_ {
        let history: &'h [Entry] = self.history;
        history[t as usize]
            .ops
            .iter()
            .enumerate()
            .map(move |(i, op)| (i, op, self.op_key(t, i)))
    }

    pub fn read_value(&self, r: ReadRef) -> &'h ReadValue {
        let history: &'h [Entry] = self.history;
        match &history[r.txn as usize].ops[r.op as usize] {
            HistOp::Read { value, .. } => value,
            _ => &ReadValue::Null,
        }
    }

    /// A list read's elements (null is the empty list).
    pub fn list_read(&self, r: ReadRef) -> &'h [i64] {
        match self.read_value(r) {
            ReadValue::List(v) => v,
            _ => &[],
        }
    }

    pub fn status(&self, t: Node) -> EntryType {
        self.history[t as usize].kind
    }

    pub fn txn(&self, t: Node) -> TxnRef {
        let e = &self.history[t as usize];
        TxnRef {
            index: e.index,
            process: e.process,
        }
    }

    /// "T17", the name explanations use.
    pub fn name(&self, t: Node) -> String {
        format!("T{}", self.history[t as usize].index)
    }

    pub fn key(&self, k: KeyId) -> &'h str {
        self.keys[k as usize]
    }

    pub fn report(&mut self, kind: AnomalyKind, txns: &[Node], explanation: String) {
        let txns = txns.iter().map(|&t| self.txn(t)).collect();
        self.anomalies.push(Anomaly {
            kind,
            txns,
            cycle: Vec::new(),
            explanation,
        });
    }
}
