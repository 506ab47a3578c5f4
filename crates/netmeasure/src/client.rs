//! The measuring end: connects to a responder, runs throughput, latency and TCP tests, and merges
//! the local and remote views into results.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use vlbiflow_udp::{open_udp, BatchSender, Pacer, SocketError, UdpConfig, GSO_MAX_SEGMENTS};

use crate::control::ControlConn;
use crate::host::{HostSnapshot, HostUsage, ProcessCpu};
use crate::proto::{
    check_hello, short, BwRemote, BwSetup, ProtoError, Reply, Request, TcpRemote, PROTOCOL_VERSION,
};
use crate::stats::HistSummary;
use crate::tcpinfo::{set_buffer, tcp_sock_info, TcpSockInfo};
use crate::wire::{realtime_ns, PacketKind, TestPacket, TestPacketRepr, HEADER_LEN};

/// Ethernet preamble 8 + header 14 + CRC 4 + gap 12 + IPv4 20 + UDP 8 bytes per packet, the UDPmon
/// wire-rate convention.
pub const WIRE_OVERHEAD: usize = 66;

/// The responder's default control port.
pub const DEFAULT_PORT: u16 = 14233;

/// Resolves a responder given as HOST, HOST:PORT, an IPv6 address or `[IPv6]:PORT`; the port defaults
/// to [`DEFAULT_PORT`].
pub fn resolve_responder(host: &str) -> Result<SocketAddr, String> {
    let with_port = if host.parse::<SocketAddr>().is_ok()
        || host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{DEFAULT_PORT}")
    } else {
        format!("{host}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve responder address {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("responder address {host:?} resolves to nothing"))
}

/// A measurement failure. [`NetError::Aborted`] keeps what was measured before the failure.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Control protocol failure.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// Test socket could not be opened.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// Other I/O failure.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Cause.
        source: io::Error,
    },
    /// Parameters that cannot work.
    #[error("{0}")]
    Invalid(String),
    /// The test started but did not finish; `partial` holds the local measurements.
    #[error("test aborted after {}: {source}", partial.describe())]
    Aborted {
        /// What was measured.
        partial: Box<Partial>,
        /// Why it stopped.
        source: Box<NetError>,
    },
    /// Stopped by the user.
    #[error("interrupted")]
    Interrupted,
}

/// Local measurements of a test that did not finish.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "test", rename_all = "snake_case")]
pub enum Partial {
    /// Sender side of a UDP throughput test.
    Bw(BwLocal),
    /// Latency points finished so far.
    Lat(Vec<LatPoint>),
    /// Sender side of a TCP test.
    Tcp {
        /// Bytes written per stream.
        bytes_sent: Vec<u64>,
        /// Seconds spent sending.
        duration_s: f64,
    },
}

impl Partial {
    fn describe(&self) -> String {
        match self {
            Partial::Bw(b) => format!(
                "sending {} of {} packets ({:.1} Mb/s)",
                b.sent, b.count, b.send_user_rate_mbps
            ),
            Partial::Lat(p) => format!("{} message sizes", p.len()),
            Partial::Tcp { bytes_sent, .. } => {
                format!("sending {} bytes", bytes_sent.iter().sum::<u64>())
            }
        }
    }
}

/// A session with a responder.
pub struct Client {
    conn: ControlConn,
    server: SocketAddr,
    remote_software: String,
    timeout: Duration,
    next_test_id: u32,
}

impl Client {
    /// Connects and shakes hands; `timeout` bounds connecting and every control-message wait
    /// outside the tests themselves.
    pub fn connect(server: SocketAddr, timeout: Duration) -> Result<Self, NetError> {
        Client::connect_with_version(server, timeout, PROTOCOL_VERSION)
    }

    /// Like [`connect`](Self::connect) but announcing `version` (to test version handling).
    pub fn connect_with_version(
        server: SocketAddr,
        timeout: Duration,
        version: u32,
    ) -> Result<Self, NetError> {
        let mut conn = ControlConn::connect(server, timeout)?;
        conn.send(&Request::Hello {
            version,
            software: format!("vlbiflow-net {}", env!("CARGO_PKG_VERSION")),
        })?;
        let reply: Reply = conn.recv(timeout, "waiting for the responder's hello", "reply")?;
        let remote_software = check_hello(reply)?;
        Ok(Client {
            conn,
            server,
            remote_software,
            timeout,
            next_test_id: (realtime_ns() as u32) | 1,
        })
    }

    /// The responder's software string.
    pub fn remote_software(&self) -> &str {
        &self.remote_software
    }

