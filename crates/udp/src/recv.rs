//! Batched receiving with `recvmmsg` straight into caller-provided buffers (e.g. frame slots of a
//! recorder's block buffer), reporting per message its length, truncation, GRO segment size and source,
//! plus the socket's cumulative kernel drop count (SO_RXQ_OVFL).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr;
use std::time::{Duration, Instant};

use crate::sys::{self, CmsgSpace, RawArray};

/// One received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvMeta {
    /// Bytes written into the buffer(s).
    pub len: usize,
    /// The datagram's real length (larger than `len` when it was truncated).
    pub wire_len: usize,
    /// The datagram was longer than the buffer and was cut (MSG_TRUNC).
    pub truncated: bool,
    /// With GRO: the kernel coalesced several datagrams of this size (the last may be shorter) into this
    /// message. None for an ordinary single datagram.
    pub gro_segment: Option<u16>,
    /// Sender address, when the receiver was asked to collect it.
    pub source: Option<SocketAddr>,
    /// When the kernel received the datagram (CLOCK_REALTIME, ns since the Unix epoch), on a socket
    /// opened with [`UdpConfig::timestamps`](crate::UdpConfig::timestamps); None otherwise. This is
    /// per datagram, not per batch: a batch read late still shows when each datagram came in. A GRO
    /// message carries one time for all its segments.
    pub timestamp_ns: Option<u64>,
}

/// The oldest receive timestamp [`RecvMeta::arrival`] believes.
const MAX_STAMP_AGE_NS: u64 = 10_000_000_000;

/// CLOCK_REALTIME in ns, the clock of [`RecvMeta::timestamp_ns`] (comparable between processes and
/// namespaces of one host; between hosts only up to their clock offset).
pub fn realtime_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

impl RecvMeta {
    /// Size of the datagrams this message holds (its whole length when not coalesced).
    pub fn segment_size(&self) -> usize {
        match self.gro_segment {
            Some(s) if s > 0 => s as usize,
            _ => self.len,
        }
    }

    /// When the message arrived, on the monotonic clock: its kernel receive time taken back from
    /// `real_ns` ([`realtime_ns`]) and `now`, both read just after the batch. Without a stamp, or with
    /// one from the future or more than 10 s old (a step of the wall clock in between), `now`.
    pub fn arrival(&self, real_ns: u64, now: Instant) -> Instant {
        match self.timestamp_ns {
            Some(t) if t <= real_ns && real_ns - t < MAX_STAMP_AGE_NS => {
                now.checked_sub(Duration::from_nanos(real_ns - t)).unwrap_or(now)
            }
            _ => now,
        }
    }

    /// Number of wire datagrams this message holds.
    pub fn datagrams(&self) -> usize {
        if self.len == 0 {
            // A zero-length datagram is still one datagram.
            return 1;
        }
        self.len.div_ceil(self.segment_size())
    }

    /// The wire datagrams inside `buf` (the buffer this message was received into with
    /// [`BatchReceiver::recv`]; not meaningful for a message scattered over two buffers).
    pub fn segments<'a>(&self, buf: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let data = &buf[..self.len.min(buf.len())];
        let step = self.segment_size().max(1);
        let empty = data.is_empty();
        data.chunks(step).chain(empty.then_some(data))
    }
}

/// Counters kept across receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// `recvmmsg` calls that returned messages.
    pub syscalls: u64,
    /// Messages received (a GRO message counts once).
    pub messages: u64,
    /// Wire datagrams received (GRO messages count their segments).
    pub datagrams: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Messages cut short because the buffer was too small.
    pub truncated: u64,
    /// Receives that ended with nothing after the timeout.
    pub timeouts: u64,
}

/// Turns the kernel's SO_RXQ_OVFL counter (cumulative per socket, wrapping at 2^32) into a running
/// 64-bit total. Keep one per socket: [`BatchReceiver`] keeps one for itself (see
/// [`BatchReceiver::kernel_drops`]); a receiver shared by many sockets feeds the raw counter of each
/// batch ([`RecvBatch::drop_counter`]) into that socket's own `DropCounter`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounter {
    last: u32,
    total: u64,
}

