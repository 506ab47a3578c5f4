//! Sample coding of VDIF payloads: 1, 2, 4 and 8 bits per sample, real or complex, any power-of-two number
//! of channels, with the level conventions of baseband and mark5access.
//!
//! Layout: the payload is one little-endian bit stream (32-bit words, least significant bit first, which
//! is the same as bytes in order, LSB first). Each time step holds every channel in order, and a complex
//! sample is I then Q. So a payload is simply a flat sequence of `bits`-wide codes, and the `f32` slices
//! here are that sequence: `[t0 ch0 (I Q), t0 ch1 (I Q), ..., t1 ch0, ...]`.
//!
//! Codes are offset binary (all zeros is the most negative level).
//!
//! Units: values are in units of the noise standard deviation the 2-bit quantiser is designed for, so
//! Gaussian noise of sigma 1 fills the 2-bit levels optimally (thresholds at -1, 0, +1 sigma, about
//! 16/34/34/16 %). baseband and mark5access use units [`BASEBAND_SCALE`] (2.174564) times larger:
//! `baseband_value = value * BASEBAND_SCALE`, for encoding and decoding alike, at every bit width. In
//! baseband units the levels are:
//! - 1 bit: code 0 -> -1, 1 -> +1; encoding: value >= 0 -> 1.
//! - 2 bits: -h, -1, +1, +h with h = 3.316505 (baseband's `OPTIMAL_2BIT_HIGH`; mark5access uses 3.3359);
//!   thresholds at -2.174564, 0, +2.174564.
//! - 4 bits: (code - 8) / 2.95; encoding rounds to the nearest level and clips.
//! - 8 bits: (code - 127.5) / 35.5; encoding rounds (ties to even) and clips.
//!
//! Mark5B payloads hold 1- or 2-bit real samples in the same layout but with other codes for the same
//! levels: [`decode_mark5b`] / [`encode_mark5b`] (see [`mark5b_to_vdif_byte`]).
//!
//! Encoding and decoding are branch-free per sample and allocation-free; decoding of 1/2/4-bit data reads
//! precomputed per-byte tables.

use crate::error::{Error, Result};

/// Ratio of baseband's (and mark5access's) sample units to the units of this module.
pub const BASEBAND_SCALE: f32 = 2.174_564;
/// High 2-bit level relative to the low one (baseband `OPTIMAL_2BIT_HIGH`).
pub const OPTIMAL_2BIT_HIGH: f32 = 3.316_505;
/// baseband's 4-bit scale: code steps per baseband unit.
const FOUR_BIT_STEPS_PER_UNIT: f32 = 2.95;
/// baseband's 8-bit scale: code steps per baseband unit.
const EIGHT_BIT_STEPS_PER_UNIT: f32 = 35.5;

/// Levels in this module's units.
const LEVELS_1BIT: [f32; 2] = [-1.0 / BASEBAND_SCALE, 1.0 / BASEBAND_SCALE];
const LEVELS_2BIT: [f32; 4] = [
    -OPTIMAL_2BIT_HIGH / BASEBAND_SCALE,
    -1.0 / BASEBAND_SCALE,
    1.0 / BASEBAND_SCALE,
    OPTIMAL_2BIT_HIGH / BASEBAND_SCALE,
];
/// Code steps per unit of this module.
const FOUR_BIT_GAIN: f32 = FOUR_BIT_STEPS_PER_UNIT * BASEBAND_SCALE;
const EIGHT_BIT_GAIN: f32 = EIGHT_BIT_STEPS_PER_UNIT * BASEBAND_SCALE;

/// How samples are coded in a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleFormat {
    /// Bits per sample (per real number: per I or Q for complex data): 1, 2, 4 or 8.
    pub bits: u8,
    /// Channels per time step (a power of two, as VDIF stores its log2).
    pub channels: u32,
    /// Complex samples (I then Q) instead of real ones.
    pub complex: bool,
}

