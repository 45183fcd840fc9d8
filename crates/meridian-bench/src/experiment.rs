//! Experiment files (DESIGN §10): a TOML file names a base configuration, a sweep over
//! parameters, repeats, and plots. [`run`] measures every point of the sweep's cartesian
//! product `repeats` times (seeds 1, 2, …), takes the median of each metric, and writes
//! `results.json`, `results.csv` and one SVG and one PNG per plot into the output folder.
//!
//! ```toml
//! name = "tiga-fig7"
//! title = "MicroBench (skew 0.5), local region: latency vs throughput"
//! paper = "Tiga Fig. 7"
//! repeats = 1
//!
//! [base]                     # every parameter, with these defaults
//! protocol = "tiga"
//! topology = "gcp-tiga"
//! workload = "microbench"
//! load = "open"              # "open" (rate, outstanding) or "closed" (clients)
//! rate = 1000                # txns/s per coordinator
//! outstanding = 100          # cap of outstanding txns per coordinator
//! clients = 2                # closed loop: clients per coordinator
//! duration = "5s"
//! drain = "5s"
//! clock = "huygens"          # optional override of every node's clock profile
//! service_time = "1.2us"     # per-event processing time at a node (default 0; ns precision)
//! workers = 8                # simulator: worker threads per node, one queue each (default 1)
//! machine_workers = true     # simulator: a machine's nodes share its `workers` (default false)
//! faults = "crash:shard0/replica0@10s"   # simulator fault schedule (default none)
//! timeline_bucket = "1s"     # bucket length of the timeline (default 1s)
//! wan_scale = 1.0            # runtime target: multiplies the WAN delays (default 1)
//! warmup = "10s"             # load run before `duration` is measured (default 0); the sim
//!                            # then measures what finishes during `duration` (steady state)
//! retry_aborted = true       # simulator, closed load: retry an aborted transaction until it commits
//! retry_interval = "500us"   # with retry_aborted: the retry waits this long, the client runs
//!                            # fresh transactions meanwhile (default 0: retried next)
//! label = "vanilla"          # names the point in plots (`series = "label"`); no effect on the run
//! workload_opts = { zipf = "0.5" }
//! protocol_opts = {}
//!
//! [sweep]                    # cartesian product; `workload.K` / `protocol.K` set options,
//!                            # `topology.K` a key of the topology's `[generate]` table
//! protocol = ["2pl-2pc", "tiga"]
//! rate = [500, 1000, 2000]
//!
//! [[extra]]                  # optional: points beyond the product (a baseline, say)
//! protocol = "tiga"
//! rate = 250
//!
//! [[plot]]
//! name = "latency"           # file stem
//! title = "…"
//! x = "throughput_tps"       # a metric, a swept parameter, or an expression as y; or
//!                            # parameters `A | B`: each point's x is the first it has
//! y = "p50_ms"               # a metric, `counters.K`, `model.K`, or `A / B` of those;
//!                            # `counters.*.K` sums the counters whose `*` is one dot-free part
//! y_label = "…"              # axis label (default: the metric's, with its unit)
//! x_label = "…"              # axis label (default: the metric's or parameter's)
//! y_scale = 1.0              # multiplies y (e.g. 1e-6: counted ns shown as ms)
//! also = "model.K"           # optional second y per series (e.g. a model beside the measure)
//! also_label = "model"       # suffix of the second y's series names (default "model")
//! also_scale = 1.0           # multiplies `also` (default: y_scale)
//! series = "protocol"        # a swept parameter, or several: "protocol, workload.zipf"
//!                            # (each swept or set by an extra point; default: protocol)
//! region = "SC"              # a coordinator region or "all" (default)
//! class = "new-order"        # a transaction class label (read-only, read-write, a
//!                            # workload's own: TPC-C's profiles, irt/crt); default: all
//! kind = "line"              # "cdf": each point's latency distribution; "histogram": the
//!                            # CDF of a counted histogram, y naming its per-bucket counters
//!                            # `Y_le_<N>ms` (below N ms) and `Y_gt_<N>ms` (`counters.*.Y`
//!                            # allowed); "timeline": y
//!                            # (throughput_tps, p50_ms, p99_ms, …) per bucket of time
//! ```
//!
//! A top-level `target = "runtime"` runs the points on the in-process runtime instead of
//! the simulator (default `"sim"`); the runner that owns the targets picks it.

use crate::metrics::{self, Metrics, ALL, METRICS};
use crate::{plot, Load, Point, RunOutput, Target, TimeBucket};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A parsed experiment file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub title: String,
    /// The paper figure or table this reproduces (`Tiga Fig. 7`).
    #[serde(default)]
    pub paper: String,
    #[serde(default = "one")]
    pub repeats: u32,
    /// Where the points run: `sim` (default) or `runtime`.
    #[serde(default = "default_target")]
    pub target: String,
    #[serde(default)]
    pub base: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub sweep: BTreeMap<String, Vec<toml::Value>>,
    /// Points beyond the sweep's product, each a set of parameters over `base`.
    #[serde(default)]
    pub extra: Vec<BTreeMap<String, toml::Value>>,
    #[serde(default, rename = "plot")]
    pub plots: Vec<PlotSpec>,
}

fn one() -> u32 {
    1
}
fn default_target() -> String {
    "sim".into()
}

/// One figure of an experiment.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlotSpec {
    pub name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub x: String,
    #[serde(default)]
    pub y: String,
    #[serde(default = "default_series")]
    pub series: String,
    #[serde(default = "default_region")]
    pub region: String,
    /// A transaction class (`read-only`, `new-order`, `crt`, …): the plot shows that class's
    /// metrics; default: every transaction.
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default = "default_kind")]
    pub kind: String,
    /// The y axis label (default: the metric's).
    #[serde(default)]
    pub y_label: String,
    /// The x axis label (default: the metric's or parameter's).
    #[serde(default)]
    pub x_label: String,
    /// Multiplies every y value (and `also`).
    #[serde(default = "unit_scale")]
    pub y_scale: f64,
    /// A second y for each series, drawn beside the first (a model's prediction).
    #[serde(default)]
    pub also: String,
    #[serde(default = "default_also_label")]
    pub also_label: String,
    /// Multiplies `also` (default: `y_scale`), when its unit differs from y's.
    #[serde(default)]
    pub also_scale: Option<f64>,
}

fn unit_scale() -> f64 {
    1.0
}
fn default_also_label() -> String {
    "model".into()
}

fn default_series() -> String {
    "protocol".into()
}
fn default_region() -> String {
    ALL.into()
}
fn default_kind() -> String {
    "line".into()
}

