//! `meridian bench` (open-loop load against the runtime, in-process or against a cluster
//! started with `cluster up`) and `meridian demo` (the same, in-process, with a live line).

use crate::bad_input;
use crate::protocols;
use crate::runtime::{init_logging, tokio_runtime, ClusterArgs, TlsArgs};
use clap::Args;
use meridian_bench::report::{all_json, regions_json, RegionJson};
use meridian_bench::Results;
use meridian_check::Model;
use meridian_client::{Client, ClientOptions, Endpoint, Security, Submit};
use meridian_core::node::{parse_key_values, Setup};
use meridian_core::time::parse_duration_ns;
use meridian_core::{Cluster, NodeId, Protocol};
use meridian_server::{Addresses, Host, HostConfig, Load, LoadOptions, LoadReport, Target};
use meridian_workload::WorkloadOptions;
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Drive a cluster started with `meridian cluster up` (TCP to its coordinators)
    /// instead of hosting every node in this process.
    #[arg(long)]
    remote: bool,
    /// With --remote: how to reach the cluster (its clients' certificates).
    #[command(flatten)]
    tls: TlsArgs,
    /// Workload: list-append, bank, microbench, ycsb-t, tpcc, tpca, retwis, smallbank
    /// (stored procedures and interactive transactions run as in the simulator).
    #[arg(long, default_value = "microbench")]
    workload: String,
    /// Workload options, `key=value[,key=value…]`.
    #[arg(long, default_value = "")]
    workload_opts: String,
    /// How long the load runs (e.g. `30s`, `10m`).
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Run this long first without counting it (e.g. `10s`): the totals and the rate then
    /// cover only the `--duration` after it, the steady state; live lines show both.
    #[arg(long, default_value = "0s")]
    warmup: String,
    /// Transactions per second over all coordinators (open loop: Poisson arrivals, those
    /// that find every client of their coordinator busy are throttled), or `max`
    /// (closed loop: each client submits again as soon as its transaction ends).
    #[arg(long, default_value = "max")]
    rate: String,
    /// Clients per coordinator: its cap of transactions in flight.
    #[arg(long, default_value_t = 64)]
    max_outstanding: usize,
    /// A transaction unanswered this long counts as unknown.
    #[arg(long, default_value = "5s")]
    timeout: String,
    /// Write the history (JSON Lines) here.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Check the history against this model (needs a checkable workload, e.g. list-append).
    #[arg(long)]
    check: Option<String>,
    /// Print one live line per second.
    #[arg(long)]
    live: bool,
    /// Serve each in-process node's /metrics on the topology's metrics ports.
    #[arg(long)]
    metrics: bool,
    /// In-process nodes keep durable logs under `DIR/<node>/` (the cost of durability;
    /// without it they keep nothing). Not with `--remote` (the cluster has its own).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// With `--data-dir`: force records to disk, one fsync per batch of events (group
    /// commit).
    #[arg(long)]
    fsync: bool,
    /// `table` or `json`.
    #[arg(long, default_value = "table")]
    report: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "warn")]
    log_level: String,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// A bundled topology name or a TOML path.
    #[arg(long, default_value = "gcp-tiga")]
    topology: String,
    /// Protocol the nodes run (`--protocol help` lists them).
    #[arg(long, default_value = "tiga")]
    protocol: String,
    /// Run this long (e.g. `30s`); without it, until Ctrl-C.
    #[arg(long)]
    duration: Option<String>,
    /// Multiplies the topology's one-way delays (1: the real WAN; 0: none).
    #[arg(long, default_value_t = 1.0)]
    wan_scale: f64,
    /// Transactions per second over all coordinators.
    #[arg(long, default_value = "200")]
    rate: String,
    /// MicroBench options, e.g. `zipf=0.9`. The demo's key space is 10 k keys per shard,
    /// not the paper's 1 M: at the demo's rate every key is written within its first
    /// minutes, after which its memory is flat (with 1 M keys the store keeps growing by
    /// each newly written key for hours, which is data, not garbage; `meridian bench` and
    /// the experiments keep 1 M).
    #[arg(long, default_value = "zipf=0.5,keys_per_shard=10000")]
    workload_opts: String,
    /// Serve each node's /metrics on the topology's metrics ports.
    #[arg(long)]
    metrics: bool,
    #[arg(long, default_value = "warn")]
    log_level: String,
}

