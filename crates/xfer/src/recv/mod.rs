//! The receiving data plane of one transfer.
//!
//! Before anything is accepted, [`plan`] checks the request against the destination without writing:
//! names, what exists already (a `.part` from an interrupted run is resumed, a complete file of the same
//! size is re-verified, anything else is refused unless overwriting was asked). Then [`run_receiver`]:
//! a hashing thread re-reads what is already on disk at disk speed and reports the hash of each complete
//! chunk (`have`); the data thread receives datagrams in batches (`recvmmsg`, GRO), hands them to the
//! protocol's [`Receiver`] and gathers what it accepts into the chunk's buffer in memory (see `stage::Stages`;
//! without a free one, or where the file system has no `O_DIRECT`, it writes it straight to the `.part`
//! file); a verifier thread writes each verified staged chunk with `O_DIRECT` (and, where chunk hashes are
//! not merged from the datagrams' block digests, hashes each completed chunk as written); a finalizer
//! syncs each finished file, renames it to its final name and writes its manifest, after every write of
//! it. The sender is told `committed` only when every file is synced.
//!
//! One module per thread: [`plan`] (before the transfer), `data` (the receiving data thread), `verify`
//! (writing staged chunks, hashing, reading back), `commit` (syncing and renaming), `flush` (early
//! `fdatasync`), `resume` (re-reading what is already there); `stage` holds the data thread's open files
//! and staged chunks. They talk through the typed messages of those modules over channels.

mod commit;
mod data;
mod flush;
mod outcome;
mod plan;
mod resume;
mod stage;
mod verify;

use std::fs::File;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Receiver as ChanRx};
use vlbiflow_xfer_proto::wire::{derive_data_aead_key, derive_data_key, derive_feedback_key};
use vlbiflow_xfer_proto::{Receiver, ReceiverConfig};

use crate::error::{failed, XferError};
use crate::link::Link;
use crate::progress::Progress;
use crate::session::{Committed, Session};
use crate::share::CapWatch;
use crate::source::AlignedBuf;

use commit::{Committer, Finalize};
use data::{DataChannels, DataSetup, DataThread};
use flush::{Flusher, FLUSH_EVERY};
pub use outcome::{RecvOutcome, RecvParams, RecvSummary};
pub use plan::{plan, FilePlan, Plan, Resume};
use resume::{resume_store, Resumer};
use stage::Stages;
use verify::{ChunkReport, Job, Verifier, VerifierIo};

/// The threads behind the data thread: verifier, committer, flusher.
struct BackEnd {
    verifier: JoinHandle<()>,
    committer: JoinHandle<()>,
    flusher: JoinHandle<u64>,
    written_direct: Arc<AtomicU64>,
    read_back: Arc<AtomicU64>,
}

/// The data thread's ends of the channels to the [`BackEnd`], and its staged chunks (whose buffers the
/// verifier gives back).
struct BackEndEnds {
    jobs: crossbeam_channel::Sender<Job>,
    reports: ChanRx<ChunkReport>,
    commits: ChanRx<Result<Committed, String>>,
    stages: Stages,
}

