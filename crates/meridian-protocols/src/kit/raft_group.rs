//! # `raft_group`: a Raft group as a substrate piece, for any protocol that needs consensus
//!
//! A thin, sans-IO wrapper around the `raft` crate's [`RawNode`] (the Raft TiKV runs in
//! production). A protocol embeds a [`RaftGroup`] in a node, feeds it ticks and peer
//! messages, proposes opaque commands, and after every event calls [`RaftGroup::drain`],
//! which returns what to do: records to persist, messages to send, a snapshot to restore
//! the state machine from, commands that committed (in log order, exactly once per
//! incarnation). Tiga's view manager (§4) and Clock-SI's replicated partitions use it;
//! nothing here knows either protocol.
//!
//! ## Choices
//! * **Determinism.** `raft` draws each randomized election timeout from `thread_rng`; we pin
//!   the range to one value (`min = election_ticks`, `max = election_ticks + 1`) and let the
//!   caller draw `election_ticks` from the node's seeded RNG, so a run replays from its seed.
//! * **Durability.** Every appended entry batch and every hard-state change becomes a
//!   [`RaftRecord`], emitted before the messages that depend on it (drivers apply a node's
//!   effects in order). A restarted member rebuilds its log from its records; the state
//!   machine above restores the latest snapshot (if any) and re-applies the committed
//!   commands after it.
//! * **Compaction and snapshots** ([`RaftGroup::with_log_limit`]). Without a limit the log
//!   grows for the life of the group (fine for Tiga's view manager, which commits a command
//!   per view change). With one, once the log holds more than `limit` entries the host is
//!   asked ([`RaftGroup::wants_snapshot`]) for a snapshot of its state machine at the
//!   applied index, and [`RaftGroup::compact`] drops every applied entry behind it. The
//!   returned [`RaftRecord::Snapshot`] holds the snapshot, the log after it and the hard
//!   state, so it subsumes every earlier record: hosts persist it as a checkpoint
//!   ([`RaftRecord::is_checkpoint`]) and their durable log stays bounded too. A follower
//!   whose next entry was compacted away gets the leader's snapshot (`MsgSnapshot`); it
//!   comes out of [`RaftGroup::drain`] as [`RaftOutput::snapshot`], which replaces the
//!   host's state before the committed commands that follow it.
//! * **Lost snapshots.** The leader reports each snapshot it sends as delivered at once
//!   (`report_snapshot(Finish)`): the follower's progress returns to probing, so if the
//!   message was lost the next heartbeat response asks for it again, at the cost of an
//!   occasional duplicate snapshot. Waiting for an acknowledgement instead would leave a
//!   follower stuck forever behind one lost message.
//! * **Wire.** Raft messages travel as their protobuf encoding inside [`RaftMsg`], so
//!   protocols keep one serde message type; a frame that does not decode is an error the
//!   caller drops, never a panic. `max_inflight_msgs` and `max_size_per_msg` bound what one
//!   peer is sent at once.

use meridian_core::NodeId;
use protobuf::Message as _;
use raft::prelude::{
    ConfState, Entry, EntryType, HardState, Message, MessageType, Snapshot, SnapshotStatus,
};
use raft::{Config, GetEntriesContext, RaftState, RawNode, StateRole, Storage, StorageError};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A Raft message between members of a group: the protobuf encoding of `eraftpb::Message`.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RaftMsg(pub Vec<u8>);

impl fmt::Debug for RaftMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RaftMsg({} bytes)", self.0.len())
    }
}

/// One log entry as persisted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RaftEntry {
    pub index: u64,
    pub term: u64,
    pub data: Vec<u8>,
}

/// A durable record of a group member, to be persisted in order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum RaftRecord {
    /// Entries appended (a later batch at an index overwrites the earlier suffix).
    Entries(Vec<RaftEntry>),
    HardState {
        term: u64,
        vote: u64,
        commit: u64,
    },
    /// Everything the member holds: the state machine's snapshot at `index` (whose entry
    /// had `term`), the log after it, and the hard state. Subsumes every earlier record.
    Snapshot {
        index: u64,
        term: u64,
        data: Vec<u8>,
        entries: Vec<RaftEntry>,
        hard_state: (u64, u64, u64),
    },
}

impl RaftRecord {
    /// True if the record makes every earlier one redundant: persist it with
    /// `Context::checkpoint` so the driver may drop them.
    pub fn is_checkpoint(&self) -> bool {
        matches!(self, RaftRecord::Snapshot { .. })
    }
}