    /// The responder's control address.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    fn test_id(&mut self) -> u32 {
        self.next_test_id = self.next_test_id.wrapping_add(1);
        self.next_test_id
    }

    fn expect_ready(&mut self, what: &'static str) -> Result<(u16, usize), NetError> {
        match self.conn.recv(self.timeout, what, "reply")? {
            Reply::Ready { port, buffer } => Ok((port, buffer)),
            Reply::Error { message } => Err(ProtoError::Remote(message).into()),
            other => Err(ProtoError::Unexpected {
                expected: "ready",
                got: short(&other),
            }
            .into()),
        }
    }

    /// Runs one UDP throughput test: `count` packets of `size` bytes, packet k due at start +
    /// k x `wait_us` (0: as fast as possible).
    pub fn bw(&mut self, p: &BwParams, stop: &AtomicBool) -> Result<BwResult, NetError> {
        p.validate()?;
        let test_id = self.test_id();
        let send_estimate = Duration::from_secs_f64(p.count as f64 * p.wait_us * 1e-6);
        let max_duration = send_estimate + Duration::from_secs(30);
        self.conn.send(&Request::BwStart(BwSetup {
            test_id,
            count: p.count,
            size: p.size,
            recv_buffer: p.recv_buffer,
            max_duration_ms: max_duration.as_millis() as u64,
            timeline: p.timeline,
        }))?;
        let (port, remote_buffer) = self.expect_ready("waiting for the bw test socket")?;
        let dest = SocketAddr::new(self.server.ip(), port);
        let (sock, report) = open_udp(&UdpConfig {
            send_buffer: p.send_buffer,
            ..UdpConfig::sender(dest)
        })?;
        let mut warnings = report.warnings();
        let before = HostSnapshot::take();
        let outcome = send_paced(&sock, p, test_id, &self.conn, stop);
        let host = HostSnapshot::take().since(&before);
        let mut local = outcome.local;
        local.host = host;
        local.remote_buffer = remote_buffer;
        if let Some(e) = outcome.error {
            return Err(NetError::Aborted {
                partial: Box::new(Partial::Bw(local)),
                source: Box::new(e),
            });
        }
        let abort = |local: BwLocal, e: NetError| NetError::Aborted {
            partial: Box::new(Partial::Bw(local)),
            source: Box::new(e),
        };
        if let Err(e) = self.conn.send(&Request::BwFinish { sent: local.sent }) {
            return Err(abort(local, e.into()));
        }
        // The responder answers once the stream has drained (up to its idle time after the last
        // datagram): a stop in that wait ends the test there, not after the answer.
        let wait = self.timeout + Duration::from_secs(2);
        let remote = match self
            .conn
            .recv_unless_stopped(wait, "waiting for the bw result", "reply", stop)
        {
            Ok(None) => return Err(abort(local, NetError::Interrupted)),
            Ok(Some(Reply::BwResult(r))) => *r,
            Ok(Some(Reply::Error { message })) => {
                return Err(abort(local, ProtoError::Remote(message).into()))
            }
            Ok(Some(other)) => {
                let e = ProtoError::Unexpected {
                    expected: "bw_result",
                    got: short(&other),
                };
                return Err(abort(local, e.into()));
            }
            Err(e) => return Err(abort(local, e.into())),
        };
        if remote.arrivals.foreign > 0 {
            warnings.push(format!(
                "responder ignored {} datagrams that were not packets of this test",
                remote.arrivals.foreign
            ));
        }
        Ok(BwResult::new(p, local, remote, warnings))
    }

    /// Request-response latency for each size in `p.sizes`.
    pub fn lat(&mut self, p: &LatParams, stop: &AtomicBool) -> Result<LatResult, NetError> {
        let max_size = p.sizes.iter().copied().max().unwrap_or(0);
        if p.sizes.is_empty() || p.sizes.iter().any(|&s| !(HEADER_LEN..=65_507).contains(&s)) {
            return Err(NetError::Invalid(format!(
                "lat: sizes must be {HEADER_LEN}..=65507 bytes, got {:?}",
                p.sizes
            )));
        }
        if p.count == 0 {
            return Err(NetError::Invalid("lat: count must be at least 1".into()));
        }
        let test_id = self.test_id();
        self.conn.send(&Request::LatStart { test_id, max_size })?;
        let (port, _) = self.expect_ready("waiting for the lat test socket")?;
        let dest = SocketAddr::new(self.server.ip(), port);
        let (sock, _) = open_udp(&UdpConfig {
            recv_buffer: Some(1 << 20),
            ..UdpConfig::sender(dest)
        })?;
        let mut points = Vec::new();
        let mut buf = vec![0u8; max_size];
        let mut rbuf = vec![0u8; max_size + 1];
        let mut seq = 0u64;
        for &size in &p.sizes {
            if stop.load(Ordering::Relaxed) {
                return Err(NetError::Aborted {
                    partial: Box::new(Partial::Lat(points)),
                    source: Box::new(NetError::Interrupted),
                });
            }
            let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds");
            let mut lost = 0u64;
            let mut i = 0;
            while i < p.count + p.warmup {
                if self.conn.peer_gone_or_talking() {
                    let e = ProtoError::Closed {
                        peer: self.conn.peer().to_string(),
                        what: "running the lat test".into(),
                    };
                    return Err(NetError::Aborted {
                        partial: Box::new(Partial::Lat(points)),
                        source: Box::new(e.into()),
                    });
                }
                seq += 1;
                TestPacketRepr {
                    kind: PacketKind::LatencyRequest,
                    test_id,
                    seq,
                    send_ts_ns: realtime_ns(),
                }
                .emit(&mut TestPacket::new_unchecked(&mut buf[..size]));
                let t0 = Instant::now();
                match round_trip(&sock, &buf[..size], &mut rbuf, test_id, seq, p.reply_timeout) {
                    Ok(true) => {
                        if i >= p.warmup {
                            let _ = h.record(t0.elapsed().as_nanos() as u64);
                        }
                    }
                    Ok(false) => {
                        if i >= p.warmup {
                            lost += 1;
                        }
                    }
                    Err(source) => {
                        return Err(NetError::Aborted {
                            partial: Box::new(Partial::Lat(points)),
                            source: Box::new(NetError::Io {
                                what: format!("lat: send/receive {size}-byte request"),
                                source,
                            }),
                        })
                    }
                }
                i += 1;
            }
            points.push(LatPoint {
                size,
                sent: p.count,
                received: p.count - lost,
                lost,
                rtt_us: HistSummary::from_hist(&h, 1e-3),
            });
        }
        let abort = |points: Vec<LatPoint>, e: NetError| NetError::Aborted {
            partial: Box::new(Partial::Lat(points)),
            source: Box::new(e),
        };
        if let Err(e) = self.conn.send(&Request::LatFinish) {
            return Err(abort(points, e.into()));
        }
        match self
            .conn
            .recv(self.timeout, "waiting for the lat result", "reply")
        {
            Ok(Reply::LatResult { echoed, foreign }) => Ok(LatResult::new(points, echoed, foreign)),
            Ok(Reply::Error { message }) => Err(abort(points, ProtoError::Remote(message).into())),
            Ok(other) => Err(abort(
                points,
                ProtoError::Unexpected {
                    expected: "lat_result",
                    got: short(&other),
                }
                .into(),
            )),
            Err(e) => Err(abort(points, e.into())),
        }
    }

    /// Memory-to-memory TCP throughput over `p.streams` connections for `p.duration`.
    pub fn tcp(&mut self, p: &TcpParams, stop: &AtomicBool) -> Result<TcpResult, NetError> {
        if !(1..=64).contains(&p.streams) {
            return Err(NetError::Invalid(format!(
                "tcp: streams must be 1..=64, got {}",
                p.streams
            )));
        }
        self.conn.send(&Request::TcpStart {
            streams: p.streams,
            recv_buffer: p.recv_buffer,
        })?;
        let (port, _) = self.expect_ready("waiting for the tcp test socket")?;
        let dest = SocketAddr::new(self.server.ip(), port);
        let before = HostSnapshot::take();
        // The test's own CPU: this thread's and each sending thread's, never the whole process's (a
        // competitor from --cpu-load, or anything else the process runs, is not the test's cost).
        let this_thread = ProcessCpu::read_thread();
        let started = Instant::now();
        let peer_gone = AtomicBool::new(false);
        let results: Vec<Result<(u64, TcpSockInfo, ProcessCpu), io::Error>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..p.streams)
                .map(|_| {
                    let (stop, gone) = (stop, &peer_gone);
                    scope.spawn(move || tcp_send(dest, p, stop, gone))
                })
                .collect();
            // Watch the control connection while the streams run, so a dead responder ends the test.
            while handles.iter().any(|h| !h.is_finished()) {
                if self.conn.peer_gone_or_talking() {
                    peer_gone.store(true, Ordering::Relaxed);
                }
                thread::sleep(Duration::from_millis(20));
            }
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("sender thread panicked")))
                })
                .collect()
        });
        let duration_s = started.elapsed().as_secs_f64();
        let host = HostSnapshot::take().since(&before);
        let local_threads = results
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .fold(ProcessCpu::read_thread().since(&this_thread), |sum, x| {
                sum.plus(&x.2)
            });
        let bytes_sent: Vec<u64> = results
            .iter()
            .map(|r| r.as_ref().map(|x| x.0).unwrap_or(0))
            .collect();
        let partial = || Partial::Tcp {
            bytes_sent: bytes_sent.clone(),
            duration_s,
        };
        if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
            return Err(NetError::Aborted {
                partial: Box::new(partial()),
                source: Box::new(NetError::Io {
                    what: format!("tcp: stream to {dest}"),
                    source: io::Error::new(e.kind(), e.to_string()),
                }),
            });
        }
        let local_sockets: Vec<TcpSockInfo> =
            results.into_iter().filter_map(|r| r.ok()).map(|x| x.1).collect();
        let step = (|| -> Result<TcpRemote, NetError> {
            self.conn.send(&Request::TcpFinish)?;
            match self.conn.recv(
                self.timeout + Duration::from_secs(6),
                "waiting for the tcp result",
                "reply",
            )? {
                Reply::TcpResult(r) => Ok(*r),
                Reply::Error { message } => Err(ProtoError::Remote(message).into()),
                other => Err(ProtoError::Unexpected {
                    expected: "tcp_result",
                    got: short(&other),
                }
                .into()),
            }
        })();
        match step {
            Ok(remote) => Ok(TcpResult::new(
                p,
                bytes_sent,
                duration_s,
                host,
                local_threads,
                local_sockets,
                remote,
            )),
            Err(e) => Err(NetError::Aborted {
                partial: Box::new(partial()),
                source: Box::new(e),
            }),
        }
    }
}

