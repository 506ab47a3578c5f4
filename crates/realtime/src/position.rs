//! Station side: the packet sequence number a forwarded frame gets is its position in the source stream.
//!
//! A forwarder that numbered the frames it happens to send (1, 2, 3, ...) would move every frame after a
//! loss up by one: a correlator reading the stream by PSN would get samples at the wrong time. Here each
//! frame's PSN is derived from the frame itself:
//!
//! - **PSN input** ([`SourceKey::Psn`]): the input's own sequence number.
//! - **VDIF without PSN, or with a thread selection** ([`SourceKey::VdifTime`]): `index x T + position`,
//!   where `index` is the frame's global time index (POSIX second x frame rate + frame number, the rate
//!   configured or learned by [`FrameIndexer`]) and `position` the place of its thread in the list of `T`
//!   threads, as `receive --key vdif-time` computes it. The list is configured (a destination's thread
//!   selection, or the stream's), or learned from the frames of the first time stamp in the order they
//!   arrive: a thread that shows up later has no position (counted `unknown_thread`). Threads not in a
//!   configured list are `filtered` and take no position.
//! - **Mark5B without PSN** ([`SourceKey::Mark5b`]): the frame index from the header's day, second and
//!   frame number.
//!
//! plus an offset fixed at the first frame, so the first forwarded frame gets `psn=N` ([`FirstPsn::At`])
//! or the input key unchanged ([`FirstPsn::Input`]). Every frame lost before or inside the forwarder is
//! then a hole at its own place: [`Positioner::place`] reports the positions it skipped, and the caller
//! declares them (with a [`GapLog`] for the in-band notices of [`vlbiflow_formats::notice`]) together with
//! the positions it took but could not send (no buffer, queue full).
//!
//! On the correlator side [`DeclaredGaps`] keeps the declared ranges so the receiver can say, for each fill
//! frame it writes, whether the forwarder declared that position lost or the path lost it.
//!
//! Nothing here allocates after construction; no clock is needed (positions depend only on the frames).

use std::collections::VecDeque;

use vlbiflow_formats::mark5b::Mark5bHeader;
use vlbiflow_formats::notice::{self, Cause, GapNotice, GapRange, MAX_RANGES};
use vlbiflow_formats::time::epoch_start_unix;
use vlbiflow_formats::vdif::{VdifHeader, LEGACY_HEADER_LEN, MAX_THREAD_ID};
use vlbiflow_seq::{Arrival, FrameIndexer, SequenceTracker};

/// Where a frame's position in the source stream comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKey {
    /// The packet sequence number the frame arrived with.
    Psn,
    /// The VDIF time stamp and thread; `frame_rate` per thread (learned if `None`), `threads` the list
    /// whose order gives the position within a time stamp (learned from the first time stamp if `None`).
    VdifTime {
        frame_rate: Option<u32>,
        threads: Option<Vec<u16>>,
    },
    /// The Mark5B header's time and frame number; `frame_rate` learned if `None`.
    Mark5b { frame_rate: Option<u32> },
}

/// What the first forwarded frame is numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstPsn {
    /// The first frame placed gets this PSN; later ones keep their distance from it.
    At(u64),
    /// The input key itself (the input PSN, or `index x T + position` with a configured rate and list).
    Input,
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    #[error("thread {0} is above 1023")]
    Thread(u16),
    #[error("thread {0} is listed twice")]
    DuplicateThread(u16),
    #[error("an empty thread list gives no position")]
    NoThreads,
    #[error("psn=input needs the input's own numbering: a PSN stream, or VDIF with a configured frame rate and thread list")]
    InputNeedsKnownKeys,
}

/// Why a frame gets no position (it is not forwarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unplaced {
    /// The source has PSNs but this frame came without one.
    NoPsn,
    /// Too short for a header.
    Short,
    /// A thread not in the configured list (a destination's thread selection).
    Filtered,
    /// A thread not in the list learned from the first time stamp.
    UnknownThread,
    /// No usable time: frame number at or above a configured rate, or a Mark5B header without time.
    NoTime,
}

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Its PSN; `skipped` the positions before it that never came (first PSN, count): declare them.
    At { psn: u64, skipped: Option<(u64, u64)> },
    /// Its position was already taken (a duplicate of the input): do not send it again.
    Duplicate,
    /// Far outside the stream (a replayed or foreign frame): no position.
    Stray,
}

