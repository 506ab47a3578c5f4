//! Series of efficiency tests: every transport, repeated in alternating order, reduced to medians.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use vlbiflow_net::eff::{Availability, EffRemote, EndUsage};
use vlbiflow_net::host::CpuSeconds;
use vlbiflow_net::proto::ProtoError;
use vlbiflow_net::{Client, NetError};
use vlbiflow_rx::Transport;

use crate::send::{send_measured, EffParams, SendOutcome};

/// One finished test: both ends' measurements and the figures derived from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffResult {
    /// What was run.
    pub params: EffParams,
    /// Repeat number (0-based) within a series.
    pub repeat: u32,
    /// The sender's side.
    pub send: SendOutcome,
    /// The sending end's CPU and energy.
    pub sender: EndUsage,
    /// The receiving end's report.
    pub remote: EffRemote,
    /// Derived figures.
    pub metrics: EffMetrics,
}

/// Reads a figure written as `null` (how JSON carries NaN: no value, e.g. CPU below the tick resolution)
/// back as NaN.
fn nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// As [`nan`] for a pair.
fn nan2<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(f64, f64), D::Error> {
    let (a, b) = <(Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok((a.unwrap_or(f64::NAN), b.unwrap_or(f64::NAN)))
}

/// As [`nan`] for a triple.
fn nan3<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(f64, f64, f64), D::Error> {
    let (a, b, c) = <(Option<f64>, Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok((
        a.unwrap_or(f64::NAN),
        b.unwrap_or(f64::NAN),
        c.unwrap_or(f64::NAN),
    ))
}

/// Figures derived from one test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffMetrics {
    /// Payload Gb/s received (bytes over first-to-last arrival).
    #[serde(deserialize_with = "nan")]
    pub gbps: f64,
    /// Fraction of datagrams sent that were not received (UDP; 0 for TCP).
    #[serde(deserialize_with = "nan")]
    pub loss: f64,
    /// GB received.
    #[serde(deserialize_with = "nan")]
    pub gb: f64,
    /// Sending thread CPU seconds per GB sent: user, system.
    #[serde(deserialize_with = "nan2")]
    pub send_cpu_s_per_gb: (f64, f64),
    /// Receiving thread CPU seconds per GB received: user, system.
    #[serde(deserialize_with = "nan2")]
    pub recv_cpu_s_per_gb: (f64, f64),
    /// Whole host (both ends when they share it) per GB received: user, system, softirq.
    #[serde(deserialize_with = "nan3")]
    pub host_cpu_s_per_gb: (f64, f64, f64),
    /// Both ends share one kernel (same boot id): host counters and energy counted once.
    pub same_host: bool,
    /// RAPL joules per GB received (both ends, once if one host).
    pub joules_per_gb: Option<f64>,
    /// Gb/s per Watt (RAPL).
    pub gbps_per_watt: Option<f64>,
}

impl EffMetrics {
    /// Derives the figures.
    pub fn derive(p: &EffParams, send: &SendOutcome, sender: &EndUsage, remote: &EffRemote) -> EffMetrics {
        let gb = remote.bytes as f64 / 1e9;
        let sent_gb = send.bytes as f64 / 1e9;
        let per = |x: f64, g: f64| if g > 0.0 { x / g } else { f64::NAN };
        let same_host = !sender.boot_id.is_empty() && sender.boot_id == remote.usage.boot_id;
        let udp = p.setup.transport.is_udp();
        let sent: u64 = send.sent.iter().sum();
        let loss = if udp && sent > 0 {
            (sent.saturating_sub(remote.received)) as f64 / sent as f64
        } else {
            0.0
        };
        let host = if same_host {
            remote.usage.host
        } else {
            let (a, b) = (sender.host, remote.usage.host);
            CpuSeconds {
                user: a.user + b.user,
                system: a.system + b.system,
                irq: a.irq + b.irq,
                softirq: a.softirq + b.softirq,
                idle: a.idle + b.idle,
                steal: a.steal + b.steal,
            }
        };
        let joules = match (&sender.energy, &remote.usage.energy) {
            (_, Some(r)) if same_host => Some(r.joules),
            (Some(s), Some(r)) => Some(s.joules + r.joules),
            _ => None,
        };
        let gbps = if remote.active_s > 0.0 {
            remote.bytes as f64 * 8.0 / remote.active_s / 1e9
        } else {
            0.0
        };
        let interval = remote.usage.interval_s.max(1e-9);
        EffMetrics {
            gbps,
            loss,
            gb,
            send_cpu_s_per_gb: (
                per(send.thread.user_s, sent_gb),
                per(send.thread.system_s, sent_gb),
            ),
            recv_cpu_s_per_gb: (
                per(remote.usage.thread.user_s, gb),
                per(remote.usage.thread.system_s, gb),
            ),
            host_cpu_s_per_gb: (per(host.user, gb), per(host.system, gb), per(host.softirq, gb)),
            same_host,
            joules_per_gb: joules.map(|j| per(j, gb)),
            gbps_per_watt: joules.map(|j| per(gbps, j / interval)),
        }
    }

    /// Sending plus receiving thread CPU seconds per GB.
    pub fn both_cpu_s_per_gb(&self) -> f64 {
        self.send_cpu_s_per_gb.0
            + self.send_cpu_s_per_gb.1
            + self.recv_cpu_s_per_gb.0
            + self.recv_cpu_s_per_gb.1
    }

    /// Receiving thread CPU seconds per GB.
    pub fn recv_cpu(&self) -> f64 {
        self.recv_cpu_s_per_gb.0 + self.recv_cpu_s_per_gb.1
    }
}

/// Runs one transport-efficiency test through `client`: sends from one thread of this process for the
/// duration while the control connection is watched, then collects the receiver's measurements.
pub fn run_test(client: &mut Client, p: &EffParams, stop: &AtomicBool) -> Result<EffResult, NetError> {
    p.validate()
        .map_err(|e| NetError::Invalid(format!("efficiency: {e}")))?;
    let dests = client.eff_start(&p.setup)?;
    let (sent, usage) = client
        .watching(|gone| send_measured(p, &dests, stop, gone))
        .unwrap_or_else(|_| {
            (
                Err(io::Error::other("sender thread panicked")),
                Default::default(),
            )
        });
    let send = match sent {
        Ok(s) => s,
        Err(e) => {
            // End the test at the responder and take its answer, so the session stays in step.
            client.eff_abandon();
            return Err(NetError::Io {
                what: format!("efficiency: sending over {}", p.setup.transport),
                source: e,
            });
        }
    };
    if stop.load(Ordering::Relaxed) {
        client.eff_interrupted(send.sent.clone());
        return Err(NetError::Interrupted);
    }
    let remote = client.eff_finish(send.sent.clone())?;
    let metrics = EffMetrics::derive(p, &send, &usage, &remote);
    Ok(EffResult {
        params: p.clone(),
        repeat: 0,
        send,
        sender: usage,
        remote,
        metrics,
    })
}

/// One transport's repeats reduced to medians.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportSummary {
    /// The transport.
    pub transport: Option<Transport>,
    /// How the receive path was set up (from the first repeat).
    pub detail: String,
    /// TCP: the sender's congestion control (from the first repeat).
    #[serde(default)]
    pub tcp_congestion: Option<String>,
    /// Repeats measured.
    pub repeats: usize,
    /// Median Gb/s.
    #[serde(deserialize_with = "nan")]
    pub gbps: f64,
    /// (max - min) / median of Gb/s over the repeats.
    #[serde(deserialize_with = "nan")]
    pub gbps_spread: f64,
    /// Median loss fraction.
    #[serde(deserialize_with = "nan")]
    pub loss: f64,
    /// Median sending-thread CPU s/GB (user + system).
    #[serde(deserialize_with = "nan")]
    pub send_cpu: f64,
    /// Median receiving-thread CPU s/GB (user + system).
    #[serde(deserialize_with = "nan")]
    pub recv_cpu: f64,
    /// (max - min) / median of the receiving thread's CPU s/GB.
    #[serde(deserialize_with = "nan")]
    pub recv_cpu_spread: f64,
    /// Median receiving-thread user and system s/GB.
    #[serde(deserialize_with = "nan")]
    pub recv_user: f64,
    /// See `recv_user`.
    #[serde(deserialize_with = "nan")]
    pub recv_system: f64,
    /// Median sending-thread user and system s/GB.
    #[serde(deserialize_with = "nan")]
    pub send_user: f64,
    /// See `send_user`.
    #[serde(deserialize_with = "nan")]
    pub send_system: f64,
    /// Median host softirq s/GB (machine-wide).
    #[serde(deserialize_with = "nan")]
    pub host_softirq: f64,
    /// Median host busy (user + system + softirq) s/GB (machine-wide).
    #[serde(deserialize_with = "nan")]
    pub host_busy: f64,
    /// GB received per receiving-thread CPU second, relative to the best transport of the series (1 = best).
    #[serde(deserialize_with = "nan")]
    pub recv_efficiency: f64,
    /// GB moved per CPU second of both threads, relative to the best (1 = best).
    #[serde(deserialize_with = "nan")]
    pub both_efficiency: f64,
    /// Median J/GB where RAPL was readable.
    pub joules_per_gb: Option<f64>,
    /// Median Gb/s per Watt where RAPL was readable.
    pub gbps_per_watt: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// 1/x, or NaN when x is not a positive figure (CPU time below the tick resolution of a short test).
fn inverse(x: f64) -> f64 {
    if x > 0.0 && x.is_finite() {
        1.0 / x
    } else {
        f64::NAN
    }
}

fn spread(v: &[f64]) -> f64 {
    let m = median(v.to_vec());
    let max = v
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NAN, f64::max);
    let min = v
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NAN, f64::min);
    if m > 0.0 {
        (max - min) / m
    } else {
        f64::NAN
    }
}

