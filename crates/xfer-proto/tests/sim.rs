//! Deterministic end-to-end simulation: Sender and Receiver over a simulated path (the path emulator's
//! link model, `vlbiflow-pathmodel`: random and Gilbert-Elliott loss, rate limit, drop-tail queue, delay;
//! here also loss after the bottleneck, reordering, duplication, corruption and stalls), a reliable
//! in-order control channel with the path's delay, feedback as datagrams on a return path with its own
//! random loss (copied to the control channel until the sender confirms them, as the I/O layer does),
//! generated in-memory files and a simulated clock.
//! Everything is seeded; the same seed gives the same run.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vlbiflow_pathmodel::{DropReason, LineLoss, Link, LinkConfig, LossModel, Verdict};
use vlbiflow_xfer_proto::hash;
use vlbiflow_xfer_proto::wire::{self, ChunkHash, ControlMsg, HEADER_LEN};
use vlbiflow_xfer_proto::{Event, RateConfig, Receiver, ReceiverConfig, Sender, SenderConfig};

#[derive(Clone, Copy, Debug)]
enum Loss {
    None,
    Random(f64),
    /// Gilbert-Elliott: P(good->bad), P(bad->good), loss in good, loss in bad.
    GilbertElliott {
        p_gb: f64,
        p_bg: f64,
        good: f64,
        bad: f64,
    },
}

impl From<Loss> for LossModel {
    fn from(l: Loss) -> LossModel {
        match l {
            Loss::None => LossModel::None,
            Loss::Random(p) => LossModel::Random { p },
            // the model's h and k are the probabilities of getting through in each state
            Loss::GilbertElliott {
                p_gb,
                p_bg,
                good,
                bad,
            } => LossModel::GilbertElliott {
                p: p_gb,
                r: p_bg,
                h: 1.0 - bad,
                k: 1.0 - good,
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct LinkCfg {
    rate_bps: f64,
    one_way: Duration,
    queue_bytes: usize,
    loss: Loss,
    /// The loss comes before the bottleneck (datagrams dropped on entry, as netem and `pathemu` do)
    /// rather than after it.
    loss_before: bool,
    reorder: f64,
    reorder_extra: Duration,
    dup: f64,
    corrupt: f64,
}

impl LinkCfg {
    fn new(rate_bps: f64, rtt: Duration) -> Self {
        // a queue of half a BDP at least 64 KiB
        let bdp = rate_bps / 8.0 * rtt.as_secs_f64();
        LinkCfg {
            rate_bps,
            one_way: rtt / 2,
            queue_bytes: ((bdp / 2.0) as usize).max(64 * 1024),
            loss: Loss::None,
            loss_before: false,
            reorder: 0.0,
            reorder_extra: Duration::from_micros(500),
            dup: 0.0,
            corrupt: 0.0,
        }
    }
}

/// The path model for `link`: loss on entry only with `loss_before` (otherwise the simulator loses
/// datagrams after the bottleneck), no jitter (the simulator reorders by itself).
fn path(link: &LinkCfg, seed: u64) -> Link {
    let mut cfg = LinkConfig {
        rate_bps: Some(link.rate_bps as u64),
        queue_limit: link.queue_bytes as u64,
        delay_ns: link.one_way.as_nanos() as u64,
        jitter_ns: 0,
        reorder: false,
        loss: if link.loss_before {
            link.loss.into()
        } else {
            LossModel::None
        },
        buffer_bytes: 0,
        seed,
    };
    cfg.buffer_bytes = cfg.default_buffer(0);
    Link::new(cfg).expect("path model")
}

struct Pkt {
    at: Instant,
    id: u64,
    data: Vec<u8>,
}
impl PartialEq for Pkt {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.id == o.id
    }
}
impl Eq for Pkt {}
impl PartialOrd for Pkt {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pkt {
    fn cmp(&self, o: &Self) -> Ordering {
        // min-heap on (at, id)
        o.at.cmp(&self.at).then(o.id.cmp(&self.id))
    }
}

/// Content of byte `i` of file `f`: cheap, position-dependent, different per file.
/// Byte `i` of generated file `file` is byte `i % 8` (little-endian) of `word(file, i / 8)`: different
/// in every file and at every offset (a block in the wrong place or file does not compare equal).
fn word(file: u32, n: u64) -> u64 {
    let mut z = n
        .wrapping_add((file as u64) << 40)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^ (z >> 29)
}

/// The generated content of `file` from `offset` on, a word at a time where it can (the simulator's own
/// time per datagram is mostly this and the comparison with it).
fn fill(file: u32, offset: u64, out: &mut [u8]) {
    let mut i = 0;
    // up to the next word boundary
    while i < out.len() && (offset + i as u64) % 8 != 0 {
        let o = offset + i as u64;
        out[i] = (word(file, o / 8) >> (8 * (o % 8))) as u8;
        i += 1;
    }
    let mut n = (offset + i as u64) / 8;
    let mut words = out[i..].chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&word(file, n).to_le_bytes());
        n += 1;
    }
    let rest = words.into_remainder();
    let last = word(file, n).to_le_bytes();
    rest.copy_from_slice(&last[..rest.len()]);
}

/// The definition `fill` computes faster.
fn fill_bytewise(file: u32, offset: u64, out: &mut [u8]) {
    for (j, b) in out.iter_mut().enumerate() {
        let o = offset + j as u64;
        *b = (word(file, o / 8) >> (8 * (o % 8))) as u8;
    }
}

#[test]
fn generated_content_is_its_definition() {
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..2000 {
        let (file, offset, len) = (
            rng.gen::<u32>() % 5,
            rng.gen::<u64>() >> rng.gen_range(1..64),
            rng.gen_range(0..100),
        );
        let (mut a, mut b) = (vec![0u8; len], vec![1u8; len]);
        fill(file, offset, &mut a);
        fill_bytewise(file, offset, &mut b);
        assert_eq!(a, b, "file {file} offset {offset} len {len}");
    }
    // another file, or the same bytes a word away, differ
    let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 64]);
    fill(1, 4096, &mut a);
    fill(2, 4096, &mut b);
    assert_ne!(a, b);
    fill(1, 4104, &mut b);
    assert_ne!(a, b);
}

/// The hash of chunk `chunk` (of `chunk_size`) of generated file `file` of `size` bytes.
fn gen_chunk_hash(file: u32, size: u64, chunk_size: u64, chunk: u64, scratch: &mut Vec<u8>) -> ChunkHash {
    let offset = chunk * chunk_size;
    let len = chunk_size.min(size - offset);
    scratch.resize(len as usize, 0);
    fill(file, offset, scratch);
    hash::chunk_hash(size, chunk_size, chunk, scratch)
}

/// A competing TCP Reno flow (1500-byte packets, ACK-clocked, halving once per window on loss detected by
/// three later ACKs, 1 s timeout) sharing the bottleneck queue; ACKs return uncongested after one way.
struct Reno {
    cwnd: f64,
    ssthresh: f64,
    next_seq: u64,
    recover: u64,
    inflight: std::collections::BTreeSet<u64>,
    acks: VecDeque<(Instant, u64)>,
    last_ack: Option<Instant>,
    acked: Vec<(Duration, u64)>,
}

const RENO_MARK: u8 = 0xFF;
const RENO_LEN: usize = 1500 - 48;

impl Reno {
    fn new() -> Self {
        Reno {
            cwnd: 10.0,
            ssthresh: f64::INFINITY,
            next_seq: 0,
            recover: 0,
            inflight: Default::default(),
            acks: VecDeque::new(),
            last_ack: None,
            acked: Vec::new(),
        }
    }

    fn on_ack(&mut self, now: Instant, t: Duration, seq: u64) {
        self.last_ack = Some(now);
        if !self.inflight.remove(&seq) {
            return;
        }
        self.acked.push((t, RENO_LEN as u64));
        let lost: Vec<u64> = self.inflight.range(..seq.saturating_sub(3)).copied().collect();
        for l in &lost {
            self.inflight.remove(l);
        }
        if !lost.is_empty() && seq >= self.recover {
            self.cwnd = (self.cwnd / 2.0).max(2.0);
            self.ssthresh = self.cwnd;
            self.recover = self.next_seq;
        } else if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
        } else {
            self.cwnd += 1.0 / self.cwnd;
        }
    }
}

