//! `meridian-workload`: what clients submit, and how a finished transaction is written into
//! the history the checker reads.
//!
//! A [`Workload`] is a deterministic generator: given a client ([`ClientInfo`]: its id,
//! coordinator and region, placed by [`place_clients`]) and the client's seeded RNG it
//! returns the next [`TxnPlan`] with its class labels ([`Planned`]: `read-only` or
//! `read-write`, plus the workload's own, such as TPC-C's profiles or MicroBench's
//! `irt`/`crt`), which reports break latency down by. When the transaction ends, the driver (simulator or runtime)
//! asks the workload for the history operations of that transaction ([`Workload::history_ops`])
//! and, at the end of the run, for any workload-specific invariant
//! ([`Workload::check_history`], e.g. the bank's constant total).
//!
//! Every generator draws only from the RNG it is handed (never a global RNG, never a clock),
//! so the same seed and the same order of calls give the same plans, bit for bit.
//!
//! # Workloads
//!
//! [`build`] knows these names (see each module for the details):
//!
//! | name | module | what | follows |
//! |---|---|---|---|
//! | `list-append` | [`list_append`] | Elle's list-append: reads and appends of unique integers over a small, rotating key set | DESIGN §7 (the checker's workload) |
//! | `bank` | [`bank`] | transfers between accounts and reads of every account; the total never changes | DESIGN §7 (the bank invariant) |
//! | `microbench` | [`microbench`] | increment 3 Zipf-chosen keys on 3 different shards | Tiga §5.1–5.2 (MicroBench) |
//!
//! # Options
//!
//! Options are `key=value` strings ([`WorkloadOptions`]; [`WorkloadOptions::parse`] reads
//! them from the command line's `key=value` form). A workload refuses, by name, an option it
//! does not know and a value it cannot parse; nothing here panics on user input.
//!
//! | workload | option | default | meaning |
//! |---|---|---|---|
//! | `list-append` | `keys` | 16 | keys active at any time |
//! | | `ops_max` | 4 | ops per transaction are uniform in `1..=ops_max` |
//! | | `read_ratio` | 0.5 | probability that an op is a read (else an append) |
//! | | `max_writes_per_key` | 256 | appends after which a key retires and a fresh key takes its place; 0 = never |
//! | | `interactive` | false | plan interactive (`get`/`append` steps) instead of one-shot transactions |
//! | | `crt_ratio` | 1 | probability that a transaction draws its keys from every shard; else only from shards led from the client's region (DAST's IRT/CRT mix) |
//! | `bank` | `accounts` | 8 | accounts, spread round-robin over the shards |
//! | | `read_ratio` | 0.5 | probability that a transaction reads every account (else a transfer) |
//! | | `max_amount` | 10 | transfers move a uniform amount in `1..=max_amount` |
//! | every workload | `oob_ratio` | 0 | probability that a one-shot transaction declares an out-of-band dependency on the last committed one (DAST §4.5, [`out_of_band`]) |
//! | | `oob_read` | true | add §4.5's cross-region read that enforces it; `false` is test-only (broken) |
//! | `microbench` | `keys_per_shard` | 1000000 | keys per shard (Tiga pre-populates 1 million per shard) |
//! | | `zipf` | 0.5 | Zipf skew θ of the key choice on each shard; 0 = uniform (Tiga sweeps 0.5–0.99) |
//!
//! Ranges: `keys` 1..=2^20, `ops_max` 1..=1024, `max_writes_per_key` any, `accounts`
//! 2..=100000, `max_amount` 1..=2^32, `keys_per_shard` 1..=2^53, `zipf` any finite θ ≥ 0,
//! ratios in [0, 1]; integers may use `_` separators (`1_000_000`).
//!
//! The [`zipf`] module holds the Zipf sampler (rejection-inversion, exact, O(1) setup).
//!
//! # Keys
//!
//! Workloads place keys on chosen shards with [`meridian_core::Partitioner::key_on_shard`],
//! so a byte key is a logical name, possibly followed by `~salt`. Histories always use the
//! logical name ([`logical_name`]): `k7`, `acct3`.
//!
//! # Broken contracts
//!
//! `history_ops` panics, with a message naming what is wrong, when the driver or protocol
//! broke a contract it cannot report around: a committed outcome without one result per
//! piece (or one output per op), a committed interactive transaction with fewer reads than
//! gets and appends, or a value that is not the integer or list the workload wrote. Writing
//! `null` or a truncated value instead would hide the bug from the checker.

