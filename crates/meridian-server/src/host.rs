//! A host: some (or all) nodes of a cluster in this process, wired to each other through
//! in-process links and to the rest through TCP.

use crate::metrics::{self, NodeMetrics};
use crate::node::{NodeLoop, Route};
use crate::storage::Wal;
use crate::transport::{self, Inbound, LinkSecurity, Remote, Reply};
use meridian_client::{ClientError, Security, Submit};
use meridian_core::node::Setup;
use meridian_core::time::NS_PER_MS;
use meridian_core::txn::{ClientRequest, ClientResponse};
use meridian_core::{Cluster, Node, NodeId, NodeRng, Protocol};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Every node's addresses: where it is reached and where it binds.
#[derive(Clone, Debug)]
pub struct Addresses {
    /// Where peers and clients reach node i.
    pub peer: Vec<SocketAddr>,
    /// Where node i serves `/metrics` and `/status`.
    pub metrics: Vec<SocketAddr>,
    /// Where node i binds its peer port (its `peer` address unless `[runtime] listen`).
    pub peer_listen: Vec<SocketAddr>,
    /// Where node i binds its metrics port.
    pub metrics_listen: Vec<SocketAddr>,
}

impl Addresses {
    /// Listening where it is reached: the layout of tests and in-process runs.
    pub fn same(peer: Vec<SocketAddr>, metrics: Vec<SocketAddr>) -> Addresses {
        Addresses {
            peer_listen: peer.clone(),
            metrics_listen: metrics.clone(),
            peer,
            metrics,
        }
    }

    /// The topology's `[runtime]` layout: node i at `base_port + i` and
    /// `metrics_base_port + i`, on its region's host (`hosts`, else `host`), bound on
    /// `listen` if given. Ports number nodes across the whole cluster, so no two listeners
    /// share one even when regions share a machine; the two port ranges must not meet.
    pub fn from_topology(cluster: &Cluster) -> Result<Addresses, String> {
        let spec = &cluster.topology.runtime;
        let n = cluster.nodes.len();
        // Node i listens on two ports; the ranges must not meet, or a node's metrics
        // listener takes another node's peer port and one of them cannot start.
        let (peer, metrics) = (
            usize::from(spec.base_port),
            usize::from(spec.metrics_base_port),
        );
        if peer < metrics + n && metrics < peer + n {
            return Err(format!(
                "runtime: the metrics ports {metrics}..={} overlap the nodes' ports {peer}..={} \
                 ({n} nodes); move metrics_base_port or base_port",
                metrics + n - 1,
                peer + n - 1
            ));
        }
        let mut addresses = Addresses::same(Vec::new(), Vec::new());
        for info in &cluster.nodes {
            let i = info.id.index();
            let region = cluster.topology.region_name(info.region);
            let (host, listen) = (spec.host_of(region), spec.listen_of(region));
            addresses.peer.push(socket_addr(host, spec.base_port, i)?);
            addresses
                .metrics
                .push(socket_addr(host, spec.metrics_base_port, i)?);
            addresses
                .peer_listen
                .push(socket_addr(listen, spec.base_port, i)?);
            addresses
                .metrics_listen
                .push(socket_addr(listen, spec.metrics_base_port, i)?);
        }
        Ok(addresses)
    }
}

/// `host:(base + i)`, resolved.
fn socket_addr(host: &str, base: u16, i: usize) -> Result<SocketAddr, String> {
    let port = usize::from(base) + i;
    let port = u16::try_from(port)
        .map_err(|_| format!("node {i}: port {port} is above 65535; lower the base port"))?;
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("runtime address `{host}`: {e}"))?
        .next()
        .ok_or_else(|| format!("runtime address `{host}` resolves to nothing"))
}

/// How a host runs its nodes.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Multiplies every emulated one-way delay (1.0: the topology's delays; 0: none).
    pub wan_scale: f64,
    /// Durable logs go under `data_dir/<node name>/`; None keeps nothing (no recovery).
    pub data_dir: Option<PathBuf>,
    /// Force each handler's records to disk (survives power loss, costs a disk flush).
    pub fsync: bool,
    /// Seeds the nodes' RNGs and the delay jitter.
    pub seed: u64,
    /// Added to the system clock of every hosted node, in ms (for skew experiments).
    pub clock_offset_ms: f64,
    pub addresses: Addresses,
    /// Accept peers and clients over TCP.
    pub listen: bool,
    /// Serve `/metrics` and `/status` over HTTP.
    pub serve_metrics: bool,
    /// Capacity of each node's inbox.
    pub inbox_capacity: usize,
    /// Capacity of each link's queue.
    pub link_capacity: usize,
    /// What each node's listener admits (connections, frame sizes, timeouts).
    pub limits: transport::Limits,
    /// TLS with this process's credentials (its certificate must name every hosted node),
    /// or plaintext.
    pub security: Security,
}

