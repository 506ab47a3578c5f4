//! The sending data plane of one transfer.
//!
//! Threads: this one (the data thread) owns the protocol's [`Sender`]: it takes control messages from the
//! link, asks the sender for datagrams, reads their payload straight into a GSO buffer, seals and sends
//! them with one `sendmmsg` per batch (UDP GSO: the kernel cuts each message into datagrams), and sleeps
//! until the sender's next deadline. A hashing thread reads every chunk ahead of the data cursor at disk
//! speed (which also warms the page cache for the data thread) and hands the hashes over; files the
//! receiver already holds in part are added to the sender once both sides' hashes of those chunks are
//! known, so that only chunks that differ or are missing move.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver};
use vlbiflow_udp::{open_udp, UdpConfig};
use vlbiflow_xfer_proto::timing::{min_sleep, Bursts, LossCount, MAX_BURST};
use vlbiflow_xfer_proto::wire::{
    derive_data_aead_key, derive_data_key, derive_feedback_key, parse_feedback_datagram, Feedback,
};
use vlbiflow_xfer_proto::{
    AbortKind, ChunkHash, ControlMsg, Event, RateConfig, Sender, SenderConfig, SenderStats,
};

use crate::error::{failed, XferError};
use crate::hash::ChunkHasher;
use crate::link::{Inbound, Link};
use crate::out::{Held, Output};
use crate::progress::Progress;
use crate::session::{Committed, Have, Options, ReceiverReport, Session};
use crate::share::{CapWatch, RateCap};
use crate::source::{FdCache, SourceSet};

/// Settings of one sending transfer.
#[derive(Debug, Clone)]
pub struct SendParams {
    /// Transfer id (from the accept).
    pub transfer_id: u32,
    /// Session secret of the control connection (the datagram key is derived from it).
    pub secret: [u8; 32],
    /// Agreed options.
    pub options: Options,
    /// Rate control.
    pub rate: RateConfig,
    /// Receiver's data address.
    pub dest: SocketAddr,
    /// No feedback for this long: the receiver is dead.
    pub dead_timeout: Duration,
    /// How long to wait for the receiver's commit report after the last chunk is verified.
    pub commit_timeout: Duration,
    /// Run the data thread and the feedback reader in the real-time class (`--realtime`, see
    /// [`vlbiflow_udp::sched`]).
    pub realtime: bool,
    /// The ceiling this side's daemon sets while the transfer runs (its share of a limit on all its
    /// transfers), applied as it changes.
    pub rate_cap: Option<Arc<RateCap>>,
    /// The receiver's ceiling from its accept (it may change it later with `rate_cap` messages).
    pub receiver_cap: Option<f64>,
}

/// What a completed send did.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    /// The receiver's report: each file synced under its final name, with its BLAKE3.
    pub committed: Vec<Committed>,
    /// The receiver's counters: what arrived, what it asked for again, what it dropped.
    pub receiver: ReceiverReport,
    /// Protocol counters.
    pub stats: SenderStats,
    /// Bytes found already at the destination (verified, not moved).
    pub bytes_resumed: u64,
    /// Wall time from the first datagram to the commit report.
    pub seconds: f64,
    /// Wall time from the first datagram to the last chunk verified (before the receiver's final sync).
    pub verified_seconds: f64,
    /// Feedback datagrams taken.
    pub feedback_datagrams: u64,
    /// Datagrams on the data socket that were not valid feedback (wrong tag, transfer or form: dropped).
    pub feedback_rejected: u64,
    /// Bytes of new data read from the disk past the page cache (`O_DIRECT`: a recording the cache did
    /// not hold).
    pub bytes_read_direct: u64,
    /// Time the data thread waited for its disk (a window not read ahead in time, or read by itself).
    pub read_wait_seconds: f64,
    /// The data thread ran in the real-time class (`--realtime` asked for it and it was permitted).
    pub realtime: bool,
}

/// Counters of the feedback reader.
#[derive(Debug, Default, Clone, Copy)]
struct FeedbackCounts {
    taken: u64,
    rejected: u64,
}

