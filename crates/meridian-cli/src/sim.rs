//! `meridian sim` and `meridian sim swarm`.

use crate::protocols;
use crate::{bad_input, EXIT_BAD_INPUT};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use meridian_bench::report::{all_json, regions_json, RegionJson};
use meridian_check::Model;
use meridian_core::node::{parse_key_values, Setup};
use meridian_core::time::{parse_duration_ns, NS_PER_MS, NS_PER_S};
use meridian_core::topology::ClockProfile;
use meridian_core::{Protocol, ProtocolConfig, Topology};
use meridian_sim::{FaultPlan, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    swarm: Option<SwarmCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum SwarmCommand {
    /// Run many seeds; print a replay command for every failing one.
    Swarm(SwarmArgs),
}

#[derive(Args, Debug)]
struct SwarmArgs {
    /// How many seeds to run.
    #[arg(long)]
    seeds: u64,
    /// The first seed; seeds are first, first+1, ….
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Protocol to run (see `--protocol help`).
    #[arg(long, default_value = "2pl-2pc")]
    protocol: String,
    /// A bundled topology (gcp-tiga, clock-si-wan, k2-five-regions, edge-regions, local) or a
    /// TOML path.
    #[arg(long, default_value = "gcp-tiga")]
    topology: String,
    /// Workload: list-append, bank, microbench, ycsb-t, tpcc, tpca, retwis, smallbank.
    #[arg(long, default_value = "list-append")]
    workload: String,
    /// Workload options, `key=value[,key=value…]` (e.g. `zipf=0.99,keys_per_shard=1000000`).
    #[arg(long, default_value = "")]
    workload_opts: String,
    /// Protocol options, `key=value[,key=value…]`.
    #[arg(long, default_value = "")]
    protocol_opts: String,
    /// `none`, `random`, or a list such as `crash:shard0/replica0@5s,restart:shard0/replica0@8s`.
    #[arg(long, default_value = "none")]
    faults: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual time during which clients submit (e.g. `30s`).
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Virtual time after the load for in-flight transactions to finish.
    #[arg(long, default_value = "10s")]
    drain: String,
    /// Closed-loop clients per coordinator.
    #[arg(long, default_value_t = 2)]
    clients: u32,
    /// A client reports a transaction unknown after this long without an answer.
    #[arg(long, default_value = "5s")]
    client_timeout: String,
    /// Override every node's clock profile (perfect, huygens, chrony, ntpd, bad, or a
    /// `[clocks.custom.X]` profile of the topology).
    #[arg(long)]
    clock: Option<String>,
    /// Per-node processing time of each event, e.g. `20us` (default: none).
    #[arg(long, default_value = "0ns")]
    service_time: String,
    /// With a service time: worker threads per node, each with its own queue; an event
    /// joins a random worker's queue, so events may run out of arrival order (default 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    workers: u32,
    /// With --workers: a machine's nodes share its workers (one pool per machine, as the
    /// testbed's threads serve every role of their server) instead of each having its own.
    #[arg(long)]
    machine_workers: bool,
    /// Check the history against this model (default: the protocol's own guarantee when a
    /// history is recorded; `none` to skip).
    #[arg(long)]
    check: Option<String>,
    /// Write the history as JSON Lines to this file.
    #[arg(long)]
    history: Option<std::path::PathBuf>,
    /// `table` (default) or `json`.
    #[arg(long, default_value = "table")]
    report: String,
    /// Bucket length of the JSON report's `timeline` (outcomes per bucket of virtual time,
    /// by commit time), e.g. `250ms`.
    #[arg(long, default_value = "1s")]
    timeline_bucket: String,
    /// Batch a node's events as the runtime does: at most this many events due at one
    /// instant run before the node's end-of-batch (the runtime's is 64; 1 = every event).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    batch_max: u32,
    /// Fire timers at the next multiple of this, as the runtime's millisecond timers do
    /// (e.g. `1ms`; `0ns` = exactly).
    #[arg(long, default_value = "0ns")]
    timer_granularity: String,
    /// Print the fault schedule (drawn or given) to standard error before the run.
    #[arg(long)]
    show_faults: bool,
    /// Clients send an aborted transaction (conflict, validation, timeout, failure) again
    /// until it commits, instead of drawing a new one; latency counts from the first try.
    #[arg(long)]
    retry_aborted: bool,
    /// With --retry-aborted: an aborted transaction waits this long in its client's retry
    /// queue while the client runs fresh ones (the Aurogon artifact's harness: `500us`);
    /// `0ns`: it is the client's next transaction.
    #[arg(long, default_value = "0ns")]
    retry_interval: String,
}

/// Everything a run needs, validated.
#[derive(Clone)]
pub(crate) struct Plan {
    args: RunArgs,
    topology: Topology,
    options: SimOptions,
    workload_options: WorkloadOptions,
    protocol_config: ProtocolConfig,
    check: Option<Model>,
    json: bool,
}

pub fn main(args: SimArgs) -> ExitCode {
    match args.swarm {
        Some(SwarmCommand::Swarm(swarm)) => run_swarm(swarm),
        None => run_one(args.run),
    }
}

fn parse_plan(args: &RunArgs) -> Result<Plan, String> {
    let mut topology = Topology::load(&args.topology).map_err(|e| e.to_string())?;
    if let Some(profile) = &args.clock {
        let profile = topology.clock_profile(profile).ok_or_else(|| {
            format!(
                "--clock: unknown profile `{profile}` (built in: {}; or one of the topology's \
                 [clocks.custom.X])",
                ClockProfile::BUILTIN_NAMES.join(", ")
            )
        })?;
        topology.set_all_clocks(profile);
    }
    let duration_ns = parse_duration_ns(&args.duration).map_err(|e| format!("--duration: {e}"))?;
    if duration_ns == 0 {
        return Err("--duration: must be positive".into());
    }
    let options = SimOptions {
        seed: args.seed,
        duration_ns,
        drain_ns: parse_duration_ns(&args.drain).map_err(|e| format!("--drain: {e}"))?,
        clients_per_coordinator: args.clients,
        client_timeout_ns: parse_duration_ns(&args.client_timeout)
            .map_err(|e| format!("--client-timeout: {e}"))?,
        service_time_ns: parse_duration_ns(&args.service_time)
            .map_err(|e| format!("--service-time: {e}"))?,
        workers: args.workers,
        machine_workers: args.machine_workers,
        faults: FaultPlan::default(),
        record_history: true,
        open_loop: None,
        timeline_bucket_ns: match parse_duration_ns(&args.timeline_bucket) {
            Ok(0) => return Err("--timeline-bucket: must be positive".into()),
            Ok(ns) => ns,
            Err(e) => return Err(format!("--timeline-bucket: {e}")),
        },
        batch_max: args.batch_max,
        timer_granularity_ns: parse_duration_ns(&args.timer_granularity)
            .map_err(|e| format!("--timer-granularity: {e}"))?,
        steady_from_ns: None,
        retry_aborted: args.retry_aborted,
        retry_interval_ns: parse_duration_ns(&args.retry_interval)
            .map_err(|e| format!("--retry-interval: {e}"))?,
    };
    if args.clients == 0 {
        return Err("--clients: must be at least 1".into());
    }
    let workload_options = WorkloadOptions {
        options: parse_key_values(&args.workload_opts)
            .map_err(|e| format!("--workload-opts: {e}"))?,
    };
    let protocol_config =
        ProtocolConfig::parse(&args.protocol_opts).map_err(|e| format!("--protocol-opts: {e}"))?;
    let json = match args.report.as_str() {
        "json" => true,
        "table" => false,
        other => return Err(format!("--report: `{other}` is not `table` or `json`")),
    };
    let check = match args.check.as_deref() {
        Some("none") => None,
        Some(model) => Some(
            model
                .parse::<Model>()
                .map_err(|e| format!("--check: {e}"))?,
        ),
        None => None,
    };
    Ok(Plan {
        args: args.clone(),
        topology,
        options,
        workload_options,
        protocol_config,
        check,
        json,
    })
}

/// The outcome of one simulated run, ready to print.
pub(crate) struct RunResult {
    report: SimReport,
    check: Option<meridian_check::CheckReport>,
    model: Option<Model>,
    wall_s: f64,
}

impl RunResult {
    fn passed(&self) -> bool {
        self.check.as_ref().is_none_or(|c| c.valid) && self.report.invariant.is_ok()
    }
}

pub(crate) fn simulate<P: Protocol>(plan: &Plan, progress: bool) -> Result<RunResult, String> {
    let setup: Setup<P> = meridian_sim::setup::<P>(
        plan.topology.clone(),
        plan.protocol_config.clone(),
        meridian_workload::procedures(),
    )?;
    let mut options = plan.options.clone();
    options.faults = match plan.args.faults.as_str() {
        "random" => FaultPlan::random_for_seed(
            &setup.cluster,
            &P::fault_model(&setup.cluster),
            options.duration_ns,
            options.seed,
        ),
        spec => FaultPlan::parse(spec, &setup.cluster).map_err(|e| format!("--faults: {e}"))?,
    };
    if plan.args.show_faults {
        for (at_ns, fault) in &options.faults.faults {
            let name = |n: &meridian_core::NodeId| setup.cluster.node(*n).name.clone();
            let what = match fault {
                meridian_sim::Fault::Crash(n) => format!("crash {} (machine)", name(n)),
                meridian_sim::Fault::Restart(n) => format!("restart {} (machine)", name(n)),
                meridian_sim::Fault::ClockStep { node, step_ms } => {
                    format!("clock step {} {step_ms:+.1} ms", name(node))
                }
                meridian_sim::Fault::Partition { a, .. } => {
                    let side: Vec<String> = a.iter().map(name).collect();
                    format!("partition {} | the rest", side.join("+"))
                }
                other => other.to_string(),
            };
            eprintln!(
                "fault at {:>9.3} s: {what}",
                *at_ns as f64 / NS_PER_S as f64
            );
        }
    }
    let mut workload =
        meridian_workload::build(&plan.args.workload, &setup.cluster, &plan.workload_options)
            .map_err(|e| format!("--workload: {e}"))?;
    let model = match plan.args.check.as_deref() {
        Some("none") => None,
        Some(_) => plan.check,
        None if workload.history_checkable() => P::GUARANTEE.parse::<Model>().ok(),
        None => None,
    };
    let bar = progress_bar(progress, options.duration_ns + options.drain_ns);
    let started = Instant::now();
    let report = meridian_sim::run::<P>(&setup, workload.as_mut(), &options, &mut |p| {
        bar.set_position(p.virtual_ns / NS_PER_MS);
        bar.set_message(format!("{} committed", p.committed));
    });
    let wall_s = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let check = model.map(|m| meridian_check::check(&report.history, m));
    Ok(RunResult {
        report,
        check,
        model,
        wall_s,
    })
}

fn progress_bar(enabled: bool, end_ns: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(end_ns / NS_PER_MS);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} virtual {pos}/{len} ms [{bar:30}] {msg} ({elapsed})",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    bar
}

