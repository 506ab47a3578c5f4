//! Batched UDP I/O for the vlbiflow data plane (Linux only).
//!
//! - [`socket`]: open sockets with forced buffer sizes, GRO and the kernel drop counter, reporting what
//!   the kernel granted and which sysctl to raise otherwise.
//! - [`send`]: `sendmmsg` batches of up-to-two-part messages and UDP GSO super-datagrams.
//! - [`recv`]: `recvmmsg` into caller-provided buffers, with per-message length, truncation, GRO segment
//!   size and source, and the cumulative kernel drop count.
//! - [`pace`]: absolute-schedule rate pacing and a per-second rate meter.
//! - [`epoll`]: a readiness set over several sockets, reporting each ready one by its index.
//! - [`poll`]: waiting for one descriptor with a timeout, and the timespec such waits take.
//! - [`net`]: `HOST:PORT` text to socket addresses.
//! - [`errqueue`]: ICMP errors (time exceeded, unreachable) from a socket's error queue, with the
//!   sender, the kernel's receive time and the quoted datagram.
//! - [`snmp`]: the kernel's UDP counters from `/proc/net/snmp`.
//!
//! Everything allocates at construction only; the send and receive paths do not allocate.

#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(not(target_os = "linux"))]
compile_error!("vlbiflow-udp uses Linux-only socket features (sendmmsg, recvmmsg, UDP GSO/GRO)");

pub mod epoll;
pub mod errqueue;
pub mod net;
pub mod pace;
pub mod poll;
pub mod recv;
pub mod send;
pub mod snmp;
pub mod socket;
pub mod steer;
mod sys;

pub use epoll::Epoll;
pub use pace::{InvalidRate, Pacer, RateMeter, Wait, WindowStats};
pub use recv::{
    realtime_ns, BatchReceiver, DropCounter, RecvBatch, RecvMeta, RecvStats, TimestampKeeper,
    DEFAULT_RECV_PARTS, MAX_RECV_PARTS,
};
pub use send::{
    Batch, BatchSender, GsoError, RetryPolicy, SendError, SendStats, Sent, GSO_MAX_SEGMENTS, MAX_PARTS,
    MAX_PARTS_LIMIT,
};
pub use snmp::{SnmpError, UdpCounters};
pub use socket::{open_udp, BufferKind, BufferReport, Feature, SocketError, SocketReport, UdpConfig};
