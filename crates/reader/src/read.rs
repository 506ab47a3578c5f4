//! The streaming reader layer: one thread per file (Mark6) or per disk (FlexBuff) reads pieces of about 1 MiB
//! with positioned reads into recycled buffers and sends them down a bounded channel; a k-way merge hands the
//! pieces on in block-number order. Memory is bounded by the number of readers times a few buffers, whatever
//! the scan's length. Structural problems (corrupted block headers, truncation, block gaps and duplicates)
//! become [`Finding`]s with file and offset; the readers resynchronise and go on.

use crate::finding::{FileId, FileTable, Finding, FindingKind, Position, Severity};
use crate::source::{Recording, Sources};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vlbiflow_formats::mark5b::SYNC_WORD as MARK5B_SYNC;
use vlbiflow_formats::mark6::{
    Mark6BlockHeader, Mark6FileHeaderRepr, Mark6Version, PacketFormat, FILE_HEADER_LEN,
};
use vlbiflow_formats::vdif::VdifHeader;

/// Opens a file to be read once from start to end, telling the kernel so: its readahead window doubles,
/// which keeps a disk streaming while the checker works on the previous piece.
fn open_sequential(path: &Path) -> std::io::Result<File> {
    let file = File::open(path)?;
    // Advisory: its failure changes nothing.
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
    Ok(file)
}

/// Bytes of one read of [`ReadPipeline::start`] (Mark6 blocks are read in whole frames up to this; FlexBuff
/// chunks and plain files in pieces of this, frames continuing into the next piece). Small enough that a
/// piece is still in the processor's cache when the framer and checker look at it: a copy out of the page
/// cache into a buffer larger than the cache costs more than the check of the frames in it (measured by
/// bench/check.sh, see docs/bench/check.md). A reader holds at most `QUEUE_DEPTH + 2` of them.
pub const READ_SIZE: usize = 1 << 20;
/// Bytes of one read of a reader that works on what it reads ([`ReadPipeline::start_with_work`]), into one
/// buffer, reused. The work reads only the frame headers, so the buffer need not stay in the cache:
/// fewer, larger reads won. `check` of a 4 GB Mark6 scan from the page cache, builds alternating, medians
/// of 5 in three runs (docs/bench/check.md): 0.131-0.175 s at 1 MiB, 0.184-0.216 s at 256 KiB, 0.190 s at
/// 4 MiB and 0.191 s at 64 KiB; from disk the same within the noise.
pub const WORK_READ_SIZE: usize = 1 << 20;
/// Window of the search for the next block header after a corrupted one.
const RESYNC_WINDOW: usize = 8 << 20;
/// Chunks queued per reader, plus one being filled and one being consumed.
const QUEUE_DEPTH: usize = 2;
/// Block summaries queued per reader that works on its blocks ([`ReadPipeline::start_with_work`]).
const WORK_QUEUE_DEPTH: usize = 32;
/// How often a waiting reader looks whether the consumer went away.
const POLL: Duration = Duration::from_millis(100);
/// Largest forward jump of block numbers inside one file still taken as plausible while resynchronising.
const MAX_BLOCK_JUMP: i64 = 1 << 16;

/// A piece of data read from one file: whole frames for Mark6 blocks and FlexBuff chunks; arbitrary bytes for
/// plain files (frames may continue into the next piece of the same segment).
pub struct Piece {
    /// File and offset of the first byte.
    pub pos: Position,
    buf: Vec<u8>,
    len: usize,
    /// Block (Mark6) or chunk (FlexBuff) number this piece belongs to.
    pub block: Option<u32>,
    /// First piece of a block, chunk or file: no frame continues into it from before.
    pub segment_start: bool,
    /// Last piece of a block, chunk or file.
    pub segment_end: bool,
    pool: Option<Sender<Vec<u8>>>,
    /// A block its reader worked on itself (see [`ReadPipeline::start_with_work`]): no bytes, only where
    /// they were and what the work made of them. `segment_end` false: the block was cut short by a read
    /// error (reported next).
    pub done: Option<Box<BlockDone>>,
}

impl Piece {
    /// The bytes read (none for a block its reader worked on).
    pub fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Bytes of the recording this piece stands for: its data, or the pieces of a block worked on.
    pub fn payload_len(&self) -> u64 {
        self.done.as_ref().map_or(self.len as u64, |d| d.bytes)
    }
}

