//! What Aurogon's nodes say to each other (messages), to themselves (timers) and to their
//! durable logs (records).

use super::causes::Cause;
use super::mvcc::{Refusal, Version};
use meridian_core::node::Context;
use meridian_core::txn::{Key, Value};
use meridian_core::{NodeId, ShardId, ShardList, Timestamp, TxnId};
use serde::{Deserialize, Serialize};

/// The context every handler of this protocol receives.
pub(crate) type Cx<'a> = Context<'a, Msg, Timer, Record>;

/// A shard's configuration: which replica is primary in `epoch` (every other replica of
/// the shard is a backup). Epoch 0 is the topology's initial leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub epoch: u64,
    pub primary: NodeId,
}

/// What a replica knows of an undecided transaction, for recovery (§4.5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    Committed(Vec<(Key, Value)>),
    Aborted,
    /// This replica is a backup that holds the update (its writes on this shard).
    Held(Vec<(Key, Value)>),
    /// Not held here; from now on this replica refuses to hold it.
    NotHeld,
}

/// Why a request failed, as the coordinator reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// Refused, and for a late write, why it came late (instrumentation, [`Cause`]).
    Refused(Refusal, Option<Cause>),
    /// The transaction was already decided (aborted) at the replica.
    Finished,
}

/// A message of `aurogon`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → primary: install `installs` (pending, values to come), then read
    /// `reads` at `ts` (Algorithm 1 `Tx_read` with pre-attached writes, `Tx_write`).
    /// `config` is the coordinator's belief (a replica learns newer epochs from it).
    Execute {
        txn: TxnId,
        ts: Timestamp,
        round: u8,
        config: Config,
        reads: Vec<Key>,
        installs: Vec<Key>,
        write_shards: ShardList,
        /// Instrumentation: the true time the transaction took `ts`, where the driver
        /// knows it (the simulator), for the abort-cause counters only.
        issued_true_ns: Option<u64>,
    },
    /// Primary → coordinator: the values read, in `reads` order, by the primary of `epoch`.
    Executed {
        txn: TxnId,
        round: u8,
        shard: ShardId,
        epoch: u64,
        values: Vec<Option<Value>>,
        /// The largest timestamp recorded on the records read (wts or rts), in ns: what
        /// DST's chasing clocks catch up to (`clock=dst`).
        seen_ns: u64,
    },
    Failed {
        txn: TxnId,
        round: u8,
        failure: Failure,
    },
    /// A replica that is not its shard's primary names the configuration it knows.
    Redirect {
        shard: ShardId,
        config: Config,
    },
    /// Coordinator → backup: hold `writes` of `txn` on `shard`, installed by the primary
    /// of `epoch` (§4.5: replicate before commit).
    Replicate {
        txn: TxnId,
        ts: Timestamp,
        shard: ShardId,
        epoch: u64,
        writes: Vec<(Key, Value)>,
        write_shards: ShardList,
    },
    ReplicateAck {
        txn: TxnId,
        shard: ShardId,
        ok: bool,
    },
    /// The decision, to every replica of a write shard. `writes`: this shard's values.
    Commit {
        txn: TxnId,
        ts: Timestamp,
        shard: ShardId,
        writes: Vec<(Key, Value)>,
    },
    Abort {
        txn: TxnId,
    },
    CommitAck {
        txn: TxnId,
        shard: ShardId,
    },
    /// Recovery: a replica with an undecided transaction asks the replicas of its write
    /// shards what they hold.
    Inquire {
        txn: TxnId,
        shard: ShardId,
    },
    Answer {
        txn: TxnId,
        shard: ShardId,
        answer: Answer,
    },
    /// Primary → backups: heartbeat and read lease — the primary serves reads below
    /// `until_ns` only once every backup has acknowledged it.
    Lease {
        config: Config,
        until_ns: u64,
    },
    LeaseAck {
        config: Config,
        until_ns: u64,
        ok: bool,
    },
    /// Backup → coordinators: promote me to primary of `shard` in `epoch` (§4.5's small
    /// consensus: a majority of coordinators grants an epoch to one candidate).
    RequestGrant {
        shard: ShardId,
        epoch: u64,
    },
    Grant {
        shard: ShardId,
        epoch: u64,
        granted: bool,
    },
    /// The promoted primary announces its configuration.
    NewConfig {
        shard: ShardId,
        config: Config,
    },
}

impl Msg {
    /// A short name of the message kind, for traces and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Execute { .. } => "execute",
            Msg::Executed { .. } => "executed",
            Msg::Failed { .. } => "failed",
            Msg::Redirect { .. } => "redirect",
            Msg::Replicate { .. } => "replicate",
            Msg::ReplicateAck { .. } => "replicate-ack",
            Msg::Commit { .. } => "commit",
            Msg::Abort { .. } => "abort",
            Msg::CommitAck { .. } => "commit-ack",
            Msg::Inquire { .. } => "inquire",
            Msg::Answer { .. } => "answer",
            Msg::Lease { .. } => "lease",
            Msg::LeaseAck { .. } => "lease-ack",
            Msg::RequestGrant { .. } => "request-grant",
            Msg::Grant { .. } => "grant",
            Msg::NewConfig { .. } => "new-config",
        }
    }
}

/// A timer of `aurogon`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Coordinator: retransmit or time out a transaction.
    Txn(TxnId),
    /// Replica: heartbeat/lease, failure detection, recovery scan.
    Tick,
    /// Replica: a deferred read is due (§4.2).
    Wake(u64),
}

/// An undecided transaction as a replica logs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Installed {
    pub txn: TxnId,
    pub ts: Timestamp,
    /// The keys and, for a backup's hold, the values.
    pub writes: Vec<(Key, Option<Value>)>,
    pub held: bool,
    pub write_shards: ShardList,
}

/// A shard's writes of one transaction.
pub type Writes = Vec<(Key, Value)>;

/// A replica's whole durable state at one point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub config: Config,
    pub lease_ns: u64,
    pub records: Vec<(Key, Vec<Version>)>,
    pub undecided: Vec<Installed>,
    /// Decided transactions, oldest first, with this shard's values when committed.
    pub finished: Vec<(TxnId, Option<Writes>)>,
    pub refused: Vec<TxnId>,
}

/// A durable record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// Replica: pending versions installed (primary) or held (backup).
    Installed(Installed),
    /// Replica: the decision applied (with this shard's values when committed).
    Decided {
        txn: TxnId,
        ts: Timestamp,
        commit: bool,
        writes: Vec<(Key, Value)>,
    },
    /// Replica: a configuration adopted.
    Config(Config),
    /// Replica: a promise never to hold this transaction (an answer NotHeld or a refused
    /// replication).
    Refused(TxnId),
    /// Replica: the largest read lease requested (primary) or acknowledged (backup).
    Lease(u64),
    Checkpoint(Box<Snapshot>),
    /// Coordinator: a new incarnation started.
    Started {
        incarnation: u32,
    },
    /// Coordinator: an epoch of a shard granted to a candidate.
    Granted {
        shard: ShardId,
        epoch: u64,
        candidate: NodeId,
    },
}
