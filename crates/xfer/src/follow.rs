//! `push --follow`: send a scan while it is still being recorded.
//!
//! The recorder marks a scan complete in its metadata (`<scan>.vlbiflow.json`, `complete: true`, written
//! only after every block is flushed; see `vlbiflow-scan`). Until then the client sends, in rounds, what
//! is on disk: the gathered prefix of complete blocks with consecutive numbers
//! ([`scan_source_growing`]), each round a push with [`Options::partial`] set, so the daemon verifies and
//! syncs every chunk but keeps the file as `.part`. The next round is an ordinary resume: the daemon
//! re-hashes the complete chunks it holds (at disk speed), the client skips those that match and sends the
//! rest, the chunk that was incomplete included. When the metadata says complete, a last ordinary push of
//! the whole scan (read strictly, as without `--follow`) sends what is left and commits the file under its
//! final name: the result is the same file, verified the same way, as a push after the recording.
//!
//! `pull --follow` runs the same rounds from the other end ([`pull_follow`]): the client asks the daemon
//! what it holds (`ls`, which lists a scan still recording by its complete-block prefix) and pulls that
//! prefix with [`Options::partial`]; the daemon then reads the scan as it grows.
//!
//! Cost: each round re-hashes what the daemon already holds at both ends (disk speed), so a round starts
//! only when at least `min_new` bytes and a quarter of what was sent before are new: the re-hashing stays
//! below four times the scan, and at the end at most a fifth of it (plus what the recorder adds during a
//! round) is left to send. (Growing files in the protocol itself would remove both costs; not done.)

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use vlbiflow_xfer_proto::RateConfig;

use crate::client::{self, ClientConfig};
use crate::error::XferError;
use crate::progress::Progress;
use crate::scan::{scan_source, scan_source_growing, Layout};
use crate::send::SendOutcome;
use crate::session::Options;

/// How to follow a growing scan.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// How often to look at the scan on disk.
    pub poll: Duration,
    /// Bytes that must be new on disk before a round is sent (and at least a quarter of what was sent
    /// before, so that the re-hashing of what the daemon holds stays within four times the scan).
    pub min_new: u64,
    /// Give up when the scan neither grows nor is marked complete for this long (a recorder that died).
    pub stall_timeout: Duration,
}

impl Default for FollowConfig {
    /// Look every 0.5 s, send when 256 MiB (and a quarter more) are new, give up after 60 s without growth.
    fn default() -> Self {
        FollowConfig {
            poll: Duration::from_millis(500),
            min_new: 256 << 20,
            stall_timeout: Duration::from_secs(60),
        }
    }
}

/// What happened, for the summary.
#[derive(Debug)]
pub struct FollowOutcome {
    /// The last round's outcome (the commit report of the whole scan).
    pub last: SendOutcome,
    /// Rounds sent while the scan was being recorded (the last, complete one not counted).
    pub partial_rounds: u32,
    /// Payload bytes sent over all rounds, retransmissions included.
    pub bytes_sent: u64,
    /// Datagrams over all rounds.
    pub datagrams: u64,
    /// Retransmitted datagrams over all rounds.
    pub retransmits: u64,
    /// Wall time from the first round's start to the commit.
    pub seconds: f64,
}

/// What `push --follow` sends: scan `scan` on `disks`, into `dest`, with `options` at `rate`.
pub struct FollowRequest<'a> {
    pub scan: &'a str,
    pub disks: &'a [String],
    pub dest: &'a str,
    pub options: Options,
    pub rate: RateConfig,
}

/// A completed `push --follow` as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FollowSummary<'a> {
    /// Always `true` (a failed transfer prints the error instead).
    pub verified: bool,
    pub files: &'a [crate::session::Committed],
    pub bytes_total: u64,
    pub bytes_sent: u64,
    pub datagrams: u64,
    pub retransmits: u64,
    pub rounds_while_recording: u32,
    pub seconds: f64,
}

impl FollowOutcome {
    /// What `--json` prints of it.
    pub fn summary(&self) -> FollowSummary<'_> {
        FollowSummary {
            verified: true,
            files: &self.last.committed,
            bytes_total: self.last.committed.iter().map(|c| c.size).sum(),
            bytes_sent: self.bytes_sent,
            datagrams: self.datagrams,
            retransmits: self.retransmits,
            rounds_while_recording: self.partial_rounds,
            seconds: self.seconds,
        }
    }
}

