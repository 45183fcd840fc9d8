//! # `tapir`: TAPIR over inconsistent replication (Zhang et al., SOSP '15, and the TR)
//!
//! **Guarantee: strict serializability** (`strict=true`, the default: the OCC check the
//! public implementation, UWSysLab/tapir, runs as `linearizable`), or **serializability**
//! with `strict=false` (the variant of the paper DAST evaluated, §6 of DAST: "a non-strict
//! serializable version presented in its paper"). `meridian sim` checks the default at
//! `strict-serializable` (the protocol's `GUARANTEE`); runs with `strict=false` are checked
//! with `--check serializable`, and the conformance tests do so.
//!
//! Every replica validates every transaction with optimistic concurrency control at the
//! transaction's timestamp (client clock, client id); replication is IR, which orders
//! nothing: Prepare is a consensus operation (all replicas vote; a super quorum of
//! matching votes is final at once), Commit and Abort are inconsistent operations that every
//! replica applies in any order. Conflicting transactions cannot both be PREPARE-OK at a
//! majority, and every final PREPARE-OK is the validated vote of at least f + 1 replicas.
//!
//! ## Paper → files
//! | TAPIR (SOSP '15 / TR) | here |
//! |---|---|
//! | §3.1–3.2.1 IR interface, client protocol: inconsistent ops, consensus ops, fast path (⌈3f/2⌉+1 matching), slow path (decide, FINALIZE, f+1 CONFIRM) | `coordinator.rs` (`evaluate`, `decide`), `replica.rs` (`on_prepare`, `on_finalize`) |
//! | §3.2.2 IR view change: DO-VIEW-CHANGE, leader v mod n, IR-MERGE-RECORDS over f + 1 records, START-VIEW; replicas in a view change refuse requests; replica recovery | `view_change.rs`, `replica.rs` (`on_message`, `restore`, `on_start`) |
//! | §5.2.2 (TR) TAPIR-MERGE (OCC re-validation of d's PREPARE-OK and of u) and TAPIR-SYNC | `view_change.rs` (`merge`, `sync`, `classify`) |
//! | §5.2 TAPIR client: versioned reads at the closest replica, buffered writes, Prepare, RETRY with a new timestamp, Commit/Abort | `coordinator.rs` |
//! | §5.2 TAPIR-OCC-CHECK, TAPIR-DECIDE, Commit/Abort at replicas | `occ.rs` (both variants), `coordinator.rs` (`decide`), `replica.rs` |
//! | TR §5.2.3 coordinator recovery (backup coordinators, cooperative termination) | replaced by a durable coordinator log with presumed abort (`kit::two_pc`) |
//! | §5 timestamps from loosely synchronized clocks | `coordinator.rs` (`advance`, `conclude`) |
//! | messages, timers, records | `wire.rs`; options: `options.rs` |
//!
//! ## Choices the paper left open (or that this substrate forced)
//! * **Execution at the coordinator.** TAPIR's client reads, then computes writes. A one-shot
//!   transaction's pieces therefore run at the coordinator (the coordinators play TAPIR's
//!   client library): one read round fetches every key any piece reads (keys are declared,
//!   so value dependencies never need a second round) from the closest replica of each shard,
//!   then all pieces run locally against the versions read and the buffered writes. `add` and
//!   `append` are read-modify-writes, so they enter the read set and are validated.
//! * **The timestamp** is (max(local clock, largest version read + 1), coordinator id): the
//!   serializable variant needs a timestamp above every version read; on RETRY the next
//!   attempt takes max(clock, largest proposal + 1, previous + 1). At most `max_attempts`
//!   timestamps are tried; then the transaction aborts (`Conflict`). ABORT and ABSTAIN
//!   results abort the transaction (the client sees `Conflict`), as TAPIR's client does.
//! * **Strict vs serializable OCC** (`occ.rs`) follows the two checks of the public
//!   implementation (`store/tapirstore/store.cc`, read, not copied): strict — a read
//!   must still be the latest version and no write to its key prepared; a write must be
//!   above the latest version, the latest read and any prepared write (else RETRY) and no
//!   prepared read may be above it (else ABSTAIN). Serializable — a read must be valid at the
//!   timestamp (no committed version in (version, ts], no prepared write there); a write must
//!   be above the last read of the version it supersedes. Where the public implementation
//!   abstains on *any* prepared write at or below ts for a still-valid read, this one abstains
//!   only for prepared writes in (version, ts): a write below the version read cannot
//!   change what the read saw.
//! * **Fast-path wait.** Once a majority of a shard replied without a super quorum of
//!   matching results, the coordinator waits `fast_path_wait_ms` (default half the largest
//!   RTT) for the rest, then takes the slow path (as soon as all replied, at once). With
//!   n = 3 the super quorum is all three replicas (`kit::quorum::super_quorum`), so one slow
//!   or crashed replica sends every transaction of its shard down the slow path.
//! * **Recovery: durable records *and* IR's view change.** A replica persists
//!   (`Effect::Persist`) each record entry before it replies: `Prepared` (the consensus
//!   result and the prepared read/write sets), `Finalized`, `Committed` (the writes),
//!   `Aborted`, its view (`View`), and a `ReplicaCheckpoint` of the store, prepared list,
//!   record and view every `checkpoint_every` records and after every view change. A
//!   restarted replica rebuilds itself from that log but never votes from it alone: it starts
//!   view v + 1 as RECOVERING, processes no request, and rejoins only when the leader's
//!   START-VIEW arrives (`view_change.rs`), so whatever it missed while down (finalized
//!   results, Prepares decided by the merge, aborts) comes in through the master record.
//!   IR itself keeps no disk (only the view numbers): there a recovering replica's record is
//!   empty and must not count among the f + 1 merged. Here it is complete, so the leader may
//!   merge it, and a recovering replica may lead a view; both are safe because its record
//!   holds every result it ever gave. The durable log also keeps the store (committed
//!   versions) across a restart, which IR's record of operations would otherwise rebuild.
//! * **When a view changes** (the paper leaves the trigger to failure detection): on a
//!   restart; when a view change does not finish within `view_change_ms` (the next view,
//!   whose leader is the next replica, v mod n); and when a replica that is normal in view
//!   v sees a PREPARE naming a later view (coordinators send the latest view they heard from
//!   the shard): it missed a START-VIEW and catches up through a new view change. IR needs no
//!   leader in normal operation, so a crashed (not restarted) replica only costs the fast
//!   path; the reference implementation's periodic view change (a 10-s timer that also fires
//!   in normal operation) is not followed. START-VIEW is not acknowledged (neither is it
//!   there): a replica that misses it times out and starts the next view.
//! * **The merge** (`view_change.rs`, the TR's IR-MERGE-RECORDS and TAPIR-MERGE; the public
//!   implementation's `IrMergeRecords` is followed, its `tapirstore::Server::Merge` and `Sync`
//!   are unimplemented there): records with the largest latest normal view are merged; per
//!   transaction only the latest attempt's Prepare counts (a RETRY starts a new IR operation);
//!   a transaction committed in any record is PREPARE-OK and one aborted is dropped (this
//!   replica forgets a Prepare entry once Commit or Abort applied, which IR's record does
//!   not, so the records carry the recently finished transactions); finalized results stand;
//!   a result ⌈f/2⌉ + 1 records share (d) stands unless it is PREPARE-OK, which is validated
//!   again at the leader after R's PREPARE-OKs were prepared; the rest (u) are validated again.
//!   Every merged result is finalized in the master record. d's PREPARE-OK results are
//!   re-checked with the serializable check in both variants: one of them may be a fast-path
//!   commit whose read a later blind write overtook (a write validates above a prepared read),
//!   and the strict check would call that read stale and drop a committed transaction from
//!   the prepared lists (`view_change.rs` has the unit test).
//! * **Commits in the records.** IR's Sync applies the records' inconsistent operations;
//!   here each replica keeps its latest `commits_in_record` commits (default 8192) with their
//!   arguments (transaction, timestamp, reads and writes: a committed read bars later writes
//!   below it) and ships them, with the ids of its latest 16 Ki finished transactions, in
//!   its record. The leader applies (and logs) every commit the received records carry
//!   before it merges, and ships its own window in START-VIEW, where every replica applies
//!   the ones it lacks before TAPIR's Sync. Past the window a record names a commit by id
//!   only: a leader that lacks one does not merge, and a replica that lacks one after
//!   START-VIEW does not return to normal, until its COMMIT arrives (the coordinators resend
//!   COMMIT until every replica acknowledged; Commit and Abort are applied during a view
//!   change, every other request is refused); a replica waiting so after START-VIEW starts no
//!   new view. A replica remembers 64 Ki finished ids, four times what a record names, so one
//!   applied long ago is not taken for one missed. Without this, a leader that was down
//!   while a transaction committed re-validated another transaction's stale read of the key
//!   as PREPARE-OK (seed 20 of the serializable swarm lost a committed append so), and a
//!   replica that was down returned to normal with a stale store and later, leading a view
//!   alone on it, did the same (seed 155); `tests.rs` replays both.
//! * **Sync keeps what is committing.** A replica that holds PREPARE-OK for a transaction the
//!   master record names committed, and has not applied its COMMIT yet, keeps it prepared (the
//!   master record may hold no entry for it once the merged replicas applied the commit);
//!   otherwise a conflicting transaction could validate at it before the COMMIT arrives.
//! * **Views at the client** (IR §3.2.1, the reference `IRClient`): PREPARE replies carry the
//!   replica's view; a fast quorum is ⌈3f/2⌉ + 1 matching replies *of one view*, the slow
//!   path decides from a majority of one view (the latest), a reply marked finalized is
//!   adopted and finalized at once, and CONFIRMs count only from the view the decision came
//!   from; a CONFIRM from another view (the replica moved on, and the merge may have decided
//!   otherwise) restarts the shard's Prepare, where the reference client reports
//!   `MISMATCHED_CONSENSUS_VIEWS` to its caller. A FINALIZE decided in another view is not
//!   recorded (the reference replica overwrites the result whatever the view).
//! * **FINALIZE does not change OCC state** in normal operation: a replica records the decided
//!   result (and answers a duplicate PREPARE with it), but keeps its own prepared list; safety
//!   rests on the f + 1 replicas whose own check said PREPARE-OK. A view change's Sync does
//!   change it: every replica's prepared list becomes the master record's PREPARE-OK entries.
//! * **Coordinator failure.** Instead of backup coordinators (TR §5.2.3), the coordinator logs
//!   its commit decision before answering the client or sending COMMIT (`kit::two_pc`'s
//!   presumed-abort log); a replica that holds an undecided entry for `query_ms` asks the
//!   coordinator, which answers COMMIT, nothing (still deciding) or ABORT (presumed). A
//!   crashed coordinator therefore blocks conflicting transactions (they abstain) until it
//!   restarts, where TAPIR's cooperative termination would not.
//! * **Bounded memory.** `versions_kept` versions per key (a read or write below the oldest
//!   kept version is refused: ABORT or RETRY), `FINISHED_KEPT` finished ids per replica,
//!   `max_inflight` transactions per coordinator, retransmissions every `retry_ms` until
//!   `exec_timeout_ms`.
//! * **Interactive transactions** run as TAPIR's client runs them: Begin opens a session,
//!   each Get is a versioned read at the closest replica (a key read twice keeps its first
//!   version; a key written reads the buffered value), Put buffers, Commit prepares the read
//!   and write sets like a one-shot transaction. An idle session is forgotten after
//!   `exec_timeout_ms` (nothing of it is prepared before Commit).
//!
//! ## Where the Janus framework's `src/deptran/tapir` differs (the code Tiga and DAST ran)
//! * Janus dispatches pieces to every replica of a partition and uses the designated
//!   leader's reply (execution and read versions at the servers); here reads go to the
//!   closest replica and execution happens at the coordinator, as in TAPIR's paper.
//! * Janus has no slow path: a transaction commits only with PREPARE-OK from every replica
//!   of every participant (its fast quorum is the whole partition; `GetFastQuorum` returns
//!   the partition size); as soon as that is impossible the transaction aborts and restarts
//!   with a new id (re-execution). Its coordinator's `FastAcceptAck` tells only SUCCESS from
//!   REJECT: there is no RETRY with a proposed timestamp, and its `Accept` (a slow path) is
//!   defined but not called from its phase machine. Here the IR slow path (decide,
//!   FINALIZE, f + 1 CONFIRM) and TAPIR's RETRY are implemented; so in Janus a single
//!   crashed replica stops all commits of its partition, here it costs the slow path.
//! * Janus's replica check (`SchedulerTapir::OnFastAccept`) follows the strict check for
//!   reads (newer version: reject; version below a prepared write: abstain) but registers
//!   a transaction's prepared *writes* with `insert_prepared_rver`, the prepared-read list;
//!   here prepared reads and writes are indexed apart. Janus has no strict/serializable
//!   switch (DAST extended it to the non-strict variant, per DAST §6).
//!
//! ## Checked
//! The conformance tests run 20 seeds of 10 s per variant (strict, and `strict=false` checked
//! at `serializable`) and catch the broken variant below; `tests.rs` replays the view-change
//! interleavings that lost commits (seed 20 of the serializable swarm: a stale leader; seed
//! 155: a stale replica back to normal) and the id-only path (`commits_in_record=0`), and
//! `view_change.rs` tests the merge. 200-seed swarms of 20 s (`meridian sim swarm --protocol
//! tapir --topology topologies/gcp-tiga.toml --workload list-append --seeds 50 --first-seed K
//! --jobs 1 --faults random --duration 20s`, K = 1, 51, 101, 151; the code of commit 23ab7e7,
//! dev-profile binary) all pass: strict, 200 of 200 (32,518 commits, 92,474 aborts, 933
//! unknown); `--protocol-opts strict=false --check serializable`, 200 of 200 (35,050 commits,
//! 91,498 aborts, 935 unknown). Under list-append's few hot keys most transactions abort
//! (OCC over WAN round trips).
//!
//! **Interactive TPC-C** (Payment and Order-Status multi-shot, Tiga §5.1): the same swarm with
//! `--workload tpcc --workload-opts warehouses=6,interactive=true` passes on all 200 seeds
//! (the TPC-C conditions on the final state; TPC-C records no history ops, so the conditions
//! are the check): 120,153 commits, 43,162 aborts, 843 unknown.
//!
//! **Why every HK Payment aborts, and why the paper's TAPIR would too.** Payment's `W_YTD`
//! (and `D_YTD`) updates are read-modify-writes, and TAPIR has no commutative update: its
//! client reads the key at the closest replica (from HK that is SC, 201 ms away), buffers the
//! new value, and the read is validated only at Prepare. TAPIR-OCC-CHECK aborts a read whose
//! version is no longer the latest (strict; the serializable check aborts when a version was
//! committed in (version, ts], and ts comes after the read) and abstains while another
//! transaction's write to the key is prepared. From HK the `W_YTD` read is step 2 of 7, and
//! the Prepare reaches the replicas four more HK–SC round trips and one HK–BR one-way trip
//! later (about 1 s); any other Payment of the same warehouse that prepares or commits in
//! that window fails it, and the SC, FI and BR coordinators' Payments, whose reads are
//! answered in their own region, hold much shorter windows and win. The paper's TAPIR
//! behaves the same: reads are unvalidated until Prepare, the check is the one its code runs
//! in both modes (`store/tapirstore/store.cc`), and RETRY moves only a *write's* timestamp;
//! it never revives a stale read. Tiga §5.1 reports the same for the Janus framework's
//! Tapir on TPC-C ("very low throughput due to frequent transaction aborts"). Nothing here
//! is stricter than the paper, so nothing was changed; the HK count (seed 1, 10 s, no
//! faults: HK's Payments 0 committed, 19 aborted) is from the build before the view change.
//! The `tests/tpcc_baselines.rs` test runs three short seeds of it.
//!
//! ## Options
//! `strict`, `retry_ms`, `fast_path_wait_ms`, `exec_timeout_ms`, `query_ms`, `max_retries`,
//! `max_attempts`, `max_inflight`, `versions_kept`, `checkpoint_every`, `view_change_ms`,
//! `commits_in_record`, and the
//! **test-only** `unsafe_skip_slow_path_validation=true`: on the slow path the coordinator
//! finalizes PREPARE-OK whatever the replicas validated — the broken variant the
//! conformance test shows the checker catching.

