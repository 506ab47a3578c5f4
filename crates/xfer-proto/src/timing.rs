//! Timing rules of the I/O layer's threads, kept apart from their sockets and files so that they can be
//! tested on their own: how long the receiving thread naps after a small batch ([`nap_for`]), how long
//! the sending thread sleeps at least ([`min_sleep`]) and whether its bursts are short ([`Bursts`]), and
//! how many windows the sender's reading thread reads ahead ([`ReadDepth`]). Pure functions of what the
//! caller measured and the `now` it passes in.

use std::time::{Duration, Instant};

use crate::wire::HEADER_LEN;

/// Datagrams that may leave back to back (the sender's `max_burst` in the I/O layer).
pub const MAX_BURST: u32 = 32;

/// Longest pause after a small batch, to let datagrams gather in the socket buffer rather than wake for
/// each. See [`nap_for`].
pub const NAP_MAX: Duration = Duration::from_millis(2);
/// Bytes a batch should bring for the receiver not to pause after it (about 64 jumbo datagrams, what one
/// `recvmmsg` of 64 messages takes without GRO).
pub const NAP_TARGET: usize = 512 << 10;

/// How long to pause after a batch that brought `bytes`, received `since` after the one before, with a
/// socket receive buffer of `rcvbuf` bytes: long enough for [`NAP_TARGET`] bytes to gather at the rate
/// this batch arrived at, at most [`NAP_MAX`], and no longer than an eighth of the buffer (as the kernel
/// reports it: twice what was set, of which each datagram takes more than its length) takes to fill, so
/// that a buffer capped by `net.core.rmem_max` does not overflow. None after a batch that brought the
/// target (at high rates, and with GRO), or nothing.
pub fn nap_for(bytes: usize, since: Duration, rcvbuf: usize) -> Duration {
    if bytes == 0 || bytes >= NAP_TARGET {
        return Duration::ZERO;
    }
    let rate = bytes as f64 / since.as_secs_f64().max(1e-6);
    let gather = (NAP_TARGET - bytes) as f64 / rate;
    NAP_MAX.min(Duration::from_secs_f64(gather.min(rcvbuf as f64 / 8.0 / rate)))
}
/// Loss without a queue from which the data thread measures whether short bursts lose less (see
/// [`Bursts`]).
pub const LONG_BURST_MAX_LOSS: f64 = 0.005;

/// What the burst measurement counts: datagrams sent and datagrams the receiver reported lost, as
/// [`SenderStats`](crate::SenderStats) has them (totals, or what a period added to them).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct LossCount {
    pub sent: u64,
    pub lost: u64,
}

impl LossCount {
    /// What was counted since `from`.
    pub fn since(self, from: LossCount) -> LossCount {
        LossCount {
            sent: self.sent.saturating_sub(from.sent),
            lost: self.lost.saturating_sub(from.lost),
        }
    }

    pub fn plus(self, other: LossCount) -> LossCount {
        LossCount {
            sent: self.sent + other.sent,
            lost: self.lost + other.lost,
        }
    }

    /// The fraction lost (0 when nothing was sent).
    pub fn fraction(self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        self.lost as f64 / self.sent as f64
    }
}

/// Whether the data thread keeps its bursts short (see [`min_sleep`]). Long bursts (1 ms at 2 Gb/s,
/// 264 KB) overflow a shallow buffer at the bottleneck: with a 256 KiB queue at 2 Gb/s they lost 6.9%,
/// against 3.6% with short ones. That loss comes without a queue, so the rate control's estimate of the
/// path's random loss sees it, as it sees loss that has nothing to do with bursts (a lossy link). So once
/// that estimate reaches [`LONG_BURST_MAX_LOSS`], the sender measures in three periods (each 20 rounds, at
/// least 1 s): long bursts, short ones, long ones again. In each it counts the datagrams reported lost
/// against those sent, leaving out the first quarter (the reports of what was sent before the switch are
/// still coming in then). If short bursts lost a third less than the two periods of long ones together,
/// they are kept for the rest of the transfer, else long ones: the loss does not depend on them.
///
/// Why so: the estimate itself is a poor judge (it climbs for most of the first second, then swings by a
/// factor of three within one: one reading of it at the end of each period chose wrong in 1 run of 5 on
/// the shallow queue, its average over each period in 4 of 5); and the first period often comes while the
/// rate still climbs, when long bursts lose less (4.6% instead of 6-8% in one run: counted over one long
/// period it chose wrong in 1 of 5 again), so the long periods on both sides of the short one.
#[derive(Debug, Default, Clone, Copy)]
pub enum Bursts {
    #[default]
    Long,
    /// Measuring the loss with long bursts since `since`, counting from `from` (when and what): the first
    /// time, or, with `earlier`, the second (what the first long period and the short one counted).
    MeasureLong {
        since: Instant,
        from: Option<(Instant, LossCount)>,
        earlier: Option<(LossCount, LossCount)>,
    },
    /// Measuring it with short bursts, the first long period having counted `long`.
    MeasureShort {
        since: Instant,
        from: Option<(Instant, LossCount)>,
        long: LossCount,
    },
    Short,
    /// Long for good: short ones lost as much.
    LongKept,
}

