//! What to generate, checked once before anything is sent: every inconsistency is a [`PlanError`] naming
//! the option at fault, so the CLI can print one line and exit 2.

use vlbiflow_formats::vdif::{self, EdvSampleRate, VdifHeaderRepr};

/// Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP).
pub const MAX_UDP_PAYLOAD: usize = 65507;
/// Ethernet (preamble 8, header 14, CRC 4, gap 12) + IPv4 (20) + UDP (8) bytes per datagram on a wire.
pub const WIRE_OVERHEAD: usize = 66;
pub use vlbiflow_formats::psn::PSN_LEN;

/// How fast to send, as the user said it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateRequest {
    /// Frames per second per stream, all threads together (SimulateDeviceTX `-p`).
    FramesPerSecond(u64),
    /// Frame bits per second per stream (VDIF headers included; PSN and UDP/IP headers not).
    BitsPerSecond(f64),
    /// A fraction of a link's bit rate, counting every byte the link carries (frame, PSN, 66 bytes of
    /// Ethernet/IP/UDP overhead), so that fraction 1.0 fills the link exactly (SimulateDeviceTX `-f`).
    LinkFraction { fraction: f64, link_bps: f64 },
}

/// Payload content.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PayloadKind {
    Zeros,
    /// Quantized Gaussian noise, sigma 1 before quantization.
    Noise,
    /// Noise plus a sine tone of this frequency in Hz (baseband, below the Nyquist frequency).
    Tone {
        hz: f64,
    },
}

/// When frames are stamped from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartTime {
    /// The next whole wall-clock second; sending starts on that second, so stamps track the clock.
    Now,
    /// This POSIX second; sending starts at once.
    At(i64),
}

/// When to stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StopAfter {
    /// Frames per stream (all threads together).
    Count(u64),
    /// Seconds of stamped data (for the network, also of wall time).
    Seconds(f64),
    Continuous,
}

/// The user's request, before validation.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    pub thread_ids: Vec<u16>,
    pub rate: RateRequest,
    pub stop: StopAfter,
    /// Frame size in bytes, header included.
    pub frame_size: usize,
    pub bits: u8,
    pub channels: u32,
    pub complex: bool,
    pub station: String,
    pub edv: u8,
    pub version: u8,
    pub start: StartTime,
    pub psn: bool,
    pub payload: PayloadKind,
    /// Datagrams per sendmmsg (the largest burst).
    pub batch: usize,
    /// Segments per GSO super-datagram; 0 = no GSO.
    pub gso_segments: usize,
    pub seed: u64,
    /// Leave out every Nth frame (its PSN and time slot are used up, as if the network lost it); 0 = none.
    pub drop_every: u64,
}

impl Default for GenRequest {
    fn default() -> Self {
        GenRequest {
            thread_ids: vec![0],
            rate: RateRequest::FramesPerSecond(1000),
            stop: StopAfter::Seconds(10.0),
            frame_size: 8224,
            bits: 2,
            channels: 1,
            complex: false,
            station: "Xx".into(),
            edv: 0,
            version: 0,
            start: StartTime::Now,
            psn: false,
            payload: PayloadKind::Zeros,
            batch: 32,
            gso_segments: 0,
            seed: 1,
            drop_every: 0,
        }
    }
}

/// A checked request: everything the sender and the frame sequencer need, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct GenPlan {
    pub request: GenRequest,
    /// Frames per second per thread: the VDIF frame rate.
    pub frame_rate: u32,
    /// Frames per second per stream (frame_rate x threads).
    pub frames_per_second: u64,
    /// Template header (thread 0, second 0, frame 0); the sequencer fills time and thread.
    pub header: VdifHeaderRepr,
    /// Samples per frame per channel.
    pub samples_per_frame: u64,
    /// Sample rate per channel in Hz (complex samples for complex data).
    pub sample_rate_hz: u64,
    /// Frames per stream in total, None when continuous.
    pub total_frames: Option<u64>,
    /// Bytes per datagram (frame plus PSN if any).
    pub datagram_len: usize,
}

/// A request that cannot be carried out, naming the option at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("--{option}: {message}")]
    Option { option: &'static str, message: String },
}

fn err<T>(option: &'static str, message: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError::Option {
        option,
        message: message.into(),
    })
}

