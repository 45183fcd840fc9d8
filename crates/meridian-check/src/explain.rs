//! Human explanations: lists, reads and the one-line reason behind each edge.

use crate::anomaly::{Anomaly, AnomalyKind, EdgeType, Step};
use crate::cycles::{classify, Found};
use crate::graph::{EdgeKind, Graph, KeyId, Node, Why};
use crate::index::Facts;
use std::fmt::Write;

/// Lists longer than this are shown with their middle elided.
const SHOWN: usize = 10;

/// "[1, 2, 3]", or for long lists "[1, 2, 3, .. (95 more) .., 98, 99, 100]".
pub(crate) fn list(v: &[i64]) -> String {
    let join = |xs: &[i64]| xs.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    if v.len() <= SHOWN {
        return format!("[{}]", join(v));
    }
    let (head, tail) = (&v[..3], &v[v.len() - 3..]);
    format!(
        "[{}, .. ({} more) .., {}]",
        join(head),
        v.len() - 6,
        join(tail)
    )
}

/// A read of `read_len` elements shown around one element of it: "[]", "[5]", "[.., 5]",
/// or "[.., 5, ..]" when `value` is not its last element.
pub(crate) fn around(value: Option<i64>, read_len: u32, last: bool) -> String {
    let mut s = String::from("[");
    if let Some(v) = value {
        if read_len > 1 {
            s.push_str(".., ");
        }
        let _ = write!(s, "{v}");
        if !last {
            s.push_str(", ..");
        }
    }
    s.push(']');
    s
}

/// Why `from -> to` holds, for a data edge ("T17 appended 5 to x; T23 read x = [.., 5] (wr)").
pub(crate) fn data_edge(facts: &Facts<'_>, from: Node, to: Node, why: Why) -> String {
    let (a, b) = (facts.name(from), facts.name(to));
    let key = |k: KeyId| facts.key(k);
    match why {
        Why::NextAppend { key: k, prev, next } => {
            format!("{a} appended {prev} to {}; {b} appended {next} right after it (ww)", key(k))
        }
        Why::UnreadAppend { key: k, prev, next } => format!(
            "{a} appended {prev} to {}, the last element any read shows; no read saw {b}'s append of {next}, so it comes later (ww)",
            key(k)
        ),
        Why::ReadList { key: k, value, read_len, last } => {
            format!("{a} appended {value} to {0}; {b} read {0} = {1} (wr)", key(k), around(Some(value), read_len, last))
        }
        Why::ReadRegister { key: k, value } => format!("{a} wrote {0} = {value}; {b} read {0} = {value} (wr)", key(k)),
        Why::MissedAppend { key: k, last, read_len, next } => format!(
            "{a} read {} = {} which misses {b}'s append of {next} (rw)",
            key(k),
            around(last, read_len, true)
        ),
        Why::RealTime { key: k } => real_time(facts, from, to, k),
    }
}

/// Why `from -> to` holds in real time.
pub(crate) fn real_time(facts: &Facts<'_>, from: Node, to: Node, key: Option<KeyId>) -> String {
    let (f, t) = (&facts.history[from as usize], &facts.history[to as usize]);
    let mut s = format!(
        "{} completed at {} ns, before {} was invoked at {} ns",
        facts.name(from),
        f.complete_ns,
        facts.name(to),
        t.invoke_ns
    );
    if let Some(k) = key {
        let _ = write!(s, "; both touch {}", facts.key(k));
    }
    s.push_str(" (rt)");
    s
}