impl Bursts {
    /// Whether bursts are short now, given the path's random loss as estimated so far, the sender's counts
    /// and the minimum RTT.
    pub fn short(
        &mut self,
        now: Instant,
        random_loss: f64,
        count: LossCount,
        min_rtt: Option<Duration>,
    ) -> bool {
        let period = (20 * min_rtt.unwrap_or(Duration::ZERO)).max(Duration::from_secs(1));
        let settle = period / 4;
        // the count starts once the period has settled, and lasts the rest of it
        let step = |since: Instant, from: Option<(Instant, LossCount)>| match from {
            None if now.saturating_duration_since(since) >= settle => Err(Some((now, count))),
            Some((at, c)) if now.saturating_duration_since(at) >= period - settle => Ok(count.since(c)),
            _ => Err(from),
        };
        match *self {
            Bursts::Long if random_loss >= LONG_BURST_MAX_LOSS => {
                *self = Bursts::MeasureLong {
                    since: now,
                    from: None,
                    earlier: None,
                }
            }
            Bursts::MeasureLong { since, from, earlier } => match (step(since, from), earlier) {
                (Ok(long), None) => {
                    *self = Bursts::MeasureShort {
                        since: now,
                        from: None,
                        long,
                    }
                }
                (Ok(long2), Some((long1, short))) => {
                    let long = long1.plus(long2).fraction();
                    *self = if short.fraction() * 3.0 < long * 2.0 {
                        Bursts::Short
                    } else {
                        Bursts::LongKept
                    }
                }
                (Err(from), _) => *self = Bursts::MeasureLong { since, from, earlier },
            },
            Bursts::MeasureShort { since, from, long } => match step(since, from) {
                Ok(short) => {
                    *self = Bursts::MeasureLong {
                        since: now,
                        from: None,
                        earlier: Some((long, short)),
                    }
                }
                Err(from) => *self = Bursts::MeasureShort { since, from, long },
            },
            _ => {}
        }
        matches!(self, Bursts::MeasureShort { .. } | Bursts::Short)
    }

    /// The state's name in the rate-control trace.
    pub fn name(self) -> &'static str {
        match self {
            Bursts::Long => "long",
            Bursts::MeasureLong { .. } => "measure-long",
            Bursts::MeasureShort { .. } => "measure-short",
            Bursts::Short => "short",
            Bursts::LongKept => "long-kept",
        }
    }
}

/// The shortest sleep of the data thread, `pacing_rate` in bytes per second. Each sleep and wake costs
/// a thread switch (about 10 us on a VM): waking every 250 us at 2 Gb/s cost the sender a fifth of its
/// CPU (docs/bench-xfer.md). So the thread sleeps as long as one burst of [`MAX_BURST`] datagrams takes
/// at the pacing rate, within 250 us and 1 ms, and sends that burst on waking: 264 KB at 2 Gb/s. With
/// `short_bursts` (see [`Bursts`]) it sleeps 250 us, and bursts are about 100 KB at 2 Gb/s.
pub fn min_sleep(pacing_rate: f64, block_size: u32, short_bursts: bool) -> Duration {
    let floor = Duration::from_micros(250);
    if short_bursts {
        return floor;
    }
    let burst = MAX_BURST as f64 * (block_size as usize + HEADER_LEN) as f64;
    Duration::from_secs_f64(burst / pacing_rate.max(1.0)).clamp(floor, Duration::from_millis(1))
}

/// Windows the reading thread reads ahead of the one being sent: [`DEPTH`] x 8 MiB is 540 ms at 2 Gb/s.
/// One window (33 ms) was not enough for a recording read past the page cache from a disk the receiver
/// writes to: the data thread waited 60-530 ms per 13 s push for its window (`read_wait_ms`), and it
/// came late to its pacing schedule as long. Four (130 ms) were not enough on a 2-vCPU VM of 2026-11-27
/// where the reading thread runs a step below the pacing thread (see
/// `vlbiflow_sched::BULK_PRIORITY`) and waits for a core now and then: 0.8-3.3 s of `read_wait_ms`
/// per 15 s push at 2 Gb/s, 50 ms, 1%; with sixteen, 0.02-0.8 s.
pub const DEPTH: usize = 16;

