//! `meridian experiment run FILE`: runs an experiment file (DESIGN §10) and writes
//! `results/<name>/` (JSON, CSV, an SVG and a PNG per plot), with a progress bar.
//!
//! Two targets, chosen by the file's `target`: `sim` (default) runs each point in the
//! deterministic simulator, with its fault schedule, its timeline and the protocol's
//! counters (and the protocol's model of the run, its optional `Protocol::predict` hook —
//! Clock-SI's §IV on MicroBench — as `model.*`); `runtime` runs it on the tokio runtime with every node in this
//! process (`wan_scale` scales the emulated WAN; real time, so keep points short).

use crate::bad_input;
use crate::load::{run_point, PointRun};
use crate::protocols;
use crate::runtime::ClusterArgs;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use meridian_bench::experiment::{self, Overrides};
use meridian_bench::{Load, Point, Results, RunOutput, Target, TimeBucket};
use meridian_core::node::RunSummary;
use meridian_core::time::{parse_duration_ns, NS_PER_MS, NS_PER_S};
use meridian_core::{Cluster, Protocol, ProtocolConfig, Topology};
use meridian_server::LoadOptions;
use meridian_sim::{FaultPlan, OpenLoop, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    command: ExperimentCommand,
}

#[derive(Subcommand, Debug)]
enum ExperimentCommand {
    /// Run every point of an experiment file and write results and plots.
    Run(RunArgs),
    /// Draw an experiment's plots again from the results.json of an earlier run.
    Plot(PlotArgs),
    /// Run every experiment of the reproduction manifest on this build and write the
    /// reproduction page from their results (every number a placeholder filled from them).
    Reproduce(ReproduceArgs),
}

