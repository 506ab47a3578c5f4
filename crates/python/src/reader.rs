//! The sample reader behind `vlbiflow.open`: frames of a recording in stream order (checker's
//! [`FrameReader`]) placed into frame sets (all threads of one time) and decoded with
//! `vlbiflow_formats::samples` into rows of (time, thread, value). Pure Rust, no Python: the binding runs
//! it with the GIL released.
//!
//! Frames whose frame set lies in the range being read are decoded straight from the reader's batch into
//! the caller's buffer, a batch at a time, spread over the CPUs; only frames ahead of that range are
//! copied (kept until a later read asks for them).

use std::collections::{BTreeMap, BTreeSet};
use vlbiflow_formats::mark5b::{self, Mark5bHeader};
use vlbiflow_formats::samples::{self, SampleFormat, BASEBAND_SCALE};
use vlbiflow_formats::time::{epoch_start_unix, MJD_UNIX_EPOCH};
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;
use vlbiflow_reader::frames::FrameReader;
use vlbiflow_reader::{Finding, FindingKind, Recording, Severity};

/// Frame sets a frame may arrive late (after frames of later sets) and still be placed.
const WINDOW: i64 = 256;
/// Frames looked at to learn the stream's shape, at most.
const PROBE_FRAMES: usize = 1 << 17;

/// Findings that mean the input is damaged (raised in strict mode).
pub fn is_damage(f: &Finding) -> bool {
    f.severity == Severity::Error
        && matches!(
            f.kind,
            FindingKind::Io
                | FindingKind::FileHeader
                | FindingKind::BlockHeader
                | FindingKind::Truncated
                | FindingKind::Garbage
                | FindingKind::MissingFile
                | FindingKind::MixedScans
        )
}

/// What the caller says about a Mark5B recording (its headers carry neither the sample format nor the
/// thousands of the MJD).
#[derive(Debug, Clone, Copy, Default)]
pub struct Mark5bOptions {
    /// Bits per sample (1 or 2).
    pub bits: Option<u8>,
    /// Channels (a power of two; channels x bits at most 32).
    pub channels: Option<u32>,
    /// A day within 500 days of the recording, as an MJD (default: today).
    pub ref_mjd: Option<i64>,
}

/// What the reader learned about the stream.
#[derive(Debug, Clone)]
pub struct Info {
    pub kind: FrameKind,
    pub frame_len: usize,
    pub header_len: usize,
    pub bits: u8,
    pub channels: u32,
    pub complex: bool,
    pub station: u16,
    pub edv: u8,
    /// Thread IDs, in column order (sorted).
    pub threads: Vec<u16>,
    pub frame_rate: u32,
    /// Where the frame rate came from.
    pub frame_rate_source: &'static str,
    pub samples_per_frame: u64,
    /// POSIX second of the first frame set, and its frame number.
    pub start_second: i64,
    pub start_frame: u32,
    /// Mark5B: the MJD the headers' MJD mod 1000 is resolved near.
    pub ref_mjd: i64,
    /// Header of the first valid frame in stream order (what a reader of the gathered file sees first).
    pub first_header: Vec<u8>,
}

/// Per-byte decoding table: the values `samples::decode` (or `samples::decode_mark5b`) gives for each byte
/// value, times a scale. Decoding stays defined in one place (vlbiflow_formats::samples); the table only
/// caches it with the unit change.
pub struct ByteTable {
    per_byte: usize,
    values: Vec<f32>,
}

impl ByteTable {
    pub fn new(kind: FrameKind, bits: u8, scale: f32) -> ByteTable {
        let format = SampleFormat::new(bits, 1, false).expect("bits checked by the probe");
        let per_byte = format.values_per_byte();
        let mut values = vec![0f32; 256 * per_byte];
        for (b, out) in values.chunks_exact_mut(per_byte).enumerate() {
            match kind {
                FrameKind::M5b => samples::decode_mark5b(format, &[b as u8], out),
                _ => samples::decode(format, &[b as u8], out),
            }
            .expect("one byte of one-channel samples");
            out.iter_mut().for_each(|v| *v *= scale);
        }
        ByteTable { per_byte, values }
    }

