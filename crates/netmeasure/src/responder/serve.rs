//! The I/O layer of a responder session: reads the control connection into a [`Session`], carries out
//! what it asks for (replies, the tests' sockets and threads, the memory budget, counters, the log)
//! and closes when it closes.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use vlbiflow_guard::gate::Gate;
use vlbiflow_udp::{open_udp, UdpConfig};

use super::config::{ResponderConfig, ResponderCounters};
use super::receive::{bw_receive, lat_echo, tcp_receive, BwControl, BwReceive, TcpOutcome};
use super::session::{
    human_bytes, Counter, Output, Plan, Session, SessionConfig, SessionError, Test, LAT_RECV_BUFFER,
};
use crate::control::{ControlConn, LineRead};
use crate::eff::{none_offered, EffReceive};
use crate::host::{HostSnapshot, ProcessCpu};
use crate::proto::{BwRemote, BwSetup, Reply, TcpRemote};
use crate::stats::ArrivalStats;

/// How often a wait for the client looks at the stop flag.
const STOP_SLICE: Duration = Duration::from_millis(200);
/// Write timeout of a session's replies.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

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
    plan: &Plan,
    config: &ResponderConfig,
    counters: &'a ResponderCounters,
) -> Result<Reservation<'a>, String> {
    let refused = |message: String| {
        counters.refused_tests.fetch_add(1, Ordering::Relaxed);
        Err(message)
    };
    let (what, bytes) = (&plan.what, plan.memory);
    let limit = config.test_memory_limit(plan.streams);
    if bytes > limit {
        return refused(format!(
            "{what} needs {} of memory, more than the {} this responder allows one test",
            human_bytes(bytes),
            human_bytes(limit)
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

/// The shared state a session's I/O works with.
pub(super) struct Ctx<'a> {
    pub config: &'a ResponderConfig,
    pub counters: &'a ResponderCounters,
    pub stop: &'a AtomicBool,
    pub log: &'a dyn Fn(&str),
}

/// The gate's lock (a panic elsewhere does not stop admission).
pub(super) fn lock(gate: &Mutex<Gate>) -> MutexGuard<'_, Gate> {
    gate.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection the gate admitted: pending until its hello passed.
pub(super) struct Admission<'a> {
    pub gate: &'a Mutex<Gate>,
    pub peer: SocketAddr,
    /// How long to hold the connection unread first (its address has strikes).
    pub delay: Duration,
}

/// Reports a pending connection's outcome to the gate exactly once: passed, struck (a failed or
/// silent hello), or left (the responder stopping, a failure of this side) when dropped unreported.
struct Pending<'a> {
    admission: Admission<'a>,
    open: bool,
}

impl Pending<'_> {
    fn passed(&mut self) {
        if std::mem::take(&mut self.open) {
            lock(self.admission.gate).passed(self.admission.peer.ip());
        }
    }

    fn struck(&mut self) {
        if std::mem::take(&mut self.open) {
            lock(self.admission.gate).struck(self.admission.peer.ip(), Instant::now());
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.open {
            lock(self.admission.gate).left(self.admission.peer.ip());
        }
    }
}

/// Holds a connection unread for `delay`, or until the responder stops; false when it stopped.
fn tarpit(delay: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + delay;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        thread::sleep(left.min(STOP_SLICE));
    }
    false
}

