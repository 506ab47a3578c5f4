//! Arrival statistics for a stream of numbered, time-stamped test packets (sans-IO).
//!
//! [`ArrivalStats`] is fed `(seq, send_ts, recv_ts)` for every packet in arrival order and, once the
//! sender has said how many it sent, yields an [`ArrivalSummary`]: loss, duplicates, RFC 3550 jitter,
//! RFC 4737 reordering (ratio, extents, n-reordering), one-way delay with the constant clock offset
//! removed, histograms of inter-arrival time, lost-run length and reorder extent, and the loss pattern
//! (times between losses with an exponential fit and a Kolmogorov-Smirnov goodness of fit).
//!
//! All storage is allocated in [`ArrivalStats::new`] for the announced packet count; [`observe`]
//! does not allocate.
//!
//! [`observe`]: ArrivalStats::observe

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest n counted for RFC 4737 n-reordering.
pub const MAX_N_REORDERING: usize = 16;
/// Most loss intervals kept in a summary (for plotting); the fit uses all of them.
pub const MAX_KEPT_INTERVALS: usize = 20_000;
/// Bins in a summarised histogram.
pub const HIST_BINS: usize = 40;

/// Statistics over the arrivals of one test.
///
/// The receive path only stores: [`observe`](Self::observe) writes two timestamps into arrays indexed
/// by sequence number and appends the number to the arrival order, all preallocated, so the
/// per-packet cost is a few loads and stores. Reordering, jitter and the histograms are computed from
/// those arrays in [`summary`](Self::summary), after the test.
pub struct ArrivalStats {
    capacity: u64,
    /// Receive timestamp per sequence number (0: not received).
    recv_ts: Vec<u64>,
    /// Send timestamp per sequence number.
    send_ts: Vec<u64>,
    /// Sequence numbers of unique in-range packets in arrival order.
    order: Vec<u64>,
    duplicates: u64,
    out_of_range: u64,
    first_recv: u64,
    last_recv: u64,
}

/// Most packets whose times a [`Timeline`] carries (about 20 bytes each in JSON).
pub const MAX_TIMELINE: u64 = 200_000;

/// Every packet's send and receive time (for packet dispersion), in sequence order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Sender's CLOCK_REALTIME of packet 0 (or the first received), ns.
    pub send_base_ns: u64,
    /// Receiver's CLOCK_REALTIME of packet 0's arrival (or the first received), ns.
    pub recv_base_ns: u64,
    /// Per sequence number: send time minus `send_base_ns`, ns; -1 when the packet was lost.
    pub send_ns: Vec<i64>,
    /// Per sequence number: receive time minus `recv_base_ns`, ns; -1 when the packet was lost.
    pub recv_ns: Vec<i64>,
}

/// Most memory one packet of announced capacity costs: 24 bytes of storage ([`ArrivalStats::new`])
/// and up to 32 more of working space while [`ArrivalStats::summary`] runs.
pub const BYTES_PER_PACKET: u64 = 56;

/// The statistics storage could not be allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot allocate statistics storage for {capacity} packets ({bytes} bytes): out of memory")]
pub struct AllocError {
    /// Packets asked for.
    pub capacity: u64,
    /// Bytes that could not be allocated.
    pub bytes: u64,
}