/// What the group asks its host to do after an event.
#[derive(Debug, Default)]
pub struct RaftOutput {
    /// Persist these first, in order (a checkpoint record as a checkpoint).
    pub records: Vec<RaftRecord>,
    /// Then send these.
    pub messages: Vec<(NodeId, RaftMsg)>,
    /// If set, the state machine becomes this snapshot (taken by some member's host at an
    /// index this member had not applied) before `committed` is applied.
    pub snapshot: Option<Vec<u8>>,
    /// Commands committed since the last drain, in log order.
    pub committed: Vec<Vec<u8>>,
    /// The log index of each of `committed` (for hosts that compact at a command of
    /// their own, [`RaftGroup::compact_to`]).
    pub indices: Vec<u64>,
    /// Snapshots this leader sent to lagging followers (among `messages`).
    pub snapshots_sent: u64,
}

/// Timing of a group, in ticks of the host's timer.
#[derive(Clone, Copy, Debug)]
pub struct RaftTiming {
    /// A follower campaigns after this many ticks without a leader (drawn per member from
    /// the host's seeded RNG so members rarely collide).
    pub election_ticks: usize,
    /// The leader heartbeats every this many ticks.
    pub heartbeat_ticks: usize,
}

/// The size of a member's log: what compaction bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSize {
    pub entries: u64,
    /// Bytes of the entries' commands.
    pub bytes: u64,
}

/// A member's log in memory: the latest snapshot and the entries after it. Unlike the
/// crate's `MemStorage`, it keeps the term of the compacted prefix's last entry (so
/// appends just after a compaction still match) and serves the host's snapshot data.
#[derive(Default)]
struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// Index 0: no snapshot yet.
    snapshot: Snapshot,
    /// `entries[0].index == snapshot index + 1`.
    entries: Vec<Entry>,
    /// The entries' command bytes, kept as they change (the host reads the log's size
    /// after every drain; summing it each time was quadratic in the log's length).
    entry_bytes: u64,
}

/// How many of `entries`, from the first, `raft::util::limit_size` keeps under `max_size`.
fn within_size(entries: &[Entry], max_size: Option<u64>) -> usize {
    let Some(max_size) = max_size.filter(|&m| m != raft::NO_LIMIT) else {
        return entries.len();
    };
    let mut size = 0u64;
    entries
        .iter()
        .take_while(|e| {
            let first = size == 0;
            size += u64::from(e.compute_size());
            first || size <= max_size
        })
        .count()
}

/// The command bytes of `entries`.
fn data_bytes<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> u64 {
    entries.into_iter().map(|e| e.data.len() as u64).sum()
}

impl LogStore {
    fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    /// Appends `entries`, replacing any suffix they overlap; entries at or below the
    /// snapshot are already covered by it and skipped.
    fn append(&mut self, entries: &[Entry]) -> Result<(), String> {
        let first = self.first();
        let entries: Vec<&Entry> = entries.iter().filter(|e| e.index >= first).collect();
        let Some(start) = entries.first().map(|e| e.index) else {
            return Ok(());
        };
        if start > self.last() + 1 {
            return Err(format!(
                "raft log gap: last {}, append {start}",
                self.last()
            ));
        }
        let kept = (start - first) as usize;
        self.entry_bytes -= data_bytes(self.entries.get(kept..).unwrap_or_default());
        self.entries.truncate(kept);
        self.entry_bytes += data_bytes(entries.iter().copied());
        self.entries.extend(entries.into_iter().cloned());
        Ok(())
    }

    /// Drops the entries up to `index` behind a snapshot holding `data`.
    fn compact(&mut self, index: u64, data: Vec<u8>) -> Result<(), String> {
        let term = self
            .term(index)
            .map_err(|e| format!("raft compact {index}: {e}"))?;
        let dropped = index.saturating_sub(self.snapshot_index()) as usize;
        let dropped = dropped.min(self.entries.len());
        self.entry_bytes -= data_bytes(&self.entries[..dropped]);
        self.entries.drain(..dropped);
        let meta = self.snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        self.snapshot.data = data.into();
        Ok(())
    }

    /// Replaces the log by a snapshot received from the leader (entries after it, if any,
    /// are re-sent by the leader).
    fn install(&mut self, snapshot: Snapshot) {
        let meta = snapshot.get_metadata();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.entries.clear();
        self.entry_bytes = 0;
        self.snapshot = snapshot;
    }

    fn size(&self) -> LogSize {
        LogSize {
            entries: self.entries.len() as u64,
            bytes: self.entry_bytes,
        }
    }

