//! Log truncation behind a checkpoint (§4 "checkpoints"): a leader cuts its release stream
//! where the cut is *clean* (every entry before it at or below a timestamp, every entry
//! after it above) and below every shard's GC floor; its followers cut at the same place
//! once they executed that far. Below a cut a server keeps no body, log entry or stream
//! position, only the store (whose state at the cut's timestamp *is* the checkpoint) and,
//! for a while, the truncated ids (deduplication). See the module doc of [`crate::tiga`]
//! ("Log truncation") for why the rules are safe.

use super::Server;
use crate::tiga::wire::{Checkpoint, Msg};
use crate::tiga::TigaNode;
use meridian_core::node::Ctx;
use meridian_core::{ShardId, Timestamp, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;

/// Run-wide counter: log entries truncated behind a checkpoint (summed over servers).
pub const TRUNCATED: &str = "tiga.truncated_entries";
/// Run-wide counter: states installed from a non-empty checkpoint (view change, rejoin).
pub const RESTORED: &str = "tiga.checkpoint_restores";
/// Run-wide counter: the subset of [`RESTORED`] that were rejoins (state transfers).
pub const REJOINS_RESTORED: &str = "tiga.rejoin_checkpoint_restores";

/// Positions of a release stream (leader) or synced prefix (follower) from `base` on; the
/// entries before `base` are truncated.
#[derive(Debug, Default)]
pub(crate) struct PosList {
    base: u64,
    items: VecDeque<(TxnId, Timestamp)>,
}

impl PosList {
    pub(crate) fn starting_at(base: u64) -> PosList {
        PosList {
            base,
            items: VecDeque::new(),
        }
    }

    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// One past the last position.
    pub(crate) fn end(&self) -> u64 {
        self.base + self.items.len() as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn push(&mut self, entry: (TxnId, Timestamp)) {
        self.items.push_back(entry);
    }

    /// The entry at `pos`, which must not be truncated.
    pub(crate) fn get(&self, pos: u64) -> (TxnId, Timestamp) {
        assert!(
            pos >= self.base,
            "position {pos} is truncated (base {})",
            self.base
        );
        self.items[(pos - self.base) as usize]
    }

    /// The entries from `pos` (clamped to the base) on.
    pub(crate) fn from(&self, pos: u64) -> impl Iterator<Item = &(TxnId, Timestamp)> + '_ {
        let skip = pos.saturating_sub(self.base) as usize;
        self.items.iter().skip(skip)
    }

    /// The entries in `from..to` (`from` clamped to the base).
    pub(crate) fn range(&self, from: u64, to: u64) -> Vec<(TxnId, Timestamp)> {
        let from = from.max(self.base);
        self.from(from)
            .take(to.saturating_sub(from) as usize)
            .copied()
            .collect()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &(TxnId, Timestamp)> + '_ {
        self.items.iter()
    }

    /// Drops the entries before `pos` and returns them.
    fn drop_before(&mut self, pos: u64) -> Vec<(TxnId, Timestamp)> {
        assert!(
            pos >= self.base && pos <= self.end(),
            "cut {pos} out of range"
        );
        let count = (pos - self.base) as usize;
        self.base = pos;
        self.items.drain(..count).collect()
    }
}

/// Truncation progress of a server.
#[derive(Debug, Default)]
pub(crate) struct TruncState {
    /// The latest cut: stream positions below `pos` are truncated, their entries are at or
    /// below `ts`, and `store.checkpoint(ts)` is their state (the store is never collected
    /// above `ts`, and every later entry is above it).
    pub(crate) pos: u64,
    pub(crate) ts: Timestamp,
    /// Follower: the leader's latest cut, taken once executed that far.
    pub(crate) announced: (u64, Timestamp),
    /// Leader: the other shards' leaders' GC floors in this view.
    peer_floors: FxHashMap<ShardId, Timestamp>,
    /// Recently truncated transactions, by truncation time: a late retransmission or
    /// notification of one is ignored.
    recent: VecDeque<(u64, TxnId)>,
    recent_ids: FxHashSet<TxnId>,
    /// Cuts taken (for tests and measurements).
    pub(crate) cuts: u64,
}

impl TruncState {
    /// After a view change or state transfer: the installed checkpoint is the latest cut;
    /// peer floors of the old view are forgotten; recent ids stay (they still dedup).
    pub(crate) fn reset_to(&mut self, pos: u64, ts: Timestamp) {
        self.pos = pos;
        self.ts = ts;
        self.announced = (pos, ts);
        self.peer_floors.clear();
    }

    /// Whether `id` was truncated recently.
    pub(crate) fn is_truncated(&self, id: TxnId) -> bool {
        self.recent_ids.contains(&id)
    }

    fn remember(&mut self, now_ns: u64, id: TxnId) {
        self.recent.push_back((now_ns, id));
        self.recent_ids.insert(id);
    }

    fn expire(&mut self, now_ns: u64, keep_ns: u64) {
        while let Some(&(at, id)) = self.recent.front() {
            if at.saturating_add(keep_ns) > now_ns {
                break;
            }
            self.recent.pop_front();
            self.recent_ids.remove(&id);
        }
    }
}

impl Server {
    /// Leader: tells the other leaders its GC floor.
    pub(super) fn announce_floor(&self, ctx: &mut Ctx<'_, TigaNode>) {
        let msg = Msg::Floor {
            shard: self.shard,
            floor: self.gc.floor,
            g_view: self.view.g_view,
        };
        let others: Vec<_> = (0..self.leaders.len())
            .filter(|&s| s != self.shard.index())
            .map(|s| self.leaders[s])
            .collect();
        ctx.multicast(others, &msg);
    }

    pub(super) fn on_floor(&mut self, shard: ShardId, floor: Timestamp) {
        if shard != self.shard && shard.index() < self.leaders.len() {
            let known = self.trunc.peer_floors.entry(shard).or_default();
            *known = (*known).max(floor);
        }
    }

    /// The smallest GC floor of every shard's leader (this one's included), if every other
    /// leader has told its floor in this view.
    fn global_floor(&self) -> Option<Timestamp> {
        let others = self.leaders.len() - 1;
        if self.trunc.peer_floors.len() < others {
            return None;
        }
        Some(
            self.trunc
                .peer_floors
                .values()
                .copied()
                .fold(self.gc.floor, Timestamp::min),
        )
    }

    /// Periodic truncation (from GC, NORMAL status): a leader picks and takes a cut, a
    /// follower takes its leader's once executed that far; both forget old truncated ids.
    pub(super) fn truncate(&mut self, ctx: &mut Ctx<'_, TigaNode>) {
        let now = ctx.now_ns();
        let keep = self.opts.commit_timeout_ns + self.opts.retry_ns + self.opts.recovery_ns;
        self.trunc.expire(now, keep);
        if self.is_leader {
            self.announce_floor(ctx);
            if let Some((pos, ts)) = self.choose_cut() {
                self.cut(ctx, pos, ts);
                self.snapshot_at_cut(ctx);
            }
        } else {
            let (pos, ts) = self.trunc.announced;
            if pos > self.trunc.pos && self.executed_upto >= pos {
                self.cut(ctx, pos, ts);
                self.snapshot_at_cut(ctx);
            }
        }
    }

    /// The leader's next cut: the largest clean position among the slimmed entries (their
    /// coordinators stopped retransmitting) whose timestamp is at most every shard's floor.
    fn choose_cut(&self) -> Option<(u64, Timestamp)> {
        let bound = self.global_floor()?;
        let base = self.stream.base();
        // Only slimmed entries may be cut; the rest matter only through their minimum.
        let slimmed = self.gc.slimmed.clamp(base, self.stream.end());
        let ts: Vec<Timestamp> = self
            .stream
            .iter()
            .take((slimmed - base) as usize)
            .map(|&(_, t)| t)
            .collect();
        let tail_min = self.stream.from(slimmed).map(|&(_, t)| t).min();
        let mut suffix_min = vec![tail_min.unwrap_or(Timestamp::MAX); ts.len() + 1];
        for i in (0..ts.len()).rev() {
            suffix_min[i] = suffix_min[i + 1].min(ts[i]);
        }
        let mut max = self.trunc.ts;
        let mut best = None;
        for (i, &t) in ts.iter().enumerate() {
            max = max.max(t);
            if max > bound {
                break;
            }
            if max < suffix_min[i + 1] {
                best = Some((base + i as u64 + 1, max));
            }
        }
        best
    }

    /// Truncates positions below `pos`, whose entries are at or below `ts` (and every
    /// later one above): their bodies, state and stream positions, and the log's entries
    /// below them.
    fn cut(&mut self, ctx: &mut Ctx<'_, TigaNode>, pos: u64, ts: Timestamp) {
        assert!(
            pos > self.trunc.pos && ts > self.trunc.ts,
            "cuts only advance"
        );
        ctx.count(TRUNCATED, pos - self.trunc.pos);
        let now_ns = ctx.now_ns();
        let list = if self.is_leader {
            &mut self.stream
        } else {
            &mut self.synced
        };
        for (id, at) in list.drop_before(pos) {
            assert!(at <= ts, "a cut's entries are at or below its timestamp");
            self.txns.remove(&id);
            self.slow_wanted.remove(&id);
            self.trunc.remember(now_ns, id);
        }
        // The other list is empty (a server fills the one of the role it was installed
        // in): keep both starting at the cut, where a report's list starts.
        for other in [&mut self.stream, &mut self.synced] {
            if other.is_empty() {
                *other = PosList::starting_at(pos);
            }
        }
        self.trunc.pos = pos;
        self.trunc.ts = ts;
        self.trunc.cuts += 1;
        // rMap/wMap of the truncated entries go: an arrival at or below `ts` must count as
        // conflicting (the floor does that), and the store keeps the cut's state.
        self.gc.floor = self.gc.floor.max(ts);
        self.truncate_log(ts);
    }

    /// Drops the log's leading entries that are truncated (no longer known here), at or
    /// below the cut and below every queued transaction — nothing may be inserted at or
    /// below a dropped entry, and a follower's queued ones are inserted when released. A
    /// follower's entry released fast and not yet synced stops it; a later cut goes on.
    fn truncate_log(&mut self, ts: Timestamp) {
        let below = self.pq.iter().map(|&(t, _)| t).next();
        let mut upto = self.log.first_pos();
        for (pos, e) in self.log.iter() {
            let clear = e.ts <= ts && below.is_none_or(|b| e.ts < b);
            if !clear || self.txns.contains_key(&e.txn) {
                break;
            }
            upto = pos + 1;
        }
        self.log
            .truncate_prefix(upto)
            .expect("a position within the log");
    }

    /// The latest cut with its store state.
    pub(super) fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            pos: self.trunc.pos,
            store: self
                .store
                .checkpoint(self.trunc.ts)
                .expect("the store is never collected above the latest cut"),
        }
    }
}
