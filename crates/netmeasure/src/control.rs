//! The control connection over TCP: line-framed JSON messages, every read and write bounded by a
//! timeout.

use serde::{de::DeserializeOwned, Serialize};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::proto::{decode, encode, LineCodec, ProtoError};

/// How often a wait that a stop flag can end looks at the flag.
pub const STOP_POLL: Duration = Duration::from_millis(20);

/// What one bounded read of the control connection gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineRead {
    /// A complete line (without its newline).
    Line(String),
    /// Nothing within the wait.
    Nothing,
    /// The peer closed the connection.
    Closed,
}

/// How a read ended.
enum Got {
    Line(String),
    Deadline,
    Stopped,
}

/// One end of a control connection.
pub struct ControlConn {
    stream: TcpStream,
    codec: LineCodec,
    peer: String,
    write_timeout: Duration,
}

impl ControlConn {
    /// Connects to `addr`, waiting at most `timeout`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, ProtoError> {
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|source| ProtoError::Io {
            peer: addr.to_string(),
            what: format!("connect (timeout {:.1} s)", timeout.as_secs_f64()),
            source,
        })?;
        ControlConn::from_stream(stream, timeout)
    }

    /// Wraps an accepted stream; writes time out after `write_timeout`.
    pub fn from_stream(stream: TcpStream, write_timeout: Duration) -> Result<Self, ProtoError> {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(write_timeout))
            .map_err(|source| ProtoError::Io {
                peer: peer.clone(),
                what: "set write timeout".into(),
                source,
            })?;
        Ok(ControlConn {
            stream,
            codec: LineCodec::new(),
            peer,
            write_timeout,
        })
    }

    /// The peer's address as text.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The underlying stream (e.g. for its local address).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Sends one message.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), ProtoError> {
        let bytes = encode(msg);
        self.stream.write_all(&bytes).map_err(|source| {
            let what = if is_timeout(&source) {
                format!("send timed out after {:.1} s", self.write_timeout.as_secs_f64())
            } else {
                "send".into()
            };
            ProtoError::Io {
                peer: self.peer.clone(),
                what,
                source,
            }
        })
    }

    /// Receives one message, waiting at most `timeout`; `what` names the wait in errors and `kind`
    /// ("request"/"reply") the message type.
    pub fn recv<T: DeserializeOwned>(
        &mut self,
        timeout: Duration,
        what: &str,
        kind: &'static str,
    ) -> Result<T, ProtoError> {
        let line = self.recv_line(timeout, what)?;
        decode(&line, kind)
    }

    /// Like [`recv`](Self::recv), but gives up with `Ok(None)` as soon as `stop` is set (looked at
    /// every [`STOP_POLL`] at least). After `None` the reply may still come: the session is out of
    /// step and the connection should be dropped.
    pub fn recv_unless_stopped<T: DeserializeOwned>(
        &mut self,
        timeout: Duration,
        what: &str,
        kind: &'static str,
        stop: &AtomicBool,
    ) -> Result<Option<T>, ProtoError> {
        match self.next_line(timeout, what, Some(stop))? {
            Some(line) => decode(&line, kind).map(Some),
            None => Ok(None),
        }
    }

    /// Receives one line, waiting at most `timeout`.
    pub fn recv_line(&mut self, timeout: Duration, what: &str) -> Result<String, ProtoError> {
        Ok(self
            .next_line(timeout, what, None)?
            .expect("a line: only a stop flag ends the wait early"))
    }

    /// Waits at most `wait` for one line; the end of the wait is [`LineRead::Nothing`], not an error.
    /// `what` names the wait in errors.
    pub fn read_line(&mut self, wait: Duration, what: &str) -> Result<LineRead, ProtoError> {
        match self.read_until(Instant::now() + wait, what, None) {
            Ok(Got::Line(line)) => Ok(LineRead::Line(line)),
            Ok(Got::Deadline | Got::Stopped) => Ok(LineRead::Nothing),
            Err(ProtoError::Closed { .. }) => Ok(LineRead::Closed),
            Err(e) => Err(e),
        }
    }

    fn next_line(
        &mut self,
        timeout: Duration,
        what: &str,
        stop: Option<&AtomicBool>,
    ) -> Result<Option<String>, ProtoError> {
        match self.read_until(Instant::now() + timeout, what, stop)? {
            Got::Line(line) => Ok(Some(line)),
            Got::Stopped => Ok(None),
            Got::Deadline => Err(self.timeout_error(timeout, what)),
        }
    }

    fn read_until(
        &mut self,
        deadline: Instant,
        what: &str,
        stop: Option<&AtomicBool>,
    ) -> Result<Got, ProtoError> {
        let mut buf = [0u8; 16384];
        loop {
            if let Some(line) = self.codec.next_line()? {
                return Ok(Got::Line(line));
            }
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                return Ok(Got::Stopped);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Got::Deadline);
            }
            // SO_RCVTIMEO of zero means "forever", so never set less than 1 ms.
            let mut left = (deadline - now).max(Duration::from_millis(1));
            if stop.is_some() {
                left = left.min(STOP_POLL);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|source| ProtoError::Io {
                    peer: self.peer.clone(),
                    what: "set read timeout".into(),
                    source,
                })?;
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    return Err(ProtoError::Closed {
                        peer: self.peer.clone(),
                        what: what.to_string(),
                    })
                }
                Ok(n) => self.codec.feed(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {}
                Err(source) => {
                    return Err(ProtoError::Io {
                        peer: self.peer.clone(),
                        what: what.to_string(),
                        source,
                    })
                }
            }
        }
    }

    fn timeout_error(&self, timeout: Duration, what: &str) -> ProtoError {
        ProtoError::Io {
            peer: self.peer.clone(),
            what: format!("no answer within {:.1} s while {what}", timeout.as_secs_f64()),
            source: io::Error::from(io::ErrorKind::TimedOut),
        }
    }

    /// True when the peer has closed or reset the connection, or sent something unasked (checked
    /// without waiting).
    pub fn peer_gone_or_talking(&self) -> bool {
        use vlbiflow_udp::poll::{wait, PollFlags};
        wait(&self.stream, PollFlags::IN, Duration::ZERO).is_ok_and(|e| !e.is_empty())
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}
