//! The collect scheduler, sans-IO in the manner of `quinn-proto`: no sockets, no threads, no clock. The
//! driver passes the time in with every call, tells it what happened (a station's need, progress, a pull
//! that ended, a capacity that changed) and reads its decisions: which station may start a pull
//! ([`Scheduler::poll_start`]), the rate each station may use ([`Scheduler::share`]) and events
//! ([`Scheduler::poll_event`]) for changed shares, stalls, stations gone away and come back.
//!
//! The link's total rate is divided among the stations that have work by weight, water-filling: a station
//! whose own limit (its path's rate) is below its weighted share takes its limit and the rest is divided
//! among the others in the same way; a station with nothing to send, stalled or unreachable takes nothing.
//! The division is made again whenever one of these changes.
//!
//! The division conserves work: a station that uses less than its share (a scan followed while it is
//! recorded more slowly than the share, a path slower than its configured limit, a station between two
//! pulls) for [`SchedConfig::demand_grace`] is given what it uses plus a quarter (at least
//! [`SchedConfig::demand_floor`] of the link) and the rest goes to the others; while it uses at least 90%
//! of what it is given, that doubles at each measurement until it is back at its fair share. A pull that
//! starts has its station's fair share from the start. The driver reports each station's rate with
//! [`Scheduler::measured`].
//!
//! A pull that makes no progress for [`SchedConfig::stall_after`] is stopped (its share goes to the
//! others) and retried after a back-off; a pull that fails (the station cannot be reached, the daemon
//! died) is retried after a back-off that doubles from [`SchedConfig::backoff_min`] up to
//! [`SchedConfig::backoff_max`]. The first progress after failures reports the station back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A station's index in the scheduler (the order stations were added in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StationId(pub usize);

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedConfig {
    /// The correlator link's total rate, bits/s.
    pub total_bps: f64,
    /// A running pull with no progress for this long is stalled: stopped and retried after a back-off.
    pub stall_after: Duration,
    /// The first back-off after a failure or stall.
    pub backoff_min: Duration,
    /// Back-offs double up to this.
    pub backoff_max: Duration,
    /// A station that uses less than 90% of its share for this long is given what it uses (plus a
    /// quarter) and the rest goes to the others.
    pub demand_grace: Duration,
    /// The least share, as a fraction of the link, that a station using less is cut down to.
    pub demand_floor: f64,
}

impl SchedConfig {
    /// `total_bps` shared; stall after 60 s without progress; back-off 1 s doubling to 60 s.
    pub fn new(total_bps: f64) -> Self {
        SchedConfig {
            total_bps,
            stall_after: Duration::from_secs(60),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            demand_grace: Duration::from_secs(2),
            demand_floor: 0.01,
        }
    }
}

/// A station as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct StationSpec {
    /// Name, for the events' readers.
    pub name: String,
    /// Weight in the division of the link (positive; 1 for equal shares).
    pub weight: f64,
    /// The station's own limit (its path's rate), bits/s; `None`: no limit but the link.
    pub limit_bps: Option<f64>,
    /// Pulls from this station at once (at least 1).
    pub concurrency: usize,
}

impl StationSpec {
    /// Weight 1, no limit, one pull at once.
    pub fn new(name: impl Into<String>) -> Self {
        StationSpec {
            name: name.into(),
            weight: 1.0,
            limit_bps: None,
            concurrency: 1,
        }
    }
}

/// How a pull ended, as the driver tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullEnd {
    /// The scan arrived and was verified.
    Done,
    /// The pull failed (network, daemon killed, refused for now): retry after a back-off.
    Failed,
    /// The station could not be reached at all: retry after a back-off, and report it away.
    Unreachable,
    /// The driver stopped it because the scheduler said so ([`Event::Stop`]); nothing more to count.
    Stopped,
}

