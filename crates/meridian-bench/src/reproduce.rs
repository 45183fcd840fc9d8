//! The reproduction page, generated (issue 17 item 6): `docs/REPRODUCTION.md` is rendered
//! from a hand-written template whose every number is a *placeholder* filled from the
//! `results.json` of an experiment run by the same build, so the page cannot quote an older
//! build than the one it names.
//!
//! * The **manifest** (`experiments/reproduce.toml`) lists the experiment files and the
//!   overrides (repeats, duration, drain) each is run with.
//! * The **template** (`docs/REPRODUCTION.template.md`) is Markdown with placeholders
//!   `{{EXPERIMENT key=value … @REGION METRIC %FORMAT}}`: the experiment's `name`; `key=value`
//!   pairs choosing exactly one point by its swept parameters, and `!key` for a parameter
//!   the point must not have (a sweep point beside an `[[extra]]` one that adds `key`);
//!   `@REGION` (default `@all`);
//!   the metric — a name of [`METRICS`](crate::metrics::METRICS), `unknown`, `counters.K`,
//!   `values.K` or `throttled`; and an optional format: `%N` for N decimals, `%pctN` for a ratio shown
//!   as a percentage with N decimals, `%int` for a whole number with thousands separators;
//!   `*F` multiplies the value by F first (ns → ms: `*0.000001`). Without a format, `_ms`
//!   metrics get one decimal, ratios `%pct1`, the rest `%int`. A metric ending in `?`
//!   renders `–` where the point has no such value (a baseline without a latency bound);
//!   otherwise a missing value is an error. `values.K` names a plot expression with its
//!   spaces left out (`values.counters.txns_delayed/counters.txns`).
//!   `{{build}}` is the build the results came from.
//! * Every `results.json` carries the build that wrote it ([`BUILD_KEY`]); rendering refuses
//!   results of any other build than the one it is asked to stamp.

use crate::experiment::PointResult;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The key under which `results.json` records the build (a commit id) that wrote it.
pub const BUILD_KEY: &str = "build";

/// Opening and closing marks of a placeholder.
const OPEN: &str = "{{";
const CLOSE: &str = "}}";

/// One experiment to run for the page, with its overrides.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestRun {
    /// The experiment file, relative to the repository root.
    pub file: PathBuf,
    pub repeats: Option<u32>,
    pub duration: Option<String>,
    pub drain: Option<String>,
}

/// `experiments/reproduce.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(rename = "run")]
    pub runs: Vec<ManifestRun>,
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let manifest: Manifest =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if manifest.runs.is_empty() {
            return Err(format!("{}: no `[[run]]` entries", path.display()));
        }
        Ok(manifest)
    }
}

/// One experiment's written results: its points and the build that wrote them.
#[derive(Clone, Debug, Deserialize)]
pub struct Written {
    pub points: Vec<PointResult>,
    #[serde(default)]
    pub build: Option<String>,
}

impl Written {
    /// Reads `dir/results.json`.
    pub fn read(dir: &Path) -> Result<Written, String> {
        let path = dir.join("results.json");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// A parsed placeholder.
#[derive(Clone, Debug, PartialEq)]
pub struct Placeholder {
    pub experiment: String,
    pub select: BTreeMap<String, String>,
    /// Parameters the chosen point must not have.
    pub without: Vec<String>,
    pub region: String,
    pub metric: String,
    pub format: Format,
    pub scale: f64,
    /// `–` where the value is absent, instead of an error.
    pub optional: bool,
}

/// How a value is printed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Format {
    Decimals(usize),
    Percent(usize),
    Int,
}

impl Format {
    fn parse(text: &str) -> Result<Format, String> {
        let digits = |d: &str| {
            d.parse::<usize>()
                .ok()
                .filter(|d| *d <= 6)
                .ok_or_else(|| format!("format `%{text}`: want %N, %pctN (N ≤ 6) or %int"))
        };
        match text {
            "int" => Ok(Format::Int),
            t => match t.strip_prefix("pct") {
                Some(d) => digits(d).map(Format::Percent),
                None => digits(t).map(Format::Decimals),
            },
        }
    }

