//! Batched sending with `sendmmsg`: a [`BatchSender`] owns preallocated `mmsghdr`/`iovec`/cmsg/address
//! storage for a fixed number of messages; a short-lived [`Batch`] borrowed from it collects messages whose
//! bytes the borrow checker keeps alive until they are flushed (or the batch is dropped, which discards
//! them). Each message is up to [`MAX_PARTS`] slices gathered without copying (e.g. an 8-byte sequence
//! number and a frame), optionally a UDP GSO super-datagram that the kernel cuts into equal datagrams.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr;
use std::time::{Duration, Instant};

use crate::sys::{self, CmsgSpace, RawArray};

/// Slices gathered into one message by a sender made with [`BatchSender::new`].
pub const MAX_PARTS: usize = 2;
/// Most slices one message may gather (the kernel's UIO_MAXIOV is 1024; a GSO message of 64 frames, each
/// a header slot and a payload, needs 128).
pub const MAX_PARTS_LIMIT: usize = 1024;
/// Most segments the kernel accepts in one GSO send (UDP_MAX_SEGMENTS on older kernels; newer ones allow
/// 128, but 64 works everywhere).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Largest UDP payload one (super-)datagram may carry over IPv4 (65535 minus IP and UDP headers).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// How long a flush keeps retrying when the kernel has no room (EAGAIN, ENOBUFS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total time one flush may spend waiting for room before giving up with `TimedOut`.
    pub max_wait: Duration,
    /// First sleep after ENOBUFS (doubles on each further ENOBUFS up to `max_backoff`).
    pub min_backoff: Duration,
    /// Longest single sleep after ENOBUFS.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_wait: Duration::from_secs(1),
            min_backoff: Duration::from_micros(10),
            max_backoff: Duration::from_millis(1),
        }
    }
}

/// Counters kept across flushes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendStats {
    /// `sendmmsg` calls that sent at least one message.
    pub syscalls: u64,
    /// Messages (mmsghdr entries) sent.
    pub messages: u64,
    /// Datagrams put on the wire (a GSO message counts its segments).
    pub datagrams: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Calls that sent only part of what was asked (the rest was resent).
    pub partial: u64,
    /// EAGAIN/EWOULDBLOCK results (send buffer full on a non-blocking or timed socket).
    pub would_block: u64,
    /// ENOBUFS results (device or qdisc queue full).
    pub no_buffers: u64,
    /// EINTR results.
    pub interrupted: u64,
    /// ECONNREFUSED results: an ICMP port-unreachable for an earlier datagram (nobody listening at the
    /// connected destination). The message is resent.
    pub refused: u64,
}

/// What one flush sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Messages (mmsghdr entries) sent.
    pub messages: usize,
    /// Datagrams on the wire (GSO messages count their segments).
    pub datagrams: usize,
    /// Payload bytes.
    pub bytes: usize,
}

/// A GSO message that cannot be sent as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GsoError {
    /// Segment size 0.
    #[error("GSO segment size must be at least 1 byte")]
    ZeroSegmentSize,
    /// Nothing to send.
    #[error("GSO buffer is empty")]
    Empty,
    /// The whole buffer exceeds one UDP datagram's payload limit.
    #[error(
        "GSO buffer of {len} bytes exceeds the {max}-byte UDP payload limit; send fewer segments per call"
    )]
    TooLarge { len: usize, max: usize },
    /// More segments than the kernel accepts in one send.
    #[error("GSO buffer holds {segments} segments of {segment_size} bytes; at most {max} per send")]
    TooManySegments {
        segments: usize,
        segment_size: u16,
        max: usize,
    },
}

/// Checks a GSO send of `len` bytes cut into `segment_size`-byte datagrams; returns the segment count.
pub fn check_gso(len: usize, segment_size: u16) -> Result<usize, GsoError> {
    if segment_size == 0 {
        return Err(GsoError::ZeroSegmentSize);
    }
    if len == 0 {
        return Err(GsoError::Empty);
    }
    if len > MAX_UDP_PAYLOAD {
        return Err(GsoError::TooLarge {
            len,
            max: MAX_UDP_PAYLOAD,
        });
    }
    let segments = len.div_ceil(segment_size as usize);
    if segments > GSO_MAX_SEGMENTS {
        return Err(GsoError::TooManySegments {
            segments,
            segment_size,
            max: GSO_MAX_SEGMENTS,
        });
    }
    Ok(segments)
}

