//! Unit tests of the queue, conflict detection, agreement and hash logic, driving single
//! nodes through their sans-IO handlers with hand-picked clock readings.

use super::*;
use meridian_core::node::{Ctx, Setup};
use meridian_core::node::{Effect, NodeEffect};
use meridian_core::txn::{ClientResponse, Op, Operand, Outcome, Piece, Rmw};
use meridian_core::value::encode_int;
use meridian_core::SmallBytes;
use meridian_core::{Context, NodeRng, Procedures, ShardList, Timestamp, Topology, TxnId};
use rand::SeedableRng;
use std::sync::Arc;

fn key(s: &str) -> SmallBytes {
    SmallBytes::copy_from_slice(s.as_bytes())
}

/// A harness around shard 0's second replica (a follower in the initial view).
fn follower_of_shard_0(s: &Setup<Tiga>) -> Harness {
    Harness::new(s, s.cluster.replicas(ShardId(0))[1])
}

fn setup(config: &str) -> Setup<Tiga> {
    let cluster = Cluster::new(Topology::load("gcp-tiga").unwrap(), &[]).unwrap();
    let options = Tiga::parse_options(&ProtocolConfig::parse(config).unwrap(), &cluster).unwrap();
    Setup {
        cluster: Arc::new(cluster),
        options,
        procedures: Arc::new(Procedures::new()),
    }
}

struct Harness {
    node: TigaNode,
    rng: NodeRng,
    next_timer: u64,
    id: NodeId,
}

impl Harness {
    fn new(setup: &Setup<Tiga>, id: NodeId) -> Harness {
        Harness {
            node: Tiga::build(id, setup, &[]),
            rng: NodeRng::seed_from_u64(1),
            next_timer: 0,
            id,
        }
    }

    /// Runs one handler at local time `now`; returns its effects.
    fn with_ctx(
        &mut self,
        now: u64,
        handler: impl FnOnce(&mut TigaNode, &mut Ctx<'_, TigaNode>),
    ) -> Vec<NodeEffect<TigaNode>> {
        let mut effects = Vec::new();
        let mut ctx = Context::new(
            self.id,
            now,
            &mut self.rng,
            &mut effects,
            &mut self.next_timer,
        );
        handler(&mut self.node, &mut ctx);
        // As a driver does: each handled event is a batch of its own.
        self.node.on_batch_end(&mut ctx);
        effects
    }

    fn deliver(&mut self, now: u64, from: NodeId, msg: Msg) -> Vec<NodeEffect<TigaNode>> {
        self.with_ctx(now, |node, ctx| node.on_message(ctx, from, msg))
    }

    fn timer(&mut self, now: u64, timer: Timer) -> Vec<NodeEffect<TigaNode>> {
        self.with_ctx(now, |node, ctx| node.on_timer(ctx, timer))
    }

    fn wake(&mut self, now: u64) -> Vec<NodeEffect<TigaNode>> {
        self.timer(now, Timer::Wake { at_ns: now })
    }

    fn server(&self) -> &Server {
        match &self.node {
            TigaNode::Server(s) => s,
            _ => panic!("not a server"),
        }
    }
}

fn sent(effects: &[NodeEffect<TigaNode>]) -> Vec<(NodeId, Msg)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Send { to, msg } => Some((*to, msg.clone())),
            _ => None,
        })
        .collect()
}

fn fast_replies(effects: &[NodeEffect<TigaNode>]) -> Vec<FastReply> {
    sent(effects)
        .into_iter()
        .flat_map(|(_, m)| match m {
            Msg::FastReply(r) => vec![FastReply::clone(&r)],
            // A leader's release answers in one batch per coordinator.
            Msg::FastReplies(rs) => rs.iter().map(|r| FastReply::clone(r)).collect(),
            _ => Vec::new(),
        })
        .collect()
}

fn notifies(effects: &[NodeEffect<TigaNode>]) -> Vec<(Timestamp, bool)> {
    sent(effects)
        .into_iter()
        .filter_map(|(_, m)| match m {
            Msg::Notify { ts, sealed, .. } => Some((ts, sealed)),
            _ => None,
        })
        .collect()
}

const COORD: NodeId = NodeId(9);

fn body(seq: u64, t: u64, shard: u32, shards: &[u32], k: &str) -> TxnBody {
    TxnBody {
        id: TxnId::new(COORD, 0, seq),
        ts: Timestamp::new(t, COORD.0),
        shards: shards.iter().map(|&s| ShardId(s)).collect(),
        pieces: Arc::new(vec![(
            0,
            Piece::ops(
                ShardId(shard),
                vec![Op::Append(key(k), Operand::Literal(key(&seq.to_string())))],
            ),
        )]),
        aborted: false,
        decided: false,
    }
}

fn note(txn: TxnId, shard: u32, t: u64, sealed: bool) -> Msg {
    Msg::Notify {
        txn,
        shard: ShardId(shard),
        ts: Timestamp::new(t, COORD.0),
        sealed,
        echo: false,
        abort: false,
        g_view: 0,
    }
}

#[test]
fn super_quorum_and_bound() {
    assert_eq!(super_quorum(1), 3);
    assert_eq!(super_quorum(2), 4);
    assert_eq!(super_quorum(3), 6);
    let s = setup("");
    let c = &s.cluster;
    let sc = c.coordinators[0];
    let hk = c.coordinators[6];
    assert_eq!(Tiga::bound_ms(c, sc, &[ShardId(0), ShardId(1)]), 122.0);
    assert_eq!(Tiga::bound_ms(c, hk, &[ShardId(2)]), 302.0);
}

#[test]
fn key_maps_detect_read_write_and_write_write_conflicts_only() {
    let mut m = KeyMaps::default();
    let t = |n| Timestamp::new(n, 0);
    m.record(&[key("r")], &[key("w")], t(10));
    // Read-read: no conflict at any timestamp.
    assert_eq!(m.conflict_floor(&[key("r")], &[], t(5)), None);
    // Write after a read, read after a write, write after a write: conflicts below 10.
    assert_eq!(m.conflict_floor(&[], &[key("r")], t(5)), Some(t(10)));
    assert_eq!(m.conflict_floor(&[key("w")], &[], t(5)), Some(t(10)));
    assert_eq!(m.conflict_floor(&[], &[key("w")], t(10)), Some(t(10)));
    assert_eq!(m.conflict_floor(&[], &[key("w")], t(11)), None);
    // The maps keep the maximum.
    m.record(&[], &[key("w")], t(3));
    assert_eq!(m.conflict_floor(&[], &[key("w")], t(5)), Some(t(10)));
    assert!(m.blocks(&[key("w")], &[]));
    assert!(!m.blocks(&[key("r")], &[]));
    assert!(conflicts(&[key("a")], &[], &[], &[key("a")]));
    assert!(!conflicts(&[key("a")], &[], &[key("a")], &[]));
}

/// The transactions of the slow replies among `effects`, in order.
fn slow_replies(effects: &[NodeEffect<TigaNode>]) -> Vec<TxnId> {
    sent(effects)
        .into_iter()
        .filter_map(|(_, m)| match m {
            Msg::SlowReply { txn, .. } => Some(txn),
            _ => None,
        })
        .collect()
}

