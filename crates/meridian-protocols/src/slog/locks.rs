//! The deterministic lock manager (Calvin's, which SLOG runs at every shard): a
//! transaction requests all its locks at once, in log order, and a lock goes to requests
//! in the order they were made. Nothing waits on anything later in the log, so there is no
//! deadlock and every replica grants the same locks in the same order.

use meridian_core::txn::Key;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Lock requests per key, in log order (`seq`), each shared (`false`) or exclusive.
#[derive(Debug, Default)]
pub struct LockTable {
    queues: FxHashMap<Key, VecDeque<(u64, bool)>>,
}

impl LockTable {
    /// Requests `keys` (each once, `true` = exclusive) for `seq`, which must exceed every
    /// earlier request's; returns whether all are granted at once.
    pub fn acquire(&mut self, seq: u64, keys: &[(Key, bool)]) -> bool {
        for (key, write) in keys {
            self.queues
                .entry(key.clone())
                .or_default()
                .push_back((seq, *write));
        }
        self.granted(seq, keys)
    }

    /// Whether every lock of `seq` is granted: exclusive ones at the head of their queue,
    /// shared ones behind shared requests only.
    pub fn granted(&self, seq: u64, keys: &[(Key, bool)]) -> bool {
        keys.iter().all(|(key, write)| {
            let Some(queue) = self.queues.get(key) else {
                return false;
            };
            for &(other, other_write) in queue {
                if other == seq {
                    return true;
                }
                if *write || other_write {
                    return false;
                }
            }
            false
        })
    }

    /// Releases `seq`'s locks; returns the requests that may now hold theirs (the caller
    /// checks each with [`LockTable::granted`]), in log order.
    pub fn release(&mut self, seq: u64, keys: &[(Key, bool)]) -> Vec<u64> {
        let mut candidates = Vec::new();
        for (key, _) in keys {
            let Some(queue) = self.queues.get_mut(key) else {
                continue;
            };
            queue.retain(|&(other, _)| other != seq);
            // The head, and the shared requests right behind a shared head.
            for &(other, write) in queue.iter() {
                candidates.push(other);
                if write {
                    break;
                }
            }
            if queue.is_empty() {
                self.queues.remove(key);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        candidates
    }

    /// Keys with requests waiting or held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.queues.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &'static str) -> Key {
        Key::from_static(s.as_bytes())
    }

    #[test]
    fn locks_go_in_log_order_and_readers_share() {
        let mut t = LockTable::default();
        assert!(t.acquire(1, &[(k("a"), false)]));
        assert!(t.acquire(2, &[(k("a"), false)]), "readers share");
        assert!(!t.acquire(3, &[(k("a"), true), (k("b"), true)]));
        assert!(!t.acquire(4, &[(k("b"), false)]), "behind 3 in log order");
        // Candidates only: 3 waits behind reader 2, as `granted` says.
        assert_eq!(t.release(1, &[(k("a"), false)]), vec![2, 3]);
        assert!(!t.granted(3, &[(k("a"), true), (k("b"), true)]));
        let next = t.release(2, &[(k("a"), false)]);
        assert_eq!(next, vec![3]);
        assert!(t.granted(3, &[(k("a"), true), (k("b"), true)]));
        assert!(!t.granted(4, &[(k("b"), false)]));
        assert_eq!(t.release(3, &[(k("a"), true), (k("b"), true)]), vec![4]);
        assert!(t.granted(4, &[(k("b"), false)]));
        t.release(4, &[(k("b"), false)]);
        assert_eq!(t.len(), 0);
    }
}