impl HostConfig {
    /// Links and listeners secured as `security` says (a caller's explicit choice).
    pub fn new(addresses: Addresses, security: Security) -> HostConfig {
        HostConfig {
            security,
            wan_scale: 1.0,
            data_dir: None,
            fsync: false,
            seed: 1,
            clock_offset_ms: 0.0,
            addresses,
            listen: true,
            serve_metrics: true,
            inbox_capacity: 65_536,
            link_capacity: 65_536,
            limits: transport::Limits::default(),
        }
    }
}

type Msg<P> = <<P as Protocol>::Node as Node>::Msg;

/// Nodes of protocol `P` running in this process.
pub struct Host<P: Protocol> {
    setup: Setup<P>,
    inboxes: Vec<Option<mpsc::Sender<Inbound<Msg<P>>>>>,
    metrics: Vec<Arc<NodeMetrics>>,
    stop: CancellationToken,
    tasks: JoinSet<()>,
    /// Each hosted node's lock on its data directory, held while the host lives.
    _data_locks: Vec<DataLock>,
}

/// An exclusive lock on a node's data directory: two processes appending to one durable
/// log would corrupt it, so the second is refused at start.
type DataLock = nix::fcntl::Flock<std::fs::File>;

/// Why a host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot listen on {addr} for {node}: {error}")]
    Bind {
        node: String,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("durable log of {node} in {dir}: {error}")]
    Wal {
        node: String,
        dir: PathBuf,
        error: std::io::Error,
    },
    #[error("{node}: its data directory {dir} is in use by another process (a server of this node already runs)")]
    DataDirInUse { node: String, dir: PathBuf },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Config(String),
}

impl<P: Protocol> Host<P>
where
    P::Node: Send,
{
    /// Starts `hosted` (node ids of `setup.cluster`) with `config`. Must run inside a
    /// tokio runtime.
    pub async fn start(
        setup: Setup<P>,
        hosted: &[NodeId],
        config: HostConfig,
    ) -> Result<Host<P>, HostError> {
        let cluster = setup.cluster.clone();
        let n = cluster.nodes.len();
        if config.addresses.peer.len() < n || config.addresses.metrics.len() < n {
            return Err(HostError::Config(format!(
                "addresses for {} nodes, cluster has {n}",
                config.addresses.peer.len()
            )));
        }
        if !(config.wan_scale.is_finite() && config.wan_scale >= 0.0) {
            return Err(HostError::Config(format!(
                "WAN scale must be a finite number ≥ 0, got {}",
                config.wan_scale
            )));
        }
        let security = link_security(&cluster, hosted, &config.security)?;
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let mut inboxes: Vec<Option<mpsc::Sender<Inbound<Msg<P>>>>> = vec![None; n];
        let mut receivers = Vec::new();
        let mut data_locks = Vec::new();
        for &id in hosted {
            let (tx, rx) = mpsc::channel(config.inbox_capacity);
            inboxes[id.index()] = Some(tx);
            receivers.push((id, rx));
        }
        let metrics: Vec<Arc<NodeMetrics>> = cluster
            .nodes
            .iter()
            .map(|info| {
                Arc::new(NodeMetrics::for_run(
                    &info.name,
                    P::NAME,
                    &cluster.topology.name,
                    config.wan_scale,
                ))
            })
            .collect();
        for (id, inbox_rx) in receivers {
            let name = cluster.node(id).name.clone();
            let inbox = inboxes[id.index()]
                .clone()
                .expect("hosted node has an inbox");
            if config.listen {
                let addr = config.addresses.peer_listen[id.index()];
                let listener = bind(&name, addr).await?;
                let listening = transport::Listening {
                    node: id,
                    cluster: cluster.topology.name.clone(),
                    inbox: inbox.clone(),
                    metrics: metrics[id.index()].clone(),
                    limits: config.limits.clone(),
                    security: security.clone(),
                };
                tasks.spawn(transport::listen(listener, listening, stop.clone()));
            }
            if config.serve_metrics {
                let listener = bind(&name, config.addresses.metrics_listen[id.index()]).await?;
                tasks.spawn(metrics::serve(
                    listener,
                    metrics[id.index()].clone(),
                    stop.clone(),
                ));
            }
            let links = Links {
                config: &config,
                security: &security,
                metrics: &metrics,
                stop: &stop,
            };
            let routes = routes::<P>(id, &cluster, &links, &inboxes, &mut tasks);
            let (node_loop, lock) =
                build_node::<P>(id, &setup, &config, routes, metrics[id.index()].clone())?;
            data_locks.extend(lock);
            tasks.spawn(node_loop.run(inbox_rx, stop.clone()));
            tracing::info!(node = %name, id = %id, protocol = P::NAME, "node started");
        }
        Ok(Host {
            setup,
            inboxes,
            metrics,
            stop,
            tasks,
            _data_locks: data_locks,
        })
    }

    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.setup.cluster
    }

    /// The counters of node `id` (all zero for a node not hosted here).
    pub fn metrics(&self, id: NodeId) -> &Arc<NodeMetrics> {
        &self.metrics[id.index()]
    }

    /// An in-process client of coordinator `id`; None if it is not hosted here.
    pub fn local_client(&self, id: NodeId) -> Option<LocalClient<Msg<P>>> {
        let inbox = self.inboxes.get(id.index())?.clone()?;
        Some(LocalClient {
            inbox,
            timeout: Duration::from_secs(5),
        })
    }

    /// A token cancelled when the host stops.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops every task: node loops write out their logs, links and listeners close.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        self.inboxes.clear();
        let drained = tokio::time::timeout(Duration::from_secs(5), async {
            while self.tasks.join_next().await.is_some() {}
        });
        if drained.await.is_err() {
            tracing::warn!("tasks still running 5 s after shutdown; aborting them");
            self.tasks.abort_all();
        }
    }
}

