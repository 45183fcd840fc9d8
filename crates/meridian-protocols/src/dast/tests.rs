//! Unit tests of DAST's pieces; the protocol as a whole is tested in the simulator
//! (`tests/dast.rs`, and the conformance line in `tests/conformance.rs`).

use super::coord::shard_cycle;
use super::dclock::{Created, Dclock};
use super::node::below;
use meridian_core::txn::{Op, Operand, Piece, Txn};
use meridian_core::{ShardId, SmallBytes, Timestamp};

/// Alg. 1 lines 6-8: below a CRT in the waitQ the clock freezes `time` and counts `frac`,
/// staying below the CRT; once the CRT is gone it follows the system clock again.
#[test]
fn create_ts_stretches_below_the_waitq_head_and_resumes_after() {
    let mut clock = Dclock::new(7, true);
    let (t1, how) = clock.create_ts(100, None);
    assert_eq!(
        (t1, how),
        (Timestamp::with_frac(100, 7, 0), Created::Physical)
    );
    let crt = Timestamp::with_frac(150, 3, 0);
    let (t2, how) = clock.create_ts(200, Some(crt));
    assert_eq!(how, Created::Stretched);
    assert_eq!(t2, Timestamp::with_frac(100, 7, 1));
    let (t3, _) = clock.create_ts(300, Some(crt));
    assert!(t2 < t3 && t3 < crt, "monotone and still below the CRT");
    let (t4, how) = clock.create_ts(300, None);
    assert_eq!(
        (t4, how),
        (Timestamp::with_frac(300, 7, 0), Created::Physical)
    );
}

/// Without stretching (the ablation) the clock runs past the CRT.
#[test]
fn without_stretching_the_clock_passes_the_crt() {
    let mut clock = Dclock::new(1, false);
    let crt = Timestamp::with_frac(150, 3, 0);
    let (ts, how) = clock.create_ts(200, Some(crt));
    assert_eq!(how, Created::Physical);
    assert!(ts > crt);
}

/// The clock never goes back, whatever the system clock does; calibration only raises it;
/// a restored clock hands out nothing at or below its persisted ceiling.
#[test]
fn the_dclock_is_monotone_calibrates_forward_and_survives_restarts() {
    let mut clock = Dclock::new(2, true);
    let (a, _) = clock.create_ts(500, None);
    let (b, _) = clock.create_ts(400, None);
    assert!(b > a);
    clock.calibrate(400, Timestamp::with_frac(1_000, 9, 0));
    let (c, _) = clock.create_ts(401, None);
    assert!(c.time_ns >= 1_000);
    clock.calibrate(402, Timestamp::with_frac(10, 9, 0));
    assert!(clock.create_ts(403, None).0 > c);
    let mut fresh = Dclock::new(2, true);
    fresh.restore(2_000, None, Timestamp::ZERO);
    assert!(fresh.create_ts(6, None).0 > Timestamp::with_frac(2_000, 2, 0));
    // Below a CRT it held, a stretching clock resumes below the CRT, not at the ceiling.
    let mut held = Dclock::new(2, true);
    let crt = Timestamp::with_frac(1_500, 9, 0);
    held.restore(2_000, Some(crt), Timestamp::ZERO);
    let (ts, how) = held.create_ts(1_600, Some(crt));
    assert!(ts < crt && how == Created::Stretched);
    // An anticipation is above the last timestamp, two nanoseconds past its `time`
    // (restore resumes at the held timestamp's `time - 1`), and at least what was asked.
    let last = fresh.last();
    assert!(fresh.above(Timestamp::ZERO) > last);
    assert_eq!(fresh.above(Timestamp::ZERO).time_ns, last.time_ns + 2);
    assert_eq!(
        fresh.above(Timestamp::with_frac(9_999, 0, 0)),
        Timestamp::with_frac(9_999, 0, 0)
    );
}

