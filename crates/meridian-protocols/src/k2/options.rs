//! Protocol options of `k2` (`--protocol-opts key=value,...`).

use crate::kit::options::{count, ms_to_ns, positive_ms};
use meridian_core::time::NS_PER_US;
use meridian_core::{Cluster, ProtocolConfig};

/// Every option this protocol understands; anything else is refused by name.
pub const OPTIONS: [&str; 21] = [
    "timestamps",
    "epsilon_us",
    "drift_ppm",
    "ttl_us",
    "step_ns",
    "mv_reads",
    "mv_writes",
    "async_finalize",
    "retry_ms",
    "txn_timeout_ms",
    "max_inflight",
    "max_versions_per_key",
    "max_waiting_per_node",
    "checkpoint_every",
    "read_floor_ms",
    "unsafe_skip_read_tracking",
    "epoch_ms",
    "replica_reads",
    "snapshot_staleness_ms",
    "unsafe_no_collab_epoch",
    "unsafe_skip_epoch_validation",
];

/// Where read-only one-shot transactions are served (K2 §6.4, Fig. 9 lines 8-21).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaReads {
    /// Every read at the primaries (§7.1: "unless otherwise stated, we run transactions on
    /// primaries").
    Off,
    /// At the nearest copy, at the epoch covering a fresh K2-TB timestamp.
    Linearizable,
    /// At the nearest copy, at the epoch covering a timestamp `snapshot_staleness` old.
    Snapshot,
}

/// Where a coordinator's timestamps come from (K2 §4.2 and §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timestamps {
    /// K2-TB (Figs. 5-6): one oracle timestamp buys a batch of `ttl/step` timestamps.
    Batch,
    /// The strawman (Fig. 3): every transaction asks its region's oracle.
    Oracle,
}

/// Parsed options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// `timestamps=batch|oracle` (default batch).
    pub timestamps: Timestamps,
    /// The oracles' uncertainty bound ε (`epsilon_us`; 100, §7.1). Checked against the
    /// oracles' clock profile: an oracle whose clock may err by more is refused.
    pub epsilon_ns: u64,
    /// The ordinary servers' assumed maximum drift D (`drift_ppm`; 200, §2.2).
    pub drift_ppm: u64,
    /// The batch's time to live, which is also its width (`ttl_us`; 100 as in §7.2, or
    /// four of the topology's largest intra-region round trips if that is more: §4.3 asks
    /// for a TTL above the latency of getting a timestamp, else every batch has expired
    /// when it arrives and serves only the transactions that waited for it).
    pub ttl_ns: u64,
    /// Nanoseconds between two timestamps of a batch (`step_ns`; 10, §4.4).
    pub step_ns: u64,
    /// Fig. 19's first optimization (`mv_reads`; true): readers read older versions. Off, a
    /// reader below the key's newest version aborts (single-version timestamp ordering).
    pub mv_reads: bool,
    /// Fig. 19's second (`mv_writes`; true): a write stream holds several intents per key.
    /// Off, a writer meeting another transaction's intent waits for it if that intent is
    /// older and aborts if it is younger (classic MVTO blocks W-W; the order of waits
    /// keeps it deadlock free).
    pub mv_writes: bool,
    /// Fig. 19's third (`async_finalize`; true): the client hears the decision once the
    /// recorder has persisted it. Off, only after every participant finalized.
    pub async_finalize: bool,
    /// Retransmission interval (`retry_ms`; default the largest round trip × 2, ≥ 5 ms).
    pub retry_ns: u64,
    /// A coordinator gives a transaction this long (`txn_timeout_ms`; 8 × retry, ≥ 1 s);
    /// recorders abort undetermined transactions whose timestamp is older.
    pub txn_timeout_ns: u64,
    /// Live transactions per coordinator (`max_inflight`; 1024).
    pub max_inflight: usize,
    /// Committed versions kept per key (`max_versions_per_key`; 32); a read below the
    /// oldest kept version aborts.
    pub max_versions_per_key: usize,
    /// Pieces a data node holds waiting for PUSHWS (`max_waiting_per_node`; 4096).
    pub max_waiting_per_node: usize,
    /// A node checkpoints after this many records (`checkpoint_every`; 4096).
    pub checkpoint_every: usize,
    /// How far ahead a data node reserves its read-tracker floor in its log
    /// (`read_floor_ms`; 1000): after a crash, writes below it abort.
    pub read_floor_ns: u64,
    /// TEST-ONLY, deliberately broken: data nodes do not record reads in the read version
    /// tracker, so a writer below a reader's timestamp is not aborted (§5.2's read-write
    /// check removed). The conformance suite shows the checker catching it.
    pub unsafe_skip_read_tracking: bool,
    /// K2-VCR's epoch length (`epoch_ms`; 100, §7.1). Epoch `k` ends at true time
    /// `k · epoch`.
    pub epoch_ns: u64,
    /// `replica_reads=off|linearizable|snapshot` (default off; `on` is `linearizable`).
    pub replica_reads: ReplicaReads,
    /// How far behind its K2-TB timestamp a snapshot read reads (`snapshot_staleness_ms`;
    /// default two epochs plus the largest round trip, so a replica has usually replayed
    /// it already).
    pub snapshot_staleness_ns: u64,
    /// TEST-ONLY, deliberately broken: a participant finalizes a transaction's writes in
    /// its own current epoch instead of the collaboratively assigned one (§6.3 removed),
    /// so a transaction's writes on two shards can become visible at replicas in
    /// different epochs.
    pub unsafe_no_collab_epoch: bool,
    /// TEST-ONLY, deliberately broken: a transaction committing above its timestamp's
    /// ceiling epoch skips the validation (module doc, "epoch order"), so a read-write
    /// anti-dependency can go down in epochs and a replica view shows the younger writer
    /// without the older reader.
    pub unsafe_skip_epoch_validation: bool,
}

