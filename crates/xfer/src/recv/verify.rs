//! The verifying thread of a receive: it writes staged chunks, hashes chunks as written, reads verified
//! chunks back (`verify_written`), starts writeback, and passes verified files on to be committed, in
//! the order the receiving loop asked.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx};
use vlbiflow_xfer_proto::ChunkHash;

use super::commit::Finalize;
use crate::hash::ChunkHasher;
use crate::key::hex;
use crate::source::{AlignedBuf, DIRECT_ALIGN};

/// What the receiving loop asks of the verifier thread, done in the order asked.
pub(super) enum Job {
    /// A staged chunk to write.
    Write(StagedWrite),
    /// A file is verified: after every write queued before it, hand it to the committing thread.
    Finalize(Finalize),
    /// `verify_written`: read a verified chunk back from the disk after its write (queued before this) and
    /// check it against the hash it was verified with.
    ReadBack(ReadBack),
    /// A chunk complete in the page cache, to be hashed as written.
    Hash(HashChunk),
    /// A chunk was written and verified: start its writeback now (`posix_fadvise(DONTNEED)` writes dirty
    /// pages back without waiting and drops clean ones; nothing reads them again), so that the fsync
    /// before the commit finds little left to do.
    Writeback { f: Arc<File>, offset: u64, len: u64 },
}

/// A staged chunk: write it with `O_DIRECT` (the unaligned tail of the file through `f`) and give the
/// buffer back. Verified already from its block digests (the tags' BLAKE3 chaining values) when
/// `hash_size` is `None`; otherwise complete, and the buffer written is hashed (as a chunk of a file of
/// `hash_size` bytes) and reported like [`Job::Hash`].
pub(super) struct StagedWrite {
    pub file: u32,
    pub chunk: u32,
    pub direct: Arc<File>,
    pub f: Arc<File>,
    pub offset: u64,
    pub len: u64,
    pub buf: AlignedBuf,
    pub hash_size: Option<u64>,
}

/// A verified chunk to read back from the disk and compare with `want`.
pub(super) struct ReadBack {
    pub file: u32,
    pub chunk: u32,
    /// The file, opened with `O_DIRECT` when `direct`.
    pub f: Arc<File>,
    pub direct: bool,
    pub size: u64,
    pub offset: u64,
    pub len: u64,
    pub want: ChunkHash,
}

/// A chunk of a file of `size` bytes to hash from the page cache.
pub(super) struct HashChunk {
    pub file: u32,
    pub chunk: u32,
    pub f: Arc<File>,
    pub size: u64,
    pub offset: u64,
    pub len: u64,
}

/// The verifier's answer about one chunk: its hash as written, or why it failed.
#[derive(Debug)]
pub(super) struct ChunkReport {
    pub file: u32,
    pub chunk: u32,
    pub hash: Result<ChunkHash, String>,
}

/// What the verifier thread shares with the receiving loop.
pub(super) struct VerifierIo {
    pub out: ChanTx<ChunkReport>,
    /// Staged buffers, written and hashed, back to the loop.
    pub back: ChanTx<AlignedBuf>,
    pub direct_ok: Arc<AtomicBool>,
    pub written_direct: Arc<AtomicU64>,
    pub read_back: Arc<AtomicU64>,
    /// To the committing thread.
    pub fin: ChanTx<Finalize>,
    /// To the flushing thread: a file that has new data on its way to the disk.
    pub flush: ChanTx<Arc<File>>,
}

/// The receiving loop stopped listening: the verifier ends.
struct Gone;

/// The thread that writes staged chunks, hashes what was written where chunk hashes are not merged from
/// block digests, starts writeback, and passes verified files on to be committed, all in the order the
/// receiving loop asked: a file is committed only after every write of it has succeeded.
pub(super) struct Verifier {
    chunk_size: u64,
    jobs: ChanRx<Job>,
    io: VerifierIo,
    buf: AlignedBuf,
    /// After a failed write nothing more is committed (the loop aborts the transfer on the error).
    failed: bool,
}

impl Verifier {
    pub(super) fn new(chunk_size: u64, jobs: ChanRx<Job>, io: VerifierIo) -> Verifier {
        Verifier {
            chunk_size,
            jobs,
            io,
            buf: AlignedBuf::new(READ_PIECE.min(chunk_size as usize), 0),
            failed: false,
        }
    }

