//! The check engine: a sans-IO state machine fed frames in recording order. Per VDIF thread (one stream for
//! Mark5B) it follows frame-number continuity and records every jump with its position, counts missing,
//! duplicated, out-of-order, invalid and fill frames, watches header fields that must stay constant, and
//! keeps the time range. The per-frame path reads a few header words and touches no allocator.
//!
//! The frame rate is often not in the headers (VDIF EDV 0). Continuity across a second boundary therefore
//! is accounted with sums that are linear in the rate and resolved at the end, when the rate is known (given,
//! from the metadata, from EDV 1/3 sample rates, or learned as the highest frame number + 1):
//! frames missing over a jump (s1,f1) -> (s2,f2), s2 > s1, = R (s2 - s1) - (f1 + 1) + f2.

mod merge;

use crate::stats::{SampleStats, StatsConfig};
use serde::Serialize;
use std::sync::Arc;
use vlbiflow_formats::fill;
use vlbiflow_formats::mark5b::{bcd_decode, Mark5bHeader};
use vlbiflow_formats::time::{epoch_start_unix, FrameClock, UtcTime};
use vlbiflow_formats::vdif::{self, VdifHeader, VdifHeaderRepr};
use vlbiflow_reader::finding::{FileTable, Finding, FindingKind, Position, Severity};
use vlbiflow_reader::framer::FrameSink;
use vlbiflow_reader::source::FrameKind;

/// Jumps kept per thread with full detail; the rest are counted.
pub const MAX_JUMPS_LISTED: usize = 1000;
/// Header changes kept per thread with full detail.
const MAX_CHANGES_LISTED: usize = 20;
/// Recent frame stamps remembered per thread to tell a duplicate from a late frame.
const RECENT: usize = 64;

/// Settings of a check.
#[derive(Debug, Clone, Default)]
pub struct CheckConfig {
    /// Frames per second per thread, if the user knows it (`--frame-rate`).
    pub frame_rate: Option<u32>,
    /// Frame rate the recording's metadata gives.
    pub metadata_frame_rate: Option<u32>,
    /// Sample statistics and spectra, if wanted.
    pub stats: Option<StatsConfig>,
    /// Validation threads for a plain file read from start to end (`--threads`); None: one per core.
    pub threads: Option<usize>,
}

/// A time stamp as (POSIX second, frame number): comparable across VDIF epochs.
type Stamp = (i64, u32);

#[derive(Debug, Clone, Copy)]
struct RawJump {
    from: Stamp,
    to: Stamp,
    pos: Position,
    /// A range engine's second crossing (s, f) -> (s + 1, 0): whether it is a wrap depends on the highest
    /// frame number of the recording so far, of which the range knows only its own share (this). None: a jump.
    candidate: Option<u32>,
}

/// Header fields that must stay constant within a thread: the first 20 bytes of its header (words 0-4;
/// 0-3 of a legacy header) with the time (seconds, frame number), the thread ID and the invalid flag
/// cleared, read back through [`VdifHeader`]. Mark5B frames have an all-zero signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Signature([u8; 20]);

impl Signature {
    const NONE: Signature = Signature([0; 20]);

    #[inline]
    fn of_vdif(frame: &[u8], legacy: bool) -> Self {
        let mut b = [0u8; 20];
        let n = if legacy { vdif::LEGACY_HEADER_LEN } else { 20 };
        b[..n].copy_from_slice(&frame[..n]);
        let mut v = VdifHeader::new_unchecked(&mut b[..]);
        v.set_time(0, 0);
        v.set_thread_id(0);
        v.set_invalid(false);
        Signature(b)
    }

    #[inline]
    fn header(&self) -> VdifHeader<&[u8]> {
        VdifHeader::new_unchecked(&self.0[..])
    }

    /// Samples per frame this header implies.
    fn samples_per_frame(&self) -> Option<u64> {
        let h = self.header();
        vdif::samples_per_frame(h.payload_len(), h.bits_per_sample(), h.channels(), h.complex()).ok()
    }
}

