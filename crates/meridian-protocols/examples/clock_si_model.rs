//! Clock-SI's analytical model (§IV, `clock_si::model`) beside the simulator (§V-E):
//! Figs. 9–12 as one table each, model and measurement side by side.
//!
//! ```text
//! cargo run --release -p meridian-protocols --example clock_si_model -- [--seeds 3] [--duration-s 2]
//! ```
//!
//! Setup (§V-E: "each transaction both reads and writes a fixed number of data items"):
//! one LAN region with a 1 ms round trip, three partitions of one server each, four
//! coordinators with 16 closed-loop clients each, perfect clocks (the paper's NTP-synced
//! LAN, where "most of the transaction delays are due to the pending commit"). The workload
//! is `microbench` with uniform keys (`zipf=0`): every transaction increments one key on
//! each of the three partitions, so R = W = 3, every update is distributed (§IV-B's
//! assumption) and DBSize = 3 × `keys_per_shard`.
//!
//! Measured values come from what the protocol did (`SimReport::counters`): a transaction
//! is delayed when a partition held one of its reads back (Algorithm 1), its delay is how
//! long (its reads run in parallel, so the longest); the abort rate is the share of
//! transactions answered `conflict`. Each value is the median over the seeds.
//!
//! Model inputs are the paper's, taken from the same run: `TPS_u` = committed transactions
//! per second, `L_r = L_u` = their mean latency, `RRD` = the 1 ms round trip, `S = 0`
//! (the simulator's log write is instantaneous), so `CW = S + RRD = 1 ms`.

use meridian_core::time::{NS_PER_MS, NS_PER_S};
use meridian_core::{Procedures, ProtocolConfig, Topology};
use meridian_protocols::clock_si::counters;
use meridian_protocols::clock_si::model::Params;
use meridian_protocols::clock_si::ClockSi;
use meridian_sim::{run, setup, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;

const TOPOLOGY: &str = r#"
name = "clock-si-lan"
regions = ["lan"]
intra_region_rtt_ms = 1.0
jitter_ms = 0.05
[[shards]]
count = 3
replicas = ["lan"]
[[coordinators]]
region = "lan"
count = 4
[clocks]
profile = "perfect"
"#;
const RRD_MS: f64 = 1.0;
const SHARDS: u64 = 3;
const ITEMS_PER_TXN: f64 = 3.0;
const CLIENTS_PER_COORDINATOR: u32 = 16;

/// Fig. 9: DBSize swept at Δ = 0 (keys per partition).
const KEYS_PER_SHARD: [u64; 7] = [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000];
/// Figs. 10–12: Δ swept on a small store.
const SMALL_KEYS_PER_SHARD: u64 = 2_000;
const DELTAS_MS: [f64; 8] = [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5];

struct Args {
    seeds: u64,
    duration_s: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        seeds: 3,
        duration_s: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: u64 = value
            .parse()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or(format!("{flag} {value}: expected an integer in 1..=1000"))?;
        match flag.as_str() {
            "--seeds" => args.seeds = n,
            "--duration-s" => args.duration_s = n,
            _ => {
                return Err(format!(
                    "unknown argument {flag} (known: --seeds, --duration-s)"
                ))
            }
        }
    }
    Ok(args)
}

/// What one run measured.
#[derive(Clone, Copy, Debug)]
struct Measured {
    tps_u: f64,
    mean_latency_ms: f64,
    /// Share of transactions with a read held back.
    delay_probability: f64,
    /// Mean delay of a delayed transaction, ms.
    delay_ms: f64,
    /// Share of reads held back, and the share held back by clock skew.
    read_delay_probability: f64,
    skew_delayed_reads: f64,
    abort_rate: f64,
}

fn counter(report: &SimReport, name: &str) -> f64 {
    report.counters.get(name).copied().unwrap_or(0) as f64
}

fn measured(report: &SimReport, duration_s: u64) -> Measured {
    let mean_latency_ms = report.all_regions().mean_ms().unwrap_or(0.0);
    let conflicts = report.abort_reasons.get("conflict").copied().unwrap_or(0) as f64;
    let finished = (report.committed + report.aborted) as f64;
    let delayed = counter(report, counters::TXNS_DELAYED);
    let reads = counter(report, counters::READS).max(1.0);
    Measured {
        tps_u: report.committed as f64 / duration_s as f64,
        mean_latency_ms,
        delay_probability: delayed / counter(report, counters::TXNS).max(1.0),
        delay_ms: counter(report, counters::TXN_DELAY_NS) / delayed.max(1.0) / NS_PER_MS as f64,
        read_delay_probability: counter(report, counters::READS_DELAYED) / reads,
        skew_delayed_reads: counter(report, counters::READS_DELAYED_BY_CLOCK) / reads,
        abort_rate: conflicts / finished.max(1.0),
    }
}