#[derive(Args, Debug)]
struct ReproduceArgs {
    /// The experiments to run and their overrides.
    #[arg(long, default_value = "experiments/reproduce.toml")]
    manifest: PathBuf,
    /// The page's template: Markdown with `{{EXPERIMENT key=value @REGION METRIC}}` placeholders.
    #[arg(long, default_value = "docs/REPRODUCTION.template.md")]
    template: PathBuf,
    /// The page to write.
    #[arg(long, default_value = "docs/REPRODUCTION.md")]
    page: PathBuf,
    /// Where the results go (`<results>/<name>/`).
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// Run only the manifest's experiments with these names (the rest must already have
    /// results from this build).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Run nothing; render from the results already written by this build.
    #[arg(long)]
    render_only: bool,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
struct PlotArgs {
    /// The experiment file (`experiments/*.toml`).
    file: PathBuf,
    /// The folder of the earlier run (default: `results/<name>`).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The experiment file (`experiments/*.toml`).
    file: PathBuf,
    /// Output folder (default: `results/<name>`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Override every point's load duration (e.g. `1s`, for a quick look).
    #[arg(long)]
    duration: Option<String>,
    /// Override every point's drain.
    #[arg(long)]
    drain: Option<String>,
    /// Override the number of repeats.
    #[arg(long)]
    repeats: Option<u32>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

pub fn main(args: ExperimentArgs) -> ExitCode {
    match args.command {
        ExperimentCommand::Run(run) => run_file(run),
        ExperimentCommand::Plot(plot) => plot_file(plot),
        ExperimentCommand::Reproduce(args) => reproduce(args),
    }
}

fn plot_file(args: PlotArgs) -> ExitCode {
    let exp = match experiment::load(&args.file) {
        Ok(e) => e,
        Err(e) => return bad_input(e),
    };
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
    match experiment::replot(&exp, &out) {
        Ok(files) => {
            for f in files {
                outln!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => bad_input(e),
    }
}

fn ms(flag: &str, text: &Option<String>) -> Result<Option<u64>, String> {
    text.as_deref()
        .map(|t| {
            parse_duration_ns(t)
                .map(|ns| (ns / NS_PER_MS).max(1))
                .map_err(|e| format!("{flag}: {e}"))
        })
        .transpose()
}

fn run_file(args: RunArgs) -> ExitCode {
    let overrides = match overrides(&args.duration, &args.drain, args.repeats) {
        Ok(o) => o,
        Err(e) => return bad_input(e),
    };
    let mut sim = Targets::sim();
    match run_experiment(
        &args.file,
        args.out,
        &overrides,
        args.quiet,
        &build_id(),
        &mut sim,
    ) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => bad_input(e),
    }
}

fn overrides(
    duration: &Option<String>,
    drain: &Option<String>,
    repeats: Option<u32>,
) -> Result<Overrides, String> {
    Ok(Overrides {
        duration_ms: ms("--duration", duration)?,
        drain_ms: ms("--drain", drain)?,
        repeats,
    })
}

/// Runs one experiment file into `out` (default `results/<name>`) and prints its summary;
/// `Ok(false)` if a point reported a violation. Simulator points run on `sim`, whose memo
/// a caller running several files shares (see [`Targets::Sim`]).
fn run_experiment(
    file: &std::path::Path,
    out: Option<PathBuf>,
    overrides: &Overrides,
    quiet: bool,
    build: &str,
    sim: &mut Targets,
) -> Result<bool, String> {
    let exp = experiment::load(file)?;
    let out = out.unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(1000)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] ({elapsed})")
            .expect("template")
            .progress_chars("=> "),
    );
    let mut runtime = Targets::Runtime;
    let target: &mut Targets = match exp.target.as_str() {
        "sim" => sim,
        "runtime" => &mut runtime,
        other => {
            return Err(format!(
                "{}: `target` must be `sim` or `runtime`, not `{other}`",
                file.display()
            ))
        }
    };
    let result = experiment::run(&exp, target, &out, overrides, build, &mut |i, n, f| {
        bar.set_position(((i as f64 + f) / n.max(1) as f64 * 1000.0) as u64);
        bar.set_message(format!("{}: point {}/{n}", exp.name, (i + 1).min(n)));
    });
    bar.finish_and_clear();
    let (results, files) = result?;
    outln!(
        "{} ({}) on the {}: {} points",
        exp.name,
        exp.paper,
        target.name(),
        results.len()
    );
    for r in &results {
        print_point(r);
    }
    for f in &files {
        outln!("wrote {}", f.display());
    }
    Ok(results.iter().all(|r| r.violations.is_empty()))
}

fn print_point(r: &meridian_bench::experiment::PointResult) {
    let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if let Some(all) = r
        .metrics
        .iter()
        .find(|m| m.region == meridian_bench::metrics::ALL)
    {
        outln!(
            "  {:<40} {:>9.0} txns/s  p50 {:>8} ms  p99 {:>8} ms  aborts {:>6}",
            params.join(" "),
            all.throughput_tps,
            fmt(all.p50_ms),
            fmt(all.p99_ms),
            fmt(all.abort_ratio.map(|a| a * 100.0)).to_string() + "%",
        );
    }
    for v in &r.violations {
        outln!("  VIOLATION at {}: {v}", params.join(" "));
    }
}

/// The paths whose content decides what the experiments measure.
const SOURCE_PATHS: [&str; 5] = [
    "crates",
    "experiments",
    "topologies",
    "Cargo.toml",
    "Cargo.lock",
];

/// This build's name for `results.json`: the commit, with `-dirty-HASH` (FNV-1a of the diff
/// over [`SOURCE_PATHS`]) when those paths differ from it; `unknown` outside a git checkout.
fn build_id() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| o.stdout)
    };
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let commit = String::from_utf8_lossy(&commit).trim().to_string();
    let mut diff_args = vec!["diff", "HEAD", "--"];
    diff_args.extend(SOURCE_PATHS);
    match git(&diff_args) {
        Some(diff) if diff.is_empty() => commit,
        Some(diff) => {
            let hash = diff.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
            format!("{commit}-dirty-{:08x}", hash as u32)
        }
        None => format!("{commit}-dirty"),
    }
}

fn reproduce(args: ReproduceArgs) -> ExitCode {
    match reproduce_page(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => bad_input(e),
    }
}

