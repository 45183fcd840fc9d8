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
//! **Incoming.** Every connection opens with a [`Hello`]. A peer's frames are decoded as
//! the protocol's messages, a client's as [`RequestFrame`]s. A malformed, truncated or
//! oversized frame closes that one connection with a logged error.

use crate::metrics::NodeMetrics;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use meridian_client::wire::{self, FrameError, Hello, RequestFrame, ResponseFrame};
use meridian_core::txn::{ClientRequest, ClientResponse};
use meridian_core::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncRead;
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
    pub addr: SocketAddr,
    pub cluster: String,
}

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
            s = TcpStream::connect(remote.addr) => s,
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
        let _ = stream.set_nodelay(true);
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

/// Writes held messages in due order, batching those already due into one flush.
async fn pump<M: Serialize>(
    queue: &mut mpsc::Receiver<Held<M>>,
    held: &mut Option<Held<M>>,
    writer: &mut FramedWrite<TcpStream, tokio_util::codec::LengthDelimitedCodec>,
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

/// Accepts connections for node `node` until `stop`.
pub async fn listen<M: DeserializeOwned + Send + 'static>(
    listener: TcpListener,
    node: NodeId,
    cluster: String,
    inbox: mpsc::Sender<Inbound<M>>,
    metrics: Arc<NodeMetrics>,
    stop: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(%node, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        NodeMetrics::add(&metrics.connections_accepted, 1);
        let _ = stream.set_nodelay(true);
        let (inbox, metrics, stop, cluster) = (
            inbox.clone(),
            metrics.clone(),
            stop.clone(),
            cluster.clone(),
        );
        tokio::spawn(async move {
            let result = tokio::select! {
                _ = stop.cancelled() => Ok(()),
                r = serve_connection(stream, &cluster, inbox) => r,
            };
            if let Err(e) = result {
                NodeMetrics::add(&metrics.frame_errors, 1);
                tracing::error!(%node, %peer, error = %e, "closing connection: bad input");
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
    #[error("no hello within the deadline")]
    NoHello,
}

async fn serve_connection<M: DeserializeOwned + Send + 'static>(
    stream: TcpStream,
    cluster: &str,
    inbox: mpsc::Sender<Inbound<M>>,
) -> Result<(), ConnectionError> {
    let (read, write) = stream.into_split();
    let mut reader = FramedRead::new(read, wire::codec());
    let hello = tokio::time::timeout(Duration::from_secs(10), next_frame::<Hello, _>(&mut reader))
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
            while let Some(msg) = next_frame::<M, _>(&mut reader).await? {
                if inbox.send(Inbound::Message { from, msg }).await.is_err() {
                    return Ok(());
                }
            }
            Ok(())
        }
        Some(Hello::Client) => {
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
                while let Some(frame) = next_frame::<RequestFrame, _>(&mut reader).await? {
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
    }
}

/// The next frame decoded as `T`; None at a clean end of stream.
async fn next_frame<T: DeserializeOwned, R: AsyncRead + Unpin>(
    reader: &mut FramedRead<R, tokio_util::codec::LengthDelimitedCodec>,
) -> Result<Option<T>, FrameError> {
    match reader.next().await {
        None => Ok(None),
        Some(Err(e)) => Err(wire::codec_error(e)),
        Some(Ok(frame)) => wire::decode(&frame).map(Some),
    }
}
