//! The receiving data plane of one transfer.
//!
//! Before anything is accepted, [`plan`] checks the request against the destination without writing:
//! names, what exists already (a `.part` from an interrupted run is resumed, a complete file of the same
//! size is re-verified, anything else is refused unless overwriting was asked). Then [`run_receiver`]:
//! a hashing thread re-reads what is already on disk at disk speed and reports the hash of each complete
//! chunk (`have`); the data thread receives datagrams in batches (`recvmmsg`, GRO), hands them to the
//! protocol's [`Receiver`] and gathers what it accepts into the chunk's buffer in memory (see [`Stages`];
//! without a free one, or where the file system has no `O_DIRECT`, it writes it straight to the `.part`
//! file); a verifier thread writes each verified staged chunk with `O_DIRECT` (and, where chunk hashes are
//! not merged from the datagrams' block digests, hashes each completed chunk as written); a finalizer
//! syncs each finished file, renames it to its final name and writes its manifest, after every write of
//! it. The sender is told `committed` only when every file is synced.

use std::collections::VecDeque;
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver as ChanRx, Sender as ChanTx};
use vlbiflow_udp::{BatchReceiver, RecvMeta};
use vlbiflow_xfer_proto::timing::nap_for;
use vlbiflow_xfer_proto::wire::{
    derive_data_aead_key, derive_data_key, derive_feedback_key, emit_feedback_datagram, open_encrypted,
    HEADER_LEN, MAX_FEEDBACK_DATAGRAM,
};
use vlbiflow_xfer_proto::{AbortKind, ChunkHash, ControlMsg, Event, Receiver, ReceiverConfig, ReceiverStats};

use crate::dest::{self, Existing, Manifest};
use crate::error::{failed, XferError};
use crate::hash::{file_hash, ChunkHasher};
use crate::key::hex;
use crate::link::{Inbound, Link};
use crate::progress::Progress;
use crate::session::{Committed, FileSpec, Have, Options, ReceiverReport, Session};
use crate::share::{CapWatch, RateCap};
use crate::source::{AlignedBuf, DIRECT_ALIGN};

/// Where one file of a request goes and what is there already.
#[derive(Debug)]
pub struct FilePlan {
    /// Relative name from the request.
    pub name: String,
    pub size: u64,
    /// Root directory and the components of the file's directory below it.
    pub root: PathBuf,
    pub dir: Vec<String>,
    /// Last component.
    pub leaf: String,
    /// What to resume from.
    pub resume: Resume,
}

/// What a receiver already holds of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Nothing: start from scratch.
    Nothing,
    /// A `.part` holding this many complete chunks.
    Part(u32),
    /// The final file exists with the announced size (verified chunk by chunk, never written).
    Complete(u32),
}

/// The receiving side's plan for a request.
#[derive(Debug)]
pub struct Plan {
    pub files: Vec<FilePlan>,
    pub options: Options,
}

impl Plan {
    /// What to tell the sender in the accept.
    pub fn have(&self) -> Vec<Have> {
        self.files
            .iter()
            .enumerate()
            .filter_map(|(i, f)| match f.resume {
                Resume::Nothing => None,
                Resume::Part(c) => Some(Have {
                    file: i as u32,
                    chunks: c,
                    complete: false,
                }),
                Resume::Complete(c) => Some(Have {
                    file: i as u32,
                    chunks: c,
                    complete: true,
                }),
            })
            .collect()
    }
}

/// Checks a request to write `files` under `root/dir_comps` without writing anything. The error is the
/// sentence to refuse with.
pub fn plan(
    root: &std::path::Path,
    dir_comps: &[String],
    files: &[FileSpec],
    options: &Options,
) -> Result<Plan, String> {
    if !crate::hash::valid_chunk_size(options.chunk_size) || options.chunk_size > 1 << 30 {
        return Err(format!(
            "chunk size {} is not a power of two between 4 KiB and 1 GiB",
            options.chunk_size
        ));
    }
    if options.block_size == 0 || options.block_size as usize > vlbiflow_xfer_proto::wire::MAX_PAYLOAD {
        return Err(format!("block size {} is out of range", options.block_size));
    }
    let mut out = Vec::with_capacity(files.len());
    let mut seen = std::collections::HashSet::new();
    for f in files {
        vlbiflow_xfer_proto::wire::validate_name(&f.name).map_err(|e| format!("file {:?}: {e}", f.name))?;
        if !seen.insert(f.name.as_str()) {
            return Err(format!("file {:?} is listed twice", f.name));
        }
        let comps: Vec<String> = f.name.split('/').map(str::to_owned).collect();
        let (leaf, sub) = comps.split_last().expect("validated names are not empty");
        if leaf.ends_with(dest::PART_SUFFIX) || leaf.ends_with(dest::MANIFEST_SUFFIX) {
            return Err(format!(
                "file {:?}: names ending in {} or {} are reserved for the receiver's own files",
                f.name,
                dest::PART_SUFFIX,
                dest::MANIFEST_SUFFIX
            ));
        }
        let mut dir = dir_comps.to_vec();
        dir.extend(sub.iter().cloned());
        let n_chunks = f.size.div_ceil(options.chunk_size) as u32;
        // look without creating: a directory that does not exist holds nothing
        let resume = match dest::open_dir(root, &dir, false) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Resume::Nothing,
            Err(e) => return Err(format!("destination of {:?}: {e}", f.name)),
            Ok(dfd) => {
                let fin = dest::existing(&dfd, leaf).map_err(|e| format!("{:?}: {e}", f.name))?;
                let part = dest::existing(&dfd, &format!("{leaf}{}", dest::PART_SUFFIX))
                    .map_err(|e| format!("{:?}: {e}", f.name))?;
                match (fin, options.overwrite) {
                    (Existing::Other, _) => {
                        return Err(format!(
                            "{}/{leaf} exists and is not a regular file",
                            dir.join("/")
                        ))
                    }
                    (Existing::File(sz), false) if sz != f.size => {
                        return Err(format!(
                            "{}/{leaf} exists with {sz} bytes, not {}; nothing is overwritten unless asked (--overwrite)",
                            dir.join("/"),
                            f.size
                        ))
                    }
                    (Existing::File(_), false) => Resume::Complete(n_chunks),
                    _ => match part {
                        Existing::File(psz) => {
                            let full = if psz >= f.size {
                                n_chunks
                            } else {
                                (psz / options.chunk_size) as u32
                            };
                            if full > 0 {
                                Resume::Part(full)
                            } else {
                                Resume::Nothing
                            }
                        }
                        Existing::Other => {
                            return Err(format!(
                                "{}/{leaf}{} exists and is not a regular file",
                                dir.join("/"),
                                dest::PART_SUFFIX
                            ))
                        }
                        Existing::None => Resume::Nothing,
                    },
                }
            }
        };
        out.push(FilePlan {
            name: f.name.clone(),
            size: f.size,
            root: root.to_path_buf(),
            dir,
            leaf: leaf.clone(),
            resume,
        });
    }
    // refuse up front what cannot fit, instead of failing with ENOSPC half way
    let need: u64 = out
        .iter()
        .map(|f| match f.resume {
            Resume::Complete(_) => 0,
            Resume::Part(full) => f.size.saturating_sub(u64::from(full) * options.chunk_size),
            Resume::Nothing => f.size,
        })
        .sum();
    if need > 0 {
        if let Ok(st) = rustix::fs::statvfs(root) {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if need > free {
                return Err(format!(
                    "not enough space under the root: the files need {:.3} GB more, {:.3} GB are free",
                    need as f64 / 1e9,
                    free as f64 / 1e9
                ));
            }
        }
    }
    Ok(Plan {
        files: out,
        options: options.clone(),
    })
}