/// Work a reader thread does itself on the pieces it reads (see [`ReadPipeline::start_with_work`]):
/// validation next to the read, while a piece is still in the processor's cache, and the readers of
/// several files or disks at it at once. It sees every piece of a block (chunk), in order; what it makes
/// of the block travels with the block through the merge.
pub trait BlockWork: Send {
    /// Block (chunk) `block` starts.
    fn open(&mut self, block: Option<u32>);
    /// The next piece of the open block (as [`Piece`]'s fields say).
    fn piece(&mut self, data: &[u8], pos: Position, segment_start: bool, segment_end: bool);
    /// The open block is over (whole, or cut short by a read error): what was made of it.
    fn close(&mut self) -> Box<dyn std::any::Any + Send + Sync>;
}

/// Makes a reader thread's [`BlockWork`], given the table of the files being read.
pub type MakeWork<'a> = dyn Fn(&Arc<FileTable>) -> Box<dyn BlockWork> + 'a;

/// Where one piece of a block was read (to read it again).
#[derive(Debug, Clone, Copy)]
pub struct PieceSpan {
    pub pos: Position,
    pub len: usize,
    pub segment_start: bool,
    pub segment_end: bool,
}

/// A block (chunk) a reader worked on: its pieces, their bytes, and what [`BlockWork`] made of it.
pub struct BlockDone {
    pub pieces: Vec<PieceSpan>,
    pub bytes: u64,
    pub work: Box<dyn std::any::Any + Send + Sync>,
}

impl Drop for Piece {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            // The reader may be gone; then the buffer is simply freed.
            let _ = pool.try_send(std::mem::take(&mut self.buf));
        }
    }
}

/// What a reader sends.
pub enum ReadEvent {
    Piece(Piece),
    Finding(Finding),
}

/// Buffers of one reader, recycled through a channel.
struct BufferPool {
    rx: Receiver<Vec<u8>>,
    tx: Sender<Vec<u8>>,
    allocated: usize,
    max: usize,
    size: usize,
}

impl BufferPool {
    fn new(size: usize, max: usize) -> Self {
        let (tx, rx) = bounded(max);
        BufferPool {
            rx,
            tx,
            allocated: 0,
            max,
            size,
        }
    }
    /// A buffer of `size` bytes, waiting for one to come back if all are out; None if cancelled.
    fn get(&mut self, cancel: &AtomicBool) -> Option<Vec<u8>> {
        if let Ok(b) = self.rx.try_recv() {
            return Some(b);
        }
        if self.allocated < self.max {
            self.allocated += 1;
            return Some(vec![0u8; self.size]);
        }
        loop {
            match self.rx.recv_timeout(POLL) {
                Ok(b) => return Some(b),
                Err(RecvTimeoutError::Timeout) if !cancel.load(Ordering::Relaxed) => {}
                Err(_) => return None,
            }
        }
    }
}

/// A byte range of one file to read and hand on: where, how much, the piece size's unit (a frame length,
/// so pieces end on frame boundaries where they can) and the block or chunk number it belongs to.
struct Span {
    offset: u64,
    len: u64,
    align: usize,
    block: Option<u32>,
    /// The span starts (ends) a segment: a block, chunk or file. A part of a plain file need not.
    opens: bool,
    closes: bool,
}

impl Span {
    /// A whole file or chunk of `len` bytes, pieces of any length.
    fn whole(len: u64, block: Option<u32>) -> Span {
        Span {
            offset: 0,
            len,
            align: 1,
            block,
            opens: true,
            closes: true,
        }
    }
}

/// A byte range of a plain frame file, for [`ReadPipeline::start_ranges`].
#[derive(Debug, Clone)]
pub struct FileRange {
    pub path: PathBuf,
    pub file: FileId,
    pub offset: u64,
    pub len: u64,
    /// Length of the whole file: the range's last piece ends the file's segment when it reaches it.
    pub file_len: u64,
}

/// Context shared by a reader thread.
struct ReaderCtx {
    tx: Sender<ReadEvent>,
    pool: BufferPool,
    cancel: Arc<AtomicBool>,
    /// Work on the pieces done here; then only a summary of each block is sent.
    work: Option<Box<dyn BlockWork>>,
}