impl SampleFormat {
    /// A checked format: bits 1, 2, 4 or 8; channels a non-zero power of two.
    pub fn new(bits: u8, channels: u32, complex: bool) -> Result<Self> {
        if !matches!(bits, 1 | 2 | 4 | 8) {
            return Err(Error::OutOfRange {
                field: "bits per sample",
                value: bits.into(),
                allowed: "1, 2, 4 or 8 for sample coding",
            });
        }
        if channels == 0 || !channels.is_power_of_two() {
            return Err(Error::OutOfRange {
                field: "number of channels",
                value: channels.into(),
                allowed: "a power of two from 1",
            });
        }
        Ok(SampleFormat {
            bits,
            channels,
            complex,
        })
    }

    /// Codes (real numbers) per byte.
    pub fn values_per_byte(&self) -> usize {
        8 / usize::from(self.bits)
    }

    /// Real numbers per time step: channels, times 2 for complex data.
    pub fn values_per_time(&self) -> usize {
        self.channels as usize * if self.complex { 2 } else { 1 }
    }

    /// Number of `f32` values a payload of `payload_len` bytes holds (time samples x channels x (2 if
    /// complex)); errors unless it holds a whole number of time steps.
    pub fn values_in(&self, payload_len: usize) -> Result<usize> {
        let values = payload_len * self.values_per_byte();
        let per_time = self.values_per_time();
        if values % per_time != 0 {
            return Err(Error::NotMultiple {
                field: "payload values (samples x channels x components)",
                value: values as u64,
                unit: per_time as u64,
            });
        }
        Ok(values)
    }

    /// Time samples in a payload of `payload_len` bytes.
    pub fn time_samples_in(&self, payload_len: usize) -> Result<usize> {
        Ok(self.values_in(payload_len)? / self.values_per_time())
    }

    /// Checks that `bits` is a width this module codes, in a way usable without building a format.
    fn check_bits(bits: u8) -> Result<()> {
        SampleFormat::new(bits, 1, false).map(|_| ())
    }
}

/// The decoded value of `code` at `bits` per sample, in this module's units (see the module docs).
pub fn level(bits: u8, code: u32) -> Result<f32> {
    SampleFormat::check_bits(bits)?;
    let max = (1u32 << bits) - 1;
    if code > max {
        return Err(Error::OutOfRange {
            field: "sample code",
            value: code.into(),
            allowed: "below 2^bits",
        });
    }
    Ok(level_unchecked(bits, code))
}

#[inline]
fn level_unchecked(bits: u8, code: u32) -> f32 {
    match bits {
        1 => LEVELS_1BIT[code as usize & 1],
        2 => LEVELS_2BIT[code as usize & 3],
        4 => (code as f32 - 8.0) / FOUR_BIT_GAIN,
        _ => (code as f32 - 127.5) / EIGHT_BIT_GAIN,
    }
}

#[inline]
fn code1(v: f32) -> u8 {
    u8::from(v >= 0.0)
}

#[inline]
fn code2(v: f32) -> u8 {
    // floor(clip(v, -1.5, 1.5) + 2): thresholds at -1, 0, +1. NaN casts to 0.
    (v.clamp(-1.5, 1.5) + 2.0) as u8
}

#[inline]
fn code4(v: f32) -> u8 {
    (v * FOUR_BIT_GAIN + 8.5).clamp(0.0, 15.0) as u8
}

#[inline]
fn code8(v: f32) -> u8 {
    (v * EIGHT_BIT_GAIN + 127.5).round_ties_even().clamp(0.0, 255.0) as u8
}

fn check_lengths(format: SampleFormat, bytes: usize, values: usize) -> Result<()> {
    let need = format.values_in(bytes)?;
    if need != values {
        return Err(Error::LengthMismatch {
            field: "sample value count for the payload length",
            header: need as u64,
            actual: values as u64,
        });
    }
    Ok(())
}

