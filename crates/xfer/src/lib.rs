//! I/O layer of `vlbiflow xfer`: everything around the sans-IO protocol core (`vlbiflow-xfer-proto`).
//!
//! - [`key`]: the pre-shared key file (created by `serve` on first start, mode 0600).
//! - [`secure`]: the control channel: TCP with a Noise `NNpsk0` handshake (mutual authentication by the
//!   pre-shared key, forward secrecy from ephemeral keys), then encrypted frames carrying JSON lines. The
//!   handshake hash is the session secret the per-transfer datagram key is derived from.
//! - [`session`]: the session messages around the protocol's control messages (request, accept or
//!   refuse, resume hashes, commit report).
//! - [`hash`]: chunk hashes as BLAKE3 subtree chaining values, so the whole-file hash is the plain
//!   BLAKE3 hash of the file (what `b3sum` prints) without reading it again.
//! - [`source`]: what is sent: virtual files made of extents of real files (plain files, directory trees,
//!   Mark6/FlexBuff scans read in place).
//! - [`dest`]: where it lands: paths confined to the daemon's roots, `.part` + fsync + rename, manifests.
//! - [`send`], [`recv`]: the data plane of one transfer on dedicated threads (batched GSO sends paced by
//!   the protocol's sender, batched GRO receives).
//! - [`client`], [`daemon`]: the client verbs and the serving daemon.
//! - [`remote`]: `DAEMON[:PORT]/ROOT/PATH` arguments and the client's state directory.
//! - [`follow`]: `push --follow`, a scan sent while it is recorded.
//!
//! With `--realtime` the data-plane threads (the sender's pacing thread, feedback reader and reading
//! thread; the receiver's receiving and writing threads) run in the real-time class at a low priority
//! ([`vlbiflow_sched`]), so that pacing holds on a loaded host; control, resume hashing and
//! committing stay in the ordinary class.

// One system call rustix does not wrap (`cachestat`, in `source`) is the only unsafe code, allowed there.
#![deny(unsafe_code)]

pub mod archive;
pub mod client;
pub mod daemon;
pub mod dest;
pub mod error;
pub mod follow;
pub mod hash;
pub mod key;
pub mod link;
pub mod progress;
pub mod recv;
pub mod remote;
pub mod scan;
pub mod secure;
pub mod send;
pub mod session;
pub mod share;
pub mod source;

pub use error::XferError;

/// Puts the calling data-plane thread in the real-time class when `realtime` (`--realtime`) asks for
/// it, until the guard is dropped. The commands check that the class is permitted before a transfer
/// starts ([`check_realtime`]); should it still fail here, the thread goes on in the ordinary class
/// with a warning: a transfer is not given up for its priority.
fn realtime_class(realtime: bool, thread: &str) -> Option<vlbiflow_sched::RealtimeGuard> {
    realtime_class_at(realtime, thread, vlbiflow_sched::DATA_PLANE_PRIORITY)
}

/// [`realtime_class`] for a thread that works in bursts beside the pacing and receiving threads (reading
/// and hashing, writing): a step below them ([`vlbiflow_sched::BULK_PRIORITY`]), so that they take
/// their core back the moment they wake.
/// The class of a thread of bulk work: with `--realtime` the real-time class below the data threads;
/// without it, the ordinary class made nicer than the process ([`vlbiflow_sched::BULK_NICE`]), so
/// that it does not hold the pacing or receiving thread off a core either.
fn realtime_bulk_class(realtime: bool, thread: &str) -> Option<vlbiflow_sched::RealtimeGuard> {
    if !realtime {
        // only a preference: the thread works the same at its process's priority
        let _ = vlbiflow_sched::nicer(vlbiflow_sched::BULK_NICE);
        return None;
    }
    realtime_class_at(realtime, thread, vlbiflow_sched::BULK_PRIORITY)
}

fn realtime_class_at(realtime: bool, thread: &str, priority: i32) -> Option<vlbiflow_sched::RealtimeGuard> {
    if !realtime {
        return None;
    }
    match vlbiflow_sched::enter_realtime(priority) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("vlbiflow: warning: --realtime: {thread} stays in the ordinary class: {e}");
            None
        }
    }
}

/// Whether `--realtime` can be honoured: the error (a usage error) says what to grant.
pub fn check_realtime() -> Result<(), XferError> {
    vlbiflow_sched::check_realtime(vlbiflow_sched::DATA_PLANE_PRIORITY)
        .map_err(|e| XferError::Usage(format!("--realtime: {e}")))
}
pub use key::Key;

/// Current UTC time to the second, RFC 3339 (`2026-11-29T00:20:10Z`): manifests, the archive, logs.
pub fn utc_now() -> String {
    let now = vlbiflow_formats::time::UtcTime::now();
    vlbiflow_formats::time::UtcTime::from_unix(now.unix_seconds, 0).to_iso8601()
}
pub use progress::Progress;

/// Raises this process's soft limit on open files to its hard limit, once. A receiver keeps open each
/// file still arriving or waiting for its commit (with many small files, hundreds), and the soft limit
/// is often 1,024 where the hard one is far higher; past it a transfer fails with "Too many open files"
/// (found with 10,000 files of 4 KiB: 6,249 committed, then the error). Where it cannot be raised it is
/// left as it is.
pub fn raise_open_file_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let l = getrlimit(Resource::Nofile);
        if l.current < l.maximum {
            let mut raised = l;
            raised.current = l.maximum;
            let _ = setrlimit(Resource::Nofile, raised);
        }
    });
}