    fn record(&self) -> RaftRecord {
        let meta = self.snapshot.get_metadata();
        RaftRecord::Snapshot {
            index: meta.index,
            term: meta.term,
            data: self.snapshot.data.to_vec(),
            entries: self.entries.iter().map(to_record).collect(),
            hard_state: (
                self.hard_state.term,
                self.hard_state.vote,
                self.hard_state.commit,
            ),
        }
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let offset = self.first();
        let range = &self.entries[(low - offset) as usize..(high - offset) as usize];
        // Copy only what fits in `max_size` (as `raft::util::limit_size` counts it: at least
        // one entry). A leader asks for everything from a follower's next index on after
        // every append response; copying that whole backlog before cutting it made each
        // response cost the lagging follower's backlog (most of a 25 K txns/s run's time).
        let max_size = max_size.into();
        let mut entries = range[..within_size(range, max_size)].to_vec();
        raft::util::limit_size(&mut entries, max_size);
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snapshot_index() {
            return Ok(self.snapshot.get_metadata().term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    /// The latest compaction's snapshot; none yet (index 0) or one older than asked for is
    /// "temporarily unavailable", which makes the leader retry later.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let index = self.snapshot_index();
        if index == 0 || index < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

/// One member of a Raft group.
pub struct RaftGroup {
    node: RawNode<LogStore>,
    /// Raft id `i + 1` is `members[i]`.
    members: Vec<NodeId>,
    /// Compact once the log holds more than this many entries (`None`: never).
    log_limit: Option<u64>,
    /// The index of the last entry handed to the host (or covered by its snapshot).
    applied: u64,
    /// A snapshot recovered at restart, for the host on the first drain.
    recovered_snapshot: Option<Vec<u8>>,
}

impl fmt::Debug for RaftGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftGroup")
            .field("members", &self.members)
            .field("leader", &self.leader())
            .field("term", &self.node.raft.term)
            .field("applied", &self.applied)
            .finish()
    }
}

impl RaftGroup {
    /// Member `me` of the group `members`, rebuilt from its `recovered` records (empty at
    /// first boot). A bad record sequence is an error, never a panic.
    pub fn new(
        me: NodeId,
        members: Vec<NodeId>,
        timing: RaftTiming,
        recovered: &[RaftRecord],
    ) -> Result<RaftGroup, String> {
        let position = members
            .iter()
            .position(|&m| m == me)
            .ok_or_else(|| format!("node {me} is not a member of the raft group"))?;
        if timing.heartbeat_ticks == 0 || timing.election_ticks <= timing.heartbeat_ticks {
            return Err(format!(
                "raft timing {timing:?}: need 1 ≤ heartbeat < election"
            ));
        }
        let voters: Vec<u64> = (1..=members.len() as u64).collect();
        let mut storage = LogStore {
            conf_state: ConfState::from((voters, vec![])),
            ..LogStore::default()
        };
        restore(&mut storage, recovered)?;
        let applied = storage.snapshot_index();
        let recovered_snapshot = (applied > 0).then(|| storage.snapshot.data.to_vec());
        let config = Config {
            id: position as u64 + 1,
            election_tick: timing.election_ticks,
            heartbeat_tick: timing.heartbeat_ticks,
            min_election_tick: timing.election_ticks,
            max_election_tick: timing.election_ticks + 1,
            max_inflight_msgs: 256,
            max_size_per_msg: 1 << 20,
            check_quorum: true,
            pre_vote: true,
            applied,
            ..Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&config, storage, &logger).map_err(|e| format!("raft: {e}"))?;
        Ok(RaftGroup {
            node,
            members,
            log_limit: None,
            applied,
            recovered_snapshot,
        })
    }

    /// Compacts the log once it holds more than `limit` entries (at least 1): the host
    /// then answers [`RaftGroup::wants_snapshot`] with [`RaftGroup::compact`].
    pub fn with_log_limit(mut self, limit: u64) -> RaftGroup {
        self.log_limit = Some(limit.max(1));
        self
    }

    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// The member this one believes leads, if any.
    pub fn leader(&self) -> Option<NodeId> {
        let id = self.node.raft.leader_id;
        (id != raft::INVALID_ID).then(|| self.members[(id - 1) as usize])
    }

    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// Campaigning (pre-vote or vote): it may lead in a round trip or two.
    pub fn is_candidate(&self) -> bool {
        matches!(
            self.node.raft.state,
            StateRole::Candidate | StateRole::PreCandidate
        )
    }

    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The entries (and their bytes) this member holds.
    pub fn log_size(&self) -> LogSize {
        self.node.store().size()
    }

    /// Starts a fresh group (term 0, empty log) with `leader` already elected in term 1,
    /// as raft-rs's examples bootstrap their first leader: `leader` becomes leader of term
    /// 1, every other member a follower of term 1 that voted for it. Every member of a
    /// fresh group calls it with the same `leader`, so term 1 has one leader, as if every
    /// member had voted for it (the votes are persisted by the next [`RaftGroup::drain`]).
    /// The group then serves after one round trip (its first entry replicated to a
    /// majority) instead of an election's pre-vote and vote rounds.
    ///
    /// Call it only on a member with no records: one with records has voted or learned a
    /// term already and must not vote again. A member whose records were all lost sent
    /// nothing after them (a record is durable once a later message leaves), so calling it
    /// again gives the same term-1 vote it had, and a leader that comes back empty had
    /// appended nothing anyone holds.
    pub fn bootstrap(&mut self, leader: NodeId) -> Result<(), String> {
        let leader_id = self.raft_id(leader)?;
        if self.node.raft.term != 0 || self.node.store().last() != 0 {
            return Err(format!(
                "raft bootstrap: member {} is not fresh (term {})",
                self.members[(self.node.raft.id - 1) as usize],
                self.node.raft.term
            ));
        }
        let raft = &mut self.node.raft;
        if raft.id == leader_id {
            raft.become_candidate();
            raft.become_leader();
        } else {
            raft.become_follower(1, leader_id);
            raft.vote = leader_id;
        }
        Ok(())
    }

    /// One tick of the host's timer.
    pub fn tick(&mut self) {
        self.node.tick();
    }

    /// A message from another member. Undecodable or foreign messages are errors for the
    /// caller to log and drop.
    pub fn step(&mut self, from: NodeId, msg: &RaftMsg) -> Result<(), String> {
        let decoded = Message::parse_from_bytes(&msg.0).map_err(|e| format!("raft msg: {e}"))?;
        let expected = self.raft_id(from)?;
        if decoded.from != expected || decoded.to != self.node.raft.id {
            return Err(format!(
                "raft msg from {from} is addressed {}→{}",
                decoded.from, decoded.to
            ));
        }
        self.node
            .step(decoded)
            .map_err(|e| format!("raft step: {e}"))
    }

    /// Proposes a command; only a leader accepts (returns whether it did). A proposal may
    /// still be lost if leadership changes before it commits: callers retry what matters.
    pub fn propose(&mut self, command: Vec<u8>) -> bool {
        self.is_leader() && self.node.propose(Vec::new(), command).is_ok()
    }

    /// True if the log is over its limit and has applied entries to drop: the host should
    /// call [`RaftGroup::compact`] with a snapshot of its state machine, after applying
    /// everything [`RaftGroup::drain`] returned.
    pub fn wants_snapshot(&self) -> bool {
        let store = self.node.store();
        self.log_limit
            .is_some_and(|limit| store.size().entries > limit)
            && self.applied > store.snapshot_index()
    }

    /// Drops every applied entry behind `data`, the host's state machine after applying
    /// them; returns the record to persist as a checkpoint.
    pub fn compact(&mut self, data: Vec<u8>) -> Result<RaftRecord, String> {
        let applied = self.applied;
        let store = self.node.mut_store();
        if applied <= store.snapshot_index() {
            return Err(format!("raft compact: nothing applied after {applied}"));
        }
        store.compact(applied, data)?;
        Ok(store.record())
    }

    /// Leader only: the largest index that every member has persisted and the group has
    /// committed. No member ever needs an entry at or below it from another again, so a
    /// compaction there never makes the leader send a snapshot (what a host whose members
    /// hold different state machines, each its own shard, must avoid). `None` on a
    /// follower.
    pub fn durable_everywhere(&self) -> Option<u64> {
        if !self.is_leader() {
            return None;
        }
        let raft = &self.node.raft;
        let matched = raft.prs().iter().map(|(_, p)| p.matched).min()?;
        Some(matched.min(raft.raft_log.committed))
    }

    /// The index the log was last compacted at (0: never).
    pub fn snapshot_index(&self) -> u64 {
        self.node.store().snapshot_index()
    }

    /// Drops every entry up to `index` (applied, and above the last compaction) behind
    /// `data`, the host's state machine right after applying the entry at `index` (which
    /// the host kept since); returns the record to persist as a checkpoint. The host
    /// chooses `index` at or below [`RaftGroup::durable_everywhere`].
    pub fn compact_to(&mut self, index: u64, data: Vec<u8>) -> Result<RaftRecord, String> {
        let applied = self.applied;
        let store = self.node.mut_store();
        if index > applied || index <= store.snapshot_index() {
            return Err(format!(
                "raft compact to {index}: applied {applied}, compacted {}",
                store.snapshot_index()
            ));
        }
        store.compact(index, data)?;
        Ok(store.record())
    }

    /// Everything the group wants done since the last call (Raft's `Ready` cycle).
    pub fn drain(&mut self) -> RaftOutput {
        let mut out = RaftOutput {
            snapshot: self.recovered_snapshot.take(),
            ..RaftOutput::default()
        };
        let mut snapshots_sent = Vec::new();
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            self.push_messages(&mut out, ready.take_messages(), &mut snapshots_sent);
            if !ready.snapshot().is_empty() {
                self.install(&mut out, ready.snapshot().clone());
            }
            self.apply(&mut out, ready.take_committed_entries());
            if !ready.entries().is_empty() {
                let entries = ready.entries();
                out.records
                    .push(RaftRecord::Entries(entries.iter().map(to_record).collect()));
                self.node
                    .mut_store()
                    .append(entries)
                    .expect("raft appends after its snapshot, without gaps");
            }
            if let Some(hs) = ready.hs() {
                out.records.push(hard_state_record(hs));
                self.node.mut_store().hard_state = hs.clone();
            }
            let persisted = ready.take_persisted_messages();
            self.push_messages(&mut out, persisted, &mut snapshots_sent);
            let mut light = self.node.advance(ready);
            if let Some(commit) = light.commit_index() {
                let store = self.node.mut_store();
                store.hard_state.commit = commit;
                out.records.push(hard_state_record(&store.hard_state));
            }
            self.push_messages(&mut out, light.take_messages(), &mut snapshots_sent);
            self.apply(&mut out, light.take_committed_entries());
            self.node.advance_apply();
            out.snapshots_sent += snapshots_sent.len() as u64;
            for to in snapshots_sent.drain(..) {
                self.node.report_snapshot(to, SnapshotStatus::Finish);
            }
        }
        out
    }

    fn raft_id(&self, node: NodeId) -> Result<u64, String> {
        self.members
            .iter()
            .position(|&m| m == node)
            .map(|i| i as u64 + 1)
            .ok_or_else(|| format!("node {node} is not a member of the raft group"))
    }

    fn push_messages(&self, out: &mut RaftOutput, messages: Vec<Message>, snaps: &mut Vec<u64>) {
        for m in messages {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                snaps.push(m.to);
            }
            let to = self.members[(m.to - 1) as usize];
            let bytes = m.write_to_bytes().expect("a raft message always encodes");
            out.messages.push((to, RaftMsg(bytes)));
        }
    }

