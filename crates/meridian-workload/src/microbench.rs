//! `microbench`: Tiga's MicroBench (Tiga §5.1, swept in §5.2).
//!
//! "Each shard is pre-populated with 1 million key-value pairs. Each transaction performs 3
//! read-write operations across different shards by incrementing 3 key-value pairs. The
//! key-value pairs are selected using a Zipfian distribution; the skew factor controls the
//! contention" (Tiga §5.1; §5.2 uses skew 0.5, then sweeps 0.5–0.99).
//!
//! * Each transaction picks 3 distinct shards uniformly (all shards when the cluster has
//!   fewer than 3) and, on each, a rank in `0..keys_per_shard` from a [`Zipf`] with skew
//!   `zipf` (0 = uniform); rank 0 is the hottest key of every shard.
//! * The key of rank `r` on shard `s` is `mb{r}` placed on `s` with
//!   [`Partitioner::key_on_shard`](meridian_core::Partitioner::key_on_shard) — derived on
//!   the fly, never precomputed, so a million keys per shard cost nothing.
//! * The plan is one-shot, one piece per shard (in shard order) holding `add(key, +1)`.
//! * **Pre-population** is implicit: `add` counts a missing key as 0, so the store needs no
//!   load phase and the 1 million keys of each shard exist from the start.
//!
//! **History.** None: MicroBench measures latency and throughput. An increment's result is
//! unique per key only among committed increments; the value an aborted or unknown
//! increment would have written is not known to the client, so an `info` increment that did
//! take effect would leave later reads of its value without a recorded writer. Recording
//! reads and writes would therefore be unsound under faults; use `list-append` or `bank` to
//! check a protocol.

use crate::options::Options;
use crate::zipf::{Zipf, MAX_N};
use crate::{ClientInfo, Locality, Planned};
use crate::{TxnPlan, Workload, WorkloadOptions};
use meridian_check::HistOp;
use meridian_core::txn::{Key, Op, Operand, Outcome, Piece, Txn, Value};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, Partitioner, ShardId};
use rand::seq::index;

/// The MicroBench workload.
#[derive(Clone, Debug)]
pub struct MicroBench {
    partitioner: Partitioner,
    shards: u32,
    /// Shards per transaction: 3, or every shard of a smaller cluster.
    per_txn: u32,
    zipf: Zipf,
    one: Value,
    /// Labels each transaction IRT or CRT for the client it is planned for.
    locality: Locality,
}

impl MicroBench {
    pub const NAME: &'static str = "microbench";

    /// Shards (and keys) per transaction in Tiga's MicroBench.
    pub const SHARDS_PER_TXN: u32 = 3;

    /// Builds the workload; see the crate docs for the options.
    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<MicroBench, String> {
        let mut o = Options::new(Self::NAME, options);
        let keys_per_shard = o.int("keys_per_shard", 1_000_000, 1..=MAX_N)?;
        let theta = o.real(
            "zipf",
            0.5,
            |t| t >= 0.0,
            "a skew factor θ ≥ 0 (0 = uniform; Tiga uses 0.5 to 0.99)",
        )?;
        o.finish()?;
        let shards = cluster.shard_count();
        Ok(MicroBench {
            partitioner: cluster.partitioner,
            shards,
            per_txn: shards.min(Self::SHARDS_PER_TXN),
            zipf: Zipf::new(keys_per_shard, theta)
                .map_err(|e| format!("workload `{}`: {e}", Self::NAME))?,
            one: encode_int(1),
            locality: Locality::new(cluster),
        })
    }

    /// The key of rank `rank` on `shard`.
    pub fn key(&self, shard: ShardId, rank: u64) -> Key {
        self.partitioner.key_on_shard(shard, &format!("mb{rank}"))
    }

    /// The key distribution.
    pub fn zipf(&self) -> &Zipf {
        &self.zipf
    }
}

impl Workload for MicroBench {
    fn name(&self) -> &str {
        Self::NAME
    }