/// Everything a run needs, validated.
pub(crate) struct Plan {
    args: BenchArgs,
    options: LoadOptions,
    workload_options: WorkloadOptions,
    timeout: Duration,
    model: Option<Model>,
    json: bool,
    /// How a remote run reaches the cluster (unused in-process).
    security: Security,
}

fn parse(args: BenchArgs, until_ctrl_c: bool) -> Result<Plan, String> {
    init_logging(&args.log_level)?;
    args.cluster.check()?;
    if args.remote && (args.data_dir.is_some() || args.fsync) {
        return Err("--data-dir and --fsync are for in-process nodes; a remote cluster has its own (`cluster up --data-dir`)".into());
    }
    if args.fsync && args.data_dir.is_none() {
        return Err("--fsync needs --data-dir".into());
    }
    let duration = if until_ctrl_c {
        Duration::from_secs(365 * 24 * 3600)
    } else {
        Duration::from_nanos(
            parse_duration_ns(&args.duration).map_err(|e| format!("--duration: {e}"))?,
        )
    };
    let warmup = Duration::from_nanos(
        parse_duration_ns(&args.warmup).map_err(|e| format!("--warmup: {e}"))?,
    );
    let rate_per_s = match args.rate.as_str() {
        "max" => None,
        text => match text.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Some(r),
            _ => {
                return Err(format!(
                    "--rate: `{text}` is not a positive number or `max`"
                ))
            }
        },
    };
    if args.max_outstanding == 0 {
        return Err("--max-outstanding: must be at least 1".into());
    }
    let timeout = Duration::from_nanos(
        parse_duration_ns(&args.timeout).map_err(|e| format!("--timeout: {e}"))?,
    );
    let workload_options = WorkloadOptions {
        options: parse_key_values(&args.workload_opts)
            .map_err(|e| format!("--workload-opts: {e}"))?,
    };
    let model = args
        .check
        .as_deref()
        .filter(|m| *m != "none")
        .map(|m| m.parse::<Model>().map_err(|e| format!("--check: {e}")))
        .transpose()?;
    let json = match args.report.as_str() {
        "json" => true,
        "table" => false,
        other => return Err(format!("--report: `{other}` is not `table` or `json`")),
    };
    let security = match (args.remote, args.tls.given()) {
        (true, _) => args.tls.security(meridian_server::pki::DEFAULT_CLIENT)?,
        (false, false) => Security::InsecurePlaintext,
        (false, true) => {
            return Err(
                "--certs, --ca/--cert/--key and --insecure-plaintext are for \
                        --remote: in-process nodes talk through memory"
                    .into(),
            )
        }
    };
    let options = LoadOptions {
        duration,
        warmup,
        rate_per_s,
        max_outstanding: args.max_outstanding,
        record_history: args.history.is_some() || model.is_some(),
        seed: args.seed,
    };
    Ok(Plan {
        args,
        options,
        workload_options,
        timeout,
        model,
        json,
        security,
    })
}

pub fn bench(args: BenchArgs) -> ExitCode {
    run(args, false)
}

pub fn demo(demo: DemoArgs) -> ExitCode {
    let forever = demo.duration.is_none();
    let args = BenchArgs {
        cluster: ClusterArgs {
            topology: demo.topology,
            protocol: demo.protocol,
            protocol_opts: String::new(),
            wan_scale: demo.wan_scale,
        },
        remote: false,
        tls: TlsArgs::default(),
        workload: "microbench".into(),
        workload_opts: demo.workload_opts,
        duration: demo.duration.unwrap_or_default(),
        warmup: "0s".into(),
        rate: demo.rate,
        max_outstanding: 64,
        timeout: "5s".into(),
        history: None,
        check: None,
        live: true,
        metrics: demo.metrics,
        data_dir: None,
        fsync: false,
        report: "table".into(),
        seed: 1,
        log_level: demo.log_level,
    };
    run(args, forever)
}

