//! What a Tiga run keeps in memory, per transaction (issue 22): the simulator on
//! `gcp-tiga`, MicroBench, open loop, with the heap's live bytes sampled as it goes.
//! Release build, deterministic:
//!
//! ```text
//! cargo run --release -p meridian-protocols --example tiga_memory -- --rate 2500 --seconds 5
//! ```
//!
//! Every 65,536 events it prints the virtual time, the transactions committed so far and
//! the live heap bytes (a counting wrapper around the system allocator, so that
//! `heaptrack` also sees every allocation: the `meridian` binary uses mimalloc, which
//! heaptrack cannot follow); at the end, the live bytes per committed transaction.
//!
//! Options: `--rate N` transactions/s per coordinator (8 coordinators; default 2500, the
//! runtime bench's ~20 K/s), `--seconds N` of load (default 5), `--drain N` seconds after
//! it (default 1), `--keys N` keys per shard (default 1,000,000, the paper's),
//! `--zipf X` (default 0.5), `--opts K=V,...` Tiga options (e.g. `durability=diskless`).

use meridian_core::time::NS_PER_S;
use meridian_core::{Procedures, ProtocolConfig, Topology};
use meridian_protocols::tiga::Tiga;
use meridian_sim::{run, setup, OpenLoop, SimOptions};
use meridian_workload::WorkloadOptions;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes it holds live.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Args {
    rate: f64,
    seconds: f64,
    drain: f64,
    keys: u64,
    zipf: f64,
    opts: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rate: 2500.0,
        seconds: 5.0,
        drain: 1.0,
        keys: 1_000_000,
        zipf: 0.5,
        opts: String::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || -> Result<f64, String> {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or(format!("{flag}: bad number `{value}`"))
        };
        match flag.as_str() {
            "--rate" => args.rate = number()?,
            "--seconds" => args.seconds = number()?,
            "--drain" => args.drain = number()?,
            "--keys" => args.keys = number()?.max(1.0) as u64,
            "--zipf" => args.zipf = number()?,
            "--opts" => args.opts = value,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(args)
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    let topology = Topology::load("gcp-tiga").map_err(|e| e.to_string())?;
    let config = ProtocolConfig::parse(&args.opts).map_err(|e| e.to_string())?;
    let setup = setup::<Tiga>(topology, config, Procedures::new())?;
    let options = SimOptions {
        duration_ns: (args.seconds * NS_PER_S as f64) as u64,
        drain_ns: (args.drain * NS_PER_S as f64) as u64,
        record_history: false,
        open_loop: Some(OpenLoop {
            rate_tps: args.rate,
            max_outstanding: 4000,
        }),
        ..SimOptions::default()
    };
    let workload_opts = WorkloadOptions::parse([
        format!("zipf={}", args.zipf),
        format!("keys_per_shard={}", args.keys),
    ])
    .map_err(|e| e.to_string())?;
    let mut workload = meridian_workload::build("microbench", &setup.cluster, &workload_opts)?;
    let base = LIVE_BYTES.load(Ordering::Relaxed);
    println!("virtual_s  committed  live_MB  live_bytes_per_committed");
    let mut last = (0u64, 0usize);
    let mut sample = |p: meridian_sim::Progress| {
        let live = LIVE_BYTES.load(Ordering::Relaxed).saturating_sub(base);
        last = (p.committed, live);
        println!(
            "{:9.2}  {:9}  {:7.1}  {:8.0}",
            p.virtual_ns as f64 / NS_PER_S as f64,
            p.committed,
            mb(live),
            live as f64 / p.committed.max(1) as f64
        );
    };
    let report = run::<Tiga>(&setup, workload.as_mut(), &options, &mut sample);
    let (committed, live) = last;
    println!(
        "end: committed {} unknown {} events {}; at the last sample {committed} committed, \
         live {:.1} MB, {:.0} bytes per committed transaction",
        report.committed,
        report.unknown,
        report.events,
        mb(live),
        live as f64 / committed.max(1) as f64
    );
    Ok(())
}
