//! How a responder is run, and what it counts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use crate::eff::EffService;

/// How to run a responder.
#[derive(Debug, Clone)]
pub struct ResponderConfig {
    /// Control address (TCP); test sockets bind to the same IP.
    pub listen: SocketAddr,
    /// How long a session may stay silent between requests before it is closed.
    pub idle_timeout: Duration,
    /// Receive buffer for UDP test sockets unless the client asks for one, bytes.
    pub default_recv_buffer: usize,
    /// Free text sent in the hello, e.g. "vlbiflow 0.1.0".
    pub software: String,
    /// Most control sessions served at once; a client beyond them gets an error reply to its hello
    /// saying the responder is busy.
    pub max_sessions: usize,
    /// Most memory one test may reserve, bytes: packet statistics ([`BYTES_PER_PACKET`](crate::stats::BYTES_PER_PACKET) per
    /// announced packet), receive buffers and the kernel socket buffers it asks for. A larger request
    /// is refused with an error naming what it needs and the most it may ask for.
    pub max_test_memory: u64,
    /// Most memory all running tests together may reserve, bytes. A test that does not fit in what
    /// the others leave is refused (try again later).
    pub memory_budget: u64,
    /// When set, control connections from other addresses are closed at once (a mesh agent's
    /// responder serves only the mesh's hosts). None: anyone.
    pub allow: Option<Vec<std::net::IpAddr>>,
    /// Address blocks control connections may come from (`net responder --allow ADDR/PREFIX`); with
    /// [`allow`](Self::allow), an address in either passes. Empty (and `allow` None): anyone.
    pub allow_blocks: vlbiflow_guard::net::AllowList,
    /// The receiving end of transport-efficiency tests ([`crate::eff`]); None: the probe lists every
    /// transport as unavailable and a setup is refused.
    pub efficiency: Option<Arc<dyn EffService>>,
}

impl ResponderConfig {
    /// Defaults for `listen`: 60 s idle timeout, 8 MiB receive buffers, 16 sessions, 2 GiB per test
    /// (about 38 million packets) and 4 GiB for all tests together.
    pub fn new(listen: SocketAddr) -> Self {
        ResponderConfig {
            listen,
            idle_timeout: Duration::from_secs(60),
            default_recv_buffer: 8 << 20,
            software: format!("vlbiflow-net {}", env!("CARGO_PKG_VERSION")),
            max_sessions: 16,
            max_test_memory: 2 << 30,
            memory_budget: 4 << 30,
            allow: None,
            allow_blocks: vlbiflow_guard::net::AllowList::default(),
            efficiency: None,
        }
    }
}

/// What the responder has seen, for logs and tests.
#[derive(Debug, Default)]
pub struct ResponderCounters {
    /// Control connections accepted.
    pub sessions: AtomicU64,
    /// Tests completed with a result sent.
    pub tests: AtomicU64,
    /// Tests abandoned (client vanished, timeout, protocol error).
    pub aborted: AtomicU64,
    /// Invalid requests on control connections.
    pub bad_requests: AtomicU64,
    /// Datagrams on test ports that were not packets of the running test.
    pub foreign_datagrams: AtomicU64,
    /// Control connections turned away because [`ResponderConfig::max_sessions`] were running.
    pub refused_sessions: AtomicU64,
    /// Tests refused because they would reserve more memory than allowed.
    pub refused_tests: AtomicU64,
    /// Sessions being served now.
    pub active_sessions: AtomicUsize,
    /// Memory reserved by the tests running now, bytes.
    pub reserved_bytes: AtomicU64,
}
