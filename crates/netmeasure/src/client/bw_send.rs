//! The bw test's send schedule without I/O: how many packets are due at a moment (packet k at
//! start + k x wait, whatever is due in one `sendmmsg`, or full batches flat out), how they group into
//! GSO super-datagrams, what a send call's outcome means (counted, GSO given up, or the test over), and
//! when to look at the stop flag and the control connection.

use std::time::Instant;

use vlbiflow_udp::GSO_MAX_SEGMENTS;

use super::results::BwParams;
use crate::responder::MAX_DATAGRAM;

/// Packets between looks at the stop flag and the control connection.
pub const CHECK_EVERY: u64 = 1024;

/// What one send call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// All handed to the kernel.
    Sent(usize),
    /// Failed after `sent` datagrams with this errno.
    Failed {
        /// Datagrams handed over before the failure.
        sent: usize,
        /// The error number, if any.
        errno: Option<i32>,
    },
}

/// The schedule of one bw test's packets.
#[derive(Debug, Clone)]
pub struct BwSchedule {
    count: u64,
    batch: usize,
    per_gso: usize,
    gso: bool,
    /// Packets per second when paced.
    rate: Option<f64>,
    start: Instant,
    k: u64,
    next_check: u64,
    gso_sends: u64,
}

impl BwSchedule {
    /// The schedule of `p` with packet 0 due at `start`; `rate`: packets per second when paced.
    pub fn new(p: &BwParams, start: Instant, rate: Option<f64>) -> Self {
        let per_gso = if p.gso {
            let limit = if p.gso_segments > 0 {
                p.gso_segments
            } else {
                GSO_MAX_SEGMENTS
            };
            (MAX_DATAGRAM / p.size).min(GSO_MAX_SEGMENTS).min(limit)
        } else {
            1
        };
        BwSchedule {
            count: p.count,
            batch: p.batch.clamp(1, 1024),
            per_gso,
            gso: per_gso > 1,
            rate,
            start,
            k: 0,
            next_check: 0,
            gso_sends: 0,
        }
    }

    /// Packets per send call at most.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Packets handed to the kernel so far (the next sequence number).
    pub fn sent(&self) -> u64 {
        self.k
    }

    /// True when every packet has been sent.
    pub fn is_done(&self) -> bool {
        self.k >= self.count
    }

    /// GSO super-datagrams sent.
    pub fn gso_sends(&self) -> u64 {
        self.gso_sends
    }

    /// Packets to send at `now` (at least one, the next packet being due; the I/O layer waits for it).
    pub fn due(&self, now: Instant) -> usize {
        let left = self.count - self.k;
        let n = match self.rate {
            Some(rate) => {
                let elapsed = now.saturating_duration_since(self.start).as_secs_f64();
                let due = (elapsed * rate).floor() as u64 + 1;
                due.saturating_sub(self.k).clamp(1, self.batch as u64)
            }
            None => (self.batch as u64).min(left),
        };
        n.min(left) as usize
    }

    /// Datagrams per message of the next send (GSO segments, or 1).
    pub fn group(&self) -> usize {
        if self.gso {
            self.per_gso
        } else {
            1
        }
    }

    /// A GSO super-datagram was put into a send.
    pub fn count_gso_send(&mut self) {
        self.gso_sends += 1;
    }

    /// A send call's outcome; false when the test cannot go on (the error is the caller's to report).
    pub fn handle_flushed(&mut self, f: Flushed) -> bool {
        match f {
            Flushed::Sent(n) => self.k += n as u64,
            Flushed::Failed {
                sent,
                errno: Some(libc::ECONNREFUSED),
            } => {
                // An ICMP port-unreachable from an earlier datagram: count it and keep going; the
                // control connection tells whether the responder is really gone.
                self.k += sent.max(1) as u64;
            }
            Flushed::Failed {
                sent,
                errno: Some(libc::EINVAL | libc::EIO | libc::EMSGSIZE | libc::EOPNOTSUPP),
            } if self.gso => {
                // The path refuses GSO (segment larger than its MTU, no checksum offload, old
                // kernel): send datagram by datagram from here on; the unsent ones go again.
                self.k += sent as u64;
                self.gso = false;
            }
            Flushed::Failed { sent, .. } => {
                self.k += sent as u64;
                return false;
            }
        }
        true
    }

