//! `recvmmsg` straight into block buffers, with the packet sequence number split off by a second iovec so
//! frames land in place without a copy.
//!
//! (`vlbiflow-udp`'s `BatchReceiver` takes one buffer per message; the recorder needs two iovecs per message,
//! the real datagram length through `MSG_TRUNC`, and one receiver for many sockets, hence this small wrapper.)

use std::io;
use std::os::fd::RawFd;
use std::ptr;

/// SO_RXQ_OVFL (not exported by every libc version).
pub const SO_RXQ_OVFL: libc::c_int = 40;

type CmsgSpace = [u64; 8];

/// Result of one received message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// Real datagram length (may exceed the space given: then it was cut and must be rejected).
    pub len: usize,
    /// The PSN prefix, when receiving with one.
    pub psn: u64,
}

/// Preallocated headers for up to `capacity` messages per call.
pub struct BatchRecv {
    capacity: usize,
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<[libc::iovec; 2]>,
    psn: Vec<[u8; 8]>,
    cmsgs: Vec<CmsgSpace>,
    out: Vec<Received>,
}

// SAFETY: the raw pointers in `hdrs`/`iovs` point into this value's own heap storage (stable across moves)
// or into caller buffers only for the duration of a `recv` call that borrows them.
unsafe impl Send for BatchRecv {}

impl BatchRecv {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, 1024);
        // SAFETY: all-zero is a valid value for these plain C structs.
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: ptr::null_mut(),
            iov_len: 0,
        };
        BatchRecv {
            capacity,
            hdrs: vec![zero_hdr; capacity],
            iovs: vec![[zero_iov; 2]; capacity],
            psn: vec![[0; 8]; capacity],
            cmsgs: vec![[0; 8]; capacity],
            out: vec![Received::default(); capacity],
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Receives without waiting up to `frames.len() / slot` (at most capacity) datagrams; datagram `i` lands
    /// with its first 8 bytes in a PSN scratch (if `psn`) and the rest at `frames[i * slot..][..slot]`.
    /// Returns how many messages were received (0 when nothing was queued; see [`results`](Self::results))
    /// and the socket's latest SO_RXQ_OVFL
    /// drop counter if any message carried it.
    pub fn recv(
        &mut self,
        fd: RawFd,
        frames: &mut [u8],
        slot: usize,
        psn: bool,
    ) -> io::Result<(usize, Option<u32>)> {
        let n = (frames.len() / slot.max(1)).min(self.capacity);
        if n == 0 {
            return Ok((0, None));
        }
        let base = frames.as_mut_ptr();
        for i in 0..n {
            let iov = &mut self.iovs[i];
            // SAFETY: i * slot + slot <= frames.len(), so the slot is inside the borrowed buffer.
            let frame = unsafe { base.add(i * slot) } as *mut libc::c_void;
            let iovlen = if psn {
                iov[0] = libc::iovec {
                    iov_base: self.psn[i].as_mut_ptr() as *mut libc::c_void,
                    iov_len: 8,
                };
                iov[1] = libc::iovec {
                    iov_base: frame,
                    iov_len: slot,
                };
                2
            } else {
                iov[0] = libc::iovec {
                    iov_base: frame,
                    iov_len: slot,
                };
                1
            };
            let entry = &mut self.hdrs[i];
            entry.msg_len = 0;
            let hdr = &mut entry.msg_hdr;
            hdr.msg_name = ptr::null_mut();
            hdr.msg_namelen = 0;
            hdr.msg_iov = iov.as_mut_ptr();
            hdr.msg_iovlen = iovlen;
            hdr.msg_control = self.cmsgs[i].as_mut_ptr() as *mut libc::c_void;
            hdr.msg_controllen = std::mem::size_of::<CmsgSpace>() as _;
            hdr.msg_flags = 0;
        }
        let got = loop {
            // SAFETY: entries 0..n point at live iovecs, PSN scratch, control space and the caller's buffer.
            // MSG_TRUNC makes each msg_len the real datagram length, so oversized datagrams are recognised.
            let rc = unsafe {
                libc::recvmmsg(
                    fd,
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                    ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok((0, None)),
                _ => return Err(err),
            }
        };
        let mut drops = None;
        for i in 0..got {
            let entry = &self.hdrs[i];
            self.out[i] = Received {
                len: entry.msg_len as usize,
                psn: u64::from_ne_bytes(self.psn[i]),
            };
            let hdr = &entry.msg_hdr;
            // SAFETY: the kernel filled this header's control buffer; the CMSG macros stay within controllen.
            unsafe {
                let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
                while !cmsg.is_null() {
                    let c = &*cmsg;
                    if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == SO_RXQ_OVFL {
                        drops = Some(ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const u32));
                    }
                    cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
                }
            }
        }
        Ok((got, drops))
    }

    /// The messages of the last `recv` (first `n` as it returned).
    pub fn results(&self) -> &[Received] {
        &self.out
    }
}

