//! The measuring end: connects to a responder, runs throughput, latency and TCP tests, and merges
//! the local and remote views into results.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use vlbiflow_udp::{open_udp, UdpConfig};

use crate::control::{ControlConn, LineRead, STOP_POLL};
use crate::host::{HostSnapshot, ProcessCpu};
use crate::proto::{BwSetup, ProtoError, Request, BW_FINISH_SLACK, PROTOCOL_VERSION};
use crate::tcpinfo::TcpSockInfo;
use crate::wire::{realtime_ns, HEADER_LEN};
use send::{round_trip, send_paced, tcp_send};

mod bw_send;
mod error;
mod exchange;
mod lat;
mod results;
mod send;

pub use bw_send::{BwSchedule, Flushed};
pub use error::{NetError, Partial};
pub use exchange::{Answer, Exchange};
pub use lat::LatProbe;
pub use results::{
    least_squares, BwLocal, BwParams, BwResult, LatParams, LatPoint, LatResult, TcpParams, TcpResult,
    WIRE_OVERHEAD,
};

/// The responder's default control port.
pub const DEFAULT_PORT: u16 = 14233;

/// Resolves a responder given as HOST, HOST:PORT, an IPv6 address or `[IPv6]:PORT`; the port defaults
/// to [`DEFAULT_PORT`]. A name's first IPv4 address is taken, else its first
/// ([`vlbiflow_udp::net::resolve`]).
pub fn resolve_responder(host: &str) -> Result<SocketAddr, String> {
    let with_port = if host.parse::<SocketAddr>().is_ok()
        || host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.contains(':') && p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        vlbiflow_udp::net::host_port(host, DEFAULT_PORT)
    };
    vlbiflow_udp::net::resolve(&with_port).map_err(|e| format!("responder address: {e}"))
}

/// A session with a responder.
pub struct Client {
    conn: ControlConn,
    exchange: Exchange,
    server: SocketAddr,
    remote_software: String,
    next_test_id: u32,
}

impl Client {
    /// Connects and shakes hands; `timeout` bounds connecting and every control-message wait
    /// outside the tests themselves.
    pub fn connect(server: SocketAddr, timeout: Duration) -> Result<Self, NetError> {
        Client::connect_with_version(server, timeout, PROTOCOL_VERSION, None)
    }

    /// Like [`connect`](Self::connect), with the responder's access token in the hello (for a
    /// responder run with `--token-file`).
    pub fn connect_with_token(
        server: SocketAddr,
        timeout: Duration,
        token: Option<&str>,
    ) -> Result<Self, NetError> {
        Client::connect_with_version(server, timeout, PROTOCOL_VERSION, token)
    }

