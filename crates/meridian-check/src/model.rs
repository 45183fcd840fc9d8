//! The consistency models the checker verifies, and which anomalies each proscribes.

use crate::anomaly::AnomalyKind;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// An isolation level a protocol promises (DESIGN §1.3, §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// Serializable, and the serial order respects real time.
    StrictSerializable,
    /// Some serial order explains every read (no ww/wr/rw cycle).
    Serializable,
    /// Reads from a snapshot, first committer wins: write skew (G2 with adjacent rw edges)
    /// is allowed, G-single and G-nonadjacent are not.
    SnapshotIsolation,
    /// Serializable, and the serial order respects real time between transactions that
    /// touch a common key (Aurogon's and DAST's strong partition serializability).
    StrongPartitionSerializable,
    /// Strict serializability over the declared out-of-band dependencies (DAST §4.5):
    /// strong partition serializability, plus the real-time order along every declared
    /// dependency ([`Entry::after`](crate::Entry::after)).
    DeclaredStrictSerializable,
}

/// Which real-time edges a model adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RealTime {
    /// Between every pair of committed transactions.
    Global,
    /// Between committed transactions that touch a common key.
    PerKey,
    /// As `PerKey`, plus from each committed transaction to every transaction that declares
    /// it as an out-of-band dependency.
    PerKeyAndDeclared,
}

impl Model {
    /// Every model, strongest first.
    pub const ALL: [Model; 5] = [
        Model::StrictSerializable,
        Model::DeclaredStrictSerializable,
        Model::StrongPartitionSerializable,
        Model::Serializable,
        Model::SnapshotIsolation,
    ];

    /// The model's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Model::StrictSerializable => "strict-serializable",
            Model::Serializable => "serializable",
            Model::SnapshotIsolation => "snapshot-isolation",
            Model::StrongPartitionSerializable => "strong-partition-serializable",
            Model::DeclaredStrictSerializable => "declared-strict-serializable",
        }
    }

    pub(crate) fn real_time(self) -> Option<RealTime> {
        match self {
            Model::StrictSerializable => Some(RealTime::Global),
            Model::StrongPartitionSerializable => Some(RealTime::PerKey),
            Model::DeclaredStrictSerializable => Some(RealTime::PerKeyAndDeclared),
            Model::Serializable | Model::SnapshotIsolation => None,
        }
    }

    /// Whether a history showing `kind` violates this model. Every model proscribes the
    /// non-cycle anomalies (aborted and intermediate reads, incompatible orders, garbage,
    /// internal inconsistency, malformed input); they differ on G2 and real time.
    pub fn proscribes(self, kind: AnomalyKind) -> bool {
        match kind {
            AnomalyKind::G2 => self != Model::SnapshotIsolation,
            AnomalyKind::RealTime => self.real_time().is_some(),
            _ => true,
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model name the checker does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown consistency model `{given}` (valid: strict-serializable, declared-strict-serializable, serializable, snapshot-isolation, strong-partition-serializable)")]
pub struct UnknownModel {
    pub given: String,
}

impl FromStr for Model {
    type Err = UnknownModel;

    fn from_str(s: &str) -> Result<Model, UnknownModel> {
        Model::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownModel {
                given: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for m in Model::ALL {
            assert_eq!(m.to_string().parse::<Model>(), Ok(m));
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{m}\""));
        }
        let err = "linearizable".parse::<Model>().unwrap_err().to_string();
        for m in Model::ALL {
            assert!(err.contains(m.name()), "{err}");
        }
        assert!(err.contains("`linearizable`"), "{err}");
    }

    #[test]
    fn only_snapshot_isolation_allows_g2_and_only_real_time_models_real_time() {
        let allows = |m: Model, k| !m.proscribes(k);
        assert!(allows(Model::SnapshotIsolation, AnomalyKind::G2));
        assert!(!allows(Model::SnapshotIsolation, AnomalyKind::GNonadjacent));
        assert!(!allows(Model::Serializable, AnomalyKind::G2));
        assert!(allows(Model::Serializable, AnomalyKind::RealTime));
        assert!(!allows(
            Model::StrongPartitionSerializable,
            AnomalyKind::RealTime
        ));
    }
}
