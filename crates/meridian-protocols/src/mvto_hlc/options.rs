//! Protocol options of `mvto-hlc` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 16] = [
    "max_offset_ms",
    "retry_ms",
    "txn_timeout_ms",
    "lock_wait_ms",
    "recovery_after_ms",
    "max_refreshes",
    "max_inflight",
    "max_versions_per_key",
    "max_waiting_per_node",
    "checkpoint_every",
    "read_floor_ms",
    "unsafe_skip_read_refresh",
    "replica_reads",
    "closed_ts_interval_ms",
    "closed_ts_lag_ms",
    "unsafe_serve_above_closed",
];

/// Where read-only one-shot transactions run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaReads {
    /// At the primaries, like every transaction (the default).
    Off,
    /// ClosedTS (K2 §6.1, §7.4; CockroachDB's follower reads): at the nearest copy of
    /// each shard, once its closed timestamp covers the read.
    ClosedTs,
}

/// Parsed options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The assumed maximum clock offset between nodes (`max_offset_ms`; 500, CockroachDB's
    /// default): the width of a transaction's uncertainty interval, and how far ahead of
    /// the local clock an HLC accepts a received timestamp.
    pub max_offset_ns: u64,
    /// Retransmission and housekeeping interval (`retry_ms`; the largest round trip × 2,
    /// at least 5 ms).
    pub retry_ns: u64,
    /// A coordinator gives a transaction this long (`txn_timeout_ms`; 8 × retry, at least
    /// 2 s). An anchor aborts a transaction without a decision once its start timestamp is
    /// twice that old, and refuses to stage one that old.
    pub txn_timeout_ns: u64,
    /// A request waiting behind another transaction's intent gives up after this long
    /// (`lock_wait_ms`; 4 × the largest round trip, at least 200 ms): what breaks the
    /// deadlocks that wound-wait leaves (a staging transaction cannot be wounded).
    pub lock_wait_ns: u64,
    /// An anchor recovers a transaction that has been STAGING this long
    /// (`recovery_after_ms`; 4 × retry, at least 500 ms): CockroachDB's status recovery of
    /// an abandoned parallel commit.
    pub recovery_after_ns: u64,
    /// Timestamp moves (uncertainty restarts and pushed writes) a transaction may make
    /// before it aborts (`max_refreshes`; 16).
    pub max_refreshes: u32,
    /// Live transactions per coordinator (`max_inflight`; 1024).
    pub max_inflight: usize,
    /// Committed versions kept per key (`max_versions_per_key`; 32); a read or refresh
    /// below the oldest kept one aborts.
    pub max_versions_per_key: usize,
    /// Requests a primary holds waiting on intents (`max_waiting_per_node`; 4096).
    pub max_waiting_per_node: usize,
    /// A primary checkpoints after this many records (`checkpoint_every`; 4096).
    pub checkpoint_every: usize,
    /// How far ahead a primary reserves its timestamp-cache floor in its log
    /// (`read_floor_ms`; 1000): after a crash every key's cache starts there.
    pub read_floor_ns: u64,
    /// TEST-ONLY, deliberately broken: a transaction whose write timestamp was pushed
    /// commits at the pushed timestamp without refreshing its reads. The conformance suite
    /// shows the checker catching it.
    pub unsafe_skip_read_refresh: bool,
    /// `replica_reads=off|closedts` (default off).
    pub replica_reads: ReplicaReads,
    /// A primary closes a timestamp this often (`closed_ts_interval_ms`; 100, K2-VCR's
    /// default epoch length, as K2 §7.4 sets ClosedTS's interval to the epoch length).
    pub closed_ts_interval_ns: u64,
    /// How far behind its HLC a primary closes (`closed_ts_lag_ms`; 0: K2 §6.1's ClosedTS
    /// advances to the present at each interval; CockroachDB's target is 3 s).
    pub closed_ts_lag_ns: u64,
    /// TEST-ONLY, deliberately broken: a copy serves a follower read at once, without
    /// waiting for its closed timestamp to cover it. The conformance suite shows the
    /// checker catching it.
    pub unsafe_serve_above_closed: bool,
}

