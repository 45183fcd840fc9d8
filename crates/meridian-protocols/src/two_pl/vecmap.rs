//! Small ordered maps and sets as sorted vectors.
//!
//! A transaction's locks, writes and results, its participants and their votes hold a handful
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

/// A set iterated in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VecSet<K> {
    items: Vec<K>,
}

impl<K> Default for VecSet<K> {
    fn default() -> Self {
        VecSet { items: Vec::new() }
    }
}

impl<K: Ord> VecSet<K> {
    pub(crate) fn new() -> Self {
        VecSet::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn contains(&self, item: &K) -> bool {
        self.items.binary_search(item).is_ok()
    }

    /// Adds `item`; whether it was absent.
    pub(crate) fn insert(&mut self, item: K) -> bool {
        match self.items.binary_search(&item) {
            Ok(_) => false,
            Err(i) => {
                self.items.insert(i, item);
                true
            }
        }
    }

    /// Removes `item`; whether it was present.
    pub(crate) fn remove(&mut self, item: &K) -> bool {
        match self.items.binary_search(item) {
            Ok(i) => {
                self.items.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, K> {
        self.items.iter()
    }
}

impl<K: Ord> FromIterator<K> for VecSet<K> {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        let mut items: Vec<K> = iter.into_iter().collect();
        items.sort_unstable();
        items.dedup();
        VecSet { items }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn behaves_like_the_std_ordered_collections() {
        let ops: Vec<(u8, u8)> = (0..200u32)
            .map(|i| (((i * 37) % 11) as u8, ((i * 13) % 7) as u8))
            .collect();
        let (mut map, mut model) = (VecMap::new(), BTreeMap::new());
        let (mut set, mut set_model) = (VecSet::new(), BTreeSet::new());
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
            assert_eq!(set.insert(v), set_model.insert(v));
            assert_eq!(set.remove(&k), set_model.remove(&k));
            assert!(map.iter().eq(model.iter()));
            assert!(set.iter().eq(set_model.iter()));
            assert_eq!(map.get(&k), model.get(&k));
            assert_eq!(map.len(), model.len());
        }
        let collected: VecMap<u8, u8> = [(3, 1), (1, 2), (3, 4)].into_iter().collect();
        let model: BTreeMap<u8, u8> = [(3, 1), (1, 2), (3, 4)].into_iter().collect();
        assert!(collected.iter().eq(model.iter()));
    }
}