impl DropCounter {
    /// Takes a raw counter value and returns the running total. A value that went backwards (a reused
    /// or foreign counter) is ignored rather than counted as four billion drops.
    pub fn update(&mut self, counter: u32) -> u64 {
        let delta = counter.wrapping_sub(self.last);
        if delta < u32::MAX / 2 {
            self.total += u64::from(delta);
            self.last = counter;
        }
        self.total
    }

    /// Drops counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// The messages of one [`BatchReceiver::recv`]: entry `i` landed in the `i`-th buffer given.
#[derive(Debug)]
pub struct RecvBatch<'a> {
    metas: &'a [RecvMeta],
    kernel_drops: u64,
    drop_counter: Option<u32>,
}

impl<'a> RecvBatch<'a> {
    /// Messages received (0 after a timeout).
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// True after a timeout.
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// Per-message results, in buffer order.
    pub fn messages(&self) -> &'a [RecvMeta] {
        self.metas
    }

    /// Wire datagrams in this batch (counting GRO segments).
    pub fn datagrams(&self) -> usize {
        self.metas.iter().map(RecvMeta::datagrams).sum()
    }

    /// Bytes in this batch.
    pub fn bytes(&self) -> usize {
        self.metas.iter().map(|m| m.len).sum()
    }

    /// Datagrams the kernel dropped on this socket so far (needs SO_RXQ_OVFL; see
    /// [`BatchReceiver::kernel_drops`]).
    pub fn kernel_drops(&self) -> u64 {
        self.kernel_drops
    }

    /// The raw SO_RXQ_OVFL counter carried by the last message of this batch that had one: the
    /// socket's cumulative drop count (wrapping) when that datagram was queued. None without the option,
    /// while the socket has dropped nothing yet (the kernel omits a zero count), or for an empty batch. Use this with a per-socket [`DropCounter`] when one receiver serves several
    /// sockets, since [`kernel_drops`](Self::kernel_drops) then mixes their counters.
    pub fn drop_counter(&self) -> Option<u32> {
        self.drop_counter
    }
}

/// Most buffers one message can be scattered over with [`BatchReceiver::recv_scatter`] or
/// [`BatchReceiver::recv_vectored`] (e.g. a sequence-number prefix and a frame slot for each of 15 GRO
/// segments, then a spare area), by a receiver made with [`BatchReceiver::with_parts`].
pub const MAX_RECV_PARTS: usize = 32;

/// Buffers per message a receiver made with [`BatchReceiver::new`] has room for: enough for
/// [`BatchReceiver::recv`], [`BatchReceiver::recv_into`] and [`BatchReceiver::recv_parts`].
pub const DEFAULT_RECV_PARTS: usize = 2;

/// Preallocated storage for receiving up to `capacity` messages per `recvmmsg`.
pub struct BatchReceiver {
    capacity: usize,
    /// Iovecs per message (the stride of `iovs`).
    parts: usize,
    want_source: bool,
    hdrs: RawArray<libc::mmsghdr>,
    iovs: RawArray<libc::iovec>,
    /// Iovecs in use per message (set by the last scatter).
    iov_lens: Box<[usize]>,
    cmsgs: RawArray<CmsgSpace>,
    addrs: RawArray<libc::sockaddr_storage>,
    metas: Box<[RecvMeta]>,
    drops: DropCounter,
    batch_drop_counter: Option<u32>,
    busy_wait: Duration,
    stats: RecvStats,
}

// SAFETY: the headers point only into storage this value owns; caller buffers are referenced only
// during a recv call, which borrows them.
unsafe impl Send for BatchReceiver {}

impl BatchReceiver {
    /// A receiver for at most `capacity` messages per call (at least 1; the kernel caps one call at 1024),
    /// each into at most [`DEFAULT_RECV_PARTS`] buffers.
    pub fn new(capacity: usize) -> Self {
        Self::with_parts(capacity, DEFAULT_RECV_PARTS)
    }

