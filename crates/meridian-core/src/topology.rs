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
//! overrides = [{ region = "BR", profile = "bad" }, { node = "shard0/replica1", profile = "ntpd" }]
//! steps = [{ node = "coord0", at_ms = 5000.0, step_ms = -40.0 }]
//! [clocks.custom.wobbly]
//! error_ms = 2.0                     # typical |error|; drawn per node, re-drawn every resync
//! drift_ppm = 20.0
//! resync_ms = 1000.0
//! error_bound_ms = 5.0               # optional: a guaranteed bound (TrueTime-style ε)
//!
//! [runtime]
//! host = "127.0.0.1"
//! base_port = 7100                   # node i listens on base_port + i
//! metrics_base_port = 9100
//! ```
//!
//! Node names (used by clock overrides, steps and fault schedules): `shard{S}/replica{R}`,
//! `coord{I}`, and `{service}{I}` for protocol services. Every error names the field and,
//! where the file has one, the line.

use crate::ids::{NodeId, RegionId, ReplicaId, ShardId};
use crate::partition::Partitioner;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use toml::Spanned;

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
    /// The built-in profiles, approximating Tiga Table 3's measured errors.
    pub fn builtin(name: &str) -> Option<ClockProfile> {
        let params =
            |error_ms, drift_ppm, resync_ms, steps_per_minute, error_bound_ms| ClockParams {
                error_ms,
                drift_ppm,
                resync_ms,
                steps_per_minute,
                error_bound_ms,
            };
        let params = match name {
            "perfect" => params(0.0, 0.0, 1000.0, 0.0, Some(0.0)),
            "huygens" => params(0.01, 0.1, 1000.0, 0.0, Some(0.05)),
            "chrony" => params(5.0, 5.0, 1000.0, 0.0, None),
            "ntpd" => params(16.0, 15.0, 4000.0, 0.0, None),
            "bad" => params(60.0, 50.0, 2000.0, 2.0, None),
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

/// A shard's placement.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardPlacement {
    pub replicas: Vec<RegionId>,
    pub leader: ReplicaId,
}

/// Runtime addresses.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSpec {
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_base_port")]
    pub base_port: u16,
    #[serde(default = "default_metrics_base_port")]
    pub metrics_base_port: u16,
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
    pub default_clock: ClockProfile,
    clock_overrides: Vec<(NodeSelector, ClockProfile)>,
    clock_steps: Vec<(NodeSelector, f64, f64)>,
    pub runtime: RuntimeSpec,
}

#[derive(Clone, Debug, PartialEq)]
enum NodeSelector {
    Region(RegionId),
    Node(String),
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
pub const BUNDLED: [(&str, &str); 5] = [
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
    ("local", include_str!("../../../topologies/local.toml")),
];

struct Parser<'a> {
    source_name: &'a str,
    text: &'a str,
}

