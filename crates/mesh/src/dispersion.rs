//! Bottleneck capacity from packet dispersion (sans-IO analysis; the probing comes later).
//!
//! Input: back-to-back packet pairs and trains, each reported as its length, packet size and the
//! spread of its arrivals (last minus first), optionally with the one-way delay of its first packet.
//! Following Trace-Rate and pathrate:
//! - noise filtering: pairs whose first packet queued (one-way delay well above the minimum) met
//!   cross traffic and are dropped, as are empty or implausible spreads;
//! - mode analysis: the pair estimates L/dispersion are histogrammed on a logarithmic scale and the
//!   local modes found, each with its share of the estimates (figure of merit);
//! - trains give the asymptotic dispersion rate (ADR) from the longest trains, which cross traffic
//!   can only lower; pathrate's capacity is the strongest mode at or above the ADR;
//! - token-bucket shapers (tbf, htb, policers) let a pair through at the line rate while the bucket
//!   holds tokens, so pairs measure the peak rate. Their signature is a train spread that grows
//!   linearly with the train length but with a negative intercept: spread(n) = ((n-1) L - B) / R.
//!   When that fits, the capacity reported is the sustained rate R, with the burst B and the peak.

use serde::Serialize;

/// One probe: a pair (`packets` = 2) or a train.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Probe {
    /// Packets in the probe (all arrived).
    pub packets: usize,
    /// Bytes per packet as the IP layer carries them (payload + 28 for UDP over IPv4).
    pub bytes: usize,
    /// Last arrival minus first arrival, ns.
    pub spread_ns: u64,
    /// One-way delay of the first packet on any fixed offset, ns (for the noise filter).
    pub delay_ns: Option<i64>,
}

impl Probe {
    /// The rate this probe's spread implies, Mb/s.
    pub fn rate_mbps(&self) -> Option<f64> {
        (self.spread_ns > 0 && self.packets >= 2)
            .then(|| 8.0 * (self.bytes * (self.packets - 1)) as f64 / self.spread_ns as f64 * 1e3)
    }
}

/// A local mode of the pair estimates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mode {
    /// Rate at the mode, Mb/s (mean of the estimates in its window).
    pub mbps: f64,
    /// Estimates in its window.
    pub count: usize,
    /// Share of all kept estimates in its window.
    pub merit: f64,
}

/// A token-bucket shaper seen on the path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shaper {
    /// Sustained (token) rate, Mb/s.
    pub rate_mbps: f64,
    /// Bucket size, bytes (IP layer).
    pub burst_bytes: f64,
    /// Rate while the bucket holds tokens (the pairs' mode), Mb/s.
    pub peak_mbps: f64,
    /// Goodness of the linear fit of train spread against length.
    pub r2: f64,
}

/// The estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Bottleneck capacity (IP layer), Mb/s.
    pub capacity_mbps: f64,
    /// How it was found.
    pub method: &'static str,
    /// Modes of the pair estimates, strongest first.
    pub modes: Vec<Mode>,
    /// Asymptotic dispersion rate of the longest trains, Mb/s.
    pub adr_mbps: Option<f64>,
    /// A token-bucket shaper, when its signature fits.
    pub shaper: Option<Shaper>,
    /// Pairs kept after filtering.
    pub pairs_kept: usize,
    /// Pairs dropped by the noise filter.
    pub pairs_dropped: usize,
}

/// Relative width of a histogram bin (log scale).
const BIN: f64 = 0.02;

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// Local modes of `rates` (Mb/s), strongest first: the estimates are sorted and split where two
/// neighbours lie more than two bins (2 % each) apart; in each cluster the most populated bin and
/// its neighbours give the mode.
pub fn modes(rates: &[f64]) -> Vec<Mode> {
    let total = rates.len();
    let mut v: Vec<f64> = rates
        .iter()
        .copied()
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let bin = |r: f64| (r.ln() / (1.0 + BIN).ln()).floor() as i64;
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i + 1;
        while j < v.len() && v[j] / v[j - 1] - 1.0 <= 2.0 * BIN {
            j += 1;
        }
        let cluster = &v[i..j];
        if cluster.len() >= 2.max(total / 50) {
            let mut counts: std::collections::BTreeMap<i64, usize> = std::collections::BTreeMap::new();
            for &r in cluster {
                *counts.entry(bin(r)).or_default() += 1;
            }
            let top = counts
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(b, _)| *b)
                .expect("non-empty cluster");
            let near: Vec<f64> = cluster
                .iter()
                .copied()
                .filter(|&r| (bin(r) - top).abs() <= 1)
                .collect();
            out.push(Mode {
                mbps: near.iter().sum::<f64>() / near.len() as f64,
                count: cluster.len(),
                merit: cluster.len() as f64 / total.max(1) as f64,
            });
        }
        i = j;
    }
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.mbps.total_cmp(&b.mbps)));
    out
}

