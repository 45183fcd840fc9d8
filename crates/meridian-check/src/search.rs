//! Shortest cycles through a given edge.
//!
//! A [`Spec`] says which edge kinds a cycle may use and tracks a small state along the path
//! (at most [`STATES`] values: "was the last edge rw?", "have we seen a second rw?", ...), so
//! one breadth-first search over (node, state) pairs finds the shortest cycle of a given
//! class through a given edge. Entering a barrier node costs nothing, entering a transaction
//! costs one (a 0-1 BFS), so a cycle's length is the number of transactions on it however
//! long the real-time chains it follows.

use crate::graph::{EdgeKind, Graph, KindSet, Node};
use std::collections::VecDeque;

/// The number of path states a [`Spec`] may use.
pub(crate) const STATES: usize = 4;
const UNSEEN: u32 = u32::MAX;

/// What a cycle may be made of.
pub(crate) struct Spec {
    /// The kinds the first edge (the edge searched through) may have.
    pub first: KindSet,
    /// The kinds the rest of the cycle may use.
    pub rest: KindSet,
    /// The state after the first edge.
    pub start: fn(EdgeKind) -> u8,
    /// The state after following an edge of the given kind, or `None` if not allowed.
    pub step: fn(u8, EdgeKind) -> Option<u8>,
    /// Whether the cycle may close (return to the first edge's source) in this state.
    pub accept: fn(u8) -> bool,
}

fn stateless(_: EdgeKind) -> u8 {
    0
}

fn always(_: u8, _: EdgeKind) -> Option<u8> {
    Some(0)
}

fn yes(_: u8) -> bool {
    true
}

const LAST_RW: u8 = 1;
const MARK: u8 = 2;

/// Nonadjacent: MARK = "a second rw edge was seen"; an rw edge may not follow an rw edge.
fn nonadjacent_step(s: u8, k: EdgeKind) -> Option<u8> {
    match (k, s & LAST_RW != 0) {
        (EdgeKind::Rw, true) => None,
        (EdgeKind::Rw, false) => Some(LAST_RW | MARK),
        _ => Some(s & MARK),
    }
}

/// The cycle starts with rw, so it may close only if its last edge is not rw.
fn nonadjacent_accept(s: u8) -> bool {
    s & LAST_RW == 0 && s & MARK != 0
}

/// Adjacent: MARK = "two consecutive rw edges were seen".
fn adjacent_step(s: u8, k: EdgeKind) -> Option<u8> {
    let mark = s & MARK;
    match k {
        EdgeKind::Rw if s & LAST_RW != 0 => Some(LAST_RW | MARK),
        EdgeKind::Rw => Some(LAST_RW | mark),
        _ => Some(mark),
    }
}

/// Closing after an rw edge makes it adjacent to the first (rw) edge.
fn adjacent_accept(s: u8) -> bool {
    s != 0
}

fn after_first(k: EdgeKind) -> u8 {
    if k == EdgeKind::Rw {
        LAST_RW
    } else {
        0
    }
}

/// G0: write cycles.
pub(crate) const G0: Spec = Spec {
    first: KindSet::WW,
    rest: KindSet::WW,
    start: stateless,
    step: always,
    accept: yes,
};
/// G1c: ww/wr cycles through a wr edge.
pub(crate) const G1C: Spec = Spec {
    first: KindSet::WR,
    rest: KindSet::WW_WR,
    start: stateless,
    step: always,
    accept: yes,
};
/// G-single: exactly one rw edge.
pub(crate) const G_SINGLE: Spec = Spec {
    first: KindSet::RW,
    rest: KindSet::WW_WR,
    start: stateless,
    step: always,
    accept: yes,
};
/// G-nonadjacent: at least two rw edges, no two adjacent (cyclically).
pub(crate) const G_NONADJACENT: Spec = Spec {
    first: KindSet::RW,
    rest: KindSet::DATA,
    start: after_first,
    step: nonadjacent_step,
    accept: nonadjacent_accept,
};
/// G2 proper: at least two rw edges, two of them adjacent.
pub(crate) const G2_ADJACENT: Spec = Spec {
    first: KindSet::RW,
    rest: KindSet::DATA,
    start: after_first,
    step: adjacent_step,
    accept: adjacent_accept,
};
/// Any cycle through a data edge (the classifier's fallback).
pub(crate) const ANY_DATA: Spec = Spec {
    first: KindSet::DATA,
    rest: KindSet::DATA,
    start: stateless,
    step: always,
    accept: yes,
};
/// Any cycle, real-time links included, through an edge of any kind.
pub(crate) const ANY: Spec = Spec {
    first: KindSet::ALL,
    rest: KindSet::ALL,
    start: stateless,
    step: always,
    accept: yes,
};

