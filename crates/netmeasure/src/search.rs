//! RFC 2544 throughput search (sans-IO): the highest offered rate with zero loss, by bisection over
//! trials whose outcome the caller measures.

use serde::{Deserialize, Serialize};

/// One trial of the search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// Offered rate, bit/s.
    pub rate_bps: f64,
    /// True when nothing was lost.
    pub lossless: bool,
}

/// Bisection between a rate known (or assumed) to pass and one known to fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZeroLossSearch {
    lo: f64,
    hi: f64,
    resolution: f64,
    max_trials: usize,
    tried_max: bool,
    best: Option<f64>,
    trials: Vec<Trial>,
}

impl ZeroLossSearch {
    /// Searches 0..=`max_rate_bps` until the bracket is narrower than `resolution` (relative to
    /// `max_rate_bps`) or `max_trials` trials ran. The first trial is at the maximum.
    pub fn new(max_rate_bps: f64, resolution: f64, max_trials: usize) -> Self {
        ZeroLossSearch {
            lo: 0.0,
            hi: max_rate_bps,
            resolution: resolution.max(1e-6) * max_rate_bps,
            max_trials: max_trials.max(1),
            tried_max: false,
            best: None,
            trials: Vec::new(),
        }
    }

    /// The rate to try next, or None when done.
    pub fn next_rate(&self) -> Option<f64> {
        if self.trials.len() >= self.max_trials {
            return None;
        }
        if !self.tried_max {
            return Some(self.hi);
        }
        if self.best == Some(self.hi) || self.hi - self.lo <= self.resolution {
            return None;
        }
        Some((self.lo + self.hi) / 2.0)
    }

    /// Records the outcome of a trial at `rate_bps`.
    pub fn record(&mut self, rate_bps: f64, lossless: bool) {
        self.trials.push(Trial { rate_bps, lossless });
        self.tried_max = true;
        if lossless {
            self.lo = self.lo.max(rate_bps);
            self.best = Some(self.best.map_or(rate_bps, |b: f64| b.max(rate_bps)));
        } else {
            self.hi = self.hi.min(rate_bps);
        }
    }

    /// The highest lossless rate found so far.
    pub fn best(&self) -> Option<f64> {
        self.best
    }

    /// Trials so far.
    pub fn trials(&self) -> &[Trial] {
        &self.trials
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limit: f64, max: f64) -> ZeroLossSearch {
        let mut s = ZeroLossSearch::new(max, 0.005, 30);
        while let Some(r) = s.next_rate() {
            s.record(r, r <= limit);
        }
        s
    }

    #[test]
    fn converges_to_the_limit_within_resolution() {
        let s = run(200e6, 300e6);
        let best = s.best().unwrap();
        assert!((200e6 - 0.005 * 300e6..=200e6).contains(&best), "{best}");
        assert!(s.trials().len() <= 10, "{}", s.trials().len());
        assert_eq!(s.trials()[0].rate_bps, 300e6);
    }

    #[test]
    fn max_passing_ends_at_once_and_nothing_passing_gives_none() {
        let s = run(1e9, 300e6);
        assert_eq!((s.best(), s.trials().len()), (Some(300e6), 1));
        let s = run(0.0, 300e6);
        assert_eq!(s.best(), None);
    }

    #[test]
    fn trial_budget_is_respected() {
        let mut s = ZeroLossSearch::new(1e9, 1e-9, 3);
        while let Some(r) = s.next_rate() {
            s.record(r, false);
        }
        assert_eq!(s.trials().len(), 3);
    }
}
