//! One writer thread per disk, all pulling sealed blocks from one shared queue: a disk that is free takes the
//! next block, so a slow disk simply takes fewer.
//!
//! Durability: a block goes back to the pool only once its bytes are known to be on the device (O_DIRECT
//! write returned, or `sync_file_range` waited for its writeback, one block behind so writeback overlaps the
//! next write). If a write or writeback fails, the disk leaves the scan and every block it had not confirmed
//! is put back on the queue for the other disks. A Mark6 file is cut back to its last confirmed block so it
//! stays well formed; a partial FlexBuff chunk is removed.
//!
//! Mark6 files are written with O_DIRECT where the filesystem allows. Their 20-byte file header and 8-byte
//! block headers put blocks at unaligned offsets, so each disk keeps a *carry*: the bytes after the last
//! page boundary written so far (< 4096). A block is shifted in its buffer (one memmove, into the page of
//! headroom every Mark6 block has) to start at its file offset's phase within a page, the carry is copied in
//! front of it, and the span up to the last page boundary is written from the buffer's aligned start; the
//! new tail becomes the carry. A block is confirmed once all its bytes are on disk, i.e. when a later write
//! covered its tail, or when the carry is written out padded to a page (idle, pacing, end of scan; the file
//! is cut back to its exact length at the end). Where O_DIRECT is refused (tmpfs), Mark6 files are written
//! buffered with the writeback pacing above, which also drops written pages from the page cache.
//! FlexBuff chunks are written with O_DIRECT where the filesystem allows (the unaligned tail, if any, buffered).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{AcqRel, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vlbiflow_formats::flexbuff;
use vlbiflow_formats::mark6::{Mark6BlockHeaderRepr, Mark6FileHeaderRepr, Mark6Version, FILE_HEADER_LEN};
use vlbiflow_scan::{FrameKind, ScanFormat};

use crate::engine::{RecorderEvent, Shared};
use crate::pool::{AlignedBuf, Block, ALIGN};

/// Creates the Mark6 scatter-gather file of the scan on `disk` with its file header.
pub(crate) fn create_mark6_file(
    path: &Path,
    nominal_block_size: u64,
    kind: FrameKind,
    frame_size: u32,
) -> io::Result<(File, [u8; FILE_HEADER_LEN])> {
    let file = OpenOptions::new().write(true).create_new(true).open(path)?;
    let header = Mark6FileHeaderRepr {
        version: Mark6Version::V2,
        block_size: nominal_block_size as u32,
        packet_format: kind.packet_format(),
        packet_size: frame_size,
    }
    .to_bytes()
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    file.write_all_at(&header, 0)?;
    Ok((file, header))
}

/// Where one disk's blocks go.
pub(crate) enum DiskSink {
    Mark6(Mark6Sink),
    Flexbuff {
        disk: PathBuf,
        scan: String,
        direct: bool,
    },
}

/// One disk's Mark6 scatter-gather file.
pub(crate) struct Mark6Sink {
    file: File,
    path: PathBuf,
    /// Logical end of the file: where the next block goes.
    offset: u64,
    identity: (u64, u64),
    /// O_DIRECT state; None when writing buffered.
    direct: Option<DirectCarry>,
    /// Why O_DIRECT could not be enabled at open, to be said once when the writer starts.
    refused: Option<String>,
}

/// The unaligned tail of what an O_DIRECT Mark6 writer has written so far.
struct DirectCarry {
    /// One page, aligned; bytes `[offset - len, offset)` of the file in `[..len]`.
    page: AlignedBuf,
    len: usize,
    /// Bytes `[0, on_disk)` of the file are on disk (`offset - len <= on_disk <= offset`).
    on_disk: u64,
    /// The file may extend past `offset` with padding (a padded carry write); cut back at the end.
    padded: bool,
}

impl DiskSink {
    /// True while this disk is written with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        match self {
            DiskSink::Mark6(m) => m.direct.is_some(),
            DiskSink::Flexbuff { direct, .. } => *direct,
        }
    }
}