fn simulate(keys_per_shard: u64, delta_ms: f64, seed: u64, duration_s: u64) -> Measured {
    let topology = Topology::parse("clock-si-lan", TOPOLOGY).expect("the LAN topology parses");
    let config = ProtocolConfig::parse(&format!("delta_ms={delta_ms}")).expect("options");
    let setup = setup::<ClockSi>(topology, config, Procedures::new()).expect("setup");
    let options = SimOptions {
        seed,
        duration_ns: duration_s * NS_PER_S,
        drain_ns: NS_PER_S,
        clients_per_coordinator: CLIENTS_PER_COORDINATOR,
        record_history: false,
        ..SimOptions::default()
    };
    let workload_options = WorkloadOptions::default()
        .with("keys_per_shard", keys_per_shard)
        .with("zipf", 0);
    let mut workload = meridian_workload::build("microbench", &setup.cluster, &workload_options)
        .expect("the microbench workload");
    let report = run::<ClockSi>(&setup, workload.as_mut(), &options, &mut |_| {});
    measured(&report, duration_s)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The seed-wise median of every measured value.
fn measure(keys_per_shard: u64, delta_ms: f64, args: &Args) -> Measured {
    let runs: Vec<Measured> = (1..=args.seeds)
        .map(|seed| simulate(keys_per_shard, delta_ms, seed, args.duration_s))
        .collect();
    let m = |f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
    Measured {
        tps_u: m(|r| r.tps_u),
        mean_latency_ms: m(|r| r.mean_latency_ms),
        delay_probability: m(|r| r.delay_probability),
        delay_ms: m(|r| r.delay_ms),
        read_delay_probability: m(|r| r.read_delay_probability),
        skew_delayed_reads: m(|r| r.skew_delayed_reads),
        abort_rate: m(|r| r.abort_rate),
    }
}

/// The model's inputs for a measured point.
fn model(keys_per_shard: u64, delta_ms: f64, m: &Measured) -> Params {
    Params {
        db_size: (SHARDS * keys_per_shard) as f64,
        reads: ITEMS_PER_TXN,
        writes: ITEMS_PER_TXN,
        tps_u: m.tps_u,
        read_txn_ms: m.mean_latency_ms,
        update_txn_ms: m.mean_latency_ms,
        rrd_ms: RRD_MS,
        sync_commit_ms: 0.0,
        delta_ms,
    }
}

fn pct(x: f64) -> String {
    format!("{:.3}%", 100.0 * x)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("clock_si_model: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "Clock-SI §IV model vs simulator: 1 region (RTT {RRD_MS} ms), {SHARDS} partitions, \
         {} clients, microbench R = W = 3 uniform, perfect clocks, {} s x {} seeds (medians)\n",
        4 * CLIENTS_PER_COORDINATOR,
        args.duration_s,
        args.seeds
    );

    println!("Fig. 9 — delay probability vs DBSize, Δ = 0");
    println!("| DBSize | TPS_u | L_u ms | model P(delay) | measured P(txn delayed) | measured P(read delayed) | reads delayed by skew |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for keys in KEYS_PER_SHARD {
        let m = measure(keys, 0.0, &args);
        let p = model(keys, 0.0, &m);
        println!(
            "| {} | {:.0} | {:.3} | {} | {} | {} | {} |",
            p.db_size,
            m.tps_u,
            m.mean_latency_ms,
            pct(p.pending_commit_delay_probability()),
            pct(m.delay_probability),
            pct(m.read_delay_probability),
            pct(m.skew_delayed_reads)
        );
    }

    let points: Vec<(f64, Measured)> = DELTAS_MS
        .iter()
        .map(|&d| (d, measure(SMALL_KEYS_PER_SHARD, d, &args)))
        .collect();
    let db = SHARDS * SMALL_KEYS_PER_SHARD;

    println!("\nFig. 10 — delay probability vs Δ, DBSize = {db}");
    println!("| Δ ms | TPS_u | model P(delay) | measured P(txn delayed) |");
    println!("|---:|---:|---:|---:|");
    for (d, m) in &points {
        let p = model(SMALL_KEYS_PER_SHARD, *d, m);
        println!(
            "| {d} | {:.0} | {} | {} |",
            m.tps_u,
            pct(p.pending_commit_delay_probability()),
            pct(m.delay_probability)
        );
    }

    println!("\nFig. 11 — delay duration vs Δ, DBSize = {db}");
    println!("| Δ ms | model delay ms | measured delay ms (per delayed txn) |");
    println!("|---:|---:|---:|");
    for (d, m) in &points {
        let p = model(SMALL_KEYS_PER_SHARD, *d, m);
        let measured = if m.delay_probability > 0.0 {
            format!("{:.3}", m.delay_ms)
        } else {
            "– (none delayed)".to_string()
        };
        println!("| {d} | {:.3} | {measured} |", p.pending_commit_delay_ms());
    }

    println!("\nFig. 12 — abort rate vs Δ, DBSize = {db}");
    println!("| Δ ms | L_u ms | model abort rate | measured abort rate |");
    println!("|---:|---:|---:|---:|");
    for (d, m) in &points {
        let p = model(SMALL_KEYS_PER_SHARD, *d, m);
        println!(
            "| {d} | {:.3} | {} | {} |",
            m.mean_latency_ms,
            pct(p.abort_probability()),
            pct(m.abort_rate)
        );
    }
}
