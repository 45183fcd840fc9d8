//! Protocol options of `clock-si` and `conventional-si` (`--protocol-options key=value,...`).

use crate::kit::options::{ms_to_ns, positive_ms};
use meridian_core::{Cluster, NodeId, ProtocolConfig};

/// Every option these protocols understand; anything else is refused by name.
pub const OPTIONS: [&str; 10] = [
    "delta_ms",
    "replicated",
    "retry_ms",
    "max_retries",
    "query_ms",
    "session_idle_ms",
    "gc_lag_ms",
    "checkpoint_every",
    "raft_log_limit",
    "unsafe_skip_pending_wait",
];

/// How the snapshot age Δ (Algorithm 1 line 2) is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delta {
    /// A fixed Δ in ns (`delta_ms=N`; default 0: fresh snapshots).
    Fixed(u64),
    /// `delta_ms=auto`: §III-C's Δ = max(CW, SK_max − RRD/2), computed per coordinator
    /// (see [`Options::delta_for`]).
    Auto,
    /// `delta_ms=measured`: the same rule with both terms measured rather than taken from
    /// the topology, as §III-C suggests ("these two values can be measured and distributed
    /// periodically"): per partition, RRD from the coordinator's reads (S = 0 here) and
    /// SK − RRD/2 as the negated low tail of §V-F's t₂ − t₁ samples (partition clock at a
    /// read's arrival minus coordinator clock at its sending), via the kit's
    /// one-way-delay estimator; the topology until the first samples.
    Measured,
}

/// Parsed options. Durations default to multiples of the topology's largest round trip.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub delta: Delta,
    /// Retransmission interval (`retry_ms`; default 2.5 × the largest RTT, at least 10 ms).
    pub retry_ns: u64,
    /// Retransmissions of a read, a commit request or a timestamp request before giving up
    /// (`max_retries`; 4). COMMIT decisions are retransmitted until acknowledged.
    pub max_retries: u32,
    /// A partition asks the coordinator of a prepared transaction for its outcome this
    /// often (`query_ms`; default = retry).
    pub query_ns: u64,
    /// A coordinator forgets a session the client has not used for this long
    /// (`session_idle_ms`; default 10 s).
    pub session_idle_ns: u64,
    /// Partitions garbage-collect versions older than their clock minus this; a read with
    /// an older snapshot aborts (`gc_lag_ms`; default 10 s).
    pub gc_lag_ns: u64,
    /// A node writes a checkpoint after this many records (`checkpoint_every`; 2048).
    pub checkpoint_every: usize,
    /// Each partition is a Raft group of its shard's replicas (`replicated`; false: the
    /// paper's one server per partition).
    pub replicated: bool,
    /// Replicated mode: a member compacts its Raft log behind a snapshot once it holds more
    /// than this many entries (`raft_log_limit`; 1024; 0: never, the log grows for the run).
    pub raft_log_limit: Option<u64>,
    /// How far ahead of its clock floor a partition's durable clock lease reaches: a
    /// restarted (or new leader) partition issues timestamps up to this far ahead of what
    /// was issued before. 100 ms; replicated, at least 8 × the largest RTT, so that a
    /// renewal is replicated long before it is needed.
    pub clock_lease_ns: u64,
    /// TEST ONLY, breaks snapshot isolation: a read does not wait for a transaction
    /// prepared at or below its snapshot (Algorithm 1 lines 6–17 skipped), so it may miss a
    /// write that then commits below the snapshot. The conformance suite's broken variant:
    /// the checker must catch it (`unsafe_skip_pending_wait`; false).
    pub unsafe_skip_pending_wait: bool,
}