/// The result of one search.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The edges of the cycle, in order, starting with the edge searched through.
    Cycle(Vec<usize>),
    NoCycle,
    /// The budget ran out before the search finished.
    OutOfBudget,
}

/// Reusable search state over (node, state) slots.
pub(crate) struct Searcher {
    dist: Vec<u32>,
    parent_edge: Vec<u32>,
    parent_slot: Vec<u32>,
    touched: Vec<u32>,
    deque: VecDeque<u32>,
}

fn slot(v: Node, s: u8) -> u32 {
    v * STATES as u32 + s as u32
}

impl Searcher {
    pub fn new(nodes: u32) -> Searcher {
        let n = nodes as usize * STATES;
        Searcher {
            dist: vec![UNSEEN; n],
            parent_edge: vec![UNSEEN; n],
            parent_slot: vec![UNSEEN; n],
            touched: Vec::new(),
            deque: VecDeque::new(),
        }
    }

    /// The shortest cycle of class `spec` through edge `e0` whose nodes satisfy `in_scope`.
    /// Each edge examined costs one unit of `budget`.
    pub fn cycle_through(
        &mut self,
        g: &Graph,
        spec: &Spec,
        e0: usize,
        in_scope: impl Fn(Node) -> bool,
        budget: &mut u64,
    ) -> Outcome {
        if !spec.first.contains(g.kind(e0)) {
            return Outcome::NoCycle;
        }
        self.reset();
        let (target, start) = (g.from(e0), slot(g.to(e0), (spec.start)(g.kind(e0))));
        self.visit(start, 0, UNSEEN, UNSEEN);
        self.deque.push_back(start);
        while let Some(at) = self.deque.pop_front() {
            let (v, s) = (at / STATES as u32, (at % STATES as u32) as u8);
            if v == target {
                if (spec.accept)(s) {
                    return Outcome::Cycle(self.path(e0, at));
                }
                // Passing through the start would glue two cycles into one walk.
                continue;
            }
            for e in g.out(v) {
                if *budget == 0 {
                    return Outcome::OutOfBudget;
                }
                *budget -= 1;
                self.relax(g, spec, at, s, e, &in_scope);
            }
        }
        Outcome::NoCycle
    }

    fn relax(
        &mut self,
        g: &Graph,
        spec: &Spec,
        at: u32,
        s: u8,
        e: usize,
        in_scope: &impl Fn(Node) -> bool,
    ) {
        let (w, kind) = (g.to(e), g.kind(e));
        if !spec.rest.contains(kind) || !in_scope(w) {
            return;
        }
        let Some(next_state) = (spec.step)(s, kind) else {
            return;
        };
        let next = slot(w, next_state);
        let cost = u32::from(!g.is_barrier(w));
        let d = self.dist[at as usize] + cost;
        if d < self.dist[next as usize] {
            self.visit(next, d, e as u32, at);
            if cost == 0 {
                self.deque.push_front(next);
            } else {
                self.deque.push_back(next);
            }
        }
    }

    fn visit(&mut self, at: u32, d: u32, edge: u32, from: u32) {
        let i = at as usize;
        if self.dist[i] == UNSEEN {
            self.touched.push(at);
        }
        self.dist[i] = d;
        self.parent_edge[i] = edge;
        self.parent_slot[i] = from;
    }

    fn path(&self, e0: usize, mut at: u32) -> Vec<usize> {
        let mut back = Vec::new();
        // Parent links strictly decrease in distance except through barriers, which form no
        // cycle; the bound only guards against a bug turning into an endless loop.
        while self.parent_edge[at as usize] != UNSEEN && back.len() <= self.touched.len() {
            back.push(self.parent_edge[at as usize] as usize);
            at = self.parent_slot[at as usize];
        }
        back.push(e0);
        back.reverse();
        back
    }