mod coordinator;
mod occ;
mod options;
mod replica;
mod view_change;
mod wire;

#[cfg(test)]
mod tests;

pub use coordinator::Coordinator;
pub use occ::OccState;
pub use options::{Options, OPTIONS};
pub use replica::Replica;
pub use wire::{
    CommitDecision, CommitOp, IrRecord, Msg, Record, RecordEntry, ReplicaSnapshot, ShardTxn, Timer,
    Vote,
};

use meridian_core::node::{Ctx, Setup};
use meridian_core::txn::ClientRequest;
use meridian_core::{
    Cluster, Node, NodeId, NodeRole, Protocol, ProtocolConfig, RequestId, ShardId,
};

/// TAPIR over IR. Implements [`Protocol`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Tapir;

/// A node of `tapir`.
#[derive(Debug)]
pub enum TapirNode {
    Replica(Box<Replica>),
    Coordinator(Box<Coordinator>),
    /// A service placed by another layer (none is): does nothing.
    Inert,
}

impl Protocol for Tapir {
    type Node = TapirNode;
    type Options = Options;

    const NAME: &'static str = "tapir";
    const GUARANTEE: &'static str = "strict-serializable";
    const OPTIONS: &'static [&'static str] = &OPTIONS;

    fn parse_options(raw: &ProtocolConfig, cluster: &Cluster) -> Result<Options, String> {
        Options::for_cluster(raw, cluster)
    }

    fn build(node: NodeId, setup: &Setup<Self>, recovered: &[Record]) -> TapirNode {
        let cluster = &setup.cluster;
        let opts = setup.options.clone();
        match cluster.node(node).role {
            NodeRole::Replica { shard, .. } => {
                let peers = cluster.replicas(shard).to_vec();
                TapirNode::Replica(Box::new(Replica::restore(node, opts, peers, recovered)))
            }
            NodeRole::Coordinator { .. } => TapirNode::Coordinator(Box::new(Coordinator::restore(
                node,
                opts,
                cluster.clone(),
                setup.procedures.clone(),
                recovered,
            ))),
            _ => TapirNode::Inert,
        }
    }

    /// Tiga's bound (the round trip to the farthest member of each shard's closest super
    /// quorum), so that WRTT counts of the two protocols share one denominator.
    fn bound_ms(cluster: &Cluster, coordinator: NodeId, shards: &[ShardId]) -> f64 {
        crate::kit::quorum::super_quorum_round_trip_ms(cluster, coordinator, shards)
    }
}

