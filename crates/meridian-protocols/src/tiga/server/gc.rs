//! Garbage collection on a server: what a transaction leaves behind once nobody can need
//! it any more. See the module doc of [`crate::tiga`] ("Garbage collection") for the
//! rules and why they are safe.

use super::{Entry, Server};
use crate::tiga::TigaNode;
use meridian_core::node::Ctx;
use meridian_core::{KeyList, NodeId, Timestamp, TxnId};
use rustc_hash::FxHashMap;

/// GC progress; reset with the log (a view change or a state transfer replaces both).
#[derive(Debug, Default)]
pub(crate) struct GcState {
    /// The GC floor: every transaction this server may still execute has a larger
    /// timestamp, so the store is collected below it, rMap/wMap entries at or below it are
    /// dropped, and an arrival at or below it is treated as conflicting (§3.2: a leader
    /// moves it above the floor, a follower holds it for the leader's log sync).
    pub(crate) floor: Timestamp,
    /// Leader: the floor as it last told its followers (they take the smaller of it and
    /// their own unexecuted entries).
    pub(crate) leader_floor: Timestamp,
    /// Leader: the floor as last sent to the followers (an empty log sync carries a new
    /// one).
    pub(crate) floor_sent: Timestamp,
    /// Release-stream (leader) or synced-prefix (follower) positions below this one have
    /// been slimmed: their replies, results and key lists dropped.
    pub(crate) slimmed: u64,
    /// Per coordinator, its latest finished watermark ([`Msg::Probe`](crate::tiga::Msg)):
    /// its transactions with a smaller `seq` have their outcome, so it asks nothing more
    /// about them. Kept across a reset (a coordinator's watermark only grows).
    finished: FxHashMap<NodeId, u64>,
    ticks: u32,
}

impl GcState {
    /// A coordinator's finished watermark, from its probe.
    pub(crate) fn note_finished(&mut self, coordinator: NodeId, below: u64) {
        let known = self.finished.entry(coordinator).or_default();
        *known = (*known).max(below);
    }

    /// Whether `id`'s coordinator has its outcome.
    fn finished(&self, id: TxnId) -> bool {
        self.finished
            .get(&id.coordinator)
            .is_some_and(|&below| id.seq < below)
    }

    /// The state after a view change or state transfer at a checkpoint of timestamp
    /// `ts`: the floors restart there, the coordinators' watermarks stay.
    pub(crate) fn reset_to(&mut self, ts: Timestamp) {
        *self = GcState {
            floor: ts,
            leader_floor: ts,
            finished: std::mem::take(&mut self.finished),
            ..GcState::default()
        };
    }
}

/// Collect every this many ticks (`tick_ms`, 20 ms by default: twice a second).
const GC_EVERY_TICKS: u32 = 25;

impl Server {
    /// The floor an arrival at `e.body.ts` must clear: rMap/wMap's conflicting timestamp,
    /// or the GC floor if the arrival is at or below it.
    pub(super) fn arrival_floor(&self, e: &Entry) -> Option<Timestamp> {
        let conflict = self.maps.conflict_floor(&e.reads, &e.writes, e.body.ts);
        floor_or_conflict(conflict, e.body.ts, self.gc.floor)
    }

    /// Periodic GC (NORMAL status only): slims old transactions, raises the floor and
    /// collects the store and rMap/wMap below it.
    pub(super) fn collect_garbage(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        self.gc.ticks += 1;
        if self.gc.ticks < GC_EVERY_TICKS {
            return;
        }
        self.gc.ticks = 0;
        let now = ctx.now_ns();
        self.slim(now);
        let floor = if self.is_leader {
            let floor = self.leader_floor(now);
            self.gc.leader_floor = self.gc.leader_floor.max(floor);
            self.gc.leader_floor
        } else {
            self.follower_floor()
        };
        if floor > self.gc.floor {
            self.gc.floor = floor;
            self.maps.prune(floor);
        }
        self.truncate(ctx);
        // Never above the latest cut: its checkpoint is read from the store on demand.
        self.store.gc(self.gc.floor.min(self.trunc.ts));
    }

    /// Drops the fast reply, the execution result and the key lists of every transaction
    /// released (leader) or synced and executed (follower) whose coordinator has its
    /// outcome (its finished watermark passed it) or, failing that word, at least `gc_lag`
    /// ago: its coordinator has given up retransmitting by then (`commit_timeout_ms`).
    /// The view change and state transfer recompute keys from the body, which stays.
    /// In stream order, so a slimmed prefix is what a cut may take.
    fn slim(&mut self, now_ns: u64) {
        let lag = self.opts.commit_timeout_ns + self.opts.retry_ns;
        let (list, upto) = if self.is_leader {
            (&self.stream, self.stream.end())
        } else {
            (&self.synced, self.executed_upto)
        };
        self.gc.slimmed = self.gc.slimmed.max(list.base());
        while self.gc.slimmed < upto {
            let (id, _) = list.get(self.gc.slimmed);
            let e = self.txns.get_mut(&id).expect("listed entries are known");
            if e.released_ns.saturating_add(lag) > now_ns && !self.gc.finished(id) {
                break;
            }
            e.last_fast = None;
            e.result = None;
            e.reads = KeyList::new();
            e.writes = KeyList::new();
            self.gc.slimmed += 1;
        }
    }

    /// The leader's floor: below every queued transaction (it may still execute them) and
    /// every release-stream entry some follower has not reported synced (that follower
    /// will execute it), and `retry_ms` behind the clock so that only very late arrivals
    /// meet it. Just below the smallest such timestamp.
    fn leader_floor(&self, now_ns: u64) -> Timestamp {
        let lag = self.opts.retry_ns;
        let behind = self
            .followers
            .iter()
            .map(|&f| self.follower_synced(f))
            .min()
            .unwrap_or(self.stream.end());
        let unsynced = self.stream.from(behind).map(|&(_, ts)| ts);
        let queued = self.pq.iter().map(|&(ts, _)| ts).next();
        let clock = Timestamp::new(now_ns.saturating_sub(lag), 0);
        let lowest = unsynced.chain(queued).fold(clock, Timestamp::min);
        just_below(lowest)
    }

    /// A follower's floor: the leader's, and below every synced entry it has not executed
    /// yet (a follower executes nothing else; its queued and held transactions reach its
    /// store only through the leader's stream, whose unsynced part the leader's floor
    /// covers).
    fn follower_floor(&self) -> Timestamp {
        let unexecuted = self.synced.from(self.executed_upto).map(|&(_, ts)| ts);
        unexecuted
            .map(just_below)
            .fold(self.gc.leader_floor, Timestamp::min)
    }
}

/// What an arrival at `ts` must clear: its `conflict`, and `floor` too if it is at or
/// below it (what was collected or truncated there counts as conflicting).
pub(super) fn floor_or_conflict(
    conflict: Option<Timestamp>,
    ts: Timestamp,
    floor: Timestamp,
) -> Option<Timestamp> {
    if ts <= floor {
        return Some(conflict.map_or(floor, |c| c.max(floor)));
    }
    conflict
}

/// The largest timestamp below `ts`.
fn just_below(ts: Timestamp) -> Timestamp {
    match ts.tiebreak {
        0 => Timestamp::new(ts.time_ns.saturating_sub(1), u32::MAX),
        t => Timestamp::new(ts.time_ns, t - 1),
    }
}