/// Counts of a [`Positioner`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PositionCounters {
    /// Frames given a position.
    pub placed: u64,
    /// Positions skipped and never filled by a late frame: lost before the forwarder saw them.
    pub captured_lost: u64,
    /// Frames that came after a later position (placed at their own).
    pub late: u64,
    pub duplicates: u64,
    pub stray: u64,
    /// Times the input jumped so far that the numbering continued from the last PSN.
    pub restarts: u64,
    /// Not in the configured thread list.
    pub filtered: u64,
    /// Not in the learned thread list.
    pub unknown_thread: u64,
    /// Without a usable PSN or time.
    pub no_position: u64,
}

/// Computes each frame's PSN at a destination; see the module docs.
#[derive(Debug, Clone)]
pub struct Positioner {
    source: Source,
    first: FirstPsn,
    tracker: SequenceTracker,
    offset: u64,
    next_out: u64,
    last_key: Option<u64>,
    counters: PositionCounters,
}

#[derive(Debug, Clone)]
enum Source {
    Psn,
    Time(TimeKeys),
}

#[derive(Debug, Clone)]
struct TimeKeys {
    mark5b: bool,
    indexer: FrameIndexer,
    /// Position + 1 of each thread id (0: none); learned ones are numbered in order of arrival.
    position: Box<[u16; 1024]>,
    threads: u64,
    configured: bool,
    /// The list is still being learned (frames of the first time stamp).
    learning: bool,
    /// The first index seen (keys of a learned list count from it).
    base: Option<u64>,
    epoch: Option<(u8, i64)>,
}

impl TimeKeys {
    fn key(&mut self, header: &[u8]) -> Result<u64, Unplaced> {
        if header.len() < LEGACY_HEADER_LEN {
            return Err(Unplaced::Short);
        }
        let (second, frame, thread) = if self.mark5b {
            let h = Mark5bHeader::new_unchecked(header);
            let Some(s) = h.day_second() else {
                return Err(Unplaced::NoTime);
            };
            (s, u32::from(h.frame_number()), 0u16)
        } else {
            let h = VdifHeader::new_unchecked(header);
            let epoch = h.epoch();
            let start = match self.epoch {
                Some((e, s)) if e == epoch => s,
                _ => {
                    let s = epoch_start_unix(epoch);
                    self.epoch = Some((epoch, s));
                    s
                }
            };
            (start + i64::from(h.seconds()), h.frame_number(), h.thread_id())
        };
        let Some((index, _)) = self.indexer.index(second, frame) else {
            return Err(Unplaced::NoTime);
        };
        let base = *self.base.get_or_insert(index);
        if self.learning && index != base {
            // A later time stamp: the list learned from the first one is fixed.
            self.learning = false;
        }
        let slot = &mut self.position[usize::from(thread)];
        if *slot == 0 {
            if self.configured {
                return Err(Unplaced::Filtered);
            }
            if !self.learning {
                return Err(Unplaced::UnknownThread);
            }
            self.threads += 1;
            *slot = self.threads as u16;
        }
        let pos = u64::from(*slot - 1);
        let index = if self.configured {
            index
        } else {
            index.wrapping_sub(base)
        };
        Ok(index.wrapping_mul(self.threads).wrapping_add(pos))
    }
}

