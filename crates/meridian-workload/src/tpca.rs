//! `tpca`: TPC-A (the debit-credit benchmark DAST §6 runs with Zipf-skewed accounts).
//!
//! * `branches` branches (default: one per shard), branch `b` on shard `b mod shards`, with
//!   10 tellers and `accounts` accounts each (TPC-A: 100 000), all on the branch's shard.
//! * A transaction picks a teller uniformly (its branch is the home branch) and an account:
//!   of the home branch with probability 1 − `remote` (TPC-A: 85%), else of another branch;
//!   within the branch by a [`Zipf`] of skew `zipf` (DAST Fig. 7 sweeps 0.5–1.0). It adds a
//!   delta in ±999 999 to the account, the teller and the branch, and writes a HISTORY row
//!   (a fresh key): one piece on the home branch's shard, one on the account's if remote.
//! * **Consistency** (TPC-A §2's balances): balances start at 0, and after the run the sum
//!   of branch balances, of teller balances and of account balances are equal. The audit
//!   reads every branch and teller and every account a transaction was planned for.
//!
//! **History.** None; the audit checks the balances.

use crate::audit::FinalState;
use crate::options::Options;
use crate::zipf::Zipf;
use crate::{ClientInfo, Planned};
use crate::{TxnPlan, Workload, WorkloadOptions};
use meridian_check::{Entry, HistOp};
use meridian_core::txn::{Key, Op, Operand, Outcome, Piece, Txn, Value};
use meridian_core::value::{encode_int, encode_list};
use meridian_core::{Cluster, NodeRng, Partitioner, ShardId};
use rand::Rng;
use rustc_hash::{FxHashMap, FxHashSet};

/// Tellers per branch (TPC-A §4.2).
pub const TELLERS: u64 = 10;

/// The TPC-A workload.
#[derive(Clone, Debug)]
pub struct TpcA {
    partitioner: Partitioner,
    shards: u32,
    branches: u64,
    remote: f64,
    zipf: Zipf,
    planned: FxHashMap<u32, u64>,
    /// Accounts some transaction was planned for: the audit reads them.
    touched: FxHashSet<(u64, u64)>,
}

impl TpcA {
    pub const NAME: &'static str = "tpca";

    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<TpcA, String> {
        let shards = cluster.shard_count();
        let mut o = Options::new(Self::NAME, options);
        let branches = o.int("branches", u64::from(shards), 1..=100_000)?;
        let accounts = o.int("accounts", 100_000, 1..=1 << 40)?;
        let remote = o.probability("remote", 0.15)?;
        let theta = o.real("zipf", 0.0, |t| t >= 0.0, "a skew factor θ ≥ 0")?;
        o.finish()?;
        Ok(TpcA {
            partitioner: cluster.partitioner,
            shards,
            branches,
            remote,
            zipf: Zipf::new(accounts, theta).map_err(|e| format!("workload `tpca`: {e}"))?,
            planned: FxHashMap::default(),
            touched: FxHashSet::default(),
        })
    }

    fn shard(&self, branch: u64) -> ShardId {
        ShardId((branch % u64::from(self.shards)) as u32)
    }

    fn branch_key(&self, b: u64) -> Key {
        self.partitioner
            .key_on_shard(self.shard(b), &format!("ta.b{b}"))
    }
    fn teller_key(&self, b: u64, t: u64) -> Key {
        self.partitioner
            .key_on_shard(self.shard(b), &format!("ta.t{b}.{t}"))
    }
    fn account_key(&self, b: u64, a: u64) -> Key {
        self.partitioner
            .key_on_shard(self.shard(b), &format!("ta.a{b}.{a}"))
    }
}

