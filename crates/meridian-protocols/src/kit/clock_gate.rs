//! Clock-gated release: items held until the node's local clock passes their time, and the
//! one wake-up timer that brings the node back for the earliest of them.
//!
//! Tiga holds transactions until the clock passes T.t (§3.2's priority queue: the queue
//! order and conflict checks stay Tiga's, the wake-up is this [`WakeTimer`]) and, in
//! coordination-free mode (§6), until it passes T.t + ε ([`ClockGate`]). Clock-SI's
//! partitions delay a read or an update until their clock passes its snapshot (Algorithm 1
//! lines 19–22): both hold items in a [`ClockGate`] and arm one [`WakeTimer`].
//!
//! Timers may fire a little early or late relative to the clock (drift, steps), so release
//! always re-reads the clock: [`ClockGate::pop_due`] takes only what `now` has passed.

use meridian_core::TimerId;
use std::collections::BTreeSet;

/// Items ordered by the clock reading that releases them (ties by the item's order).
#[derive(Clone, Debug)]
pub struct ClockGate<T> {
    held: BTreeSet<(u64, T)>,
}

impl<T: Ord> Default for ClockGate<T> {
    fn default() -> Self {
        ClockGate {
            held: BTreeSet::new(),
        }
    }
}

impl<T: Ord + Copy> ClockGate<T> {
    /// Holds `item` until the clock passes `at_ns` (strictly).
    pub fn hold(&mut self, at_ns: u64, item: T) {
        self.held.insert((at_ns, item));
    }

    /// The earliest held item the clock (`now_ns`) has passed, taken out. Popping one at
    /// a time lets the caller hold new items while releasing.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<T> {
        let &(at, item) = self.held.first()?;
        if at >= now_ns {
            return None;
        }
        self.held.remove(&(at, item));
        Some(item)
    }

    /// When the earliest held item is due.
    pub fn next_ns(&self) -> Option<u64> {
        self.held.first().map(|(at, _)| *at)
    }

    pub fn clear(&mut self) {
        self.held.clear();
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// The single tracked wake-up of a node: the instant it is armed for and its timer. A
/// request for an earlier instant supersedes it (the old timer is to be cancelled); a
/// later one is left to the re-arm after the wake-up.
#[derive(Clone, Copy, Debug, Default)]
pub struct WakeTimer {
    armed: Option<(u64, TimerId)>,
}

impl WakeTimer {
    /// Whether a wake-up at `at_ns` must be armed (none is, or it is earlier than the
    /// armed one); the caller then cancels [`WakeTimer::take`]'s timer and arms one.
    pub fn needs(&self, at_ns: u64) -> bool {
        self.armed.is_none_or(|(w, _)| at_ns < w)
    }

    /// Takes the armed timer (to cancel it: it is superseded).
    pub fn take(&mut self) -> Option<TimerId> {
        self.armed.take().map(|(_, t)| t)
    }

    /// Notes the new wake-up.
    pub fn arm(&mut self, at_ns: u64, timer: TimerId) {
        self.armed = Some((at_ns, timer));
    }

    /// The wake-up for `at_ns` fired: it is no longer armed (a stale one is ignored).
    pub fn fired(&mut self, at_ns: u64) {
        if self.armed.is_some_and(|(at, _)| at == at_ns) {
            self.armed = None;
        }
    }

    /// Forgets the wake-up (its timer may still fire; it then finds nothing due).
    pub fn reset(&mut self) {
        self.armed = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_only_what_the_clock_has_passed_in_time_order() {
        let mut g = ClockGate::default();
        g.hold(30, 'c');
        g.hold(10, 'b');
        g.hold(10, 'a');
        assert_eq!(g.next_ns(), Some(10));
        assert_eq!(g.pop_due(10), None, "at the instant is not past it");
        assert_eq!(g.pop_due(11), Some('a'));
        assert_eq!(g.pop_due(11), Some('b'));
        assert_eq!(g.pop_due(11), None);
        assert_eq!(g.len(), 1);
        assert_eq!(g.pop_due(u64::MAX), Some('c'));
        assert!(g.is_empty());
    }

    #[test]
    fn an_earlier_wake_up_supersedes_a_later_one_and_stale_fires_are_ignored() {
        let mut w = WakeTimer::default();
        assert!(w.needs(50));
        assert_eq!(w.take(), None);
        w.arm(50, TimerId(1));
        assert!(!w.needs(60));
        assert!(w.needs(40));
        assert_eq!(w.take(), Some(TimerId(1)));
        w.arm(40, TimerId(2));
        w.fired(50);
        assert!(!w.needs(45), "the stale timer did not disarm the live one");
        w.fired(40);
        assert!(w.needs(45));
    }
}
