//! Declared out-of-band dependencies (DAST §4.5), a client option every workload accepts.
//!
//! DAST gives strong partition serializability: two transactions that share no region may
//! be serialized against their real-time order (its Fig. 4), which a client notices only
//! through a channel outside the database — it saw T1 finish and then submits T2. §4.5:
//! "such anomalies can be avoided by letting developers write the out-of-band dependency
//! explicitly in the transaction by adding a cross-region data read". This module is that
//! developer:
//!
//! * `oob_ratio=p` (default 0: off): with probability `p`, a client's next one-shot
//!   transaction declares that it follows the most recently completed committed
//!   transaction of the run (any client's: the driver is the out-of-band channel, and
//!   "most recent" is the tightest real-time order it can observe). The declaration is
//!   written in the history entry's `after` field, which the checker's
//!   `declared-strict-serializable` model orders.
//! * `oob_read=true` (default): the driver makes the dependency real by §4.5's read. When
//!   the transaction already touches a region the dependency touched, nothing is added
//!   (Proposition 2 orders two transactions of a common region); otherwise a read-only
//!   piece is appended: a `get` of the reserved key [`PROBE_KEY`] on the dependency's first
//!   shard, whose region is then common to both. The piece's result is not reported in the
//!   history (the workload's own ops are), and the transaction is relabelled `crt` if the
//!   read made it cross-region. Regions are the shards' initial leaders' ([`Locality`]).
//! * `oob_read=false` is **test-only** and deliberately broken: the dependency is declared
//!   but no read added, so nothing makes the protocol honour it (the conformance suite
//!   shows the checker catching DAST then).
//!
//! Interactive plans never declare a dependency (DAST runs stored procedures only).
//!
//! [`Locality`]: crate::Locality

use crate::audit::FinalState;
use crate::{ClientInfo, Planned, TxnPlan, Workload, WorkloadOptions};
use meridian_check::{Entry, HistOp};
use meridian_core::txn::{Key, Outcome, Value};
use meridian_core::{ClientId, NodeRng};

/// The logical name of the key the dependency read gets (nothing writes it).
pub const PROBE_KEY: &str = "oob-probe";

/// The class label of a transaction that declares an out-of-band dependency.
pub const OUT_OF_BAND: &str = "out-of-band";

/// The client's out-of-band dependency option (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutOfBand {
    /// Probability that a one-shot transaction declares a dependency.
    pub ratio: f64,
    /// Whether the driver adds §4.5's read (false: the test-only broken variant).
    pub read: bool,
}

impl OutOfBand {
    /// Takes `oob_ratio` and `oob_read` out of `options` (the workload itself never sees
    /// them). `None` when the ratio is 0. Bad values are errors naming the option.
    pub fn take(options: &mut WorkloadOptions) -> Result<Option<OutOfBand>, String> {
        let ratio = match options.options.remove("oob_ratio") {
            None => 0.0,
            Some(v) => match v.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => p,
                _ => {
                    return Err(format!(
                        "option `oob_ratio={v}`: expected a probability in [0, 1]"
                    ))
                }
            },
        };
        let read = match options.options.remove("oob_read").as_deref() {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => return Err(format!("option `oob_read={v}`: expected true or false")),
        };
        Ok((ratio > 0.0).then_some(OutOfBand { ratio, read }))
    }
}

/// A workload whose clients declare out-of-band dependencies: the inner workload, plus
/// [`Workload::out_of_band`] for the driver.
pub(crate) struct Declaring {
    pub inner: Box<dyn Workload>,
    pub out_of_band: OutOfBand,
}

impl Workload for Declaring {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn next(&mut self, client: &ClientInfo, rng: &mut NodeRng) -> Planned {
        self.inner.next(client, rng)
    }
    fn history_ops(
        &self,
        plan: &TxnPlan,
        outcome: &Outcome,
        reads: &[Option<Value>],
    ) -> Vec<HistOp> {
        self.inner.history_ops(plan, outcome, reads)
    }
    fn think_ns(&mut self, client: ClientId, now_ns: u64) -> u64 {
        self.inner.think_ns(client, now_ns)
    }
    fn history_checkable(&self) -> bool {
        self.inner.history_checkable()
    }
    fn check_history(&self, history: &[Entry]) -> Result<(), String> {
        self.inner.check_history(history)
    }
    fn audit_keys(&self) -> Vec<Key> {
        self.inner.audit_keys()
    }
    fn check_final(&self, state: &FinalState, history: &[Entry]) -> Result<(), String> {
        self.inner.check_final(state, history)
    }
    fn out_of_band(&self) -> Option<OutOfBand> {
        Some(self.out_of_band)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_are_taken_out_and_checked() {
        let mut o = WorkloadOptions::default()
            .with("oob_ratio", "0.25")
            .with("oob_read", "false")
            .with("keys", "8");
        let oob = OutOfBand::take(&mut o).unwrap();
        assert_eq!(
            oob,
            Some(OutOfBand {
                ratio: 0.25,
                read: false
            })
        );
        assert_eq!(o.options.len(), 1, "the workload's own options stay");
        let mut off = WorkloadOptions::default();
        assert_eq!(OutOfBand::take(&mut off).unwrap(), None);
        for (k, v) in [
            ("oob_ratio", "2"),
            ("oob_ratio", "x"),
            ("oob_read", "maybe"),
        ] {
            let e = OutOfBand::take(&mut WorkloadOptions::default().with(k, v)).unwrap_err();
            assert!(e.contains(k) && e.contains(v), "{e}");
        }
    }
}