/// Quantises `values` (this module's units; see the module docs) into `out`, which must hold exactly
/// `values.len()` codes (`format.values_in(out.len()) == values.len()`). Values beyond the outer levels clip.
pub fn encode(format: SampleFormat, values: &[f32], out: &mut [u8]) -> Result<()> {
    check_lengths(format, out.len(), values.len())?;
    match format.bits {
        1 => {
            for (byte, v) in out.iter_mut().zip(values.chunks_exact(8)) {
                let mut b = 0u8;
                for (i, &x) in v.iter().enumerate() {
                    b |= code1(x) << i;
                }
                *byte = b;
            }
        }
        2 => {
            for (byte, v) in out.iter_mut().zip(values.chunks_exact(4)) {
                *byte = code2(v[0]) | code2(v[1]) << 2 | code2(v[2]) << 4 | code2(v[3]) << 6;
            }
        }
        4 => {
            for (byte, v) in out.iter_mut().zip(values.chunks_exact(2)) {
                *byte = code4(v[0]) | code4(v[1]) << 4;
            }
        }
        _ => {
            for (byte, &v) in out.iter_mut().zip(values) {
                *byte = code8(v);
            }
        }
    }
    Ok(())
}

/// Per-byte decoding tables for the sub-byte widths, built on first use.
struct Tables {
    one: [[f32; 8]; 256],
    two: [[f32; 4]; 256],
    four: [[f32; 2]; 256],
}

fn tables() -> &'static Tables {
    static TABLES: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut t = Tables {
            one: [[0.0; 8]; 256],
            two: [[0.0; 4]; 256],
            four: [[0.0; 2]; 256],
        };
        for b in 0..256u32 {
            for i in 0..8 {
                t.one[b as usize][i] = level_unchecked(1, (b >> i) & 1);
            }
            for i in 0..4 {
                t.two[b as usize][i] = level_unchecked(2, (b >> (2 * i)) & 3);
            }
            for i in 0..2 {
                t.four[b as usize][i] = level_unchecked(4, (b >> (4 * i)) & 0xf);
            }
        }
        t
    })
}

/// Decodes the codes in `data` into `out` (this module's units), which must have exactly
/// `format.values_in(data.len())` elements.
pub fn decode(format: SampleFormat, data: &[u8], out: &mut [f32]) -> Result<()> {
    check_lengths(format, data.len(), out.len())?;
    match format.bits {
        1 => {
            let t = &tables().one;
            for (o, &b) in out.chunks_exact_mut(8).zip(data) {
                o.copy_from_slice(&t[usize::from(b)]);
            }
        }
        2 => {
            let t = &tables().two;
            for (o, &b) in out.chunks_exact_mut(4).zip(data) {
                o.copy_from_slice(&t[usize::from(b)]);
            }
        }
        4 => {
            let t = &tables().four;
            for (o, &b) in out.chunks_exact_mut(2).zip(data) {
                o.copy_from_slice(&t[usize::from(b)]);
            }
        }
        _ => {
            for (o, &b) in out.iter_mut().zip(data) {
                *o = level_unchecked(8, b.into());
            }
        }
    }
    Ok(())
}

/// Checks that `format` is one Mark5B carries: 1 or 2 bits, real, and at most 32 bit streams
/// (channels x bits) per 32-bit word.
fn check_mark5b(format: SampleFormat) -> Result<()> {
    if !matches!(format.bits, 1 | 2) {
        return Err(Error::OutOfRange {
            field: "Mark5B bits per sample",
            value: format.bits.into(),
            allowed: "1 or 2",
        });
    }
    if format.complex {
        return Err(Error::Invalid {
            field: "Mark5B samples",
            reason: "Mark5B data are real, not complex",
        });
    }
    if format.channels * u32::from(format.bits) > 32 {
        return Err(Error::OutOfRange {
            field: "Mark5B channels x bits per sample",
            value: (format.channels * u32::from(format.bits)).into(),
            allowed: "at most 32 bit streams",
        });
    }
    Ok(())
}

