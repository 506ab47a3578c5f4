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
    /// Index of the first file not yet verified (files are pipelined; this is the one progress shows).
    pub file_index: AtomicU64,
    /// Size of that file.
    pub file_bytes_total: AtomicU64,
    /// Bytes in verified chunks of that file.
    pub file_bytes_verified: AtomicU64,
}

/// Per-file progress: keeps the verified bytes of every file of a transfer (chunk events of several files
/// may interleave) and publishes those of the first file not yet done. Updated per chunk, not per datagram.
#[derive(Debug)]
pub struct FileTracker {
    names: Vec<String>,
    sizes: Vec<u64>,
    verified: Vec<u64>,
    done: Vec<bool>,
    current: usize,
}

impl FileTracker {
    /// Files in transfer order; publishes the first.
    pub fn new(files: impl IntoIterator<Item = (String, u64)>, p: &Progress) -> Self {
        let (names, sizes): (Vec<String>, Vec<u64>) = files.into_iter().unzip();
        let n = names.len();
        let t = FileTracker {
            names,
            sizes,
            verified: vec![0; n],
            done: vec![false; n],
            current: 0,
        };
        t.publish(p);
        t
    }
    /// `bytes` of file `file` verified.
    pub fn verified(&mut self, file: u32, bytes: u64, p: &Progress) {
        if let Some(v) = self.verified.get_mut(file as usize) {
            *v += bytes;
            if file as usize == self.current {
                p.file_bytes_verified.store(*v, Relaxed);
            }
        }
    }
    /// File `file` is complete.
    pub fn done(&mut self, file: u32, p: &Progress) {
        if let Some(d) = self.done.get_mut(file as usize) {
            *d = true;
        }
        while self.current + 1 < self.done.len() && self.done[self.current] {
            self.current += 1;
        }
        self.publish(p);
    }
    fn publish(&self, p: &Progress) {
        if let Some(name) = self.names.get(self.current) {
            p.set_file(name);
            p.file_index.store(self.current as u64, Relaxed);
            p.file_bytes_total.store(self.sizes[self.current], Relaxed);
            p.file_bytes_verified.store(self.verified[self.current], Relaxed);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_tracker_shows_the_first_file_not_done_while_chunks_of_several_interleave() {
        let p = Progress::default();
        let mut t = FileTracker::new([("a".to_string(), 10), ("b".into(), 20), ("c".into(), 5)], &p);
        let show = |p: &Progress| {
            (
                p.file(),
                Progress::get(&p.file_index),
                Progress::get(&p.file_bytes_verified),
                Progress::get(&p.file_bytes_total),
            )
        };
        assert_eq!(show(&p), ("a".into(), 0, 0, 10));
        t.verified(0, 4, &p);
        t.verified(1, 8, &p); // a later file's chunk: not shown yet
        assert_eq!(show(&p), ("a".into(), 0, 4, 10));
        t.verified(2, 5, &p);
        t.done(2, &p); // c completes before b: a is still the one shown
        assert_eq!(show(&p), ("a".into(), 0, 4, 10));
        t.verified(0, 6, &p);
        t.done(0, &p);
        assert_eq!(show(&p), ("b".into(), 1, 8, 20));
        t.verified(1, 12, &p);
        t.done(1, &p); // b done, c was done already: the last file stays shown, complete
        assert_eq!(show(&p), ("c".into(), 2, 5, 5));
        t.verified(7, 1, &p); // out of range: ignored
        t.done(7, &p);
    }
}