#[derive(Debug, Clone)]
struct HeaderChange {
    pos: Position,
    what: String,
}

/// State of one thread.
#[derive(Debug, Clone)]
struct ThreadState {
    id: u16,
    sig: Signature,
    first: Stamp,
    last: Stamp,
    first_pos: Position,
    frames: u64,
    bytes: u64,
    invalid: u64,
    fill: u64,
    duplicates: u64,
    late: u64,
    missing_within: u64,
    cross_seconds: i64,
    cross_f1p1: u64,
    cross_f2: u64,
    jumps: Vec<RawJump>,
    jumps_total: u64,
    changes: Vec<HeaderChange>,
    changes_total: u64,
    recent: [Stamp; RECENT],
    recent_at: usize,
    max_frame: u32,
    sample_rate_hz: Option<u64>,
    /// Jumps listed (candidates apart).
    listed: usize,
    /// Stamps remembered so far.
    remembered: u64,
    /// A frame went backwards while fewer than [`RECENT`] stamps were remembered: a range engine then
    /// decided with a window that lacks the frames before its range.
    early_backward: bool,
    /// Header of the first frame.
    first_sig: Signature,
    /// The engine's highest frame number before this thread's first frame.
    entry_max: u32,
    /// Range engine: second crossings are listed as candidates, decided when the ranges are joined.
    range: bool,
}

impl ThreadState {
    fn new(id: u16, sig: Signature, stamp: Stamp, pos: Position) -> Self {
        ThreadState {
            id,
            sig,
            first: stamp,
            last: (stamp.0, stamp.1.wrapping_sub(1)),
            first_pos: pos,
            frames: 0,
            bytes: 0,
            invalid: 0,
            fill: 0,
            duplicates: 0,
            late: 0,
            missing_within: 0,
            cross_seconds: 0,
            cross_f1p1: 0,
            cross_f2: 0,
            jumps: Vec::new(),
            jumps_total: 0,
            changes: Vec::new(),
            changes_total: 0,
            recent: [(i64::MIN, 0); RECENT],
            recent_at: 0,
            max_frame: 0,
            sample_rate_hz: None,
            listed: 0,
            remembered: 0,
            early_backward: false,
            first_sig: sig,
            entry_max: 0,
            range: false,
        }
    }

    /// Follows continuity for one frame; returns false for a duplicate (not counted as a frame).
    #[inline]
    fn advance(&mut self, stamp: Stamp, pos: Position, rate_hint: Option<u32>, global_max: u32) -> bool {
        let (s1, f1) = self.last;
        let (s2, f2) = stamp;
        if s2 == s1 && f2 == f1.wrapping_add(1) {
            // The common case.
        } else if s2 == s1 && f2 > f1 {
            self.missing_within += u64::from(f2 - f1 - 1);
            self.jump(RawJump {
                from: self.last,
                to: stamp,
                pos,
                candidate: None,
            });
        } else if s2 > s1 {
            self.cross_seconds += s2 - s1;
            self.cross_f1p1 += u64::from(f1) + 1;
            self.cross_f2 += u64::from(f2);
            let crossing = s2 == s1 + 1 && f2 == 0;
            if crossing && self.range {
                self.candidate(RawJump {
                    from: self.last,
                    to: stamp,
                    pos,
                    candidate: Some(global_max),
                });
            } else if !(crossing && wraps(f1, rate_hint, global_max)) {
                self.jump(RawJump {
                    from: self.last,
                    to: stamp,
                    pos,
                    candidate: None,
                });
            }
        } else {
            // Backwards: a repeat of a recent frame, or a late one filling a hole counted before.
            if self.remembered < RECENT as u64 {
                self.early_backward = true;
            }
            if stamp == self.last || self.recent.contains(&stamp) {
                self.duplicates += 1;
                return false;
            }
            self.late += 1;
            self.remember(stamp);
            return true;
        }
        self.last = stamp;
        self.remember(stamp);
        true
    }

    #[inline]
    fn remember(&mut self, stamp: Stamp) {
        self.recent[self.recent_at] = stamp;
        self.recent_at = (self.recent_at + 1) % RECENT;
        self.remembered += 1;
    }

