//! ICMP errors for a UDP socket through its error queue (`IP_RECVERR`, `recvmsg(MSG_ERRQUEUE)`):
//! which router or host answered (time exceeded, unreachable), when the kernel received the ICMP
//! message (with `SO_TIMESTAMPNS` on the socket) and the start of the datagram it quotes. No
//! privileges needed: a traceroute of the socket's own datagrams, TTL-limited with `IP_TTL`.
//!
//! Only IPv4.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::ptr;
use std::time::Duration;

use crate::sys;

/// `setsockopt(SOL_IP, IP_RECVERR)` and the cmsg type of an error.
const IP_RECVERR: libc::c_int = 11;
/// `sock_extended_err.ee_origin` for an ICMP (v4) message.
pub const SO_EE_ORIGIN_ICMP: u8 = 2;
/// ICMP type: destination unreachable.
pub const ICMP_DEST_UNREACH: u8 = 3;
/// ICMP type: time exceeded.
pub const ICMP_TIME_EXCEEDED: u8 = 11;

/// One ICMP error read from the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpError {
    /// Where it came from (`SO_EE_ORIGIN_*`; [`SO_EE_ORIGIN_ICMP`] for ICMP).
    pub origin: u8,
    /// ICMP type ([`ICMP_TIME_EXCEEDED`], [`ICMP_DEST_UNREACH`], ...).
    pub icmp_type: u8,
    /// ICMP code.
    pub icmp_code: u8,
    /// The router or host that sent it.
    pub offender: Option<Ipv4Addr>,
    /// The kernel's receive time of the ICMP message, CLOCK_REALTIME ns (needs SO_TIMESTAMPNS).
    pub timestamp_ns: Option<u64>,
    /// Bytes of the quoted datagram's payload written into the buffer.
    pub len: usize,
}

/// Asks the kernel to queue ICMP errors for `sock` (`IP_RECVERR`).
pub fn enable_recverr(sock: &UdpSocket) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket descriptor and a pointer to an int of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_IP,
            IP_RECVERR,
            &one as *const libc::c_int as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads the next queued ICMP error into `buf` (the start of the quoted datagram's payload), waiting
/// at most `timeout`; None when none came.
pub fn recv_icmp_error(sock: &UdpSocket, buf: &mut [u8], timeout: Duration) -> io::Result<Option<IcmpError>> {
    match try_recv(sock, buf)? {
        Some(e) => return Ok(Some(e)),
        None if timeout.is_zero() => return Ok(None),
        None => {}
    }
    // An error queue that is not empty shows as POLLERR (always reported, whatever is asked).
    if !sys::poll_fd(sock.as_fd(), sys::PollFlags::empty(), timeout)? {
        return Ok(None);
    }
    try_recv(sock, buf)
}

fn try_recv(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<Option<IcmpError>> {
    let mut name = sys::zeroed::<libc::sockaddr_storage>();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // Room for the extended error with its offender address and a timestamp.
    let mut cbuf = [0u64; 32];
    // SAFETY: msghdr is integers and raw pointers; all-zero is valid.
    let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
    hdr.msg_name = &mut name as *mut libc::sockaddr_storage as *mut libc::c_void;
    hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    hdr.msg_controllen = mem::size_of_val(&cbuf) as _;
    // SAFETY: hdr points at live buffers of the lengths it states, all outliving the call.
    let n = unsafe {
        libc::recvmsg(
            sock.as_raw_fd(),
            &mut hdr,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    let mut out = IcmpError {
        origin: 0,
        icmp_type: 0,
        icmp_code: 0,
        offender: None,
        timestamp_ns: None,
        len: (n as usize).min(buf.len()),
    };
    // SAFETY: the kernel filled msg_control up to msg_controllen; CMSG_* walk only within it, and
    // each read checks the cmsg's stated length first.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let data = libc::CMSG_DATA(cmsg);
            let payload = (c.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            if c.cmsg_level == libc::SOL_IP
                && c.cmsg_type == IP_RECVERR
                && payload >= mem::size_of::<libc::sock_extended_err>()
            {
                let ee = ptr::read_unaligned(data as *const libc::sock_extended_err);
                out.origin = ee.ee_origin;
                out.icmp_type = ee.ee_type;
                out.icmp_code = ee.ee_code;
                // SO_EE_OFFENDER: the address right after the struct.
                let off = mem::size_of::<libc::sock_extended_err>();
                if payload >= off + mem::size_of::<libc::sockaddr_in>() {
                    let sin = ptr::read_unaligned(data.add(off) as *const libc::sockaddr_in);
                    if sin.sin_family as libc::c_int == libc::AF_INET {
                        out.offender = Some(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()));
                    }
                }
            } else if let Some(t) = sys::cmsg_timestamp_ns(c.cmsg_level, c.cmsg_type, data, payload) {
                out.timestamp_ns = Some(t);
            }
            cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_unreachable_on_loopback_is_read_with_its_quote_and_time() {
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let (sock, _) = crate::open_udp(&crate::UdpConfig {
            timestamps: true,
            ..crate::UdpConfig::sender(format!("127.0.0.1:{port}").parse().unwrap())
        })
        .unwrap();
        enable_recverr(&sock).unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(recv_icmp_error(&sock, &mut buf, Duration::ZERO).unwrap(), None);
        sock.send(b"probe-0123456789").unwrap();
        let e = recv_icmp_error(&sock, &mut buf, Duration::from_secs(2))
            .unwrap()
            .expect("port unreachable");
        assert_eq!(
            (e.origin, e.icmp_type, e.icmp_code),
            (SO_EE_ORIGIN_ICMP, ICMP_DEST_UNREACH, 3)
        );
        assert_eq!(e.offender, Some(Ipv4Addr::LOCALHOST));
        assert_eq!(&buf[..e.len], b"probe-0123456789");
        assert!(e.timestamp_ns.is_some(), "{e:?}");
    }
}
