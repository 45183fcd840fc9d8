//! Small ordered maps as sorted vectors (votes are the kit's `quorum::Votes`).
//!
//! A transaction's locks, writes and results and its participants hold a handful
//! of entries. A sorted vector keeps the `BTreeMap` semantics the protocol relies on (key
//! order when iterating, one entry per key) without a node allocation per map, and a binary
//! search over a few contiguous entries beats walking a tree.

/// A map with at most one entry per key, iterated in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    pub(crate) fn new() -> Self {
        VecMap::default()
    }

    fn find(&self, key: &K) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.cmp(key))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    /// Inserts or replaces (like `BTreeMap::insert`; the old key is kept).
    pub(crate) fn insert(&mut self, key: K, value: V) {
        match self.find(&key) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (key, value)),
        }
    }

    /// The value under `key`, inserted from `make` first if absent (`entry().or_insert_with`).
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (key, make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    #[cfg(test)]
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.entries.iter().map(|(k, _)| k)
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// Takes every entry out, in key order, keeping the allocation.
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, (K, V)> {
        self.entries.drain(..)
    }

    /// The entries as a vector sorted by key.
    pub(crate) fn as_slice(&self) -> &[(K, V)] {
        &self.entries
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    /// Like collecting into a `BTreeMap`: sorted, and the last value of a repeated key wins.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = VecMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn behaves_like_the_std_ordered_collections() {
        let ops: Vec<(u8, u8)> = (0..200u32)
            .map(|i| (((i * 37) % 11) as u8, ((i * 13) % 7) as u8))
            .collect();
        let (mut map, mut model) = (VecMap::new(), BTreeMap::new());
        for (k, v) in ops {
            match v % 3 {
                0 => assert_eq!(map.remove(&k), model.remove(&k)),
                1 => {
                    map.insert(k, v);
                    model.insert(k, v);
                }
                _ => {
                    *map.get_or_insert_with(k, || 0) += v;
                    *model.entry(k).or_insert(0) += v;
                }
            }
            assert!(map.iter().eq(model.iter()));
            assert_eq!(map.get(&k), model.get(&k));
            assert_eq!(map.len(), model.len());
        }
        let collected: VecMap<u8, u8> = [(3, 1), (1, 2), (3, 4)].into_iter().collect();
        let model: BTreeMap<u8, u8> = [(3, 1), (1, 2), (3, 4)].into_iter().collect();
        assert!(collected.iter().eq(model.iter()));
    }
}
