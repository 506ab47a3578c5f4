//! How a responder is run, and what it counts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_guard::gate::GateConfig;

use crate::eff::EffService;

/// How to run a responder.
#[derive(Debug, Clone)]
pub struct ResponderConfig {
    /// Control address (TCP); test sockets bind to the same IP.
    pub listen: SocketAddr,
    /// How long a session may stay silent between requests before it is closed.
    pub idle_timeout: Duration,
    /// How long a connection may take to say hello (with the token, when there is one) before it is
    /// closed: [`HELLO_TIMEOUT`](super::session::HELLO_TIMEOUT) unless set.
    pub hello_timeout: Duration,
    /// Receive buffer for UDP test sockets unless the client asks for one, bytes.
    pub default_recv_buffer: usize,
    /// Free text sent in the hello, e.g. "vlbiflow 0.1.0".
    pub software: String,
    /// Most control sessions served at once; a client beyond them gets an error reply to its hello
    /// saying the responder is busy. A connection takes its slot only once its hello passed.
    pub max_sessions: usize,
    /// Admission of control connections before their hello passed (the version, and the token when
    /// there is one): at most so many per address (IPv6: per /64) and in all, each closed when it has not
    /// said hello within [`hello_timeout`](Self::hello_timeout); a failed or silent hello is
    /// a strike against its address, and past a few strikes its new connections are held back before
    /// they are read ([`vlbiflow_guard::gate`]). Connections beyond the limits are closed at once.
    pub gate: GateConfig,
    /// Most memory a test of one stream may reserve, bytes: packet statistics
    /// ([`BYTES_PER_PACKET`](crate::stats::BYTES_PER_PACKET) per announced packet), receive buffers and
    /// the kernel socket buffers it asks for. A test of several streams (TCP, efficiency) may reserve
    /// [`stream_memory`](Self::stream_memory) more per further stream ([`Self::test_memory_limit`]).
    /// A larger request is refused with an error naming what it needs and the most it may ask for.
    pub max_test_memory: u64,
    /// What each stream of a test beyond its first adds to [`max_test_memory`](Self::max_test_memory),
    /// bytes.
    pub stream_memory: u64,
    /// Most memory all running tests together may reserve, bytes. A test that does not fit in what
    /// the others leave is refused (try again later).
    pub memory_budget: u64,
    /// When set, control connections from other addresses are closed at once (a mesh agent's
    /// responder serves only the mesh's hosts). None: anyone.
    pub allow: Option<Vec<std::net::IpAddr>>,
    /// Address blocks control connections may come from (`net responder --allow ADDR/PREFIX`); with
    /// [`allow`](Self::allow), an address in either passes. Empty (and `allow` None): anyone.
    pub allow_blocks: vlbiflow_guard::net::AllowList,
    /// When set, a client's hello must carry this token (`net responder --token-file`, or
    /// `$VLBIFLOW_TOKEN`); a session without it is refused before any test.
    pub token: Option<String>,
    /// Longest a test may send for: a bw test's announced duration beyond the client's
    /// [`BW_FINISH_SLACK`](crate::proto::BW_FINISH_SLACK), an efficiency test's duration. Latency and
    /// TCP tests are bounded by [`idle_timeout`](Self::idle_timeout).
    pub max_test_duration: Duration,
    /// The receiving end of transport-efficiency tests ([`crate::eff`]); None: the probe lists every
    /// transport as unavailable and a setup is refused.
    pub efficiency: Option<Arc<dyn EffService>>,
}

impl ResponderConfig {
    /// Defaults for `listen`: 60 s idle timeout, 2 s for the hello, 8 MiB receive buffers, 16 sessions,
    /// 256 MiB per test of one stream (about 4.5 million packets with an 8 MiB buffer) plus 32 MiB per
    /// further stream, 1 GiB for all tests together, tests of at most 60 s, no token, the
    /// [`GateConfig`] defaults (8 connections before their hello per address, 32 in all).
    pub fn new(listen: SocketAddr) -> Self {
        ResponderConfig {
            listen,
            idle_timeout: Duration::from_secs(60),
            hello_timeout: super::session::HELLO_TIMEOUT,
            default_recv_buffer: 8 << 20,
            software: format!("vlbiflow-net {}", env!("CARGO_PKG_VERSION")),
            max_sessions: 16,
            gate: GateConfig::default(),
            max_test_memory: 256 << 20,
            stream_memory: 32 << 20,
            memory_budget: 1 << 30,
            token: None,
            max_test_duration: Duration::from_secs(60),
            allow: None,
            allow_blocks: vlbiflow_guard::net::AllowList::default(),
            efficiency: None,
        }
    }
}

impl ResponderConfig {
    /// Most memory a test of `streams` streams may reserve: [`max_test_memory`](Self::max_test_memory)
    /// plus [`stream_memory`](Self::stream_memory) per stream beyond the first, never more than
    /// [`memory_budget`](Self::memory_budget).
    pub fn test_memory_limit(&self, streams: u32) -> u64 {
        let more = u64::from(streams.saturating_sub(1)).saturating_mul(self.stream_memory);
        self.max_test_memory
            .saturating_add(more)
            .min(self.memory_budget.max(self.max_test_memory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_of_a_test_grows_with_its_streams_and_is_bounded_in_all() {
        let c = ResponderConfig::new("127.0.0.1:0".parse().unwrap());
        assert_eq!(c.test_memory_limit(0), 256 << 20);
        assert_eq!(c.test_memory_limit(1), 256 << 20);
        assert_eq!(c.test_memory_limit(4), (256 + 3 * 32) << 20);
        // 50 UDP flows with 8 MiB buffers ask for 50 x 16 MiB + 64 MiB (crate::eff): they fit.
        assert!(c.test_memory_limit(50) >= (50 * 16 + 64) << 20);
        assert_eq!(c.test_memory_limit(1000), 1 << 30);
        assert_eq!(c.test_memory_limit(u32::MAX), 1 << 30);
    }
}

/// What the responder has seen, for logs and tests.
#[derive(Debug, Default)]
pub struct ResponderCounters {
    /// Control sessions served: connections whose hello passed and that got a session slot.
    pub sessions: AtomicU64,
    /// Tests completed with a result sent.
    pub tests: AtomicU64,
    /// Tests abandoned (client vanished, timeout, protocol error).
    pub aborted: AtomicU64,
    /// Invalid requests on control connections.
    pub bad_requests: AtomicU64,
    /// Datagrams on test ports that were not packets of the running test.
    pub foreign_datagrams: AtomicU64,
    /// Control connections turned away: from an address not allowed, or told the responder is busy
    /// because [`ResponderConfig::max_sessions`] were running.
    pub refused_sessions: AtomicU64,
    /// Control connections closed at once by the [gate](ResponderConfig::gate): their address, or all
    /// addresses together, had the most connections that had not said hello yet.
    pub gate_refused: AtomicU64,
    /// Control connections held back before being read, their address having strikes.
    pub tarpitted: AtomicU64,
    /// Control connections closed because no hello came within
    /// [`hello_timeout`](ResponderConfig::hello_timeout).
    pub hello_timeouts: AtomicU64,
    /// Sessions refused because their hello did not carry the responder's token.
    pub unauthorized: AtomicU64,
    /// Tests refused because they would reserve more memory than allowed.
    pub refused_tests: AtomicU64,
    /// Sessions being served now.
    pub active_sessions: AtomicUsize,
    /// Memory reserved by the tests running now, bytes.
    pub reserved_bytes: AtomicU64,
}