fn run(args: BenchArgs, until_ctrl_c: bool) -> ExitCode {
    let mut plan = match parse(args, until_ctrl_c) {
        Ok(p) => p,
        Err(e) => return bad_input(e),
    };
    if plan.args.remote {
        if let Err(e) = adopt_the_clusters_run(&mut plan.args.cluster) {
            return bad_input(e);
        }
    }
    let protocol = match protocols::select(&plan.args.cluster.protocol) {
        Ok(entry) => entry,
        Err(code) => return code,
    };
    let live = plan.args.live;
    let mut on_tick = |elapsed: Duration, interval: Results| {
        if live {
            live_line(elapsed, &interval);
        }
    };
    let result = (protocol.bench)(&plan, Duration::from_secs(1), &mut on_tick);
    let (report, cluster) = match result {
        Ok(r) => r,
        Err(e) => return bad_input(e),
    };
    finish(&plan, &report, &cluster)
}

/// A remote run drives and labels what the cluster really runs: its protocol and WAN scale
/// come from a coordinator's `/status`, not from this command's flags (which describe an
/// in-process cluster); a topology other than the cluster's is refused, since the
/// coordinators' addresses come from it.
fn adopt_the_clusters_run(args: &mut ClusterArgs) -> Result<(), String> {
    let topology = meridian_core::Topology::load(&args.topology).map_err(|e| e.to_string())?;
    let cluster = Cluster::without_services(&topology).map_err(|e| e.to_string())?;
    let addresses = Addresses::from_topology(&cluster)?;
    let status = cluster
        .coordinators
        .iter()
        .find_map(|c| crate::runtime::http_get(addresses.metrics[c.index()], "/status"))
        .ok_or_else(|| {
            format!(
                "--remote: no coordinator of `{}` answers /status (is the cluster up?)",
                topology.name
            )
        })?;
    let status: serde_json::Value =
        serde_json::from_str(&status).map_err(|e| format!("--remote: bad /status: {e}"))?;
    if let Some(theirs) = status["topology"].as_str() {
        if theirs != topology.name {
            return Err(format!(
                "--topology: the cluster runs topology `{theirs}`, not `{}`",
                topology.name
            ));
        }
    }
    if let Some(protocol) = status["protocol"].as_str() {
        if protocol != args.protocol {
            eprintln!(
                "note: the cluster runs {protocol}; --protocol {} is ignored",
                args.protocol
            );
            args.protocol = protocol.to_string();
        }
    }
    if let Some(scale) = status["wan_scale"].as_f64() {
        args.wan_scale = scale;
    }
    Ok(())
}

/// One in-process run for `meridian experiment` (`target = "runtime"`): every node of the
/// topology in this process, the load of `options`; `on_tick` gets the figures of every
/// `tick` (elapsed time, what finished since the previous tick).
pub struct PointRun {
    pub cluster: ClusterArgs,
    pub workload: String,
    pub workload_options: WorkloadOptions,
    pub options: LoadOptions,
    pub timeout: Duration,
    pub tick: Duration,
}

pub fn run_point<P: Protocol>(
    run: PointRun,
    on_tick: &mut dyn FnMut(Duration, Results),
) -> Result<LoadReport, String>
where
    P::Node: Send,
{
    run.cluster.check()?;
    let plan = Plan {
        args: BenchArgs {
            cluster: run.cluster,
            remote: false,
            tls: TlsArgs::default(),
            workload: run.workload,
            workload_opts: String::new(),
            duration: String::new(),
            warmup: String::new(),
            rate: String::new(),
            max_outstanding: run.options.max_outstanding,
            timeout: String::new(),
            history: None,
            check: None,
            live: false,
            metrics: false,
            data_dir: None,
            fsync: false,
            report: "table".into(),
            seed: run.options.seed,
            log_level: "warn".into(),
        },
        options: run.options,
        workload_options: run.workload_options,
        timeout: run.timeout,
        model: None,
        json: false,
        security: Security::InsecurePlaintext,
    };
    let (report, _) = tokio_runtime().block_on(drive::<P>(&plan, run.tick, on_tick))?;
    Ok(report)
}

