//! Thin helpers shared by the socket, send and receive modules: option constants (defined here so we do
//! not depend on which libc target module happens to export them), a fixed heap array addressed only
//! through raw pointers (so pointers handed to the kernel stay valid however the owner is moved), `poll`
//! with a timeout, socket-address conversion, and all-zero values of the C structs handed to the kernel.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::BorrowedFd;
use std::time::Duration;

pub(crate) const SOL_UDP: libc::c_int = 17;
/// `setsockopt`/cmsg: segment size for UDP generic segmentation offload (send side).
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `setsockopt`/cmsg: enable UDP generic receive offload; the cmsg carries the segment size.
pub(crate) const UDP_GRO: libc::c_int = 104;
/// Socket option and cmsg type carrying the cumulative count of datagrams dropped for this socket.
pub(crate) const SO_RXQ_OVFL: libc::c_int = 40;
/// Attaches a classic BPF program that picks the socket of a reuseport group (Linux 4.5).
pub(crate) const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Socket option and cmsg type carrying the kernel's receive time of each datagram as a 64-bit
/// `{ seconds, nanoseconds }` pair on CLOCK_REALTIME (`SO_TIMESTAMPNS_NEW`, Linux 5.1 and later).
pub(crate) const SO_TIMESTAMPNS_NEW: libc::c_int = 64;
/// The older form of the same option; its cmsg carries a `struct timespec`, which has the same layout as
/// the new form on 64-bit targets (the only ones where it is used as a fallback).
pub(crate) const SO_TIMESTAMPNS_OLD: libc::c_int = 35;

/// Control-message storage for one message: room for two 4-byte cmsgs (GRO segment size and the drop
/// counter) and one 16-byte receive timestamp with their headers (24 + 24 + 32 bytes on 64-bit
/// targets), 8-byte aligned as `cmsghdr` requires.
pub(crate) type CmsgSpace = [u64; 12];

/// A fixed-length heap array that is only ever accessed through the raw pointer taken at allocation, so
/// pointers into it that were given to `msghdr`/`mmsghdr` never get invalidated by later reborrows.
pub(crate) struct RawArray<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> RawArray<T> {
    /// Allocates `len` elements each set to `init()`.
    pub(crate) fn new(len: usize, mut init: impl FnMut() -> T) -> Self {
        let boxed: Box<[T]> = (0..len).map(|_| init()).collect();
        let len = boxed.len();
        let ptr = Box::into_raw(boxed) as *mut T;
        RawArray { ptr, len }
    }

    /// Pointer to element `i`. Panics when `i > len` (one past the end is allowed, for `add` arithmetic).
    #[inline]
    pub(crate) fn at(&self, i: usize) -> *mut T {
        assert!(i <= self.len, "RawArray index {i} out of bounds {}", self.len);
        // SAFETY: i <= len keeps the pointer within (or one past) the allocation.
        unsafe { self.ptr.add(i) }
    }
}

impl<T> Drop for RawArray<T> {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from Box::into_raw of a boxed slice of exactly this length.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        }
    }
}

// SAFETY: RawArray owns its elements exclusively, like a Box<[T]>.
unsafe impl<T: Send> Send for RawArray<T> {}

/// The errno of the last failed libc call.
#[inline]
/// The kernel receive time (ns since the epoch, CLOCK_REALTIME) a cmsg of `level` and `ty` with `payload`
/// bytes at `data` carries, if it is a valid receive time stamp: `SO_TIMESTAMPNS_NEW`, or the old form on
/// 64-bit targets (the only ones where it is enabled), both `{ i64 seconds, i64 nanoseconds }`. `None`
/// for any other cmsg, a short one, or a time out of range.
///
/// # Safety
/// `data` points at `payload` readable bytes.
pub(crate) unsafe fn cmsg_timestamp_ns(
    level: libc::c_int,
    ty: libc::c_int,
    data: *const u8,
    payload: usize,
) -> Option<u64> {
    let stamp = ty == SO_TIMESTAMPNS_NEW || (ty == SO_TIMESTAMPNS_OLD && cfg!(target_pointer_width = "64"));
    if level != libc::SOL_SOCKET || !stamp || payload < 16 {
        return None;
    }
    // SAFETY: 16 readable bytes at `data` (the caller's promise and the check above).
    let (sec, nsec) = unsafe {
        (
            std::ptr::read_unaligned(data as *const i64),
            std::ptr::read_unaligned((data as *const i64).add(1)),
        )
    };
    timespec_ns(sec, nsec)
}

