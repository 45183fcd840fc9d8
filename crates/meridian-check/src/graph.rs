//! The dependency graph: typed edges between transactions (and the barrier nodes of the
//! real-time order), stored as compressed adjacency lists so that Tarjan and the cycle
//! searches walk flat arrays.
//!
//! Nodes `0..txns` are transactions (their position in the history); nodes from `txns` on
//! are *barriers*, virtual nodes that stand for "every transaction completed before this
//! point" in the real-time order (see [`crate::realtime`]). Every edge carries a [`Why`]: the
//! key and values that justify it, so a cycle can be explained step by step.

use std::ops::Range;

/// A graph node: a transaction position, or a barrier (`>= txns`).
pub(crate) type Node = u32;
/// An interned key.
pub(crate) type KeyId = u32;

/// The four dependency types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum EdgeKind {
    /// Write-write: `to` installed the version right after `from`'s.
    Ww = 0,
    /// Write-read: `to` read (a state including) `from`'s write.
    Wr = 1,
    /// Read-write (anti-dependency): `from` read a state that `to`'s write later overwrote.
    Rw = 2,
    /// Real time: `from` completed before `to` was invoked (one link of a barrier chain).
    Rt = 3,
}

/// A set of [`EdgeKind`]s, as a bit mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KindSet(u8);

impl KindSet {
    pub const WW: KindSet = KindSet(1 << EdgeKind::Ww as u8);
    pub const WR: KindSet = KindSet(1 << EdgeKind::Wr as u8);
    pub const RW: KindSet = KindSet(1 << EdgeKind::Rw as u8);
    pub const RT: KindSet = KindSet(1 << EdgeKind::Rt as u8);
    pub const WW_WR: KindSet = KindSet(Self::WW.0 | Self::WR.0);
    pub const DATA: KindSet = KindSet(Self::WW_WR.0 | Self::RW.0);
    pub const ALL: KindSet = KindSet(Self::DATA.0 | Self::RT.0);

    pub fn contains(self, kind: EdgeKind) -> bool {
        self.0 & (1 << kind as u8) != 0
    }
}

/// Why an edge exists: the key and the values that prove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// ww: `to` appended `next` right after `from`'s `prev` in the version order of `key`.
    NextAppend { key: KeyId, prev: i64, next: i64 },
    /// ww: no read saw `to`'s append of `next`, so it follows `prev`, the last element read.
    UnreadAppend { key: KeyId, prev: i64, next: i64 },
    /// wr: `to` read `key` as a list of `read_len` elements containing `from`'s `value`
    /// (as its last element when `last`).
    ReadList {
        key: KeyId,
        value: i64,
        read_len: u32,
        last: bool,
    },
    /// wr: `to` read register `key` = `value`, which `from` wrote.
    ReadRegister { key: KeyId, value: i64 },
    /// rw: `from` read `key` as a list of `read_len` elements (ending in `last`) that misses
    /// `to`'s append of `next`.
    MissedAppend {
        key: KeyId,
        last: Option<i64>,
        read_len: u32,
        next: i64,
    },
    /// rt: one link of a real-time chain; `key` is set when the chain is per key (strong
    /// partition serializability).
    RealTime { key: Option<KeyId> },
}

impl Why {
    pub fn kind(&self) -> EdgeKind {
        match self {
            Why::NextAppend { .. } | Why::UnreadAppend { .. } => EdgeKind::Ww,
            Why::ReadList { .. } | Why::ReadRegister { .. } => EdgeKind::Wr,
            Why::MissedAppend { .. } => EdgeKind::Rw,
            Why::RealTime { .. } => EdgeKind::Rt,
        }
    }
}

/// An edge before the graph is built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawEdge {
    pub from: Node,
    pub to: Node,
    pub why: Why,
}

/// Counts of distinct edges per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KindCounts(pub [u64; 4]);

/// The built graph: edges sorted by source, one entry per distinct (from, to, kind).
pub(crate) struct Graph {
    /// Number of transaction nodes; nodes at or above are barriers.
    pub txns: u32,
    offsets: Vec<u32>,
    from: Vec<Node>,
    to: Vec<Node>,
    kind: Vec<EdgeKind>,
    why: Vec<Why>,
    pub counts: KindCounts,
}