    fn jump(&mut self, j: RawJump) {
        self.jumps_total += 1;
        if self.listed < MAX_JUMPS_LISTED {
            self.listed += 1;
            self.jumps.push(j);
        }
    }

    /// A range engine's second crossing, decided when the ranges are joined (every one is kept: there is
    /// one per second and thread at most).
    #[cold]
    fn candidate(&mut self, j: RawJump) {
        self.jumps.push(j);
    }

    /// Frames missing at frame rate `r`, with late frames filling holes.
    fn missing(&self, r: u32) -> u64 {
        let m = self.missing_within as i128 + i128::from(r) * i128::from(self.cross_seconds)
            - self.cross_f1p1 as i128
            + self.cross_f2 as i128
            - self.late as i128;
        m.max(0) as u64
    }
}

/// Whether a step from frame `f1` of a second to frame 0 of the next is the stream's normal wrap: at the
/// frame rate known (`rate_hint`), or else at the highest frame number seen so far.
#[inline]
fn wraps(f1: u32, rate_hint: Option<u32>, global_max: u32) -> bool {
    match rate_hint {
        Some(r) => f1 + 1 == r,
        None => f1 >= global_max,
    }
}

/// One gap in a thread, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct Jump {
    /// File and offset of the first frame after the gap.
    pub file: String,
    pub offset: u64,
    /// Time stamp expected (the frame after the last one seen) and found.
    pub expected: String,
    pub found: String,
    /// Frames missing (negative: the stream jumped back).
    pub frames_missing: i64,
}

/// Per-thread result.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadReport {
    pub thread: u16,
    pub station: String,
    pub frame_len: usize,
    pub bits_per_sample: u8,
    pub channels: u32,
    pub complex: bool,
    pub edv: u8,
    pub version: u8,
    pub frames: u64,
    pub bytes: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub invalid: u64,
    pub fill: u64,
    /// missing / (frames + missing), as in Haystack's Mark6 recording tests.
    pub loss_fraction: f64,
    pub first: String,
    pub last: String,
    pub first_file: String,
    pub first_offset: u64,
    pub jumps_total: u64,
    pub jumps: Vec<Jump>,
    pub header_changes: u64,
    /// The recorded stream this thread belongs to, in scans of several streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
}

impl ThreadReport {
    /// "thread N", or "stream L thread N" in scans of several streams.
    pub fn name(&self) -> String {
        match &self.stream {
            Some(l) => format!("stream {l} thread {}", self.thread),
            None => format!("thread {}", self.thread),
        }
    }
}

/// Everything the engine concludes.
#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    pub format: FrameKind,
    pub frame_rate: Option<u32>,
    pub frame_rate_source: &'static str,
    pub frames: u64,
    pub bytes: u64,
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub invalid: u64,
    /// Fill frames (written by the recorder where data was missing) between data frames: each is a
    /// missing frame and is counted in `missing`.
    pub fill: u64,
    /// Of all fill frames, those made only of fill words (no header at all).
    pub headerless_fill: u64,
    /// Fill frames after the last data frame: padding of the recorder's last block (jive5ab writes one when a
    /// recording is aborted). Nothing follows them to say whether data was sent there: not counted as missing.
    pub tail_fill: u64,
    /// Fill frames before the first data frame, likewise not counted as missing.
    pub leading_fill: u64,
    pub loss_fraction: f64,
    pub start_utc: Option<String>,
    pub end_utc: Option<String>,
    pub duration_s: Option<f64>,
    /// Frame bytes per second of recorded time, all threads.
    pub data_rate_bps: Option<f64>,
    pub threads: Vec<ThreadReport>,
    pub stats: Option<crate::stats::StatsReport>,
    #[serde(skip)]
    pub findings: Vec<Finding>,
}

