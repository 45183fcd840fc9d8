//! [`SmallBytes`]: the immutable byte string behind [`crate::txn::Key`] and
//! [`crate::txn::Value`].
//!
//! Keys and values are cloned everywhere: into every replica's log entry, key maps, store
//! versions, hashes and replies. Most are short (MicroBench keys are ≈ 12 bytes, integer
//! values 8), so a string of up to [`INLINE_MAX`] bytes is stored inline, in 24 bytes with
//! no allocation: a clone is a copy and a drop is free. Longer ones (list-append values, long
//! TPC-C keys) share one `Arc<[u8]>`, so a clone is a reference-count increment as with
//! `bytes::Bytes`. `bytes::Bytes` shared every key's reference count across all the nodes of
//! an in-process cluster, and its clones and drops (atomic operations on a cache line
//! bouncing between threads) were ≈ 12 % of a Tiga server's CPU.
//!
//! It compares, orders and hashes exactly as its `[u8]` content (so maps keyed by it can be
//! queried with a `&[u8]`), serializes as serde bytes (the wire format of `bytes::Bytes`),
//! and prints as a byte string literal (`b"key"`).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// The longest string stored inline.
pub const INLINE_MAX: usize = 22;

/// An immutable byte string, inline up to [`INLINE_MAX`] bytes (see the module doc).
#[derive(Clone)]
pub struct SmallBytes(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, data: [u8; INLINE_MAX] },
    Shared(Arc<[u8]>),
}

impl SmallBytes {
    /// The empty string.
    pub const fn new() -> SmallBytes {
        SmallBytes(Repr::Inline {
            len: 0,
            data: [0; INLINE_MAX],
        })
    }

    #[inline]
    pub fn copy_from_slice(bytes: &[u8]) -> SmallBytes {
        if bytes.len() > INLINE_MAX {
            return SmallBytes(Repr::Shared(Arc::from(bytes)));
        }
        let mut data = [0; INLINE_MAX];
        data[..bytes.len()].copy_from_slice(bytes);
        SmallBytes(Repr::Inline {
            len: bytes.len() as u8,
            data,
        })
    }

    /// Same as [`SmallBytes::copy_from_slice`] (kept for `bytes::Bytes` call sites).
    pub fn from_static(bytes: &'static [u8]) -> SmallBytes {
        SmallBytes::copy_from_slice(bytes)
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, data } => &data[..usize::from(*len)],
            Repr::Shared(shared) => shared,
        }
    }

    /// Whether it is stored inline (no allocation).
    #[inline]
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }
}

impl Default for SmallBytes {
    fn default() -> Self {
        SmallBytes::new()
    }
}

impl Deref for SmallBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for SmallBytes {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for SmallBytes {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for SmallBytes {
    #[inline]
    fn eq(&self, other: &SmallBytes) -> bool {
        match (&self.0, &other.0) {
            // The inline array is zero past `len`, so whole arrays compare as contents.
            (Repr::Inline { len: a, data: x }, Repr::Inline { len: b, data: y }) => {
                a == b && x == y
            }
            _ => self.as_slice() == other.as_slice(),
        }
    }
}

impl Eq for SmallBytes {}

impl PartialEq<[u8]> for SmallBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u8]> for SmallBytes {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl PartialEq<str> for SmallBytes {
    fn eq(&self, other: &str) -> bool {
        self.as_slice() == other.as_bytes()
    }
}

impl PartialEq<&str> for SmallBytes {
    fn eq(&self, other: &&str) -> bool {
        self.as_slice() == other.as_bytes()
    }
}

impl PartialEq<Vec<u8>> for SmallBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialOrd for SmallBytes {
    #[inline]
    fn partial_cmp(&self, other: &SmallBytes) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallBytes {
    #[inline]
    fn cmp(&self, other: &SmallBytes) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for SmallBytes {
    /// As `[u8]` hashes, so that `Borrow<[u8]>` lookups find it.
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl From<&[u8]> for SmallBytes {
    fn from(bytes: &[u8]) -> Self {
        SmallBytes::copy_from_slice(bytes)
    }
}

impl<const N: usize> From<&[u8; N]> for SmallBytes {
    fn from(bytes: &[u8; N]) -> Self {
        SmallBytes::copy_from_slice(bytes)
    }
}

impl From<&str> for SmallBytes {
    fn from(text: &str) -> Self {
        SmallBytes::copy_from_slice(text.as_bytes())
    }
}

impl From<String> for SmallBytes {
    fn from(text: String) -> Self {
        SmallBytes::copy_from_slice(text.as_bytes())
    }
}

impl From<Vec<u8>> for SmallBytes {
    fn from(bytes: Vec<u8>) -> Self {
        SmallBytes::copy_from_slice(&bytes)
    }
}

impl From<SmallBytes> for Vec<u8> {
    fn from(bytes: SmallBytes) -> Self {
        bytes.as_slice().to_vec()
    }
}

impl fmt::Debug for SmallBytes {
    /// A byte string literal, as `bytes::Bytes` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"")?;
        for &b in self.as_slice() {
            match b {
                b'\n' => write!(f, "\\n")?,
                b'\r' => write!(f, "\\r")?,
                b'\t' => write!(f, "\\t")?,
                b'\\' | b'"' => write!(f, "\\{}", b as char)?,
                0x20..=0x7e => write!(f, "{}", b as char)?,
                _ => write!(f, "\\x{b:02x}")?,
            }
        }
        write!(f, "\"")
    }
}

impl Serialize for SmallBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.as_slice())
    }
}

impl<'de> Deserialize<'de> for SmallBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_byte_buf(SmallBytesVisitor)
    }
}