impl Graph {
    /// Builds the graph over `nodes` nodes. Duplicate (from, to, kind) edges are merged,
    /// keeping the first one added, so explanations are deterministic. Edges are bucketed by
    /// source with a counting sort; only each node's few out-edges are sorted.
    pub fn build(txns: u32, nodes: u32, edges: Vec<RawEdge>) -> Graph {
        let n = nodes as usize;
        let mut start = vec![0u32; n + 1];
        for e in &edges {
            start[e.from as usize + 1] += 1;
        }
        for i in 1..=n {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut order = vec![0u32; edges.len()];
        for (i, e) in edges.iter().enumerate() {
            order[fill[e.from as usize] as usize] = i as u32;
            fill[e.from as usize] += 1;
        }
        let mut g = Graph {
            txns,
            offsets: Vec::with_capacity(n + 1),
            from: Vec::with_capacity(edges.len()),
            to: Vec::with_capacity(edges.len()),
            kind: Vec::with_capacity(edges.len()),
            why: Vec::with_capacity(edges.len()),
            counts: KindCounts::default(),
        };
        g.offsets.push(0);
        let mut bucket: Vec<(u64, u32)> = Vec::new();
        for v in 0..n {
            // Sort by (to, kind), then insertion order, on compact keys.
            bucket.clear();
            bucket.extend(
                order[start[v] as usize..start[v + 1] as usize]
                    .iter()
                    .map(|&i| {
                        let e = &edges[i as usize];
                        ((u64::from(e.to) << 2) | e.why.kind() as u64, i)
                    }),
            );
            bucket.sort_unstable();
            bucket.dedup_by_key(|b| b.0);
            for &(_, i) in &bucket {
                g.push(edges[i as usize]);
            }
            g.offsets.push(g.to.len() as u32);
        }
        g
    }

    fn push(&mut self, e: RawEdge) {
        self.from.push(e.from);
        self.to.push(e.to);
        self.kind.push(e.why.kind());
        self.why.push(e.why);
        self.counts.0[e.why.kind() as usize] += 1;
    }

    pub fn nodes(&self) -> u32 {
        (self.offsets.len() - 1) as u32
    }

    /// The edge indices leaving `v`.
    pub fn out(&self, v: Node) -> Range<usize> {
        self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize
    }

    pub fn from(&self, e: usize) -> Node {
        self.from[e]
    }

    pub fn to(&self, e: usize) -> Node {
        self.to[e]
    }

    pub fn kind(&self, e: usize) -> EdgeKind {
        self.kind[e]
    }

    pub fn why(&self, e: usize) -> Why {
        self.why[e]
    }

    pub fn is_barrier(&self, v: Node) -> bool {
        v >= self.txns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(from: Node, to: Node) -> RawEdge {
        let why = Why::MissedAppend {
            key: 0,
            last: None,
            read_len: 0,
            next: 1,
        };
        RawEdge { from, to, why }
    }

    #[test]
    fn duplicate_edges_merge_and_adjacency_is_by_source() {
        let ww = RawEdge {
            from: 0,
            to: 1,
            why: Why::NextAppend {
                key: 0,
                prev: 1,
                next: 2,
            },
        };
        let g = Graph::build(3, 3, vec![rw(2, 0), rw(0, 1), ww, rw(0, 1)]);
        assert_eq!(g.counts.0, [1, 0, 2, 0]);
        let out: Vec<_> = g.out(0).map(|e| (g.to(e), g.kind(e))).collect();
        assert_eq!(out, [(1, EdgeKind::Ww), (1, EdgeKind::Rw)]);
        assert_eq!(g.out(1).len(), 0);
        assert_eq!(g.out(2).map(|e| g.to(e)).collect::<Vec<_>>(), [0]);
        assert!(KindSet::DATA.contains(EdgeKind::Rw) && !KindSet::DATA.contains(EdgeKind::Rt));
    }
}
