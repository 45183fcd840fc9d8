//! # `replicated`: an unchanged partition server on the leader of its shard's Raft group
//!
//! Each partition is a Raft group of its shard's replicas ([`crate::raft_group`]), so a
//! partition survives the loss of a minority of them (a region, when replicas sit in
//! different regions). The partition's state machine is the protocol's own server, unchanged,
//! and runs on the Raft leader only; it implements [`Partition`].
//!
//! What the server would append to its write-ahead log is proposed to the group instead,
//! one command per handler; everything the server sends after a record is held back until
//! that record has committed in the group — or until what the protocol's [`Release`] policy
//! says the message depends on has (a read reply, say, waits only for what it may have
//! seen). No one ever sees state a failover could lose. Followers keep the committed
//! records; a member that becomes leader proposes a barrier, and once the barrier is
//! applied (so every entry of earlier terms is too) it rebuilds the server from those
//! records exactly as a restarted partition does ([`Partition::restore`], then
//! [`Partition::on_start`], which for a 2PC participant asks coordinators about prepared
//! transactions).
//!
//! Members that do not lead answer partition requests with the protocol's `NotLeader`,
//! naming the leader they know; coordinators route by shard with [`Leaders`] and follow
//! the hint.
//!
//! Used by `clock-si` / `conventional-si` (`replicated=true`), `2pl-raft` and `occ-raft`.