impl Parser<'_> {
    fn line_of(&self, span: Range<usize>) -> Option<usize> {
        if span.start == 0 && span.end == 0 {
            return None;
        }
        Some(
            self.text[..span.start.min(self.text.len())]
                .matches('\n')
                .count()
                + 1,
        )
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
    /// A bundled topology by name, or a file by path.
    pub fn load(name_or_path: &str) -> Result<Topology, TopologyError> {
        if let Some((name, text)) = BUNDLED.iter().find(|(n, _)| *n == name_or_path) {
            return Topology::parse(name, text);
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
        Topology::parse(name_or_path, &text)
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
        let p = Parser { source_name, text };
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
        for c in raw.coordinators.get_ref() {
            let region = p.region(&regions, &c.region, "coordinators.region")?;
            coordinators.extend(std::iter::repeat_n(region, *c.count.get_ref() as usize));
        }
        if coordinators.is_empty() {
            return Err(p.error(
                Some(raw.coordinators.span()),
                "coordinators",
                "at least one coordinator is required",
            ));
        }
        let runtime = raw.runtime.unwrap_or_default();
        let mut topology = Topology {
            name: raw.name,
            description: raw.description,
            regions,
            one_way_ms,
            jitter_ms,
            shards,
            coordinators,
            default_clock: ClockProfile::builtin("perfect").expect("builtin"),
            clock_overrides: Vec::new(),
            clock_steps: Vec::new(),
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
            for _ in 0..*spec.count.get_ref() {
                shards.push(ShardPlacement {
                    replicas: replicas.clone(),
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

    fn parse_clocks(&mut self, p: &Parser<'_>, clocks: &RawClocks) -> Result<(), TopologyError> {
        for (name, params) in &clocks.custom {
            let bad = |v: f64| !v.is_finite() || v < 0.0;
            if bad(params.error_ms)
                || bad(params.drift_ppm)
                || bad(params.steps_per_minute)
                || params.resync_ms <= 0.0
                || params.error_bound_ms.is_some_and(bad)
            {
                return Err(p.error(
                    None,
                    &format!("clocks.custom.{name}"),
                    "parameters must be non-negative (resync_ms positive)",
                ));
            }
        }
        if let Some(name) = &clocks.profile {
            self.default_clock = Self::profile(p, &clocks.custom, name, "clocks.profile")?;
        }
        for o in &clocks.overrides {
            let selector =
                Self::selector(p, &self.regions, &o.region, &o.node, "clocks.overrides")?;
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

    pub fn region_id(&self, name: &str) -> Option<RegionId> {
        self.regions
            .iter()
            .position(|r| r == name)
            .map(|i| RegionId(i as u16))
    }

    pub fn region_name(&self, region: RegionId) -> &str {
        &self.regions[region.index()]
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

/// One node of a cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub id: NodeId,
    pub name: String,
    pub role: NodeRole,
    pub region: RegionId,
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
    pub clock_steps: Vec<ClockStep>,
    pub partitioner: Partitioner,
}

impl Cluster {
    /// Lays out `topology` with the given protocol services (name, region).
    pub fn new(
        topology: Topology,
        services: &[(String, RegionId)],
    ) -> Result<Cluster, TopologyError> {
        let mut nodes = Vec::new();
        let mut shards = Vec::new();
        let push = |nodes: &mut Vec<NodeInfo>, name: String, role: NodeRole, region: RegionId| {
            let id = NodeId(nodes.len() as u32);
            nodes.push(NodeInfo {
                id,
                name,
                role,
                region,
                clock: topology.default_clock.clone(),
            });
            id
        };
        for (s, placement) in topology.shards.iter().enumerate() {
            let mut replicas = Vec::new();
            for (r, region) in placement.replicas.iter().enumerate() {
                let role = NodeRole::Replica {
                    shard: ShardId(s as u32),
                    replica: ReplicaId(r as u32),
                };
                replicas.push(push(
                    &mut nodes,
                    format!("shard{s}/replica{r}"),
                    role,
                    *region,
                ));
            }
            shards.push(replicas);
        }
        let coordinators = topology
            .coordinators
            .iter()
            .enumerate()
            .map(|(i, region)| {
                push(
                    &mut nodes,
                    format!("coord{i}"),
                    NodeRole::Coordinator { index: i as u32 },
                    *region,
                )
            })
            .collect();
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for (name, region) in services {
            let index = counts.entry(name).or_default();
            push(
                &mut nodes,
                format!("{name}{index}"),
                NodeRole::Service {
                    name: name.clone(),
                    index: *index,
                },
                *region,
            );
            *index += 1;
        }
        let mut cluster = Cluster {
            partitioner: Partitioner::new(shards.len() as u32),
            topology,
            nodes,
            shards,
            coordinators,
            clock_steps: Vec::new(),
        };
        cluster.apply_clocks()?;
        Ok(cluster)
    }

    fn select(&self, selector: &NodeSelector, field: &str) -> Result<Vec<NodeId>, TopologyError> {
        match selector {
            NodeSelector::Region(r) => Ok(self
                .nodes
                .iter()
                .filter(|n| n.region == *r)
                .map(|n| n.id)
                .collect()),
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

    /// Tolerated failures per shard: f with 2f + 1 replicas.
    pub fn f(&self, shard: ShardId) -> usize {
        (self.shards[shard.index()].len() - 1) / 2
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
                "{:>4} {:<18} {:<6} clock={}",
                n.id,
                n.name,
                self.topology.region_name(n.region),
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
        assert_eq!(gcp.topology.rtt_ms(sc, hk), 238.0);
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
}