pub mod audit;
pub mod bank;
pub mod client;
pub mod list_append;
pub mod microbench;
mod options;
pub mod out_of_band;
mod procedure;
pub mod retwis;
pub mod smallbank;
pub mod tpca;
pub mod tpcc;
pub mod ycsbt;
pub mod zipf;

use meridian_check::{Entry, HistOp, ReadValue};
use meridian_core::txn::{Key, Outcome, PieceResult, Txn, Value};
use meridian_core::{ClientId, Cluster, NodeRng};

pub use bank::Bank;
pub use client::{
    place_clients, Class, Classes, ClientInfo, Locality, Planned, CRT, IRT, READ_ONLY, READ_WRITE,
};
pub use list_append::ListAppend;
pub use microbench::MicroBench;
pub use out_of_band::OutOfBand;
pub use retwis::Retwis;
pub use smallbank::SmallBank;
pub use tpca::TpcA;
pub use tpcc::TpcC;
pub use ycsbt::YcsbT;
pub use zipf::Zipf;

/// One operation of an interactive transaction, as the workload plans it. The client driver
/// sends `Get` and `Put` as they are and the read-modify-writes `Append` and `Add` as
/// [`Step::Modify`](meridian_core::txn::Step::Modify) ([`InteractiveOp::rmw`]): the client
/// never sees their old value, so a protocol may run them inside its commit (Tiga's
/// Appendix F) instead of reading them first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InteractiveOp {
    Get(Key),
    /// A multi-key read step: the keys are read in order, one value each, and none of them
    /// depends on a value read in the same step. The driver sends one `Get` per key, the
    /// first carrying the others as its `then` hint
    /// ([`Step::Get`](meridian_core::txn::Step::Get)), so a protocol may read them in one
    /// snapshot (Tiga: one one-shot read, Appendix F) and any other answers them one by one.
    GetMany(Vec<Key>),
    Put(Key, Value),
    Append(Key, Value),
    /// Integer add (a missing key counts as 0), as [`Op::Add`](meridian_core::txn::Op::Add).
    Add(Key, i64),
}

impl InteractiveOp {
    /// The keys the op touches (one, except a multi-key read).
    pub fn keys(&self) -> &[Key] {
        match self {
            InteractiveOp::Get(k)
            | InteractiveOp::Put(k, _)
            | InteractiveOp::Append(k, _)
            | InteractiveOp::Add(k, _) => std::slice::from_ref(k),
            InteractiveOp::GetMany(keys) => keys,
        }
    }

    /// How many values the op reads (and the driver hands back as reads).
    pub fn reads(&self) -> usize {
        match self {
            InteractiveOp::Get(_) => 1,
            InteractiveOp::GetMany(keys) => keys.len(),
            InteractiveOp::Put(..) | InteractiveOp::Append(..) | InteractiveOp::Add(..) => 0,
        }
    }

    /// The read-modify-write the driver sends for `Append` and `Add`; `None` for plain
    /// gets and puts.
    pub fn rmw(&self) -> Option<meridian_core::txn::Rmw> {
        use meridian_core::txn::Rmw;
        match self {
            InteractiveOp::Append(_, suffix) => Some(Rmw::Append(suffix.clone())),
            InteractiveOp::Add(_, delta) => Some(Rmw::Add(*delta)),
            InteractiveOp::Get(_) | InteractiveOp::GetMany(_) | InteractiveOp::Put(..) => None,
        }
    }
}

/// A transaction as a client submits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnPlan {
    OneShot(Txn),
    Interactive(Vec<InteractiveOp>),
}

impl TxnPlan {
    /// Whether the plan writes nothing.
    pub fn is_read_only(&self) -> bool {
        match self {
            TxnPlan::OneShot(txn) => txn.is_read_only(),
            TxnPlan::Interactive(ops) => ops.iter().all(|op| op.rmw().is_none() && op.reads() > 0),
        }
    }
}

/// A generator of transactions for the clients of one run.
pub trait Workload: Send {
    /// The workload's name (`list-append`, `bank`, `microbench`, ...).
    fn name(&self) -> &str;

    /// The next transaction of `client`, drawn from `rng` (the client's own seeded RNG),
    /// with its class labels. The client's place (coordinator, region) lets a workload plan
    /// region-local or cross-region transactions.
    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned;

