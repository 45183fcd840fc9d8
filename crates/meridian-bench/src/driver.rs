//! The sans-IO core of a load driver, shared by the simulator (virtual time, events) and the
//! runtime (tokio tasks, real time): the clients ([`ClientInfo`], placed by
//! [`meridian_workload::place_clients`]), what each has in flight, and the stepping of a
//! transaction from its plan to its outcome — one request for a one-shot plan, a session of
//! `Begin`/`Get`/`Put`/`Commit` steps for an interactive one (an `Append` or `Add` is a get
//! then a put of the new value). The core never waits, times or sends: a driver asks it for
//! the request to send, carries it, and hands back the answer.
//!
//! Load shapes are the drivers' timing over the same core: closed-loop clients call
//! [`LoadCore::begin`] again when their transaction ends; open-loop arrivals at a
//! coordinator, Poisson ([`interarrival_ns`]), take its first idle client
//! ([`LoadCore::idle_client_at`]) or are turned away (throttled) when it has none, so a
//! coordinator has at most as many transactions in flight as it has clients.
//!
//! Declared out-of-band dependencies (DAST §4.5, [`meridian_workload::out_of_band`]) are
//! carried out here, for both drivers: the core remembers the last committed transaction
//! (its history index — the order in which [`LoadCore::finish`] saw transactions end — and
//! its shards), draws which new one-shot transactions declare it, appends §4.5's read when
//! needed, and writes the declaration into the history entry.

use crate::results::Finished;
use meridian_check::{Entry, EntryType};
use meridian_core::txn::{ClientRequest, ClientResponse, Outcome, Step, Value};
use meridian_core::txn::{Op, Piece};
use meridian_core::{Cluster, NodeRng, Partitioner, ShardId, Timestamp, TxnId};
use meridian_workload::out_of_band::{OUT_OF_BAND, PROBE_KEY};
use meridian_workload::{
    ClientInfo, InteractiveOp, Locality, Planned, TxnPlan, Workload, CRT, IRT,
};
use rand::Rng;
use std::collections::VecDeque;

/// What comes after an answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// The session's next step, to send to the client's coordinator.
    Send(ClientRequest),
    /// The transaction ended: pass the outcome to [`LoadCore::finish`].
    Done(Outcome),
}

/// An interactive session's progress.
#[derive(Clone, Debug, Default)]
struct Session {
    txn: Option<TxnId>,
    next_op: usize,
    /// Within a multi-key read op (`GetMany`), the next key to read.
    next_key: usize,
    /// The value each get returned, in plan order (the history needs them).
    reads: Vec<Option<Value>>,
}

/// A client's transaction from its first request to its outcome.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub planned: Planned,
    /// When the first request left, ns on the driver's clock.
    pub invoke_ns: u64,
    /// The shards the request touches, sorted (the protocol's physical bound needs them);
    /// with §4.5's read, its shard too.
    pub shards: Vec<ShardId>,
    session: Option<Session>,
    /// The declared out-of-band dependency, if any.
    dependency: Option<Dependency>,
    /// The driver appended §4.5's read as the request's last piece.
    probe: bool,
    /// The history index: the transaction's place in the order transactions ended (set by
    /// [`LoadCore::finish`]).
    pub index: u64,
}

/// A committed transaction a later one may declare it follows.
#[derive(Clone, Debug, PartialEq)]
struct Dependency {
    index: u64,
    shards: Vec<ShardId>,
}

impl InFlight {
    /// The values an interactive session read, in plan order (empty for one-shot plans).
    pub fn reads(&self) -> &[Option<Value>] {
        self.session.as_ref().map_or(&[], |s| s.reads.as_slice())
    }