/// The check state machine. Implements [`FrameSink`], so a [`vlbiflow_reader::framer::Framer`] can drive it directly.
pub struct Checker {
    format: FrameKind,
    config: CheckConfig,
    /// Thread index by thread ID (one slot per possible ID; `u16::MAX` = not seen).
    slot: Vec<u16>,
    threads: Vec<ThreadState>,
    epoch_start: [i64; 64],
    global_max: u32,
    headerless_fill: u64,
    /// Fill frames since the last data frame, not yet attributed to a thread's gap.
    pending_fill: u64,
    leading_fill: u64,
    /// Index (in `threads`) of the thread of the last data frame.
    last_thread: Option<usize>,
    findings: Vec<Finding>,
    files: Arc<FileTable>,
    stats: Option<SampleStats>,
    mark5b_ref_mjd: i64,
    /// Range engine (see [`merge`]): second crossings become candidates.
    range: bool,
    /// Fill attributed to a frame marked frame numbers (a range engine's view of "one thread" may differ
    /// from the whole recording's).
    fill_marked: bool,
}

impl Checker {
    /// A checker for frames of `format`; positions are printed with `files`.
    pub fn new(format: FrameKind, config: CheckConfig, files: Arc<FileTable>) -> Self {
        let mut epoch_start = [0i64; 64];
        for (e, s) in epoch_start.iter_mut().enumerate() {
            *s = epoch_start_unix(e as u8);
        }
        let stats = config.stats.clone().map(SampleStats::new);
        Checker {
            format,
            config,
            slot: vec![u16::MAX; usize::from(vdif::MAX_THREAD_ID) + 1],
            threads: Vec::new(),
            epoch_start,
            global_max: 0,
            headerless_fill: 0,
            pending_fill: 0,
            leading_fill: 0,
            last_thread: None,
            findings: Vec::new(),
            files,
            stats,
            mark5b_ref_mjd: UtcTime::now().mjd().0,
            range: false,
            fill_marked: false,
        }
    }

    fn rate_hint(&self) -> Option<u32> {
        self.rate_hint_at(self.global_max)
    }

    /// The frame rate known when the highest frame number seen is `global_max`.
    fn rate_hint_at(&self, global_max: u32) -> Option<u32> {
        self.config
            .frame_rate
            .or(self.config.metadata_frame_rate.map(|r| r.max(global_max + 1)))
    }

    /// One VDIF frame (header checked by the framer).
    #[inline]
    fn vdif_frame(&mut self, frame: &[u8], pos: Position) {
        let h = VdifHeader::new_unchecked(frame);
        let sig = Signature::of_vdif(frame, h.legacy());
        let stamp = (
            self.epoch_start[h.epoch() as usize] + i64::from(h.seconds()),
            h.frame_number(),
        );
        let thread = h.thread_id();
        let invalid = h.invalid();
        let rate_hint = self.rate_hint();
        let global_max = self.global_max;
        let idx = self.thread_index(thread, sig, stamp, pos, || h.sample_rate_hz());
        let t = &mut self.threads[idx];
        if sig != t.sig {
            Self::header_change(t, sig, pos);
        }
        if stamp.1 > t.max_frame {
            t.max_frame = stamp.1;
            if stamp.1 > self.global_max {
                self.global_max = stamp.1;
            }
        }
        let before = t.last;
        if !t.advance(stamp, pos, rate_hint, global_max) {
            return;
        }
        t.frames += 1;
        t.bytes += frame.len() as u64;
        let pending = std::mem::take(&mut self.pending_fill);
        t.fill += pending;
        let one_thread = self.threads.len() == 1;
        self.last_thread = Some(idx);
        if pending > 0 && one_thread {
            self.fill_marks_frame_numbers(before, stamp, pending);
        }
        let t = &mut self.threads[idx];
        if invalid {
            t.invalid += 1;
        } else if let Some(s) = self.stats.as_mut() {
            s.offer(thread, stamp, frame);
        }
    }