    /// A snapshot from the leader: it replaces the log, and the host's state (commands
    /// drained before it are subsumed by it).
    fn install(&mut self, out: &mut RaftOutput, snapshot: Snapshot) {
        self.applied = snapshot.get_metadata().index;
        out.committed.clear();
        out.indices.clear();
        out.snapshot = Some(snapshot.data.to_vec());
        let store = self.node.mut_store();
        store.install(snapshot);
        out.records.push(store.record());
    }

    fn apply(&mut self, out: &mut RaftOutput, entries: Vec<Entry>) {
        for e in entries {
            self.applied = self.applied.max(e.index);
            // Leaders append an empty entry at the start of their term; configuration
            // changes are never proposed.
            if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                out.committed.push(e.data.to_vec());
                out.indices.push(e.index);
            }
        }
    }
}

fn to_record(e: &Entry) -> RaftEntry {
    RaftEntry {
        index: e.index,
        term: e.term,
        data: e.data.to_vec(),
    }
}

fn from_record(e: &RaftEntry) -> Entry {
    Entry {
        index: e.index,
        term: e.term,
        data: e.data.clone().into(),
        ..Entry::default()
    }
}

fn hard_state_record(hs: &HardState) -> RaftRecord {
    RaftRecord::HardState {
        term: hs.term,
        vote: hs.vote,
        commit: hs.commit,
    }
}

