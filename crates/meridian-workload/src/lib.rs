//! `meridian-workload`: what clients submit, and how a finished transaction is written into
//! the history the checker reads.
//!
//! A [`Workload`] is a deterministic generator: given a client and the client's seeded RNG it
//! returns the next [`TxnPlan`]. When the transaction ends, the driver (simulator or runtime)
//! asks the workload for the history operations of that transaction ([`Workload::history_ops`])
//! and, at the end of the run, for any workload-specific invariant
//! ([`Workload::check_history`], e.g. the bank's constant total).

use meridian_check::{Entry, HistOp};
use meridian_core::txn::{Key, Outcome, Txn, Value};
use meridian_core::{ClientId, Cluster, NodeRng};

/// One operation of an interactive transaction, as the workload plans it. The client driver
/// turns `Append` into a `Get` followed by a `Put` of the concatenation, so protocols only
/// ever see get and put steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InteractiveOp {
    Get(Key),
    Put(Key, Value),
    Append(Key, Value),
}

/// A transaction as a client submits it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnPlan {
    OneShot(Txn),
    Interactive(Vec<InteractiveOp>),
}

/// A generator of transactions for the clients of one run.
pub trait Workload: Send {
    /// The workload's name (`list-append`, `bank`, `microbench`, ...).
    fn name(&self) -> &str;

    /// The next transaction of `client`, drawn from `rng` (the client's own seeded RNG).
    fn next(&mut self, client: ClientId, rng: &mut NodeRng) -> TxnPlan;

    /// The history operations of a finished transaction. `interactive_reads` holds, for an
    /// interactive plan, the value each `Get` (and each `Append`'s internal get) returned, in
    /// plan order; it is empty for one-shot plans, whose reads are in the outcome. For an
    /// aborted or unknown transaction the reads are `null` and the writes are the intended ones.
    fn history_ops(&self, plan: &TxnPlan, outcome: &Outcome, interactive_reads: &[Option<Value>]) -> Vec<HistOp>;

    /// A workload-specific invariant over the whole history (after the run).
    fn check_history(&self, _history: &[Entry]) -> Result<(), String> {
        Ok(())
    }
}

/// Options every workload understands; unknown ones are refused by name.
#[derive(Clone, Debug, Default)]
pub struct WorkloadOptions {
    pub options: std::collections::BTreeMap<String, String>,
}

/// The workload names `build` knows.
pub const WORKLOADS: [&str; 3] = ["list-append", "bank", "microbench"];

/// Builds the named workload for `cluster`.
pub fn build(name: &str, cluster: &Cluster, options: &WorkloadOptions) -> Result<Box<dyn Workload>, String> {
    let _ = (cluster, options);
    Err(format!("unknown workload `{name}` (known: {})", WORKLOADS.join(", ")))
}