    fn default_for(metric: &str) -> Format {
        if metric.ends_with("_ms") || metric.ends_with("_wrtt") {
            Format::Decimals(1)
        } else if metric.ends_with("_ratio") || metric == "commit_rate" {
            Format::Percent(1)
        } else {
            Format::Int
        }
    }

    pub fn show(self, value: f64) -> String {
        match self {
            Format::Decimals(d) => format!("{value:.d$}"),
            Format::Percent(d) => format!("{:.d$}", value * 100.0),
            Format::Int => thousands(value.round() as i64),
        }
    }
}

/// `12345` → `12,345`.
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

impl Placeholder {
    /// Parses the text between `{{` and `}}`; `None` for `{{build}}`.
    pub fn parse(text: &str) -> Result<Option<Placeholder>, String> {
        let mut words = text.split_whitespace();
        let experiment = words.next().ok_or("an empty placeholder")?.to_string();
        if experiment == "build" {
            return match words.next() {
                None => Ok(None),
                Some(w) => Err(format!("`{{{{build}}}}` takes nothing, not `{w}`")),
            };
        }
        let mut select = BTreeMap::new();
        let mut without = Vec::new();
        let mut region = crate::metrics::ALL.to_string();
        let mut metric = None;
        let mut format = None;
        let mut scale = 1.0;
        for w in words {
            if let Some(f) = w.strip_prefix('*') {
                scale = f
                    .parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .ok_or_else(|| format!("`{text}`: `*{f}` is not a number"))?;
            } else if let Some(k) = w.strip_prefix('!') {
                without.push(k.to_string());
            } else if let Some(r) = w.strip_prefix('@') {
                region = r.to_string();
            } else if let Some(f) = w.strip_prefix('%') {
                format = Some(Format::parse(f)?);
            } else if let Some((k, v)) = w.split_once('=') {
                select.insert(k.to_string(), v.to_string());
            } else if metric.replace(w.to_string()).is_some() {
                return Err(format!("`{text}`: two metrics"));
            }
        }
        let metric = metric.ok_or_else(|| format!("`{text}`: no metric"))?;
        let (metric, optional) = match metric.strip_suffix('?') {
            Some(m) => (m.to_string(), true),
            None => (metric, false),
        };
        if !is_known_metric(&metric) {
            return Err(format!(
                "`{text}`: unknown metric `{metric}` (a METRICS name, unknown, counters.K, values.K or throttled)"
            ));
        }
        let format = format.unwrap_or_else(|| Format::default_for(&metric));
        Ok(Some(Placeholder {
            experiment,
            select,
            without,
            region,
            metric,
            format,
            scale,
            optional,
        }))
    }

    /// Whether a point with these swept parameters is the one the selector names.
    pub fn matches(&self, params: &BTreeMap<String, String>) -> bool {
        self.select
            .iter()
            .all(|(k, v)| params.get(k).is_some_and(|have| have == v))
            && self.without.iter().all(|k| !params.contains_key(k))
    }

    /// The one point the selector names.
    fn point<'a>(&self, points: &'a [PointResult]) -> Result<&'a PointResult, String> {
        let chosen: Vec<&PointResult> = points.iter().filter(|p| self.matches(&p.params)).collect();
        match chosen.as_slice() {
            [one] => Ok(one),
            [] => Err(format!(
                "{}: no point has {:?}",
                self.experiment, self.select
            )),
            many => Err(format!(
                "{}: {} points match {:?}; name more parameters",
                self.experiment,
                many.len(),
                self.select
            )),
        }
    }

    /// The text this placeholder renders to in `points`.
    pub fn show(&self, points: &[PointResult]) -> Result<String, String> {
        match self.value(points)? {
            Some(v) => Ok(self.format.show(v * self.scale)),
            None if self.optional => Ok("–".into()),
            None => Err(format!(
                "{} {:?} @{}: no value for `{}`",
                self.experiment, self.select, self.region, self.metric
            )),
        }
    }

    /// The value this placeholder names in `points`, if the point has one.
    pub fn value(&self, points: &[PointResult]) -> Result<Option<f64>, String> {
        let point = self.point(points)?;
        if let Some(k) = self.metric.strip_prefix("counters.") {
            return Ok(point.counters.get(k).copied());
        }
        if let Some(k) = self.metric.strip_prefix("values.") {
            let unspaced = |e: &str| e.split_whitespace().collect::<String>();
            return Ok(point
                .values
                .iter()
                .find(|(e, _)| unspaced(e) == k)
                .map(|(_, v)| *v));
        }
        if self.metric == "throttled" {
            return Ok(Some(point.throttled as f64));
        }
        let row = point
            .metrics
            .iter()
            .find(|m| m.region == self.region && m.class.is_none());
        Ok(match self.metric.as_str() {
            "unknown" => row.map(|m| m.unknown as f64),
            metric => row.and_then(|m| m.get(metric)),
        })
    }
}

