//! The receiving data thread: it receives datagrams in batches (`recvmmsg`, GRO), hands them to the
//! protocol's [`Receiver`], gathers what it accepts into staged chunks or writes it through the page
//! cache, queues work for the verifier, sends the protocol's control messages and feedback, and reports
//! the commit once every file is committed.

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver as ChanRx, Sender as ChanTx};
use vlbiflow_udp::{BatchReceiver, RecvMeta};
use vlbiflow_xfer_proto::timing::nap_for;
use vlbiflow_xfer_proto::wire::{emit_feedback_datagram, open_encrypted, HEADER_LEN, MAX_FEEDBACK_DATAGRAM};
use vlbiflow_xfer_proto::{AbortKind, ControlMsg, Event, Receiver, ReceiverStats};

use super::commit::Finalize;
use super::outcome::RecvOutcome;
use super::plan::{Plan, Resume};
use super::resume::ResumeStore;
use super::stage::{write_runs, ChunkWrite, Dirs, OpenFile, Stages, Write};
use super::verify::{ChunkReport, HashChunk, Job, ReadBack, StagedWrite};
use crate::dest;
use crate::error::{failed, XferError};
use crate::link::{Inbound, Link};
use crate::progress::{FileTracker, Progress};
use crate::session::{Committed, ReceiverReport, Session};
use crate::share::CapWatch;

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
/// How long a receiver that has committed waits for the sender's `done`.
const DONE_WAIT: Duration = Duration::from_secs(3);

/// The channels between the data thread and the other threads of a receive.
pub(super) struct DataChannels {
    /// Resume reports (`have`) from the resume thread, sent on to the sender in order.
    pub sess: ChanRx<Session>,
    /// Work for the verifier, in order.
    pub jobs: ChanTx<Job>,
    /// The verifier's hashes of chunks as written, and its errors.
    pub reports: ChanRx<ChunkReport>,
    /// The committing thread's results, one per file.
    pub commits: ChanRx<Result<Committed, String>>,
}

/// What the data thread is started with.
pub(super) struct DataSetup<'a> {
    pub link: &'a Link,
    pub sock: &'a UdpSocket,
    pub plan: &'a Plan,
    pub progress: &'a Progress,
    pub stop: &'a AtomicBool,
    pub r: Receiver,
    /// The datagrams' AEAD key, when the transfer is encrypted (opened before the protocol sees them).
    pub aead_key: Option<[u8; 32]>,
    pub feedback_key: [u8; 32],
    pub transfer_id: u32,
    pub cap: Option<CapWatch<'a>>,
    pub ch: DataChannels,
    pub store: ResumeStore,
    pub stages: Stages,
    /// The verifier's counts of bytes written with `O_DIRECT` and read back (final once every file is
    /// committed: each file's chunks are written and read back before its commit).
    pub written_direct: Arc<AtomicU64>,
    pub read_back: Arc<AtomicU64>,
}

/// The receive buffers and what the last batch brought.
struct Batch {
    rx: BatchReceiver,
    bufs: Vec<Vec<u8>>,
    metas: [RecvMeta; BATCH],
    /// As the kernel reports it (twice what was set); SO_RCVBUFFORCE was tried when the socket was made.
    rcvbuf: usize,
    last: Instant,
    /// A batch held for control messages its datagrams overtook: (its messages, held since).
    held: Option<(usize, Instant)>,
    held_total: Duration,
    writes: Vec<Write>,
}

/// A batch to handle: its messages, the nap after it, and when it was taken.
struct Arrived {
    n: usize,
    nap: Duration,
    now: Instant,
    real_ns: u64,
}

/// What the data thread counts.
struct Tally {
    moved: u64,
    aead_bad: u64,
    committed: Vec<Option<Committed>>,
    n_committed: usize,
    transfer_done: bool,
    /// The sender's `done` has come (see [`drain_until_done`]).
    saw_done: bool,
    started: Option<Instant>,
    bytes_resumed: u64,
    bytes_verified: u64,
    files_done: u64,
    tracker: FileTracker,
}