impl Options {
    /// Parses `config` for `cluster`.
    pub fn for_cluster(config: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        config.check_known(&OPTIONS)?;
        let timestamps = match config.get("timestamps", "batch".to_string())?.as_str() {
            "batch" => Timestamps::Batch,
            "oracle" => Timestamps::Oracle,
            other => {
                return Err(format!(
                    "protocol option `timestamps` must be `batch` or `oracle`, got `{other}`"
                ))
            }
        };
        let epsilon_us: u64 = config.get("epsilon_us", 100)?;
        let ttl_us: u64 = config.get("ttl_us", default_ttl_us(cluster))?;
        let step_ns: u64 = config.get("step_ns", 10)?;
        let drift_ppm: u64 = config.get("drift_ppm", 200)?;
        in_range("epsilon_us", epsilon_us, 1, 1_000_000)?;
        in_range("ttl_us", ttl_us, 1, 1_000_000)?;
        in_range("step_ns", step_ns, 1, ttl_us * NS_PER_US)?;
        in_range("drift_ppm", drift_ppm, 0, 100_000)?;
        crate::kit::ttc::check_oracle_clocks(cluster, epsilon_us)?;
        let retry_ms = config.get("retry_ms", (2.0 * cluster.topology.max_rtt_ms()).max(5.0))?;
        positive_ms("retry_ms", retry_ms)?;
        let txn_timeout_ms = config.get("txn_timeout_ms", (8.0 * retry_ms).max(1000.0))?;
        positive_ms("txn_timeout_ms", txn_timeout_ms)?;
        if txn_timeout_ms < 2.0 * retry_ms {
            return Err(format!(
                "protocol option `txn_timeout_ms` ({txn_timeout_ms}) must be at least twice \
                 `retry_ms` ({retry_ms})"
            ));
        }
        let replica_reads = match config.get("replica_reads", "off".to_string())?.as_str() {
            "off" => ReplicaReads::Off,
            // `on`: the paper's default kind of replica read (§6.4's linearizable read).
            "linearizable" | "on" => ReplicaReads::Linearizable,
            "snapshot" => ReplicaReads::Snapshot,
            other => {
                return Err(format!(
                    "protocol option `replica_reads` must be `off`, `linearizable` (or `on`) \
                     or `snapshot`, got `{other}`"
                ))
            }
        };
        let epoch_ms = config.get("epoch_ms", 100.0)?;
        positive_ms("epoch_ms", epoch_ms)?;
        let staleness_default = 2.0 * epoch_ms + cluster.topology.max_rtt_ms();
        let snapshot_staleness_ms = config.get("snapshot_staleness_ms", staleness_default)?;
        if !(0.0..=1e9).contains(&snapshot_staleness_ms) {
            return Err(format!(
                "protocol option `snapshot_staleness_ms` must be a finite duration \
                 (0 or more), got {snapshot_staleness_ms}"
            ));
        }
        let read_floor_ms = config.get("read_floor_ms", 1000.0)?;
        positive_ms("read_floor_ms", read_floor_ms)?;
        let options = Options {
            timestamps,
            epsilon_ns: epsilon_us * NS_PER_US,
            drift_ppm,
            ttl_ns: ttl_us * NS_PER_US,
            step_ns,
            mv_reads: config.get("mv_reads", true)?,
            mv_writes: config.get("mv_writes", true)?,
            async_finalize: config.get("async_finalize", true)?,
            retry_ns: ms_to_ns(retry_ms),
            txn_timeout_ns: ms_to_ns(txn_timeout_ms),
            max_inflight: count(config, "max_inflight", 1024)?,
            max_versions_per_key: count(config, "max_versions_per_key", 32)?,
            max_waiting_per_node: count(config, "max_waiting_per_node", 4096)?,
            checkpoint_every: count(config, "checkpoint_every", 4096)?,
            read_floor_ns: ms_to_ns(read_floor_ms),
            unsafe_skip_read_tracking: config.get("unsafe_skip_read_tracking", false)?,
            epoch_ns: ms_to_ns(epoch_ms).max(1),
            replica_reads,
            snapshot_staleness_ns: ms_to_ns(snapshot_staleness_ms),
            unsafe_no_collab_epoch: config.get("unsafe_no_collab_epoch", false)?,
            unsafe_skip_epoch_validation: config.get("unsafe_skip_epoch_validation", false)?,
        };
        Ok(options)
    }

