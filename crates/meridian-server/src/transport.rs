//! Links between nodes and the listener that accepts peers and clients.
//!
//! **Outgoing.** Each (sender, receiver) pair with a delay or a socket between them has a
//! link task fed by a bounded queue of `(due, message)`. The task holds each message until
//! its due time (the WAN emulation: the sending node stamps `now + one-way delay`, since
//! the kernel here has no netem), then delivers it: into the receiver's inbox when both live
//! in this process, else as a frame on a TCP connection that the task (re)opens with
//! bounded exponential backoff. A link is FIFO, like the TCP it stands for.
//!
//! **Backpressure.** Inboxes and link queues are bounded. A link task waits when the
//! receiver's inbox is full, and a reader stops reading its socket, so TCP pushes back on
//! the sender's link. The one place that must not wait is a node's event loop (two nodes
//! waiting on each other's full queues would deadlock), so a node that finds a link queue
//! full drops the message and counts it — the network loss every protocol already tolerates.
//!
//! **Security** ([`LinkSecurity`], `meridian_client::tls`). Every connection, a peer's link
//! or a client's, is mutual TLS with certificates of the cluster's CA: a link asks the
//! handshake for the node it dials, and the listener refuses a connection without a
//! certificate of the CA, and a peer hello for node `from` whose certificate does not name
//! `from`. The handshake counts against `hello_timeout`. Plaintext (no encryption, no
//! authentication, every hello believed) only when the host is configured so.
//!
//! **Incoming.** Every connection opens with a [`Hello`]. A peer's frames are decoded as
//! the protocol's messages, a client's as [`RequestFrame`]s. A malformed, truncated or
//! oversized frame closes that one connection with a logged error.
//!
//! **Limits** ([`Limits`]): a node holds at most `max_connections` inbound connections
//! (one more is closed at accept); a connection buffers at most its frame limit (4 KiB
//! before its hello, 1 MiB for a client, 16 MiB for a peer), refused when the length
//! prefix arrives and never reserved ahead of the bytes; a connection that says no hello,
//! stalls inside a frame, or (a client) sends nothing for long is closed. Its buffer goes
//! with it. Only an authenticated peer gets a peer's limits (under plaintext, any hello).

use crate::metrics::NodeMetrics;
use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::{SinkExt, StreamExt};
use meridian_client::tls::{self, PeerCertificate, Stream};
use meridian_client::wire::{self, FrameDecoder, FrameError, Hello, RequestFrame, ResponseFrame};
use meridian_core::txn::{ClientRequest, ClientResponse};
use meridian_core::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

/// What arrives in a node's inbox.
pub enum Inbound<M> {
    Message {
        from: NodeId,
        msg: M,
    },
    Request {
        request: ClientRequest,
        reply: Reply,
    },
}

/// Where a client request's answer goes.
pub enum Reply {
    /// A TCP client: the answer is framed with the client's id on its connection.
    Remote {
        id: u64,
        to: mpsc::Sender<ResponseFrame>,
    },
    /// An in-process caller.
    Local(oneshot::Sender<ClientResponse>),
}

impl Reply {
    /// Delivers the answer; false if the client is gone or not reading.
    pub fn send(self, response: ClientResponse) -> bool {
        match self {
            Reply::Remote { id, to } => to.try_send(ResponseFrame { id, response }).is_ok(),
            Reply::Local(to) => to.send(response).is_ok(),
        }
    }
}

/// A message held on a link until `due`.
pub type Held<M> = (Instant, M);

/// Delays below this are delivered at once: tokio's timers tick in milliseconds, so a
/// shorter sleep would round up to a whole millisecond and overstate the delay.
pub const MIN_EMULATED_DELAY: Duration = Duration::from_micros(500);

async fn hold_until(due: Instant) {
    if due > Instant::now() + MIN_EMULATED_DELAY {
        tokio::time::sleep_until(due).await;
    }
}

/// Delivers held messages from `from` into an in-process receiver's inbox.
pub async fn local_link<M>(
    from: NodeId,
    mut queue: mpsc::Receiver<Held<M>>,
    inbox: mpsc::Sender<Inbound<M>>,
) {
    while let Some((due, msg)) = queue.recv().await {
        hold_until(due).await;
        if inbox.send(Inbound::Message { from, msg }).await.is_err() {
            return;
        }
    }
}

