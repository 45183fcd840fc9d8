//! Reads served at asynchronous read replicas under a watermark (K2 §6): what K2-VCR
//! (epochs), SafeTS (Spanner's safe time, on `p2pl-ttc`) and ClosedTS (CockroachDB's
//! closed timestamps, on `mvto-hlc`) share.
//!
//! Each of the three keeps, at a replica, a *watermark* that only grows (the last
//! complete epoch, the safe time, the closed timestamp): a read at `t` may be served once
//! the watermark covers `t`. Around that the three need the same pieces, written here
//! once:
//! * [`HeldReads`]: reads waiting for the watermark (or for a key to settle), bounded,
//!   duplicates dropped, released when the protocol says they are ready.
//! * [`Puller`]: the replica's side of pulled replication — one pull outstanding, sent
//!   again when unanswered for a retry interval (a lost message, a restarted primary).
//! * [`RepLog`]: the primary's side — the versions committed since its start (volatile,
//!   bounded), pulls held until the next watermark step, and a full snapshot for a
//!   replica on another stream or too far behind (ClosedTS, SafeTS).
//! * [`run_read_only`]: a read-only piece run against a copy's versions.
//! * [`Visibility`]: the *visibility delay* of K2 §7.4 (Figs. 22-23) — from a write's
//!   commit at its primary until a replica read may see it — counted the same way by the
//!   three protocols into per-protocol counters ([`DelayCounters`], made by
//!   [`delay_counters!`](crate::delay_counters)), with versions that arrive above the
//!   watermark held until it passes them.
//! * [`nearest_copy`]: where a replica read goes (the nearest copy of its shard; a
//!   resend tries the next nearest).
//!
//! Delays are measured on two clocks (the primary's at commit, the replica's when the
//! version becomes visible), as a deployment would measure them: ordinary clocks' skew
//! is in the numbers.

use meridian_core::node::Context;
use meridian_core::txn::{execute_piece, AbortReason, KvAccess, Piece, PieceResult, Procedures};
use meridian_core::{Cluster, NodeId, ShardId};
use std::collections::{BTreeMap, VecDeque};