impl Positioner {
    pub fn new(source: SourceKey, first: FirstPsn) -> Result<Self, PositionError> {
        let source = match source {
            SourceKey::Psn => Source::Psn,
            SourceKey::VdifTime { frame_rate, threads } => {
                let mut position = Box::new([0u16; 1024]);
                let configured = threads.is_some();
                let list = threads.unwrap_or_default();
                if configured && list.is_empty() {
                    return Err(PositionError::NoThreads);
                }
                for (i, &t) in list.iter().enumerate() {
                    if t > MAX_THREAD_ID {
                        return Err(PositionError::Thread(t));
                    }
                    if position[usize::from(t)] != 0 {
                        return Err(PositionError::DuplicateThread(t));
                    }
                    position[usize::from(t)] = (i + 1) as u16;
                }
                if first == FirstPsn::Input && !(configured && frame_rate.is_some()) {
                    return Err(PositionError::InputNeedsKnownKeys);
                }
                Source::Time(TimeKeys {
                    mark5b: false,
                    indexer: FrameIndexer::new(frame_rate),
                    position,
                    threads: list.len() as u64,
                    configured,
                    learning: !configured,
                    base: None,
                    epoch: None,
                })
            }
            SourceKey::Mark5b { frame_rate } => {
                if first == FirstPsn::Input && frame_rate.is_none() {
                    return Err(PositionError::InputNeedsKnownKeys);
                }
                let mut position = Box::new([0u16; 1024]);
                position[0] = 1;
                Source::Time(TimeKeys {
                    mark5b: true,
                    indexer: FrameIndexer::new(frame_rate),
                    position,
                    threads: 1,
                    configured: true,
                    learning: false,
                    base: None,
                    epoch: None,
                })
            }
        };
        Ok(Positioner {
            source,
            first,
            tracker: SequenceTracker::default(),
            offset: 0,
            next_out: match first {
                FirstPsn::At(n) => n,
                FirstPsn::Input => 0,
            },
            last_key: None,
            counters: PositionCounters::default(),
        })
    }

    pub fn counters(&self) -> PositionCounters {
        let mut c = self.counters;
        c.captured_lost = self.tracker.counters().lost;
        c
    }

    /// The PSN the next frame in order would get.
    pub fn next_psn(&self) -> u64 {
        self.next_out
    }

    /// The frame's key in the source stream, from its input PSN (if it came with one) and the bytes of its
    /// header (at least 16).
    #[inline]
    pub fn key(&mut self, psn: Option<u64>, header: &[u8]) -> Result<u64, Unplaced> {
        let r = match &mut self.source {
            Source::Psn => psn.ok_or(Unplaced::NoPsn),
            Source::Time(t) => t.key(header),
        };
        self.count_unplaced(r)
    }

    fn count_unplaced(&mut self, r: Result<u64, Unplaced>) -> Result<u64, Unplaced> {
        if let Err(e) = r {
            match e {
                Unplaced::Filtered => self.counters.filtered += 1,
                Unplaced::UnknownThread => self.counters.unknown_thread += 1,
                _ => self.counters.no_position += 1,
            }
        }
        r
    }

    /// Places the frame of `key`: its PSN, and the positions skipped before it. A frame placed here and
    /// then not sent (no buffer, full queue) keeps its position: declare it.
    #[inline]
    pub fn place(&mut self, key: u64) -> Place {
        let arrival = self.tracker.observe(key);
        match arrival {
            Arrival::Start => {
                self.offset = match self.first {
                    FirstPsn::At(n) => n.wrapping_sub(key),
                    FirstPsn::Input => 0,
                };
            }
            Arrival::Restart => {
                self.counters.restarts += 1;
                self.offset = self.next_out.wrapping_sub(key);
            }
            Arrival::Duplicate => {
                self.counters.duplicates += 1;
                return Place::Duplicate;
            }
            Arrival::Stray => {
                self.counters.stray += 1;
                return Place::Stray;
            }
            Arrival::Late => self.counters.late += 1,
            Arrival::InOrder | Arrival::Gap { .. } => {}
        }
        self.counters.placed += 1;
        let psn = key.wrapping_add(self.offset);
        let skipped = match arrival {
            Arrival::Gap { missing } => Some((psn.wrapping_sub(missing), missing)),
            _ => None,
        };
        if arrival != Arrival::Late {
            self.next_out = psn.wrapping_add(1);
            self.last_key = Some(key);
        }
        Place::At { psn, skipped }
    }