/// Nanoseconds since the epoch of a timespec, if it is a valid, representable time.
fn timespec_ns(sec: i64, nsec: i64) -> Option<u64> {
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return None;
    }
    (sec as u64).checked_mul(1_000_000_000)?.checked_add(nsec as u64)
}

pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Waits until `fd` has any of `events`, for at most `timeout` (rounded up to whole milliseconds so a
/// short positive timeout never becomes a busy poll). Returns false on timeout. EINTR counts as "not
/// ready yet" and returns false, so callers re-check their own deadline and stop flags.
pub(crate) fn poll_fd(fd: BorrowedFd<'_>, events: PollFlags, timeout: Duration) -> io::Result<bool> {
    let mut ms = timeout.as_millis();
    if Duration::from_millis(ms as u64) < timeout {
        ms += 1;
    }
    let ms = ms.min(i32::MAX as u128) as u64;
    Ok(!crate::poll::wait(fd, events, Duration::from_millis(ms))?.is_empty())
}

pub(crate) use rustix::event::PollFlags;

/// Writes `addr` into `storage` and returns the length to pass as `msg_namelen`.
pub(crate) fn write_sockaddr(addr: &SocketAddr, storage: &mut libc::sockaddr_storage) -> libc::socklen_t {
    let sa = socket2::SockAddr::from(*addr);
    let len = sa.len();
    *storage = sa.as_storage();
    len
}

/// Reads an IPv4/IPv6 address the kernel wrote into `storage`; None for other families or short lengths.
pub(crate) fn read_sockaddr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: family and length say the storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: family and length say the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// C structs for which all-zero bytes are a valid value: every field an integer, a raw pointer (null
/// is a valid raw pointer) or a nested struct or array of such, so no references, `NonNull`, function
/// pointers or enums.
///
/// # Safety
/// Implement only for types that satisfy this; [`zeroed`] relies on it.
pub(crate) unsafe trait Zeroable: Copy {}

// SAFETY: mmsghdr is a msghdr (a raw name pointer, length, raw iovec pointer, count, raw control
// pointer, length and flags: integers and raw pointers) and an unsigned length.
unsafe impl Zeroable for libc::mmsghdr {}
// SAFETY: iovec is a raw base pointer and a length.
unsafe impl Zeroable for libc::iovec {}
// SAFETY: sockaddr_storage is a family, padding bytes and an alignment integer.
unsafe impl Zeroable for libc::sockaddr_storage {}

/// An all-zero value of a plain C struct.
#[inline]
pub(crate) fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `T: Zeroable` promises that all-zero bytes are a valid `T`.
    unsafe { mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for addr in ["127.0.0.1:4660", "[::1]:17", "[fe80::1%3]:9"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut storage = zeroed::<libc::sockaddr_storage>();
            let len = write_sockaddr(&addr, &mut storage);
            assert_eq!(read_sockaddr(&storage, len), Some(addr));
            assert_eq!(read_sockaddr(&storage, len - 1), None);
        }
    }

    #[test]
    fn timestamp_cmsgs_are_read_only_when_whole_valid_and_of_their_kind() {
        let mut raw = [0u8; 16];
        raw[..8].copy_from_slice(&1_700_000_000i64.to_ne_bytes());
        raw[8..].copy_from_slice(&123_456_789i64.to_ne_bytes());
        let p = raw.as_ptr();
        let want = Some(1_700_000_000_123_456_789);
        // SAFETY: `raw` holds 16 readable bytes; each call states at most that many.
        unsafe {
            assert_eq!(
                cmsg_timestamp_ns(libc::SOL_SOCKET, SO_TIMESTAMPNS_NEW, p, 16),
                want
            );
            assert_eq!(
                cmsg_timestamp_ns(libc::SOL_SOCKET, SO_TIMESTAMPNS_NEW, p, 15),
                None
            );
            assert_eq!(cmsg_timestamp_ns(libc::SOL_IP, SO_TIMESTAMPNS_NEW, p, 16), None);
            assert_eq!(cmsg_timestamp_ns(libc::SOL_SOCKET, SO_RXQ_OVFL, p, 16), None);
        }
        raw[8..].copy_from_slice(&1_000_000_000i64.to_ne_bytes());
        // SAFETY: as above.
        let out_of_range =
            unsafe { cmsg_timestamp_ns(libc::SOL_SOCKET, SO_TIMESTAMPNS_NEW, raw.as_ptr(), 16) };
        assert_eq!(out_of_range, None);
        assert_eq!(timespec_ns(-1, 0), None);
        assert_eq!(timespec_ns(i64::MAX, 0), None);
    }
}
