//! `meridian server` (one node as a process) and `meridian cluster up|down|status`
//! (every node of a topology as a process on this machine).

use crate::bad_input;
use crate::protocols;
use clap::{Args, Subcommand};
use meridian_core::node::Setup;
use meridian_core::{Cluster, NodeRole, Protocol, ProtocolConfig, Topology};
use meridian_server::{pki, Addresses, Host, HostConfig, Security};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options every runtime command shares.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// A bundled topology name or a TOML path.
    #[arg(long, default_value = "gcp-tiga")]
    pub topology: String,
    /// Protocol the nodes run (`--protocol help` lists them).
    #[arg(long, default_value = "tiga")]
    pub protocol: String,
    /// Protocol options, `key=value[,key=value…]`.
    #[arg(long, default_value = "")]
    pub protocol_opts: String,
    /// Multiplies the topology's one-way delays (1: real WAN delays; 0: none).
    #[arg(long, default_value_t = 1.0)]
    pub wan_scale: f64,
}

impl ClusterArgs {
    /// The protocol's setup for these arguments, with every workload's stored
    /// procedures registered (TPC-C's, SmallBank's), as in the simulator.
    pub fn setup<P: Protocol>(&self) -> Result<Setup<P>, String> {
        let topology = Topology::load(&self.topology).map_err(|e| e.to_string())?;
        let config = ProtocolConfig::parse(&self.protocol_opts)
            .map_err(|e| format!("--protocol-opts: {e}"))?;
        meridian_sim::setup::<P>(topology, config, meridian_workload::procedures())
    }

    /// The cluster `--protocol` forms for these arguments (its options checked).
    pub fn cluster(&self) -> Result<Arc<Cluster>, String> {
        let protocol = protocols::find(&self.protocol)?;
        let topology = Topology::load(&self.topology).map_err(|e| e.to_string())?;
        let config = ProtocolConfig::parse(&self.protocol_opts)
            .map_err(|e| format!("--protocol-opts: {e}"))?;
        (protocol.cluster)(topology, &config)
    }

    pub fn check(&self) -> Result<(), String> {
        if !(self.wan_scale.is_finite() && self.wan_scale >= 0.0) {
            return Err(format!(
                "--wan-scale: must be a number ≥ 0, got {}",
                self.wan_scale
            ));
        }
        refuse_test_only_options(&self.protocol_opts)
    }
}

