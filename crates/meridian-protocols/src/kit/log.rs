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
