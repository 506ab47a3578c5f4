//! Mark5B frames: a 16-byte header (four little-endian 32-bit words) followed by 10000 bytes of payload.
//!
//! | word | bits | field |
//! |---|---|---|
//! | 0 | 31..0 | sync word 0xABADDEED |
//! | 1 | 31..16 | user-specified bits |
//! | 1 | 15 | internal test-vector flag |
//! | 1 | 14..0 | frame number within the second |
//! | 2 | 31..0 | BCD `JJJSSSSS`: MJD mod 1000, second of the day |
//! | 3 | 31..16 | BCD fraction of the second in units of 0.1 ms (truncated) |
//! | 3 | 15..0 | CRC16 of word 2 and the upper half of word 3 |
//!
//! The CRC is the VLBA time-code CRC (x^16 + x^15 + x^2 + 1, i.e. 0x8005; init 0, not reflected, no final
//! XOR; "CRC-16/BUYPASS") over the 48 bits `word2 << 16 | word3 >> 16`, most significant bit first, as
//! baseband computes it and as Mark5B recordings carry it.
//!
//! [`Mark5bHeader`] and [`Mark5bFrame`] are zero-copy views, [`Mark5bHeaderRepr`] the parsed form.

use crate::error::{Error, Result};
use crate::time::{UtcTime, MJD_UNIX_EPOCH};

/// Sync word in header word 0.
pub const SYNC_WORD: u32 = 0xABAD_DEED;
/// Header length in bytes.
pub const HEADER_LEN: usize = 16;
/// Payload length in bytes.
pub const PAYLOAD_LEN: usize = 10_000;
/// Whole frame length in bytes.
pub const FRAME_LEN: usize = HEADER_LEN + PAYLOAD_LEN;
/// Largest frame number (15 bits).
pub const MAX_FRAME_NUMBER: u16 = 0x7fff;
/// Highest frame rate the 15-bit frame number allows.
pub const MAX_FRAME_RATE: u32 = 1 << 15;
/// Seconds in a day (the largest second-of-day is one less).
const SECONDS_PER_DAY: u32 = 86_400;
/// Units of 0.1 ms in a second.
const FRACTION_UNITS: u32 = 10_000;

mod field {
    pub const W1_USER_SHIFT: u32 = 16;
    pub const W1_TEST_VECTOR: u32 = 1 << 15;
    pub const W1_FRAME: u32 = 0x7fff;
    pub const W2_JDAY_SHIFT: u32 = 20;
    pub const W2_SECONDS: u32 = 0x000f_ffff;
    pub const W3_FRACTION_SHIFT: u32 = 16;
    pub const W3_CRC: u32 = 0xffff;
}

/// CRC-16 polynomial of the VLBA/Mark5B time code, without its x^16 term.
pub const CRC16_POLY: u16 = 0x8005;

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ CRC16_POLY
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC16_TABLE: [u16; 256] = crc16_table();

/// CRC-16 (poly 0x8005, init 0, MSB first, no final XOR) of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The Mark5B header CRC for header words 2 and 3 (only the upper half of word 3 is covered).
pub fn header_crc(word2: u32, word3: u32) -> u16 {
    let w2 = word2.to_be_bytes();
    let w3 = word3.to_be_bytes();
    crc16(&[w2[0], w2[1], w2[2], w2[3], w3[0], w3[1]])
}

/// Encodes `value` as `digits` BCD nibbles; errors (naming `field`) if it needs more digits.
pub fn bcd_encode(value: u32, digits: u32, field: &'static str) -> Result<u32> {
    debug_assert!((1..=8).contains(&digits));
    if u64::from(value) >= 10u64.pow(digits) {
        return Err(Error::OutOfRange {
            field,
            value: value.into(),
            allowed: "fewer decimal digits than the BCD field",
        });
    }
    let mut v = value;
    let mut out = 0u32;
    for i in 0..digits {
        out |= (v % 10) << (4 * i);
        v /= 10;
    }
    Ok(out)
}