fn run_one(args: RunArgs) -> ExitCode {
    let protocol = match protocols::select(&args.protocol) {
        Ok(entry) => entry,
        Err(code) => return code,
    };
    let plan = match parse_plan(&args) {
        Ok(p) => p,
        Err(e) => return bad_input(e),
    };
    let result = match (protocol.simulate)(&plan, !plan.json) {
        Ok(r) => r,
        Err(e) => return bad_input(e),
    };
    if let Some(path) = &args.history {
        if let Err(e) = write_history(path, &result.report.history) {
            return bad_input(format!("--history {}: {e}", path.display()));
        }
    }
    if plan.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json_report(&plan, &result)).expect("serializable")
        );
    } else {
        print_table(&plan, &result);
    }
    if result.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Writes a history as JSON Lines.
pub fn write_history(
    path: &std::path::Path,
    history: &[meridian_check::Entry],
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for entry in history {
        meridian_check::history::write_entry(&mut out, entry)?;
    }
    out.flush()
}

#[derive(Serialize)]
struct ReportJson {
    protocol: String,
    topology: String,
    workload: String,
    seed: u64,
    faults: String,
    duration_s: f64,
    committed: u64,
    aborted: u64,
    unknown: u64,
    abort_reasons: std::collections::BTreeMap<String, u64>,
    model: Option<String>,
    valid: Option<bool>,
    anomalies: usize,
    anomaly_kinds: Vec<String>,
    invariant: Option<String>,
    /// Per region, each broken down by transaction class.
    regions: Vec<RegionJson>,
    /// Every region together, broken down by transaction class.
    all: RegionJson,
    /// The protocol's own counters (delays, waits, …), summed over its nodes.
    counters: std::collections::BTreeMap<&'static str, u64>,
    /// The faults applied, by kind (crashes by role, partitions, loss, …).
    faults_applied: std::collections::BTreeMap<String, u64>,
    /// Each shard's replicas' belief of its leader at the end of the load and drain.
    leaders_at_end: std::collections::BTreeMap<String, String>,
    /// Outcomes per bucket of virtual time, each transaction where it finished.
    timeline: meridian_sim::Timeline,
    /// The clocks' sampled |local − true| and spread, ms (per timeline bucket too).
    clock_error: meridian_sim::ClockErrorReport,
    events: u64,
    messages_delivered: u64,
    messages_dropped: u64,
    wall_s: f64,
    events_per_s: f64,
    messages_per_s: f64,
    trace_hash: String,
}

