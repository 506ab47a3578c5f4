//! The sample reader behind `vlbiflow.open`: frames of a recording in stream order (checker's
//! [`FrameReader`]) regrouped into frame sets (all threads of one time), decoded with
//! `vlbiflow_formats::samples` into rows of (time, thread, value). Pure Rust, no Python: the binding runs
//! it with the GIL released.

use std::collections::{BTreeMap, BTreeSet};
use vlbiflow_checker::frames::FrameReader;
use vlbiflow_checker::{Finding, FindingKind, Recording, Severity};
use vlbiflow_formats::samples::{self, SampleFormat, BASEBAND_SCALE};
use vlbiflow_formats::time::epoch_start_unix;
use vlbiflow_formats::vdif::VdifHeader;
use vlbiflow_formats::FrameKind;

/// Frame sets a frame may arrive late (after frames of later sets) and still be placed.
const WINDOW: i64 = 256;
/// Frame sets decoded together (spread over the CPUs).
const DECODE_BATCH: usize = 64;
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
}

/// Per-byte decoding table: the values `samples::decode` gives for each byte value, times a scale. Decoding
/// stays defined in one place (vlbiflow_formats::samples); the table only caches it with the unit change.
pub struct ByteTable {
    per_byte: usize,
    values: Vec<f32>,
}

