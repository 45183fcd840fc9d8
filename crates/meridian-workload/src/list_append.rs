//! `list-append`: the checker's workload (DESIGN §7), after Jepsen/Elle's list-append.
//!
//! Each transaction is 1..=`ops_max` operations; each op picks one of the `keys` active keys
//! uniformly and is a read (probability `read_ratio`) or an append of an integer that is
//! unique for that key: a per-key counter of the workload (1, 2, 3, ...), so unique across
//! all clients of the run (the driver builds one workload for all its clients, as
//! [`Workload`] intends; two instances would repeat values). Because every appended value
//! is unique and a list records the order of its appends, the checker recovers each key's
//! version order from the lists it reads.
//!
//! **Key rotation.** A key retires after `max_writes_per_key` appends and a fresh key takes
//! its slot (Jepsen's `max-writes-per-key`), so lists — and the values every read carries
//! in the history — stay short however long the run is; contention is unchanged (there are
//! always `keys` active keys). Key `k{i}` lives on shard `i mod shards` (placed with
//! [`Partitioner::key_on_shard`]), so the active keys spread evenly over the shards.
//!
//! **One-shot plans** group the ops by the key's shard into one piece per shard, pieces in
//! order of their shard's first op, ops in drawn order inside a piece. The plan order of
//! the ops — the order the history reports — is that piece-major order. Ops of different
//! pieces touch different shards, hence different keys, so they commute: the piece-major
//! order is equivalent to the drawn order, and ops on one key keep their relative order
//! (which is all Elle's internal-consistency check looks at). Since the mapping from plan
//! op to `(piece, op)` is the piece-major walk, [`Workload::history_ops`] is a pure
//! function of the plan and the outcome and needs no per-transaction state.
//!
//! **Locality** (`crt_ratio` below 1, for DAST's edge regions): a transaction draws its keys
//! only among the active keys on shards led from the client's region with probability
//! `1 - crt_ratio` (any active key if none is there); every transaction is labelled `irt`
//! or `crt` by the shards it ended up touching ([`Locality`]). At the default 1 the draw is
//! the plain one (the same random sequence as before the option existed).
//!
//! **Interactive plans** (`interactive=true`) are the drawn ops as `Get` and `Append` steps.
//!
//! **History.** Reads of a committed transaction report the list read (`[]` for a key never
//! written; the checker treats `[]` and `null` alike for lists); reads of an aborted or
//! unknown transaction report `null`; appends always report the intended value. Keys are
//! reported by their logical names (`k7`).

use crate::audit::FinalState;
use crate::options::Options;
use crate::{
    committed_results, interactive_reads_by_op, list_read, literal_int, logical_name, output,
    InteractiveOp, TxnPlan, Workload, WorkloadOptions,
};
use crate::{ClientInfo, Locality, Planned};
use meridian_check::{Entry, EntryType, HistOp, ReadValue};
use meridian_core::txn::{Key, Op, Operand, Outcome, Piece, PieceBody, Txn, Value};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, Partitioner, RegionId, ShardId};
use rand::Rng;
use rustc_hash::{FxHashMap, FxHashSet};

/// The list-append workload.
#[derive(Clone, Debug)]
pub struct ListAppend {
    partitioner: Partitioner,
    shards: u32,
    ops_max: u32,
    read_ratio: f64,
    max_writes_per_key: u64,
    interactive: bool,
    /// Probability that a transaction may touch any shard (see the module doc).
    crt_ratio: f64,
    /// Each shard's region (its initial leader's), for local draws.
    shard_region: Vec<RegionId>,
    locality: Locality,
    /// `active[slot]`: the key id in that slot.
    active: Vec<u64>,
    /// The id the next fresh key gets.
    next_key: u64,
    /// Appends so far, per key id (absent = none); the next value is this plus one.
    appends: FxHashMap<u64, u64>,
}

/// An op as drawn, before grouping.
enum Drawn {
    Read(u64),
    Append(u64, i64),
}

impl Drawn {
    fn key_id(&self) -> u64 {
        match *self {
            Drawn::Read(k) | Drawn::Append(k, _) => k,
        }
    }
}

impl ListAppend {
    pub const NAME: &'static str = "list-append";

