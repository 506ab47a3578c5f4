//! The sender's output path: payloads read in large windows (one `pread` per window of several MiB, the
//! kernel asked to read the next window ahead) and hashed as they are read (each block's digest, which
//! both its datagram's tag and the chunk hash use, computed piece by piece right after the `pread` while
//! the bytes are in the reading core's cache), headers kept apart, and datagrams handed to the kernel as
//! GSO messages gathered straight from the window (`sendmmsg` of messages whose parts are header, payload,
//! header, payload, ...: the kernel cuts each message into datagrams), so the payload is copied once, by
//! the kernel, from the window into the socket buffers. The last few windows are kept after they were
//! sent, so retransmissions (a few percent, of data sent about one RTT before) go out from them the same
//! way, with the digests computed when they were read. Older retransmissions and, with encryption, every
//! payload (it is encrypted in place) are read or copied into an arena of datagram-sized slots.
//!
//! Nothing here allocates per datagram: the windows, the arena, the headers and the batch are allocated
//! once per transfer.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use vlbiflow_udp::BatchSender;
use vlbiflow_xfer_proto::wire::{seal_encrypted_parts, HEADER_LEN, MAX_PAYLOAD};
use vlbiflow_xfer_proto::{Sender, Transmit};

use super::read_ahead::ReadAhead;
use super::window::{fill, next_start, FillMode, Held, Seg, Win};
use crate::source::{DirectReads, FdCache, SourceSet};

/// Windows kept after they were sent, for retransmissions, which come about 1.1-1.3 RTT after the first
/// send: 6 x 8 MiB hold the last 200 ms at 2 Gb/s (40 ms at 10 Gb/s). Older data is read again (from
/// the page cache, or from the disk for a recording read past the cache).
const KEPT: usize = 6;
/// Datagrams prepared per round at most (then control and timers get a turn).
pub const MAX_ROUND: usize = 256;
/// GSO messages per `sendmmsg`.
const GSO_MSGS: usize = 64;
/// Largest GSO message (the kernel's limit for one UDP send).
const GSO_MAX_BYTES: usize = 65_507;
/// Most datagrams in one GSO message (the kernel's UDP_MAX_SEGMENTS is 64 on older kernels).
const GSO_MAX_SEGMENTS: usize = 64;
/// Set to `0` or `off`, the sender sends one datagram per message instead of GSO messages (for comparing
/// the two; GSO is on otherwise, and turns itself off when the kernel refuses it).
pub const GSO_ENV: &str = "VLBIFLOW_XFER_GSO";

/// Window `k` of a transfer: 0 the current one, then the kept ones, newest first.
fn window_of<'a>(win: &'a Win, kept: &'a std::collections::VecDeque<Win>, k: usize) -> &'a Win {
    if k == 0 {
        win
    } else {
        &kept[k - 1]
    }
}

/// Where a datagram's payload is.
#[derive(Debug, Clone, Copy)]
enum Src {
    /// In window `k` (0 the current one, then the kept ones, newest first) at this position.
    Window(usize, usize),
    /// In arena slot `n`.
    Arena(usize),
}

#[derive(Debug, Clone, Copy)]
struct Desc {
    src: Src,
    len: usize,
}

/// The output state of one sending transfer.
pub struct Output {
    win: Win,
    /// Windows sent before the current one, newest first, at most [`KEPT`]: retransmissions (of data sent
    /// about one RTT before) are sent from them as new data is, with no read, copy or hash.
    kept: std::collections::VecDeque<Win>,
    /// The block size when blocks are BLAKE3 subtrees (windows are then hashed as they are read).
    sub: Option<u64>,
    /// Index of the segment the last lookup found (new data is read in order).
    hint: usize,
    arena: Vec<u8>,
    hdrs: Vec<[u8; HEADER_LEN]>,
    descs: Vec<Desc>,
    tx: BatchSender,
    fds: FdCache,
    ahead: ReadAhead,
    held: Held,
    aead_key: Option<[u8; 32]>,
    /// `sendmmsg` calls that failed (the datagrams count as lost; the receiver reports them).
    pub send_errors: u64,
    /// Runs of equal-size datagrams are sent as GSO messages: on unless [`GSO_ENV`] turns it off, or
    /// the kernel refused a GSO send.
    gso: bool,
    /// The kernel refused a GSO send of this transfer (datagrams go out one per message since).
    pub gso_refused: bool,
    /// Bytes read with `O_DIRECT`, by both threads.
    direct: Arc<AtomicU64>,
    /// Which ranges are read with `O_DIRECT`.
    reads: DirectReads,
    /// Windows read.
    pub windows: u64,
    /// Of those, windows the reading thread had read ahead.
    pub windows_ahead: u64,
    /// Time the data thread spent waiting for a window the reading thread had not finished, or reading
    /// one itself: time it could not send new data for its disk.
    pub read_wait: Duration,
}

/// What a round did.
pub struct Round {
    /// Datagrams sent.
    pub datagrams: usize,
    /// The sender could not read its data (the transfer is aborted with this reason).
    pub read_error: Option<String>,
}

