//! Live counters of one transfer, shared between its data thread (writer) and whoever shows progress or
//! exports metrics (readers). Relaxed atomics: a reader sees each counter recent, not a consistent set.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// What a progress display shows at one moment: the whole transfer and the first file not yet verified,
/// each with a rate and a time left taken over the last few seconds (not since the start, so that a
/// resume's re-verification or a slow start does not skew them).
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Since the meter started.
    pub elapsed: Duration,
    pub bytes_total: u64,
    pub bytes_verified: u64,
    pub files_done: u64,
    pub files_total: u64,
    /// Payload moved (retransmissions included), bits/s over the window.
    pub rate_bps: f64,
    /// Time left at the rate bytes were verified over the window (`None` while nothing was verified in it).
    pub eta: Option<Duration>,
    /// Datagrams reported lost per datagram sent or accepted, %, since the start.
    pub loss_pct: f64,
    /// Datagrams sent again per datagram sent, %, since the start.
    pub retransmit_pct: f64,
    /// The first file not yet verified: index (from 0), name, size, bytes verified.
    pub file_index: u64,
    pub file_name: String,
    pub file_bytes_total: u64,
    pub file_bytes_verified: u64,
    /// Bits/s at which that file's bytes were verified over the window (the whole transfer's rate when
    /// it became the first file within the window).
    pub file_rate_bps: f64,
    /// Time left for that file at that rate.
    pub file_eta: Option<Duration>,
    pub phase: String,
}

/// Reads a [`Progress`] now and then (a display's refresh) and keeps the readings of the last
/// [`Meter::WINDOW`] for the rates of its [`Snapshot`]s.
#[derive(Debug)]
pub struct Meter {
    t0: Instant,
    /// (when, bytes moved, bytes verified, file index, file bytes verified)
    samples: VecDeque<(Instant, u64, u64, u64, u64)>,
}

impl Meter {
    /// Rates are taken over this long.
    pub const WINDOW: Duration = Duration::from_secs(5);

    /// A meter started at `now`.
    pub fn new(now: Instant) -> Self {
        Meter {
            t0: now,
            samples: VecDeque::new(),
        }
    }

    /// Reads `p` at `now` (times in order).
    pub fn read(&mut self, now: Instant, p: &Progress) -> Snapshot {
        let g = Progress::get;
        let (moved, verified) = (g(&p.bytes_moved), g(&p.bytes_verified));
        let (file_index, file_verified) = (g(&p.file_index), g(&p.file_bytes_verified));
        self.samples
            .push_back((now, moved, verified, file_index, file_verified));
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) >= Self::WINDOW {
            self.samples.pop_front();
        }
        let (t, m0, v0, fi0, fv0) = self.samples[0];
        let dt = now.duration_since(t).as_secs_f64();
        let per_s = |d: u64| if dt > 0.0 { d as f64 / dt } else { 0.0 };
        let rate = per_s(moved.saturating_sub(m0));
        let vrate = per_s(verified.saturating_sub(v0));
        let frate = if fi0 == file_index {
            per_s(file_verified.saturating_sub(fv0))
        } else {
            vrate
        };
        let left = |total: u64, done: u64, r: f64| {
            (r > 0.0).then(|| Duration::from_secs_f64(total.saturating_sub(done) as f64 / r))
        };
        let (total, file_total) = (g(&p.bytes_total), g(&p.file_bytes_total));
        let datagrams = g(&p.datagrams).max(1) as f64;
        Snapshot {
            elapsed: now.duration_since(self.t0),
            bytes_total: total,
            bytes_verified: verified,
            files_done: g(&p.files_done),
            files_total: g(&p.files_total),
            rate_bps: rate * 8.0,
            eta: left(total, verified, vrate),
            loss_pct: g(&p.lost) as f64 / datagrams * 100.0,
            retransmit_pct: g(&p.retransmits) as f64 / datagrams * 100.0,
            file_index,
            file_name: p.file(),
            file_bytes_total: file_total,
            file_bytes_verified: file_verified,
            file_rate_bps: frate * 8.0,
            file_eta: left(file_total, file_verified, frate),
            phase: p.phase(),
        }
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

    #[test]
    fn a_meter_takes_rates_and_times_left_over_its_window() {
        let p = Progress::default();
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        p.bytes_total.store(1_000_000_000, Relaxed);
        p.files_total.store(2, Relaxed);
        let mut tr = FileTracker::new(
            [("a".to_string(), 400_000_000), ("b".to_string(), 600_000_000)],
            &p,
        );
        let s = m.read(t0, &p);
        assert_eq!(
            (s.rate_bps, s.eta, s.file_eta),
            (0.0, None, None),
            "nothing to go by yet"
        );
        // a resume found 300 MB of file a there at once: the rates start after it
        p.bytes_verified.store(300_000_000, Relaxed);
        tr.verified(0, 300_000_000, &p);
        m.read(t0 + Duration::from_secs(1), &p);
        // then 10 MB/s verified and moved for 20 s, with 1% of datagrams lost and 2% sent again
        let mut snap = None;
        for i in 1..=20u64 {
            p.bytes_verified.store(300_000_000 + i * 10_000_000, Relaxed);
            p.bytes_moved.store(i * 10_000_000, Relaxed);
            p.datagrams.store(i * 1000, Relaxed);
            p.lost.store(i * 10, Relaxed);
            p.retransmits.store(i * 20, Relaxed);
            if i <= 10 {
                tr.verified(0, 10_000_000, &p);
            } else {
                if i == 11 {
                    tr.done(0, &p);
                }
                tr.verified(1, 10_000_000, &p);
            }
            snap = Some(m.read(t0 + Duration::from_secs(1 + i), &p));
        }
        let s = snap.take().unwrap();
        assert_eq!(s.bytes_verified, 500_000_000);
        assert!((s.rate_bps - 80e6).abs() < 1.0, "{}", s.rate_bps);
        assert_eq!(s.eta, Some(Duration::from_secs(50)), "500 MB left at 10 MB/s");
        assert!((s.loss_pct - 1.0).abs() < 1e-9 && (s.retransmit_pct - 2.0).abs() < 1e-9);
        assert_eq!((s.file_index, s.file_name.as_str()), (1, "b"));
        assert_eq!(s.file_bytes_verified, 100_000_000);
        assert!((s.file_rate_bps - 80e6).abs() < 1.0, "{}", s.file_rate_bps);
        assert_eq!(s.file_eta, Some(Duration::from_secs(50)));
        assert_eq!(s.elapsed, Duration::from_secs(21));
        // a stall: the window empties of progress, and the time left is unknown rather than a guess
        for i in 22..=30u64 {
            snap = Some(m.read(t0 + Duration::from_secs(i), &p));
        }
        let s = snap.unwrap();
        assert_eq!((s.rate_bps, s.eta), (0.0, None));
    }
}