impl Options {
    /// Parses `config`; `max_rtt_ms` scales the default durations.
    pub fn parse(config: &ProtocolConfig, max_rtt_ms: f64) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        let delta = match config.get::<String>("delta_ms", "0".to_string())?.as_str() {
            "auto" => Delta::Auto,
            "measured" => Delta::Measured,
            text => {
                let ms: f64 = text
                    .parse()
                    .map_err(|_| format!("protocol option `delta_ms` has bad value `{text}` (a number of ms, `auto` or `measured`)"))?;
                if !(ms.is_finite() && (0.0..=1e6).contains(&ms)) {
                    return Err(format!(
                        "protocol option `delta_ms` must be in 0..=1000000, got {ms}"
                    ));
                }
                Delta::Fixed(ms_to_ns(ms))
            }
        };
        let retry_ms = positive_ms(
            "retry_ms",
            config.get("retry_ms", (2.5 * max_rtt_ms).max(10.0))?,
        )?;
        let query_ms = positive_ms("query_ms", config.get("query_ms", retry_ms)?)?;
        let session_idle_ms =
            positive_ms("session_idle_ms", config.get("session_idle_ms", 10_000.0)?)?;
        let gc_lag_ms = positive_ms("gc_lag_ms", config.get("gc_lag_ms", 10_000.0)?)?;
        let checkpoint_every = config.get("checkpoint_every", 2048usize)?;
        if checkpoint_every == 0 {
            return Err("protocol option `checkpoint_every` must be at least 1".to_string());
        }
        let replicated = config.get("replicated", false)?;
        let raft_log_limit = Some(config.get("raft_log_limit", 1024u64)?).filter(|&l| l > 0);
        Ok(Options {
            delta,
            retry_ns: ms_to_ns(retry_ms),
            max_retries: config.get("max_retries", 4u32)?,
            query_ns: ms_to_ns(query_ms),
            session_idle_ns: ms_to_ns(session_idle_ms),
            gc_lag_ns: ms_to_ns(gc_lag_ms),
            checkpoint_every,
            replicated,
            raft_log_limit,
            clock_lease_ns: if replicated {
                ms_to_ns((8.0 * max_rtt_ms).max(100.0))
            } else {
                ms_to_ns(100.0)
            },
            unsafe_skip_pending_wait: config.get("unsafe_skip_pending_wait", false)?,
        })
    }

    /// Parses `config` with defaults scaled to `cluster`.
    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::parse(config, cluster.topology.max_rtt_ms())
    }

    /// Δ in ns for transactions that start at `coordinator`.
    ///
    /// `auto` is §III-C's rule Δ = max(CW, SK_max − RRD/2) with, on this substrate: the
    /// committing window CW = S + RRD where S (a synchronous log write) is 0 in the simulator
    /// and RRD is the largest round trip from the coordinator to a partition; SK_max = twice
    /// the largest clock error any node's profile states (error bound if given, else the
    /// typical error); and RRD/2 uses the *smallest* coordinator–partition round trip
    /// (the worst case for skew delays).
    pub fn delta_for(&self, cluster: &Cluster, coordinator: NodeId) -> u64 {
        match self.delta {
            Delta::Fixed(ns) => ns,
            // Measured per transaction by the coordinator; this is its starting point.
            Delta::Auto | Delta::Measured => {
                let rtts: Vec<f64> = (0..cluster.shard_count())
                    .map(|s| {
                        cluster.rtt_ms(
                            coordinator,
                            cluster.initial_leader(meridian_core::ShardId(s)),
                        )
                    })
                    .collect();
                let max_rrd = rtts.iter().copied().fold(0.0, f64::max);
                let min_rrd = rtts.iter().copied().fold(f64::INFINITY, f64::min);
                let max_err = cluster
                    .nodes
                    .iter()
                    .map(|n| {
                        n.clock
                            .params
                            .error_bound_ms
                            .unwrap_or(n.clock.params.error_ms)
                    })
                    .fold(0.0, f64::max);
                let skew = 2.0 * max_err - min_rrd / 2.0;
                ms_to_ns(max_rrd.max(skew).max(0.0))
            }
        }
    }
}
