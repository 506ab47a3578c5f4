//! Opening UDP sockets for the data plane: bind or connect, size the kernel buffers (forcing past the
//! sysctl limits when privileged), and switch on GRO and the drop counter, reporting what was granted.

use std::fmt;
use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::net::sockopt;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::sys;

/// How to open a UDP socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpConfig {
    /// Local address to bind (port 0 picks a free port; the unspecified address listens on all interfaces).
    pub bind: SocketAddr,
    /// Destination to `connect` to, making this a sender socket that needs no per-datagram address.
    pub connect: Option<SocketAddr>,
    /// Receive buffer to request, in bytes (the value passed to `setsockopt`; the kernel doubles it).
    pub recv_buffer: Option<usize>,
    /// Send buffer to request, in bytes (the value passed to `setsockopt`; the kernel doubles it).
    pub send_buffer: Option<usize>,
    /// Set SO_REUSEPORT so several sockets (threads) can share one port.
    pub reuse_port: bool,
    /// Enable UDP generic receive offload: the kernel may deliver several equal-size datagrams of one
    /// flow as one super-datagram plus its segment size. Receive buffers must then hold 64 KiB, so
    /// leave it off when receiving straight into frame-sized slots.
    pub gro: bool,
    /// Enable SO_RXQ_OVFL: every received message carries the socket's cumulative kernel drop count.
    pub rxq_ovfl: bool,
    /// Enable SO_TIMESTAMPNS: every received message carries the time the kernel received it
    /// (CLOCK_REALTIME, ns; see [`RecvMeta::timestamp_ns`](crate::RecvMeta::timestamp_ns)), so
    /// inter-arrival times stay right however late the application reads a batch.
    pub timestamps: bool,
    /// Put the socket in non-blocking mode.
    pub nonblocking: bool,
    /// SO_RCVTIMEO for blocking reads (the batch receiver uses poll with its own timeout instead).
    pub read_timeout: Option<Duration>,
    /// SO_SNDTIMEO for blocking sends, so a full send buffer cannot block forever.
    pub write_timeout: Option<Duration>,
}

impl UdpConfig {
    /// A receiving socket bound to `bind`, blocking, with no options set.
    pub fn receiver(bind: SocketAddr) -> Self {
        UdpConfig {
            bind,
            connect: None,
            recv_buffer: None,
            send_buffer: None,
            reuse_port: false,
            gro: false,
            rxq_ovfl: false,
            timestamps: false,
            nonblocking: false,
            read_timeout: None,
            write_timeout: None,
        }
    }

    /// A sending socket connected to `dest`, bound to an ephemeral port on the unspecified address of
    /// the same family, with a 1 s send timeout.
    pub fn sender(dest: SocketAddr) -> Self {
        let any = match dest.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        UdpConfig {
            connect: Some(dest),
            write_timeout: Some(Duration::from_secs(1)),
            ..UdpConfig::receiver(SocketAddr::new(any, 0))
        }
    }
}

/// Error opening or configuring a socket: names the address and the step that failed.
#[derive(Debug, thiserror::Error)]
#[error("UDP socket {addr}: {step} failed: {source}")]
pub struct SocketError {
    /// The address being bound or connected.
    pub addr: SocketAddr,
    /// The step that failed, e.g. "bind" or "setsockopt(SO_RCVBUF)".
    pub step: &'static str,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// Which kernel buffer a [`BufferReport`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// SO_RCVBUF, limited by `net.core.rmem_max`.
    Receive,
    /// SO_SNDBUF, limited by `net.core.wmem_max`.
    Send,
}

impl BufferKind {
    /// The sysctl that caps unprivileged requests for this buffer.
    pub fn sysctl(self) -> &'static str {
        match self {
            BufferKind::Receive => "net.core.rmem_max",
            BufferKind::Send => "net.core.wmem_max",
        }
    }
}

/// What the kernel granted for a requested socket buffer size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferReport {
    /// Which buffer.
    pub kind: BufferKind,
    /// Bytes requested (the `setsockopt` argument).
    pub requested: usize,
    /// Bytes the kernel reports via `getsockopt`: it doubles the request to cover bookkeeping overhead,
    /// so an uncapped request reads back as `2 * requested`.
    pub granted: usize,
    /// True when the privileged *FORCE option was used (bypassing the sysctl cap).
    pub forced: bool,
    /// True when the kernel granted less than requested (the sysctl cap applied).
    pub capped: bool,
    /// When capped: the command that lifts the cap.
    pub hint: Option<String>,
}

