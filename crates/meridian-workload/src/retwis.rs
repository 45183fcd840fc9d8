//! `retwis`: Retwis, the Twitter clone's transactions as TAPIR (§6) and Carousel run them.
//!
//! Keys `rt{r}` (placed by hash), chosen by a [`Zipf`] of skew `zipf` (TAPIR: 0.75) over
//! `keys` keys, distinct within a transaction. The mix and shapes:
//!
//! | profile | share | gets | puts |
//! |---|---|---|---|
//! | add user | 5% | 1 | 3 |
//! | follow/unfollow | 15% | 2 | 2 |
//! | post tweet | 30% | 3 | 5 |
//! | load timeline | 50% | 1–10 | 0 |
//!
//! A put of a key the transaction also reads is a read-modify-write of it; puts write a
//! fresh 8-byte value. One-shot, one piece per shard.
//!
//! **History.** None (written values are not recorded as unique); use `list-append` to
//! check a protocol.

use crate::options::Options;
use crate::zipf::{Zipf, MAX_N};
use crate::{distinct_ranks, txn_by_shard, TxnPlan, Workload, WorkloadOptions};
use crate::{ClientInfo, Planned};
use meridian_check::HistOp;
use meridian_core::txn::{Key, Op, Operand, Outcome, Value};
use meridian_core::value::encode_int;
use meridian_core::{Cluster, NodeRng, Partitioner};
use rand::Rng;

/// The Retwis workload.
#[derive(Clone, Debug)]
pub struct Retwis {
    partitioner: Partitioner,
    zipf: Zipf,
}

impl Retwis {
    pub const NAME: &'static str = "retwis";

    pub fn new(cluster: &Cluster, options: &WorkloadOptions) -> Result<Retwis, String> {
        let mut o = Options::new(Self::NAME, options);
        let keys = o.int("keys", 1_000_000, 10..=MAX_N)?;
        let theta = o.real("zipf", 0.75, |t| t >= 0.0, "a skew factor θ ≥ 0")?;
        o.finish()?;
        Ok(Retwis {
            partitioner: cluster.partitioner,
            zipf: Zipf::new(keys, theta).map_err(|e| format!("workload `retwis`: {e}"))?,
        })
    }

    fn key(rank: u64) -> Key {
        Key::from(format!("rt{rank}"))
    }
}

impl Workload for Retwis {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn next(&mut self, _client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        let (class, gets, puts) = match rng.gen_range(0..100) {
            0..5 => ("add-user", 1, 3),
            5..20 => ("follow", 2, 2),
            20..50 => ("post-tweet", 3, 5),
            _ => ("get-timeline", rng.gen_range(1..=10), 0),
        };
        let keys = distinct_ranks(&self.zipf, gets.max(puts), rng);
        let value = Operand::Literal(encode_int(rng.gen()));
        let ops = keys[..gets].iter().map(|&r| Op::Get(Self::key(r))).chain(
            keys[..puts]
                .iter()
                .map(|&r| Op::Put(Self::key(r), value.clone())),
        );
        Planned::from(TxnPlan::OneShot(txn_by_shard(&self.partitioner, ops))).class(class)
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
    use meridian_core::txn::PieceBody;

    #[test]
    fn the_mix_has_tapirs_shapes_and_shares() {
        let mut w = Retwis::new(&cluster(3), &WorkloadOptions::default()).unwrap();
        let mut r = rng(3);
        let mut shapes = std::collections::BTreeMap::new();
        for _ in 0..4000 {
            let TxnPlan::OneShot(txn) = w.next(&crate::test_support::client(0), &mut r).plan else {
                panic!()
            };
            txn.validate(3).unwrap();
            let (mut gets, mut puts) = (0, 0);
            for p in &txn.pieces {
                let PieceBody::Ops(ops) = &p.body else {
                    panic!()
                };
                gets += ops.iter().filter(|o| matches!(o, Op::Get(_))).count();
                puts += ops.iter().filter(|o| matches!(o, Op::Put(..))).count();
            }
            let shape = if puts == 0 { (0, 0) } else { (gets, puts) };
            *shapes.entry(shape).or_insert(0) += 1;
        }
        let share = |s| shapes[&s] as f64 / 4000.0;
        assert!((0.03..0.07).contains(&share((1, 3))), "{shapes:?}");
        assert!((0.12..0.18).contains(&share((2, 2))), "{shapes:?}");
        assert!((0.27..0.33).contains(&share((3, 5))), "{shapes:?}");
        assert!((0.47..0.53).contains(&share((0, 0))), "{shapes:?}");
    }
}
