//! `bank`: money moves between accounts and the total never changes (the classic Jepsen bank
//! test; DESIGN §7's workload-specific invariant).
//!
//! * `accounts` accounts `acct0..`, account `i` on shard `i mod shards` (placed with
//!   [`Partitioner::key_on_shard`](meridian_core::Partitioner::key_on_shard)), so transfers cross shards.
//! * **Initial balances.** Every account starts at 0 implicitly: a missing key reads as 0 and
//!   `add` treats it as 0, so no setup transaction is needed and the run can start on an
//!   empty store. Balances may go negative; the invariant is **the total is 0**. (A torn
//!   read — half a transfer — shows up as a non-zero sum just the same.)
//! * **Transfer** (probability `1 - read_ratio`): two distinct accounts, an amount in
//!   `1..=max_amount`, `add(from, -amount)` and `add(to, +amount)` — one piece per shard
//!   (one piece with both ops when the accounts share a shard).
//! * **Read-all** (probability `read_ratio`): a `get` of every account, one piece per shard.
//!
//! **History.** A read-all reports `["r", "acctI", balance]` per account, in plan order
//! (piece by piece); `null` when it did not commit. A transfer reports no ops: the value an
//! `add` writes is not unique per key (balances repeat), so recording it as a `w` would feed
//! the checker's version-order inference a falsehood, and the amount alone says nothing the
//! checker can use. The bank's check is [`Workload::check_history`]: every committed
//! read-all must read every account once and sum to 0. (The generic dependency checker
//! sees only reads of integers nobody is recorded as writing; run it on `list-append`.)

use crate::options::Options;
use crate::{
    committed_results, int_read, interactive_reads_by_op, logical_name, output, InteractiveOp,
    TxnPlan, Workload, WorkloadOptions,
};
use crate::{ClientInfo, Planned};
use meridian_check::{Entry, EntryType, HistOp, ReadValue};
use meridian_core::txn::{Key, Op, Operand, Outcome, Piece, PieceBody, Txn, Value};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, ShardId};
use rand::Rng;
use rustc_hash::FxHashMap;

/// The bank workload.
#[derive(Clone, Debug)]
pub struct Bank {
    shards: u32,
    read_ratio: f64,
    max_amount: u64,
    /// `keys[i]`: the byte key of account `i`.
    keys: Vec<Key>,
    /// Account index by logical name, for the check.
    by_name: FxHashMap<String, usize>,
}

impl Bank {
    pub const NAME: &'static str = "bank";

    /// The invariant: the sum of all balances (every account starts at 0).
    pub const TOTAL: i64 = 0;

    /// Builds the workload; see the crate docs for the options.
    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<Bank, String> {
        let mut o = Options::new(Self::NAME, options);
        let accounts = o.int("accounts", 8, 2..=100_000)?;
        let read_ratio = o.probability("read_ratio", 0.5)?;
        let max_amount = o.int("max_amount", 10, 1..=1 << 32)?;
        o.finish()?;
        let shards = cluster.shard_count();
        let keys: Vec<Key> = (0..accounts)
            .map(|i| {
                let shard = ShardId((i % u64::from(shards)) as u32);
                cluster
                    .partitioner
                    .key_on_shard(shard, &Self::account_name(i as usize))
            })
            .collect();
        let by_name = (0..keys.len())
            .map(|i| (Self::account_name(i), i))
            .collect();
        Ok(Bank {
            shards,
            read_ratio,
            max_amount,
            keys,
            by_name,
        })
    }

    /// The logical name of account `i` (as the history reports it).
    pub fn account_name(i: usize) -> String {
        format!("acct{i}")
    }

    /// The byte key of account `i`.
    pub fn key(&self, i: usize) -> &Key {
        &self.keys[i]
    }

    fn shard(&self, account: usize) -> ShardId {
        ShardId((account % self.shards as usize) as u32)
    }

    /// Groups `(account, op)` pairs into one piece per shard, in order of first appearance.
    fn pieces(&self, ops: impl IntoIterator<Item = (usize, Op)>) -> Txn {
        let mut pieces: Vec<Piece> = Vec::new();
        for (account, op) in ops {
            let shard = self.shard(account);
            match pieces.iter_mut().find(|p| p.shard == shard) {
                Some(Piece {
                    body: PieceBody::Ops(body),
                    ..
                }) => body.push(op),
                _ => pieces.push(Piece::ops(shard, vec![op])),
            }
        }
        Txn { pieces }
    }

    fn transfer(&self, rng: &mut NodeRng) -> Txn {
        let n = self.keys.len();
        let from = rng.gen_range(0..n);
        let mut to = rng.gen_range(0..n - 1);
        if to >= from {
            to += 1;
        }
        let amount = rng.gen_range(1..=self.max_amount) as i64;
        let add = |account: usize, delta: i64| {
            (
                account,
                Op::Add(
                    self.keys[account].clone(),
                    Operand::Literal(encode_int(delta)),
                ),
            )
        };
        self.pieces([add(from, -amount), add(to, amount)])
    }

