//! Fault schedules (the nemesis; DESIGN §8).
//!
//! `--faults` takes `none`, `random`, or a comma-separated list of timed faults:
//!
//! | item | meaning |
//! |---|---|
//! | `crash:NODE@T` | the node loses its memory and stops (its durable records survive) |
//! | `restart:NODE@T` | the node is rebuilt from its durable records and starts |
//! | `partition:A\|B@T` | links between side A and side B are cut both ways; a side is `+`-joined region or node names |
//! | `isolate:X@T` | cut X (a region or a node) from everyone else |
//! | `heal@T` | every partition is healed |
//! | `loss:P@T` | from T on, each message is lost with probability P |
//! | `dup:P@T` | from T on, each message is delivered twice with probability P |
//! | `clock-step:NODE:MS@T` | the node's clock jumps by MS milliseconds (may be negative) |
//! | `storage` | storage faults for the whole run (no time): see below |
//!
//! `NODE` is a node name (`shard0/replica1`, `coord3`, …); `T` a duration (`5s`, `750ms`).
//! `random` draws a seeded mix of every kind over the run, overlapping, inside the
//! protocol's [`FaultModel`] (see [`FaultPlan::random`]). A crash takes the named node's
//! whole machine down (every role it hosts).
//!
//! **Root-clock failover.** With a clock kind that follows a root (`2lclock`, `farmv2`;
//! see [`crate::clock`]), crashing the root clock's machine — machine 0 (the first node's)
//! until a failover moves the root — makes the next live machine the root and every other
//! clock switch to it through Aurogon §5.3's virtual and smoothing phases (counted as
//! `clock root failover`). `random` picks it like any crash target (a third of its picks
//! are shard leaders, and shard 0's initial leader sits on machine 0).
//! At the end of the run the simulator heals everything and restarts crashed nodes before the
//! drain, so in-flight transactions can finish.
//!
//! **Storage faults** (`storage`; `random` turns them on whenever it draws crashes). The
//! simulated disk then keeps a node's records only as the runtime promises to: a record
//! is *synced* once a message or response of its node has left after it (the host puts an
//! `Action::Sync` before each; the runtime syncs there or, with group commit, holds the
//! message until its batch's sync). At a crash the records written since the node's last
//! sync — a checkpoint among them included, which then does not replace the older
//! records — survive as a prefix of seeded random length (from the storage stream of the
//! run's seed): the rest are lost, and a torn last record is one of them (the runtime's
//! log drops a torn tail by its checksum). The runtime also syncs at the end of each
//! batch, which the simulator does not count on: the model is the weakest disk the
//! runtime allows, so a protocol that relies on a record no message followed is caught.

use meridian_core::time::{parse_duration_ns, NS_PER_MS, NS_PER_S};
use meridian_core::{Cluster, FaultModel, MachineId, NodeId};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::fmt;

/// One fault.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    Crash(NodeId),
    Restart(NodeId),
    /// Cut every link between a node of `a` and a node of `b`, both ways.
    Partition {
        a: Vec<NodeId>,
        b: Vec<NodeId>,
    },
    Heal,
    Loss(f64),
    Duplicate(f64),
    ClockStep {
        node: NodeId,
        step_ms: f64,
    },
}

/// Faults at virtual times, sorted by time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    pub faults: Vec<(u64, Fault)>,
    /// Storage faults (see the module doc): a crash may lose unsynced records.
    pub storage: bool,
}

/// Which fault kinds `random` may draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultKinds {
    pub crashes: bool,
    pub partitions: bool,
    pub loss: bool,
    pub duplication: bool,
    pub clock_steps: bool,
}

impl FaultKinds {
    pub const ALL: FaultKinds = FaultKinds {
        crashes: true,
        partitions: true,
        loss: true,
        duplication: true,
        clock_steps: true,
    };
}

