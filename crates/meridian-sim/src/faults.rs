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
//!
//! `NODE` is a node name (`shard0/replica1`, `coord3`, …); `T` a duration (`5s`, `750ms`).
//! `random` draws a seeded mix of every kind over the run (see [`FaultPlan::random`]).
//! At the end of the run the simulator heals everything and restarts crashed nodes before the
//! drain, so in-flight transactions can finish.

use meridian_core::time::{parse_duration_ns, NS_PER_MS, NS_PER_S};
use meridian_core::topology::NodeRole;
use meridian_core::{Cluster, NodeId};
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
        for item in spec.split(',').map(str::trim) {
            faults.push(parse_item(item, cluster).map_err(|e| format!("fault `{item}`: {e}"))?);
        }
        faults.sort_by_key(|(at, _)| *at);
        Ok(FaultPlan { faults })
    }

    /// A seeded random mix over `[0, duration_ns)`: crash/restart of one node at a time
    /// (down 0.5–4 s; a third of the crashes hit a shard's initial leader, a third another
    /// random replica, a third any node — leaders exercise the most recovery code, and
    /// a uniform pick would rarely reach them), partitions isolating a node
    /// or a region (healed after 0.5–4 s), windows of 0.5–2% loss and of duplication, and clock
    /// steps of ±1–50 ms. Faults start after 1 s so every protocol gets to boot.
    ///
    /// A restarted replica counts as failed until it has rejoined (a diskless Tiga server
    /// needs a state transfer from a NORMAL leader), so another replica of the same shard
    /// crashes no sooner than [`REJOIN_ALLOWANCE_NS`] after a restart: two overlapping
    /// failures in a 3-replica shard exceed f = 1, which no protocol here tolerates.
    pub fn random(
        cluster: &Cluster,
        duration_ns: u64,
        rng: &mut ChaCha8Rng,
        kinds: FaultKinds,
    ) -> FaultPlan {
        let mut faults = Vec::new();
        let nodes: Vec<NodeId> = cluster
            .nodes
            .iter()
            .filter(|n| !matches!(n.role, NodeRole::Service { .. }))
            .map(|n| n.id)
            .collect();
        let mut menu = Vec::new();
        for (enabled, kind) in [
            (kinds.crashes, 0),
            (kinds.partitions, 1),
            (kinds.loss, 2),
            (kinds.duplication, 3),
            (kinds.clock_steps, 4),
        ] {
            if enabled {
                menu.push(kind);
            }
        }
        let mut t = NS_PER_S;
        // When a replica of each shard last restarted.
        let mut restarted: Vec<Option<u64>> = vec![None; cluster.shard_count() as usize];
        while !menu.is_empty() && t < duration_ns {
            let length = rng.gen_range(NS_PER_S / 2..=4 * NS_PER_S);
            let mut end = (t + length).min(duration_ns);
            match *menu.choose(rng).expect("non-empty") {
                0 => {
                    let node = crash_target(cluster, &nodes, rng);
                    let shard = cluster.shard_of_node(node);
                    if let Some(at) = shard.and_then(|s| restarted[s.index()]) {
                        if t < at + REJOIN_ALLOWANCE_NS {
                            t = at + REJOIN_ALLOWANCE_NS;
                            if t >= duration_ns {
                                break;
                            }
                            end = (t + length).min(duration_ns);
                        }
                    }
                    faults.push((t, Fault::Crash(node)));
                    faults.push((end, Fault::Restart(node)));
                    if let Some(s) = shard {
                        restarted[s.index()] = Some(end);
                    }
                }
                1 => {
                    let side = isolation_side(cluster, &nodes, rng);
                    let rest = nodes
                        .iter()
                        .copied()
                        .filter(|n| !side.contains(n))
                        .collect();
                    faults.push((t, Fault::Partition { a: side, b: rest }));
                    faults.push((end, Fault::Heal));
                }
                2 => {
                    faults.push((t, Fault::Loss(rng.gen_range(0.005..=0.02))));
                    faults.push((end, Fault::Loss(0.0)));
                }
                3 => {
                    faults.push((t, Fault::Duplicate(rng.gen_range(0.005..=0.05))));
                    faults.push((end, Fault::Duplicate(0.0)));
                }
                _ => {
                    let node = *nodes.choose(rng).expect("nodes");
                    let step_ms =
                        rng.gen_range(1.0..=50.0) * if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
                    faults.push((t, Fault::ClockStep { node, step_ms }));
                }
            }
            t = end + rng.gen_range(0..=2 * NS_PER_S);
        }
        faults.sort_by_key(|(at, _)| *at);
        FaultPlan { faults }
    }

    /// The plan `--faults random` runs for a run seeded `seed`: every kind of fault, from
    /// a stream of its own (so `meridian sim --seed S --faults random` and a test that
    /// names seed S replay the same faults).
    pub fn random_for_seed(cluster: &Cluster, duration_ns: u64, seed: u64) -> FaultPlan {
        let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed ^ 0xFA017);
        FaultPlan::random(cluster, duration_ns, &mut rng, FaultKinds::ALL)
    }
}