    fn thread_index(
        &mut self,
        thread: u16,
        sig: Signature,
        stamp: Stamp,
        pos: Position,
        rate: impl FnOnce() -> Option<u64>,
    ) -> usize {
        let s = self.slot[thread as usize];
        if s != u16::MAX {
            return s as usize;
        }
        let mut t = ThreadState::new(thread, sig, stamp, pos);
        t.sample_rate_hz = rate();
        t.entry_max = self.global_max;
        t.range = self.range;
        self.threads.push(t);
        self.slot[thread as usize] = (self.threads.len() - 1) as u16;
        self.threads.len() - 1
    }

    #[cold]
    fn header_change(t: &mut ThreadState, sig: Signature, pos: Position) {
        let (old, new) = (t.sig.header(), sig.header());
        let mut what = Vec::new();
        if old.frame_len() != new.frame_len() {
            what.push(format!("frame length {} -> {}", old.frame_len(), new.frame_len()));
        }
        if old.channels() != new.channels() {
            what.push(format!("channels {} -> {}", old.channels(), new.channels()));
        }
        if old.version() != new.version() {
            what.push(format!("VDIF version {} -> {}", old.version(), new.version()));
        }
        if old.bits_per_sample() != new.bits_per_sample() {
            what.push(format!(
                "bits per sample {} -> {}",
                old.bits_per_sample(),
                new.bits_per_sample()
            ));
        }
        if old.complex() != new.complex() {
            what.push("complex flag changed".to_string());
        }
        if old.station_id() != new.station_id() {
            what.push(format!(
                "station {} -> {}",
                VdifHeaderRepr::station_to_string(old.station_id()),
                VdifHeaderRepr::station_to_string(new.station_id())
            ));
        }
        if old.edv() != new.edv() {
            what.push(format!("EDV {} -> {}", old.edv(), new.edv()));
        }
        if old.legacy() != new.legacy() {
            what.push("legacy flag changed".to_string());
        }
        if old.epoch() != new.epoch() {
            what.push(format!("reference epoch {} -> {}", old.epoch(), new.epoch()));
        }
        t.changes_total += 1;
        if t.changes.len() < MAX_CHANGES_LISTED {
            t.changes.push(HeaderChange {
                pos,
                what: what.join(", "),
            });
        }
        t.sig = sig;
    }

    fn mark5b_frame(&mut self, frame: &[u8], pos: Position) {
        let h = Mark5bHeader::new_unchecked(frame);
        let day = bcd_decode(h.bcd_jday(), 3, "Mark5B MJD").unwrap_or(0);
        let sod = bcd_decode(h.bcd_seconds(), 5, "Mark5B seconds").unwrap_or(0);
        // Resolve MJD mod 1000 to the day nearest today, as the time is displayed in UTC.
        let mjd = {
            let r = self.mark5b_ref_mjd;
            let base = r - r.rem_euclid(1000) + i64::from(day);
            [base - 1000, base, base + 1000]
                .into_iter()
                .min_by_key(|m| (m - r).abs())
                .unwrap_or(base)
        };
        let stamp = (
            (mjd - vlbiflow_formats::time::MJD_UNIX_EPOCH) * 86400 + i64::from(sod),
            u32::from(h.frame_number()),
        );
        let sig = Signature::NONE;
        let rate_hint = self.rate_hint();
        let global_max = self.global_max;
        let idx = self.thread_index(0, sig, stamp, pos, || None);
        let t = &mut self.threads[idx];
        if stamp.1 > t.max_frame {
            t.max_frame = stamp.1;
            self.global_max = self.global_max.max(stamp.1);
        }
        let before = t.last;
        if t.advance(stamp, pos, rate_hint, global_max) {
            t.frames += 1;
            t.bytes += frame.len() as u64;
            let pending = std::mem::take(&mut self.pending_fill);
            t.fill += pending;
            self.last_thread = Some(idx);
            if pending > 0 {
                self.fill_marks_frame_numbers(before, stamp, pending);
            }
        }
    }

    /// Fill frames stand where frames were: `pending` of them between data frames `before` and `after` of
    /// one thread. When the data frame after them opens a new second (frame 0), the second before held at
    /// least `before.frame + pending + 1` frames: a frame rate learned from frame numbers must not be lower.
    fn fill_marks_frame_numbers(&mut self, before: Stamp, after: Stamp, pending: u64) {
        if after.0 == before.0 + 1 && after.1 == 0 {
            self.fill_marked = true;
            let highest = u64::from(before.1) + pending;
            if let Ok(h) = u32::try_from(highest) {
                self.global_max = self.global_max.max(h);
            }
        }
    }