/// Replays a member's records into its storage.
fn restore(storage: &mut LogStore, records: &[RaftRecord]) -> Result<(), String> {
    for record in records {
        match record {
            RaftRecord::Entries(entries) => {
                let entries: Vec<Entry> = entries.iter().map(from_record).collect();
                storage
                    .append(&entries)
                    .map_err(|e| format!("raft record replay: {e}"))?;
            }
            RaftRecord::HardState { term, vote, commit } => {
                storage.hard_state = HardState {
                    term: *term,
                    vote: *vote,
                    commit: *commit,
                    ..HardState::default()
                };
            }
            RaftRecord::Snapshot {
                index,
                term,
                data,
                entries,
                hard_state: (hs_term, vote, commit),
            } => {
                let mut snapshot = Snapshot::default();
                let meta = snapshot.mut_metadata();
                meta.index = *index;
                meta.term = *term;
                meta.set_conf_state(storage.conf_state.clone());
                snapshot.data = data.clone().into();
                storage.snapshot = snapshot;
                storage.entries.clear();
                storage.entry_bytes = 0;
                let entries: Vec<Entry> = entries.iter().map(from_record).collect();
                storage
                    .append(&entries)
                    .map_err(|e| format!("raft snapshot replay: {e}"))?;
                storage.hard_state = HardState {
                    term: *hs_term,
                    vote: *vote,
                    commit: *commit,
                    ..HardState::default()
                };
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const TIMING: RaftTiming = RaftTiming {
        election_ticks: 10,
        heartbeat_ticks: 2,
    };

    struct Harness {
        groups: Vec<Option<RaftGroup>>,
        records: Vec<Vec<RaftRecord>>,
        applied: Vec<Vec<Vec<u8>>>,
        wire: VecDeque<(NodeId, NodeId, RaftMsg)>,
    }

    impl Harness {
        /// Every live member's kept byte count matches its entries (after appends,
        /// truncations, compactions, snapshot installs and restores).
        fn assert_kept_bytes(&self) {
            for g in self.groups.iter().flatten() {
                let store = g.node.store();
                assert_eq!(g.log_size().bytes, data_bytes(&store.entries), "kept bytes");
            }
        }

        fn new(n: u32) -> Harness {
            let members: Vec<NodeId> = (0..n).map(NodeId).collect();
            let groups = members
                .iter()
                .map(|&m| {
                    let timing = RaftTiming {
                        election_ticks: TIMING.election_ticks + 3 * m.0 as usize,
                        ..TIMING
                    };
                    Some(RaftGroup::new(m, members.clone(), timing, &[]).unwrap())
                })
                .collect();
            Harness {
                groups,
                records: vec![Vec::new(); n as usize],
                applied: vec![Vec::new(); n as usize],
                wire: VecDeque::new(),
            }
        }

        /// Carries out a member's output like a host: its state machine is the list of
        /// applied commands, and a snapshot is that list as JSON.
        fn drain(&mut self, i: usize) {
            let Some(g) = self.groups[i].as_mut() else {
                return;
            };
            let out = g.drain();
            persist(&mut self.records[i], out.records);
            if let Some(snapshot) = out.snapshot {
                self.applied[i] = serde_json::from_slice(&snapshot).unwrap();
            }
            self.applied[i].extend(out.committed);
            if g.wants_snapshot() {
                let data = serde_json::to_vec(&self.applied[i]).unwrap();
                let record = g.compact(data).unwrap();
                persist(&mut self.records[i], vec![record]);
            }
            for (to, m) in out.messages {
                self.wire.push_back((NodeId(i as u32), to, m));
            }
        }

        fn with_log_limit(mut self, limit: u64) -> Harness {
            self.groups = std::mem::take(&mut self.groups)
                .into_iter()
                .map(|g| g.map(|g| g.with_log_limit(limit)))
                .collect();
            self
        }

        fn propose(&mut self, command: &[u8]) {
            let l = self.leader().expect("a leader");
            assert!(self.groups[l].as_mut().unwrap().propose(command.to_vec()));
            self.drain(l);
        }

        fn restart(&mut self, i: usize, timing: RaftTiming) {
            let members: Vec<NodeId> = (0..self.groups.len() as u32).map(NodeId).collect();
            let g = RaftGroup::new(NodeId(i as u32), members, timing, &self.records[i]);
            self.groups[i] = Some(g.unwrap().with_log_limit(LIMIT));
            self.applied[i].clear();
        }

        fn run(&mut self, ticks: usize) {
            for _ in 0..ticks {
                for i in 0..self.groups.len() {
                    if let Some(g) = self.groups[i].as_mut() {
                        g.tick();
                    }
                    self.drain(i);
                }
                while let Some((from, to, m)) = self.wire.pop_front() {
                    let i = to.index();
                    if let Some(g) = self.groups[i].as_mut() {
                        g.step(from, &m).unwrap();
                        self.drain(i);
                    }
                }
            }
        }

        fn leader(&self) -> Option<usize> {
            (0..self.groups.len())
                .find(|&i| self.groups[i].as_ref().is_some_and(RaftGroup::is_leader))
        }
    }

    /// A driver keeps only the records from the latest checkpoint on.
    fn persist(durable: &mut Vec<RaftRecord>, records: Vec<RaftRecord>) {
        for record in records {
            if record.is_checkpoint() {
                durable.clear();
            }
            durable.push(record);
        }
    }

    const LIMIT: u64 = 8;

    fn commands(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
        range.map(|i| format!("c{i}").into_bytes()).collect()
    }

    #[test]
    fn entries_cut_at_max_size_as_the_raft_crate_cuts_them() {
        let entries: Vec<Entry> = (1..=40u64)
            .map(|i| Entry {
                index: i,
                term: 1,
                data: vec![7u8; (i * 37 % 300) as usize].into(),
                ..Entry::default()
            })
            .collect();
        let store = LogStore {
            entry_bytes: data_bytes(&entries),
            entries,
            ..LogStore::default()
        };
        for max_size in [
            None,
            Some(0),
            Some(1),
            Some(500),
            Some(2_000),
            Some(raft::NO_LIMIT),
        ] {
            for (low, high) in [(1, 41), (5, 30), (40, 41), (7, 7)] {
                let mut expected = store.entries[low as usize - 1..high as usize - 1].to_vec();
                raft::util::limit_size(&mut expected, max_size);
                let got = store
                    .entries(low, high, max_size, GetEntriesContext::empty(false))
                    .unwrap();
                assert_eq!(got, expected, "entries({low}, {high}, {max_size:?})");
            }
        }
    }

    #[test]
    fn a_log_limit_bounds_every_members_log_and_durable_records() {
        let mut h = Harness::new(3).with_log_limit(LIMIT);
        h.run(40);
        for c in commands(0..100) {
            h.propose(&c);
            h.run(1);
            for g in h.groups.iter().flatten() {
                // One tick adds at most the proposal and a leader's empty entry.
                assert!(g.log_size().entries <= LIMIT + 2, "{:?}", g.log_size());
                let store = g.node.store();
                assert_eq!(g.log_size().bytes, data_bytes(&store.entries), "kept bytes");
            }
            for records in &h.records {
                let entries: usize = records
                    .iter()
                    .map(|r| match r {
                        RaftRecord::Entries(e) => e.len(),
                        RaftRecord::Snapshot { entries, .. } => entries.len(),
                        RaftRecord::HardState { .. } => 0,
                    })
                    .sum();
                assert!(
                    entries as u64 <= 2 * LIMIT + 2,
                    "{entries} entries persisted"
                );
            }
        }
        h.run(5);
        for applied in &h.applied {
            assert_eq!(applied, &commands(0..100));
        }
        // Without a limit the same run keeps every entry.
        let mut h = Harness::new(3);
        h.run(40);
        for c in commands(0..100) {
            h.propose(&c);
            h.run(1);
        }
        let l = h.leader().unwrap();
        assert!(h.groups[l].as_ref().unwrap().log_size().entries >= 100);
    }

    #[test]
    fn a_member_that_missed_compacted_entries_catches_up_from_a_snapshot() {
        let mut h = Harness::new(3).with_log_limit(LIMIT);
        h.run(40);
        let l = h.leader().unwrap();
        let lagging = (l + 1) % 3;
        h.propose(b"before");
        h.run(5);
        h.groups[lagging] = None;
        for c in commands(0..5 * LIMIT as u32) {
            h.propose(&c);
            h.run(1);
        }
        // The survivors compacted past everything the lagging member has.
        let first = h.groups[l].as_ref().unwrap().node.store().first();
        assert!(first > 3, "leader's log starts at {first}");
        h.restart(lagging, TIMING);
        assert_eq!(h.applied[lagging], Vec::<Vec<u8>>::new());
        h.run(20);
        let mut expected = vec![b"before".to_vec()];
        expected.extend(commands(0..5 * LIMIT as u32));
        assert_eq!(
            h.applied[lagging], expected,
            "restored from the leader's snapshot"
        );
        // And it keeps up with what follows.
        h.propose(b"after");
        h.run(5);
        expected.push(b"after".to_vec());
        assert_eq!(h.applied[lagging], expected);
        h.assert_kept_bytes();
    }

    #[test]
    fn a_restarted_member_restores_its_own_snapshot_then_replays_the_rest() {
        let mut h = Harness::new(3).with_log_limit(LIMIT);
        h.run(40);
        for c in commands(0..3 * LIMIT as u32 + 3) {
            h.propose(&c);
            h.run(1);
        }
        h.run(5);
        let l = h.leader().unwrap();
        let f = (l + 1) % 3;
        assert!(h.records[f][0].is_checkpoint(), "the follower compacted");
        let before = h.applied[f].clone();
        h.restart(f, TIMING);
        h.drain(f);
        assert_eq!(h.applied[f], before, "snapshot plus the entries after it");
        h.assert_kept_bytes();
    }

    #[test]
    fn elects_a_leader_and_commits_on_every_member() {
        let mut h = Harness::new(3);
        h.run(40);
        let l = h.leader().expect("a leader after 40 ticks");
        assert!(h.groups[l].as_mut().unwrap().propose(b"view 1".to_vec()));
        h.drain(l);
        h.run(5);
        for applied in &h.applied {
            assert_eq!(applied, &vec![b"view 1".to_vec()]);
        }
    }

    #[test]
    fn a_restarted_member_replays_its_records_and_a_new_leader_keeps_committed_commands() {
        let mut h = Harness::new(3);
        h.run(40);
        let l = h.leader().unwrap();
        h.groups[l].as_mut().unwrap().propose(b"a".to_vec());
        h.drain(l);
        h.run(5);
        // Crash the leader; the others elect a new one and commit more.
        h.groups[l] = None;
        h.run(60);
        let l2 = h.leader().expect("a new leader");
        assert_ne!(l, l2);
        h.groups[l2].as_mut().unwrap().propose(b"b".to_vec());
        h.drain(l2);
        h.run(5);
        // Restart the old leader from its records: it replays "a", then learns "b".
        let members: Vec<NodeId> = (0..3).map(NodeId).collect();
        let g = RaftGroup::new(NodeId(l as u32), members, TIMING, &h.records[l]).unwrap();
        h.groups[l] = Some(g);
        h.applied[l].clear();
        h.run(20);
        assert_eq!(h.applied[l], vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(h.applied[l2], vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn garbage_and_foreign_messages_are_errors_not_panics() {
        let members: Vec<NodeId> = (0..3).map(NodeId).collect();
        let mut g = RaftGroup::new(NodeId(0), members.clone(), TIMING, &[]).unwrap();
        assert!(g.step(NodeId(1), &RaftMsg(vec![0xff, 0x01, 0x02])).is_err());
        assert!(g.step(NodeId(7), &RaftMsg(Vec::new())).is_err());
        assert!(RaftGroup::new(NodeId(9), members, TIMING, &[]).is_err());
    }

    /// A bootstrapped group has its leader at once, commits its first proposal in one
    /// exchange (no election), and persists every member's term-1 vote, so a restarted
    /// member does not vote again in term 1.
    #[test]
    fn a_bootstrapped_group_commits_without_an_election() {
        let mut h = Harness::new(3);
        for g in h.groups.iter_mut().flatten() {
            g.bootstrap(NodeId(1)).unwrap();
        }
        for i in 0..3 {
            h.drain(i);
        }
        assert_eq!(h.leader(), Some(1), "no tick, no message: already elected");
        h.propose(b"first");
        // One delivery round: appends out, acknowledgements back, commit out.
        while let Some((from, to, m)) = h.wire.pop_front() {
            h.groups[to.index()]
                .as_mut()
                .unwrap()
                .step(from, &m)
                .unwrap();
            h.drain(to.index());
        }
        for applied in &h.applied {
            assert_eq!(applied, &vec![b"first".to_vec()]);
        }
        for records in &h.records {
            assert!(records.iter().any(|r| matches!(
                r,
                RaftRecord::HardState {
                    term: 1,
                    vote: 2,
                    ..
                }
            )));
        }
        let members: Vec<NodeId> = (0..3).map(NodeId).collect();
        let mut g = RaftGroup::new(NodeId(0), members.clone(), TIMING, &h.records[0]).unwrap();
        assert!(g.bootstrap(NodeId(0)).is_err(), "not fresh");
        let mut g = RaftGroup::new(NodeId(0), members, TIMING, &[]).unwrap();
        assert!(g.bootstrap(NodeId(7)).is_err(), "not a member");
    }

    #[test]
    fn followers_do_not_accept_proposals() {
        let mut h = Harness::new(3);
        h.run(40);
        let l = h.leader().unwrap();
        let f = (l + 1) % 3;
        assert!(!h.groups[f].as_mut().unwrap().propose(b"x".to_vec()));
    }
}
