//! Tiga's options (`ProtocolConfig` keys), validated by [`Options::parse`].

use meridian_core::time::NS_PER_MS;
use meridian_core::ProtocolConfig;

/// Every option key Tiga accepts.
pub const OPTIONS: &[&str] = &[
    "delta_ms",
    "colocation_threshold_ms",
    "approach",
    "probe_ms",
    "probe_window",
    "probe_percentile",
    "retry_ms",
    "commit_timeout_ms",
    "tick_ms",
    "heartbeat_ms",
    "failure_timeout_ms",
    "vm_tick_ms",
    "recovery_ms",
    "unsafe_skip_second_round",
];

/// How leaders order timestamp agreement and execution (§3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approach {
    /// Choose from the initial leaders' inter-leader one-way delays against
    /// `colocation_threshold_ms`.
    Auto,
    /// Agreement before execution (co-located leaders).
    Preventive,
    /// Execution before agreement (separated leaders).
    Detective,
}

/// Parsed options. Durations are in nanoseconds.
#[derive(Clone, Debug)]
pub struct Options {
    /// Δ added to the headroom (§3.1), default 10 ms.
    pub delta_ns: u64,
    /// Leaders whose largest one-way delay to each other is at most this are co-located
    /// (§3.8), default 10 ms.
    pub colocation_threshold_ms: f64,
    pub approach: Approach,
    /// Period of the coordinators' OWD probes, default 100 ms.
    pub probe_ns: u64,
    /// How many recent OWD samples per server the estimate looks at, default 16.
    pub probe_window: usize,
    /// Which percentile of the recent samples is the estimate, default 50 (the median).
    pub probe_percentile: f64,
    /// Retransmission period of submissions, timestamp notifications and log syncs,
    /// default 400 ms.
    pub retry_ns: u64,
    /// A coordinator that cannot commit within this reports `Unknown`, default 4000 ms.
    pub commit_timeout_ns: u64,
    /// Period of the servers' housekeeping tick (sync-point reports, log-sync
    /// retransmission, commit-point), default 20 ms.
    pub tick_ns: u64,
    /// Period of the servers' heartbeats to the view manager, default 100 ms.
    pub heartbeat_ns: u64,
    /// The view manager declares a server failed after this long without a heartbeat,
    /// default 1000 ms (§4).
    pub failure_timeout_ns: u64,
    /// Period of the view manager's Raft tick, default 50 ms (elections after 10–20 ticks).
    pub vm_tick_ns: u64,
    /// A leader that has held a multi-shard transaction this long without every involved
    /// leader's notification acts as its recovery coordinator and multicasts it again to
    /// every involved replica (§4 coordinator failure), default 1000 ms.
    pub recovery_ns: u64,
    /// TEST ONLY: leaders in case 2 of §3.5 release without the second round (§3.6).
    pub unsafe_skip_second_round: bool,
}

impl Options {
    pub fn parse(config: &ProtocolConfig) -> Result<Options, String> {
        config.check_known(OPTIONS)?;
        let ms = |key: &str, default: f64| -> Result<u64, String> {
            let v: f64 = config.get(key, default)?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "protocol option `{key}` must be a non-negative number"
                ));
            }
            Ok((v * NS_PER_MS as f64).round() as u64)
        };
        let approach = config.get("approach", "auto".to_string())?;
        let approach = match approach.as_str() {
            "auto" => Approach::Auto,
            "preventive" => Approach::Preventive,
            "detective" => Approach::Detective,
            _ => {
                return Err(format!(
                    "protocol option `approach` has bad value `{approach}`"
                ))
            }
        };
        let opts = Options {
            delta_ns: ms("delta_ms", 10.0)?,
            colocation_threshold_ms: config.get("colocation_threshold_ms", 10.0)?,
            approach,
            probe_ns: ms("probe_ms", 100.0)?.max(NS_PER_MS),
            probe_window: config.get("probe_window", 16usize)?.max(1),
            probe_percentile: config.get("probe_percentile", 50.0)?,
            retry_ns: ms("retry_ms", 400.0)?.max(NS_PER_MS),
            commit_timeout_ns: ms("commit_timeout_ms", 4000.0)?,
            tick_ns: ms("tick_ms", 20.0)?.max(NS_PER_MS / 10),
            heartbeat_ns: ms("heartbeat_ms", 100.0)?.max(NS_PER_MS),
            failure_timeout_ns: ms("failure_timeout_ms", 1000.0)?.max(NS_PER_MS),
            vm_tick_ns: ms("vm_tick_ms", 50.0)?.max(NS_PER_MS),
            recovery_ns: ms("recovery_ms", 1000.0)?.max(NS_PER_MS),
            unsafe_skip_second_round: config.get("unsafe_skip_second_round", false)?,
        };
        if opts.failure_timeout_ns < 2 * opts.heartbeat_ns {
            return Err(
                "protocol option `failure_timeout_ms` must be at least twice `heartbeat_ms`".into(),
            );
        }
        if !(0.0..=100.0).contains(&opts.probe_percentile) {
            return Err("protocol option `probe_percentile` must be in 0..=100".into());
        }
        Ok(opts)
    }
}