impl Client {
    /// The receive paths the responder offers ([`crate::eff`]).
    pub fn eff_transports(&mut self) -> Result<Vec<crate::eff::Availability>, NetError> {
        self.conn.send(&Request::EffProbe)?;
        match self
            .conn
            .recv(self.timeout, "waiting for the responder's transports", "reply")?
        {
            Reply::EffTransports { transports } => Ok(transports),
            Reply::Error { message } => Err(ProtoError::Remote(message).into()),
            other => Err(ProtoError::Unexpected {
                expected: "eff_transports",
                got: short(&other),
            }
            .into()),
        }
    }

    /// Starts a transport-efficiency test ([`crate::eff`]): the addresses to send to, one per UDP flow
    /// (TCP: the one listening port).
    pub fn eff_start(&mut self, setup: &crate::eff::EffSetup) -> Result<Vec<SocketAddr>, NetError> {
        self.conn.send(&Request::EffStart(setup.clone()))?;
        let ports = match self
            .conn
            .recv(self.timeout, "waiting for the efficiency test sockets", "reply")?
        {
            Reply::EffReady { ports, .. } => ports,
            Reply::Error { message } => return Err(ProtoError::Remote(message).into()),
            other => {
                return Err(ProtoError::Unexpected {
                    expected: "eff_ready",
                    got: short(&other),
                }
                .into())
            }
        };
        let want = if setup.transport.is_udp() {
            setup.streams as usize
        } else {
            1
        };
        if ports.len() != want {
            return Err(ProtoError::Unexpected {
                expected: "one port per flow",
                got: format!("{} ports", ports.len()),
            }
            .into());
        }
        Ok(ports
            .iter()
            .map(|&port| SocketAddr::new(self.server.ip(), port))
            .collect())
    }

