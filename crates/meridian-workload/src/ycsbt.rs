//! `ycsb-t`: YCSB-T, the transactional YCSB of K2 §7.1 and Aurogon §6.1.
//!
//! * `records` keys `y0..`, placed by hash over the shards ("uniformly partitioned among
//!   servers", Aurogon §6.1); Aurogon uses 2 M records.
//! * Each transaction makes `ops` requests on distinct keys (K2: 3 by default; Aurogon: 8),
//!   each drawn from a [`Zipf`] with skew `zipf` over the records (K2: 0.8; Aurogon sweeps
//!   θ). A request is a read-modify-write (`add(key, +1)`) with probability `rmw_ratio`
//!   (K2: 50% writes; Aurogon: `RMW_ratio`), else a read.
//! * `per_shard_zipf=true`: the Aurogon artifact's generator instead (`codes/util.cpp`
//!   `Zipfan_gen::gen`, `codes/table.cpp` `Table::init`: the Zipf is over one server's
//!   `key_range / node_cnt` keys and a request picks its server uniformly): every shard
//!   holds `records / shards` records ranked by its own copy of the Zipf, and a request
//!   draws a shard uniformly, then a rank. The hottest records are then one per shard, each
//!   with `1 / shards` of the single hottest record's share under the default (θ = 0.99,
//!   2 M records, 5 shards: 1.4 % of the requests each instead of 6.2 % on one record).
//!   Keys are `y{rank * shards + shard}`, salted onto their shard.
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
use meridian_core::{Cluster, NodeRng, Partitioner, ShardId};
use rand::Rng;

/// The YCSB-T workload.
#[derive(Clone, Debug)]
pub struct YcsbT {
    partitioner: Partitioner,
    ops: usize,
    rmw_ratio: f64,
    zipf: Zipf,
    /// `per_shard_zipf`: the shards, each with its own copy of `zipf`'s ranks.
    per_shard: Option<u32>,
}

impl YcsbT {
    pub const NAME: &'static str = "ycsb-t";

    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<YcsbT, String> {
        let mut o = Options::new(Self::NAME, options);
        let records = o.int("records", 1_000_000, 1..=MAX_N)?;
        let ops = o.int("ops", 3, 1..=1024)? as usize;
        let rmw_ratio = o.probability("rmw_ratio", 0.5)?;
        let theta = o.real("zipf", 0.8, |t| t >= 0.0, "a skew factor θ ≥ 0")?;
        let per_shard_zipf = o.flag("per_shard_zipf", false)?;
        o.finish()?;
        let shards = cluster.partitioner.shards();
        let (ranks, per_shard) = match per_shard_zipf {
            false => (records, None),
            true if records >= u64::from(shards) => (records / u64::from(shards), Some(shards)),
            true => {
                return Err(format!(
                    "workload `{}`: per_shard_zipf needs at least one record per shard \
                     ({records} records, {shards} shards)",
                    Self::NAME
                ))
            }
        };
        Ok(YcsbT {
            partitioner: cluster.partitioner,
            ops,
            rmw_ratio,
            zipf: Zipf::new(ranks, theta).map_err(|e| format!("workload `{}`: {e}", Self::NAME))?,
            per_shard,
        })
    }

    /// `ops` distinct keys: Zipf ranks over all records, or (`per_shard_zipf`) a uniform
    /// shard and a Zipf rank within it.
    fn keys(&self, rng: &mut NodeRng) -> Vec<Key> {
        let Some(shards) = self.per_shard else {
            return distinct_ranks(&self.zipf, self.ops, rng)
                .into_iter()
                .map(Self::key)
                .collect();
        };
        let count = (self.ops as u64).min(self.zipf.n() * u64::from(shards)) as usize;
        let mut picked: Vec<(u32, u64)> = Vec::with_capacity(count);
        while picked.len() < count {
            let shard = rng.gen_range(0..shards);
            let rank = self.zipf.sample(rng);
            if !picked.contains(&(shard, rank)) {
                picked.push((shard, rank));
            }
        }
        picked
            .into_iter()
            .map(|(shard, rank)| {
                let name = format!("y{}", rank * u64::from(shards) + u64::from(shard));
                self.partitioner.key_on_shard(ShardId(shard), &name)
            })
            .collect()
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
        let ops: Vec<Op> = self
            .keys(rng)
            .into_iter()
            .map(|key| {
                if rng.gen_bool(self.rmw_ratio) {
                    Op::Add(key, one.clone())
                } else {
                    Op::Get(key)
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

    /// `per_shard_zipf` (the Aurogon artifact's generator): the hottest records are one
    /// per shard, each as hot as the others, and each lives on its own shard.
    #[test]
    fn per_shard_zipf_spreads_the_hottest_records_over_the_shards() {
        let shards = 3;
        let mut w = YcsbT::new(
            &cluster(shards),
            &WorkloadOptions::default()
                .with("zipf", "0.99")
                .with("records", "30000")
                .with("ops", "1")
                .with("per_shard_zipf", "true"),
        )
        .unwrap();
        let partitioner = cluster(shards).partitioner;
        let mut r = rng(1);
        let mut counts: std::collections::BTreeMap<Key, usize> = Default::default();
        let n = 6000;
        for _ in 0..n {
            let TxnPlan::OneShot(t) = w.next(&crate::test_support::client(0), &mut r).plan else {
                panic!()
            };
            *counts.entry(ops(&t)[0].key().clone()).or_default() += 1;
        }
        let mut by_count: Vec<(usize, Key)> = counts.into_iter().map(|(k, c)| (c, k)).collect();
        by_count.sort_by(|a, b| b.cmp(a));
        let top: Vec<_> = by_count.iter().take(shards as usize).collect();
        let mut top_shards: Vec<_> = top.iter().map(|(_, k)| partitioner.shard_of(k)).collect();
        top_shards.sort();
        top_shards.dedup();
        assert_eq!(
            top_shards.len(),
            shards as usize,
            "one hottest record per shard"
        );
        // Rank 0 of a 10,000-record Zipf at θ = 0.99 draws ~10 % of a shard's requests,
        // i.e. ~3.3 % of all: ~200 of 6000 each, and no record near the global 10 %.
        for (count, key) in &top {
            assert!((120..300).contains(count), "{key:?}: {count}");
        }
        assert!(YcsbT::new(
            &cluster(shards),
            &WorkloadOptions::default()
                .with("records", "2")
                .with("per_shard_zipf", "true"),
        )
        .is_err());
    }
}
