//! `vlbiflow net capacity`: probes a path with back-to-back packet pairs and trains against a
//! vlbiflow responder (each probe is a short UDP test of the responder's protocol, sent as fast as
//! the sender can), collects every packet's kernel receive time stamp, send time and the time the
//! sender's kernel surely had it, and hands the probes to [`crate::dispersion`]. Trains double in
//! length (from 64 packets) until their tails settle on one rate and carry at least
//! [`CapacityParams::min_train_bytes`], so a shaper's burst is passed.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;
use vlbiflow_net::stats::Timeline;
use vlbiflow_net::{BwParams, Client, NetError};

use crate::dispersion::{
    estimate, fit_train, needs_longer, sender_bound, summarise_length, Estimate, Probe, TrainLength,
    TrainTimes,
};

/// How to probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityParams {
    /// UDP payload bytes per packet.
    pub size: usize,
    /// Packet pairs to send.
    pub pairs: usize,
    /// The longest train, packets (trains of 64, 128, ... up to it, as long as they have not settled).
    pub train: usize,
    /// Trains grow at least until they carry this many bytes (a shaper's bucket must be well
    /// inside them).
    pub min_train_bytes: usize,
    /// Send trains as GSO super-datagrams (several packets per send, cut by the kernel): a sender
    /// on a busy core keeps up with faster paths.
    pub gso: bool,
    /// Most packets per GSO super-datagram (0: as many as fit).
    pub gso_segments: usize,
    /// Trains per length.
    pub trains_per_length: usize,
    /// Idle time between probes (lets a token bucket refill), at least.
    pub gap: Duration,
}

impl Default for CapacityParams {
    fn default() -> Self {
        CapacityParams {
            size: 1472,
            pairs: 60,
            train: 8192,
            min_train_bytes: 1 << 20,
            gso: true,
            gso_segments: 0,
            trains_per_length: 3,
            gap: Duration::from_millis(20),
        }
    }
}

/// Everything one measurement found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityResult {
    /// The estimate.
    pub estimate: Estimate,
    /// Every pair that arrived complete.
    pub probes: Vec<Probe>,
    /// The trains, by length (shortest first), with what each said.
    pub trains: Vec<TrainLength>,
    /// Probes sent.
    pub sent: usize,
    /// Pairs with a loss (left out) and trains with a loss (their received packets analysed).
    pub incomplete: usize,
    /// Parameters.
    pub params: CapacityParams,
    /// Seconds it took.
    pub duration_s: f64,
}

/// Why a capacity measurement failed.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// A probe failed.
    #[error(transparent)]
    Net(#[from] NetError),
    /// The analysis found nothing.
    #[error("capacity: {0}")]
    Analysis(String),
    /// Stopped.
    #[error("capacity: stopped before the probes were done")]
    Stopped,
}