impl FaultPlan {
    /// Parses a `--faults` value other than `random` (which needs a seed: see [`FaultPlan::random`]).
    pub fn parse(spec: &str, cluster: &Cluster) -> Result<FaultPlan, String> {
        let spec = spec.trim();
        if spec.is_empty() || spec == "none" {
            return Ok(FaultPlan::default());
        }
        let mut faults = Vec::new();
        let mut storage = false;
        for item in spec.split(',').map(str::trim) {
            if item == "storage" {
                storage = true;
                continue;
            }
            faults.push(parse_item(item, cluster).map_err(|e| format!("fault `{item}`: {e}"))?);
        }
        faults.sort_by_key(|(at, _)| *at);
        Ok(FaultPlan { faults, storage })
    }

    /// A seeded random mix over `[0, duration_ns)`, drawn inside the protocol's fault
    /// `model`. Each kind runs on a lane of its own, so faults overlap: a crash during a
    /// partition, under loss, a clock step during a view change.
    ///
    /// - **Crashes** start every 1–5 s (without waiting for the last restart) and keep a
    ///   machine down 0.5–4 s; all its roles go down together. A third hit a shard's initial
    ///   leader, a third another replica, a third any crashable machine (coordinators and
    ///   services included): leaders exercise the most recovery code, and a uniform pick
    ///   would rarely reach them. A pick the model refuses falls back to a uniform pick
    ///   among those it admits, or to no crash.
    /// - **Partitions** isolate a region or one machine, healed after 0.5–4 s.
    /// - **Loss** (0.5–2 %) and **duplication** (0.5–5 %) come in windows of 0.5–4 s.
    /// - Each windowed lane rests 1–8 s between windows, so a run sees every mix — one
    ///   fault alone, two or more at once, and calm — rather than a wall of faults.
    /// - **Clock steps** of ±1–50 ms hit one machine every 0.5–6 s.
    ///
    /// A restarted machine counts as down until [`REJOIN_ALLOWANCE_NS`] after its restart (a
    /// diskless Tiga server needs a state transfer from a NORMAL leader before it is a
    /// replica again). Faults start after 1 s so every protocol gets to boot.
    pub fn random(
        cluster: &Cluster,
        model: &FaultModel,
        duration_ns: u64,
        rng: &mut ChaCha8Rng,
        kinds: FaultKinds,
    ) -> FaultPlan {
        let mut faults = Vec::new();
        if kinds.crashes {
            crash_lane(cluster, model, duration_ns, rng, &mut faults);
        }
        if kinds.partitions {
            for (start, end) in windows(duration_ns, rng) {
                let side = isolation_side(cluster, rng);
                let rest = all_nodes(cluster).filter(|n| !side.contains(n)).collect();
                faults.push((start, Fault::Partition { a: side, b: rest }));
                faults.push((end, Fault::Heal));
            }
        }
        if kinds.loss {
            for (start, end) in windows(duration_ns, rng) {
                faults.push((start, Fault::Loss(rng.gen_range(0.005..=0.02))));
                faults.push((end, Fault::Loss(0.0)));
            }
        }
        if kinds.duplication {
            for (start, end) in windows(duration_ns, rng) {
                faults.push((start, Fault::Duplicate(rng.gen_range(0.005..=0.05))));
                faults.push((end, Fault::Duplicate(0.0)));
            }
        }
        if kinds.clock_steps {
            let mut t = NS_PER_S;
            while t < duration_ns {
                let machine = cluster.machines.choose(rng).expect("machines");
                let step_ms =
                    rng.gen_range(1.0..=50.0) * if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
                faults.push((
                    t,
                    Fault::ClockStep {
                        node: machine.nodes[0],
                        step_ms,
                    },
                ));
                t += rng.gen_range(NS_PER_S / 2..=6 * NS_PER_S);
            }
        }
        // Stable: at one instant, the lanes' faults keep lane order (crashes first).
        faults.sort_by_key(|(at, _)| *at);
        FaultPlan {
            faults,
            storage: kinds.crashes,
        }
    }

    /// The plan `--faults random` runs for a run seeded `seed`: every kind of fault, from
    /// a stream of its own (so `meridian sim --seed S --faults random` and a test that
    /// names seed S replay the same faults).
    pub fn random_for_seed(
        cluster: &Cluster,
        model: &FaultModel,
        duration_ns: u64,
        seed: u64,
    ) -> FaultPlan {
        let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed ^ 0xFA017);
        FaultPlan::random(cluster, model, duration_ns, &mut rng, FaultKinds::ALL)
    }
}

