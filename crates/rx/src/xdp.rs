//! AF_XDP receive path, generic (copy) mode: an XDP program on the interface that holds the streams' IPv4
//! address redirects UDP datagrams for the streams' port range to an AF_XDP socket bound to queue 0; the
//! kernel copies each frame into a UMEM of 4 KiB chunks and posts a descriptor on the RX ring; this thread
//! reads the ring, hands the UDP payload over and returns the chunk on the fill ring. Everything else
//! (ARP, the control connection, other ports) passes to the stack.
//!
//! Minimal and dependency-free on purpose: the sockets, rings and UMEM through `libc`, and a 24-instruction
//! XDP program assembled here and loaded with `bpf(2)`, attached through a BPF link (detached when the
//! path is dropped), so no BPF compiler, libbpf or libxdp is needed. The maintained binding (`xsk-rs`)
//! builds libxdp, whose dispatcher needs clang; this machine has none.
//!
//! Limits: needs CAP_NET_ADMIN and CAP_BPF/CAP_SYS_ADMIN (root); one chunk per frame, so a datagram must fit
//! 4 KiB less the kernel's 256-byte headroom and 42 bytes of Ethernet, IPv4 (no options) and UDP headers
//! ([`MAX_PAYLOAD`]); larger ones would need multi-buffer AF_XDP or a UMEM in huge pages. IPv4 only; the
//! stream sockets must have consecutive ports (see [`open_consecutive`]).

use std::ffi::c_void;
use std::io;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::RxStats;

/// UMEM chunk size (one frame per chunk).
pub const CHUNK: usize = 4096;
/// Headroom the kernel leaves in front of a frame it copies into a chunk (XDP_PACKET_HEADROOM).
const KERNEL_HEADROOM: usize = 256;
/// Ethernet + IPv4 (no options) + UDP headers.
const HEADERS: usize = 42;
/// Largest UDP payload this path takes.
pub const MAX_PAYLOAD: usize = CHUNK - KERNEL_HEADROOM - HEADERS;
/// Chunks in the UMEM, entries in each ring.
const FRAMES: u32 = 4096;

/// Whether AF_XDP sockets can be created here (root, kernel with XDP sockets).
pub fn probe() -> Result<(), String> {
    // SAFETY: plain syscall; the descriptor is closed right away.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!(
            "AF_XDP socket: {} (needs root)",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: closing the descriptor just created.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Opens `n` non-blocking UDP sockets on consecutive ports of `ip` (so that one port range names the
/// streams), trying a few bases derived from the process id. Returns the sockets and the first port.
pub fn open_consecutive(ip: IpAddr, n: usize) -> io::Result<(Vec<UdpSocket>, u16)> {
    let n16 =
        u16::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many streams"))?;
    let seed =
        std::process::id() as u64 ^ (std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_nanos() as u64));
    'base: for attempt in 0..64u64 {
        let base = 20_000
            + ((seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(attempt * 7919))
                % 30_000) as u16;
        let mut socks = Vec::with_capacity(n);
        for k in 0..n16 {
            match UdpSocket::bind((ip, base + k)) {
                Ok(s) => socks.push(s),
                Err(_) => continue 'base,
            }
        }
        for s in &socks {
            s.set_nonblocking(true)?;
        }
        return Ok((socks, base));
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free range of consecutive UDP ports",
    ))
}

/// The index of the interface holding IPv4 address `ip` in this network namespace.
fn ifindex_of(ip: Ipv4Addr) -> io::Result<u32> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `p` walks the list getifaddrs returned; entries stay valid until freeifaddrs.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says how to read it.
            let family = unsafe { (*ifa.ifa_addr).sa_family };
            if i32::from(family) == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                if u32::from_be(sin.sin_addr.s_addr) == u32::from(ip) {
                    // SAFETY: ifa_name is a NUL-terminated interface name.
                    found = Some(unsafe { libc::if_nametoindex(ifa.ifa_name) });
                    break;
                }
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: freeing the list getifaddrs allocated.
    unsafe { libc::freeifaddrs(list) };
    match found {
        Some(i) if i > 0 => Ok(i),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface has address {ip}"),
        )),
    }
}