    fn decode_n<const N: usize>(&self, data: &[u8], out: &mut [f32]) {
        for (o, &b) in out.chunks_exact_mut(N).zip(data) {
            o.copy_from_slice(&self.values[usize::from(b) * N..][..N]);
        }
    }

    /// Decodes `data` into `out` (`per_byte` values per byte).
    pub fn decode(&self, data: &[u8], out: &mut [f32]) {
        debug_assert_eq!(data.len() * self.per_byte, out.len());
        match self.per_byte {
            8 => self.decode_n::<8>(data, out),
            4 => self.decode_n::<4>(data, out),
            2 => self.decode_n::<2>(data, out),
            _ => self.decode_n::<1>(data, out),
        }
    }
}

impl Info {
    pub fn format(&self) -> SampleFormat {
        SampleFormat {
            bits: self.bits,
            channels: self.channels,
            complex: self.complex,
        }
    }
    /// f32 values per time step and thread.
    pub fn values_per_time(&self) -> usize {
        self.format().values_per_time()
    }
    /// f32 values per output row (one time step, all threads).
    pub fn row(&self) -> usize {
        self.values_per_time() * self.threads.len()
    }
    pub fn sample_rate(&self) -> f64 {
        self.frame_rate as f64 * self.samples_per_frame as f64
    }
}

/// Counters of frames not placed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub frames: u64,
    pub fill: u64,
    pub invalid: u64,
    /// Frames of a thread not seen while probing, or of another length.
    pub stray: u64,
    /// Frames arriving after their time was handed out.
    pub late: u64,
    pub duplicate: u64,
}

/// Error out of the reader: damaged or unreadable input (a message naming file and offset), or a usage
/// error (options that do not fit the recording).
#[derive(Debug)]
pub struct ReadError {
    pub message: String,
    /// The caller's options are at fault, not the recording.
    pub usage: bool,
}

impl ReadError {
    pub fn damage(message: impl Into<String>) -> ReadError {
        ReadError {
            message: message.into(),
            usage: false,
        }
    }
    pub fn usage(message: impl Into<String>) -> ReadError {
        ReadError {
            message: message.into(),
            usage: true,
        }
    }
}

/// Time and thread of a frame with data, from its header; None for frames marked invalid (VDIF) or with an
/// undecodable time code (Mark5B).
#[inline]
pub(crate) fn stamp(kind: FrameKind, bytes: &[u8], ref_mjd: i64) -> Option<(u16, i64, u32)> {
    match kind {
        FrameKind::M5b => {
            if bytes.len() < mark5b::HEADER_LEN {
                return None;
            }
            let h = Mark5bHeader::new_unchecked(bytes);
            let day_second = h.day_second()?;
            let mjd = mark5b::resolve_mjd((day_second / 86_400) as u16, ref_mjd);
            let sec = (mjd - MJD_UNIX_EPOCH) * 86_400 + day_second % 86_400;
            Some((0, sec, u32::from(h.frame_number())))
        }
        _ => {
            if bytes.len() < 32 {
                return None;
            }
            let h = VdifHeader::new_unchecked(bytes);
            if h.invalid() {
                return None;
            }
            let sec = epoch_start_unix(h.epoch()) + i64::from(h.seconds());
            Some((h.thread_id(), sec, h.frame_number()))
        }
    }
}

/// The MJD of today, the default reference for Mark5B's MJD mod 1000 (as `vlbiflow check` resolves it).
fn today_mjd() -> i64 {
    vlbiflow_formats::time::UtcTime::now().mjd().0
}

/// What [`probe`] learned, and its frame reader when it stopped inside the first batch: a
/// [`SampleReader`] then starts from that batch instead of reading the start of the recording again.
pub struct Probe {
    pub info: Info,
    /// The reader, still on its first batch, and the findings taken from it.
    reader: Option<(FrameReader, Vec<Finding>)>,
}

