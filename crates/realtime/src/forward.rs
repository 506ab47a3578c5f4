//! Station side: one bounded, paced queue per forwarding destination.
//!
//! The recorder hands every frame (or the frames of selected VDIF threads) to each destination's
//! [`ForwardQueue::offer`], which copies it into a preallocated ring and returns at once: the local
//! recording has priority, so a destination that cannot keep up loses frames (counted
//! `dropped_queue_full`) instead of slowing the recorder. [`ForwardQueue::poll_send`] gives the next frame
//! once the token bucket allows it; the caller sends it and calls again.
//!
//! Pacing is a [`TokenBucket`] of `burst_bytes` depth filled at `rate_bytes_per_s`, in exact integer
//! arithmetic (time in units of ns x rate, so no rounding drifts over a long run). A frame of `L` bytes may
//! go when the bucket holds `L` tokens. The bucket starts full.

use std::time::Instant;

use vlbiflow_formats::vdif::{self, VdifHeader, MAX_THREAD_ID};

use crate::pace::{BucketError, TokenBucket};

/// Configuration of a [`ForwardQueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardConfig {
    /// Largest datagram the queue takes (slot size), bytes.
    pub max_len: usize,
    /// Frames the queue holds.
    pub capacity: usize,
    /// Pacing rate in bytes per second; `None` sends as fast as the caller polls.
    pub rate_bytes_per_s: Option<u64>,
    /// Token bucket depth in bytes (at least `max_len` when paced).
    pub burst_bytes: u64,
    /// Forward only these VDIF threads (`None`: all frames).
    pub threads: Option<Vec<u16>>,
    /// Offset of the VDIF header in an offered datagram (8 behind a PSN), for the thread filter.
    pub header_offset: usize,
}

/// A configuration that cannot work; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardConfigError {
    #[error("max_len and capacity must be at least 1 and their product must fit in memory")]
    Size,
    #[error("rate must be at least 1 byte per second")]
    Rate,
    #[error(
        "burst {burst} bytes is smaller than the largest frame ({max_len} bytes): nothing could be sent"
    )]
    Burst { burst: u64, max_len: usize },
    #[error("thread id {0} is above 1023")]
    Thread(u16),
}

/// Counters of one destination. `offered = queued + dropped_queue_full + filtered + oversize`;
/// `queued = sent + len()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ForwardCounters {
    pub offered: u64,
    pub queued: u64,
    pub sent: u64,
    pub sent_bytes: u64,
    /// Dropped because the queue was full (the destination or its pacing could not keep up).
    pub dropped_queue_full: u64,
    /// Not for this destination (thread filter), or too short to carry the VDIF header the filter reads.
    pub filtered: u64,
    /// Longer than the slot size.
    pub oversize: u64,
}

/// What [`ForwardQueue::offer`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Queued,
    DroppedQueueFull,
    Filtered,
    Oversize,
}

/// A bounded, paced queue; see the module docs.
#[derive(Debug, Clone)]
pub struct ForwardQueue {
    slots: Vec<u8>,
    lens: Vec<u32>,
    max_len: usize,
    capacity: usize,
    /// Index of the oldest queued frame.
    first: usize,
    len: usize,
    bucket: Option<TokenBucket>,
    threads: Option<Vec<u64>>,
    header_offset: usize,
    origin: Option<Instant>,
    counters: ForwardCounters,
}

