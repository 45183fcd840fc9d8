//! # `primary_backup`: an unchanged partition server on its shard's primary
//!
//! The primary-backup analogue of [`crate::kit::replicated`], as Aurogon §4.5 and §6.1
//! replicate a partition (its R2PL and ROCC baselines run over "the same primary-backup
//! replication"): each shard has a primary (the topology's initial leader in epoch 0) and
//! backups (its other replicas), f + 1 copies in all. The partition's server runs
//! unchanged on the primary and implements [`Partition`] (with [`Backed`]'s wiring).
//!
//! What the server would append to its write-ahead log is sent to **every** backup, one
//! `Replicate` per handler (one message and one acknowledgement per backup: the message
//! count of the paper's synchronous replication on microsecond links); everything the
//! server sends after a record is held back until every backup acknowledged that record —
//! or what the protocol's [`Release`] policy says the message depends on. So every
//! replica's log holds every record anything sent depends on, and any replica can take
//! over. Backups append in order: a proposal that arrives past a gap (links reorder) is
//! kept until the gap fills; a lost one is resent by the primary's heartbeat, or the
//! backup gets a `Sync`, the primary's whole log, sent at takeover and to a backup that
//! has not caught up for a heartbeat.
//!
//! A backup that hears nothing from its primary for `failover_ns` campaigns for the next
//! epoch ([`crate::kit::promotion`], shared with Aurogon: a majority of coordinators grants
//! an epoch to one candidate). The winner rebuilds the server from its records exactly as
//! a restarted partition does ([`Partition::restore`], then [`Partition::on_start`]),
//! syncs the others, and serves. A replica refuses anything from an older epoch's primary
//! (`Stale`), so a deposed primary can release nothing more: the records its sends wait
//! for are never acknowledged. A restarted replica never resumes as primary by itself: it
//! waits to hear a primary, or campaigns.
//!
//! Members that do not serve answer partition requests with the protocol's `NotLeader`,
//! naming the primary they know; coordinators route with
//! [`crate::kit::replicated::Leaders`] as over Raft.

use crate::kit::promotion::{Candidacy, Grants};
use crate::kit::replicated::{Inbound, MemberTimer, Outbox, Partition, PartitionCx, Release};
use meridian_core::node::Effect;
use meridian_core::{Cluster, NodeId, ShardId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A backup was promoted (won an epoch) and rebuilt the server.
pub const PB_PROMOTIONS: &str = "pb_promotions";
/// A primary learned of a newer epoch and stopped serving.
pub const PB_DEPOSED: &str = "pb_deposed";
/// A primary sent its whole log to a backup (takeover, or a backup behind).
pub const PB_SYNCS: &str = "pb_syncs";

/// Which replica is primary of a shard in `epoch`. Epoch 0 is the topology's placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub epoch: u64,
    pub primary: NodeId,
}

/// What members and coordinators say to each other for replication and promotion.
/// Records travel encoded (postcard of the protocol's records, see `encode`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PbMsg {
    /// Primary → backup: the records of its `seq`-th handler in `epoch`.
    Replicate {
        epoch: u64,
        seq: u64,
        records: Vec<u8>,
    },
    /// Primary → backup: its whole log, which holds proposals up to `seq`.
    Sync { epoch: u64, seq: u64, log: Vec<u8> },
    /// Primary → backup, each heartbeat: it serves `epoch`.
    Heartbeat { epoch: u64 },
    /// Backup → primary: it holds every record of `epoch` up to proposal `seq` (`None`:
    /// it has not been synced in `epoch`, and needs the whole log).
    Ack { epoch: u64, seq: Option<u64> },
    /// A replica that knows a newer configuration than the sender's epoch.
    Stale { config: Config },
    /// Backup → coordinators: make me primary of `shard` in `epoch`.
    RequestGrant { shard: ShardId, epoch: u64 },
    Grant {
        shard: ShardId,
        epoch: u64,
        granted: bool,
    },
}

/// A durable record of a member or (for grants) a coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PbRecord {
    /// A configuration adopted.
    Config(Config),
    /// Server records appended to the member's log (postcard).
    Entries(Vec<u8>),
    /// The member's whole state: its configuration and log (postcard). Subsumes the others.
    Snapshot { config: Config, log: Vec<u8> },
    /// Coordinator: an epoch of a shard granted.
    Granted {
        shard: ShardId,
        epoch: u64,
        candidate: NodeId,
    },
}