impl GenPlan {
    /// Validates `request` and resolves rates, the header template and totals.
    pub fn new(request: GenRequest) -> Result<GenPlan, PlanError> {
        let r = &request;
        if r.thread_ids.is_empty() {
            return err("threads", "at least one VDIF thread is needed");
        }
        for (i, &t) in r.thread_ids.iter().enumerate() {
            if t > vdif::MAX_THREAD_ID {
                return err("thread-ids", format!("thread ID {t} is over 1023"));
            }
            if r.thread_ids[..i].contains(&t) {
                return err("thread-ids", format!("thread ID {t} is given twice"));
            }
        }
        if r.frame_size % 8 != 0 {
            return err(
                "frame-size",
                format!(
                    "{} bytes is not a multiple of 8 (VDIF lengths count 8-byte units)",
                    r.frame_size
                ),
            );
        }
        let header_len = vdif::HEADER_LEN;
        if r.frame_size <= header_len {
            return err(
                "frame-size",
                format!(
                    "{} bytes leaves no payload after the {header_len}-byte header",
                    r.frame_size
                ),
            );
        }
        let datagram_len = r.frame_size + if r.psn { PSN_LEN } else { 0 };
        if datagram_len > MAX_UDP_PAYLOAD {
            return err(
                "frame-size",
                format!(
                    "{} bytes{} does not fit one UDP datagram (at most {MAX_UDP_PAYLOAD})",
                    r.frame_size,
                    if r.psn { " plus the 8-byte PSN" } else { "" }
                ),
            );
        }
        if r.edv == 3 && r.frame_size != vdif::EDV3_FRAME_LEN {
            return err(
                "frame-size",
                format!(
                    "EDV 3 frames are {} bytes, not {}",
                    vdif::EDV3_FRAME_LEN,
                    r.frame_size
                ),
            );
        }
        if !matches!(r.edv, 0 | 1 | 3) {
            return err("edv", format!("{} is not supported (0, 1 or 3)", r.edv));
        }
        if r.version > 7 {
            return err("vdif-version", format!("{} does not fit 3 bits", r.version));
        }
        if !r.channels.is_power_of_two() || r.channels > 1 << 31 {
            return err("channels", format!("{} is not a power of two", r.channels));
        }
        if !matches!(r.bits, 1..=32) {
            return err("bits", format!("{} bits per sample is outside 1..=32", r.bits));
        }
        if !matches!(r.payload, PayloadKind::Zeros) && !matches!(r.bits, 1 | 2 | 4 | 8) {
            return err(
                "bits",
                format!(
                    "noise and tone payloads need 1, 2, 4 or 8 bits per sample, not {}",
                    r.bits
                ),
            );
        }
        let station_id = match VdifHeaderRepr::station_from_str(&r.station) {
            Ok(s) => s,
            Err(_) => {
                return err(
                    "station",
                    format!("{:?} is not two printable ASCII characters", r.station),
                )
            }
        };
        let payload_len = r.frame_size - header_len;
        let samples_per_frame = match vdif::samples_per_frame(payload_len, r.bits, r.channels, r.complex) {
            Ok(s) => s,
            Err(_) => {
                return err(
                    "frame-size",
                    format!(
                        "a {payload_len}-byte payload does not hold a whole number of {}-bit {} samples for {} channel(s)",
                        r.bits,
                        if r.complex { "complex" } else { "real" },
                        r.channels
                    ),
                )
            }
        };
        let threads = r.thread_ids.len() as u64;
        let per_datagram_bits = |with_overhead: bool| -> f64 {
            8.0 * (r.frame_size
                + if with_overhead {
                    WIRE_OVERHEAD + if r.psn { PSN_LEN } else { 0 }
                } else {
                    0
                }) as f64
        };
        let frames_per_second = match r.rate {
            RateRequest::FramesPerSecond(n) => {
                if n == 0 {
                    return err("pps", "must be at least 1");
                }
                if n % threads != 0 {
                    return err(
                        "pps",
                        format!("{n} frames per second do not divide evenly over {threads} threads: each thread needs a whole number of frames per second"),
                    );
                }
                n
            }
            RateRequest::BitsPerSecond(bps) => {
                if !(bps.is_finite() && bps > 0.0) {
                    return err("rate", "must be a positive rate such as 4Gbps");
                }
                // Round to the nearest whole frame rate per thread: VDIF needs whole frames per second.
                let per_thread = (bps / per_datagram_bits(false) / threads as f64).round();
                if per_thread < 1.0 {
                    return err(
                        "rate",
                        format!(
                            "{bps} b/s is less than one {}-byte frame per second per thread",
                            r.frame_size
                        ),
                    );
                }
                per_thread as u64 * threads
            }
            RateRequest::LinkFraction { fraction, link_bps } => {
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return err("rate-fraction", format!("{fraction} is not in (0, 1]"));
                }
                if !(link_bps.is_finite() && link_bps > 0.0) {
                    return err("link", "must be a positive rate such as 100Gbps");
                }
                let per_thread = (fraction * link_bps / per_datagram_bits(true) / threads as f64).floor();
                if per_thread < 1.0 {
                    return err("rate-fraction", "gives less than one frame per second per thread");
                }
                per_thread as u64 * threads
            }
        };
        let frame_rate = frames_per_second / threads;
        if frame_rate > u64::from(vdif::MAX_FRAME_NUMBER) + 1 {
            return err(
                "pps",
                format!("{frame_rate} frames per second per thread exceed the 24-bit VDIF frame number"),
            );
        }
        let frame_rate = frame_rate as u32;
        let sample_rate_hz = u64::from(frame_rate) * samples_per_frame;
        let mut header = VdifHeaderRepr {
            version: r.version,
            log2_channels: r.channels.trailing_zeros() as u8,
            frame_len: r.frame_size,
            complex: r.complex,
            bits_per_sample: r.bits,
            station_id,
            ..Default::default()
        };
        if r.edv == 1 || r.edv == 3 {
            match EdvSampleRate::from_hz(sample_rate_hz) {
                Ok(rate) => header = header.with_sample_rate(r.edv, rate),
                Err(_) => {
                    return err(
                        "edv",
                        format!("EDV {} stores the sample rate in whole kHz, but {frame_rate} frames/s x {samples_per_frame} samples is {sample_rate_hz} Hz; choose --pps so it is a whole number of kHz", r.edv),
                    )
                }
            }
        }
        if let PayloadKind::Tone { hz } = r.payload {
            let nyquist = if r.complex {
                sample_rate_hz as f64
            } else {
                sample_rate_hz as f64 / 2.0
            };
            if !(hz > 0.0 && hz < nyquist) {
                return err(
                    "payload",
                    format!(
                        "tone at {hz} Hz is outside (0, {nyquist}) Hz for a {sample_rate_hz} Hz sample rate"
                    ),
                );
            }
        }
        let total_frames = match r.stop {
            StopAfter::Count(0) => return err("count", "must be at least 1"),
            StopAfter::Count(n) => Some(n),
            StopAfter::Seconds(s) => {
                if !(s.is_finite() && s > 0.0) {
                    return err("duration", "must be a positive number of seconds");
                }
                Some((s * frames_per_second as f64).round().max(1.0) as u64)
            }
            StopAfter::Continuous => None,
        };
        if r.batch == 0 || r.batch > 1024 {
            return err("batch", format!("{} is outside 1..=1024", r.batch));
        }
        if r.gso_segments > 0 {
            let max = MAX_UDP_PAYLOAD / datagram_len;
            if r.gso_segments > max.min(64) {
                return err(
                    "gso",
                    format!(
                        "{} segments of {datagram_len} bytes exceed the 64 KiB GSO limit (at most {})",
                        r.gso_segments,
                        max.min(64)
                    ),
                );
            }
        }
        header.validate().map_err(|e| PlanError::Option {
            option: "frame-size",
            message: e.to_string(),
        })?;
        Ok(GenPlan {
            frame_rate,
            frames_per_second,
            header,
            samples_per_frame,
            sample_rate_hz,
            total_frames,
            datagram_len,
            request,
        })
    }

    /// Frame bits per second per stream.
    pub fn frame_bits_per_second(&self) -> f64 {
        self.frames_per_second as f64 * self.request.frame_size as f64 * 8.0
    }

    /// Bits per second per stream on an Ethernet wire (frame, PSN and 66 bytes of overhead per datagram).
    pub fn wire_bits_per_second(&self) -> f64 {
        self.frames_per_second as f64 * (self.datagram_len + WIRE_OVERHEAD) as f64 * 8.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(f: impl FnOnce(&mut GenRequest)) -> Result<GenPlan, PlanError> {
        let mut r = GenRequest::default();
        f(&mut r);
        GenPlan::new(r)
    }

    #[test]
    fn rate_rounds_to_whole_frames() {
        let p = plan(|r| r.rate = RateRequest::BitsPerSecond(4e9)).unwrap();
        assert_eq!(p.frame_rate, 60798);
        assert!((p.frame_bits_per_second() / 4e9 - 1.0).abs() < 1e-5);
    }

    #[test]
    fn simulate_device_tx_config_b() {
        let p = plan(|r| {
            r.thread_ids = vec![0, 1];
            r.rate = RateRequest::FramesPerSecond(1_000_000);
        })
        .unwrap();
        assert_eq!(p.frame_rate, 500_000);
        assert!((p.frame_bits_per_second() / 65.792e9 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn errors_name_the_option() {
        let e = |f: fn(&mut GenRequest)| plan(f).unwrap_err().to_string();
        assert!(e(|r| r.frame_size = 8228).starts_with("--frame-size"));
        assert!(e(|r| r.frame_size = 70000).contains("UDP datagram"));
        assert!(e(|r| {
            r.thread_ids = vec![0, 1, 2];
            r.rate = RateRequest::FramesPerSecond(1000);
        })
        .starts_with("--pps"));
        assert!(e(|r| r.station = "X".into()).starts_with("--station"));
        assert!(e(|r| r.thread_ids = vec![1024]).starts_with("--thread-ids"));
        assert!(e(|r| r.payload = PayloadKind::Tone { hz: 1e12 }).starts_with("--payload"));
        assert!(e(|r| r.edv = 3).starts_with("--frame-size"));
    }

    #[test]
    fn edv1_carries_sample_rate() {
        let p = plan(|r| {
            r.edv = 1;
            r.rate = RateRequest::FramesPerSecond(125_000);
        })
        .unwrap();
        assert_eq!(p.sample_rate_hz, 4_096_000_000);
        let bytes = p.header.to_bytes().unwrap();
        let h = vdif::VdifHeader::new_checked(&bytes[..]).unwrap();
        assert_eq!(h.sample_rate_hz(), Some(4_096_000_000));
    }
}
