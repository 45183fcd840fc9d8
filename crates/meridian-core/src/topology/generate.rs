//! `[generate]`: a topology of `regions` identical regions, written out for the parser.
//!
//! DAST §6 runs 10 to 100 regions, each of 30 edge nodes holding 10 shards × 3 replicas,
//! 5 ms round trips inside a region and 100 ms across (Fig. 8). A file with a `[generate]`
//! table describes that family in a few lines; the parser expands it into the `regions`,
//! `[[rtt]]`, `[machines]`, `[[shards]]` and `[[coordinators]]` a hand-written file would
//! hold, so everything else (services, clocks, runtime) is written and checked as usual:
//!
//! ```toml
//! name = "edge-regions-full"
//! intra_region_rtt_ms = 5.0
//! jitter_ms = 0.5
//! [generate]
//! regions = 10                   # 1..=100, named E0, E1, … (`region_prefix`)
//! shards_per_region = 10         # each replicated `replicas` times inside its region
//! replicas = 3                   # default 3
//! cross_region_rtt_ms = 100.0    # every pair of distinct regions
//! # coordinators_per_region = 30 # default: one per machine, colocated (every edge node
//! #                              # coordinates)
//! [[services]]
//! name = "manager"
//! per_region = 3
//! ```
//!
//! Every region gets `shards_per_region × replicas` machines (one replica each, dealt
//! round-robin, so a shard's replicas sit on distinct machines). A load name may override
//! the table's keys: `edge-regions-full:regions=40,shards_per_region=2` (see
//! [`super::Topology::load`]).

use super::TopologyError;
use serde::Deserialize;
use std::fmt::Write as _;

/// The largest region count the generator writes (DAST Fig. 8's largest point).
pub const MAX_REGIONS: u32 = 100;

/// The keys of `[generate]`, for error messages.
const KEYS: &str = "regions, region_prefix, shards_per_region, replicas, cross_region_rtt_ms, \
                    coordinators_per_region";

/// Keys a `[generate]` file may not also give (the generator writes them).
const WRITTEN: [&str; 5] = ["regions", "rtt", "shards", "coordinators", "machines"];

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Generate {
    regions: u32,
    #[serde(default = "default_prefix")]
    region_prefix: String,
    shards_per_region: u32,
    #[serde(default = "default_replicas")]
    replicas: u32,
    cross_region_rtt_ms: f64,
    #[serde(default)]
    coordinators_per_region: Option<u32>,
}

fn default_prefix() -> String {
    "E".into()
}

fn default_replicas() -> u32 {
    3
}

/// What the expansion adds: a first line (the top-level `regions` key) and the tables
/// appended after the file's own text.
pub(super) struct Expansion {
    pub first_line: String,
    pub tables: String,
}

/// Expands `text`'s `[generate]` table with `overrides` applied; `None` if the file has no
/// such table (and no overrides were asked for). A file that is not valid TOML is left to
/// the parser, whose error names the line.
pub(super) fn expand(
    source_name: &str,
    text: &str,
    overrides: &[(String, String)],
) -> Result<Option<Expansion>, TopologyError> {
    let error = |field: &str, message: String| TopologyError {
        source_name: source_name.to_string(),
        line: None,
        field: field.to_string(),
        message,
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(None);
    };
    let Some(raw) = table.get("generate") else {
        if let Some((key, _)) = overrides.first() {
            return Err(error(
                key,
                "this topology has no [generate] table, so it takes no parameters".into(),
            ));
        }
        return Ok(None);
    };
    if let Some(key) = WRITTEN.iter().find(|k| table.contains_key(**k)) {
        return Err(error(
            key,
            format!("[generate] writes `{key}`; a file with [generate] may not give it too"),
        ));
    }
    let mut spec: Generate = raw
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| error("generate", e.message().to_string()))?;
    for (key, value) in overrides {
        spec.set(key, value).map_err(|m| error(key, m))?;
    }
    spec.validate().map_err(|(field, m)| error(field, m))?;
    Ok(Some(spec.expansion()))
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("`{key}={value}`: not a number"))
}