/// The runtime runs protocols for real data, so it refuses the options that exist only to
/// show the checker catching a broken protocol (`unsafe_*`), and Tiga's coordination-free
/// mode, whose safety rests on a clock error bound ε that the system clock the runtime
/// reads does not guarantee (the simulator models such a clock; `meridian sim` takes both).
pub fn refuse_test_only_options(protocol_opts: &str) -> Result<(), String> {
    let options = meridian_core::node::parse_key_values(protocol_opts)
        .map_err(|e| format!("--protocol-opts: {e}"))?;
    for (key, value) in &options {
        if key.starts_with("unsafe_") {
            return Err(format!(
                "--protocol-opts: `{key}` is a test-only option that breaks the protocol's \
                 guarantee on purpose; the runtime refuses it (use `meridian sim`)"
            ));
        }
        if key == "coordination" && value == "free" {
            return Err(
                "--protocol-opts: `coordination=free` needs a clock whose error bound ε is \
                 guaranteed; the runtime reads the system clock, which guarantees none \
                 (use `meridian sim`, whose clock models do)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// How a runtime command secures its connections: TLS with the cluster's certificates
/// (`--certs DIR`, or `--ca`, `--cert`, `--key`), or, only when asked by name, plaintext.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Directory of the cluster's certificates, as `cluster up` (RUN_DIR/tls) or
    /// `meridian certs` writes it: `ca.pem`, and this process's `NAME.pem` and
    /// `NAME-key.pem` (a server: its machine's first node, e.g. `shard0-replica0`; a
    /// client: `client`).
    #[arg(long)]
    pub certs: Option<PathBuf>,
    /// The cluster's CA certificate (PEM); with --cert and --key, instead of --certs.
    #[arg(long, requires_all = ["cert", "key"], conflicts_with = "certs")]
    pub ca: Option<PathBuf>,
    /// This process's certificate chain (PEM), signed by the CA.
    #[arg(long, requires_all = ["ca", "key"], conflicts_with = "certs")]
    pub cert: Option<PathBuf>,
    /// This process's private key (PEM).
    #[arg(long, requires_all = ["ca", "cert"], conflicts_with = "certs")]
    pub key: Option<PathBuf>,
    /// No TLS: nothing encrypted, and anyone who reaches a port may speak as any node or
    /// client. Only for a machine whose every user and process is trusted.
    #[arg(long, conflicts_with_all = ["certs", "ca", "cert", "key"])]
    pub insecure_plaintext: bool,
}

impl TlsArgs {
    pub fn given(&self) -> bool {
        self.certs.is_some() || self.ca.is_some() || self.insecure_plaintext
    }

    /// The security these arguments ask for; `stem` picks the certificate in `--certs`.
    pub fn security(&self, stem: &str) -> Result<Security, String> {
        if self.insecure_plaintext {
            return Ok(Security::InsecurePlaintext);
        }
        let credentials = match (&self.certs, &self.ca, &self.cert, &self.key) {
            (Some(dir), ..) => pki::load(dir, stem),
            (None, Some(ca), Some(cert), Some(key)) => {
                meridian_client::tls::Credentials::from_files(ca, cert, key)
            }
            _ => {
                return Err(
                    "TLS: give --certs DIR (`cluster up` writes RUN_DIR/tls) or \
                            --ca, --cert and --key; or --insecure-plaintext to run without \
                            encryption and authentication"
                        .into(),
                )
            }
        };
        credentials
            .map(|c| Security::Tls(Arc::new(c)))
            .map_err(|e| format!("TLS: {e}"))
    }
}

#[derive(Args, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    tls: TlsArgs,
    /// The node to run, by name (`shard0/replica1`, `coord3`, or a service like `vm0`), with
    /// every other role of its machine (topology `[machines]`).
    #[arg(long)]
    node: Option<String>,
    /// Durable logs go under `DIR/<node>/`; without it the node keeps nothing across restarts.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Force records to disk after each event (survives power loss; slow).
    #[arg(long)]
    fsync: bool,
    /// Inbound connections each node holds at once (peers and clients); more are closed
    /// at accept.
    #[arg(long, default_value_t = meridian_server::Limits::default().max_connections)]
    max_connections: usize,
    /// Added to this node's system clock, in ms (skew experiments).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    clock_offset_ms: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    log_level: String,
}

/// Installs the `tracing` subscriber at `level`.
pub fn init_logging(level: &str) -> Result<(), String> {
    let level: tracing::Level = level.parse().map_err(|_| {
        format!("--log-level: `{level}` is not one of error, warn, info, debug, trace")
    })?;
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    Ok(())
}

/// A tokio runtime with two workers (the machine this targets has two cores).
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_park(return_freed_memory)
        .build()
        .expect("tokio runtime")
}

extern "C" {
    /// mimalloc's own collection entry point (the allocator `main.rs` installs).
    fn mi_collect(force: bool);
}

/// mimalloc keeps a block freed by another thread until the thread that allocated it
/// next allocates or collects, so a worker that goes idle after a burst (the read buffers
/// of connections that closed) would keep that memory from the system indefinitely. An
/// idle worker therefore collects its heap, at most once a second.
///
/// The collection is mimalloc's normal one, not a forced one: it takes the blocks other
/// threads freed and frees the pages left empty, and returns to the system only memory
/// that has stayed free past mimalloc's purge delay (1 s). A forced collection also
/// visits every full page and returns *all* free memory at once, so under load, with a
/// heap of a GiB or more, each worker gave back every second what GC had freed
/// milliseconds earlier, and the next allocations faulted it back in.
fn return_freed_memory() {
    thread_local! {
        static LAST: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
    }
    LAST.with(|last| {
        if last
            .get()
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            last.set(Some(Instant::now()));
            // SAFETY: mi_collect takes no pointers and may be called from any thread.
            unsafe { mi_collect(false) };
        }
    });
}

pub fn server(args: ServerArgs) -> ExitCode {
    if let Err(e) = init_logging(&args.log_level).and_then(|_| args.cluster.check()) {
        return bad_input(e);
    }
    let protocol = match protocols::select(&args.cluster.protocol) {
        Ok(entry) => entry,
        Err(code) => return code,
    };
    if args.max_connections == 0 {
        return bad_input("--max-connections: must be at least 1");
    }
    if args.node.is_none() {
        return bad_input("--node: which node to run (e.g. `shard0/replica0`, `coord0`)");
    }
    match (protocol.serve)(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => bad_input(e),
    }
}