    /// Chooses the frame rate: given, from metadata, from EDV 1/3 sample rates, or learned.
    fn frame_rate(&mut self) -> (Option<u32>, &'static str) {
        if let Some(r) = self.config.frame_rate {
            return (Some(r), "given (--frame-rate)");
        }
        if let Some(r) = self.config.metadata_frame_rate {
            // A recorder may have learned its rate from frame numbers, which errs low when the last frames
            // of a second were lost; the data outranks such a hint.
            if self.global_max < r {
                return (Some(r), "recording metadata");
            }
            return (
                Some(self.global_max + 1),
                "learned (above the recording metadata's rate)",
            );
        }
        if self.format == FrameKind::Vdif {
            if let Some(t) = self.threads.first() {
                if let Some(hz) = t.sample_rate_hz {
                    let h = t.sig.header();
                    if let Ok(r) = vdif::frame_rate(
                        hz,
                        h.bits_per_sample(),
                        h.channels(),
                        h.complex(),
                        h.payload_len(),
                    ) {
                        return (Some(r), "EDV sample rate");
                    }
                }
            }
        }
        let crossed = self.threads.iter().any(|t| t.cross_seconds > 0);
        if crossed {
            let learned = self.global_max + 1;
            // A second whose last frame is always lost reads one frame short: the sample rate the learned
            // rate implies says so when one more frame per second makes it a round number.
            if self.format == FrameKind::Vdif {
                if let Some(t) = self.threads.first() {
                    if let Some(spf) = t.sig.samples_per_frame() {
                        if let Some(r) = vdif::corrected_learned_rate(learned, spf) {
                            return (
                                Some(r),
                                "learned and corrected: the highest frame number + 1 gives a sample rate that is \
                                 not a round number, one frame more per second does (the last frame of each \
                                 second looks lost); give --frame-rate if that is wrong",
                            );
                        }
                    }
                }
            }
            (
                Some(learned),
                "learned (highest frame number + 1; a frame lost at the end of every second would not show)",
            )
        } else {
            (None, "unknown (less than a second of data; give --frame-rate)")
        }
    }

