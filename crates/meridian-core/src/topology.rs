//! Topologies (DESIGN §5): one TOML format for the simulator, the runtime and the benchmarks.
//!
//! ```toml
//! name = "example"
//! regions = ["SC", "FI", "BR"]
//! intra_region_rtt_ms = 0.5          # round trip inside a region
//! jitter_ms = 0.5                    # mean extra one-way delay (the simulator's jitter)
//!
//! [[rtt]]                            # every pair of distinct regions, once
//! between = ["SC", "FI"]
//! ms = 122.0
//! # one_way_ms = [55.0, 67.0]        # optional asymmetric split (a→b, b→a); sums to `ms`
//!
//! [[shards]]                         # `count` shards with this placement
//! count = 3
//! replicas = ["SC", "FI", "BR"]
//! leader = "SC"                      # initial leader: the first replica in that region
//!
//! [[coordinators]]
//! region = "SC"
//! count = 2
//!
//! [clocks]
//! profile = "huygens"                # perfect | huygens | chrony | ntpd | bad | a custom name
//! overrides = [{ region = "BR", profile = "bad" }, { node = "shard0/replica1", profile = "ntpd" },
//!              { service = "oracle", profile = "ttc" }]   # every member of a service
//! steps = [{ node = "coord0", at_ms = 5000.0, step_ms = -40.0 }]
//! [clocks.custom.wobbly]
//! error_ms = 2.0                     # typical |error|; drawn per node, re-drawn every resync
//! drift_ppm = 20.0
//! resync_ms = 1000.0
//! error_bound_ms = 5.0               # optional: a guaranteed bound (TrueTime-style ε)
//! # model = "2lclock"                # or "farmv2", "dst": Aurogon's clocks, with their own
//! #                                  # parameters ([`ClockParams`]; rdma-cluster.toml has all three)
//!
//! [machines]                       # optional: machines per region; roles share them
//! SC = 3                             # (see "Deployment" below)
//!
//! [[services]]                       # optional: where a protocol service runs
//! name = "vm"                        # the protocol's service name
//! regions = ["SC", "FI", "BR"]       # one member per entry…
//! # per_region = 3                   # …or this many members in every region
//! # per_shard = 1                    # …or this many beside each shard's leader
//!
//! [runtime]
//! host = "127.0.0.1"                 # every node's address, unless its region's is below
//! base_port = 7100                   # node i listens on base_port + i
//! metrics_base_port = 9100
//! # listen = "0.0.0.0"               # optional: bind here instead of the address
//!
//! [runtime.hosts]                    # optional: a region's address (one machine each)
//! SC = "10.0.0.2"
//! ```
//!
//! A file may instead describe `N` identical regions with a `[generate]` table (DAST §6's
//! edge deployment at 1 to 100 regions), which writes `regions`, `[[rtt]]`, `[machines]`,
//! `[[shards]]` and `[[coordinators]]` for it; a load name `FILE:regions=40` overrides its
//! keys ([`generate`]'s doc).
//!
//! Node names (used by clock overrides, steps and fault schedules): `shard{S}/replica{R}`,
//! `coord{I}`, and `{service}{I}` for protocol services. Every error names the field and,
//! where the file has one, the line.
//!
//! # Deployment: roles, machines, replica kinds
//!
//! A *node* is one role — a replica of one shard, a coordinator, or a service member — with
//! its own state machine and id. A *machine* hosts one or more nodes: by default every node
//! has a machine of its own (Tiga's and Clock-SI's deployments), but DAST's edge nodes
//! coordinate their own transactions, K2's data nodes coordinate, and Aurogon's servers are
//! coordinator, primary and backup at once. Their papers measure exactly the hop a separate
//! coordinator machine would add, so the topology can put several roles on one machine:
//!
//! - `[machines] R = M` gives region R `M` machines. R's replicas are dealt onto them
//!   round-robin in layout order (shard by shard, replica by replica); two replicas of one
//!   shard on one machine is an error. Five machines with five shards of
//!   `replicas = ["DC", "DC"]` give every machine one primary and one backup (Aurogon §6.1).
//! - `colocated = true` on a `[[coordinators]]` entry puts that region's coordinators on its
//!   machines (the j-th on machine j mod M).
//! - Services always get machines of their own. `[[services]]` places a service the
//!   protocol runs (replacing its default placement); one it does not run is ignored, so
//!   the protocols compared on one deployment can all run on its file.
//!
//! Drivers treat a machine as the unit of failure and of time: its nodes crash and restart
//! together, read one clock, and talk to each other for free (no delay, no loss, never cut
//! by a partition). The runtime hosts one machine per process.
//!
//! `kinds = ["voter", "voter", "read-replica"]` on a `[[shards]]` entry gives each replica a
//! [`ReplicaKind`] (default: all voters): asynchronous read replicas (K2 §6) and backups
//! (Aurogon's primary-backup, §4.5) sit beside the voting replicas; the initial leader must be
//! a voter. A protocol states which kinds it runs ([`crate::Protocol::REPLICA_KINDS`]).

use crate::ids::{NodeId, RegionId, ReplicaId, ShardId};
use crate::partition::Partitioner;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use toml::Spanned;

pub mod generate;
pub use generate::MAX_REGIONS;

/// A malformed or inconsistent topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}{}: {field}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TopologyError {
    pub source_name: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

/// How a node's clock errs (DESIGN §3; Tiga Table 3). Drivers interpret the parameters: the
/// simulator draws an offset per node, re-draws it every `resync_ms`, adds `drift_ppm` between
/// resyncs, and applies `steps_per_minute` random steps of up to `error_ms`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockParams {
    /// Typical absolute error in ms.
    pub error_ms: f64,
    #[serde(default)]
    pub drift_ppm: f64,
    #[serde(default = "default_resync_ms")]
    pub resync_ms: f64,
    /// Random clock steps (restarts of a bad time server), per minute.
    #[serde(default)]
    pub steps_per_minute: f64,
    /// A guaranteed bound on |error| (the model clips to it), if the profile offers one.
    #[serde(default)]
    pub error_bound_ms: Option<f64>,
    /// A TrueTime clock (K2 §2.2): a hardware clock disciplined by PTP against a time
    /// master, trusted to stay within `error_bound_ms`. A scheduled clock step (a fault of
    /// the software time daemon of an ordinary server) does not reach it.
    #[serde(default)]
    pub truetime: bool,
    /// Which synchronization the simulator models (see [`ClockKind`]); the parameters
    /// below are read only by the kinds that name them.
    #[serde(default)]
    pub model: ClockKind,
    /// `2lclock`: the CPU–NIC timeslice (Aurogon §5.2.1); one fitted point per slice.
    #[serde(default)]
    pub cpu_sync_ms: f64,
    /// `2lclock`: |error| of a CPU–NIC fit once outlier probes are filtered (§5.2.1).
    #[serde(default)]
    pub cpu_error_ms: f64,
    /// CPU interference (Aurogon §2.3, Table 2): the fraction of CPU clock probes delayed
    /// by foreground work…
    #[serde(default)]
    pub interference_rate: f64,
    /// …and the largest such delay. A delayed probe misplaces its sync point by up to half
    /// of it; `2lclock` filters those probes out, `farmv2` does not.
    #[serde(default)]
    pub interference_ms: f64,
    /// Root failover (§5.3): how long a child free-runs on its last mapping (the virtual
    /// phase) before the mapping to the new root is warm; each node draws 1–1.5× this.
    #[serde(default)]
    pub virtual_ms: f64,
    /// Root failover: how long the correction value takes to fade (the smoothing phase).
    #[serde(default)]
    pub smoothing_ms: f64,
}

/// The clock synchronization a profile models (Aurogon §2.2, §5, §6.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum ClockKind {
    /// Today's model: an offset in ±`error_ms` re-drawn every `resync_ms`, drift between
    /// resyncs, random and scheduled steps.
    #[default]
    #[serde(rename = "offset")]
    Offset,
    /// Aurogon's 2LClock (§5): NIC–NIC sync to a root NIC every `resync_ms` with fit error
    /// `error_ms`, CPU–NIC sync every `cpu_sync_ms` with error `cpu_error_ms`, interference
    /// filtered, root failover with virtual and smoothing phases. `drift_ppm` is the rate
    /// error of a mapping extrapolated past its last sync.
    #[serde(rename = "2lclock")]
    TwoLClock,
    /// A FaRMv2-style clock (§6.5): one level, CPU clocks synced to a master every
    /// `resync_ms` with error `error_ms`; interference is not filtered.
    #[serde(rename = "farmv2")]
    FarmV2,
    /// DST's chasing clocks as DST-TO uses them (§2.2, §6.2): an offset in ±`error_ms` (one-way
    /// delay not accounted for) and an uncorrected drift in ±`drift_ppm`; the catching up
    /// is the protocol's.
    #[serde(rename = "dst")]
    Dst,
}