fn round(v: Option<f64>, digits: i32) -> Option<f64> {
    let scale = 10f64.powi(digits);
    v.map(|x| (x * scale).round() / scale)
}

fn json_report(plan: &Plan, result: &RunResult) -> ReportJson {
    let r = &result.report;
    ReportJson {
        protocol: plan.args.protocol.clone(),
        topology: plan.topology.name.clone(),
        workload: plan.args.workload.clone(),
        seed: plan.options.seed,
        faults: plan.args.faults.clone(),
        duration_s: plan.options.duration_ns as f64 / NS_PER_S as f64,
        committed: r.committed,
        aborted: r.aborted,
        unknown: r.unknown,
        abort_reasons: r.abort_reasons.clone(),
        model: result.model.map(|m| m.to_string()),
        valid: result.check.as_ref().map(|c| c.valid),
        anomalies: result.check.as_ref().map_or(0, |c| c.anomalies.len()),
        anomaly_kinds: result
            .check
            .as_ref()
            .map(|c| c.anomalies.iter().map(|a| a.kind.to_string()).collect())
            .unwrap_or_default(),
        invariant: r.invariant.clone().err(),
        regions: regions_json(&r.regions, load_s(plan)),
        all: all_json(&r.regions, load_s(plan)),
        counters: r.counters.clone(),
        faults_applied: r.faults_applied.clone(),
        leaders_at_end: r.leaders_at_end.clone(),
        timeline: r.timeline.clone(),
        clock_error: r.clock_error.clone(),
        events: r.events,
        messages_delivered: r.messages_delivered,
        messages_dropped: r.messages_dropped,
        wall_s: round(Some(result.wall_s), 3).unwrap_or(0.0),
        events_per_s: (r.events as f64 / result.wall_s.max(1e-9)).round(),
        messages_per_s: (r.messages_delivered as f64 / result.wall_s.max(1e-9)).round(),
        trace_hash: format!("{:016x}", r.trace_hash),
    }
}

