//! One control session of the responder as a state machine without I/O.
//!
//! The I/O layer ([`super::serve`]) feeds it what happens on the control connection (a line, an error,
//! the peer's close, the deadline of [`Session::poll_timeout`], the responder stopping) and carries out
//! what [`Session::poll_output`] asks for, in order: send a reply, set a test up ([`Output::Start`],
//! answered with [`Session::started`]), finish it ([`Output::Finish`], answered with
//! [`Session::finished`]), abandon it, count, log, close. The clock is passed in; the session owns no
//! socket, thread or memory, so every rule of the protocol (the order of messages, what is refused and
//! why, the memory a test asks for, every deadline) is tested here in simulated time.
//!
//! The session is a handshake followed by tests: `Handshake` (the client's hello, answered with
//! [`answer_hello`]) -> `Idle` -> per test `Running` -> `Idle`. Admission belongs to the handshake: when
//! the responder has a token, a hello without it is refused there, before any test can be asked for.
//! The hello is due within [`SessionConfig::hello_timeout`] of the accept. A session made with
//! [`Session::gated`] asks the I/O layer for a session slot ([`Output::Admit`]) once its hello passed,
//! so a connection holds a slot only after its handshake, and a client that finds every slot taken is
//! told so.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use crate::eff::{EffSetup, NOT_SERVED};
use crate::proto::{answer_hello, decode, short, BwSetup, ProtoError, Reply, Request, BW_FINISH_SLACK};
use crate::stats::{ArrivalStats, BYTES_PER_PACKET};
use crate::wire::HEADER_LEN;

/// Largest packet count one throughput test may announce.
pub const MAX_TEST_PACKETS: u64 = 64_000_000;
/// Largest UDP payload.
pub const MAX_DATAGRAM: usize = 65_507;
/// Datagrams per `recvmmsg` in a throughput test.
pub const BW_BATCH: usize = 64;
/// Datagrams per `recvmmsg` in a latency test.
pub const LAT_BATCH: usize = 16;
/// Receive buffer of a latency test's socket, bytes.
pub const LAT_RECV_BUFFER: usize = 1 << 20;
/// Bytes per TCP read: iperf3's default length; a larger buffer than the socket usually holds
/// only costs cache.
pub const TCP_READ_SIZE: usize = 128 << 10;
/// How long a client may take to say hello by default (the handshake deadline of the other daemons,
/// e.g. `xfer serve`'s): a connection that stays silent is closed after it.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client turned away as busy may take to say hello.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// What a session needs to know of its responder.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Free text sent in the hello.
    pub software: String,
    /// How long the client may stay silent between tests (and during latency and TCP tests).
    pub idle_timeout: Duration,
    /// How long the client may take to say hello ([`HELLO_TIMEOUT`] by default).
    pub hello_timeout: Duration,
    /// Receive buffer for UDP test sockets unless the client asks for one, bytes.
    pub default_recv_buffer: usize,
    /// Whether efficiency tests are served.
    pub efficiency: bool,
    /// The client's address as text, for errors.
    pub peer: String,
    /// The token a hello must carry; None: anyone is served.
    pub token: Option<String>,
    /// Longest a test may send for ([`super::ResponderConfig::max_test_duration`]).
    pub max_test_duration: Duration,
}

/// A test the client asked for, as checked by the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// UDP throughput: receive and count.
    Bw(BwSetup),
    /// Latency: echo requests.
    Lat {
        /// Test id of the requests.
        test_id: u32,
        /// Largest request, bytes.
        max_size: usize,
    },
    /// TCP throughput.
    Tcp {
        /// Connections.
        streams: u32,
        /// Receive buffer per connection, bytes.
        recv_buffer: Option<usize>,
    },
    /// Transport efficiency ([`crate::eff`]).
    Eff(EffSetup),
}

impl Test {
    /// The prefix of this test's refusals ("bw", "lat", "tcp", "efficiency").
    pub fn tag(&self) -> &'static str {
        match self {
            Test::Bw(_) => "bw",
            Test::Lat { .. } => "lat",
            Test::Tcp { .. } => "tcp",
            Test::Eff(_) => "efficiency",
        }
    }
}

/// A test to set up: what it is, and the memory it reserves from the responder's budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The test.
    pub test: Test,
    /// Bytes to reserve: statistics, receive buffers and the kernel socket buffers asked for.
    pub memory: u64,
    /// Streams of the test (1 for bw and lat): the responder allows more memory for more streams
    /// ([`super::ResponderConfig::test_memory_limit`]).
    pub streams: u32,
    /// The test described for a refusal ("bw test of 1000 packets ...").
    pub what: String,
}

/// Which counter to add one to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// A test ended with its answer sent (refusals included).
    Tests,
    /// A test was abandoned.
    Aborted,
    /// An invalid or unexpected request.
    BadRequests,
    /// A hello without the responder's token.
    Unauthorized,
}

/// Why a session ended early.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The control connection failed.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The client broke the protocol or went away.
    #[error("{0}")]
    Other(String),
    /// The responder is stopping.
    #[error("stopped")]
    Stopped,
}

