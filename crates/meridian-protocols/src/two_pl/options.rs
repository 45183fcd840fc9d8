//! Protocol options of `2pl-2pc` (`--protocol-options key=value,...`).

use super::locks::Policy;
use super::occ::Concurrency;
use crate::kit::options::{ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 10] = [
    "unsafe_early_release",
    "unsafe_skip_validation",
    "retry_ms",
    "exec_timeout_ms",
    "idle_timeout_ms",
    "query_ms",
    "max_retries",
    "max_inflight",
    "max_waiters_per_key",
    "checkpoint_every",
];

/// `p2pl-ttc`'s options: 2PL's, and the TTC commit timestamps' (see `crate::p2pl_ttc`).
pub const P2PL_TTC_OPTIONS: [&str; 18] = {
    let ttc = [
        "commit_wait",
        "epsilon_us",
        "drift_ppm",
        "replica_reads",
        "safe_ts_interval_ms",
        "max_versions_per_key",
        "max_held_reads",
        "unsafe_serve_above_safe",
    ];
    let mut all = [""; 18];
    let mut i = 0;
    while i < all.len() {
        all[i] = if i < OPTIONS.len() {
            OPTIONS[i]
        } else {
            ttc[i - OPTIONS.len()]
        };
        i += 1;
    }
    all
};

/// `p2pl-ttc`: commit timestamps from the TTC Oracle, and Spanner's commit wait.
#[derive(Clone, Debug, PartialEq)]
pub struct Ttc {
    /// The oracles' uncertainty bound ε (`epsilon_us`; 100, K2 §7.1), checked against
    /// what the topology's oracle clocks promise.
    pub epsilon_ns: u64,
    /// The coordinators' assumed maximum clock drift D (`drift_ppm`; 200, K2 §2.2): the
    /// wait is padded by it, because a runtime timer counts on a drifting clock.
    pub drift_ppm: u64,
    /// Commit wait (`commit_wait`; true): the coordinator holds the decision, and so
    /// every participant's locks, until true time has passed the commit timestamp. K2's
    /// §7.3 runs turned it off "for a fair performance comparison".
    pub commit_wait: bool,
    /// SafeTS replica reads (`replica_reads=safets`; off by default).
    pub safe: Option<crate::p2pl_ttc::safets::SafeTs>,
}

impl Ttc {
    /// The wait after the oracle's reply arrives: its `T_high` is at most 2ε above true
    /// time at the reply, so after `2ε(1+D)` true time has passed the timestamp.
    pub fn commit_wait_ns(&self) -> u64 {
        crate::kit::ttc::with_drift(2 * self.epsilon_ns + 1, self.drift_ppm)
    }
}

/// Parsed options. Durations default to multiples of the topology's largest round trip, so
/// the same defaults suit `local` and `gcp-tiga`.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// TEST-ONLY, deliberately broken: servers release a transaction's locks when they vote
    /// yes on PREPARE instead of on the decision (writes are still applied on COMMIT). A
    /// concurrent transaction then reads and overwrites keys whose new values are about to
    /// be installed: lost updates and non-serializable histories. It exists so that the
    /// simulator's swarm test can show the checker catching a real bug.
    pub unsafe_early_release: bool,
    /// Retransmission interval (`retry_ms`; default 2.5 × the largest RTT, at least 10 ms).
    pub retry_ns: u64,
    /// A coordinator aborts a transaction whose execution phase takes longer
    /// (`exec_timeout_ms`; default 8 × retry).
    pub exec_timeout_ns: u64,
    /// A server aborts an unprepared transaction it has heard nothing about for this long
    /// (`idle_timeout_ms`; default 2 × exec timeout; must not be shorter than it).
    pub idle_timeout_ns: u64,
    /// A prepared server asks the coordinator for the decision this often
    /// (`query_ms`; default 2 × retry).
    pub query_ns: u64,
    /// Retransmissions of PREPARE and RESOLVE before giving up, and of COMMIT at the fast
    /// `retry_ms` pace before slowing to one per `idle_timeout_ms` (`max_retries`; 4).
    pub max_retries: u32,
    /// Undecided transactions per coordinator; more are refused (`max_inflight`; 1024).
    pub max_inflight: usize,
    /// Waiters per key; a request beyond it aborts (`max_waiters_per_key`; 64; 0 = NO-WAIT).
    pub max_waiters_per_key: usize,
    /// A node writes a checkpoint record after this many records (`checkpoint_every`; 4096).
    pub checkpoint_every: usize,
    /// Not an option: the protocol's deadlock prevention (`2pl-2pc` WAIT-DIE, `2pl-raft`
    /// WOUND-WAIT).
    pub deadlock: Policy,
    /// Not an option: each shard is a Raft group and coordinators route to its leader
    /// (`2pl-raft`), or its initial leader is its only copy (`2pl-2pc`).
    pub replicated: bool,
    /// Not an option: coordinators run interactive transactions (`2pl-raft`; `2pl-2pc`
    /// answers them `Unsupported`).
    pub interactive: bool,
    /// Not an option: strict 2PL, or OCC (`occ-raft`).
    pub concurrency: Concurrency,
    /// TEST-ONLY, deliberately broken, OCC only (`unsafe_skip_validation`): PREPARE takes
    /// the locks but does not check the versions read, so a transaction commits on a stale
    /// read (lost updates). Kept so the swarm test shows the checker catching it.
    pub unsafe_skip_validation: bool,
    /// Not an option of `2pl-2pc`: `p2pl-ttc`'s commit timestamps (`None` elsewhere).
    pub ttc: Option<Ttc>,
}