    /// The history operations of a finished transaction. `interactive_reads` holds, for an
    /// interactive plan, the value each `Get` (and each `Append`'s internal get) returned, in
    /// plan order; it is empty for one-shot plans, whose reads are in the outcome. For an
    /// aborted or unknown transaction the reads are `null` and the writes are the intended ones.
    fn history_ops(
        &self,
        plan: &TxnPlan,
        outcome: &Outcome,
        interactive_reads: &[Option<Value>],
    ) -> Vec<HistOp>;

    /// How long `client` waits, from virtual time `now_ns`, before drawing its next
    /// transaction. The default 0 is a closed loop; a scripted test workload places
    /// transactions at chosen times (`u64::MAX`: no more transactions).
    fn think_ns(&mut self, _client: ClientId, _now_ns: u64) -> u64 {
        0
    }

    /// Whether the dependency checker can judge this workload's history. The bank's reads
    /// are of balances no history op writes (an `add` result is not unique), so its history
    /// is judged by its invariant alone and a default `--check` is skipped for it.
    fn history_checkable(&self) -> bool {
        true
    }

    /// A workload-specific invariant over the whole history (after the run).
    fn check_history(&self, _history: &[Entry]) -> Result<(), String> {
        Ok(())
    }

    /// Keys whose final values the workload's consistency conditions need. After the load
    /// and the drain, the driver reads them through the protocol itself, in read-only
    /// one-shot transactions ([`audit::plans`]), and hands the values to
    /// [`Workload::check_final`]. Empty (the default): no audit.
    fn audit_keys(&self) -> Vec<Key> {
        Vec::new()
    }

    /// The workload's consistency conditions over the final state read by the audit (the
    /// bank's total, TPC-C's conditions 1–4, TPC-A's balances, list-append's durability),
    /// with the run's history (empty when none was recorded).
    fn check_final(&self, _state: &audit::FinalState, _history: &[Entry]) -> Result<(), String> {
        Ok(())
    }

    /// The clients' declared out-of-band dependencies ([`out_of_band`]), which the driver
    /// carries out; `None` (the default) declares none.
    fn out_of_band(&self) -> Option<OutOfBand> {
        None
    }
}

/// Options every workload understands; unknown ones are refused by name.
#[derive(Clone, Debug, Default)]
pub struct WorkloadOptions {
    pub options: std::collections::BTreeMap<String, String>,
}