    /// Labelled `irt` or `crt` besides `read-write`: whether every shard the transaction
    /// touches is led from the client's region.
    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let mut shards: Vec<u32> = index::sample(rng, self.shards as usize, self.per_txn as usize)
            .into_iter()
            .map(|s| s as u32)
            .collect();
        shards.sort_unstable();
        let pieces = shards
            .into_iter()
            .map(|s| {
                let shard = ShardId(s);
                let key = self.key(shard, self.zipf.sample(rng));
                Piece::ops(
                    shard,
                    vec![Op::Add(key, Operand::Literal(self.one.clone()))],
                )
            })
            .collect();
        let txn = Txn { pieces };
        let locality = self.locality.class(client, txn.shards());
        Planned::from(TxnPlan::OneShot(txn)).class(locality)
    }

    /// None: see the module docs.
    fn history_ops(
        &self,
        _plan: &TxnPlan,
        _outcome: &Outcome,
        _reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, execute, rng, MapStore};
    use meridian_core::txn::PieceBody;
    use meridian_core::value::decode_int;

    fn microbench(shards: u32, opts: &[(&str, &str)]) -> MicroBench {
        let mut o = WorkloadOptions::default();
        for (k, v) in opts {
            o = o.with(k, v);
        }
        MicroBench::new(&cluster(shards), &o).unwrap()
    }

    fn plans(w: &mut MicroBench, n: usize, seed: u64) -> Vec<Txn> {
        let mut r = rng(seed);
        (0..n)
            .map(
                |_| match w.next(&crate::test_support::client(0), &mut r).plan {
                    TxnPlan::OneShot(txn) => txn,
                    TxnPlan::Interactive(_) => panic!("one-shot expected"),
                },
            )
            .collect()
    }

    #[test]
    fn each_txn_increments_one_key_on_each_of_three_distinct_shards() {
        for (shards, expected) in [(1, 1), (2, 2), (3, 3), (5, 3), (8, 3)] {
            let mut w = microbench(shards, &[]);
            let mut used = vec![0u32; shards as usize];
            for txn in plans(&mut w, 400, 1) {
                txn.validate(shards).unwrap();
                assert_eq!(txn.pieces.len(), expected);
                assert_eq!(txn.shards().len(), expected, "distinct shards");
                for piece in &txn.pieces {
                    used[piece.shard.index()] += 1;
                    let PieceBody::Ops(ops) = &piece.body else {
                        panic!()
                    };
                    let [Op::Add(key, Operand::Literal(one))] = &ops[..] else {
                        panic!("{ops:?}")
                    };
                    assert_eq!(decode_int(one), Some(1));
                    assert_eq!(w.partitioner.shard_of(key), piece.shard);
                }
            }
            // Shards are chosen uniformly: every shard is used.
            assert!(used.iter().all(|&u| u > 0), "{used:?}");
        }
    }

    #[test]
    fn keys_follow_the_skew() {
        // Rank 0 of a shard is `mb0` there; with θ = 0.99 over 10^6 keys it draws about
        // 1/H ≈ 6.5% of the picks (± 0.26% per standard deviation over 9000 picks), with θ = 0 about 10^-6.
        let hot_share = |theta: &str| {
            let mut w = microbench(3, &[("zipf", theta)]);
            let hot: Vec<Key> = (0..3).map(|s| w.key(ShardId(s), 0)).collect();
            let txns = plans(&mut w, 3000, 2);
            let hits = txns
                .iter()
                .flat_map(|t| &t.pieces)
                .filter(|p| matches!(&p.body, PieceBody::Ops(ops) if hot.contains(ops[0].key())))
                .count();
            hits as f64 / 9000.0
        };
        let skewed = hot_share("0.99");
        assert!((0.05..0.09).contains(&skewed), "{skewed}");
        assert!(hot_share("0") < 0.001);
        assert!(hot_share("0.5") < skewed);
    }

    #[test]
    fn plans_execute_and_record_no_history() {
        let mut w = microbench(3, &[("keys_per_shard", "10"), ("zipf", "0.99")]);
        let mut store = MapStore::default();
        let txns = plans(&mut w, 100, 3);
        for txn in &txns {
            let outcome = execute(txn, &mut store);
            assert!(w
                .history_ops(&TxnPlan::OneShot(txn.clone()), &outcome, &[])
                .is_empty());
        }
        let total: i64 = store.values().map(|v| decode_int(v).unwrap()).sum();
        assert_eq!(total, 300);
        assert!(store.len() <= 30);
    }

    #[test]
    fn same_seed_same_plans_and_options_are_checked() {
        let mut a = microbench(5, &[("zipf", "0.99")]);
        let mut b = microbench(5, &[("zipf", "0.99")]);
        assert_eq!(plans(&mut a, 200, 4), plans(&mut b, 200, 4));
        assert_ne!(plans(&mut a, 200, 4), plans(&mut b, 200, 5));
        let c = cluster(3);
        for (k, v) in [
            ("zipf", "-1"),
            ("zipf", "inf"),
            ("zipf", "high"),
            ("keys_per_shard", "0"),
            ("keys_per_shard", "1e6"),
        ] {
            let e = MicroBench::new(&c, &WorkloadOptions::default().with(k, v)).unwrap_err();
            assert!(
                e.contains(k) && e.contains(v) && e.contains("microbench"),
                "{e}"
            );
        }
        let w = MicroBench::new(
            &c,
            &WorkloadOptions::default().with("keys_per_shard", "1_000"),
        )
        .unwrap();
        assert_eq!(w.zipf().n(), 1000);
        assert_eq!(w.zipf().theta(), 0.5);
    }
}