/// Learns the shape of a recording from its first frames.
pub fn probe(
    rec: &Recording,
    frame_rate: Option<u32>,
    strict: bool,
    m5b: Mark5bOptions,
) -> Result<Probe, ReadError> {
    let mut fr = FrameReader::open(rec);
    let kind = fr.kind();
    if !matches!(kind, FrameKind::Vdif | FrameKind::M5b) {
        return Err(ReadError::usage(format!(
            "{}: {kind} frames cannot be decoded into samples (use raw() or check())",
            rec.name
        )));
    }
    let ref_mjd = m5b.ref_mjd.unwrap_or_else(today_mjd);
    let rate_hint = frame_rate.or(rec.frame_rate_hint());
    let mut first: Option<[u8; 32]> = None;
    let mut threads = BTreeSet::new();
    // Highest frame number per POSIX second.
    let mut max_fn: BTreeMap<i64, u32> = BTreeMap::new();
    let mut start: Option<(i64, u32)> = None;
    let mut seen = 0usize;
    let mut batches = 0usize;
    let mut in_first_batch = false;
    'outer: while let Some(batch) = fr.next_batch() {
        batches += 1;
        for (e, bytes) in batch.iter() {
            if e.fill {
                continue;
            }
            let Some((thread, sec, frame)) = stamp(kind, bytes, ref_mjd) else {
                continue;
            };
            if first.is_none() {
                let mut b = [0u8; 32];
                b.copy_from_slice(&bytes[..32]);
                first = Some(b);
            }
            threads.insert(thread);
            let m = max_fn.entry(sec).or_insert(0);
            *m = (*m).max(frame);
            if start.is_none_or(|s| (sec, frame) < s) {
                start = Some((sec, frame));
            }
            seen += 1;
            if seen >= PROBE_FRAMES || max_fn.len() >= 2 || (rate_hint.is_some() && seen >= 4096) {
                in_first_batch = batches == 1;
                break 'outer;
            }
        }
        if strict {
            if let Some(f) = fr.take_findings().into_iter().find(is_damage) {
                return Err(ReadError::damage(f.to_string()));
            }
        }
    }
    let findings = fr.take_findings();
    if strict {
        if let Some(f) = findings.iter().find(|f| is_damage(f)) {
            return Err(ReadError::damage(f.to_string()));
        }
    }
    let name = kind.to_string();
    let Some(first) = first else {
        return Err(ReadError::damage(format!(
            "{}: no valid {name} frame found",
            rec.name
        )));
    };
    // Mark5B's sample format is the caller's word, VDIF's the headers'.
    let bad = |e: vlbiflow_formats::Error| {
        let message = format!("{}: {e}", rec.name);
        match kind {
            FrameKind::M5b => ReadError::usage(message),
            _ => ReadError::damage(message),
        }
    };
    let (frame_len, header_len, format, station, edv, edv_rate) = match kind {
        FrameKind::M5b => {
            let (Some(bits), Some(channels)) = (m5b.bits, m5b.channels) else {
                return Err(ReadError::usage(format!(
                    "{}: Mark5B headers do not say how the samples are coded: give bits= and nchan= \
                     (as baseband's mark5b.open needs bps and nchan)",
                    rec.name
                )));
            };
            let format = SampleFormat::new(bits, channels, false).map_err(bad)?;
            // The coding check of formats (1 or 2 bits, at most 32 bit streams).
            samples::decode_mark5b(format, &[], &mut []).map_err(bad)?;
            (mark5b::FRAME_LEN, mark5b::HEADER_LEN, format, 0, 0, None)
        }
        _ => {
            let h = VdifHeader::new_unchecked(&first[..]);
            let format = SampleFormat::new(h.bits_per_sample(), h.channels(), h.complex()).map_err(bad)?;
            for (given, found, what) in [
                (m5b.bits.map(u32::from), u32::from(format.bits), "bits per sample"),
                (m5b.channels, format.channels, "channels"),
            ] {
                if given.is_some_and(|g| g != found) {
                    return Err(ReadError::usage(format!(
                        "{}: the VDIF headers say {found} {what}, not {} as given",
                        rec.name,
                        given.unwrap_or_default()
                    )));
                }
            }
            let edv_rate = h.sample_rate_hz();
            (
                h.frame_len(),
                h.header_len(),
                format,
                h.station_id(),
                h.edv(),
                edv_rate,
            )
        }
    };
    let spf = vlbiflow_formats::vdif::samples_per_frame(
        frame_len - header_len,
        format.bits,
        format.channels,
        format.complex,
    )
    .map_err(bad)?;
    let (frame_rate, source) = if let Some(r) = frame_rate {
        (r, "given")
    } else if let Some(r) = rec.frame_rate_hint() {
        (r, "scan metadata")
    } else if let Some(r) = edv_rate.filter(|&r| r > 0 && spf > 0 && r % spf == 0) {
        ((r / spf) as u32, "VDIF EDV sample rate")
    } else if max_fn.len() >= 2 {
        // Every second but the last is complete: its highest frame number is rate - 1.
        let complete = max_fn.values().take(max_fn.len() - 1).max().copied().unwrap_or(0);
        (complete + 1, "highest frame number + 1")
    } else {
        (
            max_fn.values().max().copied().unwrap_or(0) + 1,
            "highest frame number + 1 (data within one second)",
        )
    };
    if frame_rate == 0 {
        return Err(ReadError::usage(format!(
            "{}: the frame rate must be positive",
            rec.name
        )));
    }
    let (start_second, start_frame) = start.expect("a valid frame sets the start");
    let info = Info {
        kind,
        frame_len,
        header_len,
        bits: format.bits,
        channels: format.channels,
        complex: format.complex,
        station,
        edv,
        threads: threads.into_iter().collect(),
        frame_rate,
        frame_rate_source: source,
        samples_per_frame: spf,
        start_second,
        start_frame,
        ref_mjd,
        first_header: first[..header_len.min(first.len())].to_vec(),
    };
    Ok(Probe {
        info,
        reader: in_first_batch.then_some((fr, findings)),
    })
}

