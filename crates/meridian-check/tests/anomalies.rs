//! One hand-written history per anomaly class; each must be reported as exactly that class.

mod common;

use common::*;
use meridian_check::{
    check, check_with, AnomalyKind as K, CheckOptions, EdgeType, EntryType, Model,
};

#[test]
fn g0_interleaved_appends() {
    // x = [1, 2] puts T0 before T1; y = [2, 1] puts T1 before T0.
    let h = Hist::new()
        .ok(vec![app("x", 1), app("y", 1)])
        .ok(vec![app("x", 2), app("y", 2)])
        .ok(vec![r("x", &[1, 2]), r("y", &[2, 1])]);
    expect_all(&h.0, &[K::G0]);
    let report = check(&h.0, Model::Serializable);
    let cycle = &report.anomalies[0].cycle;
    assert_eq!(cycle.len(), 2);
    assert!(cycle.iter().all(|s| s.edge == EdgeType::Ww), "{report}");
}

#[test]
fn g1a_aborted_read() {
    let h = Hist::new().fail(vec![app("x", 1)]).ok(vec![r("x", &[1])]);
    expect_all(&h.0, &[K::G1a]);
    let registers = Hist::new().fail(vec![w("x", 1)]).ok(vec![r_int("x", 1)]);
    expect_all(&registers.0, &[K::G1a]);
}

#[test]
fn g1b_intermediate_read() {
    let h = Hist::new()
        .ok(vec![app("x", 1), app("x", 2)])
        .ok(vec![r("x", &[1])])
        .ok(vec![r("x", &[1, 2])]);
    expect_all(&h.0, &[K::G1b]);
    let registers = Hist::new()
        .ok(vec![w("x", 1), w("x", 2)])
        .ok(vec![r_int("x", 1)]);
    expect_all(&registers.0, &[K::G1b]);
}

#[test]
fn g1c_circular_information_flow() {
    // Each transaction reads the other's append.
    let h = Hist::new()
        .ok(vec![app("x", 1), r("y", &[2])])
        .ok(vec![app("y", 2), r("x", &[1])]);
    expect_all(&h.0, &[K::G1c]);
    let report = check(&h.0, Model::Serializable);
    let steps: Vec<_> = report.anomalies[0]
        .cycle
        .iter()
        .map(|s| s.explanation.as_str())
        .collect();
    assert!(
        steps.contains(&"T0 appended 1 to x; T1 read x = [1] (wr)"),
        "{steps:?}"
    );
    let registers = Hist::new()
        .ok(vec![w("x", 1), r_int("y", 2)])
        .ok(vec![w("y", 2), r_int("x", 1)]);
    expect_all(&registers.0, &[K::G1c]);
}

#[test]
fn g_single_lost_update() {
    // Both read x = [] and append; the final read shows both appends.
    let h = Hist::new()
        .ok(vec![r("x", &[]), app("x", 1)])
        .ok(vec![r("x", &[]), app("x", 2)])
        .ok(vec![r("x", &[1, 2])]);
    expect_all(&h.0, &[K::GSingle]);
    let report = check(&h.0, Model::SnapshotIsolation);
    let steps: Vec<_> = report.anomalies[0]
        .cycle
        .iter()
        .map(|s| s.explanation.as_str())
        .collect();
    assert!(
        steps.contains(&"T1 read x = [] which misses T0's append of 1 (rw)"),
        "{steps:?}"
    );
    assert!(
        steps.contains(&"T0 appended 1 to x; T1 appended 2 right after it (ww)"),
        "{steps:?}"
    );
}

#[test]
fn g_single_read_skew() {
    // T2 sees T0's y but not its x... via T1: T2 reads x before T0's append and y after it.
    let h = Hist::new()
        .ok(vec![app("x", 1), app("y", 1)])
        .ok(vec![r("x", &[]), r("y", &[1])])
        .ok(vec![r("x", &[1])]);
    expect_all(&h.0, &[K::GSingle]);
}

