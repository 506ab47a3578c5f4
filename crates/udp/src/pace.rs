//! Rate pacing on an absolute schedule, and a per-second rate meter.
//!
//! The [`Pacer`] computes when the k-th unit (byte or datagram) is due as `start + k / rate`, so
//! however late any one send is, the long-run rate stays exact and errors never accumulate. It sleeps
//! for long waits and spins for the last stretch, where sleeping would overshoot. The caller bounds
//! bursts by waiting once per batch.
//!
//! The [`RateMeter`] is sans-IO: it is fed `(Instant, units)` and counts units per one-second window
//! aligned on the schedule's start, keeping the worst relative error against the target rate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A rate that is not a positive finite number.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("rate must be a positive finite number of units per second, got {0}")]
pub struct InvalidRate(pub f64);

fn check_rate(rate: f64) -> Result<f64, InvalidRate> {
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(InvalidRate(rate))
    }
}

/// Outcome of a wait that a stop flag can cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The units are due; carries how late we are relative to the schedule (zero if on time).
    Due(Duration),
    /// The stop flag was set before the units became due.
    Stopped,
}

/// Paces units to a fixed rate on an absolute schedule.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: f64,
    start: Instant,
    spin: Duration,
    max_sleep_slice: Duration,
    catch_up_limit: Option<Duration>,
    skipped: Duration,
}

impl Pacer {
    /// Paces `units_per_sec` starting at `start` (unit 0 is due at `start`).
    pub fn new(units_per_sec: f64, start: Instant) -> Result<Self, InvalidRate> {
        Ok(Pacer {
            rate: check_rate(units_per_sec)?,
            start,
            spin: Duration::from_micros(80),
            max_sleep_slice: Duration::from_millis(10),
            catch_up_limit: None,
            skipped: Duration::ZERO,
        })
    }

    /// How long before the due time to stop sleeping and spin (default 80 µs; zero never spins, which
    /// saves CPU at the cost of wake-up jitter).
    pub fn with_spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// When the caller falls more than `limit` behind (e.g. after a stall), move the schedule forward
    /// instead of bursting to catch up. The long-run rate then falls short by the skipped time, which
    /// [`skipped`](Self::skipped) reports. Default: never skip (exact long-run rate).
    pub fn with_catch_up_limit(mut self, limit: Option<Duration>) -> Self {
        self.catch_up_limit = limit;
        self
    }

    /// Units per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The schedule start (moved forward by any skipped time).
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Total time the schedule was moved forward by the catch-up limit.
    pub fn skipped(&self) -> Duration {
        self.skipped
    }

    /// The offset from the start at which unit `units` is due.
    pub fn offset_of(&self, units: u64) -> Duration {
        // Beyond ~584 years the schedule saturates rather than failing.
        Duration::try_from_secs_f64(units as f64 / self.rate).unwrap_or(Duration::MAX)
    }

    /// When unit number `units` (counting from 0) is due.
    pub fn due_at(&self, units: u64) -> Instant {
        self.start
            .checked_add(self.offset_of(units))
            .unwrap_or(self.start + Duration::from_secs(1 << 40))
    }

    /// Blocks until `units` units may have been sent (i.e. unit number `units` is due), returning how
    /// late the return is relative to the schedule.
    pub fn wait_until_due(&mut self, units: u64) -> Duration {
        match self.wait_inner(units, None) {
            Wait::Due(late) => late,
            Wait::Stopped => unreachable!("no stop flag given"),
        }
    }

    /// Like [`wait_until_due`](Self::wait_until_due) but checks `stop` at least every 10 ms while
    /// sleeping (and on every spin), returning [`Wait::Stopped`] once it is set.
    pub fn wait_until_due_or_stop(&mut self, units: u64, stop: &AtomicBool) -> Wait {
        self.wait_inner(units, Some(stop))
    }

