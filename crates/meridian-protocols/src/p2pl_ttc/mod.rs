//! # `p2pl-ttc`: K2's Spanner-like baseline — 2PL, 2PC, commit timestamps from TTC
//!
//! **Guarantee: strict serializability** of every transaction (run at the primaries). It is
//! strict 2PL with 2PC (`2pl-2pc`'s server and coordinator, unchanged in how they lock and
//! commit), so the lock-point order is a serial order that respects real time. The commit
//! timestamp adds Spanner's *external consistency of timestamps*: with commit wait on, a
//! transaction's timestamp lies within its lifetime (taken after every lock is held,
//! passed by true time before any lock is released or the client hears), so timestamp
//! order agrees with both the lock-point order and real time. The checker sees the
//! histories, not the timestamps; `tests.rs` checks the timestamps against true time.
//!
//! ## Map from the papers to the files
//! | concept | file |
//! |---|---|
//! | K2 §7.3: "distributed two-phase locking", "a fine-grained lock table as mentioned in \[6\]" | `two_pl/locks.rs` (one lock per key, shared/exclusive, FIFO queues, WOUND-WAIT) and `two_pl/server.rs` |
//! | K2 §7.3: "commits transaction using two-phase commit" | `two_pl/coordinator.rs` (PREPARE/VOTE/COMMIT), `kit/two_pc.rs` (decision log, COMMIT resent until acknowledged, presumed abort) |
//! | K2 §7.3: "commit timestamps are generated in the commit phase from TTC clocks"; K2 §2.2 TTC Oracle | `kit/ttc.rs` (the oracle's `T_high = now + ε`), this file (the oracle nodes), `two_pl/coordinator.rs` (`ask_oracle`, `on_oracle_ts`) |
//! | Spanner §4.1.2 commit wait; K2 §7.3 "commit wait is disabled" in its runs | `two_pl/options.rs` (`Ttc::commit_wait_ns`), `two_pl/coordinator.rs` (`Phase::CommitWaiting`) |
//! | Spanner's interactive read-write transactions | `two_pl/coordinator.rs` (`Step::Get`/`Put` as pieces) |
//! | K2 §6.1, §7.4 "SafeTS"; Spanner §4.1.3 safe time `t_safe = min(t_paxos_safe, t_TM_safe)` | `safets.rs` (`SafePrimary`, `SafeReplica`, `SafeCopy`, `SafeReader`), `two_pl/server.rs` (`safe`: prepare, commit, abort, recovery hooks), `kit/replica_reads.rs` (`RepLog`, `HeldReads`, `Visibility`) |
//!
//! ## Roles
//! * **Nodes** are `2pl-2pc`'s (`TwoPlNode`), with its `Oracle` variant built here.
//! * **Oracles**: the `oracle` service (`[[services]]` in `topologies/k2-five-regions.toml`:
//!   two per region), or one per region by default. Coordinators ask the nearest and move
//!   to the next nearest after each unanswered retry interval.
//! * **Servers**: each shard's primary (its initial leader) holds the data and the lock
//!   table; read replicas are inert unless `replica_reads=safets` (below).
//! * **Coordinators**: co-located with the data nodes on `k2-five-regions`.
//!
//! ## Message flow
//! ```text
//! client ─OneShot/Interactive→ coordinator ─EXECUTE→ servers (lock, run) ─EXECUTED→
//!   coordinator ─PREPARE→ servers (log Prepared, keep locks) ─VOTE(yes)→
//!   coordinator ─GetTs→ nearest oracle ─OracleTs(T_high)→ commit_ts = ⟨T_high, oracle⟩
//!   commit wait 2ε(1+D) (true time passes commit_ts; locks still held)
//!   coordinator: log Decided ─COMMIT→ servers (apply, unlock); client hears Committed{commit_ts}
//! ```
//!
//! ## Choices the papers left open
//! * **Deadlock handling: WOUND-WAIT** on age = (coordinator's clock at submission, txn
//!   id), Spanner's (OSDI '12 §4.2.1); K2 §7.3 re-implements Spanner and names no policy.
//!   A wounded transaction aborts unless it has prepared.
//! * **Every transaction goes through 2PC and the oracle**, single-shard ones too (no
//!   one-round local commit): each committed transaction gets a TTC timestamp. Read-only
//!   transactions take shared locks like the rest, unless `replica_reads=safets` sends the
//!   one-shot ones to the replicas (below).
//! * **Where the wait sits**: after the oracle's reply, before the decision is logged. A
//!   coordinator that crashes while waiting has decided nothing (presumed abort), and a
//!   prepared server asking meanwhile hears nothing until the decision exists.
//! * **Wait length**: `T_high ≤ abs + 2ε` at the oracle's reply, so waiting `2ε` of true
//!   time (padded by the coordinators' drift D, since a runtime timer counts on an
//!   ordinary clock) puts true time past the timestamp.
//! * **Timestamps** are `⟨T_high, oracle id⟩`; one oracle's answers strictly increase.
//! * **Retries**: `max_retries` oracle requests, each to the next nearest oracle, then the
//!   transaction aborts (`Timeout`) — nothing was decided.
//!
//! ## SafeTS replica reads (`replica_reads=safets`; K2 §6.1, §7.4)
//! **Promise: strict serializability** of the whole history, replica reads included
//! (checked so by `p2pl_ttc_safets` in the conformance suite, together with the
//! primaries' read-write transactions).
//! * **Reads**: read-only one-shot transactions (interactive ones cannot be told
//!   read-only up front) take `t = T_high` from the nearest oracle (TTC now, not a
//!   snapshot in the past) and read every piece at the nearest copy of its shard (the
//!   primary included); a resend goes to the next nearest copy. A copy serves once
//!   `t ≤ t_safe`, at the newest version `≤ t` of each key. The client hears
//!   `Committed { commit_ts: t, path: ReadOnly }`.
//! * **`t_safe`** at a primary is `min(T_earliest, min over prepared transactions of the
//!   T_earliest held when they prepared) − 1`, where `T_earliest = now − ε` is asked of
//!   the region's oracle every `safe_ts_interval_ms`. Spanner's `t_paxos_safe` is the
//!   `T_earliest` term (there is no Paxos: the primary is the only writer) and
//!   `t_TM_safe` the prepared term. Why no commit can land at or below it: a transaction
//!   commits at `T_high` of an oracle asked after every participant prepared, and `T_high
//!   ≥ true time`, so its timestamp is above the true time of its prepare here, which is
//!   above any `T_earliest` heard before.
//! * **Choices the papers left open.** Prepare timestamps are lower bounds derived from
//!   the oracle, not timestamps the participant picks (p2PL-TTC takes its commit
//!   timestamp after the votes), so §6.1's Limitation 2 — a prepare below `t_safe`
//!   refused — cannot happen: every prepare is above every `t_safe` published before it.
//!   Replication is pulled (`kit::replica_reads::RepLog`, as ClosedTS's): a replica holds
//!   one pull, answered after the primary's next oracle reply with the versions committed
//!   since and `t_safe`. Copies keep `max_versions_per_key` versions; a read below the
//!   oldest kept aborts (`Conflict`).
//! * **Why linearizable**: with commit wait a transaction that committed before the read
//!   began has a timestamp below true time at its commit, so below `t`; a copy serves only
//!   after `t_safe ≥ t`, when true time has passed `t`, so any transaction that starts
//!   after the read ended prepares, and commits, above `t`; and in commit-timestamp order
//!   (which 2PL's lock order and commit wait agree with) the read sees a prefix.
//!   `replica_reads=safets` with `commit_wait=false` is refused.
//! * **Visibility delay** (K2 §7.4, Figs. 22-23): per replayed version, from its commit
//!   at the primary to the moment a replica's `t_safe` covers it (two nodes' clocks):
//!   `p2pl.visibility_delay_us_sum / p2pl.visible_versions` is the mean,
//!   `p2pl.visibility_delay_le_*ms` the histogram, counted as K2-VCR and ClosedTS count
//!   (`kit::replica_reads`). A slow prepared transaction holds `t_safe` for every key of
//!   its shard (§6.1's Limitation 1): the tail of the delay.
//! * **Restarts**: the primary logs each commit's timestamp (`Record::Committed`) and its
//!   checkpoints each key's newest one; a restarted primary rebuilds its versions (a
//!   checkpoint's keys without history below their newest version), holds `t_safe` at 0
//!   until its revived prepared transactions are decided and the oracle answered, and
//!   starts a new stream: its replicas take a full snapshot (every key's newest version)
//!   and merge it; a version above their `t_safe` marks its key's history below it
//!   unknown. A replica keeps nothing durable; its `t_safe` never moves back (every
//!   commit after a `t_safe` was published lies above it, restart or not).
//!
//! ## Options
//! 2PL's (see [`crate::two_pl`]), plus `commit_wait` (true), `epsilon_us` (100; refused if
//! the topology's oracle clocks do not promise it), `drift_ppm` (200). The test-only
//! `unsafe_early_release=true` releases locks at the vote: the conformance suite shows the
//! checker catching it. `commit_wait=false` is no safety switch for the histories checked
//! here (2PL alone orders them); the timestamps' order is what it breaks, shown by
//! `tests.rs`. SafeTS: `replica_reads` (`off` | `safets`), `safe_ts_interval_ms` (10),
//! `max_versions_per_key` (64), `max_held_reads` (4096), and the test-only
//! `unsafe_serve_above_safe=true`, which serves replica reads at once whatever `t_safe`:
//! the conformance suite shows the checker catching it (a copy behind its primary answers
//! stale).