/// Payloads of one frame set ahead of the range being read, by thread column.
struct Slot {
    payloads: Vec<Option<Vec<u8>>>,
}

/// The decoded frame set being handed out row by row.
struct Current {
    values: Vec<f32>,
    missing: Vec<bool>,
    offset: usize,
}

/// A frame to decode: its payload, its frame set (relative to the range's first) and thread column.
struct Placement<'a> {
    payload: &'a [u8],
    set: usize,
    col: usize,
}

/// Streams decoded samples of a recording.
pub struct SampleReader {
    rec: Recording,
    pub info: Info,
    strict: bool,
    frames: FrameReader,
    column: Vec<i32>,
    /// Frames of sets beyond the range being read, kept for a later read.
    pending: BTreeMap<i64, Slot>,
    pool: Vec<Vec<u8>>,
    /// First frame set not yet handed out.
    next_index: i64,
    /// Highest frame set index seen.
    max_seen: Option<i64>,
    done: bool,
    current: Option<Current>,
    /// Which (set, thread) of the range being read has its frame; reused.
    present: Vec<bool>,
    /// Next frame of the reader's current batch not yet taken (None: the batch is used up).
    cursor: Option<usize>,
    /// Read position in samples from the start.
    pub position: u64,
    pub counts: Counts,
    pub findings: Vec<Finding>,
    /// Decoding table with the units (this workspace's, or baseband's: BASEBAND_SCALE larger).
    table: ByteTable,
    workers: usize,
}

impl SampleReader {
    pub fn new(rec: Recording, probe: Probe, strict: bool, baseband_units: bool) -> SampleReader {
        let info = probe.info;
        let mut column = vec![-1i32; usize::from(vlbiflow_formats::vdif::MAX_THREAD_ID) + 1];
        for (i, &t) in info.threads.iter().enumerate() {
            column[usize::from(t)] = i as i32;
        }
        // Start from the probe's first batch if it is still there, else from the start again.
        let (frames, cursor, findings) = match probe.reader {
            Some((frames, findings)) => (frames, Some(0), findings),
            None => (FrameReader::open(&rec), None, Vec::new()),
        };
        SampleReader {
            next_index: i64::from(info.start_frame),
            max_seen: None,
            rec,
            strict,
            frames,
            column,
            pending: BTreeMap::new(),
            pool: Vec::new(),
            done: false,
            current: None,
            present: Vec::new(),
            cursor,
            position: 0,
            counts: Counts::default(),
            findings,
            table: ByteTable::new(
                info.kind,
                info.bits,
                if baseband_units { BASEBAND_SCALE } else { 1.0 },
            ),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            info,
        }
    }

