//! Checker throughput on a large valid list-append history.
//!
//! ```text
//! cargo run --release -p meridian-check --example check_bench [-- --txns 100000 --keys 1000
//!     --processes 8 --seed 1 --stale 0 --out history.jsonl]
//! ```
//!
//! The history is a strictly serializable execution by construction: each transaction takes
//! effect at a commit point inside its [invoke, complete] interval, commit points increase,
//! and its reads see the state at its commit point. Each process runs one transaction at a
//! time, so up to `processes` transactions overlap and the real-time graph is not a chain.
//! Nothing is written to disk unless `--out` is given. `--stale N` makes N reads per
//! thousand miss the key's latest append, to time the checker on an invalid history.

use meridian_check::history::write_entry;
use meridian_check::{check, Entry, EntryType, HistOp, Model, ReadValue};
use std::io::{BufWriter, Write};
use std::time::Instant;

/// SplitMix64: tiny, seeded, good enough to shape a workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Options {
    txns: usize,
    keys: usize,
    processes: usize,
    seed: u64,
    stale: u64,
    out: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        txns: 100_000,
        keys: 1000,
        processes: 8,
        seed: 1,
        stale: 0,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--txns" => o.txns = number()? as usize,
            "--keys" => o.keys = number()?.max(1) as usize,
            "--processes" => o.processes = number()?.max(1) as usize,
            "--seed" => o.seed = number()?,
            "--stale" => o.stale = number()?,
            "--out" => o.out = Some(value),
            _ => {
                return Err(format!(
                    "unknown flag {flag} (known: --txns --keys --processes --seed --stale --out)"
                ))
            }
        }
    }
    Ok(o)
}

/// A free process for a transaction committing at `commit`, and the commit point (pushed
/// later if every process is still busy).
fn pick_process(rng: &mut Rng, free_at: &[u64], commit: u64) -> (usize, u64) {
    let start = rng.below(free_at.len() as u64) as usize;
    let n = free_at.len();
    if let Some(p) = (0..n)
        .map(|j| (start + j) % n)
        .find(|&p| free_at[p] < commit)
    {
        return (p, commit);
    }
    let p = (0..n).min_by_key(|&p| free_at[p]).unwrap_or(0);
    (p, free_at[p] + 1)
}

fn generate(o: &Options) -> Vec<Entry> {
    let mut rng = Rng(o.seed);
    let keys: Vec<String> = (0..o.keys).map(|k| format!("k{k}")).collect();
    let mut state: Vec<Vec<i64>> = vec![Vec::new(); o.keys];
    let mut free_at = vec![0u64; o.processes];
    let (mut clock, mut next_value) = (0u64, 0i64);
    let mut history = Vec::with_capacity(o.txns);
    for i in 0..o.txns {
        let wanted = clock + 1 + rng.below(40);
        let (p, commit) = pick_process(&mut rng, &free_at, wanted);
        clock = commit;
        let gap = commit - free_at[p]; // >= 1
        let invoke = commit - rng.below(gap.min(300));
        let complete = commit + rng.below(300);
        free_at[p] = complete;
        let ops = (0..2 + rng.below(3))
            .map(|_| {
                let k = rng.below(o.keys as u64) as usize;
                if rng.below(2) == 0 {
                    let mut seen = state[k].clone();
                    if rng.below(1000) < o.stale {
                        seen.pop();
                    }
                    HistOp::Read {
                        key: keys[k].clone(),
                        value: ReadValue::List(seen),
                    }
                } else {
                    next_value += 1;
                    state[k].push(next_value);
                    HistOp::Append {
                        key: keys[k].clone(),
                        value: next_value,
                    }
                }
            })
            .collect();
        history.push(Entry {
            index: i as u64,
            process: p as u64,
            kind: EntryType::Ok,
            invoke_ns: invoke,
            complete_ns: complete,
            ops,
            after: Vec::new(),
        });
    }
    history
}

fn write(path: &str, history: &[Entry]) -> std::io::Result<()> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for e in history {
        write_entry(&mut out, e)?;
    }
    out.flush()
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("check_bench: {e}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let history = generate(&o);
    let ops: usize = history.iter().map(|e| e.ops.len()).sum();
    println!(
        "generated {} transactions ({ops} ops, {} keys, {} processes) in {:.0} ms",
        history.len(),
        o.keys,
        o.processes,
        started.elapsed().as_secs_f64() * 1e3
    );
    if let Some(path) = &o.out {
        if let Err(e) = write(path, &history) {
            eprintln!("check_bench: writing {path}: {e}");
            std::process::exit(1);
        }
        println!("wrote {path}");
    }
    let mut all_valid = true;
    for model in Model::ALL {
        let started = Instant::now();
        let report = check(&history, model);
        let wall = started.elapsed().as_secs_f64() * 1e3;
        let s = &report.stats;
        println!(
            "{:<30} {:>8.1} ms  valid={}  edges ww={} wr={} rw={} rt={} (barriers {})",
            model.name(),
            wall,
            report.valid,
            s.edges.ww,
            s.edges.wr,
            s.edges.rw,
            s.edges.rt,
            s.barriers
        );
        if !report.valid {
            all_valid = false;
            let mut kinds = std::collections::BTreeMap::new();
            for a in &report.anomalies {
                *kinds.entry(a.kind.name()).or_insert(0) += 1;
            }
            println!(
                "    anomalies: {kinds:?}\n    first: {}",
                report.anomalies[0]
            );
        }
    }
    if !all_valid && o.stale == 0 {
        std::process::exit(1);
    }
}
