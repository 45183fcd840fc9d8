//! The coordinator's latency estimates (§3.1) and the choice of quorum they feed (§6
//! "Timestamp initialization"): how far in the future a transaction's timestamp goes.
//!
//! Probes are timed by the local clocks, so a *forward* sample (server clock at receipt −
//! coordinator clock at sending) is exactly the headroom a transaction needed to reach that
//! server before its timestamp: clock error is measured along with the delay (§5.7). A
//! *back* sample (coordinator clock at the reply's receipt − server clock at receipt) is
//! the delay of a reply; it only ranks the two paths. The samples and their percentiles
//! are the kit's one-way-delay estimator ([`crate::kit::owd`]); the plans are Tiga's.

use super::options::{HeadroomMode, Options, PathChoice};
use crate::kit::owd::{topology_ns, OwdEstimator};
use crate::kit::quorum::super_quorum;
use meridian_core::{Cluster, NodeId, ShardId};

/// The smallest jitter scale the cost-aware headroom assumes (a window of identical samples
/// says little about the next one).
const SIGMA_FLOOR_NS: u64 = 100_000;

/// Which quorum a transaction's timestamp was planned for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// A super quorum of every shard (closest to the coordinator, leader included) receives
    /// the transaction before its timestamp (§3.1).
    Fast,
    /// Only the leaders do; the transaction commits with the leaders' fast replies and f
    /// slow replies per shard (§6).
    Slow,
}

/// A timestamp plan: the headroom to add to the sending time, and the quorum it targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub headroom_ns: u64,
    pub planned: Planned,
    /// When, after sending, every fast reply of the super quorums should be in: the later
    /// of the headroom and the farthest member's forward delay, plus the slowest back
    /// delay. Past it (plus `inquiry_ms`) a pulling coordinator asks for slow replies.
    pub fast_done_ns: u64,
}

/// Per-server OWD samples (the kit's [`OwdEstimator`]) and the plans drawn from them.
#[derive(Clone, Debug)]
pub struct Estimator {
    owd: OwdEstimator,
}

impl Estimator {
    pub fn new(me: NodeId, nodes: usize) -> Estimator {
        Estimator {
            owd: OwdEstimator::new(me, nodes),
        }
    }

    /// Records one probe round trip `(sent, at server, received)`: the first and last are
    /// the coordinator's clock, the middle one the server's clock when the probe arrived.
    pub fn record(&mut self, server: NodeId, probe: (u64, u64, u64), window: usize) {
        self.owd.record(server, probe, window);
    }

    /// The forward OWD estimate to `server`: the `percentile` of the recent samples,
    /// clamped at 0; before the first sample, the topology's mean one-way delay.
    pub fn forward_ns(&self, cluster: &Cluster, server: NodeId, percentile: f64) -> u64 {
        self.owd.forward_ns(cluster, server, percentile)
    }

    /// The median delay of a reply from `server`.
    fn back_ns(&self, cluster: &Cluster, server: NodeId) -> u64 {
        self.owd.back_ns(cluster, server, 50.0)
    }