#[test]
fn g_nonadjacent_is_rejected_even_by_snapshot_isolation() {
    // T0 -rw-> T1 -wr-> T2 -rw-> T3 -wr-> T0: two rw edges, never adjacent.
    let h = Hist::new()
        .ok(vec![r("x", &[]), r("b", &[1])])
        .ok(vec![app("x", 1), app("a", 1)])
        .ok(vec![r("a", &[1]), r("y", &[])])
        .ok(vec![app("y", 1), app("b", 1)]);
    expect_all(&h.0, &[K::GNonadjacent]);
    let report = check(&h.0, Model::SnapshotIsolation);
    let edges: Vec<_> = report.anomalies[0].cycle.iter().map(|s| s.edge).collect();
    assert_eq!(edges.len(), 4);
    assert_eq!(edges.iter().filter(|&&e| e == EdgeType::Rw).count(), 2);
}

#[test]
fn g2_write_skew() {
    let h = Hist::new()
        .ok(vec![r("x", &[]), r("y", &[]), app("x", 1)])
        .ok(vec![r("x", &[]), r("y", &[]), app("y", 2)]);
    for model in [
        Model::Serializable,
        Model::StrictSerializable,
        Model::StrongPartitionSerializable,
    ] {
        expect(&h.0, model, &[K::G2]);
    }
    let si = expect(&h.0, Model::SnapshotIsolation, &[]);
    assert_eq!(
        si.allowed.iter().map(|a| a.kind).collect::<Vec<_>>(),
        [K::G2]
    );
}

#[test]
fn real_time_stale_read() {
    let h = Hist::new().at(EntryType::Ok, 0, 10, vec![app("x", 1)]).at(
        EntryType::Ok,
        20,
        30,
        vec![r("x", &[])],
    );
    let report = expect(&h.0, Model::StrictSerializable, &[K::RealTime]);
    let cycle = &report.anomalies[0].cycle;
    assert_eq!(cycle.len(), 2, "{report}");
    let rt = cycle.iter().find(|s| s.edge == EdgeType::Rt).unwrap();
    assert_eq!(
        rt.explanation,
        "T0 completed at 10 ns, before T1 was invoked at 20 ns (rt)"
    );
}

#[test]
fn incompatible_order() {
    let h = Hist::new()
        .ok(vec![app("x", 1)])
        .ok(vec![app("x", 2)])
        .ok(vec![r("x", &[1])])
        .ok(vec![r("x", &[2])]);
    expect_all(&h.0, &[K::IncompatibleOrder]);
    let diverging = Hist::new()
        .ok(vec![app("x", 1)])
        .ok(vec![app("x", 2)])
        .ok(vec![app("x", 3)])
        .ok(vec![r("x", &[1, 2])])
        .ok(vec![r("x", &[1, 3])]);
    expect_all(&diverging.0, &[K::IncompatibleOrder]);
}

#[test]
fn duplicate_elements() {
    let h = Hist::new().ok(vec![app("x", 1)]).ok(vec![r("x", &[1, 1])]);
    expect_all(&h.0, &[K::DuplicateElements]);
}

#[test]
fn garbage_read() {
    expect_all(&Hist::new().ok(vec![r("x", &[7])]).0, &[K::GarbageRead]);
    expect_all(
        &Hist::new().ok(vec![w("x", 1)]).ok(vec![r_int("x", 7)]).0,
        &[K::GarbageRead],
    );
}

#[test]
fn internal_inconsistency() {
    // A read that forgets the transaction's own append.
    expect_all(
        &Hist::new().ok(vec![app("x", 1), r("x", &[])]).0,
        &[K::Internal],
    );
    // A non-repeatable read inside one transaction.
    let h = Hist::new()
        .ok(vec![app("x", 1)])
        .ok(vec![r("x", &[]), r("x", &[1])]);
    expect_all(&h.0, &[K::Internal]);
    // Reading an append the transaction makes only later.
    expect_all(
        &Hist::new().ok(vec![r("x", &[1]), app("x", 1)]).0,
        &[K::Internal],
    );
    // Registers: a read that does not see the transaction's own write.
    expect_all(
        &Hist::new()
            .ok(vec![w("x", 1)])
            .ok(vec![w("x", 2), r_int("x", 1)])
            .0,
        &[K::Internal],
    );
}

