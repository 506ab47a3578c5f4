//! Gap notices: a forwarder's in-band statement of which positions of a `udps` stream it will never send.
//!
//! A station that forwards while it records numbers each datagram with the frame's position in the source
//! stream, so a frame lost before or inside the station leaves a hole in the packet sequence numbers at
//! its own place. A gap notice, sent on the same socket to the same port as the data, names those holes
//! and why they are there, so the correlator side can tell the fill it writes for them from the fill for
//! what the path lost. A notice is never the size of a data datagram (8 + frame bytes): receivers that do
//! not know notices count it as a wrong-sized datagram and drop it.
//!
//! Layout (all integers little-endian):
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `b"vfgaps"`, then 0, then the version (1) |
//! | 8 | 8 | notice sequence number (0, 1, 2, ... per destination) |
//! | 16 | 8 x 4 | positions declared so far: lost before capture, no buffer, queue full, other |
//! | 48 | 2 | number of ranges `n` (at most [`MAX_RANGES`]) |
//! | 50 | 6 | zero |
//! | 56 | 16 x n | ranges: first PSN (8), count (4), cause (1), zero (3) |

use crate::error::{Error, Result};

/// The first eight bytes of every notice (the last one is the version).
pub const MAGIC: [u8; 8] = *b"vfgaps\x00\x01";
/// Bytes before the first range.
pub const HEADER_LEN: usize = 56;
/// Bytes of one range.
pub const RANGE_LEN: usize = 16;
/// Most ranges one notice carries.
pub const MAX_RANGES: usize = 32;
/// Longest notice.
pub const MAX_LEN: usize = HEADER_LEN + MAX_RANGES * RANGE_LEN;

/// Why positions of the stream are not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "snake_case"))]
#[repr(u8)]
pub enum Cause {
    /// Never captured: lost between the backend and the forwarder (network to the station, or the
    /// receiving host's socket buffer).
    CapturedLost = 0,
    /// Arrived, but the recorder had no buffer to keep it.
    NoBuffer = 1,
    /// The destination's queue was full.
    QueueFull = 2,
    /// Anything else the forwarder dropped (send error, connection down, stopped).
    Other = 3,
}

impl Cause {
    /// Every cause, in wire order.
    pub const ALL: [Cause; 4] = [
        Cause::CapturedLost,
        Cause::NoBuffer,
        Cause::QueueFull,
        Cause::Other,
    ];

    fn from_u8(v: u8) -> Option<Cause> {
        Cause::ALL.get(usize::from(v)).copied()
    }

    /// Name in summaries and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Cause::CapturedLost => "captured_lost",
            Cause::NoBuffer => "no_buffer",
            Cause::QueueFull => "queue_full",
            Cause::Other => "other",
        }
    }
}

/// One run of positions not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapRange {
    pub first: u64,
    pub count: u32,
    pub cause: Cause,
}

/// A read view over a notice; [`new_checked`](GapNotice::new_checked) verifies magic, length and causes.
#[derive(Debug, Clone, Copy)]
pub struct GapNotice<T: AsRef<[u8]>> {
    buffer: T,
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl<T: AsRef<[u8]>> GapNotice<T> {
    /// True when `bytes` starts like a notice (magic of any version); cheap, for telling notices from
    /// wrong-sized data.
    pub fn looks_like(bytes: &[u8]) -> bool {
        bytes.len() >= HEADER_LEN && bytes[..7] == MAGIC[..7]
    }

    /// Wraps and checks a received datagram.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated {
                what: "gap notice",
                need: HEADER_LEN,
                got: b.len(),
            });
        }
        if b[..8] != MAGIC {
            return Err(Error::Invalid {
                field: "gap notice magic/version",
                reason: "not vfgaps version 1",
            });
        }
        let n = usize::from(u16::from_le_bytes([b[48], b[49]]));
        if n > MAX_RANGES {
            return Err(Error::Invalid {
                field: "gap notice range count",
                reason: "more than 32 ranges",
            });
        }
        if b.len() != HEADER_LEN + n * RANGE_LEN {
            return Err(Error::Invalid {
                field: "gap notice length",
                reason: "does not match its range count",
            });
        }
        for i in 0..n {
            if Cause::from_u8(b[HEADER_LEN + i * RANGE_LEN + 12]).is_none() {
                return Err(Error::Invalid {
                    field: "gap notice cause",
                    reason: "unknown cause",
                });
            }
        }
        Ok(GapNotice { buffer })
    }

    /// The notice's sequence number.
    pub fn sequence(&self) -> u64 {
        le64(self.buffer.as_ref(), 8)
    }

    /// Positions declared so far by cause (indexed like [`Cause::ALL`]).
    pub fn totals(&self) -> [u64; 4] {
        let b = self.buffer.as_ref();
        [le64(b, 16), le64(b, 24), le64(b, 32), le64(b, 40)]
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        let b = self.buffer.as_ref();
        usize::from(u16::from_le_bytes([b[48], b[49]]))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Range `i` (panics past [`len`](Self::len); a checked notice has every range it counts).
    pub fn range(&self, i: usize) -> GapRange {
        let b = &self.buffer.as_ref()[HEADER_LEN + i * RANGE_LEN..HEADER_LEN + (i + 1) * RANGE_LEN];
        GapRange {
            first: le64(b, 0),
            count: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            cause: Cause::from_u8(b[12]).unwrap_or(Cause::Other),
        }
    }

    /// Every range in order.
    pub fn ranges(&self) -> impl Iterator<Item = GapRange> + '_ {
        (0..self.len()).map(|i| self.range(i))
    }
}

