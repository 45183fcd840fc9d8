//! Real-time order without quadratic edges.
//!
//! `T1 → T2` in real time when T1 completed before T2 was invoked. Listing every such pair
//! is quadratic, and even the transitive reduction Elle builds (edges from the "frontier" of
//! transactions completed before each invocation) is quadratic when many transactions
//! complete together and many start after them. Instead we sweep the invoke/complete events
//! in time order and place a *barrier* node at each invocation that follows new
//! completions. The transactions completed since the previous barrier and the previous
//! barrier itself point to the new barrier, and it points to every transaction invoked
//! before the next one. So `T1 → T2` in real time iff a path
//! `T1 → barrier → … → barrier → T2` exists, and the graph gains at most three links per
//! transaction. Barriers cost nothing in the cycle searches, so a cycle's length still counts
//! transactions only.
//!
//! Transactions of unknown outcome (`info`) may take effect any time after their invocation,
//! so they get incoming links but never outgoing ones; the same holds for a transaction
//! whose completion precedes its invocation (reported as malformed).

use crate::anomaly::AnomalyKind;
use crate::graph::{KeyId, Node, RawEdge, Why};
use crate::history::EntryType;
use crate::index::Facts;
use crate::model::RealTime;

/// When a transaction ran, as far as real-time order is concerned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interval {
    pub invoke: u64,
    /// `None` when the completion cannot bound the transaction's effect (info, malformed).
    pub complete: Option<u64>,
}

/// Reusable sweep state.
#[derive(Default)]
pub(crate) struct Sweep {
    /// (time, 0 = invoke / 1 = complete, transaction): invocations sort first at equal times,
    /// so `complete == invoke` does not order two transactions (the order is strict).
    events: Vec<(u64, u8, Node)>,
    pending: Vec<Node>,
}

impl Sweep {
    /// Adds the real-time links among `txns` to `edges`, numbering new barriers from
    /// `next_node`. `key` tags the links of a per-key chain.
    pub fn chain(
        &mut self,
        txns: impl IntoIterator<Item = Node>,
        times: &[Interval],
        key: Option<KeyId>,
        next_node: &mut Node,
        edges: &mut Vec<RawEdge>,
    ) {
        self.events.clear();
        self.pending.clear();
        for t in txns {
            let span = times[t as usize];
            self.events.push((span.invoke, 0, t));
            if let Some(done) = span.complete {
                self.events.push((done, 1, t));
            }
        }
        self.events.sort_unstable();
        let why = Why::RealTime { key };
        let mut barrier: Option<Node> = None;
        for &(_, kind, t) in &self.events {
            if kind == 1 {
                self.pending.push(t);
                continue;
            }
            if !self.pending.is_empty() {
                let b = *next_node;
                *next_node += 1;
                if let Some(prev) = barrier {
                    edges.push(RawEdge {
                        from: prev,
                        to: b,
                        why,
                    });
                }
                edges.extend(self.pending.drain(..).map(|p| RawEdge {
                    from: p,
                    to: b,
                    why,
                }));
                barrier = Some(b);
            }
            if let Some(b) = barrier {
                edges.push(RawEdge {
                    from: b,
                    to: t,
                    why,
                });
            }
        }
    }
}

/// Adds the real-time links of `scope` between committed transactions (`ok`, and `info`
/// ones a read observed) to `edges`. Returns the number of barrier nodes created; they are
/// numbered from the number of transactions on.
pub(crate) fn add_edges(facts: &Facts<'_>, scope: RealTime, edges: &mut Vec<RawEdge>) -> u32 {
    let n = facts.history.len() as Node;
    let times: Vec<Interval> = facts
        .history
        .iter()
        .map(|e| {
            let bounded = e.kind == EntryType::Ok && e.complete_ns >= e.invoke_ns;
            Interval {
                invoke: e.invoke_ns,
                complete: bounded.then_some(e.complete_ns),
            }
        })
        .collect();
    let committed = |t: &Node| facts.included[*t as usize];
    let (mut next, mut sweep) = (n, Sweep::default());
    match scope {
        RealTime::Global => sweep.chain((0..n).filter(committed), &times, None, &mut next, edges),
        RealTime::PerKey | RealTime::PerKeyAndDeclared => {
            let mut by_key: Vec<Vec<Node>> = vec![Vec::new(); facts.keys.len()];
            for t in (0..n).filter(committed) {
                for (_, _, k) in facts.ops(t) {
                    if by_key[k as usize].last() != Some(&t) {
                        by_key[k as usize].push(t);
                    }
                }
            }
            for (k, txns) in by_key.iter().enumerate().filter(|(_, txns)| txns.len() > 1) {
                sweep.chain(
                    txns.iter().copied(),
                    &times,
                    Some(k as KeyId),
                    &mut next,
                    edges,
                );
            }
        }
    }
    next - n
}

