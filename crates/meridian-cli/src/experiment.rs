//! `meridian experiment run FILE`: runs an experiment file (DESIGN §10) on the simulator
//! and writes `results/<name>/` (JSON, CSV, an SVG and a PNG per plot), with a progress bar.

use crate::bad_input;
use crate::protocols::with_protocol;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use meridian_bench::experiment::{self, Overrides};
use meridian_bench::{Load, Point, RunOutput, Sample, Target};
use meridian_core::time::{parse_duration_ns, NS_PER_MS};
use meridian_core::topology::ClockProfile;
use meridian_core::{Protocol, ProtocolConfig, Topology};
use meridian_sim::{OpenLoop, SimOptions};
use meridian_workload::WorkloadOptions;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    command: ExperimentCommand,
}

#[derive(Subcommand, Debug)]
enum ExperimentCommand {
    /// Run every point of an experiment file and write results and plots.
    Run(RunArgs),
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
    let exp = match experiment::load(&args.file) {
        Ok(e) => e,
        Err(e) => return bad_input(e),
    };
    let overrides = match (ms("--duration", &args.duration), ms("--drain", &args.drain)) {
        (Ok(duration_ms), Ok(drain_ms)) => Overrides {
            duration_ms,
            drain_ms,
            repeats: args.repeats,
        },
        (Err(e), _) | (_, Err(e)) => return bad_input(e),
    };
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("results").join(&exp.name));
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(1000)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] ({elapsed})")
            .expect("template")
            .progress_chars("=> "),
    );
    let mut target = SimTarget;
    let result = experiment::run(&exp, &mut target, &out, &overrides, &mut |i, n, f| {
        bar.set_position(((i as f64 + f) / n.max(1) as f64 * 1000.0) as u64);
        bar.set_message(format!("{}: point {}/{n}", exp.name, (i + 1).min(n)));
    });
    bar.finish_and_clear();
    let (results, files) = match result {
        Ok(r) => r,
        Err(e) => return bad_input(e),
    };
    println!("{} ({}): {} points", exp.name, exp.paper, results.len());
    for r in &results {
        let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(all) = r
            .metrics
            .iter()
            .find(|m| m.region == meridian_bench::metrics::ALL)
        {
            println!(
                "  {:<40} {:>9.0} txns/s  p50 {:>8} ms  p99 {:>8} ms  aborts {:>6}",
                params.join(" "),
                all.throughput_tps,
                fmt(all.p50_ms),
                fmt(all.p99_ms),
                fmt(all.abort_ratio.map(|a| a * 100.0)).to_string() + "%",
            );
        }
        for v in &r.violations {
            println!("  VIOLATION at {}: {v}", params.join(" "));
        }
    }
    for f in &files {
        println!("wrote {}", f.display());
    }
    if results.iter().any(|r| !r.violations.is_empty()) {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn fmt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// The simulator as a benchmark target.
struct SimTarget;

impl Target for SimTarget {
    fn name(&self) -> &str {
        "sim"
    }

    fn run(&mut self, point: &Point, progress: &mut dyn FnMut(f64)) -> Result<RunOutput, String> {
        with_protocol!(point.protocol.as_str(), P => simulate::<P>(point, progress), Err(format!("unknown protocol `{}`", point.protocol)))
    }
}

fn simulate<P: Protocol>(
    point: &Point,
    progress: &mut dyn FnMut(f64),
) -> Result<RunOutput, String> {
    let mut topology = Topology::load(&point.topology).map_err(|e| e.to_string())?;
    if let Some(name) = &point.clock {
        let profile =
            ClockProfile::builtin(name).ok_or_else(|| format!("unknown clock profile `{name}`"))?;
        topology.set_all_clocks(profile);
    }
    let options_text: Vec<String> = point
        .protocol_opts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let config = ProtocolConfig::parse(&options_text.join(","))
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
        duration_ns: point.duration_ms * NS_PER_MS,
        drain_ns: point.drain_ms * NS_PER_MS,
        clients_per_coordinator: clients,
        record_history: false,
        open_loop,
        service_time_ns: point.service_time_us * 1_000,
        ..SimOptions::default()
    };
    let end_ns = (options.duration_ns + options.drain_ns) as f64;
    let report = meridian_sim::run::<P>(&setup, workload.as_mut(), &options, &mut |p| {
        progress(p.virtual_ns as f64 / end_ns)
    });
    Ok(RunOutput {
        regions: report
            .regions
            .iter()
            .map(|r| Sample {
                region: r.region.clone(),
                committed: r.committed,
                aborted: r.aborted,
                unknown: r.unknown,
                latencies_ns: r.latencies_ns.clone(),
                bound_ms: r.bound_ms(),
                paths: r.paths.clone(),
            })
            .collect(),
        abort_reasons: report.abort_reasons.clone(),
        throttled: report.throttled,
        load_s: point.duration_ms as f64 / 1000.0,
        invariant: report.invariant.clone(),
    })
}
