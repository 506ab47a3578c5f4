//! The far end: accepts control connections, sets up each test's UDP or TCP socket, receives or
//! echoes the traffic and returns the results.
//!
//! Every wait is bounded: control reads by the idle timeout, test sockets by short polls that check
//! stop flags, tests by the duration the client announced. Garbage on the control port gets an error
//! reply and the connection closed; garbage datagrams on a test port are counted and ignored. A client
//! that vanishes mid-test ends that session only.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use vlbiflow_udp::{open_udp, BatchReceiver, TimestampKeeper, UdpConfig};

use crate::control::ControlConn;
use crate::host::{HostSnapshot, ProcessCpu};
use crate::proto::{answer_hello, short, BwRemote, BwSetup, ProtoError, Reply, Request, TcpRemote};
use crate::stats::{ArrivalStats, BYTES_PER_PACKET};
use crate::tcpinfo::{set_buffer, tcp_sock_info};
use crate::wire::{realtime_ns, PacketKind, TestPacket, HEADER_LEN};

/// Largest packet count one throughput test may announce. The memory a test may reserve is bounded
/// separately by [`ResponderConfig::max_test_memory`] ([`BYTES_PER_PACKET`] per packet).
pub const MAX_TEST_PACKETS: u64 = 64_000_000;
/// Most connections at a time that are being told the responder is busy; more are closed unanswered.
const MAX_REFUSING: usize = 4;
/// Largest UDP payload.
pub const MAX_DATAGRAM: usize = 65_507;
/// How long the receiver keeps listening after the sender says it is done, without traffic.
const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// Bytes per TCP read: iperf3's default length; a larger buffer than the socket usually holds
/// only costs cache.
const TCP_READ_SIZE: usize = 128 << 10;
/// Datagrams per `recvmmsg` in a throughput test.
const BW_BATCH: usize = 64;
/// Datagrams per `recvmmsg` in a latency test.
const LAT_BATCH: usize = 16;
/// Receive buffer of a latency test's socket, bytes.
const LAT_RECV_BUFFER: usize = 1 << 20;
/// Poll slice for checking stop flags.
const SLICE: Duration = Duration::from_millis(50);

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
    /// Most memory one test may reserve, bytes: packet statistics ([`BYTES_PER_PACKET`] per
    /// announced packet), receive buffers and the kernel socket buffers it asks for. A larger request
    /// is refused with an error naming what it needs and the most it may ask for.
    pub max_test_memory: u64,
    /// Most memory all running tests together may reserve, bytes. A test that does not fit in what
    /// the others leave is refused (try again later).
    pub memory_budget: u64,
    /// When set, control connections from other addresses are closed at once (a mesh agent's
    /// responder serves only the mesh's hosts). None: anyone.
    pub allow: Option<Vec<std::net::IpAddr>>,
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

/// Decrements a counter when dropped (also when a session thread unwinds).
struct CountGuard<'a>(&'a AtomicUsize);

impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes a slot of `counter` when fewer than `limit` are taken.
fn take_slot(counter: &AtomicUsize, limit: usize) -> Option<CountGuard<'_>> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()
        .map(|_| CountGuard(counter))
}

/// Memory a running test holds in the responder's budget; given back when dropped.
struct Reservation<'a> {
    pool: &'a AtomicU64,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.pool.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Reserves `bytes` of the budget for one test, or says why not (the message goes to the client).
fn reserve<'a>(
    what: &str,
    bytes: u64,
    config: &ResponderConfig,
    counters: &'a ResponderCounters,
) -> Result<Reservation<'a>, String> {
    let refused = |message: String| {
        counters.refused_tests.fetch_add(1, Ordering::Relaxed);
        Err(message)
    };
    if bytes > config.max_test_memory {
        return refused(format!(
            "{what} needs {} of memory, more than the {} this responder allows one test",
            human_bytes(bytes),
            human_bytes(config.max_test_memory)
        ));
    }
    let pool = &counters.reserved_bytes;
    match pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
        used.checked_add(bytes).filter(|&t| t <= config.memory_budget)
    }) {
        Ok(_) => Ok(Reservation { pool, bytes }),
        Err(used) => refused(format!(
            "{what} needs {} of memory but running tests hold {} of this responder's {}; try again later",
            human_bytes(bytes),
            human_bytes(used),
            human_bytes(config.memory_budget)
        )),
    }
}

