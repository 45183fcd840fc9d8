//! The network model: per-link delay with jitter, loss, duplication, partitions.

use meridian_core::time::NS_PER_MS;
use meridian_core::{Cluster, NodeId};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashSet;

/// The state of the simulated network.
#[derive(Debug)]
pub struct Network {
    /// `one_way_ns[a][b]` between regions.
    one_way_ns: Vec<Vec<u64>>,
    jitter_mean_ns: f64,
    pub loss: f64,
    pub duplicate: f64,
    /// Directed links that are cut.
    cut: FxHashSet<(NodeId, NodeId)>,
}

/// What happens to one sent message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Dropped,
    /// Delivered after each of these delays (two for a duplicate).
    Delivered(u64, Option<u64>),
}

impl Network {
    pub fn new(cluster: &Cluster) -> Network {
        let one_way_ns = cluster
            .topology
            .one_way_ms
            .iter()
            .map(|row| {
                row.iter()
                    .map(|ms| (ms * NS_PER_MS as f64).round() as u64)
                    .collect()
            })
            .collect();
        Network {
            one_way_ns,
            jitter_mean_ns: cluster.topology.jitter_ms * NS_PER_MS as f64,
            loss: 0.0,
            duplicate: 0.0,
            cut: FxHashSet::default(),
        }
    }

    /// Cuts every link between `a` and `b`, both ways.
    pub fn partition(&mut self, a: &[NodeId], b: &[NodeId]) {
        for &x in a {
            for &y in b {
                if x != y {
                    self.cut.insert((x, y));
                    self.cut.insert((y, x));
                }
            }
        }
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        !self.cut.is_empty() && self.cut.contains(&(from, to))
    }

    /// Decides the fate of a message from `from` (in region `from_region`) to `to`.
    pub fn fate(&self, rng: &mut ChaCha8Rng, cluster: &Cluster, from: NodeId, to: NodeId) -> Fate {
        // Roles of one machine talk through memory: no delay, no loss, no partition.
        if from == to || cluster.colocated(from, to) {
            return Fate::Delivered(0, None);
        }
        if self.is_cut(from, to) || (self.loss > 0.0 && rng.gen_bool(self.loss)) {
            return Fate::Dropped;
        }
        let base = self.one_way_ns[cluster.region_of(from).index()][cluster.region_of(to).index()];
        let first = base + self.jitter(rng);
        let second =
            (self.duplicate > 0.0 && rng.gen_bool(self.duplicate)).then(|| base + self.jitter(rng));
        Fate::Delivered(first, second)
    }

    fn jitter(&self, rng: &mut ChaCha8Rng) -> u64 {
        if self.jitter_mean_ns <= 0.0 {
            return 0;
        }
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        // Exponential tail, capped at 20× the mean so one draw cannot stall a run.
        (-u.ln() * self.jitter_mean_ns).min(20.0 * self.jitter_mean_ns) as u64
    }
}
