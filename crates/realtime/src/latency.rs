//! End-to-end latency: from a frame's VDIF time stamp (the backend's clock) to its arrival (the host's
//! clock), as a histogram.
//!
//! The two clocks differ. The caller states the offset `host - backend` (for example from the host's NTP or
//! PTP status and the backend's 1PPS/maser alignment, or 0 when both follow GPS to well below the latencies
//! of interest); latency is `(arrival - offset) - frame time`. The offset is part of every summary, so a
//! number is never read without the assumption it rests on. A negative latency means the offset is wrong
//! (or the backend clock is ahead); such frames are counted in `negative`, not recorded.
//!
//! The frame time is the start of the frame's first sample, so a latency includes one frame duration of
//! accumulation in the backend before the frame could be sent.

use hdrhistogram::Histogram;
use vlbiflow_formats::time::{epoch_start_unix, FrameClock, UtcTime};
use vlbiflow_formats::vdif::{self, VdifHeader};

/// Largest latency recorded exactly (1 hour); larger ones are recorded as this.
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// A latency histogram in nanoseconds, 3 significant digits.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    offset_ns: i64,
    negative: u64,
    most_negative_ns: i64,
}

/// What a [`LatencyHistogram`] holds, for JSON and printing. Quantiles are `None` with no samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LatencySummary {
    /// The stated clock offset, host minus backend, in nanoseconds.
    pub clock_offset_ns: i64,
    pub count: u64,
    /// Frames that seemed to arrive before their time stamp (offset wrong); not in the quantiles.
    pub negative: u64,
    /// The most negative latency seen (0 if none).
    pub most_negative_ns: i64,
    pub min_ns: Option<u64>,
    pub p50_ns: Option<u64>,
    pub p90_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub mean_ns: Option<u64>,
}

impl LatencyHistogram {
    /// A histogram for a host clock that is `clock_offset_ns` ahead of the backend clock.
    pub fn new(clock_offset_ns: i64) -> Self {
        LatencyHistogram {
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3)
                .expect("static histogram bounds are valid"),
            offset_ns: clock_offset_ns,
            negative: 0,
            most_negative_ns: 0,
        }
    }

    pub fn clock_offset_ns(&self) -> i64 {
        self.offset_ns
    }

    /// Latency in ns of a frame stamped `frame_time` (backend clock) arriving at `arrival` (host clock).
    pub fn latency_ns(&self, frame_time: UtcTime, arrival: UtcTime) -> i64 {
        let secs = arrival.unix_seconds.saturating_sub(frame_time.unix_seconds);
        let nanos = i64::from(arrival.nanos) - i64::from(frame_time.nanos);
        secs.saturating_mul(1_000_000_000)
            .saturating_add(nanos)
            .saturating_sub(self.offset_ns)
    }

    /// Records one frame; returns its latency in ns.
    pub fn record(&mut self, frame_time: UtcTime, arrival: UtcTime) -> i64 {
        let ns = self.latency_ns(frame_time, arrival);
        if ns < 0 {
            self.negative += 1;
            self.most_negative_ns = self.most_negative_ns.min(ns);
        } else {
            self.hist.saturating_record(ns as u64);
        }
        ns
    }

    /// Records a frame by its global time index on `clock` ([`FrameClock::index`]).
    pub fn record_index(&mut self, clock: &FrameClock, index: i64, arrival: UtcTime) -> i64 {
        self.record(clock.utc_of(index), arrival)
    }

    /// Records a VDIF frame by the time stamp in its header, at `clock`'s frame rate. `None` (nothing
    /// recorded) if `frame` is shorter than a legacy header.
    pub fn record_vdif(&mut self, clock: &FrameClock, frame: &[u8], arrival: UtcTime) -> Option<i64> {
        if frame.len() < vdif::LEGACY_HEADER_LEN {
            return None;
        }
        let h = VdifHeader::new_unchecked(frame);
        let index = clock.index_of(epoch_start_unix(h.epoch()), h.seconds(), h.frame_number());
        Some(self.record_index(clock, index, arrival))
    }

    /// Adds another histogram's samples (same offset assumed).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.negative += other.negative;
        self.most_negative_ns = self.most_negative_ns.min(other.most_negative_ns);
    }

    pub fn summary(&self) -> LatencySummary {
        let h = &self.hist;
        let some = |v: u64| (!h.is_empty()).then_some(v);
        LatencySummary {
            clock_offset_ns: self.offset_ns,
            count: h.len(),
            negative: self.negative,
            most_negative_ns: self.most_negative_ns,
            min_ns: some(h.min()),
            p50_ns: some(h.value_at_quantile(0.5)),
            p90_ns: some(h.value_at_quantile(0.9)),
            p99_ns: some(h.value_at_quantile(0.99)),
            p999_ns: some(h.value_at_quantile(0.999)),
            max_ns: some(h.max()),
            mean_ns: some(h.mean().round() as u64),
        }
    }

    /// The histogram in bins doubling from 100 us (`[0, 100 us)`, `[100 us, 200 us)`, ...) up to the
    /// largest value, for JSON and plots: `(upper bound ns, count)`, empty bins included.
    pub fn bins(&self) -> Vec<LatencyBin> {
        const FIRST: u64 = 100_000;
        let mut counts: Vec<u64> = Vec::new();
        for v in self.hist.iter_recorded() {
            // Each recorded bucket once, by the value it stands for.
            let value = self.hist.lowest_equivalent(v.value_iterated_to());
            let bin = if value < FIRST {
                0
            } else {
                (64 - (value / FIRST).leading_zeros()) as usize
            };
            if counts.len() <= bin {
                counts.resize(bin + 1, 0);
            }
            counts[bin] += v.count_at_value();
        }
        counts
            .into_iter()
            .enumerate()
            .map(|(i, count)| LatencyBin {
                upper_ns: FIRST.saturating_mul(1 << i.min(40)),
                count,
            })
            .collect()
    }
}