fn reproduce_page(args: &ReproduceArgs) -> Result<bool, String> {
    use meridian_bench::reproduce::{self, Manifest, Written};
    let manifest = Manifest::load(&args.manifest)?;
    let template = std::fs::read_to_string(&args.template)
        .map_err(|e| format!("{}: {e}", args.template.display()))?;
    reproduce::placeholders(&template)?;
    let build = build_id();
    let mut clean = true;
    let mut names = Vec::new();
    // One memo for the whole manifest: Figs. 7 and 8 and Table 1 plot the same points.
    let mut sim = Targets::sim();
    for run in &manifest.runs {
        let exp = experiment::load(&run.file)?;
        names.push(exp.name.clone());
        if args.render_only || !(args.only.is_empty() || args.only.contains(&exp.name)) {
            continue;
        }
        let o = overrides(&run.duration, &run.drain, run.repeats)?;
        let out = Some(args.results.join(&exp.name));
        clean &= run_experiment(&run.file, out, &o, args.quiet, &build, &mut sim)?;
    }
    for name in &args.only {
        if !names.contains(name) {
            return Err(format!("--only {name}: not in {}", args.manifest.display()));
        }
    }
    let page = reproduce::render(&template, &build, &mut |name| {
        if !names.iter().any(|n| n == name) {
            return Err(format!("{name}: not in {}", args.manifest.display()));
        }
        Written::read(&args.results.join(name))
    })?;
    std::fs::write(&args.page, page).map_err(|e| format!("{}: {e}", args.page.display()))?;
    outln!("wrote {} from build {build}", args.page.display());
    Ok(clean)
}

fn fmt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// Where `meridian experiment` runs points: the simulator, or the runtime with every node
/// in this process ([`on_runtime`]).
enum Targets {
    /// The simulator is deterministic, so a point (seed included) measured once is the
    /// same when another experiment asks for it again: `memo` keeps each point's output by
    /// the point's full description, and `experiment reproduce` runs Figs. 7 and 8 and
    /// Table 1, which share their points, once.
    Sim {
        memo: std::collections::HashMap<String, RunOutput>,
    },
    Runtime,
}

impl Targets {
    fn sim() -> Targets {
        Targets::Sim {
            memo: std::collections::HashMap::new(),
        }
    }
}

impl Target for Targets {
    fn name(&self) -> &str {
        match self {
            Targets::Sim { .. } => "sim",
            Targets::Runtime => "runtime",
        }
    }

    fn run(&mut self, point: &Point, progress: &mut dyn FnMut(f64)) -> Result<RunOutput, String> {
        let protocol = protocols::find(&point.protocol)?;
        match self {
            Targets::Sim { memo } => {
                let key = format!("{point:?}");
                if let Some(output) = memo.get(&key) {
                    progress(1.0);
                    return Ok(output.clone());
                }
                let output = (protocol.sim_point)(point, progress)?;
                memo.insert(key, output.clone());
                Ok(output)
            }
            Targets::Runtime => (protocol.runtime_point)(point, progress),
        }
    }
}

/// The point's protocol options as `key=value,…`.
fn protocol_opts(point: &Point) -> String {
    let pairs: Vec<String> = point
        .protocol_opts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    pairs.join(",")
}

