//! # `promotion`: a backup becomes primary by a small consensus of the coordinators
//!
//! Aurogon §4.5's "lightweight consensus", shared by `aurogon` and the primary-backup kit
//! ([`crate::kit::primary_backup`]): a backup that stops hearing its primary asks every
//! coordinator for the next epoch of its shard ([`Candidacy`]); a coordinator grants an
//! epoch of a shard to the first candidate that asks for it, logging the grant before it
//! answers ([`Grants`]); a majority of grants makes the candidate primary of that epoch.
//! Two candidates can never both win one epoch (two majorities of coordinators meet), and
//! replicas refuse what an older epoch's primary sends, so a deposed primary is fenced.

use crate::kit::quorum::{majority, Votes};
use meridian_core::fault_model::{FailureGroup, FaultModel};
use meridian_core::{Cluster, NodeId, ShardId};

/// The faults promotion survives: any machine may crash — primaries, backups and
/// coordinators — with at most one copy of a shard down at once (`minorities` gives a
/// two-copy shard one) and a minority of coordinators (promotion needs a majority).
pub fn fault_model(cluster: &Cluster) -> FaultModel {
    let mut model = FaultModel::minorities(cluster);
    let mut machines: Vec<_> = cluster
        .coordinators
        .iter()
        .map(|&c| cluster.machine_of(c))
        .collect();
    machines.sort();
    machines.dedup();
    let max_down = (machines.len().max(1) - 1) / 2;
    model.groups.push(FailureGroup {
        name: "coordinators".to_string(),
        machines,
        max_down,
    });
    model
}

/// A coordinator's grants: each shard's highest granted epoch and its candidate.
#[derive(Clone, Debug)]
pub struct Grants {
    grants: Vec<(u64, Option<NodeId>)>,
}

impl Grants {
    /// No epoch of any of `shards` granted yet (epoch 0 is the topology's placement).
    pub fn new(shards: usize) -> Grants {
        Grants {
            grants: vec![(0, None); shards],
        }
    }

    /// A logged grant, replayed at restart.
    pub fn replay(&mut self, shard: ShardId, epoch: u64, candidate: NodeId) {
        if let Some(g) = self.grants.get_mut(shard.index()) {
            *g = (epoch, Some(candidate));
        }
    }

    /// `candidate` asks for `epoch` of `shard`: `Some(granted)` (`None`: no such shard).
    /// A new grant is recorded here and must be logged before the answer goes out
    /// ([`Grant::newly`]); the same candidate asking again is granted again.
    pub fn request(&mut self, shard: ShardId, epoch: u64, candidate: NodeId) -> Option<Grant> {
        let &(granted_epoch, holder) = self.grants.get(shard.index())?;
        let granted =
            epoch > granted_epoch || (epoch == granted_epoch && holder == Some(candidate));
        let newly = granted && epoch > granted_epoch;
        if newly {
            self.grants[shard.index()] = (epoch, Some(candidate));
        }
        Some(Grant { granted, newly })
    }

    /// Every grant made, as `(shard, epoch, candidate)` (what a checkpoint must keep).
    pub fn granted(&self) -> impl Iterator<Item = (ShardId, u64, NodeId)> + '_ {
        self.grants
            .iter()
            .enumerate()
            .filter_map(|(s, &(epoch, c))| Some((ShardId(s as u32), epoch, c?)))
    }
}

/// A coordinator's answer to a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub granted: bool,
    /// A new grant: log it before answering.
    pub newly: bool,
}

/// A campaign for an epoch.
#[derive(Clone, Debug)]
struct Campaign {
    epoch: u64,
    votes: Votes<()>,
    sent_ns: u64,
}

/// A backup's candidacy: at most one campaign at a time, re-asked when it goes stale.
#[derive(Clone, Debug, Default)]
pub struct Candidacy {
    campaign: Option<Campaign>,
}

/// What a candidate asks now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub epoch: u64,
    /// The coordinators that have not granted it yet.
    pub to: Vec<NodeId>,
    /// A new campaign (not a retry of the last one).
    pub fresh: bool,
}

impl Candidacy {
    /// Campaigns (again, if the last ask is `retry_ns` old) for the epoch after
    /// `highest_epoch`; `None` while the last ask is recent.
    pub fn ask(
        &mut self,
        now_ns: u64,
        retry_ns: u64,
        highest_epoch: u64,
        coordinators: &[NodeId],
    ) -> Option<Ask> {
        let stale = self
            .campaign
            .as_ref()
            .is_none_or(|c| now_ns.saturating_sub(c.sent_ns) >= retry_ns);
        if !stale {
            return None;
        }
        let (epoch, fresh) = match &self.campaign {
            Some(c) => (c.epoch, false),
            None => (highest_epoch + 1, true),
        };
        let votes = match self.campaign.take() {
            Some(c) if c.epoch == epoch => c.votes,
            _ => Votes::new(coordinators.iter().copied(), majority(coordinators.len())),
        };
        let to = votes.missing().collect();
        self.campaign = Some(Campaign {
            epoch,
            votes,
            sent_ns: now_ns,
        });
        Some(Ask { epoch, to, fresh })
    }

    /// A coordinator's answer for `epoch`: `Some(true)` once a majority granted it,
    /// `Some(false)` if it was refused (the campaign ends; the next asks a later epoch),
    /// `None` otherwise (not this campaign's, or still short of a majority).
    pub fn on_grant(&mut self, from: NodeId, epoch: u64, granted: bool) -> Option<bool> {
        let c = self.campaign.as_mut().filter(|c| c.epoch == epoch)?;
        if !granted {
            self.campaign = None;
            return Some(false);
        }
        c.votes.record(from, ());
        c.votes.complete().then_some(true)
    }

    /// Stops campaigning (a primary was heard).
    pub fn stop(&mut self) {
        self.campaign = None;
    }
}
