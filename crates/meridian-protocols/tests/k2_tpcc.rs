//! K2 on TPC-C (issue 19): why Fig. 19's multi-version writes switch changes nothing on
//! this TPC-C. Every TPC-C write that two transactions can make to one key reads the key
//! first (`D_NEXT_O_ID`, `W_YTD`, `D_YTD`, the customer and stock rows are
//! read-modify-writes; the rows NewOrder and Payment insert have keys of their own), and a
//! read at `ts` either waits for every older intent on its key (PUSHWS) or, by raising the
//! key's read tracker, makes any older writer abort. So a key's write stream never holds
//! two transactions' intents at once, which is the only case `mv_writes` decides.

use meridian_core::time::NS_PER_S;
use meridian_core::{ProtocolConfig, Topology};
use meridian_protocols::k2::K2;
use meridian_sim::{run, setup, SimOptions, SimReport};
use meridian_workload::WorkloadOptions;

fn simulate(protocol_opts: &str) -> SimReport {
    let config = ProtocolConfig::parse(protocol_opts).expect("options");
    let setup = setup::<K2>(
        Topology::load("k2-five-regions").unwrap(),
        config,
        meridian_workload::procedures(),
    )
    .unwrap();
    let options = SimOptions {
        seed: 3,
        duration_ns: NS_PER_S,
        drain_ns: 2 * NS_PER_S,
        clients_per_coordinator: 2,
        ..SimOptions::default()
    };
    // 50 clients on 5 warehouses: ten per warehouse, so NewOrders meet on D_NEXT_O_ID and
    // Payments on W_YTD.
    let opts = WorkloadOptions::parse("warehouses=5,interactive=true".split(',')).unwrap();
    let mut workload = meridian_workload::build("tpcc", &setup.cluster, &opts).unwrap();
    run::<K2>(&setup, workload.as_mut(), &options, &mut |_| {})
}

fn count(report: &SimReport, name: &str) -> u64 {
    report.counters.get(name).copied().unwrap_or(0)
}

#[test]
fn tpcc_writes_never_share_a_write_stream_so_mv_writes_off_runs_the_same() {
    let on = simulate("");
    assert_eq!(on.invariant, Ok(()));
    assert!(on.committed > 300, "{} committed", on.committed);
    // Contention is there: readers pushed undetermined intents, writers below a read aborted.
    assert!(count(&on, "k2.pushws") > 0, "{:?}", on.counters);
    assert!(
        count(&on, "k2.abort_write_below_read") > 0,
        "{:?}",
        on.counters
    );
    // …but no intent ever joined another transaction's in its key's write stream.
    assert_eq!(count(&on, "k2.intents_beside_another"), 0);

    let off = simulate("mv_writes=false");
    assert_eq!(count(&off, "k2.abort_younger_intent"), 0);
    // The same run, event for event.
    assert_eq!(
        off.trace_hash, on.trace_hash,
        "mv_writes=false changed the run"
    );
    assert_eq!((off.committed, &off.counters), (on.committed, &on.counters));
}
