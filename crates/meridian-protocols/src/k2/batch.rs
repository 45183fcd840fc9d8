//! K2-TB (§4.3, Figs. 5-6): a coordinator's source of timestamps.
//!
//! A request to the region's oracle is sent at local time `sent`; the oracle answers its
//! uncertainty upper bound `T_high` (§4.2). In batch mode the reply becomes a batch
//! `[T_high + TTL, T_high + 2·TTL)` stepped by `step_ns` (TSCount = TTL / step), usable
//! while the TTL counted from `sent` has not expired; a transaction that arrived before
//! that expiry may take a timestamp from it (the proof of §4.4 needs
//! `abs(T_start) < abs(T_batch_start) + TTL`). In strawman mode a reply is one timestamp,
//! `T_high`, for one transaction that arrived before its request was sent.
//!
//! Expiry is checked twice, because an ordinary clock may be stepped: on the local clock
//! (the elapsed reading must lie in `[0, TTL·(1−D))`) *and* by a TTL timer (timers measure
//! true durations and never fire early). Either one expires the batch.
//!
//! Timestamps are `⟨time_ns, oracle id, coordinator tag⟩` (§4.3 pairs them with the
//! oracle's id; the coordinator's tag — its node id and incarnation — and the rule that a
//! coordinator's timestamps strictly increase make them unique, which K2-MVTO needs since
//! a start timestamp is the transaction's identity).
//!
//! Pure state: no node, no messages, so the criterion benchmark drives it directly.

use meridian_core::Timestamp;
use std::collections::BTreeMap;

/// A live batch (Fig. 6's `TsBatch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TsBatch {
    /// TBBase = T_high + TTL.
    pub base_ns: u64,
    /// The oracle that issued it.
    pub oracle: u32,
    /// TSCount.
    pub count: u64,
    /// Timestamps used so far.
    pub used: u64,
    /// Local time the request was sent (the TTL counts from here).
    pub sent_local_ns: u64,
    /// The request whose reply this is (its TTL timer names it).
    pub req: u64,
    /// The TTL timer fired.
    pub expired: bool,
}

/// What a coordinator's timestamp source answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// A timestamp, from the local batch.
    Local(Timestamp),
    /// None here: wait for a reply (a request is in flight or should be sent).
    Wait,
}

/// A coordinator's timestamp source (batch or strawman).
#[derive(Clone, Debug)]
pub struct TsSource {
    batching: bool,
    ttl_ns: u64,
    /// TTL·(1−D): a local reading below it is less than TTL of true time.
    ttl_local_ns: u64,
    step_ns: u64,
    tag: u32,
    batch: Option<TsBatch>,
    /// Requests in flight: id → (local send time, its TTL timer fired).
    outstanding: BTreeMap<u64, (u64, bool)>,
    next_req: u64,
    last_issued: Timestamp,
    /// Counters (for the benchmark and the `k2.ts_*` counters).
    pub served_locally: u64,
    pub oracle_requests: u64,
}

impl TsSource {
    /// `tag` tells this coordinator (and incarnation) apart from every other.
    pub fn new(batching: bool, ttl_ns: u64, ttl_local_ns: u64, step_ns: u64, tag: u32) -> Self {
        assert!(step_ns > 0 && step_ns <= ttl_ns, "step within the TTL");
        TsSource {
            batching,
            ttl_ns,
            ttl_local_ns,
            step_ns,
            tag,
            batch: None,
            outstanding: BTreeMap::new(),
            next_req: 1,
            last_issued: Timestamp::ZERO,
            served_locally: 0,
            oracle_requests: 0,
        }
    }

    /// The id the next request will carry: a transaction arriving now is eligible for
    /// every reply to a request with an id at least this (it arrived before the send).
    pub fn next_req(&self) -> u64 {
        self.next_req
    }

    /// Whether a request is in flight.
    pub fn requesting(&self) -> bool {
        !self.outstanding.is_empty()
    }

