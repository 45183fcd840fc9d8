//! The replicated mode (`replicated=true`): each partition is a Raft group of its shard's
//! replicas, run by the kit ([`crate::kit::replicated`]): the unchanged [`Server`] on the
//! leader, its write-ahead records (§III-E: prepare, commit, abort records, clock leases,
//! checkpoints) proposed to the group, its sends held until what they depend on has
//! committed, a new leader rebuilding it from the committed records (`Server::restore`,
//! then `on_start`, which asks coordinators about prepared transactions), and `NotLeader`
//! hints from members that do not lead.
//!
//! What is Clock-SI's own is the release policy ([`SiRelease`]): a read reply waits only
//! for what it may have seen (the clock lease covering its snapshot, a local commit of its
//! key), so reads do not queue behind unrelated writes. Timestamps stay monotone across
//! leaders because clock leases are records too.

use super::server::Server;
use super::wire::{Msg, Record, Timer};
use crate::kit::replicated::{self, Inbound, MemberTimer, Partition, PartitionCx, Release};
use crate::raft_group::{RaftMsg, RaftRecord};
use meridian_core::txn::Key;
use meridian_core::{NodeId, TxnId};
use rustc_hash::FxHashMap;

/// One replica of a replicated Clock-SI partition.
pub type Member = replicated::Member<Server>;

/// How many reads in service a leader tracks (see [`SiRelease::request`]).
const MAX_READING: usize = 1 << 16;

/// What `Server::restore` needs besides the records: options, and Clock-SI (true) or
/// conventional SI (false).
pub type Setup = (super::options::Options, bool);

impl Partition for Server {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;
    type Setup = Setup;
    type Release = SiRelease;

    fn restore(id: NodeId, setup: &Setup, records: &[Record]) -> Server {
        Server::restore(id, setup.0.clone(), setup.1, records)
    }

    fn on_start(&mut self, cx: &mut PartitionCx<'_, Self>) {
        Server::on_start(self, cx);
    }

    fn on_message(&mut self, cx: &mut PartitionCx<'_, Self>, from: NodeId, msg: Msg) {
        Server::on_message(self, cx, from, msg);
    }

    fn on_timer(&mut self, cx: &mut PartitionCx<'_, Self>, timer: Timer) {
        Server::on_timer(self, cx, timer);
    }

    fn is_checkpoint(record: &Record) -> bool {
        matches!(record, Record::ServerCheckpoint(_))
    }

    fn release(&self) -> SiRelease {
        SiRelease {
            // Whatever the committed records put under the floor is durable already.
            lease_until_ns: self.floor_ns(),
            leases: Vec::new(),
            clock_si: self.clock_si(),
            local_commit_seq: FxHashMap::default(),
            reading: FxHashMap::default(),
        }
    }

    fn raft_msg(msg: RaftMsg) -> Msg {
        Msg::Raft(msg)
    }

    fn inbound(msg: Msg) -> Inbound<Msg> {
        match msg {
            Msg::Raft(m) => Inbound::Raft(m),
            msg => Inbound::Request {
                txn: msg.partition_request_txn(),
                msg,
            },
        }
    }

    fn not_leader(txn: TxnId, leader: Option<NodeId>) -> Msg {
        Msg::NotLeader { txn, leader }
    }

    fn raft_tick() -> Timer {
        Timer::RaftTick
    }

    fn led_timer(epoch: u64, timer: Timer) -> Timer {
        Timer::Led {
            epoch,
            timer: Box::new(timer),
        }
    }

    fn member_timer(timer: Timer) -> MemberTimer<Timer> {
        match timer {
            Timer::RaftTick => MemberTimer::RaftTick,
            Timer::Led { epoch, timer } => MemberTimer::Led {
                epoch,
                timer: *timer,
            },
            other => panic!("a replica fired {other:?}"),
        }
    }

    fn raft_record(record: RaftRecord) -> Record {
        Record::Raft(record)
    }

    fn as_raft_record(record: &Record) -> Option<&RaftRecord> {
        match record {
            Record::Raft(r) => Some(r),
            _ => None,
        }
    }
}

/// Clock-SI's release policy: what a leader's read replies wait for.
#[derive(Debug)]
pub struct SiRelease {
    /// A served snapshot must be covered by a committed clock lease, or a new leader could
    /// issue a timestamp below it: the committed lease, and the proposed ones (seq, until).
    lease_until_ns: u64,
    leases: Vec<(u64, u64)>,
    clock_si: bool,
    /// Per key, the latest proposal holding a local commit of it (Algorithm 2 lines 5–10:
    /// the partition decided alone, so the value may not be read before it is durable).
    local_commit_seq: FxHashMap<Key, u64>,
    /// The key and snapshot of each read being served, by (transaction, op).
    reading: FxHashMap<(TxnId, u64), (Key, u64)>,
}

impl SiRelease {
    /// The proposal whose lease covers `snapshot_ns` (0: a committed one does, or, in
    /// conventional SI, the oracle's timestamps need none).
    fn lease_for(&self, snapshot_ns: u64, proposed: u64) -> u64 {
        if !self.clock_si || snapshot_ns <= self.lease_until_ns {
            return 0;
        }
        self.leases
            .iter()
            .find(|(_, until)| *until >= snapshot_ns)
            .map_or(proposed + 1, |(seq, _)| *seq)
    }
}

impl Release<Server> for SiRelease {
    /// Notes the key and snapshot of a read. Reads that are never answered (dropped while
    /// parked) leave entries: they are bounded, and a reply whose entry is gone waits for
    /// every earlier record, which is safe.
    fn request(&mut self, msg: &Msg) {
        if let Msg::Read {
            txn,
            op,
            key,
            snapshot,
        } = msg
        {
            if self.reading.len() >= MAX_READING {
                self.reading.clear();
            }
            self.reading
                .insert((*txn, *op), (key.clone(), snapshot.time_ns));
        }
    }

    fn note(&mut self, seq: u64, record: &Record) {
        match record {
            Record::ClockLease { until_ns } => self.leases.push((seq, *until_ns)),
            Record::ServerCheckpoint(snap) => self.leases.push((seq, snap.clock_floor_ns)),
            Record::Committed {
                writes: Some(writes),
                ..
            } => {
                for (key, _) in writes {
                    self.local_commit_seq.insert(key.clone(), seq);
                }
            }
            _ => {}
        }
    }

    /// A read reply waits only for what it may have seen: the lease and a local commit of
    /// its key. A 2PC commit need not be durable before readers see it: its decision is the
    /// coordinator's, and a new leader recovers the prepared transaction and learns the
    /// same commit timestamp. A query is only a question. Everything else waits for every
    /// earlier record.
    fn wait_for(&mut self, msg: &Msg, proposed: u64, handler_records: bool) -> u64 {
        match msg {
            Msg::ReadReply { txn, op, .. } => match self.reading.remove(&(*txn, *op)) {
                Some((key, snapshot_ns)) => {
                    let local = self.local_commit_seq.get(&key).copied().unwrap_or(0);
                    local.max(self.lease_for(snapshot_ns, proposed))
                }
                None => proposed + u64::from(handler_records),
            },
            Msg::Query { .. } => 0,
            _ => proposed + u64::from(handler_records),
        }
    }

    fn committed(&mut self, committed: u64) {
        self.local_commit_seq.retain(|_, s| *s > committed);
        for &(_, until) in self.leases.iter().filter(|(s, _)| *s <= committed) {
            self.lease_until_ns = self.lease_until_ns.max(until);
        }
        self.leases.retain(|(s, _)| *s > committed);
    }
}
