//! A region's manager (§3.1, §4.3): anticipates, for every CRT that reaches the region,
//! when the region will receive its commit (Alg. 2 lines 10-16), from the history of its
//! communication with the coordinator (the kit's one-way-delay estimator), and dispatches
//! the CRT to its participating nodes with that anticipation.
//!
//! The paper replicates a manager's view state by SMR and, on failover, has the new
//! manager raise its dclock above its predecessor's. Here a coordinator fails over by
//! sending its prep-remote to the region's next manager when the first does not dispatch
//! in time; safety does not rest on the managers (a participant raises an anticipation its
//! clock has passed, `node.rs`), so a backup that starts with a lower clock only makes a
//! first anticipation less accurate.

use super::dclock::Dclock;
use super::options::Options;
use super::wire::{Msg, TxnInfo};
use super::DastNode;
use crate::kit::owd::OwdEstimator;
use meridian_core::node::Ctx;
use meridian_core::{Cluster, NodeId, RegionId, Timestamp};
use std::sync::Arc;

/// Samples per coordinator the delay estimate is taken from.
const WINDOW: usize = 64;
/// The percentile of the recent forward delays an anticipation assumes.
const PERCENTILE: f64 = 90.0;

#[derive(Debug)]
pub struct Manager {
    me: NodeId,
    region: RegionId,
    cluster: Arc<Cluster>,
    opts: Options,
    clock: Dclock,
    owd: OwdEstimator,
}

impl Manager {
    pub fn new(me: NodeId, cluster: Arc<Cluster>, opts: Options) -> Manager {
        Manager {
            me,
            region: cluster.region_of(me),
            owd: OwdEstimator::new(me, cluster.nodes.len()),
            clock: Dclock::new(me.0, false),
            cluster,
            opts,
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, msg: Msg) {
        if let Msg::PrepRemote { info, src_ts } = msg {
            self.on_prep_remote(ctx, from, info, src_ts);
        }
    }

    /// `GetAnticipateTs` (Alg. 2 lines 10-12): now, plus the coordinator's forward delay
    /// twice (our acknowledgement's way back and its commit's way here), plus the margin
    /// for the hops inside the region.
    fn anticipate(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        coord: NodeId,
        src_ts: Timestamp,
    ) -> Timestamp {
        // §4.3's calibration across regions: pass the coordinator's clock plus the delay.
        let delay_ns = crate::kit::owd::topology_ns(&self.cluster, coord, self.me);
        let seen = Timestamp::with_frac(src_ts.time_ns + delay_ns, 0, 0);
        self.clock.calibrate(ctx.now_ns(), seen);
        let (now, _) = self.clock.create_ts(ctx.now_ns(), None);
        self.owd
            .record_arrival(coord, src_ts.time_ns, now.time_ns, WINDOW);
        let forward_ns = self.owd.forward_ns(&self.cluster, coord, PERCENTILE);
        let ahead_ns = 2 * forward_ns + self.opts.margin_ns;
        Timestamp::with_frac(now.time_ns + ahead_ns, self.me.0, 0)
    }

    fn on_prep_remote(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        from: NodeId,
        info: TxnInfo,
        src_ts: Timestamp,
    ) {
        if from != info.coord {
            return;
        }
        let anticipated = self.anticipate(ctx, info.coord, src_ts);
        ctx.count("dast.anticipations", 1);
        for shard in info.txn.shards() {
            for &r in self.cluster.replicas(shard) {
                if self.cluster.region_of(r) == self.region {
                    let msg = Msg::PrepCrt {
                        info: info.clone(),
                        anticipated,
                    };
                    ctx.send(r, msg);
                }
            }
        }
    }
}
