//! What a protocol promises to survive: which machines may crash, and how many of each
//! group at once. `--faults random` draws only crashes the model admits, so a swarm tests
//! the protocol inside its promise and a failure is a bug, not an over-aggressive nemesis.
//!
//! The default ([`FaultModel::minorities`]) is what every protocol here promises today: any
//! machine may crash — replicas, coordinators and services alike — but no more than a
//! minority of a shard's voters (at least one, so single-copy shards are crashed too and
//! must recover from their durable records) and of each service's members at a time.
//! A machine that holds several roles counts against every group it belongs to.

use crate::topology::{Cluster, MachineId, NodeRole};

/// Machines that fail together as far as a protocol's promise is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureGroup {
    /// For messages: `shard2`, `service vm`.
    pub name: String,
    pub machines: Vec<MachineId>,
    /// How many of `machines` may be down at once.
    pub max_down: usize,
}

/// A protocol's fault model (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultModel {
    /// Machines the nemesis may crash, in id order.
    pub crashable: Vec<MachineId>,
    pub groups: Vec<FailureGroup>,
}

impl FaultModel {
    /// Any machine may crash; at most a minority (at least one) of each shard's voters and
    /// of each service's members at once.
    pub fn minorities(cluster: &Cluster) -> FaultModel {
        let mut groups = Vec::new();
        for shard in 0..cluster.shard_count() {
            let shard = crate::ShardId(shard);
            let machines = machines_of(cluster, cluster.replicas(shard).iter().copied());
            let max_down = cluster.f(shard).max(1);
            groups.push(FailureGroup {
                name: format!("shard{}", shard.0),
                machines,
                max_down,
            });
        }
        let mut names: Vec<&str> = cluster
            .nodes
            .iter()
            .filter_map(|n| match &n.role {
                NodeRole::Service { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        names.dedup();
        for name in names {
            let machines = machines_of(cluster, cluster.services(name).into_iter());
            let max_down = ((machines.len().max(1) - 1) / 2).max(1);
            groups.push(FailureGroup {
                name: format!("service {name}"),
                machines,
                max_down,
            });
        }
        FaultModel {
            crashable: cluster.machines.iter().map(|m| m.id).collect(),
            groups,
        }
    }

    /// Whether `machine` may crash while `down` are down (`down` excludes `machine`).
    pub fn admits_crash(&self, machine: MachineId, down: &[MachineId]) -> bool {
        self.crashable.contains(&machine)
            && self.groups.iter().all(|g| {
                !g.machines.contains(&machine)
                    || down.iter().filter(|m| g.machines.contains(m)).count() < g.max_down
            })
    }

    /// Removes `machines` from what may crash (a protocol whose service has no recovery
    /// yet, say), keeping the groups.
    pub fn spare(mut self, machines: &[MachineId]) -> FaultModel {
        self.crashable.retain(|m| !machines.contains(m));
        self
    }
}

fn machines_of(cluster: &Cluster, nodes: impl Iterator<Item = crate::NodeId>) -> Vec<MachineId> {
    let mut machines: Vec<MachineId> = nodes.map(|n| cluster.machine_of(n)).collect();
    machines.sort();
    machines.dedup();
    machines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RegionId, Topology};

    #[test]
    fn minorities_bound_each_shard_and_service_and_count_shared_machines_twice() {
        let topology = Topology::load("gcp-tiga").unwrap();
        let sc = topology.region_id("SC").unwrap();
        let services = vec![("vm".to_string(), sc); 3];
        let cluster = Cluster::new(topology, &services).unwrap();
        let model = FaultModel::minorities(&cluster);
        assert_eq!(model.crashable.len(), cluster.machines.len());
        let vm = model
            .groups
            .iter()
            .find(|g| g.name == "service vm")
            .unwrap();
        assert_eq!((vm.machines.len(), vm.max_down), (3, 1));
        let s0 = cluster.machine_of(cluster.replicas(crate::ShardId(0))[0]);
        let s0b = cluster.machine_of(cluster.replicas(crate::ShardId(0))[1]);
        let s1 = cluster.machine_of(cluster.replicas(crate::ShardId(1))[0]);
        assert!(model.admits_crash(s0, &[s1]));
        assert!(
            !model.admits_crash(s0, &[s0b]),
            "two of shard 0's three at once"
        );
        assert!(!model.admits_crash(vm.machines[0], &[vm.machines[1]]));
        assert!(!model.clone().spare(&[s0]).admits_crash(s0, &[]));
        let _ = RegionId(0);
    }
}
