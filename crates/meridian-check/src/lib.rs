//! `meridian-check`: histories and the isolation checker (DESIGN §7).
//!
//! * [`history`] — the JSON Lines history format (one completed transaction per line).
//! * [`check`] / [`check_with`] — verify a history against a [`Model`]; the [`CheckReport`]
//!   serializes to JSON and displays every anomaly with its explanation.
//!
//! ```
//! use meridian_check::{check, history::read_jsonl, Model};
//! let text = r#"{"index": 0, "process": 0, "type": "ok", "invoke_ns": 0, "complete_ns": 10, "ops": [["append", "x", 1]]}
//! {"index": 1, "process": 1, "type": "ok", "invoke_ns": 20, "complete_ns": 30, "ops": [["r", "x", []]]}"#;
//! let history = read_jsonl(text.as_bytes()).unwrap();
//! assert!(check(&history, Model::Serializable).valid);
//! let report = check(&history, Model::StrictSerializable);
//! assert!(!report.valid); // T1 started after T0 completed, yet missed its append
//! println!("{report}");
//! ```
//!
//! # Models
//!
//! | model | rejects |
//! |---|---|
//! | `serializable` | every non-cycle anomaly below, and every cycle of ww/wr/rw edges (G0, G1c, G-single, G-nonadjacent, G2) |
//! | `snapshot-isolation` | the same except G2 (two or more rw edges, two of them adjacent: write skew), which is listed under `allowed` |
//! | `strict-serializable` | serializable, plus cycles through real-time edges (`T1` completed before `T2` was invoked) |
//! | `strong-partition-serializable` | serializable, plus cycles through real-time edges between transactions that touch a common key |
//! | `declared-strict-serializable` | strong partition serializable, plus cycles through the real-time edges of declared out-of-band dependencies: `T1 → T2` when T2's entry lists T1's `index` in `after` (T2's client saw T1 complete, DAST §4.5). A declaration naming no other transaction of the history, or one that completed after T2 was invoked, is malformed (completing at T2's invocation instant is fine: the client saw it first) |
//!
//! # Anomalies
//!
//! Cycles (Adya): **G0** ww edges only; **G1c** ww/wr with at least one wr; **G-single**
//! exactly one rw; **G-nonadjacent** two or more rw, no two adjacent; **G2** two or more rw,
//! two adjacent; **real-time** a cycle that needs a real-time edge. Others: **G1a** aborted
//! read, **G1b** intermediate read, **incompatible-order** (two reads of a list, neither a
//! prefix of the other), **duplicate-elements**, **garbage-read** (a value nobody wrote),
//! **internal** (a read contradicting its transaction's own earlier ops), **malformed** (a
//! value written twice to a key, a key used both as list and register, completion before
//! invocation) and **cycle-search-timeout** (see the search budget below). A cycle anomaly
//! carries a shortest cycle through the edge that exhibits it (BFS within its strongly
//! connected component), each transaction (index, process), and for each step the edge
//! type and the key and values behind it, e.g. `T17 appended 5 to x; T23 read x = [.., 5]
//! (wr)` or `T3 read x = [1] which misses T9's append of 2 (rw)`.
//!
//! # Inference rules (Elle's list-append model)
//!
//! * **Who committed.** `ok` transactions did; `fail` ones did not (reading their writes is
//!   G1a); an `info` transaction counts as committed iff a committed read observes one of
//!   its writes. Only `ok` transactions' reads are used.
//! * **Version order of a list key**: its longest committed read. Every other read must be a
//!   prefix of it (else incompatible-order). Appends of committed transactions that no read
//!   shows come after it, in an unknown order.
//! * **ww** between the writers of consecutive elements of the order, and from the writer of
//!   its last element to each unread appender. **wr** from the writer of the last element
//!   of a read to the reader. **rw** from a reader to the writer of the first element after
//!   what it read, or to every unread appender if it read the whole order. A null read of a
//!   list key is the empty list.
//! * **Own writes.** Only a transaction's *external* read of a key (its first op on the key,
//!   as in Elle) makes wr/rw edges, and no edge joins a transaction to itself, so reading
//!   your own writes is free; every later read must equal what the transaction's own earlier
//!   read and appends imply (or end with its own appends), and no read may contain a value
//!   the transaction appends only later (else internal).
//! * **G1b**: a read ending in an element whose writer appended to the key again later. Its
//!   rw edge skips that writer's remaining appends (the G1b already explains them).
//! * **Registers** (`w`/`r` of unique integers) get wr edges from the unique writer, G1a,
//!   G1b, garbage and internal checks, but no ww or rw edges: unique values tell who wrote
//!   what was read, not the order in which versions were installed, and guessing it (Elle's
//!   "writes follow reads" and similar options) would assume properties of the system under
//!   test. Use list-append keys for full checking.
//!
//! # Choices where Elle and Adya leave room
//!
//! * **Snapshot isolation also rejects G-nonadjacent**, as Elle does: under SI each ww/wr
//!   edge goes from a commit to a later start and each rw edge from a start to a later
//!   commit, so a cycle without two adjacent rw edges would have strictly increasing start
//!   times. Write skew (adjacent rw edges) is allowed. A G-single cycle is reported as
//!   G-single, not also as G-nonadjacent.
//! * **Real time** bounds only transactions with a known completion: an `info` transaction
//!   may take effect any time after its invocation, so it receives real-time edges but
//!   gives none (likewise a malformed one that completes before it is invoked).
//!   `complete_ns == invoke_ns` does not order two transactions.
//! * **Real-time edges through barriers.** Elle's frontier reduction is quadratic when many
//!   transactions complete together and many start after them. Instead, a sweep over
//!   invocations and completions places a barrier node at each invocation that follows new
//!   completions: the completed transactions and the previous barrier point to it, and it
//!   points to the transactions invoked until the next barrier. `T1 → T2` in real time iff
//!   a path through barriers exists, with at most three links per transaction (per key and
//!   transaction for strong partition serializability). Barriers cost nothing in the
//!   searches, so a cycle's length counts transactions, and a chain of links is shown as
//!   one `rt` step.
//! * **Classification.** Tarjan (iterative) over ww/wr/rw edges; in each cyclic component,
//!   G0 and G1c come from Tarjan restricted to ww / ww+wr (linear); G-single, G-nonadjacent
//!   and G2 from a breadth-first search over (transaction, path state) pairs through each
//!   rw edge until one closes. Each class is reported once per component. With real time,
//!   Tarjan runs again over all edges, and each component whose transactions do not all lie
//!   in one data cycle component gets one real-time anomaly (the shortest cycle found,
//!   trying data edges that point backwards in time first).
//! * **Search budget.** The per-rw-edge searches can be quadratic in a large component, so
//!   they share a budget of edge visits ([`CheckOptions::search_budget`]). Other models
//!   reject any cycle, so there the budget only limits naming (a fallback names the
//!   shortest cycle through some edge); under snapshot isolation, running out before
//!   G-single and G-nonadjacent are ruled out is reported as `cycle-search-timeout`: not
//!   proven valid.
//! * **Reporting.** A non-cycle anomaly is reported once per offending read (or, for an
//!   element of the version order, once per element, naming the first read that shows it);
//!   every model rejects them. Anomalies a model allows go to [`CheckReport::allowed`].

