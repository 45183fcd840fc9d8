//! The transaction model (DESIGN §6).
//!
//! * A **one-shot** transaction ([`Txn`]) is a list of [`Piece`]s; each piece runs on one
//!   shard, with read and write keys known before execution (Tiga's conflict detection and
//!   DAST's/Calvin's scheduling need them). A piece is either a list of built-in [`Op`]s or a
//!   call of a registered stored procedure. An [`Operand`] may name another piece's output,
//!   which declares a value dependency (DAST §4.1, Aurogon §4.3); [`Txn::validate`] checks
//!   that the dependencies form a DAG of earlier pieces.
//! * An **interactive** transaction is a session of [`Step`]s (begin, get, put, commit,
//!   abort) chosen by the client one at a time.
//! * Every transaction ends in an [`Outcome`]: committed (with results, commit timestamp and
//!   [`CommitPath`]), aborted (with an [`AbortReason`]), or unknown.
//!
//! [`execute_piece`] is the one definition of what a piece does to a store; every protocol
//! calls it, so two protocols cannot disagree about `add` or `append`.

use crate::ids::{ShardId, ShardList, TxnId};
use crate::small_bytes::SmallBytes;
use crate::time::Timestamp;
use crate::value;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// A key: an arbitrary byte string (inline when short, see [`SmallBytes`]).
pub type Key = SmallBytes;
/// A short list of keys (a transaction's read or write set on one shard, a log entry's
/// footprint): inline up to two, the common case, so building one allocates nothing.
pub type KeyList = smallvec::SmallVec<[Key; 2]>;
/// A value: an arbitrary byte string (see [`crate::value`] for the integer and list shapes).
pub type Value = SmallBytes;

/// Where an operation takes a value from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operand {
    /// A constant chosen by the client.
    Literal(Value),
    /// Output `output` of piece `piece` of the same transaction (a value dependency).
    Input { piece: u16, output: u16 },
}

/// A built-in operation of a piece.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// Read a key. Output: the value read (or `None`).
    Get(Key),
    /// Overwrite a key. Output: `None`.
    Put(Key, Operand),
    /// Integer read-modify-write: add the operand (an encoded integer) to the value
    /// (missing = 0). Output: the new value.
    Add(Key, Operand),
    /// Append the operand's bytes to the value (list append). Output: `None`.
    Append(Key, Operand),
    /// Validation: read a key and abort the transaction with [`AbortReason::Validation`]
    /// unless its value is the expected one (`None`: absent). Decomposed interactive
    /// transactions (Tiga §2, \[70\]) re-validate what they read with it at commit. Output:
    /// the value read.
    Check(Key, Option<Value>),
}

impl Op {
    pub fn key(&self) -> &Key {
        match self {
            Op::Get(k) | Op::Put(k, _) | Op::Add(k, _) | Op::Append(k, _) | Op::Check(k, _) => k,
        }
    }

    /// Whether the op reads the key's current value (`add` and `append` are read-modify-writes).
    pub fn reads(&self) -> bool {
        !matches!(self, Op::Put(..))
    }

    pub fn writes(&self) -> bool {
        !matches!(self, Op::Get(_) | Op::Check(..))
    }

    fn operand(&self) -> Option<&Operand> {
        match self {
            Op::Get(_) | Op::Check(..) => None,
            Op::Put(_, o) | Op::Add(_, o) | Op::Append(_, o) => Some(o),
        }
    }
}

/// A call of a stored procedure registered in [`Procedures`]. The read and write keys are
/// declared by the caller because the server must know them before execution.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcedureCall {
    pub name: Arc<str>,
    pub args: Vec<Operand>,
    pub read_keys: Vec<Key>,
    pub write_keys: Vec<Key>,
}

/// What a piece does.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PieceBody {
    Ops(Vec<Op>),
    Procedure(ProcedureCall),
}

/// The part of a one-shot transaction that runs on one shard.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Piece {
    pub shard: ShardId,
    pub body: PieceBody,
}

