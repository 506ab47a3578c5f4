//! The sender's read-ahead: a reading thread reads the windows after the one being sent while the data
//! thread paces (and, when blocks are BLAKE3 subtrees, a hashing thread computes the digests of what it
//! read past the page cache), so that the pacing loop does not stop for a read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender as Chan};
use vlbiflow_xfer_proto::timing::{ReadDepth, DEPTH};

use super::window::{fill, finish_digests, next_start, FillMode, Held, Seg, Win, READ_WAIT};
use crate::source::{FdCache, SourceSet};

/// A window read by the reading thread.
pub(super) struct Filled {
    pub(super) win: Win,
    start: (usize, u64),
    ok: bool,
    /// The [`Cmd::Seek`] it was read after.
    epoch: u64,
}

/// What the data thread tells the reading thread.
enum Cmd {
    /// Read on from here (the data thread went elsewhere); windows of older epochs are dropped.
    Seek { start: (usize, u64), epoch: u64 },
    /// Buffers for another window.
    Free(Win),
}

impl Cmd {
    /// The reading thread's side: its free buffers, where it reads next, and its epoch.
    fn apply(self, free: &mut Vec<Win>, at: &mut Option<(usize, u64)>, epoch: &mut u64) {
        match self {
            Cmd::Seek { start, epoch: e } => {
                *at = Some(start);
                *epoch = e;
            }
            Cmd::Free(w) => free.push(w),
        }
    }
}

/// The hashing thread of the read-ahead: the digests [`fill`] left to it (see [`FillMode::defer`]).
struct Digester {
    input: Receiver<Filled>,
    out: Chan<Filled>,
    sub: Option<u64>,
}

impl Digester {
    /// Ends when the reading thread ends or the data thread stops taking windows.
    fn run(self) {
        for mut got in self.input.iter() {
            if got.ok {
                finish_digests(&mut got.win, self.sub);
            }
            if self.out.send(got).is_err() {
                return;
            }
        }
    }
}

/// The reading thread: windows read in order from where the data thread asked, into the buffers it
/// handed over.
struct Reader {
    set: Arc<SourceSet>,
    held: Held,
    mode: FillMode,
    cmds: Receiver<Cmd>,
    out: Chan<Filled>,
    /// Bytes read with `O_DIRECT`.
    direct: Arc<AtomicU64>,
    fds: FdCache,
    free: Vec<Win>,
    /// Where the next window starts.
    at: Option<(usize, u64)>,
    epoch: u64,
}

impl Reader {
    fn run(mut self) {
        loop {
            // every command that is there, then a window if there is one to read and room for it; else
            // wait for a command (the channel closes when the data thread is done)
            while let Ok(c) = self.cmds.try_recv() {
                c.apply(&mut self.free, &mut self.at, &mut self.epoch);
            }
            let start = self.at.filter(|s| s.0 < self.set.files.len());
            let Some((start, mut win)) = start.zip(self.free.pop()) else {
                match self.cmds.recv() {
                    Ok(c) => c.apply(&mut self.free, &mut self.at, &mut self.epoch),
                    Err(_) => return,
                }
                continue;
            };
            let (set, held) = (&*self.set, &self.held);
            let ok = match fill(set, held, &mut self.fds, &mut win, start, self.mode) {
                Ok(d) => {
                    self.direct.fetch_add(d, Relaxed);
                    true
                }
                Err(_) => false,
            };
            // on an error the data thread reads the window itself and reports it
            self.at = win
                .segs
                .last()
                .filter(|_| ok)
                .map(|l| next_start(set, held, l.file, l.offset + l.len as u64));
            let done = Filled {
                win,
                start,
                ok,
                epoch: self.epoch,
            };
            if self.out.send(done).is_err() {
                return;
            }
        }
    }
}

