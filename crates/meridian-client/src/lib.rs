//! `meridian-client`: the async client of a Meridian cluster, and the wire format it shares
//! with the servers ([`wire`]).
//!
//! A [`Client`] talks to one coordinator at a time (the first of its list that accepts a
//! connection, failing over to the next when that one dies). It runs one-shot transactions
//! ([`Client::execute`]) and interactive ones ([`Client::begin`] → [`Session`]). Many
//! requests may be outstanding on one connection; each carries an id the coordinator echoes.
//!
//! The errors say what the caller can conclude:
//! * [`ClientError::Unreachable`] — no coordinator accepted a connection: nothing was sent,
//!   the transaction certainly did not run (a dead cluster, or wrong addresses).
//! * [`ClientError::Timeout`] — the request was sent and no answer came in time: it may or
//!   may not commit.
//! * [`ClientError::Unknown`] — the connection broke after sending, or the coordinator
//!   itself reported the outcome unknown: it may or may not have committed.
//! * [`ClientError::Aborted`] — the transaction certainly did not commit, for the reason given.

pub mod wire;

use futures_util::{SinkExt, StreamExt};
use meridian_core::txn::{
    AbortReason, ClientRequest, ClientResponse, CommitPath, Key, Outcome, PieceResult, Step, Txn,
    Value,
};
use meridian_core::{Timestamp, TxnId};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};
use wire::{Hello, RequestFrame, ResponseFrame};

/// What a client call can fail with (see the crate docs for what each lets you conclude).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("cluster unreachable: no coordinator accepted a connection (tried {tried}; last error: {last_error}); nothing was sent")]
    Unreachable { tried: String, last_error: String },
    #[error("timed out after {after:?} waiting for the coordinator; the transaction may or may not have committed")]
    Timeout { after: Duration },
    #[error("outcome unknown: {reason}; the transaction may or may not have committed")]
    Unknown { reason: String },
    #[error("aborted: {0}")]
    Aborted(AbortReason),
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// A committed transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// One result per piece (empty for interactive transactions).
    pub results: Vec<PieceResult>,
    pub commit_ts: Option<Timestamp>,
    pub path: CommitPath,
}

/// Turns an outcome into the client's result.
pub fn outcome_result(outcome: Outcome) -> Result<Committed, ClientError> {
    match outcome {
        Outcome::Committed {
            results,
            commit_ts,
            path,
        } => Ok(Committed {
            results,
            commit_ts,
            path,
        }),
        Outcome::Aborted { reason } => Err(ClientError::Aborted(reason)),
        Outcome::Unknown { reason } => Err(ClientError::Unknown { reason }),
    }
}

/// Anything that hands a request to a coordinator and returns its answer: a [`Client`]
/// over TCP, or an in-process handle of the runtime. Load generators are written against it.
pub trait Submit: Send + Sync {
    fn submit(
        &self,
        request: ClientRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ClientResponse, ClientError>> + Send + '_>>;
}

/// How a [`Client`] behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long to wait for each answer.
    pub timeout: Duration,
    /// How long to wait for a TCP connection to one coordinator.
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<ClientResponse>>>>;

/// One live connection: a writer task fed by `requests`, a reader task that completes
/// `pending`. When the reader ends, every pending request's sender is dropped.
struct Connection {
    requests: mpsc::Sender<RequestFrame>,
    pending: Pending,
    /// Set by the reader when the connection ends, before it clears `pending`.
    closed: Arc<AtomicBool>,
}

/// An async client of a Meridian cluster.
pub struct Client {
    coordinators: Vec<SocketAddr>,
    options: ClientOptions,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    next_id: AtomicU64,
}

impl Client {
    /// Connects to the first of `coordinators` that accepts; `Unreachable` if none does.
    pub async fn connect(
        coordinators: Vec<SocketAddr>,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let client = Client {
            coordinators,
            options,
            connection: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(0),
        };
        client.live_connection().await?;
        Ok(client)
    }

    /// The current connection, or a new one if it broke.
    async fn live_connection(&self) -> Result<Arc<Connection>, ClientError> {
        let mut slot = self.connection.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.closed.load(Ordering::SeqCst)) {
            return Ok(c.clone());
        }
        let mut last_error = "no coordinator address given".to_string();
        for addr in &self.coordinators {
            match self.open(*addr).await {
                Ok(c) => {
                    let c = Arc::new(c);
                    *slot = Some(c.clone());
                    return Ok(c);
                }
                Err(e) => last_error = format!("{addr}: {e}"),
            }
        }
        let tried = self
            .coordinators
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        Err(ClientError::Unreachable { tried, last_error })
    }

