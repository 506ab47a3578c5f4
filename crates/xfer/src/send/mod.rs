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
mod outcome;
mod output;
mod read_ahead;
mod trace;
mod window;

pub use outcome::{SendOutcome, SendParams, SendSummary};
pub use output::GSO_ENV;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::bounded;
use vlbiflow_udp::{open_udp, UdpConfig};
use vlbiflow_xfer_proto::timing::MAX_BURST;
use vlbiflow_xfer_proto::wire::{derive_data_key, derive_feedback_key, Feedback};
use vlbiflow_xfer_proto::{Sender, SenderConfig};

use crate::error::{failed, XferError};
use crate::link::Link;
use crate::progress::Progress;
use crate::session::Have;
use crate::source::SourceSet;
use data::{DataSetup, DataThread};
use feedback::FeedbackReader;
use hash::{HashMsg, Hasher};

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
