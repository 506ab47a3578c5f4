//! `--stats`: per thread and channel sample-state occupancy (for 2-bit data the four levels against the
//! ideal Gaussian occupancy) and an average power spectrum per channel, from a subset of frames spread over
//! the scan (the first few frames of every second). Finds dead channels (one level only), saturated or
//! starved ones, and the strongest tone.

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use vlbiflow_formats::samples::{decode, ideal_2bit_occupancy, level, SampleFormat};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_reader::finding::{Finding, FindingKind, Severity};

/// What to sample and where to plot.
#[derive(Debug, Clone)]
pub struct StatsConfig {
    /// Frames used per second of each thread (the first ones of the second).
    pub frames_per_second: u32,
    /// Frames used per thread at most.
    pub max_frames: u64,
    /// FFT length (a power of two; shortened to fit a frame).
    pub fft_len: usize,
    /// Segments of `fft_len` used per frame and channel at most.
    pub max_segments_per_frame: usize,
    /// PNG to draw the spectra into.
    pub plot: Option<PathBuf>,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            frames_per_second: 8,
            max_frames: 4000,
            fft_len: 1024,
            max_segments_per_frame: 8,
            plot: None,
        }
    }
}

/// Statistics of one channel.
#[derive(Debug, Clone, Serialize)]
pub struct ChannelStats {
    pub channel: u32,
    /// Fraction of samples at each code (level), lowest first.
    pub occupancy: Vec<f64>,
    /// Ideal occupancy for Gaussian noise at optimum threshold (2-bit only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ideal: Option<Vec<f64>>,
    /// "ok", "dead" (one level only), "saturated" (too many outer levels), "low power" (too few).
    pub state: &'static str,
    /// Frequency of the strongest spectral line relative to the band edge (Hz), if the sample rate is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tone_hz: Option<f64>,
    /// Same as a fraction of the sample rate (0..0.5 real; -0.5..0.5 complex).
    pub tone_fraction: f64,
    /// How far the strongest bin stands above the median bin, in dB.
    pub tone_db_above_median: f64,
    #[serde(skip)]
    pub spectrum: Vec<f64>,
}

/// Statistics of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadStats {
    pub thread: u16,
    pub bits_per_sample: u8,
    pub complex: bool,
    pub sample_rate_hz: Option<f64>,
    pub frames_used: u64,
    pub fft_len: usize,
    pub channels: Vec<ChannelStats>,
}

/// The `--stats` result.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    pub threads: Vec<ThreadStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plot: Option<String>,
    #[serde(skip)]
    pub findings: Vec<Finding>,
}

struct ThreadAcc {
    thread: u16,
    format: Option<SampleFormat>,
    levels: Vec<f32>,
    counts: Vec<Vec<u64>>,
    power: Vec<Vec<f64>>,
    spectra: u64,
    used: u64,
    second: i64,
    in_second: u32,
    values: Vec<f32>,
    fft: Option<Arc<dyn Fft<f32>>>,
    fft_len: usize,
    buf: Vec<Complex32>,
    scratch: Vec<Complex32>,
    unsupported: bool,
}

/// Accumulates sample statistics from the frames it is offered.
pub struct SampleStats {
    config: StatsConfig,
    threads: Vec<ThreadAcc>,
    planner: FftPlanner<f32>,
}

impl SampleStats {
    pub fn new(config: StatsConfig) -> Self {
        SampleStats {
            config,
            threads: Vec::new(),
            planner: FftPlanner::new(),
        }
    }

    /// Offers a valid VDIF frame of `thread` at time `stamp`; only a few per second are used.
    pub fn offer(&mut self, thread: u16, stamp: (i64, u32), frame: &[u8]) {
        let idx = match self.threads.iter().position(|t| t.thread == thread) {
            Some(i) => i,
            None => {
                self.threads.push(ThreadAcc {
                    thread,
                    format: None,
                    levels: Vec::new(),
                    counts: Vec::new(),
                    power: Vec::new(),
                    spectra: 0,
                    used: 0,
                    second: i64::MIN,
                    in_second: 0,
                    values: Vec::new(),
                    fft: None,
                    fft_len: 0,
                    buf: Vec::new(),
                    scratch: Vec::new(),
                    unsupported: false,
                });
                self.threads.len() - 1
            }
        };
        let cfg = &self.config;
        let t = &mut self.threads[idx];
        if t.unsupported || t.used >= cfg.max_frames {
            return;
        }
        if stamp.0 != t.second {
            t.second = stamp.0;
            t.in_second = 0;
        }
        if t.in_second >= cfg.frames_per_second {
            return;
        }
        t.in_second += 1;
        let h = VdifHeader::new_unchecked(frame);
        let payload = &frame[h.header_len()..];
        if t.format.is_none() {
            let Ok(fmt) = SampleFormat::new(h.bits_per_sample(), h.channels(), h.complex()) else {
                t.unsupported = true;
                return;
            };
            let Ok(n) = fmt.values_in(payload.len()) else {
                t.unsupported = true;
                return;
            };
            let codes = 1usize << fmt.bits;
            t.levels = (0..codes as u32)
                .map(|c| level(fmt.bits, c).unwrap_or(0.0))
                .collect();
            t.counts = vec![vec![0u64; codes]; fmt.channels as usize];
            t.values = vec![0f32; n];
            let samples = n / fmt.values_per_time();
            let mut len = cfg.fft_len.max(8).next_power_of_two();
            while len > samples && len > 8 {
                len /= 2;
            }
            t.fft_len = len;
            let fft = self.planner.plan_fft_forward(len);
            t.scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
            t.fft = Some(fft);
            t.buf = vec![Complex32::default(); len];
            let bins = if fmt.complex { len } else { len / 2 + 1 };
            t.power = vec![vec![0f64; bins]; fmt.channels as usize];
            t.format = Some(fmt);
        }
        let fmt = t.format.expect("format set above");
        if t.values.len() != fmt.values_in(payload.len()).unwrap_or(0)
            || decode(fmt, payload, &mut t.values).is_err()
        {
            return;
        }
        t.used += 1;
        let vpt = fmt.values_per_time();
        let comps = if fmt.complex { 2 } else { 1 };
        let channels = fmt.channels as usize;
        // Occupancy: every value of the frame, mapped back to its code through the (increasing) level table.
        for (i, v) in t.values.iter().enumerate() {
            let ch = (i / comps) % channels;
            let code = t.levels.partition_point(|l| l < v).min(t.levels.len() - 1);
            t.counts[ch][code] += 1;
        }
        let samples = t.values.len() / vpt;
        let len = t.fft_len;
        let segments = (samples / len).min(cfg.max_segments_per_frame);
        let fft = t.fft.clone().expect("planned");
        for ch in 0..channels {
            for s in 0..segments {
                for k in 0..len {
                    let base = (s * len + k) * vpt + ch * comps;
                    let re = t.values[base];
                    let im = if fmt.complex { t.values[base + 1] } else { 0.0 };
                    t.buf[k] = Complex32::new(re, im);
                }
                fft.process_with_scratch(&mut t.buf, &mut t.scratch);
                for (p, c) in t.power[ch].iter_mut().zip(t.buf.iter()) {
                    *p += f64::from(c.norm_sqr());
                }
                if ch == 0 {
                    t.spectra += 1;
                }
            }
        }
    }

