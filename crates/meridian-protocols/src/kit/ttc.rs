//! The TTC Oracle (K2 §2.2, §4.2), shared by `k2` and `p2pl-ttc`: per-region PTP servers
//! whose clocks stay within ε of true time, answering each request with their uncertainty
//! upper bound `T_high = now + ε`, so `abs(T_oracle) ≤ T_high ≤ abs(T_oracle) + 2ε`.
//!
//! Pure state: the protocol owns the request and reply messages; [`OracleClock::stamp`]
//! says what to answer. [`oracles_nearest_first`] orders a node's oracles for asking,
//! [`OracleCursor`] picks the one to ask (K2's coordinators and epoch clocks, p2PL-TTC's
//! coordinators and SafeTS primaries), and [`check_oracle_clocks`] refuses deployments whose oracle clocks promise no ε.

use meridian_core::{Cluster, NodeId, NodeRole};

/// The name of the oracle service (topology `[[services]] name`).
pub const ORACLE_SERVICE: &str = "oracle";

/// An oracle's answering state. Replies from one incarnation strictly increase. It keeps
/// nothing durable: a TrueTime clock needs no lease, and its users never issue a
/// timestamp twice on their own.
#[derive(Debug)]
pub struct OracleClock {
    /// This oracle's id (its index in the `oracle` service).
    pub index: u32,
    epsilon_ns: u64,
    last_high_ns: u64,
}

impl OracleClock {
    pub fn new(index: u32, epsilon_ns: u64) -> OracleClock {
        OracleClock {
            index,
            epsilon_ns,
            last_high_ns: 0,
        }
    }

    /// `T_high` for a request answered at local (TrueTime) clock `now_ns`.
    pub fn stamp(&mut self, now_ns: u64) -> u64 {
        let high_ns = (now_ns + self.epsilon_ns).max(self.last_high_ns + 1);
        self.last_high_ns = high_ns;
        high_ns
    }

    /// `T_low = now − ε` at local (TrueTime) clock `now_ns`: true time is at least this
    /// now (Spanner's `TT.now().earliest`), so it bounds every later event from below.
    pub fn earliest(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.epsilon_ns)
    }
}

/// `nodes` ordered nearest to `me` first (ties by node id).
pub fn nearest_first(cluster: &Cluster, me: NodeId, mut nodes: Vec<NodeId>) -> Vec<NodeId> {
    nodes.sort_by(|a, b| {
        let (ra, rb) = (cluster.rtt_ms(me, *a), cluster.rtt_ms(me, *b));
        ra.total_cmp(&rb).then(a.cmp(b))
    });
    nodes
}

/// The oracles of `cluster`, nearest to `node` first (ties by node id).
pub fn oracles_nearest_first(cluster: &Cluster, node: NodeId) -> Vec<NodeId> {
    nearest_first(cluster, node, cluster.services(ORACLE_SERVICE))
}

/// Which oracle a node asks: the nearest; the next nearest after a request went
/// unanswered; and, once a farther oracle has answered, the nearest again.
///
/// Why a detour lasts one answer: a request can go unanswered with every oracle up (the
/// simulator's exponential jitter makes a 1 ms round trip in a region of 0.2 ms about one
/// request in 300), and a cursor that only ever moves forward then ends on another
/// region's oracle for good — every later timestamp costs a WAN round trip (K2's Table 2
/// measured a mean get-ts of 2.2 ms that way). An oracle as near as the nearest (the
/// second of a region) keeps being asked, so a crashed nearest one costs one timeout, not
/// one per request.
#[derive(Clone, Debug, Default)]
pub struct OracleCursor {
    /// Nearest first, with their round trips (ms).
    oracles: Vec<(NodeId, f64)>,
    at: usize,
}