/// Parameters `base` and `sweep` may name, besides `workload.K` and `protocol.K`.
const PARAMS: [&str; 21] = [
    "protocol",
    "topology",
    "workload",
    "load",
    "rate",
    "outstanding",
    "clients",
    "duration",
    "drain",
    "clock",
    "seed",
    "service_time",
    "workers",
    "faults",
    "timeline_bucket",
    "wan_scale",
    "warmup",
    "retry_aborted",
    "retry_interval",
    "label",
    "machine_workers",
];

/// The swept parameters' values at one point, by name.
pub type Params = BTreeMap<String, String>;

/// Overrides from the command line (shorter runs for smoke tests).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub duration_ms: Option<u64>,
    pub drain_ms: Option<u64>,
    pub repeats: Option<u32>,
}

/// One measured point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointResult {
    /// The swept parameters' values at this point.
    pub params: BTreeMap<String, String>,
    pub point: Point,
    /// Median over repeats, one row per region then `all`.
    pub metrics: Vec<Metrics>,
    pub abort_reasons: BTreeMap<String, u64>,
    pub throttled: u64,
    /// Invariant or final-state violations, by repeat seed.
    pub violations: Vec<String>,
    /// Latency CDF of the first repeat, per region: `(ms, fraction)`.
    #[serde(default)]
    pub cdf: BTreeMap<String, Vec<(f64, f64)>>,
    /// The protocol's counters, median over repeats.
    pub counters: BTreeMap<String, f64>,
    /// Each plot's `counters.`/`model.` expression, median over repeats (all regions).
    pub values: BTreeMap<String, f64>,
    /// Outcomes per bucket of time, bucket by bucket the median over repeats.
    pub timeline: Vec<TimeBucket>,
    /// The first repeat's marks (injected faults), `(s, label)`.
    pub marks: Vec<(f64, String)>,
}

/// Reads and checks an experiment file: unknown fields, parameters, metrics and plot
/// references are errors naming them.
pub fn load(path: &Path) -> Result<Experiment, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses and checks experiment TOML.
pub fn parse(text: &str) -> Result<Experiment, String> {
    let exp: Experiment = toml::from_str(text).map_err(|e| e.to_string())?;
    if exp.name.is_empty() || exp.name.contains(['/', '\\']) {
        return Err(format!(
            "`name` must be a plain file name, not `{}`",
            exp.name
        ));
    }
    if exp.repeats == 0 {
        return Err("`repeats` must be at least 1".into());
    }
    for key in exp
        .base
        .keys()
        .chain(exp.sweep.keys())
        .chain(exp.extra.iter().flat_map(|e| e.keys()))
    {
        let known = PARAMS.contains(&key.as_str())
            || key.starts_with("workload.")
            || key.starts_with("protocol.")
            || key.starts_with("topology.")
            || key == "workload_opts"
            || key == "protocol_opts";
        if !known {
            return Err(format!(
                "unknown parameter `{key}` (known: {}, workload.K, protocol.K, topology.K)",
                PARAMS.join(", ")
            ));
        }
    }
    for (key, values) in &exp.sweep {
        if values.is_empty() {
            return Err(format!("sweep `{key}` has no values"));
        }
    }
    for p in &exp.plots {
        check_plot(&exp, p)?;
    }
    points(&exp, &Overrides::default())?;
    Ok(exp)
}

fn is_metric(name: &str) -> bool {
    METRICS.iter().any(|(m, _)| *m == name)
}

/// One term of a plot expression: a metric, `counters.K` or `model.K`.
fn is_term(t: &str) -> bool {
    let named = |prefix: &str| t.strip_prefix(prefix).is_some_and(|k| !k.is_empty());
    is_metric(t) || named("counters.") || named("model.")
}

/// `A` or `A / B`, each a term.
fn is_expression(e: &str) -> bool {
    match e.split_once('/') {
        Some((a, b)) => is_term(a.trim()) && is_term(b.trim()),
        None => is_term(e.trim()),
    }
}

/// The value of an expression for one run, from its all-regions metrics and counters. A
/// counter the protocol never counted is 0 (if it counted anything); a ratio over 0 is none.
fn evaluate(e: &str, run: &RunOutput, all: &Metrics) -> Option<f64> {
    let term = |t: &str| -> Option<f64> {
        let t = t.trim();
        if let Some(k) = t.strip_prefix("counters.") {
            (!run.counters.is_empty()).then(|| counter(&run.counters, k))
        } else if let Some(k) = t.strip_prefix("model.") {
            run.model.get(k).copied()
        } else {
            all.get(t)
        }
    };
    match e.split_once('/') {
        Some((a, b)) => match (term(a), term(b)) {
            (Some(a), Some(b)) if b != 0.0 => Some(a / b),
            _ => None,
        },
        None => term(e),
    }
}

/// Counter `name`, or with a `*` in it (`*.visible_versions`) the sum of every counter it
/// matches, `*` standing for one dot-free part: protocols that count the same quantity
/// under their own prefixes (`k2.`, `p2pl.`, `mvto_hlc.`) then share one plot line.
fn counter(counters: &BTreeMap<String, u64>, name: &str) -> f64 {
    counters
        .iter()
        .filter(|(k, _)| matches(name, k))
        .map(|(_, v)| *v as f64)
        .sum()
}

/// Whether counter `name` matches `pattern` (itself, or with `*` one dot-free part).
fn matches(pattern: &str, name: &str) -> bool {
    let Some((head, tail)) = pattern.split_once('*') else {
        return pattern == name;
    };
    name.len() >= head.len() + tail.len()
        && name.starts_with(head)
        && name.ends_with(tail)
        && !name[head.len()..name.len() - tail.len()].contains('.')
}

/// The CDF of the histogram counted as `<stem>_le_<N>ms` (delays below N ms) and
/// `<stem>_gt_<N>ms` (the rest): `(N, share below N)` for each bound.
fn histogram_cdf(counters: &BTreeMap<String, f64>, stem: &str) -> Vec<(f64, f64)> {
    let mut buckets: BTreeMap<u64, f64> = BTreeMap::new();
    let mut total = 0.0;
    for (k, v) in counters {
        let bucket = |mark: &str| {
            k.rsplit_once(mark)
                .filter(|(name, _)| matches(stem, name))
                .and_then(|(_, bound)| bound.strip_suffix("ms")?.parse::<u64>().ok())
        };
        if let Some(bound) = bucket("_le_") {
            *buckets.entry(bound).or_default() += v;
            total += v;
        } else if bucket("_gt_").is_some() {
            total += v;
        }
    }
    let mut below = 0.0;
    buckets
        .into_iter()
        .filter(|_| total > 0.0)
        .map(|(bound, n)| {
            below += n;
            (bound as f64, below / total)
        })
        .collect()
}

/// `x`'s alternatives (`protocol.epoch_ms | protocol.closed_ts_interval_ms`): a point
/// takes its x from the first parameter it has, so protocols whose option for the same
/// quantity has another name share an axis.
fn x_alternatives(x: &str) -> impl Iterator<Item = &str> {
    x.split('|').map(str::trim)
}

