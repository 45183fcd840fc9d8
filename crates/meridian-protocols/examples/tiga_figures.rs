//! Tiga's clock and headroom experiments in the simulator (paper Table 3 / Fig. 14 and
//! Fig. 13). Release build, deterministic:
//!
//! ```text
//! cargo run --release -p meridian-protocols --example tiga_figures -- clocks
//! cargo run --release -p meridian-protocols --example tiga_figures -- headroom --clients 20 --seconds 10
//! ```
//!
//! The headroom sweep needs some contention to show Fig. 13's shape: at 8 clients per
//! coordinator conflicts are rare, a late transaction is usually accepted at its own
//! timestamp, and the p50 stays flat below offset 0; at 20 it rises again below −20 ms.
//!
//! * `clocks`: `gcp-tiga` (leaders co-located, preventive), MicroBench Zipf 0.99, every
//!   node on one clock profile (perfect, huygens, chrony, ntpd, bad): p50 per coordinator
//!   region and overall, fast-path share, and the strict-serializability verdict.
//! * `headroom`: leaders separated (`tests/tiga-separated.toml`, detective), MicroBench
//!   Zipf 0.99, the paper's headroom estimate (`headroom=paper`) shifted by −50…+50 ms,
//!   the 0-Hdrn baseline and the adaptive headroom: overall p50 and the rollback rate
//!   (share of committed transactions whose leader execution was revoked and redone).
//!
//! Options: `--seconds N` (virtual load time, default 30), `--clients N` per coordinator
//! (default 8).

use meridian_check::{check, Model};
use meridian_core::time::NS_PER_S;
use meridian_core::{ClockProfile, Procedures, ProtocolConfig, Topology};
use meridian_protocols::tiga::Tiga;
use meridian_sim::{run, setup, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;

struct Args {
    what: String,
    seconds: u64,
    clients: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let what = args
        .next()
        .ok_or("usage: tiga_figures clocks|headroom [--seconds N] [--clients N]")?;
    let (mut seconds, mut clients) = (30, 8);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let n: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: bad number `{value}`"))?;
        match flag.as_str() {
            "--seconds" => seconds = n.max(1),
            "--clients" => clients = n.clamp(1, 1000) as u32,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(Args {
        what,
        seconds,
        clients,
    })
}

fn simulate(topology: Topology, config: &str, args: &Args) -> Result<SimReport, String> {
    let config = ProtocolConfig::parse(config).map_err(|e| e.to_string())?;
    let setup = setup::<Tiga>(topology, config, Procedures::new())?;
    let options = SimOptions {
        duration_ns: args.seconds * NS_PER_S,
        clients_per_coordinator: args.clients,
        ..SimOptions::default()
    };
    let opts = WorkloadOptions::parse(["zipf=0.99"]).map_err(|e| e.to_string())?;
    let mut workload = meridian_workload::build("microbench", &setup.cluster, &opts)?;
    Ok(run::<Tiga>(
        &setup,
        workload.as_mut(),
        &options,
        &mut |_| {},
    ))
}

/// Overall p50 (ms) over every region's commits.
fn p50_ms(report: &SimReport) -> f64 {
    report.all_regions().percentile_ms(50.0).unwrap_or(f64::NAN)
}

fn region_p50s(report: &SimReport) -> String {
    let p50s: Vec<String> = report
        .regions
        .iter()
        .map(|r| format!("{:6.1}", r.percentile_ms(50.0).unwrap_or(f64::NAN)))
        .collect();
    p50s.join("  ")
}

fn path_share(report: &SimReport, path: &str) -> f64 {
    let n: u64 = report
        .regions
        .iter()
        .filter_map(|r| r.paths.get(path))
        .sum();
    n as f64 / report.committed.max(1) as f64
}

fn verdict(report: &SimReport) -> String {
    let v = check(&report.history, Model::StrictSerializable);
    if v.valid {
        "valid".into()
    } else {
        format!("INVALID {:?}", v.kinds())
    }
}

fn clocks(args: &Args) -> Result<(), String> {
    println!(
        "profile   p50 ms  SC p50  FI p50  BR p50  HK p50  fast   unknown  strict-serializable"
    );
    for profile in ClockProfile::BUILTIN_NAMES {
        let mut topology = Topology::load("gcp-tiga").map_err(|e| e.to_string())?;
        topology.set_all_clocks(ClockProfile::builtin(profile).expect("built in"));
        let report = simulate(topology, "", args)?;
        println!(
            "{profile:8} {:7.1}  {}  {:4.0}%  {:7}  {}",
            p50_ms(&report),
            region_p50s(&report),
            100.0 * path_share(&report, "fast"),
            report.unknown,
            verdict(&report)
        );
    }
    Ok(())
}

fn headroom(args: &Args) -> Result<(), String> {
    let separated = || {
        Topology::parse(
            "tiga-separated",
            include_str!("../tests/tiga-separated.toml"),
        )
        .map_err(|e| e.to_string())
    };
    let mut runs: Vec<(String, String)> = (-5..=5)
        .map(|i| {
            let offset = i * 10;
            (
                format!("paper{offset:+}"),
                format!("headroom=paper,headroom_offset_ms={offset}"),
            )
        })
        .collect();
    runs.push(("0-Hdrn".into(), "headroom=zero".into()));
    runs.push(("adaptive".into(), "headroom=adaptive".into()));
    println!(
        "headroom     p50 ms  SC p50  FI p50  BR p50  HK p50  rollback  fast   strict-serializable"
    );
    for (name, config) in runs {
        let report = simulate(separated()?, &config, args)?;
        println!(
            "{name:11} {:7.1}  {}  {:6.2}%  {:4.0}%  {}",
            p50_ms(&report),
            region_p50s(&report),
            100.0 * path_share(&report, "re-executed"),
            100.0 * path_share(&report, "fast"),
            verdict(&report)
        );
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let result = parse_args().and_then(|args| match args.what.as_str() {
        "clocks" => clocks(&args),
        "headroom" => headroom(&args),
        other => Err(format!("unknown experiment `{other}` (clocks, headroom)")),
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
