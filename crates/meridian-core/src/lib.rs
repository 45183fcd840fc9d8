//! `meridian-core`: the vocabulary every other Meridian crate speaks.
//!
//! * [`ids`] — regions, shards, replicas, nodes, transactions, client requests.
//! * [`time`] — local clock readings and protocol [`Timestamp`]s.
//! * [`txn`] — the transaction model of DESIGN §6: one-shot pieces (get/put/add/append and
//!   registered stored procedures, with declared value dependencies), interactive steps,
//!   and outcomes.
//! * [`node`] — the sans-IO contract: a [`Node`] reacts to events through a [`Context`]
//!   and emits [`Effect`]s; a [`Protocol`] builds the nodes of a cluster. The simulator and
//!   the runtime are two drivers of the same contract.
//! * [`host`] — the driver core they share: a [`NodeHost`] runs one node's events, keeps
//!   its timers, incarnation and batch, and turns effects into the [`Action`]s a driver
//!   carries out.
//! * [`topology`] — the topology TOML of DESIGN §5 and the [`Cluster`] layout derived from it.
//! * [`partition`] — which shard owns a key.
//!
//! Lower crates never import higher ones: `core` depends on nothing of Meridian's.

pub mod fault_model;
pub mod host;
pub mod ids;
pub mod node;
pub mod partition;
pub mod small_bytes;
pub mod time;
pub mod topology;
pub mod txn;
pub mod value;

pub use fault_model::{FailureGroup, FaultModel};
pub use host::{Action, Handled, MemoryLog, NodeHost};
pub use ids::{ClientId, NodeId, RegionId, ReplicaId, RequestId, ShardId, ShardList, TxnId};
pub use node::{Context, Effect, Node, NodeRng, Protocol, ProtocolConfig, TimerId};
pub use partition::Partitioner;
pub use small_bytes::SmallBytes;
pub use time::Timestamp;
pub use topology::{
    ClockKind, ClockProfile, Cluster, Machine, MachineId, NodeRole, ReplicaKind, Topology,
    TopologyError,
};
pub use txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Key, KeyList, Op, Operand, Outcome,
    Piece, PieceBody, PieceResult, Procedures, Step, Txn, Value,
};
