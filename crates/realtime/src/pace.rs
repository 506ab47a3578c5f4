//! A token bucket for pacing a destination, in exact integer arithmetic (GCRA form).
//!
//! Depth `burst_bytes`, filled at `rate_bytes_per_s`; the bucket starts full. A datagram of `L` bytes may go
//! when the bucket holds `L` tokens. Time is kept in units of ns x rate since the first call, so no rounding
//! drifts over a long run: a destination paced at R bytes/s sends exactly R bytes per second on average,
//! with at most `burst_bytes` back to back. Sans-IO: the caller passes `now`.

use std::time::{Duration, Instant};

const NS: u128 = 1_000_000_000;

/// A bucket that cannot work; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    #[error("rate must be at least 1 byte per second")]
    Rate,
    #[error(
        "burst {burst} bytes is smaller than the largest datagram ({max_len} bytes): nothing could be sent"
    )]
    Burst { burst: u64, max_len: usize },
}

/// Token-bucket pacing; see the module docs.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u64,
    /// Bucket depth, scaled (bytes x 1e9).
    burst_scaled: u128,
    /// Theoretical arrival time (GCRA), in ns x rate since `origin`.
    tat: u128,
    origin: Option<Instant>,
}

impl TokenBucket {
    /// A bucket of `burst_bytes` (at least `max_len`, the largest datagram it must pass) at `rate_bytes_per_s`.
    pub fn new(rate_bytes_per_s: u64, burst_bytes: u64, max_len: usize) -> Result<Self, BucketError> {
        if rate_bytes_per_s == 0 {
            return Err(BucketError::Rate);
        }
        if burst_bytes < max_len as u64 {
            return Err(BucketError::Burst {
                burst: burst_bytes,
                max_len,
            });
        }
        Ok(TokenBucket {
            rate: rate_bytes_per_s,
            burst_scaled: u128::from(burst_bytes) * NS,
            tat: 0,
            origin: None,
        })
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn scaled(&mut self, now: Instant) -> u128 {
        let origin = *self.origin.get_or_insert(now);
        now.saturating_duration_since(origin).as_nanos() * u128::from(self.rate)
    }

    /// Takes `len` tokens if the bucket holds them at `now`.
    pub fn try_take(&mut self, now: Instant, len: usize) -> bool {
        let now = self.scaled(now);
        let tat = self.tat.max(now) + len as u128 * NS;
        if tat - now > self.burst_scaled {
            return false;
        }
        self.tat = tat;
        true
    }

    /// When `len` tokens will be there (at or before `now` if already). Before the first call to
    /// [`try_take`](Self::try_take) the bucket is full: `now`.
    pub fn due(&self, now: Instant, len: usize) -> Instant {
        let Some(origin) = self.origin else {
            return now;
        };
        // Sendable once now >= tat + len x 1e9 - burst (in scaled units).
        let due = (self.tat + len as u128 * NS).saturating_sub(self.burst_scaled);
        let ns = due.div_ceil(u128::from(self.rate));
        origin
            .checked_add(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
            .unwrap_or(now + Duration::from_secs(3600))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_bucket_then_exact_rate() {
        // 1 MB/s, burst 5000: five 1000-byte datagrams at once, then one per ms.
        let mut b = TokenBucket::new(1_000_000, 5000, 1000).unwrap();
        let t0 = Instant::now();
        assert_eq!(b.due(t0, 1000), t0);
        let n = (0..10).take_while(|_| b.try_take(t0, 1000)).count();
        assert_eq!(n, 5);
        assert_eq!(b.due(t0, 1000), t0 + Duration::from_millis(1));
        assert!(!b.try_take(t0 + Duration::from_micros(999), 1000));
        assert!(b.try_take(t0 + Duration::from_millis(1), 1000));
        // Over 10 s at one attempt per 100 us: exactly the rate (plus the initial burst).
        let mut sent = 0u64;
        for us in (1100..10_000_000u64).step_by(100) {
            if b.try_take(t0 + Duration::from_micros(us), 1000) {
                sent += 1000;
            }
        }
        // From 1.1 ms to 10 s the bucket refills 9_998_900 bytes; it held 0 at 1.1 ms... minus one partial.
        assert!((9_998_000..=9_999_000).contains(&sent), "{sent}");
    }

    #[test]
    fn bad_buckets_are_refused() {
        assert_eq!(TokenBucket::new(0, 10, 1).unwrap_err(), BucketError::Rate);
        assert!(matches!(
            TokenBucket::new(10, 999, 1000),
            Err(BucketError::Burst { .. })
        ));
    }
}
