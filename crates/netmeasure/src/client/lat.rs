//! The latency test's round trips as a state machine without I/O: one request at a time per message
//! size, each answered by its echo or lost after the reply timeout; stale echoes (of an earlier request,
//! or another test's) are ignored.
//!
//! The I/O layer ([`super::Client::lat`]) sends what [`LatProbe::poll_transmit`] writes, feeds every
//! datagram to [`LatProbe::handle_datagram`] and calls [`LatProbe::handle_timeout`] at
//! [`LatProbe::poll_timeout`], until [`LatProbe::is_done`].

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::results::{LatParams, LatPoint};
use crate::stats::HistSummary;
use crate::wire::{PacketKind, TestPacket, TestPacketRepr};

/// Round trips of one latency test.
#[derive(Debug)]
pub struct LatProbe {
    sizes: Vec<usize>,
    count: u64,
    warmup: u64,
    reply_timeout: Duration,
    test_id: u32,
    /// Sequence number of the last request sent.
    seq: u64,
    /// Index into `sizes` of the size being measured.
    size: usize,
    /// Requests of this size answered or lost, warm-up included.
    done_here: u64,
    hist: Histogram<u64>,
    lost: u64,
    /// The request in flight: when it was sent and when it counts as lost.
    outstanding: Option<(Instant, Instant)>,
    points: Vec<LatPoint>,
}

fn new_hist() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds")
}

impl LatProbe {
    /// The round trips of `p` for test `test_id`.
    pub fn new(p: &LatParams, test_id: u32) -> Self {
        LatProbe {
            sizes: p.sizes.clone(),
            count: p.count,
            warmup: p.warmup,
            reply_timeout: p.reply_timeout,
            test_id,
            seq: 0,
            size: 0,
            done_here: 0,
            hist: new_hist(),
            lost: 0,
            outstanding: None,
            points: Vec::new(),
        }
    }

    /// True when every size has been measured.
    pub fn is_done(&self) -> bool {
        self.size >= self.sizes.len()
    }

    /// True before the first request of a size (where a stop request is honoured).
    pub fn at_size_start(&self) -> bool {
        self.done_here == 0 && self.outstanding.is_none()
    }

    /// The size being measured, bytes.
    pub fn size(&self) -> usize {
        self.sizes.get(self.size).copied().unwrap_or(0)
    }

    /// Writes the next request into `buf` (at least the largest size long) when none is in flight;
    /// its length. `now` times the round trip, `wall_ns` (CLOCK_REALTIME) goes into the header.
    pub fn poll_transmit(&mut self, now: Instant, wall_ns: u64, buf: &mut [u8]) -> Option<usize> {
        if self.outstanding.is_some() || self.is_done() {
            return None;
        }
        let size = self.size();
        self.seq += 1;
        TestPacketRepr {
            kind: PacketKind::LatencyRequest,
            test_id: self.test_id,
            seq: self.seq,
            send_ts_ns: wall_ns,
        }
        .emit(&mut TestPacket::new_unchecked(&mut buf[..size]));
        self.outstanding = Some((now, now + self.reply_timeout));
        Some(size)
    }

    /// A datagram arrived at `now`: the echo of the request in flight completes its round trip.
    pub fn handle_datagram(&mut self, now: Instant, data: &[u8]) {
        let Some((sent, _)) = self.outstanding else {
            return;
        };
        let ours = matches!(TestPacket::new_checked(data),
            Ok(p) if p.kind() == PacketKind::LatencyReply && p.test_id() == self.test_id && p.seq() == self.seq);
        if ours {
            if self.done_here >= self.warmup {
                let _ = self
                    .hist
                    .record(now.saturating_duration_since(sent).as_nanos() as u64);
            }
            self.next();
        }
    }