mod anomaly;
mod cycles;
mod explain;
mod graph;
pub mod history;
mod index;
mod infer;
mod model;
mod realtime;
mod report;
mod scc;
mod search;

pub use anomaly::{Anomaly, AnomalyKind, EdgeType, Step, TxnRef};
pub use history::{Entry, EntryType, HistOp, History, HistoryError, ReadValue};
pub use model::{Model, UnknownModel};
pub use report::{CheckReport, EdgeCounts, Stats};

use graph::Graph;
use index::Facts;
use std::time::Instant;

/// Tuning for [`check_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Edge visits the budgeted cycle searches may spend in total (see the crate doc).
    pub search_budget: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            search_budget: 50_000_000,
        }
    }
}

/// Checks `history` against `model` with default options.
pub fn check(history: &[Entry], model: Model) -> CheckReport {
    check_with(history, model, &CheckOptions::default())
}

/// Checks `history` against `model`. Never panics: contradictory or malformed input shows up
/// as anomalies.
pub fn check_with(history: &[Entry], model: Model, options: &CheckOptions) -> CheckReport {
    let started = Instant::now();
    let mut facts = Facts::new(history);
    facts.check_internal();
    let orders = facts.list_orders();
    facts.register_reads();
    let mut edges = infer::data_edges(&facts, &orders);
    if model.real_time() == Some(model::RealTime::PerKeyAndDeclared) {
        realtime::add_declared_edges(&mut facts, &mut edges);
    }
    let txns = history.len() as u32;
    let barriers = model
        .real_time()
        .map_or(0, |scope| realtime::add_edges(&facts, scope, &mut edges));
    let g = Graph::build(txns, txns + barriers, edges);
    let (cycles, cyclic_components) = cycles::find(&g, history, model, options.search_budget);
    let mut all = std::mem::take(&mut facts.anomalies);
    all.extend(cycles.iter().map(|c| explain::cycle_anomaly(&facts, &g, c)));
    all.sort_by_key(|a| a.kind);
    let (anomalies, allowed): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|a| model.proscribes(a.kind));
    let stats = stats(&facts, &g, barriers, cyclic_components, started);
    CheckReport {
        model,
        valid: anomalies.is_empty(),
        anomalies,
        allowed,
        stats,
    }
}

fn stats(
    facts: &Facts<'_>,
    g: &Graph,
    barriers: u32,
    cyclic_components: u64,
    started: Instant,
) -> Stats {
    let count = |kind: EntryType| facts.history.iter().filter(|e| e.kind == kind).count() as u64;
    let info_included = facts
        .history
        .iter()
        .zip(&facts.included)
        .filter(|(e, &inc)| inc && e.kind == EntryType::Info)
        .count();
    let [ww, wr, rw, rt] = g.counts.0;
    Stats {
        txns: facts.history.len() as u64,
        ok: count(EntryType::Ok),
        fail: count(EntryType::Fail),
        info: count(EntryType::Info),
        info_included: info_included as u64,
        keys: facts.keys.len() as u64,
        edges: EdgeCounts { ww, wr, rw, rt },
        barriers: barriers as u64,
        cyclic_components,
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
    }
}