struct Sim {
    reno: Option<Reno>,
    now: Instant,
    t0: Instant,
    s: Sender,
    r: Receiver,
    link: LinkCfg,
    rng: SmallRng,
    /// The path up to the receiving host: loss on entry (with `loss_before`), the bottleneck and the
    /// one-way delay; datagrams carry `IP_UDP_OVERHEAD` bytes of room in front, so that the bottleneck
    /// counts the bytes of an IP packet.
    path: Link,
    /// Loss after the bottleneck (without `loss_before`).
    loss_after: LineLoss,
    wire: Vec<u8>,
    /// In-order arrivals (the common case: times never decrease), and the rest (reordered, duplicated,
    /// injected) in a heap; the next arrival is the earlier of the two fronts.
    fifo: VecDeque<Pkt>,
    heap: BinaryHeap<Pkt>,
    pool: Vec<Vec<u8>>,
    next_id: u64,
    ctl_s2r: VecDeque<(Instant, String)>,
    ctl_r2s: VecDeque<(Instant, String)>,
    /// Feedback datagrams on the return path, and its loss.
    fb_dgrams: VecDeque<(Instant, Vec<u8>)>,
    fb_loss: f64,
    fb_lost: u64,
    sizes: Vec<u64>,
    chunk_size: u64,
    /// Store mode: the receiver's "disk"; otherwise every write is compared with the generator.
    disk: Option<Vec<Vec<u8>>>,
    written: Vec<u64>,
    sender_hashed: Vec<Vec<bool>>,
    scratch: Vec<u8>,
    receiver_dies_at: Option<Instant>,
    quantum: Option<Duration>,
    /// Resume: chunk hashes the receiver's disk holds, by file, declared when the file is announced.
    declare_on_announce: std::collections::HashMap<u32, Vec<ChunkHash>>,
    /// What each of those declarations returned.
    declared: Vec<bool>,
    /// Hashes of chunks of the generated content (see `generated_hash`).
    gen_hashes: std::collections::HashMap<(u32, u64), ChunkHash>,
    /// The receiver stalls (takes no datagram or message, runs no timer) from .0 until .1, then works off
    /// what queued up: a receiving host that lost its CPU or blocked on its disk for a moment.
    receiver_stall: Option<(Instant, Instant)>,
    /// The receiver is slow from .0 until .1: it handles one datagram per .2 (its messages and timers as
    /// usual), so datagrams wait for it and it keeps reporting: a receiving host slowed by its disk.
    receiver_slow: Option<(Instant, Instant, Duration)>,
    slow_taken: u64,
    /// The receiving host's socket buffer, in datagrams, while the receiver is slow: what arrives beyond
    /// it is dropped by the "kernel" and counted in `host_drops`, which the receiver is told of when
    /// `report_host_drops` is set (`SO_RXQ_OVFL`).
    rx_buffer: Option<usize>,
    host_drops: u64,
    report_host_drops: bool,
    /// The path's forwarder freezes from .0 until .1 (a host that lost its CPU for a moment): what would
    /// have left the bottleneck meanwhile leaves when it ends, bunched, and no datagram is lost for it.
    path_stalls: Vec<(Instant, Instant)>,
    /// The sending host does not run the sender from .0 until .1 (its thread was not scheduled, or its
    /// I/O blocked): nothing is sent and nothing it receives is handled meanwhile; with .2, it runs for a
    /// moment every .2 (a thread that gets the CPU now and then).
    sender_stall: Option<(Instant, Instant, Option<Duration>)>,
    injected: u64,
    /// Ids of the injected datagrams not yet handed to the receiver.
    injected_ids: HashSet<u64>,
    /// Injected datagrams handed to a receiver that had finished (it looks at no datagram then).
    injected_after_finish: u64,
    // results
    s_events: Vec<(Duration, Event)>,
    r_events: Vec<(Duration, Event)>,
    datagrams_on_link: u64,
    link_drops: u64,
    delivered_at: Vec<(Duration, u64)>,
}

struct Setup {
    link: LinkCfg,
    sizes: Vec<u64>,
    block: u32,
    chunk: u64,
    rate: RateConfig,
    store: bool,
    key: Option<[u8; 32]>,
    seed: u64,
    /// Random loss of feedback datagrams on the return path.
    fb_loss: f64,
    /// Both hosts run their machines only at multiples of this (`None`: at every event's own time), as the
    /// I/O layer does: its sending thread sleeps 250 us to 1 ms and then sends what is due in a burst, its
    /// receiving thread takes a batch of datagrams per wake-up (each with its kernel receive time).
    quantum: Option<Duration>,
}

impl Setup {
    /// One large file of generated content whose every datagram is compared with the generator as it
    /// arrives rather than stored, in 32 MiB chunks: the long-transfer tests.
    fn compared(link: LinkCfg, bytes: u64) -> Self {
        Setup {
            store: false,
            chunk: 32 << 20,
            ..Setup::new(link, vec![bytes])
        }
    }

    fn new(link: LinkCfg, sizes: Vec<u64>) -> Self {
        Setup {
            link,
            sizes,
            block: 8192,
            chunk: 1 << 20,
            rate: RateConfig::auto(50e6),
            store: true,
            key: None,
            seed: 1,
            fb_loss: 0.0,
            quantum: Some(Duration::from_micros(100)),
        }
    }
}

impl Sim {
    fn new(st: Setup) -> Sim {
        let t0 = Instant::now();
        let mut sc = SenderConfig::new(7, st.rate);
        sc.block_size = st.block;
        sc.chunk_size = st.chunk;
        sc.data_key = st.key;
        let rc = ReceiverConfig {
            data_key: st.key,
            ..ReceiverConfig::default()
        };
        let mut s = Sender::new(sc);
        for (i, &sz) in st.sizes.iter().enumerate() {
            s.add_file(&format!("exp/file{i:05}.vdif"), sz, None).unwrap();
        }
        s.close();
        let sender_hashed = st
            .sizes
            .iter()
            .map(|&sz| vec![false; sz.div_ceil(st.chunk) as usize])
            .collect();
        Sim {
            reno: None,
            now: t0,
            t0,
            s,
            r: Receiver::new(rc),
            link: st.link,
            rng: SmallRng::seed_from_u64(st.seed),
            path: path(&st.link, st.seed),
            loss_after: LineLoss::new(
                if st.link.loss_before {
                    LossModel::None
                } else {
                    st.link.loss.into()
                },
                st.seed ^ 0xa5a5,
            ),
            wire: Vec::new(),
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            pool: Vec::new(),
            next_id: 0,
            ctl_s2r: VecDeque::new(),
            ctl_r2s: VecDeque::new(),
            fb_dgrams: VecDeque::new(),
            fb_loss: st.fb_loss,
            fb_lost: 0,
            disk: st
                .store
                .then(|| st.sizes.iter().map(|&sz| vec![0u8; sz as usize]).collect()),
            written: vec![0; st.sizes.len()],
            sizes: st.sizes,
            chunk_size: st.chunk,
            sender_hashed,
            scratch: Vec::new(),
            receiver_dies_at: None,
            quantum: st.quantum,
            declare_on_announce: Default::default(),
            declared: Vec::new(),
            gen_hashes: Default::default(),
            receiver_stall: None,
            receiver_slow: None,
            slow_taken: 0,
            rx_buffer: None,
            host_drops: 0,
            report_host_drops: true,
            path_stalls: Vec::new(),
            sender_stall: None,
            injected: 0,
            injected_ids: HashSet::new(),
            injected_after_finish: 0,
            s_events: Vec::new(),
            r_events: Vec::new(),
            datagrams_on_link: 0,
            link_drops: 0,
            delivered_at: Vec::new(),
        }
    }

    fn push(&mut self, at: Instant, data: Vec<u8>, in_order: bool) {
        self.next_id += 1;
        let p = Pkt {
            at,
            id: self.next_id,
            data,
        };
        if in_order && self.fifo.back().is_none_or(|b| b.at <= at) {
            self.fifo.push_back(p);
        } else {
            self.heap.push(p);
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        let host = match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(b)) => Some(a.at.min(b.at)),
            (a, b) => a.or(b).map(|p| p.at),
        };
        let path = self.path.next_wakeup().map(|d| self.t0 + Duration::from_nanos(d));
        match (host, path) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn pop_due(&mut self, now: Instant) -> Option<Pkt> {
        let f = self.fifo.front().filter(|p| p.at <= now).map(|p| (p.at, p.id));
        let h = self.heap.peek().filter(|p| p.at <= now).map(|p| (p.at, p.id));
        match (f, h) {
            (Some(a), Some(b)) if b < a => self.heap.pop(),
            (Some(_), _) => self.fifo.pop_front(),
            (None, Some(_)) => self.heap.pop(),
            (None, None) => None,
        }
    }

    /// Nanoseconds since the start, the path model's time.
    fn ns(&self, t: Instant) -> u64 {
        (t - self.t0).as_nanos() as u64
    }

    /// Onto the path: loss on entry, the drop-tail queue at the bottleneck, the delay.
    fn send_on_link(&mut self, data: Vec<u8>) {
        self.datagrams_on_link += 1;
        self.wire.clear();
        self.wire.resize(wire::IP_UDP_OVERHEAD, 0);
        self.wire.extend_from_slice(&data);
        let now = self.ns(self.now);
        match self.path.push(now, &self.wire) {
            Verdict::Accepted { .. } | Verdict::Dropped(DropReason::Random | DropReason::Burst) => {}
            Verdict::Dropped(DropReason::Queue) => self.link_drops += 1,
            Verdict::Dropped(DropReason::Memory) => panic!("the simulated path's ring is too small"),
        }
        self.pool.push(data);
    }

    /// Off the path, what has arrived by `now`: loss after the bottleneck, stalls, reordering, corruption
    /// and duplication, then into the receiving host's arrivals.
    fn arrive_from_link(&mut self, now: Instant) {
        let now_ns = self.ns(now);
        while let Some((due, bytes)) = self.path.poll_transmit_due(now_ns) {
            let mut data = self.pool.pop().unwrap_or_default();
            data.clear();
            data.extend_from_slice(&bytes[wire::IP_UDP_OVERHEAD..]);
            if self.loss_after.lose().is_some() {
                self.pool.push(data);
                continue;
            }
            // when it left the bottleneck; a stalled forwarder lets it go when the stall ends
            let left = self.t0 + Duration::from_nanos(due) - self.link.one_way;
            let left = self
                .path_stalls
                .iter()
                .find(|s| left >= s.0 && left < s.1)
                .map_or(left, |s| s.1);
            let mut at = left + self.link.one_way;
            let mut in_order = true;
            if self.link.reorder > 0.0 && self.rng.gen::<f64>() < self.link.reorder {
                at += self.link.reorder_extra;
                in_order = false;
            }
            if self.link.corrupt > 0.0 && self.rng.gen::<f64>() < self.link.corrupt {
                let i = self
                    .rng
                    .gen_range(HEADER_LEN..data.len().max(HEADER_LEN + 1))
                    .min(data.len() - 1);
                data[i] ^= 0x40;
            }
            if self.link.dup > 0.0 && self.rng.gen::<f64>() < self.link.dup {
                let copy = data.clone();
                self.push(at + Duration::from_micros(50), copy, false);
            }
            self.push(at, data, in_order);
        }
    }

    /// Spoofed and garbage datagrams injected at the receiver now.
    fn inject(&mut self, data: Vec<u8>) {
        self.injected += 1;
        let at = self.now;
        self.push(at, data, false);
        self.injected_ids.insert(self.next_id);
    }

    fn receiver_alive(&self) -> bool {
        self.receiver_dies_at.is_none_or(|d| self.now < d)
    }

    fn receiver_stalled(&self) -> bool {
        self.receiver_stall
            .is_some_and(|(a, b)| self.now >= a && self.now < b)
    }