    /// A receiver for at most `capacity` messages per call, each scattered over at most `parts` buffers
    /// (1 to [`MAX_RECV_PARTS`]; the iovecs are preallocated, `parts` for every message).
    pub fn with_parts(capacity: usize, parts: usize) -> Self {
        let capacity = capacity.max(1);
        let parts = parts.clamp(1, MAX_RECV_PARTS);
        BatchReceiver {
            capacity,
            parts,
            want_source: false,
            hdrs: RawArray::new(capacity, sys::zeroed),
            iovs: RawArray::new(capacity * parts, sys::zeroed),
            iov_lens: vec![0; capacity].into_boxed_slice(),
            cmsgs: RawArray::new(capacity, CmsgSpace::default),
            addrs: RawArray::new(capacity, sys::zeroed),
            metas: vec![RecvMeta::default(); capacity].into_boxed_slice(),
            drops: DropCounter::default(),
            batch_drop_counter: None,
            busy_wait: Duration::ZERO,
            stats: RecvStats::default(),
        }
    }

    /// Also collect each message's source address.
    pub fn with_source(mut self, want_source: bool) -> Self {
        self.want_source = want_source;
        self
    }

    /// When the queue is empty, keep retrying without sleeping for up to `busy_wait` before sleeping in
    /// `poll` (bounded by the call's timeout). Costs CPU on the receiving core but spares the sender
    /// the cost of waking a sleeping receiver for every few datagrams, which dominates on loopback.
    pub fn with_busy_wait(mut self, busy_wait: Duration) -> Self {
        self.busy_wait = busy_wait;
        self
    }

    /// Messages per call.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Buffers per message at most.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Counters since construction.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    /// Datagrams the kernel dropped for this socket (receive queue full, etc.) as last reported by
    /// SO_RXQ_OVFL, counted from when the option was enabled. Stays 0 without the option. The kernel
    /// counts socket buffers, so with GRO one drop can be a whole coalesced message of several
    /// datagrams. The count only advances when a datagram queued after the drops is received.
    /// Meaningful only while this receiver serves one socket; otherwise see [`RecvBatch::drop_counter`].
    pub fn kernel_drops(&self) -> u64 {
        self.drops.total()
    }

    /// Receives up to `capacity` messages, one into each buffer `bufs` yields (buffers beyond capacity
    /// are not taken from the iterator, so pass `iter.by_ref()` to keep the rest). Waits at most
    /// `timeout` for the first message, then takes whatever is queued without waiting. An empty batch
    /// means the timeout passed. A zero timeout never waits: one non-blocking `recvmmsg`, for callers
    /// that learn readiness from their own `epoll` over many sockets.
    pub fn recv<'b, I>(&mut self, sock: &impl AsFd, bufs: I, timeout: Duration) -> io::Result<RecvBatch<'_>>
    where
        I: IntoIterator<Item = &'b mut [u8]>,
    {
        self.recv_scatter(sock, bufs.into_iter().map(|b| [b]), timeout)
    }

