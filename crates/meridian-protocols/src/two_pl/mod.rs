//! # `2pl-2pc`: strict two-phase locking with two-phase commit (the reference protocol)
//!
//! **Guarantee: strict serializability.** Every transaction takes shared locks on what it
//! reads and exclusive locks on what it writes, and keeps them until its commit decision is
//! applied (strict 2PL); a committed transaction's effects become visible atomically on all
//! shards because no conflicting transaction can touch its keys between its lock point and
//! the moment every participant has installed its writes. The client hears "committed" only
//! after the decision is durable, so the serialization order (lock-point order) respects
//! real time.
//!
//! **What it is for.** It is not one of the papers' protocols: it is the simplest correct
//! protocol that exercises everything the harness offers (one-shot transactions with value
//! dependencies, multi-shard commit, crashes, message loss, duplication and reordering,
//! durable records and recovery), so that the simulator, the checker and the workloads can be
//! validated against a protocol whose correctness is not in question — and, through the
//! test-only `unsafe_early_release` switch, against one whose bug is known.
//!
//! ## Roles
//! * **Servers** (`server.rs`): each shard's data lives only on its *initial leader*; there
//!   is no replication. The shard's other replicas are built as inert nodes.
//! * **Coordinators** (`coordinator.rs`): take `ClientRequest::OneShot` transactions.
//!   `ClientRequest::Interactive` is answered `Aborted{Unsupported}`: this reference runs
//!   one-shot transactions only.
//!
//! ## Message flow
//! ```text
//! client ─OneShot→ coordinator
//!   execution:  EXECUTE(pieces whose inputs are known) ──→ server: lock (WAIT-DIE), run
//!               against buffered writes ──→ EXECUTED(results) | FAILED(reason)
//!               … repeated as value dependencies resolve
//!   single shard:  EXECUTE(one_round) → lock, run, apply, log Committed, unlock → DONE
//!                  (client: Committed{path: Local}); on timeout RESOLVE → DONE either way
//!   2PC:        PREPARE ──→ server logs Prepared, votes yes iff it still holds the locks
//!               ←── VOTE;  all yes: coordinator logs Decided, sends COMMIT, answers the
//!               client (Committed{path: TwoPhase}); a server applies, logs Committed,
//!               unlocks ──→ COMMIT-ACK.  Any no / failure / timeout: ABORT (not logged).
//!   recovery:   a prepared server with no decision sends QUERY every `query_ms`; the
//!               coordinator answers COMMIT if it logged the decision, nothing if still
//!               deciding, else ABORT (presumed abort).
//! ```
//!
//! ## Choices the brief left open
//! * **Deadlock prevention: WAIT-DIE** on an age = (coordinator's local clock at submission,
//!   txn id). Waiters queue FIFO per key with no barging (a compatible request still waits
//!   behind earlier waiters, and dies if younger than a conflicting one); an upgrade goes to
//!   the head of the queue. See `locks.rs`.
//! * **Execution order on a shard**: a coordinator never sends a piece before every earlier
//!   piece of the same shard has a result (or travels in the same batch), so a server runs a
//!   transaction's pieces in piece order whatever the network does. Dependencies between
//!   pieces of one batch are resolved by the server.
//! * **Horizon** (idempotence without unbounded memory): every coordinator→server message
//!   carries the coordinator's smallest undecided transaction id. A server forgets finished
//!   transactions below it, ignores stale messages about them, and aborts unprepared ones
//!   below it at once (a lost ABORT costs nothing). Duplicates of anything else are answered
//!   from the server's state: a live transaction, or a bounded "finished" table.
//! * **Server incarnations**: a server logs `Started` at every boot and tags EXECUTED replies
//!   with its incarnation; PREPARE names the incarnation whose results the coordinator holds
//!   and the server votes no on a mismatch. Without it, a restart between execution and
//!   PREPARE followed by a late duplicate EXECUTE would re-run a piece against a changed
//!   store and commit writes that disagree with the results the client was given.
//! * **One-round single-shard commit** cannot be aborted unilaterally by its coordinator (the
//!   server may already have committed): on timeout the coordinator sends RESOLVE, and the
//!   server answers with the outcome, aborting first if needed (and logging that abort so a
//!   late EXECUTE cannot commit it after a restart). If the server never answers, the
//!   client gets `Outcome::Unknown`.
//! * **Presumed abort** with a `Decided` record per committed transaction; a restarted
//!   coordinator re-sends COMMIT for decisions not known to be acknowledged and takes a new
//!   incarnation (logged in `Started`) so its transaction ids never repeat.
//! * **Timeouts**: an unprepared server aborts a transaction it has heard nothing about for
//!   `idle_timeout_ms`; a prepared one blocks (asking periodically) — faithful to 2PC.
//! * **Records** are compact: servers log Prepared/Committed/Aborted and a checkpoint of
//!   the whole store after `checkpoint_every` records and as many as the store has keys,
//!   or sooner once the records since the last one carry more bytes than the store (and
//!   1 MiB): a value that only grows, written whole by every record, must not grow the log
//!   quadratically (`kit::log::checkpoint_due_by_size`); restore starts from the latest
//!   checkpoint. Coordinators log Started/Decided and a checkpoint of unacknowledged
//!   decisions.
//! * **Limits**: `max_inflight` undecided transactions per coordinator (beyond it:
//!   `Aborted{Unsupported("overloaded: …")}`), `max_waiters_per_key` (beyond it:
//!   `Aborted{Conflict}`), `max_retries` retransmissions of EXECUTE batches (within
//!   `exec_timeout_ms`), PREPARE and RESOLVE. COMMIT is the exception: it is retransmitted
//!   until acknowledged (after `max_retries`, once per `idle_timeout_ms`), because the
//!   decision must be kept until then anyway.
//!
//! ## Options (`ProtocolConfig`)
//! `retry_ms`, `exec_timeout_ms`, `idle_timeout_ms`, `query_ms`, `max_retries`,
//! `max_inflight`, `max_waiters_per_key`, `checkpoint_every` (see [`Options`]; the same
//! server and coordinator also run `2pl-raft` and `occ-raft`, see `crate::raft_2pc`), and the
//! **test-only** `unsafe_early_release=true`, which makes servers release locks when they
//! vote yes instead of when the decision arrives — a deliberately broken variant that loses
//! updates, kept so the swarm test can show the checker catching it. Never use it otherwise.

