//! The client's side of the control conversation as a state machine without I/O: which reply each
//! request waits for, how long, and what a reply means (a result, the responder's refusal, or a
//! session out of step).
//!
//! The I/O layer ([`super::Client`]) sends each request of [`Exchange::poll_transmit`], feeds the lines
//! it reads to [`Exchange::handle_line`] until that gives an answer, and calls
//! [`Exchange::handle_timeout`] at [`Exchange::poll_timeout`] and [`Exchange::handle_closed`] when the
//! responder closes. One request is outstanding at a time.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use crate::eff::{Availability, EffRemote};
use crate::proto::{check_hello, decode, short, BwRemote, ProtoError, Reply, Request, TcpRemote};

/// Extra wait for a bw result: the responder drains the stream first (up to its idle time after the
/// last datagram).
const BW_RESULT_GRACE: Duration = Duration::from_secs(2);
/// Extra wait for a TCP or efficiency result: the receiver waits for the streams to end.
const RESULT_GRACE: Duration = Duration::from_secs(6);

/// A reply the client was waiting for.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The session is open; the responder's software.
    Hello(String),
    /// A test's socket is ready.
    Ready {
        /// UDP or TCP port.
        port: u16,
        /// Buffer the responder's kernel granted, bytes.
        buffer: usize,
    },
    /// An efficiency test's sockets are ready.
    EffReady {
        /// Ports, one per UDP flow (TCP: one).
        ports: Vec<u16>,
    },
    /// The responder's receive paths.
    Transports(Vec<Availability>),
    /// A bw result.
    Bw(Box<BwRemote>),
    /// A latency result: requests echoed, datagrams ignored.
    Lat {
        /// Requests echoed.
        echoed: u64,
        /// Datagrams ignored.
        foreign: u64,
    },
    /// A TCP result.
    Tcp(Box<TcpRemote>),
    /// An efficiency result.
    Eff(Box<EffRemote>),
    /// Any reply (to a request whose answer does not matter).
    Any(Reply),
}

/// What a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Hello,
    Ready,
    EffReady,
    Transports,
    BwResult,
    LatResult,
    TcpResult,
    EffResult,
    Any,
}

#[derive(Debug)]
struct Pending {
    expect: Expect,
    deadline: Instant,
    wait: Duration,
    what: &'static str,
}

/// The control conversation of one client session.
#[derive(Debug)]
pub struct Exchange {
    peer: String,
    timeout: Duration,
    out: VecDeque<Request>,
    pending: Option<Pending>,
}

impl Exchange {
    /// A conversation with the responder at `peer`; `timeout` bounds each wait for a reply outside the
    /// tests' own time.
    pub fn new(peer: String, timeout: Duration) -> Self {
        Exchange {
            peer,
            timeout,
            out: VecDeque::new(),
            pending: None,
        }
    }

    /// Sends `req` at `now` and waits for its reply.
    pub fn request(&mut self, now: Instant, req: Request) {
        let t = self.timeout;
        let (expect, wait, what) = match &req {
            Request::Hello { .. } => (Expect::Hello, t, "waiting for the responder's hello"),
            Request::BwStart(_) => (Expect::Ready, t, "waiting for the bw test socket"),
            Request::LatStart { .. } => (Expect::Ready, t, "waiting for the lat test socket"),
            Request::TcpStart { .. } => (Expect::Ready, t, "waiting for the tcp test socket"),
            Request::EffProbe => (Expect::Transports, t, "waiting for the responder's transports"),
            Request::EffStart(_) => (Expect::EffReady, t, "waiting for the efficiency test sockets"),
            Request::BwFinish { .. } => (Expect::BwResult, t + BW_RESULT_GRACE, "waiting for the bw result"),
            Request::LatFinish => (Expect::LatResult, t, "waiting for the lat result"),
            Request::TcpFinish => (Expect::TcpResult, t + RESULT_GRACE, "waiting for the tcp result"),
            Request::EffFinish { .. } => (
                Expect::EffResult,
                t + RESULT_GRACE,
                "waiting for the efficiency result",
            ),
        };
        self.out.push_back(req);
        self.pending = Some(Pending {
            expect,
            deadline: now + wait,
            wait,
            what,
        });
    }

    /// Sends `req` and takes whatever the responder answers (ending a test whose sending failed, so
    /// that the session stays in step).
    pub fn request_any(&mut self, now: Instant, req: Request) {
        self.request(now, req);
        if let Some(p) = &mut self.pending {
            p.expect = Expect::Any;
            p.what = "waiting for the end of a failed efficiency test";
        }
    }

    /// Sends `req` without waiting for an answer.
    pub fn notify(&mut self, req: Request) {
        self.out.push_back(req);
    }

    /// The next request to send.
    pub fn poll_transmit(&mut self) -> Option<Request> {
        self.out.pop_front()
    }