impl ClockKind {
    /// The kinds whose clocks follow a root (and fail over when it crashes).
    pub fn has_root(self) -> bool {
        matches!(self, ClockKind::TwoLClock | ClockKind::FarmV2)
    }
}

impl Default for ClockParams {
    /// A perfect clock of today's model.
    fn default() -> Self {
        ClockParams {
            error_ms: 0.0,
            drift_ppm: 0.0,
            resync_ms: default_resync_ms(),
            steps_per_minute: 0.0,
            error_bound_ms: None,
            truetime: false,
            model: ClockKind::Offset,
            cpu_sync_ms: 0.0,
            cpu_error_ms: 0.0,
            interference_rate: 0.0,
            interference_ms: 0.0,
            virtual_ms: 0.0,
            smoothing_ms: 0.0,
        }
    }
}

fn default_resync_ms() -> f64 {
    1000.0
}

/// A named clock profile and its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockProfile {
    pub name: String,
    pub params: ClockParams,
}

impl ClockProfile {
    /// The built-in profiles, calibrated to Tiga Table 3's measured clock errors as the
    /// simulator measures them (mean |local − true| over every clock and instant of a run,
    /// the report's `clock_error` mean): Huygens 0.012 ms, chrony 4.54, ntpd 16.45, bad
    /// clock 62.55. An offset clock's error is uniform in ±`error_ms` between resyncs, so
    /// its mean is about `error_ms`/2 (drift adds microseconds); the bad clock's random
    /// steps (a time server restarting) add about 1 %.
    pub fn builtin(name: &str) -> Option<ClockProfile> {
        let params =
            |error_ms, drift_ppm, resync_ms, steps_per_minute, error_bound_ms| ClockParams {
                error_ms,
                drift_ppm,
                resync_ms,
                steps_per_minute,
                error_bound_ms,
                ..ClockParams::default()
            };
        let params = match name {
            "perfect" => params(0.0, 0.0, 1000.0, 0.0, Some(0.0)),
            "huygens" => params(0.024, 0.1, 1000.0, 0.0, Some(0.05)),
            "chrony" => params(9.08, 5.0, 1000.0, 0.0, None),
            "ntpd" => params(32.86, 15.0, 4000.0, 0.0, None),
            "bad" => params(122.5, 50.0, 2000.0, 2.0, None),
            _ => return None,
        };
        Some(ClockProfile {
            name: name.to_string(),
            params,
        })
    }

    pub const BUILTIN_NAMES: [&'static str; 5] = ["perfect", "huygens", "chrony", "ntpd", "bad"];
}

/// A scheduled clock step of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockStep {
    pub node: NodeId,
    pub at_ms: f64,
    pub step_ms: f64,
}

/// What a replica is for (see the module doc, "Deployment").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaKind {
    /// A member of the shard's replication quorum (Raft voter, Tiga replica, primary).
    Voter,
    /// Applies the shard's updates asynchronously and serves reads (K2 §6); never votes.
    ReadReplica,
    /// Holds a copy the primary updates before it acknowledges (Aurogon §4.5, the paper's
    /// R2PL/ROCC); promoted when the primary fails.
    Backup,
}

impl ReplicaKind {
    pub fn name(self) -> &'static str {
        match self {
            ReplicaKind::Voter => "voter",
            ReplicaKind::ReadReplica => "read-replica",
            ReplicaKind::Backup => "backup",
        }
    }
}

/// A shard's placement.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardPlacement {
    pub replicas: Vec<RegionId>,
    /// One per replica (all [`ReplicaKind::Voter`] unless the file says otherwise).
    pub kinds: Vec<ReplicaKind>,
    pub leader: ReplicaId,
}

/// Where a protocol service's members run, as the topology file places them (overriding
/// the protocol's default placement of that service).
#[derive(Clone, Debug, PartialEq)]
pub struct ServicePlacement {
    pub name: String,
    /// One entry per member.
    pub regions: Vec<RegionId>,
}

/// Runtime addresses. Node i listens on `base_port + i` (peers and clients) and
/// `metrics_base_port + i` (`/metrics`, `/status`), whatever its address, so one file
/// serves every machine of a deployment and no two nodes share a port.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSpec {
    /// The address of every node whose region `hosts` does not name: where it listens and
    /// where peers and clients reach it.
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_base_port")]
    pub base_port: u16,
    #[serde(default = "default_metrics_base_port")]
    pub metrics_base_port: u16,
    /// Per region, the address of its nodes (its machine's), overriding `host`.
    #[serde(default)]
    pub hosts: std::collections::BTreeMap<String, String>,
    /// Where every node binds, if not its own address (e.g. `0.0.0.0` on a cloud machine
    /// reached through an address it cannot bind); peers and clients still use the address.
    #[serde(default)]
    pub listen: Option<String>,
}

impl RuntimeSpec {
    /// The address of region `region`'s nodes (a name or an IP, without port).
    pub fn host_of(&self, region: &str) -> &str {
        self.hosts.get(region).unwrap_or(&self.host)
    }

    /// Where a node of `region` binds (without port).
    pub fn listen_of(&self, region: &str) -> &str {
        self.listen
            .as_deref()
            .unwrap_or_else(|| self.host_of(region))
    }

    /// A region named in `hosts` must exist, and an address must be one others can reach
    /// (an unspecified address like `0.0.0.0` belongs in `listen`).
    fn validate(&self, regions: &[String]) -> Result<(), (String, String)> {
        for (region, host) in &self.hosts {
            if !regions.contains(region) {
                return Err((
                    format!("runtime.hosts.{region}"),
                    format!(
                        "unknown region `{region}` (regions: {})",
                        regions.join(", ")
                    ),
                ));
            }
            check_reachable(host).map_err(|m| (format!("runtime.hosts.{region}"), m))?;
        }
        check_reachable(&self.host).map_err(|m| ("runtime.host".to_string(), m))?;
        if let Some(listen) = &self.listen {
            if listen.trim().is_empty() {
                return Err(("runtime.listen".into(), "an empty address".into()));
            }
        }
        Ok(())
    }
}

fn check_reachable(host: &str) -> Result<(), String> {
    if host.trim().is_empty() {
        return Err("an empty address".into());
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) if ip.is_unspecified() => Err(format!(
            "`{host}` is a wildcard, not an address peers and clients can reach; give the \
             machine's address here and put `listen = \"{host}\"` in [runtime] to bind all \
             interfaces"
        )),
        _ => Ok(()),
    }
}

fn default_host() -> String {
    "127.0.0.1".to_string()
}
fn default_base_port() -> u16 {
    7100
}
fn default_metrics_base_port() -> u16 {
    9100
}

impl Default for RuntimeSpec {
    fn default() -> Self {
        RuntimeSpec {
            host: default_host(),
            base_port: default_base_port(),
            metrics_base_port: default_metrics_base_port(),
            hosts: Default::default(),
            listen: None,
        }
    }
}

/// A validated topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub name: String,
    pub description: String,
    pub regions: Vec<String>,
    /// `one_way_ms[a][b]`: one-way delay from region a to region b (diagonal: intra-region).
    pub one_way_ms: Vec<Vec<f64>>,
    pub jitter_ms: f64,
    pub shards: Vec<ShardPlacement>,
    /// One entry per coordinator: its region.
    pub coordinators: Vec<RegionId>,
    /// One entry per coordinator: whether it shares a machine of its region.
    pub coordinators_colocated: Vec<bool>,
    /// `machines[r]`: how many machines region r declares (None: a machine per node).
    pub machines: Vec<Option<u32>>,
    /// Service placements the file gives, in file order.
    pub services: Vec<ServicePlacement>,
    pub default_clock: ClockProfile,
    clock_overrides: Vec<(NodeSelector, ClockProfile)>,
    clock_steps: Vec<(NodeSelector, f64, f64)>,
    /// The `[clocks.custom.X]` profiles, by name (for `--clock X`).
    custom_clocks: BTreeMap<String, ClockParams>,
    pub runtime: RuntimeSpec,
}

#[derive(Clone, Debug, PartialEq)]
enum NodeSelector {
    Region(RegionId),
    Node(String),
    /// Every member of a protocol service (none when the protocol runs no such service).
    Service(String),
}

