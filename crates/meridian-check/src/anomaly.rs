//! What the checker reports: anomalies, each with the transactions involved and, for a
//! cycle, every step of the cycle and the key and values that explain it.

use serde::Serialize;
use std::fmt;

/// The anomaly classes (Adya's G0–G2 plus Elle's list-append checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum AnomalyKind {
    /// Write cycle: a cycle of ww edges (interleaved appends).
    #[serde(rename = "G0")]
    G0,
    /// Aborted read: a committed transaction read a value written by a `fail` transaction.
    #[serde(rename = "G1a")]
    G1a,
    /// Intermediate read: a read ends in a transaction's non-final append (or write) to the key.
    #[serde(rename = "G1b")]
    G1b,
    /// Circular information flow: a cycle of ww/wr edges with at least one wr.
    #[serde(rename = "G1c")]
    G1c,
    /// A cycle with exactly one rw edge (read skew, lost update).
    #[serde(rename = "G-single")]
    GSingle,
    /// A cycle with at least two rw edges, no two of them adjacent (impossible under SI).
    #[serde(rename = "G-nonadjacent")]
    GNonadjacent,
    /// A cycle with at least two rw edges, two of them adjacent (write skew; SI allows it).
    #[serde(rename = "G2")]
    G2,
    /// A cycle that closes only through real-time order.
    #[serde(rename = "real-time")]
    RealTime,
    /// Two reads of a list where neither is a prefix of the other.
    #[serde(rename = "incompatible-order")]
    IncompatibleOrder,
    /// A read of a list that contains the same element twice.
    #[serde(rename = "duplicate-elements")]
    DuplicateElements,
    /// A read of a value that no transaction wrote.
    #[serde(rename = "garbage-read")]
    GarbageRead,
    /// A transaction's read disagrees with its own earlier reads and writes of the key.
    #[serde(rename = "internal")]
    Internal,
    /// The history breaks its own contract (a value written twice, a key used both as a
    /// list and as a register, a completion before the invocation).
    #[serde(rename = "malformed")]
    Malformed,
    /// The cycle search ran out of budget before it could decide a class the model
    /// proscribes; the verdict is "not proven valid".
    #[serde(rename = "cycle-search-timeout")]
    CycleSearchTimeout,
}

impl AnomalyKind {
    /// The name used in reports (`G-single`, `incompatible-order`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::G0 => "G0",
            AnomalyKind::G1a => "G1a",
            AnomalyKind::G1b => "G1b",
            AnomalyKind::G1c => "G1c",
            AnomalyKind::GSingle => "G-single",
            AnomalyKind::GNonadjacent => "G-nonadjacent",
            AnomalyKind::G2 => "G2",
            AnomalyKind::RealTime => "real-time",
            AnomalyKind::IncompatibleOrder => "incompatible-order",
            AnomalyKind::DuplicateElements => "duplicate-elements",
            AnomalyKind::GarbageRead => "garbage-read",
            AnomalyKind::Internal => "internal",
            AnomalyKind::Malformed => "malformed",
            AnomalyKind::CycleSearchTimeout => "cycle-search-timeout",
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transaction as the history names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TxnRef {
    /// The entry's `index` field.
    pub index: u64,
    pub process: u64,
}

impl fmt::Display for TxnRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{} (process {})", self.index, self.process)
    }
}

/// A dependency type, as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeType {
    Ww,
    Wr,
    Rw,
    Rt,
}

impl fmt::Display for EdgeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EdgeType::Ww => "ww",
            EdgeType::Wr => "wr",
            EdgeType::Rw => "rw",
            EdgeType::Rt => "rt",
        })
    }
}

/// One edge of a cycle: `from` must precede `to` in any serial order, because ...
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    pub from: TxnRef,
    pub to: TxnRef,
    pub edge: EdgeType,
    /// The key that explains the edge (for `rt`, the shared key under strong partition
    /// serializability, none under strict serializability).
    pub key: Option<String>,
    /// E.g. "T17 appended 5 to x; T23 read x = [.., 5] (wr)".
    pub explanation: String,
}

/// One anomaly found in the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// The transactions involved; for a cycle, in cycle order.
    pub txns: Vec<TxnRef>,
    /// For a cycle anomaly, its steps: `cycle[i].to == cycle[i + 1].from`, and the last step
    /// returns to the first transaction. Empty for other anomalies.
    pub cycle: Vec<Step>,
    pub explanation: String,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.explanation)?;
        for step in &self.cycle {
            write!(
                f,
                "\n    {} -> {} [{}] {}",
                step.from, step.to, step.edge, step.explanation
            )?;
        }
        Ok(())
    }
}