/// Decodes the low `digits` BCD nibbles of `bcd`; errors (naming `field`) if a nibble is above 9.
pub fn bcd_decode(bcd: u32, digits: u32, field: &'static str) -> Result<u32> {
    debug_assert!((1..=8).contains(&digits));
    let mut out = 0u32;
    for i in (0..digits).rev() {
        let nibble = (bcd >> (4 * i)) & 0xf;
        if nibble > 9 {
            return Err(Error::Invalid {
                field,
                reason: "BCD digit above 9",
            });
        }
        out = out * 10 + nibble;
    }
    Ok(out)
}

/// A read/write view over a Mark5B header at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark5bHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Mark5bHeader<T> {
    /// Wraps `buffer` without any check. Accessors panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Mark5bHeader { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check()?;
        Ok(h)
    }

    /// Verifies the length and the sync word. BCD digits and the CRC are verified by
    /// [`Mark5bHeaderRepr::parse`], so a damaged time code can still be inspected through the view.
    pub fn check(&self) -> Result<()> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                what: "Mark5B header",
                need: HEADER_LEN,
                got,
            });
        }
        if self.sync() != SYNC_WORD {
            return Err(Error::BadSync {
                what: "Mark5B header",
                found: self.sync(),
                expected: SYNC_WORD,
            });
        }
        Ok(())
    }

    /// Consumes the view and returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn word(&self, index: usize) -> u32 {
        let b = self.buffer.as_ref();
        let o = index * 4;
        u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    }

    /// Seconds since the start of the 1000-day MJD cycle (MJD mod 1000 x 86400 + second of day) from the
    /// BCD time code, or `None` when a digit is not decimal. No allocation; for per-frame use.
    #[inline]
    pub fn day_second(&self) -> Option<i64> {
        let jjj = bcd_decode(self.bcd_jday(), 3, "Mark5B MJD").ok()?;
        let sssss = bcd_decode(self.bcd_seconds(), 5, "Mark5B seconds").ok()?;
        Some(i64::from(jjj) * 86_400 + i64::from(sssss))
    }

    /// Raw header word `index` (0..4).
    #[inline]
    pub fn raw_word(&self, index: usize) -> u32 {
        self.word(index)
    }
    #[inline]
    /// Sync word (should be [`SYNC_WORD`]).
    pub fn sync(&self) -> u32 {
        self.word(0)
    }
    /// User-specified bits.
    #[inline]
    pub fn user(&self) -> u16 {
        (self.word(1) >> field::W1_USER_SHIFT) as u16
    }
    /// Internal test-vector flag.
    #[inline]
    pub fn test_vector(&self) -> bool {
        self.word(1) & field::W1_TEST_VECTOR != 0
    }
    /// Frame number within the second.
    #[inline]
    pub fn frame_number(&self) -> u16 {
        (self.word(1) & field::W1_FRAME) as u16
    }
    /// BCD MJD mod 1000 (3 digits).
    #[inline]
    pub fn bcd_jday(&self) -> u32 {
        self.word(2) >> field::W2_JDAY_SHIFT
    }
    /// BCD second of day (5 digits).
    #[inline]
    pub fn bcd_seconds(&self) -> u32 {
        self.word(2) & field::W2_SECONDS
    }
    /// BCD fraction of the second in 0.1 ms (4 digits).
    #[inline]
    pub fn bcd_fraction(&self) -> u32 {
        self.word(3) >> field::W3_FRACTION_SHIFT
    }
    /// CRC as found in the header.
    #[inline]
    pub fn crc(&self) -> u16 {
        (self.word(3) & field::W3_CRC) as u16
    }
    /// CRC computed from the time code.
    pub fn computed_crc(&self) -> u16 {
        header_crc(self.word(2), self.word(3))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mark5bHeader<T> {
    #[inline]
    fn set_word(&mut self, index: usize, value: u32) {
        let o = index * 4;
        self.buffer.as_mut()[o..o + 4].copy_from_slice(&value.to_le_bytes());
    }
    /// Writes raw header word `index` (0..4).
    pub fn set_raw_word(&mut self, index: usize, value: u32) {
        self.set_word(index, value)
    }
    /// Writes the sync word.
    pub fn set_sync(&mut self, value: u32) {
        self.set_word(0, value)
    }
    /// Sets user bits, test-vector flag and frame number (masked to 15 bits) in one word write.
    #[inline]
    pub fn set_word1(&mut self, user: u16, test_vector: bool, frame_number: u16) {
        let w = (u32::from(user) << field::W1_USER_SHIFT)
            | if test_vector { field::W1_TEST_VECTOR } else { 0 }
            | (u32::from(frame_number) & field::W1_FRAME);
        self.set_word(1, w)
    }
    /// Sets the frame number (masked to 15 bits), keeping the other bits of word 1.
    #[inline]
    pub fn set_frame_number(&mut self, frame_number: u16) {
        let w = (self.word(1) & !field::W1_FRAME) | (u32::from(frame_number) & field::W1_FRAME);
        self.set_word(1, w)
    }
    /// Writes the raw BCD time code (words 2 and 3's upper half) and the matching CRC.
    #[inline]
    pub fn set_time_code(&mut self, bcd_jday: u32, bcd_seconds: u32, bcd_fraction: u32) {
        let w2 = (bcd_jday << field::W2_JDAY_SHIFT) | (bcd_seconds & field::W2_SECONDS);
        let w3 = bcd_fraction << field::W3_FRACTION_SHIFT;
        let crc = header_crc(w2, w3);
        self.set_word(2, w2);
        self.set_word(3, w3 | u32::from(crc));
    }
    /// Overwrites the CRC field (to build deliberately damaged headers, or after raw word edits).
    pub fn set_crc(&mut self, crc: u16) {
        let w = (self.word(3) & !field::W3_CRC) | u32::from(crc);
        self.set_word(3, w)
    }
    /// Recomputes the CRC from the time code.
    pub fn fill_crc(&mut self) {
        let crc = self.computed_crc();
        self.set_crc(crc)
    }
}

/// A view over one whole Mark5B frame ([`FRAME_LEN`] bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark5bFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Mark5bFrame<T> {
    /// Wraps `buffer` without any check. Accessors panic if it is shorter than [`HEADER_LEN`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Mark5bFrame { buffer }
    }

    /// Wraps `buffer` after checking it is exactly one frame long and the header's sync word.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let len = buffer.as_ref().len();
        if len != FRAME_LEN {
            return Err(Error::LengthMismatch {
                field: "Mark5B frame length",
                header: FRAME_LEN as u64,
                actual: len as u64,
            });
        }
        Mark5bHeader::new_checked(buffer.as_ref())?;
        Ok(Mark5bFrame { buffer })
    }

    /// The header view (borrowing).
    pub fn header(&self) -> Mark5bHeader<&[u8]> {
        Mark5bHeader::new_unchecked(self.buffer.as_ref())
    }
    /// The payload bytes following the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// The whole frame.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Consumes the view and returns the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mark5bFrame<T> {
    /// The header view for writing.
    pub fn header_mut(&mut self) -> Mark5bHeader<&mut [u8]> {
        Mark5bHeader::new_unchecked(self.buffer.as_mut())
    }
    /// The payload bytes for writing.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The parsed form of a Mark5B header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mark5bHeaderRepr {
    /// User-specified bits (word 1, bits 31..16).
    pub user: u16,
    /// Internal test-vector flag (word 1, bit 15).
    pub test_vector: bool,
    /// Frame number within the second (0..=32767).
    pub frame_number: u16,
    /// MJD modulo 1000 (0..=999).
    pub mjd_mod_1000: u16,
    /// Second of the day (0..=86399).
    pub seconds_of_day: u32,
    /// Fraction of the second in units of 0.1 ms, truncated (0..=9999).
    pub fraction_0p1ms: u16,
    /// CRC as read by `parse` (verified). `emit` ignores this field and always writes the CRC of the time
    /// code; [`with_crc`](Self::with_crc) fills it in.
    pub crc: u16,
}

