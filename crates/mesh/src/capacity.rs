//! `vlbiflow net capacity`: probes a path with back-to-back packet pairs and trains against a
//! vlbiflow responder (each probe is a short UDP test of the responder's protocol, sent as fast as
//! the sender can, one datagram per packet, no segmentation offload), collects the arrival spread the
//! responder's kernel time stamps give, and hands the probes to [`crate::dispersion`].

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde::Serialize;
use vlbiflow_net::{BwParams, Client, NetError};

use crate::dispersion::{estimate, Estimate, Probe};

/// How to probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityParams {
    /// UDP payload bytes per packet.
    pub size: usize,
    /// Packet pairs to send.
    pub pairs: usize,
    /// The longest train, packets (trains of 4, 8, ... up to it).
    pub train: usize,
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
            train: 512,
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
    /// Every probe that arrived complete.
    pub probes: Vec<Probe>,
    /// Probes sent.
    pub sent: usize,
    /// Probes with a loss (left out).
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
    let mut lengths = vec![2usize; p.pairs];
    let mut n = 4;
    let mut train_lengths = Vec::new();
    while n <= p.train.max(4) {
        train_lengths.push(n);
        n *= 2;
    }
    if *train_lengths.last().unwrap_or(&0) != p.train && p.train > 4 {
        train_lengths.push(p.train);
    }
    for &n in &train_lengths {
        lengths.extend(std::iter::repeat_n(n, p.trains_per_length));
    }
    progress(&format!(
        "{} pairs and trains of {:?} packets of {} bytes",
        p.pairs, train_lengths, p.size
    ));
    let mut probes = Vec::new();
    let mut incomplete = 0;
    let mut last_span = Duration::ZERO;
    for (i, &n) in lengths.iter().enumerate() {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(CapacityError::Stopped);
        }
        if i == p.pairs {
            progress("pairs done; trains");
        }
        // Idle before each probe: at least the gap and twice the last probe's spread, so a bucket
        // drained by the last train has refilled.
        std::thread::sleep(p.gap.max(last_span * 2).min(Duration::from_secs(1)));
        let params = BwParams {
            gso: false,
            batch: 64,
            send_buffer: Some((n * (p.size + 64)).max(1 << 20)),
            recv_buffer: Some((n * (p.size + 512)).max(1 << 20)),
            ..BwParams::new(p.size, n as u64, 0.0)
        };
        let r = client.bw(&params, stop)?;
        let a = &r.remote.arrivals;
        if a.received as usize != n || a.lost > 0 {
            incomplete += 1;
            continue;
        }
        let spread = a.last_recv_ns.saturating_sub(a.first_recv_ns);
        last_span = Duration::from_nanos(spread);
        probes.push(Probe {
            packets: n,
            bytes: p.size + 28,
            spread_ns: spread,
            delay_ns: a.delay.as_ref().map(|d| d.offset_ns),
        });
    }
    let est = estimate(&probes).map_err(CapacityError::Analysis)?;
    Ok(CapacityResult {
        estimate: est,
        sent: lengths.len(),
        incomplete,
        probes,
        params: p.clone(),
        duration_s: t0.elapsed().as_secs_f64(),
    })
}
