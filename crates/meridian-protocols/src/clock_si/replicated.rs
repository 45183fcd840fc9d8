//! The replicated mode (`replicated=true`): each partition is a Raft group of its shard's
//! replicas (`crate::raft_group`), so a partition survives the loss of a minority of them
//! (a region, when replicas sit in different regions).
//!
//! The partition's state machine is unchanged — the same [`Server`] — and runs on the Raft
//! leader only. What the server would append to its write-ahead log (§III-E: prepare,
//! commit, abort records, clock leases, checkpoints) is proposed to the group instead, one
//! command per handler; everything the server sends after a record is held back until that
//! record has committed in the group. A read reply waits only for what it may have seen
//! (the clock lease covering its snapshot, a local commit of its key): no one ever sees
//! state a failover could lose, and reads do not queue behind unrelated writes. Followers keep the committed records; a member that becomes
//! leader proposes a barrier, and once the barrier is applied (so every entry of earlier
//! terms is too) it rebuilds the server from those records exactly as a restarted
//! partition does (`Server::restore`, then `on_start`, which asks coordinators about
//! prepared transactions). Timestamps stay monotone across leaders because clock leases
//! are records too.
//!
//! Members that do not lead answer partition requests with `NotLeader`, naming the leader
//! they know; coordinators route by shard and follow the hint.