/// The acceptor and connector of `security`, after checking that its certificate names
/// every node hosted here (a certificate for the wrong machine fails at start, not as
/// refused links later).
fn link_security(
    cluster: &Cluster,
    hosted: &[NodeId],
    security: &Security,
) -> Result<LinkSecurity, HostError> {
    let node_names: Arc<Vec<String>> =
        Arc::new(cluster.nodes.iter().map(|n| n.name.clone()).collect());
    let Security::Tls(credentials) = security else {
        return Ok(LinkSecurity {
            node_names,
            ..LinkSecurity::default()
        });
    };
    for id in hosted {
        let name = &cluster.node(*id).name;
        if !credentials.names_node(name) {
            return Err(HostError::Tls(format!(
                "the certificate does not name {name} ({}), which this process hosts",
                meridian_client::tls::node_dns_name(name)
            )));
        }
    }
    let tls_error = |e: meridian_client::tls::TlsError| HostError::Tls(e.to_string());
    Ok(LinkSecurity {
        acceptor: Some(credentials.acceptor().map_err(tls_error)?),
        connector: Some(credentials.connector().map_err(tls_error)?),
        node_names,
    })
}

async fn bind(node: &str, addr: SocketAddr) -> Result<TcpListener, HostError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| HostError::Bind {
            node: node.to_string(),
            addr,
            error,
        })
}

/// The scaled delay between two nodes, ns, and its jitter mean.
fn link_delay(cluster: &Cluster, from: NodeId, to: NodeId, scale: f64) -> (u64, f64) {
    let one_way_ns = cluster.one_way_ms(from, to) * scale * NS_PER_MS as f64;
    let jitter_ns = cluster.topology.jitter_ms * scale * NS_PER_MS as f64;
    (one_way_ns.round() as u64, jitter_ns)
}

/// What a node's outbound links share.
struct Links<'a> {
    config: &'a HostConfig,
    security: &'a LinkSecurity,
    metrics: &'a [Arc<NodeMetrics>],
    stop: &'a CancellationToken,
}

/// Node `id`'s route to every node, spawning the link tasks it needs.
fn routes<P: Protocol>(
    id: NodeId,
    cluster: &Cluster,
    links: &Links<'_>,
    inboxes: &[Option<mpsc::Sender<Inbound<Msg<P>>>>],
    tasks: &mut JoinSet<()>,
) -> Vec<Route<Msg<P>>> {
    let config = links.config;
    (0..cluster.nodes.len())
        .map(|j| {
            let to = NodeId(j as u32);
            if to == id {
                return Route::Own;
            }
            let (one_way_ns, jitter_mean_ns) = link_delay(cluster, id, to, config.wan_scale);
            let (queue, rx) = mpsc::channel(config.link_capacity);
            match &inboxes[j] {
                // Roles of one machine talk through memory, whatever the WAN emulation.
                Some(inbox) if config.wan_scale == 0.0 || cluster.colocated(id, to) => {
                    return Route::Direct(inbox.clone())
                }
                Some(inbox) => {
                    tasks.spawn(transport::local_link(id, rx, inbox.clone()));
                }
                None => {
                    let remote = Remote {
                        from: id,
                        to,
                        to_name: cluster.node(to).name.clone(),
                        addr: config.addresses.peer[j],
                        cluster: cluster.topology.name.clone(),
                        connector: links.security.connector.clone(),
                    };
                    let metrics = links.metrics[id.index()].clone();
                    tasks.spawn(transport::tcp_link(remote, rx, metrics, links.stop.clone()));
                }
            }
            Route::Link {
                queue,
                one_way_ns,
                jitter_mean_ns,
            }
        })
        .collect()
}