impl Generate {
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "regions" => self.regions = number(key, value)?,
            "region_prefix" => self.region_prefix = value.to_string(),
            "shards_per_region" => self.shards_per_region = number(key, value)?,
            "replicas" => self.replicas = number(key, value)?,
            "cross_region_rtt_ms" => self.cross_region_rtt_ms = number(key, value)?,
            "coordinators_per_region" => self.coordinators_per_region = Some(number(key, value)?),
            _ => return Err(format!("unknown [generate] key (keys: {KEYS})")),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(1..=MAX_REGIONS).contains(&self.regions) {
            return Err((
                "generate.regions",
                format!("must be 1 to {MAX_REGIONS}, got {}", self.regions),
            ));
        }
        let prefix = &self.region_prefix;
        if prefix.is_empty()
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err((
                "generate.region_prefix",
                format!("`{prefix}` must be letters, digits and dashes"),
            ));
        }
        for (field, n) in [
            ("generate.shards_per_region", self.shards_per_region),
            ("generate.replicas", self.replicas),
            (
                "generate.coordinators_per_region",
                self.coordinators_per_region.unwrap_or(1),
            ),
        ] {
            if n == 0 {
                return Err((field, "must be at least 1".into()));
            }
        }
        let machines = u64::from(self.shards_per_region) * u64::from(self.replicas);
        if machines > 10_000 {
            return Err((
                "generate.shards_per_region",
                format!("{machines} nodes per region is more than the 10000 the generator writes"),
            ));
        }
        let rtt = self.cross_region_rtt_ms;
        if !rtt.is_finite() || rtt < 0.0 {
            return Err((
                "generate.cross_region_rtt_ms",
                format!("must be a non-negative number, got {rtt}"),
            ));
        }
        Ok(())
    }

    fn region(&self, i: u32) -> String {
        format!("{}{i}", self.region_prefix)
    }

    fn expansion(&self) -> Expansion {
        let names: Vec<String> = (0..self.regions)
            .map(|i| format!("{:?}", self.region(i)))
            .collect();
        let first_line = format!("regions = [{}]\n", names.join(", "));
        let mut t = String::new();
        for a in 0..self.regions {
            for b in a + 1..self.regions {
                let (a, b) = (self.region(a), self.region(b));
                let ms = self.cross_region_rtt_ms;
                let _ = writeln!(t, "\n[[rtt]]\nbetween = [{a:?}, {b:?}]\nms = {ms:?}");
            }
        }
        let machines = self.shards_per_region * self.replicas;
        t.push_str("\n[machines]\n");
        for r in 0..self.regions {
            let _ = writeln!(t, "{:?} = {machines}", self.region(r));
        }
        let coordinators = self.coordinators_per_region.unwrap_or(machines);
        for r in 0..self.regions {
            let name = format!("{:?}", self.region(r));
            let replicas = vec![name.as_str(); self.replicas as usize].join(", ");
            let count = self.shards_per_region;
            let _ = writeln!(
                t,
                "\n[[shards]]\ncount = {count}\nreplicas = [{replicas}]\nleader = {name}"
            );
        }
        for r in 0..self.regions {
            let name = format!("{:?}", self.region(r));
            let _ = writeln!(
                t,
                "\n[[coordinators]]\nregion = {name}\ncount = {coordinators}\ncolocated = true"
            );
        }
        Expansion {
            first_line,
            tables: t,
        }
    }
}

/// `[generate]` keys and values given beside a topology's name.
pub(super) type Overrides = Vec<(String, String)>;

/// Splits `spec` into a topology name or path and `[generate]` overrides:
/// `NAME:key=value,key=value`. A spec without `:` (or naming an existing file) has none.
pub(super) fn split_spec(spec: &str) -> Result<(&str, Overrides), TopologyError> {
    let Some((name, params)) = spec.rsplit_once(':') else {
        return Ok((spec, Vec::new()));
    };
    if std::path::Path::new(spec).exists() {
        return Ok((spec, Vec::new()));
    }
    let mut overrides = Vec::new();
    for pair in params.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(TopologyError {
                source_name: name.to_string(),
                line: None,
                field: "parameters".into(),
                message: format!("`{pair}` is not key=value (e.g. `{name}:regions=40`)"),
            });
        };
        overrides.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok((name, overrides))
}