impl Node for TapirNode {
    type Msg = Msg;
    type Timer = Timer;
    type Record = Record;

    fn on_start(&mut self, ctx: &mut Ctx<'_, Self>) {
        match self {
            TapirNode::Replica(r) => r.on_start(ctx),
            TapirNode::Coordinator(c) => c.on_start(ctx),
            TapirNode::Inert => {}
        }
    }

    fn on_message(&mut self, ctx: &mut Ctx<'_, Self>, from: NodeId, msg: Msg) {
        match self {
            TapirNode::Replica(r) => r.on_message(ctx, from, msg),
            TapirNode::Coordinator(c) => c.on_message(ctx, from, msg),
            TapirNode::Inert => {}
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_, Self>, timer: Timer) {
        match self {
            TapirNode::Replica(r) => r.on_timer(ctx, timer),
            TapirNode::Coordinator(c) => c.on_timer(ctx, timer),
            TapirNode::Inert => {}
        }
    }

    fn on_client_request(
        &mut self,
        ctx: &mut Ctx<'_, Self>,
        request: RequestId,
        req: ClientRequest,
    ) {
        match self {
            TapirNode::Coordinator(c) => c.on_client_request(ctx, request, req),
            _ => ctx.refuse_not_coordinator(request),
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self {
            TapirNode::Replica(r) => r.check_invariants(),
            _ => Ok(()),
        }
    }
}
