//! `meridian-server`: the real-process runtime, a second driver of the sans-IO node
//! contract (the simulator is the first). The protocols' state machines run unchanged.
//!
//! * [`host`] — a [`Host`] runs some or all nodes of a cluster in this process: each node
//!   an event loop ([`node`]), wired to in-process nodes by channels and to the others by
//!   TCP under mutual TLS ([`transport`]; certificates from [`pki`]), with WAN emulation
//!   per link, durable logs ([`storage`]) and metrics ([`metrics`]).
//! * [`load`] — the load driver of `meridian demo` and `meridian bench` (open loop with a
//!   cap on outstanding transactions per coordinator), over the sans-IO core and the
//!   results model of `meridian-bench` that the simulator uses too.
//!
//! What differs from the simulator, by necessity: time is the system clock (plus a
//! configured offset per node) instead of a clock model; the network is TCP on loopback
//! with emulated one-way delays (delays under 0.5 ms are not emulated, since tokio's
//! timers tick in milliseconds); loss happens only when a link's queue is full or a
//! connection breaks; there is no fault injection besides killing processes.

pub mod host;
pub mod load;
pub mod metrics;
pub mod node;
pub mod pki;
pub mod storage;
pub mod transport;

pub use host::{Addresses, Host, HostConfig, HostError, LocalClient};
pub use load::{Load, LoadOptions, LoadReport, Target};
pub use meridian_client::Security;
pub use transport::Limits;