/// A leader's log sync of `bodies` at their timestamps, then `(late, at)` re-timestamped.
fn log_sync(bodies: &[&TxnBody], (late, at): (TxnId, u64), leader: NodeId) -> Msg {
    let mut entries: Vec<(TxnId, Timestamp)> = bodies.iter().map(|b| (b.id, b.ts)).collect();
    entries.push((late, Timestamp::new(at, leader.0)));
    Msg::LogSync {
        shard: ShardId(0),
        from: 0,
        commit_point: entries.len() as u64,
        entries,
        aborted: Vec::new(),
        gc_floor: Timestamp::ZERO,
        cut: (0, Timestamp::ZERO),
        g_view: 0,
    }
}

#[test]
fn pushed_slow_replies_answer_every_synced_entry() {
    let s = setup("slow_replies=push");
    let mut h = follower_of_shard_0(&s);
    let (a, b) = (body(1, 100, 0, &[0], "x"), body(2, 200, 0, &[0], "y"));
    let late = body(3, 150, 0, &[0], "x");
    for (at, t) in [(10, &a), (20, &b), (30, &late)] {
        h.deliver(at, COORD, Msg::Submit(Box::new(t.clone())));
    }
    let leader = s.cluster.initial_leader(ShardId(0));
    let effects = h.deliver(1100, leader, log_sync(&[&a, &b], (late.id, 300), leader));
    assert_eq!(slow_replies(&effects), vec![a.id, b.id, late.id]);
}

/// A real timer can deliver a follower's wake-up after the leader's log sync of the same
/// transaction. The follower still answers fast first (the clock allowed the release), so
/// its coordinator is not left without this replica's fast reply and on the slow path.
#[test]
fn a_log_sync_overtaking_a_late_wake_up_still_gets_the_fast_reply() {
    let s = setup("");
    let mut h = follower_of_shard_0(&s);
    let a = body(1, 100, 0, &[0], "x");
    assert!(fast_replies(&h.deliver(10, COORD, Msg::Submit(Box::new(a.clone())))).is_empty());
    let leader = s.cluster.initial_leader(ShardId(0));
    let mut sync = log_sync(&[], (a.id, 100), leader);
    if let Msg::LogSync { entries, .. } = &mut sync {
        entries[0].1 = a.ts;
    }
    // The wake-up for 100 has not fired; the sync arrives at 101.
    let effects = h.deliver(101, leader, sync);
    let r = fast_replies(&effects);
    assert_eq!(
        r.len(),
        1,
        "the fast reply is sent before the entry is synced"
    );
    assert_eq!((r[0].txn, r[0].ts), (a.id, a.ts));
    assert_eq!(h.server().state_of(a.id), Some((State::Synced, a.ts)));
    h.server().log().check_invariants();
}

#[test]
fn the_queue_holds_until_the_clock_passes_the_timestamp_and_respects_conflicts() {
    let s = setup("");
    let mut h = follower_of_shard_0(&s);
    // Two conflicting transactions arrive out of order; a third, unrelated one in between.
    let a = body(1, 100, 0, &[0], "x");
    let b = body(2, 200, 0, &[0], "x");
    assert!(fast_replies(&h.deliver(10, COORD, Msg::Submit(Box::new(b.clone())))).is_empty());
    assert!(fast_replies(&h.deliver(20, COORD, Msg::Submit(Box::new(a.clone())))).is_empty());
    // At 150 only `a` is expired.
    let r = fast_replies(&h.wake(150));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].txn, a.id);
    assert_eq!(r[0].result, None);
    let r = fast_replies(&h.wake(250));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].txn, b.id);
    // A late conflicting transaction (timestamp below a released one) is held at a
    // follower: no fast reply, waits for the leader's log sync.
    let late = body(3, 150, 0, &[0], "x");
    assert!(fast_replies(&h.deliver(260, COORD, Msg::Submit(Box::new(late.clone())))).is_empty());
    assert!(fast_replies(&h.wake(1000)).is_empty());
    assert_eq!(h.server().state_of(late.id).unwrap().0, State::Held);
    // A late non-conflicting one is fine.
    let other = body(4, 150, 0, &[0], "y");
    assert_eq!(
        fast_replies(&h.deliver(1000, COORD, Msg::Submit(Box::new(other)))).len(),
        1
    );
    // Appendix E: the coordinator asks for slow replies of `a` and `late` (not synced yet:
    // nothing now, remembered).
    let inquiry = |txns: Vec<TxnId>| Msg::SlowInquiry {
        shard: ShardId(0),
        txns,
    };
    assert!(slow_replies(&h.deliver(1050, COORD, inquiry(vec![a.id, late.id]))).is_empty());
    // The log sync places the held one at the leader's timestamp and answers the asked
    // ones slowly.
    let leader = s.cluster.initial_leader(ShardId(0));
    let effects = h.deliver(1100, leader, log_sync(&[&a, &b], (late.id, 300), leader));
    assert_eq!(slow_replies(&effects), vec![a.id, late.id]);
    // A synced entry is answered at once.
    assert_eq!(
        slow_replies(&h.deliver(1110, COORD, inquiry(vec![b.id]))),
        vec![b.id]
    );
    assert_eq!(
        h.server().state_of(late.id),
        Some((State::Synced, Timestamp::new(300, leader.0)))
    );
    h.server().log().check_invariants();
    // Executed up to the commit-point, in order.
    let v = h
        .server()
        .store()
        .read_at(b"x", Timestamp::MAX)
        .unwrap()
        .unwrap();
    assert_eq!(v.value.as_deref(), Some(&b"123"[..]));
}

/// One batch of events, one message per destination: two transactions submitted together
/// (`Submits`) and released by one wake-up reach their coordinator as one `FastReplies`,
/// not two `FastReply` messages.
#[test]
fn a_batch_of_releases_answers_each_coordinator_with_one_message() {
    let s = setup("");
    let mut h = follower_of_shard_0(&s);
    let a = body(1, 100, 0, &[0], "x");
    let b = body(2, 110, 0, &[0], "y");
    let submits = Msg::Submits(vec![a.clone(), b.clone()]);
    assert!(sent(&h.deliver(10, COORD, submits)).is_empty());
    let out = sent(&h.wake(200));
    assert_eq!(out.len(), 1, "{out:?}");
    match &out[0] {
        (to, Msg::FastReplies(replies)) => {
            assert_eq!(*to, COORD);
            let ids: Vec<TxnId> = replies.iter().map(|r| r.txn).collect();
            assert_eq!(ids, vec![a.id, b.id]);
        }
        other => panic!("expected one FastReplies, got {other:?}"),
    }
}

#[test]
fn a_leader_updates_the_timestamp_of_a_late_arrival() {
    let s = setup("approach=detective");
    let leader = s.cluster.initial_leader(ShardId(0));
    let mut h = Harness::new(&s, leader);
    let a = body(1, 100, 0, &[0], "x");
    h.deliver(10, COORD, Msg::Submit(Box::new(a.clone())));
    let r = fast_replies(&h.wake(100));
    assert_eq!(r.len(), 1, "single-shard: executed and released");
    assert!(r[0].result.as_ref().unwrap().is_ok());
    let late = body(2, 50, 0, &[0], "x");
    // Its new timestamp is the leader's clock (already passed: executed at once).
    let r = fast_replies(&h.deliver(500, COORD, Msg::Submit(Box::new(late.clone()))));
    assert_eq!(
        h.server().state_of(late.id),
        Some((State::Released, Timestamp::new(500, leader.0)))
    );
    assert_eq!(r[0].ts, Timestamp::new(500, leader.0));
}

