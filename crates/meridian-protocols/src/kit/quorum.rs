//! Quorum tracking: replies from a known set of members, counted toward a threshold.
//!
//! Two-phase commit needs every participant (2PL's yes votes, Clock-SI's prepare
//! timestamps, whose maximum becomes the commit timestamp); Raft and Tiga's slow path need
//! a majority; Tiga's fast path a super quorum of f + ⌈f/2⌉ + 1 *matching* replies (§3.1,
//! §3.4). [`Votes`] keeps at most one reply per member (a later one replaces it, so a
//! duplicated or retransmitted reply never counts twice) and ignores non-members.

use meridian_core::{Cluster, NodeId, ShardId};

/// A majority of `n` members.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Tiga's fast-path super quorum with `f` tolerated failures: 1 + f + ⌈f/2⌉ (§3.1, §3.4).
pub fn super_quorum(f: usize) -> usize {
    1 + f + f.div_ceil(2)
}

/// One round trip from `coordinator` to the farthest member of each shard's closest super
/// quorum, over `shards`: the fast path's latency bound of protocols that commit on a super
/// quorum of matching replies (Tiga §3.4, TAPIR's and Janus's fast paths).
pub fn super_quorum_round_trip_ms(
    cluster: &Cluster,
    coordinator: NodeId,
    shards: &[ShardId],
) -> f64 {
    shards
        .iter()
        .map(|&s| {
            let rtts = sorted_rtts_ms(cluster, coordinator, cluster.replicas(s).iter().copied());
            let need = super_quorum(cluster.f(s)).min(rtts.len()).max(1);
            rtts[need - 1]
        })
        .fold(0.0, f64::max)
}

/// Round trips from `from` to each of `to`, shortest first.
fn sorted_rtts_ms(cluster: &Cluster, from: NodeId, to: impl Iterator<Item = NodeId>) -> Vec<f64> {
    let mut rtts: Vec<f64> = to.map(|r| cluster.rtt_ms(from, r)).collect();
    rtts.sort_by(f64::total_cmp);
    rtts
}

/// Over `shards`, the largest round trip from `coordinator` to a shard's placed leader plus
/// the leader's round trip to the nearest followers that make up a majority with it: the
/// latency bound of protocols that commit through a leader-based log (Raft, Multi-Paxos),
/// whose leader answers only once its record is on a majority. On `gcp-tiga` (leaders in
/// SC) an SC coordinator's bound is SC–BR, not a LAN round trip.
pub fn leader_majority_round_trip_ms(
    cluster: &Cluster,
    coordinator: NodeId,
    shards: &[ShardId],
) -> f64 {
    shards
        .iter()
        .map(|&s| {
            let leader = cluster.initial_leader(s);
            let replicas = cluster.replicas(s);
            let followers = replicas.iter().copied().filter(|&r| r != leader);
            let rtts = sorted_rtts_ms(cluster, leader, followers);
            // The leader counts itself: it needs `majority - 1` followers.
            let replication = majority(replicas.len())
                .checked_sub(2)
                .and_then(|i| rtts.get(i))
                .copied()
                .unwrap_or(0.0);
            cluster.rtt_ms(coordinator, leader) + replication
        })
        .fold(0.0, f64::max)
}

/// The replies of a fixed set of members, by member id (iteration is in id order).
#[derive(Clone, Debug)]
pub struct Votes<V> {
    replies: Vec<(NodeId, Option<V>)>,
    need: usize,
}

impl<V> Votes<V> {
    /// Waits for `need` of `members` (duplicates count once).
    pub fn new(members: impl IntoIterator<Item = NodeId>, need: usize) -> Votes<V> {
        let mut ids: Vec<NodeId> = members.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        Votes {
            replies: ids.into_iter().map(|m| (m, None)).collect(),
            need,
        }
    }

    /// Waits for every member (two-phase commit's votes).
    pub fn all(members: impl IntoIterator<Item = NodeId>) -> Votes<V> {
        let mut votes = Votes::new(members, 0);
        votes.need = votes.replies.len();
        votes
    }

    pub fn is_member(&self, node: NodeId) -> bool {
        self.slot(node).is_some()
    }

    /// Records `from`'s reply (replacing an earlier one); false if `from` is not a member.
    pub fn record(&mut self, from: NodeId, reply: V) -> bool {
        match self.slot(from) {
            Some(i) => {
                self.replies[i].1 = Some(reply);
                true
            }
            None => false,
        }
    }

    pub fn replied(&self, node: NodeId) -> bool {
        self.slot(node).is_some_and(|i| self.replies[i].1.is_some())
    }

    /// Enough members replied, whatever they said.
    pub fn complete(&self) -> bool {
        self.replies.iter().filter(|(_, r)| r.is_some()).count() >= self.need
    }

    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.replies.iter().map(|(m, _)| *m)
    }

    /// The members that have not replied.
    pub fn missing(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.replies
            .iter()
            .filter(|(_, r)| r.is_none())
            .map(|(m, _)| *m)
    }

    /// The replies received.
    pub fn replies(&self) -> impl Iterator<Item = &V> + '_ {
        self.replies.iter().filter_map(|(_, r)| r.as_ref())
    }

    /// The replies received, with their senders.
    pub fn replies_by(&self) -> impl Iterator<Item = (NodeId, &V)> + '_ {
        self.replies
            .iter()
            .filter_map(|(m, r)| r.as_ref().map(|r| (*m, r)))
    }

    fn slot(&self, node: NodeId) -> Option<usize> {
        self.replies.binary_search_by_key(&node, |(m, _)| *m).ok()
    }
}

impl<V: PartialEq> Votes<V> {
    /// How many members replied `reply`.
    pub fn matching(&self, reply: &V) -> usize {
        self.replies().filter(|r| *r == reply).count()
    }

    /// `need` members replied `reply` (a fast quorum of matching replies).
    pub fn reached(&self, reply: &V) -> bool {
        self.matching(reply) >= self.need
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_papers() {
        assert_eq!([1, 3, 5].map(majority), [1, 2, 3]);
        assert_eq!([1, 2, 3].map(super_quorum), [3, 4, 6]);
    }

    #[test]
    fn all_waits_for_every_member_once_and_ignores_strangers() {
        let mut v = Votes::all([NodeId(4), NodeId(2), NodeId(4)]);
        assert!(!v.record(NodeId(9), 1));
        assert!(v.record(NodeId(4), 1));
        assert!(v.record(NodeId(4), 3));
        assert!(!v.complete(), "a duplicate does not count twice");
        assert_eq!(v.missing().collect::<Vec<_>>(), vec![NodeId(2)]);
        v.record(NodeId(2), 2);
        assert!(v.complete());
        assert_eq!(v.replies().max(), Some(&3));
        assert_eq!(v.members().collect::<Vec<_>>(), vec![NodeId(2), NodeId(4)]);
    }

    #[test]
    fn a_super_quorum_needs_matching_replies() {
        let members = (0..5).map(NodeId);
        let mut v = Votes::new(members, super_quorum(2));
        for (i, r) in ["a", "a", "b", "a"].into_iter().enumerate() {
            v.record(NodeId(i as u32), r);
        }
        assert!(v.complete());
        assert!(!v.reached(&"a"));
        v.record(NodeId(4), "a");
        assert!(v.reached(&"a"));
        assert_eq!(v.matching(&"b"), 1);
    }
}