impl ByteTable {
    pub fn new(bits: u8, scale: f32) -> ByteTable {
        let format = SampleFormat::new(bits, 1, false).expect("bits checked by the probe");
        let per_byte = format.values_per_byte();
        let mut values = vec![0f32; 256 * per_byte];
        for (b, out) in values.chunks_exact_mut(per_byte).enumerate() {
            samples::decode(format, &[b as u8], out).expect("one byte of one-channel samples");
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
    /// Frames of a thread not seen while probing.
    pub stray: u64,
    /// Frames arriving after their time was handed out.
    pub late: u64,
    pub duplicate: u64,
}

/// Error out of the reader: a message naming file and offset.
#[derive(Debug)]
pub struct ReadError(pub String);

/// Time index of a VDIF frame given the stream's start and rate.
fn index_of(h: &VdifHeader<&[u8]>, info_start: i64, rate: u32) -> i64 {
    let sec = epoch_start_unix(h.epoch()) + i64::from(h.seconds());
    (sec - info_start) * i64::from(rate) + i64::from(h.frame_number())
}

/// Learns the shape of a recording from its first frames.
pub fn probe(rec: &Recording, frame_rate: Option<u32>, strict: bool) -> Result<Info, ReadError> {
    let mut fr = FrameReader::open(rec);
    let kind = fr.kind();
    if kind != FrameKind::Vdif {
        return Err(ReadError(format!(
            "{}: Mark5B samples cannot be decoded yet (use raw() or check()); only VDIF",
            rec.name
        )));
    }
    let rate_hint = frame_rate.or(rec.frame_rate_hint());
    let mut first: Option<[u8; 32]> = None;
    let mut threads = BTreeSet::new();
    // Highest frame number per POSIX second.
    let mut max_fn: BTreeMap<i64, u32> = BTreeMap::new();
    let mut start: Option<(i64, u32)> = None;
    let mut seen = 0usize;
    'outer: while let Some(batch) = fr.next_batch() {
        for (e, bytes) in batch.iter() {
            if e.fill || bytes.len() < 32 {
                continue;
            }
            let h = VdifHeader::new_unchecked(bytes);
            if h.invalid() {
                continue;
            }
            if first.is_none() {
                let mut b = [0u8; 32];
                b.copy_from_slice(&bytes[..32]);
                first = Some(b);
            }
            threads.insert(h.thread_id());
            let sec = epoch_start_unix(h.epoch()) + i64::from(h.seconds());
            let m = max_fn.entry(sec).or_insert(0);
            *m = (*m).max(h.frame_number());
            let st = (sec, h.frame_number());
            if start.is_none_or(|s| st < s) {
                start = Some(st);
            }
            seen += 1;
            if seen >= PROBE_FRAMES || max_fn.len() >= 2 || (rate_hint.is_some() && seen >= 4096) {
                break 'outer;
            }
        }
        if strict {
            if let Some(f) = fr.take_findings().into_iter().find(is_damage) {
                return Err(ReadError(f.to_string()));
            }
        }
    }
    if strict {
        if let Some(f) = fr.take_findings().into_iter().find(is_damage) {
            return Err(ReadError(f.to_string()));
        }
    }
    let Some(first) = first else {
        return Err(ReadError(format!("{}: no valid VDIF frame found", rec.name)));
    };
    let h = VdifHeader::new_unchecked(&first[..]);
    let frame_len = h.frame_len();
    let header_len = h.header_len();
    let format = SampleFormat::new(h.bits_per_sample(), h.channels(), h.complex())
        .map_err(|e| ReadError(format!("{}: {e}", rec.name)))?;
    let spf = vlbiflow_formats::vdif::samples_per_frame(
        frame_len - header_len,
        format.bits,
        format.channels,
        format.complex,
    )
    .map_err(|e| ReadError(format!("{}: {e}", rec.name)))?;
    let (frame_rate, source) = if let Some(r) = frame_rate {
        (r, "given")
    } else if let Some(r) = rec.frame_rate_hint() {
        (r, "scan metadata")
    } else if let Some(r) = h.sample_rate_hz().filter(|&r| r > 0 && spf > 0 && r % spf == 0) {
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
    let (start_second, start_frame) = start.expect("a valid frame sets the start");
    Ok(Info {
        kind,
        frame_len,
        header_len,
        bits: format.bits,
        channels: format.channels,
        complex: format.complex,
        station: h.station_id(),
        edv: h.edv(),
        threads: threads.into_iter().collect(),
        frame_rate,
        frame_rate_source: source,
        samples_per_frame: spf,
        start_second,
        start_frame,
    })
}

/// Payloads of one frame set, by thread column.
struct Slot {
    payloads: Vec<Option<Vec<u8>>>,
    present: usize,
}

/// The decoded frame set being handed out row by row.
struct Current {
    values: Vec<f32>,
    missing: Vec<bool>,
    offset: usize,
}

/// Streams decoded samples of a recording.
pub struct SampleReader {
    rec: Recording,
    pub info: Info,
    strict: bool,
    frames: FrameReader,
    column: Vec<i32>,
    pending: BTreeMap<i64, Slot>,
    pool: Vec<Vec<u8>>,
    next_index: i64,
    done: bool,
    current: Option<Current>,
    /// Read position in samples from the start.
    pub position: u64,
    pub counts: Counts,
    pub findings: Vec<Finding>,
    /// Decoding table with the units (this workspace's, or baseband's: BASEBAND_SCALE larger).
    table: ByteTable,
}

impl SampleReader {
    pub fn new(rec: Recording, info: Info, strict: bool, baseband_units: bool) -> SampleReader {
        let mut column = vec![-1i32; usize::from(vlbiflow_formats::vdif::MAX_THREAD_ID) + 1];
        for (i, &t) in info.threads.iter().enumerate() {
            column[usize::from(t)] = i as i32;
        }
        let frames = FrameReader::open(&rec);
        SampleReader {
            next_index: i64::from(info.start_frame),
            rec,
            strict,
            frames,
            column,
            pending: BTreeMap::new(),
            pool: Vec::new(),
            done: false,
            current: None,
            position: 0,
            counts: Counts::default(),
            findings: Vec::new(),
            table: ByteTable::new(info.bits, if baseband_units { BASEBAND_SCALE } else { 1.0 }),
            info,
        }
    }

    /// Bytes in the recording's files.
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
        self.done = false;
        self.current = None;
        self.position = 0;
        self.counts = Counts::default();
        self.findings.clear();
    }

    /// Reads one batch of frames into the pending frame sets; false at the end of the recording.
    fn pull(&mut self) -> Result<bool, ReadError> {
        let threads = self.info.threads.len();
        let (frame_len, header_len) = (self.info.frame_len, self.info.header_len);
        let (start, rate) = (self.info.start_second, self.info.frame_rate);
        let got = match self.frames.next_batch() {
            None => false,
            Some(batch) => {
                for (e, bytes) in batch.iter() {
                    self.counts.frames += 1;
                    if e.fill {
                        self.counts.fill += 1;
                        continue;
                    }
                    let h = VdifHeader::new_unchecked(bytes);
                    if h.invalid() {
                        self.counts.invalid += 1;
                        continue;
                    }
                    if bytes.len() != frame_len || h.header_len() != header_len {
                        self.counts.stray += 1;
                        continue;
                    }
                    let col = self.column[usize::from(h.thread_id())];
                    if col < 0 {
                        self.counts.stray += 1;
                        continue;
                    }
                    let idx = index_of(&h, start, rate);
                    if idx < self.next_index {
                        self.counts.late += 1;
                        continue;
                    }
                    let slot = self.pending.entry(idx).or_insert_with(|| Slot {
                        payloads: (0..threads).map(|_| None).collect(),
                        present: 0,
                    });
                    let p = &mut slot.payloads[col as usize];
                    if p.is_some() {
                        self.counts.duplicate += 1;
                        continue;
                    }
                    let mut buf = self.pool.pop().unwrap_or_default();
                    buf.clear();
                    buf.extend_from_slice(&bytes[header_len..]);
                    *p = Some(buf);
                    slot.present += 1;
                }
                true
            }
        };
        for f in self.frames.take_findings() {
            if self.strict && is_damage(&f) {
                return Err(ReadError(f.to_string()));
            }
            self.findings.push(f);
        }
        Ok(got)
    }

    /// The next frame set in time order (None: every thread missing), or Ok(None) at the end.
    fn next_set(&mut self) -> Result<Option<Option<Slot>>, ReadError> {
        let threads = self.info.threads.len();
        loop {
            let first = self.pending.first_key_value().map(|(k, s)| (*k, s.present));
            let last = self.pending.last_key_value().map(|(k, _)| *k);
            let far = last.is_some_and(|l| l - self.next_index > WINDOW);
            match first {
                None if self.done => return Ok(None),
                Some((k, present)) if k == self.next_index && (present == threads || self.done || far) => {
                    self.next_index += 1;
                    return Ok(Some(self.pending.remove(&k)));
                }
                Some(_) if self.done || far => {
                    self.next_index += 1;
                    return Ok(Some(None));
                }
                _ => {}
            }
            if !self.pull()? {
                self.done = true;
            }
        }
    }

    fn recycle(&mut self, slot: Option<Slot>) {
        if let Some(s) = slot {
            self.pool.extend(s.payloads.into_iter().flatten());
        }
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
            let whole = ((rows - r) / spf).min(DECODE_BATCH);
            if whole == 0 {
                let Some(slot) = self.next_set()? else { break };
                let mut values = vec![0f32; spf * row];
                let mut miss = vec![false; threads];
                decode_sets(
                    &self.info,
                    &self.table,
                    std::slice::from_ref(&slot),
                    &mut values,
                    &mut miss,
                    fill_value,
                );
                self.recycle(slot);
                self.current = Some(Current {
                    values,
                    missing: miss,
                    offset: 0,
                });
                continue;
            }
            let mut slots = Vec::with_capacity(whole);
            while slots.len() < whole {
                match self.next_set()? {
                    Some(s) => slots.push(s),
                    None => break,
                }
            }
            let n = slots.len();
            if n == 0 {
                break;
            }
            let mut miss = vec![false; n * threads];
            decode_sets(
                &self.info,
                &self.table,
                &slots,
                &mut out[r * row..(r + n * spf) * row],
                &mut miss,
                fill_value,
            );
            if let Some(m) = missing.as_deref_mut() {
                for (k, mk) in miss.chunks_exact(threads).enumerate() {
                    for t in 0..spf {
                        let at = (r + k * spf + t) * threads;
                        m[at..at + threads].copy_from_slice(mk);
                    }
                }
            }
            for s in slots {
                self.recycle(s);
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
        while sample - self.position >= spf {
            let Some(slot) = self.next_set()? else {
                return Ok(());
            };
            self.recycle(slot);
            self.position += spf;
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

/// Decodes one frame set into `dst` (samples_per_frame rows of threads x values) and `missing` (a flag per
/// thread), with `scratch` room for one frame's values.
fn decode_set(
    info: &Info,
    table: &ByteTable,
    slot: &Option<Slot>,
    dst: &mut [f32],
    missing: &mut [bool],
    scratch: &mut [f32],
    fill_value: f32,
) {
    let vals = info.values_per_time();
    let threads = info.threads.len();
    for col in 0..threads {
        let payload = slot.as_ref().and_then(|s| s.payloads[col].as_deref());
        missing[col] = payload.is_none();
        match payload {
            Some(p) if threads == 1 => table.decode(p, dst),
            Some(p) => {
                table.decode(p, scratch);
                for (row, src) in dst
                    .chunks_exact_mut(threads * vals)
                    .zip(scratch.chunks_exact(vals))
                {
                    row[col * vals..(col + 1) * vals].copy_from_slice(src);
                }
            }
            None => {
                for row in dst.chunks_exact_mut(threads * vals) {
                    row[col * vals..(col + 1) * vals].fill(fill_value);
                }
            }
        }
    }
}

/// Decodes consecutive frame sets into `dst` (their rows one after the other) and `missing` (threads flags
/// per set), spreading the sets over the available CPUs.
fn decode_sets(
    info: &Info,
    table: &ByteTable,
    slots: &[Option<Slot>],
    dst: &mut [f32],
    missing: &mut [bool],
    fill_value: f32,
) {
    let threads = info.threads.len();
    let set_len = info.samples_per_frame as usize * info.row();
    let frame_values = info.samples_per_frame as usize * info.values_per_time();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(slots.len())
        .max(1);
    let per = slots.len().div_ceil(workers);
    let work = |slots: &[Option<Slot>], dst: &mut [f32], missing: &mut [bool]| {
        let mut scratch = vec![0f32; frame_values];
        for ((slot, d), m) in slots
            .iter()
            .zip(dst.chunks_exact_mut(set_len))
            .zip(missing.chunks_exact_mut(threads))
        {
            decode_set(info, table, slot, d, m, &mut scratch, fill_value);
        }
    };
    if workers == 1 {
        work(slots, dst, missing);
        return;
    }
    std::thread::scope(|s| {
        for ((sl, d), m) in slots
            .chunks(per)
            .zip(dst.chunks_mut(per * set_len))
            .zip(missing.chunks_mut(per * threads))
        {
            s.spawn(move || work(sl, d, m));
        }
    });
}