impl Mark6Sink {
    /// Wraps a freshly created file holding just `header`; switches it to O_DIRECT when `direct` and the
    /// filesystem allows.
    fn new(file: File, path: PathBuf, header: &[u8], direct: bool) -> io::Result<Self> {
        let m = file.metadata()?;
        let mut sink = Mark6Sink {
            file,
            path,
            offset: header.len() as u64,
            identity: (m.dev(), m.ino()),
            direct: None,
            refused: None,
        };
        if direct {
            match set_direct(&sink.file, true) {
                Ok(()) => sink.start_carry(header),
                Err(e) => sink.refused = Some(format!("open with O_DIRECT refused: {e}")),
            }
        }
        Ok(sink)
    }

    /// Starts the O_DIRECT carry: the header is the first carry, and the first block's write rewrites
    /// page 0 with it. (The carry's arithmetic works on any descriptor; only O_DIRECT needs it.)
    fn start_carry(&mut self, header: &[u8]) {
        let mut page = AlignedBuf::new(ALIGN);
        page.as_mut_slice()[..header.len()].copy_from_slice(header);
        self.direct = Some(DirectCarry {
            page,
            len: header.len(),
            on_disk: header.len() as u64,
            padded: false,
        });
    }

    /// Bytes `[0, n)` of the file are on disk (buffered: writeback is tracked per block instead).
    fn on_disk(&self) -> Option<u64> {
        self.direct.as_ref().map(|d| d.on_disk)
    }

    /// Writes the block (header already emitted) at the end of the file with O_DIRECT: carry + block up
    /// to the last page boundary, keeping the rest as the new carry. Err(EINVAL) means the filesystem
    /// refused O_DIRECT; the block is then left shifted with the carry in front (see `fall_back`).
    fn write_direct(&mut self, block: &mut Block) -> io::Result<()> {
        let d = self.direct.as_mut().expect("direct sink");
        let c = d.len;
        let body = block.data_offset + block.len;
        // Shift the block to the carry's phase and put the carry in front: the span then starts at the
        // buffer's aligned start and at the file's last page boundary.
        block.shift_to(c);
        block.raw_mut()[..c].copy_from_slice(&d.page.as_slice()[..c]);
        let total = c + body;
        let aligned = total / ALIGN * ALIGN;
        let file_start = self.offset - c as u64;
        if aligned > 0 {
            self.file.write_all_at(&block.raw()[..aligned], file_start)?;
            d.on_disk = file_start + aligned as u64;
            d.padded = false;
        }
        let tail = total - aligned;
        d.page.as_mut_slice()[..tail].copy_from_slice(&block.raw()[aligned..total]);
        d.len = tail;
        self.offset += body as u64;
        Ok(())
    }

    /// Puts the carry on disk (padded with zeros to a page) so every byte up to `offset` is on disk. The
    /// next block's write rewrites that page; the padding is cut off at the end of the scan.
    fn flush_carry(&mut self) -> io::Result<()> {
        let Some(d) = self.direct.as_mut() else {
            return Ok(());
        };
        if d.on_disk >= self.offset {
            return Ok(());
        }
        let c = d.len;
        d.page.as_mut_slice()[c..].fill(0);
        self.file
            .write_all_at(d.page.as_slice(), self.offset - c as u64)?;
        d.on_disk = self.offset;
        d.padded = true;
        Ok(())
    }

    /// O_DIRECT was refused mid-scan: writes what `write_direct` left in `block` (carry + block) buffered
    /// and continues buffered.
    fn fall_back(&mut self, block: &Block) -> io::Result<()> {
        let d = self.direct.take().expect("direct sink");
        set_direct(&self.file, false)?;
        let body = block.data_offset + block.len;
        let total = d.len + body;
        self.file
            .write_all_at(&block.raw()[..total], self.offset - d.len as u64)?;
        self.offset += body as u64;
        Ok(())
    }

    /// Cuts off any padding beyond the logical end.
    fn trim(&mut self) -> io::Result<()> {
        if let Some(d) = self.direct.as_mut() {
            if d.padded {
                self.file.set_len(self.offset)?;
                d.padded = false;
            }
        }
        Ok(())
    }
}

/// A block written but whose writeback is not yet confirmed.
struct Pending {
    block: Block,
    /// FlexBuff: the chunk file (Mark6 uses the sink's file).
    file: Option<File>,
    path: Option<PathBuf>,
    start: u64,
    len: u64,
}

