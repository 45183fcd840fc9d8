//! The checker's verdict: JSON (serde) for tools, `Display` for people.

use crate::anomaly::{Anomaly, AnomalyKind};
use crate::model::Model;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Distinct dependency edges of each type in the graph that was searched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EdgeCounts {
    pub ww: u64,
    pub wr: u64,
    pub rw: u64,
    /// Real-time links, counted through barrier nodes (a link is transaction → barrier,
    /// barrier → barrier or barrier → transaction); 0 for models without real time.
    pub rt: u64,
}

/// What the checker looked at and how long it took.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub txns: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    /// `info` transactions treated as committed because a read observed one of their writes.
    pub info_included: u64,
    pub keys: u64,
    pub edges: EdgeCounts,
    /// Virtual nodes of the real-time order (see the crate doc).
    pub barriers: u64,
    /// Strongly connected components with a cycle, over ww/wr/rw edges.
    pub cyclic_components: u64,
    pub elapsed_ms: f64,
}

/// The verdict for one model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckReport {
    pub model: Model,
    /// True iff `anomalies` is empty.
    pub valid: bool,
    /// Every anomaly the model proscribes.
    pub anomalies: Vec<Anomaly>,
    /// Anomalies found that the model permits (G2 write skew under snapshot isolation);
    /// informational.
    pub allowed: Vec<Anomaly>,
    pub stats: Stats,
}

impl CheckReport {
    /// The distinct kinds of the proscribed anomalies, sorted.
    pub fn kinds(&self) -> Vec<AnomalyKind> {
        let mut kinds: Vec<_> = self.anomalies.iter().map(|a| a.kind).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

fn summary(anomalies: &[Anomaly]) -> String {
    let mut counts: BTreeMap<AnomalyKind, usize> = BTreeMap::new();
    for a in anomalies {
        *counts.entry(a.kind).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        if self.valid {
            writeln!(f, "{}: VALID", self.model)?;
        } else {
            writeln!(
                f,
                "{}: INVALID, {} anomalies ({})",
                self.model,
                self.anomalies.len(),
                summary(&self.anomalies)
            )?;
        }
        writeln!(
            f,
            "  {} transactions ({} ok, {} fail, {} info of which {} observed), {} keys; edges ww {} wr {} rw {} rt {}; {:.1} ms",
            s.txns, s.ok, s.fail, s.info, s.info_included, s.keys, s.edges.ww, s.edges.wr, s.edges.rw, s.edges.rt, s.elapsed_ms
        )?;
        for (i, a) in self.anomalies.iter().enumerate() {
            writeln!(f, "[{}] {a}", i + 1)?;
        }
        if !self.allowed.is_empty() {
            writeln!(f, "allowed by {}: {}", self.model, summary(&self.allowed))?;
            for a in &self.allowed {
                writeln!(f, "  {a}")?;
            }
        }
        Ok(())
    }
}
