//! Gathering: a scatter-gather or FlexBuff scan written out as one frame stream in block order, block headers
//! stripped, as Haystack's `gather` and DiFX's `mk6gather` do. Frames go through the framer, so garbage and
//! partial frames are left out (and reported) instead of corrupting the output.

use crate::finding::FindingLog;
use crate::finding::{Finding, Position};
use crate::framer::{FrameSink, Framer};
use crate::read::{ReadEvent, ReadPipeline};
use crate::source::Recording;
use std::io::{self, Write};

/// What a gather wrote and found.
#[derive(Debug)]
pub struct GatherSummary {
    pub frames: u64,
    /// Frame-sized fill runs (no header) written through.
    pub fill: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub findings: Vec<Finding>,
}

struct WriteSink<'a, W: Write> {
    out: &'a mut W,
    frames: u64,
    fill: u64,
    bytes: u64,
    error: Option<io::Error>,
    log: &'a mut FindingLog,
}

impl<W: Write> WriteSink<'_, W> {
    fn write(&mut self, b: &[u8]) {
        if self.error.is_none() {
            match self.out.write_all(b) {
                Ok(()) => self.bytes += b.len() as u64,
                Err(e) => self.error = Some(e),
            }
        }
    }
}

impl<W: Write> FrameSink for WriteSink<'_, W> {
    fn frame(&mut self, frame: &[u8], _pos: Position) {
        self.frames += 1;
        self.write(frame);
    }
    fn fill(&mut self, frame: &[u8], _pos: Position) {
        self.fill += 1;
        self.write(frame);
    }
    fn finding(&mut self, finding: Finding) {
        self.log.push(finding);
    }
}

/// Writes the frames of `rec` in block order to `out`. `progress(read, total)` is called every 256 MB read.
/// Stops at the first write error (e.g. a closed pipe) and returns it.
pub fn gather<W: Write>(
    rec: &Recording,
    out: &mut W,
    progress: impl FnMut(u64, u64),
) -> io::Result<GatherSummary> {
    gather_stream(rec, None, out, progress)
}

/// The recorded streams of a scan whose metadata maps blocks to streams (scans of several streams), by
/// label; empty otherwise (then the whole scan is one stream). See [`Recording::stream_labels`].
pub fn stream_labels(rec: &Recording) -> Vec<String> {
    rec.stream_labels()
}

/// As [`gather`], but only the blocks of recorded stream `stream` (an index into the metadata's streams,
/// see [`stream_labels`]); `None` gathers what `rec` selects (every block unless
/// [`Recording::select_stream`] chose one).
pub fn gather_stream<W: Write>(
    rec: &Recording,
    stream: Option<usize>,
    out: &mut W,
    mut progress: impl FnMut(u64, u64),
) -> io::Result<GatherSummary> {
    let selected;
    let rec = match stream {
        Some(i) if !rec.stream_labels().is_empty() && rec.stream != Some(i) => {
            selected = Recording {
                stream: Some(i),
                ..rec.clone()
            };
            &selected
        }
        _ => rec,
    };
    let total = rec.total_bytes();
    let mut log = FindingLog::default();
    for f in &rec.findings {
        log.push(f.clone());
    }
    let mut pipe = ReadPipeline::start(rec);
    let mut framer = Framer::new(rec.frame_format(), rec.frame_len_hint(), pipe.files());
    let mut out = io::BufWriter::with_capacity(8 << 20, out);
    let mut sink = WriteSink {
        out: &mut out,
        frames: 0,
        fill: 0,
        bytes: 0,
        error: None,
        log: &mut log,
    };
    let mut read = 0u64;
    let mut next_progress = 256u64 << 20;
    while let Some(ev) = pipe.next_event() {
        match ev {
            ReadEvent::Finding(f) => sink.log.push(f),
            ReadEvent::Piece(p) => {
                read += p.data().len() as u64;
                framer.push(p.data(), p.pos, p.segment_start, p.segment_end, &mut sink);
                if let Some(e) = sink.error.take() {
                    return Err(e);
                }
                if read >= next_progress {
                    progress(read, total);
                    next_progress = read + (256 << 20);
                }
            }
        }
    }
    framer.finish_segment(&mut sink);
    if let Some(e) = sink.error.take() {
        return Err(e);
    }
    let (frames, fill, bytes) = (sink.frames, sink.fill, sink.bytes);
    out.flush()?;
    Ok(GatherSummary {
        frames,
        fill,
        bytes_written: bytes,
        bytes_read: read,
        findings: log.list,
    })
}