    /// The timestamp plan for a transaction on `shards` (§3.1; §6 when `opts.path` is
    /// `auto` or `slow`); `leaders[s]` is shard `s`'s leader in the current view.
    pub fn plan(
        &self,
        cluster: &Cluster,
        shards: &[ShardId],
        leaders: &[NodeId],
        opts: &Options,
    ) -> Plan {
        let (percentile, delta_ns) = match opts.headroom {
            HeadroomMode::Paper => (opts.probe_percentile, opts.delta_ns),
            HeadroomMode::CostAware => (50.0, 0),
            _ => (opts.adaptive_percentile, opts.adaptive_delta_ns),
        };
        let late_cost_ns = match opts.headroom {
            HeadroomMode::CostAware => self.late_cost_ns(cluster, leaders, shards),
            _ => 0,
        };
        let fwd = |r: NodeId| match opts.headroom {
            HeadroomMode::CostAware => {
                self.owd
                    .forward_covering_ns(cluster, r, late_cost_ns, SIGMA_FLOOR_NS)
            }
            _ => self.forward_ns(cluster, r, percentile),
        };
        let back = |r: NodeId| self.back_ns(cluster, r);
        // Fast: a super quorum per shard, the leader and the closest followers.
        let (mut fast_need, mut fast_back) = (0, 0);
        // Slow: the leaders only.
        let mut slow_need = 0;
        for &s in shards {
            let leader = leaders[s.index()];
            let mut followers: Vec<NodeId> = cluster
                .replicas(s)
                .iter()
                .copied()
                .filter(|&r| r != leader)
                .collect();
            followers.sort_by_key(|&r| fwd(r));
            let sq = super_quorum(cluster.f(s)).min(followers.len() + 1);
            for &r in std::iter::once(&leader).chain(&followers[..sq - 1]) {
                fast_need = fast_need.max(fwd(r));
                fast_back = fast_back.max(back(r));
            }
            slow_need = slow_need.max(fwd(leader));
        }
        let plan = |headroom_ns: u64, planned| Plan {
            headroom_ns,
            planned,
            fast_done_ns: headroom_ns.max(fast_need) + fast_back,
        };
        if opts.headroom == HeadroomMode::Zero {
            return plan(0, Planned::Fast);
        }
        let fast = plan(
            offset(fast_need + delta_ns, opts.headroom_offset_ns),
            Planned::Fast,
        );
        let slow = plan(
            offset(slow_need + delta_ns, opts.headroom_offset_ns),
            Planned::Slow,
        );
        match opts.path {
            PathChoice::Fast => fast,
            PathChoice::Slow => slow,
            PathChoice::Auto => {
                let fast_ns = fast.headroom_ns + fast_back;
                let slow_ns = slow.headroom_ns
                    + self.slow_tail_ns(cluster, shards, leaders, slow.headroom_ns, &fwd);
                if slow_ns + opts.path_margin_ns < fast_ns {
                    slow
                } else {
                    fast
                }
            }
        }
    }

    /// What arriving late costs a transaction on `shards` (cost-aware headroom): about one
    /// more round trip to its farthest leader (medians), which the re-execution or the slow
    /// path adds.
    fn late_cost_ns(&self, cluster: &Cluster, leaders: &[NodeId], shards: &[ShardId]) -> u64 {
        shards
            .iter()
            .map(|s| leaders[s.index()])
            .map(|l| self.forward_ns(cluster, l, 50.0) + self.back_ns(cluster, l))
            .max()
            .unwrap_or(0)
    }

    /// How long after the timestamp the slow path completes: per shard the later of the
    /// leader's fast reply and the f-th earliest follower slow reply (the follower gets
    /// the leader's log sync, or the transaction itself if that comes later, then
    /// replies). Leader-to-follower delays are the topology's (Tiga's servers measure them
    /// with Huygens' probe mesh, §3.8).
    fn slow_tail_ns(
        &self,
        cluster: &Cluster,
        shards: &[ShardId],
        leaders: &[NodeId],
        headroom_ns: u64,
        fwd: &dyn Fn(NodeId) -> u64,
    ) -> u64 {
        let mut tail = 0;
        for &s in shards {
            let leader = leaders[s.index()];
            let f = cluster.f(s);
            let mut follower_ns: Vec<u64> = cluster
                .replicas(s)
                .iter()
                .filter(|&&r| r != leader)
                .map(|&r| {
                    let synced =
                        topology_ns(cluster, leader, r).max(fwd(r).saturating_sub(headroom_ns));
                    synced + self.back_ns(cluster, r)
                })
                .collect();
            follower_ns.sort_unstable();
            let slow = follower_ns.get(f.saturating_sub(1)).copied().unwrap_or(0);
            tail = tail.max(self.back_ns(cluster, leader).max(slow));
        }
        tail
    }
}

fn offset(headroom_ns: u64, offset_ns: i64) -> u64 {
    (headroom_ns as i64 + offset_ns).max(0) as u64
}