/// The time during which clients submitted, s (throughput's denominator).
fn load_s(plan: &Plan) -> f64 {
    plan.options.duration_ns as f64 / NS_PER_S as f64
}

/// `label: name n, name n, …`, or nothing for no counts.
fn print_counts<K: std::fmt::Display>(label: &str, counts: &std::collections::BTreeMap<K, u64>) {
    if !counts.is_empty() {
        let items: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        outln!("{label}: {}", items.join(", "));
    }
}

/// One line: the clocks' measured error, in µs (clock errors of µs and below matter here).
fn print_clock_error(e: &meridian_sim::ClockErrorReport) {
    if e.samples > 0 {
        let us = |ms: f64| ms * 1000.0;
        outln!(
            "clock error |local − true| over {} samples: mean {:.3} us, p99 {:.3} us, max {:.3} us; largest spread {:.3} us",
            e.samples,
            us(e.mean_ms),
            us(e.p99_ms),
            us(e.max_ms),
            us(e.spread_max_ms)
        );
    }
}

fn print_table(plan: &Plan, result: &RunResult) {
    let r = &result.report;
    outln!(
        "{} on {} · workload {} · seed {} · faults {} · {} virtual",
        plan.args.protocol,
        plan.topology.name,
        plan.args.workload,
        plan.options.seed,
        plan.args.faults,
        plan.args.duration
    );
    outln!(
        "committed {}  aborted {}  unknown {}",
        r.committed,
        r.aborted,
        r.unknown
    );
    if !r.abort_reasons.is_empty() {
        let reasons: Vec<String> = r
            .abort_reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        outln!("abort reasons: {}", reasons.join(", "));
    }
    let (regions, all) = (
        regions_json(&r.regions, load_s(plan)),
        all_json(&r.regions, load_s(plan)),
    );
    out!("{}", meridian_bench::report::table(&regions, &all));
    print_counts("protocol counters", &r.counters);
    print_counts("faults applied", &r.faults_applied);
    print_clock_error(&r.clock_error);
    let wall = result.wall_s.max(1e-9);
    outln!(
        "simulated {} events ({} messages delivered, {} dropped) in {:.2} s: {:.0} events/s, {:.0} messages/s",
        r.events,
        r.messages_delivered,
        r.messages_dropped,
        result.wall_s,
        r.events as f64 / wall,
        r.messages_delivered as f64 / wall
    );
    if let Some(check) = &result.check {
        if check.valid {
            outln!(
                "check {}: valid ({} transactions)",
                check.model,
                r.history.len()
            );
        } else {
            outln!(
                "check {}: {} anomalies\n{check}",
                check.model,
                check.anomalies.len()
            );
        }
    }
    if r.invariant.is_ok() && r.audited_keys > 0 {
        outln!(
            "workload `{}` conditions hold on the final state (audit read {} keys)",
            plan.args.workload,
            r.audited_keys
        );
    }
    if let Err(e) = &r.invariant {
        outln!("workload invariant violated: {e}");
    }
}

