//! The control protocol between a client and the responder (sans-IO part).
//!
//! One JSON object per line over TCP. The client opens with [`Request::Hello`] carrying
//! [`PROTOCOL_VERSION`]; the responder answers [`Reply::Hello`] with its own version, or
//! [`Reply::Error`] and closes when they differ. Then any number of tests follow, each
//! `*Start` -> `Ready { port }` -> traffic -> `*Finish` -> result. [`LineCodec`] frames bytes into lines
//! with a length limit; [`decode`] turns a line into a message with an error naming what was wrong.

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::host::HostUsage;
use crate::stats::ArrivalSummary;
use crate::tcpinfo::TcpSockInfo;

/// Version of the control protocol and of the result structures carried by it.
pub const PROTOCOL_VERSION: u32 = 1;
/// What a bw client adds to its sending time for [`BwSetup::max_duration_ms`]: the time the
/// responder waits for the last packets and the finish. A responder's cap on test duration is on what
/// is left.
pub const BW_FINISH_SLACK: std::time::Duration = std::time::Duration::from_secs(30);
/// Longest accepted line (results with histograms and loss intervals stay well below it).
pub const MAX_LINE: usize = 8 << 20;

/// Client -> responder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Opens a session.
    Hello {
        /// The client's [`PROTOCOL_VERSION`].
        version: u32,
        /// Free text, e.g. "vlbiflow 0.1.0".
        software: String,
        /// The responder's access token, when it asks for one (`net responder --token-file`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Prepares a UDP throughput test.
    BwStart(BwSetup),
    /// The sender is done: summarise and reply [`Reply::BwResult`].
    BwFinish {
        /// Packets sent (numbered 0..sent).
        sent: u64,
    },
    /// Prepares a latency (echo) test.
    LatStart {
        /// Test id carried in each request.
        test_id: u32,
        /// Largest request size, bytes.
        max_size: usize,
    },
    /// Ends the latency test: reply [`Reply::LatResult`].
    LatFinish,
    /// Prepares a TCP throughput test.
    TcpStart {
        /// Connections the client will open.
        streams: u32,
        /// Receive buffer to request per connection, bytes.
        recv_buffer: Option<usize>,
    },
    /// The client has closed its streams: reply [`Reply::TcpResult`].
    TcpFinish,
    /// Which receive paths does the responder offer? Reply [`Reply::EffTransports`].
    EffProbe,
    /// Prepares a transport-efficiency test ([`crate::eff`]): reply [`Reply::EffReady`].
    EffStart(crate::eff::EffSetup),
    /// The sender is done: drain and reply [`Reply::EffResult`].
    EffFinish {
        /// UDP: datagrams sent per flow; TCP: bytes per connection.
        sent: Vec<u64>,
    },
}

/// Parameters of a UDP throughput test, as the receiver needs them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BwSetup {
    /// Test id carried in each packet.
    pub test_id: u32,
    /// Packets the client will send at most.
    pub count: u64,
    /// Datagram size, bytes.
    pub size: usize,
    /// Receive buffer to request, bytes.
    pub recv_buffer: Option<usize>,
    /// Longest the test may take before the responder gives up, ms.
    pub max_duration_ms: u64,
    /// Return every packet's send and receive time ([`BwRemote::timeline`]); for tests of at most
    /// [`crate::stats::MAX_TIMELINE`] packets (packet dispersion). Absent in older clients: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timeline: bool,
}