    /// Ends the check and reports.
    pub fn finish(mut self) -> EngineReport {
        let (rate, rate_source) = self.frame_rate();
        let clock = rate.and_then(|r| FrameClock::new(r).ok());
        let stamp_str = |s: Stamp| -> String {
            match clock {
                Some(c) if s.1 < c.frame_rate() => c
                    .utc_of(s.0 * i64::from(c.frame_rate()) + i64::from(s.1))
                    .to_iso8601(),
                _ => format!("{}+frame {}", UtcTime::from_unix(s.0, 0).to_iso8601(), s.1),
            }
        };
        let next_stamp = |s: Stamp| -> Stamp {
            match rate {
                Some(r) if s.1 + 1 >= r => (s.0 + 1, 0),
                _ => (s.0, s.1.wrapping_add(1)),
            }
        };
        let mut threads = Vec::new();
        let (mut frames, mut bytes, mut missing, mut dup, mut late, mut invalid, mut fill) =
            (0, 0, 0, 0, 0, 0, 0);
        let mut first_index: Option<i64> = None;
        let mut end_index: Option<i64> = None;
        let mut findings = std::mem::take(&mut self.findings);
        self.threads.sort_by_key(|t| t.id);
        for t in &self.threads {
            if let Some(r) = rate {
                if t.max_frame >= r {
                    findings.push(Finding::new(
                        Severity::Error,
                        FindingKind::FrameGap,
                        format!(
                            "thread {}: frame number {} is not below the frame rate {r} ({rate_source})",
                            t.id, t.max_frame
                        ),
                    ));
                }
            }
            let m = rate.map_or(t.missing_within, |r| t.missing(r));
            let jumps: Vec<Jump> = t
                .jumps
                .iter()
                .filter_map(|j| {
                    let n = match rate {
                        Some(r) => {
                            (j.to.0 - j.from.0) * i64::from(r) + i64::from(j.to.1) - i64::from(j.from.1) - 1
                        }
                        None => i64::from(j.to.1) - i64::from(j.from.1) - 1,
                    };
                    (n != 0).then(|| Jump {
                        file: self.files.path(j.pos.file).display().to_string(),
                        offset: j.pos.offset,
                        expected: stamp_str(next_stamp(j.from)),
                        found: stamp_str(j.to),
                        frames_missing: n,
                    })
                })
                .collect();
            let jumps_total = t.jumps_total - (t.jumps.len() as u64 - jumps.len() as u64);
            for c in &t.changes {
                findings.push(Finding::at(
                    Severity::Warn,
                    FindingKind::HeaderChange,
                    self.files.path(c.pos.file),
                    c.pos.offset,
                    format!("thread {}: {}", t.id, c.what),
                ));
            }
            if t.changes_total > t.changes.len() as u64 {
                findings.push(Finding::new(
                    Severity::Warn,
                    FindingKind::HeaderChange,
                    format!(
                        "thread {}: {} more header changes",
                        t.id,
                        t.changes_total - t.changes.len() as u64
                    ),
                ));
            }
            if let Some(r) = rate {
                let fi = t.first.0 * i64::from(r) + i64::from(t.first.1);
                let li = t.last.0 * i64::from(r) + i64::from(t.last.1) + 1;
                first_index = Some(first_index.map_or(fi, |x| x.min(fi)));
                end_index = Some(end_index.map_or(li, |x| x.max(li)));
            }
            let h = t.sig.header();
            threads.push(ThreadReport {
                thread: t.id,
                station: if self.format == FrameKind::Vdif {
                    VdifHeaderRepr::station_to_string(h.station_id())
                } else {
                    String::new()
                },
                frame_len: if self.format == FrameKind::Vdif {
                    h.frame_len()
                } else {
                    vlbiflow_formats::mark5b::FRAME_LEN
                },
                bits_per_sample: h.bits_per_sample(),
                channels: h.channels(),
                complex: h.complex(),
                edv: h.edv(),
                version: h.version(),
                frames: t.frames,
                bytes: t.bytes,
                missing: m,
                duplicates: t.duplicates,
                out_of_order: t.late,
                invalid: t.invalid,
                fill: t.fill,
                loss_fraction: loss_fraction(m, t.frames),
                first: stamp_str(t.first),
                last: stamp_str(t.last),
                first_file: self.files.path(t.first_pos.file).display().to_string(),
                first_offset: t.first_pos.offset,
                jumps_total,
                jumps,
                header_changes: t.changes_total,
                stream: None,
            });
            frames += t.frames;
            bytes += t.bytes;
            missing += m;
            dup += t.duplicates;
            late += t.late;
            invalid += t.invalid;
            fill += t.fill;
        }
        let (start_utc, end_utc, duration_s, data_rate_bps) = match (clock, first_index, end_index) {
            (Some(c), Some(a), Some(b)) => {
                let d = (b - a) as f64 / f64::from(c.frame_rate());
                (
                    Some(c.utc_of(a).to_iso8601()),
                    Some(c.utc_of(b).to_iso8601()),
                    Some(d),
                    (d > 0.0).then(|| bytes as f64 * 8.0 / d),
                )
            }
            _ => (None, None, None, None),
        };
        let stats = self
            .stats
            .take()
            .map(|s| s.finish(rate, &self.threads_sample_rates(rate)));
        EngineReport {
            format: self.format,
            frame_rate: rate,
            frame_rate_source: rate_source,
            frames,
            bytes,
            missing,
            duplicates: dup,
            out_of_order: late,
            invalid,
            fill,
            headerless_fill: self.headerless_fill,
            tail_fill: self.pending_fill,
            leading_fill: self.leading_fill,
            loss_fraction: loss_fraction(missing, frames),
            start_utc,
            end_utc,
            duration_s,
            data_rate_bps,
            threads,
            stats,
            findings,
        }
    }