/// A decision or report for the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The station's share of the link changed to `bps` (0: it may send nothing now). A station running
    /// several pulls divides it among them.
    Share { station: StationId, bps: f64 },
    /// Stop the station's running pulls: no progress for [`SchedConfig::stall_after`]. They are retried
    /// after `retry_in`.
    Stop { station: StationId, retry_in: Duration },
    /// The station failed `failures` times in a row (unreachable or failing); retried after `retry_in`.
    Away {
        station: StationId,
        failures: u32,
        retry_in: Duration,
    },
    /// The station made progress again after failures or a stall.
    Back { station: StationId },
}

#[derive(Debug, Clone)]
struct Station {
    spec: StationSpec,
    /// Bytes left to pull; 0: nothing to do now.
    need: u64,
    running: usize,
    /// No new pull before this (back-off after a failure or stall).
    hold_until: Option<Instant>,
    failures: u32,
    /// Set when it failed or stalled; cleared, with an [`Event::Back`], at its next progress.
    troubled: bool,
    last_progress: Instant,
    share: f64,
    /// Pulls the driver could start now (what it has ready; unlimited unless it says).
    startable: usize,
    /// What it is seen to use (plus headroom) when that is below its share; `None`: its fair share.
    demand: Option<f64>,
    /// Since when it has used less than 90% of its share.
    under_since: Option<Instant>,
}

impl Station {
    fn held(&self, now: Instant) -> bool {
        self.hold_until.is_some_and(|t| now < t)
    }

    /// Whether it takes part in the division: it has work and is neither held back nor stopped.
    fn eligible(&self, now: Instant) -> bool {
        self.need > 0 && !self.held(now)
    }
}

/// The scheduler. See the module documentation.
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedConfig,
    stations: Vec<Station>,
    events: VecDeque<Event>,
}

impl Scheduler {
    /// A scheduler with no stations yet.
    pub fn new(cfg: SchedConfig) -> Self {
        Scheduler {
            cfg,
            stations: Vec::new(),
            events: VecDeque::new(),
        }
    }

    /// Adds a station with nothing to do yet (see [`Scheduler::set_need`]).
    pub fn add_station(&mut self, spec: StationSpec, now: Instant) -> StationId {
        let mut spec = spec;
        spec.concurrency = spec.concurrency.max(1);
        if !(spec.weight.is_finite() && spec.weight > 0.0) {
            spec.weight = 1.0;
        }
        self.stations.push(Station {
            spec,
            need: 0,
            running: 0,
            hold_until: None,
            failures: 0,
            troubled: false,
            last_progress: now,
            share: 0.0,
            startable: usize::MAX,
            demand: None,
            under_since: None,
        });
        StationId(self.stations.len() - 1)
    }

    /// The station's settings.
    pub fn spec(&self, id: StationId) -> &StationSpec {
        &self.stations[id.0].spec
    }

    /// Stations added so far.
    pub fn stations(&self) -> impl Iterator<Item = StationId> {
        (0..self.stations.len()).map(StationId)
    }

    /// The link's total rate changed (measured or reconfigured).
    pub fn set_total(&mut self, bps: f64, now: Instant) {
        self.cfg.total_bps = bps.max(0.0);
        self.divide(now);
    }

    /// The link's total rate.
    pub fn total(&self) -> f64 {
        self.cfg.total_bps
    }

    /// A station's own limit changed (measured or reconfigured).
    pub fn set_limit(&mut self, id: StationId, limit_bps: Option<f64>, now: Instant) {
        self.stations[id.0].spec.limit_bps = limit_bps;
        self.divide(now);
    }

    /// What the station has left to send: bytes (0: nothing now; it takes no share).
    pub fn set_need(&mut self, id: StationId, bytes: u64, now: Instant) {
        self.stations[id.0].need = bytes;
        self.divide(now);
    }

    /// How many pulls the driver could start for the station now (work ready to go; a scan being
    /// pulled counts in the need but not here). Unlimited until said.
    pub fn set_startable(&mut self, id: StationId, n: usize) {
        self.stations[id.0].startable = n;
    }

    /// The station's share now, bits/s.
    pub fn share(&self, id: StationId) -> f64 {
        self.stations[id.0].share
    }