    fn pump_reno(&mut self) {
        let Some(mut reno) = self.reno.take() else { return };
        if reno
            .last_ack
            .is_some_and(|l| self.now - l > Duration::from_secs(1))
            && !reno.inflight.is_empty()
        {
            reno.inflight.clear();
            reno.cwnd = 1.0;
        }
        while (reno.inflight.len() as f64) < reno.cwnd {
            let seq = reno.next_seq;
            reno.next_seq += 1;
            reno.inflight.insert(seq);
            let mut buf = self.pool.pop().unwrap_or_default();
            buf.clear();
            buf.resize(RENO_LEN, 0);
            buf[0] = RENO_MARK;
            buf[1..9].copy_from_slice(&seq.to_be_bytes());
            self.send_on_link(buf);
        }
        self.reno = Some(reno);
    }

    fn sender_held(&self) -> bool {
        self.sender_stall.is_some_and(|(a, b, every)| {
            self.now >= a
                && self.now < b
                && every.is_none_or(|e| (self.now - a).as_nanos() % e.as_nanos() >= 1_000_000)
        })
    }

    /// When the held sender runs next.
    fn sender_runs_at(&self) -> Option<Instant> {
        let (a, b, every) = self.sender_stall?;
        Some(match every {
            Some(e) => {
                let n = (self.now - a).as_nanos() / e.as_nanos() + 1;
                (a + Duration::from_nanos((n * e.as_nanos()) as u64)).min(b)
            }
            None => b,
        })
    }

    fn pump_out(&mut self) {
        self.pump_reno();
        if self.sender_held() {
            return;
        }
        while let Some(t) = self.s.poll_transmit(self.now) {
            let (f, off, len) = (t.header.file, t.header.offset, t.header.len as u64);
            let c = (off / self.chunk_size) as usize;
            if !self.sender_hashed[f as usize][c] && !self.s.derives_chunk_hashes() {
                // "hashed where it is read": the sender's I/O hashes the chunk on first read (with blocks
                // that are BLAKE3 subtrees the sender merges the digests it seals instead)
                self.sender_hashed[f as usize][c] = true;
                let h = self.generated_hash(f, c as u64);
                self.s.set_chunk_hash(f, c as u32, h);
            }
            let mut buf = self.pool.pop().unwrap_or_default();
            buf.resize(t.datagram_len(), 0);
            t.emit_header(&mut buf);
            fill(f, off, &mut buf[HEADER_LEN..HEADER_LEN + len as usize]);
            self.s.seal(&mut buf);
            self.send_on_link(buf);
        }
        while let Some(m) = self.s.poll_control() {
            self.ctl_s2r
                .push_back((self.now + self.link.one_way, m.to_line()));
        }
        while let Some(e) = self.s.poll_event() {
            self.s_events.push((self.now - self.t0, e));
        }
        if !self.receiver_alive() || self.receiver_stalled() {
            return;
        }
        self.receiver_control();
        self.receiver_events();
    }

    /// The hash of a chunk of the generated content, computed once for both ends.
    fn generated_hash(&mut self, file: u32, chunk: u64) -> ChunkHash {
        let (size, cs) = (self.sizes[file as usize], self.chunk_size);
        let scratch = &mut self.scratch;
        *self
            .gen_hashes
            .entry((file, chunk))
            .or_insert_with(|| gen_chunk_hash(file, size, cs, chunk, scratch))
    }

    /// The receiver's events as its I/O layer handles them: a resume's chunks on disk declared as soon as
    /// their file is announced (before any of its data), complete chunks hashed as written.
    fn receiver_events(&mut self) {
        while let Some(e) = self.r.poll_event() {
            if let Event::FileAnnounced { file, .. } = &e {
                if let Some(hashes) = self.declare_on_announce.remove(file) {
                    for (c, h) in hashes.into_iter().enumerate() {
                        let ok = self.r.declare_verified(*file, c as u32, h);
                        self.declared.push(ok);
                    }
                    self.receiver_control();
                }
            }
            if let Event::ChunkComplete {
                file,
                chunk,
                offset,
                len,
            } = e
            {
                // the receiver's I/O hashes what it wrote
                let size = self.sizes[file as usize];
                let h = match &self.disk {
                    Some(d) => hash::chunk_hash(
                        size,
                        self.chunk_size,
                        chunk as u64,
                        &d[file as usize][offset as usize..(offset + len) as usize],
                    ),
                    // every datagram was compared with the generated content as it arrived
                    None => self.generated_hash(file, chunk as u64),
                };
                self.r.chunk_hashed(file, chunk, h);
                self.receiver_control();
            }
            self.r_events.push((self.now - self.t0, e));
        }
    }

    /// The receiver's control messages: feedback as datagrams (lost at random on the return path), and on
    /// the control channel as well until the sender has confirmed that datagrams arrive; the rest on the
    /// control channel.
    fn receiver_control(&mut self) {
        while let Some(m) = self.r.poll_control() {
            let at = self.now + self.link.one_way;
            if let ControlMsg::Feedback(fb) = &m {
                let mut d = Vec::new();
                if wire::emit_feedback_datagram(FB_KEY.as_ref(), 7, fb, &mut d).is_some() {
                    if self.rng.gen::<f64>() < self.fb_loss {
                        self.fb_lost += 1;
                    } else {
                        self.fb_dgrams.push_back((at, d));
                    }
                    if self.r.feedback_datagrams_confirmed() {
                        continue;
                    }
                }
            }
            self.ctl_r2s.push_back((at, m.to_line()));
        }
    }

    fn next_time(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        let held = self.sender_held();
        if held {
            // what reaches the sender waits until it runs again
            min(self.sender_runs_at());
        } else {
            min(self.s.poll_timeout());
        }
        if self.receiver_stalled() {
            // nothing reaches the receiver until the stall ends
            min(self.receiver_stall.map(|s| s.1));
            if !held {
                min(self.ctl_r2s.front().map(|c| c.0));
                min(self.fb_dgrams.front().map(|c| c.0));
            }
            return t;
        }
        if self.receiver_alive() {
            min(self.r.poll_timeout());
            min(self.receiver_dies_at);
        }
        min(self.receiver_stall.map(|s| s.0).filter(|&a| a > self.now));
        match self.receiver_slow {
            // a slow receiver takes its next datagram when it has time for it
            Some((a, b, per)) if self.now >= a && self.now < b => {
                let slot = a + per * (self.slow_taken as u32 + 1);
                min(self.next_arrival().map(|x| x.max(slot.min(b))));
            }
            _ => min(self.next_arrival()),
        }
        if let Some(r) = &self.reno {
            min(r.acks.front().map(|a| a.0));
            min(r
                .last_ack
                .map(|l| l + Duration::from_secs(1) + Duration::from_micros(1)));
        }
        min(self.ctl_s2r.front().map(|c| c.0));
        if !held {
            min(self.ctl_r2s.front().map(|c| c.0));
            min(self.fb_dgrams.front().map(|c| c.0));
        }
        t
    }

    fn step(&mut self) -> bool {
        self.pump_out();
        if self.s.is_finished() && (self.r.is_finished() || !self.receiver_alive()) {
            return false;
        }
        let Some(mut next) = self.next_time() else {
            return false;
        };
        if let Some(q) = self.quantum {
            // the next wake-up at or after it
            let q = q.as_nanos();
            let since = (next - self.t0).as_nanos().div_ceil(q) * q;
            next = self.t0 + Duration::from_nanos(since as u64);
        }
        self.now = self.now.max(next);
        let now = self.now;
        self.arrive_from_link(now);
        let stalled = self.receiver_stalled();
        let alive = self.receiver_alive() && !stalled;
        // a slow receiver takes what it has had time for since it became slow
        let mut budget = u64::MAX;
        if let Some((a, b, per)) = self.receiver_slow {
            if now >= a && now < b {
                let may = ((now - a).as_nanos() / per.as_nanos().max(1)) as u64;
                budget = may.saturating_sub(self.slow_taken);
            }
        }
        if let (Some(limit), true) = (self.rx_buffer, budget != u64::MAX) {
            // the socket buffer holds `limit` datagrams; the oldest beyond it are dropped here (the
            // kernel drops the newest, which makes the same gaps a moment later)
            let due = self.fifo.iter().take_while(|p| p.at <= now).count();
            for _ in limit..due {
                let p = self.fifo.pop_front().expect("due datagram");
                self.host_drops += 1;
                self.pool.push(p.data);
            }
            if self.report_host_drops {
                self.r.set_host_drops(self.host_drops);
            }
        }
        while let Some(p) = (!stalled && budget > 0).then(|| self.pop_due(now)).flatten() {
            if budget != u64::MAX {
                budget -= 1;
                self.slow_taken += 1;
            }
            if self.reno.is_some() && p.data.first() == Some(&RENO_MARK) {
                if let Some(r) = &mut self.reno {
                    let mut s = [0u8; 8];
                    s.copy_from_slice(&p.data[1..9]);
                    r.acks.push_back((now + self.link.one_way, u64::from_be_bytes(s)));
                }
                self.pool.push(p.data);
                continue;
            }
            // control messages that arrived before it are taken first, as the I/O layer does (it holds a
            // batch of datagrams that overtook a control message until that message is in)
            while self.ctl_s2r.front().is_some_and(|c| c.0 <= p.at) {
                let (_, line) = self.ctl_s2r.pop_front().unwrap();
                if alive {
                    self.r
                        .handle_control(now, ControlMsg::parse_line(&line).expect("sender control line"));
                    self.receiver_events();
                }
            }
            if self.injected_ids.remove(&p.id) && alive && self.r.is_finished() {
                self.injected_after_finish += 1;
            }
            if alive {
                // the arrival is when the datagram reached the receiving host (the kernel's receive time)
                if let Some(d) = self.r.handle_datagram_at(now, p.at.min(now), &p.data) {
                    let f = d.file as usize;
                    self.written[f] += d.data.len() as u64;
                    match &mut self.disk {
                        Some(disk) => disk[f][d.offset as usize..d.offset as usize + d.data.len()]
                            .copy_from_slice(d.data),
                        None => {
                            self.scratch.resize(d.data.len(), 0);
                            fill(d.file, d.offset, &mut self.scratch);
                            assert_eq!(d.data, &self.scratch[..], "file {f} offset {}", d.offset);
                        }
                    }
                    self.delivered_at.push((now - self.t0, d.data.len() as u64));
                }
            }
            self.pool.push(p.data);
        }
        if let Some(r) = &mut self.reno {
            while r.acks.front().is_some_and(|a| a.0 <= now) {
                let (_, seq) = r.acks.pop_front().unwrap();
                r.on_ack(now, now - self.t0, seq);
            }
        }
        while !stalled && self.ctl_s2r.front().is_some_and(|c| c.0 <= now) {
            let (_, line) = self.ctl_s2r.pop_front().unwrap();
            if alive {
                self.r
                    .handle_control(now, ControlMsg::parse_line(&line).expect("sender control line"));
                self.receiver_events();
            }
        }
        let held = self.sender_held();
        while !held && self.ctl_r2s.front().is_some_and(|c| c.0 <= now) {
            let (_, line) = self.ctl_r2s.pop_front().unwrap();
            self.s
                .handle_control(now, ControlMsg::parse_line(&line).expect("receiver control line"));
        }
        while !held && self.fb_dgrams.front().is_some_and(|c| c.0 <= now) {
            let (_, d) = self.fb_dgrams.pop_front().unwrap();
            let fb = wire::parse_feedback_datagram(FB_KEY.as_ref(), 7, &d).expect("feedback datagram");
            self.s.handle_feedback_datagram(now, fb);
        }
        if !held && self.s.poll_timeout().is_some_and(|t| t <= now) {
            self.s.handle_timeout(now);
        }
        if alive && self.r.poll_timeout().is_some_and(|t| t <= now) {
            self.r.handle_timeout(now);
        }
        true
    }

