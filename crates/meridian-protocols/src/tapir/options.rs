//! Protocol options of `tapir` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 13] = [
    "strict",
    "unsafe_skip_slow_path_validation",
    "retry_ms",
    "fast_path_wait_ms",
    "exec_timeout_ms",
    "query_ms",
    "max_retries",
    "max_attempts",
    "max_inflight",
    "versions_kept",
    "checkpoint_every",
    "view_change_ms",
    "commits_in_record",
];

/// Parsed options. Durations default to multiples of the topology's largest round trip.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `strict` (default true): the TR's linearizable OCC check (strict serializability);
    /// false: the serializable check DAST evaluated (writes may be installed below later
    /// versions, reads validate against the version valid at the transaction's timestamp).
    pub strict: bool,
    /// TEST-ONLY, deliberately broken: on the IR slow path the coordinator finalizes
    /// PREPARE-OK whatever the replicas' validation said. Conflicting transactions then
    /// both commit; it exists so the conformance test can show the checker catching it.
    pub unsafe_skip_slow_path_validation: bool,
    /// Retransmission interval of reads, PREPARE, FINALIZE and COMMIT (`retry_ms`; default
    /// 2.5 × the largest RTT, at least 10 ms).
    pub retry_ns: u64,
    /// After a majority of a shard replied, how long the coordinator still waits for a
    /// super quorum of matching replies before taking the slow path (`fast_path_wait_ms`;
    /// default 0.5 × the largest RTT).
    pub fast_path_wait_ns: u64,
    /// A transaction not decided within this aborts (`exec_timeout_ms`; default 8 × retry).
    pub exec_timeout_ns: u64,
    /// A replica asks the coordinator about an entry undecided this long (`query_ms`;
    /// default 2 × exec timeout).
    pub query_ns: u64,
    /// Retransmissions of one message before moving to another replica or giving up
    /// (`max_retries`; 4).
    pub max_retries: u32,
    /// Timestamps a transaction tries (the first and the RETRY proposals) before aborting
    /// (`max_attempts`; 4).
    pub max_attempts: u32,
    /// Undecided transactions per coordinator; more are refused (`max_inflight`; 4096).
    pub max_inflight: usize,
    /// Committed versions kept per key (`versions_kept`; 8; at least 1).
    pub versions_kept: usize,
    /// A node writes a checkpoint after this many records (`checkpoint_every`; 4096).
    pub checkpoint_every: usize,
    /// A view change not finished within this starts the next view (`view_change_ms`;
    /// default 4 × the largest RTT, at least 10 ms: the change itself takes one round trip
    /// between replicas of a shard).
    pub view_change_ns: u64,
    /// The latest commits a replica keeps with their arguments and ships in its IR record
    /// (`commits_in_record`; 8192; 0 ships ids only): a replica that missed one of them
    /// applies it from a view change's records; one that missed an older commit waits for
    /// its COMMIT before it returns to normal (see `view_change.rs`).
    pub commits_in_record: usize,
}

impl Options {
    /// Parses `config`; `max_rtt_ms` scales the default durations.
    pub fn parse(config: &ProtocolConfig, max_rtt_ms: f64) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        let retry_ms = positive_ms(
            "retry_ms",
            config.get("retry_ms", (2.5 * max_rtt_ms).max(10.0))?,
        )?;
        let fast_ms = config.get("fast_path_wait_ms", (0.5 * max_rtt_ms).max(1.0))?;
        let fast_path_wait_ms = positive_ms("fast_path_wait_ms", fast_ms)?;
        let exec_timeout_ms = positive_ms(
            "exec_timeout_ms",
            config.get("exec_timeout_ms", 8.0 * retry_ms)?,
        )?;
        let query_ms = positive_ms("query_ms", config.get("query_ms", 2.0 * exec_timeout_ms)?)?;
        let view_change_ms = config.get("view_change_ms", (4.0 * max_rtt_ms).max(10.0))?;
        let view_change_ms = positive_ms("view_change_ms", view_change_ms)?;
        Ok(Options {
            strict: config.get("strict", true)?,
            unsafe_skip_slow_path_validation: config
                .get("unsafe_skip_slow_path_validation", false)?,
            retry_ns: ms_to_ns(retry_ms),
            fast_path_wait_ns: ms_to_ns(fast_path_wait_ms),
            exec_timeout_ns: ms_to_ns(exec_timeout_ms),
            query_ns: ms_to_ns(query_ms),
            max_retries: config.get("max_retries", 4u32)?,
            max_attempts: count(config, "max_attempts", 4usize)? as u32,
            max_inflight: count(config, "max_inflight", 4096usize)?,
            versions_kept: count(config, "versions_kept", 8usize)?,
            checkpoint_every: count(config, "checkpoint_every", 4096usize)?,
            view_change_ns: ms_to_ns(view_change_ms),
            commits_in_record: config.get("commits_in_record", 8192usize)?,
        })
    }

    /// Parses `config` with defaults scaled to `cluster`.
    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::parse(config, cluster.topology.max_rtt_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_scale_and_bad_values_are_refused_by_name() {
        let o = Options::parse(&ProtocolConfig::default(), 100.0).unwrap();
        assert!(o.strict && !o.unsafe_skip_slow_path_validation);
        assert_eq!(o.retry_ns, 250_000_000);
        assert_eq!(o.fast_path_wait_ns, 50_000_000);
        let parse = |text: &str| Options::parse(&ProtocolConfig::parse(text).unwrap(), 100.0);
        assert!(!parse("strict=false").unwrap().strict);
        assert!(parse("strict=maybe").unwrap_err().contains("`strict`"));
        assert!(parse("versions_kept=0")
            .unwrap_err()
            .contains("`versions_kept`"));
        assert!(parse("retry_ms=-1").unwrap_err().contains("`retry_ms`"));
        assert_eq!(o.view_change_ns, 400_000_000);
        let bad = parse("view_change_ms=0").unwrap_err();
        assert!(bad.contains("`view_change_ms`"), "{bad}");
        assert!(parse("bogus=1").unwrap_err().contains("`bogus`"));
    }
}