    /// Places a frame that has no key of its own but stands in the stream right after the last one (a
    /// fill frame in a recording).
    pub fn place_next(&mut self) -> Place {
        let key = match self.last_key {
            Some(k) => k.wrapping_add(1),
            None => match self.first {
                FirstPsn::At(n) => n,
                FirstPsn::Input => 0,
            },
        };
        self.place(key)
    }
}

/// Frames queued between two notices at least, so a run of drops merges into one range and notices
/// never crowd out frames (at 30,000 frames/s, 2 ms: far inside any receiver's deadline).
pub const NOTICE_EVERY_FRAMES: u32 = 64;

/// The positions a forwarder took and did not send, collected for the next gap notice, with totals by
/// cause. Bounded: a range that finds no room (more than [`MAX_RANGES`] waiting) is counted in
/// `undeclared` and left out of the notices, never stored.
///
/// When to send ([`due`](GapLog::due)): something waits, the queue has a free slot, and either
/// [`NOTICE_EVERY_FRAMES`] frames were queued since the last notice or half the ranges are taken. So
/// notices take at most one slot in 17 even when a full queue drops every other frame (a notice at every
/// drop would take the slot the next frame needs, whose drop makes the next notice, and so on).
#[derive(Debug, Clone)]
pub struct GapLog {
    ranges: [GapRange; MAX_RANGES],
    len: usize,
    totals: [u64; 4],
    undeclared: u64,
    sequence: u64,
    frames_since: u32,
}

impl Default for GapLog {
    fn default() -> Self {
        GapLog {
            ranges: [GapRange {
                first: 0,
                count: 0,
                cause: Cause::Other,
            }; MAX_RANGES],
            len: 0,
            totals: [0; 4],
            undeclared: 0,
            sequence: 0,
            frames_since: 0,
        }
    }
}

impl GapLog {
    /// Adds `count` positions from `first`, merged with the previous range when they continue it.
    #[inline]
    pub fn add(&mut self, first: u64, count: u64, cause: Cause) {
        if count == 0 {
            return;
        }
        self.totals[cause as usize] += count;
        if let Some(last) = self.ranges[..self.len].last_mut() {
            if last.cause == cause
                && last.first.wrapping_add(u64::from(last.count)) == first
                && u64::from(last.count) + count <= u64::from(u32::MAX)
            {
                last.count += count as u32;
                return;
            }
        }
        if self.len == MAX_RANGES || count > u64::from(u32::MAX) {
            self.undeclared += count;
            return;
        }
        self.ranges[self.len] = GapRange {
            first,
            count: count as u32,
            cause,
        };
        self.len += 1;
    }

    /// True when ranges wait for a notice.
    pub fn pending(&self) -> bool {
        self.len > 0
    }

    /// Counts a frame queued (for [`due`](Self::due)).
    #[inline]
    pub fn frame_queued(&mut self) {
        self.frames_since = self.frames_since.saturating_add(1);
    }

    /// Whether a notice should go now into a queue with `free` slots free; see the type's docs. At the
    /// end of a stream send whatever is [`pending`](Self::pending) instead.
    #[inline]
    pub fn due(&self, free: usize) -> bool {
        self.len > 0 && free > 0 && (self.frames_since >= NOTICE_EVERY_FRAMES || self.len >= MAX_RANGES / 2)
    }

    /// Positions declared so far, by cause ([`Cause::ALL`] order).
    pub fn totals(&self) -> [u64; 4] {
        self.totals
    }

    /// Positions that found no room in a notice.
    pub fn undeclared(&self) -> u64 {
        self.undeclared
    }

    /// Notices emitted.
    pub fn notices(&self) -> u64 {
        self.sequence
    }

