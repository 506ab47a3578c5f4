//! The far end: accepts control connections, sets up each test's UDP or TCP socket, receives or
//! echoes the traffic and returns the results.
//!
//! Every wait is bounded: control reads by the idle timeout, test sockets by short polls that check
//! stop flags, tests by the duration the client announced. Garbage on the control port gets an error
//! reply and the connection closed; garbage datagrams on a test port are counted and ignored. A client
//! that vanishes mid-test ends that session only.
//!
//! Layout: [`session`] is the protocol of one control session without I/O (every rule and deadline,
//! tested in simulated time); [`receive`] holds the bw counter and the latency echo, also without I/O,
//! and the threads that drive them; `serve` is the I/O layer between a session and its sockets; this
//! module accepts connections and runs one session per thread.
//!
//! Admission: a connection passes the address filter (`allow`), then the
//! [gate](vlbiflow_guard::gate::Gate) of connections that have not said hello (a limit per address
//! and in all; a back-off for addresses whose handshakes failed or stayed silent), then has
//! [`hello_timeout`](ResponderConfig::hello_timeout) (2 s) for its hello. Only a hello that passed
//! takes one of the [`max_sessions`](ResponderConfig::max_sessions) slots, so idle connections from
//! some addresses can neither hold the sessions nor keep a client from another address out.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use vlbiflow_guard::gate::{Gate, Verdict};
use vlbiflow_udp::TimestampKeeper;

mod config;
pub mod receive;
mod serve;
pub mod session;

pub use config::{ResponderConfig, ResponderCounters};
pub use session::{SessionError, HELLO_TIMEOUT, MAX_DATAGRAM, MAX_TEST_PACKETS};

use receive::poll_in;

/// Decrements a counter when dropped (also when a session thread unwinds).
pub(super) struct CountGuard<'a>(&'a AtomicUsize);

impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes a slot of `counter` when fewer than `limit` are taken.
pub(super) fn take_slot(counter: &AtomicUsize, limit: usize) -> Option<CountGuard<'_>> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()
        .map(|_| CountGuard(counter))
}

/// A bound responder.
pub struct Responder {
    listener: TcpListener,
    config: ResponderConfig,
    counters: Arc<ResponderCounters>,
    /// Keeps the kernel's receive timestamping switched on between tests.
    stamp_keeper: Result<TimestampKeeper, String>,
}

impl Responder {
    /// Binds the control port.
    pub fn bind(config: ResponderConfig) -> io::Result<Self> {
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| io::Error::new(e.kind(), format!("responder: bind TCP {}: {e}", config.listen)))?;
        listener.set_nonblocking(true)?;
        let stamp_keeper = TimestampKeeper::start(Duration::from_secs(1)).map_err(|e| e.to_string());
        Ok(Responder {
            listener,
            config,
            counters: Arc::default(),
            stamp_keeper,
        })
    }

    /// True when the kernel was seen stamping datagrams as they arrive (checked at bind). When false,
    /// receive times may be taken when a batch is read, and inter-arrival times, jitter and delay of
    /// fast streams are then too coarse.
    pub fn timestamping_live(&self) -> bool {
        self.stamp_keeper.is_ok()
    }

    /// The bound control address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// Shared counters.
    pub fn counters(&self) -> Arc<ResponderCounters> {
        self.counters.clone()
    }

    /// Serves until `stop` is set, one thread per session; returns after every session ended.
    /// `log` receives one line per notable event.
    pub fn run(&self, stop: Arc<AtomicBool>, log: &(dyn Fn(&str) + Sync)) -> io::Result<()> {
        if let Err(e) = &self.stamp_keeper {
            log(&format!(
                "warning: no kernel receive timestamps ({e}); inter-arrival times, jitter and one-way \
                 delay of fast streams will be too coarse"
            ));
        }
        let gate = Mutex::new(Gate::new(self.config.gate));
        thread::scope(|scope| -> io::Result<()> {
            let mut handles = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match self.listener.accept() {
                    Ok((stream, peer)) => {
                        let (allow, blocks) = (&self.config.allow, &self.config.allow_blocks);
                        if allow.is_some() || !blocks.is_empty() {
                            let ip = peer.ip();
                            if !(allow.as_ref().is_some_and(|a| a.contains(&ip)) || blocks.allows(ip)) {
                                self.counters.refused_sessions.fetch_add(1, Ordering::Relaxed);
                                log(&format!("session from {peer} refused: not an allowed address"));
                                drop(stream);
                                continue;
                            }
                        }
                        handles.retain(|h: &thread::ScopedJoinHandle<()>| !h.is_finished());
                        // Threads are bounded: at most `gate.pending` connections before their hello,
                        // and `max_sessions` after it.
                        let delay = match serve::lock(&gate).arrive(peer.ip(), Instant::now()) {
                            Verdict::Admit { delay } => delay,
                            v @ (Verdict::AddressBusy | Verdict::Full) => {
                                self.counters.gate_refused.fetch_add(1, Ordering::Relaxed);
                                let why = if v == Verdict::Full {
                                    "too many connections without a hello"
                                } else {
                                    "too many connections without a hello from its address"
                                };
                                log(&format!("connection from {peer} closed: {why}"));
                                drop(stream);
                                continue;
                            }
                        };
                        let ctx_parts = (&self.config, &*self.counters, &*stop, &gate);
                        handles.push(scope.spawn(move || {
                            let (config, counters, stop, gate) = ctx_parts;
                            let session_log = |m: &str| log(&format!("session {peer}: {m}"));
                            let ctx = serve::Ctx {
                                config,
                                counters,
                                stop,
                                log: &session_log,
                            };
                            let admission = serve::Admission { gate, peer, delay };
                            if let Err(e) = serve::serve(stream, &ctx, admission) {
                                log(&format!("session {peer}: {e}"));
                            } else {
                                log(&format!("session {peer}: closed"));
                            }
                        }));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        poll_in(&self.listener, Duration::from_millis(100));
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // Per-connection accept failures (e.g. ECONNABORTED, EMFILE) must not end the
                        // responder; pause briefly so a persistent one does not spin.
                        log(&format!("accept: {e}"));
                        thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            Ok(())
        })
    }
}