impl Workload for TpcA {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let client = client.id;
        let n = crate::procedure::next_seq(&mut self.planned, client.0);
        let branch = rng.gen_range(0..self.branches);
        let teller = rng.gen_range(0..TELLERS);
        let account_branch = if self.branches > 1 && rng.gen_bool(self.remote) {
            (branch + rng.gen_range(1..self.branches)) % self.branches
        } else {
            branch
        };
        let account = self.zipf.sample(rng);
        self.touched.insert((account_branch, account));
        let delta: i64 = rng.gen_range(-999_999..=999_999);
        let lit = Operand::Literal(encode_int(delta));
        let history = self.partitioner.key_on_shard(
            self.shard(branch),
            &format!("ta.h{branch}.{}.{n}", client.0),
        );
        let mut home = vec![
            Op::Add(self.teller_key(branch, teller), lit.clone()),
            Op::Add(self.branch_key(branch), lit.clone()),
            Op::Put(
                history,
                Operand::Literal(encode_list(&[
                    account_branch as i64,
                    account as i64,
                    teller as i64,
                    delta,
                ])),
            ),
        ];
        let account_op = Op::Add(self.account_key(account_branch, account), lit);
        let mut pieces = Vec::new();
        if self.shard(account_branch) == self.shard(branch) {
            home.insert(0, account_op);
        } else {
            pieces.push(Piece::ops(self.shard(account_branch), vec![account_op]));
        }
        pieces.insert(0, Piece::ops(self.shard(branch), home));
        TxnPlan::OneShot(Txn { pieces }).into()
    }

    fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
        Vec::new()
    }

    fn history_checkable(&self) -> bool {
        false
    }

    fn audit_keys(&self) -> Vec<Key> {
        let mut keys = Vec::new();
        for b in 0..self.branches {
            keys.push(self.branch_key(b));
            keys.extend((0..TELLERS).map(|t| self.teller_key(b, t)));
        }
        let mut touched: Vec<_> = self.touched.iter().copied().collect();
        touched.sort_unstable();
        keys.extend(touched.into_iter().map(|(b, a)| self.account_key(b, a)));
        keys
    }

    fn check_final(&self, state: &FinalState, _history: &[Entry]) -> Result<(), String> {
        let (mut branches, mut tellers, mut accounts) = (0i64, 0i64, 0i64);
        for b in 0..self.branches {
            branches += state.int(&self.branch_key(b))?;
            for t in 0..TELLERS {
                tellers += state.int(&self.teller_key(b, t))?;
            }
        }
        for &(b, a) in &self.touched {
            accounts += state.int(&self.account_key(b, a))?;
        }
        if branches != tellers || tellers != accounts {
            return Err(format!(
                "tpca: balances disagree: branches {branches}, tellers {tellers}, accounts {accounts}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, execute, rng, MapStore};

    #[test]
    fn serial_runs_keep_the_balances_equal_and_a_lost_update_is_caught() {
        let c = cluster(3);
        let mut w = TpcA::new(
            &c,
            &WorkloadOptions::default()
                .with("branches", "6")
                .with("zipf", "0.9"),
        )
        .unwrap();
        let mut store = MapStore::default();
        let mut r = rng(2);
        let mut remote = 0;
        for i in 0..600 {
            let TxnPlan::OneShot(txn) = w.next(&crate::test_support::client(i % 4), &mut r).plan
            else {
                panic!()
            };
            txn.validate(3).unwrap();
            remote += usize::from(txn.pieces.len() == 2);
            execute(&txn, &mut store);
        }
        assert!(
            (25..100).contains(&remote),
            "about 15% × 3/5 cross shards: {remote}"
        );
        let keys = w.audit_keys();
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut store));
        assert_eq!(crate::audit::verdict(&w, &keys, &state, &[]), Ok(()));
        let teller = w.teller_key(0, 0);
        store.insert(teller.clone(), encode_int(state.int(&teller).unwrap() + 5));
        let state = crate::audit::run(&c.partitioner, &keys, |t| execute(t, &mut store));
        let e = crate::audit::verdict(&w, &keys, &state, &[]).unwrap_err();
        assert!(e.contains("disagree"), "{e}");
    }
}