/// The byte of VDIF codes ([`decode`]'s convention) holding the same levels as the byte `b` of Mark5B
/// codes, for `bits` 1 or 2 (an involution: it also maps VDIF bytes to Mark5B bytes).
///
/// Mark5B payloads are laid out like VDIF ones (32-bit little-endian words, least significant bit first,
/// every channel of a time step in order, `bits`-wide codes), but code their levels differently (Mark5B
/// user's manual, appendix A; VLBA sampler conventions; as mark5access and baseband decode them):
/// - 2 bits: the sign bit is the lower bit of each pair (even bit stream), the magnitude bit the upper
///   one; sign 1 is positive, magnitude 1 is the high level. So codes 0..3 (`sign | magnitude << 1`) are
///   -h, +1, -1, +h (baseband units), where VDIF codes 0..3 are -h, -1, +1, +h: the two bits of each pair
///   swap.
/// - 1 bit: 0 is +1 and 1 is -1 (the sign bit as a sign), the inverse of VDIF.
#[inline]
pub fn mark5b_to_vdif_byte(bits: u8, b: u8) -> u8 {
    if bits == 1 {
        !b
    } else {
        ((b & 0x55) << 1) | ((b >> 1) & 0x55)
    }
}

/// Decodes Mark5B sample codes in `data` into `out` (this module's units, the same levels as VDIF: see
/// [`mark5b_to_vdif_byte`] for how the codes differ). `format` must be real with 1 or 2 bits; `out` must
/// have exactly `format.values_in(data.len())` elements.
pub fn decode_mark5b(format: SampleFormat, data: &[u8], out: &mut [f32]) -> Result<()> {
    check_mark5b(format)?;
    check_lengths(format, data.len(), out.len())?;
    // The codes as VDIF codes, a stack buffer at a time; the layout does not depend on the channels.
    let flat = SampleFormat::new(format.bits, 1, false)?;
    let mut buf = [0u8; 256];
    for (d, o) in data
        .chunks(buf.len())
        .zip(out.chunks_mut(buf.len() * format.values_per_byte()))
    {
        for (x, &b) in buf.iter_mut().zip(d) {
            *x = mark5b_to_vdif_byte(format.bits, b);
        }
        decode(flat, &buf[..d.len()], o)?;
    }
    Ok(())
}

/// Quantises `values` (this module's units) into Mark5B sample codes in `out` (the inverse of
/// [`decode_mark5b`], with [`encode`]'s thresholds).
pub fn encode_mark5b(format: SampleFormat, values: &[f32], out: &mut [u8]) -> Result<()> {
    check_mark5b(format)?;
    encode(format, values, out)?;
    for b in out.iter_mut() {
        *b = mark5b_to_vdif_byte(format.bits, *b);
    }
    Ok(())
}

/// Adds to `counts[code]` the number of samples in `data` holding each code, for `bits` per sample (all
/// samples of all channels and components together). Counts accumulate across calls.
///
/// # Panics
/// If `bits` is not 1, 2, 4 or 8, or `counts` has fewer than `2^bits` entries: both are caller bugs, not
/// properties of the data.
pub fn level_counts(bits: u8, data: &[u8], counts: &mut [u64]) {
    assert!(
        matches!(bits, 1 | 2 | 4 | 8),
        "level_counts: bits per sample must be 1, 2, 4 or 8, not {bits}"
    );
    let codes = 1usize << bits;
    assert!(
        counts.len() >= codes,
        "level_counts: need {codes} counters, got {}",
        counts.len()
    );
    // A byte histogram first: one increment per byte, then a per-code expansion of 256 entries.
    // Four partial histograms so that runs of equal bytes do not serialise on one counter.
    let mut parts = [[0u32; 256]; 4];
    let mut hist = [0u64; 256];
    // u32 partial counts are flushed before they could overflow.
    for block in data.chunks(1 << 30) {
        let mut quads = block.chunks_exact(4);
        for q in &mut quads {
            parts[0][usize::from(q[0])] += 1;
            parts[1][usize::from(q[1])] += 1;
            parts[2][usize::from(q[2])] += 1;
            parts[3][usize::from(q[3])] += 1;
        }
        for &b in quads.remainder() {
            parts[0][usize::from(b)] += 1;
        }
        for part in parts.iter_mut() {
            for (h, p) in hist.iter_mut().zip(part.iter_mut()) {
                *h += u64::from(*p);
                *p = 0;
            }
        }
    }
    if bits == 8 {
        for (c, h) in counts.iter_mut().zip(hist) {
            *c += h;
        }
        return;
    }
    let mask = (codes - 1) as u32;
    for (b, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        for i in (0..8).step_by(usize::from(bits)) {
            counts[((b as u32 >> i) & mask) as usize] += n;
        }
    }
}

