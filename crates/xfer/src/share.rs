//! A daemon's rate limits: a ceiling per transfer and one on all its transfers together, the latter shared
//! equally among the transfers running and shared again whenever one starts or ends.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A transfer's current ceiling, bits/s on the wire, set by the daemon and read by the transfer's data
/// loop.
#[derive(Debug, Default)]
pub struct RateCap(AtomicU64);

impl RateCap {
    /// No ceiling (0 stands for none).
    pub fn new() -> Self {
        RateCap(AtomicU64::new(0))
    }

    /// Sets the ceiling (`None`: none).
    pub fn set(&self, bps: Option<f64>) {
        self.0.store(encode(bps), Relaxed);
    }

    /// The ceiling now.
    pub fn get(&self) -> Option<f64> {
        decode(self.0.load(Relaxed))
    }
}

fn encode(bps: Option<f64>) -> u64 {
    match bps {
        Some(b) if b.is_finite() && b >= 1.0 => b as u64,
        Some(_) => 1,
        None => 0,
    }
}

fn decode(v: u64) -> Option<f64> {
    (v != 0).then_some(v as f64)
}

/// Follows a [`RateCap`] for a data loop: [`CapWatch::changed`] says when it moved since it was last
/// asked (one relaxed load when it did not).
#[derive(Debug)]
pub struct CapWatch<'a> {
    cap: &'a RateCap,
    seen: u64,
}

impl<'a> CapWatch<'a> {
    /// Watches `cap`, taking what it holds now as already applied.
    pub fn new(cap: &'a RateCap) -> Self {
        CapWatch {
            cap,
            seen: cap.0.load(Relaxed),
        }
    }

    /// The new ceiling if it changed since the last call (`Some(None)`: lifted).
    pub fn changed(&mut self) -> Option<Option<f64>> {
        let v = self.cap.0.load(Relaxed);
        (v != self.seen).then(|| {
            self.seen = v;
            decode(v)
        })
    }
}

/// The ceiling of each of `running` transfers under a daemon's limits: `per_transfer`, and `total`
/// divided equally among them.
pub fn share(per_transfer: Option<f64>, total: Option<f64>, running: usize) -> Option<f64> {
    let part = total.map(|t| t / running.max(1) as f64);
    match (per_transfer, part) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_number_of_transfers() {
        assert_eq!(share(None, None, 3), None);
        assert_eq!(share(Some(5e8), None, 3), Some(5e8));
        assert_eq!(share(None, Some(9e8), 3), Some(3e8));
        assert_eq!(share(Some(2e8), Some(9e8), 3), Some(2e8));
        assert_eq!(share(Some(5e8), Some(9e8), 1), Some(5e8));
        assert_eq!(share(None, Some(9e8), 0), Some(9e8));
    }

    #[test]
    fn a_watch_sees_each_change_once() {
        let c = RateCap::new();
        c.set(Some(4e8));
        let mut w = CapWatch::new(&c);
        assert_eq!(w.changed(), None, "what it held at the start counts as applied");
        c.set(Some(2e8));
        assert_eq!(w.changed(), Some(Some(2e8)));
        assert_eq!(w.changed(), None);
        c.set(None);
        assert_eq!(w.changed(), Some(None));
        c.set(Some(0.2));
        assert_eq!(
            c.get(),
            Some(1.0),
            "a ceiling under 1 bit/s is 1 bit/s, never none"
        );
    }
}