pub(crate) fn simulate<P: Protocol>(
    point: &Point,
    progress: &mut dyn FnMut(f64),
) -> Result<RunOutput, String> {
    let mut topology = Topology::load(&point.topology).map_err(|e| e.to_string())?;
    if let Some(name) = &point.clock {
        let profile = topology
            .clock_profile(name)
            .ok_or_else(|| format!("unknown clock profile `{name}`"))?;
        topology.set_all_clocks(profile);
    }
    let config = ProtocolConfig::parse(&protocol_opts(point))
        .map_err(|e| format!("protocol options: {e}"))?;
    let setup = meridian_sim::setup::<P>(topology, config, meridian_workload::procedures())?;
    let workload_options = WorkloadOptions {
        options: point.workload_opts.clone(),
    };
    let mut workload =
        meridian_workload::build(&point.workload, &setup.cluster, &workload_options)?;
    let (clients, open_loop) = match point.load {
        Load::Closed { clients } => (clients, None),
        Load::Open {
            rate_tps,
            max_outstanding,
        } => (
            max_outstanding,
            Some(OpenLoop {
                rate_tps,
                max_outstanding,
            }),
        ),
    };
    let options = SimOptions {
        seed: point.seed,
        // A warm-up runs the load before `duration` is measured, as on the runtime; in
        // the simulator the measured transactions are those that finish during
        // `duration` (steady state: no ramp-up, no backlog finished in the drain).
        duration_ns: (point.warmup_ms + point.duration_ms) * NS_PER_MS,
        drain_ns: point.drain_ms * NS_PER_MS,
        steady_from_ns: (point.warmup_ms > 0).then_some(point.warmup_ms * NS_PER_MS),
        clients_per_coordinator: clients,
        record_history: false,
        open_loop,
        service_time_ns: point.service_time_ns,
        workers: point.workers,
        machine_workers: point.machine_workers,
        faults: FaultPlan::parse(&point.faults, &setup.cluster)
            .map_err(|e| format!("`faults`: {e}"))?,
        timeline_bucket_ns: point.timeline_bucket_ms * NS_PER_MS,
        retry_aborted: point.retry_aborted,
        retry_interval_ns: point.retry_interval_ns,
        ..SimOptions::default()
    };
    let end_ns = (options.duration_ns + options.drain_ns) as f64;
    let report = meridian_sim::run::<P>(&setup, workload.as_mut(), &options, &mut |p| {
        progress(p.virtual_ns as f64 / end_ns)
    });
    Ok(RunOutput {
        results: Results {
            regions: report.regions.clone(),
            throttled: report.throttled,
        },
        load_s: point.duration_ms as f64 / 1000.0,
        invariant: report.invariant.clone(),
        timeline: report
            .timeline
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| TimeBucket {
                start_s: b.start_ms / 1000.0,
                committed: b.committed,
                aborted: b.aborted,
                unknown: b.unknown,
                throughput_tps: b.throughput_tps,
                p50_ms: b.p50_ms,
                p99_ms: b.p99_ms,
                // The clock sampler buckets as the timeline does (same length and start).
                clock_spread_ns: clock_bucket_ns(&report, i, |c| c.spread_ms),
                clock_error_p90_ns: clock_bucket_ns(&report, i, |c| c.p90_ms),
                clock_error_p99_ns: clock_bucket_ns(&report, i, |c| c.p99_ms),
                clock_error_p999_ns: clock_bucket_ns(&report, i, |c| c.p999_ms),
            })
            .collect(),
        marks: fault_marks(&point.faults),
        counters: with_clock_error(&report),
        model: P::predict(&run_summary(point, &setup.cluster, &report), &setup.options),
    })
}

/// A field of the clock sampler's bucket `i`, in ns.
fn clock_bucket_ns(
    report: &SimReport,
    i: usize,
    field: impl Fn(&meridian_sim::ClockErrorBucket) -> f64,
) -> Option<f64> {
    let bucket = report.clock_error.buckets.get(i)?;
    Some(field(bucket) * NS_PER_MS as f64)
}

/// The protocol's counters plus the run's measured clock error, in ns (`clock_error_mean_ns`,
/// `_p99_ns`, `_max_ns`, `clock_spread_max_ns`), so a plot can put them on an axis.
fn with_clock_error(report: &meridian_sim::SimReport) -> std::collections::BTreeMap<String, u64> {
    let mut counters: std::collections::BTreeMap<String, u64> = report
        .counters
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    let e = &report.clock_error;
    let ns = |ms: f64| (ms * NS_PER_MS as f64).round() as u64;
    for (name, ms) in [
        ("clock_error_mean_ns", e.mean_ms),
        ("clock_error_p99_ns", e.p99_ms),
        ("clock_error_max_ns", e.max_ms),
        ("clock_spread_max_ns", e.spread_max_ms),
    ] {
        counters.insert(name.to_string(), ns(ms));
    }
    counters
}

