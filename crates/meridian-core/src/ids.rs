//! Identifiers. All are small `Copy` newtypes so they cannot be mixed up.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl $name {
            /// The id as an index into a dense table.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A region (a datacenter or cloud region), indexed in topology order.
    RegionId(u16), "region"
);
id_type!(
    /// A shard (partition of the key space), `0..shards`.
    ShardId(u32), "shard"
);
/// A transaction's shards: inline up to four (a cross-shard transaction rarely spans
/// more), so a message carrying them clones without allocating.
pub type ShardList = smallvec::SmallVec<[ShardId; 4]>;

id_type!(
    /// A replica's position inside its shard, `0..replicas` (Tiga's *replica-id*).
    ReplicaId(u32), "replica"
);
id_type!(
    /// Any node of a cluster: a replica, a coordinator or a protocol service. Dense, `0..nodes`.
    NodeId(u32), "n"
);
id_type!(
    /// A client process (a history's `process`).
    ClientId(u32), "client"
);
id_type!(
    /// A client request, unique per run; the driver matches responses to requests with it.
    RequestId(u64), "req"
);

/// A transaction identifier: the coordinator's node id plus its sequence number
/// (Tiga §3.7, footnote 1). Unique for the whole run, including across coordinator restarts,
/// because a restarted coordinator continues from a fresh incarnation's sequence space
/// (see [`TxnId::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId {
    pub coordinator: NodeId,
    pub seq: u64,
}

impl TxnId {
    /// Bits of `seq` reserved for the coordinator's incarnation (restart count).
    pub const INCARNATION_SHIFT: u32 = 40;

    /// Builds a transaction id from an incarnation and a per-incarnation counter.
    pub fn new(coordinator: NodeId, incarnation: u32, counter: u64) -> TxnId {
        assert!(
            counter < (1 << Self::INCARNATION_SHIFT),
            "txn counter overflow"
        );
        let seq = (u64::from(incarnation) << Self::INCARNATION_SHIFT) | counter;
        TxnId { coordinator, seq }
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}.{}", self.coordinator.0, self.seq)
    }
}