/// How a [`Partition`]'s messages and records carry the primary-backup kit's.
pub trait Backed: Partition {
    fn pb_msg(msg: PbMsg) -> Self::Msg;
    /// The kit's message, or the message back (a request for the server).
    fn as_pb_msg(msg: Self::Msg) -> Result<PbMsg, Self::Msg>;
    fn pb_record(record: PbRecord) -> Self::Record;
    fn as_pb_record(record: &Self::Record) -> Option<&PbRecord>;
}

/// Timing of a shard's replicas.
#[derive(Clone, Copy, Debug)]
pub struct PbTiming {
    /// Heartbeats, retransmission of a lagging backup's `Sync`, failure checks.
    pub heartbeat_ns: u64,
    /// A backup campaigns after this long without hearing its primary.
    pub failover_ns: u64,
    /// TEST-ONLY, deliberately broken: the primary's sends go out at once, before its
    /// backups hold the records they depend on (a promoted backup may lack what a client
    /// already saw).
    pub unsafe_release_before_ack: bool,
}

/// A proposal's records as the backups receive and log them: postcard, as the runtime
/// stores records. JSON cost about 60 % of a TPC-C/N run on `2pl-pb` (Aurogon Fig. 8,
/// whose records carry whole NEW-ORDER lists); with postcard the 20 ms point of Fig. 8's
/// `remote_item=0.01`, 5 warehouses took 4.6 and 3.9 s of CPU against 36.8 and 30.4 s,
/// with the same trace. Postcard is not self-describing, so a
/// record type must not skip fields when it serializes (the guard:
/// `two_pl::tests::records_read_back_through_the_runtimes_codec`).
fn encode<R: Serialize>(records: &[R]) -> Vec<u8> {
    postcard::to_stdvec(records).expect("records always encode")
}

fn decode<R: DeserializeOwned>(bytes: &[u8]) -> Option<Vec<R>> {
    postcard::from_bytes(bytes).ok()
}

/// Proposals a primary keeps for retransmission to a backup that missed one; a backup
/// further behind gets a `Sync`.
const MAX_PENDING: usize = 256;

/// What a primary knows of one backup.
#[derive(Clone, Copy, Debug)]
struct Backup {
    node: NodeId,
    /// The last proposal it acknowledged.
    acked: u64,
    /// When it last acknowledged progress or was last caught up.
    progress_ns: u64,
    /// When it was last sent what it misses (after the first, one resend per
    /// `failover_ns`, so a backup that is down costs little).
    resent_ns: Option<u64>,
    /// It acknowledged a `Sync` of this epoch (and has not said it lost it since).
    synced: bool,
}

/// The server while this member is primary, and what it has not yet been allowed to say.
#[derive(Debug)]
struct Primary<P: Partition> {
    server: P,
    release: P::Release,
    outbox: Outbox<P>,
    backups: Vec<Backup>,
    /// The encoded records of the latest proposals not every backup acknowledged.
    pending: std::collections::VecDeque<(u64, Vec<u8>)>,
}

/// One replica of a primary-backup partition.
#[derive(Debug)]
pub struct Member<P: Partition> {
    id: NodeId,
    shard: ShardId,
    replicas: Vec<NodeId>,
    coordinators: Vec<NodeId>,
    setup: P::Setup,
    timing: PbTiming,
    config: Config,
    /// The server records from the last checkpoint on: what a promoted member restores.
    log: Vec<P::Record>,
    /// A backup: the last proposal of `config.epoch` it holds (`None`: not synced yet).
    synced: Option<u64>,
    /// A backup: proposals of `config.epoch` that arrived past a gap (links reorder
    /// messages: with microsecond jitter, consecutive proposals often swap), applied once
    /// the gap fills; at most `MAX_PENDING`, the primary resends the rest.
    ahead: std::collections::BTreeMap<u64, Vec<u8>>,
    last_heard_ns: u64,
    highest_epoch_seen: u64,
    candidacy: Candidacy,
    primary: Option<Primary<P>>,
}