/// Windows the reading thread starts with. Each time the data thread finds the window it moves to not
/// yet read (other than the first after a seek), the depth doubles, up to [`DEPTH`]. From the page cache
/// four stay ahead (an 8 MiB read and its hash take a few ms of the 33 ms a window lasts at 2 Gb/s); a
/// slow disk or a busy host grows it within a few windows. Each window's first touch costs the sender:
/// on a fresh VM of 2026-11-28, zeroing the pages of 23 windows (192 MiB) was 16% of the sender's CPU in
/// a 3 GB push.
pub const DEPTH_START: usize = 4;

/// How many windows the sender's reading thread is given: [`DEPTH_START`], doubled each time the data
/// thread waited for a window that was not the first after a seek, up to [`DEPTH`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDepth {
    depth: usize,
    /// The next window taken is the first after a seek (its wait is the seek's, not a sign of too few).
    fresh: bool,
}

impl Default for ReadDepth {
    fn default() -> Self {
        ReadDepth {
            depth: DEPTH_START,
            fresh: true,
        }
    }
}

impl ReadDepth {
    /// Windows to give the reading thread now.
    pub fn get(self) -> usize {
        self.depth
    }

    /// A window read ahead was taken, after a wait for it or not: the depth doubles (up to [`DEPTH`]) on
    /// a wait that was not the first window's after a seek.
    pub fn took(&mut self, waited: bool) {
        if waited && !self.fresh {
            self.depth = (self.depth * 2).min(DEPTH);
        }
        self.fresh = false;
    }