impl ArrivalStats {
    /// Statistics for a test of at most `capacity` packets (numbered 0..capacity). The storage (24
    /// bytes per packet) is written once here so that no page fault lands on the receive path.
    /// Panics when the memory cannot be had; see [`try_new`](Self::try_new).
    pub fn new(capacity: u64) -> Self {
        match Self::try_new(capacity) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Like [`new`](Self::new) but reports a failed allocation instead of aborting. Callers that take
    /// the capacity from the network should bound it first with [`memory_for`](Self::memory_for).
    pub fn try_new(capacity: u64) -> Result<Self, AllocError> {
        let err = AllocError {
            capacity,
            bytes: capacity.saturating_mul(24),
        };
        let cap = usize::try_from(capacity).map_err(|_| err)?;
        let prefaulted = || -> Result<Vec<u64>, AllocError> {
            let mut v: Vec<u64> = Vec::new();
            v.try_reserve_exact(cap).map_err(|_| err)?;
            // Fresh pages are mapped on first touch, which would then happen on the receive path;
            // writing them here maps them now.
            v.resize(cap, 0);
            Ok(v)
        };
        let mut order = prefaulted()?;
        order.clear();
        Ok(ArrivalStats {
            capacity,
            recv_ts: prefaulted()?,
            send_ts: prefaulted()?,
            order,
            duplicates: 0,
            out_of_range: 0,
            first_recv: 0,
            last_recv: 0,
        })
    }

    /// The most memory statistics for `capacity` packets take, storage and summary together, bytes
    /// (saturating).
    pub fn memory_for(capacity: u64) -> u64 {
        capacity.saturating_mul(BYTES_PER_PACKET)
    }

    /// Packets counted so far (unique, in range).
    pub fn received(&self) -> u64 {
        self.order.len() as u64
    }

    /// Records one arrival. Timestamps are ns on any clock per side; receive timestamps must not go
    /// backwards (a clock step is clamped to zero inter-arrival time).
    #[inline]
    pub fn observe(&mut self, seq: u64, send_ts: u64, recv_ts: u64) {
        if seq >= self.capacity {
            self.out_of_range += 1;
            return;
        }
        let i = seq as usize;
        if self.recv_ts[i] != 0 {
            self.duplicates += 1;
            return;
        }
        // 0 marks "not received"; a real timestamp of 0 is nudged by 1 ns.
        let recv_ts = recv_ts.max(1);
        self.recv_ts[i] = recv_ts;
        self.send_ts[i] = send_ts;
        if self.order.is_empty() {
            self.first_recv = recv_ts;
        }
        self.last_recv = self.last_recv.max(recv_ts);
        // At most `capacity` unique in-range packets exist, so this never reallocates.
        self.order.push(seq);
    }

    /// Counts a datagram that was not a packet of this test (bad header, other test id).
    pub fn observe_foreign(&mut self) {
        self.out_of_range += 1;
    }

    /// RFC 4737 reordering, RFC 3550 jitter (ns) and the inter-arrival histogram, replayed from the
    /// arrival order.
    fn arrival_order_stats(&self) -> (ReorderCounts, f64, Histogram<u64>) {
        let mut r = ReorderCounts {
            reordered: 0,
            n_reordered: [0; MAX_N_REORDERING],
            extent_hist: new_hist(),
        };
        let mut iat_hist = new_hist();
        let mut jitter_ns = 0.0f64;
        // In-order arrivals (seq, arrival index): increasing in both, so a binary search finds the
        // earliest arrival numbered above a reordered packet (RFC 4737 extent).
        let mut in_order: Vec<(u64, u64)> = Vec::with_capacity(self.order.len());
        let mut next_exp = 0u64;
        let mut prev: Option<(u64, u64)> = None;
        for (index, &seq) in self.order.iter().enumerate() {
            let i = seq as usize;
            let (send_ts, recv_ts) = (self.send_ts[i], self.recv_ts[i]);
            // RFC 4737 section 3.3: in order when seq >= NextExp.
            if seq >= next_exp {
                next_exp = seq + 1;
                in_order.push((seq, index as u64));
            } else {
                r.reordered += 1;
                let j = in_order.partition_point(|&(s, _)| s <= seq);
                if let Some(&(_, earliest)) = in_order.get(j) {
                    let _ = r.extent_hist.record(index as u64 - earliest);
                }
                // n-reordering: below all of the previous n arrivals.
                for n in 1..=index.min(MAX_N_REORDERING) {
                    if seq < self.order[index - n] {
                        r.n_reordered[n - 1] += 1;
                    } else {
                        break;
                    }
                }
            }
            // RFC 3550 interarrival jitter, in arrival order.
            if let Some((ps, pr)) = prev {
                let d = (recv_ts as i128 - pr as i128) - (send_ts as i128 - ps as i128);
                jitter_ns += ((d.unsigned_abs() as f64) - jitter_ns) / 16.0;
                let _ = iat_hist.record(recv_ts.saturating_sub(pr));
            }
            prev = Some((send_ts, recv_ts));
        }
        (r, jitter_ns, iat_hist)
    }

    /// Every packet's times for packets 0..sent, None when more than [`MAX_TIMELINE`] or none arrived.
    pub fn timeline(&self, sent: u64) -> Option<Timeline> {
        let n = sent.min(self.capacity);
        if n > MAX_TIMELINE {
            return None;
        }
        let n = n as usize;
        let first = (0..n).find(|&i| self.recv_ts[i] != 0)?;
        let (sb, rb) = (self.send_ts[first], self.recv_ts[first]);
        let rel = |v: &[u64], base: u64| -> Vec<i64> {
            (0..n)
                .map(|i| {
                    if self.recv_ts[i] == 0 {
                        -1
                    } else {
                        (v[i] as i64).wrapping_sub(base as i64)
                    }
                })
                .collect()
        };
        Some(Timeline {
            send_base_ns: sb,
            recv_base_ns: rb,
            send_ns: rel(&self.send_ts, sb),
            recv_ns: rel(&self.recv_ts, rb),
        })
    }

    /// Summarises, given how many packets the sender says it sent (numbers 0..sent).
    pub fn summary(&self, sent: u64) -> ArrivalSummary {
        let sent = sent.min(self.capacity);
        let n = sent as usize;
        let received_in = self.recv_ts[..n].iter().filter(|&&t| t != 0).count() as u64;
        let lost = sent - received_in;
        let received = self.received();
        let (reorder_counts, jitter_ns, iat_hist) = self.arrival_order_stats();

        // One-way delay with the constant offset removed.
        let mut min_delay = i128::MAX;
        for i in 0..n {
            if self.recv_ts[i] != 0 {
                min_delay = min_delay.min(self.recv_ts[i] as i128 - self.send_ts[i] as i128);
            }
        }
        let delay = if received_in > 0 {
            let mut h = new_hist();
            for i in 0..n {
                if self.recv_ts[i] != 0 {
                    let d = self.recv_ts[i] as i128 - self.send_ts[i] as i128 - min_delay;
                    let _ = h.record(d as u64);
                }
            }
            Some(DelaySummary {
                offset_ns: min_delay as i64,
                hist: HistSummary::from_hist(&h, 1e-3),
            })
        } else {
            None
        };

        // Lost runs and estimated send times of lost packets.
        let mean_spacing = self.mean_send_spacing(n);
        let mut runs = new_hist();
        let mut loss_times: Vec<f64> = Vec::new();
        let mut prev_rx: Option<usize> = None;
        let mut i = 0;
        while i < n {
            if self.recv_ts[i] != 0 {
                prev_rx = Some(i);
                i += 1;
                continue;
            }
            let start = i;
            while i < n && self.recv_ts[i] == 0 {
                i += 1;
            }
            let _ = runs.record((i - start) as u64);
            let next_rx = if i < n { Some(i) } else { None };
            for k in start..i {
                loss_times.push(self.estimate_send(k, prev_rx, next_rx, mean_spacing));
            }
        }
        let intervals: Vec<f64> = loss_times
            .windows(2)
            .map(|w| ((w[1] - w[0]) * 1e-9).max(0.0))
            .collect();
        let fit = ExpFit::fit(&intervals);

        let reorder = ReorderSummary {
            reordered: reorder_counts.reordered,
            ratio: if received_in > 0 {
                reorder_counts.reordered as f64 / received as f64
            } else {
                0.0
            },
            extent: HistSummary::from_hist(&reorder_counts.extent_hist, 1.0),
            n_reordering: reorder_counts.n_reordered.to_vec(),
        };
        ArrivalSummary {
            sent,
            received,
            lost,
            duplicates: self.duplicates,
            foreign: self.out_of_range,
            out_of_order: reorder_counts.reordered,
            first_recv_ns: self.first_recv,
            last_recv_ns: self.last_recv,
            jitter_us: jitter_ns * 1e-3,
            reorder,
            delay,
            inter_arrival: HistSummary::from_hist(&iat_hist, 1e-3),
            lost_runs: HistSummary::from_hist(&runs, 1.0),
            loss_intervals_us: intervals
                .iter()
                .take(MAX_KEPT_INTERVALS)
                .map(|s| s * 1e6)
                .collect(),
            loss_fit: fit,
        }
    }

    /// Mean spacing between consecutive sequence numbers on the sender's clock, ns.
    fn mean_send_spacing(&self, n: usize) -> f64 {
        let first = (0..n).find(|&i| self.recv_ts[i] != 0);
        let last = (0..n).rev().find(|&i| self.recv_ts[i] != 0);
        match (first, last) {
            (Some(a), Some(b)) if b > a => (self.send_ts[b] as f64 - self.send_ts[a] as f64) / (b - a) as f64,
            _ => 0.0,
        }
    }

    /// The send time of lost packet `k`: interpolated between the received neighbours, or
    /// extrapolated with the mean spacing at the ends.
    fn estimate_send(&self, k: usize, prev: Option<usize>, next: Option<usize>, spacing: f64) -> f64 {
        match (prev, next) {
            (Some(p), Some(q)) => {
                let (sp, sq) = (self.send_ts[p] as f64, self.send_ts[q] as f64);
                sp + (sq - sp) * (k - p) as f64 / (q - p) as f64
            }
            (Some(p), None) => self.send_ts[p] as f64 + spacing * (k - p) as f64,
            (None, Some(q)) => self.send_ts[q] as f64 - spacing * (q - k) as f64,
            (None, None) => k as f64 * spacing,
        }
    }
}

/// RFC 4737 counts replayed from the arrival order.
struct ReorderCounts {
    reordered: u64,
    n_reordered: [u64; MAX_N_REORDERING],
    extent_hist: Histogram<u64>,
}

fn new_hist() -> Histogram<u64> {
    // Values up to an hour in ns at 3 significant figures; out-of-range values saturate.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// RFC 4737 reordering.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReorderSummary {
    /// Packets that arrived after a later-numbered one.
    pub reordered: u64,
    /// Reordered / received.
    pub ratio: f64,
    /// Reordering extents (arrival positions late).
    pub extent: HistSummary,
    /// `n_reordering[n-1]`: packets below all of the previous n arrivals, n = 1..=16.
    pub n_reordering: Vec<u64>,
}

/// One-way delay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DelaySummary {
    /// The smallest raw (receive minus send) delay, ns: clock offset plus the fixed path delay; it
    /// was removed from every value in `hist`.
    pub offset_ns: i64,
    /// Delay above the minimum, µs.
    pub hist: HistSummary,
}