impl ReaderCtx {
    /// Sends an event; false when the consumer is gone or cancelled.
    fn send(&self, ev: ReadEvent) -> bool {
        let mut ev = ev;
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return false;
            }
            match self.tx.send_timeout(ev, POLL) {
                Ok(()) => return true,
                Err(crossbeam_channel::SendTimeoutError::Timeout(back)) => ev = back,
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => return false,
            }
        }
    }
    fn finding(&self, f: Finding) -> bool {
        self.send(ReadEvent::Finding(f))
    }

    /// Reads `span.len` bytes at `span.offset` of `file` in pieces of at most the pool's buffer size
    /// (rounded down to `span.align`) and sends them. Returns false to stop (consumer gone, or a read error
    /// already reported).
    fn send_range(&mut self, file: &File, path: &std::path::Path, id: FileId, span: Span) -> bool {
        let Span {
            offset,
            len,
            align,
            block,
            opens,
            closes,
        } = span;
        if self.work.is_some() {
            return self.work_range(file, path, id, span);
        }
        let step = piece_step(self.pool.size, align);
        let mut done = 0u64;
        if len == 0 {
            return self.send(ReadEvent::Piece(Piece {
                pos: Position { file: id, offset },
                buf: Vec::new(),
                len: 0,
                block,
                segment_start: opens,
                segment_end: closes,
                pool: None,
                done: None,
            }));
        }
        while done < len {
            let n = (len - done).min(step as u64) as usize;
            let Some(mut buf) = self.pool.get(&self.cancel) else {
                return false;
            };
            if let Err(f) = read_piece(file, path, &mut buf[..n], offset + done) {
                self.finding(f);
                return false;
            }
            let piece = Piece {
                pos: Position {
                    file: id,
                    offset: offset + done,
                },
                buf,
                len: n,
                block,
                segment_start: done == 0 && opens,
                segment_end: done + n as u64 == len && closes,
                pool: Some(self.pool.tx.clone()),
                done: None,
            };
            done += n as u64;
            if !self.send(ReadEvent::Piece(piece)) {
                return false;
            }
        }
        true
    }

    /// [`send_range`](Self::send_range) with the work done here: every piece goes to the work as it is
    /// read (into one buffer, reused), then one piece standing for the span (the block) is sent with what
    /// the work made of it. A read error ends the block there (the summary of what was read, then the
    /// finding).
    fn work_range(&mut self, file: &File, path: &std::path::Path, id: FileId, span: Span) -> bool {
        let Span {
            offset,
            len,
            align,
            block,
            opens,
            closes,
        } = span;
        let Some(mut work) = self.work.take() else {
            return false;
        };
        let size = self.pool.size;
        let step = piece_step(size, align);
        let mut buf = self.pool.get(&self.cancel).unwrap_or_default();
        buf.resize(size, 0);
        let start = Position { file: id, offset };
        work.open(block);
        let mut pieces = Vec::new();
        let mut done = 0u64;
        let mut failed = None;
        loop {
            let n = (len - done).min(step as u64) as usize;
            if let Err(f) = read_piece(file, path, &mut buf[..n], offset + done) {
                failed = Some(f);
                break;
            }
            let piece = PieceSpan {
                pos: Position {
                    file: id,
                    offset: offset + done,
                },
                len: n,
                segment_start: done == 0 && opens,
                segment_end: done + n as u64 == len && closes,
            };
            work.piece(&buf[..n], piece.pos, piece.segment_start, piece.segment_end);
            pieces.push(piece);
            done += n as u64;
            if done >= len || self.cancel.load(Ordering::Relaxed) {
                break;
            }
        }
        let _ = self.pool.tx.try_send(buf);
        let made = work.close();
        self.work = Some(work);
        let whole = failed.is_none() && done == len;
        let mut ok = true;
        if !pieces.is_empty() {
            ok = self.send(ReadEvent::Piece(Piece {
                pos: start,
                buf: Vec::new(),
                len: 0,
                block,
                segment_start: opens,
                segment_end: whole && closes,
                pool: None,
                done: Some(Box::new(BlockDone {
                    pieces,
                    bytes: done,
                    work: made,
                })),
            }));
        }
        match failed {
            Some(f) => {
                self.finding(f);
                false
            }
            None => ok,
        }
    }
}

/// Bytes of one read of a span: the buffer size rounded down to whole `align` units, at least one unit.
fn piece_step(size: usize, align: usize) -> usize {
    let align = align.max(1);
    ((size / align).max(1) * align).min(size)
}

