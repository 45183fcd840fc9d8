//! One-way-delay estimation from clock-stamped round trips (Tiga §3.1 and §5.7; the
//! Clock-SI paper's §V-F measures the same quantity, "the clock skew between two clocks
//! plus one-way network latency", t₂ − t₁).
//!
//! A *forward* sample is the peer's clock when a message arrived minus the sender's clock
//! when it left: the delay plus the clocks' offset, which is exactly what a timestamp
//! needs as headroom to reach the peer before the peer's clock passes it. A *back* sample
//! is the sender's clock when the reply arrived minus the peer's clock when it replied.
//! Each peer keeps a sliding window of both; estimates are percentiles of the window
//! (nearest rank, clamped at 0), or the topology's mean one-way delay before the first
//! sample. Sans-IO: the protocol carries the clock readings in its own messages.

use meridian_core::{Cluster, NodeId};
use std::collections::VecDeque;

/// The recent probe samples of one server, in ns (signed: clock error can make them
/// negative).
#[derive(Clone, Debug, Default)]
struct Samples {
    forward: Window,
    back: Window,
}

/// A sliding window of samples, also kept sorted: every transaction reads percentiles of
/// up to 9 servers' windows, far more often than a probe changes one.
#[derive(Clone, Debug, Default)]
struct Window {
    arrival: VecDeque<i64>,
    sorted: Vec<i64>,
}

impl Window {
    fn push(&mut self, sample: i64, window: usize) {
        self.arrival.push_back(sample);
        let at = self.sorted.partition_point(|&x| x < sample);
        self.sorted.insert(at, sample);
        while self.arrival.len() > window {
            let old = self.arrival.pop_front().expect("non-empty");
            let at = self.sorted.partition_point(|&x| x < old);
            assert_eq!(
                self.sorted.get(at),
                Some(&old),
                "sorted window lost a sample"
            );
            self.sorted.remove(at);
        }
        debug_assert_eq!(self.arrival.len(), self.sorted.len());
    }

    /// The `percentile` of the samples (nearest rank), clamped at 0.
    fn estimate(&self, percentile: f64) -> Option<u64> {
        self.signed(percentile).map(|x| x.max(0) as u64)
    }

    /// The `percentile` of the samples (nearest rank).
    fn signed(&self, percentile: f64) -> Option<i64> {
        if self.sorted.is_empty() {
            return None;
        }
        let rank =
            ((percentile.clamp(0.0, 100.0) / 100.0) * (self.sorted.len() - 1) as f64).round();
        Some(self.sorted[rank as usize])
    }
}

impl Window {
    /// The margin that minimizes the expected cost of arriving late, when arriving late
    /// costs `late_cost_ns`: the largest sample plus `σ · ln(C / (σ · (n + 1)))`, clamped at
    /// 0. With `n` samples the next one exceeds the largest with probability about
    /// 1 / (n + 1); beyond it the tail is taken as exponential with scale σ, the mean excess
    /// of the samples above their median (at least `sigma_floor_ns`). So a margin grows with
    /// the jitter and with what lateness costs, and only logarithmically with the cost.
    fn covering(&self, late_cost_ns: u64, sigma_floor_ns: u64) -> Option<u64> {
        let max = *self.sorted.last()?;
        let median = self.signed(50.0).expect("non-empty");
        let above = &self.sorted[self.sorted.len() / 2..];
        let excess = above.iter().map(|&x| (x - median) as f64).sum::<f64>() / above.len() as f64;
        let sigma = excess.max(sigma_floor_ns as f64).max(1.0);
        let odds = late_cost_ns as f64 / (sigma * (self.sorted.len() + 1) as f64);
        let margin = if odds > 1.0 { sigma * odds.ln() } else { 0.0 };
        Some((max as f64 + margin).max(0.0) as u64)
    }
}

/// Per-peer forward and back delay samples of one node.
#[derive(Clone, Debug)]
pub struct OwdEstimator {
    me: NodeId,
    samples: Vec<Samples>,
}

impl OwdEstimator {
    /// Node `me`'s estimator toward `nodes` peers (indexed by node id).
    pub fn new(me: NodeId, nodes: usize) -> OwdEstimator {
        OwdEstimator {
            me,
            samples: vec![Samples::default(); nodes],
        }
    }

