//! Frame-by-frame reading of a recording in stream order (Mark6 block order, FlexBuff chunk order, or the
//! plain files one after the other), for programs that want the frames themselves (the Python binding).
//! It is the same reading as `check` and `gather`: the [`ReadPipeline`] and the [`Framer`], so garbage,
//! partial frames and structural damage become [`Finding`]s with file and offset, never frames.
//!
//! Frames come in batches (the whole frames of one read piece) copied into one reused buffer: memory stays
//! bounded by the pipeline's buffers plus one batch, whatever the scan's length.

use crate::finding::{FileTable, Finding, Position};
use crate::framer::{FrameSink, Framer};
use crate::read::{ReadEvent, ReadPipeline};
use crate::source::Recording;
use std::sync::Arc;
use vlbiflow_formats::FrameKind;

/// One frame of a batch.
#[derive(Debug, Clone, Copy)]
pub struct FrameEntry {
    start: usize,
    len: usize,
    /// Fill: a headerless run of fill words, or a frame [`vlbiflow_formats::fill::is_fill`] recognises.
    pub fill: bool,
    /// File and offset of the frame's first byte.
    pub pos: Position,
}

/// The frames of one read piece, in stream order.
#[derive(Debug, Default)]
pub struct Batch {
    data: Vec<u8>,
    entries: Vec<FrameEntry>,
}

impl Batch {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The frames with their bytes.
    pub fn iter(&self) -> impl Iterator<Item = (&FrameEntry, &[u8])> + '_ {
        self.entries
            .iter()
            .map(|e| (e, &self.data[e.start..e.start + e.len]))
    }
    fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
    }
}

struct BatchSink<'a> {
    kind: FrameKind,
    batch: &'a mut Batch,
    findings: &'a mut Vec<Finding>,
}

impl BatchSink<'_> {
    fn add(&mut self, frame: &[u8], pos: Position, fill: bool) {
        let start = self.batch.data.len();
        self.batch.data.extend_from_slice(frame);
        self.batch.entries.push(FrameEntry {
            start,
            len: frame.len(),
            fill,
            pos,
        });
    }
}

impl FrameSink for BatchSink<'_> {
    fn frame(&mut self, frame: &[u8], pos: Position) {
        let fill = vlbiflow_formats::fill::is_fill(self.kind, frame);
        self.add(frame, pos, fill);
    }
    fn fill(&mut self, frame: &[u8], pos: Position) {
        self.add(frame, pos, true);
    }
    fn finding(&mut self, finding: Finding) {
        self.findings.push(finding);
    }
}

/// Reads the frames of a recording in stream order. Dropping it stops the reader threads.
pub struct FrameReader {
    kind: FrameKind,
    pipe: ReadPipeline,
    framer: Framer,
    batch: Batch,
    findings: Vec<Finding>,
    files: Arc<FileTable>,
    done: bool,
    bytes_read: u64,
}

impl FrameReader {
    /// Starts reading `rec` from its beginning. The findings made while locating it come first.
    pub fn open(rec: &Recording) -> FrameReader {
        Self::open_with_read_size(rec, crate::read::READ_SIZE)
    }

    /// As [`open`](Self::open), reading the files in reads of at most `read_size` bytes (see
    /// [`ReadPipeline::start_with_read_size`]): the frames and findings are the same for every size.
    pub fn open_with_read_size(rec: &Recording, read_size: usize) -> FrameReader {
        let pipe = ReadPipeline::start_with_read_size(rec, read_size);
        let files = pipe.files();
        let kind = rec.frame_format();
        FrameReader {
            kind,
            framer: Framer::new(kind, rec.frame_len_hint(), files.clone()),
            pipe,
            batch: Batch::default(),
            findings: rec.findings.clone(),
            files,
            done: false,
            bytes_read: 0,
        }
    }

    /// Frame format of the recording.
    pub fn kind(&self) -> FrameKind {
        self.kind
    }

    /// The files being read (for naming positions).
    pub fn files(&self) -> &Arc<FileTable> {
        &self.files
    }

    /// Frame length in use, once learned.
    pub fn frame_len(&self) -> Option<usize> {
        self.framer.frame_len()
    }

    /// Bytes read from the files so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Findings made since the last call (structural damage, block gaps, ...), in the order found.
    pub fn take_findings(&mut self) -> Vec<Finding> {
        std::mem::take(&mut self.findings)
    }

    /// Whether findings are waiting to be taken.
    pub fn has_findings(&self) -> bool {
        !self.findings.is_empty()
    }

    /// The batch the last [`next_batch`](Self::next_batch) returned, again (empty before the first call
    /// and at the end), for a consumer that stops part-way through a batch and resumes later.
    pub fn current_batch(&self) -> &Batch {
        &self.batch
    }

    /// The next non-empty batch of frames, or None at the end of the recording. Findings made on the way
    /// wait in [`take_findings`](Self::take_findings).
    pub fn next_batch(&mut self) -> Option<&Batch> {
        self.batch.clear();
        while self.batch.is_empty() {
            if self.done {
                return None;
            }
            let mut sink = BatchSink {
                kind: self.kind,
                batch: &mut self.batch,
                findings: &mut self.findings,
            };
            match self.pipe.next_event() {
                Some(ReadEvent::Finding(f)) => sink.findings.push(f),
                Some(ReadEvent::Piece(p)) => {
                    self.bytes_read += p.data().len() as u64;
                    self.framer
                        .push(p.data(), p.pos, p.segment_start, p.segment_end, &mut sink);
                }
                None => {
                    self.framer.finish_segment(&mut sink);
                    self.done = true;
                }
            }
        }
        Some(&self.batch)
    }
}