fn bpf(cmd: i32, attr: &mut [u8; 128]) -> io::Result<i32> {
    // SAFETY: `attr` is a zero-initialised bpf_attr of 128 bytes for the command's fields.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

fn put32(a: &mut [u8; 128], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(a: &mut [u8; 128], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// One BPF instruction.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0xf);
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    b
}

/// The XDP program: UDP over IPv4 (no options) to a port in `lo..=hi` is redirected to the socket in
/// `map_fd` for the packet's receive queue; everything else passes to the stack.
fn program(map_fd: i32, lo: u16, hi: u16) -> Vec<[u8; 8]> {
    const PASS: i16 = 22;
    let j = |pc: i16| PASS - (pc + 1);
    vec![
        insn(0xbf, 6, 1, 0, 0),                 // 0: r6 = r1 (ctx)
        insn(0x61, 2, 1, 0, 0),                 // 1: r2 = ctx->data
        insn(0x61, 3, 1, 4, 0),                 // 2: r3 = ctx->data_end
        insn(0xbf, 4, 2, 0, 0),                 // 3: r4 = r2
        insn(0x07, 4, 0, 0, HEADERS as i32),    // 4: r4 += 42
        insn(0x2d, 4, 3, j(5), 0),              // 5: if r4 > r3 goto pass
        insn(0x69, 5, 2, 12, 0),                // 6: r5 = ethertype (as loaded, little endian)
        insn(0x55, 5, 0, j(7), 0x0008),         // 7: if r5 != htons(0x0800) goto pass
        insn(0x71, 5, 2, 14, 0),                // 8: r5 = version/IHL
        insn(0x55, 5, 0, j(9), 0x45),           // 9: if r5 != 0x45 goto pass
        insn(0x71, 5, 2, 23, 0),                // 10: r5 = protocol
        insn(0x55, 5, 0, j(11), 17),            // 11: if r5 != UDP goto pass
        insn(0x69, 5, 2, 36, 0),                // 12: r5 = destination port (network order)
        insn(0xdc, 5, 0, 0, 16),                // 13: r5 = be16(r5)
        insn(0xa5, 5, 0, j(14), i32::from(lo)), // 14: if r5 < lo goto pass
        insn(0x25, 5, 0, j(15), i32::from(hi)), // 15: if r5 > hi goto pass
        insn(0x61, 2, 6, 16, 0),                // 16: r2 = ctx->rx_queue_index
        insn(0x18, 1, 1, 0, map_fd),            // 17: r1 = map (BPF_PSEUDO_MAP_FD)
        insn(0, 0, 0, 0, 0),                    // 18: (second half of the 64-bit load)
        insn(0xb7, 3, 0, 0, 2),                 // 19: r3 = XDP_PASS if the queue has no socket
        insn(0x85, 0, 0, 0, 51),                // 20: call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),                 // 21: exit
        insn(0xb7, 0, 0, 0, 2),                 // 22 pass: r0 = XDP_PASS
        insn(0x95, 0, 0, 0, 0),                 // 23: exit
    ]
}

/// A ring shared with the kernel.
struct Ring {
    map: *mut c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
}

impl Ring {
    /// Maps a ring of `entries` entries of `entry` bytes at page offset `pgoff` of the socket.
    fn map(fd: i32, off: &libc::xdp_ring_offset, entries: u32, entry: usize, pgoff: u64) -> io::Result<Ring> {
        let map_len = off.desc as usize + entries as usize * entry;
        // SAFETY: mapping the socket's ring at the offset the kernel gave for it; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map as *mut u8;
        // SAFETY: the offsets lie inside the mapping (the kernel's layout of this ring).
        unsafe {
            Ok(Ring {
                map,
                map_len,
                producer: base.add(off.producer as usize) as *const AtomicU32,
                consumer: base.add(off.consumer as usize) as *const AtomicU32,
                desc: base.add(off.desc as usize),
                mask: entries - 1,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: a u32 counter in the live mapping, shared with the kernel.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { &*self.consumer }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in `map`.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// The `xdp` path.
pub struct XdpRx {
    // Dropped first: detaching the program sends traffic back to the stack.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    rx: Ring,
    fill: Ring,
    _comp: Ring,
    xsk: OwnedFd,
    umem: *mut c_void,
    umem_len: usize,
    /// Stream index per port (u16::MAX: not a stream).
    streams: Box<[u16]>,
    max_datagram: usize,
    ifindex: u32,
    stats: RxStats,
}

// SAFETY: the mappings are owned by this value; moving it moves ownership.
unsafe impl Send for XdpRx {}

fn sockopt<T>(fd: i32, name: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid value of the option's type and size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            name,
            v as *const T as *const c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl XdpRx {
    /// Receives the UDP datagrams for `ports` (consecutive, `ports[i]` is stream `i`) arriving on the
    /// interface that holds `ip`, up to `max_datagram` bytes of payload (at most [`MAX_PAYLOAD`]).
    pub fn new(ip: Ipv4Addr, ports: &[u16], max_datagram: usize) -> io::Result<XdpRx> {
        if max_datagram > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "AF_XDP here takes datagrams up to {MAX_PAYLOAD} bytes (one 4 KiB UMEM chunk); {max_datagram} would \
                     need multi-buffer AF_XDP or a UMEM in huge pages"
                ),
            ));
        }
        let (lo, hi) = match (ports.iter().min(), ports.iter().max()) {
            (Some(&lo), Some(&hi)) if usize::from(hi - lo) + 1 == ports.len() => (lo, hi),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "AF_XDP streams need consecutive ports",
                ));
            }
        };
        let ifindex = ifindex_of(ip)?;
        // SAFETY: plain syscall; the result is checked and owned.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let xsk = owned(fd);
        let umem_len = FRAMES as usize * CHUNK;
        // SAFETY: an anonymous private mapping; checked below, unmapped on drop.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        struct Unmap(*mut c_void, usize);
        impl Drop for Unmap {
            fn drop(&mut self) {
                // SAFETY: unmapping the UMEM mapped above (only on an error before it is handed over).
                unsafe { libc::munmap(self.0, self.1) };
            }
        }
        let guard = Unmap(umem, umem_len);
        let reg = libc::xdp_umem_reg {
            addr: umem as u64,
            len: umem_len as u64,
            chunk_size: CHUNK as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sockopt(fd, libc::XDP_UMEM_REG, &reg)?;
        sockopt(fd, libc::XDP_UMEM_FILL_RING, &FRAMES)?;
        sockopt(fd, libc::XDP_UMEM_COMPLETION_RING, &FRAMES)?;
        sockopt(fd, libc::XDP_RX_RING, &FRAMES)?;
        // SAFETY: an all-zero xdp_mmap_offsets is valid for getsockopt to fill.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as u32;
        // SAFETY: `off` has room for `len` bytes.
        if unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                &mut off as *mut _ as *mut c_void,
                &mut len,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        let fill = Ring::map(fd, &off.fr, FRAMES, 8, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(fd, &off.cr, FRAMES, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = Ring::map(
            fd,
            &off.rx,
            FRAMES,
            std::mem::size_of::<libc::xdp_desc>(),
            libc::XDP_PGOFF_RX_RING as u64,
        )?;
        // Every chunk goes on the fill ring.
        for i in 0..FRAMES {
            // SAFETY: i < entries: inside the fill ring's descriptor array.
            unsafe {
                (fill.desc as *mut u64)
                    .add(i as usize)
                    .write((i as u64) * CHUNK as u64)
            };
        }
        fill.producer().store(FRAMES, Ordering::Release);
        let sa = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: 0,
            sxdp_shared_umem_fd: 0,
        };
        // SAFETY: binding to a valid sockaddr_xdp of its size.
        if unsafe {
            libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as u32,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The XSKMAP: queue 0 -> this socket.
        let mut a = [0u8; 128];
        put32(&mut a, 0, 17); // BPF_MAP_TYPE_XSKMAP
        put32(&mut a, 4, 4);
        put32(&mut a, 8, 4);
        put32(&mut a, 12, 1);
        let map = owned(bpf(0, &mut a).map_err(|e| io::Error::new(e.kind(), format!("bpf map: {e}")))?);
        let (key, value) = (0u32, fd as u32);
        let mut a = [0u8; 128];
        put32(&mut a, 0, map.as_raw_fd() as u32);
        put64(&mut a, 8, &key as *const u32 as u64);
        put64(&mut a, 16, &value as *const u32 as u64);
        bpf(2, &mut a).map_err(|e| io::Error::new(e.kind(), format!("bpf map update: {e}")))?;
        let prog = program(map.as_raw_fd(), lo, hi);
        let license = c"Dual MIT/GPL";
        let mut log = vec![0u8; 64 << 10];
        let mut a = [0u8; 128];
        put32(&mut a, 0, 6); // BPF_PROG_TYPE_XDP
        put32(&mut a, 4, prog.len() as u32);
        put64(&mut a, 8, prog.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        put32(&mut a, 24, 1);
        put32(&mut a, 28, log.len() as u32);
        put64(&mut a, 32, log.as_mut_ptr() as u64);
        a[48..56].copy_from_slice(b"vf_xsk\0\0");
        put32(&mut a, 68, 37); // expected_attach_type BPF_XDP
        let prog_fd = owned(bpf(5, &mut a).map_err(|e| {
            let text =
                String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned();
            io::Error::new(e.kind(), format!("bpf prog load: {e}: {}", text.trim()))
        })?);
        let mut a = [0u8; 128];
        put32(&mut a, 0, prog_fd.as_raw_fd() as u32);
        put32(&mut a, 4, ifindex);
        put32(&mut a, 8, 37); // BPF_XDP
        put32(&mut a, 12, 1 << 1); // XDP_FLAGS_SKB_MODE: generic
        let link = owned(bpf(28, &mut a).map_err(|e| io::Error::new(e.kind(), format!("attach XDP: {e}")))?);
        std::mem::forget(guard);
        let mut streams = vec![u16::MAX; 1 << 16].into_boxed_slice();
        for (i, &p) in ports.iter().enumerate() {
            streams[usize::from(p)] = i as u16;
        }
        Ok(XdpRx {
            _link: link,
            _prog: prog_fd,
            _map: map,
            rx,
            fill,
            _comp: comp,
            xsk,
            umem,
            umem_len,
            streams,
            max_datagram,
            ifindex,
            stats: RxStats::default(),
        })
    }

    /// Waits at most `timeout`, then hands every frame on the RX ring to `f(stream, payload)`.
    pub fn poll<F: FnMut(usize, &[u8])>(&mut self, timeout: Duration, mut f: F) -> io::Result<usize> {
        let cons = self.rx.consumer().load(Ordering::Relaxed);
        let mut prod = self.rx.producer().load(Ordering::Acquire);
        if prod == cons {
            // Whole milliseconds, as poll(2) takes them; an interrupted wait returns empty-handed below.
            let ms = Duration::from_millis(timeout.as_millis().min(i32::MAX as u128) as u64);
            vlbiflow_udp::poll::wait(&self.xsk, vlbiflow_udp::poll::PollFlags::IN, ms)?;
            self.stats.syscalls += 1;
            prod = self.rx.producer().load(Ordering::Acquire);
        }
        let n = prod.wrapping_sub(cons);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: the UMEM mapping lives as long as self; the kernel writes only chunks on the fill ring,
        // and the chunks read here were handed to us on the RX ring and are not yet returned.
        let umem = unsafe { std::slice::from_raw_parts(self.umem as *const u8, self.umem_len) };
        let fill_prod = self.fill.producer().load(Ordering::Relaxed);
        let mut handed = 0;
        for k in 0..n {
            let i = (cons.wrapping_add(k) & self.rx.mask) as usize;
            // SAFETY: i <= mask: inside the RX ring's descriptor array, published by the kernel (Acquire).
            let d = unsafe { (self.rx.desc as *const libc::xdp_desc).add(i).read() };
            let start = (d.addr as usize).min(umem.len());
            let end = (start + d.len as usize).min(umem.len());
            let frame = &umem[start..end];
            self.stats.messages += 1;
            if frame.len() >= HEADERS {
                let port = u16::from_be_bytes([frame[36], frame[37]]);
                let udp_len = usize::from(u16::from_be_bytes([frame[38], frame[39]]));
                let payload = &frame[HEADERS..(HEADERS + udp_len.saturating_sub(8)).min(frame.len())];
                let s = self.streams[usize::from(port)];
                if s != u16::MAX {
                    if payload.len() > self.max_datagram || udp_len.saturating_sub(8) != payload.len() {
                        self.stats.truncated += 1;
                    } else {
                        self.stats.datagrams += 1;
                        self.stats.bytes += payload.len() as u64;
                        handed += 1;
                        f(usize::from(s), payload);
                    }
                }
            }
            // The chunk goes back on the fill ring.
            let j = (fill_prod.wrapping_add(k) & self.fill.mask) as usize;
            // SAFETY: j <= mask: inside the fill ring; this entry was consumed by the kernel (we never put
            // more chunks on it than the ring holds).
            unsafe {
                (self.fill.desc as *mut u64)
                    .add(j)
                    .write(d.addr & !(CHUNK as u64 - 1))
            };
        }
        self.rx.consumer().store(cons.wrapping_add(n), Ordering::Release);
        self.fill
            .producer()
            .store(fill_prod.wrapping_add(n), Ordering::Release);
        Ok(handed)
    }

    /// Counters so far (kernel drops: the socket's rx_dropped, RX ring full and fill ring empty counts).
    pub fn stats(&self) -> RxStats {
        // SAFETY: an all-zero xdp_statistics is valid for getsockopt to fill.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as u32;
        // SAFETY: `st` has room for `len` bytes.
        let ok = unsafe {
            libc::getsockopt(
                self.xsk.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                &mut st as *mut _ as *mut c_void,
                &mut len,
            )
        } == 0;
        RxStats {
            kernel_drops: if ok {
                st.rx_dropped + st.rx_ring_full + st.rx_fill_ring_empty_descs
            } else {
                0
            },
            ..self.stats
        }
    }

    /// How the path is set up.
    pub fn detail(&self) -> String {
        format!(
            "AF_XDP generic (copy) mode on ifindex {} queue 0, {FRAMES} chunks of {CHUNK} B, XDP program via BPF link",
            self.ifindex
        )
    }
}

impl Drop for XdpRx {
    fn drop(&mut self) {
        // SAFETY: unmapping the UMEM mapped in `new`. The kernel pinned its pages when it was registered and
        // holds them until the socket (closed by the field drops after this) releases the UMEM, so a frame
        // still being copied lands in pinned pages, never in memory reused by anyone else.
        unsafe { libc::munmap(self.umem, self.umem_len) };
    }
}
