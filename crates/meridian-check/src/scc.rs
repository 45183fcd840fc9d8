//! Tarjan's strongly connected components, iterative (an explicit call stack instead of
//! recursion, so a 100 000-transaction chain cannot overflow the thread stack).
//!
//! The scratch arrays are sized for the whole graph once and reset only where a run touched
//! them, so the per-SCC sub-runs of the classifier cost time proportional to the SCC, not to
//! the history.

use crate::graph::{Graph, KindSet, Node};

const UNSEEN: u32 = u32::MAX;

/// The components found by one run, in emission order: Tarjan emits a component only after
/// every component it reaches, so if an edge leads from component `a` to a different
/// component `b`, then `a > b`.
#[derive(Debug, Default)]
pub(crate) struct Components {
    members: Vec<Node>,
    starts: Vec<u32>,
}

impl Components {
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn get(&self, c: usize) -> &[Node] {
        let end = self
            .starts
            .get(c + 1)
            .map_or(self.members.len(), |&s| s as usize);
        &self.members[self.starts[c] as usize..end]
    }

    /// The components with at least two nodes (graphs here have no self-loops, so these are
    /// exactly the components that contain a cycle), with their emission index.
    pub fn cyclic(&self) -> impl Iterator<Item = (u32, &[Node])> + '_ {
        (0..self.len())
            .map(|c| (c as u32, self.get(c)))
            .filter(|(_, m)| m.len() > 1)
    }
}

/// Reusable Tarjan state.
pub(crate) struct Tarjan {
    index: Vec<u32>,
    low: Vec<u32>,
    comp: Vec<u32>,
    touched: Vec<Node>,
    stack: Vec<Node>,
    calls: Vec<(Node, usize)>,
}

impl Tarjan {
    pub fn new(nodes: u32) -> Tarjan {
        let n = nodes as usize;
        Tarjan {
            index: vec![UNSEEN; n],
            low: vec![0; n],
            comp: vec![UNSEEN; n],
            touched: Vec::new(),
            stack: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// The component of `v` in the last run (`u32::MAX` if the run did not reach it).
    pub fn comp(&self, v: Node) -> u32 {
        self.comp[v as usize]
    }

    /// Forgets the last run.
    pub fn clear(&mut self) {
        for &v in &self.touched {
            self.index[v as usize] = UNSEEN;
            self.comp[v as usize] = UNSEEN;
        }
        self.touched.clear();
    }

    /// Finds the components of the subgraph made of the nodes reachable from `roots` through
    /// edges of `kinds` whose target satisfies `in_scope`.
    pub fn run(
        &mut self,
        g: &Graph,
        roots: impl IntoIterator<Item = Node>,
        kinds: KindSet,
        in_scope: impl Fn(Node) -> bool,
    ) -> Components {
        self.clear();
        let mut out = Components::default();
        let mut counter = 0u32;
        for root in roots {
            if self.index[root as usize] != UNSEEN {
                continue;
            }
            self.enter(g, root, &mut counter);
            while let Some(&(v, e)) = self.calls.last() {
                if e < g.out(v).end {
                    if let Some(top) = self.calls.last_mut() {
                        top.1 += 1;
                    }
                    self.follow(g, v, e, kinds, &in_scope, &mut counter);
                } else {
                    self.calls.pop();
                    self.leave(v, &mut out);
                }
            }
        }
        out
    }

    fn enter(&mut self, g: &Graph, v: Node, counter: &mut u32) {
        self.index[v as usize] = *counter;
        self.low[v as usize] = *counter;
        *counter += 1;
        self.touched.push(v);
        self.stack.push(v);
        self.calls.push((v, g.out(v).start));
    }

    fn follow(
        &mut self,
        g: &Graph,
        v: Node,
        e: usize,
        kinds: KindSet,
        in_scope: &impl Fn(Node) -> bool,
        counter: &mut u32,
    ) {
        let w = g.to(e);
        if !kinds.contains(g.kind(e)) || !in_scope(w) {
            return;
        }
        if self.index[w as usize] == UNSEEN {
            self.enter(g, w, counter);
        } else if self.comp[w as usize] == UNSEEN {
            // Seen but not yet in a component: `w` is still on the Tarjan stack.
            self.low[v as usize] = self.low[v as usize].min(self.index[w as usize]);
        }
    }

    /// Called when `v`'s edges are exhausted: closes its component if it is a root, and
    /// propagates its low-link to its caller.
    fn leave(&mut self, v: Node, out: &mut Components) {
        let (vi, vlow) = (self.index[v as usize], self.low[v as usize]);
        if vlow == vi {
            let id = out.starts.len() as u32;
            out.starts.push(out.members.len() as u32);
            while let Some(w) = self.stack.pop() {
                self.comp[w as usize] = id;
                out.members.push(w);
                if w == v {
                    break;
                }
            }
        }
        if let Some(&(parent, _)) = self.calls.last() {
            let p = parent as usize;
            self.low[p] = self.low[p].min(vlow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{RawEdge, Why};

    fn graph(n: u32, edges: &[(Node, Node)]) -> Graph {
        let why = Why::NextAppend {
            key: 0,
            prev: 0,
            next: 0,
        };
        let raw = edges
            .iter()
            .map(|&(from, to)| RawEdge { from, to, why })
            .collect();
        Graph::build(n, n, raw)
    }

    fn sorted_cyclic(c: &Components) -> Vec<Vec<Node>> {
        let mut out: Vec<Vec<Node>> = c
            .cyclic()
            .map(|(_, m)| {
                let mut m = m.to_vec();
                m.sort();
                m
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn finds_components_and_emits_sinks_first() {
        // 0 <-> 1 -> 2 <-> 3, and 4 alone.
        let g = graph(5, &[(0, 1), (1, 0), (1, 2), (2, 3), (3, 2)]);
        let mut t = Tarjan::new(5);
        let c = t.run(&g, 0..5, KindSet::ALL, |_| true);
        assert_eq!(sorted_cyclic(&c), vec![vec![0, 1], vec![2, 3]]);
        assert!(
            t.comp(0) > t.comp(2),
            "an edge between components goes downwards"
        );
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn scope_and_kinds_restrict_the_run() {
        let g = graph(3, &[(0, 1), (1, 2), (2, 0)]);
        let mut t = Tarjan::new(3);
        assert_eq!(
            t.run(&g, 0..3, KindSet::ALL, |v| v != 2).cyclic().count(),
            0
        );
        assert_eq!(t.run(&g, 0..3, KindSet::RW, |_| true).cyclic().count(), 0);
        assert_eq!(t.run(&g, 0..3, KindSet::WW, |_| true).cyclic().count(), 1);
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 300_000;
        let mut edges: Vec<(Node, Node)> = (0..n - 1).map(|i| (i, i + 1)).collect();
        edges.push((n - 1, 0));
        let g = graph(n, &edges);
        let mut t = Tarjan::new(n);
        let c = t.run(&g, 0..n, KindSet::ALL, |_| true);
        assert_eq!(
            c.cyclic().map(|(_, m)| m.len()).collect::<Vec<_>>(),
            [n as usize]
        );
    }
}