/// Responder -> client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Accepts a session.
    Hello {
        /// The responder's [`PROTOCOL_VERSION`].
        version: u32,
        /// Free text.
        software: String,
    },
    /// The test's traffic may start, to this port on the responder's control address.
    Ready {
        /// UDP or TCP port.
        port: u16,
        /// Socket buffer the kernel granted for the test socket, bytes.
        buffer: usize,
    },
    /// UDP throughput result.
    BwResult(Box<BwRemote>),
    /// Latency result.
    LatResult {
        /// Requests echoed.
        echoed: u64,
        /// Datagrams ignored (not requests of this test).
        foreign: u64,
    },
    /// TCP result.
    TcpResult(Box<TcpRemote>),
    /// The responder's receive paths and why any is missing.
    EffTransports {
        /// One entry per transport the responder knows.
        transports: Vec<crate::eff::Availability>,
    },
    /// An efficiency test's receive path is ready.
    EffReady {
        /// UDP: one port per flow; TCP: the listening port.
        ports: Vec<u16>,
        /// Receive buffer the kernel granted per UDP socket, bytes.
        buffer: usize,
    },
    /// Efficiency test result.
    EffResult(Box<crate::eff::EffRemote>),
    /// The request failed; the message says why.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// What the receiving end reports for a UDP throughput test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BwRemote {
    /// Arrival statistics.
    pub arrivals: ArrivalSummary,
    /// Bytes received in test packets.
    pub bytes: u64,
    /// Drops the kernel counted on the test socket (SO_RXQ_OVFL).
    pub socket_drops: u64,
    /// The receiver's CPU, interrupts and UDP counters during the test.
    pub host: HostUsage,
    /// Every packet's times, when the client asked for them ([`BwSetup::timeline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<crate::stats::Timeline>,
}

/// What the receiving end reports for a TCP test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpRemote {
    /// Bytes received per stream.
    pub bytes: Vec<u64>,
    /// First byte, receiver's CLOCK_REALTIME ns.
    pub first_ns: u64,
    /// Last byte, receiver's CLOCK_REALTIME ns.
    pub last_ns: u64,
    /// Receiver socket state per stream.
    pub sockets: Vec<TcpSockInfo>,
    /// The receiver's host and whole process during the test.
    pub host: HostUsage,
    /// The CPU time of the receiver's test threads (the acceptor, the readers, the session's), the
    /// figure its CPU per GB is computed from; absent from older responders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<crate::host::ProcessCpu>,
}

/// A control-protocol failure, naming what was being done.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// A line longer than [`MAX_LINE`].
    #[error("control connection: line longer than {MAX_LINE} bytes")]
    TooLong,
    /// A line that is not a valid message.
    #[error("control connection: invalid {what} message: {detail}")]
    Invalid {
        /// "request" or "reply".
        what: &'static str,
        /// The parser's complaint, with the start of the line.
        detail: String,
    },
    /// The peer speaks another protocol version.
    #[error(
        "protocol version mismatch: this end speaks {ours}, the other end ({software}) speaks {theirs}; \
         run the same vlbiflow version at both ends"
    )]
    Version {
        /// Our version.
        ours: u32,
        /// Theirs.
        theirs: u32,
        /// Their software string.
        software: String,
    },
    /// The peer reported an error.
    #[error("responder: {0}")]
    Remote(String),
    /// The peer answered something unexpected.
    #[error("control connection: expected {expected}, got {got}")]
    Unexpected {
        /// What was expected.
        expected: &'static str,
        /// A short form of what came.
        got: String,
    },
    /// I/O failure or timeout.
    #[error("control connection to {peer}: {what}: {source}")]
    Io {
        /// Peer address.
        peer: String,
        /// The step.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The peer closed the connection.
    #[error("control connection to {peer}: closed by the other end while {what}")]
    Closed {
        /// Peer address.
        peer: String,
        /// The step.
        what: String,
    },
}

/// Splits a byte stream into lines (sans-IO).
#[derive(Debug, Default)]
pub struct LineCodec {
    buf: Vec<u8>,
    scanned: usize,
}

impl LineCodec {
    /// An empty codec.
    pub fn new() -> Self {
        LineCodec::default()
    }

    /// Appends received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned as a line.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete line without its newline (a trailing `\r` is dropped), if any.
    pub fn next_line(&mut self) -> Result<Option<String>, ProtoError> {
        match self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            Some(pos) => {
                let end = self.scanned + pos;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                self.scanned = 0;
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.len() > MAX_LINE {
                    return Err(ProtoError::TooLong);
                }
                Ok(Some(String::from_utf8_lossy(&line).into_owned()))
            }
            None => {
                self.scanned = self.buf.len();
                if self.buf.len() > MAX_LINE {
                    self.buf.clear();
                    self.scanned = 0;
                    return Err(ProtoError::TooLong);
                }
                Ok(None)
            }
        }
    }
}

/// One message as a line with its newline.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(msg).expect("protocol messages serialise");
    v.push(b'\n');
    v
}

