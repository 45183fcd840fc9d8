//! `meridian client get|put|txn`: one transaction against a running cluster.
//!
//! Exit codes: 0 committed, 1 aborted, 2 bad input, 3 outcome unknown (timeout or lost
//! coordinator: it may have committed), 4 cluster unreachable or this client's certificate
//! refused (nothing ran).

use crate::bad_input;
use crate::runtime::{tokio_runtime, TlsArgs};
use clap::{Args, Subcommand};
use meridian_client::{Client, ClientError, ClientOptions, Committed, Endpoint};
use meridian_core::time::parse_duration_ns;
use meridian_core::txn::{Op, Operand, Piece, PieceBody, Txn};
use meridian_core::value::{decode_int, encode_int};
use meridian_core::SmallBytes;
use meridian_core::{Cluster, Topology};
use meridian_server::Addresses;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The topology the cluster was started with (bundled name or TOML path).
    #[arg(long, default_value = "gcp-tiga")]
    topology: String,
    /// The coordinator to ask first (`coord0`, …); the others are tried if it is down.
    #[arg(long, default_value = "coord0")]
    coordinator: String,
    /// How long to wait for the answer.
    #[arg(long, default_value = "5s")]
    timeout: String,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(subcommand)]
    command: ClientCommand,
}

#[derive(Subcommand, Debug)]
enum ClientCommand {
    /// Read a key.
    Get { key: String },
    /// Write a key (the value is stored as UTF-8 bytes).
    Put { key: String, value: String },
    /// A one-shot transaction: `get K; put K V; add K N; append K V` separated by `;`.
    Txn { ops: String },
}

pub fn main(args: ClientArgs) -> ExitCode {
    let plan = match plan(&args) {
        Ok(p) => p,
        Err(e) => return bad_input(e),
    };
    let (txn, ops, coordinators, timeout) = plan;
    let security = match args.tls.security(meridian_server::pki::DEFAULT_CLIENT) {
        Ok(s) => s,
        Err(e) => return bad_input(e),
    };
    let options = ClientOptions {
        timeout,
        ..ClientOptions::new(security)
    };
    let result = tokio_runtime().block_on(async move {
        let client = Client::connect(coordinators, options).await?;
        client.execute(txn).await
    });
    match result {
        Ok(committed) => {
            print_committed(&ops, &committed);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match e {
                ClientError::Aborted(_) => 1,
                ClientError::Timeout { .. } | ClientError::Unknown { .. } => 3,
                ClientError::Unreachable { .. } | ClientError::Refused { .. } => 4,
                ClientError::Protocol(_) => 3,
            })
        }
    }
}

/// An op with its key as typed and where its output lands (piece, position in piece).
struct Labeled {
    key: String,
    op: Op,
    piece: usize,
    position: usize,
}

type Plan = (Txn, Vec<Labeled>, Vec<Endpoint>, Duration);