    /// Builds the workload; see the crate docs for the options.
    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<ListAppend, String> {
        let mut o = Options::new(Self::NAME, options);
        let keys = o.int("keys", 16, 1..=1 << 20)?;
        let ops_max = o.int("ops_max", 4, 1..=1 << 10)?;
        let read_ratio = o.probability("read_ratio", 0.5)?;
        let max_writes_per_key = o.int("max_writes_per_key", 256, 0..=u64::MAX)?;
        let interactive = o.flag("interactive", false)?;
        let crt_ratio = o.probability("crt_ratio", 1.0)?;
        o.finish()?;
        let shard_region = (0..cluster.shard_count())
            .map(|s| cluster.region_of(cluster.initial_leader(ShardId(s))))
            .collect();
        Ok(ListAppend {
            partitioner: cluster.partitioner,
            shards: cluster.shard_count(),
            ops_max: ops_max as u32,
            read_ratio,
            max_writes_per_key,
            interactive,
            crt_ratio,
            shard_region,
            locality: Locality::new(cluster),
            active: (0..keys).collect(),
            next_key: keys,
            appends: FxHashMap::default(),
        })
    }

    /// The byte key of key id `id`: `k{id}`, placed on shard `id mod shards`.
    pub fn key(&self, id: u64) -> Key {
        let shard = ShardId((id % u64::from(self.shards)) as u32);
        self.partitioner.key_on_shard(shard, &format!("k{id}"))
    }

    /// The slots a local transaction of `region` draws from (empty: draw from all).
    fn local_slots(&self, region: RegionId) -> Vec<usize> {
        (0..self.active.len())
            .filter(|&slot| {
                let shard = (self.active[slot] % u64::from(self.shards)) as usize;
                self.shard_region.get(shard) == Some(&region)
            })
            .collect()
    }

    fn draw(&mut self, rng: &mut NodeRng, region: RegionId) -> Vec<Drawn> {
        let local = if self.crt_ratio < 1.0 && !rng.gen_bool(self.crt_ratio) {
            self.local_slots(region)
        } else {
            Vec::new()
        };
        let len = rng.gen_range(1..=self.ops_max);
        (0..len)
            .map(|_| {
                let slot = if local.is_empty() {
                    rng.gen_range(0..self.active.len())
                } else {
                    local[rng.gen_range(0..local.len())]
                };
                let id = self.active[slot];
                if rng.gen_bool(self.read_ratio) {
                    return Drawn::Read(id);
                }
                let count = self.appends.entry(id).or_insert(0);
                *count += 1;
                let value = *count as i64;
                if *count == self.max_writes_per_key {
                    self.appends.remove(&id);
                    self.active[slot] = self.next_key;
                    self.next_key += 1;
                }
                Drawn::Append(id, value)
            })
            .collect()
    }

    fn one_shot(&self, drawn: &[Drawn]) -> Txn {
        let mut pieces: Vec<(ShardId, Vec<Op>)> = Vec::new();
        for d in drawn {
            let key = self.key(d.key_id());
            let shard = self.partitioner.shard_of(&key);
            let op = match *d {
                Drawn::Read(_) => Op::Get(key),
                Drawn::Append(_, v) => Op::Append(key, Operand::Literal(encode_int(v))),
            };
            match pieces.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, ops)) => ops.push(op),
                None => pieces.push((shard, vec![op])),
            }
        }
        Txn {
            pieces: pieces
                .into_iter()
                .map(|(shard, ops)| Piece::ops(shard, ops))
                .collect(),
        }
    }

    fn interactive_plan(&self, drawn: &[Drawn]) -> Vec<InteractiveOp> {
        drawn
            .iter()
            .map(|d| match *d {
                Drawn::Read(id) => InteractiveOp::Get(self.key(id)),
                Drawn::Append(id, v) => InteractiveOp::Append(self.key(id), encode_int(v)),
            })
            .collect()
    }
}

impl Workload for ListAppend {
    fn name(&self) -> &str {
        Self::NAME
    }

