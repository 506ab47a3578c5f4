//! The receiving data thread's files: each open file and how its chunks reach the disk, the chunks
//! staged in memory until they are verified, the destination directories, and the batched writes of
//! what goes through the page cache.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam_channel::Receiver as ChanRx;
use vlbiflow_xfer_proto::ChunkHash;

use super::plan::FilePlan;
use crate::dest;
use crate::source::AlignedBuf;

pub(super) struct OpenFile {
    pub(super) file: Arc<File>,
    /// The same file opened with `O_DIRECT`, where chunks may be staged (see [`Stages`]).
    pub(super) direct: Option<Arc<File>>,
    /// How each chunk's bytes reach the file in this session.
    pub(super) writes: Vec<ChunkWrite>,
    pub(super) dir: Arc<OwnedFd>,
    /// The existing final file, opened read-only: nothing may be written to it.
    pub(super) read_only: bool,
    pub(super) hashes: Vec<Option<ChunkHash>>,
    /// Chunks declared from what was on disk (and not found different since).
    pub(super) declared: Vec<bool>,
}

/// How the bytes of one chunk reach the file in this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChunkWrite {
    /// Nothing of it received yet.
    Open,
    /// Gathered in stage slot `n` as it arrives, written with `O_DIRECT` when verified (or, where chunk
    /// hashes are not merged from block digests, when complete, then hashed from the buffer written).
    Staged(u32),
    /// Written through the page cache as it arrives, or already handed to the verifier.
    Buffered,
}

/// Chunks gathered in memory as they arrive and written with `O_DIRECT` from that buffer once verified:
/// no copy of every byte into the page cache (on this class of machine a buffered write costs 0.4-4 s of
/// CPU per GB, a direct one 0.1; docs/xfer-protocol.md, "Writing at the receiver"). At most
/// [`STAGE_BYTES`] in buffers at once, made as needed and reused; a chunk that finds none free, or a file
/// system without `O_DIRECT`, is written through the page cache as it arrives. A chunk staged when the
/// receiver dies is not on disk and was not verified: a resume sends it again, as any unverified chunk.
pub(super) struct Stages {
    /// Buffers of chunks being gathered, by slot.
    pub(super) slots: Vec<Option<AlignedBuf>>,
    /// Buffers back from the verifier, ready for another chunk.
    pub(super) free: Vec<AlignedBuf>,
    /// Buffers made so far (at most `slots.len()`).
    pub(super) made: usize,
    pub(super) chunk_size: usize,
    pub(super) back: ChanRx<AlignedBuf>,
    /// Cleared when a direct write was refused: everything after goes through the page cache.
    pub(super) ok: Arc<AtomicBool>,
}

/// Memory a transfer may hold in staged chunks.
pub(super) const STAGE_BYTES: u64 = 256 << 20;
/// At most this many chunks staged at once (small chunks).
pub(super) const MAX_STAGES: u64 = 64;

impl Stages {
    pub(super) fn new(
        chunk_size: u64,
        block_size: u32,
        back: ChanRx<AlignedBuf>,
        ok: Arc<AtomicBool>,
    ) -> Stages {
        // a datagram must never straddle two chunks (it always lies within one when blocks divide chunks)
        let n = if block_size > 0 && chunk_size % u64::from(block_size) == 0 {
            (STAGE_BYTES / chunk_size).min(MAX_STAGES)
        } else {
            0
        };
        Stages {
            slots: (0..n).map(|_| None).collect(),
            free: Vec::new(),
            made: 0,
            chunk_size: chunk_size as usize,
            back,
            ok,
        }
    }

    /// A slot with an empty buffer for a new chunk, if any is free.
    pub(super) fn take(&mut self) -> Option<u32> {
        if !self.ok.load(Relaxed) {
            return None;
        }
        while let Ok(b) = self.back.try_recv() {
            self.free.push(b);
        }
        let slot = self.slots.iter().position(Option::is_none)?;
        let buf = match self.free.pop() {
            Some(b) => b,
            None if self.made < self.slots.len() => {
                self.made += 1;
                AlignedBuf::new(self.chunk_size, 0)
            }
            None => return None,
        };
        self.slots[slot] = Some(buf);
        Some(slot as u32)
    }
}

impl OpenFile {
    /// If chunk `chunk` is staged: its buffer, to be written, and the `O_DIRECT` file to write it to. The
    /// chunk is no longer staged either way (nothing more of it is received unless it is sent again).
    pub(super) fn take_staged(&mut self, chunk: u32, stages: &mut Stages) -> Option<(Arc<File>, AlignedBuf)> {
        let w = self.writes.get_mut(chunk as usize)?;
        let staged = match (*w, &self.direct) {
            (ChunkWrite::Staged(slot), Some(direct)) => stages.slots[slot as usize]
                .take()
                .map(|buf| (direct.clone(), buf)),
            _ => None,
        };
        *w = ChunkWrite::Buffered;
        staged
    }
}