    /// Results; `sample_rates` per thread (Hz) give the tone frequencies.
    pub fn finish(self, _frame_rate: Option<u32>, sample_rates: &[(u16, Option<f64>)]) -> StatsReport {
        let mut threads = Vec::new();
        let mut findings = Vec::new();
        for t in self.threads {
            let Some(fmt) = t.format else {
                if t.unsupported {
                    findings.push(Finding::new(
                        Severity::Info,
                        FindingKind::Samples,
                        format!("thread {}: sample coding not supported for statistics (1, 2, 4 or 8 bits, power-of-two channels)", t.thread),
                    ));
                }
                continue;
            };
            let rate = sample_rates
                .iter()
                .find(|(id, _)| *id == t.thread)
                .and_then(|r| r.1);
            let mut channels = Vec::new();
            for (ch, counts) in t.counts.iter().enumerate() {
                let total: u64 = counts.iter().sum();
                let occ: Vec<f64> = counts
                    .iter()
                    .map(|&c| if total == 0 { 0.0 } else { c as f64 / total as f64 })
                    .collect();
                let max_occ = occ.iter().cloned().fold(0.0, f64::max);
                let outer = if fmt.bits == 2 { occ[0] + occ[3] } else { f64::NAN };
                let state = if total > 0 && max_occ > 0.999 {
                    "dead"
                } else if fmt.bits == 2 && outer > 0.5 {
                    "saturated"
                } else if fmt.bits == 2 && outer < 0.08 {
                    "low power"
                } else {
                    "ok"
                };
                let mut spectrum: Vec<f64> = t.power[ch]
                    .iter()
                    .map(|p| if t.spectra == 0 { 0.0 } else { p / t.spectra as f64 })
                    .collect();
                if fmt.complex {
                    // Put negative frequencies first.
                    spectrum.rotate_left(t.fft_len / 2);
                }
                let (tone_fraction, tone_db) = strongest_tone(&spectrum, t.fft_len, fmt.complex);
                let tone_hz = rate.map(|r| tone_fraction * r);
                match state {
                    "dead" => findings.push(Finding::new(
                        Severity::Error,
                        FindingKind::Samples,
                        format!(
                            "thread {} channel {ch}: dead (all samples at one level)",
                            t.thread
                        ),
                    )),
                    "saturated" | "low power" => findings.push(Finding::new(
                        Severity::Warn,
                        FindingKind::Samples,
                        format!(
                            "thread {} channel {ch}: {state}: outer levels {:.1}% of samples (ideal {:.1}%)",
                            t.thread,
                            outer * 100.0,
                            (ideal_2bit_occupancy()[0] * 2.0) * 100.0
                        ),
                    )),
                    _ => {}
                }
                channels.push(ChannelStats {
                    channel: ch as u32,
                    occupancy: occ,
                    ideal: (fmt.bits == 2).then(|| ideal_2bit_occupancy().to_vec()),
                    state,
                    tone_hz,
                    tone_fraction,
                    tone_db_above_median: tone_db,
                    spectrum,
                });
            }
            threads.push(ThreadStats {
                thread: t.thread,
                bits_per_sample: fmt.bits,
                complex: fmt.complex,
                sample_rate_hz: rate,
                frames_used: t.used,
                fft_len: t.fft_len,
                channels,
            });
        }
        StatsReport {
            threads,
            plot: None,
            findings,
        }
    }
}

/// Strongest bin away from DC: (frequency as a fraction of the sample rate, dB above the median bin).
fn strongest_tone(spectrum: &[f64], fft_len: usize, complex: bool) -> (f64, f64) {
    if spectrum.len() < 3 {
        return (0.0, 0.0);
    }
    let centre = if complex { fft_len / 2 } else { 0 };
    let (best, &p) = spectrum
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != centre)
        .max_by(|a, b| a.1.total_cmp(b.1))
        .expect("non-empty");
    let mut sorted = spectrum.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let median = sorted[sorted.len() / 2];
    let db = if median > 0.0 && p > 0.0 {
        10.0 * (p / median).log10()
    } else {
        0.0
    };
    let frac = (best as f64 - centre as f64) / fft_len as f64;
    (frac, db)
}
