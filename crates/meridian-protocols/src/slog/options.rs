//! Protocol options of `slog` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 10] = [
    "batch_ms",
    "release",
    "tick_ms",
    "retry_ms",
    "result_timeout_ms",
    "window",
    "max_inflight",
    "outputs_kept",
    "log_limit",
    "unsafe_skip_global_order",
];

/// Parsed options; durations default to the paper's 5 ms or to multiples of the topology's
/// round trips.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// A region's sequencer closes a batch of its single-home transactions this often, and
    /// the global orderer one of multi-home transactions (`batch_ms`; 5, DAST §6).
    pub batch_ns: u64,
    /// One Raft tick (`tick_ms`; default one intra-region round trip, at least 1 ms):
    /// heartbeats every 2 ticks, elections after 10-20.
    pub tick_ns: u64,
    /// Retransmission interval of orders and global batches (`retry_ms`; default 1.5 × the
    /// largest round trip + 4 batches).
    pub retry_ns: u64,
    /// A coordinator answers `unknown` if a transaction's results are not all in by then
    /// (`result_timeout_ms`; default 20 × retry).
    pub result_timeout_ns: u64,
    /// When a shard releases a transaction's locks (`release`): `txn` (default) once every
    /// shard of the transaction ran its pieces (strict serializability), or `pieces` once
    /// its own pieces ran, DAST §6's configuration (serializable, not strict: a
    /// multi-shard transaction's pieces then run at different times at different shards).
    pub release: Release,
    /// Global batches in flight to one region, and buffered by it ahead of its next one
    /// (`window`; 64).
    pub window: u64,
    /// Unfinished transactions per coordinator (`max_inflight`; 4096).
    pub max_inflight: usize,
    /// Piece outputs an edge node keeps to answer peers that missed them (`outputs_kept`;
    /// 65536).
    pub outputs_kept: usize,
    /// A region's sequencer asks its members to compact their copy of the region's log
    /// once it holds more than this many entries (`log_limit`; 64, about 0.3 s of batches
    /// at `batch_ms=5`), as far as every member has it (see `edge.rs`).
    pub log_limit: u64,
    /// TEST-ONLY, deliberately broken (`unsafe_skip_global_order`): a multi-home
    /// transaction skips the global orderer and goes straight to each of its regions'
    /// sequencers, so two regions may log two multi-home transactions in opposite orders.
    pub unsafe_skip_global_order: bool,
}

impl Options {
    pub fn for_cluster(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        raw.check_known(&OPTIONS)?;
        let (intra_ms, max_ms) = (
            cluster.topology.max_intra_region_rtt_ms(),
            cluster.topology.max_rtt_ms(),
        );
        let batch_ms = positive_ms("batch_ms", raw.get("batch_ms", 5.0)?)?;
        let tick_ms = positive_ms("tick_ms", raw.get("tick_ms", intra_ms.max(1.0))?)?;
        let retry_ms = positive_ms(
            "retry_ms",
            raw.get("retry_ms", (1.5 * max_ms + 4.0 * batch_ms).max(10.0))?,
        )?;
        let result_timeout_ms = positive_ms(
            "result_timeout_ms",
            raw.get("result_timeout_ms", 20.0 * retry_ms)?,
        )?;
        let release = match raw.get("release", "txn".to_string())?.as_str() {
            "txn" => Release::Txn,
            "pieces" => Release::Pieces,
            other => {
                return Err(format!(
                    "protocol option `release` must be `txn` or `pieces`, got `{other}`"
                ))
            }
        };
        let window = count(raw, "window", 64)? as u64;
        let max_inflight = count(raw, "max_inflight", 4096)?;
        let outputs_kept = count(raw, "outputs_kept", 65536)?;
        let log_limit = count(raw, "log_limit", 64)? as u64;
        Ok(Options {
            batch_ns: ms_to_ns(batch_ms),
            tick_ns: ms_to_ns(tick_ms),
            retry_ns: ms_to_ns(retry_ms),
            result_timeout_ns: ms_to_ns(result_timeout_ms),
            release,
            window,
            max_inflight,
            outputs_kept,
            log_limit,
            unsafe_skip_global_order: raw.get("unsafe_skip_global_order", false)?,
        })
    }
}

/// When a shard releases a transaction's locks (see [`Options::release`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    Txn,
    Pieces,
}
