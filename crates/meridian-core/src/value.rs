//! Encodings of typed values inside Meridian's byte-string values.
//!
//! Keys and values are byte strings (DESIGN §6). The built-in operations give two shapes
//! a meaning: an **integer** is 8 bytes little-endian two's complement (`add` works on it,
//! a missing value counts as 0), and a **list** of integers is the concatenation of such
//! encodings, so `append` is a byte-wise concatenation and never needs to decode.

use crate::txn::Value;

/// Width of one encoded integer.
pub const INT_BYTES: usize = 8;

/// Encodes an integer value.
pub fn encode_int(value: i64) -> Value {
    Value::copy_from_slice(&value.to_le_bytes())
}

/// Decodes an integer value; `None` if the bytes are not exactly one integer.
pub fn decode_int(bytes: &[u8]) -> Option<i64> {
    let array: [u8; INT_BYTES] = bytes.try_into().ok()?;
    Some(i64::from_le_bytes(array))
}

/// Decodes a list of integers; `None` if the length is not a multiple of [`INT_BYTES`].
pub fn decode_list(bytes: &[u8]) -> Option<Vec<i64>> {
    if !bytes.len().is_multiple_of(INT_BYTES) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(INT_BYTES)
            .map(|c| decode_int(c).expect("exact chunk"))
            .collect(),
    )
}

/// Encodes a list of integers.
pub fn encode_list(values: &[i64]) -> Value {
    let mut out = Vec::with_capacity(values.len() * INT_BYTES);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Value::from(out)
}

/// `old ++ suffix`, the result of `append`.
pub fn concat(old: Option<&Value>, suffix: &[u8]) -> Value {
    let old = old.map(|b| b.as_ref()).unwrap_or(&[]);
    let mut out = Vec::with_capacity(old.len() + suffix.len());
    out.extend_from_slice(old);
    out.extend_from_slice(suffix);
    Value::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn lists_round_trip_and_append_is_concatenation(a in proptest::collection::vec(any::<i64>(), 0..20), x in any::<i64>()) {
            let encoded = encode_list(&a);
            prop_assert_eq!(decode_list(&encoded), Some(a.clone()));
            let appended = concat(Some(&encoded), &encode_int(x));
            let mut expected = a;
            expected.push(x);
            prop_assert_eq!(decode_list(&appended), Some(expected));
        }
    }

    #[test]
    fn malformed_encodings_decode_to_none() {
        assert_eq!(decode_int(&[1, 2, 3]), None);
        assert_eq!(decode_list(&[0; 9]), None);
    }
}
