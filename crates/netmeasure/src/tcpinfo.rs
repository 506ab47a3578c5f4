//! TCP socket state via `getsockopt`: TCP_INFO, TCP_CONGESTION and the buffer sizes.

use serde::{Deserialize, Serialize};
use std::mem;
use std::os::fd::AsRawFd;

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
pub fn tcp_sock_info(sock: &impl AsRawFd) -> TcpSockInfo {
    let fd = sock.as_raw_fd();
    let mut out = TcpSockInfo::default();
    // SAFETY: tcp_info is plain old data; getsockopt writes at most `len` bytes into it.
    unsafe {
        let mut info: libc::tcp_info = mem::zeroed();
        let mut len = mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        if libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut _ as *mut libc::c_void,
            &mut len,
        ) == 0
        {
            out.rtt_us = info.tcpi_rtt;
            out.rttvar_us = info.tcpi_rttvar;
            out.snd_cwnd = info.tcpi_snd_cwnd;
            out.snd_mss = info.tcpi_snd_mss;
            out.pmtu = info.tcpi_pmtu;
            out.total_retrans = info.tcpi_total_retrans;
            out.rcv_space = info.tcpi_rcv_space;
        }
        let mut name = [0u8; 32];
        let mut len = name.len() as libc::socklen_t;
        if libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        ) == 0
        {
            let end = name[..len as usize]
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(len as usize);
            out.congestion = String::from_utf8_lossy(&name[..end]).into_owned();
        }
    }
    out.send_buffer = get_int(fd, libc::SO_SNDBUF);
    out.recv_buffer = get_int(fd, libc::SO_RCVBUF);
    out
}

fn get_int(fd: i32, name: libc::c_int) -> usize {
    let mut v: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: pointer to a live c_int and its size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        v.max(0) as usize
    } else {
        0
    }
}

/// Requests a socket buffer size (privileged FORCE first, then the capped option); returns what the
/// kernel granted.
pub fn set_buffer(sock: &impl AsRawFd, recv: bool, bytes: usize) -> usize {
    let fd = sock.as_raw_fd();
    let (force, plain) = if recv {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    let set = |name| {
        // SAFETY: pointer to a live c_int and its size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                &v as *const _ as *const libc::c_void,
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(force) != 0 {
        set(plain);
    }
    get_int(fd, plain)
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