    /// When the outstanding request times out.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.deadline)
    }

    /// What the client is waiting for, for errors.
    pub fn waiting_for(&self) -> &'static str {
        self.pending.as_ref().map_or("idle", |p| p.what)
    }

    /// Whether a reply is awaited.
    pub fn is_waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// A line from the responder: the answer, or why the session failed. None when nothing was awaited.
    pub fn handle_line(&mut self, _now: Instant, line: &str) -> Option<Result<Answer, ProtoError>> {
        self.pending.as_ref()?;
        match decode::<Reply>(line, "reply") {
            Ok(reply) => self.handle_reply(reply),
            Err(e) => {
                self.pending = None;
                Some(Err(e))
            }
        }
    }

    /// A reply from the responder (see [`handle_line`](Self::handle_line)).
    pub fn handle_reply(&mut self, reply: Reply) -> Option<Result<Answer, ProtoError>> {
        let p = self.pending.take()?;
        let unexpected = |expected: &'static str, got: &Reply| ProtoError::Unexpected {
            expected,
            got: short(got),
        };
        Some(match (p.expect, reply) {
            (Expect::Hello, r) => check_hello(r).map(Answer::Hello),
            (Expect::Any, r) => Ok(Answer::Any(r)),
            (_, Reply::Error { message }) => Err(ProtoError::Remote(message)),
            (Expect::Ready, Reply::Ready { port, buffer }) => Ok(Answer::Ready { port, buffer }),
            (Expect::EffReady, Reply::EffReady { ports, .. }) => Ok(Answer::EffReady { ports }),
            (Expect::Transports, Reply::EffTransports { transports }) => Ok(Answer::Transports(transports)),
            (Expect::BwResult, Reply::BwResult(r)) => Ok(Answer::Bw(r)),
            (Expect::LatResult, Reply::LatResult { echoed, foreign }) => Ok(Answer::Lat { echoed, foreign }),
            (Expect::TcpResult, Reply::TcpResult(r)) => Ok(Answer::Tcp(r)),
            (Expect::EffResult, Reply::EffResult(r)) => Ok(Answer::Eff(r)),
            (e, other) => Err(unexpected(expected_name(e), &other)),
        })
    }

    /// The deadline passed without an answer; the error when one was awaited.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<ProtoError> {
        if self.pending.as_ref()?.deadline > now {
            return None;
        }
        let p = self.pending.take()?;
        Some(ProtoError::Io {
            peer: self.peer.clone(),
            what: format!("no answer within {:.1} s while {}", p.wait.as_secs_f64(), p.what),
            source: io::Error::from(io::ErrorKind::TimedOut),
        })
    }

    /// The responder closed the connection.
    pub fn handle_closed(&mut self) -> ProtoError {
        let what = self.waiting_for().to_string();
        self.pending = None;
        ProtoError::Closed {
            peer: self.peer.clone(),
            what,
        }
    }

    /// Gives up the outstanding wait (the user stopped); the session is then out of step.
    pub fn abandon(&mut self) {
        self.pending = None;
    }
}

