//! Receive paths for radio-astronomy streams on Linux, each serving any number of streams from one thread:
//!
//! | [`Transport`] | how datagrams reach the application |
//! | --- | --- |
//! | `udp` | `recvmmsg` batches, one datagram per message ([`mmsg`]) |
//! | `udp-gro` | `recvmmsg` with UDP GRO: runs of equal datagrams of a flow arrive as one super-datagram |
//! | `uring` | io_uring multishot `recvmsg` per socket into a ring of provided buffers ([`uring`]) |
//! | `uring-gro` | the same with GRO |
//! | `xdp` | AF_XDP socket on queue 0 of the interface, generic (copy) mode, an XDP program redirecting the streams' ports ([`xdp`]) |
//! | `tcp` | TCP byte streams with the kernel's buffer autotuning, `read` per ready connection ([`tcp`]) |
//!
//! [`Rx`] wraps them behind one `poll(timeout, |stream, bytes| ..)`: a UDP path hands over every datagram
//! (GRO super-datagrams split into their segments), TCP hands over what each read returned. Buffers are
//! allocated when a path is opened; polling does not allocate.
//!
//! [`Transport::probe`] says whether this kernel offers a path (io_uring may be disabled by sysctl or
//! missing in old kernels), so a measurement can report what was available instead of failing.

#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(not(target_os = "linux"))]
compile_error!("vlbiflow-rx uses Linux-only interfaces (recvmmsg, UDP GRO, io_uring, AF_XDP)");

pub mod mmsg;
mod sys;
pub mod tcp;
pub mod uring;
pub mod xdp;

use std::fmt;
use std::io;
use std::net::UdpSocket;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use mmsg::MmsgRx;
pub use tcp::TcpRx;
pub use uring::UringRx;
pub use xdp::XdpRx;

/// A way to receive a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Transport {
    /// UDP, `recvmmsg` batches of single datagrams.
    #[serde(rename = "udp")]
    Udp,
    /// UDP with generic receive offload, `recvmmsg` batches of super-datagrams.
    #[serde(rename = "udp-gro")]
    UdpGro,
    /// UDP, io_uring multishot `recvmsg` into provided buffers.
    #[serde(rename = "uring")]
    Uring,
    /// UDP with GRO, io_uring multishot `recvmsg` into provided buffers.
    #[serde(rename = "uring-gro")]
    UringGro,
    /// UDP through an AF_XDP socket (generic mode: the kernel copies each frame into the UMEM).
    #[serde(rename = "xdp")]
    Xdp,
    /// TCP with receive-buffer autotuning.
    #[serde(rename = "tcp")]
    Tcp,
}

impl Transport {
    /// Every transport, in the order tables list them.
    pub const ALL: [Transport; 6] = [
        Transport::Udp,
        Transport::UdpGro,
        Transport::Uring,
        Transport::UringGro,
        Transport::Xdp,
        Transport::Tcp,
    ];