impl WorkloadOptions {
    /// Reads `key=value` strings (the command line's form). A string without `=`, an empty
    /// key, or a key given twice is an error naming it.
    pub fn parse<S: AsRef<str>>(
        items: impl IntoIterator<Item = S>,
    ) -> Result<WorkloadOptions, String> {
        let mut options = WorkloadOptions::default();
        for item in items {
            let item = item.as_ref();
            let Some((key, value)) = item.split_once('=') else {
                return Err(format!(
                    "workload option `{item}` is not of the form key=value"
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(format!("workload option `{item}` has an empty key"));
            }
            if options
                .options
                .insert(key.to_string(), value.to_string())
                .is_some()
            {
                return Err(format!("workload option `{key}` is given twice"));
            }
        }
        Ok(options)
    }

    /// The options plus `key=value` (a builder for tests and code).
    pub fn with(mut self, key: &str, value: impl ToString) -> WorkloadOptions {
        self.options.insert(key.to_string(), value.to_string());
        self
    }
}

/// The workload names `build` knows.
pub const WORKLOADS: [&str; 8] = [
    "list-append",
    "bank",
    "microbench",
    "ycsb-t",
    "tpcc",
    "tpca",
    "retwis",
    "smallbank",
];

/// The stored procedures every workload's plans may call (TPC-C's and SmallBank's). A
/// driver registers them in the cluster's [`Procedures`](meridian_core::Procedures).
pub fn procedures() -> meridian_core::Procedures {
    let mut procedures = meridian_core::Procedures::new();
    tpcc::register(&mut procedures);
    smallbank::register(&mut procedures);
    procedures
}

/// Builds the named workload for `cluster`. An unknown name, an unknown option and a
/// malformed or out-of-range option value are errors naming them. Every workload also
/// takes the client options `oob_ratio` and `oob_read` ([`out_of_band`]).
pub fn build(
    name: &str,
    cluster: &Cluster,
    options: &WorkloadOptions,
) -> Result<Box<dyn Workload>, String> {
    let mut options = options.clone();
    let out_of_band =
        OutOfBand::take(&mut options).map_err(|e| format!("workload `{name}`: {e}"))?;
    let inner = build_named(name, cluster, &options)?;
    Ok(match out_of_band {
        Some(out_of_band) => Box::new(out_of_band::Declaring { inner, out_of_band }),
        None => inner,
    })
}

fn build_named(
    name: &str,
    cluster: &Cluster,
    options: &WorkloadOptions,
) -> Result<Box<dyn Workload>, String> {
    Ok(match name {
        "list-append" => Box::new(ListAppend::new(cluster, options)?),
        "bank" => Box::new(Bank::new(cluster, options)?),
        "microbench" => Box::new(MicroBench::new(cluster, options)?),
        "ycsb-t" => Box::new(YcsbT::new(cluster, options)?),
        "tpcc" => Box::new(TpcC::new(cluster, options)?),
        "tpca" => Box::new(TpcA::new(cluster, options)?),
        "retwis" => Box::new(Retwis::new(cluster, options)?),
        "smallbank" => Box::new(SmallBank::new(cluster, options)?),
        _ => {
            return Err(format!(
                "unknown workload `{name}` (known: {})",
                WORKLOADS.join(", ")
            ))
        }
    })
}

/// The logical name of a workload key: the byte key without the `~salt` suffix that
/// [`meridian_core::Partitioner::key_on_shard`] may add (`k7~3` → `k7`). Workloads' logical
/// names never contain `~`.
pub fn logical_name(key: &[u8]) -> String {
    let end = key.iter().position(|&b| b == b'~').unwrap_or(key.len());
    String::from_utf8_lossy(&key[..end]).into_owned()
}

/// A one-shot transaction of `ops`: one piece per shard (by the key's placement), in shard
/// order, each piece's ops in the order given.
pub fn txn_by_shard(
    partitioner: &meridian_core::Partitioner,
    ops: impl IntoIterator<Item = meridian_core::txn::Op>,
) -> Txn {
    let mut by_shard: std::collections::BTreeMap<
        meridian_core::ShardId,
        Vec<meridian_core::txn::Op>,
    > = std::collections::BTreeMap::new();
    for op in ops {
        by_shard
            .entry(partitioner.shard_of(op.key()))
            .or_default()
            .push(op);
    }
    Txn {
        pieces: by_shard
            .into_iter()
            .map(|(shard, ops)| meridian_core::txn::Piece::ops(shard, ops))
            .collect(),
    }
}

/// Distinct Zipf-distributed ranks, `count` of them (fewer if the key space is smaller).
pub(crate) fn distinct_ranks(zipf: &Zipf, count: usize, rng: &mut NodeRng) -> Vec<u64> {
    let count = count.min(usize::try_from(zipf.n()).unwrap_or(usize::MAX));
    let mut ranks: Vec<u64> = Vec::with_capacity(count);
    while ranks.len() < count {
        let r = zipf.sample(rng);
        if !ranks.contains(&r) {
            ranks.push(r);
        }
    }
    ranks
}

/// The piece results of a committed one-shot transaction, or `None` if it did not commit.
///
/// # Panics
///
/// If a committed outcome does not hold one result per piece: the protocol broke the
/// [`Outcome`] contract, and no honest history can be written for the transaction.
pub(crate) fn committed_results<'a>(txn: &Txn, outcome: &'a Outcome) -> Option<&'a [PieceResult]> {
    match outcome {
        Outcome::Committed { results, .. } => {
            assert_eq!(
                results.len(),
                txn.pieces.len(),
                "a committed outcome must hold one result per piece ({} results for {} pieces)",
                results.len(),
                txn.pieces.len()
            );
            Some(results)
        }
        Outcome::Aborted { .. } | Outcome::Unknown { .. } => None,
    }
}

/// Output `op` of piece `piece`.
///
/// # Panics
///
/// If the piece result has no such output (a broken [`Outcome`], as above).
pub(crate) fn output(results: &[PieceResult], piece: usize, op: usize) -> Option<&Value> {
    let outputs = &results[piece].outputs;
    assert!(
        op < outputs.len(),
        "piece {piece} of a committed outcome has {} outputs, expected at least {}",
        outputs.len(),
        op + 1
    );
    outputs[op].as_ref()
}

