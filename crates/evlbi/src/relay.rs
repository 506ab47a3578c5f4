//! The relay (jive5ab's net2net): receive a `udps` or plain VDIF stream and forward it to one or more
//! destinations, each with its own protocol, thread selection, PSN and pacing ([`crate::forward`]).
//!
//! Without a reorder window frames go on in the order they arrive; with `--reorder` they first pass a
//! [`Reorderer`] (window and deadline as on the correlator side) and leave in stream order. Either way
//! each destination numbers a frame by its position in the stream (the input PSN, or the VDIF time and
//! thread; [`vlbiflow_realtime::position`]), so a frame lost upstream, or not in time through the
//! reorderer, leaves a hole at its own place that the next receiver fills (with `send_fill` the fill
//! frame itself is forwarded instead, stamped with its time when keys are VDIF times).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vlbiflow_formats::psn;
use vlbiflow_formats::psn::PSN_LEN;
use vlbiflow_formats::FrameKind;
use vlbiflow_realtime::reorder::{FillMode, KeyMode, OutputKind, ReorderConfig, ReorderCounters, Reorderer};
use vlbiflow_udp::recv::BatchReceiver;
use vlbiflow_udp::socket::{open_udp, UdpConfig};

use crate::dest::DestSpec;
use crate::forward::{DestStatus, ForwardSource, ForwardTap, Forwarder};
use crate::receive::{is_frame, InputProtocol, KeyChoice};

/// Reordering in the relay.
#[derive(Debug, Clone)]
pub struct RelayReorder {
    pub key: KeyChoice,
    pub window: usize,
    pub deadline: Duration,
    /// With VDIF-time keys: output thread order and frame rate.
    pub threads: Vec<u16>,
    pub frame_rate: Option<u32>,
    /// Forward fill frames instead of leaving gaps in the PSN.
    pub send_fill: bool,
}

/// A relay's configuration.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub listen: SocketAddr,
    pub protocol: InputProtocol,
    pub kind: FrameKind,
    pub frame_len: usize,
    pub dests: Vec<DestSpec>,
    pub reorder: Option<RelayReorder>,
    pub duration: Option<Duration>,
    pub idle: Option<Duration>,
    pub recv_buffer: usize,
    /// Sources to accept (`--from`); datagrams from others are dropped and counted as
    /// `wrong_source`. Empty: any source.
    pub from: vlbiflow_guard::net::AllowList,
}

impl RelayConfig {
    pub fn new(listen: SocketAddr, dests: Vec<DestSpec>) -> Self {
        RelayConfig {
            listen,
            protocol: InputProtocol::Udps,
            kind: FrameKind::Vdif,
            frame_len: 8224,
            dests,
            reorder: None,
            duration: None,
            idle: None,
            recv_buffer: 256 << 20,
            from: Default::default(),
        }
    }
}

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("{0}")]
    Config(String),
    #[error("cannot receive on {0}: {1}")]
    Socket(SocketAddr, String),
    #[error(transparent)]
    Forward(#[from] crate::forward::ForwardError),
    #[error("receive on {0}: {1}")]
    Recv(SocketAddr, std::io::Error),
}

/// A relay's counts, live and final.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RelayStatus {
    pub listen: String,
    pub protocol: String,
    pub datagrams: u64,
    pub bytes: u64,
    /// Datagrams that are not frames of the stream (wrong size, no header).
    pub rejected: u64,
    /// Datagrams from sources outside `--from`: dropped.
    pub wrong_source: u64,
    /// Frames forwarded (offered to the destinations), fill included when it is sent.
    pub frames: u64,
    pub kernel_drops: u64,
    /// With a reorder window.
    pub reorder: Option<ReorderCounters>,
    pub destinations: Vec<DestStatus>,
    pub elapsed_s: f64,
    pub stopped: Option<String>,
}

