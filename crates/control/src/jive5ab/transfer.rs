//! `disk2file` (jive5ab 3.1.0 `src/mk5command/disk2file_vbs.cc`): the `scan_set` range of a recording
//! copied to a file in the background, polled with `disk2file?`, aborted with `reset = abort`. The frames
//! come from the recording as `vlbiflow gather` reads them (block order, headers stripped); the range
//! counts bytes of that stream.
//!
//! Sans-IO here: the command hands the daemon a [`Disk2FileJob`] to run ([`run_disk2file`], blocking) and
//! keeps its shared progress for the queries.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::controller::Controller;
use crate::proto::{ReturnCode, Statement};

use super::reply::J5Reply;
use super::setup::in_progress;
use super::{Jive5ab, Step};

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// The progress of a copy, shared by the command (queries) and the job (writer).
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of the range written so far.
    pub written: AtomicU64,
    state: AtomicU8,
    /// Set to stop the copy (`reset = abort`, `disk2net = disconnect`).
    pub(super) abort: AtomicBool,
}

/// One `disk2file` as the runtime remembers it.
#[derive(Debug, Clone)]
pub struct Disk2File {
    pub scan: String,
    pub file: String,
    pub start: u64,
    /// 0: to the end of the recording.
    pub end: u64,
    pub mode: String,
    pub progress: Arc<Progress>,
}

impl Disk2File {
    /// Still copying.
    pub fn active(&self) -> bool {
        self.progress.state.load(Ordering::Acquire) == RUNNING
    }
}

/// A copy for the daemon to run.
#[derive(Debug, Clone)]
pub struct Disk2FileJob {
    pub what: Disk2File,
    /// Where the recording's files are.
    pub disks: Vec<PathBuf>,
}

impl Jive5ab {
    /// `disk2file = [<file>] : [<start>] : [<end>|+<len>] : [n|w|a] ;`, `disk2file? ;`.
    pub(super) fn disk2file(&mut self, rt: &str, st: &Statement, ctl: &Controller) -> Step {
        let kw = st.keyword.as_str();
        let r = self.rt_mut(rt);
        if st.query {
            let f = match &r.disk2file {
                Some(d) if d.active() => vec![
                    "active".into(),
                    d.file.clone(),
                    d.start.to_string(),
                    (d.start + d.progress.written.load(Ordering::Acquire)).to_string(),
                    d.end.to_string(),
                    d.mode.clone(),
                ],
                Some(d) => vec!["inactive".into(), d.file.clone()],
                None => vec!["inactive".into()],
            };
            return Step::Now(J5Reply::new(kw, true, ReturnCode::Done, f));
        }
        let err = |code, m: String| Step::Now(J5Reply::msg(kw, false, code, m));
        if r.disk2file.as_ref().is_some_and(Disk2File::active) {
            return err(ReturnCode::Conflict, "not whilst disk2file is in progress".into());
        }
        if r.disk2net.as_ref().is_some_and(|d| d.active()) {
            return err(ReturnCode::Conflict, "Already doing disk2net".into());
        }
        if r.net2file.as_ref().is_some_and(|n| n.active()) {
            return err(ReturnCode::Conflict, "Already doing net2file".into());
        }
        if let Some(reply) = in_progress(st, ctl) {
            return Step::Now(reply);
        }
        let Some(sel) = r.scan.clone() else {
            return err(ReturnCode::Conflict, "no scan was set using scan_set=".into());
        };
        let file = match st.arg(0) {
            "" => format!("{}.m5a", sel.name),
            f => f.to_owned(),
        };
        let num = |a: &str, what: &str| -> Result<Option<u64>, String> {
            if a.is_empty() {
                Ok(None)
            } else {
                a.parse()
                    .map(Some)
                    .map_err(|_| format!("{what} '{a}' is not a byte number"))
            }
        };
        let start = match num(st.arg(1), "start") {
            Ok(v) => v.unwrap_or(sel.start),
            Err(e) => return err(ReturnCode::Parameter, e),
        };
        let end = match st.arg(2) {
            e if e.starts_with('+') => match num(&e[1..], "length") {
                Ok(v) => start.saturating_add(v.unwrap_or(0)),
                Err(e) => return err(ReturnCode::Parameter, e),
            },
            e => match num(e, "end") {
                Ok(v) => v.unwrap_or(sel.end),
                Err(e) => return err(ReturnCode::Parameter, e),
            },
        };
        if end != 0 && end <= start {
            return err(
                ReturnCode::Parameter,
                format!("end {end} is not after start {start}"),
            );
        }
        let mode = match st.arg(3) {
            "" => "n",
            m @ ("n" | "w" | "a") => m,
            m => return err(ReturnCode::Parameter, format!("mode '{m}' is not n, w or a")),
        };
        let what = Disk2File {
            scan: sel.name,
            file,
            start,
            end,
            mode: mode.into(),
            progress: Arc::new(Progress::default()),
        };
        r.disk2file = Some(what.clone());
        Step::Disk2File(
            Disk2FileJob {
                what,
                disks: ctl.open_disks().0,
            },
            J5Reply::new(kw, false, ReturnCode::Initiated, vec![]),
        )
    }