/// The real-time links along declared out-of-band dependencies ([`Entry::after`]): from
/// each `ok` transaction to every committed transaction that names it. A declaration that
/// cannot hold — an index not in the history, the transaction itself, or one that completed
/// after the declaring transaction was invoked — is reported as malformed (the
/// client claimed to have seen something it cannot have seen). A dependency that did not
/// commit (`fail`, or `info` of unknown completion) orders nothing.
///
/// [`Entry::after`]: crate::Entry::after
pub(crate) fn add_declared_edges(facts: &mut Facts<'_>, edges: &mut Vec<RawEdge>) {
    let history = facts.history;
    let position: rustc_hash::FxHashMap<u64, Node> = history
        .iter()
        .enumerate()
        .map(|(i, e)| (e.index, i as Node))
        .collect();
    let why = Why::RealTime { key: None };
    for (t, entry) in history.iter().enumerate() {
        let t = t as Node;
        for dep_index in &entry.after {
            let Some(&d) = position.get(dep_index).filter(|&&d| d != t) else {
                let why = format!(
                    "{} declares an out-of-band dependency on index {dep_index}, which is not \
                     another transaction of the history",
                    facts.name(t)
                );
                facts.report(AnomalyKind::Malformed, &[t], why);
                continue;
            };
            let dep = &history[d as usize];
            // At the same instant is fine: the client declares it saw the completion first
            // (a closed loop begins the next transaction at the instant one completes).
            if dep.complete_ns > entry.invoke_ns {
                let why = format!(
                    "{} (invoked at {} ns) declares an out-of-band dependency on {}, which \
                     completed only at {} ns",
                    facts.name(t),
                    entry.invoke_ns,
                    facts.name(d),
                    dep.complete_ns
                );
                facts.report(AnomalyKind::Malformed, &[t, d], why);
                continue;
            }
            if dep.kind == EntryType::Ok && facts.included[t as usize] {
                edges.push(RawEdge {
                    from: d,
                    to: t,
                    why,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Graph, KindSet};
    use crate::scc::Tarjan;

    fn span(invoke: u64, complete: u64) -> Interval {
        Interval {
            invoke,
            complete: Some(complete),
        }
    }

    /// Whether `b` is reachable from `a` (a plain DFS; test sizes are tiny).
    fn reaches(g: &Graph, a: Node, b: Node) -> bool {
        let mut seen = vec![false; g.nodes() as usize];
        let mut todo = vec![a];
        while let Some(v) = todo.pop() {
            for e in g.out(v) {
                let w = g.to(e);
                if w == b {
                    return true;
                }
                if !seen[w as usize] {
                    seen[w as usize] = true;
                    todo.push(w);
                }
            }
        }
        false
    }

    fn build(times: &[Interval]) -> Graph {
        let n = times.len() as Node;
        let (mut next, mut edges) = (n, Vec::new());
        Sweep::default().chain(0..n, times, None, &mut next, &mut edges);
        assert!(
            edges.len() <= 3 * times.len(),
            "{} links for {} transactions",
            edges.len(),
            times.len()
        );
        Graph::build(n, next, edges)
    }

    #[test]
    fn paths_match_the_real_time_order_exactly() {
        let times = [
            span(0, 10),
            span(5, 20),
            span(10, 30),
            span(11, 12),
            span(25, 40),
            span(31, 31),
            Interval {
                invoke: 13,
                complete: None,
            },
        ];
        let g = build(&times);
        for (a, ta) in times.iter().enumerate() {
            for (b, tb) in times.iter().enumerate() {
                let before = ta.complete.is_some_and(|c| c < tb.invoke);
                assert_eq!(reaches(&g, a as Node, b as Node), before, "T{a} -> T{b}");
            }
        }
        let mut t = Tarjan::new(g.nodes());
        assert_eq!(
            t.run(&g, 0..g.nodes(), KindSet::ALL, |_| true)
                .cyclic()
                .count(),
            0
        );
    }

    #[test]
    fn many_simultaneous_completions_stay_linear() {
        // 1000 overlapping transactions, then 1000 more invoked after all of them.
        let mut times: Vec<Interval> = (0..1000).map(|i| span(i, 5000)).collect();
        times.extend((0..1000).map(|i| span(6000 + i, 9000)));
        let g = build(&times);
        assert!(reaches(&g, 3, 1500) && !reaches(&g, 1500, 3) && !reaches(&g, 3, 4));
    }
}