/// Settings of one receiving transfer.
#[derive(Debug, Clone)]
pub struct RecvParams {
    pub transfer_id: u32,
    pub secret: [u8; 32],
    /// Nothing from the sender for this long: it is dead.
    pub dead_timeout: Duration,
    /// For manifests: who sent it.
    pub source: String,
    /// Run the data thread (receiving, feedback) in the real-time class (`--realtime`, see
    /// [`vlbiflow_udp::sched`]).
    pub realtime: bool,
    /// The ceiling the daemon sets for this transfer while it runs (its share of a limit on all its
    /// transfers): each change is sent to the sender.
    pub rate_cap: Option<Arc<RateCap>>,
}

/// What a completed receive did.
#[derive(Debug, Clone)]
pub struct RecvOutcome {
    pub committed: Vec<Committed>,
    pub stats: ReceiverStats,
    pub bytes_resumed: u64,
    /// Bytes written with `O_DIRECT` from staged chunks (the rest went through the page cache).
    pub bytes_written_direct: u64,
    /// Bytes read back from the disk after they were written and found equal (`verify_written`).
    pub bytes_read_back: u64,
    pub seconds: f64,
    /// The data thread ran in the real-time class (`--realtime` asked for it and it was permitted).
    pub realtime: bool,
}

impl RecvOutcome {
    /// The counters as the receiver reports them to the sender.
    pub fn report(&self) -> ReceiverReport {
        ReceiverReport::new(&self.stats, self.bytes_written_direct, self.bytes_read_back)
    }
}

struct OpenFile {
    file: Arc<File>,
    /// The same file opened with `O_DIRECT`, where chunks may be staged (see [`Stages`]).
    direct: Option<Arc<File>>,
    /// How each chunk's bytes reach the file in this session.
    writes: Vec<ChunkWrite>,
    dir: Arc<OwnedFd>,
    /// The existing final file, opened read-only: nothing may be written to it.
    read_only: bool,
    hashes: Vec<Option<ChunkHash>>,
    /// Chunks declared from what was on disk (and not found different since).
    declared: Vec<bool>,
}

/// How the bytes of one chunk reach the file in this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkWrite {
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
struct Stages {
    /// Buffers of chunks being gathered, by slot.
    slots: Vec<Option<AlignedBuf>>,
    /// Buffers back from the verifier, ready for another chunk.
    free: Vec<AlignedBuf>,
    /// Buffers made so far (at most `slots.len()`).
    made: usize,
    chunk_size: usize,
    back: ChanRx<AlignedBuf>,
    /// Cleared when a direct write was refused: everything after goes through the page cache.
    ok: Arc<AtomicBool>,
}

/// Memory a transfer may hold in staged chunks.
const STAGE_BYTES: u64 = 256 << 20;
/// At most this many chunks staged at once (small chunks).
const MAX_STAGES: u64 = 64;