    /// The short name used on command lines and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::UdpGro => "udp-gro",
            Transport::Uring => "uring",
            Transport::UringGro => "uring-gro",
            Transport::Xdp => "xdp",
            Transport::Tcp => "tcp",
        }
    }

    /// One line on what the transport is.
    pub fn describe(self) -> &'static str {
        match self {
            Transport::Udp => "UDP socket, recvmmsg batches, one datagram per message",
            Transport::UdpGro => "UDP socket with GRO, recvmmsg batches of super-datagrams",
            Transport::Uring => "UDP socket, io_uring multishot recvmsg into a provided-buffer ring",
            Transport::UringGro => {
                "UDP socket with GRO, io_uring multishot recvmsg into a provided-buffer ring"
            }
            Transport::Xdp => {
                "AF_XDP socket, generic (copy) mode, XDP program redirecting the streams' ports"
            }
            Transport::Tcp => "TCP with receive-buffer autotuning, read() per ready connection",
        }
    }

    /// Parses a name as [`name`](Self::name) gives it.
    pub fn parse(s: &str) -> Result<Transport, String> {
        Transport::ALL
            .into_iter()
            .find(|t| t.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = Transport::ALL.iter().map(|t| t.name()).collect();
                format!("unknown transport {s:?} (one of {})", names.join(", "))
            })
    }

    /// True for the datagram transports (everything but TCP).
    pub fn is_udp(self) -> bool {
        self != Transport::Tcp
    }

    /// True when the receiving sockets use UDP GRO.
    pub fn gro(self) -> bool {
        matches!(self, Transport::UdpGro | Transport::UringGro)
    }

    /// Whether this kernel and process can use the transport: Ok, or why not. Cheap (creates and drops a
    /// ring, an AF_XDP socket; the interface and the XDP program are checked when the path is opened).
    pub fn probe(self) -> Result<(), String> {
        match self {
            Transport::Udp | Transport::UdpGro | Transport::Tcp => Ok(()),
            Transport::Uring | Transport::UringGro => uring::probe(),
            Transport::Xdp => xdp::probe(),
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Counters of a receive path since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RxStats {
    /// Datagrams handed over (GRO segments counted one by one); for TCP, reads that returned data.
    pub datagrams: u64,
    /// Bytes handed over.
    pub bytes: u64,
    /// Messages the kernel delivered (a GRO super-datagram counts once; for TCP, reads).
    pub messages: u64,
    /// System calls that returned data (`recvmmsg`, `read`, `io_uring_enter`, `poll`/`sendto` kicks).
    pub syscalls: u64,
    /// Datagrams longer than the largest one expected (cut short or refused; not handed over).
    pub truncated: u64,
    /// Datagrams the kernel dropped on the sockets (SO_RXQ_OVFL).
    pub kernel_drops: u64,
    /// io_uring: multishot receives re-armed (after running out of provided buffers or an error).
    pub rearmed: u64,
}

/// An open receive path of any transport.
pub enum Rx {
    /// `udp` and `udp-gro`.
    Mmsg(Box<MmsgRx>),
    /// `uring` and `uring-gro`.
    Uring(Box<UringRx>),
    /// `xdp`.
    Xdp(Box<XdpRx>),
    /// `tcp`.
    Tcp(TcpRx),
}

impl Rx {
    /// Opens a UDP path of `transport` over `sockets` (bound, non-blocking, GRO already set as the
    /// transport needs it: see [`open_udp_sockets`]). `max_datagram` is the largest datagram expected;
    /// longer ones are counted as truncated.
    pub fn open_udp(transport: Transport, sockets: Vec<UdpSocket>, max_datagram: usize) -> io::Result<Rx> {
        match transport {
            Transport::Udp | Transport::UdpGro => Ok(Rx::Mmsg(Box::new(MmsgRx::new(
                sockets,
                max_datagram,
                transport.gro(),
            )?))),
            Transport::Uring | Transport::UringGro => Ok(Rx::Uring(Box::new(UringRx::new(
                sockets,
                max_datagram,
                transport.gro(),
            )?))),
            Transport::Xdp | Transport::Tcp => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{transport} is not opened over UDP sockets"),
            )),
        }
    }

    /// Waits at most `timeout` for data, then hands everything that is ready to `f(stream, bytes)`.
    /// Returns the number of datagrams (TCP: reads) handed over; 0 after a timeout.
    #[inline]
    pub fn poll<F: FnMut(usize, &[u8])>(&mut self, timeout: Duration, f: F) -> io::Result<usize> {
        match self {
            Rx::Mmsg(r) => r.poll(timeout, f),
            Rx::Uring(r) => r.poll(timeout, f),
            Rx::Xdp(r) => r.poll(timeout, f),
            Rx::Tcp(r) => r.poll(timeout, f),
        }
    }

    /// Counters since the path was opened.
    pub fn stats(&self) -> RxStats {
        match self {
            Rx::Mmsg(r) => r.stats(),
            Rx::Uring(r) => r.stats(),
            Rx::Xdp(r) => r.stats(),
            Rx::Tcp(r) => r.stats(),
        }
    }

    /// How the path was set up, for reports (e.g. the io_uring setup flags the kernel accepted).
    pub fn detail(&self) -> String {
        match self {
            Rx::Mmsg(r) => r.detail(),
            Rx::Uring(r) => r.detail(),
            Rx::Xdp(r) => r.detail(),
            Rx::Tcp(_) => "read() into a 256 KiB buffer".into(),
        }
    }

    /// TCP: every connection has been closed by its sender. Always false for UDP.
    pub fn finished(&self) -> bool {
        match self {
            Rx::Tcp(r) => r.all_closed(),
            _ => false,
        }
    }
}

/// Opens `n` UDP sockets on `ip` (ephemeral ports), non-blocking, with SO_RXQ_OVFL, a receive buffer of
/// `recv_buffer` bytes and GRO when `gro`. Errors name the step; GRO refused by the kernel is an error here
/// (a measurement of a GRO path without GRO would be mislabelled).
pub fn open_udp_sockets(
    ip: std::net::IpAddr,
    n: usize,
    recv_buffer: usize,
    gro: bool,
) -> io::Result<Vec<(UdpSocket, vlbiflow_udp::SocketReport)>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = vlbiflow_udp::UdpConfig::receiver(std::net::SocketAddr::new(ip, 0));
        c.recv_buffer = Some(recv_buffer);
        c.rxq_ovfl = true;
        c.gro = gro;
        c.nonblocking = true;
        let (s, r) =
            vlbiflow_udp::open_udp(&c).map_err(|e| io::Error::new(e.source.kind(), e.to_string()))?;
        if gro {
            if let vlbiflow_udp::Feature::Unsupported(errno) = r.gro {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("UDP GRO refused: {}", io::Error::from_raw_os_error(errno)),
                ));
            }
        }
        out.push((s, r));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_parse_and_serde() {
        for t in Transport::ALL {
            assert_eq!(Transport::parse(t.name()), Ok(t));
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", t.name()));
            assert_eq!(serde_json::from_str::<Transport>(&format!("\"{t}\"")).unwrap(), t);
        }
        let e = Transport::parse("rdma").unwrap_err();
        assert!(e.contains("rdma") && e.contains("uring-gro"), "{e}");
    }
}