    /// Pulls running from the station.
    pub fn running(&self, id: StationId) -> usize {
        self.stations[id.0].running
    }

    /// Failures in a row of the station (0 once it made progress again).
    pub fn failures(&self, id: StationId) -> u32 {
        self.stations[id.0].failures
    }

    /// When the station may start again, if it is held back.
    pub fn held_until(&self, id: StationId, now: Instant) -> Option<Instant> {
        let s = &self.stations[id.0];
        s.hold_until.filter(|&t| now < t)
    }

    /// A station that may start a pull now (it has work, is not held back and runs fewer pulls than its
    /// concurrency), counted as running from here on; `None` when there is none. The driver calls it
    /// until it returns `None`, and tells of each pull's end with [`Scheduler::pull_ended`].
    pub fn poll_start(&mut self, now: Instant) -> Option<StationId> {
        self.handle_timeout(now);
        // the station with the fewest running pulls for its weight first
        let pick = self
            .stations
            .iter()
            .enumerate()
            .filter(|(_, s)| s.eligible(now) && s.running < s.spec.concurrency && s.startable > 0)
            .min_by(|a, b| {
                let ka = a.1.running as f64 / a.1.spec.weight;
                let kb = b.1.running as f64 / b.1.spec.weight;
                ka.total_cmp(&kb).then(a.0.cmp(&b.0))
            })
            .map(|(i, _)| i)?;
        let s = &mut self.stations[pick];
        if s.running == 0 {
            s.last_progress = now;
        }
        s.running += 1;
        s.startable = s.startable.saturating_sub(1);
        // a new pull starts on the station's fair share; what it then uses is measured again
        s.under_since = None;
        if s.demand.take().is_some() {
            self.divide(now);
        }
        Some(StationId(pick))
    }

    /// The station's measured rate (bits/s, over the last measurement interval; 0 when nothing runs).
    /// Below 90% of its share for [`SchedConfig::demand_grace`], its share is cut to what it uses plus
    /// a quarter; at 90% or more of a cut share, the cut doubles until it no longer binds.
    pub fn measured(&mut self, id: StationId, bps: f64, now: Instant) {
        let (grace, floor) = (self.cfg.demand_grace, self.cfg.demand_floor * self.cfg.total_bps);
        let total = self.cfg.total_bps;
        let s = &mut self.stations[id.0];
        if s.share <= 0.0 || !bps.is_finite() {
            return;
        }
        let before = s.demand;
        if bps >= 0.9 * s.share {
            s.under_since = None;
            s.demand = s.demand.map(|d| d * 2.0).filter(|&d| d < total);
        } else {
            let since = *s.under_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= grace {
                s.demand = Some((bps.max(0.0) * 1.25).max(floor));
            }
        }
        if s.demand != before {
            self.divide(now);
        }
    }

    /// Bytes arrived from the station (any amount, at `now`).
    pub fn progress(&mut self, id: StationId, now: Instant) {
        let s = &mut self.stations[id.0];
        s.last_progress = now;
        if s.troubled {
            s.troubled = false;
            s.failures = 0;
            self.events.push_back(Event::Back { station: id });
        }
    }

    /// A pull from the station ended.
    pub fn pull_ended(&mut self, id: StationId, end: PullEnd, now: Instant) {
        let (min, max) = (self.cfg.backoff_min, self.cfg.backoff_max);
        let s = &mut self.stations[id.0];
        s.running = s.running.saturating_sub(1);
        match end {
            PullEnd::Done => {
                s.last_progress = now;
                if s.troubled {
                    s.troubled = false;
                    self.events.push_back(Event::Back { station: id });
                }
                s.failures = 0;
            }
            PullEnd::Stopped => {}
            PullEnd::Failed | PullEnd::Unreachable => {
                s.failures = s.failures.saturating_add(1);
                s.troubled = true;
                let wait = backoff(min, max, s.failures);
                let until = now + wait;
                s.hold_until = Some(s.hold_until.map_or(until, |t| t.max(until)));
                self.events.push_back(Event::Away {
                    station: id,
                    failures: s.failures,
                    retry_in: wait,
                });
            }
        }
        self.divide(now);
    }

