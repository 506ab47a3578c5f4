//! Series of tests as `vlbiflow net bw/lat/tcp` runs them: parameter sweeps, the RFC 2544 zero-loss
//! search, the CPU-load sweep, stopping on request (Ctrl-C) and archiving each result. What happens
//! is told to the caller through an event callback, so a front end only parses arguments and prints.
//!
//! Stopping: when the caller's stop flag is set during a bw or tcp series, the series ends after (or
//! during) the current test; an interrupted test is dropped and the finished ones are returned with
//! `interrupted` set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::client::WIRE_OVERHEAD;
use crate::client::{BwParams, BwResult, Client, LatParams, LatResult, NetError, TcpParams, TcpResult};
use crate::host::HostSnapshot;
use crate::load::{CpuLoad, CpuLoadSpec};
use crate::search::{Trial, ZeroLossSearch};

/// Where finished results go (the SQLite archive implements it with the `archive` feature).
pub trait Store {
    /// Stores one result: its kind ("bw", "bw-zero-loss", "lat", "tcp"), headline figure, parameters
    /// and the full result.
    fn store(
        &self,
        kind: &str,
        metric: &str,
        value: f64,
        params: serde_json::Value,
        result: serde_json::Value,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// Why a series stopped early (other than by the stop flag).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A test failed; [`NetError::Aborted`] carries what it measured.
    #[error(transparent)]
    Test(#[from] NetError),
    /// The CPU-hungry competitor could not be started.
    #[error("{0}")]
    Load(String),
    /// A result could not be stored.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
}

/// A result with the competitor that ran during it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row<T: Serialize> {
    /// The CPU-hungry competitor, if any.
    pub load: Option<CpuLoadSpec>,
    /// Whole-machine idle share on this end during the test, percent: the CPU left.
    pub cpu_left_percent: f64,
    /// The test's result.
    #[serde(flatten)]
    pub result: T,
}

/// The outcome of one zero-loss search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ZeroLoss {
    /// Frame size, bytes.
    pub size: usize,
    /// The competitor during the search.
    pub load: Option<CpuLoadSpec>,
    /// Highest loss-free offered UDP payload rate, Mb/s (None: even the lowest trial lost).
    pub user_mbps: Option<f64>,
    /// The same on the wire (66 bytes per frame added), Mb/s.
    pub wire_mbps: Option<f64>,
    /// Upper end of the search, Mb/s.
    pub max_rate_mbps: f64,
    /// Length of each trial, s.
    pub trial_duration_s: f64,
    /// Every trial in order.
    pub trials: Vec<Trial>,
}