impl ForwardQueue {
    pub fn new(config: ForwardConfig) -> Result<Self, ForwardConfigError> {
        let total = config
            .max_len
            .checked_mul(config.capacity)
            .filter(|&n| n > 0 && n <= isize::MAX as usize / 2 && config.max_len <= u32::MAX as usize)
            .ok_or(ForwardConfigError::Size)?;
        let bucket = match config.rate_bytes_per_s {
            None => None,
            Some(rate) => Some(
                TokenBucket::new(rate, config.burst_bytes, config.max_len).map_err(|e| match e {
                    BucketError::Rate => ForwardConfigError::Rate,
                    BucketError::Burst { burst, max_len } => ForwardConfigError::Burst { burst, max_len },
                })?,
            ),
        };
        let threads = match &config.threads {
            None => None,
            Some(list) => {
                let mut bits = vec![0u64; (usize::from(MAX_THREAD_ID) + 1) / 64];
                for &t in list {
                    if t > MAX_THREAD_ID {
                        return Err(ForwardConfigError::Thread(t));
                    }
                    bits[usize::from(t) / 64] |= 1 << (t % 64);
                }
                Some(bits)
            }
        };
        Ok(ForwardQueue {
            slots: vec![0; total],
            lens: vec![0; config.capacity],
            max_len: config.max_len,
            capacity: config.capacity,
            first: 0,
            len: 0,
            bucket,
            threads,
            header_offset: config.header_offset,
            origin: None,
            counters: ForwardCounters::default(),
        })
    }

    pub fn counters(&self) -> ForwardCounters {
        self.counters
    }