fn is_known_metric(m: &str) -> bool {
    let m = m.strip_suffix('?').unwrap_or(m);
    let named = |prefix: &str| m.strip_prefix(prefix).is_some_and(|k| !k.is_empty());
    crate::metrics::METRICS.iter().any(|(name, _)| *name == m)
        || named("counters.")
        || named("values.")
        || m == "throttled"
        || m == "unknown"
}

/// Every placeholder of a template, in order, with its line number.
pub fn placeholders(template: &str) -> Result<Vec<(usize, Option<Placeholder>)>, String> {
    let mut found = Vec::new();
    for (i, line) in template.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find(OPEN) {
            let after = &rest[start + OPEN.len()..];
            let end = after
                .find(CLOSE)
                .ok_or_else(|| format!("line {}: `{OPEN}` without `{CLOSE}`", i + 1))?;
            let p =
                Placeholder::parse(&after[..end]).map_err(|e| format!("line {}: {e}", i + 1))?;
            found.push((i + 1, p));
            rest = &after[end + CLOSE.len()..];
        }
    }
    Ok(found)
}

/// Renders `template`, reading each experiment's results through `results` (by name) and
/// refusing any written by another build than `build`.
pub fn render(
    template: &str,
    build: &str,
    results: &mut dyn FnMut(&str) -> Result<Written, String>,
) -> Result<String, String> {
    let mut cache: BTreeMap<String, Written> = BTreeMap::new();
    let mut out = String::with_capacity(template.len());
    for (i, line) in template.split_inclusive('\n').enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find(OPEN) {
            out.push_str(&rest[..start]);
            let after = &rest[start + OPEN.len()..];
            let end = after
                .find(CLOSE)
                .ok_or_else(|| format!("line {}: `{OPEN}` without `{CLOSE}`", i + 1))?;
            let text = match Placeholder::parse(&after[..end]) {
                Ok(None) => Ok(format!("`{build}`")),
                Ok(Some(p)) => fill(&p, build, &mut cache, results),
                Err(e) => Err(e),
            }
            .map_err(|e| format!("line {}: {e}", i + 1))?;
            out.push_str(&text);
            rest = &after[end + CLOSE.len()..];
        }
        out.push_str(rest);
    }
    Ok(out)
}

