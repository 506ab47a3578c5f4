//! The sans-IO link model: one direction of an emulated path. It is fed packets with the time they arrived
//! ([`Link::push`]) and polled for the packets due at a time ([`Link::poll_transmit`]) and for the time the
//! next one is due ([`Link::next_wakeup`]). It never reads a clock: time is nanoseconds on any monotonic
//! scale the caller chooses, so tests drive it with simulated time and get exact, repeatable results.
//!
//! What happens to a packet, in order:
//!
//! 1. **Loss** (as netem applies it, on entry): the [`LossModel`] decides whether the packet is lost on the
//!    line. A lost packet takes no room in the queue and no time on the bottleneck.
//! 2. **Queue** (drop-tail, in bytes): the bottleneck holds every packet that has not finished its
//!    serialisation, the one being serialised included. A packet that would take the backlog above
//!    `queue_limit` bytes is dropped (reason [`DropReason::Queue`]). Without a rate limit nothing waits,
//!    so the queue is always empty.
//! 3. **Serialisation** at `rate_bps`: a packet starts when both it and the bottleneck are there and leaves
//!    `len * 8 / rate` seconds later (exact integer arithmetic, no drift).
//! 4. **Propagation**: `delay` plus, with `jitter`, a uniform variation in `[-jitter, +jitter]` (never below
//!    zero). By default the path stays FIFO, as a real path does: a packet is never due before the one ahead
//!    of it. With `reorder` each packet's jitter is independent and packets may overtake each other.
//!
//! The packet bytes are copied into one preallocated byte ring; no call allocates once the record queue
//! has reached its high-water mark (it is preallocated for the expected load). A packet that finds the ring
//! full is dropped with reason [`DropReason::Memory`]: size the ring (`buffer_bytes`) well above the queue
//! limit plus the bandwidth-delay product, as [`LinkConfig::default_buffer`] does, and it happens only when
//! the caller falls far behind its schedule.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;

/// Nanoseconds on the caller's monotonic time scale.
pub type Nanos = u64;

/// Largest packet the model accepts (the IPv4/IPv6 total-length limit).
pub const MAX_PACKET: usize = 65_535;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DropReason {
    /// Independent random loss ([`LossModel::Random`]).
    Random,
    /// Gilbert-Elliott loss ([`LossModel::GilbertElliott`]), in either state.
    Burst,
    /// Drop-tail queue overflow at the rate limit.
    Queue,
    /// The emulator's own packet ring was full (it is too small for the configuration).
    Memory,
}

impl DropReason {
    /// The name used in the drop log and the counters.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Random => "random",
            DropReason::Burst => "burst",
            DropReason::Queue => "queue",
            DropReason::Memory => "memory",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the line loses packets.
///
/// Gilbert-Elliott: a two-state Markov chain, advanced once per packet. In the good state G a packet is
/// lost with probability `1 - k`, in the bad state B with probability `1 - h`; after each packet the chain
/// moves G->B with probability `p` and B->G with probability `r`. (This is the classic notation of Gilbert
/// and Elliott, where `h` and `k` are the probabilities that a packet gets *through*; Linux netem's
/// `gemodel p r 1-h 1-k` takes the loss probabilities `1-h` and `1-k` instead.) The chain starts in G.
/// With `h = 0, k = 1` (the default, Gilbert's original model) every packet in B is lost and none in G:
/// bursts of mean length `1/r` separated by mean `1/p` good packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "model", rename_all = "snake_case")]
pub enum LossModel {
    /// No loss on the line.
    None,
    /// Each packet lost independently with probability `p`.
    Random {
        /// Loss probability, 0..=1.
        p: f64,
    },
    /// Gilbert-Elliott bursty loss.
    GilbertElliott {
        /// Probability of moving from good to bad after a packet.
        p: f64,
        /// Probability of moving from bad to good after a packet.
        r: f64,
        /// Probability that a packet gets through in the bad state (loss there is `1 - h`).
        h: f64,
        /// Probability that a packet gets through in the good state (loss there is `1 - k`).
        k: f64,
    },
}

impl LossModel {
    /// Checks that every probability is in 0..=1 (and that a Gilbert-Elliott chain can move at all).
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("{name} = {v} is not a probability in 0..1"))
            }
        };
        match *self {
            LossModel::None => Ok(()),
            LossModel::Random { p } => check("loss", p),
            LossModel::GilbertElliott { p, r, h, k } => {
                check("p", p)?;
                check("r", r)?;
                check("h", h)?;
                check("k", k)?;
                if p + r == 0.0 {
                    return Err("p and r are both 0: the chain never moves".into());
                }
                Ok(())
            }
        }
    }

    /// The long-run fraction of packets lost. For Gilbert-Elliott: the chain spends `r / (p + r)` of the
    /// packets in G and `p / (p + r)` in B, so the loss rate is `(r (1-k) + p (1-h)) / (p + r)`.
    pub fn stationary_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Random { p } => p,
            LossModel::GilbertElliott { p, r, h, k } => {
                if p + r == 0.0 {
                    1.0 - k
                } else {
                    (r * (1.0 - k) + p * (1.0 - h)) / (p + r)
                }
            }
        }
    }
}