impl Output {
    /// Output of the data of `set` in datagrams of at most `max_payload` payload bytes, encrypted with
    /// `aead_key` if given; with `subtree_block` ([`Sender::subtree_block`]) the digests of the blocks are
    /// computed as windows are read. Windows pass over the chunks `held` names. With `realtime` the
    /// reading thread runs in the real-time class, as the data thread it feeds does (`--realtime`): in the
    /// ordinary class, behind the real-time threads of a busy host, it fell behind by up to 200 ms and the
    /// data thread waited for its window. `reads` says which ranges are read past the page cache.
    pub fn new(
        set: Arc<SourceSet>,
        max_payload: usize,
        aead_key: Option<[u8; 32]>,
        subtree_block: Option<u64>,
        held: Held,
        realtime: bool,
        reads: DirectReads,
    ) -> Output {
        let dgram = HEADER_LEN + max_payload.min(MAX_PAYLOAD);
        let segs = (GSO_MAX_BYTES / dgram).clamp(1, GSO_MAX_SEGMENTS);
        let direct = Arc::new(AtomicU64::new(0));
        let mode = FillMode {
            sub: subtree_block,
            defer: false,
            direct: reads,
        };
        Output {
            win: Win::new(),
            kept: std::collections::VecDeque::with_capacity(KEPT + 1),
            sub: subtree_block,
            hint: 0,
            arena: vec![0u8; MAX_ROUND * max_payload.min(MAX_PAYLOAD)],
            hdrs: vec![[0u8; HEADER_LEN]; MAX_ROUND],
            descs: Vec::with_capacity(MAX_ROUND),
            tx: BatchSender::with_parts(GSO_MSGS, 2 * segs),
            fds: FdCache::default(),
            ahead: ReadAhead::new(set, mode, held.clone(), direct.clone(), realtime),
            held,
            direct,
            reads,
            aead_key,
            send_errors: 0,
            gso: gso_from_env(),
            gso_refused: false,
            windows: 0,
            windows_ahead: 0,
            read_wait: Duration::ZERO,
        }
    }

    /// Bytes of new data read from the disk past the page cache so far.
    pub fn direct_bytes(&self) -> u64 {
        self.direct.load(Relaxed)
    }

    fn slot_len(&self) -> usize {
        self.arena.len() / MAX_ROUND
    }

    /// Finds `len` bytes of `file` at `offset` in the current window or a kept one: where they are and the
    /// digest of the block they are, if they are one the window has hashed.
    fn find(&mut self, file: usize, offset: u64, len: usize) -> Option<(Src, Option<[u8; 32]>)> {
        let found =
            |s: &Seg| s.file == file && offset >= s.offset && offset + len as u64 <= s.offset + s.len as u64;
        let sub = self.sub;
        let at = |k: usize, w: &Win, s: &Seg| {
            let digest = sub.and_then(|b| {
                let whole = offset % b == 0 && len as u64 == b.min(s.size - offset);
                let i = offset.checked_sub(s.dig_from)? / b;
                (whole && i < s.dig_n as u64).then(|| w.digests[s.dig + i as usize])
            });
            (Src::Window(k, s.at + (offset - s.offset) as usize), digest)
        };
        // new data: the segment found last or the next one
        for i in [self.hint, self.hint + 1] {
            if let Some(s) = self.win.segs.get(i) {
                if found(s) {
                    self.hint = i;
                    return Some(at(0, &self.win, s));
                }
            }
        }
        // retransmissions: anywhere in the windows
        let wins = std::iter::once(&self.win).chain(self.kept.iter());
        for (k, w) in wins.enumerate() {
            if let Some(s) = w.segs.iter().find(|s| found(s)) {
                return Some(at(k, w, s));
            }
        }
        None
    }

    /// The bytes `src` names.
    #[cfg(test)]
    fn bytes_at(&self, src: Src, len: usize) -> &[u8] {
        match src {
            Src::Window(k, w) => &window_of(&self.win, &self.kept, k).bytes()[w..w + len],
            Src::Arena(a) => &self.arena[a * self.slot_len()..a * self.slot_len() + len],
        }
    }

    /// The window just sent becomes the newest kept one; returns buffers for the next window (the oldest
    /// kept window's once [`KEPT`] are kept, else new ones: a few per transfer).
    fn keep(&mut self, old: Win) -> Win {
        if old.segs.is_empty() {
            return old;
        }
        self.kept.push_front(old);
        if self.kept.len() > KEPT {
            self.kept.pop_back().expect("more than KEPT")
        } else {
            Win::new()
        }
    }

    /// Makes the window hold `file` from `offset` on: the window the reading thread prepared if it is that
    /// one (the usual case: new data is sent in order), else read here. Then the reading thread is asked for
    /// the window after it, so the pacing loop never waits for a read of several MiB.
    fn refill(&mut self, set: &SourceSet, file: usize, offset: u64) -> std::io::Result<()> {
        self.windows += 1;
        let want = next_start(set, &self.held, file, offset);
        let t0 = std::time::Instant::now();
        let got = self.ahead.take(want);
        self.read_wait += t0.elapsed();
        let new = match got? {
            Some(got) => {
                self.windows_ahead += 1;
                got.win
            }
            None => {
                let mut w = self.ahead.spare();
                let t0 = std::time::Instant::now();
                let mode = FillMode {
                    sub: self.sub,
                    defer: false,
                    direct: self.reads,
                };
                let filled = fill(set, &self.held, &mut self.fds, &mut w, (file, offset), mode);
                self.read_wait += t0.elapsed();
                match filled {
                    Ok(direct) => self.direct.fetch_add(direct, Relaxed),
                    Err(e) => {
                        self.ahead.spare = Some(w);
                        return Err(e);
                    }
                };
                w
            }
        };
        let old = std::mem::replace(&mut self.win, new);
        self.hint = 0;
        let spare = self.keep(old);
        self.ahead.request(set, &self.held, spare, &self.win.segs);
        Ok(())
    }

