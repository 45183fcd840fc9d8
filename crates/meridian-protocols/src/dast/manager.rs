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
//!
//! Membership (§4.4, `members.rs`): the acting manager suspects an edge node it has not
//! heard from for `suspect_ms` and removes it (Alg. 3), and adds a removed node that asks
//! back from a live replica's checkpoint (Alg. 4).

use super::dclock::Dclock;
use super::members::Members;
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
    pub(super) me: NodeId,
    pub(super) region: RegionId,
    pub(super) cluster: Arc<Cluster>,
    pub(super) opts: Options,
    pub(super) clock: Dclock,
    owd: OwdEstimator,
    pub(super) members: Members,
}

impl Manager {
    pub fn new(me: NodeId, cluster: Arc<Cluster>, opts: Options) -> Manager {
        Manager {
            me,
            region: cluster.region_of(me),
            owd: OwdEstimator::new(me, cluster.nodes.len()),
            clock: Dclock::new(me.0, false),
            members: Members::new(&cluster, me),
            cluster,
            opts,
        }
    }

    pub fn on_message(&mut self, ctx: &mut Ctx<'_, DastNode>, from: NodeId, msg: Msg) {
        match msg {
            Msg::PrepRemote { info, sent_ns, .. } => self.on_prep_remote(ctx, from, info, sent_ns),
            other => self.on_membership(ctx, from, other),
        }
    }

    /// `GetAnticipateTs` (Alg. 2 lines 10-12): now, plus the round trip the commit waits
    /// for — the coordinator's (our acknowledgement's way back and the commit's way here)
    /// or, if longer, that of the farthest region the CRT also waits on (a home region's
    /// manager would otherwise anticipate an intra-region round trip for a commit that
    /// needs a cross-region one) — plus the margin for the hops inside the region. Round
    /// trips are twice the 90th percentile of the forward delays this manager has seen
    /// from each region's coordinators (the kit's estimator, clock offsets included; the
    /// topology's delay before the first sample).
    fn anticipate(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        info: &TxnInfo,
        sent_ns: u64,
    ) -> Timestamp {
        let coord = info.coord;
        // §4.3's calibration across regions: pass the coordinator's clock plus the delay.
        let delay_ns = crate::kit::owd::topology_ns(&self.cluster, coord, self.me);
        let seen = Timestamp::with_frac(sent_ns + delay_ns, 0, 0);
        self.clock.calibrate(ctx.now_ns(), seen);
        let (now, _) = self.clock.create_ts(ctx.now_ns(), None);
        let home = self.representative(self.cluster.region_of(coord));
        for peer in [coord, home] {
            self.owd.record_arrival(peer, sent_ns, now.time_ns, WINDOW);
        }
        let mut forward_ns = self.owd.forward_ns(&self.cluster, coord, PERCENTILE);
        for shard in info.txn.shards() {
            let region = self.cluster.region_of(self.cluster.replicas(shard)[0]);
            if region != self.region {
                let rep = self.representative(region);
                forward_ns = forward_ns.max(self.owd.forward_ns(&self.cluster, rep, PERCENTILE));
            }
        }
        // Bounded: a burst of delayed samples (a partition) must not push CRTs seconds out.
        let ahead_ns = (2 * forward_ns + self.opts.margin_ns).min(2 * self.opts.retry_ns);
        Timestamp::with_frac(now.time_ns + ahead_ns, self.me.0, 0)
    }

    /// The node a region's delay samples are filed under: its first edge node.
    fn representative(&self, region: RegionId) -> NodeId {
        super::node::region_edges(&self.cluster, region)
            .first()
            .copied()
            .unwrap_or(self.me)
    }

    fn on_prep_remote(
        &mut self,
        ctx: &mut Ctx<'_, DastNode>,
        from: NodeId,
        info: TxnInfo,
        sent_ns: u64,
    ) {
        if from != info.coord {
            return;
        }
        let anticipated = self.anticipate(ctx, &info, sent_ns);
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