/// Where a TCP link goes.
pub struct Remote {
    pub from: NodeId,
    pub to: NodeId,
    /// The receiver's name: its certificate must carry it.
    pub to_name: String,
    pub addr: SocketAddr,
    pub cluster: String,
    /// None: plaintext.
    pub connector: Option<tls::Connector>,
}

/// How a host's links and listeners are secured, built once from its credentials.
#[derive(Clone, Default)]
pub struct LinkSecurity {
    /// None: plaintext listeners.
    pub acceptor: Option<tls::Acceptor>,
    /// None: plaintext links.
    pub connector: Option<tls::Connector>,
    /// Every node's name by id: what a peer hello's certificate must name.
    pub node_names: Arc<Vec<String>>,
}

/// How long a link waits for its TCP connection and TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Delivers held messages over TCP, reconnecting with bounded exponential backoff.
pub async fn tcp_link<M: Serialize>(
    remote: Remote,
    mut queue: mpsc::Receiver<Held<M>>,
    metrics: Arc<NodeMetrics>,
    stop: CancellationToken,
) {
    let mut backoff = BACKOFF_MIN;
    let mut held: Option<Held<M>> = None;
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            s = tokio::time::timeout(CONNECT_TIMEOUT, connect(&remote)) => s.unwrap_or_else(|_| {
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))
            }),
        };
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(from = %remote.from, to = %remote.to, error = %e, ?backoff, "link connect failed");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        backoff = BACKOFF_MIN;
        NodeMetrics::add(&metrics.reconnects, 1);
        let mut writer = FramedWrite::new(stream, wire::codec());
        let hello = Hello::Peer {
            from: remote.from,
            cluster: remote.cluster.clone(),
        };
        if writer.send(wire::encode(&hello)).await.is_err() {
            continue;
        }
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = pump(&mut queue, &mut held, &mut writer) => r,
        };
        match result {
            Ok(()) => return, // the sending node is gone
            Err(e) => {
                tracing::info!(from = %remote.from, to = %remote.to, error = %e, "link broke; reconnecting")
            }
        }
    }
}

/// A link's connection: TCP, then TLS as the receiver's node.
async fn connect(remote: &Remote) -> std::io::Result<Stream> {
    let tcp = TcpStream::connect(remote.addr).await?;
    tcp.set_nodelay(true)?;
    tls::connect(&remote.connector, &remote.to_name, tcp).await
}

/// Writes held messages in due order, batching those already due into one flush.
async fn pump<M: Serialize>(
    queue: &mut mpsc::Receiver<Held<M>>,
    held: &mut Option<Held<M>>,
    writer: &mut FramedWrite<Stream, tokio_util::codec::LengthDelimitedCodec>,
) -> std::io::Result<()> {
    loop {
        let (due, msg) = match held.take() {
            Some(h) => h,
            None => match queue.recv().await {
                Some(h) => h,
                None => return Ok(()),
            },
        };
        hold_until(due).await;
        writer.feed(wire::encode(&msg)).await?;
        while let Ok((due, msg)) = queue.try_recv() {
            if due > Instant::now() + MIN_EMULATED_DELAY {
                *held = Some((due, msg));
                break;
            }
            writer.feed(wire::encode(&msg)).await?;
        }
        SinkExt::<Bytes>::flush(writer).await?;
    }
}

/// What a node's listener admits. Every bound is per node (per listening port).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Inbound connections open at once, peers and clients together; one more is closed
    /// as soon as it is accepted (and counted in `connections_refused`).
    pub max_connections: usize,
    /// The largest frame a client may send; a larger length prefix closes the connection
    /// when it arrives, before any of the frame is buffered.
    pub max_client_frame_bytes: usize,
    /// The same for a peer (protocol messages, Raft snapshots included).
    pub max_peer_frame_bytes: usize,
    /// A connection must say hello this soon after it opens.
    pub hello_timeout: Duration,
    /// A frame, once its first byte arrived, must be complete this soon.
    pub frame_timeout: Duration,
    /// A client connection that sends nothing this long is closed. Peers have no idle
    /// limit: a quiet protocol is not a dead link, and closing it would lose a message.
    pub client_idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            max_client_frame_bytes: wire::MAX_CLIENT_FRAME_BYTES,
            max_peer_frame_bytes: wire::MAX_FRAME_BYTES,
            hello_timeout: Duration::from_secs(5),
            frame_timeout: Duration::from_secs(10),
            client_idle_timeout: Duration::from_secs(300),
        }
    }
}

