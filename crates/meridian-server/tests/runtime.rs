//! The runtime hosts the protocols' nodes unchanged: transactions commit over real sockets,
//! bad frames close only their own connection, and durable logs bring a restarted host back.

mod common;
use common::{free_addresses, plain};
use meridian_client::{Client, ClientError, ClientOptions, Security};
use meridian_core::node::Setup;
use meridian_core::txn::{Op, Operand, Piece, PieceResult, Txn};
use meridian_core::value::{decode_int, encode_int};
use meridian_core::SmallBytes;
use meridian_core::{NodeId, Procedures, Protocol, ProtocolConfig, Topology};
use meridian_protocols::clock_si::ClockSi;
use meridian_protocols::tiga::Tiga;
use meridian_server::{Host, HostConfig};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn setup<P: Protocol>(topology: &str) -> Setup<P> {
    let topology = Topology::load(topology).unwrap();
    meridian_sim::setup::<P>(topology, ProtocolConfig::default(), Procedures::new()).unwrap()
}

fn key<P: Protocol>(setup: &Setup<P>, name: &str) -> (meridian_core::ShardId, SmallBytes) {
    let k = SmallBytes::copy_from_slice(name.as_bytes());
    (setup.cluster.partitioner.shard_of(&k), k)
}

fn add_txn<P: Protocol>(setup: &Setup<P>, names: &[&str], by: i64) -> Txn {
    let mut pieces: Vec<Piece> = Vec::new();
    for name in names {
        let (shard, k) = key(setup, name);
        let op = Op::Add(k, Operand::Literal(encode_int(by)));
        match pieces.iter_mut().find(|p| p.shard == shard) {
            Some(p) => match &mut p.body {
                meridian_core::PieceBody::Ops(ops) => ops.push(op),
                _ => unreachable!(),
            },
            None => pieces.push(Piece::ops(shard, vec![op])),
        }
    }
    Txn { pieces }
}

fn last_int(results: &[PieceResult]) -> i64 {
    let out = results.last().unwrap().outputs.last().unwrap().clone();
    decode_int(&out.unwrap()).unwrap()
}

async fn start<P: Protocol>(setup: &Setup<P>, config: HostConfig) -> Host<P>
where
    P::Node: Send,
{
    let all: Vec<NodeId> = setup.cluster.nodes.iter().map(|n| n.id).collect();
    Host::<P>::start(setup.clone(), &all, config).await.unwrap()
}

