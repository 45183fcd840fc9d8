//! Per-node metrics, served in the Prometheus text format (and a JSON `/status`) over a
//! minimal HTTP/1.0 responder: one GET per connection, no keep-alive. A full HTTP stack
//! would be a large dependency for two fixed pages.
//!
//! The metrics themselves are `prometheus-client`'s (the Prometheus project's own Rust
//! client, maintained under its GitHub organisation): it writes the `# HELP`/`# TYPE`
//! lines, the `_total` suffix of counters and the histogram buckets of the exposition
//! format for us, and its counters are lock-free atomics, as the hand-rolled ones were.
//! The older `prometheus` crate would do too, but it keeps a global default registry and
//! pulls in protobuf; each node here has its own registry, served on its own port.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A label set: `(name, value)` pairs.
type Labels = Vec<(String, String)>;

macro_rules! counters {
    ($($name:ident: $help:literal),* $(,)?) => {
        /// One node's metrics. The counters are monotone; `up`, `recovering`,
        /// `shard_leader` and `connections_open` are the node's current state.
        #[derive(Debug)]
        pub struct NodeMetrics {
            pub node: String,
            pub protocol: String,
            /// The topology's name and the WAN scale the host runs with, reported by
            /// `/status` so that a remote client labels its run with what really runs.
            pub topology: String,
            pub wan_scale: f64,
            /// Set while the node's event loop runs.
            pub up: AtomicBool,
            /// Set while the node reads and replays its durable log, before its loop runs.
            pub recovering: AtomicBool,
            /// The node id this node believes leads its shard; `NO_LEADER` if none.
            pub shard_leader: AtomicU64,
            /// Inbound connections open now.
            pub connections_open: Gauge<i64, AtomicI64>,
            /// The protocol's own counters (`ctx.count`), as the simulator reports them;
            /// the node loop publishes its sums here after each event that counted.
            pub protocol_counters: Family<Labels, Counter>,
            /// Seconds from a client request's arrival to its outcome, by outcome.
            pub txn_latency: Family<Labels, Histogram, fn() -> Histogram>,
            /// `txn_latency`'s committed, aborted and unknown histograms (shared handles),
            /// so an outcome neither builds labels nor takes the family's lock.
            latency_by_outcome: [Histogram; 3],
            up_gauge: Gauge<i64, AtomicI64>,
            leader_gauge: Gauge<i64, AtomicI64>,
            resident_gauge: Gauge<i64, AtomicI64>,
            registry: Registry,
            $(#[doc = $help] pub $name: Counter,)*
        }

        impl NodeMetrics {
            fn register_counters(&mut self) {
                $(
                    self.registry.register(
                        concat!("meridian_", stringify!($name)),
                        $help,
                        self.$name.clone(),
                    );
                )*
            }

            fn with_names(node: &str, protocol: &str, topology: &str, wan_scale: f64) -> NodeMetrics {
                let labels = [("node", node), ("protocol", protocol)]
                    .map(|(k, v)| (Cow::Borrowed(k), Cow::Owned(v.to_string())));
                NodeMetrics {
                    node: node.to_string(),
                    protocol: protocol.to_string(),
                    topology: topology.to_string(),
                    wan_scale,
                    up: AtomicBool::new(false),
                    recovering: AtomicBool::new(false),
                    shard_leader: AtomicU64::new(NO_LEADER),
                    connections_open: Gauge::default(),
                    protocol_counters: Family::default(),
                    txn_latency: Family::new_with_constructor(latency_histogram),
                    latency_by_outcome: [latency_histogram(), latency_histogram(), latency_histogram()],
                    up_gauge: Gauge::default(),
                    leader_gauge: Gauge::default(),
                    resident_gauge: Gauge::default(),
                    registry: Registry::with_labels(labels.into_iter()),
                    $($name: Counter::default(),)*
                }
            }
        }
    };
}

counters! {
    messages_sent: "Protocol messages this node handed to its links",
    messages_received: "Protocol messages delivered to this node",
    messages_dropped: "Messages dropped because a link's queue was full (backpressure)",
    timers_fired: "Timers that fired",
    client_requests: "Client requests handed to this node",
    committed: "Transactions this node answered as committed",
    aborted: "Transactions this node answered as aborted",
    unknown: "Transactions this node answered as unknown",
    responses_dropped: "Responses dropped because the client's connection was full or gone",
    frame_errors: "Connections closed for a malformed, truncated or oversized frame",
    connections_accepted: "Inbound connections accepted",
    connections_refused: "Inbound connections closed at once: the node was at its connection limit",
    connections_timed_out: "Inbound connections closed for silence (idle, or stalled inside a frame)",
    connections_unauthenticated: "Inbound connections refused in the TLS handshake (no certificate of the cluster's CA) or for a peer hello its certificate does not name",
    reconnects: "Outbound link connections (re)established",
    records_persisted: "Durable records written (checkpoints included)",
    bytes_persisted: "Bytes written to the durable log",
    wal_syncs: "Durable log syncs: one write (and with fsync one fsync) per batch of handlers that wrote records (group commit)",
    records_recovered: "Durable records read back at start",
}

/// `shard_leader` when the protocol names no leader.
pub const NO_LEADER: u64 = u64::MAX;

/// Transaction latency buckets: 0.5 ms to about 65 s, doubling (WAN round trips are
/// 10–300 ms; the tail reaches the client timeouts of seconds).
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

impl Default for NodeMetrics {
    fn default() -> NodeMetrics {
        NodeMetrics::new("", "")
    }
}

impl NodeMetrics {
    pub fn new(node: &str, protocol: &str) -> NodeMetrics {
        NodeMetrics::for_run(node, protocol, "", 0.0)
    }

    /// The same, labelled with the run's topology and WAN scale for `/status`.
    pub fn for_run(node: &str, protocol: &str, topology: &str, wan_scale: f64) -> NodeMetrics {
        let mut metrics = NodeMetrics::with_names(node, protocol, topology, wan_scale);
        metrics.register_counters();
        for (i, outcome) in ["committed", "aborted", "unknown"].into_iter().enumerate() {
            metrics.latency_by_outcome[i] = metrics
                .txn_latency
                .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
                .clone();
        }
        let registry = &mut metrics.registry;
        registry.register(
            "meridian_up",
            "Whether the node's event loop runs",
            metrics.up_gauge.clone(),
        );
        registry.register(
            "meridian_shard_leader",
            "The node id this node believes leads its shard (-1: none)",
            metrics.leader_gauge.clone(),
        );
        registry.register(
            "meridian_connections_open",
            "Inbound connections open now",
            metrics.connections_open.clone(),
        );
        registry.register(
            "meridian_protocol_events",
            "What the protocol counted (ctx.count), by name",
            metrics.protocol_counters.clone(),
        );
        registry.register(
            "meridian_txn_latency_seconds",
            "Seconds from a client request's arrival at this coordinator to its outcome",
            metrics.txn_latency.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident set size of the process",
            metrics.resident_gauge.clone(),
        );
        metrics
    }

    pub fn add(counter: &Counter, n: u64) {
        counter.inc_by(n);
    }

    /// Records one transaction's outcome and its latency at this coordinator.
    pub fn observe_outcome(&self, outcome: &'static str, latency: Duration) {
        let (counter, i) = match outcome {
            "committed" => (&self.committed, 0),
            "aborted" => (&self.aborted, 1),
            _ => (&self.unknown, 2),
        };
        counter.inc();
        self.latency_by_outcome[i].observe(latency.as_secs_f64());
    }

    /// The Prometheus text exposition of this node and the process.
    pub fn render(&self) -> String {
        self.up_gauge
            .set(i64::from(self.up.load(Ordering::Relaxed)));
        self.leader_gauge
            .set(match self.shard_leader.load(Ordering::Relaxed) {
                NO_LEADER => -1,
                id => id as i64,
            });
        if let Some(rss) = resident_bytes() {
            self.resident_gauge.set(rss as i64);
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// Adds a batch's protocol counts. `counters` keeps each name's counter (a shared
    /// handle), so only a name's first count builds its labels and takes the family's lock.
    pub fn add_protocol_counters(
        &self,
        sums: &mut FxHashMap<&'static str, u64>,
        counters: &mut FxHashMap<&'static str, Counter>,
    ) {
        for (name, by) in sums.drain() {
            counters
                .entry(name)
                .or_insert_with(|| {
                    self.protocol_counters
                        .get_or_create(&vec![("name".to_string(), name.to_string())])
                        .clone()
                })
                .inc_by(by);
        }
    }

    /// What the node is doing: `recovering` (replaying its durable log), `up` (its loop
    /// runs) or `starting`/`stopped` (neither). Protocol-level recovery (a view change, a
    /// replica catching up) is not visible here: the node contract exposes only the
    /// leader a node believes in.
    pub fn state(&self) -> &'static str {
        if self.recovering.load(Ordering::Relaxed) {
            "recovering"
        } else if self.up.load(Ordering::Relaxed) {
            "up"
        } else {
            "starting"
        }
    }

    /// A JSON object for `meridian cluster status`.
    pub fn status_json(&self) -> String {
        serde_json::json!({
            "node": self.node,
            "protocol": self.protocol,
            "topology": self.topology,
            "wan_scale": self.wan_scale,
            "state": self.state(),
            "up": self.up.load(Ordering::Relaxed),
            "pid": std::process::id(),
            "committed": self.committed.get(),
            "records_recovered": self.records_recovered.get(),
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
                "/metrics" => (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    metrics.render(),
                ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_typed_counters_are_totals_and_latency_is_a_histogram() {
        let metrics = NodeMetrics::for_run("coord0", "tiga", "local", 0.0);
        NodeMetrics::add(&metrics.committed, 0);
        metrics.observe_outcome("committed", Duration::from_millis(3));
        metrics.observe_outcome("aborted", Duration::from_millis(300));
        let mut counts = FxHashMap::default();
        counts.insert("fast_path", 2);
        let mut counters = FxHashMap::default();
        metrics.add_protocol_counters(&mut counts, &mut counters);
        counts.insert("fast_path", 1);
        metrics.add_protocol_counters(&mut counts, &mut counters);
        let text = metrics.render();
        for needle in [
            "# TYPE meridian_committed counter",
            "meridian_committed_total{node=\"coord0\",protocol=\"tiga\"} 1",
            "meridian_aborted_total{node=\"coord0\",protocol=\"tiga\"} 1",
            "# TYPE meridian_txn_latency_seconds histogram",
            "meridian_txn_latency_seconds_bucket{node=\"coord0\",protocol=\"tiga\",le=\"0.004\",outcome=\"committed\"} 1",
            "meridian_txn_latency_seconds_count{node=\"coord0\",protocol=\"tiga\",outcome=\"aborted\"} 1",
            "meridian_protocol_events_total{node=\"coord0\",protocol=\"tiga\",name=\"fast_path\"} 3",
            "# TYPE meridian_up gauge",
        ] {
            assert!(text.contains(needle), "{needle} in:\n{text}");
        }
        assert!(!text.contains(".."), "{text}");
    }

    #[test]
    fn status_says_recovering_while_the_log_replays() {
        let metrics = NodeMetrics::new("shard0/replica0", "tiga");
        assert_eq!(metrics.state(), "starting");
        metrics.recovering.store(true, Ordering::Relaxed);
        let status: serde_json::Value = serde_json::from_str(&metrics.status_json()).unwrap();
        assert_eq!(status["state"], "recovering");
        metrics.recovering.store(false, Ordering::Relaxed);
        metrics.up.store(true, Ordering::Relaxed);
        assert_eq!(metrics.state(), "up");
    }
}
