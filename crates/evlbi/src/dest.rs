//! Forwarding destinations: what `--forward`, `relay --to` and the daemon's `forward=add` name.
//!
//! `[LABEL=]PROTO@HOST:PORT[,threads=0,1][,rate=RATE][,burst=SIZE][,queue=FRAMES][,stream=LABEL][,psn=N]`
//!
//! - `PROTO`: `udps` (8-byte packet sequence number, little-endian, then the frame: jive5ab's and Mark6's
//!   format, the e-EVN default; jive5ab's `udp` means the same), `vdif` (the frame alone, one per
//!   datagram, also for Mark5B frames; jive5ab's `pudp`) or `tcp` (frames back to back on a TCP
//!   connection, reconnected when it breaks, as EVN once ran).
//! - `threads=0,1`: forward only these VDIF threads (all by default).
//! - `rate=1.9Gbps`: pace to this rate (bits of UDP payload or TCP data per second) with a token bucket of
//!   `burst` bytes (default the larger of 8 datagrams and 5 ms at the rate); unpaced by default.
//! - `queue=N`: frames the destination may hold while it cannot keep up (default: 32768, at most 256 MiB:
//!   about a second at 2 Gb/s);
//!   beyond that frames are dropped for this destination and counted, never waited for.
//! - `stream=LABEL`: which recorded stream to forward (`record` with several streams).
//! - `psn=N`: packet sequence number of the first forwarded frame (default 0); later frames keep their
//!   distance from it in the source stream (see [`vlbiflow_realtime::position`]). `psn=input`: the input's
//!   own numbering unchanged.
//! - `notices=off`: send no gap notices ([`vlbiflow_formats::notice`]) to a `udps` destination (on by
//!   default; a receiver that does not know them counts each as a wrong-sized datagram).

use std::net::SocketAddr;

use vlbiflow_formats::vdif::MAX_THREAD_ID;
use vlbiflow_scan::spec::{Spec, SpecOption, SpecSyntax};

/// How frames go to a destination.
/// Default pacing burst, in milliseconds at the pacing rate. A sender thread that wakes later than the
/// bucket's depth loses those tokens for good, so its long-run rate falls below the one configured; on a
/// busy host wake-ups come several milliseconds late. With 1 ms, a 2 Gb/s stream forwarded at 2.4 Gb/s
/// lost 133,557-343,057 of 1,823,880 frames in the forward queue at load 4-7 (three 60 s runs); with 5 ms
/// (1.5 MB at 2.4 Gb/s) none, in the same conditions (bench/realtime.sh accept, docs/bench-realtime.md).
pub const DEFAULT_BURST_MS: u64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// 8-byte PSN + frame per datagram.
    Udps,
    /// One frame per datagram.
    Vdif,
    /// Frames back to back on a TCP connection.
    Tcp,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Udps => "udps",
            Protocol::Vdif => "vdif",
            Protocol::Tcp => "tcp",
        }
    }

    /// Parses `udps`, `vdif` or `tcp`; as in jive5ab, `udp` means `udps` and `pudp` plain datagrams.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.trim().to_ascii_lowercase().as_str() {
            "udps" | "udp" => Some(Protocol::Udps),
            "vdif" | "pudp" => Some(Protocol::Vdif),
            "tcp" => Some(Protocol::Tcp),
            _ => None,
        }
    }
}

/// Default frames a destination queues.
pub const DEFAULT_QUEUE_FRAMES: usize = 32768;
/// Default memory cap of one destination's queue.
pub const DEFAULT_QUEUE_BYTES: usize = 256 << 20;

/// One destination.
#[derive(Debug, Clone, PartialEq)]
pub struct DestSpec {
    /// Name in status and metrics (default `PROTO@HOST:PORT`).
    pub label: String,
    pub protocol: Protocol,
    /// As written (a host name is resolved when the destination starts).
    pub host: String,
    pub address: SocketAddr,
    /// VDIF threads to forward; empty: all.
    pub threads: Vec<u16>,
    /// Pacing rate, bits per second; `None`: as fast as the destination takes them.
    pub rate_bps: Option<f64>,
    /// Token bucket depth in bytes (default: max(8 datagrams, [`DEFAULT_BURST_MS`] at the rate)).
    pub burst: Option<u64>,
    /// Frames queued at most (default [`DEFAULT_QUEUE_FRAMES`], capped at [`DEFAULT_QUEUE_BYTES`]).
    pub queue: Option<usize>,
    /// Recorded stream to forward (by label).
    pub stream: Option<String>,
    /// Packet sequence number of the first forwarded frame.
    pub first_psn: u64,
    /// Keep the input's own numbering (`psn=input`) instead of starting at `first_psn`.
    pub psn_input: bool,
    /// Send gap notices (`udps` only).
    pub notices: bool,
}