fn sync_range(fd: &impl std::os::fd::AsFd, start: u64, len: u64, wait: bool) -> io::Result<()> {
    // On tmpfs a write is in its final place when it returns: there is no writeback to start or wait for.
    if fd_memory_backed(fd) {
        return Ok(());
    }
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::sync_file_range(fd.as_fd().as_raw_fd(), start as i64, len as i64, flags) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if wait {
        // Advisory only: its failure changes nothing.
        let _ = rustix::fs::fadvise(
            fd,
            start,
            std::num::NonZeroU64::new(len),
            rustix::fs::Advice::DontNeed,
        );
    }
    Ok(())
}

struct Writer {
    shared: Arc<Shared>,
    index: usize,
    sink: DiskSink,
    /// Written blocks awaiting writeback confirmation, oldest first.
    pending: VecDeque<Pending>,
    pending_bytes: u64,
    max_pending: usize,
    said_fallback: bool,
    /// With datastreams: the name of each recording (by index) whose chunk directory this disk has.
    recordings: Vec<Option<String>>,
    /// With datastreams: the chunk directories made on this disk.
    recording_dirs: Vec<PathBuf>,
}

/// Unconfirmed bytes a disk may have in flight before the writer waits for the oldest block's writeback.
const PACE_BYTES: u64 = 64 << 20;

/// Capture only ([`RecorderConfig::discard`](crate::RecorderConfig::discard)): takes every sealed block off
/// the queue and returns it to the pool unwritten, until capture is over and nothing is in flight. Stands
/// in for the writers so that capture runs exactly as in a recording (blocks sealed, numbered and queued).
pub(crate) fn run_discard(shared: Arc<Shared>) {
    let queue = shared.queue_rx.clone();
    loop {
        match queue.recv_timeout(Duration::from_millis(50)) {
            Ok(mut block) => {
                shared.discarded_bytes.fetch_add(block.len as u64, Relaxed);
                block.reset();
                shared.in_flight.fetch_sub(1, AcqRel);
                shared.free.put(block);
            }
            Err(_) => {
                if shared.captures_running.load(Relaxed) == 0 && shared.in_flight.load(Relaxed) == 0 {
                    break;
                }
            }
        }
    }
    shared.writers_alive.fetch_sub(1, AcqRel);
}

/// Runs the writer of disk `index` until capture is over and the queue is drained, or the disk fails.
pub(crate) fn run_writer(shared: Arc<Shared>, index: usize, sink: DiskSink) {
    let mut w = Writer {
        shared,
        index,
        sink,
        pending: VecDeque::new(),
        pending_bytes: 0,
        max_pending: 0,
        said_fallback: false,
        recordings: Vec::new(),
        recording_dirs: Vec::new(),
    };
    // Leave most of the pool to capture: each disk may hold a share of it unconfirmed.
    w.max_pending = (w.shared.pool_start / (4 * w.shared.config.disks.len())).max(1);
    if let DiskSink::Mark6(m) = &mut w.sink {
        if let Some(reason) = m.refused.take() {
            w.said_fallback = true;
            w.shared.event(RecorderEvent::BufferedFallback {
                disk: w.disk_path(),
                reason,
            });
        }
    }
    w.run();
}

impl Writer {
    fn disk_path(&self) -> PathBuf {
        self.shared.config.disks[self.index].clone()
    }

    fn run(&mut self) {
        let queue = self.shared.queue_rx.clone();
        loop {
            if self.shared.hold_writers.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            match queue.recv_timeout(Duration::from_millis(50)) {
                Ok(block) => {
                    if let Err((e, current)) = self.write(block) {
                        return self.fail(e, current);
                    }
                }
                Err(_) => {
                    // Idle: confirm what is outstanding so a quiet stream's last block is not held back.
                    if let Err(e) = self.confirm_pending() {
                        return self.fail(e, None);
                    }
                    if self.shared.captures_running.load(Relaxed) == 0
                        && self.shared.in_flight.load(Relaxed) == 0
                    {
                        break;
                    }
                }
            }
        }
        if let Err(e) = self.finish() {
            // Every block was confirmed already, so nothing can be re-queued; say it loudly anyway.
            self.mark_failed(format!("final flush failed: {e}"), 0);
        }
        self.shared.writers_alive.fetch_sub(1, AcqRel);
    }

