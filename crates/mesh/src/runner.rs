//! Runs one planned run against the destination's responder and turns what happened into a
//! [`RunReport`]: a result with its headline figures and sweep points, or a failure with its reason.
//! The run is stopped at the end of its slot (a watchdog sets the stop flag the measurement checks)
//! and then fails as timed out.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vlbiflow_udp::net::ResolveError;

use vlbiflow_net::proto::ProtoError;
use vlbiflow_net::sweep::{self, BwSweep, Spacing, SweepOptions, TcpSweep, ZeroLossPlan};
use vlbiflow_net::{BwParams, Client, LatParams, NetError, SweepError, TcpParams};

use crate::capacity::{self, CapacityError, CapacityParams};
use crate::config::{vlbiflow_net_rate, Config, Kind, Params};
use crate::plan::PlannedRun;
use crate::report::{Metrics, Outcome, Point, Reason, RunReport};
use crate::timespec::{now_ms, parse_duration, Ms};

/// Classifies a measurement error.
pub fn classify(e: &NetError, stopped: bool) -> Reason {
    if stopped {
        return Reason::TimedOut;
    }
    match e {
        NetError::Proto(p) => classify_proto(p),
        NetError::Aborted { source, .. } => classify(source, stopped),
        NetError::Interrupted => Reason::TimedOut,
        _ => Reason::Error,
    }
}

fn classify_proto(p: &ProtoError) -> Reason {
    use std::io::ErrorKind as K;
    match p {
        ProtoError::Io { source, what, .. } => match source.kind() {
            K::ConnectionRefused => Reason::Refused,
            K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => Reason::Unreachable,
            K::TimedOut | K::WouldBlock if what.starts_with("connect") => Reason::Unreachable,
            K::TimedOut | K::WouldBlock => Reason::TimedOut,
            K::ConnectionReset | K::ConnectionAborted => Reason::Refused,
            _ => Reason::Error,
        },
        ProtoError::Remote(m) if m.contains("busy") || m.contains("refused") => Reason::Refused,
        ProtoError::Closed { .. } => Reason::Refused,
        _ => Reason::Error,
    }
}

/// Resolves a host's responder address.
pub fn responder_addr(cfg: &Config, host: &str) -> Result<SocketAddr, String> {
    let h = cfg
        .hosts
        .iter()
        .find(|h| h.name == host)
        .ok_or_else(|| format!("no host {host} in the configuration"))?;
    vlbiflow_udp::net::resolve(&vlbiflow_udp::net::host_port(&h.address, h.port)).map_err(|e| match e {
        ResolveError::Lookup { source, .. } => format!("cannot resolve {}: {source}", h.address),
        ResolveError::NoAddress { .. } => format!("{} resolves to nothing", h.address),
    })
}

/// Runs `run` now (as agent `me`) and reports.
pub fn run(cfg: &Config, run: &PlannedRun, me: &str) -> RunReport {
    run_with_token(cfg, run, me, None)
}

/// [`run`], sending `token` in the hello to the destination's responder (the mesh's responder
/// token, for responders that require one).
pub fn run_with_token(cfg: &Config, run: &PlannedRun, me: &str, token: Option<&str>) -> RunReport {
    let started = now_ms();
    // An exclusive run that could not start in the first quarter of its slot (a loaded host) is not
    // started at all: one measurement point cannot be interrupted, and it would run into the next
    // slot's runs on the same hosts and links.
    let late = started - run.start;
    if run.exclusive && late > (run.end - run.start) / 4 {
        return RunReport {
            run: run.clone(),
            started_at: None,
            ended_at: None,
            reported_by: me.into(),
            outcome: failed(
                Reason::TimedOut,
                format!("not started: {late} ms late, past a quarter of its slot"),
            ),
        };
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The watchdog: at the slot's end the measurement is told to stop.
    let watchdog = {
        let stop = stop.clone();
        let left = Duration::from_millis((run.end - started).max(0) as u64);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            if rx.recv_timeout(left).is_err() {
                stop.store(true, Ordering::SeqCst);
            }
        });
        (tx, h)
    };
    let outcome = measure(cfg, run, &stop, run.end, token);
    let _ = watchdog.0.send(());
    let _ = watchdog.1.join();
    RunReport {
        run: run.clone(),
        started_at: Some(started),
        ended_at: Some(now_ms()),
        reported_by: me.into(),
        outcome,
    }
}

