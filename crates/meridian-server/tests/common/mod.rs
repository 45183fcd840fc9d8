//! Helpers the runtime integration tests share.

use meridian_client::Endpoint;
use meridian_server::Addresses;

/// A coordinator at `addr` for a plaintext client (which checks no node name).
#[allow(dead_code)] // each test binary uses its own subset of these helpers
pub fn plain(addr: std::net::SocketAddr) -> Endpoint {
    Endpoint::new(addr, "coord0")
}

/// Loopback ports for `n` nodes (peer and metrics), below Linux's ephemeral range
/// (32768–60999): a port taken from the ephemeral range by binding port 0 and releasing it
/// can be handed to any outgoing connection (parallel tests open many) before the host
/// binds it. Each candidate range is checked free; the start is spread by pid and a
/// per-process counter so parallel test processes do not pick the same range.
pub fn free_addresses(n: usize) -> Addresses {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let span = 2 * n as u64;
    for _ in 0..500 {
        let draw = u64::from(std::process::id())
            .wrapping_mul(2_654_435_761)
            .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed) * 7_919);
        let base = 10_000 + draw % (22_000 - span);
        let ports: Vec<u16> = (base..base + span).map(|p| p as u16).collect();
        if ports
            .iter()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        {
            let addr = |p: &u16| std::net::SocketAddr::from(([127, 0, 0, 1], *p));
            return Addresses::same(
                ports[..n].iter().map(addr).collect(),
                ports[n..].iter().map(addr).collect(),
            );
        }
    }
    panic!("no free port range below the ephemeral range");
}