fn expected_name(e: Expect) -> &'static str {
    match e {
        Expect::Hello => "hello",
        Expect::Ready => "ready",
        Expect::EffReady => "eff_ready",
        Expect::Transports => "eff_transports",
        Expect::BwResult => "bw_result",
        Expect::LatResult => "lat_result",
        Expect::TcpResult => "tcp_result",
        Expect::EffResult => "eff_result",
        Expect::Any => "a reply",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{encode, BwSetup, PROTOCOL_VERSION};
    use crate::responder::session::{Output, Session, SessionConfig};

    /// A control connection in simulated time: every line arrives `delay` after it was sent, in order.
    struct Wire {
        delay: Duration,
        to_responder: VecDeque<(Instant, String)>,
        to_client: VecDeque<(Instant, String)>,
    }

    fn text<T: serde::Serialize>(m: &T) -> String {
        String::from_utf8(encode(m)).unwrap().trim_end().to_string()
    }

    /// Runs the responder's session (with an I/O layer that starts every test on port 6000 and answers
    /// every finish with an empty result) against `client` until the client has its answer or gives
    /// up; the answer and the simulated time it came.
    fn converse(
        client: &mut Exchange,
        session: &mut Session,
        wire: &mut Wire,
        mut now: Instant,
        responder_silent: bool,
    ) -> (Option<Result<Answer, ProtoError>>, Instant) {
        loop {
            while let Some(req) = client.poll_transmit() {
                wire.to_responder.push_back((now + wire.delay, text(&req)));
            }
            while let Some(o) = session.poll_output() {
                match o {
                    Output::Reply { reply, .. } => wire.to_client.push_back((now + wire.delay, text(&reply))),
                    Output::Start(_) => session.started(
                        now,
                        Ok(Reply::Ready {
                            port: 6000,
                            buffer: 1,
                        }),
                    ),
                    Output::Finish { .. } => session.finished(now, Reply::BwResult(Box::default())),
                    _ => {}
                }
            }
            let next = [
                wire.to_responder.front().map(|x| x.0),
                wire.to_client.front().map(|x| x.0),
                client.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { return (None, now) };
            now = now.max(next);
            while wire.to_responder.front().is_some_and(|x| x.0 <= now) {
                let (_, line) = wire.to_responder.pop_front().unwrap();
                if !responder_silent {
                    session.handle_line(now, &line);
                }
            }
            while wire.to_client.front().is_some_and(|x| x.0 <= now) {
                let (_, line) = wire.to_client.pop_front().unwrap();
                if let Some(a) = client.handle_line(now, &line) {
                    return (Some(a), now);
                }
            }
            if let Some(e) = client.handle_timeout(now) {
                return (Some(Err(e)), now);
            }
        }
    }

    fn responder(t0: Instant) -> Session {
        let config = SessionConfig {
            software: "sim responder".into(),
            idle_timeout: Duration::from_secs(60),
            hello_timeout: crate::responder::HELLO_TIMEOUT,
            default_recv_buffer: 1 << 20,
            efficiency: false,
            peer: "client".into(),
            token: None,
            max_test_duration: Duration::from_secs(60),
        };
        Session::new(config, t0)
    }

    fn hello() -> Request {
        Request::Hello {
            version: PROTOCOL_VERSION,
            software: "sim client".into(),
            token: None,
        }
    }

    #[test]
    fn a_session_and_a_bw_test_across_a_slow_control_path() {
        let t0 = Instant::now();
        let rtt = Duration::from_millis(300);
        let mut wire = Wire {
            delay: rtt / 2,
            to_responder: VecDeque::new(),
            to_client: VecDeque::new(),
        };
        let mut session = responder(t0);
        let mut client = Exchange::new("responder".into(), Duration::from_secs(5));
        client.request(t0, hello());
        let (a, t) = converse(&mut client, &mut session, &mut wire, t0, false);
        assert_eq!(a.unwrap().unwrap(), Answer::Hello("sim responder".into()));
        assert_eq!(t, t0 + rtt);

        let setup = BwSetup {
            test_id: 3,
            count: 100,
            size: 1000,
            recv_buffer: None,
            max_duration_ms: 1000,
            timeline: false,
        };
        client.request(t, Request::BwStart(setup));
        let (a, t) = converse(&mut client, &mut session, &mut wire, t, false);
        assert_eq!(
            a.unwrap().unwrap(),
            Answer::Ready {
                port: 6000,
                buffer: 1
            }
        );
        assert_eq!(t, t0 + 2 * rtt);
        client.request(t, Request::BwFinish { sent: 100 });
        let (a, t) = converse(&mut client, &mut session, &mut wire, t, false);
        assert!(matches!(a.unwrap().unwrap(), Answer::Bw(_)));
        assert_eq!(t, t0 + 3 * rtt);

        // A finish outside a test: the responder's error reaches the client as the responder's
        // words, and the session goes on.
        client.request(t, Request::LatFinish);
        let (a, _) = converse(&mut client, &mut session, &mut wire, t, false);
        let Err(ProtoError::Remote(m)) = a.unwrap() else {
            panic!()
        };
        assert!(m.contains("unexpected request outside a test"), "{m}");
        assert!(!session.is_closed());
    }

    #[test]
    fn a_silent_responder_times_out_at_the_deadline() {
        let t0 = Instant::now();
        let mut wire = Wire {
            delay: Duration::from_millis(10),
            to_responder: VecDeque::new(),
            to_client: VecDeque::new(),
        };
        let mut session = responder(t0);
        let mut client = Exchange::new("responder".into(), Duration::from_secs(5));
        client.request(t0, hello());
        let (a, t) = converse(&mut client, &mut session, &mut wire, t0, true);
        let e = a.unwrap().unwrap_err();
        assert_eq!(t, t0 + Duration::from_secs(5));
        assert!(
            e.to_string()
                .contains("no answer within 5.0 s while waiting for the responder's hello"),
            "{e}"
        );
        // A bw result gets 2 s more, a TCP result 6 s more.
        client.request(t0, Request::BwFinish { sent: 1 });
        assert_eq!(client.poll_timeout(), Some(t0 + Duration::from_secs(7)));
        client.abandon();
        client.request(t0, Request::TcpFinish);
        assert_eq!(client.poll_timeout(), Some(t0 + Duration::from_secs(11)));
    }

    #[test]
    fn replies_of_the_wrong_kind_say_what_was_expected() {
        let t0 = Instant::now();
        let mut client = Exchange::new("responder".into(), Duration::from_secs(5));
        client.request(
            t0,
            Request::LatStart {
                test_id: 1,
                max_size: 64,
            },
        );
        let e = client
            .handle_reply(Reply::LatResult {
                echoed: 1,
                foreign: 0,
            })
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("expected ready, got"), "{e}");
        assert!(
            client
                .handle_reply(Reply::LatResult {
                    echoed: 1,
                    foreign: 0
                })
                .is_none(),
            "nothing awaited"
        );
        client.request(t0, Request::EffProbe);
        let e = client
            .handle_line(t0, "{\"type\":\"nonsense\"}")
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("invalid reply message"), "{e}");
        client.request(t0, Request::LatFinish);
        let e = client.handle_closed();
        assert!(
            e.to_string()
                .contains("closed by the other end while waiting for the lat result"),
            "{e}"
        );
    }
}