    /// Bytes in the recording's files.
    /// The recording being read.
    pub fn recording(&self) -> &Recording {
        &self.rec
    }

    /// Whether damage raises.
    pub fn strict(&self) -> bool {
        self.strict
    }

    pub fn total_bytes(&self) -> u64 {
        self.rec.total_bytes()
    }

    /// Back to the start of the recording.
    pub fn rewind(&mut self) {
        self.frames = FrameReader::open(&self.rec);
        for (_, slot) in std::mem::take(&mut self.pending) {
            self.pool.extend(slot.payloads.into_iter().flatten());
        }
        self.next_index = i64::from(self.info.start_frame);
        self.max_seen = None;
        self.cursor = None;
        self.done = false;
        self.current = None;
        self.position = 0;
        self.counts = Counts::default();
        self.findings.clear();
    }

    /// Hands out the next `sets` frame sets: decodes them into `dst` (`sets` x samples_per_frame rows of
    /// threads x values; None only skips them) and sets `missing` (`sets` x threads flags; a missing
    /// frame's values are `fill_value`). Returns the number of sets handed out: fewer only at the end.
    ///
    /// Frames are taken in stream order. A set is final once all its threads are there, once a frame more
    /// than [`WINDOW`] sets later has been read, or at the end of the recording; a frame of a set already
    /// final counts as late. So what lands where depends only on the order of the frames, not on how the
    /// recording is read: reading stops at the first frame after the range is final and resumes there.
    fn take_sets(
        &mut self,
        mut dst: Option<&mut [f32]>,
        missing: &mut [bool],
        sets: usize,
        fill_value: f32,
    ) -> Result<usize, ReadError> {
        let threads = self.info.threads.len();
        let vals = self.info.values_per_time();
        let spf = self.info.samples_per_frame as usize;
        let set_len = spf * threads * vals;
        let shape = Shape {
            set_len,
            threads,
            vals,
        };
        let (frame_len, header_len) = (self.info.frame_len, self.info.header_len);
        let (kind, ref_mjd) = (self.info.kind, self.info.ref_mjd);
        let (start, rate) = (self.info.start_second, i64::from(self.info.frame_rate));
        let i0 = self.next_index;
        let i1 = i0 + sets as i64;
        self.present.clear();
        self.present.resize(sets * threads, false);

        // Frames kept from earlier reads that fall in this range.
        let mut kept = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() >= i1 {
                break;
            }
            let (k, slot) = entry.remove_entry();
            for (col, p) in slot.payloads.into_iter().enumerate() {
                if let Some(p) = p {
                    self.present[(k - i0) as usize * threads + col] = true;
                    kept.push(((k - i0) as usize, col, p));
                }
            }
        }
        if let Some(d) = dst.as_deref_mut() {
            let mut todo: Vec<Placement<'_>> = kept
                .iter()
                .map(|(set, col, p)| Placement {
                    payload: p,
                    set: *set,
                    col: *col,
                })
                .collect();
            decode_placements(&self.table, &mut todo, d, shape, self.workers);
        }
        self.pool.extend(kept.into_iter().map(|(_, _, p)| p));

