//! The sending data thread: it owns the protocol's [`Sender`], adds files once the resume comparison of
//! their held chunks is complete, sends the datagrams the sender releases ([`Output`]), takes control
//! messages, feedback and chunk hashes, and sleeps until the sender's next deadline.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use vlbiflow_xfer_proto::timing::{min_sleep, Bursts, LossCount};
use vlbiflow_xfer_proto::wire::{derive_data_aead_key, Feedback};
use vlbiflow_xfer_proto::{AbortKind, ChunkHash, ControlMsg, Event, Sender, SenderStats};

use super::hash::HashMsg;
use super::outcome::{SendOutcome, SendParams};
use super::output::Output;
use super::trace::RateTrace;
use super::window::Held;
use crate::error::{failed, XferError};
use crate::link::{Inbound, Link};
use crate::progress::{FileTracker, Progress};
use crate::session::{Committed, ReceiverReport, Session};
use crate::share::CapWatch;
use crate::source::SourceSet;

/// What the data thread is started with.
pub(super) struct DataSetup<'a> {
    pub link: &'a Link,
    pub set: &'a Arc<SourceSet>,
    pub p: &'a SendParams,
    pub progress: &'a Progress,
    pub stop: &'a AtomicBool,
    pub s: Sender,
    pub sock: &'a UdpSocket,
    /// Chunk hashes from the hashing thread.
    pub hashes: Receiver<HashMsg>,
    /// Checked feedback datagrams from the feedback reader.
    pub feedback: Receiver<Feedback>,
    /// Where the data thread is, for the hashing thread.
    pub cursor: &'a AtomicU64,
    /// Chunks the receiver holds of each file (from its accept).
    pub have_chunks: &'a [u32],
}

/// The resume comparison: both sides' hashes of the chunks the receiver holds.
struct Compare {
    own: Vec<Vec<Option<ChunkHash>>>,
    theirs: Vec<Vec<Option<ChunkHash>>>,
    /// The receiver has reported every hash it has (`have_done`).
    have_done: bool,
    /// Files added to the sender so far (in order).
    added: usize,
    closed: bool,
}

/// What the data thread heard from the receiver.
#[derive(Default)]
struct Heard {
    /// Any protocol message (control or feedback): a link that closes before one points at another
    /// release.
    any: bool,
    committed: Option<(Vec<Committed>, ReceiverReport)>,
    link_closed: bool,
    hashes_open: bool,
    feedback_open: bool,
}

/// The sending data thread of one transfer.
pub(super) struct DataThread<'a> {
    link: &'a Link,
    set: &'a Arc<SourceSet>,
    p: &'a SendParams,
    progress: &'a Progress,
    stop: &'a AtomicBool,
    s: Sender,
    sock: &'a UdpSocket,
    hashes: Receiver<HashMsg>,
    feedback: Receiver<Feedback>,
    cursor: &'a AtomicU64,
    cap: Option<CapWatch<'a>>,
    /// Where each file starts in the whole set (for the cursor).
    file_start: Vec<u64>,
    cmp: Compare,
    /// The chunks the receiver holds, as files are added: not sent, and the reading thread reads past
    /// them.
    held: Held,
    out: Output,
    started: Option<Instant>,
    done_at: Option<Instant>,
    heard: Heard,
    bytes_resumed: u64,
    files_done: u64,
    tracker: FileTracker,
    trace: Option<RateTrace>,
    bursts: Bursts,
}

/// The error for the receiver's abort: a refusal stays a refusal (exit 3), a busy file stays busy (exit
/// 4), anything else failed (exit 1; rerunning resumes).
fn receiver_aborted(reason: &str, kind: AbortKind) -> XferError {
    match kind {
        AbortKind::Refused => XferError::Refused(format!("the receiver refused: {reason}")),
        AbortKind::Busy => XferError::Busy(format!("the receiver is busy: {reason}")),
        AbortKind::Failed => failed!("the receiver aborted: {reason}"),
    }
}