/// What happens during a series, in order.
#[derive(Debug)]
pub enum SweepEvent<'a> {
    /// What is about to run (a progress line).
    Progress(String),
    /// Something the user should know about a finished test (socket buffers, foreign datagrams).
    Warning(String),
    /// A finished throughput test.
    Bw(&'a Row<BwResult>),
    /// A finished zero-loss search.
    ZeroLoss(&'a ZeroLoss),
    /// A finished latency test.
    Lat(&'a Row<LatResult>),
    /// A finished TCP test.
    Tcp(&'a Row<TcpResult>),
}

/// What every series shares.
pub struct SweepOptions<'a> {
    /// Competitor levels, one pass of the series each; `[None]` runs without a competitor.
    pub loads: Vec<Option<CpuLoadSpec>>,
    /// Set (from a signal handler) to end the series.
    pub stop: &'a AtomicBool,
    /// Where to store results; None stores nothing.
    pub store: Option<&'a dyn Store>,
}

impl SweepOptions<'_> {
    /// True when the series runs at more than one competitor level (results are plotted against it).
    pub fn is_load_sweep(&self) -> bool {
        self.loads.len() > 1
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn store<P: Serialize, R: Serialize>(
        &self,
        kind: &str,
        metric: &str,
        value: f64,
        params: &P,
        result: &R,
    ) -> Result<(), SweepError> {
        let Some(s) = self.store else { return Ok(()) };
        let json = |v: serde_json::Result<serde_json::Value>| v.map_err(|e| SweepError::Store(Box::new(e)));
        let (p, r) = (
            json(serde_json::to_value(params))?,
            json(serde_json::to_value(result))?,
        );
        s.store(kind, metric, value, p, r).map_err(SweepError::Store)
    }
}

/// Runs `f` with the competitor `spec` (if any) spinning.
pub fn with_load<T>(spec: Option<CpuLoadSpec>, f: impl FnOnce() -> T) -> Result<T, SweepError> {
    let load = spec.map(CpuLoad::start).transpose().map_err(SweepError::Load)?;
    let out = f();
    drop(load);
    Ok(out)
}

/// How the frames of a throughput series are spaced.
#[derive(Debug, Clone, PartialEq)]
pub enum Spacing {
    /// One test per size and spacing, µs (0: as fast as possible).
    Waits(Vec<f64>),
    /// One test per size at this offered UDP payload rate, bit/s.
    Rate(f64),
    /// Per size, the RFC 2544 search for the highest loss-free rate.
    ZeroLoss(ZeroLossPlan),
}

/// Parameters of the zero-loss search.
#[derive(Debug, Clone, PartialEq)]
pub struct ZeroLossPlan {
    /// Length of each trial.
    pub trial: Duration,
    /// Upper end of the search, bit/s (None: 1.25 x the received rate of a flat-out trial).
    pub max_rate_bps: Option<f64>,
    /// Stop when the bracket is narrower than this fraction of the upper end.
    pub resolution: f64,
}

/// A throughput series: every size at every spacing (or each size searched).
#[derive(Debug, Clone, PartialEq)]
pub struct BwSweep {
    /// Frame sizes, bytes.
    pub sizes: Vec<usize>,
    /// Spacing of the frames.
    pub spacing: Spacing,
    /// Per-test settings; size, count and wait are set per test. `base.count` is the frames per
    /// test (and of the flat-out trial of a search).
    pub base: BwParams,
}

/// Everything a throughput series measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BwReport {
    /// Every finished test, in order (search trials included).
    pub results: Vec<Row<BwResult>>,
    /// Every finished search.
    pub zero_loss: Vec<ZeroLoss>,
    /// The stop flag ended the series early.
    pub interrupted: bool,
}

/// The most trials one zero-loss search runs.
pub const MAX_SEARCH_TRIALS: usize = 24;

/// Runs a throughput series, telling `on_event` about each test as it finishes.
pub fn run_bw(
    client: &mut Client,
    sweep: &BwSweep,
    opts: &SweepOptions,
    on_event: &mut dyn FnMut(SweepEvent),
) -> Result<BwReport, SweepError> {
    let mut report = BwReport::default();
    let params = |size: usize, count: u64, wait_us: f64| BwParams {
        size,
        count,
        wait_us,
        ..sweep.base.clone()
    };
    // One test: run, tell, store. Ok(None): interrupted during the test.
    let one = |client: &mut Client,
               load: Option<CpuLoadSpec>,
               p: BwParams,
               report: &mut BwReport,
               on_event: &mut dyn FnMut(SweepEvent)|
     -> Result<Option<BwResult>, SweepError> {
        let res = match with_load(load, || client.bw(&p, opts.stop))? {
            Ok(r) => r,
            // Ctrl-C during a test leaves it incomplete: it is dropped, the finished ones are kept.
            Err(_) if opts.stopped() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let row = Row {
            load,
            cpu_left_percent: res.local.host.cpu.idle,
            result: res,
        };
        on_event(SweepEvent::Bw(&row));
        for w in &row.result.warnings {
            on_event(SweepEvent::Warning(w.clone()));
        }
        opts.store(
            "bw",
            "recv_user_rate_mbps",
            row.result.recv_user_rate_mbps,
            &p,
            &row.result,
        )?;
        let res = row.result.clone();
        report.results.push(row);
        Ok(Some(res))
    };
    'tests: for &load in &opts.loads {
        if let Some(l) = load {
            on_event(SweepEvent::Progress(format!("competitor: {l}")));
        }
        if let Spacing::ZeroLoss(plan) = &sweep.spacing {
            for &size in &sweep.sizes {
                let hi = match plan.max_rate_bps {
                    Some(r) => r,
                    None => {
                        on_event(SweepEvent::Progress(format!(
                            "{size} B: flat-out trial to find the upper end"
                        )));
                        let p = params(size, sweep.base.count, 0.0);
                        let Some(res) = one(client, load, p, &mut report, on_event)? else {
                            report.interrupted = true;
                            break 'tests;
                        };
                        if res.lost == 0 {
                            // Lossless flat out: the answer is the send rate, bounded by the sender.
                            res.send_user_rate_mbps * 1e6
                        } else {
                            (res.recv_user_rate_mbps * 1e6 * 1.25).max(1e6)
                        }
                    }
                };
                let mut search = ZeroLossSearch::new(hi, plan.resolution, MAX_SEARCH_TRIALS);
                while let Some(rate) = search.next_rate() {
                    if opts.stopped() {
                        report.interrupted = true;
                        break 'tests;
                    }
                    let secs = plan.trial.as_secs_f64();
                    let count = ((rate * secs / (8.0 * size as f64)).ceil() as u64).max(100);
                    on_event(SweepEvent::Progress(format!(
                        "{size} B: trial {} at {:.2} Mb/s ({count} frames)",
                        search.trials().len() + 1,
                        rate / 1e6
                    )));
                    let p = params(size, count, BwParams::wait_for_rate(size, rate));
                    let Some(res) = one(client, load, p, &mut report, on_event)? else {
                        report.interrupted = true;
                        break 'tests;
                    };
                    // A trial the sender could not offer in full says nothing about the path at
                    // that rate: it counts as a failure.
                    let offered = res.send_user_rate_mbps * 1e6 >= 0.98 * rate;
                    search.record(rate, res.lost == 0 && offered);
                }
                let best = search.best();
                let z = ZeroLoss {
                    size,
                    load,
                    user_mbps: best.map(|b| b / 1e6),
                    wire_mbps: best.map(|b| b / 1e6 * (size + WIRE_OVERHEAD) as f64 / size as f64),
                    max_rate_mbps: hi / 1e6,
                    trial_duration_s: plan.trial.as_secs_f64(),
                    trials: search.trials().to_vec(),
                };
                on_event(SweepEvent::ZeroLoss(&z));
                let p = (size, plan.resolution, plan.trial.as_secs_f64());
                opts.store(
                    "bw-zero-loss",
                    "zero_loss_user_mbps",
                    z.user_mbps.unwrap_or(0.0),
                    &p,
                    &z,
                )?;
                report.zero_loss.push(z);
            }
        } else {
            let waits: &[f64] = match &sweep.spacing {
                Spacing::Waits(w) => w,
                _ => &[f64::NAN],
            };
            let total = sweep.sizes.len() * waits.len();
            let mut i = 0;
            for &size in &sweep.sizes {
                for &w in waits {
                    i += 1;
                    let wait = match sweep.spacing {
                        Spacing::Rate(r) => BwParams::wait_for_rate(size, r),
                        _ => w,
                    };
                    if total > 1 {
                        on_event(SweepEvent::Progress(format!(
                            "[{i}/{total}] {size} B, wait {wait:.2} µs"
                        )));
                    }
                    let p = params(size, sweep.base.count, wait);
                    if one(client, load, p, &mut report, on_event)?.is_none() || opts.stopped() {
                        report.interrupted = true;
                        break 'tests;
                    }
                }
            }
        }
    }
    Ok(report)
}

/// Everything a latency or TCP series measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report<T: Serialize> {
    /// Every finished test, in order.
    pub results: Vec<Row<T>>,
    /// The stop flag ended the series early.
    pub interrupted: bool,
}