pub(crate) async fn serve<P: Protocol>(args: &ServerArgs) -> Result<(), String>
where
    P::Node: Send,
{
    let setup = args.cluster.setup::<P>()?;
    let wanted = args.node.as_deref().unwrap_or_default();
    let node = setup.cluster.node_by_name(wanted).ok_or_else(|| {
        let names: Vec<&str> = setup
            .cluster
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        format!("--node: no node `{wanted}` (nodes: {})", names.join(", "))
    })?;
    let addresses = Addresses::from_topology(&setup.cluster)?;
    let security = args
        .tls
        .security(&pki::machine_file_name(&setup.cluster, node))?;
    if matches!(security, Security::InsecurePlaintext) {
        let addr = addresses.peer_listen[node.index()];
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "--insecure-plaintext on an address other hosts can reach: \
                anyone there may read the data and speak as any node or client");
        }
    }
    let mut config = HostConfig::new(addresses, security);
    config.wan_scale = args.cluster.wan_scale;
    config.data_dir = args.data_dir.clone();
    config.fsync = args.fsync;
    config.seed = args.seed;
    config.clock_offset_ms = args.clock_offset_ms;
    config.limits.max_connections = args.max_connections;
    // A node's whole machine runs in this process: its roles share a clock and talk
    // through memory (topology `[machines]`).
    let machine = setup.cluster.machine_mates(node).to_vec();
    if machine.len() > 1 {
        let names: Vec<&str> = machine
            .iter()
            .map(|n| setup.cluster.node(*n).name.as_str())
            .collect();
        tracing::info!(machine = %setup.cluster.machine_of(node), nodes = %names.join(", "), "hosting a machine");
    }
    // Each hosted node holds up to max_connections inbound sockets, plus its outbound
    // links, listeners and log files.
    let descriptors =
        (machine.len() * (args.max_connections + 2 * setup.cluster.nodes.len())) as u64 + 64;
    enough_descriptors(descriptors);
    let host = Host::<P>::start(setup, &machine, config)
        .await
        .map_err(|e| e.to_string())?;
    wait_for_signal().await;
    tracing::info!(node = %wanted, "stopping");
    host.shutdown().await;
    Ok(())
}

/// Raises this process's open-file limit towards `wanted` (up to the hard limit), so that
/// the connection limit, not EMFILE, is what refuses connections; warns when it cannot.
fn enough_descriptors(wanted: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= wanted {
        return;
    }
    let raised = wanted.min(hard);
    if setrlimit(Resource::RLIMIT_NOFILE, raised, hard).is_err() || raised < wanted {
        tracing::warn!(
            soft,
            hard,
            wanted,
            "the open-file limit is below what --max-connections needs; connections may \
             fail with `too many open files` before the limit refuses them"
        );
    }
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM.
pub async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[derive(Args, Debug)]
pub struct ClusterCommandArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Start every node of the topology as a process on this machine (refused while a
    /// cluster runs on the same run-dir).
    Up(UpArgs),
    /// Stop the processes of the run-dir (SIGTERM, then SIGKILL after 5 s).
    Down(RunDirArgs),
    /// Show which nodes are up and each shard's leader.
    Status(RunDirArgs),
    /// Stop one node's process (with every role of its machine).
    Stop(NodeArgs),
    /// Start one node's process again (with every role of its machine), as `up` started it.
    Start(NodeArgs),
    /// Stop, then start one node's process.
    Restart(NodeArgs),
}

#[derive(Args, Debug)]
struct UpArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    run: RunDirArgs,
    /// Log level of the servers.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Durable logs go under `DIR/<node>/` (default: the run-dir's `data/`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Force records to disk after each event (survives power loss; slow).
    #[arg(long)]
    fsync: bool,
    /// Inbound connections each server's node holds at once (see `server --help`).
    #[arg(long, default_value_t = meridian_server::Limits::default().max_connections)]
    max_connections: usize,
    /// No TLS between the servers and for clients (see `server --help`). Without it, `up`
    /// writes a new development CA and certificates into RUN_DIR/tls (clients use
    /// `--certs RUN_DIR/tls`).
    #[arg(long)]
    insecure_plaintext: bool,
}