/// Reads `buf.len()` bytes of `file` at `offset`; a failure is the finding that says so.
fn read_piece(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<(), Finding> {
    file.read_exact_at(buf, offset).map_err(|e| {
        Finding::at(
            Severity::Error,
            FindingKind::Io,
            path,
            offset,
            format!("read of {} bytes failed: {e}", buf.len()),
        )
    })
}

/// Whether `bytes` start with a frame header of the file's packet format and size.
fn plausible_frame_start(bytes: &[u8], header: &Mark6FileHeaderRepr) -> bool {
    match header.packet_format {
        PacketFormat::Vdif => VdifHeader::new_checked(bytes)
            .map(|h| h.frame_len() == header.packet_size as usize)
            .unwrap_or(false),
        PacketFormat::Mark5b => {
            bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == MARK5B_SYNC
        }
        PacketFormat::Unknown => true,
    }
}

/// Outcome of looking at a block header.
enum BlockCheck {
    Good {
        number: u32,
        payload: u64,
        short_by: u64,
    },
    Bad(String),
}

/// Judges the block header in `peek` (header bytes followed by as many payload bytes as available) found at
/// `offset` of a file of `file_len` bytes. `last` is the previous block number in this file.
fn check_block(
    peek: &[u8],
    offset: u64,
    file_len: u64,
    header: &Mark6FileHeaderRepr,
    last: Option<i64>,
) -> BlockCheck {
    let hlen = header.block_header_len();
    if peek.len() < hlen {
        return BlockCheck::Bad(format!(
            "{} bytes left, shorter than a block header",
            file_len - offset
        ));
    }
    let view = Mark6BlockHeader::new_unchecked(peek, header.version);
    let number = view.block_number();
    let packet = u64::from(header.packet_size);
    if number < 0 {
        return BlockCheck::Bad(format!("block_number {number} is negative"));
    }
    if let Some(l) = last {
        if i64::from(number) > l + MAX_BLOCK_JUMP {
            return BlockCheck::Bad(format!(
                "block_number {number} jumps implausibly far after block {l}"
            ));
        }
    }
    let avail = file_len - offset - hlen as u64;
    let (payload, short_by) = match view.wb_size() {
        Some(wb) => {
            if wb < hlen as i32 || wb as u32 > header.block_size {
                return BlockCheck::Bad(format!(
                    "wb_size {wb} out of range ({}..={} bytes)",
                    hlen, header.block_size
                ));
            }
            let payload = (wb as u64) - hlen as u64;
            if payload % packet != 0 {
                return BlockCheck::Bad(format!(
                    "wb_size {wb} does not hold a whole number of {packet}-byte frames"
                ));
            }
            if payload > avail {
                // Only the whole frames present are read; the caller reports the truncation.
                (avail / packet * packet, payload - avail / packet * packet)
            } else {
                (payload, 0)
            }
        }
        None => {
            // Version 1: every block is nominal size except a short last one.
            let nominal = u64::from(header.block_size) - hlen as u64;
            if nominal <= avail {
                (nominal, 0)
            } else {
                let whole = avail / packet * packet;
                (whole, avail - whole)
            }
        }
    };
    if payload > 0 && !plausible_frame_start(&peek[hlen..], header) {
        return BlockCheck::Bad(format!(
            "block {number}: payload does not start with a {:?} frame of {packet} bytes",
            header.packet_format
        ));
    }
    BlockCheck::Good {
        number: number as u32,
        payload,
        short_by,
    }
}

/// Searches `file` from `from` for the next offset holding a plausible block header; reads windows of
/// `RESYNC_WINDOW` bytes. Returns the offset, or None to the end of the file.
fn resync_block(
    file: &File,
    from: u64,
    file_len: u64,
    header: &Mark6FileHeaderRepr,
    last: Option<i64>,
    cancel: &AtomicBool,
) -> Option<u64> {
    let peek_len = header.block_header_len() + 32;
    let mut window = vec![0u8; RESYNC_WINDOW + peek_len];
    let mut start = from;
    while start < file_len && !cancel.load(Ordering::Relaxed) {
        let n = ((file_len - start) as usize).min(window.len());
        if file.read_exact_at(&mut window[..n], start).is_err() {
            return None;
        }
        let scan_to = if start + n as u64 >= file_len {
            n
        } else {
            n - peek_len
        };
        for i in 0..scan_to {
            let end = (i + peek_len).min(n);
            if let BlockCheck::Good { .. } =
                check_block(&window[i..end], start + i as u64, file_len, header, last)
            {
                return Some(start + i as u64);
            }
        }
        if start + n as u64 >= file_len {
            return None;
        }
        start += scan_to as u64;
    }
    None
}

fn mark6_reader(mut ctx: ReaderCtx, path: PathBuf, id: FileId, header: Mark6FileHeaderRepr) {
    let file = match open_sequential(&path) {
        Ok(f) => f,
        Err(e) => {
            ctx.finding(Finding::in_file(
                Severity::Error,
                FindingKind::Io,
                &path,
                format!("cannot open: {e}"),
            ));
            return;
        }
    };
    let file_len = match file.metadata() {
        Ok(m) => m.len(),
        Err(e) => {
            ctx.finding(Finding::in_file(
                Severity::Error,
                FindingKind::Io,
                &path,
                format!("cannot stat: {e}"),
            ));
            return;
        }
    };
    let hlen = header.block_header_len();
    let mut peek = vec![0u8; hlen + 32];
    let mut offset = FILE_HEADER_LEN as u64;
    let mut last: Option<i64> = None;
    while offset < file_len {
        let n = ((file_len - offset) as usize).min(peek.len());
        if let Err(e) = file.read_exact_at(&mut peek[..n], offset) {
            ctx.finding(Finding::at(
                Severity::Error,
                FindingKind::Io,
                &path,
                offset,
                format!("read failed: {e}"),
            ));
            return;
        }
        match check_block(&peek[..n], offset, file_len, &header, last) {
            BlockCheck::Good {
                number,
                payload,
                short_by,
            } => {
                if let Some(l) = last {
                    if i64::from(number) <= l {
                        let f = Finding::at(
                            Severity::Warn,
                            FindingKind::BlockOrder,
                            &path,
                            offset,
                            format!("block number {number} after block {l} in the same file (block numbers should increase within a file)"),
                        );
                        if !ctx.finding(f) {
                            return;
                        }
                    }
                }
                if short_by > 0 {
                    let what = match header.version {
                        Mark6Version::V2 => format!(
                            "block {number}: wb_size promises {} more bytes than the file holds; the file is truncated",
                            short_by
                        ),
                        Mark6Version::V1 => format!(
                            "last block {number} ends inside a frame: {short_by} bytes of a partial frame ignored"
                        ),
                    };
                    if !ctx.finding(Finding::at(
                        Severity::Error,
                        FindingKind::Truncated,
                        &path,
                        offset,
                        what,
                    )) {
                        return;
                    }
                }
                let data_at = offset + hlen as u64;
                let span = Span {
                    offset: data_at,
                    len: payload,
                    align: header.packet_size as usize,
                    block: Some(number),
                    opens: true,
                    closes: true,
                };
                if !ctx.send_range(&file, &path, id, span) {
                    return;
                }
                last = Some(i64::from(number));
                offset = data_at + payload;
                if short_by > 0 {
                    // Whatever follows is the partial frame already reported.
                    return;
                }
            }
            BlockCheck::Bad(why) => {
                if file_len - offset < hlen as u64 {
                    let f = Finding::at(
                        Severity::Error,
                        FindingKind::Truncated,
                        &path,
                        offset,
                        format!(
                            "{} trailing bytes, shorter than a block header",
                            file_len - offset
                        ),
                    );
                    ctx.finding(f);
                    return;
                }
                let found = resync_block(&file, offset + 1, file_len, &header, last, &ctx.cancel);
                let msg = match found {
                    Some(next) => format!(
                        "corrupted block header: {why}; skipped {} bytes to the next plausible block header at offset {next}",
                        next - offset
                    ),
                    None => format!(
                        "corrupted block header: {why}; no plausible block header found after it, {} bytes to the end of the file not read",
                        file_len - offset
                    ),
                };
                if !ctx.finding(Finding::at(
                    Severity::Error,
                    FindingKind::BlockHeader,
                    &path,
                    offset,
                    msg,
                )) {
                    return;
                }
                match found {
                    Some(next) => offset = next,
                    None => return,
                }
            }
        }
    }
}

fn chunk_reader(mut ctx: ReaderCtx, chunks: Vec<(u32, PathBuf, FileId)>) {
    for (number, path, id) in chunks {
        let file = match open_sequential(&path).and_then(|f| f.metadata().map(|m| (f, m.len()))) {
            Ok(f) => f,
            Err(e) => {
                if !ctx.finding(Finding::in_file(
                    Severity::Error,
                    FindingKind::Io,
                    &path,
                    format!("cannot open: {e}"),
                )) {
                    return;
                }
                continue;
            }
        };
        if !ctx.send_range(&file.0, &path, id, Span::whole(file.1, Some(number))) {
            return;
        }
    }
}

fn plain_reader(mut ctx: ReaderCtx, files: Vec<(PathBuf, FileId)>) {
    for (path, id) in files {
        let file = match open_sequential(&path).and_then(|f| f.metadata().map(|m| (f, m.len()))) {
            Ok(f) => f,
            Err(e) => {
                if !ctx.finding(Finding::in_file(
                    Severity::Error,
                    FindingKind::Io,
                    &path,
                    format!("cannot open: {e}"),
                )) {
                    return;
                }
                continue;
            }
        };
        if !ctx.send_range(&file.0, &path, id, Span::whole(file.1, None)) {
            return;
        }
    }
}

fn ranges_reader(mut ctx: ReaderCtx, ranges: Vec<FileRange>, align: usize) {
    for r in ranges {
        let file = match open_sequential(&r.path) {
            Ok(f) => f,
            Err(e) => {
                if !ctx.finding(Finding::in_file(
                    Severity::Error,
                    FindingKind::Io,
                    &r.path,
                    format!("cannot open: {e}"),
                )) {
                    return;
                }
                continue;
            }
        };
        let span = Span {
            offset: r.offset,
            len: r.len,
            align,
            block: None,
            opens: r.offset == 0,
            closes: r.offset + r.len == r.file_len,
        };
        if !ctx.send_range(&file, &r.path, r.file, span) {
            return;
        }
    }
}

/// Running totals of the block-level structure.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct BlockStats {
    /// Blocks (Mark6) or chunks (FlexBuff) read.
    pub blocks: u64,
    /// Block numbers missing between the lowest and highest seen (and below the first, from 0).
    pub missing_blocks: u64,
    /// Block numbers seen more than once.
    pub duplicate_blocks: u64,
    /// Lowest and highest block number.
    pub first_block: Option<u32>,
    pub last_block: Option<u32>,
    /// Payload bytes read (block headers excluded).
    pub payload_bytes: u64,
}