impl Piece {
    /// A piece of built-in operations.
    pub fn ops(shard: ShardId, ops: Vec<Op>) -> Piece {
        Piece {
            shard,
            body: PieceBody::Ops(ops),
        }
    }

    /// Keys whose current value the piece reads (read-modify-writes included).
    pub fn read_keys(&self) -> Vec<Key> {
        let mut keys = Vec::new();
        self.for_each_key(|k, write| {
            if !write {
                keys.push(k.clone())
            }
        });
        keys
    }

    /// Keys the piece may write.
    pub fn write_keys(&self) -> Vec<Key> {
        let mut keys = Vec::new();
        self.for_each_key(|k, write| {
            if write {
                keys.push(k.clone())
            }
        });
        keys
    }

    /// Calls `f(key, false)` for every key of [`Piece::read_keys`], then `f(key, true)`
    /// for every key of [`Piece::write_keys`], in order, without collecting them.
    pub fn for_each_key(&self, mut f: impl FnMut(&Key, bool)) {
        match &self.body {
            PieceBody::Ops(ops) => {
                ops.iter()
                    .filter(|o| o.reads())
                    .for_each(|o| f(o.key(), false));
                ops.iter()
                    .filter(|o| o.writes())
                    .for_each(|o| f(o.key(), true));
            }
            PieceBody::Procedure(call) => {
                call.read_keys.iter().for_each(|k| f(k, false));
                call.write_keys.iter().for_each(|k| f(k, true));
            }
        }
    }

    /// Whether the piece never writes.
    pub fn is_read_only(&self) -> bool {
        match &self.body {
            PieceBody::Ops(ops) => ops.iter().all(|o| !o.writes()),
            PieceBody::Procedure(call) => call.write_keys.is_empty(),
        }
    }

    /// The pieces whose outputs this piece consumes (its value dependencies).
    pub fn dependencies(&self) -> Vec<u16> {
        let operands: Vec<&Operand> = match &self.body {
            PieceBody::Ops(ops) => ops.iter().filter_map(Op::operand).collect(),
            PieceBody::Procedure(call) => call.args.iter().collect(),
        };
        let mut deps: Vec<u16> = operands
            .into_iter()
            .filter_map(|o| match o {
                Operand::Input { piece, .. } => Some(*piece),
                Operand::Literal(_) => None,
            })
            .collect();
        deps.sort_unstable();
        deps.dedup();
        deps
    }
}

/// A one-shot transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Txn {
    pub pieces: Vec<Piece>,
}

/// Why a transaction description is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("transaction has no pieces")]
    Empty,
    #[error("piece {piece} depends on piece {input}, which is not an earlier piece")]
    BadDependency { piece: usize, input: u16 },
    #[error("piece {piece} targets {shard}, but the cluster has {shards} shards")]
    BadShard {
        piece: usize,
        shard: ShardId,
        shards: u32,
    },
}

