//! `ycsb-t`: YCSB-T, the transactional YCSB of K2 §7.1 and Aurogon §6.1.
//!
//! * `records` keys `y0..`, placed by hash over the shards ("uniformly partitioned among
//!   servers", Aurogon §6.1); Aurogon uses 2 M records.
//! * Each transaction makes `ops` requests on distinct keys (K2: 3 by default; Aurogon: 8),
//!   each drawn from a [`Zipf`] with skew `zipf` over the records (K2: 0.8; Aurogon sweeps
//!   θ). A request is a read-modify-write (`add(key, +1)`) with probability `rmw_ratio`
//!   (K2: 50% writes; Aurogon: `RMW_ratio`), else a read.
//! * One-shot, one piece per shard touched.
//!
//! **History.** None (as MicroBench): increments are not unique values. Use `list-append`
//! or `bank` to check a protocol.

use crate::options::Options;
use crate::zipf::{Zipf, MAX_N};
use crate::{distinct_ranks, txn_by_shard, TxnPlan, Workload, WorkloadOptions};
use crate::{ClientInfo, Planned};
use meridian_check::HistOp;
use meridian_core::txn::{Key, Op, Operand, Outcome, Value};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, Partitioner};
use rand::Rng;

/// The YCSB-T workload.
#[derive(Clone, Debug)]
pub struct YcsbT {
    partitioner: Partitioner,
    ops: usize,
    rmw_ratio: f64,
    zipf: Zipf,
}

impl YcsbT {
    pub const NAME: &'static str = "ycsb-t";

    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<YcsbT, String> {
        let mut o = Options::new(Self::NAME, options);
        let records = o.int("records", 1_000_000, 1..=MAX_N)?;
        let ops = o.int("ops", 3, 1..=1024)? as usize;
        let rmw_ratio = o.probability("rmw_ratio", 0.5)?;
        let theta = o.real("zipf", 0.8, |t| t >= 0.0, "a skew factor θ ≥ 0")?;
        o.finish()?;
        Ok(YcsbT {
            partitioner: cluster.partitioner,
            ops,
            rmw_ratio,
            zipf: Zipf::new(records, theta)
                .map_err(|e| format!("workload `{}`: {e}", Self::NAME))?,
        })
    }

    /// The key of record `rank`.
    pub fn key(rank: u64) -> Key {
        Key::from(format!("y{rank}"))
    }
}

impl Workload for YcsbT {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn next(&mut self, _client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let one = Operand::Literal(encode_int(1));
        let ops: Vec<Op> = distinct_ranks(&self.zipf, self.ops, rng)
            .into_iter()
            .map(|rank| {
                if rng.gen_bool(self.rmw_ratio) {
                    Op::Add(Self::key(rank), one.clone())
                } else {
                    Op::Get(Self::key(rank))
                }
            })
            .collect();
        TxnPlan::OneShot(txn_by_shard(&self.partitioner, ops)).into()
    }

    fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
        Vec::new()
    }

    /// Nothing recorded: nothing for the dependency checker to judge.
    fn history_checkable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, rng};
    use meridian_core::txn::{PieceBody, Txn};

    fn plans(opts: &[(&str, &str)], n: usize) -> Vec<Txn> {
        let mut o = WorkloadOptions::default();
        for (k, v) in opts {
            o = o.with(k, v);
        }
        let mut w = YcsbT::new(&cluster(3), &o).unwrap();
        let mut r = rng(1);
        (0..n)
            .map(
                |_| match w.next(&crate::test_support::client(0), &mut r).plan {
                    TxnPlan::OneShot(t) => t,
                    TxnPlan::Interactive(_) => panic!(),
                },
            )
            .collect()
    }

    fn ops(txn: &Txn) -> Vec<&Op> {
        txn.pieces
            .iter()
            .flat_map(|p| match &p.body {
                PieceBody::Ops(ops) => ops.iter(),
                PieceBody::Procedure(_) => panic!(),
            })
            .collect()
    }

    #[test]
    fn ops_per_txn_rmw_ratio_and_distinct_keys() {
        let txns = plans(&[("ops", "8"), ("rmw_ratio", "0.25")], 1000);
        let mut rmw = 0;
        for txn in &txns {
            txn.validate(3).unwrap();
            let ops = ops(txn);
            assert_eq!(ops.len(), 8);
            let mut keys: Vec<_> = ops.iter().map(|o| o.key()).collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), 8, "distinct keys");
            rmw += ops.iter().filter(|o| matches!(o, Op::Add(..))).count();
        }
        let share = rmw as f64 / 8000.0;
        assert!((0.22..0.28).contains(&share), "{share}");
        assert!(plans(&[("rmw_ratio", "0")], 50)
            .iter()
            .all(|t| t.is_read_only()));
    }

    #[test]
    fn skew_concentrates_on_hot_records() {
        let hot = |theta: &str| {
            plans(&[("zipf", theta), ("records", "10000"), ("ops", "1")], 2000)
                .iter()
                .filter(|t| ops(t)[0].key() == &YcsbT::key(0))
                .count()
        };
        assert!(hot("0.99") > 100, "{}", hot("0.99"));
        assert!(hot("0") < 10);
    }
}