    fn run(&mut self, limit: Duration) -> Duration {
        while self.step() {
            assert!(
                self.now - self.t0 < limit,
                "no completion within {limit:?} of simulated time"
            );
        }
        self.pump_out();
        self.now - self.t0
    }

    fn sender_done(&self) -> bool {
        self.s_events.iter().any(|e| e.1 == Event::TransferDone)
    }
    fn receiver_done(&self) -> bool {
        self.r_events.iter().any(|e| e.1 == Event::TransferDone)
    }

    fn check_exact(&mut self) {
        assert!(
            self.sender_done(),
            "sender events: {:?}",
            self.s_events.iter().rev().take(3).collect::<Vec<_>>()
        );
        assert!(
            self.receiver_done(),
            "receiver events: {:?}",
            self.r_events.iter().rev().take(3).collect::<Vec<_>>()
        );
        let mut scratch = Vec::new();
        if let Some(disk) = &self.disk {
            for (f, d) in disk.iter().enumerate() {
                scratch.resize(d.len(), 0);
                fill(f as u32, 0, &mut scratch);
                assert!(d[..] == scratch[..], "file {f} differs");
            }
        }
        let verified = self
            .r_events
            .iter()
            .filter(|e| matches!(e.1, Event::ChunkVerified { .. }))
            .count();
        let chunks: u64 = self.sizes.iter().map(|s| s.div_ceil(self.chunk_size)).sum();
        assert_eq!(verified as u64, chunks);
        let files = self
            .r_events
            .iter()
            .filter(|e| matches!(e.1, Event::FileDone { .. }))
            .count();
        assert_eq!(files, self.sizes.len());
    }
}

/// The feedback datagrams' key in the simulation.
const FB_KEY: Option<[u8; 32]> = Some([3u8; 32]);

fn mb(x: f64) -> f64 {
    x / 1e6
}

#[test]
fn every_byte_exact_under_loss_bursts_reordering_duplication() {
    let mut link = LinkCfg::new(200e6, Duration::from_millis(40));
    link.loss = Loss::GilbertElliott {
        p_gb: 0.002,
        p_bg: 0.1,
        good: 0.01,
        bad: 0.5,
    };
    link.reorder = 0.05;
    link.dup = 0.01;
    let sizes = vec![
        0,
        1,
        8191,
        8192,
        8193,
        1 << 20,
        (1 << 20) + 1,
        3_000_017,
        20 << 20,
        7,
        12_345_678,
    ];
    let mut sim = Sim::new(Setup::new(link, sizes));
    let t = sim.run(Duration::from_secs(120));
    sim.check_exact();
    let st = sim.s.stats();
    let rs = sim.r.stats();
    eprintln!(
        "impaired: {t:?}, sender {st:?}, receiver {rs:?}, link drops {}",
        sim.link_drops
    );
    assert!(st.retransmits > 0 && rs.duplicates > 0);
    assert_eq!(rs.bad_tag + rs.malformed + rs.wrong_transfer, 0);
    for (f, &sz) in sim.sizes.iter().enumerate() {
        assert_eq!(sim.written[f], sz, "file {f}: each byte written exactly once");
    }
}

/// Blocks of a size that is not a power of two (1400 bytes, for a 1500-byte MTU) are aligned to the chunks
/// (the last block of a chunk is shorter), and their chunk hashes come from the I/O layer's hashing of what
/// was written. Before blocks were aligned to chunks a block straddling two chunks left both incomplete
/// forever.
#[test]
fn odd_block_sizes_align_to_chunks() {
    let mut link = LinkCfg::new(100e6, Duration::from_millis(10));
    link.loss = Loss::Random(0.01);
    let sizes = vec![65536 * 3 + 17, 1399, 1400, 1401, 65536, 200_000];
    let mut st = Setup::new(link, sizes);
    st.block = 1400;
    st.chunk = 65536;
    st.key = Some(wire::derive_data_key(b"k", 7));
    let mut sim = Sim::new(st);
    assert!(!sim.s.derives_chunk_hashes());
    sim.run(Duration::from_secs(60));
    sim.check_exact();
    let rs = sim.r.stats();
    assert_eq!(rs.bad_tag + rs.malformed, 0, "{rs:?}");
    for (f, &sz) in sim.sizes.iter().enumerate() {
        assert_eq!(sim.written[f], sz, "file {f}: each byte written exactly once");
    }
}

/// The product target: >= 90% of the bottleneck at 1% random loss and 100 ms RTT.
#[test]
fn goodput_at_one_percent_loss_and_100ms() {
    for (rate, secs) in [(200e6, 10.0), (1e9, 6.0)] {
        let mut link = LinkCfg::new(rate, Duration::from_millis(100));
        link.loss = Loss::Random(0.01);
        let bytes = (rate / 8.0 * secs) as u64;
        let mut st = Setup::compared(link, bytes);
        st.fb_loss = 0.01; // the return path loses 1% as well
        let mut sim = Sim::new(st);
        let t = sim.run(Duration::from_secs(120));
        sim.check_exact();
        let whole = bytes as f64 * 8.0 / t.as_secs_f64();
        // steady state: from 2 s on until 90% of the bytes are in
        let mut acc = 0u64;
        let (mut a, mut b, mut n) = (None, None, 0u64);
        for &(at, l) in &sim.delivered_at {
            acc += l;
            if at >= Duration::from_secs(2) && a.is_none() {
                a = Some((at, acc));
            }
            if acc as f64 >= 0.9 * bytes as f64 && b.is_none() {
                b = Some((at, acc));
            }
            n += 1;
        }
        let (a, b) = (a.unwrap(), b.unwrap());
        let steady = (b.1 - a.1) as f64 * 8.0 / (b.0 - a.0).as_secs_f64();
        let payload_share = 8192.0 / (8192.0 + HEADER_LEN as f64 + 48.0);
        eprintln!(
            "1% loss, 100 ms, {:.0} Mb/s: {} bytes in {t:?}: goodput {:.1} Mb/s = {:.1}% of the bottleneck \
             ({:.1}% of its payload capacity); steady state {:.1} Mb/s = {:.1}%; retransmits {}, cuts q/l {}/{}, \
             {n} deliveries",
            mb(rate),
            bytes,
            mb(whole),
            100.0 * whole / rate,
            100.0 * whole / rate / payload_share,
            mb(steady),
            100.0 * steady / rate,
            sim.s.stats().retransmits,
            sim.s.rate().cuts_queue,
            sim.s.rate().cuts_loss,
        );
        assert!(steady >= 0.90 * rate, "steady goodput {:.1} Mb/s", mb(steady));
        assert!(
            whole >= 0.75 * rate,
            "whole-transfer goodput {:.1} Mb/s",
            mb(whole)
        );
    }
}

/// Startup overshoots the path by design (it paces at 2.9x what was delivered until the queue shows, a
/// round trip late), but it must not flood a bottleneck buffer of one BDP: with the bytes in flight capped
/// at twice what the path delivered and drain lasting until one BDP is in flight, nothing is dropped at
/// the bottleneck (before, at 100 ms and 2 Gb/s through the emulator, 1400-2000 datagrams were; here 162
/// at 200 Mb/s, 100 ms). Round trips of 10 ms and more: below, the cap keeps room for the 5 ms feedback
/// interval, more than a buffer of one BDP holds.
#[test]
fn startup_does_not_overflow_a_buffer_of_one_bdp() {
    for (rate, rtt_ms) in [(200e6, 100u64), (400e6, 40), (200e6, 200), (1e9, 10)] {
        let rtt = Duration::from_millis(rtt_ms);
        let mut link = LinkCfg::new(rate, rtt);
        link.queue_bytes = (rate / 8.0 * rtt.as_secs_f64()) as usize;
        let bytes = (rate / 8.0 * 4.0) as u64;
        let st = Setup::compared(link, bytes);
        let mut sim = Sim::new(st);
        let t = sim.run(Duration::from_secs(60));
        sim.check_exact();
        let goodput = bytes as f64 * 8.0 / t.as_secs_f64();
        eprintln!(
            "{:.0} Mb/s, {rtt_ms} ms, 1-BDP buffer: {} drops at the bottleneck of {} datagrams, goodput {:.1} Mb/s in {t:?}",
            mb(rate),
            sim.link_drops,
            sim.datagrams_on_link,
            mb(goodput)
        );
        assert_eq!(sim.link_drops, 0, "{:.0} Mb/s, {rtt_ms} ms", mb(rate));
        assert!(goodput >= 0.6 * rate, "goodput {:.1} Mb/s", mb(goodput));
    }
}