/// A histogram summarised for reports and plots, in a display unit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistSummary {
    /// Values recorded.
    pub count: u64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Lower edge of the first bin.
    pub bin_start: f64,
    /// Bin width.
    pub bin_width: f64,
    /// Counts per bin, from `bin_start`.
    pub bins: Vec<u64>,
    /// The most frequent value: the centre of the fullest bin of a fine binning (Freedman-Diaconis
    /// width, see [`mode`]), e.g. the packet spacing for inter-arrival times. 0 when empty or from
    /// an older peer.
    #[serde(default)]
    pub mode: f64,
}

/// Most fine bins [`mode`] will consider between the minimum and the 99.9th percentile.
const MODE_MAX_BINS: u64 = 100_000;

/// The mode of `h` in recorded units: the centre of the fullest bin, bins of the Freedman-Diaconis
/// width `2 IQR / cbrt(n)` (at least 1) laid from the minimum, values above the 99.9th percentile
/// left out. Ties go to the lower bin. 0 for an empty histogram.
pub fn mode(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let lo = h.min();
    let hi = h.value_at_quantile(0.999).clamp(lo, h.max());
    let iqr = h
        .value_at_quantile(0.75)
        .saturating_sub(h.value_at_quantile(0.25)) as f64;
    let fd = (2.0 * iqr / (h.len() as f64).cbrt()).ceil() as u64;
    let width = fd.max(1).max((hi - lo) / MODE_MAX_BINS + 1);
    // Sparse: one entry per bin that holds a recorded value.
    let mut counts = std::collections::BTreeMap::<u64, u64>::new();
    for v in h.iter_recorded() {
        // A recorded bucket stands for values up to `value_iterated_to`; its middle is the value.
        let x = h.median_equivalent(v.value_iterated_to());
        if x > hi {
            continue;
        }
        *counts.entry((x.max(lo) - lo) / width).or_default() += v.count_at_value();
    }
    let best = counts
        .iter()
        .fold(
            (0u64, 0u64),
            |(bb, bc), (&b, &c)| if c > bc { (b, c) } else { (bb, bc) },
        )
        .0;
    // Bin b holds the integers lo + b w ..= lo + b w + w - 1.
    lo as f64 + (best * width) as f64 + (width - 1) as f64 / 2.0
}