    /// Runs `f` on a thread of its own while watching the control connection; the flag `f` is given
    /// turns true when the responder closes the connection or says something unasked. Err when `f`
    /// panicked.
    pub fn watching<T: Send>(&self, f: impl FnOnce(&AtomicBool) -> T + Send) -> thread::Result<T> {
        let peer_gone = AtomicBool::new(false);
        thread::scope(|scope| {
            let h = scope.spawn(|| f(&peer_gone));
            while !h.is_finished() {
                if self.conn.peer_gone_or_talking() {
                    peer_gone.store(true, Ordering::Relaxed);
                }
                thread::sleep(Duration::from_millis(20));
            }
            h.join()
        })
    }

    /// Ends an efficiency test whose sending failed and takes the responder's answer, so that the
    /// session stays in step.
    pub fn eff_abandon(&mut self) {
        if self.conn.send(&Request::EffFinish { sent: Vec::new() }).is_ok() {
            let _ = self.conn.recv::<Reply>(
                self.timeout + Duration::from_secs(6),
                "waiting for the end of a failed efficiency test",
                "reply",
            );
        }
    }

    /// Ends an efficiency test the user interrupted (no answer awaited).
    pub fn eff_interrupted(&mut self, sent: Vec<u64>) {
        let _ = self.conn.send(&Request::EffFinish { sent });
    }

    /// Ends an efficiency test: `sent` datagrams per UDP flow (TCP: bytes per connection); the
    /// receiver's measurements.
    pub fn eff_finish(&mut self, sent: Vec<u64>) -> Result<crate::eff::EffRemote, NetError> {
        self.conn.send(&Request::EffFinish { sent })?;
        match self.conn.recv(
            self.timeout + Duration::from_secs(6),
            "waiting for the efficiency result",
            "reply",
        )? {
            Reply::EffResult(r) => Ok(*r),
            Reply::Error { message } => Err(ProtoError::Remote(message).into()),
            other => Err(ProtoError::Unexpected {
                expected: "eff_result",
                got: short(&other),
            }
            .into()),
        }
    }
}