    /// Labelled `irt` or `crt` besides `read-only`/`read-write`: whether every shard the
    /// transaction touches is led from the client's region.
    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let drawn = self.draw(rng, client.region);
        let mut shards: Vec<ShardId> = drawn
            .iter()
            .map(|d| self.partitioner.shard_of(&self.key(d.key_id())))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        let class = self.locality.class(client, shards);
        let planned: Planned = if self.interactive {
            TxnPlan::Interactive(self.interactive_plan(&drawn)).into()
        } else {
            TxnPlan::OneShot(self.one_shot(&drawn)).into()
        };
        planned.class(class)
    }

    fn history_ops(
        &self,
        plan: &TxnPlan,
        outcome: &Outcome,
        interactive_reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        let mut hist = Vec::new();
        match plan {
            TxnPlan::OneShot(txn) => {
                let results = committed_results(txn, outcome);
                for (p, piece) in txn.pieces.iter().enumerate() {
                    let PieceBody::Ops(ops) = &piece.body else {
                        continue;
                    };
                    for (i, op) in ops.iter().enumerate() {
                        hist.extend(match op {
                            Op::Get(key) => Some(HistOp::Read {
                                key: logical_name(key),
                                value: match results {
                                    Some(r) => list_read(key, output(r, p, i)),
                                    None => ReadValue::Null,
                                },
                            }),
                            Op::Append(key, Operand::Literal(v)) => Some(HistOp::Append {
                                key: logical_name(key),
                                value: literal_int(v),
                            }),
                            // Not planned by this workload.
                            Op::Append(..) | Op::Put(..) | Op::Add(..) | Op::Check(..) => None,
                        });
                    }
                }
            }
            TxnPlan::Interactive(ops) => {
                let reads = outcome
                    .is_committed()
                    .then(|| interactive_reads_by_op(ops, interactive_reads));
                for (i, op) in ops.iter().enumerate() {
                    match op {
                        InteractiveOp::Get(_) | InteractiveOp::GetMany(_) => {
                            hist.extend(op.keys().iter().enumerate().map(|(j, key)| HistOp::Read {
                                key: logical_name(key),
                                value: match &reads {
                                    Some(reads) => list_read(key, reads[i][j].as_ref()),
                                    None => ReadValue::Null,
                                },
                            }))
                        }
                        InteractiveOp::Append(key, v) => hist.push(HistOp::Append {
                            key: logical_name(key),
                            value: literal_int(v),
                        }),
                        InteractiveOp::Put(..) | InteractiveOp::Add(..) => {}
                    }
                }
            }
        }
        hist
    }

    /// Every key this run used, for the durability audit.
    fn audit_keys(&self) -> Vec<Key> {
        (0..self.next_key).map(|id| self.key(id)).collect()
    }

    /// Durability after recovery: every append of a committed transaction is in its key's
    /// final list, and no append of an aborted one is. (The checker judges the order; this
    /// catches a committed append lost without a later read to show it.)
    fn check_final(&self, state: &FinalState, history: &[Entry]) -> Result<(), String> {
        let mut finals: FxHashMap<String, FxHashSet<i64>> = FxHashMap::default();
        for id in 0..self.next_key {
            let list = state.list(&self.key(id))?;
            finals.insert(format!("k{id}"), list.into_iter().collect());
        }
        for e in history {
            let must_hold = match e.kind {
                EntryType::Ok => true,
                EntryType::Fail => false,
                EntryType::Info => continue,
            };
            for op in &e.ops {
                let HistOp::Append { key, value } = op else {
                    continue;
                };
                let held = finals.get(key).is_some_and(|l| l.contains(value));
                if held != must_hold {
                    let what = if must_hold { "committed" } else { "aborted" };
                    return Err(format!(
                        "list-append: {what} transaction {} appended {value} to {key}, and \
                         the final list {} it",
                        e.index,
                        if held { "holds" } else { "lacks" }
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, execute, rng, InteractiveDriver, MapStore};
    use std::collections::{BTreeMap, BTreeSet};

    fn workload(shards: u32, opts: &[(&str, &str)]) -> ListAppend {
        let mut o = WorkloadOptions::default();
        for (k, v) in opts {
            o = o.with(k, v);
        }
        ListAppend::new(&cluster(shards), &o).unwrap()
    }

    /// Plans of `clients` clients, interleaved round-robin.
    fn plans(w: &mut ListAppend, clients: u32, per_client: usize, seed: u64) -> Vec<TxnPlan> {
        let mut rngs: Vec<NodeRng> = (0..clients)
            .map(|c| rng(seed * 1000 + u64::from(c)))
            .collect();
        let mut out = Vec::new();
        for _ in 0..per_client {
            for (c, r) in rngs.iter_mut().enumerate() {
                out.push(w.next(&crate::test_support::client(c as u32), r).plan);
            }
        }
        out
    }

    /// Locality for DAST: a client in the leaders' region draws only local keys at
    /// `crt_ratio=0` (IRTs); a client with no local shard falls back to any key (CRTs);
    /// the labels say which.
    #[test]
    fn crt_ratio_zero_keeps_transactions_in_the_clients_region_and_labels_them() {
        let c = cluster(2);
        let opts = WorkloadOptions::default().with("crt_ratio", "0");
        let mut w = ListAppend::new(&c, &opts).unwrap();
        let mut r = rng(3);
        let at = |region: u16| ClientInfo {
            id: meridian_core::ClientId(0),
            coordinator: c.coordinators[0],
            region: RegionId(region),
        };
        for _ in 0..50 {
            assert!(w.next(&at(0), &mut r).classes.contains(crate::IRT));
            assert!(w.next(&at(1), &mut r).classes.contains(crate::CRT));
        }
        assert!(ListAppend::new(&c, &WorkloadOptions::default().with("crt_ratio", "2")).is_err());
    }

    #[test]
    fn one_shot_plans_are_valid_and_grouped_by_shard() {
        for shards in [1, 2, 3, 5] {
            let mut w = workload(shards, &[]);
            for plan in plans(&mut w, 4, 100, 1) {
                let TxnPlan::OneShot(txn) = plan else {
                    panic!("one-shot expected")
                };
                txn.validate(shards).unwrap();
                assert_eq!(txn.shards().len(), txn.pieces.len(), "one piece per shard");
                let mut ops = 0;
                for piece in &txn.pieces {
                    let PieceBody::Ops(body) = &piece.body else {
                        panic!()
                    };
                    ops += body.len();
                    for op in body {
                        assert_eq!(w.partitioner.shard_of(op.key()), piece.shard);
                        assert!(matches!(
                            op,
                            Op::Get(_) | Op::Append(_, Operand::Literal(_))
                        ));
                    }
                }
                assert!((1..=4).contains(&ops));
            }
        }
    }

    #[test]
    fn appended_values_are_unique_per_key_across_clients() {
        for interactive in ["false", "true"] {
            let mut w = workload(
                3,
                &[
                    ("interactive", interactive),
                    ("keys", "4"),
                    ("max_writes_per_key", "0"),
                ],
            );
            let mut seen: BTreeSet<(String, i64)> = BTreeSet::new();
            let mut appends = 0;
            for plan in plans(&mut w, 8, 200, 2) {
                let hist = w.history_ops(&plan, &aborted(), &[]);
                for op in hist {
                    if let HistOp::Append { key, value } = op {
                        appends += 1;
                        assert!(seen.insert((key.clone(), value)), "{key} {value} twice");
                    }
                }
            }
            assert!(appends > 1000, "{appends}");
        }
    }

    fn aborted() -> Outcome {
        Outcome::Aborted {
            reason: meridian_core::AbortReason::Conflict,
        }
    }

    /// Replays a serial history against a model of the lists: every read must see exactly
    /// the appends before it, in order.
    fn check_serial(histories: &[Vec<HistOp>]) -> usize {
        let mut model: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        let mut reads = 0;
        for ops in histories {
            for op in ops {
                match op {
                    HistOp::Append { key, value } => {
                        model.entry(key.clone()).or_default().push(*value)
                    }
                    HistOp::Read { key, value } => {
                        reads += 1;
                        let expected = model.get(key).cloned().unwrap_or_default();
                        assert_eq!(value, &ReadValue::List(expected), "read of {key}");
                    }
                    HistOp::Write { .. } => panic!("list-append never writes"),
                }
            }
        }
        reads
    }

    #[test]
    fn one_shot_history_maps_results_back_in_plan_order() {
        let mut w = workload(
            3,
            &[
                ("keys", "5"),
                ("ops_max", "8"),
                ("max_writes_per_key", "20"),
            ],
        );
        let mut store = MapStore::default();
        let mut histories = Vec::new();
        for plan in plans(&mut w, 3, 200, 3) {
            let TxnPlan::OneShot(txn) = &plan else {
                panic!()
            };
            let outcome = execute(txn, &mut store);
            let hist = w.history_ops(&plan, &outcome, &[]);
            let planned: usize = txn
                .pieces
                .iter()
                .map(|p| match &p.body {
                    PieceBody::Ops(ops) => ops.len(),
                    PieceBody::Procedure(_) => 0,
                })
                .sum();
            assert_eq!(hist.len(), planned);
            histories.push(hist);
        }
        assert!(check_serial(&histories) > 500);
        // Keys rotated: more than the 5 initial keys were used.
        let keys: BTreeSet<&str> = histories.iter().flatten().map(HistOp::key).collect();
        assert!(keys.len() > 5, "{keys:?}");
        assert!(keys.iter().all(|k| k.starts_with('k') && !k.contains('~')));
    }

    #[test]
    fn a_hand_built_plan_reports_reads_in_place() {
        let w = workload(2, &[]);
        // k0 is on shard 0, k1 on shard 1.
        let (k0, k1) = (w.key(0), w.key(1));
        let lit = |v| Operand::Literal(encode_int(v));
        let txn = Txn {
            pieces: vec![
                Piece::ops(
                    ShardId(0),
                    vec![
                        Op::Get(k0.clone()),
                        Op::Append(k0.clone(), lit(7)),
                        Op::Get(k0.clone()),
                    ],
                ),
                Piece::ops(
                    ShardId(1),
                    vec![Op::Append(k1.clone(), lit(3)), Op::Get(k1.clone())],
                ),
            ],
        };
        txn.validate(2).unwrap();
        let mut store = MapStore::default();
        store.insert(k0.clone(), meridian_core::value::encode_list(&[1, 2]));
        let plan = TxnPlan::OneShot(txn.clone());
        let hist = w.history_ops(&plan, &execute(&txn, &mut store), &[]);
        let r = |k: &str, v: &[i64]| HistOp::Read {
            key: k.into(),
            value: ReadValue::List(v.to_vec()),
        };
        let a = |k: &str, v| HistOp::Append {
            key: k.into(),
            value: v,
        };
        assert_eq!(
            hist,
            vec![
                r("k0", &[1, 2]),
                a("k0", 7),
                r("k0", &[1, 2, 7]),
                a("k1", 3),
                r("k1", &[3])
            ]
        );
        // Aborted and unknown: reads null, appends as intended.
        let null = |k: &str| HistOp::Read {
            key: k.into(),
            value: ReadValue::Null,
        };
        let expected = vec![null("k0"), a("k0", 7), null("k0"), a("k1", 3), null("k1")];
        assert_eq!(w.history_ops(&plan, &aborted(), &[]), expected);
        let unknown = Outcome::Unknown {
            reason: "lost".into(),
        };
        assert_eq!(w.history_ops(&plan, &unknown, &[]), expected);
    }

    #[test]
    fn interactive_history_uses_the_driver_reads() {
        let mut w = workload(
            3,
            &[("interactive", "true"), ("keys", "4"), ("ops_max", "6")],
        );
        let mut driver = InteractiveDriver::default();
        let mut histories = Vec::new();
        for plan in plans(&mut w, 3, 150, 4) {
            let TxnPlan::Interactive(ops) = &plan else {
                panic!()
            };
            assert!((1..=6).contains(&ops.len()));
            assert!(ops.iter().all(|op| !matches!(op, InteractiveOp::Put(..))));
            let reads = driver.run(ops);
            let committed = Outcome::Committed {
                results: vec![],
                commit_ts: None,
                path: meridian_core::CommitPath::Slow,
            };
            let hist = w.history_ops(&plan, &committed, &reads);
            assert_eq!(hist.len(), ops.len());
            histories.push(hist);
        }
        assert!(check_serial(&histories) > 200);
    }

    #[test]
    fn interactive_reads_are_the_gets_only() {
        let w = workload(2, &[]);
        let (k0, k1) = (w.key(0), w.key(1));
        let ops = vec![
            InteractiveOp::Append(k0.clone(), encode_int(5)),
            InteractiveOp::Put(k1.clone(), encode_int(9)),
            InteractiveOp::Get(k0.clone()),
        ];
        // One read per get: the append is a read-modify-write the client never reads
        // (Step::Modify), the put reads nothing.
        let reads = InteractiveDriver::default().run(&ops);
        assert_eq!(reads, vec![Some(meridian_core::value::encode_list(&[5]))]);
        let committed = Outcome::Committed {
            results: vec![],
            commit_ts: None,
            path: meridian_core::CommitPath::Slow,
        };
        let hist = w.history_ops(&TxnPlan::Interactive(ops), &committed, &reads);
        assert_eq!(
            hist,
            vec![
                HistOp::Append {
                    key: "k0".into(),
                    value: 5
                },
                HistOp::Read {
                    key: "k0".into(),
                    value: ReadValue::List(vec![5])
                },
            ]
        );
    }

    #[test]
    fn same_seed_same_plans() {
        for interactive in ["false", "true"] {
            let opts = [("interactive", interactive)];
            let a = plans(&mut workload(3, &opts), 4, 50, 5);
            let b = plans(&mut workload(3, &opts), 4, 50, 5);
            let c = plans(&mut workload(3, &opts), 4, 50, 6);
            assert_eq!(a, b);
            assert_ne!(a, c);
        }
    }

    #[test]
    fn options_are_checked() {
        let c = cluster(3);
        let bad = |k: &str, v: &str| {
            ListAppend::new(&c, &WorkloadOptions::default().with(k, v)).unwrap_err()
        };
        for (k, v) in [
            ("keys", "0"),
            ("keys", "many"),
            ("ops_max", "0"),
            ("read_ratio", "1.5"),
            ("read_ratio", "NaN"),
            ("interactive", "yes"),
            ("max_writes_per_key", "-1"),
        ] {
            let e = bad(k, v);
            assert!(
                e.contains(k) && e.contains(v) && e.contains("list-append"),
                "{e}"
            );
        }
        let e = bad("key", "3");
        assert!(
            e.contains("unknown option `key`") && e.contains("keys"),
            "{e}"
        );
        // Extremes are honoured.
        let mut reads_only = workload(2, &[("read_ratio", "1")]);
        let mut r = rng(1);
        for _ in 0..50 {
            let TxnPlan::OneShot(txn) = reads_only
                .next(&crate::test_support::client(0), &mut r)
                .plan
            else {
                panic!()
            };
            assert!(txn.is_read_only());
        }
    }

    #[test]
    fn the_audit_finds_a_lost_committed_append_and_a_surviving_aborted_one() {
        let c = cluster(3);
        let mut w = workload(3, &[("keys", "4"), ("max_writes_per_key", "8")]);
        let mut store = MapStore::default();
        let mut history = Vec::new();
        for (i, plan) in plans(&mut w, 2, 40, 5).into_iter().enumerate() {
            let TxnPlan::OneShot(txn) = &plan else {
                panic!()
            };
            let outcome = execute(txn, &mut store);
            history.push(Entry {
                index: i as u64,
                process: 0,
                kind: EntryType::Ok,
                invoke_ns: i as u64,
                complete_ns: i as u64,
                ops: w.history_ops(&plan, &outcome, &[]),
                after: Vec::new(),
            });
        }
        let keys = w.audit_keys();
        assert!(keys.len() > 4, "keys rotated: {}", keys.len());
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut store));
        assert_eq!(crate::audit::verdict(&w, &keys, &state, &history), Ok(()));
        // A committed append the store lost (a key emptied) is caught.
        let (lost, _) = history
            .iter()
            .flat_map(|e| &e.ops)
            .find_map(|op| match op {
                HistOp::Append { key, value } => Some((key.clone(), *value)),
                _ => None,
            })
            .unwrap();
        let id: u64 = lost[1..].parse().unwrap();
        let mut lossy = store.clone();
        lossy.insert(w.key(id), meridian_core::value::encode_list(&[]));
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut lossy));
        let e = crate::audit::verdict(&w, &keys, &state, &history).unwrap_err();
        assert!(e.contains("committed") && e.contains("lacks"), "{e}");
        // An append reported aborted that is in the final state is caught too.
        let mut flipped = history.clone();
        let with_append = flipped
            .iter_mut()
            .find(|e| e.ops.iter().any(|o| matches!(o, HistOp::Append { .. })))
            .unwrap();
        with_append.kind = EntryType::Fail;
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut store));
        let e = crate::audit::verdict(&w, &keys, &state, &flipped).unwrap_err();
        assert!(e.contains("aborted") && e.contains("holds"), "{e}");
    }
}
