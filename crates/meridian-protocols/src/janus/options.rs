//! Protocol options of `janus` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 12] = [
    "unsafe_no_dep_union",
    "retry_ms",
    "fast_wait_ms",
    "recovery_ms",
    "tick_ms",
    "keep_ms",
    "keep_ms_max",
    "commit_timeout_ms",
    "window",
    "max_inflight",
    "checkpoint_every",
    "max_queued",
];

/// Parsed options; durations default to multiples of the topology's largest round trip.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// TEST-ONLY, deliberately broken: on the slow path the coordinator accepts, per shard,
    /// only the first pre-accept answer's dependencies instead of the union of a majority's
    /// (§4.2). Two conflicting transactions whose answers came from different replicas can
    /// then each miss the other, and replicas order them differently: the checker catches it.
    pub unsafe_no_dep_union: bool,
    /// Retransmission interval (`retry_ms`; default 2.5 × the largest RTT, at least 10 ms).
    pub retry_ns: u64,
    /// How long a coordinator holding a majority of every shard's matching answers waits
    /// for the rest of the fast quorum (`fast_wait_ms`; default 0.5 × the largest RTT).
    pub fast_wait_ns: u64,
    /// Silence after which a replica recovers an uncommitted transaction (`recovery_ms`;
    /// default 2 × retry).
    pub recovery_ns: u64,
    /// A replica's period for recovery, inquiries and garbage collection (`tick_ms`;
    /// default a quarter of the largest RTT, at least 5 ms).
    pub tick_ns: u64,
    /// How long a replica keeps an executed transaction to answer lagging replicas
    /// (`keep_ms`; default 4 × recovery). It forgets one of its shard's transactions only
    /// after this *and* once every peer of its shard reported it executed.
    pub keep_ns: u64,
    /// The bound on that wait for the peers (`keep_ms_max`; default 4 × `keep_ms`, not
    /// below it): a peer down longer than this no longer holds its shard's executed
    /// transactions in memory, and catches up by state transfer instead (counted:
    /// `janus.forgotten_unacknowledged`).
    pub keep_max_ns: u64,
    /// A coordinator answers `Unknown` after this long without every shard's results
    /// (`commit_timeout_ms`; default 16 × retry).
    pub commit_timeout_ns: u64,
    /// Bound of the tables that track other shards' transactions (`window`; 100 000).
    pub window: usize,
    /// Unfinished transactions per coordinator; more wait in its queue (`max_inflight`;
    /// 16 384: above the largest open-loop cap the experiments offer, 8 000 per
    /// coordinator, so the load's cap and the servers' capacity, not this bound, limit
    /// what Janus commits).
    pub max_inflight: usize,
    /// Requests a coordinator holds while `max_inflight` are unfinished; more are refused
    /// `Unsupported("overloaded …")` (`max_queued`; 65 536).
    pub max_queued: usize,
    /// A replica writes a snapshot after this many records (`checkpoint_every`; 4096).
    pub checkpoint_every: usize,
}

impl Options {
    pub fn parse(config: &ProtocolConfig, max_rtt_ms: f64) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        let ms = |key: &str, default: f64| -> Result<f64, String> {
            positive_ms(key, config.get(key, default)?)
        };
        let retry_ms = ms("retry_ms", (2.5 * max_rtt_ms).max(10.0))?;
        let recovery_ms = ms("recovery_ms", 2.0 * retry_ms)?;
        let keep_ms = ms("keep_ms", 4.0 * recovery_ms)?;
        let keep_ms_max = ms("keep_ms_max", 4.0 * keep_ms)?;
        if keep_ms_max < keep_ms {
            return Err(format!(
                "protocol option `keep_ms_max` ({keep_ms_max}) must not be shorter than \
                 `keep_ms` ({keep_ms})"
            ));
        }
        Ok(Options {
            unsafe_no_dep_union: config.get("unsafe_no_dep_union", false)?,
            retry_ns: ms_to_ns(retry_ms),
            fast_wait_ns: ms_to_ns(ms("fast_wait_ms", (0.5 * max_rtt_ms).max(1.0))?),
            recovery_ns: ms_to_ns(recovery_ms),
            tick_ns: ms_to_ns(ms("tick_ms", (0.25 * max_rtt_ms).max(5.0))?),
            keep_ns: ms_to_ns(keep_ms),
            keep_max_ns: ms_to_ns(keep_ms_max),
            commit_timeout_ns: ms_to_ns(ms("commit_timeout_ms", 16.0 * retry_ms)?),
            window: count(config, "window", 100_000usize)?,
            max_inflight: count(config, "max_inflight", 16_384usize)?,
            max_queued: count(config, "max_queued", 65_536usize)?,
            checkpoint_every: count(config, "checkpoint_every", 4096usize)?,
        })
    }

    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::parse(config, cluster.topology.max_rtt_ms())
    }
}