/// Bytes in binary units, e.g. "1.5 GiB".
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
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
        let refusing = AtomicUsize::new(0);
        thread::scope(|scope| -> io::Result<()> {
            let mut handles = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match self.listener.accept() {
                    Ok((stream, peer)) => {
                        if let Some(allow) = &self.config.allow {
                            if !allow.contains(&peer.ip()) {
                                self.counters.refused_sessions.fetch_add(1, Ordering::Relaxed);
                                log(&format!("session from {peer} refused: not an allowed address"));
                                drop(stream);
                                continue;
                            }
                        }
                        handles.retain(|h: &thread::ScopedJoinHandle<()>| !h.is_finished());
                        let counters = &*self.counters;
                        let config = &self.config;
                        let stop = &*stop;
                        let Some(slot) = take_slot(&counters.active_sessions, config.max_sessions) else {
                            counters.refused_sessions.fetch_add(1, Ordering::Relaxed);
                            let limit = config.max_sessions;
                            log(&format!("session from {peer} refused: {limit} sessions running"));
                            // Answered on a thread of its own (a slow client must not hold up
                            // accepting), a few at a time; beyond them the connection just closes.
                            if let Some(refusing) = take_slot(&refusing, MAX_REFUSING) {
                                handles.push(scope.spawn(move || {
                                    let _refusing = refusing;
                                    refuse_session(stream, config, stop);
                                }));
                            }
                            continue;
                        };
                        counters.sessions.fetch_add(1, Ordering::Relaxed);
                        log(&format!("session from {peer}"));
                        handles.push(scope.spawn(move || {
                            let _slot = slot;
                            if let Err(e) = serve_session(stream, config, counters, stop, &|m| {
                                log(&format!("session {peer}: {m}"))
                            }) {
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

/// Waits at most `timeout` (whole milliseconds) for `fd` to be readable.
fn poll_in(fd: &impl AsFd, timeout: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let ms = timeout.as_millis().min(i32::MAX as u128) as i64;
    let timeout = Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    };
    poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&timeout)).is_ok_and(|n| n > 0)
}

/// Why a session ended early.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Proto(#[from] ProtoError),
    #[error("{0}")]
    Other(String),
    #[error("stopped")]
    Stopped,
}

/// Waits for the next request, checking `stop` between slices; None when the client closed cleanly
/// between tests.
fn next_request(
    conn: &mut ControlConn,
    timeout: Duration,
    stop: &AtomicBool,
    what: &str,
) -> Result<Option<Request>, SessionError> {
    let deadline = Instant::now() + timeout;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(SessionError::Stopped);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.recv_line(left.min(Duration::from_millis(200)), what) {
            Ok(line) => return Ok(Some(crate::proto::decode(&line, "request")?)),
            Err(ProtoError::Io { ref source, .. })
                if source.kind() == io::ErrorKind::TimedOut && !left.is_zero() => {}
            Err(ProtoError::Closed { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Tells a client that arrived while all sessions were taken that the responder is busy: reads its
/// hello (so the close that follows is orderly and the client reads the reply) and answers with an
/// error.
fn refuse_session(stream: TcpStream, config: &ResponderConfig, stop: &AtomicBool) {
    let Ok(()) = stream.set_nonblocking(false) else {
        return;
    };
    let Ok(mut conn) = ControlConn::from_stream(stream, Duration::from_secs(2)) else {
        return;
    };
    if let Ok(Some(_)) = next_request(&mut conn, Duration::from_secs(2), stop, "waiting for hello") {
        let _ = conn.send(&Reply::Error {
            message: format!(
                "busy: this responder serves at most {} sessions at a time and all are in use; try again later",
                config.max_sessions
            ),
        });
    }
}

fn serve_session(
    stream: TcpStream,
    config: &ResponderConfig,
    counters: &ResponderCounters,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> Result<(), SessionError> {
    stream
        .set_nonblocking(false)
        .map_err(|e| SessionError::Other(format!("set blocking: {e}")))?;
    let mut conn = ControlConn::from_stream(stream, Duration::from_secs(10))?;
    let hello = next_request(&mut conn, Duration::from_secs(10), stop, "waiting for hello");
    let hello = match hello {
        Ok(Some(Request::Hello { version, .. })) => answer_hello(version, &config.software),
        Ok(None) => return Ok(()),
        Ok(Some(other)) => {
            counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            Reply::Error {
                message: format!("expected hello first, got {}", short(&other)),
            }
        }
        Err(SessionError::Proto(e)) => {
            counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            let _ = conn.send(&Reply::Error {
                message: e.to_string(),
            });
            return Err(e.into());
        }
        Err(e) => return Err(e),
    };
    let accepted = matches!(hello, Reply::Hello { .. });
    conn.send(&hello)?;
    if !accepted {
        return Err(SessionError::Other("refused: version mismatch".into()));
    }
    loop {
        let req = match next_request(&mut conn, config.idle_timeout, stop, "waiting for a test") {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(SessionError::Proto(e)) => {
                counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                let _ = conn.send(&Reply::Error {
                    message: e.to_string(),
                });
                return Err(e.into());
            }
            Err(e) => return Err(e),
        };
        let outcome = match req {
            Request::BwStart(setup) => serve_bw(&mut conn, setup, config, counters, stop, log),
            Request::LatStart { test_id, max_size } => {
                serve_lat(&mut conn, test_id, max_size, config, counters, stop, log)
            }
            Request::TcpStart { streams, recv_buffer } => {
                serve_tcp(&mut conn, streams, recv_buffer, config, counters, stop, log)
            }
            Request::EffProbe => {
                conn.send(&Reply::EffTransports {
                    transports: crate::efficiency::probe_all(),
                })?;
                continue;
            }
            Request::EffStart(setup) => serve_eff(&mut conn, setup, config, counters, stop, log),
            other => {
                counters.bad_requests.fetch_add(1, Ordering::Relaxed);
                conn.send(&Reply::Error {
                    message: format!("unexpected request outside a test: {}", short(&other)),
                })?;
                continue;
            }
        };
        match outcome {
            Ok(()) => {
                counters.tests.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                counters.aborted.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        }
    }
}

/// A transport-efficiency test: the receive path runs on its own thread until the client says it is done.
fn serve_eff(
    conn: &mut ControlConn,
    setup: crate::efficiency::EffSetup,
    config: &ResponderConfig,
    counters: &ResponderCounters,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> Result<(), SessionError> {
    if let Err(e) = setup.validate() {
        return refuse(conn, format!("efficiency: {e}"));
    }
    let recv_buffer = setup.recv_buffer.unwrap_or(config.default_recv_buffer);
    // Kernel socket buffers (twice the request) per UDP flow, plus the receive path's own buffers.
    let memory = if setup.transport.is_udp() {
        (setup.streams as u64) * 2 * recv_buffer as u64 + (64 << 20)
    } else {
        (setup.streams as u64) * (8 << 20) + (1 << 20)
    };
    let what = format!(
        "efficiency test over {} with {} flow(s)",
        setup.transport, setup.streams
    );
    let reservation = match reserve(&what, memory, config, counters) {
        Ok(r) => r,
        Err(message) => return refuse(conn, format!("efficiency: {message}")),
    };
    let ip = test_socket_bind(conn).ip();
    let rx = match crate::efficiency::Receiving::start(&setup, ip, config.default_recv_buffer) {
        Ok(r) => r,
        Err(e) => return refuse(conn, format!("efficiency: {e}")),
    };
    conn.send(&Reply::EffReady {
        ports: rx.ports.clone(),
        buffer: rx.granted_buffer,
    })?;
    log(&format!(
        "efficiency test: {} over {} flow(s), {} ms",
        setup.transport, setup.streams, setup.duration_ms
    ));
    let waited = next_request(
        conn,
        Duration::from_millis(setup.duration_ms) + Duration::from_secs(20),
        stop,
        "waiting for the end of the efficiency test",
    );
    match waited {
        Ok(Some(Request::EffFinish { .. })) => {}
        other => {
            rx.abort();
            return match other {
                Ok(Some(r)) => Err(SessionError::Other(format!(
                    "efficiency: expected eff_finish, got {}",
                    short(&r)
                ))),
                Ok(None) => Err(SessionError::Other(
                    "client closed the connection mid-test".into(),
                )),
                Err(e) => Err(e),
            };
        }
    }
    let result = rx.finish();
    drop(reservation);
    match result {
        Ok(r) => conn.send(&Reply::EffResult(Box::new(r)))?,
        Err(e) => conn.send(&Reply::Error {
            message: format!("efficiency: {e}"),
        })?,
    }
    Ok(())
}

fn test_socket_bind(conn: &ControlConn) -> SocketAddr {
    let ip = conn
        .stream()
        .local_addr()
        .map(|a| a.ip())
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
    SocketAddr::new(ip, 0)
}

/// Sends an error reply for a refused setup and keeps the session.
fn refuse(conn: &mut ControlConn, message: String) -> Result<(), SessionError> {
    conn.send(&Reply::Error { message })?;
    Ok(())
}

fn serve_bw(
    conn: &mut ControlConn,
    setup: BwSetup,
    config: &ResponderConfig,
    counters: &ResponderCounters,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> Result<(), SessionError> {
    if setup.count == 0 || setup.count > MAX_TEST_PACKETS {
        return refuse(
            conn,
            format!("bw: count {} outside 1..={MAX_TEST_PACKETS}", setup.count),
        );
    }
    if setup.size < HEADER_LEN || setup.size > MAX_DATAGRAM {
        return refuse(
            conn,
            format!("bw: size {} outside {HEADER_LEN}..={MAX_DATAGRAM}", setup.size),
        );
    }
    let recv_buffer = setup.recv_buffer.unwrap_or(config.default_recv_buffer);
    // Statistics, the receive thread's buffers and the kernel socket buffer (which the kernel sizes at
    // twice the request).
    let memory = ArrivalStats::memory_for(setup.count)
        .saturating_add((BW_BATCH * (setup.size + 1)) as u64)
        .saturating_add((recv_buffer as u64).saturating_mul(2));
    let what = format!(
        "bw test of {} packets ({BYTES_PER_PACKET} B each for statistics) with a {} receive buffer",
        setup.count,
        human_bytes(recv_buffer as u64)
    );
    let reservation = match reserve(&what, memory, config, counters) {
        Ok(r) => r,
        Err(message) => return refuse(conn, format!("bw: {message}")),
    };
    let udp = UdpConfig {
        recv_buffer: Some(recv_buffer),
        rxq_ovfl: true,
        // Each datagram's own kernel receive time: inter-arrival times, jitter and one-way delay
        // stay right when a batch of many datagrams is read at once.
        timestamps: true,
        ..UdpConfig::receiver(test_socket_bind(conn))
    };
    let (sock, report) = match open_udp(&udp) {
        Ok(s) => s,
        Err(e) => return refuse(conn, format!("bw: {e}")),
    };
    let granted = report.recv_buffer.map(|b| b.granted).unwrap_or(0);
    let before = HostSnapshot::take();
    let ctl = Arc::new(BwControl::default());
    let max_duration = Duration::from_millis(setup.max_duration_ms.min(3_600_000));
    // Storage for every announced packet is allocated and touched before the client hears "ready",
    // so the receive thread starts with nothing to do but receive.
    let stats = match ArrivalStats::try_new(setup.count) {
        Ok(s) => s,
        Err(e) => return refuse(conn, format!("bw: {e}")),
    };
    let receiver = {
        let ctl = ctl.clone();
        thread::spawn(move || bw_receive(sock, stats, setup, &ctl, max_duration))
    };
    conn.send(&Reply::Ready {
        port: report.local.port(),
        buffer: granted,
    })?;
    log(&format!(
        "bw test: {} frames of {} bytes to port {}",
        setup.count,
        setup.size,
        report.local.port()
    ));
    let waited = next_request(
        conn,
        max_duration + Duration::from_secs(10),
        stop,
        "waiting for the end of the bw test",
    );
    let sent = match waited {
        Ok(Some(Request::BwFinish { sent })) => Some(sent),
        _ => None,
    };
    ctl.expected.store(sent.unwrap_or(0), Ordering::Relaxed);
    ctl.finish.store(true, Ordering::Release);
    if sent.is_none() {
        ctl.abort.store(true, Ordering::Release);
    }
    let (stats, bytes, drops) = receiver
        .join()
        .map_err(|_| SessionError::Other("bw receiver thread panicked".into()))?;
    let Some(sent) = sent else {
        return match waited {
            Ok(Some(other)) => Err(SessionError::Other(format!(
                "bw: expected bw_finish, got {}",
                short(&other)
            ))),
            Ok(None) => Err(SessionError::Other(
                "client closed the connection mid-test".into(),
            )),
            Err(e) => Err(e),
        };
    };
    let host = HostSnapshot::take().since(&before);
    let arrivals = stats.summary(sent);
    let timeline = if setup.timeline {
        stats.timeline(sent)
    } else {
        None
    };
    // Given back before the client hears the result, so its next test can use the memory.
    drop(stats);
    drop(reservation);
    counters
        .foreign_datagrams
        .fetch_add(arrivals.foreign, Ordering::Relaxed);
    conn.send(&Reply::BwResult(Box::new(BwRemote {
        arrivals,
        bytes,
        socket_drops: drops,
        host,
        timeline,
    })))?;
    Ok(())
}

#[derive(Default)]
struct BwControl {
    finish: AtomicBool,
    abort: AtomicBool,
    expected: AtomicU64,
}

/// Receives test packets until told the sender finished and the stream has drained (all expected
/// packets in, or [`DRAIN_IDLE`] without traffic), or until aborted or past `max_duration`.
fn bw_receive(
    sock: UdpSocket,
    mut stats: ArrivalStats,
    setup: BwSetup,
    ctl: &BwControl,
    max_duration: Duration,
) -> (ArrivalStats, u64, u64) {
    let mut rx = BatchReceiver::new(BW_BATCH);
    let mut bufs = vec![vec![0u8; setup.size.max(HEADER_LEN) + 1]; BW_BATCH];
    let mut bytes = 0u64;
    let hard_end = Instant::now() + max_duration + Duration::from_secs(10);
    let mut last_traffic = Instant::now();
    let mut drops = 0;
    loop {
        if ctl.abort.load(Ordering::Acquire) || Instant::now() > hard_end {
            break;
        }
        let finishing = ctl.finish.load(Ordering::Acquire);
        if finishing
            && (stats.received() >= ctl.expected.load(Ordering::Relaxed)
                || last_traffic.elapsed() >= DRAIN_IDLE)
        {
            break;
        }
        let batch = match rx.recv(&sock, bufs.iter_mut().map(|b| b.as_mut_slice()), SLICE) {
            Ok(b) => b,
            Err(_) => break,
        };
        if batch.is_empty() {
            continue;
        }
        // Only for a datagram without a kernel timestamp (SO_TIMESTAMPNS refused): the batch's time.
        let batch_time = realtime_ns();
        last_traffic = Instant::now();
        drops = batch.kernel_drops();
        for (meta, buf) in batch.messages().iter().zip(bufs.iter()) {
            let len = meta.len.min(buf.len());
            match TestPacket::new_checked(&buf[..len]) {
                Ok(p) if p.test_id() == setup.test_id && p.kind() == PacketKind::Data && !meta.truncated => {
                    bytes += meta.len as u64;
                    let recv_ts = meta.timestamp_ns.unwrap_or(batch_time);
                    stats.observe(p.seq(), p.send_ts_ns(), recv_ts);
                }
                _ => stats.observe_foreign(),
            }
        }
    }
    (stats, bytes, drops)
}

fn serve_lat(
    conn: &mut ControlConn,
    test_id: u32,
    max_size: usize,
    config: &ResponderConfig,
    counters: &ResponderCounters,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> Result<(), SessionError> {
    if !(HEADER_LEN..=MAX_DATAGRAM).contains(&max_size) {
        return refuse(
            conn,
            format!("lat: size {max_size} outside {HEADER_LEN}..={MAX_DATAGRAM}"),
        );
    }
    let memory = (LAT_BATCH * (max_size + 1) + 2 * LAT_RECV_BUFFER) as u64;
    let reservation = match reserve("lat test", memory, config, counters) {
        Ok(r) => r,
        Err(message) => return refuse(conn, format!("lat: {message}")),
    };
    let udp = UdpConfig {
        recv_buffer: Some(LAT_RECV_BUFFER),
        ..UdpConfig::receiver(test_socket_bind(conn))
    };
    let (sock, report) = match open_udp(&udp) {
        Ok(s) => s,
        Err(e) => return refuse(conn, format!("lat: {e}")),
    };
    let done = Arc::new(AtomicBool::new(false));
    let echo = {
        let done = done.clone();
        thread::spawn(move || lat_echo(sock, test_id, max_size, &done))
    };
    conn.send(&Reply::Ready {
        port: report.local.port(),
        buffer: report.recv_buffer.map(|b| b.granted).unwrap_or(0),
    })?;
    log(&format!(
        "lat test: up to {max_size} bytes to port {}",
        report.local.port()
    ));
    let waited = next_request(
        conn,
        config.idle_timeout,
        stop,
        "waiting for the end of the lat test",
    );
    done.store(true, Ordering::Release);
    let (echoed, foreign) = echo
        .join()
        .map_err(|_| SessionError::Other("lat echo thread panicked".into()))?;
    counters.foreign_datagrams.fetch_add(foreign, Ordering::Relaxed);
    drop(reservation);
    match waited {
        Ok(Some(Request::LatFinish)) => {
            conn.send(&Reply::LatResult { echoed, foreign })?;
            Ok(())
        }
        Ok(Some(other)) => Err(SessionError::Other(format!(
            "lat: expected lat_finish, got {}",
            short(&other)
        ))),
        Ok(None) => Err(SessionError::Other(
            "client closed the connection mid-test".into(),
        )),
        Err(e) => Err(e),
    }
}

/// Echoes latency requests as replies until `done`.
fn lat_echo(sock: UdpSocket, test_id: u32, max_size: usize, done: &AtomicBool) -> (u64, u64) {
    let mut rx = BatchReceiver::new(LAT_BATCH).with_source(true);
    let mut bufs = vec![vec![0u8; max_size + 1]; LAT_BATCH];
    let (mut echoed, mut foreign) = (0u64, 0u64);
    while !done.load(Ordering::Acquire) {
        let batch = match rx.recv(&sock, bufs.iter_mut().map(|b| b.as_mut_slice()), SLICE) {
            Ok(b) => b,
            Err(_) => break,
        };
        for (meta, buf) in batch.messages().iter().zip(bufs.iter_mut()) {
            let len = meta.len.min(buf.len());
            let ok = !meta.truncated
                && matches!(TestPacket::new_checked(&buf[..len]),
                    Ok(p) if p.test_id() == test_id && p.kind() == PacketKind::LatencyRequest);
            match (ok, meta.source) {
                (true, Some(src)) => {
                    TestPacket::new_unchecked(&mut buf[..len]).set_kind(PacketKind::LatencyReply);
                    if sock.send_to(&buf[..len], src).is_ok() {
                        echoed += 1;
                    }
                }
                _ => foreign += 1,
            }
        }
    }
    (echoed, foreign)
}

fn serve_tcp(
    conn: &mut ControlConn,
    streams: u32,
    recv_buffer: Option<usize>,
    config: &ResponderConfig,
    counters: &ResponderCounters,
    stop: &AtomicBool,
    log: &dyn Fn(&str),
) -> Result<(), SessionError> {
    if !(1..=64).contains(&streams) {
        return refuse(conn, format!("tcp: {streams} streams outside 1..=64"));
    }
    // Per stream: the read buffer and the kernel socket buffer asked for (twice the request).
    let per_stream =
        (TCP_READ_SIZE as u64).saturating_add((recv_buffer.unwrap_or(0) as u64).saturating_mul(2));
    let what = format!(
        "tcp test of {streams} streams with {} receive buffers",
        human_bytes(recv_buffer.unwrap_or(0) as u64)
    );
    let reservation = match reserve(&what, per_stream.saturating_mul(streams.into()), config, counters) {
        Ok(r) => r,
        Err(message) => return refuse(conn, format!("tcp: {message}")),
    };
    let listener = match TcpListener::bind(test_socket_bind(conn)) {
        Ok(l) => l,
        Err(e) => return refuse(conn, format!("tcp: bind: {e}")),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let _ = listener.set_nonblocking(true);
    let before = HostSnapshot::take();
    // The test's own CPU: this session thread's, the acceptor's and the readers' (tcp_receive), not the
    // whole process's, which may be serving other sessions.
    let this_thread = ProcessCpu::read_thread();
    let done = Arc::new(AtomicBool::new(false));
    let acceptor = {
        let done = done.clone();
        thread::spawn(move || tcp_receive(listener, streams, recv_buffer, &done))
    };
    conn.send(&Reply::Ready {
        port,
        buffer: recv_buffer.unwrap_or(0),
    })?;
    log(&format!("tcp test: {streams} streams to port {port}"));
    let waited = next_request(
        conn,
        config.idle_timeout,
        stop,
        "waiting for the end of the tcp test",
    );
    done.store(true, Ordering::Release);
    let (bytes, first_ns, last_ns, sockets, cpu) = acceptor
        .join()
        .map_err(|_| SessionError::Other("tcp receiver thread panicked".into()))?;
    drop(reservation);
    match waited {
        Ok(Some(Request::TcpFinish)) => {
            let host = HostSnapshot::take().since(&before);
            let threads = cpu.plus(&ProcessCpu::read_thread().since(&this_thread));
            conn.send(&Reply::TcpResult(Box::new(TcpRemote {
                bytes,
                first_ns,
                last_ns,
                sockets,
                host,
                threads: Some(threads),
            })))?;
            Ok(())
        }
        Ok(Some(other)) => Err(SessionError::Other(format!(
            "tcp: expected tcp_finish, got {}",
            short(&other)
        ))),
        Ok(None) => Err(SessionError::Other(
            "client closed the connection mid-test".into(),
        )),
        Err(e) => Err(e),
    }
}

/// Bytes per stream, first and last byte (ns), socket states, and the CPU time of the receiving threads.
type TcpOutcome = (Vec<u64>, u64, u64, Vec<crate::tcpinfo::TcpSockInfo>, ProcessCpu);

/// Accepts `streams` connections and reads each to its end; after `done`, readers stop at EOF or
/// after 5 s.
fn tcp_receive(
    listener: TcpListener,
    streams: u32,
    recv_buffer: Option<usize>,
    done: &AtomicBool,
) -> TcpOutcome {
    let cpu = ProcessCpu::read_thread();
    let first = AtomicU64::new(u64::MAX);
    let last = AtomicU64::new(0);
    thread::scope(|scope| {
        let mut readers = Vec::new();
        while readers.len() < streams as usize && !done.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((s, _)) => {
                    if let Some(b) = recv_buffer {
                        set_buffer(&s, true, b);
                    }
                    let (first, last) = (&first, &last);
                    readers.push(scope.spawn(move || tcp_read(s, done, first, last)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_in(&listener, SLICE);
                }
                Err(_) => break,
            }
        }
        let mut bytes = Vec::new();
        let mut infos = Vec::new();
        let mut threads = ProcessCpu::default();
        for r in readers {
            if let Ok((n, info, t)) = r.join() {
                bytes.push(n);
                infos.push(info);
                threads = threads.plus(&t);
            }
        }
        let f = first.load(Ordering::Relaxed);
        (
            bytes,
            if f == u64::MAX { 0 } else { f },
            last.load(Ordering::Relaxed),
            infos,
            threads.plus(&ProcessCpu::read_thread().since(&cpu)),
        )
    })
}

fn tcp_read(
    mut s: TcpStream,
    done: &AtomicBool,
    first: &AtomicU64,
    last: &AtomicU64,
) -> (u64, crate::tcpinfo::TcpSockInfo, ProcessCpu) {
    let cpu = ProcessCpu::read_thread();
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = vec![0u8; TCP_READ_SIZE];
    let mut n = 0u64;
    let mut done_at: Option<Instant> = None;
    let mut info = tcp_sock_info(&s);
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                if n == 0 {
                    first.fetch_min(realtime_ns(), Ordering::Relaxed);
                }
                n += k as u64;
                last.fetch_max(realtime_ns(), Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                info = tcp_sock_info(&s);
            }
            Err(_) => break,
        }
        if done.load(Ordering::Acquire) {
            let at = *done_at.get_or_insert_with(Instant::now);
            if at.elapsed() > Duration::from_secs(5) {
                break;
            }
        }
    }
    // The state at the end (autotuned buffers, final window), not at the last read timeout.
    let end_info = tcp_sock_info(&s);
    if !end_info.congestion.is_empty() {
        info = end_info;
    }
    (n, info, ProcessCpu::read_thread().since(&cpu))
}