/// How long a restarted replica is given to rejoin before another replica of its shard may
/// crash (see [`FaultPlan::random`]): a failure timeout, a view change and a state transfer
/// across the WAN fit well within it.
pub const REJOIN_ALLOWANCE_NS: u64 = 3 * NS_PER_S;

fn crash_target(cluster: &Cluster, nodes: &[NodeId], rng: &mut ChaCha8Rng) -> NodeId {
    let shards = cluster.shard_count();
    let shard = meridian_core::ShardId(rng.gen_range(0..shards.max(1)));
    match rng.gen_range(0..3) {
        0 if shards > 0 => cluster.initial_leader(shard),
        1 if shards > 0 => *cluster.replicas(shard).choose(rng).expect("replicas"),
        _ => *nodes.choose(rng).expect("nodes"),
    }
}

fn isolation_side(cluster: &Cluster, nodes: &[NodeId], rng: &mut ChaCha8Rng) -> Vec<NodeId> {
    if cluster.topology.regions.len() > 1 && rng.gen_bool(0.5) {
        let region = cluster.region_of(*nodes.choose(rng).expect("nodes"));
        nodes
            .iter()
            .copied()
            .filter(|n| cluster.region_of(*n) == region)
            .collect()
    } else {
        vec![*nodes.choose(rng).expect("nodes")]
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
        other => return Err(format!("unknown fault kind `{other}` (crash, restart, partition, isolate, heal, loss, dup, clock-step)")),
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

    /// A restarted replica gets time to rejoin: no other replica of its shard crashes
    /// within the allowance (a crash then would put two of a shard's three replicas out).
    #[test]
    fn random_plans_leave_a_restarted_replica_time_to_rejoin() {
        let c = cluster();
        let mut shifted_any = false;
        for seed in 0..300 {
            let p = FaultPlan::random(
                &c,
                60 * NS_PER_S,
                &mut ChaCha8Rng::seed_from_u64(seed),
                FaultKinds::ALL,
            );
            let mut restarted: Vec<Option<u64>> = vec![None; c.shard_count() as usize];
            for &(at, ref fault) in &p.faults {
                match fault {
                    Fault::Crash(n) => {
                        if let Some(s) = c.shard_of_node(*n) {
                            if let Some(r) = restarted[s.index()] {
                                assert!(at >= r + REJOIN_ALLOWANCE_NS, "seed {seed}: {n} at {at}");
                                shifted_any |= at == r + REJOIN_ALLOWANCE_NS;
                            }
                        }
                    }
                    Fault::Restart(n) => {
                        if let Some(s) = c.shard_of_node(*n) {
                            restarted[s.index()] = Some(at);
                        }
                    }
                    _ => {}
                }
            }
        }
        assert!(shifted_any, "some plan needed the allowance");
    }

    #[test]
    fn random_plans_are_seeded_and_pair_crashes_with_restarts() {
        let c = cluster();
        let plan = |seed| {
            FaultPlan::random(
                &c,
                60 * NS_PER_S,
                &mut ChaCha8Rng::seed_from_u64(seed),
                FaultKinds::ALL,
            )
        };
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