impl Txn {
    /// The shards the transaction touches, sorted and deduplicated.
    pub fn shards(&self) -> ShardList {
        let mut shards: ShardList = self.pieces.iter().map(|p| p.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    /// Whether no piece writes.
    pub fn is_read_only(&self) -> bool {
        self.pieces.iter().all(Piece::is_read_only)
    }

    /// Whether some piece consumes another piece's output.
    pub fn has_dependencies(&self) -> bool {
        self.pieces.iter().any(|p| !p.dependencies().is_empty())
    }

    /// Checks the transaction against a cluster of `shards` shards: non-empty, every shard
    /// exists, every dependency names an earlier piece (so the pieces' order is a
    /// topological order of the dependency DAG).
    pub fn validate(&self, shards: u32) -> Result<(), TxnError> {
        if self.pieces.is_empty() {
            return Err(TxnError::Empty);
        }
        for (index, piece) in self.pieces.iter().enumerate() {
            if piece.shard.0 >= shards {
                return Err(TxnError::BadShard {
                    piece: index,
                    shard: piece.shard,
                    shards,
                });
            }
            if let Some(&input) = piece
                .dependencies()
                .iter()
                .find(|&&d| usize::from(d) >= index)
            {
                return Err(TxnError::BadDependency {
                    piece: index,
                    input,
                });
            }
        }
        Ok(())
    }
}

/// The outputs of one executed piece: one entry per op for built-in pieces (see [`Op`]),
/// whatever the procedure returns for procedure pieces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PieceResult {
    pub outputs: Vec<Option<Value>>,
}

/// Reads and writes of the one version of the store a piece executes against.
pub trait KvAccess {
    fn get(&mut self, key: &Key) -> Option<Value>;
    fn put(&mut self, key: Key, value: Value);
}

/// A plain map is a single-version store: what tests and simple protocols execute pieces on.
impl<S: std::hash::BuildHasher> KvAccess for std::collections::HashMap<Key, Value, S> {
    fn get(&mut self, key: &Key) -> Option<Value> {
        std::collections::HashMap::get(self, key).cloned()
    }
    fn put(&mut self, key: Key, value: Value) {
        self.insert(key, value);
    }
}

/// A stored procedure: deterministic given its arguments and the store it reads. It may
/// refuse (a user abort, e.g. TPC-C's invalid item), which aborts the whole transaction.
pub type ProcedureFn = fn(&mut dyn KvAccess, &[Value]) -> Result<Vec<Option<Value>>, AbortReason>;

/// The stored procedures registered in a binary, by name.
#[derive(Clone, Default)]
pub struct Procedures {
    by_name: FxHashMap<Arc<str>, ProcedureFn>,
}

impl Procedures {
    pub fn new() -> Procedures {
        Procedures::default()
    }

    /// Registers `procedure` under `name`; registering a name twice is a programming error.
    pub fn register(&mut self, name: &str, procedure: ProcedureFn) {
        let previous = self.by_name.insert(Arc::from(name), procedure);
        assert!(
            previous.is_none(),
            "stored procedure `{name}` registered twice"
        );
    }

    pub fn get(&self, name: &str) -> Option<ProcedureFn> {
        self.by_name.get(name).copied()
    }
}

impl fmt::Debug for Procedures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_name.keys()).finish()
    }
}

/// Resolves an operand against the outputs of earlier pieces (`inputs[piece]`).
fn resolve(operand: &Operand, inputs: &[Option<&PieceResult>]) -> Result<Value, AbortReason> {
    match operand {
        Operand::Literal(v) => Ok(v.clone()),
        Operand::Input { piece, output } => inputs
            .get(usize::from(*piece))
            .copied()
            .flatten()
            .and_then(|r| r.outputs.get(usize::from(*output)))
            .map(|v| v.clone().unwrap_or_default())
            .ok_or(AbortReason::MissingInput {
                piece: *piece,
                output: *output,
            }),
    }
}

/// Executes one piece against `store`. `inputs[i]` holds piece `i`'s result when this piece
/// depends on it. Deterministic: the same store state and inputs give the same writes and
/// result.
pub fn execute_piece(
    piece: &Piece,
    inputs: &[Option<&PieceResult>],
    procedures: &Procedures,
    store: &mut dyn KvAccess,
) -> Result<PieceResult, AbortReason> {
    match &piece.body {
        PieceBody::Ops(ops) => {
            let mut outputs = Vec::with_capacity(ops.len());
            for op in ops {
                outputs.push(execute_op(op, inputs, store)?);
            }
            Ok(PieceResult { outputs })
        }
        PieceBody::Procedure(call) => {
            let procedure = procedures
                .get(&call.name)
                .ok_or_else(|| AbortReason::UnknownProcedure(call.name.to_string()))?;
            let args = call
                .args
                .iter()
                .map(|a| resolve(a, inputs))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(PieceResult {
                outputs: procedure(store, &args)?,
            })
        }
    }
}