    /// Frames queued and not yet sent.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn wanted(&self, frame: &[u8]) -> bool {
        let Some(bits) = &self.threads else {
            return true;
        };
        let Some(header) = frame.get(self.header_offset..self.header_offset + vdif::LEGACY_HEADER_LEN) else {
            return false;
        };
        let thread = VdifHeader::new_unchecked(header).thread_id();
        bits[usize::from(thread) / 64] & (1 << (thread % 64)) != 0
    }

    /// Queues a copy of `frame` for sending; never blocks.
    pub fn offer(&mut self, now: Instant, frame: &[u8]) -> Offer {
        self.origin.get_or_insert(now);
        self.counters.offered += 1;
        if !self.wanted(frame) {
            self.counters.filtered += 1;
            return Offer::Filtered;
        }
        if frame.len() > self.max_len {
            self.counters.oversize += 1;
            return Offer::Oversize;
        }
        if self.len == self.capacity {
            self.counters.dropped_queue_full += 1;
            return Offer::DroppedQueueFull;
        }
        let i = (self.first + self.len) % self.capacity;
        self.slots[i * self.max_len..i * self.max_len + frame.len()].copy_from_slice(frame);
        self.lens[i] = frame.len() as u32;
        self.len += 1;
        self.counters.queued += 1;
        Offer::Queued
    }

    /// The next frame to send at `now`, if one is queued and the pacing allows it. The frame is removed
    /// from the queue and counted sent.
    pub fn poll_send(&mut self, now: Instant) -> Option<&[u8]> {
        if self.len == 0 {
            return None;
        }
        let i = self.first;
        let len = self.lens[i] as usize;
        if let Some(bucket) = &mut self.bucket {
            if !bucket.try_take(now, len) {
                return None;
            }
        }
        self.first = (i + 1) % self.capacity;
        self.len -= 1;
        self.counters.sent += 1;
        self.counters.sent_bytes += len as u64;
        Some(&self.slots[i * self.max_len..i * self.max_len + len])
    }

    /// When the next queued frame may be sent: `None` with an empty queue, a time at or before now if at
    /// once.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let origin = self.origin?;
        match &self.bucket {
            None => Some(origin),
            Some(bucket) => Some(bucket.due(origin, self.lens[self.first] as usize)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config(capacity: usize, rate: Option<u64>, burst: u64) -> ForwardConfig {
        ForwardConfig {
            max_len: 1000,
            capacity,
            rate_bytes_per_s: rate,
            burst_bytes: burst,
            threads: None,
            header_offset: 0,
        }
    }

    /// Offered 1 MB/s (a 1000-byte frame per ms), paced at 500 kB/s with no burst beyond one frame and 4
    /// slots: one frame in two goes, the queue fills in 8 ms and from then every other offer is dropped.
    #[test]
    fn drops_exactly_the_excess_at_the_pacing_rate() {
        let mut q = ForwardQueue::new(config(4, Some(500_000), 1000)).unwrap();
        let t0 = Instant::now();
        let frame = [7u8; 1000];
        let mut sent_at = Vec::new();
        for ms in 0..1000u64 {
            let now = t0 + Duration::from_millis(ms);
            q.offer(now, &frame);
            while let Some(f) = q.poll_send(now) {
                assert_eq!(f, &frame[..]);
                sent_at.push(ms);
            }
        }
        let c = q.counters();
        assert_eq!(c.offered, 1000);
        assert_eq!(c.sent, 500);
        assert_eq!(q.len(), 4);
        assert_eq!(c.dropped_queue_full, 1000 - 500 - 4);
        assert_eq!(c.queued, c.sent + q.len() as u64);
        assert_eq!(sent_at, (0..500).map(|i| 2 * i).collect::<Vec<_>>());
        // The next one is due at 1000 ms.
        assert_eq!(q.poll_timeout(), Some(t0 + Duration::from_millis(1000)));
    }

    #[test]
    fn burst_lets_a_backlog_out_at_once_then_paces() {
        let mut q = ForwardQueue::new(config(16, Some(1_000_000), 5000)).unwrap();
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(q.offer(t0, &[1u8; 1000]), Offer::Queued);
        }
        let mut n = 0;
        while q.poll_send(t0).is_some() {
            n += 1;
        }
        assert_eq!(n, 5, "a full 5000-byte bucket lets 5 frames out at once");
        assert_eq!(q.poll_timeout(), Some(t0 + Duration::from_millis(1)));
        assert!(q.poll_send(t0 + Duration::from_micros(999)).is_none());
        assert!(q.poll_send(t0 + Duration::from_millis(1)).is_some());
        assert!(q.poll_send(t0 + Duration::from_millis(1)).is_none());
    }

    #[test]
    fn unpaced_full_queue_drops_and_never_blocks() {
        let mut q = ForwardQueue::new(config(3, None, 0)).unwrap();
        let t0 = Instant::now();
        let results: Vec<Offer> = (0..5).map(|_| q.offer(t0, &[0u8; 10])).collect();
        assert_eq!(
            results,
            [
                Offer::Queued,
                Offer::Queued,
                Offer::Queued,
                Offer::DroppedQueueFull,
                Offer::DroppedQueueFull
            ]
        );
        assert_eq!(q.offer(t0, &[0u8; 1001]), Offer::Oversize);
        assert_eq!(q.poll_send(t0).map(<[u8]>::len), Some(10));
        assert_eq!(q.offer(t0, &[0u8; 4]), Offer::Queued);
        let lens: Vec<usize> = std::iter::from_fn(|| q.poll_send(t0).map(<[u8]>::len)).collect();
        assert_eq!(lens, [10, 10, 4]);
        let c = q.counters();
        assert_eq!((c.dropped_queue_full, c.oversize, c.sent), (2, 1, 4));
    }

    #[test]
    fn thread_filter_reads_the_vdif_header_behind_a_psn() {
        let mut cfg = config(8, None, 0);
        cfg.threads = Some(vec![1, 3]);
        cfg.header_offset = 8;
        let mut q = ForwardQueue::new(cfg).unwrap();
        let t0 = Instant::now();
        let mut offers = Vec::new();
        for thread in 0..5u32 {
            let mut d = [0u8; 40];
            d[8 + 12..8 + 16].copy_from_slice(&(thread << 16).to_le_bytes());
            offers.push(q.offer(t0, &d));
        }
        use Offer::*;
        assert_eq!(offers, [Filtered, Queued, Filtered, Queued, Filtered]);
        assert_eq!(q.offer(t0, &[0u8; 20]), Filtered, "too short for the header");
        assert_eq!(q.counters().filtered, 4);
        assert!(ForwardQueue::new(ForwardConfig {
            threads: Some(vec![1024]),
            ..config(1, None, 0)
        })
        .is_err());
        assert!(ForwardQueue::new(config(1, Some(10), 999)).is_err());
    }
}