/// The values each op of a committed interactive plan read, by op: `reads` holds one value
/// per key read (a `Get` reads one, a `GetMany` one per key), in plan order; every other op
/// (puts and read-modify-writes, which the client never reads) gets an empty slice.
///
/// # Panics
///
/// If the driver handed fewer reads than the plan's ops read.
pub(crate) fn interactive_reads_by_op<'a>(
    ops: &[InteractiveOp],
    reads: &'a [Option<Value>],
) -> Vec<&'a [Option<Value>]> {
    let mut at = 0;
    ops.iter()
        .map(|op| {
            let n = op.reads();
            let slice = reads.get(at..at + n).unwrap_or_else(|| {
                panic!(
                    "a committed interactive transaction of {} ops came with only {} reads",
                    ops.len(),
                    reads.len()
                )
            });
            at += n;
            slice
        })
        .collect()
}

/// A read of a list key: a missing key reads as the empty list.
///
/// # Panics
///
/// If the bytes are not a list of 8-byte integers: the store broke `append`'s contract, and
/// reporting anything else (null, a truncated list) would hide that from the checker.
pub(crate) fn list_read(key: &Key, value: Option<&Value>) -> ReadValue {
    match value {
        None => ReadValue::List(Vec::new()),
        Some(bytes) => {
            ReadValue::List(meridian_core::value::decode_list(bytes).unwrap_or_else(|| {
                panic!(
                    "key `{}` holds {} bytes, not a list of 8-byte integers",
                    logical_name(key),
                    bytes.len()
                )
            }))
        }
    }
}

/// A read of an integer key: a missing key reads as 0 (what `add` assumes).
///
/// # Panics
///
/// If the bytes are not one 8-byte integer (see [`list_read`]).
pub(crate) fn int_read(key: &Key, value: Option<&Value>) -> i64 {
    match value {
        None => 0,
        Some(bytes) => meridian_core::value::decode_int(bytes).unwrap_or_else(|| {
            panic!(
                "key `{}` holds {} bytes, not an 8-byte integer",
                logical_name(key),
                bytes.len()
            )
        }),
    }
}

