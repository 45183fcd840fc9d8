//! Property tests: random serial executions are valid under every model; dropping the last
//! element of one read (a stale read after real-time order) breaks strict serializability;
//! arbitrary garbage never panics.

use meridian_check::{check, Entry, EntryType, HistOp, Model, ReadValue};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A planned op: read or append, on one of a few keys.
#[derive(Clone, Debug)]
enum Plan {
    Read(u8),
    Append(u8),
}

fn plans() -> impl Strategy<Value = Vec<Vec<Plan>>> {
    let op = prop_oneof![
        (0u8..4).prop_map(Plan::Read),
        (0u8..4).prop_map(Plan::Append)
    ];
    prop::collection::vec(prop::collection::vec(op, 1..5), 1..40)
}

/// Runs the transactions one after the other against an in-memory map, each in its own
/// time slot, so the history is strictly serializable by construction.
fn execute(txns: &[Vec<Plan>]) -> Vec<Entry> {
    let mut state: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut next = 0i64;
    let mut history = Vec::new();
    for (i, plan) in txns.iter().enumerate() {
        let ops = plan
            .iter()
            .map(|p| match p {
                Plan::Read(k) => {
                    let key = format!("k{k}");
                    let value = state.get(&key).cloned().unwrap_or_default();
                    HistOp::Read {
                        key,
                        value: ReadValue::List(value),
                    }
                }
                Plan::Append(k) => {
                    let key = format!("k{k}");
                    next += 1;
                    state.entry(key.clone()).or_default().push(next);
                    HistOp::Append { key, value: next }
                }
            })
            .collect();
        let t = 100 * i as u64;
        history.push(Entry {
            index: i as u64,
            process: i as u64 % 3,
            kind: EntryType::Ok,
            invoke_ns: t,
            complete_ns: t + 50,
            ops,
            after: Vec::new(),
        });
    }
    history
}

/// (transaction, op) of every read that is its transaction's first op on the key and whose
/// last element another transaction appended.
fn stale_candidates(history: &[Entry]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (t, e) in history.iter().enumerate() {
        for (i, op) in e.ops.iter().enumerate() {
            let HistOp::Read {
                key,
                value: ReadValue::List(v),
            } = op
            else {
                continue;
            };
            let first_on_key = e.ops[..i].iter().all(|o| o.key() != key);
            let own = |x: &i64| {
                e.ops.iter().any(
                    |o| matches!(o, HistOp::Append { key: k, value } if k == key && value == x),
                )
            };
            if first_on_key && v.last().is_some_and(|x| !own(x)) {
                out.push((t, i));
            }
        }
    }
    out
}

proptest! {
    // No regression files: failing cases print their minimal input instead.
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn serial_executions_pass_every_model(txns in plans()) {
        let history = execute(&txns);
        for model in Model::ALL {
            let report = check(&history, model);
            prop_assert!(report.valid, "{}", report);
        }
    }

    #[test]
    fn a_stale_read_breaks_strict_serializability(txns in plans(), pick in any::<prop::sample::Index>()) {
        let mut history = execute(&txns);
        let candidates = stale_candidates(&history);
        if candidates.is_empty() {
            return Ok(()); // nothing to make stale (a few percent of cases)
        }
        let (t, i) = candidates[pick.index(candidates.len())];
        if let HistOp::Read { value: ReadValue::List(v), .. } = &mut history[t].ops[i] {
            v.pop();
        }
        let report = check(&history, Model::StrictSerializable);
        prop_assert!(!report.valid, "T{t} op {i} made stale, yet:\n{}", report);
    }

    #[test]
    fn arbitrary_histories_never_panic(entries in prop::collection::vec(arbitrary_entry(), 0..30)) {
        for model in Model::ALL {
            let report = check(&entries, model);
            prop_assert_eq!(report.valid, report.anomalies.is_empty());
            let _ = (report.to_string(), serde_json::to_string(&report).unwrap());
        }
    }
}

fn arbitrary_entry() -> impl Strategy<Value = Entry> {
    let key = (0u8..3).prop_map(|k| format!("k{k}"));
    let value = prop_oneof![
        Just(ReadValue::Null),
        (0i64..5).prop_map(ReadValue::Int),
        prop::collection::vec(0i64..5, 0..5).prop_map(ReadValue::List),
    ];
    let op = prop_oneof![
        (key.clone(), value).prop_map(|(key, value)| HistOp::Read { key, value }),
        (key.clone(), 0i64..5).prop_map(|(key, value)| HistOp::Append { key, value }),
        (key, 0i64..5).prop_map(|(key, value)| HistOp::Write { key, value }),
    ];
    let kind = prop_oneof![
        Just(EntryType::Ok),
        Just(EntryType::Ok),
        Just(EntryType::Fail),
        Just(EntryType::Info)
    ];
    (
        0u64..4,
        0u64..3,
        kind,
        0u64..50,
        0u64..50,
        prop::collection::vec(op, 0..5),
    )
        .prop_map(
            |(index, process, kind, invoke_ns, complete_ns, ops)| Entry {
                index,
                process,
                kind,
                invoke_ns,
                complete_ns,
                ops,
                after: Vec::new(),
            },
        )
}
