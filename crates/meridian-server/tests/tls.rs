//! TLS on the runtime's links (issue 22, Must show 3): peers and clients with the
//! cluster's certificates commit over TLS; a client without credentials, a peer without
//! the cluster's certificate, and a member of the cluster whose hello claims a node its
//! certificate does not name are each refused; the handshake and frames stay bounded in
//! time.

mod common;
use common::free_addresses;
use meridian_client::tls::Credentials;
use meridian_client::wire::{self, Hello};
use meridian_client::{Client, ClientError, ClientOptions, Endpoint, Security};
use meridian_core::node::Setup;
use meridian_core::txn::{Op, Operand, Piece, Txn};
use meridian_core::value::encode_int;
use meridian_core::{NodeId, NodeRole, Procedures, ProtocolConfig, SmallBytes, Topology};
use meridian_protocols::two_pl::TwoPlTwoPc;
use meridian_server::metrics::NodeMetrics;
use meridian_server::pki::Authority;
use meridian_server::{Addresses, Host, HostConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type P = TwoPlTwoPc;

fn setup() -> Setup<P> {
    let topology = Topology::load("local").unwrap();
    meridian_sim::setup::<P>(topology, ProtocolConfig::default(), Procedures::new()).unwrap()
}

/// Credentials issued by `ca` for `names` (node names; empty: a client).
fn issued(ca: &Authority, names: &[&str]) -> Arc<Credentials> {
    let (cert, key) = if names.is_empty() {
        ca.issue_client("tester").unwrap()
    } else {
        let dns = names
            .iter()
            .map(|n| meridian_client::tls::node_dns_name(n))
            .collect();
        ca.issue("machine", dns).unwrap()
    };
    Arc::new(
        Credentials::from_pem(ca.cert_pem().as_bytes(), cert.as_bytes(), key.as_bytes()).unwrap(),
    )
}

/// Credentials from a foreign CA that trust `trusted` (so the connecting side accepts
/// the cluster's server and only the cluster can refuse).
fn foreign(trusted: &Authority, names: &[&str]) -> Arc<Credentials> {
    let stranger = Authority::new("elsewhere").unwrap();
    let dns = names
        .iter()
        .map(|n| meridian_client::tls::node_dns_name(n))
        .collect();
    let (cert, key) = stranger.issue("intruder", dns).unwrap();
    Arc::new(
        Credentials::from_pem(
            trusted.cert_pem().as_bytes(),
            cert.as_bytes(),
            key.as_bytes(),
        )
        .unwrap(),
    )
}

fn names(setup: &Setup<P>, nodes: &[NodeId]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| setup.cluster.node(*n).name.clone())
        .collect()
}

/// The coordinators in one host, every other node in another: their links cross TCP, as
/// between machines, each host with a certificate naming only its own nodes.
struct TwoMachines {
    setup: Setup<P>,
    ca: Authority,
    addresses: Addresses,
    coordinators: Host<P>,
    replicas: Host<P>,
}

async fn two_machines() -> TwoMachines {
    let setup = setup();
    let ca = Authority::new("local").unwrap();
    let addresses = free_addresses(setup.cluster.nodes.len());
    let (coords, others): (Vec<NodeId>, Vec<NodeId>) = setup
        .cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .partition(|id| matches!(setup.cluster.node(*id).role, NodeRole::Coordinator { .. }));
    let start = |hosted: Vec<NodeId>| {
        let names = names(&setup, &hosted);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut config = HostConfig::new(addresses.clone(), Security::Tls(issued(&ca, &names)));
        config.wan_scale = 0.0;
        config.serve_metrics = false;
        let setup = setup.clone();
        async move { Host::<P>::start(setup, &hosted, config).await.unwrap() }
    };
    let replicas = start(others).await;
    let coordinators = start(coords).await;
    TwoMachines {
        setup,
        ca,
        addresses,
        coordinators,
        replicas,
    }
}

fn put(setup: &Setup<P>, key: &str, value: i64) -> Txn {
    let k = SmallBytes::copy_from_slice(key.as_bytes());
    let shard = setup.cluster.partitioner.shard_of(&k);
    let op = Op::Put(k, Operand::Literal(encode_int(value)));
    Txn {
        pieces: vec![Piece::ops(shard, vec![op])],
    }
}

fn options(security: Security) -> ClientOptions {
    ClientOptions {
        timeout: Duration::from_secs(5),
        ..ClientOptions::new(security)
    }
}

/// Waits (at most 5 s) until `condition` holds.
async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

/// Whether the other end closes `stream` (an error, a TLS alert or EOF) within 5 s.
async fn closed(stream: &mut (impl AsyncReadExt + Unpin)) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn framed<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let body = wire::encode(value);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn unauthenticated(metrics: &NodeMetrics) -> u64 {
    metrics.connections_unauthenticated.get()
}

