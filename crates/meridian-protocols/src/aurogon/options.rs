//! Protocol options of `aurogon` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 18] = [
    "isolation",
    "clock",
    "pre_attach",
    "deferral",
    "hot_threshold",
    "defer_us_max",
    "defer_us_step",
    "fail_rate_high",
    "retry_ms",
    "exec_timeout_ms",
    "recovery_ms",
    "heartbeat_ms",
    "failover_ms",
    "lease_ms",
    "max_inflight",
    "versions_kept",
    "checkpoint_every",
    "unsafe_no_stale_read_rule",
];

/// The isolation level (§4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    Serializable,
    /// Strong partition serializability: the stale-read and immortal-write rules, and a
    /// client hears "committed" only after every commit acknowledgement.
    StrongPartition,
}

/// Where timestamps come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockMode {
    /// The node's synchronized clock (the simulator's clock model; 2LClock in the paper).
    Synchronized,
    /// DST's chasing clocks (§2.2, the DST-TO baseline of §6.1): the synchronized clock
    /// plus an offset that catches up with the largest timestamp data returned.
    Dst,
}

/// Parsed options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub isolation: Isolation,
    /// `clock`: `synchronized` (default) or `dst`.
    pub clock: ClockMode,
    /// §4.3: dependent writes travel with the reads they depend on (`pre_attach`; true).
    pub pre_attach: bool,
    /// §4.2: reads on hot records are deferred (`deferral`; true).
    pub deferral: bool,
    /// A record is hot when it receives at least this many requests within 10 ms of
    /// request timestamps (`hot_threshold`; 8).
    pub hot_threshold: u32,
    /// The longest deferral (`defer_us_max`; 40 µs) and the step by which a record's
    /// deferral grows or shrinks (`defer_us_step`; 5 µs).
    pub defer_ns_max: u64,
    pub defer_ns_step: u64,
    /// A record's deferral grows while its write failure rate in the last window exceeds
    /// this, and shrinks while it stays below a quarter of it (`fail_rate_high`; 0.05).
    pub fail_rate_high: f64,
    /// Coordinator retransmission interval (`retry_ms`; max(2.5 × RTT, 1 ms)).
    pub retry_ns: u64,
    /// A coordinator aborts a transaction still executing after this (`exec_timeout_ms`;
    /// 20 × retry).
    pub exec_timeout_ns: u64,
    /// A replica recovers a transaction undecided for this long (`recovery_ms`; 2 ×
    /// exec timeout).
    pub recovery_ns: u64,
    /// Primary → backup heartbeats with lease renewals (`heartbeat_ms`; retry).
    pub heartbeat_ns: u64,
    /// A backup campaigns after this long without hearing its primary (`failover_ms`;
    /// 10 × heartbeat).
    pub failover_ns: u64,
    /// How far ahead of the clock a primary's read lease reaches (`lease_ms`; 4 ×
    /// heartbeat).
    pub lease_ns: u64,
    /// Undecided transactions per coordinator (`max_inflight`; 1024).
    pub max_inflight: usize,
    /// Committed versions kept per record beyond the newest (`versions_kept`; 8).
    pub versions_kept: usize,
    /// A replica checkpoints after this many records (`checkpoint_every`; 4096).
    pub checkpoint_every: usize,
    /// TEST-ONLY, deliberately broken: in strong-partition mode, reads skip the read-side
    /// rules — §4.4's stale-read rule and the late-read rule — so a transaction starting
    /// after another finished may read around it.
    pub unsafe_no_stale_read_rule: bool,
}