/// Serves one control connection the gate admitted until its session closes: its hello within
/// [`ResponderConfig::hello_timeout`] (after the gate's delay), then a session slot,
/// then its tests.
pub(super) fn serve(stream: TcpStream, ctx: &Ctx, admission: Admission) -> Result<(), SessionError> {
    let mut pending = Pending {
        admission,
        open: true,
    };
    if !pending.admission.delay.is_zero() {
        ctx.counters.tarpitted.fetch_add(1, Ordering::Relaxed);
        if !tarpit(pending.admission.delay, ctx.stop) {
            return Err(SessionError::Stopped);
        }
    }
    stream
        .set_nonblocking(false)
        .map_err(|e| SessionError::Other(format!("set blocking: {e}")))?;
    let mut conn = ControlConn::from_stream(stream, WRITE_TIMEOUT)?;
    let config = SessionConfig {
        software: ctx.config.software.clone(),
        idle_timeout: ctx.config.idle_timeout,
        hello_timeout: ctx.config.hello_timeout,
        default_recv_buffer: ctx.config.default_recv_buffer,
        efficiency: ctx.config.efficiency.is_some(),
        peer: conn.peer().to_string(),
        token: ctx.config.token.clone(),
        max_test_duration: ctx.config.max_test_duration,
    };
    let mut session = Session::gated(config, Instant::now());
    let mut slot = None;
    let mut test: Option<Running> = None;
    loop {
        while let Some(o) = session.poll_output() {
            match o {
                Output::Reply { reply, critical } => {
                    if let Err(e) = conn.send(&reply) {
                        if critical {
                            session.handle_send_failed(e);
                        }
                    }
                }
                Output::Start(plan) => match start(&plan, &conn, ctx) {
                    Ok((running, ready)) => {
                        test = Some(running);
                        session.started(Instant::now(), Ok(ready));
                    }
                    Err(why) => session.started(Instant::now(), Err(why)),
                },
                Output::Finish { sent } => match test.take().map(|t| t.finish(sent, ctx.counters)) {
                    Some(Ok(reply)) => session.finished(Instant::now(), reply),
                    Some(Err(why)) => session.finish_failed(why),
                    None => session.finish_failed("no test running".into()),
                },
                Output::Abort => {
                    if let Some(t) = test.take() {
                        t.abort(ctx.counters);
                    }
                }
                Output::Admit => {
                    pending.passed();
                    slot = super::take_slot(&ctx.counters.active_sessions, ctx.config.max_sessions);
                    let max = ctx.config.max_sessions;
                    if slot.is_some() {
                        ctx.counters.sessions.fetch_add(1, Ordering::Relaxed);
                        (ctx.log)("session admitted");
                        session.admitted(Instant::now(), Ok(()));
                    } else {
                        ctx.counters.refused_sessions.fetch_add(1, Ordering::Relaxed);
                        (ctx.log)(&format!("refused: {max} sessions running"));
                        session.admitted(Instant::now(), Err(max));
                    }
                }
                Output::Probe => session.probed(
                    ctx.config
                        .efficiency
                        .as_ref()
                        .map_or_else(none_offered, |s| s.transports()),
                ),
                Output::Count(c) => {
                    let counter = match c {
                        Counter::Tests => &ctx.counters.tests,
                        Counter::Aborted => &ctx.counters.aborted,
                        Counter::BadRequests => &ctx.counters.bad_requests,
                        Counter::Unauthorized => &ctx.counters.unauthorized,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                Output::Log(m) => (ctx.log)(&m),
                Output::Close(r) => {
                    if let Some(t) = test.take() {
                        t.abort(ctx.counters);
                    }
                    // Still in the handshake: a failed or silent hello (a stop is neither).
                    if !matches!(r, Err(SessionError::Stopped)) {
                        pending.struck();
                    }
                    drop(slot);
                    return r;
                }
            }
        }
        let now = Instant::now();
        if ctx.stop.load(Ordering::Relaxed) {
            session.handle_stop(now);
            continue;
        }
        let wait = match session.poll_timeout() {
            Some(at) if at <= now => {
                if session.in_handshake() {
                    ctx.counters.hello_timeouts.fetch_add(1, Ordering::Relaxed);
                }
                session.handle_timeout(now);
                continue;
            }
            Some(at) => (at - now).min(STOP_SLICE),
            None => STOP_SLICE,
        };
        match conn.read_line(wait, session.waiting_for()) {
            Ok(LineRead::Line(line)) => session.handle_line(Instant::now(), &line),
            Ok(LineRead::Nothing) => {}
            Ok(LineRead::Closed) => session.handle_closed(Instant::now()),
            Err(e) => session.handle_error(Instant::now(), e),
        }
    }
}

/// A test's resources while it runs.
enum Running<'a> {
    Bw {
        ctl: Arc<BwControl>,
        receiver: thread::JoinHandle<(ArrivalStats, u64, u64)>,
        setup: BwSetup,
        before: HostSnapshot,
        reservation: Reservation<'a>,
    },
    Lat {
        done: Arc<AtomicBool>,
        echo: thread::JoinHandle<(u64, u64)>,
        reservation: Reservation<'a>,
    },
    Tcp {
        done: Arc<AtomicBool>,
        acceptor: thread::JoinHandle<TcpOutcome>,
        before: HostSnapshot,
        this_thread: ProcessCpu,
        reservation: Reservation<'a>,
    },
    Eff {
        rx: Box<dyn EffReceive>,
        reservation: Reservation<'a>,
    },
}

/// The address test sockets bind to: the control connection's local IP.
fn test_socket_bind(conn: &ControlConn) -> SocketAddr {
    let ip = conn
        .stream()
        .local_addr()
        .map(|a| a.ip())
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
    SocketAddr::new(ip, 0)
}

/// Sets a test up: its memory, sockets and receiving thread; the ready reply, or why not.
fn start<'a>(plan: &Plan, conn: &ControlConn, ctx: &Ctx<'a>) -> Result<(Running<'a>, Reply), String> {
    let reservation = reserve(plan, ctx.config, ctx.counters)?;
    let bind = test_socket_bind(conn);
    match &plan.test {
        Test::Bw(setup) => {
            let setup = *setup;
            let udp = UdpConfig {
                recv_buffer: Some(setup.recv_buffer.unwrap_or(ctx.config.default_recv_buffer)),
                rxq_ovfl: true,
                // Each datagram's own kernel receive time: inter-arrival times, jitter and one-way delay
                // stay right when a batch of many datagrams is read at once.
                timestamps: true,
                ..UdpConfig::receiver(bind)
            };
            let (sock, report) = open_udp(&udp).map_err(|e| e.to_string())?;
            let granted = report.recv_buffer.map(|b| b.granted).unwrap_or(0);
            let before = HostSnapshot::take();
            let ctl = Arc::new(BwControl::default());
            let max_duration = Duration::from_millis(setup.max_duration_ms.min(3_600_000));
            // Storage for every announced packet is allocated and touched before the client hears
            // "ready", so the receive thread starts with nothing to do but receive.
            let stats = ArrivalStats::try_new(setup.count).map_err(|e| e.to_string())?;
            let receiver = {
                let ctl = ctl.clone();
                thread::spawn(move || {
                    let rx = BwReceive::new(stats, setup.test_id, Instant::now(), max_duration);
                    bw_receive(sock, rx, setup.size, &ctl)
                })
            };
            let ready = Reply::Ready {
                port: report.local.port(),
                buffer: granted,
            };
            let running = Running::Bw {
                ctl,
                receiver,
                setup,
                before,
                reservation,
            };
            Ok((running, ready))
        }
        &Test::Lat { test_id, max_size } => {
            let udp = UdpConfig {
                recv_buffer: Some(LAT_RECV_BUFFER),
                ..UdpConfig::receiver(bind)
            };
            let (sock, report) = open_udp(&udp).map_err(|e| e.to_string())?;
            let done = Arc::new(AtomicBool::new(false));
            let peer = conn.stream().peer_addr().map_err(|e| e.to_string())?.ip();
            let echo = {
                let done = done.clone();
                thread::spawn(move || lat_echo(sock, test_id, max_size, peer, &done))
            };
            let ready = Reply::Ready {
                port: report.local.port(),
                buffer: report.recv_buffer.map(|b| b.granted).unwrap_or(0),
            };
            Ok((
                Running::Lat {
                    done,
                    echo,
                    reservation,
                },
                ready,
            ))
        }
        &Test::Tcp { streams, recv_buffer } => {
            let listener = TcpListener::bind(bind).map_err(|e| format!("bind: {e}"))?;
            let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
            let _ = listener.set_nonblocking(true);
            let before = HostSnapshot::take();
            // The test's own CPU: this session thread's, the acceptor's and the readers'
            // (tcp_receive), not the whole process's, which may be serving other sessions.
            let this_thread = ProcessCpu::read_thread();
            let done = Arc::new(AtomicBool::new(false));
            let acceptor = {
                let done = done.clone();
                thread::spawn(move || tcp_receive(listener, streams, recv_buffer, &done))
            };
            let ready = Reply::Ready {
                port,
                buffer: recv_buffer.unwrap_or(0),
            };
            let running = Running::Tcp {
                done,
                acceptor,
                before,
                this_thread,
                reservation,
            };
            Ok((running, ready))
        }
        Test::Eff(setup) => {
            let service = ctx.config.efficiency.as_ref().ok_or(crate::eff::NOT_SERVED)?;
            let rx = service.start(setup, bind.ip(), ctx.config.default_recv_buffer)?;
            let ready = Reply::EffReady {
                ports: rx.ports(),
                buffer: rx.granted_buffer(),
            };
            Ok((Running::Eff { rx, reservation }, ready))
        }
    }
}