/// One bin of [`LatencyHistogram::bins`]: frames with a latency below `upper_ns` and at or above the
/// previous bin's bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LatencyBin {
    pub upper_ns: u64,
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_uses_the_stated_offset_and_counts_negative() {
        let clock = FrameClock::new(1000).unwrap();
        let index = 1_700_000_000 * 1000 + 250; // .250 s
        let mut h = LatencyHistogram::new(2_000_000); // host 2 ms ahead of the backend
                                                      // Arrives at host time .265: 15 ms on the host clock, 13 ms after removing the offset.
        let ns = h.record_index(&clock, index, UtcTime::from_unix(1_700_000_000, 265_000_000));
        assert_eq!(ns, 13_000_000);
        // Host time .251 is backend .249: before the stamp, so negative.
        let ns = h.record_index(&clock, index, UtcTime::from_unix(1_700_000_000, 251_000_000));
        assert_eq!(ns, -1_000_000);
        let s = h.summary();
        assert_eq!(s.count, 1);
        assert_eq!(s.negative, 1);
        assert_eq!(s.most_negative_ns, -1_000_000);
        assert_eq!(s.clock_offset_ns, 2_000_000);
        let p50 = s.p50_ns.unwrap();
        assert!((12_990_000..=13_010_000).contains(&p50), "{p50}");
    }

    #[test]
    fn a_vdif_frame_is_timed_by_its_header() {
        let clock = FrameClock::new(1000).unwrap();
        let mut f = [0u8; 32];
        let mut hdr = VdifHeader::new_unchecked(&mut f[..]);
        hdr.set_epoch(48); // 2024-01-01 = 1704067200
        hdr.set_time(100, 500); // 1704067300.5
        let mut h = LatencyHistogram::new(0);
        let arrival = UtcTime::from_unix(1_704_067_300, 520_000_000);
        assert_eq!(h.record_vdif(&clock, &f, arrival), Some(20_000_000));
        assert_eq!(h.record_vdif(&clock, &f[..8], arrival), None);
        assert_eq!(h.summary().count, 1);
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new(0);
        let t0 = UtcTime::from_unix(1_700_000_000, 0);
        for ms in 1..=1000u32 {
            h.record(t0, UtcTime::from_unix(1_700_000_000, ms * 1_000_000));
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        let within = |v: Option<u64>, want: u64| {
            let v = v.unwrap();
            v.abs_diff(want) <= want / 500
        };
        assert!(within(s.p50_ns, 500_000_000), "{s:?}");
        assert!(within(s.p99_ns, 990_000_000), "{s:?}");
        assert!(within(s.max_ns, 1_000_000_000), "{s:?}");
        assert!(within(s.min_ns, 1_000_000), "{s:?}");
        assert_eq!(LatencyHistogram::new(5).summary().p50_ns, None);
        // Bins double from 100 us; every sample is in one (values are kept to 3 significant digits, so
        // the edges may move a sample by 0.1%).
        let bins = h.bins();
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 1000);
        assert_eq!(bins[0].upper_ns, 100_000);
        assert_eq!(bins.last().unwrap().upper_ns, 1_638_400_000);
        // [819.2 ms, 1638.4 ms): the samples 820..=1000 ms.
        assert_eq!(bins.last().unwrap().count, 181);
        assert!(LatencyHistogram::new(0).bins().is_empty());
    }
}
