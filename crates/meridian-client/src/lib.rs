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
//! * [`ClientError::Refused`] — the coordinator refused this client's certificate in the
//!   TLS handshake: it read nothing, the transaction certainly did not run.
//! * [`ClientError::Aborted`] — the transaction certainly did not commit, for the reason given.
//!
//! Connections are mutual TLS with a certificate of the cluster's CA ([`tls`]), unless the
//! options say [`Security::InsecurePlaintext`]; a refused handshake is `Unreachable`.

pub mod tls;
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
pub use tls::Security;
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
    #[error("refused: {reason}; nothing was run")]
    Refused { reason: String },
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
    /// How long to wait for a connection to one coordinator (TCP, TLS handshake, hello).
    pub connect_timeout: Duration,
    /// TLS credentials, or plaintext: a choice the caller makes, never a default.
    pub security: Security,
}

impl ClientOptions {
    /// 5 s per answer, 2 s per connection, secured as `security` says.
    pub fn new(security: Security) -> ClientOptions {
        ClientOptions {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            security,
        }
    }
}

/// A coordinator: where it listens and its node name (which its certificate must carry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub node: String,
}

impl Endpoint {
    pub fn new(addr: SocketAddr, node: impl Into<String>) -> Endpoint {
        Endpoint {
            addr,
            node: node.into(),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.addr, self.node)
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
    /// Set by the reader, before `closed`, when the coordinator refused the TLS handshake
    /// (under TLS 1.3 the client learns it only at its first read): what it said.
    refused: Arc<Mutex<Option<String>>>,
}

/// An async client of a Meridian cluster.
pub struct Client {
    coordinators: Vec<Endpoint>,
    options: ClientOptions,
    /// Built once from the options' credentials; None for plaintext.
    connector: Option<tls::Connector>,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    next_id: AtomicU64,
}

impl Client {
    /// Connects to the first of `coordinators` that accepts; `Unreachable` if none does
    /// (a refused TLS handshake included), `Protocol` if the credentials are unusable.
    pub async fn connect(
        coordinators: Vec<Endpoint>,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let connector = match &options.security {
            Security::Tls(credentials) => Some(
                credentials
                    .connector()
                    .map_err(|e| ClientError::Protocol(e.to_string()))?,
            ),
            Security::InsecurePlaintext => None,
        };
        let client = Client {
            coordinators,
            options,
            connector,
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
        for endpoint in &self.coordinators {
            let opened = tokio::time::timeout(self.options.connect_timeout, self.open(endpoint))
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connect timed out",
                    ))
                });
            match opened {
                Ok(c) => {
                    let c = Arc::new(c);
                    *slot = Some(c.clone());
                    return Ok(c);
                }
                Err(e) => last_error = format!("{endpoint}: {e}"),
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

    /// A connection to `endpoint`: TCP, the TLS handshake, the hello.
    async fn open(&self, endpoint: &Endpoint) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(endpoint.addr).await?;
        stream.set_nodelay(true)?;
        let stream = tls::connect(&self.connector, &endpoint.node, stream).await?;
        let (read, write) = tokio::io::split(stream);
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
        let refused: Arc<Mutex<Option<String>>> = Arc::default();
        let reader_refused = refused.clone();
        let mut reader = FramedRead::new(read, wire::codec());
        tokio::spawn(async move {
            while let Some(frame) = reader.next().await {
                let frame = match frame {
                    Ok(frame) => frame,
                    Err(e) => {
                        *reader_refused.lock().expect("refused lock") = tls::refusal(&e);
                        break;
                    }
                };
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
            refused,
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
            Ok(Err(_)) => Err(
                match connection.refused.lock().expect("refused lock").take() {
                    // A refused handshake: the coordinator read nothing this client sent.
                    Some(reason) => ClientError::Refused { reason },
                    None => ClientError::Unknown {
                        reason: "connection to the coordinator lost before its answer".into(),
                    },
                },
            ),
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
            let refused = connection.refused.lock().expect("refused lock").clone();
            if let Some(reason) = refused {
                return Err(ClientError::Refused { reason });
            }
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
        match self
            .step(Step::Get {
                txn: self.txn,
                key,
                then: Vec::new(),
            })
            .await?
        {
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
