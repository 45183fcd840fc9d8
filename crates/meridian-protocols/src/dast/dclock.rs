//! DAST's hybrid clock with stretchable granularity (§3.2, Alg. 1 `CreateTs`).
//!
//! A dclock reading is `⟨time, nid, frac⟩` ([`Timestamp::with_frac`]): `time` follows the
//! node's system clock plus an adjustable `offset` (§4.2's calibration only ever raises
//! it), `nid` makes readings unique, `frac` is the logical part the clock increases instead
//! of `time` while a CRT in the waitQ would otherwise be passed ("stretching").

use meridian_core::Timestamp;

/// One node's dclock.
#[derive(Clone, Debug)]
pub struct Dclock {
    nid: u32,
    offset_ns: u64,
    last: Timestamp,
    /// Stretch below the bound (the paper); off only for the ablation test.
    stretch: bool,
}

/// What [`Dclock::create_ts`] did, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// `time` followed the system clock.
    Physical,
    /// `time` was frozen below a CRT and `frac` increased (Alg. 1 lines 7-8).
    Stretched,
}

impl Dclock {
    pub fn new(nid: u32, stretch: bool) -> Dclock {
        Dclock {
            nid,
            offset_ns: 0,
            last: Timestamp::with_frac(0, nid, 0),
            stretch,
        }
    }

    /// The last timestamp handed out (`lastTs`): every later one is larger.
    pub fn last(&self) -> Timestamp {
        self.last
    }

    /// The system clock plus the offset (`time` when nothing holds it back).
    pub fn physical_ns(&self, now_ns: u64) -> u64 {
        now_ns.saturating_add(self.offset_ns)
    }

    fn physical(&self, now_ns: u64) -> Timestamp {
        Timestamp::with_frac(now_ns.saturating_add(self.offset_ns), self.nid, 0)
    }

    /// `lastTs` with `frac + 1`: above `lastTs`, below any later `time`. A saturated
    /// fraction moves `time` on by a nanosecond instead (four billion IRTs behind one CRT).
    fn bump(&self) -> Timestamp {
        match self.last.frac.checked_add(1) {
            Some(frac) => Timestamp::with_frac(self.last.time_ns, self.nid, frac),
            None => Timestamp::with_frac(self.last.time_ns + 1, self.nid, 0),
        }
    }

    /// `CreateTs()`: the system clock plus offset, unless that would pass `bound` (the
    /// head of the waitQ, or a peer's pause point) while `lastTs` is still below it; then
    /// `lastTs` with its fraction increased, so the new timestamp orders before the CRT.
    pub fn create_ts(&mut self, now_ns: u64, bound: Option<Timestamp>) -> (Timestamp, Created) {
        let mut ret = self.physical(now_ns);
        let mut how = Created::Physical;
        if ret <= self.last {
            ret = self.bump();
        }
        if let Some(b) = bound {
            if self.stretch && b <= ret && self.last < b {
                ret = self.bump();
                how = Created::Stretched;
            }
        }
        debug_assert!(ret > self.last, "dclock went back");
        self.last = ret;
        (ret, how)
    }

    /// Moves `lastTs` past `ts` (to this node's smallest reading above it) unless that
    /// would reach `bound`, the timestamp a stretching clock stays below; returns whether
    /// it moved. §4.2's calibration for a clock whose `time` is held: a stretched clock
    /// otherwise only counts `frac` at the `time` it froze at, so it can never pass a
    /// transaction committed between that `time` and the CRT it stretches below — and
    /// the region must pass it to execute it (see "Frozen clocks" in `mod.rs`).
    pub fn pass(&mut self, ts: Timestamp, bound: Option<Timestamp>) -> bool {
        if self.last > ts {
            return false;
        }
        let next = match self.nid.cmp(&ts.tiebreak) {
            std::cmp::Ordering::Greater => Timestamp::with_frac(ts.time_ns, self.nid, 0),
            std::cmp::Ordering::Equal => match ts.frac.checked_add(1) {
                Some(frac) => Timestamp::with_frac(ts.time_ns, self.nid, frac),
                None => Timestamp::with_frac(ts.time_ns + 1, self.nid, 0),
            },
            std::cmp::Ordering::Less => Timestamp::with_frac(ts.time_ns + 1, self.nid, 0),
        };
        if self.stretch && bound.is_some_and(|b| next >= b) {
            return false;
        }
        self.last = next;
        true
    }

    /// A timestamp above everything handed out so far and at least `at_least`, without
    /// handing it out: a participant's anticipation for a CRT (the clock then stays
    /// below it while the CRT waits). Its `time` is at least two nanoseconds past
    /// `lastTs`'s: a restarted clock held below it resumes at its `time − 1`
    /// ([`Dclock::restore`]), which must be above everything handed out before.
    pub fn above(&self, at_least: Timestamp) -> Timestamp {
        let gap = Timestamp::with_frac(self.last.time_ns + 2, self.nid, 0);
        at_least.max(gap)
    }

    /// §4.2's calibration: raise the offset so the clock's `time` passes `seen`.
    pub fn calibrate(&mut self, now_ns: u64, seen: Timestamp) {
        let here = now_ns.saturating_add(self.offset_ns);
        if seen.time_ns > here {
            self.offset_ns += seen.time_ns - here;
        }
    }

    /// After a restart: nothing at or below `time_ns` (the durable ceiling) may be handed
    /// out again — except that a stretching clock never handed out anything at or above
    /// `held` (the restored waitQ's head), so it resumes just below that if it is lower:
    /// at `held`'s `time − 1`, and at least at `floor`, the durable floor the node keeps
    /// above the fractions it handed out within a nanosecond of the head (see
    /// `Edge::keep_clock_bounds`). Without `floor` a clock stretched at `held.time − 1`
    /// would hand out those fractions a second time.
    pub fn restore(&mut self, time_ns: u64, held: Option<Timestamp>, floor: Timestamp) {
        let mut resume = Timestamp::with_frac(time_ns, self.nid, 0);
        if let (true, Some(h)) = (self.stretch, held) {
            let below_held = Timestamp::with_frac(h.time_ns.saturating_sub(1), self.nid, 0);
            resume = resume.min(below_held.max(floor));
        }
        self.last = self.last.max(resume);
    }
}
