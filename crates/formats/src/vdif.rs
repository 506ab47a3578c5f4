//! VDIF (VLBI Data Interchange Format) frames: a 32-byte header (16 bytes with the legacy bit) followed by
//! the payload. Eight little-endian 32-bit words; see the VDIF specification
//! (VDIF Task Force, release 1.0, 2009: <https://vlbi.org/vlbi-standards/vdif/>).
//!
//! [`VdifHeader`] is a zero-copy view over the header words, [`VdifFrame`] a view over a whole frame whose
//! length field must match the buffer, and [`VdifHeaderRepr`] the parsed form with `parse`/`emit`.

use crate::error::{Error, Result};

/// Length of a standard VDIF header.
pub const HEADER_LEN: usize = 32;
/// Length of a legacy VDIF header (words 0..3 only).
pub const LEGACY_HEADER_LEN: usize = 16;
/// Sync word in word 5 of EDV 1 and EDV 3 headers.
pub const EDV_SYNC_WORD: u32 = 0xACAB_FEED;
/// Largest frame length the 24-bit length field (units of 8 bytes) can express.
pub const MAX_FRAME_LEN: usize = ((1 << 24) - 1) * 8;
/// Largest thread ID (10 bits).
pub const MAX_THREAD_ID: u16 = 1023;
/// Largest reference epoch (6 bits: half-years since 2000).
pub const MAX_EPOCH: u8 = 63;
/// Largest seconds-from-epoch value (30 bits).
pub const MAX_SECONDS: u32 = (1 << 30) - 1;
/// Largest frame number within a second (24 bits).
pub const MAX_FRAME_NUMBER: u32 = (1 << 24) - 1;
/// Frame length fixed by EDV 3 (VLBA RDBE).
pub const EDV3_FRAME_LEN: usize = 5032;

/// Bit positions of the header fields, by word.
mod field {
    pub const W0_INVALID: u32 = 1 << 31;
    pub const W0_LEGACY: u32 = 1 << 30;
    pub const W0_SECONDS: u32 = (1 << 30) - 1;
    pub const W1_EPOCH_SHIFT: u32 = 24;
    pub const W1_EPOCH_MASK: u32 = 0x3f;
    pub const W1_FRAME: u32 = (1 << 24) - 1;
    pub const W2_VERSION_SHIFT: u32 = 29;
    pub const W2_LOG2CH_SHIFT: u32 = 24;
    pub const W2_LOG2CH_MASK: u32 = 0x1f;
    pub const W2_LENGTH: u32 = (1 << 24) - 1;
    pub const W3_COMPLEX: u32 = 1 << 31;
    pub const W3_BITS_SHIFT: u32 = 26;
    pub const W3_BITS_MASK: u32 = 0x1f;
    pub const W3_THREAD_SHIFT: u32 = 16;
    pub const W3_THREAD_MASK: u32 = 0x3ff;
    pub const W3_STATION: u32 = 0xffff;
    pub const W4_EDV_SHIFT: u32 = 24;
    pub const W4_RATE: u32 = (1 << 23) - 1;
    pub const W4_RATE_MHZ: u32 = 1 << 23;
}