    fn finish(&mut self) -> io::Result<()> {
        self.confirm_pending()?;
        match &mut self.sink {
            DiskSink::Mark6(m) => {
                m.trim()?;
                m.file.sync_all()
            }
            DiskSink::Flexbuff { .. } if !self.shared.config.datastreams.is_empty() => {
                for (i, d) in self.recording_dirs.iter().enumerate() {
                    let dir = File::open(d)?;
                    if i == 0 {
                        rustix::fs::syncfs(&dir)?;
                    }
                    dir.sync_all()?;
                }
                Ok(())
            }
            DiskSink::Flexbuff { disk, scan, .. } => {
                let dir = File::open(flexbuff::chunk_dir(disk, scan))?;
                rustix::fs::syncfs(&dir)?;
                dir.sync_all()
            }
        }
    }

    /// With datastreams: where `block`'s chunk goes in its recording, making the recording's chunk
    /// directory on this disk with its first chunk here (the name is read once per recording).
    fn datastream_chunk(&mut self, block: &Block) -> io::Result<PathBuf> {
        let i = usize::from(block.recording);
        if self.recordings.len() <= i {
            self.recordings.resize(i + 1, None);
        }
        let disk = self.disk_path();
        if self.recordings[i].is_none() {
            let name = self
                .shared
                .recordings
                .name(block.recording)
                .ok_or_else(|| io::Error::other(format!("block of unknown recording {i}")))?;
            let dir = flexbuff::chunk_dir(&disk, &name);
            std::fs::create_dir(&dir)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            self.recording_dirs.push(dir);
            self.recordings[i] = Some(name);
        }
        let name = self.recordings[i].as_deref().unwrap_or_default();
        Ok(flexbuff::chunk_path(&disk, name, block.number))
    }

    /// Waits for every outstanding block's writeback.
    fn confirm_pending(&mut self) -> io::Result<()> {
        while !self.pending.is_empty() {
            self.confirm_oldest()?;
        }
        Ok(())
    }

    /// Returns to the pool every block whose bytes an O_DIRECT Mark6 writer has put on disk.
    fn confirm_written(&mut self) {
        let DiskSink::Mark6(m) = &self.sink else {
            return;
        };
        let Some(on_disk) = m.on_disk() else {
            return;
        };
        while self.pending.front().is_some_and(|p| p.start + p.len <= on_disk) {
            let p = self.pending.pop_front().expect("front exists");
            self.pending_bytes -= p.len;
            self.confirmed(p.block, p.len);
        }
    }

    /// Waits for the oldest outstanding block's writeback (O_DIRECT Mark6: writes out the carry) and
    /// returns it to the pool.
    fn confirm_oldest(&mut self) -> io::Result<()> {
        if let DiskSink::Mark6(m) = &mut self.sink {
            if m.direct.is_some() {
                if self.pending.is_empty() {
                    return Ok(());
                }
                let t = Instant::now();
                let result = m.flush_carry();
                self.add_busy(t);
                result?;
                self.confirm_written();
                return Ok(());
            }
        }
        let Some(p) = self.pending.pop_front() else {
            return Ok(());
        };
        let t = Instant::now();
        let result = match (&p.file, &self.sink) {
            (Some(f), _) => sync_range(f, p.start, p.len, true),
            (None, DiskSink::Mark6(m)) => sync_range(&m.file, p.start, p.len, true),
            (None, _) => Ok(()),
        };
        self.add_busy(t);
        if let Err(e) = result {
            self.pending.push_front(p);
            return Err(e);
        }
        self.pending_bytes -= p.len;
        self.confirmed(p.block, p.len);
        Ok(())
    }

    fn add_busy(&self, since: Instant) {
        self.shared.disks[self.index]
            .busy_ns
            .fetch_add(since.elapsed().as_nanos() as u64, Relaxed);
    }