/// Each scheduled fault's time and text (`crash:shard0/replica0@10s`).
fn fault_marks(spec: &str) -> Vec<(f64, String)> {
    spec.split(',')
        .filter_map(|item| {
            let (_, at) = item.trim().rsplit_once('@')?;
            let ns = parse_duration_ns(at).ok()?;
            Some((ns as f64 / NS_PER_S as f64, item.trim().to_string()))
        })
        .collect()
}

/// What a simulated point measured, for the protocol's model ([`Protocol::predict`]).
fn run_summary<'a>(point: &'a Point, cluster: &'a Cluster, report: &SimReport) -> RunSummary<'a> {
    let latency_sum_ms: f64 = report
        .regions
        .iter()
        .filter_map(|r| r.mean_ms().map(|m| m * r.committed as f64))
        .sum();
    RunSummary {
        cluster,
        workload: &point.workload,
        workload_options: &point.workload_opts,
        committed: report.committed,
        load_s: point.duration_ms as f64 / 1000.0,
        mean_latency_ms: latency_sum_ms / report.committed.max(1) as f64,
    }
}

/// A point on the runtime: every node in this process on tokio, with the topology's WAN
/// emulated (scaled by `wan_scale`), in real time. Open load offers `rate` per
/// coordinator; closed load keeps `clients` in flight per coordinator. Faults, clock
/// overrides and service times are the simulator's: a point asking for them is refused.
pub(crate) fn on_runtime<P: Protocol>(
    point: &Point,
    progress: &mut dyn FnMut(f64),
) -> Result<RunOutput, String>
where
    P::Node: Send,
{
    if point.faults != "none"
        || point.clock.is_some()
        || point.service_time_ns > 0
        || point.workers != 1
        || point.machine_workers
        || point.retry_aborted
        || point.retry_interval_ns > 0
    {
        return Err(
            "the runtime target takes no `faults`, `clock`, `service_time`, `workers`, \
             `machine_workers`, `retry_aborted` or `retry_interval` (simulator only)"
                .into(),
        );
    }
    let cluster = ClusterArgs {
        topology: point.topology.clone(),
        protocol: point.protocol.clone(),
        protocol_opts: protocol_opts(point),
        wan_scale: point.wan_scale,
    };
    let coordinators = cluster.setup::<P>()?.cluster.coordinators.len();
    let (rate_per_s, max_outstanding) = match point.load {
        Load::Open {
            rate_tps,
            max_outstanding,
        } => (Some(rate_tps * coordinators as f64), max_outstanding),
        Load::Closed { clients } => (None, clients),
    };
    let duration = Duration::from_millis(point.duration_ms);
    let tick = Duration::from_millis(point.timeline_bucket_ms.max(1));
    let run = PointRun {
        cluster,
        workload: point.workload.clone(),
        workload_options: WorkloadOptions {
            options: point.workload_opts.clone(),
        },
        options: LoadOptions {
            duration,
            warmup: Duration::from_millis(point.warmup_ms),
            rate_per_s,
            max_outstanding: max_outstanding as usize,
            record_history: false,
            seed: point.seed,
        },
        timeout: Duration::from_secs(5),
        tick,
    };
    let mut timeline = Vec::new();
    let report = run_point::<P>(run, &mut |elapsed, interval| {
        progress((elapsed.as_secs_f64() / duration.as_secs_f64()).min(1.0));
        timeline.push(runtime_bucket(timeline.len(), tick, &interval));
    })?;
    Ok(RunOutput {
        results: report.results,
        load_s: duration.as_secs_f64(),
        invariant: report.invariant.clone(),
        timeline,
        ..RunOutput::default()
    })
}

/// The figures of one tick of the runtime's load as a timeline bucket.
fn runtime_bucket(index: usize, tick: Duration, interval: &Results) -> TimeBucket {
    let all = interval.all_regions();
    let committed = all.committed;
    TimeBucket {
        start_s: index as f64 * tick.as_secs_f64(),
        committed,
        aborted: all.aborted,
        unknown: all.unknown,
        throughput_tps: committed as f64 / tick.as_secs_f64(),
        p50_ms: all.percentile_ms(50.0),
        p99_ms: all.percentile_ms(99.0),
        ..TimeBucket::default()
    }
}