impl<P: Backed> Member<P> {
    /// Builds replica `id` of `shard` from its durable records.
    pub fn restore(
        id: NodeId,
        shard: ShardId,
        cluster: &Cluster,
        setup: P::Setup,
        timing: PbTiming,
        records: &[P::Record],
    ) -> Member<P> {
        let mut member = Member {
            id,
            shard,
            replicas: cluster.replicas(shard).to_vec(),
            coordinators: cluster.coordinators.clone(),
            setup,
            timing,
            config: Config {
                epoch: 0,
                primary: cluster.initial_leader(shard),
            },
            log: Vec::new(),
            synced: None,
            ahead: Default::default(),
            last_heard_ns: 0,
            highest_epoch_seen: 0,
            candidacy: Candidacy::default(),
            primary: None,
        };
        for record in records {
            match P::as_pb_record(record) {
                Some(r) => member.replay(r),
                None => panic!("log of replica {id} holds {record:?}"),
            }
        }
        member.highest_epoch_seen = member.config.epoch;
        member
    }

    fn replay(&mut self, record: &PbRecord) {
        match record {
            PbRecord::Config(config) => self.config = *config,
            PbRecord::Entries(bytes) => {
                let records = decode(bytes).expect("our entries decode");
                self.append(records);
            }
            PbRecord::Snapshot { config, log } => {
                self.config = *config;
                self.log = decode(log).expect("our snapshots decode");
            }
            PbRecord::Granted { .. } => panic!("replica {} logged a grant", self.id),
        }
    }

    /// Appends server records; true if one of them is a checkpoint (the log restarted).
    fn append(&mut self, records: Vec<P::Record>) -> bool {
        let mut restarted = false;
        for record in records {
            if P::is_checkpoint(&record) {
                self.log.clear();
                restarted = true;
            }
            self.log.push(record);
        }
        restarted
    }

    /// Logs appended records: the whole state when the server checkpointed, so the
    /// member's own log stays as short as the server's.
    fn persist(&self, cx: &mut PartitionCx<'_, P>, records: &[P::Record], restarted: bool) {
        if restarted {
            let (config, log) = (self.config, encode(&self.log));
            cx.checkpoint(P::pb_record(PbRecord::Snapshot { config, log }));
        } else {
            cx.persist(P::pb_record(PbRecord::Entries(encode(records))));
        }
    }

    pub fn on_start(&mut self, cx: &mut PartitionCx<'_, P>) {
        // Heard "now": a restarted replica first gives a live primary time to show itself.
        self.last_heard_ns = cx.now_ns();
        cx.set_timer(self.timing.heartbeat_ns, P::raft_tick());
        // The placed primary starts the first epoch without a campaign; it is nobody's
        // backup, so epoch 0 has one primary.
        if self.config.epoch == 0 && self.config.primary == self.id && self.log.is_empty() {
            self.take_over(cx);
        }
    }

    pub fn on_message(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, msg: P::Msg) {
        match P::as_pb_msg(msg) {
            Ok(m) => self.on_pb(cx, from, m),
            Err(msg) => match P::inbound(msg) {
                Inbound::Request { txn, msg } => self.serve(cx, from, txn, msg),
                Inbound::Raft(_) => {}
            },
        }
    }

    pub fn on_timer(&mut self, cx: &mut PartitionCx<'_, P>, timer: P::Timer) {
        match P::member_timer(timer) {
            MemberTimer::RaftTick => {
                self.tick(cx);
                cx.set_timer(self.timing.heartbeat_ns, P::raft_tick());
            }
            MemberTimer::Led { epoch, timer } => {
                if self.primary.is_some() && self.config.epoch == epoch {
                    self.run(cx, |server, cx| server.on_timer(cx, timer));
                }
            }
        }
    }

    fn on_pb(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, msg: PbMsg) {
        match msg {
            PbMsg::Replicate {
                epoch,
                seq,
                records,
            } => {
                if self.current(cx, from, epoch) {
                    self.on_replicate(cx, from, seq, &records);
                }
            }
            PbMsg::Sync { epoch, seq, log } => {
                if self.current(cx, from, epoch) {
                    self.on_sync(cx, from, seq, &log);
                }
            }
            PbMsg::Heartbeat { epoch } => {
                if self.current(cx, from, epoch) {
                    self.ack(cx, from);
                }
            }
            PbMsg::Ack { epoch, seq } => self.on_ack(cx, from, epoch, seq),
            PbMsg::Stale { config } => self.learn(cx, config),
            PbMsg::Grant { epoch, granted, .. } => self.on_grant(cx, from, epoch, granted),
            PbMsg::RequestGrant { .. } => {}
        }
    }

    // ---- backup ----------------------------------------------------------------------

