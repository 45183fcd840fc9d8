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
    "vm_log_limit",
    "recovery_ms",
    "unsafe_skip_second_round",
    "headroom",
    "adaptive_percentile",
    "adaptive_delta_ms",
    "headroom_offset_ms",
    "path",
    "path_margin_ms",
    "coordination",
    "epsilon_ms",
    "slow_replies",
    "inquiry_ms",
    "max_sessions",
    "session_timeout_ms",
    "pipeline",
    "durability",
    "durable_checkpoint_ms",
];

/// How the coordinator sizes the headroom (§3.1, §5.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadroomMode {
    /// The paper's: the `probe_percentile` (median) of the OWD samples plus `delta_ms`.
    Paper,
    /// A high percentile (`adaptive_percentile`) of the samples, which follows the measured
    /// jitter and clock error, plus a small `adaptive_delta_ms`.
    Adaptive,
    /// No headroom: the sending time is the timestamp (Fig. 13's 0-Hdrn baseline).
    Zero,
    /// Per member, the margin that minimizes the expected latency when arriving late costs
    /// a round trip to the farthest leader (`kit::owd`'s `forward_covering_ns`): a margin
    /// sized by what lateness costs the coordinator's region, not one percentile for all.
    CostAware,
}

/// Which quorum the timestamp is planned for (§6 "Timestamp initialization").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathChoice {
    /// A super quorum per shard (§3.1).
    Fast,
    /// The leaders only; commit by the slow path.
    Slow,
    /// Whichever the estimated latencies favour, per transaction.
    Auto,
}