impl Options {
    /// Parses `config` for `cluster`.
    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        let max_rtt_ms = cluster.topology.max_rtt_ms();
        let max_offset_ms = positive_ms("max_offset_ms", config.get("max_offset_ms", 500.0)?)?;
        let retry_ms = positive_ms(
            "retry_ms",
            config.get("retry_ms", (2.0 * max_rtt_ms).max(5.0))?,
        )?;
        let txn_timeout_ms = positive_ms(
            "txn_timeout_ms",
            config.get("txn_timeout_ms", (8.0 * retry_ms).max(2000.0))?,
        )?;
        if txn_timeout_ms < 2.0 * retry_ms {
            return Err(format!(
                "protocol option `txn_timeout_ms` ({txn_timeout_ms}) must be at least twice \
                 `retry_ms` ({retry_ms})"
            ));
        }
        let lock_wait_ms = positive_ms(
            "lock_wait_ms",
            config.get("lock_wait_ms", (4.0 * max_rtt_ms).max(200.0))?,
        )?;
        let recovery_after_ms = positive_ms(
            "recovery_after_ms",
            config.get("recovery_after_ms", (4.0 * retry_ms).max(500.0))?,
        )?;
        let read_floor_ms = positive_ms("read_floor_ms", config.get("read_floor_ms", 1000.0)?)?;
        let replica_reads = match config.get("replica_reads", "off".to_string())?.as_str() {
            "off" => ReplicaReads::Off,
            "closedts" => ReplicaReads::ClosedTs,
            other => {
                return Err(format!(
                    "protocol option `replica_reads` must be `off` or `closedts`, got `{other}`"
                ))
            }
        };
        let closed_ts_interval_ms = positive_ms(
            "closed_ts_interval_ms",
            config.get("closed_ts_interval_ms", 100.0)?,
        )?;
        let closed_ts_lag_ms: f64 = config.get("closed_ts_lag_ms", 0.0)?;
        if !(0.0..=60_000.0).contains(&closed_ts_lag_ms) {
            return Err(format!(
                "protocol option `closed_ts_lag_ms` must be in 0..=60000, got {closed_ts_lag_ms}"
            ));
        }
        Ok(Options {
            max_offset_ns: ms_to_ns(max_offset_ms),
            retry_ns: ms_to_ns(retry_ms),
            txn_timeout_ns: ms_to_ns(txn_timeout_ms),
            lock_wait_ns: ms_to_ns(lock_wait_ms),
            recovery_after_ns: ms_to_ns(recovery_after_ms),
            max_refreshes: config.get("max_refreshes", 16)?,
            max_inflight: count(config, "max_inflight", 1024)?,
            max_versions_per_key: count(config, "max_versions_per_key", 32)?,
            max_waiting_per_node: count(config, "max_waiting_per_node", 4096)?,
            checkpoint_every: count(config, "checkpoint_every", 4096)?,
            read_floor_ns: ms_to_ns(read_floor_ms),
            unsafe_skip_read_refresh: config.get("unsafe_skip_read_refresh", false)?,
            replica_reads,
            closed_ts_interval_ns: ms_to_ns(closed_ts_interval_ms),
            closed_ts_lag_ns: ms_to_ns(closed_ts_lag_ms),
            unsafe_serve_above_closed: config.get("unsafe_serve_above_closed", false)?,
        })
    }

    /// An anchor aborts an undecided transaction whose start timestamp is this old, and
    /// refuses to stage one (so a forgotten abort stays an abort).
    pub fn max_txn_age_ns(&self) -> u64 {
        2 * self.txn_timeout_ns
    }

    /// Whether primaries close timestamps and replicas replay (ClosedTS).
    pub fn closed_ts(&self) -> bool {
        self.replica_reads == ReplicaReads::ClosedTs
    }
}