    /// A message of `from` as primary of `epoch`: true if that is this member's current
    /// primary (a newer epoch is adopted first, unsynced); an older one hears `Stale`.
    fn current(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, epoch: u64) -> bool {
        if epoch < self.config.epoch {
            cx.send(
                from,
                P::pb_msg(PbMsg::Stale {
                    config: self.config,
                }),
            );
            return false;
        }
        if epoch > self.config.epoch {
            self.learn(
                cx,
                Config {
                    epoch,
                    primary: from,
                },
            );
        }
        if self.config.primary != from || self.primary.is_some() {
            return false;
        }
        self.last_heard_ns = cx.now_ns();
        self.candidacy.stop();
        true
    }

    fn on_replicate(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, seq: u64, bytes: &[u8]) {
        // Past a gap: kept until the proposals before it arrive (a lost one is resent by
        // the primary's heartbeat, or replaced by a Sync); a duplicate is re-acked.
        if self.synced.is_none_or(|s| seq > s) && self.ahead.len() < MAX_PENDING {
            self.ahead.insert(seq, bytes.to_vec());
        }
        self.apply_ahead(cx);
        self.ack(cx, from);
    }

    /// Appends the kept proposals that now follow the last one held, in order.
    fn apply_ahead(&mut self, cx: &mut PartitionCx<'_, P>) {
        let Some(mut synced) = self.synced else {
            return;
        };
        self.ahead = self.ahead.split_off(&(synced + 1));
        while let Some(bytes) = self.ahead.remove(&(synced + 1)) {
            let Some(records) = decode::<P::Record>(&bytes) else {
                break;
            };
            let restarted = self.append(records.clone());
            self.persist(cx, &records, restarted);
            synced += 1;
            self.synced = Some(synced);
        }
    }

    fn on_sync(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, seq: u64, bytes: &[u8]) {
        // An older Sync of this epoch (reordered) would roll the log back: ignore it.
        if self.synced.is_none_or(|s| s < seq) {
            let Some(log) = decode(bytes) else {
                return;
            };
            self.log = log;
            let (config, log) = (self.config, bytes.to_vec());
            cx.checkpoint(P::pb_record(PbRecord::Snapshot { config, log }));
            self.synced = Some(seq);
            self.apply_ahead(cx);
        }
        self.ack(cx, from);
    }

    fn ack(&self, cx: &mut PartitionCx<'_, P>, to: NodeId) {
        let (epoch, seq) = (self.config.epoch, self.synced);
        cx.send(to, P::pb_msg(PbMsg::Ack { epoch, seq }));
    }

    /// Adopts a newer configuration: unsynced until its primary's Sync, and no longer
    /// primary unless it names this member (which only a won campaign does).
    fn learn(&mut self, cx: &mut PartitionCx<'_, P>, config: Config) {
        self.highest_epoch_seen = self.highest_epoch_seen.max(config.epoch);
        if config.epoch <= self.config.epoch {
            return;
        }
        self.config = config;
        cx.persist(P::pb_record(PbRecord::Config(config)));
        self.synced = None;
        self.ahead.clear();
        self.candidacy.stop();
        self.last_heard_ns = cx.now_ns();
        if self.primary.take().is_some() {
            // Everything not yet said is dropped: coordinators retry with the new primary.
            cx.count(PB_DEPOSED, 1);
        }
        if config.primary == self.id {
            self.take_over(cx);
        }
    }

    // ---- promotion -------------------------------------------------------------------

    fn tick(&mut self, cx: &mut PartitionCx<'_, P>) {
        let now = cx.now_ns();
        if self.primary.is_some() {
            return self.heartbeat(cx, now);
        }
        if now.saturating_sub(self.last_heard_ns) < self.timing.failover_ns {
            return;
        }
        let highest = self.highest_epoch_seen.max(self.config.epoch);
        let coordinators = &self.coordinators;
        let retry_ns = self.timing.failover_ns;
        if let Some(ask) = self.candidacy.ask(now, retry_ns, highest, coordinators) {
            let (shard, epoch) = (self.shard, ask.epoch);
            cx.multicast(ask.to, &P::pb_msg(PbMsg::RequestGrant { shard, epoch }));
        }
    }

    fn on_grant(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, epoch: u64, granted: bool) {
        match self.candidacy.on_grant(from, epoch, granted) {
            Some(false) => self.highest_epoch_seen = self.highest_epoch_seen.max(epoch),
            Some(true) if epoch > self.config.epoch => {
                let primary = self.id;
                self.learn(cx, Config { epoch, primary });
            }
            _ => {}
        }
    }