/// How followers' slow replies reach the coordinator (§3.7, Appendix E).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlowReplies {
    /// Appendix E, the paper's implementation: the coordinator asks followers for them
    /// (`inquiry_ms`), only for a shard whose fast quorum failed (a follower's fast reply
    /// differs from the leader's) or is overdue, or for a transaction planned slow.
    Pull,
    /// §3.7 as written: every follower sends one for every entry it syncs.
    Push,
}

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
    pub headroom: HeadroomMode,
    /// The percentile of the OWD samples the adaptive headroom covers, default 99 (with the
    /// default 16-sample window, the largest sample).
    pub adaptive_percentile: f64,
    /// Δ of the adaptive headroom, default 6 ms.
    pub adaptive_delta_ns: u64,
    /// Added to every headroom (may be negative; the headroom stays ≥ 0), for Fig. 13's
    /// sweep; default 0.
    pub headroom_offset_ns: i64,
    pub path: PathChoice,
    /// `path=auto` plans for the slow path only when its estimate beats the fast path's by
    /// more than this, default 10 ms: slow-planned transactions arrive late at some
    /// followers, whose logs then miss entries and fail other transactions' fast-path
    /// hash checks under contention, so a marginal gain is not worth it.
    pub path_margin_ns: u64,
    /// §6 coordination-free mode (`coordination=free`): the guaranteed bound ε on the
    /// difference between any two clocks; leaders release T only once their clock passes
    /// T.t + ε, and a case-2 leader skips the second round. `None`: normal Tiga.
    pub epsilon_ns: Option<u64>,
    /// Period of the servers' heartbeats to the view manager, default 100 ms.
    pub heartbeat_ns: u64,
    /// The view manager declares a server failed after this long without a heartbeat,
    /// default 1000 ms (§4).
    pub failure_timeout_ns: u64,
    /// Period of the view manager's Raft tick, default 50 ms (elections after 10–20 ticks).
    pub vm_tick_ns: u64,
    /// The view manager compacts its Raft log behind a snapshot of the view once it holds
    /// more than this many entries, default 64 (one entry per view change).
    pub vm_log_limit: u64,
    /// A leader that has held a multi-shard transaction this long without every involved
    /// leader's notification acts as its recovery coordinator and multicasts it again to
    /// every involved replica (§4 coordinator failure), default 1000 ms.
    pub recovery_ns: u64,
    pub slow_replies: SlowReplies,
    /// Period of a coordinator's slow-reply inquiries in `slow_replies=pull` (Appendix E:
    /// "every 10 ms when Tiga works in WAN"), default 10 ms.
    pub inquiry_ns: u64,
    /// Interactive sessions (decomposition) a coordinator holds open at most, default 4096:
    /// a `Begin` beyond it is refused.
    pub max_sessions: usize,
    /// A session idle this long between steps is dropped (its client is gone), default
    /// 10 000 ms.
    pub session_timeout_ns: u64,
    /// Whether servers keep their log on disk (`durability=durable`, the default) or only
    /// a boot marker, as in the report (`durability=diskless`; see the module doc).
    pub durable: bool,
    /// Durable servers write a snapshot of their log list (replacing every earlier record)
    /// at a cut at most this often, default 2000 ms: bounds the durable log without
    /// writing the store's checkpoint twice a second.
    pub durable_checkpoint_ns: u64,
    /// TEST ONLY: leaders in case 2 of §3.5 release without the second round (§3.6).
    pub unsafe_skip_second_round: bool,
    /// Detective approach: a leader executes a transaction on top of sealed, unagreed
    /// conflicting predecessors (`pipeline=true`, default) instead of waiting until they
    /// are released (`false`, Algorithm 1 line 12 read literally). Module doc, "Pipelined
    /// execution".
    pub pipeline: bool,
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
        use Approach as A;
        use HeadroomMode as H;
        use PathChoice as P;
        let approach = choice(
            config,
            "approach",
            &[
                ("auto", A::Auto),
                ("preventive", A::Preventive),
                ("detective", A::Detective),
            ],
        )?;
        let headroom = choice(
            config,
            "headroom",
            &[
                ("adaptive", H::Adaptive),
                ("paper", H::Paper),
                ("zero", H::Zero),
                ("cost-aware", H::CostAware),
            ],
        )?;
        let path = choice(
            config,
            "path",
            &[("fast", P::Fast), ("slow", P::Slow), ("auto", P::Auto)],
        )?;
        let slow_replies = choice(
            config,
            "slow_replies",
            &[("pull", SlowReplies::Pull), ("push", SlowReplies::Push)],
        )?;
        let free = choice(
            config,
            "coordination",
            &[("agreement", false), ("free", true)],
        )?;
        let epsilon_ns = if free {
            if config.get("epsilon_ms", f64::NAN)?.is_nan() {
                return Err(
                    "protocol option `coordination=free` needs `epsilon_ms`, the \
                            guaranteed bound on the difference between two clocks"
                        .into(),
                );
            }
            Some(ms("epsilon_ms", 0.0)?)
        } else {
            None
        };
        let durable = choice(
            config,
            "durability",
            &[("durable", true), ("diskless", false)],
        )?;
        let offset_ms: f64 = config.get("headroom_offset_ms", 0.0)?;
        if !offset_ms.is_finite() {
            return Err("protocol option `headroom_offset_ms` must be a number".into());
        }
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
            vm_log_limit: config.get("vm_log_limit", 64u64)?.max(1),
            recovery_ns: ms("recovery_ms", 1000.0)?.max(NS_PER_MS),
            unsafe_skip_second_round: config.get("unsafe_skip_second_round", false)?,
            headroom,
            adaptive_percentile: config.get("adaptive_percentile", 99.0)?,
            adaptive_delta_ns: ms("adaptive_delta_ms", 6.0)?,
            headroom_offset_ns: (offset_ms * NS_PER_MS as f64).round() as i64,
            path,
            path_margin_ns: ms("path_margin_ms", 10.0)?,
            epsilon_ns,
            slow_replies,
            inquiry_ns: ms("inquiry_ms", 10.0)?.max(NS_PER_MS / 10),
            max_sessions: config.get("max_sessions", 4096usize)?,
            session_timeout_ns: ms("session_timeout_ms", 10_000.0)?.max(NS_PER_MS),
            pipeline: config.get("pipeline", true)?,
            durable,
            durable_checkpoint_ns: ms("durable_checkpoint_ms", 2000.0)?,
        };
        if opts.failure_timeout_ns < 2 * opts.heartbeat_ns {
            return Err(
                "protocol option `failure_timeout_ms` must be at least twice `heartbeat_ms`".into(),
            );
        }
        for (key, p) in [
            ("probe_percentile", opts.probe_percentile),
            ("adaptive_percentile", opts.adaptive_percentile),
        ] {
            if !(0.0..=100.0).contains(&p) {
                return Err(format!("protocol option `{key}` must be in 0..=100"));
            }
        }
        Ok(opts)
    }
}

/// The value of the enumerated option `key`: one of `values`' names, the first by default.
fn choice<T: Copy>(config: &ProtocolConfig, key: &str, values: &[(&str, T)]) -> Result<T, String> {
    let text = config.get(key, values[0].0.to_string())?;
    values
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = values.iter().map(|(n, _)| *n).collect();
            format!(
                "protocol option `{key}` has bad value `{text}` ({})",
                names.join(", ")
            )
        })
}