impl HistSummary {
    /// Summarises `h`, scaling recorded values by `scale` (e.g. 1e-3 for ns to µs). The bins cover
    /// min..99.9th percentile in at most [`HIST_BINS`] equal steps (integer-valued histograms get
    /// unit-aligned bins); the rare values above fall into the last bin so outliers do not squash
    /// the plot.
    pub fn from_hist(h: &Histogram<u64>, scale: f64) -> Self {
        if h.is_empty() {
            return HistSummary::default();
        }
        let (lo, hi) = (h.min(), h.value_at_quantile(0.999).clamp(h.min(), h.max()));
        let mut width = (hi - lo) / HIST_BINS as u64 + 1;
        if scale == 1.0 && hi - lo < HIST_BINS as u64 {
            width = 1;
        }
        let nbins = ((hi - lo) / width + 1) as usize;
        let mut bins = vec![0u64; nbins];
        for v in h.iter_recorded() {
            let x = v.value_iterated_to().clamp(lo, hi);
            bins[((x - lo) / width) as usize] += v.count_at_value();
        }
        HistSummary {
            count: h.len(),
            min: lo as f64 * scale,
            max: hi as f64 * scale,
            mean: h.mean() * scale,
            stddev: h.stdev() * scale,
            p50: h.value_at_quantile(0.5) as f64 * scale,
            p90: h.value_at_quantile(0.9) as f64 * scale,
            p99: h.value_at_quantile(0.99) as f64 * scale,
            bin_start: lo as f64 * scale,
            bin_width: width as f64 * scale,
            bins,
            mode: mode(h) * scale,
        }
    }
}