    /// Becomes primary of `config`: rebuilds the server from the log, syncs the backups,
    /// and starts the server (its first records are this leadership's proposal 1).
    fn take_over(&mut self, cx: &mut PartitionCx<'_, P>) {
        let server = P::restore(self.id, &self.setup, &self.log);
        let release = server.release();
        let now = cx.now_ns();
        let backups = self
            .backups()
            .map(|node| Backup {
                node,
                acked: 0,
                progress_ns: now,
                resent_ns: Some(now),
                synced: false,
            })
            .collect();
        self.primary = Some(Primary {
            server,
            release,
            outbox: Outbox::default(),
            backups,
            pending: Default::default(),
        });
        if self.config.epoch > 0 {
            cx.count(PB_PROMOTIONS, 1);
        }
        let backups: Vec<NodeId> = self.backups().collect();
        for b in backups {
            self.sync(cx, b, 0);
        }
        self.run(cx, |server, cx| server.on_start(cx));
    }

    fn backups(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.replicas.iter().copied().filter(|&r| r != self.id)
    }

    // ---- primary ---------------------------------------------------------------------

    fn sync(&self, cx: &mut PartitionCx<'_, P>, to: NodeId, seq: u64) {
        let (epoch, log) = (self.config.epoch, encode(&self.log));
        cx.send(to, P::pb_msg(PbMsg::Sync { epoch, seq, log }));
        cx.count(PB_SYNCS, 1);
    }

    /// Each heartbeat: a backup that made no progress for a whole heartbeat while behind
    /// gets the proposals it misses again (or, if they are no longer kept or it lost its
    /// log, the whole log); the others a heartbeat.
    fn heartbeat(&mut self, cx: &mut PartitionCx<'_, P>, now: u64) {
        let (epoch, timing, log) = (self.config.epoch, self.timing, &self.log);
        let Some(p) = self.primary.as_mut() else {
            return;
        };
        let proposed = p.outbox.proposed;
        let oldest = p.pending.front().map_or(proposed + 1, |(seq, _)| *seq);
        for b in &mut p.backups {
            let stuck = now.saturating_sub(b.progress_ns) >= timing.heartbeat_ns;
            let resent_lately = b
                .resent_ns
                .is_some_and(|t| now.saturating_sub(t) < timing.failover_ns);
            if (b.synced && (b.acked >= proposed || !stuck)) || resent_lately {
                cx.send(b.node, P::pb_msg(PbMsg::Heartbeat { epoch }));
                continue;
            }
            b.resent_ns = Some(now);
            if b.synced && b.acked + 1 >= oldest {
                for (seq, records) in p.pending.iter().filter(|(s, _)| *s > b.acked) {
                    let (seq, records) = (*seq, records.clone());
                    cx.send(
                        b.node,
                        P::pb_msg(PbMsg::Replicate {
                            epoch,
                            seq,
                            records,
                        }),
                    );
                }
            } else {
                let log = encode(log);
                cx.send(
                    b.node,
                    P::pb_msg(PbMsg::Sync {
                        epoch,
                        seq: proposed,
                        log,
                    }),
                );
                cx.count(PB_SYNCS, 1);
            }
        }
    }

    fn on_ack(&mut self, cx: &mut PartitionCx<'_, P>, from: NodeId, epoch: u64, seq: Option<u64>) {
        if epoch != self.config.epoch {
            return;
        }
        let now = cx.now_ns();
        let Some(p) = self.primary.as_mut() else {
            return;
        };
        let Some(b) = p.backups.iter_mut().find(|b| b.node == from) else {
            return;
        };
        b.synced = seq.is_some();
        let Some(seq) = seq else {
            return;
        };
        if seq > b.acked {
            (b.acked, b.progress_ns, b.resent_ns) = (seq, now, None);
        }
        let durable = p.backups.iter().map(|b| b.acked).min().unwrap_or(seq);
        while p.pending.front().is_some_and(|(s, _)| *s <= durable) {
            p.pending.pop_front();
        }
        if durable > p.outbox.committed {
            p.outbox.release(cx, Some(&mut p.release), durable);
        }
    }

    /// Hands a partition request to the server if this member is primary; else tells the
    /// sender who is.
    fn serve(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        from: NodeId,
        txn: Option<meridian_core::TxnId>,
        msg: P::Msg,
    ) {
        if let Some(p) = self.primary.as_mut() {
            p.release.request(&msg);
            return self.run(cx, |server, cx| server.on_message(cx, from, msg));
        }
        if let Some(txn) = txn {
            let primary = Some(self.config.primary).filter(|&p| p != self.id);
            cx.send(from, P::not_leader(txn, primary));
        }
    }