#[derive(Args, Debug)]
struct RunDirArgs {
    /// Where pid files (pids/), logs (logs/) and durable logs (data/) go.
    #[arg(long, default_value = "meridian-run")]
    run_dir: PathBuf,
}

#[derive(Args, Debug)]
struct NodeArgs {
    #[command(flatten)]
    run: RunDirArgs,
    /// The node, by name (`shard0/replica1`, `coord3`); its whole machine's process.
    #[arg(long)]
    node: String,
}

pub fn cluster(args: ClusterCommandArgs) -> ExitCode {
    let result = match args.command {
        ClusterCommand::Up(up) => cluster_up(&up),
        ClusterCommand::Down(run) => cluster_down(&run.run_dir),
        ClusterCommand::Status(run) => cluster_status(&run.run_dir),
        ClusterCommand::Stop(node) => node_stop(&node),
        ClusterCommand::Start(node) => node_start(&node),
        ClusterCommand::Restart(node) => node_stop(&node).and_then(|_| node_start(&node)),
    };
    match result {
        Ok(code) => code,
        Err(e) => bad_input(e),
    }
}

/// How `up` started the servers, recorded in the run-dir for `status`, `start` and `down`.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
struct Saved {
    topology: String,
    protocol: String,
    protocol_opts: String,
    wan_scale: f64,
    data_dir: PathBuf,
    fsync: bool,
    log_level: String,
    max_connections: usize,
    /// Servers run without TLS; otherwise their certificates are in RUN_DIR/tls.
    #[serde(default)]
    insecure_plaintext: bool,
}

impl Saved {
    fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("cluster.json")
    }

    fn load(run_dir: &Path) -> Result<Saved, String> {
        let path = Saved::path(run_dir);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: {e} (did `cluster up` run here?)", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn cluster_args(&self) -> ClusterArgs {
        ClusterArgs {
            topology: self.topology.clone(),
            protocol: self.protocol.clone(),
            protocol_opts: self.protocol_opts.clone(),
            wan_scale: self.wan_scale,
        }
    }
}

/// Where `cluster up` keeps the cluster's certificates.
pub fn tls_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("tls")
}

fn file_name(node: &str) -> String {
    node.replace('/', "-")
}

/// The file name of the process that hosts `node`: its machine's first node.
fn process_name(cluster: &Cluster, node: meridian_core::NodeId) -> String {
    file_name(&cluster.node(cluster.machine_mates(node)[0]).name)
}

/// An exclusive lock on the run-dir while a command changes what runs there, so that two
/// `cluster` commands cannot interleave their pid files.
fn lock_run_dir(run_dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    let path = run_dir.join("cluster.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        format!(
            "--run-dir {}: another `meridian cluster` command is working on it",
            run_dir.display()
        )
    })
}