impl BufferReport {
    /// Judges a grant: capped when the kernel reports less than the doubled request, with a hint naming
    /// the sysctl to raise and the value to raise it to.
    pub fn new(kind: BufferKind, requested: usize, granted: usize, forced: bool) -> Self {
        let capped = granted < requested.saturating_mul(2).min(i32::MAX as usize - 1);
        let hint = capped.then(|| {
            format!(
                "kernel granted {granted} B for {requested} B requested; run `sysctl -w {}={requested}` \
                 (or give the process CAP_NET_ADMIN so the size can be forced)",
                kind.sysctl()
            )
        });
        BufferReport {
            kind,
            requested,
            granted,
            forced,
            capped,
            hint,
        }
    }
}

impl fmt::Display for BufferReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.kind {
            BufferKind::Receive => "receive",
            BufferKind::Send => "send",
        };
        write!(
            f,
            "{name} buffer: requested {} B, kernel reports {} B",
            self.requested, self.granted
        )?;
        if self.forced {
            write!(f, " (forced)")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; capped: {hint}")?;
        }
        Ok(())
    }
}

/// Whether an optional socket feature is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Not asked for.
    NotRequested,
    /// Asked for and enabled.
    Enabled,
    /// Asked for but the kernel refused; the errno is kept.
    Unsupported(i32),
}

impl Feature {
    /// True when enabled.
    pub fn is_enabled(self) -> bool {
        self == Feature::Enabled
    }
}

/// What [`open_udp`] achieved: buffer sizes granted and optional features enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketReport {
    /// The bound local address (with the real port when port 0 was requested).
    pub local: SocketAddr,
    /// Receive-buffer outcome, when one was requested.
    pub recv_buffer: Option<BufferReport>,
    /// Send-buffer outcome, when one was requested.
    pub send_buffer: Option<BufferReport>,
    /// UDP_GRO status.
    pub gro: Feature,
    /// SO_RXQ_OVFL status.
    pub rxq_ovfl: Feature,
    /// SO_TIMESTAMPNS status.
    pub timestamps: Feature,
}

impl SocketReport {
    /// Human-readable warnings: capped buffers (with the sysctl to raise) and refused features.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for b in [&self.recv_buffer, &self.send_buffer].into_iter().flatten() {
            if b.capped {
                out.push(b.to_string());
            }
        }
        if let Feature::Unsupported(e) = self.gro {
            out.push(format!(
                "UDP_GRO not supported: {}",
                io::Error::from_raw_os_error(e)
            ));
        }
        if let Feature::Unsupported(e) = self.rxq_ovfl {
            out.push(format!(
                "SO_RXQ_OVFL not supported: {}",
                io::Error::from_raw_os_error(e)
            ));
        }
        if let Feature::Unsupported(e) = self.timestamps {
            out.push(format!(
                "SO_TIMESTAMPNS not supported (receive times are taken per batch instead): {}",
                io::Error::from_raw_os_error(e)
            ));
        }
        out
    }
}

/// Opens a UDP socket as `config` says. Buffer caps and refused GRO/SO_RXQ_OVFL are reported, not
/// errors; failing to create, bind or connect is an error naming the step.
pub fn open_udp(config: &UdpConfig) -> Result<(UdpSocket, SocketReport), SocketError> {
    let err_at = |step: &'static str| {
        let addr = config.bind;
        move |source: io::Error| SocketError { addr, step, source }
    };
    let domain = Domain::for_address(config.connect.unwrap_or(config.bind));
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(err_at("socket"))?;
    if config.reuse_port {
        sock.set_reuse_port(true)
            .map_err(err_at("setsockopt(SO_REUSEPORT)"))?;
    }
    let fd = sock.as_fd();
    // Buffers are sized before bind so no datagram arrives into a default-sized queue.
    let recv_buffer = match config.recv_buffer {
        Some(n) => Some(size_buffer(fd, BufferKind::Receive, n).map_err(err_at("setsockopt(SO_RCVBUF)"))?),
        None => None,
    };
    let send_buffer = match config.send_buffer {
        Some(n) => Some(size_buffer(fd, BufferKind::Send, n).map_err(err_at("setsockopt(SO_SNDBUF)"))?),
        None => None,
    };
    let gro = if config.gro {
        try_enable(fd, sys::SOL_UDP, sys::UDP_GRO)
    } else {
        Feature::NotRequested
    };
    let rxq_ovfl = if config.rxq_ovfl {
        try_enable(fd, libc::SOL_SOCKET, sys::SO_RXQ_OVFL)
    } else {
        Feature::NotRequested
    };
    let timestamps = if config.timestamps {
        match try_enable(fd, libc::SOL_SOCKET, sys::SO_TIMESTAMPNS_NEW) {
            // Kernels before 5.1 only know the old option, whose timespec has the new layout on
            // 64-bit targets.
            Feature::Unsupported(_) if cfg!(target_pointer_width = "64") => {
                try_enable(fd, libc::SOL_SOCKET, sys::SO_TIMESTAMPNS_OLD)
            }
            f => f,
        }
    } else {
        Feature::NotRequested
    };
    sock.set_nonblocking(config.nonblocking)
        .map_err(err_at("set O_NONBLOCK"))?;
    sock.set_read_timeout(config.read_timeout)
        .map_err(err_at("setsockopt(SO_RCVTIMEO)"))?;
    sock.set_write_timeout(config.write_timeout)
        .map_err(err_at("setsockopt(SO_SNDTIMEO)"))?;
    sock.bind(&config.bind.into()).map_err(err_at("bind"))?;
    if let Some(dest) = config.connect {
        sock.connect(&dest.into()).map_err(|source| SocketError {
            addr: dest,
            step: "connect",
            source,
        })?;
    }
    let local = sock
        .local_addr()
        .map_err(err_at("getsockname"))?
        .as_socket()
        .ok_or_else(|| err_at("getsockname")(io::Error::other("not an IP socket address")))?;
    let report = SocketReport {
        local,
        recv_buffer,
        send_buffer,
        gro,
        rxq_ovfl,
        timestamps,
    };
    Ok((sock.into(), report))
}

