//! A node's durable log as the driver hands it back after a restart: the latest checkpoint
//! (which subsumes every record before it) and the records written after it, which the
//! node replays on top.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_follows_the_last_checkpoint() {
        let log = [1, 0, 2, 0, 3, 4];
        assert_eq!(
            latest_checkpoint(&log, |r| *r == 0),
            (Some(&0), &[3, 4][..])
        );
        assert_eq!(latest_checkpoint(&log[..1], |r| *r == 0), (None, &[1][..]));
    }
}