/// Startup leaves when the receiver sees a queue of an eighth of the RTT, but only a queue that lasts
/// means the path is full: a forwarder (or sending host) that loses its CPU for 15-25 ms delays
/// everything behind it by as much, with no queue at the bottleneck. Through the emulator such readings
/// (10-15 ms at 100-280 Mb/s) ended startup at 0.41 s on a 2 Gb/s, 100 ms path, and probing took 11 s
/// to reach the path. Here the path freezes once per round trip all through startup; startup must still
/// end near the path's rate.
#[test]
fn short_stalls_of_the_path_do_not_end_startup() {
    let rate = 1e9;
    let rtt = Duration::from_millis(100);
    let bytes = (rate / 8.0 * 5.0) as u64;
    for stall_ms in [0u64, 15, 25] {
        let st = Setup::compared(LinkCfg::new(rate, rtt), bytes);
        let mut sim = Sim::new(st);
        let t0 = sim.t0;
        sim.path_stalls = (1..8u64)
            .map(|i| {
                let a = t0 + Duration::from_millis(100 * i + 30);
                (a, a + Duration::from_millis(stall_ms))
            })
            .collect();
        let mut left = None;
        while sim.step() {
            assert!(sim.now - t0 < Duration::from_secs(60), "no completion");
            if left.is_none() && !sim.s.rate().in_startup() {
                left = Some((sim.now - t0, sim.s.rate().state().btl_bw * 8.0));
            }
        }
        sim.pump_out();
        let took = sim.now - t0;
        sim.check_exact();
        let (at, bw) = left.expect("startup ended");
        let goodput = bytes as f64 * 8.0 / took.as_secs_f64();
        eprintln!(
            "stalls of {stall_ms} ms: startup ended at {at:?} with an estimate of {:.0} Mb/s; \
             {bytes} bytes in {took:?}, {:.0} Mb/s, {} drops at the bottleneck",
            mb(bw),
            mb(goodput),
            sim.link_drops
        );
        assert!(
            bw >= 0.8 * rate,
            "stalls of {stall_ms} ms: estimate {:.0} Mb/s",
            mb(bw)
        );
        assert!(
            goodput >= 0.75 * rate,
            "stalls of {stall_ms} ms: goodput {:.0} Mb/s",
            mb(goodput)
        );
    }
}

/// A sending host that does not run the sender for 350 ms early in startup (on a 2-core machine busy
/// with the emulator as well: one run in 25 of the grid of 2026-11-25 12:16) must not take the flat
/// delivery rate that follows, an RTT later, for a full pipe: startup went on to the path's rate there
/// before, and ended at 78 Mb/s of 2 Gb/s then, the probing taking 10 s to climb back.
#[test]
fn a_sender_held_in_startup_does_not_end_it() {
    let rate = 1e9;
    let rtt = Duration::from_millis(100);
    let bytes = (rate / 8.0 * 4.0) as u64;
    // held at once, or running for a millisecond every 25 or 10 ms (which ended startup at 89 Mb/s of
    // 1 Gb/s before the rate control was told, and took 9.8 s where 5.2 do)
    for (at_ms, held_ms, every) in [
        (300u64, 350u64, None),
        (250, 600, Some(25u64)),
        (250, 600, Some(10)),
    ] {
        let st = Setup::compared(LinkCfg::new(rate, rtt), bytes);
        let mut sim = Sim::new(st);
        let t0 = sim.t0;
        let a = t0 + Duration::from_millis(at_ms);
        sim.sender_stall = Some((
            a,
            a + Duration::from_millis(held_ms),
            every.map(Duration::from_millis),
        ));
        let mut left = None;
        while sim.step() {
            assert!(sim.now - t0 < Duration::from_secs(60), "no completion");
            if left.is_none() && !sim.s.rate().in_startup() {
                left = Some((sim.now - t0, sim.s.rate().state().btl_bw * 8.0));
            }
        }
        sim.pump_out();
        let took = sim.now - t0;
        sim.check_exact();
        let (at, bw) = left.expect("startup ended");
        let goodput = bytes as f64 * 8.0 / took.as_secs_f64();
        eprintln!(
            "held {held_ms} ms at {at_ms} ms (running every {every:?} ms): startup ended at {at:?} with \
             an estimate of {:.0} Mb/s; {bytes} bytes in {took:?}, {:.0} Mb/s, {} drops at the bottleneck",
            mb(bw),
            mb(goodput),
            sim.link_drops
        );
        assert!(
            bw >= 0.8 * rate,
            "held {held_ms} ms at {at_ms} ms: estimate {:.0} Mb/s",
            mb(bw)
        );
        assert!(
            goodput >= 0.65 * rate,
            "held {held_ms} ms at {at_ms} ms: goodput {:.0} Mb/s",
            mb(goodput)
        );
    }
}

/// Feedback datagrams lost in numbers (30% of them, so runs of four and more are lost too) lose no loss
/// report: what no surviving feedback reported on is sent again, every byte arrives exactly once, and
/// the copies on the control channel stop once the sender has confirmed the datagrams.
#[test]
fn lost_feedback_datagrams_lose_no_report() {
    let mut link = LinkCfg::new(200e6, Duration::from_millis(40));
    link.loss = Loss::Random(0.02);
    let mut st = Setup::new(link, vec![100 << 20, 7 << 20, 1]);
    st.fb_loss = 0.3;
    st.seed = 5;
    let mut sim = Sim::new(st);
    sim.run(Duration::from_secs(60));
    sim.check_exact();
    let s = sim.s.stats();
    eprintln!(
        "feedback datagrams lost {}, stale {}, unreported resent {}, reported lost {}, retransmits {}",
        sim.fb_lost, s.stale_feedback, s.unreported, s.reported_lost, s.retransmits
    );
    assert!(sim.fb_lost > 100, "the return path lost feedback");
    assert!(
        s.unreported > 0,
        "some reports were lost with four feedbacks in a row"
    );
    assert!(sim.r.feedback_datagrams_confirmed());
    // resent without a report: only what runs of lost feedbacks hid, far from everything
    assert!(s.retransmits < s.datagrams / 10, "{s:?}");
}

/// A 200 Mb/s, 40 ms path carrying `bytes`, with a receiving host that `hiccup` makes stall or slow
/// down (given the simulation and its start): the tail timer (130 ms at this RTT) presumes nothing lost,
/// and only what the path lost is sent twice.
fn receiver_hiccup(what: &str, bytes: u64, hiccup: impl FnOnce(&mut Sim, Instant)) {
    let link = LinkCfg::new(200e6, Duration::from_millis(40));
    let mut st = Setup::new(link, vec![bytes]);
    st.seed = 9;
    let mut sim = Sim::new(st);
    let t0 = sim.t0;
    hiccup(&mut sim, t0);
    let took = sim.run(Duration::from_secs(60));
    sim.check_exact();
    let s = sim.s.stats();
    eprintln!(
        "{what}: {took:?}, {} datagrams, {} retransmits, tail presumed {}",
        s.datagrams, s.retransmits, s.tail_lost
    );
    assert_eq!(s.tail_lost, 0, "{what}: {s:?}");
    assert!(
        s.retransmits <= s.reported_lost,
        "{what}: only what the path lost goes twice: {s:?}"
    );
}

/// A receiver slowed to about a quarter of the path's rate for 300 ms (its disk), which keeps reporting
/// what it handles: datagrams wait in its buffer for up to 200 ms. The sender adds the receiver's lag (the
/// echo delay of its reports) to the tail timer, so nothing that was only waiting is sent again (without
/// the lag: 441 presumed lost, 352 sent twice).
#[test]
fn a_slow_receiver_is_not_a_lossy_path() {
    // one 8 KiB datagram per 1.2 ms: about 55 Mb/s against 200
    receiver_hiccup("slow for 300 ms", 80 << 20, |sim, t0| {
        sim.receiver_slow = Some((
            t0 + Duration::from_millis(1500),
            t0 + Duration::from_millis(1800),
            Duration::from_micros(1200),
        ));
    });
}

/// A receiver slower than the path for 3 s whose socket buffer overflows, on a path with 1% random
/// loss: its host's drops are reported (`SO_RXQ_OVFL`) and not read as the path's random loss, so the
/// pacing does not make up for them by sending more into the full buffer.
///
/// The estimate counts the losses of rounds without a queue only. Whether the drops of the control run
/// (not reported) fall in such rounds, and so show, depends on where the gain cycle stands while the
/// receiver is slow: seed by seed, with the simulator's former path of its own as with the shared path
/// model (of the seeds 1-8, 4 showed none with the former, 6 with the model; seed 5, the one this test
/// had, showed with the former only). So every seed tried must keep the estimate low with the drops
/// reported, and the control must show them with one of the seeds at least.
#[test]
fn a_receiving_host_that_drops_is_not_a_lossy_path() {
    let mut runs = Vec::new();
    for seed in 5..15 {
        let reported = host_drops_run(seed, true);
        let unreported = host_drops_run(seed, false);
        assert!(
            reported.1 < 0.02,
            "seed {seed}: reported: random loss estimated at {}",
            reported.1
        );
        runs.push((seed, reported, unreported));
        if unreported.1 > reported.1 {
            return;
        }
    }
    panic!("unreported drops did not change the estimate with any seed: {runs:?}");
}