    /// The transaction's report to [`Results::record`](crate::results::Results::record).
    pub fn finished<'a>(
        &'a self,
        region: usize,
        outcome: &'a Outcome,
        now_ns: u64,
        bound_ms: Option<f64>,
    ) -> Finished<'a> {
        Finished {
            region,
            classes: &self.planned.classes,
            outcome,
            latency_ns: now_ns.saturating_sub(self.invoke_ns),
            bound_ms,
        }
    }

    /// The history entry of the finished transaction (`process` is the client's id), with
    /// its declared dependency. The result of §4.5's read is left out: the workload reports
    /// its own plan.
    pub fn history_entry(
        &self,
        workload: &dyn Workload,
        process: u64,
        outcome: &Outcome,
        complete_ns: u64,
    ) -> Entry {
        let own;
        let outcome = match outcome {
            Outcome::Committed {
                results,
                commit_ts,
                path,
            } if self.probe => {
                own = Outcome::Committed {
                    results: results[..results.len().saturating_sub(1)].to_vec(),
                    commit_ts: *commit_ts,
                    path: *path,
                };
                &own
            }
            _ => outcome,
        };
        Entry {
            index: self.index,
            process,
            kind: entry_type(outcome),
            invoke_ns: self.invoke_ns,
            complete_ns,
            ops: workload.history_ops(&self.planned.plan, outcome, self.reads()),
            after: self.dependency.iter().map(|d| d.index).collect(),
        }
    }
}

/// The history's type of an outcome.
pub fn entry_type(outcome: &Outcome) -> EntryType {
    match outcome {
        Outcome::Committed { .. } => EntryType::Ok,
        Outcome::Aborted { .. } => EntryType::Fail,
        Outcome::Unknown { .. } => EntryType::Info,
    }
}

struct Client {
    info: ClientInfo,
    /// The client's index in the results' regions.
    region: usize,
    rng: NodeRng,
    /// The largest commit timestamp this client has seen (its session's LatestTime).
    latest_seen: Option<Timestamp>,
    current: Option<InFlight>,
    /// Aborted transactions to send again (see [`LoadCore::retry_next`]), oldest first.
    retries: VecDeque<Retry>,
}

/// An aborted transaction waiting to be sent again.
struct Retry {
    planned: Planned,
    /// When its first attempt left (a committed retry's latency counts from it).
    first_ns: u64,
    /// Not sent again before this.
    due_ns: u64,
    /// Its declared out-of-band dependency (§4.5), kept across attempts.
    dependency: Option<Dependency>,
}

/// Aborted transactions one client keeps for a later retry. The Aurogon artifact's client
/// keeps a pool of 4,096 prepared transactions per thread; past this bound the oldest is
/// sent again even if not yet due, so a client whose every attempt aborts still has a
/// bounded queue.
const RETRIES_MAX: usize = 4096;

/// The clients of one run and their transactions in flight.
pub struct LoadCore {
    clients: Vec<Client>,
    coordinators: usize,
    partitioner: Partitioner,
    locality: Locality,
    /// Transactions ended so far (the next one's history index).
    ended: u64,
    /// The last transactions that ended committed, newest first, of two different clients
    /// (a client declares a dependency on another client's transaction: its own previous
    /// one is already before it in its session).
    last_committed: [Option<(u32, Dependency)>; 2],
}