fn execute_op(
    op: &Op,
    inputs: &[Option<&PieceResult>],
    store: &mut dyn KvAccess,
) -> Result<Option<Value>, AbortReason> {
    Ok(match op {
        Op::Get(key) => store.get(key),
        Op::Check(key, expected) => {
            let value = store.get(key);
            if value != *expected {
                return Err(AbortReason::Validation);
            }
            value
        }
        Op::Put(key, operand) => {
            store.put(key.clone(), resolve(operand, inputs)?);
            None
        }
        Op::Add(key, operand) => {
            let delta =
                value::decode_int(&resolve(operand, inputs)?).ok_or(AbortReason::TypeMismatch)?;
            let old = match store.get(key) {
                Some(bytes) => value::decode_int(&bytes).ok_or(AbortReason::TypeMismatch)?,
                None => 0,
            };
            let new = value::encode_int(old.wrapping_add(delta));
            store.put(key.clone(), new.clone());
            Some(new)
        }
        Op::Append(key, operand) => {
            let suffix = resolve(operand, inputs)?;
            let old = store.get(key);
            store.put(key.clone(), value::concat(old.as_ref(), &suffix));
            None
        }
    })
}

/// One step of an interactive transaction. `Begin` opens a session; the protocol answers
/// with [`ClientResponse::Began`] and every later step names the returned transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// Opens a session. `latest_seen` is the largest commit timestamp this client has seen
    /// (Clock-SI §III-E's LatestTime): a protocol offering session consistency starts the
    /// snapshot at or after it; others may ignore it.
    Begin {
        latest_seen: Option<Timestamp>,
    },
    /// Reads `key`. `then` is a multi-key read step's hint: the keys the client reads
    /// next, one `Get` each, before any other step, chosen before this read returns (no
    /// value read decides them). A protocol may read them together with `key` in one
    /// snapshot and answer their `Get`s from it (Tiga: one one-shot read transaction, the
    /// report's Appendix F); one that ignores the hint answers each `Get` as it comes.
    Get {
        txn: TxnId,
        key: Key,
        then: Vec<Key>,
    },
    Put {
        txn: TxnId,
        key: Key,
        value: Value,
    },
    /// A read-modify-write the client needs no value of (Tiga's Appendix F): it is answered
    /// [`ClientResponse::Written`], and the new value is whatever `rmw` makes of the key's
    /// value when the transaction commits. A protocol may run it at the server inside its
    /// commit (Tiga: no read to validate) or as a read then a write under its concurrency
    /// control ([`Rmw::apply`]).
    Modify {
        txn: TxnId,
        key: Key,
        rmw: Rmw,
    },
    Commit {
        txn: TxnId,
    },
    Abort {
        txn: TxnId,
    },
}

impl Step {
    /// The session a step belongs to; `None` for `Begin`, which opens one.
    pub fn txn(&self) -> Option<TxnId> {
        match self {
            Step::Begin { .. } => None,
            Step::Get { txn, .. }
            | Step::Put { txn, .. }
            | Step::Modify { txn, .. }
            | Step::Commit { txn }
            | Step::Abort { txn } => Some(*txn),
        }
    }
}

/// The read-modify-write of a [`Step::Modify`]: the built-in [`Op::Add`] and [`Op::Append`]
/// with a constant operand.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rmw {
    /// Integer add (a missing key counts as 0).
    Add(i64),
    /// List append: the bytes are appended to the value.
    Append(Value),
}

impl Rmw {
    /// The op that runs it on `key` inside a one-shot transaction.
    pub fn op(&self, key: Key) -> Op {
        match self {
            Rmw::Add(delta) => Op::Add(key, Operand::Literal(value::encode_int(*delta))),
            Rmw::Append(suffix) => Op::Append(key, Operand::Literal(suffix.clone())),
        }
    }

    /// The new value of a key whose value was `old`, for a protocol that reads then
    /// writes. An `Add` on a value that is not an integer keeps the value, where the op
    /// ([`Rmw::op`]) would abort with [`AbortReason::TypeMismatch`]; no workload stores
    /// one.
    pub fn apply(&self, old: Option<&Value>) -> Value {
        match self {
            Rmw::Append(suffix) => value::concat(old, suffix),
            Rmw::Add(delta) => {
                let base = match old {
                    None => Some(0),
                    Some(bytes) => value::decode_int(bytes),
                };
                match base {
                    Some(v) => value::encode_int(v.wrapping_add(*delta)),
                    None => old.cloned().unwrap_or_default(),
                }
            }
        }
    }
}