impl Stages {
    fn new(chunk_size: u64, block_size: u32, back: ChanRx<AlignedBuf>, ok: Arc<AtomicBool>) -> Stages {
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
    fn take(&mut self) -> Option<u32> {
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
    fn take_staged(&mut self, chunk: u32, stages: &mut Stages) -> Option<(Arc<File>, AlignedBuf)> {
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

enum Job {
    /// A staged chunk: write it with `O_DIRECT` (the unaligned tail of the file through `f`) and give the
    /// buffer back. Verified already from its block digests (the tags' BLAKE3 chaining values) when
    /// `hash_size` is `None`; otherwise complete, and the buffer written is hashed (as a chunk of a file of
    /// `hash_size` bytes) and reported like `Hash`.
    Write {
        file: u32,
        chunk: u32,
        direct: Arc<File>,
        f: Arc<File>,
        offset: u64,
        len: u64,
        buf: AlignedBuf,
        hash_size: Option<u64>,
    },
    /// A file is verified: after every write queued before it, hand it to the committing thread.
    Finalize(Finalize),
    /// `verify_written`: read a verified chunk back from the disk after its write (queued before this) and
    /// check it against the hash it was verified with.
    ReadBack {
        file: u32,
        chunk: u32,
        /// The file, opened with `O_DIRECT` when `direct`.
        f: Arc<File>,
        direct: bool,
        size: u64,
        offset: u64,
        len: u64,
        want: ChunkHash,
    },
    Hash {
        file: u32,
        chunk: u32,
        f: Arc<File>,
        size: u64,
        offset: u64,
        len: u64,
    },
    /// A chunk was written and verified: start its writeback now (`posix_fadvise(DONTNEED)` writes dirty
    /// pages back without waiting and drops clean ones; nothing reads them again), so that the fsync
    /// before the commit finds little left to do.
    Writeback { f: Arc<File>, offset: u64, len: u64 },
}

/// What the verifier thread shares with the receiving loop.
struct VerifierIo {
    out: ChanTx<(u32, u32, Result<ChunkHash, String>)>,
    /// Staged buffers, written and hashed, back to the loop.
    back: ChanTx<AlignedBuf>,
    direct_ok: Arc<AtomicBool>,
    written_direct: Arc<AtomicU64>,
    read_back: Arc<AtomicU64>,
    /// To the committing thread.
    fin: ChanTx<Finalize>,
    /// To the flushing thread: a file that has new data on its way to the disk.
    flush: ChanTx<Arc<File>>,
}

/// How often the flushing thread makes what was written durable while a transfer runs.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Most files the flushing thread holds open between flushes: with many small files it flushes as soon as
/// it has this many, so that its list never keeps thousands of them open.
const FLUSH_MAX_FILES: usize = 64;

/// The flushing thread: `fdatasync` of each file that had data written, at most every [`FLUSH_EVERY`],
/// while the transfer runs, so that the sync before a file's commit finds little left to do. Without it
/// that sync waited for the whole file's metadata (`O_DIRECT` writes into new extents) and the device's
/// cache: 0.75-1.4 s at the end of a 3 GB push on a VM's disk, a tenth of the transfer. Only a head start:
/// a failed flush is left to the commit's own sync, which fails the transfer if the disk does.
/// Returns how many flushes it made.
fn flusher(files: ChanRx<Arc<File>>, every: Duration) -> u64 {
    let mut dirty: Vec<Arc<File>> = Vec::new();
    let mut last = Instant::now();
    let mut flushes = 0;
    loop {
        let wait = every.saturating_sub(last.elapsed());
        match files.recv_timeout(wait) {
            Ok(f) => {
                if !dirty.iter().any(|d| Arc::ptr_eq(d, &f)) {
                    dirty.push(f);
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return flushes,
        }
        if last.elapsed() >= every || dirty.len() >= FLUSH_MAX_FILES {
            for f in dirty.drain(..) {
                let _ = f.sync_data();
                flushes += 1;
            }
            last = Instant::now();
        }
    }
}

/// The thread that writes staged chunks, hashes what was written where chunk hashes are not merged from
/// block digests, starts writeback, and passes verified files on to be committed, all in the order the
/// receiving loop asked: a file is committed only after every write of it has succeeded.
fn verifier(chunk_size: u64, jobs: ChanRx<Job>, io: VerifierIo) {
    let out = io.out;
    let mut buf = AlignedBuf::new(READ_PIECE.min(chunk_size as usize), 0);
    // after a failed write nothing more is committed (the loop aborts the transfer on the error)
    let mut failed = false;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::ReadBack {
                file,
                chunk,
                f,
                direct,
                size,
                offset,
                len,
                want,
            } => {
                let h = ChunkHasher::new(size, chunk_size, chunk as u64);
                let r = hash_from_disk(&f, direct, offset, len, &mut buf, h).and_then(|got| {
                        if got == want {
                            io.read_back.fetch_add(len, Relaxed);
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
                    failed = true;
                    if out.send((file, chunk, Err(e))).is_err() {
                        return;
                    }
                }
            }
            Job::Write {
                file,
                chunk,
                direct,
                f,
                offset,
                len,
                buf: staged,
                hash_size,
            } => {
                let bytes = &staged.bytes()[..len as usize];
                let r = write_staged(&direct, &f, offset, bytes, &io.direct_ok)
                    .map(|d| {
                        io.written_direct.fetch_add(d, Relaxed);
                        hash_size.map(|size| {
                            let mut h = ChunkHasher::new(size, chunk_size, chunk as u64);
                            h.update(bytes);
                            h.finish()
                        })
                    })
                    .map_err(|e| format!("writing at offset {offset}: {e}"));
                let _ = io.back.send(staged);
                failed |= r.is_err();
                if r.is_ok() {
                    let _ = io.flush.send(f.clone());
                }
                // a hash, or an error, is reported; a verified chunk written is not
                if let Some(r) = r.transpose() {
                    if out.send((file, chunk, r)).is_err() {
                        return;
                    }
                }
            }
            Job::Finalize(j) => {
                if !failed && io.fin.send(j).is_err() {
                    return;
                }
            }
            Job::Hash {
                file,
                chunk,
                f,
                size,
                offset,
                len,
            } => {
                let h = ChunkHasher::new(size, chunk_size, chunk as u64);
                let r = hash_from_disk(&f, false, offset, len, &mut buf, h);
                if out.send((file, chunk, r)).is_err() {
                    return;
                }
            }
            Job::Writeback { f, offset, len } => {
                // only a hint: a failure costs time at the final fsync, never data
                let _ = rustix::fs::fadvise(
                    &*f,
                    offset,
                    std::num::NonZeroU64::new(len),
                    rustix::fs::Advice::DontNeed,
                );
                let _ = io.flush.send(f);
            }
        }
    }
}

/// Writes a staged chunk at `offset` (a multiple of [`DIRECT_ALIGN`]): its aligned part with `O_DIRECT` from
/// the aligned buffer, the rest (a file's unaligned tail) through `f`. A refused direct write (`EINVAL`: a
/// file system or device wanting other alignment) clears `direct_ok` and writes through `f` instead.
/// Returns the bytes written with `O_DIRECT`.
fn write_staged(
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
const READ_PIECE: usize = 8 << 20;

/// Reads `len` bytes of `f` at `offset` (a chunk's start, so a multiple of [`DIRECT_ALIGN`]) into `buf` piece
/// by piece (`buf`'s length, a multiple of [`DIRECT_ALIGN`]) and returns their hash: a chunk as written,
/// or as found when resuming. With `direct` (`f` opened with `O_DIRECT`, for `verify_written`) each piece
/// is read past the page cache, from the disk (the kernel writes back dirty pages of the range first), its
/// length rounded up to whole blocks (a read stops at the end of the file); a refused direct read reads the
/// rest through the cache.
fn hash_from_disk(
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

/// Hashes what is already on disk (`have` files) in order, storing each hash and reporting it to the sender.
fn resume_hasher(
    plan: Arc<Plan>,
    link_tx: ChanTx<Session>,
    store: Arc<Mutex<Vec<Vec<Option<ChunkHash>>>>>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let cs = plan.options.chunk_size;
    let mut buf = AlignedBuf::new(READ_PIECE.min(cs as usize), 0);
    for (i, f) in plan.files.iter().enumerate() {
        let (chunks, name) = match f.resume {
            Resume::Nothing => continue,
            Resume::Part(c) => (c, format!("{}{}", f.leaf, dest::PART_SUFFIX)),
            Resume::Complete(c) => (c, f.leaf.clone()),
        };
        let dir = dest::open_dir(&f.root, &f.dir, false).map_err(|e| format!("{}: {e}", f.name))?;
        let file = dest::open_final_ro(&dir, &name).map_err(|e| format!("{}: {e}", f.name))?;
        for c in 0..chunks {
            if stop.load(Relaxed) {
                return Ok(());
            }
            let off = c as u64 * cs;
            let len = cs.min(f.size - off);
            let h = hash_from_disk(
                &file,
                false,
                off,
                len,
                &mut buf,
                ChunkHasher::new(f.size, cs, c as u64),
            )
            .map_err(|e| format!("{}: {e}", f.name))?;
            store.lock().expect("resume hashes")[i][c as usize] = Some(h);
            let _ = link_tx.send(Session::Have {
                file: i as u32,
                chunk: c,
                hash: h,
            });
        }
    }
    let _ = link_tx.send(Session::HaveDone);
    Ok(())
}

struct Finalize {
    file: u32,
    f: Arc<File>,
    dir: Arc<OwnedFd>,
    read_only: bool,
    hashes: Vec<ChunkHash>,
    resumed: u64,
}

/// Runs the receiving side of an accepted request on `sock` until the sender is done and every file is
/// committed, or until the transfer fails (the `.part` files stay for a resume).
pub fn run_receiver(
    link: &Link,
    sock: &UdpSocket,
    plan: Arc<Plan>,
    p: &RecvParams,
    progress: &Progress,
    stop: &AtomicBool,
) -> Result<RecvOutcome, XferError> {
    crate::raise_open_file_limit();
    let cs = plan.options.chunk_size;
    let nfiles = plan.files.len();
    progress
        .bytes_total
        .store(plan.files.iter().map(|f| f.size).sum(), Relaxed);
    progress.files_total.store(nfiles as u64, Relaxed);

    // encrypted transfers are opened (checked and decrypted) before the protocol's receiver sees them
    let encrypt = plan.options.encrypt;
    let mut r = Receiver::new(ReceiverConfig {
        data_key: (!encrypt).then(|| derive_data_key(&p.secret, p.transfer_id)),
        dead_timeout: p.dead_timeout,
        max_files: nfiles as u32 + 1,
        ..ReceiverConfig::default()
    });

    // resume hashes of what is on disk
    let store: Arc<Mutex<Vec<Vec<Option<ChunkHash>>>>> = Arc::new(Mutex::new(
        plan.files
            .iter()
            .map(|f| match f.resume {
                Resume::Nothing => Vec::new(),
                Resume::Part(c) | Resume::Complete(c) => vec![None; c as usize],
            })
            .collect(),
    ));
    let hstop = Arc::new(AtomicBool::new(false));
    let (sess_tx, sess_rx) = unbounded::<Session>();
    let resumer = if plan.files.iter().any(|f| f.resume != Resume::Nothing) {
        progress.set_phase("re-verifying what is already here");
        let (plan, store, hstop) = (plan.clone(), store.clone(), hstop.clone());
        Some(
            std::thread::Builder::new()
                .name("xfer-resume".into())
                .spawn(move || resume_hasher(plan, sess_tx, store, hstop))
                .expect("spawn resume hasher"),
        )
    } else {
        drop(sess_tx);
        None
    };

    let (job_tx, job_rx) = unbounded::<Job>();
    let (hres_tx, hres_rx) = unbounded();
    let (back_tx, back_rx) = unbounded::<AlignedBuf>();
    let direct_ok = Arc::new(AtomicBool::new(true));
    let written_direct = Arc::new(AtomicU64::new(0));
    let read_back = Arc::new(AtomicU64::new(0));
    let mut stages = Stages::new(cs, plan.options.block_size, back_rx, direct_ok.clone());
    let (fin_tx, fin_rx) = unbounded::<Finalize>();
    let (flush_tx, flush_rx) = unbounded::<Arc<File>>();
    let flush = std::thread::Builder::new()
        .name("xfer-flush".into())
        .spawn(move || flusher(flush_rx, FLUSH_EVERY))
        .expect("spawn flusher");
    let vio = VerifierIo {
        out: hres_tx,
        back: back_tx,
        direct_ok,
        written_direct: written_direct.clone(),
        read_back: read_back.clone(),
        fin: fin_tx,
        flush: flush_tx,
    };
    // the verifier writes the staged chunks and returns their buffers, which the receiving thread waits
    // for when none is free: it runs in the real-time class too, a step below the receiving thread
    let realtime = p.realtime;
    let ver = std::thread::Builder::new()
        .name("xfer-verify".into())
        .spawn(move || {
            let _rt = crate::realtime_bulk_class(realtime, "the verifying thread");
            verifier(cs, job_rx, vio)
        })
        .expect("spawn verifier");
    let (fres_tx, fres_rx) = unbounded::<Result<Committed, String>>();
    let (overwrite, source) = (plan.options.overwrite, p.source.clone());
    let fplan = plan.clone();
    let fin = std::thread::Builder::new()
        .name("xfer-commit".into())
        .spawn(move || committer(&fplan, fin_rx, fres_tx, overwrite, &source))
        .expect("spawn finalizer");

    let aead_key = encrypt.then(|| derive_data_aead_key(&p.secret, p.transfer_id));
    let rt = crate::realtime_class(p.realtime, "the receiving data thread");
    let realtime = rt.is_some();
    let result = recv_loop(RecvLoop {
        aead_key,
        fb: FeedbackOut {
            sock,
            peer: None,
            key: derive_feedback_key(&p.secret, p.transfer_id),
            transfer_id: p.transfer_id,
            buf: Vec::with_capacity(MAX_FEEDBACK_DATAGRAM),
        },
        link,
        sock,
        plan: &plan,
        progress,
        stop,
        r: &mut r,
        store: &store,
        sess_rx,
        job_tx: &job_tx,
        hres_rx: &hres_rx,
        fres_rx: &fres_rx,
        stages: &mut stages,
        written_direct: &written_direct,
        read_back: &read_back,
        cap: p.rate_cap.as_deref().map(CapWatch::new),
    });
    drop(rt);
    hstop.store(true, Relaxed);
    // the verifier ends, then the committing thread (the verifier held its channel)
    drop(job_tx);
    let _ = ver.join();
    let _ = fin.join();
    // the verifier held its channel
    let _ = flush.join();
    let result = result.map(|mut o| {
        o.bytes_written_direct = written_direct.load(Relaxed);
        o.bytes_read_back = read_back.load(Relaxed);
        o.realtime = realtime;
        o
    });
    if let Some(t) = resumer {
        match t.join() {
            Ok(Err(e)) if result.is_ok() => return Err(failed!("{e}")),
            _ => {}
        }
    }
    result
}

/// Most verified files the committing thread takes at once (see [`finalize_batch`]).
const COMMIT_BATCH: usize = 256;
/// Most syncs the committing thread has running at once.
const COMMIT_SYNCS: usize = 8;

/// The committing thread: takes each verified file, with every other one already waiting, and commits
/// them together ([`finalize_batch`]), one result per file in the order they came.
fn committer(
    plan: &Plan,
    jobs: ChanRx<Finalize>,
    results: ChanTx<Result<Committed, String>>,
    overwrite: bool,
    source: &str,
) {
    while let Ok(j) = jobs.recv() {
        let mut batch = vec![j];
        while batch.len() < COMMIT_BATCH {
            match jobs.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        for r in finalize_batch(plan, batch, overwrite, source) {
            if results.send(r).is_err() {
                return;
            }
        }
    }
}

/// Commits verified files: each file and its manifest synced (all of them at once, up to
/// [`COMMIT_SYNCS`]), then `NAME.part` renamed to `NAME` and the manifest's temporary file to
/// `NAME.blake3.json`, then each directory synced once. A file is reported committed only after all of
/// that; one that fails leaves the others of the batch alone.
///
/// One file at a time, each commit took three syncs in a row (the file, its directory after the rename,
/// the manifest), and on a disk where a sync waits for the journal that is what many small files cost:
/// the batch shares them. With `--follow`'s partial rounds the files are only synced.
fn finalize_batch(
    plan: &Plan,
    jobs: Vec<Finalize>,
    overwrite: bool,
    source: &str,
) -> Vec<Result<Committed, String>> {
    let partial = plan.options.partial;
    let mut out: Vec<(Committed, Option<dest::StagedManifest>, Option<String>)> = jobs
        .iter()
        .map(|j| {
            let f = &plan.files[j.file as usize];
            let blake3 = hex(&file_hash(f.size, plan.options.chunk_size, &j.hashes));
            let mut err = None;
            let staged = if partial {
                None
            } else {
                let m = Manifest {
                    name: f.leaf.clone(),
                    size: f.size,
                    blake3: blake3.clone(),
                    chunk_size: plan.options.chunk_size,
                    chunks: j.hashes.iter().map(|h| hex(&h.0)).collect(),
                    source: source.to_string(),
                    committed_utc: crate::daemon::utc_now(),
                    writer: format!("vlbiflow {}", env!("CARGO_PKG_VERSION")),
                };
                dest::stage_manifest(&j.dir, &m)
                    .map_err(|e| err = Some(format!("{}: manifest: {e}", f.name)))
                    .ok()
            };
            let c = Committed {
                name: f.name.clone(),
                size: f.size,
                blake3,
                resumed_chunks: j.resumed,
            };
            (c, staged, err)
        })
        .collect();

    // every sync of the batch at once: (file, the file or its manifest)
    let mut syncs: Vec<(usize, &File, bool)> = Vec::new();
    for (i, (j, (_, staged, err))) in jobs.iter().zip(&out).enumerate() {
        if err.is_none() {
            if !j.read_only {
                syncs.push((i, &j.f, false));
            }
            if let Some(m) = staged {
                syncs.push((i, &m.file, true));
            }
        }
    }
    let failed: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || loop {
        let Some(&(i, f, manifest)) = syncs.get(next.fetch_add(1, Relaxed)) else {
            return;
        };
        let r = if manifest { f.sync_data() } else { f.sync_all() };
        if let Err(e) = r {
            let what = if manifest { "manifest" } else { "sync" };
            let name = &plan.files[jobs[i].file as usize].name;
            failed.lock().unwrap().push((i, format!("{name}: {what}: {e}")));
        }
    };
    std::thread::scope(|sc| {
        for _ in 1..syncs.len().min(COMMIT_SYNCS) {
            sc.spawn(work);
        }
        work();
    });
    for (i, e) in failed.into_inner().unwrap() {
        out[i].2.get_or_insert(e);
    }

    // renames, then each directory synced once
    let mut dirs: Vec<(&Arc<OwnedFd>, Vec<usize>)> = Vec::new();
    for (i, (j, (c, staged, err))) in jobs.iter().zip(out.iter_mut()).enumerate() {
        if err.is_none() && !j.read_only && !partial {
            let leaf = &plan.files[j.file as usize].leaf;
            if let Err(e) = dest::rename_part(&j.dir, leaf, overwrite) {
                *err = Some(format!("{}: {e}", c.name));
            }
        }
        if let Some(m) = staged.take() {
            let r = if err.is_none() {
                m.rename(&j.dir).map_err(|e| format!("{}: manifest: {e}", c.name))
            } else {
                m.discard(&j.dir);
                Ok(())
            };
            if let Err(e) = r {
                *err = Some(e);
            }
        }
        if err.is_none() && !partial {
            match dirs.iter_mut().find(|(d, _)| Arc::ptr_eq(d, &j.dir)) {
                Some((_, v)) => v.push(i),
                None => dirs.push((&j.dir, vec![i])),
            }
        }
    }
    for (d, members) in dirs {
        if let Err(e) = dest::sync_dir(d) {
            for i in members {
                out[i].2 = Some(format!("{}: {e}", out[i].0.name));
            }
        }
    }
    out.into_iter()
        .map(|(c, _, err)| match err {
            Some(e) => Err(e),
            None => Ok(c),
        })
        .collect()
}

struct RecvLoop<'a> {
    aead_key: Option<[u8; 32]>,
    fb: FeedbackOut<'a>,
    link: &'a Link,
    sock: &'a UdpSocket,
    plan: &'a Plan,
    progress: &'a Progress,
    stop: &'a AtomicBool,
    r: &'a mut Receiver,
    store: &'a Mutex<Vec<Vec<Option<ChunkHash>>>>,
    sess_rx: ChanRx<Session>,
    job_tx: &'a ChanTx<Job>,
    hres_rx: &'a ChanRx<(u32, u32, Result<ChunkHash, String>)>,
    fres_rx: &'a ChanRx<Result<Committed, String>>,
    stages: &'a mut Stages,
    /// The verifier's counts of bytes written with `O_DIRECT` and read back (final once every file is
    /// committed: each file's chunks are written and read back before its commit).
    written_direct: &'a AtomicU64,
    read_back: &'a AtomicU64,
    cap: Option<CapWatch<'a>>,
}

const BATCH: usize = 64;
/// How long a batch held for a control message its datagrams overtook waits for one at a time.
const HOLD_POLL: Duration = Duration::from_millis(2);
/// Longest a batch is held; then its datagrams are handled (and those still early dropped, counted and
/// sent again).
const HOLD_MAX: Duration = Duration::from_millis(500);
/// Longest all holds of a transfer take together, so that forged headers cannot stall it.
const HOLD_TOTAL: Duration = Duration::from_secs(2);
/// Receive buffer per message: a GRO super-datagram can exceed 64 KiB (8 jumbo segments).
const BUF: usize = 128 << 10;

/// One accepted payload: `len` bytes at `at` in receive buffer `buf`, for `file` at `offset`.
#[derive(Debug, Clone, Copy)]
struct Write {
    file: u32,
    offset: u64,
    buf: usize,
    at: usize,
    len: usize,
}

/// Writes the payloads of a batch, each run of contiguous payloads of one file with one `pwritev`
/// (gathered from the receive buffers, headers skipped). The error names the file index.
fn write_runs(
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

fn abort(link: &Link, reason: String) -> XferError {
    abort_as(link, reason, AbortKind::Failed)
}

/// Ends the transfer for a `.part` that could not be opened: busy when another transfer holds it.
fn part_error(link: &Link, name: &str, e: std::io::Error) -> XferError {
    let kind = if e.kind() == std::io::ErrorKind::WouldBlock {
        AbortKind::Busy
    } else {
        AbortKind::Failed
    };
    abort_as(link, format!("{name}: {e}"), kind)
}

/// Ends the transfer, telling the sender whether rerunning can help: a refusal (exit 3 at both ends)
/// or a busy file (exit 4), or a failure (exit 1).
fn abort_as(link: &Link, reason: String, kind: AbortKind) -> XferError {
    link.send(
        ControlMsg::Abort {
            reason: reason.clone(),
            kind,
        }
        .to_line(),
    );
    match kind {
        AbortKind::Refused => XferError::Refused(reason),
        AbortKind::Busy => XferError::Busy(reason),
        AbortKind::Failed => failed!("{reason}"),
    }
}

/// Where the receiver's feedback datagrams go: from the data socket to the address the data comes from
/// (known from the first accepted datagram; the sender's socket is connected to the data port).
struct FeedbackOut<'a> {
    sock: &'a UdpSocket,
    peer: Option<SocketAddr>,
    key: [u8; 32],
    transfer_id: u32,
    buf: Vec<u8>,
}

/// Sends the receiver's control messages. Feedback goes as a datagram (one lost costs nothing: the next
/// repeats its loss ranges), and on the control connection too until the sender has confirmed that
/// datagrams reach it, or when it does not fit a datagram; everything else goes on the control connection.
fn send_control(r: &mut Receiver, link: &Link, fb: &mut FeedbackOut<'_>) {
    while let Some(m) = r.poll_control() {
        if let (ControlMsg::Feedback(f), Some(peer)) = (&m, fb.peer) {
            if emit_feedback_datagram(Some(&fb.key), fb.transfer_id, f, &mut fb.buf).is_some() {
                // a failed send is a lost feedback; the next one repeats it
                let _ = fb.sock.send_to(&fb.buf, peer);
                if r.feedback_datagrams_confirmed() {
                    continue;
                }
            }
        }
        link.send(m.to_line());
    }
}

fn recv_loop(d: RecvLoop<'_>) -> Result<RecvOutcome, XferError> {
    let RecvLoop {
        aead_key,
        mut fb,
        link,
        sock,
        plan,
        progress,
        stop,
        r,
        store,
        sess_rx,
        job_tx,
        hres_rx,
        fres_rx,
        stages,
        written_direct,
        read_back,
        mut cap,
    } = d;
    let cs = plan.options.chunk_size;
    let nfiles = plan.files.len();
    let mut files: Vec<Option<OpenFile>> = (0..nfiles).map(|_| None).collect();
    let mut dirs = Dirs::default();
    let mut rx = BatchReceiver::new(BATCH).with_source(true);
    let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; BUF]).collect();
    let mut metas = [RecvMeta::default(); BATCH];
    // as the kernel reports it (twice what was set); SO_RCVBUFFORCE was tried when the socket was made
    let rcvbuf = vlbiflow_udp::socket::recv_buffer_size(sock).unwrap_or(1 << 20);
    let mut last_batch = Instant::now();
    // a batch held for control messages its datagrams overtook: (its messages, held since)
    let mut held: Option<(usize, Instant)> = None;
    let mut held_total = Duration::ZERO;
    let mut moved = 0u64;
    let mut aead_bad = 0u64;
    let mut committed: Vec<Option<Committed>> = vec![None; nfiles];
    let mut n_committed = 0usize;
    let mut transfer_done = false;
    // the sender's `done` has come (see `drain_until_done`)
    let mut saw_done = false;
    let mut started: Option<Instant> = None;
    let mut bytes_resumed = 0u64;
    let mut bytes_verified = 0u64;
    let mut files_done = 0u64;
    let mut tracker =
        crate::progress::FileTracker::new(plan.files.iter().map(|f| (f.name.clone(), f.size)), progress);
    let mut ctl_queue: VecDeque<ControlMsg> = VecDeque::new();
    let mut writes: Vec<Write> = Vec::with_capacity(BATCH * 16);
    let mut sess_open = true;
    let chunk_len = |f: usize, c: u32| cs.min(plan.files[f].size - c as u64 * cs);

    loop {
        if stop.load(Relaxed) {
            return Err(abort(
                link,
                "the receiver is shutting down; run the same command again to resume".into(),
            ));
        }
        if let Some(c) = cap.as_mut().and_then(CapWatch::changed) {
            r.set_rate_cap(c);
        }
        // resume reports go out in order, before the sender adds the files they concern
        while sess_open {
            match sess_rx.try_recv() {
                Ok(m) => link.send_session(&m),
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => sess_open = false,
            }
        }
        // control from the sender; a batch held for a control message it overtook waits a little for it
        let first = match held {
            Some(_) => link.rx.recv_timeout(HOLD_POLL).ok(),
            None => None,
        };
        for m in first
            .into_iter()
            .chain(std::iter::from_fn(|| link.rx.try_recv().ok()))
        {
            match m {
                Inbound::Ctl(c) => {
                    saw_done |= matches!(c, ControlMsg::Done { .. });
                    ctl_queue.push_back(c);
                }
                Inbound::Sess(s) => {
                    return Err(abort(
                        link,
                        format!("unexpected session message from the sender: {}", s.to_line()),
                    ))
                }
                Inbound::Closed(why) if transfer_done => {
                    return Err(failed!("{why} before the commit report was sent"));
                }
                Inbound::Closed(why) => {
                    return Err(failed!("{why}; the .part files are kept for a resume"));
                }
                Inbound::Refused(why) => {
                    return Err(abort(
                        link,
                        format!("{why}; the .part files are kept for a resume"),
                    ));
                }
            }
        }
        let now = Instant::now();
        while let Some(c) = ctl_queue.pop_front() {
            r.handle_control(now, c);
            // open files before any datagram of them is handled
            handle_events(
                r,
                plan,
                &mut files,
                store,
                job_tx,
                link,
                progress,
                stages,
                &mut Counters {
                    dirs: &mut dirs,
                    bytes_resumed: &mut bytes_resumed,
                    bytes_verified: &mut bytes_verified,
                    files_done: &mut files_done,
                    tracker: &mut tracker,
                    transfer_done: &mut transfer_done,
                    chunk_len: &chunk_len,
                },
            )?;
        }
        // data: a new batch, or the one held
        let (n, nap) = match held {
            Some((n, _)) => (n, Duration::ZERO),
            None => {
                let timeout = r
                    .poll_timeout()
                    .map_or(Duration::from_millis(5), |t| {
                        t.saturating_duration_since(Instant::now())
                    })
                    .min(Duration::from_millis(2));
                let batch = rx
                    .recv(sock, bufs.iter_mut().map(|b| &mut b[..]), timeout)
                    .map_err(|e| abort(link, format!("data socket: {e}")))?;
                let n = batch.len();
                metas[..n].copy_from_slice(batch.messages());
                r.set_host_drops(rx.kernel_drops());
                // a small batch means the datagrams trickle in one by one (e.g. through a forwarder that
                // does not coalesce them): let some gather in the socket buffer rather than wake for each
                let now = Instant::now();
                let batch_bytes = metas[..n].iter().map(|m| m.len).sum();
                let nap = nap_for(batch_bytes, now.saturating_duration_since(last_batch), rcvbuf);
                last_batch = now;
                (n, nap)
            }
        };
        let now = Instant::now();
        let real_ns = vlbiflow_udp::realtime_ns();
        // datagrams that overtook `hello` or their file's announce would be dropped and sent again: the
        // batch waits for those control messages, within a budget (a forged header can ask the same)
        // (only while `hello` or an announce is still to come: then no datagram is read twice)
        let since = held.map_or(now, |h| h.1);
        let within = now.saturating_duration_since(since) < HOLD_MAX && held_total < HOLD_TOTAL;
        if within
            && r.files_announced().is_none_or(|a| a < nfiles)
            && metas[..n].iter().enumerate().any(|(i, m)| {
                let len = m.len.min(bufs[i].len());
                bufs[i][..len]
                    .chunks(m.segment_size().max(1))
                    .any(|d| r.awaits_control(d))
            })
        {
            held = Some((n, since));
            continue;
        }
        if held.take().is_some() {
            held_total += now.saturating_duration_since(since);
        }
        writes.clear();
        for (i, m) in metas[..n].iter().enumerate() {
            let seg = m.segment_size().max(1);
            let len = m.len.min(bufs[i].len());
            let arrived = m.arrival(real_ns, now);
            for (k, dgram) in bufs[i][..len].chunks_mut(seg).enumerate() {
                if let Some(key) = &aead_key {
                    if open_encrypted(key, dgram).is_err() {
                        aead_bad += 1;
                        continue;
                    }
                }
                if let Some(dl) = r.handle_datagram_at(now, arrived, dgram) {
                    started.get_or_insert(now);
                    if m.source.is_some() {
                        fb.peer = m.source;
                    }
                    let Some(of) = files[dl.file as usize].as_mut() else {
                        return Err(abort(
                            link,
                            format!("data for file {} before it was opened", dl.file),
                        ));
                    };
                    if of.read_only {
                        let f = &plan.files[dl.file as usize];
                        return Err(abort_as(
                            link,
                            format!(
                                "{} exists at the destination with different content; nothing is overwritten unless asked (--overwrite)",
                                f.name
                            ),
                            AbortKind::Refused,
                        ));
                    }
                    moved += dl.data.len() as u64;
                    let ci = (dl.offset / cs) as usize;
                    if of.writes[ci] == ChunkWrite::Open {
                        of.writes[ci] = match of.direct.as_ref().and_then(|_| stages.take()) {
                            Some(slot) => ChunkWrite::Staged(slot),
                            None => ChunkWrite::Buffered,
                        };
                    }
                    if let ChunkWrite::Staged(slot) = of.writes[ci] {
                        let at = (dl.offset - ci as u64 * cs) as usize;
                        let buf = stages.slots[slot as usize]
                            .as_mut()
                            .expect("staged chunk")
                            .bytes_mut();
                        // blocks divide chunks wherever chunks are staged, so a sender keeping to its
                        // blocks never gets here
                        let Some(dst) = buf.get_mut(at..at + dl.data.len()) else {
                            return Err(abort(
                                link,
                                format!(
                                    "{}: {} bytes at offset {} cross a chunk boundary",
                                    plan.files[dl.file as usize].name,
                                    dl.data.len(),
                                    dl.offset
                                ),
                            ));
                        };
                        dst.copy_from_slice(dl.data);
                        continue;
                    }
                    writes.push(Write {
                        file: dl.file,
                        offset: dl.offset,
                        buf: i,
                        at: k * seg + HEADER_LEN,
                        len: dl.data.len(),
                    });
                }
            }
        }
        // what arrived is written (or staged) before anything is reported about it; a receiver that dies
        // before a chunk is verified and on disk has that chunk sent again on resume
        if let Err((f, e)) = write_runs(&writes, &bufs, &files) {
            return Err(abort(
                link,
                format!("writing {}: {e}", plan.files[f as usize].name),
            ));
        }
        if !nap.is_zero() {
            std::thread::sleep(nap);
        }
        let now = Instant::now();
        if r.poll_timeout().is_some_and(|t| t <= now) {
            r.handle_timeout(now);
        }
        // verifier results
        while let Ok((file, chunk, h)) = hres_rx.try_recv() {
            match h {
                Ok(h) => {
                    if let Some(of) = files[file as usize].as_mut() {
                        of.hashes[chunk as usize] = Some(h);
                    }
                    r.chunk_hashed(file, chunk, h);
                }
                Err(e) => {
                    return Err(abort(link, format!("{}: {e}", plan.files[file as usize].name)));
                }
            }
        }
        handle_events(
            r,
            plan,
            &mut files,
            store,
            job_tx,
            link,
            progress,
            stages,
            &mut Counters {
                dirs: &mut dirs,
                bytes_resumed: &mut bytes_resumed,
                bytes_verified: &mut bytes_verified,
                files_done: &mut files_done,
                tracker: &mut tracker,
                transfer_done: &mut transfer_done,
                chunk_len: &chunk_len,
            },
        )?;
        send_control(r, link, &mut fb);
        // commits
        while let Ok(c) = fres_rx.try_recv() {
            match c {
                Ok(c) => {
                    let i = plan
                        .files
                        .iter()
                        .position(|f| f.name == c.name)
                        .expect("planned file");
                    committed[i] = Some(c);
                    n_committed += 1;
                }
                Err(e) => return Err(abort(link, e)),
            }
        }
        let mut st = r.stats();
        st.bad_tag += aead_bad;
        progress.bytes_moved.store(moved, Relaxed);
        progress.datagrams.store(st.delivered, Relaxed);
        progress.bad_tag.store(st.bad_tag, Relaxed);
        progress
            .malformed
            .store(st.malformed + st.wrong_transfer + st.unknown_file, Relaxed);
        progress.duplicates.store(st.duplicates, Relaxed);
        progress.lost.store(st.reported_lost, Relaxed);
        if transfer_done && n_committed == nfiles {
            let files: Vec<Committed> = committed.into_iter().map(|c| c.expect("committed")).collect();
            let (direct, back) = (written_direct.load(Relaxed), read_back.load(Relaxed));
            link.send_session(&Session::Committed {
                files: files.clone(),
                receiver: ReceiverReport::new(&st, direct, back),
            });
            let seconds = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
            if !saw_done {
                drain_until_done(link);
            }
            return Ok(RecvOutcome {
                committed: files,
                stats: st,
                bytes_resumed,
                bytes_written_direct: direct,
                bytes_read_back: back,
                seconds,
                realtime: false,
            });
        }
        if r.is_finished() && !transfer_done {
            return Err(failed!(
                "the transfer ended without completing; the .part files are kept for a resume"
            ));
        }
    }
}

/// How long a receiver that has committed waits for the sender's `done`.
const DONE_WAIT: Duration = Duration::from_secs(3);

/// The receiver commits once the sender has closed the list and it has verified every chunk itself
/// (protocol version 7), and the sender's `done`, sent when it learns of the last verification, is then
/// still on its way. Reads until it arrives or the sender closes (bounded by [`DONE_WAIT`]), so that the
/// connection is not closed with it unread: a TCP connection closed with data unread is reset, and the
/// reset could reach the sender before it has read the commit report.
fn drain_until_done(link: &Link) {
    let until = Instant::now() + DONE_WAIT;
    loop {
        match link.rx.recv_deadline(until) {
            Ok(Inbound::Ctl(ControlMsg::Done { .. }) | Inbound::Closed(_) | Inbound::Refused(_)) | Err(_) => {
                return
            }
            Ok(_) => {}
        }
    }
}

/// Destination directories by their components under the root, each open while a file in it is.
#[derive(Default)]
struct Dirs(std::collections::HashMap<Vec<String>, std::sync::Weak<OwnedFd>>);

impl Dirs {
    /// The directory of `fp`, made if needed: the one already open, or opened now.
    fn open(&mut self, fp: &FilePlan) -> std::io::Result<Arc<OwnedFd>> {
        if let Some(d) = self.0.get(&fp.dir).and_then(std::sync::Weak::upgrade) {
            return Ok(d);
        }
        let d = Arc::new(dest::open_dir(&fp.root, &fp.dir, true)?);
        self.0.insert(fp.dir.clone(), Arc::downgrade(&d));
        Ok(d)
    }
}

struct Counters<'a> {
    /// The destination directories open now, shared by the files in each (one descriptor per directory,
    /// not per file).
    dirs: &'a mut Dirs,
    tracker: &'a mut crate::progress::FileTracker,
    bytes_resumed: &'a mut u64,
    bytes_verified: &'a mut u64,
    files_done: &'a mut u64,
    transfer_done: &'a mut bool,
    chunk_len: &'a dyn Fn(usize, u32) -> u64,
}

#[allow(clippy::too_many_arguments)]
fn handle_events(
    r: &mut Receiver,
    plan: &Plan,
    files: &mut [Option<OpenFile>],
    store: &Mutex<Vec<Vec<Option<ChunkHash>>>>,
    job_tx: &ChanTx<Job>,
    link: &Link,
    progress: &Progress,
    stages: &mut Stages,
    c: &mut Counters<'_>,
) -> Result<(), XferError> {
    let cs = plan.options.chunk_size;
    while let Some(e) = r.poll_event() {
        match e {
            Event::FileAnnounced {
                file,
                name,
                size,
                chunk_size,
            } => {
                let Some(fp) = plan.files.get(file as usize) else {
                    return Err(abort(link, format!("file {file} ({name:?}) was not in the request")));
                };
                if fp.name != name || fp.size != size || chunk_size != cs {
                    return Err(abort(
                        link,
                        format!(
                            "announce of file {file} ({name:?}, {size} bytes, chunks of {chunk_size}) does not match the request ({:?}, {} bytes, chunks of {cs})",
                            fp.name, fp.size
                        ),
                    ));
                }
                progress.set_phase("receiving");
                let dir = c
                    .dirs
                    .open(fp)
                    .map_err(|e| abort(link, format!("destination of {name}: {e}")))?;
                let (f, read_only) = match fp.resume {
                    Resume::Complete(_) => (
                        dest::open_final_ro(&dir, &fp.leaf).map_err(|e| abort(link, format!("{name}: {e}")))?,
                        true,
                    ),
                    _ => {
                        let f = dest::open_part(&dir, &fp.leaf).map_err(|e| part_error(link, &name, e))?;
                        // not pre-sized: after an interruption its length tells how far it got
                        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                        if len > size {
                            f.set_len(size).map_err(|e| abort(link, format!("{name}: truncating the .part: {e}")))?;
                        }
                        (f, false)
                    }
                };
                let n = size.div_ceil(cs) as usize;
                let direct = if read_only || (stages.slots.is_empty() && !plan.options.verify_written) {
                    None
                } else {
                    dest::open_part_direct(&dir, &fp.leaf, &f).map(Arc::new)
                };
                let mut of = OpenFile {
                    file: Arc::new(f),
                    direct,
                    writes: vec![ChunkWrite::Open; n],
                    dir,
                    read_only,
                    hashes: vec![None; n],
                    declared: vec![false; n],
                };
                let have = store.lock().expect("resume hashes")[file as usize].clone();
                for (ci, h) in have.iter().enumerate() {
                    let Some(h) = h else {
                        return Err(abort(link, format!("{name}: chunk {ci} was announced before it was re-verified here")));
                    };
                    of.hashes[ci] = Some(*h);
                    of.declared[ci] = r.declare_verified(file, ci as u32, *h);
                }
                files[file as usize] = Some(of);
            }
            Event::ChunkComplete {
                file,
                chunk,
                offset,
                len,
            } => {
                let of = files[file as usize].as_mut().expect("open file");
                let size = plan.files[file as usize].size;
                let _ = job_tx.send(match of.take_staged(chunk, stages) {
                    Some((direct, buf)) => Job::Write {
                        file,
                        chunk,
                        direct,
                        f: of.file.clone(),
                        offset,
                        len,
                        buf,
                        hash_size: Some(size),
                    },
                    None => Job::Hash {
                        file,
                        chunk,
                        f: of.file.clone(),
                        size,
                        offset,
                        len,
                    },
                });
            }
            Event::ChunkVerified { file, chunk } => {
                if let Some(of) = files[file as usize].as_mut() {
                    if let Some(slot) = of.hashes.get_mut(chunk as usize) {
                        if slot.is_none() {
                            *slot = r.verified_hash(file, chunk);
                        }
                    }
                }
                let l = (c.chunk_len)(file as usize, chunk);
                if let Some(of) = files[file as usize].as_mut().filter(|of| !of.read_only) {
                    // a staged chunk (verified from its block digests) goes to disk now, in one piece
                    let _ = job_tx.send(match of.take_staged(chunk, stages) {
                        Some((direct, buf)) => Job::Write {
                            file,
                            chunk,
                            direct,
                            f: of.file.clone(),
                            offset: chunk as u64 * cs,
                            len: l,
                            buf,
                            hash_size: None,
                        },
                        None => Job::Writeback {
                            f: of.file.clone(),
                            offset: chunk as u64 * cs,
                            len: l,
                        },
                    });
                    // read back after the write, before the commit (all on the verifier, in order); a
                    // chunk found on disk when resuming was just read from it
                    let want = of.hashes.get(chunk as usize).copied().flatten();
                    if let (true, false, Some(want)) = (
                        plan.options.verify_written,
                        of.declared.get(chunk as usize) == Some(&true),
                        want,
                    ) {
                        let (f, direct) = match &of.direct {
                            Some(d) => (d.clone(), true),
                            None => (of.file.clone(), false),
                        };
                        let _ = job_tx.send(Job::ReadBack {
                            file,
                            chunk,
                            f,
                            direct,
                            size: plan.files[file as usize].size,
                            offset: chunk as u64 * cs,
                            len: l,
                            want,
                        });
                    }
                }
                *c.bytes_verified += l;
                progress.bytes_verified.store(*c.bytes_verified, Relaxed);
                c.tracker.verified(file, l, progress);
                let resumed = files[file as usize]
                    .as_ref()
                    .is_some_and(|of| of.declared.get(chunk as usize) == Some(&true));
                if resumed {
                    *c.bytes_resumed += l;
                    progress.bytes_resumed.store(*c.bytes_resumed, Relaxed);
                }
            }
            Event::ChunkMismatch { file, chunk } => {
                let of = files[file as usize].as_mut().expect("open file");
                of.hashes[chunk as usize] = None;
                of.declared[chunk as usize] = false;
                // sent again in whole: a staged chunk stays staged (the resent blocks overwrite every byte
                // of its buffer, and nothing of it reached the disk); another may be staged this time
                if let Some(w) = of.writes.get_mut(chunk as usize).filter(|w| **w == ChunkWrite::Buffered) {
                    *w = ChunkWrite::Open;
                }
                if of.read_only {
                    return Err(abort_as(
                        link,
                        format!(
                            "{} exists at the destination with different content (chunk {chunk} differs); nothing is overwritten unless asked (--overwrite)",
                            plan.files[file as usize].name
                        ),
                        AbortKind::Refused,
                    ));
                }
            }
            Event::FileDone { file } => {
                *c.files_done += 1;
                progress.files_done.store(*c.files_done, Relaxed);
                c.tracker.done(file, progress);
                // a file of no bytes has no chunks and was never opened: make it now
                if files[file as usize].is_none() {
                    let fp = &plan.files[file as usize];
                    let dir = c
                        .dirs
                        .open(fp)
                        .map_err(|e| abort(link, format!("destination of {}: {e}", fp.name)))?;
                    let f = dest::open_part(&dir, &fp.leaf).map_err(|e| part_error(link, &fp.name, e))?;
                    f.set_len(0).map_err(|e| abort(link, format!("{}: {e}", fp.name)))?;
                    files[file as usize] = Some(OpenFile {
                        file: Arc::new(f),
                        direct: None,
                        writes: Vec::new(),
                        dir,
                        read_only: false,
                        hashes: Vec::new(),
                        declared: Vec::new(),
                    });
                }
                // closed here: the commit holds what it needs (the locked `.part` and its directory),
                // so a transfer of many files keeps open only those still arriving or being committed
                let of = files[file as usize].take().expect("open file");
                let hashes: Option<Vec<ChunkHash>> = of.hashes.iter().copied().collect();
                let Some(hashes) = hashes else {
                    return Err(abort(link, format!("{}: done without every chunk hash", plan.files[file as usize].name)));
                };
                let _ = job_tx.send(Job::Finalize(Finalize {
                    file,
                    f: of.file,
                    dir: of.dir,
                    read_only: of.read_only,
                    hashes,
                    resumed: of.declared.iter().filter(|d| **d).count() as u64,
                }));
            }
            Event::TransferDone => {
                *c.transfer_done = true;
                progress.set_phase("syncing and committing");
            }
            Event::PeerDead => {
                return Err(failed!(
                    "nothing heard from the sender for the dead-peer timeout; the .part files are kept for a resume"
                ))
            }
            Event::Aborted { reason } => {
                while let Some(m) = r.poll_control() {
                    link.send(m.to_line());
                }
                return Err(failed!("transfer aborted: {reason}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::chunk_hash;

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
        let t = std::thread::spawn(move || verifier(cs, job_rx, io));
        let job = |chunk: u32, want: ChunkHash| Job::ReadBack {
            file: 0,
            chunk,
            f: f.clone(),
            direct: on_disk,
            size,
            offset: chunk as u64 * cs,
            len: cs.min(size - chunk as u64 * cs),
            want,
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
        let (_, chunk, r) = &reports[0];
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

    /// Three files committed as one batch, the second of which cannot take its name (a file of that
    /// name appeared after the plan, and overwriting was not asked): the other two are committed with
    /// their manifests, the second keeps its `.part` and leaves no manifest behind, and each result
    /// comes in order. Then a `--follow` round: synced, still `.part`, no manifest.
    #[test]
    fn a_batch_commits_each_file_it_can_and_reports_each_in_order() {
        let d = tempfile::tempdir().unwrap();
        let cs: u64 = 64 << 10;
        let sizes = [5000u64, cs + 17, 3 * cs];
        let specs: Vec<FileSpec> = ["a", "b", "c"]
            .iter()
            .zip(sizes)
            .map(|(n, size)| FileSpec {
                name: n.to_string(),
                size,
            })
            .collect();
        let mut options = Options {
            chunk_size: cs,
            block_size: 8192,
            overwrite: false,
            encrypt: false,
            rate_bps: None,
            partial: false,
            verify_written: false,
        };
        let pl = plan(d.path(), &[], &specs, &options).unwrap();
        let dir = Arc::new(dest::open_dir(d.path(), &[], true).unwrap());
        let content = |i: usize| -> Vec<u8> { (0..sizes[i]).map(|x| (x * 7 + i as u64) as u8).collect() };
        let js: Vec<Finalize> = (0..3)
            .map(|i| {
                let data = content(i);
                let part = dest::open_part(&dir, &specs[i].name).unwrap();
                part.write_all_at(&data, 0).unwrap();
                let hashes = data
                    .chunks(cs as usize)
                    .enumerate()
                    .map(|(c, piece)| chunk_hash(sizes[i], cs, c as u64, piece))
                    .collect();
                Finalize {
                    file: i as u32,
                    f: Arc::new(part),
                    dir: dir.clone(),
                    read_only: false,
                    hashes,
                    resumed: 0,
                }
            })
            .collect();
        std::fs::write(d.path().join("b"), b"already here").unwrap();
        let r = finalize_batch(&pl, js, false, "test");
        assert_eq!(r.len(), 3);
        for i in [0, 2] {
            let c = r[i].as_ref().unwrap();
            assert_eq!(c.name, specs[i].name);
            assert_eq!(c.blake3, blake3::hash(&content(i)).to_hex().to_string());
            assert_eq!(std::fs::read(d.path().join(&c.name)).unwrap(), content(i));
            let m: Manifest = serde_json::from_slice(
                &std::fs::read(d.path().join(format!("{}{}", c.name, dest::MANIFEST_SUFFIX))).unwrap(),
            )
            .unwrap();
            assert_eq!(m.blake3, c.blake3);
            assert_eq!(m.chunks.len() as u64, sizes[i].div_ceil(cs));
        }
        let e = r[1].as_ref().unwrap_err();
        assert!(e.starts_with("b: renaming b.part to b"), "{e}");
        assert_eq!(std::fs::read(d.path().join("b")).unwrap(), b"already here");
        assert_eq!(std::fs::read(d.path().join("b.part")).unwrap(), content(1));
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["a", "a.blake3.json", "b", "b.part", "c", "c.blake3.json"],
            "no manifest of b, no temporary file"
        );

        // a round of `push --follow`: synced and still `.part`, no manifest
        let e = tempfile::tempdir().unwrap();
        options.partial = true;
        let pl = plan(e.path(), &[], &specs, &options).unwrap();
        let d2 = Arc::new(dest::open_dir(e.path(), &[], true).unwrap());
        let part = dest::open_part(&d2, "a").unwrap();
        part.write_all_at(&content(0), 0).unwrap();
        let j = Finalize {
            file: 0,
            f: Arc::new(part),
            dir: d2,
            read_only: false,
            hashes: vec![chunk_hash(sizes[0], cs, 0, &content(0))],
            resumed: 0,
        };
        let r = finalize_batch(&pl, vec![j], false, "test");
        assert!(r[0].is_ok(), "{r:?}");
        let left: Vec<String> = std::fs::read_dir(e.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["a.part"]);
    }

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

    #[test]
    fn the_flusher_syncs_each_file_with_new_data_once_per_round_and_stops_with_its_channel() {
        let d = tempfile::tempdir().unwrap();
        let a = Arc::new(File::create(d.path().join("a")).unwrap());
        let b = Arc::new(File::create(d.path().join("b")).unwrap());
        let (tx, rx) = unbounded();
        // a round longer than the test: the channel closes before it ends, and the thread stops without
        // flushing (each file's commit syncs it anyway)
        let t = std::thread::spawn(move || flusher(rx, Duration::from_secs(3600)));
        for f in [&a, &b, &a, &a] {
            tx.send(f.clone()).unwrap();
        }
        drop(tx);
        assert_eq!(t.join().unwrap(), 0, "no round ended");
        // rounds of no length: each file flushed as its data is announced
        let (tx, rx) = unbounded();
        let t = std::thread::spawn(move || flusher(rx, Duration::ZERO));
        for f in [&a, &b, &a] {
            tx.send(f.clone()).unwrap();
        }
        drop(tx);
        assert_eq!(t.join().unwrap(), 3);
    }
}