fn check_plot(exp: &Experiment, p: &PlotSpec) -> Result<(), String> {
    let swept = |k: &str| exp.sweep.contains_key(k);
    // A series is named by one parameter or several (`protocol, workload.rmw_ratio`), each
    // swept or set by an extra point.
    let named =
        |k: &str| k == "protocol" || swept(k) || exp.extra.iter().any(|e| e.contains_key(k));
    if let Some(bad) = p.series.split(',').map(str::trim).find(|k| !named(k)) {
        return Err(format!(
            "plot `{}`: series `{bad}` is neither swept nor set by an extra point",
            p.name
        ));
    }
    match p.kind.as_str() {
        "cdf" => return Ok(()),
        "histogram" => {
            if p.y.strip_prefix("counters.").is_none_or(str::is_empty) {
                return Err(format!(
                    "plot `{}`: a histogram's y must be `counters.STEM` (its buckets \
                     `STEM_le_<N>ms`)",
                    p.name
                ));
            }
            return Ok(());
        }
        "timeline" => {
            if TimeBucket::FIELDS.iter().all(|(f, _)| *f != p.y) {
                let fields: Vec<&str> = TimeBucket::FIELDS.iter().map(|(f, _)| *f).collect();
                return Err(format!(
                    "plot `{}`: a timeline's y must be one of {}",
                    p.name,
                    fields.join(", ")
                ));
            }
            return Ok(());
        }
        "line" => {}
        _ => {
            return Err(format!(
                "plot `{}`: kind must be `line`, `cdf`, `histogram` or `timeline`",
                p.name
            ))
        }
    }
    for (what, e) in [("y", &p.y), ("also", &p.also)] {
        if what == "also" && e.is_empty() {
            continue;
        }
        if !is_expression(e) {
            return Err(format!(
                "plot `{}`: {what} `{e}` is not a metric, `counters.K`, `model.K` or `A / B` of those",
                p.name
            ));
        }
        if !is_metric(e) && (p.region != ALL || p.class.is_some()) {
            return Err(format!(
                "plot `{}`: counters and models are not per region or class; drop `region` and `class`",
                p.name
            ));
        }
    }
    for scale in [Some(p.y_scale), p.also_scale].into_iter().flatten() {
        if !scale.is_finite() || scale <= 0.0 {
            return Err(format!(
                "plot `{}`: y_scale and also_scale must be positive",
                p.name
            ));
        }
    }
    let param = |k: &str| swept(k) || exp.extra.iter().any(|e| e.contains_key(k));
    let params = p.x.contains('|') && x_alternatives(&p.x).all(param);
    if !is_metric(&p.x) && !swept(&p.x) && !params && !is_expression(&p.x) {
        return Err(format!(
            "plot `{}`: x `{}` is neither a metric, a swept parameter nor `counters.K`, \
             `model.K` or `A / B` of those",
            p.name, p.x
        ));
    }
    Ok(())
}

fn text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn duration_ms(key: &str, v: &str) -> Result<u64, String> {
    parse_ms(key, v, false)
}

/// A duration such as `5s`, `500ms` or `20us` in ms; zero only where `zero_ok`.
fn parse_ms(key: &str, v: &str, zero_ok: bool) -> Result<u64, String> {
    let v = v.trim();
    let (number, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (v, 1000.0)
    };
    match number.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (x > 0.0 || (zero_ok && x == 0.0)) => {
            Ok((x * scale).round() as u64)
        }
        _ => Err(format!(
            "`{key}`: `{v}` is not a duration such as `5s` or `500ms`"
        )),
    }
}

/// A per-event service time in ns (`1.25us`, `800ns`, `0.02ms`; a bare number is µs); 0
/// is allowed. Nanoseconds because the calibrated model's cost is not a whole µs.
fn service_ns(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let (number, scale) = if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else {
        (v, 1e3)
    };
    match number.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 && x * scale < 1e12 => Ok((x * scale).round() as u64),
        _ => Err(format!(
            "`service_time`: `{v}` is not a duration such as `1.25us`, `800ns` or `0.1ms`"
        )),
    }
}

/// `topology.K` parameters set keys of the topology's `[generate]` table: they travel in
/// its load name (`edge-regions-full.toml:regions=40`, `Topology::load`).
fn with_generate(topology: String, keys: &BTreeMap<String, String>) -> String {
    if keys.is_empty() {
        return topology;
    }
    let pairs: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{topology}:{}", pairs.join(","))
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.parse::<T>()
        .map_err(|_| format!("`{key}`: `{v}` is not a valid number"))
}

/// The point at one assignment of parameters (base values overridden by swept ones).
fn point(params: &BTreeMap<String, String>, o: &Overrides) -> Result<Point, String> {
    let get = |k: &str, default: &str| params.get(k).cloned().unwrap_or_else(|| default.into());
    let options = |prefix: &str| -> BTreeMap<String, String> {
        params
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
            .collect()
    };
    let load = match get("load", "open").as_str() {
        "open" => Load::Open {
            rate_tps: number("rate", &get("rate", "1000"))?,
            max_outstanding: number("outstanding", &get("outstanding", "100"))?,
        },
        "closed" => Load::Closed {
            clients: number("clients", &get("clients", "2"))?,
        },
        other => return Err(format!("`load`: `{other}` is neither `open` nor `closed`")),
    };
    match load {
        Load::Open {
            rate_tps,
            max_outstanding,
        } if rate_tps.is_nan() || rate_tps <= 0.0 || max_outstanding == 0 => {
            return Err("open load needs rate > 0 and outstanding ≥ 1".into())
        }
        Load::Closed { clients: 0 } => return Err("`clients` must be at least 1".into()),
        _ => {}
    }
    Ok(Point {
        protocol: get("protocol", "tiga"),
        topology: with_generate(get("topology", "gcp-tiga"), &options("topology.")),
        workload: get("workload", "microbench"),
        workload_opts: options("workload."),
        protocol_opts: options("protocol."),
        load,
        clock: params.get("clock").cloned(),
        duration_ms: match o.duration_ms {
            Some(ms) => ms,
            None => duration_ms("duration", &get("duration", "5s"))?,
        },
        drain_ms: match o.drain_ms {
            Some(ms) => ms,
            None => duration_ms("drain", &get("drain", "5s"))?,
        },
        seed: number("seed", &get("seed", "1"))?,
        service_time_ns: match params.get("service_time") {
            None => 0,
            Some(t) => service_ns(t)?,
        },
        workers: match number::<u32>("workers", &get("workers", "1"))? {
            w if (1..=256).contains(&w) => w,
            w => return Err(format!("`workers`: {w} is not between 1 and 256")),
        },
        faults: get("faults", "none"),
        timeline_bucket_ms: duration_ms("timeline_bucket", &get("timeline_bucket", "1s"))?,
        wan_scale: match number::<f64>("wan_scale", &get("wan_scale", "1"))? {
            w if w.is_finite() && w >= 0.0 => w,
            w => return Err(format!("`wan_scale`: {w} is not a number ≥ 0")),
        },
        warmup_ms: match params.get("warmup") {
            None => 0,
            Some(v) => parse_ms("warmup", v, true)?,
        },
        machine_workers: boolean("machine_workers", &get("machine_workers", "false"))?,
        retry_aborted: boolean("retry_aborted", &get("retry_aborted", "false"))?,
        retry_interval_ns: match params.get("retry_interval") {
            None => 0,
            Some(t) => service_ns(t).map_err(|e| e.replace("service_time", "retry_interval"))?,
        },
    })
}