impl Mark5bHeaderRepr {
    /// Reads a header view after checking the sync word, every BCD digit, the ranges and the CRC.
    pub fn parse<T: AsRef<[u8]>>(header: &Mark5bHeader<T>) -> Result<Self> {
        header.check()?;
        let computed = header.computed_crc();
        if header.crc() != computed {
            return Err(Error::BadCrc {
                what: "Mark5B header",
                found: header.crc(),
                computed,
            });
        }
        let repr = Mark5bHeaderRepr {
            user: header.user(),
            test_vector: header.test_vector(),
            frame_number: header.frame_number(),
            mjd_mod_1000: bcd_decode(header.bcd_jday(), 3, "Mark5B MJD (BCD JJJ)")? as u16,
            seconds_of_day: bcd_decode(header.bcd_seconds(), 5, "Mark5B second of day (BCD SSSSS)")?,
            fraction_0p1ms: bcd_decode(header.bcd_fraction(), 4, "Mark5B fraction of second (BCD)")? as u16,
            crc: header.crc(),
        };
        repr.validate()?;
        Ok(repr)
    }

    /// Parses the header at the start of `bytes`.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self> {
        Self::parse(&Mark5bHeader::new_checked(bytes)?)
    }

    /// Checks the field ranges, naming the first one at fault.
    pub fn validate(&self) -> Result<()> {
        if self.frame_number > MAX_FRAME_NUMBER {
            return Err(Error::OutOfRange {
                field: "Mark5B frame number",
                value: self.frame_number.into(),
                allowed: "0..=32767",
            });
        }
        if self.mjd_mod_1000 > 999 {
            return Err(Error::OutOfRange {
                field: "Mark5B MJD mod 1000",
                value: self.mjd_mod_1000.into(),
                allowed: "0..=999",
            });
        }
        if self.seconds_of_day >= SECONDS_PER_DAY {
            return Err(Error::OutOfRange {
                field: "Mark5B second of day",
                value: self.seconds_of_day.into(),
                allowed: "0..=86399",
            });
        }
        if u32::from(self.fraction_0p1ms) >= FRACTION_UNITS {
            return Err(Error::OutOfRange {
                field: "Mark5B fraction of second",
                value: self.fraction_0p1ms.into(),
                allowed: "0..=9999 (units of 0.1 ms)",
            });
        }
        Ok(())
    }

    /// The BCD time code words 2 and 3 (CRC bits zero).
    fn time_code(&self) -> Result<(u32, u32)> {
        let jday = bcd_encode(self.mjd_mod_1000.into(), 3, "Mark5B MJD mod 1000")?;
        let secs = bcd_encode(self.seconds_of_day, 5, "Mark5B second of day")?;
        let frac = bcd_encode(self.fraction_0p1ms.into(), 4, "Mark5B fraction of second")?;
        Ok((
            (jday << field::W2_JDAY_SHIFT) | secs,
            frac << field::W3_FRACTION_SHIFT,
        ))
    }

    /// The CRC of this header's time code.
    pub fn expected_crc(&self) -> Result<u16> {
        self.validate()?;
        let (w2, w3) = self.time_code()?;
        Ok(header_crc(w2, w3))
    }

    /// This header with `crc` set to the CRC of its time code.
    pub fn with_crc(mut self) -> Result<Self> {
        self.crc = self.expected_crc()?;
        Ok(self)
    }

    /// Writes the header into the start of `buffer`, computing the CRC; the payload is untouched.
    pub fn emit(&self, buffer: &mut [u8]) -> Result<()> {
        self.validate()?;
        if buffer.len() < HEADER_LEN {
            return Err(Error::Truncated {
                what: "Mark5B header",
                need: HEADER_LEN,
                got: buffer.len(),
            });
        }
        let (w2, w3) = self.time_code()?;
        let mut h = Mark5bHeader::new_unchecked(buffer);
        h.set_sync(SYNC_WORD);
        h.set_word1(self.user, self.test_vector, self.frame_number);
        h.set_raw_word(2, w2);
        h.set_raw_word(3, w3 | u32::from(header_crc(w2, w3)));
        Ok(())
    }

    /// Emits the header into a new array.
    pub fn to_bytes(&self) -> Result<[u8; HEADER_LEN]> {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut out)?;
        Ok(out)
    }

    /// The header of frame `frame_number` of POSIX second `unix_second` in a stream of `frame_rate` frames per
    /// second: MJD mod 1000, second of day, and the frame's start within the second truncated to 0.1 ms.
    pub fn for_frame(unix_second: i64, frame_number: u16, frame_rate: u32, user: u16) -> Result<Self> {
        check_frame_rate(frame_rate)?;
        if u32::from(frame_number) >= frame_rate {
            return Err(Error::OutOfRange {
                field: "Mark5B frame number",
                value: frame_number.into(),
                allowed: "below the frame rate",
            });
        }
        let (mjd, sod) = UtcTime::from_unix(unix_second, 0).mjd();
        if mjd < 0 {
            return Err(Error::OutOfRange {
                field: "Mark5B time",
                value: 0,
                allowed: "MJD 0 (1858-11-17) or later",
            });
        }
        let fraction = u64::from(frame_number) * u64::from(FRACTION_UNITS) / u64::from(frame_rate);
        Mark5bHeaderRepr {
            user,
            test_vector: false,
            frame_number,
            mjd_mod_1000: (mjd % 1000) as u16,
            seconds_of_day: sod,
            fraction_0p1ms: fraction as u16,
            crc: 0,
        }
        .with_crc()
    }

    /// The header of the frame starting at `t` in a stream of `frame_rate` frames per second; errors unless
    /// `t` lies within 1 ns of a frame boundary.
    pub fn from_utc(t: UtcTime, frame_rate: u32, user: u16) -> Result<Self> {
        check_frame_rate(frame_rate)?;
        let rate = u64::from(frame_rate);
        let scaled = u64::from(t.nanos) * rate;
        let frame = (scaled + 500_000_000) / 1_000_000_000;
        let start_ns = frame * 1_000_000_000 / rate;
        if start_ns.abs_diff(u64::from(t.nanos)) > 1 {
            return Err(Error::Invalid {
                field: "Mark5B time",
                reason: "not on a frame boundary at this frame rate",
            });
        }
        if frame == rate {
            return Self::for_frame(t.unix_seconds + 1, 0, frame_rate, user);
        }
        Self::for_frame(t.unix_seconds, frame as u16, frame_rate, user)
    }

    /// Full MJD of this header: the day congruent to `mjd_mod_1000` nearest to `reference_mjd` (which must
    /// therefore lie within 500 days of the true date).
    pub fn mjd(&self, reference_mjd: i64) -> i64 {
        resolve_mjd(self.mjd_mod_1000, reference_mjd)
    }

    /// POSIX second of this header, resolving the MJD with `reference_mjd`.
    pub fn unix_second(&self, reference_mjd: i64) -> i64 {
        (self.mjd(reference_mjd) - MJD_UNIX_EPOCH) * 86_400 + i64::from(self.seconds_of_day)
    }

    /// Start of this frame from the frame number at `frame_rate` frames per second, resolving the MJD with
    /// `reference_mjd`. (The header's 0.1 ms fraction is too coarse above 512 Mb/s, so it is not used.)
    pub fn to_utc(&self, reference_mjd: i64, frame_rate: u32) -> Result<UtcTime> {
        check_frame_rate(frame_rate)?;
        if u32::from(self.frame_number) >= frame_rate {
            return Err(Error::OutOfRange {
                field: "Mark5B frame number",
                value: self.frame_number.into(),
                allowed: "below the frame rate",
            });
        }
        let nanos = u64::from(self.frame_number) * 1_000_000_000 / u64::from(frame_rate);
        Ok(UtcTime::from_unix(self.unix_second(reference_mjd), nanos as u32))
    }

    /// Whether the 0.1 ms fraction agrees with the frame number at `frame_rate` (truncated, as written).
    pub fn fraction_matches(&self, frame_rate: u32) -> bool {
        frame_rate != 0
            && u64::from(self.frame_number) * u64::from(FRACTION_UNITS) / u64::from(frame_rate)
                == u64::from(self.fraction_0p1ms)
    }
}