// ---- raw file shapes -------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    name: String,
    #[serde(default)]
    description: String,
    regions: Spanned<Vec<String>>,
    intra_region_rtt_ms: Spanned<f64>,
    #[serde(default)]
    jitter_ms: Option<Spanned<f64>>,
    #[serde(default)]
    rtt: Vec<RawRtt>,
    shards: Spanned<Vec<RawShards>>,
    coordinators: Spanned<Vec<RawCoordinators>>,
    #[serde(default)]
    clocks: Option<RawClocks>,
    #[serde(default)]
    runtime: Option<RuntimeSpec>,
    #[serde(default)]
    machines: BTreeMap<String, Spanned<u32>>,
    #[serde(default)]
    services: Vec<RawService>,
    /// Expanded before parsing (`topology/generate.rs`); accepted here, not read again.
    #[serde(default, rename = "generate")]
    _generate: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: Spanned<String>,
    #[serde(default)]
    regions: Vec<Spanned<String>>,
    #[serde(default)]
    per_region: Option<Spanned<u32>>,
    #[serde(default)]
    per_shard: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRtt {
    between: Spanned<[Spanned<String>; 2]>,
    ms: Spanned<f64>,
    #[serde(default)]
    one_way_ms: Option<Spanned<[f64; 2]>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShards {
    #[serde(default = "one")]
    count: Spanned<u32>,
    replicas: Spanned<Vec<Spanned<String>>>,
    leader: Option<Spanned<String>>,
    #[serde(default)]
    kinds: Option<Spanned<Vec<ReplicaKind>>>,
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCoordinators {
    region: Spanned<String>,
    #[serde(default = "one")]
    count: Spanned<u32>,
    #[serde(default)]
    colocated: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClocks {
    #[serde(default)]
    profile: Option<Spanned<String>>,
    #[serde(default)]
    overrides: Vec<RawClockOverride>,
    #[serde(default)]
    steps: Vec<RawClockStep>,
    #[serde(default)]
    custom: BTreeMap<String, ClockParams>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClockOverride {
    region: Option<Spanned<String>>,
    node: Option<Spanned<String>>,
    /// Every member of this service (K2's TTC oracles run on TrueTime clocks).
    #[serde(default)]
    service: Option<Spanned<String>>,
    profile: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClockStep {
    region: Option<Spanned<String>>,
    node: Option<Spanned<String>>,
    at_ms: Spanned<f64>,
    step_ms: Spanned<f64>,
}

/// Bundled topologies, by name.
pub const BUNDLED: [(&str, &str); 6] = [
    (
        "gcp-tiga",
        include_str!("../../../topologies/gcp-tiga.toml"),
    ),
    (
        "clock-si-wan",
        include_str!("../../../topologies/clock-si-wan.toml"),
    ),
    (
        "k2-five-regions",
        include_str!("../../../topologies/k2-five-regions.toml"),
    ),
    (
        "edge-regions",
        include_str!("../../../topologies/edge-regions.toml"),
    ),
    (
        "rdma-cluster",
        include_str!("../../../topologies/rdma-cluster.toml"),
    ),
    ("local", include_str!("../../../topologies/local.toml")),
];

struct Parser<'a> {
    source_name: &'a str,
    text: &'a str,
    /// Lines the `[generate]` expansion put before the file's own first line.
    skip_lines: usize,
}

impl Parser<'_> {
    fn line_of(&self, span: Range<usize>) -> Option<usize> {
        if span.start == 0 && span.end == 0 {
            return None;
        }
        let line = self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count()
            + 1;
        line.checked_sub(self.skip_lines).filter(|&l| l > 0)
    }

    fn error(
        &self,
        span: Option<Range<usize>>,
        field: &str,
        message: impl Into<String>,
    ) -> TopologyError {
        TopologyError {
            source_name: self.source_name.to_string(),
            line: span.and_then(|s| self.line_of(s)),
            field: field.to_string(),
            message: message.into(),
        }
    }

    fn region(
        &self,
        regions: &[String],
        name: &Spanned<String>,
        field: &str,
    ) -> Result<RegionId, TopologyError> {
        regions
            .iter()
            .position(|r| r == name.get_ref())
            .map(|i| RegionId(i as u16))
            .ok_or_else(|| {
                self.error(
                    Some(name.span()),
                    field,
                    format!(
                        "unknown region `{}` (regions: {})",
                        name.get_ref(),
                        regions.join(", ")
                    ),
                )
            })
    }

    fn non_negative(&self, value: &Spanned<f64>, field: &str) -> Result<f64, TopologyError> {
        let v = *value.get_ref();
        if !v.is_finite() || v < 0.0 {
            return Err(self.error(
                Some(value.span()),
                field,
                format!("must be a non-negative number, got {v}"),
            ));
        }
        Ok(v)
    }
}

impl Topology {
    /// A bundled topology by name, or a file by path; either may be followed by
    /// `:key=value,…`, which sets keys of its `[generate]` table
    /// (`topologies/edge-regions-full.toml:regions=40`).
    pub fn load(spec: &str) -> Result<Topology, TopologyError> {
        let (name_or_path, overrides) = generate::split_spec(spec)?;
        if let Some((name, text)) = BUNDLED.iter().find(|(n, _)| *n == name_or_path) {
            return Topology::parse_with(name, text, &overrides);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| TopologyError {
            source_name: name_or_path.to_string(),
            line: None,
            field: "file".to_string(),
            message: format!(
                "cannot read ({e}); bundled topologies are: {}",
                BUNDLED
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        Topology::parse_with(name_or_path, &text, &overrides)
    }

    /// Deserializes the raw shape, naming the field path (`shards[0].count`) of any error.
    fn deserialize(p: &Parser<'_>) -> Result<RawTopology, TopologyError> {
        let deserializer = toml::Deserializer::new(p.text);
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            // Spanned<T> adds a private wrapper segment to the path; a reader wants the key.
            let path = e
                .path()
                .to_string()
                .replace(".$__serde_spanned_private_value", "")
                .replace("$__serde_spanned_private_value", "");
            let inner = e.into_inner();
            let field = if path == "." {
                "document".to_string()
            } else {
                path
            };
            p.error(inner.span(), &field, inner.message().to_string())
        })
    }

    /// Parses and validates topology TOML; `source_name` names the file in errors.
    pub fn parse(source_name: &str, text: &str) -> Result<Topology, TopologyError> {
        Topology::parse_with(source_name, text, &[])
    }

    /// [`Topology::parse`], with keys of the file's `[generate]` table overridden.
    pub fn parse_with(
        source_name: &str,
        text: &str,
        overrides: &[(String, String)],
    ) -> Result<Topology, TopologyError> {
        let expanded;
        let p = match generate::expand(source_name, text, overrides)? {
            None => Parser {
                source_name,
                text,
                skip_lines: 0,
            },
            Some(e) => {
                expanded = format!("{}{text}\n{}", e.first_line, e.tables);
                Parser {
                    source_name,
                    text: &expanded,
                    skip_lines: 1,
                }
            }
        };
        let raw: RawTopology = Self::deserialize(&p)?;
        let regions = raw.regions.get_ref().clone();
        if regions.is_empty() {
            return Err(p.error(
                Some(raw.regions.span()),
                "regions",
                "at least one region is required",
            ));
        }
        if regions.len() > usize::from(u16::MAX) {
            return Err(p.error(Some(raw.regions.span()), "regions", "too many regions"));
        }
        for (i, r) in regions.iter().enumerate() {
            if regions[..i].contains(r) {
                return Err(p.error(
                    Some(raw.regions.span()),
                    "regions",
                    format!("region `{r}` listed twice"),
                ));
            }
        }
        let one_way_ms = Self::parse_latency(&p, &raw, &regions)?;
        let jitter_ms = match &raw.jitter_ms {
            Some(j) => p.non_negative(j, "jitter_ms")?,
            None => 0.0,
        };
        let shards = Self::parse_shards(&p, &raw, &regions)?;
        let mut coordinators = Vec::new();
        let mut coordinators_colocated = Vec::new();
        for c in raw.coordinators.get_ref() {
            let region = p.region(&regions, &c.region, "coordinators.region")?;
            coordinators.extend(std::iter::repeat_n(region, *c.count.get_ref() as usize));
            coordinators_colocated.extend(std::iter::repeat_n(
                c.colocated,
                *c.count.get_ref() as usize,
            ));
        }
        let machines = Self::parse_machines(&p, &raw, &regions)?;
        for (c, colocated) in raw
            .coordinators
            .get_ref()
            .iter()
            .zip(&coordinators_colocated)
        {
            let region = p.region(&regions, &c.region, "coordinators.region")?;
            if *colocated && machines[region.index()].is_none() {
                return Err(p.error(
                    Some(c.region.span()),
                    "coordinators.colocated",
                    format!(
                        "region `{}` declares no machines to colocate on (add `[machines] {} = N`)",
                        c.region.get_ref(),
                        c.region.get_ref()
                    ),
                ));
            }
        }
        let services = Self::parse_services(&p, &raw, &regions, &shards)?;
        if coordinators.is_empty() {
            return Err(p.error(
                Some(raw.coordinators.span()),
                "coordinators",
                "at least one coordinator is required",
            ));
        }
        let runtime = raw.runtime.unwrap_or_default();
        runtime
            .validate(&regions)
            .map_err(|(field, message)| p.error(None, &field, message))?;
        let mut topology = Topology {
            name: raw.name,
            description: raw.description,
            regions,
            one_way_ms,
            jitter_ms,
            shards,
            coordinators,
            coordinators_colocated,
            machines,
            services,
            default_clock: ClockProfile::builtin("perfect").expect("builtin"),
            clock_overrides: Vec::new(),
            clock_steps: Vec::new(),
            custom_clocks: BTreeMap::new(),
            runtime,
        };
        if let Some(clocks) = &raw.clocks {
            topology.parse_clocks(&p, clocks)?;
        }
        Ok(topology)
    }

    fn parse_latency(
        p: &Parser<'_>,
        raw: &RawTopology,
        regions: &[String],
    ) -> Result<Vec<Vec<f64>>, TopologyError> {
        let n = regions.len();
        let intra = p.non_negative(&raw.intra_region_rtt_ms, "intra_region_rtt_ms")? / 2.0;
        let mut one_way = vec![vec![f64::NAN; n]; n];
        for (i, row) in one_way.iter_mut().enumerate() {
            row[i] = intra;
        }
        for rtt in &raw.rtt {
            let [a, b] = rtt.between.get_ref();
            let a = p.region(regions, a, "rtt.between")?;
            let b = p.region(regions, b, "rtt.between")?;
            if a == b {
                return Err(p.error(
                    Some(rtt.between.span()),
                    "rtt.between",
                    "names the same region twice",
                ));
            }
            if !one_way[a.index()][b.index()].is_nan() {
                return Err(p.error(
                    Some(rtt.between.span()),
                    "rtt.between",
                    format!(
                        "{} and {} are given twice",
                        regions[a.index()],
                        regions[b.index()]
                    ),
                ));
            }
            let ms = p.non_negative(&rtt.ms, "rtt.ms")?;
            let (ab, ba) = match &rtt.one_way_ms {
                None => (ms / 2.0, ms / 2.0),
                Some(split) => {
                    let [ab, ba] = *split.get_ref();
                    if ab < 0.0 || ba < 0.0 || (ab + ba - ms).abs() > 1e-6 {
                        return Err(p.error(
                            Some(split.span()),
                            "rtt.one_way_ms",
                            format!("must be two non-negative delays summing to ms = {ms}"),
                        ));
                    }
                    (ab, ba)
                }
            };
            one_way[a.index()][b.index()] = ab;
            one_way[b.index()][a.index()] = ba;
        }
        for a in 0..n {
            for b in 0..n {
                if one_way[a][b].is_nan() {
                    return Err(p.error(
                        None,
                        "rtt",
                        format!(
                            "no round-trip time between `{}` and `{}`",
                            regions[a], regions[b]
                        ),
                    ));
                }
            }
        }
        Ok(one_way)
    }

    fn parse_shards(
        p: &Parser<'_>,
        raw: &RawTopology,
        regions: &[String],
    ) -> Result<Vec<ShardPlacement>, TopologyError> {
        let mut shards = Vec::new();
        for spec in raw.shards.get_ref() {
            if spec.replicas.get_ref().is_empty() {
                return Err(p.error(
                    Some(spec.replicas.span()),
                    "shards.replicas",
                    "a shard needs at least one replica",
                ));
            }
            let replicas = spec
                .replicas
                .get_ref()
                .iter()
                .map(|r| p.region(regions, r, "shards.replicas"))
                .collect::<Result<Vec<_>, _>>()?;
            let leader = match &spec.leader {
                None => ReplicaId(0),
                Some(name) => {
                    let region = p.region(regions, name, "shards.leader")?;
                    let index = replicas.iter().position(|r| *r == region).ok_or_else(|| {
                        p.error(
                            Some(name.span()),
                            "shards.leader",
                            format!("`{}` holds no replica of this shard", name.get_ref()),
                        )
                    })?;
                    ReplicaId(index as u32)
                }
            };
            if *spec.count.get_ref() == 0 {
                return Err(p.error(
                    Some(spec.count.span()),
                    "shards.count",
                    "must be at least 1",
                ));
            }
            let kinds = Self::parse_kinds(p, spec, replicas.len(), leader)?;
            for _ in 0..*spec.count.get_ref() {
                shards.push(ShardPlacement {
                    replicas: replicas.clone(),
                    kinds: kinds.clone(),
                    leader,
                });
            }
        }
        if shards.is_empty() {
            return Err(p.error(
                Some(raw.shards.span()),
                "shards",
                "at least one shard is required",
            ));
        }
        Ok(shards)
    }

    /// A shard entry's replica kinds: one per replica, the leader a voter.
    fn parse_kinds(
        p: &Parser<'_>,
        spec: &RawShards,
        replicas: usize,
        leader: ReplicaId,
    ) -> Result<Vec<ReplicaKind>, TopologyError> {
        let Some(kinds) = &spec.kinds else {
            return Ok(vec![ReplicaKind::Voter; replicas]);
        };
        let error = |message: String| p.error(Some(kinds.span()), "shards.kinds", message);
        if kinds.get_ref().len() != replicas {
            return Err(error(format!(
                "gives {} kinds for {replicas} replicas (one per replica)",
                kinds.get_ref().len()
            )));
        }
        if kinds.get_ref()[leader.index()] != ReplicaKind::Voter {
            return Err(error(format!(
                "the leader (replica {}) must be a voter",
                leader.0
            )));
        }
        Ok(kinds.get_ref().clone())
    }

    fn parse_machines(
        p: &Parser<'_>,
        raw: &RawTopology,
        regions: &[String],
    ) -> Result<Vec<Option<u32>>, TopologyError> {
        let mut machines = vec![None; regions.len()];
        for (name, count) in &raw.machines {
            let region = p.region(
                regions,
                &Spanned::new(count.span(), name.clone()),
                "machines",
            )?;
            if *count.get_ref() == 0 {
                return Err(p.error(
                    Some(count.span()),
                    &format!("machines.{name}"),
                    "must be at least 1",
                ));
            }
            machines[region.index()] = Some(*count.get_ref());
        }
        Ok(machines)
    }

    fn parse_services(
        p: &Parser<'_>,
        raw: &RawTopology,
        regions: &[String],
        shards: &[ShardPlacement],
    ) -> Result<Vec<ServicePlacement>, TopologyError> {
        let mut services: Vec<ServicePlacement> = Vec::new();
        for spec in &raw.services {
            let name = spec.name.get_ref().clone();
            let error = |message: String| p.error(Some(spec.name.span()), "services", message);
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(error(format!(
                    "service name `{name}` must be letters, digits and dashes"
                )));
            }
            if services.iter().any(|s| s.name == name) {
                return Err(error(format!("service `{name}` is placed twice")));
            }
            let count = |n: &Spanned<u32>| *n.get_ref() as usize;
            let members = match (&spec.per_region, &spec.per_shard, spec.regions.is_empty()) {
                (Some(n), None, true) if count(n) > 0 => (0..regions.len())
                    .flat_map(|r| std::iter::repeat_n(RegionId(r as u16), count(n)))
                    .collect(),
                // Beside each shard's leader (a per-shard sequencer or recorder group).
                (None, Some(n), true) if count(n) > 0 => shards
                    .iter()
                    .flat_map(|s| std::iter::repeat_n(s.replicas[s.leader.index()], count(n)))
                    .collect(),
                (None, None, false) => spec
                    .regions
                    .iter()
                    .map(|r| p.region(regions, r, "services.regions"))
                    .collect::<Result<Vec<_>, _>>()?,
                _ => {
                    return Err(error(format!(
                        "service `{name}` needs exactly one of `regions` (non-empty), `per_region` or `per_shard` (at least 1)"
                    )))
                }
            };
            services.push(ServicePlacement {
                name,
                regions: members,
            });
        }
        Ok(services)
    }

    fn profile(
        p: &Parser<'_>,
        custom: &BTreeMap<String, ClockParams>,
        name: &Spanned<String>,
        field: &str,
    ) -> Result<ClockProfile, TopologyError> {
        let n = name.get_ref();
        if let Some(params) = custom.get(n) {
            return Ok(ClockProfile {
                name: n.clone(),
                params: params.clone(),
            });
        }
        ClockProfile::builtin(n).ok_or_else(|| {
            p.error(
                Some(name.span()),
                field,
                format!(
                    "unknown clock profile `{n}` (built in: {}; or define [clocks.custom.{n}])",
                    ClockProfile::BUILTIN_NAMES.join(", ")
                ),
            )
        })
    }

    fn selector(
        p: &Parser<'_>,
        regions: &[String],
        region: &Option<Spanned<String>>,
        node: &Option<Spanned<String>>,
        field: &str,
    ) -> Result<NodeSelector, TopologyError> {
        match (region, node) {
            (Some(r), None) => Ok(NodeSelector::Region(p.region(
                regions,
                r,
                &format!("{field}.region"),
            )?)),
            (None, Some(n)) => Ok(NodeSelector::Node(n.get_ref().clone())),
            _ => Err(p.error(
                None,
                field,
                "each entry names exactly one of `region` or `node`",
            )),
        }
    }

    /// What a profile's `model` cannot work with, if anything.
    fn clock_kind_problem(params: &ClockParams) -> Option<&'static str> {
        let kind = params.model;
        if kind != ClockKind::Offset && (params.truetime || params.steps_per_minute > 0.0) {
            return Some("`truetime` and `steps_per_minute` belong to model = \"offset\"");
        }
        if kind != ClockKind::Offset && params.error_bound_ms.is_some() {
            return Some(
                "`error_bound_ms` belongs to model = \"offset\" (the others are not clipped)",
            );
        }
        if kind == ClockKind::TwoLClock && params.cpu_sync_ms <= 0.0 {
            return Some("model = \"2lclock\" needs a positive `cpu_sync_ms`");
        }
        None
    }

    fn parse_clocks(&mut self, p: &Parser<'_>, clocks: &RawClocks) -> Result<(), TopologyError> {
        for (name, params) in &clocks.custom {
            let bad = |v: f64| !v.is_finite() || v < 0.0;
            if bad(params.error_ms)
                || bad(params.drift_ppm)
                || bad(params.steps_per_minute)
                || params.resync_ms <= 0.0
                || params.error_bound_ms.is_some_and(bad)
                || [
                    params.cpu_sync_ms,
                    params.cpu_error_ms,
                    params.interference_ms,
                    params.virtual_ms,
                    params.smoothing_ms,
                ]
                .into_iter()
                .any(bad)
                || !(0.0..=1.0).contains(&params.interference_rate)
            {
                return Err(p.error(
                    None,
                    &format!("clocks.custom.{name}"),
                    "parameters must be non-negative (resync_ms positive, interference_rate \
                     at most 1)",
                ));
            }
            if let Some(problem) = Self::clock_kind_problem(params) {
                return Err(p.error(None, &format!("clocks.custom.{name}"), problem));
            }
            self.custom_clocks.insert(name.clone(), params.clone());
        }
        if let Some(name) = &clocks.profile {
            self.default_clock = Self::profile(p, &clocks.custom, name, "clocks.profile")?;
        }
        for o in &clocks.overrides {
            let selector = match &o.service {
                Some(service) if o.region.is_none() && o.node.is_none() => {
                    NodeSelector::Service(service.get_ref().clone())
                }
                Some(_) => {
                    return Err(p.error(
                        None,
                        "clocks.overrides",
                        "each entry names exactly one of `region`, `node` or `service`",
                    ))
                }
                None => Self::selector(p, &self.regions, &o.region, &o.node, "clocks.overrides")?,
            };
            self.clock_overrides.push((
                selector,
                Self::profile(p, &clocks.custom, &o.profile, "clocks.overrides.profile")?,
            ));
        }
        for s in &clocks.steps {
            let selector = Self::selector(p, &self.regions, &s.region, &s.node, "clocks.steps")?;
            let at_ms = p.non_negative(&s.at_ms, "clocks.steps.at_ms")?;
            let step_ms = *s.step_ms.get_ref();
            if !step_ms.is_finite() {
                return Err(p.error(
                    Some(s.step_ms.span()),
                    "clocks.steps.step_ms",
                    "must be a finite number",
                ));
            }
            self.clock_steps.push((selector, at_ms, step_ms));
        }
        Ok(())
    }

    /// Round-trip time between two regions, in ms.
    pub fn rtt_ms(&self, a: RegionId, b: RegionId) -> f64 {
        self.one_way_ms[a.index()][b.index()] + self.one_way_ms[b.index()][a.index()]
    }

    /// The largest round trip between any two regions (intra-region included), in ms: the
    /// scale protocols' default timeouts take.
    pub fn max_rtt_ms(&self) -> f64 {
        let regions = self.regions.len() as u16;
        (0..regions)
            .flat_map(|a| (0..regions).map(move |b| (RegionId(a), RegionId(b))))
            .map(|(a, b)| self.rtt_ms(a, b))
            .fold(0.0, f64::max)
    }

    /// The largest round trip inside one region, in ms.
    pub fn max_intra_region_rtt_ms(&self) -> f64 {
        (0..self.regions.len() as u16)
            .map(|r| self.rtt_ms(RegionId(r), RegionId(r)))
            .fold(0.0, f64::max)
    }

    pub fn region_id(&self, name: &str) -> Option<RegionId> {
        self.regions
            .iter()
            .position(|r| r == name)
            .map(|i| RegionId(i as u16))
    }

    pub fn region_name(&self, region: RegionId) -> &str {
        &self.regions[region.index()]
    }

    /// A clock profile by name: one of this topology's `[clocks.custom.X]`, else a
    /// built-in one.
    pub fn clock_profile(&self, name: &str) -> Option<ClockProfile> {
        match self.custom_clocks.get(name) {
            Some(params) => Some(ClockProfile {
                name: name.to_string(),
                params: params.clone(),
            }),
            None => ClockProfile::builtin(name),
        }
    }

    /// Sets every node's clock profile (the CLI's `--clock` override).
    pub fn set_all_clocks(&mut self, profile: ClockProfile) {
        self.default_clock = profile;
        self.clock_overrides.clear();
    }
}

/// What a node is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeRole {
    Replica { shard: ShardId, replica: ReplicaId },
    Coordinator { index: u32 },
    Service { name: String, index: u32 },
}

/// A machine: the unit that hosts nodes, fails and keeps time (module doc, "Deployment").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MachineId(pub u32);

impl MachineId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for MachineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

/// One machine of a cluster and the nodes it hosts.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub id: MachineId,
    pub region: RegionId,
    /// Its nodes, in id order; the first names the machine in fault schedules.
    pub nodes: Vec<NodeId>,
}

