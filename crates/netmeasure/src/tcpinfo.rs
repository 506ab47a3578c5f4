//! TCP socket state via `getsockopt`: TCP_INFO, TCP_CONGESTION and the buffer sizes.

use serde::{Deserialize, Serialize};
use std::mem::{self, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd};

use rustix::net::sockopt;

/// A TCP socket's state at the end of a test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpSockInfo {
    /// Congestion-control algorithm (TCP_CONGESTION).
    pub congestion: String,
    /// SO_SNDBUF, bytes.
    pub send_buffer: usize,
    /// SO_RCVBUF, bytes.
    pub recv_buffer: usize,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Sender MSS, bytes.
    pub snd_mss: u32,
    /// Path MTU, bytes.
    pub pmtu: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// Receiver's advertised space, bytes.
    pub rcv_space: u32,
}

/// Reads what the kernel knows about a TCP socket; fields it refuses stay zero/empty.
pub fn tcp_sock_info(sock: &(impl AsFd + AsRawFd)) -> TcpSockInfo {
    let mut out = TcpSockInfo::default();
    if let Some(info) = tcp_info(sock) {
        out.rtt_us = info.tcpi_rtt;
        out.rttvar_us = info.tcpi_rttvar;
        out.snd_cwnd = info.tcpi_snd_cwnd;
        out.snd_mss = info.tcpi_snd_mss;
        out.pmtu = info.tcpi_pmtu;
        out.total_retrans = info.tcpi_total_retrans;
        out.rcv_space = info.tcpi_rcv_space;
    }
    out.congestion = sockopt::tcp_congestion(sock).unwrap_or_default();
    out.send_buffer = sockopt::socket_send_buffer_size(sock).unwrap_or(0);
    out.recv_buffer = sockopt::socket_recv_buffer_size(sock).unwrap_or(0);
    out
}

/// TCP_INFO, which rustix has no wrapper for.
fn tcp_info(sock: &impl AsRawFd) -> Option<libc::tcp_info> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is borrowed from a live socket; the kernel writes at most `len` bytes into
    // `info`, which has room for exactly that many.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    // SAFETY: tcp_info is integers only, so the zeroed start is a valid value whatever part of it an
    // older kernel (shorter struct) left unwritten.
    (rc == 0).then(|| unsafe { info.assume_init() })
}

/// Requests a socket buffer size (privileged FORCE first, then the capped option); returns what the
/// kernel granted.
pub fn set_buffer(sock: &impl AsFd, recv: bool, bytes: usize) -> usize {
    let v = bytes.min(i32::MAX as usize / 2);
    if recv {
        if sockopt::set_socket_recv_buffer_size_force(sock, v).is_err() {
            let _ = sockopt::set_socket_recv_buffer_size(sock, v);
        }
        sockopt::socket_recv_buffer_size(sock).unwrap_or(0)
    } else {
        if sockopt::set_socket_send_buffer_size_force(sock, v).is_err() {
            let _ = sockopt::set_socket_send_buffer_size(sock, v);
        }
        sockopt::socket_send_buffer_size(sock).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn reads_a_live_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let granted = set_buffer(&c, false, 1 << 20);
        assert!(granted > 0);
        let i = tcp_sock_info(&c);
        assert!(!i.congestion.is_empty());
        assert!(i.snd_mss > 0);
        assert_eq!(i.send_buffer, granted);
    }
}