fn fill(
    p: &Placeholder,
    build: &str,
    cache: &mut BTreeMap<String, Written>,
    results: &mut dyn FnMut(&str) -> Result<Written, String>,
) -> Result<String, String> {
    if !cache.contains_key(&p.experiment) {
        let written = results(&p.experiment)?;
        let theirs = written.build.as_deref().unwrap_or("(none)");
        if theirs != build {
            return Err(format!(
                "{}: results come from build {theirs}, not {build}: run it again",
                p.experiment
            ));
        }
        cache.insert(p.experiment.clone(), written);
    }
    let written = &cache[&p.experiment];
    p.show(&written.points)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(build: &str) -> Written {
        let json = serde_json::json!({
            "build": build,
            "points": [point("tiga", 1000, 126.34), point("tiga", 2000, 130.0), point("2pl-2pc", 1000, 4.1)],
        });
        serde_json::from_value(json).expect("fixture")
    }

    fn point(protocol: &str, rate: u32, p50: f64) -> serde_json::Value {
        let metrics = |region: &str| {
            serde_json::json!({"region": region, "committed": 12345, "aborted": 5, "unknown": 0,
                "throughput_tps": 6172.4, "abort_ratio": 0.0004, "p50_ms": p50})
        };
        serde_json::json!({
            "params": {"protocol": protocol, "rate": rate.to_string()},
            "point": serde_json::to_value(fixture_point()).expect("point"),
            "metrics": [metrics("SC"), metrics("all")],
            "abort_reasons": {}, "throttled": 7, "violations": [],
            "counters": {"fast": 0.96, "delay_ns": 2.5e6},
            "values": {"counters.a / counters.b": 0.25}, "timeline": [], "marks": [],
        })
    }

    fn fixture_point() -> crate::Point {
        crate::Point {
            protocol: "tiga".into(),
            topology: "gcp-tiga".into(),
            workload: "microbench".into(),
            workload_opts: BTreeMap::new(),
            protocol_opts: BTreeMap::new(),
            load: crate::Load::Closed { clients: 1 },
            clock: None,
            duration_ms: 1,
            drain_ms: 1,
            service_time_ns: 0,
            workers: 1,
            machine_workers: false,
            seed: 1,
            faults: "none".into(),
            timeline_bucket_ms: 250,
            wan_scale: 1.0,
            warmup_ms: 0,
            retry_aborted: false,
            retry_interval_ns: 0,
        }
    }

    fn render_one(template: &str, build: &str) -> Result<String, String> {
        render(template, "abc123", &mut |name| {
            assert_eq!(name, "fig7");
            Ok(written(build))
        })
    }

    #[test]
    fn fills_metrics_counters_and_the_build() {
        let out = render_one(
            "SC p50 {{fig7 protocol=tiga rate=1000 @SC p50_ms}} ms, {{fig7 protocol=2pl-2pc committed}} done, \
             {{fig7 protocol=tiga rate=2000 abort_ratio %pct2}} %, fast {{fig7 protocol=tiga rate=1000 counters.fast %pct0}} %, \
             throttled {{fig7 protocol=2pl-2pc throttled}} ({{build}}); {{fig7 protocol=2pl-2pc counters.delay_ns *0.000001 %2}} ms, \
             {{fig7 protocol=2pl-2pc values.counters.a/counters.b %pct0}} %, {{fig7 protocol=2pl-2pc p90_ms?}}\n",
            "abc123",
        )
        .expect("renders");
        assert_eq!(
            out,
            "SC p50 126.3 ms, 12,345 done, 0.04 %, fast 96 %, throttled 7 (`abc123`); 2.50 ms, 25 %, –\n"
        );
    }

    #[test]
    fn refuses_results_of_another_build() {
        let err = render_one("{{fig7 protocol=2pl-2pc p50_ms}}", "old999").unwrap_err();
        assert!(
            err.contains("old999") && err.contains("run it again"),
            "{err}"
        );
    }

    #[test]
    fn a_selector_must_name_exactly_one_point() {
        let err = render_one("{{fig7 protocol=tiga p50_ms}}", "abc123").unwrap_err();
        assert!(err.contains("2 points match"), "{err}");
        let err = render_one("{{fig7 protocol=janus p50_ms}}", "abc123").unwrap_err();
        assert!(err.contains("no point"), "{err}");
        let err = render_one("{{fig7 protocol=2pl-2pc @HK p50_ms}}", "abc123").unwrap_err();
        assert!(err.contains("no value"), "{err}");
        let err = render_one("{{fig7 protocol=2pl-2pc p90_ms}}", "abc123").unwrap_err();
        assert!(err.contains("no value"), "{err}");
    }

    #[test]
    fn bad_placeholders_are_clear_errors() {
        for (text, want) in [
            ("{{fig7 protocol=tiga}}", "no metric"),
            ("{{fig7 p50_ms p90_ms}}", "two metrics"),
            ("{{fig7 latency}}", "unknown metric"),
            ("{{fig7 p50_ms %x}}", "format"),
            ("{{fig7 p50_ms *x}}", "not a number"),
            ("{{fig7 p50_ms", "without"),
            ("{{}}", "empty"),
        ] {
            let err = placeholders(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(157_300), "157,300");
        assert_eq!(thousands(-1_234_567), "-1,234,567");
    }
}