/// Builds node `id` from its durable log (if any) and wraps it in its event loop; with a
/// data directory, also the lock that keeps it this process's.
fn build_node<P: Protocol>(
    id: NodeId,
    setup: &Setup<P>,
    config: &HostConfig,
    routes: Vec<Route<Msg<P>>>,
    metrics: Arc<NodeMetrics>,
) -> Result<(NodeLoop<P::Node>, Option<DataLock>), HostError> {
    let name = setup.cluster.node(id).name.clone();
    metrics.recovering.store(true, Ordering::Relaxed);
    let (wal, recovered, incarnation, lock) = match &config.data_dir {
        None => (None, Vec::new(), 0, None),
        Some(dir) => {
            let dir = dir.join(name.replace('/', "-"));
            let wal_error = |error| HostError::Wal {
                node: name.clone(),
                dir: dir.clone(),
                error,
            };
            let lock = lock_data_dir(&name, &dir)?;
            let incarnation = next_incarnation(&dir).map_err(wal_error)?;
            let (wal, records, dropped) = Wal::open(&dir, config.fsync).map_err(wal_error)?;
            if dropped > 0 {
                tracing::warn!(node = %name, dropped_bytes = dropped, "dropped a torn tail of the durable log");
            }
            (Some(wal), records, incarnation, Some(lock))
        }
    };
    NodeMetrics::add(&metrics.records_recovered, recovered.len() as u64);
    if !recovered.is_empty() {
        tracing::info!(node = %name, records = recovered.len(), incarnation, "recovering from the durable log");
    }
    let node = P::build(id, setup, &recovered);
    metrics.recovering.store(false, Ordering::Relaxed);
    let seed = config.seed ^ (u64::from(id.0) << 32) ^ u64::from(incarnation);
    let node_loop = NodeLoop::new(
        id,
        node,
        NodeRng::seed_from_u64(seed),
        ChaCha8Rng::seed_from_u64(seed ^ 0xDE1A),
        routes,
        wal,
        (config.clock_offset_ms * NS_PER_MS as f64) as i64,
        metrics,
    );
    Ok((node_loop, lock))
}

/// Takes `dir/LOCK` exclusively, without waiting: another live process holding it is an
/// error, a lock left by a dead one is not (the kernel drops it with the process).
fn lock_data_dir(node: &str, dir: &std::path::Path) -> Result<DataLock, HostError> {
    let wal_error = |error| HostError::Wal {
        node: node.to_string(),
        dir: dir.to_path_buf(),
        error,
    };
    std::fs::create_dir_all(dir).map_err(wal_error)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))
        .map_err(wal_error)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| match errno {
            nix::errno::Errno::EWOULDBLOCK => HostError::DataDirInUse {
                node: node.to_string(),
                dir: dir.to_path_buf(),
            },
            other => wal_error(other.into()),
        },
    )
}

/// Counts the node's starts in `dir/incarnation`, so each start draws a fresh RNG stream.
fn next_incarnation(dir: &std::path::Path) -> std::io::Result<u32> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("incarnation");
    let previous = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let next = previous.map_or(0, |p| p + 1);
    std::fs::write(&path, next.to_string())?;
    Ok(next)
}

/// A client of a coordinator in this process: requests go straight into its inbox.
#[derive(Clone)]
pub struct LocalClient<M> {
    inbox: mpsc::Sender<Inbound<M>>,
    timeout: Duration,
}

impl<M: Send + 'static> LocalClient<M> {
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub async fn request(&self, request: ClientRequest) -> Result<ClientResponse, ClientError> {
        let (tx, rx) = oneshot::channel();
        let reply = Reply::Local(tx);
        if self
            .inbox
            .send(Inbound::Request { request, reply })
            .await
            .is_err()
        {
            return Err(ClientError::Unreachable {
                tried: "in-process coordinator".into(),
                last_error: "node stopped".into(),
            });
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(ClientError::Unknown {
                reason: "coordinator stopped before answering".into(),
            }),
            Err(_) => Err(ClientError::Timeout {
                after: self.timeout,
            }),
        }
    }
}

impl<M: Send + 'static> Submit for LocalClient<M> {
    fn submit(
        &self,
        request: ClientRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ClientResponse, ClientError>> + Send + '_>> {
        Box::pin(self.request(request))
    }
}

#[cfg(test)]
mod tests {
    fn assert_send<T: Send>() {}

    #[test]
    fn every_protocol_node_can_move_between_threads() {
        assert_send::<meridian_protocols::tiga::TigaNode>();
        assert_send::<meridian_protocols::clock_si::SiNode>();
        assert_send::<<meridian_protocols::two_pl::TwoPlTwoPc as meridian_core::Protocol>::Node>();
    }
}