/// What is on disk of a followed scan now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    /// Bytes a round would send now (the gathered complete-block prefix).
    pub bytes: u64,
    /// The recorder has marked the scan complete: the next round is the last, strict one.
    pub complete: bool,
}

/// What one round moved.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundCounts {
    pub bytes: u64,
    pub datagrams: u64,
    pub retransmits: u64,
}

/// The two sides of following a scan, for [`follow_rounds`]: looking at the scan (here for a push, at
/// the daemon for a pull) and sending one round of it.
pub trait Follower {
    /// What the last round returns.
    type Out;
    /// What is there now.
    fn probe(&mut self) -> Result<Growth, XferError>;
    /// One round: a partial one of what the last probe saw (kept as `.part` at the receiver), or with
    /// `last` the whole scan, read strictly and committed.
    fn round(&mut self, last: bool) -> Result<(Self::Out, RoundCounts), XferError>;
}

/// A followed scan's end: the last round's outcome and the counts of all rounds.
#[derive(Debug)]
pub struct FollowRun<T> {
    pub last: T,
    /// Rounds sent while the scan was being recorded (the last, complete one not counted).
    pub partial_rounds: u32,
    /// Payload bytes sent over all rounds, retransmissions included.
    pub bytes_sent: u64,
    pub datagrams: u64,
    pub retransmits: u64,
    /// Wall time from the first round's start to the commit.
    pub seconds: f64,
}

/// Follows scan `scan` through `f`: partial rounds while it is recorded (each when enough is new), a
/// last strict round once it is marked complete; fails when it neither grows nor completes for
/// [`FollowConfig::stall_timeout`]. `on_round` hears of each round (bytes on disk now, whether last).
pub fn follow_rounds<F: Follower>(
    scan: &str,
    f: &mut F,
    follow: &FollowConfig,
    stop: &AtomicBool,
    on_round: &dyn Fn(u64, bool),
) -> Result<FollowRun<F::Out>, XferError> {
    let t0 = Instant::now();
    let mut sum = RoundCounts::default();
    let mut rounds = 0u32;
    let mut sent_upto = 0u64;
    let mut last_growth = (Instant::now(), 0u64);
    loop {
        if stop.load(Relaxed) {
            return Err(XferError::Failed("stopped".into()));
        }
        let g = f.probe()?;
        if g.complete {
            on_round(g.bytes, true);
            let (out, c) = f.round(true)?;
            return Ok(FollowRun {
                last: out,
                partial_rounds: rounds,
                bytes_sent: sum.bytes + c.bytes,
                datagrams: sum.datagrams + c.datagrams,
                retransmits: sum.retransmits + c.retransmits,
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
        if g.bytes != last_growth.1 {
            last_growth = (Instant::now(), g.bytes);
        } else if last_growth.0.elapsed() > follow.stall_timeout {
            return Err(XferError::Unfinished(format!(
                "scan {scan} has not grown for {:.0} s and its recorder has not marked it complete (did the recorder die?); what was sent is kept as .part at the destination, rerun without --follow to send it as it is",
                follow.stall_timeout.as_secs_f64()
            )));
        }
        if g.bytes >= sent_upto + follow.min_new.max(sent_upto / 4) {
            on_round(g.bytes, false);
            let (_, c) = f.round(false)?;
            rounds += 1;
            sum.bytes += c.bytes;
            sum.datagrams += c.datagrams;
            sum.retransmits += c.retransmits;
            sent_upto = g.bytes;
            continue;
        }
        std::thread::sleep(follow.poll);
    }
}

/// `push --follow`: the scan is on this host's disks.
struct PushFollower<'a> {
    cfg: &'a ClientConfig,
    req: FollowRequest<'a>,
    progress: &'a Progress,
    stop: &'a AtomicBool,
    seen: Option<crate::source::SourceSet>,
}

impl Follower for PushFollower<'_> {
    type Out = SendOutcome;

    fn probe(&mut self) -> Result<Growth, XferError> {
        // metadata first: a scan marked complete is read strictly, as without --follow
        let (set, info) = scan_source_growing(self.req.scan, self.req.disks)?;
        let g = Growth {
            bytes: set.total_bytes(),
            complete: info.complete == Some(true),
        };
        self.seen = Some(set);
        Ok(g)
    }

    fn round(&mut self, last: bool) -> Result<(SendOutcome, RoundCounts), XferError> {
        let r = &self.req;
        let (set, mut o) = if last {
            (scan_source(r.scan, r.disks, Layout::Gather)?.0, r.options.clone())
        } else {
            let mut o = r.options.clone();
            o.partial = true;
            (self.seen.take().expect("probed before the round"), o)
        };
        o.partial = !last;
        let out = client::push(self.cfg, set, r.dest, o, r.rate, self.progress, self.stop)?;
        let c = RoundCounts {
            bytes: out.stats.bytes,
            datagrams: out.stats.datagrams,
            retransmits: out.stats.retransmits,
        };
        Ok((out, c))
    }
}

/// Pushes scan `scan` on `disks` into `dest` as one gathered file while it is recorded; returns when the
/// recorder has marked it complete and the whole file is verified and committed. `on_round` is told about
/// each round (bytes on disk now, whether it is the last).
pub fn push_follow(
    cfg: &ClientConfig,
    req: FollowRequest<'_>,
    follow: &FollowConfig,
    progress: &Progress,
    stop: &AtomicBool,
    on_round: &dyn Fn(u64, bool),
) -> Result<FollowOutcome, XferError> {
    let scan = req.scan;
    let mut f = PushFollower {
        cfg,
        req,
        progress,
        stop,
        seen: None,
    };
    let run = follow_rounds(scan, &mut f, follow, stop, on_round)?;
    Ok(FollowOutcome {
        partial_rounds: run.partial_rounds,
        bytes_sent: run.bytes_sent,
        datagrams: run.datagrams,
        retransmits: run.retransmits,
        seconds: run.seconds,
        last: run.last,
    })
}

/// `pull --follow`: the scan is on the daemon's disks; it is looked at with `ls`.
struct PullFollower<'a> {
    cfg: &'a ClientConfig,
    scan: &'a crate::session::ScanRequest,
    into: &'a std::path::Path,
    options: Options,
    progress: &'a Progress,
    stop: &'a AtomicBool,
}