mod coordinator;
mod locks;
mod occ;
mod options;
mod server;
mod vecmap;
mod wire;

#[cfg(test)]
mod tests;

pub use coordinator::Coordinator;
pub use locks::{LockMode, Policy};
pub use occ::Concurrency;
pub use options::{Options, Ttc, OPTIONS, P2PL_TTC_OPTIONS};
pub use server::Server;
pub(crate) use wire::Cx;
pub use wire::{
    Age, Finished, LocalCommit, LocalOutcome, Msg, PieceRun, PreparedTxn, Record, ServerSnapshot,
    Timer, ToCoord, ToServer,
};

use crate::kit::ttc::OracleClock;
use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::ShardId;
use meridian_core::{Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RequestId};

/// The reference protocol: strict 2PL + 2PC, single copy. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TwoPlTwoPc;

/// A node of `2pl-2pc`.
#[derive(Debug)]
pub enum TwoPlNode {
    /// The data node of a shard (its initial leader).
    Server(Box<Server>),
    Coordinator(Box<Coordinator>),
    /// `p2pl-ttc`'s TTC oracle (`crate::p2pl_ttc`): answers `GetTs` with `T_high`.
    Oracle(OracleClock),
    /// `p2pl-ttc` with `replica_reads=safets`: a read replica (`crate::p2pl_ttc::safets`).
    SafeReplica(Box<crate::p2pl_ttc::safets::SafeReplica>),
    /// A replica that is not its shard's initial leader, or a service: does nothing.
    Inert,
}

impl Protocol for TwoPlTwoPc {
    type Node = TwoPlNode;

    type Options = Options;

    const NAME: &'static str = "2pl-2pc";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;
    /// Only a shard's initial leader holds data; its other replicas are inert whatever
    /// their kind, so any placement runs (the reference on K2's and Aurogon's layouts).
    const REPLICA_KINDS: &'static [meridian_core::ReplicaKind] = &[
        meridian_core::ReplicaKind::Voter,
        meridian_core::ReplicaKind::ReadReplica,
        meridian_core::ReplicaKind::Backup,
    ];

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        let opts = Options::for_cluster(raw, cluster)?;
        if opts.unsafe_skip_validation {
            return Err(
                "protocol option `unsafe_skip_validation` is occ-raft's: 2pl-2pc \
                        validates nothing"
                    .to_string(),
            );
        }
        Ok(opts)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> TwoPlNode {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        match cluster.node(node).role {
            NodeRole::Replica { shard, .. } if cluster.initial_leader(shard) == node => {
                let procedures = setup.procedures.clone();
                TwoPlNode::Server(Box::new(Server::restore(node, opts, procedures, recovered)))
            }
            NodeRole::Coordinator { .. } => TwoPlNode::Coordinator(Box::new(Coordinator::restore(
                node,
                opts,
                cluster.clone(),
                recovered,
            ))),
            _ => TwoPlNode::Inert,
        }
    }

    /// The largest round trip from the coordinator to the data node of an involved shard:
    /// a single-shard transaction commits in one round trip, and no protocol can do better.
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        shards
            .iter()
            .map(|&s| cluster.rtt_ms(coordinator, cluster.initial_leader(s)))
            .fold(0.0, f64::max)
    }
}

impl Node for TwoPlNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            TwoPlNode::Server(s) => s.on_start(ctx),
            TwoPlNode::Coordinator(c) => c.on_start(ctx),
            TwoPlNode::SafeReplica(r) => r.on_start(ctx),
            TwoPlNode::Oracle(_) | TwoPlNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            TwoPlNode::Server(s) => match msg {
                Msg::Safe(msg) => s.on_safe(ctx, from, msg),
                msg => s.on_message(ctx, msg),
            },
            TwoPlNode::Coordinator(c) => c.on_message(ctx, from, msg),
            TwoPlNode::Oracle(o) => crate::p2pl_ttc::answer_oracle(o, ctx, from, msg),
            TwoPlNode::SafeReplica(r) => {
                if let Msg::Safe(msg) = msg {
                    r.on_message(ctx, from, msg);
                }
            }
            TwoPlNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            TwoPlNode::Server(s) => s.on_timer(ctx, timer),
            TwoPlNode::Coordinator(c) => c.on_timer(ctx, timer),
            TwoPlNode::SafeReplica(r) => r.on_timer(ctx, timer),
            TwoPlNode::Oracle(_) | TwoPlNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            TwoPlNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            TwoPlNode::Server(s) => s.check_invariants(),
            _ => Ok(()),
        }
    }
}