/// A clock stretched in the nanosecond just below the CRT it holds (a commit one
/// nanosecond above it) hands out fractions there. Restarted, it resumes below the CRT at
/// the CRT's `time - 1`: that alone would hand the same fractions out again; the node's
/// durable floor puts it above them, still below the CRT.
#[test]
fn a_restarted_stretching_clock_repeats_no_timestamp_below_its_crt() {
    let mut clock = Dclock::new(2, true);
    clock.create_ts(1_000, None);
    let crt = Timestamp::with_frac(1_001, 9, 0);
    let (a, how) = clock.create_ts(2_000, Some(crt));
    assert_eq!(how, Created::Stretched);
    let (b, _) = clock.create_ts(2_001, Some(crt));
    assert!(a < b && b < crt && b.time_ns == 1_000);

    let mut bare = Dclock::new(2, true);
    bare.restore(200_000, Some(crt), Timestamp::ZERO);
    let (again, _) = bare.create_ts(3_000, Some(crt));
    assert!(
        again <= b,
        "without a floor the restarted clock goes back ({again:?})"
    );

    let floor = Timestamp::with_frac(b.time_ns, 2, b.frac + (1 << 16));
    let mut restored = Dclock::new(2, true);
    restored.restore(200_000, Some(crt), floor);
    let (c, how) = restored.create_ts(3_000, Some(crt));
    assert!(c > b && c < crt && how == Created::Stretched, "{c:?}");
    // The ceiling still bounds it: a floor above the ceiling is not used.
    let mut low_ceiling = Dclock::new(2, true);
    low_ceiling.restore(500, Some(crt), floor);
    assert_eq!(low_ceiling.last(), Timestamp::with_frac(500, 2, 0));
}

/// A frozen clock passes a timestamp it must pass (a peer's clock, a ready transaction)
/// as long as it stays below its bound; `create_ts` alone never moves its `time`.
#[test]
fn a_stretched_clock_passes_what_lies_below_its_bound() {
    let mut clock = Dclock::new(5, true);
    clock.create_ts(100, None);
    let crt = Timestamp::with_frac(300, 3, 0);
    let (frozen, how) = clock.create_ts(400, Some(crt));
    assert_eq!(how, Created::Stretched);
    let committed = Timestamp::with_frac(200, 9, 0);
    let (again, _) = clock.create_ts(500, Some(crt));
    assert!(
        again < committed && frozen.time_ns == again.time_ns,
        "frozen at 100"
    );
    assert!(clock.pass(committed, Some(crt)));
    assert!(clock.last() > committed && clock.last() < crt);
    assert_eq!(clock.last(), Timestamp::with_frac(201, 5, 0));
    // A peer's reading with a lower node id at the same time is passed at that time.
    assert!(clock.pass(Timestamp::with_frac(250, 2, 7), Some(crt)));
    assert_eq!(clock.last(), Timestamp::with_frac(250, 5, 0));
    // Never to or past the bound, never backwards.
    assert!(!clock.pass(Timestamp::with_frac(299, 9, 0), Some(crt)));
    assert!(!clock.pass(Timestamp::with_frac(10, 9, 0), Some(crt)));
    assert!(clock.create_ts(600, Some(crt)).0 < crt);
}

#[test]
fn below_is_the_largest_smaller_timestamp() {
    for ts in [
        Timestamp::with_frac(5, 3, 2),
        Timestamp::with_frac(5, 3, 0),
        Timestamp::with_frac(5, 0, 0),
    ] {
        let b = below(ts);
        assert!(b < ts);
    }
    assert_eq!(
        below(Timestamp::with_frac(5, 3, 2)),
        Timestamp::with_frac(5, 3, 1)
    );
}

#[test]
fn value_dependencies_must_be_acyclic_between_shards() {
    let key = |s: &str| SmallBytes::copy_from_slice(s.as_bytes());
    let dep = |piece| Operand::Input { piece, output: 0 };
    let chain = Txn {
        pieces: vec![
            Piece::ops(ShardId(0), vec![Op::Get(key("a"))]),
            Piece::ops(ShardId(1), vec![Op::Put(key("b"), dep(0))]),
        ],
    };
    assert!(!shard_cycle(&chain));
    let cycle = Txn {
        pieces: vec![
            Piece::ops(ShardId(0), vec![Op::Get(key("a"))]),
            Piece::ops(ShardId(1), vec![Op::Put(key("b"), dep(0))]),
            Piece::ops(ShardId(0), vec![Op::Put(key("c"), dep(1))]),
        ],
    };
    assert!(shard_cycle(&cycle));
}