/// A flush that stopped early: what did go out, and why the rest did not. The unsent messages are
/// discarded; the first of them is the one the error is about.
#[derive(Debug)]
pub struct SendError {
    /// What was sent before the error.
    pub sent: Sent,
    /// Segment size of the failed message when it was a GSO send.
    pub gso_segment: Option<u16>,
    /// The OS error (`TimedOut` when the retry budget ran out).
    pub source: io::Error,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sendmmsg failed after {} messages: {}",
            self.sent.messages, self.source
        )?;
        match (self.gso_segment, self.source.raw_os_error()) {
            (Some(_), Some(libc::EIO)) => write!(
                f,
                " (the kernel refused UDP GSO: the outgoing device cannot offload UDP checksums or the \
                 route uses IPsec; send one datagram per frame instead of GSO)"
            ),
            (Some(seg), Some(libc::EINVAL)) => write!(
                f,
                " (the kernel rejected a GSO send with {seg}-byte segments: segment plus headers larger \
                 than the path MTU, too many segments, or UDP checksums disabled)"
            ),
            (_, Some(libc::EMSGSIZE)) => write!(f, " (datagram larger than the UDP payload limit or MTU)"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<SendError> for io::Error {
    fn from(e: SendError) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// Per-message bookkeeping that the kernel does not return.
#[derive(Clone, Copy, Default)]
struct MsgInfo {
    /// Datagrams this message becomes on the wire.
    datagrams: u16,
    /// GSO segment size, 0 when not GSO.
    gso_segment: u16,
}

/// Preallocated storage for sending up to `capacity` messages per `sendmmsg`. Allocation happens only
/// in [`BatchSender::new`].
pub struct BatchSender {
    capacity: usize,
    parts: usize,
    len: usize,
    hdrs: RawArray<libc::mmsghdr>,
    iovs: RawArray<libc::iovec>,
    cmsgs: RawArray<CmsgSpace>,
    addrs: RawArray<libc::sockaddr_storage>,
    info: RawArray<MsgInfo>,
    retry: RetryPolicy,
    stats: SendStats,
}

// SAFETY: the raw pointers inside the headers point only into storage this value owns, and between
// batches (when the sender can be moved to another thread) no header holds a caller's pointer: a Batch
// borrows the sender mutably and resets it when dropped.
unsafe impl Send for BatchSender {}

impl BatchSender {
    /// A sender for at most `capacity` messages per batch (at least 1; the kernel handles at most 1024
    /// per call and larger batches are sent in several calls).
    pub fn new(capacity: usize) -> Self {
        Self::with_parts(capacity, MAX_PARTS)
    }

    /// A sender whose messages may each gather up to `parts` slices (1..=[`MAX_PARTS_LIMIT`]), e.g. a GSO
    /// message assembled from many frames' headers and payloads without copying them together.
    pub fn with_parts(capacity: usize, parts: usize) -> Self {
        let capacity = capacity.max(1);
        let parts = parts.clamp(1, MAX_PARTS_LIMIT);
        BatchSender {
            capacity,
            parts,
            len: 0,
            hdrs: RawArray::new(capacity, sys::zeroed),
            iovs: RawArray::new(capacity * parts, sys::zeroed),
            cmsgs: RawArray::new(capacity, CmsgSpace::default),
            addrs: RawArray::new(capacity, sys::zeroed),
            info: RawArray::new(capacity, MsgInfo::default),
            retry: RetryPolicy::default(),
            stats: SendStats::default(),
        }
    }

    /// Replaces the retry policy for EAGAIN/ENOBUFS.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Slices one message may gather.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Messages per batch.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Counters since construction (or the last [`reset_stats`](Self::reset_stats)).
    pub fn stats(&self) -> SendStats {
        self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = SendStats::default();
    }

    /// Starts a batch. Slices pushed into it must outlive it; dropping it unsent discards the messages.
    pub fn batch<'b>(&mut self) -> Batch<'_, 'b> {
        self.len = 0;
        Batch {
            sender: self,
            _bufs: PhantomData,
        }
    }

    /// Sends every message of `msgs` (each up to [`MAX_PARTS`] slices) in batches of `capacity`.
    pub fn send_all<'b, P, I>(&mut self, sock: &impl AsFd, msgs: I) -> Result<Sent, SendError>
    where
        P: AsRef<[&'b [u8]]>,
        I: IntoIterator<Item = P>,
    {
        let fd = sock.as_fd();
        let mut total = Sent::default();
        let mut batch = self.batch();
        for msg in msgs {
            if !batch.push(msg.as_ref()) {
                let more = batch.flush_fd(fd).map_err(|e| with_prior(e, total))?;
                add_sent(&mut total, more);
                let pushed = batch.push(msg.as_ref());
                debug_assert!(pushed);
            }
        }
        let more = batch.flush_fd(fd).map_err(|e| with_prior(e, total))?;
        add_sent(&mut total, more);
        Ok(total)
    }

    /// Sends `segments` as one GSO super-datagram cut by the kernel into `segment_size`-byte datagrams
    /// (the last may be shorter).
    pub fn send_gso(
        &mut self,
        sock: &impl AsFd,
        segments: &[u8],
        segment_size: u16,
    ) -> Result<Sent, SendError> {
        let mut batch = self.batch();
        batch.push_gso(&[segments], segment_size).map_err(|e| SendError {
            sent: Sent::default(),
            gso_segment: Some(segment_size),
            source: io::Error::new(io::ErrorKind::InvalidInput, e),
        })?;
        batch.flush(sock)
    }

    fn push_msg(
        &mut self,
        parts: &[&[u8]],
        dest: Option<&SocketAddr>,
        gso_segment: u16,
        datagrams: usize,
    ) -> bool {
        assert!(
            parts.len() <= self.parts,
            "a message of this sender has at most {} parts, got {}",
            self.parts,
            parts.len()
        );
        if self.len == self.capacity {
            return false;
        }
        let i = self.len;
        // SAFETY: i < capacity, so every pointer below is inside its array; no references into the arrays
        // exist elsewhere. The slices' lifetimes are enforced by Batch.
        unsafe {
            let iov = self.iovs.at(i * self.parts);
            for (k, part) in parts.iter().enumerate() {
                *iov.add(k) = libc::iovec {
                    iov_base: part.as_ptr() as *mut libc::c_void,
                    iov_len: part.len(),
                };
            }
            let entry = &mut *self.hdrs.at(i);
            entry.msg_len = 0;
            let hdr = &mut entry.msg_hdr;
            hdr.msg_iov = iov;
            hdr.msg_iovlen = parts.len() as _;
            hdr.msg_flags = 0;
            match dest {
                Some(addr) => {
                    let storage = self.addrs.at(i);
                    hdr.msg_namelen = sys::write_sockaddr(addr, &mut *storage);
                    hdr.msg_name = storage as *mut libc::c_void;
                }
                None => {
                    hdr.msg_name = ptr::null_mut();
                    hdr.msg_namelen = 0;
                }
            }
            if gso_segment == 0 {
                hdr.msg_control = ptr::null_mut();
                hdr.msg_controllen = 0;
            } else {
                hdr.msg_control = self.cmsgs.at(i) as *mut libc::c_void;
                hdr.msg_controllen = libc::CMSG_SPACE(2) as _;
                let cmsg = libc::CMSG_FIRSTHDR(hdr);
                (*cmsg).cmsg_level = sys::SOL_UDP;
                (*cmsg).cmsg_type = sys::UDP_SEGMENT;
                (*cmsg).cmsg_len = libc::CMSG_LEN(2) as _;
                ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, gso_segment);
            }
            *self.info.at(i) = MsgInfo {
                datagrams: datagrams as u16,
                gso_segment,
            };
        }
        self.len += 1;
        true
    }

    /// Sends messages `0..len` with as many `sendmmsg` calls as needed, then empties the batch.
    fn flush_fd(&mut self, fd: BorrowedFd<'_>) -> Result<Sent, SendError> {
        let total = self.len;
        self.len = 0;
        let mut sent = Sent::default();
        // Set at the first EAGAIN/ENOBUFS since the last progress; waiting past it gives up.
        let mut stall_deadline: Option<Instant> = None;
        let mut backoff = self.retry.min_backoff;
        let mut refusals_in_a_row = 0u32;
        while sent.messages < total {
            let todo = (total - sent.messages).min(u32::MAX as usize) as libc::c_uint;
            // SAFETY: entries sent.messages..total were filled by push_msg and their buffers are alive
            // (guaranteed by the Batch borrow).
            let rc = unsafe { libc::sendmmsg(fd.as_raw_fd(), self.hdrs.at(sent.messages), todo, 0) };
            if rc > 0 {
                let n = rc as usize;
                for i in sent.messages..sent.messages + n {
                    // SAFETY: i < total <= capacity.
                    let (bytes, info) = unsafe { ((*self.hdrs.at(i)).msg_len as usize, *self.info.at(i)) };
                    sent.bytes += bytes;
                    sent.datagrams += info.datagrams as usize;
                }
                sent.messages += n;
                self.stats.syscalls += 1;
                if sent.messages < total {
                    self.stats.partial += 1;
                }
                stall_deadline = None;
                backoff = self.retry.min_backoff;
                refusals_in_a_row = 0;
                continue;
            }
            let err = if rc == 0 { libc::EAGAIN } else { sys::errno() };
            match err {
                libc::EINTR => {
                    self.stats.interrupted += 1;
                    continue;
                }
                libc::ECONNREFUSED if refusals_in_a_row < 3 => {
                    // The error belongs to an earlier datagram and is cleared by reporting it.
                    self.stats.refused += 1;
                    refusals_in_a_row += 1;
                    continue;
                }
                libc::EAGAIN | libc::ENOBUFS => {}
                _ => return Err(self.fail(sent, io::Error::from_raw_os_error(err))),
            }
            let now = Instant::now();
            let deadline = *stall_deadline.get_or_insert(now + self.retry.max_wait);
            if now >= deadline {
                let e = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no room to send for {:?} ({})",
                        self.retry.max_wait,
                        io::Error::from_raw_os_error(err)
                    ),
                );
                return Err(self.fail(sent, e));
            }
            if err == libc::ENOBUFS {
                // The queue below the socket is full; poll cannot tell when it drains, so back off.
                self.stats.no_buffers += 1;
                std::thread::sleep(backoff.min(deadline - now));
                backoff = (backoff * 2).min(self.retry.max_backoff);
            } else {
                self.stats.would_block += 1;
                if let Err(e) = sys::poll_fd(fd, sys::PollFlags::OUT, deadline - now) {
                    return Err(self.fail(sent, e));
                }
            }
        }
        self.account(sent);
        Ok(sent)
    }

    fn account(&mut self, sent: Sent) {
        self.stats.messages += sent.messages as u64;
        self.stats.datagrams += sent.datagrams as u64;
        self.stats.bytes += sent.bytes as u64;
    }

    fn fail(&mut self, sent: Sent, source: io::Error) -> SendError {
        self.account(sent);
        // SAFETY: sent.messages < capacity because the message at that index was being sent.
        let info = unsafe { *self.info.at(sent.messages) };
        SendError {
            sent,
            gso_segment: (info.gso_segment != 0).then_some(info.gso_segment),
            source,
        }
    }
}