pub(crate) async fn drive<P: Protocol>(
    plan: &Plan,
    tick: Duration,
    on_tick: &mut dyn FnMut(Duration, Results),
) -> Result<(LoadReport, Setup<P>), String>
where
    P::Node: Send,
{
    let setup = plan.args.cluster.setup::<P>()?;
    let workload =
        meridian_workload::build(&plan.args.workload, &setup.cluster, &plan.workload_options)
            .map_err(|e| format!("--workload: {e}"))?;
    let addresses = Addresses::from_topology(&setup.cluster)?;
    let host = if plan.args.remote {
        None
    } else {
        // Every node in this process: no link or listener carries data over a socket.
        let mut config = HostConfig::new(addresses.clone(), Security::InsecurePlaintext);
        config.wan_scale = plan.args.cluster.wan_scale;
        config.seed = plan.args.seed;
        config.listen = false;
        config.serve_metrics = plan.args.metrics;
        config.data_dir = plan.args.data_dir.clone();
        config.fsync = plan.args.fsync;
        let all: Vec<NodeId> = setup.cluster.nodes.iter().map(|n| n.id).collect();
        Some(
            Host::<P>::start(setup.clone(), &all, config)
                .await
                .map_err(|e| e.to_string())?,
        )
    };
    let mut targets = Vec::new();
    for &coordinator in &setup.cluster.coordinators {
        let submit: Arc<dyn Submit> = match &host {
            Some(host) => Arc::new(
                host.local_client(coordinator)
                    .expect("every node is hosted")
                    .with_timeout(plan.timeout),
            ),
            None => {
                let options = ClientOptions {
                    timeout: plan.timeout,
                    ..ClientOptions::new(plan.security.clone())
                };
                let endpoint = Endpoint::new(
                    addresses.peer[coordinator.index()],
                    setup.cluster.node(coordinator).name.clone(),
                );
                Arc::new(
                    Client::connect(vec![endpoint], options)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
        };
        let cluster = setup.cluster.clone();
        targets.push(Target {
            submit,
            bound_ms: Arc::new(move |shards| P::bound_ms(&cluster, coordinator, shards)),
        });
    }
    let stop = CancellationToken::new();
    let load = Load::start(
        &setup.cluster,
        workload,
        targets,
        plan.options.clone(),
        stop.clone(),
    )?;
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(tick);
    tick.tick().await;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while !load.is_finished() {
        tokio::select! {
            _ = &mut ctrl_c, if !stop.is_cancelled() => {
                stop.cancel();
                eprintln!("\nstopping: waiting for transactions in flight…");
            }
            _ = tick.tick() => on_tick(started.elapsed(), load.interval()),
        }
    }
    if plan.args.live {
        outln!();
    }
    let report = load.finish().await;
    if let Some(host) = host {
        host.shutdown().await;
    }
    Ok((report, setup))
}

/// One line, rewritten in place on a terminal: throughput, commit rate, p50/p99 per region.
fn live_line(elapsed: Duration, interval: &Results) {
    let finished = interval.finished();
    let committed = interval.committed();
    let rate = if finished == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", 100.0 * committed as f64 / finished as f64)
    };
    let regions: Vec<String> = interval
        .regions
        .iter()
        .map(|r| match (r.percentile_ms(50.0), r.percentile_ms(99.0)) {
            (Some(p50), Some(p99)) => format!("{} {p50:.0}/{p99:.0}", r.region),
            _ => format!("{} -", r.region),
        })
        .collect();
    let line = format!(
        "[{:>4}s] {committed:>6} txn/s  commit {rate}  p50/p99 ms: {}",
        elapsed.as_secs(),
        regions.join("  ")
    );
    let mut out = std::io::stdout();
    if out.is_terminal() {
        let _ = write!(out, "\r\x1b[2K{line}");
    } else {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

#[derive(Serialize)]
struct BenchJson {
    protocol: String,
    topology: String,
    workload: String,
    wan_scale: f64,
    remote: bool,
    /// Seconds run before the measurement (not in any figure below).
    warmup_s: f64,
    elapsed_s: f64,
    committed: u64,
    committed_per_s: f64,
    aborted: u64,
    unknown: u64,
    /// Open-loop arrivals turned away because every client of their coordinator was busy.
    throttled: u64,
    abort_reasons: std::collections::BTreeMap<String, u64>,
    unknown_reasons: std::collections::BTreeMap<String, u64>,
    /// Per region, each broken down by transaction class.
    regions: Vec<RegionJson>,
    /// Every region together, broken down by transaction class.
    all: RegionJson,
    model: Option<String>,
    valid: Option<bool>,
    anomalies: usize,
    invariant: Option<String>,
}

fn finish(plan: &Plan, report: &LoadReport, cluster: &Cluster) -> ExitCode {
    if let Some(path) = &plan.args.history {
        if let Err(e) = crate::sim::write_history(path, &report.history) {
            return bad_input(format!("--history {}: {e}", path.display()));
        }
    }
    let check = plan
        .model
        .map(|m| meridian_check::check(&report.history, m));
    let stats = &report.results;
    let all = stats.all_regions();
    let elapsed_s = report.elapsed.as_secs_f64();
    let json = BenchJson {
        protocol: plan.args.cluster.protocol.clone(),
        topology: cluster.topology.name.clone(),
        workload: plan.args.workload.clone(),
        wan_scale: plan.args.cluster.wan_scale,
        remote: plan.args.remote,
        warmup_s: plan.options.warmup.as_secs_f64(),
        elapsed_s,
        committed: all.committed,
        committed_per_s: all.committed as f64 / elapsed_s.max(1e-9),
        aborted: all.aborted,
        unknown: all.unknown,
        throttled: stats.throttled,
        abort_reasons: all.abort_reasons.clone(),
        unknown_reasons: all.unknown_reasons.clone(),
        regions: regions_json(&stats.regions, elapsed_s),
        all: all_json(&stats.regions, elapsed_s),
        model: plan.model.map(|m| m.to_string()),
        valid: check.as_ref().map(|c| c.valid),
        anomalies: check.as_ref().map_or(0, |c| c.anomalies.len()),
        invariant: report.invariant.clone().err(),
    };
    if plan.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json).expect("serializable")
        );
    } else {
        print_table(&json);
        if let Some(c) = &check {
            outln!("{c}");
        }
    }
    let passed = check.as_ref().is_none_or(|c| c.valid) && report.invariant.is_ok();
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn print_table(j: &BenchJson) {
    outln!(
        "{} on {} ({}; WAN scale {}{}): {:.1} s{}, {} committed ({:.0}/s), {} aborted, {} unknown",
        j.protocol,
        j.topology,
        j.workload,
        j.wan_scale,
        if j.remote {
            ", remote cluster"
        } else {
            ", in-process"
        },
        j.elapsed_s,
        if j.warmup_s > 0.0 {
            format!(" after {:.1} s of warm-up", j.warmup_s)
        } else {
            String::new()
        },
        j.committed,
        j.committed_per_s,
        j.aborted,
        j.unknown
    );
    out!("{}", meridian_bench::report::table(&j.regions, &j.all));
    for (reason, count) in &j.abort_reasons {
        outln!("  {count:>8} × {reason}");
    }
    for (reason, count) in &j.unknown_reasons {
        outln!("  {count:>8} × unknown: {reason}");
    }
    if j.throttled > 0 {
        outln!(
            "  {:>8} arrivals throttled (every client of their coordinator busy)",
            j.throttled
        );
    }
    if let Some(invariant) = &j.invariant {
        outln!("workload invariant violated: {invariant}");
    }
}