    /// Requests in flight, for retransmission.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// GetTsFromBatch (Fig. 6) for a transaction arriving now.
    pub fn take(&mut self, now_local_ns: u64) -> Take {
        match self.take_from_batch(now_local_ns) {
            Some(ts) => {
                self.served_locally += 1;
                Take::Local(ts)
            }
            None => Take::Wait,
        }
    }

    fn take_from_batch(&mut self, now_local_ns: u64) -> Option<Timestamp> {
        let batch = self.batch.as_mut()?;
        if batch.expired || !within(now_local_ns, batch.sent_local_ns, self.ttl_local_ns) {
            batch.expired = true;
            return None;
        }
        self.next_in_batch()
    }

    /// The batch's next timestamp above everything issued (an earlier batch may overlap).
    fn next_in_batch(&mut self) -> Option<Timestamp> {
        let batch = self.batch.as_mut()?;
        let floor = self.last_issued.time_ns;
        if batch.base_ns + batch.used * self.step_ns <= floor {
            batch.used = (floor - batch.base_ns) / self.step_ns + 1;
        }
        if batch.used >= batch.count {
            return None;
        }
        let time_ns = batch.base_ns + batch.used * self.step_ns;
        batch.used += 1;
        let ts = Timestamp::with_frac(time_ns, batch.oracle, self.tag);
        self.last_issued = ts;
        Some(ts)
    }

    /// Registers a request about to be sent; returns its id.
    pub fn request(&mut self, now_local_ns: u64) -> u64 {
        let req = self.next_req;
        self.next_req += 1;
        self.outstanding.insert(req, (now_local_ns, false));
        self.oracle_requests += 1;
        req
    }

    /// Forgets an unanswered request (its retransmission carries a new id).
    pub fn abandon(&mut self, req: u64) {
        self.outstanding.remove(&req);
    }

    /// The ids of the requests in flight.
    pub fn outstanding_reqs(&self) -> Vec<u64> {
        self.outstanding.keys().copied().collect()
    }

    /// The TTL timer of request `req` fired.
    pub fn ttl_expired(&mut self, req: u64) {
        if let Some(entry) = self.outstanding.get_mut(&req) {
            entry.1 = true;
        }
        if let Some(batch) = self.batch.as_mut().filter(|b| b.req == req) {
            batch.expired = true;
        }
    }

    /// The oracle answered request `req` with `high_ns`. In batch mode the reply becomes
    /// the batch; in strawman mode it is returned as the one timestamp it buys. `None` if
    /// the reply is stale (not in flight) or, in strawman mode, not above what this
    /// coordinator issued already.
    pub fn on_reply(&mut self, req: u64, high_ns: u64, oracle: u32) -> Option<Timestamp> {
        let (sent_local_ns, ttl_fired) = self.outstanding.remove(&req)?;
        if self.batching {
            // A newer batch replaces the old one; older requests are dropped with it.
            self.outstanding.retain(|&r, _| r > req);
            self.batch = Some(TsBatch {
                base_ns: high_ns + self.ttl_ns,
                oracle,
                count: self.ttl_ns / self.step_ns,
                used: 0,
                sent_local_ns,
                req,
                expired: ttl_fired,
            });
            return None;
        }
        let ts = Timestamp::with_frac(high_ns, oracle, self.tag);
        if ts.time_ns <= self.last_issued.time_ns {
            return None;
        }
        self.last_issued = ts;
        Some(ts)
    }

    /// Batch mode: the requests in flight whose TTL has not expired at `now_local_ns` — a
    /// transaction arriving now may take a timestamp from their replies (§4.4).
    pub fn eligible_reqs(&self, now_local_ns: u64) -> Vec<u64> {
        if !self.batching {
            return Vec::new();
        }
        self.outstanding
            .iter()
            .filter(|(_, (sent, fired))| !fired && within(now_local_ns, *sent, self.ttl_local_ns))
            .map(|(req, _)| *req)
            .collect()
    }