impl Follower for PullFollower<'_> {
    type Out = crate::recv::RecvOutcome;

    fn probe(&mut self) -> Result<Growth, XferError> {
        let found = client::ls(self.cfg, &self.scan.disks, Some(&self.scan.name))?;
        let e = found
            .into_iter()
            .find(|e| e.name == self.scan.name)
            .ok_or_else(|| XferError::Refused(format!("the daemon has no scan {}", self.scan.name)))?;
        if let Some(err) = e.error {
            return Err(XferError::Refused(format!("scan {}: {err}", self.scan.name)));
        }
        Ok(Growth {
            bytes: e.bytes,
            // a scan of another recorder (no metadata) is taken as it is
            complete: e.complete != Some(false),
        })
    }

    fn round(&mut self, last: bool) -> Result<(crate::recv::RecvOutcome, RoundCounts), XferError> {
        let mut o = self.options.clone();
        o.partial = !last;
        let out = client::pull(
            self.cfg,
            &[],
            Some(self.scan),
            self.into,
            o,
            self.progress,
            self.stop,
        )?;
        // the receiver counts the payload bytes that arrived (duplicates included) in its progress
        let c = RoundCounts {
            bytes: Progress::get(&self.progress.bytes_moved),
            datagrams: out.stats.delivered + out.stats.duplicates,
            retransmits: out.stats.duplicates,
        };
        Ok((out, c))
    }
}

/// Pulls scan `scan` (gather layout) from the daemon of `cfg` into `into` while it is still recorded
/// there: partial rounds of the complete-block prefix the daemon lists, then a strict pull once its
/// recorder has marked it complete. Returns when the whole file is verified and committed here.
pub fn pull_follow(
    cfg: &ClientConfig,
    scan: &crate::session::ScanRequest,
    into: &std::path::Path,
    options: Options,
    follow: &FollowConfig,
    (progress, stop): (&Progress, &AtomicBool),
    on_round: &dyn Fn(u64, bool),
) -> Result<FollowRun<crate::recv::RecvOutcome>, XferError> {
    if scan.layout != "gather" {
        return Err(XferError::Usage(format!(
            "--follow fetches one gathered file per scan: --layout gather (not {})",
            scan.layout
        )));
    }
    let mut f = PullFollower {
        cfg,
        scan,
        into,
        options,
        progress,
        stop,
    };
    follow_rounds(&scan.name, &mut f, follow, stop, on_round)
}
