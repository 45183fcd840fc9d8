//! A node's durable log as the driver hands it back after a restart: the latest checkpoint
//! (which subsumes every record before it) and the records written after it, which the
//! node replays on top; the incarnation a restarting node takes; and when to checkpoint.

/// Splits `records` at the last one `is_checkpoint` accepts: (that checkpoint, the records
/// after it), or (None, every record) when there is none.
pub fn latest_checkpoint<R>(
    records: &[R],
    is_checkpoint: impl Fn(&R) -> bool,
) -> (Option<&R>, &[R]) {
    match records.iter().rposition(is_checkpoint) {
        Some(i) => (Some(&records[i]), &records[i + 1..]),
        None => (None, records),
    }
}

/// The incarnation a restarting node takes: one more than the largest its records hold
/// (`started` reads it from a boot record), 0 on its first boot.
pub fn next_incarnation<R>(records: &[R], started: impl Fn(&R) -> Option<u32>) -> u32 {
    records
        .iter()
        .filter_map(started)
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0)
}

/// Whether a node that wrote `since` records after its last checkpoint writes one now: after
/// `every` records, and not before it wrote as many as its state holds entries. A
/// checkpoint copies the whole state, so spacing checkpoints at least the state's size apart
/// keeps their cost amortized O(1) per record however large the state grows (a fixed
/// `every` alone re-copies a store of millions of keys every few thousand records); a
/// restart then replays at most about the state's size in records.
pub fn checkpoint_due(since: usize, every: usize, state_entries: usize) -> bool {
    since >= every.max(state_entries)
}

/// What an entry (a key and its value, in the state or in a record) is charged beyond its
/// bytes by [`checkpoint_due_by_size`]'s accounting, so that a state of many small entries
/// weighs at least its entry count and an empty record still counts.
pub const ENTRY_OVERHEAD_BYTES: u64 = 16;

/// Logged bytes below which no checkpoint is due by size: a node whose whole state is small
/// checkpoints by record count alone ([`checkpoint_due`]).
pub const LOG_BYTES_FLOOR: u64 = 1 << 20;

/// The bytes [`checkpoint_due_by_size`] charges a key and its value.
pub fn entry_bytes(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64 + ENTRY_OVERHEAD_BYTES
}

/// Whether a node that logged `logged_bytes` (its records' keys and values, by
/// [`entry_bytes`]) since its last checkpoint writes one now, however few records that was:
/// once the log since the checkpoint outweighs the state (`state_bytes`, by the same
/// measure), and at least [`LOG_BYTES_FLOOR`].
///
/// [`checkpoint_due`] alone spaces checkpoints by *records*, and a record may carry values
/// far larger than the average entry of the state: TPC-C's NewOrder-only mix (Aurogon's
/// TPC-C/N, no Delivery) rewrites its district's whole NEW-ORDER list, which only grows, so
/// a shard of some 100 K keys logged 100 K records of up to hundreds of KB between
/// checkpoints, and the retained log (the simulator's durable log, and a primary-backup
/// member's log kept for promotion) grew quadratically with the run. With both rules the
/// log since the checkpoint holds at most about max(state, floor) bytes, and a checkpoint
/// (which costs about the state's bytes, entry counts included through
/// [`ENTRY_OVERHEAD_BYTES`]) is still amortized O(1) per byte logged.
pub fn checkpoint_due_by_size(logged_bytes: u64, state_bytes: u64) -> bool {
    logged_bytes >= state_bytes.max(LOG_BYTES_FLOOR)
}

/// A map's entries for a checkpoint or snapshot, in key order: the same state then encodes
/// the same way whatever order the hash map iterates in.
pub fn sorted_entries<'a, K, V>(map: impl IntoIterator<Item = (&'a K, &'a V)>) -> Vec<(K, V)>
where
    K: Ord + Clone + 'a,
    V: Clone + 'a,
{
    let mut entries: Vec<(K, V)> = map
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_spaced_by_the_larger_of_every_and_the_state() {
        assert!(!checkpoint_due(99, 100, 10));
        assert!(checkpoint_due(100, 100, 10));
        assert!(!checkpoint_due(100, 100, 5_000));
        assert!(checkpoint_due(5_000, 100, 5_000));
    }

    #[test]
    fn by_size_a_checkpoint_is_due_once_the_log_outweighs_the_state() {
        assert!(!checkpoint_due_by_size(LOG_BYTES_FLOOR - 1, 10));
        assert!(checkpoint_due_by_size(LOG_BYTES_FLOOR, 10));
        assert!(!checkpoint_due_by_size(
            LOG_BYTES_FLOOR,
            4 * LOG_BYTES_FLOOR
        ));
        assert!(checkpoint_due_by_size(
            4 * LOG_BYTES_FLOOR,
            4 * LOG_BYTES_FLOOR
        ));
        assert_eq!(entry_bytes(b"k", b"vv"), 3 + ENTRY_OVERHEAD_BYTES);
    }

    #[test]
    fn the_tail_follows_the_last_checkpoint() {
        let log = [1, 0, 2, 0, 3, 4];
        assert_eq!(
            latest_checkpoint(&log, |r| *r == 0),
            (Some(&0), &[3, 4][..])
        );
        assert_eq!(latest_checkpoint(&log[..1], |r| *r == 0), (None, &[1][..]));
    }

    #[test]
    fn a_restart_takes_the_next_incarnation() {
        let started = |r: &i32| u32::try_from(*r).ok();
        assert_eq!(next_incarnation(&[-1, 0, -1, 2], started), 3);
        assert_eq!(next_incarnation(&[-1], started), 0);
    }
}