impl LoadCore {
    /// A core for `clients` (from [`meridian_workload::place_clients`]), client `i` drawing
    /// from `rng_of(i)`. Each client's region is indexed as in
    /// [`Results::for_cluster`](crate::results::Results::for_cluster).
    pub fn new(
        cluster: &Cluster,
        clients: Vec<ClientInfo>,
        mut rng_of: impl FnMut(usize) -> NodeRng,
    ) -> LoadCore {
        let results = crate::results::Results::for_cluster(cluster);
        let clients = clients
            .into_iter()
            .enumerate()
            .map(|(i, info)| Client {
                info,
                region: results
                    .region_index(cluster.topology.region_name(info.region))
                    .expect("a client's coordinator hosts coordinators"),
                rng: rng_of(i),
                latest_seen: None,
                current: None,
                retries: VecDeque::new(),
            })
            .collect();
        LoadCore {
            clients,
            coordinators: cluster.coordinators.len(),
            partitioner: cluster.partitioner,
            locality: Locality::new(cluster),
            ended: 0,
            last_committed: [None, None],
        }
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Client `c`'s place.
    pub fn info(&self, c: u32) -> &ClientInfo {
        &self.clients[c as usize].info
    }

    /// Client `c`'s region, as an index into the results' regions.
    pub fn region(&self, c: u32) -> usize {
        self.clients[c as usize].region
    }

    /// Whether client `c` has nothing in flight.
    pub fn is_idle(&self, c: u32) -> bool {
        self.clients[c as usize].current.is_none()
    }

    /// The first idle client of the `k`-th coordinator, or `None` when all of them are busy
    /// (the coordinator's cap of outstanding transactions is reached).
    pub fn idle_client_at(&self, k: usize) -> Option<u32> {
        (k..self.clients.len())
            .step_by(self.coordinators.max(1))
            .map(|c| c as u32)
            .find(|&c| self.is_idle(c))
    }

    /// Client `c`'s transaction in flight.
    pub fn in_flight(&self, c: u32) -> Option<&InFlight> {
        self.clients[c as usize].current.as_ref()
    }

    /// Draws client `c`'s next transaction from `workload` and returns its first request.
    ///
    /// # Panics
    ///
    /// If the client has a transaction in flight (a driver bug).
    pub fn begin(&mut self, c: u32, workload: &mut dyn Workload, now_ns: u64) -> ClientRequest {
        let out_of_band = workload.out_of_band();
        let client = &mut self.clients[c as usize];
        assert!(client.current.is_none(), "client {c} began twice");
        let due = client
            .retries
            .front()
            .is_some_and(|r| r.due_ns <= now_ns || client.retries.len() >= RETRIES_MAX);
        let (mut planned, invoke_ns, dependency) =
            match due.then(|| client.retries.pop_front()).flatten() {
                Some(retry) => (retry.planned, retry.first_ns, retry.dependency),
                None => {
                    let planned = workload.next(&client.info, &mut client.rng);
                    let declares = match (&out_of_band, &planned.plan) {
                        (Some(oob), TxnPlan::OneShot(_)) => client.rng.gen_bool(oob.ratio),
                        _ => false,
                    };
                    let dependency = self
                        .last_committed
                        .iter()
                        .flatten()
                        .find(|(other, _)| *other != c)
                        .map(|(_, d)| d.clone())
                        .filter(|_| declares);
                    (planned, now_ns, dependency)
                }
            };
        let info = client.info;
        let (session, request, probe) = match &planned.plan {
            TxnPlan::OneShot(txn) => {
                let read = out_of_band.is_some_and(|o| o.read);
                let probe = dependency.as_ref().filter(|_| read).and_then(|d| {
                    let shards = txn.shards();
                    let shared = self.shares_region(&shards, &d.shards);
                    (!shared).then_some(d.shards[0])
                });
                let mut txn = txn.clone();
                if let Some(shard) = probe {
                    let key = self.partitioner.key_on_shard(shard, PROBE_KEY);
                    txn.pieces.push(Piece::ops(shard, vec![Op::Get(key)]));
                }
                (None, ClientRequest::OneShot(txn), probe)
            }
            TxnPlan::Interactive(_) => (
                Some(Session::default()),
                ClientRequest::Interactive(Step::Begin {
                    latest_seen: self.clients[c as usize].latest_seen,
                }),
                None,
            ),
        };
        if dependency.is_some() {
            planned.classes.add(OUT_OF_BAND);
        }
        if let Some(shard) = probe {
            if self.locality.class(&info, [shard]) == CRT && planned.classes.remove(IRT) {
                planned.classes.add(CRT);
            }
        }
        let shards = match &request {
            ClientRequest::OneShot(txn) => txn.shards().into_vec(),
            ClientRequest::Interactive(_) => plan_shards(&planned.plan, &self.partitioner),
        };
        self.clients[c as usize].current = Some(InFlight {
            planned,
            invoke_ns,
            shards,
            session,
            dependency,
            probe: probe.is_some(),
            index: 0,
        });
        request
    }

    /// Whether two sets of shards have a region in common (by initial leaders).
    fn shares_region(&self, a: &[ShardId], b: &[ShardId]) -> bool {
        a.iter().any(|&x| {
            b.iter()
                .any(|&y| self.locality.region(x) == self.locality.region(y))
        })
    }

    /// Feeds client `c`'s answer. An outcome ends the transaction; any other answer
    /// advances the interactive session by one step. `Err` names an answer that breaks the
    /// client contract (a session step for a one-shot plan, a read before `Began`): the
    /// simulator stops on it, the runtime counts the transaction unknown.
    pub fn on_answer(&mut self, c: u32, response: ClientResponse) -> Result<Next, String> {
        let flight = self.clients[c as usize]
            .current
            .as_mut()
            .ok_or_else(|| format!("client {c} got {response:?} with nothing in flight"))?;
        if let ClientResponse::Outcome(outcome) = response {
            return Ok(Next::Done(outcome));
        }
        let TxnPlan::Interactive(ops) = &flight.planned.plan else {
            return Err(format!("a one-shot request was answered with {response:?}"));
        };
        let session = flight.session.as_mut().expect("interactive flight");
        step_session(session, ops, response).map(Next::Send)
    }

    /// Client `c`'s next transaction is `flight`'s again: an attempt that aborted on a
    /// conflict, a failed validation, a timeout or a failure is retried until it commits,
    /// as the benchmark harnesses of the papers do (Aurogon §6.4: "retrying transactions
    /// after aborts"). Each attempt counts as the outcome it had; a committed transaction's
    /// latency counts from its first attempt. Other aborts (a user abort, an invalid or
    /// unsupported request) are final: returns false and keeps nothing.
    ///
    /// The attempt joins the client's retry queue, due `interval_ns` after `now_ns`; the
    /// client's next transaction is the oldest due retry, or a fresh one while none is due.
    /// With `interval_ns` = 0 the retry is the very next transaction: under heavy skew the
    /// clients then pile up on the transactions that keep aborting (`dst-to` on YCSB-T
    /// θ = 0.99 commits almost nothing). The Aurogon artifact's harness (`retry_txns 1`,
    /// `retry_interval 500`) queues an aborted transaction for 500 µs while its thread
    /// runs others, which an interval of 500 µs reproduces.
    pub fn retry_next(
        &mut self,
        c: u32,
        flight: &InFlight,
        outcome: &Outcome,
        now_ns: u64,
        interval_ns: u64,
    ) -> bool {
        use meridian_core::txn::AbortReason;
        let retryable = matches!(
            outcome,
            Outcome::Aborted {
                reason: AbortReason::Conflict
                    | AbortReason::Validation
                    | AbortReason::Timeout
                    | AbortReason::Failure
            }
        );
        if retryable {
            self.clients[c as usize].retries.push_back(Retry {
                planned: flight.planned.clone(),
                first_ns: flight.invoke_ns,
                due_ns: now_ns.saturating_add(interval_ns),
                dependency: flight.dependency.clone(),
            });
        }
        retryable
    }

    /// Ends client `c`'s transaction with `outcome` and returns it, numbered with its
    /// history index ([`InFlight::index`]); `None` if the client had nothing in flight (a
    /// late answer after a timeout).
    pub fn finish(&mut self, c: u32, outcome: &Outcome) -> Option<InFlight> {
        let client = &mut self.clients[c as usize];
        let mut flight = client.current.take()?;
        if let Outcome::Committed {
            commit_ts: Some(ts),
            ..
        } = outcome
        {
            client.latest_seen = client.latest_seen.max(Some(*ts));
        }
        flight.index = self.ended;
        self.ended += 1;
        if outcome.is_committed() {
            let newest = Dependency {
                index: flight.index,
                shards: flight.shards.clone(),
            };
            if self.last_committed[0]
                .as_ref()
                .is_some_and(|(o, _)| *o != c)
            {
                self.last_committed[1] = self.last_committed[0].take();
            }
            self.last_committed[0] = Some((c, newest));
        }
        Some(flight)
    }
}

/// The session's next request after `response`.
fn step_session(
    session: &mut Session,
    ops: &[InteractiveOp],
    response: ClientResponse,
) -> Result<ClientRequest, String> {
    match response {
        ClientResponse::Began(txn) => session.txn = Some(txn),
        ClientResponse::Read(value) => {
            session.reads.push(value);
            session.next_key += 1;
            if session.next_key >= ops.get(session.next_op).map_or(0, InteractiveOp::reads) {
                session.next_op += 1;
                session.next_key = 0;
            }
        }
        ClientResponse::Written => session.next_op += 1,
        ClientResponse::Outcome(_) => unreachable!("outcomes end the session"),
    }
    let txn = session
        .txn
        .ok_or("the first answer of a session was not Began")?;
    // Read-modify-writes go as such (the client never reads their old value), so a
    // protocol may run them inside its commit instead of validating a read (Tiga App. F).
    let step = match ops.get(session.next_op) {
        None => Step::Commit { txn },
        Some(InteractiveOp::Get(key)) => Step::Get {
            txn,
            key: key.clone(),
            then: Vec::new(),
        },
        // A multi-key read: one `Get` per key, the first announcing the rest.
        Some(InteractiveOp::GetMany(keys)) if keys.is_empty() => {
            return Err("an interactive plan has a multi-key read of no keys".into())
        }
        Some(InteractiveOp::GetMany(keys)) => Step::Get {
            txn,
            key: keys[session.next_key].clone(),
            then: match session.next_key {
                0 => keys[1..].to_vec(),
                _ => Vec::new(),
            },
        },
        Some(InteractiveOp::Put(key, value)) => Step::Put {
            txn,
            key: key.clone(),
            value: value.clone(),
        },
        Some(op) => Step::Modify {
            txn,
            key: op.keys()[0].clone(),
            rmw: op.rmw().expect("append and add are read-modify-writes"),
        },
    };
    Ok(ClientRequest::Interactive(step))
}

/// An open-loop interarrival time, ns: exponential at `rate_tps` arrivals per second (a
/// Poisson process, Tiga §5.1's open loop), at least 1 ns. Both drivers draw arrivals here,
/// each from its own RNG.
pub fn interarrival_ns(rng: &mut impl rand::Rng, rate_tps: f64) -> u64 {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    ((-u.ln() / rate_tps) * 1e9).max(1.0) as u64
}

/// The shards a plan touches, sorted and deduplicated.
pub fn plan_shards(plan: &TxnPlan, partitioner: &Partitioner) -> Vec<ShardId> {
    let mut shards = match plan {
        TxnPlan::OneShot(txn) => txn.shards().into_vec(),
        TxnPlan::Interactive(ops) => ops
            .iter()
            .flat_map(|op| op.keys())
            .map(|k| partitioner.shard_of(k))
            .collect(),
    };
    shards.sort_unstable();
    shards.dedup();
    shards
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_check::HistOp;
    use meridian_core::txn::{CommitPath, Key, Rmw, Txn};
    use meridian_core::Topology;
    use meridian_workload::place_clients;
    use rand::SeedableRng;

    fn cluster() -> Cluster {
        let text = "name = \"t\"\nregions = [\"A\", \"B\"]\nintra_region_rtt_ms = 1.0\n[[rtt]]\nbetween = [\"A\", \"B\"]\nms = 100.0\n[[shards]]\ncount = 2\nreplicas = [\"A\"]\nleader = \"A\"\n[[coordinators]]\nregion = \"A\"\ncount = 1\n[[coordinators]]\nregion = \"B\"\ncount = 1\n";
        Cluster::new(Topology::parse("t", text).unwrap(), &[]).unwrap()
    }

    /// Plans one interactive transaction: add 5 to `a`, then read `b`.
    struct OneSession;

    impl Workload for OneSession {
        fn name(&self) -> &str {
            "one-session"
        }
        fn next(&mut self, _: &ClientInfo, _: &mut NodeRng) -> Planned {
            TxnPlan::Interactive(vec![
                InteractiveOp::Add("a".into(), 5),
                InteractiveOp::Get("b".into()),
            ])
            .into()
        }
        fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
            Vec::new()
        }
    }