    /// Does each job until the loop closes the channel (or stops listening).
    pub(super) fn run(mut self) {
        while let Ok(job) = self.jobs.recv() {
            if self.handle(job).is_err() {
                return;
            }
        }
    }

    fn report(&self, file: u32, chunk: u32, hash: Result<ChunkHash, String>) -> Result<(), Gone> {
        self.io
            .out
            .send(ChunkReport { file, chunk, hash })
            .map_err(|_| Gone)
    }

    fn handle(&mut self, job: Job) -> Result<(), Gone> {
        match job {
            Job::ReadBack(j) => self.read_back(j),
            Job::Write(j) => self.write(j),
            Job::Finalize(j) => {
                if !self.failed {
                    self.io.fin.send(j).map_err(|_| Gone)?;
                }
                Ok(())
            }
            Job::Hash(j) => {
                let h = ChunkHasher::new(j.size, self.chunk_size, j.chunk as u64);
                let r = hash_from_disk(&j.f, false, j.offset, j.len, &mut self.buf, h);
                self.report(j.file, j.chunk, r)
            }
            Job::Writeback { f, offset, len } => {
                // only a hint: a failure costs time at the final fsync, never data
                let _ = rustix::fs::fadvise(
                    &*f,
                    offset,
                    std::num::NonZeroU64::new(len),
                    rustix::fs::Advice::DontNeed,
                );
                let _ = self.io.flush.send(f);
                Ok(())
            }
        }
    }

    fn read_back(&mut self, j: ReadBack) -> Result<(), Gone> {
        let ReadBack {
            file,
            chunk,
            f,
            direct,
            size,
            offset,
            len,
            want,
        } = j;
        let h = ChunkHasher::new(size, self.chunk_size, chunk as u64);
        let r = hash_from_disk(&f, direct, offset, len, &mut self.buf, h).and_then(|got| {
            if got == want {
                self.io.read_back.fetch_add(len, Relaxed);
                Ok(())
            } else {
                Err(format!(
                    "chunk {chunk} as read back from the disk (BLAKE3 {}) is not what was verified ({}); nothing was committed, run the same command again to resume",
                    hex(&got.0),
                    hex(&want.0)
                ))
            }
        });
        if let Err(e) = r {
            self.failed = true;
            self.report(file, chunk, Err(e))?;
        }
        Ok(())
    }

    fn write(&mut self, j: StagedWrite) -> Result<(), Gone> {
        let StagedWrite {
            file,
            chunk,
            direct,
            f,
            offset,
            len,
            buf: staged,
            hash_size,
        } = j;
        let bytes = &staged.bytes()[..len as usize];
        let r = write_staged(&direct, &f, offset, bytes, &self.io.direct_ok)
            .map(|d| {
                self.io.written_direct.fetch_add(d, Relaxed);
                hash_size.map(|size| {
                    let mut h = ChunkHasher::new(size, self.chunk_size, chunk as u64);
                    h.update(bytes);
                    h.finish()
                })
            })
            .map_err(|e| format!("writing at offset {offset}: {e}"));
        let _ = self.io.back.send(staged);
        self.failed |= r.is_err();
        if r.is_ok() {
            let _ = self.io.flush.send(f.clone());
        }
        // a hash, or an error, is reported; a verified chunk written is not
        if let Some(r) = r.transpose() {
            self.report(file, chunk, r)?;
        }
        Ok(())
    }
}

/// Writes a staged chunk at `offset` (a multiple of [`DIRECT_ALIGN`]): its aligned part with `O_DIRECT` from
/// the aligned buffer, the rest (a file's unaligned tail) through `f`. A refused direct write (`EINVAL`: a
/// file system or device wanting other alignment) clears `direct_ok` and writes through `f` instead.
/// Returns the bytes written with `O_DIRECT`.
pub(super) fn write_staged(
    direct: &File,
    f: &File,
    offset: u64,
    bytes: &[u8],
    direct_ok: &AtomicBool,
) -> std::io::Result<u64> {
    let aligned = bytes.len() / DIRECT_ALIGN * DIRECT_ALIGN;
    let mut done = 0usize;
    while done < aligned {
        match rustix::io::pwrite(direct, &bytes[done..aligned], offset + done as u64) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "wrote nothing",
                ))
            }
            // a short direct write ends where the device would; the rest goes through the page cache
            Ok(n) if n % DIRECT_ALIGN != 0 => {
                done += n;
                break;
            }
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::INVAL) if done == 0 => {
                direct_ok.store(false, Relaxed);
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    f.write_all_at(&bytes[done..], offset + done as u64)?;
    Ok(done as u64)
}