/// The MJD congruent to `mjd_mod_1000` modulo 1000 nearest to `reference_mjd`.
pub fn resolve_mjd(mjd_mod_1000: u16, reference_mjd: i64) -> i64 {
    let base = reference_mjd - reference_mjd.rem_euclid(1000) + i64::from(mjd_mod_1000 % 1000);
    [base - 1000, base, base + 1000]
        .into_iter()
        .min_by_key(|m| (m - reference_mjd).abs())
        .unwrap_or(base)
}

fn check_frame_rate(frame_rate: u32) -> Result<()> {
    if frame_rate == 0 || frame_rate > MAX_FRAME_RATE {
        return Err(Error::OutOfRange {
            field: "Mark5B frame rate",
            value: frame_rate.into(),
            allowed: "1..=32768 frames per second",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// First three headers of baseband's sample.m5b (a real Mark5B recording), words 0..3.
    const SAMPLE_M5B: [[u32; 4]; 3] = [
        [0xabaddeed, 0xbead0000, 0x82119801, 0x0000975d],
        [0xabaddeed, 0xbead0001, 0x82119801, 0x00011758],
        [0xabaddeed, 0xbead0002, 0x82119801, 0x00039757],
    ];

    fn bytes_of(words: [u32; 4]) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, w) in words.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    #[test]
    fn crc_is_crc16_buypass() {
        assert_eq!(crc16(b"123456789"), 0xfee8);
    }

    #[test]
    fn reads_and_writes_real_headers() {
        for (i, words) in SAMPLE_M5B.iter().enumerate() {
            let bytes = bytes_of(*words);
            let r = Mark5bHeaderRepr::parse_bytes(&bytes).unwrap();
            assert_eq!(r.user, 0xbead);
            assert!(!r.test_vector);
            assert_eq!(r.frame_number, i as u16);
            assert_eq!(r.mjd_mod_1000, 821);
            assert_eq!(r.seconds_of_day, 19801);
            assert_eq!(r.to_bytes().unwrap(), bytes);
            // The sample is 6400 frames/s (512 Mb/s); fractions are truncated to 0.1 ms.
            assert!(r.fraction_matches(6400));
            assert_eq!(
                Mark5bHeaderRepr::for_frame(r.unix_second(57_000), i as u16, 6400, 0xbead).unwrap(),
                r
            );
        }
        let r = Mark5bHeaderRepr::parse_bytes(&bytes_of(SAMPLE_M5B[2])).unwrap();
        assert_eq!(r.fraction_0p1ms, 3);
        assert_eq!(r.mjd(57_000), 56_821);
        assert_eq!(r.to_utc(57_000, 6400).unwrap().nanos, 312_500);
    }

    #[test]
    fn errors_name_the_field() {
        let mut b = bytes_of(SAMPLE_M5B[0]);
        b[12] ^= 1;
        let e = Mark5bHeaderRepr::parse_bytes(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::BadCrc {
                    what: "Mark5B header",
                    found: 0x975c,
                    computed: 0x975d
                }
            ),
            "{e}"
        );

        let mut b = bytes_of(SAMPLE_M5B[0]);
        let mut h = Mark5bHeader::new_unchecked(&mut b[..]);
        h.set_time_code(0x8a1, 0x19801, 0);
        let e = Mark5bHeaderRepr::parse_bytes(&b).unwrap_err();
        assert!(e.to_string().contains("Mark5B MJD (BCD JJJ)"), "{e}");
        let mut h = Mark5bHeader::new_unchecked(&mut b[..]);
        h.set_time_code(0x821, 0x86400, 0);
        let e = Mark5bHeaderRepr::parse_bytes(&b).unwrap_err();
        assert!(e.to_string().contains("second of day"), "{e}");

        let e = Mark5bHeaderRepr::parse_bytes(&[0u8; 16]).unwrap_err();
        assert!(matches!(e, Error::BadSync { .. }), "{e}");
        let e = Mark5bHeaderRepr::parse_bytes(&[0u8; 15]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Truncated {
                    need: 16,
                    got: 15,
                    ..
                }
            ),
            "{e}"
        );
        let e = Mark5bFrame::new_checked(&[0u8; 10015][..]).unwrap_err();
        assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
        assert!(Mark5bHeaderRepr::for_frame(0, 6400, 6400, 0).is_err());
        assert!(Mark5bHeaderRepr::for_frame(0, 0, 40_000, 0).is_err());
        assert!(bcd_encode(1000, 3, "x").is_err());
    }

    #[test]
    fn frames_and_fill() {
        let mut frame = vec![0u8; FRAME_LEN];
        let r = Mark5bHeaderRepr::for_frame(1_704_067_200, 5, 12800, 7).unwrap();
        r.emit(&mut frame).unwrap();
        for w in frame[HEADER_LEN..].chunks_exact_mut(4) {
            w.copy_from_slice(&crate::fill::FILL_BYTES);
        }
        let f = Mark5bFrame::new_checked(&frame[..]).unwrap();
        assert!(crate::fill::is_fill_words(f.payload()));
        assert!(crate::fill::is_mark5b_fill(f.as_bytes()));
        assert_eq!(Mark5bHeaderRepr::parse(&f.header()).unwrap(), r);
        assert_eq!(r.fraction_0p1ms, 3); // 5/12800 s = 0.390625 ms
    }

    #[test]
    fn utc_conversion() {
        let t = UtcTime::from_unix(1_704_067_200 + 3661, 390_625);
        let r = Mark5bHeaderRepr::from_utc(t, 12800, 0).unwrap();
        assert_eq!(r.frame_number, 5);
        assert_eq!(r.to_utc(60_300, 12800).unwrap(), t);
        assert!(Mark5bHeaderRepr::from_utc(UtcTime::from_unix(0, 1000), 12800, 0).is_err());
        let almost = UtcTime::from_unix(100, 999_999_999);
        let r = Mark5bHeaderRepr::from_utc(almost, 12800, 0).unwrap();
        assert_eq!((r.seconds_of_day, r.frame_number), (101, 0));
    }

    #[test]
    fn mjd_resolution() {
        assert_eq!(resolve_mjd(821, 56_900), 56_821);
        assert_eq!(resolve_mjd(999, 60_001), 59_999);
        assert_eq!(resolve_mjd(1, 59_999), 60_001);
    }

    fn arb_repr() -> impl Strategy<Value = Mark5bHeaderRepr> {
        (
            any::<u16>(),
            any::<bool>(),
            0..=MAX_FRAME_NUMBER,
            0u16..1000,
            0u32..86_400,
            0u16..10_000,
        )
            .prop_map(|(user, tv, frame, jday, sod, frac)| {
                Mark5bHeaderRepr {
                    user,
                    test_vector: tv,
                    frame_number: frame,
                    mjd_mod_1000: jday,
                    seconds_of_day: sod,
                    fraction_0p1ms: frac,
                    crc: 0,
                }
                .with_crc()
                .unwrap()
            })
    }

    proptest! {
        #[test]
        fn repr_round_trips(repr in arb_repr()) {
            let bytes = repr.to_bytes().unwrap();
            prop_assert_eq!(Mark5bHeaderRepr::parse_bytes(&bytes).unwrap(), repr);
        }

        #[test]
        fn bcd_round_trips(v in 0u32..100_000) {
            let bcd = bcd_encode(v, 5, "x").unwrap();
            prop_assert_eq!(bcd_decode(bcd, 5, "x").unwrap(), v);
            prop_assert_eq!(format!("{bcd:05x}"), format!("{v:05}"));
        }

        #[test]
        fn time_round_trips(unix in 0i64..4_000_000_000, rate in 1u32..=MAX_FRAME_RATE, f in 0u32..MAX_FRAME_RATE) {
            let frame = (f % rate) as u16;
            let r = Mark5bHeaderRepr::for_frame(unix, frame, rate, 0).unwrap();
            let reference_mjd = unix.div_euclid(86_400) + MJD_UNIX_EPOCH + 321;
            let t = r.to_utc(reference_mjd, rate).unwrap();
            prop_assert_eq!(t.unix_seconds, unix);
            prop_assert_eq!(Mark5bHeaderRepr::from_utc(t, rate, 0).unwrap(), r);
            prop_assert!(r.fraction_matches(rate));
        }

        #[test]
        fn single_bit_errors_are_caught(repr in arb_repr(), bit in 64usize..128) {
            let mut bytes = repr.to_bytes().unwrap();
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Mark5bHeaderRepr::parse_bytes(&bytes).is_err());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Mark5bHeaderRepr::parse_bytes(&bytes);
            let _ = Mark5bFrame::new_checked(&bytes[..]);
        }
    }
}