pub mod safets;
#[cfg(test)]
mod tests;

use crate::kit::options::{ms_to_ns, positive_ms};
use crate::kit::ttc::{check_oracle_clocks, OracleClock, ORACLE_SERVICE};
use crate::two_pl::{
    Coordinator, Msg, Options, Policy, Record, Server, Ttc, TwoPlNode, TwoPlTwoPc,
};
use crate::two_pl::{OPTIONS, P2PL_TTC_OPTIONS};
use meridian_core::node::Ctx;
use meridian_core::node::Setup;
use meridian_core::time::NS_PER_US;
use meridian_core::{
    Cluster, NodeId, NodeRole, Protocol, ProtocolConfig, RegionId, ReplicaKind, ShardId,
};
use safets::{SafeMsg, SafePrimary, SafeReplica, SafeTs};

/// K2's p2PL-TTC baseline. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct P2plTtc;

impl Protocol for P2plTtc {
    type Node = TwoPlNode;
    type Options = Options;

    const NAME: &'static str = "p2pl-ttc";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &P2PL_TTC_OPTIONS;
    const REPLICA_KINDS: &'static [ReplicaKind] = &[ReplicaKind::Voter, ReplicaKind::ReadReplica];

    /// One oracle per region unless the topology places them.
    fn services(cluster: &Cluster) -> Vec<(String, RegionId)> {
        crate::kit::ttc::one_oracle_per_region(cluster)
    }

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        raw.check_known(&P2PL_TTC_OPTIONS)?;
        let mut opts = Options::parse_shared(raw, cluster.topology.max_rtt_ms())?;
        if opts.unsafe_skip_validation {
            return Err("protocol option `unsafe_skip_validation` is occ-raft's".to_string());
        }
        let epsilon_us: u64 = raw.get("epsilon_us", 100)?;
        let drift_ppm: u64 = raw.get("drift_ppm", 200)?;
        if !(1..=1_000_000).contains(&epsilon_us) {
            return Err(format!(
                "protocol option `epsilon_us` must be in 1..=1000000, got {epsilon_us}"
            ));
        }
        if drift_ppm > 100_000 {
            return Err(format!(
                "protocol option `drift_ppm` must be at most 100000, got {drift_ppm}"
            ));
        }
        check_oracle_clocks(cluster, epsilon_us)?;
        let commit_wait = raw.get("commit_wait", true)?;
        let safe = parse_safe_ts(raw, &opts, commit_wait)?;
        opts.ttc = Some(Ttc {
            epsilon_ns: epsilon_us * NS_PER_US,
            drift_ppm,
            commit_wait,
            safe,
        });
        opts.deadlock = Policy::WoundWait;
        opts.interactive = true;
        debug_assert!(OPTIONS.iter().all(|o| P2PL_TTC_OPTIONS.contains(o)));
        Ok(opts)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> TwoPlNode {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        let safe = opts.ttc.as_ref().and_then(|t| t.safe.clone());
        match &cluster.node(node).role {
            NodeRole::Replica { shard, .. } if cluster.initial_leader(*shard) == node => {
                let procedures = setup.procedures.clone();
                let safe =
                    safe.map(|s| SafePrimary::new(s, cluster, node, *shard, procedures.clone()));
                let server = Server::restore_with(node, opts, procedures, recovered, safe);
                TwoPlNode::Server(Box::new(server))
            }
            NodeRole::Replica { shard, .. } if safe.is_some() => {
                let primary = cluster.initial_leader(*shard);
                let safe = safe.expect("SafeTS on");
                let procedures = setup.procedures.clone();
                TwoPlNode::SafeReplica(Box::new(SafeReplica::new(primary, safe, procedures)))
            }
            NodeRole::Coordinator { .. } => TwoPlNode::Coordinator(Box::new(Coordinator::restore(
                node,
                opts,
                cluster.clone(),
                recovered,
            ))),
            NodeRole::Service { name, index } if name == ORACLE_SERVICE => {
                let epsilon_ns = opts.ttc.as_ref().expect("p2pl-ttc options").epsilon_ns;
                TwoPlNode::Oracle(OracleClock::new(*index, epsilon_ns))
            }
            _ => TwoPlNode::Inert,
        }
    }