/// A request a client hands to a coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    OneShot(Txn),
    Interactive(Step),
}

/// A coordinator's answer to one [`ClientRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientResponse {
    /// The end of a one-shot transaction, or of an interactive one (commit, abort, or a
    /// failure mid-session).
    Outcome(Outcome),
    /// An interactive transaction has begun.
    Began(TxnId),
    /// The value an interactive `Get` read.
    Read(Option<Value>),
    /// An interactive `Put` was buffered.
    Written,
}

/// How a committed transaction got there (DESIGN §10 reports the mix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommitPath {
    /// Tiga-style fast path (one round, super quorum).
    Fast,
    /// A slow path through the leader (log synchronization).
    Slow,
    /// Executed, revoked, and re-executed at a later timestamp.
    ReExecuted,
    /// Committed on one shard without a cross-shard round.
    Local,
    /// Committed through two-phase commit.
    TwoPhase,
    /// A read-only transaction served from a snapshot.
    ReadOnly,
}

/// Why a transaction did not commit. Every abort names one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AbortReason {
    /// A conflicting transaction won (lock conflict, wound-wait, first-committer-wins).
    Conflict,
    /// Validation of what was read failed.
    Validation,
    /// The client or a stored procedure asked to abort.
    User,
    /// A participant did not answer in time.
    Timeout,
    /// A participant crashed or a view changed before the decision.
    Failure,
    /// The transaction description was unusable.
    Invalid(String),
    /// A value dependency named a missing output.
    MissingInput { piece: u16, output: u16 },
    /// A stored procedure that is not registered.
    UnknownProcedure(String),
    /// `add` on a value that is not an integer.
    TypeMismatch,
    /// The protocol does not support this kind of request.
    Unsupported(String),
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Conflict => write!(f, "conflict"),
            AbortReason::Validation => write!(f, "validation failed"),
            AbortReason::User => write!(f, "user abort"),
            AbortReason::Timeout => write!(f, "timeout"),
            AbortReason::Failure => write!(f, "participant failure"),
            AbortReason::Invalid(why) => write!(f, "invalid transaction: {why}"),
            AbortReason::MissingInput { piece, output } => {
                write!(f, "missing input {piece}.{output}")
            }
            AbortReason::UnknownProcedure(name) => write!(f, "unknown stored procedure `{name}`"),
            AbortReason::TypeMismatch => write!(f, "type mismatch"),
            AbortReason::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

/// The end of a transaction as the client sees it. A protocol never reports `Committed`
/// for something that may not be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Committed {
        /// One result per piece, in piece order (empty for interactive transactions).
        results: Vec<PieceResult>,
        commit_ts: Option<Timestamp>,
        path: CommitPath,
    },
    Aborted {
        reason: AbortReason,
    },
    /// The client cannot know (coordinator lost, client timeout).
    Unknown {
        reason: String,
    },
}

