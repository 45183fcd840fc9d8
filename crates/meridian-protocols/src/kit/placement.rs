//! Where things are on an edge deployment (DAST §3.1, SLOG on DAST §6's): the replicas of
//! a region, the region of a shard, and the replica a machine's client port hands its
//! requests to.

use meridian_core::{Cluster, NodeId, NodeRole, RegionId, ShardId};

/// The replica nodes (edge nodes) of `region`, in node order.
pub fn region_replicas(cluster: &Cluster, region: RegionId) -> Vec<NodeId> {
    cluster
        .nodes
        .iter()
        .filter(|n| n.region == region && matches!(n.role, NodeRole::Replica { .. }))
        .map(|n| n.id)
        .collect()
}

/// The region of `shard`'s first replica (its host region, when a shard lives in one).
pub fn shard_region(cluster: &Cluster, shard: ShardId) -> RegionId {
    cluster.region_of(cluster.replicas(shard)[0])
}

/// The replica a coordinator node (a client port) hands its requests to: the replica on
/// its machine, else one of its region's (spread by port index), else the cluster's first.
pub fn port_replica(cluster: &Cluster, port: NodeId) -> NodeId {
    let mate = cluster
        .machine_mates(port)
        .iter()
        .copied()
        .find(|&n| matches!(cluster.node(n).role, NodeRole::Replica { .. }));
    if let Some(replica) = mate {
        return replica;
    }
    let replicas = region_replicas(cluster, cluster.region_of(port));
    if replicas.is_empty() {
        return cluster.shards[0][0];
    }
    replicas[port.index() % replicas.len()]
}