    fn wait_inner(&mut self, units: u64, stop: Option<&AtomicBool>) -> Wait {
        let stopped = || stop.is_some_and(|s| s.load(Ordering::Relaxed));
        let due = self.due_at(units);
        let mut now = Instant::now();
        if now >= due {
            let late = now - due;
            if let Some(limit) = self.catch_up_limit {
                if late > limit {
                    self.start += late;
                    self.skipped += late;
                    return Wait::Due(Duration::ZERO);
                }
            }
            return Wait::Due(late);
        }
        loop {
            if stopped() {
                return Wait::Stopped;
            }
            let left = due - now;
            if left <= self.spin {
                break;
            }
            std::thread::sleep((left - self.spin).min(self.max_sleep_slice));
            now = Instant::now();
            if now >= due {
                return Wait::Due(now - due);
            }
        }
        let mut spins = 0u32;
        loop {
            now = Instant::now();
            if now >= due {
                return Wait::Due(now - due);
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins & 1023 == 0 && stopped() {
                return Wait::Stopped;
            }
        }
    }
}

/// Counts of one closed one-second window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowStats {
    /// Window number: window k covers `[start + k s, start + (k + 1) s)`.
    pub index: u64,
    /// Units recorded in the window.
    pub units: u64,
    /// `(units - target) / target`.
    pub rel_error: f64,
}

/// Per-second unit counts against a target rate, fed with timestamps (sans-IO).
#[derive(Debug, Clone)]
pub struct RateMeter {
    target: f64,
    start: Instant,
    current: u64,
    current_units: u64,
    total_units: u64,
    full_windows: u64,
    last: Option<WindowStats>,
    worst: Option<WindowStats>,
}

impl RateMeter {
    /// Meters against `target_per_sec` in windows aligned on `start` (normally the pacer's start).
    pub fn new(target_per_sec: f64, start: Instant) -> Result<Self, InvalidRate> {
        Ok(RateMeter {
            target: check_rate(target_per_sec)?,
            start,
            current: 0,
            current_units: 0,
            total_units: 0,
            full_windows: 0,
            last: None,
            worst: None,
        })
    }