fn tcp_send(
    dest: SocketAddr,
    p: &TcpParams,
    stop: &AtomicBool,
    gone: &AtomicBool,
) -> io::Result<(u64, TcpSockInfo, ProcessCpu)> {
    let cpu = ProcessCpu::read_thread();
    let mut s = TcpStream::connect_timeout(&dest, Duration::from_secs(5))?;
    if let Some(b) = p.send_buffer {
        set_buffer(&s, false, b);
    }
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let buf = vec![0x5Au8; p.write_size.max(1)];
    let end = Instant::now() + p.duration;
    let mut n = 0u64;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        if gone.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "responder closed the control connection",
            ));
        }
        match s.write(&buf) {
            Ok(k) => n += k as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let info = tcp_sock_info(&s);
    s.shutdown(std::net::Shutdown::Write)?;
    // Wait for the receiver to close (it has read everything), bounded.
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut b = [0u8; 64];
    let _ = s.read(&mut b);
    Ok((n, info, ProcessCpu::read_thread().since(&cpu)))
}

/// Sends one request and waits for its reply; Ok(false) on timeout. Stale replies are skipped.
fn round_trip(
    sock: &UdpSocket,
    req: &[u8],
    rbuf: &mut [u8],
    test_id: u32,
    seq: u64,
    timeout: Duration,
) -> io::Result<bool> {
    sock.send(req)?;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        sock.set_read_timeout(Some(left.max(Duration::from_micros(100))))?;
        match sock.recv(rbuf) {
            Ok(n) => {
                if let Ok(p) = TestPacket::new_checked(&rbuf[..n.min(rbuf.len())]) {
                    if p.kind() == PacketKind::LatencyReply && p.test_id() == test_id && p.seq() == seq {
                        return Ok(true);
                    }
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Ok(false)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The responder's port closed: ICMP unreachable arrives as ECONNREFUSED.
            Err(e) => return Err(e),
        }
    }
}

struct SendOutcome {
    local: BwLocal,
    error: Option<NetError>,
}

/// The paced sender: packet k is due at start + k x wait; whatever is due goes out in one
/// `sendmmsg`. Headers are written into preallocated buffers; nothing allocates per packet.
fn send_paced(
    sock: &UdpSocket,
    p: &BwParams,
    test_id: u32,
    conn: &ControlConn,
    stop: &AtomicBool,
) -> SendOutcome {
    let batch = p.batch.clamp(1, 1024);
    // The datagrams of one batch lie back to back so that several due at once can go out as GSO
    // super-datagrams: the kernel cuts them into `size`-byte datagrams, one pass through the stack
    // instead of one per datagram (same datagrams on the wire, a fraction of the sender's CPU).
    let mut area = vec![0u8; batch * p.size];
    for (i, b) in area.chunks_exact_mut(p.size).enumerate() {
        for (j, x) in b.iter_mut().enumerate().skip(HEADER_LEN) {
            *x = (i + j) as u8;
        }
        let mut pkt = TestPacket::new_unchecked(&mut b[..]);
        pkt.fill_fixed();
        pkt.set_kind(PacketKind::Data);
        pkt.set_test_id(test_id);
    }
    let per_gso = if p.gso {
        let limit = if p.gso_segments > 0 {
            p.gso_segments
        } else {
            GSO_MAX_SEGMENTS
        };
        (crate::responder::MAX_DATAGRAM / p.size)
            .min(GSO_MAX_SEGMENTS)
            .min(limit)
    } else {
        1
    };
    let mut gso = per_gso > 1;
    let mut sender = BatchSender::new(batch);
    let start = Instant::now() + Duration::from_millis(1);
    let mut pacer = if p.wait_us > 0.0 {
        Pacer::new(1e6 / p.wait_us, start)
            .ok()
            .map(|pc| pc.with_catch_up_limit(None))
    } else {
        None
    };
    let mut k = 0u64;
    let mut error = None;
    let mut first_send: Option<Instant> = None;
    let mut next_check = 0u64;
    let mut gso_sends = 0u64;
    // One entry per send call at most, allocated before the first packet.
    let mut handed: Vec<(u64, u64)> = if p.timeline && p.count <= crate::stats::MAX_TIMELINE {
        Vec::with_capacity(p.count as usize + 1)
    } else {
        Vec::new()
    };
    let keep_handed = handed.capacity() > 0;
    while k < p.count {
        let n = match pacer.as_mut() {
            Some(pc) => {
                pc.wait_until_due(k);
                let elapsed = Instant::now().saturating_duration_since(start).as_secs_f64();
                let due = (elapsed * pc.rate()).floor() as u64 + 1;
                due.saturating_sub(k).clamp(1, batch as u64)
            }
            None => (batch as u64).min(p.count - k),
        }
        .min(p.count - k) as usize;
        for (j, b) in area.chunks_exact_mut(p.size).take(n).enumerate() {
            let mut pkt = TestPacket::new_unchecked(b);
            pkt.set_seq(k + j as u64);
            pkt.set_send_ts_ns(realtime_ns());
        }
        first_send.get_or_insert_with(Instant::now);
        let mut b = sender.batch();
        let group = if gso { per_gso } else { 1 };
        for chunk in area[..n * p.size].chunks(group * p.size) {
            if chunk.len() > p.size {
                // check_gso cannot fail: at most per_gso segments of at most MAX_UDP_PAYLOAD bytes.
                let _ = b.push_gso(&[chunk], p.size as u16);
                gso_sends += 1;
            } else {
                b.push(&[chunk]);
            }
        }
        let flushed = b.flush(sock);
        if keep_handed && handed.len() < handed.capacity() {
            let n = match &flushed {
                Ok(sent) => sent.datagrams,
                Err(e) => e.sent.datagrams,
            };
            if n > 0 {
                handed.push((k + n as u64, realtime_ns()));
            }
        }
        match flushed {
            Ok(sent) => k += sent.datagrams as u64,
            Err(e) if e.source.raw_os_error() == Some(libc::ECONNREFUSED) => {
                // An ICMP port-unreachable from an earlier datagram: count it and keep going; the
                // control connection tells whether the responder is really gone.
                k += e.sent.datagrams.max(1) as u64;
            }
            Err(e)
                if gso
                    && matches!(
                        e.source.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::EMSGSIZE | libc::EOPNOTSUPP)
                    ) =>
            {
                // The path refuses GSO (segment larger than its MTU, no checksum offload, old
                // kernel): send datagram by datagram from here on; the unsent ones go again.
                k += e.sent.datagrams as u64;
                gso = false;
            }
            Err(e) => {
                k += e.sent.datagrams as u64;
                error = Some(NetError::Io {
                    what: format!(
                        "bw: send to {}",
                        sock.peer_addr().map(|a| a.to_string()).unwrap_or_default()
                    ),
                    source: e.source,
                });
                break;
            }
        }
        if k >= next_check {
            next_check = k + 1024;
            if stop.load(Ordering::Relaxed) {
                error = Some(NetError::Interrupted);
                break;
            }
            if conn.peer_gone_or_talking() {
                error = Some(
                    ProtoError::Closed {
                        peer: conn.peer().to_string(),
                        what: "sending bw test packets".into(),
                    }
                    .into(),
                );
                break;
            }
        }
    }
    let duration = first_send.map(|t| t.elapsed()).unwrap_or_default().as_secs_f64();
    let st = sender.stats();
    let local = BwLocal {
        count: p.count,
        sent: k,
        send_duration_s: duration,
        send_user_rate_mbps: if duration > 0.0 {
            8.0 * p.size as f64 * k as f64 / duration / 1e6
        } else {
            0.0
        },
        syscalls: st.syscalls,
        gso_sends,
        would_block: st.would_block,
        no_buffers: st.no_buffers,
        refused: st.refused,
        host: HostUsage::default(),
        remote_buffer: 0,
        handed,
    };
    SendOutcome { local, error }
}

