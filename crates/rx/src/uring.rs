//! io_uring receive path: one multishot `recvmsg` request per stream socket, all drawing buffers from one
//! ring of provided buffers (IORING_REGISTER_PBUF_RING). The kernel posts one completion per datagram
//! (per super-datagram with GRO) without a system call per receive; the application reaps completions
//! with one `io_uring_enter` that also waits, hands the data over and returns each buffer to the ring.
//!
//! Set-up tries IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (completions are produced only when this thread
//! asks for them, so receive work is not interleaved with ours), then COOP_TASKRUN, then no flags. A ring
//! must be created on the thread that uses it: build [`UringRx`] on the receive thread.
//!
//! When the buffer ring runs dry the kernel ends a multishot request with ENOBUFS; the datagrams stay in
//! the socket's queue, and the request is re-armed once buffers are back (counted in
//! [`RxStats::rearmed`]).

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use io_uring::types::{BufRingEntry, RecvMsgOut, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, types, IoUring};
use vlbiflow_udp::DropCounter;

use crate::sys::{parse_cmsgs, segments};
use crate::RxStats;

/// Buffer group id of the provided-buffer ring.
const BGID: u16 = 1;
/// Control-message room per message: the GRO segment size and the drop counter (24 bytes each).
const CONTROL_LEN: usize = 64;
/// Bytes of provided buffers to aim for (rounded to a power-of-two number of buffers).
const RING_BYTES: usize = 32 << 20;
/// Largest UDP payload of a GRO super-datagram.
const GRO_PAYLOAD: usize = 1 << 16;
/// Size of the `io_uring_recvmsg_out` header in front of each received message (four u32).
const RECVMSG_OUT: usize = 16;
/// user_data of cancel requests (stream indices are below it).
const CANCEL: u64 = u64::MAX;

/// Whether io_uring with provided-buffer rings is available (io_uring may be disabled by
/// `kernel.io_uring_disabled`, or the kernel may predate 5.19).
pub fn probe() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| format!("io_uring_setup: {e}"))?;
    let mut p = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut p)
        .map_err(|e| format!("io_uring probe: {e}"))?;
    if !p.is_supported(opcode::RecvMsgMulti::CODE) {
        return Err("io_uring has no recvmsg".into());
    }
    BufRing::new(8, 64, &ring)
        .map(drop)
        .map_err(|e| format!("provided-buffer ring: {e}"))
}

/// A provided-buffer ring: `entries` descriptors in page-aligned memory shared with the kernel, plus the
/// buffers they point to. Buffer `bid` is bytes `bid * size ..` of `data`.
struct BufRing {
    ring: *mut BufRingEntry,
    ring_bytes: usize,
    entries: u16,
    tail: u16,
    size: usize,
    data: Box<[u8]>,
}

// SAFETY: the ring memory is owned by this value; moving it to another thread moves ownership.
unsafe impl Send for BufRing {}