/// Least-squares line y = a + s x with r².
fn fit(xy: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    let n = xy.len() as f64;
    if xy.len() < 3 {
        return None;
    }
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let syy: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    let s = sxy / sxx;
    Some((my - s * mx, s, sxy * sxy / (sxx * syy)))
}

/// Estimates the capacity from pairs and trains.
pub fn estimate(probes: &[Probe]) -> Result<Estimate, String> {
    let pairs: Vec<&Probe> = probes
        .iter()
        .filter(|p| p.packets == 2 && p.spread_ns > 0)
        .collect();
    if pairs.len() < 10 {
        return Err(format!(
            "only {} usable packet pairs (at least 10 needed): the path loses or reorders too much",
            pairs.len()
        ));
    }
    // Noise filter: keep pairs whose first packet saw little queueing.
    let mut delays: Vec<f64> = pairs
        .iter()
        .filter_map(|p| p.delay_ns)
        .map(|d| d as f64)
        .collect();
    let kept: Vec<&Probe> = match median(&mut delays) {
        Some(med) if delays.len() == pairs.len() => {
            let min = delays[0];
            let limit = min + ((med - min) * 2.0).max(20_000.0);
            pairs
                .iter()
                .copied()
                .filter(|p| p.delay_ns.is_some_and(|d| (d as f64) <= limit))
                .collect()
        }
        _ => pairs.clone(),
    };
    let rates: Vec<f64> = kept.iter().filter_map(|p| p.rate_mbps()).collect();
    let modes = modes(&rates);
    let strongest = modes
        .first()
        .ok_or("no mode in the packet-pair estimates")?
        .clone();
    // Trains: the median spread per length.
    let mut by_len: std::collections::BTreeMap<usize, (usize, Vec<f64>)> = std::collections::BTreeMap::new();
    for p in probes.iter().filter(|p| p.packets > 2 && p.spread_ns > 0) {
        let e = by_len.entry(p.packets).or_insert((p.bytes, Vec::new()));
        e.1.push(p.spread_ns as f64);
    }
    let spreads: Vec<(usize, usize, f64)> = by_len
        .into_iter()
        .filter_map(|(n, (bytes, mut v))| median(&mut v).map(|m| (n, bytes, m)))
        .collect();
    let adr = spreads
        .last()
        .map(|&(n, bytes, s)| 8.0 * (bytes * (n - 1)) as f64 / s * 1e3);
    // Token bucket: a line through the longer half of the lengths with a negative intercept.
    let shaper = (|| {
        let &(n_max, bytes, s_max) = spreads.last()?;
        // The longest half of the lengths, at least three: past the bucket when it is drained.
        let take = 3.max(spreads.len() / 2).min(spreads.len());
        let upper: Vec<(f64, f64)> = spreads[spreads.len() - take..]
            .iter()
            .map(|&(n, _, s)| ((n - 1) as f64, s))
            .collect();
        let (a, slope, r2) = fit(&upper)?;
        let rate = 8.0 * bytes as f64 / slope * 1e3;
        let burst = -a / slope * bytes as f64;
        (slope > 0.0 && r2 > 0.98 && -a > 0.05 * s_max && strongest.mbps > 1.3 * rate && n_max >= 8)
            .then_some(Shaper {
                rate_mbps: rate,
                burst_bytes: burst,
                peak_mbps: strongest.mbps,
                r2,
            })
    })();
    let (capacity, method) = if let Some(s) = &shaper {
        (
            s.rate_mbps,
            "token-bucket sustained rate (slope of train spread against length)",
        )
    } else if let Some(adr) = adr {
        // pathrate: the strongest mode not below the ADR (cross traffic only lowers the ADR).
        match modes.iter().find(|m| m.mbps >= 0.9 * adr) {
            Some(m) => (m.mbps, "strongest packet-pair mode at or above the trains' ADR"),
            None => (adr, "trains' asymptotic dispersion rate (no pair mode above it)"),
        }
    } else {
        (strongest.mbps, "strongest packet-pair mode")
    };
    Ok(Estimate {
        capacity_mbps: capacity,
        method,
        modes,
        adr_mbps: adr,
        shaper,
        pairs_kept: kept.len(),
        pairs_dropped: pairs.len() - kept.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SplitMix;

    fn pair(bytes: usize, mbps: f64, delay: i64) -> Probe {
        Probe {
            packets: 2,
            bytes,
            spread_ns: (8.0 * bytes as f64 / mbps * 1e3) as u64,
            delay_ns: Some(delay),
        }
    }

    #[test]
    fn plain_link_with_cross_traffic_noise() {
        // 500 Mb/s; a third of the pairs met cross traffic (queued first packet, spread widened).
        let mut rng = SplitMix::new(3);
        let mut probes = Vec::new();
        for i in 0..300 {
            let jitter = 1.0 + (rng.below(100) as f64 - 50.0) / 5000.0;
            if i % 3 == 0 {
                let slow = 150.0 + rng.below(200) as f64;
                probes.push(pair(1500, slow, 200_000 + rng.below(100_000) as i64));
            } else {
                probes.push(pair(1500, 500.0 * jitter, 1_000 + rng.below(5_000) as i64));
            }
        }
        for n in [4, 8, 16, 32] {
            for _ in 0..5 {
                probes.push(Probe {
                    packets: n,
                    bytes: 1500,
                    spread_ns: (8.0 * (1500 * (n - 1)) as f64 / 450.0 * 1e3) as u64,
                    delay_ns: None,
                });
            }
        }
        let e = estimate(&probes).unwrap();
        assert!((e.capacity_mbps / 500.0 - 1.0).abs() < 0.03, "{e:?}");
        assert!(e.shaper.is_none());
        assert!(e.pairs_dropped >= 90, "{e:?}");
    }

    #[test]
    fn token_bucket_reports_the_sustained_rate() {
        // 100 Mb/s tbf with a 30 kB bucket behind a 10 Gb/s path: pairs pass at the peak.
        let (rate, burst, peak, bytes) = (100.0, 30_000.0, 10_000.0, 1500usize);
        let mut probes: Vec<Probe> = (0..100)
            .map(|i| pair(bytes, peak * (1.0 + (i % 5) as f64 * 0.002), 1000))
            .collect();
        for n in [2usize, 4, 8, 16, 32, 64, 128, 256] {
            let bits_over = ((n - 1) * bytes) as f64 - burst;
            let spread = if bits_over > 0.0 {
                8.0 * bits_over / rate * 1e3
            } else {
                8.0 * ((n - 1) * bytes) as f64 / peak * 1e3
            };
            for _ in 0..5 {
                probes.push(Probe {
                    packets: n,
                    bytes,
                    spread_ns: spread as u64,
                    delay_ns: None,
                });
            }
        }
        let e = estimate(&probes).unwrap();
        let s = e.shaper.clone().expect("shaper found");
        assert!((e.capacity_mbps / rate - 1.0).abs() < 0.02, "{e:?}");
        assert!((s.burst_bytes / burst - 1.0).abs() < 0.1, "{s:?}");
        assert!(s.peak_mbps > 9000.0);
    }

    #[test]
    fn too_few_pairs_is_an_error() {
        let probes: Vec<Probe> = (0..5).map(|_| pair(1500, 100.0, 0)).collect();
        assert!(estimate(&probes).unwrap_err().contains("usable packet pairs"));
    }

    #[test]
    fn modes_of_a_bimodal_sample() {
        let mut r: Vec<f64> = (0..60).map(|i| 100.0 + (i % 3) as f64 * 0.5).collect();
        r.extend((0..30).map(|i| 400.0 + (i % 3) as f64));
        let m = modes(&r);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            (m[0].mbps - 100.5).abs() < 1.0 && (m[1].mbps - 401.0).abs() < 2.0,
            "{m:?}"
        );
    }
}