/// Parameters of one UDP throughput test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BwParams {
    /// Datagram size (UDP payload), bytes.
    pub size: usize,
    /// Packets to send.
    pub count: u64,
    /// Spacing between packets, µs (0: as fast as possible).
    pub wait_us: f64,
    /// Send buffer to request, bytes.
    pub send_buffer: Option<usize>,
    /// Receive buffer for the responder to request, bytes.
    pub recv_buffer: Option<usize>,
    /// Packets per sendmmsg at most.
    pub batch: usize,
    /// Send datagrams that are due together (behind schedule, or flat out) as GSO super-datagrams
    /// (falls back to one datagram per message when the path refuses GSO).
    pub gso: bool,
    /// Most datagrams per GSO super-datagram (0: as many as fit in one, up to the kernel's limit).
    #[serde(default)]
    pub gso_segments: usize,
    /// Ask the responder for every packet's times ([`BwRemote::timeline`]) and note when each
    /// send call returned ([`BwLocal::handed`]); at most [`crate::stats::MAX_TIMELINE`] packets.
    #[serde(default)]
    pub timeline: bool,
}

impl BwParams {
    /// `count` packets of `size` bytes spaced `wait_us`, 4 MiB buffers, batches of 32.
    pub fn new(size: usize, count: u64, wait_us: f64) -> Self {
        BwParams {
            size,
            count,
            wait_us,
            send_buffer: Some(4 << 20),
            recv_buffer: Some(8 << 20),
            batch: 32,
            gso: true,
            gso_segments: 0,
            timeline: false,
        }
    }

    /// The spacing that offers `rate_bps` of UDP payload at `size` bytes per packet, µs.
    pub fn wait_for_rate(size: usize, rate_bps: f64) -> f64 {
        8.0 * size as f64 / rate_bps * 1e6
    }