    fn window_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_secs()
    }

    /// Records `units` sent at `at`. Units stamped before `start` count in window 0; units stamped in an
    /// already closed window count in the current one. Returns the last window this closed, if any.
    pub fn record(&mut self, at: Instant, units: u64) -> Option<WindowStats> {
        let closed = self.close_until(at);
        self.current_units += units;
        self.total_units += units;
        closed
    }

    /// Closes every window that ended at or before `now` (windows with nothing recorded close with 0
    /// units). Returns the last one closed, if any.
    pub fn close_until(&mut self, now: Instant) -> Option<WindowStats> {
        let window = self.window_of(now);
        if window <= self.current {
            return None;
        }
        self.close(self.current, self.current_units);
        // Windows with no records in between are full windows with nothing sent.
        let empty = window - self.current - 1;
        if empty > 0 {
            self.full_windows += empty - 1;
            self.close(window - 1, 0);
        }
        self.current = window;
        self.current_units = 0;
        self.last
    }

    fn close(&mut self, index: u64, units: u64) {
        let stats = WindowStats {
            index,
            units,
            rel_error: (units as f64 - self.target) / self.target,
        };
        self.full_windows += 1;
        if self
            .worst
            .is_none_or(|w| stats.rel_error.abs() > w.rel_error.abs())
        {
            self.worst = Some(stats);
        }
        self.last = Some(stats);
    }

    /// The closed window with the largest absolute relative error.
    pub fn worst(&self) -> Option<WindowStats> {
        self.worst
    }

    /// The most recently closed window.
    pub fn last(&self) -> Option<WindowStats> {
        self.last
    }

    /// Number of closed (full) windows.
    pub fn full_windows(&self) -> u64 {
        self.full_windows
    }

    /// Units recorded in total.
    pub fn total_units(&self) -> u64 {
        self.total_units
    }

    /// Index of the window still open.
    pub fn current_window(&self) -> u64 {
        self.current
    }

    /// Units recorded so far in the open window.
    pub fn current_units(&self) -> u64 {
        self.current_units
    }

    /// Target units per second.
    pub fn target(&self) -> f64 {
        self.target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn rejects_bad_rates() {
        let t = Instant::now();
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Pacer::new(bad, t).is_err());
            assert!(RateMeter::new(bad, t).is_err());
        }
    }

    #[test]
    fn due_times_follow_absolute_schedule() {
        let t0 = Instant::now();
        let p = Pacer::new(1000.0, t0).unwrap();
        assert_eq!(p.due_at(0), t0);
        assert_eq!(p.due_at(1), t0 + Duration::from_millis(1));
        assert_eq!(p.due_at(1500), t0 + Duration::from_millis(1500));
        // A rate that is not a whole number of nanoseconds per unit still lands exactly on the second.
        let p = Pacer::new(3.0, t0).unwrap();
        assert_eq!(p.due_at(3), t0 + Duration::from_secs(1));
        assert_eq!(p.due_at(3 * 86_400), t0 + Duration::from_secs(86_400));
        // 15 Gb/s in bytes for a day: no drift beyond rounding to the nanosecond.
        let p = Pacer::new(15e9 / 8.0, t0).unwrap();
        let day = 86_400u64;
        let units = day * 15_000_000_000 / 8;
        let got = p.due_at(units) - t0;
        assert!(
            got.abs_diff(Duration::from_secs(day)) < Duration::from_micros(1),
            "{got:?}"
        );
        // Huge unit counts saturate instead of panicking.
        let _ = p.due_at(u64::MAX);
    }

    #[test]
    fn late_caller_is_told_how_late_and_catch_up_limit_skips() {
        let t0 = Instant::now() - Duration::from_secs(2);
        let mut p = Pacer::new(10.0, t0).unwrap();
        let late = p.wait_until_due(10);
        assert!(late >= Duration::from_secs(1));
        let mut p = Pacer::new(10.0, t0)
            .unwrap()
            .with_catch_up_limit(Some(Duration::from_millis(100)));
        assert_eq!(p.wait_until_due(10), Duration::ZERO);
        assert!(p.skipped() >= Duration::from_secs(1));
        assert!(p.due_at(10) <= Instant::now());
    }

    #[test]
    fn stop_flag_ends_a_long_wait() {
        let stop = AtomicBool::new(true);
        let mut p = Pacer::new(1.0, Instant::now()).unwrap();
        assert_eq!(p.wait_until_due_or_stop(3600, &stop), Wait::Stopped);
    }

    #[test]
    fn real_pacing_is_not_faster_than_the_rate() {
        // 10,000 units at 100k units/s, in batches of 100: the last batch may go at 0.099 s.
        let start = Instant::now();
        let mut p = Pacer::new(100_000.0, start)
            .unwrap()
            .with_spin(Duration::from_micros(50));
        let batch = 100u64;
        let mut sent = 0u64;
        while sent < 10_000 {
            p.wait_until_due(sent);
            sent += batch;
        }
        let elapsed = start.elapsed();
        assert!(elapsed >= secs(0.1 - batch as f64 / 100_000.0), "{elapsed:?}");
    }

    #[test]
    fn meter_windows_and_worst_error() {
        let t0 = Instant::now();
        let mut m = RateMeter::new(100.0, t0).unwrap();
        // Window 0: 100 units spread over the second.
        for i in 0..10 {
            assert_eq!(m.record(t0 + secs(0.1 * i as f64), 10), None);
        }
        // Window 1: 90 units.
        let closed = m.record(t0 + secs(1.0), 45).unwrap();
        assert_eq!(
            closed,
            WindowStats {
                index: 0,
                units: 100,
                rel_error: 0.0
            }
        );
        assert_eq!(m.record(t0 + secs(1.999), 45), None);
        // Window 2: 105 units.
        let closed = m.record(t0 + secs(2.5), 105).unwrap();
        assert_eq!(closed.index, 1);
        assert_eq!(closed.units, 90);
        assert!((closed.rel_error + 0.1).abs() < 1e-12);
        assert_eq!(m.worst().unwrap().index, 1);
        // Jumping to window 5 closes 2 (105 units) and the empty windows 3 and 4.
        let closed = m.record(t0 + secs(5.2), 1).unwrap();
        assert_eq!(
            closed,
            WindowStats {
                index: 4,
                units: 0,
                rel_error: -1.0
            }
        );
        assert_eq!(m.full_windows(), 5);
        assert_eq!(m.worst().unwrap().rel_error, -1.0);
        assert_eq!(m.total_units(), 100 + 90 + 105 + 1);
        assert_eq!(m.current_window(), 5);
        assert_eq!(m.current_units(), 1);
        // Closing without a record.
        assert_eq!(m.close_until(t0 + secs(5.9)), None);
        assert_eq!(m.close_until(t0 + secs(6.0)).unwrap().units, 1);
        assert_eq!(m.full_windows(), 6);
    }

    #[test]
    fn meter_counts_early_and_stale_stamps_in_open_window() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut m = RateMeter::new(10.0, t0).unwrap();
        m.record(t0 - secs(1.0), 3);
        assert_eq!(m.current_units(), 3);
        m.record(t0 + secs(1.5), 10);
        m.record(t0 + secs(0.5), 2);
        assert_eq!(m.current_window(), 1);
        assert_eq!(m.current_units(), 12);
        assert_eq!(m.last().unwrap().units, 3);
    }
}