/// Sends the probes and estimates the capacity; `progress` hears one line per phase.
pub fn measure(
    client: &mut Client,
    p: &CapacityParams,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<CapacityResult, CapacityError> {
    let t0 = Instant::now();
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    progress(&format!("{} packet pairs of {} bytes", p.pairs, p.size));
    let mut probes = Vec::new();
    let mut incomplete = 0;
    let mut sent = 0;
    let mut last_span = Duration::ZERO;
    // Idle before each probe: at least the gap and twice the last probe's spread, so a bucket
    // drained by the last train has refilled.
    let idle = |last_span: Duration| std::thread::sleep(p.gap.max(last_span * 2).min(Duration::from_secs(1)));
    for _ in 0..p.pairs {
        if stopped() {
            return Err(CapacityError::Stopped);
        }
        idle(last_span);
        let params = BwParams {
            gso: false,
            batch: 64,
            send_buffer: Some(1 << 20),
            recv_buffer: Some(1 << 20),
            ..BwParams::new(p.size, 2, 0.0)
        };
        let r = client.bw(&params, stop)?;
        sent += 1;
        let a = &r.remote.arrivals;
        if a.received != 2 || a.lost > 0 {
            incomplete += 1;
            continue;
        }
        let spread = a.last_recv_ns.saturating_sub(a.first_recv_ns);
        last_span = Duration::from_nanos(spread);
        probes.push(Probe {
            packets: 2,
            bytes: p.size + 28,
            spread_ns: spread,
            delay_ns: a.delay.as_ref().map(|d| d.offset_ns),
        });
    }
    let mut lengths: Vec<TrainLength> = Vec::new();
    let mut n = 64usize.min(p.train);
    let bytes = p.size + 28;
    loop {
        if !needs_longer(&lengths, bytes, p.min_train_bytes) {
            break;
        }
        let mut fits = Vec::new();
        let mut lost = 0u64;
        for _ in 0..p.trains_per_length {
            if stopped() {
                return Err(CapacityError::Stopped);
            }
            idle(last_span);
            let params = BwParams {
                gso: p.gso,
                gso_segments: p.gso_segments,
                batch: 64,
                timeline: true,
                send_buffer: Some((n * (p.size + 64)).max(1 << 20)),
                recv_buffer: Some((n * (p.size + 512)).max(1 << 20)),
                ..BwParams::new(p.size, n as u64, 0.0)
            };
            let r = client.bw(&params, stop)?;
            sent += 1;
            let a = &r.remote.arrivals;
            last_span = Duration::from_nanos(a.last_recv_ns.saturating_sub(a.first_recv_ns));
            if a.lost > 0 {
                incomplete += 1;
                lost += a.lost;
            }
            let Some(t) = r.remote.timeline.as_ref() else {
                return Err(CapacityError::Analysis(format!(
                    "the responder ({}) does not return packet times; run the same vlbiflow version at both ends",
                    client.remote_software()
                )));
            };
            fits.push(fit_train(&train_times(t, &r.local.handed, bytes)));
        }
        let l = summarise_length(n, fits);
        progress(&format!(
            "trains of {n}: tail {} ({}){}",
            l.tail_mbps
                .map(|r| format!("{r:.1} Mb/s"))
                .unwrap_or_else(|| "-".into()),
            if l.settled { "settled" } else { "not settled" },
            if l.sender_limited > 0 {
                format!(", {} left out: sender behind", l.sender_limited)
            } else {
                String::new()
            }
        ));
        lengths.push(l);
        // Longer trains would only overflow the shaper's queue further: stop where it overflowed
        // (the received packets of these trains still left the bottleneck back to back).
        let heavy_loss = lost as f64 > 0.05 * (n * p.trains_per_length) as f64;
        if sender_bound(&lengths, bytes, p.min_train_bytes) {
            progress("two lengths of trains all sender-limited: not growing further");
            break;
        }
        if n >= p.train || heavy_loss {
            if heavy_loss {
                progress(&format!("trains of {n} lost {lost} packets: not growing further"));
            }
            break;
        }
        n = (n * 2).min(p.train);
    }
    let est = estimate(&probes, &lengths).map_err(CapacityError::Analysis)?;
    Ok(CapacityResult {
        estimate: est,
        sent,
        incomplete,
        probes,
        trains: lengths,
        params: p.clone(),
        duration_s: t0.elapsed().as_secs_f64(),
    })
}

/// The received packets of a train as [`TrainTimes`]: send and hand-over times on the sender's
/// clock (relative to the timeline's send base), receive times on the receiver's.
pub fn train_times(t: &Timeline, handed: &[(u64, u64)], bytes: usize) -> TrainTimes {
    times_of_received(&t.send_ns, &t.recv_ns, handed, t.send_base_ns as i64, bytes)
}

/// The packets of a train that arrived (`recv_ns[i] >= 0`) as [`TrainTimes`]. `handed` lists
/// (first packet, hand-over time) of each send call in absolute ns; `handed_base` is subtracted so they
/// are on the same scale as `send_ns`. Without a note of the send call (an older client), the write
/// time stands in.
pub(crate) fn times_of_received(
    send_ns: &[i64],
    recv_ns: &[i64],
    handed: &[(u64, u64)],
    handed_base: i64,
    bytes: usize,
) -> TrainTimes {
    let mut out = TrainTimes {
        bytes,
        send_ns: Vec::new(),
        handed_ns: Vec::new(),
        recv_ns: Vec::new(),
    };
    let mut h = 0;
    for (i, (&s, &r)) in send_ns.iter().zip(recv_ns).enumerate() {
        while h < handed.len() && handed[h].0 <= i as u64 {
            h += 1;
        }
        if r < 0 {
            continue;
        }
        let hand = handed.get(h).map(|&(_, ns)| ns as i64 - handed_base).unwrap_or(s);
        out.send_ns.push(s);
        out.handed_ns.push(hand.max(s));
        out.recv_ns.push(r);
    }
    out
}