/// How long a restarted machine is given to rejoin before it stops counting as down (see
/// [`FaultPlan::random`]): a failure timeout, a view change and a state transfer across
/// the WAN fit well within it.
pub const REJOIN_ALLOWANCE_NS: u64 = 3 * NS_PER_S;

/// Windows of 0.5–4 s with gaps of 1–8 s, from 1–3 s to the end of the run.
fn windows(duration_ns: u64, rng: &mut ChaCha8Rng) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut t = NS_PER_S + rng.gen_range(0..=2 * NS_PER_S);
    while t < duration_ns {
        let end = (t + rng.gen_range(NS_PER_S / 2..=4 * NS_PER_S)).min(duration_ns);
        out.push((t, end));
        t = end + rng.gen_range(NS_PER_S..=8 * NS_PER_S);
    }
    out
}

/// Crashes and restarts of machines, overlapping each other inside the model's bounds.
fn crash_lane(
    cluster: &Cluster,
    model: &FaultModel,
    duration_ns: u64,
    rng: &mut ChaCha8Rng,
    faults: &mut Vec<(u64, Fault)>,
) {
    // (machine, down until: restart + rejoin allowance)
    let mut down: Vec<(MachineId, u64)> = Vec::new();
    let mut t = NS_PER_S;
    while t < duration_ns {
        down.retain(|(_, until)| *until > t);
        let busy: Vec<MachineId> = down.iter().map(|(m, _)| *m).collect();
        let length = rng.gen_range(NS_PER_S / 2..=4 * NS_PER_S);
        if let Some(machine) = crash_target(cluster, model, &busy, rng) {
            let end = (t + length).min(duration_ns);
            let node = cluster.machines[machine.index()].nodes[0];
            faults.push((t, Fault::Crash(node)));
            faults.push((end, Fault::Restart(node)));
            down.push((machine, end + REJOIN_ALLOWANCE_NS));
        }
        t += rng.gen_range(NS_PER_S..=5 * NS_PER_S);
    }
}

fn crash_target(
    cluster: &Cluster,
    model: &FaultModel,
    down: &[MachineId],
    rng: &mut ChaCha8Rng,
) -> Option<MachineId> {
    let shards = cluster.shard_count();
    let shard = meridian_core::ShardId(rng.gen_range(0..shards.max(1)));
    let preferred = match rng.gen_range(0..3) {
        0 if shards > 0 => Some(cluster.machine_of(cluster.initial_leader(shard))),
        1 if shards > 0 => {
            let replica = *cluster.replicas(shard).choose(rng).expect("replicas");
            Some(cluster.machine_of(replica))
        }
        _ => model.crashable.choose(rng).copied(),
    };
    let admitted = |m: &MachineId| !down.contains(m) && model.admits_crash(*m, down);
    match preferred {
        Some(m) if admitted(&m) => Some(m),
        _ => {
            let candidates: Vec<MachineId> =
                model.crashable.iter().copied().filter(admitted).collect();
            candidates.choose(rng).copied()
        }
    }
}

fn all_nodes(cluster: &Cluster) -> impl Iterator<Item = NodeId> + '_ {
    cluster.nodes.iter().map(|n| n.id)
}

/// A region (half the time, when there are several) or one machine with all its roles.
fn isolation_side(cluster: &Cluster, rng: &mut ChaCha8Rng) -> Vec<NodeId> {
    let machine = cluster.machines.choose(rng).expect("machines");
    if cluster.topology.regions.len() > 1 && rng.gen_bool(0.5) {
        all_nodes(cluster)
            .filter(|n| cluster.region_of(*n) == machine.region)
            .collect()
    } else {
        machine.nodes.clone()
    }
}