fn two_shard_leader(config: &str) -> (Harness, TxnBody) {
    let s = setup(config);
    let leader = s.cluster.initial_leader(ShardId(0));
    let mut h = Harness::new(&s, leader);
    let t = body(1, 200, 0, &[0, 1], "x");
    let e = h.deliver(10, COORD, Msg::Submit(Box::new(t.clone())));
    // An early, unsealed note of its timestamp goes to the other leader.
    assert_eq!(notifies(&e), vec![(t.ts, false)]);
    (h, t)
}

#[test]
fn agreement_case_1_releases_at_once() {
    let (mut h, t) = two_shard_leader("approach=detective");
    let e = h.wake(200);
    assert_eq!(
        fast_replies(&e).len(),
        1,
        "detective: executes before agreement"
    );
    assert_eq!(notifies(&e), vec![(t.ts, true)]);
    assert_eq!(h.server().state_of(t.id).unwrap().0, State::Sealed);
    h.deliver(210, NodeId(3), note(t.id, 1, 200, true));
    assert_eq!(h.server().state_of(t.id).unwrap().0, State::Released);
}

#[test]
fn agreement_case_2_waits_for_the_second_round_unless_told_to_skip_it() {
    for skip in [false, true] {
        let config = if skip {
            "approach=detective,unsafe_skip_second_round=true"
        } else {
            "approach=detective"
        };
        let (mut h, t) = two_shard_leader(config);
        h.wake(200);
        // The other leader used a smaller timestamp (sealed at it).
        h.deliver(210, NodeId(3), note(t.id, 1, 150, true));
        let state = h.server().state_of(t.id).unwrap().0;
        if skip {
            assert_eq!(state, State::Released);
            continue;
        }
        assert_eq!(state, State::Sealed, "case 2 must wait");
        // An unsealed note at the agreed timestamp is not enough either.
        h.deliver(220, NodeId(3), note(t.id, 1, 200, false));
        assert_eq!(h.server().state_of(t.id).unwrap().0, State::Sealed);
        h.deliver(230, NodeId(3), note(t.id, 1, 200, true));
        assert_eq!(h.server().state_of(t.id).unwrap().0, State::Released);
    }
}

#[test]
fn agreement_case_3_revokes_repositions_and_re_executes() {
    let (mut h, t) = two_shard_leader("approach=detective");
    h.wake(200);
    assert!(h
        .server()
        .store()
        .read_at(b"x", Timestamp::MAX)
        .unwrap()
        .is_some());
    let e = h.deliver(210, NodeId(3), note(t.id, 1, 300, true));
    assert_eq!(
        h.server().state_of(t.id),
        Some((State::Queued, Timestamp::new(300, COORD.0)))
    );
    assert_eq!(notifies(&e), vec![(Timestamp::new(300, COORD.0), false)]);
    assert!(
        h.server()
            .store()
            .read_at(b"x", Timestamp::MAX)
            .unwrap()
            .is_none(),
        "the invalid execution is revoked"
    );
    // At 300 it is re-executed and sealed at the agreed timestamp, then released.
    let e = h.wake(300);
    let r = fast_replies(&e);
    assert_eq!(r.len(), 1);
    assert!(r[0].reexecuted);
    assert_eq!(r[0].ts, Timestamp::new(300, COORD.0));
    assert_eq!(h.server().state_of(t.id).unwrap().0, State::Released);
}

/// The value of `x` a read at `t` sees on `h`'s store (pending versions included).
fn x_at(h: &Harness, t: u64) -> Option<String> {
    let v = h
        .server()
        .store()
        .read_at(b"x", Timestamp::new(t, u32::MAX));
    let bytes = v.unwrap()?.value.clone()?;
    Some(String::from_utf8(bytes.to_vec()).unwrap())
}

/// A detective leader of shard 0 holding two two-shard transactions on `x`, T1 at 200 and
/// T2 at 210, both expired: T1 sealed and answered.
fn two_on_x(config: &str) -> (Harness, TxnBody, TxnBody, Vec<NodeEffect<TigaNode>>) {
    let (mut h, t1) = two_shard_leader(config);
    let t2 = body(2, 210, 0, &[0, 1], "x");
    h.deliver(20, COORD, Msg::Submit(Box::new(t2.clone())));
    assert_eq!(fast_replies(&h.wake(200)).len(), 1, "T1 is final at once");
    let e = h.wake(210);
    (h, t1, t2, e)
}

#[test]
fn a_pipelined_leader_executes_behind_a_sealed_predecessor_and_answers_after_its_release() {
    // Without pipelining T2 waits, unexecuted, for T1's agreement (a WAN delay).
    let (h, _, t2, e) = two_on_x("approach=detective,pipeline=false");
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Queued);
    assert!(notifies(&e).is_empty());
    let (mut h, t1, t2, e) = two_on_x("approach=detective");
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Sealed);
    assert_eq!(
        notifies(&e),
        vec![(t2.ts, true)],
        "sealed: its timestamp is promised"
    );
    assert!(fast_replies(&e).is_empty(), "T1 may still be revoked");
    assert_eq!(
        x_at(&h, 210).as_deref(),
        Some("12"),
        "executed on T1's pending write"
    );
    // T2's own agreement completes first: still held behind T1.
    h.deliver(211, NodeId(3), note(t2.id, 1, 210, true));
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Sealed);
    // T1 agreed and released: T2's execution is final, answered and released.
    let e = h.deliver(212, NodeId(3), note(t1.id, 1, 200, true));
    let r = fast_replies(&e);
    assert_eq!((r.len(), r[0].txn, r[0].reexecuted), (1, t2.id, false));
    assert_eq!(h.server().state_of(t1.id).unwrap().0, State::Released);
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Released);
}

#[test]
fn a_revoked_predecessor_re_executes_the_sealed_transactions_behind_it() {
    let (mut h, t1, t2, _) = two_on_x("approach=detective");
    assert_eq!(x_at(&h, 210).as_deref(), Some("12"));
    // Case 3 for T1: agreed at 300, behind T2. T2 ran on T1's revoked write, so it runs
    // again — and, nothing conflicting ahead any more, it is final and answers.
    let e = h.deliver(215, NodeId(3), note(t1.id, 1, 300, true));
    assert_eq!(
        h.server().state_of(t1.id),
        Some((State::Queued, Timestamp::new(300, COORD.0)))
    );
    assert_eq!(
        x_at(&h, 210).as_deref(),
        Some("2"),
        "T1's write is gone from T2's"
    );
    let r = fast_replies(&e);
    assert_eq!((r.len(), r[0].txn, r[0].reexecuted), (1, t2.id, true));
    h.deliver(216, NodeId(3), note(t2.id, 1, 210, true));
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Released);
    // T1 re-executes at 300 on T2's committed write and is released there.
    h.wake(300);
    assert_eq!(x_at(&h, 300).as_deref(), Some("21"));
    assert_eq!(h.server().state_of(t1.id).unwrap().0, State::Released);
}

#[test]
fn preventive_leaders_reply_only_after_agreement() {
    let (mut h, t) = two_shard_leader("approach=preventive");
    let e = h.wake(200);
    assert!(fast_replies(&e).is_empty());
    assert_eq!(notifies(&e), vec![(t.ts, true)]);
    let e = h.deliver(200, NodeId(3), note(t.id, 1, 200, true));
    assert_eq!(fast_replies(&e).len(), 1);
    assert_eq!(h.server().state_of(t.id).unwrap().0, State::Released);
}