/// A read/write view over a VDIF header at the start of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VdifHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VdifHeader<T> {
    /// Wraps `buffer` without any check. Accessors panic if it is shorter than the header they touch.
    pub const fn new_unchecked(buffer: T) -> Self {
        VdifHeader { buffer }
    }

    /// Wraps `buffer` after [`check`](Self::check).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let header = Self::new_unchecked(buffer);
        header.check()?;
        Ok(header)
    }

    /// Verifies that the buffer holds the whole header and that the header is self-consistent: the frame
    /// length covers at least the header, EDV 1/3 carry their sync word, EDV 3 has its fixed length.
    pub fn check(&self) -> Result<()> {
        let got = self.buffer.as_ref().len();
        if got < LEGACY_HEADER_LEN {
            return Err(Error::Truncated {
                what: "VDIF header",
                need: LEGACY_HEADER_LEN,
                got,
            });
        }
        let need = self.header_len();
        if got < need {
            return Err(Error::Truncated {
                what: "VDIF header",
                need,
                got,
            });
        }
        let len = self.frame_len();
        if len < need {
            return Err(Error::OutOfRange {
                field: "VDIF frame length",
                value: len as u64,
                allowed: "at least the header length",
            });
        }
        if !self.legacy() {
            match self.edv() {
                1 | 3 => {
                    let sync = self.word(5);
                    if sync != EDV_SYNC_WORD {
                        return Err(Error::BadSync {
                            what: "VDIF EDV",
                            found: sync,
                            expected: EDV_SYNC_WORD,
                        });
                    }
                    if self.edv() == 3 && len != EDV3_FRAME_LEN {
                        return Err(Error::LengthMismatch {
                            field: "VDIF EDV 3 frame length",
                            header: len as u64,
                            actual: EDV3_FRAME_LEN as u64,
                        });
                    }
                }
                0 if (4..8).any(|w| self.word(w) != 0) => {
                    return Err(Error::Invalid {
                        field: "VDIF EDV 0 extended words",
                        reason: "words 4..7 must be zero when EDV is 0",
                    });
                }
                _ => {}
            }
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

    /// Raw header word `index` (0..8; 0..4 for a legacy header).
    #[inline]
    pub fn raw_word(&self, index: usize) -> u32 {
        self.word(index)
    }

    /// Invalid-data flag: the backend marks frames whose payload should not be correlated.
    #[inline]
    pub fn invalid(&self) -> bool {
        self.word(0) & field::W0_INVALID != 0
    }
    /// Legacy flag: only words 0..3 are present.
    #[inline]
    pub fn legacy(&self) -> bool {
        self.word(0) & field::W0_LEGACY != 0
    }
    /// Header length implied by the legacy flag.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.legacy() {
            LEGACY_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
    /// Seconds since the reference epoch.
    #[inline]
    pub fn seconds(&self) -> u32 {
        self.word(0) & field::W0_SECONDS
    }
    /// Reference epoch: half-years since 2000-01-01.
    #[inline]
    pub fn epoch(&self) -> u8 {
        ((self.word(1) >> field::W1_EPOCH_SHIFT) & field::W1_EPOCH_MASK) as u8
    }
    /// Frame number within the second, from 0.
    #[inline]
    pub fn frame_number(&self) -> u32 {
        self.word(1) & field::W1_FRAME
    }
    /// VDIF version number (3 bits).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word(2) >> field::W2_VERSION_SHIFT) as u8
    }
    /// log2 of the number of channels.
    #[inline]
    pub fn log2_channels(&self) -> u8 {
        ((self.word(2) >> field::W2_LOG2CH_SHIFT) & field::W2_LOG2CH_MASK) as u8
    }
    /// Number of channels (a power of two).
    #[inline]
    pub fn channels(&self) -> u32 {
        1u32 << self.log2_channels()
    }
    /// Frame length in bytes, header included.
    #[inline]
    pub fn frame_len(&self) -> usize {
        (self.word(2) & field::W2_LENGTH) as usize * 8
    }
    /// Payload length in bytes.
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.frame_len().saturating_sub(self.header_len())
    }
    /// Complex-data flag.
    #[inline]
    pub fn complex(&self) -> bool {
        self.word(3) & field::W3_COMPLEX != 0
    }
    /// Bits per sample (1..=32).
    #[inline]
    pub fn bits_per_sample(&self) -> u8 {
        (((self.word(3) >> field::W3_BITS_SHIFT) & field::W3_BITS_MASK) + 1) as u8
    }
    /// Thread ID (0..=1023).
    #[inline]
    pub fn thread_id(&self) -> u16 {
        ((self.word(3) >> field::W3_THREAD_SHIFT) & field::W3_THREAD_MASK) as u16
    }
    /// Station ID as the raw 16-bit field.
    #[inline]
    pub fn station_id(&self) -> u16 {
        (self.word(3) & field::W3_STATION) as u16
    }
    /// Station ID as two bytes, first character first (the high byte).
    #[inline]
    pub fn station_bytes(&self) -> [u8; 2] {
        self.station_id().to_be_bytes()
    }
    /// Extended data version (0 for a legacy header, which has no word 4).
    #[inline]
    pub fn edv(&self) -> u8 {
        if self.legacy() {
            0
        } else {
            (self.word(4) >> field::W4_EDV_SHIFT) as u8
        }
    }
    /// Sample rate in Hz carried by EDV 1 and EDV 3 headers.
    pub fn sample_rate_hz(&self) -> Option<u64> {
        match self.edv() {
            1 | 3 => {
                let w = self.word(4);
                let unit = if w & field::W4_RATE_MHZ != 0 {
                    1_000_000
                } else {
                    1_000
                };
                Some(u64::from(w & field::W4_RATE) * unit)
            }
            _ => None,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VdifHeader<T> {
    #[inline]
    fn set_word(&mut self, index: usize, value: u32) {
        let o = index * 4;
        self.buffer.as_mut()[o..o + 4].copy_from_slice(&value.to_le_bytes());
    }
    #[inline]
    fn update(&mut self, index: usize, mask: u32, shift: u32, value: u32) {
        let w = (self.word(index) & !(mask << shift)) | ((value & mask) << shift);
        self.set_word(index, w);
    }

    /// Writes raw header word `index`.
    pub fn set_raw_word(&mut self, index: usize, value: u32) {
        self.set_word(index, value)
    }
    pub fn set_invalid(&mut self, value: bool) {
        self.update(0, 1, 31, value as u32)
    }
    pub fn set_legacy(&mut self, value: bool) {
        self.update(0, 1, 30, value as u32)
    }
    /// Sets seconds since epoch; values are masked to 30 bits (use [`VdifHeaderRepr`] for checking).
    pub fn set_seconds(&mut self, value: u32) {
        self.update(0, field::W0_SECONDS, 0, value)
    }
    pub fn set_epoch(&mut self, value: u8) {
        self.update(1, field::W1_EPOCH_MASK, field::W1_EPOCH_SHIFT, value as u32)
    }
    pub fn set_frame_number(&mut self, value: u32) {
        self.update(1, field::W1_FRAME, 0, value)
    }
    /// Sets second and frame number together: two word writes, the per-frame hot path of a generator.
    #[inline]
    pub fn set_time(&mut self, seconds: u32, frame_number: u32) {
        let w0 = (self.word(0) & !field::W0_SECONDS) | (seconds & field::W0_SECONDS);
        let w1 = (self.word(1) & !field::W1_FRAME) | (frame_number & field::W1_FRAME);
        self.set_word(0, w0);
        self.set_word(1, w1);
    }
    pub fn set_version(&mut self, value: u8) {
        self.update(2, 0x7, field::W2_VERSION_SHIFT, value as u32)
    }
    pub fn set_log2_channels(&mut self, value: u8) {
        self.update(2, field::W2_LOG2CH_MASK, field::W2_LOG2CH_SHIFT, value as u32)
    }
    /// Sets the frame length in bytes (must be a multiple of 8; the low 3 bits are dropped).
    pub fn set_frame_len(&mut self, bytes: usize) {
        self.update(2, field::W2_LENGTH, 0, (bytes / 8) as u32)
    }
    pub fn set_complex(&mut self, value: bool) {
        self.update(3, 1, 31, value as u32)
    }
    /// Sets bits per sample (1..=32).
    pub fn set_bits_per_sample(&mut self, bits: u8) {
        self.update(
            3,
            field::W3_BITS_MASK,
            field::W3_BITS_SHIFT,
            u32::from(bits.saturating_sub(1)),
        )
    }
    pub fn set_thread_id(&mut self, value: u16) {
        self.update(3, field::W3_THREAD_MASK, field::W3_THREAD_SHIFT, value as u32)
    }
    pub fn set_station_id(&mut self, value: u16) {
        self.update(3, field::W3_STATION, 0, value as u32)
    }
    /// Sets the EDV byte of word 4 (no effect on a legacy header's missing word 4 is checked by the caller).
    pub fn set_edv(&mut self, value: u8) {
        self.update(4, 0xff, field::W4_EDV_SHIFT, value as u32)
    }
}

/// A view over one whole VDIF frame: the header plus exactly `frame_len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VdifFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VdifFrame<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        VdifFrame { buffer }
    }

    /// Wraps `buffer` after checking the header and that the frame length field equals the buffer length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let len = buffer.as_ref().len();
        if len % 8 != 0 {
            return Err(Error::NotMultiple {
                field: "VDIF frame length",
                value: len as u64,
                unit: 8,
            });
        }
        let header = VdifHeader::new_checked(buffer.as_ref())?;
        if header.frame_len() != len {
            return Err(Error::LengthMismatch {
                field: "VDIF frame length field",
                header: header.frame_len() as u64,
                actual: len as u64,
            });
        }
        Ok(VdifFrame { buffer })
    }

    /// The header view (borrowing).
    pub fn header(&self) -> VdifHeader<&[u8]> {
        VdifHeader::new_unchecked(self.buffer.as_ref())
    }

    /// The payload bytes following the header.
    pub fn payload(&self) -> &[u8] {
        let h = self.header().header_len();
        &self.buffer.as_ref()[h..]
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VdifFrame<T> {
    pub fn header_mut(&mut self) -> VdifHeader<&mut [u8]> {
        VdifHeader::new_unchecked(self.buffer.as_mut())
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header().header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// Sample rate as EDV 1/3 carry it: 23 bits of value in kHz or MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EdvSampleRate {
    pub value: u32,
    pub mhz: bool,
}

impl EdvSampleRate {
    /// Encodes `hz` in MHz if it is a whole number of MHz, else in kHz; errors if it fits neither.
    pub fn from_hz(hz: u64) -> Result<Self> {
        let max = u64::from(field::W4_RATE);
        if hz % 1_000_000 == 0 && hz / 1_000_000 <= max {
            Ok(EdvSampleRate {
                value: (hz / 1_000_000) as u32,
                mhz: true,
            })
        } else if hz % 1_000 == 0 && hz / 1_000 <= max {
            Ok(EdvSampleRate {
                value: (hz / 1_000) as u32,
                mhz: false,
            })
        } else {
            Err(Error::OutOfRange {
                field: "VDIF EDV sample rate",
                value: hz,
                allowed: "a whole number of kHz below 2^23 kHz, or of MHz below 2^23 MHz",
            })
        }
    }

    pub fn hz(&self) -> u64 {
        u64::from(self.value) * if self.mhz { 1_000_000 } else { 1_000 }
    }
}

/// The parsed form of a VDIF header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VdifHeaderRepr {
    pub invalid: bool,
    pub legacy: bool,
    pub seconds: u32,
    pub epoch: u8,
    pub frame_number: u32,
    pub version: u8,
    pub log2_channels: u8,
    /// Frame length in bytes, header included.
    pub frame_len: usize,
    pub complex: bool,
    pub bits_per_sample: u8,
    pub thread_id: u16,
    pub station_id: u16,
    /// Extended data version; ignored for a legacy header.
    pub edv: u8,
    /// Low 24 bits of word 4 (EDV 1/3: sample rate and its unit) and words 5..7, as found.
    pub edv_words: [u32; 4],
}

impl Default for VdifHeaderRepr {
    fn default() -> Self {
        VdifHeaderRepr {
            invalid: false,
            legacy: false,
            seconds: 0,
            epoch: 0,
            frame_number: 0,
            version: 0,
            log2_channels: 0,
            frame_len: 8224,
            complex: false,
            bits_per_sample: 2,
            thread_id: 0,
            station_id: 0,
            edv: 0,
            edv_words: [0; 4],
        }
    }
}

impl VdifHeaderRepr {
    /// Reads a header view into its parsed form after checking it.
    pub fn parse<T: AsRef<[u8]>>(header: &VdifHeader<T>) -> Result<Self> {
        header.check()?;
        let legacy = header.legacy();
        let mut edv_words = [0u32; 4];
        if !legacy {
            edv_words[0] = header.word(4) & 0x00ff_ffff;
            edv_words[1] = header.word(5);
            edv_words[2] = header.word(6);
            edv_words[3] = header.word(7);
        }
        let repr = VdifHeaderRepr {
            invalid: header.invalid(),
            legacy,
            seconds: header.seconds(),
            epoch: header.epoch(),
            frame_number: header.frame_number(),
            version: header.version(),
            log2_channels: header.log2_channels(),
            frame_len: header.frame_len(),
            complex: header.complex(),
            bits_per_sample: header.bits_per_sample(),
            thread_id: header.thread_id(),
            station_id: header.station_id(),
            edv: header.edv(),
            edv_words,
        };
        Ok(repr)
    }

    /// A header for EDV 1 or 3 with the sample rate and sync word filled in.
    pub fn with_sample_rate(mut self, edv: u8, sample_rate: EdvSampleRate) -> Self {
        self.edv = edv;
        self.edv_words[0] = sample_rate.value | if sample_rate.mhz { field::W4_RATE_MHZ } else { 0 };
        self.edv_words[1] = EDV_SYNC_WORD;
        self
    }

    /// Station ID from two ASCII characters, first in the high byte.
    pub fn station_from_str(s: &str) -> Result<u16> {
        let b = s.as_bytes();
        if b.len() != 2 || !b.iter().all(|c| c.is_ascii_graphic()) {
            return Err(Error::Invalid {
                field: "VDIF station ID",
                reason: "must be two printable ASCII characters",
            });
        }
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Station ID as text: its two characters when both are printable ASCII, else `0x` and four hex digits
    /// (the inverse of [`VdifHeaderRepr::station_from_str`] for printable IDs).
    pub fn station_to_string(id: u16) -> String {
        let b = id.to_be_bytes();
        if b.iter().all(|c| c.is_ascii_graphic()) {
            String::from_utf8_lossy(&b).into_owned()
        } else {
            format!("0x{id:04x}")
        }
    }

    /// Header length this header emits.
    pub fn header_len(&self) -> usize {
        if self.legacy {
            LEGACY_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Number of channels.
    pub fn channels(&self) -> u32 {
        1 << self.log2_channels
    }

    /// Payload length in bytes.
    pub fn payload_len(&self) -> usize {
        self.frame_len - self.header_len()
    }

    /// Checks every field against the layout, naming the first one at fault.
    pub fn validate(&self) -> Result<()> {
        fn range(field: &'static str, value: u64, max: u64, allowed: &'static str) -> Result<()> {
            if value > max {
                Err(Error::OutOfRange {
                    field,
                    value,
                    allowed,
                })
            } else {
                Ok(())
            }
        }
        range(
            "VDIF seconds from epoch",
            self.seconds.into(),
            MAX_SECONDS.into(),
            "0..=2^30-1",
        )?;
        range(
            "VDIF reference epoch",
            self.epoch.into(),
            MAX_EPOCH.into(),
            "0..=63",
        )?;
        range(
            "VDIF frame number",
            self.frame_number.into(),
            MAX_FRAME_NUMBER.into(),
            "0..=2^24-1",
        )?;
        range("VDIF version", self.version.into(), 7, "0..=7")?;
        range("VDIF log2(channels)", self.log2_channels.into(), 31, "0..=31")?;
        range(
            "VDIF thread ID",
            self.thread_id.into(),
            MAX_THREAD_ID.into(),
            "0..=1023",
        )?;
        if self.bits_per_sample == 0 || self.bits_per_sample > 32 {
            return Err(Error::OutOfRange {
                field: "VDIF bits per sample",
                value: self.bits_per_sample.into(),
                allowed: "1..=32",
            });
        }
        if self.frame_len % 8 != 0 {
            return Err(Error::NotMultiple {
                field: "VDIF frame length",
                value: self.frame_len as u64,
                unit: 8,
            });
        }
        if self.frame_len < self.header_len() || self.frame_len > MAX_FRAME_LEN {
            return Err(Error::OutOfRange {
                field: "VDIF frame length",
                value: self.frame_len as u64,
                allowed: "header length ..= 134217720 bytes",
            });
        }
        if !self.legacy {
            if self.edv_words[0] > 0x00ff_ffff {
                return Err(Error::OutOfRange {
                    field: "VDIF word 4 EDV data",
                    value: self.edv_words[0].into(),
                    allowed: "24 bits",
                });
            }
            match self.edv {
                0 if self.edv_words != [0; 4] => {
                    return Err(Error::Invalid {
                        field: "VDIF EDV 0 extended words",
                        reason: "words 4..7 must be zero when EDV is 0",
                    })
                }
                1 | 3 if self.edv_words[1] != EDV_SYNC_WORD => {
                    return Err(Error::BadSync {
                        what: "VDIF EDV",
                        found: self.edv_words[1],
                        expected: EDV_SYNC_WORD,
                    })
                }
                3 if self.frame_len != EDV3_FRAME_LEN => {
                    return Err(Error::LengthMismatch {
                        field: "VDIF EDV 3 frame length",
                        header: self.frame_len as u64,
                        actual: EDV3_FRAME_LEN as u64,
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Writes the header into the start of `buffer` after [`validate`](Self::validate); the payload is untouched.
    pub fn emit(&self, buffer: &mut [u8]) -> Result<()> {
        self.validate()?;
        let need = self.header_len();
        if buffer.len() < need {
            return Err(Error::Truncated {
                what: "VDIF header",
                need,
                got: buffer.len(),
            });
        }
        let w0 = (u32::from(self.invalid) << 31) | (u32::from(self.legacy) << 30) | self.seconds;
        let w1 = (u32::from(self.epoch) << 24) | self.frame_number;
        let w2 = (u32::from(self.version) << 29)
            | (u32::from(self.log2_channels) << 24)
            | (self.frame_len / 8) as u32;
        let w3 = (u32::from(self.complex) << 31)
            | (u32::from(self.bits_per_sample - 1) << 26)
            | (u32::from(self.thread_id) << 16)
            | u32::from(self.station_id);
        let mut words = [w0, w1, w2, w3, 0, 0, 0, 0];
        if !self.legacy {
            words[4] = (u32::from(self.edv) << 24) | self.edv_words[0];
            words[5..8].copy_from_slice(&self.edv_words[1..4]);
        }
        for (i, w) in words.iter().take(need / 4).enumerate() {
            buffer[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        Ok(())
    }

    /// Emits the header into a new 32- or 16-byte array.
    pub fn to_bytes(&self) -> Result<[u8; HEADER_LEN]> {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut out)?;
        Ok(out)
    }

    /// Samples carried by one frame: payload bits / (bits x channels x (2 if complex)).
    pub fn samples_per_frame(&self) -> Result<u64> {
        samples_per_frame(
            self.payload_len(),
            self.bits_per_sample,
            self.channels(),
            self.complex,
        )
    }
}

/// Samples per frame for a payload of `payload_len` bytes; errors unless the payload holds a whole number
/// of samples for every channel.
pub fn samples_per_frame(payload_len: usize, bits: u8, channels: u32, complex: bool) -> Result<u64> {
    let bits_per_time = u64::from(bits) * u64::from(channels) * if complex { 2 } else { 1 };
    if bits_per_time == 0 {
        return Err(Error::Invalid {
            field: "VDIF sample size",
            reason: "bits and channels must be non-zero",
        });
    }
    let payload_bits = payload_len as u64 * 8;
    if payload_bits % bits_per_time != 0 {
        return Err(Error::NotMultiple {
            field: "VDIF payload bits",
            value: payload_bits,
            unit: bits_per_time,
        });
    }
    Ok(payload_bits / bits_per_time)
}

/// How round a sample rate is, as VLBI backends set them: 2 for a whole number of MHz, 1 for a whole
/// number of kHz (the unit EDV 1 and 3 encode), 0 otherwise.
pub fn sample_rate_roundness(sample_rate_hz: u64) -> u8 {
    if sample_rate_hz == 0 {
        0
    } else if sample_rate_hz % 1_000_000 == 0 {
        2
    } else if sample_rate_hz % 1_000 == 0 {
        1
    } else {
        0
    }
}

/// A frame rate learned as "highest frame number + 1" is one too low when the last frame of every second
/// was lost. Returns `learned + 1` when that makes the sample rate (`rate x samples_per_frame`) rounder
/// ([`sample_rate_roundness`]), i.e. when the data most likely lost its last frame of each second.
pub fn corrected_learned_rate(learned: u32, samples_per_frame: u64) -> Option<u32> {
    let sr = |r: u32| u64::from(r).checked_mul(samples_per_frame);
    let next = learned.checked_add(1)?;
    match (sr(learned), sr(next)) {
        (Some(a), Some(b)) if sample_rate_roundness(b) > sample_rate_roundness(a) => Some(next),
        _ => None,
    }
}

/// Frames per second per thread for a sample rate (complex samples per second for complex data).
/// Errors unless a second holds a whole number of frames, as VDIF requires.
pub fn frame_rate(
    sample_rate_hz: u64,
    bits: u8,
    channels: u32,
    complex: bool,
    payload_len: usize,
) -> Result<u32> {
    let spf = samples_per_frame(payload_len, bits, channels, complex)?;
    if spf == 0 {
        return Err(Error::Invalid {
            field: "VDIF payload length",
            reason: "payload holds no sample",
        });
    }
    if sample_rate_hz % spf != 0 {
        return Err(Error::NotMultiple {
            field: "VDIF sample rate (Hz)",
            value: sample_rate_hz,
            unit: spf,
        });
    }
    let rate = sample_rate_hz / spf;
    if rate == 0 || rate > u64::from(MAX_FRAME_NUMBER) + 1 {
        return Err(Error::OutOfRange {
            field: "VDIF frame rate",
            value: rate,
            allowed: "1..=2^24 frames per second",
        });
    }
    Ok(rate as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A header for 2024-03-01T12:00:00 (epoch 48, second 5227200), station "Xx", written and read back by
    /// baseband 4.3.0.
    const BASEBAND_WORDS: [u32; 8] = [0x004fc2c0, 0x30000000, 0x20000404, 0x04005878, 0, 0, 0, 0];

    fn baseband_bytes() -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, w) in BASEBAND_WORDS.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    #[test]
    fn reads_baseband_worked_example() {
        let bytes = baseband_bytes();
        let h = VdifHeader::new_checked(&bytes[..]).unwrap();
        assert_eq!(h.seconds(), 5227200);
        assert_eq!(h.epoch(), 48);
        assert_eq!(h.frame_number(), 0);
        assert_eq!(h.version(), 1);
        assert_eq!(h.channels(), 1);
        assert_eq!(h.frame_len(), 8224);
        assert_eq!(h.bits_per_sample(), 2);
        assert!(!h.complex());
        assert_eq!(h.thread_id(), 0);
        assert_eq!(&h.station_bytes(), b"Xx");
        assert_eq!(h.edv(), 0);
    }

    #[test]
    fn emits_baseband_worked_example() {
        let repr = VdifHeaderRepr {
            seconds: 5227200,
            epoch: 48,
            version: 1,
            frame_len: 8224,
            bits_per_sample: 2,
            station_id: VdifHeaderRepr::station_from_str("Xx").unwrap(),
            ..Default::default()
        };
        assert_eq!(repr.to_bytes().unwrap(), baseband_bytes());
    }

    #[test]
    fn errors_name_the_field() {
        let base = VdifHeaderRepr::default();
        let e = VdifHeaderRepr {
            thread_id: 1024,
            ..base
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("thread ID"), "{e}");
        let e = VdifHeaderRepr { epoch: 64, ..base }.validate().unwrap_err();
        assert!(e.to_string().contains("epoch"), "{e}");
        let e = VdifHeaderRepr {
            frame_len: 8228,
            ..base
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("multiple of 8"), "{e}");
        let e = VdifHeaderRepr { edv: 1, ..base }.validate().unwrap_err();
        assert!(matches!(e, Error::BadSync { .. }), "{e}");
    }

    #[test]
    fn frame_length_must_match_buffer() {
        let mut frame = vec![0u8; 8224];
        VdifHeaderRepr::default().emit(&mut frame).unwrap();
        assert!(VdifFrame::new_checked(&frame[..]).is_ok());
        let e = VdifFrame::new_checked(&frame[..8216]).unwrap_err();
        assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
        let e = VdifFrame::new_checked(&frame[..8220]).unwrap_err();
        assert!(matches!(e, Error::NotMultiple { .. }), "{e}");
    }

    #[test]
    fn legacy_header_is_16_bytes() {
        let repr = VdifHeaderRepr {
            legacy: true,
            frame_len: 1016,
            ..Default::default()
        };
        let mut frame = vec![0xaau8; 1016];
        repr.emit(&mut frame).unwrap();
        assert_eq!(frame[16], 0xaa, "legacy emit must not touch words 4..7");
        let f = VdifFrame::new_checked(&frame[..]).unwrap();
        assert_eq!(f.payload().len(), 1000);
        assert_eq!(VdifHeaderRepr::parse(&f.header()).unwrap(), repr);
    }

    #[test]
    fn r2dbe_frame_rate() {
        assert_eq!(frame_rate(4_096_000_000, 2, 1, false, 8192).unwrap(), 125_000);
        assert!(frame_rate(1_000_000, 2, 1, false, 8192).is_err());
    }

    #[test]
    fn edv3_needs_5032_bytes_and_sync() {
        let ok = VdifHeaderRepr {
            frame_len: 5032,
            ..Default::default()
        }
        .with_sample_rate(3, EdvSampleRate::from_hz(64_000_000).unwrap());
        let bytes = ok.to_bytes().unwrap();
        let h = VdifHeader::new_checked(&bytes[..]).unwrap();
        assert_eq!(h.sample_rate_hz(), Some(64_000_000));
        let bad = VdifHeaderRepr {
            frame_len: 8224,
            ..ok
        };
        assert!(bad.validate().is_err());
    }

    fn arb_repr() -> impl Strategy<Value = VdifHeaderRepr> {
        (
            (
                any::<bool>(),
                any::<bool>(),
                0..=MAX_SECONDS,
                0..=MAX_EPOCH,
                0..=MAX_FRAME_NUMBER,
                0u8..8,
            ),
            (
                0u8..32,
                2usize..=(MAX_FRAME_LEN / 8),
                any::<bool>(),
                1u8..=32,
                0..=MAX_THREAD_ID,
                any::<u16>(),
            ),
            (
                prop_oneof![Just(0u8), Just(1u8), Just(3u8), 4u8..=255],
                0u32..(1 << 23),
                any::<bool>(),
                any::<[u32; 2]>(),
            ),
        )
            .prop_map(
                |((inv, legacy, s, ep, fr, ver), (l2, len8, cx, bits, th, st), (edv, rate, mhz, w67))| {
                    let mut r = VdifHeaderRepr {
                        invalid: inv,
                        legacy,
                        seconds: s,
                        epoch: ep,
                        frame_number: fr,
                        version: ver,
                        log2_channels: l2,
                        frame_len: len8 * 8,
                        complex: cx,
                        bits_per_sample: bits,
                        thread_id: th,
                        station_id: st,
                        edv: 0,
                        edv_words: [0; 4],
                    };
                    if legacy {
                        return r;
                    }
                    match edv {
                        0 => {}
                        1 | 3 => {
                            r = r.with_sample_rate(edv, EdvSampleRate { value: rate, mhz });
                            r.edv_words[2] = w67[0];
                            r.edv_words[3] = w67[1];
                            if edv == 3 {
                                r.frame_len = EDV3_FRAME_LEN;
                            }
                        }
                        other => {
                            r.edv = other;
                            r.edv_words = [rate, w67[0], w67[1], w67[0] ^ w67[1]];
                        }
                    }
                    r
                },
            )
    }

    proptest! {
        #[test]
        fn repr_round_trips(repr in arb_repr()) {
            let bytes = repr.to_bytes().unwrap();
            let view = VdifHeader::new_checked(&bytes[..repr.header_len()]).unwrap();
            prop_assert_eq!(VdifHeaderRepr::parse(&view).unwrap(), repr);
        }

        #[test]
        fn setters_match_emit(repr in arb_repr().prop_filter("edv0", |r| r.edv == 0 && !r.legacy)) {
            let mut buf = [0u8; 32];
            let mut h = VdifHeader::new_unchecked(&mut buf[..]);
            h.set_invalid(repr.invalid);
            h.set_seconds(repr.seconds);
            h.set_epoch(repr.epoch);
            h.set_frame_number(repr.frame_number);
            h.set_version(repr.version);
            h.set_log2_channels(repr.log2_channels);
            h.set_frame_len(repr.frame_len);
            h.set_complex(repr.complex);
            h.set_bits_per_sample(repr.bits_per_sample);
            h.set_thread_id(repr.thread_id);
            h.set_station_id(repr.station_id);
            prop_assert_eq!(buf, repr.to_bytes().unwrap());
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(h) = VdifHeader::new_checked(&bytes[..]) {
                let _ = VdifHeaderRepr::parse(&h);
            }
            let _ = VdifFrame::new_checked(&bytes[..]);
        }
    }

    #[test]
    fn a_learned_rate_one_short_of_a_round_sample_rate_is_corrected() {
        // R2DBE: 32768 samples per frame, 125000 frames/s = 4096 MHz; a lost last frame reads as 124999.
        assert_eq!(corrected_learned_rate(124_999, 32_768), Some(125_000));
        assert_eq!(corrected_learned_rate(125_000, 32_768), None);
        // 4000 samples per frame: 249/s = 996 kHz (whole kHz) against 250/s = 1 MHz.
        assert_eq!(corrected_learned_rate(249, 4000), Some(250));
        // Neither is round: no correction.
        assert_eq!(corrected_learned_rate(100, 4096), None);
        assert_eq!(sample_rate_roundness(0), 0);
    }
}