/// An integer written by a literal operand (the workloads' appends and puts).
pub(crate) fn literal_int(bytes: &[u8]) -> i64 {
    meridian_core::value::decode_int(bytes).expect("workloads write 8-byte integers")
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers for the workloads' tests: clusters of any shard count, seeded RNGs, and an
    //! in-memory store that executes plans serially the way every protocol does
    //! (`execute_piece`).

    use meridian_core::txn::{
        execute_piece, Key, KvAccess, Outcome, PieceResult, Procedures, Txn, Value,
    };
    use meridian_core::{CommitPath, NodeRng, Topology};
    use rand::SeedableRng;
    use rustc_hash::FxHashMap;

    pub(crate) fn cluster(shards: u32) -> meridian_core::Cluster {
        let text = format!(
            "name = \"t\"\nregions = [\"A\", \"B\"]\nintra_region_rtt_ms = 1.0\n[[rtt]]\nbetween = [\"A\", \"B\"]\nms = 100.0\n[[shards]]\ncount = {shards}\nreplicas = [\"A\", \"B\", \"B\"]\nleader = \"A\"\n[[coordinators]]\nregion = \"A\"\ncount = 2\n"
        );
        meridian_core::Cluster::new(Topology::parse("t", &text).unwrap(), &[]).unwrap()
    }

    /// A client of id `id` at a coordinator of region 0 (generators that ignore the place).
    pub(crate) fn client(id: impl TryInto<u32>) -> crate::ClientInfo {
        crate::ClientInfo {
            id: meridian_core::ClientId(id.try_into().ok().expect("a small client id")),
            coordinator: meridian_core::NodeId(0),
            region: meridian_core::RegionId(0),
        }
    }

    pub(crate) fn rng(seed: u64) -> NodeRng {
        NodeRng::seed_from_u64(seed)
    }

    pub(crate) type MapStore = FxHashMap<Key, Value>;

    /// Executes `txn`'s pieces in order against `store` and returns the committed outcome.
    pub(crate) fn execute(txn: &Txn, store: &mut MapStore) -> Outcome {
        execute_with(txn, store, &Procedures::new())
    }

    /// [`execute`] with stored procedures.
    pub(crate) fn execute_with(
        txn: &Txn,
        store: &mut MapStore,
        procedures: &Procedures,
    ) -> Outcome {
        let mut results: Vec<PieceResult> = Vec::new();
        for piece in &txn.pieces {
            let inputs: Vec<Option<&PieceResult>> = results.iter().map(Some).collect();
            let result = execute_piece(piece, &inputs, procedures, store).unwrap();
            results.push(result);
        }
        Outcome::Committed {
            results,
            commit_ts: None,
            path: CommitPath::Fast,
        }
    }

    /// Runs interactive plans serially the way a protocol does (an append or add is a
    /// read-modify-write of the key) and returns the reads the client driver would hand
    /// `history_ops`: one per get.
    #[derive(Default)]
    pub(crate) struct InteractiveDriver {
        pub(crate) store: MapStore,
    }

    impl InteractiveDriver {
        pub(crate) fn run(&mut self, ops: &[crate::InteractiveOp]) -> Vec<Option<Value>> {
            use crate::InteractiveOp;
            let mut reads = Vec::new();
            for op in ops {
                match op {
                    InteractiveOp::Get(_) | InteractiveOp::GetMany(_) => {
                        reads.extend(op.keys().iter().map(|k| self.store.get(k).cloned()))
                    }
                    InteractiveOp::Put(k, v) => self.store.put(k.clone(), v.clone()),
                    InteractiveOp::Append(k, _) | InteractiveOp::Add(k, _) => {
                        let rmw = op.rmw().expect("read-modify-write");
                        let new = rmw.apply(self.store.get(k));
                        self.store.put(k.clone(), new);
                    }
                }
            }
            reads
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::{cluster, rng};

    #[test]
    fn build_knows_every_workload_by_name() {
        let c = cluster(3);
        for name in WORKLOADS {
            let mut w = build(name, &c, &WorkloadOptions::default()).unwrap();
            assert_eq!(w.name(), name);
            let mut r = rng(1);
            for _ in 0..20 {
                match w.next(&crate::test_support::client(0), &mut r).plan {
                    TxnPlan::OneShot(txn) => txn.validate(3).unwrap(),
                    TxnPlan::Interactive(ops) => assert!(!ops.is_empty()),
                }
            }
        }
        let e = build("tpc-z", &c, &WorkloadOptions::default())
            .err()
            .unwrap();
        assert!(
            e.contains("unknown workload `tpc-z`") && e.contains("list-append"),
            "{e}"
        );
        let e = build("bank", &c, &WorkloadOptions::default().with("zipf", "0.5"))
            .err()
            .unwrap();
        assert!(e.contains("unknown option `zipf`"), "{e}");
        let e = build(
            "microbench",
            &c,
            &WorkloadOptions::default().with("zipf", "0,5"),
        )
        .err()
        .unwrap();
        assert!(e.contains("`zipf=0,5`"), "{e}");
    }

    #[test]
    fn options_parse_from_key_value_strings() {
        let o = WorkloadOptions::parse(["keys=32", " interactive = true "]).unwrap();
        assert_eq!(o.options.get("keys").map(String::as_str), Some("32"));
        assert_eq!(
            o.options.get("interactive").map(String::as_str),
            Some("true")
        );
        assert!(WorkloadOptions::parse(["keys"])
            .unwrap_err()
            .contains("`keys`"));
        assert!(WorkloadOptions::parse(["=3"])
            .unwrap_err()
            .contains("empty key"));
        assert!(WorkloadOptions::parse(["keys=1", "keys=2"])
            .unwrap_err()
            .contains("twice"));
        let c = cluster(2);
        let e = build(
            "list-append",
            &c,
            &WorkloadOptions::parse(["kyes=3", "opsmax=2"]).unwrap(),
        )
        .err()
        .unwrap();
        assert!(e.contains("unknown options `kyes`, `opsmax`"), "{e}");
    }

    #[test]
    fn logical_names_drop_the_shard_salt() {
        assert_eq!(logical_name(b"k7~12"), "k7");
        assert_eq!(logical_name(b"acct3"), "acct3");
        let c = cluster(5);
        for i in 0..50 {
            let key = c
                .partitioner
                .key_on_shard(meridian_core::ShardId(i % 5), &format!("k{i}"));
            assert_eq!(logical_name(&key), format!("k{i}"));
        }
    }
}
