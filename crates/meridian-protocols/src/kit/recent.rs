//! A bounded memory of recently seen ids: a set that forgets its oldest member once it
//! holds more than its capacity (duplicate suppression, "known done elsewhere" answers).

use rustc_hash::FxHashSet;
use std::collections::VecDeque;
use std::hash::Hash;

/// The last `capacity` distinct ids inserted, oldest forgotten first.
#[derive(Clone, Debug)]
pub struct Recent<T> {
    members: FxHashSet<T>,
    order: VecDeque<T>,
    capacity: usize,
}

impl<T: Copy + Eq + Hash> Recent<T> {
    pub fn new(capacity: usize) -> Recent<T> {
        assert!(capacity > 0, "a memory of nothing");
        Recent {
            members: FxHashSet::default(),
            order: VecDeque::new(),
            capacity,
        }
    }

    /// Remembers `id`; false if it was remembered already (nothing changes then).
    pub fn insert(&mut self, id: T) -> bool {
        if !self.members.insert(id) {
            return false;
        }
        self.order.push_back(id);
        while self.order.len() > self.capacity {
            let old = self.order.pop_front().expect("longer than the capacity");
            self.members.remove(&old);
        }
        assert_eq!(self.members.len(), self.order.len());
        true
    }

    pub fn contains(&self, id: &T) -> bool {
        self.members.contains(id)
    }

    /// The remembered ids, oldest first (inserting them in this order into an empty
    /// memory of the same capacity rebuilds it).
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.order.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn it_refuses_repeats_and_forgets_the_oldest_past_its_capacity() {
        let mut recent = Recent::new(2);
        assert!(recent.insert(1));
        assert!(!recent.insert(1));
        assert!(recent.insert(2));
        assert!(recent.insert(3));
        assert!(!recent.contains(&1), "the oldest is forgotten");
        assert!(recent.contains(&2) && recent.contains(&3));
        assert!(recent.insert(1), "a forgotten id is new again");
    }
}
