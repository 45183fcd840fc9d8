//! A hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", OPODIS '14), as
//! CockroachDB versions data with it and K2 §2.1 describes it: a timestamp is the largest
//! physical time seen (`wall_ns`) and a logical counter that orders events within one
//! wall value. It never runs backwards when the local clock does, it dominates every
//! timestamp received, and it stays within the assumed maximum clock offset of the local
//! clock: a received timestamp further ahead than that is refused, as CockroachDB refuses
//! a peer whose clock is too far off.
//!
//! Pure state: the caller passes its local clock reading. Used by `mvto-hlc`.

use serde::{Deserialize, Serialize};

/// An HLC timestamp: ordered by wall time, then logical counter. Ties between nodes are the
/// caller's to break (a transaction id, say).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct HlcTs {
    pub wall_ns: u64,
    pub logical: u32,
}

impl HlcTs {
    /// The next timestamp up (CockroachDB's `Next`): what a write pushed past `self` takes.
    pub fn next(self) -> HlcTs {
        match self.logical.checked_add(1) {
            Some(logical) => HlcTs { logical, ..self },
            None => HlcTs {
                wall_ns: self.wall_ns + 1,
                logical: 0,
            },
        }
    }
}

/// A received timestamp lies further ahead of the local clock than the maximum offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooFarAhead {
    pub remote: HlcTs,
    pub local_ns: u64,
}

/// One node's hybrid logical clock.
#[derive(Clone, Debug)]
pub struct Hlc {
    last: HlcTs,
    max_offset_ns: u64,
}

impl Hlc {
    pub fn new(max_offset_ns: u64) -> Hlc {
        Hlc {
            last: HlcTs::default(),
            max_offset_ns,
        }
    }

    /// A local or send event at local clock `local_ns`: a timestamp above every earlier one.
    pub fn now(&mut self, local_ns: u64) -> HlcTs {
        self.last = if local_ns > self.last.wall_ns {
            HlcTs {
                wall_ns: local_ns,
                logical: 0,
            }
        } else {
            self.last.next()
        };
        self.last
    }

    /// A receive event carrying `remote`: a timestamp above both it and every earlier one,
    /// unless `remote` is more than the maximum offset ahead of the local clock.
    pub fn update(&mut self, local_ns: u64, remote: HlcTs) -> Result<HlcTs, TooFarAhead> {
        if remote.wall_ns > local_ns.saturating_add(self.max_offset_ns) {
            return Err(TooFarAhead { remote, local_ns });
        }
        let floor = self.last.max(remote);
        self.last = if local_ns > floor.wall_ns {
            HlcTs {
                wall_ns: local_ns,
                logical: 0,
            }
        } else {
            floor.next()
        };
        Ok(self.last)
    }

    /// The latest timestamp issued.
    pub fn last(&self) -> HlcTs {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(wall_ns: u64, logical: u32) -> HlcTs {
        HlcTs { wall_ns, logical }
    }

    #[test]
    fn follows_the_clock_and_counts_while_it_stalls_or_steps_back() {
        let mut h = Hlc::new(1_000);
        assert_eq!(h.now(100), ts(100, 0));
        assert_eq!(h.now(100), ts(100, 1));
        assert_eq!(
            h.now(90),
            ts(100, 2),
            "a clock stepped back does not move it back"
        );
        assert_eq!(h.now(120), ts(120, 0));
    }

    #[test]
    fn a_received_timestamp_is_dominated() {
        let mut h = Hlc::new(1_000);
        h.now(100);
        // Ahead of the local clock (within the offset): take its wall time, count past it.
        assert_eq!(h.update(100, ts(500, 7)), Ok(ts(500, 8)));
        // Behind the local state: count on.
        assert_eq!(h.update(200, ts(300, 0)), Ok(ts(500, 9)));
        // The local clock has passed everything: back to physical time.
        assert_eq!(h.update(600, ts(550, 3)), Ok(ts(600, 0)));
    }

    #[test]
    fn a_timestamp_beyond_the_maximum_offset_is_refused_and_changes_nothing() {
        let mut h = Hlc::new(1_000);
        h.now(100);
        assert_eq!(
            h.update(100, ts(1_101, 0)),
            Err(TooFarAhead {
                remote: ts(1_101, 0),
                local_ns: 100
            })
        );
        assert_eq!(h.last(), ts(100, 0));
        assert_eq!(h.update(100, ts(1_100, 0)), Ok(ts(1_100, 1)));
    }

    #[test]
    fn next_carries_into_the_wall_time() {
        assert_eq!(ts(5, u32::MAX).next(), ts(6, 0));
    }
}