/// The command that replays one seed of a swarm.
fn replay_command(args: &RunArgs, seed: u64) -> String {
    let mut cmd = format!(
        "meridian sim --protocol {} --topology {} --workload {} --faults {} --seed {seed} --duration {} --drain {} --clients {} --client-timeout {}",
        args.protocol, args.topology, args.workload, args.faults, args.duration, args.drain, args.clients, args.client_timeout
    );
    for (flag, value) in [
        ("--workload-opts", &args.workload_opts),
        ("--protocol-opts", &args.protocol_opts),
    ] {
        if !value.is_empty() {
            cmd.push_str(&format!(" {flag} {value}"));
        }
    }
    if let Some(clock) = &args.clock {
        cmd.push_str(&format!(" --clock {clock}"));
    }
    if args.service_time != "0ns" {
        cmd.push_str(&format!(" --service-time {}", args.service_time));
    }
    if args.workers != 1 {
        cmd.push_str(&format!(" --workers {}", args.workers));
    }
    if args.machine_workers {
        cmd.push_str(" --machine-workers");
    }
    if let Some(check) = &args.check {
        cmd.push_str(&format!(" --check {check}"));
    }
    if args.batch_max != 1 {
        cmd.push_str(&format!(" --batch-max {}", args.batch_max));
    }
    if args.timer_granularity != "0ns" {
        cmd.push_str(&format!(" --timer-granularity {}", args.timer_granularity));
    }
    cmd
}

fn run_swarm(swarm: SwarmArgs) -> ExitCode {
    if swarm.seeds == 0 {
        return bad_input("--seeds: must be at least 1");
    }
    let protocol = match protocols::select(&swarm.run.protocol) {
        Ok(entry) => entry,
        Err(code) => return code,
    };
    let plan = match parse_plan(&swarm.run) {
        Ok(p) => p,
        Err(e) => return bad_input(e),
    };
    // Refuse bad options once, before any seed runs.
    if let Err(e) = (protocol.cluster)(plan.topology.clone(), &plan.protocol_config) {
        return bad_input(format!("--protocol-opts: {e}"));
    }
    let jobs = swarm
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let seeds: Vec<u64> = (swarm.first_seed..swarm.first_seed + swarm.seeds).collect();
    let bar = progress_bar(true, 0);
    bar.set_length(seeds.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} seeds {pos}/{len} [{bar:30}] {msg} ({elapsed})")
            .expect("template")
            .progress_chars("=> "),
    );
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(seeds.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&seed) = seeds.get(i) else { break };
                let mut seed_plan = plan.clone();
                seed_plan.options.seed = seed;
                let outcome = (protocol.simulate)(&seed_plan, false);
                bar.inc(1);
                results
                    .lock()
                    .expect("no poisoned lock")
                    .push((seed, outcome));
            });
        }
    });
    bar.finish_and_clear();
    let mut results = results.into_inner().expect("no poisoned lock");
    results.sort_by_key(|(seed, _)| *seed);
    summarize_swarm(&swarm.run, results)
}

fn summarize_swarm(args: &RunArgs, results: Vec<(u64, Result<RunResult, String>)>) -> ExitCode {
    let (mut committed, mut aborted, mut unknown, mut failures) = (0, 0, 0, 0);
    for (seed, result) in &results {
        match result {
            Err(e) => {
                eprintln!("seed {seed}: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            Ok(r) => {
                committed += r.report.committed;
                aborted += r.report.aborted;
                unknown += r.report.unknown;
                if !r.passed() {
                    failures += 1;
                    let kinds: Vec<String> = r
                        .check
                        .iter()
                        .flat_map(|c| c.anomalies.iter().map(|a| a.kind.to_string()))
                        .collect();
                    let invariant = r
                        .report
                        .invariant
                        .clone()
                        .err()
                        .map(|e| format!("; invariant: {e}"))
                        .unwrap_or_default();
                    outln!(
                        "FAIL seed {seed}: anomalies [{}]{invariant}\n  replay: {}",
                        kinds.join(", "),
                        replay_command(args, *seed)
                    );
                }
            }
        }
    }
    outln!("swarm: {} seeds, {failures} failed · committed {committed}, aborted {aborted}, unknown {unknown}", results.len());
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