#[cfg(test)]
mod tests {
    use super::super::{Topology, TopologyError};
    use crate::topology::Cluster;

    /// The bundled `edge-regions`, written out by hand, as a `[generate]` file.
    const EDGE: &str = r#"
name = "edge-regions"
intra_region_rtt_ms = 5.0
jitter_ms = 0.5
[generate]
regions = 10
shards_per_region = 2
cross_region_rtt_ms = 100.0
[[services]]
name = "manager"
per_region = 3
[clocks]
profile = "chrony"
"#;

    fn err(text: &str, overrides: &[(&str, &str)]) -> TopologyError {
        let o: Vec<(String, String)> = overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Topology::parse_with("t", text, &o).unwrap_err()
    }

    /// The generator writes what a hand-written file holds: the bundled `edge-regions` is
    /// the same topology node for node.
    #[test]
    fn generating_edge_regions_gives_the_bundled_file() {
        let mut generated = Topology::parse("t", EDGE).unwrap();
        let bundled = Topology::load("edge-regions").unwrap();
        generated.description.clone_from(&bundled.description);
        assert_eq!(generated, bundled);
    }

    /// Fig. 8's largest point: 100 regions of 30 nodes, 3 managers each.
    #[test]
    fn a_hundred_regions_of_thirty_nodes() {
        let spec = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../topologies/edge-regions-full.toml"
        );
        let t = Topology::load(&format!("{spec}:regions=100")).unwrap();
        assert_eq!(t.regions.len(), 100);
        assert_eq!(t.regions[99], "E99");
        assert_eq!(t.shards.len(), 1000);
        assert_eq!(t.rtt_ms(crate::RegionId(3), crate::RegionId(97)), 100.0);
        assert_eq!(t.rtt_ms(crate::RegionId(5), crate::RegionId(5)), 5.0);
        let c = Cluster::new(t, &[("manager".into(), crate::RegionId(0))]).unwrap();
        assert_eq!(c.machines.len(), 3000 + 300, "edge nodes, then managers");
        let default = Topology::load(spec).unwrap();
        assert_eq!(default.regions.len(), 10);
    }

    /// Bad parameters and conflicting files are refused with the key named.
    #[test]
    fn bad_generate_input_is_refused_by_name() {
        let e = err(EDGE, &[("regions", "0")]);
        assert_eq!(e.field, "generate.regions");
        assert!(e.message.contains("1 to 100"), "{e}");
        assert!(err(EDGE, &[("regions", "101")]).message.contains("got 101"));
        let e = err(EDGE, &[("regions", "many")]);
        assert!(e.message.contains("not a number"), "{e}");
        let e = err(EDGE, &[("shards", "3")]);
        assert!(e.message.contains("unknown [generate] key"), "{e}");
        let e = err(EDGE, &[("replicas", "0")]);
        assert_eq!(e.field, "generate.replicas");
        let e = err(&EDGE.replace("cross_region_rtt_ms = 100.0", ""), &[]);
        assert!(e.message.contains("cross_region_rtt_ms"), "{e}");
        let e = err(&EDGE.replace("regions = 10", "regions = 10\nrtt = 1"), &[]);
        assert!(e.message.contains("unknown field `rtt`"), "{e}");
        let e = err(&format!("regions = [\"A\"]\n{EDGE}"), &[]);
        assert!(e.message.contains("may not give it too"), "{e}");
        let e = Topology::load("local:regions=3").unwrap_err();
        assert!(e.message.contains("no [generate] table"), "{e}");
        let e = Topology::load("edge-regions:regions").unwrap_err();
        assert!(e.message.contains("not key=value"), "{e}");
    }

    /// Errors in the file's own text name its own lines, not the expansion's.
    #[test]
    fn errors_keep_the_files_line_numbers() {
        let bad = EDGE.replace("profile = \"chrony\"", "profile = \"no-such-clock\"");
        let e = err(&bad, &[]);
        let line = bad
            .lines()
            .position(|l| l.contains("no-such-clock"))
            .unwrap()
            + 1;
        assert_eq!(e.line, Some(line), "{e}");
    }
}