    fn read_all(&self) -> Txn {
        let mut accounts: Vec<usize> = (0..self.keys.len()).collect();
        accounts.sort_by_key(|&a| self.shard(a));
        self.pieces(
            accounts
                .into_iter()
                .map(|a| (a, Op::Get(self.keys[a].clone()))),
        )
    }

    /// Checks one committed entry: a read-all must read each account once and sum to 0.
    /// Entries without ops (transfers) pass.
    fn check_entry(&self, entry: &Entry) -> Result<(), String> {
        if entry.ops.is_empty() {
            return Ok(());
        }
        let at = format!("entry {} (process {})", entry.index, entry.process);
        let mut seen = vec![false; self.keys.len()];
        let mut sum: i64 = 0;
        for op in &entry.ops {
            let HistOp::Read { key, value } = op else {
                return Err(format!(
                    "{at}: a bank history holds only reads, found {op:?}"
                ));
            };
            let Some(&account) = self.by_name.get(key) else {
                return Err(format!(
                    "{at}: reads `{key}`, which is not one of the {} accounts",
                    self.keys.len()
                ));
            };
            if std::mem::replace(&mut seen[account], true) {
                return Err(format!("{at}: reads `{key}` twice"));
            }
            let ReadValue::Int(balance) = value else {
                return Err(format!(
                    "{at}: committed read of `{key}` is {value:?}, not a balance"
                ));
            };
            // Balances are wrapping integers (`add` wraps), so their sum is taken the same way.
            sum = sum.wrapping_add(*balance);
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(format!(
                "{at}: a read-all must read every account, but `{}` is missing",
                Self::account_name(missing)
            ));
        }
        if sum != Self::TOTAL {
            return Err(format!(
                "{at}: read-all sums to {sum}, expected {} (a torn read)",
                Self::TOTAL
            ));
        }
        Ok(())
    }
}

impl Workload for Bank {
    fn history_checkable(&self) -> bool {
        false
    }

    fn name(&self) -> &str {
        Self::NAME
    }

    fn next(&mut self, _client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        TxnPlan::OneShot(if rng.gen_bool(self.read_ratio) {
            self.read_all()
        } else {
            self.transfer(rng)
        })
        .into()
    }

    fn history_ops(
        &self,
        plan: &TxnPlan,
        outcome: &Outcome,
        interactive_reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        let read = |key: &Key, value: Option<Option<&Value>>| HistOp::Read {
            key: logical_name(key),
            value: match value {
                Some(v) => ReadValue::Int(int_read(key, v)),
                None => ReadValue::Null,
            },
        };
        match plan {
            TxnPlan::OneShot(txn) => {
                let is_read_all = txn
                    .pieces
                    .iter()
                    .all(|p| matches!(&p.body, PieceBody::Ops(ops) if ops.iter().all(|op| matches!(op, Op::Get(_)))));
                if !is_read_all {
                    return Vec::new();
                }
                let results = committed_results(txn, outcome);
                let mut hist = Vec::new();
                for (p, piece) in txn.pieces.iter().enumerate() {
                    if let PieceBody::Ops(ops) = &piece.body {
                        for (i, op) in ops.iter().enumerate() {
                            hist.push(read(op.key(), results.map(|r| output(r, p, i))));
                        }
                    }
                }
                hist
            }
            // The bank plans no interactive transactions; a plan of gets is read like one.
            TxnPlan::Interactive(ops) => {
                if !ops.iter().all(|op| matches!(op, InteractiveOp::Get(_))) {
                    return Vec::new();
                }
                let reads = outcome
                    .is_committed()
                    .then(|| interactive_reads_by_op(ops, interactive_reads));
                ops.iter()
                    .enumerate()
                    .map(|(i, op)| {
                        let value = reads
                            .as_ref()
                            .map(|r| r[i].first().and_then(Option::as_ref));
                        read(&op.keys()[0], value)
                    })
                    .collect()
            }
        }
    }

    /// Every committed read-all reads each account once and sums to [`Bank::TOTAL`]. The
    /// error names the first offending entry (its `index`) and its sum, and counts the rest.
    fn check_history(&self, history: &[Entry]) -> Result<(), String> {
        let mut errors = history
            .iter()
            .filter(|e| e.kind == EntryType::Ok)
            .filter_map(|e| self.check_entry(e).err());
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let more = errors.count();
        Err(if more == 0 {
            format!("bank: {first}")
        } else {
            format!("bank: {first} (and {more} more offending entries)")
        })
    }

    /// Every account, so the audit checks the total on the final state even when no
    /// history is recorded (benchmarks) and no read-all happened to run.
    fn audit_keys(&self) -> Vec<Key> {
        self.keys.clone()
    }