    /// Like [`connect_with_token`](Self::connect_with_token) but announcing `version` (to test
    /// version handling).
    pub fn connect_with_version(
        server: SocketAddr,
        timeout: Duration,
        version: u32,
        token: Option<&str>,
    ) -> Result<Self, NetError> {
        let conn = ControlConn::connect(server, timeout)?;
        let exchange = Exchange::new(conn.peer().to_string(), timeout);
        let mut client = Client {
            conn,
            exchange,
            server,
            remote_software: String::new(),
            next_test_id: (realtime_ns() as u32) | 1,
        };
        let hello = Request::Hello {
            version,
            software: format!("vlbiflow-net {}", env!("CARGO_PKG_VERSION")),
            token: token.map(str::to_owned),
        };
        match client.ask(hello)? {
            Answer::Hello(software) => client.remote_software = software,
            other => return Err(mismatch("hello", other).into()),
        }
        Ok(client)
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

    /// Sends `req` and waits for its answer (no stop flag: waits are bounded by the timeouts).
    fn ask(&mut self, req: Request) -> Result<Answer, ProtoError> {
        match self.ask_unless_stopped(req, None)? {
            Some(answer) => Ok(answer),
            None => Err(self.exchange.handle_closed()),
        }
    }

    /// Sends `req` and waits for its answer; None as soon as `stop` is set (looked at every
    /// [`STOP_POLL`] at least): the session is then out of step and should be dropped.
    fn ask_unless_stopped(
        &mut self,
        req: Request,
        stop: Option<&AtomicBool>,
    ) -> Result<Option<Answer>, ProtoError> {
        self.exchange.request(Instant::now(), req);
        self.converse(stop)
    }

    /// Sends what the exchange has queued, then reads until it has its answer.
    fn converse(&mut self, stop: Option<&AtomicBool>) -> Result<Option<Answer>, ProtoError> {
        while let Some(req) = self.exchange.poll_transmit() {
            self.conn.send(&req)?;
        }
        while self.exchange.is_waiting() {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                self.exchange.abandon();
                return Ok(None);
            }
            let now = Instant::now();
            let deadline = self.exchange.poll_timeout().unwrap_or(now);
            if now >= deadline {
                if let Some(e) = self.exchange.handle_timeout(now) {
                    return Err(e);
                }
                continue;
            }
            let mut wait = deadline - now;
            if stop.is_some() {
                wait = wait.min(STOP_POLL);
            }
            let what = self.exchange.waiting_for();
            match self.conn.read_line(wait, what) {
                Ok(LineRead::Line(line)) => {
                    if let Some(answer) = self.exchange.handle_line(Instant::now(), &line) {
                        return answer.map(Some);
                    }
                }
                Ok(LineRead::Nothing) => {}
                Ok(LineRead::Closed) => return Err(self.exchange.handle_closed()),
                Err(e) => {
                    self.exchange.abandon();
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Sends `req` without waiting for an answer.
    fn tell(&mut self, req: Request) -> Result<(), ProtoError> {
        self.exchange.notify(req);
        while let Some(req) = self.exchange.poll_transmit() {
            self.conn.send(&req)?;
        }
        Ok(())
    }

    /// Starts a bw, lat or tcp test: the port and the buffer the responder got.
    fn start(&mut self, req: Request) -> Result<(u16, usize), NetError> {
        match self.ask(req)? {
            Answer::Ready { port, buffer } => Ok((port, buffer)),
            other => Err(mismatch("ready", other).into()),
        }
    }

    /// Runs one UDP throughput test: `count` packets of `size` bytes, packet k due at start +
    /// k x `wait_us` (0: as fast as possible).
    pub fn bw(&mut self, p: &BwParams, stop: &AtomicBool) -> Result<BwResult, NetError> {
        p.validate().map_err(NetError::Invalid)?;
        let test_id = self.test_id();
        let send_estimate = Duration::from_secs_f64(p.count as f64 * p.wait_us * 1e-6);
        let max_duration = send_estimate + BW_FINISH_SLACK;
        let (port, remote_buffer) = self.start(Request::BwStart(BwSetup {
            test_id,
            count: p.count,
            size: p.size,
            recv_buffer: p.recv_buffer,
            max_duration_ms: max_duration.as_millis() as u64,
            timeline: p.timeline,
        }))?;
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
        // The responder answers once the stream has drained (up to its idle time after the last
        // datagram): a stop in that wait ends the test there, not after the answer.
        let remote = match self.ask_unless_stopped(Request::BwFinish { sent: local.sent }, Some(stop)) {
            Ok(None) => return Err(abort(local, NetError::Interrupted)),
            Ok(Some(Answer::Bw(r))) => *r,
            Ok(Some(other)) => return Err(abort(local, mismatch("bw_result", other).into())),
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
        let (port, _) = self.start(Request::LatStart { test_id, max_size })?;
        let dest = SocketAddr::new(self.server.ip(), port);
        let (sock, _) = open_udp(&UdpConfig {
            recv_buffer: Some(1 << 20),
            ..UdpConfig::sender(dest)
        })?;
        let mut probe = LatProbe::new(p, test_id);
        let mut buf = vec![0u8; max_size];
        let mut rbuf = vec![0u8; max_size + 1];
        while !probe.is_done() {
            if probe.at_size_start() && stop.load(Ordering::Relaxed) {
                return Err(NetError::Aborted {
                    partial: Box::new(Partial::Lat(probe.into_points())),
                    source: Box::new(NetError::Interrupted),
                });
            }
            if self.conn.peer_gone_or_talking() {
                let e = ProtoError::Closed {
                    peer: self.conn.peer().to_string(),
                    what: "running the lat test".into(),
                };
                return Err(NetError::Aborted {
                    partial: Box::new(Partial::Lat(probe.into_points())),
                    source: Box::new(e.into()),
                });
            }
            let size = probe.size();
            if let Err(source) = round_trip(&sock, &mut probe, &mut buf, &mut rbuf) {
                return Err(NetError::Aborted {
                    partial: Box::new(Partial::Lat(probe.into_points())),
                    source: Box::new(NetError::Io {
                        what: format!("lat: send/receive {size}-byte request"),
                        source,
                    }),
                });
            }
        }
        let points = probe.into_points();
        let abort = |points: Vec<LatPoint>, e: NetError| NetError::Aborted {
            partial: Box::new(Partial::Lat(points)),
            source: Box::new(e),
        };
        match self.ask(Request::LatFinish) {
            Ok(Answer::Lat { echoed, foreign }) => Ok(LatResult::new(points, echoed, foreign)),
            Ok(other) => Err(abort(points, mismatch("lat_result", other).into())),
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
        let (port, _) = self.start(Request::TcpStart {
            streams: p.streams,
            recv_buffer: p.recv_buffer,
        })?;
        let dest = SocketAddr::new(self.server.ip(), port);
        let before = HostSnapshot::take();
        // The test's own CPU: this thread's and each sending thread's, never the whole process's (a
        // competitor from --cpu-load, or anything else the process runs, is not the test's cost).
        let this_thread = ProcessCpu::read_thread();
        let started = Instant::now();
        // The streams run while the control connection is watched, so a dead responder ends the test.
        type Sent = Result<(u64, TcpSockInfo, ProcessCpu), io::Error>;
        let results: Vec<Sent> = self
            .watching(|gone| {
                thread::scope(|scope| {
                    let handles: Vec<_> = (0..p.streams)
                        .map(|_| scope.spawn(move || tcp_send(dest, p, stop, gone)))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join()
                                .unwrap_or_else(|_| Err(io::Error::other("sender thread panicked")))
                        })
                        .collect()
                })
            })
            .unwrap_or_else(|_| vec![Err(io::Error::other("sender thread panicked"))]);
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
        let step = match self.ask(Request::TcpFinish) {
            Ok(Answer::Tcp(r)) => Ok(*r),
            Ok(other) => Err(NetError::from(mismatch("tcp_result", other))),
            Err(e) => Err(e.into()),
        };
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
        match self.ask(Request::EffProbe)? {
            Answer::Transports(t) => Ok(t),
            other => Err(mismatch("eff_transports", other).into()),
        }
    }

    /// Starts a transport-efficiency test ([`crate::eff`]): the addresses to send to, one per UDP flow
    /// (TCP: the one listening port).
    pub fn eff_start(&mut self, setup: &crate::eff::EffSetup) -> Result<Vec<SocketAddr>, NetError> {
        let ports = match self.ask(Request::EffStart(setup.clone()))? {
            Answer::EffReady { ports } => ports,
            other => return Err(mismatch("eff_ready", other).into()),
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
        self.exchange
            .request_any(Instant::now(), Request::EffFinish { sent: Vec::new() });
        let _ = self.converse(None);
    }

    /// Ends an efficiency test the user interrupted (no answer awaited).
    pub fn eff_interrupted(&mut self, sent: Vec<u64>) {
        let _ = self.tell(Request::EffFinish { sent });
    }

    /// Ends an efficiency test: `sent` datagrams per UDP flow (TCP: bytes per connection); the
    /// receiver's measurements.
    pub fn eff_finish(&mut self, sent: Vec<u64>) -> Result<crate::eff::EffRemote, NetError> {
        match self.ask(Request::EffFinish { sent })? {
            Answer::Eff(r) => Ok(*r),
            other => Err(mismatch("eff_result", other).into()),
        }
    }
}

/// An answer of the wrong kind (the exchange only gives the kind asked for, or an error).
fn mismatch(expected: &'static str, got: Answer) -> ProtoError {
    ProtoError::Unexpected {
        expected,
        got: format!("{got:?}").chars().take(80).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_gets_the_default_port() {
        assert_eq!(resolve_responder("127.0.0.1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve_responder("127.0.0.1:99").unwrap().port(), 99);
        assert_eq!(resolve_responder("::1").unwrap().port(), DEFAULT_PORT);
        assert_eq!(resolve_responder("[::1]:7").unwrap().port(), 7);
    }
}