    /// Records one round trip `(sent, at peer, received)`: the first and last are this
    /// node's clock, the middle one the peer's clock when the message arrived; each window
    /// keeps the latest `window` samples. A peer outside the cluster is ignored.
    pub fn record(
        &mut self,
        peer: NodeId,
        (sent_ns, peer_ns, received_ns): (u64, u64, u64),
        window: usize,
    ) {
        let Some(s) = self.samples.get_mut(peer.index()) else {
            return;
        };
        s.forward.push(peer_ns as i64 - sent_ns as i64, window);
        s.back.push(received_ns as i64 - peer_ns as i64, window);
    }

    /// Records a one-way sample only: `peer` stamped a message `sent_ns` on its clock and
    /// it arrived at `received_ns` on this node's (DAST's managers learn a region's delay
    /// from the prep-remote messages they receive, Alg. 2 line 11). Kept as the peer's
    /// forward sample, so [`OwdEstimator::forward_ns`] reads it.
    pub fn record_arrival(&mut self, peer: NodeId, sent_ns: u64, received_ns: u64, window: usize) {
        if let Some(s) = self.samples.get_mut(peer.index()) {
            s.forward.push(received_ns as i64 - sent_ns as i64, window);
        }
    }

    /// The forward delay to `peer` (delay plus clock offset): the `percentile` of the
    /// recent samples; before the first sample, the topology's mean one-way delay.
    pub fn forward_ns(&self, cluster: &Cluster, peer: NodeId, percentile: f64) -> u64 {
        self.samples
            .get(peer.index())
            .and_then(|s| s.forward.estimate(percentile))
            .unwrap_or_else(|| topology_ns(cluster, self.me, peer))
    }

    /// The forward headroom to `peer` that minimizes the expected cost when arriving late
    /// costs `late_cost_ns` (see `Window::covering`); before the first sample, the
    /// topology's mean one-way delay.
    pub fn forward_covering_ns(
        &self,
        cluster: &Cluster,
        peer: NodeId,
        late_cost_ns: u64,
        sigma_floor_ns: u64,
    ) -> u64 {
        self.samples
            .get(peer.index())
            .and_then(|s| s.forward.covering(late_cost_ns, sigma_floor_ns))
            .unwrap_or_else(|| topology_ns(cluster, self.me, peer))
    }

    /// The forward samples' `percentile`, unclamped (negative when the peer's clock is
    /// behind by more than the delay: what a clock-gated peer would make a message wait);
    /// `None` before the first sample.
    pub fn forward_signed_ns(&self, peer: NodeId, percentile: f64) -> Option<i64> {
        self.samples
            .get(peer.index())
            .and_then(|s| s.forward.signed(percentile))
    }

    /// The delay of a reply from `peer`, likewise.
    pub fn back_ns(&self, cluster: &Cluster, peer: NodeId, percentile: f64) -> u64 {
        self.samples
            .get(peer.index())
            .and_then(|s| s.back.estimate(percentile))
            .unwrap_or_else(|| topology_ns(cluster, peer, self.me))
    }
}

/// The topology's mean one-way delay from `from` to `to`, ns.
pub fn topology_ns(cluster: &Cluster, from: NodeId, to: NodeId) -> u64 {
    (cluster.one_way_ms(from, to) * 1e6) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(samples: &[i64]) -> Window {
        let mut w = Window::default();
        for &x in samples {
            w.push(x, 16);
        }
        w
    }

    #[test]
    fn the_covering_margin_grows_with_jitter_and_with_the_cost_of_being_late() {
        const MS: i64 = 1_000_000;
        let tight = window(&[100 * MS; 16]);
        let jittery = window(
            &(0..16)
                .map(|i| 100 * MS + (i % 4) * 3 * MS)
                .collect::<Vec<_>>(),
        );
        let cost = |w: &Window, c: i64| w.covering(c as u64, 100_000).unwrap() as i64;
        // Identical samples: the floor's scale only, a fraction of a millisecond.
        assert!(cost(&tight, 200 * MS) - 100 * MS < MS);
        // Jitter widens the margin beyond the largest sample (109 ms).
        let jittery_margin = cost(&jittery, 200 * MS) - 109 * MS;
        assert!(jittery_margin > 2 * MS, "{jittery_margin}");
        // A costlier lateness widens it, but only logarithmically.
        let dearer = cost(&jittery, 2_000 * MS) - 109 * MS;
        assert!(
            dearer > jittery_margin && dearer < 4 * jittery_margin,
            "{dearer}"
        );
        // When lateness costs less than the tail's scale, the largest sample is enough.
        assert_eq!(cost(&jittery, MS), 109 * MS);
    }
}