/// An exponential distribution fitted to intervals between losses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpFit {
    /// Intervals fitted.
    pub n: u64,
    /// Maximum-likelihood rate, per second (1 / mean interval).
    pub lambda_per_s: f64,
    /// Mean interval, µs.
    pub mean_us: f64,
    /// Kolmogorov-Smirnov statistic: the largest distance between the empirical and fitted CDFs.
    pub ks_d: f64,
    /// Asymptotic p-value of `ks_d` (with lambda estimated from the same data this is conservative:
    /// a small value still rejects a Poisson loss process).
    pub ks_p: f64,
}

impl ExpFit {
    /// Fits intervals given in seconds; None for fewer than 2 intervals or a zero mean.
    pub fn fit(intervals_s: &[f64]) -> Option<ExpFit> {
        let n = intervals_s.len();
        if n < 2 {
            return None;
        }
        let mean = intervals_s.iter().sum::<f64>() / n as f64;
        if mean <= 0.0 {
            return None;
        }
        let lambda = 1.0 / mean;
        let mut sorted = intervals_s.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let nf = n as f64;
        let d = sorted
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = 1.0 - (-lambda * x).exp();
                (f - i as f64 / nf).max((i + 1) as f64 / nf - f)
            })
            .fold(0.0f64, f64::max);
        let sq = nf.sqrt();
        Some(ExpFit {
            n: n as u64,
            lambda_per_s: lambda,
            mean_us: mean * 1e6,
            ks_d: d,
            ks_p: kolmogorov_q((sq + 0.12 + 0.11 / sq) * d),
        })
    }
}

