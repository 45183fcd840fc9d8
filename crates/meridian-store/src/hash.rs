//! 160-bit SHA-1 hashes and the two hash functions of Tiga's incremental log hash
//! (Tiga §3.4, Appendix D).
//!
//! * [`entry_hash`] hashes one log entry: SHA-1 over the transaction id and timestamp
//!   (Appendix D concatenates client id, txn id and timestamp; our [`TxnId`] already
//!   carries the coordinator). The encoding is fixed-width big-endian, so it is
//!   unambiguous and identical on every platform.
//! * [`key_state_hash`] hashes one key together with its per-key hash, `SHA1(<key, hash>)`
//!   in Appendix D's notation. The key is length-prefixed so `("ab", h)` and `("a", h')`
//!   can never encode to the same bytes.

use meridian_core::{Timestamp, TxnId};
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::fmt;
use std::ops::{BitXor, BitXorAssign};

/// A 160-bit hash (one SHA-1 digest, or an XOR of several).
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Hash160(pub [u8; 20]);

impl Hash160 {
    /// The hash of the empty set (the XOR identity).
    pub const ZERO: Hash160 = Hash160([0; 20]);

    pub fn is_zero(&self) -> bool {
        *self == Hash160::ZERO
    }

    fn of(hasher: Sha1) -> Hash160 {
        Hash160(hasher.finalize().into())
    }
}

impl BitXor for Hash160 {
    type Output = Hash160;
    fn bitxor(mut self, rhs: Hash160) -> Hash160 {
        self ^= rhs;
        self
    }
}

impl BitXorAssign for Hash160 {
    fn bitxor_assign(&mut self, rhs: Hash160) {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a ^= b;
        }
    }
}

impl fmt::Display for Hash160 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Hash160 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash160({self})")
    }
}

/// SHA-1 of one log entry: `(coordinator, seq, time_ns, tiebreak)`, big-endian.
pub fn entry_hash(txn: TxnId, ts: Timestamp) -> Hash160 {
    let mut hasher = Sha1::new();
    hasher.update(txn.coordinator.0.to_be_bytes());
    hasher.update(txn.seq.to_be_bytes());
    hasher.update(ts.time_ns.to_be_bytes());
    hasher.update(ts.tiebreak.to_be_bytes());
    Hash160::of(hasher)
}

/// `SHA1(<key, key_hash>)` of Appendix D: one key's contribution to a transaction's
/// per-key hash. The key is length-prefixed (u64, big-endian).
pub fn key_state_hash(key: &[u8], key_hash: Hash160) -> Hash160 {
    let mut hasher = Sha1::new();
    hasher.update((key.len() as u64).to_be_bytes());
    hasher.update(key);
    hasher.update(key_hash.0);
    Hash160::of(hasher)
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::NodeId;

    #[test]
    fn xor_is_an_involution_with_zero_identity() {
        let a = entry_hash(TxnId::new(NodeId(1), 0, 7), Timestamp::new(5, 1));
        let b = entry_hash(TxnId::new(NodeId(2), 0, 7), Timestamp::new(5, 1));
        assert_ne!(a, b);
        assert_eq!(a ^ Hash160::ZERO, a);
        assert_eq!(a ^ b ^ b, a);
        assert!((a ^ a).is_zero());
        assert_eq!(format!("{}", Hash160::ZERO).len(), 40);
    }

    #[test]
    fn every_field_of_an_entry_matters() {
        let base = entry_hash(TxnId::new(NodeId(1), 0, 7), Timestamp::new(5, 1));
        assert_ne!(
            base,
            entry_hash(TxnId::new(NodeId(1), 0, 8), Timestamp::new(5, 1))
        );
        assert_ne!(
            base,
            entry_hash(TxnId::new(NodeId(1), 0, 7), Timestamp::new(6, 1))
        );
        assert_ne!(
            base,
            entry_hash(TxnId::new(NodeId(1), 0, 7), Timestamp::new(5, 2))
        );
    }

    #[test]
    fn key_state_hash_is_length_prefixed() {
        let h = Hash160([1; 20]);
        assert_ne!(key_state_hash(b"ab", h), key_state_hash(b"a", h));
        assert_ne!(key_state_hash(b"a", h), key_state_hash(b"a", Hash160::ZERO));
    }
}