/// Destination directories by their components under the root, each open while a file in it is.
#[derive(Default)]
pub(super) struct Dirs(std::collections::HashMap<Vec<String>, std::sync::Weak<OwnedFd>>);

impl Dirs {
    /// The directory of `fp`, made if needed: the one already open, or opened now.
    pub(super) fn open(&mut self, fp: &FilePlan) -> std::io::Result<Arc<OwnedFd>> {
        if let Some(d) = self.0.get(&fp.dir).and_then(std::sync::Weak::upgrade) {
            return Ok(d);
        }
        let d = Arc::new(dest::open_dir(&fp.root, &fp.dir, true)?);
        self.0.insert(fp.dir.clone(), Arc::downgrade(&d));
        Ok(d)
    }
}

/// One accepted payload: `len` bytes at `at` in receive buffer `buf`, for `file` at `offset`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Write {
    pub(super) file: u32,
    pub(super) offset: u64,
    pub(super) buf: usize,
    pub(super) at: usize,
    pub(super) len: usize,
}

/// Writes the payloads of a batch, each run of contiguous payloads of one file with one `pwritev`
/// (gathered from the receive buffers, headers skipped). The error names the file index.
pub(super) fn write_runs(
    writes: &[Write],
    bufs: &[Vec<u8>],
    files: &[Option<OpenFile>],
) -> Result<(), (u32, std::io::Error)> {
    const MAX_IOV: usize = 1024;
    let mut i = 0;
    let mut iov: Vec<std::io::IoSlice<'_>> = Vec::with_capacity(MAX_IOV.min(writes.len()));
    while i < writes.len() {
        let w0 = writes[i];
        let mut end = w0.offset;
        iov.clear();
        let mut j = i;
        while j < writes.len() && iov.len() < MAX_IOV {
            let w = writes[j];
            if w.file != w0.file || w.offset != end {
                break;
            }
            iov.push(std::io::IoSlice::new(&bufs[w.buf][w.at..w.at + w.len]));
            end += w.len as u64;
            j += 1;
        }
        let of = files[w0.file as usize].as_ref().expect("checked when delivered");
        let mut done = 0u64;
        let total = end - w0.offset;
        while done < total {
            let n = if done == 0 {
                rustix::io::pwritev(&*of.file, &iov, w0.offset)
            } else {
                // a short write (rare): the rest one payload at a time
                let mut skip = done;
                let mut r = Ok(0);
                for s in &iov {
                    if skip >= s.len() as u64 {
                        skip -= s.len() as u64;
                        continue;
                    }
                    r = rustix::io::pwrite(&*of.file, &s[skip as usize..], w0.offset + done);
                    break;
                }
                r
            };
            match n {
                Ok(0) => {
                    return Err((
                        w0.file,
                        std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote nothing"),
                    ))
                }
                Ok(n) => done += n as u64,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err((w0.file, e.into())),
            }
        }
        i = j;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[test]
    fn stages_are_bounded_reused_and_off_where_blocks_straddle_chunks() {
        let (tx, rx) = unbounded();
        let ok = Arc::new(AtomicBool::new(true));
        let mut s = Stages::new(64 << 20, 8192, rx, ok.clone());
        assert_eq!(s.slots.len(), (STAGE_BYTES / (64 << 20)) as usize);
        let taken: Vec<u32> = std::iter::from_fn(|| s.take()).collect();
        assert_eq!(taken.len(), s.slots.len(), "one chunk per slot, then none");
        // a chunk written: its buffer comes back and serves the next chunk, in a free slot
        let b = s.slots[1].take().unwrap();
        assert_eq!(s.take(), None, "a free slot but no buffer yet");
        tx.send(b).unwrap();
        assert_eq!(s.take(), Some(1));
        assert_eq!(s.made, s.slots.len(), "no buffer made beyond the bound");
        // a refused direct write turns staging off
        s.slots[2] = None;
        ok.store(false, Relaxed);
        assert_eq!(s.take(), None);
        // 1400-byte blocks straddle 64 KiB chunks: nothing is staged
        let (_tx, rx) = unbounded();
        assert!(Stages::new(64 << 10, 1400, rx, Arc::new(AtomicBool::new(true)))
            .slots
            .is_empty());
        // small chunks: at most MAX_STAGES
        let (_tx, rx) = unbounded();
        assert_eq!(
            Stages::new(4096, 4096, rx, Arc::new(AtomicBool::new(true)))
                .slots
                .len(),
            MAX_STAGES as usize
        );
    }
}