    fn validate(&self) -> Result<(), NetError> {
        if !(HEADER_LEN..=65_507).contains(&self.size) {
            return Err(NetError::Invalid(format!(
                "bw: size {} outside {HEADER_LEN}..=65507 bytes",
                self.size
            )));
        }
        if self.count == 0 || self.count > crate::responder::MAX_TEST_PACKETS {
            return Err(NetError::Invalid(format!(
                "bw: count {} outside 1..={}",
                self.count,
                crate::responder::MAX_TEST_PACKETS
            )));
        }
        if !self.wait_us.is_finite() || self.wait_us < 0.0 {
            return Err(NetError::Invalid(format!(
                "bw: wait {} µs is not a non-negative number",
                self.wait_us
            )));
        }
        Ok(())
    }
}

/// The sending side of a throughput test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BwLocal {
    /// Packets asked for.
    pub count: u64,
    /// Packets handed to the kernel.
    pub sent: u64,
    /// First to last send, s.
    pub send_duration_s: f64,
    /// 8 x size x sent / duration, Mb/s.
    pub send_user_rate_mbps: f64,
    /// sendmmsg calls.
    pub syscalls: u64,
    /// GSO super-datagrams among the messages sent.
    #[serde(default)]
    pub gso_sends: u64,
    /// EAGAIN retries.
    pub would_block: u64,
    /// ENOBUFS retries.
    pub no_buffers: u64,
    /// ECONNREFUSED seen.
    pub refused: u64,
    /// The sender's CPU during the test.
    pub host: HostUsage,
    /// Receive buffer the responder got, bytes.
    pub remote_buffer: usize,
    /// With [`BwParams::timeline`]: per send call that handed packets to the kernel, the number of
    /// packets handed so far and the CLOCK_REALTIME ns when the call returned (every packet up to
    /// that number was in the kernel by then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handed: Vec<(u64, u64)>,
}

/// One UDPmon-style throughput line plus the extra statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BwResult {
    /// Datagram size, bytes.
    pub size: usize,
    /// Packets asked for.
    pub count: u64,
    /// Spacing asked for, µs.
    pub wait_us: f64,
    /// Sent user rate, Mb/s.
    pub send_user_rate_mbps: f64,
    /// Packets received.
    pub received: u64,
    /// Packets lost.
    pub lost: u64,
    /// Packets out of order (RFC 4737 reordered).
    pub out_of_order: u64,
    /// Lost percent.
    pub loss_percent: f64,
    /// Lost minus the drops the receiving host counted (socket overflow).
    pub lost_in_network: i64,
    /// 8 x size x received / (last - first arrival), Mb/s.
    pub recv_user_rate_mbps: f64,
    /// The same with 66 bytes of Ethernet/IP/UDP overhead per packet, Mb/s.
    pub recv_wire_rate_mbps: f64,
    /// Sender details.
    pub local: BwLocal,
    /// Receiver details and statistics.
    pub remote: BwRemote,
    /// Socket and setup warnings.
    pub warnings: Vec<String>,
}

impl BwResult {
    fn new(p: &BwParams, local: BwLocal, remote: BwRemote, warnings: Vec<String>) -> Self {
        let a = &remote.arrivals;
        let span = a.receive_span_s();
        // With n arrivals the span covers n-1 gaps; UDPmon divides all n packets by it.
        let rate = |bytes: usize| {
            if span > 0.0 {
                8.0 * bytes as f64 * a.received as f64 / span / 1e6
            } else {
                0.0
            }
        };
        let host_drops = remote.socket_drops as i64;
        BwResult {
            size: p.size,
            count: p.count,
            wait_us: p.wait_us,
            send_user_rate_mbps: local.send_user_rate_mbps,
            received: a.received,
            lost: a.lost,
            out_of_order: a.out_of_order,
            loss_percent: a.loss_percent(),
            lost_in_network: a.lost as i64 - host_drops,
            recv_user_rate_mbps: rate(p.size),
            recv_wire_rate_mbps: rate(p.size + WIRE_OVERHEAD),
            local,
            remote,
            warnings,
        }
    }
}

/// Parameters of a latency test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatParams {
    /// Message sizes, bytes.
    pub sizes: Vec<usize>,
    /// Measured requests per size.
    pub count: u64,
    /// Unmeasured requests before each size.
    pub warmup: u64,
    /// How long to wait for each reply.
    pub reply_timeout: Duration,
}

/// Latency at one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatPoint {
    /// Message size, bytes.
    pub size: usize,
    /// Requests sent (measured).
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Requests without a reply within the timeout.
    pub lost: u64,
    /// Round-trip times, µs.
    pub rtt_us: HistSummary,
}

/// Latency against message size with a least-squares line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatResult {
    /// One point per size.
    pub points: Vec<LatPoint>,
    /// Slope of median RTT against size, µs per byte (round trip: both directions' per-byte cost).
    pub slope_us_per_byte: f64,
    /// Intercept, µs (the fixed cost of a round trip).
    pub intercept_us: f64,
    /// Coefficient of determination of the fit.
    pub r2: f64,
    /// Requests the responder echoed.
    pub echoed: u64,
    /// Datagrams the responder ignored.
    pub foreign: u64,
}