fn add_sent(total: &mut Sent, more: Sent) {
    total.messages += more.messages;
    total.datagrams += more.datagrams;
    total.bytes += more.bytes;
}

fn with_prior(mut e: SendError, prior: Sent) -> SendError {
    add_sent(&mut e.sent, prior);
    e
}

/// Messages being collected for one flush. Everything pushed must outlive the batch (`'b`), so the
/// pointers handed to the kernel are always valid. Dropping a batch discards unsent messages.
pub struct Batch<'s, 'b> {
    sender: &'s mut BatchSender,
    _bufs: PhantomData<&'b [u8]>,
}

impl<'b> Batch<'_, 'b> {
    /// Adds a message of up to [`MAX_PARTS`] slices sent as one datagram on a connected socket. Returns
    /// false (and adds nothing) when the batch is full. Panics if more than [`MAX_PARTS`] parts are given.
    pub fn push(&mut self, parts: &[&'b [u8]]) -> bool {
        self.sender.push_msg(parts, None, 0, 1)
    }

    /// Like [`push`](Self::push) but to an explicit destination (for unconnected sockets).
    pub fn push_to(&mut self, parts: &[&'b [u8]], dest: &SocketAddr) -> bool {
        self.sender.push_msg(parts, Some(dest), 0, 1)
    }

    /// Adds a GSO message: the concatenated `parts` are cut by the kernel into `segment_size`-byte
    /// datagrams (the last may be shorter). `Ok(false)` when the batch is full.
    pub fn push_gso(&mut self, parts: &[&'b [u8]], segment_size: u16) -> Result<bool, GsoError> {
        let len = parts.iter().map(|p| p.len()).sum();
        let segments = check_gso(len, segment_size)?;
        Ok(self.sender.push_msg(parts, None, segment_size, segments))
    }

    /// Like [`push_gso`](Self::push_gso) but to an explicit destination.
    pub fn push_gso_to(
        &mut self,
        parts: &[&'b [u8]],
        segment_size: u16,
        dest: &SocketAddr,
    ) -> Result<bool, GsoError> {
        let len = parts.iter().map(|p| p.len()).sum();
        let segments = check_gso(len, segment_size)?;
        Ok(self.sender.push_msg(parts, Some(dest), segment_size, segments))
    }

    /// Messages collected.
    pub fn len(&self) -> usize {
        self.sender.len
    }

    /// True when nothing is collected.
    pub fn is_empty(&self) -> bool {
        self.sender.len == 0
    }

    /// True when no more messages fit.
    pub fn is_full(&self) -> bool {
        self.sender.len == self.sender.capacity
    }

    /// Sends everything collected (retrying partial sends, EINTR, and EAGAIN/ENOBUFS within the retry
    /// budget) and empties the batch for reuse. On error the unsent rest is discarded.
    pub fn flush(&mut self, sock: &impl AsFd) -> Result<Sent, SendError> {
        self.sender.flush_fd(sock.as_fd())
    }

    fn flush_fd(&mut self, fd: BorrowedFd<'_>) -> Result<Sent, SendError> {
        self.sender.flush_fd(fd)
    }
}

impl Drop for Batch<'_, '_> {
    fn drop(&mut self) {
        // Unsent entries point at buffers that may die right after the batch; forget them.
        self.sender.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gso_limits() {
        assert_eq!(check_gso(8224 * 7, 8224), Ok(7));
        assert_eq!(check_gso(8224 * 7 + 1, 8224), Ok(8));
        assert_eq!(check_gso(0, 8224), Err(GsoError::Empty));
        assert_eq!(check_gso(100, 0), Err(GsoError::ZeroSegmentSize));
        assert_eq!(
            check_gso(8224 * 8, 8224),
            Err(GsoError::TooLarge {
                len: 65792,
                max: MAX_UDP_PAYLOAD
            })
        );
        assert_eq!(
            check_gso(65 * 100, 100),
            Err(GsoError::TooManySegments {
                segments: 65,
                segment_size: 100,
                max: GSO_MAX_SEGMENTS
            })
        );
        assert_eq!(check_gso(64 * 100, 100), Ok(64));
    }

    #[test]
    fn batch_fills_to_capacity_and_resets_on_drop() {
        let data = [1u8; 16];
        let mut sender = BatchSender::new(3);
        {
            let mut batch = sender.batch();
            assert!(batch.push(&[&data[..8], &data[8..]]));
            assert!(batch.push(&[&data]));
            assert!(batch.push(&[]));
            assert!(batch.is_full());
            assert!(!batch.push(&[&data]));
            assert_eq!(batch.len(), 3);
        }
        assert!(sender.batch().is_empty());
    }

    #[test]
    fn send_error_explains_gso_refusal() {
        let e = SendError {
            sent: Sent {
                messages: 2,
                datagrams: 14,
                bytes: 115136,
            },
            gso_segment: Some(8224),
            source: io::Error::from_raw_os_error(libc::EIO),
        };
        let text = e.to_string();
        assert!(text.contains("after 2 messages"), "{text}");
        assert!(text.contains("refused UDP GSO"), "{text}");
    }
}
