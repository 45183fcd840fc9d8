//! `meridian`: the command-line front door.
//!
//! * `meridian check --model M FILE` — check a JSON Lines history (exit 0 valid, 1 anomalies,
//!   2 malformed input: a line that does not parse, two entries with one index, a value
//!   written twice to a key, or a file with no transactions, which proves nothing).
//! * `meridian sim …` — run a protocol in the deterministic simulator, optionally check the
//!   history; `meridian sim swarm --seeds N …` runs many seeds and prints a replay command
//!   for every failure.
//! * `meridian experiment run FILE` — run an experiment file (DESIGN §10) on the simulator
//!   or the in-process runtime: JSON, CSV and SVG/PNG plots under `results/<name>/`;
//!   `meridian experiment plot FILE` draws the plots again from that run's JSON.
//!
//! * `meridian server --topology T --node N` — run one node as a process.
//! * `meridian cluster up|down|status` — every node of a topology as a process, with TLS
//!   certificates from a development CA it writes into the run-dir.
//! * `meridian certs` — a CA and certificates for a deployment across machines.
//! * `meridian client get|put|txn` — one transaction against a running cluster.
//! * `meridian bench` — open-loop load against the runtime (in-process or `--remote`).
//! * `meridian demo` — an in-process geo-distributed Tiga cluster under load, live.
//!
//! Bad input of any kind (arguments, topology, history) is a clear message and exit code 2.

/// The simulator allocates many small, short-lived objects (messages, effects, records);
/// mimalloc serves them markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `println!` that tolerates a closed stdout: a reader that stops early (`| head -4`) is no
/// error of ours, so the rest of the output is dropped instead of panicking on EPIPE.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `print!` that tolerates a closed stdout (see `outln!`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod client;
mod experiment;
mod load;
mod protocols;
mod runtime;
mod sim;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Meridian: a geo-distributed transactional key-value store ordered by synchronized clocks.
#[derive(Parser, Debug)]
#[command(name = "meridian", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a recorded history (JSON Lines) against an isolation model.
    Check(CheckArgs),
    /// Run a protocol in the deterministic simulator.
    Sim(Box<sim::SimArgs>),
    /// Run an in-process three-region Tiga cluster with WAN emulation under MicroBench load,
    /// with a live readout (Ctrl-C or --duration stops it).
    Demo(load::DemoArgs),
    /// Run one node of a cluster as this process.
    Server(runtime::ServerArgs),
    /// Start, stop or inspect a cluster of server processes on this machine.
    Cluster(runtime::ClusterCommandArgs),
    /// Write a new CA and TLS certificates for every machine of a topology and for clients.
    Certs(runtime::CertsArgs),
    /// Run one transaction against a running cluster.
    Client(client::ClientArgs),
    /// Open-loop load against the runtime (in-process, or a running cluster with --remote).
    Bench(Box<load::BenchArgs>),
    /// Run an experiment file (sweeps, results, plots).
    Experiment(experiment::ExperimentArgs),
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// strict-serializable, serializable, snapshot-isolation, strong-partition-serializable
    /// or declared-strict-serializable.
    #[arg(long)]
    model: String,
    /// The history file (one transaction per line, DESIGN §7).
    file: std::path::PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Exit code for malformed input.
pub const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_BAD_INPUT } else { 0 });
        }
    };
    match cli.command {
        Command::Check(args) => check(args),
        Command::Sim(args) => sim::main(*args),
        Command::Demo(args) => load::demo(args),
        Command::Server(args) => runtime::server(args),
        Command::Cluster(args) => runtime::cluster(args),
        Command::Certs(args) => runtime::certs(args),
        Command::Client(args) => client::main(args),
        Command::Bench(args) => load::bench(*args),
        Command::Experiment(args) => experiment::main(args),
    }
}

fn bad_input(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(EXIT_BAD_INPUT)
}

fn check(args: CheckArgs) -> ExitCode {
    let model: meridian_check::Model = match args.model.parse() {
        Ok(m) => m,
        Err(e) => return bad_input(e),
    };
    let file = match std::fs::File::open(&args.file) {
        Ok(f) => f,
        Err(e) => return bad_input(format!("{}: {e}", args.file.display())),
    };
    let history = match meridian_check::history::read_jsonl(std::io::BufReader::new(file)) {
        Ok(h) => h,
        Err(e) => return bad_input(format!("{}: {e}", args.file.display())),
    };
    if let Err(e) = well_formed(&history) {
        return bad_input(format!("{}: {e}", args.file.display()));
    }
    let report = meridian_check::check(&history, model);
    // The checker reports a history that breaks its own contract (a value written twice, a
    // key used as list and register) as a `malformed` anomaly; that is bad input, not a
    // verdict on the database.
    let malformed: Vec<&meridian_check::Anomaly> = report
        .anomalies
        .iter()
        .filter(|a| a.kind == meridian_check::AnomalyKind::Malformed)
        .collect();
    if !malformed.is_empty() {
        for anomaly in &malformed {
            eprintln!("error: {}: {anomaly}", args.file.display());
        }
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        outln!("{report}");
    }
    if report.valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// What a history must be before it is worth checking: at least one transaction (an empty
/// file says nothing about the database, so it is refused rather than called valid), each
/// under its own index.
fn well_formed(history: &meridian_check::history::History) -> Result<(), String> {
    if history.is_empty() {
        return Err("the history holds no transactions; there is nothing to check".into());
    }
    let mut seen = std::collections::HashMap::with_capacity(history.len());
    for (position, entry) in history.iter().enumerate() {
        if let Some(first) = seen.insert(entry.index, position) {
            return Err(format!(
                "index {} is used by two transactions (entries {} and {})",
                entry.index,
                first + 1,
                position + 1
            ));
        }
    }
    Ok(())
}