    /// Sample rate per thread: from EDV 1/3 headers, else frame rate x samples per frame.
    fn threads_sample_rates(&self, rate: Option<u32>) -> Vec<(u16, Option<f64>)> {
        self.threads
            .iter()
            .map(|t| {
                let from_header = t.sample_rate_hz.map(|hz| hz as f64);
                let derived =
                    rate.and_then(|r| t.sig.samples_per_frame().map(|spf| spf as f64 * f64::from(r)));
                (t.id, from_header.or(derived))
            })
            .collect()
    }
}

/// missing / (present + missing).
pub fn loss_fraction(missing: u64, present: u64) -> f64 {
    let total = missing + present;
    if total == 0 {
        0.0
    } else {
        missing as f64 / total as f64
    }
}

impl FrameSink for Checker {
    #[inline]
    fn frame(&mut self, frame: &[u8], pos: Position) {
        match self.format {
            FrameKind::Vdif => self.vdif_frame(frame, pos),
            FrameKind::M5b => self.mark5b_frame(frame, pos),
        }
    }

    /// A fill frame is a missing frame where it stands: whatever its header says (jive5ab writes time 0,
    /// thread 0, station 0), it is neither a data frame, nor late, nor a duplicate, creates no thread and
    /// changes no header. The gap it stands in is counted missing by the time stamps of the data frames
    /// around it; it is attributed to the thread of the next data frame. Fill before the first or after
    /// the last data frame is reported apart (`leading_fill`, `tail_fill`).
    fn fill(&mut self, frame: &[u8], pos: Position) {
        let _ = pos;
        if fill::is_fill_words(frame) {
            self.headerless_fill += 1;
        }
        if self.last_thread.is_none() {
            self.leading_fill += 1;
        } else {
            self.pending_fill += 1;
        }
    }

    fn finding(&mut self, finding: Finding) {
        self.findings.push(finding);
    }
}

impl EngineReport {
    /// One report for a scan of several streams, from each stream's own report: counts add up, threads
    /// carry their stream's label, times span all streams.
    pub fn merge(parts: Vec<(String, EngineReport)>) -> Option<EngineReport> {
        let mut it = parts.into_iter();
        let (label, mut acc) = it.next()?;
        let tag = |label: &str, e: &mut EngineReport| {
            for t in &mut e.threads {
                t.stream = Some(label.to_string());
            }
            for f in &mut e.findings {
                f.message = format!("stream {label}: {}", f.message);
            }
        };
        tag(&label, &mut acc);
        for (label, mut e) in it {
            tag(&label, &mut e);
            acc.frames += e.frames;
            acc.bytes += e.bytes;
            acc.missing += e.missing;
            acc.duplicates += e.duplicates;
            acc.out_of_order += e.out_of_order;
            acc.invalid += e.invalid;
            acc.fill += e.fill;
            acc.headerless_fill += e.headerless_fill;
            acc.tail_fill += e.tail_fill;
            acc.leading_fill += e.leading_fill;
            acc.start_utc = match (acc.start_utc.take(), e.start_utc) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            acc.end_utc = match (acc.end_utc.take(), e.end_utc) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if acc.frame_rate != e.frame_rate {
                acc.frame_rate_source = "differs between streams (see each thread)";
            }
            acc.threads.extend(e.threads);
            acc.findings.extend(e.findings);
        }
        acc.loss_fraction = loss_fraction(acc.missing, acc.frames);
        acc.duration_s = match (&acc.start_utc, &acc.end_utc) {
            (Some(a), Some(b)) => vlbiflow_reader::ls::parse_iso8601(b)
                .zip(vlbiflow_reader::ls::parse_iso8601(a))
                .map(|(b, a)| b - a),
            _ => None,
        };
        acc.data_rate_bps = acc
            .duration_s
            .filter(|d| *d > 0.0)
            .map(|d| acc.bytes as f64 * 8.0 / d);
        Some(acc)
    }
}