/// One run of [`a_receiving_host_that_drops_is_not_a_lossy_path`]: the drops of the receiving host and
/// the highest random loss estimated late in the slow spell.
fn host_drops_run(seed: u64, report: bool) -> (u64, f64) {
    let mut link = LinkCfg::new(200e6, Duration::from_millis(40));
    link.loss = Loss::Random(0.01);
    let mut st = Setup::new(link, vec![150 << 20]);
    st.store = false;
    st.seed = seed;
    let mut sim = Sim::new(st);
    let t0 = sim.t0;
    // one 8 KiB datagram per 500 us: about 130 Mb/s against 200
    sim.receiver_slow = Some((
        t0 + Duration::from_millis(1500),
        t0 + Duration::from_millis(4500),
        Duration::from_micros(500),
    ));
    sim.rx_buffer = Some(256);
    sim.report_host_drops = report;
    let mut est = 0.0f64;
    while sim.step() {
        let t = sim.now - t0;
        assert!(t < Duration::from_secs(60), "no completion");
        if t >= Duration::from_millis(4000) && t < Duration::from_millis(4500) {
            est = est.max(sim.s.rate().random_loss());
        }
    }
    sim.pump_out();
    sim.check_exact();
    eprintln!(
        "seed {seed}, host drops reported: {report}: {} dropped by the host, random loss estimated at up to {est:.4} late in the slow spell",
        sim.host_drops
    );
    (sim.host_drops, est)
}

/// A receiver that stalls for 150 ms: the sender waits for it instead of presuming what is in flight
/// lost; once it works off its backlog, only what the path lost (the start's queue overflow here) was
/// sent twice (without the wait: 197 presumed lost by the tail timer, 341 retransmissions).
#[test]
fn a_stalled_receiver_is_not_a_lossy_path() {
    receiver_hiccup("stall of 150 ms", 60 << 20, |sim, t0| {
        sim.receiver_stall = Some((t0 + Duration::from_millis(1500), t0 + Duration::from_millis(1650)));
    });
}

/// A LAN-like path (0.2 ms RTT) with 5% random loss: the estimate must climb to the path (a probe as
/// short as the round trip did not show in the 20 ms delivery samples, and the rate sat at 55-70%).
#[test]
fn five_percent_loss_at_a_fraction_of_a_millisecond() {
    let mut link = LinkCfg::new(1e9, Duration::from_micros(100));
    link.loss = Loss::Random(0.05);
    link.queue_bytes = 4 << 20;
    let bytes = 400u64 << 20;
    let mut st = Setup::compared(link, bytes);
    st.fb_loss = 0.05;
    let mut sim = Sim::new(st);
    let t = sim.run(Duration::from_secs(60));
    sim.check_exact();
    let goodput = bytes as f64 * 8.0 / t.as_secs_f64();
    eprintln!(
        "5% loss, 0.2 ms: {:.0} Mb/s = {:.1}% of the link, retransmits {}",
        mb(goodput),
        100.0 * goodput / 1e9,
        sim.s.stats().retransmits
    );
    // at most 95% get through; payload is 98.6% of the wire
    assert!(goodput >= 0.85 * 1e9, "{:.0} Mb/s", mb(goodput));
}

/// 400 MB over a 1 Gb/s link with `p` random loss before its bottleneck (or after it) and a 4 MB queue:
/// the runs that measure how the pacing makes up for random loss.
fn random_loss_setup(p: f64, rtt: Duration, before: bool) -> Setup {
    let mut link = LinkCfg::new(1e9, rtt);
    link.loss = Loss::Random(p);
    link.loss_before = before;
    link.queue_bytes = link.queue_bytes.max(4 << 20);
    Setup::compared(link, 400 << 20)
}

/// Goodput after startup and until the last round trips of a transfer that took `t`, bits/s.
fn goodput_after_startup(sim: &Sim, t: Duration) -> f64 {
    rate_between(
        &sim.delivered_at,
        Duration::from_secs(1),
        t - Duration::from_millis(200),
    )
}

/// Random loss before the bottleneck (5% and 1%, at 0.2 and 20 ms): the pacing makes up for it and the
/// bottleneck is filled after startup; with the loss after the bottleneck the same rule sends the
/// bottleneck's rate rather than that rate less the loss. After startup, pacing at the delivery rate
/// alone delivered 95.1%, 99.1%, 95.1% and 95.6% (after) of what the link can carry; with the loss made
/// up for while the receiver sees no queue, 99.3%, 99.9%, 99.2% and 98.4%, with no cut for a standing
/// queue (making up for it regardless: 99.8%, 100.1%, 99.8% and 98.9%, but 15, 3, 0 and 7 cuts) (`pathemu` drops on entry, as netem does, and TCP BBR filled
/// the bottleneck there).
#[test]
fn random_loss_before_the_bottleneck_is_made_up_for() {
    let mut results = Vec::new();
    for (p, rtt_us, before) in [
        (0.05, 200, true),
        (0.01, 200, true),
        (0.05, 20_000, true),
        (0.05, 200, false),
    ] {
        let mut sim = Sim::new(random_loss_setup(p, Duration::from_micros(rtt_us), before));
        let t = sim.run(Duration::from_secs(60));
        sim.check_exact();
        let s = sim.s.stats();
        let goodput = goodput_after_startup(&sim, t);
        // payload is 98.6% of the wire
        let can = if before { 0.986 } else { 0.986 * (1.0 - p) };
        eprintln!(
            "{}% loss {} the bottleneck, {rtt_us} us: {:.0} Mb/s = {:.1}% of what the link can carry, random loss {:.4}, cuts queue {} loss {}, trims {}",
            p * 100.0,
            if before { "before" } else { "after" },
            mb(goodput),
            100.0 * goodput / (can * 1e9),
            sim.s.rate().random_loss(),
            s.rate_cuts_queue,
            s.rate_cuts_loss,
            s.rate_trims_queue,
        );
        results.push((p, rtt_us, goodput / (can * 1e9), sim.s.rate().random_loss()));
    }
    for (p, rtt_us, share, est) in results {
        assert!(share >= 0.97, "{p} at {rtt_us} us: {:.1}%", share * 100.0);
        assert!(
            (est - p).abs() < 0.3 * p,
            "{p} at {rtt_us} us: random loss estimated at {est}"
        );
    }
}

/// A forwarder on the path that loses its CPU for a few milliseconds now and then (a virtual machine's
/// host, the emulator here) delays what passes meanwhile and lets it go bunched: the receiver reports a
/// queue for a moment, with nothing standing at the bottleneck. The pacing goes on making up for the
/// path's random loss through such moments; only a queue that lasts a round, or a long one, turns it off.
/// At 0 ms through `vlbiflow pathemu` with 5% loss, 40-57% of the receiver's readings were 1 ms or more
/// and each turned it off. Here, turned off by every reading of 1 ms or more, it made up for the loss in
/// 85% of the gain cycle (99.4% of what the link can carry); now in 95% (100.0%).
#[test]
fn momentary_queues_do_not_stop_making_up_for_random_loss() {
    let mut sim = Sim::new(random_loss_setup(0.05, Duration::from_micros(200), true));
    let t0 = sim.t0;
    // 6 ms every 25 ms after startup, until well past the end
    sim.path_stalls = (20..400u64)
        .map(|i| {
            let a = t0 + Duration::from_millis(25 * i);
            (a, a + Duration::from_millis(6))
        })
        .collect();
    // the share of the gain cycle's time (after startup) in which the pacing made up for the loss,
    // sampled every millisecond
    let (mut next, mut cruising, mut making_up) = (t0 + Duration::from_secs(1), 0u32, 0u32);
    while sim.step() {
        assert!(sim.now - t0 < Duration::from_secs(60), "no completion");
        while sim.now >= next {
            next += Duration::from_millis(1);
            let st = sim.s.rate().state();
            if st.phase == "probe" {
                cruising += 1;
                making_up += u32::from(st.loss_comp > 0.0);
            }
        }
    }
    sim.pump_out();
    let t = sim.now - t0;
    sim.check_exact();
    let s = sim.s.stats();
    let goodput = goodput_after_startup(&sim, t);
    let share = goodput / (0.986 * 1e9);
    let on = f64::from(making_up) / f64::from(cruising.max(1));
    eprintln!(
        "stalls of 6 ms every 25 ms, 5% loss before the bottleneck, 200 us: {:.0} Mb/s = {:.1}% of what \
         the link can carry, made up for {:.0}% of the gain cycle, random loss {:.4}, cuts queue {} \
         loss {}, trims {}",
        mb(goodput),
        100.0 * share,
        100.0 * on,
        sim.s.rate().random_loss(),
        s.rate_cuts_queue,
        s.rate_cuts_loss,
        s.rate_trims_queue,
    );
    assert!(share >= 0.97, "{:.1}%", share * 100.0);
    assert!(on >= 0.9, "made up for {:.0}% of the gain cycle", 100.0 * on);
}

#[test]
fn fixed_rate_stays_under_its_ceiling() {
    let mut link = LinkCfg::new(1e9, Duration::from_millis(100));
    link.loss = Loss::Random(0.01);
    let bytes = 100 << 20;
    let mut st = Setup::new(link, vec![bytes]);
    st.rate = RateConfig::fixed(300e6);
    st.store = false;
    let mut sim = Sim::new(st);
    let t = sim.run(Duration::from_secs(60));
    sim.check_exact();
    let wire = sim.datagrams_on_link as f64 * (8192.0 + 112.0) * 8.0;
    let g = bytes as f64 * 8.0 / t.as_secs_f64();
    eprintln!(
        "fixed 300 Mb/s on 1 Gb/s at 1% loss: goodput {:.1} Mb/s, wire {:.1} Mb/s",
        mb(g),
        mb(wire / t.as_secs_f64())
    );
    assert!(wire / t.as_secs_f64() <= 300e6 * 1.01);
    assert!(g >= 0.85 * 300e6);
}