impl<'a> DataThread<'a> {
    pub(super) fn new(d: DataSetup<'a>) -> DataThread<'a> {
        let DataSetup {
            link,
            set,
            p,
            progress,
            stop,
            mut s,
            sock,
            hashes,
            feedback,
            cursor,
            have_chunks,
        } = d;
        s.set_receiver_rate_cap(p.receiver_cap);
        if let Some(c) = &p.rate_cap {
            s.set_rate_cap(c.get());
        }
        let chunk_size = p.options.chunk_size;
        let nfiles = set.files.len();
        let aead_key = p
            .options
            .encrypt
            .then(|| derive_data_aead_key(&p.secret, p.transfer_id));
        let file_start: Vec<u64> = set
            .files
            .iter()
            .scan(0u64, |acc, f| {
                let s = *acc;
                *acc += f.size;
                Some(s)
            })
            .collect();
        let chunks_of = |f: usize| set.files[f].size.div_ceil(chunk_size) as usize;
        let cmp = Compare {
            own: (0..nfiles).map(|f| vec![None; chunks_of(f)]).collect(),
            theirs: (0..nfiles)
                .map(|f| vec![None; (have_chunks[f] as usize).min(chunks_of(f))])
                .collect(),
            have_done: have_chunks.iter().all(|&c| c == 0),
            added: 0,
            closed: false,
        };
        let held = Held::new(chunk_size);
        let out = Output::new(
            set.clone(),
            p.options.block_size as usize,
            aead_key,
            s.subtree_block(),
            held.clone(),
            p.realtime,
            crate::source::DirectReads::from_env(),
        );
        if nfiles > 0 {
            progress.set_phase(if cmp.have_done {
                "sending"
            } else {
                "comparing what the receiver holds"
            });
        }
        DataThread {
            link,
            set,
            p,
            progress,
            stop,
            s,
            sock,
            hashes,
            feedback,
            cursor,
            cap: p.rate_cap.as_deref().map(CapWatch::new),
            file_start,
            cmp,
            held,
            out,
            started: None,
            done_at: None,
            heard: Heard {
                hashes_open: true,
                feedback_open: true,
                ..Heard::default()
            },
            bytes_resumed: 0,
            files_done: 0,
            tracker: FileTracker::new(set.files.iter().map(|f| (f.name.clone(), f.size)), progress),
            trace: RateTrace::from_env(),
            bursts: Bursts::default(),
        }
    }

    /// Sends until every chunk is verified and the receiver reports the files committed, or the
    /// transfer fails.
    pub(super) fn run(mut self) -> Result<SendOutcome, XferError> {
        loop {
            if self.stop.load(Relaxed) {
                self.s.abort("stopped by the user".into());
                self.forward_control();
                return Err(failed!(
                    "stopped; the receiver keeps what was verified, run the same command to resume"
                ));
            }
            let now = Instant::now();
            self.add_ready_files()?;
            self.send_round(now);
            self.forward_control();
            self.handle_events()?;
            let st = self.publish_progress();
            if let Some(o) = self.outcome(st)? {
                return Ok(o);
            }
            if let Some(c) = self.cap.as_mut().and_then(CapWatch::changed) {
                self.s.set_rate_cap(c);
            }
            if let Some(d) = self.done_at {
                if d.elapsed() > self.p.commit_timeout {
                    return Err(failed!(
                        "every chunk was verified, but the receiver did not report the files synced and renamed within {:?}",
                        self.p.commit_timeout
                    ));
                }
            }
            self.wait()?;
            let now = Instant::now();
            if self.s.poll_timeout().is_some_and(|t| t <= now) {
                self.s.handle_timeout(now);
            }
        }
    }

    fn forward_control(&mut self) {
        while let Some(m) = self.s.poll_control() {
            self.link.send(m.to_line());
        }
    }

    /// Files become ready once the resume comparison of their held range is complete.
    fn add_ready_files(&mut self) -> Result<(), XferError> {
        let nfiles = self.set.files.len();
        let c = &mut self.cmp;
        while c.added < nfiles {
            let f = c.added;
            let hc = c.theirs[f].len();
            let ready = (0..hc).all(|i| c.own[f][i].is_some() && (c.theirs[f][i].is_some() || c.have_done));
            if !ready {
                break;
            }
            let h: Vec<bool> = (0..hc)
                .map(|i| c.theirs[f][i].is_some() && c.theirs[f][i] == c.own[f][i])
                .collect();
            let vf = &self.set.files[f];
            if h.contains(&true) {
                self.held.set(f, &h);
            }
            self.s
                .add_file_held(&vf.name, vf.size, c.own[f].clone(), h)
                .map_err(|e| failed!("{}: {e}", vf.name))?;
            c.added += 1;
        }
        if c.added == nfiles && !c.closed {
            self.s.close();
            c.closed = true;
            self.progress.set_phase("sending");
        }
        Ok(())
    }

    /// The datagrams the sender releases now.
    fn send_round(&mut self, now: Instant) {
        let (cursor, file_start) = (self.cursor, &self.file_start);
        let round = self.out.round(&mut self.s, self.set, self.sock, now, |t| {
            let h = &t.header;
            cursor.fetch_max(file_start[h.file as usize] + h.offset + h.len as u64, Relaxed);
        });
        if round.datagrams > 0 {
            self.started.get_or_insert(now);
        }
        if let Some(e) = round.read_error {
            self.s.abort(format!("the sender cannot read its data: {e}"));
        }
    }

    fn handle_events(&mut self) -> Result<(), XferError> {
        let chunk_size = self.p.options.chunk_size;
        let progress = self.progress;
        while let Some(e) = self.s.poll_event() {
            match e {
                Event::ChunkVerified { file, chunk } => {
                    let l = chunk_size.min(self.set.files[file as usize].size - chunk as u64 * chunk_size);
                    progress.bytes_verified.fetch_add(l, Relaxed);
                    self.tracker.verified(file, l, progress);
                    if self.held.holds(file as usize, chunk as u64) {
                        self.bytes_resumed += l;
                        progress.bytes_resumed.fetch_add(l, Relaxed);
                    }
                }
                Event::FileDone { file } => {
                    self.files_done += 1;
                    progress.files_done.store(self.files_done, Relaxed);
                    self.tracker.done(file, progress);
                }
                Event::TransferDone => {
                    self.done_at = Some(Instant::now());
                    progress.set_phase("waiting for the receiver to sync and commit");
                }
                Event::PeerDead => {
                    return Err(failed!(
                        "no feedback from the receiver for {:?}: it is gone or unreachable; verified chunks are kept, run the same command to resume",
                        self.p.dead_timeout
                    ))
                }
                Event::Aborted { reason } => {
                    self.forward_control();
                    return Err(failed!("transfer aborted: {reason}"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn publish_progress(&self) -> SenderStats {
        let (s, progress) = (&self.s, self.progress);
        let st = s.stats();
        progress.bytes_moved.store(st.bytes, Relaxed);
        progress.datagrams.store(st.datagrams, Relaxed);
        progress.retransmits.store(st.retransmits, Relaxed);
        progress.lost.store(st.reported_lost + st.tail_lost, Relaxed);
        progress.chunk_resends.store(st.chunk_resends, Relaxed);
        progress
            .rate_bps
            .store(s.rate().pacing_rate() as u64 * 8, Relaxed);
        if let Some(r) = s.rate().min_rtt() {
            progress.min_rtt_us.store(r.as_micros() as u64, Relaxed);
        }
        st
    }

    /// The outcome once the receiver has reported the commit and every chunk is verified here; an error
    /// if it reported one before that and closed.
    fn outcome(&self, st: SenderStats) -> Result<Option<SendOutcome>, XferError> {
        let Some((c, receiver)) = &self.heard.committed else {
            return Ok(None);
        };
        let Some(done_at) = self.done_at else {
            if self.heard.link_closed && self.link.rx.is_empty() {
                return Err(failed!(
                    "the receiver reported a commit before every chunk was verified here"
                ));
            }
            return Ok(None);
        };
        Ok(Some(SendOutcome {
            committed: c.clone(),
            receiver: *receiver,
            stats: st,
            bytes_resumed: self.bytes_resumed,
            seconds: self.started.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            verified_seconds: self
                .started
                .map_or(0.0, |a| done_at.saturating_duration_since(a).as_secs_f64()),
            feedback_datagrams: 0,
            feedback_rejected: 0,
            bytes_read_direct: self.out.direct_bytes(),
            read_wait_seconds: self.out.read_wait.as_secs_f64(),
            realtime: false,
        }))
    }

    /// Waits for the next deadline, a control message, feedback or a hash, then takes whatever else is
    /// waiting.
    fn wait(&mut self) -> Result<(), XferError> {
        let wait = match self.s.poll_timeout() {
            Some(t) => t.saturating_duration_since(Instant::now()),
            None => Duration::from_millis(100),
        };
        // short bursts where long ones lose more (see `Bursts`)
        let st = self.s.stats();
        let count = LossCount {
            sent: st.datagrams,
            lost: st.reported_lost,
        };
        let rate = self.s.rate();
        let short_bursts = self
            .bursts
            .short(Instant::now(), rate.random_loss(), count, rate.min_rtt());
        // Never spin: sleeping at least a quarter millisecond lets the sender's pacing catch up by up to
        // one burst on waking, which then leaves in GSO batches (spinning per datagram cost a core).
        let w = wait.clamp(
            min_sleep(rate.pacing_rate(), self.p.options.block_size, short_bursts),
            Duration::from_millis(50),
        );
        // once the hashing thread is done its channel is disconnected and would be ready at once, every
        // time: wait on the control link alone then (selecting on it spun a core)
        let never = crossbeam_channel::never();
        let hashes = if self.heard.hashes_open {
            &self.hashes
        } else {
            &never
        };
        // the same for the feedback reader, should it end early
        let never_fb = crossbeam_channel::never();
        let feedback = if self.heard.feedback_open {
            &self.feedback
        } else {
            &never_fb
        };
        let mut first_fb = None;
        let mut first_hash = None;
        let mut first_ctl = None;
        select! {
            recv(self.link.rx) -> m => first_ctl = m.ok(),
            recv(feedback) -> m => match m {
                Ok(f) => first_fb = Some(f),
                Err(_) => self.heard.feedback_open = false,
            },
            recv(hashes) -> m => match m {
                Ok(m) => first_hash = Some(m),
                Err(_) => self.heard.hashes_open = false,
            },
            default(w) => {},
        }
        if let Some(m) = first_ctl {
            self.inbound(m)?;
        }
        if let Some(m) = first_hash {
            self.hash_msg(m)?;
        }
        // drain whatever else is waiting
        while let Ok(m) = self.link.rx.try_recv() {
            self.inbound(m)?;
        }
        let mut next_fb = first_fb;
        loop {
            let f = match next_fb.take() {
                Some(f) => f,
                None => match self.feedback.try_recv() {
                    Ok(f) => f,
                    Err(_) => break,
                },
            };
            self.heard.any = true;
            self.s.handle_feedback_datagram(Instant::now(), f);
            if let Some(t) = self.trace.as_mut() {
                t.line(&self.s, self.out.read_wait, self.bursts);
            }
        }
        while self.heard.hashes_open {
            match self.hashes.try_recv() {
                Ok(m) => self.hash_msg(m)?,
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => self.heard.hashes_open = false,
            }
        }
        Ok(())
    }

    /// A chunk hash from the hashing thread.
    fn hash_msg(&mut self, m: HashMsg) -> Result<(), XferError> {
        match m {
            HashMsg::Chunk { file, chunk, hash } => {
                self.cmp.own[file as usize][chunk as usize] = Some(hash);
                if (file as usize) < self.cmp.added {
                    self.s.set_chunk_hash(file, chunk, hash);
                }
                Ok(())
            }
            HashMsg::Error(e) => Err(failed!("{e}")),
        }
    }

    /// A message from the receiver on the control connection.
    fn inbound(&mut self, m: Inbound) -> Result<(), XferError> {
        match m {
            Inbound::Ctl(c) => {
                self.heard.any = true;
                if let ControlMsg::Abort { reason, kind } = &c {
                    return Err(receiver_aborted(reason, *kind));
                }
                self.s.handle_control(Instant::now(), c);
                if let Some(t) = self.trace.as_mut() {
                    t.line(&self.s, self.out.read_wait, self.bursts);
                }
            }
            Inbound::Sess(Session::Have { file, chunk, hash }) => {
                if let Some(slot) = self
                    .cmp
                    .theirs
                    .get_mut(file as usize)
                    .and_then(|v| v.get_mut(chunk as usize))
                {
                    *slot = Some(hash);
                }
            }
            Inbound::Sess(Session::HaveDone) => {
                self.cmp.have_done = true;
            }
            Inbound::Sess(Session::Committed { files, receiver }) => {
                // checked against the sender's own verdict, after pending events
                self.heard.committed = Some((files, receiver));
            }
            Inbound::Sess(other) => {
                return Err(failed!(
                    "unexpected message from the receiver: {}",
                    other.to_line()
                ))
            }
            Inbound::Closed(_) if self.heard.committed.is_some() => self.heard.link_closed = true,
            Inbound::Refused(why) => {
                self.link.send(
                    ControlMsg::Abort {
                        reason: why.clone(),
                        kind: AbortKind::Failed,
                    }
                    .to_line(),
                );
                return Err(failed!("{why}"));
            }
            Inbound::Closed(why) if !self.heard.any => {
                return Err(failed!(
                    "{why} before the receiver sent any protocol message: if it runs another vlbiflow release, the protocol versions differ (the receiver's log says); otherwise run the same command to resume"
                ))
            }
            Inbound::Closed(why) => {
                return Err(failed!(
                    "{why}; verified chunks are kept at the receiver, run the same command to resume"
                ))
            }
        }
        Ok(())
    }
}