/// A parameter that is `true` or `false`.
fn boolean(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(format!("`{name}`: `{other}` is neither true nor false")),
    }
}

/// Every point of the sweep: the swept parameters' values and the point.
/// Parameter values as text, option tables flattened to `workload.K` / `protocol.K`.
fn flatten(table: &BTreeMap<String, toml::Value>) -> Result<Params, String> {
    let mut flat = Params::new();
    for (k, v) in table {
        match (k.as_str(), v) {
            ("workload_opts" | "protocol_opts", toml::Value::Table(t)) => {
                let prefix = k.trim_end_matches("_opts");
                for (ok, ov) in t {
                    flat.insert(format!("{prefix}.{ok}"), text(ov));
                }
            }
            ("workload_opts" | "protocol_opts", _) => {
                return Err(format!(
                    "`{k}` must be a table such as {{ zipf = \"0.5\" }}"
                ))
            }
            _ => {
                flat.insert(k.clone(), text(v));
            }
        }
    }
    Ok(flat)
}

/// Every point: the sweep's product, then the extra points.
pub fn points(exp: &Experiment, o: &Overrides) -> Result<Vec<(Params, Point)>, String> {
    let base = flatten(&exp.base)?;
    let mut assignments: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
    for (key, values) in &exp.sweep {
        assignments = assignments
            .into_iter()
            .flat_map(|a| {
                values.iter().map(move |v| {
                    let mut a = a.clone();
                    a.insert(key.clone(), text(v));
                    a
                })
            })
            .collect();
    }
    for extra in &exp.extra {
        assignments.push(flatten(extra)?);
    }
    assignments
        .into_iter()
        .map(|swept| {
            let mut all = base.clone();
            all.extend(swept.clone());
            point(&all, o).map(|p| (swept, p))
        })
        .collect()
}

/// Runs every point and repeat on `target`, writes the results and plots into `out`, and
/// returns the points and the files written. `build` names the build doing it (a commit id;
/// `results.json` records it for [`crate::reproduce`]). `progress` receives (point index,
/// points, fraction of this point done).
pub fn run(
    exp: &Experiment,
    target: &mut dyn Target,
    out: &Path,
    o: &Overrides,
    build: &str,
    progress: &mut dyn FnMut(usize, usize, f64),
) -> Result<(Vec<PointResult>, Vec<PathBuf>), String> {
    let points = points(exp, o)?;
    let repeats = o.repeats.unwrap_or(exp.repeats).max(1);
    let total = points.len();
    let mut results = Vec::new();
    for (i, (params, point)) in points.into_iter().enumerate() {
        let mut runs: Vec<RunOutput> = Vec::new();
        for r in 0..repeats {
            let mut p = point.clone();
            p.seed = point.seed + u64::from(r);
            let output = target.run(&p, &mut |f| {
                progress(i, total, (f64::from(r) + f) / f64::from(repeats))
            })?;
            runs.push(output);
        }
        results.push(summarize(exp, params, point, &runs));
        progress(i + 1, total, 0.0);
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut files = write_results(exp, &results, build, out)?;
    if exp.plots.iter().any(|p| p.kind == "timeline") {
        let path = out.join("timeline.csv");
        std::fs::write(&path, timeline_csv(&results))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        files.push(path);
    }
    files.extend(write_plots(exp, &results, out)?);
    Ok((results, files))
}

fn write_plots(
    exp: &Experiment,
    results: &[PointResult],
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for spec in &exp.plots {
        let chart = chart(exp, spec, results);
        files.extend(plot::write(&chart, &out.join(&spec.name))?);
    }
    Ok(files)
}

/// Draws `exp`'s plots again from the `results.json` a previous [`run`] wrote into `out`
/// (after a change to a plot's labels, say), without running anything.
pub fn replot(exp: &Experiment, out: &Path) -> Result<Vec<PathBuf>, String> {
    #[derive(Deserialize)]
    struct Written {
        points: Vec<PointResult>,
    }
    let path = out.join("results.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let written: Written =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    write_plots(exp, &written.points, out)
}

fn summarize(
    exp: &Experiment,
    params: BTreeMap<String, String>,
    point: Point,
    runs: &[RunOutput],
) -> PointResult {
    let rows: Vec<Vec<Metrics>> = runs.iter().map(metrics::of_run).collect();
    let expressions = exp
        .plots
        .iter()
        .filter(|p| p.kind == "line")
        .flat_map(|p| [&p.y, &p.also, &p.x])
        .filter(|e| !e.is_empty() && !is_metric(e) && is_expression(e));
    let mut values = BTreeMap::new();
    for e in expressions {
        let per_run: Vec<f64> = runs
            .iter()
            .zip(&rows)
            .filter_map(|(run, rows)| {
                evaluate(e, run, metrics::find(rows, ALL, None).expect("the all row"))
            })
            .collect();
        if let Some(v) = metrics::median(&mut per_run.clone()) {
            values.insert(e.clone(), v);
        }
    }
    let names: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| r.counters.keys()).collect();
    let counters = names
        .into_iter()
        .filter_map(|k| {
            let mut per_run: Vec<f64> = runs
                .iter()
                .map(|r| *r.counters.get(k).unwrap_or(&0) as f64)
                .collect();
            metrics::median(&mut per_run).map(|v| (k.clone(), v))
        })
        .collect();
    let mut abort_reasons: BTreeMap<String, u64> = BTreeMap::new();
    for r in runs {
        for (k, v) in r.results.abort_reasons() {
            *abort_reasons.entry(k).or_default() += v;
        }
    }
    let violations = runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            r.invariant
                .as_ref()
                .err()
                .map(|e| format!("seed {}: {e}", point.seed + i as u64))
        })
        .collect();
    let mut cdf = BTreeMap::new();
    if let Some(first) = runs.first() {
        for r in &first.results.regions {
            cdf.insert(r.region.clone(), cdf_points(&r.latency_ns));
        }
        let all = first.results.all_regions();
        cdf.insert(ALL.to_string(), cdf_points(&all.latency_ns));
    }
    PointResult {
        params,
        point,
        metrics: metrics::median_of(&rows),
        abort_reasons,
        throttled: runs.iter().map(|r| r.results.throttled).sum::<u64>() / runs.len().max(1) as u64,
        violations,
        cdf,
        counters,
        values,
        timeline: median_timeline(runs),
        marks: runs.first().map(|r| r.marks.clone()).unwrap_or_default(),
    }
}