    /// True when it is time to look at the stop flag and the control connection (after the first send
    /// and then every [`CHECK_EVERY`] packets).
    pub fn poll_check(&mut self) -> bool {
        if self.k >= self.next_check {
            self.next_check = self.k + CHECK_EVERY;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn params(size: usize, count: u64) -> BwParams {
        BwParams::new(size, count, 0.0)
    }

    #[test]
    fn flat_out_sends_full_batches_and_the_rest() {
        let t0 = Instant::now();
        let mut s = BwSchedule::new(&params(1472, 70), t0, None);
        let mut calls = Vec::new();
        while !s.is_done() {
            let n = s.due(t0);
            calls.push(n);
            assert!(s.handle_flushed(Flushed::Sent(n)));
        }
        assert_eq!(calls, [32, 32, 6]);
        assert_eq!(s.group(), 44, "65507 / 1472 datagrams per GSO message");
    }

    #[test]
    fn paced_sending_follows_the_clock() {
        let t0 = Instant::now();
        // 1000 packets per second: packet k due at k ms.
        let mut s = BwSchedule::new(&params(1000, 100), t0, Some(1000.0));
        assert_eq!(s.due(t0), 1);
        s.handle_flushed(Flushed::Sent(1));
        // Woken 10.5 ms late: packets 1..=10 are due, in one call.
        assert_eq!(s.due(t0 + Duration::from_micros(10_500)), 10);
        s.handle_flushed(Flushed::Sent(10));
        // Far behind: at most one batch per call.
        assert_eq!(s.due(t0 + Duration::from_millis(90)), 32);
        s.handle_flushed(Flushed::Sent(32));
        // Never beyond the count.
        assert_eq!(s.due(t0 + Duration::from_secs(10)), 32);
        s.handle_flushed(Flushed::Sent(32));
        assert_eq!(s.due(t0 + Duration::from_secs(10)), 25);
    }

    #[test]
    fn send_failures_count_give_up_gso_or_end_the_test() {
        let t0 = Instant::now();
        let mut s = BwSchedule::new(&params(1472, 1000), t0, None);
        // A refused port: counted (at least one datagram), the test goes on.
        assert!(s.handle_flushed(Flushed::Failed {
            sent: 0,
            errno: Some(libc::ECONNREFUSED)
        }));
        assert_eq!(s.sent(), 1);
        // The path refuses GSO: single datagrams from now on, the unsent ones again.
        assert!(s.handle_flushed(Flushed::Failed {
            sent: 3,
            errno: Some(libc::EIO)
        }));
        assert_eq!((s.sent(), s.group()), (4, 1));
        // The same error without GSO ends the test.
        assert!(!s.handle_flushed(Flushed::Failed {
            sent: 2,
            errno: Some(libc::EIO)
        }));
        assert_eq!(s.sent(), 6);
        let mut s = BwSchedule::new(&params(1472, 10), t0, None);
        assert!(!s.handle_flushed(Flushed::Failed {
            sent: 0,
            errno: Some(libc::ENETUNREACH)
        }));
        // Without GSO asked for, one datagram per message.
        let p = BwParams {
            gso: false,
            ..params(1472, 10)
        };
        assert_eq!(BwSchedule::new(&p, t0, None).group(), 1);
        let p = BwParams {
            gso_segments: 8,
            ..params(1000, 10)
        };
        assert_eq!(BwSchedule::new(&p, t0, None).group(), 8);
    }

    #[test]
    fn checks_come_first_and_then_every_1024_packets() {
        let t0 = Instant::now();
        let mut s = BwSchedule::new(&params(64, 5000), t0, None);
        let mut checks = Vec::new();
        while !s.is_done() {
            let n = s.due(t0);
            s.handle_flushed(Flushed::Sent(n));
            if s.poll_check() {
                checks.push(s.sent());
            }
        }
        assert_eq!(checks, [32, 1056, 2080, 3104, 4128]);
    }
}
