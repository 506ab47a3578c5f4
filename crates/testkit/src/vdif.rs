//! VDIF frames for tests, written word by word (little-endian 32-bit words) from the specification:
//!
//! | word | bits |
//! | --- | --- |
//! | 0 | 31 invalid, 30 legacy, 29-0 seconds from the reference epoch |
//! | 1 | 29-24 reference epoch (half-years since 2000), 23-0 frame number within the second |
//! | 2 | 31-29 version, 28-24 log2(channels), 23-0 frame length in units of 8 bytes |
//! | 3 | 31 complex, 30-26 bits per sample - 1, 25-16 thread ID, 15-0 station ID |
//!
//! Words 4-7 (the extended user data of a non-legacy header) are left zero.

/// A VDIF header's fields; [`Frame::build`] writes a whole frame of them.
///
/// ```
/// use vlbiflow_testkit::vdif::Frame;
/// let f = Frame::new(1032).at(1_500, 1000).thread(3).build();
/// assert_eq!(f.len(), 1032);
/// assert_eq!(u32::from_le_bytes(f[0..4].try_into().unwrap()), Frame::SECOND + 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub len: usize,
    pub invalid: bool,
    pub legacy: bool,
    pub seconds: u32,
    pub epoch: u8,
    pub frame_number: u32,
    pub version: u8,
    pub log2_channels: u8,
    pub complex: bool,
    pub bits_per_sample: u8,
    pub thread: u16,
    pub station: u16,
}

impl Frame {
    /// Reference epoch 48: 2024-01-01T00:00:00 UTC.
    pub const EPOCH: u8 = 48;
    /// A second of epoch 48: 2024-03-01T12:00:00 UTC (60.5 days after the epoch).
    pub const SECOND: u32 = 5_227_200;

    /// A valid, non-legacy frame of `len` bytes (a multiple of 8): epoch [`Self::EPOCH`], second
    /// [`Self::SECOND`], frame 0, version 0, one channel, real, 2 bits per sample, thread 0, station 0.
    pub fn new(len: usize) -> Self {
        assert!(
            len >= 32 && len % 8 == 0,
            "a VDIF frame is a multiple of 8 bytes with a 32-byte header"
        );
        Frame {
            len,
            invalid: false,
            legacy: false,
            seconds: Self::SECOND,
            epoch: Self::EPOCH,
            frame_number: 0,
            version: 0,
            log2_channels: 0,
            complex: false,
            bits_per_sample: 2,
            thread: 0,
            station: 0,
        }
    }

    /// The frame at time index `index` of a stream of `rate` frames per second per thread that starts
    /// at the frame's current second: second `seconds + index / rate`, frame number `index % rate`.
    pub fn at(mut self, index: u64, rate: u32) -> Self {
        self.seconds += u32::try_from(index / u64::from(rate)).expect("index within a VDIF second range");
        self.frame_number = (index % u64::from(rate)) as u32;
        self
    }

    pub fn seconds(mut self, s: u32) -> Self {
        self.seconds = s;
        self
    }

    pub fn epoch(mut self, e: u8) -> Self {
        self.epoch = e;
        self
    }

    pub fn thread(mut self, t: u16) -> Self {
        self.thread = t;
        self
    }

    /// The station ID as two ASCII characters (`b"Xx"`), as the specification allows.
    pub fn station(mut self, id: &[u8; 2]) -> Self {
        self.station = u16::from_be_bytes(*id);
        self
    }

    pub fn version(mut self, v: u8) -> Self {
        self.version = v;
        self
    }

    pub fn invalid(mut self, yes: bool) -> Self {
        self.invalid = yes;
        self
    }

    pub fn bits(mut self, bits_per_sample: u8) -> Self {
        self.bits_per_sample = bits_per_sample;
        self
    }

    pub fn channels_log2(mut self, log2: u8) -> Self {
        self.log2_channels = log2;
        self
    }

