//! Finding and classifying cycles.
//!
//! Tarjan over the ww/wr/rw edges gives the components that contain cycles. Each one is
//! searched for each class in increasing order of badness, restricted to the edges the
//! class allows, and each class found is reported once per component with the shortest
//! cycle through the edge that exhibits it:
//!
//! 1. **G0**: Tarjan over the ww edges inside the component; any ww edge inside a ww cycle
//!    gives one. Linear.
//! 2. **G1c**: the same over ww+wr, through a wr edge. Linear.
//! 3. **G-single**: an rw edge `u → v` closes one iff `v` reaches `u` over ww+wr. The ww+wr
//!    components of step 2 are numbered in reverse topological order, which rules most
//!    candidates out and bounds each search to the components between `v`'s and `u`'s.
//! 4. **G-nonadjacent** then **G2**: a search over (node, state) pairs through each rw edge,
//!    the state tracking whether the last edge was rw and whether a second (resp. an
//!    adjacent) rw edge was seen.
//!
//! Steps 3–4 may need one search per rw edge (quadratic in the worst case), so they share a
//! budget of edge visits. Models other than snapshot isolation reject any cycle, so for them
//! the budget only limits how precisely a cycle is named (a fallback names the shortest
//! cycle through some edge). Under snapshot isolation, running out before deciding
//! G-single/G-nonadjacent is reported as `cycle-search-timeout` ("not proven valid").
//!
//! With real time, Tarjan runs again over all edges. A component whose transactions all
//! lie in one data cycle component adds nothing; any other contains a cycle that needs
//! real-time order, reported once as `real-time` with the shortest such cycle found (first
//! through data edges that point backwards in time, the usual culprit).

use crate::anomaly::AnomalyKind;
use crate::graph::{EdgeKind, Graph, KindSet, Node};
use crate::history::Entry;
use crate::model::Model;
use crate::scc::Tarjan;
use crate::search::{self, Outcome, Searcher, Spec};

/// A cycle found: its class and its edges in order.
#[derive(Debug)]
pub(crate) struct Found {
    pub kind: AnomalyKind,
    pub edges: Vec<usize>,
}

/// How many backward-in-time data edges to try for each real-time component.
const RT_TRIES: usize = 8;

/// Classifies every cycle of `g`. Returns the cycles and the number of cyclic data components.
pub(crate) fn find(g: &Graph, history: &[Entry], model: Model, budget: u64) -> (Vec<Found>, u64) {
    let owned = |(c, m): (u32, &[Node])| (c, m.to_vec());
    let mut top = Tarjan::new(g.nodes());
    let cyclic: Vec<(u32, Vec<Node>)> = top
        .run(g, 0..g.nodes(), KindSet::DATA, |_| true)
        .cyclic()
        .map(owned)
        .collect();
    let data_comp: Vec<u32> = (0..g.nodes()).map(|v| top.comp(v)).collect();
    // After this run `top` holds the components over all edges, real-time links included.
    let full_cyclic: Vec<(u32, Vec<Node>)> = match model.real_time() {
        Some(_) => top
            .run(g, 0..g.nodes(), KindSet::ALL, |_| true)
            .cyclic()
            .map(owned)
            .collect(),
        None => Vec::new(),
    };
    if cyclic.is_empty() && full_cyclic.is_empty() {
        return (Vec::new(), 0); // the common case: no scratch space for searches needed
    }
    let mut c = Classifier {
        g,
        model,
        data_comp,
        cyclic_data: cyclic.iter().map(|(c, _)| *c).collect(),
        sub: Tarjan::new(g.nodes()),
        searcher: Searcher::new(g.nodes()),
        budget,
        found: Vec::new(),
    };
    for (id, members) in &cyclic {
        c.data_component(*id, members);
    }
    for (id, members) in &full_cyclic {
        c.real_time_component(history, members, |v| top.comp(v) == *id);
    }
    (c.found, cyclic.len() as u64)
}

struct Classifier<'g> {
    g: &'g Graph,
    model: Model,
    /// Each node's ww/wr/rw component.
    data_comp: Vec<u32>,
    /// The ids of the data components that contain a cycle (sorted).
    cyclic_data: Vec<u32>,
    sub: Tarjan,
    searcher: Searcher,
    budget: u64,
    found: Vec<Found>,
}

/// Outcome of trying a class over a component.
#[derive(PartialEq, Eq)]
enum Tried {
    Found,
    Absent,
    TimedOut,
}

