//! The sender's output path: payloads read in large windows (one `pread` per window of several MiB, the
//! kernel asked to read the next window ahead), headers kept apart, and datagrams handed to the kernel as
//! GSO messages gathered straight from the window (`sendmmsg` of messages whose parts are header, payload,
//! header, payload, ...: the kernel cuts each message into datagrams), so the payload is copied once, by
//! the kernel, from the window into the socket buffers. Retransmissions (a few percent) and, with
//! encryption, every payload (it is encrypted in place) are read into an arena of datagram-sized slots.
//!
//! Nothing here allocates per datagram: the window, the arena, the headers and the batch are allocated
//! once per transfer.

use std::net::UdpSocket;

use vlbiflow_udp::BatchSender;
use vlbiflow_xfer_proto::wire::{seal_encrypted_parts, HEADER_LEN, MAX_PAYLOAD};
use vlbiflow_xfer_proto::{Sender, Transmit};

use crate::source::{FdCache, SourceSet};

/// Bytes read at once for new data.
pub const WINDOW: usize = 8 << 20;
/// Datagrams prepared per round at most (then control and timers get a turn).
pub const MAX_ROUND: usize = 256;
/// GSO messages per `sendmmsg`.
const GSO_MSGS: usize = 64;
/// Largest GSO message (the kernel's limit for one UDP send).
const GSO_MAX_BYTES: usize = 65_507;
/// Most datagrams in one GSO message (the kernel's UDP_MAX_SEGMENTS is 64 on older kernels).
const GSO_MAX_SEGMENTS: usize = 64;

/// A range of one virtual file held in the window.
#[derive(Debug, Clone, Copy)]
struct Seg {
    file: usize,
    offset: u64,
    len: usize,
    at: usize,
}

/// Where a datagram's payload is.
#[derive(Debug, Clone, Copy)]
enum Src {
    /// In the window at this position.
    Window(usize),
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
    window: Vec<u8>,
    segs: Vec<Seg>,
    /// Index of the segment the last lookup found (new data is read in order).
    hint: usize,
    arena: Vec<u8>,
    hdrs: Vec<[u8; HEADER_LEN]>,
    descs: Vec<Desc>,
    tx: BatchSender,
    fds: FdCache,
    aead_key: Option<[u8; 32]>,
    /// `sendmmsg` calls that failed (the datagrams count as lost; the receiver reports them).
    pub send_errors: u64,
    /// Windows read.
    pub windows: u64,
}

/// What a round did.
pub struct Round {
    /// Datagrams sent.
    pub datagrams: usize,
    /// The sender could not read its data (the transfer is aborted with this reason).
    pub read_error: Option<String>,
}

impl Output {
    /// Output for datagrams of at most `max_payload` payload bytes, encrypted with `aead_key` if given.
    pub fn new(max_payload: usize, aead_key: Option<[u8; 32]>) -> Output {
        let dgram = HEADER_LEN + max_payload.min(MAX_PAYLOAD);
        let segs = (GSO_MAX_BYTES / dgram).clamp(1, GSO_MAX_SEGMENTS);
        Output {
            window: vec![0u8; WINDOW],
            segs: Vec::new(),
            hint: 0,
            arena: vec![0u8; MAX_ROUND * max_payload.min(MAX_PAYLOAD)],
            hdrs: vec![[0u8; HEADER_LEN]; MAX_ROUND],
            descs: Vec::with_capacity(MAX_ROUND),
            tx: BatchSender::with_parts(GSO_MSGS, 2 * segs),
            fds: FdCache::default(),
            aead_key,
            send_errors: 0,
            windows: 0,
        }
    }

    fn slot_len(&self) -> usize {
        self.arena.len() / MAX_ROUND
    }

    /// Finds `len` bytes of `file` at `offset` in the window.
    fn lookup(&mut self, file: usize, offset: u64, len: usize) -> Option<usize> {
        let found =
            |s: &Seg| s.file == file && offset >= s.offset && offset + len as u64 <= s.offset + s.len as u64;
        for i in [self.hint, self.hint + 1] {
            if let Some(s) = self.segs.get(i) {
                if found(s) {
                    self.hint = i;
                    return Some(s.at + (offset - s.offset) as usize);
                }
            }
        }
        None
    }

    /// Reads the window from `file` at `offset` on (continuing into the following files while it has room,
    /// so that many small files take one window), and asks the kernel to read the next window ahead.
    fn refill(&mut self, set: &SourceSet, file: usize, offset: u64) -> std::io::Result<()> {
        self.segs.clear();
        self.hint = 0;
        self.windows += 1;
        let mut at = 0usize;
        let (mut f, mut o) = (file, offset);
        while f < set.files.len() && at < self.window.len() {
            let size = set.files[f].size;
            let n = ((size - o.min(size)) as usize).min(self.window.len() - at);
            if n > 0 {
                set.read_at(&mut self.fds, f, o, &mut self.window[at..at + n])?;
                self.segs.push(Seg {
                    file: f,
                    offset: o,
                    len: n,
                    at,
                });
                at += n;
                if o + (n as u64) < size {
                    // the window ends inside this file: have the kernel read on meanwhile
                    set.advise(&mut self.fds, f, o + n as u64, WINDOW as u64);
                }
            }
            // small files: a few more in the same window, at most 256 per refill
            if self.segs.len() >= 256 || at * 2 > self.window.len() {
                break;
            }
            f += 1;
            o = 0;
        }
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
            let mut src = self.lookup(file, h.offset, len).map(Src::Window);
            if src.is_none() && !h.retransmit {
                // new data beyond the window: what is queued refers to the window, so it goes first
                sent += self.flush(sock);
                if let Err(e) = self.refill(set, file, h.offset) {
                    return Round {
                        datagrams: sent,
                        read_error: Some(e.to_string()),
                    };
                }
                src = self.lookup(file, h.offset, len).map(Src::Window);
            }
            let n = self.descs.len();
            t.emit_header(&mut self.hdrs[n]);
            let src = match (src, self.aead_key.is_some()) {
                (Some(Src::Window(w)), false) => Src::Window(w),
                (Some(Src::Window(w)), true) => {
                    // encrypted in place: a copy of its own
                    self.arena[n * slot..n * slot + len].copy_from_slice(&self.window[w..w + len]);
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
                Src::Window(w) => s.seal_parts(hdr, &self.window[w..w + len]),
                Src::Arena(a) => {
                    let payload = &mut self.arena[a * slot..a * slot + len];
                    s.seal_parts(hdr, payload);
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

    /// Sends what is queued: runs of datagrams of one length become GSO messages.
    fn flush(&mut self, sock: &UdpSocket) -> usize {
        let total = self.descs.len();
        if total == 0 {
            return 0;
        }
        let slot = self.slot_len();
        let dgram_max = GSO_MAX_BYTES;
        let segs_max = self.tx.parts() / 2;
        let (window, arena, hdrs, descs) = (&self.window, &self.arena, &self.hdrs, &self.descs);
        let payload = |i: usize| -> &[u8] {
            let d = descs[i];
            match d.src {
                Src::Window(w) => &window[w..w + d.len],
                Src::Arena(a) => &arena[a * slot..a * slot + d.len],
            }
        };
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * segs_max);
        let mut i = 0;
        while i < total {
            let mut batch = self.tx.batch();
            while i < total && !batch.is_full() {
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
            if batch.flush(sock).is_err() {
                // lost datagrams are reported by the receiver and sent again
                self.send_errors += 1;
            }
        }
        self.descs.clear();
        total
    }
}