/// Requests `requested` bytes for one buffer: the privileged *FORCE option first, the capped option
/// when that is not permitted; then reads back what the kernel granted.
fn size_buffer(fd: BorrowedFd<'_>, kind: BufferKind, requested: usize) -> io::Result<BufferReport> {
    // The kernel takes an int and doubles it; larger requests are clamped to what it can represent.
    let value = requested.min(i32::MAX as usize / 2);
    let (forced, granted) = match kind {
        BufferKind::Receive => {
            let forced = sockopt::set_socket_recv_buffer_size_force(fd, value).is_ok();
            if !forced {
                sockopt::set_socket_recv_buffer_size(fd, value)?;
            }
            (forced, sockopt::socket_recv_buffer_size(fd)?)
        }
        BufferKind::Send => {
            let forced = sockopt::set_socket_send_buffer_size_force(fd, value).is_ok();
            if !forced {
                sockopt::set_socket_send_buffer_size(fd, value)?;
            }
            (forced, sockopt::socket_send_buffer_size(fd)?)
        }
    };
    Ok(BufferReport::new(kind, requested, granted, forced))
}

fn try_enable(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> Feature {
    match set_int(fd, level, name, 1) {
        Ok(()) => Feature::Enabled,
        Err(e) => Feature::Unsupported(e.raw_os_error().unwrap_or(0)),
    }
}

/// Sets an int-valued socket option. Only for the options rustix has no wrapper for (UDP_GRO,
/// SO_RXQ_OVFL, SO_TIMESTAMPNS).
fn set_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    set_opt(fd, level, name, &value)
}

/// Sets a socket option whose value is the plain C struct or integer `value` (the kernel copies it).
pub(crate) fn set_opt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `fd` is a borrowed, open descriptor; the option value is a pointer to a live `T` with its
    // exact size, which the kernel only reads (and copies) during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value as *const T as *const libc::c_void,
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads the kernel's current receive-buffer size (as `getsockopt(SO_RCVBUF)` reports it).
pub fn recv_buffer_size(sock: &impl AsFd) -> io::Result<usize> {
    Ok(sockopt::socket_recv_buffer_size(sock)?)
}

/// Reads the kernel's current send-buffer size (as `getsockopt(SO_SNDBUF)` reports it).
pub fn send_buffer_size(sock: &impl AsFd) -> io::Result<usize> {
    Ok(sockopt::socket_send_buffer_size(sock)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_grant_names_the_sysctl() {
        let r = BufferReport::new(BufferKind::Receive, 64 << 20, 8 << 20, false);
        assert!(r.capped);
        let hint = r.hint.as_deref().unwrap();
        assert!(hint.contains("net.core.rmem_max=67108864"), "{hint}");
        let r = BufferReport::new(BufferKind::Send, 1 << 20, 2 << 20, false);
        assert!(!r.capped && r.hint.is_none());
        let r = BufferReport::new(BufferKind::Send, 64 << 20, 1 << 20, false);
        assert!(r.to_string().contains("net.core.wmem_max"), "{r}");
    }

    #[test]
    fn sender_config_binds_same_family() {
        let c = UdpConfig::sender("[::1]:5000".parse().unwrap());
        assert!(c.bind.is_ipv6() && c.bind.port() == 0);
        let c = UdpConfig::sender("127.0.0.1:5000".parse().unwrap());
        assert!(c.bind.is_ipv4());
    }
}