/// Runs the latency test once per competitor level. The stop flag aborts it with an error that
/// carries the sizes finished so far ([`NetError::Aborted`]), as a single test.
pub fn run_lat(
    client: &mut Client,
    p: &LatParams,
    opts: &SweepOptions,
    on_event: &mut dyn FnMut(SweepEvent),
) -> Result<Report<LatResult>, SweepError> {
    let mut results = Vec::new();
    for &load in &opts.loads {
        on_event(SweepEvent::Progress(format!(
            "latency: {} sizes x {} requests{}",
            p.sizes.len(),
            p.count,
            load.map(|l| format!(", competitor {l}")).unwrap_or_default()
        )));
        let before = HostSnapshot::take();
        let res = with_load(load, || client.lat(p, opts.stop))??;
        let idle = HostSnapshot::take().since(&before).cpu.idle;
        let row = Row {
            load,
            cpu_left_percent: idle,
            result: res,
        };
        on_event(SweepEvent::Lat(&row));
        opts.store("lat", "intercept_us", row.result.intercept_us, p, &row.result)?;
        results.push(row);
    }
    Ok(Report {
        results,
        interrupted: false,
    })
}

/// A TCP series: one test per stream count (per competitor level).
#[derive(Debug, Clone, PartialEq)]
pub struct TcpSweep {
    /// Parallel streams, one test each.
    pub streams: Vec<u32>,
    /// Per-test settings; `streams` is set per test.
    pub base: TcpParams,
}

/// Runs a TCP series, telling `on_event` about each test as it finishes.
pub fn run_tcp(
    client: &mut Client,
    sweep: &TcpSweep,
    opts: &SweepOptions,
    on_event: &mut dyn FnMut(SweepEvent),
) -> Result<Report<TcpResult>, SweepError> {
    let mut report = Report {
        results: Vec::new(),
        interrupted: false,
    };
    'tests: for &load in &opts.loads {
        for &n in &sweep.streams {
            on_event(SweepEvent::Progress(format!(
                "tcp: {n} stream(s) for {:.1} s{}",
                sweep.base.duration.as_secs_f64(),
                load.map(|l| format!(", competitor {l}")).unwrap_or_default()
            )));
            let p = TcpParams {
                streams: n,
                ..sweep.base.clone()
            };
            let res = match with_load(load, || client.tcp(&p, opts.stop))? {
                Ok(r) => r,
                // Ctrl-C during a test: that test is incomplete; the finished ones are still reported.
                Err(_) if opts.stopped() => {
                    report.interrupted = true;
                    break 'tests;
                }
                Err(e) => return Err(e.into()),
            };
            let row = Row {
                load,
                cpu_left_percent: res.local_host.cpu.idle,
                result: res,
            };
            on_event(SweepEvent::Tcp(&row));
            opts.store("tcp", "rate_mbps", row.result.rate_mbps, &p, &row.result)?;
            report.results.push(row);
            if opts.stopped() {
                report.interrupted = true;
                break 'tests;
            }
        }
    }
    Ok(report)
}