/// Reduces `runs` to one summary per transport (in [`Transport::ALL`] order) with efficiencies relative
/// to the best transport.
pub fn summarise(runs: &[EffResult]) -> Vec<TransportSummary> {
    let mut out = Vec::new();
    for t in Transport::ALL {
        let mine: Vec<&EffResult> = runs.iter().filter(|r| r.params.setup.transport == t).collect();
        if mine.is_empty() {
            continue;
        }
        let col =
            |f: &dyn Fn(&EffMetrics) -> f64| -> Vec<f64> { mine.iter().map(|r| f(&r.metrics)).collect() };
        let opt = |f: &dyn Fn(&EffMetrics) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = mine.iter().filter_map(|r| f(&r.metrics)).collect();
            (!v.is_empty()).then(|| median(v))
        };
        let gbps = col(&|m| m.gbps);
        let recv = col(&|m| m.recv_cpu());
        out.push(TransportSummary {
            transport: Some(t),
            detail: mine[0].remote.detail.clone(),
            tcp_congestion: mine[0].send.tcp_congestion.clone(),
            repeats: mine.len(),
            gbps: median(gbps.clone()),
            gbps_spread: spread(&gbps),
            loss: median(col(&|m| m.loss)),
            send_cpu: median(col(&|m| m.send_cpu_s_per_gb.0 + m.send_cpu_s_per_gb.1)),
            recv_cpu: median(recv.clone()),
            recv_cpu_spread: spread(&recv),
            recv_user: median(col(&|m| m.recv_cpu_s_per_gb.0)),
            recv_system: median(col(&|m| m.recv_cpu_s_per_gb.1)),
            send_user: median(col(&|m| m.send_cpu_s_per_gb.0)),
            send_system: median(col(&|m| m.send_cpu_s_per_gb.1)),
            host_softirq: median(col(&|m| m.host_cpu_s_per_gb.2)),
            host_busy: median(col(&|m| {
                m.host_cpu_s_per_gb.0 + m.host_cpu_s_per_gb.1 + m.host_cpu_s_per_gb.2
            })),
            recv_efficiency: inverse(median(recv)),
            both_efficiency: inverse(median(col(&|m| m.both_cpu_s_per_gb()))),
            joules_per_gb: opt(&|m| m.joules_per_gb),
            gbps_per_watt: opt(&|m| m.gbps_per_watt),
        });
    }
    let best_recv = out
        .iter()
        .map(|s| s.recv_efficiency)
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    let best_both = out
        .iter()
        .map(|s| s.both_efficiency)
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    for s in &mut out {
        s.recv_efficiency /= best_recv;
        s.both_efficiency /= best_both;
    }
    out
}

