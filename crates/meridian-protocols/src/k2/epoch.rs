//! K2-VCR's decentralized epochs (§6.1-6.3, Fig. 12) as a primary keeps them.
//!
//! Epoch `k` ends at true time `T_k = k · epoch`. A primary *cuts* epoch `k` once it knows
//! true time has passed `T_k` (Property 6.1: a cut is never earlier than its promise): it
//! asks its region's oracle for `T_high`, whose lower bound `T_high − 2ε` is at or below
//! true time when the reply arrives, cuts every epoch ending by then, and sleeps (a timer,
//! which runs on true durations, stretched by the drift bound) until the next `T_k` would
//! have passed, then verifies again with a fresh timestamp — Fig. 12's loop, with the
//! uncertainty waited out by asking again rather than by a second timer.
//!
//! The primary's *current* epoch (`cut + 1`) is what it proposes for every transaction
//! that reaches it (§6.3). A primary that restarted proposes nothing until its first cut
//! (`ready`): the cut is not logged, and proposing from zero could put a new write in an
//! epoch a replica already replayed.

use super::options::Options;
use super::wire::{Msg, Timer};
use super::K2Node;
use crate::kit::ttc::OracleCursor;
use meridian_core::node::Ctx;

/// A primary's epoch cuts.
#[derive(Debug)]
pub struct EpochClock {
    /// Every epoch up to this one is cut here.
    cut: u64,
    ready: bool,
    /// The oracle asked (the nearest, unless it went silent).
    oracle: OracleCursor,
    /// The request awaiting its reply.
    outstanding: Option<u64>,
    next_req: u64,
    /// Only the newest timer counts.
    gen: u64,
}

impl EpochClock {
    pub fn new(oracle: OracleCursor) -> EpochClock {
        EpochClock {
            cut: 0,
            ready: false,
            oracle,
            outstanding: None,
            next_req: 1,
            gen: 0,
        }
    }

    /// The epoch this node proposes now (§6.3), once it has cut at least once.
    pub fn current(&self) -> Option<u64> {
        self.ready.then_some(self.cut + 1)
    }

    /// The last epoch cut here.
    pub fn cut(&self) -> u64 {
        self.cut
    }

    pub fn start(&mut self, ctx: &mut Ctx<'_, K2Node>, opts: &Options) {
        if opts.epochs_on() && !self.oracle.is_empty() {
            self.ask(ctx, opts);
        }
    }

    /// `Timer::EpochCut`: ask the oracle (again: the last request may have been lost).
    pub fn on_timer(&mut self, ctx: &mut Ctx<'_, K2Node>, opts: &Options, gen: u64) {
        if gen != self.gen {
            return;
        }
        if self.outstanding.is_some() {
            ctx.count("k2.epoch_oracle_retries", 1);
            self.oracle.skip();
        }
        self.ask(ctx, opts);
    }

    fn ask(&mut self, ctx: &mut Ctx<'_, K2Node>, opts: &Options) {
        let req = self.next_req;
        self.next_req += 1;
        self.outstanding = Some(req);
        let Some(oracle) = self.oracle.current() else {
            return;
        };
        ctx.send(oracle, Msg::GetTs { req });
        self.gen += 1;
        ctx.set_timer(opts.retry_ns, Timer::EpochCut { gen: self.gen });
    }

    /// The oracle's `T_high` for request `req`: cuts what has passed. Returns whether
    /// the cut moved.
    pub fn on_oracle_ts(
        &mut self,
        ctx: &mut Ctx<'_, K2Node>,
        opts: &Options,
        req: u64,
        high_ns: u64,
    ) -> bool {
        if self.outstanding != Some(req) {
            return false;
        }
        self.outstanding = None;
        self.oracle.answered();
        // The oracle raises a reply to one past its last, so allow 1 ns over 2ε.
        let true_low_ns = high_ns.saturating_sub(2 * opts.epsilon_ns + 1);
        let passed = true_low_ns / opts.epoch_ns;
        let moved = passed > self.cut || !self.ready;
        if passed > self.cut {
            // Counts cut events (the first cut after a start jumps from zero).
            ctx.count("k2.epoch_cuts", 1);
            self.cut = passed;
        }
        self.ready = true;
        let next_end_ns = (self.cut + 1) * opts.epoch_ns;
        let wait_ns = opts
            .with_drift(next_end_ns.saturating_sub(true_low_ns))
            .max(1);
        self.gen += 1;
        ctx.set_timer(wait_ns, Timer::EpochCut { gen: self.gen });
        moved
    }
}