    /// When [`Scheduler::handle_timeout`] next has something to do (a stall to detect, a back-off that
    /// ends), if ever.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.stations
            .iter()
            .filter_map(|s| {
                let stall = (s.running > 0 && !s.held(now)).then(|| s.last_progress + self.cfg.stall_after);
                let hold = s.hold_until.filter(|&t| now < t);
                match (stall, hold) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            })
            .min()
    }

    /// Detects stalls and ends back-offs due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let (stall_after, min, max) = (self.cfg.stall_after, self.cfg.backoff_min, self.cfg.backoff_max);
        let mut changed = false;
        for (i, s) in self.stations.iter_mut().enumerate() {
            if s.hold_until.is_some_and(|t| now >= t) {
                s.hold_until = None;
                changed = true;
            }
            if s.running > 0 && !s.held(now) && now.saturating_duration_since(s.last_progress) >= stall_after
            {
                s.failures = s.failures.saturating_add(1);
                s.troubled = true;
                let wait = backoff(min, max, s.failures);
                s.hold_until = Some(now + wait);
                self.events.push_back(Event::Stop {
                    station: StationId(i),
                    retry_in: wait,
                });
                changed = true;
            }
        }
        if changed {
            self.divide(now);
        }
    }

    /// The next decision or report, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Divides the link among the eligible stations (water-filling by weight under each station's limit)
    /// and queues a [`Event::Share`] for every share that changed.
    fn divide(&mut self, now: Instant) {
        let shares = water_fill(
            self.cfg.total_bps,
            self.stations.iter().map(|s| {
                s.eligible(now).then(|| {
                    let limit = s.spec.limit_bps.unwrap_or(f64::INFINITY);
                    (s.spec.weight, s.demand.map_or(limit, |d| d.min(limit)))
                })
            }),
        );
        for (i, (s, new)) in self.stations.iter_mut().zip(shares).enumerate() {
            if (s.share - new).abs() > 1e-6 * new.max(s.share).max(1.0) {
                s.share = new;
                self.events.push_back(Event::Share {
                    station: StationId(i),
                    bps: new,
                });
            }
        }
    }
}

/// The back-off after `failures` failures in a row: `min` doubled `failures - 1` times, at most `max`.
pub fn backoff(min: Duration, max: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    min.saturating_mul(1u32 << doublings).min(max)
}

/// Water-filling of `total` among claimants given as `Some((weight, cap))` (`None`: takes nothing):
/// each gets `total * weight / sum of weights` unless its cap is lower, in which case it gets its cap and
/// the rest is divided among the others in the same way. The shares never exceed `total` together nor a
/// claimant's cap; they add up to `total` whenever the caps of the claimants do not add up to less.
pub fn water_fill(total: f64, claims: impl Iterator<Item = Option<(f64, f64)>>) -> Vec<f64> {
    let claims: Vec<Option<(f64, f64)>> = claims.collect();
    let mut share = vec![0.0; claims.len()];
    let mut open: Vec<usize> = (0..claims.len()).filter(|&i| claims[i].is_some()).collect();
    let mut left = total.max(0.0);
    while !open.is_empty() && left > 0.0 {
        let wsum: f64 = open.iter().map(|&i| claims[i].map_or(0.0, |c| c.0)).sum();
        // claimants whose cap is below their weighted part take their cap
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| claims[i].is_some_and(|(w, cap)| cap <= left * w / wsum))
            .collect();
        if capped.is_empty() {
            for &i in &open {
                if let Some((w, _)) = claims[i] {
                    share[i] = left * w / wsum;
                }
            }
            break;
        }
        for &i in &capped {
            let cap = claims[i].map_or(0.0, |c| c.1.max(0.0));
            share[i] = cap;
            left = (left - cap).max(0.0);
        }
        open.retain(|i| !capped.contains(i));
    }
    share
}

#[cfg(test)]
mod tests;
