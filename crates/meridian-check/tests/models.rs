//! Histories that tell the four models apart, and the report's shape.

mod common;

use common::*;
use meridian_check::{check, AnomalyKind as K, EntryType::Ok, Model};

const SER: Model = Model::Serializable;
const SI: Model = Model::SnapshotIsolation;
const STRICT: Model = Model::StrictSerializable;
const SPS: Model = Model::StrongPartitionSerializable;

#[test]
fn write_skew_is_snapshot_isolation_but_not_serializable() {
    let h = Hist::new()
        .ok(vec![r("x", &[]), r("y", &[]), app("x", 1)])
        .ok(vec![r("x", &[]), r("y", &[]), app("y", 2)]);
    expect(&h.0, SI, &[]);
    expect(&h.0, SER, &[K::G2]);
}

#[test]
fn a_stale_read_is_serializable_but_not_strict() {
    // T0 completes at 10; T1 starts at 20 and misses T0's append to the same key.
    let h = Hist::new()
        .at(Ok, 0, 10, vec![app("x", 1)])
        .at(Ok, 20, 30, vec![r("x", &[])]);
    expect(&h.0, SER, &[]);
    expect(&h.0, SI, &[]);
    expect(&h.0, STRICT, &[K::RealTime]);
    expect(&h.0, SPS, &[K::RealTime]);
}

#[test]
fn strong_partition_serializability_orders_only_transactions_sharing_a_key() {
    // T0 appends x (done at 10); T2 starts at 20 and reads y = [], missing the y append of
    // T1, which itself missed T0's x append. Real time orders T0 before T2, but they share
    // no key, so only strict serializability sees the cycle T2 -rw-> T1 -rw-> T0 -rt-> T2.
    let h = Hist::new()
        .at(Ok, 0, 10, vec![app("x", 1)])
        .at(Ok, 0, 40, vec![r("x", &[]), app("y", 1)])
        .at(Ok, 20, 30, vec![r("y", &[])]);
    expect(&h.0, SER, &[]);
    expect(&h.0, SI, &[]);
    expect(&h.0, SPS, &[]);
    let report = expect(&h.0, STRICT, &[K::RealTime]);
    assert_eq!(report.anomalies[0].txns.len(), 3, "{report}");
}

#[test]
fn per_key_real_time_names_the_shared_key() {
    let h = Hist::new()
        .at(Ok, 0, 10, vec![app("x", 1)])
        .at(Ok, 20, 30, vec![r("x", &[])]);
    let report = check(&h.0, SPS);
    let rt = report.anomalies[0]
        .cycle
        .iter()
        .find(|s| s.edge == meridian_check::EdgeType::Rt)
        .unwrap();
    assert_eq!(rt.key.as_deref(), Some("x"));
    assert!(
        rt.explanation.ends_with("; both touch x (rt)"),
        "{}",
        rt.explanation
    );
}

#[test]
fn lost_update_is_rejected_by_every_model() {
    let h = Hist::new()
        .ok(vec![r("x", &[]), app("x", 1)])
        .ok(vec![r("x", &[]), app("x", 2)])
        .ok(vec![r("x", &[1, 2])]);
    for model in Model::ALL {
        expect(&h.0, model, &[K::GSingle]);
    }
}

#[test]
fn a_serial_history_passes_every_model() {
    let h = Hist::new()
        .at(Ok, 0, 10, vec![r("x", &[]), app("x", 1), w("r", 1)])
        .at(
            Ok,
            11,
            20,
            vec![r("x", &[1]), app("x", 2), app("y", 1), r_int("r", 1)],
        )
        .at(Ok, 21, 30, vec![r("y", &[1]), r("x", &[1, 2]), w("r", 2)])
        .at(meridian_check::EntryType::Fail, 31, 40, vec![app("x", 9)])
        .at(meridian_check::EntryType::Info, 41, 50, vec![app("y", 7)])
        .at(
            Ok,
            51,
            60,
            vec![r("x", &[1, 2]), r("y", &[1, 7]), r_int("r", 2)],
        );
    expect_all(&h.0, &[]);
    let report = check(&h.0, STRICT);
    assert_eq!(
        (
            report.stats.ok,
            report.stats.fail,
            report.stats.info,
            report.stats.info_included
        ),
        (4, 1, 1, 1)
    );
}

#[test]
fn real_time_ignores_concurrent_and_unfinished_transactions() {
    // Overlapping intervals order nothing, and an info transaction's completion bounds nothing.
    let overlapping =
        Hist::new()
            .at(Ok, 0, 20, vec![app("x", 1)])
            .at(Ok, 10, 30, vec![r("x", &[])]);
    expect(&overlapping.0, STRICT, &[]);
    let touching = Hist::new()
        .at(Ok, 0, 10, vec![app("x", 1)])
        .at(Ok, 10, 30, vec![r("x", &[])]);
    expect(&touching.0, STRICT, &[]);
    let info = Hist::new()
        .at(
            meridian_check::EntryType::Info,
            0,
            10,
            vec![app("x", 1), app("y", 1)],
        )
        .at(Ok, 20, 30, vec![r("x", &[])])
        .at(Ok, 40, 50, vec![r("y", &[1])]);
    expect(&info.0, STRICT, &[]);
}