fn cluster_up(up: &UpArgs) -> Result<ExitCode, String> {
    up.cluster.check()?;
    if up.max_connections == 0 {
        return Err("--max-connections: must be at least 1".into());
    }
    if let Err(code) = protocols::select(&up.cluster.protocol) {
        return Ok(code);
    }
    let cluster = up.cluster.cluster()?;
    let addresses = Addresses::from_topology(&cluster)?;
    let run_dir = &up.run.run_dir;
    for sub in ["pids", "logs", "data"] {
        std::fs::create_dir_all(run_dir.join(sub))
            .map_err(|e| format!("--run-dir {}: {e}", run_dir.display()))?;
    }
    let _lock = lock_run_dir(run_dir)?;
    let running = running_servers(run_dir)?;
    if !running.is_empty() {
        let names: Vec<String> = running
            .iter()
            .map(|(n, p, _)| format!("{n} (pid {p})"))
            .collect();
        return Err(format!(
            "--run-dir {}: a cluster is running there ({}); `meridian cluster down --run-dir {}` first",
            run_dir.display(),
            names.join(", "),
            run_dir.display()
        ));
    }
    ports_free(
        &cluster,
        &addresses,
        &cluster.nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
    )?;
    let data_dir = up.data_dir.clone().unwrap_or_else(|| run_dir.join("data"));
    std::fs::create_dir_all(&data_dir)
        .map_err(|e| format!("--data-dir {}: {e}", data_dir.display()))?;
    let topology = std::fs::canonicalize(&up.cluster.topology)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| up.cluster.topology.clone());
    let saved = Saved {
        topology,
        protocol: up.cluster.protocol.clone(),
        protocol_opts: up.cluster.protocol_opts.clone(),
        wan_scale: up.cluster.wan_scale,
        data_dir: std::fs::canonicalize(&data_dir).unwrap_or(data_dir),
        fsync: up.fsync,
        log_level: up.log_level.clone(),
        max_connections: up.max_connections,
        insecure_plaintext: up.insecure_plaintext,
    };
    if !up.insecure_plaintext {
        pki::write_set(&tls_dir(run_dir), &cluster, &[pki::DEFAULT_CLIENT])?;
    }
    let json = serde_json::to_string_pretty(&saved).expect("serializable");
    std::fs::write(Saved::path(run_dir), json).map_err(|e| e.to_string())?;
    // Pid files of servers that are gone (a crash, a reboot) are stale, not a cluster.
    for (_, _, path) in pid_files(run_dir)? {
        let _ = std::fs::remove_file(path);
    }
    let mut started = Vec::new();
    for machine in &cluster.machines {
        match spawn_machine(run_dir, &saved, &cluster, machine.nodes[0]) {
            Ok(child) => started.push(child),
            Err(e) => {
                stop_children(started);
                return Err(e);
            }
        }
    }
    let all: Vec<usize> = (0..cluster.nodes.len()).collect();
    if let Err(e) = wait_until_answering(&cluster, &addresses, &all, &mut started) {
        eprintln!("error: {e} (see {}/logs)", run_dir.display());
        eprintln!(
            "stopping the {} servers this command started",
            started.len()
        );
        stop_children(started);
        return Ok(ExitCode::from(1));
    }
    outln!(
        "{} nodes on {} machines of `{}` running {} (WAN scale {}); logs in {}/logs",
        cluster.nodes.len(),
        cluster.machines.len(),
        cluster.topology.name,
        saved.protocol,
        saved.wan_scale,
        run_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A server process `up` or `start` launched: its pid file and its handle.
struct Started {
    name: String,
    pid_file: PathBuf,
    child: std::process::Child,
}

/// Launches the process of `node`'s machine with the saved arguments; its output is
/// appended to its log (a restart keeps the earlier runs' lines).
fn spawn_machine(
    run_dir: &Path,
    saved: &Saved,
    cluster: &Cluster,
    node: meridian_core::NodeId,
) -> Result<Started, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let first = &cluster.node(cluster.machine_mates(node)[0]).name;
    let name = file_name(first);
    let log_path = run_dir.join("logs").join(format!("{name}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut command = Command::new(&exe);
    command
        .args([
            "server",
            "--topology",
            &saved.topology,
            "--protocol",
            &saved.protocol,
        ])
        .args(["--protocol-opts", &saved.protocol_opts])
        .args(["--wan-scale", &saved.wan_scale.to_string()])
        .args(["--node", first, "--log-level", &saved.log_level])
        .arg("--data-dir")
        .arg(&saved.data_dir)
        .args(saved.fsync.then_some("--fsync"))
        .args(["--max-connections", &saved.max_connections.to_string()]);
    if saved.insecure_plaintext {
        command.arg("--insecure-plaintext");
    } else {
        command.arg("--certs").arg(tls_dir(run_dir));
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // Its own process group: a Ctrl-C at the terminal that ran `up` does not reach it.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let pid_file = run_dir.join("pids").join(format!("{name}.pid"));
    let started = Started {
        name,
        pid_file,
        child,
    };
    if let Err(e) = std::fs::write(&started.pid_file, started.child.id().to_string()) {
        stop_children(vec![started]);
        return Err(format!("{}: {e}", run_dir.display()));
    }
    Ok(started)
}

/// Refuses to start when a node's port is taken (by another cluster, or any program):
/// the server would fail to bind, and saying which port beats a log to read.
fn ports_free(
    cluster: &Cluster,
    addresses: &Addresses,
    nodes: &[meridian_core::NodeId],
) -> Result<(), String> {
    for &id in nodes {
        for (what, addr) in [
            ("port", addresses.peer_listen[id.index()]),
            ("metrics port", addresses.metrics_listen[id.index()]),
        ] {
            if let Err(e) = std::net::TcpListener::bind(addr) {
                return Err(format!(
                    "{}'s {what} {addr} is not free ({e}); is another cluster or program using it?",
                    cluster.node(id).name
                ));
            }
        }
    }
    Ok(())
}

/// Waits (at most 20 s) until nodes `waiting` answer `/status` with state `up`; fails at
/// once when one of `started` exits. A server answers `/status` before its node is built
/// (so that `recovering` shows while it replays its log): answering alone would let `up`
/// report success for a server about to fail on its data directory.
fn wait_until_answering(
    cluster: &Cluster,
    addresses: &Addresses,
    waiting: &[usize],
    started: &mut [Started],
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut waiting = waiting.to_vec();
    loop {
        waiting.retain(|&i| !node_is_up(addresses.metrics[i]));
        if waiting.is_empty() {
            return Ok(());
        }
        for s in started.iter_mut() {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!("the server of {} exited ({status})", s.name));
            }
        }
        if Instant::now() >= deadline {
            let names: Vec<&str> = waiting
                .iter()
                .map(|&i| cluster.nodes[i].name.as_str())
                .collect();
            return Err(format!("not answering after 20 s: {}", names.join(", ")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the node behind `metrics` answers `/status` with its loop running.
fn node_is_up(metrics: std::net::SocketAddr) -> bool {
    http_get(metrics, "/status")
        .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
        .is_some_and(|status| status["state"] == "up")
}

/// Stops processes this command started (SIGTERM, SIGKILL after 5 s) and removes their
/// pid files, so a failed command leaves nothing running.
fn stop_children(started: Vec<Started>) {
    let pids: Vec<(String, i32, PathBuf)> = started
        .iter()
        .map(|s| (s.name.clone(), s.child.id() as i32, s.pid_file.clone()))
        .collect();
    terminate(&pids);
    for mut s in started {
        let _ = s.child.wait();
    }
}

/// The pid files under `run_dir/pids`, as (process name, pid, file).
fn pid_files(run_dir: &Path) -> Result<Vec<(String, i32, PathBuf)>, String> {
    let dir = run_dir.join("pids");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "{}: {e} (did `cluster up` run with this --run-dir?)",
            dir.display()
        )
    })?;
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().to_string()) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        match text.trim().parse::<i32>() {
            Ok(pid) if pid > 0 => pids.push((name, pid, path)),
            _ => eprintln!("warning: {} does not hold a pid", path.display()),
        }
    }
    pids.sort();
    Ok(pids)
}

/// The pid files whose process is alive and is a `meridian server` (a pid reused by an
/// unrelated program after a reboot is not a server of ours).
fn running_servers(run_dir: &Path) -> Result<Vec<(String, i32, PathBuf)>, String> {
    let mut pids = pid_files(run_dir)?;
    pids.retain(|(_, pid, _)| is_server(*pid));
    Ok(pids)
}

fn is_server(pid: i32) -> bool {
    alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|line| line.split(|b| *b == 0).any(|arg| arg == b"server"))
            .unwrap_or(false)
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok() && !is_zombie(pid)
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// SIGTERM to each live server of `pids`, SIGKILL to those still alive 5 s later; removes
/// every pid file. Returns how many needed SIGKILL.
fn terminate(pids: &[(String, i32, PathBuf)]) -> usize {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let live: Vec<&(String, i32, PathBuf)> =
        pids.iter().filter(|(_, p, _)| is_server(*p)).collect();
    for (_, pid, _) in &live {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while live.iter().any(|(_, pid, _)| alive(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut killed = 0;
    for (name, pid, _) in &live {
        if alive(*pid) {
            eprintln!("{name} (pid {pid}) ignored SIGTERM for 5 s: SIGKILL");
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            killed += 1;
        }
    }
    for (_, _, path) in pids {
        let _ = std::fs::remove_file(path);
    }
    killed
}

fn cluster_down(run_dir: &Path) -> Result<ExitCode, String> {
    let _lock = lock_run_dir(run_dir)?;
    let pids = pid_files(run_dir)?;
    let running = pids.iter().filter(|(_, p, _)| is_server(*p)).count();
    let killed = terminate(&pids);
    outln!("stopped {running} processes ({killed} killed)");
    Ok(ExitCode::SUCCESS)
}

/// The saved cluster of `run_dir` and node `name` in it.
fn saved_node(
    run_dir: &Path,
    name: &str,
) -> Result<(Saved, Arc<Cluster>, meridian_core::NodeId), String> {
    let saved = Saved::load(run_dir)?;
    let cluster = saved.cluster_args().cluster()?;
    let node = cluster.node_by_name(name).ok_or_else(|| {
        let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
        format!("--node: no node `{name}` (nodes: {})", names.join(", "))
    })?;
    Ok((saved, cluster, node))
}

fn node_stop(args: &NodeArgs) -> Result<ExitCode, String> {
    let run_dir = &args.run.run_dir;
    let (_, cluster, node) = saved_node(run_dir, &args.node)?;
    let _lock = lock_run_dir(run_dir)?;
    let process = process_name(&cluster, node);
    let pids: Vec<_> = pid_files(run_dir)?
        .into_iter()
        .filter(|(name, _, _)| *name == process)
        .collect();
    if !pids.iter().any(|(_, p, _)| is_server(*p)) {
        outln!("{} is not running", args.node);
        terminate(&pids);
        return Ok(ExitCode::SUCCESS);
    }
    let killed = terminate(&pids);
    outln!(
        "stopped {} ({}){}",
        args.node,
        machine_names(&cluster, node),
        if killed > 0 { " with SIGKILL" } else { "" }
    );
    Ok(ExitCode::SUCCESS)
}

fn machine_names(cluster: &Cluster, node: meridian_core::NodeId) -> String {
    let names: Vec<&str> = cluster
        .machine_mates(node)
        .iter()
        .map(|n| cluster.node(*n).name.as_str())
        .collect();
    names.join(", ")
}

fn node_start(args: &NodeArgs) -> Result<ExitCode, String> {
    let run_dir = &args.run.run_dir;
    let (saved, cluster, node) = saved_node(run_dir, &args.node)?;
    let _lock = lock_run_dir(run_dir)?;
    let process = process_name(&cluster, node);
    if let Some((_, pid, _)) = running_servers(run_dir)?
        .into_iter()
        .find(|(name, _, _)| *name == process)
    {
        return Err(format!("{} is already running (pid {pid})", args.node));
    }
    let addresses = Addresses::from_topology(&cluster)?;
    let mates = cluster.machine_mates(node).to_vec();
    ports_free(&cluster, &addresses, &mates)?;
    let mut started = vec![spawn_machine(run_dir, &saved, &cluster, node)?];
    let waiting: Vec<usize> = mates.iter().map(|n| n.index()).collect();
    if let Err(e) = wait_until_answering(&cluster, &addresses, &waiting, &mut started) {
        eprintln!("error: {e} (see {}/logs)", run_dir.display());
        stop_children(started);
        return Ok(ExitCode::from(1));
    }
    outln!(
        "started {} ({}), pid {}",
        args.node,
        machine_names(&cluster, node),
        started[0].child.id()
    );
    Ok(ExitCode::SUCCESS)
}

fn cluster_status(run_dir: &Path) -> Result<ExitCode, String> {
    let saved = Saved::load(run_dir)?;
    let cluster = saved.cluster_args().cluster()?;
    let addresses = Addresses::from_topology(&cluster)?;
    let pids = pid_files(run_dir).unwrap_or_default();
    let mut up = vec![false; cluster.nodes.len()];
    // What each live node believes leads its shard (node id), from its /status.
    let mut belief: Vec<Option<u64>> = vec![None; cluster.nodes.len()];
    outln!("{:<18} {:<6} {:>8}  state", "node", "region", "pid");
    for info in &cluster.nodes {
        let host_name = process_name(&cluster, info.id);
        let pid = pids
            .iter()
            .find(|(n, _, _)| *n == host_name)
            .map(|(_, p, _)| *p);
        let running = pid.is_some_and(alive);
        let status = http_get(addresses.metrics[info.id.index()], "/status")
            .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok());
        let reported = status
            .as_ref()
            .and_then(|s| s["state"].as_str().map(str::to_string));
        belief[info.id.index()] = status
            .as_ref()
            .and_then(|json| json["shard_leader"].as_u64());
        let state = match (running, reported.as_deref()) {
            (true, Some("up")) => "up",
            (true, Some("recovering")) => "RECOVERING (replaying its durable log)",
            (true, Some(_)) => "starting",
            (true, None) => "starting (process alive, not answering)",
            (false, _) => "down",
        };
        up[info.id.index()] = state == "up";
        outln!(
            "{:<18} {:<6} {:>8}  {state}",
            info.name,
            cluster.topology.region_name(info.region),
            pid.map_or("-".to_string(), |p| p.to_string())
        );
    }
    for (s, replicas) in cluster.shards.iter().enumerate() {
        let configured = cluster.initial_leader(meridian_core::ShardId(s as u32));
        let live = replicas.iter().filter(|r| up[r.index()]).count();
        let (leader, how) = reported_leader(replicas, &up, &belief)
            .map(|(leader, votes)| (leader, format!("reported by {votes}/{live} live replicas")))
            .unwrap_or((configured, "configured; not reported".to_string()));
        outln!(
            "shard{s}: leader {} ({}, {how}), {live}/{} replicas up",
            cluster.node(leader).name,
            if up[leader.index()] { "up" } else { "DOWN" },
            replicas.len()
        );
    }
    let coordinators_up = cluster
        .nodes
        .iter()
        .filter(|n| matches!(n.role, NodeRole::Coordinator { .. }) && up[n.id.index()])
        .count();
    outln!(
        "coordinators: {coordinators_up}/{} up",
        cluster.coordinators.len()
    );
    Ok(if up.iter().all(|u| *u) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The leader most live replicas of a shard report, with how many report it.
fn reported_leader(
    replicas: &[meridian_core::NodeId],
    up: &[bool],
    belief: &[Option<u64>],
) -> Option<(meridian_core::NodeId, usize)> {
    let mut votes: std::collections::BTreeMap<u64, usize> = Default::default();
    for r in replicas.iter().filter(|r| up[r.index()]) {
        if let Some(leader) = belief[r.index()] {
            *votes.entry(leader).or_default() += 1;
        }
    }
    let (leader, count) = votes.into_iter().max_by_key(|(_, n)| *n)?;
    let leader = u32::try_from(leader).ok().map(meridian_core::NodeId)?;
    replicas.contains(&leader).then_some((leader, count))
}

/// A plain HTTP GET on loopback; the body, or None.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let request = format!("GET {path} HTTP/1.0\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

#[derive(Args, Debug)]
pub struct CertsArgs {
    /// A bundled topology name or a TOML path: each of its machines gets a certificate.
    #[arg(long, default_value = "gcp-tiga")]
    topology: String,
    /// The protocol the cluster will run (its services run on machines of their own).
    #[arg(long, default_value = "tiga")]
    protocol: String,
    /// Protocol options, `key=value[,key=value…]` (as the servers will get them).
    #[arg(long, default_value = "")]
    protocol_opts: String,
    /// Where to write the set (created if missing; an earlier set there is replaced).
    #[arg(long)]
    out: PathBuf,
    /// A client certificate to issue, by name (letters, digits, `-`); repeatable.
    #[arg(long = "client", default_values_t = [pki::DEFAULT_CLIENT.to_string()])]
    clients: Vec<String>,
}

/// `meridian certs`: a new CA and certificates for every machine of a topology and for
/// the named clients (`meridian_server::pki`), for a deployment across machines.
pub fn certs(args: CertsArgs) -> ExitCode {
    let cluster = ClusterArgs {
        topology: args.topology.clone(),
        protocol: args.protocol.clone(),
        protocol_opts: args.protocol_opts.clone(),
        wan_scale: 0.0,
    }
    .cluster();
    let cluster = match cluster {
        Ok(c) => c,
        Err(e) => return bad_input(e),
    };
    let valid = |name: &str| {
        !name.is_empty()
            && name.len() <= 63
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if let Some(bad) = args.clients.iter().find(|c| !valid(c)) {
        return bad_input(format!(
            "--client: `{bad}` is not a name of letters, digits and `-` (at most 63)"
        ));
    }
    let clients: Vec<&str> = args.clients.iter().map(String::as_str).collect();
    if let Err(e) = pki::write_set(&args.out, &cluster, &clients) {
        return bad_input(e);
    }
    outln!(
        "wrote a new CA ({}), {} machine certificates and {} client certificates to {}",
        args.out.join("ca.pem").display(),
        cluster.machines.len(),
        clients.len(),
        args.out.display()
    );
    for machine in &cluster.machines {
        let stem = pki::machine_file_name(&cluster, machine.nodes[0]);
        outln!(
            "  {stem}.pem, {stem}-key.pem: {} ({})",
            cluster.topology.region_name(machine.region),
            machine_names(&cluster, machine.nodes[0])
        );
    }
    ExitCode::SUCCESS
}
