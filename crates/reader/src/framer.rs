//! Splits the pieces a reader delivers into frames: learns the frame length from the first run of valid
//! headers (or takes it from the Mark6 file header), carries a frame that continues into the next piece of
//! the same file, recognises jive5ab fill (frames of 0x11223344 words, header included), and skips
//! garbage by searching byte by byte for a header of the same length and station. Sans-IO: fed slices,
//! it calls a [`FrameSink`].

use crate::finding::{FileTable, Finding, FindingKind, Position, Severity};
use std::sync::Arc;
use vlbiflow_formats::fill::{self, is_fill_words as is_fill};
use vlbiflow_formats::mark5b::{FRAME_LEN as MARK5B_FRAME_LEN, SYNC_WORD as MARK5B_SYNC};
use vlbiflow_formats::vdif::{VdifHeader, LEGACY_HEADER_LEN};
use vlbiflow_formats::FrameKind;
use vlbiflow_units::fmt_count;

/// Largest frame length learned from the data (VDIF allows up to 128 MiB; real streams stay far below).
pub const MAX_LEARNED_FRAME: usize = 1 << 22;

/// Receives what the [`Framer`] finds.
pub trait FrameSink {
    /// One whole frame starting at `pos`.
    fn frame(&mut self, frame: &[u8], pos: Position);
    /// A frame-sized run of fill words (no header) at `pos`.
    fn fill(&mut self, frame: &[u8], pos: Position);
    /// A structural finding.
    fn finding(&mut self, finding: Finding);
}

#[inline]
fn word(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

/// What every frame of the stream shares, to tell frames from garbage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    frame_len: usize,
    station: u16,
}

/// What a header tells about the stream's shape.
enum Learn {
    Shape(Shape),
    /// Its confirmation needs this many bytes from it, and more of the segment follows.
    NeedMore(usize),
    No,
}

/// The framing state machine. One per recording.
pub struct Framer {
    format: FrameKind,
    shape: Option<Shape>,
    /// Frame length given by the container (Mark6 packet_size); learned shapes must agree.
    hint: Option<usize>,
    carry: Vec<u8>,
    carry_pos: Position,
    scratch: Vec<u8>,
    /// Start of the garbage run being skipped, if any.
    garbage: Option<Position>,
    files: Arc<FileTable>,
    /// Bytes skipped as garbage.
    pub garbage_bytes: u64,
    /// Where the frame shape was learned.
    learned_at: Option<Position>,
    /// Bytes from the carry's start a decision there waits for (a header to be confirmed by the one after
    /// it): the next piece is taken into the carry until they are there. 0: the usual look-ahead.
    want: usize,
    /// The carry starts where the search for the next header inside garbage stopped for want of bytes:
    /// the search goes on there (a header found by the search must be confirmed by the one after it).
    resume_search: bool,
    /// Made by [`fork`](Self::fork) with the shape already known: it learned nothing, so it continues any
    /// framer of that shape that holds no partial frame and skips no garbage.
    forked: bool,
}

impl Framer {
    /// A framer for `format`; `frame_len_hint` from the container if it says (Mark6 packet size).
    pub fn new(format: FrameKind, frame_len_hint: Option<usize>, files: Arc<FileTable>) -> Self {
        let hint = match format {
            FrameKind::M5b => Some(MARK5B_FRAME_LEN),
            FrameKind::Vdif => frame_len_hint,
        };
        Framer {
            format,
            shape: None,
            hint,
            carry: Vec::new(),
            carry_pos: Position::default(),
            scratch: Vec::new(),
            garbage: None,
            files,
            garbage_bytes: 0,
            learned_at: None,
            want: 0,
            resume_search: false,
            forked: false,
        }
    }