fn parse_item(item: &str, cluster: &Cluster) -> Result<(u64, Fault), String> {
    let (what, at) = item.rsplit_once('@').ok_or("missing `@TIME`")?;
    let at_ns = parse_duration_ns(at)?;
    let (kind, arg) = what.split_once(':').unwrap_or((what, ""));
    let fault = match kind {
        "crash" => Fault::Crash(node(cluster, arg)?),
        "restart" => Fault::Restart(node(cluster, arg)?),
        "partition" => {
            let (a, b) = arg.split_once('|').ok_or("expected `partition:A|B`")?;
            Fault::Partition { a: side(cluster, a)?, b: side(cluster, b)? }
        }
        "isolate" => {
            let a = side(cluster, arg)?;
            let b = cluster.nodes.iter().map(|n| n.id).filter(|n| !a.contains(n)).collect();
            Fault::Partition { a, b }
        }
        "heal" => Fault::Heal,
        "loss" => Fault::Loss(probability(arg)?),
        "dup" => Fault::Duplicate(probability(arg)?),
        "clock-step" => {
            let (name, ms) = arg.rsplit_once(':').ok_or("expected `clock-step:NODE:MS`")?;
            let step_ms: f64 = ms.parse().map_err(|_| format!("`{ms}` is not a number of milliseconds"))?;
            if !step_ms.is_finite() {
                return Err("the step must be finite".into());
            }
            Fault::ClockStep { node: node(cluster, name)?, step_ms }
        }
        other => return Err(format!("unknown fault kind `{other}` (crash, restart, partition, isolate, heal, loss, dup, clock-step, storage)")),
    };
    Ok((at_ns, fault))
}

fn node(cluster: &Cluster, name: &str) -> Result<NodeId, String> {
    cluster
        .node_by_name(name)
        .ok_or_else(|| format!("unknown node `{name}` (names look like shard0/replica1, coord3)"))
}

fn side(cluster: &Cluster, text: &str) -> Result<Vec<NodeId>, String> {
    let mut nodes = Vec::new();
    for name in text.split('+').map(str::trim) {
        match cluster.topology.region_id(name) {
            Some(region) => nodes.extend(
                cluster
                    .nodes
                    .iter()
                    .filter(|n| n.region == region)
                    .map(|n| n.id),
            ),
            None => nodes.push(node(cluster, name)?),
        }
    }
    Ok(nodes)
}

fn probability(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("`{text}` is not a probability in [0, 1]")),
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash(n) => write!(f, "crash {n}"),
            Fault::Restart(n) => write!(f, "restart {n}"),
            Fault::Partition { a, b } => {
                write!(f, "partition {} nodes | {} nodes", a.len(), b.len())
            }
            Fault::Heal => write!(f, "heal"),
            Fault::Loss(p) => write!(f, "loss {p}"),
            Fault::Duplicate(p) => write!(f, "duplicate {p}"),
            Fault::ClockStep { node, step_ms } => write!(f, "clock step {node} {step_ms} ms"),
        }
    }
}