#[test]
fn millions_of_packets_fast() {
    // 64-byte blocks so that packet count, not byte copying, dominates
    let mut link = LinkCfg::new(1e9, Duration::from_millis(20));
    link.loss = Loss::Random(0.01);
    link.reorder = 0.01;
    let bytes: u64 = 128 << 20;
    let mut st = Setup::new(link, vec![bytes]);
    st.block = 64;
    st.chunk = 16 << 20;
    st.store = false;
    let mut sim = Sim::new(st);
    let wall = Instant::now();
    let t = sim.run(Duration::from_secs(120));
    let wall = wall.elapsed();
    sim.check_exact();
    let pkts = sim.datagrams_on_link;
    eprintln!(
        "{pkts} datagrams ({:.0} MB) in {t:?} simulated, {wall:?} wall: {:.2} M datagrams/s simulated per wall second",
        bytes as f64 / 1e6,
        pkts as f64 / wall.as_secs_f64() / 1e6
    );
    assert!(pkts > 2_000_000);
}

#[test]
fn dying_receiver_is_detected_within_the_timeout() {
    let link = LinkCfg::new(100e6, Duration::from_millis(50));
    let mut sim = Sim::new(Setup::new(link, vec![500 << 20]));
    let death = sim.t0 + Duration::from_secs(2);
    sim.receiver_dies_at = Some(death);
    sim.run(Duration::from_secs(60));
    let dead = sim
        .s_events
        .iter()
        .find(|e| e.1 == Event::PeerDead)
        .expect("PeerDead");
    let after = dead.0 - Duration::from_secs(2);
    eprintln!("receiver died at 2 s; sender reported PeerDead {after:?} later");
    assert!(
        after >= Duration::from_secs(10) - Duration::from_millis(100) && after <= Duration::from_secs(11)
    );
    assert!(!sim.sender_done());
}

#[test]
fn dying_sender_is_detected_by_the_receiver() {
    let link = LinkCfg::new(100e6, Duration::from_millis(50));
    let mut sim = Sim::new(Setup::new(link, vec![50 << 20]));
    // the sender stops after 1 s: drive only the receiver from then on
    sim.run_until(Duration::from_secs(1));
    let t1 = sim.now;
    let mut dead_at = None;
    while let Some(t) = sim.r.poll_timeout() {
        let now = t;
        sim.r.handle_timeout(now);
        while let Some(e) = sim.r.poll_event() {
            if e == Event::PeerDead {
                dead_at = Some(now);
            }
        }
        assert!(now - t1 < Duration::from_secs(30));
    }
    let after = dead_at.expect("PeerDead") - t1;
    eprintln!("sender went silent; receiver reported PeerDead {after:?} later");
    assert!(after <= Duration::from_secs(10) + Duration::from_millis(200));
}

impl Sim {
    fn run_until(&mut self, d: Duration) {
        while self.now - self.t0 < d && self.step() {}
    }
}

#[test]
fn a_sender_that_adds_its_files_late_keeps_the_receiver_from_declaring_it_dead() {
    // As during a resume: the receiver re-reads what it holds from its disk (minutes for terabytes after a
    // reboot) and the sender adds its files only when that comparison is done, so it sends no datagram
    // for far longer than the dead-peer timeout. Its keep-alive pings hold the receiver; then the
    // transfer completes.
    let link = LinkCfg::new(100e6, Duration::from_millis(20));
    let size: u64 = 4 << 20;
    let st = Setup::new(link, vec![size]);
    let mut sc = SenderConfig::new(7, st.rate);
    sc.block_size = st.block;
    sc.chunk_size = st.chunk;
    let mut sim = Sim::new(st);
    sim.s = Sender::new(sc);
    sim.run_until(Duration::from_secs(35));
    let dead = |ev: &[(Duration, Event)]| ev.iter().any(|e| e.1 == Event::PeerDead);
    assert!(
        !dead(&sim.r_events),
        "the receiver declared the waiting sender dead"
    );
    assert!(!dead(&sim.s_events), "the sender declared the receiver dead");
    sim.s.add_file("exp/file00000.vdif", size, None).unwrap();
    sim.s.close();
    sim.run(Duration::from_secs(60));
    sim.check_exact();
}

#[test]
fn many_small_files_do_not_crawl() {
    let link = LinkCfg::new(100e6, Duration::from_millis(20));
    let n = 10_000;
    let mut st = Setup::new(link, vec![4096; n]);
    st.rate = RateConfig::auto(100e6);
    st.chunk = 8192;
    let mut sim = Sim::new(st);
    let wall = Instant::now();
    let t = sim.run(Duration::from_secs(120));
    let wall = wall.elapsed();
    sim.check_exact();
    let ideal = (n as f64 * (4096.0 + HEADER_LEN as f64 + 48.0) * 8.0) / 100e6;
    eprintln!(
        "{n} x 4 KiB: {t:?} simulated ({:.2}x the {ideal:.2} s wire time at the bottleneck), {wall:?} wall",
        t.as_secs_f64() / ideal
    );
    assert!(t.as_secs_f64() < ideal * 1.3 + 0.5, "{t:?} vs ideal {ideal} s");
}

/// The sender closes its list of files (`closed`), so the receiver commits as soon as it has verified
/// the last chunk: its `TransferDone` comes with its last `FileDone`. Before protocol version 7 it waited
/// for the sender's `done`, which the sender sends when it learns of that verification: a round trip
/// later (100 ms here, 0.8% of a 3 GB transfer at 2 Gb/s).
#[test]
fn the_receiver_commits_without_waiting_a_round_trip_for_done() {
    let rtt = Duration::from_millis(100);
    let mut st = Setup::new(LinkCfg::new(100e6, rtt), vec![3 << 20, 5 << 20, 0]);
    st.link.loss = Loss::Random(0.01);
    let mut sim = Sim::new(st);
    sim.run(Duration::from_secs(30));
    sim.check_exact();
    let done_at = |ev: &[(Duration, Event)]| {
        ev.iter()
            .find(|e| e.1 == Event::TransferDone)
            .map(|e| e.0)
            .expect("done")
    };
    let last_file = sim
        .r_events
        .iter()
        .filter(|e| matches!(e.1, Event::FileDone { .. }))
        .map(|e| e.0)
        .max()
        .expect("files done");
    let (r_done, s_done) = (done_at(&sim.r_events), done_at(&sim.s_events));
    eprintln!("last file verified at {last_file:?}, receiver done {r_done:?}, sender done {s_done:?}");
    assert_eq!(
        r_done, last_file,
        "the receiver is done with its last verification"
    );
    assert!(
        s_done >= r_done + rtt / 2,
        "the sender learns of it half a round trip later"
    );
}

#[test]
fn spoofed_and_garbage_datagrams_are_dropped_and_counted() {
    let key = wire::derive_data_key(b"session secret from the handshake", 7);
    let link = LinkCfg::new(100e6, Duration::from_millis(10));
    let mut st = Setup::new(link, vec![5 << 20, 3 << 20]);
    st.key = Some(key);
    let mut sim = Sim::new(st);
    let mut rng = SmallRng::seed_from_u64(99);
    let mut k = 0u64;
    while sim.step() {
        k += 1;
        if k % 7 == 0 {
            // a well-formed datagram for a real file, sealed with the wrong key
            let h = wire::DataRepr {
                transfer_id: 7,
                seq: k,
                file: 0,
                offset: 0,
                len: 8192,
                timestamp_us: 0,
                retransmit: false,
            };
            let mut buf = vec![0xEE; h.buffer_len()];
            h.emit(&mut wire::DataPacket::new_unchecked(&mut buf[..]));
            wire::seal(&[1; 32], Some(8192), &mut buf);
            sim.inject(buf);
            let len = rng.gen_range(0..300);
            sim.inject((0..len).map(|_| rng.gen()).collect());
        }
        assert!(sim.now - sim.t0 < Duration::from_secs(60));
    }
    sim.pump_out();
    sim.check_exact();
    let rs = sim.r.stats();
    eprintln!(
        "injected {}, {} of them after the receiver finished: {rs:?}",
        sim.injected, sim.injected_after_finish
    );
    // injected datagrams still queued when the transfer ended were never seen, nor were those that
    // reached the receiver after it had finished (it looks at no datagram then: the sender, still
    // waiting to learn so, is half a round trip behind)
    let seen = sim.injected - sim.heap.len() as u64 - sim.injected_after_finish;
    assert!(rs.bad_tag >= seen / 2 - 1);
    assert_eq!(rs.bad_tag + rs.malformed, seen);
}

#[test]
fn corrupted_chunks_fail_verification_and_are_resent() {
    let mut link = LinkCfg::new(100e6, Duration::from_millis(10));
    link.corrupt = 0.003;
    let mut sim = Sim::new(Setup::new(link, vec![8 << 20, 1 << 20]));
    sim.run(Duration::from_secs(60));
    sim.check_exact();
    let rs = sim.r.stats();
    eprintln!(
        "corruption: {} mismatches, {} chunk resends",
        rs.mismatches,
        sim.s.stats().chunk_resends
    );
    assert!(rs.mismatches > 0);
}

#[test]
fn resume_sends_only_missing_chunks() {
    let link = LinkCfg::new(100e6, Duration::from_millis(10));
    let size: u64 = 16 << 20;
    let chunk: u64 = 1 << 20;
    let mut st = Setup::new(link, vec![size]);
    st.chunk = chunk;
    let mut sim = Sim::new(st);
    // the sender knows its hashes up front (announce carries them); the receiver has the even chunks
    let hashes: Vec<ChunkHash> = (0..16)
        .map(|c| gen_chunk_hash(0, size, chunk, c, &mut Vec::new()))
        .collect();
    let mut sc = SenderConfig::new(7, RateConfig::auto(50e6));
    sc.chunk_size = chunk;
    sim.s = Sender::new(sc);
    sim.s
        .add_file("exp/resumed.vdif", size, Some(hashes.clone()))
        .unwrap();
    sim.s.close();
    sim.sender_hashed[0].fill(true);
    {
        let d = &mut sim.disk.as_mut().unwrap()[0];
        fill(0, 0, d);
        for c in (1..16).step_by(2) {
            d[(c * chunk) as usize..((c + 1) * chunk) as usize].fill(0);
        }
    }
    // drive until the announce arrives, then declare what is on disk
    while !sim
        .r_events
        .iter()
        .any(|e| matches!(e.1, Event::FileAnnounced { .. }))
    {
        assert!(sim.step());
    }
    for c in 0..16u32 {
        let d = &sim.disk.as_ref().unwrap()[0];
        let h = hash::chunk_hash(
            size,
            chunk,
            c as u64,
            &d[(c as u64 * chunk) as usize..((c as u64 + 1) * chunk) as usize],
        );
        // every declaration is taken; the odd chunks (zeros on disk) come back as mismatches, which the
        // sender answers by sending them as new data (not twice)
        assert!(sim.r.declare_verified(0, c, h), "chunk {c}");
    }
    sim.run(Duration::from_secs(60));
    sim.check_exact();
    let sent = sim.s.stats().bytes;
    eprintln!("resume: sent {sent} of {size} bytes");
    // the sender starts before the receiver's verdicts arrive (one RTT at startup rate): allow 2 chunks
    assert!(sent <= size / 2 + 2 * chunk, "sent {sent}");
}