/// A participant acknowledges the coordinator's commit only after the committed entry is
/// in its log: the ack lets the coordinator stop resending and eventually forget the
/// decision, so an ack ahead of the record could leave, after a crash that loses unsynced
/// records, a prepared entry whose query gets presumed abort (issue 20).
#[test]
fn a_commit_is_acknowledged_only_after_its_entry_is_persisted() {
    use super::wire::{EntryRecord, Kind, Msg, Record, Status, TxnInfo};
    use meridian_core::host::Action;
    use meridian_core::{Node, TxnId};
    use std::sync::Arc;

    let setup = edge_regions_setup();
    let replicas = setup.cluster.replicas(ShardId(0)).to_vec();
    let (me, coord) = (replicas[0], replicas[1]);
    let now = 1_700_000_000_000_000_000;
    let mut host = started_edge(&setup, me, &[], now);
    let mut actions = Vec::new();
    let key = setup.cluster.partitioner.key_on_shard(ShardId(0), "k");
    let info = TxnInfo {
        id: TxnId::new(coord, 0, 1),
        kind: Kind::Irt,
        coord,
        txn: Arc::new(Txn {
            pieces: vec![Piece::ops(ShardId(0), vec![Op::Get(key)])],
        }),
    };
    let ts = Timestamp::with_frac(now + 1_000_000, coord.0, 0);
    let commit = Msg::Commit { info, ts };
    host.handle(
        now + 2_000_000,
        |n, ctx| n.on_message(ctx, coord, commit),
        &mut actions,
    )
    .expect("handles the commit");
    let persisted = actions.iter().position(|a| {
        matches!(
            a,
            Action::Persist {
                record: Record::Entry(EntryRecord {
                    status: Status::Committed,
                    ..
                }),
                ..
            }
        )
    });
    let acked = actions.iter().position(|a| {
        matches!(
            a,
            Action::Send {
                msg: Msg::CommitAck { .. },
                ..
            }
        )
    });
    let (persisted, acked) = (persisted.expect("entry persisted"), acked.expect("acked"));
    assert!(
        persisted < acked,
        "ack at action {acked}, record at {persisted}"
    );
}

fn edge_regions_setup() -> meridian_core::node::Setup<super::Dast> {
    let topology = meridian_core::Topology::load("edge-regions").expect("bundled topology");
    let config = meridian_core::ProtocolConfig::default();
    meridian_core::node::Setup::new(topology, &config, Default::default())
        .expect("dast on edge-regions")
}

/// Edge node `me` built from `records` (fresh when empty) and started at `now`.
fn started_edge(
    setup: &meridian_core::node::Setup<super::Dast>,
    me: meridian_core::NodeId,
    records: &[super::wire::Record],
    now: u64,
) -> meridian_core::host::NodeHost<super::DastNode> {
    use meridian_core::{Node, NodeRng, Protocol};
    use rand::SeedableRng;
    let mut host = meridian_core::host::NodeHost::new(me, NodeRng::seed_from_u64(1), 1);
    host.start(
        super::Dast::build(me, setup, records),
        NodeRng::seed_from_u64(2),
    );
    let mut actions = Vec::new();
    host.handle(now, |n, ctx| n.on_start(ctx), &mut actions)
        .expect("starts");
    host
}