#[test]
fn malformed_histories() {
    // The same value appended twice.
    expect_all(
        &Hist::new().ok(vec![app("x", 1)]).ok(vec![app("x", 1)]).0,
        &[K::Malformed],
    );
    // A key used as a list and as a register.
    expect_all(
        &Hist::new().ok(vec![app("x", 1)]).ok(vec![w("x", 2)]).0,
        &[K::Malformed],
    );
    // Completion before invocation.
    expect_all(
        &Hist::new().at(EntryType::Ok, 50, 10, vec![app("x", 1)]).0,
        &[K::Malformed],
    );
}

#[test]
fn cycle_search_timeout_when_snapshot_isolation_cannot_decide() {
    let h = Hist::new()
        .ok(vec![r("x", &[]), r("y", &[]), app("x", 1)])
        .ok(vec![r("x", &[]), r("y", &[]), app("y", 2)]);
    let report = check_with(
        &h.0,
        Model::SnapshotIsolation,
        &CheckOptions { search_budget: 0 },
    );
    assert_eq!(report.kinds(), [K::CycleSearchTimeout], "{report}");
    // Serializable rejects any cycle; the budget only limits naming.
    let report = check_with(
        &h.0,
        Model::Serializable,
        &CheckOptions { search_budget: 0 },
    );
    assert!(!report.valid);
}

#[test]
fn observed_info_transactions_count_as_committed() {
    // T1 observed T0's x append, so T0 committed, so T1's y = [] missed T0's y append.
    let seen = Hist::new()
        .info(vec![app("x", 1), app("y", 1)])
        .ok(vec![r("x", &[1]), r("y", &[])]);
    expect_all(&seen.0, &[K::GSingle]);
    assert_eq!(check(&seen.0, Model::Serializable).stats.info_included, 1);
    // Unobserved, it may never have happened.
    let unseen = Hist::new()
        .info(vec![app("x", 1), app("y", 1)])
        .ok(vec![r("x", &[]), r("y", &[])]);
    expect_all(&unseen.0, &[]);
    // Failed and unobserved: nothing to say either.
    expect_all(
        &Hist::new().fail(vec![app("x", 1)]).ok(vec![r("x", &[])]).0,
        &[],
    );
}

#[test]
fn reading_your_own_writes_makes_no_self_edges() {
    let h = Hist::new()
        .ok(vec![
            r("x", &[]),
            app("x", 1),
            r("x", &[1]),
            app("x", 2),
            r("x", &[1, 2]),
        ])
        .ok(vec![r("x", &[1, 2]), app("x", 3), r("x", &[1, 2, 3])])
        .ok(vec![w("z", 1), r_int("z", 1), r_null("q")]);
    expect_all(&h.0, &[]);
}

#[test]
fn the_reported_cycle_is_the_shortest_through_the_edge() {
    // A lost update on x (a 2-cycle) and a longer way round through y and z.
    let h = Hist::new()
        .ok(vec![r("x", &[]), app("x", 1), app("y", 1)])
        .ok(vec![r("x", &[]), app("x", 2), r("z", &[1])])
        .ok(vec![r("y", &[1]), app("z", 1)])
        .ok(vec![r("x", &[1, 2])]);
    let report = check(&h.0, Model::Serializable);
    let single = report
        .anomalies
        .iter()
        .find(|a| a.kind == K::GSingle)
        .expect("G-single");
    assert_eq!(single.cycle.len(), 2, "{report}");
    assert_eq!(single.txns.len(), 2);
}