struct Head {
    rx: Receiver<ReadEvent>,
    head: Option<Piece>,
    done: bool,
}

/// The read side of a recording: reader threads plus the k-way merge. Iterate with [`next_event`](Self::next_event);
/// dropping it stops and joins the readers.
pub struct ReadPipeline {
    heads: Vec<Head>,
    current: Option<usize>,
    files: Arc<FileTable>,
    cancel: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    numbered: bool,
    /// Highest block number handed on so far.
    high: Option<u32>,
    stats: BlockStats,
    unit: &'static str,
    pending: std::collections::VecDeque<ReadEvent>,
    /// Only blocks of this recorded stream are handed on (the metadata's block map and the stream's index).
    only: Option<(vlbiflow_scan::ScanMetadata, usize)>,
}

impl ReadPipeline {
    /// Starts reading a recording, in reads of [`READ_SIZE`].
    pub fn start(rec: &Recording) -> ReadPipeline {
        Self::start_with_read_size(rec, READ_SIZE)
    }

    /// Starts reading a recording in reads of at most `read_size` bytes (Mark6: rounded down to whole
    /// frames, at least one). The pieces differ with the size; the frames and findings framed from them do
    /// not.
    pub fn start_with_read_size(rec: &Recording, read_size: usize) -> ReadPipeline {
        Self::start_inner(rec, read_size, None)
    }

