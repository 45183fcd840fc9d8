//! The protocol registry: one [`Entry`] per protocol, built by [`entry`] from the protocol's
//! type. Every command that runs a protocol looks its name up here and calls the entry's
//! functions, so registering a protocol is one line in [`PROTOCOLS`].

use crate::experiment;
use crate::load;
use crate::runtime::{self, tokio_runtime};
use crate::sim::{self, RunResult};
use meridian_bench::Results;
use meridian_bench::{Point, RunOutput};
use meridian_core::node::Setup;
use meridian_core::{Cluster, Procedures, Protocol, ProtocolConfig, Topology};
use meridian_protocols::aurogon::{Aurogon, DstTo};
use meridian_protocols::clock_si::{ClockSi, ConventionalSi};
use meridian_protocols::dast::Dast;
use meridian_protocols::janus::Janus;
use meridian_protocols::k2::K2;
use meridian_protocols::p2pl_ttc::P2plTtc;
use meridian_protocols::raft_2pc::{OccRaft, TwoPlRaft};
use meridian_protocols::slog::Slog;
use meridian_protocols::tapir::Tapir;
use meridian_protocols::tiga::Tiga;
use meridian_protocols::two_pl::TwoPlTwoPc;
use meridian_server::LoadReport;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Every protocol `--protocol` accepts.
pub static PROTOCOLS: &[Entry] = &[
    entry::<TwoPlTwoPc>(),
    entry::<ClockSi>(),
    entry::<ConventionalSi>(),
    entry::<Tiga>(),
    entry::<K2>(),
    entry::<Dast>(),
    entry::<Aurogon>(),
    entry::<DstTo>(),
    entry::<Tapir>(),
    entry::<Janus>(),
    entry::<TwoPlRaft>(),
    entry::<OccRaft>(),
    entry::<P2plTtc>(),
    entry::<Slog>(),
    entry::<meridian_protocols::pb_2pc::TwoPlPb>(),
    entry::<meridian_protocols::pb_2pc::OccPb>(),
    entry::<meridian_protocols::mvto_hlc::MvtoHlc>(),
];

/// A run of an experiment point, reporting its progress (0..=1).
type PointFn = fn(&Point, &mut dyn FnMut(f64)) -> Result<RunOutput, String>;

/// A load run against the runtime, reporting what finished every tick; the report and the
/// cluster it ran on.
type BenchFn = fn(
    &load::Plan,
    Duration,
    &mut dyn FnMut(Duration, Results),
) -> Result<(LoadReport, Arc<Cluster>), String>;

/// What the CLI does with one protocol: its description, and each command's code
/// monomorphized for it.
pub struct Entry {
    /// `--protocol` name, the checker model it promises, and its option keys.
    pub name: &'static str,
    pub guarantee: &'static str,
    pub options: &'static [&'static str],
    /// Parses the options for a topology (refusing bad ones, by name) and places the
    /// protocol's services: the cluster its nodes form.
    pub cluster: fn(Topology, &ProtocolConfig) -> Result<Arc<Cluster>, String>,
    /// `meridian sim`, and each seed of `meridian sim swarm`.
    pub simulate: fn(&sim::Plan, bool) -> Result<RunResult, String>,
    /// `meridian server`: one node until a signal stops it.
    pub serve: fn(&runtime::ServerArgs) -> Result<(), String>,
    /// `meridian bench` and `meridian demo`: load against the runtime.
    pub bench: BenchFn,
    /// `meridian experiment`: a point on the simulator, and on the in-process runtime.
    pub sim_point: PointFn,
    pub runtime_point: PointFn,
}

/// The registry entry of protocol `P`.
pub const fn entry<P: Protocol>() -> Entry
where
    P::Node: Send,
{
    Entry {
        name: P::NAME,
        guarantee: P::GUARANTEE,
        options: P::OPTIONS,
        cluster: cluster::<P>,
        simulate: sim::simulate::<P>,
        serve: serve::<P>,
        bench: bench::<P>,
        sim_point: experiment::simulate::<P>,
        runtime_point: experiment::on_runtime::<P>,
    }
}

fn cluster<P: Protocol>(topology: Topology, raw: &ProtocolConfig) -> Result<Arc<Cluster>, String> {
    Setup::<P>::new(topology, raw, Procedures::new()).map(|setup| setup.cluster)
}

fn serve<P: Protocol>(args: &runtime::ServerArgs) -> Result<(), String>
where
    P::Node: Send,
{
    tokio_runtime().block_on(runtime::serve::<P>(args))
}

fn bench<P: Protocol>(
    plan: &load::Plan,
    tick: Duration,
    on_tick: &mut dyn FnMut(Duration, Results),
) -> Result<(LoadReport, Arc<Cluster>), String>
where
    P::Node: Send,
{
    let (report, setup) = tokio_runtime().block_on(load::drive::<P>(plan, tick, on_tick))?;
    Ok((report, setup.cluster))
}

/// The entry named `name`; an unknown name is an error listing the registered protocols.
pub fn find(name: &str) -> Result<&'static Entry, String> {
    PROTOCOLS
        .iter()
        .find(|entry| entry.name == name)
        .ok_or_else(|| {
            format!(
                "unknown protocol `{name}`; the protocols are:\n{}",
                listing()
            )
        })
}

/// As [`find`], for a command's `--protocol`: `help` prints the registered protocols and
/// ends the command (exit 0); an unknown name prints them as an error (exit 2).
pub fn select(name: &str) -> Result<&'static Entry, ExitCode> {
    if name == "help" {
        outln!("protocols (`--protocol NAME`, options `--protocol-opts key=value,…`):");
        out!("{}", listing());
        return Err(ExitCode::SUCCESS);
    }
    find(name).map_err(crate::bad_input)
}

/// One line per protocol: name, guarantee, option keys.
pub fn listing() -> String {
    PROTOCOLS
        .iter()
        .map(|e| {
            let options = if e.options.is_empty() {
                "none".to_string()
            } else {
                e.options.join(", ")
            };
            format!("  {:<16} {:<20} options: {options}\n", e.name, e.guarantee)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_its_own_name_and_a_guarantee_the_checker_knows() {
        for (i, entry) in PROTOCOLS.iter().enumerate() {
            assert!(std::ptr::eq(find(entry.name).unwrap(), entry));
            assert!(PROTOCOLS[..i].iter().all(|e| e.name != entry.name));
            let model = entry.guarantee.parse::<meridian_check::Model>();
            assert!(model.is_ok(), "{}: {}", entry.name, entry.guarantee);
        }
        assert!(find("paxos").is_err_and(|e| e.contains("tiga")));
    }
}
