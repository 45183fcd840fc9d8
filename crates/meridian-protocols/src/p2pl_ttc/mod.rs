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
//!
//! ## Roles
//! * **Nodes** are `2pl-2pc`'s (`TwoPlNode`), with its `Oracle` variant built here.
//! * **Oracles**: the `oracle` service (`[[services]]` in `topologies/k2-five-regions.toml`:
//!   two per region), or one per region by default. Coordinators ask the nearest and move
//!   to the next nearest after each unanswered retry interval.
//! * **Servers**: each shard's primary (its initial leader) holds the data and the lock
//!   table; read replicas are inert (SafeTS replica reads are not implemented).
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
//!   transactions take shared locks like the rest (Spanner's lock-free snapshot reads would
//!   need versioned storage at the replicas, i.e. SafeTS).
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
//! ## Options
//! 2PL's (see [`crate::two_pl`]), plus `commit_wait` (true), `epsilon_us` (100; refused if
//! the topology's oracle clocks do not promise it), `drift_ppm` (200). The test-only
//! `unsafe_early_release=true` releases locks at the vote: the conformance suite shows the
//! checker catching it. `commit_wait=false` is no safety switch for the histories checked
//! here (2PL alone orders them); the timestamps' order is what it breaks, shown by
//! `tests.rs`.

#[cfg(test)]
mod tests;

use crate::kit::ttc::{check_oracle_clocks, OracleClock, ORACLE_SERVICE};
use crate::two_pl::{Coordinator, Options, Policy, Record, Server, Ttc, TwoPlNode, TwoPlTwoPc};
use crate::two_pl::{OPTIONS, P2PL_TTC_OPTIONS};
use meridian_core::node::Setup;
use meridian_core::time::NS_PER_US;
use meridian_core::{
    Cluster, NodeId, NodeRole, Protocol, ProtocolConfig, RegionId, ReplicaKind, ShardId,
};

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
        opts.ttc = Some(Ttc {
            epsilon_ns: epsilon_us * NS_PER_US,
            drift_ppm,
            commit_wait: raw.get("commit_wait", true)?,
        });
        opts.deadlock = Policy::WoundWait;
        opts.interactive = true;
        debug_assert!(OPTIONS.iter().all(|o| P2PL_TTC_OPTIONS.contains(o)));
        Ok(opts)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> TwoPlNode {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        match &cluster.node(node).role {
            NodeRole::Replica { shard, .. } if cluster.initial_leader(*shard) == node => {
                let procedures = setup.procedures.clone();
                TwoPlNode::Server(Box::new(Server::restore(node, opts, procedures, recovered)))
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