/// Runs the relay until `stop`, the duration or the idle timeout; `progress` once when listening
/// (`elapsed_s` 0), then about once a second.
pub fn run_relay(
    config: &RelayConfig,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&RelayStatus),
) -> Result<RelayStatus, RelayError> {
    if config.dests.is_empty() {
        return Err(RelayError::Config("no destination (--to)".into()));
    }
    let mut reorderer = match &config.reorder {
        None => None,
        Some(r) => {
            let key = match (r.key, config.protocol) {
                (KeyChoice::Psn, InputProtocol::Udps) => KeyMode::Psn,
                (KeyChoice::Psn, InputProtocol::Vdif) => {
                    return Err(RelayError::Config(
                        "plain VDIF carries no PSN: reorder by VDIF time (--key vdif-time)".into(),
                    ))
                }
                (KeyChoice::VdifTime, _) => KeyMode::VdifTime {
                    frame_rate: r.frame_rate.ok_or_else(|| {
                        RelayError::Config("reordering by VDIF time needs --frame-rate".into())
                    })?,
                    threads: r.threads.clone(),
                },
            };
            let stamped = r.send_fill && matches!(key, KeyMode::VdifTime { .. });
            let mut c = ReorderConfig::new(config.kind, config.frame_len, key, r.window, r.deadline);
            // Forwarded fill keyed by time must say which time it stands for.
            c.fill = if stamped {
                FillMode::Stamped
            } else {
                FillMode::default()
            };
            Some(Reorderer::new(c).map_err(|e| RelayError::Config(e.to_string()))?)
        }
    };
    let mut udp = UdpConfig::receiver(config.listen);
    udp.recv_buffer = Some(config.recv_buffer);
    udp.rxq_ovfl = true;
    udp.nonblocking = true;
    let (sock, report) = open_udp(&udp).map_err(|e| RelayError::Socket(config.listen, e.to_string()))?;
    let listen = report.local;
    // Positions come from the input PSN when the frames leave with it, from VDIF time otherwise.
    let by_psn = config.protocol == InputProtocol::Udps
        && config.reorder.as_ref().is_none_or(|r| r.key == KeyChoice::Psn);
    let source = ForwardSource {
        kind: config.kind,
        psn: by_psn,
        frame_rate: config.reorder.as_ref().and_then(|r| r.frame_rate),
        threads: config
            .reorder
            .as_ref()
            .filter(|r| r.key == KeyChoice::VdifTime)
            .map(|r| r.threads.clone()),
    };
    let (forwarder, mut tap) = Forwarder::start(config.dests.clone(), config.frame_len, &source)?;
    let send_fill = config.reorder.as_ref().is_some_and(|r| r.send_fill);

    let prefix = match config.protocol {
        InputProtocol::Udps => PSN_LEN,
        InputProtocol::Vdif => 0,
    };
    let slot = prefix + config.frame_len + 1;
    let mut rx = BatchReceiver::new(64).with_source(!config.from.is_empty());
    let mut bufs = vec![0u8; rx.capacity() * slot];
    let mut st = RelayStatus {
        listen: listen.to_string(),
        protocol: format!("{:?}", config.protocol).to_lowercase(),
        ..Default::default()
    };
    progress(&st);
    let start = Instant::now();
    let end = config.duration.map(|d| start + d);
    let mut last_datagram: Option<Instant> = None;
    let mut next_progress = start + Duration::from_secs(1);
    let stopped: String = loop {
        if stop.load(Ordering::Relaxed) {
            break "stopped".into();
        }
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break "duration reached".into();
        }
        if let (Some(idle), Some(last)) = (config.idle, last_datagram) {
            if now.duration_since(last) >= idle {
                break format!("nothing received for {:.1} s", idle.as_secs_f64());
            }
        }
        let mut wait = Duration::from_millis(100);
        if let Some(t) = reorderer.as_ref().and_then(Reorderer::poll_timeout) {
            wait = wait.min(t.saturating_duration_since(now));
        }
        if let Some(e) = end {
            wait = wait.min(e.saturating_duration_since(now));
        }
        let batch = rx
            .recv(&sock, bufs.chunks_exact_mut(slot), wait)
            .map_err(|e| RelayError::Recv(listen, e))?;
        let now = Instant::now();
        st.kernel_drops = batch.kernel_drops();
        let metas = batch.messages();
        if !metas.is_empty() {
            last_datagram = Some(now);
        }
        for (i, m) in metas.iter().enumerate() {
            st.datagrams += 1;
            st.bytes += m.wire_len as u64;
            if !config.from.is_empty() && !m.source.is_some_and(|a| config.from.allows(a.ip())) {
                st.wrong_source += 1;
                continue;
            }
            let d = &bufs[i * slot..i * slot + m.len];
            let frame = d.get(prefix..).unwrap_or(&[]);
            if m.wire_len != prefix + config.frame_len || !is_frame(config.kind, frame) {
                st.rejected += 1;
                continue;
            }
            match &mut reorderer {
                None => {
                    let input_psn = (prefix > 0).then(|| psn::read_prefix(d)).flatten();
                    tap.offer(input_psn, frame);
                    st.frames += 1;
                }
                Some(r) => {
                    let key_psn = config.reorder.as_ref().is_some_and(|c| c.key == KeyChoice::Psn);
                    loop {
                        let pushed = if key_psn {
                            r.push_udps(now, d)
                        } else {
                            r.push_vdif(now, frame)
                        };
                        drain(r, now, &mut tap, &mut st, send_fill, by_psn);
                        if pushed.is_ok() {
                            break;
                        }
                    }
                }
            }
        }
        if let Some(r) = &mut reorderer {
            drain(r, now, &mut tap, &mut st, send_fill, by_psn);
        }
        tap.publish();
        if now >= next_progress {
            next_progress += Duration::from_secs(1);
            st.reorder = reorderer.as_ref().map(Reorderer::counters);
            st.destinations = forwarder.status();
            st.elapsed_s = start.elapsed().as_secs_f64();
            progress(&st);
        }
    };
    if let Some(r) = &mut reorderer {
        r.flush();
        drain(r, Instant::now(), &mut tap, &mut st, send_fill, by_psn);
    }
    tap.publish();
    drop(tap);
    st.reorder = reorderer.as_ref().map(Reorderer::counters);
    st.destinations = forwarder.finish(Duration::from_secs(2));
    st.elapsed_s = start.elapsed().as_secs_f64();
    st.stopped = Some(stopped);
    Ok(st)
}

/// Forwards what the reorderer has ready: real frames offered at their key (a PSN key is the frame's
/// input PSN), fill frames sent or left as holes.
fn drain(
    r: &mut Reorderer,
    now: Instant,
    tap: &mut ForwardTap,
    st: &mut RelayStatus,
    send_fill: bool,
    by_psn: bool,
) {
    while let Some(o) = r.poll_output(now) {
        if o.kind == OutputKind::Real || send_fill {
            tap.offer(by_psn.then_some(o.key), o.frame);
            st.frames += 1;
        }
    }
}