    /// When the request in flight counts as lost.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.outstanding.map(|o| o.1)
    }

    /// The request in flight is lost if its deadline has passed at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.outstanding.is_some_and(|o| now >= o.1) {
            if self.done_here >= self.warmup {
                self.lost += 1;
            }
            self.next();
        }
    }

    fn next(&mut self) {
        self.outstanding = None;
        self.done_here += 1;
        if self.done_here >= self.count + self.warmup {
            let hist = std::mem::replace(&mut self.hist, new_hist());
            self.points.push(LatPoint {
                size: self.size(),
                sent: self.count,
                received: self.count - self.lost,
                lost: self.lost,
                rtt_us: HistSummary::from_hist(&hist, 1e-3),
            });
            self.lost = 0;
            self.done_here = 0;
            self.size += 1;
        }
    }

    /// The sizes measured so far.
    pub fn into_points(self) -> Vec<LatPoint> {
        self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responder::receive::echo;
    use crate::sim::{Link, LinkModel};

    /// Runs `p` against an echo across two simulated links; the points and the datagrams each link lost.
    fn run(p: &LatParams, model: LinkModel, seed: u64) -> (Vec<LatPoint>, u64, u64) {
        let mut now = Instant::now();
        let (mut out, mut back) = (Link::new(model, seed), Link::new(model, seed + 1));
        let mut probe = LatProbe::new(p, 77);
        let mut buf = vec![0u8; 65_536];
        while !probe.is_done() {
            if let Some(n) = probe.poll_transmit(now, 1, &mut buf) {
                out.send(now, &buf[..n]);
            }
            // The next event: a datagram arriving at either end, or the reply timeout.
            let next = [out.next_arrival(), back.next_arrival(), probe.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .expect("something is pending");
            now = now.max(next);
            while let Some((_, mut d)) = out.recv(now) {
                if echo(&mut d, false, 77) {
                    back.send(now, &d);
                }
            }
            while let Some((_, d)) = back.recv(now) {
                probe.handle_datagram(now, &d);
            }
            probe.handle_timeout(now);
        }
        (probe.into_points(), out.dropped, back.dropped)
    }

    fn params() -> LatParams {
        LatParams {
            sizes: vec![64, 1472, 8000],
            count: 300,
            warmup: 5,
            reply_timeout: Duration::from_millis(20),
        }
    }

    #[test]
    fn round_trips_on_a_clean_path_take_twice_the_delay() {
        let model = LinkModel {
            delay: Duration::from_millis(3),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
        };
        let (points, _, _) = run(&params(), model, 1);
        assert_eq!(
            points.iter().map(|p| p.size).collect::<Vec<_>>(),
            [64, 1472, 8000]
        );
        for p in &points {
            assert_eq!((p.sent, p.received, p.lost, p.rtt_us.count), (300, 300, 0, 300));
            assert!((p.rtt_us.p50 - 6000.0).abs() < 10.0, "{:?}", p.rtt_us);
        }
    }

    #[test]
    fn lost_requests_and_echoes_are_counted_and_duplicates_ignored() {
        let model = LinkModel {
            delay: Duration::from_millis(2),
            jitter: Duration::from_millis(3),
            loss: 0.05,
            duplicate: 0.0,
        };
        let p = LatParams {
            warmup: 0,
            ..params()
        };
        let (points, lost_out, lost_back) = run(&p, model, 9);
        let lost: u64 = points.iter().map(|p| p.lost).sum();
        assert!(lost > 0);
        // Every datagram lost either way costs one round trip, and nothing else does (the delay stays
        // below the timeout).
        assert_eq!(lost, lost_out + lost_back);
        for p in &points {
            assert_eq!(p.received + p.lost, 300);
            assert_eq!(p.rtt_us.count, p.received);
            assert!(
                p.rtt_us.min >= 4000.0 && p.rtt_us.max < 10_010.0,
                "{:?}",
                p.rtt_us
            );
        }
        // Duplicated datagrams: the second echo of a request is stale and changes nothing.
        let dup = LinkModel {
            duplicate: 0.2,
            ..model
        };
        let (points, lost_out, lost_back) = run(&p, dup, 9);
        let lost: u64 = points.iter().map(|p| p.lost).sum();
        assert!(lost <= lost_out + lost_back);
        for p in &points {
            assert_eq!(p.received + p.lost, 300);
            assert_eq!(p.rtt_us.count, p.received);
        }
    }

    #[test]
    fn echoes_later_than_the_timeout_are_stale_and_ignored() {
        // Every echo arrives after the 20 ms timeout, while a later request is in flight.
        let model = LinkModel {
            delay: Duration::from_millis(15),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
        };
        let p = LatParams {
            sizes: vec![100],
            count: 50,
            warmup: 0,
            reply_timeout: Duration::from_millis(20),
        };
        let (points, _, _) = run(&p, model, 3);
        assert_eq!((points[0].received, points[0].lost), (0, 50));
    }

    #[test]
    fn warm_up_round_trips_are_not_measured() {
        let model = LinkModel {
            delay: Duration::from_millis(1),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
        };
        let p = LatParams {
            sizes: vec![64],
            count: 10,
            warmup: 7,
            reply_timeout: Duration::from_millis(5),
        };
        let (points, _, _) = run(&p, model, 4);
        assert_eq!(points[0].rtt_us.count, 10);
    }
}