/// The receiving data thread of one transfer.
pub(super) struct DataThread<'a> {
    link: &'a Link,
    sock: &'a UdpSocket,
    plan: &'a Plan,
    progress: &'a Progress,
    stop: &'a AtomicBool,
    r: Receiver,
    aead_key: Option<[u8; 32]>,
    fb: FeedbackOut<'a>,
    cap: Option<CapWatch<'a>>,
    ch: DataChannels,
    sess_open: bool,
    store: ResumeStore,
    files: Vec<Option<OpenFile>>,
    /// The destination directories open now, shared by the files in each (one descriptor per directory,
    /// not per file).
    dirs: Dirs,
    stages: Stages,
    batch: Batch,
    tally: Tally,
    ctl_queue: VecDeque<ControlMsg>,
    written_direct: Arc<AtomicU64>,
    read_back: Arc<AtomicU64>,
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

impl<'a> DataThread<'a> {
    pub(super) fn new(s: DataSetup<'a>) -> DataThread<'a> {
        let nfiles = s.plan.files.len();
        DataThread {
            link: s.link,
            sock: s.sock,
            plan: s.plan,
            progress: s.progress,
            stop: s.stop,
            r: s.r,
            aead_key: s.aead_key,
            fb: FeedbackOut {
                sock: s.sock,
                peer: None,
                key: s.feedback_key,
                transfer_id: s.transfer_id,
                buf: Vec::with_capacity(MAX_FEEDBACK_DATAGRAM),
            },
            cap: s.cap,
            ch: s.ch,
            sess_open: true,
            store: s.store,
            files: (0..nfiles).map(|_| None).collect(),
            dirs: Dirs::default(),
            stages: s.stages,
            batch: Batch {
                rx: BatchReceiver::new(BATCH).with_source(true),
                bufs: (0..BATCH).map(|_| vec![0u8; BUF]).collect(),
                metas: [RecvMeta::default(); BATCH],
                rcvbuf: vlbiflow_udp::socket::recv_buffer_size(s.sock).unwrap_or(1 << 20),
                last: Instant::now(),
                held: None,
                held_total: Duration::ZERO,
                writes: Vec::with_capacity(BATCH * 16),
            },
            tally: Tally {
                moved: 0,
                aead_bad: 0,
                committed: vec![None; nfiles],
                n_committed: 0,
                transfer_done: false,
                saw_done: false,
                started: None,
                bytes_resumed: 0,
                bytes_verified: 0,
                files_done: 0,
                tracker: FileTracker::new(s.plan.files.iter().map(|f| (f.name.clone(), f.size)), s.progress),
            },
            ctl_queue: VecDeque::new(),
            written_direct: s.written_direct,
            read_back: s.read_back,
        }
    }

    /// Receives until the sender is done and every file is committed, or until the transfer fails.
    pub(super) fn run(mut self) -> Result<RecvOutcome, XferError> {
        let nfiles = self.plan.files.len();
        loop {
            if self.stop.load(Relaxed) {
                return Err(abort(
                    self.link,
                    "the receiver is shutting down; run the same command again to resume".into(),
                ));
            }
            if let Some(c) = self.cap.as_mut().and_then(CapWatch::changed) {
                self.r.set_rate_cap(c);
            }
            self.forward_resume_reports();
            self.take_control()?;
            // data: a new batch, or the one held
            let Some(b) = self.next_batch()? else {
                continue;
            };
            self.deliver(&b)?;
            // what arrived is written (or staged) before anything is reported about it; a receiver that
            // dies before a chunk is verified and on disk has that chunk sent again on resume
            if let Err((f, e)) = write_runs(&self.batch.writes, &self.batch.bufs, &self.files) {
                return Err(abort(
                    self.link,
                    format!("writing {}: {e}", self.plan.files[f as usize].name),
                ));
            }
            if !b.nap.is_zero() {
                std::thread::sleep(b.nap);
            }
            let now = Instant::now();
            if self.r.poll_timeout().is_some_and(|t| t <= now) {
                self.r.handle_timeout(now);
            }
            self.take_reports()?;
            self.handle_events()?;
            send_control(&mut self.r, self.link, &mut self.fb);
            self.take_commits()?;
            let st = self.publish_progress();
            if self.tally.transfer_done && self.tally.n_committed == nfiles {
                return Ok(self.finish(st));
            }
            if self.r.is_finished() && !self.tally.transfer_done {
                return Err(failed!(
                    "the transfer ended without completing; the .part files are kept for a resume"
                ));
            }
        }
    }

    /// Resume reports go out in order, before the sender adds the files they concern.
    fn forward_resume_reports(&mut self) {
        while self.sess_open {
            match self.ch.sess.try_recv() {
                Ok(m) => self.link.send_session(&m),
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => self.sess_open = false,
            }
        }
    }

    /// Control from the sender; a batch held for a control message it overtook waits a little for it.
    fn take_control(&mut self) -> Result<(), XferError> {
        let link = self.link;
        let first = match self.batch.held {
            Some(_) => link.rx.recv_timeout(HOLD_POLL).ok(),
            None => None,
        };
        for m in first
            .into_iter()
            .chain(std::iter::from_fn(|| link.rx.try_recv().ok()))
        {
            match m {
                Inbound::Ctl(c) => {
                    self.tally.saw_done |= matches!(c, ControlMsg::Done { .. });
                    self.ctl_queue.push_back(c);
                }
                Inbound::Sess(s) => {
                    return Err(abort(
                        link,
                        format!("unexpected session message from the sender: {}", s.to_line()),
                    ))
                }
                Inbound::Closed(why) if self.tally.transfer_done => {
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
        while let Some(c) = self.ctl_queue.pop_front() {
            self.r.handle_control(now, c);
            // open files before any datagram of them is handled
            self.handle_events()?;
        }
        Ok(())
    }

    /// A new batch from the socket (or the one held), with the nap to take after it.
    fn receive(&mut self) -> Result<(usize, Duration), XferError> {
        let timeout = self
            .r
            .poll_timeout()
            .map_or(Duration::from_millis(5), |t| {
                t.saturating_duration_since(Instant::now())
            })
            .min(Duration::from_millis(2));
        let b = &mut self.batch;
        let batch =
            b.rx.recv(self.sock, b.bufs.iter_mut().map(|b| &mut b[..]), timeout)
                .map_err(|e| abort(self.link, format!("data socket: {e}")))?;
        let n = batch.len();
        b.metas[..n].copy_from_slice(batch.messages());
        self.r.set_host_drops(b.rx.kernel_drops());
        // a small batch means the datagrams trickle in one by one (e.g. through a forwarder that does not
        // coalesce them): let some gather in the socket buffer rather than wake for each
        let now = Instant::now();
        let batch_bytes = b.metas[..n].iter().map(|m| m.len).sum();
        let nap = nap_for(batch_bytes, now.saturating_duration_since(b.last), b.rcvbuf);
        b.last = now;
        Ok((n, nap))
    }

    /// The batch to handle now, or `None` when it is held for control messages its datagrams overtook.
    fn next_batch(&mut self) -> Result<Option<Arrived>, XferError> {
        let (n, nap) = match self.batch.held {
            Some((n, _)) => (n, Duration::ZERO),
            None => self.receive()?,
        };
        let now = Instant::now();
        let real_ns = vlbiflow_udp::realtime_ns();
        // datagrams that overtook `hello` or their file's announce would be dropped and sent again: the
        // batch waits for those control messages, within a budget (a forged header can ask the same)
        // (only while `hello` or an announce is still to come: then no datagram is read twice)
        let b = &mut self.batch;
        let since = b.held.map_or(now, |h| h.1);
        let within = now.saturating_duration_since(since) < HOLD_MAX && b.held_total < HOLD_TOTAL;
        let r = &self.r;
        if within
            && r.files_announced().is_none_or(|a| a < self.plan.files.len())
            && b.metas[..n].iter().enumerate().any(|(i, m)| {
                let len = m.len.min(b.bufs[i].len());
                b.bufs[i][..len]
                    .chunks(m.segment_size().max(1))
                    .any(|d| r.awaits_control(d))
            })
        {
            b.held = Some((n, since));
            return Ok(None);
        }
        if b.held.take().is_some() {
            b.held_total += now.saturating_duration_since(since);
        }
        Ok(Some(Arrived { n, nap, now, real_ns }))
    }

    /// Hands the batch's datagrams to the protocol; what it accepts is staged, or queued in
    /// `batch.writes` to be written through the page cache.
    fn deliver(&mut self, a: &Arrived) -> Result<(), XferError> {
        let Self {
            link,
            plan,
            r,
            aead_key,
            fb,
            files,
            stages,
            batch,
            tally,
            ..
        } = self;
        let cs = plan.options.chunk_size;
        batch.writes.clear();
        for (i, m) in batch.metas[..a.n].iter().enumerate() {
            let seg = m.segment_size().max(1);
            let len = m.len.min(batch.bufs[i].len());
            let arrived = m.arrival(a.real_ns, a.now);
            for (k, dgram) in batch.bufs[i][..len].chunks_mut(seg).enumerate() {
                if let Some(key) = aead_key {
                    if open_encrypted(key, dgram).is_err() {
                        tally.aead_bad += 1;
                        continue;
                    }
                }
                let Some(dl) = r.handle_datagram_at(a.now, arrived, dgram) else {
                    continue;
                };
                tally.started.get_or_insert(a.now);
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
                tally.moved += dl.data.len() as u64;
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
                    // blocks divide chunks wherever chunks are staged, so a sender keeping to its blocks
                    // never gets here
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
                batch.writes.push(Write {
                    file: dl.file,
                    offset: dl.offset,
                    buf: i,
                    at: k * seg + HEADER_LEN,
                    len: dl.data.len(),
                });
            }
        }
        Ok(())
    }

    /// The verifier's hashes of chunks as written (and its errors).
    fn take_reports(&mut self) -> Result<(), XferError> {
        while let Ok(ChunkReport { file, chunk, hash }) = self.ch.reports.try_recv() {
            match hash {
                Ok(h) => {
                    if let Some(of) = self.files[file as usize].as_mut() {
                        of.hashes[chunk as usize] = Some(h);
                    }
                    self.r.chunk_hashed(file, chunk, h);
                }
                Err(e) => {
                    return Err(abort(
                        self.link,
                        format!("{}: {e}", self.plan.files[file as usize].name),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The committing thread's results.
    fn take_commits(&mut self) -> Result<(), XferError> {
        while let Ok(c) = self.ch.commits.try_recv() {
            match c {
                Ok(c) => {
                    let i = self
                        .plan
                        .files
                        .iter()
                        .position(|f| f.name == c.name)
                        .expect("planned file");
                    self.tally.committed[i] = Some(c);
                    self.tally.n_committed += 1;
                }
                Err(e) => return Err(abort(self.link, e)),
            }
        }
        Ok(())
    }

    /// The protocol's counters (with the datagrams that failed to open) into the progress counters.
    fn publish_progress(&self) -> ReceiverStats {
        let progress = self.progress;
        let mut st = self.r.stats();
        st.bad_tag += self.tally.aead_bad;
        progress.bytes_moved.store(self.tally.moved, Relaxed);
        progress.datagrams.store(st.delivered, Relaxed);
        progress.bad_tag.store(st.bad_tag, Relaxed);
        progress
            .malformed
            .store(st.malformed + st.wrong_transfer + st.unknown_file, Relaxed);
        progress.duplicates.store(st.duplicates, Relaxed);
        progress.lost.store(st.reported_lost, Relaxed);
        st
    }

    /// Every file is committed: the commit report to the sender, and the outcome.
    fn finish(self, st: ReceiverStats) -> RecvOutcome {
        let files: Vec<Committed> = self
            .tally
            .committed
            .into_iter()
            .map(|c| c.expect("committed"))
            .collect();
        let (direct, back) = (self.written_direct.load(Relaxed), self.read_back.load(Relaxed));
        self.link.send_session(&Session::Committed {
            files: files.clone(),
            receiver: ReceiverReport::new(&st, direct, back),
        });
        let seconds = self.tally.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        if !self.tally.saw_done {
            drain_until_done(self.link);
        }
        RecvOutcome {
            committed: files,
            stats: st,
            bytes_resumed: self.tally.bytes_resumed,
            bytes_written_direct: direct,
            bytes_read_back: back,
            seconds,
            realtime: false,
        }
    }

    fn chunk_len(&self, file: u32, chunk: u32) -> u64 {
        let cs = self.plan.options.chunk_size;
        cs.min(self.plan.files[file as usize].size - chunk as u64 * cs)
    }

    /// The protocol's events: files opened, chunks queued for the verifier, files handed on to be
    /// committed.
    fn handle_events(&mut self) -> Result<(), XferError> {
        while let Some(e) = self.r.poll_event() {
            match e {
                Event::FileAnnounced {
                    file,
                    name,
                    size,
                    chunk_size,
                } => self.file_announced(file, &name, size, chunk_size)?,
                Event::ChunkComplete {
                    file,
                    chunk,
                    offset,
                    len,
                } => self.chunk_complete(file, chunk, offset, len),
                Event::ChunkVerified { file, chunk } => self.chunk_verified(file, chunk),
                Event::ChunkMismatch { file, chunk } => self.chunk_mismatch(file, chunk)?,
                Event::FileDone { file } => self.file_done(file)?,
                Event::TransferDone => {
                    self.tally.transfer_done = true;
                    self.progress.set_phase("syncing and committing");
                }
                Event::PeerDead => {
                    return Err(failed!(
                        "nothing heard from the sender for the dead-peer timeout; the .part files are kept for a resume"
                    ))
                }
                Event::Aborted { reason } => {
                    while let Some(m) = self.r.poll_control() {
                        self.link.send(m.to_line());
                    }
                    return Err(failed!("transfer aborted: {reason}"));
                }
            }
        }
        Ok(())
    }

    /// A file announced: checked against the request, opened (the `.part`, or the existing final file
    /// read-only), and the chunks re-verified from disk declared to the protocol.
    fn file_announced(&mut self, file: u32, name: &str, size: u64, chunk_size: u64) -> Result<(), XferError> {
        let (link, plan) = (self.link, self.plan);
        let cs = plan.options.chunk_size;
        let Some(fp) = plan.files.get(file as usize) else {
            return Err(abort(
                link,
                format!("file {file} ({name:?}) was not in the request"),
            ));
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
        self.progress.set_phase("receiving");
        let dir = self
            .dirs
            .open(fp)
            .map_err(|e| abort(link, format!("destination of {name}: {e}")))?;
        let (f, read_only) = match fp.resume {
            Resume::Complete(_) => (
                dest::open_final_ro(&dir, &fp.leaf).map_err(|e| abort(link, format!("{name}: {e}")))?,
                true,
            ),
            _ => {
                let f = dest::open_part(&dir, &fp.leaf).map_err(|e| part_error(link, name, e))?;
                // not pre-sized: after an interruption its length tells how far it got
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                if len > size {
                    f.set_len(size)
                        .map_err(|e| abort(link, format!("{name}: truncating the .part: {e}")))?;
                }
                (f, false)
            }
        };
        let n = size.div_ceil(cs) as usize;
        let direct = if read_only || (self.stages.slots.is_empty() && !plan.options.verify_written) {
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
        let have = self.store.lock().expect("resume hashes")[file as usize].clone();
        for (ci, h) in have.iter().enumerate() {
            let Some(h) = h else {
                return Err(abort(
                    link,
                    format!("{name}: chunk {ci} was announced before it was re-verified here"),
                ));
            };
            of.hashes[ci] = Some(*h);
            of.declared[ci] = self.r.declare_verified(file, ci as u32, *h);
        }
        self.files[file as usize] = Some(of);
        Ok(())
    }

    /// A chunk complete (its hash not merged from block digests): written and hashed by the verifier.
    fn chunk_complete(&mut self, file: u32, chunk: u32, offset: u64, len: u64) {
        let of = self.files[file as usize].as_mut().expect("open file");
        let size = self.plan.files[file as usize].size;
        let _ = self.ch.jobs.send(match of.take_staged(chunk, &mut self.stages) {
            Some((direct, buf)) => Job::Write(StagedWrite {
                file,
                chunk,
                direct,
                f: of.file.clone(),
                offset,
                len,
                buf,
                hash_size: Some(size),
            }),
            None => Job::Hash(HashChunk {
                file,
                chunk,
                f: of.file.clone(),
                size,
                offset,
                len,
            }),
        });
    }

    /// A chunk verified: a staged one goes to disk now, in one piece, and is read back if asked.
    fn chunk_verified(&mut self, file: u32, chunk: u32) {
        let cs = self.plan.options.chunk_size;
        if let Some(of) = self.files[file as usize].as_mut() {
            if let Some(slot) = of.hashes.get_mut(chunk as usize) {
                if slot.is_none() {
                    *slot = self.r.verified_hash(file, chunk);
                }
            }
        }
        let l = self.chunk_len(file, chunk);
        if let Some(of) = self.files[file as usize].as_mut().filter(|of| !of.read_only) {
            // a staged chunk (verified from its block digests) goes to disk now, in one piece
            let _ = self.ch.jobs.send(match of.take_staged(chunk, &mut self.stages) {
                Some((direct, buf)) => Job::Write(StagedWrite {
                    file,
                    chunk,
                    direct,
                    f: of.file.clone(),
                    offset: chunk as u64 * cs,
                    len: l,
                    buf,
                    hash_size: None,
                }),
                None => Job::Writeback {
                    f: of.file.clone(),
                    offset: chunk as u64 * cs,
                    len: l,
                },
            });
            // read back after the write, before the commit (all on the verifier, in order); a chunk found
            // on disk when resuming was just read from it
            let want = of.hashes.get(chunk as usize).copied().flatten();
            if let (true, false, Some(want)) = (
                self.plan.options.verify_written,
                of.declared.get(chunk as usize) == Some(&true),
                want,
            ) {
                let (f, direct) = match &of.direct {
                    Some(d) => (d.clone(), true),
                    None => (of.file.clone(), false),
                };
                let _ = self.ch.jobs.send(Job::ReadBack(ReadBack {
                    file,
                    chunk,
                    f,
                    direct,
                    size: self.plan.files[file as usize].size,
                    offset: chunk as u64 * cs,
                    len: l,
                    want,
                }));
            }
        }
        let (progress, t) = (self.progress, &mut self.tally);
        t.bytes_verified += l;
        progress.bytes_verified.store(t.bytes_verified, Relaxed);
        t.tracker.verified(file, l, progress);
        let resumed = self.files[file as usize]
            .as_ref()
            .is_some_and(|of| of.declared.get(chunk as usize) == Some(&true));
        if resumed {
            t.bytes_resumed += l;
            progress.bytes_resumed.store(t.bytes_resumed, Relaxed);
        }
    }

    /// A chunk found different from the sender's: it is sent again.
    fn chunk_mismatch(&mut self, file: u32, chunk: u32) -> Result<(), XferError> {
        let of = self.files[file as usize].as_mut().expect("open file");
        of.hashes[chunk as usize] = None;
        of.declared[chunk as usize] = false;
        // sent again in whole: a staged chunk stays staged (the resent blocks overwrite every byte of its
        // buffer, and nothing of it reached the disk); another may be staged this time
        if let Some(w) = of
            .writes
            .get_mut(chunk as usize)
            .filter(|w| **w == ChunkWrite::Buffered)
        {
            *w = ChunkWrite::Open;
        }
        if of.read_only {
            return Err(abort_as(
                self.link,
                format!(
                    "{} exists at the destination with different content (chunk {chunk} differs); nothing is overwritten unless asked (--overwrite)",
                    self.plan.files[file as usize].name
                ),
                AbortKind::Refused,
            ));
        }
        Ok(())
    }

    /// A file verified in full: closed here and handed (through the verifier, after its writes) to the
    /// committing thread.
    fn file_done(&mut self, file: u32) -> Result<(), XferError> {
        let (link, plan, progress) = (self.link, self.plan, self.progress);
        self.tally.files_done += 1;
        progress.files_done.store(self.tally.files_done, Relaxed);
        self.tally.tracker.done(file, progress);
        // a file of no bytes has no chunks and was never opened: make it now
        if self.files[file as usize].is_none() {
            let fp = &plan.files[file as usize];
            let dir = self
                .dirs
                .open(fp)
                .map_err(|e| abort(link, format!("destination of {}: {e}", fp.name)))?;
            let f = dest::open_part(&dir, &fp.leaf).map_err(|e| part_error(link, &fp.name, e))?;
            f.set_len(0)
                .map_err(|e| abort(link, format!("{}: {e}", fp.name)))?;
            self.files[file as usize] = Some(OpenFile {
                file: Arc::new(f),
                direct: None,
                writes: Vec::new(),
                dir,
                read_only: false,
                hashes: Vec::new(),
                declared: Vec::new(),
            });
        }
        // closed here: the commit holds what it needs (the locked `.part` and its directory), so a
        // transfer of many files keeps open only those still arriving or being committed
        let of = self.files[file as usize].take().expect("open file");
        let hashes: Option<Vec<_>> = of.hashes.iter().copied().collect();
        let Some(hashes) = hashes else {
            return Err(abort(
                link,
                format!(
                    "{}: done without every chunk hash",
                    plan.files[file as usize].name
                ),
            ));
        };
        let _ = self.ch.jobs.send(Job::Finalize(Finalize {
            file,
            f: of.file,
            dir: of.dir,
            read_only: of.read_only,
            hashes,
            resumed: of.declared.iter().filter(|d| **d).count() as u64,
        }));
        Ok(())
    }
}