/// A TLS connection to node `to` at `addr` with `credentials`, saying `hello`.
async fn say_hello(
    credentials: &Credentials,
    to: &str,
    addr: SocketAddr,
    hello: &Hello,
) -> meridian_client::tls::Stream {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let connector = credentials.connector().unwrap();
    let mut stream = connector.connect(to, tcp).await.unwrap();
    // Under TLS 1.3 a refused client certificate shows only at the next read; the write
    // may or may not see it.
    let _ = stream.write_all(&framed(hello)).await;
    let _ = stream.flush().await;
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_peers_of_the_cluster_commit_over_tls_and_strangers_are_refused() {
    let m = two_machines().await;
    let coord0 = m.setup.cluster.coordinators[0];
    let coordinator = Endpoint::new(m.addresses.peer[coord0.index()], "coord0");

    // A client with the cluster's certificate commits, through the coordinators' TLS
    // links to the replicas' host.
    let client = Client::connect(
        vec![coordinator.clone()],
        options(Security::Tls(issued(&m.ca, &[]))),
    )
    .await
    .unwrap();
    client.execute(put(&m.setup, "a", 1)).await.unwrap();

    // A client whose certificate another CA signed: refused in the handshake, nothing ran.
    let coord_metrics = m.coordinators.metrics(coord0).clone();
    let stranger = Client::connect(
        vec![coordinator.clone()],
        options(Security::Tls(foreign(&m.ca, &[]))),
    )
    .await;
    let refused = match stranger {
        Ok(c) => c.execute(put(&m.setup, "b", 1)).await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(
        matches!(refused, Err(ClientError::Refused { .. })),
        "{refused:?}"
    );
    assert!(eventually(|| unauthenticated(&coord_metrics) >= 1).await);
    let mut seen = unauthenticated(&coord_metrics);

    // A client with no certificate at all.
    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = m.ca.cert_pem();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let anonymous = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(anonymous));
    let tcp = TcpStream::connect(coordinator.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("coord0.node.meridian").unwrap();
    let mut anonymous = connector.connect(name, tcp).await.unwrap();
    let _ = anonymous.write_all(&framed(&Hello::Client)).await;
    let _ = anonymous.flush().await;
    assert!(
        closed(&mut anonymous).await,
        "no certificate, no connection"
    );
    assert!(eventually(|| unauthenticated(&coord_metrics) > seen).await);
    seen = unauthenticated(&coord_metrics);

    // A plaintext client at a TLS listener.
    let plaintext = Client::connect(vec![coordinator], options(Security::InsecurePlaintext)).await;
    let result = match plaintext {
        Ok(c) => c.execute(put(&m.setup, "c", 1)).await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(result.is_err(), "plaintext is refused");
    assert!(eventually(|| unauthenticated(&coord_metrics) > seen).await);

    // A peer without the cluster's certificate, claiming a replica, at a replica.
    let replica0 = m.setup.cluster.shards[0][0];
    let replica1 = m.setup.cluster.shards[0][1];
    let replica_metrics = m.replicas.metrics(replica1).clone();
    let peer_hello = |from: NodeId| Hello::Peer {
        from,
        cluster: "local".into(),
    };
    let addr = m.addresses.peer[replica1.index()];
    let intruder = foreign(&m.ca, &["shard0/replica0"]);
    let mut stream = say_hello(&intruder, "shard0/replica1", addr, &peer_hello(replica0)).await;
    assert!(closed(&mut stream).await, "a foreign peer is refused");
    assert!(eventually(|| unauthenticated(&replica_metrics) == 1).await);

    // A member of the cluster (the coordinators' certificate) claiming to be a replica.
    let coordinators_cert = issued(&m.ca, &["coord0", "coord1", "coord2", "coord3"]);
    let mut forged = say_hello(
        &coordinators_cert,
        "shard0/replica1",
        addr,
        &peer_hello(replica0),
    )
    .await;
    assert!(closed(&mut forged).await, "a forged hello is refused");
    assert!(eventually(|| unauthenticated(&replica_metrics) == 2).await);

    // The cluster still serves, and its honest links were never refused.
    client.execute(put(&m.setup, "d", 1)).await.unwrap();
    assert_eq!(unauthenticated(&replica_metrics), 2);
    let shard0_leader = m.replicas.metrics(replica0);
    assert_eq!(unauthenticated(shard0_leader), 0);
    m.coordinators.shutdown().await;
    m.replicas.shutdown().await;
}

/// The handshake counts against the hello deadline, and the frame limits and timeouts hold
/// through TLS: a connection that never starts its handshake, one that stops inside a
/// frame and one that announces a frame over the client limit are each closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_handshake_and_frames_are_bounded() {
    let setup = setup();
    let ca = Authority::new("local").unwrap();
    let all = names(
        &setup,
        &setup.cluster.nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
    );
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut config = HostConfig::new(
        free_addresses(setup.cluster.nodes.len()),
        Security::Tls(issued(&ca, &all)),
    );
    config.wan_scale = 0.0;
    config.serve_metrics = false;
    config.limits.hello_timeout = Duration::from_millis(300);
    config.limits.frame_timeout = Duration::from_millis(300);
    let coord0 = setup.cluster.coordinators[0];
    let addr = config.addresses.peer[coord0.index()];
    let ids: Vec<NodeId> = setup.cluster.nodes.iter().map(|n| n.id).collect();
    let host = Host::<P>::start(setup.clone(), &ids, config).await.unwrap();
    let metrics = host.metrics(coord0).clone();

    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed(&mut silent).await,
        "no handshake: closed at the deadline"
    );
    assert!(eventually(|| metrics.connections_timed_out.get() == 1).await);

    let client = issued(&ca, &[]);
    let mut stalled = say_hello(&client, "coord0", addr, &Hello::Client).await;
    stalled.write_all(&100u32.to_be_bytes()).await.unwrap();
    stalled.write_all(&[0u8; 10]).await.unwrap();
    stalled.flush().await.unwrap();
    assert!(closed(&mut stalled).await, "stalled inside a frame");
    assert!(eventually(|| metrics.connections_timed_out.get() == 2).await);

    let mut oversized = say_hello(&client, "coord0", addr, &Hello::Client).await;
    oversized
        .write_all(&(16u32 << 20).to_be_bytes())
        .await
        .unwrap();
    oversized.flush().await.unwrap();
    assert!(
        closed(&mut oversized).await,
        "a 16 MiB client frame is refused"
    );
    assert!(eventually(|| metrics.frame_errors.get() == 1).await);
    assert_eq!(metrics.connections_unauthenticated.get(), 0);
    host.shutdown().await;
}