    /// Like [`recv`](Self::recv) but scatters each message over two buffers: the first part fills
    /// `parts[0]` and the rest goes to `parts[1]`. With an 8-byte `parts[0]` this splits a sequence-number
    /// prefix from a frame that then lands in place (e.g. in a recorder's block buffer).
    pub fn recv_parts<'b, I>(
        &mut self,
        sock: &impl AsFd,
        bufs: I,
        timeout: Duration,
    ) -> io::Result<RecvBatch<'_>>
    where
        I: IntoIterator<Item = [&'b mut [u8]; 2]>,
    {
        self.recv_scatter(sock, bufs, timeout)
    }

    /// Like [`recv`](Self::recv) but scatters each message over `N` (at most [`MAX_RECV_PARTS`], and at most
    /// the receiver's [`parts`](Self::parts): more panics) buffers
    /// filled in order. E.g. a sequence-number prefix, then a run of frame slots in a block buffer, then
    /// a spare area so that a GRO super-datagram longer than the slots is never truncated.
    pub fn recv_scatter<'b, const N: usize, I>(
        &mut self,
        sock: &impl AsFd,
        bufs: I,
        timeout: Duration,
    ) -> io::Result<RecvBatch<'_>>
    where
        I: IntoIterator<Item = [&'b mut [u8]; N]>,
    {
        const { assert!(N <= MAX_RECV_PARTS, "too many parts per message") };
        self.recv_vectored(sock, bufs, timeout)
    }

    /// Like [`recv_scatter`](Self::recv_scatter) with a number of parts that may differ from message to
    /// message (at most [`parts`](Self::parts) each; more panics): message `n` is scattered over the buffers
    /// the `n`-th item yields, in order. E.g. for GRO super-datagrams of sequence-numbered frames, each
    /// segment's 8-byte prefix into a side array and its frame into its slot in a block buffer.
    pub fn recv_vectored<'b, I, J>(
        &mut self,
        sock: &impl AsFd,
        bufs: I,
        timeout: Duration,
    ) -> io::Result<RecvBatch<'_>>
    where
        I: IntoIterator<Item = J>,
        J: IntoIterator<Item = &'b mut [u8]>,
    {
        let mut n = 0;
        for parts in bufs.into_iter().take(self.capacity) {
            let mut part = 0;
            for buf in parts {
                self.set_iov(n, part, buf);
                part += 1;
            }
            self.iov_lens[n] = part;
            n += 1;
        }
        self.recv_prepared(sock.as_fd(), n, timeout)
    }

    fn set_iov(&mut self, msg: usize, part: usize, buf: &mut [u8]) {
        assert!(
            msg < self.capacity && part < self.parts,
            "more than {} parts per message",
            self.parts
        );
        // SAFETY: msg < capacity and part < parts keep the index inside the array (capacity * parts). The
        // caller's buffer is exclusively borrowed for the whole recv call that uses this iovec.
        unsafe {
            *self.iovs.at(msg * self.parts + part) = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
        }
    }

    /// Receives into the `n` messages whose iovecs are set.
    fn recv_prepared(
        &mut self,
        fd: BorrowedFd<'_>,
        n: usize,
        timeout: Duration,
    ) -> io::Result<RecvBatch<'_>> {
        self.batch_drop_counter = None;
        if n == 0 {
            return Ok(self.empty_batch());
        }
        let mut deadline: Option<Instant> = None;
        let mut busy_until: Option<Instant> = None;
        let got = loop {
            self.prepare(n);
            // SAFETY: entries 0..n point at live buffers and owned control/address storage.
            let rc = unsafe {
                libc::recvmmsg(
                    fd.as_raw_fd(),
                    self.hdrs.at(0),
                    n as libc::c_uint,
                    // MSG_TRUNC makes msg_len the datagram's real length even when it was cut.
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
                Some(libc::EAGAIN) if timeout.is_zero() => {
                    // Just looking: no clock reads, no poll.
                    self.stats.timeouts += 1;
                    return Ok(self.empty_batch());
                }
                Some(libc::EAGAIN) => {
                    let now = Instant::now();
                    let end = *deadline.get_or_insert(now + timeout);
                    if busy_until.is_none() {
                        busy_until = Some((now + self.busy_wait).min(end));
                    }
                    if busy_until.is_some_and(|b| now < b) {
                        std::hint::spin_loop();
                        continue;
                    }
                    if now >= end
                        || !sys::poll_fd(fd, sys::PollFlags::IN, end - now)? && Instant::now() >= end
                    {
                        self.stats.timeouts += 1;
                        return Ok(self.empty_batch());
                    }
                }
                _ => return Err(err),
            }
        };
        for i in 0..got {
            self.metas[i] = self.read_meta(i);
            let m = self.metas[i];
            self.stats.bytes += m.len as u64;
            self.stats.datagrams += m.datagrams() as u64;
            self.stats.truncated += m.truncated as u64;
        }
        self.stats.syscalls += 1;
        self.stats.messages += got as u64;
        Ok(RecvBatch {
            metas: &self.metas[..got],
            kernel_drops: self.drops.total(),
            drop_counter: self.batch_drop_counter,
        })
    }

    fn empty_batch(&self) -> RecvBatch<'_> {
        RecvBatch {
            metas: &self.metas[..0],
            kernel_drops: self.drops.total(),
            drop_counter: None,
        }
    }

    /// Receives one message into `buf`; None when `timeout` passed first. Split a GRO message into its
    /// datagrams with [`RecvMeta::segments`].
    pub fn recv_into(
        &mut self,
        sock: &impl AsFd,
        buf: &mut [u8],
        timeout: Duration,
    ) -> io::Result<Option<RecvMeta>> {
        let batch = self.recv(sock, std::iter::once(buf), timeout)?;
        Ok(batch.messages().first().copied())
    }

    /// Points entries 0..n at their iovec and storage and resets the in/out fields the kernel rewrites.
    fn prepare(&mut self, n: usize) {
        for i in 0..n {
            // SAFETY: i < n <= capacity.
            unsafe {
                let entry = &mut *self.hdrs.at(i);
                entry.msg_len = 0;
                let hdr = &mut entry.msg_hdr;
                hdr.msg_iov = self.iovs.at(i * self.parts);
                hdr.msg_iovlen = self.iov_lens[i] as _;
                hdr.msg_control = self.cmsgs.at(i) as *mut libc::c_void;
                hdr.msg_controllen = std::mem::size_of::<CmsgSpace>() as _;
                hdr.msg_flags = 0;
                if self.want_source {
                    hdr.msg_name = self.addrs.at(i) as *mut libc::c_void;
                    hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                } else {
                    hdr.msg_name = ptr::null_mut();
                    hdr.msg_namelen = 0;
                }
            }
        }
    }

    fn read_meta(&mut self, i: usize) -> RecvMeta {
        // SAFETY: i < the count recvmmsg returned; the kernel filled this entry.
        unsafe {
            let entry = &*self.hdrs.at(i);
            let hdr = &entry.msg_hdr;
            let iov = self.iovs.at(i * self.parts);
            let room: usize = (0..self.iov_lens[i]).map(|p| (*iov.add(p)).iov_len).sum();
            let wire_len = entry.msg_len as usize;
            let mut meta = RecvMeta {
                len: wire_len.min(room),
                wire_len,
                truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
                gro_segment: None,
                source: None,
                timestamp_ns: None,
            };
            if self.want_source {
                meta.source = sys::read_sockaddr(&*self.addrs.at(i), hdr.msg_namelen);
            }
            let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
            while !cmsg.is_null() {
                let c = &*cmsg;
                let data = libc::CMSG_DATA(cmsg);
                // Payload bytes of this cmsg; each branch reads only when there are enough.
                let payload = (c.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                if payload < 4 {
                    // Too short for any cmsg we read.
                } else if c.cmsg_level == sys::SOL_UDP && c.cmsg_type == sys::UDP_GRO {
                    let size = ptr::read_unaligned(data as *const libc::c_int);
                    meta.gro_segment = u16::try_from(size).ok().filter(|&s| s > 0);
                } else if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == sys::SO_RXQ_OVFL {
                    // The socket's cumulative drop count when this datagram was queued.
                    let counter = ptr::read_unaligned(data as *const u32);
                    self.drops.update(counter);
                    self.batch_drop_counter = Some(counter);
                } else if let Some(t) = sys::cmsg_timestamp_ns(c.cmsg_level, c.cmsg_type, data, payload) {
                    meta.timestamp_ns = Some(t);
                }
                cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
            }
            meta
        }
    }
}