    /// A framer for bytes that follow those `self` was fed, to be fed on its own and joined with
    /// [`join`](Self::join): the state `self` would have there if it held no partial frame and skipped no
    /// garbage. With the frame shape known it starts with that shape (and then continues `self` wherever
    /// that holds); without, it learns the shape as [`new`](Self::new) does.
    pub fn fork(&self) -> Framer {
        Framer {
            format: self.format,
            shape: self.shape,
            hint: self.hint,
            carry: Vec::new(),
            carry_pos: Position::default(),
            scratch: Vec::new(),
            garbage: None,
            files: self.files.clone(),
            garbage_bytes: 0,
            learned_at: None,
            want: 0,
            resume_search: false,
            forked: self.shape.is_some(),
        }
    }

    /// Whether a framer fed the bytes that follow, from `at` on, with a new framer (`next`) behaved as
    /// `self` would have: `self` holds no partial frame and is not skipping garbage, and `next` has the
    /// same frame shape, either learned from a frame at `at` (so it skipped nothing before it) or given it
    /// by [`fork`](Self::fork) (so it framed from `at` with that shape, as `self` would have).
    pub fn continues_into(&self, next: &Framer, at: Position) -> bool {
        self.carry.is_empty()
            && self.garbage.is_none()
            && self.shape.is_some()
            && self.shape == next.shape
            && self.hint == next.hint
            && self.format == next.format
            && (next.forked || next.learned_at == Some(at))
    }

    /// Takes on the state of `next`, a framer fed the bytes that follow (where
    /// [`continues_into`](Self::continues_into) holds): `self` becomes the framer fed both.
    pub fn join(&mut self, next: Framer) {
        let garbage = self.garbage_bytes;
        *self = next;
        self.garbage_bytes += garbage;
    }

    /// Frame length in use (learned or given), once known.
    pub fn frame_len(&self) -> Option<usize> {
        self.shape.map(|s| s.frame_len)
    }

    /// A frame-sized piece that is fill: of this format (see `vlbiflow_formats::fill`) or fill words only.
    #[inline]
    fn is_fill_frame(&self, f: &[u8]) -> bool {
        fill::is_fill(self.format, f) || is_fill(f)
    }

    /// Header plausible for this stream's shape; `strict` also requires the station.
    #[inline]
    fn header_ok(&self, b: &[u8], shape: Shape, strict: bool) -> bool {
        match self.format {
            FrameKind::M5b => b.len() >= 4 && word(b, 0) == MARK5B_SYNC,
            FrameKind::Vdif => {
                if b.len() < LEGACY_HEADER_LEN {
                    return false;
                }
                let h = VdifHeader::new_unchecked(b);
                let hl = h.header_len();
                b.len() >= hl
                    && h.frame_len() == shape.frame_len
                    && (!strict || h.station_id() == shape.station)
                    && h.check().is_ok()
            }
        }
    }

    /// Tries to learn the stream's shape from a header at the start of `b`: it must be valid, agree with
    /// the container's frame length, and be followed by another of the same shape, unless the segment
    /// ends first (`last`). Where `b` ends before that header and more of the segment follows, the bytes
    /// it needs: the decision waits for them, so that it never depends on where a read ended.
    fn learn(&self, b: &[u8], last: bool) -> Learn {
        let Some(shape) = self.header_shape(b) else {
            return Learn::No;
        };
        if b.len() >= shape.frame_len + 32 {
            if !self.header_ok(&b[shape.frame_len..], shape, true) {
                return Learn::No;
            }
        } else if !last {
            return Learn::NeedMore(shape.frame_len + 32);
        }
        Learn::Shape(shape)
    }

    /// The shape a valid header at the start of `b` gives, if it agrees with the container's frame length.
    fn header_shape(&self, b: &[u8]) -> Option<Shape> {
        let shape = match self.format {
            FrameKind::M5b => {
                if b.len() < 4 || word(b, 0) != MARK5B_SYNC {
                    return None;
                }
                Shape {
                    frame_len: MARK5B_FRAME_LEN,
                    station: 0,
                }
            }
            FrameKind::Vdif => {
                let h = VdifHeader::new_checked(b).ok()?;
                let len = h.frame_len();
                if len > MAX_LEARNED_FRAME || self.hint.is_some_and(|l| l != len) {
                    return None;
                }
                Shape {
                    frame_len: len,
                    station: h.station_id(),
                }
            }
        };
        Some(shape)
    }