        let mut frontier = advance(i0, i0, i1, &self.present, threads, self.max_seen, self.done);
        while frontier < i1 {
            let from = match self.cursor {
                Some(at) => at,
                None => {
                    let got = self.frames.next_batch().is_some();
                    for f in self.frames.take_findings() {
                        if self.strict && is_damage(&f) {
                            return Err(ReadError::damage(f.to_string()));
                        }
                        self.findings.push(f);
                    }
                    if !got {
                        self.done = true;
                        frontier = advance(frontier, i0, i1, &self.present, threads, self.max_seen, true);
                        continue;
                    }
                    0
                }
            };
            let batch = self.frames.current_batch();
            let mut todo: Vec<Placement<'_>> = Vec::with_capacity(batch.len() - from);
            let mut next = from;
            for (e, bytes) in batch.iter().skip(from) {
                if frontier >= i1 {
                    break;
                }
                next += 1;
                self.counts.frames += 1;
                if e.fill {
                    self.counts.fill += 1;
                    continue;
                }
                let Some((thread, sec, frame)) = stamp(kind, bytes, ref_mjd) else {
                    self.counts.invalid += 1;
                    continue;
                };
                if bytes.len() != frame_len
                    || (kind == FrameKind::Vdif
                        && VdifHeader::new_unchecked(bytes).header_len() != header_len)
                {
                    self.counts.stray += 1;
                    continue;
                }
                let col = self.column[usize::from(thread)];
                if col < 0 {
                    self.counts.stray += 1;
                    continue;
                }
                let col = col as usize;
                let idx = (sec - start) * rate + i64::from(frame);
                if idx < frontier {
                    self.counts.late += 1;
                    continue;
                }
                let payload = &bytes[header_len..];
                if idx >= i1 {
                    let slot = self.pending.entry(idx).or_insert_with(|| Slot {
                        payloads: (0..threads).map(|_| None).collect(),
                    });
                    let p = &mut slot.payloads[col];
                    if p.is_some() {
                        self.counts.duplicate += 1;
                        continue;
                    }
                    let mut buf = self.pool.pop().unwrap_or_default();
                    buf.clear();
                    buf.extend_from_slice(payload);
                    *p = Some(buf);
                } else {
                    let set = (idx - i0) as usize;
                    let seen = &mut self.present[set * threads + col];
                    if *seen {
                        self.counts.duplicate += 1;
                        continue;
                    }
                    *seen = true;
                    todo.push(Placement { payload, set, col });
                }
                if self.max_seen.is_none_or(|m| idx > m) {
                    self.max_seen = Some(idx);
                }
                frontier = advance(frontier, i0, i1, &self.present, threads, self.max_seen, false);
            }
            if let Some(d) = dst.as_deref_mut() {
                decode_placements(&self.table, &mut todo, d, shape, self.workers);
            }
            self.cursor = (next < batch.len()).then_some(next);
        }

