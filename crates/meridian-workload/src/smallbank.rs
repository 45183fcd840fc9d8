//! `smallbank`: SmallBank (Alomari et al., ICDE 2008; the H-Store/OLTP-Bench mix), the
//! banking benchmark of the Tiga appendix's reference list.
//!
//! * `accounts` customers, each with a checking and a savings balance (`sb{c}.chk`,
//!   `sb{c}.sav`, cents, missing = 0) on shard `c mod shards`; customers drawn from a
//!   [`Zipf`] of skew `zipf` (0 = uniform).
//! * The mix (OLTP-Bench): Amalgamate 15%, Balance 15%, DepositChecking 15%, SendPayment
//!   25%, TransactSavings 15%, WriteCheck 15%.
//! * Conditional logic runs in stored procedures (`smallbank.*`, registered by
//!   [`register`]); a refused TransactSavings (negative result) or SendPayment (insufficient
//!   funds) is a user abort. Amalgamate moves a customer's whole balance into another's
//!   checking through a value dependency when the two live on different shards.
//!
//! **History.** None (balances are not unique values); SmallBank has no global invariant
//! (deposits create money).

use crate::options::Options;
use crate::zipf::Zipf;
use crate::{distinct_ranks, TxnPlan, Workload, WorkloadOptions};
use crate::{ClientInfo, Planned};
use meridian_check::HistOp;
use meridian_core::txn::{
    AbortReason, Key, KvAccess, Op, Operand, Outcome, Piece, PieceBody, ProcedureCall, Procedures,
    Txn, Value,
};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, Partitioner, ShardId};
use rand::Rng;
use std::sync::Arc;

/// The SmallBank workload.
#[derive(Clone, Debug)]
pub struct SmallBank {
    partitioner: Partitioner,
    shards: u32,
    zipf: Zipf,
}

impl SmallBank {
    pub const NAME: &'static str = "smallbank";

    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<SmallBank, String> {
        let mut o = Options::new(Self::NAME, options);
        let accounts = o.int("accounts", 100_000, 2..=1 << 40)?;
        let theta = o.real("zipf", 0.0, |t| t >= 0.0, "a skew factor θ ≥ 0")?;
        o.finish()?;
        Ok(SmallBank {
            partitioner: cluster.partitioner,
            shards: cluster.shard_count(),
            zipf: Zipf::new(accounts, theta).map_err(|e| format!("workload `smallbank`: {e}"))?,
        })
    }

    fn shard(&self, c: u64) -> ShardId {
        ShardId((c % u64::from(self.shards)) as u32)
    }
    fn checking(&self, c: u64) -> Key {
        self.partitioner
            .key_on_shard(self.shard(c), &format!("sb{c}.chk"))
    }
    fn savings(&self, c: u64) -> Key {
        self.partitioner
            .key_on_shard(self.shard(c), &format!("sb{c}.sav"))
    }

    fn call(&self, c: u64, name: &str, keys: Vec<Key>, amount: Option<i64>) -> Piece {
        let mut args: Vec<Operand> = keys.iter().cloned().map(Operand::Literal).collect();
        args.extend(amount.map(|a| Operand::Literal(encode_int(a))));
        Piece {
            shard: self.shard(c),
            body: PieceBody::Procedure(ProcedureCall {
                name: Arc::from(name),
                args,
                read_keys: keys.clone(),
                write_keys: keys,
            }),
        }
    }

    /// Moves everything `from` has into `to`'s checking.
    fn amalgamate(&self, from: u64, to: u64) -> Txn {
        let source = vec![self.checking(from), self.savings(from)];
        if self.shard(from) == self.shard(to) {
            let mut keys = source;
            keys.push(self.checking(to));
            return Txn {
                pieces: vec![self.call(from, "smallbank.amalgamate", keys, None)],
            };
        }
        Txn {
            pieces: vec![
                self.call(from, "smallbank.amalgamate", source, None),
                Piece::ops(
                    self.shard(to),
                    vec![Op::Add(
                        self.checking(to),
                        Operand::Input {
                            piece: 0,
                            output: 0,
                        },
                    )],
                ),
            ],
        }
    }

    fn send_payment(&self, from: u64, to: u64, amount: i64) -> Txn {
        if self.shard(from) == self.shard(to) {
            let keys = vec![self.checking(from), self.checking(to)];
            return Txn {
                pieces: vec![self.call(from, "smallbank.send_payment", keys, Some(amount))],
            };
        }
        Txn {
            pieces: vec![
                self.call(
                    from,
                    "smallbank.send_payment",
                    vec![self.checking(from)],
                    Some(amount),
                ),
                Piece::ops(
                    self.shard(to),
                    vec![Op::Add(
                        self.checking(to),
                        Operand::Literal(encode_int(amount)),
                    )],
                ),
            ],
        }
    }
}

impl Workload for SmallBank {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn next(&mut self, _client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let pair = distinct_ranks(&self.zipf, 2, rng);
        let (a, b) = (pair[0], pair[1]);
        let amount = rng.gen_range(1..=10_000i64);
        let roll = rng.gen_range(0..100);
        let (class, txn) = match roll {
            0..15 => ("amalgamate", self.amalgamate(a, b)),
            15..30 => (
                "balance",
                Txn {
                    pieces: vec![Piece::ops(
                        self.shard(a),
                        vec![Op::Get(self.checking(a)), Op::Get(self.savings(a))],
                    )],
                },
            ),
            30..45 => (
                "deposit-checking",
                Txn {
                    pieces: vec![Piece::ops(
                        self.shard(a),
                        vec![Op::Add(
                            self.checking(a),
                            Operand::Literal(encode_int(amount)),
                        )],
                    )],
                },
            ),
            45..70 => ("send-payment", self.send_payment(a, b, amount)),
            70..85 => (
                "transact-savings",
                Txn {
                    pieces: vec![self.call(
                        a,
                        "smallbank.transact_savings",
                        vec![self.savings(a)],
                        Some(rng.gen_range(-10_000..=10_000)),
                    )],
                },
            ),
            _ => (
                "write-check",
                Txn {
                    pieces: vec![self.call(
                        a,
                        "smallbank.write_check",
                        vec![self.checking(a), self.savings(a)],
                        Some(amount),
                    )],
                },
            ),
        };
        Planned::from(TxnPlan::OneShot(txn)).class(class)
    }

    fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
        Vec::new()
    }

    /// Nothing recorded: nothing for the dependency checker to judge.
    fn history_checkable(&self) -> bool {
        false
    }
}

/// Registers SmallBank's stored procedures.
pub fn register(procedures: &mut Procedures) {
    procedures.register("smallbank.amalgamate", amalgamate);
    procedures.register("smallbank.send_payment", send_payment);
    procedures.register("smallbank.transact_savings", transact_savings);
    procedures.register("smallbank.write_check", write_check);
}

use crate::procedure::{int as amount, key, read_int as balance, ProcResult};

/// Args: from-checking, from-savings, [to-checking]. Zeroes the source; adds its total to
/// the target if given. Output: the total moved.
fn amalgamate(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (chk, sav) = (key(args, 0)?, key(args, 1)?);
    let total = balance(store, &chk)? + balance(store, &sav)?;
    store.put(chk, encode_int(0));
    store.put(sav, encode_int(0));
    if let Some(to) = args.get(2).filter(|_| args.len() == 3).cloned() {
        let new = balance(store, &to)? + total;
        store.put(to, encode_int(new));
    }
    Ok(vec![Some(encode_int(total))])
}

/// Args: from-checking, [to-checking], amount. Refuses if the checking balance is short.
fn send_payment(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let from = key(args, 0)?;
    let amount = amount(args, args.len() - 1)?;
    let have = balance(store, &from)?;
    if have < amount {
        return Err(AbortReason::User);
    }
    store.put(from, encode_int(have - amount));
    if args.len() == 3 {
        let to = key(args, 1)?;
        let new = balance(store, &to)? + amount;
        store.put(to, encode_int(new));
    }
    Ok(vec![])
}

/// Args: savings, amount. Refuses a negative result.
fn transact_savings(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let sav = key(args, 0)?;
    let new = balance(store, &sav)? + amount(args, 1)?;
    if new < 0 {
        return Err(AbortReason::User);
    }
    store.put(sav, encode_int(new));
    Ok(vec![])
}

/// Args: checking, savings, amount. Overdrawing costs a penalty of 1.
fn write_check(store: &mut dyn KvAccess, args: &[Value]) -> ProcResult {
    let (chk, sav) = (key(args, 0)?, key(args, 1)?);
    let amount = amount(args, 2)?;
    let have = balance(store, &chk)?;
    let total = have + balance(store, &sav)?;
    let debit = if total < amount { amount + 1 } else { amount };
    store.put(chk, encode_int(have - debit));
    Ok(vec![])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, rng, MapStore};
    use meridian_core::txn::{execute_piece, PieceResult};
    use meridian_core::value::decode_int;

    #[test]
    fn the_mix_runs_and_money_moves_as_each_profile_says() {
        let c = cluster(3);
        let mut w = SmallBank::new(&c, &WorkloadOptions::default().with("accounts", "50")).unwrap();
        let procedures = crate::procedures();
        let mut store = MapStore::default();
        let mut r = rng(5);
        let (mut committed, mut refused, mut cross) = (0, 0, 0);
        for _ in 0..2000 {
            let TxnPlan::OneShot(txn) = w.next(&crate::test_support::client(0), &mut r).plan else {
                panic!()
            };
            txn.validate(3).unwrap();
            cross += usize::from(txn.pieces.len() > 1);
            let mut scratch = store.clone();
            let mut results: Vec<PieceResult> = Vec::new();
            let ok = txn.pieces.iter().all(|p| {
                let inputs: Vec<Option<&PieceResult>> = results.iter().map(Some).collect();
                match execute_piece(p, &inputs, &procedures, &mut scratch) {
                    Ok(res) => {
                        results.push(res);
                        true
                    }
                    Err(AbortReason::User) => false,
                    Err(e) => panic!("{e}"),
                }
            });
            if ok {
                store = scratch;
                committed += 1;
            } else {
                refused += 1;
            }
        }
        assert!(committed > 1500 && refused > 20, "{committed} {refused}");
        assert!(cross > 200, "{cross}");
        // Savings never go negative (TransactSavings refuses).
        for a in 0..50 {
            if let Some(v) = store.get(&w.savings(a)) {
                assert!(decode_int(v).unwrap() >= 0);
            }
        }
    }

    #[test]
    fn amalgamate_moves_the_whole_balance_across_shards() {
        let c = cluster(2);
        let w = SmallBank::new(&c, &WorkloadOptions::default()).unwrap();
        let mut store = MapStore::default();
        store.insert(w.checking(1), encode_int(30));
        store.insert(w.savings(1), encode_int(12));
        let txn = w.amalgamate(1, 2);
        assert_eq!(txn.pieces.len(), 2);
        crate::test_support::execute_with(&txn, &mut store, &crate::procedures());
        assert_eq!(decode_int(&store[&w.checking(2)]), Some(42));
        assert_eq!(decode_int(&store[&w.checking(1)]), Some(0));
    }
}