    fn pos(base: Position, at: usize) -> Position {
        Position {
            file: base.file,
            offset: base.offset + at as u64,
        }
    }

    fn close_garbage(&mut self, at: Position, sink: &mut impl FrameSink) {
        if let Some(start) = self.garbage.take() {
            let path = self.files.path(start.file).to_owned();
            let (len, msg) = if at.file == start.file {
                let n = at.offset - start.offset;
                (
                    n,
                    format!(
                        "{} of garbage (no valid frame header); resynchronised at offset {}",
                        fmt_count(n, "byte", "bytes"),
                        at.offset
                    ),
                )
            } else {
                (0, "garbage up to the end of the file".to_string())
            };
            self.garbage_bytes += len;
            sink.finding(Finding::at(
                Severity::Error,
                FindingKind::Garbage,
                path,
                start.offset,
                msg,
            ));
        }
    }

    fn end_garbage_at_segment_end(&mut self, end: Position, sink: &mut impl FrameSink) {
        if let Some(start) = self.garbage.take() {
            let path = self.files.path(start.file).to_owned();
            let n = end.offset.saturating_sub(start.offset);
            self.garbage_bytes += n;
            sink.finding(Finding::at(
                Severity::Error,
                FindingKind::Garbage,
                path,
                start.offset,
                format!(
                    "{} of garbage (no valid frame header) up to the end of the block/file",
                    fmt_count(n, "byte", "bytes")
                ),
            ));
        }
    }

    /// Frames `region` (file bytes starting at `base`). `last`: nothing follows in this segment. Returns the
    /// bytes consumed; the rest (less than a frame) must be offered again with what follows.
    fn process(&mut self, region: &[u8], base: Position, last: bool, sink: &mut impl FrameSink) -> usize {
        let len = region.len();
        let mut p = 0usize;
        while p < len {
            let rem = len - p;
            let shape = match self.shape {
                Some(s) => s,
                None => {
                    if rem < 32 && !last {
                        return p;
                    }
                    match self.learn(&region[p..], last) {
                        Learn::Shape(s) => {
                            self.shape = Some(s);
                            self.learned_at = Some(Self::pos(base, p));
                            continue;
                        }
                        Learn::NeedMore(n) => {
                            self.want = n;
                            return p;
                        }
                        Learn::No => {
                            if self.garbage.is_none() {
                                self.garbage = Some(Self::pos(base, p));
                            }
                            p += 1;
                            continue;
                        }
                    }
                }
            };
            let fl = shape.frame_len;
            if rem < fl {
                if !last {
                    return p;
                }
                if self.garbage.is_none() {
                    if rem >= 4 && is_fill(&region[p..]) {
                        // A short fill tail is still fill, not damage.
                        sink.fill(&region[p..], Self::pos(base, p));
                    } else {
                        let path = self.files.path(base.file).to_owned();
                        sink.finding(Finding::at(
                            Severity::Error,
                            FindingKind::Truncated,
                            path,
                            base.offset + p as u64,
                            format!(
                                "block/file ends inside a frame: {} of a {fl}-byte frame ignored",
                                fmt_count(rem as u64, "byte", "bytes")
                            ),
                        ));
                    }
                } else {
                    self.end_garbage_at_segment_end(Self::pos(base, len), sink);
                }
                return len;
            }
            let f = &region[p..p + fl];
            let resume = std::mem::take(&mut self.resume_search);
            // Fill first: jive5ab's VDIF fill has a header (time 0, thread 0, station 0) that would pass as
            // a frame of the right length.
            if !resume && self.is_fill_frame(f) {
                self.close_garbage(Self::pos(base, p), sink);
                sink.fill(f, Self::pos(base, p));
                p += fl;
                continue;
            }
            if !resume && self.header_ok(f, shape, self.garbage.is_some()) {
                self.close_garbage(Self::pos(base, p), sink);
                sink.frame(f, Self::pos(base, p));
                p += fl;
                continue;
            }
            if self.garbage.is_none() {
                self.garbage = Some(Self::pos(base, p));
            }
            // Search for the next header of this shape, confirmed by the one after it where present.
            let mut q = if resume { p } else { p + 1 };
            loop {
                if !last && q + fl + 32 > len {
                    // A header here, a fill frame or the header confirming either may reach into the
                    // next piece: the search goes on there, with the bytes a decision needs.
                    self.want = fl + 32;
                    self.resume_search = true;
                    return q;
                }
                if q + 32 > len {
                    self.end_garbage_at_segment_end(Self::pos(base, len), sink);
                    return len;
                }
                let b = &region[q..];
                let candidate =
                    self.header_ok(b, shape, true) || (b.len() >= fl && self.is_fill_frame(&b[..fl]));
                if candidate
                    && (b.len() < fl + 32
                        || self.header_ok(&b[fl..], shape, false)
                        || is_fill(&b[fl..fl + 8]))
                {
                    break;
                }
                q += 1;
            }
            p = q;
        }
        // The end of a segment in which no frame shape was found (a file shorter than a frame header, or
        // all garbage): the garbage ends here, not at a position left from an earlier segment.
        if last && self.garbage.is_some() {
            self.end_garbage_at_segment_end(Self::pos(base, len), sink);
        }
        p
    }