    /// 2PL's bound: the largest round trip to an involved primary (execution and PREPARE
    /// each take one, so no commit is faster).
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        TwoPlTwoPc::bound_ms(cluster, coordinator, shards)
    }
}

/// `replica_reads` and SafeTS's options (`replica_reads=safets`); the others are refused
/// without it.
fn parse_safe_ts(
    raw: &ProtocolConfig,
    opts: &Options,
    commit_wait: bool,
) -> Result<Option<SafeTs>, String> {
    let mode: String = raw.get("replica_reads", "off".to_string())?;
    match mode.as_str() {
        "off" => {
            let own = [
                "safe_ts_interval_ms",
                "max_versions_per_key",
                "max_held_reads",
                "unsafe_serve_above_safe",
            ];
            let rest: Vec<&str> = P2PL_TTC_OPTIONS
                .iter()
                .copied()
                .filter(|k| !own.contains(k))
                .collect();
            raw.check_known(&rest)
                .map_err(|_| format!("protocol options {own:?} need `replica_reads=safets`"))?;
            Ok(None)
        }
        "safets" if !commit_wait => Err(
            "protocol option `replica_reads=safets` needs `commit_wait=true`: without it a \
             commit timestamp may lie after the commit in true time, and a read at TTC now \
             would miss a transaction that committed before it began"
                .to_string(),
        ),
        "safets" => {
            let interval_ms =
                positive_ms("safe_ts_interval_ms", raw.get("safe_ts_interval_ms", 10.0)?)?;
            let max_versions_per_key: usize = raw.get("max_versions_per_key", 64)?;
            let max_held_reads: usize = raw.get("max_held_reads", 4096)?;
            for (key, value) in [
                ("max_versions_per_key", max_versions_per_key),
                ("max_held_reads", max_held_reads),
            ] {
                if value == 0 {
                    return Err(format!("protocol option `{key}` must be at least 1"));
                }
            }
            Ok(Some(SafeTs {
                interval_ns: ms_to_ns(interval_ms),
                max_versions_per_key,
                max_held_reads,
                retry_ns: opts.retry_ns,
                timeout_ns: opts.exec_timeout_ns,
                unsafe_serve_above_safe: raw.get("unsafe_serve_above_safe", false)?,
            }))
        }
        other => Err(format!(
            "protocol option `replica_reads` must be `off` or `safets`, got `{other}`"
        )),
    }
}

/// An oracle's answers: `T_high` for a commit or read timestamp, `T_earliest` for a
/// primary's `t_safe`.
pub(crate) fn answer_oracle(
    o: &mut OracleClock,
    ctx: &mut Ctx<'_, TwoPlNode>,
    from: NodeId,
    msg: Msg,
) {
    let now_ns = ctx.now_ns();
    let reply = match msg {
        Msg::GetTs { txn } => Msg::OracleTs {
            txn,
            high_ns: o.stamp(now_ns),
            oracle: o.index,
        },
        Msg::Safe(SafeMsg::GetReadTs { request }) => Msg::Safe(SafeMsg::ReadTs {
            request,
            high_ns: o.stamp(now_ns),
            oracle: o.index,
        }),
        Msg::Safe(SafeMsg::GetEarliest) => Msg::Safe(SafeMsg::Earliest {
            earliest_ns: o.earliest(now_ns),
        }),
        _ => return,
    };
    ctx.send(from, reply);
}