    async fn open(&self, addr: SocketAddr) -> std::io::Result<Connection> {
        let stream = tokio::time::timeout(self.options.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        let mut writer = FramedWrite::new(write, wire::codec());
        writer.send(wire::encode(&Hello::Client)).await?;
        let (requests, mut outgoing) = mpsc::channel::<RequestFrame>(1024);
        let pending: Pending = Arc::default();
        tokio::spawn(async move {
            while let Some(frame) = outgoing.recv().await {
                if writer.feed(wire::encode(&frame)).await.is_err() {
                    return;
                }
                while let Ok(frame) = outgoing.try_recv() {
                    if writer.feed(wire::encode(&frame)).await.is_err() {
                        return;
                    }
                }
                if SinkExt::<bytes::Bytes>::flush(&mut writer).await.is_err() {
                    return;
                }
            }
        });
        let reader_pending = pending.clone();
        let closed = Arc::new(AtomicBool::new(false));
        let reader_closed = closed.clone();
        let mut reader = FramedRead::new(read, wire::codec());
        tokio::spawn(async move {
            while let Some(Ok(frame)) = reader.next().await {
                let Ok(response) = wire::decode::<ResponseFrame>(&frame) else {
                    break;
                };
                let waiter = reader_pending
                    .lock()
                    .expect("pending lock")
                    .remove(&response.id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(response.response);
                }
            }
            // Dropping the senders tells every waiter the connection is gone.
            reader_closed.store(true, Ordering::SeqCst);
            reader_pending.lock().expect("pending lock").clear();
        });
        Ok(Connection {
            requests,
            pending,
            closed,
        })
    }

    /// Sends one request and waits for its answer.
    pub async fn request(&self, request: ClientRequest) -> Result<ClientResponse, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (connection, rx) = self.register(id).await?;
        if connection
            .requests
            .send(RequestFrame { id, request })
            .await
            .is_err()
        {
            connection.pending.lock().expect("pending lock").remove(&id);
            return Err(ClientError::Unknown {
                reason: "connection to the coordinator closed while sending".into(),
            });
        }
        match tokio::time::timeout(self.options.timeout, rx).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(ClientError::Unknown {
                reason: "connection to the coordinator lost before its answer".into(),
            }),
            Err(_) => {
                connection.pending.lock().expect("pending lock").remove(&id);
                Err(ClientError::Timeout {
                    after: self.options.timeout,
                })
            }
        }
    }

    /// A live connection with a waiter for request `id`. A connection found closed after
    /// registering (the reader ended meanwhile) is replaced once: nothing was sent on it.
    async fn register(
        &self,
        id: u64,
    ) -> Result<(Arc<Connection>, oneshot::Receiver<ClientResponse>), ClientError> {
        for _ in 0..2 {
            let connection = self.live_connection().await?;
            let (tx, rx) = oneshot::channel();
            connection
                .pending
                .lock()
                .expect("pending lock")
                .insert(id, tx);
            if !connection.closed.load(Ordering::SeqCst) {
                return Ok((connection, rx));
            }
            connection.pending.lock().expect("pending lock").remove(&id);
        }
        Err(ClientError::Unreachable {
            tried: self.coordinators.len().to_string() + " coordinator(s)",
            last_error: "every new connection closed at once".into(),
        })
    }

    /// Runs a one-shot transaction.
    pub async fn execute(&self, txn: Txn) -> Result<Committed, ClientError> {
        match self.request(ClientRequest::OneShot(txn)).await? {
            ClientResponse::Outcome(outcome) => outcome_result(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// Opens an interactive transaction. `latest_seen` is the largest commit timestamp this
    /// client has observed (for session consistency), if any.
    pub async fn begin(&self, latest_seen: Option<Timestamp>) -> Result<Session<'_>, ClientError> {
        let step = Step::Begin { latest_seen };
        match self.request(ClientRequest::Interactive(step)).await? {
            ClientResponse::Began(txn) => Ok(Session { client: self, txn }),
            ClientResponse::Outcome(outcome) => outcome_result(outcome)
                .and_then(|_| Err(ClientError::Protocol("Begin answered with a commit".into()))),
            other => Err(unexpected(&other)),
        }
    }
}

impl Submit for Client {
    fn submit(
        &self,
        request: ClientRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ClientResponse, ClientError>> + Send + '_>> {
        Box::pin(self.request(request))
    }
}

fn unexpected(response: &ClientResponse) -> ClientError {
    ClientError::Protocol(format!("unexpected answer {response:?}"))
}

/// An interactive transaction in progress.
pub struct Session<'c> {
    client: &'c Client,
    txn: TxnId,
}

impl Session<'_> {
    /// The transaction's id.
    pub fn txn(&self) -> TxnId {
        self.txn
    }

    async fn step(&self, step: Step) -> Result<ClientResponse, ClientError> {
        match self
            .client
            .request(ClientRequest::Interactive(step))
            .await?
        {
            ClientResponse::Outcome(outcome) => {
                outcome_result(outcome)?;
                Err(ClientError::Protocol(
                    "a step answered with a commit".into(),
                ))
            }
            other => Ok(other),
        }
    }

    /// Reads `key` inside the transaction.
    pub async fn get(&self, key: Key) -> Result<Option<Value>, ClientError> {
        match self.step(Step::Get { txn: self.txn, key }).await? {
            ClientResponse::Read(value) => Ok(value),
            other => Err(unexpected(&other)),
        }
    }

    /// Buffers a write of `key`.
    pub async fn put(&self, key: Key, value: Value) -> Result<(), ClientError> {
        match self
            .step(Step::Put {
                txn: self.txn,
                key,
                value,
            })
            .await?
        {
            ClientResponse::Written => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Commits; `Aborted` if the protocol refused.
    pub async fn commit(self) -> Result<Committed, ClientError> {
        let step = ClientRequest::Interactive(Step::Commit { txn: self.txn });
        match self.client.request(step).await? {
            ClientResponse::Outcome(outcome) => outcome_result(outcome),
            other => Err(unexpected(&other)),
        }
    }

    /// Abandons the transaction.
    pub async fn abort(self) -> Result<(), ClientError> {
        let step = ClientRequest::Interactive(Step::Abort { txn: self.txn });
        match self.client.request(step).await? {
            ClientResponse::Outcome(_) => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}