/// A [`LossModel`] at work: its random numbers and, for Gilbert-Elliott, the state of the chain. One
/// decision per packet; the same model and seed give the same decisions. [`Link`] runs one on entry;
/// a simulator may run another where it wants loss elsewhere on its path.
#[derive(Debug, Clone)]
pub struct LineLoss {
    model: LossModel,
    bad: bool,
    rng: SmallRng,
}

impl LineLoss {
    /// The model, starting in the good state, with random numbers from `seed`.
    pub fn new(model: LossModel, seed: u64) -> Self {
        LineLoss {
            model,
            bad: false,
            rng: SmallRng::seed_from_u64(mix(seed)),
        }
    }

    /// Whether the next packet is lost, and to which part of the model.
    pub fn lose(&mut self) -> Option<DropReason> {
        match self.model {
            LossModel::None => None,
            LossModel::Random { p } => (p > 0.0 && self.rng.gen::<f64>() < p).then_some(DropReason::Random),
            LossModel::GilbertElliott { p, r, h, k } => {
                let through = if self.bad { h } else { k };
                let lost = self.rng.gen::<f64>() >= through;
                let mv = if self.bad { r } else { p };
                if self.rng.gen::<f64>() < mv {
                    self.bad = !self.bad;
                }
                lost.then_some(DropReason::Burst)
            }
        }
    }
}

/// One direction's impairments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkConfig {
    /// Bottleneck rate in bits per second (IP packet bytes, as the TUN device carries them); `None` is
    /// unlimited (no serialisation delay, no queue).
    pub rate_bps: Option<u64>,
    /// Drop-tail limit of the bottleneck queue in bytes (the packet in serialisation included).
    pub queue_limit: u64,
    /// One-way propagation delay.
    pub delay_ns: Nanos,
    /// Half-width of the uniform jitter added to the delay.
    pub jitter_ns: Nanos,
    /// Let jitter reorder packets (otherwise the path is FIFO).
    pub reorder: bool,
    /// Line loss.
    pub loss: LossModel,
    /// Size of the byte ring holding packets in the queue and in flight.
    pub buffer_bytes: usize,
    /// Seed of the loss and jitter random number generators.
    pub seed: u64,
}

impl LinkConfig {
    /// A transparent link: no delay, loss or limit.
    pub fn transparent() -> Self {
        LinkConfig {
            rate_bps: None,
            queue_limit: u64::MAX,
            delay_ns: 0,
            jitter_ns: 0,
            reorder: false,
            loss: LossModel::None,
            buffer_bytes: 4 * MAX_PACKET,
            seed: 0,
        }
    }

    /// A ring size that holds the full queue plus what is in flight at the rate limit (or at
    /// `unlimited_bps` when there is none), with room to spare: twice the bandwidth-delay product, 25% more
    /// queue and 32 MiB, so that a forwarding thread held off the CPU for a while catches up instead of
    /// dropping (reason [`DropReason::Memory`]).
    pub fn default_buffer(&self, unlimited_bps: u64) -> usize {
        let rate = self.rate_bps.unwrap_or(unlimited_bps) as f64;
        let queue = if self.rate_bps.is_some() {
            self.queue_limit.min(1 << 34) as f64
        } else {
            0.0
        };
        let flight = rate / 8.0 * (self.delay_ns + self.jitter_ns) as f64 / 1e9;
        let want = queue * 1.25 + flight * 2.0 + (32 << 20) as f64;
        (want as usize).max(4 * MAX_PACKET)
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), String> {
        self.loss.validate()?;
        if self.rate_bps == Some(0) {
            return Err("rate must be above 0".into());
        }
        if self.buffer_bytes < 2 * MAX_PACKET {
            return Err(format!("buffer must be at least {} bytes", 2 * MAX_PACKET));
        }
        Ok(())
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Packets fed in.
    pub in_packets: u64,
    /// Bytes fed in.
    pub in_bytes: u64,
    /// Packets handed out.
    pub out_packets: u64,
    /// Bytes handed out.
    pub out_bytes: u64,
    /// Packets lost to [`LossModel::Random`].
    pub dropped_random: u64,
    /// Packets lost to [`LossModel::GilbertElliott`].
    pub dropped_burst: u64,
    /// Packets dropped at the full queue.
    pub dropped_queue: u64,
    /// Packets dropped because the ring was full.
    pub dropped_memory: u64,
    /// Bytes of all dropped packets.
    pub dropped_bytes: u64,
    /// Largest queue backlog seen, bytes.
    pub queue_max_bytes: u64,
    /// Packets that left out of order (only with `reorder`).
    pub reordered: u64,
}

impl Counters {
    /// All dropped packets.
    pub fn dropped(&self) -> u64 {
        self.dropped_random + self.dropped_burst + self.dropped_queue + self.dropped_memory
    }