/// What the I/O layer is to do, in the order given.
#[derive(Debug)]
pub enum Output {
    /// Send a reply. When `critical`, a failure to send ends the session
    /// ([`Session::handle_send_failed`]); otherwise it is ignored.
    Reply {
        /// The reply.
        reply: Reply,
        /// Whether a failure matters.
        critical: bool,
    },
    /// Set the test up (reserve its memory, open its sockets, start receiving) and call
    /// [`Session::started`].
    Start(Plan),
    /// The client is done: finish the running test and call [`Session::finished`] with its result.
    /// `sent`: the packets the client sent (bw) or per-flow counts (efficiency).
    Finish {
        /// Bw: packets sent.
        sent: Option<u64>,
    },
    /// Abandon the running test (no answer).
    Abort,
    /// Answer the efficiency probe: call [`Session::probed`] with what this host offers.
    Probe,
    /// The hello passed (version and token): the handshake is over. Take a session slot and call
    /// [`Session::admitted`] (sessions made with [`Session::gated`] only).
    Admit,
    /// Add one to a counter.
    Count(Counter),
    /// A line for the log.
    Log(String),
    /// The session is over: close the connection.
    Close(Result<(), SessionError>),
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Waiting for the client's hello.
    Handshake,
    /// The hello passed; waiting for the I/O layer's [`Session::admitted`], then send `hello`.
    Admitting {
        /// The hello reply to send once admitted.
        hello: Reply,
    },
    /// Waiting for a test.
    Idle,
    /// A test being set up by the I/O layer.
    Starting(Test),
    /// A test running: waiting for the client's finish.
    Running(Test),
    /// A test being finished by the I/O layer.
    Finishing,
    /// A client turned away: waiting for its hello to answer that the responder is busy.
    Busy {
        /// The most sessions served at once.
        max_sessions: usize,
    },
    /// Over.
    Closed,
}

/// One control session.
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    state: State,
    /// Deadline of the current wait and what is being waited for (for the error).
    deadline: Option<(Instant, Duration, &'static str)>,
    out: VecDeque<Output>,
    /// A test was asked for and its answer (result or refusal) is not yet sent.
    test_open: bool,
    /// A passed hello waits for [`Output::Admit`]'s answer ([`Session::gated`]).
    gated: bool,
}

impl Session {
    /// A session that has just been accepted at `now`.
    pub fn new(config: SessionConfig, now: Instant) -> Self {
        let mut s = Session {
            config,
            state: State::Handshake,
            deadline: None,
            out: VecDeque::new(),
            test_open: false,
            gated: false,
        };
        s.wait(now, s.config.hello_timeout, "waiting for hello");
        s
    }

    /// A session accepted at `now` that holds no session slot yet: once its hello passed, it asks for
    /// one ([`Output::Admit`]) before answering it.
    pub fn gated(config: SessionConfig, now: Instant) -> Self {
        let mut s = Session::new(config, now);
        s.gated = true;
        s
    }

    /// True while the handshake is not over: the hello has not passed yet (the session counts against
    /// the responder's limit of connections that have not authenticated).
    pub fn in_handshake(&self) -> bool {
        matches!(self.state, State::Handshake | State::Admitting { .. })
    }

    /// A client that arrived while `max_sessions` sessions were running: its hello is answered with an
    /// error saying the responder is busy, and the connection closed.
    pub fn busy(config: SessionConfig, max_sessions: usize, now: Instant) -> Self {
        let mut s = Session::new(config, now);
        s.state = State::Busy { max_sessions };
        s.wait(now, BUSY_TIMEOUT, "waiting for hello");
        s
    }