    /// Feeds one piece: `data` read at `pos`. `segment_start`: no frame continues into it from before (a new
    /// block, chunk or file); `segment_end`: nothing of this segment follows.
    pub fn push(
        &mut self,
        data: &[u8],
        pos: Position,
        segment_start: bool,
        segment_end: bool,
        sink: &mut impl FrameSink,
    ) {
        if segment_start {
            self.finish_segment(sink);
        }
        let mut start = 0usize;
        if !self.carry.is_empty() {
            // The carry and the first bytes of this piece, taken together until what was left undecided
            // at the carry's start is decided (more of the piece each time, as far as a decision waits).
            let mut scratch = std::mem::take(&mut self.scratch);
            let mut off = 0usize;
            loop {
                let look = self.shape.map_or(64, |s| s.frame_len) * 2 + 64;
                let take = (data.len() - off).min(look.max(self.want + 64));
                scratch.clear();
                scratch.extend_from_slice(&self.carry);
                scratch.extend_from_slice(&data[off..off + take]);
                let whole = off + take == data.len();
                let carry_len = self.carry.len();
                let carry_pos = self.carry_pos;
                self.want = 0;
                let used = self.process(&scratch, carry_pos, segment_end && whole, sink);
                self.carry.clear();
                if used >= carry_len && !whole {
                    start = off + used - carry_len;
                    break;
                }
                self.carry.extend_from_slice(&scratch[used..]);
                self.carry_pos = Self::pos(carry_pos, used);
                off += take;
                if whole {
                    self.scratch = scratch;
                    if segment_end {
                        self.carry.clear();
                    }
                    return;
                }
            }
            self.scratch = scratch;
        }
        let base = Self::pos(pos, start);
        self.want = 0;
        let used = self.process(&data[start..], base, segment_end, sink);
        if !segment_end {
            self.carry.extend_from_slice(&data[start + used..]);
            self.carry_pos = Self::pos(base, used);
        }
    }

    /// Ends the current segment: a partial frame left over is reported as truncated.
    pub fn finish_segment(&mut self, sink: &mut impl FrameSink) {
        if !self.carry.is_empty() {
            let carry = std::mem::take(&mut self.carry);
            let pos = self.carry_pos;
            self.process(&carry, pos, true, sink);
            self.carry = carry;
            self.carry.clear();
        }
        self.resume_search = false;
        self.want = 0;
        if let Some(start) = self.garbage {
            let _ = start;
            let end = self.carry_pos;
            self.end_garbage_at_segment_end(end, sink);
        }
    }
}