    /// Packets in the model: fed in, neither out nor dropped.
    pub fn in_flight(&self) -> u64 {
        self.in_packets - self.out_packets - self.dropped()
    }
}

/// What [`Link::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Queued; it will be due at the given time.
    Accepted {
        /// When [`Link::poll_transmit`] hands it out.
        due: Nanos,
    },
    /// Dropped for the given reason.
    Dropped(DropReason),
}

#[derive(Debug, Clone, Copy)]
struct Record {
    offset: usize,
    len: usize,
    /// When its serialisation ends.
    depart: Nanos,
    due: Nanos,
    sent: bool,
}

/// One direction of the emulated path. See the module documentation.
pub struct Link {
    cfg: LinkConfig,
    buf: Box<[u8]>,
    /// Accepted packets in arrival order, oldest first; `front_seq` is the sequence number of the first.
    records: VecDeque<Record>,
    front_seq: u64,
    /// End of the newest packet in `buf`.
    tail: usize,
    /// With `reorder`: (due, sequence number) of the packets not yet sent, earliest first.
    heap: BinaryHeap<Reverse<(Nanos, u64)>>,
    /// The last `queued` records are still in (or being serialised at) the bottleneck; `queued_bytes` is their size.
    queued: usize,
    queued_bytes: u64,
    /// When the bottleneck finishes its last accepted packet, plus the sub-nanosecond remainder
    /// (`bits * 1e9 mod rate`).
    busy_until: Nanos,
    busy_rem: u64,
    last_due: Nanos,
    last_sent_seq: Option<u64>,
    loss: LineLoss,
    jitter_rng: SmallRng,
    counters: Counters,
}