/// One node of a cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub id: NodeId,
    pub name: String,
    pub role: NodeRole,
    pub region: RegionId,
    pub machine: MachineId,
    pub clock: ClockProfile,
}

/// The nodes of a topology, laid out: replicas shard by shard, then coordinators, then the
/// protocol's services. Node ids are dense indexes into `nodes`.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub topology: Topology,
    pub nodes: Vec<NodeInfo>,
    /// `shards[s][r]`: the node of replica `r` of shard `s`.
    pub shards: Vec<Vec<NodeId>>,
    pub coordinators: Vec<NodeId>,
    /// The machines hosting the nodes, dense by [`MachineId`].
    pub machines: Vec<Machine>,
    pub clock_steps: Vec<ClockStep>,
    pub partitioner: Partitioner,
}

/// Hands out machines while the nodes are laid out: a declared region's machines are
/// created on first use, every other node gets a fresh one. Ids follow first use, so a
/// topology without `[machines]` gives node i machine i.
struct MachineDealer {
    declared: Vec<Option<u32>>,
    /// `region_machines[r][i]`: machine i of declared region r, once used.
    region_machines: Vec<Vec<Option<MachineId>>>,
    /// Replica slots dealt so far per region.
    dealt: Vec<u32>,
    machines: Vec<Machine>,
}

