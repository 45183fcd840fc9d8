//! The end-of-run audit: reading the final values of a workload's keys through the protocol
//! under test, so that its consistency conditions (the bank's total, TPC-C §3.3.2
//! conditions 1–4, TPC-A's balances) judge what the protocol actually stored.
//!
//! A driver (simulator or runtime) calls [`Workload::audit_keys`](crate::Workload::audit_keys)
//! after the load has drained, turns the keys into read-only one-shot transactions with
//! [`plans`], submits them one at a time (no other transaction runs then, so together they
//! read one state), feeds each committed outcome to [`FinalState::record`], retries an
//! aborted one up to [`RETRIES`] times, and ends with
//! [`Workload::check_final`](crate::Workload::check_final). An audit that cannot read every
//! key is itself a failure: [`FinalState::missing`] names what was not read.

use meridian_core::txn::{Key, Op, Outcome, Piece, Txn, Value};
use meridian_core::{Partitioner, ShardId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Keys per audit transaction: large enough for few round trips, small enough that no
/// protocol message grows unreasonably.
pub const KEYS_PER_TXN: usize = 512;

/// Attempts of one audit transaction before the audit gives up.
pub const RETRIES: u32 = 5;

/// Read-only one-shot transactions that together read every key of `keys` once: one piece
/// per shard, at most [`KEYS_PER_TXN`] keys per transaction, in a deterministic order.
pub fn plans(partitioner: &Partitioner, keys: &[Key]) -> Vec<Txn> {
    let mut by_shard: BTreeMap<ShardId, Vec<Key>> = BTreeMap::new();
    let mut seen = rustc_hash::FxHashSet::default();
    for key in keys {
        if seen.insert(key.clone()) {
            by_shard
                .entry(partitioner.shard_of(key))
                .or_default()
                .push(key.clone());
        }
    }
    by_shard
        .into_iter()
        .flat_map(|(shard, keys)| {
            keys.chunks(KEYS_PER_TXN)
                .map(|chunk| Txn {
                    pieces: vec![Piece::ops(
                        shard,
                        chunk.iter().cloned().map(Op::Get).collect(),
                    )],
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The final values the audit read, by key (`None`: the key does not exist).
#[derive(Clone, Debug, Default)]
pub struct FinalState {
    values: FxHashMap<Key, Option<Value>>,
    /// Why the audit could not finish, if it could not.
    pub failure: Option<String>,
}

impl FinalState {
    /// Records the reads of a committed audit transaction `txn`.
    ///
    /// # Panics
    ///
    /// If a committed outcome lacks one output per `get` (a protocol broke the
    /// [`Outcome`] contract).
    pub fn record(&mut self, txn: &Txn, outcome: &Outcome) {
        let Some(results) = crate::committed_results(txn, outcome) else {
            return;
        };
        for (p, piece) in txn.pieces.iter().enumerate() {
            let meridian_core::txn::PieceBody::Ops(ops) = &piece.body else {
                continue;
            };
            for (i, op) in ops.iter().enumerate() {
                self.values
                    .insert(op.key().clone(), crate::output(results, p, i).cloned());
            }
        }
    }

    /// Inserts a value directly (tests, and drivers that read state another way).
    pub fn insert(&mut self, key: Key, value: Option<Value>) {
        self.values.insert(key, value);
    }

    /// The value read for `key`; `Err` if the audit did not read it.
    pub fn get(&self, key: &Key) -> Result<Option<&Value>, String> {
        match self.values.get(key) {
            Some(v) => Ok(v.as_ref()),
            None => Err(format!(
                "the audit did not read key `{}`",
                crate::logical_name(key)
            )),
        }
    }

    /// An integer key (missing = 0); `Err` if unread or not an integer.
    pub fn int(&self, key: &Key) -> Result<i64, String> {
        match self.get(key)? {
            None => Ok(0),
            Some(bytes) => meridian_core::value::decode_int(bytes).ok_or_else(|| {
                format!(
                    "key `{}` holds {} bytes, not an integer",
                    crate::logical_name(key),
                    bytes.len()
                )
            }),
        }
    }

    /// A list-of-integers key (missing = empty); `Err` if unread or malformed.
    pub fn list(&self, key: &Key) -> Result<Vec<i64>, String> {
        match self.get(key)? {
            None => Ok(Vec::new()),
            Some(bytes) => meridian_core::value::decode_list(bytes).ok_or_else(|| {
                format!(
                    "key `{}` holds {} bytes, not a list of integers",
                    crate::logical_name(key),
                    bytes.len()
                )
            }),
        }
    }

    /// Keys of `wanted` the audit did not read (empty when it read them all).
    pub fn missing(&self, wanted: &[Key]) -> Vec<String> {
        wanted
            .iter()
            .filter(|k| !self.values.contains_key(*k))
            .map(|k| crate::logical_name(k))
            .collect()
    }
}

/// Runs the audit against `execute` (a driver's way of running one transaction to its
/// outcome) and returns the state read, or the failure. Shared by drivers that can run a
/// transaction synchronously.
pub fn run(
    partitioner: &Partitioner,
    keys: &[Key],
    mut execute: impl FnMut(&Txn) -> Outcome,
) -> FinalState {
    let mut state = FinalState::default();
    for txn in plans(partitioner, keys) {
        let mut outcome = execute(&txn);
        let mut tries = 1;
        while !outcome.is_committed() && tries < RETRIES {
            outcome = execute(&txn);
            tries += 1;
        }
        if !outcome.is_committed() {
            state.failure = Some(format!(
                "an audit read of {} keys did not commit after {RETRIES} attempts: {outcome:?}",
                txn.pieces
                    .iter()
                    .map(|p| p.read_keys().len())
                    .sum::<usize>()
            ));
            return state;
        }
        state.record(&txn, &outcome);
    }
    state
}

/// The verdict of an audit: the workload's conditions if every key was read, else why not.
pub fn verdict(
    workload: &dyn crate::Workload,
    keys: &[Key],
    state: &FinalState,
    history: &[meridian_check::history::Entry],
) -> Result<(), String> {
    if let Some(failure) = &state.failure {
        return Err(format!("audit failed: {failure}"));
    }
    let missing = state.missing(keys);
    if !missing.is_empty() {
        return Err(format!(
            "audit failed: {} keys unread (first: `{}`)",
            missing.len(),
            missing[0]
        ));
    }
    workload.check_final(state, history)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, execute, MapStore};
    use meridian_core::value::encode_int;

    #[test]
    fn plans_read_every_key_once_one_piece_per_shard() {
        let c = cluster(3);
        let keys: Vec<Key> = (0..2000)
            .map(|i| c.partitioner.key_on_shard(ShardId(i % 3), &format!("k{i}")))
            .chain(std::iter::once(
                c.partitioner.key_on_shard(ShardId(0), "k0"),
            ))
            .collect();
        let txns = plans(&c.partitioner, &keys);
        let mut read = 0;
        for txn in &txns {
            txn.validate(3).unwrap();
            assert!(txn.is_read_only());
            assert_eq!(txn.pieces.len(), 1);
            let n = txn.pieces[0].read_keys().len();
            assert!(n <= KEYS_PER_TXN);
            read += n;
        }
        assert_eq!(read, 2000, "the duplicate key is read once");
    }

    #[test]
    fn run_collects_values_and_reports_what_it_could_not_read() {
        let c = cluster(2);
        let a = c.partitioner.key_on_shard(ShardId(0), "a");
        let b = c.partitioner.key_on_shard(ShardId(1), "b");
        let mut store = MapStore::default();
        store.insert(a.clone(), encode_int(7));
        let keys = vec![a.clone(), b.clone()];
        let state = run(&c.partitioner, &keys, |txn| execute(txn, &mut store));
        assert_eq!(state.int(&a), Ok(7));
        assert_eq!(state.get(&b), Ok(None));
        assert!(state.missing(&keys).is_empty());
        let refused = run(&c.partitioner, &keys, |_| Outcome::Aborted {
            reason: meridian_core::AbortReason::Conflict,
        });
        assert!(refused.failure.unwrap().contains("did not commit"));
        assert!(FinalState::default().get(&a).unwrap_err().contains("`a`"));
    }
}
