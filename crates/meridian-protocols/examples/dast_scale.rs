//! DAST at 10–100 regions (Fig. 8's deployment): runs the simulator on the generated edge
//! topology and prints what the run cost in wall time per virtual second, beside the
//! throughput per region and the IRT/CRT latencies. Release build, deterministic:
//!
//! ```text
//! cargo run --release -p meridian-protocols --example dast_scale -- --regions 100 --seconds 2
//! ```
//!
//! Options: `--regions N` (1..=100, default 10), `--seconds N` of load (default 2; the run
//! drains 1 s more), `--clients N` per coordinator (default 2; every edge node
//! coordinates), `--workload NAME` and `--workload-opts k=v,…` (default `list-append` with
//! `crt_ratio=0.1`: one transaction in ten crosses regions, TPC-C's share), `--opts k=v,…`
//! (DAST's options), `--topology SPEC` (default `topologies/edge-regions-full.toml`).

use meridian_core::time::NS_PER_S;
use meridian_core::{ProtocolConfig, Topology};
use meridian_protocols::dast::Dast;
use meridian_sim::{run, setup, SimOptions, SimReport};
use meridian_workload::{WorkloadOptions, CRT, IRT};
use std::time::Instant;

struct Args {
    topology: String,
    regions: u32,
    seconds: u64,
    clients: u32,
    workload: String,
    workload_opts: String,
    opts: String,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        topology: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../topologies/edge-regions-full.toml"
        )
        .into(),
        regions: 10,
        seconds: 2,
        clients: 2,
        workload: "list-append".into(),
        workload_opts: "crt_ratio=0.1".into(),
        opts: String::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: `{v}` is not a number"))
        };
        match flag.as_str() {
            "--topology" => a.topology = value,
            "--regions" => a.regions = number(&value)? as u32,
            "--seconds" => a.seconds = number(&value)?.max(1),
            "--clients" => a.clients = number(&value)?.clamp(1, 10_000) as u32,
            "--workload" => a.workload = value,
            "--workload-opts" => a.workload_opts = value,
            "--opts" => a.opts = value,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(a)
}

/// What the event loop cost up to its last progress report (the run's final audit, which
/// reads every key back through the protocol, is not part of the simulated load).
#[derive(Default)]
struct Cost {
    virtual_s: f64,
    wall_s: f64,
    /// This thread's time on a CPU (Linux `schedstat`; 0 elsewhere): the machine may be
    /// shared, and wall time then counts other processes' turns.
    cpu_s: f64,
    nodes: usize,
}

fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

fn simulate(a: &Args) -> Result<(SimReport, Cost), String> {
    let spec = format!("{}:regions={}", a.topology, a.regions);
    let topology = Topology::load(&spec).map_err(|e| e.to_string())?;
    let config = ProtocolConfig::parse(&a.opts).map_err(|e| e.to_string())?;
    let setup = setup::<Dast>(topology, config, meridian_workload::procedures())?;
    let opts = WorkloadOptions::parse(a.workload_opts.split(',').filter(|s| !s.is_empty()))
        .map_err(|e| e.to_string())?;
    let mut workload = meridian_workload::build(&a.workload, &setup.cluster, &opts)?;
    let options = SimOptions {
        duration_ns: a.seconds * NS_PER_S,
        drain_ns: NS_PER_S,
        clients_per_coordinator: a.clients,
        record_history: false,
        ..SimOptions::default()
    };
    let (start, cpu_start) = (Instant::now(), cpu_s());
    let mut cost = Cost::default();
    let report = run::<Dast>(&setup, workload.as_mut(), &options, &mut |p| {
        cost = Cost {
            virtual_s: p.virtual_ns as f64 / NS_PER_S as f64,
            wall_s: start.elapsed().as_secs_f64(),
            cpu_s: cpu_s() - cpu_start,
            nodes: setup.cluster.nodes.len(),
        };
    });
    Ok((report, cost))
}

fn latency(report: &SimReport, class: &str) -> String {
    let all = report.all_regions();
    match all.classes.get(class) {
        Some(s) => format!(
            "{class} p50 {:.1} ms p99 {:.1} ms ({} committed)",
            s.percentile_ms(50.0).unwrap_or(f64::NAN),
            s.percentile_ms(99.0).unwrap_or(f64::NAN),
            s.committed
        ),
        None => format!("{class}: none"),
    }
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dast_scale: {e}");
            std::process::exit(2);
        }
    };
    let (report, cost) = match simulate(&a) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("dast_scale: {e}");
            std::process::exit(2);
        }
    };
    let virtual_s = report.virtual_ns as f64 / NS_PER_S as f64;
    let tps = report.committed as f64 / a.seconds as f64;
    let per = |s: f64| s / cost.virtual_s.max(1e-9);
    println!(
        "regions {} ({} nodes)  event loop: {:.2} virtual s in {:.1} s wall, {:.1} s CPU: \
         wall per virtual second {:.2} s, CPU per virtual second {:.2} s",
        a.regions,
        cost.nodes,
        cost.virtual_s,
        cost.wall_s,
        cost.cpu_s,
        per(cost.wall_s),
        per(cost.cpu_s)
    );
    println!(
        "events {}  messages {}  ({:.0} messages per virtual second per region)",
        report.events,
        report.messages_delivered,
        report.messages_delivered as f64 / virtual_s / f64::from(a.regions)
    );
    println!(
        "committed {}  aborted {}  unknown {}  throughput per region {:.0} txn/s",
        report.committed,
        report.aborted,
        report.unknown,
        tps / f64::from(a.regions)
    );
    println!("{}", latency(&report, IRT));
    println!("{}", latency(&report, CRT));
    for (name, n) in &report.counters {
        if name.starts_with("dast.") {
            println!("  {name} {n}");
        }
    }
    if let Err(e) = &report.invariant {
        println!("INVARIANT BROKEN: {e}");
        std::process::exit(1);
    }
}