impl MachineDealer {
    fn new(topology: &Topology) -> MachineDealer {
        MachineDealer {
            declared: topology.machines.clone(),
            region_machines: topology
                .machines
                .iter()
                .map(|m| vec![None; m.unwrap_or(0) as usize])
                .collect(),
            dealt: vec![0; topology.regions.len()],
            machines: Vec::new(),
        }
    }

    fn fresh(&mut self, region: RegionId) -> MachineId {
        let id = MachineId(self.machines.len() as u32);
        self.machines.push(Machine {
            id,
            region,
            nodes: Vec::new(),
        });
        id
    }

    /// Machine `i` of declared region `region`.
    fn declared_machine(&mut self, region: RegionId, i: u32) -> MachineId {
        let count = self.declared[region.index()].expect("declared region");
        let slot = (i % count) as usize;
        match self.region_machines[region.index()][slot] {
            Some(id) => id,
            None => {
                let id = self.fresh(region);
                self.region_machines[region.index()][slot] = Some(id);
                id
            }
        }
    }

    /// The next replica slot of `region`: round-robin over its machines if it declares some.
    fn replica(&mut self, region: RegionId) -> MachineId {
        if self.declared[region.index()].is_none() {
            return self.fresh(region);
        }
        let i = self.dealt[region.index()];
        self.dealt[region.index()] += 1;
        self.declared_machine(region, i)
    }
}

