//! Which shard owns a key: a stable 64-bit FNV-1a hash of the key's bytes, modulo the number
//! of shards. Stable across runs, platforms and releases, so histories and experiments replay.
//!
//! Workloads that must place a key on a chosen shard (MicroBench: "3 keys on 3 different
//! shards") use [`Partitioner::key_on_shard`], which finds the first salted name that hashes
//! to that shard; keys stay honest byte strings and every path routes them the same way.

use crate::ids::ShardId;
use crate::txn::Key;
use bytes::Bytes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partitioner {
    shards: u32,
}

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl Partitioner {
    pub fn new(shards: u32) -> Partitioner {
        assert!(shards > 0, "a cluster has at least one shard");
        Partitioner { shards }
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    pub fn shard_of(&self, key: &[u8]) -> ShardId {
        ShardId((fnv1a(key) % u64::from(self.shards)) as u32)
    }

    /// A key named `name` (plus a salt suffix where needed) owned by `shard`.
    pub fn key_on_shard(&self, shard: ShardId, name: &str) -> Key {
        assert!(
            shard.0 < self.shards,
            "{shard} outside {} shards",
            self.shards
        );
        if self.shard_of(name.as_bytes()) == shard {
            return Bytes::copy_from_slice(name.as_bytes());
        }
        // Each salt hits the shard with probability 1/shards; 64 * shards tries fail with
        // probability below e^-64.
        for salt in 0..64 * u64::from(self.shards) {
            let candidate = format!("{name}~{salt}");
            if self.shard_of(candidate.as_bytes()) == shard {
                return Bytes::from(candidate);
            }
        }
        unreachable!("no salt of `{name}` hashes to {shard}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_on_shard_lands_on_the_requested_shard_and_is_stable() {
        let p = Partitioner::new(7);
        for shard in 0..7 {
            for i in 0..50 {
                let key = p.key_on_shard(ShardId(shard), &format!("k{i}"));
                assert_eq!(p.shard_of(&key), ShardId(shard));
                assert_eq!(key, p.key_on_shard(ShardId(shard), &format!("k{i}")));
            }
        }
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