/// Parses a line as a message; `what` names the kind ("request" or "reply") in errors.
pub fn decode<T: DeserializeOwned>(line: &str, what: &'static str) -> Result<T, ProtoError> {
    serde_json::from_str(line).map_err(|e| {
        let start: String = line.chars().take(60).collect();
        ProtoError::Invalid {
            what,
            detail: format!("{e} (line starts {start:?})"),
        }
    })
}

/// Checks the responder's hello against ours.
pub fn check_hello(reply: Reply) -> Result<String, ProtoError> {
    match reply {
        Reply::Hello { version, software } if version == PROTOCOL_VERSION => Ok(software),
        Reply::Hello { version, software } => Err(ProtoError::Version {
            ours: PROTOCOL_VERSION,
            theirs: version,
            software,
        }),
        Reply::Error { message } => Err(ProtoError::Remote(message)),
        other => Err(ProtoError::Unexpected {
            expected: "hello",
            got: short(&other),
        }),
    }
}

/// The responder's answer to a client hello.
pub fn answer_hello(version: u32, software: &str) -> Reply {
    if version == PROTOCOL_VERSION {
        Reply::Hello {
            version: PROTOCOL_VERSION,
            software: software.to_string(),
        }
    } else {
        Reply::Error {
            message: format!(
                "protocol version mismatch: client speaks {version}, this responder ({software}) speaks \
                 {PROTOCOL_VERSION}; run the same vlbiflow version at both ends"
            ),
        }
    }
}

/// A short description of a message for errors.
pub fn short<T: Serialize>(msg: &T) -> String {
    let s = serde_json::to_string(msg).unwrap_or_default();
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_splits_lines_across_feeds() {
        let mut c = LineCodec::new();
        c.feed(b"{\"a\":1}\n{\"b\"");
        assert_eq!(c.next_line().unwrap().as_deref(), Some("{\"a\":1}"));
        assert_eq!(c.next_line().unwrap(), None);
        c.feed(b":2}\r\n");
        assert_eq!(c.next_line().unwrap().as_deref(), Some("{\"b\":2}"));
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn codec_rejects_endless_line() {
        let mut c = LineCodec::new();
        let chunk = vec![b'x'; 1 << 20];
        let mut err = None;
        for _ in 0..10 {
            c.feed(&chunk);
            if let Err(e) = c.next_line() {
                err = Some(e);
                break;
            }
        }
        assert!(matches!(err, Some(ProtoError::TooLong)));
    }

    #[test]
    fn messages_round_trip() {
        let r = Request::BwStart(BwSetup {
            test_id: 7,
            count: 100,
            size: 1472,
            recv_buffer: Some(1 << 20),
            max_duration_ms: 5000,
            timeline: false,
        });
        // An older client's request (no timeline field) still parses.
        let old =
            r#"{"type":"bw_start","test_id":1,"count":2,"size":64,"recv_buffer":null,"max_duration_ms":9}"#;
        assert!(matches!(
            decode::<Request>(old, "request").unwrap(),
            Request::BwStart(BwSetup { timeline: false, .. })
        ));
        let line = encode(&r);
        let s = std::str::from_utf8(&line).unwrap().trim_end();
        assert_eq!(decode::<Request>(s, "request").unwrap(), r);
        let e = decode::<Request>("GET / HTTP/1.1", "request").unwrap_err();
        assert!(e.to_string().contains("invalid request message"), "{e}");
    }

    #[test]
    fn version_handshake() {
        assert!(matches!(answer_hello(PROTOCOL_VERSION, "x"), Reply::Hello { .. }));
        let Reply::Error { message } = answer_hello(PROTOCOL_VERSION + 1, "x") else {
            panic!("mismatch accepted")
        };
        assert!(message.contains("version mismatch"), "{message}");
        let e = check_hello(Reply::Hello {
            version: 99,
            software: "other".into(),
        })
        .unwrap_err();
        assert!(e.to_string().contains("speaks 99"), "{e}");
        assert_eq!(
            check_hello(Reply::Hello {
                version: PROTOCOL_VERSION,
                software: "me".into()
            })
            .unwrap(),
            "me"
        );
    }
}