fn plan(args: &ClientArgs) -> Result<Plan, String> {
    let topology = Topology::load(&args.topology).map_err(|e| e.to_string())?;
    // Coordinator addresses depend only on the layout of replicas and coordinators, which
    // protocol services (placed after them) do not change.
    let cluster = Cluster::without_services(&topology).map_err(|e| e.to_string())?;
    let addresses = Addresses::from_topology(&cluster)?;
    // Only a coordinator takes client requests: any other node (a replica, a service)
    // would refuse the transaction, which would read as an abort, not as the typo it is.
    let first = cluster
        .node_by_name(&args.coordinator)
        .filter(|node| cluster.coordinators.contains(node))
        .ok_or_else(|| {
            format!(
                "--coordinator: `{}` is not a coordinator (coordinators: coord0..coord{})",
                args.coordinator,
                cluster.coordinators.len().saturating_sub(1)
            )
        })?;
    let endpoint = |c: meridian_core::NodeId| {
        Endpoint::new(addresses.peer[c.index()], cluster.node(c).name.clone())
    };
    let mut coordinators = vec![endpoint(first)];
    coordinators.extend(
        cluster
            .coordinators
            .iter()
            .filter(|c| **c != first)
            .map(|c| endpoint(*c)),
    );
    let timeout_ns = parse_duration_ns(&args.timeout).map_err(|e| format!("--timeout: {e}"))?;
    let ops = match &args.command {
        ClientCommand::Get { key } => vec![(key.clone(), Op::Get(bytes(key)))],
        ClientCommand::Put { key, value } => {
            vec![(key.clone(), Op::Put(bytes(key), literal(value)))]
        }
        ClientCommand::Txn { ops } => parse_ops(ops)?,
    };
    let mut pieces: Vec<Piece> = Vec::new();
    let mut labeled = Vec::new();
    for (key, op) in ops {
        let shard = cluster.partitioner.shard_of(op.key());
        let piece = match pieces.iter().position(|p| p.shard == shard) {
            Some(i) => i,
            None => {
                pieces.push(Piece::ops(shard, Vec::new()));
                pieces.len() - 1
            }
        };
        let PieceBody::Ops(list) = &mut pieces[piece].body else {
            unreachable!("client pieces are op lists")
        };
        list.push(op.clone());
        labeled.push(Labeled {
            key,
            op,
            piece,
            position: list.len() - 1,
        });
    }
    let ops = labeled;
    Ok((
        Txn { pieces },
        ops,
        coordinators,
        Duration::from_nanos(timeout_ns),
    ))
}

fn bytes(text: &str) -> SmallBytes {
    SmallBytes::copy_from_slice(text.as_bytes())
}

fn literal(text: &str) -> Operand {
    Operand::Literal(bytes(text))
}

/// Parses `get K; put K V; add K N; append K V`.
fn parse_ops(text: &str) -> Result<Vec<(String, Op)>, String> {
    let mut ops = Vec::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let words: Vec<&str> = part.split_whitespace().collect();
        let op = match words.as_slice() {
            ["get", k] => Op::Get(bytes(k)),
            ["put", k, v] => Op::Put(bytes(k), literal(v)),
            ["append", k, v] => Op::Append(bytes(k), literal(v)),
            ["add", k, n] => {
                let n: i64 = n
                    .parse()
                    .map_err(|_| format!("`{part}`: `{n}` is not an integer"))?;
                Op::Add(bytes(k), Operand::Literal(encode_int(n)))
            }
            _ => {
                return Err(format!(
                    "`{part}` is not one of `get K`, `put K V`, `add K N`, `append K V`"
                ))
            }
        };
        ops.push((words[1].to_string(), op));
    }
    if ops.is_empty() {
        return Err("the transaction has no operations".into());
    }
    Ok(ops)
}

/// Prints each op's output in the order given.
fn print_committed(ops: &[Labeled], committed: &Committed) {
    outln!(
        "committed ({:?}{})",
        committed.path,
        committed
            .commit_ts
            .map(|t| format!(", ts {}", t.time_ns))
            .unwrap_or_default()
    );
    for labeled in ops {
        let output = committed
            .results
            .get(labeled.piece)
            .and_then(|r| r.outputs.get(labeled.position))
            .cloned()
            .flatten();
        let key = &labeled.key;
        match labeled.op {
            Op::Get(_) | Op::Check(..) => outln!("{key} = {}", show(&output)),
            Op::Add(..) => outln!(
                "{key} = {}",
                output
                    .as_ref()
                    .and_then(|v| decode_int(v))
                    .map_or("?".to_string(), |n| n.to_string())
            ),
            Op::Put(..) | Op::Append(..) => outln!("{key} written"),
        }
    }
}

fn show(value: &Option<SmallBytes>) -> String {
    match value {
        None => "(none)".to_string(),
        Some(v) => match std::str::from_utf8(v) {
            Ok(text) if !text.chars().any(char::is_control) => format!("{text:?}"),
            _ => decode_int(v).map_or_else(|| format!("0x{}", hex(v)), |n| n.to_string()),
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