impl Cluster {
    /// Lays out `topology` with the given protocol services (name, region): the protocol's
    /// default placement, replaced for each service the topology places itself.
    pub fn new(
        topology: Topology,
        services: &[(String, RegionId)],
    ) -> Result<Cluster, TopologyError> {
        let services = Self::place_services(&topology, services)?;
        let mut nodes: Vec<NodeInfo> = Vec::new();
        let mut dealer = MachineDealer::new(&topology);
        let push = |nodes: &mut Vec<NodeInfo>,
                    name: String,
                    role: NodeRole,
                    region: RegionId,
                    machine: MachineId| {
            let id = NodeId(nodes.len() as u32);
            nodes.push(NodeInfo {
                id,
                name,
                role,
                region,
                machine,
                clock: topology.default_clock.clone(),
            });
            id
        };
        let mut shards = Vec::new();
        for (s, placement) in topology.shards.iter().enumerate() {
            let mut replicas = Vec::new();
            for (r, region) in placement.replicas.iter().enumerate() {
                let role = NodeRole::Replica {
                    shard: ShardId(s as u32),
                    replica: ReplicaId(r as u32),
                };
                let machine = dealer.replica(*region);
                let node = push(
                    &mut nodes,
                    format!("shard{s}/replica{r}"),
                    role,
                    *region,
                    machine,
                );
                replicas.push(node);
            }
            shards.push(replicas);
        }
        let mut colocated_in_region = vec![0u32; topology.regions.len()];
        let mut coordinators = Vec::new();
        for (i, region) in topology.coordinators.iter().enumerate() {
            let machine = if topology.coordinators_colocated[i] {
                let j = colocated_in_region[region.index()];
                colocated_in_region[region.index()] += 1;
                dealer.declared_machine(*region, j)
            } else {
                dealer.fresh(*region)
            };
            let role = NodeRole::Coordinator { index: i as u32 };
            coordinators.push(push(
                &mut nodes,
                format!("coord{i}"),
                role,
                *region,
                machine,
            ));
        }
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for (name, region) in &services {
            let index = counts.entry(name).or_default();
            let machine = dealer.fresh(*region);
            let role = NodeRole::Service {
                name: name.clone(),
                index: *index,
            };
            push(&mut nodes, format!("{name}{index}"), role, *region, machine);
            *index += 1;
        }
        let mut machines = dealer.machines;
        for n in &nodes {
            machines[n.machine.index()].nodes.push(n.id);
        }
        let mut cluster = Cluster {
            partitioner: Partitioner::new(shards.len() as u32),
            topology,
            nodes,
            shards,
            coordinators,
            machines,
            clock_steps: Vec::new(),
        };
        cluster.check_replicas_apart()?;
        cluster.apply_clocks()?;
        Ok(cluster)
    }

    /// The layout without any service: what a protocol's [`crate::Protocol::services`] is
    /// shown to choose its services' default placement, and what clients need (services
    /// come last, so every other node id is the same).
    pub fn without_services(topology: &Topology) -> Result<Cluster, TopologyError> {
        let mut plain = topology.clone();
        plain.services.clear();
        Cluster::new(plain, &[])
    }

    /// The protocol's services with the topology's placements substituted. A placement
    /// for a service the protocol does not run is ignored, not refused: a deployment file
    /// (DAST's regions with their managers) must also run the protocols compared on it
    /// (Janus, Tapir), and no idle node is created for it.
    fn place_services(
        topology: &Topology,
        defaults: &[(String, RegionId)],
    ) -> Result<Vec<(String, RegionId)>, TopologyError> {
        let mut out: Vec<(String, RegionId)> = Vec::new();
        for (name, region) in defaults {
            match topology.services.iter().find(|s| s.name == *name) {
                Some(placed) if !out.iter().any(|(n, _)| n == name) => {
                    out.extend(placed.regions.iter().map(|r| (name.clone(), *r)))
                }
                Some(_) => {}
                None => out.push((name.clone(), *region)),
            }
        }
        Ok(out)
    }

