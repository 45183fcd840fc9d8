//! Protocol options of `dast` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 12] = [
    "heartbeat_ms",
    "suspect_ms",
    "retry_ms",
    "prepare_timeout_ms",
    "result_timeout_ms",
    "query_ms",
    "anticipation_margin_ms",
    "max_inflight",
    "max_notices",
    "checkpoint_every",
    "stretch",
    "unsafe_skip_anticipation",
];

/// Parsed options; durations default to multiples of the topology's round trips.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// How often an edge node advances and announces its dclock to the nodes of its region
    /// (`heartbeat_ms`; default half the intra-region round trip, at least 1 ms).
    pub heartbeat_ns: u64,
    /// Retransmission interval (`retry_ms`; default 1.5 × the largest round trip).
    pub retry_ns: u64,
    /// A coordinator aborts a transaction not prepared by then (`prepare_timeout_ms`;
    /// default 10 × retry).
    pub prepare_timeout_ns: u64,
    /// A coordinator answers `unknown` if a committed transaction's results are not all in
    /// by then (`result_timeout_ms`; default 2 × prepare timeout).
    pub result_timeout_ns: u64,
    /// A participant asks the coordinator about a transaction undecided this long
    /// (`query_ms`; default 2 × retry).
    pub query_ns: u64,
    /// Added to a manager's anticipation (`anticipation_margin_ms`; default one
    /// intra-region round trip): the hop from manager to nodes and back to its clock.
    pub margin_ns: u64,
    /// The acting manager removes an edge node it has not heard from this long, and a
    /// backup manager takes over from a lower one silent this long (`suspect_ms`; default
    /// 4 × retry, §4.4).
    pub suspect_ns: u64,
    /// Undecided transactions per coordinator (`max_inflight`; 4096).
    pub max_inflight: usize,
    /// Notifications per message; the announced clock stops below the first left out
    /// (`max_notices`; 256).
    pub max_notices: usize,
    /// Records between snapshots (`checkpoint_every`; 2048).
    pub checkpoint_every: usize,
    /// The stretchable clock (`stretch`; true). `false` is the ablation of §4.3: a node's
    /// clock runs on past a pending CRT, so IRTs wait behind it.
    pub stretch: bool,
    /// TEST-ONLY, deliberately broken (`unsafe_skip_anticipation`): the anticipation rule
    /// is skipped — a coordinator commits a CRT at its own `srcTs` instead of the largest
    /// anticipation, and participants do not hold their clocks below a prepared CRT — so a
    /// CRT commits below transactions its participants already executed (and is then
    /// executed late, out of timestamp order).
    pub unsafe_skip_anticipation: bool,
}

impl Options {
    pub fn for_cluster(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        raw.check_known(&OPTIONS)?;
        let (intra_ms, max_ms) = (
            cluster.topology.max_intra_region_rtt_ms(),
            cluster.topology.max_rtt_ms(),
        );
        let heartbeat_ms = positive_ms(
            "heartbeat_ms",
            raw.get("heartbeat_ms", (intra_ms / 2.0).max(1.0))?,
        )?;
        let retry_ms = positive_ms("retry_ms", raw.get("retry_ms", (1.5 * max_ms).max(10.0))?)?;
        let prepare_timeout_ms = positive_ms(
            "prepare_timeout_ms",
            raw.get("prepare_timeout_ms", 10.0 * retry_ms)?,
        )?;
        let result_timeout_ms = positive_ms(
            "result_timeout_ms",
            raw.get("result_timeout_ms", 2.0 * prepare_timeout_ms)?,
        )?;
        let suspect_ms = positive_ms("suspect_ms", raw.get("suspect_ms", 4.0 * retry_ms)?)?;
        let query_ms = positive_ms("query_ms", raw.get("query_ms", 2.0 * retry_ms)?)?;
        let margin_ms: f64 = raw.get("anticipation_margin_ms", intra_ms)?;
        if !(margin_ms.is_finite() && (0.0..=1e6).contains(&margin_ms)) {
            return Err(format!(
                "protocol option `anticipation_margin_ms` must be between 0 and 1e6, got {margin_ms}"
            ));
        }
        let max_inflight = count(raw, "max_inflight", 4096)?;
        let max_notices = count(raw, "max_notices", 256)?;
        let checkpoint_every = count(raw, "checkpoint_every", 2048)?;
        Ok(Options {
            heartbeat_ns: ms_to_ns(heartbeat_ms),
            retry_ns: ms_to_ns(retry_ms),
            prepare_timeout_ns: ms_to_ns(prepare_timeout_ms),
            result_timeout_ns: ms_to_ns(result_timeout_ms),
            query_ns: ms_to_ns(query_ms),
            suspect_ns: ms_to_ns(suspect_ms),
            margin_ns: ms_to_ns(margin_ms),
            max_inflight,
            max_notices,
            checkpoint_every,
            stretch: raw.get("stretch", true)?,
            unsafe_skip_anticipation: raw.get("unsafe_skip_anticipation", false)?,
        })
    }
}