/// A SplitMix64 step: independent seeds for the streams derived from one user seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Link {
    /// A link with the given impairments. Fails on an invalid configuration.
    pub fn new(cfg: LinkConfig) -> Result<Link, String> {
        cfg.validate()?;
        // Room for the records of a ring full of 512-byte packets; more only if smaller ones fill it.
        let records = (cfg.buffer_bytes / 512).clamp(1024, 1 << 20);
        Ok(Link {
            buf: vec![0u8; cfg.buffer_bytes].into_boxed_slice(),
            records: VecDeque::with_capacity(records),
            front_seq: 0,
            tail: 0,
            heap: BinaryHeap::with_capacity(if cfg.reorder { records } else { 0 }),
            queued: 0,
            queued_bytes: 0,
            busy_until: 0,
            busy_rem: 0,
            last_due: 0,
            last_sent_seq: None,
            loss: LineLoss::new(cfg.loss, cfg.seed),
            jitter_rng: SmallRng::seed_from_u64(mix(cfg.seed ^ 0x0005_eed0_f011_77e5)),
            counters: Counters::default(),
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Bytes in the bottleneck queue at the last call.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Packets accepted and not yet handed out.
    pub fn pending(&self) -> usize {
        if self.cfg.reorder {
            self.heap.len()
        } else {
            self.records.len()
        }
    }

    /// Serialisation ends before `now` leave the queue.
    fn advance_queue(&mut self, now: Nanos) {
        while self.queued > 0 {
            let r = &self.records[self.records.len() - self.queued];
            if r.depart > now {
                break;
            }
            self.queued_bytes -= r.len as u64;
            self.queued -= 1;
        }
    }

    /// Where in the ring a packet of `len` bytes goes, if it fits.
    fn place(&self, len: usize) -> Option<usize> {
        let cap = self.buf.len();
        let Some(front) = self.records.front() else {
            return (len <= cap).then_some(0);
        };
        let head = front.offset;
        if self.tail > head {
            if cap - self.tail >= len {
                Some(self.tail)
            } else if head >= len {
                Some(0)
            } else {
                None
            }
        } else if head - self.tail >= len {
            Some(self.tail)
        } else {
            None
        }
    }

    fn drop_packet(&mut self, len: usize, reason: DropReason) -> Verdict {
        let c = &mut self.counters;
        match reason {
            DropReason::Random => c.dropped_random += 1,
            DropReason::Burst => c.dropped_burst += 1,
            DropReason::Queue => c.dropped_queue += 1,
            DropReason::Memory => c.dropped_memory += 1,
        }
        c.dropped_bytes += len as u64;
        Verdict::Dropped(reason)
    }

    /// Feeds a packet that arrived at `now` (never earlier than a previous call's `now`). Empty packets and
    /// packets over [`MAX_PACKET`] bytes are dropped as [`DropReason::Memory`].
    pub fn push(&mut self, now: Nanos, packet: &[u8]) -> Verdict {
        let len = packet.len();
        self.counters.in_packets += 1;
        self.counters.in_bytes += len as u64;
        self.advance_queue(now);
        if len == 0 || len > MAX_PACKET {
            return self.drop_packet(len, DropReason::Memory);
        }
        if let Some(reason) = self.loss.lose() {
            return self.drop_packet(len, reason);
        }
        // The bottleneck: serialisation starts when the previous packet has left (its end may lie a
        // fraction of a nanosecond after `busy_until`: `busy_rem / rate`).
        let mut bottleneck = None;
        let depart = match self.cfg.rate_bps {
            None => now,
            Some(rate) => {
                if self.queued_bytes + len as u64 > self.cfg.queue_limit {
                    return self.drop_packet(len, DropReason::Queue);
                }
                let (start, rem) = if self.busy_until > now || (self.busy_until == now && self.busy_rem > 0) {
                    (self.busy_until, self.busy_rem)
                } else {
                    (now, 0)
                };
                let num = len as u128 * 8 * 1_000_000_000 + rem as u128;
                let end = start + (num / rate as u128) as u64;
                bottleneck = Some((end, (num % rate as u128) as u64));
                end
            }
        };
        let Some(offset) = self.place(len) else {
            return self.drop_packet(len, DropReason::Memory);
        };
        if let Some((end, rem)) = bottleneck {
            self.busy_until = end;
            self.busy_rem = rem;
            self.queued += 1;
            self.queued_bytes += len as u64;
            self.counters.queue_max_bytes = self.counters.queue_max_bytes.max(self.queued_bytes);
        }
        // Propagation.
        let mut due = depart + self.cfg.delay_ns;
        if self.cfg.jitter_ns > 0 {
            let j = self.cfg.jitter_ns as i128;
            let v = self.jitter_rng.gen_range(-j..=j);
            due = (due as i128 + v).max(depart as i128) as u64;
        }
        if !self.cfg.reorder {
            due = due.max(self.last_due);
        }
        self.last_due = self.last_due.max(due);
        self.buf[offset..offset + len].copy_from_slice(packet);
        self.tail = offset + len;
        let seq = self.front_seq + self.records.len() as u64;
        self.records.push_back(Record {
            offset,
            len,
            depart,
            due,
            sent: false,
        });
        if self.cfg.reorder {
            self.heap.push(Reverse((due, seq)));
        }
        Verdict::Accepted { due }
    }

    /// When the next packet is due, if any is waiting.
    pub fn next_wakeup(&self) -> Option<Nanos> {
        if self.cfg.reorder {
            self.heap.peek().map(|Reverse((due, _))| *due)
        } else {
            self.records.front().map(|r| r.due)
        }
    }

    /// Hands out the next packet due at or before `now`, if any. The bytes stay valid until the next call
    /// that takes `&mut self`. Call repeatedly until it returns `None`.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<&[u8]> {
        self.poll_transmit_due(now).map(|(_, p)| p)
    }

    /// [`Link::poll_transmit`] with the time the packet was due (to measure how late the I/O is).
    pub fn poll_transmit_due(&mut self, now: Nanos) -> Option<(Nanos, &[u8])> {
        self.advance_queue(now);
        let (offset, len, due) = if self.cfg.reorder {
            let Reverse((due, seq)) = *self.heap.peek()?;
            if due > now {
                return None;
            }
            self.heap.pop();
            if self.last_sent_seq.is_some_and(|last| seq < last) {
                self.counters.reordered += 1;
            }
            self.last_sent_seq = Some(self.last_sent_seq.map_or(seq, |l| l.max(seq)));
            let r = &mut self.records[(seq - self.front_seq) as usize];
            r.sent = true;
            let out = (r.offset, r.len, due);
            // Free the ring from the front as far as packets have gone.
            while self.records.front().is_some_and(|r| r.sent) && self.records.len() > self.queued {
                self.records.pop_front();
                self.front_seq += 1;
            }
            out
        } else {
            let r = self.records.front()?;
            if r.due > now {
                return None;
            }
            let out = (r.offset, r.len, r.due);
            self.records.pop_front();
            self.front_seq += 1;
            out
        };
        if self.records.is_empty() {
            self.tail = 0;
        }
        self.counters.out_packets += 1;
        self.counters.out_bytes += len as u64;
        Some((due, &self.buf[offset..offset + len]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn cfg() -> LinkConfig {
        LinkConfig {
            buffer_bytes: 64 << 20,
            ..LinkConfig::transparent()
        }
    }

    /// A packet of `len` bytes carrying `seq` in its first 8 bytes and a pattern derived from it after.
    fn pkt(seq: u64, len: usize) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len)
            .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seq) as u8)
            .collect();
        let n = len.min(8);
        p[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
        p
    }

    fn seq_of(p: &[u8]) -> u64 {
        u64::from_le_bytes(p[..8].try_into().unwrap())
    }

    /// Drives the link to empty in simulated time; returns (time, seq) of every packet in output order.
    fn drain(link: &mut Link) -> Vec<(Nanos, u64)> {
        let mut out = Vec::new();
        while let Some(t) = link.next_wakeup() {
            while let Some(p) = link.poll_transmit(t) {
                out.push((t, seq_of(p)));
            }
        }
        out
    }

    #[test]
    fn delay_is_exact() {
        let mut link = Link::new(LinkConfig {
            delay_ns: 25 * MS,
            ..cfg()
        })
        .unwrap();
        let p = pkt(7, 1000);
        assert_eq!(link.push(1234, &p), Verdict::Accepted { due: 1234 + 25 * MS });
        assert_eq!(link.next_wakeup(), Some(1234 + 25 * MS));
        assert!(link.poll_transmit(1234 + 25 * MS - 1).is_none());
        assert_eq!(link.poll_transmit(1234 + 25 * MS), Some(&p[..]));
        assert!(link.poll_transmit(u64::MAX).is_none());
        assert_eq!(link.next_wakeup(), None);
        let c = link.counters();
        assert_eq!(
            (c.in_packets, c.out_packets, c.in_bytes, c.out_bytes),
            (1, 1, 1000, 1000)
        );
    }

    #[test]
    fn rate_spaces_packets_by_their_serialisation_time() {
        // 1500 bytes at 100 Mb/s: 120 µs each, all arriving at once.
        let mut link = Link::new(LinkConfig {
            rate_bps: Some(100_000_000),
            ..cfg()
        })
        .unwrap();
        for i in 0..1000 {
            assert!(matches!(link.push(0, &pkt(i, 1500)), Verdict::Accepted { .. }));
        }
        let out = drain(&mut link);
        assert_eq!(out.len(), 1000);
        for (k, &(t, seq)) in out.iter().enumerate() {
            assert_eq!(seq, k as u64);
            assert_eq!(t, (k as u64 + 1) * 120_000);
        }
        // A rate that does not divide: 1000 bytes at 3 Gb/s is 2666.67 ns; no drift over 100000 packets.
        let mut link = Link::new(LinkConfig {
            rate_bps: Some(3_000_000_000),
            ..cfg()
        })
        .unwrap();
        for i in 0..100_000 {
            link.push(0, &pkt(i, 1000));
        }
        let out = drain(&mut link);
        for (k, &(t, _)) in out.iter().enumerate() {
            assert_eq!(t, (k as u64 + 1) * 8000 * 1_000_000_000 / 3_000_000_000);
        }
        // Packets arriving slower than the rate are not delayed beyond their own serialisation.
        let mut link = Link::new(LinkConfig {
            rate_bps: Some(100_000_000),
            delay_ns: MS,
            ..cfg()
        })
        .unwrap();
        assert_eq!(
            link.push(0, &pkt(0, 1500)),
            Verdict::Accepted { due: 120_000 + MS }
        );
        assert_eq!(
            link.push(500_000, &pkt(1, 1500)),
            Verdict::Accepted { due: 620_000 + MS }
        );
    }

    #[test]
    fn queue_overflow_drops_exactly_what_exceeds() {
        // 1 Gb/s: 1000 bytes take 8 µs. Queue 10000 bytes: ten fit, the rest of a burst is dropped.
        let c = LinkConfig {
            rate_bps: Some(1_000_000_000),
            queue_limit: 10_000,
            ..cfg()
        };
        let mut link = Link::new(c).unwrap();
        let verdicts: Vec<_> = (0..25).map(|i| link.push(0, &pkt(i, 1000))).collect();
        assert!(verdicts[..10]
            .iter()
            .all(|v| matches!(v, Verdict::Accepted { .. })));
        assert!(verdicts[10..]
            .iter()
            .all(|v| *v == Verdict::Dropped(DropReason::Queue)));
        assert_eq!(link.queued_bytes(), 10_000);
        // At 8 µs the first has left: exactly one more fits.
        assert!(matches!(
            link.push(8_000, &pkt(100, 1000)),
            Verdict::Accepted { .. }
        ));
        assert_eq!(
            link.push(8_000, &pkt(101, 1000)),
            Verdict::Dropped(DropReason::Queue)
        );
        // One nanosecond before the second leaves, nothing fits; a smaller packet does not either.
        assert_eq!(
            link.push(15_999, &pkt(102, 1)),
            Verdict::Dropped(DropReason::Queue)
        );
        assert!(matches!(
            link.push(16_000, &pkt(103, 1000)),
            Verdict::Accepted { .. }
        ));
        let c = *link.counters();
        assert_eq!(
            (c.dropped_queue, c.dropped(), c.queue_max_bytes),
            (17, 17, 10_000)
        );
        assert_eq!(c.dropped_bytes, 15 * 1000 + 1000 + 1);
        let out = drain(&mut link);
        let seqs: Vec<u64> = out.iter().map(|o| o.1).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 103]);
        assert_eq!(link.counters().in_flight(), 0);
    }

    fn run_loss(loss: LossModel, n: u64, seed: u64) -> (Vec<bool>, Counters) {
        let mut link = Link::new(LinkConfig { loss, seed, ..cfg() }).unwrap();
        let p = pkt(0, 64);
        let mut lost = Vec::with_capacity(n as usize);
        for i in 0..n {
            let v = link.push(i, &p);
            lost.push(matches!(v, Verdict::Dropped(_)));
            while link.poll_transmit(i).is_some() {}
        }
        (lost, *link.counters())
    }

    #[test]
    fn random_loss_fraction() {
        let n = 1_000_000u64;
        let p = 0.01;
        let (lost, c) = run_loss(LossModel::Random { p }, n, 1);
        let k = lost.iter().filter(|&&l| l).count() as f64;
        assert_eq!(c.dropped_random as f64, k);
        assert_eq!(c.out_packets + c.dropped_random, n);
        // Binomial: 5 standard deviations (about 0.05 of the expected count).
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((k - n as f64 * p).abs() < 5.0 * sd, "{k} lost of {n}");
        // Independent: the fraction of losses right after a loss is p as well.
        let after = lost.windows(2).filter(|w| w[0] && w[1]).count() as f64 / k;
        assert!((after - p).abs() < 0.01, "{after}");
    }

    #[test]
    fn gilbert_elliott_loss_matches_its_stationary_rate() {
        let n = 1_000_000u64;
        // Gilbert's model: all lost in B, none in G. Mean burst 1/r = 10, stationary loss p/(p+r).
        let (p, r) = (0.01, 0.1);
        let model = LossModel::GilbertElliott { p, r, h: 0.0, k: 1.0 };
        let expect = model.stationary_loss();
        assert!((expect - p / (p + r)).abs() < 1e-12);
        let (lost, c) = run_loss(model, n, 2);
        let k = lost.iter().filter(|&&l| l).count() as f64;
        assert_eq!(c.dropped_burst as f64, k);
        // The loss count of a two-state chain has variance n pi_B pi_G (1 + l) / (1 - l), l = 1 - p - r.
        let l = 1.0 - p - r;
        let sd = (n as f64 * expect * (1.0 - expect) * (1.0 + l) / (1.0 - l)).sqrt();
        assert!(
            (k - n as f64 * expect).abs() < 5.0 * sd,
            "{k} lost, expected {}",
            n as f64 * expect
        );
        // Bursts: runs of losses have mean length 1/r.
        let runs = lost.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
        let mean_run = k / runs;
        assert!((mean_run - 1.0 / r).abs() < 0.05 / r, "mean burst {mean_run}");

        // The full model: some loss in G, some delivery in B.
        let model = LossModel::GilbertElliott {
            p: 0.05,
            r: 0.2,
            h: 0.3,
            k: 0.99,
        };
        let expect = model.stationary_loss();
        assert!((expect - (0.2 * 0.01 + 0.05 * 0.7) / 0.25).abs() < 1e-12);
        let (lost, _) = run_loss(model, n, 3);
        let frac = lost.iter().filter(|&&l| l).count() as f64 / n as f64;
        assert!((frac - expect).abs() < 0.03 * expect, "{frac} against {expect}");
    }

    #[test]
    fn same_seed_same_losses() {
        let m = LossModel::Random { p: 0.1 };
        assert_eq!(run_loss(m, 10_000, 9).0, run_loss(m, 10_000, 9).0);
        assert_ne!(run_loss(m, 10_000, 9).0, run_loss(m, 10_000, 10).0);
    }

    #[test]
    fn jitter_keeps_order_unless_asked() {
        let (d, j) = (10 * MS, 2 * MS);
        for reorder in [false, true] {
            let mut link = Link::new(LinkConfig {
                delay_ns: d,
                jitter_ns: j,
                reorder,
                seed: 5,
                ..cfg()
            })
            .unwrap();
            let gap = 20_000;
            let mut out = Vec::new();
            for i in 0..20_000u64 {
                link.push(i * gap, &pkt(i, 200));
                // Deliver as the I/O loop does, between arrivals.
                let t = (i + 1) * gap;
                while let Some(w) = link.next_wakeup().filter(|&w| w < t) {
                    while let Some(p) = link.poll_transmit(w) {
                        out.push((w, seq_of(p)));
                    }
                }
            }
            out.extend(drain(&mut link));
            assert_eq!(out.len(), 20_000);
            let mut delays = Vec::new();
            let mut out_of_order = 0;
            for w in out.windows(2) {
                if w[1].1 < w[0].1 {
                    out_of_order += 1;
                }
            }
            for &(t, seq) in &out {
                let delay = t - seq * gap;
                assert!((d - j..=d + j).contains(&delay), "delay {delay}");
                delays.push(delay);
            }
            let min = *delays.iter().min().unwrap();
            let max = *delays.iter().max().unwrap();
            assert!(min < d - j / 2 && max > d + j / 2, "{min} {max}");
            if reorder {
                assert!(out_of_order > 1000, "{out_of_order}");
                assert!(link.counters().reordered > 1000);
            } else {
                assert_eq!(out_of_order, 0);
                assert_eq!(link.counters().reordered, 0);
            }
            assert_eq!(link.counters().out_packets, 20_000);
        }
    }

    #[test]
    fn ring_wraps_without_corrupting_and_counts_memory_drops() {
        // A ring of 2 x 64 KiB and a 1 ms delay: sizes 1..9000 at 8 µs spacing overfill it at times.
        for reorder in [false, true] {
            let c = LinkConfig {
                delay_ns: MS,
                jitter_ns: if reorder { MS / 2 } else { 0 },
                reorder,
                buffer_bytes: 2 * MAX_PACKET,
                seed: 3,
                ..LinkConfig::transparent()
            };
            let mut link = Link::new(c).unwrap();
            let mut rng = SmallRng::seed_from_u64(4);
            let mut sent = std::collections::HashMap::new();
            let mut got = 0u64;
            for i in 0..50_000u64 {
                let now = i * 8_000;
                while let Some(p) = link.poll_transmit(now) {
                    assert_eq!(sent.remove(&seq_of(p)), Some(p.to_vec()), "packet corrupted");
                    got += 1;
                }
                let p = pkt(i, rng.gen_range(8..9000));
                match link.push(now, &p) {
                    Verdict::Accepted { .. } => {
                        sent.insert(i, p);
                    }
                    Verdict::Dropped(r) => assert_eq!(r, DropReason::Memory),
                }
            }
            while let Some(t) = link.next_wakeup() {
                while let Some(p) = link.poll_transmit(t) {
                    assert_eq!(sent.remove(&seq_of(p)), Some(p.to_vec()), "packet corrupted");
                    got += 1;
                }
            }
            assert!(sent.is_empty());
            let c = link.counters();
            assert!(c.dropped_memory > 1000, "{}", c.dropped_memory);
            assert_eq!(got + c.dropped_memory, 50_000);
        }
    }

    /// Random configurations and traffic: every packet comes out whole, never before arrival + delay - jitter,
    /// in order unless reordering is on, and the counters add up.
    #[test]
    fn random_traffic_keeps_the_invariants() {
        let mut rng = SmallRng::seed_from_u64(21);
        for case in 0..200 {
            let reorder = rng.gen_bool(0.3);
            let jitter = if rng.gen_bool(0.5) {
                rng.gen_range(0..2 * MS)
            } else {
                0
            };
            let c = LinkConfig {
                rate_bps: rng
                    .gen_bool(0.6)
                    .then(|| rng.gen_range(1_000_000..10_000_000_000)),
                queue_limit: rng.gen_range(9000..1_000_000),
                delay_ns: rng.gen_range(0..5 * MS),
                jitter_ns: jitter,
                reorder: reorder && jitter > 0,
                loss: match rng.gen_range(0..3) {
                    0 => LossModel::None,
                    1 => LossModel::Random {
                        p: rng.gen_range(0.0..0.5),
                    },
                    _ => LossModel::GilbertElliott {
                        p: rng.gen_range(0.001..0.5),
                        r: rng.gen_range(0.01..1.0),
                        h: rng.gen_range(0.0..1.0),
                        k: rng.gen_range(0.5..1.0),
                    },
                },
                buffer_bytes: rng.gen_range(2 * MAX_PACKET..4_000_000),
                seed: case,
            };
            let (d, j) = (c.delay_ns, c.jitter_ns);
            let in_order = !c.reorder;
            let mut link = Link::new(c).unwrap();
            let mut sent = std::collections::HashMap::new();
            let mut now = 0;
            let mut last_seq = None;
            let mut check =
                |t: Nanos, p: &[u8], sent: &mut std::collections::HashMap<u64, (Nanos, Vec<u8>)>| {
                    let seq = seq_of(p);
                    let (arrived, bytes) = sent.remove(&seq).expect("a packet that was accepted, once");
                    assert_eq!(bytes, p);
                    assert!(
                        t + j >= arrived + d,
                        "due {t} before arrival {arrived} + delay - jitter"
                    );
                    if in_order {
                        assert!(last_seq.is_none_or(|l| seq > l), "out of order");
                    }
                    last_seq = Some(seq);
                };
            for i in 0..3000u64 {
                now += rng.gen_range(0..50_000);
                while let Some(w) = link.next_wakeup().filter(|&w| w <= now) {
                    while let Some((due, p)) = link.poll_transmit_due(w) {
                        assert!(due <= w);
                        check(w, p, &mut sent);
                    }
                }
                let p = pkt(i, rng.gen_range(8..9000));
                if let Verdict::Accepted { due } = link.push(now, &p) {
                    assert!(due + j >= now + d);
                    sent.insert(i, (now, p));
                }
            }
            while let Some(w) = link.next_wakeup() {
                while let Some(p) = link.poll_transmit(w) {
                    let p = p.to_vec();
                    check(w, &p, &mut sent);
                }
            }
            assert!(sent.is_empty());
            let c = link.counters();
            assert_eq!(c.in_packets, 3000);
            assert_eq!(c.out_packets + c.dropped(), 3000);
            assert_eq!(c.in_flight(), 0);
            assert!(c.queue_max_bytes <= link.config().queue_limit);
        }
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(Link::new(LinkConfig {
            rate_bps: Some(0),
            ..cfg()
        })
        .is_err());
        assert!(Link::new(LinkConfig {
            loss: LossModel::Random { p: 1.5 },
            ..cfg()
        })
        .is_err());
        let ge = LossModel::GilbertElliott {
            p: 0.0,
            r: 0.0,
            h: 0.0,
            k: 1.0,
        };
        assert!(Link::new(LinkConfig { loss: ge, ..cfg() }).is_err());
        assert!(Link::new(LinkConfig {
            buffer_bytes: 1000,
            ..cfg()
        })
        .is_err());
        let mut link = Link::new(cfg()).unwrap();
        assert_eq!(link.push(0, &[]), Verdict::Dropped(DropReason::Memory));
    }
}