/// Reads feedback datagrams from the data socket (connected to the receiver's data port, so only its
/// datagrams arrive), checks them and passes them on, until `stop`; each wait is bounded.
fn feedback_reader(
    sock: UdpSocket,
    key: [u8; 32],
    transfer_id: u32,
    stop: Arc<AtomicBool>,
    out: crossbeam_channel::Sender<Feedback>,
) -> FeedbackCounts {
    use std::io::ErrorKind::{ConnectionRefused, Interrupted, TimedOut, WouldBlock};
    let mut c = FeedbackCounts::default();
    let mut buf = vec![0u8; 2048];
    if sock.set_read_timeout(Some(Duration::from_millis(50))).is_err() {
        return c;
    }
    while !stop.load(Relaxed) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            // timeouts, and ICMP errors reported on the connected socket
            Err(e) if matches!(e.kind(), WouldBlock | TimedOut | ConnectionRefused | Interrupted) => continue,
            Err(_) => {
                // anything else: do not spin on it
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        match parse_feedback_datagram(Some(&key), transfer_id, &buf[..n]) {
            Ok(f) => {
                c.taken += 1;
                // a full channel means the data loop is stalled: a later feedback repeats this one
                let _ = out.try_send(f);
            }
            Err(_) => c.rejected += 1,
        }
    }
    c
}

/// Bytes the hashing thread may read ahead of the data cursor (it waits beyond).
const HASH_AHEAD: u64 = 512 << 20;

enum HashMsg {
    Chunk { file: u32, chunk: u32, hash: ChunkHash },
    Error(String),
}

