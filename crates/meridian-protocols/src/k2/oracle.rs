//! The TTC Oracle (§2.2, §4.2): a PTP server whose clock stays within ε of true time. It
//! answers every request with its uncertainty upper bound `T_high = now + ε`, so that
//! `abs(T_oracle) ≤ T_high ≤ abs(T_oracle) + 2ε`, and with its id (§4.3 pairs timestamps
//! with it). Replies from one incarnation strictly increase. It keeps nothing durable: a
//! TrueTime clock needs no lease, and coordinators never issue a timestamp twice on their
//! own (see `batch.rs`).

use super::wire::Msg;
use super::K2Node;
use meridian_core::node::Ctx;
use meridian_core::NodeId;

/// An oracle node.
#[derive(Debug)]
pub struct Oracle {
    /// This oracle's id (its index in the `oracle` service).
    pub index: u32,
    epsilon_ns: u64,
    last_high_ns: u64,
}

impl Oracle {
    pub fn new(index: u32, epsilon_ns: u64) -> Oracle {
        Oracle {
            index,
            epsilon_ns,
            last_high_ns: 0,
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, K2Node>, from: NodeId, msg: Msg) {
        if let Msg::GetTs { req } = msg {
            let high_ns = (ctx.now_ns() + self.epsilon_ns).max(self.last_high_ns + 1);
            self.last_high_ns = high_ns;
            ctx.count("k2.oracle_requests", 1);
            let oracle = self.index;
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
