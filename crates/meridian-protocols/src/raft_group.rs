//! # `raft_group`: a Raft group as a substrate piece, for any protocol that needs consensus
//!
//! A thin, sans-IO wrapper around the `raft` crate's [`RawNode`] (the Raft TiKV runs in
//! production). A protocol embeds a [`RaftGroup`] in a node, feeds it ticks and peer
//! messages, proposes opaque commands, and after every event calls [`RaftGroup::drain`],
//! which returns what to do: messages to send, records to persist, commands that committed
//! (in log order, exactly once per incarnation). Tiga's view manager (§4) and Clock-SI's
//! replicated partitions use it; nothing here knows either protocol.
//!
//! ## Choices
//! * **Determinism.** `raft` draws each randomized election timeout from `thread_rng`; we pin
//!   the range to one value (`min = election_ticks`, `max = election_ticks + 1`) and let the
//!   caller draw `election_ticks` from the node's seeded RNG, so a run replays from its seed.
//! * **Durability.** Every appended entry batch and every hard-state change becomes a
//!   [`RaftRecord`], emitted before the messages that depend on it (drivers apply a node's
//!   effects in order). A restarted node rebuilds its `MemStorage` from its records and
//!   re-applies the committed commands from the start (`applied` = 0): the state machine
//!   above is rebuilt by replay, so it needs no snapshot of its own.
//! * **Wire.** Raft messages travel as their protobuf encoding inside [`RaftMsg`], so
//!   protocols keep one serde message type; a frame that does not decode is an error the
//!   caller drops, never a panic.
//! * **Limits.** No log compaction or snapshots: the groups Meridian runs commit rarely (view
//!   changes) or are bounded by a run. `max_inflight_msgs` and `max_size_per_msg` bound what
//!   one peer is sent at once.

use meridian_core::NodeId;
use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, EntryType, HardState, Message};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole};
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
}

/// What the group asks its host to do after an event.
#[derive(Debug, Default)]
pub struct RaftOutput {
    /// Persist these first, in order.
    pub records: Vec<RaftRecord>,
    /// Then send these.
    pub messages: Vec<(NodeId, RaftMsg)>,
    /// Commands committed since the last drain, in log order.
    pub committed: Vec<Vec<u8>>,
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

/// One member of a Raft group.
pub struct RaftGroup {
    node: RawNode<MemStorage>,
    /// Raft id `i + 1` is `members[i]`.
    members: Vec<NodeId>,
}

impl fmt::Debug for RaftGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftGroup")
            .field("members", &self.members)
            .field("leader", &self.leader())
            .field("term", &self.node.raft.term)
            .finish()
    }
}

impl RaftGroup {
    /// Member `me` of the group `members`, rebuilt from its `recovered` records (empty at
    /// first boot).
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
        assert!(timing.heartbeat_ticks >= 1 && timing.election_ticks > timing.heartbeat_ticks);
        let voters: Vec<u64> = (1..=members.len() as u64).collect();
        let storage = MemStorage::new_with_conf_state(ConfState::from((voters, vec![])));
        restore(&storage, recovered)?;
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
            applied: 0,
            ..Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&config, storage, &logger).map_err(|e| format!("raft: {e}"))?;
        Ok(RaftGroup { node, members })
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

    pub fn term(&self) -> u64 {
        self.node.raft.term
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

    /// Everything the group wants done since the last call (Raft's `Ready` cycle).
    pub fn drain(&mut self) -> RaftOutput {
        let mut out = RaftOutput::default();
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            self.push_messages(&mut out, ready.take_messages());
            assert!(ready.snapshot().is_empty(), "raft_group never snapshots");
            self.apply(&mut out, ready.take_committed_entries());
            if !ready.entries().is_empty() {
                let entries = ready.entries();
                out.records
                    .push(RaftRecord::Entries(entries.iter().map(to_record).collect()));
                self.storage()
                    .wl()
                    .append(entries)
                    .expect("raft appends in order");
            }
            if let Some(hs) = ready.hs() {
                out.records.push(hard_state_record(hs));
                self.storage().wl().set_hardstate(hs.clone());
            }
            self.push_messages(&mut out, ready.take_persisted_messages());
            let mut light = self.node.advance(ready);
            if let Some(commit) = light.commit_index() {
                let mut hs = self.storage().rl().hard_state().clone();
                hs.commit = commit;
                out.records.push(hard_state_record(&hs));
                self.storage().wl().set_hardstate(hs);
            }
            self.push_messages(&mut out, light.take_messages());
            self.apply(&mut out, light.take_committed_entries());
            self.node.advance_apply();
        }
        out
    }

    fn storage(&self) -> &MemStorage {
        self.node.store()
    }

    fn raft_id(&self, node: NodeId) -> Result<u64, String> {
        self.members
            .iter()
            .position(|&m| m == node)
            .map(|i| i as u64 + 1)
            .ok_or_else(|| format!("node {node} is not a member of the raft group"))
    }

    fn push_messages(&self, out: &mut RaftOutput, messages: Vec<Message>) {
        for m in messages {
            let to = self.members[(m.to - 1) as usize];
            let bytes = m.write_to_bytes().expect("a raft message always encodes");
            out.messages.push((to, RaftMsg(bytes)));
        }
    }

    fn apply(&self, out: &mut RaftOutput, entries: Vec<Entry>) {
        for e in entries {
            // Leaders append an empty entry at the start of their term; configuration
            // changes are never proposed.
            if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                out.committed.push(e.data.to_vec());
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

fn hard_state_record(hs: &HardState) -> RaftRecord {
    RaftRecord::HardState {
        term: hs.term,
        vote: hs.vote,
        commit: hs.commit,
    }
}

/// Replays a member's records into its storage.
fn restore(storage: &MemStorage, records: &[RaftRecord]) -> Result<(), String> {
    for record in records {
        match record {
            RaftRecord::Entries(entries) => {
                let entries: Vec<Entry> = entries
                    .iter()
                    .map(|e| Entry {
                        index: e.index,
                        term: e.term,
                        data: e.data.clone().into(),
                        ..Entry::default()
                    })
                    .collect();
                storage
                    .wl()
                    .append(&entries)
                    .map_err(|e| format!("raft record replay: {e}"))?;
            }
            RaftRecord::HardState { term, vote, commit } => {
                storage.wl().set_hardstate(HardState {
                    term: *term,
                    vote: *vote,
                    commit: *commit,
                    ..HardState::default()
                });
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

        fn drain(&mut self, i: usize) {
            let Some(g) = self.groups[i].as_mut() else {
                return;
            };
            let out = g.drain();
            self.records[i].extend(out.records);
            self.applied[i].extend(out.committed);
            for (to, m) in out.messages {
                self.wire.push_back((NodeId(i as u32), to, m));
            }
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

    #[test]
    fn followers_do_not_accept_proposals() {
        let mut h = Harness::new(3);
        h.run(40);
        let l = h.leader().unwrap();
        let f = (l + 1) % 3;
        assert!(!h.groups[f].as_mut().unwrap().propose(b"x".to_vec()));
    }
}