/// Bucket by bucket, the median of each field over the runs that reached the bucket.
fn median_timeline(runs: &[RunOutput]) -> Vec<TimeBucket> {
    let len = runs.iter().map(|r| r.timeline.len()).max().unwrap_or(0);
    (0..len)
        .map(|i| {
            let same: Vec<&TimeBucket> = runs.iter().filter_map(|r| r.timeline.get(i)).collect();
            let med = |f: &dyn Fn(&TimeBucket) -> Option<f64>| {
                metrics::median(&mut same.iter().filter_map(|b| f(b)).collect::<Vec<_>>())
            };
            let count = |f: &dyn Fn(&TimeBucket) -> u64| {
                med(&|b| Some(f(b) as f64)).map_or(0, |v| v.round() as u64)
            };
            TimeBucket {
                start_s: same[0].start_s,
                committed: count(&|b| b.committed),
                aborted: count(&|b| b.aborted),
                unknown: count(&|b| b.unknown),
                throughput_tps: med(&|b| Some(b.throughput_tps)).unwrap_or(0.0),
                p50_ms: med(&|b| b.p50_ms),
                p99_ms: med(&|b| b.p99_ms),
                clock_spread_ns: med(&|b| b.clock_spread_ns),
                clock_error_p90_ns: med(&|b| b.clock_error_p90_ns),
                clock_error_p99_ns: med(&|b| b.clock_error_p99_ns),
                clock_error_p999_ns: med(&|b| b.clock_error_p999_ns),
            }
        })
        .collect()
}

/// The latency distribution as `(ms, fraction ≤)` at 1% steps.
fn cdf_points(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    (1..=100)
        .map(|q| {
            let q = f64::from(q) / 100.0;
            (h.value_at_quantile(q) as f64 / 1e6, q)
        })
        .collect()
}

fn unit(metric: &str) -> String {
    METRICS
        .iter()
        .find(|(m, _)| *m == metric)
        .map(|(_, label)| label.to_string())
        .unwrap_or_else(|| metric.to_string())
}

fn axis_label(name: &str) -> String {
    match name {
        "rate" => "offered rate per coordinator (txns/s)".into(),
        "outstanding" => "outstanding cap per coordinator (txns)".into(),
        "clients" => "clients per coordinator".into(),
        "workload.zipf" => "Zipf skew θ".into(),
        "protocol.delta_ms" => "Δ (ms)".into(),
        "workload.records" => "data items".into(),
        "workload.rmw_ratio" => "read-modify-write ratio".into(),
        "workload.keys_per_shard" => "data items per partition".into(),
        "protocol.headroom_offset_ms" => "headroom offset Δ (ms)".into(),
        "topology.regions" => "regions".into(),
        other if is_metric(other) => unit(other),
        other => other.to_string(),
    }
}