/// Preventive leaders pipeline like detective ones: a conflicting successor seals and
/// executes on its predecessor's pending write while the predecessor awaits agreement, so
/// a hot key admits more than one transaction per agreement delay (`pipeline=false`: it
/// waits, unexecuted). Both replies still wait for agreement.
#[test]
fn a_preventive_leader_seals_a_successor_before_its_predecessor_agrees() {
    let on_x = |config: &str| {
        let (mut h, t1) = two_shard_leader(config);
        let t2 = body(2, 210, 0, &[0, 1], "x");
        h.deliver(20, COORD, Msg::Submit(Box::new(t2.clone())));
        assert!(fast_replies(&h.wake(200)).is_empty(), "T1 awaits agreement");
        let e = h.wake(210);
        (h, t1, t2, e)
    };
    let (h, _, t2, e) = on_x("approach=preventive,pipeline=false");
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Queued);
    assert!(notifies(&e).is_empty());
    let (mut h, t1, t2, e) = on_x("approach=preventive");
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Sealed);
    assert_eq!(notifies(&e), vec![(t2.ts, true)]);
    assert!(fast_replies(&e).is_empty());
    assert_eq!(
        x_at(&h, 210).as_deref(),
        Some("12"),
        "ran on T1's pending write"
    );
    // T2 agrees first: no reply while T1, ahead of it on x, is unreleased.
    let e = h.deliver(211, NodeId(3), note(t2.id, 1, 210, true));
    assert!(fast_replies(&e).is_empty());
    // T1 agrees: both answer, T2 without re-executing.
    let e = h.deliver(212, NodeId(3), note(t1.id, 1, 200, true));
    let replies: Vec<_> = fast_replies(&e)
        .iter()
        .map(|r| (r.txn, r.reexecuted))
        .collect();
    assert_eq!(replies, vec![(t1.id, false), (t2.id, false)]);
    assert_eq!(h.server().state_of(t2.id).unwrap().0, State::Released);
}