impl OracleCursor {
    /// `cluster`'s oracles as seen from `me`.
    pub fn new(cluster: &Cluster, me: NodeId) -> OracleCursor {
        let oracles = oracles_nearest_first(cluster, me)
            .into_iter()
            .map(|o| (o, cluster.rtt_ms(me, o)))
            .collect();
        OracleCursor { oracles, at: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.oracles.is_empty()
    }

    /// The oracle to ask now (`None` without oracles).
    pub fn current(&self) -> Option<NodeId> {
        let n = self.oracles.len();
        (n > 0).then(|| self.oracles[self.at % n].0)
    }

    /// The round trip to [`OracleCursor::current`], ms (0 without oracles).
    pub fn current_rtt_ms(&self) -> f64 {
        let n = self.oracles.len();
        if n == 0 {
            return 0.0;
        }
        self.oracles[self.at % n].1
    }

    /// The oracle asked did not answer in time: ask the next nearest.
    pub fn skip(&mut self) {
        self.at = (self.at + 1) % self.oracles.len().max(1);
    }

    /// An oracle answered: keep the current one if it is as near as the nearest, else go
    /// back to the nearest.
    pub fn answered(&mut self) {
        let nearest_ms = self.oracles.first().map_or(0.0, |o| o.1);
        if self.current_rtt_ms() > nearest_ms {
            self.at = 0;
        }
    }
}

/// The default oracle placement: one per region (a topology's `[[services]]` overrides it).
pub fn one_oracle_per_region(cluster: &Cluster) -> Vec<(String, meridian_core::RegionId)> {
    (0..cluster.topology.regions.len() as u16)
        .map(|r| (ORACLE_SERVICE.to_string(), meridian_core::RegionId(r)))
        .collect()
}

/// Refuses a deployment whose oracles' clocks do not promise ε: a protocol whose
/// correctness rests on the TTC bound (K2 §4.1) would test nothing on clocks that may err
/// more.
pub fn check_oracle_clocks(cluster: &Cluster, epsilon_us: u64) -> Result<(), String> {
    for node in &cluster.nodes {
        if !matches!(&node.role, NodeRole::Service { name, .. } if name == ORACLE_SERVICE) {
            continue;
        }
        let bound_ms = node.clock.params.error_bound_ms;
        let epsilon_ms = epsilon_us as f64 / 1000.0;
        if bound_ms.is_none_or(|b| b > epsilon_ms) {
            return Err(format!(
                "protocol option `epsilon_us` ({epsilon_us}) is below what oracle {} promises \
                 (clock profile `{}`, error_bound_ms {:?}); give the oracles a TrueTime clock \
                 profile (see topologies/k2-five-regions.toml)",
                node.name, node.clock.name, bound_ms
            ));
        }
    }
    Ok(())
}

/// `ns · (1 + D)` for a drift bound of `drift_ppm`: a duration that an ordinary clock
/// drifting by up to D may count short.
pub fn with_drift(ns: u64, drift_ppm: u64) -> u64 {
    ns + (ns as u128 * drift_ppm as u128).div_ceil(1_000_000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_strictly_increase_and_lead_the_clock_by_epsilon() {
        let mut o = OracleClock::new(0, 100);
        assert_eq!(o.stamp(1_000), 1_100);
        // A clock read that does not advance (or steps back) still gets a larger stamp.
        assert_eq!(o.stamp(1_000), 1_101);
        assert_eq!(o.stamp(900), 1_102);
    }

    #[test]
    fn a_detour_to_a_farther_oracle_lasts_one_answer() {
        let near = |n: u32| (NodeId(n), 0.2);
        let mut c = OracleCursor {
            oracles: vec![near(1), near(2), (NodeId(3), 30.0)],
            at: 0,
        };
        c.skip();
        c.answered();
        assert_eq!(c.current(), Some(NodeId(2)), "as near as the nearest: kept");
        c.skip();
        assert_eq!(c.current(), Some(NodeId(3)));
        c.answered();
        assert_eq!(c.current(), Some(NodeId(1)), "back to the nearest");
        c.skip();
        c.skip();
        c.skip();
        assert_eq!(c.current(), Some(NodeId(1)), "wraps around");
    }

    #[test]
    fn drift_rounds_up() {
        assert_eq!(with_drift(1_000_000, 200), 1_000_200);
        assert_eq!(with_drift(1, 200), 2);
    }
}
