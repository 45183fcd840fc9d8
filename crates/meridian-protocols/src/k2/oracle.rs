//! The TTC Oracle (§2.2, §4.2): a PTP server whose clock stays within ε of true time. It
//! answers every request with its uncertainty upper bound `T_high = now + ε`, so that
//! `abs(T_oracle) ≤ T_high ≤ abs(T_oracle) + 2ε`, and with its id (§4.3 pairs timestamps
//! with it). Replies from one incarnation strictly increase. It keeps nothing durable: a
//! TrueTime clock needs no lease, and coordinators never issue a timestamp twice on their
//! own (see `batch.rs`). The answering state is `kit::ttc::OracleClock`, shared with
//! `p2pl-ttc`.

use super::wire::Msg;
use super::K2Node;
use crate::kit::ttc::OracleClock;
use meridian_core::node::Ctx;
use meridian_core::NodeId;

/// An oracle node.
#[derive(Debug)]
pub struct Oracle {
    clock: OracleClock,
}

impl Oracle {
    pub fn new(index: u32, epsilon_ns: u64) -> Oracle {
        Oracle {
            clock: OracleClock::new(index, epsilon_ns),
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, K2Node>, from: NodeId, msg: Msg) {
        if let Msg::GetTs { req } = msg {
            let high_ns = self.clock.stamp(ctx.now_ns());
            ctx.count("k2.oracle_requests", 1);
            let oracle = self.clock.index;
            ctx.send(
                from,
                Msg::OracleTs {
                    req,
                    high_ns,
                    oracle,
                },
            );
        }
    }
}