/// Turns SO_RXQ_OVFL's wrapping 32-bit cumulative counter into a running total.
#[derive(Debug, Clone, Copy, Default)]
pub struct DropCounter {
    last: u32,
    total: u64,
}

impl DropCounter {
    pub fn update(&mut self, counter: u32) -> u64 {
        let delta = counter.wrapping_sub(self.last);
        if delta < u32::MAX / 2 {
            self.total += u64::from(delta);
            self.last = counter;
        }
        self.total
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

/// What the kernel granted for a socket receive buffer request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketBuffer {
    pub requested: usize,
    /// What `getsockopt(SO_RCVBUF)` reports (the kernel doubles requests for bookkeeping).
    pub granted: usize,
    /// SO_RCVBUFFORCE worked (privileged), so the sysctl cap did not apply.
    pub forced: bool,
}

impl SocketBuffer {
    /// Less than requested was granted.
    pub fn capped(&self) -> bool {
        self.granted < self.requested
    }
}

/// Opens a non-blocking UDP socket bound to `addr` with a large receive buffer and the drop counter.
pub fn open_socket(
    addr: std::net::SocketAddr,
    recv_buffer: usize,
) -> io::Result<(std::net::UdpSocket, SocketBuffer)> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::os::fd::AsRawFd;
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let fd = sock.as_raw_fd();
    let req = recv_buffer.min(i32::MAX as usize) as libc::c_int;
    let set = |opt: libc::c_int| {
        // SAFETY: passing a valid c_int option value of the right size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &req as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    };
    let forced = set(libc::SO_RCVBUFFORCE);
    if !forced {
        set(libc::SO_RCVBUF);
    }
    let one: libc::c_int = 1;
    // SAFETY: as above. Failure only loses the kernel drop counter, which status then reports as zero.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_RXQ_OVFL,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    let granted = sock.recv_buffer_size()?;
    // The kernel reports double what it accepted; compare like with like.
    let buffer = SocketBuffer {
        requested: recv_buffer,
        granted: granted / 2,
        forced,
    };
    Ok((sock.into(), buffer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn splits_psn_and_reports_real_length() {
        let (rx, buf) = open_socket("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        assert!(buf.granted > 0);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let mut d = 7u64.to_ne_bytes().to_vec();
        d.extend_from_slice(&[1u8; 16]);
        tx.send_to(&d, to).unwrap();
        let mut big = 8u64.to_ne_bytes().to_vec();
        big.extend_from_slice(&[2u8; 40]);
        tx.send_to(&big, to).unwrap();
        let mut r = BatchRecv::new(4);
        let mut frames = vec![0u8; 4 * 16];
        let mut got = Vec::new();
        // Datagrams on loopback are queued by the time send_to returns.
        let (n, _) = r.recv(rx.as_raw_fd(), &mut frames, 16, true).unwrap();
        got.extend_from_slice(&r.results()[..n]);
        assert_eq!(
            got,
            vec![Received { len: 24, psn: 7 }, Received { len: 48, psn: 8 }]
        );
        assert_eq!(&frames[..16], &[1u8; 16]);
        assert_eq!(&frames[16..32], &[2u8; 16]);
        let (n, _) = r.recv(rx.as_raw_fd(), &mut frames, 16, true).unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn drop_counter_wraps() {
        let mut d = DropCounter::default();
        assert_eq!(d.update(5), 5);
        assert_eq!(d.update(0x7000_0000), 0x7000_0000);
        assert_eq!(d.update(0xE000_0000), 0xE000_0000);
        // Wraps past 2^32.
        assert_eq!(d.update(3), (1u64 << 32) + 3);
        // A counter going backwards (garbage) is ignored.
        assert_eq!(d.update(2), (1u64 << 32) + 3);
    }
}