use super::options::Options;
use super::server::Server;
use super::wire::{Cx, Msg, Record, Timer};
use crate::raft_group::{LogSize, RaftGroup, RaftTiming};
use meridian_core::node::Effect;
use meridian_core::txn::Key;
use meridian_core::{Cluster, NodeId, ShardId, TxnId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// How many reads in service a leader tracks (see [`Member::serve`]).
const MAX_READING: usize = 1 << 16;

/// A command of the partition's Raft log.
#[derive(Debug, Serialize, Deserialize)]
enum Command {
    /// A new leader's first command: once applied, it has every earlier entry.
    Barrier { leader: NodeId, term: u64 },
    /// The write-ahead records of one server handler at `leader`, its `seq`-th proposal.
    Records {
        leader: NodeId,
        term: u64,
        seq: u64,
        records: Vec<Record>,
    },
}

fn encode(command: &Command) -> Vec<u8> {
    serde_json::to_vec(command).expect("a command always encodes")
}

/// The server while this member leads, and what it has not yet been allowed to say.
#[derive(Debug)]
struct Led {
    term: u64,
    /// Distinguishes this leadership's timers from an earlier one's.
    epoch: u64,
    /// `None` until the barrier is applied.
    server: Option<Server>,
    /// Proposals made / known committed, in this term.
    proposed: u64,
    committed: u64,
    /// Sends waiting for proposal `seq` to commit.
    outbox: Vec<(u64, NodeId, Msg)>,
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

impl Led {
    /// Which proposal a message must wait for, given the records of the handler so far
    /// (to go into proposal `proposed + 1`). A read reply waits only for what it may have
    /// seen: the lease and a local commit of its key. A 2PC commit need not be durable
    /// before readers see it: its decision is the coordinator's, and a new leader recovers
    /// the prepared transaction and learns the same commit timestamp. A query is only a
    /// question. Everything else waits for every earlier record.
    fn wait_for(&mut self, msg: &Msg, handler_records: bool) -> u64 {
        match msg {
            Msg::ReadReply { txn, op, .. } => match self.reading.remove(&(*txn, *op)) {
                Some((key, snapshot_ns)) => {
                    let local = self.local_commit_seq.get(&key).copied().unwrap_or(0);
                    local.max(self.lease_for(snapshot_ns))
                }
                None => self.proposed + u64::from(handler_records),
            },
            Msg::Query { .. } => 0,
            _ => self.proposed + u64::from(handler_records),
        }
    }

    /// The proposal whose lease covers `snapshot_ns` (0: a committed one does, or, in
    /// conventional SI, the oracle's timestamps need none).
    fn lease_for(&self, snapshot_ns: u64) -> u64 {
        if !self.clock_si || snapshot_ns <= self.lease_until_ns {
            return 0;
        }
        self.leases
            .iter()
            .find(|(_, until)| *until >= snapshot_ns)
            .map_or(self.proposed + 1, |(seq, _)| *seq)
    }

    /// Notes what a record of the coming proposal covers.
    fn note(&mut self, record: &Record) {
        let seq = self.proposed + 1;
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

    /// Proposal `seq` committed: what waited for it goes out.
    fn release(&mut self, ctx: &mut Cx<'_>, seq: u64) {
        self.committed = self.committed.max(seq);
        let committed = self.committed;
        self.local_commit_seq.retain(|_, s| *s > committed);
        for &(_, until) in self.leases.iter().filter(|(s, _)| *s <= committed) {
            self.lease_until_ns = self.lease_until_ns.max(until);
        }
        self.leases.retain(|(s, _)| *s > committed);
        let (go, stay) = std::mem::take(&mut self.outbox)
            .into_iter()
            .partition(|(after, _, _)| *after <= committed);
        self.outbox = stay;
        for (_, to, msg) in go {
            ctx.send(to, msg);
        }
    }
}

/// One replica of a replicated partition.
#[derive(Debug)]
pub struct Member {
    id: NodeId,
    opts: Options,
    clock_si: bool,
    raft: RaftGroup,
    tick_ns: u64,
    /// The committed server records from the last checkpoint on: what a new leader restores,
    /// and the state machine a Raft snapshot holds.
    log: Vec<Record>,
    /// The longest Raft log this incarnation held (reported through the counters).
    peak: LogSize,
    led: Option<Led>,
    epochs: u64,
}

/// The Raft timer period of a group: a quarter of the largest round trip between its
/// members, at least 2 ms.
fn tick_ns(cluster: &Cluster, members: &[NodeId]) -> u64 {
    let max_rtt_ms = members
        .iter()
        .flat_map(|&a| members.iter().map(move |&b| (a, b)))
        .map(|(a, b)| cluster.rtt_ms(a, b))
        .fold(0.0, f64::max);
    crate::kit::options::ms_to_ns((max_rtt_ms / 4.0).max(2.0))
}

impl Member {
    /// Builds replica `id` of `shard` from its records (its Raft log).
    pub(crate) fn restore(
        id: NodeId,
        shard: ShardId,
        cluster: &Cluster,
        opts: Options,
        clock_si: bool,
        records: &[Record],
    ) -> Member {
        let members = cluster.replicas(shard).to_vec();
        // The topology's leader campaigns first, so the group starts where it was placed;
        // the others wait at least twice as long, each a different time (no split votes).
        // Fixed per replica rather than drawn: `build` has no RNG, and the spread is enough.
        let position = members.iter().position(|&m| m == id).unwrap_or(0);
        let election_ticks = if cluster.initial_leader(shard) == id {
            8
        } else {
            16 + 4 * position
        };
        let timing = RaftTiming {
            election_ticks,
            heartbeat_ticks: 2,
        };
        let raft_records: Vec<_> = records
            .iter()
            .map(|r| match r {
                Record::Raft(r) => r.clone(),
                other => panic!("log of replica {id} holds {other:?}"),
            })
            .collect();
        let mut raft = RaftGroup::new(id, members.clone(), timing, &raft_records)
            .unwrap_or_else(|e| panic!("replica {id} of {shard}: {e}"));
        if let Some(limit) = opts.raft_log_limit {
            raft = raft.with_log_limit(limit);
        }
        Member {
            id,
            tick_ns: tick_ns(cluster, &members),
            opts,
            clock_si,
            raft,
            log: Vec::new(),
            peak: LogSize::default(),
            led: None,
            epochs: 0,
        }
    }

    pub(crate) fn on_start(&mut self, ctx: &mut Cx<'_>) {
        ctx.set_timer(self.tick_ns, Timer::RaftTick);
        ctx.count(super::counters::RAFT_MEMBERS, 1);
        // A restarted member restores its snapshot and re-applies its committed log here.
        self.pump(ctx);
    }

    pub(crate) fn on_message(&mut self, ctx: &mut Cx<'_>, from: NodeId, msg: Msg) {
        match msg {
            Msg::Raft(m) => {
                // A frame that does not decode or is not for this group is dropped.
                let _ = self.raft.step(from, &m);
            }
            msg => {
                let txn = msg.partition_request_txn();
                let read = match &msg {
                    Msg::Read {
                        txn,
                        op,
                        key,
                        snapshot,
                    } => Some((*txn, *op, key.clone(), snapshot.time_ns)),
                    _ => None,
                };
                let handler =
                    |server: &mut Server, cx: &mut Cx<'_>| server.on_message(cx, from, msg);
                self.serve(ctx, handler, from, txn, read)
            }
        }
        self.pump(ctx);
    }

    pub(crate) fn on_timer(&mut self, ctx: &mut Cx<'_>, timer: Timer) {
        match timer {
            Timer::RaftTick => {
                self.raft.tick();
                ctx.set_timer(self.tick_ns, Timer::RaftTick);
            }
            Timer::Led { epoch, timer } => {
                if self.led.as_ref().is_some_and(|l| l.epoch == epoch) {
                    self.run(ctx, |server, cx| server.on_timer(cx, *timer));
                }
            }
            other => panic!("replica {} fired {other:?}", self.id),
        }
        self.pump(ctx);
    }

    /// Hands a partition request to the server if this member leads and is ready; else
    /// tells the sender who leads.
    fn serve(
        &mut self,
        ctx: &mut Cx<'_>,
        handler: impl FnOnce(&mut Server, &mut Cx<'_>),
        from: NodeId,
        txn: Option<TxnId>,
        read: Option<(TxnId, u64, Key, u64)>,
    ) {
        if let Some(led) = self.led.as_mut().filter(|l| l.server.is_some()) {
            if let Some((txn, op, key, snapshot_ns)) = read {
                // Reads that are never answered (dropped while parked) leave entries: bound
                // them. A reply whose entry is gone waits for every earlier record: safe.
                if led.reading.len() >= MAX_READING {
                    led.reading.clear();
                }
                led.reading.insert((txn, op), (key, snapshot_ns));
            }
            return self.run(ctx, handler);
        }
        if let Some(txn) = txn {
            let leader = self.raft.leader().filter(|&l| l != self.id);
            ctx.send(from, Msg::NotLeader { txn, leader });
        }
    }

    /// Runs a server handler, turning its records into one proposal and holding back what
    /// it sends until its records (and every earlier proposal) have committed.
    fn run(&mut self, ctx: &mut Cx<'_>, handler: impl FnOnce(&mut Server, &mut Cx<'_>)) {
        let Some(led) = self.led.as_mut() else {
            return;
        };
        let Some(server) = led.server.as_mut() else {
            return;
        };
        let effects = ctx.capture(|cx| handler(server, cx));
        let mut records = Vec::new();
        for effect in effects {
            match effect {
                Effect::Persist { record } | Effect::Checkpoint { record } => {
                    led.note(&record);
                    records.push(record);
                }
                Effect::Send { to, msg } => {
                    let after = led.wait_for(&msg, !records.is_empty());
                    if after <= led.committed {
                        ctx.send(to, msg);
                    } else {
                        led.outbox.push((after, to, msg));
                    }
                }
                Effect::SetTimer {
                    id,
                    after_ns,
                    timer,
                } => {
                    let timer = Timer::Led {
                        epoch: led.epoch,
                        timer: Box::new(timer),
                    };
                    ctx.emit(Effect::SetTimer {
                        id,
                        after_ns,
                        timer,
                    });
                }
                other @ (Effect::CancelTimer { .. }
                | Effect::Count { .. }
                | Effect::Respond { .. }) => ctx.emit(other),
            }
        }
        if records.is_empty() {
            return;
        }
        led.proposed += 1;
        let command = Command::Records {
            leader: self.id,
            term: led.term,
            seq: led.proposed,
            records,
        };
        if !self.raft.propose(encode(&command)) {
            self.led = None;
        }
    }

    /// Carries out what the group asks (persist, send, apply), then follows leadership.
    fn pump(&mut self, ctx: &mut Cx<'_>) {
        loop {
            let out = self.raft.drain();
            persist(ctx, out.records);
            if out.snapshots_sent > 0 {
                ctx.count(super::counters::RAFT_SNAPSHOTS_SENT, out.snapshots_sent);
            }
            for (to, m) in out.messages {
                ctx.send(to, Msg::Raft(m));
            }
            if let Some(snapshot) = out.snapshot {
                self.log = serde_json::from_slice(&snapshot).expect("our snapshots decode");
                ctx.count(super::counters::RAFT_SNAPSHOTS_RESTORED, 1);
            }
            for command in &out.committed {
                let command: Command =
                    serde_json::from_slice(command).expect("the log holds only our commands");
                self.apply(ctx, command);
            }
            self.compact(ctx);
            if !self.follow_leadership() {
                return;
            }
        }
    }

    /// Notes the log's peak size, then, if it is over its limit, compacts it behind a
    /// snapshot of the committed records (everything drained so far is applied).
    fn compact(&mut self, ctx: &mut Cx<'_>) {
        let size = self.raft.log_size();
        if size.entries > self.peak.entries {
            ctx.count(
                super::counters::RAFT_LOG_PEAK_ENTRIES,
                size.entries - self.peak.entries,
            );
            self.peak.entries = size.entries;
        }
        if size.bytes > self.peak.bytes {
            ctx.count(
                super::counters::RAFT_LOG_PEAK_BYTES,
                size.bytes - self.peak.bytes,
            );
            self.peak.bytes = size.bytes;
        }
        if !self.raft.wants_snapshot() {
            return;
        }
        let data = serde_json::to_vec(&self.log).expect("records always encode");
        match self.raft.compact(data) {
            Ok(record) => {
                ctx.count(super::counters::RAFT_COMPACTIONS, 1);
                persist(ctx, vec![record]);
            }
            Err(e) => panic!("replica {}: {e}", self.id),
        }
    }

    /// Steps down or up; true if a proposal was made (so there is more to drain).
    fn follow_leadership(&mut self) -> bool {
        let term = self.raft.term();
        let leads = self.raft.is_leader();
        if self.led.as_ref().is_some_and(|l| !leads || l.term != term) {
            // Everything not yet said is dropped: coordinators retry with the next leader.
            self.led = None;
        }
        if !leads || self.led.is_some() {
            return false;
        }
        self.epochs += 1;
        self.led = Some(Led {
            term,
            epoch: self.epochs,
            server: None,
            proposed: 0,
            committed: 0,
            outbox: Vec::new(),
            lease_until_ns: 0,
            leases: Vec::new(),
            clock_si: self.clock_si,
            local_commit_seq: FxHashMap::default(),
            reading: FxHashMap::default(),
        });
        let barrier = Command::Barrier {
            leader: self.id,
            term,
        };
        if !self.raft.propose(encode(&barrier)) {
            self.led = None;
        }
        true
    }

    fn apply(&mut self, ctx: &mut Cx<'_>, command: Command) {
        match command {
            Command::Barrier { leader, term } => {
                if leader == self.id && self.led.as_ref().is_some_and(|l| l.term == term) {
                    self.take_over(ctx);
                }
            }
            Command::Records {
                leader,
                term,
                seq,
                records,
            } => {
                for record in records {
                    if matches!(record, Record::ServerCheckpoint(_)) {
                        self.log.clear();
                    }
                    self.log.push(record);
                }
                if leader == self.id {
                    self.committed(ctx, term, seq);
                }
            }
        }
    }

    /// The barrier is applied: rebuild the server from the committed records.
    fn take_over(&mut self, ctx: &mut Cx<'_>) {
        let server = Server::restore(self.id, self.opts.clone(), self.clock_si, &self.log);
        let led = self.led.as_mut().expect("leading");
        // Whatever the committed records put under the floor is durable already.
        led.lease_until_ns = server.floor_ns();
        led.server = Some(server);
        ctx.count(super::counters::PARTITION_TAKEOVERS, 1);
        self.run(ctx, |server, cx| server.on_start(cx));
    }

    /// Proposal `seq` of this leadership committed: release what waited for it.
    fn committed(&mut self, ctx: &mut Cx<'_>, term: u64, seq: u64) {
        if let Some(led) = self.led.as_mut().filter(|l| l.term == term) {
            led.release(ctx, seq);
        }
    }
}

/// Persists the group's records, a snapshot as a checkpoint (it subsumes the others).
fn persist(ctx: &mut Cx<'_>, records: Vec<crate::raft_group::RaftRecord>) {
    for record in records {
        if record.is_checkpoint() {
            ctx.checkpoint(Record::Raft(record));
        } else {
            ctx.persist(Record::Raft(record));
        }
    }
}

#[cfg(test)]
impl Member {
    /// Leads and serves.
    pub(crate) fn leads(&self) -> bool {
        self.led.as_ref().is_some_and(|l| l.server.is_some())
    }

    /// Committed server records held since the last checkpoint.
    pub(crate) fn committed_records(&self) -> usize {
        self.log.len()
    }

    /// The committed server records, as JSON (what a snapshot carries).
    pub(crate) fn committed_log(&self) -> String {
        serde_json::to_string(&self.log).expect("records encode")
    }

    /// The Raft log it holds now, and the longest it held.
    pub(crate) fn raft_log(&self) -> (LogSize, LogSize) {
        (self.raft.log_size(), self.peak)
    }
}