    /// Whether K2-VCR runs (epochs are cut and replicas replay only then).
    pub fn epochs_on(&self) -> bool {
        self.replica_reads != ReplicaReads::Off
    }

    /// The epoch whose interval holds true time `t_ns` (its ceiling epoch, §6.4).
    pub fn epoch_of(&self, t_ns: u64) -> u64 {
        t_ns.div_ceil(self.epoch_ns)
    }

    /// `x · (1 + D)`: a duration that an ordinary clock drifting by up to D may count short.
    pub fn with_drift(&self, ns: u64) -> u64 {
        crate::kit::ttc::with_drift(ns, self.drift_ppm)
    }

    /// `x · (1 − D)`: a local duration that is at most `x` of true time.
    pub fn within_drift(&self, ns: u64) -> u64 {
        ns - (ns as u128 * self.drift_ppm as u128).div_ceil(1_000_000) as u64
    }

    /// The commit wait time (CWT) after a timestamp is obtained: `2ε(1+D)` for the
    /// strawman (§4.2), `2(TTL+ε)(1+D)` for a batch (§4.4).
    pub fn commit_wait_ns(&self) -> u64 {
        match self.timestamps {
            Timestamps::Oracle => self.with_drift(2 * self.epsilon_ns),
            Timestamps::Batch => self.with_drift(2 * (self.ttl_ns + self.epsilon_ns)),
        }
    }

    /// A recorder aborts a transaction it has no decision for once its timestamp is this
    /// old, and refuses to commit one that old (so forgotten aborts stay aborts): by then
    /// its coordinator has given up on it anyway (§5.3: a failed coordinator's
    /// transactions are aborted).
    pub fn max_txn_age_ns(&self) -> u64 {
        self.txn_timeout_ns
    }
}

fn in_range(key: &str, value: u64, low: u64, high: u64) -> Result<(), String> {
    if (low..=high).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "protocol option `{key}` must be in {low}..={high}, got {value}"
        ))
    }
}

/// The default TTL: 100 µs, or four intra-region round trips (the oracle's latency here).
fn default_ttl_us(cluster: &Cluster) -> u64 {
    let intra_ms = cluster.topology.max_intra_region_rtt_ms();
    ((4.0 * intra_ms * 1000.0).ceil() as u64).max(100)
}