/// A hand-off crosses machines, so the network may deliver it twice; the receiver drops
/// the copy even when it restarted in between (the received ids are durable: issue 20,
/// where each copy ran as a transaction of its own).
#[test]
fn a_hand_off_copy_after_a_restart_is_dropped() {
    use super::wire::{Msg, Record};
    use meridian_core::host::Action;
    use meridian_core::{Node, RequestId, TxnId};

    let setup = edge_regions_setup();
    let replicas = setup.cluster.replicas(ShardId(0)).to_vec();
    let (me, removed) = (replicas[0], replicas[1]);
    let key = setup.cluster.partitioner.key_on_shard(ShardId(0), "k");
    let handoff = || Msg::Handoff {
        id: TxnId::new(removed, 1, 1),
        port: removed,
        request: RequestId(7),
        txn: Txn {
            pieces: vec![Piece::ops(ShardId(0), vec![Op::Get(key.clone())])],
        },
    };
    let counted = |actions: &[meridian_core::host::NodeAction<super::DastNode>], name: &str| {
        actions
            .iter()
            .any(|a| matches!(a, Action::Count { name: n, .. } if *n == name))
    };
    let now = 1_700_000_000_000_000_000;
    let mut host = started_edge(&setup, me, &[], now);
    let mut actions = Vec::new();
    host.handle(
        now + 1_000,
        |n, ctx| n.on_message(ctx, removed, handoff()),
        &mut actions,
    )
    .expect("handles the hand-off");
    assert!(
        counted(&actions, "dast.irt"),
        "the first copy is coordinated"
    );
    let records: Vec<Record> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Persist { record, .. } => Some(record.clone()),
            _ => None,
        })
        .collect();
    assert!(records.iter().any(|r| matches!(r, Record::HandedIn { .. })));

    let mut restarted = started_edge(&setup, me, &records, now + 2_000);
    actions.clear();
    restarted
        .handle(
            now + 3_000,
            |n, ctx| n.on_message(ctx, removed, handoff()),
            &mut actions,
        )
        .expect("handles the copy");
    assert!(counted(&actions, "dast.duplicate_handoffs"), "{actions:?}");
    assert!(!counted(&actions, "dast.irt"), "the copy ran again");
}

/// A committed CRT held in the waitQ one nanosecond above the clock (its inputs still
/// travelling) makes the node persist a clock floor above the clock and below the CRT:
/// the floor a restarted clock resumes at (`Dclock::restore`), so that it repeats none of
/// the fractions it may hand out in that nanosecond.
#[test]
fn a_crt_held_a_nanosecond_above_the_clock_persists_a_floor_below_it() {
    use super::wire::{Kind, Msg, Record, TxnInfo};
    use meridian_core::host::Action;
    use meridian_core::{Node, TxnId};
    use std::sync::Arc;

    let setup = edge_regions_setup();
    let replicas = setup.cluster.replicas(ShardId(0)).to_vec();
    let (me, coord) = (replicas[0], replicas[1]);
    let now = 1_700_000_000_000_000_000;
    let mut host = started_edge(&setup, me, &[], now);
    let here = setup.cluster.partitioner.key_on_shard(ShardId(0), "k");
    let there = setup.cluster.partitioner.key_on_shard(ShardId(1), "k");
    let info = TxnInfo {
        id: TxnId::new(coord, 0, 1),
        kind: Kind::Crt,
        coord,
        txn: Arc::new(Txn {
            pieces: vec![
                Piece::ops(ShardId(1), vec![Op::Get(there)]),
                Piece::ops(
                    ShardId(0),
                    vec![Op::Put(
                        here,
                        Operand::Input {
                            piece: 0,
                            output: 0,
                        },
                    )],
                ),
            ],
        }),
    };
    // A fresh clock's lastTs is at time 0: the CRT sits one nanosecond above it.
    let crt = Timestamp::with_frac(1, coord.0 + 1, 0);
    let mut actions = Vec::new();
    host.handle(
        now + 1_000,
        |n, ctx| n.on_message(ctx, coord, Msg::Commit { info, ts: crt }),
        &mut actions,
    )
    .expect("handles the commit");
    let floor = actions.iter().find_map(|a| match a {
        Action::Persist {
            record: Record::ClockFloor { ts },
            ..
        } => Some(*ts),
        _ => None,
    });
    let floor = floor.expect("a clock floor is persisted");
    assert!(
        floor > Timestamp::with_frac(0, me.0, 0) && floor < crt,
        "{floor:?}"
    );
}