    /// Runs a server handler: its records are logged here and replicated to every backup
    /// as the next proposal; its sends wait for what they depend on.
    fn run(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        handler: impl FnOnce(&mut P, &mut PartitionCx<'_, P>),
    ) {
        let epoch = self.config.epoch;
        let Some(p) = self.primary.as_mut() else {
            return;
        };
        let effects = cx.capture(|cx| handler(&mut p.server, cx));
        let records = p.outbox.handle(cx, &mut p.release, epoch, effects);
        if records.is_empty() {
            return;
        }
        let seq = p.outbox.proposed;
        let bytes = encode(&records);
        let now = cx.now_ns();
        for b in p.backups.iter_mut().filter(|b| b.acked + 1 == seq) {
            // Caught up until now: give it a heartbeat to acknowledge this one.
            b.progress_ns = now;
        }
        if p.pending.len() >= MAX_PENDING {
            p.pending.pop_front();
        }
        p.pending.push_back((seq, bytes.clone()));
        let msg = P::pb_msg(PbMsg::Replicate {
            epoch,
            seq,
            records: bytes,
        });
        let backups: Vec<NodeId> = self.backups().collect();
        cx.multicast(backups, &msg);
        let restarted = self.append(records.clone());
        self.persist(cx, &records, restarted);
        if self.replicas.len() == 1 || self.timing.unsafe_release_before_ack {
            // No backup: the primary's own log is every copy there is.
            let p = self.primary.as_mut().expect("serving");
            p.pending.clear();
            p.outbox.release(cx, Some(&mut p.release), seq);
        }
    }

    /// The server, while this member is primary.
    pub fn server(&self) -> Option<&P> {
        self.primary.as_ref().map(|p| &p.server)
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// Server records held since the last checkpoint.
    pub fn log_len(&self) -> usize {
        self.log.len()
    }
}

/// A coordinator's part in promotion: its grants, logged as [`PbRecord::Granted`] and
/// logged again after each checkpoint of the coordinator (which would drop them).
#[derive(Clone, Debug)]
pub struct Granter {
    grants: Grants,
}

impl Granter {
    /// The grants among a coordinator's records; the rest are returned, for the
    /// coordinator's own restore.
    pub fn restore<P: Backed>(
        cluster: &Cluster,
        records: &[P::Record],
    ) -> (Granter, Vec<P::Record>) {
        let mut grants = Grants::new(cluster.shard_count() as usize);
        let mut rest = Vec::new();
        for record in records {
            match P::as_pb_record(record) {
                Some(PbRecord::Granted {
                    shard,
                    epoch,
                    candidate,
                }) => grants.replay(*shard, *epoch, *candidate),
                _ => rest.push(record.clone()),
            }
        }
        (Granter { grants }, rest)
    }

    /// A candidate's request: granted or not, logged first if new.
    pub fn on_request<P: Backed>(
        &mut self,
        cx: &mut PartitionCx<'_, P>,
        from: NodeId,
        shard: ShardId,
        epoch: u64,
    ) {
        let Some(grant) = self.grants.request(shard, epoch, from) else {
            return;
        };
        if grant.newly {
            let candidate = from;
            cx.persist(P::pb_record(PbRecord::Granted {
                shard,
                epoch,
                candidate,
            }));
        }
        let granted = grant.granted;
        cx.send(
            from,
            P::pb_msg(PbMsg::Grant {
                shard,
                epoch,
                granted,
            }),
        );
    }

    /// Runs a coordinator handler; if it checkpointed, the grants are logged after it.
    pub fn around<P: Backed>(
        &self,
        cx: &mut PartitionCx<'_, P>,
        handler: impl FnOnce(&mut PartitionCx<'_, P>),
    ) {
        let effects = cx.capture(handler);
        let checkpointed = effects
            .iter()
            .any(|e| matches!(e, Effect::Checkpoint { .. }));
        for effect in effects {
            cx.emit(effect);
        }
        if checkpointed {
            for (shard, epoch, candidate) in self.grants.granted() {
                cx.persist(P::pb_record(PbRecord::Granted {
                    shard,
                    epoch,
                    candidate,
                }));
            }
        }
    }
}
