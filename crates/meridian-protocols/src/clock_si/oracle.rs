//! Conventional SI's centralized timestamp authority (§I, §V-A): one service node that
//! hands out strictly increasing timestamps from its local clock. Its timestamps survive a
//! restart through a durable lease (each lease record is a checkpoint: it subsumes the
//! earlier ones), so it never issues a timestamp twice or goes backwards.

use super::wire::{Cx, Msg, Record};
use meridian_core::time::NS_PER_S;
use meridian_core::{NodeId, Timestamp};

const LEASE_STEP_NS: u64 = NS_PER_S;

/// The oracle node.
#[derive(Debug)]
pub struct Oracle {
    /// The last timestamp issued (or, after a restart, the lease: possibly issued).
    last_ns: u64,
    lease_ns: u64,
}

impl Oracle {
    pub(crate) fn restore(records: &[Record]) -> Oracle {
        let lease = records
            .iter()
            .filter_map(|r| match r {
                Record::OracleLease { until_ns } => Some(*until_ns),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Oracle {
            last_ns: lease,
            lease_ns: lease,
        }
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        if let Msg::TsRequest { txn, purpose } = msg {
            let t = ctx.now_ns().max(self.last_ns + 1);
            self.last_ns = t;
            if t >= self.lease_ns {
                self.lease_ns = t + LEASE_STEP_NS;
                ctx.checkpoint(Record::OracleLease {
                    until_ns: self.lease_ns,
                });
            }
            ctx.send(
                from,
                Msg::TsReply {
                    txn,
                    purpose,
                    ts: Timestamp::new(t, 0),
                },
            );
        }
    }
}