    /// True once the session has closed.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The next thing for the I/O layer to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        let o = self.out.pop_front();
        if matches!(o, Some(Output::Count(Counter::Tests))) {
            // The test's answer went out.
            self.test_open = false;
        }
        o
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due; None while the I/O layer works on a test
    /// or after the session closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.map(|d| d.0)
    }

    /// What the session is waiting for, for errors of the read.
    pub fn waiting_for(&self) -> &'static str {
        self.deadline.map_or("serving", |d| d.2)
    }

    fn wait(&mut self, now: Instant, timeout: Duration, what: &'static str) {
        self.deadline = Some((now + timeout, timeout, what));
    }

    fn emit(&mut self, o: Output) {
        self.out.push_back(o);
    }

    fn reply(&mut self, reply: Reply) {
        self.emit(Output::Reply {
            reply,
            critical: true,
        });
    }

    fn close(&mut self, r: Result<(), SessionError>) {
        self.state = State::Closed;
        self.deadline = None;
        self.emit(Output::Close(r));
    }

    /// Abandons a running test (counted as aborted) and closes with `e`.
    fn abort_test(&mut self, e: SessionError) {
        self.emit(Output::Abort);
        self.emit(Output::Count(Counter::Aborted));
        self.test_open = false;
        self.close(Err(e));
    }

    /// A line from the client.
    pub fn handle_line(&mut self, now: Instant, line: &str) {
        match decode::<Request>(line, "request") {
            Ok(req) => self.handle_request(now, req),
            Err(e) => self.handle_error(now, e),
        }
    }

    /// A request from the client.
    pub fn handle_request(&mut self, now: Instant, req: Request) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Handshake => match req {
                Request::Hello {
                    version,
                    software,
                    token,
                } => self.on_hello(now, version, &software, token.as_deref()),
                other => {
                    self.emit(Output::Count(Counter::BadRequests));
                    self.reply(Reply::Error {
                        message: format!("expected hello first, got {}", short(&other)),
                    });
                    self.close(Err(SessionError::Other("refused: version mismatch".into())));
                }
            },
            State::Idle => {
                self.state = State::Idle;
                self.on_idle_request(now, req);
            }
            State::Running(test) => self.on_finish_request(test, req),
            State::Busy { max_sessions } => {
                self.emit(Output::Reply {
                    reply: busy_reply(max_sessions),
                    critical: false,
                });
                self.close(Ok(()));
            }
            s @ (State::Admitting { .. } | State::Starting(_) | State::Finishing | State::Closed) => {
                self.state = s
            }
        }
    }

    /// The client's hello: the place of admission. The protocol version is checked, and the token
    /// when the responder has one; a refusal is an error reply and the close, before any test.
    fn on_hello(&mut self, now: Instant, version: u32, _software: &str, token: Option<&str>) {
        if let Some(want) = &self.config.token {
            if !token.is_some_and(|t| constant_time_eq(t.as_bytes(), want.as_bytes())) {
                let why = if token.is_some() {
                    "wrong token"
                } else {
                    "no token"
                };
                self.emit(Output::Count(Counter::Unauthorized));
                self.emit(Output::Log(format!("refused: {why}")));
                self.emit(Output::Reply {
                    reply: Reply::Error {
                        message: format!(
                            "unauthorized ({why}): this responder needs its token; give the client \
                             --token-file PATH or set {}",
                            vlbiflow_guard::secret::TOKEN_ENV
                        ),
                    },
                    critical: false,
                });
                self.close(Err(SessionError::Other(format!("refused: {why}"))));
                return;
            }
        }
        let hello = answer_hello(version, &self.config.software);
        let accepted = matches!(hello, Reply::Hello { .. });
        if accepted && self.gated {
            self.state = State::Admitting { hello };
            self.deadline = None;
            self.emit(Output::Admit);
            return;
        }
        self.reply(hello);
        if accepted {
            self.state = State::Idle;
            self.wait(now, self.config.idle_timeout, "waiting for a test");
        } else {
            self.close(Err(SessionError::Other("refused: version mismatch".into())));
        }
    }

    /// The I/O layer's answer to [`Output::Admit`]: Ok when the session got its slot (the hello is
    /// answered and tests may follow), Err(`max_sessions`) when all were taken (the client is told the
    /// responder is busy and the connection closed).
    pub fn admitted(&mut self, now: Instant, slot: Result<(), usize>) {
        let State::Admitting { hello } = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        match slot {
            Ok(()) => {
                self.reply(hello);
                self.state = State::Idle;
                self.wait(now, self.config.idle_timeout, "waiting for a test");
            }
            Err(max_sessions) => {
                self.emit(Output::Reply {
                    reply: busy_reply(max_sessions),
                    critical: false,
                });
                self.close(Ok(()));
            }
        }
    }

    fn on_idle_request(&mut self, now: Instant, req: Request) {
        let test = match req {
            Request::BwStart(setup) => Test::Bw(setup),
            Request::LatStart { test_id, max_size } => Test::Lat { test_id, max_size },
            Request::TcpStart { streams, recv_buffer } => Test::Tcp { streams, recv_buffer },
            Request::EffStart(setup) => Test::Eff(setup),
            Request::EffProbe => {
                self.emit(Output::Probe);
                return;
            }
            other => {
                self.emit(Output::Count(Counter::BadRequests));
                self.reply(Reply::Error {
                    message: format!("unexpected request outside a test: {}", short(&other)),
                });
                self.wait(now, self.config.idle_timeout, "waiting for a test");
                return;
            }
        };
        self.test_open = true;
        match self.plan(test) {
            Ok(plan) => {
                self.state = State::Starting(plan.test.clone());
                self.deadline = None;
                self.emit(Output::Start(plan));
            }
            Err(message) => self.refuse(now, message),
        }
    }

    /// Answers a test that cannot run with an error; the session goes on (the refusal counts as a
    /// test).
    fn refuse(&mut self, now: Instant, message: String) {
        self.reply(Reply::Error { message });
        self.end_test(now);
    }

    fn end_test(&mut self, now: Instant) {
        self.emit(Output::Count(Counter::Tests));
        self.state = State::Idle;
        self.wait(now, self.config.idle_timeout, "waiting for a test");
    }

    /// Checks a test's numbers and works out its memory.
    fn plan(&self, test: Test) -> Result<Plan, String> {
        let (memory, streams, what) = match &test {
            Test::Bw(setup) => {
                if setup.count == 0 || setup.count > MAX_TEST_PACKETS {
                    return Err(format!(
                        "bw: count {} outside 1..={MAX_TEST_PACKETS}",
                        setup.count
                    ));
                }
                if setup.size < HEADER_LEN || setup.size > MAX_DATAGRAM {
                    return Err(format!(
                        "bw: size {} outside {HEADER_LEN}..={MAX_DATAGRAM}",
                        setup.size
                    ));
                }
                let cap = self.config.max_test_duration + BW_FINISH_SLACK;
                if setup.max_duration_ms > cap.as_millis() as u64 {
                    return Err(format!(
                        "bw: a test of up to {:.0} s, more than the {:.0} s this responder allows \
                         (sending time plus {} s)",
                        setup.max_duration_ms as f64 / 1e3,
                        cap.as_secs_f64(),
                        BW_FINISH_SLACK.as_secs()
                    ));
                }
                let recv_buffer = setup.recv_buffer.unwrap_or(self.config.default_recv_buffer);
                // Statistics, the receive thread's buffers and the kernel socket buffer (which the
                // kernel sizes at twice the request).
                let memory = ArrivalStats::memory_for(setup.count)
                    .saturating_add((BW_BATCH * (setup.size + 1)) as u64)
                    .saturating_add((recv_buffer as u64).saturating_mul(2));
                let what = format!(
                    "bw test of {} packets ({BYTES_PER_PACKET} B each for statistics) with a {} receive buffer",
                    setup.count,
                    human_bytes(recv_buffer as u64)
                );
                (memory, 1, what)
            }
            &Test::Lat { max_size, .. } => {
                if !(HEADER_LEN..=MAX_DATAGRAM).contains(&max_size) {
                    return Err(format!(
                        "lat: size {max_size} outside {HEADER_LEN}..={MAX_DATAGRAM}"
                    ));
                }
                let memory = (LAT_BATCH * (max_size + 1) + 2 * LAT_RECV_BUFFER) as u64;
                (memory, 1, "lat test".to_string())
            }
            &Test::Tcp { streams, recv_buffer } => {
                if !(1..=64).contains(&streams) {
                    return Err(format!("tcp: {streams} streams outside 1..=64"));
                }
                // Per stream: the read buffer and the kernel socket buffer asked for (twice the request).
                let per_stream = (TCP_READ_SIZE as u64)
                    .saturating_add((recv_buffer.unwrap_or(0) as u64).saturating_mul(2));
                let what = format!(
                    "tcp test of {streams} streams with {} receive buffers",
                    human_bytes(recv_buffer.unwrap_or(0) as u64)
                );
                (per_stream.saturating_mul(streams.into()), streams, what)
            }
            Test::Eff(setup) => {
                if !self.config.efficiency {
                    return Err(format!("efficiency: {NOT_SERVED}"));
                }
                setup.validate().map_err(|e| format!("efficiency: {e}"))?;
                if setup.duration_ms > self.config.max_test_duration.as_millis() as u64 {
                    return Err(format!(
                        "efficiency: a test of {:.0} s, more than the {:.0} s this responder allows",
                        setup.duration_ms as f64 / 1e3,
                        self.config.max_test_duration.as_secs_f64()
                    ));
                }
                let recv_buffer = setup.recv_buffer.unwrap_or(self.config.default_recv_buffer);
                // Kernel socket buffers (twice the request) per UDP flow, plus the receive path's own
                // buffers.
                let memory = if setup.transport.is_udp() {
                    (setup.streams as u64) * 2 * recv_buffer as u64 + (64 << 20)
                } else {
                    (setup.streams as u64) * (8 << 20) + (1 << 20)
                };
                let what = format!(
                    "efficiency test over {} with {} flow(s)",
                    setup.transport, setup.streams
                );
                (memory, setup.streams, what)
            }
        };
        Ok(Plan {
            test,
            memory,
            streams,
            what,
        })
    }

    /// The I/O layer's answer to [`Output::Start`]: the ready reply (`Ready` or `EffReady`), or why the
    /// test cannot run (reservation refused, socket failed), without the test's prefix.
    pub fn started(&mut self, now: Instant, ready: Result<Reply, String>) {
        let State::Starting(test) = std::mem::replace(&mut self.state, State::Closed) else {
            return;
        };
        let reply = match ready {
            Ok(r) => r,
            Err(why) => {
                self.refuse(now, format!("{}: {why}", test.tag()));
                return;
            }
        };
        let log = match (&test, &reply) {
            (Test::Bw(s), Reply::Ready { port, .. }) => {
                format!("bw test: {} frames of {} bytes to port {port}", s.count, s.size)
            }
            (Test::Lat { max_size, .. }, Reply::Ready { port, .. }) => {
                format!("lat test: up to {max_size} bytes to port {port}")
            }
            (Test::Tcp { streams, .. }, Reply::Ready { port, .. }) => {
                format!("tcp test: {streams} streams to port {port}")
            }
            (Test::Eff(s), _) => format!(
                "efficiency test: {} over {} flow(s), {} ms",
                s.transport, s.streams, s.duration_ms
            ),
            _ => String::new(),
        };
        self.reply(reply);
        if !log.is_empty() {
            self.emit(Output::Log(log));
        }
        let (timeout, what) = match &test {
            Test::Bw(s) => (
                Duration::from_millis(s.max_duration_ms.min(3_600_000)) + Duration::from_secs(10),
                "waiting for the end of the bw test",
            ),
            Test::Lat { .. } => (self.config.idle_timeout, "waiting for the end of the lat test"),
            Test::Tcp { .. } => (self.config.idle_timeout, "waiting for the end of the tcp test"),
            Test::Eff(s) => (
                Duration::from_millis(s.duration_ms) + Duration::from_secs(20),
                "waiting for the end of the efficiency test",
            ),
        };
        self.state = State::Running(test);
        self.wait(now, timeout, what);
    }

    fn on_finish_request(&mut self, test: Test, req: Request) {
        let sent = match (&test, req) {
            (Test::Bw(_), Request::BwFinish { sent }) => Some(sent),
            (Test::Lat { .. }, Request::LatFinish)
            | (Test::Tcp { .. }, Request::TcpFinish)
            | (Test::Eff(_), Request::EffFinish { .. }) => None,
            (_, other) => {
                let expected = match test {
                    Test::Bw(_) => "bw: expected bw_finish",
                    Test::Lat { .. } => "lat: expected lat_finish",
                    Test::Tcp { .. } => "tcp: expected tcp_finish",
                    Test::Eff(_) => "efficiency: expected eff_finish",
                };
                let e = format!("{expected}, got {}", short(&other));
                self.abort_test(SessionError::Other(e));
                return;
            }
        };
        self.state = State::Finishing;
        self.deadline = None;
        self.emit(Output::Finish { sent });
    }

    /// The I/O layer's answer to [`Output::Finish`]: the result reply (or an error reply).
    pub fn finished(&mut self, now: Instant, result: Reply) {
        if self.state != State::Finishing {
            return;
        }
        self.reply(result);
        self.end_test(now);
    }

    /// The I/O layer could not finish the test (its receiving thread failed): the session ends.
    pub fn finish_failed(&mut self, why: String) {
        if self.state != State::Finishing {
            return;
        }
        self.emit(Output::Count(Counter::Aborted));
        self.test_open = false;
        self.close(Err(SessionError::Other(why)));
    }

    /// The I/O layer's answer to [`Output::Probe`].
    pub fn probed(&mut self, transports: Vec<crate::eff::Availability>) {
        self.reply(Reply::EffTransports { transports });
    }

    /// The control connection failed: a line too long, or a read error.
    pub fn handle_error(&mut self, _now: Instant, e: ProtoError) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Handshake | State::Idle => {
                self.emit(Output::Count(Counter::BadRequests));
                self.emit(Output::Reply {
                    reply: Reply::Error {
                        message: e.to_string(),
                    },
                    critical: false,
                });
                self.close(Err(e.into()));
            }
            State::Running(_) => self.abort_test(e.into()),
            State::Busy { .. } => self.close(Ok(())),
            s @ (State::Admitting { .. } | State::Starting(_) | State::Finishing | State::Closed) => {
                self.state = s
            }
        }
    }

    /// The client closed the connection.
    pub fn handle_closed(&mut self, _now: Instant) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Running(_) => self.abort_test(SessionError::Other(
                "client closed the connection mid-test".into(),
            )),
            State::Handshake | State::Idle | State::Busy { .. } => self.close(Ok(())),
            s @ (State::Admitting { .. } | State::Starting(_) | State::Finishing | State::Closed) => {
                self.state = s
            }
        }
    }

    /// The deadline of [`poll_timeout`](Self::poll_timeout) passed without a request.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some((at, timeout, what)) = self.deadline else {
            return;
        };
        if now < at {
            return;
        }
        let e = ProtoError::Io {
            peer: self.config.peer.clone(),
            what: format!("no answer within {:.1} s while {what}", timeout.as_secs_f64()),
            source: io::Error::from(io::ErrorKind::TimedOut),
        };
        self.handle_error(now, e);
    }

    /// The responder is stopping.
    pub fn handle_stop(&mut self, _now: Instant) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Running(_) | State::Starting(_) | State::Finishing => {
                self.abort_test(SessionError::Stopped)
            }
            State::Closed => {}
            _ => self.close(Err(SessionError::Stopped)),
        }
    }

    /// A critical reply could not be sent: the session ends with `e` (a test it belonged to is
    /// abandoned).
    pub fn handle_send_failed(&mut self, e: ProtoError) {
        self.out.clear();
        if self.test_open {
            if matches!(self.state, State::Running(_)) {
                self.emit(Output::Abort);
            }
            self.emit(Output::Count(Counter::Aborted));
            self.test_open = false;
        }
        self.close(Err(e.into()));
    }
}

