//! Which shard owns a key: a stable 64-bit FNV-1a hash of the key's bytes, modulo the number
//! of shards. Stable across runs, platforms and releases, so histories and experiments replay.
//!
//! Workloads that must place a key on a chosen shard (MicroBench: "3 keys on 3 different
//! shards") use [`Partitioner::key_on_shard`], which finds the first salted name that hashes
//! to that shard; keys stay honest byte strings and every path routes them the same way.

use crate::ids::ShardId;
use crate::txn::Key;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partitioner {
    shards: u32,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64-bit.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_continue(FNV_OFFSET, bytes)
}

/// FNV-1a of `prefix ++ bytes`, given `hash` = the hash of `prefix`.
fn fnv1a_continue(mut hash: u64, bytes: &[u8]) -> u64 {
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
            return Key::copy_from_slice(name.as_bytes());
        }
        // Candidates are `name~0`, `name~1`, …: hash the common prefix once. Each salt hits
        // the shard with probability 1/shards; 64 * shards tries fail with probability below
        // e^-64.
        let mut candidate = Vec::with_capacity(name.len() + 12);
        candidate.extend_from_slice(name.as_bytes());
        candidate.push(b'~');
        let prefix_hash = fnv1a_continue(FNV_OFFSET, &candidate);
        let mut digits = [0u8; 20];
        for salt in 0..64 * u64::from(self.shards) {
            let salt_text = decimal(salt, &mut digits);
            let hash = fnv1a_continue(prefix_hash, salt_text);
            if (hash % u64::from(self.shards)) as u32 == shard.0 {
                candidate.extend_from_slice(salt_text);
                return Key::from(candidate);
            }
        }
        unreachable!("no salt of `{name}` hashes to {shard}");
    }
}

/// `value` in decimal, written into the end of `buffer`.
fn decimal(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut start = buffer.len();
    loop {
        start -= 1;
        buffer[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buffer[start..];
        }
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
    fn salted_keys_are_name_tilde_salt() {
        let p = Partitioner::new(5);
        for i in 0..200 {
            let name = format!("k{i}");
            let key = p.key_on_shard(ShardId(i % 5), &name);
            let text = std::str::from_utf8(&key).unwrap();
            if text != name {
                let (base, salt) = text.split_once('~').unwrap();
                assert_eq!(base, name);
                let salt: u64 = salt.parse().unwrap();
                // The first salt that lands on the shard, as a plain search would find.
                let first = (0..)
                    .find(|s| p.shard_of(format!("{name}~{s}").as_bytes()) == ShardId(i % 5))
                    .unwrap();
                assert_eq!(salt, first);
            }
        }
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