    /// Sends up to [`MAX_ROUND`] datagrams the protocol's sender releases now: headers, payloads from the
    /// window (or read into the arena), sealed (and encrypted) and sent in GSO batches.
    pub fn round(
        &mut self,
        s: &mut Sender,
        set: &SourceSet,
        sock: &UdpSocket,
        now: std::time::Instant,
        mut on_new: impl FnMut(&Transmit),
    ) -> Round {
        let mut sent = 0;
        let slot = self.slot_len();
        while self.descs.len() < MAX_ROUND {
            let Some(t) = s.poll_transmit(now) else { break };
            let h = t.header;
            let (file, len) = (h.file as usize, h.len as usize);
            let mut found = self.find(file, h.offset, len);
            if found.is_none() && !h.retransmit {
                // new data beyond the window: what is queued refers to the window, so it goes first
                sent += self.flush(sock);
                if let Err(e) = self.refill(set, file, h.offset) {
                    return Round {
                        datagrams: sent,
                        read_error: Some(e.to_string()),
                    };
                }
                found = self.find(file, h.offset, len);
            }
            let digest = found.and_then(|(_, d)| d);
            let src = found.map(|(src, _)| src);
            let n = self.descs.len();
            t.emit_header(&mut self.hdrs[n]);
            let src = match (src, self.aead_key.is_some()) {
                (Some(Src::Window(k, w)), false) => Src::Window(k, w),
                (Some(Src::Window(k, w)), true) => {
                    // encrypted in place: a copy of its own
                    let win = window_of(&self.win, &self.kept, k);
                    self.arena[n * slot..n * slot + len].copy_from_slice(&win.bytes()[w..w + len]);
                    Src::Arena(n)
                }
                _ => {
                    let buf = &mut self.arena[n * slot..n * slot + len];
                    if let Err(e) = set.read_at(&mut self.fds, file, h.offset, buf) {
                        return Round {
                            datagrams: sent + self.flush(sock),
                            read_error: Some(e.to_string()),
                        };
                    }
                    Src::Arena(n)
                }
            };
            let hdr = &mut self.hdrs[n];
            match src {
                Src::Window(k, w) => {
                    let win = window_of(&self.win, &self.kept, k);
                    s.seal_parts_with(hdr, &win.bytes()[w..w + len], digest)
                }
                Src::Arena(a) => {
                    let payload = &mut self.arena[a * slot..a * slot + len];
                    s.seal_parts_with(hdr, payload, digest);
                    if let Some(k) = &self.aead_key {
                        seal_encrypted_parts(k, hdr, payload);
                    }
                }
            }
            if !h.retransmit {
                on_new(&t);
            }
            self.descs.push(Desc { src, len });
        }
        sent += self.flush(sock);
        Round {
            datagrams: sent,
            read_error: None,
        }
    }

    /// Sends what is queued: runs of datagrams of one length become GSO messages (one datagram per
    /// message once GSO is off). A GSO message the kernel refuses (EIO: the device cannot checksum UDP or
    /// the route is IPsec; EINVAL: a segment with its headers exceeds the path MTU, or UDP checksums are
    /// off on the socket) turns GSO off for the rest of the transfer, and that message and the rest of its
    /// batch go out again one datagram each.
    fn flush(&mut self, sock: &UdpSocket) -> usize {
        let total = self.descs.len();
        if total == 0 {
            return 0;
        }
        let slot = self.slot_len();
        let dgram_max = GSO_MAX_BYTES;
        let (win, kept, arena, hdrs, descs) = (&self.win, &self.kept, &self.arena, &self.hdrs, &self.descs);
        let payload = |i: usize| -> &[u8] {
            let d = descs[i];
            match d.src {
                Src::Window(k, w) => &window_of(win, kept, k).bytes()[w..w + d.len],
                Src::Arena(a) => &arena[a * slot..a * slot + d.len],
            }
        };
        let mut parts: Vec<&[u8]> = Vec::with_capacity(self.tx.parts());
        // the first datagram of each message of the batch being sent
        let mut starts = [0usize; GSO_MSGS];
        let mut i = 0;
        while i < total {
            let segs_max = if self.gso { self.tx.parts() / 2 } else { 1 };
            let mut batch = self.tx.batch();
            while i < total && !batch.is_full() {
                starts[batch.len()] = i;
                // a run of equal lengths (only the last datagram of a GSO message may be shorter)
                let seg = HEADER_LEN + descs[i].len;
                let mut j = i;
                parts.clear();
                while j < total && j - i < segs_max && (j - i + 1) * seg <= dgram_max {
                    let l = HEADER_LEN + descs[j].len;
                    if l > seg {
                        break;
                    }
                    parts.push(&hdrs[j][..]);
                    parts.push(payload(j));
                    j += 1;
                    if l < seg {
                        break;
                    }
                }
                let ok = if j - i == 1 {
                    batch.push(&parts)
                } else {
                    batch.push_gso(&parts, seg as u16).unwrap_or(false)
                };
                debug_assert!(ok, "room checked");
                i = j;
            }
            match batch.flush(sock) {
                Ok(_) => {}
                Err(e) if self.gso && gso_refused(&e) => {
                    self.gso = false;
                    self.gso_refused = true;
                    i = starts[e.sent.messages];
                }
                // lost datagrams are reported by the receiver and sent again
                Err(_) => self.send_errors += 1,
            }
        }
        self.descs.clear();
        total
    }
}