    /// No machine holds two replicas of one shard: one machine failure would then take
    /// out more of the shard than its placement says.
    fn check_replicas_apart(&self) -> Result<(), TopologyError> {
        for (s, replicas) in self.shards.iter().enumerate() {
            for (i, a) in replicas.iter().enumerate() {
                if let Some(b) = replicas[..i]
                    .iter()
                    .find(|b| self.machine_of(**b) == self.machine_of(*a))
                {
                    let region = self.topology.region_name(self.region_of(*a));
                    return Err(TopologyError {
                        source_name: self.topology.name.clone(),
                        line: None,
                        field: format!("machines.{region}"),
                        message: format!(
                            "too few machines: {} and {} of shard {s} would share machine {}",
                            self.node(*b).name,
                            self.node(*a).name,
                            self.machine_of(*a)
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    fn select(&self, selector: &NodeSelector, field: &str) -> Result<Vec<NodeId>, TopologyError> {
        match selector {
            NodeSelector::Region(r) => Ok(self
                .nodes
                .iter()
                .filter(|n| n.region == *r)
                .map(|n| n.id)
                .collect()),
            NodeSelector::Service(service) => Ok(self.services(service)),
            NodeSelector::Node(name) => {
                self.node_by_name(name)
                    .map(|n| vec![n])
                    .ok_or_else(|| TopologyError {
                        source_name: self.topology.name.clone(),
                        line: None,
                        field: field.to_string(),
                        message: format!(
                            "unknown node `{name}` (names look like shard0/replica1, coord3)"
                        ),
                    })
            }
        }
    }

    fn apply_clocks(&mut self) -> Result<(), TopologyError> {
        for (selector, profile) in self.topology.clock_overrides.clone() {
            for node in self.select(&selector, "clocks.overrides.node")? {
                self.nodes[node.index()].clock = profile.clone();
            }
        }
        for (selector, at_ms, step_ms) in self.topology.clock_steps.clone() {
            for node in self.select(&selector, "clocks.steps.node")? {
                self.clock_steps.push(ClockStep {
                    node,
                    at_ms,
                    step_ms,
                });
            }
        }
        self.check_one_clock_per_machine()
    }

    /// A machine has one clock: its nodes must not be given different profiles.
    fn check_one_clock_per_machine(&self) -> Result<(), TopologyError> {
        for machine in &self.machines {
            let first = self.node(machine.nodes[0]);
            if let Some(other) = machine.nodes[1..]
                .iter()
                .map(|n| self.node(*n))
                .find(|n| n.clock != first.clock)
            {
                return Err(TopologyError {
                    source_name: self.topology.name.clone(),
                    line: None,
                    field: "clocks.overrides".to_string(),
                    message: format!(
                        "{} and {} share machine {} but are given different clocks ({} and {})",
                        first.name, other.name, machine.id, first.clock.name, other.clock.name
                    ),
                });
            }
        }
        Ok(())
    }

    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().find(|n| n.name == name).map(|n| n.id)
    }

    pub fn node(&self, id: NodeId) -> &NodeInfo {
        &self.nodes[id.index()]
    }

    pub fn region_of(&self, id: NodeId) -> RegionId {
        self.nodes[id.index()].region
    }

    /// The machine hosting `id`.
    pub fn machine_of(&self, id: NodeId) -> MachineId {
        self.nodes[id.index()].machine
    }

    /// Whether two nodes share a machine (their messages cost nothing).
    pub fn colocated(&self, a: NodeId, b: NodeId) -> bool {
        self.machine_of(a) == self.machine_of(b)
    }

    /// The nodes on `id`'s machine, `id` included.
    pub fn machine_mates(&self, id: NodeId) -> &[NodeId] {
        &self.machines[self.machine_of(id).index()].nodes
    }

    /// The kind of replica `node` is; None for a coordinator or a service.
    pub fn replica_kind(&self, node: NodeId) -> Option<ReplicaKind> {
        match self.node(node).role {
            NodeRole::Replica { shard, replica } => {
                Some(self.topology.shards[shard.index()].kinds[replica.index()])
            }
            _ => None,
        }
    }

    /// The voting replicas of `shard`, in replica order.
    pub fn voters(&self, shard: ShardId) -> Vec<NodeId> {
        self.replicas(shard)
            .iter()
            .copied()
            .filter(|n| self.replica_kind(*n) == Some(ReplicaKind::Voter))
            .collect()
    }

    /// Every replica kind the topology uses.
    pub fn replica_kinds(&self) -> Vec<ReplicaKind> {
        let mut kinds: Vec<ReplicaKind> = self
            .topology
            .shards
            .iter()
            .flat_map(|s| s.kinds.iter().copied())
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    pub fn shard_count(&self) -> u32 {
        self.shards.len() as u32
    }

    pub fn replicas(&self, shard: ShardId) -> &[NodeId] {
        &self.shards[shard.index()]
    }

    /// The shard `node` is a replica of; None for a coordinator or a service.
    pub fn shard_of_node(&self, node: NodeId) -> Option<ShardId> {
        match self.node(node).role {
            NodeRole::Replica { shard, .. } => Some(shard),
            _ => None,
        }
    }

    /// The initial leader of `shard`.
    pub fn initial_leader(&self, shard: ShardId) -> NodeId {
        self.shards[shard.index()][self.topology.shards[shard.index()].leader.index()]
    }

    /// Tolerated failures per shard: f with 2f + 1 voting replicas.
    pub fn f(&self, shard: ShardId) -> usize {
        let kinds = &self.topology.shards[shard.index()].kinds;
        let voters = kinds.iter().filter(|k| **k == ReplicaKind::Voter).count();
        (voters.max(1) - 1) / 2
    }

    /// Nodes of a role kind named `service`.
    pub fn services(&self, service: &str) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| matches!(&n.role, NodeRole::Service { name, .. } if name == service))
            .map(|n| n.id)
            .collect()
    }

    /// Mean one-way delay between two nodes in ms (from their regions).
    pub fn one_way_ms(&self, from: NodeId, to: NodeId) -> f64 {
        self.topology.one_way_ms[self.region_of(from).index()][self.region_of(to).index()]
    }

    pub fn rtt_ms(&self, a: NodeId, b: NodeId) -> f64 {
        self.one_way_ms(a, b) + self.one_way_ms(b, a)
    }
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.nodes {
            writeln!(
                f,
                "{:>4} {:<18} {:<6} {:<5} clock={}",
                n.id,
                n.name,
                self.topology.region_name(n.region),
                n.machine,
                n.clock.name
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
regions = ["A", "B"]
intra_region_rtt_ms = 1.0
[[rtt]]
between = ["A", "B"]
ms = 100.0
[[shards]]
count = 2
replicas = ["A", "B", "B"]
leader = "B"
[[coordinators]]
region = "A"
count = 2
"#;

    /// `[runtime.hosts]` gives a region its address; an unknown region and a wildcard
    /// address (which peers cannot dial) are refused with the field named.
    #[test]
    fn runtime_hosts_override_per_region_and_are_validated() {
        let with = |runtime: &str| Topology::parse("t", &format!("{MINIMAL}\n{runtime}"));
        let t =
            with("[runtime]\nhost = \"127.0.0.1\"\n[runtime.hosts]\nB = \"127.0.0.3\"\n").unwrap();
        assert_eq!(t.runtime.host_of("A"), "127.0.0.1");
        assert_eq!(t.runtime.host_of("B"), "127.0.0.3");
        assert_eq!(t.runtime.listen_of("B"), "127.0.0.3");
        let t = with("[runtime]\nlisten = \"0.0.0.0\"\n").unwrap();
        assert_eq!(t.runtime.listen_of("A"), "0.0.0.0");
        let unknown = with("[runtime.hosts]\nC = \"127.0.0.3\"\n").unwrap_err();
        assert_eq!(unknown.field, "runtime.hosts.C");
        assert!(unknown.message.contains("unknown region `C`"), "{unknown}");
        let wildcard = with("[runtime.hosts]\nA = \"0.0.0.0\"\n").unwrap_err();
        assert!(wildcard.message.contains("listen"), "{wildcard}");
        let empty = with("[runtime]\nhost = \"\"\n").unwrap_err();
        assert_eq!(empty.field, "runtime.host");
    }

    #[test]
    fn bundled_topologies_parse_and_lay_out() {
        for (name, text) in BUNDLED {
            let topology = Topology::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            let cluster = Cluster::new(topology, &[]).unwrap();
            assert!(!cluster.coordinators.is_empty());
        }
        let gcp = Cluster::new(Topology::load("gcp-tiga").unwrap(), &[]).unwrap();
        let sc = gcp.topology.region_id("SC").unwrap();
        let hk = gcp.topology.region_id("HK").unwrap();
        assert_eq!(gcp.topology.rtt_ms(sc, hk), 201.0);
        assert_eq!(gcp.shards.len(), 3);
        assert!(gcp.shards.iter().all(|s| s.len() == 3));
        assert_eq!(gcp.coordinators.len(), 8);
    }

    #[test]
    fn layout_orders_replicas_then_coordinators_then_services() {
        let topology = Topology::parse("t", MINIMAL).unwrap();
        let a = topology.region_id("A").unwrap();
        let cluster = Cluster::new(topology, &[("vm".to_string(), a)]).unwrap();
        assert_eq!(cluster.nodes.len(), 2 * 3 + 2 + 1);
        assert_eq!(cluster.initial_leader(ShardId(1)), NodeId(4));
        assert_eq!(cluster.coordinators, vec![NodeId(6), NodeId(7)]);
        assert_eq!(cluster.node_by_name("vm0"), Some(NodeId(8)));
        assert_eq!(cluster.f(ShardId(0)), 1);
        assert_eq!(cluster.rtt_ms(NodeId(0), NodeId(1)), 100.0);
        assert_eq!(cluster.rtt_ms(NodeId(1), NodeId(2)), 1.0);
    }

    fn error_of(text: &str) -> TopologyError {
        Topology::parse("bad.toml", text)
            .and_then(|t| Cluster::new(t, &[]).map(|_| ()))
            .map(|_| ())
            .unwrap_err_or_panic()
    }

    trait UnwrapErr {
        fn unwrap_err_or_panic(self) -> TopologyError;
    }
    impl UnwrapErr for Result<(), TopologyError> {
        fn unwrap_err_or_panic(self) -> TopologyError {
            match self {
                Ok(()) => panic!("expected an error"),
                Err(e) => e,
            }
        }
    }

    #[test]
    fn errors_name_the_field_and_line() {
        let e = error_of(&MINIMAL.replace("leader = \"B\"", "leader = \"C\""));
        assert_eq!(e.field, "shards.leader");
        assert_eq!(e.line, Some(11));
        assert!(e.to_string().contains("unknown region `C`"), "{e}");

        let e = error_of(&MINIMAL.replace("ms = 100.0", "ms = -3.0"));
        assert_eq!((e.field.as_str(), e.line), ("rtt.ms", Some(7)));

        let e = error_of(&MINIMAL.replace("[[rtt]]\nbetween = [\"A\", \"B\"]\nms = 100.0\n", ""));
        assert_eq!(e.field, "rtt");
        assert!(e.message.contains("between `A` and `B`"), "{e}");

        let e = error_of(&MINIMAL.replace("intra_region_rtt_ms = 1.0\n", ""));
        assert!(e.message.contains("intra_region_rtt_ms"), "{e}");

        let e = error_of(&MINIMAL.replace("count = 2\nreplicas", "count = \"two\"\nreplicas"));
        assert_eq!(e.field, "shards[0].count", "{e}");
        assert!(e.line.is_some(), "{e}");

        let e = error_of(&format!("{MINIMAL}\n[clocks]\nprofile = \"sundial\"\n"));
        assert_eq!(e.field, "clocks.profile");
        assert!(e.message.contains("sundial"));

        let e = error_of(&format!(
            "{MINIMAL}\n[clocks]\nsteps = [{{ node = \"coord9\", at_ms = 1.0, step_ms = 2.0 }}]\n"
        ));
        assert!(e.message.contains("coord9"), "{e}");

        let e = error_of("this is not toml");
        assert_eq!(e.line, Some(1));
        let e = error_of(&format!("{MINIMAL}\nsurprise = 1\n"));
        assert!(e.message.contains("surprise"), "{e}");
    }

    #[test]
    fn clocks_apply_by_region_node_and_custom_profile() {
        let text = format!(
            "{MINIMAL}\n[clocks]\nprofile = \"chrony\"\noverrides = [{{ region = \"B\", profile = \"bad\" }}, {{ node = \"coord1\", profile = \"mine\" }}]\nsteps = [{{ node = \"coord0\", at_ms = 10.0, step_ms = -5.0 }}]\n[clocks.custom.mine]\nerror_ms = 1.0\nerror_bound_ms = 2.0\n"
        );
        let cluster = Cluster::new(Topology::parse("t", &text).unwrap(), &[]).unwrap();
        assert_eq!(cluster.node(NodeId(0)).clock.name, "chrony");
        assert_eq!(cluster.node(NodeId(1)).clock.name, "bad");
        assert_eq!(
            cluster.node(NodeId(7)).clock.params.error_bound_ms,
            Some(2.0)
        );
        assert_eq!(
            cluster.clock_steps,
            vec![ClockStep {
                node: NodeId(6),
                at_ms: 10.0,
                step_ms: -5.0
            }]
        );
    }

    #[test]
    fn clock_model_kinds_parse_and_refuse_what_they_cannot_use() {
        let custom =
            |body: &str| format!("{MINIMAL}\n[clocks.custom.c]\nerror_ms = 0.00005\n{body}");
        let text = custom("model = \"2lclock\"\ncpu_sync_ms = 1.0\nvirtual_ms = 2100.0\n");
        let topology = Topology::parse("t", &text).unwrap();
        let params = topology.clock_profile("c").unwrap().params;
        assert_eq!(params.model, ClockKind::TwoLClock);
        assert_eq!((params.cpu_sync_ms, params.virtual_ms), (1.0, 2100.0));
        assert_eq!(topology.clock_profile("chrony").unwrap().name, "chrony");
        assert!(topology.clock_profile("nope").is_none());

        let e = error_of(&custom("model = \"2lclock\"\n"));
        assert!(e.message.contains("cpu_sync_ms"), "{e}");
        let e = error_of(&custom("model = \"dst\"\nerror_bound_ms = 1.0\n"));
        assert!(e.message.contains("error_bound_ms"), "{e}");
        let e = error_of(&custom("model = \"farmv2\"\ninterference_rate = 2.0\n"));
        assert!(e.message.contains("interference_rate"), "{e}");
        let e = error_of(&custom("model = \"huygens2\"\n"));
        assert!(e.to_string().contains("huygens2"), "{e}");
    }

    fn cluster_of(text: &str, services: &[(String, RegionId)]) -> Result<Cluster, TopologyError> {
        Cluster::new(Topology::parse("t.toml", text)?, services)
    }

    /// Aurogon's layout: five machines, each a coordinator, one shard's primary and
    /// another's backup; no machine holds both copies of a shard.
    #[test]
    fn rdma_cluster_puts_a_coordinator_a_primary_and_a_backup_on_every_machine() {
        let c = Cluster::new(Topology::load("rdma-cluster").unwrap(), &[]).unwrap();
        assert_eq!(c.machines.len(), 5);
        for m in &c.machines {
            let kinds: Vec<Option<ReplicaKind>> =
                m.nodes.iter().map(|n| c.replica_kind(*n)).collect();
            assert_eq!(m.nodes.len(), 3, "{m:?}");
            assert!(kinds.contains(&Some(ReplicaKind::Voter)));
            assert!(kinds.contains(&Some(ReplicaKind::Backup)));
            assert!(kinds.contains(&None), "a coordinator");
        }
        for s in 0..5 {
            let r = c.replicas(ShardId(s));
            assert!(!c.colocated(r[0], r[1]));
        }
        assert_eq!(c.voters(ShardId(0)).len(), 1);
        assert_eq!(c.f(ShardId(0)), 0);
        assert!(c.topology.rtt_ms(RegionId(0), RegionId(0)) < 0.01);
    }

    /// DAST's and K2's layouts: every coordinator shares a machine with replicas of its
    /// region; K2's shards keep a voter at home and read replicas elsewhere.
    #[test]
    fn edge_and_k2_layouts_colocate_coordinators_with_replicas() {
        let sc = RegionId(0);
        let services: Vec<(String, RegionId)> = vec![("manager".to_string(), sc)];
        let edge = Cluster::new(Topology::load("edge-regions").unwrap(), &services).unwrap();
        assert_eq!(edge.machines.len(), 10 * 6 + 10 * 3);
        let managers = edge.services("manager");
        assert_eq!(
            managers.len(),
            30,
            "per_region = 3 replaces the default placement"
        );
        assert!(managers.iter().all(|m| edge.machine_mates(*m).len() == 1));
        for &c in &edge.coordinators {
            let mates = edge.machine_mates(c);
            assert_eq!(mates.len(), 2, "a coordinator and one replica");
            assert!(mates
                .iter()
                .all(|n| edge.region_of(*n) == edge.region_of(c)));
        }
        let plain = Cluster::new(Topology::load("edge-regions").unwrap(), &[]).unwrap();
        assert!(
            plain.services("manager").is_empty(),
            "no idle nodes for a service not run"
        );

        let k2 = Cluster::new(Topology::load("k2-five-regions").unwrap(), &[]).unwrap();
        assert_eq!(k2.machines.len(), 25);
        assert_eq!(k2.voters(ShardId(7)).len(), 1);
        assert_eq!(k2.replicas(ShardId(7)).len(), 5);
        assert_eq!(
            k2.replica_kinds(),
            vec![ReplicaKind::Voter, ReplicaKind::ReadReplica]
        );
        assert!(k2.machines.iter().all(|m| m.nodes.len() == 5 + 1));
    }

    #[test]
    fn deployment_errors_name_the_field() {
        let two_machines =
            MINIMAL.replace("[[coordinators]]", "[machines]\nB = 1\n\n[[coordinators]]");
        let e = cluster_of(&two_machines, &[]).unwrap_err();
        assert_eq!(e.field, "machines.B", "{e}");
        assert!(e.message.contains("share machine"), "{e}");

        let colocated = MINIMAL.replace("count = 2\n\"", "count = 2\ncolocated = true\n\"");
        let colocated = colocated.replace(
            "region = \"A\"\ncount = 2",
            "region = \"A\"\ncount = 2\ncolocated = true",
        );
        let e = cluster_of(&colocated, &[]).unwrap_err();
        assert_eq!(e.field, "coordinators.colocated", "{e}");

        let kinds = MINIMAL.replace(
            "leader = \"B\"",
            "leader = \"B\"\nkinds = [\"voter\", \"backup\"]",
        );
        assert!(cluster_of(&kinds, &[])
            .unwrap_err()
            .message
            .contains("2 kinds for 3"));
        let kinds = MINIMAL.replace(
            "leader = \"B\"",
            "leader = \"B\"\nkinds = [\"voter\", \"backup\", \"voter\"]",
        );
        assert!(cluster_of(&kinds, &[])
            .unwrap_err()
            .message
            .contains("must be a voter"));
        let kinds = MINIMAL.replace(
            "leader = \"B\"",
            "leader = \"B\"\nkinds = [\"voter\", \"voter\", \"witness\"]",
        );
        assert_eq!(
            cluster_of(&kinds, &[]).unwrap_err().field,
            "shards[0].kinds[2]"
        );

        let service = format!("{MINIMAL}\n[[services]]\nname = \"vm\"\n");
        assert!(cluster_of(&service, &[])
            .unwrap_err()
            .message
            .contains("exactly one of"));
        let service = format!("{MINIMAL}\n[[services]]\nname = \"vm\"\nregions = [\"Z\"]\n");
        assert_eq!(
            cluster_of(&service, &[]).unwrap_err().field,
            "services.regions"
        );
    }

    /// A service the topology places runs where it says; colocated nodes share one clock
    /// profile or the file is refused.
    #[test]
    fn service_placements_replace_defaults_and_machines_share_a_clock() {
        let a = RegionId(0);
        let per_shard = format!("{MINIMAL}\n[[services]]\nname = \"rec\"\nper_shard = 2\n");
        let c = cluster_of(&per_shard, &[("rec".to_string(), a)]).unwrap();
        let recorders = c.services("rec");
        assert_eq!(
            recorders.len(),
            4,
            "two beside each of the two shards' leaders"
        );
        assert!(recorders.iter().all(|r| c.region_of(*r) == RegionId(1)));
        let both = format!("{per_shard}per_region = 1\n");
        assert!(cluster_of(&both, &[])
            .unwrap_err()
            .message
            .contains("exactly one of"));
        let placed =
            format!("{MINIMAL}\n[[services]]\nname = \"vm\"\nregions = [\"B\", \"B\", \"A\"]\n");
        let c = cluster_of(&placed, &[("vm".to_string(), a)]).unwrap();
        let vms = c.services("vm");
        assert_eq!(vms.len(), 3);
        assert_eq!(c.region_of(vms[0]), RegionId(1));
        assert_eq!(c.node(vms[2]).name, "vm2");

        let colocated = MINIMAL
            .replace("[[coordinators]]", "[machines]\nA = 2\n\n[[coordinators]]")
            .replace(
                "region = \"A\"\ncount = 2",
                "region = \"A\"\ncount = 2\ncolocated = true",
            );
        let c = cluster_of(&colocated, &[]).unwrap();
        assert!(c.colocated(c.coordinators[0], NodeId(0)));
        assert!(c.colocated(c.coordinators[1], NodeId(3)));
        let clash = format!(
            "{colocated}\n[clocks]\noverrides = [{{ node = \"coord0\", profile = \"bad\" }}]\n"
        );
        assert!(cluster_of(&clash, &[])
            .unwrap_err()
            .message
            .contains("different clocks"));
    }
}