impl BufRing {
    /// Allocates and registers a ring of `entries` (a power of two) buffers of `size` bytes, all provided.
    fn new(entries: u16, size: usize, uring: &IoUring) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two());
        let ring_bytes = (usize::from(entries) * std::mem::size_of::<BufRingEntry>()).max(4096);
        // SAFETY: an anonymous private mapping has no preconditions; the result is checked.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                ring_bytes,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }?;
        let mut r = BufRing {
            ring: ptr.cast(),
            ring_bytes,
            entries,
            tail: 0,
            size,
            data: vec![0u8; usize::from(entries) * size].into_boxed_slice(),
        };
        // SAFETY: the ring memory is page aligned, `entries` long, and lives (with the buffers) until this
        // value is dropped, which unregisters it first.
        unsafe {
            uring
                .submitter()
                .register_buf_ring_with_flags(ptr as u64, entries, BGID, 0)
        }?;
        for bid in 0..entries {
            r.push(bid);
        }
        r.publish();
        Ok(r)
    }

    /// Puts buffer `bid` back at the tail (visible to the kernel after [`publish`](Self::publish)).
    #[inline]
    fn push(&mut self, bid: u16) {
        let i = usize::from(self.tail & (self.entries - 1));
        let addr = self.data.as_ptr() as u64 + (usize::from(bid) * self.size) as u64;
        // SAFETY: i < entries, so the entry lies in the mapping; the kernel reads entries only up to the
        // published tail, which does not cover this one yet.
        let e = unsafe { &mut *self.ring.add(i) };
        e.set_addr(addr);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes pushed buffers visible to the kernel.
    #[inline]
    fn publish(&self) {
        // SAFETY: the tail field of entry 0 is a u16 in the shared mapping, written only by us (Release,
        // so the entries pushed before are visible first) and read by the kernel.
        let tail = unsafe { &*(BufRingEntry::tail(self.ring).cast_mut() as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// Buffer `bid`.
    #[inline]
    fn buf(&self, bid: u16) -> &[u8] {
        &self.data[usize::from(bid) * self.size..][..self.size]
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `new`; the owner unregistered the ring from the kernel
        // (or closed the io_uring) before dropping it.
        unsafe {
            let _ = rustix::mm::munmap(self.ring.cast(), self.ring_bytes);
        }
    }
}

/// Sets io_uring setup flags on a builder.
type SetupFlags = fn(&mut io_uring::Builder);

/// The `uring` and `uring-gro` paths.
pub struct UringRx {
    // Declared first: dropped (closing the ring) before the buffers it points into.
    ring: IoUring,
    socks: Vec<UdpSocket>,
    /// The msghdr template of the multishot requests (only name and control lengths matter); boxed so its
    /// address stays fixed while requests are armed.
    msghdr: Box<libc::msghdr>,
    bufs: BufRing,
    drops: Vec<DropCounter>,
    /// Streams whose multishot request ended and must be submitted again.
    rearm: Vec<usize>,
    armed: Vec<bool>,
    gro: bool,
    max_datagram: usize,
    setup: &'static str,
    stats: RxStats,
}

// SAFETY: `msghdr` holds only null pointers and lengths; everything else is owned.
unsafe impl Send for UringRx {}

impl UringRx {
    /// Serves `socks` (GRO set on them when `gro`); datagrams up to `max_datagram` bytes. Call on the
    /// thread that will poll.
    pub fn new(socks: Vec<UdpSocket>, max_datagram: usize, gro: bool) -> io::Result<UringRx> {
        Self::with_buffers(socks, max_datagram, gro, None)
    }

    /// As [`new`](Self::new) with `buffers` provided buffers (a power of two, at most 32768) instead of
    /// about 32 MiB of them.
    pub fn with_buffers(
        socks: Vec<UdpSocket>,
        max_datagram: usize,
        gro: bool,
        buffers: Option<u16>,
    ) -> io::Result<UringRx> {
        if buffers.is_some_and(|b| !b.is_power_of_two() || b > 32768) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "provided buffers must be a power of two up to 32768",
            ));
        }
        let n = socks.len() as u32;
        let sq = (2 * n).next_power_of_two().clamp(16, 4096);
        let cq = 8192;
        let attempts: [(&'static str, SetupFlags); 3] = [
            ("SINGLE_ISSUER|DEFER_TASKRUN", |b| {
                b.setup_single_issuer().setup_defer_taskrun();
            }),
            ("COOP_TASKRUN", |b| {
                b.setup_coop_taskrun();
            }),
            ("no setup flags", |_| {}),
        ];
        let mut last = None;
        let mut made = None;
        for (name, set) in attempts {
            let mut b = IoUring::builder();
            b.setup_cqsize(cq);
            set(&mut b);
            match b.build(sq) {
                Ok(r) => {
                    made = Some((r, name));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let (ring, setup) = match made {
            Some(x) => x,
            None => return Err(last.unwrap_or_else(|| io::Error::other("io_uring_setup failed"))),
        };
        let payload = if gro { GRO_PAYLOAD } else { max_datagram + 1 };
        let size = RECVMSG_OUT + CONTROL_LEN + payload;
        let entries = (RING_BYTES / size).clamp(64, 32768);
        // The largest power of two not above `entries`.
        let entries = buffers.unwrap_or(1u16 << (usize::BITS - 1 - entries.leading_zeros()));
        let bufs = BufRing::new(entries, size, &ring)?;
        // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
        let mut msghdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msghdr.msg_controllen = CONTROL_LEN as _;
        let k = socks.len();
        let mut rx = UringRx {
            ring,
            drops: vec![DropCounter::default(); k],
            rearm: (0..k).collect(),
            armed: vec![false; k],
            socks,
            msghdr,
            bufs,
            gro,
            max_datagram,
            setup,
            stats: RxStats::default(),
        };
        rx.arm()?;
        rx.stats.rearmed = 0;
        Ok(rx)
    }

    /// Queues a multishot request for every stream in `rearm` and submits them.
    fn arm(&mut self) -> io::Result<()> {
        if self.rearm.is_empty() {
            return Ok(());
        }
        for &i in &self.rearm {
            let fd = types::Fd(self.socks[i].as_raw_fd());
            let sqe = opcode::RecvMsgMulti::new(fd, &*self.msghdr, BGID)
                .build()
                .user_data(i as u64);
            // SAFETY: the msghdr and the buffer ring stay valid while the request is armed (owned by self,
            // which cancels every request before dropping them).
            while unsafe { self.ring.submission().push(&sqe) }.is_err() {
                self.ring.submit()?;
            }
            self.armed[i] = true;
            self.stats.rearmed += 1;
        }
        self.rearm.clear();
        self.ring.submit()?;
        Ok(())
    }

    /// Waits at most `timeout` for completions, then hands every received datagram to `f(stream, bytes)`.
    pub fn poll<F: FnMut(usize, &[u8])>(&mut self, timeout: Duration, mut f: F) -> io::Result<usize> {
        self.arm()?;
        let ts = Timespec::from(timeout);
        let args = SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        self.stats.syscalls += 1;
        let mut handed = 0;
        let mut failure = None;
        let bufs = &mut self.bufs;
        let stats = &mut self.stats;
        let drops = &mut self.drops;
        let msghdr = &*self.msghdr;
        let gro = self.gro;
        let max = self.max_datagram;
        for cqe in self.ring.completion() {
            let ud = cqe.user_data();
            if ud == CANCEL {
                continue;
            }
            let i = ud as usize;
            let flags = cqe.flags();
            let res = cqe.result();
            if let Some(bid) = cqueue::buffer_select(flags) {
                if res > 0 {
                    let buf = &bufs.buf(bid)[..res as usize];
                    match RecvMsgOut::parse(buf, msghdr) {
                        Ok(out) => {
                            let c = parse_cmsgs(out.control_data());
                            if let Some(d) = c.drop_counter {
                                drops[i].update(d);
                            }
                            stats.messages += 1;
                            if out.is_payload_truncated() {
                                stats.truncated += 1;
                            } else {
                                let data = out.payload_data();
                                let seg = if gro { c.gro_segment } else { None };
                                segments(data, seg, |d| {
                                    if d.len() > max {
                                        stats.truncated += 1;
                                    } else {
                                        stats.datagrams += 1;
                                        stats.bytes += d.len() as u64;
                                        handed += 1;
                                        f(i, d);
                                    }
                                });
                            }
                        }
                        Err(()) => stats.truncated += 1,
                    }
                }
                bufs.push(bid);
            }
            if !cqueue::more(flags) {
                self.armed[i] = false;
                self.rearm.push(i);
                if res < 0 && res != -libc::ENOBUFS && res != -libc::ECANCELED && failure.is_none() {
                    failure = Some(io::Error::from_raw_os_error(-res));
                }
            }
        }
        self.bufs.publish();
        match failure {
            Some(e) => Err(e),
            None => Ok(handed),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> RxStats {
        RxStats {
            kernel_drops: self.drops.iter().map(DropCounter::total).sum(),
            ..self.stats
        }
    }

    /// How the path is set up.
    pub fn detail(&self) -> String {
        format!(
            "io_uring ({}), multishot recvmsg, {} provided buffers of {} B{}",
            self.setup,
            self.bufs.entries,
            self.bufs.size,
            if self.gro { ", UDP GRO" } else { "" }
        )
    }
}

impl Drop for UringRx {
    fn drop(&mut self) {
        // Cancel every armed request and wait (bounded) for their last completions, so the kernel is done
        // with the msghdr and the buffers before they are freed.
        for i in 0..self.socks.len() {
            if !self.armed[i] {
                continue;
            }
            let sqe = opcode::AsyncCancel::new(i as u64).build().user_data(CANCEL);
            // SAFETY: a cancel request references no memory.
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                let _ = self.ring.submit();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.armed.iter().any(|&a| a) && Instant::now() < deadline {
            let ts = Timespec::from(Duration::from_millis(50));
            let _ = self
                .ring
                .submitter()
                .submit_with_args(1, &SubmitArgs::new().timespec(&ts));
            for cqe in self.ring.completion() {
                let ud = cqe.user_data();
                if ud != CANCEL && !cqueue::more(cqe.flags()) {
                    if let Some(a) = self.armed.get_mut(ud as usize) {
                        *a = false;
                    }
                }
            }
        }
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
    }
}