/// A series of tests of one kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Series {
    /// Throughput: sizes x spacings, or the zero-loss search.
    Bw(BwSweep),
    /// Latency against message size.
    Lat(LatParams),
    /// TCP throughput against the number of streams.
    Tcp(TcpSweep),
}

/// What a [`Series`] measured.
#[derive(Debug, Clone)]
pub enum SeriesReport {
    /// Of a throughput series.
    Bw(BwReport),
    /// Of a latency series.
    Lat(Report<LatResult>),
    /// Of a TCP series.
    Tcp(Report<TcpResult>),
}

impl SeriesReport {
    /// The stop flag ended the series early.
    pub fn interrupted(&self) -> bool {
        match self {
            SeriesReport::Bw(r) => r.interrupted,
            SeriesReport::Lat(r) => r.interrupted,
            SeriesReport::Tcp(r) => r.interrupted,
        }
    }

    /// The whole report as one JSON document, with the responder it ran against.
    pub fn to_json(&self, client: &Client) -> serde_json::Value {
        let responder = client.server().to_string();
        match self {
            SeriesReport::Bw(r) => serde_json::json!({
                "responder": responder,
                "responder_software": client.remote_software(),
                "results": r.results,
                "zero_loss": r.zero_loss,
            }),
            SeriesReport::Lat(r) => serde_json::json!({"responder": responder, "results": r.results}),
            SeriesReport::Tcp(r) => serde_json::json!({"responder": responder, "results": r.results}),
        }
    }
}

/// Runs a series of any kind.
pub fn run(
    client: &mut Client,
    series: &Series,
    opts: &SweepOptions,
    on_event: &mut dyn FnMut(SweepEvent),
) -> Result<SeriesReport, SweepError> {
    Ok(match series {
        Series::Bw(s) => SeriesReport::Bw(run_bw(client, s, opts, on_event)?),
        Series::Lat(p) => SeriesReport::Lat(run_lat(client, p, opts, on_event)?),
        Series::Tcp(s) => SeriesReport::Tcp(run_tcp(client, s, opts, on_event)?),
    })
}

/// Parses "64,1472,8192" and "0:40:1" (`FROM:TO[:STEP]`, inclusive) and mixes of both.
pub fn parse_list(spec: &str) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split(':').collect();
        let num = |s: &str| -> Result<f64, String> {
            match s.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(format!("{s:?} in {spec:?} is not a non-negative number")),
            }
        };
        match parts.len() {
            1 => out.push(num(parts[0])?),
            2 | 3 => {
                let (a, b) = (num(parts[0])?, num(parts[1])?);
                let step = if parts.len() == 3 { num(parts[2])? } else { 1.0 };
                if step <= 0.0 {
                    return Err(format!("step in {item:?} must be positive"));
                }
                let n = ((b - a).abs() / step).floor() as usize;
                if n > 100_000 {
                    return Err(format!("{item:?} has too many steps"));
                }
                let dir = if b >= a { 1.0 } else { -1.0 };
                out.extend((0..=n).map(|i| a + dir * step * i as f64));
            }
            _ => return Err(format!("{item:?} is not N or FROM:TO[:STEP]")),
        }
    }
    if out.is_empty() {
        return Err(format!("empty list {spec:?}"));
    }
    Ok(out)
}

/// [`parse_list`] of whole numbers.
pub fn parse_whole_list(spec: &str) -> Result<Vec<usize>, String> {
    parse_list(spec)?
        .into_iter()
        .map(|v| {
            if v.fract() != 0.0 {
                return Err(format!("{v} is not a whole number"));
            }
            Ok(v as usize)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(parse_list("64,1472,8192").unwrap(), vec![64.0, 1472.0, 8192.0]);
        assert_eq!(parse_list("0:4:2,10").unwrap(), vec![0.0, 2.0, 4.0, 10.0]);
        assert_eq!(parse_list("3:1").unwrap(), vec![3.0, 2.0, 1.0]);
        assert_eq!(parse_list("0:40:1").unwrap().len(), 41);
        assert!(parse_list("a").is_err());
        assert!(parse_list("1:2:0").is_err());
        assert!(parse_list("").is_err());
        assert!(parse_whole_list("1.5").is_err());
        assert_eq!(parse_whole_list("1:3").unwrap(), vec![1, 2, 3]);
    }
}