impl Outcome {
    pub fn is_committed(&self) -> bool {
        matches!(self, Outcome::Committed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{decode_int, decode_list, encode_int};

    type MapStore = FxHashMap<Key, Value>;

    fn key(s: &str) -> Key {
        Key::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn built_in_ops_do_what_their_names_say() {
        let mut store = MapStore::default();
        let lit = |v: i64| Operand::Literal(encode_int(v));
        let piece = Piece::ops(
            ShardId(0),
            vec![
                Op::Add(key("n"), lit(5)),
                Op::Add(key("n"), lit(-2)),
                Op::Append(key("l"), lit(7)),
                Op::Append(key("l"), lit(8)),
                Op::Put(key("r"), lit(42)),
                Op::Get(key("l")),
                Op::Get(key("missing")),
            ],
        );
        let result = execute_piece(&piece, &[], &Procedures::new(), &mut store).unwrap();
        assert_eq!(decode_int(result.outputs[1].as_ref().unwrap()), Some(3));
        assert_eq!(
            decode_list(result.outputs[5].as_ref().unwrap()),
            Some(vec![7, 8])
        );
        assert_eq!(result.outputs[6], None);
        assert_eq!(decode_int(&store[&key("r")]), Some(42));
    }

    #[test]
    fn value_dependencies_feed_outputs_into_later_pieces() {
        let mut store = MapStore::default();
        KvAccess::put(&mut store, key("src"), encode_int(9));
        let txn = Txn {
            pieces: vec![
                Piece::ops(ShardId(0), vec![Op::Get(key("src"))]),
                Piece::ops(
                    ShardId(1),
                    vec![Op::Put(
                        key("dst"),
                        Operand::Input {
                            piece: 0,
                            output: 0,
                        },
                    )],
                ),
            ],
        };
        txn.validate(2).unwrap();
        assert_eq!(txn.pieces[1].dependencies(), vec![0]);
        let first = execute_piece(&txn.pieces[0], &[], &Procedures::new(), &mut store).unwrap();
        execute_piece(
            &txn.pieces[1],
            &[Some(&first)],
            &Procedures::new(),
            &mut store,
        )
        .unwrap();
        assert_eq!(decode_int(&store[&key("dst")]), Some(9));
        // Without the input, the piece refuses rather than inventing a value.
        let missing = execute_piece(&txn.pieces[1], &[None], &Procedures::new(), &mut store);
        assert_eq!(
            missing,
            Err(AbortReason::MissingInput {
                piece: 0,
                output: 0
            })
        );
    }

    #[test]
    fn validation_rejects_forward_dependencies_and_unknown_shards() {
        let dep = Operand::Input {
            piece: 1,
            output: 0,
        };
        let txn = Txn {
            pieces: vec![
                Piece::ops(ShardId(0), vec![Op::Put(key("a"), dep)]),
                Piece::ops(ShardId(0), vec![Op::Get(key("b"))]),
            ],
        };
        assert_eq!(
            txn.validate(1),
            Err(TxnError::BadDependency { piece: 0, input: 1 })
        );
        let txn = Txn {
            pieces: vec![Piece::ops(ShardId(3), vec![Op::Get(key("b"))])],
        };
        assert!(matches!(txn.validate(2), Err(TxnError::BadShard { .. })));
        assert_eq!(Txn { pieces: vec![] }.validate(1), Err(TxnError::Empty));
    }

    #[test]
    fn procedures_run_and_may_abort() {
        fn transfer(
            store: &mut dyn KvAccess,
            args: &[Value],
        ) -> Result<Vec<Option<Value>>, AbortReason> {
            let amount = decode_int(&args[0]).ok_or(AbortReason::TypeMismatch)?;
            let from = Key::from_static(b"from");
            let balance = store.get(&from).and_then(|v| decode_int(&v)).unwrap_or(0);
            if balance < amount {
                return Err(AbortReason::User);
            }
            store.put(from, encode_int(balance - amount));
            Ok(vec![])
        }
        let mut procedures = Procedures::new();
        procedures.register("transfer", transfer);
        let call = |amount| Piece {
            shard: ShardId(0),
            body: PieceBody::Procedure(ProcedureCall {
                name: Arc::from("transfer"),
                args: vec![Operand::Literal(encode_int(amount))],
                read_keys: vec![key("from")],
                write_keys: vec![key("from")],
            }),
        };
        let mut store = MapStore::default();
        KvAccess::put(&mut store, key("from"), encode_int(10));
        assert!(execute_piece(&call(4), &[], &procedures, &mut store).is_ok());
        assert_eq!(
            execute_piece(&call(7), &[], &procedures, &mut store),
            Err(AbortReason::User)
        );
        assert_eq!(decode_int(&store[&key("from")]), Some(6));
        let unknown = Piece {
            shard: ShardId(0),
            body: PieceBody::Procedure(ProcedureCall {
                name: Arc::from("nope"),
                args: vec![],
                read_keys: vec![],
                write_keys: vec![],
            }),
        };
        assert!(matches!(
            execute_piece(&unknown, &[], &procedures, &mut store),
            Err(AbortReason::UnknownProcedure(_))
        ));
    }
}
