//! PCT's view of the other edge nodes of the region (§4.2): `maxTs`, the largest clock each
//! announced, and each one's pause point (§4.3), in slots by peer rather than hash maps,
//! with `min(maxTs)` cached.
//!
//! Every node hears from every other node of its region every heartbeat, so at the paper's
//! 30 nodes per region a node handles 29 announcements per heartbeat; looking each one up
//! in a hash map and re-taking the minimum over all 29 on every one made that work grow
//! with the square of the region. Here a peer is found by binary search in a sorted slice,
//! and the minimum is re-taken only when the peer that held it moved and a caller asks.

use meridian_core::{NodeId, Timestamp};

#[derive(Debug)]
pub struct Peers {
    /// The other edge nodes of the region, sorted.
    ids: Vec<NodeId>,
    max_ts: Vec<Timestamp>,
    pauses: Vec<Option<Timestamp>>,
    /// `min(max_ts)` unless `stale`.
    floor: Timestamp,
    stale: bool,
}

impl Peers {
    pub fn new(mut ids: Vec<NodeId>) -> Peers {
        ids.sort_unstable();
        ids.dedup();
        let n = ids.len();
        Peers {
            ids,
            max_ts: vec![Timestamp::ZERO; n],
            pauses: vec![None; n],
            floor: Timestamp::ZERO,
            stale: true,
        }
    }

    /// The peers `ids` after a view change: a kept peer keeps its announcements, a new
    /// one starts at the `seeded` clock given for it (else zero).
    pub fn rebuild(&self, ids: Vec<NodeId>, seeded: &[(NodeId, Timestamp)]) -> Peers {
        let mut next = Peers::new(ids);
        for i in 0..next.ids.len() {
            let id = next.ids[i];
            if let Some(old) = self.slot(id) {
                next.max_ts[i] = self.max_ts[old];
                next.pauses[i] = self.pauses[old];
            }
            if let Some((_, ts)) = seeded.iter().find(|(n, _)| *n == id) {
                next.max_ts[i] = next.max_ts[i].max(*ts);
            }
        }
        next
    }

    pub fn ids(&self) -> &[NodeId] {
        &self.ids
    }

    /// `peer`'s slot, if it is an edge node of this region.
    pub fn slot(&self, peer: NodeId) -> Option<usize> {
        self.ids.binary_search(&peer).ok()
    }

    /// The largest clock `peer` announced (zero if none, or not a peer).
    pub fn max_ts(&self, peer: NodeId) -> Timestamp {
        self.slot(peer)
            .map_or(Timestamp::ZERO, |slot| self.max_ts[slot])
    }

    /// Records the announcement of the peer in `slot` unless an earlier one carried a
    /// larger clock (messages may be reordered); returns whether it was recorded.
    pub fn announce(&mut self, slot: usize, clock: Timestamp, pause: Option<Timestamp>) -> bool {
        let known = self.max_ts[slot];
        if clock < known {
            return false;
        }
        if known <= self.floor {
            self.stale = true;
        }
        self.max_ts[slot] = clock;
        self.pauses[slot] = pause;
        true
    }

    /// `min(maxTs)` over the peers (the largest timestamp if there are none).
    pub fn floor(&mut self) -> Timestamp {
        if self.stale {
            self.floor = self
                .max_ts
                .iter()
                .copied()
                .min()
                .unwrap_or(Timestamp::with_frac(u64::MAX, u32::MAX, u32::MAX));
            self.stale = false;
        }
        self.floor
    }

    /// The largest clock a peer announced (zero if there are none).
    pub fn highest(&self) -> Timestamp {
        self.max_ts.iter().copied().max().unwrap_or(Timestamp::ZERO)
    }

    /// The lowest pause point a peer announced that is above `last`.
    pub fn lowest_pause_above(&self, last: Timestamp) -> Option<Timestamp> {
        self.pauses
            .iter()
            .flatten()
            .copied()
            .filter(|&p| p > last)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(t: u64) -> Timestamp {
        Timestamp::with_frac(t, 0, 0)
    }

    /// The cached minimum follows every announcement, whichever peer held it.
    #[test]
    fn the_floor_is_the_minimum_of_the_announced_clocks() {
        let mut p = Peers::new(vec![NodeId(9), NodeId(3), NodeId(5)]);
        assert_eq!(p.ids(), &[NodeId(3), NodeId(5), NodeId(9)]);
        assert_eq!(p.floor(), Timestamp::ZERO);
        let (a, b, c) = (p.slot(NodeId(3)).unwrap(), p.slot(NodeId(5)).unwrap(), 2);
        assert!(p.announce(a, ts(10), None));
        assert!(p.announce(b, ts(20), Some(ts(50))));
        assert_eq!(p.floor(), Timestamp::ZERO, "node 9 has not announced");
        assert!(p.announce(c, ts(30), Some(ts(40))));
        assert_eq!(p.floor(), ts(10));
        assert!(p.announce(a, ts(40), None));
        assert_eq!(p.floor(), ts(20));
        assert!(
            !p.announce(b, ts(15), None),
            "an older announcement is ignored"
        );
        assert_eq!((p.floor(), p.max_ts(NodeId(5))), (ts(20), ts(20)));
        assert_eq!(p.lowest_pause_above(ts(35)), Some(ts(40)));
        assert_eq!(p.lowest_pause_above(ts(45)), Some(ts(50)));
        assert_eq!(p.slot(NodeId(4)), None);
        assert_eq!(Peers::new(Vec::new()).floor().time_ns, u64::MAX);
    }
}