#[test]
fn the_report_serializes_and_displays_every_anomaly() {
    let h = Hist::new()
        .ok(vec![r("x", &[]), app("x", 1)])
        .ok(vec![r("x", &[]), app("x", 2)])
        .ok(vec![r("x", &[1, 2]), r("z", &[5])]);
    let report = check(&h.0, SER);
    assert_eq!(report.kinds(), [K::GSingle, K::GarbageRead]);
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["model"], "serializable");
    assert_eq!(json["valid"], false);
    let kinds: Vec<_> = json["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["G-single", "garbage-read"]);
    let step = &json["anomalies"][0]["cycle"][0];
    for field in ["from", "to", "edge", "key", "explanation"] {
        assert!(!step[field].is_null(), "{field} missing in {step}");
    }
    assert_eq!(step["from"]["process"], step["from"]["index"]);
    assert!(json["stats"]["edges"]["rw"].as_u64().unwrap() >= 1);
    let text = report.to_string();
    assert!(
        text.starts_with("serializable: INVALID, 2 anomalies (1 G-single, 1 garbage-read)"),
        "{text}"
    );
    assert!(
        text.contains("[1] G-single") && text.contains("[2] garbage-read"),
        "{text}"
    );
    assert!(
        text.contains("T1 read x = [] which misses T0's append of 1 (rw)"),
        "{text}"
    );
}

/// DAST's Fig. 4: a CRT T0 appends to x (region A) and y (region B); T1 in A reads it and
/// completes; T2 in B starts afterwards and misses it. Strong partition serializability
/// allows this (T1 and T2 share no key); declared-strict-serializable allows it too unless
/// T2 declares that it follows T1 (an out-of-band dependency, §4.5), and then rejects it.
#[test]
fn a_declared_dependency_orders_transactions_of_disjoint_regions() {
    const DECLARED: Model = Model::DeclaredStrictSerializable;
    let fig4 = Hist::new()
        .at(Ok, 0, 100, vec![app("x", 1), app("y", 1)])
        .at(Ok, 5, 10, vec![r("x", &[1])])
        .at(Ok, 20, 30, vec![r("y", &[])]);
    expect(&fig4.0, SPS, &[]);
    expect(&fig4.0, DECLARED, &[]);
    expect(&fig4.0, STRICT, &[K::RealTime]);
    let mut declared = fig4.0.clone();
    declared[2].after = vec![1];
    expect(&declared, SPS, &[]);
    let report = expect(&declared, DECLARED, &[K::RealTime]);
    assert_eq!(report.anomalies[0].cycle.len(), 3, "{report}");
    // Declared the other way round, it is consistent with the reads.
    let mut consistent = fig4.0.clone();
    consistent[2].after = vec![];
    consistent[1] = meridian_check::Entry {
        invoke_ns: 40,
        complete_ns: 50,
        after: vec![2],
        ..consistent[1].clone()
    };
    expect(&consistent, DECLARED, &[]);
}

/// A declaration the client cannot have made is malformed: an index not in the history,
/// itself, or a transaction that had not completed when the declaring one was invoked. A
/// declared dependency that did not commit orders nothing.
#[test]
fn impossible_declarations_are_malformed_and_aborted_dependencies_order_nothing() {
    const DECLARED: Model = Model::DeclaredStrictSerializable;
    for after in [vec![7], vec![1], vec![0]] {
        // T0 completes at 100, after T1 (invoked at 50) that names it.
        let mut h = Hist::new()
            .at(Ok, 0, 100, vec![app("x", 1)])
            .at(Ok, 50, 60, vec![r("y", &[])])
            .0;
        h[1].after = after.clone();
        let report = expect(&h, DECLARED, &[K::Malformed]);
        assert!(
            report.anomalies[0].explanation.contains("out-of-band"),
            "{after:?}: {report}"
        );
    }
    let mut h = Hist::new()
        .at(meridian_check::EntryType::Fail, 0, 10, vec![app("x", 1)])
        .at(Ok, 20, 30, vec![r("x", &[])])
        .0;
    h[1].after = vec![0];
    expect(&h, DECLARED, &[]);
    // Completing at the very instant the dependent is invoked orders the two.
    let mut h = Hist::new()
        .at(Ok, 0, 20, vec![app("x", 1), app("y", 1)])
        .at(Ok, 20, 30, vec![r("y", &[])])
        .0;
    expect(&h, DECLARED, &[]);
    h[1].after = vec![0];
    expect(&h, DECLARED, &[K::RealTime]);
}