/// The Kolmogorov distribution's tail Q(x) = 2 sum_{j>=1} (-1)^(j-1) exp(-2 j^2 x^2).
pub fn kolmogorov_q(x: f64) -> f64 {
    if x < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    let mut sign = 1.0;
    for j in 1..=100 {
        let term = sign * (-2.0 * (j * j) as f64 * x * x).exp();
        sum += term;
        if term.abs() < 1e-12 {
            break;
        }
        sign = -sign;
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

/// Everything a receiver learned about one throughput test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArrivalSummary {
    /// Packets the sender says it sent.
    pub sent: u64,
    /// Unique test packets received.
    pub received: u64,
    /// sent minus unique received among 0..sent.
    pub lost: u64,
    /// Copies of already received packets.
    pub duplicates: u64,
    /// Datagrams that were not packets of this test (or numbered beyond it).
    pub foreign: u64,
    /// Packets that arrived after a later-numbered one (RFC 4737).
    pub out_of_order: u64,
    /// First arrival, receiver's CLOCK_REALTIME ns.
    pub first_recv_ns: u64,
    /// Last arrival, receiver's CLOCK_REALTIME ns.
    pub last_recv_ns: u64,
    /// RFC 3550 interarrival jitter at the end of the test, µs.
    pub jitter_us: f64,
    /// RFC 4737 reordering.
    pub reorder: ReorderSummary,
    /// One-way delay above its minimum, µs.
    pub delay: Option<DelaySummary>,
    /// Inter-arrival times, µs.
    pub inter_arrival: HistSummary,
    /// Lengths of runs of consecutive lost packets.
    pub lost_runs: HistSummary,
    /// Times between consecutive losses, µs (at most [`MAX_KEPT_INTERVALS`]).
    pub loss_intervals_us: Vec<f64>,
    /// Exponential fit to the times between losses.
    pub loss_fit: Option<ExpFit>,
}

impl ArrivalSummary {
    /// Lost as a percentage of sent.
    pub fn loss_percent(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.sent as f64
        }
    }

    /// Seconds between first and last arrival.
    pub fn receive_span_s(&self) -> f64 {
        self.last_recv_ns.saturating_sub(self.first_recv_ns) as f64 * 1e-9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1000;

    /// Feeds `order` with send time seq*10 µs and receive time send + 1 s offset + `extra(seq)`.
    fn feed(order: &[u64], cap: u64, extra: impl Fn(u64) -> u64) -> ArrivalStats {
        let mut s = ArrivalStats::new(cap);
        for &q in order {
            let send = 1_000_000 + q * 10 * US;
            s.observe(q, send, send + 1_000_000_000 + extra(q));
        }
        s
    }

    #[test]
    fn in_order_no_loss_has_zero_jitter_and_reordering() {
        let order: Vec<u64> = (0..100).collect();
        let sum = feed(&order, 100, |_| 0).summary(100);
        assert_eq!(
            (sum.received, sum.lost, sum.out_of_order, sum.duplicates),
            (100, 0, 0, 0)
        );
        assert_eq!(sum.jitter_us, 0.0);
        assert_eq!(sum.reorder.ratio, 0.0);
        let d = sum.delay.unwrap();
        assert_eq!(d.offset_ns, 1_000_000_000);
        assert_eq!(d.hist.max, 0.0);
        assert_eq!(sum.inter_arrival.count, 99);
        assert!(
            (sum.inter_arrival.mean - 10.0).abs() < 0.01,
            "{}",
            sum.inter_arrival.mean
        );
        assert!(sum.loss_fit.is_none());
    }

    #[test]
    fn rfc4737_example_extent_and_n_reordering() {
        // Arrivals 0,1,2,4,5,3,6: packet 3 is reordered; the earliest later-numbered arrival is 4 at
        // index 3, and 3 arrives at index 5: extent 2. It is below the previous 2 arrivals (4, 5) but
        // not the 3rd (2): 1- and 2-reordered.
        let sum = feed(&[0, 1, 2, 4, 5, 3, 6], 7, |_| 0).summary(7);
        assert_eq!(sum.out_of_order, 1);
        assert_eq!(sum.lost, 0);
        assert!((sum.reorder.ratio - 1.0 / 7.0).abs() < 1e-12);
        assert_eq!(sum.reorder.extent.count, 1);
        assert_eq!(sum.reorder.extent.max, 2.0);
        assert_eq!(&sum.reorder.n_reordering[..3], &[1, 1, 0]);
    }

    #[test]
    fn reversed_pair_and_duplicates() {
        let sum = feed(&[1, 0, 2, 2, 3, 99], 4, |_| 0).summary(4);
        assert_eq!(sum.out_of_order, 1);
        assert_eq!(sum.reorder.extent.max, 1.0);
        assert_eq!(sum.duplicates, 1);
        assert_eq!(sum.foreign, 1);
        assert_eq!(sum.received, 4);
    }

    #[test]
    fn lost_runs_and_loss_intervals() {
        // 0..10 with 3, 4 and 8 lost: runs of 2 and 1; losses at 30, 40, 80 µs: intervals 10 and 40 µs.
        let order: Vec<u64> = (0..10).filter(|q| ![3, 4, 8].contains(q)).collect();
        let sum = feed(&order, 10, |_| 0).summary(10);
        assert_eq!(sum.lost, 3);
        assert!((sum.loss_percent() - 30.0).abs() < 1e-12);
        assert_eq!(sum.lost_runs.count, 2);
        assert_eq!((sum.lost_runs.min, sum.lost_runs.max), (1.0, 2.0));
        assert_eq!(sum.loss_intervals_us.len(), 2);
        assert!((sum.loss_intervals_us[0] - 10.0).abs() < 1e-6);
        assert!((sum.loss_intervals_us[1] - 40.0).abs() < 1e-6);
        let fit = sum.loss_fit.unwrap();
        assert!((fit.mean_us - 25.0).abs() < 1e-6);
        assert!((fit.lambda_per_s - 40_000.0).abs() < 1e-3);
    }

    #[test]
    fn trailing_losses_use_the_mean_spacing() {
        let sum = feed(&[0, 1, 2], 10, |_| 0).summary(5);
        assert_eq!(sum.lost, 2);
        assert_eq!(sum.loss_intervals_us, vec![10.0]);
    }

    #[test]
    fn rfc3550_jitter_converges_as_specified() {
        // Delays alternate 0, 4 µs: |D| = 4 µs from the second packet on, so after k steps
        // J = 4 µs * (1 - (15/16)^k).
        let order: Vec<u64> = (0..20).collect();
        let sum = feed(&order, 20, |q| if q % 2 == 1 { 4 * US } else { 0 }).summary(20);
        let want = 4.0 * (1.0 - (15.0f64 / 16.0).powi(19));
        assert!((sum.jitter_us - want).abs() < 1e-9, "{} vs {want}", sum.jitter_us);
        let d = sum.delay.unwrap();
        assert_eq!(d.hist.min, 0.0);
        assert!((d.hist.max - 4.0).abs() < 0.01);
        assert!((d.hist.mean - 2.0).abs() < 0.01);
    }

    #[test]
    fn exponential_quantiles_fit_well_and_uniform_does_not() {
        let lambda = 2360.0;
        let n = 2000;
        let exp: Vec<f64> = (0..n)
            .map(|i| -((1.0 - (i as f64 + 0.5) / n as f64).ln()) / lambda)
            .collect();
        let fit = ExpFit::fit(&exp).unwrap();
        assert!(
            (fit.lambda_per_s / lambda - 1.0).abs() < 0.01,
            "{}",
            fit.lambda_per_s
        );
        assert!(fit.ks_d < 0.01, "{}", fit.ks_d);
        assert!(fit.ks_p > 0.9, "{}", fit.ks_p);
        let uni: Vec<f64> = (0..n).map(|i| (i as f64 + 0.5) / n as f64 * 1e-3).collect();
        let fit = ExpFit::fit(&uni).unwrap();
        assert!(fit.ks_d > 0.1 && fit.ks_p < 1e-6, "{fit:?}");
        assert!(ExpFit::fit(&[1.0]).is_none());
    }

    #[test]
    fn kolmogorov_tail_known_values() {
        // Q(1.36) ~ 0.049 (the 5% critical value), Q(1.63) ~ 0.010.
        assert!((kolmogorov_q(1.36) - 0.0494).abs() < 0.001);
        assert!((kolmogorov_q(1.63) - 0.0098).abs() < 0.001);
        assert_eq!(kolmogorov_q(0.0), 1.0);
    }

    #[test]
    fn mode_finds_the_spacing_among_bursts_and_outliers() {
        // 20 µs spacing with 100 ns of noise, a fifth of the gaps near zero (bursts) and a few long
        // gaps: the coarse plot bins hide it, the mode does not.
        let mut h = new_hist();
        for i in 0..10_000u64 {
            let v = match i % 50 {
                0..=9 => 10 + i % 7,
                10 => 2_000_000,
                _ => 19_950 + (i * 37) % 100,
            };
            h.record(v).unwrap();
        }
        let m = mode(&h) * 1e-3;
        assert!((m - 20.0).abs() < 0.2, "{m}");
        let s = HistSummary::from_hist(&h, 1e-3);
        assert_eq!(s.mode, m);
        assert_eq!(mode(&new_hist()), 0.0);
        let mut one = new_hist();
        one.record(5).unwrap();
        assert_eq!(mode(&one), 5.0);
    }

    #[test]
    fn histogram_bins_cover_the_range() {
        let mut h = new_hist();
        for v in [1u64, 2, 2, 3, 10] {
            h.record(v).unwrap();
        }
        let s = HistSummary::from_hist(&h, 1.0);
        assert_eq!(s.bins.len(), 10);
        assert_eq!(s.bins.iter().sum::<u64>(), 5);
        assert_eq!((s.bins[0], s.bins[1], s.bins[9]), (1, 2, 1));
    }
}