    /// `reset = abort ;` for a running `disk2file` or `disk2net`: true if one was asked to stop.
    pub(super) fn abort_disk2file(&mut self, rt: &str) -> bool {
        let r = self.rt_mut(rt);
        let mut any = false;
        if let Some(d) = r.disk2net.as_ref().filter(|d| d.active()) {
            d.stop();
            any = true;
        }
        if let Some(d) = r.disk2file.as_ref().filter(|d| d.active()) {
            d.progress.abort.store(true, Ordering::Release);
            any = true;
        }
        any
    }

    /// A `disk2file` runs in any runtime.
    pub(super) fn disk2file_running(&self) -> bool {
        self.runtimes
            .values()
            .any(|r| r.disk2file.as_ref().is_some_and(Disk2File::active))
    }
}

/// Writes the bytes of `[start, end)` of what is written through it to `out` (end 0: no end); stops the
/// gather with an error once past the end ([`STOP`]) or asked to abort ([`ABORTED`]). Used by
/// `disk2file` and `disk2net`.
pub(super) struct RangeWriter<W> {
    pub(super) out: W,
    pub(super) pos: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) progress: Arc<Progress>,
}

/// The error a [`RangeWriter`] stops the gather with at the end of its range.
pub(super) const STOP: &str = "transfer range complete";
/// The error a [`RangeWriter`] stops the gather with when asked to abort.
pub(super) const ABORTED: &str = "aborted";

impl<W: Write> Write for RangeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.progress.abort.load(Ordering::Acquire) {
            return Err(io::Error::other(ABORTED));
        }
        let (from, to) = (self.pos, self.pos + buf.len() as u64);
        self.pos = to;
        let lo = self.start.max(from);
        let hi = if self.end == 0 { to } else { self.end.min(to) };
        if hi > lo {
            self.out
                .write_all(&buf[(lo - from) as usize..(hi - from) as usize])?;
            self.progress.written.fetch_add(hi - lo, Ordering::AcqRel);
        }
        if self.end != 0 && to >= self.end {
            return Err(io::Error::other(STOP));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Runs a copy to its end (blocking): locates the recording on the job's disks and writes the range.
pub fn run_disk2file(job: &Disk2FileJob) -> Result<(), String> {
    let d = &job.what;
    let result = (|| -> Result<(), String> {
        let rec = vlbiflow_reader::source::locate_scan(&d.scan, &job.disks).map_err(|e| e.to_string())?;
        let mut o = OpenOptions::new();
        match d.mode.as_str() {
            "a" => o.append(true).create(true),
            "w" => o.write(true).create(true).truncate(true),
            _ => o.write(true).create_new(true),
        };
        let file = o.open(&d.file).map_err(|e| format!("{}: {e}", d.file))?;
        let mut w = RangeWriter {
            out: io::BufWriter::new(file),
            pos: 0,
            start: d.start,
            end: d.end,
            progress: d.progress.clone(),
        };
        let res = vlbiflow_reader::gather::gather(&rec, &mut w, |_, _| {});
        match res {
            Ok(_) => {}
            Err(e) if e.to_string() == STOP => {}
            Err(e) => return Err(format!("{}: {e}", d.file)),
        }
        w.out.flush().map_err(|e| format!("{}: {e}", d.file))
    })();
    let state = if result.is_ok() { DONE } else { FAILED };
    d.progress.state.store(state, Ordering::Release);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_writer_keeps_the_range_and_stops_after_it() {
        let progress = Arc::new(Progress::default());
        let mut w = RangeWriter {
            out: Vec::new(),
            pos: 0,
            start: 3,
            end: 8,
            progress: progress.clone(),
        };
        assert_eq!(w.write(b"0123").unwrap(), 4);
        assert_eq!(w.write(b"45").unwrap(), 2);
        assert_eq!(w.write(b"6789").unwrap_err().to_string(), STOP);
        assert_eq!(w.out, b"34567");
        assert_eq!(progress.written.load(Ordering::Acquire), 5);
        let mut all = RangeWriter {
            out: Vec::new(),
            pos: 0,
            start: 0,
            end: 0,
            progress: progress.clone(),
        };
        all.write_all(b"abc").unwrap();
        assert_eq!(all.out, b"abc");
        progress.abort.store(true, Ordering::Release);
        assert!(all.write(b"d").is_err());
    }
}