use crate::raft_group::{LogSize, RaftGroup, RaftMsg, RaftRecord, RaftTiming};
use meridian_core::node::{Context, Effect};
use meridian_core::{Cluster, NodeId, ShardId, TxnId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;

/// A member became its partition's leader and rebuilt the server.
pub const PARTITION_TAKEOVERS: &str = "partition_takeovers";
/// Member incarnations started (the peaks below are summed over them).
pub const RAFT_MEMBERS: &str = "raft_members";
/// The longest Raft log (entries) each member incarnation held, summed. With compaction
/// each term is at most the log limit plus what arrives between two drains, so the sum
/// stays flat as a run lengthens; without it, it grows with the run.
pub const RAFT_LOG_PEAK_ENTRIES: &str = "raft_log_peak_entries";
/// As [`RAFT_LOG_PEAK_ENTRIES`], in bytes of the entries' commands.
pub const RAFT_LOG_PEAK_BYTES: &str = "raft_log_peak_bytes";
/// A member compacted its Raft log behind a snapshot.
pub const RAFT_COMPACTIONS: &str = "raft_compactions";
/// Bytes of the snapshots members wrote when compacting (summed): with
/// [`Member::compact`]'s amortization, at most twice [`RAFT_APPLIED_BYTES`] (plus the
/// entries not yet applied when a member compacted).
pub const RAFT_SNAPSHOT_BYTES: &str = "raft_snapshot_bytes";
/// Bytes of the committed commands members applied (summed).
pub const RAFT_APPLIED_BYTES: &str = "raft_applied_bytes";
/// A leader sent a snapshot to a follower whose next entry it compacted.
pub const RAFT_SNAPSHOTS_SENT: &str = "raft_snapshots_sent";
/// A member restored the committed records from a snapshot (a leader's, or its own at
/// restart).
pub const RAFT_SNAPSHOTS_RESTORED: &str = "raft_snapshots_restored";

/// The context a partition's handlers receive.
pub type PartitionCx<'a, P> =
    Context<'a, <P as Partition>::Msg, <P as Partition>::Timer, <P as Partition>::Record>;

/// A message as a member sees it.
pub enum Inbound<M> {
    /// Between the members of the group.
    Raft(RaftMsg),
    /// For the server; `txn` if it is a coordinator's request (answered `NotLeader` by a
    /// member that does not serve).
    Request { txn: Option<TxnId>, msg: M },
}

/// A timer as a member sees it.
pub enum MemberTimer<T> {
    /// The group's clock.
    RaftTick,
    /// A timer the server set during leadership `epoch`.
    Led { epoch: u64, timer: T },
}

/// A partition server that can run on a Raft group's leader: how it is rebuilt from its
/// committed records and started, and how its messages, timers and records carry the
/// member's own.
pub trait Partition: Sized + Debug {
    type Msg: Clone + Debug;
    type Timer: Debug;
    type Record: Clone + Debug + Serialize + DeserializeOwned;
    /// What `restore` needs besides the records (options, procedures, mode).
    type Setup: Clone + Debug;
    /// The leader's bookkeeping of what each send depends on.
    type Release: Release<Self> + Debug;

    /// Rebuilds the server from its committed records, as after a restart.
    fn restore(id: NodeId, setup: &Self::Setup, records: &[Self::Record]) -> Self;
    fn on_start(&mut self, cx: &mut PartitionCx<'_, Self>);
    fn on_message(&mut self, cx: &mut PartitionCx<'_, Self>, from: NodeId, msg: Self::Msg);
    fn on_timer(&mut self, cx: &mut PartitionCx<'_, Self>, timer: Self::Timer);
    /// A record that makes every earlier one redundant (the committed log restarts at it).
    fn is_checkpoint(record: &Self::Record) -> bool;
    /// The release policy of a leadership that has just rebuilt this server.
    fn release(&self) -> Self::Release;

    /// Wire: a member's Raft message as the protocol's message, and back.
    fn raft_msg(msg: RaftMsg) -> Self::Msg;
    fn inbound(msg: Self::Msg) -> Inbound<Self::Msg>;
    /// Wire: the answer of a member that does not serve.
    fn not_leader(txn: TxnId, leader: Option<NodeId>) -> Self::Msg;
    /// Timers: the member's own, and the server's wrapped in a leadership epoch.
    fn raft_tick() -> Self::Timer;
    fn led_timer(epoch: u64, timer: Self::Timer) -> Self::Timer;
    fn member_timer(timer: Self::Timer) -> MemberTimer<Self::Timer>;
    /// Records: a member's Raft record as the protocol's record, and back.
    fn raft_record(record: RaftRecord) -> Self::Record;
    fn as_raft_record(record: &Self::Record) -> Option<&RaftRecord>;
}

/// What a leader's sends wait for. Proposals are numbered 1, 2, … within a leadership.
/// The default makes every send wait for every earlier proposal, which is always safe.
pub trait Release<P: Partition> {
    /// `msg` is about to be handed to the server.
    fn request(&mut self, _msg: &P::Msg) {}
    /// `record` goes into proposal `seq`.
    fn note(&mut self, _seq: u64, _record: &P::Record) {}
    /// The proposal `msg` must wait for, given `proposed` so far and whether the handler
    /// that sends it wrote records (which go into proposal `proposed + 1`).
    fn wait_for(&mut self, _msg: &P::Msg, proposed: u64, handler_records: bool) -> u64 {
        proposed + u64::from(handler_records)
    }
    /// Every proposal up to `committed` has committed.
    fn committed(&mut self, _committed: u64) {}
}

/// A command of the partition's Raft log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "R: Serialize + DeserializeOwned")]
enum Command<R> {
    /// A new leader's first command: once applied, it has every earlier entry.
    Barrier { leader: NodeId, term: u64 },
    /// The write-ahead records of one server handler at `leader`, its `seq`-th proposal.
    Records {
        leader: NodeId,
        term: u64,
        seq: u64,
        records: Vec<R>,
    },
}

fn encode<R: Serialize + DeserializeOwned>(command: &Command<R>) -> Vec<u8> {
    serde_json::to_vec(command).expect("a command always encodes")
}

/// The server while this member leads, and what it has not yet been allowed to say.
#[derive(Debug)]
struct Led<P: Partition> {
    term: u64,
    /// Distinguishes this leadership's timers from an earlier one's.
    epoch: u64,
    /// `None` until the barrier is applied.
    served: Option<(P, P::Release)>,
    outbox: Outbox<P>,
}

/// A leader's (or primary's) sends held until the proposals they depend on are durable
/// on the replicas. Proposals are numbered 1, 2, … within a leadership.
#[derive(Debug)]
pub struct Outbox<P: Partition> {
    /// Proposals made / known durable, in this leadership.
    pub proposed: u64,
    pub committed: u64,
    /// Sends waiting, by the proposal each waits for, each with its hold order (a release
    /// sends in hold order). Keyed so that a release touches only what it sends: at load a
    /// leader holds thousands of sends, and re-sorting all of them at every commit was
    /// quadratic.
    held: BTreeMap<u64, Vec<(u64, NodeId, P::Msg)>>,
    /// Sends held so far in this leadership (the hold order).
    holds: u64,
}

impl<P: Partition> Default for Outbox<P> {
    fn default() -> Outbox<P> {
        Outbox {
            proposed: 0,
            committed: 0,
            held: BTreeMap::new(),
            holds: 0,
        }
    }
}

impl<P: Partition> Outbox<P> {
    /// Sorts one server handler's `effects`: its records (returned; if any, they are
    /// proposal `proposed`, already counted), its sends (out now if what they wait for is
    /// durable, else held), its timers (tagged with the leadership `epoch`).
    pub fn handle(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        release: &mut P::Release,
        epoch: u64,
        effects: Vec<Effect<P::Msg, P::Timer, P::Record>>,
    ) -> Vec<P::Record> {
        let mut records = Vec::new();
        for effect in effects {
            match effect {
                Effect::Persist { record } | Effect::Checkpoint { record } => {
                    release.note(self.proposed + 1, &record);
                    records.push(record);
                }
                Effect::Send { to, msg } => {
                    let after = release.wait_for(&msg, self.proposed, !records.is_empty());
                    if after <= self.committed {
                        cx.send(to, msg);
                    } else {
                        self.holds += 1;
                        let hold = (self.holds, to, msg);
                        self.held.entry(after).or_default().push(hold);
                    }
                }
                Effect::SetTimer {
                    id,
                    after_ns,
                    timer,
                } => {
                    let timer = P::led_timer(epoch, timer);
                    cx.emit(Effect::SetTimer {
                        id,
                        after_ns,
                        timer,
                    });
                }
                other @ (Effect::CancelTimer { .. }
                | Effect::Count { .. }
                | Effect::Respond { .. }) => cx.emit(other),
            }
        }
        if !records.is_empty() {
            self.proposed += 1;
        }
        records
    }

    /// Proposal `seq` is durable: what waited for it goes out.
    pub fn release(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        release: Option<&mut P::Release>,
        seq: u64,
    ) {
        self.committed = self.committed.max(seq);
        let committed = self.committed;
        if let Some(release) = release {
            release.committed(committed);
        }
        let stay = self.held.split_off(&committed.saturating_add(1));
        let released = std::mem::replace(&mut self.held, stay);
        let mut go: Vec<(u64, NodeId, P::Msg)> = released.into_values().flatten().collect();
        go.sort_unstable_by_key(|(hold, _, _)| *hold);
        for (_, to, msg) in go {
            cx.send(to, msg);
        }
    }
}

/// One replica of a replicated partition.
#[derive(Debug)]
pub struct Member<P: Partition> {
    id: NodeId,
    setup: P::Setup,
    raft: RaftGroup,
    tick_ns: u64,
    /// The committed server records from the last checkpoint on: what a new leader
    /// restores, and the state machine a Raft snapshot holds.
    log: Vec<P::Record>,
    /// The longest Raft log this incarnation held (reported through the counters).
    peak: LogSize,
    /// The size of the last snapshot this member wrote or restored: the log is compacted
    /// again only once it holds as many bytes (see [`Member::compact`]).
    snapshot_bytes: u64,
    led: Option<Led<P>>,
    epochs: u64,
    /// Requests that reached this member while it campaigned or waited for its barrier:
    /// served once it serves, else answered `NotLeader` once it knows it will not lead
    /// (at most [`WAITING_MAX`]; more are answered at once).
    waiting: Vec<(NodeId, Option<TxnId>, P::Msg)>,
}

/// Requests a member about to lead holds (see [`Member`]'s `waiting`). A fresh group's
/// placed leader serves after one round trip to its nearest follower (SC–BR, 117 ms on
/// `gcp-tiga`); at the Tiga paper's highest load (25 K txns/s from each of 8
/// coordinators, one request per shard) about 24 K requests reach it meanwhile. Beyond the
/// bound a request is answered `NotLeader` and its coordinator waits a retry period.
pub const WAITING_MAX: usize = 1 << 15;

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

impl<P: Partition> Member<P> {
    /// Builds replica `id` of `shard` from its records (its Raft log); the group compacts
    /// its log past `log_limit` entries (`None`: never).
    pub fn restore(
        id: NodeId,
        shard: ShardId,
        cluster: &Cluster,
        setup: P::Setup,
        log_limit: Option<u64>,
        records: &[P::Record],
    ) -> Member<P> {
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
            .map(|r| match P::as_raft_record(r) {
                Some(r) => r.clone(),
                None => panic!("log of replica {id} holds {r:?}"),
            })
            .collect();
        let mut raft = RaftGroup::new(id, members.clone(), timing, &raft_records)
            .unwrap_or_else(|e| panic!("replica {id} of {shard}: {e}"));
        if let Some(limit) = log_limit {
            raft = raft.with_log_limit(limit);
        }
        // A fresh group (no records anywhere yet) would sit leaderless for the placed
        // leader's election timeout (≈ 8 ticks of a quarter of the widest RTT, about 0.4 s on
        // gcp-tiga), then spend a pre-vote and a vote round; instead every fresh member
        // starts with the placed leader elected in term 1, and the group serves once the
        // leader's barrier reaches a majority (one round trip to its nearest follower). A
        // restarted member keeps the term and vote its records hold.
        if records.is_empty() {
            raft.bootstrap(cluster.initial_leader(shard))
                .unwrap_or_else(|e| panic!("replica {id} of {shard}: {e}"));
        }
        Member {
            id,
            tick_ns: tick_ns(cluster, &members),
            setup,
            raft,
            log: Vec::new(),
            peak: LogSize::default(),
            snapshot_bytes: 0,
            led: None,
            epochs: 0,
            waiting: Vec::new(),
        }
    }

    pub fn on_start(&mut self, cx: &mut PartitionCx<'_, P>) {
        cx.set_timer(self.tick_ns, P::raft_tick());
        cx.count(RAFT_MEMBERS, 1);
        // A restarted member restores its snapshot and re-applies its committed log here.
        self.pump(cx);
    }

    pub fn on_message(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, msg: P::Msg) {
        match P::inbound(msg) {
            Inbound::Raft(m) => {
                // A frame that does not decode or is not for this group is dropped.
                let _ = self.raft.step(from, &m);
            }
            Inbound::Request { txn, msg } => self.serve(cx, from, txn, msg),
        }
        self.pump(cx);
        self.settle_waiting(cx);
    }

    pub fn on_timer(&mut self, cx: &mut PartitionCx<'_, P>, timer: P::Timer) {
        match P::member_timer(timer) {
            MemberTimer::RaftTick => {
                self.raft.tick();
                cx.set_timer(self.tick_ns, P::raft_tick());
            }
            MemberTimer::Led { epoch, timer } => {
                if self.led.as_ref().is_some_and(|l| l.epoch == epoch) {
                    self.run(cx, |server, cx| server.on_timer(cx, timer));
                }
            }
        }
        self.pump(cx);
        self.settle_waiting(cx);
    }

    /// Hands a partition request to the server if this member leads and is ready; holds it
    /// if this member is about to lead; else tells the sender who leads.
    fn serve(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        from: NodeId,
        txn: Option<TxnId>,
        msg: P::Msg,
    ) {
        if let Some((_, release)) = self.led.as_mut().and_then(|l| l.served.as_mut()) {
            release.request(&msg);
            return self.run(cx, |server, cx| server.on_message(cx, from, msg));
        }
        // Why hold rather than refuse: a fresh group's placed leader campaigns at boot and
        // serves only after its barrier commits (a few round trips to its followers); a
        // `NotLeader` without a hint made coordinators wait a whole retry period
        // (≈ 755 ms on gcp-tiga) before asking again.
        if self.about_to_lead() && self.waiting.len() < WAITING_MAX {
            self.waiting.push((from, txn, msg));
            return;
        }
        if let Some(txn) = txn {
            let leader = self.raft.leader().filter(|&l| l != self.id);
            cx.send(from, P::not_leader(txn, leader));
        }
    }

    /// Campaigning, or leading with the barrier not yet applied.
    fn about_to_lead(&self) -> bool {
        self.raft.is_candidate() || self.led.as_ref().is_some_and(|l| l.served.is_none())
    }

    /// Serves the held requests once this member serves; answers them `NotLeader` once it
    /// no longer expects to lead.
    fn settle_waiting(&mut self, cx: &mut PartitionCx<'_, P>) {
        if self.waiting.is_empty() || self.about_to_lead() {
            return;
        }
        for (from, txn, msg) in std::mem::take(&mut self.waiting) {
            self.serve(cx, from, txn, msg);
        }
        self.pump(cx);
    }

    /// Runs a server handler, turning its records into one proposal and holding back what
    /// it sends until what it depends on has committed.
    fn run(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        handler: impl FnOnce(&mut P, &mut PartitionCx<'_, P>),
    ) {
        let Some(led) = self.led.as_mut() else {
            return;
        };
        let Some((server, release)) = led.served.as_mut() else {
            return;
        };
        let effects = cx.capture(|cx| handler(server, cx));
        let records = led.outbox.handle(cx, release, led.epoch, effects);
        if records.is_empty() {
            return;
        }
        let command = Command::Records {
            leader: self.id,
            term: led.term,
            seq: led.outbox.proposed,
            records,
        };
        if !self.raft.propose(encode(&command)) {
            self.led = None;
        }
    }

    /// Carries out what the group asks (persist, send, apply), then follows leadership.
    fn pump(&mut self, cx: &mut PartitionCx<'_, P>) {
        loop {
            let out = self.raft.drain();
            persist::<P>(cx, out.records);
            if out.snapshots_sent > 0 {
                cx.count(RAFT_SNAPSHOTS_SENT, out.snapshots_sent);
            }
            for (to, m) in out.messages {
                cx.send(to, P::raft_msg(m));
            }
            if let Some(snapshot) = out.snapshot {
                self.log = serde_json::from_slice(&snapshot).expect("our snapshots decode");
                self.snapshot_bytes = snapshot.len() as u64;
                cx.count(RAFT_SNAPSHOTS_RESTORED, 1);
            }
            let applied_bytes: usize = out.committed.iter().map(Vec::len).sum();
            if applied_bytes > 0 {
                cx.count(RAFT_APPLIED_BYTES, applied_bytes as u64);
            }
            for command in &out.committed {
                let command: Command<P::Record> =
                    serde_json::from_slice(command).expect("the log holds only our commands");
                self.apply(cx, command);
            }
            self.compact(cx);
            if !self.follow_leadership() {
                return;
            }
        }
    }

    /// Notes the log's peak size, then, if it is over its limit and holds at least as many
    /// bytes as the last snapshot, compacts it behind a snapshot of the committed records
    /// (everything drained so far is applied).
    ///
    /// The byte condition amortizes snapshots. A snapshot holds every record since the
    /// server's last checkpoint — the whole store, which the server checkpoints at most
    /// once per store's size of records — so it can be far larger than `limit` entries:
    /// compacting every `limit` entries re-encoded and re-persisted the store each time
    /// (at 25 K txns/s per coordinator on `gcp-tiga`, most of a run's time). Waiting until
    /// the log is as large as the snapshot it will be folded into keeps the bytes written
    /// by snapshots within the bytes committed, and the log within the larger of `limit`
    /// entries and the state's size (as a log-structured store rewrites its log once it
    /// has doubled).
    fn compact(&mut self, cx: &mut PartitionCx<'_, P>) {
        let size = self.raft.log_size();
        if size.entries > self.peak.entries {
            cx.count(RAFT_LOG_PEAK_ENTRIES, size.entries - self.peak.entries);
            self.peak.entries = size.entries;
        }
        if size.bytes > self.peak.bytes {
            cx.count(RAFT_LOG_PEAK_BYTES, size.bytes - self.peak.bytes);
            self.peak.bytes = size.bytes;
        }
        if !self.raft.wants_snapshot() || size.bytes < self.snapshot_bytes {
            return;
        }
        let data = serde_json::to_vec(&self.log).expect("records always encode");
        self.snapshot_bytes = data.len() as u64;
        match self.raft.compact(data) {
            Ok(record) => {
                cx.count(RAFT_COMPACTIONS, 1);
                cx.count(RAFT_SNAPSHOT_BYTES, self.snapshot_bytes);
                persist::<P>(cx, vec![record]);
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
            served: None,
            outbox: Outbox::default(),
        });
        let barrier = Command::<P::Record>::Barrier {
            leader: self.id,
            term,
        };
        if !self.raft.propose(encode(&barrier)) {
            self.led = None;
        }
        true
    }

    fn apply(&mut self, cx: &mut PartitionCx<'_, P>, command: Command<P::Record>) {
        match command {
            Command::Barrier { leader, term } => {
                if leader == self.id && self.led.as_ref().is_some_and(|l| l.term == term) {
                    self.take_over(cx);
                }
            }
            Command::Records {
                leader,
                term,
                seq,
                records,
            } => {
                for record in records {
                    if P::is_checkpoint(&record) {
                        self.log.clear();
                    }
                    self.log.push(record);
                }
                if leader == self.id {
                    if let Some(led) = self.led.as_mut().filter(|l| l.term == term) {
                        let release = led.served.as_mut().map(|(_, r)| r);
                        led.outbox.release(cx, release, seq);
                    }
                }
            }
        }
    }

    /// The barrier is applied: rebuild the server from the committed records.
    fn take_over(&mut self, cx: &mut PartitionCx<'_, P>) {
        let server = P::restore(self.id, &self.setup, &self.log);
        let release = server.release();
        let led = self.led.as_mut().expect("leading");
        led.served = Some((server, release));
        cx.count(PARTITION_TAKEOVERS, 1);
        self.run(cx, |server, cx| server.on_start(cx));
    }

    /// The server, while this member leads and serves.
    pub fn server(&self) -> Option<&P> {
        self.led.as_ref()?.served.as_ref().map(|(s, _)| s)
    }

    /// Leads and serves.
    pub fn leads(&self) -> bool {
        self.server().is_some()
    }

    /// Committed server records held since the last checkpoint.
    pub fn committed_records(&self) -> usize {
        self.log.len()
    }

    /// The committed server records, as JSON (what a snapshot carries).
    pub fn committed_log(&self) -> String {
        serde_json::to_string(&self.log).expect("records encode")
    }

    /// The Raft log it holds now, and the longest it held.
    pub fn raft_log(&self) -> (LogSize, LogSize) {
        (self.raft.log_size(), self.peak)
    }
}

/// Persists the group's records, a snapshot as a checkpoint (it subsumes the others).
fn persist<P: Partition>(cx: &mut PartitionCx<'_, P>, records: Vec<RaftRecord>) {
    for record in records {
        if record.is_checkpoint() {
            cx.checkpoint(P::raft_record(record));
        } else {
            cx.persist(P::raft_record(record));
        }
    }
}

/// A coordinator's routing to replicated partitions: which replica of each shard it
/// believes leads. A partition is named by its shard's initial leader (the partition id),
/// whichever replica leads it now.
///
/// Silence, not a retry timer, is what moves the belief ([`Leaders::rotate_if_silent`]): a
/// coordinator whose transaction outlives one retry period (HK's 2PC over SC's Raft groups
/// on `gcp-tiga` comes close) must not turn away from a leader that is answering, or every
/// later transaction pays a `NotLeader` round trip and outlives its own retry period too.
#[derive(Clone, Debug)]
pub struct Leaders {
    leaders: Vec<NodeId>,
    /// Per shard, when the replica believed to lead last answered (or became believed).
    heard_ns: Vec<u64>,
}

impl Leaders {
    /// Every shard led where the topology placed its leader.
    pub fn new(cluster: &Cluster) -> Leaders {
        Leaders {
            leaders: (0..cluster.shard_count())
                .map(|s| cluster.initial_leader(ShardId(s)))
                .collect(),
            heard_ns: vec![0; cluster.shard_count() as usize],
        }
    }

    /// The node that serves `partition` now (a node that is no replica: itself).
    pub fn route(&self, cluster: &Cluster, partition: NodeId) -> NodeId {
        cluster
            .shard_of_node(partition)
            .map_or(partition, |s| self.leaders[s.index()])
    }

    /// The node that serves `shard` now.
    pub fn of_shard(&self, shard: ShardId) -> NodeId {
        self.leaders[shard.index()]
    }

    /// `sender` answered a request at `now_ns` (a `NotLeader` is no answer): if it is
    /// believed to lead its shard, it is alive.
    pub fn heard(&mut self, cluster: &Cluster, sender: NodeId, now_ns: u64) {
        if let Some(shard) = cluster.shard_of_node(sender) {
            if self.leaders[shard.index()] == sender {
                self.heard_ns[shard.index()] = now_ns;
            }
        }
    }

    /// [`Leaders::rotate`], but only if the replica believed to lead `partition` has not
    /// answered for `silent_ns` (since it became believed); a moved belief gets the same
    /// grace. True if the belief moved.
    pub fn rotate_if_silent(
        &mut self,
        cluster: &Cluster,
        partition: NodeId,
        now_ns: u64,
        silent_ns: u64,
    ) -> bool {
        let Some(shard) = cluster.shard_of_node(partition) else {
            return false;
        };
        if now_ns.saturating_sub(self.heard_ns[shard.index()]) < silent_ns {
            return false;
        }
        self.rotate(cluster, partition);
        self.heard_ns[shard.index()] = now_ns;
        true
    }

    /// Believe the next replica of `partition`'s shard leads it (its leader did not answer).
    pub fn rotate(&mut self, cluster: &Cluster, partition: NodeId) {
        let Some(shard) = cluster.shard_of_node(partition) else {
            return;
        };
        let replicas = cluster.replicas(shard);
        let current = self.leaders[shard.index()];
        let next = replicas
            .iter()
            .position(|&r| r == current)
            .map_or(0, |i| i + 1);
        self.leaders[shard.index()] = replicas[next % replicas.len()];
    }

    /// A `NotLeader` hint from a replica of `partition`'s shard: true if it names a
    /// replica of that shard other than the one believed to lead (now believed).
    pub fn follow(&mut self, cluster: &Cluster, partition: NodeId, hint: Option<NodeId>) -> bool {
        let Some(shard) = cluster.shard_of_node(partition) else {
            return false;
        };
        let Some(leader) = hint.filter(|l| cluster.replicas(shard).contains(l)) else {
            return false;
        };
        if self.leaders[shard.index()] == leader {
            return false;
        }
        self.leaders[shard.index()] = leader;
        true
    }
}

/// The partition id (its shard's initial leader) of a replica; other nodes are themselves.
pub fn partition_of(cluster: &Cluster, node: NodeId) -> NodeId {
    cluster
        .shard_of_node(node)
        .map_or(node, |s| cluster.initial_leader(s))
}