#[test]
fn resume_with_held_chunks_sends_only_the_rest() {
    // As the I/O layer resumes: the receiver reported the hashes of the chunks it holds before the file
    // was added; the sender holds back those whose hash equals its own (chunks 0..12 of 16, except 5,
    // which differs on the receiver's disk) and the receiver declares what it has when the file is
    // announced. Only chunks 5 and 12..16 move, nothing twice.
    let link = LinkCfg::new(100e6, Duration::from_millis(20));
    let size: u64 = 16 << 20;
    let chunk: u64 = 1 << 20;
    let mut st = Setup::new(link, vec![size]);
    st.chunk = chunk;
    let mut sim = Sim::new(st);
    let hashes: Vec<ChunkHash> = (0..16)
        .map(|c| gen_chunk_hash(0, size, chunk, c, &mut Vec::new()))
        .collect();
    {
        let d = &mut sim.disk.as_mut().unwrap()[0];
        fill(0, 0, d);
        d[(5 * chunk) as usize] ^= 1;
        d[(12 * chunk) as usize..].fill(0);
    }
    let on_disk: Vec<ChunkHash> = (0..12u64)
        .map(|c| {
            let d = &sim.disk.as_ref().unwrap()[0][(c * chunk) as usize..((c + 1) * chunk) as usize];
            hash::chunk_hash(size, chunk, c, d)
        })
        .collect();
    let mut sc = SenderConfig::new(7, RateConfig::auto(50e6));
    sc.chunk_size = chunk;
    sim.s = Sender::new(sc);
    // the sender knows the hashes of the chunks it compared, not yet the others
    let known: Vec<Option<ChunkHash>> = (0..16).map(|c| (c < 12).then(|| hashes[c])).collect();
    let held: Vec<bool> = (0..12).map(|c| on_disk[c] == hashes[c]).collect();
    assert_eq!(held.iter().filter(|h| !**h).count(), 1);
    sim.s
        .add_file_held("exp/resumed.vdif", size, known, held)
        .unwrap();
    sim.s.close();
    for c in 0..12 {
        sim.sender_hashed[0][c] = true;
    }
    sim.declare_on_announce.insert(0, on_disk);
    sim.run(Duration::from_secs(60));
    assert_eq!(
        sim.declared,
        vec![true; 12],
        "every chunk on disk declared before its data"
    );
    sim.check_exact();
    let st = sim.s.stats();
    let fresh = st.bytes - st.retransmits * 8192;
    eprintln!(
        "held resume: sent {} bytes ({} retransmissions) of {size}",
        st.bytes, st.retransmits
    );
    assert!(fresh <= 5 * chunk, "new data {fresh}");
    assert!(st.bytes >= 5 * chunk);
    assert_eq!(st.chunk_resends, 1, "chunk 5 once");
}

/// Throughput (bits/s) of `(time, bytes)` records between `a` and `b`.
fn rate_between(recs: &[(Duration, u64)], a: Duration, b: Duration) -> f64 {
    let bytes: u64 = recs.iter().filter(|r| r.0 >= a && r.0 < b).map(|r| r.1).sum();
    bytes as f64 * 8.0 / (b - a).as_secs_f64()
}

#[test]
fn shares_the_bottleneck_with_a_tcp_reno_flow() {
    // 200 Mb/s, 40 ms RTT, a drop-tail buffer of one BDP, no random loss (Reno could not use the link)
    let mut link = LinkCfg::new(200e6, Duration::from_millis(40));
    link.queue_bytes = (200e6 / 8.0 * 0.04) as usize;
    let st = Setup::compared(link, 1 << 30);
    let mut sim = Sim::new(st);
    sim.reno = Some(Reno::new());
    sim.run_until(Duration::from_secs(40));
    let end = Duration::from_secs(40);
    let a = Duration::from_secs(5);
    let tcp = rate_between(&sim.reno.as_ref().unwrap().acked, a, end);
    let ours = rate_between(&sim.delivered_at, a, end);
    eprintln!(
        "with a Reno flow on 200 Mb/s, 40 ms, 1-BDP buffer: xfer {:.1} Mb/s, Reno {:.1} Mb/s (5 s .. {end:?}); \
         xfer cuts q/l {}/{}",
        mb(ours),
        mb(tcp),
        sim.s.rate().cuts_queue,
        sim.s.rate().cuts_loss
    );
    for k in 0..8 {
        let a = Duration::from_secs(5 * k);
        let b = a + Duration::from_secs(5);
        eprintln!(
            "  {a:?}..{b:?}: xfer {:.1} Reno {:.1}",
            mb(rate_between(&sim.delivered_at, a, b)),
            mb(rate_between(&sim.reno.as_ref().unwrap().acked, a, b))
        );
    }
    assert!(tcp >= 0.2 * 200e6, "TCP starved: {:.1} Mb/s", mb(tcp));
    assert!(ours >= 0.2 * 200e6, "xfer starved: {:.1} Mb/s", mb(ours));
}

#[test]
fn ceilings_set_while_running_hold_and_the_lower_of_both_sides_applies() {
    // A daemon with a limit on all its transfers changes each one's share as others start and end: the
    // receiver's share comes as `rate_cap`, the sending side may have its own; the lower one holds.
    let link = LinkCfg::new(200e6, Duration::from_millis(20));
    let mut st = Setup::new(link, vec![1 << 30]);
    st.store = false;
    let mut sim = Sim::new(st);
    let s = Duration::from_secs;
    sim.run_until(s(3));
    let full = rate_between(&sim.delivered_at, s(2), s(3));
    sim.r.set_rate_cap(Some(60e6));
    sim.run_until(s(7));
    let receiver_capped = rate_between(&sim.delivered_at, s(4), s(7));
    sim.s.set_rate_cap(Some(20e6));
    sim.run_until(s(10));
    let both = rate_between(&sim.delivered_at, s(8), s(10));
    sim.r.set_rate_cap(None);
    sim.run_until(s(13));
    let own_only = rate_between(&sim.delivered_at, s(11), s(13));
    sim.s.set_rate_cap(None);
    sim.run_until(s(20));
    let lifted = rate_between(&sim.delivered_at, s(17), s(20));
    eprintln!(
        "Mb/s: {:.0} full, {:.0} receiver's 60, {:.0} with own 20, {:.0} own 20 alone, {:.0} lifted",
        mb(full),
        mb(receiver_capped),
        mb(both),
        mb(own_only),
        mb(lifted)
    );
    assert!(full > 160e6, "{full}");
    assert!(
        receiver_capped <= 60e6 && receiver_capped > 54e6,
        "{receiver_capped}"
    );
    assert!(both <= 20e6 && both > 18e6, "{both}");
    assert!(own_only <= 20e6 && own_only > 18e6, "{own_only}");
    assert!(lifted > 160e6, "{lifted}");
}

/// A sender whose data runs late for a while after startup (its reading thread waits on a busy disk, or
/// another program takes its cores: 3b of the acceptance run of 2026-11-27, where a port scan and a
/// flood shared two cores with both ends and the emulator) delivers less for as long, and the delivery
/// rate says so. That is the sender's limit, not the path's: the estimate must not follow it down, or
/// the transfer crawls long after the sender can go again (3b went on at 0.4-1.3 of 2 Gb/s for 14 s).
#[test]
fn a_sender_held_after_startup_keeps_its_estimate() {
    let rate = 1e9;
    let mut link = LinkCfg::new(rate, Duration::from_millis(50));
    link.loss = Loss::Random(0.01);
    let bytes = (rate / 8.0 * 9.0) as u64;
    let st = Setup::compared(link, bytes);
    let mut sim = Sim::new(st);
    let t0 = sim.t0;
    let (held_from, held_to) = (Duration::from_secs(3), Duration::from_secs(5));
    // running for a millisecond every 10 ms for 2 s
    sim.sender_stall = Some((t0 + held_from, t0 + held_to, Some(Duration::from_millis(10))));
    let mut lowest = f64::INFINITY;
    while sim.step() {
        assert!(sim.now - t0 < Duration::from_secs(60), "no completion");
        let at = sim.now - t0;
        if at >= held_from && at < held_to + Duration::from_millis(500) {
            lowest = lowest.min(sim.s.rate().state().btl_bw * 8.0);
        }
    }
    sim.pump_out();
    sim.check_exact();
    // what arrived in the second after the sender could go again (one round trip later)
    let (a, b) = (
        held_to + Duration::from_millis(100),
        held_to + Duration::from_millis(1100),
    );
    let after: u64 = sim
        .delivered_at
        .iter()
        .filter(|(at, _)| *at >= a && *at < b)
        .map(|(_, l)| l)
        .sum();
    let after_bps = after as f64 * 8.0;
    eprintln!(
        "held 2 s: lowest estimate {:.0} Mb/s, the second after {:.0} Mb/s",
        mb(lowest),
        mb(after_bps)
    );
    assert!(lowest >= 0.8 * rate, "estimate fell to {:.0} Mb/s", mb(lowest));
    assert!(
        after_bps >= 0.85 * rate,
        "the second after the hold: {:.0} Mb/s",
        mb(after_bps)
    );
}