        // At the end, the range stops after the last set seen.
        let handed = if self.done {
            (self.max_seen.map_or(i0, |m| m + 1).min(i1) - i0).max(0) as usize
        } else {
            sets
        };
        for set in 0..handed {
            for col in 0..threads {
                let absent = !self.present[set * threads + col];
                missing[set * threads + col] = absent;
                if absent {
                    if let Some(d) = dst.as_deref_mut() {
                        for row in d[set * set_len..(set + 1) * set_len].chunks_exact_mut(threads * vals) {
                            row[col * vals..(col + 1) * vals].fill(fill_value);
                        }
                    }
                }
            }
        }
        self.next_index = i0 + handed as i64;
        Ok(handed)
    }

    /// Reads up to `out.len() / row` time steps into `out` (rows of threads x values) and, if given,
    /// `missing` (rows of threads). Returns the number of rows written (fewer only at the end).
    pub fn read(
        &mut self,
        out: &mut [f32],
        mut missing: Option<&mut [bool]>,
        fill_value: f32,
    ) -> Result<usize, ReadError> {
        let row = self.info.row();
        let threads = self.info.threads.len();
        let spf = self.info.samples_per_frame as usize;
        let rows = out.len() / row;
        let mut r = 0usize;
        let mut miss = Vec::new();
        while r < rows {
            if let Some(cur) = &mut self.current {
                let n = (rows - r).min(spf - cur.offset);
                out[r * row..(r + n) * row]
                    .copy_from_slice(&cur.values[cur.offset * row..(cur.offset + n) * row]);
                if let Some(m) = missing.as_deref_mut() {
                    for t in 0..n {
                        m[(r + t) * threads..(r + t + 1) * threads].copy_from_slice(&cur.missing);
                    }
                }
                cur.offset += n;
                r += n;
                self.position += n as u64;
                if cur.offset == spf {
                    self.current = None;
                }
                continue;
            }
            let whole = (rows - r) / spf;
            if whole == 0 {
                // Less than a frame set wanted: decode one set aside and hand out part of it.
                let mut values = vec![0f32; spf * row];
                let mut m = vec![false; threads];
                if self.take_sets(Some(&mut values), &mut m, 1, fill_value)? == 0 {
                    break;
                }
                self.current = Some(Current {
                    values,
                    missing: m,
                    offset: 0,
                });
                continue;
            }
            miss.clear();
            miss.resize(whole * threads, false);
            let n = self.take_sets(
                Some(&mut out[r * row..(r + whole * spf) * row]),
                &mut miss,
                whole,
                fill_value,
            )?;
            if let Some(m) = missing.as_deref_mut() {
                for (k, mk) in miss[..n * threads].chunks_exact(threads).enumerate() {
                    for t in 0..spf {
                        let at = (r + k * spf + t) * threads;
                        m[at..at + threads].copy_from_slice(mk);
                    }
                }
            }
            r += n * spf;
            self.position += (n * spf) as u64;
            if n < whole {
                break;
            }
        }
        Ok(r)
    }

    /// Moves the read position to `sample` (from the start); past the end it stops at the end.
    pub fn seek(&mut self, sample: u64) -> Result<(), ReadError> {
        if sample < self.position {
            self.rewind();
        }
        let spf = self.info.samples_per_frame;
        if let Some(cur) = &mut self.current {
            let left = (spf as usize - cur.offset) as u64;
            if sample - self.position < left {
                cur.offset += (sample - self.position) as usize;
                self.position = sample;
                return Ok(());
            }
            self.position += left;
            self.current = None;
        }
        // Whole sets are skipped without decoding, in bounded steps.
        let threads = self.info.threads.len();
        let mut miss = Vec::new();
        while sample - self.position >= spf {
            let sets = ((sample - self.position) / spf).min(4096) as usize;
            miss.clear();
            miss.resize(sets * threads, false);
            let n = self.take_sets(None, &mut miss, sets, 0.0)?;
            self.position += n as u64 * spf;
            if n < sets {
                return Ok(());
            }
        }
        if sample > self.position {
            let skip = (sample - self.position) as usize;
            let row = self.info.row();
            let mut out = vec![0f32; skip * row];
            self.read(&mut out, None, 0.0)?;
        }
        Ok(())
    }
}

/// Decodes one frame's payload into its thread column of a frame set (`dst`: samples_per_frame rows of
/// threads x values), straight from the byte table into the strided places.
fn decode_frame(
    table: &ByteTable,
    payload: &[u8],
    dst: &mut [f32],
    col: usize,
    (threads, vals): (usize, usize),
) {
    if threads == 1 {
        table.decode(payload, dst);
        return;
    }
    let row = threads * vals;
    let per = table.per_byte;
    // Values per byte and per time step are both powers of two.
    if vals >= per {
        // Whole bytes per time step: each decodes into its row's column.
        let bytes = vals / per;
        for (src, r) in payload.chunks_exact(bytes).zip(dst.chunks_exact_mut(row)) {
            table.decode(src, &mut r[col * vals..(col + 1) * vals]);
        }
        return;
    }
    let t = &table.values[..];
    match (per, vals) {
        (8, 1) => spread::<8, 1>(t, payload, dst, col, row),
        (8, 2) => spread::<8, 2>(t, payload, dst, col, row),
        (8, 4) => spread::<8, 4>(t, payload, dst, col, row),
        (4, 1) => spread::<4, 1>(t, payload, dst, col, row),
        (4, 2) => spread::<4, 2>(t, payload, dst, col, row),
        _ => spread::<2, 1>(t, payload, dst, col, row),
    }
}