impl Classifier<'_> {
    fn data_component(&mut self, id: u32, members: &[Node]) {
        let g = self.g;
        let dc = std::mem::take(&mut self.data_comp);
        let in_s = |v: Node| dc[v as usize] == id;
        let before = self.found.len();
        let exact_classes = [
            (KindSet::WW, KindSet::WW, AnomalyKind::G0, &search::G0),
            (KindSet::WW_WR, KindSet::WR, AnomalyKind::G1c, &search::G1C),
        ];
        for (kinds, through, kind, spec) in exact_classes {
            self.sub.run(g, members.iter().copied(), kinds, in_s);
            if let Some(e) = self.internal_edge(members, through) {
                let edges = self.exact(spec, e, in_s);
                self.found.push(Found { kind, edges });
            }
        }
        // `sub` still holds the ww+wr components that G-single needs.
        let single = self.g_single(members, &in_s);
        let nonadjacent = self.through_rw(
            members,
            &search::G_NONADJACENT,
            AnomalyKind::GNonadjacent,
            &in_s,
        );
        self.through_rw(members, &search::G2_ADJACENT, AnomalyKind::G2, &in_s);
        let si_violation = self.found[before..]
            .iter()
            .any(|f| f.kind != AnomalyKind::G2);
        let undecided = single == Tried::TimedOut || nonadjacent == Tried::TimedOut;
        if self.model == Model::SnapshotIsolation && !si_violation && undecided {
            let edges = self.any_cycle(members, &in_s);
            self.found.push(Found {
                kind: AnomalyKind::CycleSearchTimeout,
                edges,
            });
        } else if self.found.len() == before {
            let edges = self.any_cycle(members, &in_s);
            self.found.push(Found {
                kind: classify(g, &edges),
                edges,
            });
        }
        self.data_comp = dc;
    }

    /// An edge of `kinds` between two members of the same component of the last sub-run.
    fn internal_edge(&self, members: &[Node], kinds: KindSet) -> Option<usize> {
        let (g, sub) = (self.g, &self.sub);
        members
            .iter()
            .flat_map(|&v| g.out(v))
            .find(|&e| kinds.contains(g.kind(e)) && sub.comp(g.to(e)) == sub.comp(g.from(e)))
    }

    /// A search that must succeed (the edge lies on a cycle of the class): no budget.
    fn exact(&mut self, spec: &Spec, e: usize, in_scope: impl Fn(Node) -> bool) -> Vec<usize> {
        let mut unlimited = u64::MAX;
        match self
            .searcher
            .cycle_through(self.g, spec, e, in_scope, &mut unlimited)
        {
            Outcome::Cycle(edges) => edges,
            Outcome::NoCycle | Outcome::OutOfBudget => vec![e],
        }
    }

    fn any_cycle(&mut self, members: &[Node], in_s: &impl Fn(Node) -> bool) -> Vec<usize> {
        let g = self.g;
        let e = members
            .iter()
            .flat_map(|&v| g.out(v))
            .find(|&e| KindSet::DATA.contains(g.kind(e)) && in_s(g.to(e)));
        e.map(|e| self.exact(&search::ANY_DATA, e, in_s))
            .unwrap_or_default()
    }

    /// G-single: rw edges `u → v` with `v` and `u` in the same ww+wr component first (a cycle
    /// is certain), then those whose `v` comes later in the reverse topological numbering.
    fn g_single(&mut self, members: &[Node], in_s: &impl Fn(Node) -> bool) -> Tried {
        let g = self.g;
        let rank = |v: Node| self.sub.comp(v);
        let mut same = None;
        let mut later = Vec::new();
        for e in members
            .iter()
            .flat_map(|&v| g.out(v))
            .filter(|&e| g.kind(e) == EdgeKind::Rw && in_s(g.to(e)))
        {
            let (ru, rv) = (rank(g.from(e)), rank(g.to(e)));
            if ru == rv {
                same = Some(e);
                break;
            }
            if rv > ru {
                later.push(e);
            }
        }
        if let Some(e) = same {
            let edges = self.exact(&search::G_SINGLE, e, in_s);
            self.found.push(Found {
                kind: AnomalyKind::GSingle,
                edges,
            });
            return Tried::Found;
        }
        let ranks: Vec<(u32, u32)> = later
            .iter()
            .map(|&e| (rank(g.from(e)), rank(g.to(e))))
            .collect();
        let sub = &self.sub;
        let mut tried = Tried::Absent;
        for (&e, &(lo, hi)) in later.iter().zip(&ranks) {
            let scope = |x: Node| in_s(x) && (lo..=hi).contains(&sub.comp(x));
            match self
                .searcher
                .cycle_through(g, &search::G_SINGLE, e, scope, &mut self.budget)
            {
                Outcome::Cycle(edges) => {
                    self.found.push(Found {
                        kind: AnomalyKind::GSingle,
                        edges,
                    });
                    return Tried::Found;
                }
                Outcome::OutOfBudget => tried = Tried::TimedOut,
                Outcome::NoCycle => {}
            }
            if tried == Tried::TimedOut {
                break;
            }
        }
        tried
    }

    /// Searches a class through each rw edge of the component until one is found.
    fn through_rw(
        &mut self,
        members: &[Node],
        spec: &Spec,
        kind: AnomalyKind,
        in_s: &impl Fn(Node) -> bool,
    ) -> Tried {
        let g = self.g;
        for e in members
            .iter()
            .flat_map(|&v| g.out(v))
            .filter(|&e| g.kind(e) == EdgeKind::Rw && in_s(g.to(e)))
        {
            match self
                .searcher
                .cycle_through(g, spec, e, in_s, &mut self.budget)
            {
                Outcome::Cycle(edges) => {
                    self.found.push(Found { kind, edges });
                    return Tried::Found;
                }
                Outcome::OutOfBudget => return Tried::TimedOut,
                Outcome::NoCycle => {}
            }
        }
        Tried::Absent
    }

    /// Whether every transaction of `nodes` lies in one cyclic data component (so real time
    /// adds no new cycle among them).
    fn within_one_data_cycle(&self, nodes: impl IntoIterator<Item = Node>) -> bool {
        let mut comps = nodes
            .into_iter()
            .filter(|&v| !self.g.is_barrier(v))
            .map(|v| self.data_comp[v as usize]);
        let Some(first) = comps.next() else {
            return true;
        };
        comps.all(|c| c == first) && self.cyclic_data.binary_search(&first).is_ok()
    }

    fn real_time_component(
        &mut self,
        history: &[Entry],
        members: &[Node],
        in_f: impl Fn(Node) -> bool,
    ) {
        if self.within_one_data_cycle(members.iter().copied()) {
            return;
        }
        let g = self.g;
        let backwards = |e: usize| {
            let (u, v) = (g.from(e) as usize, g.to(e) as usize);
            KindSet::DATA.contains(g.kind(e))
                && in_f(v as Node)
                && history[v].complete_ns < history[u].invoke_ns
        };
        let data: Vec<usize> = members
            .iter()
            .flat_map(|&v| g.out(v))
            .filter(|&e| backwards(e))
            .take(RT_TRIES)
            .collect();
        // Real-time links into a transaction: out of a barrier, or a declared dependency's
        // direct link (`declared-strict-serializable`).
        let links = members
            .iter()
            .flat_map(|&v| g.out(v))
            .filter(|&e| g.kind(e) == EdgeKind::Rt && !g.is_barrier(g.to(e)) && in_f(g.to(e)));
        let (mut best, mut first): (Option<Vec<usize>>, Option<Vec<usize>>) = (None, None);
        for (i, e) in data.into_iter().chain(links).enumerate() {
            // The first search is certain to find a cycle (the component is strongly
            // connected); the others only look for a shorter or a more telling one.
            let mut unlimited = u64::MAX;
            let budget = if i == 0 {
                &mut unlimited
            } else {
                &mut self.budget
            };
            let edges = match self
                .searcher
                .cycle_through(g, &search::ANY, e, &in_f, budget)
            {
                Outcome::Cycle(edges) => edges,
                Outcome::OutOfBudget => break,
                Outcome::NoCycle => continue,
            };
            let needs_rt = edges.iter().any(|&e| g.kind(e) == EdgeKind::Rt)
                && !self.within_one_data_cycle(edges.iter().map(|&e| g.from(e)));
            let shorter = match &best {
                Some(b) => real_len(g, &edges) < real_len(g, b),
                None => true,
            };
            if needs_rt && shorter {
                best = Some(edges);
            } else if first.is_none() {
                first = Some(edges);
            }
            if best.is_some() && g.kind(e) == EdgeKind::Rt {
                break; // through a real-time link the first acceptable cycle will do
            }
        }
        if let Some(edges) = best.or(first) {
            self.found.push(Found {
                kind: AnomalyKind::RealTime,
                edges,
            });
        }
    }
}

/// The number of transactions on a cycle.
fn real_len(g: &Graph, edges: &[usize]) -> usize {
    edges.iter().filter(|&&e| !g.is_barrier(g.to(e))).count()
}

/// The class of a data cycle, from its edges.
pub(crate) fn classify(g: &Graph, edges: &[usize]) -> AnomalyKind {
    let kinds: Vec<EdgeKind> = edges
        .iter()
        .map(|&e| g.kind(e))
        .filter(|&k| k != EdgeKind::Rt)
        .collect();
    let rw = kinds.iter().filter(|&&k| k == EdgeKind::Rw).count();
    let adjacent = (0..kinds.len())
        .any(|i| kinds[i] == EdgeKind::Rw && kinds[(i + 1) % kinds.len()] == EdgeKind::Rw);
    match rw {
        0 if kinds.contains(&EdgeKind::Wr) => AnomalyKind::G1c,
        0 => AnomalyKind::G0,
        1 => AnomalyKind::GSingle,
        _ if adjacent => AnomalyKind::G2,
        _ => AnomalyKind::GNonadjacent,
    }
}