impl BackEnd {
    fn start(plan: &Arc<Plan>, p: &RecvParams) -> (BackEnd, BackEndEnds) {
        let cs = plan.options.chunk_size;
        let (job_tx, job_rx) = unbounded::<Job>();
        let (report_tx, report_rx) = unbounded::<ChunkReport>();
        let (back_tx, back_rx) = unbounded::<AlignedBuf>();
        let direct_ok = Arc::new(AtomicBool::new(true));
        let written_direct = Arc::new(AtomicU64::new(0));
        let read_back = Arc::new(AtomicU64::new(0));
        let stages = Stages::new(cs, plan.options.block_size, back_rx, direct_ok.clone());
        let (fin_tx, fin_rx) = unbounded::<Finalize>();
        let (flush_tx, flush_rx) = unbounded::<Arc<File>>();
        let flusher = std::thread::Builder::new()
            .name("xfer-flush".into())
            .spawn(move || Flusher::new(flush_rx, FLUSH_EVERY).run())
            .expect("spawn flusher");
        let io = VerifierIo {
            out: report_tx,
            back: back_tx,
            direct_ok,
            written_direct: written_direct.clone(),
            read_back: read_back.clone(),
            fin: fin_tx,
            flush: flush_tx,
        };
        // the verifier writes the staged chunks and returns their buffers, which the receiving thread
        // waits for when none is free: it runs in the real-time class too, a step below the receiving
        // thread
        let realtime = p.realtime;
        let verifier = std::thread::Builder::new()
            .name("xfer-verify".into())
            .spawn(move || {
                let _rt = crate::realtime_bulk_class(realtime, "the verifying thread");
                Verifier::new(cs, job_rx, io).run()
            })
            .expect("spawn verifier");
        let (commit_tx, commit_rx) = unbounded::<Result<Committed, String>>();
        let committer = Committer {
            plan: plan.clone(),
            jobs: fin_rx,
            results: commit_tx,
            source: p.source.clone(),
        };
        let committer = std::thread::Builder::new()
            .name("xfer-commit".into())
            .spawn(move || committer.run())
            .expect("spawn finalizer");
        let ends = BackEndEnds {
            jobs: job_tx,
            reports: report_rx,
            commits: commit_rx,
            stages,
        };
        (
            BackEnd {
                verifier,
                committer,
                flusher,
                written_direct,
                read_back,
            },
            ends,
        )
    }

    /// Waits for the threads once the data thread has closed its channel to the verifier: the verifier
    /// ends, then the committing thread and the flusher (the verifier held their channels). Returns the
    /// bytes written with `O_DIRECT` and read back.
    fn join(self) -> (u64, u64) {
        let _ = self.verifier.join();
        let _ = self.committer.join();
        let _ = self.flusher.join();
        (self.written_direct.load(Relaxed), self.read_back.load(Relaxed))
    }
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
    // a ceiling set before the data starts goes to the sender first (the ceiling of a pull's client;
    // a receiving daemon gave it in its accept as well, and the sender takes the same ceiling twice)
    if let Some(c) = p.rate_cap.as_deref().and_then(crate::share::RateCap::get) {
        r.set_rate_cap(Some(c));
    }

    // resume hashes of what is on disk
    let store = resume_store(&plan);
    let hstop = Arc::new(AtomicBool::new(false));
    let (sess_tx, sess_rx) = unbounded::<Session>();
    let resumer = if plan.files.iter().any(|f| f.resume != Resume::Nothing) {
        progress.set_phase("re-verifying what is already here");
        let resumer = Resumer {
            plan: plan.clone(),
            link_tx: sess_tx,
            store: store.clone(),
            stop: hstop.clone(),
        };
        Some(
            std::thread::Builder::new()
                .name("xfer-resume".into())
                .spawn(move || resumer.run())
                .expect("spawn resume hasher"),
        )
    } else {
        drop(sess_tx);
        None
    };

    let (back, ends) = BackEnd::start(&plan, p);
    let rt = crate::realtime_class(p.realtime, "the receiving data thread");
    let realtime = rt.is_some();
    let result = DataThread::new(DataSetup {
        link,
        sock,
        plan: &plan,
        progress,
        stop,
        r,
        aead_key: encrypt.then(|| derive_data_aead_key(&p.secret, p.transfer_id)),
        feedback_key: derive_feedback_key(&p.secret, p.transfer_id),
        transfer_id: p.transfer_id,
        cap: p.rate_cap.as_deref().map(CapWatch::new),
        ch: DataChannels {
            sess: sess_rx,
            jobs: ends.jobs,
            reports: ends.reports,
            commits: ends.commits,
        },
        store,
        stages: ends.stages,
        written_direct: back.written_direct.clone(),
        read_back: back.read_back.clone(),
    })
    .run();
    drop(rt);
    hstop.store(true, Relaxed);
    // the data thread has dropped its end of the verifier's channel
    let (written_direct, read_back) = back.join();
    let result = result.map(|mut o| {
        o.bytes_written_direct = written_direct;
        o.bytes_read_back = read_back;
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