    /// Writes the waiting ranges as one notice into `out` (at least [`notice::MAX_LEN`] bytes) and
    /// empties the log; returns the notice's length, which is never `data_len` (the length of a data
    /// datagram, so receivers tell the two apart by length: an empty range is added, or with every range
    /// taken the last one waits for the next notice).
    pub fn emit(&mut self, out: &mut [u8], data_len: usize) -> usize {
        let mut n = self.len;
        let len_of = |n: usize| notice::HEADER_LEN + n * notice::RANGE_LEN;
        let mut ranges = self.ranges;
        if len_of(n) == data_len {
            if n < MAX_RANGES {
                ranges[n] = GapRange {
                    first: 0,
                    count: 0,
                    cause: Cause::Other,
                };
                n += 1;
            } else {
                n -= 1;
            }
        }
        let written = notice::emit(out, self.sequence, self.totals, &ranges[..n]);
        self.sequence += 1;
        if n < self.len {
            // The range left out waits for the next notice.
            self.ranges[0] = self.ranges[self.len - 1];
            self.len = 1;
        } else {
            self.len = 0;
        }
        self.frames_since = 0;
        written
    }
}

/// The receiving side's record of what a forwarder declared: is a filled position one the forwarder
/// never sent, or one the path lost? Bounded (`capacity` ranges, the oldest forgotten first).
#[derive(Debug, Clone)]
pub struct DeclaredGaps {
    /// (first, end) half-open, sorted by `first`.
    ranges: VecDeque<(u64, u64)>,
    capacity: usize,
    /// The forwarder's totals from its newest notice.
    totals: [u64; 4],
    notices: u64,
    next_sequence: Option<u64>,
    notices_missing: u64,
    forgotten: u64,
}

/// What a receiver knows of a forwarder's declarations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeclaredSummary {
    pub notices: u64,
    /// Notices that never arrived (gaps in their sequence numbers).
    pub notices_missing: u64,
    /// The forwarder's own totals from its newest notice.
    pub captured_lost: u64,
    pub no_buffer: u64,
    pub queue_full: u64,
    pub other: u64,
    /// Ranges dropped from the record because it was full.
    pub forgotten_ranges: u64,
}

impl DeclaredGaps {
    pub fn new(capacity: usize) -> Self {
        DeclaredGaps {
            ranges: VecDeque::with_capacity(capacity.max(1)),
            capacity: capacity.max(1),
            totals: [0; 4],
            notices: 0,
            next_sequence: None,
            notices_missing: 0,
            forgotten: 0,
        }
    }

    /// Takes in a checked notice.
    pub fn add_notice<T: AsRef<[u8]>>(&mut self, n: &GapNotice<T>) {
        self.notices += 1;
        let seq = n.sequence();
        match self.next_sequence {
            Some(next) if seq > next => self.notices_missing += seq - next,
            _ => {}
        }
        if self.next_sequence.is_none_or(|next| seq >= next) {
            self.next_sequence = Some(seq + 1);
            self.totals = n.totals();
        }
        for r in n.ranges().filter(|r| r.count > 0) {
            self.add(r.first, r.first.wrapping_add(u64::from(r.count)));
        }
    }

    fn add(&mut self, first: u64, end: u64) {
        if self.ranges.len() == self.capacity {
            self.ranges.pop_front();
            self.forgotten += 1;
        }
        // Notices come in order unless the path reordered them.
        let at = self
            .ranges
            .iter()
            .rposition(|&(f, _)| f <= first)
            .map_or(0, |i| i + 1);
        self.ranges.insert(at, (first, end));
    }

    /// Whether `key` was declared; keys must be asked in increasing order (the order fill is written):
    /// ranges wholly below `key` are forgotten.
    pub fn take(&mut self, key: u64) -> bool {
        while let Some(&(_, end)) = self.ranges.front() {
            if end <= key {
                self.ranges.pop_front();
            } else {
                break;
            }
        }
        self.ranges
            .front()
            .is_some_and(|&(first, end)| first <= key && key < end)
    }