    /// A timestamp from the batch for a transaction that arrived while the batch's request
    /// was young enough ([`TsSource::eligible_reqs`]): the TTL may have run out since, as
    /// long as the batch has timestamps left.
    pub fn take_arrived_in_time(&mut self) -> Option<Timestamp> {
        let ts = self.next_in_batch()?;
        self.served_locally += 1;
        Some(ts)
    }

    /// The id of the batch's request, if there is a batch.
    pub fn batch_req(&self) -> Option<u64> {
        self.batch.as_ref().map(|b| b.req)
    }

    /// The batch, if any (tests).
    pub fn batch(&self) -> Option<&TsBatch> {
        self.batch.as_ref()
    }
}

/// `now − since ∈ [0, limit)` on a clock that may have stepped backwards.
fn within(now: u64, since: u64, limit: u64) -> bool {
    now >= since && now - since < limit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> TsSource {
        TsSource::new(true, 100_000, 99_980, 10, 7)
    }

    #[test]
    fn a_batch_serves_ttl_over_step_increasing_timestamps_above_the_oracle_bound() {
        let mut s = source();
        assert_eq!(s.take(0), Take::Wait);
        let req = s.request(0);
        assert_eq!(s.on_reply(req, 5_000_000, 3), None);
        let mut last = Timestamp::ZERO;
        for i in 0..10_000u64 {
            let Take::Local(ts) = s.take(50_000) else {
                panic!("batch ran out at {i}")
            };
            assert_eq!(ts.time_ns, 5_000_000 + 100_000 + 10 * i);
            assert_eq!((ts.tiebreak, ts.frac), (3, 7));
            assert!(ts > last);
            last = ts;
        }
        assert_eq!(s.take(50_000), Take::Wait, "TSCount = TTL / step");
        assert_eq!((s.served_locally, s.oracle_requests), (10_000, 1));
    }

    #[test]
    fn a_batch_expires_by_its_ttl_on_the_clock_or_by_its_timer_or_on_a_backward_step() {
        let mut s = source();
        let req = s.request(1_000);
        s.on_reply(req, 5_000_000, 0);
        assert!(matches!(s.take(1_000 + 99_979), Take::Local(_)));
        assert_eq!(s.take(1_000 + 99_980), Take::Wait, "TTL·(1−D) elapsed");

        let req = s.request(2_000_000);
        s.on_reply(req, 9_000_000, 0);
        assert_eq!(s.take(1_999_999), Take::Wait, "the clock went back");

        let req = s.request(3_000_000);
        s.on_reply(req, 9_500_000, 0);
        s.ttl_expired(req);
        assert_eq!(s.take(3_000_001), Take::Wait, "the TTL timer fired");
    }

    #[test]
    fn overlapping_batches_never_repeat_a_timestamp() {
        let mut s = source();
        let req = s.request(0);
        s.on_reply(req, 1_000_000, 0);
        let Take::Local(first) = s.take(10) else {
            panic!()
        };
        // A second batch from an oracle whose bound is lower overlaps the first.
        let req = s.request(20);
        s.on_reply(req, 999_990, 0);
        let Take::Local(second) = s.take(30) else {
            panic!()
        };
        assert!(second > first);
    }

    #[test]
    fn the_strawman_turns_each_reply_into_one_timestamp_and_drops_stale_ones() {
        let mut s = TsSource::new(false, 100_000, 99_980, 10, 1);
        assert_eq!(s.take(0), Take::Wait);
        let a = s.request(0);
        let b = s.request(0);
        assert_eq!(s.on_reply(b, 500, 2).map(|t| t.time_ns), Some(500));
        assert_eq!(s.on_reply(a, 400, 2), None, "below what was issued");
        assert_eq!(s.on_reply(a, 900, 2), None, "no longer in flight");
    }
}