#[test]
fn leader_and_follower_fast_replies_carry_equal_hashes() {
    let s = setup("approach=detective");
    let mut leader = Harness::new(&s, s.cluster.initial_leader(ShardId(0)));
    let mut follower = follower_of_shard_0(&s);
    let mut hashes = Vec::new();
    for (i, h) in [&mut leader, &mut follower].into_iter().enumerate() {
        let mut replies = Vec::new();
        for seq in 1..=3 {
            let b = body(seq, 100 * seq, 0, &[0], if seq == 2 { "y" } else { "x" });
            h.deliver(0, COORD, Msg::Submit(Box::new(b)));
        }
        for t in [100, 200, 300] {
            replies.extend(fast_replies(&h.wake(t)));
        }
        assert_eq!(replies.len(), 3, "node {i}");
        hashes.push(
            replies
                .iter()
                .map(|r| (r.txn, r.ts, r.hash))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(hashes[0], hashes[1]);
    // Different histories give different hashes.
    assert_ne!(hashes[0][0].2, hashes[0][2].2);
}

#[test]
fn options_are_checked() {
    let parse = |text: &str| Options::parse(&ProtocolConfig::parse(text).unwrap());
    assert!(parse("delta_ms=5").is_ok());
    assert!(parse("detla_ms=5").is_err());
    assert!(parse("approach=maybe").is_err());
    let err = |text: &str| parse(text).unwrap_err();
    assert!(err("headroom=huge").contains("paper"));
    assert!(err("path=fastest").contains("auto"));
    assert!(err("adaptive_percentile=150").contains("0..=100"));
    assert!(err("headroom_offset_ms=NaN").contains("headroom_offset_ms"));
    assert!(err("coordination=free").contains("epsilon_ms"));
    assert!(err("coordination=free,epsilon_ms=-1").contains("non-negative"));
    let ok = "headroom=paper,headroom_offset_ms=-20,path=auto,coordination=free,epsilon_ms=0.1";
    assert!(parse(ok).is_ok());
    let s = setup("");
    assert!(leaders_colocated(&s.cluster, 10.0));
}

fn plan_for(config: &str, coordinator: usize) -> Plan {
    let s = setup(config);
    let c = &s.cluster;
    let opts = s.options.clone();
    let shards = [ShardId(0), ShardId(1), ShardId(2)];
    let leaders: Vec<NodeId> = shards.iter().map(|&s| c.initial_leader(s)).collect();
    Estimator::new(c.coordinators[coordinator], c.nodes.len()).plan(c, &shards, &leaders, &opts)
}

#[test]
fn headroom_covers_the_farthest_super_quorum_member_plus_delta() {
    const MS: u64 = 1_000_000;
    // FI's farthest replica is BR, 90 ms away (topology estimate before any probe).
    assert_eq!(plan_for("headroom=paper", 2).headroom_ns, 100 * MS);
    assert_eq!(plan_for("", 2).headroom_ns, 96 * MS);
    assert_eq!(plan_for("headroom_offset_ms=-30", 2).headroom_ns, 66 * MS);
    assert_eq!(plan_for("headroom_offset_ms=-300", 2).headroom_ns, 0);
    assert_eq!(plan_for("headroom=zero", 2).headroom_ns, 0);
}

#[test]
fn auto_path_plans_the_slow_path_where_a_simple_quorum_is_near_section_6() {
    const MS: u64 = 1_000_000;
    // FI: the leaders (SC) are 61 ms away and the FI follower is local, so leader reply
    // plus slow reply (~61 ms after the timestamp) beats the super quorum's BR (~90 ms).
    let fi = plan_for("path=auto", 2);
    assert_eq!(fi.planned, Planned::Slow);
    assert_eq!(fi.headroom_ns, 67 * MS);
    // HK: the leaders (SC) are 100.5 ms away and the super quorum's BR 151 ms, so leader
    // reply plus slow reply beats the fast path, log sync included.
    assert_eq!(plan_for("path=auto", 6).planned, Planned::Slow);
    // SC: slow would save ~5 ms, below the 10 ms margin.
    assert_eq!(plan_for("path=auto", 0).planned, Planned::Fast);
    assert_eq!(
        plan_for("path=auto,path_margin_ms=0", 0).planned,
        Planned::Slow
    );
    assert_eq!(plan_for("", 2).planned, Planned::Fast);
}

#[test]
fn owd_samples_measure_clock_error_along_with_delay() {
    let s = setup("");
    let c = &s.cluster;
    let coord = c.coordinators[0];
    let server = c.shards[0][1];
    let mut e = Estimator::new(coord, c.nodes.len());
    // The server's clock is 5 ms ahead: every forward sample is 5 ms above the delay.
    for i in 0..16u64 {
        let sent = 1_000_000_000 + i * 100_000_000;
        let delay = 61_000_000 + i * 10_000;
        e.record(
            server,
            (sent, sent + delay + 5_000_000, sent + 2 * delay),
            16,
        );
    }
    assert_eq!(e.forward_ns(c, server, 50.0), 66_080_000);
    assert_eq!(e.forward_ns(c, server, 100.0), 66_150_000);
}

#[test]
fn a_leader_completes_the_multicast_of_a_vanished_coordinator() {
    // Shard 0's leader got a two-shard transaction; shard 1 never did (the coordinator
    // crashed mid-multicast), so no notification will ever come back.
    let (mut h, t) = two_shard_leader("approach=detective,recovery_ms=1000");
    h.wake(200);
    let ms = 1_000_000;
    let early = sent(&h.timer(500 * ms, Timer::Tick));
    assert!(!early.iter().any(|(_, m)| matches!(m, Msg::Submit(_))));
    let late = sent(&h.timer(1100 * ms, Timer::Tick));
    let s = setup("");
    let resent: Vec<NodeId> = late
        .iter()
        .filter(|(_, m)| matches!(m, Msg::Submit(b) if b.id == t.id))
        .map(|(to, _)| *to)
        .collect();
    for &r in s.cluster.replicas(ShardId(1)) {
        assert!(
            resent.contains(&r),
            "shard 1 replica {r} not sent the transaction"
        );
    }
}

#[test]
fn views_name_leaders_by_local_view_modulo_replicas() {
    let s = setup("");
    let c = &s.cluster;
    let opts = Options::parse(&ProtocolConfig::parse("").unwrap()).unwrap();
    let mut v = View::initial(c, &opts);
    assert_eq!(v.g_view, 0);
    assert_eq!(
        v.leaders(c),
        (0..3)
            .map(|s| c.initial_leader(ShardId(s)))
            .collect::<Vec<_>>()
    );
    v.l_views[1] += 4;
    assert_eq!(
        v.leader(c, ShardId(1)),
        c.replicas(ShardId(1))[(v.l_views[1] % 3) as usize]
    );
}

/// Algorithm 1's scan as written: from the head, every expired transaction with no
/// conflicting transaction ahead of it.
fn reference_ready(
    queue: &std::collections::BTreeSet<(Timestamp, TxnId)>,
    keys: &std::collections::HashMap<TxnId, (Vec<SmallBytes>, Vec<SmallBytes>)>,
    now_ns: u64,
) -> Vec<TxnId> {
    let mut blocked = KeyMaps::default();
    let mut ready = Vec::new();
    for &(ts, id) in queue {
        if ts.time_ns > now_ns {
            break;
        }
        let (r, w) = &keys[&id];
        if !blocked.blocks(r, w) {
            ready.push(id);
        }
        blocked.record(r, w, ts);
    }
    ready
}

#[test]
fn the_incremental_queue_releases_exactly_what_the_full_scan_releases() {
    use rand::Rng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut pq = PriorityQueue::default();
    let mut reference = std::collections::BTreeSet::new();
    let mut keys = std::collections::HashMap::new();
    let pick = |rng: &mut rand_chacha::ChaCha8Rng| -> Vec<SmallBytes> {
        let n = rng.gen_range(0..3);
        let mut v: Vec<SmallBytes> = (0..n)
            .map(|_| key(&format!("k{}", rng.gen_range(0..6))))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let mut released = 0;
    for step in 0..4000u64 {
        let now = step * 10;
        match rng.gen_range(0..10) {
            // A new arrival, possibly behind the clock or ahead of queued ones.
            0..=5 => {
                let id = TxnId::new(NodeId(1), 0, step);
                let ts = Timestamp::new(
                    now + rng.gen_range(0..200) - rng.gen_range(0..50).min(now),
                    1,
                );
                let (r, w) = (pick(&mut rng), pick(&mut rng));
                pq.insert(ts, id, &r, &w);
                reference.insert((ts, id));
                keys.insert(id, (r, w));
            }
            // A queued transaction moves to a larger timestamp (case 3, a leader's note).
            6 => {
                if let Some(&(ts, id)) = reference
                    .iter()
                    .nth(rng.gen_range(0..reference.len().max(1)))
                {
                    let (r, w) = &keys[&id];
                    let to = Timestamp::new(ts.time_ns + rng.gen_range(1..100), 2);
                    pq.remove(ts, id, r, w);
                    pq.insert(to, id, r, w);
                    reference.remove(&(ts, id));
                    reference.insert((to, id));
                }
            }
            _ => {}
        }
        // One round: both must name the same ready set; then release it.
        let expect = reference_ready(&reference, &keys, now);
        let got: Vec<TxnId> = pq
            .take_expired_candidates(now)
            .into_iter()
            .filter(|&(ts, id)| {
                let (r, w) = &keys[&id];
                !pq.blocked(ts, id, r, w)
            })
            .map(|(_, id)| id)
            .collect();
        assert_eq!(got, expect, "step {step}");
        for id in got {
            let &(ts, _) = reference.iter().find(|(_, i)| *i == id).unwrap();
            let (r, w) = &keys[&id];
            pq.remove(ts, id, r, w);
            reference.remove(&(ts, id));
            released += 1;
        }
        assert_eq!(pq.len(), reference.len());
    }
    assert!(released > 1000, "the test must release a lot: {released}");
    // Everything left is keyed: the per-key index holds only queued transactions' keys.
    while !reference.is_empty() {
        let now = u64::MAX / 2;
        for id in reference_ready(&reference, &keys, now) {
            let &(ts, _) = reference.iter().find(|(_, i)| *i == id).unwrap();
            let (r, w) = &keys[&id];
            pq.remove(ts, id, r, w);
            reference.remove(&(ts, id));
        }
    }
    assert!(pq.is_empty());
    assert_eq!(pq.key_count(), 0);
}

/// Shard 0's three replicas wired to each other with instant delivery (messages to
/// anyone else are dropped), driven tick by tick.
struct MiniShard {
    nodes: Vec<Harness>,
}

impl MiniShard {
    fn new(s: &Setup<Tiga>) -> MiniShard {
        let nodes = s
            .cluster
            .replicas(ShardId(0))
            .iter()
            .map(|&id| Harness::new(s, id))
            .collect();
        MiniShard { nodes }
    }

    fn index(&self, id: NodeId) -> Option<usize> {
        self.nodes.iter().position(|h| h.id == id)
    }

    /// Delivers `effects` of node `from` and everything they cause, at `now`.
    fn route(&mut self, now: u64, from: NodeId, effects: Vec<NodeEffect<TigaNode>>) {
        let mut queue: Vec<(NodeId, NodeId, Msg)> = Vec::new();
        let sends = |src: NodeId, effects: Vec<NodeEffect<TigaNode>>| {
            effects.into_iter().filter_map(move |e| match e {
                Effect::Send { to, msg } => Some((src, to, msg)),
                _ => None,
            })
        };
        queue.extend(sends(from, effects));
        while let Some((src, to, msg)) = queue.pop() {
            let Some(i) = self.index(to) else { continue };
            let out = self.nodes[i].deliver(now, src, msg);
            queue.extend(sends(to, out));
        }
    }

    fn submit(&mut self, now: u64, b: &TxnBody) {
        for i in 0..self.nodes.len() {
            let out = self.nodes[i].deliver(now, COORD, Msg::Submit(Box::new(b.clone())));
            let id = self.nodes[i].id;
            self.route(now, id, out);
        }
    }

    fn tick(&mut self, now: u64) {
        for i in 0..self.nodes.len() {
            let id = self.nodes[i].id;
            let mut out = self.nodes[i].wake(now);
            out.extend(self.nodes[i].timer(now, Timer::Tick));
            self.route(now, id, out);
        }
    }

    /// The other shards' leaders (not simulated: no transaction here involves them) tell
    /// their GC floors, as they would twice a second: far ahead, so shard 0's own floor
    /// bounds its truncation.
    fn floors_from_other_shards(&mut self, s: &Setup<Tiga>, now: u64) {
        for h in 0..self.nodes.len() {
            let g_view = self.nodes[h].server().view().g_view;
            for other in 1..s.cluster.shard_count() {
                let leader = s.cluster.initial_leader(ShardId(other));
                let floor = Msg::Floor {
                    shard: ShardId(other),
                    floor: Timestamp::new(now, 0),
                    g_view,
                };
                let out = self.nodes[h].deliver(now, leader, floor);
                let id = self.nodes[h].id;
                self.route(now, id, out);
            }
        }
    }
}

fn increment(seq: u64, t: u64, k: &str) -> TxnBody {
    TxnBody {
        id: TxnId::new(COORD, 0, seq),
        ts: Timestamp::new(t, COORD.0),
        shards: ShardList::from_slice(&[ShardId(0)]),
        pieces: Arc::new(vec![(
            0,
            Piece::ops(
                ShardId(0),
                vec![Op::Add(
                    key(k),
                    Operand::Literal(meridian_core::value::encode_int(1)),
                )],
            ),
        )]),
        aborted: false,
        decided: false,
    }
}

#[test]
fn gc_bounds_versions_maps_notes_and_replies_and_loses_no_increment() {
    let s = setup("approach=detective");
    let mut shard = MiniShard::new(&s);
    let ms = 1_000_000;
    let keys = 8usize;
    let mut seq = 0u64;
    // 30 s of virtual time, 4 increments per 20 ms tick on 8 keys: 6,000 transactions.
    for step in 1..=1500u64 {
        let now = step * 20 * ms;
        for _ in 0..4 {
            seq += 1;
            let b = increment(seq, now + 5 * ms, &format!("k{}", seq % keys as u64));
            shard.submit(now, &b);
        }
        shard.floors_from_other_shards(&s, now);
        shard.tick(now);
    }
    // Let the last ones release, sync and execute everywhere.
    for step in 1501..=1600u64 {
        shard.floors_from_other_shards(&s, step * 20 * ms);
        shard.tick(step * 20 * ms);
    }
    for h in &shard.nodes {
        let server = h.server();
        let store = server.store();
        let (notes, maps, unslimmed, floor) = server.gc_counts();
        // Without GC: 6,000 versions, 6,000 notes (leader), 6,000 replies kept. The last
        // 2 s were quiet, so the floor (400 ms behind the clock) is above every write.
        // The store is collected up to the latest cut only (its checkpoint is read from
        // the store), which trails the clock by commit_timeout + retry (4.4 s) plus a GC
        // period: the versions written since then stay, ~500 here.
        assert!(
            store.version_count() < 1200,
            "{} versions on {}",
            store.version_count(),
            h.id
        );
        assert!(maps <= 2 * keys, "{maps} rMap/wMap keys");
        assert!(notes <= 4, "{notes} notes");
        // Replies are kept for commit_timeout + retry (4.4 s): about 900 transactions.
        assert!(unslimmed < 1200, "{unslimmed} unslimmed transactions");
        assert!(floor.time_ns > 20_000 * ms, "floor {floor}");
        // Without truncation every one of the 6,000 transactions stays known, in the log
        // and in the stream (leader) or synced prefix (follower). With it, what is kept is
        // what was released in the last commit_timeout + retry (4.4 s, ~900) plus one GC
        // period, and truncated ids for ~9 s more (not counted here).
        let (known, logged, listed, cuts) = server.trunc_counts();
        assert!(cuts > 10, "{cuts} cuts on {}", h.id);
        assert!(known < 1500, "{known} transactions known on {}", h.id);
        assert!(logged < 1500, "{logged} log entries on {}", h.id);
        assert!(listed < 1500, "{listed} stream entries on {}", h.id);
        // Nothing was collected that was still needed: every increment is there.
        for k in 0..keys {
            let v = store
                .latest_committed(&key(&format!("k{k}")))
                .and_then(|v| v.value.clone())
                .expect("written");
            assert_eq!(
                meridian_core::value::decode_int(&v),
                Some((seq / keys as u64) as i64),
                "k{k} on {}",
                h.id
            );
        }
    }
    // A very late arrival (below the floor): the leader moves it above the floor, a
    // follower holds it for the leader's log sync.
    let now = 1601 * 20 * ms;
    let late = increment(seq + 1, 1_000 * ms, "k0");
    let floor = shard.nodes[0].server().gc_counts().3;
    for h in shard.nodes.iter_mut() {
        h.deliver(now, COORD, Msg::Submit(Box::new(late.clone())));
    }
    let leader = s.cluster.initial_leader(ShardId(0));
    for h in &shard.nodes {
        let (state, ts) = h.server().state_of(late.id).expect("known");
        if h.id == leader {
            assert!(ts > floor && state != State::Held, "{state:?} at {ts}");
        } else {
            assert_eq!(state, State::Held);
        }
    }
}

/// What a shard retains is bounded by its coordinators' word, not only by time (issue
/// 22): with the coordinator's finished watermark (on its probes, every 100 ms here, and
/// covering what it submitted 100 ms before), a replica slims a transaction at the first
/// GC after its release and truncates it at the next cut below the floors — it keeps
/// what was released in about the floor's lag (`retry_ms`, 400 ms) plus a GC period.
/// Without the watermark it keeps everything released in the last `commit_timeout_ms +
/// retry_ms` (4.4 s): here, all 1,500 transactions of 3 s of load.
#[test]
fn the_coordinators_finished_watermark_bounds_what_a_shard_retains() {
    let per_tick = 10u64;
    let run = |watermark: bool| {
        let s = setup("approach=detective");
        let mut shard = MiniShard::new(&s);
        let ms = 1_000_000;
        let mut seq = 0u64;
        for step in 1..=150u64 {
            let now = step * 20 * ms;
            for _ in 0..per_tick {
                seq += 1;
                shard.submit(now, &increment(seq, now + 5 * ms, &format!("k{}", seq % 8)));
            }
            if watermark && step % 5 == 0 {
                let finished_below = TxnId::new(COORD, 0, per_tick * (step - 5) + 1).seq;
                for h in shard.nodes.iter_mut() {
                    let probe = Msg::Probe {
                        sent_ns: now,
                        finished_below,
                    };
                    h.deliver(now, COORD, probe);
                }
            }
            shard.floors_from_other_shards(&s, now);
            shard.tick(now);
        }
        let counts: Vec<(usize, usize, usize)> = shard
            .nodes
            .iter()
            .map(|h| {
                let (known, logged, listed, _) = h.server().trunc_counts();
                (known, logged, listed)
            })
            .collect();
        // Nothing still needed was collected: every increment released so far is there.
        let store = shard.nodes[0].server().store();
        let total: i64 = (0..8)
            .filter_map(|k| store.latest_committed(&key(&format!("k{k}"))))
            .filter_map(|v| v.value.as_ref())
            .filter_map(|v| meridian_core::value::decode_int(v))
            .sum();
        (counts, total)
    };
    let (with, total_with) = run(true);
    let (without, total_without) = run(false);
    eprintln!("(known, logged, listed) per replica: with {with:?}, without {without:?}");
    assert_eq!(total_with, total_without, "the watermark changes no result");
    assert!(total_with > 1_000, "{total_with} increments applied");
    for (known, logged, listed) in with {
        assert!(known < 600, "{known} transactions known with the watermark");
        assert!(
            logged < 600 && listed < 600,
            "{logged} logged, {listed} listed"
        );
    }
    for (known, _, _) in without {
        assert!(
            known >= 1_490,
            "{known} known without it: the time window keeps all"
        );
    }
}

// ---- cross-shard abort and decomposed interactive transactions, end to end ---------------

type Driver = crate::testkit::Driver<TigaNode>;
const MS: u64 = crate::testkit::MS;

fn driver(config: &str) -> Driver {
    // Two shards of three replicas each (f = 1) in three regions, leaders co-located in A.
    let topology = crate::testkit::three_regions("tiga-test", 20.0, 30.0, 25.0);
    Driver::on_topology::<Tiga>(&topology, config, Procedures::new(), 7, 0)
}

fn int(v: i64) -> Operand {
    Operand::Literal(meridian_core::value::encode_int(v))
}

/// Runs a one-shot transaction from coordinator 0 to its outcome; returns it with the
/// invocation and completion times.
fn run_txn(d: &mut Driver, pieces: Vec<Piece>) -> (Outcome, u64, u64) {
    let invoke = d.now;
    let r = d.submit(0, meridian_core::txn::Txn { pieces });
    assert!(d.run_until_answered(&[r], 10_000 * MS), "answered");
    (d.outcome(r).cloned().unwrap(), invoke, d.now)
}

fn hist(
    index: u64,
    kind: meridian_check::history::EntryType,
    (invoke_ns, complete_ns): (u64, u64),
    ops: Vec<meridian_check::history::HistOp>,
) -> meridian_check::history::Entry {
    meridian_check::history::Entry {
        index,
        process: 0,
        kind,
        invoke_ns,
        complete_ns,
        ops,
        after: Vec::new(),
    }
}

fn list_at(server: &Server, k: &SmallBytes) -> Option<Vec<i64>> {
    let v = server.store().read_at(k, Timestamp::MAX).unwrap();
    v.and_then(|v| v.value.as_ref())
        .map(|v| meridian_core::value::decode_list(v).unwrap())
}

/// A two-shard transaction whose piece aborts on shard 1 only (`add` on a list: a type
/// mismatch) is aborted as a whole: the coordinator says `Aborted`, and shard 0's append
/// is visible neither to a later read nor on any replica. (Before cross-shard abort the
/// outcome was `Unknown` and shard 0's append stood.)
#[test]
fn a_piece_aborting_on_one_shard_aborts_the_transaction_on_every_shard() {
    use meridian_check::history::{EntryType, HistOp, ReadValue};
    for approach in ["preventive", "detective"] {
        let mut d = driver(&format!("approach={approach}"));
        let x = d.key_on(0, "x");
        let z = d.key_on(1, "z");
        let (s0, s1) = (ShardId(0), ShardId(1));
        let setup = vec![
            Piece::ops(s0, vec![Op::Append(x.clone(), int(1))]),
            Piece::ops(
                s1,
                vec![Op::Append(z.clone(), int(7)), Op::Append(z.clone(), int(8))],
            ),
        ];
        let (o0, i0, c0) = run_txn(&mut d, setup);
        assert!(o0.is_committed(), "{approach}: {o0:?}");
        let partial = vec![
            Piece::ops(s0, vec![Op::Append(x.clone(), int(2))]),
            Piece::ops(s1, vec![Op::Add(z.clone(), int(1))]),
        ];
        let (o1, i1, c1) = run_txn(&mut d, partial);
        assert_eq!(
            o1,
            Outcome::Aborted {
                reason: meridian_core::txn::AbortReason::TypeMismatch
            },
            "{approach}"
        );
        let read = vec![
            Piece::ops(s0, vec![Op::Get(x.clone())]),
            Piece::ops(s1, vec![Op::Get(z.clone())]),
        ];
        let (o2, i2, c2) = run_txn(&mut d, read);
        let Outcome::Committed { results, .. } = &o2 else {
            panic!("{approach}: read {o2:?}");
        };
        let decode = |r: &meridian_core::txn::PieceResult| {
            meridian_core::value::decode_list(r.outputs[0].as_ref().unwrap()).unwrap()
        };
        assert_eq!(
            decode(&results[0]),
            vec![1],
            "{approach}: x keeps no aborted append"
        );
        assert_eq!(decode(&results[1]), vec![7, 8], "{approach}");
        // Followers apply the same decision once the commit-point passes it.
        d.run_for(2_000 * MS);
        for shard in [0, 1] {
            for &r in &d.cluster.replicas(ShardId(shard)).to_vec() {
                let Some(TigaNode::Server(s)) = d.node(r) else {
                    panic!("replica {r}");
                };
                let (k, want) = if shard == 0 {
                    (&x, vec![1])
                } else {
                    (&z, vec![7, 8])
                };
                assert_eq!(list_at(s, k), Some(want), "{approach}: replica {r}");
            }
        }
        let (xs, zs) = ("x".to_string(), "z".to_string());
        let history = vec![
            hist(
                0,
                EntryType::Ok,
                (i0, c0),
                vec![
                    HistOp::Append {
                        key: xs.clone(),
                        value: 1,
                    },
                    HistOp::Append {
                        key: zs.clone(),
                        value: 7,
                    },
                    HistOp::Append {
                        key: zs.clone(),
                        value: 8,
                    },
                ],
            ),
            hist(
                1,
                EntryType::Fail,
                (i1, c1),
                vec![HistOp::Append {
                    key: xs.clone(),
                    value: 2,
                }],
            ),
            hist(
                2,
                EntryType::Ok,
                (i2, c2),
                vec![
                    HistOp::Read {
                        key: xs,
                        value: ReadValue::List(decode(&results[0])),
                    },
                    HistOp::Read {
                        key: zs,
                        value: ReadValue::List(decode(&results[1])),
                    },
                ],
            ),
        ];
        let verdict = meridian_check::check(&history, meridian_check::Model::StrictSerializable);
        assert!(verdict.valid, "{approach}: {verdict}");
    }
}

/// Decomposition: reads are served by read-only transactions and then from the session
/// (repeated reads, read-your-writes); the commit applies the buffered writes on both
/// shards, and a later session sees them.
#[test]
fn an_interactive_transaction_reads_its_writes_and_commits_across_shards() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let z = d.key_on(1, "z");
    let t = d.begin(0, None);
    assert_eq!(d.get(0, t, &x), ClientResponse::Read(None));
    d.put(0, t, &x, "a");
    d.put(0, t, &z, "b");
    assert_eq!(d.get(0, t, &x), ClientResponse::Read(Some(key("a"))));
    assert_eq!(d.get(0, t, &z), ClientResponse::Read(Some(key("b"))));
    let o = d.commit(0, t);
    assert!(o.is_committed(), "{o:?}");
    let u = d.begin(1, None);
    assert_eq!(d.get(1, u, &x), ClientResponse::Read(Some(key("a"))));
    assert_eq!(d.get(1, u, &z), ClientResponse::Read(Some(key("b"))));
    assert!(d.commit(1, u).is_committed());
}

/// Two sessions read the same keys; the first to commit wins, the second's commit fails
/// validation on one shard and is aborted on both: its write on the other shard never
/// shows. (Without the validation ops, or without cross-shard abort, the second commit
/// would commit or leave half of its writes.)
#[test]
fn a_session_whose_reads_changed_aborts_with_validation_and_writes_nothing() {
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let z = d.key_on(1, "z");
    let t = d.begin(0, None);
    let u = d.begin(1, None);
    assert_eq!(d.get(0, t, &z), ClientResponse::Read(None));
    assert_eq!(d.get(1, u, &z), ClientResponse::Read(None));
    d.put(0, t, &z, "t");
    d.put(1, u, &z, "u");
    d.put(1, u, &x, "u");
    assert!(d.commit(0, t).is_committed());
    assert_eq!(
        d.commit(1, u),
        Outcome::Aborted {
            reason: meridian_core::txn::AbortReason::Validation
        }
    );
    let v = d.begin(0, None);
    assert_eq!(d.get(0, v, &x), ClientResponse::Read(None));
    assert_eq!(d.get(0, v, &z), ClientResponse::Read(Some(key("t"))));
    // A step of a finished session, and a step racing another, are refused.
    assert!(matches!(
        d.get(1, u, &x),
        ClientResponse::Outcome(Outcome::Aborted { .. })
    ));
}

/// A multi-key read step (a `Get` with the `then` hint, TPC-C's Order-Status) reads every
/// key in one read transaction: a write committed between the session's `Get`s does not
/// show in the later ones, and the read-only session commits with nothing to validate.
/// Ignoring the hint, the `Get` of z would read u's write and the commit would fail
/// validation of x — as it does for the reads in separate steps below.
#[test]
fn a_multi_key_read_step_reads_one_snapshot_and_commits_without_validation() {
    use meridian_core::txn::{AbortReason, CommitPath, Step};
    let mut d = driver("");
    let x = d.key_on(0, "x");
    let z = d.key_on(1, "z");
    let t = d.begin(0, None);
    let first = d.step(
        0,
        Step::Get {
            txn: t,
            key: x.clone(),
            then: vec![z.clone()],
        },
    );
    assert_eq!(first, ClientResponse::Read(None));
    let u = d.begin(1, None);
    d.put(1, u, &x, "u");
    d.put(1, u, &z, "u");
    assert!(d.commit(1, u).is_committed());
    assert_eq!(d.get(0, t, &z), ClientResponse::Read(None));
    assert_eq!(
        crate::testkit::committed(&d.commit(0, t)),
        CommitPath::ReadOnly
    );
    // The same reads in separate steps, with a write in between, are validated.
    let v = d.begin(0, None);
    assert_eq!(d.get(0, v, &x), ClientResponse::Read(Some(key("u"))));
    let w = d.begin(1, None);
    d.put(1, w, &x, "w");
    assert!(d.commit(1, w).is_committed());
    assert_eq!(d.get(0, v, &z), ClientResponse::Read(Some(key("u"))));
    assert_eq!(
        d.commit(0, v),
        Outcome::Aborted {
            reason: AbortReason::Validation
        }
    );
}

/// Appendix F: read-modify-writes run inside the commit, so two sessions that both add to
/// the same counters on two shards (each after a validated read of its own key) both
/// commit, interleaved, and no increment is lost. Sent as a read then a put, the second
/// commit would fail validation of the counter it read.
#[test]
fn sessions_adding_to_the_same_counters_both_commit() {
    let mut d = driver("");
    let ytd = d.key_on(0, "ytd");
    let cnt = d.key_on(1, "cnt");
    let (mine, yours) = (d.key_on(1, "mine"), d.key_on(0, "yours"));
    let t = d.begin(0, None);
    let u = d.begin(1, None);
    assert_eq!(d.get(0, t, &mine), ClientResponse::Read(None));
    assert_eq!(d.get(1, u, &yours), ClientResponse::Read(None));
    for (coordinator, session, delta) in [(0, t, 5), (1, u, 7)] {
        d.modify(coordinator, session, &ytd, Rmw::Add(delta));
        d.modify(coordinator, session, &cnt, Rmw::Add(1));
        d.modify(coordinator, session, &cnt, Rmw::Add(1));
    }
    assert!(d.commit(0, t).is_committed());
    assert!(d.commit(1, u).is_committed());
    let v = d.begin(0, None);
    // A modify of a key the session already read lands on the value it saw.
    assert_eq!(
        d.get(0, v, &ytd),
        ClientResponse::Read(Some(encode_int(12)))
    );
    d.modify(0, v, &ytd, Rmw::Add(1));
    assert_eq!(
        d.get(0, v, &ytd),
        ClientResponse::Read(Some(encode_int(13)))
    );
    // A read after the session's own modify of an unread key sees the modify.
    d.modify(0, v, &cnt, Rmw::Add(10));
    assert_eq!(
        d.get(0, v, &cnt),
        ClientResponse::Read(Some(encode_int(14)))
    );
    assert!(d.commit(0, v).is_committed());
}

/// A read the client saw is still validated when the session's writes are
/// read-modify-writes: the stale one aborts the commit, and its adds are not applied.
#[test]
fn a_stale_read_aborts_a_session_of_modifies() {
    let mut d = driver("");
    let ytd = d.key_on(0, "ytd");
    let bal = d.key_on(1, "bal");
    let t = d.begin(0, None);
    assert_eq!(d.get(0, t, &bal), ClientResponse::Read(None));
    d.modify(0, t, &ytd, Rmw::Add(5));
    let u = d.begin(1, None);
    d.put(1, u, &bal, "changed");
    assert!(d.commit(1, u).is_committed());
    assert_eq!(
        d.commit(0, t),
        Outcome::Aborted {
            reason: meridian_core::txn::AbortReason::Validation
        }
    );
    let v = d.begin(0, None);
    assert_eq!(d.get(0, v, &ytd), ClientResponse::Read(None));
}

#[test]
fn sessions_are_bounded_and_time_out() {
    let mut d = driver("max_sessions=2,session_timeout_ms=500");
    let a = d.begin(0, None);
    let _b = d.begin(0, None);
    let refused = d.step(0, meridian_core::txn::Step::Begin { latest_seen: None });
    assert!(
        matches!(refused, ClientResponse::Outcome(Outcome::Aborted { .. })),
        "{refused:?}"
    );
    d.run_for(1_000 * MS);
    // Both idled out: `a` is gone and there is room again.
    let x = d.key_on(0, "x");
    assert!(matches!(
        d.get(0, a, &x),
        ClientResponse::Outcome(Outcome::Aborted { .. })
    ));
    d.begin(0, None);
}

/// The durable records a handler wrote: which kind, and for which transaction.
fn persisted(effects: &[NodeEffect<TigaNode>]) -> Vec<(&'static str, TxnId)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist { record } => match record {
                Record::Held(body) => Some(("held", body.id)),
                Record::Synced { body, .. } => Some(("synced", body.id)),
                Record::SyncedHeld { id, .. } => Some(("synced-held", *id)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// A durable follower writes a body once: `Held` when it releases fast, then a
/// `SyncedHeld` naming it when synced; only an entry synced without a `Held` record since
/// the last snapshot gets a full `Synced` record, body included.
#[test]
fn a_durable_follower_writes_each_body_once() {
    let s = setup("");
    let mut h = follower_of_shard_0(&s);
    let (a, b) = (body(1, 100, 0, &[0], "x"), body(2, 200, 0, &[0], "y"));
    let mut records = Vec::new();
    for (at, t) in [(10, &a), (20, &b)] {
        records.extend(persisted(&h.deliver(
            at,
            COORD,
            Msg::Submit(Box::new(t.clone())),
        )));
    }
    records.extend(persisted(&h.wake(250)));
    assert_eq!(records, vec![("held", a.id), ("held", b.id)]);
    // `late` arrives after the follower's clock passed the leader's timestamp for it, and
    // is synced while still queued: no `Held` record carries its body.
    let late = body(3, 5000, 0, &[0], "z");
    records.extend(persisted(&h.deliver(
        260,
        COORD,
        Msg::Submit(Box::new(late.clone())),
    )));
    let leader = s.cluster.initial_leader(ShardId(0));
    let sync = log_sync(&[&a, &b], (late.id, 300), leader);
    records.extend(persisted(&h.deliver(400, leader, sync)));
    assert_eq!(
        records,
        vec![
            ("held", a.id),
            ("held", b.id),
            ("synced-held", a.id),
            ("synced-held", b.id),
            ("synced", late.id),
        ]
    );
}
