//! K2-TB (K2 §4.3, Fig. 16) as a criterion benchmark: `cargo bench -p meridian-protocols
//! --bench k2_tb`.
//!
//! * `k2_tb/take`: timestamps per second per core served from a batch (the data node's
//!   `GetTsFromBatch`, Fig. 6), refilling the batch in place when it runs out.
//! * `k2_tb/serve/{batch,strawman}/{rate}`: a coordinator receiving transactions at `rate`
//!   per second of virtual time, its oracle answering after `ORACLE_RTT_NS`; the whole
//!   timestamp source runs (waiters, requests, replies, TTL). Before timing, each case
//!   prints the oracle's load (requests per second) and the share of timestamps served
//!   without a request of their own.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use meridian_protocols::k2::{Take, TsSource};

/// TTL and batch width (§7.2: 100 µs), step (§4.4: 10 ns), D = 200 ppm.
const TTL_NS: u64 = 100_000;
const TTL_LOCAL_NS: u64 = 99_980;
const STEP_NS: u64 = 10;
/// §4.3: 18 µs on average to get one timestamp from the oracle.
const ORACLE_RTT_NS: u64 = 18_000;

fn take(c: &mut Criterion) {
    let mut group = c.benchmark_group("k2_tb");
    group.throughput(Throughput::Elements(1));
    let mut source = TsSource::new(true, TTL_NS, TTL_LOCAL_NS, STEP_NS, 1);
    let mut oracle_ns = 1_000_000_000u64;
    let refill = |source: &mut TsSource, oracle_ns: &mut u64| {
        let req = source.request(0);
        *oracle_ns += TTL_NS;
        source.on_reply(req, *oracle_ns, 0);
    };
    refill(&mut source, &mut oracle_ns);
    group.bench_function("take", |b| {
        b.iter(|| loop {
            match source.take(black_box(10)) {
                Take::Local(ts) => break ts,
                Take::Wait => refill(&mut source, &mut oracle_ns),
            }
        })
    });
    group.finish();
}

/// The timestamps a run issued and the oracle requests it cost.
#[derive(Debug, Default)]
struct Load {
    timestamps: u64,
    /// Served at once from a live batch (no wait for the oracle).
    immediate: u64,
    requests: u64,
}

/// Runs a coordinator's timestamp source over `duration_ns` of virtual time: arrivals every
/// `1/rate`, replies `ORACLE_RTT_NS` after each request, each waiter served by the first
/// reply it is eligible for (as `coordinator.rs` does).
fn serve(batching: bool, rate: u64, duration_ns: u64) -> Load {
    let mut source = TsSource::new(batching, TTL_NS, TTL_LOCAL_NS, STEP_NS, 1);
    let gap = 1_000_000_000 / rate;
    let end = duration_ns;
    let mut load = Load::default();
    // (reply time, request id), and waiters as (first eligible request, eligible list).
    let mut replies: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut waiters: std::collections::VecDeque<(u64, Vec<u64>)> = Default::default();
    let mut now = 0;
    while now < end {
        while replies.front().is_some_and(|(at, _)| *at <= now) {
            let (at, req) = replies.pop_front().expect("front");
            let high = at + 50_000;
            if let Some(_ts) = source.on_reply(req, high, 0) {
                if let Some(i) = waiters.iter().position(|(first, _)| req >= *first) {
                    waiters.remove(i);
                    load.timestamps += 1;
                }
            } else if source.batch_req() == Some(req) {
                let mut rest = std::collections::VecDeque::new();
                for (first, eligible) in waiters.drain(..) {
                    let ok = req >= first || eligible.contains(&req);
                    match ok.then(|| source.take_arrived_in_time()).flatten() {
                        Some(_) => load.timestamps += 1,
                        None => rest.push_back((first, eligible)),
                    }
                }
                waiters = rest;
            }
            let missing = if batching {
                usize::from(!waiters.is_empty() && !source.requesting())
            } else {
                waiters.len().saturating_sub(source.outstanding())
            };
            for _ in 0..missing {
                let req = source.request(at);
                replies.push_back((at + ORACLE_RTT_NS, req));
                load.requests += 1;
            }
        }
        match source.take(now) {
            Take::Local(_) => {
                load.timestamps += 1;
                load.immediate += 1;
            }
            Take::Wait => {
                waiters.push_back((source.next_req(), source.eligible_reqs(now)));
                if !batching || !source.requesting() {
                    let req = source.request(now);
                    replies.push_back((now + ORACLE_RTT_NS, req));
                    load.requests += 1;
                }
            }
        }
        now += gap;
    }
    load
}

const RATES: [u64; 5] = [10_000, 100_000, 1_000_000, 10_000_000, 20_000_000];

fn oracle_load(c: &mut Criterion) {
    let mut group = c.benchmark_group("k2_tb/serve");
    for batching in [true, false] {
        let mode = if batching { "batch" } else { "strawman" };
        for rate in RATES {
            let load = serve(batching, rate, 1_000_000_000);
            let own = 1.0 - load.requests as f64 / load.timestamps.max(1) as f64;
            let immediate = load.immediate as f64 / load.timestamps.max(1) as f64;
            eprintln!(
                "k2_tb {mode:8} {rate:>9} txn/s: {} timestamps, oracle {} requests/s, \
                 {:.4} % without a request of their own, {:.4} % at once from a live batch",
                load.timestamps,
                load.requests,
                100.0 * own.max(0.0),
                100.0 * immediate
            );
            group.throughput(Throughput::Elements(rate / 100));
            group.bench_with_input(BenchmarkId::new(mode, rate), &rate, |b, &rate| {
                // A hundredth of a virtual second per iteration.
                b.iter(|| serve(batching, black_box(rate), 10_000_000).timestamps)
            });
        }
    }
    group.finish();
}

criterion_group!(benches, take, oracle_load);
criterion_main!(benches);
