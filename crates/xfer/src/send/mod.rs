//! The sending data plane of one transfer.
//!
//! Threads: this one (the data thread) owns the protocol's [`Sender`]: it takes control messages from the
//! link, asks the sender for datagrams, reads their payload straight into a GSO buffer, seals and sends
//! them with one `sendmmsg` per batch (UDP GSO: the kernel cuts each message into datagrams), and sleeps
//! until the sender's next deadline. A hashing thread reads every chunk ahead of the data cursor at disk
//! speed (which also warms the page cache for the data thread) and hands the hashes over; files the
//! receiver already holds in part are added to the sender once both sides' hashes of those chunks are
//! known, so that only chunks that differ or are missing move.

mod data;
mod feedback;
mod hash;
mod output;
mod read_ahead;
mod trace;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::bounded;
use serde::Serialize;
use vlbiflow_udp::{open_udp, UdpConfig};
use vlbiflow_xfer_proto::timing::MAX_BURST;
use vlbiflow_xfer_proto::wire::{derive_data_key, derive_feedback_key, Feedback};
use vlbiflow_xfer_proto::{RateConfig, Sender, SenderConfig, SenderStats};

use crate::error::{failed, XferError};
use crate::link::Link;
use crate::progress::Progress;
use crate::session::{Committed, Have, Options, ReceiverReport};
use crate::share::RateCap;
use crate::source::SourceSet;
use data::{DataSetup, DataThread};
use feedback::FeedbackReader;
use hash::{HashMsg, Hasher};

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

/// A completed push as `--json` prints it: what the command's JSON output holds, field for field.
#[derive(Debug, Clone, Serialize)]
pub struct SendSummary<'a> {
    /// Always `true` (a failed transfer prints the error instead).
    pub verified: bool,
    /// Each file synced under its final name, with its BLAKE3.
    pub files: &'a [Committed],
    pub bytes_total: u64,
    pub bytes_already_there: u64,
    pub bytes_sent: u64,
    pub datagrams: u64,
    pub retransmits: u64,
    pub chunk_resends: u64,
    pub rate_cuts_queue: u64,
    pub rate_cuts_loss: u64,
    pub rate_trims_queue: u64,
    pub feedback_datagrams: u64,
    pub feedback_rejected: u64,
    pub bytes_read_direct: u64,
    pub feedback_stale: u64,
    pub resent_unreported: u64,
    pub pacing_late_ms: f64,
    pub pacing_window_ms: f64,
    pub read_wait_ms: f64,
    pub realtime: bool,
    pub seconds: f64,
    pub verified_seconds: f64,
    /// New data over the wall time, bits/s.
    pub goodput_bps: f64,
    pub receiver: ReceiverReport,
}

impl SendOutcome {
    /// New data (not found at the destination) over the wall time, bits/s, for files of `total` bytes.
    pub fn goodput_bps(&self, total: u64) -> f64 {
        (total - self.bytes_resumed) as f64 * 8.0 / self.seconds.max(1e-9)
    }

    /// What `--json` prints of a push of files of `total` bytes.
    pub fn summary(&self, total: u64) -> SendSummary<'_> {
        let st = &self.stats;
        SendSummary {
            verified: true,
            files: &self.committed,
            bytes_total: total,
            bytes_already_there: self.bytes_resumed,
            bytes_sent: st.bytes,
            datagrams: st.datagrams,
            retransmits: st.retransmits,
            chunk_resends: st.chunk_resends,
            rate_cuts_queue: st.rate_cuts_queue,
            rate_cuts_loss: st.rate_cuts_loss,
            rate_trims_queue: st.rate_trims_queue,
            feedback_datagrams: self.feedback_datagrams,
            feedback_rejected: self.feedback_rejected,
            bytes_read_direct: self.bytes_read_direct,
            feedback_stale: st.stale_feedback,
            resent_unreported: st.unreported,
            pacing_late_ms: st.late_us as f64 / 1e3,
            pacing_window_ms: st.window_us as f64 / 1e3,
            read_wait_ms: self.read_wait_seconds * 1e3,
            realtime: self.realtime,
            seconds: self.seconds,
            verified_seconds: self.verified_seconds,
            goodput_bps: self.goodput_bps(total),
            receiver: self.receiver,
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
    let s = Sender::new(sc);
    let only_held = s.derives_chunk_hashes();

    let (ftx, frx) = bounded::<Feedback>(1024);
    let fstop = Arc::new(AtomicBool::new(false));
    let freader = {
        let rsock = sock
            .try_clone()
            .map_err(|e| failed!("data socket to {}: {e}", p.dest))?;
        let reader = FeedbackReader {
            sock: rsock,
            key: derive_feedback_key(&p.secret, p.transfer_id),
            transfer_id: p.transfer_id,
            stop: fstop.clone(),
            out: ftx,
        };
        let realtime = p.realtime;
        std::thread::Builder::new()
            .name("xfer-feedback".into())
            .spawn(move || {
                let _rt = crate::realtime_class(realtime, "the feedback reader");
                reader.run()
            })
            .map_err(|e| failed!("starting the feedback reader: {e}"))?
    };

    let cursor = Arc::new(AtomicU64::new(0));
    let hstop = Arc::new(AtomicBool::new(false));
    let (htx, hrx) = bounded::<HashMsg>(4096);
    let hasher = {
        let hasher = Hasher {
            set: set.clone(),
            chunk_size,
            have: have_chunks.clone(),
            only_held,
            cursor: cursor.clone(),
            stop: hstop.clone(),
            out: htx,
        };
        std::thread::Builder::new()
            .name("xfer-hash".into())
            .spawn(move || hasher.run())
            .expect("spawn hasher")
    };
    let rt = crate::realtime_class(p.realtime, "the sending data thread");
    let realtime = rt.is_some();
    // the data thread owns the hashes' receiving end: the hashing thread's sends fail once it returns
    let result = DataThread::new(DataSetup {
        link,
        set: &set,
        p,
        progress,
        stop,
        s,
        sock: &sock,
        hashes: hrx,
        feedback: frx,
        cursor: &cursor,
        have_chunks: &have_chunks,
    })
    .run();
    drop(rt);
    hstop.store(true, Relaxed);
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