/// The largest piece in which chunks are read to be hashed.
pub(super) const READ_PIECE: usize = 8 << 20;

/// Reads `len` bytes of `f` at `offset` (a chunk's start, so a multiple of [`DIRECT_ALIGN`]) into `buf` piece
/// by piece (`buf`'s length, a multiple of [`DIRECT_ALIGN`]) and returns their hash: a chunk as written,
/// or as found when resuming. With `direct` (`f` opened with `O_DIRECT`, for `verify_written`) each piece
/// is read past the page cache, from the disk (the kernel writes back dirty pages of the range first), its
/// length rounded up to whole blocks (a read stops at the end of the file); a refused direct read reads the
/// rest through the cache.
pub(super) fn hash_from_disk(
    f: &File,
    mut direct: bool,
    offset: u64,
    len: u64,
    buf: &mut AlignedBuf,
    mut h: ChunkHasher,
) -> Result<ChunkHash, String> {
    let piece = buf.bytes().len();
    let mut done = 0u64;
    while done < len {
        let k = (piece as u64).min(len - done) as usize;
        let at = offset + done;
        let mut got = 0usize;
        while direct && got < k {
            let want = (k - got).next_multiple_of(DIRECT_ALIGN).min(piece - got);
            match rustix::io::pread(f, &mut buf.bytes_mut()[got..got + want], at + got as u64) {
                Ok(0) => {
                    return Err(format!(
                        "reading back at offset {}: the file ends there",
                        at + got as u64
                    ))
                }
                Ok(n) if n % DIRECT_ALIGN != 0 && got + n < k => {
                    // a short read inside the range: the rest through the cache
                    got += n;
                    direct = false;
                }
                Ok(n) => got += n.min(k - got),
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::INVAL) if got % DIRECT_ALIGN == 0 => direct = false,
                Err(e) => return Err(format!("reading back at offset {}: {e}", at + got as u64)),
            }
        }
        if got < k {
            f.read_exact_at(&mut buf.bytes_mut()[got..k], at + got as u64)
                .map_err(|e| format!("reading back at offset {}: {e}", at + got as u64))?;
        }
        h.update(&buf.bytes()[..k]);
        done += k as u64;
    }
    Ok(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dest;
    use crossbeam_channel::unbounded;
    use std::os::fd::OwnedFd;

    /// Whether `O_DIRECT` is possible under `dir` (not on tmpfs, for one).
    fn direct_possible(dir: &OwnedFd, name: &str, part: &File) -> bool {
        dest::open_part_direct(dir, name, part).is_some()
    }

    #[test]
    fn a_staged_chunk_goes_direct_except_the_unaligned_tail_and_reads_back_equal() {
        let d = tempfile::tempdir().unwrap();
        let dir = dest::open_dir(d.path(), &[], false).unwrap();
        let part = dest::open_part(&dir, "f").unwrap();
        let direct = dest::open_part_direct(&dir, "f", &part);
        let on_disk = direct_possible(&dir, "f", &part);
        let ok = AtomicBool::new(true);
        // two chunks of 64 KiB, the second the file's short last one with an unaligned tail
        let cs = 64 << 10;
        let mut bufs = [AlignedBuf::new(cs, 0), AlignedBuf::new(cs, 0)];
        let want: Vec<u8> = (0..cs + 3 * 4096 + 123).map(|i| (i * 7 % 251) as u8).collect();
        bufs[0].bytes_mut().copy_from_slice(&want[..cs]);
        bufs[1].bytes_mut()[..want.len() - cs].copy_from_slice(&want[cs..]);
        let direct = direct.as_ref().unwrap_or(&part);
        // the last chunk first: chunks complete in any order
        let n1 = write_staged(direct, &part, cs as u64, &bufs[1].bytes()[..want.len() - cs], &ok).unwrap();
        let n0 = write_staged(direct, &part, 0, bufs[0].bytes(), &ok).unwrap();
        assert!(ok.load(Relaxed));
        assert_eq!(std::fs::read(d.path().join("f.part")).unwrap(), want);
        if on_disk {
            assert_eq!(
                (n0, n1),
                (cs as u64, 3 * 4096),
                "aligned parts direct, the tail not"
            );
        }
    }

    #[test]
    fn a_chunk_read_back_hashes_as_written_and_a_wrong_one_stops_the_commit() {
        let d = tempfile::tempdir().unwrap();
        let dir = dest::open_dir(d.path(), &[], false).unwrap();
        let part = dest::open_part(&dir, "f").unwrap();
        // two chunks of 64 KiB, the last short and unaligned; written through the cache (dirty pages
        // that a direct read has the kernel write back first)
        let cs: u64 = 64 << 10;
        let size = cs + 3 * 4096 + 123;
        let data: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
        part.write_all_at(&data, 0).unwrap();
        let direct = dest::open_part_direct(&dir, "f", &part);
        let f = Arc::new(direct.unwrap_or(part.try_clone().unwrap()));
        let on_disk = dest::open_part_direct(&dir, "f", &part).is_some();
        let want = |c: u64| {
            let (o, l) = (c * cs, cs.min(size - c * cs));
            let mut h = ChunkHasher::new(size, cs, c);
            h.update(&data[o as usize..(o + l) as usize]);
            h.finish()
        };
        let mut buf = AlignedBuf::new(READ_PIECE, 0);
        for c in 0..2u64 {
            let l = cs.min(size - c * cs);
            let got =
                hash_from_disk(&f, on_disk, c * cs, l, &mut buf, ChunkHasher::new(size, cs, c)).unwrap();
            assert!(got == want(c), "chunk {c}");
        }
        // through the verifier: a chunk that reads back other than verified fails, and the file queued
        // after it is not committed
        let (job_tx, job_rx) = unbounded();
        let (out_tx, out_rx) = unbounded();
        let (back_tx, _back_rx) = unbounded();
        let (fin_tx, fin_rx) = unbounded();
        let read_back_bytes = Arc::new(AtomicU64::new(0));
        let io = VerifierIo {
            out: out_tx,
            back: back_tx,
            direct_ok: Arc::new(AtomicBool::new(true)),
            written_direct: Arc::new(AtomicU64::new(0)),
            read_back: read_back_bytes.clone(),
            fin: fin_tx,
            flush: unbounded().0,
        };
        let t = std::thread::spawn(move || Verifier::new(cs, job_rx, io).run());
        let job = |chunk: u32, want: ChunkHash| {
            Job::ReadBack(ReadBack {
                file: 0,
                chunk,
                f: f.clone(),
                direct: on_disk,
                size,
                offset: chunk as u64 * cs,
                len: cs.min(size - chunk as u64 * cs),
                want,
            })
        };
        job_tx.send(job(0, want(0))).unwrap();
        job_tx.send(job(1, want(0))).unwrap();
        job_tx
            .send(Job::Finalize(Finalize {
                file: 0,
                f: Arc::new(part.try_clone().unwrap()),
                dir: Arc::new(dir),
                read_only: false,
                hashes: vec![want(0), want(1)],
                resumed: 0,
            }))
            .unwrap();
        drop(job_tx);
        t.join().unwrap();
        let reports: Vec<_> = out_rx.iter().collect();
        assert_eq!(reports.len(), 1, "only the wrong chunk is reported");
        let ChunkReport { chunk, hash: r, .. } = &reports[0];
        assert_eq!(*chunk, 1);
        assert!(
            r.as_ref().unwrap_err().contains("is not what was verified"),
            "{r:?}"
        );
        assert_eq!(read_back_bytes.load(Relaxed), cs, "the good chunk counted");
        assert!(
            fin_rx.try_recv().is_err(),
            "nothing committed after a failed check"
        );
    }
}