/// Fractions of 2-bit codes 0..3 for Gaussian noise of sigma 1 with thresholds at -1, 0, +1 sigma:
/// Phi(-1), 1/2 - Phi(-1), 1/2 - Phi(-1), Phi(-1), about 0.1587/0.3413/0.3413/0.1587.
pub fn ideal_2bit_occupancy() -> [f64; 4] {
    const OUTER: f64 = 0.158_655_253_931_457_05;
    const INNER: f64 = 0.5 - OUTER;
    [OUTER, INNER, INNER, OUTER]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_and_lengths() {
        assert!(SampleFormat::new(3, 1, false)
            .unwrap_err()
            .to_string()
            .contains("bits per sample"));
        assert!(SampleFormat::new(2, 3, false)
            .unwrap_err()
            .to_string()
            .contains("channels"));
        assert!(SampleFormat::new(2, 0, false).is_err());
        let f = SampleFormat::new(2, 4, true).unwrap();
        assert_eq!(f.values_per_byte(), 4);
        assert_eq!(f.values_in(8192).unwrap(), 32768);
        assert_eq!(f.time_samples_in(8192).unwrap(), 4096);
        let f = SampleFormat::new(8, 16, true).unwrap();
        assert!(f.values_in(8200).is_err()); // 8200 values, 32 per time step
        let f = SampleFormat::new(2, 1, false).unwrap();
        let e = encode(f, &[0.0; 5], &mut [0u8; 2]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LengthMismatch {
                    header: 8,
                    actual: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(decode(f, &[0u8; 2], &mut [0.0; 9]).is_err());
    }

    #[test]
    fn levels_match_baseband_conventions() {
        let scaled = |bits, code| level(bits, code).unwrap() * BASEBAND_SCALE;
        assert!((scaled(1, 0) + 1.0).abs() < 1e-6 && (scaled(1, 1) - 1.0).abs() < 1e-6);
        let two: Vec<f32> = (0..4).map(|c| scaled(2, c)).collect();
        for (got, want) in two.iter().zip([-3.316505, -1.0, 1.0, 3.316505]) {
            assert!((got - want).abs() < 1e-5, "{two:?}");
        }
        assert!((scaled(4, 0) - (-8.0 / 2.95)).abs() < 1e-5);
        assert!((scaled(4, 15) - (7.0 / 2.95)).abs() < 1e-5);
        assert!((scaled(8, 0) - (-127.5 / 35.5)).abs() < 1e-5);
        assert!((scaled(8, 255) - (127.5 / 35.5)).abs() < 1e-5);
        assert!(level(2, 4).is_err());
    }

    #[test]
    fn two_bit_thresholds_and_packing() {
        let f = SampleFormat::new(2, 1, false).unwrap();
        let mut out = [0u8; 2];
        encode(f, &[-1.01, -0.99, 0.0, 1.0, -9.0, 9.0, f32::NAN, -0.0], &mut out).unwrap();
        // First sample in the lowest bits: codes 0,1,2,3 -> 0b11_10_01_00.
        assert_eq!(out[0], 0b1110_0100);
        // -9 clips to 0, 9 to 3, NaN to 0, -0.0 counts as >= 0 -> 2.
        assert_eq!(out[1], 0b10_00_11_00);
    }

    #[test]
    fn one_four_eight_bit_codes() {
        let f1 = SampleFormat::new(1, 8, false).unwrap();
        let mut b = [0u8; 1];
        encode(f1, &[1.0, -1.0, 0.0, -0.1, 0.1, -5.0, 5.0, -0.0], &mut b).unwrap();
        assert_eq!(b[0], 0b1101_0101);
        let f4 = SampleFormat::new(4, 1, true).unwrap();
        encode(f4, &[0.0, -100.0], &mut b).unwrap();
        assert_eq!(b[0], 0x08);
        encode(f4, &[100.0, level(4, 3).unwrap()], &mut b).unwrap();
        assert_eq!(b[0], 0x3f);
        let f8 = SampleFormat::new(8, 1, false).unwrap();
        let mut b = [0u8; 4];
        encode(f8, &[-100.0, 100.0, level(8, 77).unwrap(), 0.0], &mut b).unwrap();
        assert_eq!(b[..3], [0, 255, 77]);
        assert!(b[3] == 127 || b[3] == 128);
    }

    #[test]
    fn counts_and_occupancy() {
        let mut counts = [0u64; 4];
        level_counts(2, &[0b1110_0100, 0xff], &mut counts);
        assert_eq!(counts, [1, 1, 1, 5]);
        let mut c8 = vec![0u64; 256];
        level_counts(8, &[3, 3, 200], &mut c8);
        assert_eq!((c8[3], c8[200], c8.iter().sum::<u64>()), (2, 1, 3));
        let ideal = ideal_2bit_occupancy();
        assert!((ideal.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((ideal[0] - 0.1587).abs() < 1e-4 && (ideal[1] - 0.3413).abs() < 1e-4);
    }

    #[test]
    fn gaussian_noise_fills_two_bit_levels_optimally() {
        // Deterministic normal deviates (Box-Muller over a fixed LCG), sigma 1.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let values: Vec<f32> = (0..200_000)
            .map(|_| {
                let (u1, u2) = (uniform(), uniform());
                ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
            })
            .collect();
        let f = SampleFormat::new(2, 1, false).unwrap();
        let mut bytes = vec![0u8; values.len() / 4];
        encode(f, &values, &mut bytes).unwrap();
        let mut counts = [0u64; 4];
        level_counts(2, &bytes, &mut counts);
        for (c, ideal) in counts.iter().zip(ideal_2bit_occupancy()) {
            let got = *c as f64 / values.len() as f64;
            assert!((got - ideal).abs() < 0.005, "{counts:?}");
        }
    }

    #[test]
    fn mark5b_levels_follow_sign_and_magnitude_bits() {
        // baseband's mark5b.payload table: (magnitude, sign) 00 -> -Hi, 01 -> +1, 10 -> -1, 11 -> +Hi,
        // sign on the even (lower) bit; 1 bit: 0 -> +1, 1 -> -1.
        let f2 = SampleFormat::new(2, 4, false).unwrap();
        let mut v = [0f32; 4];
        // Codes (sign | magnitude << 1) 0, 1, 2, 3 in time order, first in the lowest bits.
        decode_mark5b(f2, &[0b11_10_01_00], &mut v).unwrap();
        let baseband: Vec<f32> = v.iter().map(|x| x * BASEBAND_SCALE).collect();
        for (got, want) in baseband
            .iter()
            .zip([-OPTIMAL_2BIT_HIGH, 1.0, -1.0, OPTIMAL_2BIT_HIGH])
        {
            assert!((got - want).abs() < 1e-5, "{baseband:?}");
        }
        let f1 = SampleFormat::new(1, 8, false).unwrap();
        let mut v = [0f32; 8];
        decode_mark5b(f1, &[0b0000_0001], &mut v).unwrap();
        assert!(v[0] < 0.0 && v[1..].iter().all(|&x| x > 0.0), "{v:?}");
        let mut b = [0u8; 1];
        encode_mark5b(f2, &[-9.0, 0.1, -0.1, 9.0], &mut b).unwrap();
        assert_eq!(b[0], 0b11_10_01_00);
        // Formats Mark5B does not carry.
        assert!(decode_mark5b(SampleFormat::new(4, 1, false).unwrap(), &[0], &mut [0.0; 2]).is_err());
        assert!(decode_mark5b(SampleFormat::new(2, 1, true).unwrap(), &[0], &mut [0.0; 4]).is_err());
        assert!(decode_mark5b(SampleFormat::new(2, 32, false).unwrap(), &[0; 16], &mut [0.0; 64]).is_err());
    }

    fn arb_format() -> impl Strategy<Value = SampleFormat> {
        (
            prop_oneof![Just(1u8), Just(2), Just(4), Just(8)],
            0u32..4,
            any::<bool>(),
        )
            .prop_map(|(bits, l2, cx)| SampleFormat::new(bits, 1 << l2, cx).unwrap())
    }

    proptest! {
        #[test]
        fn bytes_round_trip(format in arb_format(), data in proptest::collection::vec(any::<u8>(), 0..256)) {
            // Every byte sequence is a valid payload for 1 channel; decode then encode gives it back.
            let len = data.len() - data.len() % 16;
            let data = &data[..len];
            let mut values = vec![0f32; format.values_in(len).unwrap()];
            decode(format, data, &mut values).unwrap();
            let mut again = vec![0u8; len];
            encode(format, &values, &mut again).unwrap();
            prop_assert_eq!(&again[..], data);
        }

        #[test]
        fn quantisation_is_idempotent(format in arb_format(), values in proptest::collection::vec(-10f32..10.0, 64)) {
            let mut bytes = vec![0u8; 64 / format.values_per_byte()];
            encode(format, &values, &mut bytes).unwrap();
            let mut levels = vec![0f32; 64];
            decode(format, &bytes, &mut levels).unwrap();
            let mut again = vec![0u8; bytes.len()];
            encode(format, &levels, &mut again).unwrap();
            prop_assert_eq!(&again, &bytes);
            // Each value lands on a level no further than the nearest-level spacing (or clips).
            for (v, l) in values.iter().zip(&levels) {
                if format.bits >= 4 {
                    let step = if format.bits == 4 { 1.0 / FOUR_BIT_GAIN } else { 1.0 / EIGHT_BIT_GAIN };
                    let max = level_unchecked(format.bits, (1 << format.bits) - 1);
                    let min = level_unchecked(format.bits, 0);
                    prop_assert!((v.clamp(min, max) - l).abs() <= step * 0.5 + 1e-5, "{v} -> {l}");
                }
                // Quantisation never flips a sign.
                let flipped = (*l < 0.0 && *v >= 0.0) || (*l > 0.0 && *v < 0.0);
                prop_assert!(!flipped, "{v} -> {l}");
            }
        }

        #[test]
        fn mark5b_bytes_round_trip(bits in 1u8..3, l2 in 0u32..4, data in proptest::collection::vec(any::<u8>(), 0..64)) {
            // Whole 32-bit words, as Mark5B payloads are.
            let data = &data[..data.len() - data.len() % 4];
            let format = SampleFormat::new(bits, 1 << l2, false).unwrap();
            let mut values = vec![0f32; format.values_in(data.len()).unwrap()];
            decode_mark5b(format, data, &mut values).unwrap();
            let mut again = vec![0u8; data.len()];
            encode_mark5b(format, &values, &mut again).unwrap();
            prop_assert_eq!(&again[..], data);
            for &b in data {
                prop_assert_eq!(mark5b_to_vdif_byte(bits, mark5b_to_vdif_byte(bits, b)), b);
            }
        }

        #[test]
        fn decode_never_panics(bits in 0u8..10, ch in 0u32..9, cx in any::<bool>(), data in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..600) {
            if let Ok(f) = SampleFormat::new(bits, ch, cx) {
                let mut out = vec![0f32; n];
                let _ = decode(f, &data, &mut out);
                let _ = f.values_in(data.len());
            }
        }
    }
}
