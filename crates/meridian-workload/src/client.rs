//! Who asks for a transaction, and what kind of transaction it is.
//!
//! * [`ClientInfo`] — a client's place: its id, the coordinator it submits to and that
//!   coordinator's region. Both drivers (the simulator and the runtime) build their clients
//!   with [`place_clients`] and hand the description to [`Workload::next`](crate::Workload),
//!   so a workload can plan region-local transactions (DAST's IRTs) or cross-region ones
//!   (CRTs) for the client in front of it.
//! * [`Planned`] — a plan with its class labels ([`Classes`]): `read-only` or
//!   `read-write` always, plus any labels of the workload's own (TPC-C's transaction types,
//!   IRT/CRT). The set is open: reports break latency down by whatever labels appear.

use crate::TxnPlan;
use meridian_core::{ClientId, Cluster, NodeId, RegionId};
use smallvec::SmallVec;
use std::borrow::Cow;

/// One client of a run: who it is and where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    /// The client's id; histories use it as the `process`.
    pub id: ClientId,
    /// The coordinator every transaction of the client goes to.
    pub coordinator: NodeId,
    /// The coordinator's region, which is the client's.
    pub region: RegionId,
}

/// The clients of a run: `per_coordinator` at every coordinator, dealt round-robin — client
/// `i` submits to `cluster.coordinators[i % n]`. Round-robin rather than contiguous blocks
/// so that the first `n` clients cover every coordinator (a run with few clients still
/// loads every region) and a client's coordinator follows from its id alone. The simulator
/// and the runtime both place clients here, so a history's `process` means the same
/// client, at the same coordinator, under either driver.
pub fn place_clients(cluster: &Cluster, per_coordinator: u32) -> Vec<ClientInfo> {
    let coordinators = &cluster.coordinators;
    let count = coordinators.len() * per_coordinator as usize;
    (0..count)
        .map(|i| {
            let coordinator = coordinators[i % coordinators.len()];
            ClientInfo {
                id: ClientId(i as u32),
                coordinator,
                region: cluster.region_of(coordinator),
            }
        })
        .collect()
}

/// The class of a transaction whose every shard is led from the client's region (DAST's
/// intra-region transaction).
pub const IRT: &str = "irt";
/// The class of a transaction that touches a shard led from another region (DAST's
/// cross-region transaction).
pub const CRT: &str = "crt";

/// Where each shard is led from, so a workload can tell a client's region-local
/// transactions (IRT) from its cross-region ones (CRT). By the topology's initial leaders:
/// a leader that moves (a view change) does not relabel the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locality {
    leader_region: Vec<RegionId>,
}

impl Locality {
    pub fn new(cluster: &Cluster) -> Locality {
        Locality {
            leader_region: (0..cluster.shard_count())
                .map(|s| cluster.region_of(cluster.initial_leader(meridian_core::ShardId(s))))
                .collect(),
        }
    }

    /// The region `shard` is led from (`None` for a shard the cluster does not have).
    pub fn region(&self, shard: meridian_core::ShardId) -> Option<RegionId> {
        self.leader_region.get(shard.index()).copied()
    }

    /// [`IRT`] if every one of `shards` is led from `client`'s region, else [`CRT`].
    pub fn class(
        &self,
        client: &ClientInfo,
        shards: impl IntoIterator<Item = meridian_core::ShardId>,
    ) -> &'static str {
        let local = shards
            .into_iter()
            .all(|s| self.leader_region.get(s.index()) == Some(&client.region));
        if local {
            IRT
        } else {
            CRT
        }
    }
}

/// A class label: static for the usual ones, owned for labels built at run time.
pub type Class = Cow<'static, str>;

/// The class of a transaction that writes nothing.
pub const READ_ONLY: &str = "read-only";
/// The class of a transaction that may write.
pub const READ_WRITE: &str = "read-write";

/// The class labels of one transaction, in the order they were given. Inline storage: most
/// transactions carry two or three labels, and the simulator plans millions of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classes(SmallVec<[Class; 3]>);

impl Classes {
    /// Adds `label` unless it is already there.
    pub fn add(&mut self, label: impl Into<Class>) {
        let label = label.into();
        if !self.0.contains(&label) {
            self.0.push(label);
        }
    }

    /// The labels, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|c| c.as_ref())
    }

    /// Removes `label`; whether it was there.
    pub fn remove(&mut self, label: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|c| c != label);
        self.0.len() != before
    }

    /// Whether `label` is one of them.
    pub fn contains(&self, label: &str) -> bool {
        self.iter().any(|c| c == label)
    }
}

/// A transaction as a workload plans it: the plan and its classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub plan: TxnPlan,
    pub classes: Classes,
}

impl Planned {
    /// The plan with one more class label (a workload's own: `new-order`, `crt`, …).
    pub fn class(mut self, label: impl Into<Class>) -> Planned {
        self.classes.add(label);
        self
    }
}

/// A plan labelled `read-only` or `read-write` by what it does.
impl From<TxnPlan> for Planned {
    fn from(plan: TxnPlan) -> Planned {
        let mut classes = Classes::default();
        classes.add(if plan.is_read_only() {
            READ_ONLY
        } else {
            READ_WRITE
        });
        Planned { plan, classes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cluster;
    use crate::InteractiveOp;
    use meridian_core::txn::{Op, Txn};

    #[test]
    fn clients_are_dealt_round_robin_with_their_coordinators_region() {
        let c = cluster(2);
        let clients = place_clients(&c, 3);
        assert_eq!(clients.len(), 3 * c.coordinators.len());
        for (i, client) in clients.iter().enumerate() {
            assert_eq!(client.id, ClientId(i as u32));
            assert_eq!(client.coordinator, c.coordinators[i % c.coordinators.len()]);
            assert_eq!(client.region, c.region_of(client.coordinator));
        }
    }

    #[test]
    fn a_transaction_is_region_local_when_every_shard_is_led_from_the_clients_region() {
        let c = cluster(2);
        let locality = Locality::new(&c);
        let at = |region: u16| ClientInfo {
            id: ClientId(0),
            coordinator: c.coordinators[0],
            region: RegionId(region),
        };
        // The test cluster's leaders are all in region A (0).
        let shards = [meridian_core::ShardId(0), meridian_core::ShardId(1)];
        assert_eq!(locality.class(&at(0), shards), IRT);
        assert_eq!(locality.class(&at(1), shards), CRT);
        assert_eq!(locality.class(&at(1), []), IRT, "nothing remote");
    }

    #[test]
    fn plans_are_classed_by_what_they_do_plus_the_workloads_labels() {
        let read = Txn {
            pieces: vec![meridian_core::txn::Piece::ops(
                meridian_core::ShardId(0),
                vec![Op::Get(b"k".to_vec().into())],
            )],
        };
        let planned = Planned::from(TxnPlan::OneShot(read)).class("audit");
        assert_eq!(
            planned.classes.iter().collect::<Vec<_>>(),
            [READ_ONLY, "audit"]
        );
        let write = TxnPlan::Interactive(vec![
            InteractiveOp::Get(b"a".to_vec().into()),
            InteractiveOp::Add(b"a".to_vec().into(), 1),
        ]);
        let planned = Planned::from(write).class("audit").class("audit");
        assert!(planned.classes.contains(READ_WRITE));
        assert_eq!(planned.classes.iter().count(), 2, "labels are a set");
    }
}