    fn reset(&mut self) {
        for &at in &self.touched {
            self.dist[at as usize] = UNSEEN;
            self.parent_edge[at as usize] = UNSEEN;
        }
        self.touched.clear();
        self.deque.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{RawEdge, Why};

    fn edge(from: Node, to: Node, kind: EdgeKind) -> RawEdge {
        let why = match kind {
            EdgeKind::Ww => Why::NextAppend {
                key: 0,
                prev: 0,
                next: 0,
            },
            EdgeKind::Wr => Why::ReadRegister { key: 0, value: 0 },
            EdgeKind::Rw => Why::MissedAppend {
                key: 0,
                last: None,
                read_len: 0,
                next: 0,
            },
            EdgeKind::Rt => Why::RealTime { key: None },
        };
        RawEdge { from, to, why }
    }

    fn first_edge(g: &Graph, from: Node, to: Node) -> usize {
        g.out(from).find(|&e| g.to(e) == to).unwrap()
    }

    fn kinds(g: &Graph, cycle: &[usize]) -> Vec<EdgeKind> {
        cycle.iter().map(|&e| g.kind(e)).collect()
    }

    #[test]
    fn finds_the_shortest_cycle_through_an_edge() {
        use EdgeKind::*;
        // 0 -> 1 -> 2 -> 0 and a shortcut 1 -> 0.
        let g = Graph::build(
            3,
            3,
            vec![
                edge(0, 1, Ww),
                edge(1, 2, Ww),
                edge(2, 0, Ww),
                edge(1, 0, Wr),
            ],
        );
        let mut s = Searcher::new(3);
        let mut budget = u64::MAX;
        let e = first_edge(&g, 0, 1);
        assert_eq!(
            s.cycle_through(&g, &ANY_DATA, e, |_| true, &mut budget),
            Outcome::Cycle(vec![e, first_edge(&g, 1, 0)])
        );
        let Outcome::Cycle(c) = s.cycle_through(&g, &G0, e, |_| true, &mut budget) else {
            panic!()
        };
        assert_eq!(kinds(&g, &c), [Ww, Ww, Ww]);
        let mut none = 0;
        assert_eq!(
            s.cycle_through(&g, &G0, e, |_| true, &mut none),
            Outcome::OutOfBudget
        );
    }

    #[test]
    fn rw_adjacency_is_tracked_cyclically() {
        use EdgeKind::*;
        // 0 -rw-> 1 -rw-> 0: two adjacent rw edges; 0 -rw-> 2 -wr-> 3 -rw-> 4 -ww-> 0: nonadjacent.
        let raw = vec![
            edge(0, 1, Rw),
            edge(1, 0, Rw),
            edge(0, 2, Rw),
            edge(2, 3, Wr),
            edge(3, 4, Rw),
            edge(4, 0, Ww),
        ];
        let g = Graph::build(5, 5, raw);
        let mut s = Searcher::new(5);
        let mut b = u64::MAX;
        let (e01, e02) = (first_edge(&g, 0, 1), first_edge(&g, 0, 2));
        assert_eq!(
            s.cycle_through(&g, &G_NONADJACENT, e01, |_| true, &mut b),
            Outcome::NoCycle
        );
        let Outcome::Cycle(c) = s.cycle_through(&g, &G2_ADJACENT, e01, |_| true, &mut b) else {
            panic!()
        };
        assert_eq!(kinds(&g, &c), [Rw, Rw]);
        let Outcome::Cycle(c) = s.cycle_through(&g, &G_NONADJACENT, e02, |_| true, &mut b) else {
            panic!()
        };
        assert_eq!(kinds(&g, &c), [Rw, Wr, Rw, Ww]);
        assert_eq!(
            s.cycle_through(&g, &G_SINGLE, e02, |_| true, &mut b),
            Outcome::NoCycle
        );
        assert_eq!(
            s.cycle_through(&g, &G2_ADJACENT, e02, |_| true, &mut b),
            Outcome::NoCycle
        );
    }

    #[test]
    fn barriers_cost_nothing() {
        use EdgeKind::*;
        // 0 -rw-> 1; back either 1 -> b3 -> b4 -> 0 (rt, one transaction) or 1 -> 2 -> 0.
        let raw = vec![
            edge(0, 1, Rw),
            edge(1, 3, Rt),
            edge(3, 4, Rt),
            edge(4, 0, Rt),
            edge(1, 2, Ww),
            edge(2, 0, Ww),
        ];
        let g = Graph::build(3, 5, raw);
        let mut s = Searcher::new(5);
        let mut b = u64::MAX;
        let Outcome::Cycle(c) = s.cycle_through(&g, &ANY, first_edge(&g, 0, 1), |_| true, &mut b)
        else {
            panic!()
        };
        assert_eq!(kinds(&g, &c), [Rw, Rt, Rt, Rt]);
    }
}
