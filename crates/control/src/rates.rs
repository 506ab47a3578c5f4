//! Rate sampling: once per second the controller hands the cumulative counters to a [`RateSampler`], which
//! differences them against the previous sample into rates (overall, per stream, per disk) and keeps a
//! ten-minute history for the dashboard.

use std::collections::{BTreeMap, VecDeque};

use crate::report::{Cumulative, Rates, Sample};

/// Seconds of rate history kept for the dashboard.
pub const HISTORY_SECONDS: usize = 600;

/// Cumulative totals at one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Unix time of the sample, seconds.
    pub t: f64,
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    /// Bytes received per stream label.
    pub stream_bytes: BTreeMap<String, u64>,
    /// Bytes written per disk path.
    pub disk_bytes: BTreeMap<String, u64>,
}

impl Totals {
    /// The totals of `c` at time `t`.
    pub fn of(c: &Cumulative, t: f64) -> Self {
        let mut s = Totals {
            t,
            ..Default::default()
        };
        for (label, v) in &c.streams {
            s.packets += v.packets;
            s.bytes += v.bytes;
            s.lost += v.lost;
            s.stream_bytes.insert(label.clone(), v.bytes);
        }
        s.disk_bytes = c.disks.iter().cloned().collect();
        s
    }

    fn written(&self) -> u64 {
        self.disk_bytes.values().sum()
    }
}

/// Differences successive [`Totals`] into rates.
#[derive(Debug, Default)]
pub struct RateSampler {
    prev: Option<Totals>,
    /// Overall rates over the last interval.
    pub rates: Rates,
    /// Received bits/s per stream label.
    pub stream_bps: BTreeMap<String, f64>,
    /// Written bytes/s per disk path.
    pub disk_bytes_per_s: BTreeMap<String, f64>,
    history: VecDeque<Sample>,
}

impl RateSampler {
    /// Takes a sample; rates are computed from the second sample on.
    pub fn sample(&mut self, now: Totals) {
        if let Some(p) = &self.prev {
            let dt = (now.t - p.t).max(1e-3);
            let per_s = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            self.rates = Rates {
                rx_bps: per_s(now.bytes, p.bytes) * 8.0,
                lost_per_s: per_s(now.lost, p.lost),
                write_bytes_per_s: per_s(now.written(), p.written()),
            };
            self.stream_bps = now
                .stream_bytes
                .iter()
                .map(|(l, b)| {
                    (
                        l.clone(),
                        per_s(*b, p.stream_bytes.get(l).copied().unwrap_or(0)) * 8.0,
                    )
                })
                .collect();
            self.disk_bytes_per_s = now
                .disk_bytes
                .iter()
                .map(|(d, b)| (d.clone(), per_s(*b, p.disk_bytes.get(d).copied().unwrap_or(0))))
                .collect();
            if self.history.len() == HISTORY_SECONDS {
                self.history.pop_front();
            }
            self.history.push_back(Sample {
                t: now.t,
                rx_bps: self.rates.rx_bps,
                lost_per_s: self.rates.lost_per_s,
                write_bytes_per_s: self.rates.write_bytes_per_s,
            });
        }
        self.prev = Some(now);
    }

    /// Rate history, oldest first.
    pub fn history(&self) -> Vec<Sample> {
        self.history.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::StreamTotals;

    fn cum(bytes: u64, lost: u64, written: u64) -> Cumulative {
        Cumulative {
            streams: vec![(
                "a".into(),
                StreamTotals {
                    packets: bytes / 100,
                    bytes,
                    lost,
                    ..Default::default()
                },
            )],
            disks: vec![("/d0".into(), written)],
            ..Default::default()
        }
    }

    #[test]
    fn rates_are_differences_over_the_interval() {
        let mut r = RateSampler::default();
        r.sample(Totals::of(&cum(1000, 1, 500), 10.0));
        assert!(r.history().is_empty());
        r.sample(Totals::of(&cum(3000, 5, 1500), 12.0));
        assert_eq!(r.rates.rx_bps, 8000.0);
        assert_eq!(r.rates.lost_per_s, 2.0);
        assert_eq!(r.rates.write_bytes_per_s, 500.0);
        assert_eq!(r.stream_bps["a"], 8000.0);
        assert_eq!(r.disk_bytes_per_s["/d0"], 500.0);
        assert_eq!(r.history().len(), 1);
    }
}