    fn confirmed(&self, mut block: Block, bytes: u64) {
        let d = &self.shared.disks[self.index];
        d.bytes.fetch_add(bytes, Relaxed);
        d.blocks.fetch_add(1, Relaxed);
        if !self.shared.config.datastreams.is_empty() {
            self.shared
                .recordings
                .confirmed(block.recording, self.index, bytes);
        }
        block.reset();
        self.shared.in_flight.fetch_sub(1, AcqRel);
        self.shared.free.put(block);
    }

    /// Writes one block; on failure hands the block back for re-queueing.
    fn write(&mut self, mut block: Block) -> Result<(), (io::Error, Option<Block>)> {
        let recording_path = if self.shared.config.datastreams.is_empty() {
            None
        } else {
            match self.datastream_chunk(&block) {
                Ok(p) => Some(p),
                Err(e) => return Err((e, Some(block))),
            }
        };
        let t = Instant::now();
        let result = match &mut self.sink {
            DiskSink::Mark6(m) => {
                // The file must still be ours: a disk unmounted or the file removed/replaced under us must
                // fail the disk, not swallow blocks into an unreachable inode.
                match std::fs::metadata(&m.path) {
                    Ok(meta) if (meta.dev(), meta.ino()) == m.identity => {}
                    Ok(_) => return Err((io::Error::other("scan file was replaced"), Some(block))),
                    Err(e) => {
                        return Err((
                            io::Error::new(e.kind(), format!("scan file gone: {e}")),
                            Some(block),
                        ))
                    }
                }
                let wb_size = (block.data_offset + block.len) as u32;
                let header = Mark6BlockHeaderRepr {
                    block_number: block.number,
                    wb_size: Some(wb_size),
                };
                if let Err(e) = header.emit(&mut block.with_header_mut()[..8]) {
                    return Err((
                        io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
                        Some(block),
                    ));
                }
                let start = m.offset;
                let len = u64::from(wb_size);
                let written = if m.direct.is_some() {
                    match m.write_direct(&mut block) {
                        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                            let reason = format!("O_DIRECT write refused: {e}");
                            match m.fall_back(&block) {
                                Ok(()) => {
                                    self.said_fallback = true;
                                    self.shared.disks[self.index].direct.store(false, Relaxed);
                                    self.shared.event(RecorderEvent::BufferedFallback {
                                        disk: self.shared.config.disks[self.index].clone(),
                                        reason,
                                    });
                                    // Start writeback of everything still unconfirmed (earlier blocks'
                                    // tails were in the carry just written).
                                    let from = self.pending.front().map_or(start, |p| p.start);
                                    let _ = sync_range(&m.file, from, start + len - from, false);
                                    Ok(())
                                }
                                Err(e) => Err(e),
                            }
                        }
                        r => r,
                    }
                } else {
                    let r = m.file.write_all_at(block.with_header_mut(), start);
                    if r.is_ok() {
                        m.offset += len;
                        // Start writeback now; wait for it when the next block has been handed over.
                        let _ = sync_range(&m.file, start, len, false);
                    }
                    r
                };
                match written {
                    Ok(()) => Ok(Pending {
                        block,
                        file: None,
                        path: None,
                        start,
                        len,
                    }),
                    Err(e) => Err((e, block)),
                }
            }
            DiskSink::Flexbuff { disk, scan, direct } => {
                let path = recording_path.unwrap_or_else(|| flexbuff::chunk_path(disk, scan, block.number));
                match write_chunk(&path, &block, direct) {
                    Ok((file, fell_back)) => {
                        if let Some(reason) = fell_back {
                            if !self.said_fallback {
                                self.said_fallback = true;
                                self.shared.disks[self.index].direct.store(false, Relaxed);
                                self.shared.event(RecorderEvent::BufferedFallback {
                                    disk: disk.clone(),
                                    reason,
                                });
                            }
                        }
                        let len = block.len as u64;
                        let _ = sync_range(&file, 0, len, false);
                        Ok(Pending {
                            block,
                            file: Some(file),
                            path: Some(path),
                            start: 0,
                            len,
                        })
                    }
                    Err(e) => {
                        let _ = std::fs::remove_file(&path);
                        Err((e, block))
                    }
                }
            }
        };
        self.add_busy(t);
        match result {
            Ok(p) => {
                self.pending_bytes += p.len;
                self.pending.push_back(p);
                self.confirm_written();
                // Pace: the oldest block's writeback has had the newer writes' time to complete.
                while self.pending.len() > self.max_pending || self.pending_bytes > PACE_BYTES {
                    self.confirm_oldest().map_err(|e| (e, None))?;
                }
                Ok(())
            }
            Err((e, block)) => Err((e, Some(block))),
        }
    }

    fn mark_failed(&self, reason: String, requeued: usize) {
        let disk = &self.shared.disks[self.index];
        *disk.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.clone());
        let left = self.shared.writers_alive.load(Relaxed).saturating_sub(1);
        self.shared.event(RecorderEvent::DiskFailed {
            disk: self.disk_path(),
            error: reason,
            requeued_blocks: requeued,
            disks_left: left,
        });
    }

    /// Leaves the scan: cuts the file back to its last confirmed block and re-queues unconfirmed blocks.
    fn fail(&mut self, error: io::Error, current: Option<Block>) {
        let pending: Vec<Pending> = self.pending.drain(..).collect();
        self.pending_bytes = 0;
        match &mut self.sink {
            DiskSink::Mark6(m) => {
                // Everything before the first unconfirmed block is on disk; cut the rest (and any padding).
                let good = pending.first().map_or(m.offset, |p| p.start);
                let _ = m.file.set_len(good);
                m.offset = good;
            }
            DiskSink::Flexbuff { .. } => {
                for path in pending.iter().filter_map(|p| p.path.as_ref()) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        let mut back: Vec<Block> = pending.into_iter().map(|p| p.block).collect();
        back.extend(current);
        self.mark_failed(error.to_string(), back.len());
        // Leave the writer count before re-queueing, so nobody waits on a writer that is gone.
        let alive = self.shared.writers_alive.fetch_sub(1, AcqRel) - 1;
        for mut b in back {
            if alive == 0 {
                self.shared.lost_blocks.fetch_add(1, Relaxed);
                self.shared.streams[b.stream]
                    .unwritten
                    .fetch_add(u64::from(b.frames), Relaxed);
                self.shared.in_flight.fetch_sub(1, AcqRel);
                b.reset();
                self.shared.free.put(b);
            } else {
                let _ = self.shared.queue_tx.send(b);
            }
        }
        if alive == 0 {
            self.shared.event(RecorderEvent::AllDisksFailed);
            self.shared.request_stop();
        }
    }
}

/// Writes one FlexBuff chunk: with O_DIRECT for the aligned part when `direct`, the rest buffered.
/// Returns the open file and, if O_DIRECT had to be abandoned, why.
fn write_chunk(path: &Path, block: &Block, direct: &mut bool) -> io::Result<(File, Option<String>)> {
    let data = block.payload();
    let aligned = data.len() / ALIGN * ALIGN;
    if *direct && aligned > 0 {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => match file.write_all_at(&data[..aligned], 0) {
                Ok(()) => {
                    if aligned < data.len() {
                        set_direct(&file, false)?;
                        file.write_all_at(&data[aligned..], aligned as u64)?;
                    }
                    return Ok((file, None));
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    drop(file);
                    std::fs::remove_file(path)?;
                    *direct = false;
                    let (f, _) = write_chunk(path, block, direct)?;
                    return Ok((f, Some(format!("O_DIRECT write refused: {e}"))));
                }
                Err(e) => return Err(e),
            },
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                *direct = false;
                let (f, _) = write_chunk(path, block, direct)?;
                return Ok((f, Some(format!("open with O_DIRECT refused: {e}"))));
            }
            Err(e) => return Err(e),
        }
    }
    let file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all_at(data, 0)?;
    Ok((file, None))
}