/// Keeps the kernel's receive timestamping switched on while it lives.
///
/// Linux stamps datagrams on their way in only while some socket has asked for timestamps, and
/// switches that on (and off, when the last such socket closes) in a deferred kernel worker. Until it
/// has run, datagrams are stamped when they are read instead, which is one time per batch again. So a
/// timestamping socket opened while no other wants timestamps can get read-time stamps for its first
/// datagrams, or longer when the worker is slow to run on a busy machine; and each test socket that
/// closes can switch stamping off for the next. Hold one of these for as long as arrival times
/// matter (e.g. a responder's lifetime).
#[derive(Debug)]
pub struct TimestampKeeper {
    _sock: std::net::UdpSocket,
}

impl TimestampKeeper {
    /// Asks for timestamps on a loopback socket and waits at most `timeout` until the kernel stamps
    /// datagrams on arrival, seen by sending datagrams to that socket: a stamp taken on the way in is
    /// earlier than the send returned. An error says what failed (no loopback, option refused, still
    /// not stamping on arrival at the timeout).
    pub fn start(timeout: Duration) -> io::Result<Self> {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (sock, report) = crate::socket::open_udp(&crate::socket::UdpConfig {
            timestamps: true,
            ..crate::socket::UdpConfig::receiver(loopback)
        })
        .map_err(|e| io::Error::new(e.source.kind(), e.to_string()))?;
        if let crate::socket::Feature::Unsupported(errno) = report.timestamps {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let mut rx = BatchReceiver::new(1);
        let mut buf = [0u8; 8];
        let deadline = Instant::now() + timeout;
        loop {
            sock.send_to(b"probe", report.local)?;
            let sent = realtime_ns();
            let meta = rx.recv_into(&sock, &mut buf, Duration::from_millis(100))?;
            if meta.and_then(|m| m.timestamp_ns).is_some_and(|t| t <= sent) {
                return Ok(TimestampKeeper { _sock: sock });
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the kernel still stamps datagrams when they are read, not on arrival, {:.1} s after \
                         timestamps were asked for",
                        timeout.as_secs_f64()
                    ),
                ));
            }
            // Let the kernel worker that flips the switch run.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_takes_the_kernel_stamp_back_to_the_monotonic_clock() {
        let now = Instant::now();
        let real = realtime_ns();
        let at = |ts| {
            RecvMeta {
                timestamp_ns: ts,
                ..RecvMeta::default()
            }
            .arrival(real, now)
        };
        assert_eq!(at(Some(real - 3_000_000)), now - Duration::from_millis(3));
        assert_eq!(at(Some(real)), now);
        // none, from the future, or older than 10 s (the wall clock stepped): the read time
        assert_eq!(at(None), now);
        assert_eq!(at(Some(real + 1)), now);
        assert_eq!(at(Some(real - 11_000_000_000)), now);
    }

    #[test]
    fn drop_counter_accumulates_across_wrap_and_ignores_backwards() {
        let mut d = DropCounter::default();
        assert_eq!(d.update(5), 5);
        assert_eq!(d.update(0x7000_0000), 0x7000_0000);
        assert_eq!(d.update(0xE000_0000), 0xE000_0000);
        assert_eq!(d.update(3), (1u64 << 32) + 3);
        assert_eq!(d.update(2), (1u64 << 32) + 3);
        assert_eq!(d.total(), (1u64 << 32) + 3);
    }

    #[test]
    fn segments_split_gro_messages() {
        let buf: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let meta = RecvMeta {
            len: 250,
            wire_len: 250,
            truncated: false,
            gro_segment: Some(100),
            source: None,
            timestamp_ns: None,
        };
        let parts: Vec<&[u8]> = meta.segments(&buf).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(meta.datagrams(), 3);
        assert_eq!(parts[0], &buf[..100]);
        assert_eq!(parts[2], &buf[200..250]);

        let single = RecvMeta {
            len: 40,
            ..RecvMeta::default()
        };
        assert_eq!(single.segments(&buf).count(), 1);
        assert_eq!(single.datagrams(), 1);
        let empty = RecvMeta::default();
        assert_eq!(empty.segments(&buf).collect::<Vec<_>>(), vec![&[][..]]);
        assert_eq!(empty.datagrams(), 1);
    }
}
