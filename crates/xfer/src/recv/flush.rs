//! The flushing thread of a receive.

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver as ChanRx;

/// How often the flushing thread makes what was written durable while a transfer runs.
pub(super) const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Most files the flushing thread holds open between flushes: with many small files it flushes as soon as
/// it has this many, so that its list never keeps thousands of them open.
const FLUSH_MAX_FILES: usize = 64;

/// The flushing thread: `fdatasync` of each file that had data written, at most every [`FLUSH_EVERY`],
/// while the transfer runs, so that the sync before a file's commit finds little left to do. Without it
/// that sync waited for the whole file's metadata (`O_DIRECT` writes into new extents) and the device's
/// cache: 0.75-1.4 s at the end of a 3 GB push on a VM's disk, a tenth of the transfer. Only a head start:
/// a failed flush is left to the commit's own sync, which fails the transfer if the disk does.
pub(super) struct Flusher {
    /// Files that have new data on their way to the disk (the verifier's).
    files: ChanRx<Arc<File>>,
    every: Duration,
    dirty: Vec<Arc<File>>,
    flushes: u64,
}

impl Flusher {
    pub(super) fn new(files: ChanRx<Arc<File>>, every: Duration) -> Flusher {
        Flusher {
            files,
            every,
            dirty: Vec::new(),
            flushes: 0,
        }
    }

    /// Flushes until the channel closes. Returns how many flushes it made.
    pub(super) fn run(mut self) -> u64 {
        let mut last = Instant::now();
        loop {
            let wait = self.every.saturating_sub(last.elapsed());
            match self.files.recv_timeout(wait) {
                Ok(f) => {
                    if !self.dirty.iter().any(|d| Arc::ptr_eq(d, &f)) {
                        self.dirty.push(f);
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return self.flushes,
            }
            if last.elapsed() >= self.every || self.dirty.len() >= FLUSH_MAX_FILES {
                for f in self.dirty.drain(..) {
                    let _ = f.sync_data();
                    self.flushes += 1;
                }
                last = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::unbounded;

    #[test]
    fn the_flusher_syncs_each_file_with_new_data_once_per_round_and_stops_with_its_channel() {
        let d = tempfile::tempdir().unwrap();
        let a = Arc::new(File::create(d.path().join("a")).unwrap());
        let b = Arc::new(File::create(d.path().join("b")).unwrap());
        let (tx, rx) = unbounded();
        // a round longer than the test: the channel closes before it ends, and the thread stops without
        // flushing (each file's commit syncs it anyway)
        let t = std::thread::spawn(move || Flusher::new(rx, Duration::from_secs(3600)).run());
        for f in [&a, &b, &a, &a] {
            tx.send(f.clone()).unwrap();
        }
        drop(tx);
        assert_eq!(t.join().unwrap(), 0, "no round ended");
        // rounds of no length: each file flushed as its data is announced
        let (tx, rx) = unbounded();
        let t = std::thread::spawn(move || Flusher::new(rx, Duration::ZERO).run());
        for f in [&a, &b, &a] {
            tx.send(f.clone()).unwrap();
        }
        drop(tx);
        assert_eq!(t.join().unwrap(), 3);
    }
}