    fn core(c: &Cluster, per_coordinator: u32) -> LoadCore {
        LoadCore::new(c, place_clients(c, per_coordinator), |i| {
            NodeRng::seed_from_u64(i as u64)
        })
    }

    /// Plans one multi-key read of `a`, `b`, `c`, then a put of `d`.
    struct ReadMany;

    impl Workload for ReadMany {
        fn name(&self) -> &str {
            "read-many"
        }
        fn next(&mut self, _: &ClientInfo, _: &mut NodeRng) -> Planned {
            TxnPlan::Interactive(vec![
                InteractiveOp::GetMany(vec!["a".into(), "b".into(), "c".into()]),
                InteractiveOp::Put("d".into(), "v".into()),
            ])
            .into()
        }
        fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
            Vec::new()
        }
    }

    /// A multi-key read goes as one `Get` per key, the first announcing the others (so a
    /// protocol ignoring the hint still reads every key), and hands back one read per key.
    #[test]
    fn a_multi_key_read_is_one_get_per_key_the_first_with_the_rest_as_its_hint() {
        let c = cluster();
        let mut load = core(&c, 1);
        load.begin(0, &mut ReadMany, 10);
        let txn = TxnId::new(meridian_core::NodeId(0), 0, 1);
        let value = |s: &str| Some(Value::from(s));
        let answers = [
            ClientResponse::Began(txn),
            ClientResponse::Read(value("1")),
            ClientResponse::Read(None),
            ClientResponse::Read(value("3")),
            ClientResponse::Written,
        ];
        let sent: Vec<Next> = answers
            .into_iter()
            .map(|r| load.on_answer(0, r).unwrap())
            .collect();
        let get = |key: &str, then: Vec<Key>| Step::Get {
            txn,
            key: key.into(),
            then,
        };
        let expected = [
            get("a", vec!["b".into(), "c".into()]),
            get("b", Vec::new()),
            get("c", Vec::new()),
            Step::Put {
                txn,
                key: "d".into(),
                value: "v".into(),
            },
            Step::Commit { txn },
        ];
        assert_eq!(sent.len(), expected.len());
        for (got, want) in sent.iter().zip(expected) {
            assert_eq!(*got, Next::Send(ClientRequest::Interactive(want)));
        }
        let outcome = Outcome::Committed {
            results: Vec::new(),
            commit_ts: None,
            path: CommitPath::ReadOnly,
        };
        let flight = load.finish(0, &outcome).unwrap();
        assert_eq!(flight.reads(), [value("1"), None, value("3")]);
    }

    #[test]
    fn an_interactive_plan_steps_through_a_session() {
        let c = cluster();
        let mut load = core(&c, 1);
        let first = load.begin(0, &mut OneSession, 10);
        assert_eq!(
            first,
            ClientRequest::Interactive(Step::Begin { latest_seen: None })
        );
        let txn = TxnId::new(meridian_core::NodeId(0), 0, 1);
        let steps = [
            ClientResponse::Began(txn),
            ClientResponse::Written,
            ClientResponse::Read(None),
        ];
        let sent: Vec<Next> = steps
            .into_iter()
            .map(|r| load.on_answer(0, r).unwrap())
            .collect();
        // The add goes as a read-modify-write: its old value is never the client's.
        let expected = [
            Step::Modify {
                txn,
                key: "a".into(),
                rmw: Rmw::Add(5),
            },
            Step::Get {
                txn,
                key: "b".into(),
                then: Vec::new(),
            },
            Step::Commit { txn },
        ];
        for (got, want) in sent.iter().zip(expected) {
            assert_eq!(*got, Next::Send(ClientRequest::Interactive(want)));
        }
        let ts = Timestamp::new(99, 0);
        let outcome = Outcome::Committed {
            results: Vec::new(),
            commit_ts: Some(ts),
            path: CommitPath::TwoPhase,
        };
        let flight = load.finish(0, &outcome).unwrap();
        assert_eq!(flight.reads(), [None], "one read: the get's");
        assert!(load.is_idle(0));
        // The next session starts after what the client saw.
        assert_eq!(
            load.begin(0, &mut OneSession, 20),
            ClientRequest::Interactive(Step::Begin {
                latest_seen: Some(ts)
            })
        );
    }

    /// Plans reads of `k0`, `k1`, … in turn, so a test can tell a retry from a fresh draw.
    struct Numbered(u32);

    impl Workload for Numbered {
        fn name(&self) -> &str {
            "numbered"
        }
        fn next(&mut self, _: &ClientInfo, _: &mut NodeRng) -> Planned {
            self.0 += 1;
            TxnPlan::Interactive(vec![InteractiveOp::Get(format!("k{}", self.0 - 1).into())]).into()
        }
        fn history_ops(&self, _: &TxnPlan, _: &Outcome, _: &[Option<Value>]) -> Vec<HistOp> {
            Vec::new()
        }
    }

    /// The Aurogon artifact's retries: an aborted transaction waits out the interval while
    /// the client runs fresh ones, then goes again, its latency counted from its first try.
    #[test]
    fn an_aborted_transaction_is_retried_once_its_interval_passed() {
        let c = cluster();
        let mut load = core(&c, 1);
        let mut w = Numbered(0);
        let key_of = |load: &LoadCore| match &load.in_flight(0).unwrap().planned.plan {
            TxnPlan::Interactive(ops) => ops[0].clone(),
            other => panic!("{other:?}"),
        };
        let aborted = |reason| Outcome::Aborted { reason };
        load.begin(0, &mut w, 0);
        assert_eq!(key_of(&load), InteractiveOp::Get("k0".into()));
        let conflict = aborted(meridian_core::txn::AbortReason::Conflict);
        let flight = load.finish(0, &conflict).unwrap();
        assert!(load.retry_next(0, &flight, &conflict, 10, 500));
        // Not due yet: a fresh transaction meanwhile.
        load.begin(0, &mut w, 20);
        assert_eq!(key_of(&load), InteractiveOp::Get("k1".into()));
        let unsupported = aborted(meridian_core::txn::AbortReason::Unsupported("no".into()));
        let flight = load.finish(0, &unsupported).unwrap();
        assert!(!load.retry_next(0, &flight, &unsupported, 30, 500), "final");
        // Due: the retry, from its first attempt's start.
        load.begin(0, &mut w, 510);
        assert_eq!(key_of(&load), InteractiveOp::Get("k0".into()));
        assert_eq!(load.in_flight(0).unwrap().invoke_ns, 0);
        load.finish(0, &conflict).unwrap();
        load.begin(0, &mut w, 520);
        assert_eq!(
            key_of(&load),
            InteractiveOp::Get("k2".into()),
            "k1 was final"
        );
    }

    #[test]
    fn a_broken_answer_is_an_error_not_a_panic() {
        let c = cluster();
        let mut load = core(&c, 1);
        load.begin(1, &mut OneSession, 0);
        let e = load.on_answer(1, ClientResponse::Written).unwrap_err();
        assert!(e.contains("Began"), "{e}");
        assert!(load.on_answer(0, ClientResponse::Written).is_err());
        let one_shot = ClientRequest::OneShot(Txn { pieces: vec![] });
        assert!(matches!(one_shot, ClientRequest::OneShot(_)));
    }

    #[test]
    fn open_loop_arrivals_take_an_idle_client_of_their_coordinator() {
        let c = cluster();
        let mut load = core(&c, 2);
        // Clients 0 and 2 are coordinator 0's, 1 and 3 coordinator 1's.
        assert_eq!(load.idle_client_at(1), Some(1));
        load.begin(1, &mut OneSession, 0);
        assert_eq!(load.idle_client_at(1), Some(3));
        load.begin(3, &mut OneSession, 0);
        assert_eq!(load.idle_client_at(1), None, "the cap is reached");
        assert_eq!(load.idle_client_at(0), Some(0));
        assert_eq!(load.region(1), 1);
        assert_eq!(load.info(3).coordinator, c.coordinators[1]);
    }
}