    pub fn summary(&self) -> DeclaredSummary {
        DeclaredSummary {
            notices: self.notices,
            notices_missing: self.notices_missing,
            captured_lost: self.totals[0],
            no_buffer: self.totals[1],
            queue_full: self.totals[2],
            other: self.totals[3],
            forgotten_ranges: self.forgotten,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vlbiflow_formats::vdif::VdifHeaderRepr;

    fn vdif_header(second: u32, frame: u32, thread: u16) -> [u8; 32] {
        let mut h = [0u8; 32];
        let r = VdifHeaderRepr {
            seconds: second,
            frame_number: frame,
            thread_id: thread,
            frame_len: 8224,
            ..VdifHeaderRepr::default()
        };
        r.emit(&mut h).unwrap();
        h
    }

    #[test]
    fn psn_input_keeps_every_frame_at_its_place() {
        let mut p = Positioner::new(SourceKey::Psn, FirstPsn::At(0)).unwrap();
        let h = [0u8; 16];
        let mut out = Vec::new();
        for psn in [1000u64, 1001, 1004, 1002, 1005, 1005] {
            let k = p.key(Some(psn), &h).unwrap();
            out.push(p.place(k));
        }
        assert_eq!(
            out[0],
            Place::At {
                psn: 0,
                skipped: None
            }
        );
        assert_eq!(
            out[1],
            Place::At {
                psn: 1,
                skipped: None
            }
        );
        assert_eq!(
            out[2],
            Place::At {
                psn: 4,
                skipped: Some((2, 2))
            }
        );
        assert_eq!(
            out[3],
            Place::At {
                psn: 2,
                skipped: None
            }
        );
        assert_eq!(
            out[4],
            Place::At {
                psn: 5,
                skipped: None
            }
        );
        assert_eq!(out[5], Place::Duplicate);
        let c = p.counters();
        assert_eq!((c.placed, c.captured_lost, c.late, c.duplicates), (5, 1, 1, 1));
        assert_eq!(p.next_psn(), 6);
    }

    #[test]
    fn psn_input_kept_as_it_is() {
        let mut p = Positioner::new(SourceKey::Psn, FirstPsn::Input).unwrap();
        let k = p.key(Some(77), &[0; 16]).unwrap();
        assert_eq!(
            p.place(k),
            Place::At {
                psn: 77,
                skipped: None
            }
        );
    }

    #[test]
    fn vdif_time_with_a_configured_list_skips_other_threads_without_a_position() {
        let src = SourceKey::VdifTime {
            frame_rate: Some(4),
            threads: Some(vec![1, 3]),
        };
        let mut p = Positioner::new(src, FirstPsn::At(10)).unwrap();
        let mut psns = Vec::new();
        // Second 100, frames 2..4 then 0 of 101, threads 1, 2 and 3; frame 3 of thread 3 lost.
        for (s, f) in [(100, 2), (100, 3), (101, 0)] {
            for t in [1u16, 2, 3] {
                if (s, f, t) == (100, 3, 3) {
                    continue;
                }
                match p.key(None, &vdif_header(s, f, t)) {
                    Ok(k) => psns.push(p.place(k)),
                    Err(e) => assert_eq!(e, Unplaced::Filtered),
                }
            }
        }
        // Thread 2 takes no position; the lost frame leaves its own hole (PSN 13).
        assert_eq!(
            psns,
            vec![
                Place::At {
                    psn: 10,
                    skipped: None
                },
                Place::At {
                    psn: 11,
                    skipped: None
                },
                Place::At {
                    psn: 12,
                    skipped: None
                },
                Place::At {
                    psn: 14,
                    skipped: Some((13, 1))
                },
                Place::At {
                    psn: 15,
                    skipped: None
                },
            ]
        );
        assert_eq!(p.counters().filtered, 3);
    }

    #[test]
    fn vdif_time_learns_threads_from_the_first_time_stamp_and_the_rate_from_the_first_second() {
        let src = SourceKey::VdifTime {
            frame_rate: None,
            threads: None,
        };
        let mut p = Positioner::new(src, FirstPsn::At(0)).unwrap();
        let mut got = Vec::new();
        for (s, f) in [(5, 1), (5, 2), (6, 0), (6, 1)] {
            for t in [7u16, 4] {
                let k = p.key(None, &vdif_header(s, f, t)).unwrap();
                got.push(match p.place(k) {
                    Place::At { psn, .. } => psn,
                    other => panic!("{other:?}"),
                });
            }
        }
        assert_eq!(got, (0..8).collect::<Vec<u64>>());
        // A thread that was not there at the first time stamp has no position.
        assert_eq!(p.key(None, &vdif_header(6, 2, 9)), Err(Unplaced::UnknownThread));
        assert_eq!(p.counters().unknown_thread, 1);
    }

    #[test]
    fn a_fill_frame_takes_the_next_place() {
        let mut p = Positioner::new(SourceKey::Psn, FirstPsn::At(0)).unwrap();
        let k = p.key(Some(5), &[0; 16]).unwrap();
        p.place(k);
        assert_eq!(
            p.place_next(),
            Place::At {
                psn: 1,
                skipped: None
            }
        );
        let k = p.key(Some(7), &[0; 16]).unwrap();
        assert_eq!(
            p.place(k),
            Place::At {
                psn: 2,
                skipped: None
            }
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        let t = |threads: Vec<u16>| SourceKey::VdifTime {
            frame_rate: Some(1),
            threads: Some(threads),
        };
        assert_eq!(
            Positioner::new(t(vec![]), FirstPsn::At(0)).err(),
            Some(PositionError::NoThreads)
        );
        assert_eq!(
            Positioner::new(t(vec![1, 1]), FirstPsn::At(0)).err(),
            Some(PositionError::DuplicateThread(1))
        );
        assert_eq!(
            Positioner::new(t(vec![1024]), FirstPsn::At(0)).err(),
            Some(PositionError::Thread(1024))
        );
        let learned = SourceKey::VdifTime {
            frame_rate: None,
            threads: Some(vec![0]),
        };
        assert_eq!(
            Positioner::new(learned, FirstPsn::Input).err(),
            Some(PositionError::InputNeedsKnownKeys)
        );
    }

    #[test]
    fn gap_log_merges_runs_and_counts_what_finds_no_room() {
        let mut g = GapLog::default();
        g.add(10, 2, Cause::QueueFull);
        g.add(12, 1, Cause::QueueFull);
        g.add(13, 1, Cause::CapturedLost);
        let mut buf = [0u8; notice::MAX_LEN];
        let n = g.emit(&mut buf, 0);
        let v = GapNotice::new_checked(&buf[..n]).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v.range(0).count, 3);
        assert_eq!(v.totals(), [1, 0, 3, 0]);
        for i in 0..40 {
            g.add(100 + 2 * i, 1, Cause::NoBuffer);
        }
        assert_eq!(g.undeclared(), 8);
        assert_eq!(g.notices(), 1);
    }

    #[test]
    fn declared_gaps_answer_in_order_and_forget_what_is_past() {
        let mut buf = [0u8; notice::MAX_LEN];
        let mut g = GapLog::default();
        g.add(5, 2, Cause::CapturedLost);
        g.add(9, 1, Cause::QueueFull);
        let n = g.emit(&mut buf, 0);
        let mut d = DeclaredGaps::new(4);
        d.add_notice(&GapNotice::new_checked(&buf[..n]).unwrap());
        let declared: Vec<u64> = (0..12).filter(|&k| d.take(k)).collect();
        assert_eq!(declared, vec![5, 6, 9]);
        // A later notice whose predecessor was lost.
        g.emit(&mut buf, 0);
        g.add(20, 1, Cause::NoBuffer);
        // A notice of one range would be as long as a 72-byte datagram: it gets an empty range.
        let n = g.emit(&mut buf, notice::HEADER_LEN + notice::RANGE_LEN);
        assert_eq!(n, notice::HEADER_LEN + 2 * notice::RANGE_LEN);
        d.add_notice(&GapNotice::new_checked(&buf[..n]).unwrap());
        let s = d.summary();
        assert_eq!((s.notices, s.notices_missing, s.no_buffer), (2, 1, 1));
        assert!(d.take(20));
    }
}