/// The reading thread: it reads up to [`DEPTH`] windows after the one being sent while the data thread
/// paces, in order, each into buffers the data thread handed back, so that the pacing loop does not stop
/// for a read (an 8 MiB read took 2-3 ms, longer than the one burst the pacer may catch up by: the sender
/// fell 6% short of a 2 Gb/s ceiling on an idle loopback), nor for a disk that is slow for a moment.
pub(super) struct ReadAhead {
    tx: Option<Chan<Cmd>>,
    rx: Receiver<Filled>,
    /// Buffers the reading thread holds (free or filled and not yet taken).
    pub(super) owned: usize,
    /// How many it is given (see [`ReadDepth`]).
    pub(super) depth: ReadDepth,
    /// The current epoch: windows of others were asked for before the data thread went elsewhere.
    epoch: u64,
    /// Where the reading thread's next window of this epoch starts (the window after the one the data
    /// thread moved to last), when it is reading on in order there; `None` once the data thread went
    /// elsewhere or read a window itself (the next request seeks).
    at: Option<(usize, u64)>,
    pub(super) spare: Option<Win>,
    thread: Option<JoinHandle<()>>,
    hasher: Option<JoinHandle<()>>,
}

impl ReadAhead {
    pub(super) fn new(
        set: Arc<SourceSet>,
        mode: FillMode,
        held: Held,
        direct: Arc<AtomicU64>,
        realtime: bool,
    ) -> ReadAhead {
        let sub = mode.sub;
        let (tx, cmd_rx) = bounded::<Cmd>(2 * DEPTH + 2);
        let (done_tx, rx) = bounded::<Filled>(DEPTH + 1);
        // the hashing thread, between the reading thread and the data thread, when there are digests
        // to compute: it hashes what the reading thread read with O_DIRECT while that thread waits for
        // the disk's next window, and passes the rest on as it came (in order either way)
        let (read_tx, hasher) = match sub {
            Some(_) => {
                let (read_tx, read_rx) = bounded::<Filled>(DEPTH + 1);
                let digester = Digester {
                    input: read_rx,
                    out: done_tx.clone(),
                    sub,
                };
                let hasher = std::thread::Builder::new()
                    .name("xfer-hash".into())
                    .spawn(move || {
                        let _rt = crate::realtime_bulk_class(realtime, "the hashing thread");
                        digester.run()
                    })
                    .ok();
                match hasher {
                    Some(h) => (read_tx, Some(h)),
                    None => (done_tx.clone(), None),
                }
            }
            None => (done_tx.clone(), None),
        };
        let reader = Reader {
            mode: FillMode {
                defer: hasher.is_some(),
                ..mode
            },
            set,
            held,
            cmds: cmd_rx,
            out: read_tx,
            direct,
            fds: FdCache::default(),
            free: Vec::with_capacity(DEPTH + 1),
            at: None,
            epoch: 0,
        };
        drop(done_tx);
        let thread = std::thread::Builder::new()
            .name("xfer-read".into())
            .spawn(move || {
                let _rt = crate::realtime_bulk_class(realtime, "the reading thread");
                reader.run()
            })
            .ok();
        ReadAhead {
            // without the thread every window is read by the data thread
            tx: thread.as_ref().map(|_| tx),
            rx,
            owned: 0,
            depth: ReadDepth::default(),
            epoch: 0,
            at: None,
            spare: None,
            thread,
            hasher,
        }
    }