/// Writes a notice into `out` and returns its length; `ranges` beyond [`MAX_RANGES`] are not written
/// (the caller keeps them for the next notice). `out` must hold [`MAX_LEN`] bytes.
pub fn emit(out: &mut [u8], sequence: u64, totals: [u64; 4], ranges: &[GapRange]) -> usize {
    let n = ranges.len().min(MAX_RANGES);
    let len = HEADER_LEN + n * RANGE_LEN;
    let out = &mut out[..len];
    out[..8].copy_from_slice(&MAGIC);
    out[8..16].copy_from_slice(&sequence.to_le_bytes());
    for (i, t) in totals.iter().enumerate() {
        out[16 + 8 * i..24 + 8 * i].copy_from_slice(&t.to_le_bytes());
    }
    out[48..50].copy_from_slice(&(n as u16).to_le_bytes());
    out[50..56].fill(0);
    for (i, r) in ranges[..n].iter().enumerate() {
        let b = &mut out[HEADER_LEN + i * RANGE_LEN..HEADER_LEN + (i + 1) * RANGE_LEN];
        b[..8].copy_from_slice(&r.first.to_le_bytes());
        b[8..12].copy_from_slice(&r.count.to_le_bytes());
        b[12] = r.cause as u8;
        b[13..16].fill(0);
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_then_parse_gives_the_same_notice() {
        let ranges = [
            GapRange {
                first: 7,
                count: 3,
                cause: Cause::CapturedLost,
            },
            GapRange {
                first: u64::MAX - 1,
                count: 1,
                cause: Cause::QueueFull,
            },
        ];
        let mut buf = [0u8; MAX_LEN];
        let n = emit(&mut buf, 42, [3, 0, 1, 9], &ranges);
        assert_eq!(n, HEADER_LEN + 2 * RANGE_LEN);
        assert!(GapNotice::<&[u8]>::looks_like(&buf[..n]));
        let v = GapNotice::new_checked(&buf[..n]).unwrap();
        assert_eq!(v.sequence(), 42);
        assert_eq!(v.totals(), [3, 0, 1, 9]);
        assert_eq!(v.ranges().collect::<Vec<_>>(), ranges);
    }

    #[test]
    fn more_ranges_than_fit_are_left_out() {
        let r = GapRange {
            first: 1,
            count: 1,
            cause: Cause::NoBuffer,
        };
        let mut buf = [0u8; MAX_LEN];
        assert_eq!(emit(&mut buf, 0, [0; 4], &[r; 40]), MAX_LEN);
        assert_eq!(GapNotice::new_checked(&buf[..]).unwrap().len(), MAX_RANGES);
    }

    #[test]
    fn bad_notices_are_refused_without_panicking() {
        let mut buf = [0u8; MAX_LEN];
        let n = emit(&mut buf, 0, [0; 4], &[]);
        assert!(GapNotice::new_checked(&buf[..n - 1]).is_err());
        assert!(GapNotice::new_checked(&buf[..n + 1]).is_err());
        let mut bad = buf;
        bad[7] = 2;
        assert!(GapNotice::new_checked(&bad[..n]).is_err());
        let mut many = buf;
        many[48] = 33;
        assert!(GapNotice::new_checked(&many[..]).is_err());
        let r = GapRange {
            first: 1,
            count: 1,
            cause: Cause::Other,
        };
        let n = emit(&mut buf, 0, [0; 4], &[r]);
        buf[HEADER_LEN + 12] = 9;
        assert!(GapNotice::new_checked(&buf[..n]).is_err());
        // Data is never a notice: a udps datagram is 8 + frame bytes and starts with a PSN.
        assert!(!GapNotice::<&[u8]>::looks_like(&[0u8; 8232]));
    }
}