    /// The reading thread was sent elsewhere: the wait for its next window does not count.
    pub fn seek(&mut self) {
        self.fresh = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_naps_after_a_small_batch_only_as_long_as_its_buffer_can_hold() {
        let us = Duration::from_micros;
        let big = 128 << 20;
        // a batch that brought the target, or nothing: no pause
        assert_eq!(nap_for(NAP_TARGET, us(1000), big), Duration::ZERO);
        assert_eq!(nap_for(0, us(5000), big), Duration::ZERO);
        // 1 Gb/s of jumbo datagrams one by one: the whole pause
        assert_eq!(nap_for(4 * 8256, us(264), big), NAP_MAX);
        // 2 Gb/s: until about 512 KiB have gathered (9 datagrams in 300 µs, 1.8 ms more)
        let nap = nap_for(9 * 8256, us(300), big);
        assert!(nap > us(1750) && nap < us(1900), "{nap:?}");
        // 20 Gb/s into a buffer capped at 256 KiB (512 KiB reported): 64 KiB fill in about 26 µs
        let nap = nap_for(8 * 8256, us(26), 512 << 10);
        assert!(nap > us(20) && nap < us(32), "{nap:?}");
        // a batch that took no measurable time still gives a bounded pause
        assert!(nap_for(8256, Duration::ZERO, 8 << 20) <= NAP_MAX);
    }

    #[test]
    fn the_data_thread_sleeps_for_about_one_burst() {
        // 2 Gb/s with 8 KiB blocks: 32 datagrams of 8256 bytes take 1.06 ms, so the 1 ms ceiling
        assert_eq!(min_sleep(250e6, 8192, false), Duration::from_millis(1));
        // 10 Gb/s: 211 us, raised to the 250 us floor
        assert_eq!(min_sleep(1.25e9, 8192, false), Duration::from_micros(250));
        // 4 Gb/s: in between, one burst
        let d = min_sleep(500e6, 8192, false);
        assert!(
            d > Duration::from_micros(520) && d < Duration::from_micros(540),
            "{d:?}"
        );
        // no rate yet
        assert_eq!(min_sleep(0.0, 8192, false), Duration::from_millis(1));
        // short bursts: the floor at any rate
        assert_eq!(min_sleep(250e6, 8192, true), Duration::from_micros(250));
    }

    /// Drives [`Bursts`] through `secs` seconds of a push at 30 datagrams a millisecond, in steps of 10 ms,
    /// reports coming one RTT after the datagrams they are about; `loss(t_ms, short)` is the fraction lost
    /// of what is sent at `t_ms` with short or long bursts, `estimate(t_ms)` the rate control's estimate
    /// then. Returns whether bursts were short at the end and when the measurement ended (ms).
    fn drive_bursts(
        rtt_ms: u64,
        secs: u64,
        loss: impl Fn(u64, bool) -> f64,
        estimate: impl Fn(u64) -> f64,
    ) -> (bool, Option<u64>) {
        let t0 = Instant::now();
        let mut b = Bursts::default();
        let mut count = LossCount::default();
        // what was sent and what of it will be lost, per step, until it is reported
        let mut in_flight = std::collections::VecDeque::new();
        let mut lost_frac = 0.0;
        let mut short = false;
        let mut decided = None;
        for step in 0..secs * 100 {
            let t = step * 10;
            count.sent += 300;
            lost_frac += 300.0 * loss(t, short);
            in_flight.push_back((t, lost_frac.floor() as u64));
            lost_frac -= lost_frac.floor();
            while in_flight.front().is_some_and(|&(at, _)| at + rtt_ms <= t) {
                count.lost += in_flight.pop_front().unwrap().1;
            }
            short = b.short(
                t0 + Duration::from_millis(t),
                estimate(t),
                count,
                Some(Duration::from_millis(rtt_ms)),
            );
            if decided.is_none() && matches!(b, Bursts::Short | Bursts::LongKept) {
                decided = Some(t);
            }
        }
        (short, decided)
    }

    /// Once the path loses 0.5% without a queue, the loss is counted with long bursts, short ones and long
    /// ones again (20 rounds each, at least a second, the first quarter left out), and short bursts are
    /// kept only if they lost a third less, however the estimate swings.
    #[test]
    fn bursts_stay_short_only_where_that_loses_less() {
        // an estimate that climbs from 0 to 5% over the first second, then swings between 2.7% and 8.2%
        // every 200 ms (as the traces of the shallow queue show)
        let swinging = |t: u64| {
            if t < 1000 {
                0.05 * t as f64 / 1000.0
            } else if (t / 200) % 2 == 0 {
                0.027
            } else {
                0.082
            }
        };
        // a shallow buffer: 6.9% lost with long bursts, 3.6% with short ones
        let shallow = |_: u64, short: bool| if short { 0.036 } else { 0.069 };
        for rtt in [0, 20, 100] {
            let (short, decided) = drive_bursts(rtt, 8, shallow, swinging);
            assert!(short, "a shallow buffer at {rtt} ms keeps short bursts");
            let period = (20 * rtt).max(1000);
            assert!(
                decided.is_some_and(|t| t >= 3 * period && t <= 3 * period + 200),
                "{decided:?}"
            );
        }
        // the same estimate on a lossy link that loses 1% either way: long bursts for good
        let lossy = |_: u64, _: bool| 0.01;
        for rtt in [0, 20, 100] {
            let (short, decided) = drive_bursts(rtt, 8, lossy, swinging);
            assert!(!short, "a lossy link at {rtt} ms keeps long bursts");
            assert!(decided.is_some());
        }
        // 5% either way, bursts of it alternating with clean stretches every 150 ms
        let bursty = |t: u64, _: bool| if (t / 150) % 2 == 0 { 0.10 } else { 0.0 };
        let (short, _) = drive_bursts(20, 8, bursty, |_| 0.05);
        assert!(!short, "loss in bursts of its own keeps long bursts");
        // below the threshold nothing is measured
        let (short, decided) = drive_bursts(20, 8, |_, _| 0.004, |_| 0.004);
        assert!(!short && decided.is_none());
        // a buffer that long bursts overflow more as the rate climbs: 2% at first, 9% after 2 s (the
        // first long period alone, 4.5% against 3.6%, would keep long bursts)
        for rtt in [0, 20] {
            let climbing = |t: u64, short: bool| {
                if short {
                    0.036
                } else {
                    0.02 + 0.07 * (t as f64 / 2000.0).min(1.0)
                }
            };
            let (short, _) = drive_bursts(rtt, 8, climbing, swinging);
            assert!(short, "{rtt} ms");
        }
        // what was lost before the measurement, reported during it, does not count: 30% lost in the
        // last RTT of the first long period (reported in the first of the short one) changes nothing
        let (short, _) = drive_bursts(
            100,
            8,
            |t, short| match (t, short) {
                (1900..2000, _) => 0.30,
                (_, true) => 0.036,
                _ => 0.069,
            },
            |_| 0.02,
        );
        assert!(short);
    }

    /// The reading thread gets [`DEPTH_START`] windows, twice as many each time the data thread had to wait
    /// for one, up to [`DEPTH`]; the wait for the first window after a seek does not count.
    #[test]
    fn the_read_ahead_deepens_only_on_waits_after_the_first_window() {
        let mut d = ReadDepth::default();
        assert_eq!(d.get(), DEPTH_START);
        d.took(true);
        assert_eq!(d.get(), DEPTH_START, "the first window's wait");
        d.took(false);
        assert_eq!(d.get(), DEPTH_START);
        d.took(true);
        assert_eq!(d.get(), 2 * DEPTH_START);
        for _ in 0..8 {
            d.took(true);
        }
        assert_eq!(d.get(), DEPTH);
        let mut d = ReadDepth::default();
        d.took(false);
        d.seek();
        d.took(true);
        assert_eq!(d.get(), DEPTH_START, "the wait after a seek");
        d.took(true);
        assert_eq!(d.get(), 2 * DEPTH_START);
    }
}