    /// The window read ahead if the next one starts at `start` and was read without error; otherwise
    /// `None` (the caller reads it, and reports any error). Windows read before the last seek are passed
    /// over and their buffers go back to the reading thread.
    pub(super) fn take(&mut self, start: (usize, u64)) -> std::io::Result<Option<Filled>> {
        // the reading thread reads on in order from `at`: anything else is a jump, not worth a wait
        if self.at != Some(start) {
            self.at = None;
            return Ok(None);
        }
        let waited = self.rx.is_empty();
        loop {
            let got = match self.rx.recv_timeout(READ_WAIT) {
                Ok(got) => got,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("the disk returned no data for {}s", READ_WAIT.as_secs()),
                    ))
                }
                // the reading thread is gone (it cannot be, short of a bug): the data thread reads
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    self.tx = None;
                    self.at = None;
                    return Ok(None);
                }
            };
            self.owned -= 1;
            if got.epoch != self.epoch {
                self.give(got.win);
                continue;
            }
            if got.ok && got.start == start {
                self.took(waited);
                return Ok(Some(got));
            }
            // unreadable: the caller reads it again and reports the error
            self.at = None;
            self.spare = Some(got.win);
            return Ok(None);
        }
    }

    /// A window read ahead was taken, after a wait for it or not: the depth doubles (up to [`DEPTH`]) on
    /// a wait that was not the first window's after a seek.
    fn took(&mut self, waited: bool) {
        self.depth.took(waited);
    }

    /// Buffers for a window read on the spot: the spare ones, else new ones (a few per transfer).
    pub(super) fn spare(&mut self) -> Win {
        self.spare.take().unwrap_or_else(Win::new)
    }

    /// Hands buffers to the reading thread (dropped when it is gone).
    fn give(&mut self, win: Win) {
        if let Some(tx) = &self.tx {
            if tx.try_send(Cmd::Free(win)).is_ok() {
                self.owned += 1;
            }
        }
    }

    /// After the data thread moved to the window `current` describes: `win`'s buffers (and, at first,
    /// new ones, up to [`DEPTH`]) go to the reading thread, which reads on after `current`, told so if
    /// it was not reading there already (nothing when `current` ends the data).
    pub(super) fn request(&mut self, set: &SourceSet, held: &Held, win: Win, current: &[Seg]) {
        let next = current
            .last()
            .map(|l| next_start(set, held, l.file, l.offset + l.len as u64))
            .filter(|s| s.0 < set.files.len());
        let Some(next) = next.filter(|_| self.tx.is_some()) else {
            self.at = None;
            self.spare = Some(win);
            return;
        };
        if self.at.is_none() {
            self.depth.seek();
            self.epoch += 1;
            let seek = Cmd::Seek {
                start: next,
                epoch: self.epoch,
            };
            if self.tx.as_ref().is_some_and(|tx| tx.try_send(seek).is_err()) {
                self.spare = Some(win);
                return;
            }
        }
        self.at = Some(next);
        self.give(win);
        while self.owned < self.depth.get() {
            self.give(Win::new());
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // closing both channels ends the reading thread after its current read, and then the hashing
        // thread (its input closed, or its output)
        self.tx = None;
        self.rx = crossbeam_channel::never();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.hasher.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::DirectReads;
    use vlbiflow_xfer_proto::timing::DEPTH_START;

    fn files(dir: &std::path::Path, sizes: &[u64]) -> SourceSet {
        super::super::output::tests::files(dir, sizes)
    }

    /// The reading thread gets [`DEPTH_START`] windows, twice as many each time the data thread had to wait
    /// for one, up to [`DEPTH`]; the wait for the first window after a seek does not count.
    #[test]
    fn the_read_ahead_deepens_only_on_waits_after_the_first_window() {
        let dir = tempfile::tempdir().unwrap();
        let set = Arc::new(files(dir.path(), &[100, 100]));
        let held = Held::default();
        let mode = FillMode {
            sub: None,
            defer: false,
            direct: DirectReads::On,
        };
        let mut a = ReadAhead::new(set.clone(), mode, held.clone(), Arc::default(), false);
        assert_eq!(a.depth.get(), DEPTH_START);
        a.took(true);
        assert_eq!(a.depth.get(), DEPTH_START, "the first window's wait");
        a.took(false);
        assert_eq!(a.depth.get(), DEPTH_START);
        a.took(true);
        assert_eq!(a.depth.get(), 2 * DEPTH_START);
        for _ in 0..8 {
            a.took(true);
        }
        assert_eq!(a.depth.get(), DEPTH);
        // the data thread moves to file 0 with no read ahead there: the reading thread is sent to file 1
        // (a seek) and given the buffers it is owed; the wait for that seek's first window does not count
        a.depth = ReadDepth::default();
        let seg = Seg {
            file: 0,
            offset: 0,
            len: 100,
            at: 0,
            size: 100,
            dig_from: 0,
            dig: 0,
            dig_n: 0,
            pending: false,
        };
        a.request(&set, &held, Win::new(), &[seg]);
        assert_eq!(a.at, Some((1, 0)));
        assert_eq!(a.owned, DEPTH_START);
        a.took(true);
        assert_eq!(a.depth.get(), DEPTH_START, "the wait after a seek");
        a.took(true);
        assert_eq!(a.depth.get(), 2 * DEPTH_START);
    }
}