fn config(n: usize) -> HostConfig {
    let mut c = HostConfig::new(free_addresses(n), Security::InsecurePlaintext);
    c.wan_scale = 0.0;
    c.serve_metrics = false;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiga_commits_over_tcp_and_a_bad_frame_closes_only_its_connection() {
    let setup = setup::<Tiga>("local");
    let config = config(setup.cluster.nodes.len());
    let coordinator = setup.cluster.coordinators[0];
    let addr = config.addresses.peer[coordinator.index()];
    let host = start::<Tiga>(&setup, config).await;
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();

    // A connection that sends garbage after a valid client hello, one that claims an
    // oversized frame, and one that stops inside a frame.
    let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
    let hello = meridian_client::wire::encode(&meridian_client::wire::Hello::Client);
    garbage.write_u32(hello.len() as u32).await.unwrap();
    garbage.write_all(&hello).await.unwrap();
    garbage
        .write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    let mut oversized = tokio::net::TcpStream::connect(addr).await.unwrap();
    oversized.write_u32(u32::MAX).await.unwrap();
    let mut truncated = tokio::net::TcpStream::connect(addr).await.unwrap();
    truncated.write_all(&[0, 0, 0, 9, 1, 2]).await.unwrap();
    truncated.shutdown().await.unwrap();

    for stream in [&mut garbage, &mut oversized] {
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the server closes a connection that sent a bad frame: {read:?}"
        );
    }

    for round in 1..=5 {
        let committed = client
            .execute(add_txn(&setup, &["a", "b", "c"], 1))
            .await
            .unwrap();
        assert_eq!(last_int(&committed.results), round);
    }
    let errors = host.metrics(coordinator).frame_errors.get();
    assert!(errors >= 3, "three bad connections counted, saw {errors}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_cluster_and_a_lost_coordinator_are_distinct_errors() {
    let setup = setup::<Tiga>("local");
    let config = config(setup.cluster.nodes.len());
    let addr = config.addresses.peer[setup.cluster.coordinators[0].index()];
    let options = ClientOptions {
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_millis(500),
        security: Security::InsecurePlaintext,
    };
    let dead = Client::connect(vec![plain(addr)], options.clone()).await;
    assert!(
        matches!(dead, Err(ClientError::Unreachable { .. })),
        "{:?}",
        dead.err()
    );

    // Only the coordinator runs: the replicas it asks are not there, so a transaction it
    // takes stays in flight until the coordinator goes away.
    let coordinator = setup.cluster.coordinators[0];
    let host = Host::<Tiga>::start(setup.clone(), &[coordinator], config)
        .await
        .unwrap();
    let options = ClientOptions {
        timeout: Duration::from_secs(30),
        ..options
    };
    let client = std::sync::Arc::new(Client::connect(vec![plain(addr)], options).await.unwrap());
    let in_flight = tokio::spawn({
        let client = client.clone();
        let txn = add_txn(&setup, &["x"], 1);
        async move { client.execute(txn).await }
    });
    let metrics = host.metrics(coordinator).clone();
    assert!(
        eventually(Duration::from_secs(10), || metrics.client_requests.get()
            == 1)
        .await,
        "the coordinator took the request"
    );
    host.shutdown().await;
    let lost = in_flight.await.unwrap();
    assert!(
        matches!(lost, Err(ClientError::Unknown { .. })),
        "a request in flight when its coordinator went away may have committed: {lost:?}"
    );
    let after = client.execute(add_txn(&setup, &["x"], 1)).await;
    assert!(
        matches!(after, Err(ClientError::Unreachable { .. })),
        "nothing listens any more, nothing was sent: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_recovers_from_its_durable_logs() {
    let setup = setup::<ClockSi>("local");
    let dir = tempfile::tempdir().unwrap();
    let mut first = config(setup.cluster.nodes.len());
    first.data_dir = Some(dir.path().to_path_buf());
    let coordinator = setup.cluster.coordinators[0];
    let addr = first.addresses.peer[coordinator.index()];
    let host = start::<ClockSi>(&setup, first.clone()).await;
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        client
            .execute(add_txn(&setup, &["p", "q"], 5))
            .await
            .unwrap();
    }
    drop(client);
    host.shutdown().await;

    let host = start::<ClockSi>(&setup, first).await;
    let recovered: u64 = setup
        .cluster
        .nodes
        .iter()
        .map(|n| host.metrics(n.id).records_recovered.get())
        .sum();
    assert!(recovered > 0, "the restarted nodes read their logs");
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    let committed = client.execute(add_txn(&setup, &["q"], 0)).await.unwrap();
    assert_eq!(
        last_int(&committed.results),
        15,
        "writes before the restart survive"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_split_a_cluster_and_talk_over_tcp_with_emulated_delay() {
    let setup = setup::<Tiga>("gcp-tiga");
    let mut config = config(setup.cluster.nodes.len());
    let scale = 0.1;
    config.wan_scale = scale;
    let (left, right): (Vec<NodeId>, Vec<NodeId>) = setup
        .cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .partition(|id| id.0 % 2 == 0);
    let a = Host::<Tiga>::start(setup.clone(), &left, config.clone())
        .await
        .unwrap();
    let b = Host::<Tiga>::start(setup.clone(), &right, config.clone())
        .await
        .unwrap();
    // A commit needs an answer from each touched shard's leader: at least the emulated
    // round trip from the coordinator to the farthest of those leaders. Ask the
    // coordinator for which that floor is highest.
    let names = ["m", "n", "o"];
    let shards: Vec<meridian_core::ShardId> = names.iter().map(|n| key(&setup, n).0).collect();
    let floor_ms = |c: NodeId| {
        shards
            .iter()
            .map(|s| {
                2.0 * setup
                    .cluster
                    .one_way_ms(c, setup.cluster.initial_leader(*s))
                    * scale
            })
            .fold(0.0, f64::max)
    };
    let coordinator = *setup
        .cluster
        .coordinators
        .iter()
        .max_by(|x, y| floor_ms(**x).total_cmp(&floor_ms(**y)))
        .unwrap();
    let floor = Duration::from_secs_f64(floor_ms(coordinator) / 1000.0);
    assert!(
        floor >= Duration::from_millis(5),
        "a delay worth measuring: {floor:?}"
    );
    let client = Client::connect(
        vec![plain(config.addresses.peer[coordinator.index()])],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    for round in 1..=3 {
        let started = std::time::Instant::now();
        let committed = client.execute(add_txn(&setup, &names, 2)).await.unwrap();
        let took = started.elapsed();
        assert_eq!(last_int(&committed.results), 2 * round);
        assert!(
            took >= floor,
            "round {round} took {took:?}, under the emulated round trip {floor:?}"
        );
    }
    let sent: u64 = left.iter().map(|id| a.metrics(*id).reconnects.get()).sum();
    assert!(
        sent > 0,
        "nodes of one host opened TCP links to the other's"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_coordinator_is_a_timeout() {
    // Accepts the connection and reads, but never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    });
    let options = ClientOptions {
        timeout: Duration::from_millis(300),
        ..ClientOptions::new(Security::InsecurePlaintext)
    };
    let client = Client::connect(vec![plain(addr)], options).await.unwrap();
    let setup = setup::<Tiga>("local");
    let result = client.execute(add_txn(&setup, &["s"], 1)).await;
    assert!(
        matches!(result, Err(ClientError::Timeout { .. })),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_sessions_read_their_writes_and_commit() {
    let setup = setup::<ClockSi>("local");
    let config = config(setup.cluster.nodes.len());
    let addr = config.addresses.peer[setup.cluster.coordinators[1].index()];
    let host = start::<ClockSi>(&setup, config).await;
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    let key = SmallBytes::from_static(b"session-key");
    let session = client.begin(None).await.unwrap();
    assert_eq!(session.get(key.clone()).await.unwrap(), None);
    session.put(key.clone(), encode_int(41)).await.unwrap();
    let committed = session.commit().await.unwrap();
    assert!(committed.commit_ts.is_some());

    let next = client.begin(committed.commit_ts).await.unwrap();
    assert_eq!(next.get(key.clone()).await.unwrap(), Some(encode_int(41)));
    next.abort().await.unwrap();
    // The protocol's own counters reach the runtime's metrics, as the simulator reports
    // them: the coordinator began two transactions (Clock-SI counts `txns`).
    let page = host.metrics(setup.cluster.coordinators[1]).render();
    assert!(
        page.contains("# TYPE meridian_protocol_events counter")
            && page.contains(
                "meridian_protocol_events_total{node=\"coord1\",protocol=\"clock-si\",name=\"txns\"} 2"
            ),
        "{page}"
    );
    host.shutdown().await;
}

/// A coordinator on its shard's machine reaches the shard leader through memory even with
/// the WAN emulated: a single-shard transaction commits far inside the region's 400 ms
/// round trip that a separate machine would pay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocated_roles_skip_the_emulated_link() {
    let text = "name = \"pair\"\nregions = [\"A\"]\nintra_region_rtt_ms = 400.0\n\
                [machines]\nA = 1\n[[shards]]\nreplicas = [\"A\"]\n\
                [[coordinators]]\nregion = \"A\"\ncolocated = true\n";
    let topology = Topology::parse("pair", text).unwrap();
    let setup = meridian_sim::setup::<meridian_protocols::two_pl::TwoPlTwoPc>(
        topology,
        ProtocolConfig::default(),
        Procedures::new(),
    )
    .unwrap();
    let mut config = config(setup.cluster.nodes.len());
    config.wan_scale = 1.0;
    let addr = config.addresses.peer[setup.cluster.coordinators[0].index()];
    let host = start::<meridian_protocols::two_pl::TwoPlTwoPc>(&setup, config).await;
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    for _ in 0..3 {
        client.execute(add_txn(&setup, &["k"], 1)).await.unwrap();
    }
    let each = started.elapsed() / 3;
    assert!(
        each < Duration::from_millis(200),
        "{each:?} per transaction"
    );
    host.shutdown().await;
}

/// Waits (at most `within`) until `condition` holds; whether it did.
async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

/// Whether the server closed `stream` (EOF or reset) within `within`.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

fn client_hello() -> Vec<u8> {
    let hello = meridian_client::wire::encode(&meridian_client::wire::Hello::Client);
    let mut framed = (hello.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&hello);
    framed
}

/// Issue 22, item 3: a connection that stops inside a frame, one that never says hello
/// and an idle client are each closed after their timeout (they stayed open for good),
/// and the node's open-connection gauge returns to what the peers hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_stalled_connections_are_closed() {
    let setup = setup::<ClockSi>("local");
    let mut config = config(setup.cluster.nodes.len());
    config.listen = true;
    config.limits.hello_timeout = Duration::from_millis(300);
    config.limits.frame_timeout = Duration::from_millis(300);
    config.limits.client_idle_timeout = Duration::from_millis(600);
    let coordinator = setup.cluster.coordinators[0];
    let addr = config.addresses.peer[coordinator.index()];
    let host = start::<ClockSi>(&setup, config).await;
    let metrics = host.metrics(coordinator).clone();
    let open_before = metrics.connections_open.get();

    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled.write_all(&client_hello()).await.unwrap();
    stalled.write_all(&[0, 0, 0, 100, 1, 2, 3]).await.unwrap();
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(&client_hello()).await.unwrap();
    for (what, stream) in [
        ("stalled mid-frame", &mut stalled),
        ("no hello", &mut silent),
        ("idle client", &mut idle),
    ] {
        assert!(
            closed_within(stream, Duration::from_secs(10)).await,
            "{what}: still open"
        );
    }
    assert!(metrics.connections_timed_out.get() >= 3);
    assert!(
        eventually(Duration::from_secs(5), || metrics.connections_open.get()
            == open_before)
        .await,
        "open connections {} (before: {open_before})",
        metrics.connections_open.get()
    );
    // A client that keeps talking is not idle.
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    for round in 1..=4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let committed = client.execute(add_txn(&setup, &["a"], 1)).await.unwrap();
        assert_eq!(last_int(&committed.results), round);
    }
    host.shutdown().await;
}

/// A node holds at most `max_connections`: the ones beyond are closed at accept and
/// counted, the ones within keep working, and a slot frees when a connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_closed_at_accept() {
    let setup = setup::<ClockSi>("local");
    let mut config = config(setup.cluster.nodes.len());
    config.limits.max_connections = 8;
    let coordinator = setup.cluster.coordinators[0];
    let addr = config.addresses.peer[coordinator.index()];
    let host = start::<ClockSi>(&setup, config).await;
    let metrics = host.metrics(coordinator).clone();
    // wan_scale 0 and one process: the peers talk through memory, so the limit is all
    // the clients'.
    let client = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    let mut flood = Vec::new();
    for _ in 0..20 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = stream.write_all(&client_hello()).await;
        flood.push(stream);
    }
    let mut closed = 0;
    for stream in &mut flood {
        if closed_within(stream, Duration::from_millis(300)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 13, "20 + 1 connections, 8 slots");
    assert_eq!(metrics.connections_refused.get(), 13);
    assert_eq!(metrics.connections_open.get(), 8);
    let committed = client.execute(add_txn(&setup, &["a"], 1)).await.unwrap();
    assert_eq!(last_int(&committed.results), 1);
    flood.clear();
    assert!(
        eventually(Duration::from_secs(5), || metrics.connections_open.get()
            == 1)
        .await,
        "slots free when connections close"
    );
    let again = Client::connect(
        vec![plain(addr)],
        ClientOptions::new(Security::InsecurePlaintext),
    )
    .await
    .unwrap();
    let committed = again.execute(add_txn(&setup, &["a"], 1)).await.unwrap();
    assert_eq!(last_int(&committed.results), 2);
    host.shutdown().await;
}

/// Durable Tiga over real sockets, with `fsync`: 200 concurrent transactions all commit
/// (the messages a group commit held went out after its sync), and the log's `write`s
/// (counted by the log itself, wherever they are made) are fewer than half its records,
/// which a write per record fails. It does not tell one write per batch from one per
/// handler: a batch is what queued while the node was busy, so on an idle machine every
/// handler is a batch of its own. `node::tests` in `src/node/tests.rs` does, whatever the
/// load: there the batches are queued before the loop runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_batch_share_one_sync() {
    records_of_a_batch_share_one_write(true).await;
}

/// The same without `fsync`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_batch_share_one_write_without_fsync() {
    records_of_a_batch_share_one_write(false).await;
}

async fn records_of_a_batch_share_one_write(fsync: bool) {
    let setup = setup::<Tiga>("local");
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(setup.cluster.nodes.len());
    config.data_dir = Some(dir.path().to_path_buf());
    config.fsync = fsync;
    let coordinator = setup.cluster.coordinators[0];
    let addr = config.addresses.peer[coordinator.index()];
    let host = start::<Tiga>(&setup, config).await;
    let client = std::sync::Arc::new(
        Client::connect(
            vec![plain(addr)],
            ClientOptions::new(Security::InsecurePlaintext),
        )
        .await
        .unwrap(),
    );
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let (client, txn) = (client.clone(), add_txn(&setup, &[&format!("g{i}")], 1));
        tasks.spawn(async move { client.execute(txn).await });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().unwrap();
    }
    let sum = |f: fn(&meridian_server::metrics::NodeMetrics) -> u64| -> u64 {
        setup
            .cluster
            .nodes
            .iter()
            .map(|n| f(host.metrics(n.id)))
            .sum()
    };
    let records = sum(|m| m.records_persisted.get());
    let syncs = sum(|m| m.wal_syncs.get());
    assert!(
        syncs > 0 && 2 * syncs < records,
        "{syncs} syncs for {records} records"
    );
    host.shutdown().await;
}