/// Accepts serde bytes (binary formats), a sequence of byte values (JSON arrays, as
/// `bytes::Bytes` writes them) and a string.
struct SmallBytesVisitor;

/// The longest sequence a deserializer may hand us: a frame is at most a few MiB.
const SEQ_BYTES_MAX: usize = 64 << 20;

impl<'de> Visitor<'de> for SmallBytesVisitor {
    type Value = SmallBytes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a byte string")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<SmallBytes, E> {
        Ok(SmallBytes::copy_from_slice(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<SmallBytes, E> {
        Ok(SmallBytes::copy_from_slice(v.as_bytes()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SmallBytes, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(INLINE_MAX));
        while let Some(b) = seq.next_element::<u8>()? {
            if bytes.len() == SEQ_BYTES_MAX {
                return Err(de::Error::invalid_length(bytes.len() + 1, &self));
            }
            bytes.push(b);
        }
        Ok(SmallBytes::from(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::hash::BuildHasher;

    #[test]
    fn short_strings_are_inline_and_long_ones_shared() {
        assert_eq!(std::mem::size_of::<SmallBytes>(), 24);
        assert!(SmallBytes::from(&[7u8; INLINE_MAX]).is_inline());
        let long = SmallBytes::from(vec![7u8; INLINE_MAX + 1]);
        assert!(!long.is_inline());
        assert_eq!(long.len(), INLINE_MAX + 1);
    }

    #[test]
    fn prints_as_a_byte_string_literal() {
        let b = SmallBytes::from(&b"k\"1\n\xff"[..]);
        assert_eq!(
            format!("{b:?}"),
            format!("{:?}", bytes::Bytes::from(&b"k\"1\n\xff"[..]))
        );
    }

    #[test]
    fn json_reads_and_writes_as_bytes_did() {
        for raw in [&b""[..], b"mb12~3", &[9u8; 40]] {
            let theirs = bytes::Bytes::copy_from_slice(raw);
            let json = serde_json::to_string(&theirs).unwrap();
            assert_eq!(json, serde_json::to_string(&SmallBytes::from(raw)).unwrap());
            let back: SmallBytes = serde_json::from_str(&json).unwrap();
            assert_eq!(back, raw);
        }
    }

    proptest! {
        #[test]
        fn compares_and_hashes_as_its_content(a in proptest::collection::vec(any::<u8>(), 0..40),
                                              b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let (x, y) = (SmallBytes::from(a.clone()), SmallBytes::from(b.clone()));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(x == y, a == b);
            let h = rustc_hash::FxBuildHasher;
            prop_assert_eq!(h.hash_one(&x), h.hash_one(a.as_slice()));
            prop_assert_eq!(x.as_slice(), a.as_slice());
        }
    }
}