fn failed(reason: Reason, detail: impl Into<String>) -> Outcome {
    Outcome::Failed {
        reason,
        detail: detail.into(),
    }
}

fn measure(cfg: &Config, run: &PlannedRun, stop: &AtomicBool, end: Ms, token: Option<&str>) -> Outcome {
    let addr = match responder_addr(cfg, &run.dst) {
        Ok(a) => a,
        Err(e) => return failed(Reason::Unreachable, e),
    };
    let left = Duration::from_millis((end - now_ms()).max(100) as u64);
    let timeout = left.min(Duration::from_secs(5));
    let mut client = match Client::connect_with_token(addr, timeout, token) {
        Ok(c) => c,
        Err(e) => return failed(classify(&e, false), format!("responder {addr}: {e}")),
    };
    let Some(test) = cfg.tests.iter().find(|t| t.name == run.test) else {
        return failed(
            Reason::Error,
            format!("test {} is not in the configuration", run.test),
        );
    };
    let p = &test.params;
    let opts = SweepOptions {
        loads: vec![None],
        stop,
        store: None,
    };
    let stopped = || stop.load(Ordering::Relaxed);
    let sweep_err = |e: SweepError| -> Outcome {
        match e {
            SweepError::Test(n) => failed(classify(&n, stopped()), format!("responder {addr}: {n}")),
            other => failed(Reason::Error, other.to_string()),
        }
    };
    let mut ignore = |_: vlbiflow_net::SweepEvent| {};
    match run.kind {
        Kind::Sweep | Kind::ZeroLoss => {
            let sizes = p.sizes.clone().unwrap_or_else(|| vec![1472]);
            let base = BwParams::new(0, p.count.unwrap_or(10_000), 0.0);
            let spacings: Vec<Spacing> = match run.kind {
                Kind::ZeroLoss => vec![Spacing::ZeroLoss(ZeroLossPlan {
                    trial: Duration::from_millis(
                        p.trial
                            .as_deref()
                            .and_then(|t| parse_duration(t).ok())
                            .unwrap_or(1000) as u64,
                    ),
                    max_rate_bps: p.max_rate.as_deref().and_then(|r| vlbiflow_net_rate(r).ok()),
                    resolution: p.resolution.unwrap_or(0.02),
                })],
                _ => match (&p.waits, &p.rates) {
                    (Some(w), _) => vec![Spacing::Waits(w.clone())],
                    (None, Some(r)) => r
                        .iter()
                        .filter_map(|r| vlbiflow_net_rate(r).ok())
                        .map(Spacing::Rate)
                        .collect(),
                    (None, None) => vec![Spacing::Rate(1e9)],
                },
            };
            let mut points = Vec::new();
            let mut best_zero_loss: Option<f64> = None;
            let mut reports = Vec::new();
            for spacing in spacings {
                let s = BwSweep {
                    sizes: sizes.clone(),
                    spacing,
                    base: base.clone(),
                };
                match sweep::run_bw(&mut client, &s, &opts, &mut ignore) {
                    Ok(r) if r.interrupted => {
                        return failed(Reason::TimedOut, "stopped at the end of its slot")
                    }
                    Ok(r) => {
                        for row in &r.results {
                            let b = &row.result;
                            points.push(Point {
                                size: b.size,
                                wait_us: b.wait_us,
                                offered_mbps: if b.wait_us > 0.0 {
                                    8.0 * b.size as f64 / b.wait_us
                                } else {
                                    b.send_user_rate_mbps
                                },
                                recv_mbps: b.recv_user_rate_mbps,
                                loss_percent: b.loss_percent,
                                jitter_us: b.remote.arrivals.jitter_us,
                            });
                        }
                        for z in &r.zero_loss {
                            best_zero_loss =
                                Some(best_zero_loss.unwrap_or(0.0).max(z.user_mbps.unwrap_or(0.0)));
                        }
                        reports.push(r);
                    }
                    Err(e) => return sweep_err(e),
                }
            }
            if stopped() {
                return failed(Reason::TimedOut, "stopped at the end of its slot");
            }
            let throughput = match run.kind {
                Kind::ZeroLoss => best_zero_loss,
                _ => points.iter().map(|p| p.recv_mbps).reduce(f64::max),
            };
            let loss = points
                .iter()
                .min_by(|a, b| a.offered_mbps.total_cmp(&b.offered_mbps))
                .map(|p| p.loss_percent);
            let result = serde_json::json!({
                "responder": addr.to_string(),
                "results": reports.iter().flat_map(|r| r.results.iter()).collect::<Vec<_>>(),
                "zero_loss": reports.iter().flat_map(|r| r.zero_loss.iter()).collect::<Vec<_>>(),
            });
            Outcome::Ok {
                metrics: Metrics {
                    throughput_mbps: throughput,
                    loss_percent: loss,
                    ..Metrics::default()
                },
                points,
                result: slim(result),
            }
        }
        Kind::Latency => {
            let lp = LatParams {
                sizes: vec![64, 1472],
                count: p.requests.unwrap_or(100),
                warmup: 5,
                reply_timeout: Duration::from_millis(500),
            };
            match client.lat(&lp, stop) {
                Ok(r) => {
                    let sent: u64 = r.points.iter().map(|x| x.sent).sum();
                    let lost: u64 = r.points.iter().map(|x| x.lost).sum();
                    let rtt = r
                        .points
                        .first()
                        .filter(|x| x.rtt_us.count > 0)
                        .map(|x| x.rtt_us.p50 / 1000.0);
                    Outcome::Ok {
                        metrics: Metrics {
                            rtt_ms: rtt,
                            loss_percent: (sent > 0).then(|| 100.0 * lost as f64 / sent as f64),
                            ..Metrics::default()
                        },
                        points: Vec::new(),
                        result: slim(serde_json::json!({"responder": addr.to_string(), "result": r})),
                    }
                }
                Err(e) => failed(classify(&e, stopped()), format!("responder {addr}: {e}")),
            }
        }
        Kind::Tcp => {
            let s = TcpSweep {
                streams: vec![p.streams.unwrap_or(1)],
                base: TcpParams {
                    streams: 1,
                    duration: Duration::from_millis(
                        p.duration
                            .as_deref()
                            .and_then(|d| parse_duration(d).ok())
                            .unwrap_or(5000) as u64,
                    ),
                    write_size: 128 << 10,
                    send_buffer: None,
                    recv_buffer: None,
                },
            };
            match sweep::run_tcp(&mut client, &s, &opts, &mut ignore) {
                Ok(r) if r.interrupted || r.results.is_empty() => {
                    failed(Reason::TimedOut, "stopped at the end of its slot")
                }
                Ok(r) => Outcome::Ok {
                    metrics: Metrics {
                        throughput_mbps: Some(r.results[0].result.rate_mbps),
                        ..Metrics::default()
                    },
                    points: Vec::new(),
                    result: slim(serde_json::json!({"responder": addr.to_string(), "results": r.results})),
                },
                Err(e) => sweep_err(e),
            }
        }
        Kind::Capacity => {
            let cp = capacity_params(p);
            match capacity::measure(&mut client, &cp, stop, &mut |_| {}) {
                Ok(r) => Outcome::Ok {
                    metrics: Metrics {
                        capacity_mbps: Some(r.estimate.capacity_mbps),
                        ..Metrics::default()
                    },
                    points: Vec::new(),
                    result: slim(
                        serde_json::json!({"responder": addr.to_string(), "estimate": r.estimate, "sent": r.sent, "incomplete": r.incomplete}),
                    ),
                },
                Err(CapacityError::Stopped) => failed(Reason::TimedOut, "stopped at the end of its slot"),
                Err(CapacityError::Net(e)) => {
                    failed(classify(&e, stopped()), format!("responder {addr}: {e}"))
                }
                Err(e) => failed(Reason::Error, e.to_string()),
            }
        }
    }
}

/// The capacity probe parameters of a test.
pub fn capacity_params(p: &Params) -> CapacityParams {
    let d = CapacityParams::default();
    CapacityParams {
        size: p
            .sizes
            .as_ref()
            .and_then(|s| s.first().copied())
            .unwrap_or(d.size),
        pairs: p.count.map(|c| c as usize).unwrap_or(d.pairs),
        train: p.train.unwrap_or(d.train),
        ..d
    }
}

/// Keeps archived results small: histogram bins and loss intervals are dropped (the figures stay).
fn slim(mut v: serde_json::Value) -> serde_json::Value {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("bins");
                m.remove("loss_intervals_us");
                m.remove("n_reordering");
                for x in m.values_mut() {
                    walk(x);
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}