/// True when `dir` is on tmpfs or ramfs. There the page cache is the storage: O_DIRECT (accepted by
/// recent kernels) gains nothing; measured at 1 Gb/s into four tmpfs directories, the recorder used
/// 2.98 CPU s/GB with O_DIRECT and 2.49 buffered.
pub(crate) fn memory_backed(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|st| is_memory_fs(&st))
}

/// [`memory_backed`] for an open file (one fstatfs: negligible next to a block write).
fn fd_memory_backed(fd: impl std::os::fd::AsFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|st| is_memory_fs(&st))
}

fn is_memory_fs(st: &rustix::fs::StatFs) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    // f_type is a c_long on x86_64 but another integer type on some targets.
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as i64;
    matches!(kind, TMPFS_MAGIC | RAMFS_MAGIC)
}

/// Turns O_DIRECT on or off for an open file (the kernel refuses to turn it on where unsupported).
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    let mut flags = rustix::fs::fcntl_getfl(file)?;
    flags.set(rustix::fs::OFlags::DIRECT, on);
    Ok(rustix::fs::fcntl_setfl(file, flags)?)
}

/// A FlexBuff sink for `disk` that makes no chunk directory up front: with datastreams each recording's
/// is made on its first chunk.
pub(crate) fn lazy_flexbuff_sink(disk: &Path, direct: bool) -> DiskSink {
    DiskSink::Flexbuff {
        disk: disk.to_owned(),
        scan: String::new(),
        direct: direct && !memory_backed(disk),
    }
}