/// Milliseconds to nanoseconds for clock steps.
pub(crate) fn ms_to_ns(ms: f64) -> f64 {
    ms * NS_PER_MS as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::Topology;
    use rand::SeedableRng;

    fn cluster() -> Cluster {
        Cluster::new(Topology::load("gcp-tiga").unwrap(), &[]).unwrap()
    }

    #[test]
    fn lists_parse_into_timed_faults() {
        let c = cluster();
        let plan = FaultPlan::parse("restart:shard0/replica0@8s, crash:shard0/replica0@5s, partition:SC|FI+BR@1s, heal@2s, loss:0.01@0s, dup:0.5@1ms, clock-step:coord0:-40@3s, isolate:HK@4s", &c).unwrap();
        let times: Vec<u64> = plan.faults.iter().map(|f| f.0).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert!(plan
            .faults
            .contains(&(5 * NS_PER_S, Fault::Crash(NodeId(0)))));
        assert!(plan.faults.contains(&(
            3 * NS_PER_S,
            Fault::ClockStep {
                node: c.coordinators[0],
                step_ms: -40.0
            }
        )));
        let Some((_, Fault::Partition { a, b })) = plan.faults.iter().find(|(t, _)| *t == NS_PER_S)
        else {
            panic!()
        };
        assert_eq!(a.len(), 3 + 2);
        assert_eq!(b.len(), 6 + 4);
    }

    #[test]
    fn bad_items_are_named() {
        let c = cluster();
        for bad in [
            "crash:nobody@1s",
            "crash:coord0",
            "loss:2@1s",
            "warp:coord0@1s",
            "clock-step:coord0:x@1s",
            "crash:coord0@soon",
        ] {
            let e = FaultPlan::parse(bad, &c).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    fn plan_for(c: &Cluster, seed: u64) -> FaultPlan {
        let model = FaultModel::minorities(c);
        FaultPlan::random(
            c,
            &model,
            60 * NS_PER_S,
            &mut ChaCha8Rng::seed_from_u64(seed),
            FaultKinds::ALL,
        )
    }

    /// Replays a plan's crashes and checks that no failure group ever has more machines
    /// down (a restarted one counting until its rejoin allowance ends) than the model allows.
    fn assert_inside_model(c: &Cluster, model: &FaultModel, plan: &FaultPlan, seed: u64) {
        let mut down: Vec<(MachineId, u64)> = Vec::new();
        for &(at, ref fault) in &plan.faults {
            down.retain(|(_, until)| *until > at);
            match fault {
                Fault::Crash(n) => {
                    let m = c.machine_of(*n);
                    let busy: Vec<MachineId> = down.iter().map(|d| d.0).collect();
                    assert!(
                        model.admits_crash(m, &busy),
                        "seed {seed}: {m} at {at}, down {busy:?}"
                    );
                    down.push((m, u64::MAX));
                }
                Fault::Restart(n) => {
                    let m = c.machine_of(*n);
                    for d in down.iter_mut().filter(|d| d.0 == m) {
                        d.1 = at + REJOIN_ALLOWANCE_NS;
                    }
                }
                _ => {}
            }
        }
    }

    /// A restarted replica gets time to rejoin, and no shard loses more than its minority.
    #[test]
    fn random_plans_stay_inside_the_fault_model() {
        let c = cluster();
        let model = FaultModel::minorities(&c);
        for seed in 0..300 {
            assert_inside_model(&c, &model, &plan_for(&c, seed), seed);
        }
    }

    /// Faults overlap: some plan crashes a machine while a partition is in force and
    /// while loss is on, and has two machines down at once.
    #[test]
    fn random_faults_overlap() {
        let c = cluster();
        let (mut crash_in_partition, mut crash_under_loss, mut two_down) = (false, false, false);
        for seed in 0..50 {
            let (mut partitioned, mut lossy, mut down) = (false, false, 0usize);
            for (_, fault) in &plan_for(&c, seed).faults {
                match fault {
                    Fault::Partition { .. } => partitioned = true,
                    Fault::Heal => partitioned = false,
                    Fault::Loss(p) => lossy = *p > 0.0,
                    Fault::Crash(_) => {
                        down += 1;
                        crash_in_partition |= partitioned;
                        crash_under_loss |= lossy;
                        two_down |= down >= 2;
                    }
                    Fault::Restart(_) => down -= 1,
                    _ => {}
                }
            }
        }
        assert!(crash_in_partition && crash_under_loss && two_down);
    }

    /// Services are crashed too (a view manager member, here).
    #[test]
    fn random_plans_crash_services() {
        let topology = Topology::load("gcp-tiga").unwrap();
        let sc = topology.region_id("SC").unwrap();
        let c = Cluster::new(topology, &vec![("vm".to_string(), sc); 3]).unwrap();
        let vms = c.services("vm");
        let hit = (0..40).any(|seed| {
            plan_for(&c, seed)
                .faults
                .iter()
                .any(|(_, f)| matches!(f, Fault::Crash(n) if vms.contains(n)))
        });
        assert!(hit, "no plan crashed a view manager");
    }

    #[test]
    fn random_plans_are_seeded_and_pair_crashes_with_restarts() {
        let c = cluster();
        let plan = |seed| plan_for(&c, seed);
        assert_eq!(plan(1), plan(1));
        assert_ne!(plan(1), plan(2));
        let p = plan(3);
        let crashes = p
            .faults
            .iter()
            .filter(|f| matches!(f.1, Fault::Crash(_)))
            .count();
        let restarts = p
            .faults
            .iter()
            .filter(|f| matches!(f.1, Fault::Restart(_)))
            .count();
        assert_eq!(crashes, restarts);
        assert!(p.faults.len() > 10);
    }
}