    /// Starts reading a scan of numbered blocks (Mark6, FlexBuff) whose readers work on what they read
    /// themselves: each reader thread gets a [`BlockWork`] from `make` (given the table of the files) and
    /// hands on, in block order, one piece per block with what its work made of it ([`Piece::done`]), no
    /// bytes. Block findings, reader findings and their order are those of [`start`](Self::start). Plain
    /// files are read as by [`start`](Self::start).
    pub fn start_with_work(rec: &Recording, make: &MakeWork<'_>) -> ReadPipeline {
        Self::start_inner(rec, WORK_READ_SIZE, Some(make))
    }

    fn start_inner(rec: &Recording, read_size: usize, make: Option<&MakeWork>) -> ReadPipeline {
        let cancel = Arc::new(AtomicBool::new(false));
        let mut files = FileTable::default();
        type Job = Box<dyn FnOnce(ReaderCtx) + Send>;
        let mut jobs: Vec<(String, Job)> = Vec::new();
        let size = read_size.max(1);
        let (numbered, unit) = match &rec.sources {
            Sources::Mark6(list) => {
                for src in list {
                    if let Some(h) = src.header {
                        let id = files.add(src.path.clone());
                        let path = src.path.clone();
                        jobs.push((
                            format!("read {}", id),
                            Box::new(move |ctx| mark6_reader(ctx, path, id, h)),
                        ));
                    }
                }
                (true, "block")
            }
            Sources::Flexbuff(disks) => {
                for disk in disks {
                    let chunks: Vec<_> = disk
                        .iter()
                        .map(|c| (c.number, c.path.clone(), files.add(c.path.clone())))
                        .collect();
                    jobs.push((
                        "read chunks".into(),
                        Box::new(move |ctx| chunk_reader(ctx, chunks)),
                    ));
                }
                (true, "chunk")
            }
            Sources::Plain(list, _) => {
                let list: Vec<_> = list.iter().map(|p| (p.clone(), files.add(p.clone()))).collect();
                jobs.push(("read files".into(), Box::new(move |ctx| plain_reader(ctx, list))));
                (false, "file")
            }
        };
        let files = Arc::new(files);
        let mut heads = Vec::new();
        let mut threads = Vec::new();
        for (name, body) in jobs {
            let work = make.filter(|_| numbered).map(|m| m(&files));
            // A reader that works on its blocks sends a small summary per block: it may run this far
            // ahead of the merge, so that one file's slower reads do not hold the other readers back.
            let depth = if work.is_some() {
                WORK_QUEUE_DEPTH
            } else {
                QUEUE_DEPTH
            };
            let (tx, rx) = bounded(depth);
            let ctx = ReaderCtx {
                tx,
                pool: BufferPool::new(size, QUEUE_DEPTH + 2),
                cancel: cancel.clone(),
                work,
            };
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || body(ctx))
                .expect("spawn reader thread");
            threads.push(handle);
            heads.push(Head {
                rx,
                head: None,
                done: false,
            });
        }
        ReadPipeline {
            heads,
            current: None,
            files,
            cancel,
            threads,
            numbered,
            high: None,
            stats: BlockStats::default(),
            unit,
            pending: Default::default(),
            only: rec
                .stream
                .filter(|_| !rec.stream_labels().is_empty())
                .and_then(|i| Some((rec.metadata.clone()?, i))),
        }
    }

    /// Reads byte ranges of plain frame files (whose positions `files` names), one after the other, on one
    /// reader thread: a part of a recording read by one of several validation threads. A piece ends a
    /// segment only where its range reaches the end of the file, and starts one only at the file's start.
    ///
    /// Reads are of `read_size` bytes, rounded down to whole `frame_len` units: pieces small enough to be
    /// still in the processor's cache when the framer looks at them (a copy out of the page cache into a
    /// buffer larger than the cache costs more than the check of the frames in it).
    pub fn start_ranges(
        files: Arc<FileTable>,
        ranges: Vec<FileRange>,
        read_size: usize,
        frame_len: usize,
    ) -> ReadPipeline {
        let cancel = Arc::new(AtomicBool::new(false));
        let (tx, rx) = bounded(QUEUE_DEPTH);
        let align = frame_len.clamp(1, read_size.max(1));
        let size = (read_size / align).max(1) * align;
        let ctx = ReaderCtx {
            tx,
            pool: BufferPool::new(size, QUEUE_DEPTH + 2),
            cancel: cancel.clone(),
            work: None,
        };
        let handle = std::thread::Builder::new()
            .name("read range".into())
            .spawn(move || ranges_reader(ctx, ranges, align))
            .expect("spawn reader thread");
        ReadPipeline {
            heads: vec![Head {
                rx,
                head: None,
                done: false,
            }],
            current: None,
            files,
            cancel,
            threads: vec![handle],
            numbered: false,
            high: None,
            stats: BlockStats::default(),
            unit: "file",
            pending: Default::default(),
            only: None,
        }
    }

    /// Whether `p` belongs to the selected stream (always, without a selection). Block numbering and gap
    /// findings still cover every block of the scan: the other streams' blocks are no gap.
    fn wanted(&self, p: &Piece) -> bool {
        match (&self.only, p.block) {
            (Some((meta, i)), Some(b)) => meta.stream_of_block(u64::from(b)) == Some(*i),
            _ => true,
        }
    }

    /// The files being read, for printing positions.
    pub fn files(&self) -> Arc<FileTable> {
        self.files.clone()
    }

    /// Block-level totals so far (final once `next` returned None).
    pub fn block_stats(&self) -> BlockStats {
        self.stats
    }

    /// Whether the data is numbered blocks/chunks.
    pub fn numbered(&self) -> bool {
        self.numbered
    }

    /// The next piece in block order, or a finding; None at the end.
    pub fn next_event(&mut self) -> Option<ReadEvent> {
        if let Some(ev) = self.pending.pop_front() {
            return Some(ev);
        }
        loop {
            if let Some(i) = self.current {
                match self.heads[i].rx.recv() {
                    Ok(ReadEvent::Piece(p)) => {
                        if p.segment_end {
                            self.current = None;
                        }
                        self.stats.payload_bytes += p.payload_len();
                        if !self.wanted(&p) {
                            continue;
                        }
                        return Some(ReadEvent::Piece(p));
                    }
                    Ok(ev) => return Some(ev),
                    Err(_) => {
                        self.heads[i].done = true;
                        self.current = None;
                        continue;
                    }
                }
            }
            // Every open reader must show its next piece before the smallest can be chosen.
            for h in self.heads.iter_mut() {
                if h.head.is_none() && !h.done {
                    match h.rx.recv() {
                        Ok(ReadEvent::Piece(p)) => h.head = Some(p),
                        Ok(ev) => return Some(ev),
                        Err(_) => h.done = true,
                    }
                }
            }
            let (_, i) = self
                .heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| h.head.as_ref().map(|p| (p.block.unwrap_or(0), i)))
                .min()?;
            let piece = self.heads[i].head.take().expect("picked head");
            if !piece.segment_end {
                self.current = Some(i);
            }
            self.stats.payload_bytes += piece.payload_len();
            let wanted = self.wanted(&piece);
            if let (true, Some(b), true) = (self.numbered, piece.block, piece.segment_start) {
                if let Some(f) = self.account_block(b, piece.pos) {
                    if wanted {
                        self.pending.push_back(ReadEvent::Piece(piece));
                    }
                    return Some(ReadEvent::Finding(f));
                }
            }
            if !wanted {
                continue;
            }
            return Some(ReadEvent::Piece(piece));
        }
    }

    /// Block-number bookkeeping for a block starting at `pos`; returns a finding for a gap or duplicate.
    fn account_block(&mut self, b: u32, pos: Position) -> Option<Finding> {
        self.stats.blocks += 1;
        self.stats.first_block = Some(self.stats.first_block.map_or(b, |f| f.min(b)));
        self.stats.last_block = Some(self.stats.last_block.map_or(b, |l| l.max(b)));
        let path = self.files.path(pos.file).to_owned();
        let unit = self.unit;
        let prev = self.high;
        self.high = Some(prev.map_or(b, |h| h.max(b)));
        match prev {
            None if b > 0 => {
                self.stats.missing_blocks += u64::from(b);
                Some(Finding::at(
                    Severity::Error,
                    FindingKind::BlockGap,
                    path,
                    pos.offset,
                    format!("{unit}s 0..={} missing: the first {unit} found is {b}", b - 1),
                ))
            }
            None => None,
            Some(h) if b == h.wrapping_add(1) => None,
            Some(h) if b > h => {
                let n = b - h - 1;
                self.stats.missing_blocks += u64::from(n);
                let which = if n == 1 {
                    format!("{unit} {} missing", h + 1)
                } else {
                    format!("{n} {unit}s missing ({}..={})", h + 1, b - 1)
                };
                Some(Finding::at(
                    Severity::Error,
                    FindingKind::BlockGap,
                    path,
                    pos.offset,
                    format!("{which} before {unit} {b}"),
                ))
            }
            Some(h) if b == h => {
                self.stats.duplicate_blocks += 1;
                Some(Finding::at(
                    Severity::Error,
                    FindingKind::DuplicateBlock,
                    path,
                    pos.offset,
                    format!("{unit} {b} found again (duplicate {unit} number: files of two scans mixed?)"),
                ))
            }
            Some(h) => {
                // Older than the highest: it fills a gap counted before, or repeats a block.
                Some(Finding::at(
                    Severity::Warn,
                    FindingKind::BlockOrder,
                    path,
                    pos.offset,
                    format!("{unit} {b} arrives after {unit} {h} (a file's block numbers go backwards)"),
                ))
            }
        }
    }

    /// Stops the readers and waits for them.
    pub fn stop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.pending.clear();
        for h in self.heads.iter_mut() {
            h.head = None;
            // Drain so that a reader blocked on a full queue sees space or cancellation promptly.
            while h.rx.try_recv().is_ok() {}
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ReadPipeline {
    fn drop(&mut self) {
        self.stop();
    }
}