/// The answer to a hello when every session slot is taken.
fn busy_reply(max_sessions: usize) -> Reply {
    Reply::Error {
        message: format!(
            "busy: this responder serves at most {max_sessions} sessions at a time and all are in use; \
             try again later"
        ),
    }
}

/// Compares two byte strings in time that depends on their lengths only, not on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Bytes in binary units, e.g. "1.5 GiB".
pub fn human_bytes(b: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{encode, BwRemote, PROTOCOL_VERSION};

    fn config() -> SessionConfig {
        SessionConfig {
            software: "test".into(),
            idle_timeout: Duration::from_secs(60),
            hello_timeout: HELLO_TIMEOUT,
            default_recv_buffer: 8 << 20,
            efficiency: false,
            peer: "192.0.2.1:5000".into(),
            token: None,
            max_test_duration: Duration::from_secs(60),
        }
    }

    fn line(r: &Request) -> String {
        String::from_utf8(encode(r)).unwrap().trim_end().to_string()
    }

    fn drain(s: &mut Session) -> Vec<Output> {
        std::iter::from_fn(|| s.poll_output()).collect()
    }

    fn hello() -> Request {
        Request::Hello {
            version: PROTOCOL_VERSION,
            software: "client".into(),
            token: None,
        }
    }

    fn bw_setup(count: u64) -> BwSetup {
        BwSetup {
            test_id: 7,
            count,
            size: 1472,
            recv_buffer: Some(1 << 20),
            max_duration_ms: 5000,
            timeline: false,
        }
    }

    /// A session past its handshake at `t0`.
    fn open(t0: Instant) -> Session {
        let mut s = Session::new(config(), t0);
        s.handle_line(t0, &line(&hello()));
        let out = drain(&mut s);
        assert!(
            matches!(
                &out[..],
                [Output::Reply {
                    reply: Reply::Hello { .. },
                    critical: true
                }]
            ),
            "{out:?}"
        );
        s
    }

    fn counts(out: &[Output]) -> Vec<Counter> {
        out.iter()
            .filter_map(|o| match o {
                Output::Count(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_bw_test_runs_through_its_states_with_its_deadlines() {
        let t0 = Instant::now();
        let mut s = Session::new(config(), t0);
        assert_eq!(s.poll_timeout(), Some(t0 + HELLO_TIMEOUT));
        s.handle_line(t0, &line(&hello()));
        assert!(matches!(
            drain(&mut s)[..],
            [Output::Reply {
                reply: Reply::Hello { .. },
                ..
            }]
        ));
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(60)));

        let t1 = t0 + Duration::from_secs(1);
        s.handle_line(t1, &line(&Request::BwStart(bw_setup(1000))));
        let out = drain(&mut s);
        let [Output::Start(plan)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(plan.test, Test::Bw(bw_setup(1000)));
        // 56 B per packet of statistics, 64 buffers of 1473 bytes, twice the 1 MiB buffer.
        assert_eq!(plan.memory, 56 * 1000 + 64 * 1473 + (2 << 20));
        assert!(
            plan.what.contains("1000 packets") && plan.what.contains("1.0 MiB"),
            "{}",
            plan.what
        );
        assert_eq!(s.poll_timeout(), None, "no deadline while the I/O layer sets up");

        s.started(
            t1,
            Ok(Reply::Ready {
                port: 5001,
                buffer: 1 << 21,
            }),
        );
        let out = drain(&mut s);
        assert!(matches!(
            &out[0],
            Output::Reply {
                reply: Reply::Ready { port: 5001, .. },
                critical: true
            }
        ));
        assert!(matches!(&out[1], Output::Log(m) if m == "bw test: 1000 frames of 1472 bytes to port 5001"));
        // The announced 5 s plus 10 s of grace.
        assert_eq!(s.poll_timeout(), Some(t1 + Duration::from_secs(15)));

        let t2 = t1 + Duration::from_secs(3);
        s.handle_line(t2, &line(&Request::BwFinish { sent: 990 }));
        assert!(matches!(drain(&mut s)[..], [Output::Finish { sent: Some(990) }]));
        s.finished(t2, Reply::BwResult(Box::default()));
        let out = drain(&mut s);
        assert!(matches!(
            &out[0],
            Output::Reply {
                reply: Reply::BwResult(_),
                ..
            }
        ));
        assert_eq!(counts(&out), [Counter::Tests]);
        assert_eq!(s.poll_timeout(), Some(t2 + Duration::from_secs(60)));
        assert!(!s.is_closed());
        s.handle_closed(t2);
        assert!(matches!(drain(&mut s)[..], [Output::Close(Ok(()))]));
    }

    #[test]
    fn impossible_tests_are_refused_and_the_session_goes_on() {
        let t0 = Instant::now();
        let mut s = open(t0);
        let cases = [
            (Request::BwStart(bw_setup(0)), "bw: count 0 outside 1..=64000000"),
            (
                Request::BwStart(BwSetup {
                    size: 20,
                    ..bw_setup(10)
                }),
                "bw: size 20 outside 32..=65507",
            ),
            (
                Request::LatStart {
                    test_id: 1,
                    max_size: 70_000,
                },
                "lat: size 70000 outside",
            ),
            (
                Request::TcpStart {
                    streams: 65,
                    recv_buffer: None,
                },
                "tcp: 65 streams outside 1..=64",
            ),
            (
                Request::EffStart(EffSetup {
                    transport: vlbiflow_rx::Transport::Udp,
                    streams: 1,
                    size: 1472,
                    duration_ms: 100,
                    recv_buffer: None,
                }),
                "efficiency: this responder does not run efficiency tests",
            ),
        ];
        for (req, want) in cases {
            s.handle_line(t0, &line(&req));
            let out = drain(&mut s);
            let Output::Reply {
                reply: Reply::Error { message },
                ..
            } = &out[0]
            else {
                panic!("{out:?}")
            };
            assert!(message.starts_with(want), "{message}");
            assert_eq!(counts(&out), [Counter::Tests], "a refusal counts as a test");
        }
        // Refused by the I/O layer (the memory budget): the test's prefix is added.
        s.handle_line(
            t0,
            &line(&Request::LatStart {
                test_id: 1,
                max_size: 64,
            }),
        );
        assert!(matches!(drain(&mut s)[..], [Output::Start(_)]));
        s.started(t0, Err("lat test needs more".into()));
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], Output::Reply { reply: Reply::Error { message }, .. } if message == "lat: lat test needs more")
        );
        // Something that is no test start.
        s.handle_line(t0, &line(&Request::LatFinish));
        let out = drain(&mut s);
        assert_eq!(counts(&out), [Counter::BadRequests]);
        assert!(
            matches!(&out[1], Output::Reply { reply: Reply::Error { message }, .. } if message.contains("unexpected request outside a test"))
        );
        assert!(!s.is_closed());
    }

    #[test]
    fn deadlines_pass_in_simulated_time() {
        let t0 = Instant::now();
        // A silent client: at 2 s, not before.
        let mut s = Session::new(config(), t0);
        s.handle_timeout(t0 + HELLO_TIMEOUT - Duration::from_millis(1));
        assert!(drain(&mut s).is_empty());
        s.handle_timeout(t0 + HELLO_TIMEOUT);
        let out = drain(&mut s);
        assert_eq!(counts(&out), [Counter::BadRequests]);
        let Output::Close(Err(e)) = &out[2] else {
            panic!("{out:?}")
        };
        assert!(
            e.to_string()
                .contains("no answer within 2.0 s while waiting for hello"),
            "{e}"
        );
        assert!(s.is_closed());

        // An idle client after its hello.
        let mut s = open(t0);
        s.handle_timeout(t0 + Duration::from_secs(60));
        let out = drain(&mut s);
        let Output::Close(Err(e)) = out.last().unwrap() else {
            panic!("{out:?}")
        };
        assert!(e.to_string().contains("while waiting for a test"), "{e}");

        // A latency test the client never ends: abandoned at the idle timeout.
        let mut s = open(t0);
        s.handle_line(
            t0,
            &line(&Request::LatStart {
                test_id: 1,
                max_size: 64,
            }),
        );
        drain(&mut s);
        s.started(t0, Ok(Reply::Ready { port: 9, buffer: 0 }));
        drain(&mut s);
        s.handle_timeout(t0 + Duration::from_secs(60));
        let out = drain(&mut s);
        assert!(matches!(out[0], Output::Abort));
        assert_eq!(counts(&out), [Counter::Aborted]);
        assert!(matches!(
            out.last(),
            Some(Output::Close(Err(SessionError::Proto(_))))
        ));
    }

    #[test]
    fn a_client_that_leaves_or_misbehaves_mid_test_ends_the_session() {
        let t0 = Instant::now();
        let start = |s: &mut Session| {
            s.handle_line(t0, &line(&Request::BwStart(bw_setup(10))));
            drain(s);
            s.started(t0, Ok(Reply::Ready { port: 9, buffer: 0 }));
            drain(s);
        };
        let mut s = open(t0);
        start(&mut s);
        s.handle_closed(t0);
        let out = drain(&mut s);
        assert!(matches!(out[0], Output::Abort));
        let Output::Close(Err(e)) = &out[2] else {
            panic!("{out:?}")
        };
        assert_eq!(e.to_string(), "client closed the connection mid-test");

        let mut s = open(t0);
        start(&mut s);
        s.handle_line(t0, &line(&Request::LatFinish));
        let out = drain(&mut s);
        let Output::Close(Err(e)) = &out[2] else {
            panic!("{out:?}")
        };
        assert!(
            e.to_string()
                .starts_with("bw: expected bw_finish, got {\"type\":\"lat_finish\""),
            "{e}"
        );

        let mut s = open(t0);
        start(&mut s);
        s.handle_line(t0, "GET / HTTP/1.1");
        let out = drain(&mut s);
        assert_eq!(counts(&out), [Counter::Aborted]);

        let mut s = open(t0);
        start(&mut s);
        s.handle_stop(t0);
        let out = drain(&mut s);
        assert!(matches!(out[0], Output::Abort));
        assert!(matches!(out[2], Output::Close(Err(SessionError::Stopped))));
    }

    #[test]
    fn handshake_refusals() {
        let t0 = Instant::now();
        let mut s = Session::new(config(), t0);
        s.handle_line(
            t0,
            &line(&Request::Hello {
                version: PROTOCOL_VERSION + 1,
                software: "new".into(),
                token: None,
            }),
        );
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], Output::Reply { reply: Reply::Error { message }, .. } if message.contains("version mismatch"))
        );
        assert!(matches!(&out[1], Output::Close(Err(_))));

        let mut s = Session::new(config(), t0);
        s.handle_line(t0, &line(&Request::LatFinish));
        let out = drain(&mut s);
        assert_eq!(counts(&out), [Counter::BadRequests]);
        assert!(
            matches!(&out[1], Output::Reply { reply: Reply::Error { message }, .. } if message.starts_with("expected hello first"))
        );

        let mut s = Session::new(config(), t0);
        s.handle_line(t0, "not json");
        let out = drain(&mut s);
        assert_eq!(counts(&out), [Counter::BadRequests]);
        assert!(
            matches!(&out[1], Output::Reply { reply: Reply::Error { message }, critical: false } if message.contains("invalid request message"))
        );

        // A client turned away: its hello gets "busy", anything else nothing.
        let mut s = Session::busy(config(), 3, t0);
        assert_eq!(s.poll_timeout(), Some(t0 + BUSY_TIMEOUT));
        s.handle_line(t0, &line(&hello()));
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], Output::Reply { reply: Reply::Error { message }, .. } if message.contains("at most 3 sessions"))
        );
        assert!(matches!(&out[1], Output::Close(Ok(()))));
        let mut s = Session::busy(config(), 3, t0);
        s.handle_timeout(t0 + BUSY_TIMEOUT);
        assert!(matches!(drain(&mut s)[..], [Output::Close(Ok(()))]));
    }

    #[test]
    fn an_answer_that_cannot_be_sent_aborts_its_test() {
        let t0 = Instant::now();
        let mut s = open(t0);
        s.handle_line(
            t0,
            &line(&Request::TcpStart {
                streams: 1,
                recv_buffer: None,
            }),
        );
        drain(&mut s);
        s.started(t0, Ok(Reply::Ready { port: 9, buffer: 0 }));
        drain(&mut s);
        s.handle_line(t0, &line(&Request::TcpFinish));
        drain(&mut s);
        s.finished(t0, Reply::TcpResult(Box::default()));
        // The I/O layer takes the result, fails to send it, and says so before the count.
        assert!(matches!(s.poll_output(), Some(Output::Reply { .. })));
        s.handle_send_failed(ProtoError::Closed {
            peer: "p".into(),
            what: "sending".into(),
        });
        let out = drain(&mut s);
        assert_eq!(counts(&out), [Counter::Aborted]);
        assert!(matches!(out.last(), Some(Output::Close(Err(_)))));

        // A failed "ready" abandons the running test.
        let mut s = open(t0);
        s.handle_line(t0, &line(&Request::BwStart(bw_setup(10))));
        drain(&mut s);
        s.started(t0, Ok(Reply::Ready { port: 9, buffer: 0 }));
        assert!(matches!(s.poll_output(), Some(Output::Reply { .. })));
        s.handle_send_failed(ProtoError::Closed {
            peer: "p".into(),
            what: "sending".into(),
        });
        let out = drain(&mut s);
        assert!(matches!(out[0], Output::Abort));
        assert_eq!(counts(&out), [Counter::Aborted]);
        let _ = BwRemote::default();
    }

    fn hello_with(token: Option<&str>) -> Request {
        Request::Hello {
            version: PROTOCOL_VERSION,
            software: "client".into(),
            token: token.map(str::to_owned),
        }
    }

    #[test]
    fn a_responder_with_a_token_refuses_a_hello_without_it_before_any_test() {
        let t0 = Instant::now();
        let with_token = || SessionConfig {
            token: Some("s3cret-token-value".into()),
            ..config()
        };
        for (token, why) in [(None, "no token"), (Some("guess"), "wrong token")] {
            let mut s = Session::new(with_token(), t0);
            s.handle_line(t0, &line(&hello_with(token)));
            // A test asked for right after the hello is never looked at.
            s.handle_line(t0, &line(&Request::BwStart(bw_setup(8_000_000))));
            let out = drain(&mut s);
            assert_eq!(counts(&out), [Counter::Unauthorized], "{out:?}");
            assert!(
                out.iter().any(|o| matches!(o, Output::Reply {
                    reply: Reply::Error { message },
                    critical: false,
                } if message.starts_with(&format!("unauthorized ({why})")) && message.contains("--token-file"))),
                "{out:?}"
            );
            assert!(!out.iter().any(|o| matches!(o, Output::Start(_))), "{out:?}");
            assert!(matches!(out.last(), Some(Output::Close(Err(_)))), "{out:?}");
            assert!(s.is_closed());
        }
        // The right token opens the session.
        let mut s = Session::new(with_token(), t0);
        s.handle_line(t0, &line(&hello_with(Some("s3cret-token-value"))));
        let out = drain(&mut s);
        assert!(
            matches!(
                &out[..],
                [Output::Reply {
                    reply: Reply::Hello { .. },
                    ..
                }]
            ),
            "{out:?}"
        );
        // A responder without a token takes a hello with one.
        let mut s = Session::new(config(), t0);
        s.handle_line(t0, &line(&hello_with(Some("anything"))));
        assert!(matches!(
            &drain(&mut s)[..],
            [Output::Reply {
                reply: Reply::Hello { .. },
                ..
            }]
        ));
    }

    #[test]
    fn tests_longer_than_the_cap_are_refused_and_the_plan_counts_streams() {
        let t0 = Instant::now();
        let mut s = open(t0);
        // 60 s cap: a bw test may announce 60 s of sending plus the 30 s finish slack.
        s.handle_line(
            t0,
            &line(&Request::BwStart(BwSetup {
                max_duration_ms: 90_001,
                ..bw_setup(10)
            })),
        );
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], Output::Reply { reply: Reply::Error { message }, .. }
                if message.starts_with("bw: a test of up to 90 s, more than the 90 s")),
            "{out:?}"
        );
        s.handle_line(
            t0,
            &line(&Request::BwStart(BwSetup {
                max_duration_ms: 90_000,
                ..bw_setup(10)
            })),
        );
        let out = drain(&mut s);
        let [Output::Start(plan)] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(plan.streams, 1);
        s.started(t0, Err("no".into()));
        drain(&mut s);
        // Efficiency tests: the duration itself.
        let mut s = Session::new(
            SessionConfig {
                efficiency: true,
                ..config()
            },
            t0,
        );
        s.handle_line(t0, &line(&hello()));
        drain(&mut s);
        let eff = |duration_ms| {
            Request::EffStart(EffSetup {
                transport: vlbiflow_rx::Transport::Udp,
                streams: 50,
                size: 1472,
                duration_ms,
                recv_buffer: None,
            })
        };
        s.handle_line(t0, &line(&eff(61_000)));
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], Output::Reply { reply: Reply::Error { message }, .. }
                if message.starts_with("efficiency: a test of 61 s, more than the 60 s")),
            "{out:?}"
        );
        s.handle_line(t0, &line(&eff(60_000)));
        let out = drain(&mut s);
        let [Output::Start(plan)] = &out[..] else {
            panic!("{out:?}")
        };
        // 50 flows: the responder allows it more memory than a test of one stream.
        assert_eq!(plan.streams, 50);
        let limits = super::super::ResponderConfig::new("127.0.0.1:0".parse().unwrap());
        assert!(plan.memory > limits.max_test_memory);
        assert!(plan.memory <= limits.test_memory_limit(plan.streams));
    }

    #[test]
    fn a_gated_session_takes_its_slot_after_the_hello_and_is_told_when_none_is_free() {
        let t0 = Instant::now();
        // Silent: closed at the hello deadline, never asking for a slot.
        let mut s = Session::gated(config(), t0);
        assert!(s.in_handshake());
        assert_eq!(s.poll_timeout(), Some(t0 + HELLO_TIMEOUT));
        s.handle_timeout(t0 + HELLO_TIMEOUT);
        let out = drain(&mut s);
        assert!(!out.iter().any(|o| matches!(o, Output::Admit)), "{out:?}");
        assert!(matches!(out.last(), Some(Output::Close(Err(_)))), "{out:?}");

        // A hello that passes asks for a slot, with no deadline meanwhile, and is answered once it got one.
        let mut s = Session::gated(config(), t0);
        s.handle_line(t0, &line(&hello()));
        assert!(matches!(drain(&mut s)[..], [Output::Admit]));
        assert!(s.in_handshake());
        assert_eq!(s.poll_timeout(), None);
        s.admitted(t0, Ok(()));
        assert!(matches!(
            drain(&mut s)[..],
            [Output::Reply {
                reply: Reply::Hello { .. },
                critical: true
            }]
        ));
        assert!(!s.in_handshake());
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(60)));

        // No slot: "busy", and the close.
        let mut s = Session::gated(config(), t0);
        s.handle_line(t0, &line(&hello()));
        drain(&mut s);
        s.admitted(t0, Err(3));
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], Output::Reply { reply: Reply::Error { message }, critical: false }
                if message.contains("busy") && message.contains("at most 3 sessions")),
            "{out:?}"
        );
        assert!(matches!(out[1], Output::Close(Ok(()))));

        // A wrong token never gets as far as a slot.
        let mut s = Session::gated(
            SessionConfig {
                token: Some("s3cret-token-value".into()),
                ..config()
            },
            t0,
        );
        s.handle_line(t0, &line(&hello()));
        let out = drain(&mut s);
        assert!(!out.iter().any(|o| matches!(o, Output::Admit)), "{out:?}");
        assert!(s.is_closed());
    }
}
