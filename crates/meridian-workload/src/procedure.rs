//! What the workloads' stored procedures share: reading their arguments and their rows.

use meridian_core::txn::{AbortReason, Key, KvAccess, Value};
use meridian_core::value::{decode_int, decode_list};

/// A procedure's outputs, or why it refused.
pub(crate) type ProcResult = Result<Vec<Option<Value>>, AbortReason>;

/// Argument `i` as an integer.
pub(crate) fn int(args: &[Value], i: usize) -> Result<i64, AbortReason> {
    args.get(i)
        .and_then(|v| decode_int(v))
        .ok_or_else(|| AbortReason::Invalid(format!("argument {i} is not an integer")))
}

/// Argument `i` as a key.
pub(crate) fn key(args: &[Value], i: usize) -> Result<Key, AbortReason> {
    args.get(i)
        .cloned()
        .ok_or_else(|| AbortReason::Invalid(format!("argument {i} missing")))
}

/// An integer row (missing = 0).
pub(crate) fn read_int(store: &mut dyn KvAccess, key: &Key) -> Result<i64, AbortReason> {
    match store.get(key) {
        None => Ok(0),
        Some(v) => decode_int(&v).ok_or(AbortReason::TypeMismatch),
    }
}

/// A list row (missing = empty).
pub(crate) fn read_list(store: &mut dyn KvAccess, key: &Key) -> Result<Vec<i64>, AbortReason> {
    match store.get(key) {
        None => Ok(Vec::new()),
        Some(v) => decode_list(&v).ok_or(AbortReason::TypeMismatch),
    }
}

/// The next sequence number of `client` (1, 2, …): unique row ids and dates.
pub(crate) fn next_seq(planned: &mut rustc_hash::FxHashMap<u32, u64>, client: u32) -> u64 {
    let n = planned.entry(client).or_default();
    *n += 1;
    *n
}