/// Hashes chunks of the source as the resume comparison and the protocol need them: with `only_held`
/// (the protocol's sender derives the hashes of what it sends from the datagrams) just the chunks the
/// receiver holds, else every chunk, staying near the data cursor.
fn hash_thread(
    set: Arc<SourceSet>,
    chunk_size: u64,
    have: Vec<u32>,
    only_held: bool,
    cursor: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    out: crossbeam_channel::Sender<HashMsg>,
) {
    let mut fds = FdCache::default();
    let mut buf = vec![0u8; (8 << 20).min(chunk_size as usize)];
    let mut global = 0u64;
    for (fi, f) in set.files.iter().enumerate() {
        let n = f.size.div_ceil(chunk_size);
        for c in 0..n {
            let start = c * chunk_size;
            let len = chunk_size.min(f.size - start);
            let resuming = (c as u32) < have.get(fi).copied().unwrap_or(0);
            if only_held && !resuming {
                continue;
            }
            // stay near the data cursor so the page cache still holds what the data thread reads
            while !resuming && global > cursor.load(Relaxed) + HASH_AHEAD {
                if stop.load(Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            if stop.load(Relaxed) {
                return;
            }
            let mut h = ChunkHasher::new(f.size, chunk_size, c);
            let mut done = 0u64;
            while done < len {
                let k = (buf.len() as u64).min(len - done) as usize;
                if let Err(e) = set.read_at(&mut fds, fi, start + done, &mut buf[..k]) {
                    let _ = out.send(HashMsg::Error(format!("reading {}: {e}", f.name)));
                    return;
                }
                h.update(&buf[..k]);
                done += k as u64;
            }
            global += len;
            let m = HashMsg::Chunk {
                file: fi as u32,
                chunk: c as u32,
                hash: h.finish(),
            };
            if out.send(m).is_err() {
                return;
            }
        }
    }
}

/// Runs the sending side until every chunk is verified and the receiver reports the files committed.
/// `have` is what the receiver holds already (from its accept). On failure the receiver keeps what it
/// verified, and the same command resumes.
pub fn run_sender(
    link: &Link,
    set: Arc<SourceSet>,
    have: &[Have],
    p: &SendParams,
    progress: &Progress,
    stop: &AtomicBool,
) -> Result<SendOutcome, XferError> {
    let chunk_size = p.options.chunk_size;
    let nfiles = set.files.len();
    let mut have_chunks = vec![0u32; nfiles];
    for h in have {
        if let Some(x) = have_chunks.get_mut(h.file as usize) {
            *x = h.chunks;
        }
    }
    progress.bytes_total.store(set.total_bytes(), Relaxed);
    progress.files_total.store(nfiles as u64, Relaxed);

    let mut cfg = UdpConfig::sender(p.dest);
    cfg.send_buffer = Some(16 << 20);
    cfg.write_timeout = Some(Duration::from_millis(200));
    let (sock, _report) = open_udp(&cfg).map_err(|e| failed!("data socket to {}: {e}", p.dest))?;

    let mut sc = SenderConfig::new(p.transfer_id, p.rate);
    sc.block_size = p.options.block_size;
    sc.chunk_size = chunk_size;
    // authenticated (keyed BLAKE3 tag, sealed by the protocol's sender) or encrypted (AEAD, sealed here)
    sc.data_key = (!p.options.encrypt).then(|| derive_data_key(&p.secret, p.transfer_id));
    sc.dead_timeout = p.dead_timeout;
    sc.max_burst = MAX_BURST;
    let mut s = Sender::new(sc);
    let only_held = s.derives_chunk_hashes();

    let (ftx, frx) = bounded::<Feedback>(1024);
    let fstop = Arc::new(AtomicBool::new(false));
    let freader = {
        let rsock = sock
            .try_clone()
            .map_err(|e| failed!("data socket to {}: {e}", p.dest))?;
        let (key, id, fstop) = (
            derive_feedback_key(&p.secret, p.transfer_id),
            p.transfer_id,
            fstop.clone(),
        );
        let realtime = p.realtime;
        std::thread::Builder::new()
            .name("xfer-feedback".into())
            .spawn(move || {
                let _rt = crate::realtime_class(realtime, "the feedback reader");
                feedback_reader(rsock, key, id, fstop, ftx)
            })
            .map_err(|e| failed!("starting the feedback reader: {e}"))?
    };

    let cursor = Arc::new(AtomicU64::new(0));
    let hstop = Arc::new(AtomicBool::new(false));
    let (htx, hrx) = bounded::<HashMsg>(4096);
    let hasher = {
        let (set, cursor, hstop, have) = (set.clone(), cursor.clone(), hstop.clone(), have_chunks.clone());
        std::thread::Builder::new()
            .name("xfer-hash".into())
            .spawn(move || hash_thread(set, chunk_size, have, only_held, cursor, hstop, htx))
            .expect("spawn hasher")
    };
    let rt = crate::realtime_class(p.realtime, "the sending data thread");
    let realtime = rt.is_some();
    let result = data_loop(DataLoop {
        link,
        set: &set,
        p,
        progress,
        stop,
        s: &mut s,
        sock: &sock,
        hrx: &hrx,
        frx: &frx,
        cursor: &cursor,
        have_chunks: &have_chunks,
    });
    drop(rt);
    hstop.store(true, Relaxed);
    drop(hrx);
    let _ = hasher.join();
    fstop.store(true, Relaxed);
    let counts = freader.join().unwrap_or_default();
    result.map(|o| SendOutcome {
        feedback_datagrams: counts.taken,
        feedback_rejected: counts.rejected,
        realtime,
        ..o
    })
}

struct DataLoop<'a> {
    link: &'a Link,
    set: &'a Arc<SourceSet>,
    p: &'a SendParams,
    progress: &'a Progress,
    stop: &'a AtomicBool,
    s: &'a mut Sender,
    sock: &'a UdpSocket,
    hrx: &'a Receiver<HashMsg>,
    frx: &'a Receiver<Feedback>,
    cursor: &'a AtomicU64,
    have_chunks: &'a [u32],
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

fn data_loop(d: DataLoop<'_>) -> Result<SendOutcome, XferError> {
    let DataLoop {
        link,
        set,
        p,
        progress,
        stop,
        s,
        sock,
        hrx,
        frx,
        cursor,
        have_chunks,
    } = d;
    let mut cap = p.rate_cap.as_deref().map(CapWatch::new);
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
    let chunk_len = |f: usize, c: u32| chunk_size.min(set.files[f].size - c as u64 * chunk_size);
    let mut own: Vec<Vec<Option<ChunkHash>>> = (0..nfiles).map(|f| vec![None; chunks_of(f)]).collect();
    let mut theirs: Vec<Vec<Option<ChunkHash>>> = (0..nfiles)
        .map(|f| vec![None; (have_chunks[f] as usize).min(chunks_of(f))])
        .collect();
    let mut have_done = have_chunks.iter().all(|&c| c == 0);
    let mut added = 0usize;
    let mut closed = false;
    // the chunks the receiver holds, as files are added: not sent, and the reading thread reads past them
    let held = Held::new(chunk_size);
    let mut out = Output::new(
        set.clone(),
        p.options.block_size as usize,
        aead_key,
        s.subtree_block(),
        held.clone(),
        p.realtime,
    );
    let mut started: Option<Instant> = None;
    let mut done_at: Option<Instant> = None;
    let mut committed: Option<(Vec<Committed>, ReceiverReport)> = None;
    let mut link_closed = false;
    // no protocol message (control or feedback) from the receiver yet: a link that closes then points at
    // another release
    let mut heard = false;
    let mut bytes_resumed = 0u64;
    let mut files_done = 0u64;
    let mut tracker =
        crate::progress::FileTracker::new(set.files.iter().map(|f| (f.name.clone(), f.size)), progress);
    let mut hashes_open = true;
    let mut feedback_open = true;
    let mut trace = RateTrace::from_env();
    let mut bursts = Bursts::default();
    if nfiles > 0 {
        progress.set_phase(if have_done {
            "sending"
        } else {
            "comparing what the receiver holds"
        });
    }

    loop {
        if stop.load(Relaxed) {
            s.abort("stopped by the user".into());
            while let Some(m) = s.poll_control() {
                link.send(m.to_line());
            }
            return Err(failed!(
                "stopped; the receiver keeps what was verified, run the same command to resume"
            ));
        }
        let now = Instant::now();
        // files become ready once the resume comparison of their held range is complete
        while added < nfiles {
            let f = added;
            let hc = theirs[f].len();
            let ready = (0..hc).all(|c| own[f][c].is_some() && (theirs[f][c].is_some() || have_done));
            if !ready {
                break;
            }
            let h: Vec<bool> = (0..hc)
                .map(|c| theirs[f][c].is_some() && theirs[f][c] == own[f][c])
                .collect();
            let vf = &set.files[f];
            if h.contains(&true) {
                held.set(f, &h);
            }
            s.add_file_held(&vf.name, vf.size, own[f].clone(), h)
                .map_err(|e| failed!("{}: {e}", vf.name))?;
            added += 1;
        }
        if added == nfiles && !closed {
            s.close();
            closed = true;
            progress.set_phase("sending");
        }

        // datagrams
        let round = out.round(s, set, sock, now, |t| {
            let h = &t.header;
            cursor.fetch_max(file_start[h.file as usize] + h.offset + h.len as u64, Relaxed);
        });
        if round.datagrams > 0 {
            started.get_or_insert(now);
        }
        if let Some(e) = round.read_error {
            s.abort(format!("the sender cannot read its data: {e}"));
        }

        // control and events
        while let Some(m) = s.poll_control() {
            link.send(m.to_line());
        }
        while let Some(e) = s.poll_event() {
            match e {
                Event::ChunkVerified { file, chunk } => {
                    let l = chunk_len(file as usize, chunk);
                    progress.bytes_verified.fetch_add(l, Relaxed);
                    tracker.verified(file, l, progress);
                    if held.holds(file as usize, chunk as u64) {
                        bytes_resumed += l;
                        progress.bytes_resumed.fetch_add(l, Relaxed);
                    }
                }
                Event::FileDone { file } => {
                    files_done += 1;
                    progress.files_done.store(files_done, Relaxed);
                    tracker.done(file, progress);
                }
                Event::TransferDone => {
                    done_at = Some(Instant::now());
                    progress.set_phase("waiting for the receiver to sync and commit");
                }
                Event::PeerDead => {
                    return Err(failed!(
                        "no feedback from the receiver for {:?}: it is gone or unreachable; verified chunks are kept, run the same command to resume",
                        p.dead_timeout
                    ))
                }
                Event::Aborted { reason } => {
                    while let Some(m) = s.poll_control() {
                        link.send(m.to_line());
                    }
                    return Err(failed!("transfer aborted: {reason}"));
                }
                _ => {}
            }
        }
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
        if let Some((c, receiver)) = &committed {
            if done_at.is_none() {
                if link_closed && link.rx.is_empty() {
                    return Err(failed!(
                        "the receiver reported a commit before every chunk was verified here"
                    ));
                }
            } else {
                return Ok(SendOutcome {
                    committed: c.clone(),
                    receiver: *receiver,
                    stats: st,
                    bytes_resumed,
                    seconds: started.map_or(0.0, |t| t.elapsed().as_secs_f64()),
                    verified_seconds: match (started, done_at) {
                        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
                        _ => 0.0,
                    },
                    feedback_datagrams: 0,
                    feedback_rejected: 0,
                    bytes_read_direct: out.direct_bytes(),
                    read_wait_seconds: out.read_wait.as_secs_f64(),
                    realtime: false,
                });
            }
        }
        if let Some(c) = cap.as_mut().and_then(CapWatch::changed) {
            s.set_rate_cap(c);
        }
        if let Some(d) = done_at {
            if d.elapsed() > p.commit_timeout {
                return Err(failed!(
                    "every chunk was verified, but the receiver did not report the files synced and renamed within {:?}",
                    p.commit_timeout
                ));
            }
        }

        // wait for the next deadline, a control message or a hash
        let deadline = s.poll_timeout();
        let wait = match deadline {
            Some(t) => t.saturating_duration_since(Instant::now()),
            None => Duration::from_millis(100),
        };
        // short bursts where long ones lose more (see `Bursts`)
        let st = s.stats();
        let count = LossCount {
            sent: st.datagrams,
            lost: st.reported_lost,
        };
        let short_bursts = bursts.short(Instant::now(), s.rate().random_loss(), count, s.rate().min_rtt());
        let mut handle = |m: Inbound, s: &mut Sender| -> Result<(), XferError> {
            match m {
                Inbound::Ctl(c) => {
                    heard = true;
                    if let ControlMsg::Abort { reason, kind } = &c {
                        return Err(receiver_aborted(reason, *kind));
                    }
                    s.handle_control(Instant::now(), c);
                    if let Some(t) = trace.as_mut() {
                        t.line(s, out.read_wait, bursts);
                    }
                }
                Inbound::Sess(Session::Have { file, chunk, hash }) => {
                    if let Some(slot) = theirs
                        .get_mut(file as usize)
                        .and_then(|v| v.get_mut(chunk as usize))
                    {
                        *slot = Some(hash);
                    }
                }
                Inbound::Sess(Session::HaveDone) => {
                    have_done = true;
                }
                Inbound::Sess(Session::Committed { files, receiver }) => {
                    // checked against the sender's own verdict below, after pending events
                    committed = Some((files, receiver));
                }
                Inbound::Sess(other) => {
                    return Err(failed!(
                        "unexpected message from the receiver: {}",
                        other.to_line()
                    ))
                }
                Inbound::Closed(_) if committed.is_some() => link_closed = true,
                Inbound::Refused(why) => {
                    link.send(ControlMsg::Abort { reason: why.clone(), kind: AbortKind::Failed }.to_line());
                    return Err(failed!("{why}"));
                }
                Inbound::Closed(why) if !heard => {
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
        };
        let mut hash_msg = |m: HashMsg, s: &mut Sender| -> Result<(), XferError> {
            match m {
                HashMsg::Chunk { file, chunk, hash } => {
                    own[file as usize][chunk as usize] = Some(hash);
                    if (file as usize) < added {
                        s.set_chunk_hash(file, chunk, hash);
                    }
                    Ok(())
                }
                HashMsg::Error(e) => Err(failed!("{e}")),
            }
        };
        // Never spin: sleeping at least a quarter millisecond lets the sender's pacing catch up by up to
        // one burst on waking, which then leaves in GSO batches (spinning per datagram cost a core).
        let w = wait.clamp(
            min_sleep(s.rate().pacing_rate(), p.options.block_size, short_bursts),
            Duration::from_millis(50),
        );
        // once the hashing thread is done its channel is disconnected and would be ready at once, every
        // time: wait on the control link alone then (selecting on it spun a core)
        let never = crossbeam_channel::never();
        let hashes = if hashes_open { hrx } else { &never };
        // the same for the feedback reader, should it end early
        let never_fb = crossbeam_channel::never();
        let feedback = if feedback_open { frx } else { &never_fb };
        let mut first_fb = None;
        select! {
            recv(link.rx) -> m => if let Ok(m) = m { handle(m, s)? },
            recv(feedback) -> m => match m {
                Ok(f) => first_fb = Some(f),
                Err(_) => feedback_open = false,
            },
            recv(hashes) -> m => match m {
                Ok(m) => hash_msg(m, s)?,
                Err(_) => hashes_open = false,
            },
            default(w) => {},
        }
        // drain whatever else is waiting
        while let Ok(m) = link.rx.try_recv() {
            handle(m, s)?;
        }
        for f in first_fb
            .into_iter()
            .chain(std::iter::from_fn(|| frx.try_recv().ok()))
        {
            heard = true;
            s.handle_feedback_datagram(Instant::now(), f);
            if let Some(t) = trace.as_mut() {
                t.line(s, out.read_wait, bursts);
            }
        }
        while hashes_open {
            match hrx.try_recv() {
                Ok(m) => hash_msg(m, s)?,
                Err(crossbeam_channel::TryRecvError::Empty) => break,
                Err(crossbeam_channel::TryRecvError::Disconnected) => hashes_open = false,
            }
        }
        let now = Instant::now();
        if s.poll_timeout().is_some_and(|t| t <= now) {
            s.handle_timeout(now);
        }
    }
}

/// A trace of the rate control, one CSV line per control message from the receiver, written when
/// `VLBIFLOW_XFER_TRACE` names a file (for tuning and for reports of a misbehaving path).
struct RateTrace {
    out: std::io::BufWriter<std::fs::File>,
    t0: Instant,
}

impl RateTrace {
    fn from_env() -> Option<RateTrace> {
        let path = std::env::var_os("VLBIFLOW_XFER_TRACE").filter(|p| !p.is_empty())?;
        let file = match std::fs::File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "xfer: VLBIFLOW_XFER_TRACE: cannot create {}: {e}",
                    path.to_string_lossy()
                );
                return None;
            }
        };
        let mut out = std::io::BufWriter::new(file);
        use std::io::Write;
        let _ = writeln!(
            out,
            "t_s,phase,cycle,pacing_mbps,btl_bw_mbps,cap_mbps,sample_mbps,cwnd_mb,min_rtt_ms,queue_ms,random_loss,datagrams,retransmits,reported_lost,inflight_mb,late_ms,window_ms,read_wait_ms,bursts,loss_comp"
        );
        Some(RateTrace {
            out,
            t0: Instant::now(),
        })
    }

    fn line(&mut self, s: &Sender, read_wait: Duration, bursts: Bursts) {
        use std::io::Write;
        let r = s.rate().state();
        let st = s.stats();
        let mb = |x: f64| x * 8.0 / 1e6;
        let _ = writeln!(
            self.out,
            "{:.4},{},{},{:.1},{:.1},{},{:.1},{},{},{:.2},{:.5},{},{},{},{:.2},{:.1},{:.1},{:.1},{},{:.5}",
            self.t0.elapsed().as_secs_f64(),
            r.phase,
            r.cycle,
            mb(r.pacing),
            mb(r.btl_bw),
            r.cap.map_or(String::new(), |c| format!("{:.1}", mb(c))),
            mb(r.sample),
            r.cwnd.map_or(String::new(), |c| format!("{:.2}", c as f64 / 1e6)),
            r.min_rtt
                .map_or(String::new(), |d| format!("{:.2}", d.as_secs_f64() * 1e3)),
            r.queue.as_secs_f64() * 1e3,
            r.random_loss,
            st.datagrams,
            st.retransmits,
            st.reported_lost,
            s.inflight_bytes() as f64 / 1e6,
            st.late_us as f64 / 1e3,
            st.window_us as f64 / 1e3,
            read_wait.as_secs_f64() * 1e3,
            bursts.name(),
            r.loss_comp,
        );
    }
}