/// A destination that cannot be parsed; says which part and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("destination {spec:?}: {field}: {reason}")]
pub struct SpecError {
    pub spec: String,
    pub field: &'static str,
    pub reason: String,
}

impl DestSpec {
    /// A destination with defaults for everything but protocol and address.
    pub fn new(protocol: Protocol, address: SocketAddr) -> Self {
        DestSpec {
            label: format!("{}@{address}", protocol.name()),
            protocol,
            host: address.to_string(),
            address,
            threads: Vec::new(),
            rate_bps: None,
            burst: None,
            queue: None,
            stream: None,
            first_psn: 0,
            psn_input: false,
            notices: protocol == Protocol::Udps,
        }
    }

    /// Parses the syntax in the module docs.
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
        let err = |field: &'static str, reason: String| SpecError {
            spec: spec.to_owned(),
            field,
            reason,
        };
        let parsed = Spec::parse(spec).map_err(|e| match e {
            SpecSyntax::Label(r) => err("label", r),
            SpecSyntax::NoLabel | SpecSyntax::NoProtocol => {
                err("protocol", "expected PROTO@HOST:PORT (udps, vdif or tcp)".into())
            }
        })?;
        let (label, proto, host) = (parsed.label, parsed.proto, parsed.addr);
        let protocol = Protocol::parse(proto)
            .ok_or_else(|| err("protocol", format!("{proto:?} is not udps, vdif or tcp")))?;
        let address = vlbiflow_udp::net::resolve(host).map_err(|e| err("address", e.to_string()))?;
        if address.port() == 0 {
            return Err(err("address", "port 0 is not a destination".into()));
        }
        let mut d = DestSpec::new(protocol, address);
        d.host = host.to_owned();
        if let Some(l) = label {
            d.label = l.to_owned();
        }
        for option in parsed.options {
            let (key, value, part) = match option.map_err(|r| err("threads", r))? {
                SpecOption::Threads(t) => {
                    d.threads.extend(t);
                    continue;
                }
                SpecOption::Other { key, value, part } => (key, value, part),
            };
            match (key, value) {
                ("rate", Some(v)) => {
                    let r = vlbiflow_units::parse_bit_rate(v).map_err(|e| err("rate", e))?;
                    if r < 8.0 {
                        return Err(err("rate", "must be at least 8 bit/s".into()));
                    }
                    d.rate_bps = Some(r);
                }
                ("burst", Some(v)) => {
                    d.burst = Some(vlbiflow_units::parse_bytes(v).map_err(|e| err("burst", e))?);
                }
                ("queue", Some(v)) => {
                    let n: usize = v
                        .parse()
                        .map_err(|_| err("queue", format!("{v:?} is not a number of frames")))?;
                    if n == 0 || n > 1 << 22 {
                        return Err(err("queue", "must be 1..=4194304 frames".into()));
                    }
                    d.queue = Some(n);
                }
                ("stream", Some(v)) if !v.is_empty() => d.stream = Some(v.to_owned()),
                ("psn", Some("input")) => d.psn_input = true,
                ("psn", Some(v)) => {
                    d.first_psn = v
                        .parse()
                        .map_err(|_| err("psn", format!("{v:?} is not a 64-bit number or \"input\"")))?;
                }
                ("notices", Some(v)) => {
                    d.notices = match v {
                        "on" => true,
                        "off" => false,
                        _ => return Err(err("notices", format!("{v:?} is not on or off"))),
                    };
                    if d.notices && protocol != Protocol::Udps {
                        return Err(err("notices", "gap notices go only to udps destinations".into()));
                    }
                }
                _ => {
                    return Err(err(
                        "option",
                        format!(
                        "unknown option {part:?} (threads=, rate=, burst=, queue=, stream=, psn=, notices=)"
                    ),
                    ))
                }
            }
        }
        let mut seen = [false; MAX_THREAD_ID as usize + 1];
        for &t in &d.threads {
            if std::mem::replace(&mut seen[usize::from(t)], true) {
                return Err(err("threads", format!("thread {t} is listed twice")));
            }
        }
        Ok(d)
    }

    /// Bytes of one datagram (or TCP record) for frames of `frame_len` bytes.
    pub fn wire_len(&self, frame_len: usize) -> usize {
        match self.protocol {
            Protocol::Udps => frame_len + vlbiflow_formats::psn::PSN_LEN,
            Protocol::Vdif | Protocol::Tcp => frame_len,
        }
    }

    /// Frames the queue holds for frames of `frame_len` bytes.
    pub fn queue_frames(&self, frame_len: usize) -> usize {
        self.queue.unwrap_or_else(|| {
            DEFAULT_QUEUE_FRAMES
                .min(DEFAULT_QUEUE_BYTES / (frame_len + vlbiflow_formats::psn::PSN_LEN).max(1))
                .max(16)
        })
    }

    /// Pacing as (bytes per second, burst bytes) for frames of `frame_len` bytes.
    pub fn pacing(&self, frame_len: usize) -> Option<(u64, u64)> {
        let rate = self.rate_bps?;
        let bytes_per_s = (rate / 8.0).round().max(1.0) as u64;
        let wire = self.wire_len(frame_len) as u64;
        let burst = self
            .burst
            .unwrap_or_else(|| (8 * wire).max(bytes_per_s * DEFAULT_BURST_MS / 1000))
            .max(wire);
        Some((bytes_per_s, burst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_option() {
        let d = DestSpec::parse(
            "jive=udps@127.0.0.1:46227,threads=0,1,rate=1.9Gbps,burst=1MB,queue=4096,stream=a,psn=7",
        )
        .unwrap();
        assert_eq!(d.label, "jive");
        assert_eq!(d.protocol, Protocol::Udps);
        assert_eq!(d.address, "127.0.0.1:46227".parse().unwrap());
        assert_eq!(d.threads, [0, 1]);
        assert_eq!(d.rate_bps, Some(1.9e9));
        assert_eq!(d.burst, Some(1_000_000));
        assert_eq!(d.queue, Some(4096));
        assert_eq!(d.stream.as_deref(), Some("a"));
        assert_eq!(d.first_psn, 7);
        assert!(d.notices && !d.psn_input);
        let d = DestSpec::parse("udps@127.0.0.1:1,psn=input,notices=off").unwrap();
        assert!(d.psn_input && !d.notices);
        let d = DestSpec::parse("tcp@localhost:2630").unwrap();
        assert!(!d.notices);
        assert_eq!(d.protocol, Protocol::Tcp);
        assert_eq!(d.label, "tcp@127.0.0.1:2630");
        assert_eq!(d.queue_frames(8224), 32608);
        assert_eq!(d.pacing(8224), None);
        let d = DestSpec::parse("vdif@127.0.0.1:1,rate=1Gbps").unwrap();
        // 125 MB/s: 5 ms is 625 kB, more than 8 frames.
        assert_eq!(d.pacing(8224), Some((125_000_000, 625_000)));
        // At a low rate, 8 datagrams.
        let d = DestSpec::parse("vdif@127.0.0.1:1,rate=10Mbps").unwrap();
        assert_eq!(d.pacing(8224), Some((1_250_000, 8 * 8224)));
    }

    #[test]
    fn errors_name_the_field() {
        for (spec, field) in [
            ("udps127.0.0.1:1", "protocol"),
            ("ftp@127.0.0.1:1", "protocol"),
            ("udps@127.0.0.1", "address"),
            ("udps@127.0.0.1:0", "address"),
            ("udps@127.0.0.1:1,threads=1024", "threads"),
            ("udps@127.0.0.1:1,threads=1,1", "threads"),
            ("udps@127.0.0.1:1,rate=fast", "rate"),
            ("udps@127.0.0.1:1,queue=0", "queue"),
            ("udps@127.0.0.1:1,colour=red", "option"),
            ("udps@127.0.0.1:1,psn=first", "psn"),
            ("vdif@127.0.0.1:1,notices=on", "notices"),
            ("udps@127.0.0.1:1,notices=maybe", "notices"),
            ("a b=udps@127.0.0.1:1", "label"),
            // The label rule of recorded streams, its length limit included.
            ("abcdefghijklmnopqrstuvwxyz0123456=udps@127.0.0.1:1", "label"),
        ] {
            let e = DestSpec::parse(spec).unwrap_err();
            assert_eq!(e.field, field, "{spec}: {e}");
        }
    }
}