/// Turns a cycle's edges into steps between transactions: a run of real-time links through
/// barrier nodes becomes one `rt` step.
pub(crate) fn steps(facts: &Facts<'_>, g: &Graph, edges: &[usize]) -> Vec<Step> {
    let n = edges.len();
    // Barrier chains are acyclic, so every cycle has a transaction to start from.
    let Some(start) = (0..n).find(|&i| !g.is_barrier(g.from(edges[i]))) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut from = g.from(edges[start]);
    let mut rt_key: Option<Option<KeyId>> = None;
    for j in 0..n {
        let e = edges[(start + j) % n];
        if let Why::RealTime { key } = g.why(e) {
            rt_key = Some(key);
        }
        let to = g.to(e);
        if g.is_barrier(to) {
            continue;
        }
        let (edge, key, explanation) = match rt_key.take() {
            Some(key) => (EdgeType::Rt, key, real_time(facts, from, to, key)),
            None => (
                edge_type(g.kind(e)),
                why_key(g.why(e)),
                data_edge(facts, from, to, g.why(e)),
            ),
        };
        let key = key.map(|k| facts.key(k).to_string());
        out.push(Step {
            from: facts.txn(from),
            to: facts.txn(to),
            edge,
            key,
            explanation,
        });
        from = to;
    }
    out
}

fn edge_type(kind: EdgeKind) -> EdgeType {
    match kind {
        EdgeKind::Ww => EdgeType::Ww,
        EdgeKind::Wr => EdgeType::Wr,
        EdgeKind::Rw => EdgeType::Rw,
        EdgeKind::Rt => EdgeType::Rt,
    }
}

fn why_key(why: Why) -> Option<KeyId> {
    Some(match why {
        Why::NextAppend { key, .. }
        | Why::UnreadAppend { key, .. }
        | Why::ReadList { key, .. }
        | Why::ReadRegister { key, .. }
        | Why::MissedAppend { key, .. } => key,
        Why::RealTime { key } => return key,
    })
}

/// The anomaly for a cycle found by the classifier.
pub(crate) fn cycle_anomaly(facts: &Facts<'_>, g: &Graph, found: &Found) -> Anomaly {
    let cycle = steps(facts, g, &found.edges);
    let txns: Vec<_> = cycle.iter().map(|s| s.from).collect();
    let count = |t: EdgeType| cycle.iter().filter(|s| s.edge == t).count();
    let (n, rw, rt) = (txns.len(), count(EdgeType::Rw), count(EdgeType::Rt));
    let what = match found.kind {
        AnomalyKind::G0 => format!("write cycle (ww edges only) through {n} transactions"),
        AnomalyKind::G1c => format!("circular information flow (ww/wr edges) through {n} transactions"),
        AnomalyKind::GSingle => format!("cycle through {n} transactions with exactly one anti-dependency (rw) edge (read skew / lost update)"),
        AnomalyKind::GNonadjacent => format!("cycle through {n} transactions with {rw} rw edges, no two adjacent (impossible under snapshot isolation)"),
        AnomalyKind::G2 => format!("cycle through {n} transactions with {rw} rw edges, two of them adjacent (write skew)"),
        AnomalyKind::RealTime => format!(
            "{}-realtime cycle through {n} transactions: it closes only through {rt} real-time step(s)",
            classify(g, &found.edges)
        ),
        _ => format!(
            "the search budget ran out before deciding whether this component holds a G-single or G-nonadjacent cycle; one of its cycles has {n} transactions and {rw} rw edges"
        ),
    };
    let mut path: Vec<String> = txns.iter().map(|t| format!("T{}", t.index)).collect();
    path.extend(txns.first().map(|t| format!("T{}", t.index)));
    Anomaly {
        kind: found.kind,
        txns,
        cycle,
        explanation: format!("{what}: {}", path.join(" -> ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_reads_are_shown_compactly() {
        assert_eq!(list(&[]), "[]");
        assert_eq!(list(&[1, 2]), "[1, 2]");
        let long: Vec<i64> = (1..=20).collect();
        assert_eq!(list(&long), "[1, 2, 3, .. (14 more) .., 18, 19, 20]");
        assert_eq!(around(None, 0, true), "[]");
        assert_eq!(around(Some(5), 1, true), "[5]");
        assert_eq!(around(Some(5), 3, true), "[.., 5]");
        assert_eq!(around(Some(5), 3, false), "[.., 5, ..]");
    }
}