/// The bucket bounds (ms, exclusive) of the visibility-delay histogram.
pub const DELAY_BUCKETS_MS: [u64; 10] = [5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/// One protocol's visibility-delay counters (names are `'static`: see
/// [`delay_counters!`](crate::delay_counters)).
#[derive(Debug)]
pub struct DelayCounters {
    /// Versions that became visible at a replica (and were measured).
    pub versions: &'static str,
    /// The sum of their delays, in µs (the mean is `sum_us / versions`).
    pub sum_us: &'static str,
    /// `(bound_ms, name)`: a delay is counted in the first bucket whose bound exceeds it.
    pub buckets: [(u64, &'static str); 10],
    /// Delays of at least the last bound.
    pub over: &'static str,
}

/// `DelayCounters` named `<prefix>.visible_versions`, `<prefix>.visibility_delay_us_sum`,
/// `<prefix>.visibility_delay_le_<N>ms` (for each of [`DELAY_BUCKETS_MS`]) and
/// `<prefix>.visibility_delay_gt_5000ms`.
#[macro_export]
macro_rules! delay_counters {
    ($prefix:literal) => {
        $crate::kit::replica_reads::DelayCounters {
            versions: concat!($prefix, ".visible_versions"),
            sum_us: concat!($prefix, ".visibility_delay_us_sum"),
            buckets: [
                (5, concat!($prefix, ".visibility_delay_le_5ms")),
                (10, concat!($prefix, ".visibility_delay_le_10ms")),
                (20, concat!($prefix, ".visibility_delay_le_20ms")),
                (50, concat!($prefix, ".visibility_delay_le_50ms")),
                (100, concat!($prefix, ".visibility_delay_le_100ms")),
                (200, concat!($prefix, ".visibility_delay_le_200ms")),
                (500, concat!($prefix, ".visibility_delay_le_500ms")),
                (1000, concat!($prefix, ".visibility_delay_le_1000ms")),
                (2000, concat!($prefix, ".visibility_delay_le_2000ms")),
                (5000, concat!($prefix, ".visibility_delay_le_5000ms")),
            ],
            over: concat!($prefix, ".visibility_delay_gt_5000ms"),
        }
    };
}

/// Counts one version's visibility delay.
pub fn record_delay<M: Clone, T, R>(
    ctx: &mut Context<'_, M, T, R>,
    counters: &'static DelayCounters,
    delay_ns: u64,
) {
    let ms = delay_ns / 1_000_000;
    ctx.count(counters.versions, 1);
    ctx.count(counters.sum_us, delay_ns / 1_000);
    let bucket = counters
        .buckets
        .iter()
        .find(|(le, _)| ms < *le)
        .map_or(counters.over, |(_, name)| name);
    ctx.count(bucket, 1);
}

/// Versions replayed at a replica that its watermark does not cover yet, with their
/// commit times at the primary: counted when the watermark passes them.
#[derive(Debug)]
pub struct Visibility<W: Ord> {
    counters: &'static DelayCounters,
    /// Watermark value → commit times (primary's clock) of the versions waiting for it.
    waiting: BTreeMap<W, Vec<u64>>,
    held: usize,
    max_held: usize,
}

impl<W: Ord + Copy> Visibility<W> {
    /// At most `max_held` versions wait (more are not measured: a replica far behind
    /// counts what it can).
    pub fn new(counters: &'static DelayCounters, max_held: usize) -> Visibility<W> {
        Visibility {
            counters,
            waiting: BTreeMap::new(),
            held: 0,
            max_held,
        }
    }

    /// A version at `at`, committed at `committed_ns` on its primary's clock, replayed
    /// here now under `watermark`: counted now if covered, else held.
    pub fn replayed<M: Clone, T, R>(
        &mut self,
        ctx: &mut Context<'_, M, T, R>,
        watermark: W,
        at: W,
        committed_ns: u64,
    ) {
        if at <= watermark {
            let delay_ns = ctx.now_ns().saturating_sub(committed_ns);
            return record_delay(ctx, self.counters, delay_ns);
        }
        if self.held < self.max_held {
            self.held += 1;
            self.waiting.entry(at).or_default().push(committed_ns);
        }
    }

    /// The watermark moved to `watermark`: counts every held version it now covers.
    pub fn advanced<M: Clone, T, R>(&mut self, ctx: &mut Context<'_, M, T, R>, watermark: W) {
        while let Some(entry) = self.waiting.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            let times = entry.remove();
            self.held -= times.len();
            for committed_ns in times {
                let delay_ns = ctx.now_ns().saturating_sub(committed_ns);
                record_delay(ctx, self.counters, delay_ns);
            }
        }
    }

    /// Forgets what is held (the replica starts over from a snapshot).
    pub fn clear(&mut self) {
        self.waiting.clear();
        self.held = 0;
    }
}

/// What [`HeldReads::offer`] did with a read.
#[derive(Debug, PartialEq, Eq)]
pub enum Offered<R> {
    /// Ready now: serve it.
    Serve(R),
    /// Held until a later [`HeldReads::release`].
    Held,
    /// A copy is already held: dropped.
    Duplicate,
    /// The queue is full: refuse it (the caller answers with an abort).
    Overflow(R),
}

/// Replica reads waiting until they may be served, at most `max` of them.
#[derive(Debug)]
pub struct HeldReads<R> {
    waiting: Vec<R>,
    max: usize,
}

impl<R> HeldReads<R> {
    pub fn new(max: usize) -> HeldReads<R> {
        HeldReads {
            waiting: Vec::new(),
            max,
        }
    }

    /// Serves `read` at once if `ready`, else holds it unless `same` finds a copy held or
    /// the queue is full.
    pub fn offer(
        &mut self,
        read: R,
        ready: impl Fn(&R) -> bool,
        same: impl Fn(&R, &R) -> bool,
    ) -> Offered<R> {
        if ready(&read) {
            return Offered::Serve(read);
        }
        if self.waiting.iter().any(|w| same(w, &read)) {
            return Offered::Duplicate;
        }
        if self.waiting.len() >= self.max {
            return Offered::Overflow(read);
        }
        self.waiting.push(read);
        Offered::Held
    }

    /// Takes out every held read that is now `ready`, in arrival order.
    pub fn release(&mut self, ready: impl Fn(&R) -> bool) -> Vec<R> {
        let (go, rest) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|r| ready(r));
        self.waiting = rest;
        go
    }

    /// Takes out every held read `expired` says has waited too long.
    pub fn expire(&mut self, expired: impl Fn(&R) -> bool) -> Vec<R> {
        self.release(expired)
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// A replica's pulls: at most one outstanding, sent again once unanswered for `retry_ns`.
#[derive(Debug, Default)]
pub struct Puller {
    /// Local time of the last pull (0: none yet).
    pulled_ns: u64,
}

impl Puller {
    /// Notes a pull sent now.
    pub fn pulled(&mut self, now_ns: u64) {
        self.pulled_ns = now_ns.max(1);
    }

    /// Whether the last pull has gone unanswered for `retry_ns` (or the clock stepped
    /// back past it).
    pub fn due(&self, now_ns: u64, retry_ns: u64) -> bool {
        self.pulled_ns == 0
            || now_ns.saturating_sub(self.pulled_ns) >= retry_ns
            || now_ns < self.pulled_ns
    }
}

/// What a primary answers one held pull with (see [`RepLog`]).
#[derive(Debug, PartialEq, Eq)]
pub struct RepAnswer<V> {
    pub replica: NodeId,
    /// The primary's stream (a restart starts another).
    pub stream: u64,
    /// The entry the replica had (0 with `full`).
    pub after: u64,
    /// The last entry of the log now: the replica's position once it applies the answer.
    pub upto: u64,
    /// The replica is on another stream or behind what the log keeps: `versions` is the
    /// primary's whole state instead.
    pub full: bool,
    /// The entries after `after` (or the whole state, `full`).
    pub versions: Vec<V>,
}

/// A primary's side of pulled replication: the versions committed since its start (a
/// volatile, bounded log), and the pulls held until the protocol's next watermark step.
/// A replica on an unknown stream, or behind what the log still keeps, is answered
/// `full`.
#[derive(Debug)]
pub struct RepLog<V> {
    /// This run's stream (its start time: a restart starts another).
    stream: u64,
    /// Committed versions; `log[0]` is entry `first`.
    log: VecDeque<V>,
    first: u64,
    max: usize,
    /// Pulls held until the next answer: replica → the entry it has (`None`: unknown).
    pulls: BTreeMap<NodeId, Option<u64>>,
    /// The entry each replica last said it has (the log is trimmed below the least).
    acked: BTreeMap<NodeId, u64>,
}

impl<V: Clone> RepLog<V> {
    /// A log of at most `max` entries for `replicas`.
    pub fn new(replicas: impl IntoIterator<Item = NodeId>, max: usize) -> RepLog<V> {
        RepLog {
            stream: 0,
            log: VecDeque::new(),
            first: 1,
            max,
            pulls: BTreeMap::new(),
            acked: replicas.into_iter().map(|r| (r, 0)).collect(),
        }
    }

    /// Starts this run's stream (`now_ns`: the primary's clock at its start).
    pub fn start(&mut self, now_ns: u64) {
        self.stream = now_ns.max(1);
    }

    /// The last entry of the log.
    pub fn last(&self) -> u64 {
        self.first + self.log.len() as u64 - 1
    }

    /// A version just committed.
    pub fn push(&mut self, version: V) {
        self.log.push_back(version);
        if self.log.len() > self.max {
            self.log.pop_front();
            self.first += 1;
        }
    }

    /// A replica's pull: held until [`RepLog::answers`].
    pub fn on_pull(&mut self, from: NodeId, stream: u64, after: u64) {
        let known = stream == self.stream && after + 1 >= self.first && after <= self.last();
        if known {
            self.acked.insert(from, after);
            let least = self.acked.values().copied().min().unwrap_or(0);
            while self.first <= least && !self.log.is_empty() {
                self.log.pop_front();
                self.first += 1;
            }
        }
        self.pulls.insert(from, known.then_some(after));
    }

    /// Whether a pull is held.
    pub fn has_pulls(&self) -> bool {
        !self.pulls.is_empty()
    }

    /// Takes every held pull and says what to answer it with now; `whole` gives the
    /// primary's whole state for a `full` answer.
    pub fn answers(&mut self, whole: impl Fn() -> Vec<V>) -> Vec<RepAnswer<V>> {
        let upto = self.last();
        let mut out = Vec::with_capacity(self.pulls.len());
        for (replica, after) in std::mem::take(&mut self.pulls) {
            let (full, after, versions) = match after {
                Some(after) => {
                    let skip = (after + 1 - self.first) as usize;
                    (false, after, self.log.iter().skip(skip).cloned().collect())
                }
                None => (true, 0, whole()),
            };
            out.push(RepAnswer {
                replica,
                stream: self.stream,
                after,
                upto,
                full,
                versions,
            });
        }
        out
    }
}

/// Runs a read-only `piece` against `access` with its `inputs` (the results of the pieces
/// it depends on, by index), as every replica read does.
pub fn run_read_only(
    piece: &Piece,
    inputs: &[(u16, PieceResult)],
    procedures: &Procedures,
    access: &mut dyn KvAccess,
) -> Result<PieceResult, AbortReason> {
    if !piece.is_read_only() {
        let why = "a replica read runs read-only pieces only".to_string();
        return Err(AbortReason::Invalid(why));
    }
    let mut by_index: Vec<Option<&PieceResult>> = Vec::new();
    for (index, result) in inputs {
        let i = usize::from(*index);
        if by_index.len() <= i {
            by_index.resize(i + 1, None);
        }
        by_index[i] = Some(result);
    }
    execute_piece(piece, &by_index, procedures, access)
}

/// The copy of `shard` a replica read's `attempt`-th send goes to: its copies (primary
/// and read replicas) nearest to `me` first, the next one on each resend.
pub fn nearest_copy(cluster: &Cluster, me: NodeId, shard: ShardId, attempt: u64) -> NodeId {
    let copies = crate::kit::ttc::nearest_first(cluster, me, cluster.replicas(shard).to_vec());
    copies[(attempt % copies.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_reads_release_what_is_ready_and_refuse_beyond_the_bound() {
        let mut q = HeldReads::new(2);
        let same = |a: &u64, b: &u64| a == b;
        assert_eq!(q.offer(3, |r| *r <= 5, same), Offered::Serve(3));
        assert_eq!(q.offer(7, |r| *r <= 5, same), Offered::Held);
        assert_eq!(q.offer(7, |r| *r <= 5, same), Offered::Duplicate);
        assert_eq!(q.offer(9, |r| *r <= 5, same), Offered::Held);
        assert_eq!(q.offer(8, |r| *r <= 5, same), Offered::Overflow(8));
        assert_eq!(q.release(|r| *r <= 8), vec![7]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_rep_log_answers_known_pulls_with_what_follows_and_others_in_full() {
        let (a, b) = (NodeId(1), NodeId(2));
        let mut log: RepLog<u32> = RepLog::new([a, b], 2);
        log.start(7);
        log.push(10);
        // `a` knows nothing of stream 7: a full answer.
        log.on_pull(a, 0, 0);
        let answers = log.answers(|| vec![99]);
        assert!(answers[0].full && answers[0].versions == vec![99] && answers[0].upto == 1);
        // On the stream: what follows its position.
        log.push(11);
        log.on_pull(a, 7, 1);
        log.on_pull(b, 7, 0);
        let answers = log.answers(Vec::new);
        assert_eq!(answers[0].versions, vec![11]);
        assert_eq!(answers[1].versions, vec![10, 11]);
        // Entry 1 falls out of the bounded log: `b`, still at 0, is answered in full.
        log.push(12);
        log.on_pull(b, 7, 0);
        assert!(log.answers(Vec::new)[0].full);
        assert!(!log.has_pulls());
    }

    #[test]
    fn a_puller_is_due_when_unanswered_for_the_retry_interval() {
        let mut p = Puller::default();
        assert!(p.due(10, 100));
        p.pulled(10);
        assert!(!p.due(50, 100));
        assert!(p.due(110, 100));
        assert!(p.due(5, 100), "a clock stepped back");
    }
}