/// What a node's listener needs besides its socket.
pub struct Listening<M> {
    pub node: NodeId,
    pub cluster: String,
    pub inbox: mpsc::Sender<Inbound<M>>,
    pub metrics: Arc<NodeMetrics>,
    pub limits: Limits,
    pub security: LinkSecurity,
}

/// Accepts connections for node `node` until `stop`, at most `limits.max_connections` at
/// a time.
pub async fn listen<M: DeserializeOwned + Send + 'static>(
    listener: TcpListener,
    listening: Listening<M>,
    stop: CancellationToken,
) {
    let Listening {
        node,
        cluster,
        inbox,
        metrics,
        limits,
        security,
    } = listening;
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning on the error.
                    tracing::warn!(%node, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            NodeMetrics::add(&metrics.connections_refused, 1);
            tracing::debug!(%node, %peer, "refusing a connection: at the connection limit");
            drop(stream);
            continue;
        };
        NodeMetrics::add(&metrics.connections_accepted, 1);
        let _ = stream.set_nodelay(true);
        let (inbox, metrics, stop, cluster, limits, security) = (
            inbox.clone(),
            metrics.clone(),
            stop.clone(),
            cluster.clone(),
            limits.clone(),
            security.clone(),
        );
        tokio::spawn(async move {
            metrics.connections_open.inc();
            let result = tokio::select! {
                _ = stop.cancelled() => Ok(()),
                r = admit(stream, &cluster, inbox, &limits, &security) => r,
            };
            metrics.connections_open.dec();
            drop(slot);
            match result {
                Ok(()) => {}
                Err(
                    e @ (ConnectionError::NoHello
                    | ConnectionError::Stalled(_)
                    | ConnectionError::Idle(_)),
                ) => {
                    NodeMetrics::add(&metrics.connections_timed_out, 1);
                    tracing::info!(%node, %peer, error = %e, "closing connection");
                }
                Err(e @ (ConnectionError::Handshake(_) | ConnectionError::NotNamed { .. })) => {
                    NodeMetrics::add(&metrics.connections_unauthenticated, 1);
                    tracing::warn!(%node, %peer, error = %e, "refusing a connection");
                }
                Err(e) => {
                    NodeMetrics::add(&metrics.frame_errors, 1);
                    tracing::error!(%node, %peer, error = %e, "closing connection: bad input");
                }
            }
        });
    }
}

/// Why a connection was closed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("peer belongs to cluster `{0}`, this node to `{1}`")]
    WrongCluster(String, String),
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("a peer hello claims node {claimed}, which its certificate does not name")]
    NotNamed { claimed: String },
    #[error("no hello within the deadline")]
    NoHello,
    #[error("a frame began but was not complete within {0:?}")]
    Stalled(Duration),
    #[error("a client sent nothing for {0:?}")]
    Idle(Duration),
}

type Reader = FramedRead<tokio::io::ReadHalf<Stream>, FrameDecoder>;