/// The order transports run in for repeat `r`: as given on even repeats, reversed on odd ones.
pub fn order(transports: &[Transport], r: u32) -> Vec<Transport> {
    let mut v = transports.to_vec();
    if r % 2 == 1 {
        v.reverse();
    }
    v
}

/// A whole series: every transport, every repeat, and their summaries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EffReport {
    /// When the series started (UTC, RFC 3339).
    pub date: String,
    /// The responder's software.
    pub responder: String,
    /// Free-form label (e.g. the path emulator's setting).
    pub label: Option<String>,
    /// Random loss of the path the user says the traffic crossed (fraction), for loss sweeps.
    pub path_loss: Option<f64>,
    /// Transports not measured and why (not offered at the responder).
    pub unavailable: Vec<Availability>,
    /// Every test.
    pub runs: Vec<EffResult>,
    /// Medians per transport.
    pub summary: Vec<TransportSummary>,
}

/// Progress of a series.
#[derive(Debug, Clone)]
pub enum EffEvent<'a> {
    /// A test is about to start.
    Starting {
        /// Transport.
        transport: Transport,
        /// Repeat number.
        repeat: u32,
    },
    /// A test finished.
    Finished(&'a EffResult),
    /// A test failed, or the responder refused it; the series goes on.
    Failed {
        /// Transport.
        transport: Transport,
        /// Repeat number.
        repeat: u32,
        /// Why.
        error: String,
        /// The responder refused the setup (the transport is then listed as unavailable with the reason,
        /// as one it does not offer), rather than a test that started and failed.
        refused: bool,
    },
}