    pub fn complex(mut self, yes: bool) -> Self {
        self.complex = yes;
        self
    }

    /// The four header words (0-3).
    pub fn words(&self) -> [u32; 4] {
        [
            (u32::from(self.invalid) << 31) | (u32::from(self.legacy) << 30) | (self.seconds & 0x3fff_ffff),
            (u32::from(self.epoch & 0x3f) << 24) | (self.frame_number & 0xff_ffff),
            (u32::from(self.version & 7) << 29)
                | (u32::from(self.log2_channels & 0x1f) << 24)
                | ((self.len / 8) as u32 & 0xff_ffff),
            (u32::from(self.complex) << 31)
                | (u32::from((self.bits_per_sample - 1) & 0x1f) << 26)
                | (u32::from(self.thread & 0x3ff) << 16)
                | u32::from(self.station),
        ]
    }

    /// Writes the 32-byte header into `buf` (words 4-7 zero); the rest of `buf` is left as it is.
    pub fn write_header(&self, buf: &mut [u8]) {
        buf[..32].fill(0);
        for (i, w) in self.words().iter().enumerate() {
            buf[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
    }

    /// Writes the whole frame into `buf[..len]`: the header, then a zero payload.
    pub fn write(&self, buf: &mut [u8]) {
        buf[..self.len].fill(0);
        self.write_header(buf);
    }

    /// The frame with a zero payload.
    pub fn build(&self) -> Vec<u8> {
        let mut f = vec![0u8; self.len];
        self.write_header(&mut f);
        f
    }

    /// The frame with its payload filled by `payload(k)` for payload byte `k` (counted from byte 32).
    pub fn build_with(&self, mut payload: impl FnMut(usize) -> u8) -> Vec<u8> {
        let mut f = self.build();
        for (k, b) in f[32..].iter_mut().enumerate() {
            *b = payload(k);
        }
        f
    }
}

/// Stamps a test's own identity into a frame's payload: `id` (little-endian) at bytes 32-39 and
/// `thread` at 40-41, so a frame can be recognised wherever it lands. [`stamped_id`] reads it back.
pub fn stamp(frame: &mut [u8], id: u64, thread: u16) {
    frame[32..40].copy_from_slice(&id.to_le_bytes());
    frame[40..42].copy_from_slice(&thread.to_le_bytes());
}

/// The `(id, thread)` [`stamp`] wrote.
pub fn stamped_id(frame: &[u8]) -> (u64, u16) {
    (
        u64::from_le_bytes(frame[32..40].try_into().expect("8 bytes")),
        u16::from_le_bytes(frame[40..42].try_into().expect("2 bytes")),
    )
}

/// A `udps` datagram (as jive5ab and Mark6 send it): the 64-bit packet sequence number, little-endian,
/// then the frame.
pub fn udps(psn: u64, frame: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + frame.len());
    d.extend_from_slice(&psn.to_le_bytes());
    d.extend_from_slice(frame);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_the_specification_bit_for_bit() {
        let f = Frame::new(8224)
            .at(2_001, 1000)
            .thread(5)
            .station(b"Xx")
            .version(1)
            .invalid(true)
            .complex(true)
            .channels_log2(3);
        assert_eq!(
            f.words(),
            [
                0x8000_0000 | (Frame::SECOND + 2),
                (48 << 24) | 1,
                (1 << 29) | (3 << 24) | 1028,
                0x8000_0000 | (1 << 26) | (5 << 16) | 0x5878,
            ]
        );
        let b = f.build();
        assert_eq!(&b[8..12], &[0x04, 0x04, 0x00, 0x23]);
    }

    #[test]
    fn stamps_and_udps_round_trip() {
        let mut f = Frame::new(64).build();
        stamp(&mut f, 77, 9);
        assert_eq!(stamped_id(&f), (77, 9));
        let d = udps(3, &f);
        assert_eq!(&d[..8], &3u64.to_le_bytes());
        assert_eq!(&d[8..], &f[..]);
    }
}