impl Options {
    /// Parses `config` with defaults scaled to `cluster`'s largest round trip.
    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::parse(config, cluster.topology.max_rtt_ms())
    }

    pub fn parse(config: &ProtocolConfig, max_rtt_ms: f64) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        let isolation = match config
            .get("isolation", "serializable".to_string())?
            .as_str()
        {
            "serializable" => Isolation::Serializable,
            "strong-partition" => Isolation::StrongPartition,
            other => {
                return Err(format!(
                    "protocol option `isolation` must be `serializable` or `strong-partition`, \
                     got `{other}`"
                ))
            }
        };
        let retry_ms = positive_ms(
            "retry_ms",
            config.get("retry_ms", (2.5 * max_rtt_ms).max(1.0))?,
        )?;
        let exec_timeout_ms = positive_ms(
            "exec_timeout_ms",
            config.get("exec_timeout_ms", 20.0 * retry_ms)?,
        )?;
        let recovery_ms = positive_ms(
            "recovery_ms",
            config.get("recovery_ms", 2.0 * exec_timeout_ms)?,
        )?;
        let heartbeat_ms = positive_ms("heartbeat_ms", config.get("heartbeat_ms", retry_ms)?)?;
        let failover_ms = positive_ms(
            "failover_ms",
            config.get("failover_ms", 10.0 * heartbeat_ms)?,
        )?;
        let lease_ms = positive_ms("lease_ms", config.get("lease_ms", 4.0 * heartbeat_ms)?)?;
        if failover_ms <= heartbeat_ms {
            return Err(format!(
                "protocol option `failover_ms` ({failover_ms}) must exceed `heartbeat_ms` \
                 ({heartbeat_ms}): backups would depose a live primary between heartbeats"
            ));
        }
        let fail_rate_high: f64 = config.get("fail_rate_high", 0.05)?;
        if !(fail_rate_high > 0.0 && fail_rate_high <= 1.0) {
            return Err(format!(
                "protocol option `fail_rate_high` must be in (0, 1], got {fail_rate_high}"
            ));
        }
        let defer_us_max: f64 = config.get("defer_us_max", 40.0)?;
        let defer_us_step: f64 = config.get("defer_us_step", 5.0)?;
        for (key, us) in [
            ("defer_us_max", defer_us_max),
            ("defer_us_step", defer_us_step),
        ] {
            if !(us.is_finite() && (0.0..=1e6).contains(&us)) {
                return Err(format!(
                    "protocol option `{key}` must be between 0 and 1e6 microseconds, got {us}"
                ));
            }
        }
        let max_inflight = count(config, "max_inflight", 1024usize)?;
        let versions_kept = count(config, "versions_kept", 8usize)?;
        let checkpoint_every = count(config, "checkpoint_every", 4096usize)?;
        let hot_threshold = config.get("hot_threshold", 8u32)?;
        if hot_threshold == 0 {
            return Err("protocol option `hot_threshold` must be at least 1".to_string());
        }
        let clock = match config.get("clock", "synchronized".to_string())?.as_str() {
            "synchronized" => ClockMode::Synchronized,
            "dst" => ClockMode::Dst,
            other => {
                return Err(format!(
                    "protocol option `clock` must be `synchronized` or `dst`, got `{other}`"
                ))
            }
        };
        Ok(Options {
            isolation,
            clock,
            pre_attach: config.get("pre_attach", true)?,
            deferral: config.get("deferral", true)?,
            hot_threshold,
            defer_ns_max: (defer_us_max * 1e3).round() as u64,
            defer_ns_step: (defer_us_step * 1e3).round() as u64,
            fail_rate_high,
            retry_ns: ms_to_ns(retry_ms),
            exec_timeout_ns: ms_to_ns(exec_timeout_ms),
            recovery_ns: ms_to_ns(recovery_ms),
            heartbeat_ns: ms_to_ns(heartbeat_ms),
            failover_ns: ms_to_ns(failover_ms),
            lease_ns: ms_to_ns(lease_ms),
            max_inflight,
            versions_kept,
            checkpoint_every,
            unsafe_no_stale_read_rule: config.get("unsafe_no_stale_read_rule", false)?,
        })
    }

    /// Whether §4.4's rules are on.
    pub fn strong_partition(&self) -> bool {
        self.isolation == Isolation::StrongPartition
    }
}