impl Options {
    /// Parses `config`; `max_rtt_ms` scales the default durations.
    pub fn parse(config: &ProtocolConfig, max_rtt_ms: f64) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        Options::parse_shared(config, max_rtt_ms)
    }

    /// The options 2PL's variants share, without checking for unknown keys.
    pub(crate) fn parse_shared(
        config: &ProtocolConfig,
        max_rtt_ms: f64,
    ) -> Result<Options, String> {
        let retry_ms = positive_ms(
            "retry_ms",
            config.get("retry_ms", (2.5 * max_rtt_ms).max(10.0))?,
        )?;
        let exec_timeout_ms = positive_ms(
            "exec_timeout_ms",
            config.get("exec_timeout_ms", 8.0 * retry_ms)?,
        )?;
        let idle_timeout_ms = positive_ms(
            "idle_timeout_ms",
            config.get("idle_timeout_ms", 2.0 * exec_timeout_ms)?,
        )?;
        if idle_timeout_ms < exec_timeout_ms {
            return Err(format!(
                "protocol option `idle_timeout_ms` ({idle_timeout_ms}) must not be shorter than \
                 `exec_timeout_ms` ({exec_timeout_ms}): servers would abort transactions their \
                 coordinator is still executing"
            ));
        }
        let query_ms = positive_ms("query_ms", config.get("query_ms", 2.0 * retry_ms)?)?;
        let max_inflight = config.get("max_inflight", 1024usize)?;
        let checkpoint_every = config.get("checkpoint_every", 4096usize)?;
        for (key, value) in [
            ("max_inflight", max_inflight),
            ("checkpoint_every", checkpoint_every),
        ] {
            if value == 0 {
                return Err(format!("protocol option `{key}` must be at least 1"));
            }
        }
        Ok(Options {
            unsafe_early_release: config.get("unsafe_early_release", false)?,
            retry_ns: ms_to_ns(retry_ms),
            exec_timeout_ns: ms_to_ns(exec_timeout_ms),
            idle_timeout_ns: ms_to_ns(idle_timeout_ms),
            query_ns: ms_to_ns(query_ms),
            max_retries: config.get("max_retries", 4u32)?,
            max_inflight,
            max_waiters_per_key: config.get("max_waiters_per_key", 64usize)?,
            checkpoint_every,
            deadlock: Policy::WaitDie,
            replicated: false,
            interactive: false,
            concurrency: Concurrency::Locking,
            unsafe_skip_validation: config.get("unsafe_skip_validation", false)?,
            ttc: None,
        })
    }

    /// Parses `config` with defaults scaled to `cluster`.
    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::parse(config, cluster.topology.max_rtt_ms())
    }
}