impl LatResult {
    fn new(points: Vec<LatPoint>, echoed: u64, foreign: u64) -> Self {
        let xy: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.rtt_us.count > 0)
            .map(|p| (p.size as f64, p.rtt_us.p50))
            .collect();
        let (slope, intercept, r2) = least_squares(&xy).unwrap_or((0.0, 0.0, 0.0));
        LatResult {
            points,
            slope_us_per_byte: slope,
            intercept_us: intercept,
            r2,
            echoed,
            foreign,
        }
    }
}

/// Ordinary least squares y = a x + b: (a, b, r^2); None for fewer than 2 distinct x.
pub fn least_squares(xy: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let n = xy.len() as f64;
    if xy.len() < 2 {
        return None;
    }
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let a = sxy / sxx;
    let b = my - a * mx;
    let r2 = if syy > 0.0 { sxy * sxy / (sxx * syy) } else { 1.0 };
    Some((a, b, r2))
}

/// Parameters of a TCP test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpParams {
    /// Parallel connections.
    pub streams: u32,
    /// Sending time.
    pub duration: Duration,
    /// Bytes per write.
    pub write_size: usize,
    /// Send buffer per connection, bytes.
    pub send_buffer: Option<usize>,
    /// Receive buffer per connection (responder side), bytes.
    pub recv_buffer: Option<usize>,
}

/// A TCP throughput result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpResult {
    /// Connections.
    pub streams: u32,
    /// Sending time, s.
    pub duration_s: f64,
    /// Bytes written per stream.
    pub bytes_sent: Vec<u64>,
    /// Bytes the receiver read in total.
    pub bytes_received: u64,
    /// Receiver bytes over the receiver's first-to-last-byte span, Mb/s.
    pub rate_mbps: f64,
    /// The sender's CPU seconds per GB received: its test threads' (the sending threads and the one
    /// watching the control connection), not the rest of the process's (a `--cpu-load` competitor).
    pub sender_cpu_s_per_gb: f64,
    /// The receiver's CPU seconds per GB received: its test threads' (or, from a responder that does not
    /// report them, its whole process's).
    pub receiver_cpu_s_per_gb: f64,
    /// The sender's host and whole process during the test.
    pub local_host: HostUsage,
    /// The CPU time of the sender's test threads.
    #[serde(default)]
    pub local_threads: ProcessCpu,
    /// Sender sockets at the end.
    pub local_sockets: Vec<TcpSockInfo>,
    /// The receiver's view.
    pub remote: TcpRemote,
}

impl TcpResult {
    fn new(
        p: &TcpParams,
        bytes_sent: Vec<u64>,
        duration_s: f64,
        local_host: HostUsage,
        local_threads: ProcessCpu,
        local_sockets: Vec<TcpSockInfo>,
        remote: TcpRemote,
    ) -> Self {
        let received: u64 = remote.bytes.iter().sum();
        let span = remote.last_ns.saturating_sub(remote.first_ns) as f64 * 1e-9;
        let gb = received as f64 / 1e9;
        let per_gb = |s: f64| if gb > 0.0 { s / gb } else { 0.0 };
        TcpResult {
            streams: p.streams,
            duration_s,
            bytes_sent,
            bytes_received: received,
            rate_mbps: if span > 0.0 {
                8.0 * received as f64 / span / 1e6
            } else {
                0.0
            },
            sender_cpu_s_per_gb: per_gb(local_threads.total_s()),
            receiver_cpu_s_per_gb: per_gb(remote.threads.unwrap_or(remote.host.process).total_s()),
            local_host,
            local_threads,
            local_sockets,
            remote,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_exact_line() {
        let xy = [
            (64.0, 20.0 + 0.01 * 64.0),
            (1472.0, 20.0 + 14.72),
            (8192.0, 20.0 + 81.92),
        ];
        let (a, b, r2) = least_squares(&xy).unwrap();
        assert!((a - 0.01).abs() < 1e-12 && (b - 20.0).abs() < 1e-9 && (r2 - 1.0).abs() < 1e-12);
        assert!(least_squares(&[(1.0, 1.0)]).is_none());
        assert!(least_squares(&[(1.0, 1.0), (1.0, 2.0)]).is_none());
    }

    #[test]
    fn host_gets_the_default_port() {
        assert_eq!(resolve_responder("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve_responder("127.0.0.1:99").unwrap().port(), 99);
        assert_eq!(resolve_responder("::1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve_responder("[::1]:7").unwrap().port(), 7);
    }

    #[test]
    fn wait_for_rate_matches_udpmon_arithmetic() {
        // 1472 bytes at 200 Mb/s: 58.88 µs apart.
        assert!((BwParams::wait_for_rate(1472, 200e6) - 58.88).abs() < 1e-9);
    }
}