/// Whether GSO sends are on: unless [`GSO_ENV`] is `0` or `off` (for comparing the two).
fn gso_from_env() -> bool {
    !matches!(std::env::var(GSO_ENV).as_deref(), Ok("0" | "off"))
}

/// Whether a failed send is the kernel refusing UDP GSO (the same datagrams may go out one by one).
fn gso_refused(e: &vlbiflow_udp::SendError) -> bool {
    e.gso_segment.is_some() && matches!(e.source.raw_os_error(), Some(libc::EIO | libc::EINVAL))
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::window::*;
    use super::*;
    use crate::source::DIRECT_ALIGN;
    use vlbiflow_xfer_proto::hash::block_digest;
    use vlbiflow_xfer_proto::timing::DEPTH;

    pub(in crate::send) fn byte(file: usize, off: u64) -> u8 {
        (off.wrapping_mul(31) ^ (file as u64 * 131) ^ (off >> 9)) as u8
    }

    /// Files `f0`, `f1`, ... of `sizes` in `dir`, each byte given by [`byte`], as plain files of a set.
    pub(in crate::send) fn files(dir: &std::path::Path, sizes: &[u64]) -> SourceSet {
        let mut set = SourceSet::default();
        for (i, &size) in sizes.iter().enumerate() {
            let p = dir.join(format!("f{i}"));
            std::fs::write(&p, (0..size).map(|o| byte(i, o)).collect::<Vec<u8>>()).unwrap();
            set.add_plain(format!("f{i}"), p, size);
        }
        set
    }

    /// Writes back and drops from the page cache every file of `set`.
    fn evict(set: &SourceSet) {
        for p in &set.paths {
            let f = std::fs::File::open(p).unwrap();
            f.sync_all().unwrap();
            rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        }
    }

    /// Whether the page cache can be bypassed for `set`: its file system reads with `O_DIRECT` (tmpfs on
    /// older kernels does not) and the kernel says what the cache holds (cachestat, Linux 6.5 on).
    fn direct_and_cache_known(set: &SourceSet) -> (bool, bool) {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&set.paths[0])
            .is_ok();
        let first = std::fs::File::open(&set.paths[0]).unwrap();
        (direct, crate::source::cached_pages(&first, 0, 1).is_some())
    }

    /// Sends a file of `size` bytes in 1 KiB blocks through `Output` over loopback from `sock`, checks
    /// every datagram a plain receiving socket (no GRO: each datagram on its own) gets against the file
    /// (each payload is the file's bytes where its header says, every block comes once), and returns
    /// the output's GSO state (on, refused) and the send counters.
    fn send_over_loopback(sock: &UdpSocket, size: u64) -> (bool, bool, vlbiflow_udp::SendStats) {
        use vlbiflow_xfer_proto::wire::DataPacket;
        use vlbiflow_xfer_proto::{RateConfig, SenderConfig};
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // room for a round of single datagrams (each takes a few KB of the buffer); capped by rmem_max
        socket2::SockRef::from(&rx).set_recv_buffer_size(4 << 20).unwrap();
        sock.connect(rx.local_addr().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let set = Arc::new(files(dir.path(), &[size]));
        let mut sc = SenderConfig::new(7, RateConfig::fixed(1e9));
        sc.block_size = 1024;
        sc.chunk_size = 8192;
        sc.max_burst = 64;
        let mut s = Sender::new(sc);
        s.add_file("f0", size, None).unwrap();
        s.close();
        let mut out = Output::new(
            set.clone(),
            1024,
            None,
            s.subtree_block(),
            Held::default(),
            false,
            DirectReads::On,
        );
        let blocks = size.div_ceil(1024) as usize;
        let mut seen = vec![false; blocks];
        let mut buf = vec![0u8; 65536];
        let mut now = std::time::Instant::now();
        // one round at a time, each drained before the next (the receiving socket holds a round)
        let mut got = 0;
        while got < blocks {
            let r = out.round(&mut s, &set, sock, now, |_| {});
            assert!(r.read_error.is_none());
            for _ in 0..r.datagrams {
                let n = rx.recv(&mut buf).unwrap();
                let p = DataPacket::new_checked(&buf[..n]).unwrap();
                assert_eq!(p.flags() & vlbiflow_xfer_proto::wire::FLAG_RETRANSMIT, 0);
                let (o, len) = (p.offset(), p.payload_len() as usize);
                let want: Vec<u8> = (0..len as u64).map(|k| byte(0, o + k)).collect();
                assert!(p.payload() == &want[..], "payload at {o}");
                assert!(
                    !std::mem::replace(&mut seen[(o / 1024) as usize], true),
                    "{o} twice"
                );
                got += 1;
            }
            now += Duration::from_millis(1);
        }
        assert!(seen.iter().all(|&b| b));
        (out.gso, out.gso_refused, out.tx.stats())
    }

    /// Runs of equal-size datagrams leave as GSO messages (fewer messages than datagrams), and each
    /// datagram arrives on its own with the file's bytes; the short last one ends its message.
    #[test]
    fn runs_of_datagrams_leave_as_gso_messages() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (gso, refused, st) = send_over_loopback(&sock, 200 * 1024 - 100);
        assert!(gso && !refused);
        assert_eq!(st.datagrams, 200);
        assert!(st.messages < 20, "{st:?}");
    }

    /// A socket with UDP checksums off (`SO_NO_CHECK`), on which the kernel refuses every GSO send with
    /// EINVAL: the refused message and the rest go out one datagram per message, GSO stays off, and no
    /// datagram is lost.
    #[test]
    #[allow(unsafe_code)]
    fn a_refused_gso_send_falls_back_to_one_datagram_per_message() {
        use std::os::fd::AsRawFd;
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let one: libc::c_int = 1;
        // SAFETY: a valid socket and a c_int option value of the size given.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                &one as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        let (gso, refused, st) = send_over_loopback(&sock, 200 * 1024 - 100);
        assert!(!gso && refused);
        assert_eq!((st.datagrams, st.messages), (200, 200), "{st:?}");
    }

    /// Files of odd sizes (some far smaller than a window, one spanning several, one empty), read through
    /// windows in order and with jumps (a resume skips held chunks): every lookup finds the right bytes,
    /// whether the window came from the reading thread or was read on the spot, and every whole block
    /// sent in order comes with its digest, equal to the one the protocol would compute.
    #[test]
    fn windows_hold_the_right_bytes_in_order_and_after_jumps() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [
            3 * WINDOW as u64 + 12_345,
            0,
            700,
            WINDOW as u64 / 2 + 1,
            9_000,
            2 * WINDOW as u64,
        ];
        let set = Arc::new(files(dir.path(), &sizes));
        let sub = Some(8192);
        let mut out = Output::new(
            set.clone(),
            8192,
            None,
            sub,
            Held::default(),
            false,
            DirectReads::On,
        );
        let check = |out: &mut Output, f: usize, o: u64, len: usize| -> bool {
            if out.find(f, o, len).is_none() {
                out.refill(&set, f, o).unwrap();
            }
            let (src, digest) = out.find(f, o, len).expect("in the window after a refill");
            let bytes: Vec<u8> = (0..len as u64).map(|k| byte(f, o + k)).collect();
            assert!(out.bytes_at(src, len) == &bytes[..], "file {f} offset {o}");
            if let Some(d) = digest {
                assert_eq!(d, block_digest(sub, o, &bytes), "digest of file {f} offset {o}");
            }
            digest.is_some()
        };
        // in order, datagram by datagram
        for (f, &size) in sizes.iter().enumerate() {
            let mut o = 0;
            while o < size {
                let len = 8192.min(size - o) as usize;
                assert!(check(&mut out, f, o, len), "no digest for file {f} offset {o}");
                o += len as u64;
            }
        }
        let (read, ahead) = (out.windows, out.windows_ahead);
        // every window after the first of each run came from the reading thread
        assert!(ahead >= read - 2, "{ahead} of {read} windows read ahead");
        // with jumps forward and back
        for &(f, o) in &[
            (0usize, 2 * WINDOW as u64),
            (5, 8192),
            (0, 0),
            (3, 100),
            (5, WINDOW as u64 + 5),
        ] {
            // not whole blocks: no digest (the protocol hashes them itself)
            assert!(!check(&mut out, f, o, 4000.min((sizes[f] - o) as usize)));
        }
        assert!(read >= 6, "{read} windows");
    }

    /// After a jump forward (resume passes over what the receiver holds), in order again: the windows
    /// after the first come from the reading thread again, with the right bytes; the ones it had read
    /// ahead before the jump are passed over and their buffers reused.
    #[test]
    fn reading_ahead_resumes_after_a_jump() {
        let dir = tempfile::tempdir().unwrap();
        let w = WINDOW as u64;
        let set = Arc::new(files(dir.path(), &[16 * w + 100]));
        let mut out = Output::new(
            set.clone(),
            8192,
            None,
            Some(8192),
            Held::default(),
            false,
            DirectReads::On,
        );
        let run = |out: &mut Output, from: u64, to: u64| {
            let (read, ahead) = (out.windows, out.windows_ahead);
            let mut o = from;
            while o < to {
                if out.find(0, o, 8192).is_none() {
                    out.refill(&set, 0, o).unwrap();
                }
                let (src, _) = out.find(0, o, 8192).expect("in the window after a refill");
                let bytes: Vec<u8> = (0..8192).map(|k| byte(0, o + k)).collect();
                assert!(out.bytes_at(src, 8192) == &bytes[..], "offset {o}");
                o += 8192;
            }
            (out.windows - read, out.windows_ahead - ahead)
        };
        let (read, ahead) = run(&mut out, 0, 3 * w);
        assert!(read == 3 && ahead == 2, "{ahead} of {read} windows read ahead");
        let (read, ahead) = run(&mut out, 10 * w, 14 * w);
        assert!(
            read == 4 && ahead == 3,
            "after the jump: {ahead} of {read} windows read ahead"
        );
        assert!(
            out.ahead.owned <= out.ahead.depth.get() + 1 && out.ahead.depth.get() <= DEPTH,
            "{} buffers at the reading thread, depth {}",
            out.ahead.owned,
            out.ahead.depth.get()
        );
    }

    /// A resume whose held chunks are scattered: the windows follow the sender's schedule, past the held
    /// chunks (runs of several chunks share a window), so every window after the first comes from the
    /// reading thread and none holds a held byte; a file whose held chunks become known only after the
    /// reading thread passed it is still sent right (read again where the sender goes).
    #[test]
    fn windows_pass_over_held_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = WINDOW as u64 / 4;
        // 40 chunks and a short last one; then a file of 9 chunks
        let sizes = [40 * chunk + 5000, 9 * chunk];
        let set = Arc::new(files(dir.path(), &sizes));
        let held0: Vec<bool> = (0..41).map(|c| c % 3 == 1 || (10..15).contains(&c)).collect();
        let held1: Vec<bool> = (0..9).map(|c| c == 0 || c == 4).collect();
        let held = Held::new(chunk);
        held.set(0, &held0);
        let mut out = Output::new(
            set.clone(),
            8192,
            None,
            Some(8192),
            held.clone(),
            false,
            DirectReads::On,
        );
        // sends file `f` but its held chunks `h`; with `strict`, no window holds a held chunk of it
        let send = |out: &mut Output, f: usize, h: &[bool], strict: bool| {
            for c in (0..h.len()).filter(|&c| !h[c]) {
                let (from, to) = (c as u64 * chunk, ((c as u64 + 1) * chunk).min(sizes[f]));
                for o in (from..to).step_by(8192) {
                    let len = 8192.min(to - o) as usize;
                    if out.find(f, o, len).is_none() {
                        out.refill(&set, f, o).unwrap();
                        for sg in out.win.segs.iter().filter(|sg| strict && sg.file == f) {
                            let (a, b) = (sg.offset / chunk, (sg.offset + sg.len as u64 - 1) / chunk);
                            assert!(
                                (a..=b).all(|c| !h[c as usize]),
                                "a window holds chunks {a}-{b} of file {f}, some of them held"
                            );
                        }
                    }
                    let (src, _) = out.find(f, o, len).expect("in the window after a refill");
                    let bytes: Vec<u8> = (0..len as u64).map(|k| byte(f, o + k)).collect();
                    assert!(out.bytes_at(src, len) == &bytes[..], "file {f} offset {o}");
                }
            }
        };
        send(&mut out, 0, &held0, true);
        let (read, ahead) = (out.windows, out.windows_ahead);
        // 24 chunks to send of a quarter window each, and the short last one: 7 windows
        assert_eq!(read, 7, "windows read");
        assert_eq!(ahead, read - 1, "{ahead} of {read} windows read ahead");
        // file 1's held chunks are known only now: the reading thread read it from its start
        held.set(1, &held1);
        send(&mut out, 1, &held1, false);
        assert!(out.windows > read, "file 1 sent");
    }

    /// Retransmissions of data from the last windows are found in the kept ones, with the right bytes and
    /// digests; older data is not (it is read again).
    #[test]
    fn retransmissions_come_from_the_kept_windows() {
        let dir = tempfile::tempdir().unwrap();
        let size = (KEPT as u64 + 3) * WINDOW as u64 + 12_288;
        let set = Arc::new(files(dir.path(), &[size]));
        let sub = Some(8192);
        let mut out = Output::new(
            set.clone(),
            8192,
            None,
            sub,
            Held::default(),
            false,
            DirectReads::On,
        );
        let len = |o: u64| 8192.min(size - o) as usize;
        for o in (0..size).step_by(8192) {
            if out.find(0, o, len(o)).is_none() {
                out.refill(&set, 0, o).unwrap();
            }
        }
        assert_eq!(out.kept.len(), KEPT);
        let oldest_kept = size.next_multiple_of(WINDOW as u64) - (KEPT as u64 + 1) * WINDOW as u64;
        for o in (0..size).step_by(8192) {
            match out.find(0, o, len(o)) {
                Some((src, digest)) => {
                    assert!(o >= oldest_kept, "offset {o} found");
                    let bytes: Vec<u8> = (0..len(o) as u64).map(|i| byte(0, o + i)).collect();
                    assert!(out.bytes_at(src, len(o)) == &bytes[..], "offset {o}");
                    assert_eq!(digest, Some(block_digest(sub, o, &bytes)), "offset {o}");
                }
                None => assert!(o < oldest_kept, "offset {o} not found"),
            }
        }
    }

    /// Files the page cache does not hold, sent in order through the reading thread: their windows are
    /// read with `O_DIRECT` and hashed by the hashing thread, and every whole block comes with its
    /// digest, equal to the one the protocol would compute.
    #[test]
    fn cold_windows_read_ahead_come_with_their_digests() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [3 * WINDOW as u64 + 5 * 8192 + 100, 20_000, 2 * WINDOW as u64];
        let set = Arc::new(files(dir.path(), &sizes));
        evict(&set);
        let sub = Some(8192);
        let mut out = Output::new(
            set.clone(),
            8192,
            None,
            sub,
            Held::default(),
            false,
            DirectReads::On,
        );
        for (f, &size) in sizes.iter().enumerate() {
            let mut o = 0;
            while o < size {
                let len = 8192.min(size - o) as usize;
                if out.find(f, o, len).is_none() {
                    out.refill(&set, f, o).unwrap();
                }
                let (src, digest) = out.find(f, o, len).expect("in the window after a refill");
                let bytes: Vec<u8> = (0..len as u64).map(|k| byte(f, o + k)).collect();
                assert!(out.bytes_at(src, len) == &bytes[..], "file {f} offset {o}");
                assert_eq!(
                    digest,
                    Some(block_digest(sub, o, &bytes)),
                    "digest of file {f} offset {o}"
                );
                o += len as u64;
            }
        }
        assert!(
            out.windows_ahead + 3 >= out.windows,
            "{} of {} ahead",
            out.windows_ahead,
            out.windows
        );
        // the first file's whole windows went past the cache (the rest starts at unaligned places after
        // the small file's bytes)
        if direct_and_cache_known(&set) == (true, true) {
            assert!(
                out.direct_bytes() >= 3 * WINDOW as u64,
                "{} read directly",
                out.direct_bytes()
            );
        }
    }

    /// With [`DirectReads::Cold`], files the page cache does not hold are read past it with `O_DIRECT` (on a file system that has it,
    /// with a kernel that says what the cache holds), files it holds through it: either way the window
    /// holds the right bytes and the right digests, down to a file's unaligned tail and the files after
    /// it in the same window.
    #[test]
    fn cold_files_are_read_directly_and_hot_ones_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [
            WINDOW as u64 + 3 * DIRECT_ALIGN as u64 + 1234,
            5_000,
            3 * PIECE as u64 - 7,
            0,
        ];
        let set = files(dir.path(), &sizes);
        let (direct_here, cache_known) = direct_and_cache_known(&set);
        let sub = Some(8192);
        let mut win = Win::new();
        // digests computed by the reading thread as it reads, or (`defer`) those of direct reads after
        // it by the hashing thread
        for (cold, defer) in [(true, false), (false, false), (true, true), (false, true)] {
            let mut fds = FdCache::default();
            let mut deferred = 0usize;
            let (mut read, mut direct) = (0u64, 0u64);
            // the first start is on a block but not on a MiB: its direct reads start with a short piece
            for &(f, o) in &[
                (0usize, 3 * 8192),
                (0usize, 0u64),
                (0, WINDOW as u64),
                (2, 0),
                (2, 2 * PIECE as u64),
            ] {
                if cold {
                    evict(&set);
                } else {
                    // in the page cache (read through it)
                    set.paths.iter().for_each(|p| drop(std::fs::read(p).unwrap()));
                }
                direct += fill(
                    &set,
                    &Held::default(),
                    &mut fds,
                    &mut win,
                    (f, o),
                    FillMode {
                        sub,
                        defer,
                        direct: DirectReads::Cold,
                    },
                )
                .unwrap();
                let pending = win.segs.iter().filter(|s| s.pending).count();
                assert!(
                    defer || pending == 0,
                    "nothing is left to the hashing thread without defer"
                );
                deferred += pending;
                finish_digests(&mut win, sub);
                read += check_window(&win, sub);
            }
            if !cold {
                assert_eq!(direct, 0, "files in the page cache are read from it");
                assert_eq!(
                    deferred, 0,
                    "what is read through the cache is hashed as it is read"
                );
            } else if direct_here && cache_known {
                assert_eq!(deferred > 0, defer, "direct reads left to the hashing thread");
                // all but what follows the first file's tail in its second window (the small file and
                // the third file, which do not start at an aligned place in the window)
                assert_eq!(
                    direct,
                    read - sizes[1] - sizes[2],
                    "bytes read directly of {read}"
                );
            }
        }
    }

    /// Checks every byte and digest of `win` against the files [`files`] made; returns the bytes it holds.
    fn check_window(win: &Win, sub: Option<u64>) -> u64 {
        let mut digests = win.digests.iter();
        let mut read = 0;
        for s in &win.segs {
            let bytes: Vec<u8> = (0..s.len as u64).map(|k| byte(s.file, s.offset + k)).collect();
            assert!(
                win.bytes()[s.at..s.at + s.len] == bytes[..],
                "file {} at {}",
                s.file,
                s.offset
            );
            let mut b = s.dig_from;
            while b < s.offset + s.len as u64 {
                let end = (b + 8192).min(s.size);
                let want = block_digest(sub, b, &bytes[(b - s.offset) as usize..(end - s.offset) as usize]);
                assert_eq!(
                    digests.next(),
                    Some(&want),
                    "digest of file {} block at {b}",
                    s.file
                );
                b = end;
            }
            read += s.len as u64;
        }
        assert!(digests.next().is_none());
        read
    }

    /// Fills windows of `set` from `starts` with `reads` (files written back and in the page cache before
    /// each), checking each window's bytes and digests, the hashing thread's share computed as it would;
    /// returns the bytes read and those read directly.
    fn fill_hot(set: &SourceSet, starts: &[(usize, u64)], reads: DirectReads) -> (u64, u64) {
        let sub = Some(8192);
        let mut win = Win::new();
        let mut fds = FdCache::default();
        let (mut read, mut direct) = (0, 0);
        for &start in starts {
            for p in &set.paths {
                std::fs::File::open(p).unwrap().sync_all().unwrap();
                drop(std::fs::read(p).unwrap());
            }
            let mode = FillMode {
                sub,
                defer: true,
                direct: reads,
            };
            direct += fill(set, &Held::default(), &mut fds, &mut win, start, mode).unwrap();
            finish_digests(&mut win, sub);
            read += check_window(&win, sub);
        }
        (read, direct)
    }

    /// Sizes and window starts of [`fill_hot`]'s runs: a file longer than a window whose length is not a
    /// multiple of 4 KiB, a small file and one of 3 pieces less 7 bytes after it in its second window.
    const HOT_SIZES: [u64; 4] = [
        WINDOW as u64 + 3 * DIRECT_ALIGN as u64 + 1234,
        5_000,
        3 * PIECE as u64 - 7,
        0,
    ];
    const HOT_STARTS: [(usize, u64); 5] = [
        (0, 3 * 8192),
        (0, 0),
        (0, WINDOW as u64),
        (2, 0),
        (2, 2 * PIECE as u64),
    ];

    /// With [`DirectReads::On`] (the default), files on a disk are read past the page cache with
    /// `O_DIRECT` although the cache holds them (written back: no dirty page), down to a file's unaligned
    /// tail, and only ranges that start at an unaligned place in the window through the cache; with
    /// [`DirectReads::Off`] nothing is read directly. The bytes and digests are the files' either way.
    #[test]
    fn hot_files_on_disk_are_read_directly_unless_turned_off() {
        // on a disk, not tmpfs (the test's TMPDIR may be either)
        let dir = tempfile::Builder::new()
            .prefix("vf-direct")
            .tempdir_in("/var/tmp")
            .unwrap();
        let set = files(dir.path(), &HOT_SIZES);
        let (read, direct) = fill_hot(&set, &HOT_STARTS, DirectReads::On);
        if direct_and_cache_known(&set).0 {
            // all but the small file and the third one, at unaligned places after the first file's tail
            assert_eq!(
                direct,
                read - HOT_SIZES[1] - HOT_SIZES[2],
                "bytes read directly of {read}"
            );
        } else {
            eprintln!("/var/tmp does not take O_DIRECT here: only the buffered reads were checked");
        }
        let (read_off, direct_off) = fill_hot(&set, &HOT_STARTS, DirectReads::Off);
        assert_eq!((read_off, direct_off), (read, 0));
    }

    /// On tmpfs (where Linux 6.6 and later take `O_DIRECT` but read through the page cache all the same,
    /// and older ones refuse it) everything is read through the cache, with the same bytes and digests.
    #[test]
    fn files_on_tmpfs_are_read_through_the_cache() {
        let Ok(dir) = tempfile::Builder::new()
            .prefix("vf-direct")
            .tempdir_in("/dev/shm")
        else {
            eprintln!("no /dev/shm here: nothing to check");
            return;
        };
        let set = files(dir.path(), &HOT_SIZES);
        if !crate::source::in_memory(&std::fs::File::open(&set.paths[0]).unwrap()) {
            eprintln!("/dev/shm is not tmpfs here: nothing to check");
            return;
        }
        let (read, direct) = fill_hot(&set, &HOT_STARTS, DirectReads::On);
        assert!(read > 0);
        assert_eq!(direct, 0, "nothing read with O_DIRECT from tmpfs");
    }

    /// A virtual file gathered from the payloads of blocks in two files laid out as a Mark6 scan's (a
    /// 20-byte file header, an 8-byte header before each block), every byte given by [`byte`] of file 0
    /// at its place in the virtual file; the files are written back.
    fn mark6_like(dir: &std::path::Path, payloads: &[u64]) -> SourceSet {
        use crate::source::{Extent, VFile};
        let mut set = SourceSet::default();
        let mut disks: Vec<Vec<u8>> = vec![vec![0xee; 20], vec![0xee; 20]];
        let mut extents = Vec::new();
        let mut v = 0u64;
        for (i, &len) in payloads.iter().enumerate() {
            let d = &mut disks[i % 2];
            d.extend_from_slice(&[0xdd; 8]);
            let offset = d.len() as u64;
            d.extend((v..v + len).map(|o| byte(0, o)));
            extents.push(Extent {
                path: i % 2,
                offset,
                len,
            });
            v += len;
        }
        for (i, d) in disks.iter().enumerate() {
            let p = dir.join(format!("disk{i}.m6"));
            std::fs::write(&p, d).unwrap();
            std::fs::File::open(&p).unwrap().sync_all().unwrap();
            set.paths.push(p);
        }
        set.files.push(VFile::new("scan.vdif".into(), extents));
        set
    }

    /// The payloads of a scan gathered from Mark6-like files lie at unaligned places of their files: each
    /// window holds them from a place with the same remainder modulo 4 KiB, so that with
    /// [`DirectReads::On`] the part of each window in its first block is read with `O_DIRECT` (the rest
    /// through the cache); the bytes and digests are the scan's either way, and nothing is read directly
    /// with [`DirectReads::Off`].
    #[test]
    fn gathered_scans_are_read_directly_from_unaligned_places() {
        let dir = tempfile::Builder::new()
            .prefix("vf-direct")
            .tempdir_in("/var/tmp")
            .unwrap();
        let mb = 1u64 << 20;
        let set = mark6_like(
            dir.path(),
            &[3 * mb + 1000, 10 * mb + 3, 2 * mb + 77, 5 * mb + 5, mb],
        );
        let total = set.files[0].size;
        let sub = Some(8192);
        for reads in [DirectReads::On, DirectReads::Off] {
            let mut win = Win::new();
            let mut fds = FdCache::default();
            let (mut read, mut direct, mut shifted) = (0, 0, 0);
            let mut start = (0usize, 0u64);
            while start.0 < set.files.len() {
                set.paths.iter().for_each(|p| drop(std::fs::read(p).unwrap()));
                let mode = FillMode {
                    sub,
                    defer: true,
                    direct: reads,
                };
                direct += fill(&set, &Held::default(), &mut fds, &mut win, start, mode).unwrap();
                finish_digests(&mut win, sub);
                read += check_window(&win, sub);
                shifted += win.segs.iter().filter(|s| s.at % DIRECT_ALIGN != 0).count();
                let last = win.segs.last().unwrap();
                start = next_start(&set, &Held::default(), last.file, last.offset + last.len as u64);
            }
            assert_eq!(read, total);
            if reads == DirectReads::Off || !direct_and_cache_known(&set).0 {
                assert_eq!((direct, shifted), (0, 0), "{reads:?}");
            } else {
                // every window starts in a block at an unaligned place; of the 21 MiB, the windows'
                // parts in the blocks after their first (the first block's 3 MiB, and the 2 and 1 MiB
                // ones) go through the cache
                assert!(shifted > 0);
                assert!(
                    direct >= 10 * mb && direct < total,
                    "{direct} of {total} read directly"
                );
            }
        }
    }
}