    /// The final balances sum to [`Bank::TOTAL`].
    fn check_final(
        &self,
        state: &crate::audit::FinalState,
        _history: &[Entry],
    ) -> Result<(), String> {
        let mut total: i64 = 0;
        for key in &self.keys {
            total = total.wrapping_add(state.int(key)?);
        }
        if total != Self::TOTAL {
            return Err(format!(
                "bank: the final balances sum to {total}, not {}",
                Self::TOTAL
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, execute, rng, MapStore};

    fn bank(shards: u32, opts: &[(&str, &str)]) -> Bank {
        let mut o = WorkloadOptions::default();
        for (k, v) in opts {
            o = o.with(k, v);
        }
        Bank::new(&cluster(shards), &o).unwrap()
    }

    /// Runs `txns` transactions serially and returns the history.
    fn run(w: &mut Bank, txns: usize, seed: u64) -> Vec<Entry> {
        let mut store = MapStore::default();
        let mut rngs: Vec<NodeRng> = (0..3).map(|c| rng(seed * 10 + c)).collect();
        (0..txns)
            .map(|i| {
                let client = i % 3;
                let plan = w
                    .next(
                        &crate::test_support::client(client as u32),
                        &mut rngs[client],
                    )
                    .plan;
                let TxnPlan::OneShot(txn) = &plan else {
                    panic!()
                };
                let outcome = execute(txn, &mut store);
                Entry {
                    index: i as u64,
                    process: client as u64,
                    kind: EntryType::Ok,
                    invoke_ns: i as u64,
                    complete_ns: i as u64 + 1,
                    ops: w.history_ops(&plan, &outcome, &[]),
                    after: Vec::new(),
                }
            })
            .collect()
    }

    #[test]
    fn plans_are_valid_transfers_and_read_alls() {
        for shards in [1, 2, 3, 5] {
            let mut w = bank(shards, &[("accounts", "7")]);
            let mut r = rng(1);
            let (mut transfers, mut read_alls) = (0, 0);
            for _ in 0..300 {
                let TxnPlan::OneShot(txn) = w.next(&crate::test_support::client(0), &mut r).plan
                else {
                    panic!()
                };
                txn.validate(shards).unwrap();
                assert_eq!(txn.shards().len(), txn.pieces.len());
                let ops: Vec<&Op> = txn
                    .pieces
                    .iter()
                    .flat_map(|p| {
                        let PieceBody::Ops(ops) = &p.body else {
                            panic!()
                        };
                        ops.iter().inspect(move |op| {
                            assert_eq!(cluster(shards).partitioner.shard_of(op.key()), p.shard)
                        })
                    })
                    .collect();
                if txn.is_read_only() {
                    read_alls += 1;
                    assert_eq!(ops.len(), 7);
                } else {
                    transfers += 1;
                    let [Op::Add(a, Operand::Literal(x)), Op::Add(b, Operand::Literal(y))] =
                        ops[..]
                    else {
                        panic!("{ops:?}")
                    };
                    assert_ne!(a, b);
                    let (x, y) = (crate::literal_int(x), crate::literal_int(y));
                    assert_eq!(x, -y);
                    assert!((1..=10).contains(&y));
                }
            }
            assert!(transfers > 100 && read_alls > 100);
        }
    }

    #[test]
    fn the_audit_checks_the_final_total() {
        let c = cluster(3);
        let mut w = Bank::new(&c, &WorkloadOptions::default().with("read_ratio", "0")).unwrap();
        let mut store = MapStore::default();
        let mut r = rng(8);
        for _ in 0..50 {
            let TxnPlan::OneShot(txn) = w.next(&crate::test_support::client(0), &mut r).plan else {
                panic!()
            };
            execute(&txn, &mut store);
        }
        let keys = w.audit_keys();
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut store));
        assert_eq!(crate::audit::verdict(&w, &keys, &state, &[]), Ok(()));
        // Money created out of nothing (a lost debit) is caught.
        store.insert(
            w.keys[1].clone(),
            encode_int(state.int(&w.keys[1]).unwrap() + 1),
        );
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut store));
        let e = crate::audit::verdict(&w, &keys, &state, &[]).unwrap_err();
        assert!(e.contains("sum to 1"), "{e}");
    }

    #[test]
    fn a_serial_history_keeps_the_total() {
        let mut w = bank(3, &[]);
        let history = run(&mut w, 500, 2);
        let read_alls = history.iter().filter(|e| !e.ops.is_empty()).count();
        assert!(read_alls > 150);
        // Balances really moved (the check is not vacuous).
        assert!(history
            .iter()
            .flat_map(|e| &e.ops)
            .any(|op| matches!(op, HistOp::Read { value: ReadValue::Int(b), .. } if *b != 0)));
        w.check_history(&history).unwrap();
    }

    #[test]
    fn a_torn_read_all_is_rejected() {
        let mut w = bank(3, &[]);
        let mut history = run(&mut w, 200, 3);
        let victim = history
            .iter()
            .rposition(|e| {
                e.ops.iter().any(
                    |op| matches!(op, HistOp::Read { value: ReadValue::Int(b), .. } if *b != 0),
                )
            })
            .unwrap();
        // Tear it: forget one account's side of a transfer.
        let HistOp::Read {
            value: ReadValue::Int(b),
            ..
        } = history[victim]
            .ops
            .iter_mut()
            .find(|op| matches!(op, HistOp::Read { value: ReadValue::Int(b), .. } if *b != 0))
            .unwrap()
        else {
            unreachable!()
        };
        let torn_by = *b;
        *b = 0;
        let index = history[victim].index;
        let e = w.check_history(&history).unwrap_err();
        assert!(e.contains(&format!("entry {index} ")), "{e}");
        assert!(e.contains(&format!("sums to {}", -torn_by)), "{e}");
        // The same tear in an aborted or unknown entry is not a violation.
        history[victim].kind = EntryType::Info;
        w.check_history(&history).unwrap();
        history[victim].kind = EntryType::Fail;
        w.check_history(&history).unwrap();
    }

    #[test]
    fn malformed_read_alls_are_rejected() {
        let w = bank(2, &[("accounts", "3")]);
        let entry = |ops: Vec<HistOp>| Entry {
            index: 9,
            process: 1,
            kind: EntryType::Ok,
            invoke_ns: 0,
            complete_ns: 1,
            ops,
            after: Vec::new(),
        };
        let r = |k: &str, v: ReadValue| HistOp::Read {
            key: k.into(),
            value: v,
        };
        let int = ReadValue::Int;
        let cases = [
            (vec![r("acct0", int(1)), r("acct1", int(-1))], "missing"),
            (
                vec![r("acct0", int(0)), r("acct0", int(0)), r("acct2", int(0))],
                "twice",
            ),
            (
                vec![
                    r("acct0", int(0)),
                    r("acct1", ReadValue::Null),
                    r("acct2", int(0)),
                ],
                "not a balance",
            ),
            (vec![r("acct7", int(0))], "not one of the 3 accounts"),
            (
                vec![HistOp::Write {
                    key: "acct0".into(),
                    value: 1,
                }],
                "only reads",
            ),
        ];
        for (ops, why) in cases {
            let e = w.check_history(&[entry(ops)]).unwrap_err();
            assert!(e.contains("entry 9") && e.contains(why), "{e}");
        }
        w.check_history(&[entry(vec![
            r("acct2", int(5)),
            r("acct0", int(-7)),
            r("acct1", int(2)),
        ])])
        .unwrap();
    }

    #[test]
    fn history_of_unfinished_transactions() {
        let mut w = bank(3, &[("read_ratio", "1")]);
        let plan = w.next(&crate::test_support::client(0), &mut rng(4)).plan;
        let aborted = Outcome::Aborted {
            reason: meridian_core::AbortReason::Timeout,
        };
        let hist = w.history_ops(&plan, &aborted, &[]);
        assert_eq!(hist.len(), 8);
        assert!(hist.iter().all(|op| matches!(
            op,
            HistOp::Read {
                value: ReadValue::Null,
                ..
            }
        )));
        let mut names: Vec<&str> = hist.iter().map(HistOp::key).collect();
        names.sort_unstable();
        let mut expected: Vec<String> = (0..8).map(Bank::account_name).collect();
        expected.sort_unstable();
        assert_eq!(names, expected);
        // Transfers record nothing, whatever the outcome.
        let mut w = bank(3, &[("read_ratio", "0")]);
        let plan = w.next(&crate::test_support::client(0), &mut rng(4)).plan;
        assert!(w.history_ops(&plan, &aborted, &[]).is_empty());
    }

    #[test]
    fn same_seed_same_plans_and_options_are_checked() {
        let draw = |seed| {
            let mut w = bank(3, &[]);
            let mut r = rng(seed);
            (0..100)
                .map(|_| w.next(&crate::test_support::client(0), &mut r).plan)
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
        let c = cluster(3);
        for (k, v) in [
            ("accounts", "1"),
            ("accounts", "x"),
            ("max_amount", "0"),
            ("read_ratio", "-0.1"),
        ] {
            let e = Bank::new(&c, &WorkloadOptions::default().with(k, v)).unwrap_err();
            assert!(e.contains(k) && e.contains(v) && e.contains("bank"), "{e}");
        }
        let e = Bank::new(&c, &WorkloadOptions::default().with("keys", "3")).unwrap_err();
        assert!(e.contains("unknown option `keys`"), "{e}");
    }
}