impl Running<'_> {
    /// Ends the test as the client asked and builds its result; Err when a receiving thread failed.
    fn finish(self, sent: Option<u64>, counters: &ResponderCounters) -> Result<Reply, String> {
        match self {
            Running::Bw {
                ctl,
                receiver,
                setup,
                before,
                reservation,
            } => {
                let sent = sent.unwrap_or(0);
                ctl.expected.store(sent, Ordering::Relaxed);
                ctl.finish.store(true, Ordering::Release);
                let (stats, bytes, drops) = receiver
                    .join()
                    .map_err(|_| "bw receiver thread panicked".to_string())?;
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
                Ok(Reply::BwResult(Box::new(BwRemote {
                    arrivals,
                    bytes,
                    socket_drops: drops,
                    host,
                    timeline,
                })))
            }
            Running::Lat {
                done,
                echo,
                reservation,
            } => {
                done.store(true, Ordering::Release);
                let (echoed, foreign) = echo.join().map_err(|_| "lat echo thread panicked".to_string())?;
                counters.foreign_datagrams.fetch_add(foreign, Ordering::Relaxed);
                drop(reservation);
                Ok(Reply::LatResult { echoed, foreign })
            }
            Running::Tcp {
                done,
                acceptor,
                before,
                this_thread,
                reservation,
            } => {
                done.store(true, Ordering::Release);
                let (bytes, first_ns, last_ns, sockets, cpu) = acceptor
                    .join()
                    .map_err(|_| "tcp receiver thread panicked".to_string())?;
                drop(reservation);
                let host = HostSnapshot::take().since(&before);
                let threads = cpu.plus(&ProcessCpu::read_thread().since(&this_thread));
                Ok(Reply::TcpResult(Box::new(TcpRemote {
                    bytes,
                    first_ns,
                    last_ns,
                    sockets,
                    host,
                    threads: Some(threads),
                })))
            }
            Running::Eff { rx, reservation } => {
                let result = rx.finish();
                drop(reservation);
                Ok(match result {
                    Ok(r) => Reply::EffResult(Box::new(r)),
                    Err(e) => Reply::Error {
                        message: format!("efficiency: {e}"),
                    },
                })
            }
        }
    }

    /// Abandons the test: stops its threads and gives its memory back.
    fn abort(self, counters: &ResponderCounters) {
        match self {
            Running::Bw { ctl, receiver, .. } => {
                ctl.finish.store(true, Ordering::Release);
                ctl.abort.store(true, Ordering::Release);
                let _ = receiver.join();
            }
            Running::Lat { done, echo, .. } => {
                done.store(true, Ordering::Release);
                if let Ok((_, foreign)) = echo.join() {
                    counters.foreign_datagrams.fetch_add(foreign, Ordering::Relaxed);
                }
            }
            Running::Tcp { done, acceptor, .. } => {
                done.store(true, Ordering::Release);
                let _ = acceptor.join();
            }
            Running::Eff { rx, .. } => rx.abort(),
        }
    }
}
