//! Live counters of one transfer, shared between its data thread (writer) and whoever shows progress or
//! exports metrics (readers). Relaxed atomics: a reader sees each counter recent, not a consistent set.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Counters of a transfer in progress.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of all files.
    pub bytes_total: AtomicU64,
    /// Files in the transfer.
    pub files_total: AtomicU64,
    /// Bytes in verified chunks (resumed ones included).
    pub bytes_verified: AtomicU64,
    /// Bytes found already at the destination and verified there (not moved).
    pub bytes_resumed: AtomicU64,
    /// Files completely verified.
    pub files_done: AtomicU64,
    /// Payload bytes sent (sender) or accepted (receiver), retransmissions included.
    pub bytes_moved: AtomicU64,
    /// Datagrams sent or accepted.
    pub datagrams: AtomicU64,
    /// Retransmitted datagrams (sender).
    pub retransmits: AtomicU64,
    /// Datagrams the receiver reported lost.
    pub lost: AtomicU64,
    /// Current pacing rate (sender) or receive rate (receiver), bits/s.
    pub rate_bps: AtomicU64,
    /// Smallest round-trip time seen, µs.
    pub min_rtt_us: AtomicU64,
    /// Datagrams dropped for a bad tag.
    pub bad_tag: AtomicU64,
    /// Datagrams dropped as malformed, of another transfer or for an unknown file.
    pub malformed: AtomicU64,
    /// Duplicate datagrams dropped.
    pub duplicates: AtomicU64,
    /// Chunks resent after a verification mismatch.
    pub chunk_resends: AtomicU64,
    /// What is happening now, for a status line ("hashing what is already there", "sending", ...).
    pub phase: Mutex<String>,
    /// Name of the file being sent or received.
    pub current_file: Mutex<String>,
}

impl Progress {
    /// Sets the phase text.
    pub fn set_phase(&self, s: &str) {
        if let Ok(mut p) = self.phase.lock() {
            s.clone_into(&mut p);
        }
    }
    /// The phase text.
    pub fn phase(&self) -> String {
        self.phase.lock().map(|p| p.clone()).unwrap_or_default()
    }
    /// Sets the current file.
    pub fn set_file(&self, s: &str) {
        if let Ok(mut p) = self.current_file.lock() {
            s.clone_into(&mut p);
        }
    }
    /// The current file.
    pub fn file(&self) -> String {
        self.current_file.lock().map(|p| p.clone()).unwrap_or_default()
    }
    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }
}
