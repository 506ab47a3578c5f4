//! A simulated network for the deterministic tests of the state machines: a seeded generator and a
//! one-way link with loss, delay, jitter (which reorders) and duplication, in simulated time.

use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// xorshift64*: a small seeded generator, the same sequence on every run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How a simulated link treats each datagram.
#[derive(Debug, Clone, Copy)]
pub struct LinkModel {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Extra delay, uniform in [0, jitter): datagrams sent closer together than this may swap.
    pub jitter: Duration,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram arrives twice.
    pub duplicate: f64,
}

/// A datagram in flight: due time, a tie-breaking sequence, the payload.
#[derive(Debug, PartialEq, Eq)]
struct InFlight {
    due: Instant,
    order: u64,
    data: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Earliest first out of a max-heap.
        (other.due, other.order).cmp(&(self.due, self.order))
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One direction of a simulated path.
#[derive(Debug)]
pub struct Link {
    model: LinkModel,
    rng: Rng,
    queue: BinaryHeap<InFlight>,
    order: u64,
    /// Datagrams the link dropped.
    pub dropped: u64,
    /// Datagrams the link delivered twice.
    pub duplicated: u64,
}

impl Link {
    /// A link behaving as `model`, its randomness from `seed`.
    pub fn new(model: LinkModel, seed: u64) -> Self {
        Link {
            model,
            rng: Rng::new(seed),
            queue: BinaryHeap::new(),
            order: 0,
            dropped: 0,
            duplicated: 0,
        }
    }

    /// Sends `data` at `now`.
    pub fn send(&mut self, now: Instant, data: &[u8]) {
        if self.rng.unit() < self.model.loss {
            self.dropped += 1;
            return;
        }
        let copies = if self.rng.unit() < self.model.duplicate {
            self.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = self.model.jitter.mul_f64(self.rng.unit());
            self.order += 1;
            self.queue.push(InFlight {
                due: now + self.model.delay + jitter,
                order: self.order,
                data: data.to_vec(),
            });
        }
    }

    /// When the next datagram arrives, if any is in flight.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.peek().map(|f| f.due)
    }

    /// The next datagram due by `now`, with its arrival time.
    pub fn recv(&mut self, now: Instant) -> Option<(Instant, Vec<u8>)> {
        if self.queue.peek().is_some_and(|f| f.due <= now) {
            self.queue.pop().map(|f| (f.due, f.data))
        } else {
            None
        }
    }
}