/// Secures an accepted connection and reads its hello, both within `hello_timeout`, then
/// serves it.
async fn admit<M: DeserializeOwned + Send + 'static>(
    tcp: TcpStream,
    cluster: &str,
    inbox: mpsc::Sender<Inbound<M>>,
    limits: &Limits,
    security: &LinkSecurity,
) -> Result<(), ConnectionError> {
    let deadline = Instant::now() + limits.hello_timeout;
    let (stream, certificate) = match &security.acceptor {
        None => (Box::new(tcp) as Stream, PeerCertificate::plaintext()),
        Some(acceptor) => tokio::time::timeout_at(deadline, acceptor.accept(tcp))
            .await
            .map_err(|_| ConnectionError::NoHello)?
            .map_err(ConnectionError::Handshake)?,
    };
    let (read, write) = tokio::io::split(stream);
    let mut reader = FramedRead::new(read, FrameDecoder::new(wire::MAX_HELLO_BYTES));
    let hello = tokio::time::timeout_at(
        deadline,
        next_frame::<Hello>(&mut reader, limits.frame_timeout),
    )
    .await
    .map_err(|_| ConnectionError::NoHello)?;
    match hello? {
        None => Ok(()),
        Some(Hello::Peer {
            from,
            cluster: theirs,
        }) => {
            if theirs != cluster {
                return Err(ConnectionError::WrongCluster(theirs, cluster.to_string()));
            }
            let claimed = security.node_names.get(from.index());
            if !claimed.is_some_and(|name| certificate.names_node(name)) {
                return Err(ConnectionError::NotNamed {
                    claimed: claimed.cloned().unwrap_or_else(|| from.to_string()),
                });
            }
            reader
                .decoder_mut()
                .set_max_frame_bytes(limits.max_peer_frame_bytes);
            while let Some(msg) = next_frame::<M>(&mut reader, limits.frame_timeout).await? {
                if inbox.send(Inbound::Message { from, msg }).await.is_err() {
                    return Ok(());
                }
            }
            Ok(())
        }
        Some(Hello::Client) => {
            reader
                .decoder_mut()
                .set_max_frame_bytes(limits.max_client_frame_bytes);
            serve_client(reader, write, inbox, limits).await
        }
    }
}

async fn serve_client<M: Send + 'static>(
    mut reader: Reader,
    write: tokio::io::WriteHalf<Stream>,
    inbox: mpsc::Sender<Inbound<M>>,
    limits: &Limits,
) -> Result<(), ConnectionError> {
    let (replies, mut outgoing) = mpsc::channel::<ResponseFrame>(4096);
    let mut writer = FramedWrite::new(write, wire::codec());
    let writer_task = tokio::spawn(async move {
        while let Some(frame) = outgoing.recv().await {
            if writer.send(wire::encode(&frame)).await.is_err() {
                return;
            }
        }
    });
    let result = async {
        loop {
            let frame = tokio::time::timeout(
                limits.client_idle_timeout,
                next_frame::<RequestFrame>(&mut reader, limits.frame_timeout),
            )
            .await
            .map_err(|_| ConnectionError::Idle(limits.client_idle_timeout))??;
            let Some(frame) = frame else { break };
            let reply = Reply::Remote {
                id: frame.id,
                to: replies.clone(),
            };
            let request = frame.request;
            if inbox
                .send(Inbound::Request { request, reply })
                .await
                .is_err()
            {
                break;
            }
        }
        Ok(())
    }
    .await;
    drop(replies);
    // Let answers still owed drain unless the connection was bad.
    if result.is_err() {
        writer_task.abort();
    }
    result
}

/// The next frame decoded as `T`; None at a clean end of stream. A frame whose first byte
/// has arrived must be complete within `frame_timeout` (a sender that stops mid-frame
/// would otherwise hold its connection and buffer for good).
async fn next_frame<T: DeserializeOwned>(
    reader: &mut Reader,
    frame_timeout: Duration,
) -> Result<Option<T>, ConnectionError> {
    // The common case, a frame already buffered or arriving, costs no timer.
    let frame = match reader.next().now_or_never() {
        Some(frame) => frame,
        None => next_frame_timed(reader, frame_timeout).await?,
    };
    match frame {
        None => Ok(None),
        Some(Err(e)) => Err(e.into()),
        Some(Ok(frame)) => Ok(Some(wire::decode(&frame)?)),
    }
}

/// Waits for the next frame, checking a few times per `frame_timeout` whether part of one
/// sits in the buffer, and for how long. (`FramedRead::next` is cancel-safe: what a
/// cancelled poll read stays in the buffer.)
async fn next_frame_timed(
    reader: &mut Reader,
    frame_timeout: Duration,
) -> Result<Option<Result<bytes::BytesMut, FrameError>>, ConnectionError> {
    let check_every = frame_timeout / 4;
    let mut partial_since: Option<Instant> = None;
    loop {
        tokio::select! {
            frame = reader.next() => return Ok(frame),
            _ = tokio::time::sleep(check_every) => {
                if reader.read_buffer().is_empty() {
                    partial_since = None;
                } else if partial_since.get_or_insert_with(Instant::now).elapsed() >= frame_timeout {
                    return Err(ConnectionError::Stalled(frame_timeout));
                }
            }
        }
    }
}