/// Runs `base` (its transport replaced) over every transport of `transports` the responder offers,
/// `repeats` times in alternating order. Tests that fail are reported through `on_event` and left out.
pub fn run_series(
    client: &mut Client,
    base: &EffParams,
    transports: &[Transport],
    repeats: u32,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(EffEvent),
) -> Result<EffReport, NetError> {
    let offered = client.eff_transports()?;
    let mut report = EffReport {
        date: vlbiflow_formats::time::UtcTime::now().to_iso8601(),
        responder: client.remote_software().to_owned(),
        ..Default::default()
    };
    let mut usable = Vec::new();
    for &t in transports {
        match offered.iter().find(|a| a.transport == t) {
            Some(Availability {
                unavailable: None, ..
            }) => usable.push(t),
            Some(a) => report.unavailable.push(a.clone()),
            None => report.unavailable.push(Availability {
                transport: t,
                unavailable: Some("the responder does not know it (older version)".into()),
            }),
        }
    }
    for r in 0..repeats {
        for t in order(&usable, r) {
            if report.unavailable.iter().any(|a| a.transport == t) {
                continue;
            }
            if stop.load(Ordering::Relaxed) {
                report.summary = summarise(&report.runs);
                return Ok(report);
            }
            on_event(EffEvent::Starting {
                transport: t,
                repeat: r,
            });
            let mut p = base.clone();
            p.setup.transport = t;
            match run_test(client, &p, stop) {
                Ok(mut res) => {
                    res.repeat = r;
                    on_event(EffEvent::Finished(&res));
                    report.runs.push(res);
                }
                Err(NetError::Interrupted) => break,
                Err(e) => {
                    let refused = matches!(&e, NetError::Proto(ProtoError::Remote(_)));
                    if let NetError::Proto(ProtoError::Remote(why)) = &e {
                        // Refused by the responder (e.g. a size the path cannot take): said once, not retried.
                        if !report.unavailable.iter().any(|a| a.transport == t) {
                            report.unavailable.push(Availability {
                                transport: t,
                                unavailable: Some(why.clone()),
                            });
                        }
                    }
                    on_event(EffEvent::Failed {
                        transport: t,
                        repeat: r,
                        error: e.to_string(),
                        refused,
                    });
                    // A refusal or failure the responder reported leaves the session usable; a broken or
                    // confused control connection does not.
                    if matches!(&e, NetError::Proto(p) if !matches!(p, ProtoError::Remote(_))) {
                        return Err(e);
                    }
                }
            }
        }
    }
    report.summary = summarise(&report.runs);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::EffParams;
    use vlbiflow_net::eff::EffSetup;
    use vlbiflow_net::host::ProcessCpu;

    fn run(t: Transport, gbps: f64, recv_cpu: f64) -> EffResult {
        let setup = EffSetup {
            transport: t,
            streams: 1,
            size: 8232,
            duration_ms: 1000,
            recv_buffer: None,
        };
        EffResult {
            params: EffParams {
                setup,
                rate_bps: None,
                gso: 0,
                send_buffer: 1 << 20,
                tcp_congestion: None,
            },
            repeat: 0,
            send: SendOutcome::default(),
            sender: EndUsage::default(),
            remote: EffRemote::default(),
            metrics: EffMetrics {
                gbps,
                recv_cpu_s_per_gb: (recv_cpu / 2.0, recv_cpu / 2.0),
                send_cpu_s_per_gb: (0.1, 0.1),
                ..Default::default()
            },
        }
    }

    #[test]
    fn summaries_take_medians_and_normalise_to_the_best() {
        let runs = vec![
            run(Transport::Udp, 5.0, 0.4),
            run(Transport::Udp, 6.0, 0.5),
            run(Transport::Udp, 5.5, 0.6),
            run(Transport::UdpGro, 8.0, 0.25),
            run(Transport::Tcp, 4.0, 1.0),
        ];
        let s = summarise(&runs);
        assert_eq!(s.len(), 3);
        let udp = &s[0];
        assert_eq!((udp.transport, udp.repeats), (Some(Transport::Udp), 3));
        assert!((udp.gbps - 5.5).abs() < 1e-12);
        assert!((udp.gbps_spread - 1.0 / 5.5).abs() < 1e-12);
        assert!((udp.recv_cpu - 0.5).abs() < 1e-12);
        assert!((s[1].recv_efficiency - 1.0).abs() < 1e-12);
        assert!((udp.recv_efficiency - 0.5).abs() < 1e-12);
        assert!((s[2].recv_efficiency - 0.25).abs() < 1e-12);
        assert!(s.iter().all(|x| x.joules_per_gb.is_none()));
    }

    #[test]
    fn order_alternates() {
        let t = [Transport::Udp, Transport::Uring, Transport::Tcp];
        assert_eq!(order(&t, 0), t.to_vec());
        assert_eq!(
            order(&t, 1),
            vec![Transport::Tcp, Transport::Uring, Transport::Udp]
        );
        assert_eq!(order(&t, 2), t.to_vec());
    }

    #[test]
    fn metrics_count_loss_and_per_gb_costs() {
        let p = run(Transport::Udp, 0.0, 0.0).params;
        let send = SendOutcome {
            sent: vec![600, 400],
            bytes: 1000 * 8232,
            active_s: 1.0,
            thread: ProcessCpu {
                user_s: 0.01,
                system_s: 0.03,
            },
            tcp_congestion: None,
        };
        let mut remote = EffRemote {
            received: 990,
            bytes: 990 * 8232,
            active_s: 0.5,
            ..Default::default()
        };
        remote.usage.thread = ProcessCpu {
            user_s: 0.02,
            system_s: 0.02,
        };
        remote.usage.boot_id = "b".into();
        remote.usage.interval_s = 1.0;
        let sender = EndUsage {
            boot_id: "b".into(),
            ..Default::default()
        };
        let m = EffMetrics::derive(&p, &send, &sender, &remote);
        assert!((m.loss - 0.01).abs() < 1e-12);
        assert!(m.same_host);
        let gb = 990.0 * 8232.0 / 1e9;
        assert!((m.gbps - gb * 8.0 / 0.5).abs() < 1e-9);
        assert!((m.recv_cpu() - 0.04 / gb).abs() < 1e-9);
        assert!((m.send_cpu_s_per_gb.1 - 0.03 / (8232.0 * 1000.0 / 1e9)).abs() < 1e-9);
        assert_eq!(m.joules_per_gb, None);
    }

    #[test]
    fn setup_checks_name_the_field() {
        let mut s = run(Transport::Udp, 0.0, 0.0).params;
        s.setup.streams = 0;
        assert!(s.validate().unwrap_err().contains("streams"));
        s.setup.streams = 2;
        s.setup.size = 8;
        assert!(s.validate().unwrap_err().contains("size"));
        s.setup.size = 8232;
        s.gso = 16;
        assert!(s.validate().unwrap_err().contains("65507"));
        s.gso = 3;
        assert!(s.validate().unwrap_err().contains("divide"));
        s.gso = 4;
        s.validate().unwrap();
    }
}