/// Several time steps per byte (`PER` values per byte, `VALS` per time step): each byte's values go to
/// `PER / VALS` consecutive rows of `row` values, at column `col`.
fn spread<const PER: usize, const VALS: usize>(
    table: &[f32],
    payload: &[u8],
    dst: &mut [f32],
    col: usize,
    row: usize,
) {
    let steps = PER / VALS;
    for (&b, rows) in payload.iter().zip(dst.chunks_exact_mut(row * steps)) {
        let v = &table[usize::from(b) * PER..][..PER];
        for k in 0..steps {
            rows[k * row + col * VALS..][..VALS].copy_from_slice(&v[k * VALS..(k + 1) * VALS]);
        }
    }
}

/// The first set from `frontier` on (at most `i1`) that is not final: not all `threads` present, no frame
/// more than [`WINDOW`] sets later seen (`max_seen`), and not at the end (`done`).
fn advance(
    mut frontier: i64,
    i0: i64,
    i1: i64,
    present: &[bool],
    threads: usize,
    max_seen: Option<i64>,
    done: bool,
) -> i64 {
    if done {
        return i1;
    }
    let far = max_seen.map_or(i64::MIN, |m| m - WINDOW);
    while frontier < i1
        && (frontier < far
            || present[(frontier - i0) as usize * threads..][..threads]
                .iter()
                .all(|&p| p))
    {
        frontier += 1;
    }
    frontier
}

/// Layout of the frame sets being decoded.
#[derive(Clone, Copy)]
struct Shape {
    /// f32 values of one frame set (samples per frame x threads x values).
    set_len: usize,
    threads: usize,
    /// f32 values per time step and thread.
    vals: usize,
}

/// Payload bytes per decoding task (the unit the threads take turns on).
const TASK_BYTES: usize = 128 << 10;

/// Decodes placed frames into `dst` (consecutive frame sets). Frames are cut into tasks of whole frame sets
/// (disjoint parts of `dst`) that the calling thread and up to `workers - 1` helpers take one at a time, so
/// a thread the machine delays holds up only the task it has.
fn decode_placements(
    table: &ByteTable,
    todo: &mut [Placement<'_>],
    dst: &mut [f32],
    shape: Shape,
    workers: usize,
) {
    let Shape {
        set_len,
        threads,
        vals,
    } = shape;
    let run = |todo: &[Placement<'_>], dst: &mut [f32], first_set: usize| {
        for p in todo {
            let at = (p.set - first_set) * set_len;
            let d = &mut dst[at..at + set_len];
            decode_frame(table, p.payload, d, p.col, (threads, vals));
        }
    };
    let bytes: usize = todo.iter().map(|p| p.payload.len()).sum();
    if workers <= 1 || bytes < 2 * TASK_BYTES {
        run(todo, dst, 0);
        return;
    }
    todo.sort_unstable_by_key(|p| (p.set, p.col));
    // Tasks: runs of about TASK_BYTES, each ending at a set boundary, with their part of dst.
    let mut tasks = Vec::with_capacity(bytes / TASK_BYTES + 1);
    let mut rest: &mut [f32] = dst;
    let mut rest_first = 0usize;
    let mut begin = 0usize;
    while begin < todo.len() {
        let mut end = begin;
        let mut size = 0usize;
        while end < todo.len() && (size < TASK_BYTES || todo[end].set == todo[end - 1].set) {
            size += todo[end].payload.len();
            end += 1;
        }
        let first = todo[begin].set;
        let last = todo[end - 1].set + 1;
        let (_, tail) = std::mem::take(&mut rest).split_at_mut((first - rest_first) * set_len);
        let (mine, tail) = tail.split_at_mut((last - first) * set_len);
        rest = tail;
        rest_first = last;
        tasks.push((&todo[begin..end], mine, first));
        begin = end;
    }
    let queue = std::sync::Mutex::new(tasks.into_iter());
    let work = || loop {
        let task = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
        let Some((part, d, first)) = task else { break };
        run(part, d, first);
    };
    std::thread::scope(|s| {
        for _ in 1..workers {
            s.spawn(work);
        }
        work();
    });
}