/// The chart of one plot spec.
pub fn chart(exp: &Experiment, spec: &PlotSpec, results: &[PointResult]) -> plot::Chart {
    // A distribution or a timeline is one series per point: unless the series parameter
    // tells points apart, they are named by all their swept parameters.
    let per_point = spec.kind != "line";
    // An option's value is named by its key (`delta_ms = 7`); a protocol, topology or
    // clock names itself.
    let named = |key: &str, v: &String| match key
        .strip_prefix("protocol.")
        .or_else(|| key.strip_prefix("workload."))
    {
        Some(option) => format!("{option} = {v}"),
        None => v.clone(),
    };
    let parts = |r: &PointResult| -> Vec<String> {
        spec.series
            .split(',')
            .map(str::trim)
            .filter_map(|key| r.params.get(key).map(|v| named(key, v)))
            .collect()
    };
    let label = |r: &PointResult| match parts(r) {
        p if !p.is_empty() => p.join(", "),
        _ if per_point && !r.params.is_empty() => r
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => r.point.protocol.clone(),
    };
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut marks = Vec::new();
    for r in results {
        match spec.kind.as_str() {
            "cdf" => series
                .entry(label(r))
                .or_default()
                .extend(r.cdf.get(&spec.region).cloned().unwrap_or_default()),
            "histogram" => {
                let stem = spec.y.trim_start_matches("counters.");
                series
                    .entry(label(r))
                    .or_default()
                    .extend(histogram_cdf(&r.counters, stem));
            }
            "timeline" => {
                series
                    .entry(label(r))
                    .or_default()
                    .extend(timeline_points(spec, r));
                if marks.is_empty() {
                    marks = r.marks.clone();
                }
            }
            _ => {
                let also_scale = spec.also_scale.unwrap_or(spec.y_scale);
                let ys: Vec<(String, &String, f64)> = if spec.also.is_empty() {
                    vec![(label(r), &spec.y, spec.y_scale)]
                } else {
                    vec![
                        (format!("{} measured", label(r)), &spec.y, spec.y_scale),
                        (
                            format!("{} {}", label(r), spec.also_label),
                            &spec.also,
                            also_scale,
                        ),
                    ]
                };
                for (name, y, scale) in ys {
                    if let Some(p) = line_point(spec, r, y, scale) {
                        series.entry(name).or_default().push(p);
                    }
                }
            }
        }
    }
    let region = if spec.region == ALL {
        "all regions".to_string()
    } else {
        format!("region {}", spec.region)
    };
    let title = if spec.title.is_empty() {
        exp.title.clone()
    } else {
        spec.title.clone()
    };
    // A log axis only when latencies span more than a decade and a half; within less,
    // plotters draws no log ticks and a linear axis reads better.
    let xs = series.values().flatten().map(|p| p.0).filter(|x| *x > 0.0);
    let (lo, hi) = xs.fold((f64::INFINITY, 0.0_f64), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let log_x = (spec.kind == "cdf" || spec.kind == "histogram") && hi / lo > 30.0;
    let (x_label, mut y_label) = match spec.kind.as_str() {
        "cdf" => {
            let scale = if log_x { ", log scale" } else { "" };
            (
                format!("commit latency (ms{scale})"),
                "fraction of committed txns".to_string(),
            )
        }
        "histogram" => {
            let scale = if log_x { ", log scale" } else { "" };
            (
                format!("bucket bound (ms{scale})"),
                "fraction counted below the bound".to_string(),
            )
        }
        "timeline" => {
            let bucket_ms = results.first().map_or(0, |r| r.point.timeline_bucket_ms);
            (
                format!("time since the load started (s; {bucket_ms} ms buckets, by commit time)"),
                TimeBucket::FIELDS
                    .iter()
                    .find(|(f, _)| *f == spec.y)
                    .map_or(spec.y.clone(), |(_, l)| l.to_string()),
            )
        }
        _ => (axis_label(&spec.x), axis_label(&spec.y)),
    };
    if !spec.y_label.is_empty() {
        y_label = spec.y_label.clone();
    }
    let x_label = if spec.x_label.is_empty() {
        x_label
    } else {
        spec.x_label.clone()
    };
    // Series in the order of their parameter's value, numerically when it is a number.
    let mut series: Vec<(String, Vec<(f64, f64)>)> = series.into_iter().collect();
    let value =
        |name: &str| -> Option<f64> { name.split(['=', ' ']).find_map(|word| word.parse().ok()) };
    // Numbered series first, by number; then the others by name (a total order).
    series.sort_by(|a, b| {
        let (x, y) = (value(&a.0), value(&b.0));
        (x.is_none(), x.unwrap_or(0.0))
            .partial_cmp(&(y.is_none(), y.unwrap_or(0.0)))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    plot::Chart {
        title: format!("{title} [{region}]"),
        x_label,
        y_label,
        series,
        log_x,
        marks,
    }
}

/// One point of a line plot: x (a metric or a swept parameter) against expression `y`
/// times `scale`.
fn line_point(spec: &PlotSpec, r: &PointResult, y: &str, scale: f64) -> Option<(f64, f64)> {
    let m = metrics::find(&r.metrics, &spec.region, spec.class.as_deref())?;
    let x = if is_metric(&spec.x) {
        m.get(&spec.x)
    } else if let Some(v) = x_alternatives(&spec.x).find_map(|k| r.params.get(k)) {
        v.parse().ok()
    } else {
        // A measured x (`counters.clock_error_mean_ns`, say), evaluated like y.
        r.values.get(&spec.x).copied()
    }?;
    let y = if is_metric(y) {
        m.get(y)
    } else {
        r.values.get(y).copied()
    }?;
    Some((x, y * scale))
}

/// A point's timeline during the load (the drain only empties the pipeline), each bucket
/// at its midpoint.
fn timeline_points(spec: &PlotSpec, r: &PointResult) -> Vec<(f64, f64)> {
    let bucket_s = r.point.timeline_bucket_ms as f64 / 1000.0;
    let load_s = r.point.duration_ms as f64 / 1000.0;
    r.timeline
        .iter()
        .filter(|b| b.start_s < load_s)
        .filter_map(|b| {
            b.get(&spec.y)
                .map(|y| (b.start_s + bucket_s / 2.0, y * spec.y_scale))
        })
        .collect()
}

fn write_results(
    exp: &Experiment,
    results: &[PointResult],
    build: &str,
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    let json_path = out.join("results.json");
    let json = serde_json::json!({
        "experiment": exp,
        crate::reproduce::BUILD_KEY: build,
        "points": results,
    });
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json).expect("serializable"),
    )
    .map_err(|e| format!("{}: {e}", json_path.display()))?;
    let csv_path = out.join("results.csv");
    std::fs::write(&csv_path, csv(results)).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    Ok(vec![json_path, csv_path])
}

/// One row per point and bucket of time: the swept parameters and the bucket's outcomes.
pub fn timeline_csv(results: &[PointResult]) -> String {
    let keys: Vec<String> = results
        .first()
        .map(|r| r.params.keys().cloned().collect())
        .unwrap_or_default();
    let mut out = keys.join(",");
    if !keys.is_empty() {
        out.push(',');
    }
    out.push_str("start_s,committed,aborted,unknown,throughput_tps,p50_ms,p99_ms\n");
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for r in results {
        let params: Vec<String> = keys
            .iter()
            .map(|k| {
                r.params
                    .get(k)
                    .cloned()
                    .unwrap_or_default()
                    .replace(',', ";")
            })
            .collect();
        for b in &r.timeline {
            let mut row = params.clone();
            row.extend([
                format!("{:.3}", b.start_s),
                b.committed.to_string(),
                b.aborted.to_string(),
                b.unknown.to_string(),
                format!("{:.1}", b.throughput_tps),
                opt(b.p50_ms),
                opt(b.p99_ms),
            ]);
            out.push_str(&row.join(","));
            out.push('\n');
        }
    }
    out
}

/// One row per point, region and class (`all`: every transaction): the swept parameters,
/// the region, every metric.
pub fn csv(results: &[PointResult]) -> String {
    let keys: Vec<String> = results
        .first()
        .map(|r| r.params.keys().cloned().collect())
        .unwrap_or_default();
    let mut out = String::new();
    let header: Vec<String> = keys
        .iter()
        .cloned()
        .chain(["region".to_string()])
        .chain(METRICS.iter().map(|(m, _)| m.to_string()))
        .chain(["unknown", "throttled", "class"].map(String::from))
        .collect();
    out.push_str(&header.join(","));
    out.push('\n');
    for r in results {
        for m in &r.metrics {
            let mut row: Vec<String> = keys
                .iter()
                .map(|k| r.params.get(k).cloned().unwrap_or_default())
                .collect();
            row.push(m.region.clone());
            row.extend(METRICS.iter().map(|(name, _)| match m.get(name) {
                Some(v) => format!("{}", (v * 1e4).round() / 1e4),
                None => String::new(),
            }));
            row.push(m.unknown.to_string());
            row.push(r.throttled.to_string());
            row.push(m.class.clone().unwrap_or_else(|| ALL.to_string()));
            out.push_str(
                &row.iter()
                    .map(|c| c.replace(',', ";"))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
name = "demo"
title = "Demo"
paper = "Tiga Fig. 7"
repeats = 3
[base]
workload = "microbench"
duration = "2s"
workload_opts = { zipf = "0.5" }
[sweep]
protocol = ["a", "b"]
rate = [100, 200]
[[plot]]
name = "lat"
x = "rate"
y = "p50_ms"
[[plot]]
name = "dist"
kind = "cdf"
"#;

    /// A target whose latency is `rate` µs × protocol factor: deterministic, no simulator.
    struct Fake {
        runs: Vec<Point>,
    }

    impl Target for Fake {
        fn name(&self) -> &str {
            "fake"
        }
        fn run(&mut self, p: &Point, progress: &mut dyn FnMut(f64)) -> Result<RunOutput, String> {
            progress(0.5);
            self.runs.push(p.clone());
            let Load::Open { rate_tps, .. } = p.load else {
                panic!()
            };
            let factor = if p.protocol == "a" { 1.0 } else { 2.0 };
            let ms = (rate_tps * factor) as u64 + p.seed; // repeats differ by seed
            let mut region = crate::RegionResults::new("X");
            let committed = meridian_core::txn::Outcome::Committed {
                results: Vec::new(),
                commit_ts: None,
                path: meridian_core::CommitPath::Fast,
            };
            for _ in 0..10 {
                region
                    .totals
                    .record(&committed, ms * 1_000_000, Some(100.0));
            }
            Ok(RunOutput {
                results: crate::Results {
                    regions: vec![region],
                    throttled: 0,
                },
                load_s: p.duration_ms as f64 / 1000.0,
                invariant: if p.protocol == "b" && p.seed == 2 {
                    Err("broken".into())
                } else {
                    Ok(())
                },
                ..RunOutput::default()
            })
        }
    }

    fn run_quietly(
        exp: &Experiment,
        target: &mut dyn Target,
        out: &Path,
    ) -> (Vec<PointResult>, Vec<PathBuf>) {
        run(
            exp,
            target,
            out,
            &Overrides::default(),
            "test",
            &mut |_, _, _| {},
        )
        .unwrap()
    }

    #[test]
    fn a_sweep_runs_every_point_and_repeat_and_writes_results_and_plots() {
        let exp = parse(FILE).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut target = Fake { runs: Vec::new() };
        let (results, files) = run_quietly(&exp, &mut target, dir.path());
        assert_eq!(target.runs.len(), 4 * 3);
        assert_eq!(target.runs[0].workload_opts["zipf"], "0.5");
        assert_eq!(target.runs[0].duration_ms, 2000);
        assert_eq!(target.runs[0].service_time_ns, 0);
        assert_eq!(target.runs[0].warmup_ms, 0, "no warm-up unless asked");
        for (text, ms) in [("1.5s", 1500), ("0s", 0)] {
            let warm = parse(&format!("name = \"w\"\n[base]\nwarmup = \"{text}\"")).unwrap();
            assert_eq!(
                points(&warm, &Overrides::default()).unwrap()[0].1.warmup_ms,
                ms
            );
        }
        let timed = parse("name = \"t\"\n[base]\nservice_time = \"0.02ms\"").unwrap();
        assert_eq!(
            points(&timed, &Overrides::default()).unwrap()[0]
                .1
                .service_time_ns,
            20_000
        );
        let fine = parse("name = \"t\"\n[base]\nservice_time = \"1.25us\"").unwrap();
        assert_eq!(
            points(&fine, &Overrides::default()).unwrap()[0]
                .1
                .service_time_ns,
            1_250
        );
        assert_eq!(results.len(), 4);
        // The median of seeds 1, 2, 3 adds 2 ms.
        let b200 = results
            .iter()
            .find(|r| r.params["protocol"] == "b" && r.params["rate"] == "200")
            .unwrap();
        let all = b200.metrics.iter().find(|m| m.region == ALL).unwrap();
        assert!((all.p50_ms.unwrap() - 402.0).abs() < 0.5, "{all:?}");
        assert_eq!(b200.violations, vec!["seed 2: broken".to_string()]);
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for f in [
            "results.json",
            "results.csv",
            "lat.svg",
            "lat.png",
            "dist.svg",
            "dist.png",
        ] {
            assert!(names.contains(&f.to_string()), "{f} not in {names:?}");
        }
        let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
        assert!(csv.starts_with("protocol,rate,region,committed"), "{csv}");
        assert_eq!(csv.lines().count(), 1 + 4 * 2);
        let chart = chart(&exp, &exp.plots[0], &results);
        assert_eq!(chart.series.len(), 2);
        let b: Vec<(f64, f64)> = chart.series[1].1.clone();
        assert_eq!(b.len(), 2);
        // HDR histograms keep 3 significant digits.
        assert!(
            (b[0].1 - 202.0).abs() < 0.5 && (b[1].1 - 402.0).abs() < 0.5,
            "{b:?}"
        );
    }

    /// A target whose counters, model and timeline follow `delta` (a protocol option).
    struct Counting;

    impl Target for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn run(&mut self, p: &Point, _: &mut dyn FnMut(f64)) -> Result<RunOutput, String> {
            let delta: u64 = p.protocol_opts["delta"].parse().unwrap();
            let timeline = (0..4)
                .map(|i| TimeBucket {
                    start_s: f64::from(i),
                    committed: if i == 2 { 0 } else { 100 + delta },
                    throughput_tps: if i == 2 { 0.0 } else { 100.0 },
                    ..TimeBucket::default()
                })
                .collect();
            Ok(RunOutput {
                counters: [
                    ("txns".into(), 100),
                    ("delayed".into(), 10 * delta + p.seed),
                ]
                .into_iter()
                .collect(),
                model: [("p".to_string(), 0.5)].into_iter().collect(),
                timeline,
                marks: vec![(2.0, p.faults.clone())],
                load_s: 1.0,
                ..RunOutput::default()
            })
        }
    }

    #[test]
    fn counters_models_extra_points_and_timelines_reach_the_plots() {
        let exp = parse(
            r#"
name = "c"
repeats = 3
[base]
duration = "3s"
faults = "crash:shard0/replica0@2s"
timeline_bucket = "1s"
[sweep]
"protocol.delta" = [1, 2]
[[extra]]
"protocol.delta" = 10
[[plot]]
name = "ratio"
x = "protocol.delta"
y = "counters.delayed / counters.txns"
also = "model.p"
y_scale = 100
also_scale = 10
y_label = "delayed (%)"
series = "protocol.delta"
[[plot]]
name = "over-time"
kind = "timeline"
y = "throughput_tps"
"#,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (results, files) = run_quietly(&exp, &mut Counting, dir.path());
        assert_eq!(results.len(), 3, "two swept points and one extra");
        assert_eq!(results[2].params["protocol.delta"], "10");
        // Seeds 1, 2, 3: delayed = 10·delta + seed, median seed 2.
        let ratio = &results[1].values["counters.delayed / counters.txns"];
        assert!((ratio - 0.22).abs() < 1e-9, "{ratio}");
        assert_eq!(results[1].counters["delayed"], 22.0);
        let chart = chart(&exp, &exp.plots[0], &results);
        let names: Vec<&str> = chart.series.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "delta = 1 measured",
                "delta = 1 model",
                "delta = 2 measured",
                "delta = 2 model",
                "delta = 10 measured",
                "delta = 10 model"
            ],
            "named by the option, in numeric order"
        );
        assert_eq!(chart.series[2].1, vec![(2.0, 22.0)]);
        assert_eq!(
            chart.series[3].1,
            vec![(2.0, 5.0)],
            "the model at its own scale"
        );
        assert_eq!(chart.y_label, "delayed (%)");
        let timeline = chart_of(&exp, "over-time", &results);
        assert_eq!(timeline.series[2].0, "protocol.delta=10");
        // Buckets during the 3 s load only, at their midpoints; the fault is marked.
        assert_eq!(
            timeline.series[0].1,
            vec![(0.5, 100.0), (1.5, 100.0), (2.5, 0.0)]
        );
        assert_eq!(
            timeline.marks,
            vec![(2.0, "crash:shard0/replica0@2s".to_string())]
        );
        assert!(
            timeline.x_label.contains("1000 ms buckets"),
            "{}",
            timeline.x_label
        );
        let csv = std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap();
        assert!(csv.starts_with("protocol.delta,start_s,committed"), "{csv}");
        assert_eq!(csv.lines().count(), 1 + 3 * 4);
        assert!(csv.contains("\n10,1.000,110,"), "{csv}");
        assert!(files.iter().any(|f| f.ends_with("over-time.png")));
        std::fs::remove_file(dir.path().join("ratio.svg")).unwrap();
        let again = replot(&exp, dir.path()).unwrap();
        assert_eq!(again.len(), 4, "{again:?}");
        let svg = std::fs::read_to_string(dir.path().join("ratio.svg")).unwrap();
        assert!(
            svg.contains("delta = 10 model"),
            "the replot has every series"
        );
    }

    /// A target counting `<protocol>.sum` = 10 × its one option and `<protocol>.n` = 2,
    /// and a deeper `<protocol>.deep.n` a one-part `*` must not match.
    struct Prefixed;

    impl Target for Prefixed {
        fn name(&self) -> &str {
            "prefixed"
        }
        fn run(&mut self, p: &Point, _: &mut dyn FnMut(f64)) -> Result<RunOutput, String> {
            let v: u64 = p.protocol_opts.values().next().unwrap().parse().unwrap();
            let counters = [
                (format!("{}.sum", p.protocol), 10 * v),
                (format!("{}.n", p.protocol), 2),
                (format!("{}.deep.n", p.protocol), 1000),
            ];
            Ok(RunOutput {
                counters: counters.into_iter().collect(),
                load_s: 1.0,
                ..RunOutput::default()
            })
        }
    }

    #[test]
    fn wildcard_counters_and_x_alternatives_put_protocols_on_one_line() {
        let exp = parse(
            r#"
name = "w"
[base]
protocol = "pa"
[sweep]
"protocol.a_ms" = [1, 2]
[[extra]]
protocol = "pb"
"protocol.b_ms" = 3
[[plot]]
name = "mean"
x = "protocol.a_ms | protocol.b_ms"
x_label = "interval (ms)"
y = "counters.*.sum / counters.*.n"
"#,
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (results, _) = run_quietly(&exp, &mut Prefixed, dir.path());
        let chart = chart_of(&exp, "mean", &results);
        assert_eq!(chart.x_label, "interval (ms)");
        assert_eq!(
            chart.series,
            vec![
                ("pa".to_string(), vec![(1.0, 5.0), (2.0, 10.0)]),
                ("pb".to_string(), vec![(3.0, 15.0)]),
            ],
            "each protocol's own counters, each point's own x parameter"
        );
        let mut counters = BTreeMap::new();
        for (k, v) in [
            ("k2.delay_le_10ms", 1.0),
            ("k2.delay_le_100ms", 2.0),
            ("k2.delay_gt_100ms", 1.0),
            ("k2.deep.delay_le_10ms", 50.0),
            ("k2.delay_us_sum", 50.0),
        ] {
            counters.insert(k.to_string(), v);
        }
        assert_eq!(
            histogram_cdf(&counters, "*.delay"),
            vec![(10.0, 0.25), (100.0, 0.75)],
            "cumulative, over every bucket including the last open one"
        );
        let bad = "name = \"x\"\n[sweep]\n\"protocol.a\" = [1]\n[[plot]]\nname = \"p\"\n\
                   x = \"protocol.a | protocol.c\"\ny = \"p50_ms\"";
        assert!(parse(bad).unwrap_err().contains("neither a metric"));
    }

    fn chart_of(exp: &Experiment, name: &str, results: &[PointResult]) -> plot::Chart {
        let spec = exp.plots.iter().find(|p| p.name == name).unwrap();
        chart(exp, spec, results)
    }

    #[test]
    fn bad_files_are_errors_naming_the_problem() {
        for (bad, needle) in [
            (
                "name = \"x\"\n[sweep]\nrat = [1]",
                "unknown parameter `rat`",
            ),
            ("name = \"x\"\nrepeats = 0", "repeats"),
            ("name = \"x\"\n[base]\nload = \"half\"", "`half`"),
            ("name = \"x\"\n[base]\nduration = \"soon\"", "`soon`"),
            (
                "name = \"x\"\n[base]\nservice_time = \"-3us\"",
                "`service_time`",
            ),
            (
                "name = \"x\"\n[[plot]]\nname = \"p\"\nx = \"rate\"\ny = \"p50\"",
                "`p50` is not a metric",
            ),
            (
                "name = \"x\"\n[[plot]]\nname = \"p\"\nx = \"rate\"\ny = \"p50_ms\"",
                "neither a metric",
            ),
            ("name = \"../x\"", "plain file name"),
            (
                "name = \"x\"\n[[plot]]\nname = \"p\"\nkind = \"timeline\"\ny = \"p90_ms\"",
                "a timeline's y",
            ),
            (
                "name = \"x\"\n[[plot]]\nname = \"p\"\nx = \"rate\"\ny = \"counters.\"",
                "`counters.` is not a metric",
            ),
            (
                "name = \"x\"\n[[plot]]\nname = \"p\"\nx = \"throughput_tps\"\ny = \"counters.a\"\nregion = \"SC\"",
                "not per region",
            ),
            ("name = \"x\"\n[[extra]]\nrat = 1", "unknown parameter `rat`"),
            ("name = \"x\"\n[base]\nwan_scale = -1", "`wan_scale`"),
            ("name = \"x\"\n[base]\nwarmup = \"-3s\"", "`warmup`"),
            ("name = \"x\"\ncolour = 1", "colour"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    /// `topology.K` sets a key of the topology's `[generate]` table: it travels in the
    /// point's topology name, which `Topology::load` reads, and labels the x axis.
    #[test]
    fn topology_parameters_reach_the_topology_name() {
        let exp = parse(
            "name = \"x\"\n[base]\ntopology = \"t.toml\"\n[sweep]\n\"topology.regions\" = [10, 100]\n",
        )
        .unwrap();
        let swept = points(&exp, &Overrides::default()).unwrap();
        let names: Vec<&str> = swept.iter().map(|(_, p)| p.topology.as_str()).collect();
        assert_eq!(names, ["t.toml:regions=10", "t.toml:regions=100"]);
        assert_eq!(axis_label("topology.regions"), "regions");
        let plain = parse("name = \"x\"\n[base]\ntopology = \"local\"\n").unwrap();
        assert_eq!(
            points(&plain, &Overrides::default()).unwrap()[0].1.topology,
            "local"
        );
    }
}