/// The sink for `disk` in `format`, created (file header written / chunk directory made) up front so a
/// disk that is unusable at the start is an error before anything is received.
pub(crate) fn open_sink(
    format: ScanFormat,
    disk: &Path,
    scan: &str,
    kind: FrameKind,
    frame_size: u32,
    nominal_block_size: u64,
    direct: bool,
) -> io::Result<DiskSink> {
    let memory = direct && memory_backed(disk);
    let direct = direct && !memory;
    match format {
        ScanFormat::Mark6 => {
            let path = vlbiflow_formats::mark6::file_path(disk, scan, kind);
            let (file, header) = create_mark6_file(&path, nominal_block_size, kind, frame_size)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            let mut sink = Mark6Sink::new(file, path, &header, direct)?;
            if memory {
                sink.refused = Some("memory-backed filesystem (tmpfs/ramfs): writing buffered".into());
            }
            Ok(DiskSink::Mark6(sink))
        }
        ScanFormat::Flexbuff => {
            let dir = flexbuff::chunk_dir(disk, scan);
            std::fs::create_dir(&dir)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            Ok(DiskSink::Flexbuff {
                disk: disk.to_owned(),
                scan: scan.to_owned(),
                direct,
            })
        }
    }
}

/// Writes `blocks` Mark6 blocks of `block_bytes` frame bytes each to a new scan file in `dir` through the
/// same sink the writer uses (O_DIRECT with carry when `direct` and allowed, else buffered with the
/// writer's writeback pacing), ending with the final flush, trim and fsync. Returns the bytes written and
/// whether O_DIRECT was used. For benchmarks (`examples/mark6_write.rs`); not a recording API.
#[doc(hidden)]
pub fn bench_mark6_write(
    dir: &Path,
    block_bytes: usize,
    blocks: u32,
    direct: bool,
) -> io::Result<(u64, bool)> {
    let header_len = vlbiflow_formats::mark6::BLOCK_HEADER_LEN_V2;
    let path = dir.join("bench.vdif");
    let nominal = (header_len + block_bytes) as u64;
    let (file, header) = create_mark6_file(&path, nominal, FrameKind::Vdif, 8224)?;
    let mut sink = Mark6Sink::new(file, path, &header, direct)?;
    let used_direct = sink.direct.is_some();
    let mut block = Block::new(block_bytes, header_len, ALIGN);
    block.len = block_bytes;
    block.frame_area_mut()[..block_bytes].fill(0x5a);
    let mut pending: VecDeque<(u64, u64)> = VecDeque::new();
    let mut pending_bytes = 0;
    for number in 0..blocks {
        let wb_size = (header_len + block_bytes) as u32;
        let repr = Mark6BlockHeaderRepr {
            block_number: number,
            wb_size: Some(wb_size),
        };
        repr.emit(&mut block.with_header_mut()[..8])
            .map_err(|e| io::Error::other(e.to_string()))?;
        if sink.direct.is_some() {
            sink.write_direct(&mut block)?;
        } else {
            let start = sink.offset;
            sink.file.write_all_at(block.with_header_mut(), start)?;
            sink.offset += u64::from(wb_size);
            sync_range(&sink.file, start, u64::from(wb_size), false)?;
            pending.push_back((start, u64::from(wb_size)));
            pending_bytes += u64::from(wb_size);
            while pending_bytes > PACE_BYTES {
                let (s, l) = pending.pop_front().expect("pending");
                sync_range(&sink.file, s, l, true)?;
                pending_bytes -= l;
            }
        }
    }
    for (s, l) in pending {
        sync_range(&sink.file, s, l, true)?;
    }
    sink.flush_carry()?;
    sink.trim()?;
    sink.file.sync_all()?;
    Ok((sink.offset, used_direct))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mount points of the given filesystem types, from /proc/self/mounts.
    fn mounts_of(types: &[&str]) -> Vec<PathBuf> {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && types.contains(&f[2])).then(|| PathBuf::from(f[1]))
            })
            .collect()
    }

    #[test]
    fn tmpfs_is_memory_backed_and_disk_filesystems_are_not() {
        let tmpfs = mounts_of(&["tmpfs"]);
        assert!(
            !tmpfs.is_empty(),
            "no tmpfs mounted (Linux mounts /dev/shm or /run as tmpfs)"
        );
        assert!(tmpfs.iter().all(|m| memory_backed(m)), "{tmpfs:?}");
        let disks = mounts_of(&["ext4", "xfs", "btrfs"]);
        assert!(disks.iter().all(|m| !memory_backed(m)), "{disks:?}");
        assert!(!memory_backed(Path::new("/no/such/dir")));
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Write a block of this many frame bytes (plus its 8-byte header).
        Write(usize),
        /// Put the carry on disk (as the writer does to confirm blocks while idle).
        Flush,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (1usize..3 * ALIGN).prop_map(Op::Write),
            1 => (8usize..9).prop_map(|_| Op::Flush),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// The O_DIRECT carry arithmetic against a model file (the concatenation of everything written):
        /// blocks of any length at any page phase, carry flushes (zero padding) in between, trimmed at the
        /// end. The real file must equal the model byte for byte, and the carry invariants hold throughout:
        /// `offset - carry <= on_disk <= offset`, everything on disk after a flush.
        #[test]
        fn direct_carry_writes_exactly_the_model_file(
            header_len in 1usize..ALIGN, ops in proptest::collection::vec(op(), 1..24),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("scan");
            let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
            let header: Vec<u8> = (0..header_len).map(|i| (i * 7 + 1) as u8).collect();
            file.write_all_at(&header, 0).unwrap();
            let mut sink = Mark6Sink::new(file, path.clone(), &header, true).unwrap();
            if sink.direct.is_none() {
                // This filesystem refuses O_DIRECT (tmpfs): test the carry's arithmetic through the
                // buffered descriptor, which takes the same aligned writes.
                sink.start_carry(&header);
            }
            let mut model = header.clone();
            let mut block = Block::new(3 * ALIGN, 8, ALIGN);
            for (n, op) in ops.iter().enumerate() {
                match *op {
                    Op::Write(len) => {
                        block.reset();
                        block.len = len;
                        for (i, b) in block.with_header_mut().iter_mut().enumerate() {
                            *b = (i as u8).wrapping_mul(31) ^ n as u8;
                        }
                        model.extend_from_slice(block.with_header_mut());
                        sink.write_direct(&mut block).unwrap();
                    }
                    Op::Flush => {
                        sink.flush_carry().unwrap();
                        let d = sink.direct.as_ref().expect("carry");
                        proptest::prop_assert_eq!(d.on_disk, sink.offset);
                    }
                }
                proptest::prop_assert_eq!(sink.offset, model.len() as u64);
                let d = sink.direct.as_ref().expect("carry");
                proptest::prop_assert!(d.len < ALIGN);
                proptest::prop_assert!(sink.offset - d.len as u64 <= d.on_disk && d.on_disk <= sink.offset);
                proptest::prop_assert_eq!(&d.page.as_slice()[..d.len], &model[model.len() - d.len..]);
            }
            sink.flush_carry().unwrap();
            sink.trim().unwrap();
            let on_file = std::fs::read(&path).unwrap();
            proptest::prop_assert_eq!(on_file.len(), model.len());
            proptest::prop_assert!(on_file == model, "file differs from the model");
        }
    }
}
