//! Per-node counters, served in Prometheus text format (and a JSON `/status`) over a
//! minimal HTTP/1.0 responder: one GET per connection, no keep-alive. A full HTTP stack
//! would be a large dependency for two fixed pages.

use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

macro_rules! counters {
    ($($name:ident: $help:literal),* $(,)?) => {
        /// One node's counters; every field is a monotone counter unless named `_now`.
        #[derive(Debug, Default)]
        pub struct NodeMetrics {
            pub node: String,
            pub protocol: String,
            /// The topology's name and the WAN scale the host runs with, reported by
            /// `/status` so that a remote client labels its run with what really runs.
            pub topology: String,
            pub wan_scale: f64,
            /// Set while the node's event loop runs.
            pub up: AtomicBool,
            /// The node id this node believes leads its shard; `NO_LEADER` if none.
            pub shard_leader: AtomicU64,
            /// The protocol's own counters (`ctx.count`), as the simulator reports them;
            /// the node loop publishes its sums here after each event that counted.
            pub protocol_counters: Mutex<BTreeMap<&'static str, u64>>,
            $(#[doc = $help] pub $name: AtomicU64,)*
        }

        impl NodeMetrics {
            fn render_counters(&self, out: &mut String) {
                let node = &self.node;
                $(
                    let _ = writeln!(out, "# HELP meridian_{} {}", stringify!($name), $help);
                    let _ = writeln!(
                        out,
                        "meridian_{}{{node=\"{node}\"}} {}",
                        stringify!($name),
                        self.$name.load(Ordering::Relaxed)
                    );
                )*
            }
        }
    };
}

counters! {
    messages_sent: "Protocol messages this node handed to its links.",
    messages_received: "Protocol messages delivered to this node.",
    messages_dropped: "Messages dropped because a link's queue was full (backpressure).",
    timers_fired: "Timers that fired.",
    client_requests: "Client requests handed to this node.",
    committed: "Transactions this node answered as committed.",
    aborted: "Transactions this node answered as aborted.",
    unknown: "Transactions this node answered as unknown.",
    responses_dropped: "Responses dropped because the client's connection was full or gone.",
    frame_errors: "Connections closed for a malformed, truncated or oversized frame.",
    connections_accepted: "Inbound connections accepted.",
    reconnects: "Outbound link connections (re)established.",
    records_persisted: "Durable records written (checkpoints included).",
    bytes_persisted: "Bytes written to the durable log.",
    records_recovered: "Durable records read back at start.",
}

/// `shard_leader` when the protocol names no leader.
pub const NO_LEADER: u64 = u64::MAX;

impl NodeMetrics {
    pub fn new(node: &str, protocol: &str) -> NodeMetrics {
        NodeMetrics {
            node: node.to_string(),
            protocol: protocol.to_string(),
            shard_leader: AtomicU64::new(NO_LEADER),
            ..NodeMetrics::default()
        }
    }

    /// The same, labelled with the run's topology and WAN scale for `/status`.
    pub fn for_run(node: &str, protocol: &str, topology: &str, wan_scale: f64) -> NodeMetrics {
        NodeMetrics {
            topology: topology.to_string(),
            wan_scale,
            ..NodeMetrics::new(node, protocol)
        }
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of this node and the process.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let up = u8::from(self.up.load(Ordering::Relaxed));
        let _ = writeln!(
            out,
            "# HELP meridian_up Whether the node's event loop runs."
        );
        let _ = writeln!(
            out,
            "meridian_up{{node=\"{}\",protocol=\"{}\"}} {up}",
            self.node, self.protocol
        );
        self.render_counters(&mut out);
        self.render_protocol_counters(&mut out);
        if let Some(rss) = resident_bytes() {
            let _ = writeln!(
                out,
                "# HELP process_resident_memory_bytes Resident set size."
            );
            let _ = writeln!(out, "process_resident_memory_bytes {rss}");
        }
        out
    }

    /// Adds an event's protocol counts (one uncontended lock per event that counted).
    pub fn add_protocol_counters(&self, sums: &mut FxHashMap<&'static str, u64>) {
        if sums.is_empty() {
            return;
        }
        let mut counters = self.protocol_counters.lock().expect("metrics lock");
        for (name, by) in sums.drain() {
            *counters.entry(name).or_default() += by;
        }
    }

    fn render_protocol_counters(&self, out: &mut String) {
        let counters = self.protocol_counters.lock().expect("metrics lock");
        if counters.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "# HELP meridian_protocol_events_total What the protocol counted (ctx.count), by name."
        );
        let _ = writeln!(out, "# TYPE meridian_protocol_events_total counter");
        for (name, value) in counters.iter() {
            let _ = writeln!(
                out,
                "meridian_protocol_events_total{{node=\"{}\",name=\"{name}\"}} {value}",
                self.node
            );
        }
    }

    /// A JSON object for `meridian cluster status`.
    pub fn status_json(&self) -> String {
        serde_json::json!({
            "node": self.node,
            "protocol": self.protocol,
            "topology": self.topology,
            "wan_scale": self.wan_scale,
            "up": self.up.load(Ordering::Relaxed),
            "pid": std::process::id(),
            "committed": self.committed.load(Ordering::Relaxed),
            "shard_leader": match self.shard_leader.load(Ordering::Relaxed) {
                NO_LEADER => None,
                id => Some(id),
            },
        })
        .to_string()
    }
}

/// The process's resident set size, from `/proc/self/statm` (Linux); None elsewhere.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Serves `/metrics` and `/status` of `metrics` on `listener` until `stop`.
pub async fn serve(listener: TcpListener, metrics: Arc<NodeMetrics>, stop: CancellationToken) {
    loop {
        let (mut stream, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(node = %metrics.node, error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let Some(head) = read_head(&mut stream).await else {
                return;
            };
            let path = head.split_whitespace().nth(1).unwrap_or("/");
            let (status, kind, body) = match path {
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                "/status" => ("200 OK", "application/json", metrics.status_json()),
                _ => (
                    "404 Not Found",
                    "text/plain",
                    "try /metrics or /status\n".into(),
                ),
            };
            let response = format!(
                "HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Reads a request head (up to the blank line, at most 4 KiB, within 2 s).
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 4096 {
        let n = tokio::time::timeout_at(deadline, stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}
